/* plugins/cpu/kernels_pool.c: 2-d max and average pooling and their backward passes.
 *
 * Every kernel works one (image, channel) plane at a time, so planes run in parallel
 * and no two threads write the same pixel. Windows follow PyTorch's CPU kernels
 * (aten/src/ATen/native/cpu/{Max,Avg}PoolKernel.cpp) exactly, so values, indices and
 * divisors agree, padding and ceil_mode included. Backward passes accumulate in the
 * compute type: 16-bit floats sum in a float buffer and are rounded once. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

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

/* ---- per-plane loops, written once per dtype ----------------------------------------------
 * x/gx: image planes, y/gy/idx: pooled planes. Strides in elements (sy row, sx column);
 * planes the kernel writes are contiguous. */
#define DEFINE_POOL(name, id, T, C)                                                           \
    /* The common 2x2 window, stride 2, no padding or dilation, rows contiguous: the four  \
     * taps straight-line and the choice by select, not branch (a branch on random data   \
     * mispredicts every other tap). Same order and NaN rule as the general loop.          \
     * x: [H, W] rows sy apart; y, idx: [OH, OW]. */                                      \
    static void max_plane_2x2_##name(const T *x, int64_t sy, T *y, int64_t *idx,            \
                                     const struct pool_geom *g)                               \
    {                                                                                         \
        const int64_t OH = g->OH, OW = g->OW, W = g->W;                                       \
        for (int64_t oy = 0; oy < OH; oy++) {                                                 \
            const T *r0 = x + 2 * oy * sy, *r1 = r0 + sy;                                     \
            T *yrow = y + oy * OW;                                                            \
            int64_t *irow = idx + oy * OW, base = 2 * oy * W;                                 \
            for (int64_t ox = 0; ox < OW; ox++) {                                             \
                C v0 = weft_load_##name(r0 + 2 * ox), v1 = weft_load_##name(r0 + 2 * ox + 1); \
                C v2 = weft_load_##name(r1 + 2 * ox), v3 = weft_load_##name(r1 + 2 * ox + 1); \
                /* The running maximum as the general loop keeps it (maxss), then the    \
                 * first tap equal to it: the general loop's index. Integer selects     \
                 * become cmov; a window with a NaN (rare) takes the general rule.      \
                 * Offsets within the window: 0, 1, W, W + 1. */                          \
                C best = v0;                                                                  \
                best = v1 > best ? v1 : best;                                                 \
                best = v2 > best ? v2 : best;                                                 \
                best = v3 > best ? v3 : best;                                                 \
                int64_t p2 = v2 == best ? W : W + 1;                                          \
                int64_t p1 = v1 == best ? 1 : p2;                                             \
                int64_t pick = v0 == best ? 0 : p1;                                           \
                if (__builtin_expect((v0 != v0) | (v1 != v1) | (v2 != v2) | (v3 != v3), 0)) { \
                    const C v[4] = {v0, v1, v2, v3};                                          \
                    const int64_t off[4] = {0, 1, W, W + 1};                                  \
                    best = v0, pick = 0;                                                      \
                    for (int t = 1; t < 4; t++)                                               \
                        if (v[t] > best || isnan(v[t]))                                       \
                            best = v[t], pick = off[t];                                       \
                }                                                                             \
                weft_store_##name(yrow + ox, best);                                           \
                irow[ox] = base + 2 * ox + pick;                                              \
            }                                                                                 \
        }                                                                                     \
    }                                                                                         \
    static void max_plane_##name(const T *x, int64_t sy, int64_t sx, T *y, int64_t *idx,      \
                                 const struct pool_geom *g)                                   \
    {                                                                                         \
        if (g->kh == 2 && g->kw == 2 && g->sh == 2 && g->sw == 2 && g->ph == 0 &&             \
            g->pw == 0 && g->dh == 1 && g->dw == 1 && sx == 1 && 2 * g->OH <= g->H &&         \
            2 * g->OW <= g->W) { /* ceil_mode may add a window past the edge */              \
            max_plane_2x2_##name(x, sy, y, idx, g);                                           \
            return;                                                                           \
        }                                                                                     \
        for (int64_t oy = 0; oy < g->OH; oy++) {                                              \
            int64_t y0, y1;                                                                   \
            max_span(oy, g->sh, g->ph, g->kh, g->dh, g->H, &y0, &y1);                         \
            for (int64_t ox = 0; ox < g->OW; ox++) {                                          \
                int64_t x0, x1;                                                               \
                max_span(ox, g->sw, g->pw, g->kw, g->dw, g->W, &x0, &x1);                     \
                C best = (C)-INFINITY;                                                        \
                int64_t at = y0 < y1 && x0 < x1 ? y0 * g->W + x0 : -1;                        \
                for (int64_t r = y0; r < y1; r += g->dh)                                      \
                    for (int64_t c = x0; c < x1; c += g->dw) {                                \
                        C v = weft_load_##name(x + r * sy + c * sx);                           \
                        if (v > best || isnan(v)) {                                           \
                            best = v;                                                         \
                            at = r * g->W + c;                                                \
                        }                                                                     \
                    }                                                                         \
                weft_store_##name(y + oy * g->OW + ox, best);                                  \
                idx[oy * g->OW + ox] = at;                                                    \
            }                                                                                 \
        }                                                                                     \
    }                                                                                         \
    static void max_backward_plane_##name(const T *gy, int64_t gsy, int64_t gsx,              \
                                          const int64_t *idx, int64_t isy, int64_t isx,       \
                                          T *gx, C *acc, const struct pool_geom *g)           \
    {                                                                                         \
        C *sum = sizeof(T) == sizeof(C) ? (C *)gx : acc;                                      \
        for (int64_t p = 0; p < g->H * g->W; p++)                                             \
            sum[p] = 0;                                                                       \
        for (int64_t oy = 0; oy < g->OH; oy++)                                                \
            for (int64_t ox = 0; ox < g->OW; ox++) {                                          \
                int64_t at = idx[oy * isy + ox * isx];                                        \
                if (at >= 0)                                                                  \
                    sum[at] += weft_load_##name(gy + oy * gsy + ox * gsx);                     \
            }                                                                                 \
        if (sizeof(T) != sizeof(C)) /* 16-bit: acc is float, rounded in one vector pass */    \
            cpu_round_f32_run(id, gx, (const float *)acc, g->H * g->W);                       \
    }                                                                                         \
    static void avg_plane_##name(const T *x, int64_t sy, int64_t sx, T *y,                    \
                                 const struct pool_geom *g)                                   \
    {                                                                                         \
        for (int64_t oy = 0; oy < g->OH; oy++)                                                \
            for (int64_t ox = 0; ox < g->OW; ox++) {                                          \
                struct avg_window w = avg_window(g, oy, ox);                                  \
                C s = 0;                                                                      \
                for (int64_t r = w.y0; r < w.y1; r++)                                         \
                    for (int64_t c = w.x0; c < w.x1; c++)                                     \
                        s += weft_load_##name(x + r * sy + c * sx);                            \
                bool empty = w.y0 >= w.y1 || w.x0 >= w.x1;                                    \
                weft_store_##name(y + oy * g->OW + ox, empty ? (C)0 : (C)(s / (C)w.divisor));  \
            }                                                                                 \
    }                                                                                         \
    static void avg_backward_plane_##name(const T *gy, int64_t gsy, int64_t gsx, T *gx,       \
                                          C *acc, const struct pool_geom *g)                  \
    {                                                                                         \
        C *sum = sizeof(T) == sizeof(C) ? (C *)gx : acc;                                      \
        for (int64_t p = 0; p < g->H * g->W; p++)                                             \
            sum[p] = 0;                                                                       \
        for (int64_t oy = 0; oy < g->OH; oy++)                                                \
            for (int64_t ox = 0; ox < g->OW; ox++) {                                          \
                struct avg_window w = avg_window(g, oy, ox);                                  \
                if (w.y0 >= w.y1 || w.x0 >= w.x1)                                             \
                    continue;                                                                 \
                C share = weft_load_##name(gy + oy * gsy + ox * gsx) / (C)w.divisor;           \
                for (int64_t r = w.y0; r < w.y1; r++)                                         \
                    for (int64_t c = w.x0; c < w.x1; c++)                                     \
                        sum[r * g->W + c] += share;                                           \
            }                                                                                 \
        if (sizeof(T) != sizeof(C)) /* 16-bit: acc is float, rounded in one vector pass */    \
            cpu_round_f32_run(id, gx, (const float *)acc, g->H * g->W);                       \
    }
