/* plugins/cuda/kernels_attention.cu: sdpa_flash and sdpa_flash_backward (weft/kernel.h),
 * FlashAttention on CUDA: the [L, S] matrix never exists.
 *
 * One thread per query row (forward, dQ) or key row (dK, dV), kRows rows per block; the
 * other side's rows are staged through shared memory a tile at a time, padded to HD
 * columns (the head dim rounded up to 32, 64 or 128, a template parameter) so that each
 * thread's rows and accumulators are register arrays indexed by unrolled constants.
 *  - forward: per key, the running maximum m and sum l of exp(s - m) rescale the row's
 *    accumulator when m grows (online softmax); causal blocks stop at their last
 *    visible key. out = acc / l, logsumexp = m + log l (NaN for a row with no key).
 *  - backward, two kernels and no atomics: dK and dV per key row over the query tiles
 *    (D = rowsum(dO * O) computed as each tile is staged), and dQ per query row over the
 *    key tiles; both recompute P = exp(s - logsumexp).
 * Dropout factors come from Philox per element (b * L + i) * S + j, as the cpu kernel
 * draws them. 16-bit floats compute in float, float64 in double. Offsets are int64; the
 * batch-heads loop over gridDim.y (at most 65535); shared memory is sized to stay under
 * the device's per-block limit. */
#include <math.h>

#include <weft/philox.h>

#include "cuda_dtypes.cuh"

