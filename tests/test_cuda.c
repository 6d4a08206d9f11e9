/* tests/test_cuda.c: the CUDA plugin, built only where the toolkit is found.
 *
 * Without a GPU (build machines, CI) the plugin must refuse to load and say why; the
 * GPU checks then skip, printing "cuda tests skipped: <reason>". With a GPU the refusal
 * checks skip and every cuda op is compared with the cpu on the same inputs
 * (non-contiguous and broadcast ones included); uniform and integer random numbers must
 * be bit-identical. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

TestSuite(cuda, .init = tu_setup, .fini = tu_teardown);

/* Loads the cuda plugin; true when it runs here, else why says why (error cleared). */
static bool load_cuda(char *why, size_t size)
{
    if (weft_plugin_load("cuda") == 0)
        return true;
    snprintf(why, size, "%s", weft_error_message());
    weft_error_clear();
    return false;
}

#define REQUIRE_GPU()                                                                         \
    do {                                                                                      \
        char why_[600];                                                                       \
        if (!load_cuda(why_, sizeof why_)) {                                                  \
            cr_log_info("cuda tests skipped: %s", why_);                                      \
            fprintf(stderr, "cuda tests skipped: %s\n", why_);                                \
            cr_skip_test("cuda tests skipped: %s", why_);                                     \
        }                                                                                     \
    } while (0)

#define REQUIRE_NO_GPU()                                                                      \
    do {                                                                                      \
        if (weft_plugin_load("cuda") == 0)                                                    \
            cr_skip_test("a CUDA device is present: the GPU checks run instead");             \
        weft_error_clear();                                                                   \
    } while (0)

/* ---- without a GPU ------------------------------------------------------------------------ */

Test(cuda, without_a_device_the_plugin_refuses_to_load_and_says_why)
{
    int rc = weft_plugin_load("cuda");
    if (rc == 0)
        cr_skip_test("a CUDA device is present: the GPU checks run instead");
    cr_expect_eq(weft_error_code(), WEFT_ERR_DEVICE);
    cr_expect(strstr(weft_error_message(), "no CUDA device: ") != NULL, "%s",
              weft_error_message());
    cr_expect(strstr(weft_error_message(), "weft-cuda.so") != NULL, "names the file: %s",
              weft_error_message());
    weft_error_clear();
    cr_expect_not(weft_plugin_is_loaded("cuda"));
    /* asking again gives the same answer */
    cr_expect_lt(weft_plugin_load("cuda"), 0);
    tu_assert_error(WEFT_ERR_DEVICE, "no CUDA device");
}

Test(cuda, without_a_device_inspect_reports_the_plugin_unusable)
{
    REQUIRE_NO_GPU();
    const char *dir = getenv("WEFT_PLUGIN_PATH");
    cr_assert_not_null(dir);
    char path[4096];
    snprintf(path, sizeof path, "%s/weft-cuda.so", dir);
    struct weft_plugin_info *info = malloc(sizeof *info);
    cr_assert_not_null(info);
    cr_assert_eq(weft_plugin_inspect(path, info), 0, "%s", weft_error_message());
    cr_expect_str_eq(info->name, "cuda");
    cr_expect_not(info->usable);
    cr_expect_not(info->loaded);
    cr_expect(strstr(info->why, "no CUDA device: ") == info->why, "%s", info->why);
    free(info);
}

Test(cuda, without_a_device_the_sparse_cuda_plugin_refuses_to_load_and_says_why)
{
    REQUIRE_NO_GPU();
    cr_expect_lt(weft_plugin_load("sparse-cuda"), 0);
    tu_assert_error(WEFT_ERR_DEVICE, "no CUDA device: ");
    const char *dir = getenv("WEFT_PLUGIN_PATH");
    cr_assert_not_null(dir);
    char path[4096];
    snprintf(path, sizeof path, "%s/weft-sparse-cuda.so", dir);
    struct weft_plugin_info *info = malloc(sizeof *info);
    cr_assert_not_null(info);
    cr_assert_eq(weft_plugin_inspect(path, info), 0, "%s", weft_error_message());
    cr_expect_str_eq(info->name, "sparse-cuda");
    cr_expect_not(info->usable);
    cr_expect(strstr(info->why, "no CUDA device: ") == info->why, "%s", info->why);
    free(info);
}

Test(cuda, without_a_device_there_are_no_cuda_devices_and_no_error)
{
    REQUIRE_NO_GPU();
    cr_expect_eq(weft_device_count(tu_cuda(0).type), 0);
    tu_assert_no_error();
}

