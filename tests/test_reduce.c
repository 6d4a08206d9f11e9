/* tests/test_reduce.c: sum, mean, prod, var, std, all, any, max/min (all and by dim),
 * argmax/argmin, softmax and log_softmax.
 *
 * The sweeps reduce random shapes over single, several and all dims, with and without
 * keepdim, in several layouts (contiguous, transposed, sliced with a step, expanded with
 * stride 0, empty) and every dtype an op takes, against a plain loop in double over the
 * values the input really holds. Named tests pin down the kernel's paths (column blocks,
 * chunked full reductions), accuracy of long float sums, integer wrapping, NaN rules,
 * empty reductions and every error text. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

TestSuite(reduce, .init = tu_setup, .fini = tu_teardown);

/* ---- helpers ----------------------------------------------------------------------- */

enum layout { CONTIGUOUS, TRANSPOSED, SLICED, EXPANDED, LAYOUT_COUNT };

static int64_t numel_of(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    return n;
}

/* Random values for dt: whole numbers for integers, 0/1 for bool. */
static void random_values(enum weft_dtype dt, double *v, int64_t n, double lo, double hi,
                          uint64_t *st)
{
    if (dt == WEFT_BOOL) {
        lo = 0;
        hi = 2;
    } else if (dt == WEFT_U8 && lo < 0) {
        lo = 0;
    }
    tu_random_values(v, n, lo, hi, st);
    if (!weft_dtype_is_floating(dt))
        for (int64_t i = 0; i < n; i++)
            v[i] = floor(v[i]);
}

/* A tensor of `shape` with random values in [lo, hi), laid out as asked. Its logical
 * values are what the reference must use, so callers read them back with tu_read. */
static weft_tensor *make_input(int ndim, const int64_t *shape, enum weft_dtype dt,
                               enum layout layout, double lo, double hi, uint64_t *st)
{
    int64_t base[WEFT_MAX_DIMS];
    memcpy(base, shape, (size_t)ndim * sizeof *base);
    if (layout == TRANSPOSED)
        for (int i = 0; i < ndim; i++)
            base[i] = shape[ndim - 1 - i];
    if (layout == SLICED && ndim > 0)
        base[ndim - 1] = 2 * shape[ndim - 1];
    if (layout == EXPANDED && ndim > 0)
        base[0] = 1;
    int64_t n = numel_of(ndim, base);
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    random_values(dt, v, n, lo, hi, st);
    weft_tensor *t = tu_tensor(ndim, base, v, dt);
    free(v);
    if (layout == TRANSPOSED && ndim > 1) {
        int perm[WEFT_MAX_DIMS];
        for (int i = 0; i < ndim; i++)
            perm[i] = ndim - 1 - i;
        t = weft_permute(t, ndim, perm);
    } else if (layout == SLICED && ndim > 0) {
        t = weft_slice(t, -1, 0, base[ndim - 1], 2);
    } else if (layout == EXPANDED && ndim > 0) {
        t = weft_expand(t, ndim, shape);
    }
    cr_assert_not_null(t, "make_input: %s", weft_error_message());
    return t;
}

static double *read_all(const weft_tensor *t)
{
    int64_t n = weft_tensor_numel(t);
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    tu_read(t, v);
    return v;
}

enum ref_op { REF_SUM, REF_PROD, REF_MEAN, REF_VAR, REF_MAX, REF_MIN, REF_ALL, REF_ANY };

/* Output position of input element `i` (row-major) when the masked dims are reduced. */
static int64_t out_index(int64_t i, int ndim, const int64_t *shape, const bool *mask,
                         int64_t *reduced_pos)
{
    int64_t o = 0, r = 0, ostride = 1, rstride = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        int64_t c = i % shape[d];
        i /= shape[d];
        if (mask[d]) {
            r += c * rstride;
            rstride *= shape[d];
        } else {
            o += c * ostride;
            ostride *= shape[d];
        }
    }
    if (reduced_pos)
        *reduced_pos = r;
    return o;
}

/* The reduction in double; returns the number of outputs. */
static int64_t ref_reduce(enum ref_op op, const double *x, int ndim, const int64_t *shape,
                          const bool *mask, double correction, double *out)
{
    int64_t n = numel_of(ndim, shape), nout = 1, R = 1;
    for (int d = 0; d < ndim; d++)
        if (mask[d])
            R *= shape[d];
        else
            nout *= shape[d];
    double *mean = calloc((size_t)(nout ? nout : 1), sizeof *mean);
    for (int64_t o = 0; o < nout; o++)
        out[o] = op == REF_PROD || op == REF_ALL ? 1 : op == REF_MAX ? -INFINITY
                                                   : op == REF_MIN ? INFINITY : 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t o = out_index(i, ndim, shape, mask, NULL);
        double v = x[i];
        switch (op) {
        case REF_SUM: case REF_MEAN: out[o] += v; break;
        case REF_VAR: mean[o] += v / R; break;
        case REF_PROD: out[o] *= v; break;
        case REF_MAX: if (!isnan(out[o]) && (isnan(v) || v > out[o])) out[o] = v; break;
        case REF_MIN: if (!isnan(out[o]) && (isnan(v) || v < out[o])) out[o] = v; break;
        case REF_ALL: out[o] = out[o] && v != 0; break;
        case REF_ANY: out[o] = out[o] || v != 0; break;
        }
    }
    if (op == REF_VAR)
        for (int64_t i = 0; i < n; i++) {
            int64_t o = out_index(i, ndim, shape, mask, NULL);
            out[o] += (x[i] - mean[o]) * (x[i] - mean[o]);
        }
    for (int64_t o = 0; o < nout; o++) {
        if (op == REF_MEAN)
            out[o] /= R;
        if (op == REF_VAR)
            out[o] /= fmax(0.0, R - correction);
    }
    free(mean);
    return nout;
}

