/* bench/weft-bench.c: prints one figure per line, "name value unit", each the median of
 * several repeats. Figures that have a roofline or a reference (memcpy, direct cblas)
 * print it on the next line so the two come from the same run.
 *
 *   weft-bench [--filter TEXT] [--repeats N] [--threads N] [--list]
 *   weft-bench --config CONFIG.ini [--batches N] [--repeats N]
 * `--filter sparse_` runs the sparse group alone (bench/bench_sparse.c), `--filter augment_`
 * the loader with data augmentation (bench/bench_augment.c); --config the loader of a
 * config's [data] alone, N batches per repeat (bench/bench_loader_config.c).
 */
#include <cblas.h>
#ifdef WEFT_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#endif
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <weft.h>
#include <weft/train.h>
#include <weft/backend.h>

#include "../apps/app_version.h"
#include "../plugins/cpu/cpu_load.h"

struct options {
    const char *filter;
    const char *config; /* --config: the loader of its [data] only */
    int batches;
    int repeats;
    int threads;
    bool list;
};

static struct options opt = {.repeats = 7, .batches = 100};

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

/* ---- dtype conversions: what autocast adds around every low-precision op ------------- */

struct convert_ctx {
    weft_tensor *src;
    enum weft_dtype to;
};

static void run_convert(void *p)
{
    struct convert_ctx *c = p;
    weft_tensor_release(weft_to_dtype(c->src, c->to));
}

/* Contiguous 1M-element conversions, in GB/s of bytes read and written. */
static void bench_conversions(void)
{
    static const struct {
        const char *name;
        enum weft_dtype from, to;
    } cases[] = {
        {"convert_f32_to_bf16_1M", WEFT_F32, WEFT_BF16},
        {"convert_bf16_to_f32_1M", WEFT_BF16, WEFT_F32},
        {"convert_f32_to_f16_1M", WEFT_F32, WEFT_F16},
        {"convert_f16_to_f32_1M", WEFT_F16, WEFT_F32},
    };
    const int64_t n = (int64_t)1 << 20;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        if (!selected(cases[i].name))
            continue;
        weft_tensor *x = weft_randn(1, &n, WEFT_F32, WEFT_CPU);
        weft_tensor *src = x ? weft_to_dtype(x, cases[i].from) : NULL;
        die_on_error("setting up a conversion");
        struct convert_ctx c = {src, cases[i].to};
        double s = time_median(run_convert, &c, opt.repeats);
        die_on_error(cases[i].name);
        double bytes = (double)n * (double)(weft_dtype_size(cases[i].from) +
                                            weft_dtype_size(cases[i].to));
        report(cases[i].name, bytes / s / 1e9, "GB/s");
        weft_tensor_release(src);
        weft_tensor_release(x);
    }
}

/* ---- matmul ------------------------------------------------------------------------------ */

/* weft_matmul of [M, K] x [K, N] beside the direct library calls it may make: OpenBLAS's
 * cblas_sgemm and, where weft-bench was built with oneDNN, dnnl_sgemm. A transposed
 * operand (trans_a / trans_b) is a transposed view, as Linear's W^T and its gradients. */
struct matmul_ctx {
    int M, N, K;
    bool trans_a, trans_b;
    weft_tensor *a, *b; /* the operands as weft sees them (views when transposed) */
    const float *A, *B; /* their storage */
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
    cblas_sgemm(CblasRowMajor, c->trans_a ? CblasTrans : CblasNoTrans,
                c->trans_b ? CblasTrans : CblasNoTrans, c->M, c->N, c->K, 1.0f, c->A,
                c->trans_a ? c->M : c->K, c->B, c->trans_b ? c->K : c->N, 0.0f, c->out, c->N);
}

#ifdef WEFT_HAVE_ONEDNN
static void run_dnnl(void *p)
{
    struct matmul_ctx *c = p;
    dnnl_sgemm(c->trans_a ? 'T' : 'N', c->trans_b ? 'T' : 'N', c->M, c->N, c->K, 1.0f, c->A,
               c->trans_a ? c->M : c->K, c->B, c->trans_b ? c->K : c->N, 0.0f, c->out, c->N);
}
#endif

