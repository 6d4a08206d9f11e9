/* plugins/cuda/kernels_elementwise.cu: the strided elementwise kernel and the ops on it:
 * COPY (any pair of dtypes), the unary ops and the binary ops (kernel.h has their
 * contracts; values follow the cpu plugin's expressions).
 *
 * One loop body (out = op(a, b) on compute-type values) per dtype and op family, two
 * launch shapes:
 *  - every operand contiguous and aligned: linear indexing, kVec elements per thread
 *    moved with one aligned vector load/store per operand;
 *  - otherwise: the core's weft_iter (dims coalesced, byte strides) passed by value, each
 *    thread turning its linear index into per-operand offsets. */
#include <math.h>

#include "cuda_dtypes.cuh"

namespace {

using namespace wc;

constexpr int kVec = 4;

template <typename T, int N> struct alignas(sizeof(T) * N) Vec {
    T v[N];
};

/* ---- the loop body: out = op(a, b) -------------------------------------------------------
 * DIn: the inputs' dtype (both inputs share it), DOut: the output's. NIN == 1: unary, or
 * binary with the right operand a scalar (held in the functor). */
template <typename DIn, typename DOut, int NIN, typename Op> struct Body {
    typedef typename DIn::S in_s;
    typedef typename DOut::S out_s;
    typedef typename DIn::C in_c;
    Op op;
    in_c scalar;

    __device__ __forceinline__ void operator()(out_s *o, const in_s *a, const in_s *b) const
    {
        in_c x = DIn::load(a);
        in_c y = scalar;
        if constexpr (NIN == 2)
            y = DIn::load(b);
        DOut::store(o, (typename DOut::C)op(x, y));
    }
};

/* Every operand contiguous (same linear index everywhere) and every pointer aligned to
 * VEC elements; the tail past the last whole vector goes element by element. */
template <int VEC, typename B>
__global__ void contiguous_kernel(typename B::out_s *o, const typename B::in_s *a,
                                  const typename B::in_s *b, int64_t n, B body)
{
    typedef typename B::in_s in_s;
    typedef typename B::out_s out_s;
    int64_t step = (int64_t)gridDim.x * blockDim.x * VEC;
    for (int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * VEC; i < n; i += step) {
        if (i + VEC <= n) {
            Vec<in_s, VEC> av = *reinterpret_cast<const Vec<in_s, VEC> *>(a + i), bv;
            if (b)
                bv = *reinterpret_cast<const Vec<in_s, VEC> *>(b + i);
            Vec<out_s, VEC> ov;
#pragma unroll
            for (int j = 0; j < VEC; j++)
                body(&ov.v[j], &av.v[j], b ? &bv.v[j] : nullptr);
            *reinterpret_cast<Vec<out_s, VEC> *>(o + i) = ov;
            continue;
        }
        for (int j = 0; j < VEC && i + j < n; j++)
            body(o + i + j, a + i + j, b ? b + i + j : nullptr);
    }
}

template <int NOPS, typename B> __global__ void strided_kernel(weft_iter it, B body)
{
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < it.numel; i += step) {
        int64_t off[NOPS];
        iter_offsets<NOPS>(it, i, off);
        const typename B::in_s *b = nullptr;
        if constexpr (NOPS == 3)
            b = reinterpret_cast<const typename B::in_s *>(it.data[2] + off[2]);
        body(reinterpret_cast<typename B::out_s *>(it.data[0] + off[0]),
             reinterpret_cast<const typename B::in_s *>(it.data[1] + off[1]), b);
    }
}

static bool aligned(const void *p, size_t bytes)
{
    return p == nullptr || (uintptr_t)p % bytes == 0;
}

