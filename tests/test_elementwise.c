/* tests/test_elementwise.c: unary and binary ops, where, clamp, masked_fill.
 *
 * The sweeps run every op on every dtype it exists for, on random shapes in several
 * layouts (contiguous, transposed, sliced with a step, expanded with stride 0, empty),
 * against a plain loop in double. The named tests pin down promotion, NaN handling, integer
 * semantics, in-place rules and every error text. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

TestSuite(elementwise, .init = tu_setup, .fini = tu_teardown);

#define ALL_DTYPES WEFT_DTYPES_ALL
#define NUMERIC (WEFT_DTYPES_INTEGRAL | WEFT_DTYPES_FLOATING)

static const int64_t S3[] = {3};
static const int64_t S23[] = {2, 3};

/* ---- helpers ----------------------------------------------------------------------- */

static int64_t numel_of(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    return n;
}

static bool is_float(enum weft_dtype dt)
{
    return weft_dtype_is_floating(dt);
}

/* The value a double becomes when stored in dt (integers wrap like a C cast via int64). */
static double as_dtype(enum weft_dtype dt, double v)
{
    switch (dt) {
    case WEFT_BOOL: return v != 0;
    case WEFT_U8: return (uint8_t)(int64_t)v;
    case WEFT_I8: return (int8_t)(int64_t)v;
    case WEFT_I16: return (int16_t)(int64_t)v;
    case WEFT_I32: return (int32_t)(int64_t)v;
    case WEFT_I64: return (double)(int64_t)v;
    case WEFT_F32: return (float)v;
    default: return v; /* 16-bit floats: the tolerance covers their rounding */
    }
}

/* Tolerances for a result of dtype dt computed from exact inputs. */
static double rtol_of(enum weft_dtype dt)
{
    switch (dt) {
    case WEFT_F16: return 2e-3;
    case WEFT_BF16: return 1.6e-2;
    case WEFT_F32: return 1e-5;
    case WEFT_F64: return 1e-12;
    default: return 0;
    }
}

static double atol_of(enum weft_dtype dt)
{
    switch (dt) {
    case WEFT_F16: return 1e-3;
    case WEFT_BF16: return 1e-2;
    case WEFT_F32: return 1e-6;
    case WEFT_F64: return 1e-12;
    default: return 0;
    }
}

/* Random values valid for dt in [lo, hi): whole numbers for integers, 0/1 for bool. */
static void values_for(enum weft_dtype dt, double *v, int64_t n, double lo, double hi, uint64_t *st)
{
    if (dt == WEFT_BOOL) {
        lo = 0;
        hi = 2;
    } else if (dt == WEFT_U8 && lo < 0) {
        hi -= lo;
        lo = 0;
    }
    tu_random_values(v, n, lo, hi, st);
    if (!is_float(dt))
        for (int64_t i = 0; i < n; i++)
            v[i] = floor(v[i]);
}

enum layout { CONTIGUOUS, TRANSPOSED, STEPPED, EXPANDED, LAYOUT_COUNT };

/* A tensor of `shape` and dtype with random values, laid out as asked (falls back to
 * contiguous where the layout needs more dims). Recorded in the test's scope. */
static weft_tensor *make_input(enum layout layout, int ndim, const int64_t *shape,
                               enum weft_dtype dt, double lo, double hi, uint64_t *st)
{
    int64_t base[WEFT_MAX_DIMS];
    memcpy(base, shape, (size_t)ndim * sizeof *shape);
    if (layout == TRANSPOSED && ndim >= 2) {
        base[0] = shape[ndim - 1];
        base[ndim - 1] = shape[0];
    } else if (layout == STEPPED && ndim >= 1) {
        base[0] = shape[0] * 2;
    } else if (layout == EXPANDED && ndim >= 1) {
        base[ndim - 1] = 1;
    } else {
        layout = CONTIGUOUS;
    }
    int64_t n = numel_of(ndim, base);
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    values_for(dt, v, n, lo, hi, st);
    weft_tensor *t = tu_tensor(ndim, base, v, dt);
    free(v);
    switch (layout) {
    case TRANSPOSED: t = weft_transpose(t, 0, ndim - 1); break;
    case STEPPED: t = weft_slice(t, 0, 0, base[0], 2); break;
    case EXPANDED: t = weft_expand(t, ndim, shape); break;
    default: break;
    }
    tu_assert_shape(t, ndim, shape);
    return t;
}

/* Random shape: ndim 0..3, sizes 1..4, and now and then a zero size. */
static int random_shape(int64_t *shape, uint64_t *st)
{
    double r[5];
    tu_random_values(r, 5, 0, 1, st);
    int ndim = (int)(r[0] * 4);
    for (int i = 0; i < ndim; i++)
        shape[i] = 1 + (int64_t)(r[1 + i] * 4);
    if (ndim > 0 && r[4] < 0.1)
        shape[ndim - 1] = 0;
    return ndim;
}

static double *read_all(const weft_tensor *t)
{
    int64_t n = weft_tensor_numel(t);
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    tu_read(t, v);
    return v;
}

static void expect_values(const weft_tensor *t, enum weft_dtype dt, const double *want, int64_t n)
{
    cr_assert_not_null(t, "%s", weft_error_message());
    cr_assert_eq(t->dtype, dt, "dtype %s, expected %s", weft_dtype_name(t->dtype),
                 weft_dtype_name(dt));
    tu_assert_close(t, want, n, rtol_of(dt), atol_of(dt));
}

/* ---- unary sweep ----------------------------------------------------------------------- */

enum unary_rule { SAME, FLOATING, ROUNDING, LOGICAL };

struct unary_case {
    const char *name;
    weft_tensor *(*fn)(weft_tensor *);
    weft_tensor *(*fn_)(weft_tensor *);
    double (*ref)(double);
    enum unary_rule rule;
    uint32_t dtypes;
    double lo, hi;
};

static double r_neg(double x) { return -x; }
static double r_sign(double x) { return (x > 0) - (x < 0); }
static double r_rsqrt(double x) { return 1 / sqrt(x); }
static double r_reciprocal(double x) { return 1 / x; }
static double r_sigmoid(double x) { return 1 / (1 + exp(-x)); }
static double r_relu(double x) { return x < 0 ? 0 : x; }
static double r_gelu(double x) { return 0.5 * x * (1 + erf(x / sqrt(2.0))); }
static double r_silu(double x) { return x / (1 + exp(-x)); }
static double r_not(double x) { return x == 0; }

