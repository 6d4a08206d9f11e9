/* apps/train/train_model.c: the model and the loss from the INI file.
 *
 * [model] holds the model's kind (only "sequential" today); every section named
 * "layer.<name>" is one layer, in file order, with a `type` key and the keys of that
 * layer's torch.nn constructor. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train.h"

static const char *const layer_types[] = {
    "linear",  "conv2d",      "maxpool2d",  "avgpool2d",  "adaptive_avgpool2d", "batchnorm1d",
    "batchnorm2d", "layernorm", "dropout",   "embedding",  "flatten",            "relu",
    "leaky_relu",  "gelu",      "tanh",      "sigmoid",    "softmax",            "log_softmax",
    NULL};

enum layer_type {
    L_LINEAR, L_CONV2D, L_MAXPOOL2D, L_AVGPOOL2D, L_ADAPTIVE_AVGPOOL2D, L_BATCHNORM1D,
    L_BATCHNORM2D, L_LAYERNORM, L_DROPOUT, L_EMBEDDING, L_FLATTEN, L_RELU, L_LEAKY_RELU,
    L_GELU, L_TANH, L_SIGMOID, L_SOFTMAX, L_LOG_SOFTMAX
};

/* A required positive integer key. */
static int need_int(struct weft_config *cfg, const char *section, const char *key, int64_t *out)
{
    if (!weft_config_has(cfg, section, key)) {
        weft_config_mark_known(cfg, section, key);
        return weft_error_set(WEFT_ERR_CONFIG, "%s: [%s] missing required key '%s'",
                              weft_config_name(cfg), section, key);
    }
    if (weft_config_int(cfg, section, key, 0, out) != 0)
        return weft_error_code();
    if (*out <= 0)
        return weft_error_set(WEFT_ERR_CONFIG, "%s: [%s] %s = %lld: expected a positive integer",
                              weft_config_name(cfg), section, key, (long long)*out);
    return 0;
}

/* "3" or "3, 3" into two values (a single value is used for both). */
static int pair(struct weft_config *cfg, const char *section, const char *key, int64_t def,
                int64_t out[2])
{
    const char *text = weft_config_string(cfg, section, key, NULL);
    out[0] = out[1] = def;
    if (!text)
        return 0;
    char *end;
    long long a = strtoll(text, &end, 10), b = a;
    while (*end == ' ')
        end++;
    if (*end == ',') {
        b = strtoll(end + 1, &end, 10);
        while (*end == ' ')
            end++;
    }
    if (*end != '\0' || end == text || a < 0 || b < 0)
        return weft_error_set(WEFT_ERR_CONFIG,
                              "%s: [%s] %s = '%s': expected a non-negative integer or a pair "
                              "like '3, 3'",
                              weft_config_name(cfg), section, key, text);
    out[0] = a;
    out[1] = b;
    return 0;
}

static weft_module *build_pool(struct weft_config *cfg, const char *s, bool max)
{
    struct weft_pool2d_params p = {.count_include_pad = true};
    bool ceil_mode = false, include_pad = true;
    if (pair(cfg, s, "kernel_size", 0, p.kernel) || pair(cfg, s, "stride", 0, p.stride) ||
        pair(cfg, s, "padding", 0, p.padding) ||
        weft_config_bool(cfg, s, "ceil_mode", false, &ceil_mode))
        return NULL;
    if (max && pair(cfg, s, "dilation", 1, p.dilation))
        return NULL;
    if (!max && weft_config_bool(cfg, s, "count_include_pad", true, &include_pad))
        return NULL;
    if (p.kernel[0] == 0) {
        weft_error_set(WEFT_ERR_CONFIG, "%s: [%s] missing required key 'kernel_size'",
                       weft_config_name(cfg), s);
        return NULL;
    }
    p.ceil_mode = ceil_mode;
    p.count_include_pad = include_pad;
    return max ? weft_nn_max_pool2d(&p) : weft_nn_avg_pool2d(&p);
}

