/* weft/optim_kernels.h: the fused optimizer update ops, the kernels' side of weft-optim.so
 * (its optimizer types are the train library's kind, weft/optim.h). A backend that
 * implements them includes this header alone: no train or nn header.
 *
 * The named ops (weft_op_register, weft/kernel.h) an optimizer's step dispatches, one
 * in-place pass each with PyTorch's formulas. weft-optim.so registers their cpu kernels,
 * a backend its own (weft-cuda.so); both get the op's id by its name. Every tensor is
 * contiguous, of one dtype and of out[0]'s shape: out[0] is the parameter, in[0] its
 * gradient, and the state tensors listed are updated in place too. Dispatch dtype:
 * in[0]'s. The caller bumps versions. The parameters travel in call->params, as the
 * struct named with each op (call->params_size = its sizeof; kernels check it). */
#ifndef WEFT_OPTIM_KERNELS_H
#define WEFT_OPTIM_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* out[1] the momentum buffer (NULL when momentum is 0). */
#define WEFT_OP_SGD_STEP_NAME "sgd_step"
struct weft_sgd_step_params {
    double lr, momentum, dampening, weight_decay;
    bool nesterov;
    bool first_step; /* the buffer takes the gradient undamped */
};

/* out[1] exp_avg, in[1] exp_avg_sq, in[2] max_exp_avg_sq (amsgrad, else NULL). */
#define WEFT_OP_ADAM_STEP_NAME "adam_step"
struct weft_adam_step_params {
    double lr, beta1, beta2, eps, weight_decay;
    int64_t step;   /* t >= 1, after this update's increment */
    bool amsgrad;
    bool decoupled; /* AdamW: p *= 1 - lr * weight_decay instead of the L2 term */
};

/* out[1] square_avg, in[1] grad_avg (centered, else NULL), in[2] the momentum buffer
 * (momentum > 0, else NULL). */
#define WEFT_OP_RMSPROP_STEP_NAME "rmsprop_step"
struct weft_rmsprop_step_params {
    double lr, alpha, eps, weight_decay, momentum;
};

#ifdef __cplusplus
}
#endif
#endif