namespace {

using namespace wc;

constexpr int kRows = 64;             /* threads per block, one row each */
constexpr int kMaxTile = 64;          /* rows of the other side per shared tile */
constexpr size_t kSmemBudget = 48 * 1024;

/* One operand: element (b, r, c) at base + boff(b) + r * rs + c * cs (elements). */
struct Operand {
    const void *base;
    int64_t bstride[WEFT_MAX_DIMS];
    int64_t rs, cs;
};

struct Geom {
    int nb;
    int64_t bshape[WEFT_MAX_DIMS];
    int64_t BH, L, S, E, Ev;
    double scale, dropout_p;
    bool causal, has_mask, mask_bool;
    unsigned long long seed, offset;
};

__device__ __forceinline__ int64_t boff(const Geom &g, const Operand &o, int64_t b)
{
    int64_t off = 0;
    for (int d = g.nb - 1; d >= 0; d--) {
        off += (b % g.bshape[d]) * o.bstride[d];
        b /= g.bshape[d];
    }
    return off;
}

template <typename D> __device__ __forceinline__ typename D::C at(const Operand &o, int64_t off)
{
    return D::load(static_cast<const typename D::S *>(o.base) + off);
}

/* The dropout factor of element idx: 1 / (1 - p) when kept, else 0 (weft/kernel.h). */
template <typename A> __device__ __forceinline__ A dropout_factor(const Geom &g, uint64_t idx)
{
    uint32_t w[4];
    weft_philox4x32(g.offset + idx / 4, g.seed, w);
    A u = sizeof(A) == 8 ? (A)((double)w[idx % 4] * (1.0 / 4294967296.0))
                         : (A)((float)(w[idx % 4] >> 8) * (1.0f / 16777216.0f));
    return u < (A)(1 - g.dropout_p) ? (A)(1 / (1 - g.dropout_p)) : (A)0;
}

/* The mask's effect on score s of (b, i, j): -inf where hidden, + the float mask. */
template <typename D, typename A>
__device__ __forceinline__ A masked(const Geom &g, const Operand &mk, int64_t moff, int64_t i,
                                    int64_t j, A s)
{
    if (g.causal && j > i)
        return -INFINITY;
    if (!g.has_mask)
        return s;
    int64_t off = moff + i * mk.rs + j * mk.cs;
    if (g.mask_bool)
        return static_cast<const uint8_t *>(mk.base)[off] ? s : (A)-INFINITY;
    return s + (A)at<D>(mk, off);
}

template <typename A> __device__ __forceinline__ A exp_(A x) { return exp(x); }
template <> __device__ __forceinline__ float exp_<float>(float x) { return expf(x); }

/* Stages rows [r0, r0 + n) of o (batch offset base) into tile [n, HD], times mul, zero
 * past cols. */
template <typename D, typename A, int HD>
__device__ __forceinline__ void stage(const Operand &o, int64_t base, int64_t r0, int n,
                                      int64_t cols, A mul, A *tile)
{
    for (int idx = threadIdx.x; idx < n * HD; idx += blockDim.x) {
        int r = idx / HD, c = idx % HD;
        tile[idx] = c < cols ? (A)at<D>(o, base + (r0 + r) * o.rs + c * o.cs) * mul : (A)0;
    }
}

/* ---- forward -------------------------------------------------------------------------------- */

template <typename D, typename A, int HD>
__global__ void __launch_bounds__(kRows)
    flash_fwd(Geom g, Operand q, Operand k, Operand v, Operand mk, typename D::S *out, A *lse,
              int tile)
{
    extern __shared__ __align__(16) unsigned char smem[];
    A *ks = reinterpret_cast<A *>(smem), *vs = ks + tile * HD;
    const int64_t i0 = (int64_t)blockIdx.x * kRows, i = i0 + threadIdx.x;
    const bool active = i < g.L;
    const int64_t jend = g.causal && i0 + kRows < g.S ? i0 + kRows : g.S;
    for (int64_t b = blockIdx.y; b < g.BH; b += gridDim.y) {
        const int64_t qo = boff(g, q, b), ko = boff(g, k, b), vo = boff(g, v, b);
        const int64_t mo = g.has_mask ? boff(g, mk, b) : 0;
        A qr[HD], acc[HD];
#pragma unroll
        for (int e = 0; e < HD; e++) {
            qr[e] = active && e < g.E ? (A)at<D>(q, qo + i * q.rs + e * q.cs) * (A)g.scale : (A)0;
            acc[e] = 0;
        }
        A m = -INFINITY, l = 0;
        for (int64_t j0 = 0; j0 < jend; j0 += tile) {
            const int n = (int)(jend - j0 < tile ? jend - j0 : tile);
            __syncthreads(); /* the previous tile is read by everyone */
            stage<D, A, HD>(k, ko, j0, n, g.E, (A)1, ks);
            stage<D, A, HD>(v, vo, j0, n, g.Ev, (A)1, vs);
            __syncthreads();
            if (!active)
                continue;
            for (int t = 0; t < n; t++) {
                const int64_t j = j0 + t;
                A s = 0;
#pragma unroll
                for (int e = 0; e < HD; e++)
                    s += qr[e] * ks[t * HD + e];
                s = masked<D, A>(g, mk, mo, i, j, s);
                if (s == (A)-INFINITY)
                    continue; /* weight 0 */
                if (s > m) {  /* a new maximum rescales what came before */
                    const A corr = exp_(m - s);
                    l *= corr;
#pragma unroll
                    for (int e = 0; e < HD; e++)
                        acc[e] *= corr;
                    m = s;
                }
                A p = exp_(s - m); /* NaN scores stay NaN */
                l += p;
                if (g.dropout_p > 0)
                    p *= dropout_factor<A>(g, (uint64_t)((b * g.L + i) * g.S + j));
#pragma unroll
                for (int e = 0; e < HD; e++)
                    acc[e] += p * vs[t * HD + e];
            }
        }
        if (active) {
            const A inv = l > 0 ? 1 / l : (A)NAN; /* no key seen: NaN, as the math path */
            typename D::S *o = out + (b * g.L + i) * g.Ev;
#pragma unroll
            for (int e = 0; e < HD; e++)
                if (e < g.Ev)
                    D::store(o + e, (typename D::C)(acc[e] * inv));
            lse[b * g.L + i] = l > 0 ? m + log(l) : (A)NAN;
        }
        __syncthreads();
    }
}

/* ---- backward -------------------------------------------------------------------------------- */

/* dK, dV: one thread per key row j, over the query tiles that can see it. */
template <typename D, typename A, int HD>
__global__ void __launch_bounds__(kRows)
    flash_bwd_kv(Geom g, Operand q, Operand k, Operand v, Operand mk, Operand dout,
                 const typename D::S *fout, const A *flse, typename D::S *dk, typename D::S *dv,
                 int tile)
{
    extern __shared__ __align__(16) unsigned char smem[];
    A *qs = reinterpret_cast<A *>(smem), *dos = qs + tile * HD, *ls = dos + tile * HD;
    A *Ds = ls + tile;
    const int64_t j0 = (int64_t)blockIdx.x * kRows, j = j0 + threadIdx.x;
    const bool active = j < g.S;
    /* causal: queries before j0 see none of the block's keys */
    const int64_t ibeg = g.causal ? j0 : 0;
    for (int64_t b = blockIdx.y; b < g.BH; b += gridDim.y) {
        const int64_t qo = boff(g, q, b), ko = boff(g, k, b), vo = boff(g, v, b);
        const int64_t go = boff(g, dout, b), mo = g.has_mask ? boff(g, mk, b) : 0;
        A kr[HD], vr[HD], gk[HD], gv[HD];
#pragma unroll
        for (int e = 0; e < HD; e++) {
            kr[e] = active && e < g.E ? (A)at<D>(k, ko + j * k.rs + e * k.cs) : (A)0;
            vr[e] = active && e < g.Ev ? (A)at<D>(v, vo + j * v.rs + e * v.cs) : (A)0;
            gk[e] = gv[e] = 0;
        }
        for (int64_t i0 = ibeg; i0 < g.L; i0 += tile) {
            const int n = (int)(g.L - i0 < tile ? g.L - i0 : tile);
            __syncthreads();
            stage<D, A, HD>(q, qo, i0, n, g.E, (A)g.scale, qs);
            stage<D, A, HD>(dout, go, i0, n, g.Ev, (A)1, dos);
            __syncthreads();
            /* D = rowsum(dO * O) and the logsumexp of the tile's rows */
            for (int r = threadIdx.x; r < n; r += blockDim.x) {
                const typename D::S *o = fout + (b * g.L + i0 + r) * g.Ev;
                A d = 0;
                for (int64_t e = 0; e < g.Ev; e++)
                    d += dos[r * HD + e] * (A)D::load(o + e);
                Ds[r] = d;
                ls[r] = flse[b * g.L + i0 + r];
            }
            __syncthreads();
            if (!active)
                continue;
            for (int r = 0; r < n; r++) {
                const int64_t i = i0 + r;
                A s = 0, dp = 0;
#pragma unroll
                for (int e = 0; e < HD; e++) {
                    s += qs[r * HD + e] * kr[e];
                    dp += dos[r * HD + e] * vr[e];
                }
                const A p = exp_(masked<D, A>(g, mk, mo, i, j, s) - ls[r]);
                const A z = g.dropout_p > 0
                                ? dropout_factor<A>(g, (uint64_t)((b * g.L + i) * g.S + j))
                                : (A)1;
                const A ds = p * (dp * z - Ds[r]);
#pragma unroll
                for (int e = 0; e < HD; e++) {
                    gv[e] += p * z * dos[r * HD + e];
                    gk[e] += ds * qs[r * HD + e]; /* qs holds scale * q */
                }
            }
        }
        if (active) {
            typename D::S *ok = dk + (b * g.S + j) * g.E, *ov = dv + (b * g.S + j) * g.Ev;
#pragma unroll
            for (int e = 0; e < HD; e++) {
                if (e < g.E)
                    D::store(ok + e, (typename D::C)gk[e]);
                if (e < g.Ev)
                    D::store(ov + e, (typename D::C)gv[e]);
            }
        }
        __syncthreads();
    }
}

/* dQ: one thread per query row i, over the key tiles it can see. */
template <typename D, typename A, int HD>
__global__ void __launch_bounds__(kRows)
    flash_bwd_q(Geom g, Operand q, Operand k, Operand v, Operand mk, Operand dout,
                const typename D::S *fout, const A *flse, typename D::S *dq, int tile)
{
    extern __shared__ __align__(16) unsigned char smem[];
    A *ks = reinterpret_cast<A *>(smem), *vs = ks + tile * HD;
    const int64_t i0 = (int64_t)blockIdx.x * kRows, i = i0 + threadIdx.x;
    const bool active = i < g.L;
    const int64_t jend = g.causal && i0 + kRows < g.S ? i0 + kRows : g.S;
    for (int64_t b = blockIdx.y; b < g.BH; b += gridDim.y) {
        const int64_t qo = boff(g, q, b), ko = boff(g, k, b), vo = boff(g, v, b);
        const int64_t go = boff(g, dout, b), mo = g.has_mask ? boff(g, mk, b) : 0;
        A qr[HD], gr[HD], gq[HD], Di = 0, li = 0;
#pragma unroll
        for (int e = 0; e < HD; e++) {
            qr[e] = active && e < g.E ? (A)at<D>(q, qo + i * q.rs + e * q.cs) * (A)g.scale : (A)0;
            gr[e] = active && e < g.Ev ? (A)at<D>(dout, go + i * dout.rs + e * dout.cs) : (A)0;
            gq[e] = 0;
            if (active && e < g.Ev)
                Di += gr[e] * (A)D::load(fout + (b * g.L + i) * g.Ev + e);
        }
        if (active)
            li = flse[b * g.L + i];
        for (int64_t j0 = 0; j0 < jend; j0 += tile) {
            const int n = (int)(jend - j0 < tile ? jend - j0 : tile);
            __syncthreads();
            stage<D, A, HD>(k, ko, j0, n, g.E, (A)1, ks);
            stage<D, A, HD>(v, vo, j0, n, g.Ev, (A)1, vs);
            __syncthreads();
            if (!active)
                continue;
            for (int t = 0; t < n; t++) {
                const int64_t j = j0 + t;
                A s = 0, dp = 0;
#pragma unroll
                for (int e = 0; e < HD; e++) {
                    s += qr[e] * ks[t * HD + e];
                    dp += gr[e] * vs[t * HD + e];
                }
                const A p = exp_(masked<D, A>(g, mk, mo, i, j, s) - li);
                const A z = g.dropout_p > 0
                                ? dropout_factor<A>(g, (uint64_t)((b * g.L + i) * g.S + j))
                                : (A)1;
                const A ds = p * (dp * z - Di);
#pragma unroll
                for (int e = 0; e < HD; e++)
                    gq[e] += ds * ks[t * HD + e];
            }
        }
        if (active) {
            typename D::S *o = dq + (b * g.L + i) * g.E;
#pragma unroll
            for (int e = 0; e < HD; e++)
                if (e < g.E)
                    D::store(o + e, (typename D::C)(gq[e] * (A)g.scale));
        }
        __syncthreads();
    }
}

/* ---- host side ------------------------------------------------------------------------------ */

static void operand_of(Operand *o, const weft_tensor *t, int nb)
{
    o->base = weft_tensor_data(t);
    for (int d = 0; d < WEFT_MAX_DIMS; d++)
        o->bstride[d] = d < nb && t->shape[d] != 1 ? t->stride[d] : 0;
    o->rs = t->stride[nb];
    o->cs = t->stride[nb + 1];
}

static bool same_batch(const weft_tensor *t, const weft_tensor *q)
{
    if (t->ndim != q->ndim)
        return false;
    for (int d = 0; d < q->ndim - 2; d++)
        if (t->shape[d] != q->shape[d])
            return false;
    return true;
}

/* Checks the call against the contract and fills g and the operands. */
static int prepare(const struct weft_op_call *c, const char *op, Geom *g, Operand *q, Operand *k,
                   Operand *v, Operand *mk)
{
    if (!c->params || c->params_size != sizeof(struct weft_sdpa_kernel_params))
        return weft_error_set(WEFT_ERR_RUNTIME, "%s: expected struct weft_sdpa_kernel_params", op);
    const struct weft_sdpa_kernel_params *p = static_cast<const weft_sdpa_kernel_params *>(c->params);
    const weft_tensor *tq = c->in[0], *tk = c->in[1], *tv = c->in[2];
    if (c->nin < 3 || !tq || !tk || !tv || tq->ndim < 2 || !same_batch(tk, tq) ||
        !same_batch(tv, tq) || tk->dtype != tq->dtype || tv->dtype != tq->dtype)
        return weft_error_set(WEFT_ERR_RUNTIME, "%s: expected query, key and value of one dtype "
                                                "with the same batch dims", op);
    const int nd = tq->ndim;
    *g = Geom{};
    g->nb = nd - 2;
    g->BH = 1;
    for (int d = 0; d < g->nb; d++) {
        g->bshape[d] = tq->shape[d];
        g->BH *= tq->shape[d];
    }
    g->L = tq->shape[nd - 2];
    g->E = tq->shape[nd - 1];
    g->S = tk->shape[nd - 2];
    g->Ev = tv->shape[nd - 1];
    if (tk->shape[nd - 1] != g->E || tv->shape[nd - 2] != g->S)
        return weft_error_set(WEFT_ERR_RUNTIME, "%s: expected query [..., L, E], key [..., S, E] "
                                                "and value [..., S, Ev]", op);
    if (!(p->dropout_p >= 0 && p->dropout_p < 1))
        return weft_error_set(WEFT_ERR_VALUE, "%s: expected 0 <= dropout_p < 1, got %g", op,
                              p->dropout_p);
    g->scale = p->scale;
    g->dropout_p = p->dropout_p;
    g->causal = p->is_causal;
    g->seed = p->seed;
    g->offset = p->offset;
    operand_of(q, tq, g->nb);
    operand_of(k, tk, g->nb);
    operand_of(v, tv, g->nb);
    *mk = Operand{};
    if (p->mask) {
        const weft_tensor *m = p->mask;
        if (!same_batch(m, tq) || m->shape[nd - 2] != g->L || m->shape[nd - 1] != g->S ||
            (m->dtype != WEFT_BOOL && m->dtype != tq->dtype))
            return weft_error_set(WEFT_ERR_RUNTIME, "%s: expected attn_mask [..., L, S] of bool "
                                                    "or the query's dtype, expanded to the "
                                                    "query's batch dims", op);
        operand_of(mk, m, g->nb);
        g->has_mask = true;
        g->mask_bool = m->dtype == WEFT_BOOL;
    }
    return 0;
}

static bool contiguous_of(const weft_tensor *t, int64_t numel, enum weft_dtype dt)
{
    return t && weft_tensor_is_contiguous(t) && weft_tensor_numel(t) == numel && t->dtype == dt;
}

/* Rows of the other side per shared tile: as many as fit `per_row` bytes each under the
 * budget and the device's per-block limit, at most kMaxTile. */
static int tile_rows(int dev, size_t per_row, size_t extra_per_row, int *tile, size_t *bytes)
{
    int limit = 0;
    if (CUDA_CHECK(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlock, dev)) != 0)
        return weft_error_code();
    size_t budget = (size_t)limit < kSmemBudget ? (size_t)limit : kSmemBudget;
    size_t rows = budget / (per_row + extra_per_row);
    if (rows < 1)
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED,
                              "sdpa_flash: a %zu-byte tile row exceeds the device's shared memory",
                              per_row + extra_per_row);
    *tile = (int)(rows < (size_t)kMaxTile ? rows : (size_t)kMaxTile);
    *bytes = (size_t)*tile * (per_row + extra_per_row);
    return 0;
}

