/* tests/test_nn_functional.c: the functional layers and losses of weft/nn.h.
 *
 * Convolution and pooling are compared with direct loops written here in double
 * (PyTorch's window rules spelled out); layers and losses with their formulas written
 * out; every backward with weft_gradcheck in float64. */
#include <math.h>
#include <string.h>

#include "testutil.h"

#include <weft/nn.h>

static void setup(void)
{
    tu_setup();
    weft_scope_push();
}

static void teardown(void)
{
    weft_scope_pop();
    weft_set_grad_enabled(true);
    tu_teardown();
}

TestSuite(nn_functional, .init = setup, .fini = teardown);

static weft_tensor *leaf64(int ndim, const int64_t *shape, double lo, double hi, uint64_t *seed)
{
    weft_tensor *t = tu_random_tensor(ndim, shape, WEFT_F64, lo, hi, seed, NULL);
    cr_assert_eq(weft_requires_grad_(t, true), 0, "%s", weft_error_message());
    return t;
}

static weft_tensor *int64_tensor(int ndim, const int64_t *shape, const int64_t *values)
{
    weft_tensor *t = weft_from_host(values, ndim, shape, WEFT_I64, WEFT_CPU);
    cr_assert_not_null(t, "%s", weft_error_message());
    return t;
}

static double item(weft_tensor *t)
{
    double v = NAN;
    cr_assert_not_null(t, "%s", weft_error_message());
    cr_assert_eq(weft_tensor_item(t, &v), 0, "%s", weft_error_message());
    return v;
}

static double *read_all(weft_tensor *t)
{
    cr_assert_not_null(t, "%s", weft_error_message());
    int64_t n = weft_tensor_numel(t);
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    cr_assert_not_null(v);
    tu_read(t, v);
    return v;
}

static void expect_gradcheck(weft_gradcheck_fn fn, void *ctx, int n, weft_tensor *const *inputs,
                             const char *what)
{
    int rc = weft_gradcheck(fn, ctx, n, inputs, 1e-6, 1e-6, 1e-5);
    cr_expect_eq(rc, 0, "%s: %s", what, weft_error_message());
    weft_error_clear();
}

/* ---- convolution: reference ---------------------------------------------------------------- */

struct conv_case {
    int64_t N, C, H, W, Cout, kh, kw;
    struct weft_conv2d_params p;
    bool bias;
};

static int64_t conv_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d)
{
    return (in + 2 * p - d * (k - 1) - 1) / s + 1;
}

/* out[n, co, oy, ox] = b[co] + sum over the group's channels and taps, straight from the
 * definition. x, w, b row-major; out sized by the caller. */
static void conv_reference(const struct conv_case *c, const double *x, const double *w,
                           const double *b, double *out, int64_t *oh, int64_t *ow)
{
    int64_t sh = c->p.stride[0] ? c->p.stride[0] : 1, sw = c->p.stride[1] ? c->p.stride[1] : 1;
    int64_t dh = c->p.dilation[0] ? c->p.dilation[0] : 1, dw = c->p.dilation[1] ? c->p.dilation[1] : 1;
    int64_t G = c->p.groups ? c->p.groups : 1, Cg = c->C / G, Og = c->Cout / G;
    int64_t OH = conv_out(c->H, c->kh, sh, c->p.padding[0], dh);
    int64_t OW = conv_out(c->W, c->kw, sw, c->p.padding[1], dw);
    *oh = OH, *ow = OW;
    for (int64_t n = 0; n < c->N; n++)
        for (int64_t co = 0; co < c->Cout; co++)
            for (int64_t y = 0; y < OH; y++)
                for (int64_t xo = 0; xo < OW; xo++) {
                    double s = b ? b[co] : 0;
                    int64_t g = co / Og;
                    for (int64_t ci = 0; ci < Cg; ci++)
                        for (int64_t i = 0; i < c->kh; i++)
                            for (int64_t j = 0; j < c->kw; j++) {
                                int64_t r = y * sh - c->p.padding[0] + i * dh;
                                int64_t q = xo * sw - c->p.padding[1] + j * dw;
                                if (r < 0 || r >= c->H || q < 0 || q >= c->W)
                                    continue;
                                s += x[((n * c->C + g * Cg + ci) * c->H + r) * c->W + q] *
                                     w[((co * Cg + ci) * c->kh + i) * c->kw + j];
                            }
                    out[((n * c->Cout + co) * OH + y) * OW + xo] = s;
                }
}

static const struct conv_case conv_cases[] = {
    {2, 3, 5, 5, 4, 3, 3, {{0, 0}, {0, 0}, {0, 0}, 0}, true},            /* defaults */
    {2, 3, 7, 6, 4, 3, 3, {{1, 1}, {1, 1}, {1, 1}, 1}, true},            /* padding 1 */
    {1, 4, 9, 8, 6, 3, 2, {{2, 3}, {1, 0}, {1, 1}, 1}, false},           /* strides, non-square */
    {2, 2, 9, 9, 3, 3, 3, {{1, 2}, {2, 1}, {2, 3}, 1}, true},            /* dilation */
    {2, 4, 6, 6, 6, 3, 3, {{1, 1}, {1, 1}, {1, 1}, 2}, true},            /* groups 2 */
    {1, 6, 5, 7, 6, 3, 3, {{2, 1}, {1, 1}, {1, 1}, 6}, false},           /* depthwise */
    {3, 5, 4, 6, 7, 1, 1, {{0, 0}, {0, 0}, {0, 0}, 0}, true},            /* pointwise */
    {2, 3, 6, 5, 2, 1, 1, {{2, 2}, {1, 0}, {1, 1}, 1}, true},            /* 1x1, strided+pad */
    {1, 2, 3, 3, 2, 3, 3, {{1, 1}, {0, 0}, {1, 1}, 1}, true},            /* output 1x1 */
    {0, 2, 4, 4, 3, 3, 3, {{1, 1}, {1, 1}, {1, 1}, 1}, true},            /* empty batch */
};

static void check_conv_case(const struct conv_case *c, enum weft_dtype dt, double tol, uint64_t seed)
{
    int64_t G = c->p.groups ? c->p.groups : 1;
    const int64_t xs[4] = {c->N, c->C, c->H, c->W}, ws[4] = {c->Cout, c->C / G, c->kh, c->kw},
                  bs[1] = {c->Cout};
    int64_t nx = weft_shape_numel(4, xs), nw = weft_shape_numel(4, ws);
    double *xv = malloc((size_t)(nx + 1) * sizeof *xv), *wv = malloc((size_t)nw * sizeof *wv),
           bv[64];
    weft_tensor *x = tu_random_tensor(4, xs, dt, -1, 1, &seed, xv);
    weft_tensor *w = tu_random_tensor(4, ws, dt, -1, 1, &seed, wv);
    weft_tensor *b = c->bias ? tu_random_tensor(1, bs, dt, -1, 1, &seed, bv) : NULL;
    /* the reference sees exactly the values the tensor holds (16-bit rounding included) */
    tu_read(x, xv);
    tu_read(w, wv);
    if (b)
        tu_read(b, bv);
    int64_t oh, ow;
    int64_t nout = c->N * c->Cout * conv_out(c->H, c->kh, 1, c->p.padding[0], 1) *
                   conv_out(c->W, c->kw, 1, c->p.padding[1], 1) + 1;
    double *expect = malloc((size_t)nout * sizeof *expect);
    conv_reference(c, xv, wv, b ? bv : NULL, expect, &oh, &ow);
    weft_tensor *y = weft_conv2d(x, w, b, &c->p);
    cr_assert_not_null(y, "%s", weft_error_message());
    const int64_t ys[4] = {c->N, c->Cout, oh, ow};
    tu_assert_shape(y, 4, ys);
    cr_expect_eq(y->dtype, dt);
    tu_assert_close(y, expect, weft_shape_numel(4, ys), tol, tol);
    free(xv);
    free(wv);
    free(expect);
}

/* ---- convolution: forward ------------------------------------------------------------------ */

Test(nn_functional, conv2d_matches_the_direct_loop_for_every_geometry)
{
    for (size_t i = 0; i < sizeof conv_cases / sizeof *conv_cases; i++) {
        check_conv_case(&conv_cases[i], WEFT_F64, 1e-12, 11 + i);
        check_conv_case(&conv_cases[i], WEFT_F32, 1e-5, 11 + i);
    }
}

Test(nn_functional, conv2d_in_16_bit_floats_agrees_with_the_loop_to_their_precision)
{
    check_conv_case(&conv_cases[1], WEFT_F16, 2e-2, 5);
    check_conv_case(&conv_cases[4], WEFT_BF16, 8e-2, 6);
}

Test(nn_functional, conv2d_reads_non_contiguous_inputs_and_weights)
{
    uint64_t seed = 3;
    const struct conv_case c = {2, 3, 6, 5, 4, 3, 2, {{1, 2}, {1, 1}, {1, 1}, 1}, true};
    const int64_t xs_t[4] = {2, 3, 5, 6}, ws_p[4] = {3, 2, 4, 3}, bs[1] = {4};
    weft_tensor *xt = tu_random_tensor(4, xs_t, WEFT_F64, -1, 1, &seed, NULL);
    weft_tensor *x = weft_transpose(xt, 2, 3);               /* [2, 3, 6, 5], strided */
    weft_tensor *wp = tu_random_tensor(4, ws_p, WEFT_F64, -1, 1, &seed, NULL);
    weft_tensor *w = weft_permute(wp, 4, (const int[]){2, 0, 3, 1}); /* [4, 3, 3, 2] */
    weft_tensor *b = tu_random_tensor(1, bs, WEFT_F64, -1, 1, &seed, NULL);
    double *xv = read_all(x), *wv = read_all(w), *bv = read_all(b), expect[2 * 4 * 6 * 5];
    int64_t oh, ow;
    conv_reference(&c, xv, wv, bv, expect, &oh, &ow);
    weft_tensor *y = weft_conv2d(x, w, b, &c.p);
    const int64_t ys[4] = {2, 4, oh, ow};
    tu_assert_shape(y, 4, ys);
    tu_assert_close(y, expect, weft_shape_numel(4, ys), 1e-12, 1e-12);
    free(xv);
    free(wv);
    free(bv);
}

Test(nn_functional, conv2d_of_an_unbatched_image_is_unbatched)
{
    uint64_t seed = 8;
    const int64_t xs[3] = {2, 4, 4}, ws[4] = {3, 2, 3, 3};
    weft_tensor *x = tu_random_tensor(3, xs, WEFT_F32, -1, 1, &seed, NULL);
    weft_tensor *w = tu_random_tensor(4, ws, WEFT_F32, -1, 1, &seed, NULL);
    struct weft_conv2d_params p = {.padding = {1, 1}};
    weft_tensor *y = weft_conv2d(x, w, NULL, &p);
    tu_assert_shape(y, 3, (const int64_t[]){3, 4, 4});
    weft_tensor *y4 = weft_conv2d(weft_unsqueeze(x, 0), w, NULL, &p);
    double a[48], b4[48];
    tu_read(y, a);
    tu_read(y4, b4);
    for (int i = 0; i < 48; i++)
        cr_expect_float_eq(a[i], b4[i], 1e-6);
}

/* Padding, dilation and kernel sizes from a config can be anything: sizes that would
 * overflow int64 (signed overflow, undefined behaviour, which UBSan stops in the sanitizer
 * build) are refused, and pooling's ceil_mode with a stride near 2^63 still gives the
 * right shape. */
Test(nn_functional, conv_and_pool_sizes_beyond_int64_are_refused)
{
    const int64_t xs[4] = {1, 1, 5, 5}, ws[4] = {1, 1, 3, 3}, big = INT64_C(1) << 62;
    weft_tensor *x = weft_zeros(4, xs, WEFT_F32, WEFT_CPU), *w = weft_zeros(4, ws, WEFT_F32, WEFT_CPU);
    struct weft_conv2d_params pad = {.padding = {big, 0}}, dil = {.dilation = {1, big}};
    cr_expect_null(weft_conv2d(x, w, NULL, &pad));
    tu_assert_error(WEFT_ERR_RUNTIME, "conv2d: input size (5 x 5) with padding (4611686018427387904, "
                                      "0), kernel size (3 x 3) and dilation (1, 1) give sizes "
                                      "beyond int64's range");
    cr_expect_null(weft_conv2d(x, w, NULL, &dil));
    tu_assert_error(WEFT_ERR_RUNTIME, "dilation (1, 4611686018427387904) give sizes beyond");
    struct weft_pool2d_params window = {.kernel = {big, 2}, .dilation = {4, 1}};
    cr_expect_null(weft_max_pool2d(x, &window));
    tu_assert_error(WEFT_ERR_RUNTIME, "pooling: kernel size (4611686018427387904 x 2) and dilation "
                                      "(4, 1) give a window beyond int64's range");
    struct weft_pool2d_params wide = {.kernel = {2, 2}, .stride = {INT64_MAX, INT64_MAX},
                                      .ceil_mode = true};
    weft_tensor *y = weft_max_pool2d(x, &wide);
    tu_assert_no_error();
    tu_assert_shape(y, 4, (const int64_t[]){1, 1, 1, 1});
}

