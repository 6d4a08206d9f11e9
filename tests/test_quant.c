/* tests/test_quant.c: int8 quantization (weft/quant.h, weft/kernel_quant.h).
 *
 * The cpu plugin's kernels (oneDNN's int8 matmul and convolution, the quantize,
 * dequantize and max-pool loops) against libweft-quant's reference loops, bit for bit, on
 * odd shapes, with zero points and per-channel multipliers; quantize -> dequantize within
 * half a step; the observers' ranges (min/max, moving average, the histogram's search);
 * fusion against the unfused model; static and dynamic quantization end to end; calibration
 * that gives the same model twice; int8 checkpoints saved, loaded, and refused when
 * malformed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include <weft/checkpoint.h>
#include <weft/gpt.h>
#include <weft/nn.h>
#include <weft/quant.h>

static void setup(void)
{
    tu_setup();
    weft_scope_push();
}

static void teardown(void)
{
    weft_scope_pop();
    tu_teardown();
}

TestSuite(quant, .init = setup, .fini = teardown);

/* ---- helpers ------------------------------------------------------------------------------ */

static uint64_t rng = 12345;

static uint32_t next_u32(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng >> 33);
}

/* A cpu tensor of dt filled with uniform integers in [lo, hi] (integer dtypes) or floats
 * in [lo, hi) (float32). */
static weft_tensor *random_of(int ndim, const int64_t *shape, enum weft_dtype dt, double lo,
                              double hi)
{
    int64_t n = weft_shape_numel(ndim, shape);
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    cr_assert_not_null(v);
    for (int64_t i = 0; i < n; i++)
        v[i] = dt == WEFT_F32 ? lo + (hi - lo) * (next_u32() / 4294967296.0)
                              : lo + (double)(next_u32() % (uint32_t)(hi - lo + 1));
    weft_tensor *t = tu_tensor(ndim, shape, v, dt);
    free(v);
    return t;
}

static int op_id(const char *name)
{
    int op = weft_op_register(name);
    cr_assert_geq(op, 0);
    return op;
}

/* Runs call through the cpu plugin's kernel (which must be registered), then through the
 * reference into a copy of out[0], and asserts the two agree byte for byte. */
static void assert_kernel_matches_reference(struct weft_op_call *call, const char *what)
{
    weft_tensor *out = call->out[0];
    const weft_tensor *in0 = call->in[0];
    cr_assert_not_null(weft_kernel_lookup(call->op, WEFT_DEVICE_CPU, WEFT_LAYOUT_STRIDED, in0->dtype),
                       "%s: the cpu plugin has no kernel", what);
    cr_assert_eq(weft_dispatch(call), 0, "%s: %s", what, weft_error_message());
    weft_tensor *got = weft_clone(out);
    cr_assert_eq(weft_copy_(out, weft_zeros_like(out)), 0);
    cr_assert_eq(weft_quant_reference(call), 0, "%s (reference): %s", what, weft_error_message());
    weft_tensor *a = weft_contiguous(got), *b = weft_contiguous(out);
    size_t bytes = (size_t)weft_tensor_numel(a) * weft_tensor_itemsize(a);
    const unsigned char *pa = weft_tensor_data(a), *pb = weft_tensor_data(b);
    size_t diff = 0, first = bytes;
    for (size_t i = 0; i < bytes; i++)
        if (pa[i] != pb[i]) {
            diff++;
            first = first == bytes ? i : first;
        }
    cr_assert_eq(diff, 0, "%s: %zu of %zu bytes differ from the reference (first at byte %zu: %u "
                          "vs %u)",
                 what, diff, bytes, first, first < bytes ? pa[first] : 0, first < bytes ? pb[first] : 0);
}

/* A channels-last [N, C, H, W] copy of t. */
static weft_tensor *channels_last(weft_tensor *t)
{
    const int64_t shape[4] = {t->shape[0], t->shape[2], t->shape[3], t->shape[1]};
    weft_tensor *m = weft_permute(weft_empty(4, shape, t->dtype, WEFT_CPU), 4, (int[]){0, 3, 1, 2});
    cr_assert_eq(weft_copy_(m, t), 0);
    return m;
}

/* ---- quantization parameters and round trips -------------------------------------------- */

Test(quant, qparams_follow_torchs_calculate_qparams)
{
    float s;
    int64_t zp;
    /* affine uint8 over [-1, 3]: scale 4/255, zero point round(1 / scale) = 64 */
    cr_assert_eq(weft_qparams_from_range(-1, 3, WEFT_U8, false, &s, &zp), 0);
    cr_expect_float_eq(s, 4.0f / 255.0f, 1e-9);
    cr_expect_eq(zp, 64);
    /* a range that does not hold 0 is widened to it */
    cr_assert_eq(weft_qparams_from_range(2, 5, WEFT_U8, false, &s, &zp), 0);
    cr_expect_float_eq(s, 5.0f / 255.0f, 1e-9);
    cr_expect_eq(zp, 0);
    /* symmetric int8: max |v| / 127.5, zero point 0 */
    cr_assert_eq(weft_qparams_from_range(-0.51, 0.2, WEFT_I8, true, &s, &zp), 0);
    cr_expect_float_eq(s, 0.51f / 127.5f, 1e-9);
    cr_expect_eq(zp, 0);
    /* an all-zero range still has a positive scale */
    cr_assert_eq(weft_qparams_from_range(0, 0, WEFT_U8, false, &s, &zp), 0);
    cr_expect_gt(s, 0);
    cr_expect_neq(weft_qparams_from_range(NAN, 1, WEFT_U8, false, &s, &zp), 0);
    tu_assert_error(WEFT_ERR_VALUE, "min");
}

Test(quant, quantize_dequantize_round_trip_within_half_a_step)
{
    const int64_t shape[2] = {37, 53};
    const struct {
        enum weft_dtype dt;
        double lo, hi;
    } cases[] = {{WEFT_U8, -1.7, 2.9}, {WEFT_I8, -0.8, 0.8}, {WEFT_U8, 0.0, 6.0}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        float s;
        int64_t zp;
        cr_assert_eq(weft_qparams_from_range(cases[c].lo, cases[c].hi, cases[c].dt,
                                             cases[c].dt == WEFT_I8, &s, &zp), 0);
        weft_tensor *x = random_of(2, shape, WEFT_F32, cases[c].lo, cases[c].hi);
        weft_tensor *q = weft_quantize_per_tensor(x, s, zp, cases[c].dt);
        weft_tensor *y = weft_dequantize_per_tensor(q, s, zp);
        cr_assert_not_null(y, "%s", weft_error_message());
        cr_assert_eq(q->dtype, cases[c].dt);
        const float *xv = weft_tensor_data(x), *yv = weft_tensor_data(y);
        double worst = 0;
        for (int64_t i = 0; i < weft_tensor_numel(x); i++)
            worst = fmax(worst, fabs((double)xv[i] - yv[i]));
        /* half a step, and float32's rounding of x / scale and (q - zp) * scale */
        cr_expect_leq(worst, 0.5 * s * (1 + 1e-5) + 4e-7 * fmax(fabs(cases[c].lo), cases[c].hi),
                      "case %zu: error %g, half a step %g", c, worst, 0.5 * s);
    }
}

