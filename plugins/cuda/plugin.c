/* plugins/cuda/plugin.c: the CUDA plugin's descriptor, probe and set-up. */
#include <stdio.h>

#include <weft/plugin.h>
#include <weft/version.h>

#include "cuda_plugin.h"
#include "cuda_probe.h"

static int cuda_init(const weft_options *options)
{
    (void)options;
    int (*const steps[])(void) = {
        cuda_backend_register,
        cuda_register_elementwise_kernels,
        cuda_register_fill_kernels,
        cuda_register_matmul_kernels,
        cuda_register_where_clamp_kernels,
        cuda_register_reduce_kernels,
        cuda_register_softmax_kernels,
        cuda_register_index_kernels,
        cuda_register_conv_kernels,
        cuda_register_optim_kernels,
        cuda_register_norm_kernels,
        cuda_register_activation_kernels,
        cuda_register_embedding_kernels,
        cuda_register_attention_kernels,
        cuda_register_divmod_kernels,
        cuda_register_scatter_kernels,
        cuda_register_rnn_kernels,
        cuda_register_interpolate_kernels,
        cuda_register_cdist_kernels,
    };
    for (size_t i = 0; i < sizeof steps / sizeof *steps; i++) {
        int rc = steps[i]();
        if (rc != 0)
            return rc;
    }
    return 0;
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
    .probe = cuda_probe_devices,
    .init = cuda_init,
    .fini = cuda_fini,
};

WEFT_PLUGIN_EXPORT const struct weft_plugin *weft_plugin_init(void)
{
    return &cuda_plugin;
}
