/* bench/cusparse_direct.c: the SpMM of weft's sparse benchmark with cuSPARSE called
 * directly, as the reference for weft's cuSPARSE kernels (plugins/sparse/cuda).
 *
 * The matrices are weft-bench's (bench/bench_sparse.c, same generator): A is 100000 x
 * 100000 CSR from 1e6 entries drawn with splitmix64 seed 0 (the few dozen drawn twice are
 * summed), values in [0, 1); B is 100000 x 64 float32, row-major, from seed 1. C = A @ B
 * with cusparseSpMM (CSR_ALG2, the row-major algorithm, or the default where cuSPARSE
 * refuses it), descriptors and workspace made once, every call queued on the legacy
 * default stream (weft's default), the time taken over `iters` calls and a device
 * synchronisation; ms/call is the median over `repeats` such runs. The checksum (the sum
 * of C in double) compares with weft-bench's sparse_csr_spmm line.
 *
 * It also checks on the device that cuSPARSE honours beta = 0 without reading C (C is
 * filled with NaN first): weft's kernel relies on it.
 *
 * Built with -DWITH_WEFT (bench/gpu-sparse.sh does this) it times the same product
 * through weft's API (weft_sparse_mm on cuda:0, which dispatches to weft-sparse-cuda.so)
 * next to the direct call, compares the two results, and runs small correctness checks
 * of the CUDA sparse kernels against the CPU ones (mm, addmm, empty operands, B of any
 * strides, COO, int32/int64 indices, float32/float64, gradients through SDDMM).
 *
 *   cusparse_direct [--rows N] [--nnz N] [--n N] [--iters N] [--repeats N]
 *                   [--no-checks] [--direct-only]
 *
 * Exit status: 0; 1 on an error or a failed check; 2 when weft is under 90% of the
 * direct call's speed. Plain C that also compiles as C++ (nvcc). */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>
#ifndef DISABLE_CUSPARSE_DEPRECATED
#define DISABLE_CUSPARSE_DEPRECATED
#endif
#include <cusparse.h>

#ifdef WITH_WEFT
#include <weft.h>
#include <weft/backend.h>
#include <weft/plugin.h>
#include <weft/sparse.h>

/* cuda:0. Device types have no fixed numbers: "cuda" gets its id when it is first named. */
static weft_device cuda0(void)
{
    weft_device d = WEFT_CPU;
    weft_device_parse("cuda:0", &d);
    return d;
}
#endif

#define TARGET_RATIO 0.90

struct options {
    int64_t rows, nnz, n;
    int iters, repeats;
    bool checks, direct_only;
};

static struct options opt = {100000, 1000000, 64, 50, 5, true, false};

/* ---- plumbing ---------------------------------------------------------------------------- */

static void check_cuda(cudaError_t err, const char *call, int line)
{
    if (err == cudaSuccess)
        return;
    fprintf(stderr, "cusparse_direct: %s failed: %s (line %d)\n", call, cudaGetErrorString(err),
            line);
    exit(1);
}
#define CUDA_OK(call) check_cuda((call), #call, __LINE__)

static void check_sparse(cusparseStatus_t st, const char *call, int line)
{
    if (st == CUSPARSE_STATUS_SUCCESS)
        return;
    fprintf(stderr, "cusparse_direct: %s failed: %s (line %d)\n", call, cusparseGetErrorString(st),
            line);
    exit(1);
}
#define SPARSE_OK(call) check_sparse((call), #call, __LINE__)

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "cusparse_direct: out of host memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

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

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, compare_double);
    return v[n / 2];
}

/* ---- the matrices -------------------------------------------------------------------------- */

/* weft-bench's generator (bench/bench_sparse.c, bench/sparse_torch.py), so that the three
 * multiply the same numbers and their checksums can be compared. */
static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* A uniform float in [0, 1) that float32 holds exactly. */
static float unit_float(uint64_t z)
{
    return (float)(z >> 40) * (1.0f / 16777216.0f);
}

struct csr_host {
    int64_t rows, cols, nnz;
    int64_t *crow, *col;   /* [rows + 1], [nnz] */
    int32_t *crow32, *col32;
    float *val;            /* [nnz] */
};

struct entry {
    int64_t key; /* (row * cols + col) * draws + draw index while sorting */
    float value;
};

static int by_key(const void *a, const void *b)
{
    int64_t x = ((const struct entry *)a)->key, y = ((const struct entry *)b)->key;
    return (x > y) - (x < y);
}

/* bench/bench_sparse.c's matrix_draw: `draws` entries from splitmix64 seeded `seed`, three
 * consecutive outputs z0, z1, z2 giving row z0 % rows, col z1 % cols and value
 * unit_float(z2); entries drawn twice are summed in float32 in draw order. As CSR. */