static const struct unary_case unary_cases[] = {
    {"neg", weft_neg, weft_neg_, r_neg, SAME, NUMERIC, -50, 50},
    {"abs", weft_abs, weft_abs_, fabs, SAME, NUMERIC, -50, 50},
    {"sign", weft_sign, weft_sign_, r_sign, SAME, ALL_DTYPES, -3, 3},
    {"exp", weft_exp, weft_exp_, exp, FLOATING, ALL_DTYPES, -4, 4},
    {"expm1", weft_expm1, weft_expm1_, expm1, FLOATING, ALL_DTYPES, -4, 4},
    {"log", weft_log, weft_log_, log, FLOATING, ALL_DTYPES, 0.1, 20},
    {"log1p", weft_log1p, weft_log1p_, log1p, FLOATING, ALL_DTYPES, -0.5, 20},
    {"sqrt", weft_sqrt, weft_sqrt_, sqrt, FLOATING, ALL_DTYPES, 0, 20},
    {"rsqrt", weft_rsqrt, weft_rsqrt_, r_rsqrt, FLOATING, ALL_DTYPES, 0.1, 20},
    {"reciprocal", weft_reciprocal, weft_reciprocal_, r_reciprocal, FLOATING, ALL_DTYPES, 0.5, 8},
    {"sin", weft_sin, weft_sin_, sin, FLOATING, ALL_DTYPES, -4, 4},
    {"cos", weft_cos, weft_cos_, cos, FLOATING, ALL_DTYPES, -4, 4},
    {"tanh", weft_tanh, weft_tanh_, tanh, FLOATING, ALL_DTYPES, -4, 4},
    {"sigmoid", weft_sigmoid, weft_sigmoid_, r_sigmoid, FLOATING, ALL_DTYPES, -8, 8},
    {"relu", weft_relu, weft_relu_, r_relu, SAME, NUMERIC, -5, 5},
    /* PyTorch implements these activations for floating dtypes only */
    {"gelu", weft_gelu, weft_gelu_, r_gelu, FLOATING, WEFT_DTYPES_FLOATING, -5, 5},
    {"silu", weft_silu, weft_silu_, r_silu, FLOATING, WEFT_DTYPES_FLOATING, -8, 8},
    {"erf", weft_erf, weft_erf_, erf, FLOATING, ALL_DTYPES, -3, 3},
    {"floor", weft_floor, weft_floor_, floor, ROUNDING, NUMERIC, -5, 5},
    {"ceil", weft_ceil, weft_ceil_, ceil, ROUNDING, NUMERIC, -5, 5},
    {"round", weft_round, weft_round_, nearbyint, ROUNDING, NUMERIC, -5, 5},
    {"trunc", weft_trunc, weft_trunc_, trunc, ROUNDING, NUMERIC, -5, 5},
    {"logical_not", weft_logical_not, weft_logical_not_, r_not, LOGICAL, ALL_DTYPES, -2, 2},
};

static enum weft_dtype unary_result_dtype(const struct unary_case *c, enum weft_dtype dt)
{
    if (c->rule == LOGICAL)
        return WEFT_BOOL;
    if (c->rule == FLOATING && !is_float(dt))
        return WEFT_F32;
    return dt;
}

static void check_unary(const struct unary_case *c, enum weft_dtype dt, enum layout layout,
                        int ndim, const int64_t *shape, uint64_t *st)
{
    weft_tensor *x = make_input(layout, ndim, shape, dt, c->lo, c->hi, st);
    int64_t n = weft_tensor_numel(x);
    enum weft_dtype rt = unary_result_dtype(c, dt);
    double *in = read_all(x), *want = malloc((size_t)(n ? n : 1) * sizeof *want);
    for (int64_t i = 0; i < n; i++)
        want[i] = as_dtype(rt, c->ref(in[i]));
    weft_tensor *y = c->fn(x);
    cr_assert_not_null(y, "%s(%s): %s", c->name, weft_dtype_name(dt), weft_error_message());
    tu_assert_shape(y, ndim, shape);
    expect_values(y, rt, want, n);

    /* In place, where the result fits the input's dtype: on a non-expanded copy. */
    if (rt == dt && layout != EXPANDED) {
        weft_tensor *z = weft_clone(x);
        uint64_t version = weft_tensor_version(z);
        cr_assert_eq(c->fn_(z), z, "%s_: %s", c->name, weft_error_message());
        cr_assert_gt(weft_tensor_version(z), version, "%s_ must bump the version", c->name);
        expect_values(z, rt, want, n);
    }
    free(in);
    free(want);
}

Test(elementwise, every_unary_op_matches_a_double_reference_on_every_dtype_and_layout)
{
    uint64_t st = 42;
    weft_scope_push();
    for (size_t k = 0; k < sizeof unary_cases / sizeof *unary_cases; k++)
        for (int dt = 0; dt < WEFT_DTYPE_COUNT; dt++) {
            if (!(unary_cases[k].dtypes & WEFT_DTYPE_BIT(dt)))
                continue;
            for (int layout = 0; layout < LAYOUT_COUNT; layout++)
                for (int trial = 0; trial < 3; trial++) {
                    int64_t shape[WEFT_MAX_DIMS] = {0};
                    int ndim = trial == 0 ? 2 : random_shape(shape, &st);
                    if (trial == 0) {
                        shape[0] = 5;
                        shape[1] = 7;
                    }
                    check_unary(&unary_cases[k], (enum weft_dtype)dt, (enum layout)layout, ndim,
                                shape, &st);
                }
        }
    weft_scope_pop();
}

Test(elementwise, long_contiguous_inputs_take_the_vector_path_and_threads)
{
    /* Past CPU_PARALLEL_GRAIN, with a length that leaves a vector remainder. */
    uint64_t st = 7;
    int64_t shape[] = {70001};
    weft_scope_push();
    for (int dt = WEFT_F16; dt <= WEFT_F64; dt++) {
        check_unary(&unary_cases[3], (enum weft_dtype)dt, CONTIGUOUS, 1, shape, &st); /* exp */
        check_unary(&unary_cases[15], (enum weft_dtype)dt, CONTIGUOUS, 1, shape, &st); /* gelu */
    }
    weft_scope_pop();
}

/* ---- binary sweep ------------------------------------------------------------------------ */

enum binary_rule { ARITH, TRUE_DIV, COMPARE };

struct binary_case {
    const char *name;
    weft_tensor *(*fn)(weft_tensor *, weft_tensor *);
    weft_tensor *(*fn_)(weft_tensor *, weft_tensor *);
    weft_tensor *(*fs)(weft_tensor *, double);
    weft_tensor *(*fs_)(weft_tensor *, double);
    double (*ref)(double, double);
    enum binary_rule rule;
    uint32_t dtypes;
    double alo, ahi, blo, bhi;
};

static double r_add(double a, double b) { return a + b; }
static double r_sub(double a, double b) { return a - b; }
static double r_mul(double a, double b) { return a * b; }
static double r_div(double a, double b) { return a / b; }
static double r_max(double a, double b) { return a > b ? a : b; }
static double r_min(double a, double b) { return a < b ? a : b; }
static double r_eq(double a, double b) { return a == b; }
static double r_ne(double a, double b) { return a != b; }
static double r_lt(double a, double b) { return a < b; }
static double r_le(double a, double b) { return a <= b; }
static double r_gt(double a, double b) { return a > b; }
static double r_ge(double a, double b) { return a >= b; }
static double r_and(double a, double b) { return a != 0 && b != 0; }
static double r_or(double a, double b) { return a != 0 || b != 0; }
static double r_add_bool(double a, double b) { return a != 0 || b != 0; }

#define BIN(name, ref, rule, dtypes, alo, ahi, blo, bhi)                                      \
    {#name, weft_##name, weft_##name##_, weft_##name##_scalar, weft_##name##_scalar_, ref,    \
     rule, dtypes, alo, ahi, blo, bhi}
static const struct binary_case binary_cases[] = {
    BIN(add, r_add, ARITH, ALL_DTYPES, -50, 50, -50, 50),
    BIN(sub, r_sub, ARITH, NUMERIC, -50, 50, -50, 50),
    BIN(mul, r_mul, ARITH, ALL_DTYPES, -10, 10, -10, 10),
    BIN(div, r_div, TRUE_DIV, ALL_DTYPES, -20, 20, 1, 6),
    BIN(pow, pow, ARITH, NUMERIC, 0, 4, 0, 4),
    BIN(maximum, r_max, ARITH, ALL_DTYPES, -4, 4, -4, 4),
    BIN(minimum, r_min, ARITH, ALL_DTYPES, -4, 4, -4, 4),
    BIN(eq, r_eq, COMPARE, ALL_DTYPES, -3, 3, -3, 3),
    BIN(ne, r_ne, COMPARE, ALL_DTYPES, -3, 3, -3, 3),
    BIN(lt, r_lt, COMPARE, ALL_DTYPES, -3, 3, -3, 3),
    BIN(le, r_le, COMPARE, ALL_DTYPES, -3, 3, -3, 3),
    BIN(gt, r_gt, COMPARE, ALL_DTYPES, -3, 3, -3, 3),
    BIN(ge, r_ge, COMPARE, ALL_DTYPES, -3, 3, -3, 3),
    BIN(logical_and, r_and, COMPARE, ALL_DTYPES, -2, 2, -2, 2),
    BIN(logical_or, r_or, COMPARE, ALL_DTYPES, -2, 2, -2, 2),
};

