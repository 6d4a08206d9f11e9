/* testkit/conformance.c: the conformance suite (weft/conformance.h).
 *
 * A driver per op family builds inputs on the cpu, moves them to the target device in
 * one of four layouts, calls the public front end there, and compares the result with
 * the same front end on the cpu; when the target is the cpu itself the driver's plain
 * double reference is the oracle instead. Every case runs inside a scope, so the
 * tensors it makes are released when it ends. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "weft.h"
#include "weft/backend.h"
#include "weft/conformance.h"
#include "weft/kernel.h"

enum variant { V_CONTIG, V_TRANSPOSED, V_BROADCAST, V_ZERO, V_COUNT };

struct ctx {
    weft_device dev;
    bool on_cpu;    /* the oracle is the double reference */
    uint64_t rng;
    enum weft_dtype dtype;
    struct weft_conformance_result *res;
    FILE *verbose;
};

typedef double (*ref1_fn)(double);
typedef double (*ref2_fn)(double, double);
typedef weft_tensor *(*op1_fn)(weft_tensor *);
typedef weft_tensor *(*op2_fn)(weft_tensor *, weft_tensor *);

struct entry {
    int op;
    int (*drive)(struct ctx *cx, const struct entry *e, enum variant v);
    op1_fn f1, f1_;
    op2_fn f2, f2_;
    ref1_fn r1;
    ref2_fn r2;
};

static uint64_t rnd(struct ctx *cx)
{
    cx->rng = cx->rng * 6364136223846793005ull + 1442695040888963407ull;
    return cx->rng >> 33;
}

static int64_t rnd_int(struct ctx *cx, int64_t lo, int64_t hi) /* [lo, hi] */
{
    return lo + (int64_t)(rnd(cx) % (uint64_t)(hi - lo + 1));
}

/* Values every dtype holds exactly enough: small integers for integral and bool types,
 * [-2, 2] for floating ones (nonneg when the op needs it). */
static double rnd_value(struct ctx *cx, enum weft_dtype dt, bool nonneg)
{
    if (dt == WEFT_BOOL)
        return (double)(rnd(cx) & 1);
    if (!weft_dtype_is_floating(dt))
        return (double)rnd_int(cx, nonneg || dt == WEFT_U8 ? 0 : -4, 4);
    double u = (double)rnd(cx) / (double)(1ull << 31);
    return nonneg ? 0.25 + 1.75 * u : 4.0 * u - 2.0;
}

/* A [shape] tensor of random values of cx->dtype on the target device. */
static weft_tensor *make_input(struct ctx *cx, int ndim, const int64_t *shape, bool nonneg)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    double *buf = malloc(sizeof(double) * (size_t)(n ? n : 1));
    if (!buf)
        return NULL;
    for (int64_t i = 0; i < n; i++)
        buf[i] = rnd_value(cx, cx->dtype, nonneg);
    weft_tensor *h = weft_from_host(buf, ndim, shape, WEFT_F64, WEFT_CPU);
    free(buf);
    return weft_to(h, cx->dev, cx->dtype, false);
}

/* A [rows, cols] input laid out as the variant says. */
static weft_tensor *make_2d(struct ctx *cx, enum variant v, int64_t rows, int64_t cols,
                            bool nonneg)
{
    int64_t shape[2] = {rows, cols};
    switch (v) {
    case V_TRANSPOSED: {
        int64_t ts[2] = {cols, rows};
        return weft_t(make_input(cx, 2, ts, nonneg));
    }
    case V_BROADCAST: {
        int64_t one[2] = {1, cols};
        return weft_expand(make_input(cx, 2, one, nonneg), 2, shape);
    }
    case V_ZERO:
        shape[0] = 0;
        return make_input(cx, 2, shape, nonneg);
    default:
        return make_input(cx, 2, shape, nonneg);
    }
}

/* t's elements in row-major order as doubles (malloc'd; n gets numel). */
static double *host_f64(weft_tensor *t, int64_t *n)
{
    weft_tensor *h = weft_contiguous(weft_to(t, WEFT_CPU, WEFT_F64, false));
    if (!h)
        return NULL;
    *n = weft_tensor_numel(h);
    double *out = malloc(sizeof(double) * (size_t)(*n ? *n : 1));
    if (!out)
        return NULL;
    if (weft_tensor_read(h, out, sizeof(double) * (size_t)*n) < 0) {
        free(out);
        return NULL;
    }
    return out;
}

