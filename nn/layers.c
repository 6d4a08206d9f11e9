/* nn/layers.c: the torch.nn layers as modules: PyTorch's constructor defaults,
 * argument checks, initialisation and extra_repr texts, forwarding to the functional
 * layer (weft_linear, weft_conv2d, ...). Parameters are float32 on the cpu, drawn from
 * the Philox stream, so weft_manual_seed makes a model reproducible. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"
#include "internal.h"
#include "layer_state.h"
#include "weft/init.h"
#include "weft/nn.h"
#include "weft/ops.h"

/* ---- text as Python prints it ----------------------------------------------------- */

static const char *py_bool(bool b)
{
    return b ? "True" : "False";
}

/* A pair as PyTorch's _pair stores it: "(3, 3)". */
static const char *py_pair(const int64_t v[2], char *buf, size_t size)
{
    snprintf(buf, size, "(%lld, %lld)", (long long)v[0], (long long)v[1]);
    return buf;
}

/* A pooling size as the user would have passed it: "2" when both equal, else "(2, 3)". */
static const char *py_size(const int64_t v[2], char *buf, size_t size)
{
    if (v[0] == v[1])
        snprintf(buf, size, "%lld", (long long)v[0]);
    else
        py_pair(v, buf, size);
    return buf;
}

/* ---- building modules ------------------------------------------------------------- */

/* A built-in type: its INI name, PyTorch's class name, and create() from layer_options.c. */
#define MODULE_TYPE(ini, class, forward_fn, repr_fn, create_fn)                               \
    {.base = WEFT_VTABLE(WEFT_KIND_MODULE, ini, struct weft_module_type), .class_name = class, \
     .forward = forward_fn, .free_state = free, .extra_repr = repr_fn, .create = create_fn,  \
     .onnx_export = nn_onnx_export_builtin}

/* A module of type owning a malloc'd copy of state (size 0: no state). */
static weft_module *module_with(const struct weft_module_type *type, const void *state,
                                size_t size)
{
    void *copy = NULL;
    if (size) {
        copy = malloc(size);
        if (!copy) {
            weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory for a %s", type->class_name);
            return NULL;
        }
        memcpy(copy, state, size);
    }
    weft_module *m = weft_module_new(type, copy);
    if (!m)
        free(copy);
    return m;
}

/* m, or NULL after freeing it when rc reports a failure. */
static weft_module *built(weft_module *m, int rc)
{
    if (rc == 0)
        return m;
    weft_module_free(m);
    return NULL;
}

enum init { INIT_UNIFORM, INIT_NORMAL, INIT_ONES, INIT_ZEROS };

/* A new float32 cpu tensor initialised as `init` (uniform on [-bound, bound]). Call
 * inside a scope. */
static weft_tensor *init_tensor(int ndim, const int64_t *shape, enum init init, double bound)
{
    switch (init) {
    case INIT_ONES: return weft_ones(ndim, shape, WEFT_F32, WEFT_CPU);
    case INIT_ZEROS: return weft_zeros(ndim, shape, WEFT_F32, WEFT_CPU);
    default: break;
    }
    weft_tensor *t = nn_param_storage(ndim, shape);
    if (!t || weft_tensor_numel(t) == 0) /* kaiming_uniform_ on no elements is a no-op */
        return t;
    int rc = init == INIT_NORMAL ? weft_nn_init_normal_(t, 0.0, 1.0)
                                 : weft_nn_init_uniform_(t, -bound, bound);
    return rc == 0 ? t : NULL;
}

static int add_param(weft_module *m, const char *name, int ndim, const int64_t *shape,
                     enum init init, double bound)
{
    weft_tensor *t = init_tensor(ndim, shape, init, bound);
    return t ? weft_module_register_parameter(m, name, t) : weft_error_code();
}

static int add_buffer(weft_module *m, const char *name, weft_tensor *t)
{
    return t ? weft_module_register_buffer(m, name, t) : weft_error_code();
}

/* kaiming_uniform_(a=sqrt(5)) and the bias rule of Linear and Conv2d both come to
 * U(-1/sqrt(fan_in), 1/sqrt(fan_in)); no fan_in leaves nothing to scale by. */
