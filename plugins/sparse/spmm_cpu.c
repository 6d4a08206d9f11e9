/* plugins/sparse/spmm_cpu.c: the CPU kernels of "sparse_mm" (C = beta C + alpha op(A) B)
 * and "sparse_sddmm" (sparse_impl.h) for CSR with int32 or int64 indices and COO, in
 * float32 and float64. Each kernel is written once and expanded per (value, index) type.
 *
 * SpMM is bound by gathering rows of B, so:
 *  - rows of C are independent and each thread takes one contiguous range of them,
 *    balanced by nnz + rows (a row costs its nonzeros plus writing it), found by binary
 *    search on the row pointers (CSR) or the sorted row indices (coalesced COO);
 *  - a row of C is summed in a 256-byte tile (64 floats, 32 doubles) held in vector
 *    registers, and written once: beta == 0 never reads C, and a C larger than the caches
 *    is written past them (stream32), so it does not evict the rows of B;
 *  - the B rows of the nonzeros PF_AHEAD places ahead are prefetched, so several misses
 *    are in flight while the current row is summed;
 *  - the hot loops are also compiled for x86-64-v3 (AVX2, FMA) and picked at run time.
 * op(A) = A^T scatters: each thread owns a slice of C's rows (A's columns, cut by one
 * counting pass so the slices hold equal nonzeros), walks all of A in order and adds
 * alpha v G[row] to C[col] for the columns it owns; no thread writes another's rows and
 * the sums run in A's order on any thread count. Building A^T's CSR by a parallel
 * counting sort and gathering instead was measured no faster on 2 threads and 1.5x slower
 * on one (1e5 x 1e5, 1e6 nonzeros, N = 64: the sort's random writes cost as much as the
 * scatter's read-modify-write of C's rows), and needs nnz-sized buffers.
 * SDDMM splits the nonzeros evenly: out[e] is a dot product of a row of G and a row of B.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include <weft/backend.h>
#include <weft/error.h>

#include "sparse_impl.h"

/* Work (multiply-adds) below which a kernel runs on the calling thread. */
#define SPMM_GRAIN 32768
/* Nonzeros ahead whose B row is prefetched. */
#define PF_AHEAD 16
/* At most this many threads split one kernel call. */
#define SPMM_MAX_THREADS 256
/* From this size of C on, SpMM writes it past the caches (see stream32). */
#define SPMM_STREAM_BYTES ((size_t)8 << 20)
/* Bytes of C's row summed per pass over the row's nonzeros. */
#define TILE_BYTES 256

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
#define SPMM_HOT __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define SPMM_HOT
#endif
/* The helpers of a hot function must be compiled into each of its versions. */
#define SPMM_INLINE static inline __attribute__((always_inline))

/* A sparse matrix as the kernels read it. */
struct spmat {
    int64_t rows, cols, nnz;
    const void *ptr;  /* CSR row pointers [rows + 1]; NULL for COO */
    const void *ridx; /* COO row indices [nnz], int64; NULL for CSR */
    const void *cidx; /* column indices [nnz] */
    bool idx32;       /* ptr and cidx are int32 (CSR only) */
    const void *val;  /* [nnz] */
};

static int spmat_of(const weft_tensor *t, struct spmat *m, const char *op)
{
    const struct sparse_data *s = sparse_data_of(t, -1, op);
    if (!s)
        return weft_error_code();
    if (t->ndim != 2)
        return weft_error_set(WEFT_ERR_RUNTIME, "%s: expected a 2-D sparse tensor, got %dD", op,
                              t->ndim);
    *m = (struct spmat){.rows = t->shape[0], .cols = t->shape[1], .nnz = sparse_nnz(s)};
    m->val = weft_tensor_data(s->values);
    if (t->layout == sparse_csr_layout) {
        m->ptr = weft_tensor_data(s->crow);
        m->cidx = weft_tensor_data(s->col);
        m->idx32 = s->crow->dtype == WEFT_I32;
        return 0;
    }
    const int64_t *idx = weft_tensor_data(s->indices);
    m->ridx = idx;
    m->cidx = idx ? idx + m->nnz : NULL;
    return 0;
}

