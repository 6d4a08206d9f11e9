/* train/scheduler_plateau.c: ReduceLROnPlateau, term for term PyTorch 1.13's: after each
 * evaluation, a metric not better than the best by threshold counts a bad epoch; more
 * than patience of them in a row multiply the lr by factor (not below min_lr, and not
 * by less than eps), and cooldown evaluations follow in which none counts. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler_internal.h"
#include "weft/error.h"

int sched_plateau_read(struct sched_plateau *p, const weft_options *o, double lr)
{
    static const char *const modes[] = {"min", "max", NULL};
    static const char *const threshold_modes[] = {"rel", "abs", NULL};
    int mode = 0, tmode = 0;
    if (weft_options_choice(o, "mode", modes, 0, &mode) < 0 ||
        weft_options_choice(o, "threshold_mode", threshold_modes, 0, &tmode) < 0 ||
        weft_options_double(o, "factor", 0.1, &p->factor) < 0 ||
        weft_options_int(o, "patience", 10, &p->patience) < 0 ||
        weft_options_double(o, "threshold", 1e-4, &p->threshold) < 0 ||
        weft_options_int(o, "cooldown", 0, &p->cooldown) < 0 ||
        weft_options_double(o, "min_lr", 0.0, &p->min_lr) < 0 ||
        weft_options_double(o, "eps", 1e-8, &p->eps) < 0)
        return WEFT_ERR_CONFIG;
    if (p->factor >= 1.0)
        return weft_options_bad_value(o, "factor", "Factor should be < 1.0.");
    if (p->factor <= 0.0)
        return weft_options_bad_value(o, "factor", "expected a factor in (0, 1)");
    if (p->patience < 0 || p->cooldown < 0)
        return weft_options_bad_value(o, p->patience < 0 ? "patience" : "cooldown",
                                      "expected a number of evaluations >= 0");
    if (p->min_lr < 0)
        return weft_options_bad_value(o, "min_lr", "expected >= 0");
    p->mode_max = mode == 1;
    p->threshold_abs = tmode == 1;
    p->best = p->mode_max ? -INFINITY : INFINITY; /* mode_worse */
    p->lr = lr;
    p->num_bad_epochs = p->cooldown_counter = p->last_epoch = 0;
    return 0;
}

static bool is_better(const struct sched_plateau *p, double a)
{
    if (!p->mode_max)
        return p->threshold_abs ? a < p->best - p->threshold : a < p->best * (1. - p->threshold);
    return p->threshold_abs ? a > p->best + p->threshold : a > p->best * (p->threshold + 1.);
}

void sched_plateau_step(struct sched_plateau *p, double metric)
{
    p->last_epoch++;
    if (is_better(p, metric)) {
        p->best = metric;
        p->num_bad_epochs = 0;
    } else {
        p->num_bad_epochs++;
    }
    if (p->cooldown_counter > 0) { /* bad epochs in cooldown do not count */
        p->cooldown_counter--;
        p->num_bad_epochs = 0;
    }
    if (p->num_bad_epochs > p->patience) {
        double new_lr = fmax(p->lr * p->factor, p->min_lr);
        if (p->lr - new_lr > p->eps)
            p->lr = new_lr;
        p->cooldown_counter = p->cooldown;
        p->num_bad_epochs = 0;
    }
}

static int set_double(struct weft_metadata *m, const char *key, double v)
{
    char buf[40];
    snprintf(buf, sizeof buf, "%.17g", v); /* "inf" for a best not yet seen */
    return weft_metadata_set(m, key, buf);
}

int sched_plateau_export(const struct sched_plateau *p, struct weft_metadata *m)
{
    if (set_double(m, "scheduler.plateau.best", p->best) < 0 ||
        set_double(m, "scheduler.plateau.lr", p->lr) < 0 ||
        weft_metadata_set_int(m, "scheduler.plateau.num_bad_epochs", p->num_bad_epochs) < 0 ||
        weft_metadata_set_int(m, "scheduler.plateau.cooldown_counter", p->cooldown_counter) < 0 ||
        weft_metadata_set_int(m, "scheduler.plateau.last_epoch", p->last_epoch) < 0)
        return -1;
    return 0;
}

static int get_double(const struct weft_metadata *m, const char *key, double *out)
{
    const char *v = weft_metadata_get(m, key);
    if (!v)
        return weft_error_set(WEFT_ERR_VALUE, "checkpoint metadata has no key '%s' (the plateau "
                                              "scheduler's state)", key);
    char *end;
    *out = strtod(v, &end);
    if (end == v || *end)
        return weft_error_set(WEFT_ERR_VALUE, "checkpoint metadata '%s' = '%s' is not a number",
                              key, v);
    return 0;
}

int sched_plateau_import(struct sched_plateau *p, const struct weft_metadata *m)
{
    struct sched_plateau q = *p;
    if (get_double(m, "scheduler.plateau.best", &q.best) < 0 ||
        get_double(m, "scheduler.plateau.lr", &q.lr) < 0 ||
        weft_metadata_get_int(m, "scheduler.plateau.num_bad_epochs", &q.num_bad_epochs) < 0 ||
        weft_metadata_get_int(m, "scheduler.plateau.cooldown_counter", &q.cooldown_counter) < 0 ||
        weft_metadata_get_int(m, "scheduler.plateau.last_epoch", &q.last_epoch) < 0)
        return WEFT_ERR_VALUE;
    *p = q;
    return 0;
}
