/* nn/layer_options.c: the built-in layers built from options: each type's create(),
 * reading the keyword arguments of its torch.nn constructor ([layer.fc1] type = linear,
 * in_features = 784, out_features = 256) with PyTorch's defaults, then calling the C
 * constructor of layers.c. */
#include <string.h>

#include "internal.h"

/* A required positive integer. */
static int need_positive(const weft_options *o, const char *key, int64_t *out)
{
    return weft_options_require(o, key) || weft_options_positive(o, key, 0, out) ? WEFT_ERR_CONFIG
                                                                                 : 0;
}

/* "3" or "3, 3" into two values (one value is used for both); def for both when absent. */
static int pair(const weft_options *o, const char *key, int64_t def, int64_t out[2])
{
    int64_t v[2];
    int n = 0;
    if (weft_options_ints(o, key, 2, v, &n) < 0)
        return WEFT_ERR_CONFIG;
    out[0] = n > 0 ? v[0] : def;
    out[1] = n > 1 ? v[1] : out[0];
    if (out[0] < 0 || out[1] < 0)
        return weft_options_bad_value(o, key, "expected a non-negative integer or a pair like "
                                              "'3, 3'");
    return 0;
}

static int need_pair(const weft_options *o, const char *key, int64_t out[2])
{
    return weft_options_require(o, key) || pair(o, key, 0, out) ? WEFT_ERR_CONFIG : 0;
}

NN_INTERNAL weft_module *nn_create_linear(const weft_options *o)
{
    int64_t in, out;
    bool bias;
    if (need_positive(o, "in_features", &in) || need_positive(o, "out_features", &out) ||
        weft_options_bool(o, "bias", true, &bias))
        return NULL;
    return weft_nn_linear(in, out, bias);
}

NN_INTERNAL weft_module *nn_create_conv2d(const weft_options *o)
{
    struct weft_conv2d_options c = {0};
    bool bias;
    if (need_positive(o, "in_channels", &c.in_channels) ||
        need_positive(o, "out_channels", &c.out_channels) ||
        need_pair(o, "kernel_size", c.kernel_size) || pair(o, "stride", 1, c.params.stride) ||
        pair(o, "padding", 0, c.params.padding) || pair(o, "dilation", 1, c.params.dilation) ||
        weft_options_int(o, "groups", 1, &c.params.groups) ||
        weft_options_bool(o, "bias", true, &bias))
        return NULL;
    c.bias = bias;
    return weft_nn_conv2d(&c);
}

static weft_module *create_pool(const weft_options *o, bool max)
{
    struct weft_pool2d_params p = {.count_include_pad = true};
    bool ceil_mode, include_pad = true;
    if (need_pair(o, "kernel_size", p.kernel) || pair(o, "stride", 0, p.stride) ||
        pair(o, "padding", 0, p.padding) || weft_options_bool(o, "ceil_mode", false, &ceil_mode))
        return NULL;
    if (max && pair(o, "dilation", 1, p.dilation))
        return NULL;
    if (!max && weft_options_bool(o, "count_include_pad", true, &include_pad))
        return NULL;
    p.ceil_mode = ceil_mode;
    p.count_include_pad = include_pad;
    return max ? weft_nn_max_pool2d(&p) : weft_nn_avg_pool2d(&p);
}

NN_INTERNAL weft_module *nn_create_max_pool2d(const weft_options *o)
{
    return create_pool(o, true);
}

NN_INTERNAL weft_module *nn_create_avg_pool2d(const weft_options *o)
{
    return create_pool(o, false);
}

NN_INTERNAL weft_module *nn_create_adaptive_avg_pool2d(const weft_options *o)
{
    int64_t size[2];
    if (pair(o, "output_size", 1, size))
        return NULL;
    return weft_nn_adaptive_avg_pool2d(size[0], size[1]);
}

static weft_module *create_batch_norm(const weft_options *o, int spatial_dims)
{
    int64_t n;
    double eps, momentum;
    if (need_positive(o, "num_features", &n) || weft_options_double(o, "eps", 1e-5, &eps) ||
        weft_options_double(o, "momentum", 0.1, &momentum))
        return NULL;
    return spatial_dims == 1 ? weft_nn_batch_norm1d(n, eps, momentum)
                             : weft_nn_batch_norm2d(n, eps, momentum);
}

