/* plugins/sparse/linear.c: SparseLinear, the module type "sparse_linear" an INI file names
 * ([layer.fc] type = sparse_linear), and weft_sparse_linear() for C programs: a Linear
 * whose input is a sparse CSR (or COO) matrix, for data such as libsvm files with a
 * million features of which each sample uses fifty. It computes x @ W^T + b with this
 * plugin's addmm, differentiable w.r.t. W and b. Its parameters are Linear's ("weight"
 * [out, in], "bias" [out], initialised alike), so a checkpoint loads into
 * torch.nn.Linear. A dense input falls back to weft_linear.
 *
 * From an INI file it also names the two fields of a batch it is built from (weft-train
 * hands samples out padded: "indices" with -1, "values" with 0), which
 * weft_sparse_linear_info() tells the program that feeds it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft/nn.h>
#include <weft/onnx.h>
#include <weft/ops.h>

#include "sparse_impl.h"

/* At most the dataset library's field names (weft/dataset.h's FIELD_NAME_MAX). */
#define FIELD_NAME_MAX 64

struct sparse_linear_state {
    int64_t in_features, out_features;
    char section[64];                  /* its [layer.*] section, for messages ("" in C) */
    char indices[FIELD_NAME_MAX];      /* the batch fields it reads ("" in C) */
    char values[FIELD_NAME_MAX];
};

/* x @ weight^T + bias for a sparse CSR (or COO) x [batch, in]: the SpMM takes weight^T
 * as a strided view, so no transposed copy is made; a dense x falls back to weft_linear. */
