/* nn/functional.c: the functional layers made of recorded ops (linear, batch_norm,
 * dropout), those with a node of their own over the fused kernels of weft/kernel.h where
 * the backend has them (linear + relu, layer_norm, embedding, gelu's tanh form; else the
 * same values from built-in ops) and leaky_relu; helpers shared by nn_conv.c, nn_pool.c
 * and nn_loss.c. Convolution, pooling and losses have their own files. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "functional.h"

/* ---- shared helpers ------------------------------------------------------------------------ */

weft_tensor *weft_nn_attach(struct weft_node *node, weft_tensor *out)
{
    if (!node)
        return NULL;
    if (!out) {
        weft_node_abandon(node);
        return NULL;
    }
    return weft_node_finish(node, 1, &out) == 0 ? out : NULL;
}

/* Returns `call` evaluated inside a scope: its temporaries are released, the result
 * survives with one reference recorded in the caller's scope (if any). */
#define IN_SCOPE(call)                                                                        \
    do {                                                                                      \
        weft_scope_push();                                                                    \
        weft_tensor *result__ = weft_tensor_retain(call);                                     \
        weft_scope_pop();                                                                     \
        return weft_autorelease(result__);                                                  \
    } while (0)

/* [1, C, 1, ...] view of a per-channel vector for an input of ndim dims. */
static weft_tensor *channel_view(weft_tensor *v, int ndim)
{
    int64_t shape[WEFT_MAX_DIMS];
    for (int d = 0; d < ndim; d++)
        shape[d] = d == 1 ? -1 : 1;
    return weft_reshape(v, ndim, shape);
}

/* [N, C, H, W] laid out as [N, H, W, C] (channels last), size-1 dims aside. */
static bool is_channels_last(const weft_tensor *x)
{
    static const int order[4] = {1, 3, 2, 0}; /* fastest first */
    if (x->ndim != 4 || x->layout != WEFT_LAYOUT_STRIDED || weft_tensor_is_contiguous(x))
        return false;
    int64_t expected = 1;
    for (int i = 0; i < 4; i++) {
        int d = order[i];
        if (x->shape[d] == 1)
            continue;
        if (x->stride[d] != expected)
            return false;
        expected *= x->shape[d];
    }
    return true;
}

NN_INTERNAL weft_tensor *nn_like_memory_format(const weft_tensor *x, weft_tensor *y)
{
    if (!x || !y || y->ndim != 4 || !is_channels_last(x))
        return y;
    const int64_t *s = y->shape;
    const int64_t strides[4] = {s[1] * s[2] * s[3], 1, s[3] * s[1], s[1]};
    weft_tensor *cl = weft_empty_dense_strided(4, s, strides, y->dtype, y->device);
    return cl && weft_copy_(cl, y) == 0 ? cl : NULL;
}

NN_INTERNAL int nn_named_op(int *cached, const char *name)
{
    int op = __atomic_load_n(cached, __ATOMIC_RELAXED);
    if (op < 0) {
        op = weft_op_register(name);
        __atomic_store_n(cached, op, __ATOMIC_RELAXED);
    }
    return op;
}

NN_INTERNAL bool nn_have_kernel(int op, const weft_tensor *t)
{
    return op >= 0 && weft_kernel_lookup(op, t->device.type, WEFT_LAYOUT_STRIDED, t->dtype);
}

/* ---- linear ------------------------------------------------------------------------------- */

static weft_tensor *linear_addmm(weft_tensor *x, weft_tensor *w, weft_tensor *b);
static weft_tensor *linear_node(const char *name, weft_tensor *x, weft_tensor *w,
                                weft_tensor *b);

/* PyTorch 1.13's linear is one addmm for a 2-D input with a bias, and for a contiguous
 * 3-D one viewed as 2-D (its grad_fn then ViewBackward0 over AddmmBackward0); anything
 * else is matmul and add. */
static bool linear_is_addmm(const weft_tensor *x, const weft_tensor *w, const weft_tensor *b)
{
    return b && b->ndim == 1 && w->ndim == 2 && x->dtype == w->dtype && b->dtype == w->dtype &&
           x->layout == WEFT_LAYOUT_STRIDED && w->layout == WEFT_LAYOUT_STRIDED &&
           b->layout == WEFT_LAYOUT_STRIDED &&
           (x->ndim == 2 || (x->ndim == 3 && weft_tensor_is_contiguous(x)));
}

static weft_tensor *linear_in_scope(weft_tensor *x, weft_tensor *w, weft_tensor *b)
{
    if (linear_is_addmm(x, w, b)) {
        if (x->ndim == 2)
            return linear_addmm(x, w, b);
        const int64_t flat[2] = {x->shape[0] * x->shape[1], x->shape[2]};
        weft_tensor *y = linear_addmm(weft_view(x, 2, flat), w, b);
        const int64_t shape[3] = {x->shape[0], x->shape[1], w->shape[0]};
        return weft_view(y, 3, shape);
    }
    /* x @ w.t(): the transposed view goes to BLAS as a transpose, no copy. Leading dims
     * are folded into one so the product is a single GEMM (and its backward too). */
    weft_tensor *wt = weft_t(w);
    weft_tensor *y;
    if (x->ndim > 2) {
        const int64_t flat[2] = {-1, x->shape[x->ndim - 1]};
        if (!b && w->ndim == 2 && x->dtype == w->dtype)
            return linear_node("UnsafeViewBackward0", x, w, NULL);
        y = weft_matmul(weft_reshape(x, 2, flat), wt);
        if (y) {
            int64_t shape[WEFT_MAX_DIMS];
            memcpy(shape, x->shape, sizeof shape);
            shape[x->ndim - 1] = y->shape[1];
            y = weft_reshape(y, x->ndim, shape);
        }
    } else {
        y = weft_matmul(x, wt);
    }
    return b ? weft_add(y, b) : y;
}

weft_tensor *weft_linear(weft_tensor *x, weft_tensor *weight, weft_tensor *bias)
{
    if (!x || !weight)
        return NULL;
    weft_tensor *in[3] = {x, weight, bias};
    WEFT_AUTOCAST_RETURN("linear", 3, in, weft_linear(in[0], in[1], in[2]));
    IN_SCOPE(linear_in_scope(x, weight, bias));
}

