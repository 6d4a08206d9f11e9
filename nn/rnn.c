/* nn/rnn.c: the functional recurrent layers (torch's _VF.rnn_tanh, rnn_relu, lstm, gru):
 * argument checks with PyTorch's texts, the stack of layers and directions, and one
 * autograd node per layer and direction over the rnn_layer kernels (weft/kernel.h).
 *
 * A layer and direction: gi = x W_ih^T + b_ih for all steps as one GEMM, then the
 * rnn_layer kernel (per step the recurrent GEMM and the gate pass), grad mode off. Its
 * node saves the kernel's state sequence, gate activations, cell states and aux, so the
 * backward is the rnn_layer_backward kernel (back through time, giving the gradient of
 * every step's pre-activations) followed by GEMMs over all steps: dx = dG W_ih,
 * dW_ih = dG^T x, dW_hh = dG^T h_prev, dW_hr = dh^T (o tanh c), and the bias sums. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "functional.h"
#include "rnn_internal.h"

static int layer_op(void)
{
    static int cached = -1;
    return nn_named_op(&cached, WEFT_OP_RNN_LAYER_NAME);
}

static int layer_backward_op(void)
{
    static int cached = -1;
    return nn_named_op(&cached, WEFT_OP_RNN_LAYER_BACKWARD_NAME);
}

static int gates_of(int mode)
{
    return mode == WEFT_RNN_LSTM ? 4 : mode == WEFT_RNN_GRU ? 3 : 1;
}

struct weft_rnn_options weft_rnn_defaults(int mode, int64_t input_size, int64_t hidden_size)
{
    return (struct weft_rnn_options){.mode = mode, .input_size = input_size,
                                     .hidden_size = hidden_size, .num_layers = 1,
                                     .bias = true};
}

/* ---- one layer and direction ----------------------------------------------------------- */

/* Saved slots and ints of a layer's node. */
enum { S_X, S_W_IH, S_W_HH, S_W_HR, S_H0, S_C0, S_HS, S_GATES, S_CS, S_AUX, S_LENGTHS, S_COUNT };
enum { I_MODE, I_REVERSE, I_T, I_B, I_H, I_P };
/* Inputs of a layer's node. */
enum { IN_X, IN_W_IH, IN_W_HH, IN_B_IH, IN_B_HH, IN_W_HR, IN_H0, IN_C0, IN_COUNT };

static const char *node_name(int mode)
{
    switch (mode) {
    case WEFT_RNN_LSTM: return "LstmLayerBackward0";
    case WEFT_RNN_GRU: return "GruLayerBackward0";
    default: return "RnnLayerBackward0";
    }
}

static weft_tensor *flat2(weft_tensor *t, int64_t rows)
{
    const int64_t shape[2] = {rows, -1};
    return weft_reshape(t, 2, shape);
}

/* sum_t dG[t]^T h_prev[t]: the state before step t is hs[t - 1] (hs[t + 1] in reverse),
 * h0 before the first step; dG [T, B, GH], hs [T, B, P], h0 [B, P]. */
static weft_tensor *grad_w_hh(weft_tensor *dg, weft_tensor *hs, weft_tensor *h0, bool reverse)
{
    int64_t T = dg->shape[0], B = dg->shape[1];
    int64_t first = reverse ? T - 1 : 0;
    weft_tensor *g = weft_matmul(weft_t(weft_select(dg, 0, first)), h0);
    if (T == 1)
        return g;
    weft_tensor *d = weft_narrow(dg, 0, reverse ? 0 : 1, T - 1);
    weft_tensor *h = weft_narrow(hs, 0, reverse ? 1 : 0, T - 1);
    return weft_add(g, weft_matmul(weft_t(flat2(d, (T - 1) * B)), flat2(h, (T - 1) * B)));
}

