/* plugins/cpu/kernels_interpolate.c: upsample and upsample_backward (weft/kernel.h):
 * nearest, nearest-exact, linear and cubic interpolation of [N, C, H, W] planes.
 *
 * Interpolation is separable: each output row reads a few input rows and each output
 * column a few input columns, with weights that depend on the axis alone. Both axes'
 * taps are computed once per call (PyTorch's formulas in its own precision: see
 * weft/kernel.h), then every (image, channel) plane runs in parallel. The backward
 * scatters each output pixel's gradient into its taps, plane by plane in output-pixel
 * order, so no two threads touch one pixel and the sums do not depend on the threads. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

#define MAX_TAPS 4

/* One axis: output index o reads input indices idx[o*4 + t] with weights w[o*4 + t] (of
 * the compute type), t < ntaps. */
struct axis {
    int ntaps;
    int64_t *idx;
    void *w;
};

/* PyTorch's nearest_idx / nearest_exact_idx: the scale in float whatever the dtype. */
static int64_t nearest_index(int64_t o, int64_t in, int64_t out, double scale, bool exact)
{
    if (!exact && out == in)
        return o;
    if (!exact && out == 2 * in)
        return o >> 1;
    float s = scale > 0 ? (float)(1.0 / scale) : (float)in / (float)out;
    int64_t i = exact ? (int64_t)floorf((float)(((double)o + 0.5) * s)) : (int64_t)floorf((float)o * s);
    return i < in - 1 ? i : in - 1;
}

static int64_t clamp_index(int64_t i, int64_t in)
{
    return i < 0 ? 0 : i >= in ? in - 1 : i;
}

#define C float
#include "upsample_taps.inc"
#undef C
#define C double
#include "upsample_taps.inc"
#undef C

static void axis_free(struct axis *a)
{
    free(a->idx);
    free(a->w);
}

/* Fills a for one axis; double_weights: the dtype computes in double. */
static int axis_build(struct axis *a, int mode, bool align, int64_t in, int64_t out, double scale,
                      bool double_weights)
{
    size_t n = (size_t)(out > 0 ? out : 1) * MAX_TAPS;
    a->idx = malloc(n * sizeof *a->idx);
    a->w = malloc(n * (double_weights ? sizeof(double) : sizeof(float)));
    if (!a->idx || !a->w) {
        axis_free(a);
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "upsample: out of host memory");
    }
    /* A size-1 axis (a 1-d signal's H) is one tap of weight 1: two taps would add x * 0,
     * NaN for an infinite x, on an axis that does not exist in PyTorch's 1-d kernels. */
    if (in == 1 && out == 1)
        mode = WEFT_UPSAMPLE_NEAREST;
    switch (mode) {
    case WEFT_UPSAMPLE_NEAREST:
    case WEFT_UPSAMPLE_NEAREST_EXACT:
        a->ntaps = 1;
        for (int64_t o = 0; o < out; o++) {
            a->idx[o * MAX_TAPS] = nearest_index(o, in, out, scale, mode == WEFT_UPSAMPLE_NEAREST_EXACT);
            if (double_weights)
                ((double *)a->w)[o * MAX_TAPS] = 1;
            else
                ((float *)a->w)[o * MAX_TAPS] = 1;
        }
        return 0;
    case WEFT_UPSAMPLE_LINEAR:
    case WEFT_UPSAMPLE_CUBIC:
        a->ntaps = mode == WEFT_UPSAMPLE_LINEAR ? 2 : 4;
        if (double_weights)
            taps_double(a, mode, align, in, out, scale);
        else
            taps_float(a, mode, align, in, out, scale);
        return 0;
    default:
        axis_free(a);
        return weft_error_set(WEFT_ERR_VALUE, "upsample: unknown mode %d", mode);
    }
}

#define CPU_KERNEL_INC "upsample_planes.inc"
#include "each_floating_dtype.inc"
#undef CPU_KERNEL_INC

/* ---- kernels ---------------------------------------------------------------------------- */

struct up_job {
    const struct weft_op_call *call;
    struct axis ah, aw;
    int64_t H, W, OH, OW, channels; /* plane p is image p / channels, channel p % channels */
    int failed;                     /* a thread could not get its scratch buffer */
};

static const char *plane_of(const weft_tensor *t, int64_t p, int64_t C)
{
    return (const char *)weft_tensor_data(t) +
           ((p / C) * t->stride[0] + (p % C) * t->stride[1]) * (int64_t)weft_tensor_itemsize(t);
}

