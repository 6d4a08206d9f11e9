/* plugins/cuda/kernels_softmax.cu: SOFTMAX and LOG_SOFTMAX along dim ints[0] (kernel.h),
 * with the cpu plugin's arithmetic (kernels_softmax.c): the line's maximum subtracted
 * before exp (NaN anywhere in the line makes the whole line NaN), exponentials summed in
 * double, then exp(x - max) * (1 / sum) or (x - max) - log(sum) in the compute type.
 *
 * One block per line along the dim, any strides: the lines' starts are walked with the
 * core's weft_iter over both tensors seen with the dim's size set to 1 (as the cpu
 * does), and each line is read with its stride along the dim. Three passes over the line
 * (max, sum, write), each finished by a block reduction. */
#include <math.h>

#include "cuda_dtypes.cuh"

namespace {

using namespace wc;

__device__ __forceinline__ float exp_c(float x) { return expf(x); }
__device__ __forceinline__ double exp_c(double x) { return exp(x); }

/* max that propagates NaN from either side */
struct NanMax {
    template <typename C> __device__ __forceinline__ C operator()(C a, C b) const
    {
        return (a != a || b > a) ? (a != a ? a : b) : (b != b ? b : a);
    }
};

struct Sum {
    __device__ __forceinline__ double operator()(double a, double b) const { return a + b; }
};

/* it: operand 0 out's line starts, operand 1 in's; sx, sy: element strides along dim. */
template <typename D>
__global__ void softmax_kernel(weft_iter it, int64_t len, int64_t sx, int64_t sy, bool take_log)
{
    typedef typename D::S S;
    typedef typename D::C C;
    __shared__ C smax[32];
    __shared__ double ssum[32];
    for (int64_t line = blockIdx.x; line < it.numel; line += gridDim.x) {
        int64_t off[2];
        iter_offsets<2>(it, line, off);
        S *y = reinterpret_cast<S *>(it.data[0] + off[0]);
        const S *x = reinterpret_cast<const S *>(it.data[1] + off[1]);

        C mx = (C)-INFINITY;
        for (int64_t i = threadIdx.x; i < len; i += blockDim.x)
            mx = NanMax()(mx, D::load(x + i * sx));
        mx = block_reduce(mx, NanMax(), smax);

        double sum = 0;
        for (int64_t i = threadIdx.x; i < len; i += blockDim.x)
            sum += (double)exp_c((C)(D::load(x + i * sx) - mx));
        sum = block_reduce(sum, Sum(), ssum);

        if (take_log) {
            C lse = (C)log(sum);
            for (int64_t i = threadIdx.x; i < len; i += blockDim.x)
                D::store(y + i * sy, (C)(D::load(x + i * sx) - mx) - lse);
        } else {
            C inv = (C)(1.0 / sum);
            for (int64_t i = threadIdx.x; i < len; i += blockDim.x)
                D::store(y + i * sy, exp_c((C)(D::load(x + i * sx) - mx)) * inv);
        }
    }
}

/* Threads per line: a warp for short lines, up to kThreads for long ones. */
static int threads_for(int64_t len)
{
    int64_t t = (len + 31) / 32 * 32;
    return (int)(t < 32 ? 32 : t > kThreads ? kThreads : t);
}

template <typename D>
static int launch(const weft_iter &it, int64_t len, int64_t sx, int64_t sy, bool take_log,
                  cudaStream_t stream, const char *what)
{
    unsigned blocks = (unsigned)(it.numel < 65536 ? it.numel : 65536);
    softmax_kernel<D><<<blocks, threads_for(len), 0, stream>>>(it, len, sx, sy, take_log);
    return CUDA_CHECK_LAUNCH(what);
}

static int softmax_op(const struct weft_op_call *call)
{
    const weft_tensor *in = call->in[0];
    weft_tensor *out = call->out[0];
    int dim = (int)call->ints[0];
    if (in->ndim == 0 || dim < 0 || dim >= in->ndim || in->dtype != out->dtype)
        return weft_error_set(WEFT_ERR_RUNTIME, "softmax kernel: expects a dim and one dtype");
    if (weft_tensor_numel(in) == 0)
        return 0;
    /* Line starts: both tensors with the softmax dim collapsed to size 1. */
    weft_tensor starts_out = *out, starts_in = *in;
    starts_out.shape[dim] = 1;
    starts_in.shape[dim] = 1;
    const weft_tensor *ops[2] = {&starts_out, &starts_in};
    struct weft_iter it;
    if (weft_iter_init(&it, 2, ops) != 0)
        return weft_error_code();
    int64_t len = in->shape[dim], sx = in->stride[dim], sy = out->stride[dim];
    bool take_log = call->op == WEFT_OP_LOG_SOFTMAX;
    const char *what = weft_op_name(call->op);
    int dev = out->device.index;
    if (cuda_set_device(dev) != 0)
        return weft_error_code();
    cudaStream_t stream = cuda_current_stream(dev);
    switch (in->dtype) {
#define WC_SOFTMAX_CASE(E, D)                                                                 \
    case E:                                                                                   \
        return launch<D>(it, len, sx, sy, take_log, stream, what);
        WC_FLOATING_DTYPES(WC_SOFTMAX_CASE)
#undef WC_SOFTMAX_CASE
    default:
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "\"%s\" not implemented for '%s' on cuda",
                              what, weft_dtype_torch_name(in->dtype));
    }
}

} // namespace

extern "C" const struct weft_kernel_entry cuda_softmax_kernels[] = {
    {WEFT_OP_SOFTMAX, nullptr, WEFT_DTYPES_FLOATING, softmax_op},
    {WEFT_OP_LOG_SOFTMAX, nullptr, WEFT_DTYPES_FLOATING, softmax_op},
    {0, nullptr, 0, nullptr},
};
