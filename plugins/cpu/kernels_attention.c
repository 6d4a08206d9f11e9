/* plugins/cpu/kernels_attention.c: sdpa_flash and sdpa_flash_backward (weft/kernel.h),
 * FlashAttention on the CPU, its block products on the BLAS.
 *
 * Forward: one work unit is (batch-head b, tile of bq queries); the keys and values are
 * walked in blocks of bk rows. Scores are formed transposed, st [keys, queries] =
 * scale k q^T, so the queries are the vector lanes of every softmax step: per query a
 * running maximum m and sum l of exp(s - m) rescale its output accumulator when m grows,
 * and [L, S] never exists (st is bk x bq). Causal masking stops each unit at its last
 * visible key.
 *
 * Backward: one unit is a batch-head. D = rowsum(dO * O) and the logsumexp are laid out
 * once; then for each key block, the query tiles that see it recompute P = exp(s -
 * logsumexp) and accumulate dV and dK for the block and dQ for the rows (causal: a tile
 * stops at its last query's key, so only the bq x bq squares on the diagonal are partly
 * wasted). Every unit writes its own rows only: no atomics.
 *
 * Every block product (QK^T and PV forward; QK^T, dO V^T, P^T dO, dS Q and dS^T K
 * backward) is one GEMM call of the BLAS weft's matmul uses (cpu_gemm_tile: oneDNN's
 * sgemm, OpenBLAS's dgemm for float64), run on the unit's thread, so the bits do not
 * depend on the number of threads, as PyTorch's CPU flash attention calls its gemm per
 * tile. float32 and float64 operands are read in place (a view of a [B, T, 3C]
 * projection is a matrix with leading dim 3C); 16-bit floats are copied block by block
 * into float tiles. The softmax steps are compiled for x86-64-v4 and v3 as well
 * (CPU_CLONES, cpu.h), one chosen at load time.
 *
 * bfloat16 heads of 16 queries or more (up to attention_bf16.inc's bounds), where oneDNN
 * is built in, take attention_bf16.inc instead: block products on the bf16 matmul (AMX,
 * AVX512_BF16), as autocast's bmm makes them. */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <weft/philox.h>

#include "cpu.h"
#include "fast_math.h"

/* Tile sizes: bk keys a block (PyTorch: 512); bq queries a tile, 32 at up to 256 queries
 * and 64 beyond (PyTorch: 32, 64 from 192, 256 from 768). Larger tiles make larger GEMMs,
 * but a causal forward computes the masked half of each bq x bq diagonal square as well
 * (6% more products at 1024 queries with 64, 12% at 256 with 32), and st, its copy for
 * dropout and the accumulators stay within a core's L2. */
#define ATT_BK 256
#define ATT_BQ_SHORT 32
#define ATT_BQ_LONG 64
#define ATT_SHORT 256

#ifdef _OPENMP
#define ATT_PRAGMA(text) _Pragma(#text)
#define ATT_SIMD ATT_PRAGMA(omp simd)
#define ATT_SIMD_SUM(v) ATT_PRAGMA(omp simd reduction(+ : v))
#else
#define ATT_SIMD
#define ATT_SIMD_SUM(v)
#endif

/* Helpers of a hot function are compiled into each of its versions. */
#define ATT_INLINE static inline __attribute__((always_inline))

/* fast_math.h's exp for x <= 0 (only x - max reaches it), libm's for double */
#define ATT_EXP(x) _Generic((x), float: exp_nonpos_f32, default: exp)(x)

/* One operand as the kernels read it: element (b, r, c) of the flattened batch b is at
 * base + itemsize * (boff(b) + r * rs + c * cs). ld: rs, where the BLAS can read the
 * operand's rows in place (the compute type, unit column stride, rows at least cols
 * apart); 0 where tiles are copied. */
struct att_operand {
    const char *base;
    int64_t bstride[WEFT_MAX_DIMS]; /* elements, per batch dim */
    int64_t rs, cs, ld;
    size_t itemsize;
};

struct att_job {
    int nb;                         /* batch dims */
    int64_t bshape[WEFT_MAX_DIMS];
    int64_t BH, L, S, E, Ev;
    int64_t bq, bk;                 /* tile sizes */
    struct att_operand q, k, v, mask, dout;
    bool has_mask, mask_bool, causal;
    double scale, dropout_p;
    uint64_t seed, offset;
    char *out, *lse, *dq, *dk, *dv; /* contiguous */
    const char *fout, *flse;        /* the forward's out and logsumexp (backward) */
    int failed; /* a unit could not allocate its scratch (1) or a product failed (2) */
};

