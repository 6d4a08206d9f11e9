/* plugins/cuda/kernels_conv.cu: IM2COL and COL2IM (the data movement around a
 * convolution's GEMM) and 2-d max and average pooling with their backward passes
 * (kernel.h has the contracts and the shared geometry ints[0..7]).
 *
 * One thread per element written, and every kernel gathers what it writes: no atomics, so
 * results do not depend on scheduling. The windows and the order of every sum are the
 * cpu plugin's (kernels_conv.c, kernels_pool.c), so the results agree to the bit:
 *  - col2im and the backward passes visit, for each pixel, the kernel taps or the output
 *    windows that hold it in the order the cpu adds them (taps i then j; windows oy then
 *    ox), accumulating in the compute type (float for 16-bit floats) from 0;
 *  - max_pool2d_backward looks for each pixel among the windows that contain it, as
 *    PyTorch's CUDA kernel does: its indices come from MAX_POOL2D, so each one lies in
 *    its own window. */
#include <math.h>

#include "cuda_dtypes.cuh"

namespace {

using namespace wc;

/* ints[0..7] plus the image (H, W) and pooled (OH, OW) sizes; strides in elements. */
struct Geom {
    int64_t kh, kw, sh, sw, ph, pw, dh, dw;
    int64_t C, H, W, OH, OW;
    bool count_include_pad;
    int64_t divisor_override;
};

static Geom geom_of(const struct weft_op_call *call, const weft_tensor *image, int64_t oh,
                    int64_t ow)
{
    const int64_t *k = call->ints;
    Geom g = {k[0], k[1], k[2], k[3], k[4], k[5], k[6], k[7], image->shape[1], image->shape[2],
              image->shape[3], oh, ow, false, 0};
    return g;
}

/* A 4-d tensor's element strides. */
struct Strides4 {
    int64_t s[4];
};

static Strides4 strides_of(const weft_tensor *t)
{
    return Strides4{{t->stride[0], t->stride[1], t->stride[2], t->stride[3]}};
}

#define WC_FOR_EACH_ELEMENT(i, n)                                                             \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x,                          \
                 step_ = (int64_t)gridDim.x * blockDim.x;                                     \
         i < (n); i += step_)

/* ---- IM2COL: moves elements, written per element size ---------------------------------------
 * out [N, C*kH*kW, OH*OW] contiguous; element (n, (c*kH + i)*kW + j, oy*OW + ox). */

template <typename T>
__global__ void im2col_kernel(const T *x, Strides4 xs, T *out, int64_t n_total, Geom g)
{
    int64_t L = g.OH * g.OW, taps = g.kh * g.kw;
    WC_FOR_EACH_ELEMENT(e, n_total)
    {
        int64_t l = e % L, row = e / L;
        int64_t tap = row % taps, nc = row / taps; /* nc = n * C + c */
        int64_t n = nc / g.C, c = nc % g.C;
        int64_t i = tap / g.kw, j = tap % g.kw;
        int64_t y = (l / g.OW) * g.sh - g.ph + i * g.dh;
        int64_t xx = (l % g.OW) * g.sw - g.pw + j * g.dw;
        T v = 0;
        if (y >= 0 && y < g.H && xx >= 0 && xx < g.W)
            v = x[n * xs.s[0] + c * xs.s[1] + y * xs.s[2] + xx * xs.s[3]];
        out[e] = v;
    }
}

template <typename T>
static int launch_im2col(const weft_tensor *x, weft_tensor *out, const Geom &g, cudaStream_t stream)
{
    int64_t n = weft_tensor_numel(out);
    im2col_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(
        static_cast<const T *>(weft_tensor_data(x)), strides_of(x),
        static_cast<T *>(weft_tensor_data(out)), n, g);
    return CUDA_CHECK_LAUNCH("im2col");
}

/* ---- COL2IM: out [N, C, H, W] contiguous; col [N, C*kH*kW, OH*OW] with strides cs --------- */