/* Runs body over out = op(in0[, in1]) on the current stream of out's device. */
template <int NIN, typename B>
static int launch(const struct weft_op_call *call, const weft_tensor *in0, const weft_tensor *in1,
                  B body, const char *what)
{
    weft_tensor *out = call->out[0];
    int64_t n = weft_tensor_numel(out);
    if (n == 0)
        return 0;
    int dev = out->device.index;
    if (cuda_set_device(dev) != 0)
        return weft_error_code();
    cudaStream_t stream = cuda_current_stream(dev);
    const weft_tensor *ops[3] = {out, in0, in1};
    bool contiguous = true;
    for (int k = 0; k <= NIN; k++)
        contiguous = contiguous && weft_tensor_is_contiguous(ops[k]);
    if (contiguous) {
        auto *o = static_cast<typename B::out_s *>(weft_tensor_data(out));
        auto *a = static_cast<const typename B::in_s *>(weft_tensor_data(in0));
        auto *b = NIN == 2 ? static_cast<const typename B::in_s *>(weft_tensor_data(in1)) : nullptr;
        /* Misaligned views (an odd offset) take the strided path: after coalescing it is
         * one dim, so little is lost. */
        contiguous = aligned(o, sizeof *o * kVec) && aligned(a, sizeof *a * kVec) &&
                     aligned(b, sizeof *a * kVec);
        if (contiguous) {
            contiguous_kernel<kVec, B>
                <<<grid_for((n + kVec - 1) / kVec), kThreads, 0, stream>>>(o, a, b, n, body);
            return CUDA_CHECK_LAUNCH(what);
        }
    }
    struct weft_iter it;
    if (weft_iter_init(&it, NIN + 1, ops) != 0)
        return weft_error_code();
    strided_kernel<NIN + 1, B><<<grid_for(n), kThreads, 0, stream>>>(it, body);
    return CUDA_CHECK_LAUNCH(what);
}


/* NIN inputs of dtype DIn into DOut through op. */
template <typename DIn, typename DOut, int NIN, typename Op>
static int run(const struct weft_op_call *call, Op op, const char *what)
{
    Body<DIn, DOut, NIN, Op> body{op, scalar_as<typename DIn::C>(call->scalar[0])};
    return launch<NIN>(call, call->in[0], NIN == 2 ? call->in[1] : nullptr, body, what);
}

static int no_kernel(const struct weft_op_call *call, enum weft_dtype dt)
{
    return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "\"%s\" not implemented for '%s' on cuda",
                          weft_op_name(call->op), weft_dtype_torch_name(dt));
}

/* ---- math for float and double ----------------------------------------------------------- */

#define WC_MATH1(fn)                                                                          \
    __device__ __forceinline__ float m_##fn(float x) { return fn##f(x); }                     \
    __device__ __forceinline__ double m_##fn(double x) { return fn(x); }
WC_MATH1(exp)
WC_MATH1(expm1)
WC_MATH1(log)
WC_MATH1(log1p)
WC_MATH1(sqrt)
WC_MATH1(sin)
WC_MATH1(cos)
WC_MATH1(tanh)
WC_MATH1(erf)
WC_MATH1(floor)
WC_MATH1(ceil)
WC_MATH1(nearbyint)
WC_MATH1(trunc)
WC_MATH1(fabs)
__device__ __forceinline__ float m_pow(float x, float y) { return powf(x, y); }
__device__ __forceinline__ double m_pow(double x, double y) { return pow(x, y); }

/* Integer power by squaring (wrapping), with torch's answers for negative exponents. */
__device__ __forceinline__ int64_t int_pow(int64_t base, int64_t exp)
{
    if (exp < 0)
        return base == 1 ? 1 : base == -1 ? ((exp & 1) ? -1 : 1) : 0;
    uint64_t result = 1, b = (uint64_t)base;
    for (; exp; exp >>= 1) {
        if (exp & 1)
            result *= b;
        b *= b;
    }
    return (int64_t)result;
}

/* Unsigned types compare against 0 on purpose: one expression for every integer type. */
#pragma nv_diag_suppress 186

