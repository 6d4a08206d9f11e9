/* weft/autocast_policy.h: automatic mixed precision, torch.autocast's policy: what an op
 * does inside an autocast scope (weft/autocast.h).
 *
 * Inside a scope, ops on tensors of the scope's device type cast their floating inputs
 * before they run, by the policy table of that device type, which its backend names
 * (weft/backend.h's autocast_policy; ops/autocast.c holds the tables), as PyTorch keeps
 * one per device:
 *   - "cuda" (PyTorch 1.13's CUDA lists): matmul, mm, bmm, addmm, baddbmm, linear,
 *     conv2d, scaled_dot_product_attention in the scope's dtype (float16 or bfloat16);
 *     softmax, log_softmax, sum, prod, cumsum, exp, log, pow, rsqrt, the norms, cdist
 *     and the losses in float32;
 *   - "cpu" (its AutocastCPU lists; bfloat16 only): the GEMMs and convolutions in
 *     bfloat16; prod, cdist, max_unpool2d, the losses, the 3-d pools, the paddings and
 *     the transposed convolutions in float32; softmax, sums, exp, log, pow and the norms
 *     run in what they are given;
 *   - every other op runs on what it is given, in the widest input dtype (binary ops
 *     promote).
 * float64 inputs are never cast (as PyTorch). The casts are ordinary recorded ops, so the
 * gradients of float32 leaves come back in float32. Inside an op that autocast cast, the
 * ops it is made of run with autocast suspended (PyTorch excludes the autocast key there);
 * backward runs with autocast suspended too. */
#ifndef WEFT_AUTOCAST_POLICY_H
#define WEFT_AUTOCAST_POLICY_H

#include "weft/autocast.h"
#include "weft/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where each op runs under autocast. */
enum weft_autocast_policy {
    WEFT_AUTOCAST_PROMOTE, /* as given: the widest input dtype (every op not listed) */
    WEFT_AUTOCAST_LOWER,   /* the scope's low precision */
    WEFT_AUTOCAST_FP32,    /* float32 */
};

/* The policy for an op by its PyTorch name ("matmul", "cross_entropy", ...) on tensors
 * of device_type (its backend's table; CUDA's where it names none or is not loaded). */
enum weft_autocast_policy weft_autocast_policy_on(int device_type, const char *op);
/* The same for the device type of the thread's autocast scope (the cpu outside one). */
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
