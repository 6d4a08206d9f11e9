/* plugins/cpu/cpu.h: what the CPU plugin's files share (not installed, not ABI). */
#ifndef WEFT_CPU_H
#define WEFT_CPU_H

#include <stdbool.h>
#include <stdint.h>

#include <weft.h>
#include <weft/backend.h>
#include <weft/half.h>
#include <weft/dtype_kernels.h>
#include <weft/kernel.h>

/* Hot loops that compute (transcendental activations, attention) are also compiled for
 * x86-64-v4 (AVX-512) and x86-64-v3 (AVX2, FMA) beside the baseline's SSE2, the best the
 * processor runs chosen at load time (GCC's target_clones: an ifunc). GELU's loops alone
 * were a third of a GPT step at SSE2 width; bench/gpt-throughput.sh went from 0.87x
 * PyTorch to 1.12x with v3 and 1.52x with v4 as well. Helpers such a loop calls must be
 * inlined to be compiled into each version, and must not carry optimize attributes of
 * their own (gcc then refuses to inline them into a clone). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
#define CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CPU_CLONES
#endif

/* Asks for vectorisation of a loop whose iterations are independent: -O2's cheap cost
 * model would not vectorise these loops otherwise. */
#ifdef _OPENMP
#define CPU_SIMD _Pragma("omp simd")
#else
#define CPU_SIMD
#endif

/* ---- kernel families: each registers its kernels for device type cpu ---------------- */
int cpu_register_copy_kernels(void);
int cpu_register_fill_kernels(void);   /* fill, arange, linspace */
int cpu_register_random_kernels(void); /* rand_uniform, rand_normal, randint */
int cpu_register_unary_kernels(void);
int cpu_register_binary_kernels(void); /* binary, where, clamp */
int cpu_register_reduce_kernels(void);
int cpu_register_softmax_kernels(void);
int cpu_register_matmul_kernels(void);
int cpu_register_index_kernels(void);
int cpu_register_conv_kernels(void); /* im2col, col2im */
/* conv2d and its two backward passes through oneDNN (conv_onednn.c; nothing without it) */
int cpu_register_onednn_conv_kernels(void);
int cpu_register_pool_kernels(void); /* max/avg pool2d and their backward */
int cpu_register_norm_kernels(void); /* native_layer_norm and its backward */
int cpu_register_activation_kernels(void); /* gelu_tanh, gelu_backward, add_bias_gelu */
int cpu_register_embedding_kernels(void);  /* embedding_dense_backward */
int cpu_register_attention_kernels(void);  /* sdpa_flash and its backward */
int cpu_register_divmod_kernels(void);     /* floor_divide, remainder */
int cpu_register_scatter_kernels(void);    /* scatter, scatter_reduce */
int cpu_register_interpolate_kernels(void); /* upsample and its backward */
int cpu_register_cdist_kernels(void);       /* cdist and its backward */
int cpu_register_rnn_kernels(void);        /* rnn_layer and its backward */
/* weft/kernel_quant.h's ops: quantize, dequantize, max pool (kernels_quant.c), then the int8
 * linear and conv2d through oneDNN (quant_onednn.c; nothing without it) */
int cpu_register_quant_kernels(void);
int cpu_register_quant_onednn_kernels(void);

/* ---- memory (allocator.c) ---------------------------------------------------------- */
void *cpu_alloc(int index, size_t nbytes);
void cpu_free(int index, void *ptr, size_t nbytes);
int cpu_memory_stats(int index, struct weft_memory_stats *out);
void cpu_empty_cache(int index);
void cpu_reset_peak_memory_stats(int index);

/* ---- float32 GEMM (gemm.c) ----------------------------------------------------------- */
enum cpu_gemm_mode { CPU_GEMM_AUTO, CPU_GEMM_OPENBLAS, CPU_GEMM_ONEDNN };
/* C[M, N] = op(A)[M, K] op(B)[K, N], row-major, overwriting C (beta 0). */
struct cpu_gemm {
    bool trans_a, trans_b;
    int M, N, K, lda, ldb, ldc;
    const float *A, *B;
    float *C;
};
/* Through the provider [cpu] gemm names, or in mode auto the one measured faster for
 * this shape. */
int cpu_sgemm(const struct cpu_gemm *g);
/* report_choices: print each auto choice, with both timings, to stderr. */
void cpu_gemm_configure(enum cpu_gemm_mode mode, bool report_choices);
bool cpu_gemm_have_onednn(void);
/* "sgemm auto: OpenBLAS 0.3.21 ... (COOPERLAKE), oneDNN 2.6.3 (AVX-512 BF16)" */
void cpu_gemm_describe(char *buf, size_t size);

/* ---- oneDNN's matmul primitive (onednn_matmul.c) ------------------------------------------- */
/* C[M, N] = op(A)[M, K] op(B)[K, N], row-major bfloat16, accumulated in float32 and
 * rounded once into C (beta 0). */