/* ---- linear + relu, linear + gelu -----------------------------------------------------------
 * act(x w^T + b) under one node: x flattened to [M, in], one GEMM, then the bias and the
 * activation in one pass by the backend's named op over the GEMM's output h (where the
 * backend has none, the same values from built-in ops in two). The node saves 0 x as
 * [M, in], 1 the weight, 2 the tensor the activation's derivative reads (ReLU: the output,
 * its mask is y > 0; GELU: the pre-activation h); ints[0] the activation's argument (GELU's
 * approximate, 0 for ReLU). Arguments the fused path does not take go to the composite of
 * recorded ops. */

struct linear_act {
    const char *op_name;   /* the named op of weft/kernel.h: in[0] the bias, out[0] h */
    int op;                /* its id, -1 until registered (nn_named_op) */
    bool floating_only;    /* the fused path for floating dtypes only */
    const char *node_name;
    weft_backward_fn backward;
    /* act(linear(x, w, b)) of recorded ops */
    weft_tensor *(*composite)(weft_tensor *pre, int arg);
    /* With grad mode off: biases and activates h = x w^T [M, out] by op (-1: no kernel
     * here, built-in ops); returns the output and sets *saved to slot 2's tensor. */
    weft_tensor *(*epilogue)(int op, weft_tensor *h, weft_tensor *b, int arg,
                             weft_tensor **saved);
};

/* The backward's common part, from gpre = d loss / d (x w^T + b) [M, out]; bias_grad is
 * gpre's column sums where a fused kernel made them with gpre, else NULL. */
static int linear_act_grads(struct weft_node *node, weft_tensor *gpre, weft_tensor *bias_grad,
                            weft_tensor **grad_inputs)
{
    if (!gpre)
        return weft_error_code();
    weft_tensor *x = weft_node_saved(node, 0), *w = weft_node_saved(node, 1);
    if (weft_node_needs_input_grad(node, 0)) {
        weft_tensor *gx = weft_matmul(gpre, w); /* [M, out] x [out, in] */
        grad_inputs[0] = weft_reshape(gx, weft_node_input_ndim(node, 0),
                                      weft_node_input_shape(node, 0));
        if (!grad_inputs[0])
            return weft_error_code();
    }
    /* g^T x: [out, in], laid out as the weight is, so its .grad needs no copy */
    if (weft_node_needs_input_grad(node, 1) && !(grad_inputs[1] = weft_matmul(weft_t(gpre), x)))
        return weft_error_code();
    int rows = 0;
    if (weft_node_needs_input_grad(node, 2) &&
        !(grad_inputs[2] = bias_grad ? bias_grad : weft_sum(gpre, 1, &rows, false)))
        return weft_error_code();
    return 0;
}

/* Slots 0 and 1: x only for the weight's gradient, the weight only for x's, as PyTorch
 * saves what a gradient to compute reads (x @ W^T with W frozen survives x.add_(1)). */
static int linear_save(struct weft_node *node, weft_tensor *x2, weft_tensor *w)
{
    int rc = weft_node_save(node, 0, weft_node_needs_input_grad(node, 1) ? x2 : NULL);
    return rc ? rc : weft_node_save(node, 1, weft_node_needs_input_grad(node, 0) ? w : NULL);
}

/* g [..., out] folded to [M, out] for the shared formulas. */
static int linear_node_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                                weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0];
    if (!g)
        return 0;
    const int64_t flat[2] = {-1, g->ndim > 0 ? g->shape[g->ndim - 1] : 1};
    return linear_act_grads(node, g->ndim == 2 ? g : weft_reshape(g, 2, flat), NULL, grad_inputs);
}

/* x w^T (+ b) as one GEMM over x folded to [M, in], under one node `name` (saved: 0 x as
 * [M, in], 1 w) whose backward shares the fused layers' formulas: PyTorch's addmm for a
 * 2-D input with a bias, and its matmul's _unsafe_view for a batched one without. */
static weft_tensor *linear_node(const char *name, weft_tensor *x, weft_tensor *w,
                                weft_tensor *b)
{
    if (!x)
        return NULL;
    weft_tensor *in[3] = {x, w, b};
    int nin = b ? 3 : 2;
    bool rec = weft_autograd_needed(nin, in);
    bool prev = weft_no_grad_begin();
    const int64_t flat[2] = {-1, x->shape[x->ndim - 1]};
    weft_tensor *x2 = x->ndim == 2 ? x : weft_reshape(x, 2, flat);
    weft_tensor *y = weft_matmul(x2, weft_t(w));
    if (b)
        y = weft_add(y, b);
    if (y && x->ndim != 2) {
        int64_t shape[WEFT_MAX_DIMS];
        memcpy(shape, x->shape, sizeof shape);
        shape[x->ndim - 1] = w->shape[0];
        y = weft_reshape(y, x->ndim, shape);
    }
    weft_grad_mode_restore(prev);
    if (!y || !rec)
        return y;
    struct weft_node *node = weft_node_create(name, linear_node_backward, nin, in, 2);
    if (!node)
        return NULL;
    if (linear_save(node, x2, w) != 0) {
        weft_node_abandon(node);
        return NULL;
    }
    return weft_nn_attach(node, y);
}

static weft_tensor *linear_addmm(weft_tensor *x, weft_tensor *w, weft_tensor *b)
{
    return linear_node("AddmmBackward0", x, w, b);
}

