/* train/layer_setup.c: what a [layer.NAME] section says beyond its layer's constructor,
 * and [train] freeze: a PyTorch script's lines after `model = Net()`.
 *
 *     [layer.conv1]
 *     init = kaiming_normal        ; nn.init.kaiming_normal_(conv1.weight,
 *     init_mode = fan_out          ;     mode='fan_out', nonlinearity='relu')
 *     init_nonlinearity = relu
 *     bias_init = zeros            ; nn.init.zeros_(conv1.bias)
 *     requires_grad = false        ; conv1.requires_grad_(False)
 *
 *     [train]
 *     freeze = conv1, fc1          ; the same for each layer (or module path) named
 *
 * `init` fills the layer's weights (every parameter whose name starts with "weight":
 * Linear's and Conv2d's weight, an LSTM's weight_ih_l0 and weight_hh_l0, ...) and
 * `bias_init` its biases, after the constructor's PyTorch initialisation (so the layer
 * draws what PyTorch's constructor draws first, as a script that re-initialises). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "weft/config.h"
#include "weft/autograd.h"
#include "weft/error.h"
#include "weft/init.h"
#include "weft/nn.h"

enum scheme {
    INIT_DEFAULT, INIT_KAIMING_UNIFORM, INIT_KAIMING_NORMAL, INIT_XAVIER_UNIFORM,
    INIT_XAVIER_NORMAL, INIT_NORMAL, INIT_UNIFORM, INIT_ZEROS, INIT_ONES,
};

static const char *const scheme_names[] = {
    "default", "kaiming_uniform", "kaiming_normal", "xavier_uniform", "xavier_normal",
    "normal",  "uniform",         "zeros",          "ones",           NULL,
};

/* The init_* keys, and which schemes take each (a bit per enum scheme). */
#define KAIMING ((1u << INIT_KAIMING_UNIFORM) | (1u << INIT_KAIMING_NORMAL))
#define XAVIER ((1u << INIT_XAVIER_UNIFORM) | (1u << INIT_XAVIER_NORMAL))
static const struct {
    const char *key;
    unsigned schemes;
    const char *torch; /* the argument's name in torch.nn.init */
} init_keys[] = {
    {"init_a", KAIMING | (1u << INIT_UNIFORM), "a"},
    {"init_b", 1u << INIT_UNIFORM, "b"},
    {"init_mode", KAIMING, "mode"},
    {"init_nonlinearity", KAIMING, "nonlinearity"},
    {"init_gain", XAVIER, "gain"},
    {"init_mean", 1u << INIT_NORMAL, "mean"},
    {"init_std", 1u << INIT_NORMAL, "std"},
};
#define N_INIT_KEYS (sizeof init_keys / sizeof *init_keys)

struct init_args {
    enum scheme scheme;
    double a, b, gain, mean, std;
    const char *mode, *nonlinearity;
};

/* The keys of `init`: each read (so a misspelt one gets a "did you mean"), each checked
 * against the scheme that takes it. */
