/* tests/test_sparse_mm.c: torch.sparse.mm / torch.sparse.addmm on COO and CSR tensors
 * (weft/sparse.h), and the "sparse_mm" / "sparse_sddmm" CPU kernels behind them, against
 * plain double loops over random sparse matrices; PyTorch's error texts; the gradients
 * w.r.t. the dense operand, the sparse values and addmm's input. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

/* Only for struct sparse_data: the missing-kernel test builds a sparse tensor on a device
 * that has no backend, which no constructor can. */
#include "../plugins/sparse/sparse_impl.h"

static void setup(void)
{
    tu_setup();
    if (!weft_sparse_api_get())
        cr_assert_fail("cannot load the sparse plugin: %s", weft_error_message());
}

TestSuite(sparse_mm, .init = setup, .fini = tu_teardown);

/* ---- random sparse matrices and the reference ------------------------------------------- */

/* A sparse matrix as entry lists, in the order handed to the constructors. */
struct spm {
    int64_t M, K, nnz;
    int64_t row[20000], col[20000];
    double val[20000];
};

static uint64_t rng_next(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

/* Each entry present with probability `density`, except in every fifth row (left empty),
 * sorted and unique: the coalesced pattern. */
static struct spm *spm_random(int64_t M, int64_t K, double density, uint64_t *state)
{
    struct spm *m = calloc(1, sizeof *m);
    cr_assert_not_null(m);
    m->M = M;
    m->K = K;
    for (int64_t i = 0; i < M; i++) {
        for (int64_t j = 0; j < K; j++) {
            double u = (double)rng_next(state) / 2147483648.0;
            if (i % 5 == 3 || u >= density)
                continue;
            cr_assert_lt(m->nnz, 20000);
            m->row[m->nnz] = i;
            m->col[m->nnz] = j;
            tu_random_values(&m->val[m->nnz], 1, -1, 1, state);
            m->nnz++;
        }
    }
    return m;
}

/* The same matrix, uncoalesced: every third entry split in two halves, then shuffled. */
static void spm_uncoalesce(struct spm *m, uint64_t *state)
{
    int64_t n = m->nnz;
    for (int64_t e = 0; e < n; e += 3) {
        m->val[e] /= 2;
        m->row[m->nnz] = m->row[e];
        m->col[m->nnz] = m->col[e];
        m->val[m->nnz] = m->val[e];
        m->nnz++;
    }
    for (int64_t e = m->nnz - 1; e > 0; e--) {
        int64_t k = (int64_t)(rng_next(state) % (uint64_t)(e + 1));
        int64_t r = m->row[e], c = m->col[e];
        double v = m->val[e];
        m->row[e] = m->row[k], m->col[e] = m->col[k], m->val[e] = m->val[k];
        m->row[k] = r, m->col[k] = c, m->val[k] = v;
    }
}

static weft_tensor *spm_values(const struct spm *m, enum weft_dtype dt)
{
    return tu_tensor(1, &m->nnz, m->val, dt);
}

/* CSR with idx (int32 or int64) indices; m must be coalesced. */
static weft_tensor *spm_csr_with(const struct spm *m, enum weft_dtype idx, weft_tensor *values)
{
    double *crow = calloc((size_t)m->M + 1, sizeof *crow), *col = malloc((size_t)m->nnz * 8 + 8);
    for (int64_t e = 0; e < m->nnz; e++) {
        crow[m->row[e] + 1]++;
        col[e] = (double)m->col[e];
    }
    for (int64_t i = 0; i < m->M; i++)
        crow[i + 1] += crow[i];
    int64_t nrow = m->M + 1, size[2] = {m->M, m->K};
    weft_tensor *t = weft_sparse_csr_tensor(tu_tensor(1, &nrow, crow, idx),
                                            tu_tensor(1, &m->nnz, col, idx), values, size, true);
    free(crow);
    free(col);
    cr_assert_not_null(t, "csr_tensor: %s", weft_error_message());
    return t;
}

static weft_tensor *spm_coo_with(const struct spm *m, weft_tensor *values)
{
    double *idx = malloc((size_t)m->nnz * 16 + 8);
    for (int64_t e = 0; e < m->nnz; e++) {
        idx[e] = (double)m->row[e];
        idx[m->nnz + e] = (double)m->col[e];
    }
    int64_t ishape[2] = {2, m->nnz}, size[2] = {m->M, m->K};
    weft_tensor *t = weft_sparse_coo_tensor(tu_tensor(2, ishape, idx, WEFT_I64), values, 2, size,
                                            true);
    free(idx);
    cr_assert_not_null(t, "coo_tensor: %s", weft_error_message());
    return t;
}

enum fmt { CSR32, CSR64, COO, COO_COALESCED, NUM_FMTS };
static const char *const fmt_names[NUM_FMTS] = {"csr int32", "csr int64", "coo",
                                                "coo coalesced"};

/* m in format f (COO stays as given; COO_COALESCED is coalesced through the API). */
static weft_tensor *spm_tensor(const struct spm *m, enum fmt f, weft_tensor *values)
{
    switch (f) {
    case CSR32: return spm_csr_with(m, WEFT_I32, values);
    case CSR64: return spm_csr_with(m, WEFT_I64, values);
    case COO: return spm_coo_with(m, values);
    default: return weft_sparse_coalesce(spm_coo_with(m, values));
    }
}

/* out[M, N] = beta * C0 + alpha * A @ B (C0 NULL or beta 0: not read); B row-major [K, N]. */
static void ref_addmm(const struct spm *m, const double *B, int64_t N, const double *C0,
                      double beta, double alpha, double *out)
{
    for (int64_t k = 0; k < m->M * N; k++)
        out[k] = 0;
    for (int64_t e = 0; e < m->nnz; e++)
        for (int64_t j = 0; j < N; j++)
            out[m->row[e] * N + j] += m->val[e] * B[m->col[e] * N + j];
    for (int64_t k = 0; k < m->M * N; k++)
        out[k] = alpha * out[k] + (C0 && beta != 0 ? beta * C0[k] : 0);
}

static double *random_doubles(int64_t n, uint64_t *state)
{
    double *p = malloc((size_t)(n > 0 ? n : 1) * sizeof *p);
    tu_random_values(p, n, -1, 1, state);
    return p;
}

static double tol(enum weft_dtype dt)
{
    return dt == WEFT_F32 ? 2e-5 : 1e-12;
}

static const struct {
    int64_t M, K, N;
    double density;
} shapes[] = {
    {7, 5, 3, 0.4},   {50, 40, 64, 0.1}, {33, 17, 70, 0.3}, {20, 30, 1, 0.2},
    {64, 64, 130, 0.05}, {5, 8, 2, 0.0},  {0, 4, 3, 0.5},    {4, 0, 3, 0.5},
    {6, 4, 0, 0.5},   {300, 200, 64, 0.2}, {1, 1, 1, 1.0},   {40, 3, 33, 0.6},
};

/* ---- forward ---------------------------------------------------------------------------- */

static void check_mm(enum fmt f, enum weft_dtype dt, uint64_t seed)
{
    uint64_t st = seed;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        weft_scope_push();
        struct spm *m = spm_random(shapes[s].M, shapes[s].K, shapes[s].density, &st);
        if (f == COO)
            spm_uncoalesce(m, &st);
        int64_t N = shapes[s].N, bshape[2] = {m->K, N};
        double *b = random_doubles(m->K * N, &st), *ref = malloc((size_t)(m->M * N + 1) * 8);
        ref_addmm(m, b, N, NULL, 0, 1, ref);
        weft_tensor *A = spm_tensor(m, f, spm_values(m, dt));
        weft_tensor *y = weft_sparse_mm(A, tu_tensor(2, bshape, b, dt));
        cr_assert_not_null(y, "%s %s shape %zu: %s", fmt_names[f], weft_dtype_name(dt), s,
                           weft_error_message());
        int64_t yshape[2] = {m->M, N};
        tu_assert_shape(y, 2, yshape);
        cr_expect_eq(y->dtype, dt);
        tu_assert_close(y, ref, m->M * N, tol(dt), tol(dt));
        free(b);
        free(ref);
        free(m);
        weft_scope_pop();
    }
}

