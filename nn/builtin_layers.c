/* nn/builtin_layers.c: the built-in module types, registered from one table
 * (internal.h's NN_BUILTIN_TYPES) when the library loads: the module kind, then every
 * type, so an INI file can name them and a plugin linking this library can add its own.
 * A failure here (out of memory) leaves the error pending on the loading thread. */
#include "graph_internal.h"
#include "internal.h"

__attribute__((constructor)) static void register_builtin_layers(void)
{
    const void *const types[] = {
        &weft_module_kind,
#define NN_TYPE_ENTRY(type) &type,
        NN_BUILTIN_TYPES(NN_TYPE_ENTRY)
#undef NN_TYPE_ENTRY
        /* the graph model's joining layers (merge.c): identity, add, mul, concat */
        nn_merge_types[0], nn_merge_types[1], nn_merge_types[2], nn_merge_types[3],
    };
    weft_register_all((int)(sizeof types / sizeof *types), types);
}
