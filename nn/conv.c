/* nn/conv.c: conv2d as im2col + GEMM, with its own backward node.
 *
 * Forward: the columns [N, C*kH*kW, OH*OW] of each image (IM2COL) are multiplied by the
 * weight seen as [groups, C_out/groups, C_in/groups*kH*kW], one batched weft_matmul over
 * (image, group), so BLAS does the arithmetic. A 1x1 kernel with stride 1 and no padding
 * needs no columns: the image itself is one.
 *
 * Backward ("ConvolutionBackward0"), with g the output gradient as [N, G, C_out/G, L]:
 *   grad input  = col2im(W^T @ g)            (COL2IM is IM2COL's adjoint)
 *   grad weight = sum over images of g @ columns^T  (columns recomputed, not saved:
 *                 they are kH*kW times the input)
 *   grad bias   = g summed over N, H, W.
 *
 * Where the backend has the named ops CONV2D and its two backward passes (weft/kernel.h;
 * the cpu plugin through oneDNN's direct convolution, [cpu] conv), float32 convolutions
 * without groups run there instead, forward and backward: no columns at all. */
#include <string.h>

#include "functional.h"

struct conv_args {
    int64_t N, C, H, W, Cout, G, kh, kw, sh, sw, ph, pw, dh, dw, OH, OW;
};

/* ---- argument checks, in PyTorch's words ----------------------------------------------- */

static int check_params(const struct weft_conv2d_params *p, struct conv_args *a)
{
    struct weft_conv2d_params d = {{1, 1}, {0, 0}, {1, 1}, 1};
    if (p)
        d = *p;
    for (int i = 0; i < 2; i++) {
        if (p && p->stride[i] == 0)
            d.stride[i] = 1;
        if (p && p->dilation[i] == 0)
            d.dilation[i] = 1;
        if (d.stride[i] < 0)
            return weft_error_set(WEFT_ERR_RUNTIME, "non-positive stride is not supported");
        if (d.padding[i] < 0)
            return weft_error_set(WEFT_ERR_RUNTIME, "negative padding is not supported");
        if (d.dilation[i] < 0)
            return weft_error_set(WEFT_ERR_RUNTIME, "dilation should be greater than zero");
    }
    if (p && p->groups == 0)
        d.groups = 1;
    if (d.groups < 0)
        return weft_error_set(WEFT_ERR_RUNTIME, "non-positive groups is not supported");
    a->sh = d.stride[0], a->sw = d.stride[1];
    a->ph = d.padding[0], a->pw = d.padding[1];
    a->dh = d.dilation[0], a->dw = d.dilation[1];
    a->G = d.groups;
    return 0;
}