Test(nn_functional, conv2d_errors_use_pytorch_words)
{
    const int64_t xs[4] = {1, 4, 5, 5}, ws[4] = {8, 3, 3, 3}, ws7[4] = {7, 2, 3, 3}, bs[1] = {7};
    weft_tensor *x = weft_zeros(4, xs, WEFT_F32, WEFT_CPU), *w = weft_zeros(4, ws, WEFT_F32, WEFT_CPU);
    cr_expect_null(weft_conv2d(x, w, NULL, NULL));
    tu_assert_error(WEFT_ERR_RUNTIME,
                    "Given groups=1, weight of size [8, 3, 3, 3], expected input[1, 4, 5, 5] to have 3 "
                    "channels, but got 4 channels instead");
    struct weft_conv2d_params g2 = {.groups = 2};
    cr_expect_null(weft_conv2d(x, weft_zeros(4, ws7, WEFT_F32, WEFT_CPU), NULL, &g2));
    tu_assert_error(WEFT_ERR_RUNTIME,
                    "Given groups=2, expected weight to be divisible by 2 at dimension 0, but got "
                    "weight of size [7, 2, 3, 3] instead");
    weft_tensor *w4 = weft_zeros(4, (const int64_t[]){8, 4, 3, 3}, WEFT_F32, WEFT_CPU);
    cr_expect_null(weft_conv2d(x, w4, weft_zeros(1, bs, WEFT_F32, WEFT_CPU), NULL));
    tu_assert_error(WEFT_ERR_RUNTIME,
                    "Given weight of size [8, 4, 3, 3], expected bias to be 1-dimensional with 8 "
                    "elements, but got bias of size [7] instead");
    weft_tensor *big = weft_zeros(4, (const int64_t[]){8, 4, 7, 7}, WEFT_F32, WEFT_CPU);
    cr_expect_null(weft_conv2d(x, big, NULL, NULL));
    tu_assert_error(WEFT_ERR_RUNTIME,
                    "Calculated padded input size per channel: (5 x 5). Kernel size: (7 x 7). "
                    "Kernel size can't be greater than actual input size");
    cr_expect_null(weft_conv2d(weft_zeros(2, (const int64_t[]){4, 5}, WEFT_F32, WEFT_CPU), w4, NULL, NULL));
    tu_assert_error(WEFT_ERR_RUNTIME,
                    "Expected 3D (unbatched) or 4D (batched) input to conv2d, but got input of size: "
                    "[4, 5]");
    cr_expect_null(weft_conv2d(weft_to_dtype(x, WEFT_F64), w4, NULL, NULL));
    tu_assert_error(WEFT_ERR_RUNTIME, "expected scalar type Double but found Float");
    struct weft_conv2d_params neg = {.padding = {-1, 0}};
    cr_expect_null(weft_conv2d(x, w4, NULL, &neg));
    tu_assert_error(WEFT_ERR_RUNTIME, "negative padding is not supported");
    cr_expect_null(weft_conv2d(NULL, w4, NULL, NULL));
    tu_assert_no_error();
}

/* ---- pooling: reference ----------------------------------------------------------------------- */

static int64_t pool_out(int64_t in, int64_t k, int64_t p, int64_t s, int64_t d, bool ceil_mode)
{
    int64_t num = in + 2 * p - d * (k - 1) - 1 + (ceil_mode ? s - 1 : 0);
    int64_t o = num / s + 1;
    if (ceil_mode && (o - 1) * s >= in + p)
        o--;
    return o;
}

struct pool_case {
    int64_t N, C, H, W;
    struct weft_pool2d_params p;
};

static void pool_dims(const struct pool_case *c, int64_t *sh, int64_t *sw, int64_t *dh, int64_t *dw,
                      int64_t *oh, int64_t *ow)
{
    const struct weft_pool2d_params *p = &c->p;
    *sh = p->stride[0] ? p->stride[0] : p->kernel[0];
    *sw = p->stride[1] ? p->stride[1] : p->kernel[1];
    *dh = p->dilation[0] ? p->dilation[0] : 1;
    *dw = p->dilation[1] ? p->dilation[1] : 1;
    *oh = pool_out(c->H, p->kernel[0], p->padding[0], *sh, *dh, p->ceil_mode);
    *ow = pool_out(c->W, p->kernel[1], p->padding[1], *sw, *dw, p->ceil_mode);
}

/* Max over the in-image taps; the first maximum's flat index within the plane. */
static void max_pool_reference(const struct pool_case *c, const double *x, double *out, int64_t *idx)
{
    int64_t sh, sw, dh, dw, OH, OW;
    pool_dims(c, &sh, &sw, &dh, &dw, &OH, &OW);
    for (int64_t pl = 0; pl < c->N * c->C; pl++)
        for (int64_t y = 0; y < OH; y++)
            for (int64_t xo = 0; xo < OW; xo++) {
                double best = -INFINITY;
                int64_t at = -1;
                for (int64_t i = 0; i < c->p.kernel[0]; i++)
                    for (int64_t j = 0; j < c->p.kernel[1]; j++) {
                        int64_t r = y * sh - c->p.padding[0] + i * dh;
                        int64_t q = xo * sw - c->p.padding[1] + j * dw;
                        if (r < 0 || r >= c->H || q < 0 || q >= c->W)
                            continue;
                        double v = x[(pl * c->H + r) * c->W + q];
                        if (at < 0 || v > best) {
                            best = v;
                            at = r * c->W + q;
                        }
                    }
                out[(pl * OH + y) * OW + xo] = best;
                idx[(pl * OH + y) * OW + xo] = at;
            }
}

/* PyTorch's average: window [y*s - p, min(y*s - p + k, H + p)) sized with the padding,
 * then clipped; divisor is the padded size when count_include_pad, else the clipped. */
static void avg_pool_reference(const struct pool_case *c, const double *x, double *out)
{
    int64_t sh, sw, dh, dw, OH, OW;
    pool_dims(c, &sh, &sw, &dh, &dw, &OH, &OW);
    int64_t kh = c->p.kernel[0], kw = c->p.kernel[1], ph = c->p.padding[0], pw = c->p.padding[1];
    for (int64_t pl = 0; pl < c->N * c->C; pl++)
        for (int64_t y = 0; y < OH; y++)
            for (int64_t xo = 0; xo < OW; xo++) {
                int64_t y0 = y * sh - ph, x0 = xo * sw - pw;
                int64_t y1 = y0 + kh < c->H + ph ? y0 + kh : c->H + ph;
                int64_t x1 = x0 + kw < c->W + pw ? x0 + kw : c->W + pw;
                int64_t padded = (y1 - y0) * (x1 - x0);
                y0 = y0 < 0 ? 0 : y0, x0 = x0 < 0 ? 0 : x0;
                y1 = y1 > c->H ? c->H : y1, x1 = x1 > c->W ? c->W : x1;
                double s = 0;
                for (int64_t r = y0; r < y1; r++)
                    for (int64_t q = x0; q < x1; q++)
                        s += x[(pl * c->H + r) * c->W + q];
                int64_t div = c->p.count_include_pad ? padded : (y1 - y0) * (x1 - x0);
                out[(pl * OH + y) * OW + xo] = s / (double)div;
            }
}

static const struct pool_case pool_cases[] = {
    {2, 3, 6, 6, {{2, 2}, {0, 0}, {0, 0}, {0, 0}, false, true}},  /* stride = kernel */
    {1, 2, 7, 5, {{3, 2}, {2, 1}, {1, 1}, {0, 0}, false, true}},  /* padding, non-square */
    {1, 2, 7, 5, {{3, 2}, {2, 1}, {1, 1}, {0, 0}, false, false}}, /* count_include_pad off */
    {2, 1, 7, 8, {{3, 3}, {2, 2}, {1, 0}, {0, 0}, true, true}},   /* ceil_mode */
    {2, 1, 7, 8, {{3, 3}, {2, 2}, {1, 1}, {0, 0}, true, false}},  /* ceil_mode, no pad count */
    {1, 3, 5, 9, {{2, 4}, {1, 3}, {1, 2}, {0, 0}, true, true}},
};

static void check_max_pool(const struct pool_case *c, enum weft_dtype dt, double tol, uint64_t seed)
{
    const int64_t xs[4] = {c->N, c->C, c->H, c->W};
    int64_t n = weft_shape_numel(4, xs), sh, sw, dh, dw, oh, ow;
    pool_dims(c, &sh, &sw, &dh, &dw, &oh, &ow);
    double *xv = malloc((size_t)n * sizeof *xv), *expect = malloc((size_t)(n * 4) * sizeof *expect);
    int64_t *idx = malloc((size_t)(n * 4) * sizeof *idx);
    weft_tensor *x = tu_random_tensor(4, xs, dt, -2, 2, &seed, xv);
    tu_read(x, xv);
    max_pool_reference(c, xv, expect, idx);
    weft_tensor *y = weft_max_pool2d(x, &c->p);
    cr_assert_not_null(y, "%s", weft_error_message());
    const int64_t ys[4] = {c->N, c->C, oh, ow};
    tu_assert_shape(y, 4, ys);
    tu_assert_close(y, expect, weft_shape_numel(4, ys), tol, tol);
    free(xv);
    free(expect);
    free(idx);
}

static void check_avg_pool(const struct pool_case *c, enum weft_dtype dt, double tol, uint64_t seed)
{
    const int64_t xs[4] = {c->N, c->C, c->H, c->W};
    int64_t n = weft_shape_numel(4, xs), sh, sw, dh, dw, oh, ow;
    pool_dims(c, &sh, &sw, &dh, &dw, &oh, &ow);
    double *xv = malloc((size_t)n * sizeof *xv), *expect = malloc((size_t)(n * 4) * sizeof *expect);
    weft_tensor *x = tu_random_tensor(4, xs, dt, -2, 2, &seed, xv);
    tu_read(x, xv);
    avg_pool_reference(c, xv, expect);
    weft_tensor *y = weft_avg_pool2d(x, &c->p);
    cr_assert_not_null(y, "%s", weft_error_message());
    const int64_t ys[4] = {c->N, c->C, oh, ow};
    tu_assert_shape(y, 4, ys);
    tu_assert_close(y, expect, weft_shape_numel(4, ys), tol, tol);
    free(xv);
    free(expect);
}

/* ---- pooling: forward --------------------------------------------------------------------------- */

Test(nn_functional, max_pool2d_matches_the_direct_loop)
{
    for (size_t i = 0; i < sizeof pool_cases / sizeof *pool_cases; i++) {
        check_max_pool(&pool_cases[i], WEFT_F64, 0, 21 + i);
        check_max_pool(&pool_cases[i], WEFT_F32, 0, 21 + i);
        check_max_pool(&pool_cases[i], WEFT_BF16, 0, 21 + i);
    }
    /* dilation */
    const struct pool_case d = {1, 2, 9, 8, {{3, 2}, {2, 1}, {2, 1}, {2, 3}, false, true}};
    check_max_pool(&d, WEFT_F64, 0, 99);
    const struct pool_case dc = {2, 1, 10, 9, {{2, 3}, {3, 2}, {1, 1}, {3, 2}, true, true}};
    check_max_pool(&dc, WEFT_F32, 0, 98);
}

Test(nn_functional, avg_pool2d_matches_the_direct_loop_with_padding_rules)
{
    for (size_t i = 0; i < sizeof pool_cases / sizeof *pool_cases; i++) {
        check_avg_pool(&pool_cases[i], WEFT_F64, 1e-12, 41 + i);
        check_avg_pool(&pool_cases[i], WEFT_F32, 1e-6, 41 + i);
        check_avg_pool(&pool_cases[i], WEFT_F16, 2e-3, 41 + i);
    }
}

Test(nn_functional, pooling_reads_strided_inputs_and_empty_batches)
{
    uint64_t seed = 61;
    const struct pool_case c = {2, 3, 6, 5, {{3, 2}, {2, 2}, {1, 1}, {0, 0}, true, false}};
    /* [2, 3, 6, 5] as a permuted view of [5, 2, 6, 3] */
    weft_tensor *base = tu_random_tensor(4, (const int64_t[]){5, 2, 6, 3}, WEFT_F64, -1, 1, &seed, NULL);
    weft_tensor *x = weft_permute(base, 4, (const int[]){1, 3, 2, 0});
    cr_assert(!weft_tensor_is_contiguous(x));
    double *xv = read_all(x), emax[2 * 3 * 4 * 3], eavg[2 * 3 * 4 * 3];
    int64_t idx[2 * 3 * 4 * 3], sh, sw, dh, dw, oh, ow;
    pool_dims(&c, &sh, &sw, &dh, &dw, &oh, &ow);
    cr_assert(oh * ow <= 12);
    max_pool_reference(&c, xv, emax, idx);
    avg_pool_reference(&c, xv, eavg);
    tu_assert_close(weft_max_pool2d(x, &c.p), emax, 2 * 3 * oh * ow, 0, 0);
    tu_assert_close(weft_avg_pool2d(x, &c.p), eavg, 2 * 3 * oh * ow, 1e-12, 1e-12);
    free(xv);
    weft_tensor *empty = weft_zeros(4, (const int64_t[]){0, 3, 6, 5}, WEFT_F32, WEFT_CPU);
    tu_assert_shape(weft_max_pool2d(empty, &c.p), 4, (const int64_t[]){0, 3, oh, ow});
    tu_assert_shape(weft_avg_pool2d(empty, &c.p), 4, (const int64_t[]){0, 3, oh, ow});
}

Test(nn_functional, pooling_by_hand)
{
    /* 1x1x4x4 = 0..15; max 2x2 -> [[5, 7], [13, 15]]; avg 3x3 stride 1 pad 1, both counts */
    double v[16];
    for (int i = 0; i < 16; i++)
        v[i] = i;
    weft_tensor *x = tu_tensor(4, (const int64_t[]){1, 1, 4, 4}, v, WEFT_F32);
    struct weft_pool2d_params mp = {.kernel = {2, 2}};
    tu_assert_close(weft_max_pool2d(x, &mp), (const double[]){5, 7, 13, 15}, 4, 0, 0);
    struct weft_pool2d_params ap = {.kernel = {3, 3}, .stride = {1, 1}, .padding = {1, 1},
                                    .count_include_pad = true};
    weft_tensor *with_pad = weft_avg_pool2d(x, &ap);
    ap.count_include_pad = false;
    weft_tensor *without = weft_avg_pool2d(x, &ap);
    double a[16], b[16];
    tu_read(with_pad, a);
    tu_read(without, b);
    cr_expect_float_eq(a[0], (0 + 1 + 4 + 5) / 9.0, 1e-6);  /* corner: 4 real of 9 */
    cr_expect_float_eq(b[0], (0 + 1 + 4 + 5) / 4.0, 1e-6);
    cr_expect_float_eq(a[5], (0 + 1 + 2 + 4 + 5 + 6 + 8 + 9 + 10) / 9.0, 1e-6);
    cr_expect_float_eq(b[5], a[5], 1e-6);
}

