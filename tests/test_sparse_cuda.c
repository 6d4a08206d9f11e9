/* tests/test_sparse_cuda.c: weft-sparse-cuda.so (cuSPARSE's SpMM and SDDMM, and weft's own
 * SDDMM kernel) against the cpu plugin's kernels on the same inputs: CSR with int32 and
 * int64 indices and COO, float32 and float64, empty patterns and sizes, dense operands of
 * every stride (row-major, column-major, sliced, expanded), addmm's scaling, and the
 * gradients (the transposed product and the sampled product). Skips (saying why) where no
 * CUDA device runs; tests/cuda_emu runs it on the emulated device. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <weft/sparse.h>

#include "testutil.h"

static void setup(void)
{
    tu_setup();
    if (!weft_sparse_api_get())
        cr_assert_fail("cannot load the sparse plugin: %s", weft_error_message());
}

TestSuite(sparse_cuda, .init = setup, .fini = tu_teardown);

static void require_cuda(void)
{
    if (weft_plugin_load("cuda") != 0) {
        fprintf(stderr, "sparse cuda checks skipped: %s\n", weft_error_message());
        weft_error_clear();
        cr_skip_test("no CUDA device here");
    }
}

static weft_tensor *cuda(const weft_tensor *t)
{
    weft_tensor *c = weft_to_device((weft_tensor *)t, tu_cuda(0));
    cr_assert_not_null(c, "to cuda: %s", weft_error_message());
    return c;
}

static uint64_t next(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

enum fmt { CSR32, CSR64, COO, FMTS };
static const char *const fmt_names[FMTS] = {"csr int32", "csr int64", "coo"};

/* A random [M, K] pattern (sorted, no duplicates, every fifth row empty) with values of dt,
 * in format f, on dev; *values is the values tensor, a leaf that requires grad when grad
 * is set. */
static weft_tensor *random_sparse_grad(int64_t M, int64_t K, double density, enum fmt f,
                                       enum weft_dtype dt, weft_device dev, uint64_t *st,
                                       weft_tensor **values, bool grad)
{
    int64_t cap = M * K + 1, nnz = 0;
    double *row = malloc(sizeof(double) * (size_t)cap), *col = malloc(sizeof(double) * (size_t)cap);
    double *val = malloc(sizeof(double) * (size_t)cap), *crow = calloc((size_t)M + 1, sizeof(double));
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < K; j++)
            if (i % 5 != 3 && (double)next(st) / 2147483648.0 < density) {
                row[nnz] = (double)i, col[nnz] = (double)j;
                tu_random_values(&val[nnz], 1, -1, 1, st);
                crow[i + 1]++;
                nnz++;
            }
    for (int64_t i = 0; i < M; i++)
        crow[i + 1] += crow[i];
    int64_t size[2] = {M, K}, n1 = M + 1, ishape[2] = {2, nnz};
    weft_tensor *v = tu_tensor(1, &nnz, val, dt), *t;
    if (dev.type != WEFT_DEVICE_CPU)
        v = cuda(v);
    if (grad)
        cr_assert_eq(weft_requires_grad_(v, true), 0, "%s", weft_error_message());
    *values = v;
    if (f == COO) {
        double *idx = malloc(sizeof(double) * (size_t)(2 * nnz + 1));
        memcpy(idx, row, sizeof(double) * (size_t)nnz);
        memcpy(idx + nnz, col, sizeof(double) * (size_t)nnz);
        weft_tensor *it = tu_tensor(2, ishape, idx, WEFT_I64);
        free(idx);
        t = weft_sparse_coo_tensor(dev.type == WEFT_DEVICE_CPU ? it : cuda(it), v, 2, size, false);
    } else {
        enum weft_dtype it = f == CSR32 ? WEFT_I32 : WEFT_I64;
        weft_tensor *cr = tu_tensor(1, &n1, crow, it), *cl = tu_tensor(1, &nnz, col, it);
        if (dev.type != WEFT_DEVICE_CPU)
            cr = cuda(cr), cl = cuda(cl);
        t = weft_sparse_csr_tensor(cr, cl, v, size, false);
    }
    free(row), free(col), free(val), free(crow);
    cr_assert_not_null(t, "%s: %s", fmt_names[f], weft_error_message());
    return t;
}

