/* ops/op_table.c: the op table's rows as data (ops_rows, by id), and what libweft-ops tells
 * the core when it loads: the names of its built-in ops (for errors and
 * weft_op_lookup) and the ops the autograd engine computes with
 * (weft_autograd_set_ops). */
#include "internal.h"

const struct ops_row ops_rows[OPS_ROW_COUNT] = {
#define OPS_ROW(ID, name, DTYPES, AUTOCAST, GRAD_FN, ...)                                     \
    [WEFT_OP_##ID] = {#name, GRAD_FN, WEFT_AUTOCAST_##AUTOCAST},
    WEFT_OP_TABLE(OPS_ROW) WEFT_OPS_COMPOSITE(OPS_ROW)
#undef OPS_ROW
};

static const char *const builtin_names[] = {
#define OPS_NAME(ID, name, ...) #name,
    WEFT_OP_TABLE(OPS_NAME)
#undef OPS_NAME
};

static const struct weft_autograd_ops autograd_ops = {
    .struct_size = sizeof(struct weft_autograd_ops),
    .add = weft_add,
    .add_ = weft_add_,
    .sum = weft_sum,
    .scatter_add = weft_scatter_add,
    .random_offset = weft_random_offset,
    .random_set_offset = weft_random_set_offset,
};

__attribute__((constructor)) static void load(void)
{
    weft_op_define(WEFT_OP_CORE_COUNT, WEFT_OP_BUILTIN_COUNT - WEFT_OP_CORE_COUNT, builtin_names);
    weft_autograd_set_ops(&autograd_ops);
}
