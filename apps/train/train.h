/* apps/train/train.h: the pieces of weft-train. */
#ifndef WEFT_APP_TRAIN_H
#define WEFT_APP_TRAIN_H

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>

#include <weft.h>
#include <weft/backend.h>
#include <weft/sparse.h>
#include <weft/train.h>
#include <weft/checkpoint.h>
#include <weft/dataloader.h>
#include <weft/ddp.h>
#include <weft/dist.h>
#include <weft/dataset.h>
#include <weft/nn.h>
#include <weft/optim.h>

/* Exit codes (docs/config.md). */
enum { EXIT_OK = 0, EXIT_TRAINING_ERROR = 1, EXIT_BAD_CONFIG = 2, EXIT_INTERRUPTED = 130 };

/* How a batch becomes the model's input and the loss's target. A model whose first layer
 * is sparse_linear takes a CSR matrix [batch, in_features] built from two padded fields
 * of the batch (the mtx and libsvm readers hand out "indices", padded with -1, and
 * "values"); any other model takes field 0. The target is the field called "label",
 * else field 1. */
struct train_inputs {
    bool sparse;
    char layer[64];                          /* the sparse_linear section, for messages */
    char indices_name[WEFT_DATASET_NAME_MAX]; /* its `indices` and `values` keys */
    char values_name[WEFT_DATASET_NAME_MAX];
    int64_t in_features;
    int input, indices, values, target;      /* field numbers, set by train_inputs_resolve */
    bool optional_target; /* predict on unlabelled data: no target is target = -1 */
    const weft_module *model; /* floating input is cast to its parameters' dtype */
};

/* Builds the model from [model] and the [layer.*] sections in file order, and fills
 * *inputs (resolved later against a dataset). NULL with an error naming the section and
 * key on a bad config. */
weft_module *train_build_model(struct weft_config *cfg, struct train_inputs *inputs);
/* Finds in ds the fields that *in names and checks their dtypes and shapes; errors
 * (WEFT_ERR_CONFIG) name the config file, the layer and the dataset's section. */
int train_inputs_resolve(struct train_inputs *in, const weft_dataset *ds,
                         const struct weft_config *cfg);
/* The data loader's device: the cpu for a sparse input (the CSR matrix is built on the
 * host and then moved), else dev. */
weft_device train_inputs_loader_device(const struct train_inputs *in, weft_device dev);
/* The model's input and the target for a batch, on dev (new references). */
/* Opens a scope and records a batch's fields in it, so they die at the matching pop.
 * -1 with the error when one could not be recorded (it is released and set to NULL);
 * the scope is open either way. */
int train_batch_scope(weft_tensor **fields, int n);

weft_tensor *train_batch_input(const struct train_inputs *in, weft_tensor *const *fields,
                               weft_device dev);
weft_tensor *train_batch_target(const struct train_inputs *in, weft_tensor *const *fields,
                                weft_device dev);

/* The loss named by [loss] type: returns a new reference to the scalar loss. */
struct train_loss {
    enum { LOSS_CROSS_ENTROPY, LOSS_NLL, LOSS_MSE, LOSS_L1, LOSS_BCE_WITH_LOGITS } kind;
    struct weft_cross_entropy_params ce;
    bool classification; /* accuracy is meaningful */
};
int train_loss_from_config(struct weft_config *cfg, struct train_loss *loss);
/* A language model's output [B, T, V] with an int64 target [B, T] under cross_entropy or
 * nll: the loss is over all B*T positions (nanoGPT's
 * F.cross_entropy(logits.view(-1, V), y.view(-1))). */
bool train_loss_is_sequence(const struct train_loss *loss, const weft_tensor *output,
                            const weft_tensor *target);
weft_tensor *train_loss_compute(const struct train_loss *loss, weft_tensor *output,
                                weft_tensor *target);

struct trainer;

/* Metrics per epoch (epoch mode) or per evaluation (iteration mode), written to the CSV
 * log and the SVG plot. */
