/* tests/test_matmul.c: torch.matmul semantics.
 *
 * Every shape case of torch.matmul (dot, mv, vm, mm, batched with broadcast batch dims,
 * empty) runs on every dtype with a kernel, with each operand contiguous, transposed (the
 * BLAS "Trans" path), sliced with a step (copied to contiguous first) or batch-expanded
 * (stride 0), against a plain triple loop in double. Named tests cover the batch-parallel
 * path, long inner dims and every error text. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <weft/backend.h>
#include <weft/options.h>
#include <weft/plugin.h>

#include "testutil.h"

TestSuite(matmul, .init = tu_setup, .fini = tu_teardown);

enum layout { CONTIGUOUS, TRANSPOSED, SLICED, EXPANDED, LAYOUT_COUNT };

static int64_t numel_of(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    return n;
}

/* A tensor of `shape` with random values, stored as asked: TRANSPOSED keeps the last two
 * dims swapped in memory, SLICED takes every other element of the last dim, EXPANDED
 * broadcasts the first dim from size 1. */
static weft_tensor *make_operand(int ndim, const int64_t *shape, enum weft_dtype dt,
                                 enum layout layout, uint64_t *st)
{
    int64_t base[WEFT_MAX_DIMS];
    memcpy(base, shape, (size_t)ndim * sizeof *base);
    if (layout == TRANSPOSED && ndim >= 2) {
        base[ndim - 1] = shape[ndim - 2];
        base[ndim - 2] = shape[ndim - 1];
    }
    if (layout == SLICED)
        base[ndim - 1] *= 2;
    if (layout == EXPANDED && ndim >= 3)
        base[0] = 1;
    int64_t n = numel_of(ndim, base);
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    bool fp = weft_dtype_is_floating(dt);
    tu_random_values(v, n, fp ? -1 : (dt == WEFT_U8 ? 0 : -5), fp ? 1 : 5, st);
    if (!fp)
        for (int64_t i = 0; i < n; i++)
            v[i] = floor(v[i]);
    weft_tensor *t = tu_tensor(ndim, base, v, dt);
    free(v);
    if (layout == TRANSPOSED && ndim >= 2)
        t = weft_transpose(t, -1, -2);
    else if (layout == SLICED)
        t = weft_slice(t, -1, 0, base[ndim - 1], 2);
    else if (layout == EXPANDED && ndim >= 3)
        t = weft_expand(t, ndim, shape);
    cr_assert_not_null(t, "make_operand: %s", weft_error_message());
    return t;
}

static double *read_all(const weft_tensor *t)
{
    int64_t n = weft_tensor_numel(t);
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    tu_read(t, v);
    return v;
}

/* torch.matmul in double on row-major values; writes the result shape too. */
static int ref_matmul(const double *a, int nda, const int64_t *sa, const double *b, int ndb,
                      const int64_t *sb, double *out, int64_t *oshape)
{
    int64_t M = nda >= 2 ? sa[nda - 2] : 1, K = sa[nda - 1], N = ndb >= 2 ? sb[ndb - 1] : 1;
    int ba = nda > 2 ? nda - 2 : 0, bb = ndb > 2 ? ndb - 2 : 0, nb = ba > bb ? ba : bb;
    int64_t bshape[WEFT_MAX_DIMS], nbatch = 1;
    for (int i = 0; i < nb; i++) {
        int ia = i - (nb - ba), ib = i - (nb - bb);
        int64_t x = ia >= 0 ? sa[ia] : 1, y = ib >= 0 ? sb[ib] : 1;
        bshape[i] = x == 1 ? y : x;
        nbatch *= bshape[i];
    }
    for (int64_t bi = 0; bi < nbatch; bi++) {
        int64_t rem = bi, offa = 0, offb = 0, stra = M * K, strb = K * N;
        for (int i = nb - 1; i >= 0; i--) {
            int64_t idx = rem % bshape[i];
            rem /= bshape[i];
            int ia = i - (nb - ba), ib = i - (nb - bb);
            if (ia >= 0) {
                offa += (sa[ia] == 1 ? 0 : idx) * stra;
                stra *= sa[ia];
            }
            if (ib >= 0) {
                offb += (sb[ib] == 1 ? 0 : idx) * strb;
                strb *= sb[ib];
            }
        }
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double s = 0;
                for (int64_t k = 0; k < K; k++)
                    s += a[offa + i * K + k] * b[offb + k * N + j];
                out[(bi * M + i) * N + j] = s;
            }
    }
    int ond = nb;
    memcpy(oshape, bshape, (size_t)nb * sizeof *oshape);
    if (nda >= 2)
        oshape[ond++] = M;
    if (ndb >= 2)
        oshape[ond++] = N;
    return ond;
}

