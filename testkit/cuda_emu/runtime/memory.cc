/* testkit/cuda_emu/runtime/memory.cc: device and pinned memory.
 *
 * Every cudaMalloc is a host allocation of its own (256-byte aligned, exactly the size
 * asked), so AddressSanitizer sees a kernel read past its end, and cudaFree frees it, so
 * ASan sees a use after it. New device memory holds garbage (0xff bytes: NaN in every
 * floating type), as a GPU's may. A registry of live allocations tells device pointers
 * from host ones: a kernel argument or a copy that names pageable host memory as device
 * memory is an error here as on a GPU, and pinned memory (cudaHostAlloc) is what the
 * device may reach through unified addressing. Memory freed lately is remembered, to
 * say so when a pointer into it comes back.
 *
 * The caching allocator carves cudaMalloc'd segments into blocks; weft's backend tells
 * the emulator which bytes of a block are handed out (wemu_annotate_*), in stream order,
 * so that ASan also sees a kernel that reads past its tensor into the next block, or a
 * block after it went back to the cache. Without ASan a freed block is refilled with
 * garbage instead, and the bytes between a tensor's end and its block's hold a pattern of
 * their addresses from the hand-out on (not 0xff: an op on the NaN it reads past its
 * input writes 0xff back, and a copy carries one block's pattern into another's): a kernel's blocks are checked after it runs and every block when it goes
 * back, so that a write past a tensor is a fault naming the kernel in the release build
 * too. */
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

#include "internal.h"
#include "sanitizers.h"

namespace wemu {

namespace {

struct Alloc {
    size_t size;
    int device;
    Mem kind;
};

std::map<uintptr_t, Alloc> &live = *new std::map<uintptr_t, Alloc>;
/* Recently freed device ranges (a ring): named in messages, never reused for lookups of
 * live memory. */
struct Freed {
    uintptr_t base;
    size_t size;
    int device;
};
std::vector<Freed> &freed_ring = *new std::vector<Freed>(4096);
size_t freed_next;

/* The stream each annotated block was handed out on, for its release. */
std::map<uintptr_t, Stream *> &block_stream = *new std::map<uintptr_t, Stream *>;

/* Without ASan: the blocks handed out as the streams' work has reached them, with the
 * bytes in use (whole words, as ASan's view) and the block's size: [valid, size) holds
 * slack_byte of each address until the block goes back. */
struct Slack {
    size_t valid, size;
};
std::map<uintptr_t, Slack> &handed = *new std::map<uintptr_t, Slack>;

#ifndef WEMU_ASAN

unsigned char slack_byte(uintptr_t a)
{
    return (unsigned char)((a * 0x9E3779B97F4A7C15ull) >> 56);
}

void fill_slack(uintptr_t b, const Slack &s)
{
    unsigned char *p = reinterpret_cast<unsigned char *>(b);
    for (size_t i = s.valid; i < s.size; i++)
        p[i] = slack_byte(b + i);
}

/* The first byte past the tensor in block b that is not its pattern's, or -1. */
long dirty_slack(uintptr_t b, const Slack &s)
{
    const unsigned char *p = reinterpret_cast<const unsigned char *>(b);
    for (size_t i = s.valid; i < s.size; i++)
        if (p[i] != slack_byte(b + i))
            return (long)i;
    return -1;
}

void report_slack(int dev, uintptr_t b, const Slack &s, long at, const std::string &who)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s wrote past its tensor: byte %ld of the block at %p, whose "
             "tensor has %zu of its %zu bytes", who.c_str(), at, (void *)b, s.valid, s.size);
    fault(dev, cudaErrorIllegalAddress, buf);
    fill_slack(b, s); /* reported once */
}
#endif

const std::pair<const uintptr_t, Alloc> *find_live(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    auto it = live.upper_bound(a);
    if (it == live.begin())
        return nullptr;
    --it;
    /* the end pointer belongs too (loops compare against it) */
    if (a <= it->first + it->second.size)
        return &*it;
    return nullptr;
}

cudaError_t device_alloc(void **ptr, size_t size, int dev)
{
    Device &d = device(dev);
    if (size > config().memory - d.used)
        return fail(cudaErrorMemoryAllocation);
    void *p = nullptr;
    if (posix_memalign(&p, 256, size ? size : 1) != 0)
        return fail(cudaErrorMemoryAllocation);
    memset(p, 0xff, size ? size : 1);
    live[(uintptr_t)p] = Alloc{size, dev, Mem::device};
    d.used += size;
    *ptr = p;
    return cudaSuccess;
}

void remember_freed(uintptr_t base, size_t size, int dev)
{
    freed_ring[freed_next] = Freed{base, size, dev};
    freed_next = (freed_next + 1) % freed_ring.size();
}

