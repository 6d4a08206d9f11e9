/* train/optim.c: the optimizer kind, optimizer objects around a type, and
 * clip_grad_norm_.
 *
 * The library knows no update rule: it finds the type by name in the registry (which
 * loads the plugin that provides it), keeps the parameters and forwards to the type.
 */
#include "weft/optim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "weft/autograd.h"
#include "weft/error.h"
#include "weft/ops.h"

struct weft_optimizer {
    const struct weft_optimizer_type *type;
    void *ctx;
    int n;
    weft_tensor **params;
};

static int check_type(const struct weft_vtable *v)
{
    const struct weft_optimizer_type *t = (const struct weft_optimizer_type *)v;
    if (!t->create || !t->step || !t->destroy || !t->get_lr || !t->set_lr)
        return weft_error_set(WEFT_ERR_PLUGIN,
                              "optimizer type '%s' lacks a required method (create, step, "
                              "destroy, get_lr and set_lr must be set)",
                              v->name);
    return 0;
}

const struct weft_kind weft_optimizer_kind = {
    .base = WEFT_VTABLE(WEFT_KIND_KIND, WEFT_KIND_OPTIMIZER, struct weft_kind),
    .description = "optimizer types ([optim] type = names them)",
    .min_size = sizeof(struct weft_optimizer_type),
    .check = check_type,
};

/* The type called name; the error names the origin and section of the options. */
static const struct weft_optimizer_type *find_type(const weft_options *o, const char *name)
{
    bool had_error = weft_error_code() != WEFT_OK;
    const struct weft_optimizer_type *t = weft_registry_get(WEFT_KIND_OPTIMIZER, name);
    if (!t && !had_error) {
        char msg[1536];
        snprintf(msg, sizeof msg, "%s", weft_error_message());
        weft_error_clear();
        weft_options_error(o, "type = '%s': %s", name, msg);
    }
    return t;
}

/* ---- optimizers ----------------------------------------------------------------- */

static int check_params(int n, weft_tensor *const *params)
{
    if (n < 0 || (n > 0 && !params))
        return weft_error_set(WEFT_ERR_VALUE, "optimizer got %d parameters", n);
    if (n == 0)
        return weft_error_set(WEFT_ERR_VALUE, "optimizer got an empty parameter list");
    for (int i = 0; i < n; i++) {
        if (!params[i])
            return -1; /* a failed op upstream already set the error */
        if (!weft_dtype_is_floating(params[i]->dtype))
            return weft_error_set(WEFT_ERR_TYPE,
                                  "optimizer can only optimize Tensors of floating point dtype, "
                                  "but parameter %d is %s",
                                  i, weft_dtype_name(params[i]->dtype));
    }
    return 0;
}

static void free_opt(weft_optimizer *opt)
{
    if (!opt)
        return;
    if (opt->params)
        for (int i = 0; i < opt->n; i++)
            weft_tensor_release(opt->params[i]);
    free(opt->params);
    free(opt);
}

static weft_optimizer *create_with(const struct weft_optimizer_type *type, int n,
                                   weft_tensor *const *params, const weft_options *o)
{
    weft_optimizer *opt = calloc(1, sizeof *opt);
    weft_tensor **ps = calloc((size_t)n, sizeof *ps);
    if (!opt || !ps) {
        free(opt);
        free(ps);
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "weft_optimizer_create: out of memory");
        return NULL;
    }
    opt->type = type;
    opt->params = ps;
    opt->n = n;
    for (int i = 0; i < n; i++)
        ps[i] = weft_tensor_retain(params[i]);
    if (type->create(n, params, o, &opt->ctx) < 0) {
        if (weft_error_code() == WEFT_OK)
            weft_error_set(WEFT_ERR_PLUGIN, "optimizer '%s' failed to start", type->base.name);
        free_opt(opt);
        return NULL;
    }
    return opt;
}

weft_optimizer *weft_optimizer_create(const char *name, int n, weft_tensor *const *params,
                                      const weft_options *options)
{
    if (check_params(n, params) < 0)
        return NULL;
    /* Read even when a name is passed: the section may still hold it. */
    const char *configured = weft_options_string(options, "type", NULL);
    if (!name)
        name = configured;
    if (!name) {
        char known[512];
        weft_registry_describe(WEFT_KIND_OPTIMIZER, NULL, known, sizeof known);
        weft_options_error(options, "missing key 'type': expected the name of an optimizer (%s)",
                           known);
        return NULL;
    }
    const struct weft_optimizer_type *type = find_type(options, name);
    return type ? create_with(type, n, params, options) : NULL;
}

void weft_optimizer_free(weft_optimizer *opt)
{
    if (!opt)
        return;
    if (opt->ctx)
        opt->type->destroy(opt->ctx);
    free_opt(opt);
}

const char *weft_optimizer_name(const weft_optimizer *opt)
{
    return opt ? opt->type->base.name : "";
}

int weft_optimizer_num_params(const weft_optimizer *opt)
{
    return opt ? opt->n : 0;
}

weft_tensor *weft_optimizer_param(const weft_optimizer *opt, int i)
{
    return opt && i >= 0 && i < opt->n ? opt->params[i] : NULL;
}

int weft_optimizer_step(weft_optimizer *opt)
{
    if (!opt)
        return WEFT_ERR_VALUE;
    /* Updates are not part of any graph, whatever mode the caller is in. */
    bool prev = weft_no_grad_begin();
    int rc = opt->type->step(opt->ctx, opt->n, opt->params);
    weft_grad_mode_restore(prev);
    return rc;
}

