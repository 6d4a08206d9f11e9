/* train/scheduler.c: learning-rate schedulers (weft/optim.h): PyTorch's closed forms,
 * nanoGPT's get_lr(it), OneCycleLR (scheduler_onecycle.c) and ReduceLROnPlateau
 * (scheduler_plateau.c), each with an optional linear warmup in front. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler_internal.h"
#include "weft/error.h"
#include "weft/optim.h"

#define PI 3.14159265358979323846

enum sched_kind {
    SCHED_NONE,
    SCHED_STEP,
    SCHED_MULTISTEP,
    SCHED_COSINE,
    SCHED_WARMUP_COSINE,
    SCHED_PLATEAU,
    SCHED_ONECYCLE
};

#define MAX_MILESTONES 64

struct weft_scheduler {
    weft_optimizer *opt;
    enum sched_kind kind;
    double base_lr, gamma, eta_min, warmup_start, min_lr;
    int64_t step_size, t_max, warmup;
    int64_t warmup_iters, lr_decay_iters; /* warmup_cosine */
    int nmilestones;
    int64_t milestones[MAX_MILESTONES];
    int64_t last_epoch;
    struct sched_plateau plateau;
    struct sched_onecycle onecycle;
    char where[256]; /* "cfg.ini: [scheduler] ", for errors after creation */
};

/* "30, 80" into s->milestones: increasing non-negative integers. */
static int parse_milestones(struct weft_scheduler *s, const weft_options *o)
{
    if (weft_options_ints(o, "milestones", MAX_MILESTONES, s->milestones, &s->nmilestones) < 0)
        return WEFT_ERR_CONFIG;
    for (int i = 0; i < s->nmilestones; i++)
        if (s->milestones[i] < 0 || (i > 0 && s->milestones[i] <= s->milestones[i - 1]))
            return weft_options_bad_value(o, "milestones",
                                          "expected up to %d increasing non-negative integers "
                                          "separated by commas",
                                          MAX_MILESTONES);
    return 0;
}

static int read_schedule(struct weft_scheduler *s, const weft_options *o)
{
    static const char *const kinds[] = {"none",          "step",    "multistep", "cosine",
                                        "warmup_cosine", "plateau", "onecycle",  NULL};
    int kind = 0;
    int64_t warmup = 0;
    if (weft_options_choice(o, "type", kinds, SCHED_NONE, &kind) < 0 ||
        weft_options_double(o, "gamma", 0.1, &s->gamma) < 0 ||
        weft_options_int(o, "step_size", 0, &s->step_size) < 0 ||
        weft_options_int(o, "T_max", 0, &s->t_max) < 0 ||
        weft_options_double(o, "eta_min", 0.0, &s->eta_min) < 0 ||
        weft_options_int(o, "warmup_steps", 0, &warmup) < 0 ||
        weft_options_double(o, "warmup_start_factor", 1.0 / 3.0, &s->warmup_start) < 0 ||
        weft_options_int(o, "warmup_iters", 0, &s->warmup_iters) < 0 ||
        weft_options_int(o, "lr_decay_iters", 0, &s->lr_decay_iters) < 0 ||
        weft_options_double(o, "min_lr", 0.0, &s->min_lr) < 0)
        return WEFT_ERR_CONFIG;
    s->kind = (enum sched_kind)kind;
    if (s->kind == SCHED_PLATEAU && sched_plateau_read(&s->plateau, o, s->base_lr) < 0)
        return WEFT_ERR_CONFIG;
    if (s->kind == SCHED_ONECYCLE && sched_onecycle_read(&s->onecycle, o, s->base_lr) < 0)
        return WEFT_ERR_CONFIG;
    s->warmup = warmup;
    if (s->kind == SCHED_STEP && s->step_size < 1)
        return weft_options_bad_value(o, "step_size", "the step scheduler needs a positive "
                                                      "step_size");
    if (s->kind == SCHED_COSINE && s->t_max < 1)
        return weft_options_bad_value(o, "T_max", "the cosine scheduler needs a positive T_max");
    if (s->kind == SCHED_WARMUP_COSINE) {
        if (warmup != 0)
            return weft_options_bad_value(o, "warmup_steps", "warmup_cosine has its own warmup: "
                                                             "set warmup_iters instead");
        if (s->warmup_iters < 0)
            return weft_options_bad_value(o, "warmup_iters", "expected >= 0");
        if (!weft_options_has(o, "lr_decay_iters"))
            return weft_options_error(o, "missing key 'lr_decay_iters' for the warmup_cosine "
                                         "scheduler");
        if (s->lr_decay_iters <= s->warmup_iters)
            return weft_options_bad_value(o, "lr_decay_iters", "expected more than warmup_iters "
                                                               "(%lld)",
                                          (long long)s->warmup_iters);
        if (s->min_lr < 0)
            return weft_options_bad_value(o, "min_lr", "expected >= 0");
    }
    if (s->kind == SCHED_MULTISTEP) {
        if (!weft_options_has(o, "milestones"))
            return weft_options_error(o, "missing key 'milestones' for the multistep scheduler");
        if (parse_milestones(s, o) < 0)
            return WEFT_ERR_CONFIG;
    }
    if (warmup < 0)
        return weft_options_bad_value(o, "warmup_steps", "expected >= 0");
    if (warmup > 0 && (s->warmup_start > 1.0 || s->warmup_start <= 0.0))
        return weft_options_error(o, "Starting multiplicative factor expected to be greater than "
                                     "0 and less or equal to 1.");
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
    case SCHED_WARMUP_COSINE: {
        /* nanoGPT's get_lr(it), term for term. */
        if (e < s->warmup_iters)
            return s->base_lr * (double)(e + 1) / (double)(s->warmup_iters + 1);
        if (e > s->lr_decay_iters)
            return s->min_lr;
        double ratio = (double)(e - s->warmup_iters) / (double)(s->lr_decay_iters - s->warmup_iters);
        double coeff = 0.5 * (1.0 + cos(PI * ratio));
        return s->min_lr + coeff * (s->base_lr - s->min_lr);
    }
    case SCHED_PLATEAU:
        return s->plateau.lr;
    case SCHED_ONECYCLE: {
        double lr = NAN, momentum;
        sched_onecycle_at(&s->onecycle, e, &lr, &momentum);
        return lr;
    }
    case SCHED_NONE:
    default:
        return s->base_lr;
    }
}