/* First nonzero of row r (r == rows gives nnz). */
static int64_t row_begin(const struct spmat *a, int64_t r)
{
    if (a->ptr)
        return a->idx32 ? ((const int32_t *)a->ptr)[r] : ((const int64_t *)a->ptr)[r];
    const int64_t *ri = a->ridx;
    int64_t lo = 0, hi = a->nnz;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (ri[mid] < r)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Start row of part t of n: the first row r with row_begin(r) + r >= t * (nnz + rows) / n,
 * so every part gets about the same nonzeros plus rows. */
static int64_t split_row(const struct spmat *a, int t, int n)
{
    if (t <= 0)
        return 0;
    if (t >= n)
        return a->rows;
    int64_t target = (int64_t)((double)(a->nnz + a->rows) * t / n);
    int64_t lo = 0, hi = a->rows;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (row_begin(a, mid) + mid < target)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int threads_for(int64_t work)
{
#ifdef _OPENMP
    if (work < SPMM_GRAIN || omp_in_parallel())
        return 1;
    int nt = weft_get_num_threads();
    int64_t most = work / SPMM_GRAIN;
    if (nt > SPMM_MAX_THREADS)
        nt = SPMM_MAX_THREADS;
    return most < nt ? (int)most : nt;
#else
    (void)work;
    return 1;
#endif
}

typedef void (*row_range_fn)(const void *job, int64_t r0, int64_t r1);

/* fn over the rows of a, split by split_row across nt threads. */
static void run_rows(const struct spmat *a, int nt, row_range_fn fn, const void *job)
{
    if (nt <= 1) {
        fn(job, 0, a->rows);
        return;
    }
#ifdef _OPENMP
#pragma omp parallel num_threads(nt)
    {
        int t = omp_get_thread_num(), n = omp_get_num_threads();
        int64_t r0 = split_row(a, t, n), r1 = split_row(a, t + 1, n);
        if (r0 < r1)
            fn(job, r0, r1);
    }
#endif
}

/* ---- SpMM ------------------------------------------------------------------------------- */

struct spmm_job {
    struct spmat a;          /* A as stored (the transpose flag picks the loop) */
    const void *b;           /* B [a.cols, n]; transposed: [a.rows, n] */
    int64_t ldb, sb1, n;     /* strides in elements */
    void *c;                 /* C [a.rows, n], contiguous; transposed: [a.cols, n] */
    double alpha, beta;
    bool stream;             /* full tiles with beta == 0 bypass the caches (stream32) */
};

/* Writes 32 bytes of registers at p (16-byte aligned) past the caches where the CPU can:
 * a C larger than the caches would otherwise evict the rows of B being gathered, and
 * allocating its lines would read them first. */
#if defined(__SSE2__)
#include <emmintrin.h>
#define SPMM_CAN_STREAM 1
SPMM_INLINE void stream32(void *p, const void *v)
{
    __m128i lo, hi;
    memcpy(&lo, v, 16);
    memcpy(&hi, (const char *)v + 16, 16);
    _mm_stream_si128((__m128i *)p, lo);
    _mm_stream_si128((__m128i *)p + 1, hi);
}
/* Orders a thread's streamed stores before the others read C. */
SPMM_INLINE void stream_fence(void)
{
    _mm_sfence();
}
#else
#define SPMM_CAN_STREAM 0
SPMM_INLINE void stream32(void *p, const void *v)
{
    memcpy(p, v, 32);
}
SPMM_INLINE void stream_fence(void)
{
}
#endif

/* Prefetches the cache lines of up to a tile's bytes from p. */
SPMM_INLINE void prefetch_row(const void *p, int64_t bytes)
{
    const char *q = p;
    for (int64_t off = 0; off < bytes && off < TILE_BYTES; off += 64)
        __builtin_prefetch(q + off, 0, 3);
}

/* The same, for writing. */
SPMM_INLINE void prefetch_row_w(const void *p, int64_t bytes)
{
    const char *q = p;
    for (int64_t off = 0; off < bytes && off < TILE_BYTES; off += 64)
        __builtin_prefetch(q + off, 1, 3);
}

SPMM_INLINE void prefetch_tile(const void *p)
{
    const char *q = p;
    _Pragma("GCC unroll 4")
    for (int off = 0; off < TILE_BYTES; off += 64)
        __builtin_prefetch(q + off, 0, 3);
}

/* 32-byte vectors of T (two SSE registers each where AVX is missing); the unaligned,
 * aliasing flavour reads and writes rows of B and C. */
#define DEFINE_VEC(TN, T)                                                                     \
    typedef T vec_##TN __attribute__((vector_size(32)));                                      \
    typedef T uvec_##TN __attribute__((vector_size(32), aligned(sizeof(T)), may_alias));
DEFINE_VEC(f32, float)
DEFINE_VEC(f64, double)
#define VECS (TILE_BYTES / 32)

#define SP_CAT_(a, b) a##b
#define SP_CAT(a, b) SP_CAT_(a, b)
#define PER_VALUE(fn) SP_CAT(SP_CAT(fn, _), TN)
#define PER_PAIR(fn) SP_CAT(SP_CAT(PER_VALUE(fn), _), IN)

/* ---- A^T @ G by scattering ---------------------------------------------------------------- */

/* Row slices of C for threads: thread t owns rows [bounds[t], bounds[t+1]) of C, i.e. the
 * columns of A, cut so each has about the same nonzeros plus rows (one counting pass). */
static int column_splits(const struct spmat *a, int nt, int64_t *bounds)
{
    int64_t *cnt = calloc((size_t)a->cols + 1, sizeof *cnt);
    if (!cnt)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "sparse_mm: out of host memory");
    if (a->idx32)
        for (int64_t e = 0; e < a->nnz; e++)
            cnt[((const int32_t *)a->cidx)[e]]++;
    else
        for (int64_t e = 0; e < a->nnz; e++)
            cnt[((const int64_t *)a->cidx)[e]]++;
    double total = (double)(a->nnz + a->cols), run = 0;
    int t = 1;
    bounds[0] = 0;
    for (int64_t k = 0; k < a->cols && t < nt; k++) {
        run += (double)cnt[k] + 1;
        while (t < nt && run >= total * t / nt)
            bounds[t++] = k + 1;
    }
    while (t <= nt)
        bounds[t++] = a->cols;
    free(cnt);
    return 0;
}

/* X(value name, value type, index name, index type) */
#define SPMM_FOR_TYPES(X)                                                                     \
    X(f32, float, i32, int32_t)                                                               \
    X(f32, float, i64, int64_t)                                                               \
    X(f64, double, i32, int32_t)                                                              \
    X(f64, double, i64, int64_t)

#define SPMM_INC "spmm_rows.inc"
#include "each_spmm_pair.inc"
#undef SPMM_INC

/* The functions of one (value, index) pair. */
struct type_fns {
    row_range_fn spmm_rows, spmm_t_rows;
};

static const struct type_fns *fns_for(enum weft_dtype dt, bool idx32)
{
#define TYPE_FNS(TN, T, IN, I)                                                                \
    static const struct type_fns TN##_##IN = {spmm_rows_##TN##_##IN, spmm_t_rows_##TN##_##IN};
    SPMM_FOR_TYPES(TYPE_FNS)
#undef TYPE_FNS
    if (dt == WEFT_F32)
        return idx32 ? &f32_i32 : &f32_i64;
    return idx32 ? &f64_i32 : &f64_i64;
}

static int spmm_t_scatter(const struct spmm_job *jb, const struct type_fns *fns, int nt)
{
    if (nt <= 1) {
        fns->spmm_t_rows(jb, 0, jb->a.cols);
        return 0;
    }
    int64_t bounds[SPMM_MAX_THREADS + 1];
    if (column_splits(&jb->a, nt, bounds) != 0)
        return weft_error_code();
#ifdef _OPENMP
#pragma omp parallel num_threads(nt)
    {
        int t = omp_get_thread_num(), n = omp_get_num_threads();
        for (int p = t; p < nt; p += n)
            if (bounds[p] < bounds[p + 1])
                fns->spmm_t_rows(jb, bounds[p], bounds[p + 1]);
    }
#endif
    return 0;
}

static int check_floating(const weft_tensor *t, const char *op)
{
    if (t->dtype == WEFT_F32 || t->dtype == WEFT_F64)
        return 0;
    return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "\"%s\" not implemented for '%s' on cpu", op,
                          weft_dtype_torch_name(t->dtype));
}

