/* quant/reference.c: the reference kernels of weft/kernel_quant.h's ops, plain loops on
 * the host that spell out the contract's arithmetic. They are the specification a
 * backend's kernel is checked against bit for bit (tests/test_quant.c), and what runs
 * where a backend has no kernel for an op. */
#include <math.h>
#include <string.h>

#include "internal.h"

/* ---- quantize and dequantize ------------------------------------------------------------ */

struct qparams {
    float scale, inv_scale;
    int32_t zero_point;
    float lo, hi; /* the quantized dtype's range */
};

static void quantize_loop(void *ctx, char **data, const int64_t *stride, int64_t n)
{
    const struct qparams *p = ctx;
    const bool u8 = p->lo == 0.0f;
    for (int64_t i = 0; i < n; i++) {
        float x = *(const float *)(data[1] + i * stride[1]);
        float t = nearbyintf(x * p->inv_scale) + (float)p->zero_point;
        t = t < p->lo ? p->lo : t > p->hi ? p->hi : t;
        int32_t q = t == t ? (int32_t)t : p->zero_point;
        if (u8)
            *(uint8_t *)(data[0] + i * stride[0]) = (uint8_t)q;
        else
            *(int8_t *)(data[0] + i * stride[0]) = (int8_t)q;
    }
}

static void dequantize_loop(void *ctx, char **data, const int64_t *stride, int64_t n)
{
    const struct qparams *p = ctx;
    const bool u8 = p->lo == 0.0f;
    for (int64_t i = 0; i < n; i++) {
        const char *q = data[1] + i * stride[1];
        int32_t v = u8 ? *(const uint8_t *)q : *(const int8_t *)q;
        *(float *)(data[0] + i * stride[0]) = (float)(v - p->zero_point) * p->scale;
    }
}

static int elementwise(const struct weft_op_call *call, enum weft_dtype qdt, weft_iter_loop_fn loop)
{
    struct weft_iter it;
    const weft_tensor *ops[2] = {call->out[0], call->in[0]};
    struct qparams p = {.scale = (float)call->scalar[0],
                        .inv_scale = 1.0f / (float)call->scalar[0],
                        .zero_point = (int32_t)call->ints[0],
                        .lo = qdt == WEFT_U8 ? 0.0f : -128.0f,
                        .hi = qdt == WEFT_U8 ? 255.0f : 127.0f};
    if (qdt != WEFT_U8 && qdt != WEFT_I8)
        return weft_error_set(WEFT_ERR_TYPE, "%s: expected a uint8 or int8 tensor, got %s",
                              weft_op_name(call->op), weft_dtype_name(qdt));
    if (weft_iter_init(&it, 2, ops) != 0)
        return weft_error_code();
    weft_iter_run(&it, 0, it.numel, loop, &p);
    return 0;
}

/* ---- linear ---------------------------------------------------------------------------------- */

/* v, then y, as the contract writes them; out is uint8 or float32. */
static void store_output(weft_tensor *out, char *y, float v, bool relu, int32_t zero_point,
                         const float *bias, int64_t n)
{
    if (out->dtype == WEFT_U8) {
        if (relu)
            v = v < 0.0f ? 0.0f : v;
        float t = nearbyintf(v + (float)zero_point);
        *(uint8_t *)y = (uint8_t)(t < 0.0f ? 0.0f : t > 255.0f ? 255.0f : t);
        return;
    }
    if (bias)
        v = v + bias[n];
    if (relu)
        v = v < 0.0f ? 0.0f : v;
    *(float *)y = v;
}

static bool is_contiguous_of(const weft_tensor *t, enum weft_dtype dt, int ndim)
{
    return t && t->dtype == dt && t->ndim == ndim && weft_tensor_is_contiguous(t) &&
           t->device.type == WEFT_DEVICE_CPU;
}

static int linear(const struct weft_op_call *call)
{
    const weft_tensor *x = call->in[0], *w = call->in[1], *b = call->in[2], *m = call->in[3];
    weft_tensor *y = call->out[0];
    const struct weft_quantized_linear_params *p = call->params;
    if (call->params_size != sizeof *p || !is_contiguous_of(x, WEFT_U8, 2) ||
        !is_contiguous_of(w, WEFT_I8, 2) || !is_contiguous_of(b, WEFT_I32, 1) ||
        !is_contiguous_of(m, WEFT_F32, 1) || !y || y->ndim != 2 ||
        !weft_tensor_is_contiguous(y) || (y->dtype != WEFT_U8 && y->dtype != WEFT_F32) ||
        (p->bias && !is_contiguous_of(p->bias, WEFT_F32, 1)))
        return weft_error_set(WEFT_ERR_RUNTIME, "quantized_linear: operands outside the contract "
                                                "of weft/kernel_quant.h");
    /* x [M, K], w [N, K], y [M, N] */
    const int64_t M = x->shape[0], K = x->shape[1], N = w->shape[0];
    const uint8_t *xd = weft_tensor_data(x);
    const int8_t *wd = weft_tensor_data(w);
    const int32_t *bd = weft_tensor_data(b);
    const float *md = weft_tensor_data(m), *fb = p->bias ? weft_tensor_data(p->bias) : NULL;
    char *yd = weft_tensor_data(y);
    const size_t ys = weft_tensor_itemsize(y);
    for (int64_t i = 0; i < M; i++)
        for (int64_t n = 0; n < N; n++) {
            int64_t acc = 0;
            for (int64_t k = 0; k < K; k++)
                acc += (int32_t)xd[i * K + k] * (int32_t)wd[n * K + k];
            int32_t total = (int32_t)(acc + bd[n]);
            store_output(y, yd + (size_t)(i * N + n) * ys, (float)total * md[n],
                         call->ints[0] != 0, (int32_t)call->ints[1], fb, n);
        }
    return 0;
}

