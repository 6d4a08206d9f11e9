/* plugins/cuda/kernels_fill.cu: FILL, ARANGE, LINSPACE and the random ops
 * (RAND_UNIFORM, RAND_NORMAL, RANDINT); kernel.h and weft/philox.h have the contracts.
 *
 * Values are computed as the cpu plugin computes them (kernels_fill.c,
 * kernels_random.c), in the same order and precision, so both devices agree: products
 * and sums in double are written with __dmul_rn/__dadd_rn, which nvcc cannot fuse into
 * a multiply-add that the cpu does not do. Uniform and randint are bit-identical to the
 * cpu; normal goes through the device's log/sqrt/sin/cos, which may differ in the last
 * bits. */
#include <math.h>
#include <string.h>

#include <weft/philox.h>

#include "cuda_dtypes.cuh"

namespace {

using namespace wc;

/* Element i of a tensor in row-major order -> its element offset (any strides). */
struct Layout {
    int ndim;
    int64_t shape[WEFT_MAX_DIMS];
    int64_t stride[WEFT_MAX_DIMS];
};

static Layout layout_of(const weft_tensor *t)
{
    Layout l{};
    l.ndim = t->ndim;
    for (int d = 0; d < t->ndim; d++) {
        l.shape[d] = t->shape[d];
        l.stride[d] = t->stride[d];
    }
    return l;
}

__device__ __forceinline__ int64_t element_offset(const Layout &l, int64_t i)
{
    int64_t off = 0;
    for (int d = l.ndim - 1; d >= 0; d--) {
        off += (i % l.shape[d]) * l.stride[d];
        i /= l.shape[d];
    }
    return off;
}

/* Stores a double as dtype D the way the cpu plugin's store_<name> does for fill and
 * sequences: integers through int64, bool "!= 0", floating types a cast. */
template <typename D> __device__ __forceinline__ void store_double(typename D::S *p, double v)
{
    D::store(p, convert<D>(v));
}

/* ---- FILL: the value converted once on the host, then written as raw bytes -------------- */

template <typename T> __global__ void fill_kernel(T *base, Layout l, int64_t n, T value)
{
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step)
        base[element_offset(l, i)] = value;
}

template <typename T> __global__ void fill_contiguous_kernel(T *base, int64_t n, T value)
{
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step)
        base[i] = value;
}

/* Host-side conversion of the fill value, with the cpu's rules. */
template <typename D> static void host_bits(double v, uint64_t *bits)
{
    typedef typename D::S S;
    S s;
    if constexpr (std::is_same<D, Bool>::value)
        s = v != 0;
    else if constexpr (std::is_same<D, Half>::value)
        s = weft_float_to_f16((float)v);
    else if constexpr (std::is_same<D, BFloat16>::value)
        s = weft_float_to_bf16((float)v);
    else if constexpr (std::is_floating_point<S>::value)
        s = (S)v;
    else
        s = (S)(int64_t)v;
    *bits = 0;
    memcpy(bits, &s, sizeof s);
}

template <typename T>
static int launch_fill(weft_tensor *out, uint64_t bits, cudaStream_t stream)
{
    T value;
    memcpy(&value, &bits, sizeof value);
    int64_t n = weft_tensor_numel(out);
    T *base = static_cast<T *>(weft_tensor_data(out));
    if (weft_tensor_is_contiguous(out))
        fill_contiguous_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(base, n, value);
    else
        fill_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(base, layout_of(out), n, value);
    return CUDA_CHECK_LAUNCH("fill");
}

