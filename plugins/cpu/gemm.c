/* plugins/cpu/gemm.c: float32 GEMM through the faster provider for each shape.
 *
 * Two libraries do single-precision GEMM here: OpenBLAS and, where the build found it,
 * oneDNN (dnnl_sgemm). Neither wins everywhere: on a 2-core Zen 4 oneDNN was up to 2x
 * faster on some of the MLP's shapes with spinning OpenMP threads and up to 2x slower
 * with passive ones, and 30x slower on a 64x10x128 product (bench: weft-bench matmul).
 * So in mode auto the first products of each shape (transposes, M, N, K, and whether it
 * runs inside a parallel region) run on both, timed, and every later product of that
 * shape uses the faster one, as cudnn.benchmark does.
 * The choice is per process: two runs may pick differently and round differently in the
 * last bits, so a resumed training run would not match an uninterrupted one; that is why
 * [cpu] gemm defaults to a fixed provider (oneDNN where built with it) and auto is asked
 * for. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cblas.h>
#ifdef WEFT_HAVE_ONEDNN
#include "onednn_guard.h"
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

#include "cpu.h"

extern char *openblas_get_config(void);
extern char *openblas_get_corename(void);

/* Until the options are read; plugin.c's default is oneDNN where the build has it. */
static enum cpu_gemm_mode mode = CPU_GEMM_OPENBLAS;
static bool report;

/* ---- the providers ------------------------------------------------------------------- */

/* C[M, N] = op(A)[M, K] op(B)[K, N], row-major, beta 0. */
static void openblas_sgemm(const struct cpu_gemm *g)
{
    cblas_sgemm(CblasRowMajor, g->trans_a ? CblasTrans : CblasNoTrans,
                g->trans_b ? CblasTrans : CblasNoTrans, g->M, g->N, g->K, 1.0f, g->A, g->lda,
                g->B, g->ldb, 0.0f, g->C, g->ldc);
}

#ifdef WEFT_HAVE_ONEDNN
/* Below this many multiply-adds oneDNN's sgemm runs on the calling thread alone. It splits
 * any product across every OpenMP thread, and on the MLP's last layer (64x10x128) that
 * cost 5x the single-threaded time on 2 threads (process CPU time, passive threads: 16.0
 * against 2.4 us; 256x10x128: 20.5 against 7.3 us), where OpenBLAS, which keeps products
 * under 65536 * 4 multiply-adds on one thread, was at 3.2 us. A higher limit did not pay on
 * a 2-core Zen 5: 2^22 (the MLP's middle layer at batch 64 and the CNN's linear layer
 * serial) against 2^19, weft-train interleaved 9 times with [data] workers = 0, paired
 * ratios: MLP b64 0.999, CNN 0.983 (with a reader thread beside the OpenMP ones, b64 had
 * gained 10%). A fixed rule of the shape, so the results do not depend on timings. */
#define ONEDNN_SERIAL_MACS ((int64_t)1 << 19)

/* dnnl_sgemm packs a transposed B on each call, the matmul primitive's brgemm kernels read
 * it as it lies. On a 2-core Zen 5 at 2 threads, GFLOP/s, primitive against dnnl_sgemm
 * (oneDNN's C API called directly, best of 5 x 300 products): 256x256x784 NT 345 against
 * 290, 64x256x784 NT 275 against 239 (at 1 thread 191 against 172), and a tie on shorter
 * ones (256x128x256 NT 313 against 314), where on NN and TN products it lost up to 15%
 * (256x784x64 TN 280 against 329). weft-bench --filter matmul_ before and after this rule:
 * 64x256x784_NT 194 -> 265, 256x256x784_NT 263 -> 356. So NT products big enough for every
 * thread take the primitive: a fixed rule of the shape, as ONEDNN_SERIAL_MACS is. Except
 * products of fewer rows than ONEDNN_MATMUL_MIN_M (one-token decoding: weft-generate's
 * x W^T at batch 1), where dnnl_sgemm's few-row path was 2-3x faster: 1x768x2304 NT 0.072
 * against 0.233 ms, 1x3072x768 0.093 against 0.287, 4x768x2304 0.127 against 0.266; at 16
 * rows the primitive won again (0.396 against 0.666 ms; medians of 20, 2 threads, a direct
 * oneDNN harness on the Zen 5). */