static double tolerance(enum weft_dtype dt, int op)
{
    bool accumulates = op == WEFT_OP_MATMUL || op == WEFT_OP_SUM || op == WEFT_OP_MEAN ||
                       op == WEFT_OP_PROD || op == WEFT_OP_SOFTMAX || op == WEFT_OP_LOG_SOFTMAX;
    switch (dt) {
    case WEFT_F64: return 1e-10;
    case WEFT_F32: return accumulates ? 1e-4 : 1e-5;
    case WEFT_F16: return accumulates ? 2e-2 : 2e-3;
    case WEFT_BF16: return accumulates ? 6e-2 : 1.6e-2;
    default: return 0;
    }
}

/* Integral results wrap as the hardware does; bool is nonzero-ness. */
static double wrap(double v, enum weft_dtype dt)
{
    if (dt == WEFT_BOOL)
        return v != 0;
    if (weft_dtype_is_floating(dt) || !isfinite(v))
        return v;
    int64_t i = (int64_t)v;
    switch (dt) {
    case WEFT_U8: return (uint8_t)i;
    case WEFT_I8: return (int8_t)i;
    case WEFT_I16: return (int16_t)i;
    case WEFT_I32: return (int32_t)i;
    default: return (double)i;
    }
}

static void fail(struct ctx *cx, const char *fmt, const char *detail)
{
    struct weft_conformance_result *r = cx->res;
    if (r->status != WEFT_CONFORMANCE_FAILED)
        snprintf(r->message, sizeof r->message, fmt, detail);
    r->status = WEFT_CONFORMANCE_FAILED;
}

/* Compares got with want (n elements each); want is wrapped to got's dtype. */
static void compare(struct ctx *cx, weft_tensor *got_t, const double *want, int64_t nwant)
{
    int64_t n = 0;
    double *got = host_f64(got_t, &n);
    if (!got) {
        fail(cx, "reading the result failed: %s", weft_error_message());
        weft_error_clear();
        return;
    }
    if (n != nwant) {
        fail(cx, "%s", "result has the wrong number of elements");
        free(got);
        return;
    }
    struct weft_conformance_result *r = cx->res;
    for (int64_t i = 0; i < n; i++) {
        double w = wrap(want[i], got_t->dtype), g = got[i];
        if (isnan(w) || isnan(g) || isinf(w) || isinf(g)) {
            bool same = (isnan(w) && isnan(g)) || (w == g);
            if (!same) {
                r->nan_mismatches++;
                fail(cx, "%s", "NaN/Inf mismatch");
            }
            continue;
        }
        double err = fabs(g - w) / fmax(1.0, fabs(w));
        if (err > r->max_error)
            r->max_error = err;
        if (err > r->tolerance)
            fail(cx, "%s", "error above tolerance");
    }
    free(got);
}

/* The oracle for a device result: the double reference on the cpu, else the same
 * front end run on cpu copies of the inputs. */
static void check(struct ctx *cx, weft_tensor *got, const double *ref, int64_t nref,
                  weft_tensor *cpu_result)
{
    if (cx->on_cpu) {
        compare(cx, got, ref, nref);
        return;
    }
    int64_t n = 0;
    double *want = cpu_result ? host_f64(cpu_result, &n) : NULL;
    if (!want) {
        fail(cx, "the cpu oracle failed: %s", weft_error_message());
        weft_error_clear();
        return;
    }
    compare(cx, got, want, n);
    free(want);
}

static weft_tensor *on_cpu(weft_tensor *t)
{
    return weft_to_device(t, WEFT_CPU);
}

/* A front end that refuses a dtype (sub on bool) refuses it everywhere: skip. */
static int refused(struct ctx *cx)
{
    if (cx->res->cases > 0)
        fail(cx, "front end refused a later case: %s", weft_error_message());
    else if (cx->res->status != WEFT_CONFORMANCE_FAILED) {
        cx->res->status = WEFT_CONFORMANCE_SKIPPED;
        snprintf(cx->res->message, sizeof cx->res->message, "front end refuses: %s",
                 weft_error_message());
    }
    weft_error_clear();
    return 1;
}

/* Runs op_ on the middle [rows, cols] of a sentinel-filled [rows+2, cols+2] tensor and
 * checks that the border kept its value. */
