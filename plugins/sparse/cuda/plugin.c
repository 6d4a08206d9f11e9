/* plugins/sparse/cuda/plugin.c: weft-sparse-cuda.so's descriptor, probe and set-up.
 *
 * It adds CUDA kernels to what weft-sparse.so provides (the layouts, the front ends and
 * the CPU kernels), so it needs both that plugin and the CUDA backend loaded first;
 * weft-sparse.so loads it when the CUDA backend is usable. */
#include <stdio.h>

#include <weft/layout.h>
#include <weft/plugin.h>
#include <weft/version.h>

#include "cuda_probe.h"
#include "sparse_cuda.h"

static int sparse_cuda_init(void)
{
    if (weft_plugin_load("cuda") != 0)
        return weft_error_code();
    if (!weft_layout_find(WEFT_LAYOUT_SPARSE_CSR) || !weft_layout_find(WEFT_LAYOUT_SPARSE_COO))
        return weft_error_set(WEFT_ERR_PLUGIN, "load plugin 'sparse' first");
    int (*const steps[])(void) = {sc_context_init, sc_register_spmm, sc_register_sddmm};
    for (size_t i = 0; i < sizeof steps / sizeof *steps; i++) {
        int rc = steps[i]();
        if (rc < 0)
            return rc;
    }
    return 0;
}

static void sparse_cuda_fini(void)
{
    sc_context_shutdown();
}

static const struct weft_plugin sparse_cuda_plugin = {
    .abi_version = WEFT_PLUGIN_ABI_VERSION,
    .struct_size = sizeof(struct weft_plugin),
    .name = "sparse-cuda",
    .version = WEFT_VERSION_STRING,
    .description = "cuSPARSE kernels for sparse_coo and sparse_csr on CUDA devices: SpMM, SDDMM",
    .probe = cuda_probe_devices,
    .init = sparse_cuda_init,
    .fini = sparse_cuda_fini,
};

WEFT_PLUGIN_EXPORT const struct weft_plugin *weft_plugin_init(void)
{
    return &sparse_cuda_plugin;
}
