/* quant/fuse.c: torch.ao.quantization.fuse_modules: Conv2d + BatchNorm2d (+ ReLU) and
 * Linear (+ BatchNorm1d, + ReLU) folded into one module for inference, and the modules
 * fusion makes: Identity (what the folded-away members become), and the intrinsic
 * LinearReLU and ConvReLU2d, which hold their Linear/Conv2d and ReLU as children "0" and
 * "1" as torch.ao.nn.intrinsic's do. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* ---- the module types -------------------------------------------------------------------- */

static weft_tensor *identity_forward(weft_module *m, weft_tensor *x)
{
    (void)m;
    return weft_autorelease(weft_tensor_retain(x));
}

static weft_tensor *linear_relu_forward(weft_module *m, weft_tensor *x)
{
    weft_module *lin = weft_module_child_at(m, 0);
    weft_tensor *w = weft_module_parameter(lin, "weight"), *b = weft_module_parameter(lin, "bias");
    if (b)
        return weft_linear_relu(x, w, b);
    weft_scope_push();
    weft_tensor *y = weft_tensor_retain(weft_relu(weft_linear(x, w, NULL)));
    weft_scope_pop();
    return weft_autorelease(y);
}

static weft_tensor *conv_relu_forward(weft_module *m, weft_tensor *x)
{
    weft_scope_push();
    weft_tensor *y = weft_tensor_retain(weft_relu(weft_module_forward(weft_module_child_at(m, 0), x)));
    weft_scope_pop();
    return weft_autorelease(y);
}

#define TYPE(ini, class, fn)                                                                  \
    {.base = WEFT_VTABLE(WEFT_KIND_MODULE, ini, struct weft_module_type), .class_name = class, \
     .forward = fn}

static const struct weft_module_type identity_type = TYPE("identity", "Identity", identity_forward);
static const struct weft_module_type linear_relu_type =
    TYPE("linear_relu", "LinearReLU", linear_relu_forward);
static const struct weft_module_type conv_relu_type =
    TYPE("conv_relu2d", "ConvReLU2d", conv_relu_forward);

weft_module *quant_identity(void)
{
    return weft_module_new(&identity_type, NULL);
}

bool quant_is_identity(const weft_module *m)
{
    return weft_module_type(m) == &identity_type;
}

bool quant_is_linear_relu(const weft_module *m)
{
    return weft_module_type(m) == &linear_relu_type;
}

bool quant_is_conv_relu(const weft_module *m)
{
    return weft_module_type(m) == &conv_relu_type;
}

const struct weft_conv2d_options *quant_conv_options(const weft_module *m)
{
    return quant_is_conv_relu(m) ? weft_nn_conv2d_options(weft_module_child_at(m, 0))
                                 : weft_nn_conv2d_options(m);
}

/* An intrinsic module of type holding inner and a new ReLU; NULL (inner freed) on error. */
static weft_module *intrinsic(const struct weft_module_type *type, weft_module *inner)
{
    weft_module *m = inner ? weft_module_new(type, NULL) : NULL;
    if (!m) {
        weft_module_free(inner);
        return NULL;
    }
    if (weft_module_add_child(m, "0", inner) != 0 ||
        weft_module_add_child(m, "1", weft_nn_relu()) != 0) {
        weft_module_free(m);
        return NULL;
    }
    return m;
}

/* ---- folding --------------------------------------------------------------------------- */

static const char *kind_of(const weft_module *m)
{
    return weft_module_type(m)->base.name;
}

/* A float32 tensor's values on the host (contiguous): a new reference in the open scope. */
static const float *host_f32(weft_tensor *t, int64_t n, const char *what)
{
    weft_tensor *c = t ? weft_contiguous(weft_to(t, WEFT_CPU, WEFT_F32, false)) : NULL;
    if (!c)
        return NULL;
    if (weft_tensor_numel(c) != n) {
        weft_error_set(WEFT_ERR_RUNTIME, "fuse_modules: %s has %lld values, expected %lld", what,
                       (long long)weft_tensor_numel(c), (long long)n);
        return NULL;
    }
    return weft_tensor_data(c);
}

/* fuse_conv_bn_weights / fuse_linear_bn_weights: into (w, b) of a new module whose weight
 * is [Co, ...] and bias [Co]. */