int weft_optimizer_zero_grad(weft_optimizer *opt, bool set_to_none)
{
    if (!opt)
        return WEFT_ERR_VALUE;
    if (WEFT_VTABLE_HAS(opt->type, zero_grad))
        return opt->type->zero_grad(opt->ctx, opt->n, opt->params, set_to_none);
    for (int i = 0; i < opt->n; i++) {
        int rc = weft_zero_grad(opt->params[i], set_to_none);
        if (rc < 0)
            return rc;
    }
    return 0;
}

double weft_optimizer_get_lr(const weft_optimizer *opt)
{
    return opt ? opt->type->get_lr(opt->ctx) : NAN;
}

int weft_optimizer_set_lr(weft_optimizer *opt, double lr)
{
    if (!opt)
        return WEFT_ERR_VALUE;
    return opt->type->set_lr(opt->ctx, lr);
}

int weft_optimizer_state_export(const weft_optimizer *opt, struct weft_tensor_dict *d,
                                struct weft_metadata *m)
{
    if (!opt || !d)
        return weft_error_set(WEFT_ERR_VALUE, "weft_optimizer_state_export: NULL argument");
    struct weft_metadata *own = NULL;
    if (!m) {
        own = weft_metadata_new();
        if (!own)
            return WEFT_ERR_OUT_OF_MEMORY;
        m = own;
    }
    int rc = weft_metadata_set(m, "optimizer", opt->type->base.name);
    if (rc == 0 && WEFT_VTABLE_HAS(opt->type, state_export))
        rc = opt->type->state_export(opt->ctx, opt->n, opt->params, d, m);
    weft_metadata_free(own);
    return rc;
}

int weft_optimizer_state_import(weft_optimizer *opt, const struct weft_tensor_dict *d,
                                const struct weft_metadata *m)
{
    if (!opt || !d)
        return weft_error_set(WEFT_ERR_VALUE, "weft_optimizer_state_import: NULL argument");
    const char *saved = m ? weft_metadata_get(m, "optimizer") : NULL;
    if (saved && strcmp(saved, opt->type->base.name) != 0)
        return weft_error_set(WEFT_ERR_VALUE,
                              "optimizer state was saved by '%s' and cannot be loaded into '%s'",
                              saved, opt->type->base.name);
    if (!WEFT_VTABLE_HAS(opt->type, state_import))
        return 0;
    return opt->type->state_import(opt->ctx, opt->n, opt->params, d, m);
}

/* ---- clip_grad_norm_ ------------------------------------------------------------- */

/* The norm_type-norm of g as a double (g non-empty). */
static int grad_norm(weft_tensor *g, double norm_type, double *out)
{
    weft_tensor *a = weft_abs(g);
    weft_tensor *r;
    if (isinf(norm_type))
        r = weft_max(a);
    else if (norm_type == 1.0)
        r = weft_sum(a, 0, NULL, false);
    else if (norm_type == 2.0)
        r = weft_sum(weft_mul(a, a), 0, NULL, false);
    else
        r = weft_sum(weft_pow_scalar(a, norm_type), 0, NULL, false);
    double v;
    if (weft_tensor_item(r, &v) < 0)
        return -1;
    if (isinf(norm_type) || norm_type == 1.0)
        *out = v;
    else if (norm_type == 2.0)
        *out = sqrt(v);
    else
        *out = pow(v, 1.0 / norm_type);
    return 0;
}

/* Per-tensor norms combined as torch.linalg.vector_norm(stack(norms), norm_type). */
static int total_norm_of(int n, weft_tensor *const *params, double norm_type, double *total)
{
    double acc = 0.0;
    for (int i = 0; i < n; i++) {
        weft_tensor *g = weft_grad(params[i]);
        if (!g)
            continue;
        double v = 0.0;
        if (weft_tensor_numel(g) > 0 && grad_norm(g, norm_type, &v) < 0)
            return -1;
        if (isinf(norm_type))
            acc = (v > acc || isnan(v)) ? v : acc;
        else
            acc += pow(v, norm_type);
    }
    *total = isinf(norm_type) ? acc : pow(acc, 1.0 / norm_type);
    return 0;
}

static int scale_grads(int n, weft_tensor *const *params, double coef)
{
    for (int i = 0; i < n; i++) {
        weft_tensor *g = weft_grad(params[i]);
        if (g && !weft_mul_scalar_(g, coef))
            return -1;
    }
    return 0;
}

int weft_clip_grad_norm_(int n, weft_tensor *const *params, double max_norm, double norm_type,
                         double *total_norm)
{
    if (n < 0 || (n > 0 && !params))
        return weft_error_set(WEFT_ERR_VALUE, "clip_grad_norm_: got %d parameters", n);
    for (int i = 0; i < n; i++)
        if (!params[i])
            return -1;
    if (!(norm_type > 0.0))
        return weft_error_set(WEFT_ERR_VALUE,
                              "clip_grad_norm_: norm_type must be positive (or INFINITY), got %g",
                              norm_type);
    bool prev = weft_no_grad_begin();
    weft_scope_push();
    double total = 0.0;
    int rc = total_norm_of(n, params, norm_type, &total);
    /* PyTorch multiplies by clamp(coef, max=1): a NaN total poisons the grads too. */
    double coef = max_norm / (total + 1e-6);
    if (rc == 0 && !(coef >= 1.0))
        rc = scale_grads(n, params, coef);
    weft_scope_pop();
    weft_grad_mode_restore(prev);
    if (rc == 0 && total_norm)
        *total_norm = total;
    return rc < 0 ? (weft_error_code() ? weft_error_code() : rc) : 0;
}
