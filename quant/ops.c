/* quant/ops.c: the named ops of weft/kernel_quant.h (ids, dispatch with the reference loops
 * as the fallback) and the quantize / dequantize front ends. */
#include <math.h>
#include <string.h>

#include "internal.h"

static const char *const op_names[QOP_COUNT] = {
    WEFT_OP_QUANTIZE_PER_TENSOR_NAME, WEFT_OP_DEQUANTIZE_PER_TENSOR_NAME,
    WEFT_OP_QUANTIZED_LINEAR_NAME,    WEFT_OP_QUANTIZED_CONV2D_NAME,
    WEFT_OP_QUANTIZED_MAX_POOL2D_NAME,
};
static int op_ids[QOP_COUNT] = {-1, -1, -1, -1, -1};

int quant_op_id(enum quant_op op)
{
    int id = __atomic_load_n(&op_ids[op], __ATOMIC_RELAXED);
    if (id < 0) {
        id = weft_op_register(op_names[op]);
        if (id >= 0)
            __atomic_store_n(&op_ids[op], id, __ATOMIC_RELAXED);
    }
    return id;
}

int quant_op_of(int id)
{
    for (int i = 0; i < QOP_COUNT; i++)
        if (id >= 0 && quant_op_id((enum quant_op)i) == id)
            return i;
    return -1;
}

int quant_run(const struct weft_op_call *call)
{
    const weft_tensor *t = call->nin > 0 ? call->in[0] : call->out[0];
    if (weft_kernel_lookup(call->op, t->device.type, t->layout, t->dtype))
        return weft_dispatch(call);
    if (t->device.type != WEFT_DEVICE_CPU || t->layout != WEFT_LAYOUT_STRIDED) {
        char dev[32];
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED,
                              "\"%s\" not implemented for '%s' on %s: quantized models run on "
                              "the cpu",
                              weft_op_name(call->op), weft_dtype_torch_name(t->dtype),
                              weft_device_str(t->device, dev, sizeof dev));
    }
    return weft_quant_reference(call);
}

/* ---- quantize and dequantize ------------------------------------------------------------ */

static int check_qparams(const char *fn, double scale, int64_t zero_point, enum weft_dtype dtype)
{
    if (dtype != WEFT_U8 && dtype != WEFT_I8)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "%s: expected dtype uint8 (torch.quint8) or int8 (torch.qint8), got "
                              "%s",
                              fn, weft_dtype_name(dtype));
    if (!(scale > 0) || !isfinite(scale))
        return weft_error_set(WEFT_ERR_RUNTIME, "%s: scale must be a finite positive number, got %g",
                              fn, scale);
    const int64_t lo = dtype == WEFT_U8 ? 0 : -128, hi = dtype == WEFT_U8 ? 255 : 127;
    if (zero_point < lo || zero_point > hi)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "%s: zero_point must be between quant_min and quant_max (%lld and "
                              "%lld), got %lld",
                              fn, (long long)lo, (long long)hi, (long long)zero_point);
    return 0;
}

int quant_quantize_into(weft_tensor *out, const weft_tensor *x, double scale, int64_t zero_point)
{
    int op = quant_op_id(QOP_QUANTIZE);
    if (op < 0)
        return op;
    struct weft_op_call c = {.op = op, .nin = 1, .nout = 1, .in = {x}, .out = {out},
                             .scalar = {scale}, .ints = {zero_point}};
    return quant_run(&c);
}

static int dequantize_into(weft_tensor *out, const weft_tensor *q, double scale, int64_t zero_point)
{
    int op = quant_op_id(QOP_DEQUANTIZE);
    if (op < 0)
        return op;
    struct weft_op_call c = {.op = op, .nin = 1, .nout = 1, .in = {q}, .out = {out},
                             .scalar = {scale}, .ints = {zero_point}};
    return quant_run(&c);
}

/* f's result as a new reference in the caller's scope (its temporaries die in f's). */
#define IN_SCOPE(call)                                                                        \
    do {                                                                                      \
        weft_scope_push();                                                                    \
        weft_tensor *result__ = weft_tensor_retain(call);                                     \
        weft_scope_pop();                                                                     \
        return weft_autorelease(result__);                                                    \
    } while (0)

static weft_tensor *quantize_per_tensor(weft_tensor *x, double scale, int64_t zero_point,
                                        enum weft_dtype dtype)
{
    if (x->dtype != WEFT_F32) {
        weft_error_set(WEFT_ERR_RUNTIME, "quantize_per_tensor: Quantize only works on Float "
                                         "Tensor, got %s",
                       weft_dtype_torch_name(x->dtype));
        return NULL;
    }
    if (check_qparams("quantize_per_tensor", scale, zero_point, dtype) != 0)
        return NULL;
    weft_tensor *out = weft_empty(x->ndim, x->shape, dtype, x->device);
    return out && quant_quantize_into(out, x, scale, zero_point) == 0 ? out : NULL;
}

