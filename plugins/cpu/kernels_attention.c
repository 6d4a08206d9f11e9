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

/* Multiplies x[0], x[stride], ... (n of them) by the dropout factors of elements idx0,
 * idx0 + 1, ... (weft/kernel.h): kept weights by 1 / (1 - p), dropped ones by 0. Each
 * Philox block serves four consecutive elements. */
#define DEFINE_DROPOUT(C, WIDE)                                                               \
    ATT_INLINE void att_dropout_##C(const struct att_job *j, uint64_t idx0, int64_t n,        \
                                    C *x, int64_t stride)                                     \
    {                                                                                         \
        const C keep = (C)(1 - j->dropout_p), factor = (C)(1 / (1 - j->dropout_p));          \
        uint32_t w[4];                                                                        \
        for (int64_t t = 0; t < n; t++) {                                                     \
            uint64_t idx = idx0 + (uint64_t)t;                                                \
            if (t == 0 || idx % 4 == 0)                                                       \
                weft_philox4x32(j->offset + idx / 4, j->seed, w);                             \
            C u = WIDE ? (C)((double)w[idx % 4] * (1.0 / 4294967296.0))                       \
                       : (C)((float)(w[idx % 4] >> 8) * (1.0f / 16777216.0f));                \
            x[t * stride] *= u < keep ? factor : 0;                                           \
        }                                                                                     \
    }
DEFINE_DROPOUT(float, 0)
DEFINE_DROPOUT(double, 1)

/* Tile loads, per dtype: rows into a dense [n, cols] array of the compute type, or
 * transposed into [cols, ATT_BQ] (the query side of the score tiles), times mul. */
#define DEFINE_LOADS(name, id, T, C)                                                          \
    ATT_INLINE void att_load_rows_##name(struct att_rows o, int64_t r0, int64_t n,            \
                                         int64_t cols, C mul, C *dst)                          \
    {                                                                                         \
        for (int64_t r = 0; r < n; r++) {                                                     \
            const T *src = (const T *)(o.p + (r0 + r) * o.rs);                                \
            C *d = dst + r * cols;                                                            \
            ATT_SIMD                                                                          \
            for (int64_t c = 0; c < cols; c++)                                                \
                d[c] = (C)weft_load_##name(src + c) * mul;                                    \
        }                                                                                     \
    }                                                                                         \
    /* dst [cols, ATT_BQ]: column r is row r0 + r, zero past n. */                            \
    ATT_INLINE void att_load_cols_##name(struct att_rows o, int64_t r0, int64_t n,            \
                                         int64_t cols, C mul, C *dst)                          \
    {                                                                                         \
        if (n < ATT_BQ)                                                                       \
            memset(dst, 0, sizeof(C) * (size_t)(cols * ATT_BQ));                              \
        for (int64_t r = 0; r < n; r++) {                                                     \
            const T *src = (const T *)(o.p + (r0 + r) * o.rs);                                \
            for (int64_t c = 0; c < cols; c++)                                                \
                dst[c * ATT_BQ + r] = (C)weft_load_##name(src + c) * mul;                     \
        }                                                                                     \
    }                                                                                         \
    /* On the transposed score tile st [nk, ATT_BQ] of keys j0.. and queries i0..: adds   \
     * the float mask, or -inf where a bool mask is false or past the causal diagonal. */    \
    ATT_INLINE void att_mask_tile_##name(const struct att_job *j, struct att_rows mk,         \
                                         int64_t i0, int64_t nq, int64_t j0, int64_t nk,      \
                                         C *st)                                               \
    {                                                                                         \
        const int64_t step = mk.cs;                                                           \
        for (int64_t i = 0; i < nq; i++) {                                                    \
            int64_t visible = nk; /* keys t < visible pass the causal mask */                 \
            if (j->causal && i0 + i - j0 + 1 < visible)                                       \
                visible = i0 + i - j0 + 1 < 0 ? 0 : i0 + i - j0 + 1;                          \
            for (int64_t t = visible; t < nk; t++)                                            \
                st[t * ATT_BQ + i] = -INFINITY;                                               \
            if (!j->has_mask)                                                                 \
                continue;                                                                     \
            const char *m = mk.p + (i0 + i) * mk.rs + step * j0;                              \
            if (j->mask_bool) {                                                               \
                for (int64_t t = 0; t < visible; t++)                                         \
                    if (!*(const uint8_t *)(m + t * step))                                    \
                        st[t * ATT_BQ + i] = -INFINITY;                                       \
            } else {                                                                          \
                for (int64_t t = 0; t < visible; t++)                                         \
                    st[t * ATT_BQ + i] += (C)weft_load_##name(m + t * step);                  \
            }                                                                                 \
        }                                                                                     \
    }