#define ONEDNN_MATMUL_MIN_M 16

static bool onednn_matmul_wins(const struct cpu_gemm *g, bool serial)
{
    return g->trans_b && !g->trans_a && !serial && g->K >= 512 && g->M >= ONEDNN_MATMUL_MIN_M;
}

static int onednn_sgemm(const struct cpu_gemm *g)
{
    bool serial = (int64_t)g->M * g->N * g->K < ONEDNN_SERIAL_MACS;
#ifdef _OPENMP
    serial = serial || omp_in_parallel();
    /* this thread's OpenMP count, which oneDNN reads, to the running count (the path
     * stays the shape's: one chosen by the running count would change the bits) */
    if (!serial)
        cpu_run_threads();
#endif
    if (onednn_matmul_wins(g, serial)) {
        if (cpu_sgemm_onednn_matmul(g) == 0)
            return 0;
        weft_error_clear(); /* a primitive oneDNN would not make: its sgemm still can */
    }
#ifdef _OPENMP
    /* omp_set_num_threads sets the calling thread's own setting, read by oneDNN per call */
    int threads = serial && !omp_in_parallel() ? omp_get_max_threads() : 1;
    if (threads > 1)
        omp_set_num_threads(1);
#endif
    dnnl_status_t st = dnnl_sgemm(g->trans_a ? 'T' : 'N', g->trans_b ? 'T' : 'N', g->M, g->N,
                                  g->K, 1.0f, g->A, g->lda, g->B, g->ldb, 0.0f, g->C, g->ldc);
#ifdef _OPENMP
    if (threads > 1)
        omp_set_num_threads(threads);
#endif
    if (st == dnnl_success)
        return 0;
    return cpu_onednn_error(st, "matmul: oneDNN's sgemm for %d x %d x %d", g->M, g->N, g->K);
}
#endif

static int run_provider(enum cpu_gemm_mode which, const struct cpu_gemm *g)
{
#ifdef WEFT_HAVE_ONEDNN
    if (which == CPU_GEMM_ONEDNN)
        return onednn_sgemm(g);
#else
    (void)which;
#endif
    openblas_sgemm(g);
    return 0;
}

bool cpu_gemm_have_onednn(void)
{
#ifdef WEFT_HAVE_ONEDNN
    return true;
#else
    return false;
#endif
}

/* ---- the per-shape choice ------------------------------------------------------------- */

/* Each of the first TRIALS products of a shape runs on both providers, timed, in turns
 * of which goes first: OpenBLAS writes the caller's C, oneDNN a scratch matrix, so the
 * results of the trials are OpenBLAS's whatever the timings say (two products of one
 * shape during the trials agree bit for bit). From then on the provider with the lower
 * best time runs. The first trial is not counted (oneDNN generates its kernels then,
 * caches are cold). */
#define TRIALS 8

struct choice {
    uint64_t key;      /* 0: empty slot */
    int trials;        /* products timed so far (on both providers) */
    double best[2];    /* seconds: OpenBLAS, oneDNN */
    enum cpu_gemm_mode provider; /* CPU_GEMM_AUTO until chosen */
};

/* Open addressing; when the table is three-quarters full (a program with more shapes
 * than that) new shapes go to OpenBLAS untimed. */
#define CHOICES 1024
static struct choice choices[CHOICES];
static int choices_used;
static pthread_mutex_t choices_lock = PTHREAD_MUTEX_INITIALIZER;

static bool in_parallel(void)
{
#ifdef _OPENMP
    return omp_in_parallel();
#else
    return false;
#endif
}

/* Dimensions up to 2^20 make the key exact; beyond that two shapes may share a choice,
 * which costs speed at worst, never correctness. */
static uint64_t shape_key(const struct cpu_gemm *g)
{
    uint64_t m = (uint64_t)g->M & 0xfffff, n = (uint64_t)g->N & 0xfffff,
             k = (uint64_t)g->K & 0xfffff;
    return 1 | (uint64_t)g->trans_a << 1 | (uint64_t)g->trans_b << 2 |
           (uint64_t)in_parallel() << 3 | m << 4 | n << 24 | k << 44;
}

