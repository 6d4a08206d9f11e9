/* apps/train/weft-train.c: trains the model an INI file describes.
 *
 *   weft-train CONFIG.ini [--set section.key=value ...] [--resume CHECKPOINT]
 *
 * Reads the config, loads the plugins it names, builds the data loaders, the model, the
 * loss, the optimizer and the scheduler, trains, evaluates, and writes checkpoints
 * (safetensors, loadable by PyTorch) and a CSV log with an SVG plot next to it.
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

struct train_settings {
    int64_t epochs;
    int64_t accumulate;
    double grad_clip;
    int64_t patience;
    const char *checkpoint;
    int64_t checkpoint_interval;
    const char *log_path;
    double validation_split;
    uint64_t seed;
};

struct trainer {
    struct weft_config *cfg;
    struct train_settings s;
    weft_device device;
    weft_dataset *train_all, *train_set, *val_set, *test_set;
    weft_dataloader *train_loader;
    weft_module *model;
    struct train_inputs inputs, test_inputs; /* for the training and the test data */
    struct weft_named_tensor *params;
    int nparams;
    weft_tensor **param_tensors;
    weft_optimizer *opt;
    weft_scheduler *sched;
    struct train_loss loss;
    struct train_log *log;
    bool tty;
    int64_t start_epoch, skip_batches;
};

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
    (void)sig;
    interrupted = 1;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* mkdir -p of the directory part of path. */
static int make_parent_dirs(const char *path)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0777) != 0 && errno != EEXIST)
            return weft_error_set(WEFT_ERR_IO, "cannot create directory %s: %s", buf, strerror(errno));
        *p = '/';
    }
    return 0;
}

/* "runs/x/model.safetensors" -> "runs/x/model.train.safetensors" */
static void train_state_path(const char *model_path, char *out, size_t size)
{
    const char *ext = ".safetensors";
    size_t n = strlen(model_path), e = strlen(ext);
    if (n > e && strcmp(model_path + n - e, ext) == 0)
        snprintf(out, size, "%.*s.train%s", (int)(n - e), model_path, ext);
    else
        snprintf(out, size, "%s.train.safetensors", model_path);
}

/* ---- configuration --------------------------------------------------------------------- */

static int read_settings(struct weft_config *cfg, struct train_settings *s)
{
    int64_t seed;
    s->checkpoint = weft_config_string(cfg, "train", "checkpoint", "runs/model.safetensors");
    s->log_path = weft_config_string(cfg, "train", "log", "runs/log.csv");
    if (weft_config_int(cfg, "train", "epochs", 1, &s->epochs) ||
        weft_config_int(cfg, "train", "accumulate", 1, &s->accumulate) ||
        weft_config_double(cfg, "train", "grad_clip", 0, &s->grad_clip) ||
        weft_config_int(cfg, "train", "patience", 0, &s->patience) ||
        weft_config_int(cfg, "train", "checkpoint_interval", 1, &s->checkpoint_interval) ||
        weft_config_double(cfg, "data", "validation_split", 0, &s->validation_split) ||
        weft_config_int(cfg, "runtime", "seed", 0, &seed))
        return weft_error_code();
    s->seed = (uint64_t)seed;
    const char *name = weft_config_name(cfg);
    if (s->epochs < 1)
        return weft_error_set(WEFT_ERR_CONFIG, "%s: [train] epochs = %lld: expected at least 1",
                              name, (long long)s->epochs);
    if (s->accumulate < 1)
        return weft_error_set(WEFT_ERR_CONFIG, "%s: [train] accumulate = %lld: expected at least 1",
                              name, (long long)s->accumulate);
    if (s->grad_clip < 0 || s->patience < 0 || s->checkpoint_interval < 0)
        return weft_error_set(WEFT_ERR_CONFIG,
                              "%s: [train] grad_clip, patience and checkpoint_interval must not be "
                              "negative", name);
    if (s->validation_split < 0 || s->validation_split >= 1)
        return weft_error_set(WEFT_ERR_CONFIG,
                              "%s: [data] validation_split = %g: expected a fraction in [0, 1)",
                              name, s->validation_split);
    return 0;
}

/* Splits the training set: a fixed permutation (seeded by [runtime] seed) whose last
 * fraction is held out for validation. */
