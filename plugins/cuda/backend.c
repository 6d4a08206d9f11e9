/* plugins/cuda/backend.c: the cuda device backend: devices, memory through the caching
 * allocators, copies, synchronisation, statistics.
 *
 * The allocators (caching_allocator.c, host_allocator.c) know nothing of CUDA; this file
 * gives them the CUDA runtime as their struct alloc_ops. One device allocator per
 * device, made on first use; one pinned host allocator for the process. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft/cuda.h>
#include <weft/dlpack.h>
#include <weft/plugin.h>

#include "caching_allocator.h"
#include "cuda_plugin.h"
#include "host_allocator.h"

struct device_state {
    int index;
    struct caching_allocator *allocator; /* NULL until the first allocation */
    cudaStream_t stream;                 /* the current stream; NULL: legacy default */
    /* The side queue for prefetching copies (copy_side), made on first use: */
    cudaStream_t copy_stream;            /* non-blocking w.r.t. the legacy stream */
    cudaEvent_t compute_mark;            /* where the current stream was at a copy */
    cudaEvent_t copies_done;             /* the last side copy queued */
};

/* Under weft's CUDA emulator (testkit/cuda_emu) the caching allocator's blocks are
 * announced to it, so that AddressSanitizer sees a kernel reach past its tensor into the
 * next block, or into a block gone back to the cache; on a GPU these are nothing. */
#ifdef WEFT_CUDA_EMULATED
#define EMU_BLOCK_HANDED_OUT(ptr, nbytes, stream)                                             \
    wemu_annotate_alloc((ptr), (nbytes), caching_allocator_round_size(nbytes), (stream))
#define EMU_BLOCK_RELEASED(ptr, size) wemu_annotate_free((ptr), (size))
#else
#define EMU_BLOCK_HANDED_OUT(ptr, nbytes, stream) ((void)0)
#define EMU_BLOCK_RELEASED(ptr, size) ((void)0)
#endif

static struct device_state devices[CUDA_MAX_DEVICES];
static int ndevices;
static struct host_allocator *host_allocator;
static pthread_mutex_t state_lock = PTHREAD_MUTEX_INITIALIZER;

int cuda_check(cudaError_t err, const char *call, const char *file, int line)
{
    if (err == cudaSuccess)
        return 0;
    /* Clears the error unless it is sticky (then the context is lost anyway). */
    (void)cudaGetLastError();
    const char *base = strrchr(file, '/');
    return weft_error_set(WEFT_ERR_DEVICE, "CUDA error: %s (%s at %s:%d)", cudaGetErrorString(err),
                          call, base ? base + 1 : file, line);
}

int cuda_device_count(void)
{
    return ndevices;
}

static int check_index(int index)
{
    if (index >= 0 && index < ndevices)
        return 0;
    return weft_error_set(WEFT_ERR_DEVICE, "invalid device cuda:%d: only %d CUDA device(s) present",
                          index, ndevices);
}

int cuda_set_device(int index)
{
    if (check_index(index) != 0)
        return WEFT_ERR_DEVICE;
    int current = -1;
    if (cudaGetDevice(&current) == cudaSuccess && current == index)
        return 0;
    return CUDA_CHECK(cudaSetDevice(index));
}

cudaStream_t cuda_current_stream(int index)
{
    if (index < 0 || index >= ndevices)
        return NULL;
    return __atomic_load_n(&devices[index].stream, __ATOMIC_ACQUIRE);
}

/* ---- the CUDA runtime as the allocators' device ------------------------------------ */

/* Writes "CUDA error: ..." for a failed call, and says whether it was out of memory. */
static int raw_status(cudaError_t err, const char *what, size_t size, char *why, size_t why_size)
{
    (void)cudaGetLastError();
    snprintf(why, why_size, "CUDA error: %s (%s of %zu bytes)", cudaGetErrorString(err), what,
             size);
    return err == cudaErrorMemoryAllocation ? CA_ERR_OOM : CA_ERR_DEVICE;
}

static int device_alloc(void *ctx, size_t size, void **ptr, char *why, size_t why_size)
{
    const struct device_state *d = ctx;
    cudaError_t err = cudaSetDevice(d->index);
    if (err == cudaSuccess)
        err = cudaMalloc(ptr, size);
    if (err == cudaSuccess)
        EMU_BLOCK_RELEASED(*ptr, size); /* a segment: no block of it handed out yet */
    return err == cudaSuccess ? CA_OK : raw_status(err, "cudaMalloc", size, why, why_size);
}

