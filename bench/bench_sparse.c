/* bench/bench_sparse.c: weft-bench's sparse group. Every name starts with "sparse_", so
 * `weft-bench --filter sparse_` runs the group alone:
 *   sparse_csr_spmm_100k_1e6nnz_x64    CSR (int64 indices) [1e5, 1e5] @ dense [1e5, 64]
 *   sparse_coo_spmm_100k_1e6nnz_x64    the same matrix as coalesced COO
 *   sparse_csr_spmv_100k_1e6nnz        CSR @ dense [1e5]
 *   sparse_csr_spmm_t_100k_1e6nnz_x64  A^T @ G, G [1e5, 64]: the "sparse_mm" kernel with
 *                                      its transpose flag, as the backward runs it
 *   sparse_dense_crossover_4096_x64    the density at which dense matmul overtakes SpMM
 *                                      for [4096, 4096] @ [4096, 64] (the sweep is printed
 *                                      as comments)
 * bench/sparse_torch.py times the same products with PyTorch on the same matrices. Both
 * generate them with splitmix64 (documented there and at matrix_draw below), and both
 * print a checksum of each result so a reader can see they multiplied the same numbers.
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft.h>
#include <weft/sparse.h>
#include <weft/kernel.h>

typedef double (*time_median_fn)(void (*fn)(void *), void *ctx, int repeats);
typedef void (*report_fn)(const char *name, double value, const char *unit);

void bench_sparse(bool (*selected)(const char *name), time_median_fn time_median,
                  report_fn report, int repeats);

static void die_unless(bool ok, const char *what)
{
    if (ok && weft_error_code() == WEFT_OK)
        return;
    fprintf(stderr, "weft-bench: %s: %s\n", what,
            weft_error_code() ? weft_error_message() : "out of memory");
    exit(1);
}

/* ---- the matrices ---------------------------------------------------------------------- */

static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* A uniform float in [0, 1) that float32 holds exactly. */
static float unit_float(uint64_t z)
{
    return (float)(z >> 40) * (1.0f / 16777216.0f);
}

struct entry {
    int64_t key; /* row * cols + col */
    float value;
};

static int by_key(const void *a, const void *b)
{
    int64_t x = ((const struct entry *)a)->key, y = ((const struct entry *)b)->key;
    return (x > y) - (x < y);
}

/* A rows x cols matrix from `draws` nonzeros drawn from splitmix64 seeded `seed`: three
 * consecutive outputs z0, z1, z2 give row z0 % rows, col z1 % cols, value unit_float(z2);
 * entries drawn twice are summed (in float32, in draw order). Sorted, no duplicates. */
static struct entry *matrix_draw(int64_t rows, int64_t cols, int64_t draws, uint64_t seed,
                                 int64_t *nnz)
{
    struct entry *e = malloc((size_t)(draws > 0 ? draws : 1) * sizeof *e);
    die_unless(e != NULL, "drawing a sparse matrix");
    uint64_t s = seed;
    for (int64_t i = 0; i < draws; i++) {
        int64_t r = (int64_t)(splitmix64(&s) % (uint64_t)rows);
        int64_t c = (int64_t)(splitmix64(&s) % (uint64_t)cols);
        e[i] = (struct entry){r * cols + c, unit_float(splitmix64(&s))};
    }
    /* a stable sort keeps duplicates in draw order, so their float sum is reproducible */
    for (int64_t i = 0; i < draws; i++)
        e[i].key = e[i].key * draws + i;
    qsort(e, (size_t)draws, sizeof *e, by_key);
    int64_t n = 0;
    for (int64_t i = 0; i < draws; i++) {
        int64_t key = e[i].key / draws;
        if (n > 0 && e[n - 1].key == key) {
            e[n - 1].value += e[i].value;
            continue;
        }
        e[n++] = (struct entry){key, e[i].value};
    }
    *nnz = n;
    return e;
}

