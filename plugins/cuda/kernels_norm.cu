/* plugins/cuda/kernels_norm.cu: native_layer_norm and native_layer_norm_backward
 * (weft/kernel.h), with the cpu plugin's arithmetic (kernels_norm.c): a row's moments as
 * the sum and sum of squares of x - x[0] in double, the rest in the compute type.
 *
 * One block per row for the forward and for dx (a block reduction gives the row's sums);
 * dw/db by a second kernel with one thread per column summing its rows in order, so the
 * bits do not depend on the launch shape and no atomics are needed. */
#include <math.h>

#include "cuda_dtypes.cuh"
#include "weft/kernel_checks.h"

namespace {

using namespace wc;

struct Sums {
    double a, b;
};

struct AddSums {
    __device__ __forceinline__ Sums operator()(Sums x, Sums y) const { return {x.a + y.a, x.b + y.b}; }
};

/* Threads per row: a warp for short rows, up to kThreads for long ones. */
static int threads_for(int64_t len)
{
    int64_t t = (len + 31) / 32 * 32;
    return (int)(t < 32 ? 32 : t > kThreads ? kThreads : t);
}

static unsigned blocks_for(int64_t rows)
{
    return (unsigned)(rows < 65536 ? (rows > 0 ? rows : 1) : 65536);
}

/* x, y: [R, D]; w, b: [D] or null; stats: [2, R] of C (float, or double for float64). */
template <typename D>
__global__ void ln_forward_kernel(const typename D::S *x, const typename D::S *w,
                                  const typename D::S *b, typename D::S *y, typename D::C *stats,
                                  int64_t R, int64_t len, double eps)
{
    typedef typename D::C C;
    __shared__ Sums smem[32];
    for (int64_t r = blockIdx.x; r < R; r += gridDim.x) {
        const typename D::S *xr = x + r * len;
        typename D::S *yr = y + r * len;
        const double shift = (double)D::load(xr);
        Sums s = {0, 0};
        for (int64_t i = threadIdx.x; i < len; i += blockDim.x) {
            double d = (double)D::load(xr + i) - shift;
            s.a += d;
            s.b += d * d;
        }
        s = block_reduce(s, AddSums(), smem);
        double m = s.a / (double)len, var = s.b / (double)len - m * m;
        const C mean = (C)(shift + m), rstd = (C)(1.0 / sqrt((var > 0 ? var : 0) + eps));
        if (threadIdx.x == 0) {
            stats[r] = mean;
            stats[R + r] = rstd;
        }
        for (int64_t i = threadIdx.x; i < len; i += blockDim.x) {
            C v = (D::load(xr + i) - mean) * rstd;
            if (w)
                v = v * D::load(w + i);
            D::store(yr + i, b ? v + D::load(b + i) : v);
        }
    }
}

/* g, x, dx: [R, D]; w: [D] or null; stats: [2, R]. */
template <typename D>
__global__ void ln_backward_dx_kernel(const typename D::S *g, const typename D::S *x,
                                      const typename D::C *stats, const typename D::S *w,
                                      typename D::S *dx, int64_t R, int64_t len)
{
    typedef typename D::C C;
    __shared__ Sums smem[32];
    for (int64_t r = blockIdx.x; r < R; r += gridDim.x) {
        const typename D::S *gr = g + r * len, *xr = x + r * len;
        const C mean = stats[r], rstd = stats[R + r];
        Sums s = {0, 0};
        for (int64_t i = threadIdx.x; i < len; i += blockDim.x) {
            C xhat = (D::load(xr + i) - mean) * rstd;
            C gw = D::load(gr + i) * (w ? D::load(w + i) : (C)1);
            s.a += (double)gw;
            s.b += (double)(gw * xhat);
        }
        s = block_reduce(s, AddSums(), smem);
        const C a = (C)(s.a / (double)len), c = (C)(s.b / (double)len);
        for (int64_t i = threadIdx.x; i < len; i += blockDim.x) {
            C xhat = (D::load(xr + i) - mean) * rstd;
            C gw = D::load(gr + i) * (w ? D::load(w + i) : (C)1);
            D::store(dx + r * len + i, rstd * (gw - a - xhat * c));
        }
    }
}

/* dwb: [2, D]: row 0 the sum over rows of g * xhat, row 1 the sum of g; one thread per
 * column, rows in order (adjacent threads read adjacent columns). */
template <typename D>
__global__ void ln_backward_dwb_kernel(const typename D::S *g, const typename D::S *x,
                                       const typename D::C *stats, typename D::S *dwb, int64_t R,
                                       int64_t len)
{
    typedef typename D::C C;
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < len; j += step) {
        double dw = 0, db = 0;
        for (int64_t r = 0; r < R; r++) {
            C gv = D::load(g + r * len + j);
            dw += (double)(gv * ((D::load(x + r * len + j) - stats[r]) * stats[R + r]));
            db += (double)gv;
        }
        D::store(dwb + j, (C)dw);
        D::store(dwb + len + j, (C)db);
    }
}