/* ---- the ops --------------------------------------------------------------------------------
 * One functor per op family and result kind; the op is a member, chosen by a switch that
 * is the same for every thread (no divergence). Instantiating a kernel per op and dtype
 * would multiply the build time by the number of ops for no measurable gain on these
 * memory-bound loops. The expressions are the cpu plugin's. */

constexpr double kSqrt1_2 = 0.70710678118654752440;
constexpr double kPi = 3.14159265358979323846;

struct UnaryFloating {
    int op;
    template <typename C> __device__ __forceinline__ C operator()(C a, C) const
    {
        switch (op) {
        case WEFT_OP_EXP: return m_exp(a);
        case WEFT_OP_EXPM1: return m_expm1(a);
        case WEFT_OP_LOG: return m_log(a);
        case WEFT_OP_LOG1P: return m_log1p(a);
        case WEFT_OP_SQRT: return m_sqrt(a);
        case WEFT_OP_RSQRT: return (C)1 / m_sqrt(a);
        case WEFT_OP_RECIPROCAL: return (C)1 / a;
        case WEFT_OP_SIN: return m_sin(a);
        case WEFT_OP_COS: return m_cos(a);
        case WEFT_OP_TANH: return m_tanh(a);
        case WEFT_OP_SIGMOID: return (C)1 / ((C)1 + m_exp(-a));
        case WEFT_OP_GELU: return (C)0.5 * a * ((C)1 + m_erf(a * (C)kSqrt1_2));
        case WEFT_OP_SILU: return a / ((C)1 + m_exp(-a));
        case WEFT_OP_ERF: return m_erf(a);
        case WEFT_OP_FLOOR: return m_floor(a);
        case WEFT_OP_CEIL: return m_ceil(a);
        case WEFT_OP_ROUND: return m_nearbyint(a); /* half to even, as torch */
        case WEFT_OP_TRUNC: return m_trunc(a);
        case WEFT_OP_SINC: return a == (C)0 ? (C)1 : m_sin((C)kPi * a) / ((C)kPi * a);
        case WEFT_OP_NEG: return -a;
        case WEFT_OP_ABS: return m_fabs(a);
        case WEFT_OP_SIGN: return (C)((a > (C)0) - (a < (C)0)); /* sign(nan) = 0 */
        case WEFT_OP_RELU: return a < (C)0 ? (C)0 : a;           /* keeps nan */
        default: return a;
        }
    }
};

/* Two's-complement wrap-around without signed overflow. */
struct UnaryIntegral {
    int op;
    template <typename C> __device__ __forceinline__ C operator()(C a, C) const
    {
        switch (op) {
        case WEFT_OP_NEG: return (C)(0 - (uint64_t)a);
        case WEFT_OP_ABS: return a < (C)0 ? (C)(0 - (uint64_t)a) : a;
        case WEFT_OP_SIGN: return (C)((a > (C)0) - (a < (C)0));
        case WEFT_OP_RELU: return a < (C)0 ? (C)0 : a;
        default: return a;
        }
    }
};

/* sign of a bool is itself. */
struct UnaryBool {
    int op;
    __device__ __forceinline__ bool operator()(bool a, bool) const { return a; }
};

struct LogicalNot {
    int op;
    template <typename C> __device__ __forceinline__ bool operator()(C a, C) const { return !a; }
};

struct BinaryFloating {
    int op;
    template <typename C> __device__ __forceinline__ C operator()(C a, C b) const
    {
        switch (op) {
        case WEFT_OP_ADD: return a + b;
        case WEFT_OP_SUB: return a - b;
        case WEFT_OP_MUL: return a * b;
        case WEFT_OP_DIV: return a / b;
        case WEFT_OP_POW: return m_pow(a, b);
        case WEFT_OP_MAXIMUM: return (a > b || a != a) ? a : b; /* NaN from either side */
        case WEFT_OP_MINIMUM: return (a < b || a != a) ? a : b;
        default: return a;
        }
    }
};

