/* tests/test_interpolate.c: weft_interpolate (F.interpolate) and weft_cdist (torch.cdist).
 *
 * Values, gradients, grad_fn names and error texts are PyTorch 1.13's, written by
 * tests/interp/gen.py into tests/interp/fixtures/ and replayed here without PyTorch (the
 * format is described in gen.py): every mode and align_corners, sizes and scale factors
 * (recomputed or not), up and down, odd sizes, non-contiguous inputs, every p of cdist
 * and both of its p = 2 formulas. Gradients are also checked against central differences
 * (weft_gradcheck, float64) for every mode / align_corners / p; backward passes give the
 * same bits on 1 and 2 threads; where a CUDA device runs, its kernels are compared with
 * the cpu's (the test skips elsewhere). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

TestSuite(interpolate, .init = tu_setup, .fini = tu_teardown);

/* ---- fixture reading ------------------------------------------------------------------ */

/* gen.py's value(): quarters, exact in every floating dtype. */
static double value(int64_t seed, int64_t i, int64_t levels)
{
    uint64_t k = ((uint64_t)(seed * 1000003 + i * 7919 + 12345) * 2654435761u) & 0xFFFFFFFFu;
    k >>= 7;
    return (double)(k % (uint64_t)levels) / 4.0 - (double)levels / 8.0;
}

static enum weft_dtype dtype_of(const char *name)
{
    if (strcmp(name, "float32") == 0)
        return WEFT_F32;
    if (strcmp(name, "float64") == 0)
        return WEFT_F64;
    if (strcmp(name, "bfloat16") == 0)
        return WEFT_BF16;
    cr_assert_str_eq(name, "int64", "unknown dtype %s", name);
    return WEFT_I64;
}

/* A tensor of shape (layout "c") or the transpose(-1, -2) of the shape with its last two
 * dims swapped ("t"), holding value(seed, i, levels) in the buffer's row-major order. */
static weft_tensor *make(int ndim, const int64_t *shape, const char *layout, int64_t seed,
                         int64_t levels, enum weft_dtype dt)
{
    int64_t base[WEFT_MAX_DIMS], n = 1;
    memcpy(base, shape, (size_t)ndim * sizeof *shape);
    bool t = strcmp(layout, "t") == 0 && ndim >= 2;
    if (t) {
        base[ndim - 1] = shape[ndim - 2];
        base[ndim - 2] = shape[ndim - 1];
    }
    for (int d = 0; d < ndim; d++)
        n *= base[d];
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    cr_assert_not_null(v);
    for (int64_t i = 0; i < n; i++)
        v[i] = value(seed, i, levels);
    weft_tensor *x = tu_tensor(ndim, base, v, dt);
    free(v);
    return t ? weft_transpose(x, -1, -2) : x;
}

/* A whitespace tokenizer over one line; rest() returns what is left (an error message). */
struct line {
    char *p;
    int lineno;
};

static const char *next(struct line *l)
{
    while (*l->p == ' ')
        l->p++;
    cr_assert(*l->p, "line %d: unexpected end", l->lineno);
    char *start = l->p;
    while (*l->p && *l->p != ' ')
        l->p++;
    if (*l->p)
        *l->p++ = '\0';
    return start;
}

static int64_t next_int(struct line *l)
{
    return strtoll(next(l), NULL, 10);
}

static double next_double(struct line *l)
{
    return strtod(next(l), NULL);
}

static void expect(struct line *l, const char *tok)
{
    const char *t = next(l);
    cr_assert_str_eq(t, tok, "line %d: expected %s", l->lineno, tok);
}

static int error_code_of(const char *type)
{
    if (strcmp(type, "ValueError") == 0)
        return WEFT_ERR_VALUE;
    if (strcmp(type, "NotImplementedError") == 0)
        return WEFT_ERR_NOT_IMPLEMENTED;
    return WEFT_ERR_RUNTIME;
}

