/* weft/memory.h: devices and their memory as a user sees them, as torch.cuda's
 * device_count, synchronize, memory_stats and empty_cache, plus the
 * kernels' thread count (torch.set_num_threads). Each call goes to the device's backend
 * (weft/backend.h), loading the plugin that provides it on first use. */
#ifndef WEFT_MEMORY_H
#define WEFT_MEMORY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "weft/device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Allocator statistics, in bytes unless named otherwise. Append only; callers pass
 * their sizeof and backends fill what they know. The cpu backend's figures are exact
 * while no other thread is allocating; its peak may miss a short-lived high by up to
 * 64 KiB per thread (small blocks are counted per thread: plugins/cpu/allocator.c). */
struct weft_memory_stats {
    size_t struct_size;
    uint64_t allocated_bytes;      /* handed out to tensors now */
    uint64_t reserved_bytes;       /* obtained from the system/driver now (incl. cache) */
    uint64_t peak_allocated_bytes;
    uint64_t peak_reserved_bytes;
    uint64_t num_allocs;           /* requests served */
    uint64_t num_frees;
    uint64_t num_cache_hits;       /* requests served from the cache */
    uint64_t num_alloc_retries;    /* allocations retried after freeing the cache */
    uint64_t num_ooms;
};

/* One statistic as torch.cuda.memory_stats() keys it ("allocated_bytes.all.current",
 * ".peak", ".allocated", ".freed"): its value now, its peak (since the last
 * reset_peak_memory_stats), and what went in and out in total. */
struct weft_memory_stat {
    int64_t current, peak, allocated, freed;
};

/* The pools of struct weft_memory_detail, as PyTorch's "all", "large_pool", "small_pool". */
enum { WEFT_MEMORY_POOL_ALL, WEFT_MEMORY_POOL_LARGE, WEFT_MEMORY_POOL_SMALL, WEFT_MEMORY_POOLS };

/* torch.cuda.memory_stats() per pool, what memory_summary's table shows (the backend's
 * optional memory_detail). Append only. Bytes are the allocator's rounded sizes. */
struct weft_memory_detail {
    size_t struct_size;
    struct weft_memory_stat allocated_bytes[WEFT_MEMORY_POOLS]; /* handed out */
    /* handed out, or freed but still in use by another stream */
    struct weft_memory_stat active_bytes[WEFT_MEMORY_POOLS];
    struct weft_memory_stat reserved_bytes[WEFT_MEMORY_POOLS]; /* from the system/driver */
    /* free parts of split blocks: what empty_cache cannot give back */
    struct weft_memory_stat inactive_split_bytes[WEFT_MEMORY_POOLS];
    struct weft_memory_stat allocation[WEFT_MEMORY_POOLS]; /* the same as counts */
    struct weft_memory_stat active[WEFT_MEMORY_POOLS];
    struct weft_memory_stat segment[WEFT_MEMORY_POOLS];
    struct weft_memory_stat inactive_split[WEFT_MEMORY_POOLS];
    struct weft_memory_stat oversize_allocations, oversize_segments;
    int64_t num_alloc_retries, num_ooms;
    /* For the table (static strings, NULL for PyTorch's words): the title's device word
     * ("CPU"), and lines saying what the pools and rows mean on this device. */
    const char *device_word;
    const char *notes;
};

/* One block of a device allocator, as torch.cuda.memory._snapshot() lists it (the
 * backend's optional memory_blocks method; weft_memory_snapshot in weft/profiler.h). */
struct weft_memory_block {
    void *ptr;
    size_t size;            /* the block's (rounded) size */
    size_t requested_size;  /* as asked; 0 for a free block */
    void *segment;          /* the device allocation holding it */
    size_t segment_size;
    int64_t stream;         /* 0 where the device has none */
    bool small_pool;
    bool allocated;         /* handed out now */
    bool pending;           /* freed, waiting for another stream's events */
};

/* Devices of a type (weft_device_type_id); 0 when its backend cannot run here. */
int weft_device_count(int device_type);
/* Waits for the work queued on dev. 0 or negative. */
int weft_synchronize(weft_device dev);
/* torch.cuda.memory_stats: fills *out (set out->struct_size first). 0 or negative. */
int weft_memory_stats(weft_device dev, struct weft_memory_stats *out);
/* torch.cuda.empty_cache: returns cached, unused blocks to the system. */
void weft_empty_cache(weft_device dev);
/* weft_memory_summary, torch.cuda.memory_summary, is libweft-ops' (weft/profiler.h). */
/* torch.cuda.reset_peak_memory_stats; nothing when the backend keeps no peaks. */
void weft_reset_peak_memory_stats(weft_device dev);
int weft_set_num_threads(int n); /* every registered backend that takes threads */
int weft_get_num_threads(void);  /* the cpu backend's, or 1 */

#ifdef __cplusplus
}
#endif
#endif
