/* tests/test_index.c: cat, stack, index_select, gather, scatter_add, one_hot.
 *
 * Each op runs on random shapes along every dim, for every dtype (every itemsize of the
 * copying kernels), with contiguous and non-contiguous inputs, against a plain loop over
 * the values the inputs really hold. Named tests cover promotion, PyTorch's legacy empty
 * tensors in cat, duplicate indices in scatter_add, in-place rules and every error text. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

TestSuite(index, .init = tu_setup, .fini = tu_teardown);

static int64_t numel_of(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    return n;
}

static double *read_all(const weft_tensor *t)
{
    int64_t n = weft_tensor_numel(t);
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    tu_read(t, v);
    return v;
}

/* Random whole values that every dtype holds exactly (0/1 for bool). */
static weft_tensor *random_tensor(int ndim, const int64_t *shape, enum weft_dtype dt,
                                  bool transposed, uint64_t *st)
{
    int64_t base[WEFT_MAX_DIMS];
    for (int i = 0; i < ndim; i++)
        base[i] = transposed ? shape[ndim - 1 - i] : shape[i];
    int64_t n = numel_of(ndim, base);
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    tu_random_values(v, n, 0, dt == WEFT_BOOL ? 2 : 100, st);
    for (int64_t i = 0; i < n; i++)
        v[i] = floor(v[i]);
    weft_tensor *t = tu_tensor(ndim, base, v, dt);
    free(v);
    if (transposed && ndim > 1) {
        int perm[WEFT_MAX_DIMS];
        for (int i = 0; i < ndim; i++)
            perm[i] = ndim - 1 - i;
        t = weft_permute(t, ndim, perm);
    }
    return t;
}

static weft_tensor *index_tensor(int ndim, const int64_t *shape, const int64_t *values)
{
    weft_tensor *t = weft_from_host(values, ndim, shape, WEFT_I64, WEFT_CPU);
    cr_assert_not_null(t, "%s", weft_error_message());
    return t;
}

static void random_indices(int64_t *idx, int64_t n, int64_t bound, uint64_t *st)
{
    double *r = malloc((size_t)(n ? n : 1) * sizeof *r);
    tu_random_values(r, n, 0, (double)bound, st);
    for (int64_t i = 0; i < n; i++)
        idx[i] = (int64_t)r[i];
    free(r);
}

/* Row-major position -> coordinates and back. */
static void coords_of(int64_t i, int ndim, const int64_t *shape, int64_t *c)
{
    for (int d = ndim - 1; d >= 0; d--) {
        c[d] = i % shape[d];
        i /= shape[d];
    }
}

static int64_t offset_of(const int64_t *c, int ndim, const int64_t *shape)
{
    int64_t o = 0;
    for (int d = 0; d < ndim; d++)
        o = o * shape[d] + c[d];
    return o;
}

/* ---- cat / stack ------------------------------------------------------------------------ */

Test(index, cat_joins_along_every_dim_for_every_dtype)
{
    uint64_t st = 1;
    for (int dt = 0; dt < WEFT_DTYPE_COUNT; dt++)
        for (int d = 0; d < 3; d++) {
            weft_scope_push();
            int64_t shape[3] = {2, 3, 4}, sizes[3] = {1, 3, 0};
            weft_tensor *parts[3];
            double *vals[3];
            for (int p = 0; p < 3; p++) {
                int64_t s[3] = {shape[0], shape[1], shape[2]};
                s[d] = sizes[p];
                parts[p] = random_tensor(3, s, (enum weft_dtype)dt, p == 1, &st);
                vals[p] = read_all(parts[p]);
            }
            weft_tensor *r = weft_cat(3, parts, d - 3);
            cr_assert_not_null(r, "%s", weft_error_message());
            int64_t oshape[3] = {2, 3, 4};
            oshape[d] = 4;
            tu_assert_shape(r, 3, oshape);
            cr_assert_eq(r->dtype, dt);
            double e[64];
            for (int64_t i = 0; i < numel_of(3, oshape); i++) {
                int64_t c[3];
                coords_of(i, 3, oshape, c);
                int p = 0;
                while (c[d] >= sizes[p]) {
                    c[d] -= sizes[p];
                    p++;
                }
                int64_t s[3] = {shape[0], shape[1], shape[2]};
                s[d] = sizes[p];
                e[i] = vals[p][offset_of(c, 3, s)];
            }
            tu_assert_close(r, e, numel_of(3, oshape), 0, 0);
            for (int p = 0; p < 3; p++)
                free(vals[p]);
            weft_scope_pop();
        }
}