Test(sparse_mm, csr_mm_matches_the_reference_with_int32_and_int64_indices)
{
    check_mm(CSR32, WEFT_F32, 1);
    check_mm(CSR32, WEFT_F64, 2);
    check_mm(CSR64, WEFT_F32, 3);
    check_mm(CSR64, WEFT_F64, 4);
}

Test(sparse_mm, coo_mm_matches_the_reference_coalesced_or_not)
{
    check_mm(COO, WEFT_F32, 5);
    check_mm(COO, WEFT_F64, 6);
    check_mm(COO_COALESCED, WEFT_F32, 7);
    check_mm(COO_COALESCED, WEFT_F64, 8);
}

Test(sparse_mm, a_small_product_by_hand)
{
    /* [[1, 0, 2], [0, 3, 0]] @ [[1, 2], [3, 4], [5, 6]] = [[11, 14], [9, 12]] */
    weft_scope_push();
    const double crow[3] = {0, 2, 3}, col[3] = {0, 2, 1}, val[3] = {1, 2, 3};
    const double b[6] = {1, 2, 3, 4, 5, 6}, expected[4] = {11, 14, 9, 12};
    int64_t n3 = 3, size[2] = {2, 3}, bshape[2] = {3, 2};
    weft_tensor *A = weft_sparse_csr_tensor(tu_tensor(1, &n3, crow, WEFT_I64),
                                            tu_tensor(1, &n3, col, WEFT_I64),
                                            tu_tensor(1, &n3, val, WEFT_F32), size, true);
    weft_tensor *y = weft_sparse_mm(A, tu_tensor(2, bshape, b, WEFT_F32));
    tu_assert_close(y, expected, 4, 0, 0);
    weft_scope_pop();
}

Test(sparse_mm, a_vector_operand_gives_spmv)
{
    uint64_t st = 11;
    for (int f = 0; f < NUM_FMTS; f++) {
        for (int d = 0; d < 2; d++) {
            enum weft_dtype dt = d ? WEFT_F64 : WEFT_F32;
            weft_scope_push();
            struct spm *m = spm_random(120, 90, 0.1, &st);
            if (f == COO)
                spm_uncoalesce(m, &st);
            /* the vector is every other element of a longer one */
            int64_t n2 = 2 * m->K;
            double *x2 = random_doubles(n2, &st), *x = malloc((size_t)m->K * 8);
            double *ref = malloc((size_t)m->M * 8);
            for (int64_t k = 0; k < m->K; k++)
                x[k] = x2[2 * k];
            ref_addmm(m, x, 1, NULL, 0, 1, ref);
            weft_tensor *v = weft_slice(tu_tensor(1, &n2, x2, dt), 0, 0, n2, 2);
            weft_tensor *y = weft_sparse_mm(spm_tensor(m, (enum fmt)f, spm_values(m, dt)), v);
            cr_assert_not_null(y, "%s: %s", fmt_names[f], weft_error_message());
            tu_assert_shape(y, 1, &m->M);
            tu_assert_close(y, ref, m->M, tol(dt), tol(dt));
            free(x2);
            free(x);
            free(ref);
            free(m);
            weft_scope_pop();
        }
    }
}

/* B as the transpose of a [N, K] tensor, every other column of a [K, 2N] one, and a [1, N]
 * row expanded to [K, N] (stride 0). */
