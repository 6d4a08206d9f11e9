/* apps/train/weft-train.c: trains the model an INI file describes.
 *
 *   weft-train CONFIG.ini [--set section.key=value ...] [--resume CHECKPOINT]
 *
 * Reads the config, loads the plugins it names, builds the data loaders, the model, the
 * loss, the optimizer and the scheduler, trains for [train] epochs here or for
 * [train] max_iters optimizer steps (train_iters.c), evaluates, and writes checkpoints
 * (safetensors, loadable by PyTorch) and a CSV log with an SVG plot next to it. What both
 * loops share is in train_step.c; checkpoints and --resume in train_checkpoint.c; what is
 * checked before the first step (paths, the model on one sample) in train_check.c.
 * Exit codes: 0 ok, 1 the run failed, 2 what was given cannot work (exit_code_for), 130
 * interrupted (checkpoint saved).
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <weft/dataloader.h>
#include <weft/optim.h>

#include "../app_version.h"
#include "train.h"
#include "train_observe.h"

/* ---- configuration --------------------------------------------------------------------- */

static int read_settings(struct weft_config *cfg, struct train_settings *s)
{
    int64_t seed;
    s->checkpoint = weft_config_string(cfg, "train", "checkpoint", "runs/model.safetensors");
    s->log_path = weft_config_string(cfg, "train", "log", "runs/log.csv");
    s->tensorboard = weft_config_string(cfg, "train", "tensorboard", "");
    if (weft_config_int(cfg, "train", "epochs", 1, &s->epochs) ||
        weft_config_int(cfg, "train", "max_iters", 0, &s->max_iters) ||
        weft_config_int(cfg, "train", "eval_interval", 0, &s->eval_interval) ||
        weft_config_int(cfg, "train", "eval_iters", 0, &s->eval_iters) ||
        weft_config_int(cfg, "train", "log_interval", 10, &s->log_interval) ||
        weft_config_int(cfg, "train", "accumulate", 1, &s->accumulate) ||
        weft_config_double(cfg, "train", "grad_clip", 0, &s->grad_clip) ||
        weft_config_int(cfg, "train", "patience", 0, &s->patience) ||
        weft_config_int(cfg, "train", "checkpoint_interval", 1, &s->checkpoint_interval) ||
        weft_config_double(cfg, "data", "validation_split", 0, &s->validation_split) ||
        weft_config_int(cfg, "runtime", "seed", 0, &seed) ||
        weft_config_bool(cfg, "train", "keep_best", false, &s->keep_best) ||
        weft_config_int(cfg, "train", "log_every", 0, &s->log_every) ||
        weft_config_bool(cfg, "train", "overwrite", false, &s->overwrite) ||
        weft_config_int(cfg, "train", "keep_last", 0, &s->keep_last) ||
        weft_config_int(cfg, "train", "save_every_steps", 0, &s->save_every_steps))
        return weft_error_code();
    s->seed = (uint64_t)seed;
    /* torch.autocast around forward and loss; master weights stay float32 */
    static const char *const precisions[] = {"fp32", "bf16", "f16", NULL};
    static const enum weft_dtype precision_dtypes[] = {WEFT_F32, WEFT_BF16, WEFT_F16};
    int precision;
    if (weft_config_choice(cfg, "train", "precision", precisions, 0, &precision))
        return weft_error_code();
    s->precision = precision_dtypes[precision];
    const char *name = weft_config_name(cfg);
    if (s->epochs < 1)
        return weft_error_set(WEFT_ERR_CONFIG, "%s: [train] epochs = %lld: expected at least 1",
                              name, (long long)s->epochs);
    if (s->accumulate < 1)
        return weft_error_set(WEFT_ERR_CONFIG, "%s: [train] accumulate = %lld: expected at least 1",
                              name, (long long)s->accumulate);
    if (s->max_iters < 0 || s->eval_interval < 0 || s->eval_iters < 0 || s->log_interval < 1)
        return weft_error_set(WEFT_ERR_CONFIG,
                              "%s: [train] max_iters, eval_interval and eval_iters must not be "
                              "negative, log_interval must be at least 1", name);
    /* Iteration mode: checkpoints go with the evaluations unless told otherwise. */
    if (s->max_iters > 0 && !weft_config_has(cfg, "train", "checkpoint_interval"))
        s->checkpoint_interval = s->eval_interval > 0 ? s->eval_interval : s->max_iters;
    if (s->grad_clip < 0 || s->patience < 0 || s->checkpoint_interval < 0)
        return weft_error_set(WEFT_ERR_CONFIG,
                              "%s: [train] grad_clip, patience and checkpoint_interval must not be "
                              "negative", name);
    if (s->validation_split < 0 || s->validation_split >= 1)
        return weft_error_set(WEFT_ERR_CONFIG,
                              "%s: [data] validation_split = %g: expected a fraction in [0, 1)",
                              name, s->validation_split);
    if (s->log_every < 0)
        return weft_error_set(WEFT_ERR_CONFIG, "%s: [train] log_every = %lld: expected 0 (off) or "
                                               "a number of steps", name, (long long)s->log_every);
    if (s->keep_last < 0 || s->save_every_steps < 0)
        return weft_error_set(WEFT_ERR_CONFIG, "%s: [train] keep_last = %lld, save_every_steps = "
                                               "%lld: expected 0 (off) or a count",
                              name, (long long)s->keep_last, (long long)s->save_every_steps);
    /* With max_iters, checkpoint_interval counts steps already: the same setting. */
    if (s->max_iters > 0 && s->save_every_steps > 0) {
        if (weft_config_has(cfg, "train", "checkpoint_interval") &&
            s->checkpoint_interval != s->save_every_steps)
            return weft_error_set(WEFT_ERR_CONFIG, "%s: [train] save_every_steps = %lld and "
                                                   "checkpoint_interval = %lld: with max_iters "
                                                   "they are the same setting; keep one",
                                  name, (long long)s->save_every_steps,
                                  (long long)s->checkpoint_interval);
        s->checkpoint_interval = s->save_every_steps;
    }
    /* Iteration mode prints every log_interval steps already: log_every is the same. */
    if (s->max_iters > 0 && s->log_every > 0) {
        if (weft_config_has(cfg, "train", "log_interval") && s->log_interval != s->log_every)
            return weft_error_set(WEFT_ERR_CONFIG, "%s: [train] log_every = %lld and log_interval "
                                                   "= %lld: with max_iters they are the same "
                                                   "setting; keep one",
                                  name, (long long)s->log_every, (long long)s->log_interval);
        s->log_interval = s->log_every;
    }
    return 0;
}

