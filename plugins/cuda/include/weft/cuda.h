/* weft/cuda.h: what the CUDA plugin offers beyond its backend (torch.cuda's streams), for
 * programs and for other plugins (weft-sparse-cuda.so runs cuSPARSE on weft's stream).
 *
 * The table is a vtable of kind WEFT_KIND_API named "cuda" (weft/registry.h), which
 * weft-cuda.so registers; weft_cuda_api_get() finds it, loading the plugin on first use,
 * so nothing links weft-cuda.so. Streams travel as void * (cudaStream_t), so this header
 * needs no CUDA headers. */
#ifndef WEFT_CUDA_H
#define WEFT_CUDA_H

#include "weft/error.h"
#include "weft/registry.h"

#ifdef __cplusplus
extern "C" {
#endif

#define WEFT_CUDA_API_NAME "cuda"

struct weft_cuda_api {
    struct weft_vtable base; /* kind WEFT_KIND_API; name WEFT_CUDA_API_NAME */
    /* torch.cuda.current_stream(index): the stream weft queues device index's work on
     * (NULL: the legacy default stream). */
    void *(*current_stream)(int index);
    /* torch.cuda.set_stream: later work for the device is queued on `stream`. */
    int (*set_stream)(int index, void *stream);
    /* Tensor.record_stream(stream): the caching allocator's block whose base pointer is
     * `data` is not reused until the work queued on `stream` so far has finished. */
    int (*record_stream)(int index, void *data, void *stream);
};

/* The table (loading weft-cuda.so on first use), or NULL with an error when no plugin
 * provides it (no CUDA build) or it cannot run here (no CUDA device). */
static inline const struct weft_cuda_api *weft_cuda_api_get(void)
{
    const struct weft_cuda_api *api =
        (const struct weft_cuda_api *)weft_registry_get(WEFT_KIND_API, WEFT_CUDA_API_NAME);
    if (api && api->base.struct_size < sizeof(struct weft_cuda_api)) {
        weft_error_set(WEFT_ERR_PLUGIN, "api:cuda has %u bytes, fewer than this program's %zu "
                       "(rebuild the cuda plugin)",
                       api->base.struct_size, sizeof(struct weft_cuda_api));
        return NULL;
    }
    return api;
}

#ifdef __cplusplus
}
#endif
#endif