/* First position (along the reduced dims, row-major) of each output's max/min. */
static void ref_arg(bool is_max, const double *x, int ndim, const int64_t *shape, const bool *mask,
                    double *out)
{
    double best[4096];
    int64_t n = numel_of(ndim, shape), nout = ref_reduce(is_max ? REF_MAX : REF_MIN, x, ndim, shape,
                                                         mask, 0, best);
    for (int64_t o = 0; o < nout; o++)
        out[o] = -1;
    for (int64_t i = 0; i < n; i++) {
        int64_t r, o = out_index(i, ndim, shape, mask, &r);
        bool hit = isnan(best[o]) ? isnan(x[i]) : x[i] == best[o];
        if (hit && out[o] < 0)
            out[o] = (double)r;
    }
}

/* The shape a reduction returns. */
static int reduced_shape(int ndim, const int64_t *shape, const bool *mask, bool keepdim,
                         int64_t *out)
{
    int n = 0;
    for (int d = 0; d < ndim; d++)
        if (!mask[d])
            out[n++] = shape[d];
        else if (keepdim)
            out[n++] = 1;
    return n;
}

static void random_shape(int *ndim, int64_t *shape, int max_ndim, int max_size, uint64_t *st)
{
    double r[WEFT_MAX_DIMS + 1];
    tu_random_values(r, max_ndim + 1, 0, 1, st);
    *ndim = 1 + (int)(r[0] * max_ndim);
    for (int d = 0; d < *ndim; d++)
        shape[d] = 1 + (int64_t)(r[d + 1] * max_size);
}

/* A random non-empty set of dims (as a list and a mask); sometimes the empty list = all. */
static int random_dims(int ndim, int *dims, bool *mask, uint64_t *st)
{
    double r[WEFT_MAX_DIMS + 1];
    tu_random_values(r, ndim + 1, 0, 1, st);
    int n = 0;
    memset(mask, 0, WEFT_MAX_DIMS * sizeof *mask);
    if (r[ndim] < 0.15) {
        for (int d = 0; d < ndim; d++)
            mask[d] = true;
        return 0;
    }
    for (int d = 0; d < ndim; d++)
        if (r[d] < 0.5) {
            mask[d] = true;
            dims[n++] = r[d] < 0.25 ? d - ndim : d; /* negative dims too */
        }
    if (n == 0) {
        mask[0] = true;
        dims[n++] = 0;
    }
    return n;
}

static double rtol_of(enum weft_dtype dt)
{
    switch (dt) {
    case WEFT_F16: return 4e-3;
    case WEFT_BF16: return 2e-2;
    case WEFT_F32: return 2e-5;
    case WEFT_F64: return 1e-12;
    default: return 0;
    }
}

/* ---- the sweep over sum/mean/prod/var/std/all/any ------------------------------------ */

struct sweep_op {
    const char *name;
    enum ref_op ref;
    uint32_t dtypes;
    double lo, hi;
};

static weft_tensor *run_op(const struct sweep_op *op, weft_tensor *t, int ndims, const int *dims,
                           bool keepdim, double correction)
{
    switch (op->ref) {
    case REF_SUM: return weft_sum(t, ndims, dims, keepdim);
    case REF_PROD: return weft_prod(t, ndims, dims, keepdim);
    case REF_MEAN: return weft_mean(t, ndims, dims, keepdim);
    case REF_VAR:
        return strcmp(op->name, "std") == 0 ? weft_std(t, ndims, dims, correction, keepdim)
                                            : weft_var(t, ndims, dims, correction, keepdim);
    case REF_ALL: return weft_all(t, ndims, dims, keepdim);
    case REF_ANY: return weft_any(t, ndims, dims, keepdim);
    default: return NULL;
    }
}

static enum weft_dtype expected_dtype(const struct sweep_op *op, enum weft_dtype dt)
{
    if (op->ref == REF_ALL || op->ref == REF_ANY)
        return dt == WEFT_U8 ? WEFT_U8 : WEFT_BOOL; /* PyTorch keeps uint8 */
    if ((op->ref == REF_SUM || op->ref == REF_PROD) && !weft_dtype_is_floating(dt))
        return WEFT_I64;
    return dt;
}

