/* apps/train/train_step.c: what both training loops share: one micro-batch's forward and
 * backward, one optimizer step, and an evaluation pass. */
#include <math.h>
#include <time.h>

#include "train.h"

volatile sig_atomic_t train_interrupted;

double train_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

const char *train_unit(const struct trainer *t, bool column)
{
    const char *unit = t->sequence ? (column ? "tokens_per_s" : "tok/s")
                       : t->images ? (column ? "images_per_s" : "img/s")
                                   : (column ? "samples_per_s" : "samples/s");
    if (column || !weft_device_is_emulated(t->device))
        return unit;
    static char label[64];
    char dev[32];
    snprintf(label, sizeof label, "%s on %s (emulated)", unit,
             weft_device_str(t->device, dev, sizeof dev));
    return label;
}

/* Number of rows whose argmax equals the target ([N, C] outputs only). */
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

/* Forward, loss and, when training, backward of one batch; *out_loss the unscaled mean. */
static int batch_loss(struct trainer *t, const struct train_inputs *in, weft_tensor *const *fields,
                      bool backward, struct train_batch_stats *b)
{
    weft_profiler_range_push("forward");
    weft_tensor *x = train_batch_input(in, fields, t->device);
    weft_tensor *target = train_batch_target(in, fields, t->device);
    /* [train] precision: forward and loss under autocast, backward outside it */
    bool autocast = t->s.precision != WEFT_F32;
    weft_autocast_state prev = autocast ? weft_autocast_begin(t->device.type, t->s.precision)
                                        : weft_autocast_get();
    /* DDP: rank 0's buffers (running statistics) before a training forward */
    weft_tensor *out = x && (!backward || !t->ddp || weft_ddp_sync_buffers(t->ddp) == 0)
                           ? weft_module_forward(t->model, x)
                           : NULL;
    if (x && !out) /* an error of the model's: name the layer */
        train_blame_layer(t, x);
    weft_tensor *loss = out && target ? train_loss_compute(&t->loss, out, target) : NULL;
    weft_autocast_end(prev);
    weft_profiler_range_pop();
    if (!loss)
        return weft_error_code();
    bool seq = train_loss_is_sequence(&t->loss, out, target);
    t->sequence = t->sequence || seq;
    /* nanoGPT: loss = loss / gradient_accumulation_steps, so the summed gradients are
     * the mean over the micro-batches. */
    weft_tensor *scaled = backward && t->s.accumulate > 1
                              ? weft_div_scalar(loss, (double)t->s.accumulate)
                              : loss;
    if (backward && t->scaler)
        scaled = weft_grad_scaler_scale(t->scaler, scaled);
    if (backward) {
        weft_profiler_range_push("backward");
        int rc = !scaled || weft_backward(scaled, NULL, false) != 0 ? -1 : 0;
        weft_profiler_range_pop();
        if (rc != 0)
            return weft_error_code();
    }
    if (weft_tensor_item(loss, &b->loss) != 0)
        return weft_error_code();
    b->samples = fields[0]->shape[0];
    b->tokens = seq ? target->shape[0] * target->shape[1] : b->samples;
    b->correct = t->loss.classification && !seq ? count_correct(out, target) : 0;
    return b->correct < 0 ? weft_error_code() : 0;
}

int train_micro_batch(struct trainer *t, weft_tensor *const *fields, bool sync,
                      struct train_batch_stats *b)
{
    if (!sync)
        weft_ddp_no_sync_begin(t->ddp);
    int rc = batch_loss(t, &t->inputs, fields, true, b);
    if (!sync)
        weft_ddp_no_sync_end(t->ddp);
    /* Under loss scaling an inf/NaN loss skips its step (GradScaler), not the run. */
    if (rc == 0 && !isfinite(b->loss) && !t->scaler)
        rc = weft_error_set(WEFT_ERR_RUNTIME,
                            "the loss became %g at step %lld: lower [optimizer] lr or set [train] "
                            "grad_clip", b->loss, (long long)t->step + 1);
    return rc;
}

static int optimizer_step(struct trainer *t);

int train_optimizer_step(struct trainer *t)
{
    weft_profiler_range_push("optimizer");
    int rc = optimizer_step(t);
    weft_profiler_range_pop();
    return rc;
}

