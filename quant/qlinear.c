/* quant/qlinear.c: torch.ao.nn.quantized's Linear and intrinsic LinearReLU (static: uint8
 * activations with fixed qparams) and torch.ao.nn.quantized.dynamic's Linear (the input
 * quantized per call from its own range), over the quantized_linear op.
 *
 * What the op takes beyond the stored tensors (weft/kernel_quant.h) is derived once and kept:
 * the int32 bias with the input zero point's share folded in (-zp_x * sum_k w[n, k]), the
 * float32 multipliers s_x s_w[n] / s_y, and the backend's packed weights; all of it is made
 * again when a stored tensor changes (load_state_dict writes them in place).
 *
 * A static Linear that took in the Flatten before it (conversion does that where the
 * Flatten reads a quantized convolution's channels-last output) reads that output as the
 * [N, H*W*C] it is in memory, with no copy into torch's (c, h, w) order: its kernel gets a
 * copy of the weight with the columns permuted to (h, w, c) order, made with the derived
 * state (the int32 sums are exact in any order, so the bytes are those of the copy's
 * path). The stored weight keeps torch's order: the checkpoint and the ONNX export mean
 * what torch's do. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

struct qlinear {
    bool dynamic, relu, float_output;
    bool flatten_input;      /* static: computes Linear(Flatten(x, 1, -1)) */
    int64_t in_features, out_features;
    struct quant_watch watch;
    weft_tensor *row_sums;   /* int64 host sums of w's rows, as int32 [N]: dynamic */
    weft_tensor *bias_i32;   /* [N]: static */
    weft_tensor *multiplier; /* [N]: static */
    float *weight_scale;     /* [N] host: dynamic */
    weft_tensor *packed;     /* the backend's (weft_quantized_linear_params.packed) */
    int64_t hwc_channels;    /* flatten_input: the C weight_hwc was made for */
    weft_tensor *weight_hwc; /* [N, K]: the weight's columns in (h, w, c) order */
    weft_tensor *packed_hwc; /* weight_hwc packed by the backend */
};

static void drop_derived(struct qlinear *s)
{
    weft_tensor_release(s->row_sums);
    weft_tensor_release(s->bias_i32);
    weft_tensor_release(s->multiplier);
    weft_tensor_release(s->packed);
    weft_tensor_release(s->weight_hwc);
    weft_tensor_release(s->packed_hwc);
    free(s->weight_scale);
    s->row_sums = s->bias_i32 = s->multiplier = s->packed = s->weight_hwc = s->packed_hwc = NULL;
    s->weight_scale = NULL;
}

static void qlinear_free(void *p)
{
    drop_derived(p);
    free(p);
}

/* The op's bias and multipliers from the stored tensors (see the file's comment). */
static int derive(weft_module *m, struct qlinear *s)
{
    drop_derived(s);
    const weft_tensor *w = weft_module_buffer(m, "weight"), *b = weft_module_buffer(m, "bias");
    const int64_t N = s->out_features, K = s->in_features;
    const int8_t *wd = weft_tensor_data(w);
    const float *bd = b ? weft_tensor_data(b) : NULL;
    float *sw = quant_weight_scales(m, N);
    int32_t *bias = malloc((size_t)(N ? N : 1) * sizeof *bias);
    float *mult = malloc((size_t)(N ? N : 1) * sizeof *mult);
    int rc = sw && bias && mult ? 0 : weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory");
    double sx = 1, sy = 1;
    int64_t zx = 0;
    if (!s->dynamic && rc == 0) {
        sx = quant_get_f32(weft_module_buffer(m, "input_scale"));
        zx = quant_get_i64(weft_module_buffer(m, "input_zero_point"));
        sy = s->float_output ? 1.0 : quant_get_f32(weft_module_buffer(m, "scale"));
    }
    for (int64_t n = 0; n < N && rc == 0; n++) {
        int64_t sum = 0;
        for (int64_t k = 0; k < K; k++)
            sum += wd[n * K + k];
        if (s->dynamic) {
            bias[n] = (int32_t)sum; /* the row sums, scaled by -zp_x per call */
            continue;
        }
        /* A float32 output adds the real bias after scaling (params.bias), exactly. */
        double real = bd && !s->float_output ? bd[n] / (sx * sw[n]) : 0.0;
        bias[n] = quant_round_i32(real - (double)zx * (double)sum);
        mult[n] = (float)(sx * sw[n] / sy);
    }
    weft_scope_push();
    if (rc == 0 && s->dynamic) {
        s->row_sums = weft_tensor_retain(quant_i32(N, bias));
        s->weight_scale = sw;
        sw = NULL;
        rc = s->row_sums ? 0 : weft_error_code();
    } else if (rc == 0) {
        s->bias_i32 = weft_tensor_retain(quant_i32(N, bias));
        s->multiplier = weft_tensor_retain(quant_f32(1, &N, mult));
        rc = s->bias_i32 && s->multiplier ? 0 : weft_error_code();
    }
    weft_scope_pop();
    free(sw);
    free(bias);
    free(mult);
    return rc;
}

