/* plugins/cpu/kernels_index.c: index_select, gather and scatter_add.
 *
 * index_select and gather only move elements, so they are written once per itemsize
 * (1, 2, 4, 8 bytes), not per dtype; scatter_add adds and is written per dtype. Indices
 * are checked before anything is written, so a bad index leaves an in-place target as it
 * was and the error names the first bad index. */
#include <string.h>

#include "cpu.h"

#define FOR_ITEMSIZES(X) X(1, uint8_t) X(2, uint16_t) X(4, uint32_t) X(8, uint64_t)

/* ---- index checks -------------------------------------------------------------------- */

struct bounds {
    int64_t size, bad;
    bool found;
};

static void bounds_loop(void *ctx, char **data, const int64_t *stride, int64_t n)
{
    struct bounds *b = ctx;
    for (int64_t e = 0; e < n && !b->found; e++) {
        int64_t v = *(const int64_t *)(data[0] + e * stride[0]);
        if (v < 0 || v >= b->size) {
            b->bad = v;
            b->found = true;
        }
    }
}

/* The first index outside [0, size), in memory order; returns whether one was found. */
static int first_out_of_bounds(const weft_tensor *index, int64_t size, int64_t *bad)
{
    struct weft_iter it;
    if (weft_iter_init(&it, 1, &index) != 0)
        return -1;
    struct bounds b = {size, 0, false};
    weft_iter_run(&it, 0, it.numel, bounds_loop, &b);
    *bad = b.bad;
    return b.found;
}

/* `t` seen with its dim `dim` collapsed to size 1: the starts of the lines along dim. */
static weft_tensor line_starts(const weft_tensor *t, int dim)
{
    weft_tensor v = *t;
    v.shape[dim] = 1;
    return v;
}

/* ---- index_select ------------------------------------------------------------------------ */

struct select_job {
    struct weft_iter it;     /* operand 0: out's line starts, 1: in's */
    const int64_t *idx;
    int64_t idx_stride, nidx; /* index: element stride, length */
    int64_t sin, sout;       /* byte strides along dim */
};

struct gather_job {
    struct weft_iter it; /* operands: out, index, in (index's shape, stride 0 along dim) */
    int64_t sdim;        /* in's byte stride along dim */
};

#define CPU_KERNEL_INC "select_gather_loops.inc"
#include "each_itemsize.inc"
#undef CPU_KERNEL_INC

static weft_iter_loop_fn select_loop_for(size_t size)
{
    switch (size) {
#define CASE(SZ, U)                                                                           \
    case SZ:                                                                                  \
        return select_loop_##SZ;
        FOR_ITEMSIZES(CASE)
#undef CASE
    default:
        return NULL;
    }
}

struct iter_range_job {
    const struct weft_iter *it;
    weft_iter_loop_fn loop;
    void *ctx;
};

static void iter_range(void *ctx, int64_t begin, int64_t end)
{
    struct iter_range_job *r = ctx;
    weft_iter_run(r->it, begin, end, r->loop, r->ctx);
}

/* Runs an iterator whose every element costs `per` units of work. */
static void run_weighted(const struct weft_iter *it, int64_t per, weft_iter_loop_fn loop, void *ctx)
{
    struct iter_range_job r = {it, loop, ctx};
    int64_t grain = CPU_PARALLEL_GRAIN / (per > 0 ? per : 1);
    cpu_parallel_for(it->numel, grain > 0 ? grain : 1, iter_range, &r);
}

int cpu_index_select_kernel(const struct weft_op_call *call)
{
    const weft_tensor *in = call->in[0], *index = call->in[1];
    weft_tensor *out = call->out[0];
    int dim = (int)call->ints[0];
    struct select_job j;
    j.nidx = weft_tensor_numel(index);
    j.idx = weft_tensor_data(index);
    j.idx_stride = index->ndim ? index->stride[0] : 1;
    for (int64_t i = 0; i < j.nidx; i++) {
        int64_t v = j.idx[i * j.idx_stride];
        if (v < 0 || v >= in->shape[dim])
            return weft_error_set(WEFT_ERR_INDEX, "index out of range in self");
    }
    if (weft_tensor_numel(out) == 0)
        return 0;
    size_t isz = weft_dtype_size(in->dtype);
    weft_iter_loop_fn loop = select_loop_for(isz);
    j.sin = in->stride[dim] * (int64_t)isz;
    j.sout = out->stride[dim] * (int64_t)isz;
    weft_tensor out_starts = line_starts(out, dim), in_starts = line_starts(in, dim);
    /* in's other dims match out's; only the size along dim differs, and that is 1 now */
    const weft_tensor *ops[2] = {&out_starts, &in_starts};
    if (weft_iter_init(&j.it, 2, ops) != 0)
        return weft_error_code();
    run_weighted(&j.it, j.nidx, loop, &j);
    return 0;
}

