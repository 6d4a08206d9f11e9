/* apps/train/train_model.c: the model and the loss from the INI file.
 *
 * [model] holds the model's kind (only "sequential" today); every section named
 * "layer.<name>" is one layer, in file order, with a `type` key and the keys of that
 * layer's torch.nn constructor.
 *
 * One layer has no torch.nn twin: sparse_linear, a Linear whose input is a sparse CSR
 * matrix, for data such as libsvm files with a million features of which each sample
 * uses fifty. The data loader's batches have fixed shapes, so the readers hand such
 * samples out padded ("indices" with -1, "values" with 0); train_batch_input() drops the
 * padding and builds the CSR batch, and the layer computes x @ W^T + b with
 * weft_sparse_addmm, differentiable w.r.t. W and b through weft-sparse.so. Its
 * parameters are Linear's ("weight" [out, in], "bias" [out], initialised alike), so a
 * checkpoint loads into torch.nn.Linear. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train.h"

static const char *const layer_types[] = {
    "linear",  "conv2d",      "maxpool2d",  "avgpool2d",  "adaptive_avgpool2d", "batchnorm1d",
    "batchnorm2d", "layernorm", "dropout",   "embedding",  "flatten",            "relu",
    "leaky_relu",  "gelu",      "tanh",      "sigmoid",    "softmax",            "log_softmax",
    "sparse_linear", NULL};

enum layer_type {
    L_LINEAR, L_CONV2D, L_MAXPOOL2D, L_AVGPOOL2D, L_ADAPTIVE_AVGPOOL2D, L_BATCHNORM1D,
    L_BATCHNORM2D, L_LAYERNORM, L_DROPOUT, L_EMBEDDING, L_FLATTEN, L_RELU, L_LEAKY_RELU,
    L_GELU, L_TANH, L_SIGMOID, L_SOFTMAX, L_LOG_SOFTMAX, L_SPARSE_LINEAR
};

/* A required positive integer key. */
static int need_int(struct weft_config *cfg, const char *section, const char *key, int64_t *out)
{
    if (!weft_config_has(cfg, section, key)) {
        weft_config_mark_known(cfg, section, key);
        return weft_error_set(WEFT_ERR_CONFIG, "%s: [%s] missing required key '%s'",
                              weft_config_name(cfg), section, key);
    }
    if (weft_config_int(cfg, section, key, 0, out) != 0)
        return weft_error_code();
    if (*out <= 0)
        return weft_error_set(WEFT_ERR_CONFIG, "%s: [%s] %s = %lld: expected a positive integer",
                              weft_config_name(cfg), section, key, (long long)*out);
    return 0;
}

/* "3" or "3, 3" into two values (a single value is used for both). */
static int pair(struct weft_config *cfg, const char *section, const char *key, int64_t def,
                int64_t out[2])
{
    const char *text = weft_config_string(cfg, section, key, NULL);
    out[0] = out[1] = def;
    if (!text)
        return 0;
    char *end;
    long long a = strtoll(text, &end, 10), b = a;
    while (*end == ' ')
        end++;
    if (*end == ',') {
        b = strtoll(end + 1, &end, 10);
        while (*end == ' ')
            end++;
    }
    if (*end != '\0' || end == text || a < 0 || b < 0)
        return weft_error_set(WEFT_ERR_CONFIG,
                              "%s: [%s] %s = '%s': expected a non-negative integer or a pair "
                              "like '3, 3'",
                              weft_config_name(cfg), section, key, text);
    out[0] = a;
    out[1] = b;
    return 0;
}

static weft_module *build_pool(struct weft_config *cfg, const char *s, bool max)
{
    struct weft_pool2d_params p = {.count_include_pad = true};
    bool ceil_mode = false, include_pad = true;
    if (pair(cfg, s, "kernel_size", 0, p.kernel) || pair(cfg, s, "stride", 0, p.stride) ||
        pair(cfg, s, "padding", 0, p.padding) ||
        weft_config_bool(cfg, s, "ceil_mode", false, &ceil_mode))
        return NULL;
    if (max && pair(cfg, s, "dilation", 1, p.dilation))
        return NULL;
    if (!max && weft_config_bool(cfg, s, "count_include_pad", true, &include_pad))
        return NULL;
    if (p.kernel[0] == 0) {
        weft_error_set(WEFT_ERR_CONFIG, "%s: [%s] missing required key 'kernel_size'",
                       weft_config_name(cfg), s);
        return NULL;
    }
    p.ceil_mode = ceil_mode;
    p.count_include_pad = include_pad;
    return max ? weft_nn_max_pool2d(&p) : weft_nn_avg_pool2d(&p);
}

