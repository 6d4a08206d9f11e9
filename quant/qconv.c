/* quant/qconv.c: torch.ao.nn.quantized's Conv2d and intrinsic ConvReLU2d (static, groups
 * 1), over the quantized_conv2d op. Activations travel channels-last ([N, H, W, C] in
 * memory, the layout oneDNN's int8 convolutions read without a reorder): a float32 input
 * is quantized straight into it, and the output is made in it. The op's int32 bias and
 * float32 multipliers are derived once and kept, as quantized Linear keeps them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

struct qconv {
    bool relu, float_output;
    struct weft_conv2d_options options;
    struct quant_watch watch;
    weft_tensor *bias_i32, *multiplier, *packed;
};

static void drop_derived(struct qconv *s)
{
    weft_tensor_release(s->bias_i32);
    weft_tensor_release(s->multiplier);
    weft_tensor_release(s->packed);
    s->bias_i32 = s->multiplier = s->packed = NULL;
}

static void qconv_free(void *p)
{
    drop_derived(p);
    free(p);
}

/* bias = round(b / (s_x s_w[co])); the input zero point is the kernel's (its padding). */
static int derive(weft_module *m, struct qconv *s)
{
    drop_derived(s);
    const int64_t N = s->options.out_channels;
    const weft_tensor *b = weft_module_buffer(m, "bias");
    const float *bd = b ? weft_tensor_data(b) : NULL;
    const double sx = quant_get_f32(weft_module_buffer(m, "input_scale"));
    const double sy = s->float_output ? 1.0 : quant_get_f32(weft_module_buffer(m, "scale"));
    float *sw = quant_weight_scales(m, N);
    int32_t *bias = malloc((size_t)(N ? N : 1) * sizeof *bias);
    float *mult = malloc((size_t)(N ? N : 1) * sizeof *mult);
    int rc = sw && bias && mult ? 0 : weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory");
    for (int64_t n = 0; n < N && rc == 0; n++) {
        bias[n] = bd ? quant_round_i32(bd[n] / (sx * sw[n])) : 0;
        mult[n] = (float)(sx * sw[n] / sy);
    }
    weft_scope_push();
    if (rc == 0) {
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

/* x as uint8 [N, C, H, W] channels-last: quantized into it, or copied there. */
static weft_tensor *channels_last_input(weft_module *m, weft_tensor *x)
{
    if (x->dtype == WEFT_U8 && quant_is_channels_last(x))
        return x;
    if (x->dtype != WEFT_U8 && x->dtype != WEFT_F32) {
        weft_error_set(WEFT_ERR_RUNTIME, "%s: expected a float32 or quint8 (uint8) input, got %s",
                       weft_module_type_name(m), weft_dtype_name(x->dtype));
        return NULL;
    }
    weft_tensor *q = quant_empty_channels_last(x->shape[0], x->shape[1], x->shape[2], x->shape[3],
                                               WEFT_U8);
    if (!q)
        return NULL;
    if (x->dtype == WEFT_U8)
        return weft_copy_(q, x) == 0 ? q : NULL;
    return quant_quantize_into(q, x, quant_get_f32(weft_module_buffer(m, "input_scale")),
                               quant_get_i64(weft_module_buffer(m, "input_zero_point"))) == 0
               ? q
               : NULL;
}

static int64_t out_size(int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t dilation)
{
    return (in + 2 * pad - dilation * (k - 1) - 1) / stride + 1;
}

static weft_tensor *conv(weft_module *m, struct qconv *s, weft_tensor *x)
{
    const struct weft_conv2d_options *o = &s->options;
    const struct weft_conv2d_params *p = &o->params;
    if (x->ndim != 4 || x->shape[1] != o->in_channels) {
        char a[160];
        weft_error_set(WEFT_ERR_RUNTIME, "%s: expected input [N, %lld, H, W], got %s",
                       weft_module_type_name(m), (long long)o->in_channels,
                       weft_shape_str(x->ndim, x->shape, a, sizeof a));
        return NULL;
    }
    const int64_t OH = out_size(x->shape[2], o->kernel_size[0], p->stride[0], p->padding[0], p->dilation[0]);
    const int64_t OW = out_size(x->shape[3], o->kernel_size[1], p->stride[1], p->padding[1], p->dilation[1]);
    if (OH < 1 || OW < 1) {
        weft_error_set(WEFT_ERR_RUNTIME, "%s: the input [%lld, %lld] is smaller than the kernel",
                       weft_module_type_name(m), (long long)x->shape[2], (long long)x->shape[3]);
        return NULL;
    }
    weft_tensor *xq = channels_last_input(m, x);
    int op = quant_op_id(QOP_CONV2D);
    weft_tensor *y = xq && op >= 0
                         ? quant_empty_channels_last(x->shape[0], o->out_channels, OH, OW,
                                                     s->float_output ? WEFT_F32 : WEFT_U8)
                         : NULL;
    if (!y || x->shape[0] == 0)
        return y;
    const weft_tensor *zp = weft_module_buffer(m, "zero_point");
    struct weft_quantized_conv2d_params params = {.packed = &s->packed};
    struct weft_op_call c = {
        .op = op, .nin = 4, .nout = 1,
        .in = {xq, weft_module_buffer(m, "weight"), s->bias_i32, s->multiplier},
        .out = {y},
        .ints = {o->kernel_size[0], o->kernel_size[1], p->stride[0], p->stride[1], p->padding[0],
                 p->padding[1], p->dilation[0], p->dilation[1], s->relu, zp ? quant_get_i64(zp) : 0,
                 quant_get_i64(weft_module_buffer(m, "input_zero_point"))},
        .params = &params, .params_size = sizeof params};
    return quant_run(&c) == 0 ? y : NULL;
}

static weft_tensor *qconv_forward(weft_module *m, weft_tensor *x)
{
    struct qconv *s = weft_module_state(m);
    if (quant_watch_changed(&s->watch, m, quant_layer_watched) && derive(m, s) != 0) {
        s->watch.n = 0;
        return NULL;
    }
    weft_scope_push();
    weft_tensor *y = weft_tensor_retain(conv(m, s, x));
    weft_scope_pop();
    return weft_autorelease(y);
}

static int qconv_repr(const weft_module *m, char *buf, size_t size)
{
    const struct qconv *s = weft_module_state(m);
    const struct weft_conv2d_options *o = &s->options;
    const weft_tensor *scale = weft_module_buffer(m, "scale"), *zp = weft_module_buffer(m, "zero_point");
    char out[64];
    if (scale && zp)
        snprintf(out, sizeof out, "scale=%g, zero_point=%lld", quant_get_f32(scale),
                 (long long)quant_get_i64(zp));
    else
        snprintf(out, sizeof out, "output=float32");
    return snprintf(buf, size, "%lld, %lld, kernel_size=(%lld, %lld), stride=(%lld, %lld), "
                               "%s, padding=(%lld, %lld)",
                    (long long)o->in_channels, (long long)o->out_channels,
                    (long long)o->kernel_size[0], (long long)o->kernel_size[1],
                    (long long)o->params.stride[0], (long long)o->params.stride[1], out,
                    (long long)o->params.padding[0], (long long)o->params.padding[1]);
}

#define QCONV_TYPE(ini, class)                                                                \
    {.base = WEFT_VTABLE(WEFT_KIND_MODULE, ini, struct weft_module_type), .class_name = class, \
     .forward = qconv_forward, .free_state = qconv_free, .extra_repr = qconv_repr}

static const struct weft_module_type conv_type = QCONV_TYPE("quantized_conv2d", "QuantizedConv2d");
static const struct weft_module_type conv_relu_type =
    QCONV_TYPE("quantized_conv_relu2d", "QuantizedConvReLU2d");

weft_module *quant_conv_new(const struct quant_layer_spec *spec)
{
    const weft_tensor *w = spec->weight;
    if (!w || w->ndim != 4 || w->dtype != WEFT_F32) {
        weft_error_set(WEFT_ERR_VALUE, "quantized Conv2d: expected a float32 weight [Cout, C, kH, kW]");
        return NULL;
    }
    struct qconv *s = calloc(1, sizeof *s);
    if (!s) {
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory for a quantized Conv2d");
        return NULL;
    }
    s->relu = spec->relu;
    s->float_output = spec->float_output;
    s->options = (struct weft_conv2d_options){.in_channels = w->shape[1],
                                              .out_channels = w->shape[0],
                                              .kernel_size = {w->shape[2], w->shape[3]},
                                              .params = spec->conv,
                                              .bias = spec->bias != NULL};
    for (int i = 0; i < 2; i++) {
        struct weft_conv2d_params *p = &s->options.params;
        p->stride[i] = p->stride[i] ? p->stride[i] : 1;
        p->dilation[i] = p->dilation[i] ? p->dilation[i] : 1;
    }
    weft_module *m = weft_module_new(spec->relu ? &conv_relu_type : &conv_type, s);
    if (!m) {
        free(s);
        return NULL;
    }
    if (quant_layer_buffers(m, spec, false) != 0) {
        weft_module_free(m);
        return NULL;
    }
    weft_module_train(m, false);
    return m;
}