Test(index, cat_promotes_dtypes_and_skips_legacy_empty_vectors)
{
    weft_scope_push();
    weft_tensor *i = tu_tensor(2, (int64_t[]){1, 2}, (double[]){1, 2}, WEFT_I64);
    weft_tensor *f = tu_tensor(2, (int64_t[]){1, 2}, (double[]){0.5, 1.5}, WEFT_F32);
    weft_tensor *legacy = weft_zeros(1, (int64_t[]){0}, WEFT_F64, WEFT_CPU);
    weft_tensor *r = weft_cat(3, (weft_tensor *[]){i, legacy, f}, 0);
    cr_assert_not_null(r, "%s", weft_error_message());
    cr_assert_eq(r->dtype, WEFT_F64); /* every input takes part in promotion */
    tu_assert_shape(r, 2, (int64_t[]){2, 2});
    tu_assert_close(r, (double[]){1, 2, 0.5, 1.5}, 4, 0, 0);
    weft_tensor *b = tu_tensor(1, (int64_t[]){2}, (double[]){1, 0}, WEFT_BOOL);
    weft_tensor *u = tu_tensor(1, (int64_t[]){1}, (double[]){200}, WEFT_U8);
    weft_tensor *bu = weft_cat(2, (weft_tensor *[]){b, u}, 0);
    cr_assert_eq(bu->dtype, WEFT_U8);
    tu_assert_close(bu, (double[]){1, 0, 200}, 3, 0, 0);
    weft_tensor *only = weft_cat(2, (weft_tensor *[]){legacy, legacy}, 0);
    tu_assert_shape(only, 1, (int64_t[]){0});
    weft_scope_pop();
}

Test(index, stack_inserts_a_new_dim_at_every_position)
{
    weft_scope_push();
    weft_tensor *a = tu_tensor(2, (int64_t[]){2, 3}, (double[]){1, 2, 3, 4, 5, 6}, WEFT_F32);
    weft_tensor *b = weft_t(tu_tensor(2, (int64_t[]){3, 2}, (double[]){10, 40, 20, 50, 30, 60}, WEFT_F32));
    weft_tensor *r0 = weft_stack(2, (weft_tensor *[]){a, b}, 0);
    tu_assert_shape(r0, 3, (int64_t[]){2, 2, 3});
    tu_assert_close(r0, (double[]){1, 2, 3, 4, 5, 6, 10, 20, 30, 40, 50, 60}, 12, 0, 0);
    weft_tensor *r1 = weft_stack(2, (weft_tensor *[]){a, b}, 1);
    tu_assert_shape(r1, 3, (int64_t[]){2, 2, 3});
    tu_assert_close(r1, (double[]){1, 2, 3, 10, 20, 30, 4, 5, 6, 40, 50, 60}, 12, 0, 0);
    weft_tensor *r2 = weft_stack(2, (weft_tensor *[]){a, b}, -1);
    tu_assert_shape(r2, 3, (int64_t[]){2, 3, 2});
    tu_assert_close(r2, (double[]){1, 10, 2, 20, 3, 30, 4, 40, 5, 50, 6, 60}, 12, 0, 0);
    weft_tensor *s = weft_stack(2, (weft_tensor *[]){weft_scalar_tensor(1, WEFT_I64, WEFT_CPU),
                                                     weft_scalar_tensor(2, WEFT_I64, WEFT_CPU)}, 0);
    tu_assert_shape(s, 1, (int64_t[]){2});
    tu_assert_close(s, (double[]){1, 2}, 2, 0, 0);
    weft_scope_pop();
}