struct mm_case {
    int nda, ndb;
    int64_t sa[4], sb[4];
};

static const struct mm_case cases[] = {
    {1, 1, {5}, {5}},                         /* dot -> 0-dim */
    {2, 1, {3, 4}, {4}},                      /* mv */
    {1, 2, {4}, {4, 5}},                      /* vm */
    {2, 2, {3, 4}, {4, 5}},                   /* mm */
    {2, 2, {1, 7}, {7, 1}},                   /* 1x1 result */
    {3, 3, {2, 3, 4}, {2, 4, 5}},             /* bmm */
    {3, 2, {2, 3, 4}, {4, 5}},                /* batch x matrix */
    {2, 3, {3, 4}, {2, 4, 5}},                /* matrix x batch */
    {1, 3, {4}, {2, 4, 5}},                   /* vector x batch */
    {3, 1, {2, 3, 4}, {4}},                   /* batch x vector */
    {4, 4, {2, 1, 3, 4}, {1, 3, 4, 5}},       /* broadcast both ways */
    {4, 3, {2, 2, 3, 4}, {2, 4, 5}},          /* broadcast a missing dim */
    {3, 3, {1, 3, 4}, {4, 4, 2}},             /* size-1 batch broadcast */
    {2, 2, {0, 4}, {4, 5}},                   /* empty rows */
    {2, 2, {3, 0}, {0, 5}},                   /* empty inner dim: zeros */
    {3, 3, {0, 3, 4}, {1, 4, 2}},             /* empty batch */
};

static double tol_of(enum weft_dtype dt)
{
    switch (dt) {
    case WEFT_F16: return 2e-3;
    case WEFT_BF16: return 1.6e-2;
    case WEFT_F32: return 1e-5;
    case WEFT_F64: return 1e-12;
    default: return 0;
    }
}

Test(matmul, every_shape_case_matches_reference_for_every_dtype_and_layout)
{
    uint64_t st = 1;
    const enum weft_dtype dts[] = {WEFT_F32, WEFT_F64, WEFT_F16, WEFT_BF16, WEFT_I64,
                                   WEFT_I32,  WEFT_I16, WEFT_I8,   WEFT_U8};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
        for (size_t k = 0; k < sizeof dts / sizeof *dts; k++)
            for (int la = 0; la < LAYOUT_COUNT; la++) {
                weft_scope_push();
                const struct mm_case *mc = &cases[c];
                weft_tensor *a = make_operand(mc->nda, mc->sa, dts[k], (enum layout)la, &st);
                weft_tensor *b = make_operand(mc->ndb, mc->sb, dts[k],
                                              (enum layout)((la + c) % LAYOUT_COUNT), &st);
                double *x = read_all(a), *y = read_all(b), e[512];
                int64_t oshape[WEFT_MAX_DIMS];
                int ond = ref_matmul(x, mc->nda, mc->sa, y, mc->ndb, mc->sb, e, oshape);
                weft_tensor *r = weft_matmul(a, b);
                cr_assert_not_null(r, "case %zu %s: %s", c, weft_dtype_name(dts[k]), weft_error_message());
                cr_assert_eq(r->dtype, dts[k]);
                tu_assert_shape(r, ond, oshape);
                /* |values| <= 5 and K <= 7 keep even int8 results in range */
                tu_assert_close(r, e, numel_of(ond, oshape), tol_of(dts[k]), tol_of(dts[k]));
                free(x);
                free(y);
                weft_scope_pop();
            }
}

Test(matmul, small_integer_products_wrap_like_their_dtype)
{
    weft_scope_push();
    const double a[] = {100, 100}, b[] = {2, 1};
    weft_tensor *ta = tu_tensor(2, (int64_t[]){1, 2}, a, WEFT_I8);
    weft_tensor *tb = tu_tensor(2, (int64_t[]){2, 1}, b, WEFT_I8);
    tu_assert_close(weft_matmul(ta, tb), (double[]){(int8_t)300}, 1, 0, 0);
    weft_tensor *ua = tu_tensor(1, (int64_t[]){2}, (double[]){200, 100}, WEFT_U8);
    weft_tensor *ub = tu_tensor(1, (int64_t[]){2}, (double[]){1, 1}, WEFT_U8);
    tu_assert_close(weft_matmul(ua, ub), (double[]){(uint8_t)300}, 1, 0, 0);
    weft_scope_pop();
}

