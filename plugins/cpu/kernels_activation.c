/* plugins/cpu/kernels_activation.c: gelu, gelu_tanh, gelu_backward, tanh_backward,
 * sigmoid_backward and add_bias_gelu (weft/kernel.h), each one pass over its operands,
 * with PyTorch's formulas (aten/src/ATen/native/cpu/Activation.cpp) in the compute type
 * (float for 16-bit floats, whose erf-form GELU takes fast_math.h's normal_cdf16: the
 * precision their result keeps, at half the cost). */

/* fast_math.h's clamps and selects become vector selects only without trapping math;
 * weft never enables floating-point traps. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif

#include <math.h>

#include "cpu.h"
#include "weft/kernel_checks.h"
#include "fast_math.h"

/* fast_math.h's float versions, libm's (or fast_math.h's double twins) for double. */
#define FN1(fn, x) _Generic((x), float: fn##_f32, default: fn)(x)
#define FN2(fn, x, y) _Generic((y), float: fn##_f32, default: fn)(x, y)

/* 1 / sqrt(2 pi) */
#define GELU_INV_SQRT_2PI 0.3989422804014327

/* g (Phi(x) + x phi(x)), Phi(x) given */
#define GELU_GRAD_ERF(C, g, a, Phi)                                                           \
    ((g) * ((Phi) + (a) * FN1(exp, (C)-0.5 * (a) * (a)) * (C)GELU_INV_SQRT_2PI))

/* ---- tanh_backward, sigmoid_backward (weft/kernel.h) ------------------------------------
 * out = g * f(y) from the forward's result y, PyTorch's expressions in its order. */
#define TANH_GRAD_EXPR(C, g, y) ((g) * ((C)1 - (y) * (y)))
#define SIGMOID_GRAD_EXPR(C, g, y) ((g) * ((C)1 - (y)) * (y))

/* ---- add_bias_gelu (weft/kernel.h) -----------------------------------------------------
 * Linear's epilogue: h[M, N] += bias[N] in place, y = gelu(h), rows split across threads. */

struct bias_gelu_job {
    char *h, *y;
    const char *bias;
    int64_t N;
    bool tanh_form;
};

#define CPU_KERNEL_INC "activation_loops.inc"
#include "each_floating_dtype.inc"
#undef CPU_KERNEL_INC

static int add_bias_gelu_kernel(const struct weft_op_call *call)
{
    weft_tensor *h = call->out[0], *y = call->out[1];
    const weft_tensor *b = call->in[0];
    if (weft_check_add_bias_gelu(call) != 0)
        return weft_error_code();
    struct bias_gelu_job j = {weft_tensor_data(h), weft_tensor_data(y), weft_tensor_data(b),
                              h->shape[1], call->ints[0] == 1};
    void (*rows)(void *, int64_t, int64_t) = NULL;
    switch (h->dtype) {
#define ADD_BIAS_GELU_CASE(name, id, T, C)                                                    \
    case id:                                                                                  \
        rows = add_bias_gelu_rows_##name;                                                     \
        break;
        WEFT_FOR_FLOATING_DTYPES(ADD_BIAS_GELU_CASE)
#undef ADD_BIAS_GELU_CASE
    default:
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED,
                              "\"add_bias_gelu\" not implemented for '%s' on cpu",
                              weft_dtype_torch_name(h->dtype));
    }
    int64_t grain = CPU_PARALLEL_GRAIN / (j.N > 0 ? j.N : 1);
    cpu_parallel_for(h->shape[0], grain > 0 ? grain : 1, rows, &j);
    return 0;
}

const struct weft_kernel_entry cpu_activation_kernels[] = {
    {-1, WEFT_OP_ADD_BIAS_GELU_NAME, WEFT_DTYPES_FLOATING, add_bias_gelu_kernel},
#define ACTIVATION_ENTRIES(name, id, T, C)                                                    \
    {WEFT_OP_GELU, NULL, WEFT_DTYPE_BIT(id), gelu_##name},                                    \
    {-1, WEFT_OP_GELU_TANH_NAME, WEFT_DTYPE_BIT(id), gelu_tanh_##name},                       \
    {-1, WEFT_OP_GELU_BACKWARD_NAME, WEFT_DTYPE_BIT(id), gelu_backward_##name},               \
    {-1, WEFT_OP_TANH_BACKWARD_NAME, WEFT_DTYPE_BIT(id), tanh_backward_##name},               \
    {-1, WEFT_OP_SIGMOID_BACKWARD_NAME, WEFT_DTYPE_BIT(id), sigmoid_backward_##name},
    WEFT_FOR_FLOATING_DTYPES(ACTIVATION_ENTRIES)
#undef ACTIVATION_ENTRIES
    {0},
};
