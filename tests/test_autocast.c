/* tests/test_autocast.c: mixed precision. The autocast scope (weft/autocast.h) and the op
 * lists of each device (PyTorch 1.13's AutocastCPU on the cpu, its CUDA lists on a device
 * whose backend names them: a host-memory device here, running the cpu's kernels),
 * gradients through casts, the bfloat16 GEMM against a float64 reference, and the
 * GradScaler (weft/grad_scaler.h). tests/torch's autocast_cpu.txt checks every listed op
 * against PyTorch under torch.autocast("cpu"). */
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "testutil.h"

#include <weft/nn.h>

static void setup(void)
{
    tu_setup();
    weft_scope_push();
}

static void teardown(void)
{
    weft_scope_pop();
    cr_assert_not(weft_autocast_enabled(), "a test left an autocast scope open");
    tu_teardown();
}

TestSuite(autocast, .init = setup, .fini = teardown);

/* Values in [-1, 1) (testutil's generator). */
static weft_tensor *random_tensor(int ndim, const int64_t *shape, enum weft_dtype dt,
                                  uint64_t *seed)
{
    return tu_random_tensor(ndim, shape, dt, -1, 1, seed, NULL);
}

static weft_autocast_state cpu_bf16(void)
{
    weft_autocast_state prev = weft_autocast_begin(WEFT_DEVICE_CPU, WEFT_BF16);
    tu_assert_no_error();
    return prev;
}

/* ---- a device with CUDA's policy: host memory, the cpu's kernels ------------------------- */

static int gpu_like_count(void *context)
{
    (void)context;
    return 1;
}

static void *gpu_like_alloc(void *context, int index, size_t nbytes)
{
    (void)context, (void)index;
    return malloc(nbytes ? nbytes : 1);
}

static void gpu_like_free(void *context, int index, void *ptr, size_t nbytes)
{
    (void)context, (void)index, (void)nbytes;
    free(ptr);
}

static int gpu_like_copy(void *context, weft_tensor *dst, const weft_tensor *src, bool nb)
{
    (void)context, (void)nb;
    memcpy(weft_tensor_data(dst), weft_tensor_data(src),
           (size_t)weft_tensor_numel(src) * weft_tensor_itemsize(src));
    return 0;
}

static const struct weft_backend gpu_like_backend = {
    .base = WEFT_VTABLE(WEFT_KIND_BACKEND, "gpulike", struct weft_backend),
    .device_count = gpu_like_count,
    .alloc = gpu_like_alloc,
    .free = gpu_like_free,
    .copy = gpu_like_copy,
    .autocast_policy = "cuda",
    .autocast_dtypes = WEFT_DTYPE_BIT(WEFT_F16) | WEFT_DTYPE_BIT(WEFT_BF16),
};

/* The device, registered with every cpu kernel (its memory is host memory). */
static weft_device gpu_like(void)
{
    int type = weft_register(&gpu_like_backend);
    cr_assert_geq(type, 0, "%s", weft_error_message());
    for (int op = 0; op < weft_op_count(); op++)
        for (int dt = 0; dt < WEFT_DTYPE_COUNT; dt++) {
            weft_kernel_fn fn = weft_kernel_lookup(op, WEFT_DEVICE_CPU, WEFT_LAYOUT_STRIDED, dt);
            if (fn)
                cr_assert_eq(weft_kernel_register(op, type, WEFT_LAYOUT_STRIDED, WEFT_DTYPE_BIT(dt), fn), 0);
        }
    weft_error_clear(); /* lookups of kernels the cpu lacks */
    return (weft_device){(int16_t)type, 0};
}

static weft_tensor *on(weft_tensor *t, weft_device dev)
{
    weft_tensor *r = weft_to(t, dev, t->dtype, false);
    cr_assert_not_null(r, "%s", weft_error_message());
    return r;
}

/* ---- the scope ------------------------------------------------------------------------ */

Test(autocast, scopes_nest_and_restore_the_previous_state)
{
    cr_assert_not(weft_autocast_enabled());
    weft_autocast_state outer = cpu_bf16();
    cr_assert(weft_autocast_enabled());
    cr_assert_eq(weft_autocast_dtype(), WEFT_BF16);
    weft_autocast_state inner = weft_autocast_begin(tu_cuda(0).type, WEFT_F16);
    cr_assert_eq(weft_autocast_dtype(), WEFT_F16);
    weft_autocast_state off = weft_autocast_suspend();
    cr_assert_not(weft_autocast_enabled());
    weft_autocast_end(off);
    cr_assert(weft_autocast_enabled());
    cr_assert_eq(weft_autocast_dtype(), WEFT_F16);
    weft_autocast_end(inner);
    cr_assert_eq(weft_autocast_dtype(), WEFT_BF16);
    weft_autocast_end(outer);
    cr_assert_not(weft_autocast_enabled());
}

/* PyTorch 1.13's AutocastCPU takes bfloat16 only; the cpu backend says so
 * (weft/backend.h's autocast_dtypes), CUDA's takes both. */
Test(autocast, a_float16_scope_on_the_cpu_is_refused_as_in_pytorch)
{
    weft_autocast_state prev = weft_autocast_begin(WEFT_DEVICE_CPU, WEFT_F16);
    tu_assert_error(WEFT_ERR_VALUE,
                    "Currently, AutocastCPU only support Bfloat16 as the autocast_cpu_dtype");
    cr_assert_not(weft_autocast_enabled());
    weft_autocast_end(prev);
    prev = weft_autocast_begin(gpu_like().type, WEFT_F16);
    tu_assert_no_error();
    cr_assert_eq(weft_autocast_dtype(), WEFT_F16);
    weft_autocast_end(prev);
}