Test(quant, per_channel_round_trip_within_half_a_step_of_each_channel)
{
    const int64_t shape[3] = {5, 7, 3}, C = 7;
    weft_tensor *x = random_of(3, shape, WEFT_F32, -3, 3);
    float s[7];
    int64_t z[7];
    for (int c = 0; c < C; c++) {
        s[c] = 0.01f * (float)(c + 1);
        z[c] = c * 10;
    }
    weft_tensor *scales = weft_from_host(s, 1, &C, WEFT_F32, WEFT_CPU);
    weft_tensor *zps = weft_from_host(z, 1, &C, WEFT_I64, WEFT_CPU);
    weft_tensor *q = weft_quantize_per_channel(x, scales, zps, 1, WEFT_U8);
    weft_tensor *y = weft_dequantize_per_channel(q, scales, zps, 1);
    cr_assert_not_null(y, "%s", weft_error_message());
    const float *xv = weft_tensor_data(x), *yv = weft_tensor_data(y);
    for (int64_t i = 0; i < weft_tensor_numel(x); i++) {
        int c = (int)((i / 3) % 7);
        double lo = (0 - z[c]) * (double)s[c], hi = (255 - z[c]) * (double)s[c];
        double want = fmin(fmax(xv[i], lo), hi); /* saturates outside the channel's range */
        cr_expect_leq(fabs(want - yv[i]), 0.5 * s[c] * (1 + 1e-5), "element %lld", (long long)i);
    }
}

Test(quant, quantize_and_dequantize_kernels_match_the_reference)
{
    const int64_t shape[3] = {3, 41, 29};
    weft_tensor *x = random_of(3, shape, WEFT_F32, -4, 4);
    float *xv = weft_tensor_data(x);
    xv[0] = NAN;
    xv[1] = INFINITY;
    xv[2] = -1e30f;
    xv[3] = 0.5f * 0.03f; /* a tie */
    const enum weft_dtype dts[2] = {WEFT_U8, WEFT_I8};
    for (int d = 0; d < 2; d++) {
        weft_tensor *q = weft_empty(3, shape, dts[d], WEFT_CPU);
        struct weft_op_call c = {.op = op_id(WEFT_OP_QUANTIZE_PER_TENSOR_NAME), .nin = 1, .nout = 1,
                                 .in = {x}, .out = {q}, .scalar = {0.03}, .ints = {d ? -3 : 100}};
        assert_kernel_matches_reference(&c, "quantize");
        /* a transposed (strided) input */
        weft_tensor *xt = weft_transpose(x, 1, 2), *qt = weft_empty(3, xt->shape, dts[d], WEFT_CPU);
        c.in[0] = xt;
        c.out[0] = qt;
        assert_kernel_matches_reference(&c, "quantize (strided)");
        weft_tensor *y = weft_empty(3, shape, WEFT_F32, WEFT_CPU);
        struct weft_op_call dq = {.op = op_id(WEFT_OP_DEQUANTIZE_PER_TENSOR_NAME), .nin = 1,
                                  .nout = 1, .in = {q}, .out = {y}, .scalar = {0.03},
                                  .ints = {d ? -3 : 100}};
        assert_kernel_matches_reference(&dq, "dequantize");
    }
    /* NaN gives the zero point */
    weft_tensor *q = weft_quantize_per_tensor(x, 0.03, 100, WEFT_U8);
    cr_expect_eq(((const uint8_t *)weft_tensor_data(q))[0], 100);
    cr_expect_eq(((const uint8_t *)weft_tensor_data(q))[1], 255);
    cr_expect_eq(((const uint8_t *)weft_tensor_data(q))[2], 0);
}

Test(quant, quantize_refuses_bad_arguments_in_torchs_words)
{
    const int64_t n = 4;
    weft_tensor *i = weft_zeros(1, &n, WEFT_I64, WEFT_CPU);
    cr_expect_null(weft_quantize_per_tensor(i, 0.1, 0, WEFT_U8));
    tu_assert_error(WEFT_ERR_RUNTIME, "Quantize only works on Float Tensor, got Long");
    weft_tensor *x = weft_zeros(1, &n, WEFT_F32, WEFT_CPU);
    cr_expect_null(weft_quantize_per_tensor(x, 0.1, 300, WEFT_U8));
    tu_assert_error(WEFT_ERR_RUNTIME, "zero_point must be between quant_min and quant_max");
    cr_expect_null(weft_quantize_per_tensor(x, 0, 0, WEFT_U8));
    tu_assert_error(WEFT_ERR_RUNTIME, "scale must be a finite positive number");
    cr_expect_null(weft_quantize_per_tensor(x, 1, 0, WEFT_I32));
    tu_assert_error(WEFT_ERR_RUNTIME, "expected dtype uint8");
}

/* ---- the int8 products ------------------------------------------------------------------ */

/* quantized_linear on x [M, K]: kernel and reference, uint8 and float32 outputs, relu and
 * zero points as given. Sums stay below 2^24 (the contract's exact range). */
static void check_linear(int64_t M, int64_t K, int64_t N, bool relu, int64_t out_zp,
                         bool float_bias, bool slot)
{
    const int64_t xs[2] = {M, K}, ws[2] = {N, K};
    weft_tensor *x = random_of(2, xs, WEFT_U8, 0, 255);
    weft_tensor *w = random_of(2, ws, WEFT_I8, -128, 127);
    weft_tensor *b = random_of(1, &N, WEFT_I32, -20000, 20000);
    weft_tensor *m = random_of(1, &N, WEFT_F32, 1e-4, 3e-3);
    weft_tensor *fb = random_of(1, &N, WEFT_F32, -2, 2);
    weft_tensor *packed = NULL;
    const enum weft_dtype outs[2] = {WEFT_U8, WEFT_F32};
    for (int o = 0; o < 2; o++) {
        const int64_t ys[2] = {M, N};
        weft_tensor *y = weft_empty(2, ys, outs[o], WEFT_CPU);
        struct weft_quantized_linear_params p = {.bias = float_bias && o == 1 ? fb : NULL,
                                                 .packed = slot ? &packed : NULL};
        struct weft_op_call c = {.op = op_id(WEFT_OP_QUANTIZED_LINEAR_NAME), .nin = 4, .nout = 1,
                                 .in = {x, w, b, m}, .out = {y}, .ints = {relu, out_zp},
                                 .params = &p, .params_size = sizeof p};
        char what[160];
        snprintf(what, sizeof what, "linear %lldx%lldx%lld relu %d zp %lld %s%s",
                 (long long)M, (long long)K, (long long)N, relu, (long long)out_zp,
                 o ? "float32" : "uint8", float_bias && o ? " float bias" : "");
        assert_kernel_matches_reference(&c, what);
        if (slot) /* the packed weights are used from the second call on */
            assert_kernel_matches_reference(&c, what);
    }
    if (slot)
        cr_expect_not_null(packed, "the kernel packed no weights into the slot");
    weft_tensor_release(packed);
}

