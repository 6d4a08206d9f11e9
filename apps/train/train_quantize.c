/* apps/train/train_quantize.c: `weft-train quantize`, torch.ao.quantization's post-training
 * workflow on a trained checkpoint (docs/quantization.md):
 *
 *   static (default): fuse, observe the activations on the first --calib samples of the
 *     training set (in order, test-time transforms: the same model every run), convert;
 *   --dynamic: Linear and LSTM weights int8, activations quantized per batch.
 *
 * Then the float32 and the int8 model side by side on the evaluation set (loss, accuracy,
 * how often their argmax agree), and the int8 model saved: int8 weights, float32 scales,
 * int64 zero points as tensors, the scheme in __metadata__, which `eval`, `predict` and
 * weft-generate read back (train_load_weights). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <weft/quant.h>

#include "train.h"

struct side {
    double loss_sum;
    int64_t correct;
};

/* The dataset the figures come from: [data.test], else the validation set, or --data. */
static int eval_set(struct trainer *t, const char *section, weft_dataset **ds,
                    const struct train_inputs **in, const char **name)
{
    if (!section)
        section = t->test_set ? "data.test" : t->val_set ? "data.val" : "data";
    *name = section;
    if (!strcmp(section, "data.test") && t->test_set) {
        *ds = t->test_set;
        *in = &t->test_inputs;
    } else if (!strcmp(section, "data.val") && t->val_set) {
        *ds = t->val_set;
        *in = &t->val_inputs;
    } else if (!strcmp(section, "data")) {
        *ds = t->train_all;
        *in = &t->inputs;
    } else {
        return weft_error_set(WEFT_ERR_CONFIG, "%s: --data %s: expected data, data.val or "
                                               "data.test (a section the config reads)",
                              weft_config_name(t->cfg), section);
    }
    return 0;
}

/* A loader over ds in order, without the training transforms' random steps. */
static weft_dataloader *in_order(struct trainer *t, const weft_dataset *ds)
{
    struct weft_dataloader_options o = *weft_dataloader_options(t->train_loader);
    o.shuffle = false;
    o.drop_last = false;
    o.transforms_eval = true;
    o.num_replicas = 1;
    o.rank = 0;
    return weft_dataloader_new(ds, &o);
}

/* argmax over the last dim. */
static weft_tensor *top(weft_tensor *out)
{
    return weft_argmax(out, out ? out->ndim - 1 : 0, false);
}

static int64_t count_equal(weft_tensor *a, weft_tensor *b)
{
    double v = -1;
    weft_tensor *n = weft_sum(weft_eq(a, b), 0, NULL, false);
    return n && weft_tensor_item(n, &v) == 0 ? (int64_t)v : -1;
}

/* Both models over the evaluation set: loss and hits of each, argmax agreement. */
static int compare(struct trainer *t, weft_module *fp32, weft_module *int8, weft_dataset *ds,
                   const struct train_inputs *in, struct side s[2], int64_t *agree,
                   int64_t *count, int64_t *samples)
{
    weft_dataloader *dl = in_order(t, ds);
    if (!dl)
        return weft_error_code();
    weft_module *models[2] = {fp32, int8};
    weft_module_train(fp32, false);
    bool prev = weft_no_grad_begin();
    int rc = weft_dataloader_epoch(dl, 0);
    weft_tensor *fields[WEFT_DATASET_MAX_FIELDS];
    memset(s, 0, 2 * sizeof *s);
    *agree = *count = *samples = 0;
    while (rc == 0) {
        int got = weft_dataloader_next(dl, fields);
        if (got <= 0) {
            rc = got;
            break;
        }
        if (train_batch_scope(fields, weft_dataloader_num_fields(dl)) != 0) {
            rc = weft_error_code();
            weft_scope_pop();
            break;
        }
        weft_tensor *x = train_batch_input(in, fields, t->device);
        weft_tensor *target = train_batch_target(in, fields, t->device);
        weft_tensor *out[2] = {NULL, NULL};
        bool seq = false;
        for (int k = 0; k < 2 && rc == 0; k++) {
            out[k] = x ? weft_module_forward(models[k], x) : NULL;
            weft_tensor *loss = out[k] && target ? train_loss_compute(&t->loss, out[k], target) : NULL;
            double v;
            if (!loss || weft_tensor_item(loss, &v) != 0) {
                rc = weft_error_code();
                break;
            }
            seq = train_loss_is_sequence(&t->loss, out[k], target);
            int64_t tokens = seq ? target->shape[0] * target->shape[1] : fields[0]->shape[0];
            s[k].loss_sum += v * (t->loss.ce.reduction == WEFT_REDUCTION_MEAN ? (double)tokens : 1.0);
            if (k == 0)
                *count += tokens;
            if (t->loss.classification) {
                int64_t hits = count_equal(top(out[k]), target);
                rc = hits < 0 ? weft_error_code() : 0;
                s[k].correct += hits;
            }
        }
        int64_t same = rc == 0 ? count_equal(top(out[0]), top(out[1])) : 0;
        if (rc == 0 && same < 0)
            rc = weft_error_code();
        *agree += same;
        *samples += rc == 0 ? fields[0]->shape[0] : 0;
        t->sequence = t->sequence || seq;
        weft_scope_pop();
    }
    weft_grad_mode_restore(prev);
    weft_dataloader_free(dl);
    return rc;
}