/* ---- conv2d ---------------------------------------------------------------------------------- */

static const void *at4(const weft_tensor *t, int64_t a, int64_t b, int64_t c, int64_t d)
{
    return (const char *)weft_tensor_data(t) +
           (a * t->stride[0] + b * t->stride[1] + c * t->stride[2] + d * t->stride[3]) *
               (int64_t)weft_tensor_itemsize(t);
}

static int conv2d(const struct weft_op_call *call)
{
    const weft_tensor *x = call->in[0], *w = call->in[1], *b = call->in[2], *m = call->in[3];
    weft_tensor *y = call->out[0];
    if (!x || x->dtype != WEFT_U8 || x->ndim != 4 || !is_contiguous_of(w, WEFT_I8, 4) ||
        !is_contiguous_of(b, WEFT_I32, 1) || !is_contiguous_of(m, WEFT_F32, 1) || !y ||
        y->ndim != 4 || (y->dtype != WEFT_U8 && y->dtype != WEFT_F32))
        return weft_error_set(WEFT_ERR_RUNTIME, "quantized_conv2d: operands outside the contract "
                                                "of weft/kernel_quant.h");
    /* x [N, C, H, W], w [Cout, C, kH, kW], y [N, Cout, OH, OW] */
    const int64_t *g = call->ints; /* kh kw sh sw ph pw dh dw relu zp_out zp_in */
    const int64_t N = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3];
    const int64_t Co = w->shape[0], OH = y->shape[2], OW = y->shape[3];
    const int8_t *wd = weft_tensor_data(w);
    const int32_t *bd = weft_tensor_data(b);
    const float *md = weft_tensor_data(m);
    const int32_t zx = (int32_t)g[10];
    for (int64_t n = 0; n < N; n++)
        for (int64_t co = 0; co < Co; co++)
            for (int64_t oh = 0; oh < OH; oh++)
                for (int64_t ow = 0; ow < OW; ow++) {
                    int64_t acc = 0;
                    for (int64_t c = 0; c < C; c++)
                        for (int64_t i = 0; i < g[0]; i++) {
                            int64_t ih = oh * g[2] - g[4] + i * g[6];
                            if (ih < 0 || ih >= H)
                                continue;
                            for (int64_t j = 0; j < g[1]; j++) {
                                int64_t iw = ow * g[3] - g[5] + j * g[7];
                                if (iw < 0 || iw >= W)
                                    continue;
                                int32_t xv = *(const uint8_t *)at4(x, n, c, ih, iw) - zx;
                                acc += xv * wd[((co * C + c) * g[0] + i) * g[1] + j];
                            }
                        }
                    int32_t total = (int32_t)(acc + bd[co]);
                    store_output(y, (char *)at4(y, n, co, oh, ow), (float)total * md[co],
                                 g[8] != 0, (int32_t)g[9], NULL, co);
                }
    return 0;
}

/* ---- max pool ---------------------------------------------------------------------------------- */

static int max_pool2d(const struct weft_op_call *call)
{
    const weft_tensor *x = call->in[0];
    weft_tensor *y = call->out[0];
    if (!x || x->ndim != 4 || !y || y->ndim != 4 || y->dtype != x->dtype ||
        (x->dtype != WEFT_U8 && x->dtype != WEFT_I8))
        return weft_error_set(WEFT_ERR_RUNTIME, "quantized_max_pool2d: operands outside the "
                                                "contract of weft/kernel_quant.h");
    const int64_t *g = call->ints;
    const bool u8 = x->dtype == WEFT_U8;
    for (int64_t n = 0; n < y->shape[0]; n++)
        for (int64_t c = 0; c < y->shape[1]; c++)
            for (int64_t oh = 0; oh < y->shape[2]; oh++)
                for (int64_t ow = 0; ow < y->shape[3]; ow++) {
                    int32_t best = u8 ? 0 : -128;
                    for (int64_t i = 0; i < g[0]; i++) {
                        int64_t ih = oh * g[2] - g[4] + i * g[6];
                        for (int64_t j = 0; j < g[1] && ih >= 0 && ih < x->shape[2]; j++) {
                            int64_t iw = ow * g[3] - g[5] + j * g[7];
                            if (iw < 0 || iw >= x->shape[3])
                                continue;
                            const void *p = at4(x, n, c, ih, iw);
                            int32_t v = u8 ? *(const uint8_t *)p : *(const int8_t *)p;
                            best = v > best ? v : best;
                        }
                    }
                    void *q = (void *)at4(y, n, c, oh, ow);
                    if (u8)
                        *(uint8_t *)q = (uint8_t)best;
                    else
                        *(int8_t *)q = (int8_t)best;
                }
    return 0;
}

int weft_quant_reference(const struct weft_op_call *call)
{
    if (!call)
        return weft_error_set(WEFT_ERR_VALUE, "weft_quant_reference: call is NULL");
    switch (quant_op_of(call->op)) {
    case QOP_QUANTIZE: return elementwise(call, call->out[0]->dtype, quantize_loop);
    case QOP_DEQUANTIZE: return elementwise(call, call->in[0]->dtype, dequantize_loop);
    case QOP_LINEAR: return linear(call);
    case QOP_CONV2D: return conv2d(call);
    case QOP_MAX_POOL2D: return max_pool2d(call);
    default:
        return weft_error_set(WEFT_ERR_VALUE, "weft_quant_reference: \"%s\" is not an op of "
                                              "weft/kernel_quant.h",
                              weft_op_name(call->op));
    }
}