Test(quant, linear_kernel_matches_the_reference_on_odd_shapes)
{
    check_linear(7, 13, 9, false, 0, false, false);
    check_linear(33, 100, 77, true, 0, false, true);
    check_linear(1, 3, 1, false, 17, true, true);
    check_linear(64, 257, 10, true, 131, true, true);
    check_linear(65, 64, 129, false, 255, true, false);
}

/* quantized_conv2d: kernel and reference on x of input layout cl (channels-last or not). */
static void check_conv(int64_t N, int64_t C, int64_t H, int64_t W, int64_t Co, const int64_t g[8],
                       bool relu, int64_t in_zp, int64_t out_zp, bool cl)
{
    const int64_t xs[4] = {N, C, H, W}, ws[4] = {Co, C, g[0], g[1]};
    weft_tensor *x = random_of(4, xs, WEFT_U8, 0, 255);
    if (cl)
        x = channels_last(x);
    weft_tensor *w = random_of(4, ws, WEFT_I8, -128, 127);
    weft_tensor *b = random_of(1, &Co, WEFT_I32, -5000, 5000);
    weft_tensor *m = random_of(1, &Co, WEFT_F32, 1e-4, 4e-3);
    const int64_t OH = (H + 2 * g[4] - g[6] * (g[0] - 1) - 1) / g[2] + 1;
    const int64_t OW = (W + 2 * g[5] - g[7] * (g[1] - 1) - 1) / g[3] + 1;
    const int64_t ys[4] = {N, Co, OH, OW};
    weft_tensor *packed = NULL;
    const enum weft_dtype outs[2] = {WEFT_U8, WEFT_F32};
    for (int o = 0; o < 2; o++) {
        weft_tensor *y = weft_empty(4, ys, outs[o], WEFT_CPU);
        if (cl)
            y = channels_last(y);
        struct weft_quantized_conv2d_params p = {.packed = &packed};
        struct weft_op_call c = {.op = op_id(WEFT_OP_QUANTIZED_CONV2D_NAME), .nin = 4, .nout = 1,
                                 .in = {x, w, b, m}, .out = {y},
                                 .ints = {g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7], relu,
                                          out_zp, in_zp},
                                 .params = &p, .params_size = sizeof p};
        char what[200];
        snprintf(what, sizeof what, "conv [%lld,%lld,%lld,%lld]->%lld k%lldx%lld s%lldx%lld "
                                    "p%lldx%lld d%lldx%lld relu %d zp in %lld out %lld %s %s",
                 (long long)N, (long long)C, (long long)H, (long long)W, (long long)Co,
                 (long long)g[0], (long long)g[1], (long long)g[2], (long long)g[3],
                 (long long)g[4], (long long)g[5], (long long)g[6], (long long)g[7], relu,
                 (long long)in_zp, (long long)out_zp, cl ? "channels-last" : "NCHW",
                 o ? "float32" : "uint8");
        assert_kernel_matches_reference(&c, what);
        assert_kernel_matches_reference(&c, what); /* packed */
        if (o == 0) /* the packed weights are per layer, not per output dtype: a new slot */
            weft_tensor_release(packed), packed = NULL;
    }
    weft_tensor_release(packed);
}

Test(quant, conv_kernel_matches_the_reference_with_zero_points_and_padding)
{
    const int64_t k3[8] = {3, 3, 1, 1, 1, 1, 1, 1};
    const int64_t odd[8] = {3, 2, 2, 1, 1, 0, 1, 2};
    const int64_t k1[8] = {1, 1, 1, 1, 0, 0, 1, 1};
    check_conv(2, 1, 9, 9, 8, k3, true, 37, 0, true);    /* the MNIST CNN's first layer */
    check_conv(3, 8, 7, 7, 16, k3, true, 0, 0, true);    /* its second */
    check_conv(3, 5, 9, 7, 6, odd, false, 113, 42, true);
    check_conv(1, 3, 6, 5, 7, odd, true, 5, 200, false);
    check_conv(2, 17, 4, 4, 3, k1, false, 255, 1, true);
}

/* A 1-channel input (an image's first layer) takes the cpu plugin's own AVX-512 VNNI
 * kernel (plugins/cpu/quant_conv_direct.c) where it can: kernel widths 1 to 4, Cout 1 to
 * 16, padding wider than the kernel, rows whose width leaves a partial vector; the others
 * (stride 2, width 5, Cout 3, NCHW output) fall back to oneDNN. */
Test(quant, conv_kernel_on_one_channel_matches_the_reference)
{
    const int64_t k3[8] = {3, 3, 1, 1, 1, 1, 1, 1};
    const int64_t k5x2[8] = {5, 2, 1, 1, 2, 0, 1, 1};
    const int64_t k1x4[8] = {1, 4, 1, 1, 0, 3, 1, 1};
    const int64_t k2x1[8] = {2, 1, 1, 1, 3, 2, 1, 1};
    const int64_t s2[8] = {3, 3, 2, 2, 1, 1, 1, 1};
    const int64_t k5[8] = {5, 5, 1, 1, 2, 2, 1, 1};
    check_conv(3, 1, 13, 29, 8, k3, true, 33, 0, true);
    check_conv(2, 1, 7, 17, 16, k3, false, 200, 17, true);
    check_conv(1, 1, 9, 11, 4, k5x2, true, 0, 255, true);
    check_conv(2, 1, 5, 3, 2, k1x4, false, 255, 9, true);
    check_conv(1, 1, 6, 18, 1, k2x1, true, 1, 3, true);
    check_conv(2, 1, 28, 28, 8, k3, true, 33, 0, true); /* MNIST-sized, in parallel */
    check_conv(2, 1, 9, 8, 8, s2, true, 7, 3, true);
    check_conv(1, 1, 9, 9, 8, k5, false, 7, 3, true);
    check_conv(2, 1, 7, 9, 3, k3, true, 7, 3, true);
    check_conv(2, 1, 7, 9, 8, k3, true, 7, 3, false);
}

/* Channels-last 2x2 windows of 8, 16, 32 or 64 channels take the cpu plugin's AVX-512
 * pair max (64 output bytes a step): rows of 72 (C 8, OW 9), 64, 160 and 128 bytes, and
 * odd input widths whose last column no window reads. */