static void sentinel_check(struct ctx *cx, const struct entry *e, weft_tensor *x, weft_tensor *y)
{
    const double sentinel = cx->dtype == WEFT_BOOL ? 1 : 3;
    int64_t rows = x->shape[0], cols = x->shape[1];
    int64_t bs[2] = {rows + 2, cols + 2};
    weft_tensor *big = weft_full(2, bs, sentinel, cx->dtype, cx->dev);
    weft_tensor *mid = weft_narrow(weft_narrow(big, 0, 1, rows), 1, 1, cols);
    if (!mid || weft_copy_(mid, x) < 0) {
        weft_error_clear();
        return;
    }
    weft_tensor *r = e->f1_ ? e->f1_(mid) : e->f2_(mid, y);
    if (!r) { /* the result does not fit the dtype in place: nothing to check */
        weft_error_clear();
        return;
    }
    int64_t n = 0;
    double *h = host_f64(big, &n);
    if (!h) {
        weft_error_clear();
        return;
    }
    for (int64_t i = 0; i < bs[0]; i++)
        for (int64_t j = 0; j < bs[1]; j++) {
            bool border = i == 0 || j == 0 || i == bs[0] - 1 || j == bs[1] - 1;
            if (border && h[i * bs[1] + j] != sentinel) {
                cx->res->sentinel_errors++;
                fail(cx, "%s", "wrote outside its view (sentinel changed)");
            }
        }
    free(h);
}

/* ---- drivers ------------------------------------------------------------------------- */

static bool needs_nonneg(int op)
{
    return op == WEFT_OP_LOG || op == WEFT_OP_SQRT || op == WEFT_OP_RSQRT ||
           op == WEFT_OP_LOG1P || op == WEFT_OP_RECIPROCAL || op == WEFT_OP_POW ||
           op == WEFT_OP_DIV;
}

static int drive_unary(struct ctx *cx, const struct entry *e, enum variant v)
{
    int64_t rows = rnd_int(cx, 1, 6), cols = rnd_int(cx, 1, 9);
    weft_tensor *x = make_2d(cx, v, rows, cols, needs_nonneg(e->op));
    if (!x)
        return -1;
    weft_tensor *got = e->f1(x);
    if (!got)
        return refused(cx);
    int64_t n = 0;
    double *xs = host_f64(x, &n);
    if (!xs)
        return -1;
    for (int64_t i = 0; i < n; i++)
        xs[i] = e->r1(xs[i]);
    check(cx, got, xs, n, cx->on_cpu ? NULL : e->f1(on_cpu(x)));
    free(xs);
    if (e->f1_ && v == V_CONTIG)
        sentinel_check(cx, e, x, NULL);
    return 0;
}

static int drive_binary(struct ctx *cx, const struct entry *e, enum variant v)
{
    int64_t rows = rnd_int(cx, 1, 6), cols = rnd_int(cx, 1, 9);
    bool nn = needs_nonneg(e->op);
    weft_tensor *a = make_2d(cx, v, rows, cols, nn);
    weft_tensor *b = make_2d(cx, v == V_BROADCAST ? V_CONTIG : v, rows, cols, nn);
    if (!a || !b)
        return -1;
    weft_tensor *got = e->f2(a, b);
    if (!got)
        return refused(cx);
    int64_t n = 0, m = 0;
    double *as = host_f64(a, &n), *bs = host_f64(b, &m);
    if (!as || !bs) {
        free(as);
        free(bs);
        return -1;
    }
    for (int64_t i = 0; i < n; i++)
        as[i] = e->r2(as[i], bs[i]);
    check(cx, got, as, n, cx->on_cpu ? NULL : e->f2(on_cpu(a), on_cpu(b)));
    free(as);
    free(bs);
    if (e->f2_ && v == V_CONTIG)
        sentinel_check(cx, e, a, b);
    return 0;
}