/* A [rows, cols] operand, stored transposed when asked. */
static weft_tensor *matmul_operand(int rows, int cols, bool transposed, const float **data)
{
    const int64_t shape[2] = {transposed ? cols : rows, transposed ? rows : cols};
    weft_tensor *t = weft_rand(2, shape, WEFT_F32, WEFT_CPU);
    if (!t)
        return NULL;
    *data = weft_tensor_data(t);
    if (!transposed)
        return t;
    weft_tensor *v = weft_t(t);
    weft_tensor_release(t);
    return v;
}

/* group goes before the shape in the names ("gpt2_"), so --filter picks a model's set. */
static void bench_matmul(const char *group, int M, int N, int K, bool trans_a, bool trans_b)
{
    char shape[48], name_weft[64], name_blas[64], name_dnnl[64];
    snprintf(shape, sizeof shape, "%s%dx%dx%d_%c%c", group, M, N, K,
             trans_a ? 'T' : 'N', trans_b ? 'T' : 'N');
    snprintf(name_weft, sizeof name_weft, "matmul_%s", shape);
    snprintf(name_blas, sizeof name_blas, "openblas_sgemm_%s", shape);
    snprintf(name_dnnl, sizeof name_dnnl, "onednn_sgemm_%s", shape);
    bool want_weft = selected(name_weft), want_blas = selected(name_blas);
#ifdef WEFT_HAVE_ONEDNN
    bool want_dnnl = selected(name_dnnl);
#else
    bool want_dnnl = false;
    (void)name_dnnl;
#endif
    if (!want_weft && !want_blas && !want_dnnl)
        return;
    struct matmul_ctx c = {.M = M, .N = N, .K = K, .trans_a = trans_a, .trans_b = trans_b};
    c.a = matmul_operand(M, K, trans_a, &c.A);
    c.b = matmul_operand(K, N, trans_b, &c.B);
    c.out = malloc((size_t)M * (size_t)N * sizeof(float));
    die_on_error("setting up matmul");
    if (!c.out)
        exit(1);
    double flops = 2.0 * M * N * K;
    int repeats = flops > 1e10 ? (opt.repeats < 5 ? opt.repeats : 5) : opt.repeats;
    /* Small products are timed as batches of calls so the clock's resolution is no part;
     * the three take turns sample by sample, so a drift in the machine lands on all. */
    int calls = flops < 1e8 ? (int)(1e8 / flops) : 1;
    struct {
        bool want;
        const char *name;
        void (*fn)(void *);
        double samples[64];
    } runs[3] = {{want_weft, name_weft, run_weft_matmul, {0}},
                 {want_blas, name_blas, run_cblas, {0}},
#ifdef WEFT_HAVE_ONEDNN
                 {want_dnnl, name_dnnl, run_dnnl, {0}}};
#else
                 {false, name_dnnl, NULL, {0}}};
#endif
    if (repeats > 64)
        repeats = 64;
    for (int i = 0; i < 20; i++) /* past [cpu] gemm = auto's timed trials; warms the rest */
        for (int k = 0; k < 3; k++)
            if (runs[k].want)
                runs[k].fn(&c);
    die_on_error("matmul");
    for (int r = 0; r < repeats; r++)
        for (int k = 0; k < 3; k++) {
            if (!runs[k].want)
                continue;
            double t0 = now_seconds();
            for (int i = 0; i < calls; i++)
                runs[k].fn(&c);
            runs[k].samples[r] = (now_seconds() - t0) / calls;
        }
    for (int k = 0; k < 3; k++) {
        if (!runs[k].want)
            continue;
        qsort(runs[k].samples, (size_t)repeats, sizeof(double), compare_double);
        report(runs[k].name, flops / runs[k].samples[repeats / 2] / 1e9, "GFLOP/s");
    }
    free(c.out);
    weft_tensor_release(c.a);
    weft_tensor_release(c.b);
}

/* A [rows, cols] bfloat16 operand, stored transposed when asked. */
static weft_tensor *bf16_operand(int rows, int cols, bool transposed)
{
    const int64_t shape[2] = {transposed ? cols : rows, transposed ? rows : cols};
    weft_tensor *t32 = weft_rand(2, shape, WEFT_F32, WEFT_CPU);
    weft_tensor *t = weft_to_dtype(t32, WEFT_BF16);
    weft_tensor_release(t32);
    if (!t || !transposed)
        return t;
    weft_tensor *v = weft_t(t);
    weft_tensor_release(t);
    return v;
}

