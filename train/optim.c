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

/* Group g owns params[offset .. offset + n) and the ctx the type made from its options. */
struct opt_group {
    void *ctx;
    int offset, n;
};

struct weft_optimizer {
    const struct weft_optimizer_type *type;
    int ngroups;
    struct opt_group *groups;
    int n;               /* all groups' parameters */
    weft_tensor **params; /* group after group: global indices */
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
    .description = "optimizer types ([optimizer] type = names them)",
    .min_size = offsetof(struct weft_optimizer_type, get_momentum), /* appended after */
    .check = check_type,
};

/* The type called name; the error names the origin and section of the options. */
static const struct weft_optimizer_type *find_type(const weft_options *o, const char *name)
{
    bool had_error = weft_error_code() != WEFT_OK;
    const struct weft_optimizer_type *t = weft_registry_get(WEFT_KIND_OPTIMIZER, name);
    if (!t && !had_error) { /* named by its key; out of memory stays the cause */
        char msg[1536];
        int code = weft_error_code();
        snprintf(msg, sizeof msg, "%s", weft_error_message());
        weft_error_clear();
        weft_options_error(o, "type = '%s': %s", name, msg);
        if (code == WEFT_ERR_OUT_OF_MEMORY)
            weft_error_recode(code);
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
    for (int g = 0; g < opt->ngroups; g++)
        if (opt->groups[g].ctx)
            opt->type->destroy(opt->groups[g].ctx);
    if (opt->params)
        for (int i = 0; i < opt->n; i++)
            weft_tensor_release(opt->params[i]);
    free(opt->groups);
    free(opt->params);
    free(opt);
}

/* Groups are non-empty and share no tensor (a parameter stepped twice would be wrong
 * silently). Quadratic, but it runs once over at most a few thousand tensors. */
static int check_groups(int ngroups, const struct weft_param_group *groups, int *total)
{
    if (ngroups < 1 || !groups)
        return weft_error_set(WEFT_ERR_VALUE, "optimizer got %d parameter groups: expected at "
                                              "least 1", ngroups);
    int64_t sum = 0;
    for (int g = 0; g < ngroups; g++) {
        if (check_params(groups[g].n, groups[g].params) < 0)
            return -1;
        sum += groups[g].n;
    }
    if (sum > INT32_MAX)
        return weft_error_set(WEFT_ERR_VALUE, "optimizer got %lld parameters", (long long)sum);
    for (int g = 0; g < ngroups; g++)
        for (int i = 0; i < groups[g].n; i++)
            for (int h = g; h < ngroups; h++)
                for (int j = h == g ? i + 1 : 0; j < groups[h].n; j++)
                    if (groups[g].params[i] == groups[h].params[j])
                        return weft_error_set(WEFT_ERR_VALUE,
                                              "some parameters appear in more than one parameter "
                                              "group (parameter %d of group %d is parameter %d "
                                              "of group %d)", i, g, j, h);
    *total = (int)sum;
    return 0;
}

static weft_optimizer *create_with(const struct weft_optimizer_type *type, int ngroups,
                                   const struct weft_param_group *groups, int total)
{
    weft_optimizer *opt = calloc(1, sizeof *opt);
    weft_tensor **ps = calloc((size_t)total, sizeof *ps);
    struct opt_group *gs = calloc((size_t)ngroups, sizeof *gs);
    if (!opt || !ps || !gs) {
        free(opt);
        free(ps);
        free(gs);
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "weft_optimizer_create: out of memory");
        return NULL;
    }
    opt->type = type;
    opt->params = ps;
    opt->groups = gs;
    for (int g = 0; g < ngroups; g++) {
        gs[g].offset = opt->n;
        gs[g].n = groups[g].n;
        for (int i = 0; i < groups[g].n; i++)
            ps[opt->n++] = weft_tensor_retain(groups[g].params[i]);
    }
    for (int g = 0; g < ngroups; g++) {
        if (type->create(gs[g].n, ps + gs[g].offset, groups[g].options, &gs[g].ctx) < 0) {
            if (weft_error_code() == WEFT_OK)
                weft_error_set(WEFT_ERR_PLUGIN, "optimizer '%s' failed to start", type->base.name);
            free_opt(opt);
            return NULL;
        }
        opt->ngroups = g + 1; /* free_opt destroys the groups made so far */
    }
    return opt;
}

