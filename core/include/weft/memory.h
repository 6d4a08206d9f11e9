/* weft/memory.h: devices and their memory as a user sees them, as torch.cuda's
 * device_count, synchronize, memory_stats, memory_summary and empty_cache, plus the
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
/* torch.cuda.memory_summary(device, abbreviated): a table of the device allocator's
 * statistics as a malloc'd string the caller frees (NULL with an error): the backend's
 * own memory_summary when it has one, else one made from weft_memory_stats. */
char *weft_memory_summary(weft_device dev, bool abbreviated);
/* torch.cuda.reset_peak_memory_stats; nothing when the backend keeps no peaks. */
void weft_reset_peak_memory_stats(weft_device dev);
int weft_set_num_threads(int n); /* every registered backend that takes threads */
int weft_get_num_threads(void);  /* the cpu backend's, or 1 */

#ifdef __cplusplus
}
#endif
#endif
