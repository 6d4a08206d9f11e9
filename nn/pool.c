/* nn/pool.c: max_pool2d, avg_pool2d (kernel ops with their own backward nodes) and
 * adaptive_avg_pool2d (made of recorded ops).
 *
 * Output sizes, padding limits and window rules are PyTorch's (Pool.h:
 * pooling_output_shape, pool2d_shape_check), so ceil_mode and count_include_pad agree
 * to the element. */
#include <stdlib.h>
#include <string.h>

#include "functional.h"

struct pool_args {
    int64_t N, C, H, W, kh, kw, sh, sw, ph, pw, dh, dw, OH, OW;
    bool ceil_mode, count_include_pad;
};

/* PyTorch's pooling_output_shape, without its overflows: extent is the window's
 * (nn_window_extent), pad at most half of it (checked before), so in + 2 * pad - extent
 * lies within [-extent, in]; the divisions round toward -inf (floor) or +inf (ceil_mode,
 * PyTorch's + stride - 1) without adding the stride. */
static int64_t output_size(int64_t in, int64_t extent, int64_t pad, int64_t stride,
                           bool ceil_mode)
{
    int64_t num = in - extent + 2 * pad;
    int64_t q = num / stride;
    if (num % stride != 0 && (num < 0) != ceil_mode)
        q += ceil_mode ? 1 : -1;
    int64_t out = q + 1, last, edge;
    /* the last window must start inside the image or its left padding */
    if (ceil_mode && out > 1 && weft_size_add(in, pad, WEFT_SIZE_MAX, &edge) &&
        (!weft_size_mul(out - 1, stride, WEFT_SIZE_MAX, &last) || last >= edge))
        out--;
    return out;
}

static int check_input(const weft_tensor *x)
{
    bool ok = (x->ndim == 3 && x->shape[0] && x->shape[1] && x->shape[2]) ||
              (x->ndim == 4 && x->shape[1] && x->shape[2] && x->shape[3]);
    if (!ok) {
        char s[160];
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "Expected 3D or 4D (batch mode) tensor with optional 0 dim batch size "
                              "for input, but got:%s",
                              weft_shape_str(x->ndim, x->shape, s, sizeof s));
    }
    if (x->layout != WEFT_LAYOUT_STRIDED)
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "pooling: only strided tensors are supported");
    return 0;
}

/* Fills a from params for the [N, C, H, W] input x; is_max selects the padding rule. */
static int pool_args_of(const weft_tensor *x, const struct weft_pool2d_params *p, bool is_max,
                        struct pool_args *a)
{
    if (!p)
        return weft_error_set(WEFT_ERR_VALUE, "pooling: params (the kernel size) are required");
    *a = (struct pool_args){x->shape[0], x->shape[1], x->shape[2], x->shape[3], p->kernel[0],
                            p->kernel[1], p->stride[0] ? p->stride[0] : p->kernel[0],
                            p->stride[1] ? p->stride[1] : p->kernel[1], p->padding[0], p->padding[1],
                            1, 1, 0, 0, p->ceil_mode, p->count_include_pad};
    if (is_max) {
        a->dh = p->dilation[0] ? p->dilation[0] : 1;
        a->dw = p->dilation[1] ? p->dilation[1] : 1;
    }
    if (a->kh <= 0 || a->kw <= 0)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "kernel size should be greater than zero, but got kH: %lld kW: %lld",
                              (long long)a->kh, (long long)a->kw);
    if (a->sh <= 0 || a->sw <= 0)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "stride should be greater than zero, but got dH: %lld dW: %lld",
                              (long long)a->sh, (long long)a->sw);
    if (a->dh <= 0 || a->dw <= 0)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "dilation should be greater than zero, but got dilationH: %lld "
                              "dilationW: %lld",
                              (long long)a->dh, (long long)a->dw);
    int64_t eh, ew; /* the windows' extents */
    if (!nn_window_extent(a->kh, a->dh, &eh) || !nn_window_extent(a->kw, a->dw, &ew))
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "pooling: kernel size (%lld x %lld) and dilation (%lld, %lld) give "
                              "a window beyond int64's range",
                              (long long)a->kh, (long long)a->kw, (long long)a->dh, (long long)a->dw);
    if (is_max) {
        const int64_t k[2] = {a->kh, a->kw}, pad[2] = {a->ph, a->pw}, d[2] = {a->dh, a->dw};
        const int64_t extent[2] = {eh, ew};
        for (int i = 0; i < 2; i++)
            if (pad[i] < 0 || pad[i] > extent[i] / 2)
                return weft_error_set(WEFT_ERR_RUNTIME,
                                      "pad should be at most half of effective kernel size, but got "
                                      "pad=%lld, kernel_size=%lld and dilation=%lld",
                                      (long long)pad[i], (long long)k[i], (long long)d[i]);
    } else if (a->ph < 0 || a->pw < 0 || a->kw / 2 < a->pw || a->kh / 2 < a->ph) {
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "pad should be smaller than or equal to half of kernel size, but got "
                              "padW = %lld, padH = %lld, kW = %lld, kH = %lld",
                              (long long)a->pw, (long long)a->ph, (long long)a->kw, (long long)a->kh);
    }
    a->OH = output_size(a->H, eh, a->ph, a->sh, a->ceil_mode);
    a->OW = output_size(a->W, ew, a->pw, a->sw, a->ceil_mode);
    if (a->OH < 1 || a->OW < 1)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "Given input size: (%lldx%lldx%lld). Calculated output size: "
                              "(%lldx%lldx%lld). Output size is too small",
                              (long long)a->C, (long long)a->H, (long long)a->W, (long long)a->C,
                              (long long)a->OH, (long long)a->OW);
    return 0;
}