/* What the warmup climbs to: the main schedule's lr at its start. */
static double warmup_target(const weft_scheduler *s)
{
    return s->kind == SCHED_ONECYCLE ? s->onecycle.initial_lr : s->base_lr;
}

double weft_scheduler_lr_at(const weft_scheduler *s, int64_t e)
{
    if (!s)
        return NAN;
    if (e < s->warmup) {
        double f = s->warmup_start + (1.0 - s->warmup_start) * (double)e / (double)s->warmup;
        return warmup_target(s) * f;
    }
    return main_lr_at(s, e - s->warmup);
}

/* Sets the optimizer's lr (and OneCycleLR's momentum) to the schedule's at step e. */
static int apply(weft_scheduler *s, int64_t e)
{
    if (s->kind == SCHED_ONECYCLE) {
        int64_t k = e < s->warmup ? 0 : e - s->warmup; /* warmup: the cycle's first momentum */
        double lr, momentum;
        if (!sched_onecycle_at(&s->onecycle, k, &lr, &momentum))
            return weft_error_set(WEFT_ERR_CONFIG,
                                  "%stotal_steps = %lld: Tried to step %lld times. The specified "
                                  "number of total steps is %lld",
                                  s->where, (long long)s->onecycle.total_steps, (long long)k + 1,
                                  (long long)s->onecycle.total_steps);
        if (s->onecycle.cycle_momentum && weft_optimizer_set_momentum(s->opt, momentum) < 0)
            return weft_error_code();
    }
    return weft_optimizer_set_lr(s->opt, weft_scheduler_lr_at(s, e));
}

weft_scheduler *weft_scheduler_create(weft_optimizer *opt, const weft_options *options)
{
    if (!opt) {
        weft_error_set(WEFT_ERR_VALUE, "weft_scheduler_create: optimizer is NULL");
        return NULL;
    }
    weft_scheduler *s = calloc(1, sizeof *s);
    if (!s) {
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "weft_scheduler_create: out of memory");
        return NULL;
    }
    s->opt = opt;
    s->base_lr = weft_optimizer_get_lr(opt);
    weft_options_where(options, s->where, sizeof s->where);
    int rc = read_schedule(s, options);
    if (rc == 0 && s->kind == SCHED_ONECYCLE && s->onecycle.cycle_momentum &&
        isnan(weft_optimizer_get_momentum(opt)))
        rc = weft_options_bad_value(options, "cycle_momentum", "optimizer must support momentum "
                                                               "with `cycle_momentum` option "
                                                               "enabled (%s has none: set "
                                                               "cycle_momentum = false)",
                                    weft_optimizer_name(opt));
    if (rc == 0)
        rc = apply(s, 0);
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
    return apply(s, s->last_epoch);
}

bool weft_scheduler_wants_metric(const weft_scheduler *s)
{
    return s && s->kind == SCHED_PLATEAU;
}

int weft_scheduler_step_metric(weft_scheduler *s, double metric)
{
    if (!s)
        return WEFT_ERR_VALUE;
    if (s->kind != SCHED_PLATEAU)
        return weft_error_set(WEFT_ERR_VALUE, "%sonly the plateau scheduler steps on a metric",
                              s->where);
    if (s->last_epoch < s->warmup) /* the lr still climbs: no plateau to judge */
        return 0;
    sched_plateau_step(&s->plateau, metric);
    return weft_optimizer_set_lr(s->opt, s->plateau.lr);
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
    return s->kind == SCHED_PLATEAU ? sched_plateau_export(&s->plateau, m) : 0;
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
    if (s->kind == SCHED_PLATEAU && sched_plateau_import(&s->plateau, m) < 0)
        return WEFT_ERR_VALUE;
    s->last_epoch = e;
    return apply(s, e);
}