WEFT_FOR_FLOATING_DTYPES(DEFINE_LOADS)

/* The tile products, one small GEMM shape for all five: c [M, N] += a [M, K] b [K, N],
 * a's element (m, k) at a[m * lda + k * ask] (so a transposed tile is a = its rows with
 * lda 1), b's and c's rows ldb and ldc apart. Two rows of c by four vectors of columns
 * stay in registers across k (GCC's vector extensions: 256-bit where the clone has AVX2,
 * two 128-bit halves on the baseline); narrower column remainders take one vector, then
 * plain loops. */
#define ATT_VBYTES 32
/* The vector at p, to read or assign. */
#define ATT_V(C, p) (*(att_v_##C *)(p))
#define DEFINE_GEMM(C)                                                                        \
    /* element-aligned and may_alias: loads and stores anywhere in a C array */              \
    typedef C att_v_##C                                                                       \
        __attribute__((vector_size(ATT_VBYTES), aligned(sizeof(C)), may_alias));             \
    ATT_INLINE void att_gemm_##C(int64_t M, int64_t N, int64_t K, const C *a, int64_t lda,    \
                                 int64_t ask, const C *b, int64_t ldb, C *c, int64_t ldc)     \
    {                                                                                         \
        enum { VL = ATT_VBYTES / sizeof(C) };                                                 \
        int64_t n0 = 0;                                                                       \
        for (; n0 + 4 * VL <= N; n0 += 4 * VL) {                                              \
            int64_t m = 0;                                                                    \
            for (; m + 2 <= M; m += 2) {                                                      \
                C *c0 = c + m * ldc + n0, *c1 = c0 + ldc;                                     \
                const C *a0 = a + m * lda, *a1 = a0 + lda;                                    \
                att_v_##C x00 = ATT_V(C, c0), x01 = ATT_V(C, c0 + VL);                        \
                att_v_##C x02 = ATT_V(C, c0 + 2 * VL), x03 = ATT_V(C, c0 + 3 * VL);           \
                att_v_##C x10 = ATT_V(C, c1), x11 = ATT_V(C, c1 + VL);                        \
                att_v_##C x12 = ATT_V(C, c1 + 2 * VL), x13 = ATT_V(C, c1 + 3 * VL);           \
                for (int64_t k = 0; k < K; k++) {                                             \
                    const C *br = b + k * ldb + n0, s0 = a0[k * ask], s1 = a1[k * ask];       \
                    const att_v_##C b0 = ATT_V(C, br), b1 = ATT_V(C, br + VL);                \
                    const att_v_##C b2 = ATT_V(C, br + 2 * VL), b3 = ATT_V(C, br + 3 * VL);   \
                    x00 += s0 * b0;                                                           \
                    x01 += s0 * b1;                                                           \
                    x02 += s0 * b2;                                                           \
                    x03 += s0 * b3;                                                           \
                    x10 += s1 * b0;                                                           \
                    x11 += s1 * b1;                                                           \
                    x12 += s1 * b2;                                                           \
                    x13 += s1 * b3;                                                           \
                }                                                                             \
                ATT_V(C, c0) = x00;                                                           \
                ATT_V(C, c0 + VL) = x01;                                                      \
                ATT_V(C, c0 + 2 * VL) = x02;                                                  \
                ATT_V(C, c0 + 3 * VL) = x03;                                                  \
                ATT_V(C, c1) = x10;                                                           \
                ATT_V(C, c1 + VL) = x11;                                                      \
                ATT_V(C, c1 + 2 * VL) = x12;                                                  \
                ATT_V(C, c1 + 3 * VL) = x13;                                                  \
            }                                                                                 \
            for (; m < M; m++) {                                                              \
                C *c0 = c + m * ldc + n0;                                                     \
                const C *a0 = a + m * lda;                                                    \
                att_v_##C x0 = ATT_V(C, c0), x1 = ATT_V(C, c0 + VL);                          \
                att_v_##C x2 = ATT_V(C, c0 + 2 * VL), x3 = ATT_V(C, c0 + 3 * VL);             \
                for (int64_t k = 0; k < K; k++) {                                             \
                    const C *br = b + k * ldb + n0, s0 = a0[k * ask];                         \
                    x0 += s0 * ATT_V(C, br);                                                  \
                    x1 += s0 * ATT_V(C, br + VL);                                             \
                    x2 += s0 * ATT_V(C, br + 2 * VL);                                         \
                    x3 += s0 * ATT_V(C, br + 3 * VL);                                         \
                }                                                                             \
                ATT_V(C, c0) = x0;                                                            \
                ATT_V(C, c0 + VL) = x1;                                                       \
                ATT_V(C, c0 + 2 * VL) = x2;                                                   \
                ATT_V(C, c0 + 3 * VL) = x3;                                                   \
            }                                                                                 \
        }                                                                                     \
        for (; n0 + VL <= N; n0 += VL)                                                        \
            for (int64_t m = 0; m < M; m++) {                                                 \
                C *c0 = c + m * ldc + n0;                                                     \
                const C *a0 = a + m * lda;                                                    \
                att_v_##C x0 = ATT_V(C, c0);                                                  \
                for (int64_t k = 0; k < K; k++)                                               \
                    x0 += a0[k * ask] * ATT_V(C, b + k * ldb + n0);                           \
                ATT_V(C, c0) = x0;                                                            \
            }                                                                                 \
        if (n0 < N)                                                                           \
            for (int64_t m = 0; m < M; m++)                                                   \
                for (int64_t k = 0; k < K; k++) {                                             \
                    const C s0 = a[m * lda + k * ask], *br = b + k * ldb;                     \
                    for (int64_t n = n0; n < N; n++)                                          \
                        c[m * ldc + n] += s0 * br[n];                                         \
                }                                                                             \
    }