static weft_tensor *strided_dense(int kind, const double *b, int64_t K, int64_t N,
                                  enum weft_dtype dt)
{
    if (kind == 0) {
        double *bt = malloc((size_t)(K * N + 1) * 8);
        for (int64_t k = 0; k < K; k++)
            for (int64_t j = 0; j < N; j++)
                bt[j * K + k] = b[k * N + j];
        int64_t shape[2] = {N, K};
        weft_tensor *t = weft_t(tu_tensor(2, shape, bt, dt));
        free(bt);
        return t;
    }
    if (kind == 1) {
        double *wide = calloc((size_t)(2 * K * N + 1), 8);
        for (int64_t k = 0; k < K; k++)
            for (int64_t j = 0; j < N; j++)
                wide[k * 2 * N + 2 * j] = b[k * N + j];
        int64_t shape[2] = {K, 2 * N};
        weft_tensor *t = weft_slice(tu_tensor(2, shape, wide, dt), 1, 0, 2 * N, 2);
        free(wide);
        return t;
    }
    int64_t shape[2] = {1, N}, full[2] = {K, N};
    return weft_expand(tu_tensor(2, shape, b, dt), 2, full);
}

Test(sparse_mm, dense_operands_of_any_strides)
{
    uint64_t st = 12;
    for (int kind = 0; kind < 3; kind++) {
        for (int f = 0; f < NUM_FMTS; f++) {
            weft_scope_push();
            struct spm *m = spm_random(80, 70, 0.15, &st);
            int64_t N = 67;
            double *b = random_doubles(m->K * N, &st), *ref = malloc((size_t)(m->M * N) * 8);
            if (kind == 2)
                for (int64_t k = 1; k < m->K; k++)
                    memcpy(b + k * N, b, (size_t)N * 8);
            ref_addmm(m, b, N, NULL, 0, 1, ref);
            weft_tensor *B = strided_dense(kind, b, m->K, N, WEFT_F64);
            cr_assert(!weft_tensor_is_contiguous(B));
            weft_tensor *y = weft_sparse_mm(spm_tensor(m, (enum fmt)f, spm_values(m, WEFT_F64)), B);
            cr_assert_not_null(y, "%s kind %d: %s", fmt_names[f], kind, weft_error_message());
            tu_assert_close(y, ref, m->M * N, 1e-12, 1e-12);
            free(b);
            free(ref);
            free(m);
            weft_scope_pop();
        }
    }
}

Test(sparse_mm, addmm_scales_and_broadcasts_its_input)
{
    uint64_t st = 13;
    /* input shapes broadcast to [M, N] = [45, 20] */
    const int64_t in_shapes[3][2] = {{45, 20}, {1, 20}, {45, 1}};
    for (int f = 0; f < NUM_FMTS; f++) {
        for (int s = 0; s < 3; s++) {
            enum weft_dtype dt = s == 1 ? WEFT_F32 : WEFT_F64;
            weft_scope_push();
            struct spm *m = spm_random(45, 30, 0.2, &st);
            int64_t N = 20, bshape[2] = {m->K, N};
            double *b = random_doubles(m->K * N, &st), *c0 = random_doubles(m->M * N, &st);
            double *full = malloc((size_t)(m->M * N) * 8), *ref = malloc((size_t)(m->M * N) * 8);
            for (int64_t i = 0; i < m->M; i++)
                for (int64_t j = 0; j < N; j++)
                    full[i * N + j] = c0[(in_shapes[s][0] == 1 ? 0 : i) * in_shapes[s][1] +
                                         (in_shapes[s][1] == 1 ? 0 : j)];
            ref_addmm(m, b, N, full, -2.0, 0.5, ref);
            weft_tensor *y = weft_sparse_addmm(tu_tensor(2, in_shapes[s], c0, dt),
                                               spm_tensor(m, (enum fmt)f, spm_values(m, dt)),
                                               tu_tensor(2, bshape, b, dt), -2.0, 0.5);
            cr_assert_not_null(y, "%s: %s", fmt_names[f], weft_error_message());
            tu_assert_close(y, ref, m->M * N, tol(dt), tol(dt));
            free(b);
            free(c0);
            free(full);
            free(ref);
            free(m);
            weft_scope_pop();
        }
    }
}

Test(sparse_mm, addmm_with_beta_zero_ignores_nan_in_its_input)
{
    weft_scope_push();
    uint64_t st = 14;
    struct spm *m = spm_random(10, 8, 0.3, &st);
    int64_t N = 5, shape[2] = {m->M, N}, bshape[2] = {m->K, N};
    double *b = random_doubles(m->K * N, &st), ref[50];
    ref_addmm(m, b, N, NULL, 0, 3.0, ref);
    for (int f = 0; f < NUM_FMTS; f++) {
        weft_tensor *input = weft_full(2, shape, NAN, WEFT_F32, WEFT_CPU);
        weft_tensor *y = weft_sparse_addmm(input, spm_tensor(m, (enum fmt)f, spm_values(m, WEFT_F32)),
                                           tu_tensor(2, bshape, b, WEFT_F32), 0.0, 3.0);
        tu_assert_close(y, ref, m->M * N, 1e-5, 1e-5);
    }
    free(b);
    free(m);
    weft_scope_pop();
}

Test(sparse_mm, results_do_not_depend_on_the_thread_count)
{
    weft_scope_push();
    uint64_t st = 15;
    struct spm *m = spm_random(400, 300, 0.1, &st);
    int64_t N = 64, bshape[2] = {m->K, N}, n = m->M * N;
    double *b = random_doubles(m->K * N, &st);
    weft_tensor *A = spm_tensor(m, CSR32, spm_values(m, WEFT_F32));
    weft_tensor *B = tu_tensor(2, bshape, b, WEFT_F32);
    int threads = weft_get_num_threads();
    weft_set_num_threads(1);
    weft_tensor *y1 = weft_sparse_mm(A, B);
    weft_set_num_threads(2);
    weft_tensor *y2 = weft_sparse_mm(A, B);
    weft_set_num_threads(threads);
    cr_assert_not_null(y1);
    cr_assert_not_null(y2);
    cr_expect_eq(memcmp(weft_tensor_data(y1), weft_tensor_data(y2), (size_t)n * sizeof(float)), 0);
    free(b);
    free(m);
    weft_scope_pop();
}

/* C of 10 MB: the kernel writes a C this large past the caches. Rows i hold column
 * (7i) % K with value 1 and column (13i + 1) % K with value -0.5 (empty every 9th row). */
