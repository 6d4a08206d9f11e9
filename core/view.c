/* core/view.c: the views the core itself makes: expand (and the broadcast shape behind
 * it), as_strided, detach and view(dtype), with their gradients. Each is a new tensor
 * header over the same storage (and so the same version counter); no data moves. The
 * other view ops (view, reshape, transpose, narrow, ...) are the op layer's
 * (ops/views.c). Shapes, strides and error texts follow ATen's TensorShape.cpp, node names
 * and backward formulas its derivatives.yaml. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* The broadcast shape of two shapes (expand and copy_ broadcast by it). */
int weft_broadcast_shapes(int ndim_a, const int64_t *a, int ndim_b, const int64_t *b,
                          int *ndim_out, int64_t *out)
{
    int nd = ndim_a > ndim_b ? ndim_a : ndim_b;
    int64_t result[WEFT_MAX_DIMS];
    for (int i = 0; i < nd; i++) {
        int ia = ndim_a - nd + i, ib = ndim_b - nd + i;
        int64_t sa = ia >= 0 ? a[ia] : 1, sb = ib >= 0 ? b[ib] : 1;
        if (sa != sb && sa != 1 && sb != 1)
            return weft_error_set(WEFT_ERR_RUNTIME,
                                  "The size of tensor a (%lld) must match the size of tensor b "
                                  "(%lld) at non-singleton dimension %d",
                                  (long long)sa, (long long)sb, i);
        result[i] = sa == 1 ? sb : sa;
    }
    for (int i = 0; i < nd; i++)
        out[i] = result[i];
    *ndim_out = nd;
    return 0;
}

/* ATen's inferExpandGeometry: new leading dims and size-1 dims get stride 0 when they
 * grow; -1 keeps the existing size. */
weft_tensor *weft_fwd_expand(weft_tensor *t, int ndim, const int64_t *shape)
{
    if (!t || weft_require_strided(t, "expand") != 0)
        return NULL;
    if (weft_check_ndim(ndim) != 0)
        return NULL;
    char tbuf[64], a[200], b[200];
    if (ndim < t->ndim) {
        weft_error_set(WEFT_ERR_RUNTIME,
                       "expand(%s{%s}, size=%s): the number of sizes provided (%d) must be "
                       "greater or equal to the number of dimensions in the tensor (%d)",
                       weft_torch_type_str(t, tbuf, sizeof tbuf),
                       weft_shape_str(t->ndim, t->shape, a, sizeof a),
                       weft_shape_str(ndim, shape, b, sizeof b), ndim, t->ndim);
        return NULL;
    }
    int64_t size[WEFT_MAX_DIMS], stride[WEFT_MAX_DIMS];
    for (int i = ndim - 1; i >= 0; i--) {
        int dim = t->ndim - ndim + i;
        int64_t cur = dim >= 0 ? t->shape[dim] : 1;
        int64_t st = dim >= 0 ? t->stride[dim] : (i == ndim - 1 ? 1 : size[i + 1] * stride[i + 1]);
        int64_t target = shape[i];
        if (target == -1) {
            if (dim < 0) {
                weft_error_set(WEFT_ERR_RUNTIME,
                               "The expanded size of the tensor (-1) isn't allowed in a leading, "
                               "non-existing dimension %d",
                               i);
                return NULL;
            }
            target = cur;
        }
        if (target < 0) {
            weft_error_set(WEFT_ERR_RUNTIME,
                           "Trying to create tensor with negative dimension %lld: %s",
                           (long long)target, weft_shape_str(ndim, shape, a, sizeof a));
            return NULL;
        }
        if (cur != target) {
            if (cur != 1) {
                weft_error_set(WEFT_ERR_RUNTIME,
                               "The expanded size of the tensor (%lld) must match the existing "
                               "size (%lld) at non-singleton dimension %d.  Target sizes: %s.  "
                               "Tensor sizes: %s",
                               (long long)target, (long long)cur, i,
                               weft_shape_str(ndim, shape, a, sizeof a),
                               weft_shape_str(t->ndim, t->shape, b, sizeof b));
                return NULL;
            }
            cur = target;
            st = 0;
        }
        size[i] = cur;
        stride[i] = st;
    }
    return weft_tensor_alias(t, ndim, size, stride, t->offset);
}

weft_tensor *weft_expand_as(weft_tensor *t, const weft_tensor *other)
{
    if (!t || !other)
        return NULL;
    return weft_expand(t, other->ndim, other->shape);
}