/* Errors are ignored: at process exit the runtime may already be unloading, and there
 * is nobody to tell. */
static void device_free(void *ctx, void *ptr, size_t size)
{
    const struct device_state *d = ctx;
    if (cudaSetDevice(d->index) != cudaSuccess || cudaFree(ptr) != cudaSuccess)
        (void)cudaGetLastError();
}

static void device_mem_info(void *ctx, size_t *free_bytes, size_t *total_bytes)
{
    const struct device_state *d = ctx;
    *free_bytes = *total_bytes = 0;
    if (cudaSetDevice(d->index) != cudaSuccess ||
        cudaMemGetInfo(free_bytes, total_bytes) != cudaSuccess)
        (void)cudaGetLastError();
}

/* Events are created on the current device; callers made it the stream's device. */
static void *event_record(void *ctx, ca_stream stream)
{
    const struct device_state *d = ctx;
    cudaEvent_t event = NULL;
    if (d && cudaSetDevice(d->index) != cudaSuccess)
        goto fail;
    if (cudaEventCreateWithFlags(&event, cudaEventDisableTiming) != cudaSuccess)
        goto fail;
    if (cudaEventRecord(event, (cudaStream_t)stream) != cudaSuccess) {
        cudaEventDestroy(event);
        goto fail;
    }
    return event;
fail:
    (void)cudaGetLastError();
    return NULL;
}

static int event_query(void *ctx, void *event)
{
    cudaError_t err = cudaEventQuery((cudaEvent_t)event);
    if (err == cudaErrorNotReady) {
        (void)cudaGetLastError();
        return 0;
    }
    if (err != cudaSuccess)
        (void)cudaGetLastError();
    return 1;
}

static void event_synchronize(void *ctx, void *event)
{
    if (cudaEventSynchronize((cudaEvent_t)event) != cudaSuccess)
        (void)cudaGetLastError();
}

static void event_destroy(void *ctx, void *event)
{
    if (cudaEventDestroy((cudaEvent_t)event) != cudaSuccess)
        (void)cudaGetLastError();
}

static void stream_synchronize(void *ctx, ca_stream stream)
{
    if (cudaStreamSynchronize((cudaStream_t)stream) != cudaSuccess)
        (void)cudaGetLastError();
}

static int pinned_alloc(void *ctx, size_t size, void **ptr, char *why, size_t why_size)
{
    cudaError_t err = cudaHostAlloc(ptr, size, cudaHostAllocDefault);
    return err == cudaSuccess ? CA_OK : raw_status(err, "cudaHostAlloc", size, why, why_size);
}

static void pinned_free(void *ctx, void *ptr, size_t size)
{
    if (cudaFreeHost(ptr) != cudaSuccess)
        (void)cudaGetLastError();
}

static struct alloc_ops device_ops(struct device_state *d)
{
    return (struct alloc_ops){
        .ctx = d,
        .alloc = device_alloc,
        .free = device_free,
        .mem_info = device_mem_info,
        .event_record = event_record,
        .event_query = event_query,
        .event_synchronize = event_synchronize,
        .event_destroy = event_destroy,
        .stream_synchronize = stream_synchronize,
    };
}

/* ---- allocators ---------------------------------------------------------------------- */

/* PYTORCH_CUDA_ALLOC_CONF's max_split_size_mb, read from WEFT_CUDA_MAX_SPLIT_SIZE_MB
 * (PyTorch requires more than 20 MiB; smaller values are raised to that). */
static size_t max_split_size(void)
{
    const char *text = getenv("WEFT_CUDA_MAX_SPLIT_SIZE_MB");
    char *end;
    unsigned long long mb = text ? strtoull(text, &end, 10) : 0;
    if (!text || end == text || mb == 0)
        return CA_MAX_SPLIT_UNLIMITED;
    if (mb <= CA_LARGE_BUFFER >> 20)
        mb = (CA_LARGE_BUFFER >> 20) + 1;
    return (size_t)mb << 20;
}

