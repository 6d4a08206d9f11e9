/* train/scheduler_onecycle.c: OneCycleLR, term for term PyTorch 1.13's: the lr climbs from
 * max_lr/div_factor to max_lr over pct_start of total_steps and falls to
 * initial_lr/final_div_factor by the end (three_phase: down to initial_lr first), cosine
 * or linear; the momentum moves the other way between max_momentum and base_momentum. */
#include <math.h>
#include <stdio.h>

#include "scheduler_internal.h"
#include "weft/error.h"

#define PI 3.14159265358979323846

/* One phase from (lr a, momentum ma) to (lr b, momentum mb), ending at step end. */
static void add_phase(struct sched_onecycle *c, double end, double a, double b, double ma,
                      double mb)
{
    int i = c->nphases++;
    c->phase[i].end_step = end;
    c->phase[i].start_lr = a;
    c->phase[i].end_lr = b;
    c->phase[i].start_momentum = ma;
    c->phase[i].end_momentum = mb;
}

int sched_onecycle_read(struct sched_onecycle *c, const weft_options *o, double lr)
{
    static const char *const anneals[] = {"cos", "linear", NULL};
    int anneal = 0;
    int64_t epochs = 0, steps_per_epoch = 0;
    double pct, div, final_div;
    bool three;
    if (weft_options_double(o, "max_lr", lr, &c->max_lr) < 0 ||
        weft_options_int(o, "total_steps", 0, &c->total_steps) < 0 ||
        weft_options_int(o, "epochs", 0, &epochs) < 0 ||
        weft_options_int(o, "steps_per_epoch", 0, &steps_per_epoch) < 0 ||
        weft_options_double(o, "pct_start", 0.3, &pct) < 0 ||
        weft_options_choice(o, "anneal_strategy", anneals, 0, &anneal) < 0 ||
        weft_options_double(o, "div_factor", 25.0, &div) < 0 ||
        weft_options_double(o, "final_div_factor", 1e4, &final_div) < 0 ||
        weft_options_bool(o, "three_phase", false, &three) < 0 ||
        weft_options_bool(o, "cycle_momentum", true, &c->cycle_momentum) < 0 ||
        weft_options_double(o, "base_momentum", 0.85, &c->base_momentum) < 0 ||
        weft_options_double(o, "max_momentum", 0.95, &c->max_momentum) < 0)
        return WEFT_ERR_CONFIG;
    bool by_epochs = weft_options_has(o, "epochs") || weft_options_has(o, "steps_per_epoch");
    if (!weft_options_has(o, "total_steps") && !by_epochs)
        return weft_options_error(o, "You must define either total_steps OR (epochs AND "
                                     "steps_per_epoch)");
    if (weft_options_has(o, "total_steps")) {
        if (c->total_steps <= 0)
            return weft_options_bad_value(o, "total_steps", "Expected positive integer "
                                                            "total_steps, but got %lld",
                                          (long long)c->total_steps);
    } else {
        if (epochs <= 0)
            return weft_options_bad_value(o, "epochs", "Expected positive integer epochs, but "
                                                       "got %lld", (long long)epochs);
        if (steps_per_epoch <= 0)
            return weft_options_bad_value(o, "steps_per_epoch", "Expected positive integer "
                                                                "steps_per_epoch, but got %lld",
                                          (long long)steps_per_epoch);
        c->total_steps = epochs * steps_per_epoch;
    }
    if (pct < 0 || pct > 1)
        return weft_options_bad_value(o, "pct_start", "Expected float between 0 and 1 "
                                                      "pct_start, but got %g", pct);
    if (!(c->max_lr > 0) || !(div > 0) || !(final_div > 0))
        return weft_options_bad_value(o, !(c->max_lr > 0) ? "max_lr" : !(div > 0) ? "div_factor"
                                                                                   : "final_div_factor",
                                      "expected a positive number");
    c->linear = anneal == 1;
    c->initial_lr = c->max_lr / div;
    c->min_lr = c->initial_lr / final_div;
    double n = (double)c->total_steps, hi = c->max_momentum, lo = c->base_momentum;
    c->nphases = 0;
    if (three) {
        add_phase(c, pct * n - 1, c->initial_lr, c->max_lr, hi, lo);
        add_phase(c, 2 * pct * n - 2, c->max_lr, c->initial_lr, lo, hi);
        add_phase(c, n - 1, c->initial_lr, c->min_lr, hi, hi);
    } else {
        add_phase(c, pct * n - 1, c->initial_lr, c->max_lr, hi, lo);
        add_phase(c, n - 1, c->max_lr, c->min_lr, lo, hi);
    }
    /* PyTorch divides by each phase's length, and a phase that is reached with no length
     * is a ZeroDivisionError there: refused here, with what would make it work. */
    double start = 0;
    for (int i = 0; i < c->nphases; i++) {
        double end = c->phase[i].end_step;
        bool reached = i == c->nphases - 1 || end >= start;
        if (reached && end == start)
            return weft_options_bad_value(o, "pct_start", "%g of total_steps = %lld leaves phase "
                                                          "%d of the cycle without a step (PyTorch "
                                                          "divides by zero there): change "
                                                          "pct_start or total_steps",
                                          pct, (long long)c->total_steps, i + 1);
        start = end;
    }
    return 0;
}

static double anneal(const struct sched_onecycle *c, double start, double end, double pct)
{
    if (c->linear)
        return (end - start) * pct + start;
    double cos_out = cos(PI * pct) + 1;
    return end + (start - end) / 2.0 * cos_out;
}

bool sched_onecycle_at(const struct sched_onecycle *c, int64_t e, double *lr, double *momentum)
{
    if (e > c->total_steps)
        return false;
    double start = 0, step = (double)e;
    for (int i = 0; i < c->nphases; i++) {
        double end = c->phase[i].end_step;
        if (step <= end || i == c->nphases - 1) {
            double pct = (step - start) / (end - start);
            *lr = anneal(c, c->phase[i].start_lr, c->phase[i].end_lr, pct);
            *momentum = anneal(c, c->phase[i].start_momentum, c->phase[i].end_momentum, pct);
            break;
        }
        start = end;
    }
    return true;
}
