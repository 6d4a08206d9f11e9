/* plugins/cuda/cuda_dtypes.cuh: dtypes as C++ types for the kernels, the rules that
 * convert values between them (the cpu plugin's rules, so both devices agree), and the
 * dtype lists the kernels are instantiated over. Device code only (nvcc). */
#ifndef WEFT_CUDA_DTYPES_CUH
#define WEFT_CUDA_DTYPES_CUH

#include <stdint.h>
#include <type_traits>

#include <weft/half.h>

#include "cuda_plugin.h"

namespace wc {

/* A dtype: storage type S, compute type C (float for the 16-bit floats), load/store. */
struct Bool {
    typedef uint8_t S;
    typedef bool C;
    static __device__ __forceinline__ C load(const S *p) { return *p != 0; }
    static __device__ __forceinline__ void store(S *p, C v) { *p = v ? 1 : 0; }
};

template <typename T> struct Plain {
    typedef T S;
    typedef T C;
    static __device__ __forceinline__ C load(const S *p) { return *p; }
    static __device__ __forceinline__ void store(S *p, C v) { *p = v; }
};

struct Half {
    typedef uint16_t S;
    typedef float C;
    static __device__ __forceinline__ C load(const S *p) { return weft_f16_to_float(*p); }
    static __device__ __forceinline__ void store(S *p, C v) { *p = weft_float_to_f16(v); }
};

struct BFloat16 {
    typedef uint16_t S;
    typedef float C;
    static __device__ __forceinline__ C load(const S *p) { return weft_bf16_to_float(*p); }
    static __device__ __forceinline__ void store(S *p, C v) { *p = weft_float_to_bf16(v); }
};

template <typename D> struct is_floating
    : std::integral_constant<bool, std::is_floating_point<typename D::C>::value> {};

/* Floating to integer as PyTorch on CUDA (weft/tensor.h, weft_to_dtype): the hardware's
 * saturating conversion, NaN -> 0; uint8 through int64 (c10's static_cast_with_inter_type:
 * -3.0 -> 253, +inf -> 255), int8/int16/int32 through int32 (300.0 -> int8 44, +inf ->
 * int8 -1), then wrapped. Written out, so that no compiler choice decides it. The cpu
 * differs only where the value does not fit int64/int32 (its rule gives the minimum). */
__device__ __forceinline__ int64_t saturate_i64(double v) /* float widens exactly */
{
    return v != v ? 0
           : v <= -9223372036854775808.0 ? INT64_MIN
           : v >= 9223372036854775808.0 ? INT64_MAX
                                        : (int64_t)v;
}

__device__ __forceinline__ int32_t saturate_i32(double v)
{
    return v != v ? 0
           : v <= -2147483648.0 ? INT32_MIN
           : v >= 2147483648.0 ? INT32_MAX
                               : (int32_t)v;
}

/* A value of compute type From as dtype To's compute type: to bool "!= 0" (NaN is true),
 * to integers from floating types by the rule above, between integers a wrapping cast,
 * to floating types a plain cast. */
template <typename To, typename From>
__device__ __forceinline__ typename To::C convert(From v)
{
    typedef typename To::C C;
    if constexpr (std::is_same<To, Bool>::value)
        return v != From(0);
    else if constexpr (std::is_floating_point<C>::value)
        return (C)v;
    else if constexpr (!std::is_floating_point<From>::value)
        return (C)(int64_t)v;
    else if constexpr (std::is_same<C, uint8_t>::value || std::is_same<C, int64_t>::value)
        return (C)saturate_i64((double)v);
    else
        return (C)saturate_i32((double)v);
}

/* The X-macro lists: X(enum, type). */
#define WC_FLOATING_DTYPES(X)                                                                 \
    X(WEFT_F16, wc::Half) X(WEFT_BF16, wc::BFloat16) X(WEFT_F32, wc::Plain<float>)            \
    X(WEFT_F64, wc::Plain<double>)
#define WC_INTEGRAL_DTYPES(X)                                                                 \
    X(WEFT_U8, wc::Plain<uint8_t>) X(WEFT_I8, wc::Plain<int8_t>)                              \
    X(WEFT_I16, wc::Plain<int16_t>) X(WEFT_I32, wc::Plain<int32_t>)                           \
    X(WEFT_I64, wc::Plain<int64_t>)
#define WC_BOOL_DTYPES(X) X(WEFT_BOOL, wc::Bool)
#define WC_ALL_DTYPES(X) WC_BOOL_DTYPES(X) WC_INTEGRAL_DTYPES(X) WC_FLOATING_DTYPES(X)

/* Threads per block and the grid for n work items (grid-stride loops cover the rest). */
constexpr int kThreads = 256;
static inline unsigned grid_for(int64_t n)
{
    int64_t blocks = (n + kThreads - 1) / kThreads;
    return (unsigned)(blocks < 65536 ? (blocks > 0 ? blocks : 1) : 65536);
}

} // namespace wc

#endif