static weft_tensor *random_sparse(int64_t M, int64_t K, double density, enum fmt f,
                                  enum weft_dtype dt, weft_device dev, uint64_t *st,
                                  weft_tensor **values)
{
    return random_sparse_grad(M, K, density, f, dt, dev, st, values, false);
}

static weft_tensor *random_dense(int64_t r, int64_t c, enum weft_dtype dt, uint64_t seed)
{
    int64_t shape[2] = {r, c};
    double *v = malloc(sizeof(double) * (size_t)(r * c + 1));
    tu_random_values(v, r * c, -1, 1, &seed);
    weft_tensor *t = tu_tensor(2, shape, v, dt);
    free(v);
    return t;
}

static void assert_same(const weft_tensor *got, const weft_tensor *want, double tol, const char *what)
{
    cr_assert_not_null(got, "%s: %s", what, weft_error_message());
    cr_assert_not_null(want, "%s: %s", what, weft_error_message());
    int64_t n = weft_tensor_numel(want);
    cr_assert_eq(weft_tensor_numel(got), n, "%s: numel", what);
    double *x = malloc(sizeof(double) * (size_t)(n + 1)), *y = malloc(sizeof(double) * (size_t)(n + 1));
    tu_read(got, x);
    tu_read(want, y);
    int64_t bad = 0, first = -1; /* one message, however many differ */
    for (int64_t i = 0; i < n; i++)
        if (!(fabs(x[i] - y[i]) <= tol * (1 + fabs(y[i]))) && bad++ == 0)
            first = i;
    cr_expect_eq(bad, 0, "%s: %lld of %lld differ, first [%lld]: cuda %.9g, cpu %.9g", what,
                 (long long)bad, (long long)n, (long long)first, first >= 0 ? x[first] : 0.0,
                 first >= 0 ? y[first] : 0.0);
    free(x), free(y);
}

static double tol(enum weft_dtype dt)
{
    return dt == WEFT_F32 ? 1e-5 : 1e-12;
}

static const struct {
    int64_t M, K, N;
    double density;
} shapes[] = {
    {7, 5, 3, 0.4}, {50, 40, 64, 0.1}, {33, 17, 70, 0.3}, {20, 30, 1, 0.2}, {5, 8, 2, 0.0},
    {0, 4, 3, 0.5}, {4, 0, 3, 0.5},    {6, 4, 0, 0.5},    {1, 1, 1, 1.0},
};

Test(sparse_cuda, mm_matches_the_cpu_for_every_format_dtype_and_size)
{
    require_cuda();
    uint64_t st = 1;
    for (int f = 0; f < FMTS; f++)
        for (int d = 0; d < 2; d++) {
            enum weft_dtype dt = d ? WEFT_F64 : WEFT_F32;
            for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
                weft_scope_push();
                uint64_t st2 = st;
                weft_tensor *v, *vd;
                weft_tensor *A = random_sparse(shapes[s].M, shapes[s].K, shapes[s].density,
                                               (enum fmt)f, dt, WEFT_CPU, &st, &v);
                weft_tensor *Ad = random_sparse(shapes[s].M, shapes[s].K, shapes[s].density,
                                                (enum fmt)f, dt, tu_cuda(0), &st2, &vd);
                weft_tensor *B = random_dense(shapes[s].K, shapes[s].N, dt, 7 + s);
                char what[96];
                snprintf(what, sizeof what, "%s %s shape %zu", fmt_names[f], weft_dtype_name(dt), s);
                assert_same(weft_sparse_mm(Ad, cuda(B)), weft_sparse_mm(A, B), tol(dt), what);
                weft_scope_pop();
            }
        }
}

