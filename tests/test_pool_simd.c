/* tests/test_pool_simd.c: float32 max pooling through the cpu plugin's vector body.
 *
 * Blocks of eight outputs take the AVX2 body (kernels_pool.c), a row's short tail a masked
 * block, windows past the left or right edge the scalar loop. Both must give what the loop
 * written here gives, bit for bit: the values and the indices (the first maximum, the last
 * NaN, -0 against 0 the first tap), for the 2x2 window, odd sizes, short rows, padding,
 * dilation, ceil_mode, strides 1, 2 and 3, and row-strided inputs. Each geometry runs under
 * [cpu] simd = avx2 and none. */
#include <math.h>
#include <string.h>

#include "testutil.h"

#include <weft/kernel.h>

struct geom {
    int64_t N, C, H, W, kh, kw, sh, sw, ph, pw, dh, dw;
    bool ceil_mode;
};

static const struct geom cases[] = {
    {2, 3, 28, 28, 2, 2, 2, 2, 0, 0, 1, 1, false}, /* the MNIST CNN's pool */
    {1, 2, 13, 37, 2, 2, 2, 2, 0, 0, 1, 1, false}, /* odd: last row and column dropped */
    {1, 2, 13, 37, 2, 2, 2, 2, 0, 0, 1, 1, true},  /* ceil_mode: a window past the edge */
    {1, 2, 20, 41, 3, 3, 1, 1, 1, 1, 1, 1, false}, /* 3x3 stride 1, padding */
    {1, 2, 21, 45, 3, 3, 2, 2, 1, 1, 1, 1, true},  /* stride 2, padding, ceil_mode */
    {1, 1, 17, 60, 3, 2, 2, 3, 1, 1, 2, 2, false}, /* stride 3 (gathered), dilation */
    {1, 1, 9, 70, 2, 3, 1, 1, 0, 1, 1, 3, true},   /* dilated columns, stride 1 */
    {1, 1, 5, 100, 1, 1, 1, 1, 0, 0, 1, 1, false}, /* 1x1 */
    {1, 1, 6, 16, 2, 2, 2, 2, 0, 0, 1, 1, false},  /* exactly one block of eight */
    {1, 1, 4, 17, 2, 2, 2, 2, 0, 0, 1, 1, false},  /* a block reading the last column */
    {2, 4, 14, 14, 2, 2, 2, 2, 0, 0, 1, 1, false}, /* the CNN's second pool: rows of 7 */
    {1, 2, 9, 5, 3, 3, 1, 1, 1, 1, 1, 1, true},    /* rows of 5, padding, ceil_mode */
    {1, 2, 7, 20, 2, 2, 3, 3, 0, 0, 1, 1, true},   /* stride 3, rows of 7, ceil_mode */
    {1, 1, 6, 3, 2, 2, 2, 2, 0, 0, 1, 1, true},    /* a row of 2, the last window clipped */
    {1, 1, 5, 30, 2, 2, 2, 2, 0, 0, 1, 1, false},  /* blocks, then a masked tail of 7 */
};

static int64_t out_size(int64_t in, int64_t k, int64_t p, int64_t s, int64_t d, bool ceil_mode)
{
    int64_t num = in + 2 * p - d * (k - 1) - 1 + (ceil_mode ? s - 1 : 0);
    int64_t o = num / s + 1;
    if (ceil_mode && (o - 1) * s >= in + p)
        o--;
    return o;
}

/* PyTorch's CPU rule: taps in row-major order, the first in-image tap's index to start,
 * a tap replaces the maximum when greater or NaN. x: [planes, H, W] rows sy apart. */
static void reference(const struct geom *g, const float *x, int64_t sy, int64_t OH, int64_t OW,
                      float *out, int64_t *idx)
{
    for (int64_t pl = 0; pl < g->N * g->C; pl++)
        for (int64_t oy = 0; oy < OH; oy++)
            for (int64_t ox = 0; ox < OW; ox++) {
                float best = -INFINITY;
                int64_t at = -1;
                for (int64_t i = 0; i < g->kh; i++)
                    for (int64_t j = 0; j < g->kw; j++) {
                        int64_t r = oy * g->sh - g->ph + i * g->dh;
                        int64_t c = ox * g->sw - g->pw + j * g->dw;
                        if (r < 0 || r >= g->H || c < 0 || c >= g->W)
                            continue;
                        float v = x[(pl * g->H + r) * sy + c];
                        if (at < 0)
                            at = r * g->W + c;
                        if (v > best || isnan(v)) {
                            best = v;
                            at = r * g->W + c;
                        }
                    }
                out[(pl * OH + oy) * OW + ox] = best;
                idx[(pl * OH + oy) * OW + ox] = at;
            }
}