struct cpu_gemm_bf16 {
    bool trans_a, trans_b;
    int M, N, K, lda, ldb, ldc;
    const uint16_t *A, *B;
    uint16_t *C;
};
/* Through oneDNN's matmul primitive; 0 or an error code with the error set. */
int cpu_gemm_bf16(const struct cpu_gemm_bf16 *g);
/* False when this build has no oneDNN: bfloat16 products then take the plain loop. */
bool cpu_gemm_bf16_available(void);
/* A float32 product through the matmul primitive (builds with oneDNN only; gemm.c says
 * which shapes); 0 or an error code with the error set. */
int cpu_sgemm_onednn_matmul(const struct cpu_gemm *g);

/* ---- 16-bit float conversions of contiguous runs (convert.c) ----------------------------
 * Bit for bit what weft/half.h's helpers give, NaN, inf, -0, subnormals and ties to even
 * included; vectorised with the widest of AVX-512 and AVX2/F16C that the cpu has and
 * [cpu] simd allows. n may be any length; dst and src must not overlap. */
void cpu_f32_to_bf16(uint16_t *dst, const float *src, int64_t n);
void cpu_bf16_to_f32(float *dst, const uint16_t *src, int64_t n);
void cpu_f32_to_f16(uint16_t *dst, const float *src, int64_t n);
void cpu_f16_to_f32(float *dst, const uint16_t *src, int64_t n);
/* Rounds a float32 accumulator of n elements into dt's storage: one of the two above for
 * WEFT_BF16 and WEFT_F16, nothing for any other dtype (kernels generated for every
 * floating dtype call it only for the 16-bit ones). */
void cpu_round_f32_run(enum weft_dtype dt, void *dst, const float *src, int64_t n);
/* Vector instruction sets, narrowest first. */
enum cpu_simd { CPU_SIMD_NONE, CPU_SIMD_AVX2, CPU_SIMD_AVX512 };
/* The widest set the conversions use: what the cpu has, capped by cpu_simd_limit. */
enum cpu_simd cpu_simd_level(void);
/* Caps it ([cpu] simd; the test suites run each body through it). */
void cpu_simd_limit(enum cpu_simd widest);

/* ---- threads -------------------------------------------------------------------------- */
/* How many times an idle OpenMP thread spins (libgomp's GOMP_SPINCOUNT, one PAUSE each)
 * before it sleeps, by default ([cpu] spin_count): a string, for the manifest. Chosen from
 * the gaps between parallel regions (bench/omp-gaps.sh, in the opening thread's CPU time,
 * so a busy machine does not lengthen them): 20000 spins (0.29-0.36 ms on the Xeon it was
 * measured on, a PAUSE taking 15-18 ns) outlast 99.6-99.97% of the gaps in the training
 * loops of the MLP, CNN, CNN+BN, ResNet, LSTM and GPT configs and in weft-generate, so a
 * quiet machine's workers almost never sleep (10000 left up to 3.8% of the gaps to a
 * wake-up, 5000 up to 37%); yet a thread waiting for one that is off its core gives the
 * core up after a fraction of a millisecond, not after libgomp's 300000 spins (4.4-5.7 ms
 * there). plugin.c's manifest says more. */
#define CPU_SPIN_COUNT "20000"
int cpu_num_threads(void);
/* Below this many elements a loop runs on the calling thread: waking the pool costs
 * more than the work. */
#define CPU_PARALLEL_GRAIN 32768
/* Runs fn(ctx, begin, end) over [0, n) in chunks, in parallel when n >= grain and we are
 * not already inside a parallel region. */
void cpu_parallel_for(int64_t n, int64_t grain, void (*fn)(void *ctx, int64_t begin, int64_t end),
                      void *ctx);
/* Runs an iterator's loop over all its elements, split across threads when large. */
void cpu_iter_parallel(const struct weft_iter *it, weft_iter_loop_fn loop, void *ctx);

/* ---- dtypes ----------------------------------------------------------------------------
 * Kernels are written once against weft/dtype_kernels.h's X-macro lists
 * (WEFT_FOR_ALL_DTYPES, ...) and weft_load_<name>/weft_store_<name>, never pasted. */

/* Runs loop over ops[0..nops) (out first, all of one shape; itemsize[k] is operand k's):
 * as flat arrays when every operand is contiguous, else through the core's iterator, in
 * parallel above CPU_PARALLEL_GRAIN (kernels_binary.c). */
int cpu_elementwise_run(int nops, const weft_tensor *const *ops, const int64_t *itemsize,
                        weft_iter_loop_fn loop, void *ctx);

/* Any dtype as double, and double into any dtype (C conversion rules; bool is != 0). */
double cpu_load_as_double(enum weft_dtype dt, const void *p);
void cpu_store_from_double(enum weft_dtype dt, void *p, double v);

#endif
