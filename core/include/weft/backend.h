/* weft/backend.h: the device backend vtable a plugin registers (one per device type).
 *
 * A backend is a vtable of kind WEFT_KIND_BACKEND (weft/registry.h) whose name is its
 * device type ("cpu", "cuda", "ref"); weft_register() returns the device type id it gets.
 * Fields are only appended and read through WEFT_VTABLE_HAS; a NULL optional method means
 * "not provided". Required: device_count, alloc, free, copy. Every method gets the
 * backend's context first (ggml's {iface, context}: a backend keeps its state there, not
 * in globals); callers pass b->context.
 *
 * Threading: every method may be called from any thread; backends lock what they share.
 */
#ifndef WEFT_BACKEND_H
#define WEFT_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "weft/memory.h" /* struct weft_memory_stats and the user-facing calls */
#include "weft/registry.h"
#include "weft/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

struct weft_backend {
    struct weft_vtable base;       /* kind WEFT_KIND_BACKEND; name: the device type */
    /* ABI 3: the backend's state, handed to each method as its first argument (NULL for a
     * backend that keeps none). */
    void *context;

    /* Number of usable devices (0 when none). */
    int (*device_count)(void *context);
    /* Human-readable device name into buf ("NVIDIA H200", "x86_64 (AVX2)"); optional. */
    int (*device_name)(void *context, int index, char *buf, size_t size);

    /* Device memory. alloc returns NULL with an error set (out of memory: message in
     * PyTorch's words). free gets the size alloc was asked for. nbytes may be 0. */
    void *(*alloc)(void *context, int index, size_t nbytes);
    void (*free)(void *context, int index, void *ptr, size_t nbytes);

    /* Copies between two contiguous tensors of the same dtype and numel; one of them is
     * on this backend's device type, the other on the same type or on the cpu. When
     * non_blocking is true and the host side is pinned, the copy may return before it
     * ends (the backend protects the host block). */
    int (*copy)(void *context, weft_tensor *dst, const weft_tensor *src, bool non_blocking);

    /* Optional: waits for all work queued on the device. */
    int (*synchronize)(void *context, int index);
    /* Optional: pinned (page-locked) host memory for fast transfers. */
    void *(*host_alloc_pinned)(void *context, size_t nbytes);
    void (*host_free_pinned)(void *context, void *ptr, size_t nbytes);
    /* Optional: allocator statistics and cache release. */
    int (*memory_stats)(void *context, int index, struct weft_memory_stats *out);
    void (*empty_cache)(void *context, int index);
    /* Optional: worker threads used by kernels (and the BLAS library). */
    int (*set_num_threads)(void *context, int n);
    int (*get_num_threads)(void *context);
    /* Optional: a one-line description of what this build uses ("AVX2 FMA; OpenBLAS
     * 0.3.21 openmp", "sm_90; CUDA 13.0"). */
    const char *(*features)(void *context);

    /* Optional: a copy-only side queue per device, as PyTorch code prefetches on a side
     * stream. copy_side queues a host-to-device copy from pinned host memory there and
     * returns at once (the backend protects the host block); the copy starts after the
     * work already queued on dst's device, whose memory dst may reuse. wait_side makes the
     * work queued on device `index` from now on wait for every copy_side issued so far.
     * The data loader stages the next batch with them while the current one computes. */
    int (*copy_side)(void *context, weft_tensor *dst, const weft_tensor *src);
    int (*wait_side)(void *context, int index);
    /* Optional: torch.cuda.memory_summary(index, abbreviated): the allocator's own table,
     * malloc'd; weft_memory_summary() makes a generic one without it. */
    char *(*memory_summary)(void *context, int index, bool abbreviated);
    /* Optional: resets the peak figures of memory_stats. */
    void (*reset_peak_memory_stats)(void *context, int index);
    /* Optional: the allocator's blocks, segment by segment in address order, as a
     * malloc'd array of *n (caller frees); a backend that does not track live blocks lists its cached ones.
     * For weft_memory_snapshot. 0 or negative. */
    int (*memory_blocks)(void *context, int index, struct weft_memory_block **out, size_t *n);
    /* Optional: the allocator's statistics per pool, for
     * weft_memory_summary's table (weft/profiler.h). Fills what out->struct_size holds.
     * 0 or negative. */
    int (*memory_detail)(void *context, int index, struct weft_memory_detail *out);

    /* Appended in ABI 3 (read through WEFT_VTABLE_HAS). Autocast on this device type, as
     * PyTorch keeps a policy per device: which op list its tensors follow, by name ("cpu":
     * PyTorch 1.13's AutocastCPU lists; "cuda": its CUDA lists, weft/autocast_policy.h),
     * and the low-precision dtypes a scope may name (WEFT_DTYPE_BIT mask; PyTorch 1.13's
     * CPU takes bfloat16 only). Absent or NULL / 0: "cuda", bfloat16 and float16. */
    const char *autocast_policy;
    uint32_t autocast_dtypes;
};

/* The backend for a device type, loading the plugin that provides it on first use (its
 * manifest says "provides backend:cuda"). NULL with an error naming the device when
 * none. */
const struct weft_backend *weft_backend_get(int device_type);
/* The backend if registered, without loading anything. */
const struct weft_backend *weft_backend_find(int device_type);

/* True when dev's backend is registered and emulates its devices on the host (its
 * features() begin with "emulated", as the CUDA plugin's build for weft's CUDA emulator
 * says): results check the code, timings mean nothing. Apps name such a device
 * "cuda:0 (emulated)" and weft-bench refuses to time it. */
static inline bool weft_device_is_emulated(weft_device dev)
{
    const struct weft_backend *b = weft_backend_find(dev.type);
    const char *f = b && b->features ? b->features(b->context) : NULL;
    return f && strncmp(f, "emulated", 8) == 0;
}

/* Helpers over all registered backends; the user-facing ones (device_count, synchronize,
 * memory stats, empty_cache, threads) are in weft/memory.h. */
/* copy_side when dev's backend has it: 1 when queued there, 0 when it has none (nothing
 * done: copy another way), negative on error. */
int weft_copy_side(weft_tensor *dst, const weft_tensor *src);
/* wait_side when dev's backend has it; 0 otherwise. */
int weft_wait_side(weft_device dev);

#ifdef __cplusplus
}
#endif
#endif