static void csr_draw(struct csr_host *h, int64_t rows, int64_t cols, int64_t draws, uint64_t seed)
{
    struct entry *e = (struct entry *)xmalloc((size_t)draws * sizeof *e);
    uint64_t st = seed;
    for (int64_t i = 0; i < draws; i++) {
        int64_t r = (int64_t)(splitmix64(&st) % (uint64_t)rows);
        int64_t c = (int64_t)(splitmix64(&st) % (uint64_t)cols);
        e[i].key = r * cols + c;
        e[i].value = unit_float(splitmix64(&st));
    }
    for (int64_t i = 0; i < draws; i++)
        e[i].key = e[i].key * draws + i;
    qsort(e, (size_t)draws, sizeof *e, by_key);
    int64_t nnz = 0;
    for (int64_t i = 0; i < draws; i++) {
        int64_t key = e[i].key / draws;
        if (nnz > 0 && e[nnz - 1].key == key) {
            e[nnz - 1].value += e[i].value;
            continue;
        }
        e[nnz].key = key;
        e[nnz].value = e[i].value;
        nnz++;
    }
    h->rows = rows;
    h->cols = cols;
    h->nnz = nnz;
    h->crow = (int64_t *)xmalloc((size_t)(rows + 1) * sizeof(int64_t));
    h->col = (int64_t *)xmalloc((size_t)nnz * sizeof(int64_t));
    h->crow32 = (int32_t *)xmalloc((size_t)(rows + 1) * sizeof(int32_t));
    h->col32 = (int32_t *)xmalloc((size_t)nnz * sizeof(int32_t));
    h->val = (float *)xmalloc((size_t)nnz * sizeof(float));
    memset(h->crow, 0, (size_t)(rows + 1) * sizeof(int64_t));
    for (int64_t i = 0; i < nnz; i++) {
        h->crow[e[i].key / cols + 1]++;
        h->col[i] = e[i].key % cols;
        h->val[i] = e[i].value;
    }
    for (int64_t r = 0; r < rows; r++)
        h->crow[r + 1] += h->crow[r];
    for (int64_t r = 0; r <= rows; r++)
        h->crow32[r] = (int32_t)h->crow[r];
    for (int64_t i = 0; i < nnz; i++)
        h->col32[i] = (int32_t)h->col[i];
    free(e);
}

static void csr_free(struct csr_host *h)
{
    free(h->crow);
    free(h->col);
    free(h->crow32);
    free(h->col32);
    free(h->val);
}

/* bench/bench_sparse.c's dense_draw: rows x cols, unit_float of each splitmix64 output. */
static float *dense_draw(int64_t rows, int64_t cols, uint64_t seed)
{
    float *b = (float *)xmalloc((size_t)(rows * cols) * sizeof(float));
    uint64_t st = seed;
    for (int64_t i = 0; i < rows * cols; i++)
        b[i] = unit_float(splitmix64(&st));
    return b;
}

static double checksum(const float *c, int64_t n)
{
    double sum = 0;
    for (int64_t i = 0; i < n; i++)
        sum += c[i];
    return sum;
}

/* max |got - want| / (1 + |want|) */
static double max_rel_err_f(const float *got, const float *want, int64_t n)
{
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - (double)want[i]) / (1.0 + fabs((double)want[i]));
        if (!(e <= worst)) /* NaN counts as worst */
            worst = isnan(e) ? INFINITY : e;
    }
    return worst;
}

/* ---- cuSPARSE directly ------------------------------------------------------------------ */

struct direct_result {
    double ms;
    const char *alg;
    int64_t nan_after_beta0; /* NaN left in C by a beta = 0 call on a NaN-filled C */
};