/* The slot holding key, or the empty one where it goes; NULL when the table is full. */
static struct choice *slot_of(uint64_t key)
{
    uint64_t h = key * 0x9e3779b97f4a7c15ull;
    for (int probe = 0; probe < CHOICES; probe++) {
        struct choice *c = &choices[((h >> 54) + (uint64_t)probe) & (CHOICES - 1)];
        if (c->key == key || c->key == 0)
            return c;
    }
    return NULL;
}

static double now_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Under choices_lock. The provider for this product: the chosen one, or OpenBLAS with
 * *trial set (a trial; *onednn_first says the order), or OpenBLAS when the table has no
 * room. */
static enum cpu_gemm_mode lookup(uint64_t key, bool *trial, bool *onednn_first)
{
    struct choice *c = slot_of(key);
    *trial = false;
    if (!c || (c->key == 0 && choices_used >= CHOICES * 3 / 4))
        return CPU_GEMM_OPENBLAS;
    if (c->key == 0) {
        *c = (struct choice){.key = key, .best = {1e300, 1e300}};
        choices_used++;
    }
    if (c->provider != CPU_GEMM_AUTO)
        return c->provider;
    *trial = true;
    *onednn_first = c->trials % 2;
    return CPU_GEMM_OPENBLAS;
}

/* Under choices_lock: one trial's times (seconds: OpenBLAS, oneDNN); chooses after the
 * last. */
static void record(uint64_t key, const struct cpu_gemm *g, const double t[2])
{
    struct choice *c = slot_of(key);
    if (!c || c->key != key || c->provider != CPU_GEMM_AUTO)
        return; /* another thread's trials decided meanwhile */
    for (int p = 0; p < 2 && c->trials > 0; p++)
        if (t[p] < c->best[p])
            c->best[p] = t[p];
    if (++c->trials < TRIALS)
        return;
    c->provider = c->best[1] < c->best[0] ? CPU_GEMM_ONEDNN : CPU_GEMM_OPENBLAS;
    if (report)
        fprintf(stderr,
                "weft-cpu: sgemm %dx%dx%d %c%c%s: openblas %.1f us, onednn %.1f us (best of "
                "%d each) -> %s\n",
                g->M, g->N, g->K, g->trans_a ? 'T' : 'N', g->trans_b ? 'T' : 'N',
                in_parallel() ? " in a parallel region" : "", c->best[0] * 1e6,
                c->best[1] * 1e6, TRIALS - 1,
                c->provider == CPU_GEMM_ONEDNN ? "onednn" : "openblas");
}

int cpu_sgemm(const struct cpu_gemm *g)
{
    if (mode != CPU_GEMM_AUTO || !cpu_gemm_have_onednn())
        return run_provider(mode == CPU_GEMM_ONEDNN ? CPU_GEMM_ONEDNN : CPU_GEMM_OPENBLAS, g);
    uint64_t key = shape_key(g);
    bool trial, onednn_first = false;
    pthread_mutex_lock(&choices_lock);
    enum cpu_gemm_mode which = lookup(key, &trial, &onednn_first);
    pthread_mutex_unlock(&choices_lock);
    if (!trial)
        return run_provider(which, g);
    /* oneDNN into scratch [M, N] (ldc N); without memory for it, no trial this time */
    float *scratch = malloc((size_t)g->M * (size_t)g->N * sizeof(float) + 1);
    if (!scratch)
        return run_provider(CPU_GEMM_OPENBLAS, g);
    struct cpu_gemm s = *g;
    s.C = scratch;
    s.ldc = g->N;
    double t[2];
    int rc = 0;
    for (int k = 0; k < 2 && rc == 0; k++) {
        bool dnnl = (k == 0) == onednn_first;
        double t0 = now_seconds();
        rc = run_provider(dnnl ? CPU_GEMM_ONEDNN : CPU_GEMM_OPENBLAS, dnnl ? &s : g);
        t[dnnl] = now_seconds() - t0;
    }
    free(scratch);
    if (rc != 0) { /* oneDNN failed: OpenBLAS for this shape from now on */
        weft_error_clear();
        t[0] = 0;
        t[1] = 1e300;
        rc = run_provider(CPU_GEMM_OPENBLAS, g);
    }
    pthread_mutex_lock(&choices_lock);
    record(key, g, t);
    pthread_mutex_unlock(&choices_lock);
    return rc;
}

