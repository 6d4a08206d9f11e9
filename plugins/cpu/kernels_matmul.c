/* plugins/cpu/kernels_matmul.c: batched matrix products [B, M, K] x [B, K, N] -> [B, M, N].
 *
 * float32 goes to the provider [cpu] gemm names (gemm.c: OpenBLAS, oneDNN, or per shape
 * the faster), float64 to OpenBLAS, bfloat16 to oneDNN's matmul (onednn_matmul.c: float32
 * accumulator, one rounding) where the build has oneDNN. A transposed operand is passed as a transpose (no copy):
 * with row-major storage, an operand whose inner stride is 1 is NoTrans with ld = its row
 * stride, one whose row stride is 1 is Trans with ld = its column stride; anything else is
 * copied to contiguous memory first. Small matrices in a batch run in parallel over the
 * batch, one single-threaded GEMM per thread (OpenBLAS's OpenMP build runs single-threaded
 * inside a parallel region); large ones run one after another, each using every thread.
 * float16 is widened to float32 for the float32 provider and rounded once; bfloat16 without
 * oneDNN and integers use a plain loop that accumulates in float / 64 bits. */
#include <cblas.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

/* Below this many multiply-adds per matrix a batch is split across threads instead. */
#define MM_SMALL (128 * 128 * 128)

struct mm_shape {
    int64_t B, M, K, N;
};

/* One operand of the product seen as rows x cols with element strides. */
struct mm_operand {
    const char *data;
    int64_t rows, cols, sbatch, srow, scol;
};

static struct mm_operand operand_of(const weft_tensor *t)
{
    struct mm_operand o = {weft_tensor_data(t), t->shape[1], t->shape[2], t->stride[0],
                           t->stride[1], t->stride[2]};
    if (t->shape[0] == 1)
        o.sbatch = 0;
    return o;
}

/* How BLAS reads a row-major rows x cols operand with these strides, if it can. */
static bool blas_layout(const struct mm_operand *o, enum CBLAS_TRANSPOSE *tr, int *ld)
{
    int64_t r1 = o->rows > 1 ? o->rows : 1, c1 = o->cols > 1 ? o->cols : 1, l;
    if ((o->scol == 1 || o->cols == 1) && (o->rows == 1 || o->srow >= c1)) {
        *tr = CblasNoTrans;
        l = o->rows == 1 ? c1 : o->srow;
    } else if ((o->srow == 1 || o->rows == 1) && (o->cols == 1 || o->scol >= r1)) {
        *tr = CblasTrans;
        l = o->cols == 1 ? r1 : o->scol;
    } else {
        return false;
    }
    if (l > INT_MAX)
        return false;
    *ld = (int)l;
    return true;
}

/* Copies an operand's distinct matrices (one when the batch is broadcast) into a
 * contiguous buffer and points the operand at it. */
static int make_contiguous(struct mm_operand *o, int64_t B, size_t isz, void **buffer)
{
    int64_t nb = o->sbatch == 0 ? 1 : B;
    size_t n = (size_t)(nb * o->rows * o->cols);
    char *buf = malloc(n * isz + 1);
    if (!buf)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY,
                              "out of host memory copying a matmul operand");
    char *dst = buf;
    for (int64_t b = 0; b < nb; b++)
        for (int64_t i = 0; i < o->rows; i++)
            for (int64_t j = 0; j < o->cols; j++, dst += isz)
                memcpy(dst, o->data + (b * o->sbatch + i * o->srow + j * o->scol) * (int64_t)isz,
                       isz);
    o->data = buf;
    o->sbatch = nb == 1 ? 0 : o->rows * o->cols;
    o->srow = o->cols;
    o->scol = 1;
    *buffer = buf;
    return 0;
}

/* Sets how BLAS reads the operand, copying it to contiguous memory when it must. */
static int prepare_operand(struct mm_operand *o, int64_t B, size_t isz, enum CBLAS_TRANSPOSE *tr,
                           int *ld, void **buffer)
{
    if (blas_layout(o, tr, ld))
        return 0;
    if (make_contiguous(o, B, isz, buffer) != 0)
        return weft_error_code();
    if (blas_layout(o, tr, ld))
        return 0;
    return weft_error_set(WEFT_ERR_VALUE, "matmul: operand of %lld x %lld is too large for BLAS",
                          (long long)o->rows, (long long)o->cols);
}

struct gemm_job {
    struct mm_shape s;
    struct mm_operand a, b;
    char *c;
    int64_t c_sbatch;
    int ldc;
    enum CBLAS_TRANSPOSE ta, tb;
    int lda, ldb;
    enum weft_dtype dtype;
    int failed; /* set by a thread whose product failed (error set on that thread) */
};