static enum weft_dtype binary_result_dtype(const struct binary_case *c, enum weft_dtype dt)
{
    if (c->rule == COMPARE)
        return WEFT_BOOL;
    if (c->rule == TRUE_DIV && !is_float(dt))
        return WEFT_F32;
    return dt;
}

static double binary_ref(const struct binary_case *c, enum weft_dtype dt, double a, double b)
{
    if (dt == WEFT_BOOL && c->ref == r_add)
        return r_add_bool(a, b);
    if (dt == WEFT_BOOL && c->ref == r_mul)
        return a != 0 && b != 0;
    return c->ref(a, b);
}

/* b's shape: a's trailing dims, some set to 1, maybe fewer of them. */
static int broadcast_partner(int ndim, const int64_t *shape, int64_t *out, uint64_t *st)
{
    double r[WEFT_MAX_DIMS + 1];
    tu_random_values(r, ndim + 1, 0, 1, st);
    int drop = ndim > 0 ? (int)(r[ndim] * (ndim + 1)) : 0;
    int nd = ndim - drop;
    for (int i = 0; i < nd; i++)
        out[i] = r[i] < 0.4 ? 1 : shape[drop + i];
    return nd;
}

/* Linear index into a tensor of in_shape broadcast to out_shape at out's linear index. */
static int64_t broadcast_index(int out_nd, const int64_t *out_shape, int64_t linear, int in_nd,
                               const int64_t *in_shape)
{
    int64_t idx = 0, mul = 1;
    for (int d = out_nd - 1; d >= 0; d--) {
        int64_t i = linear % out_shape[d];
        linear /= out_shape[d];
        int id = d - (out_nd - in_nd);
        if (id < 0)
            continue;
        if (in_shape[id] != 1)
            idx += i * mul;
        mul *= in_shape[id];
    }
    return idx;
}

static void check_binary(const struct binary_case *c, enum weft_dtype dt, enum layout la,
                         enum layout lb, uint64_t *st)
{
    int64_t sa[WEFT_MAX_DIMS] = {0}, sb[WEFT_MAX_DIMS] = {0};
    int na = random_shape(sa, st);
    int nb = broadcast_partner(na, sa, sb, st);
    double coin;
    tu_random_values(&coin, 1, 0, 1, st);
    bool swap = coin < 0.3;
    weft_tensor *a = make_input(la, swap ? nb : na, swap ? sb : sa, dt, c->alo, c->ahi, st);
    weft_tensor *b = make_input(lb, swap ? na : nb, swap ? sa : sb, dt, c->blo, c->bhi, st);
    enum weft_dtype rt = binary_result_dtype(c, dt);
    double *av = read_all(a), *bv = read_all(b);
    int64_t n = numel_of(na, sa);
    double *want = malloc((size_t)(n ? n : 1) * sizeof *want);
    for (int64_t i = 0; i < n; i++) {
        double x = av[broadcast_index(na, sa, i, a->ndim, a->shape)];
        double y = bv[broadcast_index(na, sa, i, b->ndim, b->shape)];
        want[i] = as_dtype(rt, binary_ref(c, dt, x, y));
    }
    weft_tensor *r = c->fn(a, b);
    cr_assert_not_null(r, "%s(%s): %s", c->name, weft_dtype_name(dt), weft_error_message());
    tu_assert_shape(r, na, sa);
    expect_values(r, rt, want, n);

    /* In place into the full-shaped operand, when the result fits its dtype. */
    if (rt == dt && !swap) {
        weft_tensor *full = weft_clone(a);
        uint64_t version = weft_tensor_version(full);
        cr_assert_eq(c->fn_(full, b), full, "%s_: %s", c->name, weft_error_message());
        cr_assert_gt(weft_tensor_version(full), version);
        expect_values(full, rt, want, n);
    }

    /* Scalar right operand: a whole number, so the dtype stays (true division aside). */
    double s;
    values_for(dt, &s, 1, c->blo, c->bhi, st);
    if (dt == WEFT_BOOL)
        s = s != 0;
    int64_t m = weft_tensor_numel(a);
    double *want_s = malloc((size_t)(m ? m : 1) * sizeof *want_s);
    for (int64_t i = 0; i < m; i++)
        want_s[i] = as_dtype(rt, binary_ref(c, dt, av[i], s));
    enum weft_dtype rts = rt;
    if (dt == WEFT_BOOL && c->rule != COMPARE)
        rts = c->rule == TRUE_DIV ? WEFT_F32 : WEFT_I64; /* bool tensor + int scalar */
    if (rts == rt) {
        weft_tensor *rs = c->fs(a, s);
        cr_assert_not_null(rs, "%s_scalar(%s): %s", c->name, weft_dtype_name(dt), weft_error_message());
        expect_values(rs, rt, want_s, m);
        if (rt == dt && la != EXPANDED) {
            weft_tensor *z = weft_clone(a);
            cr_assert_eq(c->fs_(z, s), z, "%s_scalar_: %s", c->name, weft_error_message());
            expect_values(z, rt, want_s, m);
        }
    }
    free(av);
    free(bv);
    free(want);
    free(want_s);
}

Test(elementwise, every_binary_op_matches_a_double_reference_with_broadcasting)
{
    uint64_t st = 1234;
    weft_scope_push();
    for (size_t k = 0; k < sizeof binary_cases / sizeof *binary_cases; k++)
        for (int dt = 0; dt < WEFT_DTYPE_COUNT; dt++) {
            if (!(binary_cases[k].dtypes & WEFT_DTYPE_BIT(dt)))
                continue;
            for (int la = 0; la < LAYOUT_COUNT; la++)
                for (int lb = 0; lb < LAYOUT_COUNT; lb++)
                    check_binary(&binary_cases[k], (enum weft_dtype)dt, (enum layout)la,
                                 (enum layout)lb, &st);
        }
    weft_scope_pop();
}

Test(elementwise, long_binary_inputs_match_on_every_vector_path)
{
    /* contiguous/contiguous, contiguous/row broadcast, column broadcast/contiguous. */
    int64_t big[] = {300, 257}, row[] = {1, 257}, col[] = {300, 1};
    uint64_t st = 99;
    weft_scope_push();
    for (int dt = WEFT_I32; dt <= WEFT_F64; dt++) {
        const int64_t *shapes[3][2] = {{big, big}, {big, row}, {col, big}};
        for (int p = 0; p < 3; p++) {
            weft_tensor *a = make_input(CONTIGUOUS, 2, shapes[p][0], (enum weft_dtype)dt, -9, 9, &st);
            weft_tensor *b = make_input(CONTIGUOUS, 2, shapes[p][1], (enum weft_dtype)dt, -9, 9, &st);
            double *av = read_all(a), *bv = read_all(b);
            double *want = malloc(300 * 257 * sizeof *want);
            for (int64_t i = 0; i < 300 * 257; i++)
                want[i] = av[broadcast_index(2, big, i, 2, a->shape)] *
                          bv[broadcast_index(2, big, i, 2, b->shape)];
            for (int64_t i = 0; i < 300 * 257; i++)
                want[i] = as_dtype((enum weft_dtype)dt, want[i]);
            expect_values(weft_mul(a, b), (enum weft_dtype)dt, want, 300 * 257);
            free(av);
            free(bv);
            free(want);
        }
    }
    weft_scope_pop();
}

