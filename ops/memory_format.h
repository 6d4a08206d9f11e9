/* ops/memory_format.h: the strides an elementwise result gets from its inputs' layout
 * (TensorIterator's output rule); not installed, not ABI. */
#ifndef WEFT_OPS_MEMORY_FORMAT_H
#define WEFT_OPS_MEMORY_FORMAT_H

#include "internal.h"

/* Strides (in elements) for the output of an elementwise op of shape [ndim, shape] over
 * the inputs ins[0..n) (each broadcastable to shape, before expansion), as PyTorch 1.13's
 * TensorIterator gives them: contiguous when every input has the shape and is contiguous;
 * the inputs' strides when they all have the shape, are non-overlapping and dense and
 * agree; else the dims ordered by the inputs' strides (the first input that orders a pair
 * decides; broadcast dims abstain) and laid out densely in that order. Returns true when
 * the result is plain contiguous, and then leaves strides unset. */
WEFT_INTERNAL bool weft_elementwise_strides_general(int n, const weft_tensor *const *ins,
                                                    int ndim, const int64_t *shape,
                                                    int64_t *strides);

/* Inline loops rather than memcmp and calls: these run for every operand of every small
 * op, whose shapes have a few dims. */
static inline bool weft_same_shape_inline(const weft_tensor *t, int ndim, const int64_t *shape)
{
    if (t->ndim != ndim)
        return false;
    for (int d = 0; d < ndim; d++)
        if (t->shape[d] != shape[d])
            return false;
    return true;
}

/* weft_tensor_is_contiguous for a strided tensor, its common answer inline. */
static inline bool weft_contiguous_inline(const weft_tensor *t)
{
    int64_t expected = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->shape[d] == 1)
            continue;
        if (t->stride[d] != expected)
            return weft_tensor_is_contiguous(t); /* also true when t has no elements */
        expected *= t->shape[d];
    }
    return true;
}

/* The common case (every input of the result's shape and contiguous) inline, the rest in
 * weft_elementwise_strides_general. */
static inline bool weft_elementwise_strides(int n, const weft_tensor *const *ins, int ndim,
                                            const int64_t *shape, int64_t *strides)
{
    for (int k = 0; k < n; k++)
        if (!weft_same_shape_inline(ins[k], ndim, shape) || !weft_contiguous_inline(ins[k]))
            return weft_elementwise_strides_general(n, ins, ndim, shape, strides);
    return true;
}

#endif
