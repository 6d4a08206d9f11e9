/* nn/patches.c: F.unfold (PyTorch's im2col) on the IM2COL kernel, with Im2ColBackward0,
 * whose formula is the COL2IM kernel (its adjoint), as PyTorch's. */
#include <string.h>

#include "functional.h"

struct patches {
    int64_t N, C, H, W, OH, OW;
    int64_t ints[10]; /* IM2COL's geometry: kH kW sH sW pH pW dH dW OH OW */
};

static int plan(const weft_tensor *x, const int64_t k[2], const int64_t dil[2], const int64_t pad[2],
                const int64_t st[2], struct patches *p)
{
    if (x->ndim != 3 && x->ndim != 4)
        return weft_error_set(WEFT_ERR_VALUE,
                              "Input Error: Only 3D or 4D input Tensors are supported (got %dD)",
                              x->ndim);
    for (int i = 0; i < 2; i++)
        if (k[i] <= 0 || dil[i] <= 0 || st[i] <= 0 || pad[i] < 0)
            return weft_error_set(WEFT_ERR_RUNTIME,
                                  "im2col: kernel_size, dilation and stride must be > 0 and padding >= 0");
    if (!weft_dtype_is_floating(x->dtype))
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "\"im2col\" not implemented for '%s'",
                              weft_dtype_torch_name(x->dtype));
    int b = x->ndim == 4;
    p->N = b ? x->shape[0] : 1;
    p->C = x->shape[b];
    p->H = x->shape[b + 1];
    p->W = x->shape[b + 2];
    p->OH = (p->H + 2 * pad[0] - (dil[0] * (k[0] - 1) + 1)) / st[0] + 1;
    p->OW = (p->W + 2 * pad[1] - (dil[1] * (k[1] - 1) + 1)) / st[1] + 1;
    if (p->OH < 1 || p->OW < 1) /* C's division truncates toward 0, as PyTorch's C++ */
        return weft_error_set(
            WEFT_ERR_RUNTIME,
            "Given input with spatial size (%lld, %lld), kernel_size=(%lld, %lld), dilation=(%lld, "
            "%lld), padding=(%lld, %lld), calculated shape of the array of sliding blocks as "
            "(%lld, %lld), but its components must be at least one.",
            (long long)p->H, (long long)p->W, (long long)k[0], (long long)k[1], (long long)dil[0],
            (long long)dil[1], (long long)pad[0], (long long)pad[1],
            (long long)p->OH, (long long)p->OW);
    const int64_t g[10] = {k[0], k[1], st[0], st[1], pad[0], pad[1], dil[0], dil[1], p->OH, p->OW};
    memcpy(p->ints, g, sizeof g);
    return 0;
}

/* ints[0..9] the geometry, [10] batched, [11..13] C H W. */
static int im2col_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                           weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0];
    if (!g)
        return 0;
    const int64_t *ints = weft_node_ints(node);
    bool batched = ints[10] != 0;
    int64_t N = batched ? g->shape[0] : 1;
    const int64_t shape[4] = {N, ints[11], ints[12], ints[13]};
    const int64_t cols_shape[3] = {N, ints[11] * ints[0] * ints[1], ints[8] * ints[9]};
    weft_tensor *cols = weft_reshape(g, 3, cols_shape);
    weft_tensor *img = weft_empty(4, shape, g->dtype, g->device);
    if (!cols || !img)
        return weft_error_code();
    struct weft_op_call call = {.op = WEFT_OP_COL2IM, .nin = 1, .nout = 1};
    call.in[0] = cols;
    call.out[0] = img;
    memcpy(call.ints, ints, 10 * sizeof *ints);
    if (weft_dispatch(&call) != 0)
        return weft_error_code();
    grad_inputs[0] = batched ? img : weft_reshape(img, 3, shape + 1);
    return grad_inputs[0] ? 0 : weft_error_code();
}

static weft_tensor *im2col_in_scope(weft_tensor *x, const int64_t k[2], const int64_t dil[2],
                                    const int64_t pad[2], const int64_t st[2])
{
    struct patches p;
    if (weft_require_strided(x, "im2col") != 0 || plan(x, k, dil, pad, st, &p) != 0)
        return NULL;
    const int64_t shape[3] = {p.N, p.C * k[0] * k[1], p.OH * p.OW};
    const int64_t in4[4] = {p.N, p.C, p.H, p.W};
    weft_tensor *x4 = x->ndim == 4 ? x : weft_reshape(x, 4, in4);
    weft_tensor *cols = weft_empty(3, shape, x->dtype, x->device);
    if (!x4 || !cols)
        return NULL;
    struct weft_op_call call = {.op = WEFT_OP_IM2COL, .nin = 1, .nout = 1};
    call.in[0] = x4;
    call.out[0] = cols;
    memcpy(call.ints, p.ints, sizeof p.ints);
    if (weft_dispatch(&call) != 0)
        return NULL;
    weft_tensor *y = x->ndim == 4 ? cols : weft_reshape(cols, 2, shape + 1);
    if (!y || !weft_autograd_needed(1, &x))
        return y;
    struct weft_node *node = weft_node_create("Im2ColBackward0", im2col_backward, 1, &x, 0);
    if (!node)
        return NULL;
    int64_t *ints = weft_node_ints(node);
    memcpy(ints, p.ints, sizeof p.ints);
    ints[10] = x->ndim == 4;
    ints[11] = p.C;
    ints[12] = p.H;
    ints[13] = p.W;
    return weft_nn_attach(node, y);
}

weft_tensor *weft_im2col(weft_tensor *x, const int64_t kernel[2], const int64_t dilation[2],
                         const int64_t padding[2], const int64_t stride[2])
{
    if (!x || !kernel || !dilation || !padding || !stride)
        return NULL;
    weft_scope_push();
    weft_tensor *y = weft_tensor_retain(im2col_in_scope(x, kernel, dilation, padding, stride));
    weft_scope_pop();
    return weft_autorelease(y);
}
