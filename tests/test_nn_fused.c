/* tests/test_nn_fused.c: the fused kernels behind layer_norm (native_layer_norm and its
 * backward), gelu (gelu_tanh, gelu_backward) and embedding's backward
 * (embedding_dense_backward), weft/kernel.h.
 *
 * Each is checked against a plain loop written here in double, against the composite
 * of built-in ops (run on "plainhost", a backend this file registers with the cpu's
 * built-in kernels only, so every named op falls back), against numbers PyTorch printed,
 * and with weft_gradcheck in float64. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include <weft/nn.h>
#include <weft/kernel_checks.h>
#include <weft/registry.h>

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

TestSuite(nn_fused, .init = setup, .fini = teardown);

static double *alloc_doubles(int64_t n)
{
    double *v = calloc((size_t)(n > 0 ? n : 1), sizeof *v);
    cr_assert_not_null(v);
    return v;
}

static weft_tensor *leaf(weft_tensor *t)
{
    cr_assert_not_null(t, "%s", weft_error_message());
    weft_tensor *l = weft_detach(t);
    cr_assert_eq(weft_requires_grad_(l, true), 0, "%s", weft_error_message());
    return l;
}

static weft_tensor *leaf64(int ndim, const int64_t *shape, double lo, double hi, uint64_t *seed)
{
    return leaf(tu_random_tensor(ndim, shape, WEFT_F64, lo, hi, seed, NULL));
}

static double *read_all(weft_tensor *t)
{
    cr_assert_not_null(t, "%s", weft_error_message());
    double *v = alloc_doubles(weft_tensor_numel(t));
    tu_read(t, v);
    return v;
}

/* t's values (any dtype) as a float64 cpu tensor, for tu_assert_close against doubles. */
static void expect_close(weft_tensor *t, const double *expected, double tol, const char *what)
{
    cr_assert_not_null(t, "%s: %s", what, weft_error_message());
    tu_assert_close(t, expected, weft_tensor_numel(t), tol, tol);
}

static weft_tensor *apply_unary_fn(void *ctx, weft_tensor *const *in)
{
    return ((weft_tensor * (*)(weft_tensor *)) ctx)(in[0]);
}

static void expect_gradcheck(weft_gradcheck_fn fn, void *ctx, int n, weft_tensor *const *inputs,
                             const char *what)
{
    int rc = weft_gradcheck(fn, ctx, n, inputs, 1e-6, 1e-6, 1e-5);
    cr_expect_eq(rc, 0, "%s: %s", what, weft_error_message());
    weft_error_clear();
}

static double dtype_tol(enum weft_dtype dt)
{
    return dt == WEFT_F64 ? 1e-12 : dt == WEFT_F32 ? 2e-5 : dt == WEFT_BF16 ? 6e-2 : 1e-2;
}

/* ---- plainhost: a backend with the cpu's built-in kernels and none of the named ones ---- */

static int plain_count(void *context)
{
    return 1;
}

static void *plain_alloc(void *context, int index, size_t nbytes)
{
    (void)index;
    void *p = malloc(nbytes ? nbytes : 1);
    if (!p)
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "plainhost: out of memory");
    return p;
}

static void plain_free(void *context, int index, void *ptr, size_t nbytes)
{
    (void)index, (void)nbytes;
    free(ptr);
}

static int plain_copy(void *context, weft_tensor *dst, const weft_tensor *src, bool non_blocking)
{
    (void)non_blocking;
    memcpy(weft_tensor_data(dst), weft_tensor_data(src),
           (size_t)weft_tensor_numel(src) * weft_dtype_size(src->dtype));
    return 0;
}

static const struct weft_backend plain_backend = {
    .base = WEFT_VTABLE(WEFT_KIND_BACKEND, "plainhost", struct weft_backend),
    .device_count = plain_count,
    .alloc = plain_alloc,
    .free = plain_free,
    .copy = plain_copy,
};

/* The plainhost device, registered on first use with every built-in op's cpu kernels. */
static weft_device plain_device(void)
{
    static int type = -1;
    if (type < 0) {
        type = weft_register(&plain_backend);
        cr_assert_geq(type, 0, "%s", weft_error_message());
        for (int op = 0; op < WEFT_OP_BUILTIN_COUNT; op++)
            for (int dt = 0; dt < WEFT_DTYPE_COUNT; dt++) {
                weft_kernel_fn fn = weft_kernel_lookup(op, WEFT_DEVICE_CPU, WEFT_LAYOUT_STRIDED,
                                                       (enum weft_dtype)dt);
                if (fn)
                    cr_assert_eq(weft_kernel_register(op, type, WEFT_LAYOUT_STRIDED,
                                                      WEFT_DTYPE_BIT(dt), fn),
                                 0);
            }
    }
    return (weft_device){type, 0};
}

/* A leaf copy of t on plainhost. */
static weft_tensor *on_plain(weft_tensor *t)
{
    weft_tensor *p = weft_to_device(t, plain_device());
    cr_assert_not_null(p, "%s", weft_error_message());
    return weft_requires_grad(t) ? leaf(p) : p;
}

static weft_tensor *grad_on_cpu(weft_tensor *t)
{
    weft_tensor *g = weft_grad(t);
    cr_assert_not_null(g, "no gradient: %s", weft_error_message());
    return weft_to_device(g, WEFT_CPU);
}

/* ---- layer norm: reference ----------------------------------------------------------------- */

/* y, and for upstream gradient g the gradients dx, dw, db, straight from the formulas in
 * double: rows of D elements; w, b may be NULL. */
static void layer_norm_reference(const double *x, const double *w, const double *b,
                                 const double *g, int64_t R, int64_t D, double eps, double *y,
                                 double *dx, double *dw, double *db)
{
    for (int64_t j = 0; j < D; j++)
        dw[j] = db[j] = 0;
    for (int64_t r = 0; r < R; r++) {
        const double *xr = x + r * D, *gr = g + r * D;
        double mean = 0, var = 0;
        for (int64_t j = 0; j < D; j++)
            mean += xr[j];
        mean /= (double)D;
        for (int64_t j = 0; j < D; j++)
            var += (xr[j] - mean) * (xr[j] - mean);
        var /= (double)D;
        double rstd = 1 / sqrt(var + eps), a = 0, c = 0;
        for (int64_t j = 0; j < D; j++) {
            double xh = (xr[j] - mean) * rstd, wj = w ? w[j] : 1;
            y[r * D + j] = xh * wj + (b ? b[j] : 0);
            a += gr[j] * wj;
            c += gr[j] * wj * xh;
            dw[j] += gr[j] * xh;
            db[j] += gr[j];
        }
        a /= (double)D, c /= (double)D;
        for (int64_t j = 0; j < D; j++) {
            double xh = (xr[j] - mean) * rstd, wj = w ? w[j] : 1;
            dx[r * D + j] = rstd * (gr[j] * wj - a - xh * c);
        }
    }
}

struct ln_case {
    int ndim;
    int64_t shape[4];
    int nnorm; /* trailing normalised dims */
};