template <typename D>
__global__ void col2im_kernel(const typename D::S *col, Strides4 cs, typename D::S *out,
                              int64_t n_total, Geom g)
{
    typedef typename D::C C;
    WC_FOR_EACH_ELEMENT(e, n_total)
    {
        int64_t xx = e % g.W, y = (e / g.W) % g.H, nc = e / (g.W * g.H);
        int64_t n = nc / g.C, c = nc % g.C;
        C sum = 0;
        for (int64_t i = 0; i < g.kh; i++) {
            int64_t ty = y + g.ph - i * g.dh; /* = oy * sH when tap i of row oy reads y */
            if (ty < 0 || ty % g.sh != 0 || ty / g.sh >= g.OH)
                continue;
            int64_t oy = ty / g.sh;
            for (int64_t j = 0; j < g.kw; j++) {
                int64_t tx = xx + g.pw - j * g.dw;
                if (tx < 0 || tx % g.sw != 0 || tx / g.sw >= g.OW)
                    continue;
                int64_t row = (c * g.kh + i) * g.kw + j, l = oy * g.OW + tx / g.sw;
                sum += D::load(col + n * cs.s[0] + row * cs.s[1] + l * cs.s[2]);
            }
        }
        D::store(out + e, sum);
    }
}

/* ---- MAX_POOL2D ---------------------------------------------------------------------------- */

/* First in-image tap of a window along one axis, and the end (the cpu's max_span). */
__device__ __forceinline__ void max_span(int64_t o, int64_t s, int64_t p, int64_t k, int64_t d,
                                         int64_t size, int64_t *start, int64_t *end)
{
    int64_t a = o * s - p, b = a + (k - 1) * d + 1;
    *end = b < size ? b : size;
    while (a < 0)
        a += d;
    *start = a;
}

/* y, idx: [N, C, OH, OW] contiguous. A NaN tap is taken (the last one wins, as on the
 * cpu); a window without in-image taps gives -inf and index -1. */
template <typename D>
__global__ void max_pool_kernel(const typename D::S *x, Strides4 xs, typename D::S *y,
                                int64_t *idx, int64_t n_total, Geom g)
{
    typedef typename D::C C;
    WC_FOR_EACH_ELEMENT(e, n_total)
    {
        int64_t ox = e % g.OW, oy = (e / g.OW) % g.OH, nc = e / (g.OW * g.OH);
        const typename D::S *plane = x + (nc / g.C) * xs.s[0] + (nc % g.C) * xs.s[1];
        int64_t y0, y1, x0, x1;
        max_span(oy, g.sh, g.ph, g.kh, g.dh, g.H, &y0, &y1);
        max_span(ox, g.sw, g.pw, g.kw, g.dw, g.W, &x0, &x1);
        C best = (C)-INFINITY;
        int64_t at = y0 < y1 && x0 < x1 ? y0 * g.W + x0 : -1;
        for (int64_t r = y0; r < y1; r += g.dh)
            for (int64_t c = x0; c < x1; c += g.dw) {
                C v = D::load(plane + r * xs.s[2] + c * xs.s[3]);
                if (v > best || v != v) {
                    best = v;
                    at = r * g.W + c;
                }
            }
        D::store(y + e, best);
        idx[e] = at;
    }
}

/* gx [N, C, H, W] contiguous: the sum, over the windows (oy, ox) whose index names this
 * pixel, of grad_output. Windows that can hold row y: oy*sH - pH <= y <= oy*sH - pH +
 * (kH-1)*dH. */
template <typename D>
__global__ void max_pool_backward_kernel(const typename D::S *gy, Strides4 gs, const int64_t *idx,
                                         Strides4 is, typename D::S *gx, int64_t n_total, Geom g)
{
    typedef typename D::C C;
    WC_FOR_EACH_ELEMENT(e, n_total)
    {
        int64_t xx = e % g.W, y = (e / g.W) % g.H, nc = e / (g.W * g.H);
        int64_t n = nc / g.C, c = nc % g.C;
        int64_t span_h = (g.kh - 1) * g.dh, span_w = (g.kw - 1) * g.dw;
        int64_t oy0 = y + g.ph - span_h <= 0 ? 0 : (y + g.ph - span_h + g.sh - 1) / g.sh;
        int64_t oy1 = (y + g.ph) / g.sh + 1, ox1 = (xx + g.pw) / g.sw + 1;
        int64_t ox0 = xx + g.pw - span_w <= 0 ? 0 : (xx + g.pw - span_w + g.sw - 1) / g.sw;
        oy1 = oy1 < g.OH ? oy1 : g.OH;
        ox1 = ox1 < g.OW ? ox1 : g.OW;
        int64_t me = y * g.W + xx;
        C sum = 0;
        for (int64_t oy = oy0; oy < oy1; oy++)
            for (int64_t ox = ox0; ox < ox1; ox++)
                if (idx[n * is.s[0] + c * is.s[1] + oy * is.s[2] + ox * is.s[3]] == me)
                    sum += D::load(gy + n * gs.s[0] + c * gs.s[1] + oy * gs.s[2] + ox * gs.s[3]);
        D::store(gx + e, sum);
    }
}