static weft_tensor *linear_act_in_scope(struct linear_act *a, weft_tensor *x, weft_tensor *w,
                                        weft_tensor *b, int arg)
{
    if (!b || b->ndim != 1 || w->ndim != 2 || x->ndim < 1 || b->dtype != w->dtype ||
        x->dtype != w->dtype || (a->floating_only && !weft_dtype_is_floating(x->dtype)) ||
        !weft_tensor_is_contiguous(b) || b->layout != WEFT_LAYOUT_STRIDED ||
        x->layout != WEFT_LAYOUT_STRIDED)
        return a->composite(linear_in_scope(x, w, b), arg);
    const int64_t flat[2] = {-1, x->shape[x->ndim - 1]};
    weft_tensor *in[3] = {x, w, b};
    bool rec = weft_autograd_needed(3, in);
    bool prev = weft_no_grad_begin();
    weft_tensor *x2 = weft_reshape(x, 2, flat);
    weft_tensor *h = x2 ? weft_matmul(x2, weft_t(w)) : NULL;
    weft_tensor *y = NULL, *saved = NULL;
    if (h) {
        int op = nn_named_op(&a->op, a->op_name);
        if (!weft_tensor_is_contiguous(h) || !weft_device_equal(h->device, b->device) ||
            !nn_have_kernel(op, h))
            op = -1;
        y = a->epilogue(op, h, b, arg, &saved);
    }
    weft_grad_mode_restore(prev);
    if (!y)
        return NULL;
    if (rec) {
        struct weft_node *node = weft_node_create(a->node_name, a->backward, 3, in, 3);
        if (!node)
            return NULL;
        weft_node_ints(node)[0] = arg;
        if (linear_save(node, x2, w) != 0 || weft_node_save(node, 2, saved) != 0) {
            weft_node_abandon(node);
            return NULL;
        }
        if (!(y = weft_nn_attach(node, y)))
            return NULL;
    }
    int64_t shape[WEFT_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 1] = w->shape[0];
    return x->ndim == 2 ? y : weft_reshape(y, x->ndim, shape);
}

/* ReLU's backward and the bias gradient in one pass (THRESHOLD_BACKWARD_SUM) where g's
 * backend has it and both operands suit it: 1 with *gpre and *bias_grad set, 0 to take the
 * two passes, or an error. */
static int relu_backward_with_bias_grad(weft_tensor *g, weft_tensor *y, weft_tensor **gpre,
                                        weft_tensor **bias_grad)
{
    static int cached = -1;
    int op = nn_named_op(&cached, WEFT_OP_THRESHOLD_BACKWARD_SUM_NAME);
    if (!g || g->dtype != y->dtype || g->layout != WEFT_LAYOUT_STRIDED ||
        !weft_device_equal(g->device, y->device) || !weft_tensor_is_contiguous(g) ||
        !weft_tensor_is_contiguous(y) || !nn_have_kernel(op, g))
        return 0;
    weft_tensor *out = weft_empty(2, g->shape, g->dtype, g->device);
    weft_tensor *sum = out ? weft_empty(1, g->shape + 1, g->dtype, g->device) : NULL;
    if (!sum)
        return weft_error_code();
    struct weft_op_call c = {.op = op, .nin = 2, .nout = 2, .in = {g, y}, .out = {out, sum},
                             .scalar = {0}};
    if (weft_dispatch(&c) != 0)
        return weft_error_code();
    *gpre = out;
    *bias_grad = sum;
    return 1;
}

/* ReLU: in place over h, which is then the output, saved (ADD_BIAS_RELU). */
static int linear_relu_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                                weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0];
    if (!g)
        return 0;
    weft_tensor *y = weft_node_saved(node, 2);
    const int64_t flat[2] = {-1, y->shape[1]};
    weft_tensor *g2 = weft_reshape(g, 2, flat), *gpre = NULL, *bias_grad = NULL;
    if (weft_node_needs_input_grad(node, 2)) {
        int fused = relu_backward_with_bias_grad(g2, y, &gpre, &bias_grad);
        if (fused < 0)
            return fused;
    }
    if (!gpre)
        gpre = weft_threshold_backward(g2, y, 0);
    return linear_act_grads(node, gpre, bias_grad, grad_inputs);
}

static weft_tensor *relu_composite(weft_tensor *pre, int arg)
{
    (void)arg;
    return weft_relu(pre);
}

static weft_tensor *relu_epilogue(int op, weft_tensor *h, weft_tensor *b, int arg,
                                  weft_tensor **saved)
{
    (void)arg;
    if (op >= 0) {
        struct weft_op_call c = {.op = op, .nin = 1, .nout = 1, .in = {b}, .out = {h}};
        if (weft_dispatch(&c) != 0)
            return NULL;
    } else {
        h = weft_relu_(weft_add_(h, b));
    }
    return *saved = h;
}

static struct linear_act linear_relu_act = {
    .op_name = WEFT_OP_ADD_BIAS_RELU_NAME, .op = -1, .floating_only = false,
    .node_name = "ReluBackward0", .backward = linear_relu_backward,
    .composite = relu_composite, .epilogue = relu_epilogue};

weft_tensor *weft_linear_relu(weft_tensor *x, weft_tensor *weight, weft_tensor *bias)
{
    if (!x || !weight)
        return NULL;
    weft_tensor *in[3] = {x, weight, bias};
    WEFT_AUTOCAST_RETURN("linear", 3, in, weft_linear_relu(in[0], in[1], in[2]));
    IN_SCOPE(linear_act_in_scope(&linear_relu_act, x, weight, bias, 0));
}

/* GELU: its derivative needs its input, so h (biased in place) keeps the pre-activation
 * and is saved; the output is a new tensor (ADD_BIAS_GELU). */
static int linear_gelu_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                                weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0];
    if (!g)
        return 0;
    weft_tensor *h = weft_node_saved(node, 2);
    const int64_t flat[2] = {-1, h->shape[1]};
    return linear_act_grads(node, weft_gelu_backward(weft_reshape(g, 2, flat), h,
                                                     (int)weft_node_ints(node)[0]),
                            NULL, grad_inputs);
}

static weft_tensor *gelu_composite(weft_tensor *pre, int approximate)
{
    return weft_gelu_approximate(pre, (enum weft_gelu_approximate)approximate);
}

static weft_tensor *gelu_epilogue(int op, weft_tensor *h, weft_tensor *b, int approximate,
                                  weft_tensor **saved)
{
    weft_tensor *y;
    if (op >= 0) {
        y = weft_empty(2, h->shape, h->dtype, h->device);
        struct weft_op_call c = {.op = op, .nin = 1, .nout = 2, .in = {b}, .out = {h, y},
                                 .ints = {approximate}};
        if (y && weft_dispatch(&c) != 0)
            y = NULL;
    } else {
        h = weft_add_(h, b);
        y = weft_gelu_approximate(h, (enum weft_gelu_approximate)approximate);
    }
    *saved = h;
    return y;
}

