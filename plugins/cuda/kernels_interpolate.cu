/* plugins/cuda/kernels_interpolate.cu: upsample and upsample_backward (weft/kernel.h),
 * the cpu plugin's formulas (kernels_interpolate.c) evaluated per thread.
 *
 * Forward: one thread per output pixel computes its row and column taps and sums them.
 * Backward without atomics: one thread per input pixel (iy, ix) scans the output rows
 * for the taps that read iy, and for each such row the output columns whose taps read ix,
 * adding grad * weight in that fixed order: each input pixel has one owner, so the sum
 * does not depend on the launch shape. The scan costs O(OH + hits * OW) per pixel. */
#include "cuda_dtypes.cuh"

namespace {

using namespace wc;

constexpr int kMaxTaps = 4;

struct upsample_args {
    int mode;
    bool align;
    double scale_h, scale_w;
    int64_t planes, channels, H, W, OH, OW;
    int64_t s[4]; /* the strided side's element strides (x forward, grad_output backward) */
};

/* Taps of output index o on one axis: PyTorch's formulas in compute type C (nearest in
 * float whatever C); returns their count. */
template <typename C>
__device__ int axis_taps(int mode, bool align, int64_t in, int64_t out, double scale, int64_t o,
                         int64_t *idx, C *w)
{
    /* a size-1 axis (a 1-d signal's H): one tap, as the cpu plugin */
    if (in == 1 && out == 1)
        mode = WEFT_UPSAMPLE_NEAREST;
    if (mode == WEFT_UPSAMPLE_NEAREST || mode == WEFT_UPSAMPLE_NEAREST_EXACT) {
        bool exact = mode == WEFT_UPSAMPLE_NEAREST_EXACT;
        int64_t i;
        if (!exact && out == in) {
            i = o;
        } else if (!exact && out == 2 * in) {
            i = o >> 1;
        } else {
            float s = scale > 0 ? (float)(1.0 / scale) : (float)in / (float)out;
            i = exact ? (int64_t)floorf((float)(((double)o + 0.5) * s)) : (int64_t)floorf((float)o * s);
            i = i < in - 1 ? i : in - 1;
        }
        idx[0] = i;
        w[0] = (C)1;
        return 1;
    }
    C ratio = align ? (out > 1 ? (C)(in - 1) / (C)(out - 1) : (C)0)
                    : (scale > 0 ? (C)(1.0 / scale) : (C)in / (C)out);
    C real = align ? ratio * (C)o : ratio * ((C)o + (C)0.5) - (C)0.5;
    if (mode == WEFT_UPSAMPLE_LINEAR) {
        if (!align && real < 0)
            real = 0;
        if (out == in) {
            idx[0] = idx[1] = o;
            w[0] = 1, w[1] = 0;
            return 2;
        }
        int64_t i0 = (int64_t)real;
        C l1 = real - (C)i0;
        idx[0] = i0, idx[1] = i0 + (i0 < in - 1 ? 1 : 0);
        w[0] = (C)1 - l1, w[1] = l1;
        return 2;
    }
    int64_t i = (int64_t)floor((double)real);
    C t = real - (C)i, A = (C)-0.75, x1 = t + (C)1, x2 = (C)1 - t, x3 = x2 + (C)1;
    w[0] = ((A * x1 - 5 * A) * x1 + 8 * A) * x1 - 4 * A;
    w[1] = ((A + 2) * t - (A + 3)) * t * t + 1;
    w[2] = ((A + 2) * x2 - (A + 3)) * x2 * x2 + 1;
    w[3] = ((A * x3 - 5 * A) * x3 + 8 * A) * x3 - 4 * A;
    for (int k = 0; k < 4; k++) {
        int64_t j = i - 1 + k;
        idx[k] = j < 0 ? 0 : j >= in ? in - 1 : j;
    }
    return 4;
}

/* x [N, C, H, W] strided, y [N, C, OH, OW] contiguous; one thread per output pixel. */
template <typename D>
__global__ void upsample_kernel(const typename D::S *x, typename D::S *y, upsample_args a)
{
    typedef typename D::C C;
    const int64_t total = a.planes * a.OH * a.OW, step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t n = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; n < total; n += step) {
        int64_t ox = n % a.OW, oy = n / a.OW % a.OH, p = n / (a.OW * a.OH);
        int64_t ih[kMaxTaps], iw[kMaxTaps];
        C wh[kMaxTaps], ww[kMaxTaps];
        int nh = axis_taps<C>(a.mode, a.align, a.H, a.OH, a.scale_h, oy, ih, wh);
        int nw = axis_taps<C>(a.mode, a.align, a.W, a.OW, a.scale_w, ox, iw, ww);
        const typename D::S *plane = x + (p / a.channels) * a.s[0] + (p % a.channels) * a.s[1];
        C out = 0;
        for (int th = 0; th < nh; th++) {
            const typename D::S *row = plane + ih[th] * a.s[2];
            C t = D::load(row + iw[0] * a.s[3]) * ww[0];
            for (int tw = 1; tw < nw; tw++)
                t += D::load(row + iw[tw] * a.s[3]) * ww[tw];
            out = th == 0 ? t * wh[0] : out + t * wh[th];
        }
        D::store(y + n, out);
    }
}

