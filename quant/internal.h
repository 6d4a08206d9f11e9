/* quant/internal.h: what the quantization library's files share; not installed, not ABI. */
#ifndef WEFT_QUANT_INTERNAL_H
#define WEFT_QUANT_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "weft.h"
#include "weft/kernel_quant.h"
#include "weft/nn.h"
#include "weft/quant.h"

#define QUANT_INTERNAL __attribute__((visibility("hidden")))

/* ---- the named ops (ops.c) ------------------------------------------------------------- */

enum quant_op { QOP_QUANTIZE, QOP_DEQUANTIZE, QOP_LINEAR, QOP_CONV2D, QOP_MAX_POOL2D, QOP_COUNT };
/* The op's id (registered on first use), or negative with the error set. */
QUANT_INTERNAL int quant_op_id(enum quant_op op);
/* Which of ours the id is, or -1. */
QUANT_INTERNAL int quant_op_of(int id);
/* Runs call through the backend's kernel for it, or this library's reference loops when
 * the backend has none (the cpu only). 0 or negative. */
QUANT_INTERNAL int quant_run(const struct weft_op_call *call);

/* out[...] = quantize(x) (same shapes, any strides; ops.c). 0 or negative. */
QUANT_INTERNAL int quant_quantize_into(weft_tensor *out, const weft_tensor *x, double scale,
                                       int64_t zero_point);

/* ---- small host helpers (qparams.c) ------------------------------------------------------ */

/* A new float32 / int64 / int32 cpu tensor of n elements from a host array (0-d when n is
 * 0 and data a single value: see quant_scalar_f32). */
QUANT_INTERNAL weft_tensor *quant_f32(int ndim, const int64_t *shape, const float *data);
QUANT_INTERNAL weft_tensor *quant_i64(int ndim, const int64_t *shape, const int64_t *data);
QUANT_INTERNAL weft_tensor *quant_i32(int64_t n, const int32_t *data);
/* A 0-d tensor's value (float32 / int64 on the cpu). */
QUANT_INTERNAL float quant_get_f32(const weft_tensor *t);
QUANT_INTERNAL int64_t quant_get_i64(const weft_tensor *t);
/* torch's Round then clamp to int32 (a bias quantized with a tiny scale). */
QUANT_INTERNAL int32_t quant_round_i32(double v);
/* A static layer's real bias b as the int32 its kernel adds: round(b / (s_x s_w)), in
 * double (the kernels' derivation and the ONNX export share it). */
QUANT_INTERNAL int32_t quant_bias_i32(float b, float input_scale, float weight_scale);
/* The largest |w| of each row of a contiguous float32 [N, K] (per channel) or of all of it
 * (n = 1) into out. */
QUANT_INTERNAL void quant_row_absmax(const float *w, int64_t N, int64_t K, bool per_row,
                                     float *out);

/* ---- fusion (fuse.c) --------------------------------------------------------------------- */

QUANT_INTERNAL weft_module *quant_identity(void);
QUANT_INTERNAL bool quant_is_identity(const weft_module *m);
/* The float32 intrinsic modules fusion makes: LinearReLU and ConvReLU2d. */
QUANT_INTERNAL bool quant_is_linear_relu(const weft_module *m);
QUANT_INTERNAL bool quant_is_conv_relu(const weft_module *m);
/* The conv options of a Conv2d or ConvReLU2d, else NULL. */
QUANT_INTERNAL const struct weft_conv2d_options *quant_conv_options(const weft_module *m);

/* ---- quantized modules --------------------------------------------------------------------- */

/* What a quantized Linear or Conv2d is made from: the float module's weight and bias, and
 * its activations' qparams. */
struct quant_layer_spec {
    weft_tensor *weight, *bias; /* float32; bias may be NULL */
    bool relu;
    bool per_tensor;            /* weights per tensor, else per output channel */
    float input_scale;          /* static: the activation its input is quantized with */
    int64_t input_zero_point;
    bool float_output;          /* static: hand float32 on (dequantized), else uint8 */
    float scale;                /* static, uint8 output: its qparams */
    int64_t zero_point;
    struct weft_conv2d_params conv; /* conv only */
    bool flatten_input;         /* static Linear only: it takes in the Flatten(1, -1) before
                                 * it (see quant_linear_new) */
};
/* Static (u8 activations) Linear / LinearReLU; NULL with an error. With flatten_input it
 * computes Linear(Flatten(x, 1, -1)) of its input, as the Flatten it replaced did: a
 * channels-last uint8 [N, C, H, W] (a quantized convolution's output) is read as the view
 * [N, H*W*C] it is in memory, against a copy of the weight whose columns are permuted from
 * torch's (c, h, w) order to (h, w, c); any other input is flattened as torch does. */
