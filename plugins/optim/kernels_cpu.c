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

/* X(name, enum, storage type, compute type, square root in the compute type) */
#define OPT_FOR_DTYPES(X)                                                                     \
    X(f16, WEFT_F16, uint16_t, float, sqrtf)                                                 \
    X(bf16, WEFT_BF16, uint16_t, float, sqrtf)                                               \
    X(f32, WEFT_F32, float, float, sqrtf)                                                    \
    X(f64, WEFT_F64, double, double, sqrt)

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

/* ---- SGD ------------------------------------------------------------------------------ */

/* p, g: [n]; buf: [n] with momentum, else NULL. */
#define SGD_KERNEL(name, E, S, T, SQRT)                                                       \
    ALWAYS_INLINE void sgd_loop_##name(S *p, S *buf, const S *g, int64_t begin, int64_t end, \
                                       T lr, T mu, T keep, T wd, bool decay, bool momentum,   \
                                       bool nesterov, bool first)                             \
    {                                                                                         \
        OPT_SIMD                                                                              \
        for (int64_t i = begin; i < end; i++) {                                              \
            T pv = ld_##name(p, i), d = ld_##name(g, i);                                      \
            if (decay)                                                                        \
                d = d + wd * pv;                                                              \
            if (momentum) {                                                                   \
                T b = first ? d : mu * ld_##name(buf, i) + keep * d;                          \
                st_##name(buf, i, b);                                                         \
                d = nesterov ? d + mu * b : b;                                                \
            }                                                                                 \
            st_##name(p, i, pv - lr * d);                                                     \
        }                                                                                     \
    }                                                                                         \
    static void sgd_range_##name(const struct weft_op_call *c, int64_t begin, int64_t end)   \
    {                                                                                         \
        S *p = data_of(c->out[0]), *buf = data_of(c->out[1]);                                 \
        const S *g = data_of(c->in[0]);                                                      \
        const struct weft_sgd_step_params *a = c->params;                                     \
        const T lr = (T)a->lr, mu = (T)a->momentum;                                           \
        const T keep = (T)(1.0 - a->dampening), wd = (T)a->weight_decay;                      \
        unsigned key = flag_bits(a->weight_decay != 0.0, buf != NULL, buf && a->nesterov,     \
                                 buf && a->first_step);                                       \
        SPECIALIZE(key, sgd_loop_##name, (p, buf, g, begin, end, lr, mu, keep, wd))           \
    }
OPT_FOR_DTYPES(SGD_KERNEL)

/* ---- Adam / AdamW ------------------------------------------------------------------------ */

/* p, g, m, v: [n]; vmax: [n] with amsgrad, else NULL. The fourth flag is unused. */
#define ADAM_KERNEL(name, E, S, T, SQRT)                                                      \
    ALWAYS_INLINE void adam_loop_##name(S *p, S *m, S *v, S *vmax, const S *g, int64_t begin, \
                                        int64_t end, T step_size, T c2_sqrt, T w1, T tb2,     \
                                        T w2, T eps, T decay, T twd, bool decoupled, bool l2,  \
                                        bool amsgrad, bool unused)                            \
    {                                                                                         \
        (void)unused;                                                                         \
        OPT_SIMD                                                                              \
        for (int64_t i = begin; i < end; i++) {                                              \
            T pv = ld_##name(p, i), d = ld_##name(g, i);                                      \
            if (decoupled)                                                                    \
                pv = pv * decay;                                                              \
            else if (l2)                                                                      \
                d = d + twd * pv;                                                             \
            T mv = ld_##name(m, i);                                                           \
            mv = mv + w1 * (d - mv);                                                          \
            T vv = tb2 * ld_##name(v, i) + w2 * (d * d);                                      \
            st_##name(m, i, mv);                                                              \
            st_##name(v, i, vv);                                                              \
            if (amsgrad) {                                                                    \
                T old = ld_##name(vmax, i);                                                   \
                vv = old > vv || isnan(old) ? old : vv;                                     \
                st_##name(vmax, i, vv);                                                       \
            }                                                                                 \
            T denom = SQRT(vv) / c2_sqrt + eps;                                               \
            st_##name(p, i, pv + (-step_size) * (mv / denom));                                \
        }                                                                                     \
    }                                                                                         \
    static void adam_range_##name(const struct weft_op_call *c, int64_t begin, int64_t end)  \
    {                                                                                         \
        S *p = data_of(c->out[0]), *m = data_of(c->out[1]);                                   \
        S *v = data_of(c->in[1]), *vmax = data_of(c->in[2]);                                  \
        const S *g = data_of(c->in[0]);                                                      \
        const struct weft_adam_step_params *a = c->params;                                    \
        const double lr = a->lr, b1 = a->beta1, b2 = a->beta2;                                \
        const double wd = a->weight_decay, t = (double)a->step;                               \
        const bool decoupled = a->decoupled, l2 = !decoupled && wd != 0.0;                    \
        const T step_size = (T)(lr / (1.0 - pow(b1, t)));                                     \
        const T c2_sqrt = (T)sqrt(1.0 - pow(b2, t));                                          \
        const T w1 = (T)(1.0 - b1), tb2 = (T)b2, w2 = (T)(1.0 - b2), eps = (T)a->eps;         \
        const T decay = (T)(1.0 - lr * wd), twd = (T)wd;                                      \
        unsigned key = flag_bits(decoupled, l2, a->amsgrad && vmax, false);                   \
        SPECIALIZE(key, adam_loop_##name,                                                     \
                   (p, m, v, vmax, g, begin, end, step_size, c2_sqrt, w1, tb2, w2, eps, decay, \
                    twd))                                                                     \
    }