/* Splits the training set: a fixed permutation (seeded by [runtime] seed) whose last
 * fraction is held out for validation. */
static int split_validation(struct trainer *t)
{
    int64_t n = weft_dataset_length(t->train_all);
    int64_t nval = (int64_t)floor((double)n * t->s.validation_split);
    if (nval == 0 || t->val_set) {
        t->train_set = t->train_all;
        return 0;
    }
    int64_t *perm = malloc((size_t)n * sizeof *perm);
    if (!perm)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of memory splitting the data");
    for (int64_t i = 0; i < n; i++)
        perm[i] = i;
    uint64_t state = t->s.seed * 6364136223846793005ull + 1442695040888963407ull;
    for (int64_t i = n - 1; i > 0; i--) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        int64_t j = (int64_t)((state >> 11) % (uint64_t)(i + 1));
        int64_t tmp = perm[i];
        perm[i] = perm[j];
        perm[j] = tmp;
    }
    t->train_set = weft_dataset_subset(t->train_all, n - nval, perm);
    t->val_set = weft_dataset_subset(t->train_all, nval, perm + (n - nval));
    free(perm);
    return t->train_set && t->val_set ? 0 : weft_error_code();
}

/* [scheduler]. Schedules count optimizer steps in iteration mode; warmup_cosine and
 * onecycle always do (their keys are in steps), and so does plateau's warmup, while the
 * plateau itself is stepped on the validation loss after each evaluation. onecycle's
 * total_steps is the run's when the section gives neither it nor epochs and
 * steps_per_epoch. */
static int create_scheduler(struct trainer *t)
{
    struct weft_config *cfg = t->cfg;
    const char *type = weft_config_string(cfg, "scheduler", "type", "none");
    bool onecycle = strcmp(type, "onecycle") == 0, plateau = strcmp(type, "plateau") == 0;
    if (onecycle && !weft_config_has(cfg, "scheduler", "total_steps") &&
        !weft_config_has(cfg, "scheduler", "epochs") &&
        !weft_config_has(cfg, "scheduler", "steps_per_epoch")) {
        int64_t batches = weft_dataloader_len(t->train_loader);
        int64_t per_epoch = (batches + t->s.accumulate - 1) / t->s.accumulate;
        char total[32];
        snprintf(total, sizeof total, "%lld",
                 (long long)(t->s.max_iters > 0 ? t->s.max_iters : t->s.epochs * per_epoch));
        if (weft_config_put(cfg, "scheduler", "total_steps", total) != 0)
            return weft_error_code();
    }
    if (plateau && !t->val_set)
        return weft_error_set(WEFT_ERR_CONFIG, "%s: [scheduler] type = plateau steps on the "
                                               "validation loss, and there is no validation "
                                               "set: add [data.val] or [data] validation_split",
                              weft_config_name(cfg));
    if (!(t->sched = weft_scheduler_create(t->opt, weft_config_options(cfg, "scheduler"))))
        return weft_error_code();
    t->sched_per_step = t->s.max_iters > 0 || strcmp(type, "warmup_cosine") == 0 || onecycle ||
                        plateau;
    return 0;
}

