/* quant/qrnn.c: torch.ao.nn.quantized.dynamic's LSTM (and GRU, RNN) for inference: each
 * layer and direction's input projection x W_ih^T + b_ih, which covers every step in one
 * product, is a DynamicQuantizedLinear (child "ih_l0", "ih_l0_reverse", ...); the recurrence
 * (h W_hh^T per step, the gates, proj_size's W_hr) runs in float32 in the backend's
 * rnn_layer kernel (weft/kernel.h), as nn/rnn.c runs it, from W_hh and W_hr stored int8
 * (per row, "weight_hh_l0" with "weight_hh_l0_scale" and "_zero_point") and dequantized
 * once: a step's [B, H] x [H, 4H] product is too small for int8 to pay, the file is where
 * they weigh (W_hh is half of the byte LSTM's). No autograd, no lengths: the module's
 * single-tensor forward of a sequential model, output = sequence | last. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* The float32 W_hh / W_hr, dequantized from their int8 buffers, per layer and direction. */
#define QRNN_CACHED 256
struct qrnn {
    struct weft_rnn_options o;
    uint64_t signature; /* of the int8 buffers the float copies came from */
    weft_tensor *dequantized[QRNN_CACHED]; /* [(l * 2 + d) * 2 + (0: hh, 1: hr)] */
};

static void drop_dequantized(struct qrnn *s)
{
    for (int i = 0; i < QRNN_CACHED; i++) {
        weft_tensor_release(s->dequantized[i]);
        s->dequantized[i] = NULL;
    }
}

static void qrnn_free(void *p)
{
    drop_dequantized(p);
    free(p);
}

static int64_t layers(const struct weft_rnn_options *o)
{
    return o->num_layers > 0 ? o->num_layers : 1;
}

static int gates(int mode)
{
    return mode == WEFT_RNN_LSTM ? 4 : mode == WEFT_RNN_GRU ? 3 : 1;
}

static void name_of(char *buf, size_t size, const char *base, int64_t l, int d)
{
    snprintf(buf, size, "%s_l%lld%s", base, (long long)l, d ? "_reverse" : "");
}

static int rnn_layer_op(void)
{
    static int cached = -1;
    int op = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (op < 0 && (op = weft_op_register(WEFT_OP_RNN_LAYER_NAME)) >= 0)
        __atomic_store_n(&cached, op, __ATOMIC_RELAXED);
    return op;
}

