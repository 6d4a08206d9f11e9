/* plugins/cuda/kernels_divmod.cu: FLOOR_DIVIDE and REMAINDER (weft/kernel.h), the cpu
 * plugin's formulas (kernels_divmod.c), over the core's weft_iter. An integer divisor of
 * 0 cannot fail from a kernel: it gives 0 here (PyTorch's CUDA kernels give garbage). */
#include <math.h>

#include "cuda_dtypes.cuh"

namespace {

using namespace wc;

template <typename C> __device__ __forceinline__ C floor_divide(C a, C b)
{
    if constexpr (std::is_floating_point<C>::value) {
        if (b == 0)
            return a / b;
        C mod = fmod(a, b), div = (a - mod) / b;
        if (mod != 0 && (b < 0) != (mod < 0))
            div -= C(1);
        if (div == 0)
            return copysign(C(0), a / b);
        C f = floor(div);
        return div - f > C(0.5) ? f + C(1) : f;
    } else {
        if (b == 0)
            return 0;
        if (std::is_signed<C>::value && b == C(-1))
            return (C)(0 - (uint64_t)a);
        C q = a / b;
        if constexpr (std::is_signed<C>::value)
            return (a < 0) != (b < 0) && a % b != 0 ? (C)(q - 1) : q;
        return q;
    }
}

template <typename C> __device__ __forceinline__ C remainder(C a, C b)
{
    if constexpr (std::is_floating_point<C>::value) {
        C mod = fmod(a, b);
        return mod != 0 && (b < 0) != (mod < 0) ? mod + b : mod;
    } else {
        if (b == 0 || (std::is_signed<C>::value && b == C(-1)))
            return 0;
        C r = a % b;
        if constexpr (std::is_signed<C>::value)
            return r != 0 && (r < 0) != (b < 0) ? (C)(r + b) : r;
        return r;
    }
}

/* ops: out, a[, b]; b absent: the scalar. */
template <typename D, bool FLOOR>
__global__ void divmod_kernel(weft_iter it, bool has_b, typename D::C scalar)
{
    typedef typename D::S S;
    typedef typename D::C C;
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < it.numel; i += step) {
        int64_t off[3];
        iter_offsets<3>(it, i, off);
        C a = D::load(reinterpret_cast<const S *>(it.data[1] + off[1]));
        C b = has_b ? D::load(reinterpret_cast<const S *>(it.data[2] + off[2])) : scalar;
        D::store(reinterpret_cast<S *>(it.data[0] + off[0]),
                 FLOOR ? floor_divide<C>(a, b) : remainder<C>(a, b));
    }
}

template <typename D, bool FLOOR> static int run(const struct weft_op_call *call)
{
    weft_tensor *out = call->out[0];
    bool has_b = call->in[1] != NULL;
    const weft_tensor *ops[3] = {out, call->in[0], call->in[1]};
    struct weft_iter it;
    memset(&it, 0, sizeof it); /* an absent operand reads as offset 0 */
    if (weft_iter_init(&it, has_b ? 3 : 2, ops) != 0)
        return weft_error_code();
    int dev = out->device.index;
    if (cuda_set_device(dev) != 0)
        return weft_error_code();
    divmod_kernel<D, FLOOR><<<grid_for(it.numel), kThreads, 0, cuda_current_stream(dev)>>>(
        it, has_b, scalar_as<typename D::C>(call->scalar[0]));
    return CUDA_CHECK_LAUNCH(FLOOR ? "floor_divide" : "remainder");
}

template <bool FLOOR> static int divmod_op(const struct weft_op_call *call)
{
    if (weft_tensor_numel(call->out[0]) == 0)
        return 0;
    switch (call->in[0]->dtype) {
#define WC_DIVMOD_CASE(E, D)                                                                  \
    case E:                                                                                   \
        return run<D, FLOOR>(call);
        WC_INTEGRAL_DTYPES(WC_DIVMOD_CASE)
        WC_FLOATING_DTYPES(WC_DIVMOD_CASE)
#undef WC_DIVMOD_CASE
    default:
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "\"%s\" not implemented for '%s' on cuda",
                              weft_op_name(call->op), weft_dtype_torch_name(call->in[0]->dtype));
    }
}

} // namespace

extern "C" const struct weft_kernel_entry cuda_divmod_kernels[] = {
    {-1, WEFT_OP_FLOOR_DIVIDE_NAME, WEFT_DTYPES_INTEGRAL | WEFT_DTYPES_FLOATING, divmod_op<true>},
    {-1, WEFT_OP_REMAINDER_NAME, WEFT_DTYPES_INTEGRAL | WEFT_DTYPES_FLOATING, divmod_op<false>},
    {0, nullptr, 0, nullptr},
};