static const struct ln_case ln_cases[] = {
    {2, {1, 1}, 1},       /* one element: y = b */
    {2, {7, 13}, 1},      /* rows not a multiple of any vector width */
    {3, {4, 3, 33}, 1},   /* 3-d */
    {2, {5, 64}, 1},      /* vector-width rows */
    {3, {2, 5, 6}, 2},    /* two normalised dims */
    {2, {768, 128}, 1},   /* GPT's shape: parallel rows, 32 blocks of dw/db */
    {2, {37, 1000}, 1},   /* long rows */
};

/* Layer norm of every case, dtype and affine form against the reference: values and
 * all three gradients. transposed: x is the transpose of a contiguous tensor (the layer
 * makes it contiguous for the kernel). */
static void layer_norm_against_reference(enum weft_dtype dt, bool transposed)
{
    for (size_t k = 0; k < sizeof ln_cases / sizeof *ln_cases; k++) {
        const struct ln_case *c = &ln_cases[k];
        if (transposed && c->nnorm != 1)
            continue;
        for (int affine = 0; affine < 4; affine++) {
            weft_scope_push();
            uint64_t seed = 7 + k * 4 + (uint64_t)affine;
            const int64_t *nshape = c->shape + c->ndim - c->nnorm;
            int64_t n = weft_shape_numel(c->ndim, c->shape), D = weft_shape_numel(c->nnorm, nshape), R = n / D;
            double *xv = alloc_doubles(n), *gv = alloc_doubles(n), *wv = alloc_doubles(D);
            double *bv = alloc_doubles(D), *y = alloc_doubles(n), *dx = alloc_doubles(n);
            double *dw = alloc_doubles(D), *db = alloc_doubles(D);
            weft_tensor *x;
            if (transposed) {
                /* a [D, R] tensor's transpose: [R, D] with strides (1, R); values read back */
                int64_t ts[2] = {D, R};
                x = weft_t(tu_random_tensor(2, ts, dt, -3, 5, &seed, xv));
                x = weft_reshape(x, c->ndim, c->shape); /* copies: not viewable in general */
                cr_assert_not_null(x, "%s", weft_error_message());
                tu_read(x, xv);
            } else {
                x = tu_random_tensor(c->ndim, c->shape, dt, -3, 5, &seed, xv);
            }
            /* values as dt holds them, so the reference starts from the same inputs */
            tu_read(x, xv);
            weft_tensor *g = tu_random_tensor(c->ndim, c->shape, dt, -1, 1, &seed, gv);
            tu_read(g, gv);
            weft_tensor *w = (affine & 1) ? tu_random_tensor(c->nnorm, nshape, dt, -2, 2, &seed, wv) : NULL;
            weft_tensor *b = (affine & 2) ? tu_random_tensor(c->nnorm, nshape, dt, -1, 1, &seed, bv) : NULL;
            if (w)
                tu_read(w, wv);
            if (b)
                tu_read(b, bv);
            layer_norm_reference(xv, w ? wv : NULL, b ? bv : NULL, gv, R, D, 1e-5, y, dx, dw, db);
            weft_tensor *xl = leaf(x), *wl = w ? leaf(w) : NULL, *bl = b ? leaf(b) : NULL;
            weft_tensor *out = weft_layer_norm(xl, c->nnorm, nshape, wl, bl, 1e-5);
            cr_assert_not_null(out, "%s", weft_error_message());
            cr_expect_str_eq(weft_grad_fn_name(out), "NativeLayerNormBackward0");
            cr_expect_eq(out->dtype, dt);
            tu_assert_shape(out, c->ndim, c->shape);
            double tol = dtype_tol(dt) * (dt == WEFT_F32 || dt == WEFT_F64 ? 10 : 2);
            expect_close(out, y, tol, "y");
            cr_assert_eq(weft_backward(out, g, false), 0, "%s", weft_error_message());
            /* dx sums D terms of the size of g * w: scale the tolerance by the row */
            expect_close(weft_grad(xl), dx, tol * (dt == WEFT_F64 || dt == WEFT_F32 ? 1 : 4), "dx");
            double sum_tol = tol * sqrt((double)R) * 4;
            if (wl)
                expect_close(weft_grad(wl), dw, sum_tol, "dw");
            if (bl)
                expect_close(weft_grad(bl), db, sum_tol, "db");
            free(xv), free(gv), free(wv), free(bv), free(y), free(dx), free(dw), free(db);
            weft_scope_pop();
        }
    }
}

/* ---- layer norm ---------------------------------------------------------------------------- */

Test(nn_fused, layer_norm_matches_the_plain_formula_in_float64_and_float32)
{
    layer_norm_against_reference(WEFT_F64, false);
    layer_norm_against_reference(WEFT_F32, false);
}

Test(nn_fused, layer_norm_matches_the_plain_formula_in_16_bit_floats)
{
    layer_norm_against_reference(WEFT_BF16, false);
    layer_norm_against_reference(WEFT_F16, false);
}

Test(nn_fused, layer_norm_of_a_non_contiguous_input_matches_the_plain_formula)
{
    layer_norm_against_reference(WEFT_F32, true);
    layer_norm_against_reference(WEFT_F64, true);
}

/* x [3, 5], w, b, g: what PyTorch 1.13 prints for
 * /usr/bin/python3 -c "import torch, torch.nn.functional as F; d = torch.float64;
 *   x = torch.tensor([[0.5,-1.25,2.0,0.75,-0.3],[3.0,3.5,2.5,4.0,3.25],[-2.0,1.0,0.0,-0.5,1.5]],
 *   dtype=d, requires_grad=True); w = torch.tensor([1.5,-0.5,2.0,0.25,1.0], dtype=d,
 *   requires_grad=True); b = torch.tensor([0.1,0.2,-0.3,0.0,0.5], dtype=d, requires_grad=True);
 *   y = F.layer_norm(x, (5,), w, b, 1e-5); y.backward(torch.tensor([[1.0,-2.0,0.5,0.25,3.0],
 *   [0.0,1.0,-1.0,2.0,0.5],[1.5,0.5,-0.5,-1.0,2.0]], dtype=d));
 *   print(y, x.grad, w.grad, b.grad, y.grad_fn.name())" */