static struct linear_act linear_gelu_act = {
    .op_name = WEFT_OP_ADD_BIAS_GELU_NAME, .op = -1, .floating_only = true,
    .node_name = "GeluBackward0", .backward = linear_gelu_backward,
    .composite = gelu_composite, .epilogue = gelu_epilogue};

weft_tensor *weft_linear_gelu(weft_tensor *x, weft_tensor *weight, weft_tensor *bias,
                              enum weft_gelu_approximate approximate)
{
    if (!x || !weight)
        return NULL;
    if (approximate != WEFT_GELU_NONE && approximate != WEFT_GELU_TANH) {
        weft_error_set(WEFT_ERR_VALUE, "approximate argument must be either none or tanh.");
        return NULL;
    }
    weft_tensor *in[3] = {x, weight, bias};
    WEFT_AUTOCAST_RETURN("linear", 3, in, weft_linear_gelu(in[0], in[1], in[2], approximate));
    IN_SCOPE(linear_act_in_scope(&linear_gelu_act, x, weight, bias, approximate));
}

/* ---- batch norm ------------------------------------------------------------------------------ */

static int check_channels(const char *name, const weft_tensor *t, int64_t C)
{
    if (!t || weft_tensor_numel(t) == C)
        return 0;
    return weft_error_set(WEFT_ERR_RUNTIME, "%s should contain %lld elements not %lld", name,
                          (long long)C, (long long)weft_tensor_numel(t));
}

/* running = (1 - m) * running + m * batch, in place and unrecorded. */
static int update_running(weft_tensor *running, weft_tensor *batch, double momentum)
{
    if (!running)
        return 0;
    bool prev = weft_no_grad_begin();
    weft_tensor *step = weft_mul_scalar(weft_reshape(batch, 1, (const int64_t[]){-1}), momentum);
    weft_tensor *r = weft_add_(weft_mul_scalar_(running, 1 - momentum), step);
    weft_grad_mode_restore(prev);
    return r ? 0 : weft_error_code();
}

/* PyTorch 1.13's cpu check_mixed_data_type: parameters and statistics of the input's dtype,
 * or a bfloat16 input with float32 ones. */
static int check_bn_dtypes(const weft_tensor *x, weft_tensor *const *params, int n)
{
    bool mixed = false, all_float = true;
    for (int i = 0; i < n; i++)
        if (params[i]) {
            mixed = mixed || params[i]->dtype != x->dtype;
            all_float = all_float && params[i]->dtype == WEFT_F32;
        }
    if (!mixed)
        return 0;
    if (!all_float)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "mixed dtype (CPU): expect parameter to have scalar type of Float");
    if (x->dtype != WEFT_BF16)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "mixed dtype (CPU): expect input to have scalar type of BFloat16");
    return 0;
}

/* One node, NativeBatchNormBackward0, as PyTorch's, over (x, weight, bias), with the
 * gradients in closed form. Saved: 0 x, 1 weight, 2 the mean and 3 1/sqrt(var + eps) as
 * [1, C, 1...] (the batch's when training, the running ones otherwise), all in the compute
 * dtype; ints[0] training. With xh = (x - mean) / sqrt(var + eps), sums over every dim but
 * the channels: dbias = sum(g), dweight = sum(g xh), and dx = w invstd (g - mean(g) -
 * xh mean(g xh)) when training (the statistics depend on x), w invstd g otherwise. */
static int batch_norm_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                               weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0];
    if (!g)
        return 0;
    weft_tensor *x = weft_node_saved(node, 0), *w = weft_node_saved(node, 1);
    weft_tensor *mean = weft_node_saved(node, 2), *invstd = weft_node_saved(node, 3);
    bool training = weft_node_ints(node)[0] != 0;
    int dims[WEFT_MAX_DIMS], nd = 0;
    for (int d = 0; d < x->ndim; d++)
        if (d != 1)
            dims[nd++] = d;
    if (g->dtype != x->dtype)
        g = weft_to_dtype(g, x->dtype);
    weft_tensor *xh = weft_mul(weft_sub(x, mean), invstd);
    weft_tensor *sum_g = weft_sum(g, nd, dims, true), *sum_gxh = weft_sum(weft_mul(g, xh), nd, dims, true);
    if (weft_node_needs_input_grad(node, 0)) {
        weft_tensor *scale = w ? weft_mul(invstd, channel_view(w, x->ndim)) : invstd;
        weft_tensor *dx = g;
        if (training) {
            double n = (double)(weft_tensor_numel(x) / (x->shape[1] ? x->shape[1] : 1));
            dx = weft_sub(weft_sub(g, weft_div_scalar(sum_g, n)),
                          weft_mul(xh, weft_div_scalar(sum_gxh, n)));
        }
        if (!(grad_inputs[0] = weft_mul(dx, scale)))
            return weft_error_code();
    }
    const int64_t flat = -1;
    if (weft_node_needs_input_grad(node, 1) && !(grad_inputs[1] = weft_reshape(sum_gxh, 1, &flat)))
        return weft_error_code();
    if (weft_node_needs_input_grad(node, 2) && !(grad_inputs[2] = weft_reshape(sum_g, 1, &flat)))
        return weft_error_code();
    return 0;
}

