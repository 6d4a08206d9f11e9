/* bench/cublas_direct.c: the GPU figures of bench/gpu-check.sh, each measured with the
 * CUDA libraries called directly and, when built with -DWITH_WEFT (gpu-check.sh does
 * this), through weft on cuda:0 on the next line, so both come from the same run:
 *
 *   matmul_<dtype>_<n>[_at]  TFLOP/s  C = A @ B, n x n x n (_at: A read through its
 *   matmul_<dtype>_<b>x<n>            transpose; b x: batched): cublasSgemm[StridedBatched]
 *                                     (weft's float32 path while allow_tf32 is off, the
 *                                     default) or cublasGemmStridedBatchedEx with float
 *                                     accumulation (16-bit types), against weft_matmul
 *   copy_d2d                 GB/s     256 MiB read + written: cudaMemcpy against weft_clone
 *   copy_transposed          GB/s     8192 x 8192 float32 made contiguous from its
 *                                     transpose: weft_contiguous(weft_t(x)) (the direct
 *                                     line repeats copy_d2d as its roofline)
 *   h2d_pageable / h2d_pinned / h2d_pinned_nonblocking
 *                            GB/s     256 MiB host to device: cudaMemcpy(Async) from
 *                                     malloc'd or cudaHostAlloc'd memory, against
 *                                     weft_copy_nonblocking_ from a cpu tensor, from the
 *                                     backend's pinned memory, and non-blocking from it
 *   alloc_free_<size>        us       one allocation and its release: cudaMalloc +
 *                                     cudaFree against weft_empty + weft_tensor_release
 *                                     (the caching allocator)
 *   add_/exp_<dtype>[_transposed], sum_f32, softmax_f32
 *                            GB/s     weft only, bytes read + written over 256 MiB
 *                                     inputs, next to copy_d2d (their roofline)
 *
 * Lines read "name value unit [direct|weft]". Each figure is the median over REPEATS runs
 * of `iters` calls ended by a device synchronisation, after a warm-up run. Everything is
 * queued on the legacy default stream, weft's default.
 *
 *   cublas_direct [--quick]      (--quick: 4096 only, fewer repeats)
 *
 * Exit status: 0, or 1 on an error. Plain C that also compiles as C++ (nvcc). */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <weft/half.h>

#ifdef WITH_WEFT
#include <weft.h>
#include <weft/backend.h>
#include <weft/plugin.h>

/* cuda:0. Device types have no fixed numbers: "cuda" gets its id when it is first named. */
static weft_device cuda0(void)
{
    weft_device d = WEFT_CPU;
    weft_device_parse("cuda:0", &d);
    return d;
}
#endif

#define MAX_REPEATS 15

static int repeats = 7;

/* ---- plumbing ------------------------------------------------------------------------ */

static void die(const char *what, const char *why, int line)
{
    fprintf(stderr, "cublas_direct: %s failed (line %d): %s\n", what, line, why);
    exit(1);
}