static int setup(struct trainer *t)
{
    struct weft_config *cfg = t->cfg;
    int rc;
    if ((rc = train_dist_threads(cfg)) != 0 || (rc = weft_runtime_init(cfg, &t->device)) != 0)
        return rc;
    if ((rc = read_settings(cfg, &t->s)) != 0 || (rc = train_dist_setup(t)) != 0)
        return rc;
    t->s.overwrite = t->s.overwrite || t->overwrite_flag;
    if ((rc = train_progress_style(t)) != 0)
        return rc;
    /* An empty section before anything is read: inih would drop it without a word. */
    if ((rc = train_check_sections(cfg)) != 0)
        return rc;
    if (!(t->train_all = train_open_dataset(cfg, "data")) ||
        train_check_samples(cfg, t->train_all) != 0)
        return weft_error_code();
    if (weft_config_has_section(cfg, "data.test") &&
        (!(t->test_set = train_open_dataset(cfg, "data.test")) ||
         train_check_samples(cfg, t->test_set) != 0))
        return weft_error_code();
    if (weft_config_has_section(cfg, "data.val")) {
        if (t->s.validation_split > 0)
            return weft_error_set(WEFT_ERR_CONFIG, "%s: [data] validation_split and a [data.val] "
                                                   "section both give a validation set: keep one",
                                  weft_config_name(cfg));
        if (!(t->val_set = train_open_dataset(cfg, "data.val")))
            return weft_error_code();
        t->own_val = true;
        if ((rc = train_check_samples(cfg, t->val_set)) != 0)
            return rc;
    }
    if ((rc = split_validation(t)) != 0)
        return rc;
    if (t->s.keep_best && !t->val_set)
        return weft_error_set(WEFT_ERR_CONFIG, "%s: [train] keep_best = true keeps the model with "
                                               "the best validation loss, and there is no "
                                               "validation set: add [data.val] or [data] "
                                               "validation_split",
                              weft_config_name(cfg));
    /* eval/predict --data data.NAME: a dataset of the config that training does not read */
    const char *extra = t->data_section;
    if (extra && strcmp(extra, "data") && strcmp(extra, "data.val") && strcmp(extra, "data.test") &&
        weft_config_has_section(cfg, extra) &&
        (!(t->extra_set = train_open_dataset(cfg, extra)) ||
         train_check_samples(cfg, t->extra_set) != 0))
        return weft_error_code();
    if (!(t->model = train_build_model(cfg, &t->inputs)))
        return weft_error_code();
    t->test_inputs = t->inputs;
    t->val_inputs = t->inputs;
    t->extra_inputs = t->inputs;
    t->extra_inputs.optional_target = true; /* predict on unlabelled data */
    if (t->extra_set && (rc = train_inputs_resolve(&t->extra_inputs, t->extra_set, cfg)) != 0)
        return rc;
    if ((rc = train_inputs_resolve(&t->inputs, t->train_all, cfg)) != 0 ||
        (t->test_set && (rc = train_inputs_resolve(&t->test_inputs, t->test_set, cfg)) != 0) ||
        (t->val_set && (rc = train_inputs_resolve(&t->val_inputs, t->val_set, cfg)) != 0))
        return rc;
    if (!(t->train_loader = weft_dataloader_from_config(
              t->train_set, cfg, "data", train_inputs_loader_device(&t->inputs, t->device))))
        return weft_error_code();
    const struct weft_dataloader_options *lo = weft_dataloader_options(t->train_loader);
    if (weft_dataloader_len(t->train_loader) == 0) /* drop_last with too few samples */
        return weft_error_set(WEFT_ERR_CONFIG,
                              "%s: [data] batch_size = %lld with drop_last = true: the %lld "
                              "training samples%s make no full batch, so training would take no "
                              "step: lower batch_size or set drop_last = false",
                              weft_config_name(cfg), (long long)lo->batch_size,
                              (long long)weft_dataset_length(t->train_set),
                              lo->num_replicas > 1 ? " (before the split between processes)" : "");
    if ((rc = train_loss_from_config(cfg, &t->loss)) != 0)
        return rc;
    /* A target of a sequence of token ids per sample under cross-entropy: a language
     * model, whose throughput is in tokens and whose accuracy is not printed. */
    if (!t->inputs.sparse && (t->loss.kind == LOSS_CROSS_ENTROPY || t->loss.kind == LOSS_NLL)) {
        const struct weft_dataset_field *f = weft_dataset_field(t->train_all, t->inputs.target);
        t->sequence = f && f->ndim == 1 && (f->dtype == WEFT_I64 || f->num_classes > 0);
    }
    /* [optim], the section's name in the library's headers before it was [optimizer]
     * everywhere: read, with a warning. */
    if ((rc = weft_config_rename_section(cfg, "optim", "optimizer")) < 0)
        return rc;
    if (rc == 1)
        fprintf(stderr, "weft-train: warning: %s: [optim] is the old name of [optimizer]; "
                        "read as [optimizer] (rename the section)\n",
                weft_config_name(cfg));
    /* an image: [H, W] of bytes or [C, H, W] (throughput in img/s, else samples/s) */
    const struct weft_dataset_field *in = t->inputs.sparse ? NULL
                                          : weft_dataset_field(t->train_all, t->inputs.input);
    t->images = in && !t->sequence && (in->ndim == 3 || (in->ndim == 2 && in->dtype == WEFT_U8));
    const char *opt_type = weft_config_string(cfg, "optimizer", "type", "sgd");
    /* The model on one sample before any step: errors name the layer that does not fit.
     * Before DDP wraps it, so no rank waits on another for it. */
    if ((rc = weft_module_to(t->model, t->device, WEFT_F32)) != 0 ||
        (rc = train_check_model(t)) != 0 || (rc = train_dist_wrap(t)) != 0)
        return rc;
    t->nparams = weft_module_named_parameters(t->model, &t->params);
    if (t->nparams < 0)
        return weft_error_code();
    t->param_tensors = calloc((size_t)(t->nparams ? t->nparams : 1), sizeof *t->param_tensors);
    if (!t->param_tensors)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of memory for the list of %d "
                                                      "parameters", t->nparams);
    /* The optimizer (and gradient clipping) get the trainable parameters alone, as a
     * script's optim.SGD(p for p in model.parameters() if p.requires_grad): a frozen one
     * ([layer.*] requires_grad = false, [train] freeze) has no state to keep or save. */
    int trainable = 0;
    for (int i = 0; i < t->nparams; i++)
        if (weft_requires_grad(t->params[i].tensor))
            t->param_tensors[trainable++] = t->params[i].tensor;
    if (trainable == 0 && t->nparams > 0)
        return weft_error_set(WEFT_ERR_CONFIG, "%s: optimizer got an empty parameter list: "
                                               "every parameter of the model is frozen "
                                               "([train] freeze, [layer.*] requires_grad)",
                              weft_config_name(cfg));
    t->nparams = trainable;
    if (!(t->opt = weft_optimizer_create(opt_type, t->nparams, t->param_tensors,
                                         weft_config_options(cfg, "optimizer"))))
        return weft_error_code();
    /* The device's autocast must take the precision (PyTorch 1.13's AutocastCPU takes
     * bfloat16 only): asked now, so that the key is named before anything runs. */
    if (t->s.precision != WEFT_F32) {
        weft_autocast_state prev = weft_autocast_begin(t->device.type, t->s.precision);
        weft_autocast_end(prev);
        if (weft_error_code() != WEFT_OK)
            return weft_error_prefix("%s: [train] precision = %s on %s", weft_config_name(cfg),
                                     t->s.precision == WEFT_F16 ? "f16" : "bf16",
                                     weft_device_type_name(t->device.type));
    }
    /* float16 needs loss scaling (torch.cuda.amp.GradScaler's defaults); bfloat16 has
     * float32's range and does not. */
    if (t->s.precision == WEFT_F16 && !(t->scaler = weft_grad_scaler_create(NULL)))
        return weft_error_code();
    if (weft_config_has_section(cfg, "scheduler") && (rc = create_scheduler(t)) != 0)
        return rc;
    if ((rc = train_ema_create(t)) != 0) /* reads ema_decay; the average is training's */
        return rc;
    if ((rc = train_observe_setup(t)) != 0)
        return rc;
    /* Everything has read its keys: anything left over is a typo. Then the paths, made
     * and probed only for a config without typos (a misspelt key would probe a default). */
    if ((rc = weft_config_check_unknown(cfg)) != 0)
        return rc;
    if (t->command != CMD_TRAIN)
        return 0;
    /* an earlier run at the paths this one writes: refused before anything is written */
    return train_check_paths(t) != 0 || train_runs_check(t, t->resume_path) != 0
               ? weft_error_code() : 0;
}

/* ---- training and evaluation ------------------------------------------------------------ */

/* Elapsed and estimated seconds left, for the epoch and the run, at this epoch's pace
 * (evaluations aside): b of batches done, skip of them skipped on resume. */
static struct train_times times_at(const struct trainer *t, int64_t epoch, int64_t b,
                                   int64_t batches, int64_t skip, double t0)
{
    double now = train_now();
    double per_batch = b > skip ? (now - t0) / (double)(b - skip) : NAN;
    int64_t left_epoch = batches - b;
    return (struct train_times){
        .epoch_elapsed = now - t0,
        .epoch_eta = per_batch * (double)left_epoch,
        .run_elapsed = now - t->run_t0,
        .run_eta = per_batch * (double)(left_epoch + batches * (t->s.epochs - epoch - 1)),
    };
}