static int fill_op(const struct weft_op_call *call)
{
    weft_tensor *out = call->out[0];
    int64_t n = weft_tensor_numel(out);
    if (n == 0)
        return 0;
    int dev = out->device.index;
    if (cuda_set_device(dev) != 0)
        return weft_error_code();
    cudaStream_t stream = cuda_current_stream(dev);
    uint64_t bits = 0;
    switch (out->dtype) {
#define WC_BITS_CASE(E, D)                                                                    \
    case E:                                                                                   \
        host_bits<D>(call->scalar[0], &bits);                                                 \
        break;
        WC_ALL_DTYPES(WC_BITS_CASE)
#undef WC_BITS_CASE
    default:
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "fill: unsupported dtype");
    }
    size_t size = weft_tensor_itemsize(out);
    if (bits == 0 && weft_tensor_is_contiguous(out))
        return CUDA_CHECK(cudaMemsetAsync(weft_tensor_data(out), 0, (size_t)n * size, stream));
    switch (size) {
    case 1: return launch_fill<uint8_t>(out, bits, stream);
    case 2: return launch_fill<uint16_t>(out, bits, stream);
    case 4: return launch_fill<uint32_t>(out, bits, stream);
    case 8: return launch_fill<uint64_t>(out, bits, stream);
    default: return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "fill: %zu-byte elements", size);
    }
}

/* ---- ARANGE and LINSPACE: 1-D, element i computed in double ------------------------------ */

struct Sequence {
    double start, end, step;
    int64_t n;
    bool symmetric; /* linspace: the second half counts back from end */
};

__device__ __forceinline__ double sequence_value(const Sequence &s, int64_t i)
{
    if (s.symmetric && i >= s.n / 2)
        return __dadd_rn(s.end, -__dmul_rn(s.step, (double)(s.n - 1 - i)));
    return __dadd_rn(s.start, __dmul_rn(s.step, (double)i));
}

template <typename D>
__global__ void sequence_kernel(typename D::S *base, int64_t stride, Sequence s)
{
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < s.n; i += step)
        store_double<D>(base + i * stride, sequence_value(s, i));
}

static int run_sequence(weft_tensor *out, Sequence s, const char *op)
{
    if (out->ndim != 1)
        return weft_error_set(WEFT_ERR_RUNTIME, "%s: expected a 1-D output, got %d dims", op,
                              out->ndim);
    s.n = out->shape[0];
    if (s.n == 0)
        return 0;
    int dev = out->device.index;
    if (cuda_set_device(dev) != 0)
        return weft_error_code();
    cudaStream_t stream = cuda_current_stream(dev);
    switch (out->dtype) {
#define WC_SEQ_CASE(E, D)                                                                     \
    case E:                                                                                   \
        sequence_kernel<D><<<grid_for(s.n), kThreads, 0, stream>>>(                           \
            static_cast<typename D::S *>(weft_tensor_data(out)), out->stride[0], s);          \
        break;
        WC_ALL_DTYPES(WC_SEQ_CASE)
#undef WC_SEQ_CASE
    default:
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "%s: unsupported dtype", op);
    }
    return CUDA_CHECK_LAUNCH(op);
}

static int arange_op(const struct weft_op_call *call)
{
    Sequence s{call->scalar[0], 0, call->scalar[1], 0, false};
    return run_sequence(call->out[0], s, "arange");
}

static int linspace_op(const struct weft_op_call *call)
{
    int64_t n = call->ints[0];
    double start = call->scalar[0], end = call->scalar[1];
    Sequence s{start, end, n > 1 ? (end - start) / (double)(n - 1) : 0, 0, n > 1};
    return run_sequence(call->out[0], s, "linspace");
}

/* ---- random: element i from Philox block offset + i/4 (i/2 for randint) ----------------- */

struct RandomParams {
    uint64_t seed, offset;
    double p0, p1; /* low/high or mean/std */
    int64_t low;   /* randint */
    uint64_t range;
};

template <typename D> __device__ __forceinline__ double load_double(const typename D::S *p)
{
    return (double)D::load(p);
}

/* uniform: u * (high - low) + low in double without fusing, rounded to the dtype; a value
 * that rounds up to high becomes low. */
template <typename D>
__global__ void uniform_kernel(typename D::S *base, Layout l, int64_t n, RandomParams r)
{
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        double u = std::is_same<typename D::S, double>::value
                       ? weft_philox_uniform_f64(r.seed, r.offset, (uint64_t)i)
                       : (double)weft_philox_uniform_f32(r.seed, r.offset, (uint64_t)i);
        double v = __dadd_rn(__dmul_rn(u, __dadd_rn(r.p1, -r.p0)), r.p0);
        typename D::S *p = base + element_offset(l, i);
        D::store(p, (typename D::C)v);
        if (load_double<D>(p) >= r.p1)
            D::store(p, (typename D::C)r.p0);
    }
}

