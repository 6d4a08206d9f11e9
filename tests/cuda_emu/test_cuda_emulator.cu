/* tests/cuda_emu/test_cuda_emulator.cu: weft's CUDA emulator against the execution model
 * it promises (docs/cuda-emulator.md), with small kernels written for the purpose, built
 * through the same step as the plugins' (cu2cc.py). Each behaviour that would let a
 * kernel bug pass is shown to catch one: a missing barrier gives wrong sums for some
 * seed, a divergent barrier, a bad shuffle mask, a host pointer, a misaligned access, a
 * missing stream wait, an over-long block or too much shared memory all fail as a GPU
 * would fail them (or, where a GPU would silently read garbage, visibly). */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cusparse.h>

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#endif

/* ---- kernels ------------------------------------------------------------------------------- */

/* out[block] = sum of in[block * n .. + n) through shared memory; with `sync` false the
 * tree reads its partner's slot without waiting for it. */
__global__ void tree_sum(const float *in, float *out, int n, bool sync)
{
    __shared__ float s[256];
    int t = threadIdx.x;
    s[t] = t < n ? in[blockIdx.x * n + t] : 0.0f;
    if (sync)
        __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
        if (t < half)
            s[t] += s[t + half];
        if (sync)
            __syncthreads();
    }
    if (t == 0)
        out[blockIdx.x] = s[0];
}

/* Two warps sum rows: each warp reduces with shuffles, lane 0 posts its sum in shared
 * memory, and after a barrier every thread adds both posts and writes what it got. With `reuse_sync` false no
 * barrier keeps a warp that runs ahead into the next row from overwriting its post before
 * the other warp has read it (block_reduce without its second barrier). */
__global__ void row_sums(const float *in, float *out, int rows, bool reuse_sync)
{
    __shared__ float post[2];
    for (int r = 0; r < rows; r++) {
        float v = in[r * 64 + threadIdx.x];
        for (int mask = 16; mask > 0; mask >>= 1)
            v += __shfl_xor_sync(0xffffffffu, v, mask);
        if (threadIdx.x % 32 == 0)
            post[threadIdx.x / 32] = v;
        __syncthreads();
        float sum = post[0] + post[1];
        if (reuse_sync)
            __syncthreads();
        out[r * 64 + threadIdx.x] = sum;
    }
}

/* Threads past n return before the barrier the others reach. */
__global__ void early_return(float *out, int n)
{
    __shared__ float s[64];
    int t = threadIdx.x;
    if (t >= n)
        return;
    s[t] = (float)t;
    __syncthreads();
    out[t] = s[(t + 1) % n];
}

__global__ void warp_sum(const int *in, int *out, unsigned mask)
{
    int v = in[threadIdx.x];
    for (int off = 16; off > 0; off /= 2)
        v += __shfl_xor_sync(mask, v, off);
    out[threadIdx.x] = v;
}

__global__ void shfl_down_from(const int *in, int *out, unsigned mask, int delta)
{
    int v = in[threadIdx.x];
    if (mask & (1u << (threadIdx.x % 32)))
        v = __shfl_down_sync(mask, v, delta);
    out[threadIdx.x] = v;
}

__global__ void ballot(const int *in, unsigned *out)
{
    out[threadIdx.x] = __ballot_sync(0xffffffffu, in[threadIdx.x] > 0);
}

__global__ void count_up(unsigned long long *counter, float *fsum)
{
    atomicAdd(counter, 1ull);
    atomicAdd(fsum, 0.5f);
}

__global__ void fill(float *p, int n, float v)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        p[i] = v;
}

__global__ void read_past(const float *p, int n, float *out)
{
    out[threadIdx.x] = p[n + threadIdx.x];
}

__global__ void load_vec4(const float *p, float *out)
{
    float4 v = *reinterpret_cast<const float4 *>(p);
    out[0] = v.x + v.y + v.z + v.w;
}

__global__ void atomic_misaligned(int *p)
{
    atomicAdd(reinterpret_cast<int *>(reinterpret_cast<char *>(p) + 2), 1);
}

__global__ void big_static_shared(float *out)
{
    __shared__ float a[8192];
    __shared__ float b[8192]; /* 64 KiB in all: more than a block may have */
    a[threadIdx.x] = b[threadIdx.x] = 1;
    out[threadIdx.x] = a[threadIdx.x] + b[threadIdx.x];
}