/* ints[0..7] geometry, ints[8] count_include_pad, ints[9] divisor_override (unused: 0). */
static void pool_ints(const struct pool_args *a, int64_t *ints)
{
    const int64_t v[10] = {a->kh, a->kw, a->sh, a->sw, a->ph, a->pw, a->dh, a->dw,
                           a->count_include_pad, 0};
    memcpy(ints, v, sizeof v);
}

/* ---- backward nodes ------------------------------------------------------------------------
 * Both read the geometry from ints[0..9] (as the kernels take it) and the input shape
 * from the node; ints[15] says max pooling, which saves its indices in slot 0. */

static int pool_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                         weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0];
    if (!g)
        return 0;
    bool is_max = weft_node_ints(node)[15] != 0;
    weft_tensor *gx = weft_empty(4, weft_node_input_shape(node, 0), g->dtype, g->device);
    if (!gx)
        return weft_error_code();
    struct weft_op_call call = {.op = is_max ? WEFT_OP_MAX_POOL2D_BACKWARD : WEFT_OP_AVG_POOL2D_BACKWARD,
                                .nin = is_max ? 2 : 1, .nout = 1};
    /* a channels-last result's gradient (and indices) come back to the kernel's layout */
    call.in[0] = weft_contiguous(g);
    call.in[1] = is_max ? weft_contiguous(weft_node_saved(node, 0)) : NULL;
    if (!call.in[0] || (is_max && !call.in[1]))
        return weft_error_code();
    call.out[0] = gx;
    memcpy(call.ints, weft_node_ints(node), 10 * sizeof *call.ints);
    if (weft_dispatch(&call) != 0)
        return weft_error_code();
    grad_inputs[0] = gx;
    return 0;
}

/* ---- front ends ---------------------------------------------------------------------------- */