Test(cuda, without_a_device_a_cuda_tensor_fails_with_the_reason)
{
    REQUIRE_NO_GPU();
    int64_t shape[1] = {4};
    cr_expect_null(weft_zeros(1, shape, WEFT_F32, tu_cuda(0)));
    tu_assert_error(WEFT_ERR_DEVICE, "no CUDA device");
}

/* ---- with a GPU: helpers --------------------------------------------------------------------- */

static const enum weft_dtype all_dtypes[] = {WEFT_BOOL, WEFT_U8,  WEFT_I8,   WEFT_I16, WEFT_I32,
                                             WEFT_I64,  WEFT_F16, WEFT_BF16, WEFT_F32, WEFT_F64};

static weft_tensor *cuda(weft_tensor *t)
{
    weft_tensor *c = weft_to_device(t, tu_cuda(0));
    cr_assert_not_null(c, "to cuda: %s", weft_error_message());
    return c;
}

/* A cpu tensor of shape with random values in [lo, hi). */
static weft_tensor *random_cpu(int ndim, const int64_t *shape, double lo, double hi,
                               enum weft_dtype dt, uint64_t seed)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    tu_random_values(v, n, lo, hi, &seed);
    if (!weft_dtype_is_floating(dt))
        for (int64_t i = 0; i < n; i++)
            v[i] = floor(v[i]);
    weft_tensor *t = tu_tensor(ndim, shape, v, dt);
    free(v);
    return t;
}

/* Asserts a (any device) and b hold the same values within tolerance. */
static void assert_same(weft_tensor *a, weft_tensor *b, double rtol, double atol, const char *what)
{
    cr_assert_not_null(a, "%s: %s", what, weft_error_message());
    cr_assert_not_null(b, "%s: %s", what, weft_error_message());
    int64_t n = weft_tensor_numel(b);
    cr_assert_eq(weft_tensor_numel(a), n, "%s: numel", what);
    size_t bytes = (size_t)(n ? n : 1) * sizeof(double);
    double *x = malloc(bytes), *y = malloc(bytes);
    tu_read(a, x);
    tu_read(b, y);
    for (int64_t i = 0; i < n; i++) {
        if (isnan(x[i]) || isnan(y[i])) {
            cr_expect(isnan(x[i]) && isnan(y[i]), "%s[%lld]: %.17g vs %.17g", what, (long long)i,
                      x[i], y[i]);
            continue;
        }
        cr_expect(fabs(x[i] - y[i]) <= atol + rtol * fabs(y[i]), "%s[%lld]: cuda %.17g, cpu %.17g",
                  what, (long long)i, x[i], y[i]);
    }
    free(x);
    free(y);
}

/* Bit patterns equal (for the random ops). */
static void assert_identical(weft_tensor *a, weft_tensor *b, const char *what)
{
    cr_assert_not_null(a, "%s: %s", what, weft_error_message());
    cr_assert_not_null(b, "%s: %s", what, weft_error_message());
    size_t nbytes = (size_t)weft_tensor_numel(b) * weft_tensor_itemsize(b);
    char *x = malloc(nbytes + 1), *y = malloc(nbytes + 1);
    cr_assert_eq(weft_tensor_read(a, x, nbytes), 0, "%s", weft_error_message());
    cr_assert_eq(weft_tensor_read(b, y, nbytes), 0, "%s", weft_error_message());
    cr_expect_eq(memcmp(x, y, nbytes), 0, "%s: cuda and cpu differ", what);
    free(x);
    free(y);
}

/* ---- with a GPU: the backend ---------------------------------------------------------------- */

Test(cuda, with_a_device_the_backend_describes_it)
{
    REQUIRE_GPU();
    cr_expect_geq(weft_device_count(tu_cuda(0).type), 1);
    const struct weft_backend *b = weft_backend_get(tu_cuda(0).type);
    cr_assert_not_null(b);
    char name[256] = "";
    cr_expect_eq(b->device_name(0, name, sizeof name), 0);
    cr_expect_neq(name[0], '\0');
    const char *features = b->features();
    cr_expect(strstr(features, "sm_") == features && strstr(features, "; CUDA ") != NULL &&
                  strstr(features, "cuBLAS") != NULL,
              "%s", features);
}