Test(quant, max_pool_kernel_matches_the_reference)
{
    const int64_t shapes[][2] = {{5, 8}, {8, 19}, {16, 8}, {16, 21}, {32, 11}, {64, 5}};
    const struct weft_pool2d_params p[] = {{.kernel = {2, 2}}, {.kernel = {3, 2}, .stride = {2, 1},
                                                                 .padding = {1, 1}}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const int64_t C = shapes[i][0], W = shapes[i][1], xs[4] = {2, C, 9, W};
        for (int dt = 0; dt < 2; dt++)
            for (int cl = 0; cl < 2; cl++)
                for (int k = 0; k < 2; k++) {
                    weft_tensor *x = random_of(4, xs, dt ? WEFT_I8 : WEFT_U8, dt ? -128 : 0, dt ? 127 : 255);
                    if (cl)
                        x = channels_last(x);
                    const int64_t kh = p[k].kernel[0], kw = p[k].kernel[1];
                    const int64_t sh = p[k].stride[0] ? p[k].stride[0] : kh, sw = p[k].stride[1] ? p[k].stride[1] : kw;
                    const int64_t OH = (9 + 2 * p[k].padding[0] - kh) / sh + 1;
                    const int64_t OW = (W + 2 * p[k].padding[1] - kw) / sw + 1;
                    const int64_t ys[4] = {2, C, OH, OW};
                    weft_tensor *y = weft_empty(4, ys, x->dtype, WEFT_CPU);
                    if (cl)
                        y = channels_last(y);
                    struct weft_op_call c = {.op = op_id(WEFT_OP_QUANTIZED_MAX_POOL2D_NAME), .nin = 1,
                                             .nout = 1, .in = {x}, .out = {y},
                                             .ints = {kh, kw, sh, sw, p[k].padding[0], p[k].padding[1], 1, 1}};
                    char what[64];
                    snprintf(what, sizeof what, "max pool C %lld W %lld %s %s k%d", (long long)C,
                             (long long)W, dt ? "int8" : "uint8", cl ? "channels-last" : "NCHW", k);
                    assert_kernel_matches_reference(&c, what);
                }
    }
}

/* ---- observers ---------------------------------------------------------------------------- */

static weft_tensor *vec(int64_t n, const float *v)
{
    return weft_from_host(v, 1, &n, WEFT_F32, WEFT_CPU);
}

Test(quant, minmax_and_moving_average_observers)
{
    const float a[4] = {-1, 0.5f, 2, NAN}, b[3] = {-3, 1, 1.5f};
    struct weft_observer_options o = weft_observer_defaults(WEFT_OBSERVER_MINMAX);
    weft_observer *mm = weft_observer_new(&o);
    o.kind = WEFT_OBSERVER_MOVING_AVERAGE;
    weft_observer *ma = weft_observer_new(&o);
    cr_assert(mm && ma);
    cr_expect_not(weft_observer_seen(mm));
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(weft_observer_update(mm, i ? vec(3, b) : vec(4, a)), 0);
        cr_assert_eq(weft_observer_update(ma, i ? vec(3, b) : vec(4, a)), 0);
    }
    double lo, hi;
    cr_assert_eq(weft_observer_range(mm, &lo, &hi), 0);
    cr_expect_float_eq(lo, -3.0, 0);
    cr_expect_float_eq(hi, 2.0, 0);
    /* torch: min + 0.01 * (batch_min - min), NaN skipped */
    cr_assert_eq(weft_observer_range(ma, &lo, &hi), 0);
    cr_expect_float_eq(lo, -1.0f + 0.01f * (-3.0f - -1.0f), 1e-7);
    cr_expect_float_eq(hi, 2.0f + 0.01f * (1.5f - 2.0f), 1e-7);
    float s;
    int64_t zp;
    cr_assert_eq(weft_observer_qparams(mm, &s, &zp), 0);
    cr_expect_float_eq(s, 5.0f / 255.0f, 1e-9);
    cr_expect_eq(zp, 153); /* 0 - round(-3 / (5/255)) */
    weft_observer_free(mm);
    weft_observer_free(ma);
}

Test(quant, per_channel_minmax_observer_gives_symmetric_int8_per_channel)
{
    const float w[6] = {-1, 0.25f, 0.5f, 2, -0.1f, 0.2f}; /* [3, 2] */
    const int64_t shape[2] = {3, 2};
    struct weft_observer_options o = weft_observer_defaults(WEFT_OBSERVER_MINMAX);
    o.dtype = WEFT_I8;
    o.symmetric = true;
    o.ch_axis = 0;
    weft_observer *obs = weft_observer_new(&o);
    cr_assert_eq(weft_observer_update(obs, weft_from_host(w, 2, shape, WEFT_F32, WEFT_CPU)), 0);
    weft_tensor *s, *z;
    cr_assert_eq(weft_observer_qparams_per_channel(obs, &s, &z), 0);
    const float *sv = weft_tensor_data(s);
    const int64_t *zv = weft_tensor_data(z);
    const float want[3] = {1.0f / 127.5f, 2.0f / 127.5f, 0.2f / 127.5f};
    for (int c = 0; c < 3; c++) {
        cr_expect_float_eq(sv[c], want[c], 1e-9, "channel %d", c);
        cr_expect_eq(zv[c], 0);
    }
    double lo, hi;
    cr_expect_neq(weft_observer_range(obs, &lo, &hi), 0);
    tu_assert_error(WEFT_ERR_RUNTIME, "per-channel");
    weft_observer_free(obs);
}

/* tests/quant/gen.py's data sets: a closed formula of i in float64, rounded to float32,
 * with whole-number ends. */
static weft_tensor *fixture_values(const char *name, int64_t n)
{
    float *v = malloc((size_t)n * sizeof *v);
    cr_assert_not_null(v);
    double ends[2] = {0, 0};
    for (int64_t i = 0; i < n; i++) {
        double u = (i + 0.5) / (double)n, x;
        if (!strcmp(name, "exponential"))
            x = -log(1.0 - u) * 0.7, ends[0] = 0, ends[1] = 8;
        else if (!strcmp(name, "cauchy"))
            x = fmax(-4.0, fmin(4.0, tan(M_PI * (u - 0.5)) * 0.3)), ends[0] = -4, ends[1] = 4;
        else if (!strcmp(name, "uniform"))
            x = -2.0 + 5.0 * u, ends[0] = -2, ends[1] = 3;
        else
            x = log(u / (1.0 - u)) * 0.5, ends[0] = -5, ends[1] = 20;
        v[i] = (float)x;
    }
    v[0] = (float)ends[0];
    v[n - 1] = (float)ends[1];
    weft_tensor *t = vec(n, v);
    free(v);
    return t;
}

Test(quant, histogram_observer_chooses_torchs_range)
{
    char path[512];
    const char *dir = getenv("WEFT_TEST_SOURCE_DIR");
    snprintf(path, sizeof path, "%s/quant/fixtures/histogram.txt", dir ? dir : "tests");
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "cannot open %s", path);
    char line[256], name[64];
    int cases = 0;
    while (fgets(line, sizeof line, f)) {
        long long n, zp;
        double lo, hi, scale;
        if (line[0] == '#' || sscanf(line, "%63s %lld %lf %lf %lf %lld", name, &n, &lo, &hi, &scale, &zp) != 6)
            continue;
        struct weft_observer_options o = weft_observer_defaults(WEFT_OBSERVER_HISTOGRAM);
        weft_observer *h = weft_observer_new(&o);
        cr_assert_eq(weft_observer_update(h, fixture_values(name, n)), 0);
        double got_lo, got_hi;
        float s;
        int64_t z;
        cr_assert_eq(weft_observer_range(h, &got_lo, &got_hi), 0);
        cr_assert_eq(weft_observer_qparams(h, &s, &z), 0);
        const double bin = (hi - lo) / 2048;
        cr_expect(fabs(got_lo - lo) <= bin && fabs(got_hi - hi) <= bin,
                  "%s: range [%.6g, %.6g], torch [%.6g, %.6g]", name, got_lo, got_hi, lo, hi);
        cr_expect(fabs(s - scale) <= 1e-3 * scale && llabs(z - zp) <= 1,
                  "%s: scale %.6g zero point %lld, torch %.6g and %lld", name, s, (long long)z,
                  scale, zp);
        weft_observer_free(h);
        cases++;
    }
    fclose(f);
    cr_expect_eq(cases, 4);
}

