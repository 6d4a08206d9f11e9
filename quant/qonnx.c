/* quant/qonnx.c: the quantized modules as ONNX, in QDQ form (weft/onnx.h's builder): the
 * int8 tensors stay int8 initializers, and QuantizeLinear / DequantizeLinear say where
 * weft quantizes and dequantizes, so ONNX Runtime fuses each DequantizeLinear -> op ->
 * QuantizeLinear group into its int8 kernel (QLinearConv, QGemm) and any runtime without
 * int8 kernels computes the same in float32.
 *
 * Static layers: a value that weft holds as uint8 is a uint8 value in the graph too. A
 * layer whose input weft quantizes (a float32 input: torch's QuantStub) writes
 * QuantizeLinear -> DequantizeLinear with its input_scale and input_zero_point; one whose
 * input arrives as uint8 (from the layer before, through MaxPool and Flatten, which run on
 * uint8 in ONNX as in weft) writes only the DequantizeLinear. The weight is
 * DequantizeLinear of the int8 "weight" (per output channel, axis 0, or per tensor); the
 * bias is the int32 round(b / (s_x s_w)) weft's kernel adds, dequantized with scale
 * s_x s_w, except for a Linear that hands float32 on, which adds the float32 bias after
 * scaling as weft does. Then the op (Gemm with transB = 1, Conv), Relu for the fused
 * forms, and QuantizeLinear with the layer's scale and zero_point for a uint8 output.
 *
 * Dynamic Linear: DynamicQuantizeLinear (uint8, the tensor's range widened to hold 0: the
 * qparams weft computes per call) -> MatMulInteger with the int8 weight transposed at
 * export -> Cast -> Mul by s_x s_w -> Add the float32 bias: weft's arithmetic step for
 * step, which ONNX Runtime fuses into one DynamicQuantizeMatMul. Dequantizing the weight
 * instead and multiplying in float32 would skip the activation's quantization, and differ
 * from weft by its error.
 *
 * Zero points: ONNX types the quantized values by their zero points, so the int64 ones of
 * the checkpoint become uint8 (activations), int8 (weights) and int32 (biases) derived
 * initializers ("<module>.onnx.input_zero_point"), checked to fit. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "weft/onnx.h"

/* ---- the pieces ----------------------------------------------------------------------- */

static const char *qdq(weft_onnx_graph *g, const char *op, const char *x, const char *scale,
                       const char *zero_point, int axis)
{
    const char *in[3] = {x, scale, zero_point};
    weft_onnx_node *n = weft_onnx_node_add(g, op, 3, in, 1);
    if (axis >= 0)
        weft_onnx_attr_int(n, "axis", axis);
    return weft_onnx_node_output(n, 0);
}

/* m's buffer `name`, which a quantized module of its type always has. */
static weft_tensor *buffer(const weft_module *m, const char *name, enum weft_dtype dtype)
{
    weft_tensor *t = weft_module_buffer(m, name);
    if (!t || t->dtype != dtype || !weft_tensor_is_contiguous(t) ||
        t->device.type != WEFT_DEVICE_CPU) {
        weft_error_set(WEFT_ERR_VALUE, "%s has no %s buffer '%s' on the cpu to export",
                       weft_module_type_name(m), weft_dtype_name(dtype), name);
        return NULL;
    }
    return t;
}

/* m's float32 scale buffer `name` as its initializer; every scale must be finite and > 0
 * (ONNX divides by it). */
static const char *scale(weft_onnx_graph *g, weft_module *m, const char *name)
{
    const weft_tensor *t = buffer(m, name, WEFT_F32);
    if (!t)
        return NULL;
    const float *d = weft_tensor_data(t);
    for (int64_t i = 0; i < weft_tensor_numel(t); i++)
        if (!(d[i] > 0.0f) || isinf(d[i])) {
            weft_error_set(WEFT_ERR_VALUE, "'%s'[%lld] is %g: a scale must be finite and "
                                           "positive (a malformed int8 checkpoint?)",
                           name, (long long)i, (double)d[i]);
            return NULL;
        }
    return weft_onnx_param(g, m, name);
}