Test(autocast, a_full_precision_target_dtype_is_refused)
{
    weft_autocast_state prev = weft_autocast_begin(WEFT_DEVICE_CPU, WEFT_F32);
    tu_assert_error(WEFT_ERR_VALUE, "expected torch.bfloat16 or torch.float16, got torch.float32");
    cr_assert_not(weft_autocast_enabled());
    weft_autocast_end(prev);
}

static void *matmul_dtype_on_thread(void *arg)
{
    weft_tensor **ab = arg;
    weft_scope_push();
    bool on = weft_autocast_enabled();
    weft_tensor *y = weft_matmul(ab[0], ab[1]);
    enum weft_dtype dt = y ? y->dtype : WEFT_BOOL;
    weft_scope_pop();
    return (void *)(intptr_t)(on ? -1 : (int)dt);
}

Test(autocast, the_scope_belongs_to_the_thread_that_opened_it)
{
    uint64_t seed = 1;
    const int64_t s[2] = {4, 4};
    weft_tensor *ab[2] = {random_tensor(2, s, WEFT_F32, &seed), random_tensor(2, s, WEFT_F32, &seed)};
    weft_autocast_state prev = cpu_bf16();
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, matmul_dtype_on_thread, ab), 0);
    void *r;
    pthread_join(th, &r);
    cr_assert_eq((int)(intptr_t)r, WEFT_F32, "another thread saw this thread's autocast");
    cr_assert_eq(weft_matmul(ab[0], ab[1])->dtype, WEFT_BF16);
    weft_autocast_end(prev);
}

/* Each device type's table, as its backend names it: the cpu's AutocastCPU lists, CUDA's
 * for a device type whose backend says "cuda" or that is not loaded (tu_cuda here). */
Test(autocast, each_device_types_backend_names_its_policy_table)
{
    int cpu = WEFT_DEVICE_CPU, cuda = tu_cuda(0).type;
    static const char *const both_lower[] = {"matmul", "mm", "bmm", "addmm", "baddbmm", "linear",
                                             "conv2d", "scaled_dot_product_attention"};
    for (size_t i = 0; i < sizeof both_lower / sizeof *both_lower; i++) {
        cr_expect_eq(weft_autocast_policy_on(cpu, both_lower[i]), WEFT_AUTOCAST_LOWER, "%s", both_lower[i]);
        cr_expect_eq(weft_autocast_policy_on(cuda, both_lower[i]), WEFT_AUTOCAST_LOWER, "%s", both_lower[i]);
    }
    /* float32 on both */
    static const char *const both_fp32[] = {"prod", "cdist", "cross_entropy", "nll_loss", "mse_loss",
                                            "l1_loss", "binary_cross_entropy_with_logits"};
    for (size_t i = 0; i < sizeof both_fp32 / sizeof *both_fp32; i++) {
        cr_expect_eq(weft_autocast_policy_on(cpu, both_fp32[i]), WEFT_AUTOCAST_FP32, "%s", both_fp32[i]);
        cr_expect_eq(weft_autocast_policy_on(cuda, both_fp32[i]), WEFT_AUTOCAST_FP32, "%s", both_fp32[i]);
    }
    /* float32 on CUDA, as given on the cpu */
    static const char *const cuda_fp32[] = {"softmax", "log_softmax", "sum", "cumsum", "exp",
                                            "log", "pow", "rsqrt", "layer_norm", "batch_norm",
                                            "group_norm", "norm", "logsumexp"};
    for (size_t i = 0; i < sizeof cuda_fp32 / sizeof *cuda_fp32; i++) {
        cr_expect_eq(weft_autocast_policy_on(cpu, cuda_fp32[i]), WEFT_AUTOCAST_PROMOTE, "%s", cuda_fp32[i]);
        cr_expect_eq(weft_autocast_policy_on(cuda, cuda_fp32[i]), WEFT_AUTOCAST_FP32, "%s", cuda_fp32[i]);
    }
    /* float32 on the cpu only */
    static const char *const cpu_fp32[] = {"max_unpool2d", "conv_transpose2d", "trace", "avg_pool3d"};
    for (size_t i = 0; i < sizeof cpu_fp32 / sizeof *cpu_fp32; i++) {
        cr_expect_eq(weft_autocast_policy_on(cpu, cpu_fp32[i]), WEFT_AUTOCAST_FP32, "%s", cpu_fp32[i]);
        cr_expect_eq(weft_autocast_policy_on(cuda, cpu_fp32[i]), WEFT_AUTOCAST_PROMOTE, "%s", cpu_fp32[i]);
    }
    cr_expect_eq(weft_autocast_policy_on(cpu, "add"), WEFT_AUTOCAST_PROMOTE);
    cr_expect_eq(weft_autocast_policy_on(cuda, "relu"), WEFT_AUTOCAST_PROMOTE);
    /* without a scope, the thread's device type is the cpu */
    cr_expect_eq(weft_autocast_policy("softmax"), WEFT_AUTOCAST_PROMOTE);
}

/* The op layer skips asking for rows whose AUTOCAST column (CUDA's) runs as given: sound
 * only while no such row is cast on the cpu. */