/* Static quantization's calibration: the first n samples of the training set, in order. */
static int calibrate(struct trainer *t, weft_quant_prepared *p, int64_t n, int64_t *seen)
{
    weft_dataloader *dl = in_order(t, t->train_set);
    if (!dl)
        return weft_error_code();
    int rc = weft_dataloader_epoch(dl, 0);
    weft_tensor *fields[WEFT_DATASET_MAX_FIELDS];
    *seen = 0;
    while (rc == 0 && *seen < n) {
        int got = weft_dataloader_next(dl, fields);
        if (got <= 0) {
            rc = got;
            break;
        }
        if (train_batch_scope(fields, weft_dataloader_num_fields(dl)) != 0) {
            rc = weft_error_code();
            weft_scope_pop();
            break;
        }
        weft_tensor *x = train_batch_input(&t->inputs, fields, t->device);
        int64_t b = x ? x->shape[0] : 0, take = b < n - *seen ? b : n - *seen;
        rc = x ? weft_quant_observe(p, weft_narrow(x, 0, 0, take)) : weft_error_code();
        *seen += take;
        weft_scope_pop();
    }
    weft_dataloader_free(dl);
    return rc;
}

static int64_t file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (int64_t)st.st_size : -1;
}

/* The metadata of the float checkpoint (its model config), the scheme, where it came from. */
static int save(weft_module *q, const struct weft_metadata *from, const struct weft_qconfig *qc,
                const struct train_quantize_args *a)
{
    struct weft_metadata *meta = weft_metadata_new();
    struct weft_tensor_dict *d = weft_module_state_dict(q);
    int rc = meta && d ? 0 : weft_error_code();
    for (size_t i = 0; i < weft_metadata_len(from) && rc == 0; i++) {
        const char *key = weft_metadata_key(from, i);
        if (!strncmp(key, "model.", 6) || !strcmp(key, "weft.checkpoint"))
            rc = weft_metadata_set(meta, key, weft_metadata_value(from, i));
    }
    if (rc == 0)
        rc = weft_quant_metadata_export(qc, a->dynamic, meta);
    if (rc == 0)
        rc = weft_metadata_set(meta, "quant.source", a->checkpoint);
    if (rc == 0 && !a->dynamic)
        rc = weft_metadata_set_int(meta, "quant.calibration_samples", a->calib);
    if (rc == 0 && (rc = train_make_parent_dirs(a->out)) == 0)
        rc = weft_safetensors_save(a->out, d, meta);
    weft_tensor_dict_free(d);
    weft_metadata_free(meta);
    return rc;
}

static void print_row(const char *name, const struct side *s, int64_t count, int64_t samples,
                      bool classification, bool sequence)
{
    printf("  %-5s  loss %.4f", name, s->loss_sum / (double)count);
    if (classification && !sequence)
        printf("  accuracy %.2f%%", 100.0 * (double)s->correct / (double)samples);
    printf("\n");
}