static weft_tensor *sparse_linear_forward(weft_module *m, weft_tensor *x)
{
    weft_tensor *w = weft_module_parameter(m, "weight"), *b = weft_module_parameter(m, "bias");
    if (!x || !w)
        return NULL;
    if (x->layout == WEFT_LAYOUT_STRIDED)
        return weft_linear(x, w, b);
    weft_scope_push();
    weft_tensor *wt = weft_t(w);
    weft_tensor *y = b ? sparse_api_addmm(b, x, wt, 1.0, 1.0) : sparse_api_mm(x, wt);
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

/* A field name from a key of the sparse_linear section. */
static int field_key(const weft_options *o, const char *key, char *out)
{
    const char *v = weft_options_string(o, key, key);
    if (!*v || strlen(v) >= FIELD_NAME_MAX)
        return weft_options_bad_value(o, key, "expected the name of a field of the data (at "
                                              "most %d characters)",
                                      FIELD_NAME_MAX - 1);
    snprintf(out, FIELD_NAME_MAX, "%s", v);
    return 0;
}

/* The ONNX form (weft/onnx.h). ONNX has sparse tensors only as stored constants, not as
 * inputs a runtime computes with, so the exported layer reads the padded rows the readers
 * hand out: indices int64 [batch, nnz] (-1 pads a row) and values float [batch, nnz],
 * named after its `indices` and `values` fields, and computes torch's
 * EmbeddingBag(mode='sum', per_sample_weights=values) over the weight's columns:
 * y[b] = sum_k values[b, k] * weight[:, indices[b, k]] + bias, the padding weighted 0.
 * The weight stays the state_dict's [out, in] tensor (a Gather along dim 1). */
static const char *sparse_linear_onnx(weft_module *m, struct weft_onnx_graph *g,
                                      const char *input)
{
    const struct sparse_linear_state *st = weft_module_state(m);
    (void)input; /* the dense [batch, in_features] form is not what the data holds */
    const struct weft_onnx_options *o = weft_onnx_graph_options(g);
    const char *params[2] = {weft_onnx_batch_param(g), "nnz"};
    const int64_t shape[2] = {o->batch, 0};
    /* a layer built in C names no fields: the readers' own names */
    const char *idx_name = st->indices[0] ? st->indices : "indices";
    const char *val_name = st->values[0] ? st->values : "values";
    const char *idx = weft_onnx_input(g, idx_name, WEFT_I64, 2, shape, params);
    const char *val = weft_onnx_input(g, val_name, WEFT_F32, 2, shape, params);
    const char *zero = weft_onnx_const_scalar(g, WEFT_I64, 0);
    const char *keep = weft_onnx_op(g, "GreaterOrEqual", 2, (const char *[]){idx, zero});
    const char *safe = weft_onnx_op(g, "Where", 3, (const char *[]){keep, idx, zero});
    const char *w = weft_onnx_op(g, "Where", 3, (const char *[]){keep, val,
                                                                 weft_onnx_const_scalar(g, WEFT_F32, 0)});
    const char *gather_in[2] = {weft_onnx_param(g, m, "weight"), safe};
    weft_onnx_node *cols = weft_onnx_node_add(g, "Gather", 2, gather_in, 1); /* [out, B, nnz] */
    weft_onnx_attr_int(cols, "axis", 1);
    const char *weighted = weft_onnx_op(g, "Mul", 2, (const char *[]){weft_onnx_node_output(cols, 0), w});
    weft_onnx_node *sum = weft_onnx_node_add(
        g, "ReduceSum", 2, (const char *[]){weighted, weft_onnx_const_ints(g, 1, (const int64_t[]){2})}, 1);
    weft_onnx_attr_int(sum, "keepdims", 0);
    weft_onnx_node *t = weft_onnx_node_add(g, "Transpose", 1,
                                           (const char *[]){weft_onnx_node_output(sum, 0)}, 1);
    weft_onnx_attr_ints(t, "perm", 2, (const int64_t[]){1, 0}); /* [B, out] */
    const char *y = weft_onnx_node_output(t, 0);
    if (!weft_module_parameter(m, "bias"))
        return y;
    return weft_onnx_op(g, "Add", 2, (const char *[]){y, weft_onnx_param(g, m, "bias")});
}

static weft_module *sparse_linear_create(const weft_options *o);

static const struct weft_module_type sparse_linear_type = {
    .base = WEFT_VTABLE(WEFT_KIND_MODULE, "sparse_linear", struct weft_module_type),
    .class_name = "SparseLinear",
    .forward = sparse_linear_forward,
    .free_state = free,
    .extra_repr = sparse_linear_repr,
    .create = sparse_linear_create,
    .onnx_export = sparse_linear_onnx,
};

/* A SparseLinear over st (taken), with Linear's initialisation. */
static weft_module *linear_new(struct sparse_linear_state *st, bool bias)
{
    weft_module *m = weft_module_new(&sparse_linear_type, st);
    if (!m) {
        free(st);
        return NULL;
    }
    /* kaiming_uniform_(a=sqrt(5)) and Linear's bias rule both come to 1/sqrt(fan_in). */
    double bound = 1.0 / sqrt((double)st->in_features);
    int rc = add_uniform_param(m, "weight", 2, (int64_t[]){st->out_features, st->in_features},
                               bound);
    if (rc == 0 && bias)
        rc = add_uniform_param(m, "bias", 1, (int64_t[]){st->out_features}, bound);
    if (rc != 0) {
        weft_module_free(m);
        return NULL;
    }
    return m;
}

static weft_module *sparse_linear_create(const weft_options *o)
{
    struct sparse_linear_state *st = calloc(1, sizeof *st);
    bool bias;
    if (!st) {
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory for a SparseLinear");
        return NULL;
    }
    snprintf(st->section, sizeof st->section, "%s", weft_options_section(o));
    if (weft_options_require(o, "in_features") ||
        weft_options_positive(o, "in_features", 0, &st->in_features) ||
        weft_options_require(o, "out_features") ||
        weft_options_positive(o, "out_features", 0, &st->out_features) ||
        weft_options_bool(o, "bias", true, &bias) || field_key(o, "indices", st->indices) ||
        field_key(o, "values", st->values)) {
        free(st);
        return NULL;
    }
    return linear_new(st, bias);
}

struct weft_module *sparse_linear(int64_t in_features, int64_t out_features, bool bias)
{
    if (in_features <= 0 || out_features <= 0) {
        weft_error_set(WEFT_ERR_VALUE,
                       "SparseLinear: in_features and out_features must be positive, got %lld "
                       "and %lld",
                       (long long)in_features, (long long)out_features);
        return NULL;
    }
    struct sparse_linear_state *st = calloc(1, sizeof *st);
    if (!st) {
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory for a SparseLinear");
        return NULL;
    }
    st->in_features = in_features;
    st->out_features = out_features;
    return linear_new(st, bias);
}

int sparse_linear_info(const struct weft_module *m, struct weft_sparse_linear_info *info)
{
    if (!m || weft_module_type(m) != &sparse_linear_type)
        return 1;
    const struct sparse_linear_state *st = weft_module_state(m);
    *info = (struct weft_sparse_linear_info){st->in_features, st->out_features, st->section,
                                             st->indices, st->values};
    return 0;
}

int sparse_linear_register(void)
{
    return weft_register(&sparse_linear_type) < 0 ? WEFT_ERR_PLUGIN : 0;
}