/* PyTorch failed: weft must fail with the same kind and text. */
static void check_error(struct line *l, const weft_tensor *y, const char *name)
{
    const char *type = next(l);
    char *msg = l->p;
    while (*msg == ' ')
        msg++;
    cr_assert_null(y, "%s (line %d): PyTorch fails with %s: %s", name, l->lineno, type, msg);
    /* PyTorch's dtype dispatch failures are RuntimeErrors; weft's own convention gives
     * "... not implemented for 'Long'" the code of a missing kernel */
    int want = strstr(msg, "\" not implemented for '") ? WEFT_ERR_NOT_IMPLEMENTED : error_code_of(type);
    cr_assert_eq(weft_error_code(), want, "%s: code %d (%s), PyTorch %s: %s", name,
                 weft_error_code(), weft_error_message(), type, msg);
    cr_assert(strstr(weft_error_message(), msg), "%s:\n  weft:    %s\n  PyTorch: %s", name,
              weft_error_message(), msg);
    weft_error_clear();
}

static double tolerance(enum weft_dtype dt)
{
    /* bfloat16 fixtures hold the float64 result rounded (see gen.py): one bfloat16 ulp */
    return dt == WEFT_F64 ? 1e-12 : dt == WEFT_F32 ? 2e-6 : 1e-2;
}

/* |t - want| <= tol * (1 + |want|) elementwise, naming the case. */
static void assert_close(const weft_tensor *t, const double *want, int64_t n, double tol,
                         const char *name)
{
    double *have = malloc((size_t)(n ? n : 1) * sizeof *have);
    cr_assert_not_null(have);
    tu_read(t, have);
    for (int64_t i = 0; i < n; i++)
        cr_assert(fabs(have[i] - want[i]) <= tol * (1 + fabs(want[i])) ||
                      (isnan(have[i]) && isnan(want[i])),
                  "%s: element %lld is %.17g, PyTorch %.17g", name, (long long)i, have[i], want[i]);
    free(have);
}

/* "R ndim shape.. values.." against y. */
static void check_result(struct line *l, weft_tensor *y, const char *name, double tol)
{
    cr_assert_not_null(y, "%s (line %d): %s", name, l->lineno, weft_error_message());
    expect(l, "R");
    int ndim = (int)next_int(l);
    int64_t shape[WEFT_MAX_DIMS], n = 1;
    for (int d = 0; d < ndim; d++)
        n *= shape[d] = next_int(l);
    cr_assert_eq(y->ndim, ndim, "%s: ndim %d, PyTorch %d", name, y->ndim, ndim);
    for (int d = 0; d < ndim; d++)
        cr_assert_eq(y->shape[d], shape[d], "%s: dim %d is %lld, PyTorch %lld", name, d,
                     (long long)y->shape[d], (long long)shape[d]);
    double *want = malloc((size_t)(n ? n : 1) * sizeof *want);
    cr_assert_not_null(want);
    for (int64_t i = 0; i < n; i++)
        want[i] = next_double(l);
    assert_close(y, want, n, tol, name);
    free(want);
}

/* "TAG values.." (or "TAG -") against g, a gradient of numel n. */
static void check_grad(struct line *l, const char *tag, weft_tensor *x, const char *name)
{
    expect(l, tag);
    if (strcmp(l->p, "-") == 0 || strncmp(l->p, "- ", 2) == 0) {
        next(l);
        return;
    }
    int64_t n = weft_tensor_numel(x);
    if (n == 0) /* an empty input: nothing to compare */
        return;
    weft_tensor *g = weft_grad(x);
    cr_assert_not_null(g, "%s: no gradient reached the input (%s)", name, tag);
    double *want = malloc((size_t)(n ? n : 1) * sizeof *want);
    cr_assert_not_null(want);
    for (int64_t i = 0; i < n; i++)
        want[i] = next_double(l);
    assert_close(g, want, n, 1e-11, name);
    free(want);
}

