/* nn/patches.c: F.unfold (PyTorch's im2col) on the IM2COL kernel and F.fold (col2im) on
 * the COL2IM kernel, each the other's adjoint, so each is the other's backward
 * (Im2ColBackward0, Col2ImBackward0), as PyTorch's. */
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

/* im2col or col2im of in into out, with the geometry's 10 integers (struct patches). */
static int patches_dispatch(enum weft_op_id op, weft_tensor *in, weft_tensor *out,
                            const int64_t geometry[10])
{
    struct weft_op_call call = {.op = op, .nin = 1, .nout = 1};
    call.in[0] = in;
    call.out[0] = out;
    memcpy(call.ints, geometry, 10 * sizeof *geometry);
    return weft_dispatch(&call);
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
    if (patches_dispatch(WEFT_OP_COL2IM, cols, img, ints) != 0)
        return weft_error_code();
    grad_inputs[0] = batched ? img : weft_reshape(img, 3, shape + 1);
    return grad_inputs[0] ? 0 : weft_error_code();
}

/* The backward node of x's im2col or col2im, holding the plan's integers (ints[0..9]). */
static struct weft_node *patches_node(const char *name, weft_backward_fn backward, weft_tensor *x,
                                      const struct patches *p)
{
    struct weft_node *node = weft_node_create(name, backward, 1, &x, 0);
    if (node)
        memcpy(weft_node_ints(node), p->ints, sizeof p->ints);
    return node;
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
    if (patches_dispatch(WEFT_OP_IM2COL, x4, cols, p.ints) != 0)
        return NULL;
    weft_tensor *y = x->ndim == 4 ? cols : weft_reshape(cols, 2, shape + 1);
    if (!y || !weft_autograd_needed(1, &x))
        return y;
    struct weft_node *node = patches_node("Im2ColBackward0", im2col_backward, x, &p);
    if (!node)
        return NULL;
    int64_t *ints = weft_node_ints(node);
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

/* ---- F.fold ---------------------------------------------------------------------------- */

/* floor division (PyTorch's div_rtn): the block count of a too-small output is <= 0 */
static int64_t div_floor(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return q * b != a && (a < 0) != (b < 0) ? q - 1 : q;
}

/* PyTorch 1.13's col2im_shape_check, in its order and words. On success p holds the
 * geometry (N, C, H, W the image's; OH, OW the blocks'). */
static int fold_plan(const weft_tensor *x, const int64_t out[2], const int64_t k[2],
                     const int64_t dil[2], const int64_t pad[2], const int64_t st[2],
                     struct patches *p)
{
    if (k[0] <= 0 || k[1] <= 0)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "kernel size should be greater than zero, but got kernel_height: "
                              "%lld kernel_width: %lld",
                              (long long)k[0], (long long)k[1]);
    if (st[0] <= 0 || st[1] <= 0)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "stride should be greater than zero, but got stride_height: %lld "
                              "stride_width: %lld",
                              (long long)st[0], (long long)st[1]);
    if (dil[0] <= 0 || dil[1] <= 0)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "dilation should be greater than zero, but got dilation_height: "
                              "%lld dilation_width: %lld",
                              (long long)dil[0], (long long)dil[1]);
    if (pad[0] < 0 || pad[1] < 0)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "padding should be non-negative, but got pad_height: %lld "
                              "pad_width: %lld",
                              (long long)pad[0], (long long)pad[1]);
    int b = x->ndim == 3;
    bool ok = (x->ndim == 2 || x->ndim == 3) && x->shape[b] != 0 && x->shape[b + 1] != 0;
    if (!ok) {
        char shape[160];
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "Expected 2D or 3D (batch mode) tensor for input with possibly 0 "
                              "batch size and non-zero dimensions for input, but got: %s",
                              weft_shape_str(x->ndim, x->shape, shape, sizeof shape));
    }
    int64_t planes = x->shape[b], length = x->shape[b + 1];
    if (planes % (k[0] * k[1]) != 0)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "Expected size of input's dimension 1 to be divisible by the "
                              "product of kernel_size, but got input.size(1)=%lld and "
                              "kernel_size=(%lld, %lld).",
                              (long long)planes, (long long)k[0], (long long)k[1]);
    int64_t bh = div_floor(out[0] + 2 * pad[0] - dil[0] * (k[0] - 1) - 1, st[0]) + 1;
    int64_t bw = div_floor(out[1] + 2 * pad[1] - dil[1] * (k[1] - 1) - 1, st[1]) + 1;
    char given[320];
    snprintf(given, sizeof given,
             "Given output_size=(%lld, %lld), kernel_size=(%lld, %lld), dilation=(%lld, %lld), "
             "padding=(%lld, %lld), stride=(%lld, %lld), ",
             (long long)out[0], (long long)out[1], (long long)k[0], (long long)k[1],
             (long long)dil[0], (long long)dil[1], (long long)pad[0], (long long)pad[1],
             (long long)st[0], (long long)st[1]);
    if (length != bh * bw)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "%sexpected size of input's dimension 2 to match the calculated "
                              "number of sliding blocks %lld * %lld = %lld, but got "
                              "input.size(2)=%lld.",
                              given, (long long)bh, (long long)bw, (long long)(bh * bw),
                              (long long)length);
    if (bh < 1 || bw < 1)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "%scalculated shape of the array of sliding blocks as (%lld, %lld), "
                              "which is too small (non-positive)",
                              given, (long long)bh, (long long)bw);
    if (out[0] < 1 || out[1] < 1)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "Expected output spatial size to be positive, but got: "
                              "output_size=(%lld, %lld).",
                              (long long)out[0], (long long)out[1]);
    if (!weft_dtype_is_floating(x->dtype))
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "\"col2im_out_cpu\" not implemented for '%s'",
                              weft_dtype_torch_name(x->dtype));
    p->N = b ? x->shape[0] : 1;
    p->C = planes / (k[0] * k[1]);
    p->H = out[0];
    p->W = out[1];
    p->OH = bh;
    p->OW = bw;
    const int64_t g[10] = {k[0], k[1], st[0], st[1], pad[0], pad[1], dil[0], dil[1], bh, bw};
    memcpy(p->ints, g, sizeof g);
    return 0;
}

