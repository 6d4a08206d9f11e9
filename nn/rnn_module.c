/* nn/rnn_module.c: torch.nn.RNN, LSTM and GRU as modules and as the INI layer types
 * "rnn", "lstm" and "gru": PyTorch's parameter names, shapes, registration order and
 * initialisation, its extra_repr, and the single-tensor forward a sequential model runs
 * (output = sequence | last). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rnn_internal.h"
#include "weft/init.h"
#include "weft/nn.h"
#include "weft/ops.h"

#define RNN_MAX_WEIGHTS (2 * 64 * 5)

struct rnn_state {
    struct weft_rnn_options o;
};

static int64_t num_layers(const struct weft_rnn_options *o)
{
    return o->num_layers > 0 ? o->num_layers : 1;
}

static int weights_per_layer(const struct weft_rnn_options *o)
{
    return 2 + (o->bias ? 2 : 0) + (o->proj_size > 0 ? 1 : 0);
}

/* The k-th weight's name of layer l, direction d, in PyTorch's _flat_weights_names order. */
static void weight_name(const struct weft_rnn_options *o, int64_t l, int d, int k, char *buf,
                        size_t size)
{
    static const char *const with_bias[] = {"weight_ih", "weight_hh", "bias_ih", "bias_hh",
                                            "weight_hr"};
    static const char *const without[] = {"weight_ih", "weight_hh", "weight_hr"};
    const char *base = o->bias ? with_bias[k] : without[k];
    snprintf(buf, size, "%s_l%lld%s", base, (long long)l, d ? "_reverse" : "");
}

/* The weights in _flat_weights order (borrowed); their count. */
static int collect(const weft_module *m, const struct weft_rnn_options *o, weft_tensor **w)
{
    int n = 0, per = weights_per_layer(o), D = o->bidirectional ? 2 : 1;
    char name[64];
    for (int64_t l = 0; l < num_layers(o); l++)
        for (int d = 0; d < D; d++)
            for (int k = 0; k < per; k++) {
                weight_name(o, l, d, k, name, sizeof name);
                w[n++] = weft_module_parameter(m, name);
            }
    return n;
}

int weft_nn_rnn_forward(weft_module *m, const struct weft_rnn_input *in,
                        struct weft_rnn_result *result)
{
    const struct weft_rnn_options *o = weft_nn_rnn_options(m);
    if (!o)
        return weft_error_set(WEFT_ERR_TYPE, "weft_nn_rnn_forward: expected an RNN, LSTM or "
                                             "GRU module, got %s",
                              m ? weft_module_type_name(m) : "NULL");
    weft_tensor *w[RNN_MAX_WEIGHTS];
    collect(m, o, w);
    return weft_rnn(o, w, weft_module_is_training(m), in, result);
}

/* The last layer's h_n of each direction side by side: [L*D, B, P] -> [B, D*P] (or
 * [L*D, P] -> [D*P] unbatched). */
static weft_tensor *last_features(const struct weft_rnn_options *o, weft_tensor *h_n)
{
    int64_t D = o->bidirectional ? 2 : 1;
    weft_tensor *h = weft_narrow(h_n, 0, (num_layers(o) - 1) * D, D);
    if (h && h->ndim == 2)
        return weft_reshape(h, 1, (const int64_t[]){-1});
    const int64_t shape[2] = {h ? h->shape[1] : 0, -1};
    return weft_reshape(weft_transpose(h, 0, 1), 2, shape);
}

static weft_tensor *rnn_module_forward(weft_module *m, weft_tensor *x)
{
    const struct rnn_state *s = weft_module_state(m);
    struct weft_rnn_input in = {.input = x};
    struct weft_rnn_result r;
    if (weft_nn_rnn_forward(m, &in, &r) != 0)
        return NULL;
    return s->o.output == WEFT_RNN_OUTPUT_LAST ? last_features(&s->o, r.h_n) : r.output;
}

static const char *py_bool(bool b)
{
    return b ? "True" : "False";
}

/* RNNBase.extra_repr. */
static int rnn_repr(const weft_module *m, char *buf, size_t size)
{
    const struct weft_rnn_options *o = &((const struct rnn_state *)weft_module_state(m))->o;
    char p[64];
    size_t n = (size_t)snprintf(buf, size, "%lld, %lld", (long long)o->input_size,
                                (long long)o->hidden_size);
#define RNN_REPR(...)                                                                         \
    if (n < size)                                                                             \
    n += (size_t)snprintf(buf + n, size - n, __VA_ARGS__)
    if (o->proj_size)
        RNN_REPR(", proj_size=%lld", (long long)o->proj_size);
    if (num_layers(o) != 1)
        RNN_REPR(", num_layers=%lld", (long long)num_layers(o));
    if (o->mode == WEFT_RNN_RELU)
        RNN_REPR(", nonlinearity=relu");
    if (!o->bias)
        RNN_REPR(", bias=%s", py_bool(o->bias));
    if (o->batch_first)
        RNN_REPR(", batch_first=%s", py_bool(o->batch_first));
    if (o->dropout != 0)
        RNN_REPR(", dropout=%s", weft_repr_float(o->dropout, p, sizeof p));
    if (o->bidirectional)
        RNN_REPR(", bidirectional=%s", py_bool(o->bidirectional));
#undef RNN_REPR
    return (int)n;
}

static weft_module *create_from(const weft_options *opts, int mode);

static weft_module *create_rnn(const weft_options *o)
{
    return create_from(o, WEFT_RNN_TANH);
}
static weft_module *create_lstm(const weft_options *o)
{
    return create_from(o, WEFT_RNN_LSTM);
}
static weft_module *create_gru(const weft_options *o)
{
    return create_from(o, WEFT_RNN_GRU);
}

