/* nn/onnx_rnn.c: torch.nn.RNN, LSTM and GRU as ONNX's RNN, LSTM and GRU nodes, one per
 * layer (ONNX's have one layer each), both directions in one node.
 *
 * The weights are reordered as torch.onnx reorders them: PyTorch stacks LSTM gates as
 * i, f, g, o and ONNX as i, o, f, c; GRU's r, z, n become z, r, h; the directions are
 * stacked on a new dim 0 and each direction's two biases concatenated (ONNX's B is
 * [D, 2*G*H]: Wb then Rb). GRU keeps PyTorch's formula through linear_before_reset = 1
 * (the reset gate multiplies W_hn h + b_hn). These derived tensors are named
 * "<layer>.onnx.W_l<k>", "R_l<k>", "B_l<k>".
 *
 * An LSTM's proj_size cannot be written: ONNX's LSTM has no projection of the hidden
 * state. ONNX Runtime runs only layout 0 ([T, B, ...]), so batch_first is a Transpose
 * on each side rather than the layout attribute. */
#include <stdio.h>
#include <string.h>

#include "onnx_internal.h"
#include "weft/ops.h"

/* ONNX's gate order as PyTorch's gate indices: LSTM i o f c from i f g o, GRU z r h from
 * r z n; a vanilla RNN has one gate. */
static const int lstm_order[4] = {0, 3, 1, 2};
static const int gru_order[3] = {1, 0, 2};

static int gates(int mode)
{
    return mode == WEFT_RNN_LSTM ? 4 : mode == WEFT_RNN_GRU ? 3 : 1;
}

/* w [G*H, ...] with its G row blocks in ONNX's order. Call inside a scope. */
static weft_tensor *reorder(weft_tensor *w, int mode, int64_t H)
{
    int G = gates(mode);
    if (G == 1)
        return w;
    const int *order = mode == WEFT_RNN_LSTM ? lstm_order : gru_order;
    weft_tensor *parts[4];
    for (int k = 0; k < G; k++)
        parts[k] = weft_narrow(w, 0, order[k] * H, H);
    return weft_cat(G, parts, 0);
}

/* Layer l's W [D, G*H, in], R [D, G*H, H] and (with biases) B [D, 2*G*H] as
 * initializers. */
static int layer_weights(weft_onnx_graph *g, weft_module *m, const struct weft_rnn_options *o,
                         int64_t l, const char *names[3])
{
    const int D = o->bidirectional ? 2 : 1;
    const int64_t H = o->hidden_size;
    weft_tensor *w[2], *r[2], *b[2];
    char key[64], name[32];
    weft_scope_push();
    for (int d = 0; d < D; d++) {
        const char *sfx = d ? "_reverse" : "";
        snprintf(key, sizeof key, "weight_ih_l%lld%s", (long long)l, sfx);
        w[d] = reorder(weft_module_parameter(m, key), o->mode, H);
        snprintf(key, sizeof key, "weight_hh_l%lld%s", (long long)l, sfx);
        r[d] = reorder(weft_module_parameter(m, key), o->mode, H);
        if (o->bias) {
            weft_tensor *both[2];
            snprintf(key, sizeof key, "bias_ih_l%lld%s", (long long)l, sfx);
            both[0] = reorder(weft_module_parameter(m, key), o->mode, H);
            snprintf(key, sizeof key, "bias_hh_l%lld%s", (long long)l, sfx);
            both[1] = reorder(weft_module_parameter(m, key), o->mode, H);
            b[d] = weft_cat(2, both, 0);
        }
    }
    snprintf(name, sizeof name, "W_l%lld", (long long)l);
    names[0] = weft_onnx_initializer(g, m, name, weft_stack(D, w, 0));
    snprintf(name, sizeof name, "R_l%lld", (long long)l);
    names[1] = weft_onnx_initializer(g, m, name, weft_stack(D, r, 0));
    names[2] = "";
    if (o->bias) {
        snprintf(name, sizeof name, "B_l%lld", (long long)l);
        names[2] = weft_onnx_initializer(g, m, name, weft_stack(D, b, 0));
    }
    weft_scope_pop();
    return names[0] && names[1] && names[2] ? 0 : weft_error_code();
}

/* Y [T, D, B, H] -> [T, B, D*H], the next layer's input and PyTorch's output. */
static const char *merge_directions(weft_onnx_graph *g, const char *y, int D)
{
    if (D == 1)
        return onnx_axes_op(g, "Squeeze", y, 1, (const int64_t[]){1});
    const char *t = weft_onnx_transpose(g, y, 4, (const int64_t[]){0, 2, 1, 3});
    return weft_onnx_reshape(g, t, 3, (const int64_t[]){0, 0, -1});
}

const char *nn_onnx_export_rnn(weft_module *m, struct weft_onnx_graph *g, const char *x)
{
    const struct weft_rnn_options *o = weft_nn_rnn_options(m);
    const char *cls = weft_module_type_name(m);
    weft_tensor *ex = weft_onnx_example(g, x);
    if (!o || !ex)
        return NULL;
    if (o->proj_size > 0) {
        weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "LSTM(proj_size=%lld) cannot be exported: "
                                                 "ONNX's LSTM has no projection of the hidden "
                                                 "state (proj_size)",
                       (long long)o->proj_size);
        return NULL;
    }
    if (ex->ndim != 3) {
        char shape[160];
        weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "%s is exported for batched input (3-D); the "
                                                 "example is %s",
                       cls, weft_shape_str(ex->ndim, ex->shape, shape, sizeof shape));
        return NULL;
    }
    const int D = o->bidirectional ? 2 : 1;
    const char *op = o->mode == WEFT_RNN_LSTM ? "LSTM" : o->mode == WEFT_RNN_GRU ? "GRU" : "RNN";
    const char *seq = o->batch_first ? weft_onnx_transpose(g, x, 3, (const int64_t[]){1, 0, 2}) : x;
    const char *h_last = NULL;
    for (int64_t l = 0; l < o->num_layers && seq; l++) {
        const char *w[3];
        if (layer_weights(g, m, o, l, w) != 0)
            return NULL;
        const char *in[4] = {seq, w[0], w[1], w[2]};
        weft_onnx_node *n = weft_onnx_node_add(g, op, *w[2] ? 4 : 3, in, 2);
        weft_onnx_attr_int(n, "hidden_size", o->hidden_size);
        weft_onnx_attr_string(n, "direction", D == 2 ? "bidirectional" : "forward");
        if (o->mode == WEFT_RNN_GRU)
            weft_onnx_attr_int(n, "linear_before_reset", 1);
        if (o->mode == WEFT_RNN_TANH || o->mode == WEFT_RNN_RELU) {
            const char *act = o->mode == WEFT_RNN_RELU ? "Relu" : "Tanh";
            weft_onnx_attr_strings(n, "activations", D, (const char *const[]){act, act});
        }
        seq = merge_directions(g, weft_onnx_node_output(n, 0), D);
        h_last = weft_onnx_node_output(n, 1);
    }
    if (o->output == WEFT_RNN_OUTPUT_LAST) { /* Y_h [D, B, H] -> [B, D*H] */
        if (D == 1)
            return onnx_axes_op(g, "Squeeze", h_last, 1, (const int64_t[]){0});
        const char *t = weft_onnx_transpose(g, h_last, 3, (const int64_t[]){1, 0, 2});
        return weft_onnx_reshape(g, t, 2, (const int64_t[]){0, -1});
    }
    return o->batch_first ? weft_onnx_transpose(g, seq, 3, (const int64_t[]){1, 0, 2}) : seq;
}
