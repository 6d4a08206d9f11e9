/* plugins/cuda/plugin.c: the CUDA plugin's descriptor, probe and set-up. */
#include <stdio.h>

#include <weft/plugin.h>
#include <weft/version.h>

#include "cuda_plugin.h"
#include <weft/cuda_probe.h>

/* Every kernel the plugin provides: the table of each family's table. */
static const struct weft_kernel_entry *const cuda_kernels[] = {
    cuda_elementwise_kernels, cuda_fill_kernels,     cuda_matmul_kernels,
    cuda_where_clamp_kernels, cuda_reduce_kernels,   cuda_softmax_kernels,
    cuda_index_kernels,       cuda_conv_kernels,     cuda_optim_kernels,
    cuda_norm_kernels,        cuda_activation_kernels, cuda_embedding_kernels,
    cuda_attention_kernels,   cuda_divmod_kernels,   cuda_scatter_kernels,
    cuda_rnn_kernels,         cuda_interpolate_kernels, cuda_cdist_kernels,
    cuda_scan_sort_kernels,
};

static int cuda_init(const weft_options *options)
{
    (void)options;
    int rc = cuda_backend_register();
    if (rc == 0)
        rc = cuda_optim_ops_init();
    for (size_t i = 0; rc == 0 && i < sizeof cuda_kernels / sizeof *cuda_kernels; i++)
        rc = weft_kernel_register_table(cuda_device_type, WEFT_LAYOUT_STRIDED, cuda_kernels[i]);
    return rc;
}

static void cuda_fini(void)
{
    cuda_blas_shutdown();
    cuda_backend_shutdown();
}

WEFT_PLUGIN_MANIFEST("provides backend:cuda api:cuda\n");

static const struct weft_plugin cuda_plugin = {
    .base = WEFT_VTABLE(WEFT_KIND_PLUGIN, "cuda", struct weft_plugin),
    .manifest = weft_plugin_manifest,
    .version = WEFT_VERSION_STRING,
    .description = "CUDA devices: caching allocator, pinned host memory, kernels, cuBLAS",
    .probe = weft_cuda_probe_devices,
    .init = cuda_init,
    .fini = cuda_fini,
};

WEFT_PLUGIN_EXPORT const struct weft_plugin *weft_plugin_init(void)
{
    return &cuda_plugin;
}