static int check_shapes(const weft_tensor *x, const weft_tensor *w, const weft_tensor *b,
                        struct conv_args *a)
{
    char xs[160], ws[160], bs[160];
    weft_shape_str(x->ndim, x->shape, xs, sizeof xs);
    weft_shape_str(w->ndim, w->shape, ws, sizeof ws);
    if (w->ndim != 4)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "Expected %d-dimensional input for %d-dimensional weight %s, but got "
                              "%d-dimensional input of size %s instead",
                              w->ndim, w->ndim, ws, x->ndim, xs);
    if (w->shape[0] % a->G != 0)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "Given groups=%lld, expected weight to be divisible by %lld at "
                              "dimension 0, but got weight of size %s instead",
                              (long long)a->G, (long long)a->G, ws);
    if (x->shape[1] != w->shape[1] * a->G)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "Given groups=%lld, weight of size %s, expected input%s to have %lld "
                              "channels, but got %lld channels instead",
                              (long long)a->G, ws, xs, (long long)(w->shape[1] * a->G),
                              (long long)x->shape[1]);
    if (b && (b->ndim != 1 || b->shape[0] != w->shape[0]))
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "Given weight of size %s, expected bias to be 1-dimensional with %lld "
                              "elements, but got bias of size %s instead",
                              ws, (long long)w->shape[0], weft_shape_str(b->ndim, b->shape, bs, sizeof bs));
    a->N = x->shape[0], a->C = x->shape[1], a->H = x->shape[2], a->W = x->shape[3];
    a->Cout = w->shape[0], a->kh = w->shape[2], a->kw = w->shape[3];
    int64_t kh, kw, hp, wp;
    if (!nn_window_extent(a->kh, a->dh, &kh) || !nn_window_extent(a->kw, a->dw, &kw) ||
        !weft_size_mul(a->ph, 2, WEFT_SIZE_MAX, &hp) || !weft_size_add(hp, a->H, WEFT_SIZE_MAX, &hp) ||
        !weft_size_mul(a->pw, 2, WEFT_SIZE_MAX, &wp) || !weft_size_add(wp, a->W, WEFT_SIZE_MAX, &wp))
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "conv2d: input size (%lld x %lld) with padding (%lld, %lld), kernel "
                              "size (%lld x %lld) and dilation (%lld, %lld) give sizes beyond "
                              "int64's range",
                              (long long)a->H, (long long)a->W, (long long)a->ph,
                              (long long)a->pw, (long long)a->kh, (long long)a->kw,
                              (long long)a->dh, (long long)a->dw);
    if (hp < kh || wp < kw)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "Calculated padded input size per channel: (%lld x %lld). Kernel size: "
                              "(%lld x %lld). Kernel size can't be greater than actual input size",
                              (long long)hp, (long long)wp, (long long)kh, (long long)kw);
    a->OH = (hp - kh) / a->sh + 1;
    a->OW = (wp - kw) / a->sw + 1;
    return 0;
}

static int check_types(const weft_tensor *x, const weft_tensor *w, const weft_tensor *b)
{
    const weft_tensor *all[3] = {x, w, b};
    if (weft_check_same_device(b ? 3 : 2, all) != 0)
        return weft_error_code();
    if (x->layout != WEFT_LAYOUT_STRIDED || w->layout != WEFT_LAYOUT_STRIDED ||
        (b && b->layout != WEFT_LAYOUT_STRIDED))
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "conv2d: only strided tensors are supported");
    if (x->dtype != w->dtype)
        return weft_error_set(WEFT_ERR_RUNTIME, "expected scalar type %s but found %s",
                              weft_dtype_torch_name(x->dtype), weft_dtype_torch_name(w->dtype));
    if (b && b->dtype != x->dtype)
        return weft_error_set(WEFT_ERR_RUNTIME, "Input type (%s) and bias type (%s) should be the same",
                              weft_dtype_meta_name(x->dtype), weft_dtype_meta_name(b->dtype));
    return 0;
}

/* ---- columns ------------------------------------------------------------------------------ */

static void geometry_ints(const struct conv_args *a, int64_t *ints)
{
    const int64_t g[10] = {a->kh, a->kw, a->sh, a->sw, a->ph, a->pw, a->dh, a->dw, a->OH, a->OW};
    memcpy(ints, g, sizeof g);
}

static bool is_pointwise(const struct conv_args *a)
{
    return a->kh == 1 && a->kw == 1 && a->sh == 1 && a->sw == 1 && a->ph == 0 && a->pw == 0;
}

/* [N, C*kH*kW, OH*OW]: IM2COL, or x itself reshaped for a pointwise kernel. */
static weft_tensor *columns(weft_tensor *x, const struct conv_args *a)
{
    const int64_t shape[3] = {a->N, a->C * a->kh * a->kw, a->OH * a->OW};
    if (is_pointwise(a))
        return weft_reshape(x, 3, shape);
    weft_tensor *cols = weft_empty(3, shape, x->dtype, x->device);
    if (!cols)
        return NULL;
    struct weft_op_call call = {.op = WEFT_OP_IM2COL, .nin = 1, .nout = 1};
    call.in[0] = x;
    call.out[0] = cols;
    geometry_ints(a, call.ints);
    return weft_dispatch(&call) == 0 ? cols : NULL;
}

