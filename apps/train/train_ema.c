/* apps/train/train_ema.c: [train] ema_decay, an exponential moving average of the weights.
 *
 * As torch.optim.swa_utils.AveragedModel(model, use_buffers=True,
 * multi_avg_fn=get_ema_multi_avg_fn(decay)), updated after every optimizer step: the
 * first update copies the model, each later one makes every floating parameter and
 * buffer decay * average + (1 - decay) * current; integer buffers (BatchNorm's
 * num_batches_tracked) are copied. Every rank keeps it (the ranks hold the same model).
 *
 * Evaluated beside the model after each evaluation (its weights swapped into the model
 * and back, so no second model is built), saved with every checkpoint as
 * "<checkpoint name>.ema.safetensors" (the model's names and metadata: eval, predict,
 * export and weft-generate read it as they read the checkpoint), and kept in the .train
 * state as "ema.<name>" with weft.ema_updates, so that --resume continues it exactly.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft/ops.h>

#include "train.h"

struct train_ema {
    double decay;
    int64_t updates;              /* AveragedModel's n_averaged */
    struct weft_tensor_dict *live; /* the model's state dict: references to its tensors */
    struct weft_tensor_dict *avg;  /* the averages, under the same names */
    struct weft_tensor_dict *kept; /* the model's own weights while the average is in it */
};

int train_ema_create(struct trainer *t)
{
    double decay;
    if (weft_config_double(t->cfg, "train", "ema_decay", 0, &decay) != 0)
        return weft_error_code();
    if (decay == 0 || t->command != CMD_TRAIN)
        return 0;
    if (!(decay > 0 && decay < 1))
        return weft_error_set(WEFT_ERR_CONFIG, "%s: [train] ema_decay = %g: expected a decay in "
                                               "(0, 1) (0.999 is common), or 0 for none",
                              weft_config_name(t->cfg), decay);
    struct train_ema *e = calloc(1, sizeof *e);
    if (!e)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of memory for [train] ema_decay");
    e->decay = decay;
    t->ema = e;
    e->live = weft_module_state_dict(t->model);
    e->avg = weft_tensor_dict_new();
    e->kept = weft_tensor_dict_new();
    if (!e->live || !e->avg || !e->kept)
        return weft_error_code();
    /* the averages start as a copy (the first update copies again, as AveragedModel) */
    size_t n = weft_tensor_dict_len(e->live);
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        weft_scope_push();
        weft_tensor *p = weft_tensor_dict_at(e->live, i);
        rc = weft_tensor_dict_add(e->avg, weft_tensor_dict_name(e->live, i), weft_clone(p));
        if (rc == 0)
            rc = weft_tensor_dict_add(e->kept, weft_tensor_dict_name(e->live, i), weft_clone(p));
        weft_scope_pop();
    }
    return rc ? weft_error_code() : 0;
}

double train_ema_decay(const struct trainer *t)
{
    return t->ema ? t->ema->decay : 0;
}

void train_ema_free(struct trainer *t)
{
    if (!t->ema)
        return;
    weft_tensor_dict_free(t->ema->live);
    weft_tensor_dict_free(t->ema->avg);
    weft_tensor_dict_free(t->ema->kept);
    free(t->ema);
    t->ema = NULL;
}

int train_ema_update(struct trainer *t)
{
    struct train_ema *e = t->ema;
    if (!e)
        return 0;
    size_t n = weft_tensor_dict_len(e->live);
    bool prev = weft_no_grad_begin();
    weft_scope_push();
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        weft_tensor *p = weft_tensor_dict_at(e->live, i), *a = weft_tensor_dict_at(e->avg, i);
        if (e->updates == 0 || !weft_dtype_is_floating(a->dtype))
            rc = weft_copy_(a, p);
        else /* decay * a + (1 - decay) * p */
            rc = weft_add_(weft_mul_scalar_(a, e->decay), weft_mul_scalar(p, 1 - e->decay))
                     ? 0 : -1;
    }
    weft_scope_pop();
    weft_grad_mode_restore(prev);
    if (rc != 0)
        return weft_error_prefix("[train] ema_decay: updating the average");
    e->updates++;
    return 0;
}