struct train_epoch_metrics {
    int epoch;
    int64_t step;              /* optimizer steps so far */
    double train_loss, train_acc;
    double val_loss, val_acc;  /* NAN when there is no validation set */
    double lr;
    double images_per_s;       /* samples/s, or tokens/s for a language model */
    double ema_val_loss, ema_val_acc; /* the EMA model's ([train] ema_decay), else NAN */
    double seconds;
    bool partial;              /* the row covers part of the epoch (interrupted, or resumed
                                * inside it): the CSV's `partial` column */
    int64_t peak_allocated_bytes; /* the device allocator's peak over the epoch (or the
                                   * evaluation's window): train_observe.c */
};

struct train_log;
/* Opens the CSV log at path (NULL: no log); the plot goes next to it (.svg). by_step:
 * rows per evaluation against the step (iteration mode), else per epoch; per_s: the
 * throughput's column (train_unit); ema: the EMA model's validation columns too. A log
 * appended to keeps its own header, and is never rewritten. */
struct train_log *train_log_open(const char *path, bool append, bool by_step, const char *per_s,
                                 bool ema);
int train_log_epoch(struct train_log *log, const struct train_epoch_metrics *m);
/* [train] log_every: one row of the steps log ("<log>.steps.csv": step, epoch, batch, loss
 * since the last row, lr, throughput, seconds); opened on first use. */
int train_log_step(struct train_log *log, int64_t step, int epoch, int64_t batch, double loss,
                   double lr, double per_s, double seconds);
void train_log_close(struct train_log *log);
/* [train] tensorboard = DIR (train_tensorboard.c): the log's scalars as TensorBoard event
 * files too; train_log_epoch and train_log_step feed it once it is open (rank 0). tokens:
 * the throughput is tokens/s. 0 or negative with the key named. */
int train_tensorboard_open(const char *dir, bool tokens);
int train_tensorboard_epoch(const struct train_epoch_metrics *m);
int train_tensorboard_step(int64_t step, double loss, double lr, double per_s);
void train_tensorboard_close(void);

/* Where a run stands, for the progress line: seconds since the epoch and the run began
 * and the estimated seconds left in each. */
struct train_times {
    double epoch_elapsed, epoch_eta, run_elapsed, run_eta;
};
/* A one-line progress bar on a TTY (nothing otherwise): "epoch 2/5 [###...] 120/469
 * loss 0.3120  5210 img/s  lr 0.01  epoch 12s<31s  run 1m02s<2m40s". */
void train_progress(int epoch, int epochs, int64_t batch, int64_t batches, double loss,
                    double per_s, const char *unit, double lr, const struct train_times *tm,
                    bool tty);
/* [train] progress: auto (the bar where the output, mpirun's under Open MPI, is a
 * terminal; lines elsewhere), bar, lines, none; sets t->tty and t->quiet_steps. */
int train_progress_style(struct trainer *t);
/* Erases the progress bar's line on a TTY, so the epoch's line replaces it. */
void train_progress_clear(bool tty);
/* "1h02m", "3m05s", "12s" into buf. */
const char *train_format_duration(double seconds, char *buf, size_t size);
/* "1.5 MiB" */
const char *train_format_bytes(int64_t bytes, char *buf, size_t size);

/* ---- the run ------------------------------------------------------------------------- */

struct train_settings {
    int64_t epochs;
    int64_t max_iters;     /* > 0: iteration mode (optimizer steps) */
    int64_t eval_interval; /* steps between evaluations (0: only at the end) */
    int64_t eval_iters;    /* validation batches per evaluation (0: all) */
    int64_t log_interval;  /* steps between progress lines */
    int64_t accumulate;
    double grad_clip;
    int64_t patience;
    const char *checkpoint;
    int64_t checkpoint_interval;
    const char *log_path;
    double validation_split;
    uint64_t seed;
    enum weft_dtype precision; /* [train] precision: F32, or autocast's BF16 / F16 */
    bool keep_best;        /* [train] keep_best: <checkpoint stem>.best.safetensors */
    int64_t log_every;     /* [train] log_every: a line and a steps-log row every N steps */
    const char *tensorboard; /* [train] tensorboard: event files' directory ("" none) */
    bool overwrite;        /* [train] overwrite or --overwrite: replace an earlier run */
    int64_t keep_last;     /* [train] keep_last: the newest K checkpoints of a {epoch} name */
    int64_t save_every_steps; /* [train] save_every_steps: a checkpoint inside epochs too */
};