Test(sparse_mm, a_result_larger_than_the_caches_is_right_too)
{
    weft_scope_push();
    const int64_t M = 40000, K = 1000, N = 64;
    int64_t nnz = 0, nrow = M + 1, size[2] = {M, K}, bshape[2] = {K, N};
    double *crow = malloc((size_t)nrow * 8), *col = malloc((size_t)(2 * M) * 8);
    double *val = malloc((size_t)(2 * M) * 8), *b = malloc((size_t)(K * N) * 8);
    uint64_t st = 22;
    tu_random_values(b, K * N, -1, 1, &st);
    crow[0] = 0;
    for (int64_t i = 0; i < M; i++) {
        int64_t c0 = (7 * i) % K, c1 = (13 * i + 1) % K;
        if (i % 9 != 4 && c0 != c1) {
            col[nnz] = (double)(c0 < c1 ? c0 : c1), val[nnz++] = c0 < c1 ? 1 : -0.5;
            col[nnz] = (double)(c0 < c1 ? c1 : c0), val[nnz++] = c0 < c1 ? -0.5 : 1;
        }
        crow[i + 1] = (double)nnz;
    }
    weft_tensor *A = weft_sparse_csr_tensor(tu_tensor(1, &nrow, crow, WEFT_I32),
                                            tu_tensor(1, &nnz, col, WEFT_I32),
                                            tu_tensor(1, &nnz, val, WEFT_F32), size, true);
    weft_tensor *y = weft_sparse_addmm(weft_full(1, &N, NAN, WEFT_F32, WEFT_CPU), A,
                                       tu_tensor(2, bshape, b, WEFT_F32), 0.0, 2.0);
    cr_assert_not_null(y, "%s", weft_error_message());
    double *ref = calloc((size_t)(M * N), 8);
    for (int64_t i = 0; i < M; i++)
        for (int64_t e = (int64_t)crow[i]; e < (int64_t)crow[i + 1]; e++)
            for (int64_t j = 0; j < N; j++)
                ref[i * N + j] += 2.0 * val[e] * b[(int64_t)col[e] * N + j];
    tu_assert_close(y, ref, M * N, 1e-5, 1e-5);
    free(crow);
    free(col);
    free(val);
    free(b);
    free(ref);
    weft_scope_pop();
}

/* ---- the kernels, called directly --------------------------------------------------------- */

static weft_kernel_fn kernel(const char *op, const weft_tensor *A)
{
    int id = weft_op_lookup(op);
    cr_assert_geq(id, 0, "op %s is not registered", op);
    weft_kernel_fn fn = weft_kernel_lookup(id, WEFT_DEVICE_CPU, A->layout, A->dtype);
    cr_assert_not_null(fn, "no cpu kernel for %s", op);
    return fn;
}

Test(sparse_mm, the_transposed_kernel_computes_a_transpose_times_b)
{
    uint64_t st = 16;
    const struct {
        int64_t M, K, N;
        double density;
    } cases[] = {{30, 20, 7, 0.2}, {200, 150, 64, 0.1}, {9, 40, 1, 0.3}, {5, 6, 3, 0.0},
                 {12, 0, 4, 0.5}, {0, 12, 4, 0.5}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (int f = 0; f < NUM_FMTS; f++) {
            if (f == COO)
                continue; /* the kernel takes coalesced COO only */
            for (int d = 0; d < 2; d++) {
                enum weft_dtype dt = d ? WEFT_F64 : WEFT_F32;
                weft_scope_push();
                struct spm *m = spm_random(cases[c].M, cases[c].K, cases[c].density, &st);
                int64_t N = cases[c].N, cshape[2] = {m->K, N};
                double *b = random_doubles(m->M * N, &st), *c0 = random_doubles(m->K * N, &st);
                /* reference: the transpose as entry lists */
                struct spm *mt = calloc(1, sizeof *mt);
                mt->M = m->K, mt->K = m->M, mt->nnz = m->nnz;
                for (int64_t e = 0; e < m->nnz; e++)
                    mt->row[e] = m->col[e], mt->col[e] = m->row[e], mt->val[e] = m->val[e];
                /* float32 overwrites a C full of NaN (beta 0), float64 scales C by 0.25 */
                double beta = d ? 0.25 : 0.0, *ref = malloc((size_t)(m->K * N + 1) * 8);
                ref_addmm(mt, b, N, c0, beta, -1.5, ref);
                if (!d)
                    for (int64_t k = 0; k < m->K * N; k++)
                        c0[k] = NAN;
                weft_tensor *A = spm_tensor(m, (enum fmt)f, spm_values(m, dt));
                weft_tensor *C = tu_tensor(2, cshape, c0, dt);
                struct weft_op_call call = {.op = weft_op_lookup("sparse_mm"), .nin = 2, .nout = 1};
                call.in[0] = A;
                call.in[1] = strided_dense(0, b, m->M, N, dt);
                call.out[0] = C;
                call.scalar[0] = -1.5;
                call.scalar[1] = beta;
                call.ints[0] = 1;
                cr_assert_eq(kernel("sparse_mm", A)(&call), 0, "%s: %s", fmt_names[f],
                             weft_error_message());
                tu_assert_close(C, ref, m->K * N, tol(dt), tol(dt));
                free(b);
                free(c0);
                free(ref);
                free(mt);
                free(m);
                weft_scope_pop();
            }
        }
    }
}

