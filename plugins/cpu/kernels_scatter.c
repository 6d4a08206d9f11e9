/* plugins/cpu/kernels_scatter.c: SCATTER and SCATTER_REDUCE (weft/kernel.h).
 *
 * One walk over the index in row-major order on one thread: that order decides which of
 * several values scattered to one element wins (SCATTER) and in which order they combine
 * (SCATTER_REDUCE), the same on every run. Element e of the index (and of src, over the
 * index's shape) goes to self at the same position with dim replaced by index[e]. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

enum { R_SUM, R_PROD, R_MEAN, R_AMAX, R_AMIN };

/* The walk: element offsets (in elements) of index, src and self for each e. */
struct walk {
    int ndim, dim;
    int64_t shape[WEFT_MAX_DIMS];
    int64_t pos[WEFT_MAX_DIMS];
    int64_t idx_off, src_off, self_off; /* at pos, self's without the dim term */
    const weft_tensor *index, *src;
    weft_tensor *self;
};

static void walk_init(struct walk *w, weft_tensor *self, const weft_tensor *index,
                      const weft_tensor *src, int dim)
{
    memset(w, 0, sizeof *w);
    w->ndim = index->ndim;
    w->dim = dim;
    memcpy(w->shape, index->shape, (size_t)index->ndim * sizeof *w->shape);
    w->index = index;
    w->src = src;
    w->self = self;
}

/* Advances to the next index element (row-major). */
static void walk_next(struct walk *w)
{
    for (int d = w->ndim - 1; d >= 0; d--) {
        w->pos[d]++;
        w->idx_off += w->index->stride[d];
        if (w->src)
            w->src_off += w->src->stride[d];
        if (d != w->dim)
            w->self_off += w->self->stride[d];
        if (w->pos[d] < w->shape[d])
            return;
        w->idx_off -= w->shape[d] * w->index->stride[d];
        if (w->src)
            w->src_off -= w->shape[d] * w->src->stride[d];
        if (d != w->dim)
            w->self_off -= w->shape[d] * w->self->stride[d];
        w->pos[d] = 0;
    }
}

/* Every index in [0, size), else PyTorch's error naming the first that is not. */
static int check_bounds(const weft_tensor *self, const weft_tensor *index, int dim)
{
    struct walk w;
    walk_init(&w, (weft_tensor *)self, index, NULL, dim);
    const int64_t *idx = (const int64_t *)weft_tensor_data(index);
    int64_t n = weft_tensor_numel(index), size = self->shape[dim];
    for (int64_t e = 0; e < n; e++, walk_next(&w)) {
        int64_t i = idx[w.idx_off];
        if (i < 0 || i >= size)
            return weft_error_set(WEFT_ERR_RUNTIME,
                                  "index %lld is out of bounds for dimension %d with size %lld",
                                  (long long)i, dim, (long long)size);
    }
    return 0;
}

/* ---- SCATTER: assignment, by element size ------------------------------------------------- */

int cpu_scatter_kernel(const struct weft_op_call *call)
{
    weft_tensor *self = call->out[0];
    const weft_tensor *index = call->in[0], *src = call->in[1];
    int dim = (int)call->ints[0];
    int64_t n = weft_tensor_numel(index);
    if (n == 0)
        return 0;
    if (check_bounds(self, index, dim) != 0)
        return weft_error_code();
    size_t size = weft_dtype_size(self->dtype);
    uint64_t value = 0; /* the scalar in self's dtype */
    if (!src)
        cpu_store_from_double(self->dtype, &value, call->scalar[0]);
    struct walk w;
    walk_init(&w, self, index, src, dim);
    const int64_t *idx = (const int64_t *)weft_tensor_data(index);
    char *out = weft_tensor_data(self);
    const char *in = src ? weft_tensor_data(src) : NULL;
    /* index, src: the index's shape; self: any strides */
    for (int64_t e = 0; e < n; e++, walk_next(&w)) {
        int64_t off = w.self_off + idx[w.idx_off] * self->stride[dim];
        memcpy(out + off * (int64_t)size, in ? in + w.src_off * (int64_t)size : (char *)&value,
               size);
    }
    return 0;
}