static int read_init(const weft_options *o, struct init_args *args)
{
    int scheme;
    if (weft_options_choice(o, "init", scheme_names, INIT_DEFAULT, &scheme) < 0)
        return WEFT_ERR_CONFIG;
    args->scheme = (enum scheme)scheme;
    for (size_t i = 0; i < N_INIT_KEYS; i++) {
        if (!weft_options_has(o, init_keys[i].key) || (init_keys[i].schemes >> scheme & 1u))
            continue;
        char takers[160] = "";
        size_t n = 0;
        for (int s = 0; scheme_names[s] && n < sizeof takers; s++)
            if (init_keys[i].schemes >> s & 1u)
                n += (size_t)snprintf(takers + n, sizeof takers - n, "%s%s", n ? ", " : "",
                                      scheme_names[s]);
        return weft_options_error(o, "%s is for init = %s (torch.nn.init's '%s'), not init = %s",
                                  init_keys[i].key, takers, init_keys[i].torch,
                                  scheme_names[scheme]);
    }
    double b = 1.0, std = 1.0, gain = 1.0;
    if (weft_options_double(o, "init_a", 0.0, &args->a) < 0 ||
        weft_options_double(o, "init_b", 1.0, &b) < 0 ||
        weft_options_double(o, "init_gain", 1.0, &gain) < 0 ||
        weft_options_double(o, "init_mean", 0.0, &args->mean) < 0 ||
        weft_options_double(o, "init_std", 1.0, &std) < 0)
        return WEFT_ERR_CONFIG;
    args->b = b, args->std = std, args->gain = gain;
    args->mode = weft_options_string(o, "init_mode", "fan_in");
    args->nonlinearity = weft_options_string(o, "init_nonlinearity", "leaky_relu");
    if (args->scheme == INIT_NORMAL && !(std >= 0))
        return weft_options_bad_value(o, "init_std", "expected a number >= 0");
    if (args->scheme == INIT_UNIFORM && !(args->a <= b))
        return weft_options_error(o, "init_a = %g, init_b = %g: uniform_ draws from [a, b), "
                                     "expected init_a <= init_b",
                                  args->a, b);
    return 0;
}

static int apply_init(weft_tensor *t, const struct init_args *a)
{
    switch (a->scheme) {
    case INIT_KAIMING_UNIFORM:
        return weft_nn_init_kaiming_uniform_(t, a->a, a->mode, a->nonlinearity);
    case INIT_KAIMING_NORMAL:
        return weft_nn_init_kaiming_normal_(t, a->a, a->mode, a->nonlinearity);
    case INIT_XAVIER_UNIFORM: return weft_nn_init_xavier_uniform_(t, a->gain);
    case INIT_XAVIER_NORMAL: return weft_nn_init_xavier_normal_(t, a->gain);
    case INIT_NORMAL: return weft_nn_init_normal_(t, a->mean, a->std);
    case INIT_UNIFORM: return weft_nn_init_uniform_(t, a->a, a->b);
    case INIT_ZEROS: return weft_nn_init_zeros_(t);
    case INIT_ONES: return weft_nn_init_ones_(t);
    default: return 0;
    }
}

/* The last part of a dotted parameter name ("cell.weight_ih" -> "weight_ih"). */
static const char *leaf_name(const char *name)
{
    const char *dot = strrchr(name, '.');
    return dot ? dot + 1 : name;
}

/* `key` (init or bias_init) applied to every parameter of layer whose name starts with
 * prefix ("weight", "bias"); a layer with none is an error naming the key. */
static int init_params(const weft_options *o, weft_module *layer, const char *key,
                       const char *prefix, const struct init_args *args)
{
    struct weft_named_tensor *p = NULL;
    int n = weft_module_named_parameters(layer, &p), found = 0, rc = n < 0 ? n : 0;
    for (int i = 0; rc == 0 && i < n; i++) {
        if (strncmp(leaf_name(p[i].name), prefix, strlen(prefix)) != 0)
            continue;
        found++;
        if (apply_init(p[i].tensor, args) != 0) {
            char msg[1024], shape[128];
            snprintf(msg, sizeof msg, "%s", weft_error_message());
            weft_error_clear();
            rc = weft_options_bad_value(o, key, "%s (%s, of shape %s)", msg, p[i].name,
                                        weft_shape_str(p[i].tensor->ndim, p[i].tensor->shape,
                                                       shape, sizeof shape));
        }
    }
    free(p);
    if (rc == 0 && n >= 0 && found == 0)
        rc = weft_options_bad_value(o, key, "%s has no %s parameter to initialise",
                                    weft_module_type_name(layer), prefix);
    return rc;
}

static int set_requires_grad(weft_module *m, bool requires_grad)
{
    struct weft_named_tensor *p = NULL;
    int n = weft_module_named_parameters(m, &p), rc = n < 0 ? n : 0;
    for (int i = 0; rc == 0 && i < n; i++)
        rc = weft_requires_grad_(p[i].tensor, requires_grad);
    free(p);
    return rc;
}