/* cols: the operand's row length; csize: the compute type's size (0: never in place). */
static void operand_of(struct att_operand *o, const weft_tensor *t, int nb, int64_t cols,
                       size_t csize)
{
    o->base = weft_tensor_data(t);
    for (int d = 0; d < nb; d++)
        o->bstride[d] = t->shape[d] == 1 ? 0 : t->stride[d];
    o->rs = t->stride[nb];
    o->cs = t->stride[nb + 1];
    o->itemsize = weft_tensor_itemsize(t);
    const int64_t rows = t->shape[nb], need = cols > 1 ? cols : 1;
    const bool in_place = o->itemsize == csize && (o->cs == 1 || cols <= 1) &&
                          (o->rs >= need || rows <= 1) && o->rs <= INT_MAX;
    o->ld = in_place ? (rows <= 1 && o->rs < need ? need : o->rs) : 0;
}

/* An operand's rows in one batch b: row r at p + r * rs, column c at + c * cs (bytes);
 * ld as the operand's (elements). */
struct att_rows {
    const char *p;
    int64_t rs, cs, ld;
};

ATT_INLINE struct att_rows att_rows_of(const struct att_job *j, const struct att_operand *o,
                                       int64_t b)
{
    int64_t off = 0;
    for (int d = j->nb - 1; d >= 0; d--) {
        off += (b % j->bshape[d]) * o->bstride[d];
        b /= j->bshape[d];
    }
    const int64_t sz = (int64_t)o->itemsize;
    return (struct att_rows){o->base + sz * off, sz * o->rs, sz * o->cs, o->ld};
}

/* c [M, N] = alpha op(a) op(b) + beta c, one block product on the BLAS (cpu_gemm_tile);
 * false when it failed (the job is marked). */
static bool att_mm(struct att_job *j, enum weft_dtype ct, bool ta, bool tb, int64_t M,
                   int64_t N, int64_t K, double alpha, const void *a, int64_t lda,
                   const void *b, int64_t ldb, double beta, void *c, int64_t ldc)
{
    if (M == 0 || N == 0)
        return true;
    const struct cpu_gemm_tile g = {.trans_a = ta, .trans_b = tb, .M = (int)M, .N = (int)N,
                                    .K = (int)K, .lda = (int)lda, .ldb = (int)ldb,
                                    .ldc = (int)ldc, .alpha = alpha, .beta = beta,
                                    .A = a, .B = b, .C = c};
    if (cpu_gemm_tile(ct, &g) == 0)
        return true;
    __atomic_store_n(&j->failed, 2, __ATOMIC_RELAXED);
    return false;
}

/* The dropout of score tiles (attention_dropout.inc), per compute type. */
#define C float
#define WIDE 0
#include "attention_dropout.inc"
#undef C
#undef WIDE
#define C double
#define WIDE 1
#include "attention_dropout.inc"
#undef C
#undef WIDE

/* ---- forward and backward, per dtype (attention_tiles.inc) ------------------------------ */

#define CPU_KERNEL_INC "attention_tiles.inc"
#include "each_floating_dtype.inc"
#undef CPU_KERNEL_INC

/* bfloat16 on the bf16 matmul, where oneDNN is built in (attention_bf16.inc) */
#ifdef WEFT_HAVE_ONEDNN
#include "attention_bf16.inc"
#else
static bool att16_takes(const struct att_job *j)
{
    (void)j;
    return false;
}
#define att16_forward att_forward_bf16
#define att16_backward att_backward_bf16
#endif

/* ---- the kernels -------------------------------------------------------------------------- */

static int check_operand(const char *op, const char *what, const weft_tensor *t, int ndim,
                         const int64_t *bshape, enum weft_dtype dt)
{
    if (t->ndim != ndim || memcmp(t->shape, bshape, sizeof(int64_t) * (size_t)(ndim - 2)) != 0 ||
        t->dtype != dt || (t->stride[ndim - 1] != 1 && t->shape[ndim - 1] > 1))
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "%s: expected %s with the query's batch dims and dtype and a last "
                              "dim of stride 1",
                              op, what);
    return 0;
}

