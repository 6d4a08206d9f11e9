/* apps/train/train.h: the pieces of weft-train. */
#ifndef WEFT_APP_TRAIN_H
#define WEFT_APP_TRAIN_H

#include <stdbool.h>
#include <stdio.h>

#include <weft.h>
#include <weft/sparse.h>
#include <weft/train.h>
#include <weft/checkpoint.h>
#include <weft/dataset.h>
#include <weft/nn.h>

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