static double fan_in_bound(int64_t fan_in)
{
    return fan_in > 0 ? 1.0 / sqrt((double)fan_in) : 0.0;
}

/* ---- Linear ----------------------------------------------------------------------- */

static weft_tensor *linear_forward(weft_module *m, weft_tensor *x)
{
    return weft_linear(x, weft_module_parameter(m, "weight"), weft_module_parameter(m, "bias"));
}

static int linear_repr(const weft_module *m, char *buf, size_t size)
{
    const struct linear_state *s = weft_module_state(m);
    return snprintf(buf, size, "in_features=%lld, out_features=%lld, bias=%s",
                    (long long)s->in_features, (long long)s->out_features,
                    py_bool(weft_module_parameter(m, "bias") != NULL));
}

const struct weft_module_type linear_type =
    MODULE_TYPE("linear", "Linear", linear_forward, linear_repr, nn_create_linear);

bool nn_is_linear(const weft_module *m)
{
    return weft_module_type(m) == &linear_type;
}

weft_module *weft_nn_linear(int64_t in_features, int64_t out_features, bool bias)
{
    struct linear_state s = {in_features, out_features};
    weft_module *m = module_with(&linear_type, &s, sizeof s);
    if (!m)
        return NULL;
    double bound = fan_in_bound(in_features);
    weft_scope_push();
    int rc = add_param(m, "weight", 2, (int64_t[]){out_features, in_features}, INIT_UNIFORM, bound);
    if (rc == 0 && bias)
        rc = add_param(m, "bias", 1, (int64_t[]){out_features}, INIT_UNIFORM, bound);
    weft_scope_pop();
    return built(m, rc);
}

/* ---- Conv2d ----------------------------------------------------------------------- */

static weft_tensor *conv2d_forward(weft_module *m, weft_tensor *x)
{
    const struct weft_conv2d_options *o = weft_module_state(m);
    return weft_conv2d(x, weft_module_parameter(m, "weight"), weft_module_parameter(m, "bias"),
                       &o->params);
}

static int conv2d_repr(const weft_module *m, char *buf, size_t size)
{
    const struct weft_conv2d_options *o = weft_module_state(m);
    const struct weft_conv2d_params *p = &o->params;
    char k[48], st[48], pad[48], dil[48];
    int n = snprintf(buf, size, "%lld, %lld, kernel_size=%s, stride=%s", (long long)o->in_channels,
                     (long long)o->out_channels, py_pair(o->kernel_size, k, sizeof k),
                     py_pair(p->stride, st, sizeof st));
    size_t used = (size_t)n;
#define APPEND(...)                                                                           \
    used += (size_t)snprintf(buf + (used < size ? used : size), used < size ? size - used : 0, \
                             __VA_ARGS__)
    if (p->padding[0] != 0 || p->padding[1] != 0)
        APPEND(", padding=%s", py_pair(p->padding, pad, sizeof pad));
    if (p->dilation[0] != 1 || p->dilation[1] != 1)
        APPEND(", dilation=%s", py_pair(p->dilation, dil, sizeof dil));
    if (p->groups != 1)
        APPEND(", groups=%lld", (long long)p->groups);
    if (!weft_module_parameter(m, "bias"))
        APPEND(", bias=False");
#undef APPEND
    return (int)used;
}

const struct weft_module_type conv2d_type =
    MODULE_TYPE("conv2d", "Conv2d", conv2d_forward, conv2d_repr, nn_create_conv2d);