static weft_tensor *batch_norm_in_scope(weft_tensor *x, weft_tensor *rm, weft_tensor *rv,
                                        weft_tensor *w, weft_tensor *b, bool training,
                                        double momentum, double eps)
{
    char s[160];
    if (x->ndim < 2) {
        weft_error_set(WEFT_ERR_VALUE, "batch_norm: expected 2D or higher input (got %dD input)",
                       x->ndim);
        return NULL;
    }
    int64_t C = x->shape[1];
    weft_tensor *params[4] = {w, b, rm, rv};
    if (check_channels("running_mean", rm, C) || check_channels("running_var", rv, C) ||
        check_channels("weight", w, C) || check_channels("bias", b, C) ||
        check_bn_dtypes(x, params, 4))
        return NULL;
    int dims[WEFT_MAX_DIMS], nd = 0;
    for (int d = 0; d < x->ndim; d++)
        if (d != 1)
            dims[nd++] = d;
    weft_tensor *in[3] = {x, w, b};
    bool rec = weft_autograd_needed(3, in);
    bool prev = weft_no_grad_begin();
    /* a bfloat16 input with float32 parameters computes in float32, its result in bfloat16 */
    enum weft_dtype ct = w && w->dtype != x->dtype ? w->dtype : b && b->dtype != x->dtype ? b->dtype
                                                                                        : x->dtype;
    weft_tensor *xc = weft_to_dtype(x, ct), *mean = NULL, *invstd = NULL;
    int rc = 0;
    if (training) {
        int64_t n = weft_tensor_numel(x) / (C ? C : 1);
        if (n <= 1) {
            weft_error_set(WEFT_ERR_VALUE,
                           "Expected more than 1 value per channel when training, got input size %s",
                           weft_shape_str(x->ndim, x->shape, s, sizeof s));
            rc = -1;
        } else {
            mean = weft_mean(xc, nd, dims, true);
            weft_tensor *var = weft_var(xc, nd, dims, 0, true);
            invstd = weft_rsqrt(weft_add_scalar(var, eps));
            /* The running variance is the unbiased estimate, as PyTorch keeps it. */
            if (!invstd || update_running(rm, mean, momentum) != 0 ||
                update_running(rv, weft_mul_scalar(var, (double)n / (double)(n - 1)), momentum) != 0)
                rc = -1;
        }
    } else if (!rm || !rv) {
        weft_error_set(WEFT_ERR_VALUE, "running_mean and running_var must be defined in evaluation mode");
        rc = -1;
    } else {
        mean = weft_to_dtype(channel_view(rm, x->ndim), ct);
        invstd = weft_rsqrt(weft_add_scalar(weft_to_dtype(channel_view(rv, x->ndim), ct), eps));
    }
    weft_tensor *y = rc == 0 && invstd ? weft_mul(weft_sub(xc, mean), invstd) : NULL;
    if (y && w)
        y = weft_mul(y, channel_view(w, x->ndim));
    if (y && b)
        y = weft_add(y, channel_view(b, x->ndim));
    if (y && y->dtype != x->dtype)
        y = weft_to_dtype(y, x->dtype);
    weft_grad_mode_restore(prev);
    if (!y || !rec)
        return y;
    struct weft_node *node = weft_node_create("NativeBatchNormBackward0", batch_norm_backward, 3, in, 4);
    if (!node)
        return NULL;
    weft_node_ints(node)[0] = training;
    if (weft_node_save(node, 0, xc) != 0 || weft_node_save(node, 1, w) != 0 ||
        weft_node_save(node, 2, mean) != 0 || weft_node_save(node, 3, invstd) != 0) {
        weft_node_abandon(node);
        return NULL;
    }
    return weft_nn_attach(node, y);
}

weft_tensor *weft_batch_norm(weft_tensor *x, weft_tensor *running_mean, weft_tensor *running_var,
                             weft_tensor *weight, weft_tensor *bias, bool training,
                             double momentum, double eps)
{
    if (!x)
        return NULL;
    /* The running statistics are updated in place: they are not cast. */
    weft_tensor *in[3] = {x, weight, bias};
    WEFT_AUTOCAST_RETURN("batch_norm", 3, in,
                         weft_batch_norm(in[0], running_mean, running_var, in[1], in[2], training,
                                         momentum, eps));
    IN_SCOPE(batch_norm_in_scope(x, running_mean, running_var, weight, bias, training, momentum,
                                 eps));
}

/* ---- layer norm ----------------------------------------------------------------------------- */

/* "[*, 3, 4]" for PyTorch's message. */
static const char *star_shape(int ndim, const int64_t *shape, char *buf, size_t size)
{
    int n = snprintf(buf, size, "[*");
    for (int d = 0; d < ndim && n > 0 && (size_t)n < size; d++)
        n += snprintf(buf + n, size - (size_t)n, ", %lld", (long long)shape[d]);
    if (n > 0 && (size_t)n < size)
        snprintf(buf + n, size - (size_t)n, "]");
    return buf;
}

/* weight and bias: normalized_shape's shape and the input's dtype (PyTorch 1.13 refuses a
 * float64 weight for a float32 input, "expected scalar type Float but found Double"). */
static int check_affine(const char *name, const weft_tensor *t, const weft_tensor *x, int ndims,
                        const int64_t *shape)
{
    if (t && (t->ndim != ndims || memcmp(t->shape, shape, (size_t)ndims * sizeof *shape) != 0)) {
        char a[160], b[160];
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "Expected %s to be of same shape as normalized_shape, but got %s of "
                              "shape %s and normalized_shape = %s",
                              name, name, weft_shape_str(t->ndim, t->shape, a, sizeof a),
                              weft_shape_str(ndims, shape, b, sizeof b));
    }
    if (t && t->dtype != x->dtype)
        return weft_error_set(WEFT_ERR_RUNTIME, "expected scalar type %s but found %s",
                              weft_dtype_torch_name(x->dtype), weft_dtype_torch_name(t->dtype));
    return 0;
}

static int native_layer_norm_op(void)
{
    static int cached = -1;
    return nn_named_op(&cached, WEFT_OP_NATIVE_LAYER_NORM_NAME);
}

static int native_layer_norm_backward_op(void)
{
    static int cached = -1;
    return nn_named_op(&cached, WEFT_OP_NATIVE_LAYER_NORM_BACKWARD_NAME);
}

/* The fused kernels take strided tensors of one floating dtype on one device, and need
 * both directions on the backend. */
static bool layer_norm_fusable(const weft_tensor *x, const weft_tensor *w, const weft_tensor *b)
{
    const weft_tensor *affine[2] = {w, b};
    for (int i = 0; i < 2; i++)
        if (affine[i] && (affine[i]->dtype != x->dtype || affine[i]->layout != WEFT_LAYOUT_STRIDED ||
                          !weft_device_equal(affine[i]->device, x->device)))
            return false;
    return weft_dtype_is_floating(x->dtype) && x->layout == WEFT_LAYOUT_STRIDED &&
           nn_have_kernel(native_layer_norm_op(), x) &&
           nn_have_kernel(native_layer_norm_backward_op(), x);
}