static int layer_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                          weft_tensor **grad_inputs)
{
    const int64_t *ints = weft_node_ints(node);
    const int mode = (int)ints[I_MODE];
    const bool lstm = mode == WEFT_RNN_LSTM, gru = mode == WEFT_RNN_GRU;
    const int64_t T = ints[I_T], B = ints[I_B], H = ints[I_H], P = ints[I_P];
    const int64_t GH = gates_of(mode) * H;
    weft_tensor *x = weft_node_saved(node, S_X), *w_ih = weft_node_saved(node, S_W_IH);
    weft_tensor *w_hr = weft_node_saved(node, S_W_HR), *h0 = weft_node_saved(node, S_H0);
    weft_tensor *hs = weft_node_saved(node, S_HS), *aux = weft_node_saved(node, S_AUX);
    weft_tensor *go = grad_outputs[0] ? weft_contiguous(grad_outputs[0]) : NULL;
    weft_tensor *ghn = grad_outputs[1] ? weft_contiguous(grad_outputs[1]) : NULL;
    weft_tensor *gcn = lstm && grad_outputs[2] ? weft_contiguous(grad_outputs[2]) : NULL;
    const int64_t sg[3] = {T, B, GH}, sp[3] = {T, B, P}, sb[2] = {B, P}, sc[2] = {B, H};
    weft_device dev = hs->device;
    enum weft_dtype dt = hs->dtype;
    weft_tensor *dgi = weft_empty(3, sg, dt, dev);
    weft_tensor *dgh = gru ? weft_empty(3, sg, dt, dev) : NULL;
    weft_tensor *dh = w_hr ? weft_empty(3, sp, dt, dev) : NULL;
    weft_tensor *dh0 = weft_empty(2, sb, dt, dev);
    weft_tensor *dc0 = lstm ? weft_empty(2, sc, dt, dev) : NULL;
    if ((grad_outputs[0] && !go) || (grad_outputs[1] && !ghn) || (gcn == NULL && lstm &&
        grad_outputs[2]) || !dgi || (gru && !dgh) || (w_hr && !dh) || !dh0 || (lstm && !dc0))
        return weft_error_code();
    struct weft_rnn_kernel_params p = {
        .mode = mode, .reverse = ints[I_REVERSE] != 0, .T = T, .B = B, .H = H, .P = P,
        .w_hh = weft_node_saved(node, S_W_HH), .w_hr = w_hr, .h0 = h0,
        .c0 = weft_node_saved(node, S_C0), .lengths = weft_node_saved(node, S_LENGTHS),
        .hs = hs, .gates = weft_node_saved(node, S_GATES), .cs = weft_node_saved(node, S_CS),
        .aux = aux, .grad_out = go, .grad_hn = ghn, .grad_cn = gcn, .grad_gi = dgi,
        .grad_gh = dgh, .grad_h = dh, .grad_h0 = dh0, .grad_c0 = dc0};
    struct weft_op_call c = {.op = layer_backward_op(), .nin = 1, .nout = 1, .in = {dgi},
                             .out = {dgi}, .params = &p, .params_size = sizeof p};
    if (weft_dispatch(&c) != 0)
        return weft_error_code();
    weft_tensor *dg2 = flat2(dgi, T * B);
    weft_tensor *dgh3 = gru ? dgh : dgi;
    if (weft_node_needs_input_grad(node, IN_X))
        grad_inputs[IN_X] = weft_reshape(weft_matmul(dg2, w_ih), 3, x->shape);
    if (weft_node_needs_input_grad(node, IN_W_IH))
        grad_inputs[IN_W_IH] = weft_matmul(weft_t(dg2), flat2(x, T * B));
    if (weft_node_needs_input_grad(node, IN_B_IH))
        grad_inputs[IN_B_IH] = weft_sum(dg2, 1, (const int[]){0}, false);
    if (weft_node_needs_input_grad(node, IN_W_HH))
        grad_inputs[IN_W_HH] = grad_w_hh(dgh3, hs, h0, p.reverse);
    if (weft_node_needs_input_grad(node, IN_B_HH))
        grad_inputs[IN_B_HH] = weft_sum(flat2(dgh3, T * B), 1, (const int[]){0}, false);
    if (w_hr && weft_node_needs_input_grad(node, IN_W_HR))
        grad_inputs[IN_W_HR] = weft_matmul(weft_t(flat2(dh, T * B)), flat2(aux, T * B));
    if (weft_node_needs_input_grad(node, IN_H0))
        grad_inputs[IN_H0] = dh0;
    if (weft_node_needs_input_grad(node, IN_C0))
        grad_inputs[IN_C0] = dc0;
    for (int i = 0; i < IN_COUNT; i++)
        if (weft_node_needs_input_grad(node, i) && !grad_inputs[i])
            return weft_error_code();
    return 0;
}

