/* plugins/cpu/kernels_unary.c: elementwise unary kernels, out[0] = f(in[0]).
 *
 * Every op is one expression of `a`, a value of the compute type C (cpu.h: float for the
 * 16-bit floats), in the op lists below, for each dtype family PyTorch has the op for.
 * UNARY_KERNEL makes the expression a function and inlines it into its dtype's loop
 * (unary_loop.inc). The front end has already promoted integer inputs of floating-only
 * functions. */
/* fast_math.h's clamps and selects become vector selects only without trapping math;
 * weft never enables floating-point traps. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif

#include <math.h>

#include "cpu.h"
#include "fast_math.h"

/* Integer ops on unsigned types compare against 0 on purpose (one expression for all). */
#pragma GCC diagnostic ignored "-Wtype-limits"

/* The libm function for the compute type: expf for float, exp for double. */
#define FN1(fn, x) _Generic((x), float: fn##f, default: fn)(x)
/* fast_math.h's vectorisable float version (within 4.3e-7), libm's for double: libm's
 * erff and tanhf are scalar calls of 10-40 ns. (GELU is kernels_activation.c's.) */
#define FAST1(fn, x) _Generic((x), float: fn##_f32, default: fn)(x)

/* Two's-complement wrap-around without signed overflow. */
#define WRAP_NEG(C, x) ((C)(0 - (uint64_t)(x)))

#define CPU_KERNEL_INC "unary_loop.inc"
#include "each_dtype_and_result.inc"
#undef CPU_KERNEL_INC

/* One op of one dtype: ID, the op id's suffix; name, T, C, the input's dtype; RESULT,
 * arith or predicate (unary_loop.inc); OC, the expression's type; EXPR, of a. ATTR:
 * CPU_CLONES for the floating loops, which compute (exp, erf...), nothing for the integer
 * and bool ones, which gain nothing from wider vectors but size. */
