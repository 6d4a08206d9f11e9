/* weft/quant.h: int8 post-training quantization (libweft-quant), torch.ao.quantization's
 * eager-mode workflow in C.
 *
 *   static:  weft_quant_prepare (fuses Conv2d+BatchNorm2d(+ReLU) and Linear(+ReLU), puts
 *            observers on the activations) -> weft_quant_observe on calibration batches ->
 *            weft_quant_convert (int8 weights, int8 kernels, in place)
 *   dynamic: weft_quantize_dynamic (Linear and LSTM weights int8; activations quantized per
 *            batch from their own range)
 *
 * Scheme (this library's only one, PyTorch's on x86): weights int8, symmetric (zero point
 * 0), per output channel (or per tensor); activations uint8, affine, per tensor, the full
 * range 0..255. uint8 x int8 is what the int8 dot-product units take natively (AVX-512
 * VNNI's vpdpbusd, AMX's tdpbusd): int8 activations would cost oneDNN a shift by 128 and a
 * compensation term; and with VNNI there is no 16-bit intermediate to saturate, so the
 * full range needs no reduce_range.
 *
 * A quantized module's tensors are buffers with plain dtypes and torch's names, so its
 * state_dict is a checkpoint and an exporter reads it directly: "weight" int8, "bias"
 * float32, "weight_scale" float32 and "weight_zero_point" int64 ([out] per channel, 0-d per
 * tensor), "input_scale"/"input_zero_point" (the activation it quantizes its input with),
 * "scale"/"zero_point" (its uint8 output's; absent where it hands float32 on). Scales are
 * float32, zero points int64, as torch stores them.
 *
 * The int8 kernels are the named ops of weft/kernel_quant.h; a backend without them (a
 * weft-cpu built without oneDNN) gets this library's reference loops, which also serve the
 * tests as the specification. Quantized models run on the cpu.
 *
 * Errors follow weft/error.h; tensors weft/tensor.h's ownership rules.
 */
#ifndef WEFT_QUANT_H
#define WEFT_QUANT_H

#include <stdbool.h>
#include <stdint.h>

#include "weft/kernel_quant.h"
#include "weft/nn.h"
#include "weft/state_dict.h"
#include "weft/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- quantization parameters ------------------------------------------------------- */

/* torch.ao's _calculate_qparams for one range: the range is widened to hold 0; affine:
 * scale = (max - min) / (qmax - qmin), zero_point = qmin - round(min / scale) clamped;
 * symmetric: scale = max(|min|, max) / ((qmax - qmin) / 2), zero point 0 (int8) or 128
 * (uint8). The scale is at least float32's epsilon. dtype WEFT_U8 or WEFT_I8 (its whole
 * range). 0, or WEFT_ERR_VALUE for a NaN bound or another dtype. */
int weft_qparams_from_range(double min, double max, enum weft_dtype dtype, bool symmetric,
                            float *scale, int64_t *zero_point);

/* ---- quantize and dequantize (ops: weft/kernel_quant.h) ---------------------------- */

/* torch.quantize_per_tensor(x, scale, zero_point, dtype).int_repr(): float32 x -> uint8 or
 * int8 of its shape. */
weft_tensor *weft_quantize_per_tensor(weft_tensor *x, double scale, int64_t zero_point,
                                      enum weft_dtype dtype);
/* q (uint8 or int8) -> float32, (q - zero_point) * scale. */
weft_tensor *weft_dequantize_per_tensor(weft_tensor *q, double scale, int64_t zero_point);
/* Per channel along axis: scales float32 [C], zero_points int64 [C], C = x.shape[axis]. */
weft_tensor *weft_quantize_per_channel(weft_tensor *x, weft_tensor *scales,
                                       weft_tensor *zero_points, int axis, enum weft_dtype dtype);
weft_tensor *weft_dequantize_per_channel(weft_tensor *q, weft_tensor *scales,
                                         weft_tensor *zero_points, int axis);

/* The reference kernel of any op of weft/kernel_quant.h: plain loops on the host, the
 * specification a backend's kernel is checked against (bit for bit). 0 or negative. */
int weft_quant_reference(const struct weft_op_call *call);

/* ---- observers ----------------------------------------------------------------------- */

enum weft_observer_kind {
    WEFT_OBSERVER_MINMAX,         /* MinMaxObserver / PerChannelMinMaxObserver */
    WEFT_OBSERVER_MOVING_AVERAGE, /* MovingAverage(PerChannel)MinMaxObserver */
    WEFT_OBSERVER_HISTOGRAM,      /* HistogramObserver (per tensor only) */
};

struct weft_observer_options {
    enum weft_observer_kind kind;
    enum weft_dtype dtype;     /* WEFT_U8 (activations) or WEFT_I8 (weights) */
    bool symmetric;
    int ch_axis;               /* -1: per tensor; else the channel dim */
    double averaging_constant; /* moving average; 0 means torch's 0.01 */
    int bins;                  /* histogram; 0 means torch's 2048 */
    int upsample_rate;         /* histogram; 0 means torch's 128 */
};
/* torch's defaults for kind: uint8 affine per tensor. */
struct weft_observer_options weft_observer_defaults(enum weft_observer_kind kind);