/* Saved: 0 x as a contiguous [R, D], 1 the weight as a contiguous [D] (empty without
 * one), 2 the forward's stats [2, R] (mean, rstd). One native_layer_norm_backward pass
 * gives all three gradients. */
static int layer_norm_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                               weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0];
    if (!g)
        return 0;
    weft_tensor *x2 = weft_node_saved(node, 0), *w = weft_node_saved(node, 1);
    weft_tensor *stats = weft_node_saved(node, 2);
    const int64_t R = x2->shape[0], D = x2->shape[1];
    weft_tensor *g2 = weft_contiguous(weft_reshape(g, 2, (const int64_t[]){R, D}));
    weft_tensor *dx = weft_empty(2, x2->shape, x2->dtype, x2->device);
    bool affine = weft_node_needs_input_grad(node, 1) || weft_node_needs_input_grad(node, 2);
    weft_tensor *dwb = affine ? weft_empty(2, (const int64_t[]){2, D}, x2->dtype, x2->device) : NULL;
    if (!g2 || !dx || (affine && !dwb))
        return weft_error_code();
    struct weft_op_call c = {.op = native_layer_norm_backward_op(), .nin = 4,
                             .nout = affine ? 2 : 1, .in = {g2, x2, stats, w},
                             .out = {dx, dwb}};
    if (weft_dispatch(&c) != 0)
        return weft_error_code();
    for (int i = 0; i < 3; i++) {
        if (!weft_node_needs_input_grad(node, i))
            continue;
        weft_tensor *r = i == 0 ? dx : weft_select(dwb, 0, i - 1);
        grad_inputs[i] = weft_reshape(r, weft_node_input_ndim(node, i), weft_node_input_shape(node, i));
        if (!grad_inputs[i])
            return weft_error_code();
    }
    return 0;
}

/* y, mean and rstd in one native_layer_norm call over x seen as [R, D], D the product of
 * the normalised dims; one node NativeLayerNormBackward0, as PyTorch's. */
static weft_tensor *layer_norm_fused(weft_tensor *x, int ndims, weft_tensor *w, weft_tensor *b,
                                     double eps)
{
    int64_t D = 1;
    for (int i = x->ndim - ndims; i < x->ndim; i++)
        D *= x->shape[i];
    const int64_t R = D > 0 ? weft_tensor_numel(x) / D : 0;
    weft_tensor *in[3] = {x, w, b};
    bool rec = weft_autograd_needed(3, in);
    bool prev = weft_no_grad_begin();
    weft_tensor *x2 = weft_contiguous(weft_reshape(x, 2, (const int64_t[]){R, D}));
    weft_tensor *wc = w ? weft_contiguous(weft_reshape(w, 1, &D)) : NULL;
    weft_tensor *bc = b ? weft_contiguous(weft_reshape(b, 1, &D)) : NULL;
    enum weft_dtype sdt = x->dtype == WEFT_F64 ? WEFT_F64 : WEFT_F32;
    /* y has x's shape (not a view, so in-place ops may follow); the kernel sees [R, D] */
    weft_tensor *y = weft_empty(x->ndim, x->shape, x->dtype, x->device);
    weft_tensor *y2 = weft_reshape(y, 2, (const int64_t[]){R, D});
    weft_tensor *stats = weft_empty(2, (const int64_t[]){2, R}, sdt, x->device);
    bool ok = x2 && (!w || wc) && (!b || bc) && y2 && stats;
    if (ok) {
        struct weft_op_call c = {.op = native_layer_norm_op(), .nin = 3, .nout = 2,
                                 .in = {x2, wc, bc}, .out = {y2, stats}, .scalar = {eps}};
        ok = weft_dispatch(&c) == 0;
    }
    y = ok ? y : NULL;
    weft_grad_mode_restore(prev);
    if (!y || !rec)
        return y;
    struct weft_node *node =
        weft_node_create("NativeLayerNormBackward0", layer_norm_backward, 3, in, 3);
    if (!node)
        return NULL;
    if (weft_node_save(node, 0, x2) != 0 || (wc && weft_node_save(node, 1, wc) != 0) ||
        weft_node_save(node, 2, stats) != 0) {
        weft_node_abandon(node);
        return NULL;
    }
    return weft_nn_attach(node, y);
}

static weft_tensor *layer_norm_in_scope(weft_tensor *x, int ndims, const int64_t *shape,
                                        weft_tensor *w, weft_tensor *b, double eps)
{
    char ns[160], xs[160], st[160];
    if (ndims < 1 || ndims > WEFT_MAX_DIMS || !shape) {
        weft_error_set(WEFT_ERR_VALUE,
                       "Expected normalized_shape to be at least 1-dimensional, i.e., containing at "
                       "least one element, but got normalized_shape = []");
        return NULL;
    }
    if (x->ndim < ndims ||
        memcmp(x->shape + x->ndim - ndims, shape, (size_t)ndims * sizeof *shape) != 0) {
        weft_error_set(WEFT_ERR_RUNTIME,
                       "Given normalized_shape=%s, expected input with shape %s, but got input of "
                       "size%s",
                       weft_shape_str(ndims, shape, ns, sizeof ns),
                       star_shape(ndims, shape, st, sizeof st),
                       weft_shape_str(x->ndim, x->shape, xs, sizeof xs));
        return NULL;
    }
    if (check_affine("weight", w, x, ndims, shape) || check_affine("bias", b, x, ndims, shape))
        return NULL;
    if (layer_norm_fusable(x, w, b))
        return layer_norm_fused(x, ndims, w, b, eps);
    /* no kernel on this backend: six recorded ops, the same values */
    int dims[WEFT_MAX_DIMS];
    for (int i = 0; i < ndims; i++)
        dims[i] = x->ndim - ndims + i;
    weft_tensor *mean = weft_mean(x, ndims, dims, true);
    weft_tensor *var = weft_var(x, ndims, dims, 0, true);
    weft_tensor *y = weft_mul(weft_sub(x, mean), weft_rsqrt(weft_add_scalar(var, eps)));
    if (w)
        y = weft_mul(y, w);
    if (b)
        y = weft_add(y, b);
    return y;
}