/* Backward with grad_output value(777, i, 23), then the G tags and N name. */
static void check_backward(struct line *l, weft_tensor *y, int nx, weft_tensor **xs,
                           const char *const *tags, const char *name, bool check_name)
{
    bool grads = nx > 0 && weft_requires_grad(xs[0]) && weft_tensor_numel(y) > 0;
    if (grads) {
        int64_t n = weft_tensor_numel(y);
        double *gv = malloc((size_t)n * sizeof *gv);
        cr_assert_not_null(gv);
        for (int64_t i = 0; i < n; i++)
            gv[i] = value(777, i, 23);
        weft_tensor *go = tu_tensor(y->ndim, y->shape, gv, WEFT_F64);
        free(gv);
        cr_assert_eq(weft_backward(y, go, false), 0, "%s: backward: %s", name, weft_error_message());
    }
    for (int i = 0; i < nx; i++)
        check_grad(l, tags[i], xs[i], name);
    expect(l, "N");
    const char *fn = next(l);
    if (grads && check_name && strcmp(fn, "-") != 0) {
        /* views over the node (3-D results, reshapes) may show PyTorch's own top node */
        const char *have = weft_grad_fn_name(y);
        cr_assert(have && strcmp(have, fn) == 0, "%s: grad_fn %s, PyTorch %s", name,
                  have ? have : "(none)", fn);
    }
}

typedef void (*case_fn)(struct line *l);

static void replay(const char *file, const char *kind, case_fn fn)
{
    const char *dir = getenv("WEFT_TEST_SOURCE_DIR");
    if (!dir)
        cr_skip_test("WEFT_TEST_SOURCE_DIR is not set (run through meson test)");
    char path[1024];
    snprintf(path, sizeof path, "%s/interp/fixtures/%s", dir, file);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "cannot open %s", path);
    static char buf[1 << 20];
    int lineno = 0, cases = 0;
    while (fgets(buf, sizeof buf, f)) {
        lineno++;
        buf[strcspn(buf, "\n")] = '\0';
        if (buf[0] == '#' || buf[0] == '\0')
            continue;
        struct line l = {buf, lineno};
        expect(&l, kind);
        weft_scope_push();
        fn(&l);
        weft_scope_pop();
        tu_assert_no_error();
        cases++;
    }
    fclose(f);
    cr_assert_gt(cases, 10, "%s: only %d cases", path, cases);
}

/* ---- interpolate fixtures ------------------------------------------------------------------ */

static void interp_case(struct line *l)
{
    char name[96], mode[32], dt[16], layout[4];
    snprintf(name, sizeof name, "%s", next(l));
    snprintf(mode, sizeof mode, "%s", next(l));
    struct weft_interpolate_params p = {.mode = mode};
    p.align_corners = (int)next_int(l);
    p.nsize = (int)next_int(l);
    for (int i = 0; i < (p.nsize < 0 ? 1 : p.nsize); i++)
        p.size[i] = next_int(l);
    p.nscale = (int)next_int(l);
    for (int i = 0; i < (p.nscale < 0 ? 1 : p.nscale); i++)
        p.scale_factor[i] = next_double(l);
    p.recompute_scale_factor = (int)next_int(l);
    snprintf(dt, sizeof dt, "%s", next(l));
    snprintf(layout, sizeof layout, "%s", next(l));
    int ndim = (int)next_int(l);
    int64_t shape[WEFT_MAX_DIMS];
    for (int d = 0; d < ndim; d++)
        shape[d] = next_int(l);
    enum weft_dtype dtype = dtype_of(dt);
    weft_tensor *x = make(ndim, shape, layout, 11, 40, dtype);
    if (dtype == WEFT_F64) {
        /* a non-contiguous leaf: detach keeps the strides */
        x = weft_detach(x);
        weft_requires_grad_(x, true);
    }
    weft_tensor *y = weft_interpolate(x, &p);
    char *save = l->p;
    while (*l->p == ' ')
        l->p++;
    if (l->p[0] == 'E' && l->p[1] == ' ') {
        next(l);
        check_error(l, y, name);
        return;
    }
    l->p = save;
    /* float32 bicubic: PyTorch's CPU kernel rounds differently from the formula evaluated
     * in float (its results sit nearer the float64 ones): agreement to 1e-5 of the inputs'
     * scale, not to the last bits */
    double tol = tolerance(dtype);
    if (dtype == WEFT_F32 && strcmp(mode, "bicubic") == 0)
        tol = 1e-5;
    check_result(l, y, name, tol);
    const char *tags[1] = {"G"};
    /* area is weft_adaptive_avg_pool2d's, whose nodes are its own (values and gradients
     * are still PyTorch's) */
    check_backward(l, y, 1, &x, tags, name, strcmp(mode, "area") != 0);
}