/* gy [N, C, OH, OW] strided, gx [N, C, H, W] contiguous; one thread per input pixel. */
template <typename D>
__global__ void upsample_backward_kernel(const typename D::S *gy, typename D::S *gx, upsample_args a)
{
    typedef typename D::C C;
    const int64_t total = a.planes * a.H * a.W, step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t n = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; n < total; n += step) {
        int64_t ix = n % a.W, iy = n / a.W % a.H, p = n / (a.W * a.H);
        const typename D::S *plane = gy + (p / a.channels) * a.s[0] + (p % a.channels) * a.s[1];
        C sum = 0;
        for (int64_t oy = 0; oy < a.OH; oy++) {
            int64_t ih[kMaxTaps], iw[kMaxTaps];
            C wh[kMaxTaps], ww[kMaxTaps];
            int nh = axis_taps<C>(a.mode, a.align, a.H, a.OH, a.scale_h, oy, ih, wh);
            for (int th = 0; th < nh; th++) {
                if (ih[th] != iy)
                    continue;
                for (int64_t ox = 0; ox < a.OW; ox++) {
                    int nw = axis_taps<C>(a.mode, a.align, a.W, a.OW, a.scale_w, ox, iw, ww);
                    C gh = D::load(plane + oy * a.s[2] + ox * a.s[3]) * wh[th];
                    for (int tw = 0; tw < nw; tw++)
                        if (iw[tw] == ix)
                            sum += gh * ww[tw];
                }
            }
        }
        D::store(gx + n, sum);
    }
}

/* image: the [N, C, H, W] side; sampled: the [N, C, OH, OW] side. */
static int upsample_launch(const struct weft_op_call *call, const weft_tensor *image,
                           const weft_tensor *sampled, bool backward)
{
    const weft_tensor *in = call->in[0];
    weft_tensor *out = call->out[0];
    if (image->ndim != 4 || sampled->ndim != 4 || image->shape[0] != sampled->shape[0] ||
        image->shape[1] != sampled->shape[1] || in->dtype != out->dtype ||
        !weft_tensor_is_contiguous(out))
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "upsample: expected [N, C, H, W] and [N, C, OH, OW] tensors of one "
                              "dtype and a contiguous output");
    upsample_args a = {(int)call->ints[0], call->ints[1] != 0, call->scalar[0], call->scalar[1],
                       image->shape[0] * image->shape[1], image->shape[1], image->shape[2],
                       image->shape[3], sampled->shape[2], sampled->shape[3],
                       {in->stride[0], in->stride[1], in->stride[2], in->stride[3]}};
    if (a.mode < WEFT_UPSAMPLE_NEAREST || a.mode > WEFT_UPSAMPLE_CUBIC)
        return weft_error_set(WEFT_ERR_VALUE, "upsample: unknown mode %d", a.mode);
    int64_t total = weft_tensor_numel(out);
    if (total == 0)
        return 0;
    int dev = out->device.index;
    if (cuda_set_device(dev) != 0)
        return weft_error_code();
    cudaStream_t stream = cuda_current_stream(dev);
    switch (in->dtype) {
#define WC_UPSAMPLE_CASE(E, D)                                                                \
    case E:                                                                                   \
        if (backward)                                                                         \
            upsample_backward_kernel<D><<<grid_for(total), kThreads, 0, stream>>>(            \
                static_cast<const D::S *>(weft_tensor_data(in)),                              \
                static_cast<D::S *>(weft_tensor_data(out)), a);                               \
        else                                                                                  \
            upsample_kernel<D><<<grid_for(total), kThreads, 0, stream>>>(                     \
                static_cast<const D::S *>(weft_tensor_data(in)),                              \
                static_cast<D::S *>(weft_tensor_data(out)), a);                               \
        return CUDA_CHECK_LAUNCH(backward ? "upsample_backward" : "upsample");
        WC_FLOATING_DTYPES(WC_UPSAMPLE_CASE)
#undef WC_UPSAMPLE_CASE
    default:
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "\"upsample\" not implemented for '%s' on cuda",
                              weft_dtype_torch_name(in->dtype));
    }
}

static int upsample_op(const struct weft_op_call *call)
{
    return upsample_launch(call, call->in[0], call->out[0], false);
}

static int upsample_backward_op(const struct weft_op_call *call)
{
    return upsample_launch(call, call->out[0], call->in[0], true);
}

} // namespace

extern "C" const struct weft_kernel_entry cuda_interpolate_kernels[] = {
    {-1, WEFT_OP_UPSAMPLE_NAME, WEFT_DTYPES_FLOATING, upsample_op},
    {-1, WEFT_OP_UPSAMPLE_BACKWARD_NAME, WEFT_DTYPES_FLOATING, upsample_backward_op},
    {0, nullptr, 0, nullptr},
};