int train_quantize_command(struct trainer *t, const struct train_quantize_args *a)
{
    static const char *const observers[] = {"minmax", "moving_average", "histogram"};
    struct weft_qconfig qc = weft_qconfig_default();
    qc.per_tensor_weights = a->per_tensor;
    if (a->observer) {
        int k = 0;
        while (k < 3 && strcmp(a->observer, observers[k]))
            k++;
        if (k == 3)
            return weft_error_set(WEFT_ERR_CONFIG, "--observer %s: expected minmax, "
                                                   "moving_average or histogram",
                                  a->observer);
        qc.activation = (enum weft_observer_kind)k;
    }
    if (t->device.type != WEFT_DEVICE_CPU)
        return weft_error_set(WEFT_ERR_CONFIG, "%s: int8 models run on the cpu: set [runtime] "
                                               "backend = cpu (or --set runtime.backend=cpu)",
                              weft_config_name(t->cfg));
    weft_dataset *ds = NULL;
    const struct train_inputs *in = NULL;
    const char *set_name = NULL;
    struct weft_metadata *meta = NULL;
    int rc = eval_set(t, a->data, &ds, &in, &set_name);
    if (rc == 0)
        rc = train_load_weights(t, a->checkpoint, &meta);
    if (rc == 0 && weft_quant_metadata_present(meta))
        rc = weft_error_set(WEFT_ERR_VALUE, "%s is already an int8 checkpoint (quant.mode = %s): "
                                            "quantize its float32 source",
                            a->checkpoint, weft_metadata_get(meta, "quant.mode"));
    /* The int8 model: the same architecture with the same weights, converted. */
    struct train_inputs scratch;
    weft_module *q = rc == 0 ? train_build_model(t->cfg, &scratch) : NULL;
    struct weft_tensor_dict *w = q ? weft_module_state_dict(t->model) : NULL;
    if (rc == 0 && (!w || weft_module_load_state_dict(q, w, true) != 0))
        rc = weft_error_code();
    weft_tensor_dict_free(w);
    int64_t seen = 0;
    if (rc == 0 && a->dynamic) {
        rc = weft_quantize_dynamic(q, &qc);
        rc = rc < 0 ? rc : 0;
    } else if (rc == 0) {
        weft_quant_prepared *p = weft_quant_prepare(q, &qc);
        rc = p ? calibrate(t, p, a->calib, &seen) : weft_error_code();
        if (rc == 0)
            rc = weft_quant_convert(p);
        weft_quant_prepared_free(p);
    }
    struct side s[2];
    int64_t agree = 0, count = 0, samples = 0;
    if (rc == 0)
        rc = compare(t, t->model, q, ds, in, s, &agree, &count, &samples);
    if (rc == 0)
        rc = save(q, meta, &qc, a);
    if (rc == 0) {
        if (a->dynamic)
            printf("quantize: dynamic int8 (Linear and LSTM weights %s, activations uint8 per "
                   "batch)\n",
                   qc.per_tensor_weights ? "per tensor" : "per channel");
        else
            printf("quantize: static int8 (weights %s symmetric, activations uint8 per tensor, "
                   "%s observer), calibrated on %lld samples of [data]\n",
                   qc.per_tensor_weights ? "per tensor" : "per channel", observers[qc.activation],
                   (long long)seen);
        printf("on [%s] (%lld samples):\n", set_name, (long long)samples);
        print_row("fp32", &s[0], count, samples, t->loss.classification, t->sequence);
        print_row("int8", &s[1], count, samples, t->loss.classification, t->sequence);
        if (t->loss.classification && !t->sequence)
            printf("  accuracy %+.2f points; argmax agreement %.2f%%\n",
                   100.0 * (double)(s[1].correct - s[0].correct) / (double)samples,
                   100.0 * (double)agree / (double)samples);
        else
            printf("  loss %+.4f; argmax agreement %.2f%% of %lld positions\n",
                   (s[1].loss_sum - s[0].loss_sum) / (double)count,
                   100.0 * (double)agree / (double)count, (long long)count);
        int64_t from = file_size(a->checkpoint), to = file_size(a->out);
        printf("saved %s: %lld bytes, %.2fx the float32 file's %lld\n", a->out, (long long)to,
               from > 0 ? (double)to / (double)from : NAN, (long long)from);
    }
    weft_module_free(q);
    weft_metadata_free(meta);
    return rc;
}