/* One layer and direction over x [T, B, I] contiguous: out [T, B, P], h_n [B, P]. */
static int layer(weft_module *m, const struct weft_rnn_options *o, int64_t l, int d,
                 weft_tensor *x, weft_tensor **out, weft_tensor **h_n)
{
    char name[64];
    const bool lstm = o->mode == WEFT_RNN_LSTM, gru = o->mode == WEFT_RNN_GRU;
    const int64_t T = x->shape[0], B = x->shape[1], H = o->hidden_size;
    const int64_t P = o->proj_size > 0 ? o->proj_size : H, GH = gates(o->mode) * H;
    name_of(name, sizeof name, "ih", l, d);
    weft_tensor *gi = weft_contiguous(weft_module_forward(weft_module_child(m, name), x));
    struct qrnn *s = weft_module_state(m);
    weft_tensor *w_hh = s->dequantized[(l * 2 + d) * 2], *w_hr = s->dequantized[(l * 2 + d) * 2 + 1];
    name_of(name, sizeof name, "bias_hh", l, d);
    weft_tensor *b_hh = weft_module_buffer(m, name);
    const int64_t st[3] = {T, B, P}, sg[3] = {T, B, GH}, sh[3] = {T, B, H}, sb[2] = {B, P},
                  sc[2] = {B, H};
    weft_tensor *y = weft_empty(3, st, WEFT_F32, WEFT_CPU), *hn = weft_empty(2, sb, WEFT_F32, WEFT_CPU);
    weft_tensor *h0 = weft_zeros(2, sb, WEFT_F32, WEFT_CPU);
    weft_tensor *c0 = lstm ? weft_zeros(2, sc, WEFT_F32, WEFT_CPU) : NULL;
    weft_tensor *cn = lstm ? weft_empty(2, sc, WEFT_F32, WEFT_CPU) : NULL;
    weft_tensor *g = lstm || gru ? weft_empty(3, sg, WEFT_F32, WEFT_CPU) : NULL;
    weft_tensor *cs = lstm ? weft_empty(3, sh, WEFT_F32, WEFT_CPU) : NULL;
    weft_tensor *aux = gru || w_hr ? weft_empty(3, sh, WEFT_F32, WEFT_CPU) : NULL;
    int op = rnn_layer_op();
    if (!gi || !w_hh || !y || !hn || !h0 || (lstm && (!c0 || !cn || !cs)) ||
        ((lstm || gru) && !g) || ((gru || w_hr) && !aux) || op < 0)
        return weft_error_code() ? weft_error_code() : weft_error_set(WEFT_ERR_RUNTIME,
                                                                      "%s: missing %s",
                                                                      weft_module_type_name(m), name);
    struct weft_rnn_kernel_params p = {
        .mode = o->mode, .reverse = d == 1, .T = T, .B = B, .H = H, .P = P,
        .w_hh = w_hh, .b_hh = b_hh, .w_hr = w_hr, .h0 = h0, .c0 = c0, .lengths = NULL,
        .out = y, .h_n = hn, .c_n = cn, .hs = y, .gates = g, .cs = cs, .aux = aux};
    struct weft_op_call c = {.op = op, .nin = 1, .nout = 1, .in = {gi}, .out = {y},
                             .params = &p, .params_size = sizeof p};
    if (weft_dispatch(&c) != 0)
        return weft_error_code();
    *out = y;
    *h_n = hn;
    return 0;
}

/* base_l<l>[_reverse] as float32, from its int8 buffer and per-row scales; NULL when the
 * layer has none (W_hr without proj_size). */
static weft_tensor *dequantized(weft_module *m, const char *base, int64_t l, int d)
{
    char w[64], sc[80], zp[80];
    name_of(w, sizeof w, base, l, d);
    snprintf(sc, sizeof sc, "%s_scale", w);
    snprintf(zp, sizeof zp, "%s_zero_point", w);
    weft_tensor *q = weft_module_buffer(m, w);
    if (!q)
        return NULL;
    return weft_contiguous(weft_dequantize_per_channel(q, weft_module_buffer(m, sc),
                                                       weft_module_buffer(m, zp), 0));
}

/* Which tensors the int8 recurrent weights and their scales are, and their versions, in one
 * number: the float copies are made again when it changes (load_state_dict writes them). */
static uint64_t signature(const weft_module *m, const struct weft_rnn_options *o)
{
    static const char *const bases[2] = {"weight_hh", "weight_hr"};
    uint64_t h = 1469598103934665603ull;
    char name[64], scale[80];
    for (int64_t l = 0; l < layers(o); l++)
        for (int d = 0; d < (o->bidirectional ? 2 : 1); d++)
            for (int b = 0; b < 2; b++) {
                name_of(name, sizeof name, bases[b], l, d);
                snprintf(scale, sizeof scale, "%s_scale", name);
                const weft_tensor *t[2] = {weft_module_buffer(m, name), weft_module_buffer(m, scale)};
                for (int k = 0; k < 2; k++)
                    h = (h ^ (uint64_t)(uintptr_t)t[k] ^ (t[k] ? weft_tensor_version(t[k]) << 1 : 0)) *
                        1099511628211ull;
            }
    return h;
}

static int refresh(weft_module *m, struct qrnn *s)
{
    const uint64_t sig = signature(m, &s->o);
    if (s->dequantized[0] && sig == s->signature)
        return 0;
    drop_dequantized(s);
    int rc = 0;
    weft_scope_push();
    for (int64_t l = 0; l < layers(&s->o) && rc == 0; l++)
        for (int d = 0; d < (s->o.bidirectional ? 2 : 1) && rc == 0; d++) {
            weft_tensor *hh = dequantized(m, "weight_hh", l, d);
            weft_tensor *hr = dequantized(m, "weight_hr", l, d);
            rc = hh ? 0 : weft_error_code() ? weft_error_code() : WEFT_ERR_RUNTIME;
            s->dequantized[(l * 2 + d) * 2] = weft_tensor_retain(hh);
            s->dequantized[(l * 2 + d) * 2 + 1] = weft_tensor_retain(hr);
        }
    weft_scope_pop();
    if (rc != 0)
        drop_dequantized(s);
    s->signature = sig;
    return rc;
}

