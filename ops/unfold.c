/* ops/unfold.c: Tensor.unfold(dim, size, step), a view holding every window of `size`
 * elements along dim, `step` apart, as a new last dim (PyTorch's strides: no data moves),
 * with UnfoldBackward0: the windows' gradients added back where they came from (windows
 * overlap when step < size), by index_add along dim. */
#include "internal.h"

static weft_tensor *unfold_view(weft_tensor *t, int d, int64_t size, int64_t step)
{
    int64_t len = t->ndim ? t->shape[d] : 1;
    if (size > len) {
        weft_error_set(WEFT_ERR_RUNTIME, "maximum size for tensor at dimension %d is %lld but size is %lld",
                       d, (long long)len, (long long)size);
        return NULL;
    }
    if (step <= 0) {
        weft_error_set(WEFT_ERR_RUNTIME, "step is %lld but must be > 0", (long long)step);
        return NULL;
    }
    if (size < 0) {
        weft_error_set(WEFT_ERR_RUNTIME, "size is %lld but must be >= 0", (long long)size);
        return NULL;
    }
    int64_t shape[WEFT_MAX_DIMS + 1], stride[WEFT_MAX_DIMS + 1];
    if (t->ndim == 0) {
        shape[0] = size;
        stride[0] = 1;
        return weft_tensor_alias(t, 1, shape, stride, t->offset);
    }
    if (t->ndim + 1 > WEFT_MAX_DIMS) {
        weft_error_set(WEFT_ERR_VALUE, "unfold: weft tensors have at most %d dims", WEFT_MAX_DIMS);
        return NULL;
    }
    for (int i = 0; i < t->ndim; i++) {
        shape[i] = t->shape[i];
        stride[i] = t->stride[i];
    }
    shape[d] = (len - size) / step + 1;
    stride[d] = t->stride[d] * step;
    shape[t->ndim] = size;
    stride[t->ndim] = t->stride[d];
    return weft_tensor_alias(t, t->ndim + 1, shape, stride, t->offset);
}

/* ints[0] dim, [1] size, [2] step. */
static int unfold_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                           weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0];
    if (!g)
        return 0;
    const int64_t *ints = weft_node_ints(node);
    int ndim = weft_node_input_ndim(node, 0), d = (int)ints[0];
    const int64_t *shape = weft_node_input_shape(node, 0);
    if (ndim == 0) {
        grad_inputs[0] = weft_reshape(g, 0, NULL);
        return grad_inputs[0] ? 0 : weft_error_code();
    }
    int64_t windows = g->shape[d], size = ints[1], step = ints[2];
    /* g [..., windows, ..., size] -> [..., windows * size, ...]; element (w, j) came
     * from position w * step + j along dim */
    int last = g->ndim - 1, at = d + 1;
    weft_tensor *moved = weft_movedim(g, 1, &last, 1, &at);
    weft_tensor *flat = moved ? weft_flatten(moved, d, d + 1) : NULL;
    const int64_t ws[2] = {windows, 1}, js[2] = {1, size};
    weft_tensor *w = weft_view(weft_arange(0, (double)(windows * step), (double)step, WEFT_I64,
                                           g->device), 2, ws);
    weft_tensor *j = weft_view(weft_arange(0, (double)size, 1, WEFT_I64, g->device), 2, js);
    weft_tensor *pos = w && j ? weft_flatten(weft_add(w, j), 0, 1) : NULL;
    weft_tensor *zeros = weft_zeros(ndim, shape, g->dtype, g->device);
    grad_inputs[0] = flat && pos ? weft_index_add(zeros, d, pos, flat, 1) : NULL;
    return grad_inputs[0] ? 0 : weft_error_code();
}

weft_tensor *weft_unfold(weft_tensor *t, int dim, int64_t size, int64_t step)
{
    if (!t || weft_require_strided(t, "unfold") != 0)
        return NULL;
    int d = weft_normalize_dim(dim, t->ndim);
    if (d < 0)
        return NULL;
    bool rec = weft_autograd_needed_inline(1, &t);
    weft_tensor *out = WEFT_NO_GRAD(rec, unfold_view(t, d, size, step));
    if (!rec || !out)
        return out;
    struct weft_node *node = weft_node_create(OP_GRAD_FN(UNFOLD), unfold_backward, 1, &t, 0);
    if (node) {
        weft_node_ints(node)[0] = d;
        weft_node_ints(node)[1] = size;
        weft_node_ints(node)[2] = step;
    }
    return weft_node_finish_view(node, t, out);
}