weft_module *weft_nn_conv2d(const struct weft_conv2d_options *options)
{
    if (!options) {
        weft_error_set(WEFT_ERR_VALUE, "weft_nn_conv2d: options is NULL");
        return NULL;
    }
    struct weft_conv2d_options o = *options;
    struct weft_conv2d_params *p = &o.params;
    for (int i = 0; i < 2; i++) {
        p->stride[i] = p->stride[i] ? p->stride[i] : 1;
        p->dilation[i] = p->dilation[i] ? p->dilation[i] : 1;
    }
    p->groups = p->groups ? p->groups : 1;
    if (p->groups <= 0) {
        weft_error_set(WEFT_ERR_VALUE, "groups must be a positive integer");
        return NULL;
    }
    if (o.in_channels % p->groups != 0) {
        weft_error_set(WEFT_ERR_VALUE, "in_channels must be divisible by groups");
        return NULL;
    }
    if (o.out_channels % p->groups != 0) {
        weft_error_set(WEFT_ERR_VALUE, "out_channels must be divisible by groups");
        return NULL;
    }
    weft_module *m = module_with(&conv2d_type, &o, sizeof o);
    if (!m)
        return NULL;
    int64_t shape[4] = {o.out_channels, o.in_channels / p->groups, o.kernel_size[0],
                        o.kernel_size[1]};
    double bound = fan_in_bound(shape[1] * shape[2] * shape[3]);
    weft_scope_push();
    int rc = add_param(m, "weight", 4, shape, INIT_UNIFORM, bound);
    if (rc == 0 && o.bias)
        rc = add_param(m, "bias", 1, &o.out_channels, INIT_UNIFORM, bound);
    weft_scope_pop();
    return built(m, rc);
}

const struct weft_conv2d_options *weft_nn_conv2d_options(const weft_module *m)
{
    return weft_module_type(m) == &conv2d_type ? weft_module_state(m) : NULL;
}

/* ---- pooling ---------------------------------------------------------------------- */

static weft_tensor *max_pool2d_forward(weft_module *m, weft_tensor *x)
{
    return weft_max_pool2d(x, weft_module_state(m));
}

static weft_tensor *avg_pool2d_forward(weft_module *m, weft_tensor *x)
{
    return weft_avg_pool2d(x, weft_module_state(m));
}

static int max_pool2d_repr(const weft_module *m, char *buf, size_t size)
{
    const struct weft_pool2d_params *p = weft_module_state(m);
    char k[48], s[48], pad[48], d[48];
    return snprintf(buf, size, "kernel_size=%s, stride=%s, padding=%s, dilation=%s, ceil_mode=%s",
                    py_size(p->kernel, k, sizeof k), py_size(p->stride, s, sizeof s),
                    py_size(p->padding, pad, sizeof pad), py_size(p->dilation, d, sizeof d),
                    py_bool(p->ceil_mode));
}

static int avg_pool2d_repr(const weft_module *m, char *buf, size_t size)
{
    const struct weft_pool2d_params *p = weft_module_state(m);
    char k[48], s[48], pad[48];
    return snprintf(buf, size, "kernel_size=%s, stride=%s, padding=%s",
                    py_size(p->kernel, k, sizeof k), py_size(p->stride, s, sizeof s),
                    py_size(p->padding, pad, sizeof pad));
}

const struct weft_module_type max_pool2d_type =
    MODULE_TYPE("maxpool2d", "MaxPool2d", max_pool2d_forward, max_pool2d_repr,
                nn_create_max_pool2d);
const struct weft_module_type avg_pool2d_type =
    MODULE_TYPE("avgpool2d", "AvgPool2d", avg_pool2d_forward, avg_pool2d_repr,
                nn_create_avg_pool2d);

/* The params with PyTorch's defaults filled in (stride = kernel, dilation 1). */
static weft_module *pool2d(const struct weft_module_type *type,
                           const struct weft_pool2d_params *params)
{
    if (!params) {
        weft_error_set(WEFT_ERR_TYPE,
                       "%s.__init__() missing 1 required positional argument: 'kernel_size'",
                       type->class_name);
        return NULL;
    }
    struct weft_pool2d_params p = *params;
    for (int i = 0; i < 2; i++) {
        p.stride[i] = p.stride[i] ? p.stride[i] : p.kernel[i];
        p.dilation[i] = p.dilation[i] ? p.dilation[i] : 1;
    }
    return module_with(type, &p, sizeof p);
}

weft_module *weft_nn_max_pool2d(const struct weft_pool2d_params *params)
{
    return pool2d(&max_pool2d_type, params);
}

const struct weft_pool2d_params *weft_nn_max_pool2d_params(const weft_module *m)
{
    return weft_module_type(m) == &max_pool2d_type ? weft_module_state(m) : NULL;
}

weft_module *weft_nn_avg_pool2d(const struct weft_pool2d_params *params)
{
    return pool2d(&avg_pool2d_type, params);
}