/* [train] log_every: a line (above the progress bar on a TTY) and a steps-log row with
 * the loss since the last one. */
static int log_steps(struct trainer *t, int64_t epoch, int64_t b, int64_t batches,
                     const struct train_times *tm, double *w_loss, int64_t *w_samples,
                     int64_t *w_tokens, double *w_t0)
{
    double now = train_now(), loss = *w_samples ? *w_loss / (double)*w_samples : NAN;
    double per_s = (double)(*w_tokens * t->world) / (now - *w_t0);
    char ee[32], el[32], re[32], rl[32];
    train_progress_clear(t->tty);
    if (!t->quiet_steps) /* progress = none: the steps log alone */
        printf("epoch %lld/%lld  step %lld  batch %lld/%lld  loss %.4f  lr %.4g  %.0f %s  "
               "epoch %s<%s  run %s<%s\n",
               (long long)epoch + 1, (long long)t->s.epochs, (long long)t->step, (long long)b,
               (long long)batches, loss, weft_optimizer_get_lr(t->opt), per_s,
               train_unit(t, false), train_format_duration(tm->epoch_elapsed, ee, sizeof ee),
               train_format_duration(tm->epoch_eta, el, sizeof el),
               train_format_duration(tm->run_elapsed, re, sizeof re),
               train_format_duration(tm->run_eta, rl, sizeof rl));
    fflush(stdout);
    *w_loss = 0;
    *w_samples = *w_tokens = 0;
    *w_t0 = now;
    return train_log_step(t->log, t->step, (int)epoch + 1, b, loss,
                          weft_optimizer_get_lr(t->opt), per_s, now - t->run_t0);
}

/* Trains one epoch; *stopped is set when Ctrl-C arrived (a checkpoint was saved, and *m
 * holds the part of the epoch trained, marked partial). */
static int train_epoch(struct trainer *t, int64_t epoch, struct train_epoch_metrics *m,
                       bool *stopped)
{
    int rc = weft_dataloader_epoch(t->train_loader, epoch);
    int64_t batches = weft_dataloader_len(t->train_loader), b = 0, samples = 0, correct = 0;
    int64_t tokens = 0, skip = t->skip_batches, w_samples = 0, w_tokens = 0;
    double loss_sum = 0, t0 = train_now(), w_loss = 0, w_t0 = t0;
    weft_tensor *fields[WEFT_DATASET_MAX_FIELDS];
    weft_module_train(t->model, true);
    train_observe_peak_reset(t);
    while (rc == 0) {
        int got = train_next_batch(t, fields);
        if (got < 0)
            weft_error_prefix("epoch %lld, reading batch %lld of %lld", (long long)epoch + 1,
                              (long long)b + 1, (long long)batches);
        if (got <= 0) {
            rc = got;
            break;
        }
        if (train_batch_scope(fields, weft_dataloader_num_fields(t->train_loader)) != 0) {
            rc = weft_error_code();
            weft_scope_pop();
            break;
        }
        b++;
        if (b <= t->skip_batches) { /* resuming inside this epoch */
            weft_scope_pop();
            continue;
        }
        struct train_batch_stats st;
        bool step_now = b % t->s.accumulate == 0 || b == batches;
        rc = train_micro_batch(t, fields, step_now, &st);
        if (rc == 0 && step_now)
            rc = train_optimizer_step(t);
        if (rc == 0 && step_now)
            rc = train_observe_step(t, &st, epoch);
        if (rc != 0) /* where it failed, before what failed */
            weft_error_prefix("epoch %lld, batch %lld of %lld", (long long)epoch + 1,
                              (long long)b, (long long)batches);
        if (rc == 0) {
            loss_sum += st.loss * (double)st.samples;
            samples += st.samples;
            tokens += st.tokens;
            correct += st.correct;
            w_loss += st.loss * (double)st.samples;
            w_samples += st.samples;
            w_tokens += st.tokens;
            struct train_times tm = times_at(t, epoch, b, batches, skip, t0);
            if (step_now && t->s.log_every > 0 && t->step % t->s.log_every == 0 && t->rank == 0)
                rc = log_steps(t, epoch, b, batches, &tm, &w_loss, &w_samples, &w_tokens, &w_t0);
            train_progress((int)epoch + 1, (int)t->s.epochs, b, batches, loss_sum / (double)samples,
                           (double)(tokens * t->world) / (train_now() - t0), train_unit(t, false),
                           weft_optimizer_get_lr(t->opt), &tm, t->tty);
        }
        weft_scope_pop();
        int stop = rc == 0 && step_now ? train_dist_should_stop(t) : 0;
        if (stop < 0)
            rc = stop;
        /* [train] save_every_steps: inside the epoch (its end saves anyway) */
        if (rc == 0 && !stop && step_now && b < batches && t->s.save_every_steps > 0 &&
            t->step % t->s.save_every_steps == 0)
            rc = train_save_checkpoint(t, epoch, b);
        if (rc == 0 && stop) {
            train_progress_clear(t->tty);
            rc = train_save_checkpoint(t, epoch, b);
            if (rc == 0) {
                char where[96];
                snprintf(where, sizeof where, "epoch %lld, batch %lld of %lld",
                         (long long)epoch + 1, (long long)b, (long long)batches);
                rc = train_say_interrupted(t, where);
            }
            *stopped = true;
            break;
        }
    }
    m->partial = skip > 0 || *stopped;
    t->skip_batches = 0;
    /* every rank's figures: samples and hits summed, the loss weighed by samples */
    double sums[4] = {loss_sum, (double)samples, (double)tokens, (double)correct};
    if (rc == 0 && (rc = train_dist_sum(t, sums, 4)) == 0) {
        loss_sum = sums[0];
        samples = (int64_t)sums[1];
        tokens = (int64_t)sums[2];
        correct = (int64_t)sums[3];
    }
    m->epoch = (int)epoch + 1;
    m->step = t->step;
    m->train_loss = samples ? loss_sum / (double)samples : NAN;
    m->train_acc = samples && t->loss.classification && !t->sequence
                       ? (double)correct / (double)samples : NAN;
    m->seconds = train_now() - t0;
    m->images_per_s = (double)tokens / m->seconds;
    m->lr = weft_optimizer_get_lr(t->opt);
    m->peak_allocated_bytes = train_observe_peak(t);
    return rc;
}