/* The device's allocator, made on first use; NULL with an error. */
static struct caching_allocator *device_allocator(int index)
{
    if (check_index(index) != 0)
        return NULL;
    struct device_state *d = &devices[index];
    struct caching_allocator *ca = __atomic_load_n(&d->allocator, __ATOMIC_ACQUIRE);
    if (ca)
        return ca;
    pthread_mutex_lock(&state_lock);
    ca = d->allocator;
    if (!ca) {
        struct caching_allocator_config cfg = {
            .device = index, .max_split_size = max_split_size(), .ops = device_ops(d)};
        ca = caching_allocator_new(&cfg);
        __atomic_store_n(&d->allocator, ca, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&state_lock);
    if (!ca)
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "cuda:%d: out of host memory for the allocator",
                       index);
    return ca;
}

static struct host_allocator *pinned_allocator(void)
{
    struct host_allocator *ha = __atomic_load_n(&host_allocator, __ATOMIC_ACQUIRE);
    if (ha)
        return ha;
    pthread_mutex_lock(&state_lock);
    ha = host_allocator;
    if (!ha) {
        struct alloc_ops ops = device_ops(NULL);
        ops.alloc = pinned_alloc;
        ops.free = pinned_free;
        ops.mem_info = NULL;
        ha = host_allocator_new(&ops);
        __atomic_store_n(&host_allocator, ha, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&state_lock);
    if (!ha)
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory for the pinned allocator");
    return ha;
}

static int allocator_error(int rc, const char *why)
{
    return weft_error_set(rc == CA_ERR_OOM ? WEFT_ERR_OUT_OF_MEMORY : WEFT_ERR_DEVICE, "%s", why);
}

static void *cuda_alloc(void *context, int index, size_t nbytes)
{
    struct caching_allocator *ca = device_allocator(index);
    if (!ca)
        return NULL;
    void *ptr = NULL;
    char why[512];
    int rc = caching_allocator_malloc(ca, nbytes, cuda_current_stream(index), &ptr, why,
                                      sizeof why);
    if (rc != CA_OK)
        allocator_error(rc, why);
    else
        EMU_BLOCK_HANDED_OUT(ptr, nbytes, cuda_current_stream(index));
    return ptr;
}

static void cuda_free(void *context, int index, void *ptr, size_t nbytes)
{
    if (!ptr || index < 0 || index >= ndevices || !devices[index].allocator)
        return;
    EMU_BLOCK_RELEASED(ptr, caching_allocator_round_size(nbytes));
    if (caching_allocator_free(devices[index].allocator, ptr) != CA_OK)
        fprintf(stderr, "weft-cuda: free of %p, which cuda:%d's allocator did not hand out\n", ptr,
                index);
}

static void *cuda_host_alloc_pinned(void *context, size_t nbytes)
{
    struct host_allocator *ha = pinned_allocator();
    if (!ha)
        return NULL;
    void *ptr = NULL;
    char why[512];
    int rc = host_allocator_malloc(ha, nbytes, &ptr, why, sizeof why);
    if (rc != CA_OK)
        allocator_error(rc, why);
    return ptr;
}

static void cuda_host_free_pinned(void *context, void *ptr, size_t nbytes)
{
    (void)nbytes;
    struct host_allocator *ha = __atomic_load_n(&host_allocator, __ATOMIC_ACQUIRE);
    if (ptr && (!ha || host_allocator_free(ha, ptr) != CA_OK))
        fprintf(stderr, "weft-cuda: free of %p, which the pinned allocator did not hand out\n",
                ptr);
}

/* ---- copies ---------------------------------------------------------------------------- */

/* Page-locked host memory: ours, or registered/allocated by someone else. */
static bool is_pinned(const void *host)
{
    struct host_allocator *ha = __atomic_load_n(&host_allocator, __ATOMIC_ACQUIRE);
    if (ha && host_allocator_contains(ha, host))
        return true;
    struct cudaPointerAttributes attr;
    if (cudaPointerGetAttributes(&attr, host) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    return attr.type == cudaMemoryTypeHost;
}

/* Device to device: queued on the stream, never waited for (stream order protects both
 * blocks, as in PyTorch). Between two devices the copy runs on the destination's current
 * stream, so that stream first waits for the work already queued on the source's (which
 * may still be writing src), and the source's block is recorded on the destination's
 * stream, so that it is not reused before the copy has read it; the source's stream
 * then waits for the copy. `src_block` is the base pointer of the source's storage.
 * Caller made dst_dev current; it is current again on return. */
static int copy_device_to_device(void *dst, int dst_dev, const void *src, int src_dev,
                                 void *src_block, size_t nbytes)
{
    cudaStream_t stream = cuda_current_stream(dst_dev);
    if (dst_dev == src_dev)
        return CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, stream));
    cudaEvent_t src_ready = NULL;
    int rc = cuda_set_device(src_dev);
    if (rc == 0)
        rc = CUDA_CHECK(cudaEventCreateWithFlags(&src_ready, cudaEventDisableTiming));
    if (rc == 0)
        rc = CUDA_CHECK(cudaEventRecord(src_ready, cuda_current_stream(src_dev)));
    if (rc == 0)
        rc = cuda_set_device(dst_dev);
    if (rc == 0)
        rc = CUDA_CHECK(cudaStreamWaitEvent(stream, src_ready, 0));
    if (rc == 0)
        rc = CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_dev, src, src_dev, nbytes, stream));
    if (rc == 0) { /* a block of our allocator: kept until the copy is done */
        struct caching_allocator *ca = __atomic_load_n(&devices[src_dev].allocator,
                                                       __ATOMIC_ACQUIRE);
        if (ca && src_block)
            (void)caching_allocator_record_stream(ca, src_block, (ca_stream)stream);
    }
    /* And the other way (PyTorch's two-way barrier): later work on the source's stream,
     * an in-place write to src say, waits until the copy has read it. */
    cudaEvent_t copied = NULL;
    if (rc == 0)
        rc = CUDA_CHECK(cudaEventCreateWithFlags(&copied, cudaEventDisableTiming));
    if (rc == 0)
        rc = CUDA_CHECK(cudaEventRecord(copied, stream));
    if (rc == 0 && (rc = cuda_set_device(src_dev)) == 0)
        rc = CUDA_CHECK(cudaStreamWaitEvent(cuda_current_stream(src_dev), copied, 0));
    if (rc == 0)
        rc = cuda_set_device(dst_dev);
    /* destroying a recorded event is fine: the waits already queued hold */
    if (src_ready)
        (void)cudaEventDestroy(src_ready);
    if (copied)
        (void)cudaEventDestroy(copied);
    return rc;
}