cudaError_t device_free(void *ptr)
{
    auto it = live.find((uintptr_t)ptr);
    if (it == live.end() || it->second.kind != Mem::device) {
        report("cudaFree(%p): %s, not the start of a device allocation", ptr,
               describe(ptr).c_str());
        return fail(cudaErrorInvalidValue);
    }
    device(it->second.device).used -= it->second.size;
    remember_freed(it->first, it->second.size, it->second.device);
    for (auto b = block_stream.lower_bound(it->first);
         b != block_stream.end() && b->first < it->first + it->second.size;)
        b = block_stream.erase(b);
    for (auto b = handed.lower_bound(it->first);
         b != handed.end() && b->first < it->first + it->second.size;)
        b = handed.erase(b);
    WEMU_ASAN_UNPOISON(ptr, it->second.size);
    live.erase(it);
    free(ptr);
    return cudaSuccess;
}

/* Poisons (or refills with garbage) [p, p + size) when it runs. */
struct ReleaseBlock : Op {
    char *p;
    size_t size;
    void run() override
    {
        if (!find_live(p))
            return; /* the segment went back to the device meanwhile */
#ifdef WEMU_ASAN
        WEMU_ASAN_POISON(p, size);
#else
        auto h = handed.find((uintptr_t)p);
        if (h != handed.end()) {
            long at = dirty_slack(h->first, h->second);
            if (at >= 0)
                report_slack(device, h->first, h->second, at,
                             "a kernel or copy between the block's hand-out and its release");
            handed.erase(h);
        }
        memset(p, 0xff, size);
#endif
    }
};

/* Makes the first `valid` bytes of [p, p + size) addressable when it runs. */
struct HandOutBlock : Op {
    char *p;
    size_t valid, size;
    void run() override
    {
        if (!find_live(p))
            return;
        /* whole 4-byte words: sub-word atomics CAS the word that holds their element */
        size_t used = (valid + 3) / 4 * 4 < size ? (valid + 3) / 4 * 4 : size;
        WEMU_ASAN_POISON(p, size);
        WEMU_ASAN_UNPOISON(p, used);
#ifndef WEMU_ASAN
        handed[(uintptr_t)p] = Slack{used, size};
        fill_slack((uintptr_t)p, handed[(uintptr_t)p]);
#endif
    }
};

} // namespace

void check_written_past(int dev, const void *const *ptrs, int n, const char *kernel)
{
#ifdef WEMU_ASAN
    (void)dev, (void)ptrs, (void)n, (void)kernel; /* ASan's poison has seen it */
#else
    for (int i = 0; i < n; i++) {
        auto h = handed.upper_bound((uintptr_t)ptrs[i]);
        if (h == handed.begin())
            continue;
        --h;
        if ((uintptr_t)ptrs[i] >= h->first + h->second.size)
            continue;
        long at = dirty_slack(h->first, h->second);
        if (at >= 0)
            report_slack(dev, h->first, h->second, at, std::string("kernel ") + kernel);
    }
#endif
}

Region classify(const void *p)
{
    if (const auto *a = find_live(p))
        return Region{a->second.kind, a->second.device, (const char *)a->first, a->second.size};
    uintptr_t x = (uintptr_t)p;
    for (const Freed &f : freed_ring)
        if (f.size && x >= f.base && x < f.base + f.size)
            return Region{Mem::freed_device, f.device, (const char *)f.base, f.size};
    return Region{Mem::none, -1, nullptr, 0};
}

std::string describe(const void *p)
{
    Region r = classify(p);
    char buf[256];
    size_t off = (size_t)((const char *)p - r.base);
    switch (r.kind) {
    case Mem::device:
        snprintf(buf, sizeof buf, "%p (offset %zu of a %zu-byte allocation on cuda:%d)", p, off,
                 r.size, r.device);
        break;
    case Mem::pinned:
        snprintf(buf, sizeof buf, "%p (pinned host memory, offset %zu of %zu bytes)", p, off,
                 r.size);
        break;
    case Mem::freed_device:
        snprintf(buf, sizeof buf, "%p (offset %zu of a %zu-byte allocation on cuda:%d that was "
                 "freed: freed device memory, or host memory since)", p, off, r.size, r.device);
        break;
    default:
        snprintf(buf, sizeof buf, "%p (pageable host memory: not from cudaMalloc or "
                 "cudaHostAlloc)", p);
        break;
    }
    return buf;
}

const char *check_device_range(const void *p, size_t n, int dev)
{
    Region r = classify(p);
    if (r.kind == Mem::freed_device)
        return "not device memory (it lies where device memory was freed)";
    if (r.kind != Mem::device)
        return r.kind == Mem::pinned ? "pinned host memory, not device memory"
                                     : "host memory, not device memory";
    if (dev >= 0 && r.device != dev)
        return "memory of another device";
    if ((const char *)p + n > r.base + r.size)
        return "a range that runs past the end of its device allocation";
    return nullptr;
}

} // namespace wemu

using namespace wemu;

