/* plugins/cpu/kernels_attention.c: sdpa_flash and sdpa_flash_backward (weft/kernel.h),
 * FlashAttention on the CPU.
 *
 * Forward: one work unit is (batch-head b, tile of ATT_BQ queries). Its queries, times
 * the scale, are copied transposed into qt [E, ATT_BQ] once; the keys and values are
 * walked in blocks of ATT_BK rows. Scores are formed transposed, st [keys, queries] =
 * k qt, so the ATT_BQ queries are the vector lanes of every softmax step: per query a
 * running maximum m and sum l of exp(s - m) rescale its output accumulator when m grows,
 * and [L, S] never exists (the tiles fit in L1). Causal masking stops each unit at its
 * last visible key.
 *
 * Backward: one unit is a batch-head. Its scaled queries and grad_out (as rows and as
 * transposed tiles), D = rowsum(dO * O) and the logsumexp are laid out once; then for
 * each key block, the query tiles that see it recompute P = exp(s - logsumexp) and
 * accumulate dV and dK for the block and dQ for the rows. Every unit writes its own rows
 * only: no atomics, the same bits for any number of threads.
 *
 * Tiles hold the compute type (float for 16-bit floats), copied from any strides, and
 * every product is one small register-blocked GEMM (att_gemm). The hot functions are
 * also compiled for x86-64-v4 and v3 (CPU_CLONES, cpu.h), one chosen at load time. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <weft/philox.h>

#include "cpu.h"
#include "fast_math.h"

#define ATT_BQ 32 /* queries per tile: the vector lanes of the softmax steps */
#define ATT_BK 32 /* keys per tile */

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
 * base + itemsize * (boff(b) + r * rs + c * cs). */
struct att_operand {
    const char *base;
    int64_t bstride[WEFT_MAX_DIMS]; /* elements, per batch dim */
    int64_t rs, cs;
    size_t itemsize;
};

struct att_job {
    int nb;                         /* batch dims */
    int64_t bshape[WEFT_MAX_DIMS];
    int64_t BH, L, S, E, Ev;
    struct att_operand q, k, v, mask, dout;
    bool has_mask, mask_bool, causal;
    double scale, dropout_p;
    uint64_t seed, offset;
    char *out, *lse, *dq, *dk, *dv; /* contiguous */
    const char *fout, *flse;        /* the forward's out and logsumexp (backward) */
    int failed;                     /* a unit could not allocate its scratch */
};

static void operand_of(struct att_operand *o, const weft_tensor *t, int nb)
{
    o->base = weft_tensor_data(t);
    for (int d = 0; d < nb; d++)
        o->bstride[d] = t->shape[d] == 1 ? 0 : t->stride[d];
    o->rs = t->stride[nb];
    o->cs = t->stride[nb + 1];
    o->itemsize = weft_tensor_itemsize(t);
}

/* An operand's rows in one batch b: row r at p + r * rs, column c at + c * cs (bytes). */
struct att_rows {
    const char *p;
    int64_t rs, cs;
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
    return (struct att_rows){o->base + sz * off, sz * o->rs, sz * o->cs};
}

/* The tile products, one small GEMM shape for all five: c [M, N] += a [M, K] b [K, N],
 * a's element (m, k) at a[m * lda + k * ask] (so a transposed tile is a = its rows with
 * lda 1), b's and c's rows ldb and ldc apart. Two rows of c by four vectors of columns
 * stay in registers across k (GCC's vector extensions: 256-bit where the clone has AVX2,
 * two 128-bit halves on the baseline); narrower column remainders take one vector, then
 * plain loops. */
#define ATT_VBYTES 32
/* The vector at p, to read or assign. */
#define ATT_V(C, p) (*(CPU_CAT(att_v_, C) *)(p))
/* They and the dropout of score tiles (attention_gemm.inc), per compute type. */
#define C float
#define WIDE 0
#include "attention_gemm.inc"
#undef C
#undef WIDE
#define C double
#define WIDE 1
#include "attention_gemm.inc"
#undef C
#undef WIDE

/* ---- forward and backward, per dtype (attention_tiles.inc) ------------------------------ */

#define CPU_KERNEL_INC "attention_tiles.inc"
#include "each_floating_dtype.inc"
#undef CPU_KERNEL_INC

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
    operand_of(&j->q, q, j->nb);
    operand_of(&j->k, k, j->nb);
    operand_of(&j->v, v, j->nb);
    if (p->mask) {
        const weft_tensor *mk = p->mask;
        if (mk->ndim != nd || memcmp(mk->shape, q->shape, sizeof(int64_t) * (size_t)j->nb) != 0 ||
            mk->shape[nd - 2] != j->L || mk->shape[nd - 1] != j->S ||
            (mk->dtype != WEFT_BOOL && mk->dtype != q->dtype))
            return weft_error_set(WEFT_ERR_RUNTIME,
                                  "%s: expected attn_mask [..., L, S] of bool or the query's "
                                  "dtype, expanded to the query's batch dims", op);
        operand_of(&j->mask, mk, j->nb);
        j->has_mask = true;
        j->mask_bool = mk->dtype == WEFT_BOOL;
    }
    j->causal = p->is_causal;
    j->scale = p->scale;
    j->dropout_p = p->dropout_p;
    j->seed = p->seed;
    j->offset = p->offset;
    return 0;
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
    int64_t units = j.BH * ((j.L + ATT_BQ - 1) / ATT_BQ);
    cpu_parallel_for(units, grain_for(ATT_BQ * j.S * (j.E + j.Ev)), fn, &j);
    if (j.failed)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "sdpa_flash: out of memory for the tiles");
    return 0;
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
    operand_of(&j.dout, dout, j.nb);
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
    cpu_parallel_for(j.BH, grain_for(2 * j.L * j.S * (j.E + j.Ev)), fn, &j);
    if (j.failed)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "sdpa_flash_backward: out of memory for the tiles");
    return 0;
}
