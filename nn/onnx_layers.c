/* nn/onnx_layers.c: the onnx_export methods of layers.c's built-in types and of
 * Sequential, as torch.onnx (opset 17) writes the same torch.nn layers: Linear as Gemm,
 * Conv2d as Conv, the pools, BatchNorm as BatchNormalization (running statistics),
 * LayerNorm as LayerNormalization, Embedding as Gather, Flatten as Flatten or Reshape,
 * Dropout as nothing at all, the activations as their ops and GELU decomposed below
 * opset 20 (Gelu from 20 on). layers.c's types share one method that dispatches on the
 * type's registered name, so layers.c carries no more than the pointer. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "layer_state.h"
#include "onnx_internal.h"
#include "weft/ops.h"

/* The example of value x (for rank and static dims); an error when there is none. */
static weft_tensor *example(weft_onnx_graph *g, const char *x)
{
    weft_tensor *t = x ? weft_onnx_example(g, x) : NULL;
    if (x && !t)
        weft_error_set(WEFT_ERR_RUNTIME, "ONNX export: no example flows through '%s'", x);
    return t;
}

/* m's bias initializer, or "" (an omitted input) when it has none. */
static const char *optional_param(weft_onnx_graph *g, const weft_module *m, const char *name)
{
    return weft_module_parameter(m, name) ? weft_onnx_param(g, m, name) : "";
}

/* ---- Linear ---------------------------------------------------------------------------- */

/* x [N, in] -> Gemm(x, W, b, transB=1). Any other rank goes through [-1, in] and back,
 * so the weight stays the state_dict's tensor (no transposed copy). */
static const char *export_linear(weft_module *m, weft_onnx_graph *g, const char *x)
{
    const struct linear_state *s = weft_module_state(m);
    weft_tensor *ex = example(g, x);
    if (!ex)
        return NULL;
    const char *w = weft_onnx_param(g, m, "weight"), *b = optional_param(g, m, "bias");
    const char *x2 = ex->ndim == 2 ? x : weft_onnx_reshape(g, x, 2, (int64_t[]){-1, s->in_features});
    const char *in[3] = {x2, w, b};
    weft_onnx_node *gemm = weft_onnx_node_add(g, "Gemm", *b ? 3 : 2, in, 1);
    weft_onnx_attr_int(gemm, "transB", 1);
    const char *y = weft_onnx_node_output(gemm, 0);
    if (ex->ndim == 2)
        return y;
    /* shape(x)[:-1] + [out] */
    weft_onnx_node *shape = weft_onnx_node_add(g, "Shape", 1, &x, 1);
    weft_onnx_attr_int(shape, "end", -1);
    const char *cat[2] = {weft_onnx_node_output(shape, 0),
                          weft_onnx_const_ints(g, 1, &s->out_features)};
    weft_onnx_node *concat = weft_onnx_node_add(g, "Concat", 2, cat, 1);
    weft_onnx_attr_int(concat, "axis", 0);
    return onnx_binary(g, "Reshape", y, weft_onnx_node_output(concat, 0));
}

/* ---- Conv2d and the pools ------------------------------------------------------------- */

static int need_4d(const weft_tensor *ex, const char *what)
{
    char shape[160];
    if (ex->ndim == 4)
        return 0;
    return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "%s is exported for batched input [N, C, H, W]; "
                                                    "the example is %s",
                          what, weft_shape_str(ex->ndim, ex->shape, shape, sizeof shape));
}

/* PyTorch's symmetric (top, left) padding as ONNX's [top, left, bottom, right]. */
static void pads_of(const int64_t p[2], int64_t out[4])
{
    out[0] = out[2] = p[0];
    out[1] = out[3] = p[1];
}

static const char *export_conv2d(weft_module *m, weft_onnx_graph *g, const char *x)
{
    const struct weft_conv2d_options *o = weft_module_state(m);
    weft_tensor *ex = example(g, x);
    if (!ex || need_4d(ex, "Conv2d") != 0)
        return NULL;
    const char *w = weft_onnx_param(g, m, "weight"), *b = optional_param(g, m, "bias");
    const char *in[3] = {x, w, b};
    weft_onnx_node *n = weft_onnx_node_add(g, "Conv", *b ? 3 : 2, in, 1);
    int64_t pads[4];
    pads_of(o->params.padding, pads);
    weft_onnx_attr_ints(n, "kernel_shape", 2, o->kernel_size);
    weft_onnx_attr_ints(n, "strides", 2, o->params.stride);
    weft_onnx_attr_ints(n, "pads", 4, pads);
    weft_onnx_attr_ints(n, "dilations", 2, o->params.dilation);
    weft_onnx_attr_int(n, "group", o->params.groups);
    return weft_onnx_node_output(n, 0);
}