/* Heavy tails spread thin: n draws of a Laplace distribution, shifted by shift. */
static weft_tensor *laplace(int64_t n, double shift)
{
    float *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++) {
        double u = (next_u32() + 0.5) / 4294967296.0 - 0.5;
        v[i] = (float)(shift - (u < 0 ? -1 : 1) * log(1 - 2 * fabs(u)));
    }
    weft_tensor *t = vec(n, v);
    free(v);
    return t;
}

Test(quant, histogram_observer_over_growing_batches_beats_minmax)
{
    struct weft_observer_options o = weft_observer_defaults(WEFT_OBSERVER_HISTOGRAM);
    weft_observer *h = weft_observer_new(&o), *h2 = weft_observer_new(&o);
    o.kind = WEFT_OBSERVER_MINMAX;
    weft_observer *mm = weft_observer_new(&o);
    rng = 4242;
    for (int b = 0; b < 4; b++) {
        /* the range moves batch by batch: the histogram is re-binned each time */
        weft_tensor *x = laplace(20000, 0.3 * b);
        cr_assert_eq(weft_observer_update(h, x), 0);
        cr_assert_eq(weft_observer_update(h2, x), 0);
        cr_assert_eq(weft_observer_update(mm, x), 0);
    }
    double lo, hi, mlo, mhi, lo2, hi2;
    cr_assert_eq(weft_observer_range(h, &lo, &hi), 0);
    cr_assert_eq(weft_observer_range(h2, &lo2, &hi2), 0);
    cr_assert_eq(weft_observer_range(mm, &mlo, &mhi), 0);
    cr_expect_eq(lo, lo2, "two observers of the same data disagree");
    cr_expect_eq(hi, hi2);
    cr_expect(lo >= mlo - 1e-6 && hi <= mhi + (mhi - mlo) / 2048 * 2, "[%g, %g] outside [%g, %g]",
              lo, hi, mlo, mhi);
    cr_expect_lt(hi - lo, mhi - mlo, "the histogram kept the whole range [%g, %g]", lo, hi);
    /* its quantization error on such data is below min/max's */
    rng = 99;
    weft_tensor *x = laplace(20000, 0.45);
    double err[2];
    for (int k = 0; k < 2; k++) {
        float s;
        int64_t zp;
        cr_assert_eq(weft_observer_qparams(k ? mm : h, &s, &zp), 0);
        weft_tensor *y = weft_dequantize_per_tensor(weft_quantize_per_tensor(x, s, zp, WEFT_U8), s, zp);
        double e = 0;
        const float *a = weft_tensor_data(x), *b = weft_tensor_data(y);
        for (int64_t i = 0; i < 20000; i++)
            e += (a[i] - b[i]) * (double)(a[i] - b[i]);
        err[k] = e;
    }
    cr_expect_lt(err[0], err[1], "histogram %g vs minmax %g", err[0], err[1]);
    weft_observer_free(h);
    weft_observer_free(h2);
    weft_observer_free(mm);
}

Test(quant, observers_refuse_what_torch_refuses)
{
    struct weft_observer_options o = weft_observer_defaults(WEFT_OBSERVER_HISTOGRAM);
    o.ch_axis = 0;
    cr_expect_null(weft_observer_new(&o));
    tu_assert_error(WEFT_ERR_NOT_IMPLEMENTED, "per_tensor");
    o = weft_observer_defaults(WEFT_OBSERVER_MINMAX);
    weft_observer *obs = weft_observer_new(&o);
    float s;
    int64_t zp;
    cr_expect_neq(weft_observer_qparams(obs, &s, &zp), 0);
    tu_assert_error(WEFT_ERR_RUNTIME, "must run observer");
    weft_observer_free(obs);
}

/* ---- fusion -------------------------------------------------------------------------------- */

/* Sets a module's float tensor to random values in [lo, hi). */
static void randomize(weft_module *m, const char *name, bool buffer, double lo, double hi)
{
    weft_tensor *t = buffer ? weft_module_buffer(m, name) : weft_module_parameter(m, name);
    cr_assert_not_null(t, "no %s", name);
    bool prev = weft_no_grad_begin();
    cr_assert_eq(weft_copy_(t, random_of(t->ndim, t->shape, WEFT_F32, lo, hi)), 0);
    weft_grad_mode_restore(prev);
}

static void randomize_bn(weft_module *bn)
{
    randomize(bn, "weight", false, 0.5, 1.5);
    randomize(bn, "bias", false, -0.5, 0.5);
    randomize(bn, "running_mean", true, -0.3, 0.3);
    randomize(bn, "running_var", true, 0.2, 2.0);
}

/* conv(1->6) bn relu pool conv(6->5) bn relu pool flatten linear(5*3*3->12) relu linear */
static weft_module *small_cnn(bool with_bn)
{
    rng = 777; /* the BatchNorms' statistics */
    struct weft_conv2d_options c1 = {1, 6, {3, 3}, {.padding = {1, 1}}, true};
    struct weft_conv2d_options c2 = {6, 5, {3, 3}, {.padding = {1, 1}}, true};
    struct weft_pool2d_params pool = {.kernel = {2, 2}};
    weft_module *parts[12];
    int n = 0;
    parts[n++] = weft_nn_conv2d(&c1);
    if (with_bn)
        parts[n++] = weft_nn_batch_norm2d(6, 1e-5, 0.1);
    parts[n++] = weft_nn_relu();
    parts[n++] = weft_nn_max_pool2d(&pool);
    parts[n++] = weft_nn_conv2d(&c2);
    if (with_bn)
        parts[n++] = weft_nn_batch_norm2d(5, 1e-5, 0.1);
    parts[n++] = weft_nn_relu();
    parts[n++] = weft_nn_max_pool2d(&pool);
    parts[n++] = weft_nn_flatten(1, -1);
    parts[n++] = weft_nn_linear(5 * 3 * 3, 12, true);
    parts[n++] = weft_nn_relu();
    parts[n++] = weft_nn_linear(12, 4, true);
    weft_module *m = weft_nn_sequential(n, parts);
    cr_assert_not_null(m, "%s", weft_error_message());
    for (int i = 0; with_bn && i < n; i++) {
        weft_module *c = weft_module_child_at(m, i);
        if (!strcmp(weft_module_type_name(c), "BatchNorm2d"))
            randomize_bn(c);
    }
    weft_module_train(m, false);
    return m;
}

static void assert_close_tensors(weft_tensor *a, weft_tensor *b, double atol, const char *what)
{
    cr_assert_not_null(a, "%s: %s", what, weft_error_message());
    cr_assert_not_null(b, "%s: %s", what, weft_error_message());
    cr_assert_eq(weft_tensor_numel(a), weft_tensor_numel(b));
    weft_tensor *ac = weft_contiguous(weft_to_dtype(a, WEFT_F32)), *bc = weft_contiguous(weft_to_dtype(b, WEFT_F32));
    const float *x = weft_tensor_data(ac), *y = weft_tensor_data(bc);
    double worst = 0;
    for (int64_t i = 0; i < weft_tensor_numel(a); i++)
        worst = fmax(worst, fabs((double)x[i] - y[i]));
    cr_expect_leq(worst, atol, "%s: largest difference %g", what, worst);
}