Test(index, cat_and_stack_errors_use_pytorch_wording)
{
    weft_scope_push();
    weft_tensor *a = weft_zeros(2, (int64_t[]){2, 3}, WEFT_F32, WEFT_CPU);
    weft_tensor *b = weft_zeros(2, (int64_t[]){3, 3}, WEFT_F32, WEFT_CPU);
    weft_tensor *c = weft_zeros(2, (int64_t[]){2, 4}, WEFT_F32, WEFT_CPU);
    weft_tensor *v = weft_zeros(1, (int64_t[]){3}, WEFT_F32, WEFT_CPU);
    cr_assert_null(weft_cat(2, (weft_tensor *[]){a, b}, 1));
    tu_assert_error(WEFT_ERR_RUNTIME,
                    "Sizes of tensors must match except in dimension 1. Expected size 2 but got size 3 "
                    "for tensor number 1 in the list.");
    cr_assert_null(weft_cat(0, NULL, 0));
    tu_assert_error(WEFT_ERR_RUNTIME, "torch.cat(): expected a non-empty list of Tensors");
    cr_assert_null(weft_cat(2, (weft_tensor *[]){a, v}, 0));
    tu_assert_error(WEFT_ERR_RUNTIME, "Tensors must have same number of dimensions: got 2 and 1");
    cr_assert_null(weft_cat(1, (weft_tensor *[]){weft_scalar_tensor(1, WEFT_F32, WEFT_CPU)}, 0));
    tu_assert_error(WEFT_ERR_RUNTIME, "zero-dimensional tensor (at position 0) cannot be concatenated");
    cr_assert_null(weft_cat(2, (weft_tensor *[]){a, a}, 2));
    tu_assert_error(WEFT_ERR_INDEX, "Dimension out of range (expected to be in range of [-2, 1], but got 2)");
    cr_assert_null(weft_stack(2, (weft_tensor *[]){a, c}, 0));
    tu_assert_error(WEFT_ERR_RUNTIME,
                    "stack expects each tensor to be equal size, but got [2, 3] at entry 0 and [2, 4] at entry 1");
    cr_assert_null(weft_stack(0, NULL, 0));
    tu_assert_error(WEFT_ERR_RUNTIME, "stack expects a non-empty TensorList");
    cr_assert_null(weft_cat(2, (weft_tensor *[]){a, NULL}, 0));
    tu_assert_no_error();
    weft_scope_pop();
}

/* ---- index_select --------------------------------------------------------------------------- */

Test(index, index_select_picks_slices_along_every_dim_for_every_itemsize)
{
    uint64_t st = 2;
    for (int dt = 0; dt < WEFT_DTYPE_COUNT; dt++)
        for (int d = 0; d < 3; d++)
            for (int transposed = 0; transposed < 2; transposed++) {
                weft_scope_push();
                int64_t shape[3] = {3, 4, 5}, idx[7];
                weft_tensor *t = random_tensor(3, shape, (enum weft_dtype)dt, transposed, &st);
                double *x = read_all(t);
                random_indices(idx, 7, shape[d], &st); /* duplicates likely */
                weft_tensor *index = index_tensor(1, (int64_t[]){7}, idx);
                if (transposed)
                    index = weft_to_dtype(index, WEFT_I32);
                weft_tensor *r = weft_index_select(t, d, index);
                cr_assert_not_null(r, "%s", weft_error_message());
                int64_t oshape[3] = {3, 4, 5};
                oshape[d] = 7;
                tu_assert_shape(r, 3, oshape);
                double e[7 * 20];
                for (int64_t i = 0; i < numel_of(3, oshape); i++) {
                    int64_t c[3];
                    coords_of(i, 3, oshape, c);
                    c[d] = idx[c[d]];
                    e[i] = x[offset_of(c, 3, shape)];
                }
                tu_assert_close(r, e, numel_of(3, oshape), 0, 0);
                free(x);
                weft_scope_pop();
            }
}

