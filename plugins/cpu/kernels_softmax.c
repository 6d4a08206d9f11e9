/* plugins/cpu/kernels_softmax.c: softmax and log_softmax along one dim.
 *
 * Each line along the dim is independent: the iterator walks the line starts (the
 * tensors seen with the softmax dim's size set to 1) and each line is walked with its
 * stride. Numerically stable: the line's maximum is subtracted before exp. Two paths:
 *  - a line at a time, for lines along the last dim (contiguous: plain indexed loops the
 *    compiler vectorises, exp included);
 *  - up to SM_COLS neighbouring lines at once when the line starts are adjacent in memory
 *    (softmax over dim 0 of a contiguous matrix), so every pass reads rows in order
 *    instead of jumping a row per element.
 * Sums of exponentials are accumulated in double (per block of SM_BLOCK in the compute
 * type on the vector path). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cpu.h"
#include "fast_math.h"

#ifdef _OPENMP
#define OMP_PRAGMA(text) _Pragma(#text)
#define OMP_SIMD OMP_PRAGMA(omp simd)
#define OMP_SIMD_SUM(v) OMP_PRAGMA(omp simd reduction(+ : v))
#else
#define OMP_SIMD
#define OMP_SIMD_SUM(v)
#endif

#define SM_BLOCK 1024 /* exponentials summed in the compute type before going to double */
#define SM_COLS 512   /* neighbouring lines handled together on the column path */

#define SM_EXP(x) _Generic((x), float: exp_nonpos_f32, default: exp)(x)

#define SM_LANES 16 /* independent running maxima: the max pass vectorises */

/* Written with the strides as parameters and inlined twice, so the contiguous call
 * (strides == itemsize, constants) compiles to plain indexed loops. */