/* A view of t without the dims whose bit is set in `drop` (all of them of size 1). */
/* ATen's computeStorageNbytes: bytes from element 0 to one past the farthest element. */
static int64_t storage_extent(int ndim, const int64_t *shape, const int64_t *stride,
                              int64_t itemsize)
{
    int64_t extent = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] == 0)
            return 0;
        extent += (shape[i] - 1) * stride[i];
    }
    return extent * itemsize;
}

static weft_tensor *weft_fwd_as_strided(weft_tensor *t, int ndim, const int64_t *shape,
                             const int64_t *stride, int64_t offset)
{
    if (!t || weft_require_strided(t, "as_strided") != 0)
        return NULL;
    if (weft_check_shape(ndim, shape) != 0)
        return NULL;
    char a[200], b[200];
    for (int i = 0; i < ndim; i++)
        if (stride[i] < 0) {
            weft_error_set(WEFT_ERR_RUNTIME,
                           "as_strided: Negative strides are not supported at the moment, got "
                           "strides: %s",
                           weft_shape_str(ndim, stride, a, sizeof a));
            return NULL;
        }
    if (offset < 0) {
        weft_error_set(WEFT_ERR_RUNTIME, "Tensor: invalid storage offset %lld", (long long)offset);
        return NULL;
    }
    int64_t itemsize = (int64_t)weft_dtype_size(t->dtype);
    int64_t need = storage_extent(ndim, shape, stride, itemsize);
    if (need != 0) {
        need += offset * itemsize;
        if ((uint64_t)need > t->storage->nbytes) {
            weft_error_set(WEFT_ERR_RUNTIME,
                           "setStorage: sizes %s, strides %s, storage offset %lld, and itemsize "
                           "%lld requiring a storage size of %lld are out of bounds for storage "
                           "of size %zu",
                           weft_shape_str(ndim, shape, a, sizeof a),
                           weft_shape_str(ndim, stride, b, sizeof b), (long long)offset,
                           (long long)itemsize, (long long)need, t->storage->nbytes);
            return NULL;
        }
    }
    return weft_tensor_alias(t, ndim, shape, stride, offset);
}

weft_tensor *weft_detach(weft_tensor *t)
{
    if (!t)
        return NULL;
    if (weft_require_strided(t, "detach") != 0)
        return NULL;
    /* A fresh header carries no autograd metadata; the storage (and version) is shared. */
    return weft_tensor_alias(t, t->ndim, t->shape, t->stride, t->offset);
}

/* PyTorch's Tensor.view(dtype): same itemsize reinterprets in place; a different itemsize
 * rescales the last dim, which must be contiguous. */
