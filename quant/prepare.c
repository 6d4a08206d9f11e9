/* quant/prepare.c: static post-training quantization of a Sequential, torch.ao's eager
 * prepare / calibrate / convert with the QuantStub and DeQuantStub placed for the user.
 *
 * The children are read as a chain: quantizable layers (Linear, Conv2d with groups 1, and
 * their fused LinearReLU / ConvReLU2d), layers that pass int8 through (MaxPool2d, Flatten,
 * Dropout, Identity) and the rest, which run in float32. A quantized layer quantizes a
 * float32 input itself (its input_scale, input_zero_point: torch's QuantStub) and hands the
 * next layer uint8 when that layer is quantized too (past any pass-through ones), else
 * float32 (torch's DeQuantStub, fused into its kernel's output). So observers sit where an
 * int8 layer's input comes from float32 and at every uint8 output; the layer at the far
 * side of a pass-through chain reads its producer's qparams, as a quantized tensor carries
 * them in torch. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

enum role { ROLE_QUANTIZED, ROLE_PASS, ROLE_FLOAT };

struct weft_quant_prepared {
    weft_module *model;
    struct weft_qconfig qc;
    int n;                   /* children */
    enum role *role;         /* [n] */
    int *input_from;         /* [n]: the boundary whose observer gives a quantized layer's
                              * input qparams (boundary i is the input of child i, n the
                              * model's output) */
    bool *float_output;      /* [n] */
    weft_observer **obs;     /* [n + 1], NULL where nothing is observed */
};

struct weft_qconfig weft_qconfig_default(void)
{
    return (struct weft_qconfig){.activation = WEFT_OBSERVER_HISTOGRAM, .per_tensor_weights = false};
}

static enum role role_of(const weft_module *m)
{
    const char *k = weft_module_type(m)->base.name;
    const struct weft_conv2d_options *co = quant_conv_options(m);
    if (!strcmp(k, "linear") || quant_is_linear_relu(m))
        return ROLE_QUANTIZED;
    if (co)
        return co->params.groups <= 1 ? ROLE_QUANTIZED : ROLE_FLOAT;
    if (!strcmp(k, "maxpool2d") || !strcmp(k, "flatten") || !strcmp(k, "dropout") ||
        quant_is_identity(m) || !strcmp(k, "quantized_max_pool2d"))
        return ROLE_PASS;
    return ROLE_FLOAT;
}

void weft_quant_prepared_free(weft_quant_prepared *p)
{
    if (!p)
        return;
    for (int i = 0; p->obs && i <= p->n; i++)
        weft_observer_free(p->obs[i]);
    free(p->obs);
    free(p->role);
    free(p->input_from);
    free(p->float_output);
    free(p);
}

/* The chain's plan (see the file's comment); observers where with_observers. */
static weft_quant_prepared *plan(weft_module *model, const struct weft_qconfig *qc,
                                 bool with_observers)
{
    if (!model || strcmp(weft_module_type_name(model), "Sequential") != 0) {
        weft_error_set(WEFT_ERR_VALUE,
                       "static quantization works on a Sequential model (the [layer.*] kind), got "
                       "a %s: quantize it dynamically instead (Linear and LSTM weights int8)",
                       model ? weft_module_type_name(model) : "NULL");
        return NULL;
    }
    weft_quant_prepared *p = calloc(1, sizeof *p);
    const int n = weft_module_num_children(model);
    if (p) {
        p->role = calloc((size_t)n + 1, sizeof *p->role);
        p->input_from = calloc((size_t)n + 1, sizeof *p->input_from);
        p->float_output = calloc((size_t)n + 1, sizeof *p->float_output);
        p->obs = calloc((size_t)n + 2, sizeof *p->obs);
    }
    if (!p || !p->role || !p->input_from || !p->float_output || !p->obs) {
        weft_quant_prepared_free(p);
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory preparing a model");
        return NULL;
    }
    p->model = model;
    p->qc = qc ? *qc : weft_qconfig_default();
    p->n = n;
    bool *need = calloc((size_t)n + 1, sizeof *need); /* boundaries to observe */
    if (!need) {
        weft_quant_prepared_free(p);
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory preparing a model");
        return NULL;
    }
    int quantized = 0, producer = -1; /* the boundary whose qparams uint8 values carry */
    for (int i = 0; i < n; i++)
        p->role[i] = role_of(weft_module_child_at(model, i));
    for (int i = 0; i < n; i++) {
        if (p->role[i] == ROLE_FLOAT)
            producer = -1;
        if (p->role[i] != ROLE_QUANTIZED)
            continue;
        quantized++;
        p->input_from[i] = producer >= 0 ? producer : i;
        need[p->input_from[i]] = true;
        int next = i + 1;
        while (next < n && p->role[next] == ROLE_PASS)
            next++;
        p->float_output[i] = next >= n || p->role[next] != ROLE_QUANTIZED;
        producer = p->float_output[i] ? -1 : i + 1;
        need[i + 1] = need[i + 1] || !p->float_output[i];
    }
    int rc = quantized ? 0 : weft_error_set(WEFT_ERR_VALUE, "static quantization: the model has "
                                                         "no Linear or Conv2d to quantize");
    struct weft_observer_options oo = weft_observer_defaults(p->qc.activation);
    for (int b = 0; rc == 0 && with_observers && b <= n; b++)
        if (need[b] && !(p->obs[b] = weft_observer_new(&oo)))
            rc = weft_error_code();
    free(need);
    if (rc != 0) {
        weft_quant_prepared_free(p);
        return NULL;
    }
    return p;
}

weft_quant_prepared *weft_quant_prepare(weft_module *model, const struct weft_qconfig *qconfig)
{
    if (model) {
        weft_module_train(model, false);
        if (weft_fuse_model(model) < 0)
            return NULL;
    }
    return plan(model, qconfig, true);
}