static const char *export_pool(weft_module *m, weft_onnx_graph *g, const char *x, bool max)
{
    const struct weft_pool2d_params *p = weft_module_state(m);
    weft_tensor *ex = example(g, x);
    if (!ex || need_4d(ex, max ? "MaxPool2d" : "AvgPool2d") != 0)
        return NULL;
    weft_onnx_node *n = weft_onnx_node_add(g, max ? "MaxPool" : "AveragePool", 1, &x, 1);
    int64_t pads[4];
    pads_of(p->padding, pads);
    weft_onnx_attr_ints(n, "kernel_shape", 2, p->kernel);
    weft_onnx_attr_ints(n, "strides", 2, p->stride);
    weft_onnx_attr_ints(n, "pads", 4, pads);
    weft_onnx_attr_int(n, "ceil_mode", p->ceil_mode);
    if (max)
        weft_onnx_attr_ints(n, "dilations", 2, p->dilation);
    else
        weft_onnx_attr_int(n, "count_include_pad", p->count_include_pad);
    return weft_onnx_node_output(n, 0);
}

static const char *export_max_pool2d(weft_module *m, weft_onnx_graph *g, const char *x)
{
    return export_pool(m, g, x, true);
}

static const char *export_avg_pool2d(weft_module *m, weft_onnx_graph *g, const char *x)
{
    return export_pool(m, g, x, false);
}

/* ONNX has no adaptive pooling: (1, 1) is GlobalAveragePool, and a size dividing the
 * input's (static) one is an AveragePool of equal windows; uneven windows are refused,
 * as torch.onnx refuses them. */
static const char *export_adaptive_avg_pool2d(weft_module *m, weft_onnx_graph *g, const char *x)
{
    const int64_t *out = weft_module_state(m);
    weft_tensor *ex = example(g, x);
    if (!ex || need_4d(ex, "AdaptiveAvgPool2d") != 0)
        return NULL;
    if (out[0] == 1 && out[1] == 1)
        return weft_onnx_op(g, "GlobalAveragePool", 1, &x);
    const int64_t h = ex->shape[2], w = ex->shape[3];
    if (h % out[0] != 0 || w % out[1] != 0) {
        weft_error_set(WEFT_ERR_NOT_IMPLEMENTED,
                       "AdaptiveAvgPool2d(output_size=(%lld, %lld)) on %lldx%lld inputs pools "
                       "windows of unequal sizes, which no ONNX op does (only an output size "
                       "that divides the input's, or 1x1, is exported)",
                       (long long)out[0], (long long)out[1], (long long)h, (long long)w);
        return NULL;
    }
    int64_t k[2] = {h / out[0], w / out[1]};
    weft_onnx_node *n = weft_onnx_node_add(g, "AveragePool", 1, &x, 1);
    weft_onnx_attr_ints(n, "kernel_shape", 2, k);
    weft_onnx_attr_ints(n, "strides", 2, k);
    return weft_onnx_node_output(n, 0);
}

/* ---- normalisation ------------------------------------------------------------------- */

static const char *export_batch_norm(weft_module *m, weft_onnx_graph *g, const char *x)
{
    const struct batch_norm_state *s = weft_module_state(m);
    const char *in[5] = {x, weft_onnx_param(g, m, "weight"), weft_onnx_param(g, m, "bias"),
                         weft_onnx_param(g, m, "running_mean"),
                         weft_onnx_param(g, m, "running_var")};
    weft_onnx_node *n = weft_onnx_node_add(g, "BatchNormalization", 5, in, 1);
    weft_onnx_attr_float(n, "epsilon", (float)s->eps);
    weft_onnx_attr_float(n, "momentum", (float)(1.0 - s->momentum)); /* ONNX's convention */
    return weft_onnx_node_output(n, 0);
}