/* weft_matmul on bfloat16 operands (autocast's GEMM: oneDNN's bf16 matmul with a float32
 * accumulator), to set beside matmul_<shape> in float32. */
static void bench_matmul_bf16(const char *group, int M, int N, int K, bool trans_a,
                              bool trans_b)
{
    char name[64];
    snprintf(name, sizeof name, "matmul_bf16_%s%dx%dx%d_%c%c", group, M, N, K,
             trans_a ? 'T' : 'N', trans_b ? 'T' : 'N');
    if (!selected(name))
        return;
    struct matmul_ctx c = {.M = M, .N = N, .K = K};
    c.a = bf16_operand(M, K, trans_a);
    c.b = bf16_operand(K, N, trans_b);
    die_on_error("setting up a bfloat16 matmul");
    double flops = 2.0 * M * N * K;
    int calls = flops < 1e8 ? (int)(1e8 / flops) : 1;
    double samples[64];
    int repeats = opt.repeats > 64 ? 64 : opt.repeats;
    for (int i = 0; i < 20; i++)
        run_weft_matmul(&c);
    die_on_error("bfloat16 matmul");
    for (int r = 0; r < repeats; r++) {
        double t0 = now_seconds();
        for (int i = 0; i < calls; i++)
            run_weft_matmul(&c);
        samples[r] = (now_seconds() - t0) / calls;
    }
    qsort(samples, (size_t)repeats, sizeof(double), compare_double);
    report(name, flops / samples[repeats / 2] / 1e9, "GFLOP/s");
    weft_tensor_release(c.a);
    weft_tensor_release(c.b);
}

/* The square products, then the MNIST MLP's (784-256-128-10; batch 64 and 256): forward
 * x W^T (NT), input gradient g W (NN), weight gradient g^T x (TN); each in float32 and in
 * bfloat16. */
