/* plugins/sparse/plugin.c: weft-sparse.so's descriptor and set-up: the sparse_coo and
 * sparse_csr layouts, the api:sparse table behind weft/sparse.h, the CPU kernels, and
 * weft-sparse-cuda.so when it is installed and can run here. */
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <weft/error.h>
#include <weft/plugin.h>
#include <weft/version.h>

#include "sparse_impl.h"

static const struct weft_sparse_api api = {
    .base = WEFT_VTABLE(WEFT_KIND_API, WEFT_SPARSE_API_NAME, struct weft_sparse_api),
    .coo_tensor = sparse_api_coo_tensor,
    .csr_tensor = sparse_api_csr_tensor,
    .indices = sparse_api_indices,
    .values = sparse_api_values,
    .indices_raw = sparse_api_indices_raw,
    .values_raw = sparse_api_values_raw,
    .crow_indices = sparse_api_crow_indices,
    .col_indices = sparse_api_col_indices,
    .is_coalesced = sparse_api_is_coalesced,
    .coalesce = sparse_api_coalesce,
    .to_sparse_coo = sparse_api_to_sparse_coo,
    .to_sparse_csr = sparse_api_to_sparse_csr,
    .to_dense = sparse_api_to_dense,
    .transpose = sparse_api_transpose,
    .to_device = sparse_api_to_device,
    .mm = sparse_api_mm,
    .addmm = sparse_api_addmm,
    .add = sparse_api_add,
    .mul_scalar = sparse_api_mul_scalar,
    .sum = sparse_api_sum,
    .sum_dim = sparse_api_sum_dim,
    .linear = sparse_linear,
    .linear_info = sparse_linear_info,
};

/* weft-sparse-cuda.so adds the CUDA kernels. It is optional: without the file, a GPU or
 * a driver, weft-sparse.so works on the cpu alone, and nothing is reported. Only that one
 * file is probed (a scan would open every plugin and start CUDA for nothing). */
static void load_cuda_half(void)
{
    char path[PATH_MAX];
    if (!weft_plugin_find_file("sparse-cuda", path, sizeof path))
        return;
    bool had_error = weft_error_code() != WEFT_OK;
    struct weft_plugin_info info;
    if (weft_plugin_inspect(path, &info) == 0 && info.usable)
        (void)weft_plugin_load(path);
    /* A refusal or failure of the optional half must not fail this plugin's init. */
    if (!had_error)
        weft_error_clear();
}

static int sparse_init(const weft_options *options)
{
    (void)options;
    int rc = sparse_layouts_register();
    if (rc == 0 && weft_register(&api) < 0)
        rc = WEFT_ERR_PLUGIN;
    if (rc == 0)
        rc = sparse_cpu_kernels_register();
    if (rc == 0)
        rc = sparse_linear_register();
    if (rc < 0)
        return rc;
    load_cuda_half();
    return 0;
}

WEFT_PLUGIN_MANIFEST("provides api:sparse layout:sparse_coo layout:sparse_csr module:sparse_linear\n");

static const struct weft_plugin sparse_plugin = {
    .base = WEFT_VTABLE(WEFT_KIND_PLUGIN, "sparse", struct weft_plugin),
    .manifest = weft_plugin_manifest,
    .version = WEFT_VERSION_STRING,
    .description = "sparse_coo/sparse_csr layouts: constructors, coalesce, conversions, add, "
                   "mul, sum; SpMM/SpMV/SDDMM on CPU (OpenMP); CUDA via weft-sparse-cuda.so",
    .init = sparse_init,
};

WEFT_PLUGIN_EXPORT const struct weft_plugin *weft_plugin_init(void)
{
    return &sparse_plugin;
}
