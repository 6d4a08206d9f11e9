/* plugins/cpu/kernels_fill.c: FILL, ARANGE and LINSPACE (kernel.h has their contracts).
 *
 * Values are computed in double and converted once per element with the same rules as
 * the COPY kernel: integers through int64 (so -1 -> uint8 is 255), bool as "!= 0". */
#include <string.h>

#include "cpu.h"

/* store_<name>(p, double): converts and stores one element of that dtype. */
static inline void store_bool(void *p, double v)
{
    weft_store_bool(p, v != 0);
}
#define DEFINE_STORE_INTEGRAL(name, id, T, C)                                                 \
    static inline void store_##name(void *p, double v) { weft_store_##name(p, (T)(int64_t)v); }
WEFT_FOR_INTEGRAL_DTYPES(DEFINE_STORE_INTEGRAL)
#define DEFINE_STORE_FLOATING(name, id, T, C)                                                 \
    static inline void store_##name(void *p, double v) { weft_store_##name(p, (C)v); }
WEFT_FOR_FLOATING_DTYPES(DEFINE_STORE_FLOATING)

/* ---- FILL: the value is converted once, then copied as raw bytes ------------------------ */

struct fill_ctx {
    uint64_t bits; /* one element, in the tensor's dtype */
};

#define CPU_KERNEL_INC "fill_loop.inc"
#include "each_itemsize.inc"
#undef CPU_KERNEL_INC

static void element_bits(enum weft_dtype dt, double v, uint64_t *bits)
{
    *bits = 0;
    switch (dt) {
#define CASE(name, id, T, C)                                                                  \
    case id:                                                                                  \
        store_##name(bits, v);                                                                \
        break;
        WEFT_FOR_ALL_DTYPES(CASE)
#undef CASE
    default:
        break;
    }
}

int cpu_fill_kernel(const struct weft_op_call *call)
{
    weft_tensor *out = call->out[0];
    const weft_tensor *ops[1] = {out};
    struct weft_iter it;
    if (weft_iter_init(&it, 1, ops) != 0)
        return weft_error_code();
    struct fill_ctx ctx;
    element_bits(out->dtype, call->scalar[0], &ctx.bits);
    static const weft_iter_loop_fn loops[9] = {
        [1] = fill_loop_1, [2] = fill_loop_2, [4] = fill_loop_4, [8] = fill_loop_8};
    size_t size = weft_dtype_size(out->dtype);
    if (size > 8 || !loops[size])
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "fill: no loop for %zu-byte elements", size);
    cpu_iter_parallel(&it, loops[size], &ctx);
    return 0;
}

/* ---- ARANGE and LINSPACE: 1-D, value of element i computed in double --------------------- */

struct seq_job {
    char *data;
    int64_t stride; /* bytes */
    int64_t n;
    double start, end, step;
    bool symmetric; /* linspace: the second half counts back from end */
    const char *op;
    void (*store)(void *p, double v);
};

static double seq_value(const struct seq_job *job, int64_t i)
{
    if (job->symmetric && i >= job->n / 2)
        return job->end - job->step * (double)(job->n - 1 - i);
    return job->start + job->step * (double)i;
}

#define DEFINE_SEQ_RANGE(name, id, T, C)                                                      \
    static void seq_range_##name(void *ctx, int64_t begin, int64_t end)                       \
    {                                                                                         \
        const struct seq_job *job = ctx;                                                      \
        for (int64_t i = begin; i < end; i++)                                                 \
            store_##name(job->data + i * job->stride, seq_value(job, i));                     \
    }
WEFT_FOR_ALL_DTYPES(DEFINE_SEQ_RANGE)

static void (*seq_range_for(enum weft_dtype dt))(void *, int64_t, int64_t)
{
    switch (dt) {
#define CASE(name, id, T, C)                                                                  \
    case id:                                                                                  \
        return seq_range_##name;
        WEFT_FOR_ALL_DTYPES(CASE)
#undef CASE
    default:
        return NULL;
    }
}

static int run_sequence(weft_tensor *out, struct seq_job *job)
{
    if (out->ndim != 1)
        return weft_error_set(WEFT_ERR_RUNTIME, "%s: expected a 1-D output, got %d dims",
                              job->op, out->ndim);
    void (*range)(void *, int64_t, int64_t) = seq_range_for(out->dtype);
    if (!range)
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "sequence: unsupported dtype");
    job->data = weft_tensor_data(out);
    job->stride = out->stride[0] * (int64_t)weft_dtype_size(out->dtype);
    job->n = out->shape[0];
    cpu_parallel_for(job->n, CPU_PARALLEL_GRAIN, range, job);
    return 0;
}

int cpu_arange_kernel(const struct weft_op_call *call)
{
    struct seq_job job = {.start = call->scalar[0], .step = call->scalar[1], .op = "arange"};
    return run_sequence(call->out[0], &job);
}

int cpu_linspace_kernel(const struct weft_op_call *call)
{
    int64_t n = call->ints[0];
    double start = call->scalar[0], end = call->scalar[1];
    struct seq_job job = {
        .start = start,
        .end = end,
        .step = n > 1 ? (end - start) / (double)(n - 1) : 0,
        .symmetric = n > 1, /* one step gives start, as torch.linspace */
        .op = "linspace",
    };
    return run_sequence(call->out[0], &job);
}
