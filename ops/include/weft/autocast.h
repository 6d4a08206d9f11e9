/* weft/autocast.h: automatic mixed precision, torch.autocast's policy.
 *
 * Inside an autocast scope (thread-local, nestable), ops on tensors of the scope's device
 * type cast their floating inputs before they run, by one table (core/autocast.c):
 *   - lower:  matmul, linear, conv2d, scaled_dot_product_attention run in the scope's
 *             dtype (bfloat16 on the CPU; float16 or bfloat16 on CUDA);
 *   - fp32:   softmax, log_softmax, sum, prod, exp, log, pow, the norms and the losses
 *             run in float32;
 *   - others: run on what they are given, in the widest input dtype (binary ops promote).
 * float64 inputs are never cast (as PyTorch). The casts are ordinary recorded ops, so the
 * gradients of float32 leaves come back in float32. Inside an op that autocast cast, the
 * ops it is made of run with autocast suspended (PyTorch excludes the autocast key there);
 * backward runs with autocast suspended too. Outside any scope the cost is one
 * thread-local load per op.
 *
 *     weft_autocast_state prev = weft_autocast_begin(WEFT_DEVICE_CPU, WEFT_BF16);
 *     weft_tensor *loss = weft_cross_entropy(model_forward(x), y, NULL); // bf16 GEMMs
 *     weft_autocast_end(prev);
 *     weft_backward(loss, NULL, false);                                  // float32 grads */
#ifndef WEFT_AUTOCAST_H
#define WEFT_AUTOCAST_H

#include <stdbool.h>
#include <stdint.h>

#include "weft/dtype.h"
#include "weft/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The thread's autocast state; a value to hand back to weft_autocast_end(). */
typedef struct weft_autocast_state {
    bool enabled;
    int16_t device_type;   /* the device type whose tensors are cast */
    enum weft_dtype dtype; /* the lower precision: WEFT_BF16 or WEFT_F16 */
} weft_autocast_state;

/* Where each op runs under autocast. */
enum weft_autocast_policy {
    WEFT_AUTOCAST_PROMOTE, /* as given: the widest input dtype (every op not listed) */
    WEFT_AUTOCAST_LOWER,   /* the scope's low precision */
    WEFT_AUTOCAST_FP32,    /* float32 */
};

/* Opens an autocast scope for tensors of device_type in dtype (WEFT_BF16 or WEFT_F16);
 * returns the previous state for weft_autocast_end(). On a bad dtype or device type it
 * sets a WEFT_ERR_VALUE error and leaves the state as it was (the returned state is
 * still the one to restore). */
weft_autocast_state weft_autocast_begin(int device_type, enum weft_dtype dtype);
/* Suspends autocast (torch.autocast(enabled=False)); returns the state to restore. */
weft_autocast_state weft_autocast_suspend(void);
/* Restores a state returned by weft_autocast_begin() or weft_autocast_suspend(). */
void weft_autocast_end(weft_autocast_state previous);
/* The thread's current state. */
weft_autocast_state weft_autocast_get(void);
/* True inside an autocast scope (and not suspended). */
bool weft_autocast_enabled(void);
/* The scope's low-precision dtype; WEFT_BF16 when none is open (PyTorch's CPU default). */
enum weft_dtype weft_autocast_dtype(void);

/* The policy for an op by its PyTorch name ("matmul", "cross_entropy", ...). */
enum weft_autocast_policy weft_autocast_policy(const char *op);
/* When autocast is on, replaces each input in inputs[0..n) that the op's policy casts
 * with its cast (a recorded weft_to_dtype, autoreleased: call it inside a scope). NULL
 * entries and non-floating, float64 or other-device tensors are left alone. Returns 0,
 * or an error code with the error set. */
int weft_autocast_cast_inputs(const char *op, int n, weft_tensor **inputs);

/* For an op's front end: when autocast is on, casts the inputs by op's policy, runs
 * `call` (written with inputs[i]) with autocast suspended inside a scope, and returns
 * its result from the enclosing function. Does nothing when autocast is off. */
#define WEFT_AUTOCAST_RETURN(op, n, inputs, call)                                             \
    do {                                                                                      \
        if (weft_autocast_enabled()) {                                                        \
            weft_scope_push();                                                                \
            weft_tensor *result__ = NULL;                                                     \
            if (weft_autocast_cast_inputs((op), (n), (inputs)) == 0) {                        \
                weft_autocast_state prev__ = weft_autocast_suspend();                         \
                result__ = weft_tensor_retain(call);                                          \
                weft_autocast_end(prev__);                                                    \
            }                                                                                 \
            weft_scope_pop();                                                                 \
            return weft_autorelease(result__);                                                \
        }                                                                                     \
    } while (0)

#ifdef __cplusplus
}
#endif
#endif