/* The adjoint of columns(): [N, C*kH*kW, OH*OW] -> [N, C, H, W]. */
static weft_tensor *uncolumns(weft_tensor *cols, const struct conv_args *a)
{
    const int64_t shape[4] = {a->N, a->C, a->H, a->W};
    if (is_pointwise(a))
        return weft_reshape(cols, 4, shape);
    weft_tensor *img = weft_empty(4, shape, cols->dtype, cols->device);
    if (!img)
        return NULL;
    struct weft_op_call call = {.op = WEFT_OP_COL2IM, .nin = 1, .nout = 1};
    call.in[0] = cols;
    call.out[0] = img;
    geometry_ints(a, call.ints);
    return weft_dispatch(&call) == 0 ? img : NULL;
}

/* The weight as [G, C_out/G, C_in/G*kH*kW]. */
static weft_tensor *grouped_weight(weft_tensor *w, const struct conv_args *a)
{
    const int64_t shape[3] = {a->G, a->Cout / a->G, (a->C / a->G) * a->kh * a->kw};
    return weft_reshape(w, 3, shape);
}

/* Columns (or any [N, C*kH*kW, L] tensor) as [N, G, C_in/G*kH*kW, L]. */
static weft_tensor *grouped_columns(weft_tensor *cols, const struct conv_args *a)
{
    const int64_t shape[4] = {a->N, a->G, (a->C / a->G) * a->kh * a->kw, a->OH * a->OW};
    return weft_reshape(cols, 4, shape);
}

/* ---- the backend's convolution (named ops) ------------------------------------------------ */

static int conv2d_op(void)
{
    static int cached = -1;
    return nn_named_op(&cached, WEFT_OP_CONV2D_NAME);
}

static int conv2d_backward_input_op(void)
{
    static int cached = -1;
    return nn_named_op(&cached, WEFT_OP_CONV2D_BACKWARD_INPUT_NAME);
}

static int conv2d_backward_weight_op(void)
{
    static int cached = -1;
    return nn_named_op(&cached, WEFT_OP_CONV2D_BACKWARD_WEIGHT_NAME);
}

/* Whether this convolution runs as the backend's named ops: all three where it will be
 * recorded, as the backward pass follows the forward's choice. */
static bool use_named_conv(const weft_tensor *x, const struct conv_args *a, bool rec)
{
    if (a->G != 1 || x->dtype != WEFT_F32 || a->N == 0 || a->C == 0 || a->Cout == 0 ||
        a->OH * a->OW == 0)
        return false;
    return nn_have_kernel(conv2d_op(), x) &&
           (!rec || (nn_have_kernel(conv2d_backward_input_op(), x) &&
                     nn_have_kernel(conv2d_backward_weight_op(), x)));
}

/* One named conv op: ins and outs contiguous (copies where they are not). */
static int run_named_conv(int op, const struct conv_args *a, int nin, weft_tensor *const *in,
                          int nout, weft_tensor *const *out)
{
    struct weft_op_call call = {.op = op, .nin = nin, .nout = nout};
    for (int i = 0; i < nin; i++)
        if (in[i] && !(call.in[i] = weft_contiguous(in[i])))
            return weft_error_code();
    for (int i = 0; i < nout; i++)
        call.out[i] = out[i];
    geometry_ints(a, call.ints);
    return weft_dispatch(&call);
}

/* ---- forward and backward ------------------------------------------------------------------ */

/* *cols_out: the im2col columns, kept for the weight gradient (as PyTorch's slow_conv2d
 * keeps its finput) so the backward pass does not unfold the input a second time. */