#define INST(name, id, T, C) DEFINE_POOL(name, id, T, C)
WEFT_FOR_FLOATING_DTYPES(INST)
#undef INST

/* ---- kernels ---------------------------------------------------------------------------- */

struct pool_job {
    const struct weft_op_call *call;
    struct pool_geom g;
    int64_t channels; /* plane p is image p / channels, channel p % channels */
    int failed;     /* a thread could not get its scratch buffer */
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

static int pool_kernel(const struct weft_op_call *call)
{
    const weft_tensor *x = call->in[0];
    weft_tensor *y = call->out[0];
    struct pool_job job = {call, geom_of(call, x, y), x->shape[1], 0};
    if (weft_tensor_numel(y) == 0)
        return 0;
    int64_t work = job.g.OH * job.g.OW * job.g.kh * job.g.kw;
    cpu_parallel_for(x->shape[0] * job.channels, plane_grain(work),
                     call->op == WEFT_OP_MAX_POOL2D ? max_range : avg_range, &job);
    return 0;
}

static int pool_backward_kernel(const struct weft_op_call *call)
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

int cpu_register_pool_kernels(void)
{
    static const struct {
        int op;
        weft_kernel_fn fn;
    } table[] = {
        {WEFT_OP_MAX_POOL2D, pool_kernel},
        {WEFT_OP_AVG_POOL2D, pool_kernel},
        {WEFT_OP_MAX_POOL2D_BACKWARD, pool_backward_kernel},
        {WEFT_OP_AVG_POOL2D_BACKWARD, pool_backward_kernel},
    };
    for (size_t i = 0; i < sizeof table / sizeof *table; i++) {
        int rc = weft_kernel_register(table[i].op, WEFT_DEVICE_CPU, WEFT_LAYOUT_STRIDED,
                                      WEFT_DTYPES_FLOATING, table[i].fn);
        if (rc != 0)
            return rc;
    }
    return 0;
}
