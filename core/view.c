/* core/view.c: the views the core itself makes: expand (copy_ broadcasts its source by
 * it) and the broadcast shape behind it, with expand's gradient, and detach; and the
 * contiguous reshape the engine fits gradients with. Each view is a new tensor header
 * over the same storage (and so the same version counter); no data moves. The view ops
 * (view, reshape, transpose, narrow, view(dtype), ... in ops/views.c, as_strided in
 * ops/as_strided.c) are the op layer's. Shapes, strides and error texts follow ATen's
 * TensorShape.cpp, node names and backward formulas its derivatives.yaml. */
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

weft_tensor *weft_detach(weft_tensor *t)
{
    if (!t)
        return NULL;
    if (weft_require_strided(t, "detach") != 0)
        return NULL;
    /* A fresh header carries no autograd metadata; the storage (and version) is shared. */
    return weft_tensor_alias(t, t->ndim, t->shape, t->stride, t->offset);
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

/* expand: the gradient as it comes; the engine sums it over the broadcast dims. */
static int expand_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                           weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0];
    if (g && !(grad_inputs[0] = weft_autorelease(weft_tensor_retain(g))))
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