static struct direct_result time_direct(const struct csr_host *h, int bits, const float *b,
                                        float *c_out)
{
    struct direct_result res = {0, "", 0};
    int64_t n = opt.n;
    size_t ib = bits == 32 ? sizeof(int32_t) : sizeof(int64_t);
    size_t c_bytes = (size_t)(h->rows * n) * sizeof(float);
    void *d_crow = NULL, *d_col = NULL, *d_buf = NULL;
    float *d_val = NULL, *d_b = NULL, *d_c = NULL;
    CUDA_OK(cudaMalloc(&d_crow, (size_t)(h->rows + 1) * ib));
    CUDA_OK(cudaMalloc(&d_col, (size_t)h->nnz * ib));
    CUDA_OK(cudaMalloc((void **)&d_val, (size_t)h->nnz * sizeof(float)));
    CUDA_OK(cudaMalloc((void **)&d_b, (size_t)(h->cols * n) * sizeof(float)));
    CUDA_OK(cudaMalloc((void **)&d_c, c_bytes));
    CUDA_OK(cudaMemcpy(d_crow, bits == 32 ? (const void *)h->crow32 : (const void *)h->crow,
                       (size_t)(h->rows + 1) * ib, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(d_col, bits == 32 ? (const void *)h->col32 : (const void *)h->col,
                       (size_t)h->nnz * ib, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(d_val, h->val, (size_t)h->nnz * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(d_b, b, (size_t)(h->cols * n) * sizeof(float), cudaMemcpyHostToDevice));

    cusparseHandle_t handle;
    cusparseSpMatDescr_t mat_a;
    cusparseDnMatDescr_t mat_b, mat_c;
    cusparseIndexType_t it = bits == 32 ? CUSPARSE_INDEX_32I : CUSPARSE_INDEX_64I;
    cusparseOperation_t op = CUSPARSE_OPERATION_NON_TRANSPOSE;
    cusparseSpMMAlg_t alg = CUSPARSE_SPMM_CSR_ALG2;
    float alpha = 1.0f, beta = 0.0f;
    size_t size = 0;
    SPARSE_OK(cusparseCreate(&handle));
    SPARSE_OK(cusparseSetStream(handle, (cudaStream_t)0));
    SPARSE_OK(cusparseCreateCsr(&mat_a, h->rows, h->cols, h->nnz, d_crow, d_col, d_val, it, it,
                                CUSPARSE_INDEX_BASE_ZERO, CUDA_R_32F));
    SPARSE_OK(cusparseCreateDnMat(&mat_b, h->cols, n, n, d_b, CUDA_R_32F, CUSPARSE_ORDER_ROW));
    SPARSE_OK(cusparseCreateDnMat(&mat_c, h->rows, n, n, d_c, CUDA_R_32F, CUSPARSE_ORDER_ROW));
    /* weft's kernel falls back to the default algorithm where cuSPARSE refuses CSR_ALG2;
     * so does the reference. */
    cusparseStatus_t st = cusparseSpMM_bufferSize(handle, op, op, &alpha, mat_a, mat_b, &beta,
                                                  mat_c, CUDA_R_32F, alg, &size);
    if (st == CUSPARSE_STATUS_NOT_SUPPORTED || st == CUSPARSE_STATUS_INVALID_VALUE) {
        alg = CUSPARSE_SPMM_ALG_DEFAULT;
        st = cusparseSpMM_bufferSize(handle, op, op, &alpha, mat_a, mat_b, &beta, mat_c,
                                     CUDA_R_32F, alg, &size);
    }
    check_sparse(st, "cusparseSpMM_bufferSize", __LINE__);
    res.alg = alg == CUSPARSE_SPMM_CSR_ALG2 ? "CSR_ALG2" : "ALG_DEFAULT";
    if (size > 0)
        CUDA_OK(cudaMalloc(&d_buf, size));

    /* All bits set is a NaN: beta = 0 must overwrite every element. */
    CUDA_OK(cudaMemset(d_c, 0xff, c_bytes));
    SPARSE_OK(cusparseSpMM(handle, op, op, &alpha, mat_a, mat_b, &beta, mat_c, CUDA_R_32F, alg,
                           d_buf));
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(c_out, d_c, c_bytes, cudaMemcpyDeviceToHost));
    for (int64_t i = 0; i < h->rows * n; i++)
        res.nan_after_beta0 += isnan(c_out[i]) ? 1 : 0;

    for (int w = 0; w < 3; w++)
        SPARSE_OK(cusparseSpMM(handle, op, op, &alpha, mat_a, mat_b, &beta, mat_c, CUDA_R_32F,
                               alg, d_buf));
    CUDA_OK(cudaDeviceSynchronize());
    double samples[64];
    for (int r = 0; r < opt.repeats; r++) {
        double t0 = now_seconds();
        for (int i = 0; i < opt.iters; i++)
            SPARSE_OK(cusparseSpMM(handle, op, op, &alpha, mat_a, mat_b, &beta, mat_c,
                                   CUDA_R_32F, alg, d_buf));
        CUDA_OK(cudaDeviceSynchronize());
        samples[r] = (now_seconds() - t0) * 1e3 / opt.iters;
    }
    res.ms = median(samples, opt.repeats);
    CUDA_OK(cudaMemcpy(c_out, d_c, c_bytes, cudaMemcpyDeviceToHost));

    SPARSE_OK(cusparseDestroySpMat(mat_a));
    SPARSE_OK(cusparseDestroyDnMat(mat_b));
    SPARSE_OK(cusparseDestroyDnMat(mat_c));
    SPARSE_OK(cusparseDestroy(handle));
    cudaFree(d_buf);
    cudaFree(d_crow);
    cudaFree(d_col);
    cudaFree(d_val);
    cudaFree(d_b);
    cudaFree(d_c);
    return res;
}

#ifdef WITH_WEFT
/* ---- the same product through weft ------------------------------------------------------- */

static void weft_die(const char *what)
{
    if (weft_error_code() == WEFT_OK)
        return;
    fprintf(stderr, "cusparse_direct: %s: %s\n", what, weft_error_message());
    exit(1);
}

/* ms/call of weft_sparse_mm(A, B) on cuda:0, B row-major, or (b_transposed) the
 * transposed view of a row-major B^T; *err compares the result with c_ref. */
static double time_weft(const struct csr_host *h, int bits, const float *b, bool b_transposed,
                        const float *c_ref, double *err)
{
    weft_device dev = cuda0();
    int64_t n = opt.n, nrow1 = h->rows + 1, nnz = h->nnz;
    int64_t size[2] = {h->rows, h->cols};
    enum weft_dtype it = bits == 32 ? WEFT_I32 : WEFT_I64;
    weft_scope_push();
    weft_tensor *crow = weft_from_host(bits == 32 ? (const void *)h->crow32 : (const void *)h->crow,
                                       1, &nrow1, it, dev);
    weft_tensor *col = weft_from_host(bits == 32 ? (const void *)h->col32 : (const void *)h->col,
                                      1, &nnz, it, dev);
    weft_tensor *val = weft_from_host(h->val, 1, &nnz, WEFT_F32, dev);
    weft_tensor *a = weft_sparse_csr_tensor(crow, col, val, size, false);
    weft_tensor *bt;
    if (b_transposed) {
        float *tb = (float *)xmalloc((size_t)(h->cols * n) * sizeof(float));
        for (int64_t i = 0; i < h->cols; i++)
            for (int64_t j = 0; j < n; j++)
                tb[j * h->cols + i] = b[i * n + j];
        int64_t tshape[2] = {n, h->cols};
        bt = weft_t(weft_from_host(tb, 2, tshape, WEFT_F32, dev));
        free(tb);
    } else {
        int64_t bshape[2] = {h->cols, n};
        bt = weft_from_host(b, 2, bshape, WEFT_F32, dev);
    }
    weft_die("building the operands on cuda:0");

    weft_tensor *c = weft_sparse_mm(a, bt);
    weft_die("weft_sparse_mm on cuda:0");
    size_t c_bytes = (size_t)(h->rows * n) * sizeof(float);
    float *got = (float *)xmalloc(c_bytes);
    weft_tensor_read(c, got, c_bytes);
    weft_die("reading the result");
    *err = max_rel_err_f(got, c_ref, h->rows * n);
    free(got);

    for (int w = 0; w < 3; w++) {
        weft_scope_push();
        weft_sparse_mm(a, bt);
        weft_scope_pop();
    }
    weft_synchronize(dev);
    double samples[64];
    for (int r = 0; r < opt.repeats; r++) {
        double t0 = now_seconds();
        for (int i = 0; i < opt.iters; i++) {
            weft_scope_push();
            weft_sparse_mm(a, bt);
            weft_scope_pop();
        }
        weft_synchronize(dev);
        samples[r] = (now_seconds() - t0) * 1e3 / opt.iters;
    }
    weft_die("timing weft_sparse_mm");
    weft_scope_pop();
    return median(samples, opt.repeats);
}

/* ---- correctness checks: cuda against cpu ------------------------------------------------- */

/* xorshift64*, fixed seed: the checks draw the same values every run. */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t rng_next(void)
{
    uint64_t x = rng_state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    rng_state = x;
    return x * 0x2545F4914F6CDD1Dull;
}

static double rng_uniform(double lo, double hi) /* [lo, hi) */
{
    return lo + (hi - lo) * (double)(rng_next() >> 11) * (1.0 / 9007199254740992.0);
}


static int checks_run, checks_failed;

/* A small random sparse matrix, kept on the host in double so that each device builds
 * its own copy in any dtype and layout. */
struct small {
    int64_t m, k, nnz;
    int64_t *crow, *col, *row; /* [m + 1], [nnz], [nnz] */
    int32_t *crow32, *col32;
    double *val;
};

static void small_random(struct small *s, int64_t m, int64_t k, int64_t want, uint64_t seed)
{
    struct csr_host h;
    csr_draw(&h, m, k, want, seed);
    s->m = m;
    s->k = k;
    s->nnz = h.nnz;
    s->crow = h.crow;
    s->col = h.col;
    s->crow32 = h.crow32;
    s->col32 = h.col32;
    s->row = (int64_t *)xmalloc((size_t)h.nnz * sizeof(int64_t) + 1);
    s->val = (double *)xmalloc((size_t)h.nnz * sizeof(double) + 1);
    for (int64_t r = 0; r < m; r++)
        for (int64_t e = h.crow[r]; e < h.crow[r + 1]; e++)
            s->row[e] = r;
    for (int64_t e = 0; e < h.nnz; e++)
        s->val[e] = rng_uniform(-1, 1);
    free(h.val);
}

static void small_free(struct small *s)
{
    free(s->crow);
    free(s->col);
    free(s->crow32);
    free(s->col32);
    free(s->row);
    free(s->val);
}

/* A host copy of x[n] in dtype dt (float32 or float64), malloc'd. */
static void *host_as(const double *x, int64_t n, enum weft_dtype dt)
{
    if (dt == WEFT_F64) {
        double *d = (double *)xmalloc((size_t)n * sizeof(double));
        memcpy(d, x, (size_t)n * sizeof(double));
        return d;
    }
    float *f = (float *)xmalloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        f[i] = (float)x[i];
    return f;
}

static weft_tensor *tensor_from(const double *x, int ndim, const int64_t *shape,
                                enum weft_dtype dt, weft_device dev)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= shape[d];
    void *h = host_as(x, n, dt);
    weft_tensor *t = weft_from_host(h, ndim, shape, dt, dev);
    free(h);
    return t;
}

enum { L_CSR32, L_CSR64, L_COO, L_COUNT };
static const char *layout_names[] = {"csr/int32", "csr/int64", "coo"};

/* The sparse matrix on dev. values_leaf (CSR only) receives the values tensor, made to
 * require grad. COO is built and coalesced on the cpu, then moved. */
static weft_tensor *sparse_on(const struct small *s, int layout, enum weft_dtype dt,
                              weft_device dev, weft_tensor **values_leaf)
{
    int64_t size[2] = {s->m, s->k}, nrow1 = s->m + 1, nnz = s->nnz;
    if (layout == L_COO) {
        int64_t *ix = (int64_t *)xmalloc((size_t)(2 * nnz) * sizeof(int64_t) + 1);
        memcpy(ix, s->row, (size_t)nnz * sizeof(int64_t));
        memcpy(ix + nnz, s->col, (size_t)nnz * sizeof(int64_t));
        int64_t ishape[2] = {2, nnz};
        weft_tensor *indices = weft_from_host(ix, 2, ishape, WEFT_I64, WEFT_CPU);
        free(ix);
        weft_tensor *values = tensor_from(s->val, 1, &nnz, dt, WEFT_CPU);
        weft_tensor *coo = weft_sparse_coalesce(weft_sparse_coo_tensor(indices, values, 2, size,
                                                                       false));
        return weft_sparse_to_device(coo, dev, false);
    }
    bool i32 = layout == L_CSR32;
    enum weft_dtype it = i32 ? WEFT_I32 : WEFT_I64;
    weft_tensor *crow = weft_from_host(i32 ? (const void *)s->crow32 : (const void *)s->crow, 1,
                                       &nrow1, it, dev);
    weft_tensor *col = weft_from_host(i32 ? (const void *)s->col32 : (const void *)s->col, 1,
                                      &nnz, it, dev);
    weft_tensor *values = tensor_from(s->val, 1, &nnz, dt, dev);
    if (values_leaf) {
        weft_requires_grad_(values, true);
        *values_leaf = values;
    }
    return weft_sparse_csr_tensor(crow, col, values, size, false);
}

enum { V_CONTIGUOUS, V_TRANSPOSED, V_STRIDED, V_EXPANDED, V_COUNT };
static const char *view_names[] = {"contiguous", "transposed", "strided", "expanded"};

/* B [k, n] on dev from the row-major host values bh, with the strides of `view`:
 * transposed (a column-major view), every other column of a [k, 2n] tensor, or row 0
 * expanded (stride 0) to k rows. */
static weft_tensor *dense_on(const double *bh, int64_t k, int64_t n, enum weft_dtype dt,
                             weft_device dev, int view)
{
    int64_t shape[2] = {k, n};
    switch (view) {
    case V_TRANSPOSED: {
        double *t = (double *)xmalloc((size_t)(k * n) * sizeof(double));
        for (int64_t i = 0; i < k; i++)
            for (int64_t j = 0; j < n; j++)
                t[j * k + i] = bh[i * n + j];
        int64_t tshape[2] = {n, k};
        weft_tensor *r = weft_t(tensor_from(t, 2, tshape, dt, dev));
        free(t);
        return r;
    }
    case V_STRIDED: {
        double *w = (double *)xmalloc((size_t)(2 * k * n) * sizeof(double));
        for (int64_t i = 0; i < k; i++)
            for (int64_t j = 0; j < 2 * n; j++)
                w[i * 2 * n + j] = j % 2 ? 1e30 : bh[i * n + j / 2];
        int64_t wshape[2] = {k, 2 * n};
        weft_tensor *r = weft_slice(tensor_from(w, 2, wshape, dt, dev), 1, 0, 2 * n, 2);
        free(w);
        return r;
    }
    case V_EXPANDED: {
        int64_t rshape[2] = {1, n};
        return weft_expand(tensor_from(bh, 2, rshape, dt, dev), 2, shape);
    }
    default:
        return tensor_from(bh, 2, shape, dt, dev);
    }
}

static double *random_doubles(int64_t n)
{
    double *x = (double *)xmalloc((size_t)n * sizeof(double) + 1);
    for (int64_t i = 0; i < n; i++)
        x[i] = rng_uniform(-1, 1);
    return x;
}

/* Compares a cuda result with the cpu one (both of dtype dt) and records the check. */
static void expect_close(const char *name, weft_tensor *got, weft_tensor *want)
{
    checks_run++;
    if (!got || !want || weft_error_code() != WEFT_OK) {
        printf("  FAIL %-58s %s\n", name, weft_error_code() != WEFT_OK ? weft_error_message()
                                                                       : "no result");
        weft_error_clear();
        checks_failed++;
        return;
    }
    int64_t n = weft_tensor_numel(want);
    bool same_shape = got->ndim == want->ndim && weft_tensor_numel(got) == n;
    for (int d = 0; same_shape && d < got->ndim; d++)
        same_shape = got->shape[d] == want->shape[d];
    if (!same_shape || got->dtype != want->dtype) {
        printf("  FAIL %-58s shape or dtype differs from the cpu result\n", name);
        checks_failed++;
        return;
    }
    double *g = (double *)xmalloc((size_t)n * sizeof(double) + 1);
    double *w = (double *)xmalloc((size_t)n * sizeof(double) + 1);
    /* The callers hold a scope open: the converted copies go with it. */
    weft_tensor_read(weft_to_dtype(got, WEFT_F64), g, (size_t)n * sizeof(double));
    weft_tensor_read(weft_to_dtype(want, WEFT_F64), w, (size_t)n * sizeof(double));
    double tol = got->dtype == WEFT_F64 ? 1e-10 : 1e-4, worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs(g[i] - w[i]) / (1.0 + fabs(w[i]));
        if (!(e <= worst))
            worst = isnan(e) ? INFINITY : e;
    }
    free(g);
    free(w);
    if (weft_error_code() != WEFT_OK) {
        printf("  FAIL %-58s %s\n", name, weft_error_message());
        weft_error_clear();
        checks_failed++;
    } else if (!(worst <= tol)) {
        printf("  FAIL %-58s max relative error %.3g > %.0e\n", name, worst, tol);
        checks_failed++;
    }
}

