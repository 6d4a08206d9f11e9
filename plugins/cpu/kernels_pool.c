/* plugins/cpu/kernels_pool.c: 2-d max and average pooling and their backward passes.
 *
 * Every kernel works one (image, channel) plane at a time, so planes run in parallel
 * and no two threads write the same pixel. Windows follow PyTorch's CPU kernels
 * (aten/src/ATen/native/cpu/{Max,Avg}PoolKernel.cpp) exactly, so values, indices and
 * divisors agree, padding and ceil_mode included. Backward passes accumulate in the
 * compute type: 16-bit floats sum in a float buffer and are rounded once. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define POOL_X86 1
#endif

struct pool_geom {
    int64_t kh, kw, sh, sw, ph, pw, dh, dw;
    int64_t H, W, OH, OW;
    bool count_include_pad;
    int64_t divisor_override;
};

/* image: the [N, C, H, W] side of the call; pooled: the [N, C, OH, OW] side. */
static struct pool_geom geom_of(const struct weft_op_call *call, const weft_tensor *image,
                                const weft_tensor *pooled)
{
    const int64_t *k = call->ints;
    return (struct pool_geom){k[0], k[1], k[2], k[3], k[4], k[5], k[6], k[7],
                              image->shape[2], image->shape[3], pooled->shape[2], pooled->shape[3],
                              k[8] != 0, k[9]};
}

/* An average-pooling window clipped to the image, and its divisor. */
struct avg_window {
    int64_t y0, y1, x0, x1;
    double divisor;
};

static struct avg_window avg_window(const struct pool_geom *g, int64_t oy, int64_t ox)
{
    int64_t y0 = oy * g->sh - g->ph, x0 = ox * g->sw - g->pw;
    int64_t y1 = y0 + g->kh < g->H + g->ph ? y0 + g->kh : g->H + g->ph;
    int64_t x1 = x0 + g->kw < g->W + g->pw ? x0 + g->kw : g->W + g->pw;
    int64_t pool_size = (y1 - y0) * (x1 - x0);
    struct avg_window w = {y0 < 0 ? 0 : y0, y1 > g->H ? g->H : y1, x0 < 0 ? 0 : x0,
                           x1 > g->W ? g->W : x1, 0};
    if (g->divisor_override > 0)
        w.divisor = (double)g->divisor_override;
    else if (g->count_include_pad)
        w.divisor = (double)pool_size;
    else
        w.divisor = (double)((w.y1 - w.y0) * (w.x1 - w.x0));
    return w;
}

/* First in-image tap of a max-pooling window along one axis, and the end. */
static void max_span(int64_t o, int64_t s, int64_t p, int64_t k, int64_t d, int64_t size,
                     int64_t *start, int64_t *end)
{
    int64_t a = o * s - p, b = a + (k - 1) * d + 1;
    *end = b < size ? b : size;
    while (a < 0)
        a += d;
    *start = a;
}

#define CPU_KERNEL_INC "pool_planes.inc"
#include "each_floating_dtype.inc"
#undef CPU_KERNEL_INC

/* ---- float32 max pooling, eight outputs at a time (AVX2) ------------------------------------
 * The general loop's rule lane by lane: a tap replaces the running maximum when it is
 * greater or NaN, taps in the same order (rows, then columns), so values and indices agree
 * bit for bit with max_cols (first maximum, last NaN, -0 against 0 the first). Outputs
 * whose window columns all lie inside the image run here, eight at a time, a row's short
 * tail as one masked block; windows past the left or right edge (padding, ceil_mode) take
 * max_cols. Indices are built in 32 bits (the plane has fewer than 2^31 pixels) and
 * widened on store. On 64x32x28x28, one thread, loaded machine: 2x2 stride 2 from 2.4-2.6
 * to 1.1-1.8 ms, 3x3 stride 1 padding 1 from 35-40 to 6.9 ms.
 * x: [H, W] rows sy apart, columns contiguous; y, idx: [OH, OW]. */
#ifdef POOL_X86
#define POOL_AVX2 __attribute__((target("avx2")))

/* x[lane * sw] for the eight lanes; lanes holds lane * sw. Stride 2 deinterleaves two
 * loads: the odd lanes of x[-1 .. 14] where x[-1] is in the row (left > 0), else the even
 * lanes of x[0 .. 15] (the caller keeps x[15] inside the row then). */
