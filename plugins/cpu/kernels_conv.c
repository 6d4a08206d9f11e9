/* plugins/cpu/kernels_conv.c: im2col and its adjoint col2im, the data movement around the
 * GEMM that computes a convolution (the GEMM itself goes through the MATMUL kernel).
 *
 * Both work one (image, channel) plane at a time, so planes run in parallel with no
 * shared writes. im2col only moves elements (no arithmetic, any dtype of the same size
 * would do); col2im sums, in the compute type: 16-bit floats accumulate in a float
 * buffer and are rounded once. */
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

struct conv_geom {
    int64_t kh, kw, sh, sw, ph, pw, dh, dw, oh, ow;
    int64_t C, H, W;
};

static struct conv_geom geom_of(const struct weft_op_call *call, const weft_tensor *image)
{
    const int64_t *k = call->ints;
    return (struct conv_geom){k[0], k[1], k[2], k[3], k[4], k[5], k[6], k[7], k[8], k[9],
                              image->shape[1], image->shape[2], image->shape[3]};
}

/* ceil(a / b) for a > 0, else 0; no division at b = 1, the common stride (valid_columns
 * runs it for every tap of every plane). */
static int64_t ceil_div(int64_t a, int64_t b)
{
    return a <= 0 ? 0 : b == 1 ? a : (a + b - 1) / b;
}

/* The output columns [lo, hi) whose tap at kernel column offset `off` (= j*dW - pW)
 * lands inside the image row. */
static void valid_columns(const struct conv_geom *g, int64_t off, int64_t *lo, int64_t *hi)
{
    *lo = ceil_div(-off, g->sw);
    *hi = ceil_div(g->W - off, g->sw);
    if (*hi > g->ow)
        *hi = g->ow;
    if (*lo > *hi)
        *lo = *hi;
}

/* Keeps the short zero and copy loops below loops: GCC would turn them into memset and
 * memcpy calls, which cost more than the loop on rows of a few dozen elements. */
#if defined(__GNUC__) && !defined(__clang__)
#define NO_LIBCALL_LOOPS __attribute__((optimize("no-tree-loop-distribute-patterns")))
#else
#define NO_LIBCALL_LOOPS
#endif

#define CPU_KERNEL_INC "conv_planes.inc"
#include "each_floating_dtype.inc"
#undef CPU_KERNEL_INC

/* ---- kernels -------------------------------------------------------------------------- */

struct conv_job {
    const struct weft_op_call *call;
    struct conv_geom g;
    enum weft_dtype dtype;
    int failed; /* a thread could not get its scratch buffer */
};

static void im2col_range(void *ctx, int64_t begin, int64_t end)
{
    const struct conv_job *job = ctx;
    const weft_tensor *x = job->call->in[0];
    weft_tensor *out = job->call->out[0];
    size_t isz = weft_dtype_size(job->dtype);
    int64_t rows = job->g.kh * job->g.kw * (job->g.oh * job->g.ow);
    for (int64_t p = begin; p < end; p++) {
        int64_t n = p / job->g.C, c = p % job->g.C;
        const char *src = (const char *)weft_tensor_data(x) +
                          (n * x->stride[0] + c * x->stride[1]) * (int64_t)isz;
        char *dst = (char *)weft_tensor_data(out) + p * rows * (int64_t)isz;
        switch (job->dtype) {
#define CASE(name, id, T, C)                                                                  \
    case id:                                                                                  \
        im2col_plane_##name(src, x->stride[2], x->stride[3], dst, &job->g);                   \
        break;
            WEFT_FOR_FLOATING_DTYPES(CASE)
#undef CASE
        default:
            break;
        }
    }
}

static void col2im_range(void *ctx, int64_t begin, int64_t end)
{
    struct conv_job *job = ctx;
    const weft_tensor *col = job->call->in[0];
    weft_tensor *out = job->call->out[0];
    size_t isz = weft_dtype_size(job->dtype);
    int64_t taps = job->g.kh * job->g.kw, HW = job->g.H * job->g.W;
    float *acc = isz == 2 ? malloc((size_t)(HW ? HW : 1) * sizeof *acc) : NULL;
    if (isz == 2 && !acc) {
        __atomic_store_n(&job->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    for (int64_t p = begin; p < end; p++) {
        int64_t n = p / job->g.C, c = p % job->g.C;
        const char *src = (const char *)weft_tensor_data(col) +
                          (n * col->stride[0] + c * taps * col->stride[1]) * (int64_t)isz;
        char *dst = (char *)weft_tensor_data(out) + p * HW * (int64_t)isz;
        switch (job->dtype) {
        case WEFT_F16:
            col2im_plane_f16(src, col->stride[1], col->stride[2], dst, acc, &job->g);
            break;
        case WEFT_BF16:
            col2im_plane_bf16(src, col->stride[1], col->stride[2], dst, acc, &job->g);
            break;
        case WEFT_F32:
            col2im_plane_f32(src, col->stride[1], col->stride[2], dst, NULL, &job->g);
            break;
        case WEFT_F64:
            col2im_plane_f64(src, col->stride[1], col->stride[2], dst, NULL, &job->g);
            break;
        default:
            break;
        }
    }
    free(acc);
}

static int64_t plane_grain(int64_t work_per_plane)
{
    int64_t g = CPU_PARALLEL_GRAIN / (work_per_plane > 0 ? work_per_plane : 1);
    return g > 0 ? g : 1;
}

int cpu_im2col_kernel(const struct weft_op_call *call)
{
    const weft_tensor *x = call->in[0];
    struct conv_job job = {call, geom_of(call, x), x->dtype};
    int64_t planes = x->shape[0] * job.g.C;
    if (weft_tensor_numel(call->out[0]) == 0)
        return 0;
    int64_t work = job.g.kh * job.g.kw * job.g.oh * job.g.ow;
    cpu_parallel_for(planes, plane_grain(work), im2col_range, &job);
    return 0;
}

int cpu_col2im_kernel(const struct weft_op_call *call)
{
    weft_tensor *out = call->out[0];
    struct conv_job job = {call, geom_of(call, out), call->in[0]->dtype};
    int64_t planes = out->shape[0] * job.g.C;
    if (weft_tensor_numel(out) == 0)
        return 0;
    if (weft_tensor_numel(call->in[0]) == 0) {
        memset(weft_tensor_data(out), 0, (size_t)weft_tensor_numel(out) * weft_tensor_itemsize(out));
        return 0;
    }
    int64_t work = job.g.kh * job.g.kw * job.g.oh * job.g.ow;
    cpu_parallel_for(planes, plane_grain(work), col2im_range, &job);
    if (job.failed)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "col2im: out of host memory");
    return 0;
}
