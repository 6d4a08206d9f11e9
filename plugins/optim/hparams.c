/* plugins/optim/hparams.c: hyperparameters from a config section, validated with
 * PyTorch's messages (torch/optim/sgd.py, adam.py, adamw.py, rmsprop.py). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optim_plugin.h"

const char *opt_pyfloat(double v, char *buf, size_t size)
{
    if (isnan(v))
        return "nan";
    if (isinf(v))
        return v > 0 ? "inf" : "-inf";
    int prec = 1;
    for (; prec < 17; prec++) {
        snprintf(buf, size, "%.*e", prec - 1, v);
        if (strtod(buf, NULL) == v)
            break;
    }
    const char *e = strchr(buf, 'e');
    int exp10 = e && v != 0.0 ? atoi(e + 1) : 0;
    /* Python switches to exponent notation outside [1e-4, 1e16). */
    if (exp10 < -4 || exp10 >= 16) {
        snprintf(buf, size, "%.*e", prec - 1, v);
        return buf;
    }
    int decimals = prec - 1 - exp10;
    snprintf(buf, size, "%.*f", decimals > 0 ? decimals : 0, v);
    if (!strchr(buf, '.') && strlen(buf) + 3 <= size)
        strcat(buf, ".0");
    return buf;
}

/* "0.9, 0.999" (parentheses allowed) into b[0], b[1]. */
static int parse_betas(const char *text, double *b)
{
    const char *p = text;
    while (*p == ' ' || *p == '(')
        p++;
    for (int i = 0; i < 2; i++) {
        char *end;
        b[i] = strtod(p, &end);
        if (end == p)
            return -1;
        p = end;
        while (*p == ' ')
            p++;
        if (i == 0 && *p++ != ',')
            return -1;
        while (*p == ' ')
            p++;
    }
    if (*p == ')')
        p++;
    while (*p == ' ')
        p++;
    return *p ? -1 : 0;
}

static int invalid(const char *file, const char *section, const char *what, double v)
{
    char buf[40];
    return weft_error_set(WEFT_ERR_VALUE, "%s: [%s] Invalid %s: %s", file, section, what,
                          opt_pyfloat(v, buf, sizeof buf));
}

static int validate(enum opt_kind kind, const struct opt_hparams *h, const char *file,
                    const char *section)
{
    if (!(h->lr >= 0.0))
        return invalid(file, section, "learning rate", h->lr);
    if (kind == OPT_SGD) {
        if (!(h->momentum >= 0.0))
            return invalid(file, section, "momentum value", h->momentum);
        if (!(h->weight_decay >= 0.0))
            return invalid(file, section, "weight_decay value", h->weight_decay);
        if (h->nesterov && (h->momentum <= 0.0 || h->dampening != 0.0))
            return weft_error_set(WEFT_ERR_VALUE,
                                  "%s: [%s] Nesterov momentum requires a momentum and zero "
                                  "dampening",
                                  file, section);
        return 0;
    }
    if (!(h->eps >= 0.0))
        return invalid(file, section, "epsilon value", h->eps);
    if (kind == OPT_RMSPROP) {
        if (!(h->momentum >= 0.0))
            return invalid(file, section, "momentum value", h->momentum);
        if (!(h->weight_decay >= 0.0))
            return invalid(file, section, "weight_decay value", h->weight_decay);
        if (!(h->alpha >= 0.0))
            return invalid(file, section, "alpha value", h->alpha);
        return 0;
    }
    if (!(h->beta1 >= 0.0 && h->beta1 < 1.0))
        return invalid(file, section, "beta parameter at index 0", h->beta1);
    if (!(h->beta2 >= 0.0 && h->beta2 < 1.0))
        return invalid(file, section, "beta parameter at index 1", h->beta2);
    if (!(h->weight_decay >= 0.0))
        return invalid(file, section, "weight_decay value", h->weight_decay);
    return 0;
}

static int read_sgd(struct weft_config *cfg, const char *s, struct opt_hparams *h)
{
    if (weft_config_double(cfg, s, "lr", 1e-3, &h->lr) < 0 ||
        weft_config_double(cfg, s, "momentum", 0.0, &h->momentum) < 0 ||
        weft_config_double(cfg, s, "dampening", 0.0, &h->dampening) < 0 ||
        weft_config_bool(cfg, s, "nesterov", false, &h->nesterov) < 0 ||
        weft_config_double(cfg, s, "weight_decay", 0.0, &h->weight_decay) < 0)
        return WEFT_ERR_CONFIG;
    return 0;
}

static int read_adam(bool adamw, struct weft_config *cfg, const char *s, struct opt_hparams *h)
{
    if (weft_config_double(cfg, s, "lr", 1e-3, &h->lr) < 0 ||
        weft_config_double(cfg, s, "eps", 1e-8, &h->eps) < 0 ||
        weft_config_double(cfg, s, "weight_decay", adamw ? 1e-2 : 0.0, &h->weight_decay) < 0 ||
        weft_config_bool(cfg, s, "amsgrad", false, &h->amsgrad) < 0)
        return WEFT_ERR_CONFIG;
    const char *betas = weft_config_string(cfg, s, "betas", "0.9, 0.999");
    double b[2];
    if (parse_betas(betas, b) < 0)
        return weft_error_set(WEFT_ERR_CONFIG,
                              "%s: [%s] betas = '%s': expected two numbers separated by a comma, "
                              "e.g. '0.9, 0.999'",
                              weft_config_name(cfg), s, betas);
    h->beta1 = b[0];
    h->beta2 = b[1];
    return 0;
}

static int read_rmsprop(struct weft_config *cfg, const char *s, struct opt_hparams *h)
{
    if (weft_config_double(cfg, s, "lr", 1e-2, &h->lr) < 0 ||
        weft_config_double(cfg, s, "alpha", 0.99, &h->alpha) < 0 ||
        weft_config_double(cfg, s, "eps", 1e-8, &h->eps) < 0 ||
        weft_config_double(cfg, s, "weight_decay", 0.0, &h->weight_decay) < 0 ||
        weft_config_double(cfg, s, "momentum", 0.0, &h->momentum) < 0 ||
        weft_config_bool(cfg, s, "centered", false, &h->centered) < 0)
        return WEFT_ERR_CONFIG;
    return 0;
}

int opt_read_hparams(enum opt_kind kind, struct weft_config *cfg, const char *section,
                     struct opt_hparams *h)
{
    memset(h, 0, sizeof *h);
    int rc;
    switch (kind) {
    case OPT_SGD:
        rc = read_sgd(cfg, section, h);
        break;
    case OPT_RMSPROP:
        rc = read_rmsprop(cfg, section, h);
        break;
    default:
        rc = read_adam(kind == OPT_ADAMW, cfg, section, h);
        break;
    }
    if (rc < 0)
        return rc;
    return validate(kind, h, weft_config_name(cfg), section);
}
