/* weft/activation_checkpoint.h: activation checkpointing, torch.utils.checkpoint
 * (libweft-ops; weft/checkpoint.h is libweft-train's safetensors files). */
#ifndef WEFT_ACTIVATION_CHECKPOINT_H
#define WEFT_ACTIVATION_CHECKPOINT_H

#include "weft/autograd.h"
#include "weft/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* torch.utils.checkpoint(fn, *inputs, use_reentrant=False): runs fn(ctx, n, inputs) and
 * records its graph, but keeps none of the tensors its ops save for backward; the backward
 * reruns fn (on detached inputs, with the random generator's offset and the autocast state
 * of this call) when it first needs them. fn must compute the same thing each time: the
 * rerun must save as many tensors ("checkpoint: the recomputed forward saved ..."
 * otherwise). Without grad mode, or inside another checkpoint, fn simply runs. Returns
 * fn's result. The inputs are held until the backward is done with them. Built on the
 * engine's saved-tensor hooks (weft/autograd.h), which it sets while fn runs. */
#define WEFT_CHECKPOINT_MAX_INPUTS 8
typedef weft_tensor *(*weft_checkpoint_fn)(void *ctx, int n, weft_tensor *const *inputs);
weft_tensor *weft_checkpoint(weft_checkpoint_fn fn, void *ctx, int n, weft_tensor *const *inputs);

#ifdef __cplusplus
}
#endif
#endif
