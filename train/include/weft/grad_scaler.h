/* weft/grad_scaler.h: loss scaling for float16 training, torch.cuda.amp.GradScaler.
 *
 * float16's range ends at 65504 and its smallest normal is 6e-5, so small gradients
 * flush to zero. The scaler multiplies the loss by a large factor before backward and
 * divides the float32 master gradients by it before the step; a step whose gradients hold
 * inf or NaN is skipped and the factor halved, and after growth_interval clean steps it
 * doubles. One training step:
 *
 *     weft_backward(weft_grad_scaler_scale(s, loss), NULL, false);
 *     weft_grad_scaler_unscale_(s, opt);      // optional: before clipping gradients
 *     weft_grad_scaler_step(s, opt);          // skipped when a gradient is inf/NaN
 *     weft_grad_scaler_update(s);
 *
 * The scale is kept as PyTorch keeps it, a float32 value. A scaler serves one optimizer
 * at a time between two update()s. */
#ifndef WEFT_GRAD_SCALER_H
#define WEFT_GRAD_SCALER_H

#include <stdbool.h>
#include <stdint.h>

#include "weft/optim.h"
#include "weft/state_dict.h"
#include "weft/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct weft_grad_scaler weft_grad_scaler;

/* GradScaler's constructor arguments. */
struct weft_grad_scaler_params {
    double init_scale;     /* 65536 */
    double growth_factor;  /* 2, > 1 */
    double backoff_factor; /* 0.5, in (0, 1) */
    int growth_interval;   /* 2000, > 0 */
    bool enabled;          /* false: every call passes through (a bf16 or fp32 run) */
};

/* PyTorch's defaults (enabled). */
struct weft_grad_scaler_params weft_grad_scaler_defaults(void);
/* A scaler with params (NULL: the defaults); NULL with a WEFT_ERR_VALUE error naming a
 * bad argument. Free with weft_grad_scaler_free(). */
weft_grad_scaler *weft_grad_scaler_create(const struct weft_grad_scaler_params *params);
void weft_grad_scaler_free(weft_grad_scaler *s); /* NULL is ignored */

/* loss * scale (recorded, so backward gives scaled gradients); loss itself (a new
 * reference) when disabled. */
weft_tensor *weft_grad_scaler_scale(weft_grad_scaler *s, weft_tensor *loss);
/* Divides every gradient of opt's parameters by the scale in place (float32 arithmetic,
 * as PyTorch) and records whether any was inf or NaN. Once per optimizer between
 * update()s: a second call fails with "unscale_() has already been called on this
 * optimizer since the last update()." Returns 0 or negative. */
int weft_grad_scaler_unscale_(weft_grad_scaler *s, weft_optimizer *opt);
/* Unscales (unless unscale_() ran), then steps opt unless a gradient was inf or NaN.
 * Returns 0 or negative; weft_grad_scaler_step_skipped() says whether it stepped. */
int weft_grad_scaler_step(weft_grad_scaler *s, weft_optimizer *opt);
/* Backs the scale off after a step with inf/NaN, grows it after growth_interval clean
 * steps in a row. Fails with "No inf checks were recorded prior to update." when neither
 * unscale_() nor step() ran since the last update. */
int weft_grad_scaler_update(weft_grad_scaler *s);

double weft_grad_scaler_get_scale(const weft_grad_scaler *s); /* 1.0 when disabled */
int64_t weft_grad_scaler_growth_tracker(const weft_grad_scaler *s);
bool weft_grad_scaler_is_enabled(const weft_grad_scaler *s);
/* True when the last step() found inf or NaN and did not step. */
bool weft_grad_scaler_step_skipped(const weft_grad_scaler *s);

/* Checkpoint state: "scaler.scale" (the float32 value, printed exactly) and
 * "scaler.growth_tracker". import fails with WEFT_ERR_VALUE naming a key that is missing
 * or not a number. Both return 0 or negative. */
int weft_grad_scaler_state_export(const weft_grad_scaler *s, struct weft_metadata *m);
int weft_grad_scaler_state_import(weft_grad_scaler *s, const struct weft_metadata *m);

#ifdef __cplusplus
}
#endif
#endif
