/* plugins/cuda/kernels_where_clamp.cu: WHERE and CLAMP (kernel.h has the contracts; the
 * values are the cpu plugin's, kernels_binary.c).
 *
 * Both walk their operands with the core's weft_iter (dims coalesced, byte strides), each
 * thread turning its linear index into offsets with wc::iter_offsets. WHERE only selects
 * values, so it is written per element size; CLAMP compares, so per dtype. */
#include <math.h>

#include "cuda_dtypes.cuh"

namespace {

using namespace wc;

static int no_kernel(const struct weft_op_call *call, enum weft_dtype dt)
{
    return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "\"%s\" not implemented for '%s' on cuda",
                          weft_op_name(call->op), weft_dtype_torch_name(dt));
}


/* The storage bits of a scalar in dtype D (host side, as the cpu's store_<name>). */
template <typename D> static uint64_t scalar_bits(double v)
{
    typename D::S s;
    typename D::C c = scalar_as<typename D::C>(v);
    if constexpr (std::is_same<D, Bool>::value)
        s = c ? 1 : 0;
    else if constexpr (std::is_same<D, Half>::value)
        s = weft_float_to_f16(c);
    else if constexpr (std::is_same<D, BFloat16>::value)
        s = weft_float_to_bf16(c);
    else
        s = c;
    uint64_t bits = 0;
    memcpy(&bits, &s, sizeof s);
    return bits;
}

/* ---- WHERE: operands out, cond, then in[1] and in[2] when they are tensors --------------- */

template <typename T>
__global__ void where_kernel(weft_iter it, bool has_a, bool has_b, T scalar_a, T scalar_b)
{
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < it.numel; i += step) {
        int64_t off[4];
        iter_offsets<4>(it, i, off);
        bool cond = *reinterpret_cast<const uint8_t *>(it.data[1] + off[1]) != 0;
        int k = 2;
        T a = scalar_a, b = scalar_b;
        if (has_a) {
            a = *reinterpret_cast<const T *>(it.data[k] + off[k]);
            k++;
        }
        if (has_b)
            b = *reinterpret_cast<const T *>(it.data[k] + off[k]);
        *reinterpret_cast<T *>(it.data[0] + off[0]) = cond ? a : b;
    }
}

template <typename T>
static int launch_where(const weft_iter &it, bool has_a, bool has_b, uint64_t a, uint64_t b,
                        cudaStream_t stream)
{
    T sa, sb;
    memcpy(&sa, &a, sizeof sa);
    memcpy(&sb, &b, sizeof sb);
    where_kernel<T><<<grid_for(it.numel), kThreads, 0, stream>>>(it, has_a, has_b, sa, sb);
    return CUDA_CHECK_LAUNCH("where");
}

static int where_op(const struct weft_op_call *call)
{
    weft_tensor *out = call->out[0];
    if (weft_tensor_numel(out) == 0)
        return 0;
    bool has_a = call->in[1] != NULL, has_b = call->in[2] != NULL;
    const weft_tensor *ops[4] = {out, call->in[0], NULL, NULL};
    int nops = 2;
    if (has_a)
        ops[nops++] = call->in[1];
    if (has_b)
        ops[nops++] = call->in[2];
    uint64_t a = 0, b = 0;
    switch (out->dtype) {
#define WC_BITS_CASE(E, D)                                                                    \
    case E:                                                                                   \
        a = scalar_bits<D>(call->scalar[0]);                                                  \
        b = scalar_bits<D>(call->scalar[1]);                                                  \
        break;
        WC_ALL_DTYPES(WC_BITS_CASE)
#undef WC_BITS_CASE
    default:
        return no_kernel(call, out->dtype);
    }
    struct weft_iter it;
    memset(&it, 0, sizeof it); /* unused operands read as offset 0 */
    if (weft_iter_init(&it, nops, ops) != 0)
        return weft_error_code();
    int dev = out->device.index;
    if (cuda_set_device(dev) != 0)
        return weft_error_code();
    cudaStream_t stream = cuda_current_stream(dev);
    switch (weft_tensor_itemsize(out)) {
    case 1: return launch_where<uint8_t>(it, has_a, has_b, a, b, stream);
    case 2: return launch_where<uint16_t>(it, has_a, has_b, a, b, stream);
    case 4: return launch_where<uint32_t>(it, has_a, has_b, a, b, stream);
    case 8: return launch_where<uint64_t>(it, has_a, has_b, a, b, stream);
    default: return no_kernel(call, out->dtype);
    }
}

/* ---- CLAMP: min(max(x, lo), hi) with absent bounds skipped; NaN stays NaN ---------------- */

template <typename D>
__global__ void clamp_kernel(weft_iter it, typename D::C lo, typename D::C hi, bool has_lo,
                             bool has_hi)
{
    typedef typename D::S S;
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < it.numel; i += step) {
        int64_t off[2];
        iter_offsets<2>(it, i, off);
        typename D::C v = D::load(reinterpret_cast<const S *>(it.data[1] + off[1]));
        v = has_lo && v < lo ? lo : v;
        D::store(reinterpret_cast<S *>(it.data[0] + off[0]), has_hi && v > hi ? hi : v);
    }
}

template <typename D> static int run_clamp(const struct weft_op_call *call)
{
    typedef typename D::C C;
    weft_tensor *out = call->out[0];
    const weft_tensor *ops[2] = {out, call->in[0]};
    struct weft_iter it;
    if (weft_iter_init(&it, 2, ops) != 0)
        return weft_error_code();
    int dev = out->device.index;
    if (cuda_set_device(dev) != 0)
        return weft_error_code();
    clamp_kernel<D><<<grid_for(it.numel), kThreads, 0, cuda_current_stream(dev)>>>(
        it, scalar_as<C>(call->scalar[0]), scalar_as<C>(call->scalar[1]), call->ints[0] != 0,
        call->ints[1] != 0);
    return CUDA_CHECK_LAUNCH("clamp");
}

static int clamp_op(const struct weft_op_call *call)
{
    if (weft_tensor_numel(call->out[0]) == 0)
        return 0;
    switch (call->in[0]->dtype) {
#define WC_CLAMP_CASE(E, D)                                                                   \
    case E:                                                                                   \
        return run_clamp<D>(call);
        WC_INTEGRAL_DTYPES(WC_CLAMP_CASE)
        WC_FLOATING_DTYPES(WC_CLAMP_CASE)
#undef WC_CLAMP_CASE
    default:
        return no_kernel(call, call->in[0]->dtype);
    }
}

} // namespace

extern "C" const struct weft_kernel_entry cuda_where_clamp_kernels[] = {
    {WEFT_OP_WHERE, nullptr, WEFT_DTYPE_BIT(WEFT_BOOL), where_op},
    {WEFT_OP_CLAMP, nullptr, WEFT_DTYPES_INTEGRAL | WEFT_DTYPES_FLOATING, clamp_op},
    {0, nullptr, 0, nullptr},
};