/* Reductions and softmax over the last dim of a [rows, cols] input. */
static weft_tensor *reduce_last(int op, weft_tensor *x)
{
    int dim = -1;
    weft_tensor *values = NULL, *indices = NULL;
    switch (op) {
    case WEFT_OP_SUM: return weft_sum(x, 1, &dim, false);
    case WEFT_OP_MEAN: return weft_mean(x, 1, &dim, false);
    case WEFT_OP_PROD: return weft_prod(x, 1, &dim, false);
    case WEFT_OP_ALL: return weft_all(x, 1, &dim, false);
    case WEFT_OP_ANY: return weft_any(x, 1, &dim, false);
    case WEFT_OP_ARGMAX: return weft_argmax(x, -1, false);
    case WEFT_OP_ARGMIN: return weft_argmin(x, -1, false);
    case WEFT_OP_SOFTMAX: return weft_softmax(x, -1);
    case WEFT_OP_LOG_SOFTMAX: return weft_log_softmax(x, -1);
    case WEFT_OP_MAX:
    case WEFT_OP_MIN:
        if ((op == WEFT_OP_MAX ? weft_max_dim : weft_min_dim)(x, -1, false, &values,
                                                                 &indices) < 0)
            return NULL;
        return values; /* both outputs are already recorded in the case's scope */
    default: return NULL;
    }
}

static void reduce_ref(int op, const double *x, int64_t rows, int64_t cols, double *out)
{
    for (int64_t i = 0; i < rows; i++) {
        const double *row = x + i * cols;
        double acc = op == WEFT_OP_PROD || op == WEFT_OP_ALL ? 1 : 0, best = row[0];
        int64_t arg = 0;
        double mx = row[0];
        for (int64_t j = 0; j < cols; j++)
            mx = fmax(mx, row[j]);
        double se = 0;
        for (int64_t j = 0; j < cols; j++)
            se += exp(row[j] - mx);
        for (int64_t j = 0; j < cols; j++) {
            double r = row[j];
            switch (op) {
            case WEFT_OP_SUM: case WEFT_OP_MEAN: acc += r; break;
            case WEFT_OP_PROD: acc *= r; break;
            case WEFT_OP_ALL: acc = acc && r != 0; break;
            case WEFT_OP_ANY: acc = acc || r != 0; break;
            case WEFT_OP_MAX: case WEFT_OP_ARGMAX:
                if (r > best) { best = r; arg = j; }
                break;
            case WEFT_OP_MIN: case WEFT_OP_ARGMIN:
                if (r < best) { best = r; arg = j; }
                break;
            case WEFT_OP_SOFTMAX: out[i * cols + j] = exp(r - mx) / se; break;
            case WEFT_OP_LOG_SOFTMAX: out[i * cols + j] = r - mx - log(se); break;
            default: break;
            }
        }
        if (op == WEFT_OP_SOFTMAX || op == WEFT_OP_LOG_SOFTMAX)
            continue;
        out[i] = op == WEFT_OP_MEAN ? acc / (double)cols
                 : op == WEFT_OP_MAX || op == WEFT_OP_MIN ? best
                 : op == WEFT_OP_ARGMAX || op == WEFT_OP_ARGMIN ? (double)arg : acc;
    }
}

static int drive_reduce(struct ctx *cx, const struct entry *e, enum variant v)
{
    int64_t rows = rnd_int(cx, 1, 6), cols = rnd_int(cx, 1, 9);
    weft_tensor *x = make_2d(cx, v, rows, cols, false);
    if (!x)
        return -1;
    weft_tensor *got = reduce_last(e->op, x);
    if (!got)
        return refused(cx);
    int64_t n = 0;
    double *xs = host_f64(x, &n);
    double *out = malloc(sizeof(double) * (size_t)(n + 1));
    if (!xs || !out) {
        free(xs);
        free(out);
        return -1;
    }
    int64_t r = x->shape[0];
    reduce_ref(e->op, xs, r, cols, out);
    bool full = e->op == WEFT_OP_SOFTMAX || e->op == WEFT_OP_LOG_SOFTMAX;
    check(cx, got, out, full ? n : r, cx->on_cpu ? NULL : reduce_last(e->op, on_cpu(x)));
    free(xs);
    free(out);
    return 0;
}

static int drive_matmul(struct ctx *cx, const struct entry *e, enum variant v)
{
    (void)e;
    int64_t m = rnd_int(cx, 1, 6), k = rnd_int(cx, 1, 7), n = rnd_int(cx, 1, 6);
    weft_tensor *a = make_2d(cx, v, m, k, false);
    weft_tensor *b = make_2d(cx, v == V_ZERO ? V_CONTIG : v, k, n, false);
    if (!a || !b)
        return -1;
    weft_tensor *got = weft_matmul(a, b);
    if (!got)
        return refused(cx);
    int64_t na = 0, nb = 0;
    double *as = host_f64(a, &na), *bs = host_f64(b, &nb);
    double *out = malloc(sizeof(double) * (size_t)(m * n + 1));
    if (!as || !bs || !out) {
        free(as), free(bs), free(out);
        return -1;
    }
    int64_t rows = a->shape[0];
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < n; j++) {
            double acc = 0;
            for (int64_t p = 0; p < k; p++)
                acc += as[i * k + p] * bs[p * n + j];
            out[i * n + j] = acc;
        }
    check(cx, got, out, rows * n, cx->on_cpu ? NULL : weft_matmul(on_cpu(a), on_cpu(b)));
    free(as), free(bs), free(out);
    return 0;
}