static int fold_batch_norm(const weft_module *layer, const weft_module *bn, weft_module *out)
{
    weft_tensor *w = weft_module_parameter(layer, "weight"), *b = weft_module_parameter(layer, "bias");
    const int64_t Co = w->shape[0], per = Co ? weft_tensor_numel(w) / Co : 0;
    const double eps = weft_nn_batch_norm_eps(bn);
    const float *wd = host_f32(w, Co * per, "the weight");
    const float *bd = b ? host_f32(b, Co, "the bias") : NULL;
    const float *mean = host_f32(weft_module_buffer(bn, "running_mean"), Co, "running_mean");
    const float *var = host_f32(weft_module_buffer(bn, "running_var"), Co, "running_var");
    const float *gamma = host_f32(weft_module_parameter(bn, "weight"), Co, "the BatchNorm's weight");
    const float *beta = host_f32(weft_module_parameter(bn, "bias"), Co, "the BatchNorm's bias");
    if (!wd || (b && !bd) || !mean || !var || !gamma || !beta)
        return weft_error_code();
    float *nw = malloc((size_t)(Co * per + 1) * sizeof *nw), *nb = malloc((size_t)(Co + 1) * sizeof *nb);
    int rc = nw && nb ? 0 : weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory fusing");
    for (int64_t c = 0; c < Co && rc == 0; c++) {
        const double k = gamma[c] / sqrt((double)var[c] + eps);
        for (int64_t i = 0; i < per; i++)
            nw[c * per + i] = (float)(wd[c * per + i] * k);
        nb[c] = (float)(((bd ? bd[c] : 0.0) - mean[c]) * k + beta[c]);
    }
    weft_tensor *ow = weft_module_parameter(out, "weight"), *ob = weft_module_parameter(out, "bias");
    bool prev = weft_no_grad_begin();
    if (rc == 0)
        rc = weft_copy_(ow, weft_reshape(quant_f32(1, (int64_t[]){Co * per}, nw), ow->ndim, ow->shape));
    if (rc == 0)
        rc = weft_copy_(ob, quant_f32(1, &Co, nb));
    weft_grad_mode_restore(prev);
    free(nw);
    free(nb);
    return rc;
}

/* A new float Linear / Conv2d like layer, with a bias, holding layer's values or (bn given)
 * the folded ones. */
static weft_module *fused_layer(const weft_module *layer, const weft_module *bn)
{
    weft_module *m;
    weft_tensor *w = weft_module_parameter(layer, "weight");
    const struct weft_conv2d_options *co = weft_nn_conv2d_options(layer);
    if (co) {
        struct weft_conv2d_options o = *co;
        o.bias = o.bias || bn;
        m = weft_nn_conv2d(&o);
    } else {
        m = weft_nn_linear(w->shape[1], w->shape[0], bn || weft_module_parameter(layer, "bias"));
    }
    if (!m)
        return NULL;
    weft_scope_push();
    int rc;
    if (bn) {
        rc = fold_batch_norm(layer, bn, m);
    } else {
        bool prev = weft_no_grad_begin();
        weft_tensor *b = weft_module_parameter(layer, "bias");
        rc = weft_copy_(weft_module_parameter(m, "weight"), w);
        if (rc == 0 && b)
            rc = weft_copy_(weft_module_parameter(m, "bias"), b);
        weft_grad_mode_restore(prev);
    }
    weft_scope_pop();
    if (rc != 0) {
        weft_module_free(m);
        return NULL;
    }
    weft_module_train(m, weft_module_is_training(layer));
    return m;
}

/* The fusion of the n modules of group, by their kinds; NULL with an error naming them. */
static weft_module *fused_group(int n, weft_module *const *group, const char *const *names)
{
    const char *k0 = kind_of(group[0]), *k1 = n > 1 ? kind_of(group[1]) : "";
    const char *k2 = n > 2 ? kind_of(group[2]) : "";
    const bool conv = !strcmp(k0, "conv2d"), lin = !strcmp(k0, "linear");
    const char *bn_kind = conv ? "batchnorm2d" : "batchnorm1d";
    const weft_module *bn = n > 1 && !strcmp(k1, bn_kind) ? group[1] : NULL;
    const bool relu = (n == 2 && !bn && !strcmp(k1, "relu")) || (n == 3 && bn && !strcmp(k2, "relu"));
    if (!(conv || lin) || n < 2 || n > 3 || (n == 3 && !(bn && relu)) || (n == 2 && !bn && !relu)) {
        char got[256] = "";
        size_t used = 0;
        for (int i = 0; i < n && used < sizeof got; i++)
            used += (size_t)snprintf(got + used, sizeof got - used, "%s%s (%s)", i ? ", " : "",
                                     names[i], weft_module_type_name(group[i]));
        weft_error_set(WEFT_ERR_RUNTIME,
                       "fuse_modules: cannot fuse [%s]: expected Conv2d, BatchNorm2d[, ReLU] or "
                       "Conv2d, ReLU or Linear, ReLU or Linear, BatchNorm1d",
                       got);
        return NULL;
    }
    if (bn && weft_module_is_training(bn)) {
        weft_error_set(WEFT_ERR_RUNTIME, "fuse_modules: folding %s into %s needs eval mode (its "
                                         "running statistics): call weft_module_train(model, "
                                         "false) first",
                       names[1], names[0]);
        return NULL;
    }
    weft_module *f = fused_layer(group[0], bn);
    if (f && relu)
        f = intrinsic(conv ? &conv_relu_type : &linear_relu_type, f);
    if (f)
        weft_module_train(f, weft_module_is_training(group[0]));
    return f;
}

