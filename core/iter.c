/* core/iter.c: the strided iterator every elementwise kernel shares. */
#include <string.h>

#include "internal.h"

/* Should dim a be outside dim b (walked more slowly)? Decided by the first operand
 * whose strides on a and b are both non-zero and differ, as TensorIterator does. */
static bool dim_outer(const struct weft_iter *it, int a, int b)
{
    for (int op = 0; op < it->nops; op++) {
        int64_t sa = it->strides[op][a], sb = it->strides[op][b];
        if (sa == 0 || sb == 0 || sa == sb)
            continue;
        return (sa < 0 ? -sa : sa) > (sb < 0 ? -sb : sb);
    }
    return false;
}

static void swap_dims(struct weft_iter *it, int a, int b)
{
    int64_t s = it->shape[a];
    it->shape[a] = it->shape[b];
    it->shape[b] = s;
    for (int op = 0; op < it->nops; op++) {
        int64_t t = it->strides[op][a];
        it->strides[op][a] = it->strides[op][b];
        it->strides[op][b] = t;
    }
}

int weft_iter_init(struct weft_iter *it, int nops, const weft_tensor *const *ops)
{
    if (nops < 1 || nops > WEFT_ITER_MAX_OPERANDS)
        return weft_error_set(WEFT_ERR_VALUE, "weft_iter_init: %d operands (1..%d allowed)", nops,
                              WEFT_ITER_MAX_OPERANDS);
    const weft_tensor *first = ops[0];
    memset(it, 0, sizeof *it);
    it->nops = nops;
    it->numel = weft_tensor_numel(first);
    for (int op = 0; op < nops; op++) {
        const weft_tensor *t = ops[op];
        if (t->ndim != first->ndim ||
            memcmp(t->shape, first->shape, (size_t)first->ndim * sizeof *t->shape) != 0) {
            char a[160], b[160];
            return weft_error_set(WEFT_ERR_RUNTIME, "weft_iter_init: operand %d has shape %s, expected %s",
                                  op, weft_shape_str(t->ndim, t->shape, a, sizeof a),
                                  weft_shape_str(first->ndim, first->shape, b, sizeof b));
        }
        it->data[op] = weft_tensor_data(t);
    }
    /* Keep the dims that matter (size > 1), with byte strides. */
    int nd = 0;
    for (int d = 0; d < first->ndim; d++) {
        if (first->shape[d] == 1)
            continue;
        it->shape[nd] = first->shape[d];
        for (int op = 0; op < nops; op++)
            it->strides[op][nd] = ops[op]->stride[d] * (int64_t)weft_dtype_size(ops[op]->dtype);
        nd++;
    }
    it->ndim = nd;
    if (it->numel == 0) {
        it->ndim = 0;
        return 0;
    }
    /* Walk in memory order: insertion sort, outermost dim first (stable). */
    for (int i = 1; i < nd; i++)
        for (int j = i; j > 0 && dim_outer(it, j, j - 1); j--)
            swap_dims(it, j, j - 1);
    /* Merge an outer dim into its inner neighbour when contiguous for every operand. */
    int out = nd - 1;
    for (int d = nd - 2; d >= 0; d--) {
        bool merge = true;
        for (int op = 0; op < nops && merge; op++)
            merge = it->strides[op][d] == it->shape[out] * it->strides[op][out];
        if (merge) {
            it->shape[out] *= it->shape[d];
            continue;
        }
        out--;
        it->shape[out] = it->shape[d];
        for (int op = 0; op < nops; op++)
            it->strides[op][out] = it->strides[op][d];
    }
    /* Shift the kept dims [out, nd) down to [0, nd - out). */
    int kept = nd - out;
    if (nd > 0 && out > 0) {
        memmove(it->shape, it->shape + out, (size_t)kept * sizeof *it->shape);
        for (int op = 0; op < nops; op++)
            memmove(it->strides[op], it->strides[op] + out, (size_t)kept * sizeof(int64_t));
    }
    it->ndim = nd > 0 ? kept : 0;
    return 0;
}

void weft_iter_run(const struct weft_iter *it, int64_t begin, int64_t end, weft_iter_loop_fn loop,
                   void *ctx)
{
    if (end > it->numel)
        end = it->numel;
    if (begin >= end)
        return;
    int nops = it->nops;
    char *ptr[WEFT_ITER_MAX_OPERANDS];
    int64_t inner_stride[WEFT_ITER_MAX_OPERANDS];
    if (it->ndim == 0) {
        for (int op = 0; op < nops; op++) {
            ptr[op] = it->data[op];
            inner_stride[op] = 0;
        }
        loop(ctx, ptr, inner_stride, 1);
        return;
    }
    int nd = it->ndim, last = nd - 1;
    int64_t idx[WEFT_MAX_DIMS];
    int64_t rem = begin;
    for (int d = last; d >= 0; d--) {
        idx[d] = rem % it->shape[d];
        rem /= it->shape[d];
    }
    for (int op = 0; op < nops; op++)
        inner_stride[op] = it->strides[op][last];
    int64_t pos = begin;
    while (pos < end) {
        for (int op = 0; op < nops; op++) {
            char *p = it->data[op];
            for (int d = 0; d < nd; d++)
                p += idx[d] * it->strides[op][d];
            ptr[op] = p;
        }
        int64_t n = it->shape[last] - idx[last];
        if (n > end - pos)
            n = end - pos;
        loop(ctx, ptr, inner_stride, n);
        pos += n;
        idx[last] += n;
        for (int d = last; d > 0 && idx[d] == it->shape[d]; d--) {
            idx[d] = 0;
            idx[d - 1]++;
        }
    }
}
