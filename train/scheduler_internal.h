/* train/scheduler_internal.h: the schedules that are not a closed form of the step alone
 * (scheduler_plateau.c, scheduler_onecycle.c), for scheduler.c. Not installed, not ABI. */
#ifndef WEFT_SCHEDULER_INTERNAL_H
#define WEFT_SCHEDULER_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "internal.h"
#include "weft/state_dict.h"
#include "weft/options.h"

/* torch.optim.lr_scheduler.ReduceLROnPlateau: its arguments, then its state. */
struct sched_plateau {
    bool mode_max, threshold_abs;
    double factor, threshold, min_lr, eps;
    int64_t patience, cooldown;
    double best;       /* the best metric so far (mode_worse at first: +-inf) */
    double lr;         /* the lr it holds (the base lr until a reduction) */
    int64_t num_bad_epochs, cooldown_counter, last_epoch;
};

/* Reads mode, factor, patience, threshold, threshold_mode, cooldown, min_lr and eps (the
 * errors PyTorch raises, naming the key); lr: the lr it starts from. */
TRAIN_INTERNAL int sched_plateau_read(struct sched_plateau *p, const weft_options *o, double lr);
/* ReduceLROnPlateau.step(metric): updates p->lr. */
TRAIN_INTERNAL void sched_plateau_step(struct sched_plateau *p, double metric);
/* Metadata "scheduler.plateau.*"; import fails naming a missing key. */
TRAIN_INTERNAL int sched_plateau_export(const struct sched_plateau *p, struct weft_metadata *m);
TRAIN_INTERNAL int sched_plateau_import(struct sched_plateau *p, const struct weft_metadata *m);

/* torch.optim.lr_scheduler.OneCycleLR: its phases, from its arguments. */
struct sched_onecycle {
    double initial_lr, max_lr, min_lr, base_momentum, max_momentum;
    int64_t total_steps;
    bool linear, cycle_momentum;
    int nphases;
    struct {
        double end_step;
        double start_lr, end_lr, start_momentum, end_momentum;
    } phase[3];
};

/* Reads max_lr (default lr: the optimizer's), total_steps or epochs and steps_per_epoch,
 * pct_start, anneal_strategy, div_factor, final_div_factor, three_phase, cycle_momentum,
 * base_momentum and max_momentum (PyTorch's errors; also a phase of no steps, where
 * PyTorch would divide by zero). */
TRAIN_INTERNAL int sched_onecycle_read(struct sched_onecycle *c, const weft_options *o,
                                       double lr);
/* The lr and momentum at step e (0 at creation); false past total_steps (PyTorch's
 * "Tried to step ..." error). */
TRAIN_INTERNAL bool sched_onecycle_at(const struct sched_onecycle *c, int64_t e, double *lr,
                                      double *momentum);

#endif
