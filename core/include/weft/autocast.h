/* weft/autocast.h: the thread's autocast scope, torch.autocast's state.
 *
 * Inside a scope (thread-local, nestable), ops on tensors of the scope's device type
 * cast their floating inputs before they run, by the op layer's policy table
 * (weft/autocast_policy.h, which says which ops run in the low precision and which in
 * float32); backward runs with autocast suspended. Outside any scope the cost is one
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

#ifdef __cplusplus
}
#endif
#endif