/* ---- promotion ---------------------------------------------------------------------------- */

static weft_tensor *vec(enum weft_dtype dt, double a, double b, double c)
{
    double v[] = {a, b, c};
    return tu_tensor(1, S3, v, dt);
}

Test(elementwise, int32_plus_float32_is_float32)
{
    weft_scope_push();
    double want[] = {1.5, 3.5, 5.5};
    expect_values(weft_add(vec(WEFT_I32, 1, 2, 3), vec(WEFT_F32, 0.5, 1.5, 2.5)), WEFT_F32, want, 3);
    weft_scope_pop();
}

Test(elementwise, uint8_plus_int8_is_int16)
{
    weft_scope_push();
    double want[] = {300, -100, 127};
    expect_values(weft_add(vec(WEFT_U8, 200, 0, 255), vec(WEFT_I8, 100, -100, -128)), WEFT_I16,
                  want, 3);
    weft_scope_pop();
}

Test(elementwise, int_tensor_plus_a_fractional_scalar_is_float32_and_plus_a_whole_one_stays_int)
{
    weft_scope_push();
    double frac[] = {3.5, 4.5, 5.5}, whole[] = {3, 4, 5};
    expect_values(weft_add_scalar(vec(WEFT_I32, 1, 2, 3), 2.5), WEFT_F32, frac, 3);
    expect_values(weft_add_scalar(vec(WEFT_I32, 1, 2, 3), 2), WEFT_I32, whole, 3);
    expect_values(weft_add_scalar(vec(WEFT_I64, 1, 2, 3), 2.0), WEFT_I64, whole, 3);
    weft_scope_pop();
}

Test(elementwise, bool_plus_bool_is_bool_or_and_bool_times_bool_is_and)
{
    weft_scope_push();
    double sum[] = {1, 1, 0}, prod[] = {1, 0, 0};
    expect_values(weft_add(vec(WEFT_BOOL, 1, 1, 0), vec(WEFT_BOOL, 1, 0, 0)), WEFT_BOOL, sum, 3);
    expect_values(weft_mul(vec(WEFT_BOOL, 1, 1, 0), vec(WEFT_BOOL, 1, 0, 0)), WEFT_BOOL, prod, 3);
    weft_scope_pop();
}

Test(elementwise, bool_tensor_plus_an_integer_scalar_is_int64)
{
    weft_scope_push();
    double want[] = {2, 1, 2};
    expect_values(weft_add_scalar(vec(WEFT_BOOL, 1, 0, 1), 1), WEFT_I64, want, 3);
    weft_scope_pop();
}

Test(elementwise, comparisons_and_logical_ops_give_bool)
{
    weft_scope_push();
    weft_tensor *a = vec(WEFT_F32, 1, 2, 3), *b = vec(WEFT_I64, 3, 2, 1);
    double lt[] = {1, 0, 0}, eq[] = {0, 1, 0}, ge2[] = {0, 1, 1}, both[] = {1, 1, 1};
    expect_values(weft_lt(a, b), WEFT_BOOL, lt, 3);
    expect_values(weft_eq(a, b), WEFT_BOOL, eq, 3);
    expect_values(weft_ge_scalar(a, 2), WEFT_BOOL, ge2, 3);
    expect_values(weft_lt_scalar(vec(WEFT_I32, 2, 3, 4), 2.5), WEFT_BOOL, lt, 3);
    expect_values(weft_logical_and(a, b), WEFT_BOOL, both, 3);
    weft_scope_pop();
}

Test(elementwise, a_zero_dim_tensor_does_not_promote_a_dimensioned_one_of_its_category)
{
    weft_scope_push();
    weft_tensor *d = weft_scalar_tensor(0.25, WEFT_F64, WEFT_CPU);
    double want[] = {1.25, 2.25, 3.25};
    expect_values(weft_add(vec(WEFT_F32, 1, 2, 3), d), WEFT_F32, want, 3);
    /* but a higher category keeps its own type */
    expect_values(weft_add(vec(WEFT_I32, 1, 2, 3), d), WEFT_F64, want, 3);
    weft_scope_pop();
}

Test(elementwise, float16_plus_bfloat16_is_float32)
{
    weft_scope_push();
    double want[] = {1.5, 3, 4.5};
    expect_values(weft_add(vec(WEFT_F16, 1, 2, 3), vec(WEFT_BF16, 0.5, 1, 1.5)), WEFT_F32, want, 3);
    weft_scope_pop();
}

Test(elementwise, div_is_true_division_and_gives_float32_for_integers)
{
    weft_scope_push();
    double want[] = {0.5, 1, 1.5}, inv[] = {2, 1, 2.0 / 3};
    expect_values(weft_div(vec(WEFT_I64, 1, 2, 3), vec(WEFT_I32, 2, 2, 2)), WEFT_F32, want, 3);
    expect_values(weft_div_scalar(vec(WEFT_I64, 1, 2, 3), 2), WEFT_F32, want, 3);
    expect_values(weft_rdiv_scalar(vec(WEFT_I64, 1, 2, 3), 2), WEFT_F32, inv, 3);
    weft_scope_pop();
}

Test(elementwise, floating_functions_of_integers_are_float32)
{
    weft_scope_push();
    double want[] = {1, exp(1), exp(2)};
    expect_values(weft_exp(vec(WEFT_I64, 0, 1, 2)), WEFT_F32, want, 3);
    double s[] = {0.5, r_sigmoid(1), 0.5};
    expect_values(weft_sigmoid(vec(WEFT_BOOL, 0, 1, 0)), WEFT_F32, s, 3);
    weft_scope_pop();
}

Test(elementwise, rounding_integers_is_an_identity_copy)
{
    weft_scope_push();
    weft_tensor *t = vec(WEFT_I32, -2, 0, 7);
    double want[] = {-2, 0, 7};
    weft_tensor *f = weft_floor(t);
    expect_values(f, WEFT_I32, want, 3);
    cr_assert_neq(f, t);
    expect_values(weft_round(t), WEFT_I32, want, 3);
    expect_values(weft_trunc_(t), WEFT_I32, want, 3);
    weft_scope_pop();
}

Test(elementwise, sign_abs_and_relu_keep_integer_dtypes)
{
    weft_scope_push();
    weft_tensor *t = vec(WEFT_I16, -5, 0, 9);
    double sign[] = {-1, 0, 1}, abs_[] = {5, 0, 9}, relu[] = {0, 0, 9};
    expect_values(weft_sign(t), WEFT_I16, sign, 3);
    expect_values(weft_abs(t), WEFT_I16, abs_, 3);
    expect_values(weft_relu(t), WEFT_I16, relu, 3);
    weft_scope_pop();
}

/* ---- values at the edges ----------------------------------------------------------------- */

Test(elementwise, maximum_and_minimum_propagate_nan_from_either_side)
{
    weft_scope_push();
    weft_tensor *a = vec(WEFT_F32, NAN, 1, 2), *b = vec(WEFT_F32, 1, NAN, 3);
    double mx[] = {NAN, NAN, 3}, mn[] = {NAN, NAN, 2};
    expect_values(weft_maximum(a, b), WEFT_F32, mx, 3);
    expect_values(weft_minimum(a, b), WEFT_F32, mn, 3);
    expect_values(weft_maximum_scalar(vec(WEFT_F64, 1, 5, NAN), NAN), WEFT_F64,
                  (double[]){NAN, NAN, NAN}, 3);
    weft_scope_pop();
}

