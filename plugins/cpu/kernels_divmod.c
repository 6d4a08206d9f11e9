/* plugins/cpu/kernels_divmod.c: FLOOR_DIVIDE and REMAINDER (weft/kernel.h), Python's
 * // and % with PyTorch's formulas (aten/src/ATen/native/cpu/BinaryOpsKernel.cpp):
 * the quotient rounds toward -inf, the remainder takes the divisor's sign. Integers
 * divided by zero fail with PyTorch's "ZeroDivisionError"; floats give IEEE's answer. */
#include <math.h>

#include "cpu.h"

#pragma GCC diagnostic ignored "-Wtype-limits"

/* ---- one element ----------------------------------------------------------------------- */

/* Integers: truncating C division, corrected when the signs differ and it was inexact.
 * A signed b == -1 is negation (INT_MIN / -1 would trap); b == 0 is flagged by the
 * caller. */
#define MINUS_ONE(C, b) ((C)-1 < 0 && (b) == (C)-1)
#define INT_FLOOR_DIVIDE(C, a, b)                                                             \
    (MINUS_ONE(C, b) ? (C)(0 - (uint64_t)(a))                                                 \
                  : (((a) < 0) != ((b) < 0) && (a) % (b) != 0 ? (C)((a) / (b) - 1)            \
                                                              : (C)((a) / (b))))
#define INT_REMAINDER(C, a, b)                                                                \
    (MINUS_ONE(C, b) ? (C)0                                                                   \
                  : (C)((a) % (b) != 0 && (((a) % (b)) < 0) != ((b) < 0) ? (a) % (b) + (b)    \
                                                                         : (a) % (b)))

/* Floats: div_floor_floating and fmod with the sign fix-up. */
static inline double floor_divide_f64(double a, double b)
{
    if (b == 0)
        return a / b;
    double mod = fmod(a, b), div = (a - mod) / b;
    if (mod != 0 && (b < 0) != (mod < 0))
        div -= 1;
    if (div == 0)
        return copysign(0.0, a / b);
    double f = floor(div);
    return div - f > 0.5 ? f + 1 : f;
}

static inline float floor_divide_f32(float a, float b)
{
    if (b == 0)
        return a / b;
    float mod = fmodf(a, b), div = (a - mod) / b;
    if (mod != 0 && (b < 0) != (mod < 0))
        div -= 1;
    if (div == 0)
        return copysignf(0.0f, a / b);
    float f = floorf(div);
    return div - f > 0.5f ? f + 1 : f;
}

static inline double remainder_f64(double a, double b)
{
    double mod = fmod(a, b);
    return mod != 0 && (b < 0) != (mod < 0) ? mod + b : mod;
}

static inline float remainder_f32(float a, float b)
{
    float mod = fmodf(a, b);
    return mod != 0 && (b < 0) != (mod < 0) ? mod + b : mod;
}

#define FLT_FLOOR_DIVIDE(C, a, b) _Generic((a), float: floor_divide_f32, default: floor_divide_f64)(a, b)
#define FLT_REMAINDER(C, a, b) _Generic((a), float: remainder_f32, default: remainder_f64)(a, b)

/* ---- loops: ops out, a[, b]; ctx the scalar divisor when b is absent ------------------ */

struct divmod_ctx {
    double scalar;
    bool has_scalar;
    int zero; /* set (atomically) when an integer divisor was 0 */
};

#define CPU_KERNEL_INC "divmod_loops.inc"
#define FLOOR_DIVIDE INT_FLOOR_DIVIDE
#define REMAINDER INT_REMAINDER
#define CHECK_ZERO 1
#include "each_integral_dtype.inc"
#undef FLOOR_DIVIDE
#undef REMAINDER
#undef CHECK_ZERO
#define FLOOR_DIVIDE FLT_FLOOR_DIVIDE
#define REMAINDER FLT_REMAINDER
#define CHECK_ZERO 0
#include "each_floating_dtype.inc"
#undef FLOOR_DIVIDE
#undef REMAINDER
#undef CHECK_ZERO
#undef CPU_KERNEL_INC

const struct weft_kernel_entry cpu_divmod_kernels[] = {
#define DIVMOD_ENTRIES(name, id, T, C)                                                        \
    {-1, WEFT_OP_FLOOR_DIVIDE_NAME, WEFT_DTYPE_BIT(id), CPU_CAT(floor_divide_kernel_, name)},          \
    {-1, WEFT_OP_REMAINDER_NAME, WEFT_DTYPE_BIT(id), CPU_CAT(remainder_kernel_, name)},
    WEFT_FOR_INTEGRAL_DTYPES(DIVMOD_ENTRIES)
    WEFT_FOR_FLOATING_DTYPES(DIVMOD_ENTRIES)
#undef DIVMOD_ENTRIES
    {0},
};