/* The model summary (train_summary.c), one row per layer of the check on one sample. */
struct train_summary_row {
    char name[64], type[48];
    int ndim;
    int64_t shape[8];
    int64_t params, bytes; /* bytes of the output for one sample */
    char inputs[160];      /* a graph model's layer: the values it reads ("bn2, input") */
};
struct train_summary {
    struct train_summary_row *rows;
    int count, capacity;
    int64_t input_bytes; /* of one sample */
};
int train_summary_add(struct train_summary *s, const char *name, const weft_module *m,
                      const weft_tensor *out);
/* torchinfo's table: layers, totals (trainable or not), sizes in MB for a batch. */
int train_summary_print(const struct train_summary *s, const weft_module *model, int64_t batch,
                        int64_t input_bytes, FILE *f);
void train_summary_free(struct train_summary *s);

/* The best validation loss so far ([train] keep_best, train_best.c). */
struct train_best {
    bool have;
    double val_loss;
    int64_t epoch, step;
};

struct trainer {
    struct weft_config *cfg;
    struct train_settings s;
    weft_device device;
    weft_dataset *train_all, *train_set, *val_set, *test_set;
    bool own_val;          /* val_set came from [data.val] (not a subset of train_all) */
    weft_dataloader *train_loader;
    weft_module *model;
    struct train_inputs inputs, val_inputs, test_inputs;
    struct weft_named_tensor *params;
    int nparams;
    weft_tensor **param_tensors;
    weft_optimizer *opt;
    weft_grad_scaler *scaler; /* precision = f16 (loss scaling), else NULL */
    weft_scheduler *sched;
    bool sched_per_step;   /* stepped after every optimizer step, else per epoch */
    struct train_loss loss;
    bool sequence;         /* the model is a language model (seen on the first batch) */
    bool images;           /* the input is an image (2 or 3 dims), for the throughput's unit */
    struct train_log *log;
    bool tty;              /* draw the progress bar ([train] progress, train_progress_style) */
    bool quiet_steps;      /* progress = none: no log_every / log_interval lines on stdout */
    int64_t start_epoch, skip_batches, start_step;
    int64_t step;          /* optimizer steps taken */
    /* [distributed] (train_dist.c): this process's rank of world; ddp wraps model */
    int rank, world;
    weft_ddp *ddp;
    struct weft_ddp_options ddp_options;
    enum { CMD_TRAIN, CMD_EVAL, CMD_PREDICT, CMD_EXPORT, CMD_QUANTIZE } command;
    const char *data_section;     /* eval/predict --data */
    weft_dataset *extra_set;      /* --data names a [data.*] section training does not read */
    struct train_inputs extra_inputs;
    struct train_summary summary; /* filled by train_check_model */
    int argc;                     /* the command line, for the resume command */
    char **argv;
    struct train_best best;
    /* Early stopping's state, saved in the checkpoint so a resumed run counts on: the best
     * validation loss so far (when seen) and the evaluations since it improved. */
    struct train_patience {
        bool seen;
        double best;
        int64_t since;
    } patience;
    double run_t0;                /* when training began (this process), for the ETA */
    struct train_observe *observe; /* profile, metrics (train_observe.c) */
    /* The run's allocator high-water marks: each interval's peaks (train_observe_peak_reset
     * restarts them for the per-epoch figures) folded in before the restart. */
    int64_t run_peak_allocated, run_peak_reserved;
    char ckpt_path[4096];         /* the checkpoint saved last ([train] checkpoint expanded) */
    const char *resume_path;      /* --resume */
    bool overwrite_flag;          /* --overwrite */
    struct train_ema *ema;        /* [train] ema_decay (train_ema.c), NULL when off */
    bool best_restored;           /* the model holds the best weights (train_best_restore) */
};

/* What one micro-batch gave. */
struct train_batch_stats {
    double loss;       /* the batch's mean loss (unscaled) */
    int64_t samples;   /* B */
    int64_t tokens;    /* B*T for a language model, else B */
    int64_t correct;   /* classification hits (0 for a language model) */
};

/* Forward and backward of one batch; the loss is divided by [train] accumulate, as
 * nanoGPT's loss / gradient_accumulation_steps. sync: the last micro-batch before an
 * optimizer step, whose backward averages the gradients over the ranks (the others
 * accumulate locally, DDP's no_sync). Call inside a scope. */