static dim3 grid_of(int64_t rows, int64_t BH)
{
    int64_t x = (rows + kRows - 1) / kRows;
    return dim3((unsigned)x, (unsigned)(BH < 65535 ? BH : 65535));
}

template <typename D, typename A, int HD>
static int forward(const struct weft_op_call *c, const Geom &g, const Operand &q,
                   const Operand &k, const Operand &v, const Operand &mk, int dev,
                   cudaStream_t stream)
{
    int tile;
    size_t bytes;
    if (tile_rows(dev, 2 * HD * sizeof(A), 0, &tile, &bytes) != 0)
        return weft_error_code();
    flash_fwd<D, A, HD><<<grid_of(g.L, g.BH), kRows, bytes, stream>>>(
        g, q, k, v, mk, static_cast<typename D::S *>(weft_tensor_data(c->out[0])),
        static_cast<A *>(weft_tensor_data(c->out[1])), tile);
    return CUDA_CHECK_LAUNCH("flash_fwd");
}

template <typename D, typename A, int HD>
static int backward(const struct weft_op_call *c, const Geom &g, const Operand &q,
                    const Operand &k, const Operand &v, const Operand &mk, int dev,
                    cudaStream_t stream)
{
    const struct weft_sdpa_kernel_params *p = static_cast<const weft_sdpa_kernel_params *>(c->params);
    Operand dout;
    operand_of(&dout, c->in[3], g.nb);
    typedef typename D::S S;
    const S *fout = static_cast<const S *>(weft_tensor_data(p->out));
    const A *flse = static_cast<const A *>(weft_tensor_data(p->logsumexp));
    int tile;
    size_t bytes;
    if (tile_rows(dev, 2 * HD * sizeof(A), 2 * sizeof(A), &tile, &bytes) != 0)
        return weft_error_code();
    flash_bwd_kv<D, A, HD><<<grid_of(g.S, g.BH), kRows, bytes, stream>>>(
        g, q, k, v, mk, dout, fout, flse, static_cast<S *>(weft_tensor_data(c->out[1])),
        static_cast<S *>(weft_tensor_data(p->grad_value)), tile);
    if (CUDA_CHECK_LAUNCH("flash_bwd_kv") != 0)
        return weft_error_code();
    if (tile_rows(dev, 2 * HD * sizeof(A), 0, &tile, &bytes) != 0)
        return weft_error_code();
    flash_bwd_q<D, A, HD><<<grid_of(g.L, g.BH), kRows, bytes, stream>>>(
        g, q, k, v, mk, dout, fout, flse, static_cast<S *>(weft_tensor_data(c->out[0])), tile);
    return CUDA_CHECK_LAUNCH("flash_bwd_q");
}

