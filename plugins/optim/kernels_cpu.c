/* plugins/optim/kernels_cpu.c: the fused update ops on cpu, one pass over a contiguous
 * parameter and its state (weft/optim_kernels.h: sgd_step, adam_step, rmsprop_step). Each kernel
 * is written once and expanded per floating dtype; 16-bit floats compute in float. The
 * arithmetic follows PyTorch's single-tensor implementation operation by operation. */
#include <math.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include <weft/half.h>

#include "optim_plugin.h"

/* Below this many elements the update runs on the calling thread. */
#define OPT_PARALLEL_GRAIN 32768

static inline float ld_f16(const uint16_t *p, int64_t i) { return weft_f16_to_float(p[i]); }
static inline void st_f16(uint16_t *p, int64_t i, float v) { p[i] = weft_float_to_f16(v); }
static inline float ld_bf16(const uint16_t *p, int64_t i) { return weft_bf16_to_float(p[i]); }
static inline void st_bf16(uint16_t *p, int64_t i, float v) { p[i] = weft_float_to_bf16(v); }
static inline float ld_f32(const float *p, int64_t i) { return p[i]; }
static inline void st_f32(float *p, int64_t i, float v) { p[i] = v; }
static inline double ld_f64(const double *p, int64_t i) { return p[i]; }
static inline void st_f64(double *p, int64_t i, double v) { p[i] = v; }

static void *data_of(const weft_tensor *t)
{
    return t ? weft_tensor_data(t) : NULL;
}

typedef void (*range_fn)(const struct weft_op_call *c, int64_t begin, int64_t end);

/* Runs fn over [0, n) in chunks, on several threads when n is large enough. */
static void run_parallel(const struct weft_op_call *c, int64_t n, range_fn fn)
{
#ifdef _OPENMP
    if (n >= OPT_PARALLEL_GRAIN && !omp_in_parallel() && omp_get_max_threads() > 1) {
        int64_t chunks = n / (OPT_PARALLEL_GRAIN / 4);
#pragma omp parallel for schedule(static)
        for (int64_t k = 0; k < chunks; k++)
            fn(c, n * k / chunks, n * (k + 1) / chunks);
        return;
    }
#endif
    fn(c, 0, n);
}

/* Each update loop is written once with its options as arguments and expanded once per
 * combination of options (SPECIALIZE), so that every expansion is straight-line code the
 * compiler vectorizes (meson.build builds this plugin with -O3 -fno-math-errno); with the
 * options tested inside the loop every step ran scalar, at a third of memory speed. */
#define ALWAYS_INLINE static inline __attribute__((always_inline))
/* The update loops are elementwise over distinct arrays: `omp simd` lets GCC vectorise them
 * at -O2 (its cheap cost model will not add the alias checks itself; the SGD loop ran
 * scalar, 7.7% of the MNIST MLP's step). Lanes compute what the scalar loop computes, in
 * the same order, so the values are the same bit for bit. */
#ifdef _OPENMP
#define OPT_SIMD _Pragma("omp simd")
#else
#define OPT_SIMD
#endif
#define UNPACK(...) __VA_ARGS__
#define SPECIALIZE_CASE(k, fn, args)                                                          \
    case k:                                                                                   \
        fn(UNPACK args, ((k) & 1) != 0, ((k) & 2) != 0, ((k) & 4) != 0, ((k) & 8) != 0);     \
        break;
/* fn(args..., f0, f1, f2, f3) with the flags constant: bits 0..3 of key. */
#define SPECIALIZE(key, fn, args)                                                             \
    switch (key) {                                                                            \
        SPECIALIZE_CASE(0, fn, args) SPECIALIZE_CASE(1, fn, args)                             \
        SPECIALIZE_CASE(2, fn, args) SPECIALIZE_CASE(3, fn, args)                             \
        SPECIALIZE_CASE(4, fn, args) SPECIALIZE_CASE(5, fn, args)                             \
        SPECIALIZE_CASE(6, fn, args) SPECIALIZE_CASE(7, fn, args)                             \
        SPECIALIZE_CASE(8, fn, args) SPECIALIZE_CASE(9, fn, args)                             \
        SPECIALIZE_CASE(10, fn, args) SPECIALIZE_CASE(11, fn, args)                           \
        SPECIALIZE_CASE(12, fn, args) SPECIALIZE_CASE(13, fn, args)                           \
        SPECIALIZE_CASE(14, fn, args) SPECIALIZE_CASE(15, fn, args)                           \
    default:                                                                                  \
        break;                                                                                \
    }

