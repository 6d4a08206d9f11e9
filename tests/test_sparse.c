/* tests/test_sparse.c: sparse COO and CSR tensors (weft/sparse.h, weft-sparse.so): the
 * constructors and their checks, the accessors, coalesce, conversions, transposes, moves
 * between devices, add/mul/sum, the repr, autograd, and what the core does when handed a
 * sparse tensor. Values are compared with dense references computed here in double. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <weft/sparse.h>

#include "testutil.h"

TestSuite(sparse, .init = tu_setup, .fini = tu_teardown);

#define SHAPE(...) ((const int64_t[]){__VA_ARGS__})
#define LONGS(...) ((const int64_t[]){__VA_ARGS__})
#define DOUBLES(...) ((const double[]){__VA_ARGS__})

/* ---- building blocks ------------------------------------------------------------------- */

static weft_tensor *longs(int ndim, const int64_t *shape, const int64_t *v)
{
    weft_tensor *t = weft_from_host(v, ndim, shape, WEFT_I64, WEFT_CPU);
    cr_assert_not_null(t, "%s", weft_error_message());
    return t;
}

static weft_tensor *vec(int64_t n, const double *v, enum weft_dtype dt)
{
    return tu_tensor(1, &n, v, dt);
}

static weft_tensor *coo(int nd, int64_t nnz, const int64_t *idx, const double *vals,
                        const int64_t *size, enum weft_dtype dt)
{
    weft_tensor *t = weft_sparse_coo_tensor(longs(2, SHAPE(nd, nnz), idx), vec(nnz, vals, dt), nd,
                                            size, true);
    cr_assert_not_null(t, "coo_tensor: %s", weft_error_message());
    return t;
}

static weft_tensor *csr(int64_t rows, int64_t cols, int64_t nnz, const int64_t *crow,
                        const int64_t *col, const double *vals, enum weft_dtype dt,
                        enum weft_dtype index_dt)
{
    weft_tensor *c = weft_to_dtype(longs(1, SHAPE(rows + 1), crow), index_dt);
    weft_tensor *k = weft_to_dtype(longs(1, &nnz, col), index_dt);
    weft_tensor *t = weft_sparse_csr_tensor(c, k, vec(nnz, vals, dt), SHAPE(rows, cols), true);
    cr_assert_not_null(t, "csr_tensor: %s", weft_error_message());
    return t;
}

static void read_longs(const weft_tensor *t, int64_t *out, int64_t n)
{
    cr_assert_not_null(t, "%s", weft_error_message());
    cr_assert_eq(weft_tensor_numel(t), n);
    weft_tensor *h = weft_to((weft_tensor *)t, WEFT_CPU, WEFT_I64, false);
    cr_assert_eq(weft_tensor_read(h, out, (size_t)n * sizeof *out), 0, "%s", weft_error_message());
}

static void expect_longs(const weft_tensor *t, const int64_t *want, int64_t n)
{
    int64_t *got = malloc((size_t)(n + 1) * sizeof *got);
    read_longs(t, got, n);
    for (int64_t i = 0; i < n; i++)
        cr_assert_eq(got[i], want[i], "element %lld: got %lld, expected %lld", (long long)i,
                     (long long)got[i], (long long)want[i]);
    free(got);
}

static void expect_dense(const weft_tensor *sp, const double *want, int64_t n, double tol)
{
    weft_tensor *d = weft_sparse_to_dense(sp);
    cr_assert_not_null(d, "to_dense: %s", weft_error_message());
    cr_assert_eq(d->layout, WEFT_LAYOUT_STRIDED);
    tu_assert_close(d, want, n, tol, tol);
}

static int64_t shape_numel(int nd, const int64_t *shape)
{
    int64_t n = 1;
    for (int d = 0; d < nd; d++)
        n *= shape[d];
    return n;
}

/* ---- random inputs ------------------------------------------------------------------------- */

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static int64_t rand_below(int64_t n)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return n > 0 ? (int64_t)((rng >> 17) % (uint64_t)n) : 0;
}

/* Multiples of 1/8 in [-4, 4) for floating dtypes (sums of a few stay exact even in
 * float16), small integers otherwise, 0/1 for bool. */
static double rand_value(enum weft_dtype dt)
{
    if (dt == WEFT_BOOL)
        return (double)rand_below(2);
    if (dt == WEFT_U8)
        return (double)rand_below(9);
    if (!weft_dtype_is_floating(dt))
        return (double)(rand_below(9) - 4);
    return (double)(rand_below(64) - 32) / 8.0;
}

static void accumulate(enum weft_dtype dt, double *ref, double v)
{
    *ref = dt == WEFT_BOOL ? (*ref != 0 || v != 0) : *ref + v;
}

/* A COO of `shape` with nnz random entries (duplicates likely), and its dense reference
 * in ref (duplicates summed), which the caller sized to the numel. */
static weft_tensor *random_coo(int nd, const int64_t *shape, int64_t nnz, enum weft_dtype dt,
                               double *ref)
{
    int64_t *idx = malloc((size_t)(nd * nnz + 1) * sizeof *idx);
    double *vals = malloc((size_t)(nnz + 1) * sizeof *vals);
    memset(ref, 0, (size_t)shape_numel(nd, shape) * sizeof *ref);
    for (int64_t k = 0; k < nnz; k++) {
        int64_t lin = 0;
        for (int d = 0; d < nd; d++) {
            idx[d * nnz + k] = rand_below(shape[d]);
            lin = lin * shape[d] + idx[d * nnz + k];
        }
        vals[k] = rand_value(dt);
        accumulate(dt, &ref[lin], vals[k]);
    }
    weft_tensor *t = coo(nd, nnz, idx, vals, shape, dt);
    free(idx);
    free(vals);
    return t;
}

/* A dense tensor of `shape` where about a third of the elements are nonzero. */
static weft_tensor *random_dense(int nd, const int64_t *shape, enum weft_dtype dt, double *ref)
{
    int64_t n = shape_numel(nd, shape);
    for (int64_t i = 0; i < n; i++)
        ref[i] = rand_below(3) == 0 ? rand_value(dt) : 0.0;
    return tu_tensor(nd, shape, ref, dt);
}

/* Asserts the COO indices are sorted row-major without duplicates. */
static void expect_coalesced_order(const weft_tensor *t)
{
    cr_assert(weft_sparse_is_coalesced(t));
    weft_tensor *i = weft_sparse_indices(t);
    int nd = (int)i->shape[0];
    int64_t nnz = i->shape[1];
    int64_t *idx = malloc((size_t)(nd * nnz + 1) * sizeof *idx);
    read_longs(i, idx, nd * nnz);
    for (int64_t k = 1; k < nnz; k++) {
        int c = 0;
        for (int d = 0; d < nd && c == 0; d++)
            c = idx[d * nnz + k - 1] < idx[d * nnz + k] ? -1 : idx[d * nnz + k - 1] > idx[d * nnz + k];
        cr_assert_lt(c, 0, "entries %lld and %lld are not in order", (long long)k - 1, (long long)k);
    }
    free(idx);
}

static const enum weft_dtype all_dtypes[] = {WEFT_BOOL, WEFT_U8,  WEFT_I8,   WEFT_I16, WEFT_I32,
                                             WEFT_I64,  WEFT_F16, WEFT_BF16, WEFT_F32, WEFT_F64};
#define NUM_DTYPES (sizeof all_dtypes / sizeof *all_dtypes)

/* ---- another device: host memory behind a backend of its own ---------------------------- */

static int fake_device_count(void *context) { return 1; }
static void *fake_alloc(void *context, int index, size_t nbytes) { (void)index; return malloc(nbytes ? nbytes : 1); }
static void fake_free(void *context, int index, void *p, size_t nbytes) { (void)index; (void)nbytes; free(p); }
static int fake_copy(void *context, weft_tensor *dst, const weft_tensor *src, bool non_blocking)
{
    (void)non_blocking;
    size_t n = (size_t)weft_tensor_numel(src) * weft_tensor_itemsize(src);
    if (n)
        memcpy(weft_tensor_data(dst), weft_tensor_data(src), n);
    return 0;
}

static const struct weft_backend fake_backend = {
    .base = WEFT_VTABLE(WEFT_KIND_BACKEND, "fakedev", struct weft_backend),
    .device_count = fake_device_count,
    .alloc = fake_alloc,
    .free = fake_free,
    .copy = fake_copy,
};

/* Device "fakedev:0", with the cpu's copy and mul kernels (its memory is host memory). */
static weft_device fake_device(void)
{
    int type = weft_register(&fake_backend);
    cr_assert_geq(type, 0, "%s", weft_error_message());
    int ops[2] = {WEFT_OP_COPY, WEFT_OP_MUL};
    for (int i = 0; i < 2; i++)
        for (int dt = 0; dt < WEFT_DTYPE_COUNT; dt++) {
            weft_kernel_fn fn = weft_kernel_lookup(ops[i], WEFT_DEVICE_CPU, WEFT_LAYOUT_STRIDED, dt);
            if (fn)
                cr_assert_eq(weft_kernel_register(ops[i], type, WEFT_LAYOUT_STRIDED,
                                                  WEFT_DTYPE_BIT(dt), fn), 0);
        }
    return (weft_device){(int16_t)type, 0};
}

/* ==== constructors ============================================================================ */

Test(sparse, coo_tensor_holds_the_given_indices_and_values)
{
    weft_scope_push();
    weft_tensor *i = longs(2, SHAPE(2, 3), LONGS(0, 1, 1, 2, 0, 2));
    weft_tensor *v = vec(3, DOUBLES(3, 4, 5), WEFT_F32);
    weft_tensor *t = weft_sparse_coo_tensor(i, v, 2, SHAPE(2, 3), false);
    cr_assert_not_null(t, "%s", weft_error_message());
    cr_assert_str_eq(weft_layout_name(t->layout), "sparse_coo");
    cr_assert(weft_tensor_is_sparse(t));
    tu_assert_shape(t, 2, SHAPE(2, 3));
    cr_assert_eq(t->dtype, WEFT_F32);
    cr_assert(weft_device_equal(t->device, WEFT_CPU));
    cr_assert_eq(weft_tensor_nnz(t), 3);
    cr_assert_eq(weft_tensor_numel(t), 6);
    cr_assert_not(weft_sparse_is_coalesced(t), "a constructed tensor is not marked coalesced");
    /* Contiguous components are kept as they are: the very same tensors. */
    cr_assert_eq(weft_sparse_indices_raw(t), i);
    cr_assert_eq(weft_sparse_values_raw(t), v);
    expect_dense(t, DOUBLES(0, 0, 3, 4, 0, 5), 6, 0);
    cr_assert_eq(weft_sparse_coo_tensor(NULL, v, 2, NULL, false), NULL);
    cr_assert_eq(weft_sparse_coo_tensor(i, NULL, 2, NULL, false), NULL);
    tu_assert_no_error();
    weft_scope_pop();
}

