/* testkit/cuda_emu/runtime/device.cc: the emulated devices: configuration, errors (the
 * calling thread's last error, each device's sticky one), properties and attributes, and
 * the launch: CUDA's limits checked with CUDA's error codes, the kernel's pointer
 * arguments checked against device memory, then the kernel queued on its stream.
 *
 * Devices: WEFT_CUDA_EMU_DEVICES of them (default 1), each with WEFT_CUDA_EMU_MEMORY
 * bytes (default 8G), the limits of an sm_90 GPU. */
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unordered_map>

#include "internal.h"

namespace wemu {

namespace {

const size_t kStaticSmem = 48 * 1024;      /* a block's shared memory without opt-in */
const size_t kOptinSmem = 227 * 1024;      /* sm_90's opt-in maximum */

std::vector<Device> &devices = *new std::vector<Device>;
thread_local int current = 0;
thread_local cudaError_t last_error = cudaSuccess;
std::unordered_map<const void *, int> &max_dynamic_smem =
    *new std::unordered_map<const void *, int>; /* cudaFuncSetAttribute */

size_t parse_size(const char *text, size_t fallback)
{
    if (!text || !*text)
        return fallback;
    char *end;
    unsigned long long v = strtoull(text, &end, 10);
    switch (*end) {
    case 'k': case 'K': v <<= 10; break;
    case 'm': case 'M': v <<= 20; break;
    case 'g': case 'G': v <<= 30; break;
    default: break;
    }
    return v ? (size_t)v : fallback;
}

Config load_config()
{
    Config c;
    const char *seed = getenv("WEFT_CUDA_EMU_SEED");
    c.seed = seed && *seed ? strtoull(seed, nullptr, 0) : 1;
    const char *n = getenv("WEFT_CUDA_EMU_DEVICES");
    c.devices = n && *n ? atoi(n) : 1;
    if (c.devices < 0)
        c.devices = 0;
    if (c.devices > 8)
        c.devices = 8;
    c.memory = parse_size(getenv("WEFT_CUDA_EMU_MEMORY"), (size_t)8 << 30);
    const char *q = getenv("WEFT_CUDA_EMU_QUIET");
    c.quiet = q && *q && *q != '0';
    const char *t = getenv("WEFT_CUDA_EMU_TRACE");
    c.trace = t && *t && *t != '0';
    return c;
}

void init_devices()
{
    if (!devices.empty() || config().devices == 0)
        return;
    devices.resize((size_t)config().devices);
    for (int i = 0; i < config().devices; i++) {
        Device &d = devices[(size_t)i];
        d.index = i;
        d.used = 0;
        d.sticky = cudaSuccess;
        d.legacy = new Stream{i, cudaStreamDefault, true};
        d.streams.push_back(d.legacy);
    }
    if (!config().quiet) {
        char names[32] = "cuda:0";
        if (config().devices > 1)
            snprintf(names, sizeof names, "cuda:0 .. cuda:%d", config().devices - 1);
        report("%s (emulated): sm_90's limits, run on the CPU (WEFT_CUDA_EMU_SEED=%" PRIu64
               "): results check the CUDA code, timings mean nothing",
               names, config().seed);
    }
}

const char *error_text(cudaError_t e, bool name)
{
    switch (e) {
#define E(code, text)                                                                         \
    case code:                                                                                \
        return name ? #code : text;
        E(cudaSuccess, "no error")
        E(cudaErrorInvalidValue, "invalid argument")
        E(cudaErrorMemoryAllocation, "out of memory")
        E(cudaErrorInitializationError, "initialization error")
        E(cudaErrorCudartUnloading, "driver shutting down")
        E(cudaErrorInvalidConfiguration, "invalid configuration argument")
        E(cudaErrorInvalidPitchValue, "invalid pitch argument")
        E(cudaErrorInvalidSymbol, "invalid device symbol")
        E(cudaErrorInvalidDevicePointer, "invalid device pointer")
        E(cudaErrorInvalidMemcpyDirection, "invalid copy direction for memcpy")
        E(cudaErrorInsufficientDriver, "CUDA driver version is insufficient for CUDA runtime version")
        E(cudaErrorInvalidDeviceFunction, "invalid device function")
        E(cudaErrorNoDevice, "no CUDA-capable device is detected")
        E(cudaErrorInvalidDevice, "invalid device ordinal")
        E(cudaErrorInvalidResourceHandle, "invalid resource handle")
        E(cudaErrorNotReady, "device not ready")
        E(cudaErrorIllegalAddress, "an illegal memory access was encountered")
        E(cudaErrorLaunchOutOfResources, "too many resources requested for launch")
        E(cudaErrorAssert, "device-side assert triggered")
        E(cudaErrorIllegalInstruction, "an illegal instruction was encountered")
        E(cudaErrorMisalignedAddress, "misaligned address")
        E(cudaErrorLaunchFailure, "unspecified launch failure")
        E(cudaErrorNotSupported, "operation not supported")
        E(cudaErrorUnknown, "unknown error")
#undef E
    }
    return name ? "cudaErrorUnknown" : "unrecognized error code";
}

/* A kernel queued with its arguments; a pointer argument that is not device memory is
 * the illegal address the GPU would meet when the kernel ran. */
struct KernelOp : Op {
    LaunchSpec spec;
    std::unique_ptr<KernelJob> job;
    std::string bad;
    size_t smem_limit;
    std::vector<const void *> pointers; /* its arguments' (and iterators' operands') */
    void run() override
    {
        if (!bad.empty()) {
            fault(device, cudaErrorIllegalAddress, "kernel " + std::string(spec.name) + ": " + bad);
            return;
        }
        if (run_grid(spec, *job, device, smem_limit) == cudaSuccess)
            check_written_past(device, pointers.data(), (int)pointers.size(), spec.name);
    }
};

/* Why the launch is refused (with the code), or cudaSuccess. */
cudaError_t check_config(const LaunchSpec &s, size_t smem_limit, char *why, size_t size)
{
    const dim3 b = s.block, g = s.grid;
    uint64_t threads = (uint64_t)b.x * b.y * b.z;
    if (b.x == 0 || b.y == 0 || b.z == 0 || b.x > 1024 || b.y > 1024 || b.z > 64 ||
        threads > 1024) {
        snprintf(why, size, "block (%u,%u,%u): a block has 1 to 1024 threads, at most "
                 "(1024,1024,64) per dim", b.x, b.y, b.z);
        return cudaErrorInvalidConfiguration;
    }
    if (g.x == 0 || g.y == 0 || g.z == 0 || g.x > 2147483647u || g.y > 65535 || g.z > 65535) {
        snprintf(why, size, "grid (%u,%u,%u): at most (2^31-1,65535,65535), none 0", g.x, g.y,
                 g.z);
        return cudaErrorInvalidConfiguration;
    }
    if (s.max_threads > 0 && threads > (uint64_t)s.max_threads) {
        snprintf(why, size, "%" PRIu64 " threads a block, over its __launch_bounds__(%ld)",
                 threads, s.max_threads);
        return cudaErrorLaunchOutOfResources;
    }
    size_t static_smem = static_smem_of(s.fn);
    auto it = max_dynamic_smem.find(s.fn);
    size_t dyn_max = it != max_dynamic_smem.end() ? (size_t)it->second : kStaticSmem - static_smem;
    if (s.shmem > dyn_max || static_smem + s.shmem > smem_limit) {
        snprintf(why, size, "%zu bytes of dynamic shared memory (with %zu static): more than "
                 "the %zu allowed (cudaFuncAttributeMaxDynamicSharedMemorySize)", s.shmem,
                 static_smem, dyn_max);
        return cudaErrorInvalidValue;
    }
    return cudaSuccess;
}

} // namespace

const Config &config()
{
    static const Config c = load_config();
    return c;
}

static uint64_t seed_override;
static bool seed_overridden;

uint64_t seed()
{
    return seed_overridden ? seed_override : config().seed;
}

std::recursive_mutex &api_lock()
{
    static std::recursive_mutex *m = new std::recursive_mutex;
    return *m;
}

void report(const char *fmt, ...)
{
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "weft CUDA emulator: %s\n", buf);
}

