/* plugins/cpu/kernels_softmax.c: softmax and log_softmax along one dim.
 *
 * Each line along the dim is independent: the iterator walks the line starts (the
 * tensors seen with the softmax dim's size set to 1) and a line function walks the line
 * with its stride. Numerically stable: the line's maximum is subtracted before exp, and
 * the sum of exponentials is accumulated in double. */
#include <math.h>

#include "cpu.h"

#define SM_EXP(x) _Generic((x), float: expf, default: exp)(x)
#define SM_LOG(x) _Generic((x), float: logf, default: log)(x)

/* Written with the strides as parameters and inlined twice, so the contiguous call
 * (strides == itemsize, constants) compiles to plain indexed loops. */
#define DEFINE_SOFTMAX_LINE(name, T, C)                                                       \
    static inline __attribute__((always_inline)) void softmax_impl_##name(                    \
        const char *x, int64_t sx, char *y, int64_t sy, int64_t n, bool take_log)            \
    {                                                                                         \
        C mx = cpu_load_##name(x);                                                            \
        for (int64_t i = 1; i < n && !isnan(mx); i++) {                                       \
            C v = cpu_load_##name(x + i * sx);                                                \
            if (v > mx || isnan(v))                                                           \
                mx = v;                                                                       \
        }                                                                                     \
        double sum = 0;                                                                       \
        if (take_log) {                                                                       \
            for (int64_t i = 0; i < n; i++)                                                   \
                sum += SM_EXP((C)(cpu_load_##name(x + i * sx) - mx));                         \
            C lse = (C)log(sum);                                                              \
            for (int64_t i = 0; i < n; i++)                                                   \
                cpu_store_##name(y + i * sy, (C)(cpu_load_##name(x + i * sx) - mx) - lse);    \
            return;                                                                           \
        }                                                                                     \
        if (sizeof(T) == sizeof(C)) { /* keep exp(x - max) in y, then scale in place */       \
            for (int64_t i = 0; i < n; i++) {                                                 \
                C e = SM_EXP((C)(cpu_load_##name(x + i * sx) - mx));                          \
                cpu_store_##name(y + i * sy, e);                                              \
                sum += e;                                                                     \
            }                                                                                 \
            C inv = (C)(1.0 / sum);                                                           \
            for (int64_t i = 0; i < n; i++)                                                   \
                cpu_store_##name(y + i * sy, cpu_load_##name(y + i * sy) * inv);              \
            return;                                                                           \
        }                                                                                     \
        /* 16-bit storage would round the exponentials: compute them again instead */        \
        for (int64_t i = 0; i < n; i++)                                                       \
            sum += SM_EXP((C)(cpu_load_##name(x + i * sx) - mx));                             \
        C inv = (C)(1.0 / sum);                                                               \
        for (int64_t i = 0; i < n; i++)                                                       \
            cpu_store_##name(y + i * sy, SM_EXP((C)(cpu_load_##name(x + i * sx) - mx)) * inv); \
    }                                                                                         \
    static void softmax_line_##name(const char *x, int64_t sx, char *y, int64_t sy, int64_t n, \
                                    bool take_log)                                            \
    {                                                                                         \
        if (sx == (int64_t)sizeof(T) && sy == (int64_t)sizeof(T))                             \
            softmax_impl_##name(x, sizeof(T), y, sizeof(T), n, take_log);                     \
        else                                                                                  \
            softmax_impl_##name(x, sx, y, sy, n, take_log);                                   \
    }
#define INST(name, id, T, C) DEFINE_SOFTMAX_LINE(name, T, C)
CPU_FOR_FLOATING_DTYPES(INST)
#undef INST

typedef void (*softmax_line_fn)(const char *x, int64_t sx, char *y, int64_t sy, int64_t n,
                                bool take_log);

static softmax_line_fn line_for(enum weft_dtype dt)
{
    switch (dt) {
#define CASE(name, id, T, C)                                                                  \
    case id:                                                                                  \
        return softmax_line_##name;
        CPU_FOR_FLOATING_DTYPES(CASE)
#undef CASE
    default:
        return NULL;
    }
}

struct softmax_job {
    struct weft_iter it; /* operand 0: out's line starts, operand 1: in's */
    softmax_line_fn line;
    int64_t len, sx, sy; /* line length, byte strides along the dim */
    bool take_log;
};

static void softmax_loop(void *ctx, char **data, const int64_t *stride, int64_t n)
{
    const struct softmax_job *job = ctx;
    for (int64_t e = 0; e < n; e++)
        job->line(data[1] + e * stride[1], job->sx, data[0] + e * stride[0], job->sy, job->len,
                  job->take_log);
}

static void softmax_range(void *ctx, int64_t begin, int64_t end)
{
    struct softmax_job *job = ctx;
    weft_iter_run(&job->it, begin, end, softmax_loop, job);
}

static int softmax_kernel(const struct weft_op_call *call)
{
    const weft_tensor *in = call->in[0];
    weft_tensor *out = call->out[0];
    int dim = (int)call->ints[0];
    if (in->ndim == 0 || weft_tensor_numel(in) == 0)
        return in->ndim == 0 ? weft_error_set(WEFT_ERR_RUNTIME, "softmax kernel: 0-dim input") : 0;
    struct softmax_job job;
    job.line = line_for(in->dtype);
    job.len = in->shape[dim];
    job.sx = in->stride[dim] * (int64_t)weft_dtype_size(in->dtype);
    job.sy = out->stride[dim] * (int64_t)weft_dtype_size(out->dtype);
    job.take_log = call->op == WEFT_OP_LOG_SOFTMAX;
    /* Line starts: both tensors with the softmax dim collapsed to size 1. */
    weft_tensor starts_out = *out, starts_in = *in;
    starts_out.shape[dim] = 1;
    starts_in.shape[dim] = 1;
    const weft_tensor *ops[2] = {&starts_out, &starts_in};
    if (weft_iter_init(&job.it, 2, ops) != 0)
        return weft_error_code();
    int64_t grain = CPU_PARALLEL_GRAIN / job.len;
    cpu_parallel_for(job.it.numel, grain > 0 ? grain : 1, softmax_range, &job);
    return 0;
}

int cpu_register_softmax_kernels(void)
{
    int rc = weft_kernel_register(WEFT_OP_SOFTMAX, WEFT_DEVICE_CPU, WEFT_LAYOUT_STRIDED,
                                  WEFT_DTYPES_FLOATING, softmax_kernel);
    if (rc != 0)
        return rc;
    return weft_kernel_register(WEFT_OP_LOG_SOFTMAX, WEFT_DEVICE_CPU, WEFT_LAYOUT_STRIDED,
                                WEFT_DTYPES_FLOATING, softmax_kernel);
}