/* Past the parallel grain: rows of a long contiguous matrix and columns of a wide one. */
Test(index, large_index_selects_match_reference)
{
    weft_scope_push();
    uint64_t st = 3;
    int64_t shape[2] = {2000, 40}, idx[3000];
    weft_tensor *t = random_tensor(2, shape, WEFT_F32, false, &st);
    double *x = read_all(t);
    random_indices(idx, 3000, 2000, &st);
    weft_tensor *rows = weft_index_select(t, 0, index_tensor(1, (int64_t[]){3000}, idx));
    double *e = malloc(3000 * 40 * sizeof *e);
    for (int64_t i = 0; i < 3000; i++)
        for (int64_t j = 0; j < 40; j++)
            e[i * 40 + j] = x[idx[i] * 40 + j];
    tu_assert_close(rows, e, 3000 * 40, 0, 0);
    random_indices(idx, 3000, 40, &st);
    weft_tensor *cols = weft_index_select(t, 1, index_tensor(1, (int64_t[]){3000}, idx));
    double *e2 = malloc(2000 * 3000 * sizeof *e2);
    for (int64_t i = 0; i < 2000; i++)
        for (int64_t j = 0; j < 3000; j++)
            e2[i * 3000 + j] = x[i * 40 + idx[j]];
    tu_assert_close(cols, e2, 2000 * 3000, 0, 0);
    free(e);
    free(e2);
    free(x);
    weft_scope_pop();
}

Test(index, index_select_handles_empty_and_zero_dim_cases)
{
    weft_scope_push();
    weft_tensor *t = tu_tensor(2, (int64_t[]){2, 3}, (double[]){1, 2, 3, 4, 5, 6}, WEFT_I16);
    weft_tensor *none = weft_zeros(1, (int64_t[]){0}, WEFT_I64, WEFT_CPU);
    tu_assert_shape(weft_index_select(t, 1, none), 2, (int64_t[]){2, 0});
    weft_tensor *one = weft_scalar_tensor(2, WEFT_I64, WEFT_CPU);
    weft_tensor *r = weft_index_select(t, 1, one);
    tu_assert_shape(r, 2, (int64_t[]){2, 1});
    tu_assert_close(r, (double[]){3, 6}, 2, 0, 0);
    weft_tensor *zero = weft_zeros(1, (int64_t[]){1}, WEFT_I64, WEFT_CPU);
    weft_tensor *s = weft_index_select(weft_scalar_tensor(7, WEFT_F32, WEFT_CPU), 0, zero);
    tu_assert_shape(s, 0, NULL);
    tu_assert_close(s, (double[]){7}, 1, 0, 0);
    weft_scope_pop();
}

Test(index, index_select_errors_use_pytorch_wording)
{
    weft_scope_push();
    weft_tensor *t = weft_zeros(2, (int64_t[]){2, 3}, WEFT_F32, WEFT_CPU);
    weft_tensor *far = index_tensor(1, (int64_t[]){2}, (int64_t[]){0, 3});
    weft_tensor *neg = index_tensor(1, (int64_t[]){1}, (int64_t[]){-1});
    weft_tensor *mat = index_tensor(2, (int64_t[]){1, 1}, (int64_t[]){0});
    cr_assert_null(weft_index_select(t, 1, far));
    tu_assert_error(WEFT_ERR_INDEX, "index out of range in self");
    cr_assert_null(weft_index_select(t, 0, neg));
    tu_assert_error(WEFT_ERR_INDEX, "index out of range in self");
    cr_assert_null(weft_index_select(t, 0, mat));
    tu_assert_error(WEFT_ERR_INDEX, "index_select(): Index is supposed to be a vector");
    cr_assert_null(weft_index_select(t, 0, weft_zeros(1, (int64_t[]){1}, WEFT_F32, WEFT_CPU)));
    tu_assert_error(WEFT_ERR_INDEX, "index_select(): Expected dtype int32 or int64 for index");
    cr_assert_null(weft_index_select(t, 2, far));
    tu_assert_error(WEFT_ERR_INDEX, "Dimension out of range");
    weft_scope_pop();
}

