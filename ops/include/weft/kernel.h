/* weft/kernel.h: the plugin-facing contract between op front ends and kernels.
 *
 * Front ends (libweft-ops, and nn's) check arguments, promote dtypes, broadcast (inputs arrive expanded
 * to the output's shape, stride 0 where broadcast), allocate outputs and fill a
 * weft_op_call. A kernel only computes. This file is an ABI: ids and struct fields are
 * append-only, and changing either bumps WEFT_ABI_VERSION (weft/registry.h).
 *
 * Ops beyond the built-in ones are named: weft_op_register("adam_step") gives every
 * plugin that asks the same id, whichever asks first, so the plugin that defines an op
 * and the backends that implement it never name each other.
 *
 * Per-op contract (the op table's section comments, and the named ops' below). "same
 * shape" means every listed tensor has out[0]'s shape.
 * "dispatch dtype" (what a kernel's dtype mask is tested against) is in[0]'s dtype when
 * the op has inputs, else out[0]'s.
 */
#ifndef WEFT_KERNEL_H
#define WEFT_KERNEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "weft/dispatch.h"
#include "weft/op_table.h"
#include "weft/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The op layer's built-in ops: one id per row of the op table (weft/op_table.h, where
 * each op's kernel contract is), after the core's (weft/dispatch.h's WEFT_CORE_OPS). */
enum weft_op_id {
    WEFT_OP_TABLE_BEFORE_FIRST_ = WEFT_OP_CORE_COUNT - 1,
#define WEFT_OP_ENUM(ID, ...) WEFT_OP_##ID,
    WEFT_OP_TABLE(WEFT_OP_ENUM)
#undef WEFT_OP_ENUM
    WEFT_OP_BUILTIN_COUNT
};
#ifndef __cplusplus
_Static_assert(WEFT_OP_BUILTIN_COUNT <= WEFT_OP_FIRST_NAMED, "too many built-in ops");
#endif

/* Named ops the core uses where a backend registers them, and composes from built-in
 * ops where it does not (so a backend need not have them):
 * THRESHOLD_BACKWARD (PyTorch's threshold_backward): out[0] = in[1] > scalar[0] ? in[0]
 * : 0, in[0] the gradient, in[1] the forward input or result, out[0] and both inputs of
 * one shape and floating dtype. ReLU's backward in one pass, where the composite is two
 * (gt, where) and a bool mask between. */
#define WEFT_OP_THRESHOLD_BACKWARD_NAME "threshold_backward"
/* THRESHOLD_BACKWARD_SUM: THRESHOLD_BACKWARD and the sum of its result over rows in one
 * pass: in[0] the gradient and in[1] the forward input or result, both contiguous [M, N]
 * of one floating dtype; out[0] [M, N] contiguous = in[1] > scalar[0] ? in[0] : 0, bit for
 * bit as THRESHOLD_BACKWARD; out[1] [N] contiguous of that dtype = the sums of out[0]'s
 * columns, accumulated in float64 over fixed blocks of rows that are added in order (the
 * same bits for any number of threads), rounded once. A linear layer's ReLU backward and
 * its bias gradient, where the composite reads the gradient twice (nn). */
#define WEFT_OP_THRESHOLD_BACKWARD_SUM_NAME "threshold_backward_sum"
/* ADD_BIAS_RELU, in place: out[0] [M, N] = relu(out[0] + in[0]), in[0] a bias [N], both
 * contiguous, one floating dtype; relu as the RELU op (x < 0 ? 0 : x, NaN kept). Linear's
 * epilogue in one pass over its GEMM's output, where add then relu are two (nn). */
#define WEFT_OP_ADD_BIAS_RELU_NAME "add_bias_relu"
/* NATIVE_LAYER_NORM (PyTorch's native_layer_norm over rows): in[0] x [R, D], in[1]
 * weight [D] or NULL, in[2] bias [D] or NULL, all contiguous and of one floating dtype;
 * scalar[0] eps. out[0] y [R, D] contiguous (x's dtype) = (x - mean) * rstd * w + b per
 * row; out[1] stats [2, R] contiguous: row 0 the mean, row 1 rstd = 1 / sqrt(var + eps)
 * (the biased variance), float64 for float64 x, else float32. LayerNorm in one pass over
 * each row for its moments, where the composite is six ops (nn). */
#define WEFT_OP_NATIVE_LAYER_NORM_NAME "native_layer_norm"
/* NATIVE_LAYER_NORM_BACKWARD: in[0] grad_out [R, D], in[1] x [R, D], in[2] stats [2, R]
 * as NATIVE_LAYER_NORM wrote it, in[3] weight [D] or NULL, all contiguous. out[0]
 * grad_input [R, D] contiguous = rstd * (g*w - mean(g*w) - xhat * mean(g*w*xhat)) per row,
 * xhat = (x - mean) * rstd; out[1] NULL or [2, D] contiguous: row 0 grad_weight = the sum
 * over rows of g * xhat, row 1 grad_bias = the sum of g, summed in a fixed order (the
 * same bits for any number of threads). Dispatch dtype: in[0]'s. */
#define WEFT_OP_NATIVE_LAYER_NORM_BACKWARD_NAME "native_layer_norm_backward"
/* GELU_TANH (F.gelu(x, approximate='tanh')): out[0] = 0.5 x (1 + tanh(sqrt(2/pi) (x +
 * 0.044715 x^3))), same shape, one floating dtype, any strides. */
#define WEFT_OP_GELU_TANH_NAME "gelu_tanh"
/* GELU_BACKWARD (PyTorch's gelu_backward): out[0] = in[0] * gelu'(in[1]), in[0] the
 * gradient and in[1] GELU's input, same shape, one floating dtype, any strides; ints[0]
 * 0 for the erf form (Phi(x) + x phi(x)), 1 for the tanh form. One pass where the
 * composite is about ten. */
#define WEFT_OP_GELU_BACKWARD_NAME "gelu_backward"
/* TANH_BACKWARD (PyTorch's tanh_backward): out[0] = in[0] * (1 - in[1] * in[1]), in[0]
 * the gradient and in[1] tanh's result; SIGMOID_BACKWARD (sigmoid_backward): out[0] =
 * in[0] * (1 - in[1]) * in[1], in[1] sigmoid's result. Same shape, one floating dtype,
 * any strides; one pass where the composite is three ops. */
#define WEFT_OP_TANH_BACKWARD_NAME "tanh_backward"
#define WEFT_OP_SIGMOID_BACKWARD_NAME "sigmoid_backward"
/* EMBEDDING_DENSE_BACKWARD (PyTorch's embedding_dense_backward): in[0] grad [N, D]
 * contiguous floating, in[1] indices int64 [N] contiguous; out[0] [num_weights, D]
 * contiguous of grad's dtype, overwritten: zeros, then row i of grad added to row
 * indices[i], in the order of i for every destination (deterministic, no atomics). An
 * index outside [0, num_weights) is IndexError "index out of range in self". */
#define WEFT_OP_EMBEDDING_DENSE_BACKWARD_NAME "embedding_dense_backward"
/* ADD_BIAS_GELU, in place: out[0] [M, N] += in[0], a bias [N], rounded to the dtype; then
 * out[1] [M, N] = gelu(out[0]) (ints[0] 0 the erf form, 1 the tanh form, as GELU_BACKWARD);
 * all contiguous, one floating dtype. Linear's epilogue with GELU in one pass; out[0] keeps
 * the pre-activation the backward's GELU_BACKWARD reads. */
#define WEFT_OP_ADD_BIAS_GELU_NAME "add_bias_gelu"
/* SDPA_FLASH (PyTorch's _scaled_dot_product_flash_attention): softmax(q k^T * scale +
 * mask) v without the [L, S] matrix (FlashAttention's online softmax over key blocks).
 * in[0] q [..., L, E], in[1] k [..., S, E], in[2] v [..., S, Ev]: one floating dtype, the
 * same batch dims (expanded: stride 0 where broadcast), the last dim of stride 1, other
 * strides free. out[0] [..., L, Ev] contiguous, q's dtype; out[1] logsumexp [..., L]
 * contiguous, float64 for float64 q, else float32: per row the log of the softmax's
 * denominator in the scaled scores, NaN for a row that sees no key (its output is NaN,
 * as PyTorch's math path gives). params: struct weft_sdpa_kernel_params. Causal masking
 * is top-left (key j visible from query i when j <= i), and key blocks it hides wholly
 * are skipped. Dropout keeps weight (b, i, j), b the flattened batch index, when Philox's
 * uniform (weft/philox.h: 24 bits, 32 for float64) of element (b * L + i) * S + j with
 * (seed, offset) is < 1 - dropout_p, and scales it by 1 / (1 - dropout_p): the mask
 * weft_dropout would draw on the [..., L, S] weights. The caller advances the generator
 * by ceil(numel / 4) blocks, as weft_rand does. */
#define WEFT_OP_SDPA_FLASH_NAME "sdpa_flash"
/* SDPA_FLASH_BACKWARD: in[0..2] q, k, v as SDPA_FLASH took them, in[3] grad_out [...,
 * L, Ev] (same rules); params: the forward's, with out and logsumexp as it wrote them
 * and grad_value. out[0] grad_q [..., L, E], out[1] grad_k [..., S, E], grad_value [...,
 * S, Ev], all contiguous, q's dtype, overwritten (broadcast batch dims are not summed).
 * The probabilities are recomputed from q, k and the logsumexp: D = rowsum(dO * O),
 * dV = W^T dO (W the dropped weights), dP = dO V^T (dropped likewise), dS = P * (dP - D),
 * dQ = scale dS K, dK = scale dS^T Q. Dispatch dtype: in[0]'s. */
#define WEFT_OP_SDPA_FLASH_BACKWARD_NAME "sdpa_flash_backward"
struct weft_sdpa_kernel_params {
    double scale;     /* multiplies q k^T */
    double dropout_p; /* 0 <= p < 1; 0: no dropout */
    bool is_causal;
    uint64_t seed, offset; /* the dropout mask's Philox key and first block */
    /* NULL, or [..., L, S] with q's batch dims (any strides, stride 0 where broadcast):
     * bool (true takes part) or q's dtype (added to the scaled scores). */
    const weft_tensor *mask;
    /* Backward only (NULL in the forward): the forward's out[0] and out[1], and where
     * grad_v goes. */
    const weft_tensor *out, *logsumexp;
    weft_tensor *grad_value;
};
/* RNN_LAYER (one layer and direction of torch.nn.RNN/LSTM/GRU over a whole sequence):
 * in[0] gi [T, B, G*H], the input projection x W_ih^T + b_ih of every step (G = 1 for
 * RNN, 4 gates i, f, g, o for LSTM, 3 gates r, z, n for GRU), out[0] = params.out; every
 * tensor contiguous, one floating dtype, on one device. params: struct
 * weft_rnn_kernel_params. Per step (t = 0..T-1, or T-1..0 when reverse) one GEMM
 * h_prev W_hh^T into scratch, then one gate pass adding gi[t] and b_hh, applying the
 * nonlinearities and writing the step's state (LSTM with proj_size: then one GEMM
 * h = (o tanh c) W_hr^T). A batch row b with t >= lengths[b] is not a step: its state
 * passes through unchanged and out[t, b] is 0 (pack_padded_sequence's semantics; the
 * reverse direction starts at each row's own end). */
#define WEFT_OP_RNN_LAYER_NAME "rnn_layer"
/* RNN_LAYER_BACKWARD: backpropagation through time over what RNN_LAYER saved (the same
 * params, with hs, gates, cs and aux as it wrote them); in[0] and out[0] are
 * params.grad_gi (dispatch dtype). Overwrites grad_gi (d loss /
 * d gi), grad_gh (GRU only: d loss / d (h W_hh^T + b_hh), which differs from grad_gi in
 * gate n), grad_h (proj_size only: the total gradient reaching each step's h, for
 * W_hr's), grad_h0 and grad_c0; rows and steps past a length get 0. The weight gradients
 * are then GEMMs over all steps, which the caller does. */
#define WEFT_OP_RNN_LAYER_BACKWARD_NAME "rnn_layer_backward"
enum weft_rnn_mode { WEFT_RNN_TANH = 0, WEFT_RNN_RELU = 1, WEFT_RNN_LSTM = 2, WEFT_RNN_GRU = 3 };
struct weft_rnn_kernel_params {
    int mode;           /* enum weft_rnn_mode */
    bool reverse;
    int64_t T, B, H, P; /* steps, batch, hidden size, state size (proj_size, else H) */
    const weft_tensor *w_hh;    /* [G*H, P] */
    const weft_tensor *b_hh;    /* [G*H] or NULL */
    const weft_tensor *w_hr;    /* [P, H] (LSTM with proj_size) or NULL */
    const weft_tensor *h0;      /* [B, P] */
    const weft_tensor *c0;      /* [B, H], LSTM only */
    const weft_tensor *lengths; /* int64 [B], each in [1, T], any order; NULL: all T */
    /* Forward outputs. out [T, B, P]; h_n [B, P], c_n [B, H] (LSTM); hs [T, B, P] the
     * state after step t, carried through steps past a length (may be out itself when
     * lengths is NULL); gates [T, B, G*H] the activated gates (LSTM, GRU; NULL for RNN);
     * cs [T, B, H] the cell state after step t, carried (LSTM); aux [T, B, H]: LSTM with
     * proj_size o * tanh(c) before the projection, GRU h W_hn^T + b_hn; else NULL. The
     * backward reads hs, gates, cs and aux back. */
    weft_tensor *out, *h_n, *c_n, *hs, *gates, *cs, *aux;
    /* Backward: gradients of out, h_n, c_n (each NULL for none) and the results. */
    const weft_tensor *grad_out, *grad_hn, *grad_cn;
    weft_tensor *grad_gi, *grad_gh, *grad_h, *grad_h0, *grad_c0;
};

/* UPSAMPLE (PyTorch's upsample_{nearest,linear,bilinear,bicubic} with the formulas of
 * aten/src/ATen/native/UpSample.h): in[0] x [N, C, H, W] floating, any strides (a 1-d
 * signal is H = 1); out[0] contiguous [N, C, OH, OW] of x's dtype. ints[0] the mode
 * (WEFT_UPSAMPLE_*), ints[1] align_corners (linear and cubic only); scalar[0], scalar[1]
 * the scale factors for H and W that PyTorch passes on (its source position uses 1 /
 * scale), <= 0 for none (then in / out). Nearest indices are computed in float whatever
 * the dtype, as PyTorch does; linear and cubic taps in the compute type (double for
 * float64, else float): compute_source_index_and_lambda, and cubic convolution with
 * A = -0.75 over 4 taps whose indices are clamped to the border. */
#define WEFT_OP_UPSAMPLE_NAME "upsample"
enum { WEFT_UPSAMPLE_NEAREST = 0, WEFT_UPSAMPLE_NEAREST_EXACT = 1, WEFT_UPSAMPLE_LINEAR = 2,
       WEFT_UPSAMPLE_CUBIC = 3 };
/* UPSAMPLE_BACKWARD, its adjoint: in[0] grad_output [N, C, OH, OW] (any strides) ->
 * out[0] contiguous [N, C, H, W] overwritten with, per input pixel, the sum of grad *
 * tap weight over the output pixels that read it, added in output-pixel order (the same
 * bits for any number of threads). ints and scalars as UPSAMPLE. Dispatch dtype: in[0]'s. */
#define WEFT_OP_UPSAMPLE_BACKWARD_NAME "upsample_backward"
/* CDIST (torch.cdist's direct formula): in[0] x1 [B, P, M], in[1] x2 [B, R, M], one
 * floating dtype, any strides -> out[0] contiguous [B, P, R] = (sum_k |x1[b,i,k] -
 * x2[b,j,k]|^p)^(1/p), scalar[0] = p >= 0: p = 0 counts the nonzero differences, p = inf
 * takes the largest, p = 2 is sqrt(sum diff^2). M = 0 gives zeros. */
#define WEFT_OP_CDIST_NAME "cdist"
/* CDIST_BACKWARD (PyTorch's _cdist_backward): in[0] grad [B, P, R], in[1] x1 [B, P, M],
 * in[2] x2 [B, R, M], in[3] dist [B, P, R] as CDIST gave it, any strides; scalar[0] = p.
 * out[0] contiguous [B, P, M] = grad_x1, overwritten: for each j, grad * d dist / d x1
 * summed in the order of j, with PyTorch's conventions: p = 0 zero; p = 1 sign(diff);
 * p < 2 zero where dist = 0 (and where diff = 0 for p < 1); p = 2 diff / dist, zero
 * where dist = 0; p = inf sign(diff) on every coordinate with |diff| == dist. x2's
 * gradient is this op on (grad^T, x2, x1, dist^T). Dispatch dtype: in[0]'s. */
#define WEFT_OP_CDIST_BACKWARD_NAME "cdist_backward"

/* CONV2D (a convolution as torch.nn.functional.conv2d with groups = 1): in[0] x
 * [N, C, H, W], in[1] weight [Cout, C, kH, kW], in[2] bias [Cout] or NULL (nin 2); ints[0..7]
 * kH kW, stride H W, padding H W, dilation H W; out[0] y [N, Cout, OH, OW] overwritten, OH
 * and OW PyTorch's. All operands contiguous, non-empty and of one dtype. nn composes it
 * as im2col + GEMM where a backend has no kernel (nn/conv.c). */
#define WEFT_OP_CONV2D_NAME "conv2d"
/* CONV2D_BACKWARD_INPUT: in[0] grad_y [N, Cout, OH, OW], in[1] weight; out[0] grad_x
 * [N, C, H, W] overwritten. ints as CONV2D; contiguous operands of one dtype. */
#define WEFT_OP_CONV2D_BACKWARD_INPUT_NAME "conv2d_backward_input"
/* CONV2D_BACKWARD_WEIGHT: in[0] grad_y [N, Cout, OH, OW], in[1] x; out[0] grad_weight
 * [Cout, C, kH, kW] overwritten, out[1] grad_bias [Cout] overwritten or NULL (nout 1).
 * ints as CONV2D; contiguous operands of one dtype. */
#define WEFT_OP_CONV2D_BACKWARD_WEIGHT_NAME "conv2d_backward_weight"

/* FLOOR_DIVIDE and REMAINDER (torch.floor_divide, torch.remainder): the binary contract
 * (out[0], in[0] and in[1] of one shape and dtype; a NULL in[1] means scalar[0]), every
 * integral and floating dtype. The quotient rounds toward -inf (floats: PyTorch's
 * div_floor_floating, fmod-based, IEEE results for a zero divisor); the remainder is
 * a - b * floor(a / b) with the divisor's sign (fmod, then + b when the signs differ). An
 * integer divisor of 0 fails with "ZeroDivisionError" where the backend can tell. */
#define WEFT_OP_FLOOR_DIVIDE_NAME "floor_divide"
#define WEFT_OP_REMAINDER_NAME "remainder"
/* SCATTER (Tensor.scatter_ with src or value, reduce=None): in place on out[0] (any
 * strides): out[0][.. in[0][..i..] ..] = in[1][..i..] along ints[0], in[0] the int64 index,
 * in[1] the src of out[0]'s dtype or NULL for the value scalar[0]; i runs over the index's
 * shape (src and out[0] at least as large in every dim). Indices are checked: "index 5 is
 * out of bounds for dimension 1 with size 3". Duplicate indices: the last i in row-major
 * order wins on the cpu (PyTorch leaves it unspecified). */
#define WEFT_OP_SCATTER_NAME "scatter"
/* SCATTER_REDUCE (Tensor.scatter_reduce_): as SCATTER with a src, combining instead of
 * assigning: ints[1] 0 sum, 1 prod, 2 mean, 3 amax, 4 amin; ints[2] include_self. Where
 * include_self is 0 the scattered-to elements start from the first value scattered there.
 * mean divides by the number of values combined (plus one with include_self), integer
 * dtypes by floor division; amax/amin propagate NaN. Elements no index names keep their
 * value. */
#define WEFT_OP_SCATTER_REDUCE_NAME "scatter_reduce"
/* CUMSUM and CUMPROD (torch.cumsum, torch.cumprod): out[0][.., i, ..] = the sum / product
 * of in[0][.., 0..i, ..] along dim ints[0], in[0] and out[0] of one shape (ndim >= 1) and
 * one integral or floating dtype, any strides; accumulated in the compute type (float for
 * the 16-bit floats), integers wrapping. The front end gives integral and bool inputs as
 * int64, as PyTorch's result dtype is. */
#define WEFT_OP_CUMSUM_NAME "cumsum"
#define WEFT_OP_CUMPROD_NAME "cumprod"
/* SORT (torch.sort(stable=True)): each line of in[0] along dim ints[0] sorted, ascending,
 * or descending when ints[1]; out[0] the values (in[0]'s dtype), out[1] the int64 positions
 * they came from; all of one shape (ndim >= 1), any strides, every dtype. Equal elements
 * keep their order; NaN is above every number (last ascending, first descending). */
#define WEFT_OP_SORT_NAME "sort"

#ifdef __cplusplus
}
#endif
#endif
