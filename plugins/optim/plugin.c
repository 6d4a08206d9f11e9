/* plugins/optim/plugin.c: weft-optim.so's descriptor and the optimizer types "sgd",
 * "adam", "adamw" and "rmsprop" (one parameter group each). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft/optim.h>
#include <weft/optim_kernels.h>
#include <weft/plugin.h>
#include <weft/version.h>

#include "optim_plugin.h"

struct opt_ctx {
    enum opt_kind kind;
    struct opt_hparams h;
    int n;
    struct opt_state *st; /* one per parameter */
};

/* ---- lifetime ------------------------------------------------------------------------ */

int opt_sgd_step_op = -1, opt_adam_step_op = -1, opt_rmsprop_step_op = -1;

static int create_kind(enum opt_kind kind, int n, const weft_options *o, void **out)
{
    struct opt_hparams h;
    if (opt_read_hparams(kind, o, &h) < 0)
        return -1;
    struct opt_ctx *c = calloc(1, sizeof *c);
    struct opt_state *st = calloc((size_t)n, sizeof *st);
    if (!c || !st) {
        free(c);
        free(st);
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "optimizer: out of memory");
    }
    c->kind = kind;
    c->h = h;
    c->n = n;
    c->st = st;
    *out = c;
    return 0;
}

#define DEFINE_CREATE(fn, kind)                                                               \
    static int fn(int n, weft_tensor *const *params, const weft_options *o, void **ctx)       \
    {                                                                                         \
        (void)params;                                                                         \
        return create_kind(kind, n, o, ctx);                                                  \
    }
DEFINE_CREATE(sgd_create, OPT_SGD)
DEFINE_CREATE(adam_create, OPT_ADAM)
DEFINE_CREATE(adamw_create, OPT_ADAMW)
DEFINE_CREATE(rmsprop_create, OPT_RMSPROP)

static void clear_state(struct opt_state *st)
{
    for (int b = 0; b < OPT_MAX_BUFFERS; b++) {
        weft_tensor_release(st->buf[b]);
        st->buf[b] = NULL;
    }
    st->step = 0;
}

static void opt_destroy(void *ctx)
{
    struct opt_ctx *c = ctx;
    for (int i = 0; i < c->n; i++)
        clear_state(&c->st[i]);
    free(c->st);
    free(c);
}

/* ---- step and lr ----------------------------------------------------------------------- */