Test(nn_fused, layer_norm_gives_pytorchs_values_and_gradients)
{
    const int64_t xs[2] = {3, 5}, ws[1] = {5};
    const double xv[15] = {0.5, -1.25, 2.0, 0.75, -0.3, 3.0, 3.5, 2.5, 4.0, 3.25, -2.0, 1.0, 0.0, -0.5, 1.5};
    const double wv[5] = {1.5, -0.5, 2.0, 0.25, 1.0}, bv[5] = {0.1, 0.2, -0.3, 0.0, 0.5};
    const double gv[15] = {1.0, -2.0, 0.5, 0.25, 3.0, 0.0, 1.0, -1.0, 2.0, 0.5, 1.5, 0.5, -0.5, -1.0, 2.0};
    const double y[15] = {0.32118077817048, 0.932661327689716, 2.759667431358312, 0.094462624010309,
                          -0.089815408454614, -0.649985000449985, -0.049995000149995,
                          -3.299940001799939, 0.374992500224993, 0.5, -2.349481577858194,
                          -0.208246929643032, -0.3, -0.102061732410758, 1.724740788929097};
    const double dx[15] = {0.212481568683463, -0.682356406928621, 0.123726584619939,
                           -1.05029274993487, 1.396441003560089, 1.29994600245989,
                           -1.099950002339893, -1.300057995740225, -0.499906005339739,
                           1.599968000959969, 1.034227913839995, -0.476289263955694,
                           -1.2655654818934, -0.74164799916543, 1.44927483117453};
    const double dw[5] = {-2.30202772574454, 3.838882240701888, 2.264886858739548,
                          3.502649555453282, 0.68003535249435};
    const double db[5] = {2.5, -0.5, -1.0, 1.25, 5.5};
    for (int f32 = 0; f32 < 2; f32++) {
        enum weft_dtype dt = f32 ? WEFT_F32 : WEFT_F64;
        double tol = f32 ? 2e-6 : 1e-13;
        weft_tensor *x = leaf(tu_tensor(2, xs, xv, dt)), *w = leaf(tu_tensor(1, ws, wv, dt));
        weft_tensor *b = leaf(tu_tensor(1, ws, bv, dt));
        weft_tensor *out = weft_layer_norm(x, 1, ws, w, b, 1e-5);
        expect_close(out, y, tol, "y");
        cr_expect_str_eq(weft_grad_fn_name(out), "NativeLayerNormBackward0");
        cr_assert_eq(weft_backward(out, tu_tensor(2, xs, gv, dt), false), 0, "%s",
                     weft_error_message());
        expect_close(weft_grad(x), dx, tol * 4, "dx");
        expect_close(weft_grad(w), dw, tol * 4, "dw");
        expect_close(weft_grad(b), db, tol * 4, "db");
    }
}

struct ln_ctx {
    int nnorm;
    const int64_t *nshape;
    bool weight, bias;
};

static weft_tensor *apply_layer_norm(void *vctx, weft_tensor *const *in)
{
    const struct ln_ctx *c = vctx;
    return weft_layer_norm(in[0], c->nnorm, c->nshape, c->weight ? in[1] : NULL,
                           c->bias ? in[c->weight ? 2 : 1] : NULL, 1e-5);
}

Test(nn_fused, layer_norm_passes_gradcheck_with_and_without_weight_and_bias)
{
    uint64_t seed = 3;
    const int64_t xs[3] = {2, 3, 7}, ns1[1] = {7}, ns2[2] = {3, 7};
    for (int nnorm = 1; nnorm <= 2; nnorm++) {
        const int64_t *ns = nnorm == 1 ? ns1 : ns2;
        for (int affine = 0; affine < 4; affine++) {
            struct ln_ctx c = {nnorm, ns, affine & 1, (affine & 2) != 0};
            weft_tensor *in[3] = {leaf64(3, xs, -2, 2, &seed)};
            int n = 1;
            if (c.weight)
                in[n++] = leaf64(nnorm, ns, -2, 2, &seed);
            if (c.bias)
                in[n++] = leaf64(nnorm, ns, -1, 1, &seed);
            expect_gradcheck(apply_layer_norm, &c, n, in, "layer_norm");
        }
    }
}

/* Twice the same backward gives the same bits (dw/db are summed in a fixed order). */
Test(nn_fused, layer_norm_weight_gradient_is_deterministic)
{
    uint64_t seed = 11;
    const int64_t xs[2] = {1000, 96}, ws[1] = {96};
    weft_tensor *x = tu_random_tensor(2, xs, WEFT_F32, -3, 3, &seed, NULL);
    weft_tensor *g = tu_random_tensor(2, xs, WEFT_F32, -1, 1, &seed, NULL);
    weft_tensor *w0 = tu_random_tensor(1, ws, WEFT_F32, -1, 1, &seed, NULL);
    double first[96];
    for (int run = 0; run < 3; run++) {
        weft_tensor *w = leaf(w0);
        weft_tensor *y = weft_layer_norm(x, 1, ws, w, NULL, 1e-5);
        cr_assert_eq(weft_backward(y, g, false), 0, "%s", weft_error_message());
        double v[96];
        tu_read(weft_grad(w), v);
        if (run == 0)
            memcpy(first, v, sizeof v);
        else
            cr_expect_eq(memcmp(first, v, sizeof v), 0, "run %d differs", run);
    }
}

/* A backend without native_layer_norm gets the composite: the same values and gradients
 * through six recorded ops. */
Test(nn_fused, layer_norm_falls_back_to_the_composite_without_the_kernels)
{
    uint64_t seed = 5;
    const int64_t xs[3] = {3, 4, 9}, ws[1] = {9};
    weft_tensor *x = leaf64(3, xs, -2, 3, &seed), *w = leaf64(1, ws, -2, 2, &seed);
    weft_tensor *b = leaf64(1, ws, -1, 1, &seed);
    weft_tensor *g = tu_random_tensor(3, xs, WEFT_F64, -1, 1, &seed, NULL);
    weft_tensor *px = on_plain(x), *pw = on_plain(w), *pb = on_plain(b);
    weft_tensor *y = weft_layer_norm(x, 1, ws, w, b, 1e-5);
    weft_tensor *py = weft_layer_norm(px, 1, ws, pw, pb, 1e-5);
    cr_assert_not_null(py, "%s", weft_error_message());
    cr_expect_str_eq(weft_grad_fn_name(y), "NativeLayerNormBackward0");
    cr_expect_str_neq(weft_grad_fn_name(py), "NativeLayerNormBackward0");
    cr_expect_eq(py->device.type, plain_device().type);
    double *yv = read_all(y);
    expect_close(weft_to_device(py, WEFT_CPU), yv, 1e-12, "composite y");
    cr_assert_eq(weft_backward(y, g, false), 0, "%s", weft_error_message());
    cr_assert_eq(weft_backward(py, weft_to_device(g, plain_device()), false), 0, "%s",
                 weft_error_message());
    weft_tensor *pairs[3][2] = {{x, px}, {w, pw}, {b, pb}};
    for (int i = 0; i < 3; i++) {
        double *e = read_all(weft_grad(pairs[i][0]));
        expect_close(grad_on_cpu(pairs[i][1]), e, 1e-12, "composite gradient");
        free(e);
    }
    free(yv);
}

/* The kernel itself: stats [2, R] hold the mean and rstd PyTorch's native_layer_norm
 * returns (float32 for 16-bit inputs). */