extern "C" {

cudaError_t cudaMalloc(void **ptr, size_t size)
{
    WEMU_LOCKED;
    if (!ptr)
        return fail(cudaErrorInvalidValue);
    if (device_count() == 0)
        return fail(cudaErrorNoDevice);
    if (sticky(current_device()) != cudaSuccess)
        return fail(sticky(current_device()));
    *ptr = nullptr;
    return device_alloc(ptr, size, current_device());
}

/* cudaFree waits for the device, as CUDA's does. */
cudaError_t cudaFree(void *ptr)
{
    WEMU_LOCKED;
    if (!ptr)
        return cudaSuccess;
    drain_all();
    return device_free(ptr);
}

/* Stream-ordered: the memory is there at once (work queued before has no business with
 * it), and goes back when the free's turn on the stream comes. */
cudaError_t cudaMallocAsync(void **ptr, size_t size, cudaStream_t stream)
{
    WEMU_LOCKED;
    if (!ptr)
        return fail(cudaErrorInvalidValue);
    Stream *s = resolve(stream);
    if (!s)
        return fail(cudaErrorInvalidResourceHandle);
    if (sticky(s->device) != cudaSuccess)
        return fail(sticky(s->device));
    *ptr = nullptr;
    return device_alloc(ptr, size, s->device);
}

cudaError_t cudaFreeAsync(void *ptr, cudaStream_t stream)
{
    WEMU_LOCKED;
    if (!ptr)
        return cudaSuccess;
    if (!find_live(ptr) || live.find((uintptr_t)ptr) == live.end())
        return fail(cudaErrorInvalidValue);
    return enqueue_host(stream, [ptr] { device_free(ptr); }, "cudaFreeAsync");
}

cudaError_t cudaHostAlloc(void **ptr, size_t size, unsigned int flags)
{
    WEMU_LOCKED;
    if (!ptr || flags > 0x0f)
        return fail(cudaErrorInvalidValue);
    void *p = nullptr;
    if (posix_memalign(&p, 4096, size ? size : 1) != 0)
        return fail(cudaErrorMemoryAllocation);
    live[(uintptr_t)p] = Alloc{size, -1, Mem::pinned};
    *ptr = p;
    return cudaSuccess;
}

cudaError_t cudaMallocHost(void **ptr, size_t size)
{
    return cudaHostAlloc(ptr, size, cudaHostAllocDefault);
}

cudaError_t cudaFreeHost(void *ptr)
{
    WEMU_LOCKED;
    if (!ptr)
        return cudaSuccess;
    auto it = live.find((uintptr_t)ptr);
    if (it == live.end() || it->second.kind != Mem::pinned)
        return fail(cudaErrorInvalidValue);
    drain_all(); /* as cudaFree, it waits for the device */
    live.erase(it);
    free(ptr);
    return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attr, const void *ptr)
{
    WEMU_LOCKED;
    if (!attr)
        return fail(cudaErrorInvalidValue);
    memset(attr, 0, sizeof *attr);
    attr->device = -2;
    Region r = classify(ptr);
    if (r.kind == Mem::device) {
        attr->type = cudaMemoryTypeDevice;
        attr->device = r.device;
        attr->devicePointer = (void *)ptr;
    } else if (r.kind == Mem::pinned) {
        attr->type = cudaMemoryTypeHost;
        attr->device = current_device();
        attr->devicePointer = attr->hostPointer = (void *)ptr;
    } else {
        attr->type = cudaMemoryTypeUnregistered;
        attr->hostPointer = (void *)ptr;
    }
    return cudaSuccess;
}

/* The caching allocator's blocks (weft's backend calls these only in the emulated build,
 * cuda_runtime_api.h declares them). A block handed out on `stream` for `valid` of its
 * `size` bytes: addressable from its turn on the stream. */
WEMU_API void wemu_annotate_alloc(void *ptr, size_t valid, size_t size, cudaStream_t stream)
{
    WEMU_LOCKED;
    const auto *a = find_live(ptr);
    if (!a)
        return;
    /* the legacy stream is the block's device's, whichever device is current */
    bool legacy = !stream || stream == cudaStreamLegacy || stream == cudaStreamPerThread;
    Stream *s = legacy ? device(a->second.device).legacy : resolve(stream);
    if (!s)
        return;
    block_stream[(uintptr_t)ptr] = s;
    auto op = std::make_unique<HandOutBlock>();
    op->p = static_cast<char *>(ptr);
    op->valid = valid;
    op->size = size;
    op->device = s->device;
    op->what = "caching allocator: block handed out";
    enqueue(s, std::move(op));
}

/* A block returned to the cache: unaddressable once every stream has finished the work
 * queued so far, which may still use it. A segment fresh from the device (never handed
 * out): unaddressable at once. */
WEMU_API void wemu_annotate_free(void *ptr, size_t size)
{
    WEMU_LOCKED;
    const auto *a = find_live(ptr);
    if (!a)
        return;
    int dev = a->second.device;
    auto it = block_stream.find((uintptr_t)ptr);
    if (it == block_stream.end()) {
        /* a fresh segment (the whole allocation): nothing can use it yet; anything else
         * was not handed out, and the caching allocator says so */
        if (a->first == (uintptr_t)ptr && a->second.size == size)
            WEMU_ASAN_POISON(ptr, size);
        return;
    }
    Stream *s = it->second;
    block_stream.erase(it);
    auto op = std::make_unique<ReleaseBlock>();
    op->p = static_cast<char *>(ptr);
    op->size = size;
    op->device = dev;
    op->what = "caching allocator: block released";
    op->deps = tails(dev);
    enqueue(s, std::move(op));
}

} /* extern "C" */