static int spmm_kernel(const struct weft_op_call *call)
{
    const weft_tensor *A = call->in[0], *B = call->in[1];
    weft_tensor *C = call->out[0];
    struct spmat a;
    if (spmat_of(A, &a, SPARSE_OP_MM) != 0 || check_floating(A, SPARSE_OP_MM) != 0)
        return weft_error_code();
    bool trans = call->ints[0] != 0;
    int64_t out_rows = trans ? a.cols : a.rows, inner = trans ? a.rows : a.cols;
    if (B->ndim != 2 || C->ndim != 2 || B->shape[0] != inner || C->shape[0] != out_rows ||
        C->shape[1] != B->shape[1] || B->dtype != A->dtype || C->dtype != A->dtype ||
        !weft_tensor_is_contiguous(C))
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "sparse_mm: operands do not match the kernel's contract");
    if (A->layout == sparse_coo_layout && !((struct sparse_data *)A->layout_data)->coalesced)
        return weft_error_set(WEFT_ERR_RUNTIME, "sparse_mm: the COO operand must be coalesced");
    struct spmm_job jb = {.a = a, .b = weft_tensor_data(B), .ldb = B->stride[0],
                          .sb1 = B->stride[1], .n = B->shape[1], .c = weft_tensor_data(C),
                          .alpha = call->scalar[0], .beta = call->scalar[1]};
    if (out_rows == 0 || jb.n == 0)
        return 0;
    size_t row_bytes = (size_t)jb.n * weft_tensor_itemsize(C);
    jb.stream = SPMM_CAN_STREAM && !trans && jb.beta == 0 && row_bytes % 16 == 0 &&
                (uintptr_t)jb.c % 16 == 0 && row_bytes * (size_t)out_rows >= SPMM_STREAM_BYTES;
    const struct type_fns *fns = fns_for(A->dtype, a.idx32);
    int nt = threads_for((a.nnz + out_rows) * jb.n);
    if (trans)
        return spmm_t_scatter(&jb, fns, nt);
    run_rows(&jb.a, nt, fns->spmm_rows, &jb);
    return 0;
}