Test(quant, fused_model_equals_the_unfused_within_1e_5)
{
    weft_module *m = small_cnn(true);
    const int64_t xs[4] = {5, 1, 12, 12};
    weft_tensor *x = random_of(4, xs, WEFT_F32, -1, 2);
    weft_tensor *before = weft_module_forward(m, x);
    int n = weft_fuse_model(m);
    cr_assert_eq(n, 3, "fused %d groups: %s", n, weft_error_message());
    weft_tensor *after = weft_module_forward(m, x);
    assert_close_tensors(before, after, 1e-5, "fused CNN");
    char *repr = weft_module_repr(m);
    cr_expect(strstr(repr, "ConvReLU2d") && strstr(repr, "LinearReLU") && strstr(repr, "Identity()"),
              "%s", repr);
    free(repr);
    weft_module_free(m);
}

Test(quant, fuse_modules_by_name_and_its_errors)
{
    weft_module *parts[3] = {weft_nn_linear(6, 5, true), weft_nn_batch_norm1d(5, 1e-3, 0.1),
                             weft_nn_tanh()};
    weft_module *m = weft_nn_sequential(3, parts);
    randomize_bn(weft_module_child(m, "1"));
    const int64_t xs[2] = {4, 6};
    weft_tensor *x = random_of(2, xs, WEFT_F32, -1, 1);
    const char *bad[2] = {"0", "2"};
    cr_expect_neq(weft_fuse_modules(m, 2, bad), 0);
    tu_assert_error(WEFT_ERR_RUNTIME, "cannot fuse [0 (Linear), 2 (Tanh)]");
    const char *group[2] = {"0", "1"};
    cr_expect_neq(weft_fuse_modules(m, 2, group), 0); /* BatchNorm in training mode */
    tu_assert_error(WEFT_ERR_RUNTIME, "eval mode");
    weft_module_train(m, false);
    weft_tensor *before = weft_module_forward(m, x);
    cr_assert_eq(weft_fuse_modules(m, 2, group), 0, "%s", weft_error_message());
    cr_expect_str_eq(weft_module_type_name(weft_module_child(m, "1")), "Identity");
    assert_close_tensors(before, weft_module_forward(m, x), 1e-5, "Linear + BatchNorm1d");
    const char *missing[2] = {"0", "7"};
    cr_expect_neq(weft_fuse_modules(m, 2, missing), 0);
    tu_assert_error(WEFT_ERR_RUNTIME, "no submodule '7'");
    weft_module_free(m);
}

/* ---- static and dynamic quantization -------------------------------------------------------- */

/* A prepared, calibrated and converted copy of small_cnn; calibration batches drawn from a
 * fixed stream. */
static weft_module *quantized_cnn(const struct weft_qconfig *qc, uint64_t seed)
{
    weft_manual_seed(7);
    weft_module *m = small_cnn(true);
    weft_quant_prepared *p = weft_quant_prepare(m, qc);
    cr_assert_not_null(p, "%s", weft_error_message());
    rng = seed;
    const int64_t xs[4] = {16, 1, 12, 12};
    for (int b = 0; b < 3; b++)
        cr_assert_eq(weft_quant_observe(p, random_of(4, xs, WEFT_F32, -0.5, 2.5)), 0, "%s",
                     weft_error_message());
    cr_assert_eq(weft_quant_convert(p), 0, "%s", weft_error_message());
    weft_quant_prepared_free(p);
    return m;
}

Test(quant, static_quantization_of_a_cnn_stays_close_to_float)
{
    weft_manual_seed(7);
    weft_module *ref = small_cnn(true);
    const int64_t xs[4] = {32, 1, 12, 12};
    const struct weft_qconfig configs[3] = {{WEFT_OBSERVER_HISTOGRAM, false},
                                            {WEFT_OBSERVER_MINMAX, true},
                                            {WEFT_OBSERVER_MOVING_AVERAGE, false}};
    for (int c = 0; c < 3; c++) {
        weft_module *q = quantized_cnn(&configs[c], 99);
        rng = 5;
        weft_tensor *x = random_of(4, xs, WEFT_F32, -0.5, 2.5);
        weft_tensor *want = weft_module_forward(ref, x), *got = weft_module_forward(q, x);
        cr_assert_not_null(got, "%s", weft_error_message());
        cr_expect_eq(got->dtype, WEFT_F32);
        double scale = 0;
        const float *w = weft_tensor_data(weft_contiguous(want));
        for (int64_t i = 0; i < weft_tensor_numel(want); i++)
            scale = fmax(scale, fabs(w[i]));
        assert_close_tensors(want, got, 0.08 * scale, "int8 CNN");
        char *repr = weft_module_repr(q);
        cr_expect(strstr(repr, "QuantizedConvReLU2d") && strstr(repr, "QuantizedLinearReLU") &&
                      strstr(repr, "QuantizedLinear(") && strstr(repr, "output=float32"),
                  "%s", repr);
        free(repr);
        weft_module_free(q);
    }
    weft_module_free(ref);
}

/* Children [from, to) of m on x, in order. */
static weft_tensor *run_children(weft_module *m, int from, int to, weft_tensor *x)
{
    for (int i = from; i < to && x; i++)
        x = weft_module_forward(weft_module_child_at(m, i), x);
    cr_assert_not_null(x, "%s", weft_error_message());
    return x;
}

static void assert_same_bytes(weft_tensor *a, weft_tensor *b, const char *what)
{
    cr_assert_not_null(a, "%s: %s", what, weft_error_message());
    cr_assert_not_null(b, "%s: %s", what, weft_error_message());
    cr_assert_eq(a->dtype, b->dtype, "%s", what);
    cr_assert_eq(weft_tensor_numel(a), weft_tensor_numel(b), "%s", what);
    a = weft_contiguous(a);
    b = weft_contiguous(b);
    const uint8_t *x = weft_tensor_data(a), *y = weft_tensor_data(b);
    int64_t differ = 0, n = weft_tensor_numel(a) * weft_tensor_itemsize(a);
    for (int64_t i = 0; i < n; i++)
        differ += x[i] != y[i];
    cr_expect_eq(differ, 0, "%s: %lld of %lld bytes differ", what, (long long)differ, (long long)n);
}

/* The int8 CNN's Flatten reads the last pool's channels-last [N, 5, 3, 3] (C and H*W above
 * 1, so its memory order is not torch's flatten order): conversion folds it into the
 * Linear after it, which reads that memory as it lies with its weight columns permuted.
 * Its outputs must be the bytes of torch's order: the same layer on the NCHW copy of its
 * input, on torch's flatten of it, and on the float32 values it stands for; and so the
 * logits of the whole model against the model run with that copy. */