/* Both operands in all four transpose combinations on sizes that are not multiples of any
 * block size, through BLAS (f32/f64) and the plain loop (f16, int64). */
Test(matmul, transposed_operands_of_odd_sizes_match_reference)
{
    uint64_t st = 2;
    const int64_t M = 37, K = 129, N = 61;
    const enum weft_dtype dts[] = {WEFT_F32, WEFT_F64, WEFT_F16, WEFT_I64};
    for (size_t k = 0; k < 4; k++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                weft_scope_push();
                weft_tensor *a = make_operand(2, (int64_t[]){M, K}, dts[k], ta ? TRANSPOSED : CONTIGUOUS, &st);
                weft_tensor *b = make_operand(2, (int64_t[]){K, N}, dts[k], tb ? TRANSPOSED : CONTIGUOUS, &st);
                double *x = read_all(a), *y = read_all(b);
                double *e = malloc((size_t)(M * N) * sizeof *e);
                int64_t oshape[2];
                ref_matmul(x, 2, (int64_t[]){M, K}, y, 2, (int64_t[]){K, N}, e, oshape);
                double tol = dts[k] == WEFT_F16 ? 3e-3 : tol_of(dts[k]);
                tu_assert_close(weft_matmul(a, b), e, M * N, tol, tol * 10);
                free(e);
                free(x);
                free(y);
                weft_scope_pop();
            }
}

/* Many small matrices run in parallel over the batch with single-threaded GEMMs. */
Test(matmul, large_batches_of_small_matrices_match_reference)
{
    weft_scope_push();
    uint64_t st = 3;
    const int64_t sa[3] = {300, 9, 7}, sb[3] = {300, 7, 5};
    weft_tensor *a = make_operand(3, sa, WEFT_F32, TRANSPOSED, &st);
    weft_tensor *b = make_operand(3, sb, WEFT_F32, CONTIGUOUS, &st);
    double *x = read_all(a), *y = read_all(b);
    double *e = malloc(300 * 9 * 5 * sizeof *e);
    int64_t oshape[3];
    ref_matmul(x, 3, sa, y, 3, sb, e, oshape);
    tu_assert_close(weft_matmul(a, b), e, 300 * 9 * 5, 1e-5, 1e-5);
    weft_tensor *ai = weft_to_dtype(a, WEFT_I32), *bi = weft_to_dtype(b, WEFT_I32);
    double *xi = read_all(ai), *yi = read_all(bi);
    ref_matmul(xi, 3, sa, yi, 3, sb, e, oshape);
    tu_assert_close(weft_matmul(ai, bi), e, 300 * 9 * 5, 0, 0);
    free(e);
    free(x);
    free(y);
    free(xi);
    free(yi);
    weft_scope_pop();
}

/* bfloat16 products run on oneDNN's matmul primitive, kept per shape in a table of 256
 * slots filled to three quarters, each with memory objects per calling thread: a batch
 * split across threads shares one primitive, and shapes past the table's fill get one made
 * for the call. */
Test(matmul, bfloat16_batches_and_more_shapes_than_the_primitive_table_match_reference)
{
    uint64_t st = 5;
    weft_scope_push();
    const int64_t sa[3] = {300, 9, 7}, sb[3] = {300, 7, 5};
    weft_tensor *a = make_operand(3, sa, WEFT_BF16, CONTIGUOUS, &st);
    weft_tensor *b = make_operand(3, sb, WEFT_BF16, TRANSPOSED, &st);
    double *x = read_all(a), *y = read_all(b), *e = malloc(300 * 9 * 5 * sizeof *e);
    cr_assert_not_null(e);
    int64_t oshape[3];
    ref_matmul(x, 3, sa, y, 3, sb, e, oshape);
    for (int rep = 0; rep < 3; rep++)
        tu_assert_close(weft_matmul(a, b), e, 300 * 9 * 5, tol_of(WEFT_BF16), tol_of(WEFT_BF16));
    free(x);
    free(y);
    free(e);
    weft_scope_pop();
    for (int64_t m = 1; m <= 230; m++) {
        weft_scope_push();
        const int64_t sm[2] = {m, 6}, sn[2] = {6, 3};
        weft_tensor *p = make_operand(2, sm, WEFT_BF16, CONTIGUOUS, &st);
        weft_tensor *q = make_operand(2, sn, WEFT_BF16, CONTIGUOUS, &st);
        double *px = read_all(p), *qx = read_all(q), ev[230 * 3];
        ref_matmul(px, 2, sm, qx, 2, sn, ev, oshape);
        weft_tensor *r = weft_matmul(p, q);
        cr_assert_not_null(r, "M = %lld: %s", (long long)m, weft_error_message());
        tu_assert_close(r, ev, m * 3, tol_of(WEFT_BF16), tol_of(WEFT_BF16));
        free(px);
        free(qx);
        weft_scope_pop();
    }
}

