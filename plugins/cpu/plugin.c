/* plugins/cpu/plugin.c: the CPU plugin's descriptor, device backend and set-up. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include <cblas.h>

#include <weft/plugin.h>

#include "cpu.h"

/* OpenBLAS's own name for the core (declared here: not every cblas.h carries it). */
extern char *openblas_get_corename(void);

static int cpu_device_count(void *context)
{
    return 1;
}

static int cpu_device_name(void *context, int index, char *buf, size_t size)
{
    snprintf(buf, size, "cpu (%s)", openblas_get_corename());
    return 0;
}

/* Both sides are host memory here (the cpu backend is only asked for cpu<->cpu). */
static int cpu_copy(void *context, weft_tensor *dst, const weft_tensor *src, bool non_blocking)
{
    (void)non_blocking;
    size_t nbytes = (size_t)weft_tensor_numel(src) * weft_tensor_itemsize(src);
    if (nbytes)
        memcpy(weft_tensor_data(dst), weft_tensor_data(src), nbytes);
    return 0;
}

/* [cpu] conv = onednn, read once at load: the conv2d kernels are registered or not. */
static bool conv_onednn;

/* Rebuilt on each call: [cpu] gemm may change when the plugin is configured again. */
static const char *cpu_features(void *context)
{
    static char text[512];
    char gemm[256];
    const char *simd = "baseline x86-64";
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f"))
        simd = "AVX-512";
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        simd = "AVX2 FMA";
    cpu_gemm_describe(gemm, sizeof gemm);
    char threads[96];
    cpu_describe_threads(threads, sizeof threads);
#ifdef _OPENMP
    const char *openmp = "; OpenMP";
#else
    const char *openmp = "";
#endif
    snprintf(text, sizeof text, "%s; %s; conv2d float32: %s; %s%s", simd, gemm,
             conv_onednn ? "oneDNN direct" : "im2col + GEMM", threads, openmp);
    return text;
}

/* The backend methods over functions the plugin also calls itself. */
static void *backend_alloc(void *context, int index, size_t nbytes)
{
    return cpu_alloc(index, nbytes);
}

static void backend_free(void *context, int index, void *ptr, size_t nbytes)
{
    cpu_free(index, ptr, nbytes);
}

static int backend_memory_stats(void *context, int index, struct weft_memory_stats *out)
{
    return cpu_memory_stats(index, out);
}

static void backend_empty_cache(void *context, int index)
{
    cpu_empty_cache(index);
}

static void backend_reset_peak_memory_stats(void *context, int index)
{
    cpu_reset_peak_memory_stats(index);
}

static int backend_memory_detail(void *context, int index, struct weft_memory_detail *out)
{
    return cpu_memory_detail(index, out);
}

static int backend_set_num_threads(void *context, int n)
{
    return cpu_set_threads(n, -1);
}

static int backend_get_num_threads(void *context)
{
    return cpu_split_threads();
}

static const struct weft_backend cpu_backend = {
    .base = WEFT_VTABLE(WEFT_KIND_BACKEND, "cpu", struct weft_backend),
    .device_count = cpu_device_count,
    .device_name = cpu_device_name,
    .alloc = backend_alloc,
    .free = backend_free,
    .copy = cpu_copy,
    .memory_stats = backend_memory_stats,
    .empty_cache = backend_empty_cache,
    .reset_peak_memory_stats = backend_reset_peak_memory_stats,
    .set_num_threads = backend_set_num_threads,
    .get_num_threads = backend_get_num_threads,
    /* PyTorch 1.13's AutocastCPU: its own op lists, bfloat16 only */
    .autocast_policy = "cpu",
    .autocast_dtypes = WEFT_DTYPE_BIT(WEFT_BF16),
    .features = cpu_features,
    .memory_detail = backend_memory_detail,
};

static int cpu_probe(char *why, size_t why_size)
{
    (void)why;
    (void)why_size;
    return 0;
}