Test(nn_functional, max_pool2d_propagates_nan_and_takes_an_unbatched_image)
{
    double v[9] = {1, 2, 3, NAN, 5, 6, 7, 8, 9};
    weft_tensor *x = tu_tensor(3, (const int64_t[]){1, 3, 3}, v, WEFT_F64);
    struct weft_pool2d_params p = {.kernel = {2, 2}, .stride = {1, 1}};
    weft_tensor *y = weft_max_pool2d(x, &p);
    tu_assert_shape(y, 3, (const int64_t[]){1, 2, 2});
    tu_assert_close(y, (const double[]){NAN, 6, NAN, 9}, 4, 0, 0);
}

/* The 2x2 stride-2 window has its own straight-line loop: odd sizes (the last row and
 * column are dropped), many ties (the first maximum wins) and the indices, read back
 * through the backward pass (each window's gradient lands on its index). */
Test(nn_functional, max_pool2d_2x2_picks_the_first_maximum_on_odd_sizes)
{
    const struct pool_case c = {2, 3, 7, 9, {{2, 2}, {0, 0}, {0, 0}, {0, 0}, false, true}};
    const enum weft_dtype dts[] = {WEFT_F32, WEFT_F64, WEFT_BF16};
    for (size_t k = 0; k < 3; k++) {
        weft_scope_push();
        const int64_t xs[4] = {2, 3, 7, 9};
        double xv[2 * 3 * 7 * 9], expect[2 * 3 * 3 * 4], grad[2 * 3 * 7 * 9] = {0};
        int64_t idx[2 * 3 * 3 * 4];
        uint64_t seed = 77;
        tu_random_values(xv, 2 * 3 * 7 * 9, 0, 3, &seed);
        for (int i = 0; i < 2 * 3 * 7 * 9; i++)
            xv[i] = floor(xv[i]); /* 0, 1 or 2: ties in most windows */
        weft_tensor *x = tu_tensor(4, xs, xv, dts[k]);
        cr_assert_eq(weft_requires_grad_(x, true), 0);
        max_pool_reference(&c, xv, expect, idx);
        weft_tensor *y = weft_max_pool2d(x, &c.p);
        tu_assert_shape(y, 4, (const int64_t[]){2, 3, 3, 4});
        tu_assert_close(y, expect, 2 * 3 * 3 * 4, 0, 0);
        cr_assert_eq(weft_backward(weft_sum(y, 0, NULL, false), NULL, false), 0, "%s",
                     weft_error_message());
        for (int pl = 0; pl < 6; pl++)
            for (int o = 0; o < 12; o++)
                grad[pl * 63 + idx[pl * 12 + o]] += 1;
        tu_assert_close(weft_grad(x), grad, 2 * 3 * 7 * 9, 0, 0);
        weft_scope_pop();
    }
    /* NaN wins its window, as in the general loop */
    double v[16] = {1, 2, 3, 4, NAN, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, NAN};
    weft_tensor *x = tu_tensor(4, (const int64_t[]){1, 1, 4, 4}, v, WEFT_F32);
    struct weft_pool2d_params p = {.kernel = {2, 2}};
    tu_assert_close(weft_max_pool2d(x, &p), (const double[]){NAN, 7, 13, NAN}, 4, 0, 0);
}

Test(nn_functional, pooling_errors_use_pytorch_words)
{
    weft_tensor *x = weft_zeros(4, (const int64_t[]){1, 3, 5, 5}, WEFT_F32, WEFT_CPU);
    struct weft_pool2d_params p = {.kernel = {3, 3}, .padding = {2, 2}};
    cr_expect_null(weft_max_pool2d(x, &p));
    tu_assert_error(WEFT_ERR_RUNTIME,
                    "pad should be at most half of effective kernel size, but got pad=2, "
                    "kernel_size=3 and dilation=1");
    cr_expect_null(weft_avg_pool2d(x, &p));
    tu_assert_error(WEFT_ERR_RUNTIME,
                    "pad should be smaller than or equal to half of kernel size, but got padW = 2, "
                    "padH = 2, kW = 3, kH = 3");
    struct weft_pool2d_params big = {.kernel = {7, 7}, .padding = {1, 1}};
    weft_tensor *small = weft_zeros(4, (const int64_t[]){1, 3, 2, 2}, WEFT_F32, WEFT_CPU);
    big.kernel[0] = big.kernel[1] = 3;
    big.stride[0] = big.stride[1] = 1;
    big.padding[0] = big.padding[1] = 0;
    cr_expect_null(weft_max_pool2d(small, &big));
    tu_assert_error(WEFT_ERR_RUNTIME,
                    "Given input size: (3x2x2). Calculated output size: (3x0x0). Output size is too "
                    "small");
    struct weft_pool2d_params zero = {.kernel = {0, 2}};
    cr_expect_null(weft_max_pool2d(x, &zero));
    tu_assert_error(WEFT_ERR_RUNTIME, "kernel size should be greater than zero, but got kH: 0 kW: 2");
    cr_expect_null(weft_avg_pool2d(weft_zeros(2, (const int64_t[]){3, 4}, WEFT_F32, WEFT_CPU), &p));
    tu_assert_error(WEFT_ERR_RUNTIME,
                    "Expected 3D or 4D (batch mode) tensor with optional 0 dim batch size for input, "
                    "but got:[3, 4]");
}

Test(nn_functional, adaptive_avg_pool2d_averages_pytorch_windows)
{
    /* windows of output i over n: [floor(i*in/n), ceil((i+1)*in/n)) */
    uint64_t seed = 5;
    const int64_t shapes[][4] = {{2, 3, 5, 7}, {1, 2, 6, 4}, {1, 1, 4, 4}};
    const int64_t outs[][2] = {{3, 2}, {3, 2}, {1, 1}};
    for (int k = 0; k < 3; k++) {
        const int64_t *s = shapes[k];
        int64_t OH = outs[k][0], OW = outs[k][1];
        double xv[2 * 3 * 5 * 7], expect[2 * 3 * 3 * 2];
        weft_tensor *x = tu_random_tensor(4, s, WEFT_F64, -1, 1, &seed, xv);
        for (int64_t pl = 0; pl < s[0] * s[1]; pl++)
            for (int64_t i = 0; i < OH; i++)
                for (int64_t j = 0; j < OW; j++) {
                    int64_t y0 = i * s[2] / OH, y1 = ((i + 1) * s[2] + OH - 1) / OH;
                    int64_t x0 = j * s[3] / OW, x1 = ((j + 1) * s[3] + OW - 1) / OW;
                    double sum = 0;
                    for (int64_t r = y0; r < y1; r++)
                        for (int64_t q = x0; q < x1; q++)
                            sum += xv[(pl * s[2] + r) * s[3] + q];
                    expect[(pl * OH + i) * OW + j] = sum / (double)((y1 - y0) * (x1 - x0));
                }
        weft_tensor *y = weft_adaptive_avg_pool2d(x, OH, OW);
        cr_assert_not_null(y, "%s", weft_error_message());
        tu_assert_shape(y, 4, (const int64_t[]){s[0], s[1], OH, OW});
        tu_assert_close(y, expect, s[0] * s[1] * OH * OW, 1e-12, 1e-12);
    }
}

/* ---- linear, normalisation, dropout, embedding, leaky_relu ----------------------------------------- */

Test(nn_functional, linear_is_x_times_weight_transposed_plus_bias)
{
    weft_tensor *x = tu_tensor(2, (const int64_t[]){2, 3}, (const double[]){1, 2, 3, 4, 5, 6}, WEFT_F32);
    weft_tensor *w = tu_tensor(2, (const int64_t[]){2, 3}, (const double[]){1, 0, -1, 2, 1, 0}, WEFT_F32);
    weft_tensor *b = tu_tensor(1, (const int64_t[]){2}, (const double[]){10, 20}, WEFT_F32);
    /* rows: [1-3, 2+2] = [-2, 4]; [4-6, 8+5] = [-2, 13]; plus bias */
    tu_assert_close(weft_linear(x, w, b), (const double[]){8, 24, 8, 33}, 4, 0, 0);
    tu_assert_close(weft_linear(x, w, NULL), (const double[]){-2, 4, -2, 13}, 4, 0, 0);
    /* leading dims are kept */
    weft_tensor *x3 = weft_reshape(weft_cat(2, (weft_tensor *[]){x, x}, 0), 3, (const int64_t[]){2, 2, 3});
    weft_tensor *y3 = weft_linear(x3, w, b);
    tu_assert_shape(y3, 3, (const int64_t[]){2, 2, 2});
    tu_assert_close(y3, (const double[]){8, 24, 8, 33, 8, 24, 8, 33}, 8, 0, 0);
}

Test(nn_functional, linear_shape_mismatch_is_pytorchs_message)
{
    weft_tensor *x = weft_zeros(2, (const int64_t[]){3, 4}, WEFT_F32, WEFT_CPU);
    weft_tensor *w = weft_zeros(2, (const int64_t[]){6, 5}, WEFT_F32, WEFT_CPU);
    cr_expect_null(weft_linear(x, w, NULL));
    tu_assert_error(WEFT_ERR_RUNTIME, "mat1 and mat2 shapes cannot be multiplied (3x4 and 5x6)");
}

/* Batch norm's formula per channel c over n values: (x - mean) / sqrt(var_biased + eps). */
Test(nn_functional, batch_norm_training_normalises_with_batch_statistics_and_updates_running_ones)
{
    /* [N=2, C=2, 2] */
    const double v[8] = {1, 2, 10, 20, 3, 6, 30, 40};
    weft_tensor *x = tu_tensor(3, (const int64_t[]){2, 2, 2}, v, WEFT_F64);
    weft_tensor *rm = tu_tensor(1, (const int64_t[]){2}, (const double[]){0.5, -1}, WEFT_F64);
    weft_tensor *rv = tu_tensor(1, (const int64_t[]){2}, (const double[]){2, 3}, WEFT_F64);
    weft_tensor *w = tu_tensor(1, (const int64_t[]){2}, (const double[]){2, -1}, WEFT_F64);
    weft_tensor *b = tu_tensor(1, (const int64_t[]){2}, (const double[]){0.5, 1}, WEFT_F64);
    double eps = 1e-5, m = 0.1;
    uint64_t before = weft_tensor_version(rm);
    weft_tensor *y = weft_batch_norm(x, rm, rv, w, b, true, m, eps);
    cr_assert_not_null(y, "%s", weft_error_message());
    /* channel 0: {1, 2, 3, 6} mean 3, biased var (4+1+0+9)/4 = 3.5, unbiased 14/3;
     * channel 1: {10, 20, 30, 40} mean 25, biased var (225+25+25+225)/4 = 125, unbiased 500/3 */
    const int ch[8] = {0, 0, 1, 1, 0, 0, 1, 1};
    const double mean[2] = {3, 25}, var[2] = {3.5, 125}, wv[2] = {2, -1}, bv[2] = {0.5, 1};
    double expect[8];
    for (int i = 0; i < 8; i++)
        expect[i] = (v[i] - mean[ch[i]]) / sqrt(var[ch[i]] + eps) * wv[ch[i]] + bv[ch[i]];
    tu_assert_close(y, expect, 8, 1e-12, 1e-12);
    tu_assert_close(rm, (const double[]){0.9 * 0.5 + 0.1 * 3, 0.9 * -1 + 0.1 * 25}, 2, 1e-12, 1e-12);
    tu_assert_close(rv, (const double[]){0.9 * 2 + 0.1 * 14.0 / 3, 0.9 * 3 + 0.1 * 500.0 / 3}, 2,
                    1e-12, 1e-12);
    cr_expect_gt(weft_tensor_version(rm), before, "running stats are updated in place");
}

Test(nn_functional, batch_norm_eval_uses_running_statistics)
{
    const double v[4] = {1, 2, 3, 4};
    weft_tensor *x = tu_tensor(2, (const int64_t[]){2, 2}, v, WEFT_F32);
    weft_tensor *rm = tu_tensor(1, (const int64_t[]){2}, (const double[]){1, 2}, WEFT_F32);
    weft_tensor *rv = tu_tensor(1, (const int64_t[]){2}, (const double[]){4, 9}, WEFT_F32);
    weft_tensor *y = weft_batch_norm(x, rm, rv, NULL, NULL, false, 0.1, 0);
    tu_assert_close(y, (const double[]){0, 0, 1, 2.0 / 3}, 4, 1e-6, 1e-6);
    tu_assert_close(rm, (const double[]){1, 2}, 2, 0, 0);
}

Test(nn_functional, batch_norm_errors)
{
    weft_tensor *x = weft_zeros(2, (const int64_t[]){1, 3}, WEFT_F32, WEFT_CPU);
    cr_expect_null(weft_batch_norm(x, NULL, NULL, NULL, NULL, true, 0.1, 1e-5));
    tu_assert_error(WEFT_ERR_VALUE,
                    "Expected more than 1 value per channel when training, got input size [1, 3]");
    weft_tensor *w4 = weft_ones(1, (const int64_t[]){4}, WEFT_F32, WEFT_CPU);
    cr_expect_null(weft_batch_norm(x, w4, NULL, NULL, NULL, false, 0.1, 1e-5));
    tu_assert_error(WEFT_ERR_RUNTIME, "running_mean should contain 3 elements not 4");
}

Test(nn_functional, layer_norm_normalises_the_last_dims)
{
    const double v[6] = {1, 2, 3, 4, 6, 8};
    weft_tensor *x = tu_tensor(2, (const int64_t[]){2, 3}, v, WEFT_F64);
    weft_tensor *w = tu_tensor(1, (const int64_t[]){3}, (const double[]){1, 2, 3}, WEFT_F64);
    weft_tensor *b = tu_tensor(1, (const int64_t[]){3}, (const double[]){0, 1, 0}, WEFT_F64);
    const int64_t ns[1] = {3};
    weft_tensor *y = weft_layer_norm(x, 1, ns, w, b, 1e-5);
    /* row 0: mean 2, var 2/3; row 1: mean 6, var 8/3 */
    double s0 = sqrt(2.0 / 3 + 1e-5), s1 = sqrt(8.0 / 3 + 1e-5);
    const double expect[6] = {-1 / s0, 1, 3 / s0, -2 / s1, 1, 6 / s1};
    tu_assert_close(y, expect, 6, 1e-12, 1e-12);
    const int64_t bad[1] = {4};
    cr_expect_null(weft_layer_norm(x, 1, bad, NULL, NULL, 1e-5));
    tu_assert_error(WEFT_ERR_RUNTIME,
                    "Given normalized_shape=[4], expected input with shape [*, 4], but got input of "
                    "size[2, 3]");
}