static const char *dt_name(enum weft_dtype dt)
{
    return dt == WEFT_F64 ? "f64" : "f32";
}

/* mm for every layout, dtype, stride pattern of B and n in {1, 7}. */
static void check_mm(const struct small *s)
{
    enum weft_dtype dts[2] = {WEFT_F32, WEFT_F64};
    int64_t ns[2] = {1, 7};
    for (int l = 0; l < L_COUNT; l++)
        for (int d = 0; d < 2; d++)
            for (int v = 0; v < V_COUNT; v++)
                for (int ni = 0; ni < 2; ni++) {
                    weft_scope_push();
                    int64_t n = ns[ni];
                    double *bh = random_doubles(s->k * n);
                    weft_tensor *a_cpu = sparse_on(s, l, dts[d], WEFT_CPU, NULL);
                    weft_tensor *a_gpu = sparse_on(s, l, dts[d], cuda0(), NULL);
                    weft_tensor *want = weft_sparse_mm(a_cpu, dense_on(bh, s->k, n, dts[d],
                                                                       WEFT_CPU, v));
                    weft_tensor *got = weft_sparse_mm(a_gpu, dense_on(bh, s->k, n, dts[d],
                                                                      cuda0(), v));
                    char name[128];
                    snprintf(name, sizeof name, "mm %s %s B %s n=%lld", layout_names[l],
                             dt_name(dts[d]), view_names[v], (long long)n);
                    expect_close(name, got, want);
                    free(bh);
                    weft_scope_pop();
                }
}