#define DEFINE_SOFTMAX(name, T, C)                                                            \
    static inline __attribute__((always_inline)) void softmax_impl_##name(                    \
        const char *x, int64_t sx, char *y, int64_t sy, int64_t n, bool take_log)             \
    {                                                                                         \
        /* the line's max, or NaN when it holds one (then every result is NaN) */            \
        C lane[SM_LANES], mx;                                                                 \
        int nan_seen[SM_LANES] = {0}, any_nan = 0;                                            \
        int64_t i = 0;                                                                        \
        for (int j = 0; j < SM_LANES; j++)                                                    \
            lane[j] = weft_load_##name(x);                                                     \
        for (; i + SM_LANES <= n; i += SM_LANES) {                                            \
            OMP_SIMD                                                                          \
            for (int j = 0; j < SM_LANES; j++) {                                              \
                C v = weft_load_##name(x + (i + j) * sx);                                      \
                lane[j] = v > lane[j] ? v : lane[j];                                          \
                nan_seen[j] |= v != v;                                                        \
            }                                                                                 \
        }                                                                                     \
        for (int j = 0; i < n; i++, j++) {                                                    \
            C v = weft_load_##name(x + i * sx);                                                \
            lane[j] = v > lane[j] ? v : lane[j];                                              \
            nan_seen[j] |= v != v;                                                            \
        }                                                                                     \
        mx = lane[0];                                                                         \
        for (int j = 0; j < SM_LANES; j++) {                                                  \
            mx = lane[j] > mx ? lane[j] : mx;                                                 \
            any_nan |= nan_seen[j];                                                           \
        }                                                                                     \
        if (any_nan)                                                                          \
            mx = (C)NAN;                                                                      \
        /* exp(x - max) summed; kept in y when y holds the compute type exactly */            \
        bool keep = !take_log && sizeof(T) == sizeof(C);                                      \
        double sum = 0;                                                                       \
        for (int64_t b = 0; b < n; b += SM_BLOCK) {                                           \
            int64_t e = n - b < SM_BLOCK ? n - b : SM_BLOCK;                                  \
            C part = 0;                                                                       \
            if (keep) {                                                                       \
                OMP_SIMD_SUM(part)                                                            \
                for (i = b; i < b + e; i++) {                                                 \
                    C ex = SM_EXP((C)(weft_load_##name(x + i * sx) - mx));                     \
                    weft_store_##name(y + i * sy, ex);                                         \
                    part += ex;                                                               \
                }                                                                             \
            } else {                                                                          \
                OMP_SIMD_SUM(part)                                                            \
                for (i = b; i < b + e; i++)                                                   \
                    part += SM_EXP((C)(weft_load_##name(x + i * sx) - mx));                    \
            }                                                                                 \
            sum += part;                                                                      \
        }                                                                                     \
        if (take_log) {                                                                       \
            C lse = (C)log(sum);                                                              \
            OMP_SIMD                                                                          \
            for (i = 0; i < n; i++)                                                           \
                weft_store_##name(y + i * sy, (C)(weft_load_##name(x + i * sx) - mx) - lse);    \
            return;                                                                           \
        }                                                                                     \
        C inv = (C)(1.0 / sum);                                                               \
        if (keep) {                                                                           \
            OMP_SIMD                                                                          \
            for (i = 0; i < n; i++)                                                           \
                weft_store_##name(y + i * sy, weft_load_##name(y + i * sy) * inv);              \
            return;                                                                           \
        }                                                                                     \
        /* 16-bit storage would round the exponentials: compute them again instead */        \
        for (i = 0; i < n; i++)                                                               \
            weft_store_##name(y + i * sy, SM_EXP((C)(weft_load_##name(x + i * sx) - mx)) * inv); \
    }                                                                                         \
    static void softmax_line_##name(const char *x, int64_t sx, char *y, int64_t sy, int64_t n, \
                                    bool take_log)                                            \
    {                                                                                         \
        if (sx == (int64_t)sizeof(T) && sy == (int64_t)sizeof(T))                             \
            softmax_impl_##name(x, sizeof(T), y, sizeof(T), n, take_log);                     \
        else                                                                                  \
            softmax_impl_##name(x, sx, y, sy, n, take_log);                                   \
    }                                                                                         \
    /* w lines whose starts are adjacent (element j of row l at x + l * sx + j); the         \
     * passes walk rows, keeping one max and one sum per line. */                             \
    static void softmax_cols_##name(const char *x, int64_t sx, char *y, int64_t sy, int w,    \
                                    int64_t n, bool take_log)                                 \
    {                                                                                         \
        const T *xr = (const T *)x;                                                           \
        C mx[SM_COLS];                                                                        \
        double sum[SM_COLS];                                                                  \
        int nan_seen[SM_COLS];                                                                \
        for (int j = 0; j < w; j++) {                                                         \
            mx[j] = weft_load_##name(xr + j);                                                  \
            sum[j] = 0;                                                                       \
            nan_seen[j] = 0;                                                                  \
        }                                                                                     \
        for (int64_t l = 0; l < n; l++) {                                                     \
            const T *row = (const T *)(x + l * sx);                                           \
            OMP_SIMD                                                                          \
            for (int j = 0; j < w; j++) {                                                     \
                C v = weft_load_##name(row + j);                                               \
                mx[j] = v > mx[j] ? v : mx[j];                                                \
                nan_seen[j] |= v != v;                                                        \
            }                                                                                 \
        }                                                                                     \
        for (int j = 0; j < w; j++)                                                           \
            mx[j] = nan_seen[j] ? (C)NAN : mx[j];                                             \
        bool keep = !take_log && sizeof(T) == sizeof(C);                                      \
        for (int64_t l = 0; l < n; l++) {                                                     \
            const T *row = (const T *)(x + l * sx);                                           \
            T *out = (T *)(y + l * sy);                                                       \
            if (keep) {                                                                       \
                OMP_SIMD                                                                      \
                for (int j = 0; j < w; j++) {                                                 \
                    C ex = SM_EXP((C)(weft_load_##name(row + j) - mx[j]));                     \
                    weft_store_##name(out + j, ex);                                            \
                    sum[j] += ex;                                                             \
                }                                                                             \
            } else {                                                                          \
                OMP_SIMD                                                                      \
                for (int j = 0; j < w; j++)                                                   \
                    sum[j] += SM_EXP((C)(weft_load_##name(row + j) - mx[j]));                  \
            }                                                                                 \
        }                                                                                     \
        for (int j = 0; j < w; j++) /* 1/sum, or log(sum) for log_softmax */                  \
            sum[j] = take_log ? log(sum[j]) : 1.0 / sum[j];                                   \
        for (int64_t l = 0; l < n; l++) {                                                     \
            const T *row = (const T *)(x + l * sx);                                           \
            T *out = (T *)(y + l * sy);                                                       \
            if (take_log) {                                                                   \
                for (int j = 0; j < w; j++)                                                   \
                    weft_store_##name(out + j, (C)(weft_load_##name(row + j) - mx[j]) - (C)sum[j]); \
            } else if (keep) {                                                                \
                OMP_SIMD                                                                      \
                for (int j = 0; j < w; j++)                                                   \
                    weft_store_##name(out + j, weft_load_##name(out + j) * (C)sum[j]);          \
            } else {                                                                          \
                OMP_SIMD                                                                      \
                for (int j = 0; j < w; j++)                                                   \
                    weft_store_##name(out + j, SM_EXP((C)(weft_load_##name(row + j) - mx[j])) * \
                                                  (C)sum[j]);                                 \
            }                                                                                 \
        }                                                                                     \
    }
#define INST(name, id, T, C) DEFINE_SOFTMAX(name, T, C)
WEFT_FOR_FLOATING_DTYPES(INST)
#undef INST

typedef void (*softmax_line_fn)(const char *x, int64_t sx, char *y, int64_t sy, int64_t n,
                                bool take_log);
typedef void (*softmax_cols_fn)(const char *x, int64_t sx, char *y, int64_t sy, int w, int64_t n,
                                bool take_log);

struct softmax_job {
    struct weft_iter it; /* operand 0: out's line starts, operand 1: in's */
    softmax_line_fn line;
    softmax_cols_fn cols;
    int64_t len, sx, sy; /* line length, byte strides along the dim */
    int64_t isz;
    bool take_log;
};

static void softmax_loop(void *ctx, char **data, const int64_t *stride, int64_t n)
{
    const struct softmax_job *job = ctx;
    if (stride[0] == job->isz && stride[1] == job->isz && job->sx != job->isz && n > 1) {
        for (int64_t j = 0; j < n; j += SM_COLS) {
            int w = (int)(n - j < SM_COLS ? n - j : SM_COLS);
            job->cols(data[1] + j * job->isz, job->sx, data[0] + j * job->isz, job->sy, w,
                      job->len, job->take_log);
        }
        return;
    }
    for (int64_t e = 0; e < n; e++)
        job->line(data[1] + e * stride[1], job->sx, data[0] + e * stride[0], job->sy, job->len,
                  job->take_log);
}

static void softmax_range(void *ctx, int64_t begin, int64_t end)
{
    struct softmax_job *job = ctx;
    weft_iter_run(&job->it, begin, end, softmax_loop, job);
}

int cpu_softmax_kernel(const struct weft_op_call *call)
{
    const weft_tensor *in = call->in[0];
    weft_tensor *out = call->out[0];
    int dim = (int)call->ints[0];
    if (in->ndim == 0 || in->dtype != out->dtype)
        return weft_error_set(WEFT_ERR_RUNTIME, "softmax kernel: expects a dim and one dtype");
    if (weft_tensor_numel(in) == 0)
        return 0;
    struct softmax_job job;
    switch (in->dtype) {
#define CASE(name, id, T, C)                                                                  \
    case id:                                                                                  \
        job.line = softmax_line_##name;                                                       \
        job.cols = softmax_cols_##name;                                                       \
        break;
        WEFT_FOR_FLOATING_DTYPES(CASE)
#undef CASE
    default:
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "\"%s\" not implemented for '%s' on cpu",
                              weft_op_name(call->op), weft_dtype_torch_name(in->dtype));
    }
    job.isz = (int64_t)weft_dtype_size(in->dtype);
    job.len = in->shape[dim];
    job.sx = in->stride[dim] * job.isz;
    job.sy = out->stride[dim] * job.isz;
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