#define CHECK_CUDA(call)                                                                      \
    do {                                                                                      \
        cudaError_t err_ = (call);                                                            \
        if (err_ != cudaSuccess)                                                              \
            die(#call, cudaGetErrorString(err_), __LINE__);                                   \
    } while (0)
#define CHECK_BLAS(call)                                                                      \
    do {                                                                                      \
        cublasStatus_t st_ = (call);                                                          \
        if (st_ != CUBLAS_STATUS_SUCCESS)                                                     \
            die(#call, cublasGetStatusString(st_), __LINE__);                                 \
    } while (0)

#ifdef WITH_WEFT
/* A weft call returned NULL or a negative status. */
#define CHECK_WEFT(ok)                                                                        \
    do {                                                                                      \
        if (!(ok))                                                                            \
            die(#ok, weft_error_message(), __LINE__);                                         \
    } while (0)
#endif

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef void (*bench_fn)(void *ctx);

/* Median seconds per call over the runs of `iters` calls (each ended by a device
 * synchronisation), after a warm-up run. */
static double per_call(bench_fn fn, void *ctx, int iters)
{
    double samples[MAX_REPEATS];
    fn(ctx);
    CHECK_CUDA(cudaDeviceSynchronize());
    for (int r = 0; r < repeats; r++) {
        double t0 = now_seconds();
        for (int i = 0; i < iters; i++)
            fn(ctx);
        CHECK_CUDA(cudaDeviceSynchronize());
        samples[r] = (now_seconds() - t0) / iters;
    }
    qsort(samples, (size_t)repeats, sizeof *samples, compare_double);
    return samples[repeats / 2];
}

static void report(const char *name, double value, const char *unit, const char *who)
{
    printf("%-28s %10.2f %-8s %s\n", name, value, unit, who);
    fflush(stdout);
}

/* n values uniform on [-1, 1) as `size`-byte elements: 4 float32, 2 float16 or bfloat16
 * (bf16 true) (malloc'd). */
static void *host_values(size_t n, int size, bool bf16, unsigned seed)
{
    void *p = malloc(n * (size_t)size);
    if (!p)
        die("malloc", "out of host memory", __LINE__);
    uint32_t s = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        float v = (float)(s >> 8) / 8388608.0f - 1.0f;
        if (size == 4)
            ((float *)p)[i] = v;
        else
            ((uint16_t *)p)[i] = bf16 ? weft_float_to_bf16(v) : weft_float_to_f16(v);
    }
    return p;
}

/* ---- matmul ------------------------------------------------------------------------------ */

struct gemm_ctx {
    cublasHandle_t handle;
    int n, batch;
    bool a_transposed; /* A is read through its transpose (a column-major buffer) */
    cudaDataType_t type;
    void *a, *b, *c;
#ifdef WITH_WEFT
    weft_tensor *ta, *tb;
#endif
};

/* Row-major C = A @ B is column-major C^T = B^T A^T: B first, as weft's kernel does. */
static void direct_gemm(void *p)
{
    struct gemm_ctx *g = (struct gemm_ctx *)p;
    const float one = 1, zero = 0;
    const long long stride = (long long)g->n * g->n;
    cublasOperation_t op_a = g->a_transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (g->type == CUDA_R_32F && g->batch > 1) {
        CHECK_BLAS(cublasSgemmStridedBatched(g->handle, CUBLAS_OP_N, op_a, g->n, g->n, g->n, &one,
                                             (const float *)g->b, g->n, stride,
                                             (const float *)g->a, g->n, stride, &zero,
                                             (float *)g->c, g->n, stride, g->batch));
        return;
    }
    if (g->type == CUDA_R_32F) {
        CHECK_BLAS(cublasSgemm(g->handle, CUBLAS_OP_N, op_a, g->n, g->n, g->n, &one,
                               (const float *)g->b, g->n, (const float *)g->a, g->n, &zero,
                               (float *)g->c, g->n));
        return;
    }
    CHECK_BLAS(cublasGemmStridedBatchedEx(g->handle, CUBLAS_OP_N, op_a, g->n, g->n, g->n, &one,
                                          g->b, g->type, g->n, stride, g->a, g->type, g->n, stride,
                                          &zero, g->c, g->type, g->n, stride, g->batch,
                                          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

#ifdef WITH_WEFT
static void weft_gemm(void *p)
{
    struct gemm_ctx *g = (struct gemm_ctx *)p;
    weft_tensor *a = g->a_transposed ? weft_transpose(g->ta, -2, -1) : weft_tensor_retain(g->ta);
    CHECK_WEFT(a);
    weft_tensor *c = weft_matmul(a, g->tb);
    CHECK_WEFT(c);
    weft_tensor_release(c);
    weft_tensor_release(a);
}
#endif

/* batch x (n x n x n) products; a_transposed: A is the transpose of a stored matrix. */
static void bench_matmul(cublasHandle_t handle, int n, int batch, bool a_transposed,
                         cudaDataType_t type)
{
    int size = type == CUDA_R_32F ? 4 : 2;
    bool bf16 = type == CUDA_R_16BF;
    const char *dname = type == CUDA_R_32F ? "f32" : bf16 ? "bf16" : "f16";
    size_t count = (size_t)batch * (size_t)n * (size_t)n, bytes = count * (size_t)size;
    void *ha = host_values(count, size, bf16, 1), *hb = host_values(count, size, bf16, 2);
    struct gemm_ctx g;
    memset(&g, 0, sizeof g);
    g.handle = handle;
    g.n = n;
    g.batch = batch;
    g.a_transposed = a_transposed;
    g.type = type;
    CHECK_CUDA(cudaMalloc(&g.a, bytes));
    CHECK_CUDA(cudaMalloc(&g.b, bytes));
    CHECK_CUDA(cudaMalloc(&g.c, bytes));
    CHECK_CUDA(cudaMemcpy(g.a, ha, bytes, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(g.b, hb, bytes, cudaMemcpyHostToDevice));
    char name[64];
    if (batch > 1)
        snprintf(name, sizeof name, "matmul_%s_%dx%d", dname, batch, n);
    else
        snprintf(name, sizeof name, "matmul_%s_%d%s", dname, n, a_transposed ? "_at" : "");
    double flops = 2.0 * (double)batch * (double)n * (double)n * (double)n;
    int iters = flops > 5e11 ? 5 : 20;
    report(name, flops / per_call(direct_gemm, &g, iters) / 1e12, "TFLOP/s", "direct");
#ifdef WITH_WEFT
    enum weft_dtype dt = type == CUDA_R_32F ? WEFT_F32 : bf16 ? WEFT_BF16 : WEFT_F16;
    const int64_t shape[3] = {batch, n, n};
    g.ta = weft_from_host(ha, 3, shape, dt, cuda0());
    g.tb = weft_from_host(hb, 3, shape, dt, cuda0());
    CHECK_WEFT(g.ta && g.tb);
    report(name, flops / per_call(weft_gemm, &g, iters) / 1e12, "TFLOP/s", "weft");
    weft_tensor_release(g.ta);
    weft_tensor_release(g.tb);
    weft_empty_cache(cuda0());
#endif
    CHECK_CUDA(cudaFree(g.a));
    CHECK_CUDA(cudaFree(g.b));
    CHECK_CUDA(cudaFree(g.c));
    free(ha);
    free(hb);
}

/* ---- copies -------------------------------------------------------------------------------- */

#define COPY_BYTES ((size_t)256 << 20) /* 8192 x 8192 float32 */

struct copy_ctx {
    void *dst;
    const void *src;
    size_t bytes;
    enum cudaMemcpyKind kind;
    bool async;
#ifdef WITH_WEFT
    weft_tensor *tdst, *tsrc;
    bool non_blocking;
#endif
};

static void direct_copy(void *p)
{
    struct copy_ctx *c = (struct copy_ctx *)p;
    if (c->async)
        CHECK_CUDA(cudaMemcpyAsync(c->dst, c->src, c->bytes, c->kind, 0));
    else
        CHECK_CUDA(cudaMemcpy(c->dst, c->src, c->bytes, c->kind));
}

#ifdef WITH_WEFT
static void weft_clone_once(void *p)
{
    struct copy_ctx *c = (struct copy_ctx *)p;
    weft_tensor *t = weft_clone(c->tsrc);
    CHECK_WEFT(t);
    weft_tensor_release(t);
}

static void weft_transpose_once(void *p)
{
    struct copy_ctx *c = (struct copy_ctx *)p;
    weft_tensor *v = weft_t(c->tsrc);
    CHECK_WEFT(v);
    weft_tensor *t = weft_contiguous(v);
    CHECK_WEFT(t);
    weft_tensor_release(t);
    weft_tensor_release(v);
}

static void weft_copy_once(void *p)
{
    struct copy_ctx *c = (struct copy_ctx *)p;
    CHECK_WEFT(weft_copy_nonblocking_(c->tdst, c->tsrc, c->non_blocking) == 0);
}
#endif

static double gbps(size_t bytes, double seconds)
{
    return (double)bytes / seconds / 1e9;
}

static void bench_device_copies(void)
{
    struct copy_ctx c;
    memset(&c, 0, sizeof c);
    void *src, *dst;
    CHECK_CUDA(cudaMalloc(&src, COPY_BYTES));
    CHECK_CUDA(cudaMalloc(&dst, COPY_BYTES));
    CHECK_CUDA(cudaMemset(src, 0, COPY_BYTES));
    c.dst = dst;
    c.src = src;
    c.bytes = COPY_BYTES;
    c.kind = cudaMemcpyDeviceToDevice;
    c.async = true;
    double d2d = gbps(2 * COPY_BYTES, per_call(direct_copy, &c, 50));
    report("copy_d2d", d2d, "GB/s", "direct");
#ifdef WITH_WEFT
    const int64_t shape[2] = {8192, 8192};
    c.tsrc = weft_zeros(2, shape, WEFT_F32, cuda0());
    CHECK_WEFT(c.tsrc);
    report("copy_d2d", gbps(2 * COPY_BYTES, per_call(weft_clone_once, &c, 50)), "GB/s", "weft");
    report("copy_transposed", d2d, "GB/s", "direct(d2d)");
    report("copy_transposed", gbps(2 * COPY_BYTES, per_call(weft_transpose_once, &c, 20)),
           "GB/s", "weft");
    weft_tensor_release(c.tsrc);
    weft_empty_cache(cuda0());
#endif
    CHECK_CUDA(cudaFree(src));
    CHECK_CUDA(cudaFree(dst));
}

static void bench_host_copies(void)
{
    struct copy_ctx c;
    memset(&c, 0, sizeof c);
    void *dst, *pinned, *pageable = malloc(COPY_BYTES);
    if (!pageable)
        die("malloc", "out of host memory", __LINE__);
    memset(pageable, 0, COPY_BYTES);
    CHECK_CUDA(cudaMalloc(&dst, COPY_BYTES));
    CHECK_CUDA(cudaHostAlloc(&pinned, COPY_BYTES, cudaHostAllocDefault));
    memset(pinned, 0, COPY_BYTES);
    c.dst = dst;
    c.bytes = COPY_BYTES;
    c.kind = cudaMemcpyHostToDevice;
    c.src = pageable;
    report("h2d_pageable", gbps(COPY_BYTES, per_call(direct_copy, &c, 5)), "GB/s", "direct");
    c.src = pinned;
    report("h2d_pinned", gbps(COPY_BYTES, per_call(direct_copy, &c, 10)), "GB/s", "direct");
    c.async = true;
    report("h2d_pinned_nonblocking", gbps(COPY_BYTES, per_call(direct_copy, &c, 10)), "GB/s",
           "direct");
#ifdef WITH_WEFT
    const int64_t n = (int64_t)(COPY_BYTES / 4);
    const struct weft_backend *be = weft_backend_get(cuda0().type);
    CHECK_WEFT(be && be->host_alloc_pinned && be->host_free_pinned);
    void *wpinned = be->host_alloc_pinned(be->context, COPY_BYTES);
    CHECK_WEFT(wpinned);
    memset(wpinned, 0, COPY_BYTES);
    c.tdst = weft_empty(1, &n, WEFT_F32, cuda0());
    c.tsrc = weft_zeros(1, &n, WEFT_F32, WEFT_CPU);
    CHECK_WEFT(c.tdst && c.tsrc);
    c.non_blocking = false;
    report("h2d_pageable", gbps(COPY_BYTES, per_call(weft_copy_once, &c, 5)), "GB/s", "weft");
    weft_tensor_release(c.tsrc);
    c.tsrc = weft_from_blob(wpinned, 1, &n, NULL, WEFT_F32, WEFT_CPU, NULL, NULL);
    CHECK_WEFT(c.tsrc);
    report("h2d_pinned", gbps(COPY_BYTES, per_call(weft_copy_once, &c, 10)), "GB/s", "weft");
    c.non_blocking = true;
    report("h2d_pinned_nonblocking", gbps(COPY_BYTES, per_call(weft_copy_once, &c, 10)), "GB/s",
           "weft");
    CHECK_CUDA(cudaDeviceSynchronize());
    weft_tensor_release(c.tsrc);
    weft_tensor_release(c.tdst);
    be->host_free_pinned(be->context, wpinned, COPY_BYTES);
    weft_empty_cache(cuda0());
#endif
    CHECK_CUDA(cudaFreeHost(pinned));
    CHECK_CUDA(cudaFree(dst));
    free(pageable);
}

/* ---- elementwise and reductions (weft only) -------------------------------------------------- */

#ifdef WITH_WEFT
struct op_ctx {
    weft_tensor *x;
    int which; /* 0 add, 1 exp, 2 sum, 3 softmax over the last dim */
};

static void weft_op_once(void *p)
{
    struct op_ctx *c = (struct op_ctx *)p;
    weft_tensor *y = NULL;
    switch (c->which) {
    case 0: y = weft_add(c->x, c->x); break;
    case 1: y = weft_exp(c->x); break;
    case 2: y = weft_sum(c->x, 0, NULL, false); break;
    default: y = weft_softmax(c->x, -1); break;
    }
    CHECK_WEFT(y);
    weft_tensor_release(y);
}

/* op on x ([rows, cols] of dtype dt, 256 MiB; its transpose when `transposed`), which
 * moves `passes` times x's bytes. */
static void bench_op(const char *name, int which, enum weft_dtype dt, int64_t rows, bool transposed,
                     double passes)
{
    const int64_t cols = (int64_t)(COPY_BYTES / weft_dtype_size(dt)) / rows;
    const int64_t shape[2] = {rows, cols};
    struct op_ctx c = {weft_rand(2, shape, dt, cuda0()), which};
    CHECK_WEFT(c.x);
    if (transposed) {
        weft_tensor *t = weft_t(c.x);
        CHECK_WEFT(t);
        weft_tensor_release(c.x);
        c.x = t;
    }
    report(name, gbps((size_t)(passes * (double)COPY_BYTES), per_call(weft_op_once, &c, 20)),
           "GB/s", "weft");
    weft_tensor_release(c.x);
    weft_empty_cache(cuda0());
}

static void bench_ops(void)
{
    bench_op("add_f32", 0, WEFT_F32, 8192, false, 3);
    bench_op("add_f32_transposed", 0, WEFT_F32, 8192, true, 3);
    bench_op("exp_f32", 1, WEFT_F32, 8192, false, 2);
    bench_op("add_bf16", 0, WEFT_BF16, 8192, false, 3);
    bench_op("exp_bf16", 1, WEFT_BF16, 8192, false, 2);
    bench_op("sum_f32", 2, WEFT_F32, 8192, false, 1);
    bench_op("softmax_f32", 3, WEFT_F32, 65536, false, 2);
}
#endif

/* ---- allocation -------------------------------------------------------------------------- */

struct alloc_ctx {
    size_t bytes;
};

static void direct_alloc(void *p)
{
    struct alloc_ctx *a = (struct alloc_ctx *)p;
    void *ptr;
    CHECK_CUDA(cudaMalloc(&ptr, a->bytes));
    CHECK_CUDA(cudaFree(ptr));
}

#ifdef WITH_WEFT
static void weft_alloc(void *p)
{
    struct alloc_ctx *a = (struct alloc_ctx *)p;
    const int64_t n = (int64_t)a->bytes;
    weft_tensor *t = weft_empty(1, &n, WEFT_U8, cuda0());
    CHECK_WEFT(t);
    weft_tensor_release(t);
}
#endif

static void bench_alloc(void)
{
    const size_t sizes[] = {(size_t)4 << 10, (size_t)1 << 20, (size_t)64 << 20};
    const char *names[] = {"alloc_free_4KiB", "alloc_free_1MiB", "alloc_free_64MiB"};
    for (int i = 0; i < 3; i++) {
        struct alloc_ctx a = {sizes[i]};
        report(names[i], 1e6 * per_call(direct_alloc, &a, 200), "us", "direct");
#ifdef WITH_WEFT
        report(names[i], 1e6 * per_call(weft_alloc, &a, 2000), "us", "weft");
#endif
    }
#ifdef WITH_WEFT
    struct weft_memory_stats st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    if (weft_memory_stats(cuda0(), &st) == 0 && st.num_allocs > 0)
        report("alloc_cache_hit_rate", 100.0 * (double)st.num_cache_hits / (double)st.num_allocs,
               "%", "weft");
#endif
}

/* ------------------------------------------------------------------------------------------ */

int main(int argc, char **argv)
{
    bool quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    if (argc > 1 && !quick) {
        fprintf(stderr, "usage: cublas_direct [--quick]\n");
        return 1;
    }
    if (quick)
        repeats = 3;
    CHECK_CUDA(cudaSetDevice(0));
    struct cudaDeviceProp prop;
    CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
    printf("# %s, %d SMs, %.0f GiB\n", prop.name, prop.multiProcessorCount,
           (double)prop.totalGlobalMem / (1 << 30));
#ifdef WITH_WEFT
    CHECK_WEFT(weft_plugin_load("cuda") == 0);
    printf("# weft float32 matmul: allow_tf32 %s\n", weft_allow_tf32() ? "on" : "off");
#endif
    cublasHandle_t handle;
    CHECK_BLAS(cublasCreate(&handle));
    const cudaDataType_t types[] = {CUDA_R_32F, CUDA_R_16F, CUDA_R_16BF};
    const int sizes[] = {4096, 8192};
    for (int s = 0; s < (quick ? 1 : 2); s++)
        for (int t = 0; t < 3; t++)
            bench_matmul(handle, sizes[s], 1, false, types[t]);
    bench_matmul(handle, 4096, 1, true, CUDA_R_32F);
    bench_matmul(handle, 512, 64, false, CUDA_R_32F);
    bench_matmul(handle, 512, 64, false, CUDA_R_16BF);
    CHECK_BLAS(cublasDestroy(handle));
    bench_device_copies();
    bench_host_copies();
#ifdef WITH_WEFT
    bench_ops();
#endif
    bench_alloc();
#ifdef WITH_WEFT
    char *summary = weft_memory_summary(cuda0(), true);
    if (summary)
        printf("%s\n", summary);
    free(summary);
#endif
    return 0;
}
