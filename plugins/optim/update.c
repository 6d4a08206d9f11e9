/* plugins/optim/update.c: one parameter's update, fused when the backend has the op
 * (weft/optim_kernels.h: sgd_step, adam_step, rmsprop_step), else composed from weft ops. The
 * composite path follows PyTorch's foreach-free implementation op by op. */
#include <math.h>
#include <string.h>

#include "optim_plugin.h"

static const char *const buffer_names[][OPT_MAX_BUFFERS] = {
    [OPT_SGD] = {"momentum_buffer", NULL, NULL},
    [OPT_ADAM] = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"},
    [OPT_ADAMW] = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"},
    [OPT_RMSPROP] = {"square_avg", "momentum_buffer", "grad_avg"},
};

const char *opt_buffer_name(enum opt_kind kind, int i)
{
    return i >= 0 && i < OPT_MAX_BUFFERS ? buffer_names[kind][i] : NULL;
}

bool opt_has_step(enum opt_kind kind)
{
    return kind != OPT_SGD;
}

bool opt_uses_buffer(enum opt_kind kind, const struct opt_hparams *h, int i)
{
    switch (kind) {
    case OPT_SGD:
        return i == 0 && h->momentum != 0.0;
    case OPT_RMSPROP:
        return i == 0 || (i == 1 && h->momentum > 0.0) || (i == 2 && h->centered);
    default:
        return i < 2 || (i == 2 && h->amsgrad);
    }
}

/* ---- the fused op ------------------------------------------------------------------ */

static bool fusable(const struct opt_hparams *h, int op, const weft_tensor *p,
                    const weft_tensor *g)
{
    return h->fused && g->dtype == p->dtype && weft_tensor_is_contiguous(p) &&
           weft_tensor_is_contiguous(g) && p->layout == WEFT_LAYOUT_STRIDED &&
           weft_kernel_lookup(op, p->device.type, WEFT_LAYOUT_STRIDED, p->dtype) != NULL;
}

static int fused(enum opt_kind kind, const struct opt_hparams *h, weft_tensor *p, weft_tensor *g,
                 struct opt_state *st, bool first)
{
    struct weft_op_call c = {.nin = 1, .nout = 2};
    c.in[0] = g;
    c.out[0] = p;
    c.out[1] = st->buf[0];
    struct weft_sgd_step_params sgd;
    struct weft_adam_step_params adam;
    struct weft_rmsprop_step_params rms;
    if (kind == OPT_SGD) {
        sgd = (struct weft_sgd_step_params){h->lr, h->momentum, h->dampening, h->weight_decay,
                                            h->nesterov, first};
        c.op = opt_sgd_step_op;
        c.params = &sgd;
        c.params_size = sizeof sgd;
    } else if (kind == OPT_RMSPROP) {
        rms = (struct weft_rmsprop_step_params){h->lr, h->alpha, h->eps, h->weight_decay,
                                                h->momentum};
        c.op = opt_rmsprop_step_op;
        c.in[1] = st->buf[2];
        c.in[2] = st->buf[1];
        c.nin = 3;
        c.params = &rms;
        c.params_size = sizeof rms;
    } else {
        adam = (struct weft_adam_step_params){h->lr,           h->beta1,  h->beta2,
                                              h->eps,          h->weight_decay,
                                              st->step,        h->amsgrad, kind == OPT_ADAMW};
        c.op = opt_adam_step_op;
        c.in[1] = st->buf[1];
        c.in[2] = st->buf[2];
        c.nin = 3;
        c.params = &adam;
        c.params_size = sizeof adam;
    }
    int rc = weft_dispatch(&c);
    if (rc < 0)
        return rc;
    weft_tensor_bump_version(p);
    for (int i = 0; i < OPT_MAX_BUFFERS; i++)
        if (st->buf[i])
            weft_tensor_bump_version(st->buf[i]);
    return 0;
}

/* ---- the composite path (inside a scope; NULL results propagate) -------------------- */

static int sgd_composite(const struct opt_hparams *h, weft_tensor *p, weft_tensor *g,
                         struct opt_state *st, bool first)
{
    weft_tensor *d = g;
    if (h->weight_decay != 0.0)
        d = weft_add(d, weft_mul_scalar(p, h->weight_decay));
    if (st->buf[0]) {
        weft_tensor *b = st->buf[0];
        if (first) {
            if (weft_copy_(b, d) < 0)
                return -1;
        } else {
            weft_mul_scalar_(b, h->momentum);
            weft_add_(b, weft_mul_scalar(d, 1.0 - h->dampening));
        }
        d = h->nesterov ? weft_add(d, weft_mul_scalar(b, h->momentum)) : b;
    }
    return weft_add_(p, weft_mul_scalar(d, -h->lr)) ? 0 : -1;
}