static void gemm_batches(void *ctx, int64_t begin, int64_t end)
{
    struct gemm_job *j = ctx;
    int M = (int)j->s.M, N = (int)j->s.N, K = (int)j->s.K;
    for (int64_t b = begin; b < end; b++) {
        if (j->dtype == WEFT_F32) {
            struct cpu_gemm g = {
                .trans_a = j->ta == CblasTrans, .trans_b = j->tb == CblasTrans,
                .M = M, .N = N, .K = K, .lda = j->lda, .ldb = j->ldb, .ldc = j->ldc,
                .A = (const float *)j->a.data + b * j->a.sbatch,
                .B = (const float *)j->b.data + b * j->b.sbatch,
                .C = (float *)j->c + b * j->c_sbatch};
            if (cpu_sgemm(&g) != 0) {
                __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
                return;
            }
        } else if (j->dtype == WEFT_BF16) {
            struct cpu_gemm_bf16 g = {
                .trans_a = j->ta == CblasTrans, .trans_b = j->tb == CblasTrans,
                .M = M, .N = N, .K = K, .lda = j->lda, .ldb = j->ldb, .ldc = j->ldc,
                .A = (const uint16_t *)j->a.data + b * j->a.sbatch,
                .B = (const uint16_t *)j->b.data + b * j->b.sbatch,
                .C = (uint16_t *)j->c + b * j->c_sbatch};
            if (cpu_gemm_bf16(&g) != 0) {
                __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
                return;
            }
        } else {
            const double *A = (const double *)j->a.data + b * j->a.sbatch;
            const double *Bm = (const double *)j->b.data + b * j->b.sbatch;
            double *C = (double *)j->c + b * j->c_sbatch;
            cblas_dgemm(CblasRowMajor, j->ta, j->tb, M, N, K, 1.0, A, j->lda, Bm, j->ldb, 0.0, C,
                        j->ldc);
        }
    }
}

/* Writes zeros into every [M, N] matrix of out (products over an empty K). */
static void zero_output(weft_tensor *out)
{
    char *c = weft_tensor_data(out);
    size_t isz = weft_tensor_itemsize(out);
    for (int64_t b = 0; b < out->shape[0]; b++)
        for (int64_t i = 0; i < out->shape[1]; i++)
            for (int64_t j = 0; j < out->shape[2]; j++)
                memset(c + (b * out->stride[0] + i * out->stride[1] + j * out->stride[2]) *
                               (int64_t)isz,
                       0, isz);
}

static int matmul_blas(const struct weft_op_call *call, struct mm_shape s)
{
    weft_tensor *out = call->out[0];
    size_t isz = weft_tensor_itemsize(out);
    if (s.M > INT_MAX || s.N > INT_MAX || s.K > INT_MAX)
        return weft_error_set(WEFT_ERR_VALUE, "matmul: dimensions above %d are not supported",
                              INT_MAX);
    struct gemm_job j = {.s = s, .a = operand_of(call->in[0]), .b = operand_of(call->in[1]),
                         .dtype = out->dtype};
    void *abuf = NULL, *bbuf = NULL, *cbuf = NULL;
    int rc = 0;
    if ((rc = prepare_operand(&j.a, s.B, isz, &j.ta, &j.lda, &abuf)) != 0 ||
        (rc = prepare_operand(&j.b, s.B, isz, &j.tb, &j.ldb, &bbuf)) != 0)
        goto done;
    /* The output is written directly when its rows are contiguous, else through a buffer. */
    bool direct = (out->stride[2] == 1 || s.N == 1) &&
                  (s.M == 1 || out->stride[1] >= (s.N > 1 ? s.N : 1)) && out->stride[1] <= INT_MAX;
    if (direct) {
        j.c = weft_tensor_data(out);
        j.c_sbatch = out->stride[0];
        j.ldc = (int)(s.M == 1 ? (s.N > 1 ? s.N : 1) : out->stride[1]);
    } else {
        cbuf = malloc((size_t)(s.B * s.M * s.N) * isz);
        if (!cbuf) {
            rc = weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory for a matmul result");
            goto done;
        }
        j.c = cbuf;
        j.c_sbatch = s.M * s.N;
        j.ldc = (int)(s.N > 1 ? s.N : 1);
    }
    int64_t per = s.M * s.N * s.K;
    if (s.B > 1 && per < MM_SMALL) {
        int64_t grain = CPU_PARALLEL_GRAIN / (per > 0 ? per : 1);
        cpu_parallel_for(s.B, grain > 0 ? grain : 1, gemm_batches, &j);
    } else {
        gemm_batches(&j, 0, s.B);
    }
    if (j.failed) {
        /* A worker thread's error message stays on that thread: name the product here. */
        rc = weft_error_set(WEFT_ERR_RUNTIME, "matmul: oneDNN's %s failed for %lld x %lld "
                                              "x %lld",
                            j.dtype == WEFT_BF16 ? "bfloat16 matmul" : "sgemm", (long long)s.M,
                            (long long)s.N, (long long)s.K);
        goto done;
    }
    if (!direct) {
        const char *src = cbuf;
        char *dst = weft_tensor_data(out);
        for (int64_t b = 0; b < s.B; b++)
            for (int64_t i = 0; i < s.M; i++)
                for (int64_t k = 0; k < s.N; k++, src += isz)
                    memcpy(dst + (b * out->stride[0] + i * out->stride[1] + k * out->stride[2]) *
                                     (int64_t)isz,
                           src, isz);
    }
done:
    free(abuf);
    free(bbuf);
    free(cbuf);
    return rc;
}

