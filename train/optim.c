/* train/optim.c: the optimizer-type registry, optimizer objects around a type,
 * clip_grad_norm_ and the learning-rate schedulers.
 *
 * The core knows no update rule: it finds the type by name (loading weft-optim.so on
 * demand, as dataset.c does for readers), keeps the parameters and forwards to the type.
 */
#include "weft/optim.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft/autograd.h"
#include "weft/config.h"
#include "weft/error.h"
#include "weft/ops.h"

/* ABI 1's type ends with zero_grad. */
#define TYPE_ABI1_SIZE                                                                        \
    (offsetof(struct weft_optimizer_type, zero_grad) +                                        \
     sizeof(((struct weft_optimizer_type *)0)->zero_grad))
#define TYPE_HAS(t, field)                                                                    \
    ((t)->struct_size >= offsetof(struct weft_optimizer_type, field) + sizeof((t)->field) &&  \
     (t)->field != NULL)

#define OPTIM_PLUGIN "optim"
#define PI 3.14159265358979323846

struct weft_optimizer {
    const struct weft_optimizer_type *type;
    void *ctx;
    int n;
    weft_tensor **params;
};

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static const struct weft_optimizer_type **types;
static int ntypes, cap_types;

/* ---- registry ------------------------------------------------------------------- */

static int check_type(const struct weft_optimizer_type *t)
{
    if (!t)
        return weft_error_set(WEFT_ERR_PLUGIN, "weft_optimizer_type_register: type is NULL");
    if (t->abi_version != WEFT_PLUGIN_ABI_VERSION)
        return weft_error_set(WEFT_ERR_PLUGIN,
                              "optimizer type was built for weft plugin ABI %u, but this weft "
                              "has ABI %d; rebuild the plugin against this weft",
                              t->abi_version, WEFT_PLUGIN_ABI_VERSION);
    const char *name = t->name ? t->name : "?";
    if (t->struct_size < TYPE_ABI1_SIZE)
        return weft_error_set(WEFT_ERR_PLUGIN,
                              "optimizer type '%s' has struct_size %u, smaller than ABI %d's "
                              "%zu bytes; rebuild the plugin against this weft",
                              name, t->struct_size, WEFT_PLUGIN_ABI_VERSION, TYPE_ABI1_SIZE);
    if (!t->name || !t->name[0])
        return weft_error_set(WEFT_ERR_PLUGIN, "optimizer type has no name");
    if (!t->create || !t->step || !t->destroy || !t->get_lr || !t->set_lr)
        return weft_error_set(WEFT_ERR_PLUGIN,
                              "optimizer type '%s' lacks a required method (create, step, "
                              "destroy, get_lr and set_lr must be set)",
                              name);
    return 0;
}

/* Caller holds registry_lock. */
static const struct weft_optimizer_type *find_locked(const char *name)
{
    for (int i = 0; i < ntypes; i++)
        if (strcmp(types[i]->name, name) == 0)
            return types[i];
    return NULL;
}

int weft_optimizer_type_register(const struct weft_optimizer_type *type)
{
    if (check_type(type) < 0)
        return WEFT_ERR_PLUGIN;
    int rc = 0;
    pthread_mutex_lock(&registry_lock);
    const struct weft_optimizer_type *old = find_locked(type->name);
    if (old && old != type) {
        rc = weft_error_set(WEFT_ERR_PLUGIN, "optimizer type '%s' is already registered",
                            type->name);
    } else if (!old && ntypes == cap_types) {
        int cap = cap_types ? cap_types * 2 : 8;
        const struct weft_optimizer_type **v = realloc(types, (size_t)cap * sizeof *v);
        if (!v)
            rc = weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "optimizer registry: out of memory");
        else {
            types = v;
            cap_types = cap;
        }
    }
    if (rc == 0 && !old)
        types[ntypes++] = type;
    pthread_mutex_unlock(&registry_lock);
    return rc;
}

const struct weft_optimizer_type *weft_optimizer_type_find(const char *name)
{
    if (!name)
        return NULL;
    pthread_mutex_lock(&registry_lock);
    const struct weft_optimizer_type *t = find_locked(name);
    pthread_mutex_unlock(&registry_lock);
    return t;
}