/* CSR (int64 indices) or coalesced COO of the entries. */
static weft_tensor *sparse_of(const struct entry *e, int64_t nnz, int64_t rows, int64_t cols,
                              bool csr)
{
    weft_scope_push();
    int64_t *idx = malloc((size_t)(2 * nnz + rows + 1) * sizeof *idx);
    float *val = malloc((size_t)(nnz > 0 ? nnz : 1) * sizeof *val);
    die_unless(idx && val, "building a sparse matrix");
    for (int64_t i = 0; i < nnz; i++)
        val[i] = e[i].value;
    int64_t size[2] = {rows, cols};
    weft_tensor *values = weft_from_host(val, 1, &nnz, WEFT_F32, WEFT_CPU), *t;
    if (csr) {
        int64_t *crow = idx, *col = idx + rows + 1, nrow = rows + 1;
        memset(crow, 0, (size_t)nrow * sizeof *crow);
        for (int64_t i = 0; i < nnz; i++) {
            crow[e[i].key / cols + 1]++;
            col[i] = e[i].key % cols;
        }
        for (int64_t r = 0; r < rows; r++)
            crow[r + 1] += crow[r];
        t = weft_sparse_csr_tensor(weft_from_host(crow, 1, &nrow, WEFT_I64, WEFT_CPU),
                                   weft_from_host(col, 1, &nnz, WEFT_I64, WEFT_CPU), values, size,
                                   false);
    } else {
        for (int64_t i = 0; i < nnz; i++) {
            idx[i] = e[i].key / cols;
            idx[nnz + i] = e[i].key % cols;
        }
        int64_t ishape[2] = {2, nnz};
        t = weft_sparse_coalesce(weft_sparse_coo_tensor(
            weft_from_host(idx, 2, ishape, WEFT_I64, WEFT_CPU), values, 2, size, false));
    }
    free(idx);
    free(val);
    weft_tensor_retain(t);
    weft_scope_pop();
    die_unless(t != NULL, "building a sparse matrix");
    return t;
}

/* rows x cols float32 from splitmix64 seeded `seed`, unit_float of each output. */
static weft_tensor *dense_draw(int ndim, int64_t rows, int64_t cols, uint64_t seed)
{
    int64_t n = rows * cols, shape[2] = {rows, cols};
    float *v = malloc((size_t)n * sizeof *v);
    die_unless(v != NULL, "drawing a dense matrix");
    uint64_t s = seed;
    for (int64_t i = 0; i < n; i++)
        v[i] = unit_float(splitmix64(&s));
    weft_tensor *t = weft_from_host(v, ndim, ndim == 1 ? &rows : shape, WEFT_F32, WEFT_CPU);
    free(v);
    die_unless(t != NULL, "drawing a dense matrix");
    return t;
}

static double checksum(weft_tensor *t)
{
    weft_tensor *d = weft_to_dtype(t, WEFT_F64);
    weft_tensor *s = weft_sum(d, 0, NULL, false);
    double v = 0;
    die_unless(s && weft_tensor_item(s, &v) == 0, "checksum");
    weft_tensor_release(s);
    weft_tensor_release(d);
    return v;
}

/* ---- the products ------------------------------------------------------------------------- */

struct product {
    weft_tensor *a, *b;
    bool transposed, dense;
    weft_tensor *out; /* the last result (for the checksum) */
};

/* A^T @ G through the kernel (no public function takes the transpose flag). */
static weft_tensor *transposed_product(weft_tensor *a, weft_tensor *g)
{
    int op = weft_op_lookup("sparse_mm");
    weft_kernel_fn fn = op < 0 ? NULL : weft_kernel_lookup(op, WEFT_DEVICE_CPU, a->layout, a->dtype);
    die_unless(fn != NULL, "no sparse_mm kernel");
    int64_t shape[2] = {a->shape[1], g->shape[1]};
    weft_tensor *c = weft_empty(2, shape, g->dtype, WEFT_CPU);
    struct weft_op_call call = {.op = op, .nin = 2, .nout = 1, .in = {a, g}, .out = {c}};
    call.scalar[0] = 1;
    call.ints[0] = 1;
    die_unless(c && fn(&call) == 0, "sparse_mm^T");
    return c;
}

static void run_product(void *p)
{
    struct product *c = p;
    weft_tensor_release(c->out);
    if (c->transposed)
        c->out = transposed_product(c->a, c->b);
    else
        c->out = c->dense ? weft_matmul(c->a, c->b) : weft_sparse_mm(c->a, c->b);
    die_unless(c->out != NULL, "product");
}

/* Times one product; prints ms/call and the result's checksum. */
static double time_product(const char *name, struct product *c, time_median_fn time_median,
                           report_fn report, int repeats)
{
    double s = time_median(run_product, c, repeats);
    if (report) {
        report(name, s * 1e3, "ms/call");
        printf("#   checksum %.6e\n", checksum(c->out));
    }
    weft_tensor_release(c->out);
    c->out = NULL;
    return s;
}