/* The run's memory high-water marks: the device allocator's peaks of bytes handed to
 * tensors and of bytes it holds, cache included (torch.cuda.max_memory_allocated and
 * max_memory_reserved), and the process's peak resident set. */
static void print_peak_memory(struct trainer *t)
{
    int64_t allocated, reserved;
    struct rusage ru;
    printf("memory:");
    if (train_observe_run_peaks(t, &allocated, &reserved))
        printf(" peak allocated %.1f MiB, reserved %.1f MiB (%s's allocator),",
               (double)allocated / 1048576.0, (double)reserved / 1048576.0,
               weft_device_type_name(t->device.type));
    if (getrusage(RUSAGE_SELF, &ru) == 0) /* ru_maxrss: KiB on Linux */
        printf(" peak resident %.1f MiB", (double)ru.ru_maxrss / 1024.0);
    printf("\n");
}


static void print_test(const struct eval_result *r, const char *which)
{
    printf("test");
    if (!isnan(r->acc))
        printf(" accuracy %.2f%%", 100 * r->acc);
    printf(" loss %.4f (%lld samples)%s%s\n", r->loss, (long long)r->samples, which[0] ? ", " : "",
           which);
}

/* The test set's figures, the memory peaks, the checkpoint's and the log's paths. With keep_best the best
 * model is tested first (Lightning's trainer.test(ckpt_path="best")), then the last; with
 * ema_decay the average too; each line says which model it tested. */
static int finish(struct trainer *t)
{
    struct eval_result last = {NAN, NAN, 0}, best = {0}, ema = {0};
    bool with_best = t->s.keep_best && t->best.have && t->test_set;
    char which[8192] = "", best_file[4096] = "", unit[8];
    snprintf(unit, sizeof unit, "%s", t->s.max_iters > 0 ? "step" : "epoch");
    long long best_at = t->s.max_iters > 0 ? t->best.step : t->best.epoch;
    if (with_best)
        train_best_file(t, best_file, sizeof best_file);
    int rc = with_best && t->best_restored /* early stopping: the model is the best */
                 ? 0 : train_evaluate(t, t->test_set, &t->test_inputs, 0, &last);
    if (rc == 0 && t->ema && t->test_set)
        rc = train_ema_evaluate(t, t->test_set, &t->test_inputs, 0, &ema);
    if (rc == 0 && with_best && !t->best_restored) /* the last model's file is saved */
        rc = train_load_weights(t, best_file, NULL);
    if (rc == 0 && with_best)
        rc = train_evaluate(t, t->test_set, &t->test_inputs, 0, &best);
    if (rc != 0)
        return rc;
    if (with_best) {
        snprintf(which, sizeof which, "the best model (%s %lld, val_loss %.4f: %s)", unit,
                 best_at, t->best.val_loss, best_file);
        print_test(&best, which);
    }
    if (last.samples > 0)
    {
        snprintf(which, sizeof which, "the last model (%s %lld)", unit,
                 (long long)(t->s.max_iters > 0 ? t->step : t->s.epochs));
        print_test(&last, with_best || t->ema ? which : "");
    }
    if (t->ema && ema.samples > 0) {
        char base[4096], path[4096];
        train_checkpoint_base(t->s.checkpoint, base, sizeof base);
        train_ema_path(base, path, sizeof path);
        snprintf(which, sizeof which, "the average of the weights (ema_decay %g: %s)",
                 train_ema_decay(t), t->s.checkpoint_interval > 0 ? path : "not saved");
        print_test(&ema, which);
    }
    print_peak_memory(t);
    printf("checkpoint: %s\n", t->ckpt_path[0] ? t->ckpt_path : "(none)");
    if (t->s.keep_best && t->best.have) {
        char path[4096];
        train_best_file(t, path, sizeof path);
        printf("best: %s (%s %lld, val_loss %.4f)\n", path, unit, best_at, t->best.val_loss);
    }
    if (t->s.log_path && *t->s.log_path)
        printf("log: %s\n", t->s.log_path);
    return 0;
}

static int run_epochs(struct trainer *t)
{
    bool stopped = false;
    for (int64_t epoch = t->start_epoch; epoch < t->s.epochs; epoch++) {
        struct train_epoch_metrics m = {0};
        struct eval_result val;
        int rc = train_epoch(t, epoch, &m, &stopped);
        if (rc == 0 && stopped) { /* the part trained, in the log as a partial row */
            m.val_loss = m.val_acc = m.ema_val_loss = m.ema_val_acc = NAN;
            return train_log_epoch(t->log, &m);
        }
        if (rc != 0)
            return rc;
        if ((rc = train_evaluate(t, t->val_set, &t->val_inputs, t->s.eval_iters, &val)) != 0)
            return rc;
        m.val_loss = val.loss;
        m.val_acc = val.acc;
        struct eval_result ema = {NAN, NAN, 0};
        if (t->ema && (rc = train_ema_evaluate(t, t->val_set, &t->val_inputs, t->s.eval_iters,
                                               &ema)) != 0)
            return rc;
        m.ema_val_loss = ema.loss;
        m.ema_val_acc = ema.acc;
        if (t->sched && !t->sched_per_step && (rc = weft_scheduler_step(t->sched)) != 0)
            return rc;
        if (weft_scheduler_wants_metric(t->sched) &&
            (rc = weft_scheduler_step_metric(t->sched, val.loss)) != 0)
            return rc;
        bool improved;
        if ((rc = train_best_update(t, epoch + 1, val.loss, &improved)) != 0)
            return rc;
        /* the epoch's line takes the progress bar's place: one line per epoch */
        train_progress_clear(t->tty);
        printf("epoch %lld/%lld  loss %.4f", (long long)epoch + 1, (long long)t->s.epochs, m.train_loss);
        if (!isnan(m.train_acc))
            printf("  acc %.2f%%", 100 * m.train_acc);
        if (!isnan(val.loss))
            printf("  val_loss %.4f", val.loss);
        if (!isnan(val.acc))
            printf("  val_acc %.2f%%", 100 * val.acc);
        if (!isnan(ema.loss))
            printf("  ema_val_loss %.4f", ema.loss);
        if (!isnan(ema.acc))
            printf("  ema_val_acc %.2f%%", 100 * ema.acc);
        char elapsed[32], peak[32];
        printf("  lr %.4g  %.0f %s  %.1f s  peak %s  (run %s)%s%s\n", m.lr, m.images_per_s,
               train_unit(t, false), m.seconds,
               train_format_bytes(m.peak_allocated_bytes, peak, sizeof peak),
               train_format_duration(train_now() - t->run_t0, elapsed, sizeof elapsed),
               m.partial ? "  (partial: resumed inside the epoch)" : "",
               improved ? "  best" : "");
        fflush(stdout);
        if ((rc = train_log_epoch(t->log, &m)) != 0)
            return rc;
        bool out_of_patience = train_patience_update(t, val.loss);
        bool last = epoch + 1 == t->s.epochs;
        if (t->s.checkpoint_interval > 0 && ((epoch + 1) % t->s.checkpoint_interval == 0 || last) &&
            (rc = train_save_checkpoint(t, epoch + 1, 0)) != 0)
            return rc;
        if (out_of_patience) {
            printf("early stopping: validation loss has not improved for %lld epochs\n",
                   (long long)t->patience.since);
            if ((rc = train_best_restore(t)) != 0)
                return rc;
            break;
        }
    }
    return finish(t);
}

