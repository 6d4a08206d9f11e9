/* weft_cuda_emu/device.h: what a kernel sees when weft's CUDA emulator runs it: the
 * execution-space qualifiers, the built-in variables, barriers, warp intrinsics, atomics,
 * the arithmetic intrinsics, vector types, shared memory and the launch.
 *
 * C++ only; cuda_runtime.h includes it for every .cu the build step (cu2cc.py) turns into
 * C++: that step rewrites `k<<<grid, block, shmem, stream>>>(args)` into a call of
 * wemu::make_launcher(...)(args) and `__shared__` declarations into per-block memory, and
 * leaves everything else to this header. Each device thread runs as a fiber of the host
 * thread that synchronises (runtime/block.cc); the functions declared here are the points
 * where it can block. */
#ifndef WEFT_CUDA_EMU_DEVICE_H
#define WEFT_CUDA_EMU_DEVICE_H

#ifndef __cplusplus
#error "weft_cuda_emu/device.h is C++: only the rewritten .cu sources include it"
#endif

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <atomic>
#include <tuple>
#include <type_traits>
#include <utility>

#include "cuda_runtime_api.h"

/* ---- qualifiers: device code is host code here ----------------------------------------- */
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
/* __noinline__ is left alone: system headers spell noinline that way themselves */
#define __align__(n) __attribute__((aligned(n)))
/* cu2cc.py reads the bound where the kernel is launched (a block over it fails). */
#define __launch_bounds__(...)
#define __constant__
/* cu2cc.py rewrites every __shared__ declaration of a .cu file; one left here is in a
 * header it did not see. */
#define __shared__ static_assert(false, "weft CUDA emulator: __shared__ outside a .cu file")

/* ---- vector types ------------------------------------------------------------------------ */
struct uint3 {
    unsigned int x, y, z;
};
struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1)
        : x(vx), y(vy), z(vz) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
    constexpr operator uint3() const { return uint3{x, y, z}; }
};
#define WEMU_VEC2(T, N, A)                                                                    \
    struct __attribute__((aligned(A))) N##2 { T x, y; };                                      \
    static inline N##2 make_##N##2(T x, T y) { return N##2{x, y}; }
#define WEMU_VEC4(T, N, A)                                                                    \
    struct __attribute__((aligned(A))) N##4 { T x, y, z, w; };                                \
    static inline N##4 make_##N##4(T x, T y, T z, T w) { return N##4{x, y, z, w}; }
WEMU_VEC2(float, float, 8)
WEMU_VEC4(float, float, 16)
WEMU_VEC2(double, double, 16)
WEMU_VEC2(int, int, 8)
WEMU_VEC4(int, int, 16)
WEMU_VEC2(unsigned int, uint, 8)
WEMU_VEC4(unsigned int, uint, 16)
WEMU_VEC2(short, short, 4)
WEMU_VEC4(unsigned char, uchar, 4)
WEMU_VEC2(long long, longlong, 16)
#undef WEMU_VEC2
#undef WEMU_VEC4
struct float3 {
    float x, y, z;
};
static inline uint3 make_uint3(unsigned x, unsigned y, unsigned z) { return uint3{x, y, z}; }

/* ---- the executing thread ---------------------------------------------------------------- */
namespace wemu {

/* The device thread now running (set by the block scheduler at every switch). */
struct ThreadView {
    uint3 tid, bid;
    dim3 bdim, gdim;
};

} // namespace wemu

extern "C" {
WEMU_API extern const wemu::ThreadView *wemu_self;
/* The barrier (kind 0) and its counting forms; pred is the thread's predicate. */
WEMU_API int wemu_syncthreads(int kind, int pred);
/* A warp exchange among the lanes named in mask (runtime/block.cc lists the kinds). */
WEMU_API uint64_t wemu_warp(int kind, unsigned mask, uint64_t value, int arg, int width,
                            const char *what);
/* Reports a fault of the running thread (misaligned atomic, __trap) and aborts. */
WEMU_API __attribute__((noreturn)) void wemu_fault(const char *what, const void *addr);
WEMU_API void *wemu_shared_static(void *key, size_t size, size_t align, const char *name);
WEMU_API void *wemu_shared_dynamic(size_t align, const char *name);
}