int train_micro_batch(struct trainer *t, weft_tensor *const *fields, bool sync,
                      struct train_batch_stats *b);
/* The throughput's unit: "tok/s" (a language model), "img/s" (image input), "samples/s",
 * with "on cuda:0 (emulated)" after it when the device is emulated (weft_device_is_emulated:
 * such a rate is no device's); column: its CSV column ("tokens_per_s", ...). */
const char *train_unit(const struct trainer *t, bool column);
/* Clip, step, zero; steps the scheduler when it is per step; t->step += 1. */
int train_optimizer_step(struct trainer *t);

struct eval_result {
    double loss, acc;
    int64_t samples;
};
/* Mean loss (and accuracy) over ds, or its first max_batches batches (0: all). */
int train_evaluate(struct trainer *t, weft_dataset *ds, const struct train_inputs *in,
                   int64_t max_batches, struct eval_result *r);
/* ---- the average of the weights (train_ema.c) --------------------------------------------- */

/* [train] ema_decay: t->ema (NULL when 0), the average starting as the model. */
int train_ema_create(struct trainer *t);
void train_ema_free(struct trainer *t);
double train_ema_decay(const struct trainer *t); /* 0 when off */
/* After each optimizer step: AveragedModel.update_parameters. */
int train_ema_update(struct trainer *t);
/* The average's weights into the model, and the model's own back. */
int train_ema_swap_in(struct trainer *t);
int train_ema_swap_out(struct trainer *t);
/* train_evaluate of the average (swapped in and out). */
int train_ema_evaluate(struct trainer *t, weft_dataset *ds, const struct train_inputs *in,
                       int64_t max_batches, struct eval_result *r);
/* Into a checkpoint's state ("ema.<name>", weft.ema_updates), and back on resume. */
int train_ema_export(const struct trainer *t, struct weft_tensor_dict *state,
                     struct weft_metadata *meta);
int train_ema_import(struct trainer *t, const char *state_path,
                     const struct weft_tensor_dict *state, const struct weft_metadata *meta);
/* "<checkpoint name without fields>.ema.safetensors" with the model's metadata. */
int train_ema_save(const struct trainer *t, const char *checkpoint,
                   const struct weft_metadata *model_meta);

/* ---- checkpoints (train_checkpoint.c) ----------------------------------------------------- */

/* Model file + training state, as one atomic unit (see train_checkpoint.c): resume starts
 * at (epoch, after batches_done batches). Rank 0 alone writes; others return 0. */
int train_save_checkpoint(struct trainer *t, int64_t epoch, int64_t batches_done);
/* Restores the model, the optimizer, scheduler and scaler, the position and the random
 * state from the checkpoint at path. Refuses a model file and a state file of different
 * saves (naming both and which is newer), a [scheduler] other than the one saved, and a
 * run the checkpoint already finished ([train] epochs or max_iters not above it). */
int train_resume(struct trainer *t, const char *path);
/* "runs/x/model.safetensors" -> "runs/x/model.train.safetensors" */
void train_state_path(const char *model_path, char *out, size_t size);
/* "runs/x/model.safetensors" -> "runs/x/model.best.safetensors" */
void train_best_path(const char *model_path, char *out, size_t size);
/* "runs/x/model.safetensors" -> "runs/x/model.ema.safetensors" */
void train_ema_path(const char *model_path, char *out, size_t size);
/* arg as the shell reads it back (as is when plain, else in single quotes) into out;
 * returns its length (cut at size - 1). */
size_t train_shell_word(const char *arg, char *out, size_t size);

/* ---- a run's files (train_runs.c) ---------------------------------------------------------- */

/* Whether [train] checkpoint names its files by {epoch} / {step}. */
bool train_checkpoint_is_template(const char *name);
/* [train] checkpoint with {epoch} and {step} ({step:06d}) replaced; an error names the key
 * for another field. */
int train_checkpoint_expand(const struct trainer *t, int64_t epoch, int64_t step, char *out,
                            size_t size);
/* The name with its fields left out ("runs/m-{epoch}.safetensors" -> "runs/m.safetensors"):
 * what the .best and .ema files are named after. */