QUANT_INTERNAL weft_module *quant_linear_new(const struct quant_layer_spec *spec);
/* DynamicQuantizedLinear (relu ignored). */
QUANT_INTERNAL weft_module *quant_dynamic_linear_new(const struct quant_layer_spec *spec);
QUANT_INTERNAL weft_module *quant_conv_new(const struct quant_layer_spec *spec);
/* A MaxPool2d that takes uint8/int8 (the quantized kernel) as well as float. */
QUANT_INTERNAL weft_module *quant_max_pool_new(const struct weft_pool2d_params *params);
/* QuantizedEmbedding (weight-only: int8 rows, a scale per row) of a float32 table. */
QUANT_INTERNAL weft_module *quant_embedding_new(weft_tensor *weight);
/* DynamicQuantizedLSTM from an LSTM (its options and weights), per channel or per tensor. */
QUANT_INTERNAL weft_module *quant_dynamic_lstm_new(const weft_module *lstm, bool per_tensor);

/* ---- what the quantized layers share (qlayer.c) ---------------------------------------- */

/* The tensors a derived state was computed from, with their versions: the layer recomputes
 * its kernel inputs (and drops its packed weights) when one was replaced or written. */
#define QUANT_WATCH_MAX 8
struct quant_watch {
    int n;
    const weft_tensor *t[QUANT_WATCH_MAX];
    uint64_t version[QUANT_WATCH_MAX];
};
/* Whether m's buffers named in names (NULL-terminated; absent ones count as NULL) differ
 * from what w recorded; records them. */
QUANT_INTERNAL bool quant_watch_changed(struct quant_watch *w, const weft_module *m,
                                        const char *const *names);
/* Registers the quantized layer's buffers from spec: weight (int8), bias, weight_scale,
 * weight_zero_point, and for a static layer input_scale, input_zero_point and (uint8
 * output) scale, zero_point. 0 or negative. */
QUANT_INTERNAL int quant_layer_buffers(weft_module *m, const struct quant_layer_spec *spec,
                                       bool dynamic);
/* The buffer names a layer's derived state depends on. */
extern QUANT_INTERNAL const char *const quant_layer_watched[];
/* Per output channel of m's int8 weight [N, ...]: scales expanded to [N] (host array of N
 * floats the caller frees), or NULL with an error. */
QUANT_INTERNAL float *quant_weight_scales(const weft_module *m, int64_t N);
/* A view [N, C, H, W] of a new channels-last tensor (memory [N, H, W, C]). */
QUANT_INTERNAL weft_tensor *quant_empty_channels_last(int64_t N, int64_t C, int64_t H, int64_t W,
                                                      enum weft_dtype dtype);
QUANT_INTERNAL bool quant_is_channels_last(const weft_tensor *t);
/* "per_channel_affine" or "per_tensor_affine": the qscheme torch prints for m's weight. */
QUANT_INTERNAL const char *quant_weight_qscheme(const weft_module *m);

/* ---- ONNX export in QDQ form (qonnx.c): the onnx_export methods of the types above --------- */

struct weft_onnx_graph;
/* Static Linear / LinearReLU (relu), handing float32 on or uint8. */
QUANT_INTERNAL const char *quant_onnx_linear(weft_module *m, struct weft_onnx_graph *g,
                                             const char *x, bool relu, bool float_output,
                                             bool flatten_input);
QUANT_INTERNAL const char *quant_onnx_dynamic_linear(weft_module *m, struct weft_onnx_graph *g,
                                                     const char *x);
QUANT_INTERNAL const char *quant_onnx_conv(weft_module *m, struct weft_onnx_graph *g,
                                           const char *x, const struct weft_conv2d_options *o,
                                           bool relu);
QUANT_INTERNAL const char *quant_onnx_max_pool(weft_module *m, struct weft_onnx_graph *g,
                                               const char *x, const struct weft_pool2d_params *p);
QUANT_INTERNAL const char *quant_onnx_embedding(weft_module *m, struct weft_onnx_graph *g,
                                                const char *idx);
QUANT_INTERNAL const char *quant_onnx_identity(weft_module *m, struct weft_onnx_graph *g,
                                               const char *x);
QUANT_INTERNAL const char *quant_onnx_intrinsic(weft_module *m, struct weft_onnx_graph *g,
                                                const char *x);
/* Refuses, saying why a dynamic int8 LSTM/GRU/RNN has no QDQ form. */
QUANT_INTERNAL const char *quant_onnx_refuse_rnn(weft_module *m, struct weft_onnx_graph *g,
                                                 const char *x);

/* ---- structure (prepare.c, dynamic.c) ---------------------------------------------------- */

/* weft_quant_prepare + weft_quant_convert with placeholder qparams: the structure a
 * checkpoint's tensors fill (checkpoint.c). */
QUANT_INTERNAL int quant_static_structure(weft_module *model, const struct weft_qconfig *qc);

/* Quantizes a float32 weight [N, ...] to int8 symmetric (per row or per tensor): the int8
 * tensor, and its scales (float32 [N], or 0-d) and zero points (int64, zeros, likewise). */
QUANT_INTERNAL int quant_weight(weft_tensor *w, bool per_tensor, weft_tensor **q,
                                weft_tensor **scale, weft_tensor **zero_point);

#endif