/* indices: NULL, or where max pooling's indices go (a reference in the open scope). */
static weft_tensor *pool_batched(weft_tensor *x, const struct weft_pool2d_params *params,
                                 bool is_max, weft_tensor **indices)
{
    struct pool_args a;
    if (pool_args_of(x, params, is_max, &a) != 0)
        return NULL;
    const int64_t shape[4] = {a.N, a.C, a.OH, a.OW};
    weft_tensor *y = weft_empty(4, shape, x->dtype, x->device);
    weft_tensor *idx = is_max ? weft_empty(4, shape, WEFT_I64, x->device) : NULL;
    if (!y || (is_max && !idx))
        return NULL;
    struct weft_op_call call = {.op = is_max ? WEFT_OP_MAX_POOL2D : WEFT_OP_AVG_POOL2D,
                                .nin = 1, .nout = is_max ? 2 : 1};
    call.in[0] = x;
    call.out[0] = y;
    call.out[1] = idx;
    pool_ints(&a, call.ints);
    if (weft_dispatch(&call) != 0)
        return NULL;
    y = nn_like_memory_format(x, y);
    idx = is_max ? nn_like_memory_format(x, idx) : NULL;
    if (!y || (is_max && !idx))
        return NULL;
    if (indices)
        *indices = idx;
    if (!weft_autograd_needed(1, &x))
        return y;
    struct weft_node *node =
        weft_node_create(is_max ? "MaxPool2DWithIndicesBackward0" : "AvgPool2DBackward0",
                         pool_backward, 1, &x, 1);
    if (!node)
        return NULL;
    pool_ints(&a, weft_node_ints(node));
    weft_node_ints(node)[15] = is_max;
    if (is_max && weft_node_save(node, 0, idx) != 0) {
        weft_node_abandon(node);
        return NULL;
    }
    return weft_nn_attach(node, y);
}

static weft_tensor *pool_in_scope(weft_tensor *x, const struct weft_pool2d_params *params,
                                  bool is_max, weft_tensor **indices)
{
    if (check_input(x) != 0)
        return NULL;
    if (!weft_dtype_is_floating(x->dtype)) {
        weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "\"%s\" not implemented for '%s'",
                       is_max ? "max_pool2d" : "avg_pool2d", weft_dtype_torch_name(x->dtype));
        return NULL;
    }
    if (x->ndim == 4)
        return pool_batched(x, params, is_max, indices);
    weft_tensor *y = weft_squeeze_dim(pool_batched(weft_unsqueeze(x, 0), params, is_max, indices), 0);
    if (y && indices)
        *indices = weft_squeeze_dim(*indices, 0);
    return y;
}

weft_tensor *weft_max_pool2d(weft_tensor *x, const struct weft_pool2d_params *params)
{
    if (!x)
        return NULL;
    weft_scope_push();
    weft_tensor *y = weft_tensor_retain(pool_in_scope(x, params, true, NULL));
    weft_scope_pop();
    return weft_autorelease(y);
}

weft_tensor *weft_max_pool2d_with_indices(weft_tensor *x, const struct weft_pool2d_params *params,
                                          weft_tensor **indices)
{
    if (!x || !indices)
        return NULL;
    *indices = NULL;
    weft_scope_push();
    weft_tensor *idx = NULL;
    weft_tensor *y = weft_tensor_retain(pool_in_scope(x, params, true, &idx));
    idx = y ? weft_tensor_retain(idx) : NULL;
    weft_scope_pop();
    *indices = weft_autorelease(idx);
    return weft_autorelease(y);
}

weft_tensor *weft_avg_pool2d(weft_tensor *x, const struct weft_pool2d_params *params)
{
    if (!x)
        return NULL;
    weft_scope_push();
    weft_tensor *y = weft_tensor_retain(pool_in_scope(x, params, false, NULL));
    weft_scope_pop();
    return weft_autorelease(y);
}

/* ---- adaptive average pooling ----------------------------------------------------------------
 * Window i of n over a size-`in` axis is [floor(i*in/n), ceil((i+1)*in/n)). Averaging is
 * separable, so in general out = P_h @ x @ P_w^T with P [n, in] holding 1/len over each
 * window. A 1x1 output is a mean; evenly dividing windows are an avg_pool2d. */

static weft_tensor *window_matrix(int64_t n, int64_t in, enum weft_dtype dtype, weft_device dev)
{
    size_t count = (size_t)(n * in);
    double *m = calloc(count ? count : 1, sizeof *m);
    if (!m) {
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "adaptive_avg_pool2d: out of host memory");
        return NULL;
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t start = i * in / n, end = ((i + 1) * in + n - 1) / n;
        for (int64_t k = start; k < end; k++)
            m[i * in + k] = 1.0 / (double)(end - start);
    }
    const int64_t shape[2] = {n, in};
    weft_tensor *t = weft_to(weft_from_host(m, 2, shape, WEFT_F64, WEFT_CPU), dev, dtype, false);
    free(m);
    return t;
}