void train_checkpoint_base(const char *name, char *out, size_t size);
/* Before a run (rank 0): WEFT_ERR_CONFIG when an earlier run's checkpoint, state, best or
 * EMA model, or a log with rows, is at the paths this run would write (a resumed run: a
 * checkpoint of another run than the one resumed), saying how to continue it, replace it
 * (--overwrite) or keep both; also a keep_last without {epoch}/{step}. */
int train_runs_check(struct trainer *t, const char *resume_path);
/* --overwrite of a new run: removes the earlier run's files (saying how many). */
int train_runs_clear(struct trainer *t, const char *resume_path);
/* [train] keep_last: removes all but the newest K checkpoints (and states) of the name. */
int train_runs_prune(struct trainer *t);
/* Loads model weights (a safetensors state dict) into t->model; *meta (may be NULL) gets
 * the file's metadata. */
int train_load_weights(struct trainer *t, const char *path, struct weft_metadata **meta);

/* ---- the best checkpoint (train_best.c) ---------------------------------------------------- */

/* [train] keep_best: after an evaluation with a validation loss below the best so far,
 * the model goes to the best file (atomically, with weft.best_epoch, weft.best_step,
 * weft.best_metric = "val_loss" and weft.best_value); *improved says whether it did. */
int train_best_update(struct trainer *t, int64_t epoch, double val_loss, bool *improved);
/* The best file's path: <checkpoint name without {epoch}/{step}>.best.safetensors. */
void train_best_file(const struct trainer *t, char *out, size_t size);
/* On resume: the best so far, read from the best file's metadata (none: no best yet). */
int train_best_resume(struct trainer *t);
/* Early stopping with keep_best: the best model's weights back into t->model, saying so. */
int train_best_restore(struct trainer *t);
/* Counts an evaluation's validation loss against [train] patience (NaN is not counted);
 * true when patience has run out. */
bool train_patience_update(struct trainer *t, double val_loss);

/* ---- eval and predict (train_predict.c) ------------------------------------------------------- */

/* weft-train eval: loss and accuracy of the checkpoint on [data.test], else the validation
 * set, or on the section named (data, data.val, data.test). Prints one line. */
/* The dataset a command runs on (eval, predict, export --check --data), its inputs and its
 * name for messages: the section asked for, or [data.test], else the validation set. 0, or
 * an error naming the config file when there is none of that name. */
int train_pick_dataset(struct trainer *t, const char *section, weft_dataset **ds,
                       const struct train_inputs **in, const char **name);
int train_eval_command(struct trainer *t, const char *section);
/* weft-train predict: the model's outputs for every sample of the section, in order, to
 * out (.csv: index, class and probabilities, or the raw outputs; .npy: float32). */
int train_predict_command(struct trainer *t, const char *section, const char *out);

/* ---- quantize (train_quantize.c) ---------------------------------------------------------- */

struct train_quantize_args {
    const char *checkpoint, *out, *data;
    const char *observer; /* minmax, moving_average, histogram (NULL: histogram) */
    int64_t calib;        /* calibration samples (static) */
    bool dynamic, per_tensor;
};
/* weft-train quantize: the checkpoint's model quantized to int8 (static, calibrated on the
 * first a->calib training samples, or dynamic), the float32 and int8 figures side by side
 * on [data.test] (else the validation set, or a->data), the int8 model saved at a->out. */
int train_quantize_command(struct trainer *t, const struct train_quantize_args *a);

/* The exact command that resumes this run: the same arguments, --resume CHECKPOINT. */
void train_print_resume_command(const struct trainer *t, FILE *f);

/* ---- checks before the first step (train_check.c) ---------------------------------------- */

/* mkdir -p of the directory part of path; WEFT_ERR_IO naming the directory. */
int train_make_parent_dirs(const char *path);
/* [train] checkpoint and log: their directories made and a file created there (rank 0);
 * WEFT_ERR_CONFIG naming the key, the path and the system's reason. */
int train_check_paths(const struct trainer *t);
/* A section header of the config file with no key under it (inih would drop it):
 * WEFT_ERR_CONFIG naming the line and the section. */