weft_tensor *weft_layer_norm(weft_tensor *x, int ndims, const int64_t *normalized_shape,
                             weft_tensor *weight, weft_tensor *bias, double eps)
{
    if (!x)
        return NULL;
    weft_tensor *in[3] = {x, weight, bias};
    WEFT_AUTOCAST_RETURN("layer_norm", 3, in,
                         weft_layer_norm(in[0], ndims, normalized_shape, in[1], in[2], eps));
    IN_SCOPE(layer_norm_in_scope(x, ndims, normalized_shape, weight, bias, eps));
}

/* ---- dropout ------------------------------------------------------------------------------- */

static weft_tensor *dropout_in_scope(weft_tensor *x, double p, bool training)
{
    if (!(p >= 0 && p <= 1)) {
        char buf[32];
        weft_error_set(WEFT_ERR_VALUE, "dropout probability has to be between 0 and 1, but got %s",
                       weft_repr_float(p, buf, sizeof buf));
        return NULL;
    }
    if (!training || p == 0)
        return weft_autorelease(weft_tensor_retain(x));
    if (!weft_dtype_is_floating(x->dtype)) {
        weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "dropout: expected a floating tensor, got %s",
                       weft_dtype_torch_name(x->dtype));
        return NULL;
    }
    if (p == 1) /* PyTorch multiplies by zero: the result still has x's history */
        return weft_mul_scalar(x, 0);
    /* Keep with probability 1 - p (Philox uniforms), scale the kept by 1 / (1 - p). */
    enum weft_dtype udt = x->dtype == WEFT_F64 ? WEFT_F64 : WEFT_F32;
    weft_tensor *u = weft_rand(x->ndim, x->shape, udt, x->device);
    weft_tensor *keep = weft_to_dtype(weft_lt_scalar(u, 1 - p), x->dtype);
    return weft_mul(x, weft_mul_scalar(keep, 1 / (1 - p)));
}

weft_tensor *weft_dropout(weft_tensor *x, double p, bool training)
{
    if (!x)
        return NULL;
    IN_SCOPE(dropout_in_scope(x, p, training));
}

/* ---- embedding ------------------------------------------------------------------------------ */

static int embedding_dense_backward_op(void)
{
    static int cached = -1;
    return nn_named_op(&cached, WEFT_OP_EMBEDDING_DENSE_BACKWARD_NAME);
}

/* Saved: 0 the indices as a contiguous int64 [N]; ints[0] padding_idx's row, or -1. The
 * weight's gradient is the output's
 * gradient [N, D] index-added into zeros [num_weights, D]: one embedding_dense_backward
 * pass where the backend has it, else scatter_add along dim 0 (PyTorch's
 * embedding_dense_backward without padding_idx or scale_grad_by_freq). */
static int embedding_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                              weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0], *idx = weft_node_saved(node, 0);
    if (!g)
        return 0;
    const int64_t *wshape = weft_node_input_shape(node, 0);
    const int64_t N = idx->shape[0], D = wshape[1];
    weft_tensor *g2 = weft_contiguous(weft_reshape(g, 2, (const int64_t[]){N, D}));
    if (!g2)
        return weft_error_code();
    int op = embedding_dense_backward_op();
    if (nn_have_kernel(op, g2)) {
        weft_tensor *out = weft_empty(2, wshape, g2->dtype, g2->device);
        if (!out)
            return weft_error_code();
        struct weft_op_call c = {.op = op, .nin = 2, .nout = 1, .in = {g2, idx}, .out = {out}};
        if (weft_dispatch(&c) != 0)
            return weft_error_code();
        grad_inputs[0] = out;
    } else {
        weft_tensor *ix = weft_expand(weft_reshape(idx, 2, (const int64_t[]){N, 1}), 2,
                                      (const int64_t[]){N, D});
        weft_tensor *zeros = weft_zeros(2, wshape, g2->dtype, g2->device);
        grad_inputs[0] = weft_scatter_add(zeros, 0, ix, g2);
    }
    int64_t pad = weft_node_ints(node)[0];
    if (grad_inputs[0] && pad >= 0) /* padding_idx's row gets no gradient */
        grad_inputs[0] = weft_index_fill_(grad_inputs[0], 0,
                                          weft_scalar_tensor((double)pad, WEFT_I64, g2->device), 0);
    return grad_inputs[0] ? 0 : weft_error_code();
}

/* pad: the row padding_idx names (>= 0), or -1 for none */
static weft_tensor *embedding_in_scope(weft_tensor *indices, weft_tensor *weight, int64_t pad)
{
    if (weight->ndim != 2) {
        weft_error_set(WEFT_ERR_RUNTIME, "'weight' must be 2-D");
        return NULL;
    }
    if (indices->dtype != WEFT_I64 && indices->dtype != WEFT_I32) {
        weft_error_set(WEFT_ERR_RUNTIME,
                       "Expected tensor for argument #1 'indices' to have one of the following "
                       "scalar types: Long, Int; but got %s tensor instead (while checking "
                       "arguments for embedding)",
                       weft_dtype_name(indices->dtype));
        return NULL;
    }
    if (indices->ndim + 1 > WEFT_MAX_DIMS) {
        weft_error_set(WEFT_ERR_VALUE, "embedding: indices have too many dims (%d)", indices->ndim);
        return NULL;
    }
    const int64_t flat = -1;
    weft_tensor *idx = weft_reshape(indices, 1, &flat);
    bool rec = weft_autograd_needed(1, &weight);
    bool prev = weft_no_grad_begin();
    weft_tensor *rows = weft_index_select(weight, 0, idx);
    int64_t shape[WEFT_MAX_DIMS];
    memcpy(shape, indices->shape, (size_t)indices->ndim * sizeof *shape);
    shape[indices->ndim] = weight->shape[1];
    weft_tensor *y = weft_reshape(rows, indices->ndim + 1, shape);
    /* the backward's index-add wants int64 [N] in one block */
    weft_tensor *idx64 = rec ? weft_contiguous(weft_to_dtype(idx, WEFT_I64)) : NULL;
    weft_grad_mode_restore(prev);
    if (!y || !rec)
        return y;
    struct weft_node *node = weft_node_create("EmbeddingBackward0", embedding_backward, 1, &weight, 1);
    if (!node)
        return NULL;
    if (!idx64 || weft_node_save(node, 0, idx64) != 0) {
        weft_node_abandon(node);
        return NULL;
    }
    weft_node_ints(node)[0] = pad;
    return weft_nn_attach(node, y);
}