static int job_init(struct att_job *j, const struct weft_op_call *call, const char *op)
{
    if (call->params_size != sizeof(struct weft_sdpa_kernel_params) || !call->params)
        return weft_error_set(WEFT_ERR_RUNTIME, "%s: expected struct weft_sdpa_kernel_params",
                              op);
    const struct weft_sdpa_kernel_params *p = call->params;
    const weft_tensor *q = call->in[0], *k = call->in[1], *v = call->in[2];
    if (call->nin < 3 || !q || !k || !v || q->ndim < 2)
        return weft_error_set(WEFT_ERR_RUNTIME, "%s: expected query, key and value of at least "
                                                "2 dims", op);
    int nd = q->ndim, rc;
    memset(j, 0, sizeof *j);
    j->nb = nd - 2;
    memcpy(j->bshape, q->shape, sizeof(int64_t) * (size_t)j->nb);
    j->L = q->shape[nd - 2];
    j->E = q->shape[nd - 1];
    j->S = k->shape[nd - 2];
    j->Ev = v->shape[nd - 1];
    j->BH = 1;
    for (int d = 0; d < j->nb; d++)
        j->BH *= j->bshape[d];
    if ((rc = check_operand(op, "query", q, nd, q->shape, q->dtype)) ||
        (rc = check_operand(op, "key", k, nd, q->shape, q->dtype)) ||
        (rc = check_operand(op, "value", v, nd, q->shape, q->dtype)))
        return rc;
    if (k->shape[nd - 1] != j->E || v->shape[nd - 2] != j->S)
        return weft_error_set(WEFT_ERR_RUNTIME, "%s: expected query [..., L, E], key [..., S, "
                                                "E] and value [..., S, Ev]", op);
    if (!(p->dropout_p >= 0 && p->dropout_p < 1))
        return weft_error_set(WEFT_ERR_VALUE, "%s: expected 0 <= dropout_p < 1, got %g", op,
                              p->dropout_p);
    const size_t csize = q->dtype == WEFT_F64 ? sizeof(double) : sizeof(float);
    operand_of(&j->q, q, j->nb, j->E, csize);
    operand_of(&j->k, k, j->nb, j->E, csize);
    operand_of(&j->v, v, j->nb, j->Ev, csize);
    if (p->mask) {
        const weft_tensor *mk = p->mask;
        if (mk->ndim != nd || memcmp(mk->shape, q->shape, sizeof(int64_t) * (size_t)j->nb) != 0 ||
            mk->shape[nd - 2] != j->L || mk->shape[nd - 1] != j->S ||
            (mk->dtype != WEFT_BOOL && mk->dtype != q->dtype))
            return weft_error_set(WEFT_ERR_RUNTIME,
                                  "%s: expected attn_mask [..., L, S] of bool or the query's "
                                  "dtype, expanded to the query's batch dims", op);
        operand_of(&j->mask, mk, j->nb, j->S, 0);
        j->has_mask = true;
        j->mask_bool = mk->dtype == WEFT_BOOL;
    }
    j->causal = p->is_causal;
    j->scale = p->scale;
    j->dropout_p = p->dropout_p;
    j->seed = p->seed;
    j->offset = p->offset;
    j->bq = j->L <= ATT_SHORT ? ATT_BQ_SHORT : ATT_BQ_LONG;
    j->bq = j->bq < j->L ? j->bq : j->L > 0 ? j->L : 1;
    j->bk = ATT_BK < j->S ? ATT_BK : j->S > 0 ? j->S : 1;
    return 0;
}

static int tiles_failed(const struct att_job *j, const char *op)
{
    if (j->failed == 1)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "%s: out of memory for the tiles", op);
    return weft_error_set(WEFT_ERR_RUNTIME, "%s: a block product failed in the BLAS", op);
}

/* Units of work below which one thread does them all: about CPU_PARALLEL_GRAIN
 * multiply-adds per chunk. */
static int64_t grain_for(int64_t work_per_unit)
{
    int64_t g = CPU_PARALLEL_GRAIN / (work_per_unit > 0 ? work_per_unit : 1);
    return g > 1 ? g : 1;
}

int cpu_sdpa_flash_kernel(const struct weft_op_call *call)
{
    struct att_job j;
    int rc = job_init(&j, call, "sdpa_flash");
    if (rc)
        return rc;
    const weft_tensor *o = call->out[0], *lse = call->out[1];
    enum weft_dtype lse_dt = call->in[0]->dtype == WEFT_F64 ? WEFT_F64 : WEFT_F32;
    if (call->nout != 2 || !o || !lse || !weft_tensor_is_contiguous(o) ||
        !weft_tensor_is_contiguous(lse) || o->dtype != call->in[0]->dtype ||
        lse->dtype != lse_dt || weft_tensor_numel(o) != j.BH * j.L * j.Ev ||
        weft_tensor_numel(lse) != j.BH * j.L)
        return weft_error_set(WEFT_ERR_RUNTIME, "sdpa_flash: expected contiguous out [..., L, "
                                                "Ev] and logsumexp [..., L] of %s",
                              weft_dtype_name(lse_dt));
    if (j.BH * j.L == 0 || j.Ev == 0)
        return 0;
    j.out = weft_tensor_data(o);
    j.lse = weft_tensor_data(lse);
    void (*fn)(void *, int64_t, int64_t) = NULL;
    switch (call->in[0]->dtype) {
#define FORWARD_CASE(name, id, T, C)                                                          \
    case id:                                                                                  \
        fn = att_forward_##name;                                                              \
        break;
        WEFT_FOR_FLOATING_DTYPES(FORWARD_CASE)
#undef FORWARD_CASE
    default:
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "\"sdpa_flash\" not implemented for '%s' on cpu",
                              weft_dtype_torch_name(call->in[0]->dtype));
    }
    /* a unit: a tile of bq queries of a batch-head; all of a batch-head's in bfloat16 */
    int64_t units = j.BH * ((j.L + j.bq - 1) / j.bq), rows = j.bq;
    if (call->in[0]->dtype == WEFT_BF16 && att16_takes(&j)) {
        fn = att16_forward;
        units = j.BH;
        rows = j.L;
    }
    cpu_parallel_for(units, grain_for(rows * j.S * (j.E + j.Ev)), fn, &j);
    return j.failed ? tiles_failed(&j, "sdpa_flash") : 0;
}