static int drive_index_select(struct ctx *cx, const struct entry *e, enum variant v)
{
    (void)e;
    int64_t rows = rnd_int(cx, 1, 6), cols = rnd_int(cx, 1, 9);
    int64_t nidx = v == V_ZERO ? 0 : rnd_int(cx, 1, 8);
    weft_tensor *x = make_2d(cx, v == V_ZERO ? V_CONTIG : v, rows, cols, false);
    int64_t *idx = malloc(sizeof(int64_t) * (size_t)(nidx + 1));
    if (!x || !idx) {
        free(idx);
        return -1;
    }
    for (int64_t i = 0; i < nidx; i++)
        idx[i] = rnd_int(cx, 0, rows - 1);
    weft_tensor *it = weft_to_device(weft_from_host(idx, 1, &nidx, WEFT_I64, WEFT_CPU), cx->dev);
    weft_tensor *got = it ? weft_index_select(x, 0, it) : NULL;
    if (!got) {
        free(idx);
        return refused(cx);
    }
    int64_t n = 0;
    double *xs = host_f64(x, &n);
    double *out = malloc(sizeof(double) * (size_t)(nidx * cols + 1));
    if (!xs || !out) {
        free(idx), free(xs), free(out);
        return -1;
    }
    for (int64_t i = 0; i < nidx; i++)
        for (int64_t j = 0; j < cols; j++)
            out[i * cols + j] = xs[idx[i] * cols + j];
    check(cx, got, out, nidx * cols,
          cx->on_cpu ? NULL : weft_index_select(on_cpu(x), 0, on_cpu(it)));
    free(idx), free(xs), free(out);
    return 0;
}

/* copy_'s sentinel run: the copy_ into the view is the op under test. */
static weft_tensor *identity(weft_tensor *t)
{
    return t;
}

/* copy_ into the middle of a sentinel-filled tensor: values and the border both. */
static int drive_copy(struct ctx *cx, const struct entry *e, enum variant v)
{
    (void)e;
    int64_t rows = rnd_int(cx, 1, 6), cols = rnd_int(cx, 1, 9);
    weft_tensor *x = make_2d(cx, v, rows, cols, false);
    if (!x)
        return -1;
    struct entry ident = {.op = WEFT_OP_COPY, .f1_ = identity};
    sentinel_check(cx, &ident, x, NULL);
    weft_tensor *got = weft_clone(x);
    if (!got)
        return refused(cx);
    int64_t n = 0;
    double *xs = host_f64(x, &n);
    if (!xs)
        return -1;
    check(cx, got, xs, n, cx->on_cpu ? NULL : on_cpu(x));
    free(xs);
    return 0;
}

static int drive_fill(struct ctx *cx, const struct entry *e, enum variant v)
{
    int64_t n = v == V_ZERO ? 0 : rnd_int(cx, 1, 40);
    double value = rnd_value(cx, cx->dtype, false);
    weft_tensor *got = e->op == WEFT_OP_FILL ? weft_full(1, &n, value, cx->dtype, cx->dev)
                                             : weft_arange(0, (double)n, 1, cx->dtype, cx->dev);
    if (!got)
        return refused(cx);
    double *want = malloc(sizeof(double) * (size_t)(n + 1));
    if (!want)
        return -1;
    for (int64_t i = 0; i < n; i++)
        want[i] = e->op == WEFT_OP_FILL ? value : (double)i;
    compare(cx, got, want, n); /* the value itself is the oracle on every device */
    free(want);
    return 0;
}