Test(interpolate, matches_pytorch_fixtures)
{
    replay("interpolate.txt", "interp", interp_case);
}

/* ---- cdist fixtures ------------------------------------------------------------------------ */

static void cdist_case(struct line *l)
{
    char name[96], dts[32], l1[4], l2[4];
    snprintf(name, sizeof name, "%s", next(l));
    double p = next_double(l);
    int mode = (int)next_int(l);
    snprintf(dts, sizeof dts, "%s", next(l));
    int64_t s1[WEFT_MAX_DIMS], s2[WEFT_MAX_DIMS];
    snprintf(l1, sizeof l1, "%s", next(l));
    int n1 = (int)next_int(l);
    for (int d = 0; d < n1; d++)
        s1[d] = next_int(l);
    snprintf(l2, sizeof l2, "%s", next(l));
    int n2 = (int)next_int(l);
    for (int d = 0; d < n2; d++)
        s2[d] = next_int(l);
    int64_t levels = next_int(l);
    char *slash = strchr(dts, '/');
    enum weft_dtype d2 = slash ? dtype_of(slash + 1) : WEFT_F64;
    if (slash)
        *slash = '\0';
    enum weft_dtype d1 = dtype_of(dts);
    if (!slash)
        d2 = d1;
    weft_tensor *a = weft_detach(make(n1, s1, l1, 21, levels, d1));
    weft_tensor *b = weft_detach(make(n2, s2, l2, 22, levels, d2));
    bool grad = d1 == WEFT_F64 && !slash;
    if (grad) {
        weft_requires_grad_(a, true);
        weft_requires_grad_(b, true);
    }
    weft_tensor *y = weft_cdist_mode(a, b, p, (enum weft_cdist_compute_mode)mode);
    char *save = l->p;
    while (*l->p == ' ')
        l->p++;
    if (l->p[0] == 'E' && l->p[1] == ' ') {
        next(l);
        check_error(l, y, name);
        return;
    }
    l->p = save;
    /* p = 2 by matrix multiplication: cancellation, as in PyTorch */
    check_result(l, y, name, d1 == WEFT_F32 ? 1e-5 : 1e-9);
    weft_tensor *xs[2] = {a, b};
    const char *tags[2] = {"G1", "G2"};
    check_backward(l, y, 2, xs, tags, name, true);
}

Test(interpolate, cdist_matches_pytorch_fixtures)
{
    replay("cdist.txt", "cdist", cdist_case);
}

/* ---- gradients against central differences -------------------------------------------------- */

struct interp_ctx {
    struct weft_interpolate_params p;
};

static weft_tensor *interp_fn(void *ctx, weft_tensor *const *in)
{
    return weft_interpolate(in[0], &((struct interp_ctx *)ctx)->p);
}