/* Tall bfloat16 products (M >= 1024 and M >= K: a Linear's forward and dX) reorder B
 * into the primitive's packed layout first (onednn_matmul.c); every stored layout of B
 * and A, one matrix and a batch whose products may run side by side. */
Test(matmul, tall_bfloat16_products_with_packed_b_match_reference)
{
    uint64_t st = 11;
    const struct {
        int nd;
        int64_t sa[3], sb[3];
    } cases[] = {{2, {2048, 96}, {96, 130}}, {3, {3, 1100, 40}, {3, 40, 70}}};
    const enum layout lb[] = {CONTIGUOUS, TRANSPOSED, SLICED};
    for (size_t c = 0; c < 2; c++)
        for (int la = 0; la < 2; la++)
            for (size_t k = 0; k < 3; k++) {
                weft_scope_push();
                const int nd = cases[c].nd;
                weft_tensor *a = make_operand(nd, cases[c].sa, WEFT_BF16, (enum layout)la, &st);
                weft_tensor *b = make_operand(nd, cases[c].sb, WEFT_BF16, lb[k], &st);
                double *x = read_all(a), *y = read_all(b);
                int64_t oshape[3], n = numel_of(nd, cases[c].sa) / cases[c].sa[nd - 1] *
                                          cases[c].sb[nd - 1];
                double *e = malloc((size_t)n * sizeof *e);
                cr_assert_not_null(e);
                ref_matmul(x, nd, cases[c].sa, y, nd, cases[c].sb, e, oshape);
                for (int rep = 0; rep < 2; rep++) { /* made, then found in the table */
                    weft_tensor *r = weft_matmul(a, b);
                    cr_assert_not_null(r, "case %zu: %s", c, weft_error_message());
                    tu_assert_close(r, e, n, tol_of(WEFT_BF16), tol_of(WEFT_BF16));
                }
                free(e);
                free(x);
                free(y);
                weft_scope_pop();
            }
}

Test(matmul, a_matrix_times_itself_transposed_is_symmetric_and_exact_for_small_integers)
{
    weft_scope_push();
    const double v[] = {1, 2, 3, 4, 5, 6};
    weft_tensor *x = tu_tensor(2, (int64_t[]){2, 3}, v, WEFT_F32);
    weft_tensor *g = weft_matmul(x, weft_t(x));
    tu_assert_shape(g, 2, (int64_t[]){2, 2});
    tu_assert_close(g, (double[]){14, 32, 32, 77}, 4, 0, 0);
    weft_tensor *dot = weft_matmul(weft_select(x, 0, 1), weft_select(x, 0, 1));
    tu_assert_shape(dot, 0, NULL);
    tu_assert_close(dot, (double[]){77}, 1, 0, 0);
    weft_scope_pop();
}

