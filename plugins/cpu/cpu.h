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
 * PyTorch to 1.12x with v3 and 1.52x with v4 as well. LayerNorm's rows had been left at
 * SSE2: float32 [4096, 768] at 2 threads, forward 0.95-1.45 -> 0.60 ms and backward
 * 3.7-6.7 -> 1.7 ms with the clones. Helpers such a loop calls must be
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

/* ---- the kernels (plugin.c registers them from one table) ---------------------------
 * Each family's file: a kernel per op that takes every dtype the table gives it, or,
 * for the families generated per op and dtype, a table of their own. */
/* kernels_copy.c */
int cpu_copy_kernel(const struct weft_op_call *call);
/* kernels_fill.c */
int cpu_fill_kernel(const struct weft_op_call *call);
int cpu_arange_kernel(const struct weft_op_call *call);
int cpu_linspace_kernel(const struct weft_op_call *call);
/* kernels_reduce.c */
int cpu_reduce_kernel(const struct weft_op_call *call);
/* kernels_softmax.c */
int cpu_softmax_kernel(const struct weft_op_call *call);
/* kernels_matmul.c */
int cpu_matmul_kernel(const struct weft_op_call *call);
/* kernels_index.c */
int cpu_index_select_kernel(const struct weft_op_call *call);
int cpu_gather_kernel(const struct weft_op_call *call);
int cpu_scatter_add_kernel(const struct weft_op_call *call);
/* kernels_random.c */
int cpu_random_kernel(const struct weft_op_call *call);
/* kernels_conv.c */
int cpu_im2col_kernel(const struct weft_op_call *call);
int cpu_col2im_kernel(const struct weft_op_call *call);
/* kernels_pool.c */
int cpu_pool_kernel(const struct weft_op_call *call);
int cpu_pool_backward_kernel(const struct weft_op_call *call);
/* kernels_norm.c */
int cpu_native_layer_norm_kernel(const struct weft_op_call *call);
int cpu_native_layer_norm_backward_kernel(const struct weft_op_call *call);
/* kernels_embedding.c */
int cpu_embedding_dense_backward_kernel(const struct weft_op_call *call);
/* kernels_attention.c */
int cpu_sdpa_flash_kernel(const struct weft_op_call *call);
int cpu_sdpa_flash_backward_kernel(const struct weft_op_call *call);
/* kernels_scatter.c */
int cpu_scatter_kernel(const struct weft_op_call *call);
int cpu_scatter_reduce_kernel(const struct weft_op_call *call);
int cpu_cumsum_kernel(const struct weft_op_call *call);
int cpu_cumprod_kernel(const struct weft_op_call *call);
int cpu_sort_kernel(const struct weft_op_call *call);
/* kernels_interpolate.c */
int cpu_upsample_kernel(const struct weft_op_call *call);
int cpu_upsample_backward_kernel(const struct weft_op_call *call);
/* kernels_cdist.c */
int cpu_cdist_kernel(const struct weft_op_call *call);
int cpu_cdist_backward_kernel(const struct weft_op_call *call);
/* kernels_rnn.c */
int cpu_rnn_layer_kernel(const struct weft_op_call *call);
int cpu_rnn_layer_backward_kernel(const struct weft_op_call *call);
/* Generated per op and dtype: kernels_unary.c, kernels_binary.c, kernels_where_clamp.c,
 * kernels_relu.c (threshold_backward and its fused forms), kernels_activation.c,
 * kernels_divmod.c; and conv2d through oneDNN (conv_onednn.c; empty without it, and
 * registered only when [cpu] conv = onednn). Each ends with a row of fn NULL. */
extern const struct weft_kernel_entry cpu_unary_kernels[];
extern const struct weft_kernel_entry cpu_binary_kernels[];
extern const struct weft_kernel_entry cpu_where_clamp_kernels[];
extern const struct weft_kernel_entry cpu_relu_kernels[];
extern const struct weft_kernel_entry cpu_activation_kernels[];
extern const struct weft_kernel_entry cpu_divmod_kernels[];
extern const struct weft_kernel_entry cpu_onednn_conv_kernels[];
/* weft/kernel_quant.h's ops: quantize, dequantize, max pool (kernels_quant.c), then the int8
 * linear and conv2d through oneDNN (quant_onednn.c; empty without it). */
extern const struct weft_kernel_entry cpu_quant_kernels[];
extern const struct weft_kernel_entry cpu_quant_onednn_kernels[];
/* quantized_conv2d of a 1-channel input on AVX-512 VNNI (quant_conv_direct.c), where
 * oneDNN pads the channels to 4: *done says whether the call was of a shape it takes; the
 * operands are already checked against the contract. 0, or the error's code. */
int cpu_quant_conv_direct(const struct weft_op_call *call, bool *done);

/* ---- memory (allocator.c) ---------------------------------------------------------- */
void *cpu_alloc(int index, size_t nbytes);
void cpu_free(int index, void *ptr, size_t nbytes);
int cpu_memory_stats(int index, struct weft_memory_stats *out);
int cpu_memory_detail(int index, struct weft_memory_detail *out); /* per pool */
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

/* C = alpha op(A)[M, K] op(B)[K, N] + beta C, row-major, float32 or float64, on the
 * calling thread alone: the tile products of a kernel that splits its own work across
 * threads (flash attention), whose bits then do not depend on the number of threads.
 * float32 through [cpu] gemm's provider (oneDNN's sgemm, where built, in mode auto too:
 * auto's trials time whole beta-0 products), float64 through OpenBLAS. 0, or an error
 * code with the error set. */