Test(nn_fused, native_layer_norm_writes_mean_and_rstd)
{
    int op = weft_op_lookup(WEFT_OP_NATIVE_LAYER_NORM_NAME);
    cr_assert_geq(op, 0, "the cpu backend registers native_layer_norm");
    const int64_t xs[2] = {2, 4};
    const double xv[8] = {1, 2, 3, 4, 100, 100, 100, 100.5};
    const enum weft_dtype dts[2] = {WEFT_BF16, WEFT_F64};
    for (int k = 0; k < 2; k++) {
        weft_tensor *x = tu_tensor(2, xs, xv, dts[k]);
        weft_tensor *y = weft_empty(2, xs, dts[k], WEFT_CPU);
        enum weft_dtype sdt = dts[k] == WEFT_F64 ? WEFT_F64 : WEFT_F32;
        weft_tensor *stats = weft_empty(2, (const int64_t[]){2, 2}, sdt, WEFT_CPU);
        struct weft_op_call c = {.op = op, .nin = 3, .nout = 2, .in = {x, NULL, NULL},
                                 .out = {y, stats}, .scalar = {0.5}};
        cr_assert_eq(weft_dispatch(&c), 0, "%s", weft_error_message());
        /* var 1.25 and 0.046875; rstd = 1 / sqrt(var + 0.5) */
        const double want[4] = {2.5, 100.125, 1 / sqrt(1.75), 1 / sqrt(0.546875)};
        expect_close(stats, want, 1e-6, "stats");
        /* a wrong stats dtype is refused */
        weft_tensor *bad = weft_empty(2, (const int64_t[]){2, 2}, WEFT_F16, WEFT_CPU);
        c.out[1] = bad;
        cr_expect_neq(weft_dispatch(&c), 0);
        tu_assert_error(WEFT_ERR_RUNTIME, "native_layer_norm");
    }
}

/* The errors of the composite are kept: a shape that does not end in normalized_shape. */
Test(nn_fused, layer_norm_still_checks_shapes)
{
    weft_tensor *x = weft_zeros(2, (const int64_t[]){3, 4}, WEFT_F32, WEFT_CPU);
    cr_expect_null(weft_layer_norm(x, 1, (const int64_t[]){5}, NULL, NULL, 1e-5));
    tu_assert_error(WEFT_ERR_RUNTIME, "Given normalized_shape=[5], expected input with shape [*, 5]");
    weft_tensor *w = weft_zeros(1, (const int64_t[]){3}, WEFT_F32, WEFT_CPU);
    cr_expect_null(weft_layer_norm(x, 1, (const int64_t[]){4}, w, NULL, 1e-5));
    tu_assert_error(WEFT_ERR_RUNTIME, "Expected weight to be of same shape as normalized_shape");
}

/* ---- gelu ------------------------------------------------------------------------------------ */

static double gelu_ref(double x, bool tanh_form)
{
    if (!tanh_form)
        return 0.5 * x * (1 + erf(x * M_SQRT1_2));
    return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

/* d gelu / dx by the formula PyTorch's gelu_backward uses */
static double gelu_grad_ref(double x, bool tanh_form)
{
    if (!tanh_form)
        return 0.5 * (1 + erf(x * M_SQRT1_2)) + x * exp(-0.5 * x * x) / sqrt(2 * M_PI);
    double k = sqrt(2 / M_PI), t = tanh(k * (x + 0.044715 * x * x * x));
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x);
}

/* /usr/bin/python3 -c "import torch, torch.nn.functional as F; x = torch.tensor([-3.0,
 *   -1.0, -0.5, 0.0, 0.5, 1.0, 3.0], dtype=torch.float64, requires_grad=True);
 *   y = F.gelu(x, approximate=A); y.backward(torch.ones_like(y)); print(y, x.grad,
 *   y.grad_fn.name())" for A = 'none' and 'tanh' */
Test(nn_fused, gelu_gives_pytorchs_values_and_gradients_in_both_forms)
{
    const int64_t s[1] = {7};
    const double xv[7] = {-3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 3.0};
    const double y[2][7] = {
        {-0.00404969409489, -0.158655253931457, -0.154268769362993, 0.0, 0.345731230637007,
         0.841344746068543, 2.99595030590511},
        {-0.003637392081773, -0.158808009391723, -0.154285990174856, 0.0, 0.345714009825144,
         0.841191990608277, 2.996362607918227}};
    const double dx[2][7] = {
        {-0.011945647204184, -0.083315470587686, 0.132504875343837, 0.5, 0.867495124656163,
         1.083315470587686, 1.011945647204184},
        {-0.01158416663097, -0.082964083845783, 0.132630096465358, 0.5, 0.867369903534642,
         1.082964083845783, 1.01158416663097}};
    for (int form = 0; form < 2; form++)
        for (int f32 = 0; f32 < 2; f32++) {
            enum weft_dtype dt = f32 ? WEFT_F32 : WEFT_F64;
            double tol = f32 ? 1e-6 : 1e-13;
            weft_tensor *x = leaf(tu_tensor(1, s, xv, dt));
            weft_tensor *out = weft_gelu_approximate(x, form ? WEFT_GELU_TANH : WEFT_GELU_NONE);
            expect_close(out, y[form], tol, "gelu");
            cr_expect_str_eq(weft_grad_fn_name(out), "GeluBackward0");
            cr_assert_eq(weft_backward(out, weft_ones_like(out), false), 0, "%s",
                         weft_error_message());
            expect_close(weft_grad(x), dx[form], tol, "gelu grad");
        }
}

/* gelu_tanh and gelu_backward against the formulas in double: every floating dtype,
 * lengths around the vector widths and past the parallel grain, strided inputs. */
Test(nn_fused, gelu_kernels_match_the_plain_formulas)
{
    const enum weft_dtype dts[] = {WEFT_F64, WEFT_F32, WEFT_BF16, WEFT_F16};
    const int64_t lens[] = {1, 7, 17, 33, 100000};
    for (size_t d = 0; d < 4; d++)
        for (size_t l = 0; l < 5; l++)
            for (int strided = 0; strided < 2; strided++)
                for (int form = 0; form < 2; form++) {
                    weft_scope_push();
                    uint64_t seed = 17 + l;
                    int64_t n = lens[l];
                    weft_tensor *x, *g;
                    if (strided) { /* every other element of [2n] */
                        x = weft_as_strided(tu_random_tensor(1, (const int64_t[]){2 * n}, dts[d], -6, 6, &seed, NULL),
                                            1, &n, (const int64_t[]){2}, 1);
                        g = weft_as_strided(tu_random_tensor(1, (const int64_t[]){2 * n}, dts[d], -2, 2, &seed, NULL),
                                            1, &n, (const int64_t[]){2}, 0);
                    } else {
                        x = tu_random_tensor(1, &n, dts[d], -6, 6, &seed, NULL);
                        g = tu_random_tensor(1, &n, dts[d], -2, 2, &seed, NULL);
                    }
                    cr_assert(x && g, "%s", weft_error_message());
                    double *xv = read_all(x), *gv = read_all(g), *y = alloc_doubles(n);
                    double *dx = alloc_doubles(n);
                    for (int64_t i = 0; i < n; i++) {
                        y[i] = gelu_ref(xv[i], form);
                        dx[i] = gv[i] * gelu_grad_ref(xv[i], form);
                    }
                    double tol = dtype_tol(dts[d]) * (dts[d] == WEFT_F64 ? 100 : 1);
                    weft_tensor *out = form ? weft_gelu_approximate(x, WEFT_GELU_TANH) : weft_gelu(x);
                    expect_close(out, y, tol, "gelu forward");
                    expect_close(weft_gelu_backward(g, x, form), dx, tol * 2, "gelu_backward");
                    free(xv), free(gv), free(y), free(dx);
                    weft_scope_pop();
                }
}

