/* tests/test_cuda.c: the CUDA plugin, built only where the toolkit is found.
 *
 * Without a GPU (build machines, CI) the plugin must refuse to load and say why; the
 * GPU checks then skip, printing "cuda tests skipped: <reason>". With a GPU the refusal
 * checks skip and every cuda op is compared with the cpu on the same inputs
 * (non-contiguous and broadcast ones included); uniform and integer random numbers must
 * be bit-identical. The targeted cases below reach what conformance shapes do not: really
 * transposed and long-K matmul operands, TF32, operands and an output cuBLAS cannot take
 * as they are; 2^25 elements (grid-stride wrap) and 2^31 + 1 (64-bit offsets); a pinned
 * block freed during its async copy; the side copy stream's ordering; one step of each
 * optimizer; float-to-integer conversion of NaN, inf and out-of-range values.
 * Reductions, softmax, index ops, where/clamp, scatter_add, im2col/col2im and the pools
 * at the shapes that take the GPU's other paths run in tests/test_conformance.c (the
 * large size). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/hooks.h>

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

/* The cases sized for a GPU's memory and speed (2^25 and 2^31 elements): on weft's
 * emulated device (testkit/cuda_emu) they would take minutes, so they say so and skip;
 * bench/gpu-check.sh runs them on a GPU. */
#define REQUIRE_GPU_NOT_EMULATED()                                                            \
    do {                                                                                      \
        REQUIRE_GPU();                                                                        \
        if (weft_device_is_emulated(tu_cuda(0)))                                              \
            cr_skip_test("sized for a GPU: too slow on the emulated device");                 \
    } while (0)

#define REQUIRE_NO_GPU()                                                                      \
    do {                                                                                      \
        if (weft_plugin_load("cuda") == 0)                                                    \
            cr_skip_test("a CUDA device is present: the GPU checks run instead");             \
        weft_error_clear();                                                                   \
    } while (0)

/* ---- the suite's verdict --------------------------------------------------------------------- */

/* Without a GPU the GPU checks skip and only the refusal checks run: the suite then exits
 * with 77, meson's SKIP, once nothing failed, so that `meson test` and bench/gpu-check.sh
 * never read an OK as "the GPU checks passed". The runner sees every test's outcome here. */
static bool gpu_checks_skipped, any_failed;
static int tests_total, tests_skipped;

ReportHook(POST_ALL)(struct criterion_global_stats *stats)
{
    any_failed = stats->tests_failed > 0 || stats->tests_crashed > 0;
    for (struct criterion_suite_stats *s = stats->suites; s; s = s->next)
        for (struct criterion_test_stats *t = s->tests; t; t = t->next) {
            tests_total++;
            tests_skipped += t->test_status == CR_STATUS_SKIPPED;
            if (strcmp(t->test->name, "with_a_device_the_backend_describes_it") == 0)
                gpu_checks_skipped = t->test_status == CR_STATUS_SKIPPED;
        }
}

int main(int argc, char *argv[])
{
    struct criterion_test_set *tests = criterion_initialize();
    int result = 0;
    if (criterion_handle_args(argc, argv, true))
        result = !criterion_run_all_tests(tests);
    criterion_finalize(tests);
    /* Criterion's synthesis counts only the tests that ran ("Tested: 5 | Passing: 5"):
     * say how many skipped, so that a run without a GPU never reads as a pass. */
    fprintf(stderr, "cuda: %d of %d tests skipped%s\n", tests_skipped, tests_total,
            gpu_checks_skipped ? " (no GPU: the suite reports SKIP, exit 77)" : "");
    return result == 0 && !any_failed && gpu_checks_skipped ? 77 : result;
}

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
    cr_assert(x && y, "%s: out of memory", what);
    tu_read(a, x);
    tu_read(b, y);
    /* one message for all the elements: a wrong kernel over 16M elements would otherwise
     * send criterion's runner 16M of them */
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < n; i++) {
        bool ok = isnan(x[i]) || isnan(y[i]) ? isnan(x[i]) && isnan(y[i])
                  : x[i] == y[i] /* equal infinities too, whose difference is NaN */
                  || fabs(x[i] - y[i]) <= atol + rtol * fabs(y[i]);
        if (!ok && bad++ == 0)
            first = i;
    }
    cr_expect_eq(bad, 0, "%s: %lld of %lld elements differ, first [%lld]: cuda %.17g, cpu %.17g",
                 what, (long long)bad, (long long)n, (long long)first, first >= 0 ? x[first] : 0.0,
                 first >= 0 ? y[first] : 0.0);
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