/* addmm with beta/alpha, beta = 0 over a NaN input (must not propagate), and operands
 * without specified elements (C = beta * input). */
static void check_addmm(const struct small *s, const struct small *empty)
{
    int64_t n = 5, ishape[2] = {s->m, n};
    for (int l = 0; l < L_COUNT; l++)
        for (int d = 0; d < 2; d++) {
            enum weft_dtype dt = d ? WEFT_F64 : WEFT_F32;
            weft_scope_push();
            double *bh = random_doubles(s->k * n), *ih = random_doubles(s->m * n);
            double *nan_h = (double *)xmalloc((size_t)(s->m * n) * sizeof(double));
            for (int64_t i = 0; i < s->m * n; i++)
                nan_h[i] = NAN;
            weft_device devs[2] = {WEFT_CPU, cuda0()};
            weft_tensor *r[2][3];
            for (int i = 0; i < 2; i++) {
                weft_tensor *a = sparse_on(s, l, dt, devs[i], NULL);
                weft_tensor *e = sparse_on(empty, l, dt, devs[i], NULL);
                weft_tensor *b = dense_on(bh, s->k, n, dt, devs[i], V_CONTIGUOUS);
                weft_tensor *in = tensor_from(ih, 2, ishape, dt, devs[i]);
                r[i][0] = weft_sparse_addmm(in, a, b, 0.5, 2.0);
                r[i][1] = weft_sparse_addmm(tensor_from(nan_h, 2, ishape, dt, devs[i]), a, b,
                                            0.0, 1.5);
                r[i][2] = weft_sparse_addmm(in, e, b, 0.5, 2.0);
            }
            const char *what[3] = {"addmm beta=0.5 alpha=2", "addmm beta=0 over NaN input",
                                   "addmm nnz=0 beta=0.5"};
            for (int c = 0; c < 3; c++) {
                char name[128];
                snprintf(name, sizeof name, "%s %s %s", what[c], layout_names[l], dt_name(dt));
                expect_close(name, r[1][c], r[0][c]);
            }
            free(bh);
            free(ih);
            free(nan_h);
            weft_scope_pop();
        }
}