/* The optimizer type: `name`, else the options' `type` key. */
static const struct weft_optimizer_type *type_for(const char *name, const weft_options *options)
{
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
    return find_type(options, name);
}

weft_optimizer *weft_optimizer_create_groups(const char *name, int ngroups,
                                             const struct weft_param_group *groups)
{
    int total = 0;
    if (check_groups(ngroups, groups, &total) < 0)
        return NULL;
    const struct weft_optimizer_type *type = type_for(name, groups[0].options);
    return type ? create_with(type, ngroups, groups, total) : NULL;
}

bool weft_param_decays(const weft_tensor *p)
{
    return p && p->ndim >= 2;
}

/* Options that read through to base except weight_decay, which reads "0": the no-decay
 * group keeps the section's origin and name for its messages. */
static const char *no_decay_lookup(void *ctx, const char *section, const char *key)
{
    (void)section;
    if (strcmp(key, "weight_decay") == 0)
        return "0";
    return weft_options_string(ctx, key, NULL);
}

/* nanoGPT's configure_optimizers: [dim >= 2 with weight_decay, the rest without]. */
static weft_optimizer *create_decay_groups(const struct weft_optimizer_type *type, int n,
                                           weft_tensor *const *params, const weft_options *o)
{
    weft_tensor **sorted = malloc((size_t)n * sizeof *sorted);
    weft_options *nodecay = weft_options_view(weft_options_section(o), weft_options_origin(o),
                                              no_decay_lookup, (void *)o);
    weft_optimizer *opt = NULL;
    if (!sorted || !nodecay) {
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "weft_optimizer_create: out of memory");
        goto done;
    }
    int ndecay = 0, k = 0;
    for (int i = 0; i < n; i++)
        if (weft_param_decays(params[i]))
            sorted[k++] = params[i];
    ndecay = k;
    for (int i = 0; i < n; i++)
        if (!weft_param_decays(params[i]))
            sorted[k++] = params[i];
    struct weft_param_group gs[2] = {{ndecay, sorted, o}, {n - ndecay, sorted + ndecay, nodecay}};
    int first = ndecay == 0, count = (ndecay > 0) + (n - ndecay > 0);
    int total = 0;
    if (check_groups(count, gs + first, &total) == 0)
        opt = create_with(type, count, gs + first, total);
done:
    free(sorted);
    weft_options_free(nodecay);
    return opt;
}

weft_optimizer *weft_optimizer_create(const char *name, int n, weft_tensor *const *params,
                                      const weft_options *options)
{
    static const char *const rules[] = {"all", "matrices", NULL};
    int decay = 0;
    if (check_params(n, params) < 0 || weft_options_choice(options, "decay", rules, 0, &decay) < 0)
        return NULL;
    const struct weft_optimizer_type *type = type_for(name, options);
    if (!type)
        return NULL;
    if (decay == 1)
        return create_decay_groups(type, n, params, options);
    struct weft_param_group g = {n, params, options};
    return create_with(type, 1, &g, n);
}