/* ---- the plain loop for 16-bit floats and integers --------------------------------------- */

#define MM_NB 256 /* output columns accumulated at once */

struct loop_job {
    struct mm_shape s;
    struct mm_operand a;
    const void *bconv;     /* b converted to the accumulator type, [nb][K][N] contiguous */
    int64_t b_sbatch;      /* 0 when b's batch is broadcast, else K * N */
    weft_tensor *out;
    int failed;            /* set when a thread could not get scratch memory */
};

#define MM_ACC(C) __typeof__(_Generic((C)0, float: (float)0, default: (uint64_t)0))

#define CPU_KERNEL_INC "matmul_loop.inc"
#include "each_integral_dtype.inc"
#define DT bf16
#define T uint16_t
#define C float
#include CPU_KERNEL_INC
#undef DT
#undef T
#undef C
#undef CPU_KERNEL_INC

static int matmul_loop(const struct weft_op_call *call, struct mm_shape s)
{
    void *(*convert)(const struct mm_operand *, int64_t) = NULL;
    void (*rows)(void *, int64_t, int64_t) = NULL;
    switch (call->out[0]->dtype) {
#define CASE(name, id, T, C)                                                                  \
    case id:                                                                                  \
        convert = convert_b_##name;                                                           \
        rows = rows_##name;                                                                   \
        break;
        WEFT_FOR_INTEGRAL_DTYPES(CASE)
        CASE(bf16, WEFT_BF16, uint16_t, float)
#undef CASE
    default:
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED,
                              "\"matmul\" not implemented for '%s' on cpu",
                              weft_dtype_torch_name(call->out[0]->dtype));
    }
    struct mm_operand b = operand_of(call->in[1]);
    struct loop_job j = {.s = s, .a = operand_of(call->in[0]), .out = call->out[0]};
    j.bconv = convert(&b, s.B);
    if (!j.bconv)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory for a matmul operand");
    j.b_sbatch = b.sbatch == 0 ? 0 : s.K * s.N;
    int64_t per_row = s.K * s.N > 0 ? s.K * s.N : 1;
    int64_t grain = CPU_PARALLEL_GRAIN / per_row;
    cpu_parallel_for(s.B * s.M, grain > 0 ? grain : 1, rows, &j);
    free((void *)j.bconv);
    if (j.failed)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory for matmul scratch");
    return 0;
}

/* ---- float16 through float32 ------------------------------------------------------------ */

/* One operand's n matrices widened to float32, contiguous, in the operand's own memory
 * order: a transposed view (contiguous down its columns) is widened column by column and
 * handed to the GEMM as Trans, so either layout widens as unit-stride runs (convert.c's
 * vector loops), lines split across threads. */
struct widen_job {
    const struct mm_operand *o;
    bool trans;         /* lines are the operand's columns */
    int64_t lines, len; /* per matrix: lines of len elements */
    float *dst;
};

static void widen_lines(void *ctx, int64_t begin, int64_t end)
{
    const struct widen_job *w = ctx;
    int64_t step = w->trans ? w->o->srow : w->o->scol; /* elements along a line */
    int64_t pitch = w->trans ? w->o->scol : w->o->srow; /* from line to line */
    for (int64_t t = begin; t < end; t++) {
        int64_t b = t / w->lines, l = t % w->lines;
        const uint16_t *src = (const uint16_t *)w->o->data + b * w->o->sbatch + l * pitch;
        float *dst = w->dst + t * w->len;
        if (step == 1) {
            cpu_f16_to_f32(dst, src, w->len);
            continue;
        }
        for (int64_t k = 0; k < w->len; k++)
            dst[k] = weft_f16_to_float(src[k * step]);
    }
}