static weft_tensor *run(weft_module *m, weft_tensor *x)
{
    const struct weft_rnn_options *o = &((const struct qrnn *)weft_module_state(m))->o;
    if (refresh(m, weft_module_state(m)) != 0)
        return NULL;
    if (x->ndim != 2 && x->ndim != 3) {
        weft_error_set(WEFT_ERR_RUNTIME, "input must have 3 dimensions, got %d", x->ndim + 1);
        return NULL;
    }
    if (x->shape[x->ndim - 1] != o->input_size) {
        weft_error_set(WEFT_ERR_RUNTIME, "input.size(-1) must be equal to input_size. Expected "
                                         "%lld, got %lld",
                       (long long)o->input_size, (long long)x->shape[x->ndim - 1]);
        return NULL;
    }
    const bool batched = x->ndim == 3;
    x = batched ? (o->batch_first ? weft_transpose(x, 0, 1) : x) : weft_unsqueeze(x, 1);
    x = weft_contiguous(weft_to_dtype(x, WEFT_F32));
    if (!x)
        return NULL;
    const int D = o->bidirectional ? 2 : 1;
    weft_tensor *last[2] = {NULL, NULL};
    for (int64_t l = 0; l < layers(o); l++) {
        weft_tensor *outs[2];
        for (int d = 0; d < D; d++)
            if (layer(m, o, l, d, x, &outs[d], &last[d]) != 0)
                return NULL;
        x = D == 2 ? weft_cat(2, outs, 2) : outs[0];
        if (!x)
            return NULL;
    }
    if (o->output == WEFT_RNN_OUTPUT_LAST) {
        weft_tensor *h = D == 2 ? weft_cat(2, last, 1) : last[0]; /* [B, D*P] */
        return batched ? h : weft_squeeze_dim(h, 0);
    }
    return batched ? (o->batch_first ? weft_transpose(x, 0, 1) : x) : weft_squeeze_dim(x, 1);
}

static weft_tensor *qrnn_forward(weft_module *m, weft_tensor *x)
{
    weft_scope_push();
    weft_tensor *y = weft_tensor_retain(run(m, x));
    weft_scope_pop();
    return weft_autorelease(y);
}

static int qrnn_repr(const weft_module *m, char *buf, size_t size)
{
    const struct weft_rnn_options *o = &((const struct qrnn *)weft_module_state(m))->o;
    int n = snprintf(buf, size, "%lld, %lld", (long long)o->input_size, (long long)o->hidden_size);
    size_t used = n < 0 ? 0 : (size_t)n;
#define APPEND(...)                                                                           \
    used += (size_t)snprintf(buf + (used < size ? used : size), used < size ? size - used : 0, \
                             __VA_ARGS__)
    if (layers(o) != 1)
        APPEND(", num_layers=%lld", (long long)layers(o));
    if (o->batch_first)
        APPEND(", batch_first=True");
    if (o->bidirectional)
        APPEND(", bidirectional=True");
    if (o->proj_size > 0)
        APPEND(", proj_size=%lld", (long long)o->proj_size);
#undef APPEND
    return (int)used;
}

#define QRNN_TYPE(ini, class)                                                                 \
    {.base = WEFT_VTABLE(WEFT_KIND_MODULE, ini, struct weft_module_type), .class_name = class, \
     .forward = qrnn_forward, .free_state = qrnn_free, .extra_repr = qrnn_repr}

static const struct weft_module_type lstm_type = QRNN_TYPE("dynamic_quantized_lstm", "DynamicQuantizedLSTM");
static const struct weft_module_type gru_type = QRNN_TYPE("dynamic_quantized_gru", "DynamicQuantizedGRU");
static const struct weft_module_type rnn_type = QRNN_TYPE("dynamic_quantized_rnn", "DynamicQuantizedRNN");