Test(quant, a_linear_after_a_quantized_conv_reads_its_channels_last_input_in_place)
{
    struct weft_qconfig qc = weft_qconfig_default();
    weft_module *q = quantized_cnn(&qc, 99);
    /* 0 ConvReLU 1-2 Identity 3 pool 4 ConvReLU 5-6 Identity 7 pool 8 Flatten 9 LinearReLU */
    cr_assert_str_eq(weft_module_type_name(weft_module_child_at(q, 8)), "Identity");
    weft_module *fc = weft_module_child_at(q, 9);
    cr_assert_str_eq(weft_module_type_name(fc), "QuantizedLinearReLU");
    rng = 11;
    const int64_t xs[4] = {7, 1, 12, 12};
    weft_tensor *x = random_of(4, xs, WEFT_F32, -0.5, 2.5);
    weft_tensor *u = run_children(q, 0, 9, x);
    cr_assert_eq(u->dtype, WEFT_U8);
    cr_assert(u->ndim == 4 && u->shape[1] == 5 && u->shape[2] == 3 && u->shape[3] == 3);
    cr_assert(u->stride[1] == 1 && u->stride[3] == 5, "not channels-last: the test tests nothing");
    weft_tensor *nchw = weft_contiguous(u);
    weft_tensor *y = weft_module_forward(fc, u);
    assert_same_bytes(y, weft_module_forward(fc, nchw), "fc on its NCHW copy");
    assert_same_bytes(y, weft_module_forward(fc, weft_flatten(u, 1, -1)), "fc on torch's flatten");
    double sx, zx;
    cr_assert_eq(weft_tensor_item(weft_module_buffer(fc, "input_scale"), &sx), 0);
    cr_assert_eq(weft_tensor_item(weft_module_buffer(fc, "input_zero_point"), &zx), 0);
    weft_tensor *real = weft_dequantize_per_tensor(u, sx, (int64_t)zx);
    assert_same_bytes(y, weft_module_forward(fc, real), "fc on the float32 values");
    const int n = weft_module_num_children(q);
    assert_same_bytes(weft_module_forward(q, x), run_children(q, 9, n, nchw), "logits");
    weft_module_free(q);
}

Test(quant, a_flatten_of_a_float32_input_stays_a_flatten)
{
    weft_module *parts[4] = {weft_nn_flatten(1, -1), weft_nn_linear(16, 8, true), weft_nn_relu(),
                             weft_nn_linear(8, 3, true)};
    weft_module *m = weft_nn_sequential(4, parts);
    weft_module_train(m, false);
    weft_quant_prepared *p = weft_quant_prepare(m, NULL);
    cr_assert_not_null(p, "%s", weft_error_message());
    rng = 3;
    const int64_t xs[4] = {6, 1, 4, 4};
    weft_tensor *x = random_of(4, xs, WEFT_F32, -1, 1);
    cr_assert_eq(weft_quant_observe(p, x), 0, "%s", weft_error_message());
    cr_assert_eq(weft_quant_convert(p), 0, "%s", weft_error_message());
    weft_quant_prepared_free(p);
    cr_expect_str_eq(weft_module_type_name(weft_module_child_at(m, 0)), "Flatten");
    weft_tensor *y = weft_module_forward(m, x);
    cr_assert_not_null(y, "%s", weft_error_message());
    cr_expect(y->ndim == 2 && y->shape[0] == 6 && y->shape[1] == 3);
    weft_module_free(m);
}

Test(quant, calibration_is_deterministic)
{
    struct weft_qconfig qc = weft_qconfig_default();
    weft_module *a = quantized_cnn(&qc, 99), *b = quantized_cnn(&qc, 99);
    struct weft_tensor_dict *da = weft_module_state_dict(a), *db = weft_module_state_dict(b);
    cr_assert_eq(weft_tensor_dict_len(da), weft_tensor_dict_len(db));
    for (size_t i = 0; i < weft_tensor_dict_len(da); i++) {
        weft_tensor *x = weft_contiguous(weft_tensor_dict_at(da, i));
        weft_tensor *y = weft_contiguous(weft_tensor_dict_at(db, i));
        cr_assert_eq(x->dtype, y->dtype);
        cr_expect_eq(memcmp(weft_tensor_data(x), weft_tensor_data(y),
                            (size_t)weft_tensor_numel(x) * weft_tensor_itemsize(x)), 0,
                     "'%s' differs between two calibrations", weft_tensor_dict_name(da, i));
    }
    weft_tensor_dict_free(da);
    weft_tensor_dict_free(db);
    weft_module_free(a);
    weft_module_free(b);
}

Test(quant, dynamic_quantization_of_linear_and_lstm_layers)
{
    struct weft_rnn_options o = weft_rnn_defaults(WEFT_RNN_LSTM, 8, 16);
    o.batch_first = true;
    o.num_layers = 2;
    o.bidirectional = true;
    weft_module *parts[3] = {weft_nn_linear(5, 8, true), weft_nn_rnn(&o), weft_nn_linear(32, 7, true)};
    weft_module *m = weft_nn_sequential(3, parts), *ref;
    weft_module *parts2[3] = {weft_nn_linear(5, 8, true), weft_nn_rnn(&o), weft_nn_linear(32, 7, true)};
    ref = weft_nn_sequential(3, parts2);
    struct weft_tensor_dict *same = weft_module_state_dict(ref);
    cr_assert_eq(weft_module_load_state_dict(m, same, true), 0);
    weft_tensor_dict_free(same);
    weft_module_train(ref, false);
    struct weft_qconfig qc = weft_qconfig_default();
    cr_assert_eq(weft_quantize_dynamic(m, &qc), 3, "%s", weft_error_message());
    const int64_t xs[3] = {3, 11, 5};
    weft_tensor *x = random_of(3, xs, WEFT_F32, -1, 1);
    weft_tensor *want = weft_module_forward(ref, x), *got = weft_module_forward(m, x);
    assert_close_tensors(want, got, 0.03, "dynamic int8 Linear + LSTM");
    char *repr = weft_module_repr(m);
    cr_expect(strstr(repr, "DynamicQuantizedLinear(in_features=5, out_features=8, dtype=torch.qint8") &&
                  strstr(repr, "DynamicQuantizedLSTM(") &&
                  strstr(repr, "8, 16, num_layers=2, batch_first=True, bidirectional=True") &&
                  strstr(repr, "(ih_l0_reverse): DynamicQuantizedLinear(in_features=8, out_features=64"),
              "%s", repr);
    free(repr);
    weft_module_free(m);
    weft_module_free(ref);
}

static struct weft_metadata *scheme(bool dynamic);

static weft_module *tiny_gpt(void)
{
    struct weft_gpt_config c = weft_gpt_config_default();
    c.n_layer = 2;
    c.n_head = 2;
    c.n_embd = 32;
    c.block_size = 16;
    c.vocab_size = 50;
    c.bias = true;
    weft_manual_seed(3);
    weft_module *m = weft_gpt_new(&c);
    cr_assert_not_null(m, "%s", weft_error_message());
    weft_module_train(m, false);
    return m;
}