Test(sparse_mm, the_sddmm_kernel_samples_g_times_b_transposed_on_the_pattern)
{
    uint64_t st = 17;
    for (int f = 0; f < NUM_FMTS; f++) {
        for (int d = 0; d < 2; d++) {
            enum weft_dtype dt = d ? WEFT_F64 : WEFT_F32;
            weft_scope_push();
            struct spm *m = spm_random(120, 100, 0.2, &st);
            if (f == COO)
                spm_uncoalesce(m, &st);
            int64_t N = 37, gshape[2] = {m->M, N}, bshape[2] = {m->K, N};
            double *g = random_doubles(m->M * N, &st), *b = random_doubles(m->K * N, &st);
            double *ref = malloc((size_t)m->nnz * 8 + 8);
            for (int64_t e = 0; e < m->nnz; e++) {
                ref[e] = 0;
                for (int64_t j = 0; j < N; j++)
                    ref[e] += g[m->row[e] * N + j] * b[m->col[e] * N + j];
            }
            weft_tensor *A = f == COO_COALESCED ? spm_coo_with(m, spm_values(m, dt))
                                                : spm_tensor(m, (enum fmt)f, spm_values(m, dt));
            weft_tensor *out = weft_empty(1, &m->nnz, dt, WEFT_CPU);
            struct weft_op_call call = {.op = weft_op_lookup("sparse_sddmm"), .nin = 3, .nout = 1};
            call.in[0] = A;
            call.in[1] = f % 2 ? strided_dense(0, g, m->M, N, dt) : tu_tensor(2, gshape, g, dt);
            call.in[2] = tu_tensor(2, bshape, b, dt);
            call.out[0] = out;
            cr_assert_eq(kernel("sparse_sddmm", A)(&call), 0, "%s", weft_error_message());
            tu_assert_close(out, ref, m->nnz, tol(dt), tol(dt));
            free(g);
            free(b);
            free(ref);
            free(m);
            weft_scope_pop();
        }
    }
}

Test(sparse_mm, sddmm_with_no_nonzeros_or_no_columns)
{
    weft_scope_push();
    uint64_t st = 21;
    for (int empty = 0; empty < 2; empty++) {
        struct spm *m = spm_random(6, 5, empty ? 0.0 : 0.5, &st);
        int64_t N = empty ? 3 : 0, gshape[2] = {m->M, N}, bshape[2] = {m->K, N};
        double zeros[30] = {0};
        weft_tensor *A = spm_tensor(m, CSR32, spm_values(m, WEFT_F32));
        weft_tensor *out = weft_full(1, &m->nnz, NAN, WEFT_F32, WEFT_CPU);
        struct weft_op_call call = {.op = weft_op_lookup("sparse_sddmm"), .nin = 3, .nout = 1};
        call.in[0] = A;
        call.in[1] = weft_zeros(2, gshape, WEFT_F32, WEFT_CPU);
        call.in[2] = weft_zeros(2, bshape, WEFT_F32, WEFT_CPU);
        call.out[0] = out;
        cr_assert_eq(kernel("sparse_sddmm", A)(&call), 0, "%s", weft_error_message());
        cr_expect_eq(m->nnz == 0, empty == 1);
        tu_assert_close(out, zeros, m->nnz, 0, 0); /* an empty sum is 0 */
        free(m);
    }
    weft_scope_pop();
}

/* ---- errors --------------------------------------------------------------------------------- */

/* [[0, 1, 0], [0, 0, 2]] (2x3) in float32, as CSR (int64) or uncoalesced COO. */
static weft_tensor *small(bool csr, enum weft_dtype dt)
{
    const double crow[3] = {0, 1, 2}, col[2] = {1, 2}, idx[4] = {0, 1, 1, 2}, val[2] = {1, 2};
    int64_t n2 = 2, n3 = 3, ishape[2] = {2, 2}, size[2] = {2, 3};
    if (csr)
        return weft_sparse_csr_tensor(tu_tensor(1, &n3, crow, WEFT_I64),
                                      tu_tensor(1, &n2, col, WEFT_I64),
                                      tu_tensor(1, &n2, val, dt), size, true);
    return weft_sparse_coo_tensor(tu_tensor(2, ishape, idx, WEFT_I64), tu_tensor(1, &n2, val, dt),
                                  2, size, true);
}

static weft_tensor *dense(int ndim, const int64_t *shape, enum weft_dtype dt)
{
    return weft_zeros(ndim, shape, dt, WEFT_CPU);
}

Test(sparse_mm, mismatched_inner_sizes_are_refused_in_pytorchs_words)
{
    weft_scope_push();
    const int64_t s45[2] = {4, 5}, s05[2] = {0, 5}, v4[1] = {4};
    cr_expect_null(weft_sparse_mm(small(true, WEFT_F32), dense(2, s45, WEFT_F32)));
    tu_assert_error(WEFT_ERR_RUNTIME, "mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)");
    cr_expect_null(weft_sparse_mm(small(true, WEFT_F32), dense(2, s05, WEFT_F32)));
    tu_assert_error(WEFT_ERR_RUNTIME, "mat1 and mat2 shapes cannot be multiplied (2x3 and 0x5)");
    cr_expect_null(weft_sparse_mm(small(false, WEFT_F32), dense(2, s45, WEFT_F32)));
    tu_assert_error(WEFT_ERR_RUNTIME, "addmm: Argument #3 (dense): Expected dim 0 size 3, got 4");
    cr_expect_null(weft_sparse_mm(small(true, WEFT_F32), dense(1, v4, WEFT_F32)));
    tu_assert_error(WEFT_ERR_RUNTIME, "size mismatch, got input (2), mat (2x3), vec (4)");
    weft_scope_pop();
}

Test(sparse_mm, dense_operands_must_be_vectors_or_matrices)
{
    weft_scope_push();
    const int64_t s322[3] = {3, 2, 2};
    cr_expect_null(weft_sparse_mm(small(true, WEFT_F32), dense(3, s322, WEFT_F32)));
    tu_assert_error(WEFT_ERR_RUNTIME, "mat2 must be a matrix, got 3-D tensor");
    cr_expect_null(weft_sparse_mm(small(false, WEFT_F32), dense(3, s322, WEFT_F32)));
    tu_assert_error(WEFT_ERR_RUNTIME, "addmm: matrices expected, got 3D tensor");
    cr_expect_null(weft_sparse_mm(small(false, WEFT_F32), dense(0, NULL, WEFT_F32)));
    tu_assert_error(WEFT_ERR_RUNTIME, "addmm: matrices expected, got 0D tensor");
    weft_scope_pop();
}

