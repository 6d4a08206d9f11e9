/* apps/train/train_model.c: the model (through the train library's weft_model_from_config,
 * weft/model.h) and the loss from the INI file, and how a batch becomes the model's input.
 *
 * A model whose first layer is the sparse plugin's sparse_linear (weft/sparse.h) takes a
 * sparse CSR matrix: the data loader's batches have fixed shapes, so the readers hand
 * such samples out padded ("indices" with -1, "values" with 0), and train_batch_input()
 * drops the padding and builds the CSR batch from the two fields the layer names. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <weft/models.h>

#include "train.h"

/* A sparse_linear layer must come first (its input is the batch's sparse fields); the
 * first one sets how batches become the model's input. */
static int find_sparse_input(weft_module *model, const struct weft_config *cfg,
                             struct train_inputs *in)
{
    for (int i = 0;; i++) {
        char name[16];
        snprintf(name, sizeof name, "%d", i);
        weft_module *layer = weft_module_child(model, name);
        if (!layer)
            return 0;
        /* The type's name first: asking the sparse plugin would load it for every model. */
        struct weft_sparse_linear_info st;
        const struct weft_module_type *type = weft_module_type(layer);
        if (strcmp(type->base.name, "sparse_linear") != 0 ||
            weft_sparse_linear_info(layer, &st) != 0)
            continue;
        if (i != 0)
            return weft_error_set(WEFT_ERR_CONFIG, "%s: [%s] type = sparse_linear must be the "
                                                   "model's first layer: its input is the batch's "
                                                   "sparse fields",
                                  weft_config_name(cfg), st.section);
        in->sparse = true;
        in->in_features = st.in_features;
        snprintf(in->layer, sizeof in->layer, "%s", st.section);
        snprintf(in->indices_name, sizeof in->indices_name, "%s", st.indices);
        snprintf(in->values_name, sizeof in->values_name, "%s", st.values);
    }
}

/* ---- batches as the model's input ------------------------------------------------------ */

static const struct weft_dataset_field *field_named(const weft_dataset *ds, const char *name,
                                                    int *index)
{
    *index = weft_dataset_field_index(ds, name);
    return *index >= 0 ? weft_dataset_field(ds, *index) : NULL;
}

/* "indices, values, label" for messages. */
static const char *field_list(const weft_dataset *ds, char *buf, size_t size)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int f = 0; f < weft_dataset_num_fields(ds) && n < size; f++)
        n += (size_t)snprintf(buf + n, size - n, "%s%s", f ? ", " : "", weft_dataset_field(ds, f)->name);
    return buf;
}

static int resolve_sparse(struct train_inputs *in, const weft_dataset *ds, const char *file)
{
    const char *sec = weft_dataset_section(ds);
    char names[256];
    const struct weft_dataset_field *fi = field_named(ds, in->indices_name, &in->indices);
    const struct weft_dataset_field *fv = field_named(ds, in->values_name, &in->values);
    if (!fi || !fv)
        return weft_error_set(WEFT_ERR_CONFIG, "%s: [%s] %s = '%s': the data of [%s] (reader %s) "
                                               "has no such field (its fields: %s)",
                              file, in->layer, fi ? "values" : "indices",
                              fi ? in->values_name : in->indices_name, sec,
                              weft_dataset_reader_name(ds), field_list(ds, names, sizeof names));
    if (fi->dtype != WEFT_I64 || fi->ndim != 1 || fv->dtype != WEFT_F32 || fv->ndim != 1 ||
        fv->shape[0] != fi->shape[0])
        return weft_error_set(WEFT_ERR_CONFIG, "%s: [%s]: fields '%s' (%s, rank %d) and '%s' (%s, "
                                               "rank %d) of [%s] are not padded sparse rows: "
                                               "expected int64 and float32 vectors of one width",
                              file, in->layer, fi->name, weft_dtype_name(fi->dtype), fi->ndim,
                              fv->name, weft_dtype_name(fv->dtype), fv->ndim, sec);
    if (fi->num_classes > in->in_features)
        return weft_error_set(WEFT_ERR_CONFIG, "%s: [%s] in_features = %lld, but the data of [%s] "
                                               "has %lld features (its '%s' lie in [0, %lld))",
                              file, in->layer, (long long)in->in_features, sec,
                              (long long)fi->num_classes, fi->name, (long long)fi->num_classes);
    in->input = -1;
    in->target = weft_dataset_field_index(ds, "label");
    if (in->target < 0 && !in->optional_target)
        return weft_error_set(WEFT_ERR_CONFIG, "%s: the data of [%s] (reader %s) has no 'label' "
                                               "field for the loss (its fields: %s)",
                              file, sec, weft_dataset_reader_name(ds),
                              field_list(ds, names, sizeof names));
    return 0;
}