int train_layer_setup(struct weft_config *cfg, const char *section, weft_module *layer)
{
    const weft_options *o = weft_config_options(cfg, section);
    static const char *const bias_schemes[] = {"default", "zeros", NULL};
    struct init_args args = {0};
    int bias_scheme;
    bool requires_grad;
    if (read_init(o, &args) != 0 ||
        weft_options_choice(o, "bias_init", bias_schemes, 0, &bias_scheme) < 0 ||
        weft_options_bool(o, "requires_grad", true, &requires_grad) < 0)
        return WEFT_ERR_CONFIG;
    if (args.scheme != INIT_DEFAULT && init_params(o, layer, "init", "weight", &args) != 0)
        return weft_error_code();
    struct init_args zeros = {.scheme = INIT_ZEROS};
    if (bias_scheme != 0 && init_params(o, layer, "bias_init", "bias", &zeros) != 0)
        return weft_error_code();
    if (!requires_grad && weft_module_num_parameters(layer) == 0)
        return weft_options_bad_value(o, "requires_grad", "%s has no parameters to freeze",
                                      weft_module_type_name(layer));
    return requires_grad ? 0 : set_requires_grad(layer, false);
}

/* ---- [train] freeze ---------------------------------------------------------------- */

/* The module a dotted path names below m ("transformer.h.0"), or NULL. */
static weft_module *module_at(weft_module *m, const char *path)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    char *save = NULL;
    for (char *part = strtok_r(buf, ".", &save); part && m; part = strtok_r(NULL, ".", &save))
        m = weft_module_child(m, part);
    return m;
}

int train_model_freeze(struct weft_config *cfg, weft_module *model,
                       weft_module *(*layer_of)(weft_module *model, struct weft_config *cfg,
                                                const char *name))
{
    const char *list = weft_config_string(cfg, "train", "freeze", NULL);
    if (!list)
        return 0;
    char buf[2048];
    snprintf(buf, sizeof buf, "%s", list);
    char *save = NULL;
    int count = 0;
    for (char *name = strtok_r(buf, ", \t", &save); name; name = strtok_r(NULL, ", \t", &save)) {
        count++;
        weft_module *m = layer_of ? layer_of(model, cfg, name) : NULL;
        if (!m)
            m = module_at(model, name);
        if (!m) {
            /* the candidates: the layers of the file, else the model's top modules */
            const char *cand[256];
            size_t n = 0;
            char known[1024] = "";
            size_t used = 0;
            for (const char *const *s = weft_config_sections(cfg); *s && n < 256; s++)
                if (strncmp(*s, "layer.", 6) == 0)
                    cand[n++] = *s + 6;
            for (int i = 0; n == 0 && i < weft_module_num_children(model) && i < 256; i++)
                cand[n++] = weft_module_child_name(model, i);
            for (size_t i = 0; i < n && used < sizeof known; i++)
                used += (size_t)snprintf(known + used, sizeof known - used, "%s%s",
                                         i ? ", " : "", cand[i]);
            const char *hint = weft_closest_name(name, cand, n);
            char mean[300] = "";
            if (hint)
                snprintf(mean, sizeof mean, " (did you mean '%s'?)", hint);
            return weft_options_bad_value(weft_config_options(cfg, "train"), "freeze",
                                          "no layer or module named '%s'%s: expected layer "
                                          "names of this model (%s)",
                                          name, mean, used ? known : "none");
        }
        if (weft_module_num_parameters(m) == 0)
            return weft_options_bad_value(weft_config_options(cfg, "train"), "freeze",
                                          "'%s' (%s) has no parameters to freeze", name,
                                          weft_module_type_name(m));
        if (set_requires_grad(m, false) != 0)
            return weft_error_code();
    }
    if (count == 0)
        return weft_options_bad_value(weft_config_options(cfg, "train"), "freeze",
                                      "expected layer names separated by commas");
    return 0;
}