Test(cuda, every_dtype_survives_a_round_trip)
{
    REQUIRE_GPU();
    weft_scope_push();
    int64_t shape[2] = {37, 53};
    for (size_t d = 0; d < sizeof all_dtypes / sizeof *all_dtypes; d++) {
        weft_tensor *t = random_cpu(2, shape, -100, 100, all_dtypes[d], 7 + d);
        assert_same(cuda(t), t, 0, 0, weft_dtype_name(all_dtypes[d]));
        weft_tensor *tt = weft_t(t); /* non-contiguous both ways */
        assert_same(cuda(tt), tt, 0, 0, "transposed");
        assert_same(weft_t(cuda(t)), tt, 0, 0, "transposed on the device");
    }
    weft_scope_pop();
}

Test(cuda, copy_converts_between_dtypes_on_the_device_as_the_cpu_does)
{
    REQUIRE_GPU();
    weft_scope_push();
    int64_t shape[2] = {19, 23};
    for (size_t s = 0; s < sizeof all_dtypes / sizeof *all_dtypes; s++) {
        weft_tensor *src = random_cpu(2, shape, -200, 200, all_dtypes[s], 11 + s);
        weft_tensor *dev = weft_t(cuda(src));
        for (size_t d = 0; d < sizeof all_dtypes / sizeof *all_dtypes; d++)
            assert_same(weft_to_dtype(dev, all_dtypes[d]),
                        weft_to_dtype(weft_t(src), all_dtypes[d]), 0, 0, "conversion");
    }
    weft_scope_pop();
}

Test(cuda, fill_arange_and_linspace_match_the_cpu)
{
    REQUIRE_GPU();
    weft_scope_push();
    int64_t shape[2] = {5, 7};
    for (size_t d = 0; d < sizeof all_dtypes / sizeof *all_dtypes; d++) {
        enum weft_dtype dt = all_dtypes[d];
        weft_device gpu = tu_cuda(0);
        assert_same(weft_full(2, shape, 3.5, dt, gpu), weft_full(2, shape, 3.5, dt, WEFT_CPU), 0,
                    0, "full");
        assert_same(weft_zeros(2, shape, dt, gpu), weft_zeros(2, shape, dt, WEFT_CPU), 0, 0,
                    "zeros");
        if (dt == WEFT_BOOL)
            continue;
        assert_same(weft_arange(-5, 40, 1.5, dt, gpu), weft_arange(-5, 40, 1.5, dt, WEFT_CPU), 0,
                    0, "arange");
        assert_same(weft_linspace(-1, 2, 17, dt, gpu), weft_linspace(-1, 2, 17, dt, WEFT_CPU), 0,
                    0, "linspace");
    }
    weft_scope_pop();
}

/* ---- with a GPU: elementwise ops ------------------------------------------------------------- */

typedef weft_tensor *(*unary_fn)(weft_tensor *);
static const struct {
    const char *name;
    unary_fn fn;
} unary_ops[] = {
#define UNARY_ENTRY(name) {#name, weft_##name},
    WEFT_UNARY_OPS(UNARY_ENTRY)
#undef UNARY_ENTRY
};

Test(cuda, unary_ops_match_the_cpu_on_strided_inputs)
{
    REQUIRE_GPU();
    weft_scope_push();
    int64_t shape[2] = {33, 65};
    const enum weft_dtype dts[] = {WEFT_F32, WEFT_F64, WEFT_F16, WEFT_I32};
    const double ranges[2][2] = {{-3, 3}, {0.1, 3}};
    for (size_t d = 0; d < sizeof dts / sizeof *dts; d++)
        for (int r = 0; r < 2; r++) {
            weft_tensor *x = weft_t(random_cpu(2, shape, ranges[r][0], ranges[r][1], dts[d], 3));
            weft_tensor *xc = cuda(x);
            double tol = dts[d] == WEFT_F64 ? 1e-13 : dts[d] == WEFT_F16 ? 1e-3 : 1e-6;
            for (size_t i = 0; i < sizeof unary_ops / sizeof *unary_ops; i++) {
                weft_tensor *want = unary_ops[i].fn(x);
                if (!want) { /* not defined for this dtype on the cpu either */
                    weft_error_clear();
                    continue;
                }
                assert_same(unary_ops[i].fn(xc), want, tol, tol, unary_ops[i].name);
            }
        }
    weft_scope_pop();
}

typedef weft_tensor *(*binary_fn)(weft_tensor *, weft_tensor *);
typedef weft_tensor *(*binary_scalar_fn)(weft_tensor *, double);
static const struct {
    const char *name;
    binary_fn fn;
    binary_scalar_fn scalar;
} binary_ops[] = {
#define BINARY_ENTRY(name) {#name, weft_##name, weft_##name##_scalar},
    WEFT_BINARY_OPS(BINARY_ENTRY)
#undef BINARY_ENTRY
};