/* ---- AVG_POOL2D ---------------------------------------------------------------------------- */

/* A window clipped to the image, and its divisor (the cpu's avg_window). */
struct AvgWindow {
    int64_t y0, y1, x0, x1;
    double divisor;
};

__device__ __forceinline__ AvgWindow avg_window(const Geom &g, int64_t oy, int64_t ox)
{
    int64_t y0 = oy * g.sh - g.ph, x0 = ox * g.sw - g.pw;
    int64_t y1 = y0 + g.kh < g.H + g.ph ? y0 + g.kh : g.H + g.ph;
    int64_t x1 = x0 + g.kw < g.W + g.pw ? x0 + g.kw : g.W + g.pw;
    int64_t pool_size = (y1 - y0) * (x1 - x0);
    AvgWindow w = {y0 < 0 ? 0 : y0, y1 > g.H ? g.H : y1, x0 < 0 ? 0 : x0, x1 > g.W ? g.W : x1, 0};
    if (g.divisor_override > 0)
        w.divisor = (double)g.divisor_override;
    else if (g.count_include_pad)
        w.divisor = (double)pool_size;
    else
        w.divisor = (double)((w.y1 - w.y0) * (w.x1 - w.x0));
    return w;
}

template <typename D>
__global__ void avg_pool_kernel(const typename D::S *x, Strides4 xs, typename D::S *y,
                                int64_t n_total, Geom g)
{
    typedef typename D::C C;
    WC_FOR_EACH_ELEMENT(e, n_total)
    {
        int64_t ox = e % g.OW, oy = (e / g.OW) % g.OH, nc = e / (g.OW * g.OH);
        const typename D::S *plane = x + (nc / g.C) * xs.s[0] + (nc % g.C) * xs.s[1];
        AvgWindow w = avg_window(g, oy, ox);
        C s = 0;
        for (int64_t r = w.y0; r < w.y1; r++)
            for (int64_t c = w.x0; c < w.x1; c++)
                s += D::load(plane + r * xs.s[2] + c * xs.s[3]);
        bool empty = w.y0 >= w.y1 || w.x0 >= w.x1;
        D::store(y + e, empty ? (C)0 : (C)(s / (C)w.divisor));
    }
}

/* Windows that hold row y: oy*sH - pH <= y < oy*sH - pH + kH (their clipped ends, at
 * most H + pH, are past y anyway). */
template <typename D>
__global__ void avg_pool_backward_kernel(const typename D::S *gy, Strides4 gs, typename D::S *gx,
                                         int64_t n_total, Geom g)
{
    typedef typename D::C C;
    WC_FOR_EACH_ELEMENT(e, n_total)
    {
        int64_t xx = e % g.W, y = (e / g.W) % g.H, nc = e / (g.W * g.H);
        const typename D::S *plane = gy + (nc / g.C) * gs.s[0] + (nc % g.C) * gs.s[1];
        int64_t oy0 = y + g.ph - g.kh + 1 <= 0 ? 0 : (y + g.ph - g.kh + g.sh) / g.sh;
        int64_t ox0 = xx + g.pw - g.kw + 1 <= 0 ? 0 : (xx + g.pw - g.kw + g.sw) / g.sw;
        int64_t oy1 = (y + g.ph) / g.sh + 1, ox1 = (xx + g.pw) / g.sw + 1;
        oy1 = oy1 < g.OH ? oy1 : g.OH;
        ox1 = ox1 < g.OW ? ox1 : g.OW;
        C sum = 0;
        for (int64_t oy = oy0; oy < oy1; oy++)
            for (int64_t ox = ox0; ox < ox1; ox++) {
                AvgWindow w = avg_window(g, oy, ox);
                if (y < w.y0 || y >= w.y1 || xx < w.x0 || xx >= w.x1)
                    continue;
                sum += D::load(plane + oy * gs.s[2] + ox * gs.s[3]) / (C)w.divisor;
            }
        D::store(gx + e, sum);
    }
}

/* ---- entries ----------------------------------------------------------------------------- */

static int no_kernel(const struct weft_op_call *call, enum weft_dtype dt)
{
    return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "\"%s\" not implemented for '%s' on cuda",
                          weft_op_name(call->op), weft_dtype_torch_name(dt));
}

static bool is_4d(const weft_tensor *t, enum weft_dtype dt)
{
    return t && t->ndim == 4 && t->dtype == dt;
}