/* ---- SCATTER_REDUCE: per dtype ---------------------------------------------------------------
 * Without include_self, the elements scattered to start from the reduction's identity (0,
 * 1, the lowest or highest value) and mean counts only the scattered values. counts[k]
 * holds how many values reached self's k-th element (row-major over self's shape). */

static int64_t self_linear(const weft_tensor *self, const struct walk *w, int64_t i)
{
    int64_t k = 0;
    for (int d = 0; d < self->ndim; d++)
        k = k * self->shape[d] + (d == w->dim ? i : w->pos[d]);
    return k;
}

#define INT_LOWEST(T) ((T)-1 < 0 ? (T)((uint64_t)1 << (sizeof(T) * 8 - 1)) : (T)0)
#define INT_HIGHEST(T) ((T)-1 < 0 ? (T)(((uint64_t)1 << (sizeof(T) * 8 - 1)) - 1) : (T)-1)

#define NEVER_NAN(x) ((void)(x), 0)
/* mean of integers divides with rounding toward -inf, as PyTorch's div_(rounding_mode='floor') */
#define INT_DIVIDE(C, a, b) ((C)((a) / (b) - (((a) % (b) != 0) && (((a) < 0) != ((b) < 0)))))
#define FLT_DIVIDE(C, a, b) ((a) / (b))
/* integers wrap (through uint64, no signed overflow) */
#define INT_MUL(C, a, b) ((C)((uint64_t)(a) * (uint64_t)(b)))
#define INT_ADD(C, a, b) ((C)((uint64_t)(a) + (uint64_t)(b)))
#define FLT_MUL(C, a, b) ((a) * (b))
#define FLT_ADD(C, a, b) ((a) + (b))
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wtype-limits"
#define CPU_KERNEL_INC "scatter_reduce.inc"
#define LOWEST INT_LOWEST(T)
#define HIGHEST INT_HIGHEST(T)
#define ISNAN NEVER_NAN
#define DIVIDE INT_DIVIDE
#define MUL INT_MUL
#define ADD INT_ADD
#include "each_integral_dtype.inc"
#undef LOWEST
#undef HIGHEST
#undef ISNAN
#undef DIVIDE
#undef MUL
#undef ADD
#define LOWEST (C)-INFINITY
#define HIGHEST (C)INFINITY
#define ISNAN isnan
#define DIVIDE FLT_DIVIDE
#define MUL FLT_MUL
#define ADD FLT_ADD
#include "each_floating_dtype.inc"
#undef LOWEST
#undef HIGHEST
#undef ISNAN
#undef DIVIDE
#undef MUL
#undef ADD
#undef CPU_KERNEL_INC
#pragma GCC diagnostic pop

int cpu_scatter_reduce_kernel(const struct weft_op_call *call)
{
    weft_tensor *self = call->out[0];
    const weft_tensor *index = call->in[0];
    int dim = (int)call->ints[0];
    if (weft_tensor_numel(index) == 0)
        return 0;
    if (call->ints[1] < R_SUM || call->ints[1] > R_AMIN || !call->in[1])
        return weft_error_set(WEFT_ERR_VALUE, "scatter_reduce: bad reduction %lld or no src",
                              (long long)call->ints[1]);
    if (check_bounds(self, index, dim) != 0)
        return weft_error_code();
    int64_t numel = weft_tensor_numel(self);
    int64_t *counts = calloc((size_t)(numel > 0 ? numel : 1), sizeof *counts);
    if (!counts)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "scatter_reduce: out of memory");
    switch (self->dtype) {
#define REDUCE_CASE(name, id, T, C)                                                           \
    case id:                                                                                  \
        reduce_##name(call, counts);                                                          \
        break;
        WEFT_FOR_INTEGRAL_DTYPES(REDUCE_CASE)
        WEFT_FOR_FLOATING_DTYPES(REDUCE_CASE)
#undef REDUCE_CASE
    default:
        free(counts);
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED,
                              "\"scatter_reduce\" not implemented for '%s' on cpu",
                              weft_dtype_torch_name(self->dtype));
    }
    free(counts);
    return 0;
}