static weft_tensor *apply_gelu(void *ctx, weft_tensor *const *in)
{
    return weft_gelu_approximate(in[0], *(const enum weft_gelu_approximate *)ctx);
}

static weft_tensor *apply_gelu_twice(void *ctx, weft_tensor *const *in)
{
    return apply_gelu(ctx, (weft_tensor *const[]){apply_gelu(ctx, in)});
}

Test(nn_fused, gelu_passes_gradcheck_in_both_forms)
{
    uint64_t seed = 23;
    for (int form = 0; form < 2; form++) {
        enum weft_gelu_approximate a = form ? WEFT_GELU_TANH : WEFT_GELU_NONE;
        weft_tensor *in[1] = {leaf64(2, (const int64_t[]){4, 9}, -4, 4, &seed)};
        expect_gradcheck(apply_gelu, &a, 1, in, "gelu");
        expect_gradcheck(apply_gelu_twice, &a, 1, in, "gelu of gelu");
    }
}

/* Where the backend lacks gelu_tanh and gelu_backward: the same values, still one node. */
Test(nn_fused, gelu_falls_back_to_the_composite_without_the_kernels)
{
    uint64_t seed = 29;
    for (int form = 0; form < 2; form++) {
        weft_scope_push();
        enum weft_gelu_approximate a = form ? WEFT_GELU_TANH : WEFT_GELU_NONE;
        weft_tensor *x = leaf64(2, (const int64_t[]){5, 11}, -4, 4, &seed);
        weft_tensor *g = tu_random_tensor(2, (const int64_t[]){5, 11}, WEFT_F64, -1, 1, &seed, NULL);
        weft_tensor *px = on_plain(x);
        weft_tensor *y = weft_gelu_approximate(x, a), *py = weft_gelu_approximate(px, a);
        cr_assert_not_null(py, "%s", weft_error_message());
        cr_expect_str_eq(weft_grad_fn_name(py), "GeluBackward0");
        double *yv = read_all(y);
        expect_close(weft_to_device(py, WEFT_CPU), yv, 1e-14, "composite gelu");
        cr_assert_eq(weft_backward(y, g, false), 0, "%s", weft_error_message());
        cr_assert_eq(weft_backward(py, weft_to_device(g, plain_device()), false), 0, "%s",
                     weft_error_message());
        double *e = read_all(weft_grad(x));
        expect_close(grad_on_cpu(px), e, 1e-14, "composite gelu gradient");
        free(yv), free(e);
        weft_scope_pop();
    }
}

/* ---- tanh_backward, sigmoid_backward ----------------------------------------------------- */

typedef weft_tensor *(*unary_fn)(weft_tensor *);

/* x's gradient through fn (tanh or sigmoid) for upstream g against g f'(y), f' from y's
 * own values in double; g strided (every other element) when asked. */
static void check_result_backward(unary_fn fn, bool is_tanh, enum weft_dtype dt, int64_t n,
                                  bool strided, uint64_t *seed)
{
    weft_tensor *x = leaf(tu_random_tensor(1, &n, dt, -3, 3, seed, NULL));
    weft_tensor *g = strided
                         ? weft_as_strided(tu_random_tensor(1, (const int64_t[]){2 * n}, dt, -2, 2, seed, NULL),
                                           1, &n, (const int64_t[]){2}, 1)
                         : tu_random_tensor(1, &n, dt, -2, 2, seed, NULL);
    weft_tensor *y = fn(x);
    cr_assert(y && g, "%s", weft_error_message());
    double *yv = read_all(y), *gv = read_all(g), *want = alloc_doubles(n);
    for (int64_t i = 0; i < n; i++)
        want[i] = is_tanh ? gv[i] * (1 - yv[i] * yv[i]) : gv[i] * (1 - yv[i]) * yv[i];
    cr_assert_eq(weft_backward(y, g, false), 0, "%s", weft_error_message());
    expect_close(weft_grad(x), want, dtype_tol(dt) * 4, is_tanh ? "tanh_backward" : "sigmoid_backward");
    free(yv), free(gv), free(want);
}

/* Every floating dtype, lengths around the vector widths and past the parallel grain. */
Test(nn_fused, tanh_and_sigmoid_backward_match_the_plain_formulas)
{
    for (int op = 0; op < 2; op++) {
        const char *name = op == 0 ? WEFT_OP_TANH_BACKWARD_NAME : WEFT_OP_SIGMOID_BACKWARD_NAME;
        int id = weft_op_lookup(name);
        cr_assert_geq(id, 0, "%s is registered", name);
        cr_expect_not_null(weft_kernel_lookup(id, WEFT_DEVICE_CPU, WEFT_LAYOUT_STRIDED, WEFT_F32),
                           "the cpu has %s", name);
    }
    const enum weft_dtype dts[] = {WEFT_F64, WEFT_F32, WEFT_BF16, WEFT_F16};
    const int64_t lens[] = {1, 7, 17, 33, 100000};
    uint64_t seed = 31;
    for (size_t d = 0; d < 4; d++)
        for (size_t l = 0; l < 5; l++)
            for (int strided = 0; strided < 2; strided++) {
                weft_scope_push();
                check_result_backward(weft_tanh, true, dts[d], lens[l], strided, &seed);
                check_result_backward(weft_sigmoid, false, dts[d], lens[l], strided, &seed);
                weft_scope_pop();
            }
}

Test(nn_fused, tanh_and_sigmoid_pass_gradcheck)
{
    uint64_t seed = 37;
    weft_tensor *in[1] = {leaf64(2, (const int64_t[]){4, 9}, -3, 3, &seed)};
    expect_gradcheck(apply_unary_fn, (void *)weft_tanh, 1, in, "tanh");
    expect_gradcheck(apply_unary_fn, (void *)weft_sigmoid, 1, in, "sigmoid");
}

/* The one-pass kernels really run: tanh's and sigmoid's backward allocate one tensor
 * (its result, which becomes x.grad), where the composite allocates three or more. */