int device_count()
{
    init_devices();
    return (int)devices.size();
}

Device &device(int index)
{
    init_devices();
    return devices[(size_t)index];
}

int current_device()
{
    return current;
}

cudaError_t fail(cudaError_t err)
{
    if (err != cudaSuccess)
        last_error = err;
    return err;
}

cudaError_t sticky(int dev)
{
    if (dev < 0 || dev >= device_count())
        return cudaSuccess;
    return devices[(size_t)dev].sticky;
}

void fault(int dev, cudaError_t err, const std::string &what)
{
    report("cuda:%d (emulated): %s: %s (sticky: every later call on the device fails with it)",
           dev, what.c_str(), error_text(err, false));
    if (dev >= 0 && dev < device_count() && devices[(size_t)dev].sticky == cudaSuccess)
        devices[(size_t)dev].sticky = err;
}

void launch(const LaunchSpec &spec, KernelJob *job, const PointerArg *ptrs, int nptrs)
{
    WEMU_LOCKED;
    std::unique_ptr<KernelJob> owned(job);
    int dev = current;
    if (device_count() == 0) {
        fail(cudaErrorNoDevice);
        return;
    }
    if (sticky(dev) != cudaSuccess) {
        fail(sticky(dev));
        return;
    }
    Stream *s = resolve(spec.stream);
    if (!s || s->device != dev) {
        report("launch of %s on a stream that is not one of cuda:%d's", spec.name, dev);
        fail(cudaErrorInvalidResourceHandle);
        return;
    }
    auto it = max_dynamic_smem.find(spec.fn);
    size_t limit = it != max_dynamic_smem.end() && (size_t)it->second + static_smem_of(spec.fn) > kStaticSmem
                       ? (size_t)it->second + static_smem_of(spec.fn)
                       : kStaticSmem;
    char why[256];
    cudaError_t err = check_config(spec, limit, why, sizeof why);
    if (err != cudaSuccess) {
        report("launch of %s refused: %s: %s", spec.name, why, error_text(err, true));
        fail(err);
        return;
    }
    auto op = std::make_unique<KernelOp>();
    op->spec = spec;
    op->job = std::move(owned);
    op->smem_limit = limit;
    op->device = dev;
    op->what = spec.name;
    if (config().trace) { /* the launch's shape beside its name */
        char shape[128];
        snprintf(shape, sizeof shape, "<<<(%u,%u,%u), (%u,%u,%u), %zu>>>", spec.grid.x,
                 spec.grid.y, spec.grid.z, spec.block.x, spec.block.y, spec.block.z,
                 (size_t)spec.shmem);
        op->what += shape;
    }
    for (int i = 0; i < nptrs && op->bad.empty(); i++) {
        const void *p = ptrs[i].value;
        if (!p)
            continue;
        op->pointers.push_back(p);
        Region r = classify(p);
        if ((r.kind == Mem::device && r.device == dev) || r.kind == Mem::pinned)
            continue;
        op->bad = "argument " + std::to_string(ptrs[i].index) + " points to " + describe(p) +
                  (r.kind == Mem::device ? " of another device" : "") +
                  ", which device code cannot reach";
    }
    enqueue(s, std::move(op));
}

} // namespace wemu