static int optimizer_step(struct trainer *t)
{
    /* With loss scaling the gradients are unscaled before clipping, as PyTorch's recipe. */
    if (t->scaler && weft_grad_scaler_unscale_(t->scaler, t->opt) != 0)
        return weft_error_code();
    if (t->s.grad_clip > 0 &&
        weft_clip_grad_norm_(t->nparams, t->param_tensors, t->s.grad_clip, 2.0, NULL) != 0)
        return weft_error_code();
    int rc = t->scaler ? weft_grad_scaler_step(t->scaler, t->opt) : weft_optimizer_step(t->opt);
    if (rc == 0 && t->scaler)
        rc = weft_grad_scaler_update(t->scaler);
    if (rc != 0 || weft_optimizer_zero_grad(t->opt, true) != 0)
        return weft_error_code();
    t->step++;
    /* nanoGPT sets lr = get_lr(it) before step it: after step k the lr is the schedule's
     * value at k. */
    if (t->sched && t->sched_per_step && weft_scheduler_step(t->sched) != 0)
        return weft_error_code();
    return train_ema_update(t); /* [train] ema_decay */
}

int train_evaluate(struct trainer *t, weft_dataset *ds, const struct train_inputs *in,
                   int64_t max_batches, struct eval_result *r)
{
    *r = (struct eval_result){NAN, NAN, 0};
    if (!ds)
        return 0;
    struct weft_dataloader_options o = *weft_dataloader_options(t->train_loader);
    o.shuffle = false;
    o.drop_last = false;
    o.transforms_eval = true; /* torchvision's test transforms: no random step */
    /* Every rank evaluates the whole set: the same figures everywhere (early stopping
     * agrees) and no sample counted twice, as a padded shard would. */
    o.num_replicas = 1;
    o.rank = 0;
    weft_dataloader *dl = weft_dataloader_new(ds, &o);
    if (!dl || (t->ddp && weft_ddp_sync_buffers(t->ddp) != 0)) {
        weft_dataloader_free(dl);
        return weft_error_prefix("evaluating on [%s]", weft_dataset_section(ds));
    }
    weft_module_train(t->model, false);
    bool prev = weft_no_grad_begin();
    double loss_sum = 0;
    int64_t correct = 0, n = 0, tokens = 0, batches = 0;
    int rc = weft_dataloader_epoch(dl, 0);
    weft_tensor *fields[WEFT_DATASET_MAX_FIELDS];
    while (rc == 0 && (max_batches == 0 || batches < max_batches)) {
        int got = weft_dataloader_next(dl, fields);
        if (got <= 0) {
            rc = got < 0 ? got : 0;
            break;
        }
        if (train_batch_scope(fields, weft_dataloader_num_fields(dl)) != 0) {
            rc = weft_error_code();
            weft_scope_pop();
            break;
        }
        struct train_batch_stats b;
        rc = batch_loss(t, in, fields, false, &b);
        if (rc == 0) {
            /* A mean loss weighs by its positions, a summed one is already a total. */
            double weight = t->loss.ce.reduction == WEFT_REDUCTION_MEAN ? (double)b.tokens : 1.0;
            loss_sum += b.loss * weight;
            correct += b.correct;
            n += b.samples;
            tokens += b.tokens;
            batches++;
        }
        weft_scope_pop();
    }
    weft_grad_mode_restore(prev);
    weft_module_train(t->model, true);
    weft_dataloader_free(dl);
    if (rc != 0) /* where it failed, before what failed */
        weft_error_prefix("evaluating on [%s], batch %lld", weft_dataset_section(ds),
                          (long long)batches + 1);
    if (rc == 0 && n > 0) {
        r->loss = loss_sum / (double)(t->loss.ce.reduction == WEFT_REDUCTION_MEAN ? tokens : n);
        r->acc = t->loss.classification && !t->sequence ? (double)correct / (double)n : NAN;
        r->samples = n;
    }
    return rc;
}

int train_batch_scope(weft_tensor **fields, int n)
{
    weft_scope_push();
    int rc = 0;
    for (int f = 0; f < n; f++)
        if (fields[f] && !(fields[f] = weft_autorelease(fields[f])))
            rc = -1; /* released by the refusal; the others are recorded, so keep going */
    return rc;
}