typedef struct weft_observer weft_observer;
weft_observer *weft_observer_new(const struct weft_observer_options *options);
void weft_observer_free(weft_observer *o); /* NULL is ignored */
/* Records x (float32 on the cpu; any strides). NaN values are ignored. 0 or negative. */
int weft_observer_update(weft_observer *o, weft_tensor *x);
/* Whether anything was recorded. */
bool weft_observer_seen(const weft_observer *o);
/* The range the qparams come from (per tensor): min/max, their moving averages, or the
 * histogram's choice that minimises the quantization error (torch's
 * _non_linear_param_search over 256 output bins). WEFT_ERR_RUNTIME before any update. */
int weft_observer_range(const weft_observer *o, double *min, double *max);
/* Per tensor: its scale and zero point. */
int weft_observer_qparams(const weft_observer *o, float *scale, int64_t *zero_point);
/* Per channel: scales float32 [C] and zero points int64 [C] (new references). */
int weft_observer_qparams_per_channel(const weft_observer *o, weft_tensor **scales,
                                      weft_tensor **zero_points);

/* ---- fusion ------------------------------------------------------------------------- */

/* torch.ao.quantization.fuse_modules for one group of dotted names (model's children,
 * "0", "1", "features.3"): Conv2d, BatchNorm2d [, ReLU] or Linear, ReLU or Conv2d, ReLU or
 * Linear, BatchNorm1d. The first becomes the fused module (BatchNorm folded into the
 * weights in eval mode: w' = w g / sqrt(v + eps), b' = beta + (b - m) g / sqrt(v + eps);
 * ConvReLU2d / LinearReLU when a ReLU closes the group), the others Identity, in place.
 * 0 or negative (nothing changed) naming the group and what was expected. */
int weft_fuse_modules(weft_module *model, int n, const char *const *names);
/* Every fusable run of consecutive children of every Sequential in the tree, in order;
 * returns how many groups were fused, or negative. */
int weft_fuse_model(weft_module *model);

/* ---- static quantization -------------------------------------------------------------- */

struct weft_qconfig {
    enum weft_observer_kind activation; /* the activations' observer */
    bool per_tensor_weights;            /* false: per channel (the default) */
};
/* torch's default x86 qconfig: histogram activations, per-channel weights. */
struct weft_qconfig weft_qconfig_default(void);

typedef struct weft_quant_prepared weft_quant_prepared;
/* torch.ao.quantization.prepare: model (a Sequential, put in eval mode, fused in place by
 * weft_fuse_model) gets observers on the activations that int8 layers will read and
 * write. Linear, Conv2d (groups 1) and their fused forms are quantized; MaxPool2d, Flatten,
 * Dropout and Identity pass int8 through; any other layer runs in float32 between a
 * dequantize and a quantize. NULL with an error (not a Sequential, nothing to quantize). */
weft_quant_prepared *weft_quant_prepare(weft_module *model, const struct weft_qconfig *qconfig);
/* Runs the model on a calibration batch (no autograd), recording its activations. */
int weft_quant_observe(weft_quant_prepared *p, weft_tensor *input);
/* torch.ao.quantization.convert: the model's quantizable layers become int8 ones in place
 * (weft_module_swap), with the observed qparams. 0 or negative (an activation never
 * observed: calibrate first). */
int weft_quant_convert(weft_quant_prepared *p);
void weft_quant_prepared_free(weft_quant_prepared *p); /* NULL is ignored */

/* ---- dynamic quantization -------------------------------------------------------------- */

/* torch.ao.quantization.quantize_dynamic(model, {Linear, LSTM}, dtype=torch.qint8), in
 * place: every Linear (and GPT's tied lm_head) becomes a DynamicQuantizedLinear, every LSTM
 * (GRU, RNN) a DynamicQuantizedLSTM (the input projection x W_ih^T of all steps int8; the
 * recurrence float32), every Embedding a weight-only QuantizedEmbedding (int8 rows, a scale
 * each). Returns the number of modules quantized, or negative. */
int weft_quantize_dynamic(weft_module *model, const struct weft_qconfig *qconfig);

/* ---- checkpoints --------------------------------------------------------------------- */

/* The scheme a quantized model was made with, as checkpoint metadata: "quant.format" =
 * "1", "quant.mode" = "static" | "dynamic", "quant.weights" = "per_channel_symmetric_int8"
 * | "per_tensor_symmetric_int8", "quant.activations" = "per_tensor_affine_uint8". */
int weft_quant_metadata_export(const struct weft_qconfig *qconfig, bool dynamic,
                               struct weft_metadata *meta);
/* Whether meta describes a quantized model (has "quant.mode"). */
bool weft_quant_metadata_present(const struct weft_metadata *meta);
/* Loads a quantized state dict into model, the float model the checkpoint was made from
 * (built from the same config, in any state): converts it in place to the scheme meta
 * names, then checks every tensor the quantized model needs is there with its dtype and
 * shape, and copies them in. A missing or extra tensor, a float32 weight or an int8 scale
 * is an error naming the key (and origin, the file, when not NULL). 0 or negative (the model is then
 * unusable: free it). */
int weft_quant_load_state_dict(weft_module *model, const struct weft_tensor_dict *d,
                               const struct weft_metadata *meta, const char *origin);

#ifdef __cplusplus
}
#endif
#endif