/* One node, as PyTorch's AdaptiveAvgPool2DBackward0: the gradient is P_h^T g P_w, each
 * output's gradient spread evenly over its window. */
static int adaptive_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                             weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0];
    if (!g)
        return 0;
    int nd = weft_node_input_ndim(node, 0);
    const int64_t *shape = weft_node_input_shape(node, 0);
    weft_tensor *ph = window_matrix(g->shape[g->ndim - 2], shape[nd - 2], g->dtype, g->device);
    weft_tensor *pw = window_matrix(g->shape[g->ndim - 1], shape[nd - 1], g->dtype, g->device);
    grad_inputs[0] = ph && pw ? weft_matmul(weft_matmul(weft_t(ph), g), pw) : NULL;
    return grad_inputs[0] ? 0 : weft_error_code();
}

static weft_tensor *adaptive_in_scope(weft_tensor *x, int64_t oh, int64_t ow)
{
    char s[160];
    if (x->ndim != 3 && x->ndim != 4) {
        weft_error_set(WEFT_ERR_RUNTIME, "adaptive_avg_pool2d(): Expected 3D or 4D tensor, but got %s",
                       weft_shape_str(x->ndim, x->shape, s, sizeof s));
        return NULL;
    }
    for (int d = 1; d < x->ndim; d++)
        if (x->shape[d] == 0) {
            weft_error_set(WEFT_ERR_RUNTIME,
                           "adaptive_avg_pool2d(): Expected input to have non-zero size for "
                           "non-batch dimensions, but input has sizes %s with dimension %d being "
                           "empty",
                           weft_shape_str(x->ndim, x->shape, s, sizeof s), d);
            return NULL;
        }
    if (oh < 0 || ow < 0) {
        weft_error_set(WEFT_ERR_RUNTIME,
                       "adaptive_avg_pool2d: elements of output_size must be greater than or equal "
                       "to 0 but received {%lld, %lld}",
                       (long long)oh, (long long)ow);
        return NULL;
    }
    if (!weft_dtype_is_floating(x->dtype)) {
        weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "\"adaptive_avg_pool2d\" not implemented for '%s'",
                       weft_dtype_torch_name(x->dtype));
        return NULL;
    }
    int64_t H = x->shape[x->ndim - 2], W = x->shape[x->ndim - 1];
    if (oh == 1 && ow == 1) { /* PyTorch takes a mean too: MeanBackward1 */
        const int dims[2] = {-2, -1};
        return weft_mean(x, 2, dims, true);
    }
    bool rec = weft_autograd_needed(1, &x);
    bool prev = weft_no_grad_begin();
    weft_tensor *y;
    if (oh > 0 && ow > 0 && H % oh == 0 && W % ow == 0) {
        struct weft_pool2d_params p = {.kernel = {H / oh, W / ow}, .count_include_pad = true};
        y = pool_in_scope(x, &p, false, NULL);
    } else {
        weft_tensor *ph = window_matrix(oh, H, x->dtype, x->device);
        weft_tensor *pw = window_matrix(ow, W, x->dtype, x->device);
        y = weft_matmul(weft_matmul(ph, x), weft_t(pw));
    }
    y = nn_like_memory_format(x, y);
    weft_grad_mode_restore(prev);
    if (!y || !rec)
        return y;
    struct weft_node *node =
        weft_node_create("AdaptiveAvgPool2DBackward0", adaptive_backward, 1, &x, 0);
    return node ? weft_nn_attach(node, y) : NULL;
}

weft_tensor *weft_adaptive_avg_pool2d(weft_tensor *x, int64_t out_h, int64_t out_w)
{
    if (!x)
        return NULL;
    weft_scope_push();
    weft_tensor *y = weft_tensor_retain(adaptive_in_scope(x, out_h, out_w));
    weft_scope_pop();
    return weft_autorelease(y);
}