/* m's int64 zero point buffer `name` as a derived initializer of dtype: uint8 for
 * activations, int8 for weights (which weft's kernels take as symmetric: every zero point
 * 0). */
static const char *zero_point(weft_onnx_graph *g, weft_module *m, const char *name,
                              enum weft_dtype dtype)
{
    weft_tensor *t = buffer(m, name, WEFT_I64);
    if (!t)
        return NULL;
    const bool weight = dtype == WEFT_I8;
    const int64_t hi = weight ? 0 : 255, *d = weft_tensor_data(t);
    for (int64_t i = 0; i < weft_tensor_numel(t); i++)
        if (d[i] < 0 || d[i] > hi) {
            if (weight)
                weft_error_set(WEFT_ERR_VALUE, "'%s'[%lld] is %lld: weft's int8 weights are "
                                               "symmetric (zero point 0), and its kernels "
                                               "compute as if it were (a malformed int8 "
                                               "checkpoint?)",
                               name, (long long)i, (long long)d[i]);
            else
                weft_error_set(WEFT_ERR_VALUE, "'%s' is %lld, outside uint8's 0..255 (a "
                                               "malformed int8 checkpoint?)",
                               name, (long long)d[i]);
            return NULL;
        }
    weft_scope_push();
    const char *out = weft_onnx_initializer(g, m, name, weft_to_dtype(t, dtype));
    weft_scope_pop();
    return out;
}

/* DequantizeLinear of m's int8 weight: per output channel (axis 0) when weight_scale is
 * [out], per tensor when it is 0-d. */
static const char *weight(weft_onnx_graph *g, weft_module *m)
{
    const weft_tensor *s = buffer(m, "weight_scale", WEFT_F32);
    const weft_tensor *w = buffer(m, "weight", WEFT_I8);
    if (!s || !w)
        return NULL;
    if (s->ndim != 0 && (s->ndim != 1 || s->shape[0] != w->shape[0])) {
        weft_error_set(WEFT_ERR_VALUE, "'weight_scale' has %lld elements for a weight of %lld "
                                       "output channels",
                       (long long)weft_tensor_numel(s), (long long)w->shape[0]);
        return NULL;
    }
    const char *q = weft_onnx_param(g, m, "weight");
    const char *sc = scale(g, m, "weight_scale");
    const char *zp = zero_point(g, m, "weight_zero_point", WEFT_I8);
    return qdq(g, "DequantizeLinear", q, sc, zp, s->ndim == 1 ? 0 : -1);
}

/* The int32 bias weft's kernel adds, dequantized with s_x s_w[n] (per channel as the
 * weight): "" when m has no bias. */
static const char *int32_bias(weft_onnx_graph *g, weft_module *m)
{
    const weft_tensor *b = weft_module_buffer(m, "bias");
    if (!b)
        return "";
    const weft_tensor *ws = buffer(m, "weight_scale", WEFT_F32);
    const weft_tensor *xs = buffer(m, "input_scale", WEFT_F32);
    if (!ws || !xs || !(b = buffer(m, "bias", WEFT_F32)))
        return NULL;
    const int64_t N = weft_tensor_numel(b);
    const bool per_channel = ws->ndim == 1;
    float *sw = quant_weight_scales(m, N);
    int32_t *q = malloc((size_t)(N ? N : 1) * sizeof *q);
    float *s = malloc((size_t)(N ? N : 1) * sizeof *s);
    const char *out = NULL;
    if (!sw || !q || !s) {
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory exporting a bias");
        goto done;
    }
    const float sx = quant_get_f32(xs), *bd = weft_tensor_data(b);
    for (int64_t n = 0; n < N; n++) {
        q[n] = quant_bias_i32(bd[n], sx, sw[n]);
        s[n] = sx * sw[n];
    }
    weft_scope_push();
    const int32_t zero = 0;
    weft_tensor *zeros = per_channel ? weft_zeros(1, &N, WEFT_I32, WEFT_CPU)
                                     : weft_from_host(&zero, 0, NULL, WEFT_I32, WEFT_CPU);
    const char *qb = weft_onnx_initializer(g, m, "bias_int32", quant_i32(N, q));
    const char *sb = weft_onnx_initializer(g, m, "bias_scale", per_channel ? quant_f32(1, &N, s)
                                                                           : quant_f32(0, NULL, s));
    const char *zb = weft_onnx_initializer(g, m, "bias_zero_point", zeros);
    out = qdq(g, "DequantizeLinear", qb, sb, zb, per_channel ? 0 : -1);
    weft_scope_pop();
done:
    free(sw);
    free(q);
    free(s);
    return out;
}