Test(sparse_mm, a_coo_operand_of_three_dims_is_refused)
{
    weft_scope_push();
    const double idx[6] = {0, 1, 1, 2, 0, 0}, val[2] = {1, 2};
    int64_t n2 = 2, ishape[2] = {3, 2}, size[3] = {2, 3, 1}, s35[2] = {3, 5};
    weft_tensor *A = weft_sparse_coo_tensor(tu_tensor(2, ishape, idx, WEFT_I64),
                                            tu_tensor(1, &n2, val, WEFT_F32), 3, size, true);
    cr_assert_not_null(A, "%s", weft_error_message());
    cr_expect_null(weft_sparse_mm(A, dense(2, s35, WEFT_F32)));
    tu_assert_error(WEFT_ERR_RUNTIME, "addmm: matrices expected, got 3D tensor");
    weft_scope_pop();
}

Test(sparse_mm, dtypes_must_agree)
{
    weft_scope_push();
    const int64_t s35[2] = {3, 5}, s25[2] = {2, 5};
    for (int csr = 0; csr < 2; csr++) {
        cr_expect_null(weft_sparse_mm(small(csr, WEFT_F32), dense(2, s35, WEFT_F64)));
        tu_assert_error(WEFT_ERR_RUNTIME, "expected scalar type Float but found Double");
        cr_expect_null(weft_sparse_addmm(dense(2, s25, WEFT_F64), small(csr, WEFT_F32),
                                         dense(2, s35, WEFT_F32), 1, 1));
        tu_assert_error(WEFT_ERR_RUNTIME, "expected scalar type Float but found Double");
        cr_expect_null(weft_sparse_mm(small(csr, WEFT_F32), dense(2, s35, WEFT_I32)));
        tu_assert_error(WEFT_ERR_RUNTIME, "expected scalar type Float but found Int");
    }
    weft_scope_pop();
}

Test(sparse_mm, integer_and_half_values_have_no_kernel)
{
    weft_scope_push();
    const int64_t s35[2] = {3, 5};
    cr_expect_null(weft_sparse_mm(small(true, WEFT_I32), dense(2, s35, WEFT_I32)));
    tu_assert_error(WEFT_ERR_NOT_IMPLEMENTED, "\"sparse_mm\" not implemented for 'Int' on cpu");
    cr_expect_null(weft_sparse_mm(small(false, WEFT_F16), dense(2, s35, WEFT_F16)));
    tu_assert_error(WEFT_ERR_NOT_IMPLEMENTED, "\"sparse_mm\" not implemented for 'Half' on cpu");
    weft_scope_pop();
}

Test(sparse_mm, addmm_input_must_broadcast_to_the_result)
{
    weft_scope_push();
    const int64_t s35[2] = {3, 5}, s23[2] = {2, 3};
    cr_expect_null(weft_sparse_addmm(dense(2, s35, WEFT_F32), small(true, WEFT_F32),
                                     dense(2, s35, WEFT_F32), 1, 1));
    tu_assert_error(WEFT_ERR_RUNTIME,
                    "The expanded size of the tensor (2) must match the existing size (3) at "
                    "non-singleton dimension 0.  Target sizes: [2, 5].  Tensor sizes: [3, 5]");
    /* even with beta == 0, as PyTorch */
    cr_expect_null(weft_sparse_addmm(dense(2, s23, WEFT_F32), small(false, WEFT_F32),
                                     dense(2, s35, WEFT_F32), 0, 1));
    tu_assert_error(WEFT_ERR_RUNTIME, "The expanded size of the tensor (5) must match");
    weft_scope_pop();
}

Test(sparse_mm, operands_must_have_the_expected_layouts)
{
    weft_scope_push();
    const int64_t s23[2] = {2, 3};
    cr_expect_null(weft_sparse_mm(dense(2, s23, WEFT_F32), dense(2, s23, WEFT_F32)));
    tu_assert_error(WEFT_ERR_RUNTIME, "sparse_mm expected a sparse tensor, but got layout strided");
    cr_expect_null(weft_sparse_mm(small(true, WEFT_F32), small(false, WEFT_F32)));
    tu_assert_error(WEFT_ERR_NOT_IMPLEMENTED,
                    "sparse_mm: expected the dense operand to be a strided (dense) tensor, but "
                    "got layout sparse_coo");
    cr_expect_null(weft_sparse_addmm(small(true, WEFT_F32), small(true, WEFT_F32),
                                     dense(2, s23, WEFT_F32), 1, 1));
    tu_assert_error(WEFT_ERR_NOT_IMPLEMENTED,
                    "sparse_mm: expected input to be a strided (dense) tensor, but got layout "
                    "sparse_csr");
    weft_scope_pop();
}

Test(sparse_mm, null_operands_give_null_and_keep_the_first_error)
{
    weft_scope_push();
    const int64_t s35[2] = {3, 5};
    cr_expect_null(weft_sparse_mm(NULL, dense(2, s35, WEFT_F32)));
    cr_expect_null(weft_sparse_mm(small(true, WEFT_F32), NULL));
    cr_expect_null(weft_sparse_addmm(NULL, small(true, WEFT_F32), dense(2, s35, WEFT_F32), 1, 1));
    tu_assert_no_error();
    weft_scope_pop();
}

/* A CSR tensor and a dense one on a device type without a backend: front ends must stop
 * before touching memory. */
static weft_tensor *fake_csr(weft_device dev)
{
    struct sparse_data *s = calloc(1, sizeof *s);
    int64_t size[2] = {2, 3};
    return weft_tensor_new_layout(weft_layout_id("sparse_csr"), 2, size, WEFT_F32, dev, s);
}

static float blob[16];

