/* weft/kernel_checks.h: the operand contracts of the named kernels (weft/kernel.h) that
 * every backend would otherwise write out again: layer norm, cdist and the GELU kernels.
 * A backend's kernel calls the check first; it returns 0, or sets the error (the kernel's
 * name, the shapes it expected) and returns its code. The front ends (nn/) build calls
 * that pass, so a failure means a caller built a weft_op_call by hand. */
#ifndef WEFT_KERNEL_CHECKS_H
#define WEFT_KERNEL_CHECKS_H

#include "weft/dispatch.h"

#ifdef __cplusplus
extern "C" {
#endif

/* in x [R, D], weight [D] or NULL, bias [D] or NULL; out y [R, D], stats [2, R] (float,
 * double for float64); all contiguous, x's dtype. */
int weft_check_native_layer_norm(const struct weft_op_call *call);
/* in grad, x [R, D], stats [2, R], weight [D] or NULL; out grad_input [R, D],
 * grad_weight_bias [2, D] (optional). */
int weft_check_native_layer_norm_backward(const struct weft_op_call *call);

/* in x1 [B, P, M], x2 [B, R, M]; out [B, P, R] contiguous; one dtype. */
int weft_check_cdist(const struct weft_op_call *call);
/* in grad [B, P, R], x1 [B, P, M], x2 [B, R, M], dist [B, P, R]; out [B, P, M]
 * contiguous; one dtype. */
int weft_check_cdist_backward(const struct weft_op_call *call);

/* ints[0] approximate: 0 (none) or 1 (tanh). */
int weft_check_gelu_backward(const struct weft_op_call *call);
/* out h [M, N], y [M, N]; in bias [N]; contiguous, one dtype; ints[0] 0 or 1. */
int weft_check_add_bias_gelu(const struct weft_op_call *call);

#ifdef __cplusplus
}
#endif

#endif