/* B column-major (cuSPARSE reads it as the transpose: CSR_ALG2 refuses, the default
 * algorithm takes it), every other column of a wider matrix (made contiguous), and a row
 * expanded to every row (stride 0). */
Test(sparse_cuda, mm_takes_dense_operands_of_any_strides)
{
    require_cuda();
    for (int f = 0; f < FMTS; f++)
        for (int kind = 0; kind < 3; kind++) {
            weft_scope_push();
            uint64_t st = 20 + f, st2 = st;
            const int64_t M = 40, K = 35, N = 29;
            weft_tensor *v, *vd;
            weft_tensor *A = random_sparse(M, K, 0.2, (enum fmt)f, WEFT_F32, WEFT_CPU, &st, &v);
            weft_tensor *Ad = random_sparse(M, K, 0.2, (enum fmt)f, WEFT_F32, tu_cuda(0), &st2, &vd);
            weft_tensor *B, *Bd;
            if (kind == 0) {
                weft_tensor *bt = random_dense(N, K, WEFT_F32, 3);
                B = weft_t(bt), Bd = weft_t(cuda(bt));
            } else if (kind == 1) {
                weft_tensor *wide = random_dense(K, 2 * N, WEFT_F32, 4);
                B = weft_slice(wide, 1, 0, 2 * N, 2), Bd = weft_slice(cuda(wide), 1, 0, 2 * N, 2);
            } else {
                weft_tensor *r = random_dense(1, N, WEFT_F32, 5);
                int64_t full[2] = {K, N};
                B = weft_expand(r, 2, full), Bd = weft_expand(cuda(r), 2, full);
            }
            cr_assert(!weft_tensor_is_contiguous(Bd));
            char what[64];
            snprintf(what, sizeof what, "%s, B kind %d", fmt_names[f], kind);
            assert_same(weft_sparse_mm(Ad, Bd), weft_sparse_mm(A, B), 1e-5, what);
            weft_scope_pop();
        }
}

Test(sparse_cuda, addmm_scales_its_input_and_ignores_nan_when_beta_is_zero)
{
    require_cuda();
    for (int f = 0; f < FMTS; f++) {
        weft_scope_push();
        uint64_t st = 30, st2 = st;
        weft_tensor *v, *vd;
        weft_tensor *A = random_sparse(25, 18, 0.3, (enum fmt)f, WEFT_F64, WEFT_CPU, &st, &v);
        weft_tensor *Ad = random_sparse(25, 18, 0.3, (enum fmt)f, WEFT_F64, tu_cuda(0), &st2, &vd);
        weft_tensor *B = random_dense(18, 11, WEFT_F64, 8), *C = random_dense(25, 11, WEFT_F64, 9);
        assert_same(weft_sparse_addmm(cuda(C), Ad, cuda(B), 0.25, -1.5),
                    weft_sparse_addmm(C, A, B, 0.25, -1.5), 1e-12, fmt_names[f]);
        int64_t cs[2] = {25, 11};
        weft_tensor *nan = weft_full(2, cs, NAN, WEFT_F64, WEFT_CPU);
        assert_same(weft_sparse_addmm(cuda(nan), Ad, cuda(B), 0.0, 2.0),
                    weft_sparse_addmm(nan, A, B, 0.0, 2.0), 1e-12, "beta 0");
        weft_scope_pop();
    }
}

/* dL/dB = A^T G (the transposed product) and dL/dvalues = (G B^T) sampled on A's pattern
 * (cuSPARSE's SDDMM for CSR, weft's kernel for COO). */
