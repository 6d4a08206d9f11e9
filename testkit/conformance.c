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
    int64_t rows, cols; /* the generic drivers' largest [rows, cols]: 6 x 9, or 40 x 300 */
    const char *label;  /* the large case running, for the failure message; NULL: none */
};

typedef double (*ref1_fn)(double);
typedef double (*ref2_fn)(double, double);
typedef weft_tensor *(*op1_fn)(weft_tensor *);
typedef weft_tensor *(*op2_fn)(weft_tensor *, weft_tensor *);

/* DOMAIN_POSITIVE: the op takes inputs in [0.25, 2] (weft/op_table.h's DOMAIN). */
enum domain { DOMAIN_NONE, DOMAIN_ANY, DOMAIN_POSITIVE };

struct entry {
    int op;
    int (*drive)(struct ctx *cx, const struct entry *e, enum variant v);
    op1_fn f1, f1_;
    op2_fn f2, f2_;
    ref1_fn r1;
    ref2_fn r2;
    enum domain domain;
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
                       op == WEFT_OP_PROD || op == WEFT_OP_SOFTMAX || op == WEFT_OP_LOG_SOFTMAX ||
                       op == WEFT_OP_VAR || op == WEFT_OP_SCATTER_ADD || op == WEFT_OP_COL2IM ||
                       op == WEFT_OP_AVG_POOL2D || op == WEFT_OP_AVG_POOL2D_BACKWARD ||
                       op == WEFT_OP_MAX_POOL2D_BACKWARD;
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
    if (r->status != WEFT_CONFORMANCE_FAILED) {
        int k = cx->label ? snprintf(r->message, sizeof r->message, "%s: ", cx->label) : 0;
        if (k < 0 || (size_t)k >= sizeof r->message)
            k = 0;
        snprintf(r->message + k, sizeof r->message - (size_t)k, fmt, detail);
    }
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

static int drive_unary(struct ctx *cx, const struct entry *e, enum variant v)
{
    int64_t rows = rnd_int(cx, 1, cx->rows), cols = rnd_int(cx, 1, cx->cols);
    weft_tensor *x = make_2d(cx, v, rows, cols, e->domain == DOMAIN_POSITIVE);
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
    int64_t rows = rnd_int(cx, 1, cx->rows), cols = rnd_int(cx, 1, cx->cols);
    bool nn = e->domain == DOMAIN_POSITIVE;
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
    int64_t rows = rnd_int(cx, 1, cx->rows), cols = rnd_int(cx, 1, cx->cols);
    if (e->op == WEFT_OP_PROD) /* integer products stay below 2^53, exact in the oracle */
        cols = 1 + cols % 9;
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
    int64_t m = rnd_int(cx, 1, cx->rows), k = rnd_int(cx, 1, cx->cols);
    int64_t n = rnd_int(cx, 1, cx->rows);
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
    int64_t rows = rnd_int(cx, 1, cx->rows), cols = rnd_int(cx, 1, cx->cols);
    int64_t nidx = v == V_ZERO ? 0 : rnd_int(cx, 1, cx->rows + 2);
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
    int64_t rows = rnd_int(cx, 1, cx->rows), cols = rnd_int(cx, 1, cx->cols);
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
    /* up to 100 at the large size: int8's arange ends below 127, bfloat16 holds it */
    int64_t n = v == V_ZERO ? 0 : rnd_int(cx, 1, cx->cols > 9 ? 100 : 40);
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
    int64_t rows = rnd_int(cx, 1, cx->rows), cols = rnd_int(cx, 1, cx->cols);
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
    int64_t rows = rnd_int(cx, 1, cx->rows), cols = rnd_int(cx, 1, cx->cols);
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
    int64_t rows = rnd_int(cx, 1, cx->rows), cols = rnd_int(cx, 1, cx->cols);
    int64_t m = rnd_int(cx, 1, cx->rows + 2), irows = v == V_ZERO ? 0 : rows;
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

/* The elementwise ops' double references and domains come from their rows in the op
 * table (weft/op_table.h's REF and DOMAIN): a new row is driven here with no edit. */
#define UNARY_REF(ID, name, DTYPES, AUTOCAST, GRAD_FN, SAVES, BACKWARD, DOMAIN, REF)          \
    static double ref_##name(double x) { return REF; }
WEFT_OPS_UNARY(UNARY_REF)
#undef UNARY_REF
#define BINARY_REF(ID, name, DTYPES, AUTOCAST, GRAD_FN, SAVES, BACKWARD, DOMAIN, REF)         \
    static double ref_##name(double a, double b) { return REF; }
WEFT_OPS_BINARY(BINARY_REF)
#undef BINARY_REF

#define U(ID, name, DTYPES, AUTOCAST, GRAD_FN, SAVES, BACKWARD, DOMAIN, REF)                  \
    {WEFT_OP_##ID, drive_unary, weft_##name, weft_##name##_, NULL, NULL, ref_##name, NULL,       \
     DOMAIN_##DOMAIN},
#define B(ID, name, DTYPES, AUTOCAST, GRAD_FN, SAVES, BACKWARD, DOMAIN, REF)                  \
    {WEFT_OP_##ID, drive_binary, NULL, NULL, weft_##name, weft_##name##_, NULL, ref_##name,      \
     DOMAIN_##DOMAIN},
#define R(ID) {WEFT_OP_##ID, drive_reduce, NULL, NULL, NULL, NULL, NULL, NULL}

static const struct entry table[] = {
    {WEFT_OP_COPY, drive_copy, NULL, NULL, NULL, NULL, NULL, NULL},
    {WEFT_OP_FILL, drive_fill, NULL, NULL, NULL, NULL, NULL, NULL},
    {WEFT_OP_ARANGE, drive_fill, NULL, NULL, NULL, NULL, NULL, NULL},
    WEFT_OPS_UNARY(U)
    WEFT_OPS_BINARY(B)
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

/* ---- the large size: the shapes that take a device's other code paths -------------------
 * Reductions over (outputs, reduced length) pairs that reach one thread per output, a
 * warp, a block and a split over blocks with scratch; softmax rows longer than a warp and
 * a block, on the last dim and on dim 0; scatter_add with many duplicate indices (atomics);
 * im2col/col2im and the pools with stride, padding and dilation, forward and backward. On
 * the cpu the double reference is the oracle, elsewhere the cpu. */

static const int64_t large_reductions[][2] = {
    {1, 1000000}, {3, 5000}, {7, 70000}, {300, 100}, {100000, 17}};
static const int64_t large_softmax_rows[] = {33, 300, 5000};

/* Ends one case of a large family: false when the entry should stop (it could not run,
 * or the front end refused the dtype). */
static bool large_counted(struct ctx *cx, int rc)
{
    if (rc < 0) {
        fail(cx, "the case could not run: %s", weft_error_message());
        weft_error_clear();
    }
    if (rc != 0)
        return false;
    cx->res->cases++;
    return true;
}

/* A [shape] input of 0/1 values of cx->dtype with about one zero per `len` elements, so
 * that all() is true for some rows and false for others. */
static weft_tensor *make_mostly_true(struct ctx *cx, const int64_t shape[2], int64_t len)
{
    int64_t n = shape[0] * shape[1];
    uint8_t *buf = malloc((size_t)(n ? n : 1));
    if (!buf)
        return NULL;
    for (int64_t i = 0; i < n; i++)
        buf[i] = rnd(cx) % (uint64_t)len != 0;
    weft_tensor *h = weft_from_host(buf, 2, shape, WEFT_BOOL, WEFT_CPU);
    free(buf);
    return weft_to(h, cx->dev, cx->dtype, false);
}

/* The reduction over the last dim; MAX also gives its indices. */
static weft_tensor *large_reduce_op(int op, weft_tensor *x, weft_tensor **indices)
{
    int dim = -1;
    weft_tensor *values = NULL;
    switch (op) {
    case WEFT_OP_VAR: return weft_var(x, 1, &dim, 1.0, false);
    case WEFT_OP_MAX:
        return weft_max_dim(x, -1, false, &values, indices) < 0 ? NULL : values;
    default: return reduce_last(op, x);
    }
}

/* x [outer, len] (transposed: the reduced dim strided) reduced over len. */
static int large_reduce_case(struct ctx *cx, int op, int64_t outer, int64_t len, bool transposed)
{
    int64_t shape[2] = {transposed ? len : outer, transposed ? outer : len};
    weft_tensor *x = op == WEFT_OP_ALL ? make_mostly_true(cx, shape, len)
                                       : make_input(cx, 2, shape, false);
    if (transposed)
        x = weft_t(x);
    if (!x)
        return -1;
    weft_tensor *idx = NULL;
    weft_tensor *got = large_reduce_op(op, x, &idx);
    if (!got)
        return refused(cx);
    int64_t n = 0;
    double *xs = host_f64(x, &n);
    double *out = malloc(sizeof(double) * (size_t)(2 * outer));
    if (!xs || !out) {
        free(xs), free(out);
        return -1;
    }
    double *arg = out + outer;
    for (int64_t i = 0; i < outer; i++) {
        const double *row = xs + i * len;
        double acc = 0, best = row[0];
        int64_t at = 0;
        for (int64_t j = 0; j < len; j++) {
            acc += row[j];
            if (row[j] > best) /* the first maximum wins */
                best = row[j], at = j;
        }
        double mean = acc / (double)len, sq = 0;
        bool all = true;
        for (int64_t j = 0; j < len; j++) {
            sq += (row[j] - mean) * (row[j] - mean);
            all = all && row[j] != 0;
        }
        arg[i] = (double)at;
        out[i] = op == WEFT_OP_SUM ? acc : op == WEFT_OP_MEAN ? mean
                 : op == WEFT_OP_VAR ? sq / (double)(len - 1) : op == WEFT_OP_MAX ? best
                 : op == WEFT_OP_ARGMAX ? (double)at : (double)all;
    }
    weft_tensor *cpu_idx = NULL;
    check(cx, got, out, outer, cx->on_cpu ? NULL : large_reduce_op(op, on_cpu(x), &cpu_idx));
    if (op == WEFT_OP_MAX)
        check(cx, idx, arg, outer, cpu_idx);
    free(xs), free(out);
    return 0;
}

/* softmax / log_softmax over `len` elements along dim (0 or 1) of a 2-D input with 7
 * rows of them, contiguous or built as a transpose. */
static int large_softmax_case(struct ctx *cx, int op, int64_t len, int dim, bool transposed)
{
    int64_t r = dim == 1 ? 7 : len, c = dim == 1 ? len : 7;
    weft_tensor *x = make_2d(cx, transposed ? V_TRANSPOSED : V_CONTIG, r, c, false);
    if (!x)
        return -1;
    weft_tensor *(*fn)(weft_tensor *, int) =
        op == WEFT_OP_SOFTMAX ? weft_softmax : weft_log_softmax;
    weft_tensor *got = fn(x, dim == 1 ? -1 : 0);
    if (!got)
        return refused(cx);
    int64_t n = 0;
    double *xs = host_f64(x, &n);
    double *rows = malloc(sizeof(double) * (size_t)(2 * n));
    if (!xs || !rows) {
        free(xs), free(rows);
        return -1;
    }
    /* rows: the input with the softmax dim last ([7, len]); out: the same order */
    double *out = rows + n;
    for (int64_t i = 0; i < r; i++)
        for (int64_t j = 0; j < c; j++)
            rows[dim == 1 ? i * c + j : j * r + i] = xs[i * c + j];
    reduce_ref(op, rows, 7, len, out);
    for (int64_t i = 0; i < r; i++)
        for (int64_t j = 0; j < c; j++)
            xs[i * c + j] = out[dim == 1 ? i * c + j : j * r + i];
    check(cx, got, xs, n, cx->on_cpu ? NULL : fn(on_cpu(x), dim == 1 ? -1 : 0));
    free(xs), free(rows);
    return 0;
}

/* t [rows, cols] += src [n, cols] scattered along dim 0 by an index of values in
 * [0, rows): about n / rows updates land on each element. */
static int large_scatter_case(struct ctx *cx, int64_t rows, int64_t cols, int64_t n)
{
    int64_t ts[2] = {rows, cols}, ss[2] = {n, cols};
    weft_tensor *t = make_input(cx, 2, ts, false), *src = make_input(cx, 2, ss, false);
    int64_t *idx = malloc(sizeof(int64_t) * (size_t)(n * cols));
    if (!t || !src || !idx) {
        free(idx);
        return -1;
    }
    for (int64_t i = 0; i < n * cols; i++)
        idx[i] = rnd_int(cx, 0, rows - 1);
    weft_tensor *it = weft_to_device(weft_from_host(idx, 2, ss, WEFT_I64, WEFT_CPU), cx->dev);
    weft_tensor *got = it ? weft_scatter_add(t, 0, it, src) : NULL;
    if (!got) {
        free(idx);
        return refused(cx);
    }
    int64_t nt = 0, nsrc = 0;
    double *want = host_f64(t, &nt), *ys = host_f64(src, &nsrc);
    if (!want || !ys) {
        free(idx), free(want), free(ys);
        return -1;
    }
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < cols; j++)
            want[idx[i * cols + j] * cols + j] += ys[i * cols + j];
    check(cx, got, want, nt,
          cx->on_cpu ? NULL : weft_scatter_add(on_cpu(t), 0, on_cpu(it), on_cpu(src)));
    free(idx), free(want), free(ys);
    return 0;
}

/* Images [n, c, h, w], windows kh x kw, stride, padding, dilation (weft/kernel.h). */
struct geom {
    int64_t n, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw;
    int64_t count_include_pad, divisor; /* avg_pool2d only */
};

static const struct geom large_geoms[] = {
    {2, 3, 11, 13, 3, 2, 2, 1, 1, 1, 2, 3, 1, 0}, /* uneven stride, padding and dilation */
    {4, 16, 32, 32, 3, 3, 1, 1, 1, 1, 1, 1, 0, 0}, /* overlapping windows, 64k outputs */
    {2, 5, 9, 10, 4, 3, 3, 2, 2, 1, 1, 1, 0, 5},  /* divisor_override */
};

/* Output rows and columns (PyTorch's floor mode). */
static int64_t geom_oh(const struct geom *g)
{
    return (g->h + 2 * g->ph - g->dh * (g->kh - 1) - 1) / g->sh + 1;
}

static int64_t geom_ow(const struct geom *g)
{
    return (g->w + 2 * g->pw - g->dw * (g->kw - 1) - 1) / g->sw + 1;
}

static bool is_geom_op(int op)
{
    return op == WEFT_OP_IM2COL || op == WEFT_OP_COL2IM || op == WEFT_OP_MAX_POOL2D ||
           op == WEFT_OP_MAX_POOL2D_BACKWARD || op == WEFT_OP_AVG_POOL2D ||
           op == WEFT_OP_AVG_POOL2D_BACKWARD;
}

/* Runs a geometry op on a (and b) where they live; out1 gets max_pool2d's indices. */
static weft_tensor *geom_run(int op, const struct geom *g, weft_tensor *a, weft_tensor *b,
                             weft_tensor **out1)
{
    if (!a || (op == WEFT_OP_MAX_POOL2D_BACKWARD && !b))
        return NULL;
    int64_t oh = geom_oh(g), ow = geom_ow(g);
    int64_t image[4] = {g->n, g->c, g->h, g->w}, pooled[4] = {g->n, g->c, oh, ow};
    int64_t cols[3] = {g->n, g->c * g->kh * g->kw, oh * ow};
    bool to_image = op == WEFT_OP_COL2IM || op == WEFT_OP_MAX_POOL2D_BACKWARD ||
                    op == WEFT_OP_AVG_POOL2D_BACKWARD;
    weft_tensor *out = op == WEFT_OP_IM2COL ? weft_empty(3, cols, a->dtype, a->device)
                       : to_image           ? weft_empty(4, image, a->dtype, a->device)
                                            : weft_empty(4, pooled, a->dtype, a->device);
    struct weft_op_call c = {.op = op, .nin = b ? 2 : 1, .nout = 1, .in = {a, b}, .out = {out}};
    if (op == WEFT_OP_MAX_POOL2D) {
        c.nout = 2;
        c.out[1] = *out1 = weft_empty(4, pooled, WEFT_I64, a->device);
    }
    const int64_t ints[8] = {g->kh, g->kw, g->sh, g->sw, g->ph, g->pw, g->dh, g->dw};
    memcpy(c.ints, ints, sizeof ints);
    bool avg = op == WEFT_OP_AVG_POOL2D || op == WEFT_OP_AVG_POOL2D_BACKWARD;
    bool cols_op = op == WEFT_OP_IM2COL || op == WEFT_OP_COL2IM;
    c.ints[8] = avg ? g->count_include_pad : cols_op ? oh : 0;
    c.ints[9] = avg ? g->divisor : cols_op ? ow : 0;
    if (!out || (c.nout == 2 && !c.out[1]) || weft_dispatch(&c) != 0)
        return NULL;
    return out;
}

/* The double reference of a geometry op on host data (row-major, the op's input shape);
 * idx: max_pool2d_backward's indices. Writes the result into want. */
static void geom_ref(int op, const struct geom *g, const double *x, const double *idx,
                     double *want, double *want_idx)
{
    int64_t oh = geom_oh(g), ow = geom_ow(g), h = g->h, w = g->w, planes = g->n * g->c;
    int64_t taps = g->kh * g->kw, cells = oh * ow;
    bool to_image = op == WEFT_OP_COL2IM || op == WEFT_OP_MAX_POOL2D_BACKWARD ||
                    op == WEFT_OP_AVG_POOL2D_BACKWARD;
    if (to_image)
        memset(want, 0, sizeof(double) * (size_t)(planes * h * w));
    for (int64_t p = 0; p < planes; p++)
        for (int64_t o = 0; o < cells; o++) {
            int64_t y0 = (o / ow) * g->sh - g->ph, x0 = (o % ow) * g->sw - g->pw;
            double *img = want + p * h * w; /* want holds an image's worth or more */
            bool reads_image = op == WEFT_OP_IM2COL || op == WEFT_OP_MAX_POOL2D ||
                               op == WEFT_OP_AVG_POOL2D;
            const double *plane = reads_image ? x + p * h * w : x;
            if (op == WEFT_OP_MAX_POOL2D_BACKWARD) {
                int64_t at = (int64_t)idx[p * cells + o];
                if (at >= 0)
                    img[at] += x[p * cells + o];
                continue;
            }
            /* avg: PyTorch's window, its pool size, then clipped to the image */
            int64_t ye = y0 + g->kh < h + g->ph ? y0 + g->kh : h + g->ph;
            int64_t xe = x0 + g->kw < w + g->pw ? x0 + g->kw : w + g->pw;
            int64_t pool = (ye - y0) * (xe - x0);
            int64_t ya = y0 < 0 ? 0 : y0, xa = x0 < 0 ? 0 : x0;
            int64_t yb = ye < h ? ye : h, xb = xe < w ? xe : w;
            double divisor = g->divisor > 0 ? (double)g->divisor
                             : g->count_include_pad ? (double)pool
                                                    : (double)((yb - ya) * (xb - xa));
            double best = -INFINITY, sum = 0;
            int64_t at = -1;
            for (int64_t t = 0; t < taps; t++) {
                int64_t i = t / g->kw, j = t % g->kw;
                bool avg = op == WEFT_OP_AVG_POOL2D || op == WEFT_OP_AVG_POOL2D_BACKWARD;
                int64_t yy = y0 + i * (avg ? 1 : g->dh), xx = x0 + j * (avg ? 1 : g->dw);
                bool inside = yy >= 0 && yy < h && xx >= 0 && xx < w;
                /* im2col's [n, c*kh*kw, cells] position of tap t of plane p */
                int64_t row = (p % g->c) * taps + t;
                int64_t cols_at = ((p / g->c) * g->c * taps + row) * cells + o;
                switch (op) {
                case WEFT_OP_IM2COL: want[cols_at] = inside ? plane[yy * w + xx] : 0; break;
                case WEFT_OP_COL2IM:
                    if (inside)
                        img[yy * w + xx] += x[cols_at];
                    break;
                case WEFT_OP_MAX_POOL2D:
                    if (inside && (at < 0 || plane[yy * w + xx] > best))
                        best = plane[yy * w + xx], at = yy * w + xx;
                    break;
                case WEFT_OP_AVG_POOL2D: sum += inside ? plane[yy * w + xx] : 0; break;
                case WEFT_OP_AVG_POOL2D_BACKWARD:
                    if (inside && yy >= ya && yy < yb && xx >= xa && xx < xb)
                        img[yy * w + xx] += x[p * cells + o] / divisor;
                    break;
                default: break;
                }
            }
            if (op == WEFT_OP_MAX_POOL2D) {
                want[p * cells + o] = best;
                want_idx[p * cells + o] = (double)at;
            } else if (op == WEFT_OP_AVG_POOL2D) {
                want[p * cells + o] = yb > ya && xb > xa ? sum / divisor : 0;
            }
        }
}

/* One geometry op on one geometry; the image input contiguous or built as a transpose
 * of its last two dims. */
static int large_geom_case(struct ctx *cx, int op, const struct geom *g, bool transposed)
{
    int64_t oh = geom_oh(g), ow = geom_ow(g);
    int64_t image[4] = {g->n, g->c, g->h, g->w};
    int64_t pooled[4] = {g->n, g->c, oh, ow}, cols[3] = {g->n, g->c * g->kh * g->kw, oh * ow};
    /* the op's input: the image, the columns or a pooled gradient */
    int nd = op == WEFT_OP_COL2IM ? 3 : 4;
    bool grad_in = op == WEFT_OP_MAX_POOL2D_BACKWARD || op == WEFT_OP_AVG_POOL2D_BACKWARD;
    const int64_t *in_shape = op == WEFT_OP_COL2IM ? cols : grad_in ? pooled : image;
    int64_t made[4];
    memcpy(made, in_shape, sizeof(int64_t) * (size_t)nd);
    if (transposed) { /* made with its last two dims swapped, then transposed back */
        made[nd - 1] = in_shape[nd - 2];
        made[nd - 2] = in_shape[nd - 1];
    }
    weft_tensor *a = make_input(cx, nd, made, false);
    if (transposed)
        a = weft_transpose(a, nd - 2, nd - 1);
    if (!a)
        return -1;
    int64_t na = 0;
    double *as = host_f64(a, &na);
    int64_t nimg = g->n * g->c * g->h * g->w, nout = g->n * g->c * oh * ow;
    double *want = malloc(sizeof(double) * (size_t)(nimg + cols[1] * cols[2] * g->n + 2 * nout));
    if (!as || !want) {
        free(as), free(want);
        return -1;
    }
    double *idx = want + nimg + cols[1] * cols[2] * g->n, *want_idx = idx + nout;
    weft_tensor *b = NULL;
    if (op == WEFT_OP_MAX_POOL2D_BACKWARD) { /* indices from the reference forward */
        int64_t nx = 0;
        double *xs = host_f64(make_input(cx, 4, image, false), &nx);
        int64_t *ii = malloc(sizeof(int64_t) * (size_t)nout);
        if (!xs || !ii) {
            free(as), free(want), free(xs), free(ii);
            return -1;
        }
        geom_ref(WEFT_OP_MAX_POOL2D, g, xs, NULL, want, idx);
        for (int64_t i = 0; i < nout; i++)
            ii[i] = (int64_t)idx[i];
        b = weft_to_device(weft_from_host(ii, 4, pooled, WEFT_I64, WEFT_CPU), cx->dev);
        free(xs), free(ii);
    }
    weft_tensor *got_idx = NULL, *cpu_idx = NULL;
    weft_tensor *got = geom_run(op, g, a, b, &got_idx);
    if (!got) {
        free(as), free(want);
        return refused(cx);
    }
    geom_ref(op, g, as, idx, want, want_idx);
    weft_tensor *cpu =
        cx->on_cpu ? NULL : geom_run(op, g, on_cpu(a), b ? on_cpu(b) : NULL, &cpu_idx);
    check(cx, got, want, weft_tensor_numel(got), cpu);
    if (op == WEFT_OP_MAX_POOL2D)
        check(cx, got_idx, want_idx, nout, cpu_idx);
    free(as), free(want);
    return 0;
}

/* The dtypes a large family runs in: those of `want` the device and the cpu register. */
static uint32_t large_dtypes(const struct ctx *cx, int op, uint32_t want)
{
    return want & weft_kernel_dtypes(op, cx->dev.type, WEFT_LAYOUT_STRIDED) &
           weft_kernel_dtypes(op, WEFT_DEVICE_CPU, WEFT_LAYOUT_STRIDED);
}

static void tally(const struct ctx *cx, struct weft_conformance_report *rep,
                  const struct weft_conformance_result *r);

/* Runs every case of one (op, dtype) of a large family into its own result entry. */
static void run_large_entry(struct ctx *cx, struct weft_conformance_report *rep, int op,
                            enum weft_dtype dt)
{
    if (rep->count >= rep->capacity)
        return;
    struct weft_conformance_result *r = &rep->results[rep->count++];
    *r = (struct weft_conformance_result){.op = op, .dtype = dt};
    r->tolerance = tolerance(dt, op);
    cx->dtype = dt;
    cx->res = r;
    char label[64];
    cx->label = label;
    bool go = true;
    int nred = (int)(sizeof large_reductions / sizeof large_reductions[0]);
    int ngeom = (int)(sizeof large_geoms / sizeof large_geoms[0]);
    bool avg = op == WEFT_OP_AVG_POOL2D || op == WEFT_OP_AVG_POOL2D_BACKWARD;
    for (int layout = 0; layout < 2 && go; layout++) {
        const char *how = layout ? "transposed" : "contiguous";
        if (op == WEFT_OP_SOFTMAX || op == WEFT_OP_LOG_SOFTMAX) {
            for (int i = 0; i < 3 && go; i++)
                for (int dim = 0; dim < 2 && go; dim++) {
                    snprintf(label, sizeof label, "rows of %lld on dim %d, %s",
                             (long long)large_softmax_rows[i], dim ? -1 : 0, how);
                    weft_scope_push();
                    int rc = large_softmax_case(cx, op, large_softmax_rows[i], dim, layout);
                    weft_scope_pop();
                    go = large_counted(cx, rc);
                }
        } else if (op == WEFT_OP_SCATTER_ADD) {
            if (layout)
                break;
            const int64_t shapes[2][3] = {{64, 33, 3000}, {5, 300, 200}};
            for (int i = 0; i < 2 && go; i++) {
                weft_scope_push();
                /* float16 adds round at every update: a fifth of the updates keeps the
                   rounding within its tolerance, and duplicates stay */
                int64_t n = cx->dtype == WEFT_F16 ? shapes[i][2] / 5 : shapes[i][2];
                snprintf(label, sizeof label, "[%lld, %lld] from %lld rows",
                         (long long)shapes[i][0], (long long)shapes[i][1], (long long)n);
                int rc = large_scatter_case(cx, shapes[i][0], shapes[i][1], n);
                weft_scope_pop();
                go = large_counted(cx, rc);
            }
        } else if (is_geom_op(op)) {
            for (int i = 0; i < ngeom && go; i++) {
                struct geom g = large_geoms[i];
                if (avg) /* avg_pool2d has no dilation */
                    g.dh = g.dw = 1;
                if (!avg && g.divisor) /* a divisor_override case only for avg_pool2d */
                    continue;
                snprintf(label, sizeof label,
                         "[%lld, %lld, %lld, %lld] k%lldx%lld s%lld p%lld d%lld, %s",
                         (long long)g.n, (long long)g.c, (long long)g.h, (long long)g.w,
                         (long long)g.kh, (long long)g.kw, (long long)g.sh, (long long)g.ph,
                         (long long)g.dh, how);
                weft_scope_push();
                int rc = large_geom_case(cx, op, &g, layout);
                weft_scope_pop();
                go = large_counted(cx, rc);
            }
        } else {
            for (int i = 0; i < nred && go; i++) {
                snprintf(label, sizeof label, "[%lld, %lld] over dim -1, %s",
                         (long long)large_reductions[i][0], (long long)large_reductions[i][1], how);
                weft_scope_push();
                int rc = large_reduce_case(cx, op, large_reductions[i][0], large_reductions[i][1],
                                           layout);
                weft_scope_pop();
                go = large_counted(cx, rc);
            }
        }
    }
    cx->label = NULL;
    tally(cx, rep, r);
}

static void run_large(struct ctx *cx, struct weft_conformance_report *rep)
{
    const uint32_t floating = WEFT_DTYPE_BIT(WEFT_F32) | WEFT_DTYPE_BIT(WEFT_F64) |
                              WEFT_DTYPE_BIT(WEFT_F16);
    /* the reductions' 2M-element inputs in the two dtypes whose paths differ most (float
       accumulation of float and of half loads): the cpu runs the suite in CI */
    const uint32_t halves = WEFT_DTYPE_BIT(WEFT_F32) | WEFT_DTYPE_BIT(WEFT_F16);
    const struct {
        int op;
        uint32_t dtypes;
    } families[] = {
        {WEFT_OP_SUM, floating}, {WEFT_OP_MEAN, halves}, {WEFT_OP_VAR, halves},
        {WEFT_OP_MAX, halves}, {WEFT_OP_ARGMAX, halves}, {WEFT_OP_ALL, WEFT_DTYPE_BIT(WEFT_BOOL)},
        {WEFT_OP_SOFTMAX, floating}, {WEFT_OP_LOG_SOFTMAX, floating},
        {WEFT_OP_SCATTER_ADD, WEFT_DTYPE_BIT(WEFT_F32) | WEFT_DTYPE_BIT(WEFT_F16) |
                                  WEFT_DTYPE_BIT(WEFT_I8)},
        {WEFT_OP_IM2COL, floating}, {WEFT_OP_COL2IM, floating},
        {WEFT_OP_MAX_POOL2D, floating}, {WEFT_OP_MAX_POOL2D_BACKWARD, floating},
        {WEFT_OP_AVG_POOL2D, floating}, {WEFT_OP_AVG_POOL2D_BACKWARD, floating},
    };
    for (size_t f = 0; f < sizeof families / sizeof families[0]; f++) {
        uint32_t mask = large_dtypes(cx, families[f].op, families[f].dtypes);
        for (int dt = 0; dt < WEFT_DTYPE_COUNT; dt++)
            if (mask & WEFT_DTYPE_BIT(dt))
                run_large_entry(cx, rep, families[f].op, (enum weft_dtype)dt);
    }
}

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
    rep->capacity = (int)ntable * WEFT_DTYPE_COUNT + weft_op_count() + 128 /* large cases */;
    rep->results = calloc((size_t)rep->capacity, sizeof *rep->results);
    if (!rep->results)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "conformance: out of memory");
    struct ctx cx = {
        .dev = {(int16_t)device_type, 0},
        .on_cpu = device_type == WEFT_DEVICE_CPU,
        .rng = o && o->seed ? o->seed : 0x5eed,
        .verbose = o ? o->verbose : NULL,
    };
    bool large = o && o->size == WEFT_CONFORMANCE_LARGE;
    cx.rows = large ? 40 : 6;
    cx.cols = large ? 300 : 9;
    int rounds = o && o->rounds > 0 ? o->rounds : 2;
    run_table(&cx, rep, rounds);
    if (large)
        run_large(&cx, rep);
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
            tally(&cx, rep, r);
        }
    }
}

/* Counts a finished entry, and prints it as it happens when it failed. */
static void tally(const struct ctx *cx, struct weft_conformance_report *rep,
                  const struct weft_conformance_result *r)
{
    if (r->status == WEFT_CONFORMANCE_FAILED) {
        rep->failed++;
        if (cx->verbose)
            fprintf(cx->verbose, "FAIL %s %s: %s (max error %g)\n", weft_op_name(r->op),
                    weft_dtype_name(r->dtype), r->message, r->max_error);
    } else if (r->status == WEFT_CONFORMANCE_SKIPPED) {
        rep->skipped++;
    } else {
        rep->passed++;
    }
}

int weft_conformance_size_parse(const char *text, enum weft_conformance_size *out)
{
    if (text && strcmp(text, "small") == 0)
        *out = WEFT_CONFORMANCE_SMALL;
    else if (text && strcmp(text, "large") == 0)
        *out = WEFT_CONFORMANCE_LARGE;
    else
        return weft_error_set(WEFT_ERR_VALUE, "conformance: size must be 'small' or 'large', "
                                              "got '%s'", text ? text : "(null)");
    return 0;
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