static void sweep(const struct sweep_op *op, uint64_t seed)
{
    uint64_t st = seed;
    for (int dt = 0; dt < WEFT_DTYPE_COUNT; dt++) {
        if (!(op->dtypes & WEFT_DTYPE_BIT(dt)))
            continue;
        for (int trial = 0; trial < 24; trial++) {
            weft_scope_push();
            int ndim, dims[WEFT_MAX_DIMS];
            int64_t shape[WEFT_MAX_DIMS], oshape[WEFT_MAX_DIMS];
            bool mask[WEFT_MAX_DIMS];
            random_shape(&ndim, shape, 4, 5, &st);
            if (trial % 8 == 7)
                shape[trial % ndim] = 0; /* empty input */
            int ndims = random_dims(ndim, dims, mask, &st);
            bool keepdim = trial % 3 == 1;
            double correction = trial % 4 == 2 ? 0 : 1;
            enum layout layout = (enum layout)(trial % LAYOUT_COUNT);
            weft_tensor *t = make_input(ndim, shape, (enum weft_dtype)dt, layout, op->lo, op->hi, &st);
            double *x = read_all(t);
            weft_tensor *r = run_op(op, t, ndims, dims, keepdim, correction);
            cr_assert_not_null(r, "%s %s: %s", op->name, weft_dtype_name(dt), weft_error_message());
            cr_assert_eq(r->dtype, expected_dtype(op, (enum weft_dtype)dt), "%s: dtype %s", op->name,
                         weft_dtype_name(r->dtype));
            tu_assert_shape(r, reduced_shape(ndim, shape, mask, keepdim, oshape), oshape);
            double expected[4096];
            int64_t nout = ref_reduce(op->ref, x, ndim, shape, mask, correction, expected);
            if (strcmp(op->name, "std") == 0)
                for (int64_t o = 0; o < nout; o++)
                    expected[o] = sqrt(expected[o]);
            double R = (double)numel_of(ndim, shape) / (double)(nout ? nout : 1);
            double atol = rtol_of(r->dtype) * (op->ref == REF_SUM ? 2 * R : 1);
            tu_assert_close(r, expected, nout, rtol_of(r->dtype), atol);
            free(x);
            weft_scope_pop();
        }
    }
}

Test(reduce, sum_matches_reference_for_every_dtype_layout_and_dim_set)
{
    struct sweep_op op = {"sum", REF_SUM, WEFT_DTYPES_ALL, -50, 50};
    sweep(&op, 1);
}

Test(reduce, mean_matches_reference_for_floating_dtypes)
{
    struct sweep_op op = {"mean", REF_MEAN, WEFT_DTYPES_FLOATING, -2, 2};
    sweep(&op, 2);
}

Test(reduce, prod_matches_reference_for_every_dtype)
{
    struct sweep_op op = {"prod", REF_PROD, WEFT_DTYPES_ALL, -2, 3};
    sweep(&op, 3);
}

Test(reduce, var_and_std_match_reference_with_both_corrections)
{
    struct sweep_op var = {"var", REF_VAR, WEFT_DTYPES_FLOATING, -2, 2};
    struct sweep_op std = {"std", REF_VAR, WEFT_DTYPES_FLOATING, -2, 2};
    sweep(&var, 4);
    sweep(&std, 5);
}

Test(reduce, all_and_any_match_reference_for_every_dtype)
{
    struct sweep_op all = {"all", REF_ALL, WEFT_DTYPES_ALL, 0, 1.3};
    struct sweep_op any = {"any", REF_ANY, WEFT_DTYPES_ALL, 0, 1.3};
    sweep(&all, 6);
    sweep(&any, 7);
}

/* ---- max / min / argmax / argmin ----------------------------------------------------- */

Test(reduce, max_min_and_their_indices_match_reference_along_every_dim)
{
    uint64_t st = 8;
    for (int dt = 0; dt < WEFT_DTYPE_COUNT; dt++) {
        for (int trial = 0; trial < 16; trial++) {
            weft_scope_push();
            int ndim;
            int64_t shape[WEFT_MAX_DIMS];
            random_shape(&ndim, shape, 4, 5, &st);
            /* few distinct values, so ties and first occurrences matter */
            weft_tensor *t = make_input(ndim, shape, (enum weft_dtype)dt,
                                        (enum layout)(trial % LAYOUT_COUNT), -3, 3, &st);
            double *x = read_all(t);
            bool all[WEFT_MAX_DIMS] = {true, true, true, true, true, true, true, true};
            double e[4096], ei[4096];
            ref_reduce(REF_MAX, x, ndim, shape, all, 0, e);
            tu_assert_close(weft_max(t), e, 1, 0, 0);
            ref_reduce(REF_MIN, x, ndim, shape, all, 0, e);
            tu_assert_close(weft_min(t), e, 1, 0, 0);
            if (dt != WEFT_BOOL) {
                ref_arg(true, x, ndim, shape, all, ei);
                tu_assert_close(weft_argmax_all(t), ei, 1, 0, 0);
                ref_arg(false, x, ndim, shape, all, ei);
                tu_assert_close(weft_argmin_all(t), ei, 1, 0, 0);
            }
            for (int d = 0; d < ndim; d++) {
                bool mask[WEFT_MAX_DIMS] = {false};
                mask[d] = true;
                bool keepdim = (trial + d) % 2 == 1;
                int64_t oshape[WEFT_MAX_DIMS];
                int ond = reduced_shape(ndim, shape, mask, keepdim, oshape);
                for (int is_max = 0; is_max < 2; is_max++) {
                    weft_tensor *values, *indices;
                    int rc = is_max ? weft_max_dim(t, d, keepdim, &values, &indices)
                                    : weft_min_dim(t, d - ndim, keepdim, &values, &indices);
                    cr_assert_eq(rc, 0, "%s", weft_error_message());
                    int64_t nout = ref_reduce(is_max ? REF_MAX : REF_MIN, x, ndim, shape, mask, 0, e);
                    ref_arg(is_max, x, ndim, shape, mask, ei);
                    tu_assert_shape(values, ond, oshape);
                    tu_assert_shape(indices, ond, oshape);
                    cr_assert_eq(values->dtype, dt);
                    cr_assert_eq(indices->dtype, WEFT_I64);
                    tu_assert_close(values, e, nout, 0, 0);
                    tu_assert_close(indices, ei, nout, 0, 0);
                    if (dt == WEFT_BOOL)
                        continue;
                    weft_tensor *arg = is_max ? weft_argmax(t, d, keepdim) : weft_argmin(t, d, keepdim);
                    tu_assert_shape(arg, ond, oshape);
                    tu_assert_close(arg, ei, nout, 0, 0);
                }
            }
            free(x);
            weft_scope_pop();
        }
    }
}