/* Small integers (ties everywhere), with NaN, -inf, -0 and 0 sprinkled in. */
static void fill(float *x, int64_t n, uint64_t seed)
{
    double *u = malloc((size_t)n * sizeof *u);
    cr_assert_not_null(u);
    tu_random_values(u, n, 0, 1, &seed);
    for (int64_t i = 0; i < n; i++) {
        double r = u[i];
        x[i] = r < 0.02   ? NAN
               : r < 0.05 ? -INFINITY
               : r < 0.15 ? -0.0f
               : r < 0.25 ? 0.0f
                          : floorf((float)(r * 8) - 4);
    }
    free(u);
}

static bool same_float(float a, float b)
{
    return (isnan(a) && isnan(b)) || memcmp(&a, &b, sizeof a) == 0;
}

/* One geometry over an input whose rows are pad_cols wider than W (a column slice). */
static void check_case(const struct geom *g, int64_t pad_cols, uint64_t seed)
{
    weft_scope_push();
    int64_t OH = out_size(g->H, g->kh, g->ph, g->sh, g->dh, g->ceil_mode);
    int64_t OW = out_size(g->W, g->kw, g->pw, g->sw, g->dw, g->ceil_mode);
    int64_t sy = g->W + pad_cols, planes = g->N * g->C, n = planes * g->H * sy;
    const int64_t full_shape[4] = {g->N, g->C, g->H, sy};
    weft_tensor *full = weft_empty(4, full_shape, WEFT_F32, WEFT_CPU);
    cr_assert_not_null(full, "%s", weft_error_message());
    fill(weft_tensor_data(full), n, seed);
    weft_tensor *x = pad_cols ? weft_narrow(full, 3, 0, g->W) : full;
    const int64_t ys[4] = {g->N, g->C, OH, OW};
    weft_tensor *y = weft_empty(4, ys, WEFT_F32, WEFT_CPU);
    weft_tensor *ix = weft_empty(4, ys, WEFT_I64, WEFT_CPU);
    cr_assert(x && y && ix, "%s", weft_error_message());
    struct weft_op_call call = {.op = WEFT_OP_MAX_POOL2D, .nin = 1, .nout = 2, .in = {x},
                                .out = {y, ix},
                                .ints = {g->kh, g->kw, g->sh, g->sw, g->ph, g->pw, g->dh, g->dw,
                                         1, 0}};
    cr_assert_eq(weft_dispatch(&call), 0, "%s", weft_error_message());
    int64_t m = planes * OH * OW;
    float *expect = malloc((size_t)m * sizeof *expect);
    int64_t *eidx = malloc((size_t)m * sizeof *eidx);
    cr_assert(expect && eidx);
    reference(g, weft_tensor_data(full), sy, OH, OW, expect, eidx);
    const float *got = weft_tensor_data(y);
    const int64_t *gidx = weft_tensor_data(ix);
    for (int64_t i = 0; i < m; i++) {
        cr_assert(same_float(got[i], expect[i]),
                  "%lldx%lld case, output %lld: %g, expected %g", (long long)g->H,
                  (long long)g->W, (long long)i, got[i], expect[i]);
        cr_assert_eq(gidx[i], eidx[i], "%lldx%lld case, output %lld: index %lld, expected %lld",
                     (long long)g->H, (long long)g->W, (long long)i, (long long)gidx[i],
                     (long long)eidx[i]);
    }
    free(expect);
    free(eidx);
    weft_scope_pop();
}

static void check_all(void)
{
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        check_case(&cases[i], 0, 100 + i);
        check_case(&cases[i], 5, 200 + i);
    }
}

static const weft_options *simd_options(void *ctx, const char *plugin)
{
    return strcmp(plugin, "cpu") == 0 ? ctx : NULL;
}

/* Loads the cpu plugin with [cpu] simd = level (each test runs in its own process). */
static void check_with_simd(const char *level)
{
    weft_options *o = weft_options_new("cpu", "simd.ini");
    cr_assert_eq(weft_options_set(o, "simd", level), 0);
    weft_plugin_set_options_source(simd_options, o);
    if (!weft_backend_get(WEFT_DEVICE_CPU))
        cr_assert_fail("[cpu] simd = %s: %s", level, weft_error_message());
    check_all();
    weft_plugin_set_options_source(NULL, NULL);
    weft_options_free(o);
}

TestSuite(pool_simd, .fini = tu_teardown);

Test(pool_simd, the_avx2_body_gives_the_loops_values_and_indices)
{
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2"))
        cr_skip_test("this cpu has no AVX2: the vector body cannot run here");
#else
    cr_skip_test("not an x86-64 build: there is no vector body");
#endif
    check_with_simd("avx2");
}

Test(pool_simd, the_scalar_loops_give_the_same)
{
    check_with_simd("none");
}