static int drive_where(struct ctx *cx, const struct entry *e, enum variant v)
{
    (void)e;
    int64_t rows = rnd_int(cx, 1, 6), cols = rnd_int(cx, 1, 9);
    weft_tensor *c = make_2d(cx, v, rows, cols, false); /* cx->dtype is bool here */
    cx->dtype = WEFT_F32;
    weft_tensor *a = make_2d(cx, v == V_BROADCAST ? V_CONTIG : v, rows, cols, false);
    weft_tensor *b = make_2d(cx, V_CONTIG, v == V_ZERO ? 0 : rows, cols, false);
    cx->dtype = WEFT_BOOL;
    if (!c || !a || !b)
        return -1;
    weft_tensor *got = weft_where(c, a, b);
    if (!got)
        return refused(cx);
    int64_t n = 0, na = 0, nb = 0;
    double *cs = host_f64(c, &n), *as = host_f64(a, &na), *bs = host_f64(b, &nb);
    if (!cs || !as || !bs) {
        free(cs), free(as), free(bs);
        return -1;
    }
    for (int64_t i = 0; i < n; i++)
        cs[i] = cs[i] != 0 ? as[i] : bs[i];
    check(cx, got, cs, n, cx->on_cpu ? NULL : weft_where(on_cpu(c), on_cpu(a), on_cpu(b)));
    free(cs), free(as), free(bs);
    return 0;
}

static int drive_clamp(struct ctx *cx, const struct entry *e, enum variant v)
{
    (void)e;
    int64_t rows = rnd_int(cx, 1, 6), cols = rnd_int(cx, 1, 9);
    weft_tensor *x = make_2d(cx, v, rows, cols, false);
    if (!x)
        return -1;
    /* unsigned bounds stay unsigned: a -1 would wrap to 255 as in PyTorch */
    double lo = cx->dtype == WEFT_U8 ? 1 : -1, hi = 2;
    weft_tensor *got = weft_clamp(x, lo, hi);
    if (!got)
        return refused(cx);
    int64_t n = 0;
    double *xs = host_f64(x, &n);
    if (!xs)
        return -1;
    for (int64_t i = 0; i < n; i++)
        xs[i] = fmin(fmax(xs[i], lo), hi);
    check(cx, got, xs, n, cx->on_cpu ? NULL : weft_clamp(on_cpu(x), lo, hi));
    free(xs);
    return 0;
}

/* gather along dim 1 of a [rows, cols] input with a [rows, m] index. */
static int drive_gather(struct ctx *cx, const struct entry *e, enum variant v)
{
    (void)e;
    int64_t rows = rnd_int(cx, 1, 6), cols = rnd_int(cx, 1, 9);
    int64_t m = rnd_int(cx, 1, 8), irows = v == V_ZERO ? 0 : rows;
    weft_tensor *x = make_2d(cx, v == V_ZERO ? V_CONTIG : v, rows, cols, false);
    int64_t *idx = malloc(sizeof(int64_t) * (size_t)(irows * m + 1));
    if (!x || !idx) {
        free(idx);
        return -1;
    }
    for (int64_t i = 0; i < irows * m; i++)
        idx[i] = rnd_int(cx, 0, cols - 1);
    int64_t ishape[2] = {irows, m};
    weft_tensor *it = weft_to_device(weft_from_host(idx, 2, ishape, WEFT_I64, WEFT_CPU), cx->dev);
    weft_tensor *got = it ? weft_gather(x, 1, it) : NULL;
    if (!got) {
        free(idx);
        return refused(cx);
    }
    int64_t n = 0;
    double *xs = host_f64(x, &n);
    double *out = malloc(sizeof(double) * (size_t)(irows * m + 1));
    if (!xs || !out) {
        free(idx), free(xs), free(out);
        return -1;
    }
    for (int64_t i = 0; i < irows; i++)
        for (int64_t j = 0; j < m; j++)
            out[i * m + j] = xs[i * cols + idx[i * m + j]];
    check(cx, got, out, irows * m, cx->on_cpu ? NULL : weft_gather(on_cpu(x), 1, on_cpu(it)));
    free(idx), free(xs), free(out);
    return 0;
}

/* ---- the table --------------------------------------------------------------------------- */

static double r_neg(double x) { return -x; }
static double r_sign(double x) { return (x > 0) - (x < 0); }
static double r_rsqrt(double x) { return 1 / sqrt(x); }
static double r_recip(double x) { return 1 / x; }
static double r_sigmoid(double x) { return 1 / (1 + exp(-x)); }
static double r_relu(double x) { return x > 0 ? x : 0; }
static double r_gelu(double x) { return 0.5 * x * (1 + erf(x / sqrt(2.0))); }
static double r_silu(double x) { return x / (1 + exp(-x)); }
static double r_not(double x) { return x == 0; }
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

