/* testkit/cuda_emu/runtime/internal.h: what the emulated CUDA runtime's files share, and
 * what the emulated libraries (cuBLAS, cuSPARSE, NCCL) use of it: the lock, devices and
 * errors, device memory, streams with their queues of deferred work, and the kernel
 * executor. Not installed; the libraries in libs/ link libweft-cudart-emu.so. */
#ifndef WEFT_CUDA_EMU_INTERNAL_H
#define WEFT_CUDA_EMU_INTERNAL_H

#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cuda_runtime.h"

#define WEMU_INTERNAL WEMU_API

/* The emulator's state lives on the heap and is never freed (`T &x = *new T`): weft
 * unloads its plugins, which free device memory and streams through this library, from an
 * atexit handler that runs after this library's static destructors would have. */

namespace wemu {

/* ---- the lock: every API call holds it, and work runs under it ---------------------------- */
WEMU_INTERNAL std::recursive_mutex &api_lock();
#define WEMU_LOCKED std::lock_guard<std::recursive_mutex> wemu_guard_(::wemu::api_lock())

/* ---- configuration (environment, read once) ------------------------------------------------ */
struct Config {
    uint64_t seed;      /* WEFT_CUDA_EMU_SEED: block and thread order */
    int devices;        /* WEFT_CUDA_EMU_DEVICES */
    size_t memory;      /* WEFT_CUDA_EMU_MEMORY: bytes per device */
    bool quiet;         /* WEFT_CUDA_EMU_QUIET=1: no banner */
    bool trace;         /* WEFT_CUDA_EMU_TRACE=1: each piece of work named as it runs */
};
WEMU_INTERNAL const Config &config();
/* The seed the orders are drawn from: config().seed until wemu_set_seed. */
WEMU_INTERNAL uint64_t seed();

/* "weft CUDA emulator: ..." on stderr. */
WEMU_INTERNAL void report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- devices and errors ------------------------------------------------------------------------ */
struct Stream;

struct Device {
    int index;
    size_t used;             /* bytes of live device allocations */
    cudaError_t sticky;      /* a fault in device code: every later call fails with it */
    Stream *legacy;          /* the legacy default stream */
    std::vector<Stream *> streams; /* every stream of the device, legacy first */
};

WEMU_INTERNAL int device_count();
WEMU_INTERNAL Device &device(int index);
/* The calling thread's current device (cudaSetDevice). */
WEMU_INTERNAL int current_device();
/* Records err as the calling thread's last error (cudaGetLastError) and returns it. */
WEMU_INTERNAL cudaError_t fail(cudaError_t err);
/* The device's sticky error, or cudaSuccess. */
WEMU_INTERNAL cudaError_t sticky(int dev);
/* A fault in device code (or in an emulated library's device work): reported once with
 * what, and sticky from now on. */
WEMU_INTERNAL void fault(int dev, cudaError_t err, const std::string &what);

/* ---- device memory ------------------------------------------------------------------------------ */
enum class Mem { none, device, pinned, freed_device };
struct Region {
    Mem kind;
    int device;
    const char *base;
    size_t size;
};
/* What p points into: a live device allocation, pinned host memory, device memory freed
 * lately (kept to name it in messages), or none of them (pageable host memory). */
WEMU_INTERNAL Region classify(const void *p);
/* "a device allocation of 4096 bytes at 0x... (offset 12)" and the like, for messages. */
WEMU_INTERNAL std::string describe(const void *p);
/* 0 when [p, p + n) lies in one live device allocation of device dev (dev < 0: any);
 * else why not, for a message. */
WEMU_INTERNAL const char *check_device_range(const void *p, size_t n, int dev);

/* ---- streams: queues of deferred work ------------------------------------------------------ */
struct Op {
    virtual ~Op() {}
    virtual void run() = 0; /* under the lock, on the thread that synchronises */
    std::vector<std::pair<Stream *, uint64_t>> deps; /* (stream, ops of it to complete) */
    int device = 0;
    std::string what;
};

struct Stream {
    int device;
    unsigned flags;
    bool legacy;
    std::deque<std::unique_ptr<Op>> queue;
    uint64_t enqueued = 0, completed = 0;
};

/* The stream behind a handle (NULL, cudaStreamLegacy and cudaStreamPerThread are the
 * current device's legacy stream); NULL for a handle that is not a live stream. */
WEMU_INTERNAL Stream *resolve(cudaStream_t s);
/* Appends op to s, with the legacy stream's implicit ordering; returns its position. */
WEMU_INTERNAL uint64_t enqueue(Stream *s, std::unique_ptr<Op> op);
/* A host function as work on s (the libraries' calls). */
WEMU_INTERNAL void enqueue_fn(Stream *s, std::function<void()> fn, const std::string &what);
/* The same on a handle: cudaErrorInvalidResourceHandle for a bad one, the device's sticky
 * error when it has one. */
WEMU_INTERNAL cudaError_t enqueue_host(cudaStream_t s, std::function<void()> fn,
                                       const std::string &what);
/* Runs s's work up to position seq (and what it waits for). */
WEMU_INTERNAL void run_until(Stream *s, uint64_t seq);
/* Runs s's work up to position seq as a host synchronisation does: first, the device's
 * other streams that outrank s (priorities drawn from the seed at each call) run all
 * their queued work, as a GPU may have finished it by then; so a stream that should wait
 * for s's work and does not runs before that work under some seed, whichever of the two
 * the host waits on. */
WEMU_INTERNAL void settle(Stream *s, uint64_t seq);
/* Runs every stream of dev to its end, in an order the seed picks. */
WEMU_INTERNAL void drain_device(int dev);
WEMU_INTERNAL void drain_all();
/* Makes a dependency on every stream of dev as it stands now (work that may use a block
 * being freed). */
WEMU_INTERNAL std::vector<std::pair<Stream *, uint64_t>> tails(int dev);

/* Without ASan: faults when the kernel that just ran wrote past the tensor in a caching
 * allocator's block that one of its pointers reaches (ASan's poison sees it otherwise). */
WEMU_INTERNAL void check_written_past(int dev, const void *const *ptrs, int n,
                                      const char *kernel);

/* ---- kernels ---------------------------------------------------------------------------------- */
/* Runs every block of a launch (the executor; block.cc). Returns cudaSuccess or the
 * fault, reported already. */
WEMU_INTERNAL cudaError_t run_grid(const LaunchSpec &spec, KernelJob &job, int dev,
                                   size_t smem_limit);
/* The static shared memory a kernel was seen to use (0 before it first ran). */
WEMU_INTERNAL size_t static_smem_of(const void *fn);

/* A small fast generator (splitmix64) for the orders the seed decides. */
struct Rng {
    uint64_t s;
    explicit Rng(uint64_t seed) : s(seed) {}
    uint64_t next()
    {
        uint64_t z = (s += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
    /* in [0, n): the high half of a 64 x 64-bit product, no division */
    uint64_t below(uint64_t n) { return (uint64_t)(((unsigned __int128)next() * n) >> 64); }
};

} // namespace wemu

#endif
