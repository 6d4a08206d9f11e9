/* apps/train/train.h: the pieces of weft-train. */
#ifndef WEFT_TRAIN_H
#define WEFT_TRAIN_H

#include <stdbool.h>
#include <stdio.h>

#include <weft.h>
#include <weft/checkpoint.h>
#include <weft/dataset.h>
#include <weft/nn.h>

/* Exit codes (docs/config.md). */
enum { EXIT_OK = 0, EXIT_TRAINING_ERROR = 1, EXIT_BAD_CONFIG = 2, EXIT_INTERRUPTED = 130 };

/* Builds the model from [model] and the [layer.*] sections in file order. NULL with an
 * error naming the section and key on a bad config. */
weft_module *train_build_model(struct weft_config *cfg);

/* The loss named by [loss] type: returns a new reference to the scalar loss. */
struct train_loss {
    enum { LOSS_CROSS_ENTROPY, LOSS_NLL, LOSS_MSE, LOSS_L1, LOSS_BCE_WITH_LOGITS } kind;
    struct weft_cross_entropy_params ce;
    bool classification; /* accuracy is meaningful */
};
int train_loss_from_config(struct weft_config *cfg, struct train_loss *loss);
weft_tensor *train_loss_compute(const struct train_loss *loss, weft_tensor *output,
                                weft_tensor *target);

/* Per-epoch metrics, written to the CSV log and the SVG plot. */
struct train_epoch_metrics {
    int epoch;
    double train_loss, train_acc;
    double val_loss, val_acc; /* NAN when there is no validation set */
    double lr;
    double images_per_s;
    double seconds;
};

struct train_log;
/* Opens the CSV log at path (NULL: no log); the plot goes next to it (.svg). */
struct train_log *train_log_open(const char *path, bool append);
int train_log_epoch(struct train_log *log, const struct train_epoch_metrics *m);
void train_log_close(struct train_log *log);

/* A one-line progress bar on a TTY, plain lines otherwise. */
void train_progress(int epoch, int epochs, int64_t batch, int64_t batches, double loss,
                    double images_per_s, bool tty);

#endif