int train_inputs_resolve(struct train_inputs *in, const weft_dataset *ds,
                         const struct weft_config *cfg)
{
    const char *file = weft_config_name(cfg);
    if (in->sparse)
        return resolve_sparse(in, ds, file);
    in->input = 0;
    in->target = weft_dataset_field_index(ds, "label");
    if (in->target < 0)
        in->target = 1;
    if (in->target >= weft_dataset_num_fields(ds) && in->optional_target)
        in->target = -1;
    else if (in->target >= weft_dataset_num_fields(ds)) {
        char names[256];
        return weft_error_set(WEFT_ERR_CONFIG, "%s: the data of [%s] (reader %s) has no target "
                                               "field for the loss (its fields: %s)",
                              file, weft_dataset_section(ds), weft_dataset_reader_name(ds),
                              field_list(ds, names, sizeof names));
    }
    return 0;
}

weft_device train_inputs_loader_device(const struct train_inputs *in, weft_device dev)
{
    return in->sparse ? WEFT_CPU : dev;
}

/* The CSR matrix [n, in_features] of a batch's padded rows: slots holding -1 are
 * dropped; the others must be in range and increase along each row. Host tensors. */
static weft_tensor *csr_from_padded(const struct train_inputs *in, weft_tensor *indices,
                                    weft_tensor *values)
{
    int64_t n = indices->shape[0], width = indices->ndim > 1 ? indices->shape[1] : 0;
    const int64_t *ip = weft_tensor_data(indices);
    const float *vp = weft_tensor_data(values);
    int64_t nnz = 0;
    for (int64_t k = 0; k < n * width; k++) {
        int64_t c = ip[k];
        if (c < -1 || c >= in->in_features) {
            weft_error_set(WEFT_ERR_VALUE, "[%s]: feature index %lld in sample %lld of the batch "
                                           "is out of range: expected 0 <= index < in_features "
                                           "(%lld), or -1 for padding",
                           in->layer, (long long)c, (long long)(k / width),
                           (long long)in->in_features);
            return NULL;
        }
        nnz += c >= 0;
    }
    weft_tensor *crow = weft_empty(1, (int64_t[]){n + 1}, WEFT_I64, WEFT_CPU);
    weft_tensor *col = weft_empty(1, (int64_t[]){nnz}, WEFT_I64, WEFT_CPU);
    weft_tensor *val = weft_empty(1, (int64_t[]){nnz}, WEFT_F32, WEFT_CPU);
    if (!crow || !col || !val)
        return NULL;
    int64_t *rp = weft_tensor_data(crow), *cp = weft_tensor_data(col);
    float *xp = weft_tensor_data(val);
    int64_t e = 0;
    rp[0] = 0;
    for (int64_t r = 0; r < n; r++) {
        int64_t prev = -1;
        for (int64_t k = r * width; k < (r + 1) * width; k++) {
            if (ip[k] < 0)
                continue;
            if (ip[k] <= prev) {
                weft_error_set(WEFT_ERR_VALUE, "[%s]: sample %lld of the batch lists feature %lld "
                                               "after %lld: expected increasing indices",
                               in->layer, (long long)r, (long long)ip[k], (long long)prev);
                return NULL;
            }
            prev = ip[k];
            cp[e] = ip[k];
            xp[e++] = vp[k];
        }
        rp[r + 1] = e;
    }
    return weft_sparse_csr_tensor(crow, col, val, (int64_t[]){n, in->in_features}, false);
}

weft_tensor *train_batch_input(const struct train_inputs *in, weft_tensor *const *fields,
                               weft_device dev)
{
    if (!in->sparse) {
        /* x.to(model.dtype): float16 data from an NPY file feeds a float32 model, as a
         * PyTorch script casts its batch; integer inputs (token ids) stay as they are. */
        weft_tensor *x = fields[in->input];
        int n = 0;
        weft_tensor *const *p = in->model ? weft_module_parameters(in->model, &n) : NULL;
        if (x && n > 0 && weft_dtype_is_floating(x->dtype) &&
            weft_dtype_is_floating(p[0]->dtype) && x->dtype != p[0]->dtype)
            return weft_to_dtype(x, p[0]->dtype);
        return weft_autorelease(weft_tensor_retain(x));
    }
    weft_tensor *indices = fields[in->indices], *values = fields[in->values];
    if (!indices || !values)
        return NULL;
    weft_scope_push();
    weft_tensor *x = csr_from_padded(in, weft_contiguous(indices), weft_contiguous(values));
    if (x && dev.type != WEFT_DEVICE_CPU)
        x = weft_sparse_to_device(x, dev, false);
    weft_tensor_retain(x);
    weft_scope_pop();
    return weft_autorelease(x);
}

