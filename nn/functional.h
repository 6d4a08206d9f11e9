/* nn/functional.h: what the functional layer's files (functional.c, conv.c, pool.c,
 * loss.c) share; not installed, not ABI.
 *
 * Layers with their own backward node follow the core's autograd_ops.c: the forward runs with grad
 * mode off, then, when an input requires grad, a node is recorded whose formula is
 * written with weft ops (and the kernel ops of weft/kernel.h), so it runs on every
 * backend that has the forward kernels. Front ends open a scope, build freely, retain
 * the result and pop, so temporaries never leak. */
#ifndef WEFT_NN_FUNCTIONAL_H
#define WEFT_NN_FUNCTIONAL_H

#include <stdbool.h>
#include <stddef.h>

#include "internal.h"
#include "weft/checked.h"
#include "weft/nn.h"
#include "weft/kernel.h"
#include "weft/ops.h"

/* Makes node the grad_fn of out, consuming the node; returns out, or NULL when node or
 * out is NULL (a failed creation or forward: the error is already set) or attaching
 * failed. out must be recorded in an open scope, which releases it on failure. */
NN_INTERNAL weft_tensor *weft_nn_attach(struct weft_node *node, weft_tensor *out);
/* PyTorch's image ops (convolution, pooling, upsampling) give a channels-last input a
 * channels-last result: y itself, or y copied to x's layout when x is a 4-D tensor strided
 * channels-last (and not also plain contiguous, as with one channel). y must not have
 * history yet: the copy is not recorded, the node attaches after. */
NN_INTERNAL weft_tensor *nn_like_memory_format(const weft_tensor *x, weft_tensor *y);

/* The id of a named op of weft/kernel.h, registered on first use (a static int per op,
 * -1 until then). Threads may race to set *cached; weft_op_register gives them all the
 * same id. */
NN_INTERNAL int nn_named_op(int *cached, const char *name);
/* Whether t's backend has a kernel for op (>= 0) and t's dtype: the fused path runs, else
 * the composite. */
NN_INTERNAL bool nn_have_kernel(int op, const weft_tensor *t);
/* An elementwise loss e reduced as `reduction` says (sum, mean, or e itself for none);
 * NULL stays NULL (loss.c). */
NN_INTERNAL weft_tensor *nn_reduce_loss(weft_tensor *e, enum weft_reduction reduction);

/* A window's extent, dilation * (kernel - 1) + 1 (conv and pooling; 1 - dilation for an
 * empty kernel, as PyTorch computes it), into *out: false when it does not fit an int64,
 * for kernel_size and dilation are a config's values. dilation >= 1. */
static inline bool nn_window_extent(int64_t kernel, int64_t dilation, int64_t *out)
{
    if (kernel < 1) {
        *out = 1 - dilation;
        return true;
    }
    return weft_size_mul(dilation, kernel - 1, WEFT_SIZE_MAX, out) &&
           weft_size_add(*out, 1, WEFT_SIZE_MAX, out);
}

#endif