Test(sparse_cuda, gradients_of_the_dense_operand_and_the_values_match_the_cpu)
{
    require_cuda();
    for (int f = 0; f < FMTS; f++)
        for (int d = 0; d < 2; d++) {
            enum weft_dtype dt = d ? WEFT_F64 : WEFT_F32;
            weft_scope_push();
            uint64_t st = 40 + f, st2 = st;
            const int64_t M = 45, K = 38, N = 21;
            weft_tensor *v, *vd;
            weft_tensor *A = random_sparse_grad(M, K, 0.2, (enum fmt)f, dt, WEFT_CPU, &st, &v, true);
            weft_tensor *Ad = random_sparse_grad(M, K, 0.2, (enum fmt)f, dt, tu_cuda(0), &st2, &vd,
                                                 true);
            weft_tensor *B = random_dense(K, N, dt, 10), *Bd = cuda(B);
            weft_tensor *G = random_dense(M, N, dt, 11);
            cr_assert_eq(weft_requires_grad_(B, true), 0);
            cr_assert_eq(weft_requires_grad_(Bd, true), 0);
            weft_tensor *y = weft_sparse_mm(A, B), *yd = weft_sparse_mm(Ad, Bd);
            cr_assert_not_null(yd, "%s", weft_error_message());
            cr_assert_eq(weft_backward(y, G, false), 0, "%s", weft_error_message());
            cr_assert_eq(weft_backward(yd, cuda(G), false), 0, "%s: %s", fmt_names[f],
                         weft_error_message());
            char what[64];
            snprintf(what, sizeof what, "%s %s: grad of B", fmt_names[f], weft_dtype_name(dt));
            assert_same(weft_grad(Bd), weft_grad(B), tol(dt), what);
            snprintf(what, sizeof what, "%s %s: grad of the values", fmt_names[f],
                     weft_dtype_name(dt));
            assert_same(weft_grad(vd), weft_grad(v), tol(dt), what);
            weft_scope_pop();
        }
}

/* The sampled product through the kernel itself, with a G that fits no dense order (an
 * expanded column: cuSPARSE cannot take it, weft's kernel does, for CSR too). */
Test(sparse_cuda, the_sddmm_kernel_takes_any_strides)
{
    require_cuda();
    int op = weft_op_lookup("sparse_sddmm");
    cr_assert_geq(op, 0);
    for (int f = 0; f < FMTS; f++)
        for (int strided = 0; strided < 2; strided++) {
            weft_scope_push();
            uint64_t st = 50 + f, st2 = st;
            const int64_t M = 60, K = 50, N = 37;
            weft_tensor *v, *vd;
            weft_tensor *A = random_sparse(M, K, 0.2, (enum fmt)f, WEFT_F32, WEFT_CPU, &st, &v);
            weft_tensor *Ad = random_sparse(M, K, 0.2, (enum fmt)f, WEFT_F32, tu_cuda(0), &st2, &vd);
            weft_tensor *G, *Gd, *B = random_dense(K, N, WEFT_F32, 12);
            if (strided) {
                weft_tensor *c = random_dense(M, 1, WEFT_F32, 13);
                int64_t full[2] = {M, N};
                G = weft_expand(c, 2, full), Gd = weft_expand(cuda(c), 2, full);
            } else {
                G = random_dense(M, N, WEFT_F32, 14), Gd = cuda(G);
            }
            int64_t nnz = weft_tensor_numel(v);
            weft_tensor *out = weft_empty(1, &nnz, WEFT_F32, WEFT_CPU);
            weft_tensor *outd = weft_empty(1, &nnz, WEFT_F32, tu_cuda(0));
            struct weft_op_call c = {.op = op, .nin = 3, .nout = 1};
            c.in[0] = A, c.in[1] = G, c.in[2] = B, c.out[0] = out;
            cr_assert_eq(weft_dispatch(&c), 0, "%s", weft_error_message());
            c.in[0] = Ad, c.in[1] = Gd, c.in[2] = cuda(B), c.out[0] = outd;
            cr_assert_eq(weft_dispatch(&c), 0, "%s: %s", fmt_names[f], weft_error_message());
            assert_same(outd, out, 1e-5, fmt_names[f]);
            weft_scope_pop();
        }
}

TU_MAIN_SKIPPED_WHEN_ALL_SKIP("sparse_cuda")