static void bench_matmuls(void)
{
    bench_matmul("", 1024, 1024, 1024, false, false);
    bench_matmul_bf16("", 1024, 1024, 1024, false, false);
    bench_matmul("", 2048, 2048, 2048, false, false);
    static const int mlp[][5] = {
        {64, 256, 784, 0, 1},  {64, 128, 256, 0, 1}, {64, 256, 128, 0, 0},
        {256, 784, 64, 1, 0},  {128, 256, 64, 1, 0}, {256, 256, 784, 0, 1},
        {256, 784, 256, 1, 0}, {256, 128, 256, 0, 1},
    };
    for (size_t i = 0; i < sizeof mlp / sizeof *mlp; i++) {
        bench_matmul("", mlp[i][0], mlp[i][1], mlp[i][2], mlp[i][3], mlp[i][4]);
        bench_matmul_bf16("", mlp[i][0], mlp[i][1], mlp[i][2], mlp[i][3], mlp[i][4]);
    }
    /* GPT-2 small's block at 4096 tokens (batch 16 x 256): the four Linears (qkv 768 ->
     * 2304, attention projection 768 -> 768, c_fc 768 -> 3072, mlp projection 3072 -> 768),
     * each forward (NT), input gradient (NN) and weight gradient (TN). Only with a --filter
     * that names gpt2: at 2 threads they take a minute. */
    if (!opt.filter || !strstr(opt.filter, "gpt2"))
        return;
    static const int gpt2_linear[][2] = {{768, 2304}, {768, 768}, {768, 3072}, {3072, 768}};
    for (size_t i = 0; i < sizeof gpt2_linear / sizeof *gpt2_linear; i++) {
        int in = gpt2_linear[i][0], out = gpt2_linear[i][1], tokens = 4096;
        const int shapes[3][5] = {
            {tokens, out, in, 0, 1}, {tokens, in, out, 0, 0}, {out, in, tokens, 1, 0}};
        for (int s = 0; s < 3; s++) {
            const int *d = shapes[s];
            bench_matmul("gpt2_", d[0], d[1], d[2], d[3], d[4]);
            bench_matmul_bf16("gpt2_", d[0], d[1], d[2], d[3], d[4]);
        }
    }
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

/* ---- autograd overhead ------------------------------------------------------------------------ */

enum chain_mode { CHAIN_NO_GRAD, CHAIN_RECORDING, CHAIN_FWD_BWD };

#define CHAIN_OPS 100
#define CHAIN_REPEATS 200

struct chain_ctx {
    enum chain_mode mode;
    weft_tensor *x, *c;
};

/* CHAIN_REPEATS chains of 100 tiny elementwise ops (mul, add, tanh in turn) on 16
 * elements: per-op cost is the framework's overhead, not arithmetic. */
static void run_chain(void *p)
{
    struct chain_ctx *c = p;
    bool prev = c->mode == CHAIN_NO_GRAD ? weft_no_grad_begin() : weft_grad_enabled();
    for (int r = 0; r < CHAIN_REPEATS; r++) {
        weft_scope_push();
        weft_tensor *y = c->x;
        for (int i = 0; i < CHAIN_OPS; i++) {
            switch (i % 3) {
            case 0: y = weft_mul(y, c->c); break;
            case 1: y = weft_add(y, c->c); break;
            default: y = weft_tanh(y); break;
            }
        }
        if (c->mode == CHAIN_FWD_BWD) {
            weft_backward(weft_sum(y, 0, NULL, false), NULL, false);
            weft_zero_grad(c->x, true);
        }
        weft_scope_pop();
    }
    weft_grad_mode_restore(prev);
}

static void bench_autograd(void)
{
    static const char *const names[] = {"chain100_fwd_no_grad", "chain100_fwd_recording",
                                        "autograd_chain100_fwd_bwd"};
    const int64_t shape[1] = {16};
    struct chain_ctx c;
    c.x = weft_rand(1, shape, WEFT_F32, WEFT_CPU);
    c.c = weft_rand(1, shape, WEFT_F32, WEFT_CPU);
    weft_requires_grad_(c.x, true);
    die_on_error("setting up the op chain");
    for (int m = CHAIN_NO_GRAD; m <= CHAIN_FWD_BWD; m++) {
        if (!selected(names[m]))
            continue;
        c.mode = (enum chain_mode)m;
        double s = time_median(run_chain, &c, opt.repeats);
        die_on_error(names[m]);
        report(names[m], s / (CHAIN_REPEATS * CHAIN_OPS) * 1e6, "us/op");
    }
    weft_tensor_release(c.x);
    weft_tensor_release(c.c);
}

/* ---- scaled dot-product attention: fused (sdpa_flash) against the composite ---------------- */

struct sdpa_ctx {
    weft_tensor *q, *k, *v, *causal; /* causal: the composite's [T, T] bool mask */
    bool composite, backward;
};

/* The composite path nn/attention.c falls back to: matmul, masked_fill, softmax, matmul. */
static weft_tensor *sdpa_composite(struct sdpa_ctx *c)
{
    double scale = 1 / sqrt((double)c->q->shape[3]);
    weft_tensor *s = weft_mul_scalar(weft_matmul(c->q, weft_transpose(c->k, -2, -1)), scale);
    s = weft_masked_fill(s, weft_logical_not(c->causal), -INFINITY);
    return weft_matmul(weft_softmax(s, -1), c->v);
}

static void run_sdpa(void *p)
{
    struct sdpa_ctx *c = p;
    weft_scope_push();
    struct weft_sdpa_params sp = {.is_causal = true};
    weft_tensor *y = c->composite ? sdpa_composite(c)
                                  : weft_scaled_dot_product_attention(c->q, c->k, c->v, &sp);
    if (c->backward) {
        weft_backward(weft_sum(y, 0, NULL, false), NULL, false);
        weft_zero_grad(c->q, true);
        weft_zero_grad(c->k, true);
        weft_zero_grad(c->v, true);
    }
    weft_scope_pop();
}

/* q, k, v [B, nh, T, hd]: the views of [B, T, nh, hd] a GPT's attention makes, causal, in
 * dt (names of other dtypes than float32 say it: "sdpa_bfloat16_..."; group goes before
 * the shape, as bench_matmul's). Shapes: nanoGPT's CPU baby GPT (batch 12, 4 heads, block
 * 64, head dim 32), one sequence of GPT-2 small (12 heads, block 1024, head dim 64) and, in
 * the gpt2 group, its batch of 16 at block 256. */
static void bench_sdpa_shape(const char *group, int64_t B, int64_t nh, int64_t T, int64_t hd,
                             enum weft_dtype dt)
{
    static const char *const kinds[4] = {"fused_fwd", "composite_fwd", "fused_fwd_bwd",
                                         "composite_fwd_bwd"};
    char names[4][96];
    bool any = false;
    for (int i = 0; i < 4; i++) {
        snprintf(names[i], sizeof names[i], "sdpa_%s%s%s_%s%lldx%lldx%lldx%lld",
                 dt == WEFT_F32 ? "" : weft_dtype_name(dt), dt == WEFT_F32 ? "" : "_", kinds[i],
                 group, (long long)B, (long long)nh, (long long)T, (long long)hd);
        any |= selected(names[i]);
    }
    if (!any)
        return;
    const int64_t shape[4] = {B, T, nh, hd};
    struct sdpa_ctx c;
    weft_tensor **qkv[3] = {&c.q, &c.k, &c.v};
    for (int i = 0; i < 3; i++) {
        weft_tensor *x32 = weft_rand(4, shape, WEFT_F32, WEFT_CPU);
        weft_tensor *x = weft_to_dtype(x32, dt);
        weft_tensor_release(x32);
        *qkv[i] = weft_tensor_retain(weft_transpose(x, 1, 2));
        weft_tensor_release(x);
        weft_requires_grad_(*qkv[i], true);
    }
    weft_tensor *i = weft_reshape(weft_arange(0, T, 1, WEFT_I64, WEFT_CPU), 2, (int64_t[]){T, 1});
    weft_tensor *j = weft_reshape(weft_arange(0, T, 1, WEFT_I64, WEFT_CPU), 2, (int64_t[]){1, T});
    c.causal = weft_tensor_retain(weft_le(j, i));
    die_on_error("setting up attention");
    /* q k^T and w v: 2 * 2*B*nh*T*T*hd flops forward (the causal half counted whole);
     * the backward does twice the forward's products and recomputes q k^T. */
    double fwd = 4.0 * (double)(B * nh * T * T * hd);
    for (int m = 0; m < 4; m++) {
        if (!selected(names[m]))
            continue;
        c.composite = m % 2 == 1;
        c.backward = m >= 2;
        double s = time_median(run_sdpa, &c, opt.repeats);
        die_on_error(names[m]);
        report(names[m], s * 1e3, "ms");
        report("  (as GFLOP/s)", (c.backward ? 3.5 : 1.0) * fwd / s / 1e9, "GFLOP/s");
    }
    weft_tensor_release(c.q);
    weft_tensor_release(c.k);
    weft_tensor_release(c.v);
    weft_tensor_release(c.causal);
}

static void bench_sdpa(void)
{
    bench_sdpa_shape("", 12, 4, 64, 32, WEFT_F32);
    bench_sdpa_shape("", 1, 12, 1024, 64, WEFT_F32);
    if (!opt.filter || !strstr(opt.filter, "gpt2"))
        return;
    bench_sdpa_shape("gpt2_", 16, 12, 256, 64, WEFT_F32);
    bench_sdpa_shape("gpt2_", 16, 12, 256, 64, WEFT_BF16);
}

/* ---- layer_norm and gelu: the fused kernels against the composite of ops ------------------- */

enum fused_kind { FUSED_LAYER_NORM, FUSED_GELU_TANH, FUSED_GELU_ERF };

struct fused_ctx {
    weft_tensor *x, *w, *b;
    weft_tensor *grad; /* backward's incoming gradient; NULL: that of sum(y) */
    enum fused_kind kind;
    bool composite;
};

/* What nn/functional.c falls back to where a backend lacks the fused kernels. */
static weft_tensor *fused_composite(struct fused_ctx *c)
{
    if (c->kind == FUSED_LAYER_NORM) {
        int last = -1;
        weft_tensor *mean = weft_mean(c->x, 1, &last, true);
        weft_tensor *var = weft_var(c->x, 1, &last, 0, true);
        weft_tensor *y = weft_mul(weft_sub(c->x, mean), weft_rsqrt(weft_add_scalar(var, 1e-5)));
        return weft_add(weft_mul(y, c->w), c->b);
    }
    /* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
    weft_tensor *inner = weft_mul_scalar(
        weft_add(c->x, weft_mul_scalar(weft_pow_scalar(c->x, 3), 0.044715)), 0.7978845608028654);
    return weft_mul(weft_mul_scalar(c->x, 0.5), weft_add_scalar(weft_tanh(inner), 1));
}

/* One forward and backward, as in a training step. */
static void run_fused(void *p)
{
    struct fused_ctx *c = p;
    weft_scope_push();
    weft_tensor *y;
    if (c->composite)
        y = fused_composite(c);
    else if (c->kind == FUSED_LAYER_NORM)
        y = weft_layer_norm(c->x, 1, &c->x->shape[1], c->w, c->b, 1e-5);
    else
        y = weft_gelu_approximate(c->x, c->kind == FUSED_GELU_TANH ? WEFT_GELU_TANH : WEFT_GELU_NONE);
    if (c->grad)
        weft_backward(y, c->grad, false);
    else
        weft_backward(weft_sum(y, 0, NULL, false), NULL, false);
    weft_scope_pop();
    weft_zero_grad(c->x, true);
    if (c->w) {
        weft_zero_grad(c->w, true);
        weft_zero_grad(c->b, true);
    }
}

/* LayerNorm over [768, 128] (the baby GPT's batch 12 x block 64 rows, 128 wide) and GELU
 * over [768, 512] (its MLP's hidden layer), float32, forward + backward; and GELU in
 * bfloat16 over GPT-2 small's hidden layer at 1024 tokens, [1024, 3072], standard normal
 * inputs (the 16-bit GELU computes its erfc tail only for the elements below -3, so
 * uniform [0, 1) inputs would flatter it) and a standard normal gradient: sum(y)'s is an
 * expanded tensor, which backward's kernel walks by the strided loop, not the training
 * step's contiguous one. */
static void bench_fused_layers(void)
{
    static const struct {
        const char *name;
        enum fused_kind kind;
        bool composite;
        enum weft_dtype dtype;
        int64_t rows, cols;
    } cases[] = {
        {"layer_norm_fused_fwd_bwd_768x128", FUSED_LAYER_NORM, false, WEFT_F32, 768, 128},
        {"layer_norm_composite_fwd_bwd_768x128", FUSED_LAYER_NORM, true, WEFT_F32, 768, 128},
        {"gelu_tanh_fused_fwd_bwd_768x512", FUSED_GELU_TANH, false, WEFT_F32, 768, 512},
        {"gelu_tanh_composite_fwd_bwd_768x512", FUSED_GELU_TANH, true, WEFT_F32, 768, 512},
        {"gelu_erf_fwd_bwd_768x512", FUSED_GELU_ERF, false, WEFT_F32, 768, 512},
        {"gelu_erf_bf16_fwd_bwd_1024x3072", FUSED_GELU_ERF, false, WEFT_BF16, 1024, 3072},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        if (!selected(cases[i].name))
            continue;
        bool ln = cases[i].kind == FUSED_LAYER_NORM;
        const int64_t xs[2] = {cases[i].rows, cases[i].cols}, ws[1] = {cases[i].cols};
        struct fused_ctx c = {.kind = cases[i].kind, .composite = cases[i].composite};
        if (cases[i].dtype == WEFT_F32) {
            c.x = weft_rand(2, xs, WEFT_F32, WEFT_CPU);
        } else {
            c.x = weft_randn(2, xs, cases[i].dtype, WEFT_CPU);
            c.grad = weft_randn(2, xs, cases[i].dtype, WEFT_CPU);
        }
        weft_requires_grad_(c.x, true);
        if (ln) {
            c.w = weft_rand(1, ws, WEFT_F32, WEFT_CPU);
            c.b = weft_rand(1, ws, WEFT_F32, WEFT_CPU);
            weft_requires_grad_(c.w, true);
            weft_requires_grad_(c.b, true);
        }
        die_on_error("setting up layer_norm and gelu");
        double s = time_median(run_fused, &c, opt.repeats);
        die_on_error(cases[i].name);
        report(cases[i].name, s * 1e6, "us");
        weft_tensor_release(c.x);
        weft_tensor_release(c.grad);
        weft_tensor_release(c.w);
        weft_tensor_release(c.b);
    }
}

/* The nn layer: the autograd overhead per op, attention, the fused layers (convolutions:
 * bench/bench_conv.c). */
static void bench_nn(void)
{
    bench_autograd();
    bench_sdpa();
    bench_fused_layers();
}

/* ------------------------------------------------------------------------------------------ */

static void usage(FILE *f)
{
    fprintf(f, "usage: weft-bench [--filter TEXT] [--repeats N] [--threads N] [--list] [--version]\n"
               "       weft-bench --config CONFIG.ini [--batches N] [--repeats N]\n"
               "Prints \"name value unit\" per line; each value is the median of N runs.\n"
               "--config: the data loader of the config's [data] alone, N batches a run.\n");
}

static int parse_args(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--version")) {
            app_print_version(stdout, "weft-bench");
            exit(0);
        }
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            exit(0);
        } else if (!strcmp(a, "--list")) {
            opt.list = true;
        } else if (!strcmp(a, "--filter") && i + 1 < argc) {
            opt.filter = argv[++i];
        } else if (!strcmp(a, "--config") && i + 1 < argc) {
            opt.config = argv[++i];
        } else if (!strcmp(a, "--batches") && i + 1 < argc) {
            opt.batches = atoi(argv[++i]);
            if (opt.batches < 1) {
                fprintf(stderr, "weft-bench: --batches must be at least 1\n");
                return 2;
            }
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

/* bench/bench_loader_config.c: --config, the loader of a config's [data]. */
int bench_loader_config(const char *path, int batches, int repeats,
                        void (*report)(const char *name, double value, const char *unit));
/* The cores other programs kept busy (plugins/cpu/cpu_load.c, the sampler the cpu plugin
 * sizes its running threads by), warned about above this share: figures taken while other
 * processes use the cores measure the contention, not weft. */
#define BUSY_CORES 0.25

/* The warning of a busy machine, where the figures go and on stderr. */
static void warn_busy(const char *when, double cores)
{
    for (int i = 0; i < 2; i++)
        fprintf(i ? stderr : stdout,
                "%sweft-bench: warning: other programs kept %.2f cores busy %s: these figures "
                "are not meaningful (run it on a quiet machine)\n",
                i ? "" : "# ", cores, when);
    fflush(stdout);
}

/* bench/bench_augment.c: the loader with data augmentation (names "augment_..."). */
void bench_augment(bool (*selected)(const char *name),
                   double (*time_median)(void (*fn)(void *), void *ctx, int repeats),
                   void (*report)(const char *name, double value, const char *unit), int repeats);

/* bench/bench_rnn.c: LSTM forward and forward+backward (names "rnn_..."). */
void bench_rnn(bool (*selected)(const char *name),
               double (*time_median)(void (*fn)(void *), void *ctx, int repeats),
               void (*report)(const char *name, double value, const char *unit), int repeats);

/* bench/bench_conv.c: the MNIST CNN's convolutions, weft against oneDNN (names "conv_..."). */
void bench_conv(bool (*selected)(const char *name),
                double (*time_median)(void (*fn)(void *), void *ctx, int repeats),
                void (*report)(const char *name, double value, const char *unit), int repeats);

/* bench/bench_sparse.c: the sparse group (names "sparse_..."). */
void bench_sparse(bool (*selected)(const char *name),
                  double (*time_median)(void (*fn)(void *), void *ctx, int repeats),
                  void (*report)(const char *name, double value, const char *unit), int repeats);

/* ---- data loader ------------------------------------------------------------------------ */

struct loader_ctx {
    weft_dataloader *dl;
    int nfields;
};

/* One epoch, each batch's tensors dropped at once (as a training step would after use). */
static void run_loader_epoch(void *p)
{
    struct loader_ctx *c = p;
    weft_tensor *f[WEFT_DATASET_MAX_FIELDS];
    weft_dataloader_epoch(c->dl, 0);
    while (weft_dataloader_next(c->dl, f) == 1)
        for (int i = 0; i < c->nfields; i++)
            weft_tensor_release(f[i]);
}

/* MNIST train from data/mnist (under $WEFT_SOURCE_ROOT, or the current or parent
 * directory) through the idx reader: batch 64, 2 workers, normalised to float32. */
static void bench_dataloader(void)
{
    const char *name = "dataloader_mnist_images_per_s";
    if (!selected(name))
        return;
    const char *root = getenv("WEFT_SOURCE_ROOT");
    const char *dirs[] = {root ? root : ".", ".", ".."};
    char images[1024] = "", labels[1024];
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0] && !images[0]; i++) {
        snprintf(images, sizeof images, "%s/data/mnist/train-images-idx3-ubyte.gz", dirs[i]);
        FILE *f = fopen(images, "rb");
        if (f) {
            fclose(f);
            snprintf(labels, sizeof labels, "%s/data/mnist/train-labels-idx1-ubyte.gz", dirs[i]);
        } else {
            images[0] = '\0';
        }
    }
    if (!images[0]) {
        printf("# %s skipped: data/mnist not found (set WEFT_SOURCE_ROOT)\n", name);
        return;
    }
    struct weft_config *cfg = weft_config_new("bench");
    weft_config_put(cfg, "data", "reader", "idx");
    weft_config_put(cfg, "data", "images", images);
    weft_config_put(cfg, "data", "labels", labels);
    weft_config_put(cfg, "loader", "batch_size", "64");
    weft_config_put(cfg, "loader", "workers", "2");
    weft_config_put(cfg, "loader", "mean", "0.1307");
    weft_config_put(cfg, "loader", "std", "0.3081");
    weft_dataset *ds = weft_dataset_open(weft_config_options(cfg, "data"));
    if (!ds) {
        printf("# %s skipped: %s\n", name, weft_error_message());
        weft_error_clear();
        weft_config_free(cfg);
        return;
    }
    struct loader_ctx c = {weft_dataloader_from_config(ds, cfg, "loader", WEFT_CPU),
                           weft_dataset_num_fields(ds)};
    die_on_error("setting up the data loader");
    double s = time_median(run_loader_epoch, &c, opt.repeats);
    die_on_error(name);
    report(name, (double)weft_dataset_length(ds) / s, "images/s");
    weft_dataloader_free(c.dl);
    weft_dataset_close(ds);
    weft_config_free(cfg);
}