__global__ void dynamic_shared(float *out, int n)
{
    extern __shared__ __align__(16) unsigned char raw[];
    float *s = reinterpret_cast<float *>(raw);
    s[threadIdx.x] = (float)threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = s[n - 1 - threadIdx.x];
}

__global__ void __launch_bounds__(64) bounded(float *out)
{
    out[threadIdx.x] = 1;
}

/* Which thread wrote the slot last, with no barrier between the writes. */
__global__ void last_writer(int *out)
{
    __shared__ int slot;
    slot = threadIdx.x;
    __syncthreads();
    if (threadIdx.x == 0)
        out[0] = slot;
}

template <typename T, typename F> __global__ void apply(T *p, int n, F f)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        p[i] = f(p[i]);
}

struct Twice {
    __device__ float operator()(float x) const { return 2 * x; }
};

/* ---- helpers ------------------------------------------------------------------------------ */

#define CK(call) cr_assert_eq((call), cudaSuccess, "%s: %s", #call, cudaGetErrorString(cudaGetLastError()))

static float *dev_floats(int n, float v)
{
    float *p = nullptr;
    CK(cudaMalloc((void **)&p, sizeof(float) * n));
    fill<<<1, 256>>>(p, n, v);
    CK(cudaGetLastError());
    return p;
}

template <typename T> static T *to_dev(const T *h, int n)
{
    T *p = nullptr;
    CK(cudaMalloc((void **)&p, sizeof(T) * n));
    CK(cudaMemcpy(p, h, sizeof(T) * n, cudaMemcpyHostToDevice));
    return p;
}

template <typename T> static void from_dev(T *h, const T *d, int n)
{
    CK(cudaMemcpy(h, d, sizeof(T) * n, cudaMemcpyDeviceToHost));
}

static float tree(bool sync, uint64_t seed)
{
    wemu_set_seed(seed);
    float h[256];
    for (int i = 0; i < 256; i++)
        h[i] = (float)(i % 7);
    float *in = to_dev(h, 256), *out = dev_floats(1, 0);
    tree_sum<<<1, 256>>>(in, out, 256, sync);
    float got = -1;
    from_dev(&got, out, 1);
    cudaFree(in);
    cudaFree(out);
    return got;
}

/* ---- barriers and thread order ------------------------------------------------------------ */

Test(emulator, a_shared_memory_tree_with_barriers_sums_right_under_every_seed)
{
    for (uint64_t seed = 1; seed <= 8; seed++)
        cr_expect_eq(tree(true, seed), 762.0f, "seed %llu", (unsigned long long)seed);
}

Test(emulator, the_same_tree_without_barriers_is_wrong_under_some_seed)
{
    int wrong = 0;
    for (uint64_t seed = 1; seed <= 8; seed++)
        wrong += tree(false, seed) != 762.0f;
    cr_expect_gt(wrong, 0, "the threads' order never exposed the missing barriers");
}

Test(emulator, the_order_of_unsynchronised_writes_follows_the_seed)
{
    int *out = nullptr;
    CK(cudaMalloc((void **)&out, sizeof(int)));
    bool seen[64] = {false};
    int distinct = 0;
    for (uint64_t seed = 1; seed <= 16; seed++) {
        wemu_set_seed(seed);
        last_writer<<<1, 64>>>(out);
        int w = -1;
        from_dev(&w, out, 1);
        cr_assert(w >= 0 && w < 64);
        distinct += !seen[w];
        seen[w] = true;
    }
    cr_expect_gt(distinct, 3, "only %d different last writers in 16 seeds", distinct);
}

static int wrong_row_sums(bool reuse_sync, uint64_t seed)
{
    wemu_set_seed(seed);
    const int rows = 8;
    float h[rows * 64], got[rows * 64];
    for (int i = 0; i < rows * 64; i++)
        h[i] = (float)(i / 64 + 1); /* row r sums to 64 (r + 1) */
    float *in = to_dev(h, rows * 64), *out = dev_floats(rows * 64, 0);
    row_sums<<<1, 64>>>(in, out, rows, reuse_sync);
    from_dev(got, out, rows * 64);
    cudaFree(in);
    cudaFree(out);
    int wrong = 0;
    for (int i = 0; i < rows * 64; i++)
        wrong += got[i] != 64.0f * (float)(i / 64 + 1);
    return wrong;
}