int cpu_sdpa_flash_backward_kernel(const struct weft_op_call *call)
{
    struct att_job j;
    int rc = job_init(&j, call, "sdpa_flash_backward");
    if (rc)
        return rc;
    const struct weft_sdpa_kernel_params *p = call->params;
    const weft_tensor *q = call->in[0], *dout = call->in[3];
    const weft_tensor *gq = call->out[0], *gk = call->out[1], *gv = p->grad_value;
    enum weft_dtype lse_dt = q->dtype == WEFT_F64 ? WEFT_F64 : WEFT_F32;
    if (call->nin != 4 || !dout)
        return weft_error_set(WEFT_ERR_RUNTIME, "sdpa_flash_backward: expected grad_out as in[3]");
    if ((rc = check_operand("sdpa_flash_backward", "grad_out", dout, q->ndim, q->shape, q->dtype)))
        return rc;
    if (dout->shape[q->ndim - 2] != j.L || dout->shape[q->ndim - 1] != j.Ev)
        return weft_error_set(WEFT_ERR_RUNTIME, "sdpa_flash_backward: expected grad_out [..., L, Ev]");
    const weft_tensor *chk[5] = {gq, gk, gv, p->out, p->logsumexp};
    const int64_t want[5] = {j.BH * j.L * j.E, j.BH * j.S * j.E, j.BH * j.S * j.Ev,
                             j.BH * j.L * j.Ev, j.BH * j.L};
    for (int i = 0; i < 5; i++)
        if (!chk[i] || !weft_tensor_is_contiguous(chk[i]) || weft_tensor_numel(chk[i]) != want[i] ||
            chk[i]->dtype != (i == 4 ? lse_dt : q->dtype))
            return weft_error_set(WEFT_ERR_RUNTIME,
                                  "sdpa_flash_backward: expected contiguous grad_q, grad_k, "
                                  "grad_value, out and logsumexp (operand %d)", i);
    operand_of(&j.dout, dout, j.nb, j.Ev, q->dtype == WEFT_F64 ? sizeof(double) : sizeof(float));
    j.dq = weft_tensor_data(gq);
    j.dk = weft_tensor_data(gk);
    j.dv = weft_tensor_data(gv);
    j.fout = weft_tensor_data(p->out);
    j.flse = weft_tensor_data(p->logsumexp);
    if (j.BH == 0)
        return 0;
    if (j.L == 0 || j.S == 0) { /* nothing flows: zero gradients */
        if (j.dq)
            memset(j.dq, 0, weft_tensor_itemsize(gq) * (size_t)want[0]);
        if (j.dk)
            memset(j.dk, 0, weft_tensor_itemsize(gk) * (size_t)want[1]);
        if (j.dv)
            memset(j.dv, 0, weft_tensor_itemsize(gv) * (size_t)want[2]);
        return 0;
    }
    void (*fn)(void *, int64_t, int64_t) = NULL;
    switch (q->dtype) {
#define BACKWARD_CASE(name, id, T, C)                                                         \
    case id:                                                                                  \
        fn = att_backward_##name;                                                             \
        break;
        WEFT_FOR_FLOATING_DTYPES(BACKWARD_CASE)
#undef BACKWARD_CASE
    default:
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED,
                              "\"sdpa_flash_backward\" not implemented for '%s' on cpu",
                              weft_dtype_torch_name(q->dtype));
    }
    if (q->dtype == WEFT_BF16 && att16_takes(&j))
        fn = att16_backward;
    cpu_parallel_for(j.BH, grain_for(2 * j.L * j.S * (j.E + j.Ev)), fn, &j);
    return j.failed ? tiles_failed(&j, "sdpa_flash_backward") : 0;
}