Test(cuda, binary_ops_match_the_cpu_with_broadcasting_and_scalars)
{
    REQUIRE_GPU();
    weft_scope_push();
    int64_t sa[3] = {4, 1, 37}, sb[2] = {29, 37};
    const enum weft_dtype dts[] = {WEFT_F32, WEFT_F64, WEFT_BF16, WEFT_I64, WEFT_U8, WEFT_BOOL};
    for (size_t d = 0; d < sizeof dts / sizeof *dts; d++) {
        weft_tensor *a = random_cpu(3, sa, 0, 5, dts[d], 5);
        weft_tensor *b = random_cpu(2, sb, 1, 4, dts[d], 6);
        weft_tensor *bt = weft_t(weft_t(b)); /* same values, a view */
        weft_tensor *ac = cuda(a), *bc = cuda(bt);
        double tol = dts[d] == WEFT_F64 ? 1e-13 : dts[d] == WEFT_BF16 ? 1e-2 : 1e-6;
        for (size_t i = 0; i < sizeof binary_ops / sizeof *binary_ops; i++) {
            weft_tensor *want = binary_ops[i].fn(a, bt);
            if (!want) {
                weft_error_clear();
                continue;
            }
            assert_same(binary_ops[i].fn(ac, bc), want, tol, tol, binary_ops[i].name);
            assert_same(binary_ops[i].scalar(ac, 2), binary_ops[i].scalar(a, 2), tol, tol,
                        binary_ops[i].name);
        }
    }
    weft_scope_pop();
}

/* ---- with a GPU: random numbers ---------------------------------------------------------- */

Test(cuda, uniform_and_randint_are_bit_identical_to_the_cpu)
{
    REQUIRE_GPU();
    weft_scope_push();
    int64_t shape[2] = {31, 47};
    const enum weft_dtype floating[] = {WEFT_F16, WEFT_BF16, WEFT_F32, WEFT_F64};
    for (size_t d = 0; d < 4; d++) {
        weft_manual_seed(1234);
        weft_tensor *want = weft_rand(2, shape, floating[d], WEFT_CPU);
        weft_manual_seed(1234);
        assert_identical(weft_rand(2, shape, floating[d], tu_cuda(0)), want, "rand");
        weft_manual_seed(99);
        weft_tensor *wantn = weft_randn(2, shape, floating[d], WEFT_CPU);
        weft_manual_seed(99);
        double tol = floating[d] == WEFT_F64 ? 1e-12 : 1e-2;
        assert_same(weft_randn(2, shape, floating[d], tu_cuda(0)), wantn, tol, tol, "randn");
    }
    weft_manual_seed(7);
    weft_tensor *want = weft_randint(-50, 1000, 2, shape, WEFT_I64, WEFT_CPU);
    weft_manual_seed(7);
    assert_identical(weft_randint(-50, 1000, 2, shape, WEFT_I64, tu_cuda(0)), want, "randint");
    /* into a non-contiguous tensor: element order is row-major over the shape */
    weft_tensor *cpu_t = weft_t(weft_empty(2, shape, WEFT_F32, WEFT_CPU));
    weft_tensor *dev_t = weft_t(weft_empty(2, shape, WEFT_F32, tu_cuda(0)));
    weft_manual_seed(5);
    cr_assert_eq(weft_uniform_(cpu_t, -2, 3), 0);
    weft_manual_seed(5);
    cr_assert_eq(weft_uniform_(dev_t, -2, 3), 0);
    assert_identical(weft_contiguous(dev_t), weft_contiguous(cpu_t), "uniform_ on a transpose");
    weft_scope_pop();
}

/* ---- with a GPU: matmul --------------------------------------------------------------------- */

