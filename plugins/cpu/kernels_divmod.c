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

/* ---- loops: ops out, a[, b]; ctx the scalar divisor when b is absent -------------------- */

struct divmod_ctx {
    double scalar;
    bool has_scalar;
    int zero; /* set (atomically) when an integer divisor was 0 */
};

#define DIVMOD_LOOP(OPNAME, EXPR, CHECK_ZERO, name, T, C)                                     \
    static void OPNAME##_loop_##name(void *vctx, char **data, const int64_t *s, int64_t n)    \
    {                                                                                         \
        struct divmod_ctx *ctx = vctx;                                                        \
        /* out, a, b: [n] with byte strides s */                                              \
        for (int64_t i = 0; i < n; i++) {                                                     \
            C a = weft_load_##name(data[1] + i * s[1]);                                       \
            C b = ctx->has_scalar ? (C)ctx->scalar : weft_load_##name(data[2] + i * s[2]);     \
            if (CHECK_ZERO && b == 0) {                                                       \
                __atomic_store_n(&ctx->zero, 1, __ATOMIC_RELAXED);                            \
                return;                                                                       \
            }                                                                                 \
            weft_store_##name(data[0] + i * s[0], EXPR(C, a, b));                              \
        }                                                                                     \
    }

#define DIVMOD_KERNEL(OPNAME, name, T)                                                        \
    static int OPNAME##_kernel_##name(const struct weft_op_call *call)                        \
    {                                                                                         \
        struct divmod_ctx ctx = {call->scalar[0], call->in[1] == NULL, 0};                    \
        const weft_tensor *ops[3] = {call->out[0], call->in[0], call->in[1]};                 \
        const int64_t itemsize[3] = {sizeof(T), sizeof(T), sizeof(T)};                       \
        int rc = cpu_elementwise_run(ctx.has_scalar ? 2 : 3, ops, itemsize,                   \
                                     OPNAME##_loop_##name, &ctx);                             \
        if (rc == 0 && ctx.zero)                                                              \
            return weft_error_set(WEFT_ERR_RUNTIME, "ZeroDivisionError");                     \
        return rc;                                                                            \
    }

#define INTEGRAL_DIVMOD(name, id, T, C)                                                       \
    DIVMOD_LOOP(floor_divide, INT_FLOOR_DIVIDE, 1, name, T, C)                                \
    DIVMOD_LOOP(remainder, INT_REMAINDER, 1, name, T, C)                                      \
    DIVMOD_KERNEL(floor_divide, name, T)                                                      \
    DIVMOD_KERNEL(remainder, name, T)
#define FLOATING_DIVMOD(name, id, T, C)                                                       \
    DIVMOD_LOOP(floor_divide, FLT_FLOOR_DIVIDE, 0, name, T, C)                                \
    DIVMOD_LOOP(remainder, FLT_REMAINDER, 0, name, T, C)                                      \
    DIVMOD_KERNEL(floor_divide, name, T)                                                      \
    DIVMOD_KERNEL(remainder, name, T)
WEFT_FOR_INTEGRAL_DTYPES(INTEGRAL_DIVMOD)
WEFT_FOR_FLOATING_DTYPES(FLOATING_DIVMOD)

const struct weft_kernel_entry cpu_divmod_kernels[] = {
#define DIVMOD_ENTRIES(name, id, T, C)                                                        \
    {-1, WEFT_OP_FLOOR_DIVIDE_NAME, WEFT_DTYPE_BIT(id), floor_divide_kernel_##name},          \
    {-1, WEFT_OP_REMAINDER_NAME, WEFT_DTYPE_BIT(id), remainder_kernel_##name},
    WEFT_FOR_INTEGRAL_DTYPES(DIVMOD_ENTRIES)
    WEFT_FOR_FLOATING_DTYPES(DIVMOD_ENTRIES)
#undef DIVMOD_ENTRIES
    {0},
};