struct BinaryIntegral {
    int op;
    template <typename C> __device__ __forceinline__ C operator()(C a, C b) const
    {
        switch (op) {
        case WEFT_OP_ADD: return (C)((uint64_t)a + (uint64_t)b);
        case WEFT_OP_SUB: return (C)((uint64_t)a - (uint64_t)b);
        case WEFT_OP_MUL: return (C)((uint64_t)a * (uint64_t)b);
        case WEFT_OP_POW: return (C)int_pow((int64_t)a, (int64_t)b);
        case WEFT_OP_MAXIMUM: return a > b ? a : b;
        case WEFT_OP_MINIMUM: return a < b ? a : b;
        default: return a;
        }
    }
};

/* bool: add and maximum are or, mul and minimum are and (torch). */
struct BinaryBool {
    int op;
    __device__ __forceinline__ bool operator()(bool a, bool b) const
    {
        return op == WEFT_OP_ADD || op == WEFT_OP_MAXIMUM ? (a || b) : (a && b);
    }
};

/* Comparisons and logical ops: every dtype, bool result. */
struct Compare {
    int op;
    template <typename C> __device__ __forceinline__ bool operator()(C a, C b) const
    {
        switch (op) {
        case WEFT_OP_EQ: return a == b;
        case WEFT_OP_NE: return a != b;
        case WEFT_OP_LT: return a < b;
        case WEFT_OP_LE: return a <= b;
        case WEFT_OP_GT: return a > b;
        case WEFT_OP_GE: return a >= b;
        case WEFT_OP_LOGICAL_AND: return a && b;
        case WEFT_OP_LOGICAL_OR: return a || b;
        default: return false;
        }
    }
};

/* ---- kernel entries: dispatch on in[0]'s dtype within a family --------------------------- */

template <typename D, bool BOOL_OUT> using OutOf = std::conditional_t<BOOL_OUT, Bool, D>;

/* Unary ops read one tensor; binary ones two, or one and scalar[0] (in[1] == NULL). */
template <typename D, bool BOOL_OUT, bool BINARY, typename Op>
static int run_family(const struct weft_op_call *call)
{
    const char *what = weft_op_name(call->op);
    if (BINARY && call->nin >= 2 && call->in[1])
        return run<D, OutOf<D, BOOL_OUT>, 2, Op>(call, Op{call->op}, what);
    return run<D, OutOf<D, BOOL_OUT>, 1, Op>(call, Op{call->op}, what);
}

#define WC_CASE(E, D)                                                                         \
    case E:                                                                                   \
        return run_family<D, BOOL_OUT, BINARY, Op>(call);

template <typename Op, bool BOOL_OUT, bool BINARY>
static int floating_kernel(const struct weft_op_call *call)
{
    switch (call->in[0]->dtype) {
        WC_FLOATING_DTYPES(WC_CASE)
    default:
        return no_kernel(call, call->in[0]->dtype);
    }
}

template <typename Op, bool BOOL_OUT, bool BINARY>
static int integral_kernel(const struct weft_op_call *call)
{
    switch (call->in[0]->dtype) {
        WC_INTEGRAL_DTYPES(WC_CASE)
    default:
        return no_kernel(call, call->in[0]->dtype);
    }
}

template <typename Op, bool BOOL_OUT, bool BINARY>
static int bool_kernel(const struct weft_op_call *call)
{
    switch (call->in[0]->dtype) {
        WC_BOOL_DTYPES(WC_CASE)
    default:
        return no_kernel(call, call->in[0]->dtype);
    }
}

template <typename Op, bool BOOL_OUT, bool BINARY>
static int any_kernel(const struct weft_op_call *call)
{
    switch (call->in[0]->dtype) {
        WC_ALL_DTYPES(WC_CASE)
    default:
        return no_kernel(call, call->in[0]->dtype);
    }
}
#undef WC_CASE