static void gradcheck_interp(const char *mode, int align, int ndim, const int64_t *shape, int nsize,
                             const int64_t *size, int nscale, const double *scale)
{
    uint64_t state = 42;
    weft_tensor *x = tu_random_tensor(ndim, shape, WEFT_F64, -1, 1, &state, NULL);
    weft_requires_grad_(x, true);
    struct interp_ctx c = {{.mode = mode, .align_corners = align, .recompute_scale_factor = -1,
                            .nsize = nsize, .nscale = nscale}};
    for (int i = 0; i < nsize; i++)
        c.p.size[i] = size[i];
    for (int i = 0; i < nscale; i++)
        c.p.scale_factor[i] = scale[i];
    int rc = weft_gradcheck(interp_fn, &c, 1, &x, 1e-6, 1e-7, 1e-6);
    cr_assert_eq(rc, 0, "gradcheck %s align %d: %s", mode, align, weft_error_message());
}

Test(interpolate, gradcheck_every_mode)
{
    const int64_t s4[4] = {2, 2, 5, 4}, s3[3] = {2, 3, 6};
    const int64_t up[2] = {7, 9}, down[2] = {3, 3}, up1[1] = {11}, down1[1] = {4};
    const double sc[2] = {1.7, 0.6}, sc1[1] = {1.5};
    const char *modes4[] = {"nearest", "nearest-exact", "bilinear", "bicubic"};
    for (int m = 0; m < 4; m++) {
        bool lin = m >= 2;
        for (int al = lin ? 0 : -1; al <= (lin ? 1 : -1); al++) {
            weft_scope_push();
            gradcheck_interp(modes4[m], al, 4, s4, 2, up, 0, NULL);
            gradcheck_interp(modes4[m], al, 4, s4, 2, down, 0, NULL);
            gradcheck_interp(modes4[m], al, 4, s4, 0, NULL, 2, sc);
            weft_scope_pop();
        }
    }
    const char *modes3[] = {"nearest", "nearest-exact", "linear"};
    for (int m = 0; m < 3; m++)
        for (int al = m == 2 ? 0 : -1; al <= (m == 2 ? 1 : -1); al++) {
            weft_scope_push();
            gradcheck_interp(modes3[m], al, 3, s3, 1, up1, 0, NULL);
            gradcheck_interp(modes3[m], al, 3, s3, 1, down1, 0, NULL);
            gradcheck_interp(modes3[m], al, 3, s3, 0, NULL, 1, sc1);
            weft_scope_pop();
        }
    weft_scope_push();
    gradcheck_interp("area", -1, 4, s4, 2, down, 0, NULL);
    weft_scope_pop();
}

struct cdist_ctx {
    double p;
    enum weft_cdist_compute_mode mode;
};

static weft_tensor *cdist_fn(void *ctx, weft_tensor *const *in)
{
    struct cdist_ctx *c = ctx;
    return weft_cdist_mode(in[0], in[1], c->p, c->mode);
}

Test(interpolate, cdist_gradcheck_every_p)
{
    const double ps[] = {0, 0.5, 1, 1.5, 2, 3, INFINITY};
    const int64_t s1[3] = {2, 3, 4}, s2[3] = {2, 5, 4}, big[3] = {1, 27, 3}, small[3] = {1, 4, 3};
    for (size_t i = 0; i < sizeof ps / sizeof *ps; i++)
        for (int mode = 0; mode <= 2; mode++) {
            if (mode != 0 && ps[i] != 2)
                continue;
            weft_scope_push();
            uint64_t state = 7 + i;
            /* continuous random points: no ties, no zero differences */
            weft_tensor *in[2] = {tu_random_tensor(3, s1, WEFT_F64, -1, 1, &state, NULL),
                                  tu_random_tensor(3, s2, WEFT_F64, -1, 1, &state, NULL)};
            if (ps[i] == 2 && mode == 0) { /* more than 25 rows: the mm formula */
                in[0] = tu_random_tensor(3, big, WEFT_F64, -1, 1, &state, NULL);
                in[1] = tu_random_tensor(3, small, WEFT_F64, -1, 1, &state, NULL);
            }
            weft_requires_grad_(in[0], true);
            weft_requires_grad_(in[1], true);
            struct cdist_ctx c = {ps[i], (enum weft_cdist_compute_mode)mode};
            int rc = weft_gradcheck(cdist_fn, &c, 2, in, 1e-6, 1e-6, 1e-5);
            cr_assert_eq(rc, 0, "gradcheck p=%g mode %d: %s", ps[i], mode, weft_error_message());
            weft_scope_pop();
        }
}