/* spin_count: a number of spins, "infinite"/"infinity", or "default" (libgomp's own), for
 * wait_policy = default alone: passive sleeps at once and active spins without end, and
 * libgomp would let the count override either (the manifest does not set it then). */
static int check_spin_count(const weft_options *o, int policy)
{
    static const char *const policies[] = {"default", "passive", "active"};
    const char *v = weft_options_string(o, "spin_count", CPU_SPIN_COUNT);
    if (policy != 0 && weft_options_has(o, "spin_count"))
        return weft_options_bad_value(o, "spin_count", "a spin count bounds the spin of "
                                                       "wait_policy = default, not of "
                                                       "wait_policy = %s: set one of the two",
                                      policies[policy]);
    if (!strcmp(v, "default") || !strcmp(v, "infinite") || !strcmp(v, "infinity"))
        return 0;
    char *end = NULL;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    if (end == v || *end || errno || v[0] == '-' || n > 1000000000000ull)
        return weft_options_bad_value(o, "spin_count", "expected a number of spins from 0 to "
                                                       "10^12, 'infinite' or 'default' "
                                                       "(libgomp's own)");
    return 0;
}

/* [cpu] options. wait_policy and spin_count reached libgomp before this plugin loaded
 * (the manifest's env lines: libgomp reads OMP_WAIT_POLICY and GOMP_SPINCOUNT once, when
 * it loads); reading them here checks their values. */
static int read_options(const weft_options *o)
{
    static const char *const wait_policies[] = {"default", "passive", "active", NULL};
    /* In enum cpu_gemm_mode's order. */
    static const char *const gemm_modes[] = {"auto", "openblas", "onednn", NULL};
    /* The widest vector bodies of the conversion loops (convert.c): auto is the widest
     * the cpu has; a narrower one is for comparing, or for testing the other bodies on a
     * cpu that would never pick them. Above what the cpu has it is the cpu's. */
    static const char *const simd_levels[] = {"auto", "avx512", "avx2", "none", NULL};
    static const enum cpu_simd simd_caps[] = {CPU_SIMD_AVX512, CPU_SIMD_AVX512, CPU_SIMD_AVX2,
                                              CPU_SIMD_NONE};
    /* conv2d: oneDNN's direct convolution (conv_onednn.c) or nn's im2col + GEMM. */
    static const char *const conv_modes[] = {"onednn", "im2col", NULL};
    int policy, gemm, simd, conv;
    bool gemm_report;
    int64_t n, run = 0;
    if (weft_options_choice(o, "wait_policy", wait_policies, 0, &policy) < 0 ||
        check_spin_count(o, policy) < 0 ||
        weft_options_int_range(o, "threads", 0, 0, 4096, &n) < 0 ||
        /* A fixed provider by default, not auto: auto's per-run choice would break exact
         * resume (a resumed run times its shapes again and may pick another provider,
         * other last bits). oneDNN where the build has it: it took half OpenBLAS's CPU
         * time on 1024^3 and on every product of the MNIST MLP, forward and backward, b64
         * and b256, 1 and 2 threads (gemm.c keeps its small products on one thread). */
        weft_options_choice(o, "gemm", gemm_modes,
                            cpu_gemm_have_onednn() ? CPU_GEMM_ONEDNN : CPU_GEMM_OPENBLAS,
                            &gemm) < 0 ||
        weft_options_bool(o, "gemm_report", false, &gemm_report) < 0 ||
        weft_options_choice(o, "simd", simd_levels, 0, &simd) < 0 ||
        weft_options_choice(o, "conv", conv_modes, cpu_gemm_have_onednn() ? 0 : 1, &conv) < 0)
        return WEFT_ERR_CONFIG;
    if (conv == 0 && !cpu_gemm_have_onednn())
        return weft_options_bad_value(o, "conv", "this weft-cpu.so was built without oneDNN "
                                                 "(install libdnnl-dev and rebuild); expected "
                                                 "im2col");
    conv_onednn = conv == 0;
    if (gemm == CPU_GEMM_ONEDNN && !cpu_gemm_have_onednn())
        return weft_options_bad_value(o, "gemm", "this weft-cpu.so was built without oneDNN "
                                                 "(install libdnnl-dev and rebuild); expected "
                                                 "auto or openblas");
    if (n == 0) {
#ifdef _OPENMP
        n = omp_get_max_threads(); /* OMP_NUM_THREADS, or the cores */
#else
        n = 1;
#endif
    }
    /* run_threads: auto (the governor of threads.c), or how many of the threads run */
    const char *rv = weft_options_string(o, "run_threads", "auto");
    if (strcmp(rv, "auto") != 0) {
        char *end = NULL;
        errno = 0;
        run = strtoll(rv, &end, 10);
        if (end == rv || *end || errno || run < 1 || run > n)
            return weft_options_bad_value(o, "run_threads",
                                          "expected auto or an integer from 1 to threads (%lld)",
                                          (long long)n);
    }
    cpu_gemm_configure((enum cpu_gemm_mode)gemm, gemm_report);
    cpu_simd_limit(simd_caps[simd]);
    return cpu_set_threads((int)n, (int)run);
}

