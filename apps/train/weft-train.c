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
 * Exit codes: 0 ok, 1 training error, 2 bad config, 130 interrupted (checkpoint saved).
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <weft/dataloader.h>
#include <weft/optim.h>

#include "train.h"

static void on_sigint(int sig)
{
    (void)sig;
    train_interrupted = 1;
}

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
        weft_config_int(cfg, "train", "log_every", 0, &s->log_every))
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

static int setup(struct trainer *t)
{
    struct weft_config *cfg = t->cfg;
    int rc;
    if ((rc = train_dist_threads(cfg)) != 0 || (rc = weft_runtime_init(cfg, &t->device)) != 0)
        return rc;
    if ((rc = read_settings(cfg, &t->s)) != 0 || (rc = train_dist_setup(t)) != 0)
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
    if ((rc = train_loss_from_config(cfg, &t->loss)) != 0)
        return rc;
    /* A target of a sequence of token ids per sample under cross-entropy: a language
     * model, whose throughput is in tokens and whose accuracy is not printed. */
    if (!t->inputs.sparse && (t->loss.kind == LOSS_CROSS_ENTROPY || t->loss.kind == LOSS_NLL)) {
        const struct weft_dataset_field *f = weft_dataset_field(t->train_all, t->inputs.target);
        t->sequence = f && f->ndim == 1 && (f->dtype == WEFT_I64 || f->num_classes > 0);
    }
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
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of memory");
    for (int i = 0; i < t->nparams; i++)
        t->param_tensors[i] = t->params[i].tensor;
    if (!(t->opt = weft_optimizer_create(opt_type, t->nparams, t->param_tensors,
                                         weft_config_options(cfg, "optimizer"))))
        return weft_error_code();
    /* float16 needs loss scaling (torch.cuda.amp.GradScaler's defaults); bfloat16 has
     * float32's range and does not. */
    if (t->s.precision == WEFT_F16 && !(t->scaler = weft_grad_scaler_create(NULL)))
        return weft_error_code();
    if (weft_config_has_section(cfg, "scheduler") &&
        !(t->sched = weft_scheduler_create(t->opt, weft_config_options(cfg, "scheduler"))))
        return weft_error_code();
    /* Schedules count optimizer steps in iteration mode; warmup_cosine always does (its
     * keys are in iterations, as nanoGPT's). */
    const char *sched_type = weft_config_string(cfg, "scheduler", "type", "none");
    t->sched_per_step = t->s.max_iters > 0 || strcmp(sched_type, "warmup_cosine") == 0;
    /* Everything has read its keys: anything left over is a typo. Then the paths, made
     * and probed only for a config without typos (a misspelt key would probe a default). */
    if ((rc = weft_config_check_unknown(cfg)) != 0)
        return rc;
    return t->command == CMD_TRAIN ? train_check_paths(t) : 0;
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
    printf("epoch %lld/%lld  step %lld  batch %lld/%lld  loss %.4f  lr %.4g  %.0f %s  "
           "epoch %s<%s  run %s<%s\n",
           (long long)epoch + 1, (long long)t->s.epochs, (long long)t->step, (long long)b,
           (long long)batches, loss, weft_optimizer_get_lr(t->opt), per_s,
           train_rate_unit(t), train_format_duration(tm->epoch_elapsed, ee, sizeof ee),
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
    while (rc == 0) {
        int got = weft_dataloader_next(t->train_loader, fields);
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
                           (double)(tokens * t->world) / (train_now() - t0), train_rate_unit(t),
                           weft_optimizer_get_lr(t->opt), &tm, t->tty);
        }
        weft_scope_pop();
        int stop = rc == 0 && step_now ? train_dist_should_stop(t) : 0;
        if (stop < 0)
            rc = stop;
        if (rc == 0 && stop) {
            train_progress_clear(t->tty);
            rc = train_save_checkpoint(t, epoch, b);
            if (rc == 0 && t->rank == 0) {
                printf("interrupted at epoch %lld, batch %lld of %lld: checkpoint saved to %s\n",
                       (long long)epoch + 1, (long long)b, (long long)batches, t->s.checkpoint);
                train_print_resume_command(t, stdout);
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
    return rc;
}

/* The test set's figures, the checkpoint's and the log's paths. */
static int finish(struct trainer *t)
{
    struct eval_result test;
    int rc = train_evaluate(t, t->test_set, &t->test_inputs, 0, &test);
    if (rc != 0)
        return rc;
    if (test.samples > 0) {
        printf("test");
        if (!isnan(test.acc))
            printf(" accuracy %.2f%%", 100 * test.acc);
        printf(" loss %.4f (%lld samples)\n", test.loss, (long long)test.samples);
    }
    printf("checkpoint: %s\n", t->s.checkpoint_interval > 0 ? t->s.checkpoint : "(none)");
    if (t->s.keep_best && t->best.have) {
        char best[4096];
        train_best_path(t->s.checkpoint, best, sizeof best);
        printf("best: %s (%s %lld, val_loss %.4f)\n", best, t->s.max_iters > 0 ? "step" : "epoch",
               (long long)(t->s.max_iters > 0 ? t->best.step : t->best.epoch), t->best.val_loss);
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
            m.val_loss = m.val_acc = NAN;
            return train_log_epoch(t->log, &m);
        }
        if (rc != 0)
            return rc;
        if ((rc = train_evaluate(t, t->val_set, &t->val_inputs, t->s.eval_iters, &val)) != 0)
            return rc;
        m.val_loss = val.loss;
        m.val_acc = val.acc;
        if (t->sched && !t->sched_per_step && (rc = weft_scheduler_step(t->sched)) != 0)
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
        char elapsed[32];
        printf("  lr %.4g  %.0f %s  %.1f s  (run %s)%s%s\n", m.lr, m.images_per_s,
               train_rate_unit(t), m.seconds,
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
    train_dist_end(t);
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
    if (resume_path) /* the first error is kept (weft/error.h): prefix it */
        weft_error_prefix("cannot resume from %s", resume_path);
    train_dist_fail(t, EXIT_TRAINING_ERROR); /* prints "weft: rank R: ..." and ends the job */
    fprintf(stderr, "weft-train: %s\n", weft_error_message());
}

static void usage(FILE *f)
{
    fprintf(f, "usage: weft-train [train] CONFIG.ini [--set section.key=value ...] [--resume CHECKPOINT]\n"
               "       weft-train eval CONFIG.ini --checkpoint CKPT [--data SECTION] [--set ...]\n"
               "       weft-train predict CONFIG.ini --checkpoint CKPT [--data SECTION] --out FILE.csv|FILE.npy\n"
               "                  [--set ...]\n"
               "Trains the model the config describes; eval prints a checkpoint's loss and accuracy on\n"
               "[data.test] (else the validation set, or --data data|data.val|data.test|data.NAME);\n"
               "predict writes its outputs for every sample. See docs/config.md.\n");
}

struct args {
    const char *config, *resume, *checkpoint, *data, *out;
};

/* The command line: 0 to go on, 1 when --help was answered, -1 on a usage error (said). */
static int parse_args(struct trainer *t, int argc, char **argv, struct args *a)
{
    static const char *const commands[] = {"train", "eval", "predict"};
    int first = 1;
    for (int c = 0; c < 3 && argc > 1; c++)
        if (!strcmp(argv[1], commands[c])) {
            t->command = c == 0 ? CMD_TRAIN : c == 1 ? CMD_EVAL : CMD_PREDICT;
            first = 2;
        }
    static const char *const valued[] = {"--set", "--resume", "--checkpoint", "--data", "--out"};
    for (int i = first; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 1;
        }
        int k = 0;
        while (k < 5 && strcmp(argv[i], valued[k]) != 0)
            k++;
        if (k < 5) {
            if (i + 1 >= argc) {
                fprintf(stderr, "weft-train: %s needs a value\n", argv[i]);
                return -1;
            }
            const char **slot[] = {NULL, &a->resume, &a->checkpoint, &a->data, &a->out};
            if (slot[k])
                *slot[k] = argv[i + 1];
            i++;
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
        wrong = "--checkpoint, --data and --out belong to eval and predict (training continues "
                "from a checkpoint with --resume)";
    else if (t->command != CMD_TRAIN && a->resume)
        wrong = "--resume belongs to training; eval and predict read --checkpoint";
    else if (t->command != CMD_TRAIN && !a->checkpoint)
        wrong = "eval and predict need --checkpoint CKPT (a model file weft-train saved)";
    else if (t->command == CMD_EVAL && a->out)
        wrong = "--out belongs to predict; eval prints its figures";
    else if (t->command == CMD_PREDICT && !a->out)
        wrong = "predict needs --out FILE.csv or --out FILE.npy";
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
            !strcmp(argv[i], "--data") || !strcmp(argv[i], "--out")) {
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

/* Loads the checkpoint for eval and predict, says which, and runs the command. */
static int run_command(struct trainer *t, const struct args *a)
{
    struct weft_metadata *meta = NULL;
    int rc = train_load_weights(t, a->checkpoint, &meta);
    if (rc != 0)
        return rc;
    const char *id = weft_metadata_get(meta, "weft.checkpoint");
    const char *best = weft_metadata_get(meta, "weft.best_epoch");
    if (best)
        printf("checkpoint: %s (the best model: epoch %s, val_loss %s)\n", a->checkpoint, best,
               weft_metadata_get(meta, "weft.best_value"));
    else
        printf("checkpoint: %s%s%s%s\n", a->checkpoint, id ? " (" : "", id ? id : "", id ? ")" : "");
    weft_metadata_free(meta);
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
    t.tty = isatty(STDOUT_FILENO);
    if (t.command != CMD_TRAIN) {
        rc = run_command(&t, &a);
        int code = weft_error_code();
        if (rc != 0)
            report_error(&t, NULL);
        cleanup(&t);
        return rc != 0 ? exit_code_for(code) : EXIT_OK;
    }
    if (resume_path && (train_resume(&t, resume_path) != 0 || train_best_resume(&t) != 0)) {
        report_error(&t, resume_path);
        cleanup(&t);
        return EXIT_TRAINING_ERROR;
    }
    if (t.rank == 0 && t.s.log_path && *t.s.log_path &&
        (train_make_parent_dirs(t.s.log_path) != 0 || !(t.log = train_log_open(t.s.log_path, resume_path != NULL, t.s.max_iters > 0,
                                   t.sequence)))) {
        report_error(&t, NULL);
        cleanup(&t);
        return EXIT_TRAINING_ERROR;
    }
    if (t.rank == 0 && train_tensorboard_open(t.s.tensorboard, t.sequence) != 0) {
        report_error(&t, NULL);
        cleanup(&t);
        return EXIT_TRAINING_ERROR;
    }
    struct sigaction sa = {.sa_handler = on_sigint, .sa_flags = SA_RESETHAND};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
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
    if (rc != 0)
        report_error(&t, NULL);
    bool was_interrupted = train_interrupted;
    cleanup(&t);
    if (rc != 0)
        return EXIT_TRAINING_ERROR;
    return was_interrupted ? EXIT_INTERRUPTED : EXIT_OK;
}