/* ---- behaviour beyond the fixtures ---------------------------------------------------------- */

Test(interpolate, single_size_applies_to_every_dim)
{
    weft_scope_push(); /* the tensors made here */
    const int64_t shape[4] = {1, 1, 3, 5};
    weft_tensor *x = make(4, shape, "c", 1, 40, WEFT_F32);
    struct weft_interpolate_params p = {.mode = "bilinear", .nsize = -1, .size = {4},
                                        .align_corners = -1, .recompute_scale_factor = -1};
    weft_tensor *y = weft_interpolate(x, &p);
    const int64_t want[4] = {1, 1, 4, 4};
    tu_assert_shape(y, 4, want);
    /* align_corners=True keeps the corners */
    p.align_corners = 1;
    double v[16], xv[15];
    tu_read(weft_interpolate(x, &p), v);
    tu_read(x, xv);
    cr_assert_eq(v[0], xv[0]);
    cr_assert_eq(v[3], xv[4]);
    cr_assert_eq(v[12], xv[10]);
    cr_assert_eq(v[15], xv[14]);
    weft_scope_pop();
}

/* The gradients of sum(f(x)^2) with n threads. */
static double *grads_with_threads(int threads, bool cdist, int64_t *numel)
{
    int before = weft_get_num_threads();
    cr_assert_eq(weft_set_num_threads(threads), 0, "%s", weft_error_message());
    weft_scope_push();
    uint64_t state = 3;
    const int64_t shape[4] = {4, 8, 33, 35}, pts[3] = {3, 200, 16}, other[3] = {3, 180, 16};
    weft_tensor *x = cdist ? tu_random_tensor(3, pts, WEFT_F32, -1, 1, &state, NULL)
                           : tu_random_tensor(4, shape, WEFT_F32, -1, 1, &state, NULL);
    weft_requires_grad_(x, true);
    weft_tensor *y;
    if (cdist) {
        y = weft_cdist(x, tu_random_tensor(3, other, WEFT_F32, -1, 1, &state, NULL), 1.5);
    } else {
        struct weft_interpolate_params p = {.mode = "bicubic", .nsize = 2, .size = {70, 19},
                                            .align_corners = 0, .recompute_scale_factor = -1};
        y = weft_interpolate(x, &p);
    }
    const int all[4] = {0, 1, 2, 3};
    weft_tensor *loss = weft_sum(weft_mul(y, y), y ? y->ndim : 0, all, false);
    cr_assert_eq(weft_backward(loss, NULL, false), 0, "%s", weft_error_message());
    *numel = weft_tensor_numel(x);
    double *g = malloc((size_t)*numel * sizeof *g);
    cr_assert_not_null(g);
    tu_read(weft_grad(x), g);
    weft_scope_pop();
    weft_set_num_threads(before);
    return g;
}

Test(interpolate, backward_is_the_same_for_any_thread_count)
{
    for (int cdist = 0; cdist <= 1; cdist++) {
        int64_t n1, n2;
        double *g1 = grads_with_threads(1, cdist, &n1), *g2 = grads_with_threads(2, cdist, &n2);
        cr_assert_eq(n1, n2);
        cr_assert_eq(memcmp(g1, g2, (size_t)n1 * sizeof *g1), 0, "%s: 1 and 2 threads differ",
                     cdist ? "cdist" : "interpolate");
        free(g1);
        free(g2);
    }
}