struct cpu_gemm_tile {
    bool trans_a, trans_b;
    int M, N, K, lda, ldb, ldc;
    double alpha, beta;
    const void *A, *B;
    void *C;
};
int cpu_gemm_tile(enum weft_dtype dt, const struct cpu_gemm_tile *g);

/* ---- oneDNN's matmul primitive (onednn_matmul.c) ------------------------------------------- */
/* C[M, N] = op(A)[M, K] op(B)[K, N], row-major bfloat16, accumulated in float32 and
 * rounded once into C (beta 0): C is bfloat16, or float32 where c_f32. oneDNN 2.6 runs
 * its AMX and AVX512_BF16 brgemm kernels only on dense operands (every ld equal to its
 * matrix's row length); other strides take its slower gemm:jit path. */
struct cpu_gemm_bf16 {
    bool trans_a, trans_b, c_f32;
    int M, N, K, lda, ldb, ldc;
    const uint16_t *A, *B;
    void *C;
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
/* threads.c. The split ([cpu] threads, torch.set_num_threads): how a kernel whose bits
 * depend on its partition cuts its work; fixed for a run. The running count: how many
 * threads execute it, at most the split, fewer while other programs keep the cores busy
 * ([cpu] run_threads = auto); asking for it also sets the calling thread's OpenMP count
 * (read by oneDNN) to it. Results never depend on the running count. */
int cpu_split_threads(void);
int cpu_run_threads(void);
/* "2 threads, run_threads = auto (2 running)", for the plugin's features line. */
void cpu_describe_threads(char *buf, size_t size);
/* Sets the split to n and run_threads to run (0: auto, or 1..n as read_options checked;
 * -1: kept, at most n). */
int cpu_set_threads(int n, int run);
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

/* A kernel family written once in a .inc file, included per dtype by each_dtype.inc,
 * each_floating_dtype.inc or each_integral_dtype.inc (which define DT, ID, T and C):
 * PER_DTYPE(softmax_line) is the function's name for the dtype (softmax_line_f32), LOAD
 * and STORE its weft/dtype_kernels.h accessors. */
#define CPU_CAT_(a, b) a##b
#define CPU_CAT(a, b) CPU_CAT_(a, b)
#define PER_DTYPE(fn) CPU_CAT(CPU_CAT(fn, _), DT)
#define LOAD(p) CPU_CAT(weft_load_, DT)(p)
#define STORE(p, v) CPU_CAT(weft_store_, DT)(p, v)
/* The same for the per-size kernels of each_itemsize.inc: move_4 for SZ 4. */
#define PER_SIZE(fn) CPU_CAT(CPU_CAT(fn, _), SZ)

/* The mask of a vector's first n bytes (n clamped to 0 .. 64): AVX-512's __mmask64 for a
 * masked load or store of a row's last, partial vector. */
static inline uint64_t cpu_first_bytes(int64_t n)
{
    return n >= 64 ? ~(uint64_t)0 : n <= 0 ? 0 : ((uint64_t)1 << n) - 1;
}

/* Scalars arrive as doubles; integers go through int64 (saturated) so that an out-of-range
 * value wraps like PyTorch's cast instead of being undefined. SCALAR_TO(v) is the dtype's
 * conversion in a .inc file. */
static inline int64_t saturate_i64(double v)
{
    if (v != v)
        return 0;
    if (v >= 9223372036854775807.0)
        return INT64_MAX;
    if (v <= -9223372036854775808.0)
        return INT64_MIN;
    return (int64_t)v;
}
#define CPU_INTEGRAL_SCALAR_(name, id, T, C)                                                  \
    static inline C scalar_to_##name(double v) { return (C)saturate_i64(v); }
#define CPU_FLOATING_SCALAR_(name, id, T, C)                                                  \
    static inline C scalar_to_##name(double v) { return (C)v; }
WEFT_FOR_INTEGRAL_DTYPES(CPU_INTEGRAL_SCALAR_)
WEFT_FOR_FLOATING_DTYPES(CPU_FLOATING_SCALAR_)
#undef CPU_INTEGRAL_SCALAR_
#undef CPU_FLOATING_SCALAR_
static inline bool scalar_to_bool(double v) { return v != 0; }
static inline bool scalar_to__Bool(double v) { return v != 0; }
#define SCALAR_TO(v) CPU_CAT(scalar_to_, DT)(v)

/* Runs loop over ops[0..nops) (out first, all of one shape; itemsize[k] is operand k's):
 * as flat arrays when every operand is contiguous, else through the core's iterator, in
 * parallel above CPU_PARALLEL_GRAIN (elementwise_run.c). */
int cpu_elementwise_run(int nops, const weft_tensor *const *ops, const int64_t *itemsize,
                        weft_iter_loop_fn loop, void *ctx);

/* Where line l of the lines along dim starts in t (in elements from its data pointer): l
 * counts the positions of the other dims in row-major order (the scan and sort kernels). */
static inline int64_t cpu_line_start(const weft_tensor *t, int dim, int64_t l)
{
    int64_t off = 0;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (d == dim)
            continue;
        off += (l % t->shape[d]) * t->stride[d];
        l /= t->shape[d];
    }
    return off;
}

/* Any dtype as double, and double into any dtype (C conversion rules; bool is != 0). */
double cpu_load_as_double(enum weft_dtype dt, const void *p);
void cpu_store_from_double(enum weft_dtype dt, void *p, double v);

#endif