Test(sparse, coo_tensor_infers_each_size_as_the_largest_index_plus_one)
{
    weft_scope_push();
    weft_tensor *t = weft_sparse_coo_tensor(longs(2, SHAPE(3, 2), LONGS(0, 4, 1, 0, 2, 7)),
                                            vec(2, DOUBLES(1, 2), WEFT_F64), 0, NULL, false);
    tu_assert_shape(t, 3, SHAPE(5, 2, 8));
    weft_tensor *empty = weft_sparse_coo_tensor(longs(2, SHAPE(2, 0), NULL),
                                                vec(0, NULL, WEFT_F32), 0, NULL, false);
    tu_assert_shape(empty, 2, SHAPE(0, 0));
    cr_assert_eq(weft_tensor_nnz(empty), 0);
    cr_assert(weft_sparse_is_coalesced(empty), "nothing is trivially coalesced");
    weft_tensor *one = coo(1, 1, LONGS(3), DOUBLES(7), NULL, WEFT_F32);
    tu_assert_shape(one, 1, SHAPE(4));
    cr_assert(weft_sparse_is_coalesced(one), "one entry is trivially coalesced, as PyTorch");
    weft_scope_pop();
}

Test(sparse, coo_tensor_keeps_contiguous_copies_of_strided_components)
{
    weft_scope_push();
    /* indices given transposed: [nnz, 2] viewed as [2, nnz]. */
    weft_tensor *it = longs(2, SHAPE(3, 2), LONGS(0, 2, 1, 0, 1, 1));
    weft_tensor *i = weft_t(it);
    weft_tensor *v = weft_slice(vec(6, DOUBLES(1, 0, 2, 0, 3, 0), WEFT_F64), 0, 0, 6, 2);
    weft_tensor *t = weft_sparse_coo_tensor(i, v, 2, SHAPE(2, 3), true);
    cr_assert_not_null(t, "%s", weft_error_message());
    cr_assert(weft_tensor_is_contiguous(weft_sparse_indices_raw(t)));
    cr_assert(weft_tensor_is_contiguous(weft_sparse_values_raw(t)));
    expect_longs(weft_sparse_indices_raw(t), LONGS(0, 1, 1, 2, 0, 1), 6);
    expect_dense(t, DOUBLES(0, 0, 1, 2, 3, 0), 6, 0);
    weft_scope_pop();
}

Test(sparse, coo_tensor_rejects_malformed_arguments_with_pytorch_messages)
{
    weft_scope_push();
    weft_tensor *i = longs(2, SHAPE(2, 2), LONGS(0, 1, 2, 0));
    weft_tensor *v = vec(2, DOUBLES(1, 2), WEFT_F32);
    cr_assert_null(weft_sparse_coo_tensor(weft_to_dtype(i, WEFT_I32), v, 2, SHAPE(2, 3), false));
    tu_assert_error(WEFT_ERR_RUNTIME, "indices must be an int64 tensor");
    cr_assert_null(weft_sparse_coo_tensor(longs(1, SHAPE(2), LONGS(0, 1)), v, 1, SHAPE(2), false));
    tu_assert_error(WEFT_ERR_RUNTIME, "indices must be sparse_dim x nnz, but got: [2]");
    cr_assert_null(weft_sparse_coo_tensor(i, vec(3, DOUBLES(1, 2, 3), WEFT_F32), 2, SHAPE(2, 3),
                                          false));
    tu_assert_error(WEFT_ERR_RUNTIME, "indices and values must have same nnz, but got nnz from "
                                      "indices: 2, nnz from values: 3");
    cr_assert_null(weft_sparse_coo_tensor(i, v, 3, SHAPE(2, 3, 4), false));
    tu_assert_error(WEFT_ERR_RUNTIME,
                    "number of dimensions must be sparse_dim (2) + dense_dim (0), but got 3");
    cr_assert_null(weft_sparse_coo_tensor(i, weft_ones(2, SHAPE(2, 2), WEFT_F32, WEFT_CPU), 2,
                                          SHAPE(2, 3), false));
    tu_assert_error(WEFT_ERR_NOT_IMPLEMENTED, "hybrid sparse tensors");
    cr_assert_null(weft_sparse_coo_tensor(i, weft_scalar_tensor(1, WEFT_F32, WEFT_CPU), 2,
                                          SHAPE(2, 3), false));
    tu_assert_error(WEFT_ERR_RUNTIME, "values must have dimensionality > sum of batch and block "
                                      "dimensionalities (=0 + 0) but got 0");
    weft_tensor *sp = coo(2, 2, LONGS(0, 1, 2, 0), DOUBLES(1, 2), NULL, WEFT_F32);
    cr_assert_null(weft_sparse_coo_tensor(i, sp, 2, SHAPE(2, 3), false));
    tu_assert_error(WEFT_ERR_RUNTIME, "expected values to be a strided tensor, but got layout "
                                      "sparse_coo");
    cr_assert_null(weft_sparse_coo_tensor(i, v, 2, SHAPE(2, -3), false));
    cr_assert_neq(weft_error_code(), WEFT_OK, "a negative size is refused");
    weft_error_clear();
    weft_scope_pop();
}

Test(sparse, coo_tensor_check_reports_indices_outside_the_size)
{
    weft_scope_push();
    weft_tensor *v = vec(2, DOUBLES(1, 2), WEFT_F32);
    weft_tensor *big = longs(2, SHAPE(2, 2), LONGS(0, 5, 2, 0));
    cr_assert_null(weft_sparse_coo_tensor(big, v, 2, SHAPE(2, 3), true));
    tu_assert_error(WEFT_ERR_RUNTIME,
                    "size is inconsistent with indices: for dim 0, size is 2 but found index 5");
    weft_tensor *neg = longs(2, SHAPE(2, 2), LONGS(0, 1, 2, -1));
    cr_assert_null(weft_sparse_coo_tensor(neg, v, 2, SHAPE(2, 3), true));
    tu_assert_error(WEFT_ERR_RUNTIME, "found negative index -1 for dim 1");
    cr_assert_null(weft_sparse_coo_tensor(neg, v, 0, NULL, false));
    tu_assert_error(WEFT_ERR_RUNTIME, "found negative index -1 for dim 1");
    /* Unchecked, it is built; what reads memory through it checks then. */
    weft_tensor *t = weft_sparse_coo_tensor(big, v, 2, SHAPE(2, 3), false);
    cr_assert_not_null(t, "%s", weft_error_message());
    cr_assert_null(weft_sparse_to_dense(t));
    tu_assert_error(WEFT_ERR_RUNTIME,
                    "size is inconsistent with indices: for dim 0, size is 2 but found index 5");
    cr_assert_null(weft_to_sparse_csr(t));
    tu_assert_error(WEFT_ERR_RUNTIME, "size is inconsistent with indices");
    weft_scope_pop();
}

Test(sparse, csr_tensor_holds_int64_or_int32_components)
{
    weft_scope_push();
    enum weft_dtype its[2] = {WEFT_I64, WEFT_I32};
    for (int k = 0; k < 2; k++) {
        weft_tensor *c = weft_to_dtype(longs(1, SHAPE(4), LONGS(0, 2, 2, 3)), its[k]);
        weft_tensor *col = weft_to_dtype(longs(1, SHAPE(3), LONGS(0, 3, 1)), its[k]);
        weft_tensor *v = vec(3, DOUBLES(1, 2, 3), WEFT_F64);
        weft_tensor *t = weft_sparse_csr_tensor(c, col, v, SHAPE(3, 4), true);
        cr_assert_not_null(t, "%s", weft_error_message());
        cr_assert_str_eq(weft_layout_name(t->layout), "sparse_csr");
        tu_assert_shape(t, 2, SHAPE(3, 4));
        cr_assert_eq(t->dtype, WEFT_F64);
        cr_assert_eq(weft_tensor_nnz(t), 3);
        cr_assert_eq(weft_sparse_crow_indices(t), c);
        cr_assert_eq(weft_sparse_col_indices(t), col);
        cr_assert_eq(weft_sparse_values(t), v);
        cr_assert_eq(weft_sparse_crow_indices(t)->dtype, its[k]);
        cr_assert(weft_sparse_is_coalesced(t), "CSR is coalesced by construction");
        expect_dense(t, DOUBLES(1, 0, 0, 2, 0, 0, 0, 0, 0, 3, 0, 0), 12, 0);
    }
    /* Inferred: rows from crow, columns from the largest column. */
    weft_tensor *t = weft_sparse_csr_tensor(longs(1, SHAPE(3), LONGS(0, 1, 2)),
                                            longs(1, SHAPE(2), LONGS(4, 0)),
                                            vec(2, DOUBLES(1, 2), WEFT_F32), NULL, false);
    tu_assert_shape(t, 2, SHAPE(2, 5));
    weft_tensor *e = weft_sparse_csr_tensor(longs(1, SHAPE(1), LONGS(0)), longs(1, SHAPE(0), NULL),
                                            vec(0, NULL, WEFT_F32), NULL, true);
    tu_assert_shape(e, 2, SHAPE(0, 0));
    weft_tensor *z = weft_sparse_csr_tensor(longs(1, SHAPE(3), LONGS(0, 0, 0)),
                                            longs(1, SHAPE(0), NULL), vec(0, NULL, WEFT_F32),
                                            SHAPE(2, 3), true);
    expect_dense(z, DOUBLES(0, 0, 0, 0, 0, 0), 6, 0);
    weft_scope_pop();
}

