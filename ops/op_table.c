/* ops/op_table.c: names the op layer's built-in ops in the core's dispatch table when
 * libweft-ops loads, so errors and weft_op_lookup() know them by name. */
#include "weft/kernel.h"

static const char *const builtin_names[] = {
#define WEFT_OP_NAME(id, name) name,
    WEFT_BUILTIN_OPS(WEFT_OP_NAME)
#undef WEFT_OP_NAME
};

__attribute__((constructor)) static void define_builtin_ops(void)
{
    weft_op_define(WEFT_OP_CORE_COUNT, WEFT_OP_BUILTIN_COUNT - WEFT_OP_CORE_COUNT, builtin_names);
}