/* The threads' order is a priority drawn per barrier interval: a warp may run through all
 * its shuffles and into the next row while the other has yet to read (a uniform pick among
 * the ready threads would let the laggard catch up at every shuffle). */
Test(emulator, a_warp_that_runs_ahead_overwrites_shared_memory_the_other_has_not_read)
{
    int wrong = 0;
    for (uint64_t seed = 1; seed <= 8; seed++) {
        cr_expect_eq(wrong_row_sums(true, seed), 0, "seed %llu", (unsigned long long)seed);
        wrong += wrong_row_sums(false, seed);
    }
    cr_expect_gt(wrong, 0, "no warp ever ran ahead of the other");
}

Test(emulator, threads_that_return_before_a_barrier_the_others_reach_are_a_launch_failure)
{
    float *out = dev_floats(64, 0);
    early_return<<<1, 64>>>(out, 40);
    CK(cudaGetLastError()); /* the launch itself is fine */
    cr_expect_eq(cudaDeviceSynchronize(), cudaErrorLaunchFailure);
    /* sticky, as a GPU's context is lost */
    cr_expect_eq(cudaMemset(out, 0, 4), cudaErrorLaunchFailure);
}

/* ---- warps ---------------------------------------------------------------------------------- */

Test(emulator, a_full_warp_xor_reduction_gives_every_lane_the_sum)
{
    int h[64], got[64];
    for (int i = 0; i < 64; i++)
        h[i] = i;
    int *in = to_dev(h, 64), *out = to_dev(h, 64);
    warp_sum<<<1, 64>>>(in, out, 0xffffffffu);
    from_dev(got, out, 64);
    for (int i = 0; i < 64; i++)
        cr_expect_eq(got[i], i < 32 ? 496 : 1520, "lane %d", i);
}

Test(emulator, shfl_down_reads_its_own_value_past_the_warp_and_garbage_from_lanes_outside_the_mask)
{
    int h[32], got[32];
    for (int i = 0; i < 32; i++)
        h[i] = 100 + i;
    int *in = to_dev(h, 32), *out = to_dev(h, 32);
    shfl_down_from<<<1, 32>>>(in, out, 0x0000ffffu, 4);
    from_dev(got, out, 32);
    for (int i = 0; i < 12; i++)
        cr_expect_eq(got[i], 104 + i, "lane %d", i);
    for (int i = 12; i < 16; i++) /* source lane 16.. is not in the mask */
        cr_expect_eq(got[i], -1, "lane %d reads garbage, got %d", i, got[i]);
    for (int i = 16; i < 32; i++)
        cr_expect_eq(got[i], 100 + i, "lane %d (not shuffling)", i);
}

Test(emulator, ballot_sets_the_bits_of_the_lanes_whose_predicate_holds)
{
    int h[32];
    for (int i = 0; i < 32; i++)
        h[i] = i % 3 == 0;
    int *in = to_dev(h, 32);
    unsigned *out = nullptr, got[32];
    CK(cudaMalloc((void **)&out, sizeof got));
    ballot<<<1, 32>>>(in, out);
    from_dev(got, out, 32);
    cr_expect_eq(got[5], 0x49249249u);
}

Test(emulator, a_full_mask_in_a_partial_warp_names_lanes_that_do_not_exist)
{
    int h[48] = {0};
    int *in = to_dev(h, 48), *out = to_dev(h, 48);
    warp_sum<<<1, 48>>>(in, out, 0xffffffffu);
    cr_expect_eq(cudaDeviceSynchronize(), cudaErrorLaunchFailure);
}

/* ---- atomics -------------------------------------------------------------------------------- */

Test(emulator, atomics_from_every_thread_of_every_block_all_count)
{
    unsigned long long *c = nullptr;
    float *f = dev_floats(1, 0);
    CK(cudaMalloc((void **)&c, sizeof *c));
    CK(cudaMemset(c, 0, sizeof *c));
    count_up<<<37, 96>>>(c, f);
    unsigned long long got = 0;
    float fs = 0;
    from_dev(&got, c, 1);
    from_dev(&fs, f, 1);
    cr_expect_eq(got, 37ull * 96);
    cr_expect_eq(fs, 37 * 96 * 0.5f);
}