weft_tensor *train_batch_target(const struct train_inputs *in, weft_tensor *const *fields,
                                weft_device dev)
{
    weft_tensor *t = fields[in->target];
    if (!t)
        return NULL;
    if (weft_device_equal(t->device, dev))
        return weft_autorelease(weft_tensor_retain(t));
    return weft_to_device(t, dev);
}

weft_module *train_build_model(struct weft_config *cfg, struct train_inputs *inputs)
{
    memset(inputs, 0, sizeof *inputs);
    /* libweft-models' types (gpt), next to the built-in ones and the plugins' (the sparse
     * plugin's sparse_linear loads with it, by its manifest). */
    if (weft_models_register() != 0)
        return NULL;
    weft_module *model = weft_model_from_config(cfg);
    inputs->model = model;
    if (model && find_sparse_input(model, cfg, inputs) != 0) {
        weft_module_free(model);
        return NULL;
    }
    return model;
}

/* ---- the loss --------------------------------------------------------------------------- */

int train_loss_from_config(struct weft_config *cfg, struct train_loss *loss)
{
    static const char *const kinds[] = {"cross_entropy", "nll", "mse", "l1", "bce_with_logits", NULL};
    static const char *const reductions[] = {"mean", "sum", NULL};
    int kind, reduction;
    memset(loss, 0, sizeof *loss);
    loss->ce = weft_cross_entropy_defaults();
    if (weft_config_choice(cfg, "loss", "type", kinds, 0, &kind) ||
        weft_config_choice(cfg, "loss", "reduction", reductions, 0, &reduction) ||
        weft_config_double(cfg, "loss", "label_smoothing", 0, &loss->ce.label_smoothing) ||
        weft_config_int(cfg, "loss", "ignore_index", -100, &loss->ce.ignore_index))
        return weft_error_code();
    if (loss->ce.label_smoothing < 0 || loss->ce.label_smoothing > 1)
        return weft_error_set(WEFT_ERR_CONFIG,
                              "%s: [loss] label_smoothing = %g: expected a value in [0, 1]",
                              weft_config_name(cfg), loss->ce.label_smoothing);
    loss->kind = kind;
    loss->ce.reduction = reduction == 0 ? WEFT_REDUCTION_MEAN : WEFT_REDUCTION_SUM;
    loss->classification = kind == LOSS_CROSS_ENTROPY || kind == LOSS_NLL;
    return 0;
}

bool train_loss_is_sequence(const struct train_loss *loss, const weft_tensor *output,
                            const weft_tensor *target)
{
    return (loss->kind == LOSS_CROSS_ENTROPY || loss->kind == LOSS_NLL) && output &&
           target && output->ndim == 3 && target->ndim == 2 && target->dtype == WEFT_I64 &&
           output->shape[0] == target->shape[0] && output->shape[1] == target->shape[1];
}

weft_tensor *train_loss_compute(const struct train_loss *loss, weft_tensor *output,
                                weft_tensor *target)
{
    if (train_loss_is_sequence(loss, output, target)) {
        /* [B, T, V] and [B, T] -> [B*T, V] and [B*T]: torch would read dim 1 as the
         * classes; a language model's classes are its last dim. */
        int64_t bt = output->shape[0] * output->shape[1];
        output = weft_reshape(output, 2, (int64_t[]){bt, output->shape[2]});
        target = weft_reshape(target, 1, (int64_t[]){bt});
        if (!output || !target)
            return NULL;
    }
    switch (loss->kind) {
    case LOSS_CROSS_ENTROPY: return weft_cross_entropy(output, target, &loss->ce);
    case LOSS_NLL: return weft_nll_loss(output, target, &loss->ce);
    case LOSS_MSE: return weft_mse_loss(output, weft_to_dtype(target, output->dtype), loss->ce.reduction);
    case LOSS_L1: return weft_l1_loss(output, weft_to_dtype(target, output->dtype), loss->ce.reduction);
    case LOSS_BCE_WITH_LOGITS:
        return weft_binary_cross_entropy_with_logits(output, weft_to_dtype(target, output->dtype),
                                                     NULL, loss->ce.reduction);
    }
    return NULL;
}