/* ---- sparse_linear ------------------------------------------------------------------ */

struct sparse_linear_state {
    int64_t in_features, out_features;
};

/* x @ weight^T + bias for a sparse CSR (or COO) x [batch, in]: the SpMM takes weight^T
 * as a strided view, so no transposed copy is made; a dense x falls back to weft_linear. */
static weft_tensor *sparse_linear_forward(weft_module *m, weft_tensor *x)
{
    weft_tensor *w = weft_module_parameter(m, "weight"), *b = weft_module_parameter(m, "bias");
    if (!x || !w)
        return NULL;
    if (!weft_tensor_is_sparse(x))
        return weft_linear(x, w, b);
    weft_scope_push();
    weft_tensor *wt = weft_t(w);
    weft_tensor *y = b ? weft_sparse_addmm(b, x, wt, 1.0, 1.0) : weft_sparse_mm(x, wt);
    weft_tensor_retain(y);
    weft_scope_pop();
    return weft_autorelease(y);
}

static int sparse_linear_repr(const weft_module *m, char *buf, size_t size)
{
    const struct sparse_linear_state *st = weft_module_state(m);
    return snprintf(buf, size, "in_features=%lld, out_features=%lld, bias=%s",
                    (long long)st->in_features, (long long)st->out_features,
                    weft_module_parameter(m, "bias") ? "True" : "False");
}

static const struct weft_module_type sparse_linear_type = {
    .abi_version = WEFT_PLUGIN_ABI_VERSION,
    .struct_size = sizeof(struct weft_module_type),
    .name = "SparseLinear",
    .forward = sparse_linear_forward,
    .free_state = free,
    .extra_repr = sparse_linear_repr,
};

/* A float32 cpu parameter drawn from U(-bound, bound), as nn.Linear's reset_parameters. */
static int add_uniform_param(weft_module *m, const char *name, int ndim, const int64_t *shape,
                             double bound)
{
    weft_scope_push();
    weft_tensor *t = weft_empty(ndim, shape, WEFT_F32, WEFT_CPU);
    int rc = t ? 0 : weft_error_code();
    if (rc == 0 && weft_tensor_numel(t) > 0)
        rc = weft_uniform_(t, -bound, bound);
    if (rc == 0)
        rc = weft_module_register_parameter(m, name, t);
    weft_scope_pop();
    return rc;
}

static weft_module *sparse_linear_new(int64_t in_features, int64_t out_features, bool bias)
{
    struct sparse_linear_state *st = malloc(sizeof *st);
    if (!st) {
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory for a SparseLinear");
        return NULL;
    }
    *st = (struct sparse_linear_state){in_features, out_features};
    weft_module *m = weft_module_new(&sparse_linear_type, st);
    if (!m) {
        free(st);
        return NULL;
    }
    /* kaiming_uniform_(a=sqrt(5)) and Linear's bias rule both come to 1/sqrt(fan_in). */
    double bound = 1.0 / sqrt((double)in_features);
    int rc = add_uniform_param(m, "weight", 2, (int64_t[]){out_features, in_features}, bound);
    if (rc == 0 && bias)
        rc = add_uniform_param(m, "bias", 1, (int64_t[]){out_features}, bound);
    if (rc != 0) {
        weft_module_free(m);
        return NULL;
    }
    return m;
}