static weft_tensor *adaptive_avg_pool2d_forward(weft_module *m, weft_tensor *x)
{
    const int64_t *size = weft_module_state(m);
    return weft_adaptive_avg_pool2d(x, size[0], size[1]);
}

static int adaptive_avg_pool2d_repr(const weft_module *m, char *buf, size_t size)
{
    char out[48];
    return snprintf(buf, size, "output_size=%s", py_size(weft_module_state(m), out, sizeof out));
}

const struct weft_module_type adaptive_avg_pool2d_type =
    MODULE_TYPE("adaptive_avgpool2d", "AdaptiveAvgPool2d", adaptive_avg_pool2d_forward,
                adaptive_avg_pool2d_repr, nn_create_adaptive_avg_pool2d);

weft_module *weft_nn_adaptive_avg_pool2d(int64_t out_h, int64_t out_w)
{
    int64_t size[2] = {out_h, out_w};
    return module_with(&adaptive_avg_pool2d_type, size, sizeof size);
}

/* ---- BatchNorm -------------------------------------------------------------------- */

/* PyTorch's _check_input_dim. */
static int batch_norm_check_dim(const struct batch_norm_state *s, const weft_tensor *x)
{
    if (s->spatial_dims == 1 && x->ndim != 2 && x->ndim != 3)
        return weft_error_set(WEFT_ERR_VALUE, "expected 2D or 3D input (got %dD input)", x->ndim);
    if (s->spatial_dims == 2 && x->ndim != 4)
        return weft_error_set(WEFT_ERR_VALUE, "expected 4D input (got %dD input)", x->ndim);
    return 0;
}

static weft_tensor *batch_norm_forward(weft_module *m, weft_tensor *x)
{
    const struct batch_norm_state *s = weft_module_state(m);
    if (batch_norm_check_dim(s, x) != 0)
        return NULL;
    bool training = weft_module_is_training(m);
    if (training) {
        bool prev = weft_no_grad_begin();
        weft_tensor *n = weft_add_scalar_(weft_module_buffer(m, "num_batches_tracked"), 1.0);
        weft_grad_mode_restore(prev);
        if (!n)
            return NULL;
    }
    return weft_batch_norm(x, weft_module_buffer(m, "running_mean"),
                           weft_module_buffer(m, "running_var"), weft_module_parameter(m, "weight"),
                           weft_module_parameter(m, "bias"), training, s->momentum, s->eps);
}

static int batch_norm_repr(const weft_module *m, char *buf, size_t size)
{
    const struct batch_norm_state *s = weft_module_state(m);
    char eps[64], momentum[64];
    return snprintf(buf, size, "%lld, eps=%s, momentum=%s, affine=True, track_running_stats=True",
                    (long long)s->num_features, weft_repr_float(s->eps, eps, sizeof eps),
                    weft_repr_float(s->momentum, momentum, sizeof momentum));
}

const struct weft_module_type batch_norm1d_type =
    MODULE_TYPE("batchnorm1d", "BatchNorm1d", batch_norm_forward, batch_norm_repr,
                nn_create_batch_norm1d);
const struct weft_module_type batch_norm2d_type =
    MODULE_TYPE("batchnorm2d", "BatchNorm2d", batch_norm_forward, batch_norm_repr,
                nn_create_batch_norm2d);

/* _NormBase: parameters weight (1) and bias (0), then buffers running_mean (0),
 * running_var (1) and num_batches_tracked (int64 0), in that order. */
static weft_module *batch_norm(const struct weft_module_type *type, int spatial_dims,
                               int64_t num_features, double eps, double momentum)
{
    struct batch_norm_state s = {num_features, eps, momentum, spatial_dims};
    weft_module *m = module_with(type, &s, sizeof s);
    if (!m)
        return NULL;
    weft_scope_push();
    int rc = add_param(m, "weight", 1, &num_features, INIT_ONES, 0);
    if (rc == 0)
        rc = add_param(m, "bias", 1, &num_features, INIT_ZEROS, 0);
    if (rc == 0)
        rc = add_buffer(m, "running_mean", weft_zeros(1, &num_features, WEFT_F32, WEFT_CPU));
    if (rc == 0)
        rc = add_buffer(m, "running_var", weft_ones(1, &num_features, WEFT_F32, WEFT_CPU));
    if (rc == 0)
        rc = add_buffer(m, "num_batches_tracked", weft_zeros(0, NULL, WEFT_I64, WEFT_CPU));
    weft_scope_pop();
    return built(m, rc);
}