/* ---- gather ------------------------------------------------------------------------------- */

Test(index, gather_matches_reference_along_every_dim_for_every_itemsize)
{
    uint64_t st = 4;
    for (int dt = 0; dt < WEFT_DTYPE_COUNT; dt++)
        for (int d = 0; d < 3; d++) {
            weft_scope_push();
            int64_t shape[3] = {3, 4, 5}, ishape[3] = {2, 3, 4}, idx[6 * 3 * 4];
            ishape[d] = 6; /* longer than self along dim, shorter elsewhere */
            weft_tensor *t = random_tensor(3, shape, (enum weft_dtype)dt, d == 1, &st);
            double *x = read_all(t);
            int64_t n = numel_of(3, ishape);
            random_indices(idx, n, shape[d], &st);
            weft_tensor *index = index_tensor(3, ishape, idx);
            weft_tensor *r = weft_gather(t, d - 3, index);
            cr_assert_not_null(r, "%s", weft_error_message());
            tu_assert_shape(r, 3, ishape);
            cr_assert_eq(r->dtype, dt);
            double e[6 * 3 * 4];
            for (int64_t i = 0; i < n; i++) {
                int64_t c[3];
                coords_of(i, 3, ishape, c);
                c[d] = idx[i];
                e[i] = x[offset_of(c, 3, shape)];
            }
            tu_assert_close(r, e, n, 0, 0);
            free(x);
            weft_scope_pop();
        }
}

Test(index, gather_with_a_transposed_index_matches_reference)
{
    weft_scope_push();
    weft_tensor *t = tu_tensor(2, (int64_t[]){2, 3}, (double[]){1, 2, 3, 4, 5, 6}, WEFT_F64);
    /* index [[0, 2], [1, 0]] stored transposed */
    weft_tensor *stored = index_tensor(2, (int64_t[]){2, 2}, (int64_t[]){0, 1, 2, 0});
    weft_tensor *r = weft_gather(t, 1, weft_t(stored));
    tu_assert_close(r, (double[]){1, 3, 5, 4}, 4, 0, 0);
    weft_scope_pop();
}

Test(index, gather_errors_use_pytorch_wording)
{
    weft_scope_push();
    weft_tensor *t = weft_zeros(2, (int64_t[]){2, 3}, WEFT_F32, WEFT_CPU);
    cr_assert_null(weft_gather(t, 1, index_tensor(2, (int64_t[]){1, 2}, (int64_t[]){0, 5})));
    tu_assert_error(WEFT_ERR_RUNTIME, "index 5 is out of bounds for dimension 1 with size 3");
    cr_assert_null(weft_gather(t, 0, index_tensor(1, (int64_t[]){1}, (int64_t[]){0})));
    tu_assert_error(WEFT_ERR_RUNTIME, "Index tensor must have the same number of dimensions as input tensor");
    cr_assert_null(weft_gather(t, 0, index_tensor(2, (int64_t[]){1, 5}, (int64_t[]){0, 0, 0, 0, 0})));
    tu_assert_error(WEFT_ERR_RUNTIME,
                    "Size does not match at dimension 1 expected index [1, 5] to be smaller than self "
                    "[2, 3] apart from dimension 0");
    cr_assert_null(weft_gather(t, 0, weft_zeros(2, (int64_t[]){1, 1}, WEFT_I32, WEFT_CPU)));
    tu_assert_error(WEFT_ERR_RUNTIME, "gather(): Expected dtype int64 for index");
    tu_assert_shape(weft_gather(t, 0, weft_zeros(2, (int64_t[]){0, 3}, WEFT_I32, WEFT_CPU)), 2,
                    (int64_t[]){0, 3});
    weft_scope_pop();
}

