/* plugins/optim/kernels_cpu.c: the fused update ops on cpu, one pass over a contiguous
 * parameter and its state (weft/optim.h: sgd_step, adam_step, rmsprop_step). Each kernel
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

/* X(name, enum, storage type, compute type) */
#define OPT_FOR_DTYPES(X)                                                                     \
    X(f16, WEFT_F16, uint16_t, float)                                                        \
    X(bf16, WEFT_BF16, uint16_t, float)                                                      \
    X(f32, WEFT_F32, float, float)                                                           \
    X(f64, WEFT_F64, double, double)

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

/* ---- SGD ------------------------------------------------------------------------------ */

#define SGD_KERNEL(name, E, S, T)                                                             \
    static void sgd_range_##name(const struct weft_op_call *c, int64_t begin, int64_t end)   \
    {                                                                                         \
        S *p = data_of(c->out[0]), *buf = data_of(c->out[1]);                                 \
        const S *g = data_of(c->in[0]);                                                      \
        const struct weft_sgd_step_params *a = c->params;                                     \
        const T lr = (T)a->lr, mu = (T)a->momentum;                                           \
        const T keep = (T)(1.0 - a->dampening), wd = (T)a->weight_decay;                      \
        const bool decay = a->weight_decay != 0.0, nesterov = a->nesterov;                    \
        const bool first = a->first_step;                                                     \
        for (int64_t i = begin; i < end; i++) {                                              \
            T pv = ld_##name(p, i), d = ld_##name(g, i);                                      \
            if (decay)                                                                        \
                d = d + wd * pv;                                                              \
            if (buf) {                                                                        \
                T b = first ? d : mu * ld_##name(buf, i) + keep * d;                          \
                st_##name(buf, i, b);                                                         \
                d = nesterov ? d + mu * b : b;                                                \
            }                                                                                 \
            st_##name(p, i, pv - lr * d);                                                     \
        }                                                                                     \
    }
OPT_FOR_DTYPES(SGD_KERNEL)

/* ---- Adam / AdamW ------------------------------------------------------------------------ */

#define ADAM_KERNEL(name, E, S, T)                                                            \
    static void adam_range_##name(const struct weft_op_call *c, int64_t begin, int64_t end)  \
    {                                                                                         \
        S *p = data_of(c->out[0]), *m = data_of(c->out[1]);                                   \
        S *v = data_of(c->in[1]), *vmax = data_of(c->in[2]);                                  \
        const S *g = data_of(c->in[0]);                                                      \
        const struct weft_adam_step_params *a = c->params;                                    \
        const double lr = a->lr, b1 = a->beta1, b2 = a->beta2;                                \
        const double wd = a->weight_decay, t = (double)a->step;                               \
        const bool decoupled = a->decoupled, l2 = !decoupled && wd != 0.0;                    \
        const bool amsgrad = a->amsgrad && vmax;                                              \
        const T step_size = (T)(lr / (1.0 - pow(b1, t)));                                     \
        const T c2_sqrt = (T)sqrt(1.0 - pow(b2, t));                                          \
        const T w1 = (T)(1.0 - b1), tb2 = (T)b2, w2 = (T)(1.0 - b2), eps = (T)a->eps;         \
        const T decay = (T)(1.0 - lr * wd), twd = (T)wd;                                      \
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
                vv = old > vv || isnan(old) ? old : vv;                                       \
                st_##name(vmax, i, vv);                                                       \
            }                                                                                 \
            T denom = (T)sqrt(vv) / c2_sqrt + eps;                                            \
            st_##name(p, i, pv + (-step_size) * (mv / denom));                                \
        }                                                                                     \
    }
OPT_FOR_DTYPES(ADAM_KERNEL)

/* ---- RMSprop ----------------------------------------------------------------------------- */

#define RMSPROP_KERNEL(name, E, S, T)                                                         \
    static void rmsprop_range_##name(const struct weft_op_call *c, int64_t begin,           \
                                     int64_t end)                                             \
    {                                                                                         \
        S *p = data_of(c->out[0]), *sq = data_of(c->out[1]);                                  \
        S *ga = data_of(c->in[1]), *buf = data_of(c->in[2]);                                  \
        const S *g = data_of(c->in[0]);                                                      \
        const struct weft_rmsprop_step_params *a = c->params;                                 \
        const T lr = (T)a->lr, alpha = (T)a->alpha, w = (T)(1.0 - a->alpha);                  \
        const T eps = (T)a->eps, wd = (T)a->weight_decay, mom = (T)a->momentum;               \
        const bool decay = a->weight_decay != 0.0;                                            \
        for (int64_t i = begin; i < end; i++) {                                              \
            T pv = ld_##name(p, i), d = ld_##name(g, i);                                      \
            if (decay)                                                                        \
                d = d + wd * pv;                                                              \
            T s = alpha * ld_##name(sq, i) + w * (d * d);                                     \
            st_##name(sq, i, s);                                                              \
            T avg;                                                                            \
            if (ga) {                                                                         \
                T a = ld_##name(ga, i);                                                       \
                a = a + w * (d - a);                                                          \
                st_##name(ga, i, a);                                                          \
                avg = sqrt(s - a * a);                                                        \
            } else {                                                                          \
                avg = sqrt(s);                                                                \
            }                                                                                 \
            avg = avg + eps;                                                                  \
            if (buf) {                                                                        \
                T b = mom * ld_##name(buf, i) + d / avg;                                      \
                st_##name(buf, i, b);                                                         \
                st_##name(p, i, pv + (-lr) * b);                                              \
            } else {                                                                          \
                st_##name(p, i, pv + (-lr) * (d / avg));                                      \
            }                                                                                 \
        }                                                                                     \
    }
OPT_FOR_DTYPES(RMSPROP_KERNEL)

/* ---- entry points -------------------------------------------------------------------------- */

/* The parameter block must be the op's struct (weft/optim.h). */
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

int opt_register_cpu_kernels(void)
{
    const uint32_t mask = WEFT_DTYPES_FLOATING;
    if (weft_kernel_register(opt_sgd_step_op, WEFT_DEVICE_CPU, WEFT_LAYOUT_STRIDED, mask,
                             sgd_kernel) < 0 ||
        weft_kernel_register(opt_adam_step_op, WEFT_DEVICE_CPU, WEFT_LAYOUT_STRIDED, mask,
                             adam_kernel) < 0 ||
        weft_kernel_register(opt_rmsprop_step_op, WEFT_DEVICE_CPU, WEFT_LAYOUT_STRIDED, mask,
                             rmsprop_kernel) < 0)
        return -1;
    return 0;
}