struct layer {
    int mode;
    bool reverse;
    int64_t H, P;
    weft_tensor *x; /* [T, B, I] contiguous */
    weft_tensor *in[IN_COUNT];
    weft_tensor *lengths; /* int64 [B] on x's device, or NULL */
};

static weft_tensor *contiguous_or_null(weft_tensor *t)
{
    return t ? weft_contiguous(t) : NULL;
}

/* One layer and direction: out [T, B, P], h_n [B, P], c_n [B, H] (LSTM), recorded in the
 * open scope. */
static int layer_forward(struct layer *l, weft_tensor **out, weft_tensor **h_n,
                         weft_tensor **c_n)
{
    const bool lstm = l->mode == WEFT_RNN_LSTM, gru = l->mode == WEFT_RNN_GRU;
    weft_tensor *x = l->x;
    const int64_t T = x->shape[0], B = x->shape[1], H = l->H, P = l->P;
    const int64_t GH = gates_of(l->mode) * H;
    const int64_t st[3] = {T, B, P}, sg[3] = {T, B, GH}, sh[3] = {T, B, H};
    const int64_t sb[2] = {B, P}, sc[2] = {B, H};
    weft_device dev = x->device;
    enum weft_dtype dt = x->dtype;
    bool rec = weft_autograd_needed(IN_COUNT, l->in);
    bool prev = weft_no_grad_begin();
    weft_tensor *gi = weft_contiguous(weft_linear(x, l->in[IN_W_IH], l->in[IN_B_IH]));
    weft_tensor *w_hh = weft_contiguous(l->in[IN_W_HH]);
    weft_tensor *b_hh = contiguous_or_null(l->in[IN_B_HH]);
    weft_tensor *w_hr = contiguous_or_null(l->in[IN_W_HR]);
    weft_tensor *h0 = weft_contiguous(l->in[IN_H0]);
    weft_tensor *c0 = contiguous_or_null(l->in[IN_C0]);
    weft_tensor *o = weft_empty(3, st, dt, dev);
    weft_tensor *hs = l->lengths ? weft_empty(3, st, dt, dev) : o;
    weft_tensor *gates = lstm || gru ? weft_empty(3, sg, dt, dev) : NULL;
    weft_tensor *cs = lstm ? weft_empty(3, sh, dt, dev) : NULL;
    weft_tensor *aux = gru || w_hr ? weft_empty(3, sh, dt, dev) : NULL;
    weft_tensor *hn = weft_empty(2, sb, dt, dev), *cn = lstm ? weft_empty(2, sc, dt, dev) : NULL;
    bool ok = gi && w_hh && (b_hh || !l->in[IN_B_HH]) && (w_hr || !l->in[IN_W_HR]) && h0 &&
              (c0 || !lstm) && o && hs && (gates || !(lstm || gru)) && (cs || !lstm) &&
              (aux || !(gru || w_hr)) && hn && (cn || !lstm);
    struct weft_rnn_kernel_params p = {
        .mode = l->mode, .reverse = l->reverse, .T = T, .B = B, .H = H, .P = P,
        .w_hh = w_hh, .b_hh = b_hh, .w_hr = w_hr, .h0 = h0, .c0 = c0, .lengths = l->lengths,
        .out = o, .h_n = hn, .c_n = cn, .hs = hs, .gates = gates, .cs = cs, .aux = aux};
    if (ok) {
        struct weft_op_call c = {.op = layer_op(), .nin = 1, .nout = 1, .in = {gi},
                                 .out = {o}, .params = &p, .params_size = sizeof p};
        ok = weft_dispatch(&c) == 0;
    }
    weft_grad_mode_restore(prev);
    if (!ok)
        return weft_error_code();
    *out = o;
    *h_n = hn;
    *c_n = cn;
    if (!rec)
        return 0;
    struct weft_node *node = weft_node_create(node_name(l->mode), layer_backward, IN_COUNT,
                                              l->in, S_COUNT);
    if (!node)
        return weft_error_code();
    weft_tensor *const saved[S_COUNT] = {x, l->in[IN_W_IH], w_hh, w_hr, h0, c0, hs, gates,
                                         cs, aux, l->lengths};
    for (int i = 0; i < S_COUNT; i++)
        if (saved[i] && weft_node_save(node, i, saved[i]) != 0) {
            weft_node_abandon(node);
            return weft_error_code();
        }
    int64_t *ints = weft_node_ints(node);
    ints[I_MODE] = l->mode;
    ints[I_REVERSE] = l->reverse;
    ints[I_T] = T;
    ints[I_B] = B;
    ints[I_H] = H;
    ints[I_P] = P;
    weft_tensor *outs[3] = {o, hn, cn};
    return weft_node_finish(node, lstm ? 3 : 2, outs);
}