int main(int argc, char **argv)
{
    int rc = parse_args(argc, argv);
    if (rc)
        return rc;
    weft_device device;
    if (weft_runtime_init(NULL, &device) != 0) {
        fprintf(stderr, "weft-bench: %s\n", weft_error_message());
        return 2;
    }
    /* An emulated device (weft's CUDA emulator) runs on the CPU: its timings mean nothing. */
    if (weft_device_is_emulated(device)) {
        const struct weft_backend *b = weft_backend_find(device.type);
        char name[32];
        fprintf(stderr, "weft-bench: %s is an emulated device (%s): its timings mean nothing, "
                        "so weft-bench will not time it\n",
                weft_device_str(device, name, sizeof name), b->features(b->context));
        return 2;
    }
    if (opt.threads > 0 && weft_set_num_threads(opt.threads) != 0) {
        fprintf(stderr, "weft-bench: %s\n", weft_error_message());
        return 2;
    }
    /* a short look before (this process idle), the whole run after */
    struct cpu_load start, quiet, end;
    bool load = !opt.list && cpu_load_sample(&start) == 0;
    if (load) {
        nanosleep(&(struct timespec){0, 300000000}, NULL);
        load = cpu_load_sample(&quiet) == 0;
    }
    if (!opt.list)
        printf("# weft %s, %d threads, median of %d\n", weft_version(), weft_get_num_threads(),
               opt.repeats);
    if (opt.config)
        return bench_loader_config(opt.config, opt.batches, opt.repeats, report);
    if (load && cpu_load_others(&start, &quiet) >= BUSY_CORES)
        warn_busy("before the run", cpu_load_others(&start, &quiet));
    bench_copies();
    bench_conversions();
    bench_matmuls();
    bench_tiny();
    bench_nn();
    bench_dataloader();
    bench_sparse(selected, time_median, report, opt.repeats);
    bench_augment(selected, time_median, report, opt.repeats);
    bench_rnn(selected, time_median, report, opt.repeats);
    bench_conv(selected, time_median, report, opt.repeats);
    if (load && cpu_load_sample(&end) == 0 && cpu_load_others(&quiet, &end) >= BUSY_CORES)
        warn_busy("during the run", cpu_load_others(&quiet, &end));
    return 0;
}