/* ---- SDDMM -------------------------------------------------------------------------------- */

struct sddmm_job {
    struct spmat a;
    const void *g, *b;       /* G [rows, n], B [cols, n] */
    int64_t sg0, sg1, sb0, sb1, n;
    void *out;               /* [nnz] */
};

#define SPMM_INC "sddmm_rows.inc"
#include "each_spmm_pair.inc"
#undef SPMM_INC

typedef void (*sddmm_range_fn)(const struct sddmm_job *, int64_t, int64_t);

static sddmm_range_fn sddmm_fn_for(enum weft_dtype dt, bool idx32)
{
    if (dt == WEFT_F32)
        return idx32 ? sddmm_range_f32_i32 : sddmm_range_f32_i64;
    return idx32 ? sddmm_range_f64_i32 : sddmm_range_f64_i64;
}

static int sddmm_kernel(const struct weft_op_call *call)
{
    const weft_tensor *A = call->in[0], *G = call->in[1], *B = call->in[2];
    weft_tensor *out = call->out[0];
    struct spmat a;
    if (spmat_of(A, &a, SPARSE_OP_SDDMM) != 0 || check_floating(A, SPARSE_OP_SDDMM) != 0)
        return weft_error_code();
    if (G->ndim != 2 || B->ndim != 2 || G->shape[0] != a.rows || B->shape[0] != a.cols ||
        G->shape[1] != B->shape[1] || out->ndim != 1 || out->shape[0] != a.nnz ||
        G->dtype != A->dtype || B->dtype != A->dtype || out->dtype != A->dtype ||
        !weft_tensor_is_contiguous(out))
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "sparse_sddmm: operands do not match the kernel's contract");
    struct sddmm_job jb = {.a = a, .g = weft_tensor_data(G), .b = weft_tensor_data(B),
                           .sg0 = G->stride[0], .sg1 = G->stride[1], .sb0 = B->stride[0],
                           .sb1 = B->stride[1], .n = G->shape[1], .out = weft_tensor_data(out)};
    if (a.nnz == 0)
        return 0;
    if (jb.n == 0) {
        memset(jb.out, 0, (size_t)a.nnz * weft_tensor_itemsize(out));
        return 0;
    }
    sddmm_range_fn fn = sddmm_fn_for(A->dtype, a.idx32);
    int nt = threads_for(a.nnz * jb.n);
    if (nt <= 1) {
        fn(&jb, 0, a.nnz);
        return 0;
    }
#ifdef _OPENMP
#pragma omp parallel num_threads(nt)
    {
        int t = omp_get_thread_num(), n = omp_get_num_threads();
        int64_t e0 = a.nnz * t / n, e1 = a.nnz * (t + 1) / n;
        if (e0 < e1)
            fn(&jb, e0, e1);
    }
#endif
    return 0;
}

/* The plugin's cpu kernels, the same for each of its layouts. */
static const struct weft_kernel_entry sparse_cpu_kernels[] = {
    {-1, SPARSE_OP_MM, WEFT_DTYPE_BIT(WEFT_F32) | WEFT_DTYPE_BIT(WEFT_F64), spmm_kernel},
    {-1, SPARSE_OP_SDDMM, WEFT_DTYPE_BIT(WEFT_F32) | WEFT_DTYPE_BIT(WEFT_F64), sddmm_kernel},
    {0},
};

int sparse_cpu_kernels_register(void)
{
    const int layouts[2] = {sparse_coo_layout, sparse_csr_layout};
    for (int i = 0; i < 2; i++) {
        int rc = weft_kernel_register_table(WEFT_DEVICE_CPU, layouts[i], sparse_cpu_kernels);
        if (rc != 0)
            return rc;
    }
    return 0;
}