static int opt_step(void *ctx, int n, weft_tensor *const *params)
{
    struct opt_ctx *c = ctx;
    for (int i = 0; i < n; i++) {
        weft_tensor *g = weft_grad(params[i]);
        if (!g)
            continue; /* PyTorch skips parameters whose .grad is None */
        int rc = opt_update(c->kind, &c->h, params[i], g, &c->st[i]);
        if (weft_scope_depth() == 0)
            weft_tensor_release(g);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static double opt_get_lr(void *ctx)
{
    return ((struct opt_ctx *)ctx)->h.lr;
}

static int opt_set_lr(void *ctx, double lr)
{
    ((struct opt_ctx *)ctx)->h.lr = lr;
    return 0;
}

/* OneCycleLR's momentum: Adam's betas[0], else momentum (PyTorch's use_beta1). */
static double opt_get_momentum(void *ctx)
{
    const struct opt_ctx *c = ctx;
    return c->kind == OPT_ADAM || c->kind == OPT_ADAMW ? c->h.beta1 : c->h.momentum;
}

static int opt_set_momentum(void *ctx, double momentum)
{
    struct opt_ctx *c = ctx;
    *(c->kind == OPT_ADAM || c->kind == OPT_ADAMW ? &c->h.beta1 : &c->h.momentum) = momentum;
    return 0;
}

/* ---- state dicts ------------------------------------------------------------------------ */

static int set_hyper(struct weft_metadata *m, const char *name, double v)
{
    char key[64], val[40];
    snprintf(key, sizeof key, "param_groups.0.%s", name);
    snprintf(val, sizeof val, "%.17g", v);
    return weft_metadata_set(m, key, val);
}

static int export_hypers(const struct opt_ctx *c, struct weft_metadata *m)
{
    const struct opt_hparams *h = &c->h;
    int rc = set_hyper(m, "lr", h->lr) | set_hyper(m, "weight_decay", h->weight_decay);
    switch (c->kind) {
    case OPT_SGD:
        rc |= set_hyper(m, "momentum", h->momentum) | set_hyper(m, "dampening", h->dampening) |
              set_hyper(m, "nesterov", h->nesterov);
        break;
    case OPT_RMSPROP:
        rc |= set_hyper(m, "alpha", h->alpha) | set_hyper(m, "eps", h->eps) |
              set_hyper(m, "momentum", h->momentum) | set_hyper(m, "centered", h->centered);
        break;
    default: {
        char betas[96];
        snprintf(betas, sizeof betas, "%.17g, %.17g", h->beta1, h->beta2);
        rc |= weft_metadata_set(m, "param_groups.0.betas", betas) | set_hyper(m, "eps", h->eps) |
              set_hyper(m, "amsgrad", h->amsgrad);
        break;
    }
    }
    return rc < 0 ? -1 : 0;
}

/* Adds "state.<i>.<name>" = a copy of t (later steps must not change a saved state). */
static int add_entry(struct weft_tensor_dict *d, int i, const char *name, weft_tensor *t)
{
    char key[96];
    snprintf(key, sizeof key, "state.%d.%s", i, name);
    weft_scope_push();
    int rc = weft_tensor_dict_add(d, key, weft_clone(t));
    weft_scope_pop();
    return rc;
}

static int opt_export(void *ctx, int n, weft_tensor *const *params, struct weft_tensor_dict *d,
                      struct weft_metadata *m)
{
    (void)params;
    struct opt_ctx *c = ctx;
    for (int i = 0; i < n; i++) {
        struct opt_state *st = &c->st[i];
        if (st->step == 0)
            continue; /* no state yet, as PyTorch's empty per-parameter dict */
        if (opt_has_step(c->kind)) {
            weft_scope_push();
            /* PyTorch keeps step as a float32 scalar tensor. */
            int rc = add_entry(d, i, "step",
                               weft_scalar_tensor((double)st->step, WEFT_F32, WEFT_CPU));
            weft_scope_pop();
            if (rc < 0)
                return rc;
        }
        for (int b = 0; b < OPT_MAX_BUFFERS; b++)
            if (st->buf[b] && add_entry(d, i, opt_buffer_name(c->kind, b), st->buf[b]) < 0)
                return -1;
    }
    return m ? export_hypers(c, m) : 0;
}

/* The saved entry "state.<i>.<name>" as a new reference, or NULL when absent. */
static weft_tensor *get_entry(const struct weft_tensor_dict *d, int i, const char *name)
{
    char key[96];
    snprintf(key, sizeof key, "state.%d.%s", i, name);
    return weft_tensor_dict_get(d, key);
}

static int import_buffer(struct opt_ctx *c, const weft_tensor *p, int i, int b,
                         const struct weft_tensor_dict *d, struct opt_state *st)
{
    const char *name = opt_buffer_name(c->kind, b);
    weft_tensor *saved = get_entry(d, i, name);
    if (!saved)
        return opt_uses_buffer(c->kind, &c->h, b)
                   ? weft_error_set(WEFT_ERR_VALUE,
                                    "optimizer state of parameter %d lacks 'state.%d.%s'", i, i,
                                    name)
                   : 0;
    int rc = 0;
    char a[96], e[96];
    if (saved->ndim != p->ndim ||
        memcmp(saved->shape, p->shape, (size_t)p->ndim * sizeof *p->shape) != 0) {
        rc = weft_error_set(WEFT_ERR_VALUE,
                            "optimizer state 'state.%d.%s' has shape %s but the parameter has "
                            "shape %s",
                            i, name, weft_shape_str(saved->ndim, saved->shape, a, sizeof a),
                            weft_shape_str(p->ndim, p->shape, e, sizeof e));
    } else {
        weft_scope_push();
        st->buf[b] = weft_tensor_retain(weft_zeros(p->ndim, p->shape, p->dtype, p->device));
        weft_scope_pop();
        rc = st->buf[b] ? weft_copy_(st->buf[b], saved) : -1;
    }
    if (weft_scope_depth() == 0)
        weft_tensor_release(saved);
    return rc;
}

static int import_param(struct opt_ctx *c, const weft_tensor *p, int i,
                        const struct weft_tensor_dict *d, struct opt_state *st)
{
    clear_state(st);
    weft_tensor *step = opt_has_step(c->kind) ? get_entry(d, i, "step") : NULL;
    weft_tensor *first = get_entry(d, i, opt_buffer_name(c->kind, 0));
    bool has_state = step || first;
    double v = 1.0;
    int rc = step ? weft_tensor_item(step, &v) : 0;
    if (weft_scope_depth() == 0) {
        weft_tensor_release(step);
        weft_tensor_release(first);
    }
    if (rc < 0 || !has_state)
        return rc;
    st->step = (int64_t)v;
    for (int b = 0; b < OPT_MAX_BUFFERS && rc == 0; b++)
        rc = import_buffer(c, p, i, b, d, st);
    return rc;
}

static int opt_import(void *ctx, int n, weft_tensor *const *params,
                      const struct weft_tensor_dict *d, const struct weft_metadata *m)
{
    struct opt_ctx *c = ctx;
    for (int i = 0; i < n; i++) {
        int rc = import_param(c, params[i], i, d, &c->st[i]);
        if (rc < 0) {
            clear_state(&c->st[i]);
            return rc;
        }
    }
    const char *lr = m ? weft_metadata_get(m, "param_groups.0.lr") : NULL;
    if (lr) {
        char *end;
        double v = strtod(lr, &end);
        if (end == lr || *end)
            return weft_error_set(WEFT_ERR_VALUE,
                                  "checkpoint metadata 'param_groups.0.lr' = '%s' is not a number",
                                  lr);
        c->h.lr = v;
    }
    return 0;
}

/* ---- registration ------------------------------------------------------------------------ */

#define OPT_TYPE(var, tname, desc, create_fn)                                                  \
    static const struct weft_optimizer_type var = {                                           \
        .base = WEFT_VTABLE(WEFT_KIND_OPTIMIZER, tname, struct weft_optimizer_type),          \
        .description = desc,                                                                  \
        .create = create_fn,                                                                  \
        .step = opt_step,                                                                     \
        .destroy = opt_destroy,                                                               \
        .get_lr = opt_get_lr,                                                                 \
        .set_lr = opt_set_lr,                                                                 \
        .state_export = opt_export,                                                           \
        .state_import = opt_import,                                                           \
        .get_momentum = opt_get_momentum,                                                     \
        .set_momentum = opt_set_momentum,                                                     \
    };
OPT_TYPE(sgd_type, "sgd", "SGD with momentum, dampening, Nesterov and weight decay", sgd_create)
OPT_TYPE(adam_type, "adam", "Adam (L2 weight decay, amsgrad)", adam_create)
OPT_TYPE(adamw_type, "adamw", "AdamW (decoupled weight decay, amsgrad)", adamw_create)
OPT_TYPE(rmsprop_type, "rmsprop", "RMSprop (centered, momentum)", rmsprop_create)

static int optim_init(const weft_options *options)
{
    (void)options;
    opt_sgd_step_op = weft_op_register(WEFT_OP_SGD_STEP_NAME);
    opt_adam_step_op = weft_op_register(WEFT_OP_ADAM_STEP_NAME);
    opt_rmsprop_step_op = weft_op_register(WEFT_OP_RMSPROP_STEP_NAME);
    if (opt_sgd_step_op < 0 || opt_adam_step_op < 0 || opt_rmsprop_step_op < 0)
        return WEFT_ERR_RUNTIME;
    const void *const types[] = {&sgd_type, &adam_type, &adamw_type, &rmsprop_type};
    int rc = weft_register_all(4, types);
    return rc < 0 ? rc : weft_kernel_register_table(WEFT_DEVICE_CPU, WEFT_LAYOUT_STRIDED, opt_cpu_kernels);
}

WEFT_PLUGIN_MANIFEST("provides optimizer:sgd optimizer:adam optimizer:adamw optimizer:rmsprop\n");

static const struct weft_plugin optim_plugin = {
    .base = WEFT_VTABLE(WEFT_KIND_PLUGIN, "optim", struct weft_plugin),
    .version = WEFT_VERSION_STRING,
    .description = "optimizers: sgd, adam, adamw, rmsprop; fused CPU update kernels",
    .manifest = weft_plugin_manifest,
    .init = optim_init,
};

WEFT_PLUGIN_EXPORT const struct weft_plugin *weft_plugin_init(void)
{
    return &optim_plugin;
}