/* The accumulation type of dtype D: double for float64, else float. */
template <typename D> struct Acc {
    typedef float T;
};
template <> struct Acc<Plain<double>> {
    typedef double T;
};

template <typename D>
static int run(const struct weft_op_call *c, bool bwd, const Geom &g, const Operand &q,
               const Operand &k, const Operand &v, const Operand &mk, int dev,
               cudaStream_t stream)
{
    typedef typename Acc<D>::T A;
    const int64_t hd = g.E > g.Ev ? g.E : g.Ev;
#define WC_SDPA_HD(HD)                                                                        \
    if (hd <= HD)                                                                             \
        return bwd ? backward<D, A, HD>(c, g, q, k, v, mk, dev, stream)                       \
                   : forward<D, A, HD>(c, g, q, k, v, mk, dev, stream);
    WC_SDPA_HD(32)
    WC_SDPA_HD(64)
    WC_SDPA_HD(128)
#undef WC_SDPA_HD
    return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED,
                          "\"%s\" on cuda supports head dims up to 128, got E=%lld and Ev=%lld",
                          weft_op_name(c->op), (long long)g.E, (long long)g.Ev);
}

static int sdpa_op(const struct weft_op_call *c, bool bwd)
{
    const char *op = bwd ? "sdpa_flash_backward" : "sdpa_flash";
    Geom g;
    Operand q, k, v, mk;
    if (prepare(c, op, &g, &q, &k, &v, &mk) != 0)
        return weft_error_code();
    const enum weft_dtype dt = c->in[0]->dtype;
    const enum weft_dtype adt = dt == WEFT_F64 ? WEFT_F64 : WEFT_F32;
    if (!bwd) {
        if (c->nout != 2 || !contiguous_of(c->out[0], g.BH * g.L * g.Ev, dt) ||
            !contiguous_of(c->out[1], g.BH * g.L, adt))
            return weft_error_set(WEFT_ERR_RUNTIME, "sdpa_flash: expected contiguous out [..., "
                                                    "L, Ev] and logsumexp [..., L] of %s",
                                  weft_dtype_name(adt));
    } else {
        const struct weft_sdpa_kernel_params *p =
            static_cast<const weft_sdpa_kernel_params *>(c->params);
        const weft_tensor *d = c->nin == 4 ? c->in[3] : nullptr;
        if (!d || !same_batch(d, c->in[0]) || d->dtype != dt || d->shape[d->ndim - 2] != g.L ||
            d->shape[d->ndim - 1] != g.Ev || c->nout != 2 ||
            !contiguous_of(c->out[0], g.BH * g.L * g.E, dt) ||
            !contiguous_of(c->out[1], g.BH * g.S * g.E, dt) ||
            !contiguous_of(p->grad_value, g.BH * g.S * g.Ev, dt) ||
            !contiguous_of(p->out, g.BH * g.L * g.Ev, dt) ||
            !contiguous_of(p->logsumexp, g.BH * g.L, adt))
            return weft_error_set(WEFT_ERR_RUNTIME, "sdpa_flash_backward: expected grad_out "
                                                    "[..., L, Ev] and contiguous grad_q, grad_k, "
                                                    "grad_value, out and logsumexp");
    }
    if (g.BH == 0 || g.L == 0 || g.Ev == 0 || (bwd && g.S == 0))
        return 0; /* the front end sends empty sizes to the composite */
    const int dev = c->out[0]->device.index;
    if (cuda_set_device(dev) != 0)
        return weft_error_code();
    cudaStream_t stream = cuda_current_stream(dev);
    switch (dt) {
#define WC_SDPA_CASE(E, D)                                                                    \
    case E:                                                                                   \
        return run<D>(c, bwd, g, q, k, v, mk, dev, stream);
        WC_FLOATING_DTYPES(WC_SDPA_CASE)
#undef WC_SDPA_CASE
    default:
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "\"%s\" not implemented for '%s' on cuda",
                              op, weft_dtype_torch_name(dt));
    }
}

static int sdpa_forward_op(const struct weft_op_call *c) { return sdpa_op(c, false); }
static int sdpa_backward_op(const struct weft_op_call *c) { return sdpa_op(c, true); }

} // namespace

extern "C" const struct weft_kernel_entry cuda_attention_kernels[] = {
    {-1, WEFT_OP_SDPA_FLASH_NAME, WEFT_DTYPES_FLOATING, sdpa_forward_op},
    {-1, WEFT_OP_SDPA_FLASH_BACKWARD_NAME, WEFT_DTYPES_FLOATING, sdpa_backward_op},
    {0, nullptr, 0, nullptr},
};