/* Every kernel the plugin provides: one row per op whose kernel takes every dtype listed,
 * then the families generated per op and dtype (their own tables). */
static const struct weft_kernel_entry cpu_kernels[] = {
    {WEFT_OP_COPY, NULL, WEFT_DTYPES_ALL, cpu_copy_kernel},
    {WEFT_OP_FILL, NULL, WEFT_DTYPES_ALL, cpu_fill_kernel},
    {WEFT_OP_ARANGE, NULL, WEFT_DTYPES_ALL, cpu_arange_kernel},
    {WEFT_OP_LINSPACE, NULL, WEFT_DTYPES_ALL, cpu_linspace_kernel},
    {WEFT_OP_RAND_UNIFORM, NULL, WEFT_DTYPES_FLOATING, cpu_random_kernel},
    {WEFT_OP_RAND_NORMAL, NULL, WEFT_DTYPES_FLOATING, cpu_random_kernel},
    {WEFT_OP_RANDINT, NULL, WEFT_DTYPES_ALL, cpu_random_kernel},
    {WEFT_OP_SUM, NULL, WEFT_DTYPES_ALL, cpu_reduce_kernel},
    {WEFT_OP_PROD, NULL, WEFT_DTYPES_ALL, cpu_reduce_kernel},
    {WEFT_OP_MEAN, NULL, WEFT_DTYPES_FLOATING, cpu_reduce_kernel},
    {WEFT_OP_VAR, NULL, WEFT_DTYPES_FLOATING, cpu_reduce_kernel},
    {WEFT_OP_MAX, NULL, WEFT_DTYPES_ALL, cpu_reduce_kernel},
    {WEFT_OP_MIN, NULL, WEFT_DTYPES_ALL, cpu_reduce_kernel},
    {WEFT_OP_ARGMAX, NULL, WEFT_DTYPES_ALL & ~WEFT_DTYPE_BIT(WEFT_BOOL), cpu_reduce_kernel},
    {WEFT_OP_ARGMIN, NULL, WEFT_DTYPES_ALL & ~WEFT_DTYPE_BIT(WEFT_BOOL), cpu_reduce_kernel},
    {WEFT_OP_ALL, NULL, WEFT_DTYPES_ALL, cpu_reduce_kernel},
    {WEFT_OP_ANY, NULL, WEFT_DTYPES_ALL, cpu_reduce_kernel},
    {WEFT_OP_SOFTMAX, NULL, WEFT_DTYPES_FLOATING, cpu_softmax_kernel},
    {WEFT_OP_LOG_SOFTMAX, NULL, WEFT_DTYPES_FLOATING, cpu_softmax_kernel},
    {WEFT_OP_MATMUL, NULL, WEFT_DTYPES_ALL & ~WEFT_DTYPE_BIT(WEFT_BOOL), cpu_matmul_kernel},
    {WEFT_OP_INDEX_SELECT, NULL, WEFT_DTYPES_ALL, cpu_index_select_kernel},
    {WEFT_OP_GATHER, NULL, WEFT_DTYPES_ALL, cpu_gather_kernel},
    {WEFT_OP_SCATTER_ADD, NULL, WEFT_DTYPES_ALL, cpu_scatter_add_kernel},
    {WEFT_OP_IM2COL, NULL, WEFT_DTYPES_FLOATING, cpu_im2col_kernel},
    {WEFT_OP_COL2IM, NULL, WEFT_DTYPES_FLOATING, cpu_col2im_kernel},
    {WEFT_OP_MAX_POOL2D, NULL, WEFT_DTYPES_FLOATING, cpu_pool_kernel},
    {WEFT_OP_AVG_POOL2D, NULL, WEFT_DTYPES_FLOATING, cpu_pool_kernel},
    {WEFT_OP_MAX_POOL2D_BACKWARD, NULL, WEFT_DTYPES_FLOATING, cpu_pool_backward_kernel},
    {WEFT_OP_AVG_POOL2D_BACKWARD, NULL, WEFT_DTYPES_FLOATING, cpu_pool_backward_kernel},
    {-1, WEFT_OP_SCATTER_NAME, WEFT_DTYPES_ALL, cpu_scatter_kernel},
    {-1, WEFT_OP_SCATTER_REDUCE_NAME, WEFT_DTYPES_INTEGRAL | WEFT_DTYPES_FLOATING,
     cpu_scatter_reduce_kernel},
    {-1, WEFT_OP_CUMSUM_NAME, WEFT_DTYPES_INTEGRAL | WEFT_DTYPES_FLOATING, cpu_cumsum_kernel},
    {-1, WEFT_OP_CUMPROD_NAME, WEFT_DTYPES_INTEGRAL | WEFT_DTYPES_FLOATING, cpu_cumprod_kernel},
    {-1, WEFT_OP_SORT_NAME, WEFT_DTYPES_ALL, cpu_sort_kernel},
    {-1, WEFT_OP_NATIVE_LAYER_NORM_NAME, WEFT_DTYPES_FLOATING, cpu_native_layer_norm_kernel},
    {-1, WEFT_OP_NATIVE_LAYER_NORM_BACKWARD_NAME, WEFT_DTYPES_FLOATING,
     cpu_native_layer_norm_backward_kernel},
    {-1, WEFT_OP_EMBEDDING_DENSE_BACKWARD_NAME, WEFT_DTYPES_FLOATING,
     cpu_embedding_dense_backward_kernel},
    {-1, WEFT_OP_SDPA_FLASH_NAME, WEFT_DTYPES_FLOATING, cpu_sdpa_flash_kernel},
    {-1, WEFT_OP_SDPA_FLASH_BACKWARD_NAME, WEFT_DTYPES_FLOATING, cpu_sdpa_flash_backward_kernel},
    {-1, WEFT_OP_UPSAMPLE_NAME, WEFT_DTYPES_FLOATING, cpu_upsample_kernel},
    {-1, WEFT_OP_UPSAMPLE_BACKWARD_NAME, WEFT_DTYPES_FLOATING, cpu_upsample_backward_kernel},
    {-1, WEFT_OP_CDIST_NAME, WEFT_DTYPES_FLOATING, cpu_cdist_kernel},
    {-1, WEFT_OP_CDIST_BACKWARD_NAME, WEFT_DTYPES_FLOATING, cpu_cdist_backward_kernel},
    {-1, WEFT_OP_RNN_LAYER_NAME, WEFT_DTYPE_BIT(WEFT_F32) | WEFT_DTYPE_BIT(WEFT_F64),
     cpu_rnn_layer_kernel},
    {-1, WEFT_OP_RNN_LAYER_BACKWARD_NAME, WEFT_DTYPE_BIT(WEFT_F32) | WEFT_DTYPE_BIT(WEFT_F64),
     cpu_rnn_layer_backward_kernel},
    {0},
};