/* Widens o's n matrices into dst; *trans: dst holds them transposed ([cols, rows]). */
static void widen_f16(const struct mm_operand *o, int64_t n, float *dst, bool *trans)
{
    *trans = o->scol != 1 && o->srow == 1 && o->cols > 1;
    struct widen_job w = {o, *trans, *trans ? o->cols : o->rows, *trans ? o->rows : o->cols, dst};
    int64_t grain = CPU_PARALLEL_GRAIN / (w.len > 0 ? w.len : 1);
    cpu_parallel_for(n * w.lines, grain > 0 ? grain : 1, widen_lines, &w);
}

/* Floats rounded up to a whole 64-byte line, so each scratch part starts on one. */
static size_t scratch_floats(int64_t n)
{
    return ((size_t)n + 15u) & ~(size_t)15u;
}

/* float16 has no GEMM here (AVX512_FP16 is not on this generation): the operands are
 * widened to float32, multiplied by the float32 provider and the result rounded once,
 * which is what PyTorch's CPU float16 matmul computes too. The widened operands and the
 * float32 result share one scratch block from the plugin's caching allocator, so a
 * training step reuses the same block every iteration (emptied with the cache, at the
 * latest when the plugin is unloaded). */
static int matmul_f16(const struct weft_op_call *call, struct mm_shape s)
{
    if (s.M > INT_MAX || s.N > INT_MAX || s.K > INT_MAX)
        return weft_error_set(WEFT_ERR_VALUE, "matmul: dimensions above %d are not supported",
                              INT_MAX);
    struct mm_operand a = operand_of(call->in[0]), b = operand_of(call->in[1]);
    weft_tensor *out = call->out[0];
    int64_t na = a.sbatch == 0 ? 1 : s.B, nb = b.sbatch == 0 ? 1 : s.B;
    size_t fa = scratch_floats(na * s.M * s.K), fb = scratch_floats(nb * s.K * s.N);
    size_t bytes = (fa + fb + scratch_floats(s.M * s.N)) * sizeof(float);
    float *A = cpu_alloc(0, bytes);
    if (!A)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY,
                              "out of host memory for a float16 matmul's %zu bytes of float32 "
                              "scratch",
                              bytes);
    float *Bm = A + fa, *C = Bm + fb;
    bool ta, tb;
    widen_f16(&a, na, A, &ta);
    widen_f16(&b, nb, Bm, &tb);
    uint16_t *o = weft_tensor_data(out);
    int rc = 0;
    for (int64_t bi = 0; bi < s.B && rc == 0; bi++) {
        /* C [M, N] = op(A) [M, K] op(B) [K, N], each stored contiguous */
        struct cpu_gemm g = {.trans_a = ta, .trans_b = tb,
                             .M = (int)s.M, .N = (int)s.N, .K = (int)s.K,
                             .lda = (int)(ta ? s.M : s.K), .ldb = (int)(tb ? s.K : s.N),
                             .ldc = (int)s.N,
                             .A = A + (na > 1 ? bi : 0) * s.M * s.K,
                             .B = Bm + (nb > 1 ? bi : 0) * s.K * s.N, .C = C};
        rc = cpu_sgemm(&g);
        for (int64_t i = 0; rc == 0 && i < s.M; i++) {
            uint16_t *orow = o + bi * out->stride[0] + i * out->stride[1];
            if (out->stride[2] == 1) {
                cpu_f32_to_f16(orow, C + i * s.N, s.N);
                continue;
            }
            for (int64_t j = 0; j < s.N; j++)
                orow[j * out->stride[2]] = weft_float_to_f16(C[i * s.N + j]);
        }
    }
    cpu_free(0, A, bytes);
    return rc;
}

int cpu_matmul_kernel(const struct weft_op_call *call)
{
    const weft_tensor *a = call->in[0], *b = call->in[1];
    weft_tensor *out = call->out[0];
    if (a->ndim != 3 || b->ndim != 3 || out->ndim != 3 || a->shape[2] != b->shape[1] ||
        out->shape[1] != a->shape[1] || out->shape[2] != b->shape[2] ||
        a->dtype != b->dtype || a->dtype != out->dtype)
        return weft_error_set(WEFT_ERR_RUNTIME, "matmul kernel: expected [B, M, K] x [B, K, N] -> "
                                                "[B, M, N] of one dtype");
    struct mm_shape s = {out->shape[0], out->shape[1], a->shape[2], out->shape[2]};
    if (s.B == 0 || s.M == 0 || s.N == 0)
        return 0;
    if (s.K == 0) {
        zero_output(out);
        return 0;
    }
    if (out->dtype == WEFT_F32 || out->dtype == WEFT_F64 ||
        (out->dtype == WEFT_BF16 && cpu_gemm_bf16_available()))
        return matmul_blas(call, s);
    if (out->dtype == WEFT_F16)
        return matmul_f16(call, s);
    return matmul_loop(call, s);
}