/* ---- with a GPU: the backend ----------------------------------------------------------------- */

Test(cuda, with_a_device_the_backend_describes_it)
{
    REQUIRE_GPU();
    cr_expect_geq(weft_device_count(tu_cuda(0).type), 1);
    const struct weft_backend *b = weft_backend_get(tu_cuda(0).type);
    cr_assert_not_null(b);
    char name[256] = "";
    cr_expect_eq(b->device_name(b->context, 0, name, sizeof name), 0);
    cr_expect_neq(name[0], '\0');
    const char *features = b->features(b->context);
    /* the emulated build says so first: "emulated; sm_90; ..." */
    const char *arch = weft_device_is_emulated(tu_cuda(0)) ? features + strlen("emulated; ")
                                                           : features;
    cr_expect(strstr(features, "sm_") == arch && strstr(features, "; CUDA ") != NULL &&
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
#define UNARY_ENTRY(ID, name, ...) {#name, weft_##name},
    WEFT_OPS_UNARY(UNARY_ENTRY)
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
#define BINARY_ENTRY(ID, name, ...) {#name, weft_##name, weft_##name##_scalar},
    WEFT_OPS_BINARY(BINARY_ENTRY)
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

/* ---- with a GPU: random numbers -------------------------------------------------------------- */

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

/* ---- with a GPU: matmul ---------------------------------------------------------------------- */

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

/* weft_memory_snapshot lists the caching allocator's segments (the backend's memory_blocks):
 * a 4000-byte tensor is a 4096-byte block at the start of a 2 MiB small-pool segment whose
 * rest is free, and the history names the op that filled it. */
Test(cuda, the_snapshot_lists_the_caching_allocators_segments)
{
    REQUIRE_GPU();
    weft_empty_cache(tu_cuda(0));
    cr_assert_eq(weft_memory_record_history(true), 0, "%s", weft_error_message());
    weft_scope_push();
    int64_t shape[1] = {1000};
    cr_assert_not_null(weft_ones(1, shape, WEFT_F32, tu_cuda(0)), "%s", weft_error_message());
    char path[] = "/tmp/weft-cuda-snapshot.XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    cr_assert_eq(weft_memory_snapshot(tu_cuda(0), path), 0, "%s", weft_error_message());
    static char text[1 << 16];
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    text[fread(text, 1, sizeof text - 1, f)] = '\0';
    fclose(f);
    remove(path);
    static const char *const want[] = {
        "{\"device\": \"cuda:0\", \"history\": true, \"segments\": [",
        "\"total_size\": 2097152, \"allocated_size\": 4096, \"active_size\": 4096, "
        "\"requested_size\": 4000,",
        "\"segment_type\": \"small\"",
        "\"size\": 4096, \"requested_size\": 4000, \"state\": \"active_allocated\", \"op\": "
        "\"fill\", \"range\": \"\", \"shape\": [1000], \"dtype\": \"float32\"}",
        "\"size\": 2093056, \"requested_size\": 0, \"state\": \"inactive\"}"};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        cr_expect_not_null(strstr(text, want[i]), "no '%s' in\n%s", want[i], text);
    weft_scope_pop();
    weft_memory_record_history(false);
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

/* The caching allocator over the device's own cudaMalloc: when the device is full, it
 * gives back its cached segments and retries, as PyTorch's does. Device memory that can
 * be filled in a test: the emulated device's, set to 96 MiB here (ignored on a GPU, where
 * the case skips). */
Test(cuda, a_full_device_makes_the_allocator_free_its_cache_and_retry)
{
    setenv("WEFT_CUDA_EMU_MEMORY", "96M", 1); /* read when the emulator starts */
    REQUIRE_GPU();
    if (!weft_device_is_emulated(tu_cuda(0)))
        cr_skip_test("fills the device: run on the emulated one (96 MiB)");
    weft_empty_cache(tu_cuda(0));
    struct weft_memory_stats before = cuda_stats();
    int64_t n40 = (int64_t)10 << 20, n50 = (int64_t)25 << 19; /* 40 and 50 MiB of float */
    weft_tensor *a = weft_empty(1, &n40, WEFT_F32, tu_cuda(0));
    weft_tensor *b = weft_empty(1, &n40, WEFT_F32, tu_cuda(0));
    cr_assert(a && b, "%s", weft_error_message());
    weft_tensor_release(a);
    weft_tensor_release(b);
    cr_expect_eq(cuda_stats().reserved_bytes - before.reserved_bytes, (uint64_t)80 << 20,
                 "two 40 MiB segments cached");
    /* 50 MiB fits no cached block and not beside them: the cache goes back, then it fits */
    weft_tensor *c = weft_full(1, &n50, 2, WEFT_F32, tu_cuda(0));
    cr_assert_not_null(c, "%s", weft_error_message());
    struct weft_memory_stats after = cuda_stats();
    cr_expect_eq(after.num_alloc_retries, before.num_alloc_retries + 1);
    cr_expect_eq(after.reserved_bytes - before.reserved_bytes, (uint64_t)50 << 20);
    double v = 0;
    weft_tensor *last = weft_narrow(c, 0, n50 - 1, 1);
    tu_read(last, &v);
    weft_tensor_release(last);
    cr_expect_eq(v, 2);
    /* and a request the device cannot hold even empty: PyTorch's out-of-memory error */
    int64_t n60 = (int64_t)15 << 20;
    cr_expect_null(weft_empty(1, &n60, WEFT_F32, tu_cuda(0)));
    tu_assert_error(WEFT_ERR_OUT_OF_MEMORY, "CUDA out of memory. Tried to allocate 60.00 MiB");
    weft_tensor_release(c);
}

static void free_pinned(void *ctx, void *data)
{
    const struct weft_backend *b = ctx;
    b->host_free_pinned(b->context, data, 0);
}

Test(cuda, non_blocking_copies_from_pinned_memory_arrive)
{
    REQUIRE_GPU();
    weft_scope_push();
    const struct weft_backend *b = weft_backend_get(tu_cuda(0).type);
    int64_t n = 1 << 16;
    float *host = b->host_alloc_pinned(b->context, (size_t)n * sizeof *host);
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

/* ---- with a GPU: matmul's other paths -------------------------------------------------------- */

/* x [rows, cols] stored column by column: a real transpose (strides {1, rows}). */
static weft_tensor *stored_transposed(int64_t rows, int64_t cols, enum weft_dtype dt, uint64_t seed)
{
    int64_t s[2] = {cols, rows};
    return weft_t(random_cpu(2, s, -1, 1, dt, seed));
}

Test(cuda, matmul_reads_really_transposed_and_long_k_operands_as_the_cpu_does)
{
    REQUIRE_GPU();
    weft_scope_push();
    const enum weft_dtype dts[] = {WEFT_F32, WEFT_F64, WEFT_F16, WEFT_BF16};
    const int64_t ks[] = {7, 257, 1000};
    for (size_t d = 0; d < sizeof dts / sizeof *dts; d++)
        for (size_t k = 0; k < sizeof ks / sizeof *ks; k++) {
            int64_t sa[2] = {33, ks[k]};
            weft_tensor *a = random_cpu(2, sa, -1, 1, dts[d], 30 + k);
            weft_tensor *bt = stored_transposed(ks[k], 45, dts[d], 31 + k); /* [K, 45] */
            cr_assert(!weft_tensor_is_contiguous(bt));
            double tol = dts[d] == WEFT_F64 ? 1e-12
                         : dts[d] == WEFT_F32 ? 1e-5 * (double)ks[k]
                                              : 2e-2 * (double)ks[k] / 16;
            weft_tensor *want = weft_matmul(a, bt);
            /* the transposed view goes to the device as it is: both strides kept */
            weft_tensor *btc = cuda(bt);
            cr_assert(!weft_tensor_is_contiguous(btc), "the device copy kept the transpose");
            assert_same(weft_matmul(cuda(a), btc), want, tol, tol, "A @ B^T-stored");
            assert_same(weft_matmul(cuda(weft_t(bt)), weft_t(cuda(a))), weft_t(want), tol, tol,
                        "B^T-stored^T @ A^T");
        }
    weft_scope_pop();
}

Test(cuda, matmul_copes_with_operands_that_need_contiguous_and_an_output_that_does_not_fit_cublas)
{
    REQUIRE_GPU();
    weft_scope_push();
    /* a: every other column of [20, 2K] (column stride 2); b: a [K, 1] column broadcast
     * to [K, 9] (column stride 0): neither has a unit stride cuBLAS can take. */
    const int64_t K = 65;
    int64_t wide[2] = {20, 2 * K}, col[2] = {K, 1}, bs[2] = {K, 9};
    int64_t ashape[2] = {20, K}, astride[2] = {2 * K, 2};
    weft_tensor *aw = random_cpu(2, wide, -1, 1, WEFT_F32, 40);
    weft_tensor *bc = random_cpu(2, col, -1, 1, WEFT_F32, 41);
    weft_tensor *a = weft_as_strided(aw, 2, ashape, astride, 1);
    weft_tensor *b = weft_expand(bc, 2, bs);
    weft_tensor *ad = weft_as_strided(cuda(aw), 2, ashape, astride, 1);
    weft_tensor *bd = weft_expand(cuda(bc), 2, bs);
    cr_assert_not_null(ad);
    cr_assert_not_null(bd);
    weft_tensor *want = weft_matmul(a, b);
    assert_same(weft_matmul(ad, bd), want, 1e-5, 1e-5, "strided and broadcast operands");
    /* the kernel itself into a transposed output (rows not unit-stride): a temporary,
     * then the COPY kernel; the values land where the view says */
    int64_t os[3] = {1, 9, 20};
    weft_tensor *out_t = weft_transpose(weft_empty(3, os, WEFT_F32, tu_cuda(0)), 1, 2);
    struct weft_op_call call = {.op = WEFT_OP_MATMUL, .nin = 2, .nout = 1,
                                .in = {weft_unsqueeze(ad, 0), weft_unsqueeze(bd, 0)},
                                .out = {out_t}};
    cr_assert_eq(weft_dispatch(&call), 0, "%s", weft_error_message());
    assert_same(weft_squeeze_dim(out_t, 0), want, 1e-5, 1e-5, "into a transposed output");
    weft_scope_pop();
}

Test(cuda, matmul_with_tf32_allowed_stays_within_tf32_error_and_off_again_is_exact_float)
{
    REQUIRE_GPU();
    weft_scope_push();
    int64_t sa[2] = {128, 1024}, sb[2] = {1024, 96};
    weft_tensor *a = random_cpu(2, sa, -1, 1, WEFT_F32, 50);
    weft_tensor *b = random_cpu(2, sb, -1, 1, WEFT_F32, 51);
    weft_tensor *want = weft_matmul(a, b);
    weft_set_allow_tf32(true);
    weft_tensor *tf32 = weft_matmul(cuda(a), cuda(b));
    weft_set_allow_tf32(false);
    /* tf32 keeps 10 mantissa bits per operand: about 1e-3 relative per product, sums of
     * 1024 products of about 0.33 */
    assert_same(tf32, want, 1e-2, 5e-2, "tf32");
    assert_same(weft_matmul(cuda(a), cuda(b)), want, 1e-5, 1e-4, "float32 again");
    weft_scope_pop();
}

/* ---- with a GPU: sizes past the grid and past 2^31 ------------------------------------------- */

Test(cuda, ops_on_2_pow_25_elements_wrap_their_grid_stride_loops_and_match_the_cpu)
{
    REQUIRE_GPU_NOT_EMULATED();
    weft_scope_push();
    /* more than the 65536 x 256 threads of one grid, and not a multiple of them */
    int64_t n = (int64_t)4097 * 8191; /* 33,558,527: past 2^25, and odd */
    weft_tensor *x = random_cpu(1, &n, -2, 2, WEFT_F32, 60);
    weft_tensor *xd = cuda(x);
    assert_same(weft_exp(xd), weft_exp(x), 1e-6, 1e-6, "exp");
    assert_same(weft_add(xd, xd), weft_add(x, x), 0, 0, "add");
    assert_same(weft_sum(xd, 0, NULL, false), weft_sum(x, 0, NULL, false), 1e-4, 1e-2, "sum");
    assert_same(weft_to_dtype(xd, WEFT_F16), weft_to_dtype(x, WEFT_F16), 0, 0, "to float16");
    /* a transposed copy and row reductions over the same count */
    const int64_t mshape[2] = {4097, 8191};
    weft_tensor *m = weft_view(x, 2, mshape), *md = weft_view(xd, 2, mshape);
    assert_same(weft_contiguous(weft_t(md)), weft_contiguous(weft_t(m)), 0, 0, "transpose");
    int dim = 1;
    assert_same(weft_sum(weft_t(md), 1, &dim, false), weft_sum(weft_t(m), 1, &dim, false), 1e-4,
                1e-3, "sum of a transpose");
    weft_scope_pop();
}

Test(cuda, a_uint8_tensor_of_2_pow_31_plus_1_elements_is_filled_copied_converted_and_summed)
{
    REQUIRE_GPU_NOT_EMULATED();
    weft_scope_push();
    int64_t n = ((int64_t)1 << 31) + 1, one = 1;
    weft_tensor *x = weft_full(1, &n, 1, WEFT_U8, tu_cuda(0));
    cr_assert_not_null(x, "2 GiB on the device: %s", weft_error_message());
    /* the last element, at an offset past 2^31 */
    weft_tensor *last = weft_narrow(x, 0, n - 1, 1);
    cr_assert_eq(weft_copy_(last, weft_full(1, &one, 7, WEFT_U8, tu_cuda(0))), 0, "%s",
                 weft_error_message());
    double v = 0;
    tu_read(last, &v);
    cr_expect_eq(v, 7);
    weft_tensor *s = weft_sum(x, 0, NULL, false);
    tu_read(s, &v);
    cr_expect_eq(v, (double)(n + 6), "sum %.0f", v);
    weft_scope_push(); /* the clone's 2 GiB go back before the conversion's */
    weft_tensor *y = weft_clone(x);
    tu_read(weft_narrow(y, 0, n - 1, 1), &v);
    cr_expect_eq(v, 7, "clone's last element");
    tu_read(weft_narrow(y, 0, n - 2, 1), &v);
    cr_expect_eq(v, 1, "clone's next-to-last element");
    weft_scope_pop();
    /* the conversion kernel over every element: bool of a nonzero uint8 is true */
    weft_tensor *b = weft_to_dtype(x, WEFT_BOOL);
    cr_assert_not_null(b, "%s", weft_error_message());
    tu_read(weft_sum(b, 0, NULL, false), &v);
    cr_expect_eq(v, (double)n);
    weft_scope_pop();
    weft_empty_cache(tu_cuda(0));
}

/* ---- with a GPU: copies that must wait ------------------------------------------------------- */

/* A cpu tensor over a block of the backend's pinned memory, freed back to it. */
static weft_tensor *pinned_tensor(const struct weft_backend *b, int64_t n)
{
    float *host = b->host_alloc_pinned(b->context, (size_t)n * sizeof *host);
    cr_assert_not_null(host, "%s", weft_error_message());
    return weft_from_blob(host, 1, &n, NULL, WEFT_F32, WEFT_CPU, free_pinned, (void *)b);
}

Test(cuda, a_pinned_block_released_during_its_async_copy_is_not_reused_before_the_copy_ends)
{
    REQUIRE_GPU();
    /* no scope: h is released by hand while its copy runs */
    const struct weft_backend *b = weft_backend_get(tu_cuda(0).type);
    /* 256 MiB: the copy takes tens of milliseconds on a GPU; the emulated copy runs at its
     * turn, after the writes below, at any size */
    int64_t n = weft_device_is_emulated(tu_cuda(0)) ? (int64_t)1 << 16 : (int64_t)64 << 20;
    weft_tensor *h = pinned_tensor(b, n);
    float *p = weft_tensor_data(h);
    for (int64_t i = 0; i < n; i++)
        p[i] = (float)(i % 1000);
    weft_tensor *d = weft_empty(1, &n, WEFT_F32, tu_cuda(0));
    cr_assert_eq(weft_copy_nonblocking_(d, h, true), 0, "%s", weft_error_message());
    weft_tensor_release(h); /* the block goes back while the copy still reads it */
    /* a block of the same size now: if it were the one in flight, these writes would
     * reach the device copy */
    weft_tensor *h2 = pinned_tensor(b, n);
    memset(weft_tensor_data(h2), 0, (size_t)n * sizeof(float));
    cr_assert_eq(weft_synchronize(tu_cuda(0)), 0);
    float *back = malloc((size_t)n * sizeof *back);
    cr_assert_eq(weft_tensor_read(d, back, (size_t)n * sizeof *back), 0);
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; i++)
        wrong += back[i] != (float)(i % 1000);
    cr_expect_eq(wrong, 0, "%lld elements changed under the copy", (long long)wrong);
    free(back);
    weft_tensor_release(h2);
    weft_tensor_release(d);
}

Test(cuda, a_side_copy_waits_for_queued_work_and_later_work_waits_for_it)
{
    REQUIRE_GPU();
    const struct weft_backend *b = weft_backend_get(tu_cuda(0).type);
    /* On a GPU, 64 MiB so that the copy overlaps the fills. The emulated device runs the
     * streams in an order drawn at each host wait: a copy that missed its wait lands
     * before the fills in most draws, so there the case runs small, several times. */
    bool emulated = weft_device_is_emulated(tu_cuda(0));
    int64_t n = emulated ? 4096 : (int64_t)16 << 20;
    for (int round = 0; round < (emulated ? 6 : 1); round++) {
        weft_scope_push();
        weft_tensor *h = pinned_tensor(b, n);
        float *p = weft_tensor_data(h);
        for (int64_t i = 0; i < n; i++)
            p[i] = (float)((i + round) % 777);
        weft_tensor *d = weft_empty(1, &n, WEFT_F32, tu_cuda(0));
        /* work on the current stream that writes d, queued before the side copy: the copy
         * must land after it (else the fill would overwrite the copied values) */
        weft_tensor *minus_one = weft_full(1, &n, -1, WEFT_F32, tu_cuda(0));
        for (int i = 0; i < 8; i++)
            cr_assert_eq(weft_copy_(d, minus_one), 0, "%s", weft_error_message());
        int queued = weft_copy_side(d, h);
        cr_assert_geq(queued, 0, "%s", weft_error_message());
        cr_expect_eq(queued, 1, "cuda has a side queue");
        cr_assert_eq(weft_wait_side(tu_cuda(0)), 0);
        /* work queued after wait_side sees the copied values */
        weft_tensor *y = weft_add_scalar(d, 1);
        assert_same(y, weft_add_scalar(h, 1), 0, 0, "after the side copy");
        weft_scope_pop();
    }
}

/* Between two devices the copy runs on the destination's stream after the source's queued
 * work (which computes x), and later work on the source's stream (an in-place write to x)
 * waits until the copy has read x: PyTorch's two-way barrier (backend.c). */
Test(cuda, a_copy_between_two_devices_waits_for_its_source_and_holds_it_back)
{
    REQUIRE_GPU();
    if (weft_device_count(tu_cuda(0).type) < 2)
        cr_skip_test("needs two CUDA devices");
    weft_scope_push();
    int64_t n = 5000;
    weft_tensor *h = random_cpu(1, &n, -1, 1, WEFT_F32, 80);
    weft_tensor *x = weft_exp(cuda(h)); /* queued on cuda:0 */
    weft_tensor *y = weft_to_device(x, tu_cuda(1));
    cr_assert_not_null(y, "%s", weft_error_message());
    cr_assert_not_null(weft_add_scalar_(x, 100), "%s", weft_error_message()); /* after the copy */
    assert_same(y, weft_exp(h), 1e-6, 1e-6, "cuda:0 -> cuda:1");
    assert_same(x, weft_add_scalar(weft_exp(h), 100), 1e-5, 1e-5, "x afterwards");
    /* and back, from a transposed view */
    int64_t s[2] = {50, 100};
    weft_tensor *m = random_cpu(2, s, -1, 1, WEFT_F64, 81);
    weft_tensor *back = weft_to_device(weft_t(weft_to_device(m, tu_cuda(1))), tu_cuda(0));
    assert_same(back, weft_t(m), 0, 0, "cuda:1 -> cuda:0, transposed");
    weft_scope_pop();
}

/* ---- with a GPU: one step of each optimizer -------------------------------------------------- */

Test(cuda, one_step_of_each_optimizer_matches_the_cpu)
{
    REQUIRE_GPU();
    const struct {
        const char *name;
        const char *keys[6][2];
    } cases[] = {
        {"sgd", {{"lr", "0.1"}, {"momentum", "0.9"}, {"nesterov", "true"},
                 {"weight_decay", "0.01"}}},
        {"adam", {{"lr", "0.01"}, {"weight_decay", "0.1"}}},
        {"adam", {{"lr", "0.01"}, {"amsgrad", "true"}}},
        {"adamw", {{"lr", "0.01"}, {"weight_decay", "0.1"}}},
        {"rmsprop", {{"lr", "0.01"}, {"momentum", "0.5"}, {"centered", "true"},
                     {"weight_decay", "0.01"}}},
    };
    int64_t shape[2] = {300, 257}; /* more than one block of the fused kernels */
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        weft_scope_push();
        weft_tensor *p[2], *g = random_cpu(2, shape, -1, 1, WEFT_F32, 71);
        p[0] = weft_clone(random_cpu(2, shape, -1, 1, WEFT_F32, 70));
        p[1] = weft_clone(cuda(p[0]));
        weft_optimizer *opt[2];
        for (int d = 0; d < 2; d++) {
            cr_assert_eq(weft_requires_grad_(p[d], true), 0);
            cr_assert_eq(weft_set_grad(p[d], d ? cuda(g) : g), 0, "%s", weft_error_message());
            weft_options *o = weft_options_new("optim", "test_cuda");
            for (int k = 0; k < 6 && cases[c].keys[k][0]; k++)
                weft_options_set(o, cases[c].keys[k][0], cases[c].keys[k][1]);
            opt[d] = weft_optimizer_create(cases[c].name, 1, &p[d], o);
            cr_assert_not_null(opt[d], "%s: %s", cases[c].name, weft_error_message());
            weft_options_free(o);
        }
        for (int step = 0; step < 2; step++) /* the second step reads the state */
            for (int d = 0; d < 2; d++)
                cr_assert_eq(weft_optimizer_step(opt[d]), 0, "%s", weft_error_message());
        assert_same(p[1], p[0], 1e-5, 1e-6, cases[c].name);
        for (int d = 0; d < 2; d++)
            weft_optimizer_free(opt[d]);
        weft_scope_pop();
    }
}

/* ---- with a GPU: float to integer conversions follow PyTorch on CUDA ------------------------- */

Test(cuda, float_to_integer_conversions_of_nan_inf_and_out_of_range_values_follow_pytorch_on_cuda)
{
    REQUIRE_GPU();
    weft_scope_push();
    /* PyTorch on CUDA: the hardware's saturating conversion (NaN -> 0); uint8 through
     * int64, int8/int16/int32 through int32, then wrapped (weft/tensor.h, weft_to_dtype). */
    const double in[] = {NAN, INFINITY, -INFINITY, 300, -300, -3, 3e9, -3e9, 1e20, 255.9};
    const double u8[] = {0, 255, 0, 44, 212, 253, 0, 0, 255, 255};
    const double i8[] = {0, -1, 0, 44, -44, -3, -1, 0, -1, -1};
    const double i16[] = {0, -1, 0, 300, -300, -3, -1, 0, -1, 255};
    const double i32[] = {0, 2147483647, -2147483648.0, 300, -300, -3, 2147483647, -2147483648.0,
                          2147483647, 255};
    const double i64[] = {0, 9223372036854775807.0, -9223372036854775808.0, 300, -300, -3, 3e9,
                          -3e9, 9223372036854775807.0, 255};
    int64_t n = sizeof in / sizeof *in;
    const enum weft_dtype from[] = {WEFT_F32, WEFT_F64};
    for (int f = 0; f < 2; f++) {
        weft_tensor *x = cuda(tu_tensor(1, &n, in, from[f]));
        tu_assert_close(weft_to_dtype(x, WEFT_U8), u8, n, 0, 0);
        tu_assert_close(weft_to_dtype(x, WEFT_I8), i8, n, 0, 0);
        tu_assert_close(weft_to_dtype(x, WEFT_I16), i16, n, 0, 0);
        tu_assert_close(weft_to_dtype(x, WEFT_I32), i32, n, 0, 0);
        tu_assert_close(weft_to_dtype(x, WEFT_I64), i64, n, 0, 0);
    }
    weft_scope_pop();
}
