/* core/memory_format.c: which strides a new result gets. PyTorch keeps its inputs' layout
 * (`exp(x.t())` is column-major, `zeros_like(x.t())` too): TensorIterator for elementwise
 * results (c10/core/TensorIterator.cpp: fast_set_up, reorder_dimensions,
 * compatible_stride) and empty_like's preserve_format (infer_dense_strides). The rules
 * are copied with their tie-breaks, since users see the strides they produce. */
#include <string.h>

#include "memory_format.h"

bool weft_is_non_overlapping_and_dense(const weft_tensor *t)
{
    int n = t->ndim, perm[WEFT_MAX_DIMS];
    if (n == 1)
        return t->shape[0] < 2 || t->stride[0] == 1;
    for (int i = 0; i < n; i++)
        perm[i] = i;
    /* by stride, dims of size < 2 last (their strides do not matter) */
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0; j--) {
            int a = perm[j - 1], b = perm[j];
            bool swap = t->shape[a] < 2 ? t->shape[b] >= 2
                                        : t->shape[b] >= 2 && t->stride[b] < t->stride[a];
            if (!swap)
                break;
            perm[j - 1] = b;
            perm[j] = a;
        }
    int64_t expected = 1;
    for (int i = 0; i < n; i++) {
        int d = perm[i];
        if (t->shape[d] < 2)
            return true;
        if (t->stride[d] != expected)
            return false;
        expected *= t->shape[d];
    }
    return true;
}

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

/* Insertion sort with undecided comparisons, fastest dim first (PyTorch's perm_). */
static void sort_dims(int ndim, int *perm, int (*cmp)(const void *ctx, int, int), const void *ctx)
{
    for (int i = 0; i < ndim; i++)
        perm[i] = ndim - 1 - i;
    for (int i = 1; i < ndim; i++) {
        int dim1 = i;
        for (int dim0 = i - 1; dim0 >= 0; dim0--) {
            int c = cmp(ctx, perm[dim0], perm[dim1]);
            if (c > 0) {
                int tmp = perm[dim0];
                perm[dim0] = perm[dim1];
                perm[dim1] = tmp;
                dim1 = dim0;
            } else if (c < 0) {
                break;
            }
        }
    }
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
        sort_dims(ndim, perm, iterator_cmp, &c);
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

/* infer_dense_strides' comparison: broadcast dims keep the contiguous order. */
static int dense_cmp(const void *ctx, int dim0, int dim1)
{
    const weft_tensor *t = ctx;
    int64_t s0 = t->stride[dim0], s1 = t->stride[dim1];
    if (s0 == 0 || s1 == 0)
        return 0;
    if (s0 != s1)
        return s0 < s1 ? -1 : 1;
    return t->shape[dim0] > t->shape[dim1] ? 1 : 0;
}

bool weft_preserve_strides(const weft_tensor *t, int64_t *strides)
{
    if (weft_is_non_overlapping_and_dense(t)) {
        memcpy(strides, t->stride, (size_t)t->ndim * sizeof *strides);
        return weft_tensor_is_contiguous(t);
    }
    int perm[WEFT_MAX_DIMS];
    sort_dims(t->ndim, perm, dense_cmp, t);
    int64_t next = 1;
    bool contiguous = true;
    for (int i = 0; i < t->ndim; i++) {
        strides[perm[i]] = next;
        contiguous = contiguous && perm[i] == t->ndim - 1 - i;
        if (t->shape[perm[i]] > 1)
            next *= t->shape[perm[i]];
    }
    if (contiguous)
        weft_contiguous_strides(t->ndim, t->shape, strides);
    return contiguous;
}