weft_tensor *weft_embedding(weft_tensor *indices, weft_tensor *weight)
{
    if (!indices || !weight)
        return NULL;
    IN_SCOPE(embedding_in_scope(indices, weight, -1));
}

weft_tensor *weft_embedding_padding(weft_tensor *indices, weft_tensor *weight,
                                    int64_t padding_idx)
{
    if (!indices || !weight)
        return NULL;
    int64_t num = weight->ndim > 0 ? weight->shape[0] : 0;
    if (padding_idx >= num || padding_idx < -num) {
        weft_error_set(WEFT_ERR_VALUE, "Padding_idx must be within num_embeddings");
        return NULL;
    }
    IN_SCOPE(embedding_in_scope(indices, weight, padding_idx < 0 ? padding_idx + num : padding_idx));
}

/* ---- leaky_relu ----------------------------------------------------------------------------
 * Its own node, as PyTorch's: x > 0 ? g : g * slope (the slope at 0). Saves x. */

static int leaky_relu_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                               weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0], *x = weft_node_saved(node, 0);
    if (!g)
        return 0;
    double slope = weft_node_scalars(node)[0];
    grad_inputs[0] = weft_where(weft_gt_scalar(x, 0), g, weft_mul_scalar(g, slope));
    return grad_inputs[0] ? 0 : weft_error_code();
}

static weft_tensor *leaky_relu_in_scope(weft_tensor *x, double slope)
{
    if (!weft_dtype_is_floating(x->dtype)) {
        weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "\"leaky_relu\" not implemented for '%s'",
                       weft_dtype_torch_name(x->dtype));
        return NULL;
    }
    bool rec = weft_autograd_needed(1, &x);
    bool prev = weft_no_grad_begin();
    weft_tensor *y = weft_where(weft_gt_scalar(x, 0), x, weft_mul_scalar(x, slope));
    weft_grad_mode_restore(prev);
    if (!y || !rec)
        return y;
    struct weft_node *node = weft_node_create("LeakyReluBackward0", leaky_relu_backward, 1, &x, 1);
    if (!node)
        return NULL;
    weft_node_scalars(node)[0] = slope;
    if (weft_node_save(node, 0, x) != 0) {
        weft_node_abandon(node);
        return NULL;
    }
    return weft_nn_attach(node, y);
}

weft_tensor *weft_leaky_relu(weft_tensor *x, double negative_slope)
{
    if (!x)
        return NULL;
    IN_SCOPE(leaky_relu_in_scope(x, negative_slope));
}

/* ---- gelu ----------------------------------------------------------------------------------- */

static int gelu_tanh_op(void)
{
    static int cached = -1;
    return nn_named_op(&cached, WEFT_OP_GELU_TANH_NAME);
}

/* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) of ops, where the backend lacks
 * gelu_tanh (run unrecorded: the node below is the only one). */
static weft_tensor *gelu_tanh_composite(weft_tensor *x)
{
    const double k = sqrt(2.0 / M_PI);
    weft_tensor *inner = weft_mul_scalar(weft_add(x, weft_mul_scalar(weft_pow_scalar(x, 3), 0.044715)), k);
    return weft_mul(weft_mul_scalar(x, 0.5), weft_add_scalar(weft_tanh(inner), 1));
}

/* Saved: 0 x. PyTorch's gelu_backward with approximate='tanh' (core: one pass where the
 * backend has it). */
static int gelu_tanh_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                              weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0];
    if (!g)
        return 0;
    grad_inputs[0] = weft_gelu_backward(g, weft_node_saved(node, 0), 1);
    return grad_inputs[0] ? 0 : weft_error_code();
}

static weft_tensor *gelu_tanh_in_scope(weft_tensor *x)
{
    if (!weft_dtype_is_floating(x->dtype)) {
        weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "\"GeluKernelImpl\" not implemented for '%s'",
                       weft_dtype_torch_name(x->dtype));
        return NULL;
    }
    bool rec = weft_autograd_needed(1, &x);
    bool prev = weft_no_grad_begin();
    weft_tensor *y;
    int op = gelu_tanh_op();
    if (x->layout == WEFT_LAYOUT_STRIDED && nn_have_kernel(op, x)) {
        y = weft_empty(x->ndim, x->shape, x->dtype, x->device);
        struct weft_op_call c = {.op = op, .nin = 1, .nout = 1, .in = {x}, .out = {y}};
        if (y && weft_dispatch(&c) != 0)
            y = NULL;
    } else {
        y = gelu_tanh_composite(x);
    }
    weft_grad_mode_restore(prev);
    if (!y || !rec)
        return y;
    /* GeluBackward0 for both forms, as PyTorch names it */
    struct weft_node *node = weft_node_create("GeluBackward0", gelu_tanh_backward, 1, &x, 1);
    if (!node)
        return NULL;
    if (weft_node_save(node, 0, x) != 0) {
        weft_node_abandon(node);
        return NULL;
    }
    return weft_nn_attach(node, y);
}

weft_tensor *weft_gelu_approximate(weft_tensor *x, enum weft_gelu_approximate approximate)
{
    if (!x)
        return NULL;
    if (approximate == WEFT_GELU_NONE)
        return weft_gelu(x);
    if (approximate != WEFT_GELU_TANH) {
        weft_error_set(WEFT_ERR_VALUE, "approximate argument must be either none or tanh.");
        return NULL;
    }
    IN_SCOPE(gelu_tanh_in_scope(x));
}