/* ---- checks ----------------------------------------------------------------------------- */

static const char *mode_class(int mode)
{
    return mode == WEFT_RNN_LSTM ? "LSTM" : mode == WEFT_RNN_GRU ? "GRU" : "RNN";
}

/* "[2, 3, 3]" as Python prints list(t.size()). */
static const char *py_list(const weft_tensor *t, char *buf, size_t size)
{
    size_t n = (size_t)snprintf(buf, size, "[");
    for (int d = 0; d < t->ndim && n < size; d++)
        n += (size_t)snprintf(buf + n, size - n, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
    if (n < size)
        snprintf(buf + n, size - n, "]");
    return buf;
}

static int check_hidden(const weft_tensor *h, const char *what, int64_t n, int64_t B,
                        int64_t P)
{
    char got[128];
    if (h->ndim == 3 && h->shape[0] == n && h->shape[1] == B && h->shape[2] == P)
        return 0;
    return weft_error_set(WEFT_ERR_RUNTIME, "Expected %s size (%lld, %lld, %lld), got %s", what,
                          (long long)n, (long long)B, (long long)P, py_list(h, got, sizeof got));
}

NN_INTERNAL int nn_rnn_check_options(const struct weft_rnn_options *o)
{
    if (!o || o->mode < WEFT_RNN_TANH || o->mode > WEFT_RNN_GRU)
        return weft_error_set(WEFT_ERR_VALUE, "rnn: unknown mode %d (expected tanh, relu, lstm "
                                              "or gru)", o ? o->mode : -1);
    if (!(o->dropout >= 0 && o->dropout <= 1))
        return weft_error_set(WEFT_ERR_VALUE, "dropout should be a number in range [0, 1] "
                                              "representing the probability of an element "
                                              "being zeroed");
    if (o->proj_size < 0)
        return weft_error_set(WEFT_ERR_VALUE, "proj_size should be a positive integer or zero "
                                              "to disable projections");
    if (o->proj_size > 0 && o->mode != WEFT_RNN_LSTM)
        return weft_error_set(WEFT_ERR_VALUE,
                              "proj_size argument is only supported for LSTM, not RNN or GRU");
    if (o->hidden_size <= 0 || o->input_size <= 0 || o->num_layers < 0)
        return weft_error_set(WEFT_ERR_VALUE, "%s: expected input_size, hidden_size and "
                                              "num_layers > 0, got %lld, %lld and %lld",
                              mode_class(o->mode), (long long)o->input_size,
                              (long long)o->hidden_size, (long long)o->num_layers);
    if (o->proj_size >= o->hidden_size)
        return weft_error_set(WEFT_ERR_VALUE, "proj_size has to be smaller than hidden_size");
    /* the gates' rows (4 x hidden_size for an LSTM) and the next layer's input (2 x
     * hidden_size bidirectional) are sizes too: they must fit an int64 */
    int64_t rows;
    if (!weft_size_mul(o->hidden_size, 4, WEFT_SIZE_MAX, &rows) ||
        !weft_size_mul(o->input_size, 2, WEFT_SIZE_MAX, &rows))
        return weft_error_set(WEFT_ERR_VALUE, "%s: input_size = %lld and hidden_size = %lld: "
                                              "expected sizes below 2^61",
                              mode_class(o->mode), (long long)o->input_size,
                              (long long)o->hidden_size);
    return 0;
}

/* The lengths as int64 [B] on the cpu, checked as pack_padded_sequence does. */
static weft_tensor *checked_lengths(weft_tensor *lengths, int64_t T, int64_t B, bool sorted)
{
    weft_tensor *len = weft_contiguous(weft_to(lengths, WEFT_CPU, WEFT_I64, false));
    if (!len)
        return NULL;
    if (len->ndim != 1) {
        weft_error_set(WEFT_ERR_RUNTIME, "'lengths' argument should be a 1D CPU int64 tensor, "
                                         "but got %dD cpu Long tensor", len->ndim);
        return NULL;
    }
    if (len->shape[0] != B) {
        weft_error_set(WEFT_ERR_RUNTIME, "Expected `len(lengths)` to be equal to batch_size, "
                                         "but got %lld (batch_size=%lld)",
                       (long long)len->shape[0], (long long)B);
        return NULL;
    }
    const int64_t *v = weft_tensor_data(len);
    int64_t lo = INT64_MAX, hi = 0;
    for (int64_t b = 0; b < B; b++) {
        lo = v[b] < lo ? v[b] : lo;
        hi = v[b] > hi ? v[b] : hi;
    }
    /* PyTorch tests the last entry, then the order; sorted, that is the smallest. */
    if (B > 0 && (sorted ? v[B - 1] : lo) <= 0) {
        weft_error_set(WEFT_ERR_RUNTIME, "Length of all samples has to be greater than 0, but "
                                         "found an element in 'lengths' that is <= 0");
        return NULL;
    }
    for (int64_t b = 1; sorted && b < B; b++)
        if (v[b] > v[b - 1]) {
            weft_error_set(WEFT_ERR_RUNTIME,
                           "`lengths` array must be sorted in decreasing order when "
                           "`enforce_sorted` is True. You can pass `enforce_sorted=False` to "
                           "pack_padded_sequence and/or pack_sequence to sidestep this "
                           "requirement if you do not need ONNX exportability.");
            return NULL;
        }
    if (hi > T) {
        weft_error_set(WEFT_ERR_RUNTIME, "rnn: a length of %lld is longer than the input's %lld "
                                         "steps", (long long)hi, (long long)T);
        return NULL;
    }
    return len;
}

/* PyTorch's checks of input and hx, in its order. *batched: 3-D input. */
static int check_call(const struct weft_rnn_options *o, weft_tensor *const *weights,
                      const struct weft_rnn_input *in, bool *batched)
{
    const weft_tensor *x = in->input, *h = in->h0, *c = in->c0;
    const bool lstm = o->mode == WEFT_RNN_LSTM;
    if (x->ndim != 2 && x->ndim != 3)
        return weft_error_set(WEFT_ERR_RUNTIME, "input must have 3 dimensions, got %d",
                              x->ndim + 1);
    *batched = x->ndim == 3;
    int want = *batched ? 3 : 2;
    if (lstm && (h || c) && (!h || !c))
        return weft_error_set(WEFT_ERR_RUNTIME, "LSTM: expected both h0 and c0, or neither");
    if (lstm && h && (h->ndim != want || c->ndim != want))
        return weft_error_set(WEFT_ERR_RUNTIME, "For %s input, hx and cx should also be %d-D "
                                                "but got (%d-D, %d-D) tensors",
                              *batched ? "batched 3-D" : "unbatched 2-D", want, h->ndim, c->ndim);
    if (!lstm && h && h->ndim != want)
        return weft_error_set(WEFT_ERR_RUNTIME, "For %s input, hx should also be %d-D but got "
                                                "%d-D tensor",
                              *batched ? "batched 3-D" : "unbatched 2-D", want, h->ndim);
    if (x->shape[x->ndim - 1] != o->input_size)
        return weft_error_set(WEFT_ERR_RUNTIME, "input.size(-1) must be equal to input_size. "
                                                "Expected %lld, got %lld",
                              (long long)o->input_size, (long long)x->shape[x->ndim - 1]);
    if (x->dtype != weights[0]->dtype)
        return weft_error_set(WEFT_ERR_RUNTIME, "mat1 and mat2 must have the same dtype");
    if (!weft_dtype_is_floating(x->dtype))
        return weft_error_set(WEFT_ERR_RUNTIME, "%s: expected a floating input, got %s",
                              mode_class(o->mode), weft_dtype_name(x->dtype));
    if (x->shape[0] == 0 || (*batched && x->shape[1] == 0 && o->batch_first))
        return weft_error_set(WEFT_ERR_RUNTIME, "Expected sequence length to be larger than 0 "
                                                "in RNN");
    if (in->lengths && !*batched)
        return weft_error_set(WEFT_ERR_RUNTIME, "rnn: lengths need a batched 3-D input, got "
                                                "%d-D", x->ndim);
    return 0;
}

/* ---- the stack ---------------------------------------------------------------------------- */

static int rnn_in_scope(const struct weft_rnn_options *o, weft_tensor *const *weights,
                        bool training, const struct weft_rnn_input *in,
                        struct weft_rnn_result *r)
{
    bool batched = false;
    int rc = check_call(o, weights, in, &batched);
    if (rc)
        return rc;
    const bool lstm = o->mode == WEFT_RNN_LSTM;
    const int64_t L = o->num_layers > 0 ? o->num_layers : 1, D = o->bidirectional ? 2 : 1;
    const int64_t H = o->hidden_size, P = o->proj_size > 0 ? o->proj_size : H;
    const int nper = 2 + (o->bias ? 2 : 0) + (o->proj_size > 0 ? 1 : 0);
    weft_tensor *x = in->input, *h0 = in->h0, *c0 = in->c0;
    if (!batched) {
        x = weft_unsqueeze(x, 1);
        h0 = h0 ? weft_unsqueeze(h0, 1) : NULL;
        c0 = c0 ? weft_unsqueeze(c0, 1) : NULL;
    } else if (o->batch_first) {
        x = weft_transpose(x, 0, 1);
    }
    x = weft_contiguous(x);
    if (!x)
        return weft_error_code();
    const int64_t T = x->shape[0], B = x->shape[1];
    if (T == 0)
        return weft_error_set(WEFT_ERR_RUNTIME, "Expected sequence length to be larger than 0 "
                                                "in RNN");
    if ((h0 && (rc = check_hidden(h0, lstm ? "hidden[0]" : "hidden", L * D, B, P))) ||
        (c0 && (rc = check_hidden(c0, "hidden[1]", L * D, B, H))))
        return rc;
    weft_tensor *len = NULL, *len_dev = NULL;
    if (in->lengths) {
        len = checked_lengths(in->lengths, T, B, in->enforce_sorted);
        len_dev = len ? weft_to(len, x->device, WEFT_I64, false) : NULL;
        if (!len_dev)
            return weft_error_code();
    }
    const int64_t shp[3] = {L * D, B, P}, shc[3] = {L * D, B, H};
    if (!h0 && !(h0 = weft_zeros(3, shp, x->dtype, x->device)))
        return weft_error_code();
    if (lstm && !c0 && !(c0 = weft_zeros(3, shc, x->dtype, x->device)))
        return weft_error_code();
    weft_tensor *hns[2 * 64], *cns[2 * 64];
    weft_tensor **hn = L * D <= 128 ? hns : NULL, **cn = L * D <= 128 ? cns : NULL;
    if (!hn)
        return weft_error_set(WEFT_ERR_VALUE, "rnn: at most 64 layers, got %lld", (long long)L);
    for (int64_t l = 0; l < L; l++) {
        weft_tensor *outs[2];
        for (int64_t d = 0; d < D; d++) {
            int64_t idx = l * D + d;
            weft_tensor *const *w = weights + idx * nper;
            struct layer ly = {.mode = o->mode, .reverse = d == 1, .H = H, .P = P, .x = x,
                               .lengths = len_dev};
            ly.in[IN_X] = x;
            ly.in[IN_W_IH] = w[0];
            ly.in[IN_W_HH] = w[1];
            ly.in[IN_B_IH] = o->bias ? w[2] : NULL;
            ly.in[IN_B_HH] = o->bias ? w[3] : NULL;
            ly.in[IN_W_HR] = o->proj_size > 0 ? w[nper - 1] : NULL;
            ly.in[IN_H0] = weft_select(h0, 0, idx);
            ly.in[IN_C0] = lstm ? weft_select(c0, 0, idx) : NULL;
            if (!ly.in[IN_H0] || (lstm && !ly.in[IN_C0]))
                return weft_error_code();
            if ((rc = layer_forward(&ly, &outs[d], &hn[idx], &cn[idx])))
                return rc;
        }
        x = D == 2 ? weft_cat(2, outs, 2) : outs[0];
        if (training && o->dropout > 0 && l < L - 1)
            x = weft_dropout(x, o->dropout, true);
        if (!x)
            return weft_error_code();
    }
    weft_tensor *out = x, *h_n = weft_stack((int)(L * D), hn, 0);
    weft_tensor *c_n = lstm ? weft_stack((int)(L * D), cn, 0) : NULL;
    if (!batched) {
        out = weft_squeeze_dim(out, 1);
        h_n = weft_squeeze_dim(h_n, 1);
        c_n = c_n ? weft_squeeze_dim(c_n, 1) : NULL;
    } else if (o->batch_first) {
        out = weft_transpose(out, 0, 1);
    }
    if (!out || !h_n || (lstm && !c_n))
        return weft_error_code();
    r->output = out;
    r->h_n = h_n;
    r->c_n = c_n;
    return 0;
}

int weft_rnn(const struct weft_rnn_options *options, weft_tensor *const *weights,
             bool training, const struct weft_rnn_input *in, struct weft_rnn_result *result)
{
    if (!result)
        return weft_error_set(WEFT_ERR_VALUE, "rnn: result is NULL");
    *result = (struct weft_rnn_result){0};
    if (nn_rnn_check_options(options))
        return weft_error_code();
    if (!in || !in->input || !weights)
        return weft_error_code() ? weft_error_code()
                                 : weft_error_set(WEFT_ERR_VALUE, "rnn: no input or weights");
    const int64_t L = options->num_layers > 0 ? options->num_layers : 1;
    const int64_t n = L * (options->bidirectional ? 2 : 1) *
                      (2 + (options->bias ? 2 : 0) + (options->proj_size > 0 ? 1 : 0));
    for (int64_t i = 0; i < n; i++)
        if (!weights[i])
            return weft_error_code() ? weft_error_code()
                                     : weft_error_set(WEFT_ERR_VALUE, "rnn: weight %lld is NULL",
                                                      (long long)i);
    weft_scope_push();
    struct weft_rnn_result r = {0};
    int rc = rnn_in_scope(options, weights, training, in, &r);
    if (rc == 0) {
        weft_tensor_retain(r.output);
        weft_tensor_retain(r.h_n);
        if (r.c_n)
            weft_tensor_retain(r.c_n);
    }
    weft_scope_pop();
    if (rc)
        return rc;
    result->output = weft_autorelease(r.output);
    result->h_n = weft_autorelease(r.h_n);
    result->c_n = r.c_n ? weft_autorelease(r.c_n) : NULL;
    return 0;
}