Test(sparse_mm, devices_must_agree_and_a_missing_kernel_is_named)
{
    weft_scope_push();
    int type = weft_device_type_id("spmmfake", true);
    cr_assert_geq(type, 0);
    weft_device fake = {(int16_t)type, 0};
    int64_t s35[2] = {3, 5};
    weft_tensor *B = weft_from_blob(blob, 2, s35, NULL, WEFT_F32, fake, NULL, NULL);
    cr_assert_not_null(B, "%s", weft_error_message());
    cr_expect_null(weft_sparse_mm(small(true, WEFT_F32), B));
    tu_assert_error(WEFT_ERR_RUNTIME, "Expected all tensors to be on the same device, but found "
                                      "at least two devices, spmmfake:0 and cpu!");
    weft_tensor *A = fake_csr(fake);
    cr_assert_not_null(A, "%s", weft_error_message());
    cr_expect_null(weft_sparse_mm(A, B));
    tu_assert_error(WEFT_ERR_NOT_IMPLEMENTED,
                    "no kernel for op 'sparse_mm' on device 'spmmfake' with layout 'sparse_csr'");
    weft_scope_pop();
}

/* ---- autograd --------------------------------------------------------------------------------- */

Test(sparse_mm, the_dense_operand_gets_a_transpose_times_the_gradient)
{
    uint64_t st = 18;
    for (int f = 0; f < NUM_FMTS; f++) {
        weft_scope_push();
        struct spm *m = spm_random(50, 40, 0.2, &st);
        if (f == COO)
            spm_uncoalesce(m, &st);
        int64_t N = 9, bshape[2] = {m->K, N}, gshape[2] = {m->M, N};
        double *b = random_doubles(m->K * N, &st), *g = random_doubles(m->M * N, &st);
        struct spm *mt = calloc(1, sizeof *mt);
        mt->M = m->K, mt->K = m->M, mt->nnz = m->nnz;
        for (int64_t e = 0; e < m->nnz; e++)
            mt->row[e] = m->col[e], mt->col[e] = m->row[e], mt->val[e] = m->val[e];
        double *ref = malloc((size_t)(m->K * N) * 8);
        ref_addmm(mt, g, N, NULL, 0, 2.0, ref);
        weft_tensor *B = tu_tensor(2, bshape, b, WEFT_F64);
        weft_requires_grad_(B, true);
        weft_tensor *y = weft_sparse_addmm(weft_zeros(2, gshape, WEFT_F64, WEFT_CPU),
                                           spm_tensor(m, (enum fmt)f, spm_values(m, WEFT_F64)), B,
                                           1.0, 2.0);
        cr_assert_not_null(y, "%s", weft_error_message());
        cr_expect_str_eq(weft_grad_fn_name(y), "SparseAddmmBackward0");
        cr_assert_eq(weft_backward(y, tu_tensor(2, gshape, g, WEFT_F64), false), 0, "%s",
                     weft_error_message());
        weft_tensor *gb = weft_grad(B);
        cr_assert_not_null(gb);
        tu_assert_close(gb, ref, m->K * N, 1e-12, 1e-12);
        free(b);
        free(g);
        free(ref);
        free(mt);
        free(m);
        weft_scope_pop();
    }
}

Test(sparse_mm, spmv_records_mv_backward)
{
    weft_scope_push();
    int64_t n3 = 3;
    const double x[3] = {1, 2, 3}, expected[3] = {0, 1, 2}; /* A^T @ ones */
    weft_tensor *v = tu_tensor(1, &n3, x, WEFT_F32);
    weft_requires_grad_(v, true);
    weft_tensor *y = weft_sparse_mm(small(true, WEFT_F32), v);
    cr_expect_str_eq(weft_grad_fn_name(y), "MvBackward0");
    cr_assert_eq(weft_backward(weft_sum(y, 0, NULL, false), NULL, false), 0, "%s",
                 weft_error_message());
    tu_assert_close(weft_grad(v), expected, 3, 0, 0);
    weft_scope_pop();
}

/* The product and the values' gradient run through the dispatch funnel, where a profiler
 * sees them: sparse_mm forward and for the dense operand's gradient (A^T @ g), sparse_sddmm
 * for the values'. */
Test(sparse_mm, the_profiler_sees_the_products_and_sddmm)
{
    weft_scope_push();
    int64_t n2 = 2, ishape[2] = {2, 2}, size[2] = {2, 3}, bshape[2] = {3, 4};
    const double idx[4] = {0, 1, 1, 2}, val[2] = {1, 2};
    weft_tensor *v = tu_tensor(1, &n2, val, WEFT_F32);
    weft_requires_grad_(v, true);
    weft_tensor *A = weft_sparse_coo_tensor(tu_tensor(2, ishape, idx, WEFT_I64), v, 2, size, true);
    weft_tensor *B = weft_ones(2, bshape, WEFT_F32, WEFT_CPU);
    weft_requires_grad_(B, true);
    cr_assert_eq(weft_profiler_start(NULL), 0, "%s", weft_error_message());
    weft_tensor *y = weft_sparse_mm(A, B);
    cr_assert_eq(weft_backward(weft_sum(y, 0, NULL, false), NULL, false), 0, "%s",
                 weft_error_message());
    weft_profiler_stop();
    struct weft_profiler_average *rows;
    size_t n;
    cr_assert_eq(weft_profiler_key_averages(false, &rows, &n), 0, "%s", weft_error_message());
    int64_t mm = 0, sddmm = 0;
    for (size_t i = 0; i < n; i++) {
        mm += strcmp(rows[i].name, "sparse_mm") == 0 ? rows[i].calls : 0;
        sddmm += strcmp(rows[i].name, "sparse_sddmm") == 0 ? rows[i].calls : 0;
    }
    free(rows);
    weft_profiler_clear();
    cr_expect_eq(mm, 2, "sparse_mm: %lld calls", (long long)mm);
    cr_expect_eq(sddmm, 1, "sparse_sddmm: %lld calls", (long long)sddmm);
    weft_scope_pop();
}

struct gc_ctx {
    const struct spm *m;
    enum fmt f;
    bool addmm, vector;
};

/* inputs: 0 values [nnz], 1 dense [K, N] (or [K]), 2 addmm's input */
static weft_tensor *gc_fn(void *p, weft_tensor *const *in)
{
    const struct gc_ctx *c = p;
    weft_tensor *A = spm_tensor(c->m, c->f, in[0]);
    return c->addmm ? weft_sparse_addmm(in[2], A, in[1], 0.7, -1.3) : weft_sparse_mm(A, in[1]);
}