weft_module *weft_nn_batch_norm1d(int64_t num_features, double eps, double momentum)
{
    return batch_norm(&batch_norm1d_type, 1, num_features, eps, momentum);
}

weft_module *weft_nn_batch_norm2d(int64_t num_features, double eps, double momentum)
{
    return batch_norm(&batch_norm2d_type, 2, num_features, eps, momentum);
}

double weft_nn_batch_norm_eps(const weft_module *m)
{
    const struct weft_module_type *t = weft_module_type(m);
    if (t != &batch_norm1d_type && t != &batch_norm2d_type)
        return -1.0;
    return ((const struct batch_norm_state *)weft_module_state(m))->eps;
}

/* ---- LayerNorm -------------------------------------------------------------------- */

static weft_tensor *layer_norm_forward(weft_module *m, weft_tensor *x)
{
    const struct layer_norm_state *s = weft_module_state(m);
    return weft_layer_norm(x, s->ndims, s->shape, weft_module_parameter(m, "weight"),
                           weft_module_parameter(m, "bias"), s->eps);
}

static int layer_norm_repr(const weft_module *m, char *buf, size_t size)
{
    const struct layer_norm_state *s = weft_module_state(m);
    /* normalized_shape is a Python tuple: "(10,)", "(2, 3)". */
    char shape[240] = "(";
    size_t used = 1;
    for (int i = 0; i < s->ndims; i++)
        used += (size_t)snprintf(shape + used, sizeof shape - used, i ? ", %lld" : "%lld",
                                 (long long)s->shape[i]);
    snprintf(shape + used, sizeof shape - used, "%s)", s->ndims == 1 ? "," : "");
    char eps[64];
    return snprintf(buf, size, "%s, eps=%s, elementwise_affine=%s", shape,
                    weft_repr_float(s->eps, eps, sizeof eps), py_bool(s->elementwise_affine));
}

const struct weft_module_type layer_norm_type =
    MODULE_TYPE("layernorm", "LayerNorm", layer_norm_forward, layer_norm_repr,
                nn_create_layer_norm);

weft_module *weft_nn_layer_norm(int ndims, const int64_t *normalized_shape, double eps,
                                bool elementwise_affine)
{
    if (ndims > 0 && !normalized_shape) {
        weft_error_set(WEFT_ERR_VALUE, "weft_nn_layer_norm: normalized_shape is NULL");
        return NULL;
    }
    if (weft_check_shape(ndims, normalized_shape) != 0)
        return NULL;
    struct layer_norm_state s = {.ndims = ndims, .eps = eps,
                                 .elementwise_affine = elementwise_affine};
    if (ndims > 0)
        memcpy(s.shape, normalized_shape, (size_t)ndims * sizeof *normalized_shape);
    weft_module *m = module_with(&layer_norm_type, &s, sizeof s);
    if (!m || !elementwise_affine)
        return m;
    weft_scope_push();
    int rc = add_param(m, "weight", ndims, s.shape, INIT_ONES, 0);
    if (rc == 0)
        rc = add_param(m, "bias", ndims, s.shape, INIT_ZEROS, 0);
    weft_scope_pop();
    return built(m, rc);
}

/* ---- Embedding -------------------------------------------------------------------- */

static weft_tensor *embedding_forward(weft_module *m, weft_tensor *indices)
{
    const struct embedding_state *s = weft_module_state(m);
    weft_tensor *w = weft_module_parameter(m, "weight");
    return s->padding_idx < 0 ? weft_embedding(indices, w)
                              : weft_embedding_padding(indices, w, s->padding_idx);
}

static int embedding_repr(const weft_module *m, char *buf, size_t size)
{
    const struct embedding_state *s = weft_module_state(m);
    int n = snprintf(buf, size, "%lld, %lld", (long long)s->num_embeddings,
                     (long long)s->embedding_dim);
    if (s->padding_idx >= 0 && n >= 0 && (size_t)n < size)
        n += snprintf(buf + n, size - (size_t)n, ", padding_idx=%lld", (long long)s->padding_idx);
    return n;
}