Test(interpolate, cdist_zero_distance_gives_zero_gradient)
{
    weft_scope_push(); /* the tensors made here */
    /* the same point on both sides: p = 2 and the mm formula give 0, not NaN */
    const int64_t s[2] = {30, 3};
    uint64_t state = 9;
    double v[90];
    weft_tensor *a = tu_random_tensor(2, s, WEFT_F64, -1, 1, &state, v);
    weft_tensor *b = weft_clone(a);
    weft_requires_grad_(a, true);
    for (int mode = 1; mode <= 2; mode++) {
        weft_scope_push();
        weft_tensor *d = weft_cdist_mode(a, b, 2, (enum weft_cdist_compute_mode)mode);
        double dv[900];
        tu_read(d, dv);
        for (int i = 0; i < 30; i++)
            cr_assert_leq(dv[i * 31], mode == 1 ? 1e-7 : 0, "diagonal %d: %g", i, dv[i * 31]);
        const int all[2] = {0, 1};
        cr_assert_eq(weft_backward(weft_sum(d, 2, all, false), NULL, false), 0, "%s",
                     weft_error_message());
        double g[90];
        tu_read(weft_grad(a), g);
        for (int i = 0; i < 90; i++)
            cr_assert(isfinite(g[i]), "gradient %d is %g", i, g[i]);
        weft_scope_pop();
    }
    weft_scope_pop();
}

Test(interpolate, bad_params_are_errors)
{
    weft_scope_push(); /* the tensors made here */
    const int64_t shape[4] = {1, 1, 3, 5};
    weft_tensor *x = make(4, shape, "c", 1, 40, WEFT_F32);
    cr_assert_null(weft_interpolate(x, NULL));
    tu_assert_error(WEFT_ERR_VALUE, "either size or scale_factor should be defined");
    struct weft_interpolate_params p = {.mode = "bilinear", .nsize = 7};
    cr_assert_null(weft_interpolate(x, &p));
    tu_assert_error(WEFT_ERR_VALUE, "nsize");
    const int64_t s5[5] = {1, 1, 2, 2, 2};
    p = (struct weft_interpolate_params){.mode = "nearest", .nsize = -1, .size = {3},
                                         .align_corners = -1, .recompute_scale_factor = -1};
    cr_assert_null(weft_interpolate(make(5, s5, "c", 1, 40, WEFT_F32), &p));
    tu_assert_error(WEFT_ERR_NOT_IMPLEMENTED, "5-D");
    cr_assert_null(weft_cdist_mode(x, x, 2, (enum weft_cdist_compute_mode)3));
    tu_assert_error(WEFT_ERR_RUNTIME, "possible modes: 0, 1, 2, but was: 3");
    cr_assert_null(weft_interpolate(NULL, &p));
    cr_assert_null(weft_cdist(NULL, x, 2));
    weft_scope_pop();
}

Test(interpolate, infinities_spread_as_in_pytorch)
{
    weft_scope_push(); /* the tensors made here */
    /* PyTorch 1.13: linear 1-d [1, inf, 2] -> size 3: [1, nan, 2] (the same-size shortcut
     * adds inf * 0), size 5: [nan, inf, inf, inf, 2] (the first sample's zero weight on inf) */
    const int64_t shape[3] = {1, 1, 3};
    const double v[3] = {1, INFINITY, 2};
    weft_tensor *x = tu_tensor(3, shape, v, WEFT_F32);
    struct weft_interpolate_params p = {.mode = "linear", .nsize = -1, .size = {3},
                                        .align_corners = -1, .recompute_scale_factor = -1};
    const double same[3] = {1, NAN, 2}, up[5] = {NAN, INFINITY, INFINITY, INFINITY, 2};
    tu_assert_close(weft_interpolate(x, &p), same, 3, 0, 0);
    p.size[0] = 5;
    tu_assert_close(weft_interpolate(x, &p), up, 5, 0, 0);
    weft_scope_pop();
}