OPT_FOR_DTYPES(ADAM_KERNEL)

/* ---- RMSprop ----------------------------------------------------------------------------- */

/* p, g, sq: [n]; ga (centered) and buf (momentum): [n] or NULL. The fourth flag is unused. */
#define RMSPROP_KERNEL(name, E, S, T, SQRT)                                                   \
    ALWAYS_INLINE void rmsprop_loop_##name(S *p, S *sq, S *ga, S *buf, const S *g,           \
                                           int64_t begin, int64_t end, T lr, T alpha, T w,     \
                                           T eps, T wd, T mom, bool decay, bool centered,      \
                                           bool momentum, bool unused)                        \
    {                                                                                         \
        (void)unused;                                                                         \
        for (int64_t i = begin; i < end; i++) {                                              \
            T pv = ld_##name(p, i), d = ld_##name(g, i);                                      \
            if (decay)                                                                        \
                d = d + wd * pv;                                                              \
            T s = alpha * ld_##name(sq, i) + w * (d * d);                                     \
            st_##name(sq, i, s);                                                              \
            T avg;                                                                            \
            if (centered) {                                                                   \
                T a = ld_##name(ga, i);                                                       \
                a = a + w * (d - a);                                                          \
                st_##name(ga, i, a);                                                          \
                avg = SQRT(s - a * a);                                                        \
            } else {                                                                          \
                avg = SQRT(s);                                                                \
            }                                                                                 \
            avg = avg + eps;                                                                  \
            if (momentum) {                                                                   \
                T b = mom * ld_##name(buf, i) + d / avg;                                      \
                st_##name(buf, i, b);                                                         \
                st_##name(p, i, pv + (-lr) * b);                                              \
            } else {                                                                          \
                st_##name(p, i, pv + (-lr) * (d / avg));                                      \
            }                                                                                 \
        }                                                                                     \
    }                                                                                         \
    static void rmsprop_range_##name(const struct weft_op_call *c, int64_t begin,           \
                                     int64_t end)                                             \
    {                                                                                         \
        S *p = data_of(c->out[0]), *sq = data_of(c->out[1]);                                  \
        S *ga = data_of(c->in[1]), *buf = data_of(c->in[2]);                                  \
        const S *g = data_of(c->in[0]);                                                      \
        const struct weft_rmsprop_step_params *a = c->params;                                 \
        const T lr = (T)a->lr, alpha = (T)a->alpha, w = (T)(1.0 - a->alpha);                  \
        const T eps = (T)a->eps, wd = (T)a->weight_decay, mom = (T)a->momentum;               \
        unsigned key = flag_bits(a->weight_decay != 0.0, ga != NULL, buf != NULL, false);     \
        SPECIALIZE(key, rmsprop_loop_##name, (p, sq, ga, buf, g, begin, end, lr, alpha, w,    \
                                              eps, wd, mom))                                  \
    }
OPT_FOR_DTYPES(RMSPROP_KERNEL)

/* ---- entry points -------------------------------------------------------------------------- */

/* The parameter block must be the op's struct (weft/optim_kernels.h). */
static int check_params(const struct weft_op_call *c, size_t want)
{
    if (c->params && c->params_size == want)
        return 0;
    return weft_error_set(WEFT_ERR_VALUE, "%s: expected a %zu-byte parameter block, got %zu bytes",
                          weft_op_name(c->op), want, c->params ? c->params_size : 0);
}

#define DEFINE_ENTRY(fam)                                                                      \
    static int fam##_kernel(const struct weft_op_call *c)                                      \
    {                                                                                         \
        if (check_params(c, sizeof(struct weft_##fam##_step_params)) < 0)                      \
            return WEFT_ERR_VALUE;                                                            \
        int64_t n = weft_tensor_numel(c->out[0]);                                            \
        switch (c->in[0]->dtype) {                                                            \
        case WEFT_F16:                                                                        \
            run_parallel(c, n, fam##_range_f16);                                               \
            return 0;                                                                         \
        case WEFT_BF16:                                                                       \
            run_parallel(c, n, fam##_range_bf16);                                              \
            return 0;                                                                         \
        case WEFT_F32:                                                                        \
            run_parallel(c, n, fam##_range_f32);                                               \
            return 0;                                                                         \
        case WEFT_F64:                                                                        \
            run_parallel(c, n, fam##_range_f64);                                               \
            return 0;                                                                         \
        default:                                                                              \
            return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "\"%s\" not implemented for '%s'", \
                                  weft_op_name(c->op), weft_dtype_torch_name(c->in[0]->dtype)); \
        }                                                                                     \
    }
DEFINE_ENTRY(sgd)
DEFINE_ENTRY(adam)
DEFINE_ENTRY(rmsprop)

const struct weft_kernel_entry opt_cpu_kernels[] = {
    {-1, WEFT_OP_SGD_STEP_NAME, WEFT_DTYPES_FLOATING, sgd_kernel},
    {-1, WEFT_OP_ADAM_STEP_NAME, WEFT_DTYPES_FLOATING, adam_kernel},
    {-1, WEFT_OP_RMSPROP_STEP_NAME, WEFT_DTYPES_FLOATING, rmsprop_kernel},
    {0},
};