static int split_validation(struct trainer *t)
{
    int64_t n = weft_dataset_length(t->train_all);
    int64_t nval = (int64_t)floor((double)n * t->s.validation_split);
    if (nval == 0) {
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
    if ((rc = weft_runtime_init(cfg, &t->device)) != 0)
        return rc;
    if ((rc = read_settings(cfg, &t->s)) != 0)
        return rc;
    if (!(t->train_all = weft_dataset_open(weft_config_options(cfg, "data"))))
        return weft_error_code();
    if (weft_config_has_section(cfg, "data.test") &&
        !(t->test_set = weft_dataset_open(weft_config_options(cfg, "data.test"))))
        return weft_error_code();
    if ((rc = split_validation(t)) != 0)
        return rc;
    if (!(t->model = train_build_model(cfg, &t->inputs)))
        return weft_error_code();
    t->test_inputs = t->inputs;
    if ((rc = train_inputs_resolve(&t->inputs, t->train_all, cfg)) != 0 ||
        (t->test_set && (rc = train_inputs_resolve(&t->test_inputs, t->test_set, cfg)) != 0))
        return rc;
    if (!(t->train_loader = weft_dataloader_from_config(
              t->train_set, cfg, "data", train_inputs_loader_device(&t->inputs, t->device))))
        return weft_error_code();
    if ((rc = train_loss_from_config(cfg, &t->loss)) != 0)
        return rc;
    const char *opt_type = weft_config_string(cfg, "optimizer", "type", "sgd");
    if ((rc = weft_module_to(t->model, t->device, WEFT_F32)) != 0)
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
    if (weft_config_has_section(cfg, "scheduler") &&
        !(t->sched = weft_scheduler_create(t->opt, weft_config_options(cfg, "scheduler"))))
        return weft_error_code();
    /* Everything has read its keys: anything left over is a typo. */
    return weft_config_check_unknown(cfg);
}

/* ---- checkpoints ------------------------------------------------------------------------ */

static int save_checkpoint(struct trainer *t, int64_t next_epoch, int64_t batches_done)
{
    char state_path[4096];
    train_state_path(t->s.checkpoint, state_path, sizeof state_path);
    struct weft_tensor_dict *model = weft_module_state_dict(t->model);
    struct weft_tensor_dict *state = weft_tensor_dict_new();
    struct weft_metadata *meta = weft_metadata_new();
    int rc = model && state && meta ? 0 : weft_error_code();
    if (rc == 0)
        rc = make_parent_dirs(t->s.checkpoint);
    if (rc == 0)
        rc = weft_optimizer_state_export(t->opt, state, meta);
    if (rc == 0 && t->sched)
        rc = weft_scheduler_state_export(t->sched, meta);
    if (rc == 0)
        rc = weft_metadata_set_int(meta, "weft.epoch", next_epoch) ||
             weft_metadata_set_int(meta, "weft.batch", batches_done) ||
             weft_metadata_set_uint(meta, "weft.rng_seed", weft_random_seed()) ||
             weft_metadata_set_uint(meta, "weft.rng_offset", weft_random_offset()) ||
             weft_metadata_set(meta, "weft.config", weft_config_name(t->cfg));
    /* The training state first: a model file is never newer than its state. */
    if (rc == 0)
        rc = weft_safetensors_save(state_path, state, meta);
    if (rc == 0)
        rc = weft_safetensors_save(t->s.checkpoint, model, NULL);
    weft_tensor_dict_free(model);
    weft_tensor_dict_free(state);
    weft_metadata_free(meta);
    return rc;
}

static int resume(struct trainer *t, const char *path)
{
    char state_path[4096];
    train_state_path(path, state_path, sizeof state_path);
    struct weft_tensor_dict *model = NULL, *state = NULL;
    struct weft_metadata *meta = NULL;
    uint64_t seed = 0, offset = 0;
    int rc = weft_safetensors_load(path, t->device, &model, NULL);
    if (rc == 0)
        rc = weft_module_load_state_dict(t->model, model, true);
    if (rc == 0)
        rc = weft_safetensors_load(state_path, t->device, &state, &meta);
    if (rc == 0)
        rc = weft_optimizer_state_import(t->opt, state, meta);
    if (rc == 0 && t->sched)
        rc = weft_scheduler_state_import(t->sched, meta);
    if (rc == 0)
        rc = weft_metadata_get_int(meta, "weft.epoch", &t->start_epoch) ||
             weft_metadata_get_int(meta, "weft.batch", &t->skip_batches) ||
             weft_metadata_get_uint(meta, "weft.rng_seed", &seed) ||
             weft_metadata_get_uint(meta, "weft.rng_offset", &offset);
    if (rc == 0) {
        weft_manual_seed(seed);
        weft_random_set_offset(offset);
    }
    weft_tensor_dict_free(model);
    weft_tensor_dict_free(state);
    weft_metadata_free(meta);
    return rc ? weft_error_code() : 0;
}

/* ---- training and evaluation ------------------------------------------------------------ */

/* Number of rows whose argmax equals the target. */
static int64_t count_correct(weft_tensor *output, weft_tensor *target)
{
    if (output->ndim != 2)
        return 0;
    double v = 0;
    weft_tensor *hits = weft_sum(weft_eq(weft_argmax(output, 1, false), target), 0, NULL, false);
    if (!hits || weft_tensor_item(hits, &v) != 0)
        return -1;
    return (int64_t)v;
}

struct eval_result {
    double loss, acc;
    int64_t samples;
};

static int evaluate(struct trainer *t, weft_dataset *ds, const struct train_inputs *in,
                    struct eval_result *r)
{
    *r = (struct eval_result){NAN, NAN, 0};
    if (!ds)
        return 0;
    struct weft_dataloader_options o = *weft_dataloader_options(t->train_loader);
    o.shuffle = false;
    o.drop_last = false;
    weft_dataloader *dl = weft_dataloader_new(ds, &o);
    if (!dl)
        return weft_error_code();
    weft_module_train(t->model, false);
    bool prev = weft_no_grad_begin();
    double loss_sum = 0;
    int64_t correct = 0, n = 0;
    int rc = weft_dataloader_epoch(dl, 0);
    weft_tensor *fields[WEFT_DATASET_MAX_FIELDS];
    while (rc == 0) {
        int got = weft_dataloader_next(dl, fields);
        if (got <= 0) {
            rc = got < 0 ? got : 0;
            break;
        }
        weft_scope_push();
        for (int f = 0; f < weft_dataloader_num_fields(dl); f++)
            weft_autorelease(fields[f]);
        int64_t batch = fields[0]->shape[0];
        weft_tensor *x = train_batch_input(in, fields, t->device);
        weft_tensor *target = train_batch_target(in, fields, t->device);
        weft_tensor *out = x ? weft_module_forward(t->model, x) : NULL;
        weft_tensor *loss = out && target ? train_loss_compute(&t->loss, out, target) : NULL;
        double lv;
        if (!loss || weft_tensor_item(loss, &lv) != 0) {
            rc = weft_error_code();
        } else {
            loss_sum += lv * (t->loss.ce.reduction == WEFT_REDUCTION_MEAN ? (double)batch : 1.0);
            if (t->loss.classification)
                correct += count_correct(out, target);
            n += batch;
        }
        weft_scope_pop();
    }
    weft_grad_mode_restore(prev);
    weft_dataloader_free(dl);
    if (rc == 0 && n > 0) {
        r->loss = loss_sum / (double)n;
        r->acc = t->loss.classification ? (double)correct / (double)n : NAN;
        r->samples = n;
    }
    return rc;
}

/* One optimizer step: clip, step, zero. */
static int optimizer_step(struct trainer *t)
{
    if (t->s.grad_clip > 0 &&
        weft_clip_grad_norm_(t->nparams, t->param_tensors, t->s.grad_clip, 2.0, NULL) != 0)
        return weft_error_code();
    if (weft_optimizer_step(t->opt) != 0)
        return weft_error_code();
    return weft_optimizer_zero_grad(t->opt, true);
}

/* Trains one epoch; *stopped is set when Ctrl-C arrived (a checkpoint was saved). */
static int train_epoch(struct trainer *t, int64_t epoch, struct train_epoch_metrics *m,
                       bool *stopped)
{
    int rc = weft_dataloader_epoch(t->train_loader, epoch);
    int64_t batches = weft_dataloader_len(t->train_loader), b = 0, samples = 0, correct = 0;
    double loss_sum = 0, t0 = now();
    weft_tensor *fields[WEFT_DATASET_MAX_FIELDS];
    weft_module_train(t->model, true);
    while (rc == 0) {
        int got = weft_dataloader_next(t->train_loader, fields);
        if (got <= 0) {
            rc = got;
            break;
        }
        weft_scope_push();
        for (int f = 0; f < weft_dataloader_num_fields(t->train_loader); f++)
            weft_autorelease(fields[f]);
        b++;
        if (b <= t->skip_batches) { /* resuming inside this epoch */
            weft_scope_pop();
            continue;
        }
        int64_t batch = fields[0]->shape[0];
        weft_tensor *x = train_batch_input(&t->inputs, fields, t->device);
        weft_tensor *target = train_batch_target(&t->inputs, fields, t->device);
        weft_tensor *out = x ? weft_module_forward(t->model, x) : NULL;
        weft_tensor *loss = out && target ? train_loss_compute(&t->loss, out, target) : NULL;
        weft_tensor *scaled = t->s.accumulate > 1 ? weft_div_scalar(loss, (double)t->s.accumulate) : loss;
        double lv = 0;
        if (!scaled || weft_backward(scaled, NULL, false) != 0 || weft_tensor_item(loss, &lv) != 0)
            rc = weft_error_code();
        if (rc == 0 && !isfinite(lv))
            rc = weft_error_set(WEFT_ERR_RUNTIME,
                                "the loss became %g at epoch %lld, batch %lld: lower [optimizer] lr "
                                "or set [train] grad_clip", lv, (long long)epoch + 1, (long long)b);
        if (rc == 0 && b % t->s.accumulate == 0)
            rc = optimizer_step(t);
        if (rc == 0) {
            loss_sum += lv * (double)batch;
            samples += batch;
            if (t->loss.classification)
                correct += count_correct(out, target);
            train_progress((int)epoch + 1, (int)t->s.epochs, b, batches, loss_sum / (double)samples,
                           (double)samples / (now() - t0), t->tty);
        }
        weft_scope_pop();
        if (rc == 0 && interrupted && b % t->s.accumulate == 0) {
            if (t->tty)
                fputc('\n', stdout);
            /* Drain the loader's workers before saving: free() joins them. */
            rc = save_checkpoint(t, epoch, b);
            if (rc == 0)
                printf("interrupted at epoch %lld, batch %lld: checkpoint saved to %s\n",
                       (long long)epoch + 1, (long long)b, t->s.checkpoint);
            *stopped = true;
            return rc;
        }
    }
    if (rc == 0 && b % t->s.accumulate != 0)
        rc = optimizer_step(t); /* the remainder of an accumulation */
    t->skip_batches = 0;
    if (t->tty)
        fputc('\n', stdout);
    m->epoch = (int)epoch + 1;
    m->train_loss = samples ? loss_sum / (double)samples : NAN;
    m->train_acc = samples && t->loss.classification ? (double)correct / (double)samples : NAN;
    m->seconds = now() - t0;
    m->images_per_s = (double)samples / m->seconds;
    m->lr = weft_optimizer_get_lr(t->opt);
    return rc;
}

static int run(struct trainer *t)
{
    double best_val = INFINITY;
    int64_t since_best = 0;
    bool stopped = false;
    for (int64_t epoch = t->start_epoch; epoch < t->s.epochs; epoch++) {
        struct train_epoch_metrics m = {0};
        struct eval_result val;
        int rc = train_epoch(t, epoch, &m, &stopped);
        if (rc != 0 || stopped)
            return rc;
        if ((rc = evaluate(t, t->val_set, &t->inputs, &val)) != 0)
            return rc;
        m.val_loss = val.loss;
        m.val_acc = val.acc;
        if (t->sched && (rc = weft_scheduler_step(t->sched)) != 0)
            return rc;
        printf("epoch %lld/%lld  loss %.4f", (long long)epoch + 1, (long long)t->s.epochs, m.train_loss);
        if (!isnan(m.train_acc))
            printf("  acc %.2f%%", 100 * m.train_acc);
        if (!isnan(val.loss))
            printf("  val_loss %.4f", val.loss);
        if (!isnan(val.acc))
            printf("  val_acc %.2f%%", 100 * val.acc);
        printf("  lr %.4g  %.0f img/s  %.1f s\n", m.lr, m.images_per_s, m.seconds);
        fflush(stdout);
        if ((rc = train_log_epoch(t->log, &m)) != 0)
            return rc;
        bool last = epoch + 1 == t->s.epochs;
        if (t->s.checkpoint_interval > 0 && ((epoch + 1) % t->s.checkpoint_interval == 0 || last) &&
            (rc = save_checkpoint(t, epoch + 1, 0)) != 0)
            return rc;
        if (t->s.patience > 0 && !isnan(val.loss)) {
            since_best = val.loss < best_val ? 0 : since_best + 1;
            best_val = fmin(best_val, val.loss);
            if (since_best >= t->s.patience) {
                printf("early stopping: validation loss has not improved for %lld epochs\n",
                       (long long)since_best);
                break;
            }
        }
    }
    struct eval_result test;
    int rc = evaluate(t, t->test_set, &t->test_inputs, &test);
    if (rc != 0)
        return rc;
    if (test.samples > 0) {
        printf("test");
        if (!isnan(test.acc))
            printf(" accuracy %.2f%%", 100 * test.acc);
        printf(" loss %.4f (%lld samples)\n", test.loss, (long long)test.samples);
    }
    printf("checkpoint: %s\n", t->s.checkpoint_interval > 0 ? t->s.checkpoint : "(none)");
    if (t->s.log_path && *t->s.log_path)
        printf("log: %s\n", t->s.log_path);
    return 0;
}

static void cleanup(struct trainer *t)
{
    weft_scheduler_free(t->sched);
    weft_optimizer_free(t->opt);
    free(t->param_tensors);
    free(t->params);
    weft_module_free(t->model);
    weft_dataloader_free(t->train_loader);
    if (t->train_set != t->train_all)
        weft_dataset_close(t->train_set);
    weft_dataset_close(t->val_set);
    weft_dataset_close(t->test_set);
    weft_dataset_close(t->train_all);
    train_log_close(t->log);
    weft_config_free(t->cfg);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: weft-train CONFIG.ini [--set section.key=value ...] [--resume CHECKPOINT]\n"
               "Trains the model the config describes; see docs/config.md.\n");
}