static int adam_composite(enum opt_kind kind, const struct opt_hparams *h, weft_tensor *p,
                          weft_tensor *g, struct opt_state *st)
{
    weft_tensor *m = st->buf[0], *v = st->buf[1], *vmax = st->buf[2];
    weft_tensor *d = g;
    if (kind == OPT_ADAMW)
        weft_mul_scalar_(p, 1.0 - h->lr * h->weight_decay);
    else if (h->weight_decay != 0.0)
        d = weft_add(d, weft_mul_scalar(p, h->weight_decay));
    double t = (double)st->step;
    double c1 = 1.0 - pow(h->beta1, t), c2 = 1.0 - pow(h->beta2, t);
    weft_add_(m, weft_mul_scalar(weft_sub(d, m), 1.0 - h->beta1));
    weft_mul_scalar_(v, h->beta2);
    weft_add_(v, weft_mul_scalar(weft_mul(d, d), 1.0 - h->beta2));
    weft_tensor *src = v;
    if (h->amsgrad)
        src = weft_maximum_(vmax, v);
    weft_tensor *denom = weft_add_scalar(weft_div_scalar(weft_sqrt(src), sqrt(c2)), h->eps);
    return weft_add_(p, weft_mul_scalar(weft_div(m, denom), -(h->lr / c1))) ? 0 : -1;
}

static int rmsprop_composite(const struct opt_hparams *h, weft_tensor *p, weft_tensor *g,
                             struct opt_state *st)
{
    weft_tensor *sq = st->buf[0], *buf = st->buf[1], *ga = st->buf[2];
    weft_tensor *d = g;
    if (h->weight_decay != 0.0)
        d = weft_add(d, weft_mul_scalar(p, h->weight_decay));
    weft_mul_scalar_(sq, h->alpha);
    weft_add_(sq, weft_mul_scalar(weft_mul(d, d), 1.0 - h->alpha));
    weft_tensor *avg;
    if (ga) {
        weft_add_(ga, weft_mul_scalar(weft_sub(d, ga), 1.0 - h->alpha));
        avg = weft_sqrt(weft_sub(sq, weft_mul(ga, ga)));
    } else {
        avg = weft_sqrt(sq);
    }
    avg = weft_add_scalar(avg, h->eps);
    if (buf) {
        weft_mul_scalar_(buf, h->momentum);
        weft_add_(buf, weft_div(d, avg));
        return weft_add_(p, weft_mul_scalar(buf, -h->lr)) ? 0 : -1;
    }
    return weft_add_(p, weft_mul_scalar(weft_div(d, avg), -h->lr)) ? 0 : -1;
}

static int composite(enum opt_kind kind, const struct opt_hparams *h, weft_tensor *p,
                     weft_tensor *g, struct opt_state *st, bool first)
{
    weft_scope_push();
    int rc;
    if (kind == OPT_SGD)
        rc = sgd_composite(h, p, g, st, first);
    else if (kind == OPT_RMSPROP)
        rc = rmsprop_composite(h, p, g, st);
    else
        rc = adam_composite(kind, h, p, g, st);
    weft_scope_pop();
    if (rc == 0 && weft_error_code() != WEFT_OK)
        rc = weft_error_code();
    return rc;
}

/* ---- one update ------------------------------------------------------------------- */

static int kind_op(enum opt_kind kind)
{
    return kind == OPT_SGD ? opt_sgd_step_op : kind == OPT_RMSPROP ? opt_rmsprop_step_op
                                                                   : opt_adam_step_op;
}

/* An owned reference to a new zeroed buffer shaped as p (kept out of any open scope). */
static weft_tensor *new_buffer(const weft_tensor *p)
{
    weft_scope_push();
    weft_tensor *t = weft_tensor_retain(weft_zeros(p->ndim, p->shape, p->dtype, p->device));
    weft_scope_pop();
    return t;
}

/* Zeroed buffers the first time; *first says whether one was just made. */
static int init_state(enum opt_kind kind, const struct opt_hparams *h, const weft_tensor *p,
                      struct opt_state *st, bool *first)
{
    *first = false;
    for (int i = 0; i < OPT_MAX_BUFFERS; i++) {
        if (!opt_uses_buffer(kind, h, i) || st->buf[i])
            continue;
        st->buf[i] = new_buffer(p);
        if (!st->buf[i])
            return -1;
        *first = true;
    }
    return 0;
}

int opt_update(enum opt_kind kind, const struct opt_hparams *h, weft_tensor *p, weft_tensor *g,
               struct opt_state *st)
{
    if (!weft_device_equal(p->device, g->device))
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "optimizer: the gradient is on another device than its parameter");
    if (g->ndim != p->ndim || memcmp(g->shape, p->shape, (size_t)p->ndim * sizeof *p->shape))
        return weft_error_set(WEFT_ERR_RUNTIME, "optimizer: gradient shape does not match the "
                                                "parameter's");
    bool first;
    if (init_state(kind, h, p, st, &first) < 0)
        return -1;
    st->step++;
    if (fusable(h, kind_op(kind), p, g))
        return fused(kind, h, p, g, st, first);
    return composite(kind, h, p, g, st, first);
}
