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

/* It provides kernels only: weft-sparse.so loads it by name. */
WEFT_PLUGIN_MANIFEST("");

static const struct weft_plugin sparse_cuda_plugin = {
    .base = WEFT_VTABLE(WEFT_KIND_PLUGIN, "sparse-cuda", struct weft_plugin),
    .manifest = weft_plugin_manifest,
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
