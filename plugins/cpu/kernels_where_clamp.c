/* plugins/cpu/kernels_where_clamp.c: where (and masked_fill through it) and clamp, the
 * selecting elementwise ops (ops/where_clamp.c is their front end). */
#include "cpu.h"

/* ---- where ----------------------------------------------------------------------------
 * Dispatched on the condition (bool); the values' dtype is out[0]'s. Values are only
 * selected, never computed, so the loops move storage values. A NULL value input is a
 * scalar, stored once in the output dtype and read with stride 0. */

struct where_ctx {
    bool tensor[2];                        /* in[1], in[2] are tensors */
    _Alignas(8) unsigned char value[2][8]; /* else their scalar, in the output dtype */
};

#define CPU_KERNEL_INC "where_loop.inc"
#include "each_dtype.inc"
#undef CPU_KERNEL_INC

static int where_kernel(const struct weft_op_call *call)
{
    struct where_ctx ctx = {{call->in[1] != NULL, call->in[2] != NULL}};
    const weft_tensor *ops[4] = {call->out[0], call->in[0]};
    int nops = 2;
    for (int v = 0; v < 2; v++)
        if (ctx.tensor[v])
            ops[nops++] = call->in[1 + v];
    weft_iter_loop_fn loop = NULL;
    int64_t itemsize[4] = {0, 1, 0, 0};
    switch (call->out[0]->dtype) {
#define WHERE_CASE(name, id, T, C)                                                            \
    case id:                                                                                  \
        weft_store_##name(ctx.value[0], scalar_to_##name(call->scalar[0]));                   \
        weft_store_##name(ctx.value[1], scalar_to_##name(call->scalar[1]));                   \
        itemsize[0] = itemsize[2] = itemsize[3] = sizeof(T);                                  \
        loop = CPU_CAT(where_loop_, name);                                                    \
        break;
        WEFT_FOR_ALL_DTYPES(WHERE_CASE)
#undef WHERE_CASE
    default:
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "\"where\" not implemented for '%s' on cpu",
                              weft_dtype_torch_name(call->out[0]->dtype));
    }
    return cpu_elementwise_run(nops, ops, itemsize, loop, &ctx);
}

/* ---- clamp ------------------------------------------------------------------------------
 * min(max(a, lo), hi) with absent bounds skipped; a NaN input stays NaN (both comparisons
 * are false). */

#define CPU_KERNEL_INC "clamp_loop.inc"
#include "each_integral_dtype.inc"
#include "each_floating_dtype.inc"
#undef CPU_KERNEL_INC

const struct weft_kernel_entry cpu_where_clamp_kernels[] = {
#define CLAMP_ENTRY(name, id, T, C) {WEFT_OP_CLAMP, NULL, WEFT_DTYPE_BIT(id), clamp_kernel_##name},
    WEFT_FOR_INTEGRAL_DTYPES(CLAMP_ENTRY)
    WEFT_FOR_FLOATING_DTYPES(CLAMP_ENTRY)
#undef CLAMP_ENTRY
    {WEFT_OP_WHERE, NULL, WEFT_DTYPE_BIT(WEFT_BOOL), where_kernel},
    {0},
};