Test(autocast, no_op_table_row_that_cuda_runs_as_given_is_cast_on_the_cpu)
{
    static const struct {
        const char *name;
        enum weft_autocast_policy cuda;
    } rows[] = {
#define ROW(ID, name, DTYPES, AUTOCAST, ...) {#name, WEFT_AUTOCAST_##AUTOCAST},
        WEFT_OP_TABLE(ROW) WEFT_OPS_COMPOSITE(ROW)
#undef ROW
    };
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++)
        if (rows[i].cuda == WEFT_AUTOCAST_PROMOTE)
            cr_expect_eq(weft_autocast_policy_on(WEFT_DEVICE_CPU, rows[i].name), WEFT_AUTOCAST_PROMOTE,
                         "%s runs as given on CUDA but is cast on the cpu", rows[i].name);
}

/* Every name of CUDA's table (PyTorch 1.13's CUDA lists) with its policy, read by the
 * lookup from buffers of our own: the answer depends on the text, not on where it lives. */
Test(autocast, every_listed_name_finds_its_policy_whatever_buffer_holds_it)
{
    int cuda = tu_cuda(0).type;
    static const char *const lower[] = {"matmul", "mm", "bmm", "linear", "conv2d",
                                        "scaled_dot_product_attention"};
    static const char *const fp32[] = {
        "softmax", "log_softmax", "sum", "prod", "cumsum", "exp", "expm1", "log", "log1p",
        "reciprocal", "rsqrt", "pow", "layer_norm", "group_norm", "batch_norm", "norm",
        "logsumexp", "cross_entropy", "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss",
        "huber_loss", "kl_div", "binary_cross_entropy", "binary_cross_entropy_with_logits"};
    char buf[64];
    for (size_t i = 0; i < sizeof lower / sizeof *lower; i++) {
        strcpy(buf, lower[i]);
        cr_assert_eq(weft_autocast_policy_on(cuda, buf), WEFT_AUTOCAST_LOWER, "%s", buf);
    }
    for (size_t i = 0; i < sizeof fp32 / sizeof *fp32; i++) {
        strcpy(buf, fp32[i]);
        cr_assert_eq(weft_autocast_policy_on(cuda, buf), WEFT_AUTOCAST_FP32, "%s", buf);
    }
    /* The same buffer, rewritten: no answer is kept for the pointer. */
    strcpy(buf, "softmax");
    cr_assert_eq(weft_autocast_policy_on(cuda, buf), WEFT_AUTOCAST_FP32);
    strcpy(buf, "softmax_");
    cr_assert_eq(weft_autocast_policy_on(cuda, buf), WEFT_AUTOCAST_PROMOTE);
}

Test(autocast, names_outside_the_table_promote_even_when_close_to_one)
{
    static const char *const others[] = {"", "add", "mul", "relu", "gelu", "soft", "softmax ",
                                         "Softmax", "matmu", "matmul_", "bmm2", "log_",
                                         "binary_cross_entropy_with_logit", "conv1d", "mean"};
    for (size_t i = 0; i < sizeof others / sizeof *others; i++)
        cr_assert_eq(weft_autocast_policy_on(tu_cuda(0).type, others[i]), WEFT_AUTOCAST_PROMOTE,
                     "'%s'", others[i]);
    cr_assert_eq(weft_autocast_policy(NULL), WEFT_AUTOCAST_PROMOTE);
}

struct policy_worker {
    int mismatches, cuda;
};

static void *ask_policies(void *p)
{
    struct policy_worker *w = p;
    for (int i = 0; i < 20000; i++) {
        w->mismatches += weft_autocast_policy("linear") != WEFT_AUTOCAST_LOWER;
        w->mismatches += weft_autocast_policy("nll_loss") != WEFT_AUTOCAST_FP32;
        w->mismatches += weft_autocast_policy("add") != WEFT_AUTOCAST_PROMOTE;
        w->mismatches += weft_autocast_policy_on(w->cuda, "softmax") != WEFT_AUTOCAST_FP32;
    }
    return NULL;
}

/* The index behind the lookup is built on first use: threads asking at once all see it
 * whole (in a fresh process, as every Criterion test runs). */