Test(reduce, max_dim_accepts_null_for_the_output_it_does_not_need)
{
    weft_scope_push();
    const double v[] = {1, 7, 3, 9, 2, 9};
    weft_tensor *t = tu_tensor(2, (int64_t[]){2, 3}, v, WEFT_F32);
    weft_tensor *values = NULL, *indices = NULL;
    cr_assert_eq(weft_max_dim(t, 1, false, &values, NULL), 0);
    tu_assert_close(values, (double[]){7, 9}, 2, 0, 0);
    cr_assert_eq(weft_min_dim(t, 1, true, NULL, &indices), 0);
    tu_assert_shape(indices, 2, (int64_t[]){2, 1});
    tu_assert_close(indices, (double[]){0, 1}, 2, 0, 0);
    weft_scope_pop();
}

Test(reduce, nan_propagates_through_max_min_and_argmax_reports_the_first_nan)
{
    weft_scope_push();
    const double v[] = {1, NAN, 5, NAN, 2, 8, -1, 0};
    weft_tensor *t = tu_tensor(2, (int64_t[]){2, 4}, v, WEFT_F32);
    tu_assert_close(weft_max(t), (double[]){NAN}, 1, 0, 0);
    tu_assert_close(weft_min(t), (double[]){NAN}, 1, 0, 0);
    tu_assert_close(weft_argmax_all(t), (double[]){1}, 1, 0, 0);
    tu_assert_close(weft_argmin_all(t), (double[]){1}, 1, 0, 0);
    weft_tensor *values, *indices;
    cr_assert_eq(weft_max_dim(t, 1, false, &values, &indices), 0);
    tu_assert_close(values, (double[]){NAN, 8}, 2, 0, 0);
    tu_assert_close(indices, (double[]){1, 1}, 2, 0, 0);
    cr_assert_eq(weft_min_dim(t, 0, false, &values, &indices), 0);
    tu_assert_close(values, (double[]){1, NAN, -1, NAN}, 4, 0, 0);
    tu_assert_close(indices, (double[]){0, 0, 1, 0}, 4, 0, 0);
    tu_assert_close(weft_sum(t, 0, NULL, false), (double[]){NAN}, 1, 0, 0);
    tu_assert_close(weft_any(t, 0, NULL, false), (double[]){1}, 1, 0, 0); /* nan is true */
    weft_scope_pop();
}

Test(reduce, argmax_reports_the_first_of_equal_maxima)
{
    weft_scope_push();
    const double v[] = {3, 1, 3, 3, 0, 3};
    weft_tensor *t = tu_tensor(1, (int64_t[]){6}, v, WEFT_I32);
    tu_assert_close(weft_argmax_all(t), (double[]){0}, 1, 0, 0);
    tu_assert_close(weft_argmin(t, 0, false), (double[]){4}, 1, 0, 0);
    weft_scope_pop();
}

/* ---- kernel paths and numerics --------------------------------------------------------- */

/* Sum over dim 0 of a tall contiguous matrix takes the column path: blocks of outputs that
 * add whole rows. 150 columns is two full blocks and a partial one. */
Test(reduce, leading_dim_reductions_of_contiguous_matrices_match_reference)
{
    weft_scope_push();
    uint64_t st = 10;
    const int64_t shape[2] = {3001, 150};
    weft_tensor *t = make_input(2, shape, WEFT_F64, CONTIGUOUS, -1, 1, &st);
    double *x = read_all(t);
    bool mask[WEFT_MAX_DIMS] = {true, false};
    double e[150], ei[150];
    int d0 = 0;
    ref_reduce(REF_SUM, x, 2, shape, mask, 0, e);
    tu_assert_close(weft_sum(t, 1, &d0, false), e, 150, 1e-12, 1e-12);
    ref_reduce(REF_VAR, x, 2, shape, mask, 1, e);
    tu_assert_close(weft_var(t, 1, &d0, 1, false), e, 150, 1e-12, 1e-12);
    ref_reduce(REF_MIN, x, 2, shape, mask, 0, e);
    ref_arg(false, x, 2, shape, mask, ei);
    weft_tensor *values, *indices;
    cr_assert_eq(weft_min_dim(t, 0, false, &values, &indices), 0);
    tu_assert_close(values, e, 150, 0, 0);
    tu_assert_close(indices, ei, 150, 0, 0);
    weft_tensor *f = weft_to_dtype(t, WEFT_F32);
    ref_reduce(REF_PROD, x, 2, (int64_t[]){4, 150}, mask, 0, e);
    tu_assert_close(weft_prod(weft_narrow(t, 0, 0, 4), 1, &d0, false), e, 150, 1e-12, 0);
    ref_reduce(REF_MEAN, x, 2, shape, mask, 0, e);
    tu_assert_close(weft_mean(f, 1, &d0, true), e, 150, 1e-5, 1e-6);
    free(x);
    weft_scope_pop();
}