#define U(ID, name, ref) {WEFT_OP_##ID, drive_unary, weft_##name, weft_##name##_, NULL, NULL, ref, NULL}
#define B(ID, name, ref) {WEFT_OP_##ID, drive_binary, NULL, NULL, weft_##name, weft_##name##_, NULL, ref}
#define R(ID) {WEFT_OP_##ID, drive_reduce, NULL, NULL, NULL, NULL, NULL, NULL}

static const struct entry table[] = {
    {WEFT_OP_COPY, drive_copy, NULL, NULL, NULL, NULL, NULL, NULL},
    {WEFT_OP_FILL, drive_fill, NULL, NULL, NULL, NULL, NULL, NULL},
    {WEFT_OP_ARANGE, drive_fill, NULL, NULL, NULL, NULL, NULL, NULL},
    U(NEG, neg, r_neg), U(ABS, abs, fabs), U(SIGN, sign, r_sign), U(EXP, exp, exp),
    U(EXPM1, expm1, expm1), U(LOG, log, log), U(LOG1P, log1p, log1p), U(SQRT, sqrt, sqrt),
    U(RSQRT, rsqrt, r_rsqrt), U(RECIPROCAL, reciprocal, r_recip), U(SIN, sin, sin),
    U(COS, cos, cos), U(TANH, tanh, tanh), U(SIGMOID, sigmoid, r_sigmoid),
    U(RELU, relu, r_relu), U(GELU, gelu, r_gelu), U(SILU, silu, r_silu), U(ERF, erf, erf),
    U(FLOOR, floor, floor), U(CEIL, ceil, ceil), U(ROUND, round, nearbyint),
    U(TRUNC, trunc, trunc), U(LOGICAL_NOT, logical_not, r_not),
    B(ADD, add, r_add), B(SUB, sub, r_sub), B(MUL, mul, r_mul), B(DIV, div, r_div),
    B(POW, pow, pow), B(MAXIMUM, maximum, r_max), B(MINIMUM, minimum, r_min),
    B(EQ, eq, r_eq), B(NE, ne, r_ne), B(LT, lt, r_lt), B(LE, le, r_le), B(GT, gt, r_gt),
    B(GE, ge, r_ge), B(LOGICAL_AND, logical_and, r_and), B(LOGICAL_OR, logical_or, r_or),
    R(SUM), R(PROD), R(MEAN), R(MAX), R(MIN), R(ARGMAX), R(ARGMIN), R(ALL), R(ANY),
    R(SOFTMAX), R(LOG_SOFTMAX),
    {WEFT_OP_MATMUL, drive_matmul, NULL, NULL, NULL, NULL, NULL, NULL},
    {WEFT_OP_INDEX_SELECT, drive_index_select, NULL, NULL, NULL, NULL, NULL, NULL},
    {WEFT_OP_GATHER, drive_gather, NULL, NULL, NULL, NULL, NULL, NULL},
    {WEFT_OP_WHERE, drive_where, NULL, NULL, NULL, NULL, NULL, NULL},
    {WEFT_OP_CLAMP, drive_clamp, NULL, NULL, NULL, NULL, NULL, NULL},
};

static void run_table(struct ctx *ctx, struct weft_conformance_report *rep, int rounds);
static void list_undriven(struct weft_conformance_report *rep);

/* ---- the run ----------------------------------------------------------------------------- */

static void run_one(struct ctx *cx, const struct entry *e, int rounds)
{
    struct weft_conformance_result *r = cx->res;
    for (int v = 0; v < V_COUNT && r->status != WEFT_CONFORMANCE_SKIPPED; v++)
        for (int k = 0; k < rounds; k++) {
            weft_scope_push();
            int rc = e->drive(cx, e, (enum variant)v);
            weft_scope_pop();
            if (rc < 0) {
                fail(cx, "the case could not run: %s", weft_error_message());
                weft_error_clear();
            }
            if (rc != 0)
                return;
            r->cases++;
        }
}