POOL_AVX2 static inline __m256 taps8(const float *x, int64_t sw, __m256i lanes, int64_t left)
{
    if (sw == 1)
        return _mm256_loadu_ps(x);
    if (sw == 2) {
        __m256 v = left > 0
                       ? _mm256_shuffle_ps(_mm256_loadu_ps(x - 1), _mm256_loadu_ps(x + 7), 0xDD)
                       : _mm256_shuffle_ps(_mm256_loadu_ps(x), _mm256_loadu_ps(x + 8), 0x88);
        /* a0 a2 b0 b2 | a4 a6 b4 b6 -> a0 a2 a4 a6 b0 b2 b4 b6 */
        return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(v), 0xD8));
    }
    return _mm256_i32gather_ps(x, lanes, 4);
}

/* taps8 for a block whose lanes from some n on are not outputs: only row elements (column
 * < W; x is at column col) are read, the rest load as 0 into lanes that are dropped. */
POOL_AVX2 static inline __m256 taps8_masked(const float *x, int64_t sw, __m256i lanes,
                                            int64_t col, int64_t W)
{
    const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
#define ROW_MASK(from) _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(W - (from))), iota)
    if (sw == 1)
        return _mm256_maskload_ps(x, ROW_MASK(col));
    if (sw == 2) {
        __m256 v = col > 0 ? _mm256_shuffle_ps(_mm256_maskload_ps(x - 1, ROW_MASK(col - 1)),
                                               _mm256_maskload_ps(x + 7, ROW_MASK(col + 7)), 0xDD)
                           : _mm256_shuffle_ps(_mm256_maskload_ps(x, ROW_MASK(col)),
                                               _mm256_maskload_ps(x + 8, ROW_MASK(col + 8)), 0x88);
        return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(v), 0xD8));
    }
    __m256 in_row = _mm256_castsi256_ps(
        _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(W - col)), lanes));
    return _mm256_mask_i32gather_ps(_mm256_setzero_ps(), x, lanes, in_row, 4);
#undef ROW_MASK
}

/* Whether the block of outputs [ox, ox + 8) of one row can run as a vector: every tap
 * column inside the row, with what taps8 reads. */
static inline bool block_inside(const struct pool_geom *g, int64_t ox)
{
    int64_t x0 = ox * g->sw - g->pw, last = x0 + 7 * g->sw + (g->kw - 1) * g->dw;
    return ox + 8 <= g->OW && x0 >= 0 && last < g->W && (g->sw != 2 || x0 > 0 || g->W >= 16);
}

/* How many outputs from ox on (at most 8) a masked block can take: their windows start
 * in the row (x0 >= 0) and end in it. */
static inline int64_t tail_lanes(const struct pool_geom *g, int64_t ox)
{
    if (ox * g->sw - g->pw < 0)
        return 0;
    int64_t n = 0;
    while (n < 8 && ox + n < g->OW && (ox + n) * g->sw - g->pw + (g->kw - 1) * g->dw < g->W)
        n++;
    return n;
}

/* PyTorch's rule for one tap v at indices here: it replaces the maximum when greater or
 * NaN, lane by lane. */
