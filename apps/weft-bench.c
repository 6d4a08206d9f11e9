/* apps/weft-bench.c: prints one figure per line, "name value unit", each the median of
 * several repeats. Figures that have a roofline or a reference (memcpy, direct cblas)
 * print it on the next line so the two come from the same run.
 *
 *   weft-bench [--filter TEXT] [--repeats N] [--threads N] [--list]
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <weft.h>
#include <weft/backend.h>

struct options {
    const char *filter;
    int repeats;
    int threads;
    bool list;
};

static struct options opt = {.repeats = 7};

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median wall time in seconds of `repeats` runs of fn(ctx) (after one warm-up run). */
static double time_median(void (*fn)(void *), void *ctx, int repeats)
{
    double samples[64];
    if (repeats > 64)
        repeats = 64;
    fn(ctx);
    for (int r = 0; r < repeats; r++) {
        double t0 = now_seconds();
        fn(ctx);
        samples[r] = now_seconds() - t0;
    }
    qsort(samples, (size_t)repeats, sizeof *samples, compare_double);
    return samples[repeats / 2];
}

static void die_on_error(const char *what)
{
    if (weft_error_code() == WEFT_OK)
        return;
    fprintf(stderr, "weft-bench: %s: %s\n", what, weft_error_message());
    exit(1);
}

static void report(const char *name, double value, const char *unit)
{
    printf("%-32s %10.3f %s\n", name, value, unit);
    fflush(stdout);
}

static bool selected(const char *name)
{
    if (opt.list) {
        printf("%s\n", name);
        return false;
    }
    return !opt.filter || strstr(name, opt.filter);
}

/* ---- memory-bound copies --------------------------------------------------------------- */

struct copy_ctx {
    weft_tensor *src;
    void *dst_raw;
    const void *src_raw;
    size_t nbytes;
};

static void run_contiguous(void *p)
{
    struct copy_ctx *c = p;
    weft_tensor_release(weft_contiguous(c->src));
}

static void run_clone(void *p)
{
    struct copy_ctx *c = p;
    weft_tensor_release(weft_clone(c->src));
}

static void run_memcpy(void *p)
{
    struct copy_ctx *c = p;
    memcpy(c->dst_raw, c->src_raw, c->nbytes);
}

static void bench_copies(void)
{
    const int64_t n = 4096;
    const int64_t shape[2] = {n, n};
    weft_tensor *x = weft_rand(2, shape, WEFT_F32, WEFT_CPU);
    weft_tensor *xt = weft_t(x);
    die_on_error("setting up copies");
    double bytes = 2.0 * (double)(n * n) * sizeof(float); /* read + write */
    struct copy_ctx c = {.src = xt};
    if (selected("transpose_contiguous_4096")) {
        double s = time_median(run_contiguous, &c, opt.repeats);
        die_on_error("contiguous");
        report("transpose_contiguous_4096", bytes / s / 1e9, "GB/s");
    }
    c.src = x;
    if (selected("clone_4096")) {
        double s = time_median(run_clone, &c, opt.repeats);
        die_on_error("clone");
        report("clone_4096", bytes / s / 1e9, "GB/s");
    }
    if (selected("memcpy_4096")) {
        c.nbytes = (size_t)(n * n) * sizeof(float);
        c.src_raw = weft_tensor_data(x);
        c.dst_raw = malloc(c.nbytes);
        if (!c.dst_raw) {
            fprintf(stderr, "weft-bench: out of memory\n");
            exit(1);
        }
        memset(c.dst_raw, 0, c.nbytes);
        double s = time_median(run_memcpy, &c, opt.repeats);
        report("memcpy_4096", bytes / s / 1e9, "GB/s");
        free(c.dst_raw);
    }
    weft_tensor_release(xt);
    weft_tensor_release(x);
}

/* ---- matmul ------------------------------------------------------------------------------ */

struct matmul_ctx {
    weft_tensor *a, *b;
    int64_t n;
    float *out;
};

static void run_weft_matmul(void *p)
{
    struct matmul_ctx *c = p;
    weft_tensor_release(weft_matmul(c->a, c->b));
}

static void run_cblas(void *p)
{
    struct matmul_ctx *c = p;
    int n = (int)c->n;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f,
                weft_tensor_data(c->a), n, weft_tensor_data(c->b), n, 0.0f, c->out, n);
}