Test(nn_functional, dropout_keeps_with_probability_one_minus_p_and_rescales)
{
    weft_tensor *x = weft_ones(1, (const int64_t[]){10000}, WEFT_F32, WEFT_CPU);
    weft_manual_seed(7);
    weft_tensor *y = weft_dropout(x, 0.25, true);
    double *v = read_all(y);
    int kept = 0;
    for (int i = 0; i < 10000; i++) {
        cr_assert(v[i] == 0 || fabs(v[i] - 1 / 0.75) < 1e-6, "element %d is %g", i, v[i]);
        kept += v[i] != 0;
    }
    cr_expect(kept > 7300 && kept < 7700, "kept %d of 10000", kept);
    free(v);
    /* same seed, same mask (Philox) */
    weft_manual_seed(7);
    double *again = read_all(weft_dropout(x, 0.25, true)), *first = read_all(y);
    cr_expect(memcmp(again, first, 10000 * sizeof(double)) == 0);
    free(again);
    free(first);
}

Test(nn_functional, dropout_edge_probabilities_and_eval)
{
    weft_tensor *x = tu_tensor(1, (const int64_t[]){3}, (const double[]){1, -2, 3}, WEFT_F32);
    tu_assert_close(weft_dropout(x, 0.5, false), (const double[]){1, -2, 3}, 3, 0, 0);
    tu_assert_close(weft_dropout(x, 0, true), (const double[]){1, -2, 3}, 3, 0, 0);
    tu_assert_close(weft_dropout(x, 1, true), (const double[]){0, 0, 0}, 3, 0, 0);
    cr_expect_null(weft_dropout(x, 1.5, true));
    tu_assert_error(WEFT_ERR_VALUE, "dropout probability has to be between 0 and 1, but got 1.5");
    cr_expect_null(weft_dropout(x, -1, false));
    tu_assert_error(WEFT_ERR_VALUE, "dropout probability has to be between 0 and 1, but got -1.0");
}

Test(nn_functional, embedding_picks_rows_for_indices_of_any_shape)
{
    weft_tensor *w = tu_tensor(2, (const int64_t[]){4, 2}, (const double[]){0, 1, 10, 11, 20, 21, 30, 31},
                               WEFT_F32);
    weft_tensor *idx = int64_tensor(2, (const int64_t[]){2, 3}, (const int64_t[]){3, 0, 1, 1, 2, 3});
    weft_tensor *y = weft_embedding(idx, w);
    tu_assert_shape(y, 3, (const int64_t[]){2, 3, 2});
    tu_assert_close(y, (const double[]){30, 31, 0, 1, 10, 11, 10, 11, 20, 21, 30, 31}, 12, 0, 0);
    weft_tensor *bad = int64_tensor(1, (const int64_t[]){2}, (const int64_t[]){1, 4});
    cr_expect_null(weft_embedding(bad, w));
    tu_assert_error(WEFT_ERR_INDEX, "index out of range in self");
    cr_expect_null(weft_embedding(weft_to_dtype(idx, WEFT_F32), w));
    tu_assert_error(WEFT_ERR_RUNTIME,
                    "Expected tensor for argument #1 'indices' to have one of the following scalar "
                    "types: Long, Int; but got float32 tensor instead (while checking arguments "
                    "for embedding)");
}

Test(nn_functional, leaky_relu_scales_negatives)
{
    weft_tensor *x = tu_tensor(1, (const int64_t[]){4}, (const double[]){-2, 0, 3, -0.5}, WEFT_F64);
    tu_assert_close(weft_leaky_relu(x, 0.1), (const double[]){-0.2, 0, 3, -0.05}, 4, 1e-15, 0);
    cr_assert_eq(weft_requires_grad_(x, true), 0);
    weft_tensor *y = weft_leaky_relu(x, 0.1);
    cr_expect_str_eq(weft_grad_fn_name(y), "LeakyReluBackward0");
    cr_assert_eq(weft_backward(weft_sum(y, 0, NULL, false), NULL, false), 0, "%s", weft_error_message());
    tu_assert_close(weft_grad(x), (const double[]){0.1, 0.1, 1, 0.1}, 4, 0, 0);
}

/* ---- cross entropy and nll ----------------------------------------------------------------------- */

/* The loss written out from PyTorch's definition for logits [N, C] (or log-probs). */
static double ce_reference(const double *z, const int64_t *t, int64_t N, int64_t C, const double *w,
                           int64_t ignore, double eps, enum weft_reduction red, bool logits,
                           double *each)
{
    double nll_sum = 0, smooth_sum = 0, wsum = 0;
    for (int64_t i = 0; i < N; i++) {
        double lse = 0, mx = -INFINITY;
        for (int64_t c = 0; c < C; c++)
            mx = fmax(mx, z[i * C + c]);
        for (int64_t c = 0; c < C; c++)
            lse += exp(z[i * C + c] - mx);
        lse = logits ? mx + log(lse) : 0;
        double nll = 0, smooth = 0;
        if (t[i] != ignore) {
            double wt = w ? w[t[i]] : 1;
            nll = -wt * (z[i * C + t[i]] - lse);
            for (int64_t c = 0; c < C; c++)
                smooth -= (w ? w[c] : 1) * (z[i * C + c] - lse);
            wsum += wt;
        }
        if (each)
            each[i] = (1 - eps) * nll + eps / (double)C * smooth;
        nll_sum += nll;
        smooth_sum += smooth;
    }
    if (red == WEFT_REDUCTION_SUM)
        return (1 - eps) * nll_sum + eps / (double)C * smooth_sum;
    /* PyTorch 1.13: the smoothing term's mean has the NLL term's divisor (the targets'
     * summed weights; without weights, the positions not ignored) */
    return (1 - eps) * nll_sum / wsum + eps / (double)C * smooth_sum / wsum;
}

Test(nn_functional, cross_entropy_by_hand)
{
    weft_tensor *z = tu_tensor(2, (const int64_t[]){1, 3}, (const double[]){1, 2, 3}, WEFT_F32);
    weft_tensor *t = int64_tensor(1, (const int64_t[]){1}, (const int64_t[]){2});
    /* log(e + e^2 + e^3) - 3 */
    cr_expect_float_eq(item(weft_cross_entropy(z, t, NULL)), 0.40760596444438, 1e-6);
    struct weft_cross_entropy_params d = weft_cross_entropy_defaults();
    cr_expect_eq(d.reduction, WEFT_REDUCTION_MEAN);
    cr_expect_eq(d.ignore_index, -100);
    cr_expect_eq(d.label_smoothing, 0);
    cr_expect_null(d.weight);
}

Test(nn_functional, cross_entropy_matches_its_formula_for_every_option)
{
    uint64_t seed = 17;
    const int64_t N = 6, C = 4;
    double zv[24], each[6];
    weft_tensor *z = tu_random_tensor(2, (const int64_t[]){N, C}, WEFT_F64, -3, 3, &seed, zv);
    const int64_t tv[6] = {0, 3, -100, 2, 1, 3};
    weft_tensor *t = int64_tensor(1, &N, tv);
    const double wv[4] = {0.5, 2, 1, 3};
    weft_tensor *w = tu_tensor(1, &C, wv, WEFT_F64);
    for (int weighted = 0; weighted < 2; weighted++)
        for (int s = 0; s < 3; s++)
            for (int r = 0; r < 3; r++) {
                const double eps = (const double[]){0, 0.1, 0.7}[s];
                struct weft_cross_entropy_params p = {(enum weft_reduction)r, -100, eps,
                                                      weighted ? w : NULL};
                double expect = ce_reference(zv, tv, N, C, weighted ? wv : NULL, -100, eps,
                                             p.reduction, true, each);
                weft_tensor *loss = weft_cross_entropy(z, t, &p);
                cr_assert_not_null(loss, "%s", weft_error_message());
                if (p.reduction == WEFT_REDUCTION_NONE) {
                    tu_assert_shape(loss, 1, &N);
                    tu_assert_close(loss, each, N, 1e-12, 1e-12);
                    cr_expect_float_eq(each[2], 0, 0, "ignored positions give 0");
                } else {
                    cr_expect_eq(loss->ndim, 0);
                    cr_expect_float_eq(item(loss), expect, 1e-12, "weighted %d eps %g red %d", weighted,
                                       eps, r);
                }
            }
}

/* Values from PyTorch 1.13 (F.cross_entropy(x, t, ignore_index=3, label_smoothing=0.1),
 * then with weight=w; the loss and x.grad printed in float64): the padding-token setup of
 * language models, where smoothing is averaged over the targets not ignored. */
Test(nn_functional, cross_entropy_smoothing_with_ignored_targets_matches_pytorch)
{
    const double xv[30] = {0.5, -1.0, 2.0, 0.1, -0.3, 1.5, 0.2,  -0.7, 0.9, 0.0,
                           -2.0, 1.0, 0.3, 0.4, 1.1,  0.0, 0.0,  0.5, -0.5, 1.0,
                           0.7, -0.2, -1.3, 2.2, 0.6, 1.0, 2.0, -1.0, 0.3, -0.6};
    const int64_t tv[6] = {0, 3, 1, 3, 2, 4};
    const double wv[5] = {1.0, 2.0, 0.5, 1.5, 3.0};
    const double grad[2][30] = {
        {-0.193367109175, 0.003173902797, 0.159177226427, 0.019555761064, 0.011460218887, 0, 0,
         0, 0, 0, -0.001110816651, -0.151883664233, 0.033791424328, 0.037871154038,
         0.081331902517, 0, 0, 0, 0, 0, 0.031083203316, 0.009670335695, -0.225116669459,
         0.156713697925, 0.027649432523, 0.049919720255, 0.144287277593, 0.002432575896,
         0.022272325967, -0.218911899711},
        {-0.117642545062, -0.000821946483, 0.105555606161, 0.011402527217, 0.001506358166, 0, 0,
         0, 0, 0, 0.001614030378, -0.188856604244, 0.045249964113, 0.047093822717,
         0.094898787036, 0, 0, 0, 0, 0, 0.010468156322, -0.000646827832, -0.068936103612,
         0.056089449683, 0.003025325439, 0.093581784572, 0.25659176241, 0.011542872038,
         0.043383909086, -0.405100328107}};
    const double loss_expected[2] = {2.494749504066373, 2.3613934722212933};
    weft_tensor *w = tu_tensor(1, (const int64_t[]){5}, wv, WEFT_F64);
    weft_tensor *t = int64_tensor(1, (const int64_t[]){6}, tv);
    for (int weighted = 0; weighted < 2; weighted++) {
        weft_tensor *x = tu_tensor(2, (const int64_t[]){6, 5}, xv, WEFT_F64);
        cr_assert_eq(weft_requires_grad_(x, true), 0);
        struct weft_cross_entropy_params p = {WEFT_REDUCTION_MEAN, 3, 0.1, weighted ? w : NULL};
        weft_tensor *loss = weft_cross_entropy(x, t, &p);
        cr_assert_not_null(loss, "%s", weft_error_message());
        cr_expect_float_eq(item(loss), loss_expected[weighted], 1e-12, "weighted %d: %.15g",
                           weighted, item(loss));
        cr_assert_eq(weft_backward(loss, NULL, false), 0, "%s", weft_error_message());
        tu_assert_close(weft_grad(x), grad[weighted], 30, 1e-9, 1e-11);
    }
}

Test(nn_functional, cross_entropy_over_spatial_dims_and_a_single_sample)
{
    /* [N=2, C=3, 2] against the [N*2, C] rows it is made of */
    uint64_t seed = 23;
    double zv[12], rows[12], each[4];
    weft_tensor *z = tu_random_tensor(3, (const int64_t[]){2, 3, 2}, WEFT_F64, -2, 2, &seed, zv);
    const int64_t tv[4] = {2, 0, 1, -100};
    weft_tensor *t = int64_tensor(2, (const int64_t[]){2, 2}, tv);
    for (int n = 0; n < 2; n++)
        for (int d = 0; d < 2; d++)
            for (int c = 0; c < 3; c++)
                rows[(n * 2 + d) * 3 + c] = zv[(n * 3 + c) * 2 + d];
    struct weft_cross_entropy_params p = {WEFT_REDUCTION_NONE, -100, 0.2, NULL};
    ce_reference(rows, tv, 4, 3, NULL, -100, 0.2, WEFT_REDUCTION_NONE, true, each);
    weft_tensor *loss = weft_cross_entropy(z, t, &p);
    tu_assert_shape(loss, 2, (const int64_t[]){2, 2});
    tu_assert_close(loss, each, 4, 1e-12, 1e-12);
    p.reduction = WEFT_REDUCTION_MEAN;
    cr_expect_float_eq(item(weft_cross_entropy(z, t, &p)),
                       ce_reference(rows, tv, 4, 3, NULL, -100, 0.2, WEFT_REDUCTION_MEAN, true, NULL),
                       1e-12);
    /* a 1-D input is one sample with a 0-dim target */
    weft_tensor *z1 = tu_tensor(1, (const int64_t[]){3}, (const double[]){1, 2, 3}, WEFT_F64);
    int64_t two = 2;
    weft_tensor *t0 = weft_from_host(&two, 0, NULL, WEFT_I64, WEFT_CPU);
    cr_expect_float_eq(item(weft_cross_entropy(z1, t0, NULL)), 0.40760596444438, 1e-12);
}

/* Class-probability targets (a target of the input's shape, PyTorch 1.13's
 * cross_entropy_loss_prob_target): gradcheck of input and target in float64 for every
 * reduction, with and without class weights and label smoothing, over [N, C], [C]
 * (unbatched) and [N, C, d1, d2]; and the loss by hand for one row. */