POOL_AVX2 static inline void take_max8(__m256 v, __m256i here, __m256 *best, __m256i *at)
{
    __m256 take = _mm256_or_ps(_mm256_cmp_ps(v, *best, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    *best = _mm256_blendv_ps(*best, v, take);
    *at = _mm256_castps_si256(
        _mm256_blendv_ps(_mm256_castsi256_ps(*at), _mm256_castsi256_ps(here), take));
}

/* Eight outputs and their int64 indices at y and idx, or the first n of them (n < 8). */
POOL_AVX2 static inline void store8(float *y, int64_t *idx, __m256 best, __m256i at, int64_t n)
{
    __m256i i0 = _mm256_cvtepi32_epi64(_mm256_castsi256_si128(at)),
            i1 = _mm256_cvtepi32_epi64(_mm256_extracti128_si256(at, 1));
    if (n == 8) {
        _mm256_storeu_ps(y, best);
        _mm256_storeu_si256((__m256i *)idx, i0);
        _mm256_storeu_si256((__m256i *)(idx + 4), i1);
        return;
    }
    const __m256i keep = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n),
                                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    _mm256_maskstore_ps(y, keep, best);
    _mm256_maskstore_epi64((long long *)idx, _mm256_cvtepi32_epi64(_mm256_castsi256_si128(keep)),
                           i0);
    _mm256_maskstore_epi64((long long *)(idx + 4),
                           _mm256_cvtepi32_epi64(_mm256_extracti128_si256(keep, 1)), i1);
}

/* Outputs [ox, ox + n) of output row oy (window rows [y0, y1)): n is 8 for a block that
 * block_inside allows; below 8 (a row's tail) the loads and stores are masked, and every
 * tap of those n outputs must lie inside the row. */
POOL_AVX2 static void max_block8(const float *x, int64_t sy, float *yrow, int64_t *irow,
                                 const struct pool_geom *g, int64_t y0, int64_t y1, int64_t ox,
                                 __m256i lanes, int64_t n)
{
    const int64_t W = g->W, x0 = ox * g->sw - g->pw;
    __m256 best = _mm256_set1_ps(-INFINITY);
    __m256i at = y0 < y1 ? _mm256_add_epi32(_mm256_set1_epi32((int)(y0 * W + x0)), lanes)
                         : _mm256_set1_epi32(-1);
    for (int64_t r = y0; r < y1; r += g->dh)
        for (int64_t c = x0; c <= x0 + (g->kw - 1) * g->dw; c += g->dw) {
            __m256 v = n == 8 ? taps8(x + r * sy + c, g->sw, lanes, c)
                              : taps8_masked(x + r * sy + c, g->sw, lanes, c, W);
            take_max8(v, _mm256_add_epi32(_mm256_set1_epi32((int)(r * W + c)), lanes), &best,
                      &at);
        }
    store8(yrow + ox, irow + ox, best, at, n);
}

POOL_AVX2 static void max_plane_f32_avx2(const float *x, int64_t sy, float *y, int64_t *idx,
                                         const struct pool_geom *g)
{
    const int64_t first = (g->pw + g->sw - 1) / g->sw; /* the first window starting >= 0 */
    const __m256i lanes = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                             _mm256_set1_epi32((int)g->sw));
    for (int64_t oy = 0; oy < g->OH; oy++) {
        int64_t y0, y1;
        max_span(oy, g->sh, g->ph, g->kh, g->dh, g->H, &y0, &y1);
        float *yrow = y + oy * g->OW;
        int64_t *irow = idx + oy * g->OW, ox = first < g->OW ? first : g->OW;
        max_cols_f32(x, sy, 1, y, idx, g, oy, y0, y1, 0, ox);
        int64_t start = ox;
        for (; block_inside(g, ox); ox += 8)
            max_block8(x, sy, yrow, irow, g, y0, y1, ox, lanes, 8);
        /* the rest as one more block ending where the vector part may end, overlapping
         * the last (its outputs come out the same), when there was a block before it */
        int64_t end = ox;
        while (end < g->OW && block_inside(g, end + 1 - 8))
            end++;
        if (end > ox && ox > start) {
            max_block8(x, sy, yrow, irow, g, y0, y1, end - 8, lanes, 8);
            ox = end;
        }
        /* a short row, or what is left: masked blocks while the windows lie in the row
         * (a ceil_mode window past the edge takes the scalar loop) */
        for (int64_t n; (n = tail_lanes(g, ox)) > 0; ox += n)
            max_block8(x, sy, yrow, irow, g, y0, y1, ox, lanes, n);
        max_cols_f32(x, sy, 1, y, idx, g, oy, y0, y1, ox, g->OW);
    }
}

/* Even and odd lanes of the sixteen floats a:b, in order (a 2-wide stride-2 window's left
 * and right taps). */
POOL_AVX2 static inline void deinterleave8(__m256 a, __m256 b, __m256 *even, __m256 *odd)
{
    *even = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xD8));
    *odd = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xDD)), 0xD8));
}

/* 2x2 windows at stride 2 without padding or dilation, each inside the plane (the MNIST
 * CNN's pools). On its rows of 14 and 7 outputs the general body's per-row set-up (spans,
 * block checks, the tail search) cost more than the arithmetic. The rule is the same:
 * taps in row-major order, the first tap's index to start, a tap replacing the maximum
 * when greater or NaN. A row's last OW % 8 outputs are one masked block. */