/* A full reduction of a large tensor is split into chunks across threads; partial results
 * must combine in order (first maximum wins) and match the reference. */
Test(reduce, large_full_reductions_split_across_threads_keep_first_occurrence)
{
    weft_scope_push();
    int64_t n = 300007;
    double *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++)
        v[i] = (double)((i * 7919) % 1000);
    v[123456] = 5000;
    v[299999] = 5000;
    v[1000] = -7;
    v[250000] = -7;
    weft_tensor *t = tu_tensor(1, &n, v, WEFT_I32);
    double sum = 0;
    for (int64_t i = 0; i < n; i++)
        sum += v[i];
    tu_assert_close(weft_sum(t, 0, NULL, false), &sum, 1, 0, 0);
    tu_assert_close(weft_argmax_all(t), (double[]){123456}, 1, 0, 0);
    tu_assert_close(weft_argmin(t, 0, false), (double[]){1000}, 1, 0, 0);
    tu_assert_close(weft_max(t), (double[]){5000}, 1, 0, 0);
    weft_tensor *f = weft_to_dtype(t, WEFT_F64);
    double mean = sum / n, var = 0;
    for (int64_t i = 0; i < n; i++)
        var += (v[i] - mean) * (v[i] - mean);
    var /= n - 1;
    tu_assert_close(weft_var(f, 0, NULL, 1, false), &var, 1, 1e-12, 0);
    tu_assert_close(weft_mean(f, 0, NULL, false), &mean, 1, 1e-12, 0);
    free(v);
    weft_scope_pop();
}

/* 0.1f added 4M times: a running float sum drifts by percents, a pairwise/cascade sum
 * stays within a few float ulps of the exact value. Both the line and the column path. */
Test(reduce, long_float32_sums_stay_accurate)
{
    weft_scope_push();
    const int64_t n = 1 << 22;
    weft_tensor *t = weft_full(1, &n, 0.1, WEFT_F32, WEFT_CPU);
    double exact = (double)0.1f * (double)n;
    tu_assert_close(weft_sum(t, 0, NULL, false), &exact, 1, 1e-6, 0);
    weft_tensor *tall = weft_full(2, (int64_t[]){n / 2, 2}, 0.1, WEFT_F32, WEFT_CPU);
    double col[2] = {exact / 2, exact / 2};
    int d0 = 0;
    tu_assert_close(weft_sum(tall, 1, &d0, false), col, 2, 1e-6, 0);
    weft_tensor *wide = weft_full(2, (int64_t[]){2, n / 2}, 0.1, WEFT_F32, WEFT_CPU);
    int d1 = 1;
    tu_assert_close(weft_sum(wide, 1, &d1, false), col, 2, 1e-6, 0);
    weft_scope_pop();
}

Test(reduce, sums_of_bool_and_integers_are_int64_and_wrap_like_int64)
{
    weft_scope_push();
    const int64_t big[] = {INT64_MAX, 1, 5};
    weft_tensor *t = weft_from_host(big, 1, (int64_t[]){3}, WEFT_I64, WEFT_CPU);
    weft_tensor *s = weft_sum(t, 0, NULL, false);
    int64_t got;
    cr_assert_eq(weft_tensor_read(s, &got, sizeof got), 0);
    cr_assert_eq(got, INT64_MIN + 5);
    /* values beyond 2^53 keep every bit through max */
    const int64_t exact[] = {(1ll << 60) + 1, (1ll << 60) + 3, (1ll << 60) + 2};
    weft_tensor *e = weft_from_host(exact, 1, (int64_t[]){3}, WEFT_I64, WEFT_CPU);
    cr_assert_eq(weft_tensor_read(weft_max(e), &got, sizeof got), 0);
    cr_assert_eq(got, (1ll << 60) + 3);
    weft_tensor *b = tu_tensor(1, (int64_t[]){4}, (double[]){1, 0, 1, 1}, WEFT_BOOL);
    weft_tensor *bs = weft_sum(b, 0, NULL, false);
    cr_assert_eq(bs->dtype, WEFT_I64);
    tu_assert_close(bs, (double[]){3}, 1, 0, 0);
    weft_tensor *u = tu_tensor(1, (int64_t[]){3}, (double[]){200, 100, 250}, WEFT_U8);
    tu_assert_close(weft_sum(u, 0, NULL, false), (double[]){550}, 1, 0, 0);
    tu_assert_close(weft_prod(u, 0, NULL, false), (double[]){5000000}, 1, 0, 0);
    weft_scope_pop();
}