Test(emulator, a_misaligned_atomic_is_a_misaligned_address)
{
    int *p = nullptr;
    CK(cudaMalloc((void **)&p, 16));
    atomic_misaligned<<<1, 1>>>(p);
    cr_expect_eq(cudaDeviceSynchronize(), cudaErrorMisalignedAddress);
}

/* ---- memory --------------------------------------------------------------------------------- */

Test(emulator, new_device_memory_holds_garbage_not_zeros)
{
    float *p = nullptr, h[4];
    CK(cudaMalloc((void **)&p, sizeof h));
    from_dev(h, p, 4);
    cr_expect(h[0] != h[0], "fresh memory should read as NaN, got %g", h[0]);
}

Test(emulator, a_kernel_given_a_pageable_host_pointer_meets_an_illegal_address)
{
    float host[64] = {0};
    fill<<<1, 64>>>(host, 64, 1.0f);
    CK(cudaGetLastError());
    cr_expect_eq(cudaDeviceSynchronize(), cudaErrorIllegalAddress);
    cr_expect_eq(host[0], 0.0f, "the kernel did not run");
}

Test(emulator, pinned_host_memory_is_reachable_from_kernels)
{
    float *h = nullptr;
    CK(cudaHostAlloc((void **)&h, 64 * sizeof(float), cudaHostAllocDefault));
    fill<<<1, 64>>>(h, 64, 3.0f);
    CK(cudaDeviceSynchronize());
    cr_expect_eq(h[63], 3.0f);
    CK(cudaFreeHost(h));
}

Test(emulator, a_kernel_given_freed_device_memory_meets_an_illegal_address)
{
    float *p = dev_floats(64, 1);
    CK(cudaFree(p));
    fill<<<1, 64>>>(p, 64, 2.0f);
    cr_expect_eq(cudaDeviceSynchronize(), cudaErrorIllegalAddress);
}

