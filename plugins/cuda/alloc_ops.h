/* plugins/cuda/alloc_ops.h: what the CUDA allocators need from a device, as function
 * pointers, so that their logic is plain C that runs over a fake device in the tests
 * (no GPU, no CUDA toolkit) and over the CUDA runtime in the plugin. */
#ifndef WEFT_CUDA_ALLOC_OPS_H
#define WEFT_CUDA_ALLOC_OPS_H

#include <stddef.h>
#include <stdint.h>

/* A stream: an opaque handle compared by value (cudaStream_t; NULL is the default
 * stream). Blocks are cached per stream. */
typedef void *ca_stream;

/* Status codes of the allocators and of the raw ops. */
enum {
    CA_OK = 0,
    CA_ERR_OOM = -1,     /* the device (or host) has no memory for the request */
    CA_ERR_DEVICE = -2,  /* any other failure of the device */
    CA_ERR_INVALID = -3, /* a pointer the allocator did not hand out, or a bad argument */
};

/* One statistic, as PyTorch's Stat: current value, its peak, and the running totals of
 * increases (allocated) and decreases (freed). */
struct ca_stat {
    int64_t current, peak, allocated, freed;
};

struct alloc_ops {
    void *ctx; /* passed to every op */

    /* Raw memory (cudaMalloc / cudaFree, or cudaHostAlloc / cudaFreeHost). alloc returns
     * CA_OK with *ptr set, CA_ERR_OOM when out of memory, or CA_ERR_DEVICE with the
     * reason in why. */
    int (*alloc)(void *ctx, size_t size, void **ptr, char *why, size_t why_size);
    void (*free)(void *ctx, void *ptr, size_t size);
    /* Free and total device memory (cudaMemGetInfo), for the out-of-memory message.
     * Optional: NULL reports 0 and 0. */
    void (*mem_info)(void *ctx, size_t *free_bytes, size_t *total_bytes);

    /* Events: record returns a new event recorded on stream now, or NULL when it cannot
     * (the allocator then waits for the stream instead). query returns 1 when the work
     * before the event has completed, 0 when not yet (an error counts as completed: the
     * device is unusable anyway, and waiting forever would not help). synchronize waits
     * for the event; destroy releases it. */
    void *(*event_record)(void *ctx, ca_stream stream);
    int (*event_query)(void *ctx, void *event);
    void (*event_synchronize)(void *ctx, void *event);
    void (*event_destroy)(void *ctx, void *event);
    /* Waits for all work queued on stream (the fallback when record fails). */
    void (*stream_synchronize)(void *ctx, ca_stream stream);
};

#endif