weft_tensor *weft_view_dtype(weft_tensor *t, enum weft_dtype dtype)
{
    if (!t || weft_require_strided(t, "view") != 0)
        return NULL;
    if (!weft_dtype_valid(dtype)) {
        weft_error_set(WEFT_ERR_TYPE, "invalid dtype %d", (int)dtype);
        return NULL;
    }
    int64_t old_size = (int64_t)weft_dtype_size(t->dtype), new_size = (int64_t)weft_dtype_size(dtype);
    const char *from = weft_dtype_torch_name(t->dtype), *to = weft_dtype_torch_name(dtype);
    int64_t shape[WEFT_MAX_DIMS], stride[WEFT_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    memcpy(stride, t->stride, sizeof stride);
    int64_t offset = t->offset;
    if (old_size != new_size) {
        int last = t->ndim - 1;
        if (t->ndim == 0) {
            weft_error_set(WEFT_ERR_RUNTIME,
                           "self.dim() cannot be 0 to view %s as %s (different element sizes)",
                           from, to);
            return NULL;
        }
        if (t->stride[last] != 1) {
            weft_error_set(WEFT_ERR_RUNTIME,
                           "self.stride(-1) must be 1 to view %s as %s (different element "
                           "sizes), but got %lld",
                           from, to, (long long)t->stride[last]);
            return NULL;
        }
        if (new_size > old_size) {
            int64_t ratio = new_size / old_size;
            if (t->shape[last] % ratio != 0) {
                weft_error_set(WEFT_ERR_RUNTIME,
                               "self.size(-1) must be divisible by %lld to view %s as %s "
                               "(different element sizes), but got %lld",
                               (long long)ratio, from, to, (long long)t->shape[last]);
                return NULL;
            }
            if (offset % ratio != 0) {
                weft_error_set(WEFT_ERR_RUNTIME,
                               "self.storage_offset() must be divisible by %lld to view %s as "
                               "%s (different element sizes), but got %lld",
                               (long long)ratio, from, to, (long long)offset);
                return NULL;
            }
            for (int i = 0; i < last; i++)
                if (t->stride[i] % ratio != 0) {
                    weft_error_set(WEFT_ERR_RUNTIME,
                                   "self.stride(%d) must be divisible by %lld to view %s as %s "
                                   "(different element sizes), but got %lld",
                                   i, (long long)ratio, from, to, (long long)t->stride[i]);
                    return NULL;
                }
            for (int i = 0; i < last; i++)
                stride[i] /= ratio;
            shape[last] /= ratio;
            offset /= ratio;
        } else {
            int64_t ratio = old_size / new_size;
            for (int i = 0; i < last; i++)
                stride[i] *= ratio;
            shape[last] *= ratio;
            offset *= ratio;
        }
    }
    weft_tensor *v = weft_tensor_make(t->storage, t->ndim, shape, stride, offset, dtype);
    if (v)
        v->flags |= WEFT_TENSOR_VIEW;
    return weft_tensor_finish(v);
}

/* t's elements in row-major order viewed with shape (same numel): t itself when it is
 * contiguous, else a contiguous copy. */
weft_tensor *weft_reshape_contiguous(weft_tensor *t, int ndim, const int64_t *shape)
{
    weft_tensor *c = t ? weft_contiguous(t) : NULL;
    int64_t stride[WEFT_MAX_DIMS];
    if (!c || weft_contiguous_strides(ndim, shape, stride) != weft_tensor_numel(c)) {
        if (c)
            weft_error_set(WEFT_ERR_RUNTIME, "internal: reshape of %lld elements to another count",
                           (long long)weft_tensor_numel(c));
        return NULL;
    }
    return weft_tensor_alias(c, ndim, shape, stride, c->offset);
}

/* ---- gradients ---------------------------------------------------------------------- */

/* No two elements of (shape, stride) share a position: sorted by stride, each dim steps
 * past everything the faster dims reach. */
static bool non_overlapping(int ndim, const int64_t *shape, const int64_t *stride)
{
    int perm[WEFT_MAX_DIMS], n = 0;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] == 0)
            return true;
        if (shape[d] > 1)
            perm[n++] = d;
    }
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && stride[perm[j]] < stride[perm[j - 1]]; j--) {
            int tmp = perm[j];
            perm[j] = perm[j - 1];
            perm[j - 1] = tmp;
        }
    int64_t reach = 0; /* the farthest position the faster dims reach */
    for (int i = 0; i < n; i++) {
        int d = perm[i];
        if (stride[d] <= reach)
            return false;
        reach += (shape[d] - 1) * stride[d];
    }
    return true;
}

/* One past the farthest position (shape, stride) reaches from its offset. */
static int64_t extent(int ndim, const int64_t *shape, const int64_t *stride)
{
    int64_t e = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] == 0)
            return 0;
        e += (shape[d] - 1) * stride[d];
    }
    return e;
}

weft_tensor *weft_view_grad_to_base(weft_tensor *g, const int64_t *stride, int64_t rel_offset,
                                    int base_ndim, const int64_t *base_shape,
                                    const int64_t *base_stride)
{
    int nd = g->ndim;
    int64_t n = weft_tensor_numel(g), base_extent = extent(base_ndim, base_shape, base_stride);
    int64_t view_extent = n ? rel_offset + extent(nd, g->shape, stride) : 0;
    weft_tensor tmp_base = {.ndim = base_ndim};
    memcpy(tmp_base.shape, base_shape, (size_t)base_ndim * sizeof *base_shape);
    memcpy(tmp_base.stride, base_stride, (size_t)base_ndim * sizeof *base_stride);
    /* The common case, a view inside a dense base that reads each element once: zeros laid
     * out as the base, the gradient copied into the view's part. */
    if (weft_is_non_overlapping_and_dense(&tmp_base) && rel_offset >= 0 &&
        view_extent <= base_extent && non_overlapping(nd, g->shape, stride)) {
        int64_t numel = weft_shape_numel(base_ndim, base_shape);
        struct weft_storage *s = numel < 0 ? NULL
                                           : weft_storage_new(g->device, (size_t)numel * weft_dtype_size(g->dtype));
        if (!s)
            return NULL;
        weft_tensor *buf = weft_tensor_finish(
            weft_tensor_make(s, base_ndim, base_shape, base_stride, 0, g->dtype));
        weft_storage_release(s);
        if (!buf || weft_copy_(buf, weft_zeros(0, NULL, g->dtype, g->device)) != 0)
            return NULL;
        weft_tensor *part = n ? weft_tensor_alias(buf, nd, g->shape, stride, rel_offset) : NULL;
        return !n || (part && weft_copy_(part, g) == 0) ? buf : NULL;
    }
    /* Anything else: every element of g adds into the position it read, in a buffer
     * spanning both, and the base's elements are read back from it. */
    int64_t span = base_extent > view_extent ? base_extent : view_extent;
    int64_t *pos = malloc(sizeof *pos * (size_t)(n ? n : 1));
    if (!pos) {
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory in a view's backward");
        return NULL;
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t rest = i, p = rel_offset;
        for (int d = nd - 1; d >= 0; d--) {
            p += rest % g->shape[d] * stride[d];
            rest /= g->shape[d];
        }
        pos[i] = p;
    }
    weft_tensor *index = weft_from_host(pos, 1, &n, WEFT_I64, g->device);
    free(pos);
    weft_tensor *flat = weft_grad_scatter_add(weft_zeros(1, &span, g->dtype, g->device), 0, index,
                                              weft_reshape_contiguous(g, 1, &n));
    return flat ? weft_tensor_alias(flat, base_ndim, base_shape, base_stride, flat->offset) : NULL;
}