/* ---- scatter_add ----------------------------------------------------------------------------- */

Test(index, scatter_add_accumulates_duplicate_indices)
{
    weft_scope_push();
    weft_tensor *t = weft_zeros(1, (int64_t[]){4}, WEFT_F32, WEFT_CPU);
    weft_tensor *index = index_tensor(1, (int64_t[]){5}, (int64_t[]){1, 3, 1, 1, 0});
    weft_tensor *src = tu_tensor(1, (int64_t[]){5}, (double[]){1, 2, 3, 4, 5}, WEFT_F32);
    uint64_t version = weft_tensor_version(t);
    cr_assert_eq(weft_scatter_add_(t, 0, index, src), t);
    cr_assert_gt(weft_tensor_version(t), version);
    tu_assert_close(t, (double[]){5, 8, 0, 2}, 4, 0, 0);
    weft_tensor *again = weft_scatter_add(t, 0, index, src);
    tu_assert_close(again, (double[]){10, 16, 0, 4}, 4, 0, 0);
    tu_assert_close(t, (double[]){5, 8, 0, 2}, 4, 0, 0); /* out of place left t alone */
    weft_scope_pop();
}

Test(index, scatter_add_matches_reference_along_every_dim_for_every_dtype)
{
    uint64_t st = 5;
    for (int dt = 0; dt < WEFT_DTYPE_COUNT; dt++)
        for (int d = 0; d < 3; d++) {
            weft_scope_push();
            int64_t shape[3] = {3, 4, 5}, ishape[3] = {2, 3, 4}, sshape[3] = {6, 6, 6}, idx[6 * 12];
            ishape[d] = 6;
            weft_tensor *t = random_tensor(3, shape, (enum weft_dtype)dt, d == 2, &st);
            weft_tensor *src = random_tensor(3, sshape, (enum weft_dtype)dt, d == 0, &st);
            double *x = read_all(t), *s = read_all(src);
            int64_t n = numel_of(3, ishape);
            random_indices(idx, n, shape[d], &st);
            weft_tensor *r = weft_scatter_add(t, d, index_tensor(3, ishape, idx), src);
            cr_assert_not_null(r, "%s", weft_error_message());
            tu_assert_shape(r, 3, shape);
            for (int64_t i = 0; i < n; i++) {
                int64_t c[3];
                coords_of(i, 3, ishape, c);
                double v = s[offset_of(c, 3, sshape)];
                c[d] = idx[i];
                double *target = &x[offset_of(c, 3, shape)];
                *target = dt == WEFT_BOOL ? (*target != 0 || v != 0) : *target + v;
            }
            if (dt == WEFT_U8 || dt == WEFT_I8)
                for (int64_t i = 0; i < 60; i++)
                    x[i] = dt == WEFT_U8 ? (uint8_t)(int64_t)x[i] : (int8_t)(int64_t)x[i];
            tu_assert_close(r, x, 60, dt == WEFT_F16 || dt == WEFT_BF16 ? 1e-2 : 0, 0);
            free(x);
            free(s);
            weft_scope_pop();
        }
}

