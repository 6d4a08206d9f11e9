/* nn/unpool.c: F.max_unpool2d, the partial inverse of max_pool2d: each value goes to the
 * position its index names in a zeroed [N, C, oH, oW] output (a scatter over each flattened
 * plane), with PyTorch's checks and texts and the node MaxUnpool2DBackward0, whose
 * gradient is the output's gradient gathered back at the indices. */
#include <string.h>

#include "functional.h"

/* Saved: 0 the indices as [N, C, H*W]. */
static int unpool_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                           weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0], *idx = weft_node_saved(node, 0);
    if (!g)
        return 0;
    int64_t flat[3] = {idx->shape[0], idx->shape[1], -1};
    weft_tensor *gx = weft_gather(weft_reshape(g, 3, flat), 2, idx);
    grad_inputs[0] = weft_reshape(gx, weft_node_input_ndim(node, 0),
                                  weft_node_input_shape(node, 0));
    return grad_inputs[0] ? 0 : weft_error_code();
}

static int check(const weft_tensor *x, const weft_tensor *idx, int64_t oh, int64_t ow)
{
    char a[160], b[160];
    if (idx->dtype != WEFT_I64)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "elements in indices should be type int64 but got: %s",
                              weft_dtype_torch_name(idx->dtype));
    if (x->ndim != 3 && x->ndim != 4)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "Input to max_unpooling2d should be a 3d or 4d Tensor, but got a "
                              "tensor with %d dimensions.",
                              x->ndim);
    if (x->ndim != idx->ndim || memcmp(x->shape, idx->shape, (size_t)x->ndim * sizeof *x->shape))
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "Expected shape of indices to be same as that of the input tensor "
                              "(%s) but got indices tensor with shape: %s",
                              weft_shape_str(x->ndim, x->shape, a, sizeof a),
                              weft_shape_str(idx->ndim, idx->shape, b, sizeof b));
    for (int d = 1; d < x->ndim; d++)
        if (x->shape[d] <= 0)
            return weft_error_set(WEFT_ERR_RUNTIME,
                                  "max_unpooling2d_forward_out_cpu(): Expected input to have non-zero size for "
                                  "non-batch dimensions, but got %s with dimension %d being empty.",
                                  weft_shape_str(x->ndim, x->shape, a, sizeof a), d);
    if (oh <= 0 || ow <= 0)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "max_unpooling2d(): Expected output size to be positive, got %lldx%lld",
                              (long long)oh, (long long)ow);
    if (weft_tensor_numel(idx) == 0)
        return 0;
    /* PyTorch's cpu loop keeps going and names the last bad index in row-major order */
    int64_t n = weft_tensor_numel(idx);
    weft_tensor *flat = weft_reshape((weft_tensor *)idx, 1, &n);
    weft_tensor *bad = weft_logical_or(weft_lt_scalar(flat, 0), weft_ge_scalar(flat, (double)(oh * ow)));
    double any, last, value;
    if (weft_tensor_item(weft_any(bad, 0, NULL, false), &any) != 0)
        return weft_error_code();
    if (!any)
        return 0;
    weft_tensor *where = weft_where_scalar(bad, weft_arange(0, (double)n, 1, WEFT_I64, idx->device), -1);
    if (weft_tensor_item(weft_max(where), &last) != 0 ||
        weft_tensor_item(weft_select(flat, 0, (int64_t)last), &value) != 0)
        return weft_error_code();
    return weft_error_set(WEFT_ERR_RUNTIME,
                          "Found an invalid max index: %lld (output volumes are of size %lldx%lld)",
                          (long long)value, (long long)oh, (long long)ow);
}

static weft_tensor *unpool_in_scope(weft_tensor *x, weft_tensor *idx,
                                    const struct weft_pool2d_params *p, const int64_t *size)
{
    if (!p && !size) {
        weft_error_set(WEFT_ERR_VALUE, "max_unpool2d: params (the kernel size) are required");
        return NULL;
    }
    if (x->ndim < 2) {
        weft_error_set(WEFT_ERR_RUNTIME,
                       "Input to max_unpooling2d should be a 3d or 4d Tensor, but got a tensor "
                       "with %d dimensions.", x->ndim);
        return NULL;
    }
    int64_t H = x->shape[x->ndim - 2], W = x->shape[x->ndim - 1], oh = 0, ow = 0;
    if (p) {
        int64_t sh = p->stride[0] ? p->stride[0] : p->kernel[0];
        int64_t sw = p->stride[1] ? p->stride[1] : p->kernel[1];
        oh = (H - 1) * sh - 2 * p->padding[0] + p->kernel[0];
        ow = (W - 1) * sw - 2 * p->padding[1] + p->kernel[1];
        /* F.max_unpool2d's _unpool_output_size: within one stride of the default */
        const int64_t def[2] = {oh, ow}, st[2] = {sh, sw};
        for (int d = 0; size && d < 2; d++)
            if (!(def[d] - st[d] < size[d] && size[d] < def[d] + st[d])) {
                weft_error_set(WEFT_ERR_VALUE,
                               "invalid output_size \"(%lld, %lld)\" (dim %d must be between "
                               "%lld and %lld)",
                               (long long)size[0], (long long)size[1], d,
                               (long long)(def[d] - st[d]), (long long)(def[d] + st[d]));
                return NULL;
            }
    }
    if (size) {
        oh = size[0];
        ow = size[1];
    }
    if (check(x, idx, oh, ow) != 0)
        return NULL;
    bool batched = x->ndim == 4;
    int64_t N = batched ? x->shape[0] : 1, C = x->shape[batched ? 1 : 0];
    const int64_t flat[3] = {N, C, H * W}, planes[3] = {N, C, oh * ow};
    weft_tensor *fidx = weft_reshape(idx, 3, flat);
    bool prev = weft_no_grad_begin();
    weft_tensor *out = weft_scatter(weft_zeros(3, planes, x->dtype, x->device), 2, fidx,
                                    weft_reshape(x, 3, flat));
    const int64_t shape4[4] = {N, C, oh, ow};
    out = batched ? weft_reshape(out, 4, shape4) : weft_reshape(out, 3, shape4 + 1);
    /* a result of its own, not a view of the scatter's */
    out = out ? weft_clone(out) : NULL;
    weft_grad_mode_restore(prev);
    if (!out || !weft_autograd_needed(1, &x))
        return out;
    struct weft_node *node = weft_node_create("MaxUnpool2DBackward0", unpool_backward, 1, &x, 1);
    if (node && weft_node_save(node, 0, fidx) != 0) {
        weft_node_abandon(node);
        node = NULL;
    }
    return weft_nn_attach(node, out);
}

weft_tensor *weft_max_unpool2d(weft_tensor *x, weft_tensor *indices,
                               const struct weft_pool2d_params *params, const int64_t *output_size)
{
    if (!x || !indices)
        return NULL;
    WEFT_AUTOCAST_RETURN("max_unpool2d", 1, &x, weft_max_unpool2d(x, indices, params, output_size));
    weft_scope_push();
    weft_tensor *y = weft_tensor_retain(unpool_in_scope(x, indices, params, output_size));
    weft_scope_pop();
    return weft_autorelease(y);
}