Test(sparse, csr_tensor_check_reports_each_pytorch_invariant)
{
    weft_scope_push();
    struct {
        int64_t crow[3], col[3];
        int64_t nnz;
        const char *message;
    } cases[] = {
        {{1, 1, 2}, {2, 0}, 2, "`crow_indices[..., 0] == 0` is not satisfied."},
        {{0, 1, 3}, {2, 0}, 2, "`crow_indices[..., -1] == nnz` is not satisfied."},
        {{0, 2, 1}, {2, 0}, 1, "`0 <= crow_indices[..., 1:] - crow_indices[..., :-1] <= ncols` "
                               "is not satisfied."},
        {{0, 1, 2}, {2, 3}, 2, "`0 <= col_indices < ncols` is not satisfied."},
        {{0, 1, 2}, {2, -1}, 2, "`0 <= col_indices < ncols` is not satisfied."},
        {{0, 2, 2}, {2, 1}, 2, "`col_indices[..., crow_indices[..., i - 1]:crow_indices[..., i]] "
                               "for all i = 1, ..., nrows are sorted and distinct along the last "
                               "dimension values` is not satisfied."},
        {{0, 2, 2}, {1, 1}, 2, "are sorted and distinct"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        weft_tensor *c = longs(1, SHAPE(3), cases[k].crow);
        weft_tensor *col = longs(1, &cases[k].nnz, cases[k].col);
        weft_tensor *v = weft_ones(1, &cases[k].nnz, WEFT_F32, WEFT_CPU);
        cr_assert_null(weft_sparse_csr_tensor(c, col, v, SHAPE(2, 3), true), "case %zu", k);
        tu_assert_error(WEFT_ERR_RUNTIME, cases[k].message);
        /* int32 indices say the same. */
        cr_assert_null(weft_sparse_csr_tensor(weft_to_dtype(c, WEFT_I32),
                                              weft_to_dtype(col, WEFT_I32), v, SHAPE(2, 3), true));
        tu_assert_error(WEFT_ERR_RUNTIME, cases[k].message);
    }
    /* More entries in a row than columns. */
    cr_assert_null(weft_sparse_csr_tensor(longs(1, SHAPE(3), LONGS(0, 4, 4)),
                                          longs(1, SHAPE(4), LONGS(0, 1, 2, 0)),
                                          weft_ones(1, SHAPE(4), WEFT_F32, WEFT_CPU), SHAPE(2, 3),
                                          true));
    tu_assert_error(WEFT_ERR_RUNTIME, "`0 <= crow_indices[..., 1:] - crow_indices[..., :-1] <= "
                                      "ncols` is not satisfied.");
    weft_scope_pop();
}

Test(sparse, csr_tensor_rejects_malformed_arguments_with_pytorch_messages)
{
    weft_scope_push();
    weft_tensor *c = longs(1, SHAPE(3), LONGS(0, 1, 2));
    weft_tensor *col = longs(1, SHAPE(2), LONGS(2, 0));
    weft_tensor *v = vec(2, DOUBLES(1, 2), WEFT_F32);
    cr_assert_null(weft_sparse_csr_tensor(weft_to_dtype(c, WEFT_I32), col, v, SHAPE(2, 3), false));
    tu_assert_error(WEFT_ERR_RUNTIME, "crow_indices and col_indices must have the same dtype, bot "
                                      "got Int and Long, respectively");
    cr_assert_null(weft_sparse_csr_tensor(weft_to_dtype(c, WEFT_F32), weft_to_dtype(col, WEFT_F32),
                                          v, SHAPE(2, 3), false));
    tu_assert_error(WEFT_ERR_RUNTIME,
                    "crow_indices and col_indices dtype must be Int or Long, but got Float");
    cr_assert_null(weft_sparse_csr_tensor(weft_unsqueeze(c, 0), col, v, SHAPE(2, 3), false));
    tu_assert_error(WEFT_ERR_RUNTIME, "crow_indices and col_indices dimensionalities must be equal "
                                      "but got 2 and 1, respectively");
    cr_assert_null(weft_sparse_csr_tensor(weft_unsqueeze(c, 0), weft_unsqueeze(col, 0), v,
                                          SHAPE(2, 3), false));
    tu_assert_error(WEFT_ERR_NOT_IMPLEMENTED, "batched sparse CSR tensors are not supported");
    cr_assert_null(weft_sparse_csr_tensor(c, col, v, SHAPE(3, 3), false));
    tu_assert_error(WEFT_ERR_RUNTIME, "crow_indices.shape[-1] must be equal to the number of rows "
                                      "+ 1 (=4), but got 3");
    cr_assert_null(weft_sparse_csr_tensor(c, col, vec(3, DOUBLES(1, 2, 3), WEFT_F32), SHAPE(2, 3),
                                          false));
    tu_assert_error(WEFT_ERR_RUNTIME, "col_indices.shape[-1] must be equal to nnz (=3) as defined "
                                      "by values.shape[0], but got 2");
    cr_assert_null(weft_sparse_csr_tensor(c, col, weft_scalar_tensor(1, WEFT_F32, WEFT_CPU),
                                          SHAPE(2, 3), false));
    tu_assert_error(WEFT_ERR_RUNTIME, "values must have dimensionality > sum of batch and block "
                                      "dimensionalities (=0 + 0) but got 0");
    cr_assert_null(weft_sparse_csr_tensor(NULL, col, v, NULL, false));
    tu_assert_no_error();
    weft_scope_pop();
}

Test(sparse, constructors_want_every_component_on_one_device)
{
    weft_scope_push();
    weft_device dev = fake_device();
    weft_tensor *v = weft_to_device(vec(2, DOUBLES(1, 2), WEFT_F32), dev);
    cr_assert_null(weft_sparse_coo_tensor(longs(2, SHAPE(2, 2), LONGS(0, 1, 2, 0)), v, 2,
                                          SHAPE(2, 3), false));
    tu_assert_error(WEFT_ERR_RUNTIME, "device of indices (=cpu) must match device of values "
                                      "(=fakedev:0)");
    cr_assert_null(weft_sparse_csr_tensor(longs(1, SHAPE(3), LONGS(0, 1, 2)),
                                          longs(1, SHAPE(2), LONGS(2, 0)), v, SHAPE(2, 3), false));
    tu_assert_error(WEFT_ERR_RUNTIME, "device of crow_indices (=cpu) must match device of values "
                                      "(=fakedev:0)");
    weft_scope_pop();
}

Test(sparse, a_layout_nobody_registered_is_refused)
{
    /* Each test runs in its own process and this one never touches the sparse API, so
     * weft-sparse.so is not loaded: no layout id is taken. */
    cr_assert_null(weft_layout_find(1));
    cr_assert_null(weft_registry_find(WEFT_KIND_LAYOUT, "sparse_coo"));
    int dummy;
    cr_assert_null(weft_tensor_new_layout(1, 1, SHAPE(3), WEFT_F32, WEFT_CPU, &dummy));
    tu_assert_error(WEFT_ERR_NOT_IMPLEMENTED, "layout layout1 is not registered (its plugin "
                                              "registers it when it loads)");
    cr_assert_null(weft_tensor_new_layout(3, 1, SHAPE(3), WEFT_F32, WEFT_CPU, &dummy));
    tu_assert_error(WEFT_ERR_NOT_IMPLEMENTED, "layout layout3 is not registered");
    weft_scope_push();
    cr_assert_eq(weft_tensor_nnz(weft_ones(1, SHAPE(2), WEFT_F32, WEFT_CPU)), -1);
    tu_assert_error(WEFT_ERR_RUNTIME, "_nnz is not defined for strided tensors");
    weft_scope_pop();
}

Test(sparse, naming_a_sparse_layout_loads_the_plugin_and_gives_ids_in_registration_order)
{
    cr_assert_eq(weft_layout_id("sparse_coo"), 1, "%s", weft_error_message());
    cr_assert(weft_plugin_is_loaded("sparse"), "its manifest provides layout:sparse_coo");
    cr_assert_eq(weft_layout_id("sparse_csr"), 2);
    cr_assert_eq(weft_layout_id("strided"), WEFT_LAYOUT_STRIDED);
    cr_assert_str_eq(weft_layout_find(1)->base.name, "sparse_coo");
    cr_assert_str_eq(weft_layout_name(2), "sparse_csr");
    cr_assert_lt(weft_layout_id("sparse_bsr"), 0);
    tu_assert_error(WEFT_ERR_PLUGIN, "no layout 'sparse_bsr' (known: sparse_coo, sparse_csr");
}

Test(sparse, the_api_table_comes_from_the_registry_complete)
{
    const struct weft_sparse_api *api = weft_sparse_api_get();
    cr_assert_not_null(api, "%s", weft_error_message());
    cr_assert_eq(api, weft_registry_find(WEFT_KIND_API, WEFT_SPARSE_API_NAME));
    cr_assert_str_eq(weft_registry_owner(api), "sparse");
    cr_assert_eq(api->base.abi_version, WEFT_ABI_VERSION);
    void *const *fn = (void *const *)&api->coo_tensor;
    size_t n = (sizeof *api - offsetof(struct weft_sparse_api, coo_tensor)) / sizeof(void *);
    for (size_t i = 0; i < n; i++)
        cr_assert_not_null(fn[i], "entry %zu of the table is empty", i);
}

/* ==== accessors ============================================================================== */

Test(sparse, components_share_data_with_the_sparse_tensor)
{
    weft_scope_push();
    weft_tensor *t = coo(2, 2, LONGS(0, 1, 2, 0), DOUBLES(3, 4), SHAPE(2, 3), WEFT_F32);
    float *v = weft_tensor_data(weft_sparse_values_raw(t));
    v[1] = 9;
    expect_dense(t, DOUBLES(0, 0, 3, 9, 0, 0), 6, 0);
    weft_tensor *c = weft_to_sparse_csr(t);
    float *cv = weft_tensor_data(weft_sparse_values(c));
    cv[0] = -1;
    expect_dense(c, DOUBLES(0, 0, -1, 9, 0, 0), 6, 0);
    weft_scope_pop();
}

Test(sparse, indices_and_values_want_a_coalesced_tensor)
{
    weft_scope_push();
    weft_tensor *t = coo(2, 2, LONGS(1, 0, 2, 0), DOUBLES(3, 4), SHAPE(2, 3), WEFT_F32);
    cr_assert_null(weft_sparse_indices(t));
    tu_assert_error(WEFT_ERR_RUNTIME,
                    "Cannot get indices on an uncoalesced tensor, please call .coalesce() first");
    cr_assert_null(weft_sparse_values(t));
    tu_assert_error(WEFT_ERR_RUNTIME,
                    "Cannot get values on an uncoalesced tensor, please call .coalesce() first");
    weft_tensor *c = weft_sparse_coalesce(t);
    expect_longs(weft_sparse_indices(c), LONGS(0, 1, 0, 2), 4);
    tu_assert_close(weft_sparse_values(c), DOUBLES(4, 3), 2, 0, 0);
    weft_scope_pop();
}

Test(sparse, accessors_refuse_the_other_layouts)
{
    weft_scope_push();
    weft_tensor *t = coo(2, 2, LONGS(0, 1, 2, 0), DOUBLES(3, 4), SHAPE(2, 3), WEFT_F32);
    weft_tensor *c = weft_to_sparse_csr(t);
    weft_tensor *d = weft_ones(1, SHAPE(2), WEFT_F32, WEFT_CPU);
    cr_assert_null(weft_sparse_crow_indices(t));
    tu_assert_error(WEFT_ERR_RUNTIME, "crow_indices() expected a sparse_csr tensor, but got layout "
                                      "sparse_coo");
    cr_assert_null(weft_sparse_col_indices(d));
    tu_assert_error(WEFT_ERR_RUNTIME, "col_indices() expected a sparse_csr tensor, but got layout "
                                      "strided");
    cr_assert_null(weft_sparse_indices(c));
    tu_assert_error(WEFT_ERR_RUNTIME, "indices() expected a sparse_coo tensor, but got layout "
                                      "sparse_csr");
    cr_assert_null(weft_sparse_values_raw(c));
    tu_assert_error(WEFT_ERR_RUNTIME, "_values() expected a sparse_coo tensor");
    cr_assert_null(weft_sparse_values(d));
    tu_assert_error(WEFT_ERR_RUNTIME, "values() expected a sparse_coo tensor, but got layout "
                                      "strided");
    cr_assert_not(weft_sparse_is_coalesced(d));
    tu_assert_error(WEFT_ERR_RUNTIME, "is_coalesced() expected a sparse tensor");
    cr_assert_null(weft_sparse_coalesce(d));
    tu_assert_error(WEFT_ERR_RUNTIME, "coalesce() expected a sparse tensor, but got layout strided");
    cr_assert_null(weft_sparse_indices(NULL));
    cr_assert_not(weft_sparse_is_coalesced(NULL));
    tu_assert_no_error();
    weft_scope_pop();
}

/* ==== coalesce ================================================================================ */

Test(sparse, coalesce_sorts_row_major_and_sums_duplicates)
{
    weft_scope_push();
    weft_tensor *t = coo(2, 5, LONGS(1, 0, 1, 0, 1, 2, 1, 2, 0, 0), DOUBLES(1, 2, 3, 4, 5),
                         SHAPE(2, 3), WEFT_F64);
    weft_tensor *c = weft_sparse_coalesce(t);
    cr_assert_not_null(c, "%s", weft_error_message());
    cr_assert(weft_sparse_is_coalesced(c));
    cr_assert_eq(weft_tensor_nnz(c), 4);
    expect_longs(weft_sparse_indices(c), LONGS(0, 0, 1, 1, 0, 1, 0, 2), 8);
    tu_assert_close(weft_sparse_values(c), DOUBLES(4, 2, 5, 4), 4, 0, 0);
    cr_assert_eq(weft_sparse_coalesce(c), c, "a coalesced tensor is its own coalesced form");
    weft_tensor *csr_t = weft_to_sparse_csr(t);
    cr_assert_eq(weft_sparse_coalesce(csr_t), csr_t);
    weft_scope_pop();
}

Test(sparse, coalesce_matches_the_dense_sum_on_random_inputs_of_every_dtype)
{
    weft_scope_push();
    const int64_t shapes[][3] = {{7, 0, 0}, {5, 6, 0}, {3, 4, 5}, {1, 1, 0}, {40, 50, 0}};
    const int nds[] = {1, 2, 3, 2, 2};
    for (size_t s = 0; s < 5; s++)
        for (size_t k = 0; k < NUM_DTYPES; k++) {
            enum weft_dtype dt = all_dtypes[k];
            int64_t numel = shape_numel(nds[s], shapes[s]);
            double *ref = malloc((size_t)numel * sizeof *ref);
            int64_t nnz = numel * 2 + 3; /* duplicates guaranteed */
            weft_tensor *t = random_coo(nds[s], shapes[s], nnz, dt, ref);
            weft_tensor *c = weft_sparse_coalesce(t);
            cr_assert_not_null(c, "%s", weft_error_message());
            cr_assert_eq(c->dtype, dt);
            cr_assert_leq(weft_tensor_nnz(c), numel);
            expect_coalesced_order(c);
            expect_dense(c, ref, numel, 0);
            expect_dense(t, ref, numel, 0);
            free(ref);
        }
    weft_scope_pop();
}

Test(sparse, coalesce_is_stable_and_handles_nothing_and_large_inputs)
{
    weft_scope_push();
    weft_tensor *e = weft_sparse_coo_tensor(longs(2, SHAPE(2, 0), NULL), vec(0, NULL, WEFT_F32), 2,
                                            SHAPE(3, 3), false);
    weft_tensor *ec = weft_sparse_coalesce(e);
    cr_assert_eq(weft_tensor_nnz(ec), 0);
    /* 200000 entries over a 1000 x 1000 matrix: the parallel radix sort. */
    int64_t numel = 1000 * 1000;
    double *ref = malloc((size_t)numel * sizeof *ref);
    weft_tensor *t = random_coo(2, SHAPE(1000, 1000), 200000, WEFT_F64, ref);
    weft_tensor *c = weft_sparse_coalesce(t);
    expect_coalesced_order(c);
    expect_dense(c, ref, numel, 1e-12);
    free(ref);
    weft_scope_pop();
}

Test(sparse, coalesce_sorts_shapes_too_large_for_linear_keys)
{
    weft_scope_push();
    /* 2^40 x 2^40 has more elements than int64 counts: one pass per dim instead. */
    int64_t big = (int64_t)1 << 40;
    weft_tensor *t = coo(2, 4, LONGS(big - 1, 3, big - 1, 3, 5, big - 2, 5, 0),
                         DOUBLES(1, 2, 3, 4), SHAPE(big, big), WEFT_F32);
    weft_tensor *c = weft_sparse_coalesce(t);
    cr_assert_not_null(c, "%s", weft_error_message());
    expect_longs(weft_sparse_indices(c), LONGS(3, 3, big - 1, 0, big - 2, 5), 6);
    tu_assert_close(weft_sparse_values(c), DOUBLES(4, 2, 4), 3, 0, 0);
    weft_scope_pop();
}

/* ==== conversions ============================================================================= */

Test(sparse, to_sparse_keeps_the_nonzeros_in_row_major_order)
{
    weft_scope_push();
    weft_tensor *d = tu_tensor(2, SHAPE(2, 3), DOUBLES(0, 1.5, -0.0, NAN, 0, 2), WEFT_F32);
    weft_tensor *s = weft_to_sparse_coo(d);
    cr_assert_not_null(s, "%s", weft_error_message());
    cr_assert(weft_sparse_is_coalesced(s));
    cr_assert_eq(weft_tensor_nnz(s), 3, "-0.0 is zero, NaN is not");
    expect_longs(weft_sparse_indices(s), LONGS(0, 1, 1, 1, 0, 2), 6);
    tu_assert_close(weft_sparse_values(s), DOUBLES(1.5, NAN, 2), 3, 0, 0);
    weft_tensor *c = weft_to_sparse_csr(d);
    expect_longs(weft_sparse_crow_indices(c), LONGS(0, 1, 3), 3);
    expect_longs(weft_sparse_col_indices(c), LONGS(1, 0, 2), 3);
    cr_assert_eq(weft_sparse_crow_indices(c)->dtype, WEFT_I64);
    cr_assert_eq(weft_to_sparse_coo(s), s, "already COO");
    cr_assert_eq(weft_to_sparse_csr(c), c, "already CSR");
    cr_assert_eq(weft_sparse_to_dense(d), d, "already dense");
    weft_scope_pop();
}

Test(sparse, dense_round_trips_through_coo_and_csr_for_every_dtype_and_shape)
{
    weft_scope_push();
    const int64_t shapes[][3] = {{1, 0, 0}, {0, 0, 0}, {3, 0, 0}, {1, 1, 0}, {5, 7, 0},
                                 {6, 1, 0}, {2, 3, 4}, {300, 300, 0}, {2, 0, 3}};
    const int nds[] = {1, 1, 2, 2, 2, 2, 3, 2, 3};
    for (size_t s = 0; s < sizeof nds / sizeof *nds; s++)
        for (size_t k = 0; k < NUM_DTYPES; k++) {
            enum weft_dtype dt = all_dtypes[k];
            int nd = nds[s];
            int64_t numel = shape_numel(nd, shapes[s]);
            double *ref = malloc((size_t)(numel + 1) * sizeof *ref);
            weft_tensor *d = random_dense(nd, shapes[s], dt, ref);
            weft_tensor *sp = weft_to_sparse_coo(d);
            cr_assert_not_null(sp, "%s", weft_error_message());
            tu_assert_shape(sp, nd, shapes[s]);
            cr_assert_eq(sp->dtype, dt);
            expect_coalesced_order(sp);
            expect_dense(sp, ref, numel, 0);
            if (nd != 2)
                goto next;
            weft_tensor *c = weft_to_sparse_csr(d);
            cr_assert_not_null(c, "%s", weft_error_message());
            expect_dense(c, ref, numel, 0);
            expect_dense(weft_to_sparse_coo(c), ref, numel, 0);
            expect_dense(weft_to_sparse_csr(sp), ref, numel, 0);
            cr_assert_eq(weft_tensor_nnz(c), weft_tensor_nnz(sp));
        next:
            free(ref);
        }
    weft_scope_pop();
}

Test(sparse, dense_inputs_may_have_any_strides)
{
    weft_scope_push();
    double ref[24];
    weft_tensor *d = random_dense(3, SHAPE(2, 3, 4), WEFT_F32, ref);
    /* Transposed and sliced views: to_sparse reads them in their logical order. */
    weft_tensor *views[2] = {weft_transpose(d, 0, 2), weft_slice(d, 2, 1, 4, 2)};
    for (int v = 0; v < 2; v++) {
        weft_tensor *x = views[v];
        int64_t n = weft_tensor_numel(x);
        double want[24];
        tu_read(x, want);
        expect_dense(weft_to_sparse_coo(x), want, n, 0);
    }
    weft_tensor *m = weft_t(weft_reshape(d, 2, SHAPE(6, 4)));
    double want[24];
    tu_read(m, want);
    expect_dense(weft_to_sparse_csr(m), want, 24, 0);
    weft_scope_pop();
}

Test(sparse, coo_and_csr_convert_both_ways_keeping_empty_rows)
{
    weft_scope_push();
    /* Rows 0, 2 and 4 empty. */
    weft_tensor *t = coo(2, 4, LONGS(3, 1, 3, 1, 4, 0, 2, 0), DOUBLES(1, 2, 3, 4), SHAPE(5, 5),
                         WEFT_F32);
    weft_tensor *c = weft_to_sparse_csr(t);
    cr_assert_not_null(c, "%s", weft_error_message());
    expect_longs(weft_sparse_crow_indices(c), LONGS(0, 0, 1, 1, 3, 3), 6);
    expect_longs(weft_sparse_col_indices(c), LONGS(0, 2, 4), 3);
    tu_assert_close(weft_sparse_values(c), DOUBLES(6, 3, 1), 3, 0, 0);
    weft_tensor *back = weft_to_sparse_coo(c);
    cr_assert(weft_sparse_is_coalesced(back));
    expect_longs(weft_sparse_indices(back), LONGS(1, 3, 3, 0, 2, 4), 6);
    cr_assert_eq(weft_sparse_values(back), weft_sparse_values(c), "the values are shared");
    /* int32 CSR converts too. */
    weft_tensor *c32 = csr(3, 2, 2, LONGS(0, 0, 2, 2), LONGS(0, 1), DOUBLES(5, 6), WEFT_F64,
                           WEFT_I32);
    expect_longs(weft_sparse_indices(weft_to_sparse_coo(c32)), LONGS(1, 1, 0, 1), 4);
    weft_scope_pop();
}

Test(sparse, random_coo_converts_to_the_csr_of_its_dense_form)
{
    weft_scope_push();
    for (int trial = 0; trial < 5; trial++) {
        int64_t rows = 1 + rand_below(40), cols = 1 + rand_below(40), numel = rows * cols;
        double *ref = malloc((size_t)numel * sizeof *ref);
        weft_tensor *t = random_coo(2, SHAPE(rows, cols), rand_below(2 * numel), WEFT_F64, ref);
        weft_tensor *c = weft_to_sparse_csr(t);
        cr_assert_not_null(c, "%s", weft_error_message());
        expect_dense(c, ref, numel, 1e-12);
        /* crow counts the entries of the coalesced form per row. */
        weft_tensor *co = weft_sparse_coalesce(t);
        int64_t nnz = weft_tensor_nnz(co), *idx = malloc((size_t)(2 * nnz + 1) * sizeof *idx);
        int64_t *crow = calloc((size_t)rows + 1, sizeof *crow);
        read_longs(weft_sparse_indices(co), idx, 2 * nnz);
        for (int64_t e = 0; e < nnz; e++)
            crow[idx[e] + 1]++;
        for (int64_t r = 0; r < rows; r++)
            crow[r + 1] += crow[r];
        expect_longs(weft_sparse_crow_indices(c), crow, rows + 1);
        expect_longs(weft_sparse_col_indices(c), idx + nnz, nnz);
        free(idx);
        free(crow);
        free(ref);
    }
    weft_scope_pop();
}

Test(sparse, to_sparse_csr_wants_two_dims)
{
    weft_scope_push();
    cr_assert_null(weft_to_sparse_csr(weft_ones(3, SHAPE(2, 3, 4), WEFT_F32, WEFT_CPU)));
    tu_assert_error(WEFT_ERR_RUNTIME, "to_sparse_csr(): expected a 2-D dense tensor, but got 3 dims");
    weft_tensor *t = coo(3, 1, LONGS(0, 0, 0), DOUBLES(1), SHAPE(1, 1, 1), WEFT_F32);
    cr_assert_null(weft_to_sparse_csr(t));
    tu_assert_error(WEFT_ERR_RUNTIME, "expected a 2-D sparse_coo tensor, but got 3 dims");
    cr_assert_null(weft_to_sparse_coo(weft_scalar_tensor(1, WEFT_F32, WEFT_CPU)));
    tu_assert_error(WEFT_ERR_RUNTIME, "at least 1 dim");
    weft_scope_pop();
}

/* Dense transpose of a [n0, n1, n2] row-major array (any two dims), for references. */
static void dense_transpose(const double *in, int nd, const int64_t *shape, int d0, int d1,
                            double *out, int64_t *out_shape)
{
    int64_t n = shape_numel(nd, shape);
    for (int d = 0; d < nd; d++)
        out_shape[d] = shape[d == d0 ? d1 : d == d1 ? d0 : d];
    for (int64_t lin = 0; lin < n; lin++) {
        int64_t idx[8], rest = lin;
        for (int d = nd - 1; d >= 0; d--) {
            idx[d] = rest % shape[d];
            rest /= shape[d];
        }
        int64_t t = idx[d0];
        idx[d0] = idx[d1];
        idx[d1] = t;
        int64_t o = 0;
        for (int d = 0; d < nd; d++)
            o = o * out_shape[d] + idx[d];
        out[o] = in[lin];
    }
}

Test(sparse, transpose_swaps_coo_index_rows)
{
    weft_scope_push();
    double ref[60], want[60];
    weft_tensor *t = weft_sparse_coalesce(random_coo(3, SHAPE(3, 4, 5), 30, WEFT_F64, ref));
    int64_t shape[3];
    dense_transpose(ref, 3, SHAPE(3, 4, 5), 0, 2, want, shape);
    weft_tensor *tt = weft_sparse_transpose(t, 0, -1);
    cr_assert_not_null(tt, "%s", weft_error_message());
    tu_assert_shape(tt, 3, shape);
    cr_assert_not(weft_sparse_is_coalesced(tt) && weft_tensor_nnz(tt) > 1,
                  "a transposed COO is not coalesced");
    cr_assert_eq(weft_sparse_values_raw(tt), weft_sparse_values_raw(t), "values are shared");
    expect_dense(tt, want, 60, 0);
    cr_assert_eq(weft_sparse_transpose(t, 1, 1), t);
    cr_assert_null(weft_sparse_transpose(t, 0, 3));
    tu_assert_error(WEFT_ERR_INDEX,
                    "Dimension out of range (expected to be in range of [-3, 2], but got 3)");
    weft_scope_pop();
}

Test(sparse, transpose_of_csr_is_the_csr_of_the_transpose)
{
    weft_scope_push();
    enum weft_dtype its[2] = {WEFT_I64, WEFT_I32};
    for (int k = 0; k < 2; k++)
        for (int trial = 0; trial < 4; trial++) {
            int64_t rows = 1 + rand_below(30), cols = 1 + rand_below(30);
            double *ref = malloc((size_t)(rows * cols) * sizeof *ref);
            double *want = malloc((size_t)(rows * cols) * sizeof *want);
            weft_tensor *d = random_dense(2, SHAPE(rows, cols), WEFT_F32, ref);
            weft_tensor *c = weft_to_sparse_csr(d);
            if (its[k] == WEFT_I32)
                c = weft_sparse_csr_tensor(weft_to_dtype(weft_sparse_crow_indices(c), WEFT_I32),
                                           weft_to_dtype(weft_sparse_col_indices(c), WEFT_I32),
                                           weft_sparse_values(c), SHAPE(rows, cols), true);
            int64_t shape[2];
            dense_transpose(ref, 2, SHAPE(rows, cols), 0, 1, want, shape);
            weft_tensor *ct = weft_sparse_transpose(c, 0, 1);
            cr_assert_not_null(ct, "%s", weft_error_message());
            cr_assert_str_eq(weft_layout_name(ct->layout), "sparse_csr");
            cr_assert_eq(weft_sparse_crow_indices(ct)->dtype, its[k]);
            tu_assert_shape(ct, 2, shape);
            expect_dense(ct, want, rows * cols, 0);
            /* The CSR it gives passes the full check (columns sorted within rows). */
            cr_assert_not_null(weft_sparse_csr_tensor(weft_sparse_crow_indices(ct),
                                                      weft_sparse_col_indices(ct),
                                                      weft_sparse_values(ct), shape, true),
                               "%s", weft_error_message());
            expect_dense(weft_sparse_transpose(ct, 1, 0), ref, rows * cols, 0);
            free(ref);
            free(want);
        }
    weft_scope_pop();
}

Test(sparse, to_device_moves_every_component_and_back)
{
    weft_scope_push();
    weft_device dev = fake_device();
    double ref[12];
    weft_tensor *t = weft_sparse_coalesce(random_coo(2, SHAPE(3, 4), 6, WEFT_F32, ref));
    weft_tensor *on = weft_sparse_to_device(t, dev, false);
    cr_assert_not_null(on, "%s", weft_error_message());
    cr_assert(weft_device_equal(on->device, dev));
    cr_assert(weft_device_equal(weft_sparse_indices(on)->device, dev));
    cr_assert(weft_device_equal(weft_sparse_values(on)->device, dev));
    cr_assert(weft_sparse_is_coalesced(on), "the flag travels");
    /* Index work happens on the host; results come back to the tensor's device. */
    weft_tensor *d = weft_sparse_to_dense(on);
    cr_assert(weft_device_equal(d->device, dev));
    tu_assert_close(d, ref, 12, 0, 0);
    weft_tensor *c = weft_to_sparse_csr(on);
    cr_assert(weft_device_equal(weft_sparse_crow_indices(c)->device, dev));
    expect_dense(c, ref, 12, 0);
    double want[12];
    int64_t tshape[2];
    dense_transpose(ref, 2, SHAPE(3, 4), 0, 1, want, tshape);
    weft_tensor *ct = weft_sparse_transpose(c, 0, 1);
    cr_assert(weft_device_equal(ct->device, dev));
    expect_dense(ct, want, 12, 0);
    weft_tensor *back = weft_sparse_to_device(on, WEFT_CPU, false);
    cr_assert(weft_device_equal(back->device, WEFT_CPU));
    expect_dense(back, ref, 12, 0);
    cr_assert_eq(weft_sparse_to_device(t, WEFT_CPU, false), t);
    weft_tensor *s = weft_sparse_sum(on);
    cr_assert(weft_device_equal(s->device, dev));
    weft_scope_pop();
}

/* ==== arithmetic ============================================================================== */

Test(sparse, add_of_coo_concatenates_or_merges_as_pytorch)
{
    weft_scope_push();
    double ra[20], rb[20], want[20];
    weft_tensor *a = random_coo(2, SHAPE(4, 5), 12, WEFT_F64, ra);
    weft_tensor *b = random_coo(2, SHAPE(4, 5), 9, WEFT_F64, rb);
    for (int i = 0; i < 20; i++)
        want[i] = ra[i] - 2.5 * rb[i];
    weft_tensor *s = weft_sparse_add(a, b, -2.5);
    cr_assert_not_null(s, "%s", weft_error_message());
    cr_assert_eq(weft_tensor_nnz(s), 21, "uncoalesced inputs are concatenated");
    cr_assert_not(weft_sparse_is_coalesced(s));
    expect_dense(s, want, 20, 1e-12);
    weft_tensor *ac = weft_sparse_coalesce(a), *bc = weft_sparse_coalesce(b);
    weft_tensor *m = weft_sparse_add(ac, bc, -2.5);
    expect_coalesced_order(m);
    expect_dense(m, want, 20, 1e-12);
    /* Explicit zeros stay, as PyTorch keeps them. */
    weft_tensor *z = weft_sparse_add(ac, ac, -1);
    cr_assert_eq(weft_tensor_nnz(z), weft_tensor_nnz(ac));
    weft_tensor *i = weft_sparse_add(coo(1, 2, LONGS(0, 2), DOUBLES(1, 2), SHAPE(3), WEFT_I32),
                                     coo(1, 1, LONGS(2), DOUBLES(5), SHAPE(3), WEFT_I32), 3);
    cr_assert_eq(i->dtype, WEFT_I32);
    expect_dense(i, DOUBLES(1, 0, 17), 3, 0);
    weft_scope_pop();
}

Test(sparse, add_of_csr_merges_rows_into_a_sorted_csr)
{
    weft_scope_push();
    for (int trial = 0; trial < 4; trial++) {
        int64_t rows = 1 + rand_below(20), cols = 1 + rand_below(20), n = rows * cols;
        double *ra = malloc((size_t)n * sizeof *ra), *rb = malloc((size_t)n * sizeof *rb);
        double *want = malloc((size_t)n * sizeof *want);
        weft_tensor *a = weft_to_sparse_csr(random_dense(2, SHAPE(rows, cols), WEFT_F32, ra));
        weft_tensor *b = weft_to_sparse_csr(random_dense(2, SHAPE(rows, cols), WEFT_F32, rb));
        for (int64_t i = 0; i < n; i++)
            want[i] = ra[i] + 0.5 * rb[i];
        weft_tensor *s = weft_sparse_add(a, b, 0.5);
        cr_assert_not_null(s, "%s", weft_error_message());
        cr_assert_str_eq(weft_layout_name(s->layout), "sparse_csr");
        expect_dense(s, want, n, 1e-6);
        cr_assert_not_null(weft_sparse_csr_tensor(weft_sparse_crow_indices(s),
                                                  weft_sparse_col_indices(s), weft_sparse_values(s),
                                                  SHAPE(rows, cols), true),
                           "the sum is a valid CSR: %s", weft_error_message());
        free(ra);
        free(rb);
        free(want);
    }
    weft_tensor *a = csr(2, 3, 2, LONGS(0, 1, 2), LONGS(2, 0), DOUBLES(1, 2), WEFT_F32, WEFT_I32);
    weft_tensor *b = csr(2, 3, 2, LONGS(0, 2, 2), LONGS(0, 2), DOUBLES(3, 4), WEFT_F32, WEFT_I32);
    weft_tensor *s = weft_sparse_add(a, b, 1);
    cr_assert_eq(weft_sparse_crow_indices(s)->dtype, WEFT_I32, "int32 indices stay int32");
    expect_longs(weft_sparse_crow_indices(s), LONGS(0, 2, 3), 3);
    expect_longs(weft_sparse_col_indices(s), LONGS(0, 2, 0), 3);
    tu_assert_close(weft_sparse_values(s), DOUBLES(3, 5, 2), 3, 0, 0);
    weft_scope_pop();
}

Test(sparse, add_refuses_mismatched_operands)
{
    weft_scope_push();
    weft_tensor *a = coo(2, 1, LONGS(0, 0), DOUBLES(1), SHAPE(2, 3), WEFT_F32);
    weft_tensor *c = weft_to_sparse_csr(a);
    weft_tensor *d = weft_ones(2, SHAPE(2, 3), WEFT_F32, WEFT_CPU);
    cr_assert_null(weft_sparse_add(a, c, 1));
    tu_assert_error(WEFT_ERR_RUNTIME, "add(): expected both tensors to have the same layout, but "
                                      "got sparse_coo and sparse_csr");
    cr_assert_null(weft_sparse_add(a, d, 1));
    tu_assert_error(WEFT_ERR_RUNTIME,
                    "add(sparse, dense) is not supported. Use add(dense, sparse) instead.");
    cr_assert_null(weft_sparse_add(d, a, 1));
    tu_assert_error(WEFT_ERR_RUNTIME, "expected two sparse tensors, but got layouts strided and "
                                      "sparse_coo");
    weft_tensor *other = coo(2, 1, LONGS(0, 0), DOUBLES(1), SHAPE(2, 4), WEFT_F32);
    cr_assert_null(weft_sparse_add(a, other, 1));
    tu_assert_error(WEFT_ERR_RUNTIME,
                    "add: expected sizes of 'self' and 'other' to match, but [2, 3] != [2, 4]");
    cr_assert_null(weft_sparse_add(c, weft_to_sparse_csr(other), 1));
    tu_assert_error(WEFT_ERR_RUNTIME, "torch.add: Expected input tensors to have the same shape, "
                                      "but got tensor `self` with shape [2, 3] and tensor `other` "
                                      "with shape [2, 4]");
    cr_assert_null(weft_sparse_add(a, coo(2, 1, LONGS(0, 0), DOUBLES(1), SHAPE(2, 3), WEFT_F64), 1));
    tu_assert_error(WEFT_ERR_TYPE, "same dtype, but got Float and Double");
    weft_tensor *on = weft_sparse_to_device(a, fake_device(), false);
    cr_assert_null(weft_sparse_add(a, on, 1));
    tu_assert_error(WEFT_ERR_RUNTIME, "Expected all tensors to be on the same device, but found "
                                      "at least two devices, cpu and fakedev:0!");
    weft_tensor *i = coo(1, 1, LONGS(0), DOUBLES(1), SHAPE(2), WEFT_I64);
    cr_assert_null(weft_sparse_add(i, i, 1.5));
    tu_assert_error(WEFT_ERR_RUNTIME,
                    "For integral input tensors, argument alpha must not be a floating point number.");
    cr_assert_null(weft_sparse_add(NULL, a, 1));
    tu_assert_no_error();
    weft_scope_pop();
}

/* The elementwise front ends skip the dispatch's layout check when they saw every operand
 * strided (weft_dispatch_strided): a sparse operand beside a strided one of the same shape
 * and dtype must still be refused by name, not read as a strided tensor. */
Test(sparse, strided_elementwise_kernels_refuse_a_sparse_operand_by_name)
{
    weft_scope_push();
    weft_tensor *s = coo(2, 1, LONGS(0, 0), DOUBLES(1), SHAPE(2, 3), WEFT_F32);
    weft_tensor *d = weft_ones(2, SHAPE(2, 3), WEFT_F32, WEFT_CPU);
    cr_assert_null(weft_mul(d, s));
    tu_assert_error(WEFT_ERR_NOT_IMPLEMENTED, "no kernel for op 'mul' on device 'cpu' with a "
                                              "sparse_coo operand (operand 1; the first operand "
                                              "is strided)");
    cr_assert_null(weft_mul_(d, s));
    tu_assert_error(WEFT_ERR_NOT_IMPLEMENTED, "with a sparse_coo operand (operand 1");
    cr_assert_null(weft_maximum(d, weft_to_sparse_csr(s)));
    tu_assert_error(WEFT_ERR_NOT_IMPLEMENTED, "with a sparse_csr operand (operand 1");
    weft_tensor *sum = weft_mul(d, d); /* the strided pair still runs */
    cr_assert_not_null(sum);
    double total = 0;
    cr_assert_eq(weft_tensor_item(weft_sum(sum, 0, NULL, false), &total), 0);
    cr_assert_float_eq(total, 6.0, 0);
    weft_scope_pop();
}

Test(sparse, mul_scalar_scales_values_and_shares_the_pattern)
{
    weft_scope_push();
    weft_tensor *t = coo(2, 3, LONGS(1, 0, 1, 2, 1, 2), DOUBLES(1, 2, 3), SHAPE(2, 3), WEFT_F32);
    weft_tensor *m = weft_sparse_mul_scalar(t, -2);
    cr_assert_not_null(m, "%s", weft_error_message());
    cr_assert_eq(weft_sparse_indices_raw(m), weft_sparse_indices_raw(t));
    cr_assert_not(weft_sparse_is_coalesced(m));
    expect_dense(m, DOUBLES(0, -4, 0, 0, 0, -8), 6, 0);
    weft_tensor *c = weft_sparse_mul_scalar(weft_to_sparse_csr(t), 0.5);
    expect_dense(c, DOUBLES(0, 1, 0, 0, 0, 2), 6, 0);
    weft_tensor *i = weft_sparse_mul_scalar(coo(1, 1, LONGS(0), DOUBLES(3), SHAPE(2), WEFT_I64), 2.5);
    cr_assert_eq(i->dtype, WEFT_F32, "int * 2.5 promotes, as torch.mul");
    expect_dense(i, DOUBLES(7.5, 0), 2, 0);
    weft_scope_pop();
}

Test(sparse, sum_adds_every_value_duplicates_included)
{
    weft_scope_push();
    weft_tensor *t = coo(2, 3, LONGS(1, 1, 0, 2, 2, 0), DOUBLES(1, 2, 4), SHAPE(2, 3), WEFT_F32);
    weft_tensor *s = weft_sparse_sum(t);
    cr_assert_not_null(s, "%s", weft_error_message());
    cr_assert_eq(s->ndim, 0);
    cr_assert_eq(s->layout, WEFT_LAYOUT_STRIDED);
    tu_assert_close(s, DOUBLES(7), 1, 0, 0);
    tu_assert_close(weft_sparse_sum(weft_to_sparse_csr(t)), DOUBLES(7), 1, 0, 0);
    weft_tensor *i = coo(1, 2, LONGS(0, 1), DOUBLES(3, 4), SHAPE(2), WEFT_I32);
    cr_assert_eq(weft_sparse_sum(i)->dtype, WEFT_I64, "integers sum to int64, as torch.sum");
    weft_tensor *b = coo(1, 2, LONGS(0, 1), DOUBLES(1, 1), SHAPE(2), WEFT_BOOL);
    tu_assert_close(weft_sparse_sum(b), DOUBLES(2), 1, 0, 0);
    weft_scope_pop();
}

Test(sparse, sum_dim_gives_a_coalesced_coo_of_the_other_dims)
{
    weft_scope_push();
    double ref[60];
    weft_tensor *t = random_coo(3, SHAPE(3, 4, 5), 40, WEFT_F64, ref);
    const int64_t shape[3] = {3, 4, 5};
    for (int dim = -3; dim < 3; dim++) {
        int d = (dim + 3) % 3;
        weft_tensor *s = weft_sparse_sum_dim(t, dim);
        cr_assert_not_null(s, "%s", weft_error_message());
        cr_assert_str_eq(weft_layout_name(s->layout), "sparse_coo");
        cr_assert_eq(s->ndim, 2);
        expect_coalesced_order(s);
        double want[20] = {0};
        int64_t os[2];
        for (int k = 0, o = 0; k < 3; k++)
            if (k != d)
                os[o++] = shape[k];
        tu_assert_shape(s, 2, os);
        for (int64_t i = 0; i < 3; i++)
            for (int64_t j = 0; j < 4; j++)
                for (int64_t k = 0; k < 5; k++) {
                    int64_t idx[3] = {i, j, k}, r[2];
                    for (int q = 0, o = 0; q < 3; q++)
                        if (q != d)
                            r[o++] = idx[q];
                    want[r[0] * os[1] + r[1]] += ref[(i * 4 + j) * 5 + k];
                }
        expect_dense(s, want, os[0] * os[1], 1e-12);
    }
    weft_tensor *v = coo(1, 3, LONGS(0, 2, 0), DOUBLES(1, 2, 3), SHAPE(3), WEFT_I32);
    weft_tensor *s1 = weft_sparse_sum_dim(v, 0);
    cr_assert_eq(s1->layout, WEFT_LAYOUT_STRIDED, "a 1-D input sums to a 0-dim dense tensor");
    cr_assert_eq(s1->ndim, 0);
    tu_assert_close(s1, DOUBLES(6), 1, 0, 0);
    weft_tensor *i = weft_sparse_sum_dim(coo(2, 2, LONGS(0, 0, 1, 1), DOUBLES(1, 2), SHAPE(1, 2),
                                             WEFT_I32), 0);
    cr_assert_eq(i->dtype, WEFT_I32, "sum over a dim keeps the dtype, as torch.sparse.sum");
    /* A CSR input: summed over its columns. */
    double rows[4] = {0};
    for (int64_t i = 0; i < 3; i++)
        for (int64_t j = 0; j < 4; j++)
            for (int64_t k = 0; k < 5; k++)
                rows[j] += ref[(i * 4 + j) * 5 + k];
    expect_dense(weft_sparse_sum_dim(weft_to_sparse_csr(weft_sparse_sum_dim(t, 0)), 1), rows, 4,
                 1e-12);
    cr_assert_null(weft_sparse_sum_dim(v, 1));
    tu_assert_error(WEFT_ERR_INDEX, "Dimension out of range (expected to be in range of [-1, 0], "
                                    "but got 1)");
    weft_scope_pop();
}

/* ==== the repr =============================================================================== */

static void expect_repr(const weft_tensor *t, const char *want)
{
    cr_assert_not_null(t, "%s", weft_error_message());
    char *got = weft_tensor_repr(t);
    cr_assert_not_null(got, "repr: %s", weft_error_message());
    cr_assert_str_eq(got, want);
    free(got);
}

Test(sparse, repr_matches_pytorch_for_coo)
{
    weft_scope_push();
    weft_tensor *i = longs(2, SHAPE(2, 2), LONGS(0, 1, 2, 0));
    expect_repr(weft_sparse_coo_tensor(i, vec(2, DOUBLES(3, 4), WEFT_F32), 2, SHAPE(2, 3), false),
                "tensor(indices=tensor([[0, 1],\n"
                "                       [2, 0]]),\n"
                "       values=tensor([3., 4.]),\n"
                "       size=(2, 3), nnz=2, layout=torch.sparse_coo)");
    expect_repr(weft_sparse_coo_tensor(i, vec(2, DOUBLES(3, 4), WEFT_F64), 2, SHAPE(2, 3), false),
                "tensor(indices=tensor([[0, 1],\n"
                "                       [2, 0]]),\n"
                "       values=tensor([3., 4.]),\n"
                "       size=(2, 3), nnz=2, dtype=torch.float64, layout=torch.sparse_coo)");
    expect_repr(weft_sparse_coo_tensor(longs(2, SHAPE(2, 0), NULL), vec(0, NULL, WEFT_F32), 2,
                                       SHAPE(2, 3), false),
                "tensor(indices=tensor([], size=(2, 0)),\n"
                "       values=tensor([], size=(0,)),\n"
                "       size=(2, 3), nnz=0, layout=torch.sparse_coo)");
    expect_repr(coo(1, 3, LONGS(0, 1, 2), DOUBLES(1, 2, 3), SHAPE(5), WEFT_I64),
                "tensor(indices=tensor([[0, 1, 2]]),\n"
                "       values=tensor([1, 2, 3]),\n"
                "       size=(5,), nnz=3, layout=torch.sparse_coo)");
    expect_repr(weft_sparse_coo_tensor(i, vec(2, DOUBLES(1, 0), WEFT_BOOL), 2, SHAPE(2, 3), false),
                "tensor(indices=tensor([[0, 1],\n"
                "                       [2, 0]]),\n"
                "       values=tensor([ True, False]),\n"
                "       size=(2, 3), nnz=2, layout=torch.sparse_coo)");
    expect_repr(weft_sparse_coo_tensor(i, vec(2, DOUBLES(1.5, -2.25), WEFT_F16), 2, SHAPE(2, 3),
                                       false),
                "tensor(indices=tensor([[0, 1],\n"
                "                       [2, 0]]),\n"
                "       values=tensor([ 1.5000, -2.2500]),\n"
                "       size=(2, 3), nnz=2, dtype=torch.float16, layout=torch.sparse_coo)");
    weft_tensor *v = vec(2, DOUBLES(3, 4), WEFT_F32);
    weft_requires_grad_(v, true);
    expect_repr(weft_sparse_coo_tensor(i, v, 2, SHAPE(2, 3), false),
                "tensor(indices=tensor([[0, 1],\n"
                "                       [2, 0]]),\n"
                "       values=tensor([3., 4.]),\n"
                "       size=(2, 3), nnz=2, layout=torch.sparse_coo,\n"
                "       grad_fn=<SparseCooTensorWithDimsAndTensorsBackward0>)");
    int64_t eight[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    expect_repr(weft_sparse_coo_tensor(longs(2, SHAPE(8, 1), eight), vec(1, DOUBLES(1), WEFT_F32),
                                       8, SHAPE(9, 9, 9, 9, 9, 9, 9, 9), false),
                "tensor(indices=tensor([[0],\n"
                "                       [1],\n"
                "                       [2],\n"
                "                       [3],\n"
                "                       [4],\n"
                "                       [5],\n"
                "                       [6],\n"
                "                       [7]]),\n"
                "       values=tensor([1.]),\n"
                "       size=(9, 9, 9, 9, 9, 9, 9, 9), nnz=1, layout=torch.sparse_coo)");
    weft_scope_pop();
}

Test(sparse, repr_matches_pytorch_for_csr)
{
    weft_scope_push();
    expect_repr(csr(2, 3, 2, LONGS(0, 1, 2), LONGS(2, 0), DOUBLES(3, 4), WEFT_F32, WEFT_I64),
                "tensor(crow_indices=tensor([0, 1, 2]),\n"
                "       col_indices=tensor([2, 0]),\n"
                "       values=tensor([3., 4.]), size=(2, 3), nnz=2, layout=torch.sparse_csr)");
    expect_repr(csr(2, 3, 2, LONGS(0, 1, 2), LONGS(2, 0), DOUBLES(3, 4), WEFT_F64, WEFT_I32),
                "tensor(crow_indices=tensor([0, 1, 2]),\n"
                "       col_indices=tensor([2, 0]),\n"
                "       values=tensor([3., 4.]), size=(2, 3), nnz=2, dtype=torch.float64,\n"
                "       layout=torch.sparse_csr)");
    expect_repr(csr(2, 3, 0, LONGS(0, 0, 0), NULL, NULL, WEFT_F32, WEFT_I64),
                "tensor(crow_indices=tensor([0, 0, 0]),\n"
                "       col_indices=tensor([], size=(0,)),\n"
                "       values=tensor([], size=(0,)), size=(2, 3), nnz=0,\n"
                "       layout=torch.sparse_csr)");
    weft_scope_pop();
}

Test(sparse, repr_wraps_long_components_at_their_own_indent)
{
    weft_scope_push();
    enum { N = 30 };
    int64_t idx[2 * N], crow[N + 1];
    double vals[N];
    for (int k = 0; k < N; k++) {
        idx[k] = k;
        idx[N + k] = 3 * k;
        crow[k] = k;
        vals[k] = k / 7.0;
    }
    crow[N] = N;
    expect_repr(coo(2, N, idx, vals, SHAPE(N, 3 * N), WEFT_F32),
                "tensor(indices=tensor([[ 0,  1,  2,  3,  4,  5,  6,  7,  8,  9, 10, 11, 12, 13,\n"
                "                        14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27,\n"
                "                        28, 29],\n"
                "                       [ 0,  3,  6,  9, 12, 15, 18, 21, 24, 27, 30, 33, 36, 39,\n"
                "                        42, 45, 48, 51, 54, 57, 60, 63, 66, 69, 72, 75, 78, 81,\n"
                "                        84, 87]]),\n"
                "       values=tensor([0.0000, 0.1429, 0.2857, 0.4286, 0.5714, 0.7143, 0.8571,\n"
                "                      1.0000, 1.1429, 1.2857, 1.4286, 1.5714, 1.7143, 1.8571,\n"
                "                      2.0000, 2.1429, 2.2857, 2.4286, 2.5714, 2.7143, 2.8571,\n"
                "                      3.0000, 3.1429, 3.2857, 3.4286, 3.5714, 3.7143, 3.8571,\n"
                "                      4.0000, 4.1429]),\n"
                "       size=(30, 90), nnz=30, layout=torch.sparse_coo)");
    expect_repr(csr(N, 3 * N, N, crow, idx + N, vals, WEFT_F32, WEFT_I64),
                "tensor(crow_indices=tensor([ 0,  1,  2,  3,  4,  5,  6,  7,  8,  9, 10, 11, 12,\n"
                "                            13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25,\n"
                "                            26, 27, 28, 29, 30]),\n"
                "       col_indices=tensor([ 0,  3,  6,  9, 12, 15, 18, 21, 24, 27, 30, 33, 36,\n"
                "                           39, 42, 45, 48, 51, 54, 57, 60, 63, 66, 69, 72, 75,\n"
                "                           78, 81, 84, 87]),\n"
                "       values=tensor([0.0000, 0.1429, 0.2857, 0.4286, 0.5714, 0.7143, 0.8571,\n"
                "                      1.0000, 1.1429, 1.2857, 1.4286, 1.5714, 1.7143, 1.8571,\n"
                "                      2.0000, 2.1429, 2.2857, 2.4286, 2.5714, 2.7143, 2.8571,\n"
                "                      3.0000, 3.1429, 3.2857, 3.4286, 3.5714, 3.7143, 3.8571,\n"
                "                      4.0000, 4.1429]), size=(30, 90), nnz=30,\n"
                "       layout=torch.sparse_csr)");
    /* Past 1000 elements the indices are summarised. */
    enum { M = 600 };
    int64_t *big = malloc(2 * M * sizeof *big);
    double *bv = malloc(M * sizeof *bv);
    for (int k = 0; k < M; k++) {
        big[k] = big[M + k] = k;
        bv[k] = k;
    }
    char *r = weft_tensor_repr(coo(2, M, big, bv, SHAPE(M, M), WEFT_F32));
    cr_assert_not_null(r);
    cr_assert(strncmp(r, "tensor(indices=tensor([[  0,   1,   2,  ..., 597, 598, 599],\n"
                         "                       [  0,   1,   2,  ..., 597, 598, 599]]),\n"
                         "       values=tensor([  0.,   1.,   2.,   3.,   4.,   5.,   6.,   7.,   8.,\n"
                         "                        9.,  10.,",
                      strlen("tensor(indices=tensor([[  0,   1,   2,  ..., 597, 598, 599],\n"
                             "                       [  0,   1,   2,  ..., 597, 598, 599]]),\n"
                             "       values=tensor([  0.,   1.,   2.,   3.,   4.,   5.,   6.,   7.,   8.,\n"
                             "                        9.,  10.,")) == 0,
              "%s", r);
    const char *tail = "594., 595., 596., 597., 598., 599.]),\n"
                       "       size=(600, 600), nnz=600, layout=torch.sparse_coo)";
    cr_assert_str_eq(r + strlen(r) - strlen(tail), tail);
    free(r);
    free(big);
    free(bv);
    weft_scope_pop();
}

/* ==== what the core does with sparse tensors ================================================= */

Test(sparse, core_ops_refuse_sparse_tensors_cleanly)
{
    weft_scope_push();
    weft_tensor *t = coo(2, 2, LONGS(0, 1, 2, 0), DOUBLES(3, 4), SHAPE(2, 3), WEFT_F32);
    weft_tensor *d = weft_ones(2, SHAPE(2, 3), WEFT_F32, WEFT_CPU);
    double v;
    cr_assert_null(weft_add(t, d));
    cr_assert_neq(weft_error_code(), WEFT_OK);
    weft_error_clear();
    cr_assert_null(weft_sin(t));
    cr_assert_neq(weft_error_code(), WEFT_OK);
    weft_error_clear();
    cr_assert_null(weft_view(t, 1, SHAPE(6)));
    cr_assert_neq(weft_error_code(), WEFT_OK);
    weft_error_clear();
    cr_assert_null(weft_sum(t, 0, NULL, false));
    cr_assert_neq(weft_error_code(), WEFT_OK);
    weft_error_clear();
    cr_assert_null(weft_to_dtype(t, WEFT_F64));
    cr_assert_neq(weft_error_code(), WEFT_OK);
    weft_error_clear();
    cr_assert_neq(weft_tensor_item(t, &v), 0);
    cr_assert_neq(weft_error_code(), WEFT_OK);
    weft_error_clear();
    cr_assert_null(weft_tensor_data(t));
    cr_assert_not(weft_tensor_is_contiguous(t));
    weft_tensor *c = weft_contiguous(t);
    cr_assert(c == NULL || c == t, "contiguous() refuses or returns the sparse tensor itself");
    weft_error_clear();
    char *r = weft_tensor_repr(t);
    cr_assert_not_null(r, "%s", weft_error_message());
    free(r);
    weft_scope_pop();
}

/* ==== autograd ================================================================================ */

struct sparse_case {
    int op;
    weft_tensor *indices, *w;
};

/* The functions checked: each ends dense (gradcheck weights its output). */
enum { G_COO, G_CSR, G_COALESCE, G_MUL, G_ADD, G_TRANSPOSE, G_TRANSPOSE_CSR, G_TO_CSR,
       G_SUM, G_SUM_DIM, G_DENSE_TO_SPARSE, G_TO_DEVICE, G_COUNT };

static weft_tensor *sparse_fn(void *ctx, weft_tensor *const *in)
{
    const struct sparse_case *c = ctx;
    weft_tensor *s = weft_sparse_coo_tensor(c->indices, in[0], 2, SHAPE(3, 4), true);
    switch (c->op) {
    case G_COO:
        return weft_mul(weft_sparse_to_dense(s), c->w);
    case G_CSR:
        return weft_sparse_to_dense(weft_sparse_csr_tensor(longs(1, SHAPE(4), LONGS(0, 2, 2, 5)),
                                                           longs(1, SHAPE(5), LONGS(0, 3, 0, 1, 3)),
                                                           in[0], SHAPE(3, 4), true));
    case G_COALESCE:
        return weft_sparse_to_dense(weft_sparse_coalesce(s));
    case G_MUL:
        return weft_sparse_to_dense(weft_sparse_mul_scalar(s, -1.5));
    case G_ADD: {
        weft_tensor *s2 = weft_sparse_coo_tensor(c->indices, in[1], 2, SHAPE(3, 4), true);
        return weft_sparse_to_dense(weft_sparse_add(weft_sparse_coalesce(s), s2, 0.5));
    }
    case G_TRANSPOSE:
        return weft_sparse_to_dense(weft_sparse_transpose(s, 0, 1));
    case G_TRANSPOSE_CSR:
        return weft_sparse_to_dense(weft_sparse_transpose(weft_to_sparse_csr(s), 0, 1));
    case G_TO_CSR:
        return weft_sparse_to_dense(weft_to_sparse_coo(weft_to_sparse_csr(s)));
    case G_SUM:
        return weft_sparse_sum(s);
    case G_SUM_DIM:
        return weft_sparse_to_dense(weft_sparse_sum_dim(s, 1));
    case G_DENSE_TO_SPARSE:
        return weft_sparse_to_dense(weft_sparse_mul_scalar(weft_to_sparse_coo(in[2]), 3));
    case G_TO_DEVICE:
        return weft_sparse_to_dense(weft_sparse_to_device(s, WEFT_CPU, false));
    }
    return NULL;
}

Test(sparse, gradients_flow_through_every_differentiable_op)
{
    weft_scope_push();
    /* 5 entries of a 3 x 4 matrix, one position twice. */
    weft_tensor *indices = longs(2, SHAPE(2, 5), LONGS(2, 0, 2, 0, 1, 1, 3, 1, 0, 3));
    double vals[5], dense[12], wv[12];
    uint64_t seed = 7;
    tu_random_values(vals, 5, -1, 1, &seed);
    tu_random_values(dense, 12, -1, 1, &seed);
    tu_random_values(wv, 12, -1, 1, &seed);
    weft_tensor *in[3] = {vec(5, vals, WEFT_F64), vec(5, vals, WEFT_F64),
                          tu_tensor(2, SHAPE(3, 4), dense, WEFT_F64)};
    for (int i = 0; i < 3; i++)
        weft_requires_grad_(in[i], true);
    struct sparse_case c = {0, indices, tu_tensor(2, SHAPE(3, 4), wv, WEFT_F64)};
    for (c.op = 0; c.op < G_COUNT; c.op++) {
        cr_expect_eq(weft_gradcheck(sparse_fn, &c, 3, in, 1e-6, 1e-7, 1e-6), 0, "op %d: %s", c.op,
                     weft_error_message());
        weft_error_clear();
    }
    weft_scope_pop();
}

Test(sparse, nodes_carry_pytorch_names)
{
    weft_scope_push();
    weft_tensor *v = vec(2, DOUBLES(1, 2), WEFT_F32);
    weft_requires_grad_(v, true);
    weft_tensor *s = weft_sparse_coo_tensor(longs(2, SHAPE(2, 2), LONGS(0, 1, 2, 0)), v, 2,
                                            SHAPE(2, 3), true);
    cr_assert_str_eq(weft_grad_fn_name(s), "SparseCooTensorWithDimsAndTensorsBackward0");
    cr_assert_str_eq(weft_grad_fn_name(weft_sparse_to_dense(s)), "ToDenseBackward0");
    cr_assert_str_eq(weft_grad_fn_name(weft_sparse_coalesce(s)), "CoalesceBackward0");
    cr_assert_str_eq(weft_grad_fn_name(weft_sparse_mul_scalar(s, 2)), "MulBackward0");
    cr_assert_str_eq(weft_grad_fn_name(weft_sparse_sum(s)), "SumBackward0");
    cr_assert_str_eq(weft_grad_fn_name(weft_sparse_sum_dim(s, 0)), "SparseSumBackward0");
    cr_assert_str_eq(weft_grad_fn_name(weft_sparse_transpose(s, 0, 1)), "TransposeBackward0");
    cr_assert_str_eq(weft_grad_fn_name(weft_sparse_add(s, s, 1)), "AddBackward0");
    cr_assert_str_eq(weft_grad_fn_name(weft_to_sparse_csr(s)), "ToSparseCsrBackward0");
    weft_tensor *c = weft_sparse_csr_tensor(longs(1, SHAPE(3), LONGS(0, 1, 2)),
                                            longs(1, SHAPE(2), LONGS(2, 0)), v, SHAPE(2, 3), true);
    cr_assert_str_eq(weft_grad_fn_name(c), "SparseCompressedTensorBackward0");
    cr_assert_null(weft_grad_fn_name(weft_sparse_values_raw(s)), "components carry no history");
    bool prev = weft_no_grad_begin();
    cr_assert_null(weft_grad_fn_name(weft_sparse_to_dense(s)), "nothing recorded under no_grad");
    weft_grad_mode_restore(prev);
    weft_scope_pop();
}

Test(sparse, backward_reaches_the_values_through_to_dense)
{
    weft_scope_push();
    weft_tensor *v = vec(3, DOUBLES(1, 2, 3), WEFT_F32);
    weft_requires_grad_(v, true);
    /* (0, 1) twice: both entries get that position's gradient. */
    weft_tensor *s = weft_sparse_coo_tensor(longs(2, SHAPE(2, 3), LONGS(0, 1, 0, 1, 2, 1)), v, 2,
                                            SHAPE(2, 3), true);
    weft_tensor *w = tu_tensor(2, SHAPE(2, 3), DOUBLES(1, 2, 3, 4, 5, 6), WEFT_F32);
    weft_tensor *loss = weft_sum(weft_mul(weft_sparse_to_dense(s), w), 0, NULL, false);
    cr_assert_eq(weft_backward(loss, NULL, false), 0, "%s", weft_error_message());
    tu_assert_close(weft_grad(v), DOUBLES(2, 6, 2), 3, 0, 0);
    weft_scope_pop();
}

/* ==== performance ============================================================================= */

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

Test(sparse, a_million_entries_convert_between_coo_and_csr_in_milliseconds)
{
    weft_scope_push();
    enum { N = 100000, NNZ = 1000000 };
    int64_t *idx = malloc(2 * (size_t)NNZ * sizeof *idx);
    for (int64_t e = 0; e < NNZ; e++) {
        idx[e] = e / 10;
        idx[NNZ + e] = (e * 7919) % N;
    }
    weft_tensor *t = weft_sparse_coalesce(
        weft_sparse_coo_tensor(longs(2, SHAPE(2, NNZ), idx), weft_ones(1, SHAPE(NNZ), WEFT_F32,
                                                                       WEFT_CPU),
                               2, SHAPE(N, N), false));
    free(idx);
    cr_assert_not_null(t, "%s", weft_error_message());
    double best_to = 1e9, best_back = 1e9;
    for (int rep = 0; rep < 3; rep++) {
        weft_scope_push();
        double t0 = now();
        weft_tensor *c = weft_to_sparse_csr(t);
        double t1 = now();
        weft_tensor *back = weft_to_sparse_coo(c);
        double t2 = now();
        cr_assert_not_null(back, "%s", weft_error_message());
        best_to = t1 - t0 < best_to ? t1 - t0 : best_to;
        best_back = t2 - t1 < best_back ? t2 - t1 : best_back;
        weft_scope_pop();
    }
    cr_log_info("COO -> CSR %.2f ms, CSR -> COO %.2f ms", best_to * 1e3, best_back * 1e3);
    /* Generous bounds (sanitizer builds are slower); the plain build takes a few ms. */
    cr_expect_lt(best_to, 0.25, "COO -> CSR took %.1f ms", best_to * 1e3);
    cr_expect_lt(best_back, 0.25, "CSR -> COO took %.1f ms", best_back * 1e3);
    weft_scope_pop();
}

/* A C program makes a SparseLinear without a config: on a CSR batch it gives the dense
 * Linear's value with the same parameters, and its gradients reach weight and bias. */
Test(sparse, sparse_linear_from_c_matches_a_dense_linear_and_trains)
{
    weft_scope_push();
    weft_module *m = weft_sparse_linear(4, 3, true);
    cr_assert_not_null(m, "%s", weft_error_message());
    struct weft_sparse_linear_info info;
    cr_assert_eq(weft_sparse_linear_info(m, &info), 0);
    cr_expect_eq(info.in_features, 4);
    cr_expect_eq(info.out_features, 3);
    cr_expect_str_eq(info.indices, "");
    const double dense[2][4] = {{0, 1.5, 0, -2}, {3, 0, 0, 0.5}};
    int64_t shape[2] = {2, 4};
    weft_tensor *xd = weft_from_host(dense, 2, shape, WEFT_F64, WEFT_CPU);
    weft_tensor *x = weft_to_sparse_csr(weft_to_dtype(xd, WEFT_F32));
    cr_assert_not_null(x, "%s", weft_error_message());
    weft_tensor *y = weft_module_forward(m, x);
    cr_assert_not_null(y, "%s", weft_error_message());
    weft_tensor *w = weft_module_parameter(m, "weight"), *b = weft_module_parameter(m, "bias");
    weft_tensor *want = weft_linear(weft_to_dtype(xd, WEFT_F32), w, b);
    double got_v[6], want_v[6];
    weft_tensor *yd = weft_to_dtype(y, WEFT_F64), *wd = weft_to_dtype(want, WEFT_F64);
    cr_assert_eq(weft_tensor_read(yd, got_v, sizeof got_v), 0);
    cr_assert_eq(weft_tensor_read(wd, want_v, sizeof want_v), 0);
    for (int i = 0; i < 6; i++)
        cr_expect_float_eq(got_v[i], want_v[i], 1e-5, "element %d", i);
    cr_assert_eq(weft_backward(weft_sum(y, 0, NULL, false), NULL, false), 0, "%s",
                 weft_error_message());
    cr_expect_not_null(weft_grad(w));
    cr_expect_not_null(weft_grad(b));
    cr_expect_eq(weft_sparse_linear_info(NULL, &info), 1);
    weft_module_free(m);
    weft_scope_pop();
}