/* ---- COPY: any pair of dtypes --------------------------------------------------------------
 * Instantiated per source dtype; the destination dtype is a switch (uniform), so 10
 * kernels rather than 100. */

template <typename DIn>
__device__ __forceinline__ void store_converted(int to, char *o, typename DIn::C v)
{
    switch (to) {
#define WC_STORE_CASE(E, D)                                                                   \
    case E:                                                                                   \
        D::store(reinterpret_cast<typename D::S *>(o), convert<D>(v));                        \
        return;
        WC_ALL_DTYPES(WC_STORE_CASE)
#undef WC_STORE_CASE
    default:
        return;
    }
}

template <typename DIn>
__global__ void convert_contiguous_kernel(char *o, const typename DIn::S *a, int64_t n, int to,
                                          int64_t out_size)
{
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step)
        store_converted<DIn>(to, o + i * out_size, DIn::load(a + i));
}

template <typename DIn> __global__ void convert_strided_kernel(weft_iter it, int to)
{
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < it.numel; i += step) {
        int64_t off[2];
        iter_offsets<2>(it, i, off);
        store_converted<DIn>(
            to, it.data[0] + off[0],
            DIn::load(reinterpret_cast<const typename DIn::S *>(it.data[1] + off[1])));
    }
}

template <typename DIn>
static int convert_from(const struct weft_op_call *call, cudaStream_t stream)
{
    const weft_tensor *src = call->in[0];
    weft_tensor *dst = call->out[0];
    int64_t n = weft_tensor_numel(dst);
    if (weft_tensor_is_contiguous(src) && weft_tensor_is_contiguous(dst)) {
        convert_contiguous_kernel<DIn><<<grid_for(n), kThreads, 0, stream>>>(
            static_cast<char *>(weft_tensor_data(dst)),
            static_cast<const typename DIn::S *>(weft_tensor_data(src)), n, (int)dst->dtype,
            (int64_t)weft_tensor_itemsize(dst));
        return CUDA_CHECK_LAUNCH("copy");
    }
    const weft_tensor *ops[2] = {dst, src};
    struct weft_iter it;
    if (weft_iter_init(&it, 2, ops) != 0)
        return weft_error_code();
    convert_strided_kernel<DIn><<<grid_for(n), kThreads, 0, stream>>>(it, (int)dst->dtype);
    return CUDA_CHECK_LAUNCH("copy");
}

/* Same dtype, some side strided: moves elements by size. */
template <typename T> struct Move {
    int op;
    __device__ __forceinline__ T operator()(T a, T) const { return a; }
};

static int move(const struct weft_op_call *call)
{
    const char *what = "copy";
    switch (weft_tensor_itemsize(call->out[0])) {
    case 1: return run<Plain<uint8_t>, Plain<uint8_t>, 1, Move<uint8_t>>(call, {0}, what);
    case 2: return run<Plain<uint16_t>, Plain<uint16_t>, 1, Move<uint16_t>>(call, {0}, what);
    case 4: return run<Plain<uint32_t>, Plain<uint32_t>, 1, Move<uint32_t>>(call, {0}, what);
    case 8: return run<Plain<uint64_t>, Plain<uint64_t>, 1, Move<uint64_t>>(call, {0}, what);
    default: return no_kernel(call, call->out[0]->dtype);
    }
}