#define threadIdx (wemu_self->tid)
#define blockIdx (wemu_self->bid)
#define blockDim (wemu_self->bdim)
#define gridDim (wemu_self->gdim)
static constexpr int warpSize = 32;

/* ---- barriers ------------------------------------------------------------------------------ */
static inline void __syncthreads() { wemu_syncthreads(0, 0); }
static inline int __syncthreads_count(int pred) { return wemu_syncthreads(1, pred); }
static inline int __syncthreads_and(int pred) { return wemu_syncthreads(2, pred); }
static inline int __syncthreads_or(int pred) { return wemu_syncthreads(3, pred); }
static inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
static inline void __threadfence_block() { std::atomic_thread_fence(std::memory_order_seq_cst); }

/* ---- warp intrinsics --------------------------------------------------------------------- */
namespace wemu {
enum WarpKind { SHFL_IDX, SHFL_UP, SHFL_DOWN, SHFL_XOR, BALLOT, ANY, ALL, SYNCWARP };

template <typename T> inline uint64_t to_bits(T v)
{
    static_assert(std::is_trivially_copyable<T>::value && sizeof(T) <= 8,
                  "warp shuffles move values of at most 8 bytes");
    uint64_t b = 0;
    memcpy(&b, &v, sizeof v);
    return b;
}
template <typename T> inline T from_bits(uint64_t b)
{
    T v;
    memcpy(&v, &b, sizeof v);
    return v;
}
} // namespace wemu

template <typename T>
static inline T __shfl_sync(unsigned mask, T var, int src_lane, int width = warpSize)
{
    return wemu::from_bits<T>(
        wemu_warp(wemu::SHFL_IDX, mask, wemu::to_bits(var), src_lane, width, "__shfl_sync"));
}
template <typename T>
static inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize)
{
    return wemu::from_bits<T>(wemu_warp(wemu::SHFL_UP, mask, wemu::to_bits(var), (int)delta,
                                        width, "__shfl_up_sync"));
}
template <typename T>
static inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize)
{
    return wemu::from_bits<T>(wemu_warp(wemu::SHFL_DOWN, mask, wemu::to_bits(var), (int)delta,
                                        width, "__shfl_down_sync"));
}
template <typename T>
static inline T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = warpSize)
{
    return wemu::from_bits<T>(wemu_warp(wemu::SHFL_XOR, mask, wemu::to_bits(var), lane_mask,
                                        width, "__shfl_xor_sync"));
}
static inline unsigned __ballot_sync(unsigned mask, int pred)
{
    return (unsigned)wemu_warp(wemu::BALLOT, mask, pred != 0, 0, warpSize, "__ballot_sync");
}
static inline int __any_sync(unsigned mask, int pred)
{
    return (int)wemu_warp(wemu::ANY, mask, pred != 0, 0, warpSize, "__any_sync");
}
static inline int __all_sync(unsigned mask, int pred)
{
    return (int)wemu_warp(wemu::ALL, mask, pred != 0, 0, warpSize, "__all_sync");
}
static inline void __syncwarp(unsigned mask = 0xffffffffu)
{
    (void)wemu_warp(wemu::SYNCWARP, mask, 0, 0, warpSize, "__syncwarp");
}

