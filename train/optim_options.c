/* torch.optim's constructors for C programs (weft/optim.h): the option structs become
 * the same key/value options an INI section gives, so both paths share one parser, one
 * set of checks and one set of messages in the optimizer plugin. */
#include <stdio.h>

#include "weft/error.h"
#include "weft/optim.h"

static int set_double(weft_options *o, const char *key, double v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%.17g", v); /* round-trips every double exactly */
    return weft_options_set(o, key, buf);
}

static int set_bool(weft_options *o, const char *key, bool v)
{
    return weft_options_set(o, key, v ? "true" : "false");
}

/* Messages from the plugin read "weft_adam(): Invalid learning rate: -0.1". */
static weft_optimizer *create(const char *type, const char *origin, int n,
                              weft_tensor *const *params, weft_options *o, int rc)
{
    weft_optimizer *opt = NULL;
    if (rc == 0 && o)
        opt = weft_optimizer_create(type, n, params, o);
    else if (!o)
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "%s: out of memory", origin);
    weft_options_free(o);
    return opt;
}

weft_optimizer *weft_sgd(int n, weft_tensor *const *params, const struct weft_sgd_options *opts)
{
    struct weft_sgd_options d = WEFT_SGD_OPTIONS_INIT;
    const struct weft_sgd_options *s = opts ? opts : &d;
    weft_options *o = weft_options_new("optimizer", "weft_sgd()");
    int rc = !o ? -1
                : set_double(o, "lr", s->lr) | set_double(o, "momentum", s->momentum) |
                      set_double(o, "dampening", s->dampening) |
                      set_double(o, "weight_decay", s->weight_decay) |
                      set_bool(o, "nesterov", s->nesterov) | set_bool(o, "fused", s->fused);
    return create("sgd", "weft_sgd()", n, params, o, rc);
}

static weft_optimizer *adam_like(const char *type, const char *origin, int n,
                                 weft_tensor *const *params, const struct weft_adam_options *s)
{
    weft_options *o = weft_options_new("optimizer", origin);
    char betas[80];
    snprintf(betas, sizeof betas, "%.17g, %.17g", s->betas[0], s->betas[1]);
    int rc = !o ? -1
                : set_double(o, "lr", s->lr) | weft_options_set(o, "betas", betas) |
                      set_double(o, "eps", s->eps) |
                      set_double(o, "weight_decay", s->weight_decay) |
                      set_bool(o, "amsgrad", s->amsgrad) | set_bool(o, "fused", s->fused);
    return create(type, origin, n, params, o, rc);
}

weft_optimizer *weft_adam(int n, weft_tensor *const *params, const struct weft_adam_options *opts)
{
    struct weft_adam_options d = WEFT_ADAM_OPTIONS_INIT;
    return adam_like("adam", "weft_adam()", n, params, opts ? opts : &d);
}

weft_optimizer *weft_adamw(int n, weft_tensor *const *params,
                           const struct weft_adam_options *opts)
{
    struct weft_adam_options d = WEFT_ADAMW_OPTIONS_INIT;
    return adam_like("adamw", "weft_adamw()", n, params, opts ? opts : &d);
}

weft_optimizer *weft_rmsprop(int n, weft_tensor *const *params,
                             const struct weft_rmsprop_options *opts)
{
    struct weft_rmsprop_options d = WEFT_RMSPROP_OPTIONS_INIT;
    const struct weft_rmsprop_options *s = opts ? opts : &d;
    weft_options *o = weft_options_new("optimizer", "weft_rmsprop()");
    int rc = !o ? -1
                : set_double(o, "lr", s->lr) | set_double(o, "alpha", s->alpha) |
                      set_double(o, "eps", s->eps) |
                      set_double(o, "weight_decay", s->weight_decay) |
                      set_double(o, "momentum", s->momentum) |
                      set_bool(o, "centered", s->centered) | set_bool(o, "fused", s->fused);
    return create("rmsprop", "weft_rmsprop()", n, params, o, rc);
}