/* A field name from a key of the sparse_linear section. */
static int field_key(struct weft_config *cfg, const char *s, const char *key, char *out)
{
    const char *v = weft_config_string(cfg, s, key, key);
    if (!*v || strlen(v) >= WEFT_DATASET_NAME_MAX)
        return weft_error_set(WEFT_ERR_CONFIG, "%s: [%s] %s = '%s': expected the name of a field "
                                               "of the data (at most %d characters)",
                              weft_config_name(cfg), s, key, v, WEFT_DATASET_NAME_MAX - 1);
    snprintf(out, WEFT_DATASET_NAME_MAX, "%s", v);
    return 0;
}

static weft_module *build_sparse_linear(struct weft_config *cfg, const char *s, bool first,
                                        struct train_inputs *in)
{
    int64_t a, b;
    bool bias;
    if (need_int(cfg, s, "in_features", &a) || need_int(cfg, s, "out_features", &b) ||
        weft_config_bool(cfg, s, "bias", true, &bias) ||
        field_key(cfg, s, "indices", in->indices_name) ||
        field_key(cfg, s, "values", in->values_name))
        return NULL;
    if (!first) {
        weft_error_set(WEFT_ERR_CONFIG, "%s: [%s] type = sparse_linear must be the model's first "
                                        "layer: its input is the batch's sparse fields",
                       weft_config_name(cfg), s);
        return NULL;
    }
    in->sparse = true;
    in->in_features = a;
    snprintf(in->layer, sizeof in->layer, "%s", s);
    return sparse_linear_new(a, b, bias);
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
    if (in->target < 0)
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
    if (in->target >= weft_dataset_num_fields(ds)) {
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
    if (!in->sparse)
        return weft_autorelease(weft_tensor_retain(fields[in->input]));
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

static weft_module *build_layer(struct weft_config *cfg, const char *s, int type)
{
    int64_t a = 0, b = 0;
    bool flag = true;
    double x = 0, y = 0;
    switch ((enum layer_type)type) {
    case L_LINEAR:
        if (need_int(cfg, s, "in_features", &a) || need_int(cfg, s, "out_features", &b) ||
            weft_config_bool(cfg, s, "bias", true, &flag))
            return NULL;
        return weft_nn_linear(a, b, flag);
    case L_CONV2D: {
        struct weft_conv2d_options o = {0};
        int64_t stride[2], pad[2], dil[2];
        if (need_int(cfg, s, "in_channels", &o.in_channels) ||
            need_int(cfg, s, "out_channels", &o.out_channels) ||
            pair(cfg, s, "kernel_size", 0, o.kernel_size) || pair(cfg, s, "stride", 1, stride) ||
            pair(cfg, s, "padding", 0, pad) || pair(cfg, s, "dilation", 1, dil) ||
            weft_config_int(cfg, s, "groups", 1, &o.params.groups) ||
            weft_config_bool(cfg, s, "bias", true, &flag))
            return NULL;
        if (o.kernel_size[0] == 0) {
            weft_error_set(WEFT_ERR_CONFIG, "%s: [%s] missing required key 'kernel_size'",
                           weft_config_name(cfg), s);
            return NULL;
        }
        memcpy(o.params.stride, stride, sizeof stride);
        memcpy(o.params.padding, pad, sizeof pad);
        memcpy(o.params.dilation, dil, sizeof dil);
        o.bias = flag;
        return weft_nn_conv2d(&o);
    }
    case L_MAXPOOL2D: return build_pool(cfg, s, true);
    case L_AVGPOOL2D: return build_pool(cfg, s, false);
    case L_ADAPTIVE_AVGPOOL2D: {
        int64_t size[2];
        if (pair(cfg, s, "output_size", 1, size))
            return NULL;
        return weft_nn_adaptive_avg_pool2d(size[0], size[1]);
    }
    case L_BATCHNORM1D:
    case L_BATCHNORM2D:
        if (need_int(cfg, s, "num_features", &a) || weft_config_double(cfg, s, "eps", 1e-5, &x) ||
            weft_config_double(cfg, s, "momentum", 0.1, &y))
            return NULL;
        return type == L_BATCHNORM1D ? weft_nn_batch_norm1d(a, x, y) : weft_nn_batch_norm2d(a, x, y);
    case L_LAYERNORM: {
        int64_t shape[2];
        if (pair(cfg, s, "normalized_shape", 0, shape) || weft_config_double(cfg, s, "eps", 1e-5, &x) ||
            weft_config_bool(cfg, s, "elementwise_affine", true, &flag))
            return NULL;
        const char *text = weft_config_string(cfg, s, "normalized_shape", "");
        int nd = strchr(text, ',') ? 2 : 1;
        return weft_nn_layer_norm(nd, nd == 2 ? shape : shape + 1, x, flag);
    }
    case L_DROPOUT:
        if (weft_config_double(cfg, s, "p", 0.5, &x))
            return NULL;
        return weft_nn_dropout(x);
    case L_EMBEDDING:
        if (need_int(cfg, s, "num_embeddings", &a) || need_int(cfg, s, "embedding_dim", &b))
            return NULL;
        return weft_nn_embedding(a, b);
    case L_FLATTEN:
        if (weft_config_int(cfg, s, "start_dim", 1, &a) || weft_config_int(cfg, s, "end_dim", -1, &b))
            return NULL;
        return weft_nn_flatten((int)a, (int)b);
    case L_RELU: return weft_nn_relu();
    case L_LEAKY_RELU:
        if (weft_config_double(cfg, s, "negative_slope", 0.01, &x))
            return NULL;
        return weft_nn_leaky_relu(x);
    case L_GELU: return weft_nn_gelu();
    case L_TANH: return weft_nn_tanh();
    case L_SIGMOID: return weft_nn_sigmoid();
    case L_SOFTMAX:
    case L_LOG_SOFTMAX:
        if (weft_config_int(cfg, s, "dim", 1, &a))
            return NULL;
        return type == L_SOFTMAX ? weft_nn_softmax((int)a) : weft_nn_log_softmax((int)a);
    case L_SPARSE_LINEAR: break; /* build_sparse_linear */
    }
    return NULL;
}

weft_module *train_build_model(struct weft_config *cfg, struct train_inputs *inputs)
{
    memset(inputs, 0, sizeof *inputs);
    static const char *const kinds[] = {"sequential", NULL};
    int kind;
    if (weft_config_choice(cfg, "model", "type", kinds, 0, &kind) != 0)
        return NULL;
    weft_module *seq = weft_nn_sequential(0, NULL);
    if (!seq)
        return NULL;
    int count = 0;
    for (const char *const *sec = weft_config_sections(cfg); *sec; sec++) {
        if (strncmp(*sec, "layer.", 6) != 0)
            continue;
        int type;
        if (!weft_config_has(cfg, *sec, "type")) {
            weft_error_set(WEFT_ERR_CONFIG, "%s: [%s] missing required key 'type'",
                           weft_config_name(cfg), *sec);
            goto fail;
        }
        if (weft_config_choice(cfg, *sec, "type", layer_types, 0, &type) != 0)
            goto fail;
        weft_module *layer = type == L_SPARSE_LINEAR
                                 ? build_sparse_linear(cfg, *sec, count == 0, inputs)
                                 : build_layer(cfg, *sec, type);
        if (!layer) {
            if (weft_error_code() == WEFT_OK)
                weft_error_set(WEFT_ERR_CONFIG, "%s: [%s] could not build the layer",
                               weft_config_name(cfg), *sec);
            else if (weft_error_code() != WEFT_ERR_CONFIG) {
                /* A constructor's argument error: say which section it came from. */
                char msg[1024];
                snprintf(msg, sizeof msg, "%s", weft_error_message());
                weft_error_clear();
                weft_error_set(WEFT_ERR_CONFIG, "%s: [%s] %s", weft_config_name(cfg), *sec, msg);
            }
            goto fail;
        }
        if (weft_nn_sequential_append(seq, layer) != 0)
            goto fail;
        count++;
    }
    if (count == 0) {
        weft_error_set(WEFT_ERR_CONFIG, "%s: the model has no layers: add [layer.<name>] sections "
                                        "with a 'type' key (one of linear, conv2d, relu, ...)",
                       weft_config_name(cfg));
        goto fail;
    }
    return seq;
fail:
    weft_module_free(seq);
    return NULL;
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

weft_tensor *train_loss_compute(const struct train_loss *loss, weft_tensor *output,
                                weft_tensor *target)
{
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