DEFINE_GEMM(float)
DEFINE_GEMM(double)

/* ---- forward ---------------------------------------------------------------------------- */

/* Scores are computed transposed, st [keys, queries] = k qs^T, so the online softmax runs
 * down the columns: the ATT_BQ queries of a tile are the vector lanes, and the maxima and
 * sums need no horizontal reduction. Only q is transposed (once per unit); k and v rows
 * are copied as they lie. */
#define DEFINE_FORWARD(name, id, T, C)                                                        \
    CPU_CLONES static void att_forward_##name(void *ctx, int64_t begin, int64_t end)         \
    {                                                                                         \
        struct att_job *j = ctx;                                                              \
        const int64_t L = j->L, S = j->S, E = j->E, Ev = j->Ev;                               \
        const int64_t nqb = (L + ATT_BQ - 1) / ATT_BQ;                                        \
        /* qt [E, BQ], kb [BK, E], vb [BK, Ev], st [BK, BQ], acc [BQ, Ev]; per query: m, l,  \
         * ms (the max subtracted), corr (the rescale), sum */                               \
        size_t n = (size_t)(E * ATT_BQ + ATT_BK * E + ATT_BK * Ev + ATT_BK * ATT_BQ +         \
                            ATT_BQ * Ev + 5 * ATT_BQ);                                        \
        C *qt = malloc(n * sizeof(C));                                                        \
        if (!qt) {                                                                            \
            __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);                                \
            return;                                                                           \
        }                                                                                     \
        C *kb = qt + E * ATT_BQ, *vb = kb + ATT_BK * E, *st = vb + ATT_BK * Ev;               \
        C *acc = st + ATT_BK * ATT_BQ, *m = acc + ATT_BQ * Ev, *l = m + ATT_BQ;               \
        C *ms = l + ATT_BQ, *corr = ms + ATT_BQ, *sum = corr + ATT_BQ;                        \
        for (int64_t u = begin; u < end; u++) {                                               \
            const int64_t b = u / nqb, i0 = (u % nqb) * ATT_BQ;                               \
            const int64_t nq = L - i0 < ATT_BQ ? L - i0 : ATT_BQ;                             \
            /* causal: the tile's last query sees keys up to i0 + nq - 1 */                 \
            const int64_t jend = j->causal && i0 + nq < S ? i0 + nq : S;                      \
            const struct att_rows qr = att_rows_of(j, &j->q, b), kr = att_rows_of(j, &j->k, b); \
            const struct att_rows vr = att_rows_of(j, &j->v, b);                              \
            const struct att_rows mr = j->has_mask ? att_rows_of(j, &j->mask, b) : qr;        \
            att_load_cols_##name(qr, i0, nq, E, (C)j->scale, qt);                             \
            memset(acc, 0, sizeof(C) * (size_t)(ATT_BQ * Ev));                                \
            for (int i = 0; i < ATT_BQ; i++) {                                                \
                m[i] = -INFINITY;                                                             \
                l[i] = 0;                                                                     \
            }                                                                                 \
            for (int64_t j0 = 0; j0 < jend; j0 += ATT_BK) {                                   \
                const int64_t nk = jend - j0 < ATT_BK ? jend - j0 : ATT_BK;                   \
                att_load_rows_##name(kr, j0, nk, E, (C)1, kb);                                \
                att_load_rows_##name(vr, j0, nk, Ev, (C)1, vb);                               \
                /* st [nk, BQ] = kb [nk, E] qt [E, BQ] */                                     \
                memset(st, 0, sizeof(C) * (size_t)(nk * ATT_BQ));                             \
                att_gemm_##C(nk, ATT_BQ, E, kb, E, 1, qt, ATT_BQ, st, ATT_BQ);                \
                att_mask_tile_##name(j, mr, i0, nq, j0, nk, st);                              \
                for (int i = 0; i < ATT_BQ; i++)                                              \
                    ms[i] = m[i];                                                             \
                for (int64_t t = 0; t < nk; t++) {                                            \
                    const C *s = st + t * ATT_BQ;                                             \
                    ATT_SIMD                                                                  \
                    for (int i = 0; i < ATT_BQ; i++)                                          \
                        ms[i] = s[i] > ms[i] ? s[i] : ms[i];                                  \
                }                                                                             \
                ATT_SIMD                                                                      \
                for (int i = 0; i < ATT_BQ; i++) {                                            \
                    const C mnew = ms[i];                                                     \
                    /* no key seen yet: exp(-inf - 0) = 0 keeps the column empty, not NaN */  \
                    ms[i] = mnew == -INFINITY ? 0 : mnew;                                     \
                    corr[i] = ATT_EXP(m[i] - ms[i]);                                          \
                    m[i] = mnew;                                                              \
                    sum[i] = 0;                                                               \
                }                                                                             \
                for (int64_t t = 0; t < nk; t++) {                                            \
                    C *s = st + t * ATT_BQ;                                                   \
                    ATT_SIMD                                                                  \
                    for (int i = 0; i < ATT_BQ; i++) {                                        \
                        s[i] = ATT_EXP(s[i] - ms[i]);                                         \
                        sum[i] += s[i];                                                       \
                    }                                                                         \
                }                                                                             \
                for (int64_t i = 0; i < nq; i++) {                                            \
                    l[i] = l[i] * corr[i] + sum[i];                                           \
                    if (corr[i] != 1) {                                                       \
                        C *a = acc + i * Ev;                                                  \
                        ATT_SIMD                                                              \
                        for (int64_t e = 0; e < Ev; e++)                                      \
                            a[e] *= corr[i];                                                  \
                    }                                                                         \
                    if (j->dropout_p > 0)                                                     \
                        att_dropout_##C(j, (uint64_t)((b * L + i0 + i) * S + j0), nk, st + i, \
                                        ATT_BQ);                                              \
                }                                                                             \
                /* acc [nq, Ev] += st^T [nq, nk] vb [nk, Ev] */                               \
                att_gemm_##C(nq, Ev, nk, st, 1, ATT_BQ, vb, Ev, acc, Ev);                     \
            }                                                                                 \
            T *o = (T *)j->out + (b * L + i0) * Ev;                                           \
            C *lse = (C *)j->lse + b * L + i0;                                                \
            for (int64_t i = 0; i < nq; i++) {                                                \
                /* a row that saw no key is NaN, as softmax over all -inf gives */            \
                const C inv = l[i] > 0 ? 1 / l[i] : (C)NAN;                                   \
                ATT_SIMD                                                                      \
                for (int64_t e = 0; e < Ev; e++)                                              \
                    weft_store_##name(o + i * Ev + e, acc[i * Ev + e] * inv);                 \
                lse[i] = l[i] > 0 ? m[i] + (C)log((double)l[i]) : (C)NAN;                     \
            }                                                                                 \
        }                                                                                     \
        free(qt);                                                                             \
    }