/* y [M, N] = the op on x [M, K] uint8 and weight [N, K] int8 (packed into *packed). */
static weft_tensor *run_op(struct qlinear *s, weft_tensor *x, weft_tensor *weight,
                           weft_tensor **packed, weft_tensor *bias, weft_tensor *mult,
                           const weft_tensor *float_bias, bool float_out, int64_t out_zero_point)
{
    int op = quant_op_id(QOP_LINEAR);
    const int64_t shape[2] = {x->shape[0], s->out_features};
    weft_tensor *y = op >= 0 ? weft_empty(2, shape, float_out ? WEFT_F32 : WEFT_U8, x->device) : NULL;
    if (!y || x->shape[0] == 0)
        return y;
    struct weft_quantized_linear_params p = {.bias = float_bias, .packed = packed};
    struct weft_op_call c = {.op = op, .nin = 4, .nout = 1,
                             .in = {x, weight, bias, mult},
                             .out = {y}, .ints = {s->relu, out_zero_point},
                             .params = &p, .params_size = sizeof p};
    return quant_run(&c) == 0 ? y : NULL;
}

/* x [..., K] as [M, K] contiguous, or NULL with torch's error. */
static weft_tensor *rows_of(const struct qlinear *s, weft_tensor *x)
{
    if (x->ndim < 1 || x->shape[x->ndim - 1] != s->in_features) {
        char a[160];
        weft_error_set(WEFT_ERR_RUNTIME, "mat1 and mat2 shapes cannot be multiplied (input %s and "
                                         "weight [%lld, %lld])",
                       weft_shape_str(x->ndim, x->shape, a, sizeof a), (long long)s->out_features,
                       (long long)s->in_features);
        return NULL;
    }
    const int64_t shape[2] = {-1, s->in_features};
    return weft_contiguous(weft_reshape(x, 2, shape));
}

/* y [M, N] back to x's leading dims. */
static weft_tensor *unrows(const struct qlinear *s, weft_tensor *y, const weft_tensor *x)
{
    int64_t shape[WEFT_MAX_DIMS];
    memcpy(shape, x->shape, (size_t)x->ndim * sizeof *shape);
    shape[x->ndim - 1] = s->out_features;
    return weft_reshape(y, x->ndim, shape);
}

/* Whether x, the input of a layer that took in a Flatten, is a channels-last uint8
 * [N, C, H, W] of its in_features whose memory order is not torch's flatten order (C and
 * H*W above 1). */
static bool reads_hwc(const struct qlinear *s, const weft_tensor *x)
{
    return s->flatten_input && x->dtype == WEFT_U8 && x->ndim == 4 && quant_is_channels_last(x) &&
           x->shape[1] > 1 && x->shape[2] * x->shape[3] > 1 &&
           x->shape[1] * x->shape[2] * x->shape[3] == s->in_features;
}

/* The weight [N, K] with its columns in (h, w, c) order for inputs of C channels:
 * w.view(N, C, K / C).transpose(1, 2), made once (derive drops it with the rest). */
static weft_tensor *weight_hwc(weft_module *m, struct qlinear *s, int64_t C)
{
    if (s->weight_hwc && s->hwc_channels == C)
        return s->weight_hwc;
    weft_tensor_release(s->weight_hwc);
    weft_tensor_release(s->packed_hwc);
    s->weight_hwc = s->packed_hwc = NULL;
    const int64_t N = s->out_features, K = s->in_features;
    const int64_t split[3] = {N, C, K / C}, rows[2] = {N, K};
    weft_scope_push();
    weft_tensor *w = weft_reshape(weft_module_buffer(m, "weight"), 3, split);
    s->weight_hwc = weft_tensor_retain(
        weft_reshape(weft_contiguous(weft_transpose(w, 1, 2)), 2, rows));
    weft_scope_pop();
    s->hwc_channels = C;
    return s->weight_hwc;
}