Test(cuda, matmul_matches_the_cpu_for_transposed_and_batched_operands)
{
    REQUIRE_GPU();
    weft_scope_push();
    const enum weft_dtype dts[] = {WEFT_F32, WEFT_F64, WEFT_F16};
    int64_t sa[3] = {3, 5, 7}, sb[2] = {4, 7}, sat[3] = {3, 7, 5};
    for (size_t d = 0; d < sizeof dts / sizeof *dts; d++) {
        weft_tensor *a = random_cpu(3, sa, -1, 1, dts[d], 21);
        weft_tensor *bt = weft_t(random_cpu(2, sb, -1, 1, dts[d], 22)); /* [7, 4], transposed */
        weft_tensor *at = weft_transpose(random_cpu(3, sat, -1, 1, dts[d], 23), 1, 2);
        double tol = dts[d] == WEFT_F64 ? 1e-12 : dts[d] == WEFT_F16 ? 1e-2 : 1e-5;
        assert_same(weft_matmul(cuda(a), weft_t(cuda(weft_t(bt)))), weft_matmul(a, bt), tol, tol,
                    "matmul");
        assert_same(weft_matmul(weft_transpose(cuda(weft_transpose(at, 1, 2)), 1, 2), cuda(bt)),
                    weft_matmul(at, bt), tol, tol, "matmul of a transposed batch");
    }
    int64_t se[2] = {3, 0}, sf[2] = {0, 2};
    weft_tensor *e = weft_zeros(2, se, WEFT_F32, tu_cuda(0));
    weft_tensor *f = weft_zeros(2, sf, WEFT_F32, tu_cuda(0));
    double zeros[6] = {0};
    tu_assert_close(weft_matmul(e, f), zeros, 6, 0, 0);
    weft_scope_pop();
}

/* ---- with a GPU: memory ---------------------------------------------------------------------- */

static struct weft_memory_stats cuda_stats(void)
{
    struct weft_memory_stats s = {.struct_size = sizeof s};
    cr_assert_eq(weft_memory_stats(tu_cuda(0), &s), 0, "%s", weft_error_message());
    return s;
}

Test(cuda, memory_is_cached_until_empty_cache)
{
    REQUIRE_GPU();
    weft_empty_cache(tu_cuda(0));
    struct weft_memory_stats before = cuda_stats();
    int64_t shape[1] = {1 << 20};
    weft_scope_push();
    for (int i = 0; i < 4; i++)
        cr_assert_not_null(weft_empty(1, shape, WEFT_F32, tu_cuda(0)));
    struct weft_memory_stats during = cuda_stats();
    cr_expect_eq(during.allocated_bytes - before.allocated_bytes, (uint64_t)16 << 20);
    weft_scope_pop();
    struct weft_memory_stats after = cuda_stats();
    cr_expect_eq(after.allocated_bytes, before.allocated_bytes);
    cr_expect_gt(after.reserved_bytes, before.reserved_bytes, "freed blocks stay cached");
    weft_empty_cache(tu_cuda(0));
    cr_expect_eq(cuda_stats().reserved_bytes, before.reserved_bytes);
    /* The backend's own table (its memory_summary method), not the generic one. */
    char *text = weft_memory_summary(tu_cuda(0), false);
    cr_assert_not_null(text, "%s", weft_error_message());
    cr_expect(strstr(text, "weft CUDA memory summary, device ID 0") != NULL, "%s", text);
    free(text);
}

Test(cuda, out_of_memory_is_reported_in_pytorchs_words)
{
    REQUIRE_GPU();
    int64_t shape[1] = {(int64_t)1 << 45}; /* 128 TiB of float */
    uint64_t ooms = cuda_stats().num_ooms;
    cr_expect_null(weft_empty(1, shape, WEFT_F32, tu_cuda(0)));
    tu_assert_error(WEFT_ERR_OUT_OF_MEMORY, "CUDA out of memory. Tried to allocate 131072.00 GiB");
    cr_expect_eq(cuda_stats().num_ooms, ooms + 1);
}

static void free_pinned(void *ctx, void *data)
{
    const struct weft_backend *b = ctx;
    b->host_free_pinned(data, 0);
}

Test(cuda, non_blocking_copies_from_pinned_memory_arrive)
{
    REQUIRE_GPU();
    weft_scope_push();
    const struct weft_backend *b = weft_backend_get(tu_cuda(0).type);
    int64_t n = 1 << 16;
    float *host = b->host_alloc_pinned((size_t)n * sizeof *host);
    cr_assert_not_null(host, "%s", weft_error_message());
    for (int64_t i = 0; i < n; i++)
        host[i] = (float)i;
    weft_tensor *h = weft_from_blob(host, 1, &n, NULL, WEFT_F32, WEFT_CPU, free_pinned, (void *)b);
    weft_tensor *d = weft_empty(1, &n, WEFT_F32, tu_cuda(0));
    cr_assert_eq(weft_copy_nonblocking_(d, h, true), 0, "%s", weft_error_message());
    cr_assert_eq(weft_synchronize(tu_cuda(0)), 0);
    assert_same(d, h, 0, 0, "pinned copy");
    weft_scope_pop();
}