/* The float32 value a static layer computes from: x dequantized with its input_scale and
 * input_zero_point, after quantizing it first when weft hands this layer float32 (ex: the
 * example of the layer's input, which a reshape of x on the way has none of). */
static const char *static_input(weft_onnx_graph *g, weft_module *m, const char *x,
                                const weft_tensor *ex)
{
    if (ex && ex->dtype != WEFT_F32 && ex->dtype != WEFT_U8) {
        weft_error_set(WEFT_ERR_VALUE, "expected a float32 or uint8 input, the traced one is %s",
                       weft_dtype_name(ex->dtype));
        return NULL;
    }
    const char *s = scale(g, m, "input_scale");
    const char *zp = zero_point(g, m, "input_zero_point", WEFT_U8);
    if (!ex || ex->dtype == WEFT_F32)
        x = qdq(g, "QuantizeLinear", x, s, zp, -1);
    return qdq(g, "DequantizeLinear", x, s, zp, -1);
}

/* y after the op: Relu for a fused layer, then QuantizeLinear to the uint8 output's
 * scale and zero_point, or y itself where the layer hands float32 on. */
static const char *static_output(weft_onnx_graph *g, weft_module *m, const char *y, bool relu)
{
    if (relu)
        y = weft_onnx_op(g, "Relu", 1, &y);
    if (!weft_module_buffer(m, "scale"))
        return y;
    const char *s = scale(g, m, "scale");
    const char *zp = zero_point(g, m, "zero_point", WEFT_U8);
    return qdq(g, "QuantizeLinear", y, s, zp, -1);
}

/* ---- Linear ------------------------------------------------------------------------------ */

/* x [M, K] -> Gemm(DQ(x), DQ(w), bias, transB=1). Another rank goes through [-1, K] and
 * back, on the (uint8 or float32) input and output, so that nothing sits between the
 * DequantizeLinear nodes, the Gemm and the QuantizeLinear ONNX Runtime fuses. A layer
 * that took in a Flatten (flatten_input) writes it here: ONNX's Flatten (axis 1) of x,
 * which the stored weight, in torch's column order, reads as torch does. */
const char *quant_onnx_linear(weft_module *m, weft_onnx_graph *g, const char *x, bool relu,
                              bool float_output, bool flatten_input)
{
    const weft_tensor *w = buffer(m, "weight", WEFT_I8);
    const weft_tensor *ex = weft_onnx_example(g, x);
    if (!w)
        return NULL;
    const int64_t K = w->shape[1], N = w->shape[0];
    if (flatten_input && (!ex || ex->ndim != 2)) {
        weft_onnx_node *f = weft_onnx_node_add(g, "Flatten", 1, &x, 1);
        weft_onnx_attr_int(f, "axis", 1);
        x = weft_onnx_node_output(f, 0);
    }
    const bool flat = !flatten_input && ex && ex->ndim != 2;
    const char *b = float_output ? (weft_module_buffer(m, "bias") ? weft_onnx_param(g, m, "bias") : "")
                                 : int32_bias(g, m);
    if (!b)
        return NULL;
    const char *x2 = flat ? weft_onnx_reshape(g, x, 2, (const int64_t[]){-1, K}) : x;
    const char *xq = static_input(g, m, x2, ex);
    const char *wq = weight(g, m);
    const char *in[3] = {xq, wq, b};
    weft_onnx_node *gemm = weft_onnx_node_add(g, "Gemm", *b ? 3 : 2, in, 1);
    weft_onnx_attr_int(gemm, "transB", 1);
    const char *y = static_output(g, m, weft_onnx_node_output(gemm, 0), relu);
    if (!flat || !y)
        return y;
    /* shape(x)[:-1] + [N] */
    weft_onnx_node *shape = weft_onnx_node_add(g, "Shape", 1, &x, 1);
    weft_onnx_attr_int(shape, "end", -1);
    const char *cat[2] = {weft_onnx_node_output(shape, 0), weft_onnx_const_ints(g, 1, &N)};
    weft_onnx_node *concat = weft_onnx_node_add(g, "Concat", 2, cat, 1);
    weft_onnx_attr_int(concat, "axis", 0);
    return weft_onnx_op(g, "Reshape", 2, (const char *[]){y, weft_onnx_node_output(concat, 0)});
}