static void gradcheck(enum fmt f, bool addmm, bool vector, uint64_t seed)
{
    weft_scope_push();
    uint64_t st = seed;
    struct spm *m = spm_random(9, 7, 0.35, &st);
    if (f == COO)
        spm_uncoalesce(m, &st);
    int64_t N = 4, bshape[2] = {m->K, N}, ishape[1] = {vector ? m->M : N};
    double *b = random_doubles(m->K * N, &st), *c0 = random_doubles(m->M * N, &st);
    weft_tensor *in[3] = {spm_values(m, WEFT_F64),
                          tu_tensor(vector ? 1 : 2, vector ? &m->K : bshape, b, WEFT_F64),
                          tu_tensor(1, ishape, c0, WEFT_F64)};
    for (int i = 0; i < 3; i++)
        weft_requires_grad_(in[i], true);
    struct gc_ctx c = {m, f, addmm, vector};
    cr_expect_eq(weft_gradcheck(gc_fn, &c, addmm ? 3 : 2, in, 1e-6, 1e-6, 1e-5), 0,
                 "%s%s%s: %s", fmt_names[f], addmm ? " addmm" : " mm", vector ? " vector" : "",
                 weft_error_message());
    weft_error_clear();
    free(b);
    free(c0);
    free(m);
    weft_scope_pop();
}

/* With COO_COALESCED the values reach the product through coalesce(). */
Test(sparse_mm, gradcheck_wrt_values_dense_operand_and_input)
{
    for (int f = 0; f < NUM_FMTS; f++) {
        gradcheck((enum fmt)f, false, false, 20 + f);
        gradcheck((enum fmt)f, true, false, 30 + f);
        gradcheck((enum fmt)f, false, true, 40 + f);
        gradcheck((enum fmt)f, true, true, 50 + f);
    }
}

Test(sparse_mm, the_values_gradient_keeps_the_pattern)
{
    uint64_t st = 19;
    for (int f = 0; f < NUM_FMTS; f++) {
        weft_scope_push();
        struct spm *m = spm_random(30, 25, 0.2, &st);
        if (f == COO)
            spm_uncoalesce(m, &st);
        int64_t N = 6, bshape[2] = {m->K, N}, gshape[2] = {m->M, N};
        double *b = random_doubles(m->K * N, &st), *g = random_doubles(m->M * N, &st);
        double *ref = malloc((size_t)m->nnz * 8 + 8);
        for (int64_t e = 0; e < m->nnz; e++) { /* alpha * sum_j G[row, j] B[col, j] */
            ref[e] = 0;
            for (int64_t j = 0; j < N; j++)
                ref[e] += 0.5 * g[m->row[e] * N + j] * b[m->col[e] * N + j];
        }
        weft_tensor *values = spm_values(m, WEFT_F32);
        weft_requires_grad_(values, true);
        weft_tensor *A = spm_tensor(m, (enum fmt)f, values);
        weft_tensor *y = weft_sparse_addmm(weft_zeros(2, gshape, WEFT_F32, WEFT_CPU), A,
                                           tu_tensor(2, bshape, b, WEFT_F32), 1.0, 0.5);
        cr_assert_eq(weft_backward(y, tu_tensor(2, gshape, g, WEFT_F32), false), 0, "%s: %s",
                     fmt_names[f], weft_error_message());
        weft_tensor *gv = weft_grad(values);
        cr_assert_not_null(gv, "%s: no gradient for the values", fmt_names[f]);
        tu_assert_close(gv, ref, m->nnz, 1e-5, 1e-5);
        free(b);
        free(g);
        free(ref);
        free(m);
        weft_scope_pop();
    }
}

/* A sparse leaf that requires grad (torch: A.requires_grad_()) gets a sparse .grad on its
 * own pattern; used twice, the two gradients are summed through the layout's add(). */
Test(sparse_mm, a_sparse_leaf_used_twice_gets_the_summed_sparse_gradient)
{
    for (int csr = 0; csr < 2; csr++) {
        weft_scope_push();
        weft_tensor *A = small(csr, WEFT_F64);
        cr_assert_eq(weft_requires_grad_(A, true), 0, "%s", weft_error_message());
        int64_t s32[2] = {3, 2};
        const double b[6] = {1, 2, 3, 4, 5, 6}, c[6] = {10, 20, 30, 40, 50, 60};
        weft_tensor *B = tu_tensor(2, s32, b, WEFT_F64), *C = tu_tensor(2, s32, c, WEFT_F64);
        weft_tensor *loss = weft_add(weft_sum(weft_sparse_mm(A, B), 0, NULL, false),
                                     weft_sum(weft_sparse_mm(A, C), 0, NULL, false));
        cr_assert_eq(weft_backward(loss, NULL, false), 0, "%s", weft_error_message());
        weft_tensor *g = weft_grad(A);
        cr_assert_not_null(g);
        cr_expect_eq(g->layout, A->layout, "the gradient keeps the layout");
        cr_expect_eq(weft_tensor_nnz(weft_sparse_coalesce(g)), 2, "and the pattern");
        /* dA[i, k] = sum_n (B + C)[k, n] where A has an entry: (0, 1) and (1, 2). */
        const double expected[6] = {0, 3 + 4 + 30 + 40, 0, 0, 0, 5 + 6 + 50 + 60};
        tu_assert_close(weft_sparse_to_dense(g), expected, 6, 0, 0);
        /* A second backward accumulates into the sparse .grad. */
        loss = weft_sum(weft_sparse_mm(A, B), 0, NULL, false);
        cr_assert_eq(weft_backward(loss, NULL, false), 0, "%s", weft_error_message());
        const double twice[6] = {0, 77 + 7, 0, 0, 0, 121 + 11};
        tu_assert_close(weft_sparse_to_dense(weft_grad(A)), twice, 6, 0, 0);
        weft_scope_pop();
    }
}