template <typename D> static const typename D::S *ptr(const weft_tensor *t)
{
    return t ? static_cast<const typename D::S *>(weft_tensor_data(t)) : nullptr;
}

template <typename D> static typename D::S *mut_ptr(weft_tensor *t)
{
    return t ? static_cast<typename D::S *>(weft_tensor_data(t)) : nullptr;
}

template <typename D>
static int forward(const struct weft_op_call *call, int64_t R, int64_t len, cudaStream_t stream)
{
    typedef typename D::C C;
    ln_forward_kernel<D><<<blocks_for(R), threads_for(len), 0, stream>>>(
        ptr<D>(call->in[0]), ptr<D>(call->in[1]), ptr<D>(call->in[2]), mut_ptr<D>(call->out[0]),
        static_cast<C *>(weft_tensor_data(call->out[1])), R, len, call->scalar[0]);
    return CUDA_CHECK_LAUNCH("native_layer_norm");
}

template <typename D>
static int backward(const struct weft_op_call *call, int64_t R, int64_t len, cudaStream_t stream)
{
    typedef typename D::C C;
    const C *stats = static_cast<const C *>(weft_tensor_data(call->in[2]));
    ln_backward_dx_kernel<D><<<blocks_for(R), threads_for(len), 0, stream>>>(
        ptr<D>(call->in[0]), ptr<D>(call->in[1]), stats, ptr<D>(call->in[3]),
        mut_ptr<D>(call->out[0]), R, len);
    if (CUDA_CHECK_LAUNCH("native_layer_norm_backward") != 0)
        return weft_error_code();
    if (call->nout < 2 || !call->out[1])
        return 0;
    ln_backward_dwb_kernel<D><<<grid_for(len), kThreads, 0, stream>>>(
        ptr<D>(call->in[0]), ptr<D>(call->in[1]), stats, mut_ptr<D>(call->out[1]), R, len);
    return CUDA_CHECK_LAUNCH("native_layer_norm_backward (weight, bias)");
}

static int native_layer_norm_op(const struct weft_op_call *call)
{
    const weft_tensor *x = call->in[0];
    const weft_tensor *y = call->out[0];
    if (weft_check_native_layer_norm(call) != 0)
        return weft_error_code();
    int64_t R = x->shape[0], len = x->shape[1];
    if (R == 0 || len == 0)
        return 0;
    int dev = y->device.index;
    if (cuda_set_device(dev) != 0)
        return weft_error_code();
    cudaStream_t stream = cuda_current_stream(dev);
    switch (x->dtype) {
#define WC_LN_CASE(E, D)                                                                      \
    case E:                                                                                   \
        return forward<D>(call, R, len, stream);
        WC_FLOATING_DTYPES(WC_LN_CASE)
#undef WC_LN_CASE
    default:
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED,
                              "\"native_layer_norm\" not implemented for '%s' on cuda",
                              weft_dtype_torch_name(x->dtype));
    }
}

static int native_layer_norm_backward_op(const struct weft_op_call *call)
{
    const weft_tensor *g = call->in[0], *dx = call->out[0];
    if (weft_check_native_layer_norm_backward(call) != 0)
        return weft_error_code();
    int64_t R = g->shape[0], len = g->shape[1];
    if (len == 0)
        return 0;
    int dev = dx->device.index;
    if (cuda_set_device(dev) != 0)
        return weft_error_code();
    cudaStream_t stream = cuda_current_stream(dev);
    switch (g->dtype) {
#define WC_LN_CASE(E, D)                                                                      \
    case E:                                                                                   \
        return backward<D>(call, R, len, stream);
        WC_FLOATING_DTYPES(WC_LN_CASE)
#undef WC_LN_CASE
    default:
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED,
                              "\"native_layer_norm_backward\" not implemented for '%s' on cuda",
                              weft_dtype_torch_name(g->dtype));
    }
}

} // namespace

extern "C" const struct weft_kernel_entry cuda_norm_kernels[] = {
    {-1, WEFT_OP_NATIVE_LAYER_NORM_NAME, WEFT_DTYPES_FLOATING, native_layer_norm_op},
    {-1, WEFT_OP_NATIVE_LAYER_NORM_BACKWARD_NAME, WEFT_DTYPES_FLOATING,
     native_layer_norm_backward_op},
    {0, nullptr, 0, nullptr},
};