static int begin(const weft_tensor *t, cudaStream_t *stream)
{
    int dev = t->device.index;
    if (cuda_set_device(dev) != 0)
        return weft_error_code();
    *stream = cuda_current_stream(dev);
    return 0;
}

static int im2col_op(const struct weft_op_call *call)
{
    const weft_tensor *x = call->in[0];
    weft_tensor *out = call->out[0];
    if (x->ndim != 4 || out->ndim != 3 || !weft_tensor_is_contiguous(out))
        return weft_error_set(WEFT_ERR_RUNTIME, "im2col kernel: expects a 4-d image");
    if (weft_tensor_numel(out) == 0)
        return 0;
    Geom g = geom_of(call, x, call->ints[8], call->ints[9]);
    cudaStream_t stream = nullptr;
    if (begin(out, &stream) != 0)
        return weft_error_code();
    switch (weft_tensor_itemsize(x)) {
    case 2: return launch_im2col<uint16_t>(x, out, g, stream);
    case 4: return launch_im2col<uint32_t>(x, out, g, stream);
    case 8: return launch_im2col<uint64_t>(x, out, g, stream);
    default: return no_kernel(call, x->dtype);
    }
}

template <typename D> static int col2im(const struct weft_op_call *call, cudaStream_t stream)
{
    typedef typename D::S S;
    const weft_tensor *col = call->in[0];
    weft_tensor *out = call->out[0];
    int64_t n = weft_tensor_numel(out);
    Geom g = geom_of(call, out, call->ints[8], call->ints[9]);
    Strides4 cs = {{col->stride[0], col->stride[1], col->stride[2], 0}};
    col2im_kernel<D><<<grid_for(n), kThreads, 0, stream>>>(
        static_cast<const S *>(weft_tensor_data(col)), cs, static_cast<S *>(weft_tensor_data(out)),
        n, g);
    return CUDA_CHECK_LAUNCH("col2im");
}

static int col2im_op(const struct weft_op_call *call)
{
    const weft_tensor *col = call->in[0];
    weft_tensor *out = call->out[0];
    if (col->ndim != 3 || out->ndim != 4 || !weft_tensor_is_contiguous(out))
        return weft_error_set(WEFT_ERR_RUNTIME, "col2im kernel: expects a 3-d column tensor");
    if (weft_tensor_numel(out) == 0)
        return 0;
    cudaStream_t stream = nullptr;
    if (begin(out, &stream) != 0)
        return weft_error_code();
    switch (col->dtype) {
#define WC_COL2IM_CASE(E, D)                                                                  \
    case E:                                                                                   \
        return col2im<D>(call, stream);
        WC_FLOATING_DTYPES(WC_COL2IM_CASE)
#undef WC_COL2IM_CASE
    default:
        return no_kernel(call, col->dtype);
    }
}

/* MAX_POOL2D / AVG_POOL2D: in[0] x, out[0] y (and out[1] indices), contiguous outputs. */
template <typename D> static int pool(const struct weft_op_call *call, cudaStream_t stream)
{
    typedef typename D::S S;
    const weft_tensor *x = call->in[0];
    weft_tensor *y = call->out[0];
    int64_t n = weft_tensor_numel(y);
    Geom g = geom_of(call, x, y->shape[2], y->shape[3]);
    const S *xp = static_cast<const S *>(weft_tensor_data(x));
    S *yp = static_cast<S *>(weft_tensor_data(y));
    if (call->op == WEFT_OP_MAX_POOL2D) {
        max_pool_kernel<D><<<grid_for(n), kThreads, 0, stream>>>(
            xp, strides_of(x), yp, static_cast<int64_t *>(weft_tensor_data(call->out[1])), n, g);
        return CUDA_CHECK_LAUNCH("max_pool2d");
    }
    g.count_include_pad = call->ints[8] != 0;
    g.divisor_override = call->ints[9];
    avg_pool_kernel<D><<<grid_for(n), kThreads, 0, stream>>>(xp, strides_of(x), yp, n, g);
    return CUDA_CHECK_LAUNCH("avg_pool2d");
}