/* Gradients of sum(mm(A, B) * W) (G = W: cuSPARSE's SDDMM) and of sum(mm(A, B)) (G is
 * an expanded ones: weft's SDDMM kernel, and A^T @ G through a contiguous G) w.r.t. A's
 * values and B, cuda against cpu. CSR only: COO values cannot be made leaves here
 * without a cuda coalesce. */
static void check_grad(const struct small *s)
{
    int64_t n = 6, bshape[2] = {s->k, n}, wshape[2] = {s->m, n};
    for (int l = L_CSR32; l <= L_CSR64; l++)
        for (int d = 0; d < 2; d++)
            for (int weighted = 0; weighted < 2; weighted++) {
                enum weft_dtype dt = d ? WEFT_F64 : WEFT_F32;
                weft_scope_push();
                double *bh = random_doubles(s->k * n), *wh = random_doubles(s->m * n);
                weft_device devs[2] = {WEFT_CPU, cuda0()};
                weft_tensor *gv[2] = {NULL, NULL}, *gb[2] = {NULL, NULL};
                for (int i = 0; i < 2; i++) {
                    weft_tensor *values = NULL;
                    weft_tensor *a = sparse_on(s, l, dt, devs[i], &values);
                    weft_tensor *b = tensor_from(bh, 2, bshape, dt, devs[i]);
                    weft_requires_grad_(b, true);
                    weft_tensor *y = weft_sparse_mm(a, b);
                    if (weighted)
                        y = weft_mul(y, tensor_from(wh, 2, wshape, dt, devs[i]));
                    weft_backward(weft_sum(y, 0, NULL, false), NULL, false);
                    gv[i] = weft_grad(values);
                    gb[i] = weft_grad(b);
                }
                char name[128];
                snprintf(name, sizeof name, "grad values (sddmm) %s %s G=%s", layout_names[l],
                         dt_name(dt), weighted ? "W" : "ones");
                expect_close(name, gv[1], gv[0]);
                snprintf(name, sizeof name, "grad B (A^T @ G) %s %s G=%s", layout_names[l],
                         dt_name(dt), weighted ? "W" : "ones");
                expect_close(name, gb[1], gb[0]);
                free(bh);
                free(wh);
                weft_scope_pop();
            }
}