template <typename D>
__global__ void normal_kernel(typename D::S *base, Layout l, int64_t n, RandomParams r)
{
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        double z = weft_philox_normal(r.seed, r.offset, (uint64_t)i);
        double v = __dadd_rn(__dmul_rn(z, r.p1), r.p0);
        D::store(base + element_offset(l, i), (typename D::C)v);
    }
}

/* randint: low + u64 % (high - low) in 64-bit integers, then cast (bool: != 0). */
template <typename D>
__global__ void randint_kernel(typename D::S *base, Layout l, int64_t n, RandomParams r)
{
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        uint64_t bits = weft_philox_u64(r.seed, r.offset, (uint64_t)i);
        int64_t v = (int64_t)((uint64_t)r.low + bits % r.range);
        typename D::S *p = base + element_offset(l, i);
        if constexpr (std::is_same<D, Bool>::value)
            D::store(p, v != 0);
        else
            D::store(p, (typename D::C)v);
    }
}

template <typename D>
static void launch_random(int op, weft_tensor *out, const RandomParams &r, cudaStream_t stream)
{
    int64_t n = weft_tensor_numel(out);
    auto *base = static_cast<typename D::S *>(weft_tensor_data(out));
    Layout l = layout_of(out);
    if (op == WEFT_OP_RANDINT) {
        randint_kernel<D><<<grid_for(n), kThreads, 0, stream>>>(base, l, n, r);
        return;
    }
    if constexpr (is_floating<D>::value) {
        if (op == WEFT_OP_RAND_UNIFORM)
            uniform_kernel<D><<<grid_for(n), kThreads, 0, stream>>>(base, l, n, r);
        else
            normal_kernel<D><<<grid_for(n), kThreads, 0, stream>>>(base, l, n, r);
    }
}

static int random_op(const struct weft_op_call *call)
{
    weft_tensor *out = call->out[0];
    if (call->op == WEFT_OP_RANDINT && call->ints[2] >= call->ints[3])
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "random_ expects 'from' to be less than 'to', but got from=%lld "
                              ">= to=%lld",
                              (long long)call->ints[2], (long long)call->ints[3]);
    if (weft_tensor_numel(out) == 0)
        return 0;
    int dev = out->device.index;
    if (cuda_set_device(dev) != 0)
        return weft_error_code();
    RandomParams r{(uint64_t)call->ints[0], (uint64_t)call->ints[1], call->scalar[0],
                   call->scalar[1], call->ints[2],
                   (uint64_t)call->ints[3] - (uint64_t)call->ints[2]};
    cudaStream_t stream = cuda_current_stream(dev);
    bool floating = weft_dtype_is_floating(out->dtype);
    if (call->op != WEFT_OP_RANDINT && !floating)
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "\"%s\" not implemented for '%s' on cuda",
                              weft_op_name(call->op), weft_dtype_torch_name(out->dtype));
    switch (out->dtype) {
#define WC_RANDOM_CASE(E, D)                                                                  \
    case E:                                                                                   \
        launch_random<D>(call->op, out, r, stream);                                           \
        break;
        WC_ALL_DTYPES(WC_RANDOM_CASE)
#undef WC_RANDOM_CASE
    default:
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "random: unsupported dtype");
    }
    return CUDA_CHECK_LAUNCH(weft_op_name(call->op));
}

} // namespace

extern "C" const struct weft_kernel_entry cuda_fill_kernels[] = {
    {WEFT_OP_FILL, nullptr, WEFT_DTYPES_ALL, fill_op},
    {WEFT_OP_ARANGE, nullptr, WEFT_DTYPES_ALL, arange_op},
    {WEFT_OP_LINSPACE, nullptr, WEFT_DTYPES_ALL, linspace_op},
    {WEFT_OP_RAND_UNIFORM, nullptr, WEFT_DTYPES_FLOATING, random_op},
    {WEFT_OP_RAND_NORMAL, nullptr, WEFT_DTYPES_FLOATING, random_op},
    {WEFT_OP_RANDINT, nullptr, WEFT_DTYPES_ALL, random_op},
    {0, nullptr, 0, nullptr},
};