const struct weft_module_type embedding_type =
    MODULE_TYPE("embedding", "Embedding", embedding_forward, embedding_repr,
                nn_create_embedding);

/* pad: the row as given (negative counts from the end), or NULL for None */
static weft_module *embedding(int64_t num_embeddings, int64_t embedding_dim, const int64_t *pad)
{
    struct embedding_state s = {num_embeddings, embedding_dim, -1};
    if (pad) {
        /* nn.Embedding's assertion */
        if (*pad >= num_embeddings || *pad < -num_embeddings) {
            weft_error_set(WEFT_ERR_VALUE, "Padding_idx must be within num_embeddings");
            return NULL;
        }
        s.padding_idx = *pad < 0 ? *pad + num_embeddings : *pad;
    }
    int64_t shape[2] = {num_embeddings, embedding_dim};
    weft_module *m = module_with(&embedding_type, &s, sizeof s);
    if (!m)
        return NULL;
    weft_scope_push();
    int rc = add_param(m, "weight", 2, shape, INIT_NORMAL, 0);
    if (rc == 0 && s.padding_idx >= 0) { /* _fill_padding_idx_with_zero, under no_grad */
        bool prev = weft_no_grad_begin();
        weft_tensor *row = weft_select(weft_module_parameter(m, "weight"), 0, s.padding_idx);
        rc = row && weft_fill_(row, 0) ? 0 : weft_error_code();
        weft_grad_mode_restore(prev);
    }
    weft_scope_pop();
    return built(m, rc);
}

weft_module *weft_nn_embedding(int64_t num_embeddings, int64_t embedding_dim)
{
    return embedding(num_embeddings, embedding_dim, NULL);
}

weft_module *weft_nn_embedding_padding(int64_t num_embeddings, int64_t embedding_dim,
                                       int64_t padding_idx)
{
    return embedding(num_embeddings, embedding_dim, &padding_idx);
}

/* ---- Dropout, Flatten ------------------------------------------------------------- */

static weft_tensor *dropout_forward(weft_module *m, weft_tensor *x)
{
    const double *p = weft_module_state(m);
    return weft_dropout(x, *p, weft_module_is_training(m));
}

static int dropout_repr(const weft_module *m, char *buf, size_t size)
{
    char p[64];
    return snprintf(buf, size, "p=%s, inplace=False",
                    weft_repr_float(*(const double *)weft_module_state(m), p, sizeof p));
}

const struct weft_module_type dropout_type =
    MODULE_TYPE("dropout", "Dropout", dropout_forward, dropout_repr, nn_create_dropout);

weft_module *weft_nn_dropout(double p)
{
    if (!(p >= 0.0 && p <= 1.0)) {
        char text[64];
        weft_error_set(WEFT_ERR_VALUE, "dropout probability has to be between 0 and 1, but got %s",
                       weft_repr_float(p, text, sizeof text));
        return NULL;
    }
    return module_with(&dropout_type, &p, sizeof p);
}

static weft_tensor *flatten_forward(weft_module *m, weft_tensor *x)
{
    const int *dims = weft_module_state(m);
    return weft_flatten(x, dims[0], dims[1]);
}

static int flatten_repr(const weft_module *m, char *buf, size_t size)
{
    const int *dims = weft_module_state(m);
    return snprintf(buf, size, "start_dim=%d, end_dim=%d", dims[0], dims[1]);
}

const struct weft_module_type flatten_type =
    MODULE_TYPE("flatten", "Flatten", flatten_forward, flatten_repr, nn_create_flatten);

weft_module *weft_nn_flatten(int start_dim, int end_dim)
{
    int dims[2] = {start_dim, end_dim};
    return module_with(&flatten_type, dims, sizeof dims);
}

const int *weft_nn_flatten_dims(const weft_module *m)
{
    return weft_module_type(m) == &flatten_type ? weft_module_state(m) : NULL;
}

/* ---- activations ------------------------------------------------------------------ */

static weft_tensor *relu_forward(weft_module *m, weft_tensor *x)
{
    (void)m;
    return weft_relu(x);
}

/* State: the int approximate (enum weft_gelu_approximate). */
static weft_tensor *gelu_forward(weft_module *m, weft_tensor *x)
{
    return weft_gelu_approximate(x, *(const int *)weft_module_state(m));
}