Test(elementwise, round_is_half_to_even)
{
    weft_scope_push();
    double v[] = {0.5, 1.5, 2.5, -0.5, -1.5, 2.4}, want[] = {0, 2, 2, -0.0, -2, 2};
    int64_t shape[] = {6};
    expect_values(weft_round(tu_tensor(1, shape, v, WEFT_F32)), WEFT_F32, want, 6);
    weft_scope_pop();
}

Test(elementwise, integer_arithmetic_wraps_around)
{
    weft_scope_push();
    double sum[] = {-56, -128, 0}, neg[] = {-100, -128, 1}, abs_[] = {100, -128, 1};
    weft_tensor *t = vec(WEFT_I8, 100, -128, -1);
    expect_values(weft_add(vec(WEFT_I8, 100, 127, 1), vec(WEFT_I8, 100, 1, -1)), WEFT_I8, sum, 3);
    expect_values(weft_neg(t), WEFT_I8, neg, 3);
    expect_values(weft_abs(t), WEFT_I8, abs_, 3);
    double u[] = {255, 0, 254};
    expect_values(weft_sub_scalar(vec(WEFT_U8, 0, 1, 255), 1), WEFT_U8, u, 3);
    weft_scope_pop();
}

Test(elementwise, integer_pow_is_exact_and_negative_tensor_exponents_follow_torch)
{
    weft_scope_push();
    double want[] = {1024, -8, 1};
    expect_values(weft_pow(vec(WEFT_I32, 2, -2, 7), vec(WEFT_I32, 10, 3, 0)), WEFT_I32, want, 3);
    double neg[] = {0, 1, -1};
    expect_values(weft_pow(vec(WEFT_I64, 2, 1, -1), vec(WEFT_I64, -1, -5, -3)), WEFT_I64, neg, 3);
    double sq[] = {4, 9, 16};
    expect_values(weft_pow_scalar(vec(WEFT_I64, 2, 3, 4), 2), WEFT_I64, sq, 3);
    double half[] = {sqrt(2), sqrt(3), 2};
    expect_values(weft_pow_scalar(vec(WEFT_I64, 2, 3, 4), 0.5), WEFT_F32, half, 3);
    weft_scope_pop();
}

Test(elementwise, rsub_and_rdiv_put_the_scalar_on_the_left)
{
    weft_scope_push();
    double sub[] = {1, 0, -1}, div[] = {1, 0.5, 0.25};
    expect_values(weft_rsub_scalar(vec(WEFT_I64, 1, 2, 3), 2), WEFT_I64, sub, 3);
    expect_values(weft_rdiv_scalar(vec(WEFT_F32, 1, 2, 4), 1), WEFT_F32, div, 3);
    weft_tensor *big = weft_expand(vec(WEFT_F64, 1, 2, 4), 2, S23);
    double d2[] = {1, 0.5, 0.25, 1, 0.5, 0.25};
    expect_values(weft_rdiv_scalar(big, 1), WEFT_F64, d2, 6);
    weft_scope_pop();
}

/* rsub's float path computes (-t) + s: the same bits as s - t, signed zeros, infinities
 * and NaN included, in float32 and float64, on contiguous and strided t. */
Test(elementwise, rsub_scalar_gives_the_bits_of_s_minus_t)
{
    const double vals[] = {0.0, -0.0, 1.0, -1.5, 1e-30, 3.4e38, INFINITY, -INFINITY, NAN, 0.1};
    const double scalars[] = {0.0, -0.0, 1.0, -2.5, INFINITY, NAN, 0.1};
    const int n = (int)(sizeof vals / sizeof *vals);
    for (int f64 = 0; f64 < 2; f64++)
        for (size_t k = 0; k < sizeof scalars / sizeof *scalars; k++)
            for (int strided = 0; strided < 2; strided++) {
                weft_scope_push();
                enum weft_dtype dt = f64 ? WEFT_F64 : WEFT_F32;
                double spread[2 * (sizeof vals / sizeof *vals)]; /* vals at the odd places */
                for (int i = 0; i < n; i++)
                    spread[2 * i] = 7.0, spread[2 * i + 1] = vals[i];
                weft_tensor *t = strided ? weft_as_strided(tu_tensor(1, (const int64_t[]){2 * n}, spread, dt), 1,
                                                           (const int64_t[]){n}, (const int64_t[]){2}, 1)
                                         : tu_tensor(1, (const int64_t[]){n}, vals, dt);
                weft_tensor *r = weft_rsub_scalar(t, scalars[k]);
                cr_assert_not_null(r, "%s", weft_error_message());
                cr_assert_eq(weft_tensor_dtype(r), dt);
                weft_tensor *rc = weft_contiguous(r);
                weft_tensor *tc = weft_contiguous(t);
                for (int i = 0; i < n; i++) {
                    if (f64) {
                        double want = scalars[k] - ((const double *)weft_tensor_data(tc))[i];
                        double got = ((const double *)weft_tensor_data(rc))[i];
                        cr_expect(memcmp(&want, &got, sizeof want) == 0 || (isnan(want) && isnan(got)),
                                  "f64 %g - %g: %g, want %g", scalars[k], vals[i], got, want);
                    } else {
                        float want = (float)scalars[k] - ((const float *)weft_tensor_data(tc))[i];
                        float got = ((const float *)weft_tensor_data(rc))[i];
                        cr_expect(memcmp(&want, &got, sizeof want) == 0 || (isnan(want) && isnan(got)),
                                  "f32 %g - %g: %g, want %g", scalars[k], vals[i], got, want);
                    }
                }
                weft_scope_pop();
            }
}

Test(elementwise, gelu_is_the_exact_erf_form)
{
    weft_scope_push();
    double x[] = {-3, -1, 0.5}, want[3];
    for (int i = 0; i < 3; i++)
        want[i] = 0.5 * x[i] * (1 + erf(x[i] / sqrt(2.0)));
    expect_values(weft_gelu(vec(WEFT_F64, x[0], x[1], x[2])), WEFT_F64, want, 3);
    weft_scope_pop();
}

/* One unit in the last place of a dt value of magnitude v (float16: 11 bits, subnormals
 * below 2^-14; bfloat16: 8 bits). */
static double ulp16(enum weft_dtype dt, double v)
{
    int e = v == 0 ? -1000 : (int)floor(log2(fabs(v)));
    if (dt == WEFT_F16)
        return ldexp(1, (e < -14 ? -14 : e) - 10);
    return ldexp(1, (e < -126 ? -126 : e) - 7);
}

/* Phi(x) and phi(x) in double, erfc keeping the left tail's digits. */
static double ref_cdf(double x) { return 0.5 * erfc(-x / sqrt(2.0)); }
static double ref_pdf(double x) { return exp(-0.5 * x * x) / sqrt(2 * M_PI); }

/* 16-bit GELU computes Phi by a rule per element (fast_math.h's normal_cdf16: the erf form
 * from -3 up, the erfc tail below), and the contiguous loop computes the tail only for
 * blocks of 16 that need it: an element must come out the same whatever block it sits in
 * and in a strided view (one loop per element), and within an ulp of the exact value. The
 * inputs: blocks of 16 from [-3, 1) alternating with blocks where one lane is below -3
 * (the others as before), a block at -3 and its neighbours, and the far tail to -12. */