/* Host <-> device on the current stream. Returns before the copy ends only when asked
 * to and the host side is pinned; our pinned blocks then get an event so that they are
 * not reused before the copy is done. Otherwise (pageable memory, or blocking copies)
 * it waits, as PyTorch's copy_ does. */
static int copy_host_device(void *dst, const void *src, size_t nbytes, enum cudaMemcpyKind kind,
                            int index, bool non_blocking)
{
    cudaStream_t stream = cuda_current_stream(index);
    const void *host = kind == cudaMemcpyHostToDevice ? src : dst;
    if (CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, kind, stream)) != 0)
        return WEFT_ERR_DEVICE;
    if (non_blocking && is_pinned(host)) {
        struct host_allocator *ha = __atomic_load_n(&host_allocator, __ATOMIC_ACQUIRE);
        if (!ha || host_allocator_record_event(ha, host, stream) >= 0)
            return 0;
        /* No event could be kept: fall through and wait instead. */
    }
    return CUDA_CHECK(cudaStreamSynchronize(stream));
}

static int cuda_copy(void *context, weft_tensor *dst, const weft_tensor *src, bool non_blocking)
{
    size_t nbytes = (size_t)weft_tensor_numel(src) * weft_tensor_itemsize(src);
    if (nbytes == 0)
        return 0;
    void *d = weft_tensor_data(dst);
    const void *s = weft_tensor_data(src);
    bool dst_on_device = dst->device.type != WEFT_DEVICE_CPU;
    bool src_on_device = src->device.type != WEFT_DEVICE_CPU;
    int index = dst_on_device ? dst->device.index : src->device.index;
    if (cuda_set_device(index) != 0)
        return WEFT_ERR_DEVICE;
    if (dst_on_device && src_on_device)
        return copy_device_to_device(d, dst->device.index, s, src->device.index,
                                     src->storage ? src->storage->data : NULL, nbytes);
    enum cudaMemcpyKind kind = dst_on_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
    return copy_host_device(d, s, nbytes, kind, index, non_blocking);
}

/* ---- the side queue ------------------------------------------------------------------ */