#define UNARY_KERNEL_(ATTR, ID, name, id, T, C, RESULT, OC, EXPR)                             \
    static inline __attribute__((always_inline)) OC unary_##ID##_##name(C a) { return (EXPR); } \
    ATTR __attribute__((flatten)) static void unary_loop_##ID##_##name(void *ctx, char **data, \
                                         const int64_t *s, int64_t n)                         \
    {                                                                                         \
        (void)ctx;                                                                            \
        CPU_CAT(RESULT, CPU_CAT(_unary_loop_, name))(data, s, n, unary_##ID##_##name);        \
    }                                                                                         \
    static int unary_kernel_##ID##_##name(const struct weft_op_call *call)                    \
    {                                                                                         \
        return CPU_CAT(RESULT, CPU_CAT(_unary_kernel_, name))(call, unary_loop_##ID##_##name); \
    }

#define UNARY_KERNEL(...) UNARY_KERNEL_(, __VA_ARGS__)
#define UNARY_KERNEL_CLONED(...) UNARY_KERNEL_(CPU_CLONES, __VA_ARGS__)

#define UNARY_ENTRY(ID, name, id, T, C, RESULT, OC, EXPR)                                     \
    {WEFT_OP_##ID, NULL, WEFT_DTYPE_BIT(id), unary_kernel_##ID##_##name},

/* ---- the ops, per dtype family: Y(ID, name, id, T, C, RESULT, OC, EXPR) ---------------- */

#define UNARY_FLOATING_OPS(Y, name, id, T, C)                                                 \
    Y(EXP, name, id, T, C, arith, C, FN1(exp, a))                                             \
    Y(EXPM1, name, id, T, C, arith, C, FN1(expm1, a))                                         \
    Y(LOG, name, id, T, C, arith, C, FN1(log, a))                                             \
    Y(LOG1P, name, id, T, C, arith, C, FN1(log1p, a))                                         \
    Y(SQRT, name, id, T, C, arith, C, FN1(sqrt, a))                                           \
    Y(RSQRT, name, id, T, C, arith, C, (C)1 / FN1(sqrt, a))                                   \
    Y(RECIPROCAL, name, id, T, C, arith, C, (C)1 / a)                                         \
    Y(SIN, name, id, T, C, arith, C, FN1(sin, a))                                             \
    Y(COS, name, id, T, C, arith, C, FN1(cos, a))                                             \
    Y(TANH, name, id, T, C, arith, C, FAST1(tanh, a))                                         \
    Y(SIGMOID, name, id, T, C, arith, C, (C)1 / ((C)1 + FN1(exp, -a)))                        \
    Y(SILU, name, id, T, C, arith, C, a / ((C)1 + FN1(exp, -a)))                              \
    Y(ERF, name, id, T, C, arith, C, FAST1(erf, a))                                           \
    Y(FLOOR, name, id, T, C, arith, C, FN1(floor, a))                                         \
    Y(CEIL, name, id, T, C, arith, C, FN1(ceil, a))                                           \
    Y(ROUND, name, id, T, C, arith, C, FN1(nearbyint, a)) /* half to even, as torch */        \
    Y(TRUNC, name, id, T, C, arith, C, FN1(trunc, a))                                         \
    Y(SINC, name, id, T, C, arith, C, a == (C)0 ? (C)1 : FN1(sin, (C)M_PI * a) / ((C)M_PI * a)) \
    Y(NEG, name, id, T, C, arith, C, -a)                                                      \
    Y(ABS, name, id, T, C, arith, C, FN1(fabs, a))                                            \
    Y(SIGN, name, id, T, C, arith, C, (C)((a > 0) - (a < 0))) /* sign(nan) = 0, as torch */   \
    Y(RELU, name, id, T, C, arith, C, a < 0 ? (C)0 : a)       /* keeps nan */                 \
    Y(LOGICAL_NOT, name, id, T, C, predicate, bool, !a)

#define UNARY_INTEGRAL_OPS(Y, name, id, T, C)                                                 \
    Y(NEG, name, id, T, C, arith, C, WRAP_NEG(C, a))                                          \
    Y(ABS, name, id, T, C, arith, C, a < 0 ? WRAP_NEG(C, a) : a)                              \
    Y(SIGN, name, id, T, C, arith, C, (C)((a > 0) - (a < 0)))                                 \
    Y(RELU, name, id, T, C, arith, C, a < 0 ? (C)0 : a)                                       \
    Y(LOGICAL_NOT, name, id, T, C, predicate, bool, !a)

#define UNARY_BOOL_OPS(Y, name, id, T, C)                                                     \
    Y(SIGN, name, id, T, C, arith, C, a)                                                      \
    Y(LOGICAL_NOT, name, id, T, C, predicate, bool, !a)

#define FLOATING_KERNELS(name, id, T, C) UNARY_FLOATING_OPS(UNARY_KERNEL_CLONED, name, id, T, C)
#define INTEGRAL_KERNELS(name, id, T, C) UNARY_INTEGRAL_OPS(UNARY_KERNEL, name, id, T, C)
WEFT_FOR_FLOATING_DTYPES(FLOATING_KERNELS)
WEFT_FOR_INTEGRAL_DTYPES(INTEGRAL_KERNELS)
UNARY_BOOL_OPS(UNARY_KERNEL, bool, WEFT_BOOL, bool, bool)

const struct weft_kernel_entry cpu_unary_kernels[] = {
#define FLOATING_ENTRIES(name, id, T, C) UNARY_FLOATING_OPS(UNARY_ENTRY, name, id, T, C)
#define INTEGRAL_ENTRIES(name, id, T, C) UNARY_INTEGRAL_OPS(UNARY_ENTRY, name, id, T, C)
    WEFT_FOR_FLOATING_DTYPES(FLOATING_ENTRIES)
    WEFT_FOR_INTEGRAL_DTYPES(INTEGRAL_ENTRIES)
    UNARY_BOOL_OPS(UNARY_ENTRY, bool, WEFT_BOOL, bool, bool)
    {0},
};