/* ---- products inside a kernel's own parallel loop ------------------------------------- */

int cpu_gemm_tile(enum weft_dtype dt, const struct cpu_gemm_tile *g)
{
    int rc = 0;
#ifdef _OPENMP
    /* Inside a parallel region both libraries run on the calling thread already; outside
     * one (a kernel with too few units to split) they would split a product, and its
     * bits, across the threads. */
    int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
    if (threads > 1)
        omp_set_num_threads(1);
#endif
    if (dt == WEFT_F64) {
        cblas_dgemm(CblasRowMajor, g->trans_a ? CblasTrans : CblasNoTrans,
                    g->trans_b ? CblasTrans : CblasNoTrans, g->M, g->N, g->K, g->alpha, g->A,
                    g->lda, g->B, g->ldb, g->beta, g->C, g->ldc);
#ifdef WEFT_HAVE_ONEDNN
    } else if (mode != CPU_GEMM_OPENBLAS) {
        dnnl_status_t st = dnnl_sgemm(g->trans_a ? 'T' : 'N', g->trans_b ? 'T' : 'N', g->M, g->N,
                                      g->K, (float)g->alpha, g->A, g->lda, g->B, g->ldb,
                                      (float)g->beta, g->C, g->ldc);
        if (st != dnnl_success)
            rc = cpu_onednn_error(st, "oneDNN's sgemm for a %d x %d x %d tile", g->M, g->N, g->K);
#endif
    } else {
        cblas_sgemm(CblasRowMajor, g->trans_a ? CblasTrans : CblasNoTrans,
                    g->trans_b ? CblasTrans : CblasNoTrans, g->M, g->N, g->K, (float)g->alpha,
                    g->A, g->lda, g->B, g->ldb, (float)g->beta, g->C, g->ldc);
    }
#ifdef _OPENMP
    if (threads > 1)
        omp_set_num_threads(threads);
#endif
    return rc;
}

/* ---- set-up and description ------------------------------------------------------------- */

void cpu_gemm_configure(enum cpu_gemm_mode m, bool report_choices)
{
    mode = m;
    report = report_choices;
    pthread_mutex_lock(&choices_lock);
    memset(choices, 0, sizeof choices);
    choices_used = 0;
    pthread_mutex_unlock(&choices_lock);
}

#ifdef WEFT_HAVE_ONEDNN
static const char *onednn_isa_name(dnnl_cpu_isa_t isa)
{
    switch (isa) {
    case dnnl_cpu_isa_sse41: return "SSE4.1";
    case dnnl_cpu_isa_avx: return "AVX";
    case dnnl_cpu_isa_avx2: return "AVX2";
    case dnnl_cpu_isa_avx512_mic: return "AVX-512 (MIC)";
    case dnnl_cpu_isa_avx512_mic_4ops: return "AVX-512 (MIC 4ops)";
    case dnnl_cpu_isa_avx512_core: return "AVX-512";
    case dnnl_cpu_isa_avx512_core_vnni: return "AVX-512 VNNI";
    case dnnl_cpu_isa_avx512_core_bf16: return "AVX-512 BF16";
    case dnnl_cpu_isa_avx512_core_amx: return "AVX-512 AMX";
    case dnnl_cpu_isa_avx2_vnni: return "AVX2 VNNI";
    default: return "generic";
    }
}
#endif

void cpu_gemm_describe(char *buf, size_t size)
{
    static const char *const names[] = {"auto", "openblas", "onednn"};
    int n = snprintf(buf, size, "sgemm %s: %s (%s)", names[mode], openblas_get_config(),
                     openblas_get_corename());
#ifdef WEFT_HAVE_ONEDNN
    const dnnl_version_t *v = dnnl_version();
    if (n >= 0 && (size_t)n < size)
        snprintf(buf + n, size - (size_t)n,
                 ", oneDNN %d.%d.%d (%s): sgemm, matmul primitive for A B^T with K >= 512; "
                 "bf16 matmul: oneDNN",
                 v->major, v->minor, v->patch, onednn_isa_name(dnnl_get_effective_cpu_isa()));
#else
    if (n >= 0 && (size_t)n < size)
        snprintf(buf + n, size - (size_t)n, ", no oneDNN in this build; bf16 matmul: plain loop");
#endif
}