Test(reduce, empty_reductions_give_the_identity_or_nan)
{
    weft_scope_push();
    weft_tensor *t = weft_zeros(2, (int64_t[]){0, 3}, WEFT_F32, WEFT_CPU);
    int d0 = 0, d1 = 1;
    const double zeros[3] = {0, 0, 0}, ones[3] = {1, 1, 1}, nans[3] = {NAN, NAN, NAN};
    tu_assert_close(weft_sum(t, 1, &d0, false), zeros, 3, 0, 0);
    tu_assert_close(weft_prod(t, 1, &d0, false), ones, 3, 0, 0);
    tu_assert_close(weft_mean(t, 1, &d0, false), nans, 3, 0, 0);
    tu_assert_close(weft_var(t, 1, &d0, 1, false), nans, 3, 0, 0);
    tu_assert_close(weft_all(t, 1, &d0, false), ones, 3, 0, 0);
    tu_assert_close(weft_any(t, 1, &d0, false), zeros, 3, 0, 0);
    tu_assert_close(weft_sum(t, 0, NULL, false), zeros, 1, 0, 0);
    /* reducing the non-empty dim of an empty tensor gives an empty result */
    weft_tensor *values, *indices;
    cr_assert_eq(weft_max_dim(t, 1, false, &values, &indices), 0);
    tu_assert_shape(values, 1, (int64_t[]){0});
    tu_assert_shape(weft_sum(t, 1, &d1, true), 2, (int64_t[]){0, 1});
    weft_scope_pop();
}

Test(reduce, zero_dim_inputs_reduce_to_themselves)
{
    weft_scope_push();
    weft_tensor *t = weft_scalar_tensor(4.5, WEFT_F64, WEFT_CPU);
    int d = -1;
    weft_tensor *s = weft_sum(t, 1, &d, true);
    tu_assert_shape(s, 0, NULL);
    tu_assert_close(s, (double[]){4.5}, 1, 0, 0);
    tu_assert_close(weft_mean(t, 0, NULL, false), (double[]){4.5}, 1, 0, 0);
    tu_assert_close(weft_var(t, 0, NULL, 1, false), (double[]){NAN}, 1, 0, 0);
    tu_assert_close(weft_var(t, 0, NULL, 0, false), (double[]){0}, 1, 0, 0);
    weft_tensor *values, *indices;
    cr_assert_eq(weft_max_dim(t, 0, true, &values, &indices), 0);
    tu_assert_shape(values, 0, NULL);
    tu_assert_close(values, (double[]){4.5}, 1, 0, 0);
    tu_assert_close(indices, (double[]){0}, 1, 0, 0);
    tu_assert_close(weft_argmax(t, -1, false), (double[]){0}, 1, 0, 0);
    weft_scope_pop();
}

Test(reduce, results_without_a_scope_are_owned_by_the_caller)
{
    weft_tensor *t = weft_ones(2, (int64_t[]){3, 4}, WEFT_F32, WEFT_CPU);
    int d = 1;
    weft_tensor *s = weft_sum(t, 1, &d, true);
    cr_assert_not_null(s);
    cr_assert_eq(s->refcount, 1);
    tu_assert_close(s, (double[]){4, 4, 4}, 3, 0, 0);
    weft_tensor *values, *indices;
    cr_assert_eq(weft_max_dim(t, 0, false, &values, &indices), 0);
    cr_assert_eq(values->refcount, 1);
    cr_assert_eq(indices->refcount, 1);
    weft_tensor_release(values);
    weft_tensor_release(indices);
    weft_tensor_release(s);
    weft_tensor_release(t);
}

/* ---- errors ----------------------------------------------------------------------------- */

Test(reduce, errors_use_pytorch_wording)
{
    weft_scope_push();
    weft_tensor *f = weft_zeros(2, (int64_t[]){2, 3}, WEFT_F32, WEFT_CPU);
    weft_tensor *i = weft_zeros(1, (int64_t[]){3}, WEFT_I64, WEFT_CPU);
    weft_tensor *empty = weft_zeros(2, (int64_t[]){2, 0}, WEFT_F32, WEFT_CPU);
    int dup[2] = {1, -1}, bad = 2;
    cr_assert_null(weft_sum(f, 2, dup, false));
    tu_assert_error(WEFT_ERR_RUNTIME, "dim 1 appears multiple times in the list of dims");
    cr_assert_null(weft_mean(f, 1, &bad, false));
    tu_assert_error(WEFT_ERR_INDEX, "Dimension out of range (expected to be in range of [-2, 1], but got 2)");
    cr_assert_null(weft_mean(i, 0, NULL, false));
    tu_assert_error(WEFT_ERR_RUNTIME,
                    "mean(): could not infer output dtype. Input dtype must be either a floating "
                    "point or complex dtype. Got: Long");
    cr_assert_null(weft_var(i, 0, NULL, 1, false));
    tu_assert_error(WEFT_ERR_RUNTIME, "std and var only support floating point and complex dtypes");
    cr_assert_null(weft_std(i, 0, NULL, 1, false));
    tu_assert_error(WEFT_ERR_RUNTIME, "std and var only support floating point and complex dtypes");
    cr_assert_null(weft_max(empty));
    tu_assert_error(WEFT_ERR_RUNTIME,
                    "max(): Expected reduction dim to be specified for input.numel() == 0. Specify "
                    "the reduction dim with the 'dim' argument.");
    cr_assert_null(weft_min(empty));
    tu_assert_error(WEFT_ERR_RUNTIME, "min(): Expected reduction dim to be specified");
    weft_tensor *values, *indices;
    cr_assert_lt(weft_max_dim(empty, -1, false, &values, &indices), 0);
    tu_assert_error(WEFT_ERR_INDEX, "max(): Expected reduction dim 1 to have non-zero size.");
    cr_assert_null(weft_argmin(empty, 1, false));
    tu_assert_error(WEFT_ERR_INDEX, "argmin(): Expected reduction dim 1 to have non-zero size.");
    cr_assert_null(weft_argmax_all(empty));
    tu_assert_error(WEFT_ERR_RUNTIME,
                    "argmax(): Expected reduction dim to be specified for input.numel() == 0.");
    weft_tensor *b = weft_zeros(1, (int64_t[]){3}, WEFT_BOOL, WEFT_CPU);
    cr_assert_null(weft_argmax(b, 0, false));
    tu_assert_error(WEFT_ERR_NOT_IMPLEMENTED, "\"argmax\" not implemented for 'Bool'");
    /* NULL inputs pass through without a new error */
    cr_assert_null(weft_sum(NULL, 0, NULL, false));
    cr_assert_lt(weft_max_dim(NULL, 0, false, &values, &indices), 0);
    tu_assert_no_error();
    weft_scope_pop();
}