static weft_tensor *conv_forward(weft_tensor *x, weft_tensor *w, weft_tensor *b,
                                 const struct conv_args *a, bool named, weft_tensor **cols_out)
{
    const int64_t out_shape[4] = {a->N, a->Cout, a->OH, a->OW};
    *cols_out = NULL;
    if (named) {
        weft_tensor *y = weft_empty(4, out_shape, x->dtype, x->device);
        weft_tensor *in[3] = {x, w, b};
        return y && run_named_conv(conv2d_op(), a, b ? 3 : 2, in, 1, &y) == 0 ? y : NULL;
    }
    weft_tensor *cols = columns(x, a);
    *cols_out = cols;
    weft_tensor *y = weft_matmul(grouped_weight(w, a), grouped_columns(cols, a));
    y = weft_reshape(y, 4, out_shape);
    if (y && b) {
        const int64_t bshape[4] = {1, a->Cout, 1, 1};
        y = weft_add_(y, weft_reshape(b, 4, bshape));
    }
    return y;
}

/* Geometry back from a node: ints[0..7] kernel/stride/padding/dilation, ints[8] groups
 * (ints[9]: the forward ran as the named CONV2D op). */
static struct conv_args node_args(struct weft_node *node, const weft_tensor *g)
{
    const int64_t *k = weft_node_ints(node), *xs = weft_node_input_shape(node, 0),
                  *ws = weft_node_input_shape(node, 1);
    return (struct conv_args){xs[0], xs[1], xs[2], xs[3], ws[0], k[8], k[0], k[1], k[2], k[3],
                              k[4], k[5], k[6], k[7], g->shape[2], g->shape[3]};
}

/* The bias's gradient: g [N, Cout, OH, OW] summed over N, OH and OW. */
static weft_tensor *bias_grad(weft_tensor *g)
{
    const int dims[3] = {0, 2, 3};
    return weft_sum(g, 3, dims, false);
}

/* The backward of a forward that ran as the named CONV2D op. */
static int named_conv_backward(struct weft_node *node, weft_tensor *g, weft_tensor *x,
                               weft_tensor *w, const struct conv_args *a,
                               weft_tensor **grad_inputs)
{
    if (weft_node_needs_input_grad(node, 0)) {
        weft_tensor *gx = weft_empty(4, (const int64_t[4]){a->N, a->C, a->H, a->W}, g->dtype,
                                     g->device);
        weft_tensor *in[2] = {g, w};
        if (!gx || run_named_conv(conv2d_backward_input_op(), a, 2, in, 1, &gx) != 0)
            return weft_error_code();
        grad_inputs[0] = gx;
    }
    bool need_w = weft_node_needs_input_grad(node, 1), need_b = weft_node_needs_input_grad(node, 2);
    if (need_w) {
        weft_tensor *out[2] = {weft_empty(4, weft_node_input_shape(node, 1), g->dtype, g->device),
                               need_b ? weft_empty(1, &a->Cout, g->dtype, g->device) : NULL};
        weft_tensor *in[2] = {g, x};
        if (!out[0] || (need_b && !out[1]) ||
            run_named_conv(conv2d_backward_weight_op(), a, 2, in, need_b ? 2 : 1, out) != 0)
            return weft_error_code();
        grad_inputs[1] = out[0];
        grad_inputs[2] = out[1];
    } else if (need_b && !(grad_inputs[2] = bias_grad(g))) {
        return weft_error_code();
    }
    return 0;
}