static const char *export_layer_norm(weft_module *m, weft_onnx_graph *g, const char *x)
{
    const struct layer_norm_state *s = weft_module_state(m);
    weft_tensor *ex = example(g, x);
    if (!ex)
        return NULL;
    const char *scale, *bias = "";
    if (s->elementwise_affine) {
        scale = weft_onnx_param(g, m, "weight");
        bias = weft_onnx_param(g, m, "bias");
    } else { /* LayerNormalization's scale is required: ones */
        weft_scope_push();
        scale = onnx_constant(g, weft_ones(s->ndims, s->shape, ex->dtype, WEFT_CPU));
        weft_scope_pop();
    }
    const char *in[3] = {x, scale, bias};
    weft_onnx_node *n = weft_onnx_node_add(g, "LayerNormalization", *bias ? 3 : 2, in, 1);
    weft_onnx_attr_int(n, "axis", -s->ndims);
    weft_onnx_attr_float(n, "epsilon", (float)s->eps);
    return weft_onnx_node_output(n, 0);
}

/* ---- Embedding, Dropout, Flatten ----------------------------------------------------- */

static const char *export_embedding(weft_module *m, weft_onnx_graph *g, const char *x)
{
    const char *in[2] = {weft_onnx_param(g, m, "weight"), x};
    return weft_onnx_op(g, "Gather", 2, in);
}

/* Eval mode: the identity, and no node at all (torch.onnx drops it too). */
static const char *export_dropout(weft_module *m, weft_onnx_graph *g, const char *x)
{
    (void)m;
    (void)g;
    return x;
}

/* torch.flatten(x, start, end): ONNX's Flatten when it is [N, rest] (start 1, end -1),
 * else a Reshape keeping the dims before start (0), merging start..end (-1) and keeping
 * the static ones after end. */
static const char *export_flatten(weft_module *m, weft_onnx_graph *g, const char *x)
{
    const int *dims = weft_module_state(m);
    weft_tensor *ex = example(g, x);
    if (!ex)
        return NULL;
    const int r = ex->ndim;
    int start = dims[0] < 0 ? dims[0] + r : dims[0], end = dims[1] < 0 ? dims[1] + r : dims[1];
    if (r == 0 || start >= end)
        return x;
    if (start == 1 && end == r - 1) {
        weft_onnx_node *n = weft_onnx_node_add(g, "Flatten", 1, &x, 1);
        weft_onnx_attr_int(n, "axis", 1);
        return weft_onnx_node_output(n, 0);
    }
    int64_t shape[WEFT_MAX_DIMS];
    int n = 0;
    for (int d = 0; d < start; d++)
        shape[n++] = 0;
    shape[n++] = -1;
    for (int d = end + 1; d < r; d++)
        shape[n++] = ex->shape[d];
    return weft_onnx_reshape(g, x, n, shape);
}

/* ---- activations --------------------------------------------------------------------- */

static const char *export_relu(weft_module *m, weft_onnx_graph *g, const char *x)
{
    (void)m;
    return weft_onnx_op(g, "Relu", 1, &x);
}

static const char *export_tanh(weft_module *m, weft_onnx_graph *g, const char *x)
{
    (void)m;
    return weft_onnx_op(g, "Tanh", 1, &x);
}

static const char *export_sigmoid(weft_module *m, weft_onnx_graph *g, const char *x)
{
    (void)m;
    return weft_onnx_op(g, "Sigmoid", 1, &x);
}

static const char *export_leaky_relu(weft_module *m, weft_onnx_graph *g, const char *x)
{
    weft_onnx_node *n = weft_onnx_node_add(g, "LeakyRelu", 1, &x, 1);
    weft_onnx_attr_float(n, "alpha", (float)*(const double *)weft_module_state(m));
    return weft_onnx_node_output(n, 0);
}

static const char *softmax_op(weft_module *m, weft_onnx_graph *g, const char *x, const char *op)
{
    weft_onnx_node *n = weft_onnx_node_add(g, op, 1, &x, 1);
    weft_onnx_attr_int(n, "axis", *(const int *)weft_module_state(m));
    return weft_onnx_node_output(n, 0);
}

static const char *export_softmax(weft_module *m, weft_onnx_graph *g, const char *x)
{
    return softmax_op(m, g, x, "Softmax");
}

