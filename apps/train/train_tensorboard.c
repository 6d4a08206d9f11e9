/* apps/train/train_tensorboard.c: [train] tensorboard = DIR, the scalars of the CSV log as
 * TensorBoard event files (weft/tensorboard.h), as Lightning's TensorBoardLogger writes
 * them: x is the optimizer step, so per-epoch and per-step points share one axis, and an
 * "epoch" scalar maps steps back to epochs. One writer per process (rank 0 only), fed
 * from the CSV log's two entry points, flushed after every epoch row. */
#include <math.h>
#include <stdio.h>

#include "train.h"

static weft_summary_writer *writer;
static const char *throughput_tag;

int train_tensorboard_open(const char *dir, bool tokens)
{
    if (!dir || !*dir || writer)
        return 0;
    throughput_tag = tokens ? "throughput/tokens_per_s" : "throughput/samples_per_s";
    writer = weft_summary_writer_open(dir);
    if (!writer)
        return weft_error_prefix("[train] tensorboard = %s", dir);
    printf("weft-train: TensorBoard events in %s (tensorboard --logdir %s)\n",
           weft_summary_writer_path(writer), dir);
    return 0;
}

/* NaN (no validation set, no accuracy for a regression) is left out, not drawn as 0. */
static int scalar(const char *tag, double v, int64_t step)
{
    return isfinite(v) ? weft_summary_writer_add_scalar(writer, tag, v, step) : 0;
}

int train_tensorboard_epoch(const struct train_epoch_metrics *m)
{
    if (!writer)
        return 0;
    int rc = scalar("loss/train", m->train_loss, m->step);
    rc = rc ? rc : scalar("loss/val", m->val_loss, m->step);
    rc = rc ? rc : scalar("accuracy/train", m->train_acc, m->step);
    rc = rc ? rc : scalar("accuracy/val", m->val_acc, m->step);
    rc = rc ? rc : scalar("lr", m->lr, m->step);
    rc = rc ? rc : scalar(throughput_tag, m->images_per_s, m->step);
    rc = rc ? rc : scalar("epoch", m->epoch, m->step);
    rc = rc ? rc : weft_summary_writer_flush(writer);
    return rc ? weft_error_prefix("[train] tensorboard") : 0;
}

int train_tensorboard_step(int64_t step, double loss, double lr, double per_s)
{
    if (!writer)
        return 0;
    int rc = scalar("loss/train_step", loss, step);
    rc = rc ? rc : scalar("lr", lr, step);
    rc = rc ? rc : scalar(throughput_tag, per_s, step);
    return rc ? weft_error_prefix("[train] tensorboard") : 0;
}

void train_tensorboard_close(void)
{
    if (writer && weft_summary_writer_close(writer) != 0)
        weft_error_clear(); /* the run's result stands; the last events may be lost */
    writer = NULL;
}