/* The module at a dotted path below model, or NULL with an error. */
static weft_module *lookup(weft_module *model, const char *path)
{
    char part[128];
    weft_module *m = model;
    for (const char *p = path; m && *p;) {
        size_t len = strcspn(p, ".");
        snprintf(part, sizeof part, "%.*s", (int)len, p);
        m = weft_module_child(m, part);
        p += len + (p[len] == '.');
    }
    if (!m || m == model)
        weft_error_set(WEFT_ERR_RUNTIME, "fuse_modules: the model has no submodule '%s'", path);
    return m == model ? NULL : m;
}

/* Puts fused in group[0]'s place and Identity in the others'. */
static int install(int n, weft_module *const *group, weft_module *fused)
{
    weft_module *old[3] = {fused, NULL, NULL};
    int rc = weft_module_swap(group[0], fused);
    for (int i = 1; i < n && rc == 0; i++) {
        old[i] = quant_identity();
        rc = old[i] ? weft_module_swap(group[i], old[i]) : weft_error_code();
    }
    for (int i = 0; i < n; i++)
        weft_module_free(old[i]);
    return rc;
}

int weft_fuse_modules(weft_module *model, int n, const char *const *names)
{
    if (!model || !names || n < 1 || n > 3)
        return weft_error_set(WEFT_ERR_VALUE, "fuse_modules: expected a model and 2 or 3 names");
    weft_module *group[3];
    for (int i = 0; i < n; i++)
        if (!(group[i] = lookup(model, names[i])))
            return weft_error_code();
    weft_module *fused = fused_group(n, group, names);
    return fused ? install(n, group, fused) : weft_error_code();
}

/* The longest fusable run of children of seq starting at i: 0, 2 or 3. */
static int run_at(const weft_module *seq, int i)
{
    int n = weft_module_num_children(seq);
    const char *k[3] = {"", "", ""};
    for (int j = 0; j < 3 && i + j < n; j++)
        k[j] = kind_of(weft_module_child_at(seq, i + j));
    if (!strcmp(k[0], "conv2d")) {
        if (!strcmp(k[1], "batchnorm2d"))
            return !strcmp(k[2], "relu") ? 3 : 2;
        return !strcmp(k[1], "relu") ? 2 : 0;
    }
    if (!strcmp(k[0], "linear"))
        return !strcmp(k[1], "relu") || !strcmp(k[1], "batchnorm1d") ? 2 : 0;
    return 0;
}

static int fuse_tree(weft_module *m)
{
    int fused = 0;
    const bool seq = !strcmp(weft_module_type_name(m), "Sequential");
    for (int i = 0; i < weft_module_num_children(m); i++) {
        int len = seq ? run_at(m, i) : 0;
        if (len == 0) {
            int rc = fuse_tree(weft_module_child_at(m, i));
            if (rc < 0)
                return rc;
            fused += rc;
            continue;
        }
        weft_module *group[3];
        const char *names[3];
        for (int j = 0; j < len; j++) {
            group[j] = weft_module_child_at(m, i + j);
            names[j] = weft_module_child_name(m, i + j);
        }
        weft_module *f = fused_group(len, group, names);
        int rc = f ? install(len, group, f) : weft_error_code();
        if (rc != 0)
            return rc;
        fused++;
        i += len - 1;
    }
    return fused;
}

int weft_fuse_model(weft_module *model)
{
    if (!model)
        return weft_error_set(WEFT_ERR_VALUE, "weft_fuse_model: model is NULL");
    return fuse_tree(model);
}