struct prob_ce {
    enum weft_reduction reduction;
    double smoothing;
    weft_tensor *weight;
};

static weft_tensor *apply_prob_ce(void *ctx, weft_tensor *const *in)
{
    const struct prob_ce *c = ctx;
    struct weft_cross_entropy_params p = {c->reduction, -100, c->smoothing, c->weight};
    return weft_cross_entropy(in[0], in[1], &p);
}

Test(nn_functional, cross_entropy_with_class_probabilities_passes_gradcheck)
{
    uint64_t seed = 32;
    const int64_t shapes[3][4] = {{3, 4}, {4}, {2, 4, 3, 2}};
    const int ndims[3] = {2, 1, 4};
    weft_tensor *w = tu_random_tensor(1, (const int64_t[]){4}, WEFT_F64, 0.5, 2, &seed, NULL);
    for (int s = 0; s < 3; s++)
        for (int r = 0; r < 3; r++)
            for (int k = 0; k < 4; k++) {
                weft_tensor *in[2] = {
                    tu_random_tensor(ndims[s], shapes[s], WEFT_F64, -2, 2, &seed, NULL),
                    tu_random_tensor(ndims[s], shapes[s], WEFT_F64, 0, 1, &seed, NULL)};
                cr_assert_eq(weft_requires_grad_(in[0], true), 0);
                cr_assert_eq(weft_requires_grad_(in[1], true), 0);
                struct prob_ce c = {(enum weft_reduction)r, k & 1 ? 0.2 : 0, k & 2 ? w : NULL};
                char what[96];
                snprintf(what, sizeof what, "shape %d, reduction %d, smoothing %g, weight %d", s, r,
                         c.smoothing, c.weight != NULL);
                expect_gradcheck(apply_prob_ce, &c, 2, in, what);
            }
    /* one row by hand: -sum_c t_c log softmax(z)_c */
    weft_tensor *z = tu_tensor(2, (const int64_t[]){1, 3}, (const double[]){1, 2, 3}, WEFT_F64);
    weft_tensor *t = tu_tensor(2, (const int64_t[]){1, 3}, (const double[]){0.2, 0.3, 0.5}, WEFT_F64);
    double lse = log(exp(1) + exp(2) + exp(3));
    cr_expect_float_eq(item(weft_cross_entropy(z, t, NULL)),
                       -(0.2 * (1 - lse) + 0.3 * (2 - lse) + 0.5 * (3 - lse)), 1e-12);
    /* an integer target of the input's shape is PyTorch's error */
    weft_tensor *ti = weft_zeros(2, (const int64_t[]){1, 3}, WEFT_I64, WEFT_CPU);
    cr_expect_null(weft_cross_entropy(z, ti, NULL));
    tu_assert_error(WEFT_ERR_RUNTIME, "Expected floating point type for target with class "
                                      "probabilities, got Long");
}

/* Image ops keep a channels-last input's memory format (PyTorch's suggest_memory_format;
 * bicubic upsampling excepted, as in PyTorch), with the values and gradients of the
 * contiguous input (issue 32). */
static weft_tensor *image_op(int k, weft_tensor *x, weft_tensor *w)
{
    static const char *const modes[] = {"nearest", "bilinear", "area", "bicubic"};
    struct weft_pool2d_params pool = {.kernel = {2, 2}, .stride = {1, 1}, .count_include_pad = true};
    if (k < 4) {
        struct weft_interpolate_params p = {.mode = modes[k], .nscale = 2, .scale_factor = {2, 1.5},
                                            .align_corners = -1, .recompute_scale_factor = -1};
        return weft_interpolate(x, &p);
    }
    switch (k) {
    case 4: return weft_max_pool2d(x, &pool);
    case 5: return weft_avg_pool2d(x, &pool);
    case 6: return weft_adaptive_avg_pool2d(x, 3, 2);
    default: return weft_conv2d(x, w, NULL, NULL);
    }
}

Test(nn_functional, image_ops_keep_channels_last_with_the_same_values_and_gradients)
{
    uint64_t seed = 8;
    const int64_t nhwc[4] = {2, 4, 5, 3};
    const int perm[4] = {0, 3, 1, 2};
    weft_tensor *w = tu_random_tensor(4, (const int64_t[]){4, 3, 2, 2}, WEFT_F64, -1, 1, &seed, NULL);
    for (int k = 0; k < 8; k++) {
        weft_scope_push();
        uint64_t s2 = 9;
        weft_tensor *base = tu_random_tensor(4, nhwc, WEFT_F64, -2, 2, &s2, NULL);
        weft_tensor *cl = weft_detach(weft_permute(base, 4, perm)); /* [2, 3, 4, 5], NHWC */
        weft_tensor *plain = weft_contiguous(cl);
        cr_assert_eq(weft_requires_grad_(cl, true), 0);
        cr_assert_eq(weft_requires_grad_(plain, true), 0);
        weft_tensor *y = image_op(k, cl, w), *yp = image_op(k, plain, w);
        cr_assert(y && yp, "op %d: %s", k, weft_error_message());
        bool keeps = k != 3; /* bicubic gives a contiguous result in PyTorch */
        cr_expect_eq(y->stride[1] == 1, keeps, "op %d: channels-last result %d", k, keeps);
        double *want = read_all(yp);
        tu_assert_close(y, want, weft_tensor_numel(yp), 1e-12, 1e-12);
        free(want);
        weft_tensor *g = tu_random_tensor(4, yp->shape, WEFT_F64, -1, 1, &s2, NULL);
        cr_assert_eq(weft_backward(y, g, false), 0, "%s", weft_error_message());
        cr_assert_eq(weft_backward(yp, g, false), 0, "%s", weft_error_message());
        double *gw = read_all(weft_grad(plain));
        tu_assert_close(weft_grad(cl), gw, weft_tensor_numel(cl), 1e-12, 1e-12);
        free(gw);
        weft_scope_pop();
    }
}

Test(nn_functional, cross_entropy_is_stable_for_huge_logits)
{
    weft_tensor *z = tu_tensor(2, (const int64_t[]){2, 3}, (const double[]){1e4, 0, -1e4, -5e3, 5e3, 0},
                               WEFT_F32);
    cr_assert_eq(weft_requires_grad_(z, true), 0);
    weft_tensor *t = int64_tensor(1, (const int64_t[]){2}, (const int64_t[]){1, 1});
    weft_tensor *loss = weft_cross_entropy(z, t, NULL);
    cr_expect_float_eq(item(loss), 1e4 / 2, 1e-2);
    cr_assert_eq(weft_backward(loss, NULL, false), 0, "%s", weft_error_message());
    /* (softmax - onehot) / N: row 0 -> [0.5, -0.5, 0], row 1 -> [0, 0, 0] */
    tu_assert_close(weft_grad(z), (const double[]){0.5, -0.5, 0, 0, 0, 0}, 6, 1e-6, 1e-6);
}

Test(nn_functional, cross_entropy_records_one_node_with_the_direct_gradient)
{
    weft_tensor *z = tu_tensor(2, (const int64_t[]){2, 2}, (const double[]){0, 0, 1, 3}, WEFT_F64);
    cr_assert_eq(weft_requires_grad_(z, true), 0);
    weft_tensor *t = int64_tensor(1, (const int64_t[]){2}, (const int64_t[]){0, 1});
    weft_tensor *loss = weft_cross_entropy(z, t, NULL);
    cr_expect_str_eq(weft_grad_fn_name(loss), "NllLossBackward0");
    cr_assert_eq(weft_backward(loss, NULL, false), 0, "%s", weft_error_message());
    double s = 1 / (1 + exp(2)); /* softmax of [1, 3] is [s, 1 - s] */
    tu_assert_close(weft_grad(z), (const double[]){(0.5 - 1) / 2, 0.5 / 2, s / 2, (1 - s - 1) / 2}, 4,
                    1e-12, 1e-12);
}

Test(nn_functional, nll_loss_picks_minus_the_target_log_probability)
{
    uint64_t seed = 31;
    double zv[15];
    weft_tensor *lp = tu_random_tensor(2, (const int64_t[]){5, 3}, WEFT_F64, -4, 0, &seed, zv);
    const int64_t tv[5] = {2, 1, 7, 0, 2};
    weft_tensor *t = int64_tensor(1, (const int64_t[]){5}, tv);
    const double wv[3] = {1, 0.5, 4};
    weft_tensor *w = tu_tensor(1, (const int64_t[]){3}, wv, WEFT_F64);
    for (int r = 0; r < 3; r++) {
        struct weft_cross_entropy_params p = {(enum weft_reduction)r, 7, 0.5 /* ignored */, w};
        double each[5];
        double expect = ce_reference(zv, tv, 5, 3, wv, 7, 0, p.reduction, false, each);
        weft_tensor *loss = weft_nll_loss(lp, t, &p);
        if (r == WEFT_REDUCTION_NONE)
            tu_assert_close(loss, each, 5, 1e-12, 1e-12);
        else
            cr_expect_float_eq(item(loss), expect, 1e-12);
    }
}

Test(nn_functional, class_losses_errors_use_pytorch_words)
{
    weft_tensor *z = weft_zeros(2, (const int64_t[]){3, 5}, WEFT_F32, WEFT_CPU);
    weft_tensor *t4 = weft_zeros(1, (const int64_t[]){4}, WEFT_I64, WEFT_CPU);
    cr_expect_null(weft_cross_entropy(z, t4, NULL));
    tu_assert_error(WEFT_ERR_VALUE, "Expected input batch_size (3) to match target batch_size (4).");
    weft_tensor *t = int64_tensor(1, (const int64_t[]){3}, (const int64_t[]){1, 7, -100});
    cr_expect_null(weft_cross_entropy(z, t, NULL));
    tu_assert_error(WEFT_ERR_INDEX, "Target 7 is out of bounds.");
    weft_tensor *neg = int64_tensor(1, (const int64_t[]){3}, (const int64_t[]){1, -1, 0});
    cr_expect_null(weft_nll_loss(z, neg, NULL));
    tu_assert_error(WEFT_ERR_INDEX, "Target -1 is out of bounds.");
    weft_tensor *ok = int64_tensor(1, (const int64_t[]){3}, (const int64_t[]){1, 2, 0});
    struct weft_cross_entropy_params p = weft_cross_entropy_defaults();
    p.label_smoothing = 1.5;
    cr_expect_null(weft_cross_entropy(z, ok, &p));
    tu_assert_error(WEFT_ERR_RUNTIME, "label_smoothing must be between 0.0 and 1.0. Got: 1.5");
    p = weft_cross_entropy_defaults();
    p.weight = weft_ones(1, (const int64_t[]){4}, WEFT_F32, WEFT_CPU);
    cr_expect_null(weft_cross_entropy(z, ok, &p));
    tu_assert_error(WEFT_ERR_RUNTIME,
                    "weight tensor should be defined either for all 5 classes or no classes but got "
                    "weight tensor of shape: [4]");
    cr_expect_null(weft_cross_entropy(z, weft_to_dtype(ok, WEFT_I32), NULL));
    tu_assert_error(WEFT_ERR_RUNTIME, "expected scalar type Long but found Int");
    weft_tensor *z3 = weft_zeros(3, (const int64_t[]){2, 5, 4}, WEFT_F32, WEFT_CPU);
    cr_expect_null(weft_cross_entropy(z3, weft_zeros(2, (const int64_t[]){2, 3}, WEFT_I64, WEFT_CPU), NULL));
    tu_assert_error(WEFT_ERR_RUNTIME, "Expected target size [2, 4], got [2, 3]");
}

/* ---- pointwise losses ------------------------------------------------------------------------------ */

Test(nn_functional, mse_and_l1_losses_with_each_reduction)
{
    weft_tensor *x = tu_tensor(1, (const int64_t[]){4}, (const double[]){1, 2, 3, 4}, WEFT_F32);
    weft_tensor *y = tu_tensor(1, (const int64_t[]){4}, (const double[]){2, 2, 5, 1}, WEFT_F32);
    tu_assert_close(weft_mse_loss(x, y, WEFT_REDUCTION_NONE), (const double[]){1, 0, 4, 9}, 4, 0, 0);
    cr_expect_float_eq(item(weft_mse_loss(x, y, WEFT_REDUCTION_SUM)), 14, 0);
    cr_expect_float_eq(item(weft_mse_loss(x, y, WEFT_REDUCTION_MEAN)), 3.5, 0);
    tu_assert_close(weft_l1_loss(x, y, WEFT_REDUCTION_NONE), (const double[]){1, 0, 2, 3}, 4, 0, 0);
    cr_expect_float_eq(item(weft_l1_loss(x, y, WEFT_REDUCTION_SUM)), 6, 0);
    cr_expect_float_eq(item(weft_l1_loss(x, y, WEFT_REDUCTION_MEAN)), 1.5, 0);
    cr_expect_null(weft_grad_fn_name(weft_mse_loss(x, y, WEFT_REDUCTION_MEAN)), "no input requires grad");
    cr_assert_eq(weft_requires_grad_(x, true), 0);
    cr_expect_str_eq(weft_grad_fn_name(weft_mse_loss(x, y, WEFT_REDUCTION_MEAN)), "MseLossBackward0");
    /* PyTorch's l1_loss is (x - y).abs() then the reduction: named after its last op */
    cr_expect_str_eq(weft_grad_fn_name(weft_l1_loss(x, y, WEFT_REDUCTION_NONE)), "AbsBackward0");
    cr_expect_str_eq(weft_grad_fn_name(weft_binary_cross_entropy_with_logits(x, y, NULL, WEFT_REDUCTION_SUM)),
                     "BinaryCrossEntropyWithLogitsBackward0");
}