/* ---- gather ------------------------------------------------------------------------------- */

static weft_iter_loop_fn gather_loop_for(size_t size)
{
    switch (size) {
#define CASE(SZ, U)                                                                           \
    case SZ:                                                                                  \
        return gather_loop_##SZ;
        FOR_ITEMSIZES(CASE)
#undef CASE
    default:
        return NULL;
    }
}

/* in seen with index's shape, not moving along dim (the index supplies that offset). */
static weft_tensor indexed_view(const weft_tensor *t, const weft_tensor *index, int dim)
{
    weft_tensor v = *t;
    memcpy(v.shape, index->shape, sizeof v.shape);
    v.stride[dim] = 0;
    return v;
}

static int report_bounds(const weft_tensor *index, int dim, int64_t size)
{
    int64_t bad;
    int found = first_out_of_bounds(index, size, &bad);
    if (found < 0)
        return weft_error_code();
    if (found)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "index %lld is out of bounds for dimension %d with size %lld",
                              (long long)bad, dim, (long long)size);
    return 0;
}

int cpu_gather_kernel(const struct weft_op_call *call)
{
    const weft_tensor *in = call->in[0], *index = call->in[1];
    weft_tensor *out = call->out[0];
    int dim = (int)call->ints[0];
    if (weft_tensor_numel(index) == 0)
        return 0;
    if (report_bounds(index, dim, in->shape[dim]) != 0)
        return weft_error_code();
    struct gather_job j;
    j.sdim = in->stride[dim] * (int64_t)weft_dtype_size(in->dtype);
    weft_tensor src = indexed_view(in, index, dim);
    const weft_tensor *ops[3] = {out, index, &src};
    if (weft_iter_init(&j.it, 3, ops) != 0)
        return weft_error_code();
    run_weighted(&j.it, 1, gather_loop_for(weft_dtype_size(in->dtype)), &j);
    return 0;
}

/* ---- scatter_add -------------------------------------------------------------------------- */

/* Lines along dim: different lines touch different elements of out, so lines run in
 * parallel while duplicate indices within a line add up in order. */
struct scatter_job {
    struct weft_iter it;     /* operands: out, index, src line starts */
    int64_t len;             /* line length: index's size along dim */
    int64_t sout, sidx, ssrc; /* byte strides along dim */
};

#define CPU_KERNEL_INC "scatter_add_loop.inc"
#include "each_dtype.inc"
#undef CPU_KERNEL_INC

static weft_iter_loop_fn scatter_add_loop_for(enum weft_dtype dt)
{
    switch (dt) {
#define CASE(name, id, T, C)                                                                  \
    case id:                                                                                  \
        return CPU_CAT(scatter_add_loop_, name);
        WEFT_FOR_ALL_DTYPES(CASE)
#undef CASE
    default:
        return NULL;
    }
}

int cpu_scatter_add_kernel(const struct weft_op_call *call)
{
    weft_tensor *out = call->out[0];
    const weft_tensor *index = call->in[0], *src = call->in[1];
    int dim = (int)call->ints[0];
    if (weft_tensor_numel(index) == 0)
        return 0;
    if (report_bounds(index, dim, out->shape[dim]) != 0)
        return weft_error_code();
    struct scatter_job j;
    j.len = index->shape[dim];
    j.sout = out->stride[dim] * (int64_t)weft_dtype_size(out->dtype);
    j.sidx = index->stride[dim] * (int64_t)sizeof(int64_t);
    j.ssrc = src->stride[dim] * (int64_t)weft_dtype_size(src->dtype);
    weft_tensor out_starts = indexed_view(out, index, dim);
    weft_tensor idx_starts = line_starts(index, dim);
    weft_tensor src_starts = indexed_view(src, index, dim);
    out_starts.shape[dim] = 1;
    src_starts.shape[dim] = 1;
    const weft_tensor *ops[3] = {&out_starts, &idx_starts, &src_starts};
    if (weft_iter_init(&j.it, 3, ops) != 0)
        return weft_error_code();
    run_weighted(&j.it, j.len, scatter_add_loop_for(out->dtype), &j);
    return 0;
}