Test(elementwise, sixteen_bit_gelu_and_its_gradient_are_within_an_ulp_in_every_layout)
{
    enum { N = 1024 };
    const enum weft_dtype dts[2] = {WEFT_BF16, WEFT_F16};
    uint64_t st = 3;
    double v[N], g[N], pair[2 * N];
    tu_random_values(v, N, -3, 1, &st);
    tu_random_values(g, N, 0.5, 2, &st);
    for (int b = 1; b < N / 16; b += 2)
        v[16 * b + b % 16] = -3.25 - (b % 9); /* one lane of every odd block */
    for (int k = 0; k < 16; k++) {
        v[16 * 10 + k] = -3 + (k - 8) * 0.0078125; /* around -3 (exact in both dtypes) */
        v[16 * 12 + k] = -4 - 0.5 * k;            /* a whole block in the tail */
    }
    for (int i = 0; i < N; i++) {
        pair[2 * i] = v[i];
        pair[2 * i + 1] = 7; /* the strided view skips these */
    }
    weft_scope_push();
    for (int d = 0; d < 2; d++) {
        enum weft_dtype dt = dts[d];
        const int64_t shape[1] = {N}, shape2[2] = {N, 2};
        weft_tensor *x = tu_tensor(1, shape, v, dt), *gt = tu_tensor(1, shape, g, dt);
        weft_tensor *xs = weft_select(tu_tensor(2, shape2, pair, dt), 1, 0);
        cr_assert_eq(xs->stride[0], 2);
        weft_tensor *got[2][2] = {{weft_gelu(x), weft_gelu(xs)},
                                  {weft_gelu_backward(gt, x, 0), weft_gelu_backward(gt, xs, 0)}};
        double xin[N], gin[N], out[2][2][N];
        tu_read(x, xin);
        tu_read(gt, gin);
        for (int f = 0; f < 2; f++)
            for (int l = 0; l < 2; l++) {
                cr_assert_not_null(got[f][l], "%s", weft_error_message());
                cr_assert_eq(got[f][l]->dtype, dt);
                tu_read(got[f][l], out[f][l]);
            }
        int exact = 0;
        for (int i = 0; i < N; i++) {
            double a = xin[i];
            double want[2] = {a * ref_cdf(a), gin[i] * (ref_cdf(a) + a * ref_pdf(a))};
            for (int f = 0; f < 2; f++) {
                cr_assert(memcmp(&out[f][0][i], &out[f][1][i], sizeof(double)) == 0,
                          "%s %s(%.9g): contiguous %.9g, strided %.9g", weft_dtype_name(dt),
                          f ? "gelu_backward" : "gelu", a, out[f][0][i], out[f][1][i]);
                /* the gradient's Phi + x phi cancels near -0.75: float's absolute error */
                double tol = ulp16(dt, want[f]) + (f ? 1e-6 * gin[i] : 0);
                cr_assert(fabs(out[f][0][i] - want[f]) <= tol, "%s %s(%.9g) = %.9g, want %.9g",
                          weft_dtype_name(dt), f ? "gelu_backward" : "gelu", a, out[f][0][i],
                          want[f]);
                exact += f == 0 && fabs(out[f][0][i] - want[f]) <= 0.5 * ulp16(dt, want[f]);
            }
        }
        /* correctly rounded but where the float result sits at a rounding boundary */
        cr_expect_geq(exact, N * 99 / 100, "%s: %d of %d gelu results correctly rounded",
                      weft_dtype_name(dt), exact, N);
    }
    weft_scope_pop();
}

Test(elementwise, zero_size_and_zero_dim_inputs_work)
{
    weft_scope_push();
    int64_t empty[] = {0, 3};
    weft_tensor *e = weft_zeros(2, empty, WEFT_F32, WEFT_CPU);
    weft_tensor *r = weft_add(e, vec(WEFT_F32, 1, 2, 3));
    tu_assert_shape(r, 2, empty);
    tu_assert_shape(weft_exp(e), 2, empty);
    tu_assert_shape(weft_eq_scalar(e, 1), 2, empty);
    weft_tensor *z = weft_scalar_tensor(2, WEFT_F32, WEFT_CPU);
    double four = 4;
    expect_values(weft_mul(z, z), WEFT_F32, &four, 1);
    tu_assert_shape(weft_mul(z, z), 0, NULL);
    weft_scope_pop();
}

/* ---- in-place ---------------------------------------------------------------------------- */

Test(elementwise, in_place_ops_return_their_argument_and_bump_the_version_once)
{
    weft_scope_push();
    weft_tensor *t = vec(WEFT_F32, 1, 2, 3);
    uint64_t v0 = weft_tensor_version(t);
    cr_assert_eq(weft_add_(t, vec(WEFT_F32, 1, 1, 1)), t);
    cr_assert_eq(weft_tensor_version(t), v0 + 1);
    cr_assert_eq(weft_mul_scalar_(t, 2), t);
    cr_assert_eq(weft_tensor_version(t), v0 + 2);
    cr_assert_eq(weft_exp_(t), t);
    cr_assert_eq(weft_tensor_version(t), v0 + 3);
    cr_assert_eq(weft_clamp_(t, 0, 100), t);
    cr_assert_eq(weft_tensor_version(t), v0 + 4);
    cr_assert_eq(weft_masked_fill_(t, vec(WEFT_BOOL, 1, 0, 0), 0), t);
    cr_assert_eq(weft_tensor_version(t), v0 + 5);
    double want[] = {0, 100, 100};
    expect_values(t, WEFT_F32, want, 3);
    weft_scope_pop();
}

Test(elementwise, in_place_ops_broadcast_the_other_operand_and_convert_it)
{
    weft_scope_push();
    double v[] = {1, 2, 3, 4, 5, 6}, want[] = {11, 22, 33, 14, 25, 36};
    weft_tensor *t = tu_tensor(2, S23, v, WEFT_F64);
    expect_values(weft_add_(t, vec(WEFT_I32, 10, 20, 30)), WEFT_F64, want, 6);
    /* float16 += float32: computed in float32, written back as float16 */
    weft_tensor *h = vec(WEFT_F16, 1, 2, 3);
    double hw[] = {1.5, 2.5, 3.5};
    expect_values(weft_add_(h, vec(WEFT_F32, 0.5, 0.5, 0.5)), WEFT_F16, hw, 3);
    weft_scope_pop();
}

Test(elementwise, in_place_on_a_strided_view_writes_through_to_its_base)
{
    weft_scope_push();
    double v[] = {1, 2, 3, 4, 5, 6};
    weft_tensor *base = tu_tensor(2, S23, v, WEFT_F32);
    weft_tensor *col = weft_select(base, 1, 1); /* [2, 5], stride 3 */
    weft_mul_scalar_(col, 10);
    double want[] = {1, 20, 3, 4, 50, 6};
    expect_values(base, WEFT_F32, want, 6);
    weft_scope_pop();
}

Test(elementwise, in_place_comparisons_and_logical_not_write_zeros_and_ones_in_the_dtype)
{
    weft_scope_push();
    weft_tensor *t = vec(WEFT_F32, 1, 2, 3);
    double want[] = {0, 1, 0}, nots[] = {1, 0, 1};
    expect_values(weft_eq_scalar_(t, 2), WEFT_F32, want, 3);
    expect_values(weft_logical_not_(t), WEFT_F32, nots, 3);
    weft_scope_pop();
}

/* ---- where, clamp, masked_fill -------------------------------------------------------------- */