/* Copies every tensor of from into the one of the same index in to. */
static int copy_all(struct weft_tensor_dict *to, struct weft_tensor_dict *from)
{
    size_t n = weft_tensor_dict_len(to);
    bool prev = weft_no_grad_begin();
    weft_scope_push();
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++)
        rc = weft_copy_(weft_tensor_dict_at(to, i), weft_tensor_dict_at(from, i));
    weft_scope_pop();
    weft_grad_mode_restore(prev);
    return rc;
}

int train_ema_swap_in(struct trainer *t)
{
    struct train_ema *e = t->ema;
    if (copy_all(e->kept, e->live) != 0 || copy_all(e->live, e->avg) != 0)
        return weft_error_prefix("[train] ema_decay: swapping the average into the model");
    return 0;
}

int train_ema_swap_out(struct trainer *t)
{
    if (copy_all(t->ema->live, t->ema->kept) != 0)
        return weft_error_prefix("[train] ema_decay: restoring the model's weights");
    return 0;
}

int train_ema_evaluate(struct trainer *t, weft_dataset *ds, const struct train_inputs *in,
                       int64_t max_batches, struct eval_result *r)
{
    int rc = train_ema_swap_in(t);
    if (rc != 0)
        return rc;
    rc = train_evaluate(t, ds, in, max_batches, r);
    int back = train_ema_swap_out(t);
    return rc != 0 ? rc : back;
}

int train_ema_export(const struct trainer *t, struct weft_tensor_dict *state,
                     struct weft_metadata *meta)
{
    const struct train_ema *e = t->ema;
    if (!e)
        return 0;
    char key[512], decay[40];
    size_t n = weft_tensor_dict_len(e->avg);
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        snprintf(key, sizeof key, "ema.%s", weft_tensor_dict_name(e->avg, i));
        weft_scope_push();
        rc = weft_tensor_dict_add(state, key, weft_tensor_dict_at(e->avg, i));
        weft_scope_pop();
    }
    snprintf(decay, sizeof decay, "%.17g", e->decay);
    if (rc == 0)
        rc = weft_metadata_set_int(meta, "weft.ema_updates", e->updates) ||
             weft_metadata_set(meta, "weft.ema_decay", decay);
    return rc ? weft_error_code() : 0;
}

int train_ema_import(struct trainer *t, const char *state_path,
                     const struct weft_tensor_dict *state, const struct weft_metadata *meta)
{
    struct train_ema *e = t->ema;
    if (!e)
        return 0;
    if (!weft_metadata_get(meta, "weft.ema_updates")) {
        printf("%s has no average of the weights (a run without [train] ema_decay): the "
               "average starts from the resumed weights\n", state_path);
        e->updates = 0;
        return 0;
    }
    if (weft_metadata_get_int(meta, "weft.ema_updates", &e->updates) != 0)
        return weft_error_code();
    size_t n = weft_tensor_dict_len(e->avg);
    char key[512];
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        snprintf(key, sizeof key, "ema.%s", weft_tensor_dict_name(e->avg, i));
        weft_scope_push();
        weft_tensor *saved = weft_tensor_dict_get(state, key);
        rc = saved ? weft_copy_(weft_tensor_dict_at(e->avg, i), saved)
                   : weft_error_set(WEFT_ERR_VALUE, "%s: the average of the weights lacks '%s' "
                                                    "(a checkpoint of another model?)",
                                    state_path, key);
        weft_scope_pop();
    }
    return rc ? weft_error_code() : 0;
}

int train_ema_save(const struct trainer *t, const char *checkpoint,
                   const struct weft_metadata *model_meta)
{
    const struct train_ema *e = t->ema;
    if (!e)
        return 0;
    char base[4096], path[4096], decay[40];
    train_checkpoint_base(checkpoint, base, sizeof base);
    train_ema_path(base, path, sizeof path);
    struct weft_metadata *meta = weft_metadata_new();
    int rc = meta ? 0 : -1;
    for (size_t i = 0; rc == 0 && i < weft_metadata_len(model_meta); i++)
        rc = weft_metadata_set(meta, weft_metadata_key(model_meta, i),
                               weft_metadata_value(model_meta, i));
    snprintf(decay, sizeof decay, "%.17g", e->decay);
    if (rc == 0)
        rc = weft_metadata_set(meta, "weft.ema_decay", decay) ||
             weft_metadata_set_int(meta, "weft.ema_updates", e->updates);
    if (rc == 0)
        rc = weft_safetensors_save(path, e->avg, meta);
    weft_metadata_free(meta);
    return rc ? weft_error_code() : 0;
}
