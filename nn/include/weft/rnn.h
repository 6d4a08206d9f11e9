/* weft/rnn.h: recurrent layers, torch.nn.RNN, LSTM and GRU, as fused layers.
 *
 * Each layer and direction is one autograd node (RnnLayerBackward0) over the backend's
 * rnn_layer kernels (weft/kernel.h): the input projection of all steps as one GEMM, then
 * per step one recurrent GEMM and one gate pass into preallocated buffers; its backward
 * runs back through time over the saved gate activations and forms the weight gradients
 * as GEMMs over all steps. Parameters are named and laid out as PyTorch's
 * (weight_ih_l0 [G*H, I] with LSTM's gates i, f, g, o and GRU's r, z, n, weight_hh_l0
 * [G*H, P], bias_ih_l0, bias_hh_l0, weight_hr_l0 [P, H] with proj_size, "_reverse" for
 * the second direction), so state_dicts move between PyTorch and weft unchanged. The
 * kernels exist for float32 and float64. */
#ifndef WEFT_RNN_H
#define WEFT_RNN_H

#include <stdbool.h>
#include <stdint.h>

#include "weft/kernel.h"
#include "weft/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct weft_module weft_module;

/* What a recurrent module's single-tensor forward (and so a sequential model) passes on:
 * the output sequence, or the last layer's final hidden state of each direction
 * concatenated, [B, D*P] ([D*P] unbatched): output[:, -1] for one direction without
 * lengths, each sequence's own last step with them. */
enum weft_rnn_output { WEFT_RNN_OUTPUT_SEQUENCE = 0, WEFT_RNN_OUTPUT_LAST = 1 };

/* torch.nn.RNN/LSTM/GRU's constructor arguments. */
struct weft_rnn_options {
    int mode;                  /* enum weft_rnn_mode: WEFT_RNN_TANH, _RELU, _LSTM, _GRU */
    int64_t input_size, hidden_size;
    int64_t num_layers;        /* 0 means 1 */
    bool bias;                 /* PyTorch's default is true */
    bool batch_first;          /* input and output [B, T, ...] instead of [T, B, ...] */
    double dropout;            /* on every layer's output but the last's, in training */
    bool bidirectional;
    int64_t proj_size;         /* LSTM only; 0: none, else < hidden_size */
    enum weft_rnn_output output; /* the module's single-tensor forward only */
};
/* PyTorch's defaults for mode: one layer, bias, no dropout, unidirectional. */
struct weft_rnn_options weft_rnn_defaults(int mode, int64_t input_size, int64_t hidden_size);

/* One call's tensors. */
struct weft_rnn_input {
    weft_tensor *input;   /* [T, B, I] ([B, T, I] batch_first), or unbatched [T, I] */
    weft_tensor *h0;      /* [L*D, B, P] ([L*D, P] unbatched), or NULL for zeros */
    weft_tensor *c0;      /* LSTM: [L*D, B, H], or NULL for zeros */
    /* NULL, or int64 [B] on the cpu: the sequences' lengths, as pack_padded_sequence takes
     * them (1 <= length <= T). Steps past a length are not run: output there is 0, h_n and
     * c_n are each sequence's state after its last step, the reverse direction starts at
     * each sequence's own end; output keeps T steps (pad_packed_sequence with
     * total_length=T). */
    weft_tensor *lengths;
    /* pack_padded_sequence's: lengths must then be in decreasing order (PyTorch's error
     * otherwise); false takes any order. */
    bool enforce_sorted;
};
/* (output, h_n, c_n): output [T, B, D*P] (batch_first: [B, T, D*P]); h_n [L*D, B, P];
 * c_n [L*D, B, H] for LSTM, else NULL. New references recorded in the caller's scope. */
struct weft_rnn_result {
    weft_tensor *output, *h_n, *c_n;
};

/* The functional form (torch's _VF.rnn_tanh/lstm/gru): weights in PyTorch's _flat_weights
 * order, per layer and direction w_ih, w_hh, then b_ih, b_hh when options->bias, then
 * w_hr when proj_size. training applies options->dropout between layers. Errors as
 * PyTorch's ("input.size(-1) must be equal to input_size. Expected 4, got 3", "Expected
 * hidden size (1, 2, 3), got [2, 2, 3]", the `lengths` messages of pack_padded_sequence).
 * Returns 0, or negative with the error set and *result cleared. */
int weft_rnn(const struct weft_rnn_options *options, weft_tensor *const *weights,
             bool training, const struct weft_rnn_input *in, struct weft_rnn_result *result);

/* Modules nn.RNN (mode tanh or relu), nn.LSTM, nn.GRU: parameters float32 on the cpu,
 * uniform on [-1/sqrt(H), 1/sqrt(H)] as PyTorch initialises them; ValueError with
 * PyTorch's text for bad options. INI types "rnn" (nonlinearity = tanh|relu), "lstm",
 * "gru" with the constructor's keys and output = sequence|last. */
weft_module *weft_nn_rnn(const struct weft_rnn_options *options);
/* The module's full forward (PyTorch's module(input, hx) with a packed input given as
 * lengths). Returns 0 or negative. */
int weft_nn_rnn_forward(weft_module *m, const struct weft_rnn_input *in,
                        struct weft_rnn_result *result);
/* The options m was built with, or NULL when m is not a recurrent module. */
const struct weft_rnn_options *weft_nn_rnn_options(const weft_module *m);

#ifdef __cplusplus
}
#endif
#endif