static weft_tensor *static_forward(weft_module *m, struct qlinear *s, weft_tensor *x)
{
    const weft_tensor *zp = weft_module_buffer(m, "zero_point");
    const int64_t ozp = zp ? quant_get_i64(zp) : 0;
    const weft_tensor *float_bias = s->float_output ? weft_module_buffer(m, "bias") : NULL;
    if (reads_hwc(s, x)) {
        /* [N, C, H, W] channels-last is [N, H, W, C] in memory: a view, no copy */
        const int order[4] = {0, 2, 3, 1};
        const int64_t shape[2] = {x->shape[0], s->in_features};
        weft_tensor *rows = weft_view(weft_permute(x, 4, order), 2, shape);
        weft_tensor *w = weight_hwc(m, s, x->shape[1]);
        if (!rows || !w)
            return NULL;
        return run_op(s, rows, w, &s->packed_hwc, s->bias_i32, s->multiplier, float_bias,
                      s->float_output, ozp);
    }
    if (s->flatten_input && !(x = weft_flatten(x, 1, -1)))
        return NULL;
    weft_tensor *xq = x;
    if (x->dtype == WEFT_F32)
        xq = weft_quantize_per_tensor(x, quant_get_f32(weft_module_buffer(m, "input_scale")),
                                      quant_get_i64(weft_module_buffer(m, "input_zero_point")),
                                      WEFT_U8);
    else if (x->dtype != WEFT_U8) {
        weft_error_set(WEFT_ERR_RUNTIME, "%s: expected a float32 or quint8 (uint8) input, got %s",
                       weft_module_type_name(m), weft_dtype_name(x->dtype));
        return NULL;
    }
    weft_tensor *rows = xq ? rows_of(s, xq) : NULL;
    if (!rows)
        return NULL;
    weft_tensor *y = run_op(s, rows, weft_module_buffer(m, "weight"), &s->packed, s->bias_i32,
                            s->multiplier, float_bias, s->float_output, ozp);
    return y ? unrows(s, y, x) : NULL;
}

/* The min and max of n floats, NaN skipped: sixteen running pairs the compiler keeps in
 * vector registers (weft_min + weft_max were two passes of NaN-propagating scalar lines,
 * a fifth of a dynamically quantized GPT's forward). */
static void range_of(const float *x, int64_t n, float *min, float *max)
{
    float lo[16], hi[16];
    for (int j = 0; j < 16; j++) {
        lo[j] = INFINITY;
        hi[j] = -INFINITY;
    }
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; j++) {
            lo[j] = x[i + j] < lo[j] ? x[i + j] : lo[j];
            hi[j] = x[i + j] > hi[j] ? x[i + j] : hi[j];
        }
    for (; i < n; i++) {
        lo[0] = x[i] < lo[0] ? x[i] : lo[0];
        hi[0] = x[i] > hi[0] ? x[i] : hi[0];
    }
    for (int j = 1; j < 16; j++) {
        lo[0] = lo[j] < lo[0] ? lo[j] : lo[0];
        hi[0] = hi[j] > hi[0] ? hi[j] : hi[0];
    }
    *min = lo[0] <= hi[0] ? lo[0] : 0.0f; /* all NaN (or none): the range [0, 0] */
    *max = lo[0] <= hi[0] ? hi[0] : 0.0f;
}

/* torch's dynamic quantization of the input: uint8 affine over the batch's [min, max]
 * (widened to hold 0), the whole range (no reduce_range: VNNI has no 16-bit saturation). */
static weft_tensor *dynamic_forward(weft_module *m, struct qlinear *s, weft_tensor *x)
{
    if (x->dtype != WEFT_F32) {
        weft_error_set(WEFT_ERR_RUNTIME, "%s: expected a float32 input, got %s",
                       weft_module_type_name(m), weft_dtype_name(x->dtype));
        return NULL;
    }
    weft_tensor *rows = rows_of(s, x);
    if (!rows)
        return NULL;
    if (rows->device.type != WEFT_DEVICE_CPU) {
        weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "%s: quantized models run on the cpu",
                       weft_module_type_name(m));
        return NULL;
    }
    float lo, hi;
    range_of(weft_tensor_data(rows), weft_tensor_numel(rows), &lo, &hi);
    float sx;
    int64_t zx;
    if (weft_qparams_from_range(lo, hi, WEFT_U8, false, &sx, &zx) != 0)
        return NULL;
    const int64_t N = s->out_features;
    weft_tensor *bias = weft_empty(1, &N, WEFT_I32, WEFT_CPU);
    weft_tensor *mult = weft_empty(1, &N, WEFT_F32, WEFT_CPU);
    weft_tensor *xq = weft_quantize_per_tensor(rows, sx, zx, WEFT_U8);
    if (!bias || !mult || !xq)
        return NULL;
    const int32_t *sums = weft_tensor_data(s->row_sums);
    int32_t *bd = weft_tensor_data(bias);
    float *md = weft_tensor_data(mult);
    for (int64_t n = 0; n < N; n++) {
        bd[n] = (int32_t)(-zx * sums[n]);
        md[n] = sx * s->weight_scale[n];
    }
    weft_tensor *y = run_op(s, xq, weft_module_buffer(m, "weight"), &s->packed, bias, mult,
                            weft_module_buffer(m, "bias"), true, 0);
    return y ? unrows(s, y, x) : NULL;
}

