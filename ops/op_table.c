/* ops/op_table.c: what libweft-ops tells the core when it loads: the names of its
 * built-in ops (for errors and weft_op_lookup) and the ops the autograd engine computes
 * with (weft_autograd_set_ops). */
#include "forward.h"

static const char *const builtin_names[] = {
#define WEFT_OP_NAME(id, name) name,
    WEFT_BUILTIN_OPS(WEFT_OP_NAME)
#undef WEFT_OP_NAME
};

static const struct weft_autograd_ops autograd_ops = {
    .struct_size = sizeof(struct weft_autograd_ops),
    .add = weft_add,
    .add_ = weft_add_,
    .sum = weft_sum,
    .scatter_add = weft_scatter_add,
};

__attribute__((constructor)) static void load(void)
{
    weft_op_define(WEFT_OP_CORE_COUNT, WEFT_OP_BUILTIN_COUNT - WEFT_OP_CORE_COUNT, builtin_names);
    weft_autograd_set_ops(&autograd_ops);
}