/* rnn's parameter base_l<l>[_reverse] as a buffer of m: float32 (cloned), or int8 per row
 * with "<name>_scale" and "<name>_zero_point" beside it. */
static int copy_param(weft_module *m, const weft_module *rnn, const char *base, int64_t l, int d,
                      bool int8, bool per_tensor)
{
    char name[64], sc[80], zp[80];
    name_of(name, sizeof name, base, l, d);
    weft_tensor *t = weft_module_parameter(rnn, name);
    if (!t)
        return 0;
    if (!int8)
        return weft_module_register_buffer(m, name, weft_clone(weft_detach(t)));
    weft_tensor *q, *scale, *z;
    int rc = quant_weight(t, per_tensor, &q, &scale, &z);
    snprintf(sc, sizeof sc, "%s_scale", name);
    snprintf(zp, sizeof zp, "%s_zero_point", name);
    /* per row always: the dequantization is per channel */
    if (rc == 0 && per_tensor) {
        const int64_t n = t->shape[0];
        scale = weft_contiguous(weft_expand(weft_reshape(scale, 1, (int64_t[]){1}), 1, &n));
        z = weft_contiguous(weft_expand(weft_reshape(z, 1, (int64_t[]){1}), 1, &n));
    }
    if (rc == 0)
        rc = weft_module_register_buffer(m, name, q);
    if (rc == 0)
        rc = weft_module_register_buffer(m, sc, scale);
    if (rc == 0)
        rc = weft_module_register_buffer(m, zp, z);
    return rc;
}

weft_module *quant_dynamic_lstm_new(const weft_module *rnn, bool per_tensor)
{
    const struct weft_rnn_options *ro = weft_nn_rnn_options(rnn);
    if (!ro) {
        weft_error_set(WEFT_ERR_TYPE, "dynamic quantization: expected an RNN, LSTM or GRU");
        return NULL;
    }
    if ((ro->num_layers > 0 ? ro->num_layers : 1) * 4 > QRNN_CACHED) {
        weft_error_set(WEFT_ERR_VALUE, "dynamic quantization: at most %d recurrent layers",
                       QRNN_CACHED / 4);
        return NULL;
    }
    struct qrnn *s = calloc(1, sizeof *s);
    if (!s) {
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory for a quantized LSTM");
        return NULL;
    }
    s->o = *ro;
    const struct weft_module_type *type = ro->mode == WEFT_RNN_LSTM ? &lstm_type
                                          : ro->mode == WEFT_RNN_GRU ? &gru_type
                                                                     : &rnn_type;
    weft_module *m = weft_module_new(type, s);
    if (!m) {
        free(s);
        return NULL;
    }
    int rc = 0;
    weft_scope_push();
    const int D = ro->bidirectional ? 2 : 1;
    for (int64_t l = 0; l < layers(ro) && rc == 0; l++)
        for (int d = 0; d < D && rc == 0; d++) {
            char w[64], b[64], child[64];
            name_of(w, sizeof w, "weight_ih", l, d);
            name_of(b, sizeof b, "bias_ih", l, d);
            name_of(child, sizeof child, "ih", l, d);
            struct quant_layer_spec spec = {.weight = weft_module_parameter(rnn, w),
                                            .bias = weft_module_parameter(rnn, b),
                                            .per_tensor = per_tensor};
            rc = weft_module_add_child(m, child, quant_dynamic_linear_new(&spec));
            if (rc == 0)
                rc = copy_param(m, rnn, "weight_hh", l, d, true, per_tensor);
            if (rc == 0)
                rc = copy_param(m, rnn, "bias_hh", l, d, false, false);
            if (rc == 0)
                rc = copy_param(m, rnn, "weight_hr", l, d, true, per_tensor);
        }
    weft_scope_pop();
    if (rc != 0) {
        weft_module_free(m);
        return NULL;
    }
    weft_module_train(m, false);
    return m;
}