static weft_module *build_layer(struct weft_config *cfg, const char *s, int type)
{
    int64_t a = 0, b = 0;
    bool flag = true;
    double x = 0, y = 0;
    switch ((enum layer_type)type) {
    case L_LINEAR:
        if (need_int(cfg, s, "in_features", &a) || need_int(cfg, s, "out_features", &b) ||
            weft_config_bool(cfg, s, "bias", true, &flag))
            return NULL;
        return weft_nn_linear(a, b, flag);
    case L_CONV2D: {
        struct weft_conv2d_options o = {0};
        int64_t stride[2], pad[2], dil[2];
        if (need_int(cfg, s, "in_channels", &o.in_channels) ||
            need_int(cfg, s, "out_channels", &o.out_channels) ||
            pair(cfg, s, "kernel_size", 0, o.kernel_size) || pair(cfg, s, "stride", 1, stride) ||
            pair(cfg, s, "padding", 0, pad) || pair(cfg, s, "dilation", 1, dil) ||
            weft_config_int(cfg, s, "groups", 1, &o.params.groups) ||
            weft_config_bool(cfg, s, "bias", true, &flag))
            return NULL;
        if (o.kernel_size[0] == 0) {
            weft_error_set(WEFT_ERR_CONFIG, "%s: [%s] missing required key 'kernel_size'",
                           weft_config_name(cfg), s);
            return NULL;
        }
        memcpy(o.params.stride, stride, sizeof stride);
        memcpy(o.params.padding, pad, sizeof pad);
        memcpy(o.params.dilation, dil, sizeof dil);
        o.bias = flag;
        return weft_nn_conv2d(&o);
    }
    case L_MAXPOOL2D: return build_pool(cfg, s, true);
    case L_AVGPOOL2D: return build_pool(cfg, s, false);
    case L_ADAPTIVE_AVGPOOL2D: {
        int64_t size[2];
        if (pair(cfg, s, "output_size", 1, size))
            return NULL;
        return weft_nn_adaptive_avg_pool2d(size[0], size[1]);
    }
    case L_BATCHNORM1D:
    case L_BATCHNORM2D:
        if (need_int(cfg, s, "num_features", &a) || weft_config_double(cfg, s, "eps", 1e-5, &x) ||
            weft_config_double(cfg, s, "momentum", 0.1, &y))
            return NULL;
        return type == L_BATCHNORM1D ? weft_nn_batch_norm1d(a, x, y) : weft_nn_batch_norm2d(a, x, y);
    case L_LAYERNORM: {
        int64_t shape[2];
        if (pair(cfg, s, "normalized_shape", 0, shape) || weft_config_double(cfg, s, "eps", 1e-5, &x) ||
            weft_config_bool(cfg, s, "elementwise_affine", true, &flag))
            return NULL;
        const char *text = weft_config_string(cfg, s, "normalized_shape", "");
        int nd = strchr(text, ',') ? 2 : 1;
        return weft_nn_layer_norm(nd, nd == 2 ? shape : shape + 1, x, flag);
    }
    case L_DROPOUT:
        if (weft_config_double(cfg, s, "p", 0.5, &x))
            return NULL;
        return weft_nn_dropout(x);
    case L_EMBEDDING:
        if (need_int(cfg, s, "num_embeddings", &a) || need_int(cfg, s, "embedding_dim", &b))
            return NULL;
        return weft_nn_embedding(a, b);
    case L_FLATTEN:
        if (weft_config_int(cfg, s, "start_dim", 1, &a) || weft_config_int(cfg, s, "end_dim", -1, &b))
            return NULL;
        return weft_nn_flatten((int)a, (int)b);
    case L_RELU: return weft_nn_relu();
    case L_LEAKY_RELU:
        if (weft_config_double(cfg, s, "negative_slope", 0.01, &x))
            return NULL;
        return weft_nn_leaky_relu(x);
    case L_GELU: return weft_nn_gelu();
    case L_TANH: return weft_nn_tanh();
    case L_SIGMOID: return weft_nn_sigmoid();
    case L_SOFTMAX:
    case L_LOG_SOFTMAX:
        if (weft_config_int(cfg, s, "dim", 1, &a))
            return NULL;
        return type == L_SOFTMAX ? weft_nn_softmax((int)a) : weft_nn_log_softmax((int)a);
    }
    return NULL;
}