static int run(struct trainer *t)
{
    int rc = t->s.max_iters > 0 ? train_run_iters(t) : run_epochs(t);
    if (rc != 0 || train_interrupted)
        return rc;
    return t->s.max_iters > 0 ? finish(t) : 0;
}

static void cleanup(struct trainer *t)
{
    train_observe_end(t);
    train_dist_end(t);
    train_ema_free(t);
    weft_scheduler_free(t->sched);
    weft_grad_scaler_free(t->scaler);
    weft_optimizer_free(t->opt);
    free(t->param_tensors);
    free(t->params);
    weft_module_free(t->model);
    weft_dataloader_free(t->train_loader);
    if (t->train_set != t->train_all)
        weft_dataset_close(t->train_set);
    if (t->val_set != t->train_all)
        weft_dataset_close(t->val_set);
    weft_dataset_close(t->test_set);
    weft_dataset_close(t->extra_set);
    weft_dataset_close(t->train_all);
    train_summary_free(&t->summary);
    train_log_close(t->log);
    train_tensorboard_close();
    weft_config_free(t->cfg);
}

/* Prints the pending error; with several processes, ends the job on every rank (a rank
 * that stops would leave the others waiting in a collective). */
static void report_error(struct trainer *t, const char *resume_path)
{
    train_progress_clear(t->tty); /* the progress bar's line */
    if (t->cfg) /* a value --set gave is named as such whenever it fails */
        weft_config_explain_error(t->cfg, -1);
    if (resume_path) /* the first error is kept (weft/error.h): prefix it */
        weft_error_prefix("cannot resume from %s", resume_path);
    train_dist_fail(t, EXIT_TRAINING_ERROR); /* prints "weft: rank R: ..." and ends the job */
    fprintf(stderr, "weft-train: %s\n", weft_error_message());
    if (weft_error_code() == WEFT_ERR_OUT_OF_MEMORY)
        train_observe_oom(t); /* where the memory went: memory_summary, as PyTorch users print */
}

static void usage(FILE *f)
{
    fprintf(f, "usage: weft-train [train] CONFIG.ini [--set section.key=value ...] [--resume CHECKPOINT]\n"
               "                  [--overwrite]\n"
               "       weft-train --version | --help\n"
               "       weft-train eval CONFIG.ini --checkpoint CKPT [--data SECTION] [--set ...]\n"
               "       weft-train predict CONFIG.ini --checkpoint CKPT [--data SECTION] --out FILE.csv|FILE.npy\n"
               "                  [--set ...]\n"
               "       weft-train export CONFIG.ini --checkpoint CKPT --out MODEL.onnx [--opset 17]\n"
               "                  [--batch dynamic|N] [--seq dynamic|N] [--fold-batchnorm] [--external-data]\n"
               "                  [--check N [--atol 1e-4] [--data SECTION]] [--latency N [--ort-threads T]]\n"
               "                  [--set ...]\n"
               "       weft-train quantize CONFIG.ini --checkpoint CKPT --out FILE.int8.safetensors\n"
               "                  [--calib N] [--observer minmax|histogram] [--dynamic] [--per-tensor]\n"
               "Trains the model the config describes; eval prints a checkpoint's loss and accuracy on\n"
               "[data.test] (else the validation set, or --data data|data.val|data.test|data.NAME);\n"
               "predict writes its outputs for every sample; export writes the model as ONNX\n"
               "(docs/export.md); quantize makes an int8 model of it (docs/quantization.md).\n"
               "See docs/config.md.\n");
}

struct args {
    const char *config, *resume, *checkpoint, *data, *out;
    struct train_export_args export;
    const char *calib, *observer; /* quantize */
    bool dynamic, per_tensor;
    bool overwrite; /* a new run replaces an earlier one at its paths */
};

