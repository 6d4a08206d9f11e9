/* plugins/cuda/kernels_activation.cu: gelu_tanh, gelu_backward and add_bias_gelu
 * (weft/kernel.h), one pass each; the first two over operands of any strides (the core's
 * weft_iter, dims coalesced, so contiguous tensors walk as one line). The cpu plugin's
 * formulas (kernels_activation.c, fast_math.h) in the compute type, with CUDA's erf. */
#include <math.h>

#include "cuda_dtypes.cuh"
#include "weft/kernel_checks.h"

namespace {

using namespace wc;

constexpr double kBeta = 0.7978845608028654;       /* sqrt(2 / pi) */
constexpr double kKappa = 0.044715;
constexpr double kInvSqrt2Pi = 0.3989422804014327; /* 1 / sqrt(2 pi) */

__device__ __forceinline__ float erf_c(float v) { return erff(v); }
__device__ __forceinline__ double erf_c(double v) { return erf(v); }
__device__ __forceinline__ float exp_c(float v) { return expf(v); }
__device__ __forceinline__ double exp_c(double v) { return exp(v); }

/* GELU's tanh form, 0.5 x (1 + tanh(u)), as x sigmoid(2u): x / (1 + E) for x >= 0 and
 * x E / (1 + E) below, E = e^{-2|u|}, where 1 + tanh(u) cancels in the left tail. The cpu
 * plugin's fast_math.h says why 2|u| is taken in double for float (its absolute error is
 * the result's relative one, and it reaches 158): E 2^64, a normal float for |x| <= 10.9
 * (beyond, E < 2^-158, and x E is -0, NaN for -inf and NaN). */
constexpr float kTwoTo64 = 18446744073709551616.0f;

__device__ __forceinline__ float gelu_tanh_e64(float x)
{
    float a = fminf(fabsf(x), 10.9f); /* NaN -> 10.9 */
    double ad = a;
    double y = ad * (ad * ad * 0.1029432395800235 + 2.302208198144325); /* 2|u| / ln 2 */
    double n = rint(y);
    return ldexpf(exp2f((float)(n - y)), 64 - (int)n);
}

__device__ __forceinline__ float gelu_tanh(float x)
{
    float e64 = gelu_tanh_e64(x);
    float tail = x >= -10.9f ? e64 : 0.f;
    float num = x >= 0.f ? x : x * tail / kTwoTo64;
    return num / (1.0f + e64 / kTwoTo64);
}

__device__ __forceinline__ double gelu_tanh(double x)
{
    double u = kBeta * (x + kKappa * x * x * x), e = exp(-2 * fabs(u));
    return (x >= 0 ? x : x * e) / (1 + e);
}

/* Its derivative S + k S (1 - S), S = sigmoid(2u), k = x c, c = 2 beta (1 + 3 kappa x^2):
 * (d + x E c) / d^2 for x >= 0 and E (d + x c) / d^2 below, d = 1 + E. */
__device__ __forceinline__ float gelu_tanh_slope(float x)
{
    float e64 = gelu_tanh_e64(x), e = e64 / kTwoTo64, d = 1.0f + e;
    float c = (float)(2 * kBeta) * (1.0f + (float)(3 * kKappa) * x * x);
    float tail = x >= -10.9f ? e64 : 0.f;
    float num = x >= 0.f ? d + (x * e) * c : (tail * d + (tail * x) * c) / kTwoTo64;
    return num / (d * d);
}

__device__ __forceinline__ double gelu_tanh_slope(double x)
{
    double u = kBeta * (x + kKappa * x * x * x), e = exp(-2 * fabs(u)), d = 1 + e;
    double c = 2 * kBeta * (1 + 3 * kKappa * x * x);
    return (x >= 0 ? d + (x * e) * c : e * d + (e * x) * c) / (d * d);
}

/* d/dx of GELU: Phi(x) + x phi(x), or the tanh form's derivative */
template <typename C> __device__ __forceinline__ C gelu_grad(C a, bool tanh_form)
{
    if (tanh_form)
        return gelu_tanh_slope(a);
    return (C)0.5 * ((C)1 + erf_c(a * (C)M_SQRT1_2)) + a * exp_c((C)-0.5 * a * a) * (C)kInvSqrt2Pi;
}

/* operands: 0 out, 1 x */
template <typename D> __global__ void gelu_tanh_kernel(weft_iter it)
{
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < it.numel; i += step) {
        int64_t off[2];
        iter_offsets<2>(it, i, off);
        auto *o = reinterpret_cast<typename D::S *>(it.data[0] + off[0]);
        auto *x = reinterpret_cast<const typename D::S *>(it.data[1] + off[1]);
        D::store(o, gelu_tanh(D::load(x)));
    }
}

/* operands: 0 out, 1 grad, 2 x */
template <typename D> __global__ void gelu_backward_kernel(weft_iter it, bool tanh_form)
{
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < it.numel; i += step) {
        int64_t off[3];
        iter_offsets<3>(it, i, off);
        auto *o = reinterpret_cast<typename D::S *>(it.data[0] + off[0]);
        auto *g = reinterpret_cast<const typename D::S *>(it.data[1] + off[1]);
        auto *x = reinterpret_cast<const typename D::S *>(it.data[2] + off[2]);
        D::store(o, D::load(g) * gelu_grad(D::load(x), tanh_form));
    }
}