weft_module *train_build_model(struct weft_config *cfg)
{
    static const char *const kinds[] = {"sequential", NULL};
    int kind;
    if (weft_config_choice(cfg, "model", "type", kinds, 0, &kind) != 0)
        return NULL;
    weft_module *seq = weft_nn_sequential(0, NULL);
    if (!seq)
        return NULL;
    int count = 0;
    for (const char *const *sec = weft_config_sections(cfg); *sec; sec++) {
        if (strncmp(*sec, "layer.", 6) != 0)
            continue;
        int type;
        if (!weft_config_has(cfg, *sec, "type")) {
            weft_error_set(WEFT_ERR_CONFIG, "%s: [%s] missing required key 'type'",
                           weft_config_name(cfg), *sec);
            goto fail;
        }
        if (weft_config_choice(cfg, *sec, "type", layer_types, 0, &type) != 0)
            goto fail;
        weft_module *layer = build_layer(cfg, *sec, type);
        if (!layer) {
            if (weft_error_code() == WEFT_OK)
                weft_error_set(WEFT_ERR_CONFIG, "%s: [%s] could not build the layer",
                               weft_config_name(cfg), *sec);
            else if (weft_error_code() != WEFT_ERR_CONFIG) {
                /* A constructor's argument error: say which section it came from. */
                char msg[1024];
                snprintf(msg, sizeof msg, "%s", weft_error_message());
                weft_error_clear();
                weft_error_set(WEFT_ERR_CONFIG, "%s: [%s] %s", weft_config_name(cfg), *sec, msg);
            }
            goto fail;
        }
        if (weft_nn_sequential_append(seq, layer) != 0)
            goto fail;
        count++;
    }
    if (count == 0) {
        weft_error_set(WEFT_ERR_CONFIG, "%s: the model has no layers: add [layer.<name>] sections "
                                        "with a 'type' key (one of linear, conv2d, relu, ...)",
                       weft_config_name(cfg));
        goto fail;
    }
    return seq;
fail:
    weft_module_free(seq);
    return NULL;
}

/* ---- the loss --------------------------------------------------------------------------- */

int train_loss_from_config(struct weft_config *cfg, struct train_loss *loss)
{
    static const char *const kinds[] = {"cross_entropy", "nll", "mse", "l1", "bce_with_logits", NULL};
    static const char *const reductions[] = {"mean", "sum", NULL};
    int kind, reduction;
    memset(loss, 0, sizeof *loss);
    loss->ce = weft_cross_entropy_defaults();
    if (weft_config_choice(cfg, "loss", "type", kinds, 0, &kind) ||
        weft_config_choice(cfg, "loss", "reduction", reductions, 0, &reduction) ||
        weft_config_double(cfg, "loss", "label_smoothing", 0, &loss->ce.label_smoothing) ||
        weft_config_int(cfg, "loss", "ignore_index", -100, &loss->ce.ignore_index))
        return weft_error_code();
    if (loss->ce.label_smoothing < 0 || loss->ce.label_smoothing > 1)
        return weft_error_set(WEFT_ERR_CONFIG,
                              "%s: [loss] label_smoothing = %g: expected a value in [0, 1]",
                              weft_config_name(cfg), loss->ce.label_smoothing);
    loss->kind = kind;
    loss->ce.reduction = reduction == 0 ? WEFT_REDUCTION_MEAN : WEFT_REDUCTION_SUM;
    loss->classification = kind == LOSS_CROSS_ENTROPY || kind == LOSS_NLL;
    return 0;
}

weft_tensor *train_loss_compute(const struct train_loss *loss, weft_tensor *output,
                                weft_tensor *target)
{
    switch (loss->kind) {
    case LOSS_CROSS_ENTROPY: return weft_cross_entropy(output, target, &loss->ce);
    case LOSS_NLL: return weft_nll_loss(output, target, &loss->ce);
    case LOSS_MSE: return weft_mse_loss(output, weft_to_dtype(target, output->dtype), loss->ce.reduction);
    case LOSS_L1: return weft_l1_loss(output, weft_to_dtype(target, output->dtype), loss->ce.reduction);
    case LOSS_BCE_WITH_LOGITS:
        return weft_binary_cross_entropy_with_logits(output, weft_to_dtype(target, output->dtype),
                                                     NULL, loss->ce.reduction);
    }
    return NULL;
}
