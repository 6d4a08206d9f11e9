/* weft/kernel_quant.h: the named ops of int8 inference, the contract between the front
 * ends of libweft-quant (weft/quant.h) and the backends that implement them. Declarations
 * only: the core neither defines nor calls these ops; a backend builds against the core's
 * headers alone, as for kernel.h's named ops. An ABI like kernel.h: names and the fields
 * of the params structs are append-only.
 *
 * Quantized values are torch.ao.quantization's affine ones: real = (q - zero_point) *
 * scale, q a uint8 or int8. Every kernel does the arithmetic written here, in this order
 * and in float32, so that a backend and libweft-quant's reference loops (quant/reference.c)
 * agree bit for bit; nearbyintf rounds half to even. Integer sums are exact int32. Where a
 * sum passes 2^24 in magnitude its conversion to float may round, which a backend may do
 * on the parts (acc and bias) instead of the whole: outputs may then differ in the last
 * step (the tests keep their sums below it).
 *
 * Dispatch dtype: in[0]'s, as for every op.
 */
#ifndef WEFT_KERNEL_QUANT_H
#define WEFT_KERNEL_QUANT_H

#include "weft/kernel.h"

#ifdef __cplusplus
extern "C" {
#endif

/* QUANTIZE_PER_TENSOR (torch.quantize_per_tensor): in[0] x float32, any strides -> out[0]
 * uint8 or int8 of x's shape, any strides: q = clamp(ints[0] + nearbyintf(x * (1.0f /
 * (float)scalar[0])), qmin, qmax), the dtype's whole range; ints[0] the zero point,
 * scalar[0] the scale (> 0). NaN gives the zero point. */
#define WEFT_OP_QUANTIZE_PER_TENSOR_NAME "quantize_per_tensor"
/* DEQUANTIZE_PER_TENSOR (Tensor.dequantize): in[0] q uint8 or int8, any strides -> out[0]
 * float32 of q's shape, any strides: x = (float)(q - ints[0]) * (float)scalar[0]. */
#define WEFT_OP_DEQUANTIZE_PER_TENSOR_NAME "dequantize_per_tensor"

/* QUANTIZED_LINEAR (quantized::linear, linear_relu and linear_dynamic): in[0] x uint8
 * [M, K], in[1] w int8 [N, K], in[2] bias int32 [N], in[3] multiplier float32 [N], all
 * contiguous; out[0] [M, N] contiguous, uint8 or float32. ints[0] relu (0 or 1), ints[1]
 * the output's zero point (uint8 output). params: struct weft_quantized_linear_params.
 * Per output element:
 *     acc = sum_k x[m, k] * w[n, k] + bias[n]            (int32; x's zero point is in bias:
 *                                                          its share -zp_x * sum_k w[n, k])
 *     v = (float)acc * multiplier[n]
 *   uint8 output:   v = relu ? max(v, 0) : v;  y = clamp(nearbyintf(v + (float)ints[1]), 0, 255)
 *   float32 output: v = v + params->bias[n] (when given);  y = relu ? max(v, 0) : v
 * The front end folds the scales: multiplier = s_x * s_w[n] / s_y for a uint8 output (the
 * real bias in the int32 bias as round(b / (s_x s_w[n]))), s_x * s_w[n] for float32. */
#define WEFT_OP_QUANTIZED_LINEAR_NAME "quantized_linear"
struct weft_quantized_linear_params {
    /* float32 [N] contiguous, added after scaling (float32 output only), or NULL */
    const weft_tensor *bias;
    /* NULL, or the caller's slot for the backend's packed form of these weights: a
     * backend may store a tensor there (a new reference the caller releases) and read it
     * back on later calls with the same slot; the caller empties the slot whenever w
     * changes. A backend without packing leaves it alone. */
    weft_tensor **packed;
};

/* QUANTIZED_CONV2D (quantized::conv2d and conv2d_relu, groups = 1): in[0] x uint8 [N, C,
 * H, W], any strides (channels-last runs fastest), in[1] w int8 [Cout, C, kH, kW]
 * contiguous, in[2] bias int32 [Cout] contiguous, in[3] multiplier float32 [Cout]
 * contiguous; out[0] y [N, Cout, OH, OW], uint8 or float32, any strides. ints[0..7] kH
 * kW, stride H W, padding H W, dilation H W as CONV2D's; ints[8] relu; ints[9] the
 * output's zero point (uint8 output); ints[10] x's zero point. params: struct
 * weft_quantized_conv2d_params. Per output element, over the taps inside the image (a
 * padding tap holds the real value 0, so it adds nothing):
 *     acc = sum (x[n, c, ih, iw] - ints[10]) * w[co, c, i, j] + bias[co]      (int32)
 *     then v and y as QUANTIZED_LINEAR's with multiplier[co] (and no float bias). */
#define WEFT_OP_QUANTIZED_CONV2D_NAME "quantized_conv2d"
struct weft_quantized_conv2d_params {
    weft_tensor **packed; /* as weft_quantized_linear_params.packed */
};

/* QUANTIZED_MAX_POOL2D (quantized::max_pool2d): in[0] uint8 or int8 [N, C, H, W], any
 * strides -> out[0] [N, C, OH, OW] of its dtype, any strides; ints[0..7] as MAX_POOL2D's
 * geometry. The largest q of the window's in-image taps (the scale and zero point pass
 * through unchanged; max commutes with a monotone map); a window without one gives the
 * dtype's least value. */
#define WEFT_OP_QUANTIZED_MAX_POOL2D_NAME "quantized_max_pool2d"

#ifdef __cplusplus
}
#endif
#endif