int weft_quant_observe(weft_quant_prepared *p, weft_tensor *input)
{
    if (!p || !input)
        return p ? weft_error_code() : weft_error_set(WEFT_ERR_VALUE, "weft_quant_observe: NULL");
    bool prev = weft_no_grad_begin();
    weft_scope_push();
    weft_tensor *x = input;
    int rc = p->obs[0] ? weft_observer_update(p->obs[0], x) : 0;
    for (int i = 0; i < p->n && rc == 0; i++) {
        x = weft_module_forward(weft_module_child_at(p->model, i), x);
        rc = !x ? weft_error_code() : p->obs[i + 1] ? weft_observer_update(p->obs[i + 1], x) : 0;
    }
    weft_scope_pop();
    weft_grad_mode_restore(prev);
    return rc;
}

/* The float layer's weight and bias (a fused one holds its layer as child "0"). */
static void layer_tensors(const weft_module *m, weft_tensor **w, weft_tensor **b)
{
    const weft_module *inner = quant_is_linear_relu(m) || quant_is_conv_relu(m)
                                   ? weft_module_child_at(m, 0)
                                   : m;
    *w = weft_module_parameter(inner, "weight");
    *b = weft_module_parameter(inner, "bias");
}

/* qparams of boundary b: observed, or placeholders (1, 0) when the plan has no observers
 * (a structure that a checkpoint's tensors will fill). */
static int boundary_qparams(const weft_quant_prepared *p, int b, float *scale, int64_t *zp)
{
    if (!p->obs[b]) {
        *scale = 1.0f;
        *zp = 0;
        return 0;
    }
    if (!weft_observer_seen(p->obs[b]))
        return weft_error_set(WEFT_ERR_RUNTIME, "static quantization: the activation before child "
                                                "%d was never observed: run weft_quant_observe on "
                                                "calibration data before converting",
                              b);
    return weft_observer_qparams(p->obs[b], scale, zp);
}

/* Whether child i, a Linear, takes in the Flatten(1, -1) right before it: where that
 * Flatten reads a quantized convolution's output (channels-last uint8, through MaxPool2d
 * and the like), which the Linear then reads as it lies in memory, with no copy into
 * torch's order (quant_linear_new); the Flatten becomes an Identity, as fusion leaves one.
 * A Flatten of anything else stays. */
static bool takes_flatten(const weft_quant_prepared *p, int i)
{
    const int b = p->input_from[i]; /* i: it quantizes a float32 input itself */
    if (i < 1 || b == i || quant_conv_options(weft_module_child_at(p->model, i)))
        return false;
    const int *dims = weft_nn_flatten_dims(weft_module_child_at(p->model, i - 1));
    return dims && dims[0] == 1 && (dims[1] == -1 || dims[1] == 3) &&
           quant_conv_options(weft_module_child_at(p->model, b - 1)) != NULL;
}

/* Child i's quantized form, or NULL (error set). */
static weft_module *quantized_child(const weft_quant_prepared *p, int i)
{
    weft_module *m = weft_module_child_at(p->model, i);
    struct quant_layer_spec spec = {.relu = quant_is_linear_relu(m) || quant_is_conv_relu(m),
                                    .per_tensor = p->qc.per_tensor_weights,
                                    .float_output = p->float_output[i],
                                    .flatten_input = takes_flatten(p, i)};
    layer_tensors(m, &spec.weight, &spec.bias);
    if (boundary_qparams(p, p->input_from[i], &spec.input_scale, &spec.input_zero_point) != 0 ||
        (!spec.float_output && boundary_qparams(p, i + 1, &spec.scale, &spec.zero_point) != 0))
        return NULL;
    const struct weft_conv2d_options *co = quant_conv_options(m);
    if (!co)
        return quant_linear_new(&spec);
    spec.conv = co->params;
    return quant_conv_new(&spec);
}

int weft_quant_convert(weft_quant_prepared *p)
{
    if (!p)
        return weft_error_set(WEFT_ERR_VALUE, "weft_quant_convert: NULL");
    /* Every new module first: a refusal leaves the model as it was. */
    weft_module **made = calloc((size_t)p->n + 1, sizeof *made);
    int rc = made ? 0 : weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory converting");
    for (int i = 0; i < p->n && rc == 0; i++) {
        weft_module *m = weft_module_child_at(p->model, i);
        const struct weft_pool2d_params *pool = weft_nn_max_pool2d_params(m);
        if (p->role[i] == ROLE_QUANTIZED)
            made[i] = quantized_child(p, i);
        else if (pool)
            made[i] = quant_max_pool_new(pool);
        else
            continue;
        rc = made[i] ? 0 : weft_error_code();
        if (rc == 0 && p->role[i] == ROLE_QUANTIZED && takes_flatten(p, i) &&
            !(made[i - 1] = quant_identity()))
            rc = weft_error_code();
    }
    for (int i = 0; i < p->n && rc == 0; i++)
        if (made[i])
            rc = weft_module_swap(weft_module_child_at(p->model, i), made[i]);
    for (int i = 0; made && i < p->n; i++)
        weft_module_free(made[i]); /* the float modules, after a swap */
    free(made);
    if (rc == 0)
        weft_module_train(p->model, false);
    return rc;
}

int quant_static_structure(weft_module *model, const struct weft_qconfig *qc)
{
    weft_module_train(model, false);
    if (weft_fuse_model(model) < 0)
        return weft_error_code();
    weft_quant_prepared *p = plan(model, qc, false);
    int rc = p ? weft_quant_convert(p) : weft_error_code();
    weft_quant_prepared_free(p);
    return rc;
}