static int conv_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                         weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0];
    if (!g)
        return 0;
    weft_tensor *x = weft_node_saved(node, 0), *w = weft_node_saved(node, 1);
    struct conv_args a = node_args(node, g);
    if (weft_node_ints(node)[9])
        return named_conv_backward(node, g, x, w, &a, grad_inputs);
    const int64_t gshape[4] = {a.N, a.G, a.Cout / a.G, a.OH * a.OW};
    weft_tensor *g4 = weft_reshape(g, 4, gshape);
    if (weft_node_needs_input_grad(node, 0)) {
        weft_tensor *gcols = weft_matmul(weft_transpose(grouped_weight(w, &a), 1, 2), g4);
        const int64_t cshape[3] = {a.N, a.C * a.kh * a.kw, a.OH * a.OW};
        if (!(grad_inputs[0] = uncolumns(weft_reshape(gcols, 3, cshape), &a)))
            return weft_error_code();
    }
    if (weft_node_needs_input_grad(node, 1)) {
        weft_tensor *saved = weft_node_saved(node, 2);
        weft_tensor *cols = grouped_columns(saved ? saved : columns(x, &a), &a);
        int batch = 0;
        weft_tensor *gw = weft_sum(weft_matmul(g4, weft_transpose(cols, 2, 3)), 1, &batch, false);
        if (!(grad_inputs[1] = weft_reshape(gw, 4, weft_node_input_shape(node, 1))))
            return weft_error_code();
    }
    if (weft_node_needs_input_grad(node, 2) && !(grad_inputs[2] = bias_grad(g)))
        return weft_error_code();
    return 0;
}

static weft_tensor *conv2d_batched(weft_tensor *x, weft_tensor *w, weft_tensor *b,
                                   struct conv_args *a)
{
    if (check_shapes(x, w, b, a) != 0)
        return NULL;
    weft_tensor *in[3] = {x, w, b};
    bool rec = weft_autograd_needed(3, in);
    bool named = use_named_conv(x, a, rec);
    bool prev = weft_no_grad_begin();
    weft_tensor *cols = NULL;
    weft_tensor *y = nn_like_memory_format(x, conv_forward(x, w, b, a, named, &cols));
    weft_grad_mode_restore(prev);
    if (!y || !rec)
        return y;
    struct weft_node *node = weft_node_create("ConvolutionBackward0", conv_backward, 3, in, 3);
    if (!node)
        return NULL;
    geometry_ints(a, weft_node_ints(node));
    weft_node_ints(node)[8] = a->G;
    weft_node_ints(node)[9] = named; /* the backward takes the same path */
    /* The columns only when the weight needs a gradient. */
    bool keep_cols = weft_requires_grad(w) && cols;
    if (weft_node_save(node, 0, x) != 0 || weft_node_save(node, 1, w) != 0 ||
        (keep_cols && weft_node_save(node, 2, cols) != 0)) {
        weft_node_abandon(node);
        return NULL;
    }
    return weft_nn_attach(node, y);
}

static weft_tensor *conv2d_in_scope(weft_tensor *x, weft_tensor *w, weft_tensor *b,
                                    const struct weft_conv2d_params *params)
{
    struct conv_args a;
    if (check_params(params, &a) != 0 || check_types(x, w, b) != 0)
        return NULL;
    if (x->ndim != 3 && x->ndim != 4) {
        char xs[160];
        weft_error_set(WEFT_ERR_RUNTIME,
                       "Expected 3D (unbatched) or 4D (batched) input to conv2d, but got input of "
                       "size: %s",
                       weft_shape_str(x->ndim, x->shape, xs, sizeof xs));
        return NULL;
    }
    if (x->ndim == 4)
        return conv2d_batched(x, w, b, &a);
    return weft_squeeze_dim(conv2d_batched(weft_unsqueeze(x, 0), w, b, &a), 0);
}

weft_tensor *weft_conv2d(weft_tensor *x, weft_tensor *weight, weft_tensor *bias,
                         const struct weft_conv2d_params *params)
{
    if (!x || !weight)
        return NULL;
    weft_tensor *in[3] = {x, weight, bias};
    WEFT_AUTOCAST_RETURN("conv2d", 3, in, weft_conv2d(in[0], in[1], in[2], params));
    weft_scope_push();
    weft_tensor *y = weft_tensor_retain(conv2d_in_scope(x, weight, bias, params));
    weft_scope_pop();
    return weft_autorelease(y);
}