/* Creates the device's copy stream and its two events once. Caller made index current. */
static int side_queue(int index, struct device_state **out)
{
    struct device_state *d = &devices[index];
    int rc = 0;
    pthread_mutex_lock(&state_lock);
    if (!d->copy_stream) {
        cudaStream_t s = NULL;
        cudaEvent_t mark = NULL, done = NULL;
        rc = CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        if (rc == 0)
            rc = CUDA_CHECK(cudaEventCreateWithFlags(&mark, cudaEventDisableTiming));
        if (rc == 0)
            rc = CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
        if (rc == 0) {
            d->compute_mark = mark;
            d->copies_done = done;
            d->copy_stream = s; /* last: it says the other two are set */
        } else {
            if (done)
                cudaEventDestroy(done);
            if (mark)
                cudaEventDestroy(mark);
            if (s)
                cudaStreamDestroy(s);
        }
    }
    pthread_mutex_unlock(&state_lock);
    *out = d;
    return rc;
}

/* The copy waits for the work queued so far on the current stream (dst may be a cached
 * block that work still uses), then runs beside what is queued later. The pinned source
 * block is not reused before the copy ends (its event is recorded on the side stream). */
static int cuda_copy_side(void *context, weft_tensor *dst, const weft_tensor *src)
{
    size_t nbytes = (size_t)weft_tensor_numel(src) * weft_tensor_itemsize(src);
    int index = dst->device.index;
    if (nbytes == 0)
        return 0;
    if (cuda_set_device(index) != 0)
        return WEFT_ERR_DEVICE;
    const void *host = weft_tensor_data(src);
    if (!is_pinned(host)) /* pageable: an ordinary blocking copy, as PyTorch */
        return copy_host_device(weft_tensor_data(dst), host, nbytes, cudaMemcpyHostToDevice,
                                index, false);
    struct device_state *d;
    if (side_queue(index, &d) != 0)
        return WEFT_ERR_DEVICE;
    cudaStream_t compute = cuda_current_stream(index);
    if (CUDA_CHECK(cudaEventRecord(d->compute_mark, compute)) != 0 ||
        CUDA_CHECK(cudaStreamWaitEvent(d->copy_stream, d->compute_mark, 0)) != 0 ||
        CUDA_CHECK(cudaMemcpyAsync(weft_tensor_data(dst), host, nbytes, cudaMemcpyHostToDevice,
                                   d->copy_stream)) != 0)
        return WEFT_ERR_DEVICE;
    struct host_allocator *ha = __atomic_load_n(&host_allocator, __ATOMIC_ACQUIRE);
    if (ha && host_allocator_contains(ha, host) &&
        host_allocator_record_event(ha, host, d->copy_stream) < 0 &&
        CUDA_CHECK(cudaStreamSynchronize(d->copy_stream)) != 0)
        return WEFT_ERR_DEVICE;
    return CUDA_CHECK(cudaEventRecord(d->copies_done, d->copy_stream));
}

/* A stream waits for an event's latest record, so one event covers every side copy
 * queued so far. */
static int cuda_wait_side(void *context, int index)
{
    if (check_index(index) != 0)
        return WEFT_ERR_DEVICE;
    struct device_state *d = &devices[index];
    if (!__atomic_load_n(&d->copy_stream, __ATOMIC_ACQUIRE))
        return 0; /* no side copy was ever queued */
    if (cuda_set_device(index) != 0)
        return WEFT_ERR_DEVICE;
    return CUDA_CHECK(cudaStreamWaitEvent(cuda_current_stream(index), d->copies_done, 0));
}

/* ---- the rest of the vtable -------------------------------------------------------- */

static int cuda_device_name(void *context, int index, char *buf, size_t size)
{
    if (check_index(index) != 0)
        return WEFT_ERR_DEVICE;
    struct cudaDeviceProp prop;
    if (CUDA_CHECK(cudaGetDeviceProperties(&prop, index)) != 0)
        return WEFT_ERR_DEVICE;
    snprintf(buf, size, "%s", prop.name);
    return 0;
}

static int cuda_synchronize(void *context, int index)
{
    if (cuda_set_device(index) != 0)
        return WEFT_ERR_DEVICE;
    return CUDA_CHECK(cudaDeviceSynchronize());
}