NN_INTERNAL weft_module *nn_create_batch_norm1d(const weft_options *o)
{
    return create_batch_norm(o, 1);
}

NN_INTERNAL weft_module *nn_create_batch_norm2d(const weft_options *o)
{
    return create_batch_norm(o, 2);
}

NN_INTERNAL weft_module *nn_create_layer_norm(const weft_options *o)
{
    int64_t shape[WEFT_MAX_DIMS];
    int nd = 0;
    double eps;
    bool affine;
    if (weft_options_require(o, "normalized_shape") ||
        weft_options_ints(o, "normalized_shape", WEFT_MAX_DIMS, shape, &nd) ||
        weft_options_double(o, "eps", 1e-5, &eps) ||
        weft_options_bool(o, "elementwise_affine", true, &affine))
        return NULL;
    return weft_nn_layer_norm(nd, shape, eps, affine);
}

NN_INTERNAL weft_module *nn_create_dropout(const weft_options *o)
{
    double p;
    return weft_options_double(o, "p", 0.5, &p) ? NULL : weft_nn_dropout(p);
}

NN_INTERNAL weft_module *nn_create_embedding(const weft_options *o)
{
    int64_t num, dim;
    if (need_positive(o, "num_embeddings", &num) || need_positive(o, "embedding_dim", &dim))
        return NULL;
    if (!weft_options_has(o, "padding_idx"))
        return weft_nn_embedding(num, dim);
    /* nn.Embedding's range, in its words, with the key and the range */
    int64_t pad;
    if (weft_options_int(o, "padding_idx", 0, &pad))
        return NULL;
    if (pad >= num || pad < -num) {
        weft_options_bad_value(o, "padding_idx",
                               "Padding_idx must be within num_embeddings (%lld to %lld)",
                               (long long)-num, (long long)(num - 1));
        return NULL;
    }
    return weft_nn_embedding_padding(num, dim, pad);
}

NN_INTERNAL weft_module *nn_create_flatten(const weft_options *o)
{
    int64_t start, end;
    if (weft_options_int_range(o, "start_dim", 1, -WEFT_MAX_DIMS, WEFT_MAX_DIMS, &start) ||
        weft_options_int_range(o, "end_dim", -1, -WEFT_MAX_DIMS, WEFT_MAX_DIMS, &end))
        return NULL;
    return weft_nn_flatten((int)start, (int)end);
}

NN_INTERNAL weft_module *nn_create_relu(const weft_options *o)
{
    (void)o;
    return weft_nn_relu();
}

NN_INTERNAL weft_module *nn_create_gelu(const weft_options *o)
{
    /* nn.GELU(approximate='none'): none | tanh */
    static const char *const forms[] = {"none", "tanh", NULL};
    int approximate;
    if (weft_options_choice(o, "approximate", forms, WEFT_GELU_NONE, &approximate) < 0)
        return NULL;
    return weft_nn_gelu_approximate((enum weft_gelu_approximate)approximate);
}

NN_INTERNAL weft_module *nn_create_tanh(const weft_options *o)
{
    (void)o;
    return weft_nn_tanh();
}

NN_INTERNAL weft_module *nn_create_sigmoid(const weft_options *o)
{
    (void)o;
    return weft_nn_sigmoid();
}

NN_INTERNAL weft_module *nn_create_leaky_relu(const weft_options *o)
{
    double slope;
    return weft_options_double(o, "negative_slope", 0.01, &slope) ? NULL
                                                                  : weft_nn_leaky_relu(slope);
}

static weft_module *create_softmax(const weft_options *o, bool log)
{
    int64_t dim;
    if (weft_options_int_range(o, "dim", 1, -WEFT_MAX_DIMS, WEFT_MAX_DIMS - 1, &dim))
        return NULL;
    return log ? weft_nn_log_softmax((int)dim) : weft_nn_softmax((int)dim);
}

NN_INTERNAL weft_module *nn_create_softmax(const weft_options *o)
{
    return create_softmax(o, false);
}

NN_INTERNAL weft_module *nn_create_log_softmax(const weft_options *o)
{
    return create_softmax(o, true);
}
