/* plugins/cpu/kernels_scan.c: CUMSUM and CUMPROD (weft/kernel.h): each line along the
 * dim scanned in order on one thread, the lines shared among the threads. */
#include "cpu.h"

/* integers wrap (through uint64, no signed overflow) */
#define INT_MUL(C, a, b) ((C)((uint64_t)(a) * (uint64_t)(b)))
#define INT_ADD(C, a, b) ((C)((uint64_t)(a) + (uint64_t)(b)))
#define FLT_MUL(C, a, b) ((a) * (b))
#define FLT_ADD(C, a, b) ((a) + (b))
#define CPU_KERNEL_INC "scan_lines.inc"
#define MUL INT_MUL
#define ADD INT_ADD
#include "each_integral_dtype.inc"
#undef MUL
#undef ADD
#define MUL FLT_MUL
#define ADD FLT_ADD
#include "each_floating_dtype.inc"
#undef MUL
#undef ADD
#undef CPU_KERNEL_INC

static int scan(const struct weft_op_call *call, bool prod)
{
    if (weft_tensor_numel(call->in[0]) == 0)
        return 0;
    switch (call->in[0]->dtype) {
#define SCAN_CASE(name, id, T, C)                                                             \
    case id:                                                                                  \
        scan_##name(call, prod);                                                              \
        return 0;
        WEFT_FOR_INTEGRAL_DTYPES(SCAN_CASE)
        WEFT_FOR_FLOATING_DTYPES(SCAN_CASE)
#undef SCAN_CASE
    default:
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "\"%s\" not implemented for '%s' on cpu",
                              prod ? "cumprod" : "cumsum",
                              weft_dtype_torch_name(call->in[0]->dtype));
    }
}

int cpu_cumsum_kernel(const struct weft_op_call *call)
{
    return scan(call, false);
}

int cpu_cumprod_kernel(const struct weft_op_call *call)
{
    return scan(call, true);
}