static int cuda_memory_stats(void *context, int index, struct weft_memory_stats *out)
{
    if (check_index(index) != 0)
        return WEFT_ERR_DEVICE;
    struct weft_memory_stats m = {.struct_size = out->struct_size};
    struct caching_allocator *ca = __atomic_load_n(&devices[index].allocator, __ATOMIC_ACQUIRE);
    if (ca) {
        struct ca_stats s;
        caching_allocator_get_stats(ca, &s);
        m.allocated_bytes = (uint64_t)s.allocated_bytes[CA_STAT_ALL].current;
        m.reserved_bytes = (uint64_t)s.reserved_bytes[CA_STAT_ALL].current;
        m.peak_allocated_bytes = (uint64_t)s.allocated_bytes[CA_STAT_ALL].peak;
        m.peak_reserved_bytes = (uint64_t)s.reserved_bytes[CA_STAT_ALL].peak;
        m.num_allocs = (uint64_t)s.allocation[CA_STAT_ALL].allocated;
        m.num_frees = (uint64_t)s.allocation[CA_STAT_ALL].freed;
        m.num_cache_hits = (uint64_t)s.num_cache_hits;
        m.num_alloc_retries = (uint64_t)s.num_alloc_retries;
        m.num_ooms = (uint64_t)s.num_ooms;
    }
    /* Only the fields the caller's struct has. */
    size_t size = out->struct_size < sizeof m ? out->struct_size : sizeof m;
    memcpy(out, &m, size);
    return 0;
}

static void cuda_empty_cache(void *context, int index)
{
    if (index < 0 || index >= ndevices)
        return;
    struct caching_allocator *ca = __atomic_load_n(&devices[index].allocator, __ATOMIC_ACQUIRE);
    if (ca && cuda_set_device(index) == 0)
        caching_allocator_empty_cache(ca);
}

/* "sm_90; CUDA 13.0; cuBLAS 13.0.2": device 0's architecture, the runtime, cuBLAS. The
 * emulated build says so first ("emulated; sm_90; ..."), as weft/backend.h's
 * weft_device_is_emulated() reads it. */
#ifdef WEFT_CUDA_EMULATED
#define FEATURES_EMULATED "emulated; "
#else
#define FEATURES_EMULATED ""
#endif
static char features_text[160];

static void fill_features(void)
{
    int major = 0, minor = 0, runtime = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0) != cudaSuccess ||
        cudaRuntimeGetVersion(&runtime) != cudaSuccess)
        (void)cudaGetLastError();
    char blas[64];
    cuda_blas_version(blas, sizeof blas);
    snprintf(features_text, sizeof features_text, FEATURES_EMULATED "sm_%d%d; CUDA %d.%d; %s",
             major, minor, runtime / 1000, runtime % 1000 / 10, blas);
}

static const char *cuda_features(void *context)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, fill_features);
    return features_text;
}

static int cuda_device_count_method(void *context)
{
    return ndevices;
}

/* torch.cuda.memory_summary(device): a malloc'd table (caller frees), NULL with error. */
static char *cuda_memory_summary(void *context, int index, bool abbreviated)
{
    struct caching_allocator *ca = device_allocator(index);
    if (!ca)
        return NULL;
    char *text = caching_allocator_summary(ca, abbreviated);
    if (!text)
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "memory_summary: out of host memory");
    return text;
}

/* The caching allocator's segments and blocks, for weft_memory_snapshot
 * (torch.cuda.memory._snapshot): a malloc'd array (caller frees), 0 or negative. */
static int cuda_memory_blocks(void *context, int index, struct weft_memory_block **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    struct caching_allocator *ca = device_allocator(index);
    if (!ca)
        return weft_error_code();
    struct ca_block_info *info = NULL;
    size_t count = 0;
    if (caching_allocator_snapshot(ca, &info, &count) != CA_OK)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "memory snapshot: out of host memory");
    struct weft_memory_block *blocks = calloc(count ? count : 1, sizeof *blocks);
    if (!blocks) {
        free(info);
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "memory snapshot: out of host memory");
    }
    for (size_t i = 0; i < count; i++)
        blocks[i] = (struct weft_memory_block){
            .ptr = info[i].ptr, .size = info[i].size, .requested_size = info[i].requested_size,
            .segment = info[i].segment, .segment_size = info[i].segment_size,
            .stream = (int64_t)(intptr_t)info[i].stream, .small_pool = info[i].small_pool,
            .allocated = info[i].allocated, .pending = info[i].pending};
    free(info);
    *out = blocks;
    *n = count;
    return 0;
}