static void run_checks(void)
{
    struct small s, empty;
    small_random(&s, 29, 41, 150, 2);
    small_random(&empty, 29, 41, 0, 3);
    printf("checks (cuda against cpu, A 29 x 41 with %lld specified elements):\n",
           (long long)s.nnz);
    check_mm(&s);
    check_addmm(&s, &empty);
    check_grad(&s);
    printf("  %d checks, %d failed\n", checks_run, checks_failed);
    small_free(&s);
    small_free(&empty);
}

/* Loads weft with the sparse plugins; weft-sparse.so loads weft-sparse-cuda.so itself
 * when the CUDA backend is usable, and loading it again is a no-op. */
static void weft_start(void)
{
    if (!weft_backend_get(cuda0().type) || !weft_sparse_api_get() ||
        weft_plugin_load("sparse-cuda") != 0)
        weft_die("starting weft");
}
#endif /* WITH_WEFT */

/* ---- main ---------------------------------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(f, "usage: cusparse_direct [--rows N] [--nnz N] [--n N] [--iters N] [--repeats N]\n"
               "                       [--no-checks] [--direct-only]\n");
}

static int parse_args(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_value = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            exit(0);
        } else if (!strcmp(a, "--rows") && has_value) {
            opt.rows = atoll(argv[++i]);
        } else if (!strcmp(a, "--nnz") && has_value) {
            opt.nnz = atoll(argv[++i]);
        } else if (!strcmp(a, "--n") && has_value) {
            opt.n = atoll(argv[++i]);
        } else if (!strcmp(a, "--iters") && has_value) {
            opt.iters = atoi(argv[++i]);
        } else if (!strcmp(a, "--repeats") && has_value) {
            opt.repeats = atoi(argv[++i]);
        } else if (!strcmp(a, "--no-checks")) {
            opt.checks = false;
        } else if (!strcmp(a, "--direct-only")) {
            opt.direct_only = true;
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (opt.rows < 1 || opt.rows > INT32_MAX || opt.nnz < 1 || opt.n < 1 || opt.iters < 1 ||
        opt.repeats < 1 || opt.repeats > 64) {
        fprintf(stderr, "cusparse_direct: sizes must be positive (rows < 2^31, repeats <= 64)\n");
        return 2;
    }
    return 0;
}

int main(int argc, char **argv)
{
    int rc = parse_args(argc, argv);
    if (rc)
        return rc;
    struct cudaDeviceProp prop;
    CUDA_OK(cudaGetDeviceProperties(&prop, 0));
    int runtime = 0, major = 0, minor = 0, patch = 0;
    CUDA_OK(cudaRuntimeGetVersion(&runtime));
    SPARSE_OK(cusparseGetProperty(MAJOR_VERSION, &major));
    SPARSE_OK(cusparseGetProperty(MINOR_VERSION, &minor));
    SPARSE_OK(cusparseGetProperty(PATCH_LEVEL, &patch));
    printf("# %s, CUDA runtime %d.%d, cuSPARSE %d.%d.%d\n", prop.name, runtime / 1000,
           runtime % 1000 / 10, major, minor, patch);

    struct csr_host h;
    csr_draw(&h, opt.rows, opt.rows, opt.nnz, 0);
    float *b = dense_draw(h.cols, opt.n, 1);
    size_t c_count = (size_t)(h.rows * opt.n);
    float *c_direct = (float *)xmalloc(c_count * sizeof(float));
    printf("# SpMM: A %lld x %lld CSR with %lld specified elements, B %lld x %lld float32, "
           "median of %d x %d calls\n",
           (long long)h.rows, (long long)h.cols, (long long)h.nnz, (long long)h.cols,
           (long long)opt.n, opt.repeats, opt.iters);

    int status = 0;
#ifdef WITH_WEFT
    if (!opt.direct_only) {
        weft_start();
        if (opt.checks) {
            run_checks();
            if (checks_failed)
                status = 1;
        }
    }
#endif
    int bits_list[2] = {32, 64};
    for (int bi = 0; bi < 2; bi++) {
        int bits = bits_list[bi];
        struct direct_result d = time_direct(&h, bits, b, c_direct);
        printf("spmm csr/int%d  cusparse direct (%-11s) %8.3f ms/call  checksum %.6e\n", bits,
               d.alg, d.ms, checksum(c_direct, h.rows * opt.n));
        if (bits == 32)
            printf("  beta = 0 over a NaN-filled C: %s\n",
                   d.nan_after_beta0 ? "NaN LEFT IN C (weft's kernel must zero C first)"
                                     : "no NaN left (C is not read)");
        if (d.nan_after_beta0)
            status = 1;
#ifdef WITH_WEFT
        if (!opt.direct_only) {
            for (int tb = 0; tb < 2; tb++) {
                double err = 0;
                double ms = time_weft(&h, bits, b, tb != 0, c_direct, &err);
                double ratio = d.ms / ms;
                bool ok_err = err <= 1e-4;
                printf("spmm csr/int%d  weft_sparse_mm, B %-10s %8.3f ms/call  %5.1f%% of direct"
                       "%s  max rel. error %.2g%s\n",
                       bits, tb ? "transposed" : "row-major", ms, 100.0 * ratio,
                       tb ? "" : (ratio >= TARGET_RATIO ? " (target >= 90%: ok)"
                                                        : " (target >= 90%: BELOW)"),
                       err, ok_err ? "" : " MISMATCH");
                if (!ok_err)
                    status = 1;
                else if (!tb && ratio < TARGET_RATIO && status == 0)
                    status = 2;
            }
        }
#endif
    }
    free(b);
    free(c_direct);
    csr_free(&h);
    return status;
}