/* ---- atomics: the host's, on naturally aligned words as the hardware requires -------- */
namespace wemu {
template <typename T> inline void check_aligned(const void *p, const char *what)
{
    if ((uintptr_t)p % sizeof(T) != 0)
        wemu_fault(what, p);
}
/* *p = f(*p) atomically; returns the old value (a compare-and-swap loop on the bits). */
template <typename T, typename F> inline T atomic_update(T *p, F f, const char *what)
{
    check_aligned<T>(p, what);
    typedef std::conditional_t<sizeof(T) == 8, unsigned long long,
                               std::conditional_t<sizeof(T) == 4, unsigned int, unsigned short>>
        W;
    W *w = reinterpret_cast<W *>(p);
    W old = __atomic_load_n(w, __ATOMIC_RELAXED);
    for (;;) {
        T cur;
        memcpy(&cur, &old, sizeof cur);
        T next = f(cur);
        W bits;
        memcpy(&bits, &next, sizeof bits);
        if (__atomic_compare_exchange_n(w, &old, bits, false, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
            return cur;
    }
}
} // namespace wemu

#define WEMU_ATOMIC_RMW(NAME, EXPR)                                                           \
    template <typename T> static inline T NAME(T *p, T v)                                     \
    {                                                                                         \
        return wemu::atomic_update(p, [v](T a) { return (T)(EXPR); }, #NAME);                 \
    }
WEMU_ATOMIC_RMW(atomicAdd, a + v)
WEMU_ATOMIC_RMW(atomicSub, a - v)
WEMU_ATOMIC_RMW(atomicExch, v)
WEMU_ATOMIC_RMW(atomicMin, v < a ? v : a)
WEMU_ATOMIC_RMW(atomicMax, v > a ? v : a)
WEMU_ATOMIC_RMW(atomicAnd, a & v)
WEMU_ATOMIC_RMW(atomicOr, a | v)
WEMU_ATOMIC_RMW(atomicXor, a ^ v)
#undef WEMU_ATOMIC_RMW
template <typename T> static inline T atomicCAS(T *p, T compare, T val)
{
    static_assert(std::is_integral<T>::value, "atomicCAS takes integer words");
    wemu::check_aligned<T>(p, "atomicCAS");
    T expected = compare;
    __atomic_compare_exchange_n(p, &expected, val, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    return expected;
}
static inline unsigned atomicInc(unsigned *p, unsigned v)
{
    return wemu::atomic_update(p, [v](unsigned a) { return a >= v ? 0u : a + 1; }, "atomicInc");
}
static inline unsigned atomicDec(unsigned *p, unsigned v)
{
    return wemu::atomic_update(
        p, [v](unsigned a) { return a == 0 || a > v ? v : a - 1; }, "atomicDec");
}

/* ---- arithmetic intrinsics: IEEE operations, each rounded on its own --------------------- */
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
static inline float __frcp_rn(float a) { return 1.0f / a; }
static inline float __fsqrt_rn(float a) { return sqrtf(a); }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dsub_rn(double a, double b) { return a - b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline double __ddiv_rn(double a, double b) { return a / b; }
static inline double __fma_rn(double a, double b, double c) { return fma(a, b, c); }
static inline float __fdividef(float a, float b) { return a / b; }
/* glibc declares these names itself: CUDA's fast versions are the accurate ones here */
#define __expf expf
#define __logf logf
#define __sinf sinf
#define __cosf cosf
#define __powf powf
static inline float __saturatef(float a) { return a != a ? 0.0f : a < 0 ? 0.0f : a > 1 ? 1.0f : a; }
static inline float rsqrtf(float a) { return 1.0f / sqrtf(a); }
static inline double rsqrt(double a) { return 1.0 / sqrt(a); }
static inline int __float2int_rn(float a) { return (int)nearbyintf(a); }
static inline int __float2int_rz(float a) { return (int)a; }
static inline float __int2float_rn(int a) { return (float)a; }
static inline int __float_as_int(float a) { return wemu::from_bits<int>(wemu::to_bits(a)); }
static inline float __int_as_float(int a) { return wemu::from_bits<float>(wemu::to_bits(a)); }
static inline unsigned __float_as_uint(float a) { return wemu::from_bits<unsigned>(wemu::to_bits(a)); }
static inline float __uint_as_float(unsigned a) { return wemu::from_bits<float>(wemu::to_bits(a)); }
static inline long long __double_as_longlong(double a)
{
    return wemu::from_bits<long long>(wemu::to_bits(a));
}
static inline double __longlong_as_double(long long a)
{
    return wemu::from_bits<double>(wemu::to_bits(a));
}
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
static inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline int __ffsll(long long x) { return __builtin_ffsll(x); }
static inline unsigned __brev(unsigned x)
{
    x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
    x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
    x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
    return __builtin_bswap32(x);
}
template <typename T> static inline T __ldg(const T *p) { return *p; }
static inline void __trap() { wemu_fault("__trap()", nullptr); }
/* The device's min and max for arithmetic types (CUDA's math_functions.h overloads). */
template <typename A, typename B,
          typename = std::enable_if_t<std::is_arithmetic<A>::value && std::is_arithmetic<B>::value>>
static inline std::common_type_t<A, B> min(A a, B b) { return a < b ? a : b; }
template <typename A, typename B,
          typename = std::enable_if_t<std::is_arithmetic<A>::value && std::is_arithmetic<B>::value>>
static inline std::common_type_t<A, B> max(A a, B b) { return a > b ? a : b; }

/* ---- shared memory: cu2cc.py's rewrite of `__shared__ T name[N];` ----------------------- */
namespace wemu {
/* The block's instance of the declaration whose site key is `key` (one per instantiation):
 * made by the first thread of the block to reach it, filled with garbage (0xff bytes). */
template <typename T> inline T &shared_var(char *key, const char *name)
{
    return *static_cast<T *>(wemu_shared_static(key, sizeof(T), alignof(T), name));
}
template <typename T> inline T *shared_dynamic(size_t align, const char *name)
{
    return static_cast<T *>(wemu_shared_dynamic(align > alignof(T) ? align : alignof(T), name));
}
} // namespace wemu

/* ---- the launch ---------------------------------------------------------------------------- */
struct weft_iter; /* weft's strided iterator: its operands' data pointers are checked */

namespace wemu {

/* A kernel with its arguments, run once per device thread. */
struct KernelJob {
    virtual ~KernelJob() {}
    virtual void run() = 0;
};

struct LaunchSpec {
    const void *fn;
    const char *name;  /* as written at the launch: "reduce_kernel<Op>" */
    long max_threads;  /* the kernel's __launch_bounds__, 0 when none */
    dim3 grid, block;
    size_t shmem;
    cudaStream_t stream;
    size_t param_bytes;
};

/* A pointer among the arguments: the runtime checks that it is device memory (or
 * pinned host memory, which UVA maps), as a GPU would fault on any other. */
struct PointerArg {
    int index;
    const void *value;
};

/* Queues the job on spec.stream (or records a launch error, kept for cudaGetLastError);
 * takes ownership of job. */
WEMU_API void launch(const LaunchSpec &spec, KernelJob *job, const PointerArg *ptrs, int nptrs);

/* The device pointers an argument carries: pointers themselves, and the operand pointers
 * of weft's iterator; other structures are not looked into. */
template <typename T, typename = void> struct pointers_of {
    static int collect(const T &, int, PointerArg *, int) { return 0; }
};
template <typename T> struct pointers_of<T *, void> {
    static int collect(T *const &p, int index, PointerArg *out, int room)
    {
        if (room < 1)
            return 0;
        out[0] = PointerArg{index, (const void *)p};
        return 1;
    }
};
template <typename T>
struct pointers_of<T, std::enable_if_t<std::is_same<T, ::weft_iter>::value>> {
    static int collect(const T &it, int index, PointerArg *out, int room)
    {
        int n = 0;
        for (int k = 0; k < it.nops && n < room; k++)
            out[n++] = PointerArg{index, (const void *)it.data[k]};
        return n;
    }
};

/* The kernel (a function pointer, or the generic lambda of a deduced launch) and its
 * arguments, as copied at the launch. */
template <typename F, typename... A> struct Job final : KernelJob {
    F fn;
    std::tuple<A...> args;
    template <typename... B> Job(F f, B &&...b) : fn(f), args(std::forward<B>(b)...) {}
    /* each thread gets its own copies of the arguments, as a kernel's are its own */
    void run() override { std::apply(fn, args); }
    int pointers(PointerArg *out, int room) const
    {
        return collect(out, room, std::index_sequence_for<A...>{});
    }
    template <size_t... I>
    int collect(PointerArg *out, int room, std::index_sequence<I...>) const
    {
        int n = 0;
        ((n += pointers_of<A>::collect(std::get<I>(args), (int)I, out + n, room - n)), ...);
        return n;
    }
};

template <typename... A> constexpr size_t param_bytes()
{
    return (0 + ... + sizeof(A));
}

template <typename F, typename... A> inline void submit(LaunchSpec spec, Job<F, A...> *job)
{
    /* CUDA 12.1+ on Volta and later: 32764 bytes of parameters */
    static_assert(param_bytes<A...>() <= 32764, "kernel parameters exceed CUDA's 32764 bytes");
    PointerArg ptrs[64];
    int n = job->pointers(ptrs, 64);
    spec.param_bytes = param_bytes<A...>();
    launch(spec, job, ptrs, n);
}

template <typename... P> class Launcher {
  public:
    Launcher(void (*fn)(P...), const LaunchSpec &spec) : fn_(fn), spec_(spec) {}
    /* the arguments converted to the kernel's parameter types, as in a call */
    void operator()(P... args) const
    {
        submit(spec_, new Job<void (*)(P...), std::decay_t<P>...>(fn_, std::move(args)...));
    }

  private:
    void (*fn_)(P...);
    LaunchSpec spec_;
};

/* One key per deduced launch site and argument types (a kernel's identity for the
 * shared memory it was seen to use). */
template <typename L, typename... A> inline const void *site_key()
{
    static char key;
    return &key;
}

template <typename L> class DeducedLauncher {
  public:
    DeducedLauncher(L fn, const LaunchSpec &spec) : fn_(fn), spec_(spec) {}
    template <typename... A> void operator()(A &&...args) const
    {
        LaunchSpec spec = spec_;
        spec.fn = site_key<L, std::decay_t<A>...>();
        submit(spec, new Job<L, std::decay_t<A>...>(fn_, std::forward<A>(args)...));
    }

  private:
    L fn_;
    LaunchSpec spec_;
};

/* cu2cc.py's rewrite of `fn<<<grid, block, shmem, stream>>>`. */
template <typename... P>
inline Launcher<P...> make_launcher(void (*fn)(P...), const char *name, long max_threads,
                                    dim3 grid, dim3 block, size_t shmem = 0,
                                    cudaStream_t stream = 0)
{
    return Launcher<P...>(fn, LaunchSpec{(const void *)fn, name, max_threads, grid, block, shmem,
                                         stream, 0});
}

/* ... and of a template kernel whose launch leaves template arguments to deduce. */
template <typename L>
inline DeducedLauncher<L> make_deduced_launcher(L fn, const char *name, long max_threads,
                                                dim3 grid, dim3 block, size_t shmem = 0,
                                                cudaStream_t stream = 0)
{
    return DeducedLauncher<L>(fn, LaunchSpec{nullptr, name, max_threads, grid, block, shmem,
                                             stream, 0});
}

} // namespace wemu

/* cudaFuncSetAttribute on a kernel, as cuda_runtime.h's template offers it. */
template <typename... P>
static inline cudaError_t cudaFuncSetAttribute(void (*fn)(P...), enum cudaFuncAttribute attr,
                                               int value)
{
    return cudaFuncSetAttribute((const void *)fn, attr, value);
}

#endif
