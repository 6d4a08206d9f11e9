/* plugins/cuda/caching_allocator.h: PyTorch's CUDA caching allocator
 * (c10/cuda/CUDACachingAllocator.cpp), in plain C over struct alloc_ops.
 *
 * One allocator per device. Requests are rounded to 512 bytes and served from cached
 * blocks of the same stream (best fit by stream, size, address), split when the rest is
 * worth keeping; new memory comes from the device in segments (2 MiB for requests up to
 * 1 MiB, 20 MiB below 10 MiB, else the request rounded to 2 MiB). Freed blocks merge
 * with free neighbours and stay cached until empty_cache or an out-of-memory retry.
 * A block used on other streams (record_stream) is reused only after events recorded on
 * those streams at free time have completed. Every function is thread-safe. */
#ifndef WEFT_CUDA_CACHING_ALLOCATOR_H
#define WEFT_CUDA_CACHING_ALLOCATOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "alloc_ops.h"

/* PyTorch's constants. */
#define CA_MIN_BLOCK_SIZE ((size_t)512)           /* every size is a multiple of this */
#define CA_SMALL_SIZE ((size_t)1 << 20)           /* largest "small" request: 1 MiB */
#define CA_SMALL_BUFFER ((size_t)2 << 20)         /* small pool segment: 2 MiB */
#define CA_LARGE_BUFFER ((size_t)20 << 20)        /* large segment for requests < 10 MiB */
#define CA_MIN_LARGE_ALLOC ((size_t)10 << 20)     /* from here segments fit the request */
#define CA_ROUND_LARGE ((size_t)2 << 20)          /* ... rounded up to 2 MiB */
#define CA_MAX_SPLIT_UNLIMITED SIZE_MAX           /* PyTorch's default max_split_size */

struct caching_allocator_config {
    int device;            /* named in the out-of-memory message */
    /* Blocks at least this large are never split and only serve requests at least this
     * large (max_split_size_mb); CA_MAX_SPLIT_UNLIMITED (or 0) turns that off. */
    size_t max_split_size;
    struct alloc_ops ops;
};

/* Stat types: PyTorch's AGGREGATE, SMALL_POOL, LARGE_POOL. */
enum { CA_STAT_ALL = 0, CA_STAT_SMALL = 1, CA_STAT_LARGE = 2, CA_STAT_TYPES = 3 };

struct ca_stats {
    struct ca_stat allocation[CA_STAT_TYPES];       /* blocks handed out */
    struct ca_stat segment[CA_STAT_TYPES];          /* device allocations (cudaMalloc) */
    struct ca_stat active[CA_STAT_TYPES];           /* handed out or awaiting events */
    struct ca_stat inactive_split[CA_STAT_TYPES];   /* free pieces of split segments */
    struct ca_stat allocated_bytes[CA_STAT_TYPES];
    struct ca_stat reserved_bytes[CA_STAT_TYPES];
    struct ca_stat active_bytes[CA_STAT_TYPES];
    struct ca_stat inactive_split_bytes[CA_STAT_TYPES];
    struct ca_stat requested_bytes[CA_STAT_TYPES];  /* sizes as asked, before rounding */
    struct ca_stat oversize_allocations;            /* blocks >= max_split_size */
    struct ca_stat oversize_segments;
    int64_t num_alloc_retries; /* device allocations retried after freeing the cache */
    int64_t num_ooms;          /* requests that failed */
    int64_t num_cache_hits;    /* requests served from cached blocks (weft's addition) */
};

/* A block as the snapshot reports it. Blocks of one segment are consecutive, in
 * address order; segments are in address order. */
struct ca_block_info {
    void *ptr;
    size_t size;           /* rounded size of the block */
    size_t requested_size; /* as asked (0 for free blocks) */
    void *segment;         /* address of the segment holding it */
    size_t segment_size;
    ca_stream stream;
    bool small_pool;
    bool allocated;        /* handed out now */
    bool pending;          /* freed, waiting for events of other streams */
};

struct caching_allocator;

/* A new allocator, or NULL when out of host memory. The config is copied. */
struct caching_allocator *caching_allocator_new(const struct caching_allocator_config *cfg);
/* Waits for pending events and returns every segment to the device, including blocks
 * still handed out (for plugin unload and tests). NULL is ignored. */
void caching_allocator_destroy(struct caching_allocator *ca);

/* A block of at least size bytes (0 counts as 512) for use on stream: CA_OK with *out
 * set, or CA_ERR_OOM (after releasing the cache and retrying) with PyTorch's message in
 * why ("CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has ..."), or
 * CA_ERR_DEVICE with the device's reason. */
int caching_allocator_malloc(struct caching_allocator *ca, size_t size, ca_stream stream,
                             void **out, char *why, size_t why_size);
/* Returns a block to the cache (after events, when it was used on other streams).
 * NULL is ignored; CA_ERR_INVALID for a pointer the allocator did not hand out. */
int caching_allocator_free(struct caching_allocator *ca, void *ptr);
/* Marks the block holding ptr (as returned by malloc) as used on stream: at free time an
 * event is recorded there and the block is reused only once it completes. Uses on the
 * block's own stream are ignored. CA_ERR_INVALID for an unknown pointer. */
int caching_allocator_record_stream(struct caching_allocator *ca, void *ptr, ca_stream stream);
/* Waits for pending events, then returns every cached segment that is not split to the
 * device (torch.cuda.empty_cache). */
void caching_allocator_empty_cache(struct caching_allocator *ca);

void caching_allocator_get_stats(struct caching_allocator *ca, struct ca_stats *out);
/* peak := current for every statistic (torch.cuda.reset_peak_memory_stats). */
void caching_allocator_reset_peak_stats(struct caching_allocator *ca);
/* allocated and freed := 0, num_alloc_retries, num_ooms and num_cache_hits := 0. */
void caching_allocator_reset_accumulated_stats(struct caching_allocator *ca);

/* Every block of every segment; *out is malloc'd (caller frees), *n its length.
 * CA_ERR_OOM when out of host memory. */
int caching_allocator_snapshot(struct caching_allocator *ca, struct ca_block_info **out,
                               size_t *n);
/* The table torch.cuda.memory_summary() prints, as a malloc'd string (NULL when out of
 * host memory). abbreviated leaves out the per-pool rows. */
char *caching_allocator_summary(struct caching_allocator *ca, bool abbreviated);

/* The pieces of the algorithm, for tests and messages. */
size_t caching_allocator_round_size(size_t size);      /* multiple of 512, at least 512 */
size_t caching_allocator_segment_size(size_t rounded); /* device allocation for a request */
bool caching_allocator_is_small(size_t rounded);       /* served by the small pool */
/* PyTorch's format_size: "512 bytes", "1.50 KiB", "20.00 MiB", "1.50 GiB". */
char *caching_allocator_format_size(uint64_t size, char *buf, size_t buf_size);

#endif
