/* plugins/sparse/cuda/plugin.c: weft-sparse-cuda.so's descriptor, probe and set-up.
 *
 * It adds CUDA kernels to what weft-sparse.so provides (the layouts, the front ends and
 * the CPU kernels), so it needs both that plugin and the CUDA backend loaded first;
 * weft-sparse.so loads it when the CUDA backend is usable. */
#include <stdio.h>

#include <weft/layout.h>
#include <weft/plugin.h>
#include <weft/version.h>

#include <weft/cuda_probe.h>
#include "sparse_cuda.h"

/* The plugin's kernels, the same for both sparse layouts. */
static const struct weft_kernel_entry sparse_cuda_kernels[] = {
    {-1, SPARSE_OP_MM, WEFT_DTYPE_BIT(WEFT_F32) | WEFT_DTYPE_BIT(WEFT_F64), sc_spmm_kernel},
    {-1, SPARSE_OP_SDDMM, WEFT_DTYPE_BIT(WEFT_F32) | WEFT_DTYPE_BIT(WEFT_F64), sc_sddmm_kernel},
    {0},
};

static int sparse_cuda_init(const weft_options *options)
{
    (void)options;
    if (!weft_registry_get(WEFT_KIND_BACKEND, "cuda"))
        return weft_error_code();
    sc_cuda_device_type = weft_device_type_id("cuda", false);
    if (!weft_registry_find(WEFT_KIND_LAYOUT, "sparse_coo") ||
        !weft_registry_find(WEFT_KIND_LAYOUT, "sparse_csr"))
        return weft_error_set(WEFT_ERR_PLUGIN, "load plugin 'sparse' first: it registers the "
                                               "layouts this plugin adds CUDA kernels to");
    sparse_coo_layout = weft_layout_id("sparse_coo");
    sparse_csr_layout = weft_layout_id("sparse_csr");
    int rc = sc_context_init();
    if (rc == 0)
        rc = weft_kernel_register_table(sc_cuda_device_type, sparse_csr_layout, sparse_cuda_kernels);
    if (rc == 0)
        rc = weft_kernel_register_table(sc_cuda_device_type, sparse_coo_layout, sparse_cuda_kernels);
    return rc;
}

static void sparse_cuda_fini(void)
{
    sc_context_shutdown();
}

/* It provides kernels only: weft-sparse.so loads it by name. */
WEFT_PLUGIN_MANIFEST("");

static const struct weft_plugin sparse_cuda_plugin = {
    .base = WEFT_VTABLE(WEFT_KIND_PLUGIN, "sparse-cuda", struct weft_plugin),
    .manifest = weft_plugin_manifest,
    .version = WEFT_VERSION_STRING,
    .description = "cuSPARSE kernels for sparse_coo and sparse_csr on CUDA devices: SpMM, SDDMM",
    .probe = weft_cuda_probe_devices,
    .init = sparse_cuda_init,
    .fini = sparse_cuda_fini,
};

WEFT_PLUGIN_EXPORT const struct weft_plugin *weft_plugin_init(void)
{
    return &sparse_cuda_plugin;
}