Test(nn_functional, bce_with_logits_is_stable_and_weights_positives)
{
    /* loss = max(x, 0) - x*y + log(1 + exp(-|x|)); with pos_weight:
     * (1 - y) x + ((pw - 1) y + 1) (log(1 + exp(-|x|)) + max(-x, 0)) */
    const double xv[4] = {0.5, -1, 200, -200}, yv[4] = {1, 0, 0, 1}, pwv[4] = {2, 3, 0.5, 1.5};
    weft_tensor *x = tu_tensor(1, (const int64_t[]){4}, xv, WEFT_F32);
    weft_tensor *y = tu_tensor(1, (const int64_t[]){4}, yv, WEFT_F32);
    weft_tensor *pw = tu_tensor(1, (const int64_t[]){4}, pwv, WEFT_F32);
    double plain[4], weighted[4], sum = 0;
    for (int i = 0; i < 4; i++) {
        double sp = log1p(exp(-fabs(xv[i]))) + fmax(-xv[i], 0);
        plain[i] = fmax(xv[i], 0) - xv[i] * yv[i] + log1p(exp(-fabs(xv[i])));
        weighted[i] = (1 - yv[i]) * xv[i] + ((pwv[i] - 1) * yv[i] + 1) * sp;
        sum += plain[i];
    }
    tu_assert_close(weft_binary_cross_entropy_with_logits(x, y, NULL, WEFT_REDUCTION_NONE), plain, 4,
                    1e-6, 1e-6);
    tu_assert_close(weft_binary_cross_entropy_with_logits(x, y, pw, WEFT_REDUCTION_NONE), weighted, 4,
                    1e-6, 1e-6);
    cr_expect_float_eq(item(weft_binary_cross_entropy_with_logits(x, y, NULL, WEFT_REDUCTION_MEAN)),
                       sum / 4, 1e-4);
    cr_expect_null(weft_binary_cross_entropy_with_logits(x, weft_zeros(1, (const int64_t[]){3}, WEFT_F32,
                                                                         WEFT_CPU),
                                                         NULL, WEFT_REDUCTION_MEAN));
    tu_assert_error(WEFT_ERR_VALUE,
                    "Target size (torch.Size([3])) must be the same as input size (torch.Size([4]))");
}

/* ---- gradients ------------------------------------------------------------------------------------- */

/* Forward and backward of sum(conv2d(x, w, b) * r) for one geometry in dt; the output
 * and the three gradients into out (y, gx, gw, gb, each as doubles). */
static void conv_fwd_bwd(const struct conv_case *c, enum weft_dtype dt, uint64_t seed,
                         bool x_grad, double **out, int64_t *counts)
{
    weft_scope_push();
    const int64_t xs[4] = {c->N, c->C, c->H, c->W}, ws[4] = {c->Cout, c->C, c->kh, c->kw},
                  bs[1] = {c->Cout};
    /* float32 values in both runs, so that only the arithmetic differs */
#define VALUES(nd, shape) \
    weft_to_dtype(weft_to_dtype(tu_random_tensor(nd, shape, WEFT_F64, -1, 1, &seed, NULL), \
                                WEFT_F32), dt)
    weft_tensor *x = VALUES(4, xs), *w = VALUES(4, ws), *b = VALUES(1, bs);
    cr_assert(x && w && b);
    cr_assert_eq(weft_requires_grad_(w, true), 0);
    cr_assert_eq(weft_requires_grad_(b, true), 0);
    cr_assert_eq(weft_requires_grad_(x, x_grad), 0);
    weft_tensor *y = weft_conv2d(x, w, b, &c->p);
    cr_assert_not_null(y, "%s", weft_error_message());
    /* a gradient that is not all ones, so that every tap's weight matters */
    weft_tensor *r = VALUES(y->ndim, y->shape);
#undef VALUES
    cr_assert_eq(weft_backward(weft_sum(weft_mul(y, r), 0, NULL, false), NULL, false), 0, "%s",
                 weft_error_message());
    weft_tensor *parts[4] = {y, x_grad ? weft_grad(x) : NULL, weft_grad(w), weft_grad(b)};
    for (int i = 0; i < 4; i++) {
        out[i] = NULL;
        counts[i] = 0;
        if (!parts[i])
            continue;
        counts[i] = weft_tensor_numel(parts[i]);
        out[i] = read_all(parts[i]);
    }
    weft_scope_pop();
}

/* How far the cpu allocator's peak rose over a conv2d forward with a weight that needs
 * its gradient (the columns of im2col are kept for it). */
static uint64_t conv_forward_peak_rise(enum weft_dtype dt)
{
    weft_scope_push();
    uint64_t seed = 5;
    const int64_t xs[4] = {8, 16, 14, 14}, ws[4] = {8, 16, 3, 3};
    weft_tensor *x = tu_random_tensor(4, xs, dt, -1, 1, &seed, NULL);
    weft_tensor *w = tu_random_tensor(4, ws, dt, -1, 1, &seed, NULL);
    cr_assert_eq(weft_requires_grad_(w, true), 0);
    struct weft_memory_stats before = {.struct_size = sizeof before}, after = before;
    /* cached blocks of an earlier call would serve smaller requests and count whole */
    weft_empty_cache(WEFT_CPU);
    weft_reset_peak_memory_stats(WEFT_CPU);
    cr_assert_eq(weft_memory_stats(WEFT_CPU, &before), 0);
    const struct weft_conv2d_params p = {{1, 1}, {1, 1}, {1, 1}, 1};
    cr_assert_not_null(weft_conv2d(x, w, NULL, &p), "%s", weft_error_message());
    cr_assert_eq(weft_memory_stats(WEFT_CPU, &after), 0);
    weft_scope_pop();
    return after.peak_allocated_bytes - before.allocated_bytes;
}

/* The named path makes no columns: im2col's [8, 144, 196] would be 903 KB in float32. The
 * float64 run (im2col: no float64 kernel) shows that the measure sees columns. */
Test(nn_functional, conv2d_named_forward_makes_no_im2col_columns)
{
    int op = weft_op_register(WEFT_OP_CONV2D_NAME);
    if (op < 0 || !weft_kernel_lookup(op, WEFT_DEVICE_CPU, WEFT_LAYOUT_STRIDED, WEFT_F32))
        cr_skip_test("this weft-cpu has no conv2d kernel (built without oneDNN)");
    const uint64_t columns = 8 * 144 * 196;
    uint64_t f64 = conv_forward_peak_rise(WEFT_F64), f32 = conv_forward_peak_rise(WEFT_F32);
    cr_expect_geq(f64, columns * 8, "float64 (im2col) peak rose %llu bytes", (unsigned long long)f64);
    cr_expect_lt(f32, columns * 4, "float32 peak rose %llu bytes: columns were made",
                 (unsigned long long)f32);
}

/* float32 convolutions without groups run as the backend's named ops where it has them
 * (the cpu plugin's oneDNN convolution, [cpu] conv = onednn): forward and both backward
 * passes against the float64 im2col path, whose gradients gradcheck verifies. */
Test(nn_functional, conv2d_named_ops_match_the_float64_im2col_path_forward_and_backward)
{
    int op = weft_op_register(WEFT_OP_CONV2D_NAME);
    if (op < 0 || !weft_kernel_lookup(op, WEFT_DEVICE_CPU, WEFT_LAYOUT_STRIDED, WEFT_F32))
        cr_skip_test("this weft-cpu has no conv2d kernel (built without oneDNN)");
    static const struct conv_case cases[] = {
        {4, 1, 28, 28, 8, 3, 3, {{1, 1}, {1, 1}, {1, 1}, 1}, true},   /* the MNIST CNN's conv1 */
        {4, 8, 14, 14, 16, 3, 3, {{1, 1}, {1, 1}, {1, 1}, 1}, true},  /* and its conv2 */
        {2, 3, 9, 8, 5, 3, 2, {{2, 3}, {1, 0}, {1, 1}, 1}, true},     /* strides, non-square */
        {2, 2, 11, 9, 3, 3, 3, {{1, 2}, {2, 1}, {2, 3}, 1}, true},    /* dilation */
        {2, 3, 7, 7, 4, 2, 2, {{3, 3}, {0, 0}, {1, 1}, 1}, true},     /* stride not dividing */
        {3, 5, 4, 6, 7, 1, 1, {{1, 1}, {0, 0}, {1, 1}, 1}, true},     /* pointwise */
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++)
        for (int x_grad = 0; x_grad < 2; x_grad++) {
            double *got[4], *want[4];
            int64_t n[4], n64[4];
            conv_fwd_bwd(&cases[k], WEFT_F32, 90 + k, x_grad, got, n);
            conv_fwd_bwd(&cases[k], WEFT_F64, 90 + k, x_grad, want, n64);
            static const char *const what[4] = {"output", "input grad", "weight grad",
                                                "bias grad"};
            for (int i = 0; i < 4; i++) {
                cr_assert_eq(n[i], n64[i], "case %zu %s", k, what[i]);
                for (int64_t j = 0; j < n[i]; j++)
                    cr_assert(fabs(got[i][j] - want[i][j]) <= 1e-4 + 1e-4 * fabs(want[i][j]),
                              "case %zu (x grad %d) %s [%lld]: %.9g, expected %.9g", k, x_grad,
                              what[i], (long long)j, got[i][j], want[i][j]);
                free(got[i]);
                free(want[i]);
            }
        }
}


struct conv_ctx {
    struct weft_conv2d_params p;
    bool bias;
};

static weft_tensor *apply_conv(void *ctx, weft_tensor *const *in)
{
    struct conv_ctx *c = ctx;
    return weft_conv2d(in[0], in[1], c->bias ? in[2] : NULL, &c->p);
}

Test(nn_functional, conv2d_backward_passes_gradcheck)
{
    uint64_t seed = 41;
    static const struct {
        int64_t N, C, H, W, Cout, kh, kw;
        struct weft_conv2d_params p;
        bool bias;
    } cases[] = {
        {2, 3, 5, 5, 4, 3, 3, {{1, 1}, {1, 1}, {1, 1}, 1}, true},
        {1, 4, 7, 6, 4, 3, 2, {{2, 1}, {1, 0}, {2, 1}, 2}, true},  /* stride, dilation, groups */
        {2, 2, 5, 6, 3, 1, 1, {{1, 1}, {0, 0}, {1, 1}, 1}, false}, /* pointwise */
        {1, 3, 6, 6, 3, 3, 3, {{2, 2}, {2, 1}, {1, 1}, 3}, true},  /* depthwise, padding */
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        int64_t G = cases[k].p.groups;
        const int64_t xs[4] = {cases[k].N, cases[k].C, cases[k].H, cases[k].W};
        const int64_t ws[4] = {cases[k].Cout, cases[k].C / G, cases[k].kh, cases[k].kw};
        weft_tensor *in[3] = {leaf64(4, xs, -1, 1, &seed), leaf64(4, ws, -1, 1, &seed),
                              leaf64(1, &cases[k].Cout, -1, 1, &seed)};
        struct conv_ctx c = {cases[k].p, cases[k].bias};
        expect_gradcheck(apply_conv, &c, cases[k].bias ? 3 : 2, in, "conv2d");
    }
    /* an unbatched image */
    weft_tensor *in[3] = {leaf64(3, (const int64_t[]){2, 4, 4}, -1, 1, &seed),
                          leaf64(4, (const int64_t[]){2, 2, 2, 2}, -1, 1, &seed), NULL};
    struct conv_ctx c = {{{1, 1}, {1, 1}, {1, 1}, 1}, false};
    expect_gradcheck(apply_conv, &c, 2, in, "conv2d unbatched");
    weft_tensor *y = weft_conv2d(weft_unsqueeze(in[0], 0), in[1], NULL, &c.p);
    cr_expect_str_eq(weft_grad_fn_name(y), "ConvolutionBackward0");
}

/* The gradients of sum(y * w) for x and the weight, read back as doubles. */
static void conv_grads(weft_tensor *x, weft_tensor *w, const struct weft_conv2d_params *p,
                       double *gx, double *gw)
{
    cr_assert_eq(weft_requires_grad_(x, true), 0);
    cr_assert_eq(weft_requires_grad_(w, true), 0);
    weft_tensor *y = weft_conv2d(x, w, NULL, p);
    weft_tensor *loss = weft_sum(weft_mul(y, weft_sin(weft_to_dtype(y, WEFT_F32))), 0, NULL, false);
    cr_assert_eq(weft_backward(loss, NULL, false), 0, "%s", weft_error_message());
    tu_read(weft_grad(x), gx);
    tu_read(weft_grad(w), gw);
}

Test(nn_functional, conv2d_and_pool_backward_in_16_bit_floats_follow_float64)
{
    uint64_t seed = 67;
    const int64_t xs[4] = {2, 4, 6, 6}, ws[4] = {4, 2, 3, 3};
    weft_tensor *x64 = tu_random_tensor(4, xs, WEFT_F64, -1, 1, &seed, NULL);
    weft_tensor *w64 = tu_random_tensor(4, ws, WEFT_F64, -1, 1, &seed, NULL);
    const struct weft_conv2d_params p = {{2, 1}, {1, 1}, {1, 2}, 2};
    enum weft_dtype types[2] = {WEFT_F16, WEFT_BF16};
    double gx[288], gw[72], rx[288], rw[72];
    for (int k = 0; k < 2; k++) {
        /* the reference starts from the same rounded values */
        weft_tensor *xh = weft_to_dtype(x64, types[k]), *wh = weft_to_dtype(w64, types[k]);
        weft_tensor *xd = weft_to_dtype(xh, WEFT_F64), *wd = weft_to_dtype(wh, WEFT_F64);
        conv_grads(xh, wh, &p, gx, gw);
        conv_grads(xd, wd, &p, rx, rw);
        double tol = types[k] == WEFT_F16 ? 2e-2 : 1e-1;
        for (int i = 0; i < 288; i++)
            cr_expect(fabs(gx[i] - rx[i]) <= tol * (1 + fabs(rx[i])), "%s x[%d]: %g vs %g",
                      weft_dtype_name(types[k]), i, gx[i], rx[i]);
        for (int i = 0; i < 72; i++)
            cr_expect(fabs(gw[i] - rw[i]) <= tol * (1 + fabs(rw[i])), "%s w[%d]: %g vs %g",
                      weft_dtype_name(types[k]), i, gw[i], rw[i]);
    }
    /* pooling: each output's gradient lands on its window in any float type */
    struct weft_pool2d_params pp = {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}};
    for (int k = 0; k < 2; k++) {
        for (int avg = 0; avg < 2; avg++) {
            weft_tensor *xh = weft_to_dtype(x64, types[k]), *xd = weft_to_dtype(xh, WEFT_F64);
            weft_tensor *pair[2] = {xh, xd};
            double g[2][288];
            for (int j = 0; j < 2; j++) {
                cr_assert_eq(weft_requires_grad_(pair[j], true), 0);
                weft_tensor *y = avg ? weft_avg_pool2d(pair[j], &pp) : weft_max_pool2d(pair[j], &pp);
                cr_assert_eq(weft_backward(weft_sum(y, 0, NULL, false), NULL, false), 0, "%s",
                             weft_error_message());
                tu_read(weft_grad(pair[j]), g[j]);
            }
            for (int i = 0; i < 288; i++)
                cr_expect(fabs(g[0][i] - g[1][i]) <= 1e-2 * (1 + fabs(g[1][i])), "%s %s [%d]: %g vs %g",
                          weft_dtype_name(types[k]), avg ? "avg" : "max", i, g[0][i], g[1][i]);
        }
    }
}