static void cuda_reset_peak_memory_stats(void *context, int index)
{
    struct caching_allocator *ca = device_allocator(index);
    if (ca)
        caching_allocator_reset_peak_stats(ca);
}

int cuda_device_type = -1;

static const struct weft_backend cuda_backend = {
    .base = WEFT_VTABLE(WEFT_KIND_BACKEND, "cuda", struct weft_backend),
    .device_count = cuda_device_count_method,
    .device_name = cuda_device_name,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .copy = cuda_copy,
    .synchronize = cuda_synchronize,
    .host_alloc_pinned = cuda_host_alloc_pinned,
    .host_free_pinned = cuda_host_free_pinned,
    .memory_stats = cuda_memory_stats,
    .empty_cache = cuda_empty_cache,
    .features = cuda_features,
    .copy_side = cuda_copy_side,
    .wait_side = cuda_wait_side,
    .memory_summary = cuda_memory_summary,
    .reset_peak_memory_stats = cuda_reset_peak_memory_stats,
    .memory_blocks = cuda_memory_blocks,
    .autocast_policy = "cuda",
    .autocast_dtypes = WEFT_DTYPE_BIT(WEFT_F16) | WEFT_DTYPE_BIT(WEFT_BF16),
};

/* ---- api:cuda: what PyTorch users reach through torch.cuda's streams ------------------- */

/* Tensor.record_stream(stream): the block holding the storage at `data` (its base
 * pointer) is not reused until the work queued on `stream` so far has finished. */
static int api_record_stream(int index, void *data, void *stream)
{
    struct caching_allocator *ca = device_allocator(index);
    if (!ca)
        return WEFT_ERR_DEVICE;
    if (caching_allocator_record_stream(ca, data, (ca_stream)stream) == CA_OK)
        return 0;
    return weft_error_set(WEFT_ERR_VALUE, "record_stream: %p is not a block of cuda:%d's "
                                          "caching allocator", data, index);
}

static void *api_current_stream(int index)
{
    return cuda_current_stream(index);
}

/* torch.cuda.set_stream: later work for the device is queued on `stream`. */
static int api_set_stream(int index, void *stream)
{
    if (check_index(index) != 0)
        return WEFT_ERR_DEVICE;
    __atomic_store_n(&devices[index].stream, (cudaStream_t)stream, __ATOMIC_RELEASE);
    return 0;
}

static const struct weft_cuda_api cuda_api = {
    .base = WEFT_VTABLE(WEFT_KIND_API, WEFT_CUDA_API_NAME, struct weft_cuda_api),
    .current_stream = api_current_stream,
    .set_stream = api_set_stream,
    .record_stream = api_record_stream,
};

int cuda_backend_register(void)
{
    int n = 0;
    if (CUDA_CHECK(cudaGetDeviceCount(&n)) != 0)
        return WEFT_ERR_DEVICE;
    ndevices = n < CUDA_MAX_DEVICES ? n : CUDA_MAX_DEVICES;
    for (int i = 0; i < ndevices; i++)
        devices[i].index = i;
    cuda_device_type = weft_register(&cuda_backend);
    if (cuda_device_type < 0)
        return cuda_device_type;
    if (weft_dlpack_register_device_type(cuda_device_type, kDLCUDA) != 0)
        return weft_error_code();
    return weft_register(&cuda_api) < 0 ? WEFT_ERR_PLUGIN : 0;
}

/* Returns cached memory to the driver (plugin unload at exit). Blocks still handed out
 * are freed too: nothing can use them once weft is gone. */
void cuda_backend_shutdown(void)
{
    for (int i = 0; i < ndevices; i++) {
        struct caching_allocator *ca = devices[i].allocator;
        devices[i].allocator = NULL;
        if (devices[i].copy_stream && cudaSetDevice(i) == cudaSuccess) {
            (void)cudaStreamSynchronize(devices[i].copy_stream);
            cudaEventDestroy(devices[i].copies_done);
            cudaEventDestroy(devices[i].compute_mark);
            cudaStreamDestroy(devices[i].copy_stream);
            devices[i].copy_stream = NULL;
        }
        if (ca && cudaSetDevice(i) == cudaSuccess)
            caching_allocator_destroy(ca);
    }
    host_allocator_destroy(host_allocator);
    host_allocator = NULL;
    (void)cudaGetLastError();
}