Test(elementwise, where_broadcasts_all_three_and_promotes_the_values)
{
    weft_scope_push();
    int64_t c_shape[] = {2, 1};
    double c[] = {1, 0}, bv[] = {-1, -2, -3, -4, -5, -6};
    weft_tensor *cond = tu_tensor(2, c_shape, c, WEFT_BOOL);
    weft_tensor *a = vec(WEFT_I32, 1, 2, 3);
    weft_tensor *b = tu_tensor(2, S23, bv, WEFT_F32);
    double want[] = {1, 2, 3, -4, -5, -6};
    expect_values(weft_where(cond, a, b), WEFT_F32, want, 6);
    double ws[] = {1, 2, 3, 0.5, 0.5, 0.5};
    expect_values(weft_where_scalar(cond, a, 0.5), WEFT_F32, ws, 6);
    double wi[] = {1, 2, 3, 7, 7, 7};
    expect_values(weft_where_scalar(cond, a, 7), WEFT_I32, wi, 6);
    weft_scope_pop();
}

Test(elementwise, where_selects_on_every_dtype_and_layout)
{
    uint64_t st = 5;
    weft_scope_push();
    int64_t shape[] = {4, 5};
    for (int dt = 0; dt < WEFT_DTYPE_COUNT; dt++)
        for (int layout = 0; layout < LAYOUT_COUNT; layout++) {
            weft_tensor *cond = make_input((enum layout)layout, 2, shape, WEFT_BOOL, 0, 2, &st);
            weft_tensor *a = make_input(TRANSPOSED, 2, shape, (enum weft_dtype)dt, -9, 9, &st);
            weft_tensor *b = make_input((enum layout)layout, 2, shape, (enum weft_dtype)dt, -9, 9, &st);
            double *cv = read_all(cond), *av = read_all(a), *bv = read_all(b), want[20], fill[20];
            for (int i = 0; i < 20; i++) {
                want[i] = cv[i] != 0 ? av[i] : bv[i];
                fill[i] = cv[i] != 0 ? as_dtype((enum weft_dtype)dt, 1) : av[i];
            }
            expect_values(weft_where(cond, a, b), (enum weft_dtype)dt, want, 20);
            expect_values(weft_masked_fill(a, cond, 1), (enum weft_dtype)dt, fill, 20);
            expect_values(weft_masked_fill_(a, cond, 1), (enum weft_dtype)dt, fill, 20); /* a is a transposed view */
            free(cv);
            free(av);
            free(bv);
        }
    weft_scope_pop();
}

Test(elementwise, clamp_takes_nan_as_no_bound_and_propagates_nan_input)
{
    weft_scope_push();
    weft_tensor *t = vec(WEFT_F32, -5, NAN, 5);
    double lo[] = {-1, NAN, 5}, hi[] = {-5, NAN, 1}, both[] = {-1, NAN, 1};
    expect_values(weft_clamp(t, -1, NAN), WEFT_F32, lo, 3);
    expect_values(weft_clamp(t, NAN, 1), WEFT_F32, hi, 3);
    expect_values(weft_clamp(t, -1, 1), WEFT_F32, both, 3);
    double crossed[] = {0, NAN, 0}; /* min > max: everything is max, as torch */
    expect_values(weft_clamp(t, 2, 0), WEFT_F32, crossed, 3);
    weft_scope_pop();
}

Test(elementwise, clamp_of_integers_stays_integral_unless_a_bound_is_fractional)
{
    weft_scope_push();
    weft_tensor *t = vec(WEFT_I64, -5, 0, 5);
    double ints[] = {-2, 0, 2}, frac[] = {-2.5, 0, 5};
    expect_values(weft_clamp(t, -2, 2), WEFT_I64, ints, 3);
    expect_values(weft_clamp(t, -2.5, NAN), WEFT_F32, frac, 3);
    expect_values(weft_clamp_(t, -2, 2), WEFT_I64, ints, 3);
    weft_scope_pop();
}

Test(elementwise, clamp_works_on_every_numeric_dtype)
{
    uint64_t st = 11;
    weft_scope_push();
    int64_t shape[] = {3, 4};
    for (int dt = WEFT_U8; dt < WEFT_DTYPE_COUNT; dt++) {
        weft_tensor *t = make_input(TRANSPOSED, 2, shape, (enum weft_dtype)dt, -20, 20, &st);
        double *v = read_all(t), want[12];
        for (int i = 0; i < 12; i++)
            want[i] = v[i] < 3 ? 3 : v[i] > 9 ? 9 : v[i];
        expect_values(weft_clamp(t, 3, 9), (enum weft_dtype)dt, want, 12);
        expect_values(weft_clamp_(t, 3, 9), (enum weft_dtype)dt, want, 12); /* t is transposed */
        free(v);
    }
    weft_scope_pop();
}

Test(elementwise, masked_fill_casts_the_value_to_the_tensor_dtype_and_broadcasts_the_mask)
{
    weft_scope_push();
    double v[] = {1, 2, 3, 4, 5, 6};
    weft_tensor *t = tu_tensor(2, S23, v, WEFT_I32);
    weft_tensor *mask = vec(WEFT_BOOL, 0, 1, 0);
    double want[] = {1, 9, 3, 4, 9, 6};
    expect_values(weft_masked_fill(t, mask, 9.75), WEFT_I32, want, 6);
    expect_values(t, WEFT_I32, v, 6); /* untouched */
    expect_values(weft_masked_fill_(t, mask, 9), WEFT_I32, want, 6);
    /* out of place, a mask larger than the tensor broadcasts both */
    weft_tensor *big_mask = weft_expand(mask, 2, S23);
    double r[] = {0, -1, 0, 0, -1, 0};
    expect_values(weft_masked_fill(vec(WEFT_F32, 0, 0, 0), big_mask, -1), WEFT_F32, r, 6);
    weft_scope_pop();
}

/* ---- errors ------------------------------------------------------------------------------- */

Test(elementwise, null_inputs_return_null_without_an_error)
{
    weft_scope_push();
    weft_tensor *t = vec(WEFT_F32, 1, 2, 3);
    cr_assert_null(weft_exp(NULL));
    cr_assert_null(weft_add(t, NULL));
    cr_assert_null(weft_add(NULL, t));
    cr_assert_null(weft_add_scalar_(NULL, 1));
    cr_assert_null(weft_where(NULL, t, t));
    cr_assert_null(weft_clamp(NULL, 0, 1));
    cr_assert_null(weft_masked_fill_(t, NULL, 0));
    cr_assert_null(weft_rsub_scalar(NULL, 1));
    tu_assert_no_error();
    weft_scope_pop();
}

Test(elementwise, negating_a_bool_tensor_is_refused)
{
    weft_scope_push();
    cr_assert_null(weft_neg(vec(WEFT_BOOL, 1, 0, 1)));
    tu_assert_error(WEFT_ERR_RUNTIME,
                    "Negation, the `-` operator, on a bool tensor is not supported. If you are "
                    "trying to invert a mask, use the `~` or `logical_not()` operator instead.");
    weft_scope_pop();
}

Test(elementwise, subtracting_bool_tensors_is_refused)
{
    weft_scope_push();
    weft_tensor *b = vec(WEFT_BOOL, 1, 0, 1);
    cr_assert_null(weft_sub(b, b));
    tu_assert_error(WEFT_ERR_RUNTIME,
                    "Subtraction, the `-` operator, with two bool tensors is not supported. Use "
                    "the `^` or `logical_xor()` operator instead.");
    cr_assert_null(weft_sub(vec(WEFT_F32, 1, 2, 3), b));
    tu_assert_error(WEFT_ERR_RUNTIME,
                    "Subtraction, the `-` operator, with a bool tensor is not supported. If you "
                    "are trying to invert a mask, use the `~` or `logical_not()` operator instead.");
    cr_assert_null(weft_rsub_scalar(b, 1));
    tu_assert_error(WEFT_ERR_RUNTIME, "with a bool tensor is not supported");
    weft_scope_pop();
}