int weft_optimizer_type_count(void)
{
    pthread_mutex_lock(&registry_lock);
    int n = ntypes;
    pthread_mutex_unlock(&registry_lock);
    return n;
}

const struct weft_optimizer_type *weft_optimizer_type_get(int i)
{
    pthread_mutex_lock(&registry_lock);
    const struct weft_optimizer_type *t = i >= 0 && i < ntypes ? types[i] : NULL;
    pthread_mutex_unlock(&registry_lock);
    return t;
}

/* "adam, adamw, rmsprop, sgd" (registration order) into buf. */
static void describe_types(char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    pthread_mutex_lock(&registry_lock);
    for (int i = 0; i < ntypes; i++) {
        int w = snprintf(buf + used, size - used, "%s%s", i ? ", " : "", types[i]->name);
        if (w > 0 && (size_t)w < size - used)
            used += (size_t)w;
    }
    pthread_mutex_unlock(&registry_lock);
    if (!buf[0])
        snprintf(buf, size, "none registered");
}

/* The type called name, loading weft-optim.so when it is not registered yet. */
static const struct weft_optimizer_type *find_type(const char *cfg_name, const char *section,
                                                   const char *name)
{
    const struct weft_optimizer_type *t = weft_optimizer_type_find(name);
    if (t)
        return t;
    char load_error[512] = "";
    if (!weft_plugin_is_loaded(OPTIM_PLUGIN) && weft_error_code() == WEFT_OK) {
        if (weft_plugin_load(OPTIM_PLUGIN) < 0) {
            snprintf(load_error, sizeof load_error, "; loading plugin '%s' failed: %s",
                     OPTIM_PLUGIN, weft_error_message());
            weft_error_clear();
        }
        t = weft_optimizer_type_find(name);
        if (t)
            return t;
    }
    char known[512];
    describe_types(known, sizeof known);
    weft_error_set(WEFT_ERR_CONFIG, "%s: [%s] type = '%s': unknown optimizer (registered: %s)%s",
                   cfg_name, section, name, known, load_error);
    return NULL;
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
                                   weft_tensor *const *params, struct weft_config *cfg,
                                   const char *section)
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
    if (type->create(n, params, cfg, section, &opt->ctx) < 0) {
        if (weft_error_code() == WEFT_OK)
            weft_error_set(WEFT_ERR_PLUGIN, "optimizer '%s' failed to start", type->name);
        free_opt(opt);
        return NULL;
    }
    return opt;
}