Test(nn_fused, tanh_and_sigmoid_backward_allocate_only_their_result)
{
    const unary_fn fns[2] = {weft_tanh, weft_sigmoid};
    uint64_t seed = 43;
    for (int k = 0; k < 2; k++) {
        weft_scope_push();
        weft_tensor *x = leaf(tu_random_tensor(1, (const int64_t[]){1000}, WEFT_F32, -2, 2, &seed, NULL));
        weft_tensor *g = tu_random_tensor(1, (const int64_t[]){1000}, WEFT_F32, -1, 1, &seed, NULL);
        weft_tensor *y = fns[k](x);
        cr_assert_not_null(y, "%s", weft_error_message());
        struct weft_memory_stats before = {.struct_size = sizeof before}, after = before;
        cr_assert_eq(weft_memory_stats(WEFT_CPU, &before), 0);
        cr_assert_eq(weft_backward(y, g, false), 0, "%s", weft_error_message());
        cr_assert_eq(weft_memory_stats(WEFT_CPU, &after), 0);
        cr_expect_eq(after.num_allocs - before.num_allocs, 1, "%s backward made %llu allocations",
                     k ? "sigmoid" : "tanh",
                     (unsigned long long)(after.num_allocs - before.num_allocs));
        weft_scope_pop();
    }
}

/* Where the backend lacks tanh_backward and sigmoid_backward: the same gradients. */
Test(nn_fused, tanh_and_sigmoid_backward_fall_back_to_the_composite)
{
    uint64_t seed = 41;
    const unary_fn fns[2] = {weft_tanh, weft_sigmoid};
    const char *names[2] = {"TanhBackward0", "SigmoidBackward0"};
    for (int k = 0; k < 2; k++) {
        weft_scope_push();
        weft_tensor *x = leaf64(2, (const int64_t[]){5, 11}, -3, 3, &seed);
        weft_tensor *g = tu_random_tensor(2, (const int64_t[]){5, 11}, WEFT_F64, -1, 1, &seed, NULL);
        weft_tensor *px = on_plain(x);
        weft_tensor *y = fns[k](x), *py = fns[k](px);
        cr_assert_not_null(py, "%s", weft_error_message());
        cr_expect_str_eq(weft_grad_fn_name(py), names[k]);
        cr_assert_eq(weft_backward(y, g, false), 0, "%s", weft_error_message());
        cr_assert_eq(weft_backward(py, weft_to_device(g, plain_device()), false), 0, "%s",
                     weft_error_message());
        double *e = read_all(weft_grad(x));
        expect_close(grad_on_cpu(px), e, 1e-15, names[k]);
        free(e);
        weft_scope_pop();
    }
}

Test(nn_fused, gelu_module_takes_approximate_and_prints_as_pytorch)
{
    weft_module *m = weft_nn_gelu_approximate(WEFT_GELU_TANH);
    cr_assert_not_null(m, "%s", weft_error_message());
    char *text = weft_module_repr(m);
    cr_expect_str_eq(text, "GELU(approximate='tanh')");
    free(text);
    weft_tensor *x = tu_tensor(1, (const int64_t[]){1}, (const double[]){1.0}, WEFT_F64);
    const double want = 0.841191990608277;
    expect_close(weft_module_forward(m, x), &want, 1e-13, "GELU(tanh) forward");
    weft_module_free(m);

    weft_options *o = weft_options_new("layer.act", "gpt.ini");
    cr_assert_eq(weft_options_set(o, "approximate", "tanh"), 0);
    m = weft_module_create("gelu", o);
    cr_assert_not_null(m, "%s", weft_error_message());
    text = weft_module_repr(m);
    cr_expect_str_eq(text, "GELU(approximate='tanh')");
    free(text);
    weft_module_free(m);
    m = weft_nn_gelu();
    text = weft_module_repr(m);
    cr_expect_str_eq(text, "GELU(approximate='none')");
    free(text);
    weft_module_free(m);

    cr_assert_eq(weft_options_set(o, "approximate", "tan"), 0);
    cr_expect_null(weft_module_create("gelu", o));
    tu_assert_error(WEFT_ERR_CONFIG, "approximate");
    weft_options_free(o);
    cr_expect_null(weft_nn_gelu_approximate((enum weft_gelu_approximate)2));
    tu_assert_error(WEFT_ERR_VALUE, "approximate argument must be either none or tanh");
}

/* ---- embedding ------------------------------------------------------------------------------- */

/* /usr/bin/python3 -c "import torch, torch.nn.functional as F; W = torch.tensor([[1.,2,3],
 *   [4,5,6],[7,8,9],[10,11,12]], dtype=torch.float64, requires_grad=True);
 *   e = F.embedding(torch.tensor([2,0,2,3,2]), W);
 *   e.backward(torch.arange(15, dtype=torch.float64).reshape(5,3) * 0.5 - 2);
 *   print(W.grad, e.grad_fn.name())" */