static void bench_matmul(int64_t n)
{
    char name_weft[64], name_blas[64];
    snprintf(name_weft, sizeof name_weft, "matmul_%lld", (long long)n);
    snprintf(name_blas, sizeof name_blas, "cblas_sgemm_%lld", (long long)n);
    bool want_weft = selected(name_weft), want_blas = selected(name_blas);
    if (!want_weft && !want_blas)
        return;
    const int64_t shape[2] = {n, n};
    struct matmul_ctx c = {.n = n};
    c.a = weft_rand(2, shape, WEFT_F32, WEFT_CPU);
    c.b = weft_rand(2, shape, WEFT_F32, WEFT_CPU);
    die_on_error("setting up matmul");
    double flops = 2.0 * (double)n * (double)n * (double)n;
    int repeats = n >= 2048 ? (opt.repeats < 5 ? opt.repeats : 5) : opt.repeats;
    if (want_weft) {
        double s = time_median(run_weft_matmul, &c, repeats);
        die_on_error("matmul");
        report(name_weft, flops / s / 1e9, "GFLOP/s");
    }
    if (want_blas) {
        c.out = malloc((size_t)(n * n) * sizeof(float));
        if (!c.out)
            exit(1);
        double s = time_median(run_cblas, &c, repeats);
        report(name_blas, flops / s / 1e9, "GFLOP/s");
        free(c.out);
    }
    weft_tensor_release(c.a);
    weft_tensor_release(c.b);
}

/* ---- per-call overhead ------------------------------------------------------------------ */

enum tiny_kind { TINY_VIEW, TINY_DETACH, TINY_ADD };

struct tiny_ctx {
    enum tiny_kind kind;
    weft_tensor *a, *b;
    int calls;
};

static void run_tiny(void *p)
{
    struct tiny_ctx *c = p;
    static const int64_t shape[2] = {4, 4};
    for (int i = 0; i < c->calls; i++) {
        weft_tensor *r = NULL;
        switch (c->kind) {
        case TINY_VIEW: r = weft_view(c->a, 2, shape); break;
        case TINY_DETACH: r = weft_detach(c->a); break;
        case TINY_ADD: r = weft_add(c->a, c->b); break;
        }
        weft_tensor_release(r);
    }
}

static void bench_tiny(void)
{
    static const char *const names[] = {"view_16", "detach_16", "add_16"};
    const int64_t shape[1] = {16};
    struct tiny_ctx c = {.calls = 200000};
    c.a = weft_rand(1, shape, WEFT_F32, WEFT_CPU);
    c.b = weft_rand(1, shape, WEFT_F32, WEFT_CPU);
    die_on_error("setting up tiny ops");
    for (int k = TINY_VIEW; k <= TINY_ADD; k++) {
        if (!selected(names[k]))
            continue;
        c.kind = (enum tiny_kind)k;
        double s = time_median(run_tiny, &c, opt.repeats);
        die_on_error(names[k]);
        report(names[k], s / c.calls * 1e6, "us/call");
    }
    weft_tensor_release(c.a);
    weft_tensor_release(c.b);
}

/* ------------------------------------------------------------------------------------------ */

static void usage(FILE *f)
{
    fprintf(f, "usage: weft-bench [--filter TEXT] [--repeats N] [--threads N] [--list]\n"
               "Prints \"name value unit\" per line; each value is the median of N runs.\n");
}

static int parse_args(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            exit(0);
        } else if (!strcmp(a, "--list")) {
            opt.list = true;
        } else if (!strcmp(a, "--filter") && i + 1 < argc) {
            opt.filter = argv[++i];
        } else if (!strcmp(a, "--repeats") && i + 1 < argc) {
            opt.repeats = atoi(argv[++i]);
            if (opt.repeats < 1 || opt.repeats > 64) {
                fprintf(stderr, "weft-bench: --repeats must be 1..64\n");
                return 2;
            }
        } else if (!strcmp(a, "--threads") && i + 1 < argc) {
            opt.threads = atoi(argv[++i]);
            if (opt.threads < 1) {
                fprintf(stderr, "weft-bench: --threads must be at least 1\n");
                return 2;
            }
        } else {
            fprintf(stderr, "weft-bench: unknown argument '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    int rc = parse_args(argc, argv);
    if (rc)
        return rc;
    if (weft_runtime_init(NULL, NULL) != 0) {
        fprintf(stderr, "weft-bench: %s\n", weft_error_message());
        return 2;
    }
    if (opt.threads > 0 && weft_set_num_threads(opt.threads) != 0) {
        fprintf(stderr, "weft-bench: %s\n", weft_error_message());
        return 2;
    }
    if (!opt.list)
        printf("# weft %s, %d threads, median of %d\n", weft_version(), weft_get_num_threads(),
               opt.repeats);
    bench_copies();
    bench_matmul(1024);
    bench_matmul(2048);
    bench_tiny();
    return 0;
}