WEFT_FOR_FLOATING_DTYPES(DEFINE_FORWARD)

/* ---- backward --------------------------------------------------------------------------- */

/* Per batch-head: the scaled queries and grad_out both as rows and as transposed tiles,
 * D and the logsumexp, padded to whole tiles (padding: zero queries, lse and D 0, whose
 * columns give finite values that no product reads). Then per key block, for each query
 * tile that sees it, transposed like the forward: pt = k qs^T, dpt = v dO^T. */
#define DEFINE_BACKWARD(name, id, T, C)                                                       \
    CPU_CLONES static void att_backward_##name(void *ctx, int64_t begin, int64_t end)        \
    {                                                                                         \
        struct att_job *j = ctx;                                                              \
        const int64_t L = j->L, S = j->S, E = j->E, Ev = j->Ev;                               \
        const int64_t Lp = (L + ATT_BQ - 1) / ATT_BQ * ATT_BQ;                                \
        /* per batch-head: qs [L, E], qt [Lp/BQ][E, BQ], dos [L, Ev], dot [Lp/BQ][Ev, BQ],   \
         * dqa [L, E], D, lse [Lp]; per key block: kb [BK, E], vb [BK, Ev], dka [BK, E],      \
         * dva [BK, Ev], pt, dpt, zt (dropout factors) [BK, BQ] */                           \
        size_t n = (size_t)(L * E + Lp * E + L * Ev + Lp * Ev + L * E + 2 * Lp +              \
                            2 * ATT_BK * E + 2 * ATT_BK * Ev + 3 * ATT_BK * ATT_BQ);          \
        C *qs = malloc(n * sizeof(C));                                                        \
        if (!qs) {                                                                            \
            __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);                                \
            return;                                                                           \
        }                                                                                     \
        C *qt = qs + L * E, *dos = qt + Lp * E, *dot = dos + L * Ev, *dqa = dot + Lp * Ev;    \
        C *D = dqa + L * E, *lse = D + Lp, *kb = lse + Lp, *vb = kb + ATT_BK * E;              \
        C *dka = vb + ATT_BK * Ev, *dva = dka + ATT_BK * E, *pt = dva + ATT_BK * Ev;          \
        C *dpt = pt + ATT_BK * ATT_BQ, *zt = dpt + ATT_BK * ATT_BQ;                           \
        const C scale = (C)j->scale;                                                          \
        for (int64_t b = begin; b < end; b++) {                                               \
            const struct att_rows qr = att_rows_of(j, &j->q, b), kr = att_rows_of(j, &j->k, b); \
            const struct att_rows vr = att_rows_of(j, &j->v, b);                              \
            const struct att_rows gr = att_rows_of(j, &j->dout, b);                           \
            const struct att_rows mr = j->has_mask ? att_rows_of(j, &j->mask, b) : qr;        \
            att_load_rows_##name(qr, 0, L, E, scale, qs);                                     \
            att_load_rows_##name(gr, 0, L, Ev, (C)1, dos);                                    \
            for (int64_t i0 = 0; i0 < L; i0 += ATT_BQ) {                                      \
                const int64_t nq = L - i0 < ATT_BQ ? L - i0 : ATT_BQ;                         \
                att_load_cols_##name(qr, i0, nq, E, scale, qt + i0 * E);                      \
                att_load_cols_##name(gr, i0, nq, Ev, (C)1, dot + i0 * Ev);                    \
            }                                                                                 \
            memset(dqa, 0, sizeof(C) * (size_t)(L * E));                                      \
            memset(D, 0, sizeof(C) * (size_t)(2 * Lp)); /* D and lse */                       \
            const T *fo = (const T *)j->fout + b * L * Ev;                                    \
            const C *fl = (const C *)j->flse + b * L;                                         \
            for (int64_t i = 0; i < L; i++) {                                                 \
                C d = 0;                                                                      \
                ATT_SIMD_SUM(d)                                                               \
                for (int64_t e = 0; e < Ev; e++)                                              \
                    d += dos[i * Ev + e] * (C)weft_load_##name(fo + i * Ev + e);              \
                D[i] = d;                                                                     \
                lse[i] = fl[i];                                                               \
            }                                                                                 \
            for (int64_t j0 = 0; j0 < S; j0 += ATT_BK) {                                      \
                const int64_t nk = S - j0 < ATT_BK ? S - j0 : ATT_BK;                         \
                att_load_rows_##name(kr, j0, nk, E, (C)1, kb);                                \
                att_load_rows_##name(vr, j0, nk, Ev, (C)1, vb);                               \
                memset(dka, 0, sizeof(C) * (size_t)(nk * E));                                 \
                memset(dva, 0, sizeof(C) * (size_t)(nk * Ev));                                \
                /* causal: queries before j0 see none of these keys */                       \
                const int64_t ibeg = j->causal ? j0 / ATT_BQ * ATT_BQ : 0;                    \
                for (int64_t i0 = ibeg; i0 < L; i0 += ATT_BQ) {                               \
                    const int64_t nq = L - i0 < ATT_BQ ? L - i0 : ATT_BQ;                     \
                    /* pt [nk, BQ] = kb [nk, E] qt [E, BQ]; dpt = vb [nk, Ev] dot [Ev, BQ] */ \
                    memset(pt, 0, sizeof(C) * (size_t)(2 * ATT_BK * ATT_BQ)); /* and dpt */   \
                    att_gemm_##C(nk, ATT_BQ, E, kb, E, 1, qt + i0 * E, ATT_BQ, pt, ATT_BQ);   \
                    att_mask_tile_##name(j, mr, i0, nq, j0, nk, pt);                          \
                    att_gemm_##C(nk, ATT_BQ, Ev, vb, Ev, 1, dot + i0 * Ev, ATT_BQ, dpt, ATT_BQ); \
                    const C *li = lse + i0, *di = D + i0;                                     \
                    if (j->dropout_p > 0) {                                                   \
                        /* W = P Z and dP = dW Z, Z the forward's factors */                  \
                        for (int64_t t = 0; t < nk * ATT_BQ; t++)                             \
                            zt[t] = 1;                                                        \
                        for (int64_t i = 0; i < nq; i++)                                      \
                            att_dropout_##C(j, (uint64_t)((b * L + i0 + i) * S + j0), nk,     \
                                            zt + i, ATT_BQ);                                  \
                        for (int64_t t = 0; t < nk; t++) {                                    \
                            C *p = pt + t * ATT_BQ, *dp = dpt + t * ATT_BQ;                   \
                            const C *z = zt + t * ATT_BQ;                                     \
                            ATT_SIMD                                                          \
                            for (int i = 0; i < ATT_BQ; i++) {                                \
                                const C pv = ATT_EXP(p[i] - li[i]);                           \
                                dp[i] = pv * (dp[i] * z[i] - di[i]);                          \
                                p[i] = pv * z[i];                                             \
                            }                                                                 \
                        }                                                                     \
                    } else {                                                                  \
                        for (int64_t t = 0; t < nk; t++) {                                    \
                            C *p = pt + t * ATT_BQ, *dp = dpt + t * ATT_BQ;                   \
                            ATT_SIMD                                                          \
                            for (int i = 0; i < ATT_BQ; i++) {                                \
                                p[i] = ATT_EXP(p[i] - li[i]);                                 \
                                dp[i] = p[i] * (dp[i] - di[i]);                               \
                            }                                                                 \
                        }                                                                     \
                    }                                                                         \
                    /* dva [nk, Ev] += W [nk, nq] dO [nq, Ev]; dka [nk, E] += dS qs;          \
                     * dqa [nq, E] += dS^T kb */                                              \
                    att_gemm_##C(nk, Ev, nq, pt, ATT_BQ, 1, dos + i0 * Ev, Ev, dva, Ev);      \
                    att_gemm_##C(nk, E, nq, dpt, ATT_BQ, 1, qs + i0 * E, E, dka, E);          \
                    att_gemm_##C(nq, E, nk, dpt, 1, ATT_BQ, kb, E, dqa + i0 * E, E);          \
                }                                                                             \
                T *gk = (T *)j->dk + (b * S + j0) * E, *gv = (T *)j->dv + (b * S + j0) * Ev;  \
                ATT_SIMD                                                                      \
                for (int64_t t = 0; t < nk * E; t++)                                          \
                    weft_store_##name(gk + t, dka[t]);                                        \
                ATT_SIMD                                                                      \
                for (int64_t t = 0; t < nk * Ev; t++)                                         \
                    weft_store_##name(gv + t, dva[t]);                                        \
            }                                                                                 \
            T *gq = (T *)j->dq + b * L * E;                                                   \
            ATT_SIMD                                                                          \
            for (int64_t t = 0; t < L * E; t++)                                               \
                weft_store_##name(gq + t, dqa[t] * scale);                                    \
        }                                                                                     \
        free(qs);                                                                             \
    }
WEFT_FOR_FLOATING_DTYPES(DEFINE_BACKWARD)

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