static void bench_big(bool (*selected)(const char *), time_median_fn time_median,
                      report_fn report, int repeats)
{
    static const char *const names[4] = {
        "sparse_csr_spmm_100k_1e6nnz_x64", "sparse_coo_spmm_100k_1e6nnz_x64",
        "sparse_csr_spmv_100k_1e6nnz", "sparse_csr_spmm_t_100k_1e6nnz_x64"};
    bool want[4], any = false;
    for (int i = 0; i < 4; i++)
        any |= want[i] = selected(names[i]);
    if (!any)
        return;
    const int64_t n = 100000, draws = 1000000, N = 64;
    int64_t nnz;
    struct entry *e = matrix_draw(n, n, draws, 0, &nnz);
    printf("# [%lld, %lld] with %lld nonzeros (splitmix64 seed 0), dense operands seed 1\n",
           (long long)n, (long long)n, (long long)nnz);
    weft_tensor *csr = sparse_of(e, nnz, n, n, true);
    weft_tensor *coo = want[1] ? sparse_of(e, nnz, n, n, false) : NULL;
    free(e);
    weft_tensor *B = dense_draw(2, n, N, 1), *x = dense_draw(1, n, 1, 1);
    struct product runs[4] = {{csr, B}, {coo, B}, {csr, x}, {csr, B, .transposed = true}};
    for (int i = 0; i < 4; i++)
        if (want[i])
            time_product(names[i], &runs[i], time_median, report, repeats);
    weft_tensor_release(x);
    weft_tensor_release(B);
    weft_tensor_release(coo);
    weft_tensor_release(csr);
}

/* SpMM against dense matmul on [4096, 4096] @ [4096, 64] over a sweep of densities; the
 * crossover is interpolated (log density) between the last point SpMM wins and the first
 * it loses. */
static void bench_crossover(bool (*selected)(const char *), time_median_fn time_median,
                            report_fn report, int repeats)
{
    const char *name = "sparse_dense_crossover_4096_x64";
    if (!selected(name))
        return;
    static const double densities[] = {0.001, 0.002, 0.005, 0.01, 0.02, 0.05,
                                       0.1,   0.2,   0.3,   0.5,  0.75, 1.0};
    const int64_t n = 4096, N = 64;
    weft_tensor *B = dense_draw(2, n, N, 1);
    double prev_d = 0, prev_ratio = 0, crossover = -1;
    for (size_t k = 0; k < sizeof densities / sizeof densities[0] && crossover < 0; k++) {
        double d = densities[k];
        int64_t nnz;
        struct entry *e = matrix_draw(n, n, (int64_t)(d * (double)(n * n)), 0, &nnz);
        float *full = calloc((size_t)(n * n), sizeof *full);
        die_unless(full != NULL, "crossover");
        for (int64_t i = 0; i < nnz; i++)
            full[e[i].key] = e[i].value;
        int64_t shape[2] = {n, n};
        struct product sp = {sparse_of(e, nnz, n, n, true), B};
        struct product de = {weft_from_host(full, 2, shape, WEFT_F32, WEFT_CPU), B, .dense = true};
        free(full);
        free(e);
        double ts = time_product(NULL, &sp, time_median, NULL, repeats);
        double td = time_product(NULL, &de, time_median, NULL, repeats);
        d = (double)nnz / (double)(n * n); /* drawn twice counts once */
        printf("#   density %-8.4g nnz %-9lld spmm %8.3f ms  dense matmul %8.3f ms\n", d,
               (long long)nnz, ts * 1e3, td * 1e3);
        double ratio = ts / td; /* > 1: dense wins */
        if (ratio >= 1)
            crossover = k == 0 ? d
                               : prev_d * pow(d / prev_d, (1 - prev_ratio) / (ratio - prev_ratio));
        prev_d = d;
        prev_ratio = ratio;
        weft_tensor_release(sp.a);
        weft_tensor_release(de.a);
    }
    weft_tensor_release(B);
    if (crossover < 0) {
        printf("# SpMM is faster than dense matmul at every density up to 1\n");
        return;
    }
    printf("# dense matmul overtakes SpMM at density %.3g\n", crossover);
    report(name, crossover, "density");
}

void bench_sparse(bool (*selected)(const char *name), time_median_fn time_median,
                  report_fn report, int repeats)
{
    bench_big(selected, time_median, report, repeats);
    bench_crossover(selected, time_median, report, repeats);
}