Test(index, scatter_add_errors_leave_the_target_untouched)
{
    weft_scope_push();
    weft_tensor *t = weft_ones(2, (int64_t[]){2, 3}, WEFT_F32, WEFT_CPU);
    weft_tensor *src = weft_ones(2, (int64_t[]){2, 3}, WEFT_F32, WEFT_CPU);
    uint64_t version = weft_tensor_version(t);
    weft_tensor *bad = index_tensor(2, (int64_t[]){1, 3}, (int64_t[]){0, 1, 3});
    cr_assert_null(weft_scatter_add_(t, 1, bad, src));
    tu_assert_error(WEFT_ERR_RUNTIME, "index 3 is out of bounds for dimension 1 with size 3");
    tu_assert_close(t, (double[]){1, 1, 1, 1, 1, 1}, 6, 0, 0);
    cr_assert_eq(weft_tensor_version(t), version);
    cr_assert_null(weft_scatter_add_(t, 1, weft_zeros(2, (int64_t[]){1, 1}, WEFT_I32, WEFT_CPU), src));
    tu_assert_error(WEFT_ERR_RUNTIME, "scatter(): Expected dtype int64 for index");
    cr_assert_null(weft_scatter_add_(t, 1, bad, weft_ones(2, (int64_t[]){2, 3}, WEFT_F64, WEFT_CPU)));
    tu_assert_error(WEFT_ERR_RUNTIME, "scatter(): Expected self.dtype to be equal to src.dtype");
    cr_assert_null(weft_scatter_add_(t, 1, index_tensor(1, (int64_t[]){1}, (int64_t[]){0}), src));
    tu_assert_error(WEFT_ERR_RUNTIME, "Index tensor must have the same number of dimensions as self tensor");
    cr_assert_null(weft_scatter_add_(t, 0, index_tensor(2, (int64_t[]){1, 4}, (int64_t[]){0, 0, 0, 0}), src));
    tu_assert_error(WEFT_ERR_RUNTIME,
                    "Expected index [1, 4] to be smaller than self [2, 3] apart from dimension 0 and to "
                    "be smaller size than src [2, 3]");
    weft_scope_pop();
}

/* ---- one_hot ---------------------------------------------------------------------------------- */

Test(index, one_hot_encodes_class_indices)
{
    weft_scope_push();
    weft_tensor *t = index_tensor(2, (int64_t[]){2, 2}, (int64_t[]){0, 2, 1, 2});
    weft_tensor *r = weft_one_hot(t, -1);
    cr_assert_eq(r->dtype, WEFT_I64);
    tu_assert_shape(r, 3, (int64_t[]){2, 2, 3});
    tu_assert_close(r, (double[]){1, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 1}, 12, 0, 0);
    weft_tensor *wide = weft_one_hot(weft_t(t), 4);
    tu_assert_shape(wide, 3, (int64_t[]){2, 2, 4});
    tu_assert_close(wide, (double[]){1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0}, 16, 0, 0);
    weft_tensor *empty = weft_one_hot(weft_zeros(1, (int64_t[]){0}, WEFT_I64, WEFT_CPU), 5);
    tu_assert_shape(empty, 2, (int64_t[]){0, 5});
    weft_tensor *scalar = weft_one_hot(weft_scalar_tensor(1, WEFT_I64, WEFT_CPU), 3);
    tu_assert_shape(scalar, 1, (int64_t[]){3});
    tu_assert_close(scalar, (double[]){0, 1, 0}, 3, 0, 0);
    weft_scope_pop();
}

Test(index, one_hot_errors_use_pytorch_wording)
{
    weft_scope_push();
    cr_assert_null(weft_one_hot(weft_zeros(1, (int64_t[]){2}, WEFT_I32, WEFT_CPU), -1));
    tu_assert_error(WEFT_ERR_RUNTIME, "one_hot is only applicable to index tensor of type LongTensor.");
    cr_assert_null(weft_one_hot(index_tensor(1, (int64_t[]){2}, (int64_t[]){1, -1}), -1));
    tu_assert_error(WEFT_ERR_RUNTIME, "Class values must be non-negative.");
    cr_assert_null(weft_one_hot(index_tensor(1, (int64_t[]){2}, (int64_t[]){1, 3}), 3));
    tu_assert_error(WEFT_ERR_RUNTIME, "Class values must be smaller than num_classes.");
    cr_assert_null(weft_one_hot(weft_zeros(1, (int64_t[]){0}, WEFT_I64, WEFT_CPU), -1));
    tu_assert_error(WEFT_ERR_RUNTIME, "Can not infer total number of classes from empty tensor.");
    weft_scope_pop();
}