Test(autocast, threads_asking_for_policies_at_once_get_the_same_answers)
{
    pthread_t t[4];
    struct policy_worker w[4] = {{0}};
    for (int i = 0; i < 4; i++) {
        w[i].cuda = tu_cuda(0).type;
        cr_assert_eq(pthread_create(&t[i], NULL, ask_policies, &w[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        cr_assert_eq(w[i].mismatches, 0, "thread %d", i);
    }
}

/* ---- the op list -------------------------------------------------------------------------- */

Test(autocast, matmul_linear_conv_and_attention_run_in_bfloat16)
{
    uint64_t seed = 2;
    const int64_t sx[2] = {8, 16}, sw[2] = {4, 16}, sb[1] = {4};
    weft_tensor *x = random_tensor(2, sx, WEFT_F32, &seed), *w = random_tensor(2, sw, WEFT_F32, &seed);
    weft_tensor *b = random_tensor(1, sb, WEFT_F32, &seed);
    const int64_t si[4] = {2, 3, 6, 6}, sk[4] = {5, 3, 3, 3}, sc[1] = {5};
    weft_tensor *img = random_tensor(4, si, WEFT_F32, &seed), *k = random_tensor(4, sk, WEFT_F32, &seed);
    weft_tensor *kb = random_tensor(1, sc, WEFT_F32, &seed);
    const int64_t sq[3] = {2, 5, 8};
    weft_tensor *q = random_tensor(3, sq, WEFT_F32, &seed);

    /* outside a scope everything stays float32 */
    cr_assert_eq(weft_matmul(x, weft_t(w))->dtype, WEFT_F32);
    cr_assert_eq(weft_linear(x, w, b)->dtype, WEFT_F32);

    weft_autocast_state prev = cpu_bf16();
    cr_assert_eq(weft_matmul(x, weft_t(w))->dtype, WEFT_BF16);
    cr_assert_eq(weft_linear(x, w, b)->dtype, WEFT_BF16, "the bias must be cast too");
    cr_assert_eq(weft_linear(x, w, NULL)->dtype, WEFT_BF16);
    cr_assert_eq(weft_linear_relu(x, w, b)->dtype, WEFT_BF16);
    cr_assert_eq(weft_conv2d(img, k, kb, NULL)->dtype, WEFT_BF16);
    cr_assert_eq(weft_scaled_dot_product_attention(q, q, q, NULL)->dtype, WEFT_BF16);
    /* the inputs themselves are not touched */
    cr_assert_eq(x->dtype, WEFT_F32);
    cr_assert_eq(w->dtype, WEFT_F32);
    weft_autocast_end(prev);
    tu_assert_no_error();
}

/* The ops whose policies differ between the tables, on bfloat16 inputs, on each device:
 * CUDA's lists run softmax, sums, exp, log, pow and the norms in float32, the cpu's keep
 * them in bfloat16 (PyTorch 1.13 under torch.autocast("cpu")); both send prod, cdist and
 * the losses to float32; max_unpool2d goes to float32 on the cpu only. */
static void check_fp32_lists(weft_device dev, bool cuda_lists)
{
    uint64_t seed = 3;
    const int64_t s[2] = {6, 5}, sc[1] = {5};
    weft_tensor *h = on(random_tensor(2, s, WEFT_BF16, &seed), dev);
    weft_tensor *h2 = on(random_tensor(2, s, WEFT_BF16, &seed), dev);
    weft_tensor *gamma = on(random_tensor(1, sc, WEFT_F32, &seed), dev);
    weft_tensor *target = on(tu_tensor(1, (int64_t[]){6}, (double[]){0, 1, 2, 3, 4, 0}, WEFT_I64), dev);
    const int64_t sn[1] = {5};
    struct weft_cross_entropy_params ce = weft_cross_entropy_defaults();
    weft_tensor *rm = on(weft_zeros(1, sc, WEFT_F32, WEFT_CPU), dev);
    weft_tensor *rv = on(weft_ones(1, sc, WEFT_F32, WEFT_CPU), dev);
    const int64_t si[4] = {1, 2, 4, 4};
    struct weft_pool2d_params pool = {.kernel = {2, 2}, .stride = {2, 2}};
    weft_tensor *idx = NULL;
    weft_tensor *pooled = weft_max_pool2d_with_indices(on(random_tensor(4, si, WEFT_BF16, &seed), dev),
                                                       &pool, &idx);
    cr_assert_not_null(pooled, "%s", weft_error_message());

    /* outside: bfloat16 in, bfloat16 out */
    cr_assert_eq(weft_softmax(h, 1)->dtype, WEFT_BF16);
    cr_assert_eq(weft_sum(h, 0, NULL, false)->dtype, WEFT_BF16);

    weft_autocast_state prev = weft_autocast_begin(dev.type, WEFT_BF16);
    tu_assert_no_error();
    enum weft_dtype listed = cuda_lists ? WEFT_F32 : WEFT_BF16;
    cr_expect_eq(weft_softmax(h, 1)->dtype, listed);
    cr_expect_eq(weft_log_softmax(h, 1)->dtype, listed);
    cr_expect_eq(weft_sum(h, 0, NULL, false)->dtype, listed);
    cr_expect_eq(weft_exp(h)->dtype, listed);
    cr_expect_eq(weft_log(h)->dtype, listed);
    cr_expect_eq(weft_pow_scalar(h, 2)->dtype, listed);
    /* on the cpu layer_norm takes its weight in the input's dtype (PyTorch 1.13 refuses a
     * float32 weight for a bfloat16 input), batch_norm float32 parameters with it */
    weft_tensor *g = cuda_lists ? gamma : weft_to_dtype(gamma, WEFT_BF16);
    cr_expect_eq(weft_layer_norm(h, 1, sn, g, NULL, 1e-5)->dtype, listed);
    weft_tensor *bn = weft_batch_norm(h, rm, rv, gamma, NULL, true, 0.1, 1e-5);
    cr_assert_not_null(bn, "%s", weft_error_message());
    cr_expect_eq(bn->dtype, listed);
    cr_expect_eq(rm->dtype, WEFT_F32, "running statistics are updated in place, not cast");
    cr_expect_eq(weft_prod(h, 0, NULL, false)->dtype, WEFT_F32);
    cr_expect_eq(weft_cdist(h, h2, 2)->dtype, WEFT_F32);
    cr_expect_eq(weft_cross_entropy(h, target, &ce)->dtype, WEFT_F32);
    cr_expect_eq(weft_nll_loss(weft_log_softmax(h, 1), target, &ce)->dtype, WEFT_F32);
    cr_expect_eq(weft_mse_loss(h, h2, WEFT_REDUCTION_MEAN)->dtype, WEFT_F32);
    cr_expect_eq(weft_l1_loss(h, h2, WEFT_REDUCTION_MEAN)->dtype, WEFT_F32);
    cr_expect_eq(weft_binary_cross_entropy_with_logits(h, h2, NULL, WEFT_REDUCTION_MEAN)->dtype,
                 WEFT_F32);
    cr_expect_eq(weft_max_unpool2d(pooled, idx, &pool, NULL)->dtype, cuda_lists ? WEFT_BF16 : WEFT_F32);
    weft_autocast_end(prev);
    tu_assert_no_error();
}

Test(autocast, on_the_cpu_softmax_sums_and_norms_keep_bfloat16_and_losses_take_float32)
{
    check_fp32_lists(WEFT_CPU, false);
}

Test(autocast, on_a_device_with_cudas_lists_softmax_reductions_norms_and_losses_take_float32)
{
    check_fp32_lists(gpu_like(), true);
}

Test(autocast, other_ops_run_in_the_widest_input_dtype)
{
    uint64_t seed = 4;
    const int64_t s[2] = {3, 4};
    weft_tensor *lo = random_tensor(2, s, WEFT_BF16, &seed), *hi = random_tensor(2, s, WEFT_F32, &seed);
    weft_autocast_state prev = cpu_bf16();
    cr_assert_eq(weft_add(lo, hi)->dtype, WEFT_F32);
    cr_assert_eq(weft_mul(lo, lo)->dtype, WEFT_BF16);
    cr_assert_eq(weft_relu(lo)->dtype, WEFT_BF16);
    cr_assert_eq(weft_relu(hi)->dtype, WEFT_F32);
    cr_assert_eq(weft_mean(lo, 0, NULL, false)->dtype, WEFT_BF16);
    weft_autocast_end(prev);
    tu_assert_no_error();
}

Test(autocast, float64_and_other_device_types_are_never_cast)
{
    uint64_t seed = 5;
    const int64_t s[2] = {4, 4};
    weft_tensor *d = random_tensor(2, s, WEFT_F64, &seed), *f = random_tensor(2, s, WEFT_F32, &seed);
    weft_autocast_state prev = cpu_bf16();
    cr_assert_eq(weft_matmul(d, d)->dtype, WEFT_F64);
    weft_autocast_end(prev);
    /* a scope for cuda leaves cpu tensors alone */
    prev = weft_autocast_begin(tu_cuda(0).type, WEFT_F16);
    tu_assert_no_error();
    cr_assert_eq(weft_matmul(f, f)->dtype, WEFT_F32);
    weft_autocast_end(prev);
}

/* ---- gradients ------------------------------------------------------------------------------ */

/* loss = cross_entropy(linear(relu(linear(x, w1, b1)), w2, b2)), under autocast or not. */
static weft_tensor *mlp_loss(weft_tensor *x, weft_tensor *const *p, weft_tensor *target,
                             bool autocast)
{
    weft_autocast_state prev = autocast ? cpu_bf16() : weft_autocast_get();
    struct weft_cross_entropy_params ce = weft_cross_entropy_defaults();
    weft_tensor *h = weft_relu(weft_linear(x, p[0], p[1]));
    weft_tensor *loss = weft_cross_entropy(weft_linear(h, p[2], p[3]), target, &ce);
    weft_autocast_end(prev);
    cr_assert_not_null(loss, "%s", weft_error_message());
    return loss;
}

Test(autocast, gradients_reach_float32_leaves_in_float32)
{
    uint64_t seed = 6;
    const int64_t sx[2] = {16, 32}, s1[2] = {24, 32}, sb1[1] = {24}, s2[2] = {10, 24}, sb2[1] = {10};
    weft_tensor *x = random_tensor(2, sx, WEFT_F32, &seed);
    double tv[16];
    for (int i = 0; i < 16; i++)
        tv[i] = i % 10;
    weft_tensor *target = tu_tensor(1, (int64_t[]){16}, tv, WEFT_I64);
    weft_tensor *p[4] = {random_tensor(2, s1, WEFT_F32, &seed), random_tensor(1, sb1, WEFT_F32, &seed),
                         random_tensor(2, s2, WEFT_F32, &seed), random_tensor(1, sb2, WEFT_F32, &seed)};
    for (int i = 0; i < 4; i++)
        weft_requires_grad_(p[i], true);

    weft_tensor *loss32 = mlp_loss(x, p, target, false);
    cr_assert_eq(weft_backward(loss32, NULL, false), 0);
    weft_tensor *g32[4];
    for (int i = 0; i < 4; i++) {
        g32[i] = weft_grad(p[i]);
        weft_set_grad(p[i], NULL);
    }
    weft_tensor *loss16 = mlp_loss(x, p, target, true);
    cr_assert_eq(loss16->dtype, WEFT_F32, "cross_entropy runs in float32");
    cr_assert_eq(weft_backward(loss16, NULL, false), 0, "%s", weft_error_message());
    for (int i = 0; i < 4; i++) {
        weft_tensor *g = weft_grad(p[i]);
        cr_assert_not_null(g, "parameter %d got no gradient", i);
        cr_assert_eq(g->dtype, WEFT_F32, "parameter %d: gradient in %s", i,
                     weft_dtype_name(g->dtype));
        int64_t n = weft_tensor_numel(g);
        double *ref = malloc((size_t)n * sizeof *ref), amax = 0;
        tu_read(g32[i], ref);
        for (int64_t j = 0; j < n; j++)
            amax = fmax(amax, fabs(ref[j]));
        /* bfloat16 keeps 8 bits: a few percent of the largest gradient */
        tu_assert_close(g, ref, n, 0.05, 0.03 * amax);
        free(ref);
    }
    double l32, l16;
    weft_tensor_item(loss32, &l32);
    weft_tensor_item(loss16, &l16);
    cr_assert_float_eq(l16, l32, 0.02 * fabs(l32) + 1e-3);
}

Test(autocast, backward_inside_the_scope_keeps_each_gradients_dtype)
{
    uint64_t seed = 7;
    const int64_t sx[2] = {8, 16}, sw[2] = {16, 4};
    weft_tensor *x = random_tensor(2, sx, WEFT_F32, &seed), *w = random_tensor(2, sw, WEFT_F32, &seed);
    weft_requires_grad_(w, true);
    weft_autocast_state prev = cpu_bf16();
    weft_tensor *y = weft_sum(weft_matmul(x, w), 0, NULL, false);
    cr_assert_eq(y->dtype, WEFT_BF16, "a bfloat16 product, summed in bfloat16 on the cpu");
    cr_assert_eq(weft_backward(y, NULL, false), 0, "%s", weft_error_message());
    weft_autocast_end(prev);
    weft_tensor *g = weft_grad(w);
    cr_assert_eq(g->dtype, WEFT_F32);
    /* d sum(x w) / dw = x^T 1: column sums of x, whatever the precision of the forward */
    double xv[8 * 16], gv[16 * 4];
    tu_read(x, xv);
    tu_read(g, gv);
    for (int i = 0; i < 16; i++) {
        double s = 0;
        for (int r = 0; r < 8; r++)
            s += xv[r * 16 + i];
        for (int j = 0; j < 4; j++)
            cr_assert_float_eq(gv[i * 4 + j], s, 0.02 * fabs(s) + 0.02);
    }
}

/* ---- the bfloat16 GEMM ---------------------------------------------------------------------- */

/* out = a @ b in a 16-bit dtype against float64 products of the same (rounded) inputs.
 * Output rounding is 2^-9 (bfloat16) or 2^-11 (float16) relative; the float32
 * accumulation adds far less. */
static void check_half_matmul(weft_tensor *a, weft_tensor *b)
{
    weft_tensor *out = weft_matmul(a, b);
    cr_assert_not_null(out, "%s", weft_error_message());
    cr_assert_eq(out->dtype, a->dtype);
    double rel = a->dtype == WEFT_BF16 ? 0x1p-8 : 0x1p-10;
    weft_tensor *ref = weft_matmul(weft_to_dtype(a, WEFT_F64), weft_to_dtype(b, WEFT_F64));
    weft_tensor *mag = weft_matmul(weft_abs(weft_to_dtype(a, WEFT_F64)),
                                   weft_abs(weft_to_dtype(b, WEFT_F64)));
    int64_t n = weft_tensor_numel(out);
    double *o = malloc((size_t)n * sizeof *o), *r = malloc((size_t)n * sizeof *r),
           *m = malloc((size_t)n * sizeof *m);
    tu_read(out, o);
    tu_read(ref, r);
    tu_read(mag, m);
    for (int64_t i = 0; i < n; i++)
        cr_assert_leq(fabs(o[i] - r[i]), fabs(r[i]) * rel + m[i] * 1e-6,
                      "element %lld: %g, expected %g", (long long)i, o[i], r[i]);
    free(o);
    free(r);
    free(m);
}

Test(autocast, bfloat16_matmul_matches_a_float64_reference)
{
    uint64_t seed = 8;
    const int64_t shapes[][3] = {{64, 784, 256}, {64, 256, 128}, {33, 17, 65}, {1, 5, 7}};
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        const int64_t sa[2] = {shapes[i][0], shapes[i][1]}, sb[2] = {shapes[i][1], shapes[i][2]};
        check_half_matmul(random_tensor(2, sa, WEFT_BF16, &seed), random_tensor(2, sb, WEFT_BF16, &seed));
    }
    /* a transposed right factor (Linear's w.t()) and a batch */
    const int64_t sa[2] = {64, 100}, sw[2] = {30, 100};
    check_half_matmul(random_tensor(2, sa, WEFT_BF16, &seed),
                      weft_t(random_tensor(2, sw, WEFT_BF16, &seed)));
    const int64_t ba[3] = {3, 20, 30}, bb[3] = {3, 30, 10};
    check_half_matmul(random_tensor(3, ba, WEFT_BF16, &seed), random_tensor(3, bb, WEFT_BF16, &seed));
    /* a transposed left factor (the weight gradient g^T x) */
    const int64_t sg[2] = {64, 30};
    check_half_matmul(weft_t(random_tensor(2, sg, WEFT_BF16, &seed)),
                      random_tensor(2, sa, WEFT_BF16, &seed));
}

Test(autocast, batched_bfloat16_matmuls_on_two_threads_do_not_share_scratch_space)
{
    /* The batch's products run on both threads at once through one oneDNN primitive:
     * with oneDNN's global scratchpad, 1 first execution in 6 of a new shape came out
     * wrong (max error 27-48 against 0.03), so every K below makes a new primitive. */
    uint64_t seed = 12;
    for (int64_t K = 8; K < 48; K++) {
        const int64_t sq[3] = {2, 70, K}, sk[3] = {2, 130, K};
        check_half_matmul(random_tensor(3, sq, WEFT_BF16, &seed),
                          weft_transpose(random_tensor(3, sk, WEFT_BF16, &seed), -2, -1));
    }
}

Test(autocast, float16_matmul_runs_through_float32_and_matches_a_float64_reference)
{
    uint64_t seed = 9;
    const int64_t sa[2] = {64, 256}, sb[2] = {128, 256};
    check_half_matmul(random_tensor(2, sa, WEFT_F16, &seed),
                      weft_t(random_tensor(2, sb, WEFT_F16, &seed)));
    const int64_t ba[3] = {3, 20, 30}, bb[2] = {30, 10};
    check_half_matmul(random_tensor(3, ba, WEFT_F16, &seed), random_tensor(2, bb, WEFT_F16, &seed));
    const int64_t sg[2] = {64, 30};
    check_half_matmul(weft_t(random_tensor(2, sg, WEFT_F16, &seed)),
                      random_tensor(2, sa, WEFT_F16, &seed));
}

Test(autocast, bfloat16_matmul_rounds_once_from_a_float32_sum)
{
    /* 1 + 2^-9 * 4 terms: a bf16 accumulator would lose each 2^-9 (1 + 2^-9 rounds to 1);
     * a float32 one keeps them and the result 1 + 2^-7 is a bfloat16 value. */
    double av[5] = {1, 1, 1, 1, 1}, bv[5] = {1, 0x1p-9, 0x1p-9, 0x1p-9, 0x1p-9};
    weft_tensor *a = tu_tensor(2, (int64_t[]){1, 5}, av, WEFT_BF16);
    weft_tensor *b = tu_tensor(2, (int64_t[]){5, 1}, bv, WEFT_BF16);
    double out;
    cr_assert_eq(weft_tensor_item(weft_matmul(a, b), &out), 0);
    cr_assert_eq(out, 1 + 0x1p-7);
}

/* ---- GradScaler ----------------------------------------------------------------------------- */

static weft_optimizer *sgd(weft_tensor *p)
{
    weft_options *o = weft_options_new("optim", NULL);
    cr_assert_eq(weft_options_set(o, "lr", "1"), 0);
    weft_optimizer *opt = weft_optimizer_create("sgd", 1, &p, o);
    weft_options_free(o);
    cr_assert_not_null(opt, "%s", weft_error_message());
    return opt;
}

static weft_tensor *param_with_grad(const double *v, const double *g, int64_t n)
{
    weft_tensor *p = tu_tensor(1, &n, v, WEFT_F32);
    weft_requires_grad_(p, true);
    cr_assert_eq(weft_set_grad(p, tu_tensor(1, &n, g, WEFT_F32)), 0, "%s", weft_error_message());
    return p;
}

static void set_grad(weft_tensor *p, const double *g, int64_t n)
{
    cr_assert_eq(weft_set_grad(p, tu_tensor(1, &n, g, WEFT_F32)), 0);
}

Test(autocast, grad_scaler_defaults_are_pytorchs)
{
    weft_grad_scaler *s = weft_grad_scaler_create(NULL);
    cr_assert_eq(weft_grad_scaler_get_scale(s), 65536.0);
    cr_assert_eq(weft_grad_scaler_growth_tracker(s), 0);
    struct weft_grad_scaler_params d = weft_grad_scaler_defaults();
    cr_assert_eq(d.growth_factor, 2.0);
    cr_assert_eq(d.backoff_factor, 0.5);
    cr_assert_eq(d.growth_interval, 2000);
    double lv = 0.25, out;
    weft_tensor *scaled = weft_grad_scaler_scale(s, tu_tensor(0, NULL, &lv, WEFT_F32));
    weft_tensor_item(scaled, &out);
    cr_assert_eq(out, 16384.0);
    weft_grad_scaler_free(s);
    struct weft_grad_scaler_params bad = d;
    bad.backoff_factor = 1.5;
    cr_assert_null(weft_grad_scaler_create(&bad));
    tu_assert_error(WEFT_ERR_VALUE, "The backoff factor must be < 1.0");
}

Test(autocast, unscale_divides_the_gradients_by_the_scale)
{
    weft_grad_scaler *s = weft_grad_scaler_create(NULL);
    const double v[3] = {1, 2, 3}, g[3] = {65536, -32768, 3 * 65536.0};
    weft_tensor *p = param_with_grad(v, g, 3);
    weft_optimizer *opt = sgd(p);
    cr_assert_eq(weft_grad_scaler_unscale_(s, opt), 0);
    const double expect[3] = {1, -0.5, 3};
    tu_assert_close(weft_grad(p), expect, 3, 0, 0);
    cr_assert_neq(weft_grad_scaler_unscale_(s, opt), 0);
    tu_assert_error(WEFT_ERR_RUNTIME, "unscale_() has already been called on this optimizer");
    /* step after an explicit unscale_ does not divide again */
    cr_assert_eq(weft_grad_scaler_step(s, opt), 0);
    cr_assert_not(weft_grad_scaler_step_skipped(s));
    const double stepped[3] = {0, 2.5, 0};
    tu_assert_close(p, stepped, 3, 0, 0);
    cr_assert_eq(weft_grad_scaler_update(s), 0);
    cr_assert_eq(weft_grad_scaler_growth_tracker(s), 1);
    weft_optimizer_free(opt);
    weft_grad_scaler_free(s);
}

static void inf_or_nan_skips_the_step(double bad)
{
    weft_grad_scaler *s = weft_grad_scaler_create(NULL);
    const double v[2] = {1, 2}, g[2] = {bad, 65536};
    weft_tensor *p = param_with_grad(v, g, 2);
    weft_optimizer *opt = sgd(p);
    cr_assert_eq(weft_grad_scaler_step(s, opt), 0);
    cr_assert(weft_grad_scaler_step_skipped(s));
    tu_assert_close(p, v, 2, 0, 0);
    cr_assert_eq(weft_grad_scaler_update(s), 0);
    cr_assert_eq(weft_grad_scaler_get_scale(s), 32768.0);
    cr_assert_eq(weft_grad_scaler_growth_tracker(s), 0);
    /* the next clean step runs with the new scale */
    const double g2[2] = {32768, 65536};
    set_grad(p, g2, 2);
    cr_assert_eq(weft_grad_scaler_step(s, opt), 0);
    cr_assert_not(weft_grad_scaler_step_skipped(s));
    const double stepped[2] = {0, 0};
    tu_assert_close(p, stepped, 2, 0, 0);
    weft_optimizer_free(opt);
    weft_grad_scaler_free(s);
}

Test(autocast, a_step_with_an_inf_gradient_is_skipped_and_the_scale_halves)
{
    inf_or_nan_skips_the_step(INFINITY);
}

Test(autocast, a_step_with_a_nan_gradient_is_skipped_too)
{
    inf_or_nan_skips_the_step(NAN);
}

Test(autocast, the_scale_grows_after_growth_interval_clean_steps)
{
    struct weft_grad_scaler_params d = weft_grad_scaler_defaults();
    d.init_scale = 4;
    d.growth_interval = 3;
    weft_grad_scaler *s = weft_grad_scaler_create(&d);
    const double v[1] = {0}, g[1] = {0};
    weft_tensor *p = param_with_grad(v, g, 1);
    weft_optimizer *opt = sgd(p);
    const double expect_scale[6] = {4, 4, 8, 8, 8, 16};
    for (int i = 0; i < 6; i++) {
        set_grad(p, g, 1);
        cr_assert_eq(weft_grad_scaler_step(s, opt), 0);
        cr_assert_eq(weft_grad_scaler_update(s), 0);
        cr_assert_eq(weft_grad_scaler_get_scale(s), expect_scale[i], "after step %d: %g", i + 1,
                     weft_grad_scaler_get_scale(s));
        cr_assert_eq(weft_grad_scaler_growth_tracker(s), (i + 1) % 3);
    }
    cr_assert_neq(weft_grad_scaler_update(s), 0);
    tu_assert_error(WEFT_ERR_RUNTIME, "No inf checks were recorded prior to update.");
    weft_optimizer_free(opt);
    weft_grad_scaler_free(s);
}

Test(autocast, the_scaler_state_round_trips_through_checkpoint_metadata)
{
    struct weft_grad_scaler_params d = weft_grad_scaler_defaults();
    d.init_scale = 3.0e-5; /* not a short decimal: must come back bit for bit */
    weft_grad_scaler *s = weft_grad_scaler_create(&d);
    const double v[1] = {0}, g[1] = {1};
    weft_tensor *p = param_with_grad(v, g, 1);
    weft_optimizer *opt = sgd(p);
    for (int i = 0; i < 5; i++) {
        set_grad(p, g, 1);
        weft_grad_scaler_step(s, opt);
        weft_grad_scaler_update(s);
    }
    struct weft_metadata *m = weft_metadata_new();
    cr_assert_eq(weft_grad_scaler_state_export(s, m), 0);
    cr_assert_not_null(weft_metadata_get(m, "scaler.scale"));
    cr_assert_str_eq(weft_metadata_get(m, "scaler.growth_tracker"), "5");
    weft_grad_scaler *r = weft_grad_scaler_create(NULL);
    cr_assert_eq(weft_grad_scaler_state_import(r, m), 0);
    cr_assert_eq(weft_grad_scaler_get_scale(r), weft_grad_scaler_get_scale(s));
    cr_assert_eq(weft_grad_scaler_get_scale(r), (double)(float)3.0e-5);
    cr_assert_eq(weft_grad_scaler_growth_tracker(r), 5);
    /* malformed values are refused by name */
    weft_metadata_set(m, "scaler.scale", "-1");
    cr_assert_neq(weft_grad_scaler_state_import(r, m), 0);
    tu_assert_error(WEFT_ERR_VALUE, "'scaler.scale' = '-1'");
    weft_metadata_set(m, "scaler.scale", "8");
    weft_metadata_set(m, "scaler.growth_tracker", "three");
    cr_assert_neq(weft_grad_scaler_state_import(r, m), 0);
    tu_assert_error(WEFT_ERR_VALUE, "scaler.growth_tracker");
    weft_metadata_free(m);
    weft_optimizer_free(opt);
    weft_grad_scaler_free(s);
    weft_grad_scaler_free(r);
}

Test(autocast, a_disabled_scaler_passes_everything_through)
{
    struct weft_grad_scaler_params d = weft_grad_scaler_defaults();
    d.enabled = false;
    weft_grad_scaler *s = weft_grad_scaler_create(&d);
    const double v[1] = {1}, g[1] = {INFINITY};
    weft_tensor *p = param_with_grad(v, g, 1);
    weft_optimizer *opt = sgd(p);
    double lv = 2, out;
    weft_tensor_item(weft_grad_scaler_scale(s, tu_tensor(0, NULL, &lv, WEFT_F32)), &out);
    cr_assert_eq(out, 2);
    cr_assert_eq(weft_grad_scaler_step(s, opt), 0);
    cr_assert_eq(weft_grad_scaler_update(s), 0);
    double pv;
    weft_tensor_item(p, &pv);
    cr_assert(isinf(pv), "a disabled scaler steps whatever the gradient");
    weft_optimizer_free(opt);
    weft_grad_scaler_free(s);
}