/* The command line: 0 to go on, 1 when --help or --version was answered, -1 on a usage error (said). */
static int parse_args(struct trainer *t, int argc, char **argv, struct args *a)
{
    static const char *const commands[] = {"train", "eval", "predict", "export", "quantize"};
    static const int command_ids[] = {CMD_TRAIN, CMD_EVAL, CMD_PREDICT, CMD_EXPORT, CMD_QUANTIZE};
    int first = 1;
    for (int c = 0; c < 5 && argc > 1; c++)
        if (!strcmp(argv[1], commands[c])) {
            t->command = command_ids[c];
            first = 2;
        }
    static const char *const valued[] = {"--set", "--resume", "--checkpoint", "--data", "--out",
                                         "--calib", "--observer"};
    for (int i = first; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 1;
        }
        if (!strcmp(argv[i], "--version")) {
            app_print_version(stdout, "weft-train");
            return 1;
        }
        if (!strcmp(argv[i], "--dynamic") || !strcmp(argv[i], "--per-tensor")) {
            *(argv[i][2] == 'd' ? &a->dynamic : &a->per_tensor) = true;
            continue;
        }
        if (!strcmp(argv[i], "--overwrite")) {
            a->overwrite = true;
            continue;
        }
        int k = 0;
        while (k < 7 && strcmp(argv[i], valued[k]) != 0)
            k++;
        if (k < 7) {
            if (i + 1 >= argc) {
                fprintf(stderr, "weft-train: %s needs a value\n", argv[i]);
                return -1;
            }
            const char **slot[] = {NULL, &a->resume, &a->checkpoint, &a->data, &a->out,
                                   &a->calib, &a->observer};
            if (slot[k])
                *slot[k] = argv[i + 1];
            i++;
            continue;
        }
        int took = t->command == CMD_EXPORT ? train_export_parse(&a->export, argc, argv, i) : 0;
        if (took < 0)
            return -1;
        if (took > 0) {
            i += took - 1;
            continue;
        }
        if (argv[i][0] == '-' || a->config) {
            fprintf(stderr, "weft-train: unexpected argument '%s'\n", argv[i]);
            usage(stderr);
            return -1;
        }
        a->config = argv[i];
    }
    const char *wrong = NULL;
    if (!a->config)
        wrong = "a config file is needed";
    else if (t->command == CMD_TRAIN && (a->checkpoint || a->data || a->out))
        wrong = "--checkpoint, --data and --out belong to eval, predict and quantize (training "
                "continues from a checkpoint with --resume)";
    else if (t->command != CMD_TRAIN && a->resume)
        wrong = "--resume belongs to training; eval and predict read --checkpoint";
    else if (t->command != CMD_TRAIN && a->overwrite)
        wrong = "--overwrite belongs to training (eval and predict write no run)";
    else if (t->command != CMD_TRAIN && !a->checkpoint)
        wrong = t->command == CMD_EXPORT     ? "export needs --checkpoint CKPT (a model file weft-train saved)"
                : t->command == CMD_QUANTIZE ? "quantize needs --checkpoint CKPT (the float32 model file to quantize)"
                                             : "eval and predict need --checkpoint CKPT (a model file weft-train saved)";
    else if (t->command == CMD_EXPORT && (!a->out || (a->data && !a->export.check)))
        wrong = a->out ? "--data belongs to eval, predict and export's --check N (which then runs "
                         "the section's first N samples); export reads the shape of [data]"
                       : "export needs --out MODEL.onnx";
    else if (t->command == CMD_EVAL && a->out)
        wrong = "--out belongs to predict; eval prints its figures";
    else if (t->command == CMD_PREDICT && !a->out)
        wrong = "predict needs --out FILE.csv or --out FILE.npy";
    else if (t->command == CMD_QUANTIZE && !a->out)
        wrong = "quantize needs --out FILE.int8.safetensors";
    else if (t->command != CMD_QUANTIZE && (a->calib || a->observer || a->dynamic || a->per_tensor))
        wrong = "--calib, --observer, --dynamic and --per-tensor belong to quantize";
    else if (a->dynamic && (a->calib || a->observer))
        wrong = "--calib and --observer belong to static quantization; --dynamic calibrates "
                "nothing (activations are quantized per batch)";
    if (wrong) {
        fprintf(stderr, "weft-train: %s\n", wrong);
        usage(stderr);
        return -1;
    }
    return 0;
}

/* The --set arguments, in order. One that names a [layer.*] section the file does not have
 * is refused: a sequential model's layers are in file order, and a layer added from the
 * command line would have to be put somewhere by guess (appended, it used to train
 * silently as the model's last layer). */
static int apply_sets(struct weft_config *cfg, int argc, char **argv)
{
    for (int i = 1; i + 1 < argc; i++) {
        if (!strcmp(argv[i], "--resume") || !strcmp(argv[i], "--checkpoint") ||
            !strcmp(argv[i], "--data") || !strcmp(argv[i], "--out") ||
            !strcmp(argv[i], "--calib") || !strcmp(argv[i], "--observer")) {
            i++;
            continue;
        }
        if (strcmp(argv[i], "--set") != 0)
            continue;
        const char *a = argv[++i], *eq = strchr(a, '='), *dot = NULL;
        for (const char *p = a; eq && p < eq; p++)
            if (*p == '.')
                dot = p;
        if (!strncmp(a, "layer.", 6) && dot && dot > a + 6) {
            char sec[256];
            snprintf(sec, sizeof sec, "%.*s", (int)(dot - a), a);
            if (!weft_config_has_section(cfg, sec)) {
                char layers[1024] = "";
                size_t n = 0;
                for (const char *const *s = weft_config_sections(cfg); *s && n < sizeof layers; s++)
                    if (!strncmp(*s, "layer.", 6))
                        n += (size_t)snprintf(layers + n, sizeof layers - n, "%s%s", n ? ", " : "",
                                              *s + 6);
                return weft_error_set(WEFT_ERR_CONFIG,
                                      "--set %s: %s has no [%s] section (its layers: %s); --set "
                                      "changes the keys of a layer, it does not add one, whose "
                                      "place in the model would be a guess: add the section to "
                                      "the file where the layer belongs",
                                      a, weft_config_name(cfg), sec, n ? layers : "none");
            }
        }
        if (weft_config_set(cfg, a) != 0)
            return weft_error_code();
    }
    return 0;
}

/* --calib N: a positive count. */
static int quantize_args(const struct args *a, struct train_quantize_args *q)
{
    *q = (struct train_quantize_args){.checkpoint = a->checkpoint, .out = a->out, .data = a->data,
                                      .observer = a->observer, .calib = 512,
                                      .dynamic = a->dynamic, .per_tensor = a->per_tensor};
    char *end = NULL;
    if (a->calib && ((q->calib = strtoll(a->calib, &end, 10)) < 1 || *end))
        return weft_error_set(WEFT_ERR_CONFIG, "--calib %s: expected a number of samples >= 1",
                              a->calib);
    return 0;
}

/* Loads the checkpoint for eval and predict, says which, and runs the command. */
static int run_command(struct trainer *t, const struct args *a)
{
    if (t->command == CMD_QUANTIZE) {
        struct train_quantize_args q;
        return quantize_args(a, &q) != 0 ? weft_error_code() : train_quantize_command(t, &q);
    }
    struct weft_metadata *meta = NULL;
    int rc = train_check_argument_file(a->checkpoint);
    if (rc == 0)
        rc = train_load_weights(t, a->checkpoint, &meta);
    if (rc != 0)
        return rc;
    const char *id = weft_metadata_get(meta, "weft.checkpoint");
    const char *best = weft_metadata_get(meta, "weft.best_epoch");
    if (best)
        printf("checkpoint: %s (the best model: epoch %s, val_loss %s)\n", a->checkpoint, best,
               weft_metadata_get(meta, "weft.best_value"));
    else
        printf("checkpoint: %s%s%s%s\n", a->checkpoint, id ? " (" : "", id ? id : "", id ? ")" : "");
    if (weft_metadata_get(meta, "quant.mode")) /* weft-train quantize's */
        printf("int8 model: %s quantization, weights %s, activations %s\n",
               weft_metadata_get(meta, "quant.mode"), weft_metadata_get(meta, "quant.weights"),
               weft_metadata_get(meta, "quant.activations"));
    weft_metadata_free(meta);
    if (t->command == CMD_EXPORT) {
        struct train_export_args e = a->export;
        e.data = a->data;
        return train_export_command(t, &e, a->out);
    }
    return t->command == CMD_EVAL ? train_eval_command(t, a->data)
                                  : train_predict_command(t, a->data, a->out);
}