static int copy_kernel(const struct weft_op_call *call)
{
    const weft_tensor *src = call->in[0];
    weft_tensor *dst = call->out[0];
    int64_t n = weft_tensor_numel(dst);
    if (n == 0)
        return 0;
    int dev = dst->device.index;
    if (cuda_set_device(dev) != 0)
        return weft_error_code();
    cudaStream_t stream = cuda_current_stream(dev);
    if (src->dtype == dst->dtype) {
        /* Both contiguous: one memcpy on the stream. */
        if (weft_tensor_is_contiguous(src) && weft_tensor_is_contiguous(dst))
            return CUDA_CHECK(cudaMemcpyAsync(weft_tensor_data(dst), weft_tensor_data(src),
                                              (size_t)n * weft_tensor_itemsize(dst),
                                              cudaMemcpyDeviceToDevice, stream));
        return move(call);
    }
    switch (src->dtype) {
#define WC_SRC_CASE(E, D)                                                                     \
    case E:                                                                                   \
        return convert_from<D>(call, stream);
        WC_ALL_DTYPES(WC_SRC_CASE)
#undef WC_SRC_CASE
    default:
        return no_kernel(call, src->dtype);
    }
}

/* ---- registration --------------------------------------------------------------------------- */

constexpr uint32_t kFloating = WEFT_DTYPES_FLOATING;
constexpr uint32_t kIntegral = WEFT_DTYPES_INTEGRAL;
constexpr uint32_t kBool = WEFT_DTYPE_BIT(WEFT_BOOL);
constexpr uint32_t kAll = WEFT_DTYPES_ALL;

/* Which family serves which (op, dtypes): PyTorch's (and the cpu plugin's) coverage. */
#define WC_UF(ID) {WEFT_OP_##ID, nullptr, kFloating, floating_kernel<UnaryFloating, false, false>}
#define WC_UI(ID) {WEFT_OP_##ID, nullptr, kIntegral, integral_kernel<UnaryIntegral, false, false>}
#define WC_BF(ID) {WEFT_OP_##ID, nullptr, kFloating, floating_kernel<BinaryFloating, false, true>}
#define WC_BI(ID) {WEFT_OP_##ID, nullptr, kIntegral, integral_kernel<BinaryIntegral, false, true>}
#define WC_BB(ID) {WEFT_OP_##ID, nullptr, kBool, bool_kernel<BinaryBool, false, true>}
#define WC_CMP(ID) {WEFT_OP_##ID, nullptr, kAll, any_kernel<Compare, true, true>}

} // namespace

extern "C" const struct weft_kernel_entry cuda_elementwise_kernels[] = {
    {WEFT_OP_COPY, nullptr, kAll, copy_kernel},
    WC_UF(EXP), WC_UF(EXPM1), WC_UF(LOG), WC_UF(LOG1P), WC_UF(SQRT), WC_UF(RSQRT),
    WC_UF(RECIPROCAL), WC_UF(SIN), WC_UF(COS), WC_UF(TANH), WC_UF(SIGMOID), WC_UF(GELU),
    WC_UF(SILU), WC_UF(ERF), WC_UF(FLOOR), WC_UF(CEIL), WC_UF(ROUND), WC_UF(TRUNC),
    WC_UF(SINC),
    WC_UF(NEG), WC_UI(NEG), WC_UF(ABS), WC_UI(ABS), WC_UF(SIGN), WC_UI(SIGN),
    {WEFT_OP_SIGN, nullptr, kBool, bool_kernel<UnaryBool, false, false>},
    WC_UF(RELU), WC_UI(RELU),
    {WEFT_OP_LOGICAL_NOT, nullptr, kAll, any_kernel<LogicalNot, true, false>},
    WC_BF(ADD), WC_BI(ADD), WC_BB(ADD), WC_BF(SUB), WC_BI(SUB), WC_BF(MUL), WC_BI(MUL),
    WC_BB(MUL), WC_BF(DIV), WC_BF(POW), WC_BI(POW), WC_BF(MAXIMUM), WC_BI(MAXIMUM),
    WC_BB(MAXIMUM), WC_BF(MINIMUM), WC_BI(MINIMUM), WC_BB(MINIMUM),
    WC_CMP(EQ), WC_CMP(NE), WC_CMP(LT), WC_CMP(LE), WC_CMP(GT), WC_CMP(GE),
    WC_CMP(LOGICAL_AND), WC_CMP(LOGICAL_OR),
    {0, nullptr, 0, nullptr},
};