/* ---- softmax ------------------------------------------------------------------------------ */

static void ref_softmax(bool take_log, const double *x, int ndim, const int64_t *shape, int dim,
                        double *out)
{
    int64_t inner = 1, len = shape[dim], outer = 1;
    for (int d = dim + 1; d < ndim; d++)
        inner *= shape[d];
    for (int d = 0; d < dim; d++)
        outer *= shape[d];
    for (int64_t o = 0; o < outer; o++)
        for (int64_t in = 0; in < inner; in++) {
            const double *line = x + o * len * inner + in;
            double mx = -INFINITY, sum = 0;
            for (int64_t l = 0; l < len; l++)
                mx = fmax(mx, line[l * inner]);
            for (int64_t l = 0; l < len; l++)
                sum += exp(line[l * inner] - mx);
            for (int64_t l = 0; l < len; l++) {
                double v = line[l * inner] - mx;
                out[o * len * inner + in + l * inner] = take_log ? v - log(sum) : exp(v) / sum;
            }
        }
}

Test(reduce, softmax_and_log_softmax_match_reference_along_every_dim)
{
    uint64_t st = 20;
    const enum weft_dtype dts[] = {WEFT_F16, WEFT_BF16, WEFT_F32, WEFT_F64};
    for (size_t k = 0; k < 4; k++) {
        enum weft_dtype dt = dts[k];
        for (int trial = 0; trial < 12; trial++) {
            weft_scope_push();
            int ndim;
            int64_t shape[WEFT_MAX_DIMS];
            random_shape(&ndim, shape, 4, 6, &st);
            if (trial == 11)
                shape[0] = 0;
            weft_tensor *t = make_input(ndim, shape, dt, (enum layout)(trial % LAYOUT_COUNT), -8, 8, &st);
            double *x = read_all(t);
            int64_t n = numel_of(ndim, shape);
            double *e = malloc((size_t)(n ? n : 1) * sizeof *e);
            double tol = dt == WEFT_F64 ? 1e-12 : dt == WEFT_F32 ? 1e-6 : dt == WEFT_F16 ? 2e-3 : 1e-2;
            for (int d = 0; d < ndim; d++)
                for (int take_log = 0; take_log < 2; take_log++) {
                    weft_tensor *r = take_log ? weft_log_softmax(t, d) : weft_softmax(t, d - ndim);
                    cr_assert_not_null(r, "%s", weft_error_message());
                    cr_assert_eq(r->dtype, dt);
                    tu_assert_shape(r, ndim, shape);
                    ref_softmax(take_log, x, ndim, shape, d, e);
                    tu_assert_close(r, e, n, take_log ? tol : 4 * tol, take_log ? 8 * tol : tol);
                }
            free(e);
            free(x);
            weft_scope_pop();
        }
    }
}

Test(reduce, softmax_is_stable_for_large_inputs_and_handles_infinities)
{
    weft_scope_push();
    weft_tensor *t = tu_tensor(1, (int64_t[]){3}, (double[]){1000, 1001, 1002}, WEFT_F32);
    double e[3];
    ref_softmax(false, (double[]){0, 1, 2}, 1, (int64_t[]){3}, 0, e);
    tu_assert_close(weft_softmax(t, 0), e, 3, 1e-6, 1e-7);
    ref_softmax(true, (double[]){0, 1, 2}, 1, (int64_t[]){3}, 0, e);
    tu_assert_close(weft_log_softmax(t, 0), e, 3, 1e-6, 1e-6);
    weft_tensor *m = tu_tensor(1, (int64_t[]){3}, (double[]){-INFINITY, 0, -INFINITY}, WEFT_F64);
    tu_assert_close(weft_softmax(m, 0), (double[]){0, 1, 0}, 3, 0, 0);
    tu_assert_close(weft_log_softmax(m, 0), (double[]){-INFINITY, 0, -INFINITY}, 3, 0, 0);
    weft_tensor *all = tu_tensor(1, (int64_t[]){2}, (double[]){-INFINITY, -INFINITY}, WEFT_F32);
    tu_assert_close(weft_softmax(all, 0), (double[]){NAN, NAN}, 2, 0, 0);
    weft_tensor *nan = tu_tensor(1, (int64_t[]){2}, (double[]){NAN, 1}, WEFT_F32);
    tu_assert_close(weft_softmax(nan, 0), (double[]){NAN, NAN}, 2, 0, 0);
    weft_tensor *s = weft_scalar_tensor(3, WEFT_F32, WEFT_CPU);
    tu_assert_close(weft_softmax(s, 0), (double[]){1}, 1, 0, 0);
    tu_assert_close(weft_log_softmax(s, -1), (double[]){0}, 1, 0, 0);
    weft_scope_pop();
}