int main(int argc, char **argv)
{
    struct trainer t = {0};
    const char *config_path = NULL, *resume_path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return EXIT_OK;
        }
        if (!strcmp(argv[i], "--set") || !strcmp(argv[i], "--resume")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "weft-train: %s needs a value\n", argv[i]);
                return EXIT_BAD_CONFIG;
            }
            i++;
            if (!strcmp(argv[i - 1], "--resume"))
                resume_path = argv[i];
            continue;
        }
        if (argv[i][0] == '-' || config_path) {
            fprintf(stderr, "weft-train: unexpected argument '%s'\n", argv[i]);
            usage(stderr);
            return EXIT_BAD_CONFIG;
        }
        config_path = argv[i];
    }
    if (!config_path) {
        usage(stderr);
        return EXIT_BAD_CONFIG;
    }
    t.cfg = weft_config_load(config_path);
    for (int i = 1; t.cfg && i < argc; i++)
        if (!strcmp(argv[i], "--set") && weft_config_set(t.cfg, argv[++i]) != 0)
            break;
        else if (!strcmp(argv[i], "--resume"))
            i++;
    int rc = t.cfg && weft_error_code() == WEFT_OK ? setup(&t) : weft_error_code();
    if (rc != 0) {
        int code = weft_error_code();
        fprintf(stderr, "weft-train: %s\n", weft_error_message());
        cleanup(&t);
        return code == WEFT_ERR_CONFIG || code == WEFT_ERR_DEVICE || code == WEFT_ERR_PLUGIN ||
                       code == WEFT_ERR_VALUE
                   ? EXIT_BAD_CONFIG
                   : EXIT_TRAINING_ERROR;
    }
    t.tty = isatty(STDOUT_FILENO);
    if (resume_path && resume(&t, resume_path) != 0) {
        fprintf(stderr, "weft-train: cannot resume from %s: %s\n", resume_path, weft_error_message());
        cleanup(&t);
        return EXIT_TRAINING_ERROR;
    }
    if (t.s.log_path && *t.s.log_path &&
        (make_parent_dirs(t.s.log_path) != 0 || !(t.log = train_log_open(t.s.log_path, resume_path != NULL)))) {
        fprintf(stderr, "weft-train: %s\n", weft_error_message());
        cleanup(&t);
        return EXIT_TRAINING_ERROR;
    }
    struct sigaction sa = {.sa_handler = on_sigint, .sa_flags = SA_RESETHAND};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    printf("weft-train: %s on %s, %lld parameters, %lld training samples\n", config_path,
           weft_device_str(t.device, (char[32]){0}, 32), (long long)weft_module_num_parameters(t.model),
           (long long)weft_dataset_length(t.train_set));
    fflush(stdout);
    rc = run(&t);
    if (rc != 0)
        fprintf(stderr, "weft-train: %s\n", weft_error_message());
    bool was_interrupted = interrupted;
    cleanup(&t);
    if (rc != 0)
        return EXIT_TRAINING_ERROR;
    return was_interrupted ? EXIT_INTERRUPTED : EXIT_OK;
}