Test(emulator, a_copy_that_runs_past_its_device_allocation_is_an_invalid_value)
{
    float *p = dev_floats(16, 1), h[32];
    cr_expect_eq(cudaMemcpy(h, p, sizeof h, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
    cr_expect_eq(cudaMemcpy(p, h, sizeof h, cudaMemcpyDeviceToHost), cudaErrorInvalidValue,
                 "a copy whose kind does not match its pointers");
}

#ifdef UNDER_ASAN
/* AddressSanitizer sees a kernel read past its allocation (and aborts the test). */
Test(emulator, a_kernel_that_reads_past_its_allocation_is_caught_by_asan, .signal = SIGABRT)
{
    float *p = dev_floats(16, 1), *out = dev_floats(4, 0);
    read_past<<<1, 4>>>(p, 16, out);
    cudaDeviceSynchronize();
}
#endif

/* A kernel that writes past its tensor into the rest of its caching allocator block (as
 * weft's backend announces blocks): ASan's poison in the sanitizer build; in the release
 * build the block's spare bytes hold a pattern, checked after the kernel, and the fault
 * names it. */
#ifdef UNDER_ASAN
Test(emulator, a_kernel_that_writes_past_its_tensor_in_a_cached_block_is_caught, .signal = SIGABRT)
#else
Test(emulator, a_kernel_that_writes_past_its_tensor_in_a_cached_block_is_caught)
#endif
{
    float *block = nullptr;
    CK(cudaMalloc((void **)&block, 512));
    wemu_annotate_alloc(block, 25 * sizeof(float), 512, 0); /* a tensor of 25 floats */
    fill<<<1, 25>>>(block, 25, 1.0f);
    cr_expect_eq(cudaDeviceSynchronize(), cudaSuccess, "25 floats: within the tensor");
    fill<<<1, 26>>>(block, 26, 1.0f);
    cr_expect_eq(cudaDeviceSynchronize(), cudaErrorIllegalAddress, "the 26th is past it");
}

/* A misaligned vector access traps: UBSan reports it and halts in the sanitizer build
 * (exit status 1, UBSAN_OPTIONS=halt_on_error=1 as make test sets it), a trap instruction
 * ends the process in the release build (the emulator names the kernel and thread). */
#ifdef UNDER_ASAN
Test(emulator, a_misaligned_float4_load_traps, .exit_code = 1)
#else
Test(emulator, a_misaligned_float4_load_traps, .signal = SIGILL)
#endif
{
    float *p = dev_floats(16, 1), *out = dev_floats(1, 0);
    load_vec4<<<1, 1>>>(p + 1, out);
    cudaDeviceSynchronize();
}

/* ---- limits ---------------------------------------------------------------------------------- */

Test(emulator, launch_limits_are_cudas_with_its_error_codes)
{
    float *out = dev_floats(2048, 0);
    fill<<<1, 1025>>>(out, 1, 0);
    cr_expect_eq(cudaGetLastError(), cudaErrorInvalidConfiguration, "1025 threads");
    fill<<<dim3(1, 65536), 32>>>(out, 1, 0);
    cr_expect_eq(cudaGetLastError(), cudaErrorInvalidConfiguration, "grid y 65536");
    fill<<<dim3(1, 1, 1), dim3(32, 1, 65)>>>(out, 1, 0);
    cr_expect_eq(cudaGetLastError(), cudaErrorInvalidConfiguration, "block z 65");
    bounded<<<1, 128>>>(out);
    cr_expect_eq(cudaGetLastError(), cudaErrorLaunchOutOfResources, "past __launch_bounds__(64)");
    bounded<<<1, 64>>>(out);
    cr_expect_eq(cudaGetLastError(), cudaSuccess);
    cr_expect_eq(cudaGetLastError(), cudaSuccess, "the error was cleared by reading it");
}

Test(emulator, dynamic_shared_memory_over_48_kib_needs_the_function_attribute)
{
    const int n = 128;
    float *out = dev_floats(n, 0);
    dynamic_shared<<<1, n, 64 * 1024>>>(out, n);
    cr_expect_eq(cudaGetLastError(), cudaErrorInvalidValue);
    CK(cudaFuncSetAttribute(dynamic_shared, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024));
    dynamic_shared<<<1, n, 64 * 1024>>>(out, n);
    CK(cudaGetLastError());
    float h[n];
    from_dev(h, out, n);
    cr_expect_eq(h[0], (float)(n - 1));
}

Test(emulator, static_shared_memory_over_48_kib_fails_the_launch)
{
    float *out = dev_floats(32, 0);
    big_static_shared<<<1, 32>>>(out);
    cr_expect_eq(cudaDeviceSynchronize(), cudaErrorLaunchOutOfResources);
}

Test(emulator, a_template_kernel_deduces_its_functor_from_the_launch)
{
    float *p = dev_floats(300, 1.5f), h[300];
    apply<float><<<2, 256>>>(p, 300, Twice{});
    from_dev(h, p, 300);
    cr_expect_eq(h[299], 3.0f);
}

/* ---- streams and events ---------------------------------------------------------------------- */

Test(emulator, work_runs_when_the_host_synchronises_not_at_the_launch)
{
    float *h = nullptr;
    CK(cudaHostAlloc((void **)&h, sizeof(float), cudaHostAllocDefault));
    h[0] = 7;
    fill<<<1, 1>>>(h, 1, 9.0f);
    cr_expect_eq(h[0], 7.0f, "queued, not run");
    CK(cudaDeviceSynchronize());
    cr_expect_eq(h[0], 9.0f);
}

static void release(cudaStream_t a, cudaStream_t b, cudaEvent_t e, float *d, float *h)
{
    CK(cudaStreamDestroy(a));
    CK(cudaStreamDestroy(b));
    CK(cudaEventDestroy(e));
    CK(cudaFree(d));
    CK(cudaFreeHost(h));
}

/* A copy on stream b of what stream a computes: right with an event wait; without, the
 * old value under the seeds where b's sync does not run a first. */
static float copy_across(bool wait, uint64_t seed)
{
    wemu_set_seed(seed);
    cudaStream_t a, b;
    cudaEvent_t done;
    CK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    float *d = dev_floats(1, 1.0f), *h = nullptr;
    CK(cudaDeviceSynchronize());
    CK(cudaHostAlloc((void **)&h, sizeof(float), cudaHostAllocDefault));
    fill<<<1, 1, 0, a>>>(d, 1, 5.0f);
    CK(cudaEventRecord(done, a));
    if (wait)
        CK(cudaStreamWaitEvent(b, done, 0));
    CK(cudaMemcpyAsync(h, d, sizeof(float), cudaMemcpyDeviceToHost, b));
    CK(cudaStreamSynchronize(b));
    float v = h[0];
    CK(cudaDeviceSynchronize());
    release(a, b, done, d, h);
    return v;
}

Test(emulator, a_stream_that_waits_for_an_event_sees_the_work_before_it)
{
    for (uint64_t seed = 1; seed <= 8; seed++)
        cr_expect_eq(copy_across(true, seed), 5.0f, "seed %llu", (unsigned long long)seed);
}

Test(emulator, a_stream_that_does_not_wait_reads_the_old_value_under_some_seed)
{
    int old = 0;
    for (uint64_t seed = 1; seed <= 8; seed++)
        old += copy_across(false, seed) == 1.0f;
    cr_expect_gt(old, 0, "the copy never ran before the work it should wait for");
}

/* The other way round: stream b should wait for a's work, but the host waits on a (and
 * the event a records after b's copy, as weft's side queue does): b outranks a under some
 * seed and copies before a's write. */
static float copy_before_the_write(uint64_t seed)
{
    wemu_set_seed(seed);
    cudaStream_t a, b;
    cudaEvent_t copied;
    CK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&copied, cudaEventDisableTiming));
    float *d = dev_floats(1, 1.0f), *h = nullptr;
    CK(cudaDeviceSynchronize());
    CK(cudaHostAlloc((void **)&h, sizeof(float), cudaHostAllocDefault));
    fill<<<1, 1, 0, a>>>(d, 1, 5.0f);
    CK(cudaMemcpyAsync(h, d, sizeof(float), cudaMemcpyDeviceToHost, b)); /* no wait */
    CK(cudaEventRecord(copied, b));
    CK(cudaStreamWaitEvent(a, copied, 0));
    CK(cudaStreamSynchronize(a));
    float v = h[0];
    release(a, b, copied, d, h);
    return v;
}

