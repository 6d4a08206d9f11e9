/* apps/train/train_iters.c: training counted in optimizer steps ([train] max_iters), as
 * nanoGPT's loop: each step takes `accumulate` micro-batches, rolling over epochs of the
 * loader (a new shuffle each epoch); a progress line every log_interval steps; an
 * evaluation every eval_interval steps and at the end; checkpoints every
 * checkpoint_interval steps. A checkpoint records (epoch, batches read in it, step), so
 * --resume reads the same batches the uninterrupted run would have. */
#include <math.h>
#include <stdio.h>

#include "train.h"
#include "train_observe.h"

/* Losses and throughput since the last progress line or evaluation. */
struct window {
    double loss_sum;
    int64_t micro, tokens, step0;
    double t0;
};

static void window_reset(struct window *w, int64_t step)
{
    *w = (struct window){0, 0, 0, step, train_now()};
}

static void window_add(struct window *w, const struct train_batch_stats *b)
{
    w->loss_sum += b->loss;
    w->micro++;
    w->tokens += b->tokens;
}

/* The window over every rank: losses and tokens summed (a collective: every rank calls
 * it at the same steps). */
static int window_global(const struct trainer *t, struct window *w)
{
    double v[3] = {w->loss_sum, (double)w->micro, (double)w->tokens};
    int rc = train_dist_sum(t, v, 3);
    w->loss_sum = v[0];
    w->micro = (int64_t)v[1];
    w->tokens = (int64_t)v[2];
    return rc;
}

/* "step 100/3000  loss 2.4312  lr 9.98e-04  24512 tok/s  31.3 ms/step  elapsed 3s  ETA 1m31s" */
static int progress_line(const struct trainer *t, struct window w_local, double run_seconds,
                         int64_t run_steps)
{
    struct window all = w_local, *w = &all;
    int rc = window_global(t, w);
    if (rc != 0)
        return rc;
    double dt = train_now() - w->t0;
    int64_t steps = t->step - w->step0;
    char eta[32], elapsed[32];
    double per_step = run_steps > 0 ? run_seconds / (double)run_steps : NAN;
    if (t->s.log_every > 0 &&
        (rc = train_log_step(t->log, t->step, 0, 0, w->micro ? w->loss_sum / (double)w->micro : NAN,
                             weft_optimizer_get_lr(t->opt), (double)w->tokens / dt,
                             run_seconds)) != 0)
        return rc;
    if (!t->quiet_steps)
        printf("step %lld/%lld  loss %.4f  lr %.3e  %.0f %s  %.1f ms/step  elapsed %s  ETA %s\n",
               (long long)t->step, (long long)t->s.max_iters,
               w->micro ? w->loss_sum / (double)w->micro : NAN, weft_optimizer_get_lr(t->opt),
               (double)w->tokens / dt, train_unit(t, false),
               steps > 0 ? 1e3 * dt / (double)steps : NAN,
               train_format_duration(train_now() - t->run_t0, elapsed, sizeof elapsed),
               train_format_duration(per_step * (double)(t->s.max_iters - t->step), eta,
                                     sizeof eta));
    fflush(stdout);
    return 0;
}

/* Evaluates, prints and logs; *stop when patience ran out. */
static int evaluation(struct trainer *t, int64_t epoch, struct window w_local, double run_seconds,
                      bool *stop)
{
    double t0 = train_now();
    struct eval_result val;
    struct window all = w_local, *w = &all;
    int rc = window_global(t, w);
    if (rc == 0)
        rc = train_evaluate(t, t->val_set, &t->val_inputs, t->s.eval_iters, &val);
    if (rc != 0)
        return rc;
    struct train_epoch_metrics m = {
        .epoch = (int)epoch + 1,
        .step = t->step,
        .train_loss = w->micro ? w->loss_sum / (double)w->micro : NAN,
        .train_acc = NAN,
        .val_loss = val.loss,
        .val_acc = val.acc,
        .lr = weft_optimizer_get_lr(t->opt),
        .images_per_s = (double)w->tokens / (t0 - w->t0),
        .seconds = run_seconds,
        .peak_allocated_bytes = train_observe_peak(t),
    };
    train_observe_peak_reset(t);
    struct eval_result ema = {NAN, NAN, 0};
    if (t->ema && (rc = train_ema_evaluate(t, t->val_set, &t->val_inputs, t->s.eval_iters,
                                           &ema)) != 0)
        return rc;
    m.ema_val_loss = ema.loss;
    m.ema_val_acc = ema.acc;
    bool improved;
    if ((rc = train_best_update(t, epoch + 1, val.loss, &improved)) != 0)
        return rc;
    if (weft_scheduler_wants_metric(t->sched) && /* [scheduler] type = plateau */
        (rc = weft_scheduler_step_metric(t->sched, val.loss)) != 0)
        return rc;
    printf("step %lld: train loss %.4f", (long long)t->step, m.train_loss);
    if (!isnan(val.loss))
        printf(", val loss %.4f", val.loss);
    if (!isnan(val.acc))
        printf(", val acc %.2f%%", 100 * val.acc);
    if (!isnan(ema.loss))
        printf(", ema val loss %.4f", ema.loss);
    if (val.samples > 0)
        printf(" (%lld samples, %.1f s)", (long long)val.samples, train_now() - t0);
    printf("%s\n", improved ? "  best" : "");
    fflush(stdout);
    if ((rc = train_log_epoch(t->log, &m)) != 0)
        return rc;
    if (train_patience_update(t, val.loss)) {
        printf("early stopping: validation loss has not improved for %lld evaluations\n",
               (long long)t->patience.since);
        *stop = true;
        return train_best_restore(t);
    }
    return 0;
}