Test(matmul, errors_use_pytorch_wording)
{
    weft_scope_push();
    weft_tensor *f23 = weft_zeros(2, (int64_t[]){2, 3}, WEFT_F32, WEFT_CPU);
    weft_tensor *f45 = weft_zeros(2, (int64_t[]){4, 5}, WEFT_F32, WEFT_CPU);
    weft_tensor *d35 = weft_zeros(2, (int64_t[]){3, 5}, WEFT_F64, WEFT_CPU);
    weft_tensor *s = weft_scalar_tensor(1, WEFT_F32, WEFT_CPU);
    weft_tensor *v3 = weft_zeros(1, (int64_t[]){3}, WEFT_F32, WEFT_CPU);
    weft_tensor *v4 = weft_zeros(1, (int64_t[]){4}, WEFT_F32, WEFT_CPU);
    cr_assert_null(weft_matmul(f23, f45));
    tu_assert_error(WEFT_ERR_RUNTIME, "mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)");
    cr_assert_null(weft_matmul(s, f23));
    tu_assert_error(WEFT_ERR_RUNTIME,
                    "both arguments to matmul need to be at least 1D, but they are 0D and 2D");
    cr_assert_null(weft_matmul(f23, d35));
    tu_assert_error(WEFT_ERR_RUNTIME, "expected scalar type Float but found Double");
    cr_assert_null(weft_matmul(v3, v4));
    tu_assert_error(WEFT_ERR_RUNTIME,
                    "inconsistent tensor size, expected tensor [3] and src [4] to have the same "
                    "number of elements, but got 3 and 4 elements respectively");
    cr_assert_null(weft_matmul(f23, v4));
    tu_assert_error(WEFT_ERR_RUNTIME, "size mismatch, got input (2), mat (2x3), vec (4)");
    cr_assert_null(weft_matmul(v3, f45));
    tu_assert_error(WEFT_ERR_RUNTIME, "mat1 and mat2 shapes cannot be multiplied (1x3 and 4x5)");
    weft_tensor *b223 = weft_zeros(3, (int64_t[]){2, 2, 3}, WEFT_F32, WEFT_CPU);
    weft_tensor *b245 = weft_zeros(3, (int64_t[]){2, 4, 5}, WEFT_F32, WEFT_CPU);
    weft_tensor *b335 = weft_zeros(3, (int64_t[]){3, 3, 5}, WEFT_F32, WEFT_CPU);
    cr_assert_null(weft_matmul(b223, b245));
    tu_assert_error(WEFT_ERR_RUNTIME,
                    "Expected size for first two dimensions of batch2 tensor to be: [2, 3] but got: [2, 4].");
    cr_assert_null(weft_matmul(b223, b335));
    tu_assert_error(WEFT_ERR_RUNTIME,
                    "The size of tensor a (2) must match the size of tensor b (3) at non-singleton dimension 0");
    weft_tensor *bl = weft_zeros(2, (int64_t[]){2, 2}, WEFT_BOOL, WEFT_CPU);
    cr_assert_null(weft_matmul(bl, bl));
    tu_assert_error(WEFT_ERR_NOT_IMPLEMENTED, "\"matmul\" not implemented for 'Bool'");
    cr_assert_null(weft_matmul(NULL, f23));
    tu_assert_no_error();
    weft_scope_pop();
}

/* ---- the float32 GEMM providers ([cpu] gemm) ------------------------------------------- */

/* The suite loads the cpu plugin itself, with [cpu] gemm set, in each test's process. */
static const weft_options *gemm_options(void *ctx, const char *plugin)
{
    return strcmp(plugin, "cpu") == 0 ? ctx : NULL;
}

static weft_options *load_cpu_with_gemm(const char *mode)
{
    weft_options *o = weft_options_new("cpu", "gemm.ini");
    cr_assert_eq(weft_options_set(o, "gemm", mode), 0);
    weft_plugin_set_options_source(gemm_options, o);
    return o;
}

static bool have_onednn(void)
{
    const struct weft_backend *b = weft_backend_find(WEFT_DEVICE_CPU);
    cr_assert_not_null(b);
    return strstr(b->features(b->context), "no oneDNN") == NULL;
}

/* op(a) op(b) for a [M, K] and b [K, N] that are column slices of wider matrices (leading
 * dimensions M + 3 ... past the product's), against the reference. */
static void check_padded_product(int64_t M, int64_t K, int64_t N, bool ta, bool tb,
                                 uint64_t *st)
{
    weft_scope_push();
    int64_t ra = ta ? K : M, ca = ta ? M : K, rb = tb ? N : K, cb = tb ? K : N;
    weft_tensor *a = weft_slice(make_operand(2, (int64_t[]){ra, ca + 3}, WEFT_F32, CONTIGUOUS, st),
                                1, 0, ca, 1);
    weft_tensor *b = weft_slice(make_operand(2, (int64_t[]){rb, cb + 5}, WEFT_F32, CONTIGUOUS, st),
                                1, 0, cb, 1);
    if (ta)
        a = weft_transpose(a, 0, 1);
    if (tb)
        b = weft_transpose(b, 0, 1);
    cr_assert(a && b);
    double *x = read_all(a), *y = read_all(b);
    double *e = malloc((size_t)(M * N) * sizeof *e);
    int64_t oshape[2];
    ref_matmul(x, 2, (int64_t[]){M, K}, y, 2, (int64_t[]){K, N}, e, oshape);
    for (int r = 0; r < 3; r++)
        tu_assert_close(weft_matmul(a, b), e, M * N, 1e-5, 1e-4);
    free(e);
    free(x);
    free(y);
    weft_scope_pop();
}