/* x [..., K] float32 -> y [..., N] float32, any rank (MatMulInteger broadcasts as MatMul). */
const char *quant_onnx_dynamic_linear(weft_module *m, weft_onnx_graph *g, const char *x)
{
    const weft_tensor *ex = weft_onnx_example(g, x);
    weft_tensor *w = buffer(m, "weight", WEFT_I8);
    if (!w)
        return NULL;
    if (ex && ex->dtype != WEFT_F32) {
        weft_error_set(WEFT_ERR_VALUE, "expected a float32 input, the traced one is %s",
                       weft_dtype_name(ex->dtype));
        return NULL;
    }
    weft_onnx_node *dq = weft_onnx_node_add(g, "DynamicQuantizeLinear", 1, &x, 3);
    const char *xq = weft_onnx_node_output(dq, 0), *xs = weft_onnx_node_output(dq, 1);
    const char *xzp = weft_onnx_node_output(dq, 2);
    weft_scope_push();
    const char *wt = weft_onnx_initializer(g, m, "weight_t", weft_transpose(w, 0, 1)); /* [K, N] */
    weft_scope_pop();
    const char *wzp = zero_point(g, m, "weight_zero_point", WEFT_I8);
    const char *mm[4] = {xq, wt, xzp, wzp};
    const char *acc = weft_onnx_op(g, "MatMulInteger", 4, mm);
    weft_onnx_node *cast = weft_onnx_node_add(g, "Cast", 1, &acc, 1);
    weft_onnx_attr_int(cast, "to", 1); /* FLOAT */
    const char *ws = scale(g, m, "weight_scale");
    const char *scales = weft_onnx_op(g, "Mul", 2, (const char *[]){xs, ws});
    const char *y = weft_onnx_op(g, "Mul", 2, (const char *[]){weft_onnx_node_output(cast, 0), scales});
    if (!weft_module_buffer(m, "bias"))
        return y;
    const char *b = weft_onnx_param(g, m, "bias");
    return weft_onnx_op(g, "Add", 2, (const char *[]){y, b});
}

/* ---- Conv2d, MaxPool2d ----------------------------------------------------------------- */

/* PyTorch's symmetric (top, left) padding as ONNX's [top, left, bottom, right]. */
static void pads_of(const int64_t p[2], int64_t out[4])
{
    out[0] = out[2] = p[0];
    out[1] = out[3] = p[1];
}