void weft_optimizer_free(weft_optimizer *opt)
{
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

int weft_optimizer_num_groups(const weft_optimizer *opt)
{
    return opt ? opt->ngroups : 0;
}

int weft_optimizer_group_size(const weft_optimizer *opt, int g)
{
    return opt && g >= 0 && g < opt->ngroups ? opt->groups[g].n : -1;
}

int weft_optimizer_group_offset(const weft_optimizer *opt, int g)
{
    return opt && g >= 0 && g < opt->ngroups ? opt->groups[g].offset : -1;
}

double weft_optimizer_group_lr(const weft_optimizer *opt, int g)
{
    return opt && g >= 0 && g < opt->ngroups ? opt->type->get_lr(opt->groups[g].ctx) : NAN;
}

int weft_optimizer_step(weft_optimizer *opt)
{
    if (!opt)
        return WEFT_ERR_VALUE;
    /* Updates are not part of any graph, whatever mode the caller is in. */
    bool prev = weft_no_grad_begin();
    int rc = 0;
    for (int g = 0; g < opt->ngroups && rc == 0; g++)
        rc = opt->type->step(opt->groups[g].ctx, opt->groups[g].n, opt->params + opt->groups[g].offset);
    weft_grad_mode_restore(prev);
    return rc;
}

int weft_optimizer_zero_grad(weft_optimizer *opt, bool set_to_none)
{
    if (!opt)
        return WEFT_ERR_VALUE;
    for (int g = 0; g < opt->ngroups; g++) {
        const struct opt_group *gr = &opt->groups[g];
        if (WEFT_VTABLE_HAS(opt->type, zero_grad)) {
            int rc = opt->type->zero_grad(gr->ctx, gr->n, opt->params + gr->offset, set_to_none);
            if (rc < 0)
                return rc;
            continue;
        }
        for (int i = 0; i < gr->n; i++) {
            int rc = weft_zero_grad(opt->params[gr->offset + i], set_to_none);
            if (rc < 0)
                return rc;
        }
    }
    return 0;
}

double weft_optimizer_get_lr(const weft_optimizer *opt)
{
    return weft_optimizer_group_lr(opt, 0);
}

int weft_optimizer_set_lr(weft_optimizer *opt, double lr)
{
    if (!opt)
        return WEFT_ERR_VALUE;
    for (int g = 0; g < opt->ngroups; g++) {
        int rc = opt->type->set_lr(opt->groups[g].ctx, lr);
        if (rc < 0)
            return rc;
    }
    return 0;
}

double weft_optimizer_get_momentum(const weft_optimizer *opt)
{
    if (!opt || opt->ngroups < 1 || !WEFT_VTABLE_HAS(opt->type, get_momentum))
        return NAN;
    return opt->type->get_momentum(opt->groups[0].ctx);
}

int weft_optimizer_set_momentum(weft_optimizer *opt, double momentum)
{
    if (!opt)
        return WEFT_ERR_VALUE;
    if (!WEFT_VTABLE_HAS(opt->type, set_momentum))
        return weft_error_set(WEFT_ERR_CONFIG, "optimizer '%s' has no momentum to cycle "
                                               "(cycle_momentum)", opt->type->base.name);
    for (int g = 0; g < opt->ngroups; g++) {
        int rc = opt->type->set_momentum(opt->groups[g].ctx, momentum);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* ---- state dicts: the type sees one group as group 0 with local indices ------------- */

/* "state.<i>.<rest>": i and rest, or -1 for another name. */
static int64_t state_index(const char *name, const char **rest)
{
    if (strncmp(name, "state.", 6) != 0)
        return -1;
    char *end;
    long long i = strtoll(name + 6, &end, 10);
    if (end == name + 6 || *end != '.' || i < 0)
        return -1;
    *rest = end + 1;
    return i;
}

/* "param_groups.<g>.<hyper>": g and hyper, or -1 for another key. */
static int64_t group_index(const char *key, const char **hyper)
{
    if (strncmp(key, "param_groups.", 13) != 0)
        return -1;
    char *end;
    long long g = strtoll(key + 13, &end, 10);
    if (end == key + 13 || *end != '.' || g < 0)
        return -1;
    *hyper = end + 1;
    return g;
}

/* Entries of from whose index lies in [lo, lo + n), renumbered by shift, into to. */
static int copy_state(const struct weft_tensor_dict *from, int64_t lo, int64_t n, int64_t shift,
                      struct weft_tensor_dict *to)
{
    int rc = 0;
    weft_scope_push();
    for (size_t e = 0; e < weft_tensor_dict_len(from) && rc == 0; e++) {
        const char *name = weft_tensor_dict_name(from, e), *rest = NULL;
        int64_t i = state_index(name, &rest);
        if (i < lo || i >= lo + n)
            continue;
        char key[256];
        snprintf(key, sizeof key, "state.%lld.%s", (long long)(i + shift), rest);
        rc = weft_tensor_dict_add(to, key, weft_tensor_dict_at(from, e));
    }
    weft_scope_pop();
    return rc < 0 ? -1 : 0;
}

/* Group `from_g`'s hyperparameters of from as group `to_g`'s into to; other keys of
 * from are copied when copy_other. */
static int copy_hypers(const struct weft_metadata *from, int64_t from_g, int64_t to_g,
                       bool copy_other, struct weft_metadata *to)
{
    for (size_t e = 0; e < weft_metadata_len(from); e++) {
        const char *key = weft_metadata_key(from, e), *hyper = NULL;
        int64_t g = group_index(key, &hyper);
        int rc = 0;
        if (g == from_g) {
            char k[256];
            snprintf(k, sizeof k, "param_groups.%lld.%s", (long long)to_g, hyper);
            rc = weft_metadata_set(to, k, weft_metadata_value(from, e));
        } else if (g < 0 && copy_other) {
            rc = weft_metadata_set(to, key, weft_metadata_value(from, e));
        }
        if (rc < 0)
            return -1;
    }
    return 0;
}

/* "param_groups.<g>.params" = "3, 4, 5", as PyTorch's param_groups[g]['params']. */
static int export_group_params(const struct opt_group *gr, int g, struct weft_metadata *m)
{
    size_t size = (size_t)gr->n * 13 + 1, len = 0;
    char *list = malloc(size), key[64];
    if (!list)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of memory saving the optimizer");
    list[0] = '\0';
    for (int i = 0; i < gr->n; i++)
        len += (size_t)snprintf(list + len, size - len, "%s%d", i ? ", " : "", gr->offset + i);
    snprintf(key, sizeof key, "param_groups.%d.params", g);
    int rc = weft_metadata_set(m, key, list);
    free(list);
    return rc;
}

static int export_group(const weft_optimizer *opt, int g, struct weft_tensor_dict *d,
                        struct weft_metadata *m)
{
    const struct opt_group *gr = &opt->groups[g];
    struct weft_tensor_dict *td = weft_tensor_dict_new();
    struct weft_metadata *tm = weft_metadata_new();
    int rc = td && tm ? 0 : WEFT_ERR_OUT_OF_MEMORY;
    if (rc == 0)
        rc = opt->type->state_export(gr->ctx, gr->n, opt->params + gr->offset, td, tm);
    if (rc == 0)
        rc = copy_state(td, 0, gr->n, gr->offset, d);
    if (rc == 0)
        rc = copy_hypers(tm, 0, g, true, m);
    if (rc == 0)
        rc = export_group_params(gr, g, m);
    weft_tensor_dict_free(td);
    weft_metadata_free(tm);
    return rc;
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
    for (int g = 0; g < opt->ngroups && rc == 0; g++)
        if (WEFT_VTABLE_HAS(opt->type, state_export))
            rc = export_group(opt, g, d, m);
    weft_metadata_free(own);
    return rc;
}

/* The saved groups match ours in number and size (when the metadata says). */
static int check_saved_groups(const weft_optimizer *opt, const struct weft_metadata *m)
{
    int64_t saved = 0;
    for (size_t e = 0; e < weft_metadata_len(m); e++) {
        const char *hyper;
        int64_t g = group_index(weft_metadata_key(m, e), &hyper);
        if (g >= saved)
            saved = g + 1;
    }
    if (saved == 0)
        return 0; /* no hyperparameters saved: nothing to compare */
    if (saved != opt->ngroups)
        return weft_error_set(WEFT_ERR_VALUE, "loaded state dict has a different number of "
                                              "parameter groups (%lld saved, %d here)",
                              (long long)saved, opt->ngroups);
    for (int g = 0; g < opt->ngroups; g++) {
        char key[64];
        snprintf(key, sizeof key, "param_groups.%d.params", g);
        const char *list = weft_metadata_get(m, key);
        if (!list)
            continue;
        int count = *list ? 1 : 0;
        for (const char *c = list; *c; c++)
            count += *c == ',';
        if (count != opt->groups[g].n)
            return weft_error_set(WEFT_ERR_VALUE, "loaded state dict contains a parameter group "
                                                  "that doesn't match the size of optimizer's "
                                                  "group (group %d: %d saved, %d here)",
                                  g, count, opt->groups[g].n);
    }
    return 0;
}

static int import_group(weft_optimizer *opt, int g, const struct weft_tensor_dict *d,
                        const struct weft_metadata *m)
{
    const struct opt_group *gr = &opt->groups[g];
    struct weft_tensor_dict *td = weft_tensor_dict_new();
    struct weft_metadata *tm = m ? weft_metadata_new() : NULL;
    int rc = td && (tm || !m) ? 0 : WEFT_ERR_OUT_OF_MEMORY;
    if (rc == 0)
        rc = copy_state(d, gr->offset, gr->n, -(int64_t)gr->offset, td);
    if (rc == 0 && m)
        rc = copy_hypers(m, g, 0, true, tm);
    if (rc == 0)
        rc = opt->type->state_import(gr->ctx, gr->n, opt->params + gr->offset, td, tm);
    weft_tensor_dict_free(td);
    weft_metadata_free(tm);
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
    if (m && check_saved_groups(opt, m) < 0)
        return weft_error_code();
    if (!WEFT_VTABLE_HAS(opt->type, state_import))
        return 0;
    for (int g = 0; g < opt->ngroups; g++) {
        int rc = import_group(opt, g, d, m);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* ---- clip_grad_norm_ ------------------------------------------------------------- */

/* Elements per piece of a host gradient whose norm is taken: |g|^p of a piece (256 KiB
 * of float32) stays in a core's L2 for its sum, where whole-tensor abs, mul and sum made
 * two full-size temporaries per gradient and three passes over memory (GPT-2 small: 340
 * MB each, 2% of a bfloat16 step). The pieces' sums add up in double. A CUDA gradient is
 * one piece: each piece's sum is read back to the host. */
#define NORM_PIECE ((int64_t)1 << 16)

/* |x|^p summed (p finite) or its maximum (p infinite; NaN wins, as torch's max). */
static double norm_combine(double acc, double v, double p)
{
    if (isinf(p))
        return (v > acc || isnan(v)) ? v : acc;
    return acc + v;
}

/* sum |g|^p over g's elements (p finite), max |g| (p infinite), into *out; g non-empty. */
static int grad_power_sum(weft_tensor *g, double p, double *out)
{
    const int64_t n = weft_tensor_numel(g), flat_shape[1] = {n};
    const int64_t piece = weft_tensor_device(g).type == WEFT_DEVICE_CPU ? NORM_PIECE : n;
    weft_tensor *flat = weft_reshape(g, 1, flat_shape);
    if (!flat)
        return -1;
    double acc = 0.0;
    for (int64_t start = 0; start < n; start += piece) {
        weft_scope_push();
        weft_tensor *x = weft_slice(flat, 0, start, start + piece < n ? start + piece : n, 1);
        weft_tensor *r;
        if (p == 2.0) {
            r = weft_sum(weft_mul(x, x), 0, NULL, false); /* x x = |x|^2, bit for bit */
        } else {
            weft_tensor *a = weft_abs(x);
            r = isinf(p) ? weft_max(a)
                : p == 1.0 ? weft_sum(a, 0, NULL, false)
                           : weft_sum(weft_pow_scalar(a, p), 0, NULL, false);
        }
        double v;
        int rc = weft_tensor_item(r, &v);
        weft_scope_pop();
        if (rc < 0)
            return -1;
        acc = norm_combine(acc, v, p);
    }
    *out = acc;
    return 0;
}

/* The norm_type-norm of all the gradients together, as torch.linalg.vector_norm of their
 * norms: (sum of |g|^p over every element)^(1/p), or the largest |g|. */
static int total_norm_of(int n, weft_tensor *const *params, double norm_type, double *total)
{
    double acc = 0.0;
    for (int i = 0; i < n; i++) {
        weft_tensor *g = weft_grad(params[i]);
        if (!g || weft_tensor_numel(g) == 0)
            continue;
        double v;
        if (grad_power_sum(g, norm_type, &v) < 0)
            return -1;
        acc = norm_combine(acc, v, norm_type);
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