static weft_tensor *qlinear_forward(weft_module *m, weft_tensor *x)
{
    struct qlinear *s = weft_module_state(m);
    if (quant_watch_changed(&s->watch, m, quant_layer_watched) && derive(m, s) != 0) {
        s->watch.n = 0; /* derive again next time */
        return NULL;
    }
    weft_scope_push();
    weft_tensor *y = s->dynamic ? dynamic_forward(m, s, x) : static_forward(m, s, x);
    weft_tensor_retain(y);
    weft_scope_pop();
    return weft_autorelease(y);
}

static int qlinear_repr(const weft_module *m, char *buf, size_t size)
{
    const struct qlinear *s = weft_module_state(m);
    int n = snprintf(buf, size, "in_features=%lld, out_features=%lld, ", (long long)s->in_features,
                     (long long)s->out_features);
    size_t used = n < 0 ? 0 : (size_t)n;
    char *p = buf + (used < size ? used : size);
    size_t left = used < size ? size - used : 0;
    const weft_tensor *scale = weft_module_buffer(m, "scale"), *zp = weft_module_buffer(m, "zero_point");
    if (s->dynamic)
        n = snprintf(p, left, "dtype=torch.qint8, qscheme=%s", quant_weight_qscheme(m));
    else if (scale && zp)
        n = snprintf(p, left, "scale=%g, zero_point=%lld, qscheme=%s", quant_get_f32(scale),
                     (long long)quant_get_i64(zp), quant_weight_qscheme(m));
    else
        n = snprintf(p, left, "output=float32, qscheme=%s", quant_weight_qscheme(m));
    return (int)used + (n < 0 ? 0 : n);
}

static const char *qlinear_onnx(weft_module *m, struct weft_onnx_graph *g, const char *x)
{
    const struct qlinear *s = weft_module_state(m);
    return s->dynamic ? quant_onnx_dynamic_linear(m, g, x)
                      : quant_onnx_linear(m, g, x, s->relu, s->float_output, s->flatten_input);
}

#define QLINEAR_TYPE(ini, class)                                                              \
    {.base = WEFT_VTABLE(WEFT_KIND_MODULE, ini, struct weft_module_type), .class_name = class, \
     .forward = qlinear_forward, .free_state = qlinear_free, .extra_repr = qlinear_repr,      \
     .onnx_export = qlinear_onnx}

static const struct weft_module_type linear_type = QLINEAR_TYPE("quantized_linear", "QuantizedLinear");
static const struct weft_module_type linear_relu_type =
    QLINEAR_TYPE("quantized_linear_relu", "QuantizedLinearReLU");
static const struct weft_module_type dynamic_type =
    QLINEAR_TYPE("dynamic_quantized_linear", "DynamicQuantizedLinear");

static weft_module *make(const struct weft_module_type *type, const struct quant_layer_spec *spec,
                         bool dynamic)
{
    const weft_tensor *w = spec->weight;
    if (!w || w->ndim != 2 || w->dtype != WEFT_F32) {
        weft_error_set(WEFT_ERR_VALUE, "quantized Linear: expected a float32 weight [out, in]");
        return NULL;
    }
    struct qlinear *s = calloc(1, sizeof *s);
    if (!s) {
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory for a quantized Linear");
        return NULL;
    }
    *s = (struct qlinear){.dynamic = dynamic, .relu = spec->relu && !dynamic,
                          .float_output = spec->float_output || dynamic,
                          .flatten_input = spec->flatten_input && !dynamic,
                          .in_features = w->shape[1], .out_features = w->shape[0]};
    weft_module *m = weft_module_new(type, s);
    if (!m) {
        free(s);
        return NULL;
    }
    if (quant_layer_buffers(m, spec, dynamic) != 0) {
        weft_module_free(m);
        return NULL;
    }
    weft_module_train(m, false);
    return m;
}

weft_module *quant_linear_new(const struct quant_layer_spec *spec)
{
    return make(spec->relu ? &linear_relu_type : &linear_type, spec, false);
}

weft_module *quant_dynamic_linear_new(const struct quant_layer_spec *spec)
{
    return make(&dynamic_type, spec, true);
}
