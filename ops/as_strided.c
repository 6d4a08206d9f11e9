/* ops/as_strided.c: as_strided, the view with any geometry over its input's storage, and
 * its gradient (PyTorch's as_strided_backward): the gradient of a view added into its
 * base where the view read. The autograd engine's regenerated views (AsStridedBackward0,
 * after an in-place op on their base) take the same gradient through the hook this
 * library installs (op_table.c). Shapes, strides and error texts follow ATen's
 * TensorShape.cpp, the node name and formula its derivatives.yaml. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

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

static weft_tensor *fwd_as_strided(weft_tensor *t, int ndim, const int64_t *shape,
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

weft_tensor *ops_view_grad_to_base(weft_tensor *g, const int64_t *stride, int64_t rel_offset,
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
        weft_tensor *buf = weft_empty_dense_strided(base_ndim, base_shape, base_stride, g->dtype,
                                                    g->device);
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
    weft_tensor *flat = weft_scatter_add(weft_zeros(1, &span, g->dtype, g->device), 0, index,
                                         weft_reshape(g, 1, &n));
    return flat ? weft_tensor_alias(flat, base_ndim, base_shape, base_stride, flat->offset) : NULL;
}

/* Gradient of as_strided: every output element adds into the storage position it read,
 * measured from the input's own offset, the input being contiguous. ints[1] ndim,
 * ints[2..] shape (ndim), then strides (ndim), then the offset relative to the input. */
static int as_strided_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                               weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0];
    if (!g)
        return 0;
    int64_t *ints = weft_node_ints(node);
    int nd = (int)ints[1];
    int64_t in_stride[WEFT_MAX_DIMS];
    int in_nd = weft_node_input_ndim(node, 0);
    const int64_t *in_shape = weft_node_input_shape(node, 0);
    weft_contiguous_strides(in_nd, in_shape, in_stride);
    grad_inputs[0] = ops_view_grad_to_base(g, ints + 2 + nd, ints[2 + 2 * nd], in_nd, in_shape,
                                           in_stride);
    return grad_inputs[0] ? 0 : weft_error_code();
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
    weft_tensor *out = WEFT_NO_GRAD(rec, fwd_as_strided(t, ndim, shape, stride, offset));
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