/* The gradient of fold is unfold of the gradient with the same geometry. ints[0..9] the
 * geometry, [10] batched. */
static int col2im_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                           weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0];
    if (!g)
        return 0;
    const int64_t *ints = weft_node_ints(node);
    bool batched = ints[10] != 0;
    const int64_t *in_shape = weft_node_input_shape(node, 0);
    const int64_t N = batched ? in_shape[0] : 1, planes = in_shape[batched];
    const int64_t img_shape[4] = {N, planes / (ints[0] * ints[1]), g->shape[batched + 1],
                                  g->shape[batched + 2]};
    const int64_t cols_shape[3] = {N, planes, ints[8] * ints[9]};
    weft_tensor *img = weft_reshape(g, 4, img_shape);
    weft_tensor *cols = weft_empty(3, cols_shape, g->dtype, g->device);
    if (!img || !cols)
        return weft_error_code();
    if (patches_dispatch(WEFT_OP_IM2COL, img, cols, ints) != 0)
        return weft_error_code();
    grad_inputs[0] = batched ? cols : weft_reshape(cols, 2, cols_shape + 1);
    return grad_inputs[0] ? 0 : weft_error_code();
}

static weft_tensor *col2im_in_scope(weft_tensor *x, const int64_t out[2], const int64_t k[2],
                                    const int64_t dil[2], const int64_t pad[2],
                                    const int64_t st[2])
{
    struct patches p = {0};
    if (weft_require_strided(x, "col2im") != 0 || fold_plan(x, out, k, dil, pad, st, &p) != 0)
        return NULL;
    const int64_t cols_shape[3] = {p.N, p.C * k[0] * k[1], p.OH * p.OW};
    const int64_t shape[4] = {p.N, p.C, p.H, p.W};
    weft_tensor *cols = x->ndim == 3 ? x : weft_reshape(x, 3, cols_shape);
    weft_tensor *img = weft_empty(4, shape, x->dtype, x->device);
    if (!cols || !img)
        return NULL;
    if (patches_dispatch(WEFT_OP_COL2IM, cols, img, p.ints) != 0)
        return NULL;
    weft_tensor *y = x->ndim == 3 ? img : weft_reshape(img, 3, shape + 1);
    if (!y || !weft_autograd_needed(1, &x))
        return y;
    struct weft_node *node = patches_node("Col2ImBackward0", col2im_backward, x, &p);
    if (!node)
        return NULL;
    weft_node_ints(node)[10] = x->ndim == 3;
    return weft_nn_attach(node, y);
}

weft_tensor *weft_col2im(weft_tensor *x, const int64_t output_size[2], const int64_t kernel[2],
                         const int64_t dilation[2], const int64_t padding[2],
                         const int64_t stride[2])
{
    if (!x || !output_size || !kernel || !dilation || !padding || !stride)
        return NULL;
    weft_scope_push();
    weft_tensor *y = weft_tensor_retain(
        col2im_in_scope(x, output_size, kernel, dilation, padding, stride));
    weft_scope_pop();
    return weft_autorelease(y);
}