Test(emulator, a_missing_wait_shows_whichever_stream_the_host_waits_on)
{
    int old = 0;
    for (uint64_t seed = 1; seed <= 8; seed++)
        old += copy_before_the_write(seed) == 1.0f;
    cr_expect_gt(old, 0, "b's copy always ran after a's write");
}

Test(emulator, an_event_is_not_ready_at_its_first_query_and_done_at_the_next)
{
    cudaEvent_t e;
    CK(cudaEventCreate(&e));
    cr_expect_eq(cudaEventQuery(e), cudaSuccess, "never recorded");
    float *d = dev_floats(1, 0);
    fill<<<1, 1>>>(d, 1, 2.0f);
    CK(cudaEventRecord(e, 0));
    cr_expect_eq(cudaEventQuery(e), cudaErrorNotReady);
    cr_expect_eq(cudaEventQuery(e), cudaSuccess);
    float h = 0;
    from_dev(&h, d, 1);
    cr_expect_eq(h, 2.0f);
}

Test(emulator, a_pageable_source_is_staged_at_the_call)
{
    float *d = dev_floats(1, 0), h = 4.0f, back = 0;
    CK(cudaMemcpyAsync(d, &h, sizeof h, cudaMemcpyHostToDevice, 0));
    h = 8.0f; /* after the call: the copy already has its own */
    from_dev(&back, d, 1);
    cr_expect_eq(back, 4.0f);
}

/* ---- cuBLAS and cuSPARSE ---------------------------------------------------------------------- */

Test(emulator, cublas_sgemm_is_column_major_with_cublas_argument_checks)
{
    /* A [2, 3] column-major, B [3, 2]: C = A B [2, 2] */
    const float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {1, 0, 1, 0, 1, 1};
    float *da = to_dev(a, 6), *db = to_dev(b, 6), *dc = dev_floats(4, 0), c[4];
    cublasHandle_t h;
    cr_assert_eq(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
    const float one = 1, zero = 0;
    cr_expect_eq(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, da, 2, db, 3, &zero, dc, 2),
                 CUBLAS_STATUS_SUCCESS);
    from_dev(c, dc, 4);
    cr_expect(c[0] == 6 && c[1] == 8 && c[2] == 8 && c[3] == 10, "%g %g %g %g", c[0], c[1], c[2],
              c[3]);
    cr_expect_eq(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, da, 1, db, 3, &zero, dc, 2),
                 CUBLAS_STATUS_INVALID_VALUE, "lda < m");
    cr_expect_eq(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, da, CUDA_R_32F, 2, db,
                              CUDA_R_16F, 3, &zero, dc, CUDA_R_32F, 2, CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT),
                 CUBLAS_STATUS_NOT_SUPPORTED, "A and B of different types");
    cublasDestroy(h);
}

