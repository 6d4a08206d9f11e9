/* plugins/optim/hparams.c: hyperparameters from options (a config section), validated with
 * PyTorch's messages (torch/optim/sgd.py, adam.py, adamw.py, rmsprop.py). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optim_plugin.h"

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

static int invalid(const weft_options *o, const char *what, double v)
{
    char buf[40], where[512];
    return weft_error_set(WEFT_ERR_VALUE, "%sInvalid %s: %s",
                          weft_options_where(o, where, sizeof where), what,
                          weft_repr_float(v, buf, sizeof buf));
}

static int validate(enum opt_kind kind, const struct opt_hparams *h, const weft_options *o)
{
    if (!(h->lr >= 0.0))
        return invalid(o, "learning rate", h->lr);
    if (kind == OPT_SGD) {
        if (!(h->momentum >= 0.0))
            return invalid(o, "momentum value", h->momentum);
        if (!(h->weight_decay >= 0.0))
            return invalid(o, "weight_decay value", h->weight_decay);
        if (h->nesterov && (h->momentum <= 0.0 || h->dampening != 0.0)) {
            char where[512];
            return weft_error_set(WEFT_ERR_VALUE,
                                  "%sNesterov momentum requires a momentum and zero dampening",
                                  weft_options_where(o, where, sizeof where));
        }
        return 0;
    }
    if (!(h->eps >= 0.0))
        return invalid(o, "epsilon value", h->eps);
    if (kind == OPT_RMSPROP) {
        if (!(h->momentum >= 0.0))
            return invalid(o, "momentum value", h->momentum);
        if (!(h->weight_decay >= 0.0))
            return invalid(o, "weight_decay value", h->weight_decay);
        if (!(h->alpha >= 0.0))
            return invalid(o, "alpha value", h->alpha);
        return 0;
    }
    if (!(h->beta1 >= 0.0 && h->beta1 < 1.0))
        return invalid(o, "beta parameter at index 0", h->beta1);
    if (!(h->beta2 >= 0.0 && h->beta2 < 1.0))
        return invalid(o, "beta parameter at index 1", h->beta2);
    if (!(h->weight_decay >= 0.0))
        return invalid(o, "weight_decay value", h->weight_decay);
    return 0;
}

static int read_sgd(const weft_options *o, struct opt_hparams *h)
{
    if (weft_options_double(o, "lr", 1e-3, &h->lr) < 0 ||
        weft_options_double(o, "momentum", 0.0, &h->momentum) < 0 ||
        weft_options_double(o, "dampening", 0.0, &h->dampening) < 0 ||
        weft_options_bool(o, "nesterov", false, &h->nesterov) < 0 ||
        weft_options_double(o, "weight_decay", 0.0, &h->weight_decay) < 0)
        return WEFT_ERR_CONFIG;
    return 0;
}

static int read_adam(bool adamw, const weft_options *o, struct opt_hparams *h)
{
    if (weft_options_double(o, "lr", 1e-3, &h->lr) < 0 ||
        weft_options_double(o, "eps", 1e-8, &h->eps) < 0 ||
        weft_options_double(o, "weight_decay", adamw ? 1e-2 : 0.0, &h->weight_decay) < 0 ||
        weft_options_bool(o, "amsgrad", false, &h->amsgrad) < 0)
        return WEFT_ERR_CONFIG;
    const char *betas = weft_options_string(o, "betas", "0.9, 0.999");
    double b[2];
    if (parse_betas(betas, b) < 0)
        return weft_options_bad_value(o, "betas", "expected two numbers separated by a comma, "
                                                  "e.g. '0.9, 0.999'");
    h->beta1 = b[0];
    h->beta2 = b[1];
    return 0;
}

static int read_rmsprop(const weft_options *o, struct opt_hparams *h)
{
    if (weft_options_double(o, "lr", 1e-2, &h->lr) < 0 ||
        weft_options_double(o, "alpha", 0.99, &h->alpha) < 0 ||
        weft_options_double(o, "eps", 1e-8, &h->eps) < 0 ||
        weft_options_double(o, "weight_decay", 0.0, &h->weight_decay) < 0 ||
        weft_options_double(o, "momentum", 0.0, &h->momentum) < 0 ||
        weft_options_bool(o, "centered", false, &h->centered) < 0)
        return WEFT_ERR_CONFIG;
    return 0;
}

int opt_read_hparams(enum opt_kind kind, const weft_options *o, struct opt_hparams *h)
{
    memset(h, 0, sizeof *h);
    int rc;
    switch (kind) {
    case OPT_SGD:
        rc = read_sgd(o, h);
        break;
    case OPT_RMSPROP:
        rc = read_rmsprop(o, h);
        break;
    default:
        rc = read_adam(kind == OPT_ADAMW, o, h);
        break;
    }
    if (rc == 0)
        rc = weft_options_bool(o, "fused", true, &h->fused);
    if (rc < 0)
        return rc;
    return validate(kind, h, o);
}
