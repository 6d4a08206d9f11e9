/* weft/backend.h: the device backend vtable a plugin registers (one per device type).
 *
 * A backend is a vtable of kind WEFT_KIND_BACKEND (weft/registry.h) whose name is its
 * device type ("cpu", "cuda", "ref"); weft_register() returns the device type id it gets.
 * Fields are only appended and read through WEFT_VTABLE_HAS; a NULL optional method means
 * "not provided". Required: device_count, alloc, free, copy.
 *
 * Threading: every method may be called from any thread; backends lock what they share.
 */
#ifndef WEFT_BACKEND_H
#define WEFT_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "weft/registry.h"
#include "weft/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Allocator statistics, in bytes unless named otherwise. Append only; callers pass
 * their sizeof and backends fill what they know. */
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

struct weft_backend {
    struct weft_vtable base;       /* kind WEFT_KIND_BACKEND; name: the device type */

    /* Number of usable devices (0 when none). */
    int (*device_count)(void);
    /* Human-readable device name into buf ("NVIDIA H200", "x86_64 (AVX2)"); optional. */
    int (*device_name)(int index, char *buf, size_t size);

    /* Device memory. alloc returns NULL with an error set (out of memory: message in
     * PyTorch's words). free gets the size alloc was asked for. nbytes may be 0. */
    void *(*alloc)(int index, size_t nbytes);
    void (*free)(int index, void *ptr, size_t nbytes);

    /* Copies between two contiguous tensors of the same dtype and numel; one of them is
     * on this backend's device type, the other on the same type or on the cpu. When
     * non_blocking is true and the host side is pinned, the copy may return before it
     * ends (the backend protects the host block). */
    int (*copy)(weft_tensor *dst, const weft_tensor *src, bool non_blocking);

    /* Optional: waits for all work queued on the device. */
    int (*synchronize)(int index);
    /* Optional: pinned (page-locked) host memory for fast transfers. */
    void *(*host_alloc_pinned)(size_t nbytes);
    void (*host_free_pinned)(void *ptr, size_t nbytes);
    /* Optional: allocator statistics and cache release. */
    int (*memory_stats)(int index, struct weft_memory_stats *out);
    void (*empty_cache)(int index);
    /* Optional: worker threads used by kernels (and the BLAS library). */
    int (*set_num_threads)(int n);
    int (*get_num_threads)(void);
    /* Optional: a one-line description of what this build uses ("AVX2 FMA; OpenBLAS
     * 0.3.21 openmp", "sm_90; CUDA 13.0"). */
    const char *(*features)(void);

    /* Optional: a copy-only side queue per device, as PyTorch code prefetches on a side
     * stream. copy_side queues a host-to-device copy from pinned host memory there and
     * returns at once (the backend protects the host block); the copy starts after the
     * work already queued on dst's device, whose memory dst may reuse. wait_side makes the
     * work queued on device `index` from now on wait for every copy_side issued so far.
     * The data loader stages the next batch with them while the current one computes. */
    int (*copy_side)(weft_tensor *dst, const weft_tensor *src);
    int (*wait_side)(int index);
    /* Optional: torch.cuda.memory_summary(index, abbreviated): the allocator's own table,
     * malloc'd; weft_memory_summary() makes a generic one without it. */
    char *(*memory_summary)(int index, bool abbreviated);
    /* Optional: resets the peak figures of memory_stats. */
    void (*reset_peak_memory_stats)(int index);
};

/* The backend for a device type, loading the plugin that provides it on first use (its
 * manifest says "provides backend:cuda"). NULL with an error naming the device when
 * none. */
const struct weft_backend *weft_backend_get(int device_type);
/* The backend if registered, without loading anything. */
const struct weft_backend *weft_backend_find(int device_type);

/* Generic helpers over all registered backends. */
int weft_device_count(int device_type);
int weft_synchronize(weft_device dev);
/* copy_side when dev's backend has it: 1 when queued there, 0 when it has none (nothing
 * done: copy another way), negative on error. */
int weft_copy_side(weft_tensor *dst, const weft_tensor *src);
/* wait_side when dev's backend has it; 0 otherwise. */
int weft_wait_side(weft_device dev);
int weft_memory_stats(weft_device dev, struct weft_memory_stats *out);
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