weft_tensor *weft_quantize_per_tensor(weft_tensor *x, double scale, int64_t zero_point,
                                      enum weft_dtype dtype)
{
    if (!x)
        return NULL;
    IN_SCOPE(quantize_per_tensor(x, scale, zero_point, dtype));
}

static weft_tensor *dequantize_per_tensor(weft_tensor *q, double scale, int64_t zero_point)
{
    if (check_qparams("dequantize", scale, zero_point, q->dtype) != 0)
        return NULL;
    weft_tensor *out = weft_empty(q->ndim, q->shape, WEFT_F32, q->device);
    return out && dequantize_into(out, q, scale, zero_point) == 0 ? out : NULL;
}

weft_tensor *weft_dequantize_per_tensor(weft_tensor *q, double scale, int64_t zero_point)
{
    if (!q)
        return NULL;
    IN_SCOPE(dequantize_per_tensor(q, scale, zero_point));
}

/* Per channel: the per-tensor op on each channel's slice (the weights of a layer, once at
 * conversion: no kernel of its own is worth the contract). */
static int check_channels(const char *fn, const weft_tensor *t, const weft_tensor *scales,
                          const weft_tensor *zero_points, int *axis)
{
    int a = weft_normalize_dim(*axis, t->ndim);
    if (a < 0)
        return weft_error_code();
    *axis = a;
    const int64_t C = t->shape[a];
    if (scales->dtype != WEFT_F32 || zero_points->dtype != WEFT_I64 || scales->ndim != 1 ||
        zero_points->ndim != 1 || scales->shape[0] != C || zero_points->shape[0] != C ||
        scales->device.type != WEFT_DEVICE_CPU || zero_points->device.type != WEFT_DEVICE_CPU)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "%s: expected float32 scales and int64 zero_points of shape [%lld] "
                              "on the cpu (the size of dim %d), got %s [%lld] and %s [%lld]",
                              fn, (long long)C, a, weft_dtype_name(scales->dtype),
                              (long long)(scales->ndim ? scales->shape[0] : 1),
                              weft_dtype_name(zero_points->dtype),
                              (long long)(zero_points->ndim ? zero_points->shape[0] : 1));
    return 0;
}

/* fn on each channel's slice of x into out's. */
static weft_tensor *per_channel(const char *fn, weft_tensor *out, weft_tensor *x,
                                const weft_tensor *scales, const weft_tensor *zero_points,
                                int axis, bool quantize)
{
    if (!out)
        return NULL;
    enum weft_dtype qdt = quantize ? out->dtype : x->dtype;
    const float *s = weft_tensor_data(scales);
    const int64_t *z = weft_tensor_data(zero_points);
    for (int64_t c = 0; c < x->shape[axis]; c++) {
        weft_tensor *o = weft_narrow(out, axis, c, 1), *i = weft_narrow(x, axis, c, 1);
        if (check_qparams(fn, s[c], z[c], qdt) != 0 || !o || !i ||
            (quantize ? quant_quantize_into(o, i, s[c], z[c]) : dequantize_into(o, i, s[c], z[c])) != 0)
            return NULL;
    }
    return out;
}

weft_tensor *weft_quantize_per_channel(weft_tensor *x, weft_tensor *scales,
                                       weft_tensor *zero_points, int axis, enum weft_dtype dtype)
{
    if (!x || !scales || !zero_points)
        return NULL;
    if (x->dtype != WEFT_F32) {
        weft_error_set(WEFT_ERR_RUNTIME, "quantize_per_channel: Quantize only works on Float "
                                         "Tensor, got %s",
                       weft_dtype_torch_name(x->dtype));
        return NULL;
    }
    if (check_channels("quantize_per_channel", x, scales, zero_points, &axis) != 0)
        return NULL;
    IN_SCOPE(per_channel("quantize_per_channel", weft_empty(x->ndim, x->shape, dtype, x->device),
                         x, scales, zero_points, axis, true));
}

weft_tensor *weft_dequantize_per_channel(weft_tensor *q, weft_tensor *scales,
                                         weft_tensor *zero_points, int axis)
{
    if (!q || !scales || !zero_points)
        return NULL;
    if (check_channels("dequantize", q, scales, zero_points, &axis) != 0)
        return NULL;
    IN_SCOPE(per_channel("dequantize", weft_empty(q->ndim, q->shape, WEFT_F32, q->device), q,
                         scales, zero_points, axis, false));
}