int train_check_sections(struct weft_config *cfg);
/* A file named on the command line (--resume, --checkpoint) that is missing or not a
 * regular file (a FIFO would block its load): WEFT_ERR_CONFIG, "<path>: cannot open: a
 * FIFO (named pipe), not a regular file", found without opening it. */
int train_check_argument_file(const char *path);
/* weft_dataset_open of [section]; a data file that cannot be read (missing, no
 * permission) is a config error naming its key: "cfg.ini: [data] images = x.idx: ...". */
weft_dataset *train_open_dataset(struct weft_config *cfg, const char *section);
/* A dataset with no samples: WEFT_ERR_VALUE naming its section, file key and reader. */
int train_check_samples(struct weft_config *cfg, const weft_dataset *ds);
/* The model on one sample of the training set (evaluation mode, no autograd), layer by
 * layer, then the loss: WEFT_ERR_CONFIG naming the [layer.*] section that did not take
 * its input (and the input's shape), a last layer with fewer outputs than the labels
 * have classes, or a loss that does not take the output and the target. */
int train_check_model(struct trainer *t);
/* After the model's forward on x failed: runs it again layer by layer (a sequential model
 * of [layer.*] sections) and prefixes the pending error with the section of the layer
 * that fails, "[layer.fc2] mat1 and mat2 shapes cannot be multiplied (...)"; the code is
 * kept. Returns it. */
int train_blame_layer(struct trainer *t, weft_tensor *x);
/* Iteration mode (train_iters.c): max_iters optimizer steps over epochs of the loader. */
int train_run_iters(struct trainer *t);
double train_now(void);
/* The signal that asked the run to stop (0: none; train_signals.c): SIGINT, SIGTERM,
 * SIGPIPE, or SIGCONT (mpirun's first word when it is interrupted); another rank's
 * interrupt sets SIGINT. */
extern volatile sig_atomic_t train_interrupted;
/* SIGINT, SIGTERM, SIGPIPE (and SIGTSTP/SIGCONT under Open MPI) stop the run at the next
 * step with a checkpoint saved. */
void train_signals_install(void);
/* 0, or the exit status of an interrupted run: 128 + the signal (130 for Ctrl-C). */
int train_signals_exit_code(void);
/* After the save, every rank: waits for rank 0's save; then rank 0 says "interrupted at
 * <where>: checkpoint saved to X" and the command that resumes (on stderr too when the
 * signal was SIGPIPE). */
int train_say_interrupted(const struct trainer *t, const char *where);

/* ---- several processes (train_dist.c) ---------------------------------------------------- */

/* Before the runtime starts: several processes on one node share its cores, so [cpu]
 * threads is lowered to cores / processes per node where it asks for more. */
int train_dist_threads(struct weft_config *cfg);
/* Reads [distributed], joins the process group; ranks other than 0 go quiet. */
int train_dist_setup(struct trainer *t);
/* Wraps the model in DDP and shards the training loader over the ranks. */
int train_dist_wrap(struct trainer *t);
/* values[0..n) summed over the ranks, in place (a no-op for a world of one). */
int train_dist_sum(const struct trainer *t, double *values, int n);
/* Whether to stop after this step: 1 when a Ctrl-C reached any rank (agreed every few
 * steps, and then train_interrupted is set on every rank), 0 to go on, negative on an
 * error. */
int train_dist_should_stop(const struct trainer *t);
/* On an error: with several processes, ends the job on every rank (does not return). */
void train_dist_fail(const struct trainer *t, int code);
void train_dist_end(struct trainer *t);

/* weft-train export (train_export.c): its own arguments as given, checked by the command. */
struct train_export_args {
    const char *opset, *batch, *seq, *check, *atol, *latency, *ort_threads;
    const char *data; /* --data SECTION: --check runs its samples instead of random inputs */
    bool fold_batchnorm, external_data;
};
/* argv[i] as one of export's arguments: how many it took (1 or 2), 0 when it is none of
 * them, -1 after saying what is missing. */
int train_export_parse(struct train_export_args *a, int argc, char **argv, int i);
/* Writes the model (with its weights loaded) to out as ONNX; with --check, compares it
 * with ONNX Runtime. 0; 1 when the check found a difference above the tolerance (said);
 * negative with the error. */
int train_export_command(struct trainer *t, const struct train_export_args *a, const char *out);

#endif