static int cpu_init(const weft_options *options)
{
    /* Options first: a refused value must leave nothing registered. */
    if (read_options(options) < 0)
        return WEFT_ERR_CONFIG;
    const struct weft_kernel_entry *const tables[] = {
        cpu_kernels, cpu_unary_kernels, cpu_binary_kernels, cpu_where_clamp_kernels,
        cpu_relu_kernels, cpu_activation_kernels, cpu_divmod_kernels,
        conv_onednn ? cpu_onednn_conv_kernels : NULL, cpu_quant_kernels, cpu_quant_onednn_kernels,
    };
    int type = weft_register(&cpu_backend);
    if (type < 0)
        return type;
    for (size_t i = 0; i < sizeof tables / sizeof *tables; i++) {
        int rc = weft_kernel_register_table(type, WEFT_LAYOUT_STRIDED, tables[i]);
        if (rc != 0)
            return rc;
    }
    return 0;
}

static void cpu_fini(void)
{
    cpu_empty_cache(0);
}

/* What an idle OpenMP thread does. Between two parallel regions libgomp's workers spin
 * GOMP_SPINCOUNT times (a PAUSE each), then sleep in futex_wait until the next region
 * wakes them. Its own default, 300000 spins, assumes 10 ns a PAUSE ("about 3 ms"); PAUSE
 * takes 15-18 ns on the Xeon this was measured on and up to 140 cycles on others, so
 * 4-20 ms. PyTorch runs with it. On a quiet machine that is best: a training step is
 * tens to hundreds of short regions, and a sleeping worker costs each one a wake-up
 * through the kernel (`passive`, no spin, made the MNIST CNN 44% slower: 19.4k against
 * 34.8k images/s, about 50 us a region). When another process is busy on the cores it
 * collapses: a thread spins for milliseconds, a whole scheduler slice, while the thread
 * it waits for is off its core (the CNN at 460-640 images/s against 7,200-8,100
 * passive).
 * So the default wait is a bounded spin, then sleep: GOMP_SPINCOUNT = CPU_SPIN_COUNT
 * (cpu.h: long enough for 99.6% or more of the gaps between regions of each shipped
 * workload measured, so quiet speed stays; 15 times shorter than libgomp's). It is set unless
 * OMP_WAIT_POLICY is (wait_policy = passive or active, or the user's environment: libgomp
 * lets GOMP_SPINCOUNT override the policy's own spin), and a value the environment
 * already has wins. bench/contention.sh measures it (quiet, beside a busy process, two
 * trainings at once, against PyTorch; --spin sweeps other counts). */
WEFT_PLUGIN_MANIFEST("provides backend:cpu\n"
                     "env OMP_WAIT_POLICY wait_policy default\n"
                     "env GOMP_SPINCOUNT spin_count " CPU_SPIN_COUNT " unless OMP_WAIT_POLICY\n");

static const struct weft_plugin cpu_plugin = {
    .base = WEFT_VTABLE(WEFT_KIND_PLUGIN, "cpu", struct weft_plugin),
    .version = WEFT_VERSION_STRING,
    .description = "strided CPU kernels (OpenMP), GEMM through OpenBLAS and oneDNN",
    .manifest = weft_plugin_manifest,
    .probe = cpu_probe,
    .init = cpu_init,
    .fini = cpu_fini,
};

WEFT_PLUGIN_EXPORT const struct weft_plugin *weft_plugin_init(void)
{
    return &cpu_plugin;
}