/* h, y: [M, N] contiguous; bias [N]. h += bias in place (rounded to the dtype), y = gelu(h). */
template <typename D>
__global__ void add_bias_gelu_kernel(typename D::S *h, typename D::S *y, const typename D::S *bias,
                                     int64_t n, int64_t N, bool tanh_form)
{
    typedef typename D::C C;
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        D::store(h + i, D::load(h + i) + D::load(bias + i % N));
        C a = D::load(h + i);
        D::store(y + i, tanh_form ? gelu_tanh(a)
                                  : (C)0.5 * a * ((C)1 + erf_c(a * (C)M_SQRT1_2)));
    }
}

/* Sets up the walk over ops and the stream of out's device; 1 when there is nothing to
 * do, 0 to launch, negative with an error. */
static int begin(int nops, const weft_tensor *const *ops, weft_iter *it, cudaStream_t *stream)
{
    if (weft_iter_init(it, nops, ops) != 0)
        return weft_error_code();
    if (it->numel == 0)
        return 1;
    int dev = ops[0]->device.index;
    if (cuda_set_device(dev) != 0)
        return weft_error_code();
    *stream = cuda_current_stream(dev);
    return 0;
}

static int gelu_tanh_op(const struct weft_op_call *call)
{
    const weft_tensor *ops[2] = {call->out[0], call->in[0]};
    weft_iter it;
    cudaStream_t stream = nullptr;
    int rc = begin(2, ops, &it, &stream);
    if (rc != 0)
        return rc < 0 ? rc : 0;
    switch (call->in[0]->dtype) {
#define WC_GELU_CASE(E, D)                                                                    \
    case E:                                                                                   \
        gelu_tanh_kernel<D><<<grid_for(it.numel), kThreads, 0, stream>>>(it);                 \
        return CUDA_CHECK_LAUNCH("gelu_tanh");
        WC_FLOATING_DTYPES(WC_GELU_CASE)
#undef WC_GELU_CASE
    default:
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "\"gelu_tanh\" not implemented for '%s' on cuda",
                              weft_dtype_torch_name(call->in[0]->dtype));
    }
}

static int gelu_backward_op(const struct weft_op_call *call)
{
    if (weft_check_gelu_backward(call) != 0)
        return weft_error_code();
    int approximate = (int)call->ints[0];
    const weft_tensor *ops[3] = {call->out[0], call->in[0], call->in[1]};
    weft_iter it;
    cudaStream_t stream = nullptr;
    int rc = begin(3, ops, &it, &stream);
    if (rc != 0)
        return rc < 0 ? rc : 0;
    switch (call->in[0]->dtype) {
#define WC_GELU_CASE(E, D)                                                                    \
    case E:                                                                                   \
        gelu_backward_kernel<D><<<grid_for(it.numel), kThreads, 0, stream>>>(it, approximate == 1); \
        return CUDA_CHECK_LAUNCH("gelu_backward");
        WC_FLOATING_DTYPES(WC_GELU_CASE)
#undef WC_GELU_CASE
    default:
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED,
                              "\"gelu_backward\" not implemented for '%s' on cuda",
                              weft_dtype_torch_name(call->in[0]->dtype));
    }
}

static int add_bias_gelu_op(const struct weft_op_call *call)
{
    weft_tensor *h = call->out[0], *y = call->nout > 1 ? call->out[1] : nullptr;
    const weft_tensor *b = call->in[0];
    int approximate = (int)call->ints[0];
    if (weft_check_add_bias_gelu(call) != 0)
        return weft_error_code();
    int64_t n = weft_tensor_numel(h), N = h->shape[1];
    if (n == 0)
        return 0;
    int dev = h->device.index;
    if (cuda_set_device(dev) != 0)
        return weft_error_code();
    cudaStream_t stream = cuda_current_stream(dev);
    switch (h->dtype) {
#define WC_GELU_CASE(E, D)                                                                    \
    case E:                                                                                   \
        add_bias_gelu_kernel<D><<<grid_for(n), kThreads, 0, stream>>>(                       \
            static_cast<D::S *>(weft_tensor_data(h)), static_cast<D::S *>(weft_tensor_data(y)), \
            static_cast<const D::S *>(weft_tensor_data(b)), n, N, approximate == 1);          \
        return CUDA_CHECK_LAUNCH("add_bias_gelu");
        WC_FLOATING_DTYPES(WC_GELU_CASE)
#undef WC_GELU_CASE
    default:
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED,
                              "\"add_bias_gelu\" not implemented for '%s' on cuda",
                              weft_dtype_torch_name(h->dtype));
    }
}

} // namespace

extern "C" const struct weft_kernel_entry cuda_activation_kernels[] = {
    {-1, WEFT_OP_ADD_BIAS_GELU_NAME, WEFT_DTYPES_FLOATING, add_bias_gelu_op},
    {-1, WEFT_OP_GELU_TANH_NAME, WEFT_DTYPES_FLOATING, gelu_tanh_op},
    {-1, WEFT_OP_GELU_BACKWARD_NAME, WEFT_DTYPES_FLOATING, gelu_backward_op},
    {0, nullptr, 0, nullptr},
};