Test(emulator, cublas_tf32_rounds_the_operands)
{
    const float a[1] = {1.0f + 1.0f / 4096}, b[1] = {1.0f};
    float *da = to_dev(a, 1), *db = to_dev(b, 1), *dc = dev_floats(1, 0), c = 0;
    cublasHandle_t h;
    cr_assert_eq(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
    const float one = 1, zero = 0;
    cr_expect_eq(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, da, CUDA_R_32F, 1, db,
                              CUDA_R_32F, 1, &zero, dc, CUDA_R_32F, 1,
                              CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT),
                 CUBLAS_STATUS_SUCCESS);
    from_dev(&c, dc, 1);
    cr_expect_eq(c, 1.0f, "TF32 keeps 10 mantissa bits: %.9g", c);
    cublasDestroy(h);
}

Test(emulator, cusparse_csr_alg2_refuses_column_major_dense_operands)
{
    const int rows[3] = {0, 1, 2}, cols[2] = {0, 1};
    const float vals[2] = {1, 2};
    int *dr = to_dev(rows, 3), *dcol = to_dev(cols, 2);
    float *dv = to_dev(vals, 2), *db = dev_floats(4, 1), *dc = dev_floats(4, 0);
    cusparseHandle_t h;
    cr_assert_eq(cusparseCreate(&h), CUSPARSE_STATUS_SUCCESS);
    cusparseSpMatDescr_t a;
    cusparseConstDnMatDescr_t b;
    cusparseDnMatDescr_t c;
    cr_assert_eq(cusparseCreateCsr(&a, 2, 2, 2, dr, dcol, dv, CUSPARSE_INDEX_32I,
                                   CUSPARSE_INDEX_32I, CUSPARSE_INDEX_BASE_ZERO, CUDA_R_32F),
                 CUSPARSE_STATUS_SUCCESS);
    cr_assert_eq(cusparseCreateConstDnMat(&b, 2, 2, 2, db, CUDA_R_32F, CUSPARSE_ORDER_COL),
                 CUSPARSE_STATUS_SUCCESS);
    cr_assert_eq(cusparseCreateDnMat(&c, 2, 2, 2, dc, CUDA_R_32F, CUSPARSE_ORDER_COL),
                 CUSPARSE_STATUS_SUCCESS);
    const float one = 1, zero = 0;
    size_t size = 0;
    cr_expect_eq(cusparseSpMM_bufferSize(h, CUSPARSE_OPERATION_NON_TRANSPOSE,
                                         CUSPARSE_OPERATION_NON_TRANSPOSE, &one, a, b, &zero, c,
                                         CUDA_R_32F, CUSPARSE_SPMM_CSR_ALG2, &size),
                 CUSPARSE_STATUS_NOT_SUPPORTED);
    cr_expect_eq(cusparseSpMM_bufferSize(h, CUSPARSE_OPERATION_NON_TRANSPOSE,
                                         CUSPARSE_OPERATION_NON_TRANSPOSE, &one, a, b, &zero, c,
                                         CUDA_R_32F, CUSPARSE_SPMM_ALG_DEFAULT, &size),
                 CUSPARSE_STATUS_SUCCESS);
    cr_expect_gt(size, 0u, "a workspace is asked for");
    void *ws = nullptr;
    CK(cudaMalloc(&ws, size));
    cr_expect_eq(cusparseSpMM(h, CUSPARSE_OPERATION_NON_TRANSPOSE, CUSPARSE_OPERATION_NON_TRANSPOSE,
                              &one, a, b, &zero, c, CUDA_R_32F, CUSPARSE_SPMM_ALG_DEFAULT, ws),
                 CUSPARSE_STATUS_SUCCESS);
    float got[4];
    from_dev(got, dc, 4);
    cr_expect(got[0] == 1 && got[1] == 2 && got[2] == 1 && got[3] == 2, "%g %g %g %g", got[0],
              got[1], got[2], got[3]);
    cusparseDestroySpMat(a);
    cusparseDestroyDnMat(b);
    cusparseDestroyDnMat(c);
    cusparseDestroy(h);
}