Test(quant, dynamic_quantization_of_a_gpt_and_its_checkpoint)
{
    weft_module *ref = tiny_gpt(), *q = tiny_gpt();
    struct weft_qconfig qc = weft_qconfig_default();
    /* per block c_attn, attn.c_proj, c_fc, mlp.c_proj; lm_head; wte and wpe */
    cr_assert_eq(weft_quantize_dynamic(q, &qc), 2 * 4 + 1 + 2, "%s", weft_error_message());
    const int64_t shape[2] = {3, 16};
    weft_tensor *idx = random_of(2, shape, WEFT_I64, 0, 49);
    weft_tensor *want = weft_module_forward(ref, idx), *got = weft_module_forward(q, idx);
    assert_close_tensors(want, got, 0.02, "dynamic int8 GPT logits");
    char *repr = weft_module_repr(q);
    cr_expect(strstr(repr, "(c_fc): DynamicQuantizedLinear(in_features=32, out_features=128") &&
                  strstr(repr, "(wte): QuantizedEmbedding(num_embeddings=50, embedding_dim=32"),
              "%s", repr);
    free(repr);
    /* generation with the KV cache runs the int8 layers one position at a time: with
     * top_k 1 it picks the argmax of the int8 model's full forward */
    int64_t tokens[6] = {7, 3};
    struct weft_gpt_sampling greedy = {.temperature = 1.0, .top_k = 1};
    cr_assert_eq(weft_gpt_generate(q, tokens, 2, 4, &greedy, NULL, NULL), 0, "%s",
                 weft_error_message());
    const int64_t ctx_shape[2] = {1, 5};
    weft_tensor *logits = weft_module_forward(q, weft_from_host(tokens, 2, ctx_shape, WEFT_I64, WEFT_CPU));
    weft_tensor *next = weft_contiguous(weft_argmax(logits, 2, false));
    const int64_t *pick = weft_tensor_data(next);
    for (int i = 1; i < 4; i++)
        cr_expect_eq(tokens[i + 2], pick[i + 1], "token %d: generated %lld, the full forward's "
                                                 "argmax %lld",
                     i + 2, (long long)tokens[i + 2], (long long)pick[i + 1]);
    /* saved and loaded into a fresh float GPT: the same logits */
    struct weft_tensor_dict *d = weft_module_state_dict(q);
    struct weft_metadata *meta = scheme(true);
    weft_module *fresh = tiny_gpt();
    cr_assert_eq(weft_quant_load_state_dict(fresh, d, meta, "gpt.int8.safetensors"), 0, "%s",
                 weft_error_message());
    assert_close_tensors(got, weft_module_forward(fresh, idx), 0, "reloaded int8 GPT");
    weft_tensor_dict_free(d);
    weft_metadata_free(meta);
    weft_module_free(fresh);
    weft_module_free(q);
    weft_module_free(ref);
}

/* ---- checkpoints ---------------------------------------------------------------------------- */

static struct weft_metadata *scheme(bool dynamic)
{
    struct weft_metadata *meta = weft_metadata_new();
    struct weft_qconfig qc = weft_qconfig_default();
    cr_assert_eq(weft_quant_metadata_export(&qc, dynamic, meta), 0);
    return meta;
}

Test(quant, an_int8_checkpoint_loads_into_a_fresh_float_model)
{
    struct weft_qconfig qc = weft_qconfig_default();
    weft_module *q = quantized_cnn(&qc, 99);
    struct weft_tensor_dict *d = weft_module_state_dict(q);
    struct weft_metadata *meta = scheme(false);
    cr_assert(weft_quant_metadata_present(meta));
    weft_manual_seed(1234); /* other float weights: the file's must replace them */
    weft_module *fresh = small_cnn(true);
    cr_assert_eq(weft_quant_load_state_dict(fresh, d, meta, "model.int8.safetensors"), 0, "%s",
                 weft_error_message());
    const int64_t xs[4] = {8, 1, 12, 12};
    weft_tensor *x = random_of(4, xs, WEFT_F32, -0.5, 2.5);
    assert_close_tensors(weft_module_forward(q, x), weft_module_forward(fresh, x), 0, "reloaded");
    weft_tensor_dict_free(d);
    weft_metadata_free(meta);
    weft_module_free(q);
    weft_module_free(fresh);
}

/* A malformed copy of d: without `drop`, and with `retype` converted to dtype. */
static struct weft_tensor_dict *altered(const struct weft_tensor_dict *d, const char *drop,
                                        const char *retype, enum weft_dtype dtype)
{
    struct weft_tensor_dict *out = weft_tensor_dict_new();
    for (size_t i = 0; i < weft_tensor_dict_len(d); i++) {
        const char *k = weft_tensor_dict_name(d, i);
        weft_tensor *t = weft_tensor_dict_at(d, i);
        if (drop && !strcmp(k, drop))
            continue;
        if (retype && !strcmp(k, retype))
            t = weft_to_dtype(t, dtype);
        cr_assert_eq(weft_tensor_dict_add(out, k, t), 0);
    }
    return out;
}

Test(quant, malformed_int8_checkpoints_are_refused_naming_the_key)
{
    struct weft_qconfig qc = weft_qconfig_default();
    weft_module *q = quantized_cnn(&qc, 99);
    struct weft_tensor_dict *d = weft_module_state_dict(q);
    struct weft_metadata *meta = scheme(false);
    const struct {
        const char *drop, *retype;
        enum weft_dtype dtype;
        const char *says;
    } cases[] = {
        {"0.weight_scale", NULL, 0, "missing '0.weight_scale' (float32 [6])"},
        {NULL, "0.weight", WEFT_F32, "'0.weight' is float32 [6, 1, 3, 3], expected int8 [6, 1, 3, 3]"},
        {NULL, "9.input_scale", WEFT_F64, "'9.input_scale' is float64 [], expected float32 []"},
        {"4.zero_point", NULL, 0, "missing '4.zero_point' (int64 [])"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        struct weft_tensor_dict *bad = altered(d, cases[c].drop, cases[c].retype, cases[c].dtype);
        weft_module *fresh = small_cnn(true);
        cr_expect_neq(weft_quant_load_state_dict(fresh, bad, meta, "m.int8.safetensors"), 0);
        tu_assert_error(WEFT_ERR_VALUE, cases[c].says);
        weft_module_free(fresh);
        weft_tensor_dict_free(bad);
    }
    /* the float model's own checkpoint is not an int8 one of it */
    weft_module *fresh = small_cnn(true), *other = small_cnn(true);
    struct weft_tensor_dict *floats = weft_module_state_dict(other);
    cr_expect_neq(weft_quant_load_state_dict(fresh, floats, meta, "m.safetensors"), 0);
    tu_assert_error(WEFT_ERR_VALUE, "unexpected '1.running_mean'");
    weft_module_free(fresh);
    /* an unknown format version */
    cr_assert_eq(weft_metadata_set(meta, "quant.format", "9"), 0);
    fresh = small_cnn(true);
    cr_expect_neq(weft_quant_load_state_dict(fresh, d, meta, "m.int8.safetensors"), 0);
    tu_assert_error(WEFT_ERR_VALUE, "quant.format is '9'");
    weft_module_free(fresh);
    weft_module_free(other);
    weft_tensor_dict_free(floats);
    weft_tensor_dict_free(d);
    weft_metadata_free(meta);
    weft_module_free(q);
}
