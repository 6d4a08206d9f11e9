/* quant/qpool.c: MaxPool2d in a quantized model. torch keeps nn.MaxPool2d there, as max
 * commutes with the monotone quantization map; here the module runs weft_max_pool2d on a
 * float32 input and the quantized_max_pool2d op on uint8/int8, whose output keeps the
 * input's qparams and its memory format (channels-last between quantized convolutions). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* PyTorch's pooling_output_shape. */
static int64_t output_size(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dilation,
                           bool ceil_mode)
{
    int64_t num = in + 2 * pad - dilation * (k - 1) - 1 + (ceil_mode ? stride - 1 : 0);
    int64_t out = (num >= 0 ? num / stride : -((-num + stride - 1) / stride)) + 1;
    if (ceil_mode && (out - 1) * stride >= in + pad)
        out--;
    return out;
}

static weft_tensor *quantized_max_pool(const struct weft_pool2d_params *p, weft_tensor *x)
{
    if (x->ndim != 4) {
        char s[160];
        weft_error_set(WEFT_ERR_RUNTIME, "quantized max_pool2d: expected a 4-D input [N, C, H, W], "
                                         "got %s",
                       weft_shape_str(x->ndim, x->shape, s, sizeof s));
        return NULL;
    }
    const int64_t kh = p->kernel[0], kw = p->kernel[1];
    const int64_t sh = p->stride[0] ? p->stride[0] : kh, sw = p->stride[1] ? p->stride[1] : kw;
    const int64_t dh = p->dilation[0] ? p->dilation[0] : 1, dw = p->dilation[1] ? p->dilation[1] : 1;
    const int64_t OH = output_size(x->shape[2], kh, p->padding[0], sh, dh, p->ceil_mode);
    const int64_t OW = output_size(x->shape[3], kw, p->padding[1], sw, dw, p->ceil_mode);
    if (kh < 1 || kw < 1 || sh < 1 || sw < 1 || OH < 1 || OW < 1) {
        weft_error_set(WEFT_ERR_RUNTIME, "quantized max_pool2d: kernel %lldx%lld, stride %lldx%lld "
                                         "give no output for input %lldx%lld",
                       (long long)kh, (long long)kw, (long long)sh, (long long)sw,
                       (long long)x->shape[2], (long long)x->shape[3]);
        return NULL;
    }
    const int64_t N = x->shape[0], C = x->shape[1];
    const int64_t shape[4] = {N, C, OH, OW};
    weft_tensor *y = quant_is_channels_last(x) ? quant_empty_channels_last(N, C, OH, OW, x->dtype)
                                               : weft_empty(4, shape, x->dtype, x->device);
    int op = quant_op_id(QOP_MAX_POOL2D);
    if (!y || op < 0)
        return NULL;
    if (weft_tensor_numel(y) == 0)
        return y;
    struct weft_op_call c = {.op = op, .nin = 1, .nout = 1, .in = {x}, .out = {y},
                             .ints = {kh, kw, sh, sw, p->padding[0], p->padding[1], dh, dw}};
    return quant_run(&c) == 0 ? y : NULL;
}

static weft_tensor *max_pool_forward(weft_module *m, weft_tensor *x)
{
    const struct weft_pool2d_params *p = weft_module_state(m);
    if (weft_dtype_is_floating(x->dtype))
        return weft_max_pool2d(x, p);
    weft_scope_push();
    weft_tensor *y = weft_tensor_retain(quantized_max_pool(p, x));
    weft_scope_pop();
    return weft_autorelease(y);
}

static int max_pool_repr(const weft_module *m, char *buf, size_t size)
{
    const struct weft_pool2d_params *p = weft_module_state(m);
    return snprintf(buf, size, "kernel_size=%lld, stride=%lld, padding=%lld, dilation=%lld, "
                               "ceil_mode=%s",
                    (long long)p->kernel[0], (long long)p->stride[0], (long long)p->padding[0],
                    (long long)p->dilation[0], p->ceil_mode ? "True" : "False");
}

static const struct weft_module_type max_pool_type = {
    .base = WEFT_VTABLE(WEFT_KIND_MODULE, "quantized_max_pool2d", struct weft_module_type),
    .class_name = "MaxPool2d",
    .forward = max_pool_forward,
    .free_state = free,
    .extra_repr = max_pool_repr,
};

weft_module *quant_max_pool_new(const struct weft_pool2d_params *params)
{
    struct weft_pool2d_params *p = malloc(sizeof *p);
    if (!p) {
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory for a MaxPool2d");
        return NULL;
    }
    *p = *params;
    weft_module *m = weft_module_new(&max_pool_type, p);
    if (!m)
        free(p);
    else
        weft_module_train(m, false);
    return m;
}