POOL_AVX2 static void max_plane_2x2s2_f32_avx2(const float *x, int64_t sy, float *y, int64_t *idx,
                                               const struct pool_geom *g)
{
    const int64_t W = g->W, OW = g->OW;
    const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i even_cols = _mm256_add_epi32(iota, iota);
    const int tail = (int)(OW % 8);
    const __m256i load_a = _mm256_cmpgt_epi32(_mm256_set1_epi32(2 * tail), iota);
    const __m256i load_b = _mm256_cmpgt_epi32(_mm256_set1_epi32(2 * tail - 8), iota);
    const __m256i right = _mm256_set1_epi32(1), below = _mm256_set1_epi32((int)W);
    for (int64_t oy = 0; oy < g->OH; oy++) {
        const float *r0 = x + 2 * oy * sy, *r1 = r0 + sy;
        float *yrow = y + oy * OW;
        int64_t *irow = idx + oy * OW;
        for (int64_t ox = 0; ox < OW; ox += 8) {
            const bool full = ox + 8 <= OW;
            const float *p0 = r0 + 2 * ox, *p1 = r1 + 2 * ox;
            __m256 a0 = full ? _mm256_loadu_ps(p0) : _mm256_maskload_ps(p0, load_a);
            __m256 b0 = full ? _mm256_loadu_ps(p0 + 8) : _mm256_maskload_ps(p0 + 8, load_b);
            __m256 a1 = full ? _mm256_loadu_ps(p1) : _mm256_maskload_ps(p1, load_a);
            __m256 b1 = full ? _mm256_loadu_ps(p1 + 8) : _mm256_maskload_ps(p1 + 8, load_b);
            __m256 tap[4];
            deinterleave8(a0, b0, &tap[0], &tap[1]);
            deinterleave8(a1, b1, &tap[2], &tap[3]);
            __m256i here = _mm256_add_epi32(_mm256_set1_epi32((int)(2 * oy * W + 2 * ox)), even_cols);
            __m256i at = here;
            __m256 best = tap[0]; /* replaces -inf unless it is -inf: the same value and index */
            for (int t = 1; t < 4; t++) {
                here = _mm256_add_epi32(here, t == 2 ? _mm256_sub_epi32(below, right) : right);
                take_max8(tap[t], here, &best, &at);
            }
            store8(yrow + ox, irow + ox, best, at, full ? 8 : tail);
        }
    }
}

/* Whether max_plane_2x2s2_f32_avx2 applies: every window whole and inside the plane. */
static bool max_plane_is_2x2s2(const struct pool_geom *g)
{
    return g->kh == 2 && g->kw == 2 && g->sh == 2 && g->sw == 2 && g->ph == 0 && g->pw == 0 &&
           g->dh == 1 && g->dw == 1 && 2 * g->OH <= g->H && 2 * g->OW <= g->W;
}

/* Whether a float32 plane takes max_plane_f32_avx2: rows contiguous, indices in 32 bits,
 * and a cpu ([cpu] simd) with AVX2. */
static bool max_plane_f32_vector(int64_t sx, const struct pool_geom *g)
{
    return sx == 1 && g->H * g->W < INT32_MAX && g->sw < INT32_MAX / 8 &&
           cpu_simd_level() >= CPU_SIMD_AVX2;
}
#else
static bool max_plane_f32_vector(int64_t sx, const struct pool_geom *g)
{
    return false;
}
#endif

/* ---- kernels ---------------------------------------------------------------------------- */

struct pool_job {
    const struct weft_op_call *call;
    struct pool_geom g;
    int64_t channels; /* plane p is image p / channels, channel p % channels */
    int failed;     /* a thread could not get its scratch buffer */
    bool vector;    /* float32 max planes take max_plane_f32_avx2 */
};

/* Element address of plane p of t (element offsets; t's dims 0 and 1 are N and C). */
static const char *plane_of(const weft_tensor *t, int64_t p, int64_t C)
{
    return (const char *)weft_tensor_data(t) +
           ((p / C) * t->stride[0] + (p % C) * t->stride[1]) * (int64_t)weft_tensor_itemsize(t);
}

static void max_range(void *ctx, int64_t begin, int64_t end)
{
    struct pool_job *job = ctx;
    const weft_tensor *x = job->call->in[0];
    weft_tensor *y = job->call->out[0], *idx = job->call->out[1];
    int64_t L = job->g.OH * job->g.OW;
    for (int64_t p = begin; p < end; p++) {
        const char *xp = plane_of(x, p, job->channels);
        char *yp = (char *)weft_tensor_data(y) + p * L * (int64_t)weft_tensor_itemsize(y);
        int64_t *ip = (int64_t *)weft_tensor_data(idx) + p * L;
#ifdef POOL_X86
        if (x->dtype == WEFT_F32 && job->vector) {
            if (max_plane_is_2x2s2(&job->g))
                max_plane_2x2s2_f32_avx2((const float *)xp, x->stride[2], (float *)yp, ip,
                                         &job->g);
            else
                max_plane_f32_avx2((const float *)xp, x->stride[2], (float *)yp, ip, &job->g);
            continue;
        }
#endif
        switch (x->dtype) {
#define CASE(name, id, T, C)                                                                  \
    case id:                                                                                  \
        max_plane_##name((const T *)xp, x->stride[2], x->stride[3], (T *)yp, ip, &job->g);    \
        break;
            WEFT_FOR_FLOATING_DTYPES(CASE)
#undef CASE
        default:
            break;
        }
    }
}