int weft_conformance_run(int device_type, const struct weft_conformance_options *o,
                         struct weft_conformance_report *rep)
{
    if (!rep)
        return weft_error_set(WEFT_ERR_VALUE, "conformance: report is NULL");
    memset(rep, 0, sizeof *rep);
    rep->device_type = device_type;
    if (!weft_backend_get(WEFT_DEVICE_CPU) || !weft_backend_get(device_type))
        return weft_error_code();
    size_t ntable = sizeof table / sizeof table[0];
    rep->capacity = (int)ntable * WEFT_DTYPE_COUNT + weft_op_count();
    rep->results = calloc((size_t)rep->capacity, sizeof *rep->results);
    if (!rep->results)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "conformance: out of memory");
    struct ctx cx = {
        .dev = {(int16_t)device_type, 0},
        .on_cpu = device_type == WEFT_DEVICE_CPU,
        .rng = o && o->seed ? o->seed : 0x5eed,
        .verbose = o ? o->verbose : NULL,
    };
    int rounds = o && o->rounds > 0 ? o->rounds : 2;
    run_table(&cx, rep, rounds);
    list_undriven(rep);
    return rep->failed ? 1 : 0;
}

static void run_table(struct ctx *ctx, struct weft_conformance_report *rep, int rounds)
{
    struct ctx cx = *ctx;
    int device_type = rep->device_type;
    size_t ntable = sizeof table / sizeof table[0];
    for (size_t i = 0; i < ntable; i++) {
        uint32_t mask = weft_kernel_dtypes(table[i].op, device_type, WEFT_LAYOUT_STRIDED);
        for (int dt = 0; dt < WEFT_DTYPE_COUNT; dt++) {
            if (!(mask & WEFT_DTYPE_BIT(dt)))
                continue;
            struct weft_conformance_result *r = &rep->results[rep->count++];
            *r = (struct weft_conformance_result){.op = table[i].op, .dtype = dt};
            r->tolerance = tolerance((enum weft_dtype)dt, table[i].op);
            cx.dtype = (enum weft_dtype)dt;
            cx.res = r;
            run_one(&cx, &table[i], rounds);
            if (r->status == WEFT_CONFORMANCE_FAILED) {
                rep->failed++;
                if (cx.verbose)
                    fprintf(cx.verbose, "FAIL %s %s: %s (max error %g)\n",
                            weft_op_name(r->op), weft_dtype_name(r->dtype), r->message,
                            r->max_error);
            } else if (r->status == WEFT_CONFORMANCE_SKIPPED) {
                rep->skipped++;
            } else {
                rep->passed++;
            }
        }
    }
}

static bool driven(int op)
{
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (table[i].op == op)
            return true;
    return false;
}

/* One skipped line per op with kernels here that the suite cannot drive yet. */
static void list_undriven(struct weft_conformance_report *rep)
{
    for (int op = 0; op < weft_op_count() && rep->count < rep->capacity; op++) {
        uint32_t mask = weft_kernel_dtypes(op, rep->device_type, WEFT_LAYOUT_STRIDED);
        if (!mask || driven(op))
            continue;
        struct weft_conformance_result *r = &rep->results[rep->count++];
        *r = (struct weft_conformance_result){.op = op, .dtype = __builtin_ctz(mask),
                                              .status = WEFT_CONFORMANCE_SKIPPED};
        snprintf(r->message, sizeof r->message, "no driver for this op");
        rep->skipped++;
    }
}

void weft_conformance_report_free(struct weft_conformance_report *r)
{
    if (!r)
        return;
    free(r->results);
    r->results = NULL;
    r->count = 0;
}

const struct weft_conformance_result *
weft_conformance_find(const struct weft_conformance_report *r, int op, enum weft_dtype dtype)
{
    for (int i = 0; r && i < r->count; i++)
        if (r->results[i].op == op && r->results[i].dtype == dtype)
            return &r->results[i];
    return NULL;
}

void weft_conformance_print(const struct weft_conformance_report *r, FILE *f)
{
    const char *dev = weft_device_type_name(r->device_type);
    for (int i = 0; i < r->count; i++) {
        const struct weft_conformance_result *x = &r->results[i];
        if (x->status != WEFT_CONFORMANCE_FAILED)
            continue;
        fprintf(f, "  FAIL %-14s %-9s max error %.3g (tolerance %.3g), %lld NaN/Inf "
                   "mismatches, %lld sentinel errors: %s\n",
                weft_op_name(x->op), weft_dtype_name(x->dtype), x->max_error, x->tolerance,
                (long long)x->nan_mismatches, (long long)x->sentinel_errors, x->message);
    }
    fprintf(f, "conformance on %s: %d passed, %d failed, %d skipped (op/dtype pairs)\n", dev,
            r->passed, r->failed, r->skipped);
}
