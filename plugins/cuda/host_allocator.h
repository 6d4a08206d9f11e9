/* plugins/cuda/host_allocator.h: PyTorch's caching allocator for pinned (page-locked)
 * host memory (CachingHostAllocator), in plain C over struct alloc_ops.
 *
 * Sizes are rounded up to a power of two and blocks are never split: one free list per
 * size. An asynchronous copy that reads or writes a block records an event on its
 * stream (record_event); a freed block returns to its list only once all of its events
 * have completed, so the host memory is not reused while a copy still uses it. Every
 * function is thread-safe. */
#ifndef WEFT_CUDA_HOST_ALLOCATOR_H
#define WEFT_CUDA_HOST_ALLOCATOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "alloc_ops.h"

struct host_stats {
    struct ca_stat allocation;      /* blocks handed out */
    struct ca_stat segment;         /* blocks obtained from the driver (cudaHostAlloc) */
    struct ca_stat allocated_bytes; /* bytes of the blocks handed out (rounded sizes) */
    struct ca_stat reserved_bytes;  /* bytes obtained from the driver */
    int64_t num_cache_hits;         /* requests served from a free list */
    int64_t num_pending_events;     /* copies not known to be finished */
};

struct host_allocator;

/* A new allocator (ops.mem_info is not used), or NULL when out of host memory. */
struct host_allocator *host_allocator_new(const struct alloc_ops *ops);
/* Waits for all events and frees every block, including those still handed out. */
void host_allocator_destroy(struct host_allocator *ha);

/* A pinned block of host_allocator_round_size(size) bytes (size 0 counts as 1): CA_OK
 * with *out set, else CA_ERR_OOM or CA_ERR_DEVICE with the reason in why. */
int host_allocator_malloc(struct host_allocator *ha, size_t size, void **out, char *why,
                          size_t why_size);
/* Returns the block at ptr to its free list, at once or when its events complete. NULL
 * is ignored; CA_ERR_INVALID for a pointer this allocator did not hand out. */
int host_allocator_free(struct host_allocator *ha, void *ptr);
/* Records an event on stream for the handed-out block containing ptr (any address
 * inside it): 1 when recorded, 0 when ptr is not in one of this allocator's blocks
 * (pageable memory: nothing to protect), CA_ERR_INVALID when its block is already
 * free, CA_ERR_OOM when out of host memory. */
int host_allocator_record_event(struct host_allocator *ha, const void *ptr, ca_stream stream);
/* Is ptr inside a block this allocator handed out? */
bool host_allocator_contains(struct host_allocator *ha, const void *ptr);
/* Moves blocks whose events completed to their lists, then frees every listed block. */
void host_allocator_empty_cache(struct host_allocator *ha);
void host_allocator_get_stats(struct host_allocator *ha, struct host_stats *out);

/* The smallest power of two >= size (1 for 0); 0 when none fits in size_t. */
size_t host_allocator_round_size(size_t size);

#endif