/* bfloat16 pooling backward and col2im accumulate in float32 exactly as the float32
 * kernels do (same loops, same order) and round once at the end, through the cpu
 * plugin's vector conversion: on inputs that bfloat16 holds exactly, each result must be
 * the float32 result rounded, bit for bit. 19 x 23 planes: 437 elements, no multiple of
 * any vector width. */
static void expect_rounded_once(const weft_tensor *h, const weft_tensor *f, const char *what)
{
    int64_t n = weft_tensor_numel(f);
    const uint16_t *hv = weft_tensor_data(h);
    const float *fv = weft_tensor_data(f);
    for (int64_t i = 0; i < n; i++)
        cr_assert_eq(hv[i], weft_float_to_bf16(fv[i]), "%s [%lld]: 0x%04x, float32 %.9g",
                     what, (long long)i, hv[i], fv[i]);
}

Test(nn_functional, bfloat16_pool_backward_and_col2im_round_the_float32_sums_once)
{
    uint64_t seed = 71;
    const int64_t xs[4] = {2, 3, 19, 23};
    weft_tensor *xh = tu_random_tensor(4, xs, WEFT_BF16, -2, 2, &seed, NULL);
    weft_tensor *wh = tu_random_tensor(4, xs, WEFT_BF16, -2, 2, &seed, NULL);
    weft_tensor *xf = weft_to_dtype(xh, WEFT_F32), *wf = weft_to_dtype(wh, WEFT_F32);
    /* overlapping windows: each pixel sums several shares */
    struct weft_pool2d_params pp = {.kernel = {3, 3}, .stride = {1, 1}, .padding = {1, 1}};
    for (int avg = 0; avg < 2; avg++) {
        weft_tensor *x[2] = {weft_detach(xh), weft_detach(xf)}, *w[2] = {wh, wf};
        for (int j = 0; j < 2; j++) {
            cr_assert_eq(weft_requires_grad_(x[j], true), 0);
            weft_tensor *y = avg ? weft_avg_pool2d(x[j], &pp) : weft_max_pool2d(x[j], &pp);
            /* upstream gradient w (exact in both dtypes) */
            weft_tensor *loss = weft_sum(weft_mul(y, w[j]), 0, NULL, false);
            cr_assert_eq(weft_backward(loss, NULL, false), 0, "%s", weft_error_message());
        }
        expect_rounded_once(weft_grad(x[0]), weft_grad(x[1]), avg ? "avg_pool2d" : "max_pool2d");
    }
    /* col2im straight through the dispatcher: 3x3 taps, stride 1, padding 1 */
    const int64_t cs[3] = {2, 3 * 9, 19 * 23};
    weft_tensor *ch = tu_random_tensor(3, cs, WEFT_BF16, -2, 2, &seed, NULL);
    weft_tensor *cf = weft_to_dtype(ch, WEFT_F32);
    weft_tensor *img[2] = {weft_empty(4, xs, WEFT_BF16, WEFT_CPU),
                           weft_empty(4, xs, WEFT_F32, WEFT_CPU)};
    weft_tensor *cols[2] = {ch, cf};
    for (int j = 0; j < 2; j++) {
        struct weft_op_call call = {.op = WEFT_OP_COL2IM, .nin = 1, .nout = 1,
                                    .ints = {3, 3, 1, 1, 1, 1, 1, 1, 19, 23}};
        call.in[0] = cols[j];
        call.out[0] = img[j];
        cr_assert_eq(weft_dispatch(&call), 0, "%s", weft_error_message());
    }
    expect_rounded_once(img[0], img[1], "col2im");
}

struct pool_ctx {
    struct weft_pool2d_params p;
    int kind; /* 0 max, 1 avg, 2 adaptive */
    int64_t oh, ow;
};

static weft_tensor *apply_pool(void *ctx, weft_tensor *const *in)
{
    struct pool_ctx *c = ctx;
    if (c->kind == 2)
        return weft_adaptive_avg_pool2d(in[0], c->oh, c->ow);
    return c->kind == 0 ? weft_max_pool2d(in[0], &c->p) : weft_avg_pool2d(in[0], &c->p);
}

Test(nn_functional, pooling_backward_passes_gradcheck)
{
    uint64_t seed = 43;
    weft_tensor *x = leaf64(4, (const int64_t[]){2, 2, 7, 6}, -1, 1, &seed);
    for (size_t k = 0; k < sizeof pool_cases / sizeof *pool_cases; k++)
        for (int kind = 0; kind < 2; kind++) {
            struct pool_ctx c = {pool_cases[k].p, kind, 0, 0};
            expect_gradcheck(apply_pool, &c, 1, &x, kind ? "avg_pool2d" : "max_pool2d");
        }
    struct pool_ctx dil = {{{2, 2}, {1, 2}, {1, 1}, {2, 2}, true, true}, 0, 0, 0};
    expect_gradcheck(apply_pool, &dil, 1, &x, "max_pool2d dilated");
    const int64_t outs[][2] = {{3, 4}, {1, 1}, {7, 3}};
    for (int k = 0; k < 3; k++) {
        struct pool_ctx c = {.kind = 2, .oh = outs[k][0], .ow = outs[k][1]};
        expect_gradcheck(apply_pool, &c, 1, &x, "adaptive_avg_pool2d");
    }
    struct pool_ctx m = {{.kernel = {2, 2}}, 0, 0, 0};
    cr_expect_str_eq(weft_grad_fn_name(weft_max_pool2d(x, &m.p)), "MaxPool2DWithIndicesBackward0");
    cr_expect_str_eq(weft_grad_fn_name(weft_avg_pool2d(x, &m.p)), "AvgPool2DBackward0");
}

static weft_tensor *apply_linear(void *ctx, weft_tensor *const *in)
{
    (void)ctx;
    return weft_linear(in[0], in[1], in[2]);
}

static weft_tensor *apply_batch_norm(void *ctx, weft_tensor *const *in)
{
    bool training = *(bool *)ctx;
    return weft_batch_norm(in[0], training ? NULL : in[3], training ? NULL : in[4], in[1], in[2],
                           training, 0.1, 1e-5);
}

static weft_tensor *apply_layer_norm(void *ctx, weft_tensor *const *in)
{
    (void)ctx;
    const int64_t ns[2] = {3, 4};
    return weft_layer_norm(in[0], 2, ns, in[1], in[2], 1e-5);
}

static weft_tensor *apply_embedding(void *ctx, weft_tensor *const *in)
{
    return weft_embedding((weft_tensor *)ctx, in[0]);
}

static weft_tensor *apply_dropout(void *ctx, weft_tensor *const *in)
{
    (void)ctx;
    weft_manual_seed(3); /* the same mask on every call */
    return weft_dropout(in[0], 0.4, true);
}

static weft_tensor *apply_leaky(void *ctx, weft_tensor *const *in)
{
    (void)ctx;
    return weft_leaky_relu(in[0], 0.2);
}

Test(nn_functional, layer_backward_passes_gradcheck)
{
    uint64_t seed = 47;
    weft_tensor *lin[3] = {leaf64(3, (const int64_t[]){2, 3, 4}, -1, 1, &seed),
                           leaf64(2, (const int64_t[]){5, 4}, -1, 1, &seed),
                           leaf64(1, (const int64_t[]){5}, -1, 1, &seed)};
    expect_gradcheck(apply_linear, NULL, 3, lin, "linear");
    weft_tensor *bn[5] = {leaf64(4, (const int64_t[]){3, 2, 2, 3}, -2, 2, &seed),
                          leaf64(1, (const int64_t[]){2}, 0.5, 1.5, &seed),
                          leaf64(1, (const int64_t[]){2}, -1, 1, &seed),
                          tu_random_tensor(1, (const int64_t[]){2}, WEFT_F64, -1, 1, &seed, NULL),
                          tu_random_tensor(1, (const int64_t[]){2}, WEFT_F64, 0.5, 2, &seed, NULL)};
    bool training = true;
    expect_gradcheck(apply_batch_norm, &training, 5, bn, "batch_norm train");
    training = false;
    expect_gradcheck(apply_batch_norm, &training, 5, bn, "batch_norm eval");
    weft_tensor *ln[3] = {leaf64(3, (const int64_t[]){2, 3, 4}, -2, 2, &seed),
                          leaf64(2, (const int64_t[]){3, 4}, 0.5, 1.5, &seed),
                          leaf64(2, (const int64_t[]){3, 4}, -1, 1, &seed)};
    expect_gradcheck(apply_layer_norm, NULL, 3, ln, "layer_norm");
    weft_tensor *idx = int64_tensor(2, (const int64_t[]){2, 3}, (const int64_t[]){1, 3, 1, 0, 0, 2});
    weft_tensor *emb = leaf64(2, (const int64_t[]){4, 3}, -1, 1, &seed);
    expect_gradcheck(apply_embedding, idx, 1, &emb, "embedding");
    weft_tensor *dx = leaf64(2, (const int64_t[]){4, 5}, -1, 1, &seed);
    expect_gradcheck(apply_dropout, NULL, 1, &dx, "dropout");
    expect_gradcheck(apply_leaky, NULL, 1, &dx, "leaky_relu");
}

Test(nn_functional, batch_norm_running_stats_after_one_training_step_with_backward)
{
    uint64_t seed = 53;
    weft_tensor *x = leaf64(2, (const int64_t[]){4, 3}, -1, 1, &seed);
    weft_tensor *rm = weft_zeros(1, (const int64_t[]){3}, WEFT_F64, WEFT_CPU);
    weft_tensor *rv = weft_ones(1, (const int64_t[]){3}, WEFT_F64, WEFT_CPU);
    double xv[12];
    tu_read(x, xv);
    weft_tensor *y = weft_batch_norm(x, rm, rv, NULL, NULL, true, 0.3, 1e-5);
    cr_assert_eq(weft_backward(weft_sum(weft_mul(y, y), 0, NULL, false), NULL, false), 0, "%s",
                 weft_error_message());
    double em[3], ev[3];
    for (int c = 0; c < 3; c++) {
        double m = 0, v = 0;
        for (int n = 0; n < 4; n++)
            m += xv[n * 3 + c] / 4;
        for (int n = 0; n < 4; n++)
            v += (xv[n * 3 + c] - m) * (xv[n * 3 + c] - m) / 3; /* unbiased */
        em[c] = 0.3 * m;
        ev[c] = 0.7 + 0.3 * v;
    }
    tu_assert_close(rm, em, 3, 1e-12, 1e-12);
    tu_assert_close(rv, ev, 3, 1e-12, 1e-12);
    cr_expect(!weft_requires_grad(rm), "running stats carry no history");
}

struct loss_ctx {
    int kind; /* 0 cross_entropy, 1 nll, 2 mse, 3 l1, 4 bce */
    struct weft_cross_entropy_params p;
    weft_tensor *target;
    bool pos_weight;
};

static weft_tensor *apply_loss(void *ctx, weft_tensor *const *in)
{
    struct loss_ctx *c = ctx;
    switch (c->kind) {
    case 0: return weft_cross_entropy(in[0], c->target, &c->p);
    case 1: return weft_nll_loss(in[0], c->target, &c->p);
    case 2: return weft_mse_loss(in[0], in[1], c->p.reduction);
    case 3: return weft_l1_loss(in[0], in[1], c->p.reduction);
    default:
        return weft_binary_cross_entropy_with_logits(in[0], in[1], c->pos_weight ? in[2] : NULL,
                                                     c->p.reduction);
    }
}

Test(nn_functional, loss_backward_passes_gradcheck)
{
    uint64_t seed = 59;
    weft_tensor *z = leaf64(2, (const int64_t[]){5, 4}, -2, 2, &seed);
    weft_tensor *t = int64_tensor(1, (const int64_t[]){5}, (const int64_t[]){3, 0, 1, 3, 2});
    weft_tensor *w = tu_random_tensor(1, (const int64_t[]){4}, WEFT_F64, 0.2, 2, &seed, NULL);
    for (int weighted = 0; weighted < 2; weighted++)
        for (int s = 0; s < 2; s++)
            for (int r = 0; r < 3; r++)
                for (int kind = 0; kind < 2; kind++) {
                    struct loss_ctx c = {kind, {(enum weft_reduction)r, 1, s ? 0.3 : 0, weighted ? w : NULL},
                                         t, false};
                    expect_gradcheck(apply_loss, &c, 1, &z, kind ? "nll_loss" : "cross_entropy");
                }
    /* spatial cross entropy */
    weft_tensor *z3 = leaf64(3, (const int64_t[]){2, 3, 4}, -2, 2, &seed);
    weft_tensor *t3 = int64_tensor(2, (const int64_t[]){2, 4}, (const int64_t[]){0, 2, 1, -100, 2, 2, 0, 1});
    weft_tensor *w3 = tu_random_tensor(1, (const int64_t[]){3}, WEFT_F64, 0.2, 2, &seed, NULL);
    struct loss_ctx c3 = {0, {WEFT_REDUCTION_MEAN, -100, 0.2, w3}, t3, false};
    expect_gradcheck(apply_loss, &c3, 1, &z3, "cross_entropy spatial");
    /* pointwise losses, with target and pos_weight gradients */
    weft_tensor *pin[3] = {leaf64(2, (const int64_t[]){3, 4}, -3, 3, &seed),
                           leaf64(2, (const int64_t[]){3, 4}, 0, 1, &seed),
                           leaf64(1, (const int64_t[]){4}, 0.5, 2, &seed)};
    for (int kind = 2; kind <= 4; kind++)
        for (int r = 0; r < 3; r++) {
            struct loss_ctx c = {kind, {(enum weft_reduction)r, 0, 0, NULL}, NULL, kind == 4};
            expect_gradcheck(apply_loss, &c, kind == 4 ? 3 : 2, pin, "pointwise loss");
        }
    struct loss_ctx bce = {4, {WEFT_REDUCTION_MEAN, 0, 0, NULL}, NULL, false};
    expect_gradcheck(apply_loss, &bce, 2, pin, "bce without pos_weight");
}