static void avg_range(void *ctx, int64_t begin, int64_t end)
{
    struct pool_job *job = ctx;
    const weft_tensor *x = job->call->in[0];
    weft_tensor *y = job->call->out[0];
    int64_t L = job->g.OH * job->g.OW;
    for (int64_t p = begin; p < end; p++) {
        const char *xp = plane_of(x, p, job->channels);
        char *yp = (char *)weft_tensor_data(y) + p * L * (int64_t)weft_tensor_itemsize(y);
        switch (x->dtype) {
#define CASE(name, id, T, C)                                                                  \
    case id:                                                                                  \
        avg_plane_##name((const T *)xp, x->stride[2], x->stride[3], (T *)yp, &job->g);        \
        break;
            WEFT_FOR_FLOATING_DTYPES(CASE)
#undef CASE
        default:
            break;
        }
    }
}

/* Backward passes: in[0] grad_output (and in[1] indices for max), out[0] grad_input. */
static void backward_range(void *ctx, int64_t begin, int64_t end)
{
    struct pool_job *job = ctx;
    const weft_tensor *gy = job->call->in[0], *idx = job->call->in[1];
    weft_tensor *gx = job->call->out[0];
    int64_t HW = job->g.H * job->g.W;
    bool is_max = job->call->op == WEFT_OP_MAX_POOL2D_BACKWARD;
    float *acc = weft_tensor_itemsize(gx) == 2 ? malloc((size_t)(HW ? HW : 1) * sizeof *acc) : NULL;
    if (weft_tensor_itemsize(gx) == 2 && !acc) {
        __atomic_store_n(&job->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    for (int64_t p = begin; p < end; p++) {
        const char *gyp = plane_of(gy, p, job->channels);
        const int64_t *ip = is_max ? (const int64_t *)plane_of(idx, p, job->channels) : NULL;
        char *gxp = (char *)weft_tensor_data(gx) + p * HW * (int64_t)weft_tensor_itemsize(gx);
        switch (gy->dtype) {
#define CASE(name, id, T, C)                                                                  \
    case id:                                                                                  \
        if (is_max)                                                                           \
            max_backward_plane_##name((const T *)gyp, gy->stride[2], gy->stride[3], ip,       \
                                      idx->stride[2], idx->stride[3], (T *)gxp, (C *)acc,     \
                                      &job->g);                                               \
        else                                                                                  \
            avg_backward_plane_##name((const T *)gyp, gy->stride[2], gy->stride[3], (T *)gxp, \
                                      (C *)acc, &job->g);                                     \
        break;
            WEFT_FOR_FLOATING_DTYPES(CASE)
#undef CASE
        default:
            break;
        }
    }
    free(acc);
}

static int64_t plane_grain(int64_t work_per_plane)
{
    int64_t g = CPU_PARALLEL_GRAIN / (work_per_plane > 0 ? work_per_plane : 1);
    return g > 0 ? g : 1;
}

int cpu_pool_kernel(const struct weft_op_call *call)
{
    const weft_tensor *x = call->in[0];
    weft_tensor *y = call->out[0];
    struct pool_job job = {call, geom_of(call, x, y), x->shape[1], 0, false};
    if (weft_tensor_numel(y) == 0)
        return 0;
    job.vector = call->op == WEFT_OP_MAX_POOL2D && x->dtype == WEFT_F32 &&
                 max_plane_f32_vector(x->stride[3], &job.g);
    int64_t work = job.g.OH * job.g.OW * job.g.kh * job.g.kw;
    cpu_parallel_for(x->shape[0] * job.channels, plane_grain(work),
                     call->op == WEFT_OP_MAX_POOL2D ? max_range : avg_range, &job);
    return 0;
}

int cpu_pool_backward_kernel(const struct weft_op_call *call)
{
    const weft_tensor *gy = call->in[0];
    weft_tensor *gx = call->out[0];
    struct pool_job job = {call, geom_of(call, gx, gy), gx->shape[1], 0};
    if (weft_tensor_numel(gx) == 0)
        return 0;
    int64_t work = job.g.H * job.g.W + job.g.OH * job.g.OW * job.g.kh * job.g.kw;
    cpu_parallel_for(gx->shape[0] * job.channels, plane_grain(work), backward_range, &job);
    if (job.failed)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "pooling backward: out of host memory");
    return 0;
}