static int gelu_repr(const weft_module *m, char *buf, size_t size)
{
    bool tanh_form = *(const int *)weft_module_state(m) == WEFT_GELU_TANH;
    return snprintf(buf, size, "approximate='%s'", tanh_form ? "tanh" : "none");
}

static weft_tensor *tanh_forward(weft_module *m, weft_tensor *x)
{
    (void)m;
    return weft_tanh(x);
}

static weft_tensor *sigmoid_forward(weft_module *m, weft_tensor *x)
{
    (void)m;
    return weft_sigmoid(x);
}

static weft_tensor *leaky_relu_forward(weft_module *m, weft_tensor *x)
{
    return weft_leaky_relu(x, *(const double *)weft_module_state(m));
}

static int leaky_relu_repr(const weft_module *m, char *buf, size_t size)
{
    char slope[64];
    return snprintf(buf, size, "negative_slope=%s",
                    weft_repr_float(*(const double *)weft_module_state(m), slope, sizeof slope));
}

static weft_tensor *softmax_forward(weft_module *m, weft_tensor *x)
{
    return weft_softmax(x, *(const int *)weft_module_state(m));
}

static weft_tensor *log_softmax_forward(weft_module *m, weft_tensor *x)
{
    return weft_log_softmax(x, *(const int *)weft_module_state(m));
}

static int softmax_repr(const weft_module *m, char *buf, size_t size)
{
    return snprintf(buf, size, "dim=%d", *(const int *)weft_module_state(m));
}

const struct weft_module_type relu_type = MODULE_TYPE("relu", "ReLU", relu_forward, NULL, nn_create_relu);

bool nn_is_relu(const weft_module *m)
{
    return weft_module_type(m) == &relu_type;
}
const struct weft_module_type gelu_type = MODULE_TYPE("gelu", "GELU", gelu_forward, gelu_repr, nn_create_gelu);
int nn_gelu_form(const weft_module *m)
{
    return weft_module_type(m) == &gelu_type ? *(const int *)weft_module_state(m) : -1;
}
const struct weft_module_type tanh_type = MODULE_TYPE("tanh", "Tanh", tanh_forward, NULL, nn_create_tanh);
const struct weft_module_type sigmoid_type = MODULE_TYPE("sigmoid", "Sigmoid", sigmoid_forward, NULL, nn_create_sigmoid);
const struct weft_module_type leaky_relu_type =
    MODULE_TYPE("leaky_relu", "LeakyReLU", leaky_relu_forward, leaky_relu_repr,
                nn_create_leaky_relu);
const struct weft_module_type softmax_type =
    MODULE_TYPE("softmax", "Softmax", softmax_forward, softmax_repr, nn_create_softmax);
const struct weft_module_type log_softmax_type =
    MODULE_TYPE("log_softmax", "LogSoftmax", log_softmax_forward, softmax_repr,
                nn_create_log_softmax);

weft_module *weft_nn_relu(void)
{
    return module_with(&relu_type, NULL, 0);
}

weft_module *weft_nn_gelu(void)
{
    return weft_nn_gelu_approximate(WEFT_GELU_NONE);
}

weft_module *weft_nn_gelu_approximate(enum weft_gelu_approximate approximate)
{
    if (approximate != WEFT_GELU_NONE && approximate != WEFT_GELU_TANH) {
        weft_error_set(WEFT_ERR_VALUE, "approximate argument must be either none or tanh.");
        return NULL;
    }
    int state = approximate;
    return module_with(&gelu_type, &state, sizeof state);
}

weft_module *weft_nn_tanh(void)
{
    return module_with(&tanh_type, NULL, 0);
}

weft_module *weft_nn_sigmoid(void)
{
    return module_with(&sigmoid_type, NULL, 0);
}

weft_module *weft_nn_leaky_relu(double negative_slope)
{
    return module_with(&leaky_relu_type, &negative_slope, sizeof negative_slope);
}

weft_module *weft_nn_softmax(int dim)
{
    return module_with(&softmax_type, &dim, sizeof dim);
}

weft_module *weft_nn_log_softmax(int dim)
{
    return module_with(&log_softmax_type, &dim, sizeof dim);
}