/* ---- linear + relu (fused) ------------------------------------------------------------------ */

static weft_tensor *apply_linear_relu(void *ctx, weft_tensor *const *in)
{
    (void)ctx;
    return weft_linear_relu(in[0], in[1], in[2]);
}

Test(nn_functional, linear_relu_passes_gradcheck_on_2d_and_3d_inputs)
{
    uint64_t seed = 43;
    const int64_t ws[2] = {5, 7}, bs[1] = {5};
    const int64_t x2[2] = {6, 7}, x3[3] = {2, 3, 7};
    weft_tensor *in2[3] = {leaf64(2, x2, -1, 1, &seed), leaf64(2, ws, -1, 1, &seed),
                           leaf64(1, bs, -1, 1, &seed)};
    expect_gradcheck(apply_linear_relu, NULL, 3, in2, "linear_relu 2-d");
    weft_tensor *in3[3] = {leaf64(3, x3, -1, 1, &seed), in2[1], in2[2]};
    expect_gradcheck(apply_linear_relu, NULL, 3, in3, "linear_relu 3-d");
    weft_tensor *y = weft_linear_relu(in2[0], in2[1], in2[2]);
    /* PyTorch's name for relu(linear(...))'s output; one node over x, w and b */
    cr_expect_str_eq(weft_grad_fn_name(y), "ReluBackward0");
    const char *next[3] = {0};
    cr_expect_eq(weft_grad_fn_next_functions(y, 3, next), 3);
    cr_expect_str_eq(next[1], "AccumulateGrad");
}

/* ---- threshold_backward_sum: ReLU's backward and the bias gradient in one pass --------- */

/* out and sum of THRESHOLD_BACKWARD_SUM(g, y, 0) with n threads, read as doubles. */
static void run_threshold_backward_sum(int threads, const weft_tensor *g, const weft_tensor *y,
                                       double *out, double *sum)
{
    int before = weft_get_num_threads();
    cr_assert_eq(weft_set_num_threads(threads), 0, "%s", weft_error_message());
    int op = weft_op_lookup(WEFT_OP_THRESHOLD_BACKWARD_SUM_NAME);
    cr_assert_geq(op, 0);
    weft_tensor *o = weft_empty(2, g->shape, g->dtype, WEFT_CPU);
    weft_tensor *s = weft_empty(1, g->shape + 1, g->dtype, WEFT_CPU);
    struct weft_op_call c = {.op = op, .nin = 2, .nout = 2, .in = {g, y}, .out = {o, s}};
    cr_assert_eq(weft_dispatch(&c), 0, "%s", weft_error_message());
    tu_read(o, out);
    tu_read(s, sum);
    weft_set_num_threads(before);
}

/* Its out is threshold_backward's, bit for bit (NaN and -0 in y and g included), and its
 * sum the column sums of out, rounded once, the same bits on 1 and 2 threads, for every
 * floating dtype: on a shape whose rows do not fill the last block and which the cpu
 * backend splits across threads, on an empty batch, and on a one-column one. */
Test(nn_functional, threshold_backward_sum_is_threshold_backward_and_its_column_sums)
{
    const enum weft_dtype dts[] = {WEFT_F64, WEFT_F32, WEFT_BF16, WEFT_F16};
    const int64_t shapes[3][2] = {{1000, 70}, {0, 5}, {37, 1}};
    for (size_t k = 0; k < 4; k++)
        for (int sh = 0; sh < 3; sh++) {
            weft_scope_push();
            const int64_t M = shapes[sh][0], N = shapes[sh][1], n = M * N;
            uint64_t seed = 91 + (uint64_t)sh;
            double *gv = malloc((size_t)(n + 1) * sizeof *gv), *yv = malloc((size_t)(n + 1) * sizeof *yv);
            tu_random_values(gv, n, -1, 1, &seed);
            tu_random_values(yv, n, -1, 1, &seed);
            for (int64_t i = 0; i + 7 < n; i += 7) { /* exact zeros, NaN and -0 in y; -0 in g */
                yv[i] = i % 3 == 0 ? 0.0 : i % 3 == 1 ? NAN : -0.0;
                gv[i + 1] = -0.0;
            }
            weft_tensor *g = tu_tensor(2, (const int64_t[]){M, N}, gv, dts[k]);
            weft_tensor *y = tu_tensor(2, (const int64_t[]){M, N}, yv, dts[k]);
            double *expect = malloc((size_t)(n + 1) * sizeof *expect);
            tu_read(weft_threshold_backward(g, y, 0), expect);
            double *out[2], *sum[2];
            for (int t = 0; t < 2; t++) {
                out[t] = malloc((size_t)(n + 1) * sizeof(double));
                sum[t] = malloc((size_t)(N + 1) * sizeof(double));
                run_threshold_backward_sum(t + 1, g, y, out[t], sum[t]);
                for (int64_t i = 0; i < n; i++)
                    cr_assert(memcmp(&out[t][i], &expect[i], sizeof(double)) == 0,
                              "dtype %d, %lld x %lld, %d thread(s): out[%lld] = %g, expected %g",
                              (int)dts[k], (long long)M, (long long)N, t + 1, (long long)i,
                              out[t][i], expect[i]);
            }
            double *ref = calloc((size_t)(N + 1), sizeof *ref);
            for (int64_t i = 0; i < M; i++)
                for (int64_t j = 0; j < N; j++)
                    ref[j] += expect[i * N + j];
            const double tol = dts[k] == WEFT_F64 ? 1e-13 : dts[k] == WEFT_F32 ? 1e-6 : 1e-2;
            weft_tensor *got = tu_tensor(1, &N, sum[0], WEFT_F64);
            tu_assert_close(got, ref, N, tol, tol);
            cr_assert(memcmp(sum[0], sum[1], (size_t)N * sizeof(double)) == 0,
                      "dtype %d: the sums differ between 1 and 2 threads", (int)dts[k]);
            for (int t = 0; t < 2; t++) {
                free(out[t]);
                free(sum[t]);
            }
            free(ref);
            free(expect);
            free(gv);
            free(yv);
            weft_scope_pop();
        }
}

Test(nn_functional, threshold_backward_sum_refuses_operands_that_do_not_match)
{
    int op = weft_op_register(WEFT_OP_THRESHOLD_BACKWARD_SUM_NAME);
    weft_scope_push();
    weft_tensor *g = weft_zeros(2, (const int64_t[]){4, 3}, WEFT_F32, WEFT_CPU);
    weft_tensor *y = weft_zeros(2, (const int64_t[]){4, 2}, WEFT_F32, WEFT_CPU);
    weft_tensor *o = weft_zeros(2, (const int64_t[]){4, 3}, WEFT_F32, WEFT_CPU);
    weft_tensor *s = weft_zeros(1, (const int64_t[]){3}, WEFT_F32, WEFT_CPU);
    struct weft_op_call c = {.op = op, .nin = 2, .nout = 2, .in = {g, y}, .out = {o, s}};
    cr_assert_neq(weft_dispatch(&c), 0);
    tu_assert_error(WEFT_ERR_RUNTIME, "threshold_backward_sum: expected contiguous [M, N]");
    c.in[1] = weft_transpose(weft_zeros(2, (const int64_t[]){3, 4}, WEFT_F32, WEFT_CPU), 0, 1);
    cr_assert_neq(weft_dispatch(&c), 0);
    tu_assert_error(WEFT_ERR_RUNTIME, "threshold_backward_sum: expected contiguous [M, N]");
    weft_scope_pop();
}

/* A counting stand-in for the cpu backend's float32 THRESHOLD_BACKWARD_SUM. */
static weft_kernel_fn tbs_original;
static int tbs_calls;

static int tbs_counting(const struct weft_op_call *call)
{
    tbs_calls++;
    return tbs_original(call);
}

/* The fused linear-ReLU node takes the one-pass kernel when the bias needs its gradient (once
 * per layer), and the two passes when it does not; the gradients are the same either way
 * (linear_relu_matches_relu_of_linear checks them against the composite). */
Test(nn_functional, linear_relu_backward_makes_the_bias_gradient_in_the_relu_pass)
{
    int op = weft_op_lookup(WEFT_OP_THRESHOLD_BACKWARD_SUM_NAME);
    cr_assert_geq(op, 0);
    tbs_original = weft_kernel_lookup(op, WEFT_DEVICE_CPU, WEFT_LAYOUT_STRIDED, WEFT_F32);
    cr_assert_not_null(tbs_original);
    cr_assert_eq(weft_kernel_register(op, WEFT_DEVICE_CPU, WEFT_LAYOUT_STRIDED,
                                      WEFT_DTYPE_BIT(WEFT_F32), tbs_counting), 0);
    for (int bias_grad = 0; bias_grad < 2; bias_grad++) {
        weft_scope_push();
        uint64_t seed = 5;
        weft_tensor *x = tu_random_tensor(2, (const int64_t[]){6, 5}, WEFT_F32, -1, 1, &seed, NULL);
        weft_tensor *w = tu_random_tensor(2, (const int64_t[]){4, 5}, WEFT_F32, -1, 1, &seed, NULL);
        weft_tensor *b = tu_random_tensor(1, (const int64_t[]){4}, WEFT_F32, -1, 1, &seed, NULL);
        cr_assert_eq(weft_requires_grad_(w, true), 0);
        cr_assert_eq(weft_requires_grad_(b, bias_grad), 0);
        tbs_calls = 0;
        weft_tensor *y = weft_linear_relu(weft_linear_relu(x, w, b), weft_t(w), NULL);
        const int dims[2] = {0, 1};
        cr_assert_eq(weft_backward(weft_sum(y, 2, dims, false), NULL, false), 0, "%s",
                     weft_error_message());
        cr_expect_eq(tbs_calls, bias_grad, "bias requires_grad %d: %d fused calls", bias_grad,
                     tbs_calls);
        weft_scope_pop();
    }
    cr_assert_eq(weft_kernel_register(op, WEFT_DEVICE_CPU, WEFT_LAYOUT_STRIDED,
                                      WEFT_DTYPE_BIT(WEFT_F32), tbs_original), 0);
}

/* The fused layer gives relu(linear(...))'s values exactly, and its gradients, on every
 * floating dtype; without a bias it is the composite itself. */
Test(nn_functional, linear_relu_matches_relu_of_linear)
{
    const enum weft_dtype dts[] = {WEFT_F32, WEFT_F64, WEFT_BF16, WEFT_F16};
    for (size_t k = 0; k < 4; k++) {
        weft_scope_push();
        uint64_t seed = 44;
        weft_tensor *x = tu_random_tensor(2, (const int64_t[]){9, 13}, dts[k], -1, 1, &seed, NULL);
        weft_tensor *w = tu_random_tensor(2, (const int64_t[]){11, 13}, dts[k], -1, 1, &seed, NULL);
        weft_tensor *b = tu_random_tensor(1, (const int64_t[]){11}, dts[k], -1, 1, &seed, NULL);
        weft_tensor *g = tu_random_tensor(2, (const int64_t[]){9, 11}, dts[k], -1, 1, &seed, NULL);
        weft_tensor *grads[2][3];
        double yv[2][99];
        for (int fused = 0; fused < 2; fused++) {
            weft_tensor *leaves[3] = {weft_detach(x), weft_detach(w), weft_detach(b)};
            for (int i = 0; i < 3; i++)
                cr_assert_eq(weft_requires_grad_(leaves[i], true), 0);
            weft_tensor *y = fused ? weft_linear_relu(leaves[0], leaves[1], leaves[2])
                                   : weft_relu(weft_linear(leaves[0], leaves[1], leaves[2]));
            cr_assert_not_null(y, "%s", weft_error_message());
            cr_expect_str_eq(weft_grad_fn_name(y), "ReluBackward0");
            cr_expect_eq(weft_grad_fn_next_functions(y, 0, NULL), fused ? 3 : 1);
            tu_read(y, yv[fused]);
            cr_assert_eq(weft_backward(y, g, false), 0, "%s", weft_error_message());
            for (int i = 0; i < 3; i++)
                grads[fused][i] = weft_grad(leaves[i]);
        }
        tu_assert_close(tu_tensor(2, (const int64_t[]){9, 11}, yv[1], WEFT_F64), yv[0], 99, 0,
                        0); /* the fused values, bit for bit */
        const double tol = dts[k] == WEFT_F64 ? 1e-12 : dts[k] == WEFT_F32 ? 1e-5 : 3e-2;
        for (int i = 0; i < 3; i++) {
            int64_t n = weft_tensor_numel(grads[0][i]);
            double *e = malloc((size_t)n * sizeof *e);
            tu_read(grads[0][i], e);
            tu_assert_close(grads[1][i], e, n, tol, tol);
            free(e);
        }
        weft_scope_pop();
    }
    weft_tensor *x = weft_ones(2, (const int64_t[]){2, 3}, WEFT_F32, WEFT_CPU);
    weft_tensor *w = weft_ones(2, (const int64_t[]){4, 3}, WEFT_F32, WEFT_CPU);
    cr_assert_eq(weft_requires_grad_(w, true), 0);
    cr_expect_str_eq(weft_grad_fn_name(weft_linear_relu(x, w, NULL)), "ReluBackward0");
}
