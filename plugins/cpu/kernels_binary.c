/* plugins/cpu/kernels_binary.c: elementwise binary kernels (out[0] = f(in[0], in[1]) or
 * f(in[0], scalar[0])).
 *
 * Every binary op is one expression of `a` and `b`, values of the compute type C (cpu.h:
 * float for the 16-bit floats), in the op lists below, for each dtype family PyTorch has
 * the op for. BINARY_KERNEL makes the expression a function and inlines it into its
 * dtype's loop (binary_loop.inc), which has vector paths for the shapes that matter. */
#include <math.h>

#include "cpu.h"

/* Integer ops on unsigned types compare against 0 on purpose (one expression for all). */
#pragma GCC diagnostic ignored "-Wtype-limits"

/* The libm function for the compute type: powf for float, pow for double. */
#define FN2(fn, x, y) _Generic((x), float: fn##f, default: fn)(x, y)

/* Two's-complement wrap-around without signed overflow: the low bits of the 64-bit
 * unsigned result are those of the narrow one. */
#define WRAP(C, x, op, y) ((C)((uint64_t)(x) op (uint64_t)(y)))

/* Integer power by squaring (wrapping), with torch's answers for negative exponents. */
static inline int64_t int_pow(int64_t base, int64_t exp)
{
    if (exp < 0) {
        if (base == 1)
            return 1;
        if (base == -1)
            return (exp & 1) ? -1 : 1;
        return 0;
    }
    uint64_t result = 1, b = (uint64_t)base;
    for (; exp; exp >>= 1) {
        if (exp & 1)
            result *= b;
        b *= b;
    }
    return (int64_t)result;
}

/* ---- binary ops ------------------------------------------------------------------------ */

#define CPU_KERNEL_INC "binary_loop.inc"
#include "each_dtype_and_result.inc"
#undef CPU_KERNEL_INC

/* One op of one dtype: ID, the op id's suffix; name, T, C, the operands' dtype; RESULT,
 * arith or predicate (binary_loop.inc); OC, the expression's type; EXPR, of a and b. The
 * expression becomes a function, the loop inlines it and the kernel runs the loop. */
#define BINARY_KERNEL(ID, name, id, T, C, RESULT, OC, EXPR)                                   \
    static inline OC binary_##ID##_##name(C a, C b) { return (EXPR); }                       \
    static void binary_loop_##ID##_##name(void *ctx, char **data, const int64_t *s, int64_t n) \
    {                                                                                         \
        CPU_CAT(RESULT, CPU_CAT(_loop_, name))(ctx, data, s, n, binary_##ID##_##name);        \
    }                                                                                         \
    static int binary_kernel_##ID##_##name(const struct weft_op_call *call)                   \
    {                                                                                         \
        return CPU_CAT(RESULT, CPU_CAT(_kernel_, name))(call, binary_loop_##ID##_##name);     \
    }

#define BINARY_ENTRY(ID, name, id, T, C, RESULT, OC, EXPR)                                    \
    {WEFT_OP_##ID, NULL, WEFT_DTYPE_BIT(id), binary_kernel_##ID##_##name},

/* Comparisons and logical ops exist for every dtype and give bool. */
#define BINARY_BOOL_RESULT_OPS(Y, name, id, T, C)                                             \
    Y(EQ, name, id, T, C, predicate, bool, a == b)                                            \
    Y(NE, name, id, T, C, predicate, bool, a != b)                                            \
    Y(LT, name, id, T, C, predicate, bool, a < b)                                             \
    Y(LE, name, id, T, C, predicate, bool, a <= b)                                            \
    Y(GT, name, id, T, C, predicate, bool, a > b)                                             \
    Y(GE, name, id, T, C, predicate, bool, a >= b)                                            \
    Y(LOGICAL_AND, name, id, T, C, predicate, bool, a && b)                                   \
    Y(LOGICAL_OR, name, id, T, C, predicate, bool, a || b)

/* maximum/minimum propagate NaN from either side. */
#define BINARY_FLOATING_OPS(Y, name, id, T, C)                                                \
    Y(ADD, name, id, T, C, arith, C, a + b)                                                   \
    Y(SUB, name, id, T, C, arith, C, a - b)                                                   \
    Y(MUL, name, id, T, C, arith, C, a * b)                                                   \
    Y(DIV, name, id, T, C, arith, C, a / b)                                                   \
    Y(POW, name, id, T, C, arith, C, FN2(pow, a, b))                                          \
    Y(MAXIMUM, name, id, T, C, arith, C, (a > b || a != a) ? a : b)                           \
    Y(MINIMUM, name, id, T, C, arith, C, (a < b || a != a) ? a : b)                           \
    BINARY_BOOL_RESULT_OPS(Y, name, id, T, C)

#define BINARY_INTEGRAL_OPS(Y, name, id, T, C)                                                \
    Y(ADD, name, id, T, C, arith, C, WRAP(C, a, +, b))                                        \
    Y(SUB, name, id, T, C, arith, C, WRAP(C, a, -, b))                                        \
    Y(MUL, name, id, T, C, arith, C, WRAP(C, a, *, b))                                        \
    Y(POW, name, id, T, C, arith, C, (C)int_pow(a, b))                                        \
    Y(MAXIMUM, name, id, T, C, arith, C, a > b ? a : b)                                       \
    Y(MINIMUM, name, id, T, C, arith, C, a < b ? a : b)                                       \
    BINARY_BOOL_RESULT_OPS(Y, name, id, T, C)

/* bool: add is or, mul is and (torch); no sub, div or pow. */
#define BINARY_BOOL_OPS(Y, name, id, T, C)                                                    \
    Y(ADD, name, id, T, C, arith, C, a || b)                                                  \
    Y(MUL, name, id, T, C, arith, C, a && b)                                                  \
    Y(MAXIMUM, name, id, T, C, arith, C, a || b)                                              \
    Y(MINIMUM, name, id, T, C, arith, C, a && b)                                              \
    BINARY_BOOL_RESULT_OPS(Y, name, id, T, C)

#define FLOATING_KERNELS(name, id, T, C) BINARY_FLOATING_OPS(BINARY_KERNEL, name, id, T, C)
#define INTEGRAL_KERNELS(name, id, T, C) BINARY_INTEGRAL_OPS(BINARY_KERNEL, name, id, T, C)
WEFT_FOR_FLOATING_DTYPES(FLOATING_KERNELS)
WEFT_FOR_INTEGRAL_DTYPES(INTEGRAL_KERNELS)
BINARY_BOOL_OPS(BINARY_KERNEL, bool, WEFT_BOOL, bool, bool)

const struct weft_kernel_entry cpu_binary_kernels[] = {
#define FLOATING_ENTRIES(name, id, T, C) BINARY_FLOATING_OPS(BINARY_ENTRY, name, id, T, C)
#define INTEGRAL_ENTRIES(name, id, T, C) BINARY_INTEGRAL_OPS(BINARY_ENTRY, name, id, T, C)
    WEFT_FOR_FLOATING_DTYPES(FLOATING_ENTRIES)
    WEFT_FOR_INTEGRAL_DTYPES(INTEGRAL_ENTRIES)
    BINARY_BOOL_OPS(BINARY_ENTRY, bool, WEFT_BOOL, bool, bool)
    {0},
};
