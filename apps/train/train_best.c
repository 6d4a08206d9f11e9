/* apps/train/train_best.c: [train] keep_best, Lightning's ModelCheckpoint(monitor=
 * "val_loss", save_last=True): beside the last checkpoint, the model with the lowest
 * validation loss so far goes to "<checkpoint stem>.best.safetensors" (a plain state dict
 * like the model file, written the same atomic way: temporary, fsync, rename), its
 * metadata saying when: weft.best_epoch, weft.best_step, weft.best_metric = "val_loss",
 * weft.best_value. Early stopping then restores it, as EarlyStopping with
 * restore_best_weights would, so the test figures are the best model's. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train.h"

/* The best file: beside the checkpoint, named after it without its {epoch}/{step}. */
void train_best_file(const struct trainer *t, char *out, size_t size)
{
    char base[4096];
    train_checkpoint_base(t->s.checkpoint, base, sizeof base);
    train_best_path(base, out, size);
}

int train_best_update(struct trainer *t, int64_t epoch, double val_loss, bool *improved)
{
    *improved = false;
    if (!t->s.keep_best || isnan(val_loss) || (t->best.have && !(val_loss < t->best.val_loss)))
        return 0;
    *improved = true;
    t->best = (struct train_best){true, val_loss, epoch, t->step};
    if (t->rank != 0) /* the ranks hold the same model */
        return 0;
    char path[4096], value[64];
    train_best_file(t, path, sizeof path);
    snprintf(value, sizeof value, "%.9g", val_loss);
    struct weft_tensor_dict *model = weft_module_state_dict(t->model);
    struct weft_metadata *meta = weft_metadata_new();
    int rc = model && meta ? 0 : weft_error_code();
    if (rc == 0)
        rc = weft_module_config_export(t->model, meta);
    if (rc == 0)
        rc = weft_metadata_set_int(meta, "weft.best_epoch", epoch) ||
             weft_metadata_set_int(meta, "weft.best_step", t->step) ||
             weft_metadata_set_int(meta, "weft.step", t->step) ||
             weft_metadata_set(meta, "weft.best_metric", "val_loss") ||
             weft_metadata_set(meta, "weft.best_value", value);
    if (rc == 0)
        rc = train_make_parent_dirs(path);
    if (rc == 0)
        rc = weft_safetensors_save(path, model, meta);
    if (rc != 0)
        weft_error_prefix("[train] keep_best: %s not saved", path);
    weft_tensor_dict_free(model);
    weft_metadata_free(meta);
    return rc;
}

int train_best_resume(struct trainer *t)
{
    char path[4096];
    if (!t->s.keep_best)
        return 0;
    train_best_file(t, path, sizeof path);
    if (access(path, F_OK) != 0)
        return 0;
    struct weft_metadata *meta = NULL;
    int rc = weft_safetensors_load(path, WEFT_CPU, NULL, &meta);
    const char *v = rc == 0 ? weft_metadata_get(meta, "weft.best_value") : NULL;
    if (rc == 0 && v) {
        t->best.have = true;
        t->best.val_loss = strtod(v, NULL);
        rc = weft_metadata_get_int(meta, "weft.best_epoch", &t->best.epoch) ||
             weft_metadata_get_int(meta, "weft.best_step", &t->best.step);
    }
    weft_metadata_free(meta);
    if (rc != 0)
        weft_error_prefix("[train] keep_best: %s", path);
    return rc ? weft_error_code() : 0;
}

int train_best_restore(struct trainer *t)
{
    char path[4096];
    if (!t->s.keep_best || !t->best.have)
        return 0;
    train_best_file(t, path, sizeof path);
    int rc = train_load_weights(t, path, NULL);
    t->best_restored = rc == 0;
    if (rc == 0)
        printf("restored the best model (%s %lld, val_loss %.4f) from %s\n",
               t->s.max_iters > 0 ? "step" : "epoch",
               (long long)(t->s.max_iters > 0 ? t->best.step : t->best.epoch), t->best.val_loss,
               path);
    return rc;
}

bool train_patience_update(struct trainer *t, double val_loss)
{
    struct train_patience *p = &t->patience;
    if (t->s.patience <= 0 || isnan(val_loss))
        return false;
    p->since = p->seen && val_loss >= p->best ? p->since + 1 : 0;
    if (!p->seen || val_loss < p->best)
        p->best = val_loss;
    p->seen = true;
    return p->since >= t->s.patience;
}