/* "resumed from runs/m.safetensors at epoch 3, after batch 120 of 469 (step 1054)" */
static void say_resumed(const struct trainer *t, const char *path)
{
    if (t->s.max_iters > 0)
        printf("resumed from %s at step %lld of %lld\n", path, (long long)t->start_step,
               (long long)t->s.max_iters);
    else if (t->skip_batches > 0)
        printf("resumed from %s at epoch %lld, after batch %lld of %lld (step %lld)\n", path,
               (long long)t->start_epoch + 1, (long long)t->skip_batches,
               (long long)weft_dataloader_len(t->train_loader), (long long)t->start_step);
    else
        printf("resumed from %s at the start of epoch %lld (step %lld)\n", path,
               (long long)t->start_epoch + 1, (long long)t->start_step);
    if (t->best.have)
        printf("best so far: epoch %lld, val_loss %.4f\n", (long long)t->best.epoch,
               t->best.val_loss);
}

/* The one rule (docs/config.md, Exit codes), by the error's nature whenever it comes: 2 for
 * what was given that cannot work (the config, the command line, the files and plugins
 * they name: CONFIG, VALUE, PLUGIN, DEVICE), at setup, at resume or in training alike; 1
 * for a failure of the run itself (out of memory, I/O, a runtime error). */
static int exit_code_for(int code)
{
    return code == WEFT_ERR_CONFIG || code == WEFT_ERR_DEVICE || code == WEFT_ERR_PLUGIN ||
                   code == WEFT_ERR_VALUE
               ? EXIT_BAD_CONFIG
               : EXIT_TRAINING_ERROR;
}

int main(int argc, char **argv)
{
    struct trainer t = {.world = 1, .argc = argc, .argv = argv};
    struct args a = {0};
    int parsed = parse_args(&t, argc, argv, &a);
    if (parsed != 0)
        return parsed > 0 ? EXIT_OK : EXIT_BAD_CONFIG;
    const char *config_path = a.config, *resume_path = a.resume;
    t.data_section = a.data;
    t.resume_path = a.resume;
    t.overwrite_flag = a.overwrite;
    t.cfg = weft_config_load(config_path);
    if (t.cfg)
        apply_sets(t.cfg, argc, argv);
    int rc = t.cfg && weft_error_code() == WEFT_OK ? setup(&t) : weft_error_code();
    /* A typo in a section or key name is the cause of the "missing key" it led to; a value
     * from --set is named as such. */
    if (rc != 0 && t.cfg)
        rc = weft_config_explain_error(t.cfg, rc);
    if (rc != 0) {
        int code = weft_error_code();
        report_error(&t, NULL);
        cleanup(&t);
        return exit_code_for(code);
    }
    if (t.command != CMD_TRAIN) {
        rc = run_command(&t, &a);
        int code = weft_error_code();
        if (rc < 0)
            report_error(&t, NULL);
        cleanup(&t);
        /* export: every failure is the request's (a layer ONNX cannot express, a path that
         * cannot be written, a checkpoint of another model); 1 is a failed --check */
        if (t.command == CMD_EXPORT && rc != 0)
            return rc > 0 ? EXIT_TRAINING_ERROR : EXIT_BAD_CONFIG;
        return rc != 0 ? exit_code_for(code) : EXIT_OK;
    }
    if (resume_path && (train_resume(&t, resume_path) != 0 || train_best_resume(&t) != 0)) {
        int code = weft_error_code();
        report_error(&t, resume_path);
        cleanup(&t);
        return exit_code_for(code);
    }
    if (train_runs_clear(&t, resume_path) != 0) {
        int code = weft_error_code();
        report_error(&t, NULL);
        cleanup(&t);
        return exit_code_for(code);
    }
    if (t.rank == 0 && t.s.log_path && *t.s.log_path &&
        (train_make_parent_dirs(t.s.log_path) != 0 || !(t.log = train_log_open(t.s.log_path, resume_path != NULL, t.s.max_iters > 0,
                                   train_unit(&t, true), t.ema != NULL)))) {
        int code = weft_error_code();
        report_error(&t, NULL);
        cleanup(&t);
        return exit_code_for(code);
    }
    if (t.rank == 0 && train_tensorboard_open(t.s.tensorboard, t.sequence) != 0) {
        int code = weft_error_code();
        report_error(&t, NULL);
        cleanup(&t);
        return exit_code_for(code);
    }
    train_signals_install();
    printf("weft-train: %s on %s%s, %lld parameters, %lld training samples\n", config_path,
           weft_device_str(t.device, (char[32]){0}, 32),
           weft_device_is_emulated(t.device) ? " (emulated)" : "",
           (long long)weft_module_num_parameters(t.model),
           (long long)weft_dataset_length(t.train_set));
    if (t.rank == 0 &&
        train_summary_print(&t.summary, t.model,
                            weft_dataloader_options(t.train_loader)->batch_size,
                            t.summary.input_bytes, stdout) != 0)
        weft_error_clear(); /* the summary is a courtesy: training goes on without it */
    if (t.world > 1)
        printf("data parallel: %d processes (%s), batch_size %lld per process, %d gradient "
               "buckets\n", t.world, weft_dist_backend(),
               (long long)weft_dataloader_options(t.train_loader)->batch_size,
               weft_ddp_num_buckets(t.ddp));
    if (resume_path)
        say_resumed(&t, resume_path);
    fflush(stdout);
    t.run_t0 = train_now();
    rc = run(&t);
    int code = weft_error_code();
    if (rc != 0)
        report_error(&t, NULL);
    int interrupted = train_signals_exit_code();
    cleanup(&t);
    if (rc != 0)
        return exit_code_for(code);
    return interrupted;
}