Test(elementwise, relu_of_bool_and_abs_of_bool_are_refused)
{
    weft_scope_push();
    cr_assert_null(weft_relu(vec(WEFT_BOOL, 1, 0, 1)));
    tu_assert_error(WEFT_ERR_RUNTIME, "Boolean inputs not supported for relu");
    cr_assert_null(weft_abs(vec(WEFT_BOOL, 1, 0, 1)));
    tu_assert_error(WEFT_ERR_NOT_IMPLEMENTED, "\"abs\" not implemented for 'Bool' on cpu");
    cr_assert_null(weft_floor(vec(WEFT_BOOL, 1, 0, 1)));
    tu_assert_error(WEFT_ERR_NOT_IMPLEMENTED, "\"floor\" not implemented for 'Bool'");
    weft_scope_pop();
}

Test(elementwise, shapes_that_do_not_broadcast_are_refused)
{
    weft_scope_push();
    int64_t s4[] = {4};
    double v[6] = {0};
    cr_assert_null(weft_add(tu_tensor(2, S23, v, WEFT_F32), tu_tensor(1, s4, v, WEFT_F32)));
    tu_assert_error(WEFT_ERR_RUNTIME,
                    "The size of tensor a (3) must match the size of tensor b (4) at "
                    "non-singleton dimension 1");
    weft_scope_pop();
}

Test(elementwise, in_place_results_must_keep_the_shape)
{
    weft_scope_push();
    double v[6] = {0};
    cr_assert_null(weft_add_(vec(WEFT_F32, 1, 2, 3), tu_tensor(2, S23, v, WEFT_F32)));
    tu_assert_error(WEFT_ERR_RUNTIME, "output with shape [3] doesn't match the broadcast shape [2, 3]");
    weft_scope_pop();
}

Test(elementwise, in_place_results_must_fit_the_dtype)
{
    weft_scope_push();
    weft_tensor *l = vec(WEFT_I64, 1, 2, 3);
    cr_assert_null(weft_add_(l, vec(WEFT_F32, 1, 2, 3)));
    tu_assert_error(WEFT_ERR_RUNTIME, "result type Float can't be cast to the desired output type Long");
    cr_assert_null(weft_mul_scalar_(l, 2.5));
    tu_assert_error(WEFT_ERR_RUNTIME, "result type Float can't be cast to the desired output type Long");
    cr_assert_null(weft_div_(l, l));
    tu_assert_error(WEFT_ERR_RUNTIME, "result type Float can't be cast to the desired output type Long");
    cr_assert_null(weft_exp_(l));
    tu_assert_error(WEFT_ERR_RUNTIME, "result type Float can't be cast to the desired output type Long");
    cr_assert_null(weft_add_(vec(WEFT_BOOL, 1, 0, 1), vec(WEFT_I32, 1, 2, 3)));
    tu_assert_error(WEFT_ERR_RUNTIME, "result type Int can't be cast to the desired output type Bool");
    cr_assert_null(weft_clamp_(l, 0.5, NAN));
    tu_assert_error(WEFT_ERR_RUNTIME, "result type Float can't be cast to the desired output type Long");
    double want[] = {1, 2, 3};
    expect_values(l, WEFT_I64, want, 3); /* nothing was written */
    weft_scope_pop();
}

Test(elementwise, in_place_ops_refuse_overlapping_memory)
{
    weft_scope_push();
    weft_tensor *e = weft_expand(weft_scalar_tensor(1, WEFT_F32, WEFT_CPU), 1, S3);
    cr_assert_null(weft_add_scalar_(e, 1));
    tu_assert_error(WEFT_ERR_RUNTIME, "more than one element of the written-to tensor refers to a "
                                      "single memory location");
    double v[] = {1, 2, 3, 4};
    int64_t sq[] = {2, 2};
    weft_tensor *m = tu_tensor(2, sq, v, WEFT_F32);
    cr_assert_null(weft_add_(m, weft_t(m)));
    tu_assert_error(WEFT_ERR_RUNTIME, "some elements of the input tensor and the written-to tensor "
                                      "refer to a single memory location");
    double twice[] = {2, 4, 6, 8};
    expect_values(weft_add_(m, m), WEFT_F32, twice, 4); /* the tensor itself is fine */
    weft_scope_pop();
}

Test(elementwise, where_requires_a_bool_condition)
{
    weft_scope_push();
    weft_tensor *a = vec(WEFT_F32, 1, 2, 3);
    cr_assert_null(weft_where(a, a, a));
    tu_assert_error(WEFT_ERR_RUNTIME,
                    "where expected condition to be a boolean tensor, but got a tensor with dtype Float");
    weft_scope_pop();
}

Test(elementwise, clamp_needs_a_bound)
{
    weft_scope_push();
    cr_assert_null(weft_clamp(vec(WEFT_F32, 1, 2, 3), NAN, NAN));
    tu_assert_error(WEFT_ERR_RUNTIME, "torch.clamp: At least one of 'min' or 'max' must not be None");
    weft_scope_pop();
}

Test(elementwise, masked_fill_requires_a_bool_mask)
{
    weft_scope_push();
    weft_tensor *a = vec(WEFT_F32, 1, 2, 3);
    cr_assert_null(weft_masked_fill(a, a, 0));
    tu_assert_error(WEFT_ERR_RUNTIME,
                    "masked_fill_ only supports boolean masks, but got mask with dtype float");
    /* uint8 masks are deprecated in PyTorch 1.13 but still taken */
    cr_assert_eq(weft_masked_fill_(a, vec(WEFT_U8, 1, 0, 1), 0), a);
    double want[] = {0, 2, 0};
    tu_assert_close(a, want, 3, 0, 0);
    weft_scope_pop();
}

Test(elementwise, integers_to_negative_integer_scalar_powers_are_refused)
{
    weft_scope_push();
    cr_assert_null(weft_pow_scalar(vec(WEFT_I32, 1, 2, 3), -1));
    tu_assert_error(WEFT_ERR_RUNTIME, "Integers to negative integer powers are not allowed.");
    double want[] = {1, 0.5, 0.25};
    expect_values(weft_pow_scalar(vec(WEFT_F32, 1, 2, 4), -1), WEFT_F32, want, 3);
    weft_scope_pop();
}

Test(elementwise, results_outside_a_scope_are_owned_by_the_caller)
{
    /* No scope: every result is ours to release (ASan checks for leaks and double frees). */
    weft_tensor *a = weft_full(1, S3, 2, WEFT_I32, WEFT_CPU);
    weft_tensor *f = weft_full(1, S3, 0.5, WEFT_F32, WEFT_CPU);
    weft_tensor *gt = weft_gt_scalar(a, 1);
    weft_tensor *r[] = {weft_add(a, a), weft_add(a, f), weft_exp(a), weft_div_scalar(a, 2),
                        weft_rsub_scalar(a, 1), weft_clamp(a, 0.5, NAN), weft_where_scalar(gt, f, 3),
                        weft_masked_fill(a, gt, 1)};
    for (size_t i = 0; i < sizeof r / sizeof *r; i++) {
        cr_assert_not_null(r[i], "%zu: %s", i, weft_error_message());
        cr_assert_eq(r[i]->refcount, 1, "result %zu has %u references", i, r[i]->refcount);
    }
    cr_assert_eq(a->refcount, 1);
    for (size_t i = 0; i < sizeof r / sizeof *r; i++)
        weft_tensor_release(r[i]);
    weft_tensor *b = weft_full(1, S3, 1, WEFT_BOOL, WEFT_CPU);
    cr_assert_null(weft_sub(a, b));
    tu_assert_error(WEFT_ERR_RUNTIME, "with a bool tensor");
    weft_tensor_release(b);
    weft_tensor_release(gt);
    weft_tensor_release(a);
    weft_tensor_release(f);
}