static void forward_range(void *ctx, int64_t begin, int64_t end)
{
    struct up_job *j = ctx;
    const weft_tensor *x = j->call->in[0];
    weft_tensor *y = j->call->out[0];
    int64_t L = j->OH * j->OW;
    for (int64_t p = begin; p < end; p++) {
        const char *xp = plane_of(x, p, j->channels);
        char *yp = (char *)weft_tensor_data(y) + p * L * (int64_t)weft_tensor_itemsize(y);
        switch (x->dtype) {
#define CASE(name, id, T, C)                                                                  \
    case id:                                                                                  \
        up_plane_##name((const T *)xp, x->stride[2], x->stride[3], (T *)yp, &j->ah, &j->aw,   \
                        j->OH, j->OW);                                                        \
        break;
            WEFT_FOR_FLOATING_DTYPES(CASE)
#undef CASE
        default:
            break;
        }
    }
}

static void backward_range(void *ctx, int64_t begin, int64_t end)
{
    struct up_job *j = ctx;
    const weft_tensor *gy = j->call->in[0];
    weft_tensor *gx = j->call->out[0];
    int64_t HW = j->H * j->W;
    bool half = weft_tensor_itemsize(gx) == 2;
    float *acc = half ? malloc((size_t)(HW ? HW : 1) * sizeof *acc) : NULL;
    if (half && !acc) {
        __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    for (int64_t p = begin; p < end; p++) {
        const char *gyp = plane_of(gy, p, j->channels);
        char *gxp = (char *)weft_tensor_data(gx) + p * HW * (int64_t)weft_tensor_itemsize(gx);
        switch (gy->dtype) {
#define CASE(name, id, T, C)                                                                  \
    case id:                                                                                  \
        up_backward_plane_##name((const T *)gyp, gy->stride[2], gy->stride[3], (T *)gxp,      \
                                 (C *)acc, &j->ah, &j->aw, j->H, j->W, j->OH, j->OW);         \
        break;
            WEFT_FOR_FLOATING_DTYPES(CASE)
#undef CASE
        default:
            break;
        }
    }
    free(acc);
}

/* image: the [N, C, H, W] side of the call; sampled: the [N, C, OH, OW] side. */
static int upsample_run(const struct weft_op_call *call, const weft_tensor *image,
                        const weft_tensor *sampled, bool backward)
{
    if (image->ndim != 4 || sampled->ndim != 4 || image->shape[0] != sampled->shape[0] ||
        image->shape[1] != sampled->shape[1] || call->in[0]->dtype != call->out[0]->dtype ||
        !weft_tensor_is_contiguous(call->out[0]))
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "upsample: expected [N, C, H, W] and [N, C, OH, OW] tensors of one "
                              "dtype and a contiguous output");
    struct up_job j = {.call = call, .H = image->shape[2], .W = image->shape[3],
                       .OH = sampled->shape[2], .OW = sampled->shape[3],
                       .channels = image->shape[1]};
    if (weft_tensor_numel(image) == 0 || weft_tensor_numel(sampled) == 0) {
        if (backward && weft_tensor_numel(image) > 0)
            memset(weft_tensor_data(call->out[0]), 0,
                   (size_t)weft_tensor_numel(image) * weft_tensor_itemsize(image));
        return 0;
    }
    int mode = (int)call->ints[0];
    bool align = call->ints[1] != 0, dbl = image->dtype == WEFT_F64;
    if (axis_build(&j.ah, mode, align, j.H, j.OH, call->scalar[0], dbl) != 0)
        return weft_error_code();
    if (axis_build(&j.aw, mode, align, j.W, j.OW, call->scalar[1], dbl) != 0) {
        axis_free(&j.ah);
        return weft_error_code();
    }
    int64_t work = j.OH * j.OW * j.ah.ntaps * j.aw.ntaps + (backward ? j.H * j.W : 0);
    int64_t grain = CPU_PARALLEL_GRAIN / (work > 0 ? work : 1);
    cpu_parallel_for(image->shape[0] * j.channels, grain > 0 ? grain : 1,
                     backward ? backward_range : forward_range, &j);
    axis_free(&j.ah);
    axis_free(&j.aw);
    if (j.failed)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "upsample backward: out of host memory");
    return 0;
}

int cpu_upsample_kernel(const struct weft_op_call *call)
{
    return upsample_run(call, call->in[0], call->out[0], false);
}

int cpu_upsample_backward_kernel(const struct weft_op_call *call)
{
    return upsample_run(call, call->out[0], call->in[0], true);
}
