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

#define CPU_KERNEL_INC "softmax_lines.inc"
#include "each_floating_dtype.inc"
#undef CPU_KERNEL_INC

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
