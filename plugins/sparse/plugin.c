/* plugins/sparse/plugin.c: weft-sparse.so's descriptor (being written). */
#include <weft/plugin.h>
#include <weft/version.h>

#include "sparse_impl.h"

static int sparse_init(void)
{
    return sparse_layouts_register();
}

static const struct weft_plugin sparse_plugin = {
    .abi_version = WEFT_PLUGIN_ABI_VERSION,
    .struct_size = sizeof(struct weft_plugin),
    .name = "sparse",
    .version = WEFT_VERSION_STRING,
    .description = "sparse_coo and sparse_csr layouts, SpMM/SpMV on CPU",
    .init = sparse_init,
};

WEFT_PLUGIN_EXPORT const struct weft_plugin *weft_plugin_init(void)
{
    return &sparse_plugin;
}