Test(nn_fused, embedding_backward_adds_repeated_rows_as_pytorch)
{
    const double wv[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    const int64_t iv[5] = {2, 0, 2, 3, 2};
    const double want[12] = {-0.5, 0.0, 0.5, 0.0, 0.0, 0.0, 3.0, 4.5, 6.0, 2.5, 3.0, 3.5};
    double gv[15];
    for (int i = 0; i < 15; i++)
        gv[i] = i * 0.5 - 2;
    const enum weft_dtype dts[3] = {WEFT_F64, WEFT_F32, WEFT_BF16};
    for (int k = 0; k < 3; k++) {
        weft_tensor *w = leaf(tu_tensor(2, (const int64_t[]){4, 3}, wv, dts[k]));
        weft_tensor *idx = weft_from_host(iv, 1, (const int64_t[]){5}, WEFT_I64, WEFT_CPU);
        weft_tensor *e = weft_embedding(idx, w);
        cr_assert_not_null(e, "%s", weft_error_message());
        cr_expect_str_eq(weft_grad_fn_name(e), "EmbeddingBackward0");
        cr_assert_eq(weft_backward(e, tu_tensor(2, (const int64_t[]){5, 3}, gv, dts[k]), false), 0,
                     "%s", weft_error_message());
        expect_close(weft_grad(w), want, 0, "embedding gradient");
    }
}

/* Large enough to split columns across threads; int32 indices of a 2-d shape, many
 * repeats; against the sum in double. */
Test(nn_fused, embedding_backward_matches_the_plain_index_add)
{
    const int64_t num = 50, D = 130, B = 8, T = 75, N = B * T;
    uint64_t seed = 31;
    int32_t *iv = malloc((size_t)N * sizeof *iv);
    cr_assert_not_null(iv);
    for (int64_t i = 0; i < N; i++)
        iv[i] = (int32_t)((i * 7919 + (i % 3) * 13) % num);
    for (int f32 = 0; f32 < 2; f32++) {
        enum weft_dtype dt = f32 ? WEFT_F32 : WEFT_F64;
        weft_tensor *w = leaf(tu_random_tensor(2, (const int64_t[]){num, D}, dt, -1, 1, &seed, NULL));
        weft_tensor *idx = weft_from_host(iv, 2, (const int64_t[]){B, T}, WEFT_I32, WEFT_CPU);
        double *gv = alloc_doubles(N * D), *want = alloc_doubles(num * D);
        weft_tensor *g = tu_random_tensor(3, (const int64_t[]){B, T, D}, dt, -1, 1, &seed, gv);
        tu_read(g, gv);
        for (int64_t i = 0; i < N; i++)
            for (int64_t j = 0; j < D; j++)
                want[iv[i] * D + j] += gv[i * D + j];
        weft_tensor *e = weft_embedding(idx, w);
        cr_assert_not_null(e, "%s", weft_error_message());
        tu_assert_shape(e, 3, (const int64_t[]){B, T, D});
        cr_assert_eq(weft_backward(e, g, false), 0, "%s", weft_error_message());
        expect_close(weft_grad(w), want, f32 ? 1e-5 : 1e-12, "index-add");
        free(gv), free(want);
    }
    free(iv);
}

static weft_tensor *apply_embedding(void *ctx, weft_tensor *const *in)
{
    return weft_embedding((weft_tensor *)ctx, in[0]);
}

Test(nn_fused, embedding_passes_gradcheck_with_repeated_indices)
{
    uint64_t seed = 37;
    const int64_t iv[6] = {1, 3, 1, 1, 0, 3};
    weft_tensor *idx = weft_from_host(iv, 2, (const int64_t[]){2, 3}, WEFT_I64, WEFT_CPU);
    weft_tensor *in[1] = {leaf64(2, (const int64_t[]){5, 4}, -1, 1, &seed)};
    expect_gradcheck(apply_embedding, idx, 1, in, "embedding");
}

Test(nn_fused, embedding_falls_back_to_scatter_add_without_the_kernel)
{
    uint64_t seed = 41;
    const int64_t iv[7] = {0, 2, 2, 5, 2, 0, 1};
    weft_tensor *w = leaf64(2, (const int64_t[]){6, 5}, -1, 1, &seed);
    weft_tensor *g = tu_random_tensor(2, (const int64_t[]){7, 5}, WEFT_F64, -1, 1, &seed, NULL);
    weft_tensor *idx = weft_from_host(iv, 1, (const int64_t[]){7}, WEFT_I64, WEFT_CPU);
    weft_tensor *pw = on_plain(w);
    weft_tensor *e = weft_embedding(idx, w);
    weft_tensor *pe = weft_embedding(weft_to_device(idx, plain_device()), pw);
    cr_assert_not_null(pe, "%s", weft_error_message());
    cr_expect_str_eq(weft_grad_fn_name(pe), "EmbeddingBackward0");
    cr_assert_eq(weft_backward(e, g, false), 0, "%s", weft_error_message());
    cr_assert_eq(weft_backward(pe, weft_to_device(g, plain_device()), false), 0, "%s",
                 weft_error_message());
    double *want = read_all(weft_grad(w));
    expect_close(grad_on_cpu(pw), want, 0, "scatter_add gradient");
    free(want);
}

Test(nn_fused, embedding_refuses_indices_out_of_range)
{
    weft_tensor *w = leaf(weft_zeros(2, (const int64_t[]){4, 3}, WEFT_F32, WEFT_CPU));
    const int64_t bad[2] = {1, 4};
    weft_tensor *idx = weft_from_host(bad, 1, (const int64_t[]){2}, WEFT_I64, WEFT_CPU);
    cr_expect_null(weft_embedding(idx, w));
    tu_assert_error(WEFT_ERR_INDEX, "index out of range in self");
    /* the kernel checks too, before it writes */
    int op = weft_op_lookup(WEFT_OP_EMBEDDING_DENSE_BACKWARD_NAME);
    cr_assert_geq(op, 0);
    weft_tensor *g = weft_ones(2, (const int64_t[]){2, 3}, WEFT_F32, WEFT_CPU);
    weft_tensor *out = weft_full(2, (const int64_t[]){4, 3}, 7.0, WEFT_F32, WEFT_CPU);
    struct weft_op_call c = {.op = op, .nin = 2, .nout = 1, .in = {g, idx}, .out = {out}};
    cr_expect_eq(weft_dispatch(&c), WEFT_ERR_INDEX);
    tu_assert_error(WEFT_ERR_INDEX, "index out of range in self");
    double v[12];
    tu_read(out, v);
    cr_expect_eq(v[0], 7.0, "nothing written");
    const int64_t neg[2] = {-1, 0};
    c.in[1] = weft_from_host(neg, 1, (const int64_t[]){2}, WEFT_I64, WEFT_CPU);
    cr_expect_eq(weft_dispatch(&c), WEFT_ERR_INDEX);
    tu_assert_error(WEFT_ERR_INDEX, "index out of range in self");
}

/* ---- linear + gelu --------------------------------------------------------------------------- */

struct linear_gelu_ctx {
    enum weft_gelu_approximate approximate;
};

static weft_tensor *apply_linear_gelu(void *vctx, weft_tensor *const *in)
{
    const struct linear_gelu_ctx *c = vctx;
    return weft_linear_gelu(in[0], in[1], in[2], c->approximate);
}

Test(nn_fused, linear_gelu_passes_gradcheck_in_both_forms)
{
    uint64_t seed = 43;
    for (int form = 0; form < 2; form++) {
        struct linear_gelu_ctx c = {form ? WEFT_GELU_TANH : WEFT_GELU_NONE};
        weft_tensor *in[3] = {leaf64(3, (const int64_t[]){2, 3, 7}, -2, 2, &seed),
                              leaf64(2, (const int64_t[]){5, 7}, -1, 1, &seed),
                              leaf64(1, (const int64_t[]){5}, -1, 1, &seed)};
        expect_gradcheck(apply_linear_gelu, &c, 3, in, "linear_gelu");
        weft_tensor *y = weft_linear_gelu(in[0], in[1], in[2], c.approximate);
        cr_assert_not_null(y, "%s", weft_error_message());
        cr_expect_str_eq(weft_grad_fn_name(y), "ReshapeAliasBackward0"); /* 3-d: the node, then a view */
        y = weft_linear_gelu(weft_reshape(in[0], 2, (const int64_t[]){6, 7}), in[1], in[2],
                             c.approximate);
        cr_expect_str_eq(weft_grad_fn_name(y), "GeluBackward0");
        cr_expect_eq(weft_grad_fn_next_functions(y, 0, NULL), 3, "one fused node over x, w, b");
    }
}

/* The fused layer against gelu(linear(...)) on every floating dtype, and on a backend
 * without add_bias_gelu (the composite path inside it). */
Test(nn_fused, linear_gelu_matches_gelu_of_linear)
{
    const enum weft_dtype dts[] = {WEFT_F32, WEFT_F64, WEFT_BF16, WEFT_F16};
    for (size_t k = 0; k < 5; k++)
        for (int form = 0; form < 2; form++) {
            weft_scope_push();
            bool plain = k == 4; /* float64 on plainhost */
            enum weft_dtype dt = plain ? WEFT_F64 : dts[k];
            enum weft_gelu_approximate a = form ? WEFT_GELU_TANH : WEFT_GELU_NONE;
            uint64_t seed = 47;
            weft_tensor *x = tu_random_tensor(2, (const int64_t[]){9, 13}, dt, -2, 2, &seed, NULL);
            weft_tensor *w = tu_random_tensor(2, (const int64_t[]){11, 13}, dt, -1, 1, &seed, NULL);
            weft_tensor *b = tu_random_tensor(1, (const int64_t[]){11}, dt, -1, 1, &seed, NULL);
            weft_tensor *g = tu_random_tensor(2, (const int64_t[]){9, 11}, dt, -1, 1, &seed, NULL);
            weft_tensor *grads[2][3];
            double yv[2][99];
            for (int fused = 0; fused < 2; fused++) {
                weft_tensor *leaves[3] = {leaf(x), leaf(w), leaf(b)};
                weft_tensor *gg = g;
                if (plain && fused) {
                    for (int i = 0; i < 3; i++)
                        leaves[i] = on_plain(leaves[i]);
                    gg = weft_to_device(g, plain_device());
                }
                weft_tensor *y = fused ? weft_linear_gelu(leaves[0], leaves[1], leaves[2], a)
                                       : weft_gelu_approximate(weft_linear(leaves[0], leaves[1], leaves[2]), a);
                cr_assert_not_null(y, "%s", weft_error_message());
                if (fused) {
                    cr_expect_str_eq(weft_grad_fn_name(y), "GeluBackward0");
                    cr_expect_eq(weft_grad_fn_next_functions(y, 0, NULL), 3, "fused");
                }
                tu_read(y, yv[fused]);
                cr_assert_eq(weft_backward(y, gg, false), 0, "%s", weft_error_message());
                for (int i = 0; i < 3; i++)
                    grads[fused][i] = grad_on_cpu(leaves[i]);
            }
            double tol = dtype_tol(dt) * 5;
            expect_close(tu_tensor(2, (const int64_t[]){9, 11}, yv[1], WEFT_F64), yv[0], tol, "y");
            for (int i = 0; i < 3; i++) {
                double *e = read_all(grads[0][i]);
                expect_close(grads[1][i], e, tol * 4, "linear_gelu gradient");
                free(e);
            }
            weft_scope_pop();
        }
}

/* Sequential runs a Linear (with a bias) and a GELU as one fused layer, with the values of
 * the two run apart. */
Test(nn_fused, sequential_fuses_linear_and_gelu)
{
    weft_module *parts[2] = {weft_nn_linear(6, 4, true), weft_nn_gelu_approximate(WEFT_GELU_TANH)};
    cr_assert(parts[0] && parts[1], "%s", weft_error_message());
    weft_module *seq = weft_nn_sequential(2, parts);
    cr_assert_not_null(seq, "%s", weft_error_message());
    uint64_t seed = 53;
    weft_tensor *x = leaf(tu_random_tensor(2, (const int64_t[]){3, 6}, WEFT_F32, -2, 2, &seed, NULL));
    weft_tensor *y = weft_module_forward(seq, x);
    cr_assert_not_null(y, "%s", weft_error_message());
    /* one node, named as PyTorch's gelu(linear(x)) output is, over x, w and b */
    cr_expect_str_eq(weft_grad_fn_name(y), "GeluBackward0");
    cr_expect_eq(weft_grad_fn_next_functions(y, 0, NULL), 3);
    weft_tensor *apart = weft_module_forward(parts[1], weft_module_forward(parts[0], x));
    cr_expect_str_eq(weft_grad_fn_name(apart), "GeluBackward0");
    cr_expect_eq(weft_grad_fn_next_functions(apart, 0, NULL), 1);
    double *e = read_all(apart);
    expect_close(y, e, 1e-6, "sequential");
    free(e);
    weft_module_free(seq);
}

/* ---- the contracts every backend shares (weft/kernel_checks.h) -------------------------- */

/* A call built by hand with the wrong operands is refused with the contract's message,
 * by the helper itself and by the cpu kernel that calls it. */
Test(nn_fused, the_shared_kernel_checks_refuse_a_bad_call)
{
    weft_tensor *g = weft_zeros(2, (const int64_t[]){2, 3}, WEFT_F32, WEFT_CPU);
    weft_tensor *x = weft_zeros(2, (const int64_t[]){2, 3}, WEFT_F32, WEFT_CPU);
    weft_tensor *out = weft_empty(2, (const int64_t[]){2, 3}, WEFT_F32, WEFT_CPU);
    struct weft_op_call gelu = {.op = weft_op_lookup(WEFT_OP_GELU_BACKWARD_NAME), .nin = 2,
                                .nout = 1, .in = {g, x}, .out = {out}, .ints = {2}};
    cr_expect_eq(weft_check_gelu_backward(&gelu), WEFT_ERR_VALUE);
    tu_assert_error(WEFT_ERR_VALUE, "gelu_backward: approximate must be 0 (none) or 1 (tanh), got 2");
    cr_expect_neq(weft_dispatch(&gelu), 0);
    tu_assert_error(WEFT_ERR_VALUE, "approximate must be 0 (none) or 1 (tanh), got 2");
    gelu.ints[0] = 1;
    cr_expect_eq(weft_dispatch(&gelu), 0, "%s", weft_error_message());

    weft_tensor *x1 = weft_zeros(3, (const int64_t[]){1, 2, 4}, WEFT_F32, WEFT_CPU);
    weft_tensor *x2 = weft_zeros(3, (const int64_t[]){1, 3, 5}, WEFT_F32, WEFT_CPU);
    weft_tensor *dist = weft_empty(3, (const int64_t[]){1, 2, 3}, WEFT_F32, WEFT_CPU);
    struct weft_op_call cdist = {.op = weft_op_lookup(WEFT_OP_CDIST_NAME), .nin = 2, .nout = 1,
                                 .in = {x1, x2}, .out = {dist}, .scalar = {2}};
    cr_expect_neq(weft_dispatch(&cdist), 0, "x2's M (5) is not x1's (4)");
    tu_assert_error(WEFT_ERR_RUNTIME, "cdist: expected x1 [B, P, M], x2 [B, R, M] of one dtype");
    cdist.in[1] = weft_zeros(3, (const int64_t[]){1, 3, 4}, WEFT_F32, WEFT_CPU);
    cr_expect_eq(weft_check_cdist(&cdist), 0, "%s", weft_error_message());
    cr_expect_eq(weft_dispatch(&cdist), 0, "%s", weft_error_message());

    weft_tensor *h = weft_zeros(2, (const int64_t[]){2, 3}, WEFT_F32, WEFT_CPU);
    weft_tensor *bias = weft_zeros(1, (const int64_t[]){4}, WEFT_F32, WEFT_CPU);
    struct weft_op_call abg = {.op = weft_op_lookup(WEFT_OP_ADD_BIAS_GELU_NAME), .nin = 1,
                               .nout = 2, .in = {bias}, .out = {h, out}};
    cr_expect_neq(weft_dispatch(&abg), 0, "a bias of 4 for 3 columns");
    tu_assert_error(WEFT_ERR_RUNTIME, "add_bias_gelu: expected contiguous [M, N]");
}