using namespace wemu;

extern "C" {

const char *cudaGetErrorString(cudaError_t e) { return error_text(e, false); }
const char *cudaGetErrorName(cudaError_t e) { return error_text(e, true); }

cudaError_t cudaGetLastError(void)
{
    WEMU_LOCKED;
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    cudaError_t s = sticky(current);
    return s != cudaSuccess ? s : e;
}

cudaError_t cudaPeekAtLastError(void)
{
    WEMU_LOCKED;
    cudaError_t s = sticky(current);
    return s != cudaSuccess ? s : last_error;
}

cudaError_t cudaGetDeviceCount(int *count)
{
    WEMU_LOCKED;
    if (!count)
        return fail(cudaErrorInvalidValue);
    *count = device_count();
    return *count ? cudaSuccess : fail(cudaErrorNoDevice);
}

cudaError_t cudaSetDevice(int dev)
{
    WEMU_LOCKED;
    if (dev < 0 || dev >= device_count())
        return fail(cudaErrorInvalidDevice);
    current = dev;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *dev)
{
    if (!dev)
        return fail(cudaErrorInvalidValue);
    *dev = current;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int dev)
{
    WEMU_LOCKED;
    if (!p)
        return fail(cudaErrorInvalidValue);
    if (dev < 0 || dev >= device_count())
        return fail(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "weft CUDA emulator (sm_90 limits, on the CPU)");
    p->totalGlobalMem = config().memory;
    p->sharedMemPerBlock = kStaticSmem;
    p->sharedMemPerBlockOptin = kOptinSmem;
    p->regsPerBlock = 65536;
    p->warpSize = 32;
    p->maxThreadsPerBlock = 1024;
    p->maxThreadsDim[0] = 1024;
    p->maxThreadsDim[1] = 1024;
    p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 2147483647;
    p->maxGridSize[1] = 65535;
    p->maxGridSize[2] = 65535;
    p->major = 9;
    p->minor = 0;
    p->multiProcessorCount = 1;
    p->unifiedAddressing = 1;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int dev)
{
    WEMU_LOCKED;
    if (!value)
        return fail(cudaErrorInvalidValue);
    if (dev < 0 || dev >= device_count())
        return fail(cudaErrorInvalidDevice);
    switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = 1024; break;
    case cudaDevAttrMaxBlockDimX: *value = 1024; break;
    case cudaDevAttrMaxBlockDimY: *value = 1024; break;
    case cudaDevAttrMaxBlockDimZ: *value = 64; break;
    case cudaDevAttrMaxGridDimX: *value = 2147483647; break;
    case cudaDevAttrMaxGridDimY: *value = 65535; break;
    case cudaDevAttrMaxGridDimZ: *value = 65535; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = (int)kStaticSmem; break;
    case cudaDevAttrWarpSize: *value = 32; break;
    case cudaDevAttrMultiProcessorCount: *value = 1; break;
    case cudaDevAttrComputeCapabilityMajor: *value = 9; break;
    case cudaDevAttrComputeCapabilityMinor: *value = 0; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = (int)kOptinSmem; break;
    default: return fail(cudaErrorInvalidValue);
    }
    return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *v)
{
    if (!v)
        return fail(cudaErrorInvalidValue);
    *v = CUDART_VERSION;
    return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *v)
{
    if (!v)
        return fail(cudaErrorInvalidValue);
    *v = CUDART_VERSION;
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes)
{
    WEMU_LOCKED;
    if (device_count() == 0)
        return fail(cudaErrorNoDevice);
    const Device &d = device(current);
    if (free_bytes)
        *free_bytes = config().memory - d.used;
    if (total_bytes)
        *total_bytes = config().memory;
    return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value)
{
    WEMU_LOCKED;
    if (!func)
        return fail(cudaErrorInvalidDeviceFunction);
    if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
        if (value < 0 || (size_t)value + static_smem_of(func) > kOptinSmem)
            return fail(cudaErrorInvalidValue);
        max_dynamic_smem[func] = value;
        return cudaSuccess;
    }
    if (attr == cudaFuncAttributePreferredSharedMemoryCarveout)
        return value >= -1 && value <= 100 ? cudaSuccess : fail(cudaErrorInvalidValue);
    return fail(cudaErrorInvalidValue);
}

void wemu_set_seed(uint64_t s)
{
    WEMU_LOCKED;
    seed_override = s;
    seed_overridden = true;
}

cudaError_t cudaDeviceReset(void)
{
    WEMU_LOCKED;
    if (device_count() == 0)
        return fail(cudaErrorNoDevice);
    drain_device(current);
    device(current).sticky = cudaSuccess;
    return cudaSuccess;
}

} /* extern "C" */