#define RNN_TYPE(ini, class, create_fn)                                                       \
    {.base = WEFT_VTABLE(WEFT_KIND_MODULE, ini, struct weft_module_type), .class_name = class, \
     .forward = rnn_module_forward, .free_state = free, .extra_repr = rnn_repr,               \
     .create = create_fn, .onnx_export = nn_onnx_export_rnn}
const struct weft_module_type rnn_type = RNN_TYPE("rnn", "RNN", create_rnn);
const struct weft_module_type lstm_type = RNN_TYPE("lstm", "LSTM", create_lstm);
const struct weft_module_type gru_type = RNN_TYPE("gru", "GRU", create_gru);

const struct weft_rnn_options *weft_nn_rnn_options(const weft_module *m)
{
    const struct weft_module_type *t = m ? weft_module_type(m) : NULL;
    if (t != &rnn_type && t != &lstm_type && t != &gru_type)
        return NULL;
    return &((const struct rnn_state *)weft_module_state(m))->o;
}

/* PyTorch's reset_parameters: every weight uniform on [-1/sqrt(H), 1/sqrt(H)], in
 * registration order. */
static int add_weights(weft_module *m, const struct weft_rnn_options *o)
{
    const int64_t H = o->hidden_size, P = o->proj_size > 0 ? o->proj_size : H;
    const int64_t G = o->mode == WEFT_RNN_LSTM ? 4 : o->mode == WEFT_RNN_GRU ? 3 : 1;
    const int D = o->bidirectional ? 2 : 1, per = weights_per_layer(o);
    const double bound = 1.0 / sqrt((double)H);
    char name[64];
    for (int64_t l = 0; l < num_layers(o); l++)
        for (int d = 0; d < D; d++)
            for (int k = 0; k < per; k++) {
                int64_t in = l == 0 ? o->input_size : P * D;
                int64_t shape[2] = {G * H, 0};
                int nd = 2;
                int kind = o->bias ? k : (k < 2 ? k : 4); /* 0..4: ih, hh, b_ih, b_hh, hr */
                switch (kind) {
                case 0: shape[1] = in; break;
                case 1: shape[1] = P; break;
                case 2:
                case 3: nd = 1; break;
                default: shape[0] = P; shape[1] = H; break;
                }
                weight_name(o, l, d, k, name, sizeof name);
                weft_tensor *t = nn_param_storage(nd, shape);
                if (!t || weft_nn_init_uniform_(t, -bound, bound) != 0 ||
                    weft_module_register_parameter(m, name, t) != 0)
                    return weft_error_code();
            }
    return 0;
}

weft_module *weft_nn_rnn(const struct weft_rnn_options *options)
{
    if (nn_rnn_check_options(options))
        return NULL;
    if (num_layers(options) > 64)
        return weft_error_set(WEFT_ERR_VALUE, "rnn: at most 64 layers, got %lld",
                              (long long)options->num_layers), NULL;
    struct rnn_state *s = calloc(1, sizeof *s);
    if (!s)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory for an RNN"), NULL;
    s->o = *options;
    s->o.num_layers = num_layers(options);
    const struct weft_module_type *type = options->mode == WEFT_RNN_LSTM ? &lstm_type
                                          : options->mode == WEFT_RNN_GRU ? &gru_type
                                                                          : &rnn_type;
    weft_module *m = weft_module_new(type, s);
    if (!m) {
        free(s);
        return NULL;
    }
    weft_scope_push();
    int rc = add_weights(m, &s->o);
    weft_scope_pop();
    if (rc) {
        weft_module_free(m);
        return NULL;
    }
    return m;
}

static int need_positive(const weft_options *o, const char *key, int64_t *out)
{
    return weft_options_require(o, key) || weft_options_positive(o, key, 0, out) ? WEFT_ERR_CONFIG
                                                                                 : 0;
}

static weft_module *create_from(const weft_options *opts, int mode)
{
    static const char *const nonlinearities[] = {"tanh", "relu", NULL};
    static const char *const outputs[] = {"sequence", "last", NULL};
    struct weft_rnn_options o = weft_rnn_defaults(mode, 0, 0);
    int nl = 0, out = 0;
    if (need_positive(opts, "input_size", &o.input_size) ||
        need_positive(opts, "hidden_size", &o.hidden_size) ||
        weft_options_positive(opts, "num_layers", 1, &o.num_layers) ||
        weft_options_bool(opts, "bias", true, &o.bias) ||
        weft_options_bool(opts, "batch_first", false, &o.batch_first) ||
        weft_options_double(opts, "dropout", 0, &o.dropout) ||
        weft_options_bool(opts, "bidirectional", false, &o.bidirectional) ||
        weft_options_choice(opts, "output", outputs, 0, &out) < 0)
        return NULL;
    if (mode == WEFT_RNN_TANH &&
        weft_options_choice(opts, "nonlinearity", nonlinearities, 0, &nl) < 0)
        return NULL;
    if (mode == WEFT_RNN_LSTM &&
        weft_options_int_range(opts, "proj_size", 0, 0, INT32_MAX, &o.proj_size))
        return NULL;
    if (nl == 1)
        o.mode = WEFT_RNN_RELU;
    o.output = out == 1 ? WEFT_RNN_OUTPUT_LAST : WEFT_RNN_OUTPUT_SEQUENCE;
    if (!(o.dropout >= 0 && o.dropout <= 1))
        return weft_options_bad_value(opts, "dropout", "expected a probability in [0, 1]"),
               NULL;
    if (o.proj_size >= o.hidden_size)
        return weft_options_bad_value(opts, "proj_size", "proj_size has to be smaller than "
                                                         "hidden_size"),
               NULL;
    return weft_nn_rnn(&o);
}