/* All four transposes on odd sizes, each product REPEATS times (in mode auto the first
 * ones are the timed trials on both providers, the later ones the chosen one's), on a
 * small shape, on one big enough that oneDNN runs A B^T through its matmul primitive
 * (gemm.c: K >= 512 and 2^19 multiply-adds) and on one as big with 3 rows (one-token
 * decoding's shape: dnnl_sgemm's few-row path), on contiguous and on padded operands; plus
 * a batch of small products run inside a parallel region. */
#define REPEATS 20
static void check_gemm_provider(const char *mode)
{
    weft_options *o = load_cpu_with_gemm(mode);
    if (!weft_backend_get(WEFT_DEVICE_CPU))
        cr_assert_fail("[cpu] gemm = %s: %s", mode, weft_error_message());
    uint64_t st = 11;
    static const int64_t sizes[3][3] = {{37, 129, 61}, {67, 600, 131}, {3, 700, 300}};
    for (int s = 0; s < 3; s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                const int64_t M = sizes[s][0], K = sizes[s][1], N = sizes[s][2];
                weft_scope_push();
                weft_tensor *a = make_operand(2, (int64_t[]){M, K}, WEFT_F32,
                                              ta ? TRANSPOSED : CONTIGUOUS, &st);
                weft_tensor *b = make_operand(2, (int64_t[]){K, N}, WEFT_F32,
                                              tb ? TRANSPOSED : CONTIGUOUS, &st);
                double *x = read_all(a), *y = read_all(b);
                double *e = malloc((size_t)(M * N) * sizeof *e);
                int64_t oshape[2];
                ref_matmul(x, 2, (int64_t[]){M, K}, y, 2, (int64_t[]){K, N}, e, oshape);
                for (int r = 0; r < REPEATS; r++) {
                    weft_scope_push();
                    tu_assert_close(weft_matmul(a, b), e, M * N, 1e-5, 1e-4);
                    weft_scope_pop();
                }
                free(e);
                free(x);
                free(y);
                weft_scope_pop();
                check_padded_product(M, K, N, ta, tb, &st);
            }
    weft_scope_push();
    const int64_t sa[3] = {400, 9, 7}, sb[3] = {400, 7, 5};
    weft_tensor *a = make_operand(3, sa, WEFT_F32, CONTIGUOUS, &st);
    weft_tensor *b = make_operand(3, sb, WEFT_F32, TRANSPOSED, &st);
    double *x = read_all(a), *y = read_all(b), *e = malloc(400 * 9 * 5 * sizeof *e);
    int64_t oshape[3];
    ref_matmul(x, 3, sa, y, 3, sb, e, oshape);
    for (int r = 0; r < 3; r++)
        tu_assert_close(weft_matmul(a, b), e, 400 * 9 * 5, 1e-5, 1e-5);
    free(e);
    free(x);
    free(y);
    weft_scope_pop();
    weft_plugin_set_options_source(NULL, NULL);
    weft_options_free(o);
}

TestSuite(gemm, .fini = tu_teardown);

Test(gemm, openblas_matches_reference_on_every_transpose)
{
    check_gemm_provider("openblas");
}

Test(gemm, auto_matches_reference_while_timing_and_after_choosing)
{
    check_gemm_provider("auto");
}

Test(gemm, onednn_matches_reference_or_is_refused_by_a_build_without_it)
{
    weft_options *o = load_cpu_with_gemm("onednn");
    const struct weft_backend *b = weft_backend_get(WEFT_DEVICE_CPU);
    weft_plugin_set_options_source(NULL, NULL);
    weft_options_free(o);
    if (!b) {
        tu_assert_error(WEFT_ERR_PLUGIN, "gemm.ini: [cpu] gemm = 'onednn': this weft-cpu.so "
                                         "was built without oneDNN");
        cr_skip_test("this build has no oneDNN");
    }
    cr_assert(have_onednn());
    check_gemm_provider("onednn");
}

Test(gemm, an_unknown_provider_is_refused_with_the_choices)
{
    weft_options *o = load_cpu_with_gemm("mkl");
    cr_assert_null(weft_backend_get(WEFT_DEVICE_CPU));
    tu_assert_error(WEFT_ERR_PLUGIN, "gemm.ini: [cpu] gemm = 'mkl': expected one of auto, "
                                     "openblas, onednn");
    weft_plugin_set_options_source(NULL, NULL);
    weft_options_free(o);
}