const char *quant_onnx_conv(weft_module *m, weft_onnx_graph *g, const char *x,
                            const struct weft_conv2d_options *o, bool relu)
{
    const weft_tensor *ex = weft_onnx_example(g, x);
    if (ex && ex->ndim != 4) {
        char s[160];
        weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "Conv2d is exported for batched input [N, C, H, "
                                                 "W]; the example is %s",
                       weft_shape_str(ex->ndim, ex->shape, s, sizeof s));
        return NULL;
    }
    const char *b = int32_bias(g, m);
    if (!b)
        return NULL;
    const char *xq = static_input(g, m, x, ex);
    const char *wq = weight(g, m);
    const char *in[3] = {xq, wq, b};
    weft_onnx_node *n = weft_onnx_node_add(g, "Conv", *b ? 3 : 2, in, 1);
    int64_t pads[4];
    pads_of(o->params.padding, pads);
    weft_onnx_attr_ints(n, "kernel_shape", 2, o->kernel_size);
    weft_onnx_attr_ints(n, "strides", 2, o->params.stride);
    weft_onnx_attr_ints(n, "pads", 4, pads);
    weft_onnx_attr_ints(n, "dilations", 2, o->params.dilation);
    weft_onnx_attr_int(n, "group", 1);
    return static_output(g, m, weft_onnx_node_output(n, 0), relu);
}

/* MaxPool on whichever dtype weft pools here (uint8 between int8 layers: ONNX's MaxPool
 * takes uint8 since opset 12, and the max commutes with the quantization map). */
const char *quant_onnx_max_pool(weft_module *m, weft_onnx_graph *g, const char *x,
                                const struct weft_pool2d_params *p)
{
    (void)m;
    const int64_t strides[2] = {p->stride[0] ? p->stride[0] : p->kernel[0],
                                p->stride[1] ? p->stride[1] : p->kernel[1]};
    const int64_t dilations[2] = {p->dilation[0] ? p->dilation[0] : 1,
                                  p->dilation[1] ? p->dilation[1] : 1};
    int64_t pads[4];
    pads_of(p->padding, pads);
    weft_onnx_node *n = weft_onnx_node_add(g, "MaxPool", 1, &x, 1);
    weft_onnx_attr_ints(n, "kernel_shape", 2, p->kernel);
    weft_onnx_attr_ints(n, "strides", 2, strides);
    weft_onnx_attr_ints(n, "pads", 4, pads);
    weft_onnx_attr_ints(n, "dilations", 2, dilations);
    weft_onnx_attr_int(n, "ceil_mode", p->ceil_mode);
    return weft_onnx_node_output(n, 0);
}

/* ---- Embedding, and what fusion leaves ------------------------------------------------ */

/* The int8 table dequantized (a scale per row, axis 0), then Gather: the rows weft looks up
 * and scales, exactly. */
const char *quant_onnx_embedding(weft_module *m, weft_onnx_graph *g, const char *idx)
{
    const char *in[2] = {weight(g, m), idx};
    return weft_onnx_op(g, "Gather", 2, in);
}

const char *quant_onnx_identity(weft_module *m, weft_onnx_graph *g, const char *x)
{
    (void)m;
    (void)g;
    return x;
}

/* LinearReLU and ConvReLU2d (float32, before conversion): their Linear or Conv2d, then
 * Relu. */
const char *quant_onnx_intrinsic(weft_module *m, weft_onnx_graph *g, const char *x)
{
    const char *y = weft_onnx_export_module(g, weft_module_child_at(m, 0), "0", x);
    return weft_onnx_op(g, "Relu", 1, &y);
}

/* A dynamically quantized recurrent layer has no QDQ form: ONNX's LSTM, GRU and RNN take
 * float32 weights and quantize nothing inside, and weft's x W_ih^T runs on int8
 * activations quantized per call. */
const char *quant_onnx_refuse_rnn(weft_module *m, weft_onnx_graph *g, const char *x)
{
    (void)g;
    (void)x;
    const char *kind = weft_module_type_name(m);
    if (!strncmp(kind, "DynamicQuantized", strlen("DynamicQuantized")))
        kind += strlen("DynamicQuantized");
    weft_error_set(WEFT_ERR_NOT_IMPLEMENTED,
                   "dynamic int8 quantization of this %s (its input projection x W_ih^T in int8 "
                   "on activations quantized per call, W_hh stored int8) has no QDQ form: ONNX's "
                   "%s op takes float32 weights and quantizes nothing inside its recurrence; "
                   "export the float32 checkpoint instead",
                   kind, kind);
    return NULL;
}