weft_optimizer *weft_optimizer_create(const char *name, int n, weft_tensor *const *params,
                                      struct weft_config *cfg, const char *section)
{
    if (check_params(n, params) < 0)
        return NULL;
    if (!section)
        section = "optim";
    struct weft_config *own = NULL;
    if (!cfg) {
        own = weft_config_new("defaults");
        if (!own)
            return NULL;
        cfg = own;
    }
    weft_optimizer *opt = NULL;
    if (!name)
        name = weft_config_string(cfg, section, "type", NULL);
    if (!name) {
        char known[512];
        describe_types(known, sizeof known);
        weft_error_set(WEFT_ERR_CONFIG,
                       "%s: [%s] missing key 'type': expected the name of an optimizer (%s)",
                       weft_config_name(cfg), section, known);
    } else {
        /* Unused when a name is passed, but the section may still hold it. */
        weft_config_mark_known(cfg, section, "type");
        const struct weft_optimizer_type *type = find_type(weft_config_name(cfg), section, name);
        if (type)
            opt = create_with(type, n, params, cfg, section);
    }
    weft_config_free(own);
    return opt;
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
    return opt ? opt->type->name : "";
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
    if (TYPE_HAS(opt->type, zero_grad))
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
    int rc = weft_metadata_set(m, "optimizer", opt->type->name);
    if (rc == 0 && TYPE_HAS(opt->type, state_export))
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
    if (saved && strcmp(saved, opt->type->name) != 0)
        return weft_error_set(WEFT_ERR_VALUE,
                              "optimizer state was saved by '%s' and cannot be loaded into '%s'",
                              saved, opt->type->name);
    if (!TYPE_HAS(opt->type, state_import))
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

/* ---- schedulers ------------------------------------------------------------------ */

enum sched_kind { SCHED_NONE, SCHED_STEP, SCHED_MULTISTEP, SCHED_COSINE };

#define MAX_MILESTONES 64

struct weft_scheduler {
    weft_optimizer *opt;
    enum sched_kind kind;
    double base_lr, gamma, eta_min, warmup_start;
    int64_t step_size, t_max, warmup;
    int nmilestones;
    int64_t milestones[MAX_MILESTONES];
    int64_t last_epoch;
};

/* "30, 80" into s->milestones: increasing positive integers. */
static int parse_milestones(struct weft_scheduler *s, const char *file, const char *section,
                            const char *text)
{
    const char *p = text;
    while (*p) {
        char *end;
        while (*p == ' ' || *p == '\t')
            p++;
        long long v = strtoll(p, &end, 10);
        if (end == p || v < 0 || s->nmilestones == MAX_MILESTONES ||
            (s->nmilestones > 0 && v <= s->milestones[s->nmilestones - 1]))
            return weft_error_set(WEFT_ERR_CONFIG,
                                  "%s: [%s] milestones = '%s': expected up to %d increasing "
                                  "non-negative integers separated by commas",
                                  file, section, text, MAX_MILESTONES);
        s->milestones[s->nmilestones++] = v;
        p = end;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p == ',')
            p++;
        else if (*p)
            return weft_error_set(WEFT_ERR_CONFIG,
                                  "%s: [%s] milestones = '%s': expected integers separated by "
                                  "commas",
                                  file, section, text);
    }
    return 0;
}

static int read_schedule(struct weft_scheduler *s, struct weft_config *cfg, const char *section)
{
    static const char *const kinds[] = {"none", "step", "multistep", "cosine", NULL};
    const char *file = weft_config_name(cfg);
    int kind = 0;
    int64_t warmup = 0;
    if (weft_config_choice(cfg, section, "type", kinds, SCHED_NONE, &kind) < 0 ||
        weft_config_double(cfg, section, "gamma", 0.1, &s->gamma) < 0 ||
        weft_config_int(cfg, section, "step_size", 0, &s->step_size) < 0 ||
        weft_config_int(cfg, section, "T_max", 0, &s->t_max) < 0 ||
        weft_config_double(cfg, section, "eta_min", 0.0, &s->eta_min) < 0 ||
        weft_config_int(cfg, section, "warmup_steps", 0, &warmup) < 0 ||
        weft_config_double(cfg, section, "warmup_start_factor", 1.0 / 3.0, &s->warmup_start) < 0)
        return WEFT_ERR_CONFIG;
    s->kind = (enum sched_kind)kind;
    s->warmup = warmup;
    const char *ms = weft_config_string(cfg, section, "milestones", NULL);
    if (s->kind == SCHED_STEP && s->step_size < 1)
        return weft_error_set(WEFT_ERR_CONFIG,
                              "%s: [%s] step_size = %lld: the step scheduler needs a positive "
                              "step_size",
                              file, section, (long long)s->step_size);
    if (s->kind == SCHED_COSINE && s->t_max < 1)
        return weft_error_set(WEFT_ERR_CONFIG,
                              "%s: [%s] T_max = %lld: the cosine scheduler needs a positive T_max",
                              file, section, (long long)s->t_max);
    if (s->kind == SCHED_MULTISTEP) {
        if (!ms)
            return weft_error_set(WEFT_ERR_CONFIG,
                                  "%s: [%s] missing key 'milestones' for the multistep scheduler",
                                  file, section);
        if (parse_milestones(s, file, section, ms) < 0)
            return WEFT_ERR_CONFIG;
    }
    if (warmup < 0)
        return weft_error_set(WEFT_ERR_CONFIG, "%s: [%s] warmup_steps = %lld: expected >= 0",
                              file, section, (long long)warmup);
    if (warmup > 0 && (s->warmup_start > 1.0 || s->warmup_start <= 0.0))
        return weft_error_set(WEFT_ERR_VALUE,
                              "%s: [%s] Starting multiplicative factor expected to be greater "
                              "than 0 and less or equal to 1.",
                              file, section);
    return 0;
}

