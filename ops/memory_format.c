/* ops/memory_format.c: which strides an elementwise result gets. PyTorch keeps its
 * inputs' layout (`exp(x.t())` is column-major): TensorIterator's rule
 * (c10/core/TensorIterator.cpp: fast_set_up, reorder_dimensions, compatible_stride),
 * copied with its tie-breaks, since users see the strides it produces. empty_like's rule
 * (preserve_format) is the core's (core/tensor.c). */
#include <string.h>

#include "memory_format.h"

/* c10's is_contiguous(ChannelsLast) for 4-D (NHWC order) and 5-D (NDHWC) tensors. */
static bool channels_last_contiguous(const weft_tensor *t)
{
    static const int order4[] = {1, 3, 2, 0}, order5[] = {1, 4, 3, 2, 0};
    const int *order = t->ndim == 4 ? order4 : t->ndim == 5 ? order5 : NULL;
    if (!order)
        return false;
    int64_t expected = 1;
    for (int i = 0; i < t->ndim; i++) {
        int d = order[i];
        if (t->shape[d] == 1)
            continue;
        if (t->stride[d] != expected)
            return false;
        expected *= t->shape[d];
    }
    return true;
}

static void channels_last_strides(int ndim, const int64_t *shape, int64_t *strides)
{
    static const int order4[] = {1, 3, 2, 0}, order5[] = {1, 4, 3, 2, 0};
    const int *order = ndim == 4 ? order4 : order5;
    int64_t next = 1;
    for (int i = 0; i < ndim; i++) {
        strides[order[i]] = next;
        next *= shape[order[i]];
    }
}

static bool same_shape(const weft_tensor *t, int ndim, const int64_t *shape)
{
    return weft_same_shape_inline(t, ndim, shape);
}

/* TensorIterator's fast_set_up: 1 contiguous, 2 channels-last, 3 the inputs' strides,
 * 0 none applies. */
static int fast_setup(int n, const weft_tensor *const *ins, int ndim, const int64_t *shape)
{
    /* the common case first, at the cost it had before layouts were kept: one
     * contiguity test per input */
    bool contiguous = true, channels_last = true, dense = true;
    for (int k = 0; k < n; k++) {
        if (!same_shape(ins[k], ndim, shape))
            return 0;
        contiguous = contiguous && weft_contiguous_inline(ins[k]);
    }
    if (contiguous)
        return 1;
    for (int k = 0; k < n; k++) {
        channels_last = channels_last && channels_last_contiguous(ins[k]);
        dense = dense && weft_is_non_overlapping_and_dense(ins[k]);
    }
    if (channels_last)
        return 2;
    if (!dense)
        return 0;
    for (int k = 1; k < n; k++)
        if (memcmp(ins[k]->stride, ins[0]->stride, (size_t)ndim * sizeof *shape) != 0)
            return 0;
    return 3;
}

/* Stride of input t along broadcast dim d (right-aligned): 0 where t is broadcast. */
static int64_t broadcast_stride(const weft_tensor *t, int ndim, const int64_t *shape, int d)
{
    int td = d - (ndim - t->ndim);
    if (td < 0 || (t->shape[td] == 1 && shape[d] != 1))
        return 0;
    return t->stride[td];
}

struct order_ctx {
    int n, ndim;
    const weft_tensor *const *ins;
    const int64_t *shape;
};

/* reorder_dimensions' should_swap: 1 when dim0 should come after dim1 (is slower), -1
 * before, 0 undecided. */
static int should_swap(const struct order_ctx *c, int dim0, int dim1)
{
    for (int k = 0; k < c->n; k++) {
        int64_t s0 = broadcast_stride(c->ins[k], c->ndim, c->shape, dim0);
        int64_t s1 = broadcast_stride(c->ins[k], c->ndim, c->shape, dim1);
        if (s0 == 0 || s1 == 0)
            continue;
        if (s0 < s1)
            return -1;
        if (s0 > s1)
            return 1;
        if (c->shape[dim0] > c->shape[dim1])
            return 1;
    }
    return 0;
}

static int iterator_cmp(const void *ctx, int dim0, int dim1)
{
    return should_swap(ctx, dim0, dim1);
}

bool weft_elementwise_strides_general(int n, const weft_tensor *const *ins, int ndim,
                                      const int64_t *shape, int64_t *strides)
{
    int kind = ndim > 0 && n > 0 ? fast_setup(n, ins, ndim, shape) : 1;
    if (kind == 1)
        return true;
    if (kind == 2) {
        channels_last_strides(ndim, shape, strides);
        return false;
    }
    if (kind == 3) {
        memcpy(strides, ins[n - 1]->stride, (size_t)ndim * sizeof *strides);
        return false;
    }
    int perm[WEFT_MAX_DIMS];
    if (kind == 0 && ndim > 1) {
        struct order_ctx c = {n, ndim, ins, shape};
        weft_sort_dims(ndim, perm, iterator_cmp, &c);
        bool inverted = true;
        for (int i = 0; i < ndim; i++)
            inverted = inverted && perm[i] == ndim - 1 - i;
        if (!inverted) {
            int64_t next = 1;
            for (int i = 0; i < ndim; i++) {
                strides[perm[i]] = next;
                next *= shape[perm[i]];
            }
            return false;
        }
    }
    weft_contiguous_strides(ndim, shape, strides);
    return true;
}