Test(reduce, long_softmax_lines_run_in_parallel_and_match_reference)
{
    weft_scope_push();
    uint64_t st = 21;
    const int64_t shape[2] = {64, 2000};
    weft_tensor *t = make_input(2, shape, WEFT_F32, TRANSPOSED, -5, 5, &st);
    double *x = read_all(t);
    double *e = malloc(64 * 2000 * sizeof *e);
    ref_softmax(false, x, 2, shape, 1, e);
    tu_assert_close(weft_softmax(t, 1), e, 64 * 2000, 1e-5, 1e-8);
    ref_softmax(true, x, 2, shape, 0, e);
    tu_assert_close(weft_log_softmax(t, 0), e, 64 * 2000, 1e-5, 1e-5);
    free(e);
    free(x);
    weft_scope_pop();
}

/* Softmax over dim 0 of a contiguous matrix walks blocks of neighbouring lines row by
 * row: 700 columns are a full block and a partial one. */
Test(reduce, softmax_over_a_leading_dim_matches_reference)
{
    uint64_t st = 22;
    const enum weft_dtype dts[] = {WEFT_F32, WEFT_F64, WEFT_BF16};
    for (size_t k = 0; k < 3; k++) {
        weft_scope_push();
        const int64_t shape[2] = {300, 700};
        weft_tensor *t = make_input(2, shape, dts[k], CONTIGUOUS, -20, 20, &st);
        double *x = read_all(t);
        double *e = malloc(300 * 700 * sizeof *e);
        double tol = dts[k] == WEFT_BF16 ? 1e-2 : 1e-6;
        ref_softmax(false, x, 2, shape, 0, e);
        tu_assert_close(weft_softmax(t, 0), e, 300 * 700, 4 * tol, tol * 1e-2);
        ref_softmax(true, x, 2, shape, 0, e);
        tu_assert_close(weft_log_softmax(t, -2), e, 300 * 700, tol, 8 * tol);
        free(e);
        free(x);
        weft_scope_pop();
    }
}

/* Long contiguous lines take the vectorised max/argmax path; ties across its lanes and a
 * NaN must still report the first occurrence. */
Test(reduce, argmax_of_long_float_lines_reports_first_occurrences)
{
    weft_scope_push();
    double v[1000];
    for (int i = 0; i < 1000; i++)
        v[i] = (double)((i * 37) % 101);
    v[48] = 500; /* lane 0 */
    v[33] = 500; /* lane 1, earlier */
    v[999] = 500;
    v[20] = -5;
    v[4] = -5;
    weft_tensor *t = tu_tensor(1, (int64_t[]){1000}, v, WEFT_F32);
    tu_assert_close(weft_argmax(t, 0, false), (double[]){33}, 1, 0, 0);
    tu_assert_close(weft_argmin(t, 0, false), (double[]){4}, 1, 0, 0);
    v[700] = NAN;
    v[301] = NAN;
    weft_tensor *n = tu_tensor(1, (int64_t[]){1000}, v, WEFT_F64);
    tu_assert_close(weft_argmax(n, 0, false), (double[]){301}, 1, 0, 0);
    tu_assert_close(weft_argmin(n, 0, false), (double[]){301}, 1, 0, 0);
    weft_scope_pop();
}

Test(reduce, softmax_of_integers_is_not_implemented)
{
    weft_scope_push();
    weft_tensor *i = weft_zeros(2, (int64_t[]){2, 3}, WEFT_I64, WEFT_CPU);
    cr_assert_null(weft_softmax(i, 1));
    tu_assert_error(WEFT_ERR_NOT_IMPLEMENTED, "\"softmax_lastdim_kernel_impl\" not implemented for 'Long'");
    cr_assert_null(weft_softmax(i, 0));
    tu_assert_error(WEFT_ERR_NOT_IMPLEMENTED, "\"softmax_kernel_impl\" not implemented for 'Long'");
    weft_tensor *b = weft_zeros(1, (int64_t[]){2}, WEFT_BOOL, WEFT_CPU);
    cr_assert_null(weft_log_softmax(b, -1));
    tu_assert_error(WEFT_ERR_NOT_IMPLEMENTED,
                    "\"log_softmax_lastdim_kernel_impl\" not implemented for 'Bool'");
    cr_assert_null(weft_softmax(i, 2));
    tu_assert_error(WEFT_ERR_INDEX, "Dimension out of range (expected to be in range of [-2, 1], but got 2)");
    weft_scope_pop();
}