/* The cuda plugin's kernels against the cpu's, forward and backward; skips (saying why)
 * where no CUDA device runs. */
static double *value_and_grad(weft_tensor *x_host, weft_device dev, bool cdist, const char *mode,
                              int align, double p, int64_t *n_out)
{
    weft_tensor *x = weft_detach(weft_to_device(x_host, dev));
    weft_requires_grad_(x, true);
    weft_tensor *y;
    if (cdist) {
        y = weft_cdist(x, weft_add_scalar(weft_mul_scalar(x, -0.5), 0.25), p);
    } else {
        struct weft_interpolate_params prm = {.mode = mode, .nsize = 2, .size = {11, 6},
                                              .align_corners = align, .recompute_scale_factor = -1};
        y = weft_interpolate(x, &prm);
    }
    cr_assert_not_null(y, "%s on %s: %s", cdist ? "cdist" : mode, dev.type == WEFT_DEVICE_CPU ? "cpu" : "cuda",
                       weft_error_message());
    const int all[4] = {0, 1, 2, 3};
    cr_assert_eq(weft_backward(weft_sum(weft_mul(y, y), y->ndim, all, false), NULL, false), 0, "%s",
                 weft_error_message());
    int64_t ny = weft_tensor_numel(y), nx = weft_tensor_numel(x);
    double *v = malloc((size_t)(ny + nx) * sizeof *v);
    cr_assert_not_null(v);
    tu_read(y, v);
    tu_read(weft_grad(x), v + ny);
    *n_out = ny + nx;
    return v;
}

static void expect_same(weft_tensor *x, bool cdist, const char *mode, int align, double p)
{
    int64_t n1, n2;
    double *cpu = value_and_grad(x, (weft_device){WEFT_DEVICE_CPU, 0}, cdist, mode, align, p, &n1);
    double *gpu = value_and_grad(x, tu_cuda(0), cdist, mode, align, p, &n2);
    cr_assert_eq(n1, n2);
    for (int64_t i = 0; i < n1; i++)
        cr_assert(fabs(cpu[i] - gpu[i]) <= 1e-4 * (1 + fabs(cpu[i])),
                  "%s align %d p %g: element %lld cpu %.9g cuda %.9g", cdist ? "cdist" : mode, align,
                  p, (long long)i, cpu[i], gpu[i]);
    free(cpu);
    free(gpu);
}

Test(interpolate, cuda_matches_cpu)
{
    if (weft_plugin_load("cuda") != 0) {
        fprintf(stderr, "interpolate: cuda checks skipped: %s\n", weft_error_message());
        weft_error_clear();
        cr_skip_test("no CUDA device here");
    }
    weft_scope_push();
    uint64_t state = 5;
    const int64_t s4[4] = {2, 3, 5, 7}, s3[3] = {2, 30, 5}, small[3] = {2, 6, 5};
    weft_tensor *img = tu_random_tensor(4, s4, WEFT_F32, -1, 1, &state, NULL);
    const char *modes[] = {"nearest", "nearest-exact", "bilinear", "bicubic"};
    for (int m = 0; m < 4; m++)
        for (int al = m < 2 ? -1 : 0; al <= (m < 2 ? -1 : 1); al++)
            expect_same(img, false, modes[m], al, 0);
    const double ps[] = {0, 0.5, 1, 1.5, 2, 3, INFINITY};
    for (size_t i = 0; i < sizeof ps / sizeof *ps; i++) {
        expect_same(tu_random_tensor(3, s3, WEFT_F64, -1, 1, &state, NULL), true, NULL, 0, ps[i]);
        expect_same(tu_random_tensor(3, small, WEFT_F64, -1, 1, &state, NULL), true, NULL, 0, ps[i]);
    }
    weft_scope_pop();
}