static const char *export_log_softmax(weft_module *m, weft_onnx_graph *g, const char *x)
{
    return softmax_op(m, g, x, "LogSoftmax");
}

/* x (with its example's dtype) op a scalar constant. */
static const char *with_scalar(weft_onnx_graph *g, const char *op, const char *x,
                               enum weft_dtype dt, double v)
{
    return onnx_binary(g, op, x, weft_onnx_const_scalar(g, dt, v));
}

const char *weft_onnx_gelu(weft_onnx_graph *g, const char *x, enum weft_gelu_approximate form,
                           enum weft_dtype dt)
{
    if (!g || !x)
        return NULL;
    if (weft_onnx_graph_options(g)->opset >= 20) {
        weft_onnx_node *n = weft_onnx_node_add(g, "Gelu", 1, &x, 1);
        weft_onnx_attr_string(n, "approximate", form == WEFT_GELU_TANH ? "tanh" : "none");
        return weft_onnx_node_output(n, 0);
    }
    const char *inner;
    if (form == WEFT_GELU_TANH) { /* tanh(sqrt(2/pi) * (x + 0.044715 x^3)), FastGelu's pattern */
        const char *cube = with_scalar(g, "Pow", x, dt, 3.0);
        const char *sum = onnx_binary(g, "Add", x, with_scalar(g, "Mul", cube, dt, 0.044715));
        const char *arg = with_scalar(g, "Mul", sum, dt, sqrt(2.0 / M_PI));
        inner = weft_onnx_op(g, "Tanh", 1, &arg);
    } else { /* erf(x / sqrt(2)), the pattern ONNX Runtime fuses into one Gelu */
        const char *arg = with_scalar(g, "Div", x, dt, M_SQRT2);
        inner = weft_onnx_op(g, "Erf", 1, &arg);
    }
    const char *one_plus = with_scalar(g, "Add", inner, dt, 1.0);
    return with_scalar(g, "Mul", onnx_binary(g, "Mul", x, one_plus), dt, 0.5);
}

static const char *export_gelu(weft_module *m, weft_onnx_graph *g, const char *x)
{
    weft_tensor *ex = example(g, x);
    if (!ex)
        return NULL;
    return weft_onnx_gelu(g, x, (enum weft_gelu_approximate) * (const int *)weft_module_state(m),
                        ex->dtype);
}

/* ---- the dispatcher ------------------------------------------------------------------ */

typedef const char *(*export_fn)(weft_module *m, weft_onnx_graph *g, const char *x);

static const struct {
    const char *type; /* the registered name */
    export_fn fn;
} builtin[] = {
    {"linear", export_linear},         {"conv2d", export_conv2d},
    {"maxpool2d", export_max_pool2d},  {"avgpool2d", export_avg_pool2d},
    {"adaptive_avgpool2d", export_adaptive_avg_pool2d},
    {"batchnorm1d", export_batch_norm}, {"batchnorm2d", export_batch_norm},
    {"layernorm", export_layer_norm},  {"embedding", export_embedding},
    {"dropout", export_dropout},       {"flatten", export_flatten},
    {"relu", export_relu},             {"gelu", export_gelu},
    {"tanh", export_tanh},             {"sigmoid", export_sigmoid},
    {"leaky_relu", export_leaky_relu}, {"softmax", export_softmax},
    {"log_softmax", export_log_softmax},
};

const char *nn_onnx_export_builtin(weft_module *m, struct weft_onnx_graph *g, const char *x)
{
    const struct weft_module_type *type = weft_module_type(m);
    for (size_t i = 0; i < sizeof builtin / sizeof *builtin; i++)
        if (!strcmp(builtin[i].type, type->base.name))
            return builtin[i].fn(m, g, x);
    weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "%s ('%s') has no ONNX form in weft",
                   type->class_name, type->base.name);
    return NULL;
}

/* ---- Sequential ------------------------------------------------------------------------ */

const char *nn_onnx_export_sequential(weft_module *m, struct weft_onnx_graph *g, const char *x)
{
    int n = weft_module_num_children(m);
    for (int i = 0; i < n && x; i++) {
        char name[24];
        snprintf(name, sizeof name, "%d", i);
        x = weft_onnx_export_module(g, weft_module_child_at(m, i), name, x);
    }
    return x;
}