static double main_lr_at(const weft_scheduler *s, int64_t e)
{
    switch (s->kind) {
    case SCHED_STEP:
        return s->base_lr * pow(s->gamma, (double)(e / s->step_size));
    case SCHED_MULTISTEP: {
        int k = 0;
        while (k < s->nmilestones && s->milestones[k] <= e)
            k++;
        return s->base_lr * pow(s->gamma, k);
    }
    case SCHED_COSINE:
        return s->eta_min +
               (s->base_lr - s->eta_min) * (1.0 + cos(PI * (double)e / (double)s->t_max)) / 2.0;
    case SCHED_NONE:
    default:
        return s->base_lr;
    }
}

double weft_scheduler_lr_at(const weft_scheduler *s, int64_t e)
{
    if (!s)
        return NAN;
    if (e < s->warmup) {
        double f = s->warmup_start + (1.0 - s->warmup_start) * (double)e / (double)s->warmup;
        return s->base_lr * f;
    }
    return main_lr_at(s, e - s->warmup);
}

weft_scheduler *weft_scheduler_create(weft_optimizer *opt, struct weft_config *cfg,
                                      const char *section)
{
    if (!opt) {
        weft_error_set(WEFT_ERR_VALUE, "weft_scheduler_create: optimizer is NULL");
        return NULL;
    }
    if (!section)
        section = "scheduler";
    weft_scheduler *s = calloc(1, sizeof *s);
    if (!s) {
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "weft_scheduler_create: out of memory");
        return NULL;
    }
    struct weft_config *own = cfg ? NULL : weft_config_new("defaults");
    int rc = (cfg || own) ? read_schedule(s, cfg ? cfg : own, section) : WEFT_ERR_OUT_OF_MEMORY;
    weft_config_free(own);
    s->opt = opt;
    s->base_lr = weft_optimizer_get_lr(opt);
    if (rc == 0)
        rc = weft_optimizer_set_lr(opt, weft_scheduler_lr_at(s, 0));
    if (rc < 0) {
        free(s);
        return NULL;
    }
    return s;
}

void weft_scheduler_free(weft_scheduler *s)
{
    free(s);
}

int weft_scheduler_step(weft_scheduler *s)
{
    if (!s)
        return WEFT_ERR_VALUE;
    s->last_epoch++;
    return weft_optimizer_set_lr(s->opt, weft_scheduler_lr_at(s, s->last_epoch));
}

int64_t weft_scheduler_last_epoch(const weft_scheduler *s)
{
    return s ? s->last_epoch : -1;
}

int weft_scheduler_state_export(const weft_scheduler *s, struct weft_metadata *m)
{
    if (!s || !m)
        return weft_error_set(WEFT_ERR_VALUE, "weft_scheduler_state_export: NULL argument");
    char buf[64];
    snprintf(buf, sizeof buf, "%.17g", s->base_lr);
    if (weft_metadata_set_int(m, "scheduler.last_epoch", s->last_epoch) < 0 ||
        weft_metadata_set(m, "scheduler.base_lr", buf) < 0)
        return -1;
    return 0;
}

int weft_scheduler_state_import(weft_scheduler *s, const struct weft_metadata *m)
{
    if (!s || !m)
        return weft_error_set(WEFT_ERR_VALUE, "weft_scheduler_state_import: NULL argument");
    int64_t e;
    if (weft_metadata_get_int(m, "scheduler.last_epoch", &e) < 0)
        return WEFT_ERR_VALUE;
    const char *base = weft_metadata_get(m, "scheduler.base_lr");
    if (base) {
        char *end;
        double v = strtod(base, &end);
        if (end == base || *end)
            return weft_error_set(WEFT_ERR_VALUE,
                                  "checkpoint metadata 'scheduler.base_lr' = '%s' is not a number",
                                  base);
        s->base_lr = v;
    }
    s->last_epoch = e;
    return weft_optimizer_set_lr(s->opt, weft_scheduler_lr_at(s, e));
}