static bool every(int64_t step, int64_t interval)
{
    return interval > 0 && step % interval == 0;
}

int train_run_iters(struct trainer *t)
{
    const struct train_settings *s = &t->s;
    int64_t epoch = t->start_epoch, skip = t->skip_batches, b = 0, micro = 0;
    int64_t run_step0 = t->step;
    double outside = 0; /* seconds spent evaluating and saving */
    double run_t0 = train_now();
    bool open = false, stop = false;
    struct window logw, evalw;
    window_reset(&logw, t->step);
    window_reset(&evalw, t->step);
    weft_tensor *fields[WEFT_DATASET_MAX_FIELDS];
    weft_module_train(t->model, true);
    int rc = 0;
    while (rc == 0 && !stop && t->step < s->max_iters) {
        if (!open) {
            if ((rc = weft_dataloader_epoch(t->train_loader, epoch)) != 0)
                break;
            open = true;
            b = 0;
        }
        int got = train_next_batch(t, fields);
        if (got < 0) {
            rc = weft_error_prefix("step %lld (epoch %lld), reading batch %lld",
                                   (long long)t->step + 1, (long long)epoch + 1, (long long)b + 1);
            break;
        }
        if (got == 0) { /* the epoch is over: the next one, shuffled anew */
            if (b == 0)
                return weft_error_set(WEFT_ERR_CONFIG, "%s: the training data gives no batch "
                                                       "(drop_last with fewer samples than "
                                                       "batch_size?)",
                                      weft_config_name(t->cfg));
            epoch++;
            skip = 0;
            open = false;
            continue;
        }
        if (train_batch_scope(fields, weft_dataloader_num_fields(t->train_loader)) != 0) {
            rc = weft_error_code();
            weft_scope_pop();
            break;
        }
        b++;
        if (b <= skip) { /* resuming: these batches were trained on before */
            weft_scope_pop();
            continue;
        }
        struct train_batch_stats st;
        bool stepped = false;
        rc = train_micro_batch(t, fields, micro + 1 == s->accumulate, &st);
        if (rc == 0 && ++micro == s->accumulate) {
            micro = 0;
            rc = train_optimizer_step(t);
            if (rc == 0)
                rc = train_observe_step(t, &st, epoch);
            stepped = rc == 0;
        }
        weft_scope_pop();
        if (rc != 0) { /* where it failed, before what failed */
            weft_error_prefix("step %lld (epoch %lld, batch %lld)", (long long)t->step + 1,
                              (long long)epoch + 1, (long long)b);
            break;
        }
        window_add(&logw, &st);
        window_add(&evalw, &st);
        if (!stepped)
            continue;
        bool last = t->step == s->max_iters;
        double run_seconds = train_now() - run_t0 - outside;
        if (every(t->step, s->log_interval) || last) {
            rc = progress_line(t, logw, run_seconds, t->step - run_step0);
            window_reset(&logw, t->step);
        }
        double t_out = train_now();
        bool evaluated = every(t->step, s->eval_interval) || last;
        if (rc == 0 && evaluated) {
            rc = evaluation(t, epoch, evalw, train_now() - run_t0, &stop);
            weft_module_train(t->model, true);
            window_reset(&evalw, t->step);
        }
        bool save = every(t->step, s->checkpoint_interval) || (last && s->checkpoint_interval > 0);
        int interrupted = rc == 0 ? train_dist_should_stop(t) : 0;
        if (interrupted < 0)
            rc = interrupted;
        if (rc == 0 && (save || interrupted))
            rc = train_save_checkpoint(t, epoch, b);
        if (rc == 0 && interrupted) {
            char where[64];
            snprintf(where, sizeof where, "step %lld", (long long)t->step);
            return train_say_interrupted(t, where);
        }
        /* Evaluations and checkpoints do not count in the pace of training. */
        double spent = train_now() - t_out;
        outside += spent;
        logw.t0 += spent;
        if (!evaluated)
            evalw.t0 += spent;
    }
    return rc;
}