/* The backward passes: in[0] grad_output (and in[1] indices), out[0] grad_input. */
template <typename D>
static int pool_backward(const struct weft_op_call *call, cudaStream_t stream)
{
    typedef typename D::S S;
    const weft_tensor *gy = call->in[0];
    weft_tensor *gx = call->out[0];
    int64_t n = weft_tensor_numel(gx);
    Geom g = geom_of(call, gx, gy->shape[2], gy->shape[3]);
    const S *gyp = static_cast<const S *>(weft_tensor_data(gy));
    S *gxp = static_cast<S *>(weft_tensor_data(gx));
    if (call->op == WEFT_OP_MAX_POOL2D_BACKWARD) {
        const weft_tensor *idx = call->in[1];
        max_pool_backward_kernel<D><<<grid_for(n), kThreads, 0, stream>>>(
            gyp, strides_of(gy), static_cast<const int64_t *>(weft_tensor_data(idx)),
            strides_of(idx), gxp, n, g);
        return CUDA_CHECK_LAUNCH("max_pool2d_backward");
    }
    g.count_include_pad = call->ints[8] != 0;
    g.divisor_override = call->ints[9];
    avg_pool_backward_kernel<D><<<grid_for(n), kThreads, 0, stream>>>(gyp, strides_of(gy), gxp, n,
                                                                      g);
    return CUDA_CHECK_LAUNCH("avg_pool2d_backward");
}

static int pool_op(const struct weft_op_call *call)
{
    const weft_tensor *x = call->in[0];
    weft_tensor *y = call->out[0];
    bool is_max = call->op == WEFT_OP_MAX_POOL2D;
    bool ok = is_4d(x, x->dtype) && is_4d(y, x->dtype) && weft_tensor_is_contiguous(y);
    if (is_max)
        ok = ok && call->nout > 1 && is_4d(call->out[1], WEFT_I64) &&
             weft_tensor_is_contiguous(call->out[1]);
    if (!ok)
        return weft_error_set(WEFT_ERR_RUNTIME, "%s kernel: expects 4-d tensors, contiguous outputs",
                              weft_op_name(call->op));
    if (weft_tensor_numel(y) == 0)
        return 0;
    cudaStream_t stream = nullptr;
    if (begin(y, &stream) != 0)
        return weft_error_code();
    switch (x->dtype) {
#define WC_POOL_CASE(E, D)                                                                    \
    case E:                                                                                   \
        return pool<D>(call, stream);
        WC_FLOATING_DTYPES(WC_POOL_CASE)
#undef WC_POOL_CASE
    default:
        return no_kernel(call, x->dtype);
    }
}

static int pool_backward_op(const struct weft_op_call *call)
{
    const weft_tensor *gy = call->in[0];
    weft_tensor *gx = call->out[0];
    bool is_max = call->op == WEFT_OP_MAX_POOL2D_BACKWARD;
    bool ok = is_4d(gy, gy->dtype) && is_4d(gx, gy->dtype) && weft_tensor_is_contiguous(gx);
    if (is_max)
        ok = ok && call->nin > 1 && is_4d(call->in[1], WEFT_I64);
    if (!ok)
        return weft_error_set(WEFT_ERR_RUNTIME, "%s kernel: expects 4-d tensors, a contiguous output",
                              weft_op_name(call->op));
    if (weft_tensor_numel(gx) == 0)
        return 0;
    cudaStream_t stream = nullptr;
    if (begin(gx, &stream) != 0)
        return weft_error_code();
    if (weft_tensor_numel(gy) == 0)
        return CUDA_CHECK(cudaMemsetAsync(weft_tensor_data(gx), 0,
                                          (size_t)weft_tensor_numel(gx) * weft_tensor_itemsize(gx),
                                          stream));
    switch (gy->dtype) {
#define WC_POOL_BACKWARD_CASE(E, D)                                                           \
    case E:                                                                                   \
        return pool_backward<D>(call, stream);
        WC_FLOATING_DTYPES(WC_POOL_BACKWARD_CASE)
#undef WC_POOL_BACKWARD_CASE
    default:
        return no_kernel(call, gy->dtype);
    }
}

} // namespace

extern "C" const struct weft_kernel_entry cuda_conv_kernels[] = {
    {WEFT_OP_IM2COL, nullptr, WEFT_DTYPES_FLOATING, im2col_op},
    {WEFT_OP_COL2IM, nullptr, WEFT_DTYPES_FLOATING, col2im_op},
    {WEFT_OP_MAX_POOL2D, nullptr, WEFT_DTYPES_FLOATING, pool_op},
    {WEFT_OP_AVG_POOL2D, nullptr, WEFT_DTYPES_FLOATING, pool_op},
    {WEFT_OP_MAX_POOL2D_BACKWARD, nullptr, WEFT_DTYPES_FLOATING, pool_backward_op},
    {WEFT_OP_AVG_POOL2D_BACKWARD, nullptr, WEFT_DTYPES_FLOATING, pool_backward_op},
    {0, nullptr, 0, nullptr},
};