/* Gradient of as_strided: every output element adds into the storage position it read,
 * measured from the input's own offset, the input being contiguous. ints[1] ndim,
 * ints[2..] shape (ndim), then strides (ndim), then the offset relative to the input. */
static weft_tensor *as_strided_grad(struct weft_node *node, weft_tensor *g)
{
    int64_t *ints = weft_node_ints(node);
    int nd = (int)ints[1];
    int64_t in_stride[WEFT_MAX_DIMS];
    int in_nd = weft_node_input_ndim(node, 0);
    const int64_t *in_shape = weft_node_input_shape(node, 0);
    weft_contiguous_strides(in_nd, in_shape, in_stride);
    return weft_view_grad_to_base(g, ints + 2 + nd, ints[2 + 2 * nd], in_nd, in_shape, in_stride);
}

/* expand: the gradient as it comes; the engine sums it over the broadcast dims. */
static int expand_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                           weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0];
    if (g && !(grad_inputs[0] = weft_autorelease(weft_tensor_retain(g))))
        return weft_error_code();
    return 0;
}

static int as_strided_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                               weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0];
    if (g && !(grad_inputs[0] = as_strided_grad(node, g)))
        return weft_error_code();
    return 0;
}

weft_tensor *weft_expand(weft_tensor *t, int ndim, const int64_t *shape)
{
    bool rec = weft_autograd_needed(1, &t);
    weft_tensor *out = WEFT_NO_GRAD(rec, weft_fwd_expand(t, ndim, shape));
    if (!rec)
        return weft_autograd_view_untracked_inline(t, out);
    struct weft_node *node = weft_node_create("ExpandBackward0", expand_backward, 1, &t, 0);
    return weft_node_finish_view(node, t, out);
}

weft_tensor *weft_as_strided(weft_tensor *t, int ndim, const int64_t *shape, const int64_t *stride,
                             int64_t offset)
{
    bool rec = weft_autograd_needed(1, &t);
    if (rec && !weft_tensor_is_contiguous(t)) {
        weft_error_set(WEFT_ERR_NOT_IMPLEMENTED,
                       "as_strided of a non-contiguous tensor that requires grad is not "
                       "supported; call contiguous() first");
        return NULL;
    }
    if (rec && ndim > 6) {
        weft_error_set(WEFT_ERR_NOT_IMPLEMENTED,
                       "as_strided backward supports at most 6 dims, got %d", ndim);
        return NULL;
    }
    weft_tensor *out = WEFT_NO_GRAD(rec, weft_fwd_as_strided(t, ndim, shape, stride, offset));
    if (!rec)
        return weft_autograd_view_untracked_inline(t, out);
    struct weft_node *node = weft_node_create("AsStridedBackward0", as_strided_backward, 1, &t, 0);
    if (node && out) {
        int64_t *ints = weft_node_ints(node);
        ints[1] = ndim;
        memcpy(ints + 2, shape, (size_t)ndim * sizeof *shape);
        memcpy(ints + 2 + ndim, stride, (size_t)ndim * sizeof *stride);
        ints[2 + 2 * ndim] = offset - t->offset;
    }
    return weft_node_finish_view(node, t, out);
}