static inline unsigned flag_bits(bool f0, bool f1, bool f2, bool f3)
{
    return (unsigned)f0 | (unsigned)f1 << 1 | (unsigned)f2 << 2 | (unsigned)f3 << 3;
}

#define OPT_CAT_(a, b) a##b
#define OPT_CAT(a, b) OPT_CAT_(a, b)
#define PER_DTYPE(fn) OPT_CAT(OPT_CAT(fn, _), DT)
#define LD(p, i) OPT_CAT(ld_, DT)(p, i)
#define ST(p, i, v) OPT_CAT(st_, DT)(p, i, v)
#define DT f16
#define S uint16_t
#define T float
#define SQRT sqrtf
#include "step_loops.inc"
#undef DT
#undef S
#undef T
#undef SQRT
#define DT bf16
#define S uint16_t
#define T float
#define SQRT sqrtf
#include "step_loops.inc"
#undef DT
#undef S
#undef T
#undef SQRT
#define DT f32
#define S float
#define T float
#define SQRT sqrtf
#include "step_loops.inc"
#undef DT
#undef S
#undef T
#undef SQRT
#define DT f64
#define S double
#define T double
#define SQRT sqrt
#include "step_loops.inc"
#undef DT
#undef S
#undef T
#undef SQRT

/* ---- entry points -------------------------------------------------------------------------- */

/* The parameter block must be the op's struct (weft/optim_kernels.h). */
static int check_params(const struct weft_op_call *c, size_t want)
{
    if (c->params && c->params_size == want)
        return 0;
    return weft_error_set(WEFT_ERR_VALUE, "%s: expected a %zu-byte parameter block, got %zu bytes",
                          weft_op_name(c->op), want, c->params ? c->params_size : 0);
}

/* The update of the call's dtype (ranges[dtype]) over all elements. */
static int run_step(const struct weft_op_call *c, size_t params_size,
                    const range_fn ranges[WEFT_DTYPE_COUNT])
{
    if (check_params(c, params_size) < 0)
        return WEFT_ERR_VALUE;
    enum weft_dtype dt = c->in[0]->dtype;
    range_fn fn = dt >= 0 && dt < WEFT_DTYPE_COUNT ? ranges[dt] : NULL;
    if (!fn)
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "\"%s\" not implemented for '%s'",
                              weft_op_name(c->op), weft_dtype_torch_name(dt));
    run_parallel(c, weft_tensor_numel(c->out[0]), fn);
    return 0;
}

#define RANGES(fam)                                                                           \
    {                                                                                         \
        [WEFT_F16] = fam##_range_f16, [WEFT_BF16] = fam##_range_bf16,                         \
        [WEFT_F32] = fam##_range_f32, [WEFT_F64] = fam##_range_f64,                           \
    }
static const range_fn sgd_ranges[WEFT_DTYPE_COUNT] = RANGES(sgd);
static const range_fn adam_ranges[WEFT_DTYPE_COUNT] = RANGES(adam);
static const range_fn rmsprop_ranges[WEFT_DTYPE_COUNT] = RANGES(rmsprop);

static int sgd_kernel(const struct weft_op_call *c)
{
    return run_step(c, sizeof(struct weft_sgd_step_params), sgd_ranges);
}

static int adam_kernel(const struct weft_op_call *c)
{
    return run_step(c, sizeof(struct weft_adam_step_params), adam_ranges);
}

static int rmsprop_kernel(const struct weft_op_call *c)
{
    return run_step(c, sizeof(struct weft_rmsprop_step_params), rmsprop_ranges);
}

const struct weft_kernel_entry opt_cpu_kernels[] = {
    {-1, WEFT_OP_SGD_STEP_NAME, WEFT_DTYPES_FLOATING, sgd_kernel},
    {-1, WEFT_OP_ADAM_STEP_NAME, WEFT_DTYPES_FLOATING, adam_kernel},
    {-1, WEFT_OP_RMSPROP_STEP_NAME, WEFT_DTYPES_FLOATING, rmsprop_kernel},
    {0},
};
