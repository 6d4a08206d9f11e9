/* plugins/cpu/kernels_binary.c: elementwise binary kernels (out[0] = f(in[0], in[1]) or
 * f(in[0], scalar[0])), WHERE and CLAMP.
 *
 * Every binary op is one expression of `a` and `b`, values of the compute type C (cpu.h:
 * float for the 16-bit floats). BINARY_KERNEL turns an expression into an inner loop for
 * the shared iterator, with vectorisable paths for the shapes that matter (both operands
 * contiguous, one of them a broadcast or scalar value) and a strided one, plus the kernel
 * entry; the op lists below expand it for each dtype family PyTorch has the op for. */
#include <math.h>

#include "cpu.h"

/* Integer ops on unsigned types compare against 0 on purpose (one expression for all). */
#pragma GCC diagnostic ignored "-Wtype-limits"

/* The libm function for the compute type: powf for float, pow for double. */
#define FN2(fn, x, y) _Generic((x), float: fn##f, default: fn)(x, y)

/* Two's-complement wrap-around without signed overflow: the low bits of the 64-bit
 * unsigned result are those of the narrow one. */
#define WRAP(C, x, op, y) ((C)((uint64_t)(x) op (uint64_t)(y)))

/* Integer power by squaring (wrapping), with torch's answers for negative exponents. */
static inline int64_t int_pow(int64_t base, int64_t exp)
{
    if (exp < 0) {
        if (base == 1)
            return 1;
        if (base == -1)
            return (exp & 1) ? -1 : 1;
        return 0;
    }
    uint64_t result = 1, b = (uint64_t)base;
    for (; exp; exp >>= 1) {
        if (exp & 1)
            result *= b;
        b *= b;
    }
    return (int64_t)result;
}

/* Scalars arrive as doubles; integers go through int64 (saturated) so that an out-of-range
 * value wraps like PyTorch's cast instead of being undefined. */
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
#define INTEGRAL_SCALAR(name, id, T, C)                                                       \
    static inline C scalar_to_##name(double v) { return (C)saturate_i64(v); }
#define FLOATING_SCALAR(name, id, T, C)                                                       \
    static inline C scalar_to_##name(double v) { return (C)v; }
WEFT_FOR_INTEGRAL_DTYPES(INTEGRAL_SCALAR)
WEFT_FOR_FLOATING_DTYPES(FLOATING_SCALAR)
static inline bool scalar_to_bool(double v) { return v != 0; }
static inline bool scalar_to__Bool(double v) { return v != 0; }

/* ---- running an inner loop over same-shaped operands ------------------------------------ */

struct flat_job {
    weft_iter_loop_fn loop;
    void *ctx;
    int nops;
    char *data[WEFT_ITER_MAX_OPERANDS];
    int64_t stride[WEFT_ITER_MAX_OPERANDS];
};

static void flat_range(void *vjob, int64_t begin, int64_t end)
{
    const struct flat_job *job = vjob;
    char *data[WEFT_ITER_MAX_OPERANDS];
    for (int k = 0; k < job->nops; k++)
        data[k] = job->data[k] + begin * job->stride[k];
    job->loop(job->ctx, data, job->stride, end - begin);
}

/* PyTorch's contiguity rule (weft_tensor_is_contiguous) for a non-empty strided tensor,
 * inlined because it runs for every operand of every small op. */
static inline bool dense(const weft_tensor *t)
{
    int64_t expected = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->shape[d] == 1)
            continue;
        if (t->stride[d] != expected)
            return false;
        expected *= t->shape[d];
    }
    return true;
}

/* Runs loop over ops[0..nops) (out first, all of one shape; itemsize[k] is operand k's).
 * When every operand is contiguous the loop gets them as flat arrays directly: small
 * tensors are dominated by per-call costs, and the iterator's set-up is the largest of
 * them. Otherwise the iterator walks them in memory order. */
int cpu_elementwise_run(int nops, const weft_tensor *const *ops, const int64_t *itemsize,
                        weft_iter_loop_fn loop, void *ctx)
{
    const weft_tensor *out = ops[0];
    int64_t n = 1;
    for (int d = 0; d < out->ndim; d++)
        n *= out->shape[d];
    if (n == 0)
        return 0;
    /* Only the first nops slots are set: zeroing the rest cost a small op more than its
     * arithmetic. */
    struct flat_job job;
    job.loop = loop;
    job.ctx = ctx;
    job.nops = nops;
    bool flat = true;
    for (int k = 0; k < nops && flat; k++) {
        const weft_tensor *t = ops[k];
        flat = dense(t);
        job.stride[k] = itemsize[k];
        job.data[k] = (char *)t->storage->data + t->offset * itemsize[k];
    }
    if (flat && n < CPU_PARALLEL_GRAIN) {
        loop(ctx, job.data, job.stride, n);
        return 0;
    }
    if (flat) {
        cpu_parallel_for(n, CPU_PARALLEL_GRAIN, flat_range, &job);
        return 0;
    }
    struct weft_iter it;
    int rc = weft_iter_init(&it, nops, ops);
    if (rc != 0)
        return rc;
    cpu_iter_parallel(&it, loop, ctx);
    return 0;
}

/* ---- binary ops ------------------------------------------------------------------------ */

/* ctx: NULL, or the right operand as a compute-type scalar (then in[1] is NULL). */
static int run_binary(const struct weft_op_call *call, const int64_t *itemsize,
                      weft_iter_loop_fn loop, const void *scalar)
{
    const weft_tensor *ops[3] = {call->out[0], call->in[0], call->in[1]};
    bool tensors = call->in[1] != NULL;
    return cpu_elementwise_run(tensors ? 3 : 2, ops, itemsize, loop, tensors ? NULL : (void *)scalar);
}

/* ID: op id suffix; name/T/C: operand dtype (cpu.h); ON/OT: output dtype name, storage. */
#define BINARY_KERNEL(ID, name, id, T, C, ON, OT, EXPR)                                       \
    static void binary_loop_##ID##_##name(void *ctx, char **data, const int64_t *s, int64_t n) \
    {                                                                                         \
        const C *scalar = ctx;                                                                \
        OT *o = (OT *)data[0];                                                                \
        const T *x = (const T *)data[1];                                                      \
        bool oc = s[0] == (int64_t)sizeof(OT), xc = s[1] == (int64_t)sizeof(T);               \
        if (scalar || s[2] == 0) { /* b is one value */                                       \
            const C b = scalar ? *scalar : weft_load_##name(data[2]);                          \
            if (oc && xc) {                                                                   \
                CPU_SIMD for (int64_t i = 0; i < n; i++)                                      \
                {                                                                             \
                    C a = weft_load_##name(&x[i]);                                             \
                    weft_store_##ON(&o[i], (EXPR));                                            \
                }                                                                             \
                return;                                                                       \
            }                                                                                 \
            for (int64_t i = 0; i < n; i++) {                                                 \
                C a = weft_load_##name(data[1] + i * s[1]);                                    \
                weft_store_##ON(data[0] + i * s[0], (EXPR));                                   \
            }                                                                                 \
            return;                                                                           \
        }                                                                                     \
        const T *y = (const T *)data[2];                                                      \
        bool yc = s[2] == (int64_t)sizeof(T);                                                 \
        if (oc && xc && yc) {                                                                 \
            CPU_SIMD for (int64_t i = 0; i < n; i++)                                          \
            {                                                                                 \
                C a = weft_load_##name(&x[i]);                                                 \
                C b = weft_load_##name(&y[i]);                                                 \
                weft_store_##ON(&o[i], (EXPR));                                                \
            }                                                                                 \
            return;                                                                           \
        }                                                                                     \
        if (oc && yc && s[1] == 0) { /* a is one value */                                     \
            const C a = weft_load_##name(data[1]);                                             \
            CPU_SIMD for (int64_t i = 0; i < n; i++)                                          \
            {                                                                                 \
                C b = weft_load_##name(&y[i]);                                                 \
                weft_store_##ON(&o[i], (EXPR));                                                \
            }                                                                                 \
            return;                                                                           \
        }                                                                                     \
        for (int64_t i = 0; i < n; i++) {                                                     \
            C a = weft_load_##name(data[1] + i * s[1]);                                        \
            C b = weft_load_##name(data[2] + i * s[2]);                                        \
            weft_store_##ON(data[0] + i * s[0], (EXPR));                                       \
        }                                                                                     \
    }                                                                                         \
    static int binary_kernel_##ID##_##name(const struct weft_op_call *call)                   \
    {                                                                                         \
        static const int64_t itemsize[3] = {sizeof(OT), sizeof(T), sizeof(T)};                \
        C scalar = scalar_to_##name(call->scalar[0]);                                         \
        return run_binary(call, itemsize, binary_loop_##ID##_##name, &scalar);                \
    }

#define BINARY_ENTRY(ID, name, id, T, C, ON, OT, EXPR)                                        \
    {WEFT_OP_##ID, NULL, WEFT_DTYPE_BIT(id), binary_kernel_##ID##_##name},

/* Comparisons and logical ops exist for every dtype and give bool. */
#define BINARY_BOOL_RESULT_OPS(Y, name, id, T, C)                                             \
    Y(EQ, name, id, T, C, bool, bool, a == b)                                                 \
    Y(NE, name, id, T, C, bool, bool, a != b)                                                 \
    Y(LT, name, id, T, C, bool, bool, a < b)                                                  \
    Y(LE, name, id, T, C, bool, bool, a <= b)                                                 \
    Y(GT, name, id, T, C, bool, bool, a > b)                                                  \
    Y(GE, name, id, T, C, bool, bool, a >= b)                                                 \
    Y(LOGICAL_AND, name, id, T, C, bool, bool, a && b)                                        \
    Y(LOGICAL_OR, name, id, T, C, bool, bool, a || b)

/* maximum/minimum propagate NaN from either side. */
#define BINARY_FLOATING_OPS(Y, name, id, T, C)                                                \
    Y(ADD, name, id, T, C, name, T, a + b)                                                    \
    Y(SUB, name, id, T, C, name, T, a - b)                                                    \
    Y(MUL, name, id, T, C, name, T, a * b)                                                    \
    Y(DIV, name, id, T, C, name, T, a / b)                                                    \
    Y(POW, name, id, T, C, name, T, FN2(pow, a, b))                                           \
    Y(MAXIMUM, name, id, T, C, name, T, (a > b || a != a) ? a : b)                            \
    Y(MINIMUM, name, id, T, C, name, T, (a < b || a != a) ? a : b)                            \
    BINARY_BOOL_RESULT_OPS(Y, name, id, T, C)

#define BINARY_INTEGRAL_OPS(Y, name, id, T, C)                                                \
    Y(ADD, name, id, T, C, name, T, WRAP(C, a, +, b))                                         \
    Y(SUB, name, id, T, C, name, T, WRAP(C, a, -, b))                                         \
    Y(MUL, name, id, T, C, name, T, WRAP(C, a, *, b))                                         \
    Y(POW, name, id, T, C, name, T, (C)int_pow(a, b))                                         \
    Y(MAXIMUM, name, id, T, C, name, T, a > b ? a : b)                                        \
    Y(MINIMUM, name, id, T, C, name, T, a < b ? a : b)                                        \
    BINARY_BOOL_RESULT_OPS(Y, name, id, T, C)

/* bool: add is or, mul is and (torch); no sub, div or pow. */
#define BINARY_BOOL_OPS(Y, name, id, T, C)                                                    \
    Y(ADD, name, id, T, C, name, T, a || b)                                                   \
    Y(MUL, name, id, T, C, name, T, a && b)                                                   \
    Y(MAXIMUM, name, id, T, C, name, T, a || b)                                               \
    Y(MINIMUM, name, id, T, C, name, T, a && b)                                               \
    BINARY_BOOL_RESULT_OPS(Y, name, id, T, C)

#define FLOATING_KERNELS(name, id, T, C) BINARY_FLOATING_OPS(BINARY_KERNEL, name, id, T, C)
#define INTEGRAL_KERNELS(name, id, T, C) BINARY_INTEGRAL_OPS(BINARY_KERNEL, name, id, T, C)
WEFT_FOR_FLOATING_DTYPES(FLOATING_KERNELS)
WEFT_FOR_INTEGRAL_DTYPES(INTEGRAL_KERNELS)
BINARY_BOOL_OPS(BINARY_KERNEL, bool, WEFT_BOOL, bool, bool)

/* ---- where ----------------------------------------------------------------------------
 * Dispatched on the condition (bool); the values' dtype is out[0]'s. Values are only
 * selected, never computed, so the loops move storage values. A NULL value input is a
 * scalar, stored once in the output dtype and read with stride 0. */

struct where_ctx {
    bool tensor[2];                      /* in[1], in[2] are tensors */
    _Alignas(8) unsigned char value[2][8]; /* else their scalar, in the output dtype */
};

#define WHERE_LOOP(name, id, T, C)                                                            \
    static void where_loop_##name(void *vctx, char **data, const int64_t *s, int64_t n)       \
    {                                                                                         \
        const struct where_ctx *ctx = vctx;                                                   \
        const char *p[2];                                                                     \
        int64_t ps[2];                                                                        \
        for (int v = 0, k = 2; v < 2; v++) {                                                  \
            p[v] = ctx->tensor[v] ? data[k] : (const char *)ctx->value[v];                    \
            ps[v] = ctx->tensor[v] ? s[k++] : 0;                                              \
        }                                                                                     \
        if (s[0] == (int64_t)sizeof(T) && s[1] == 1 && ps[0] == (int64_t)sizeof(T) &&         \
            ps[1] == (int64_t)sizeof(T)) {                                                    \
            T *o = (T *)data[0];                                                              \
            const uint8_t *c = (const uint8_t *)data[1];                                      \
            const T *x = (const T *)p[0], *y = (const T *)p[1];                               \
            CPU_SIMD for (int64_t i = 0; i < n; i++) o[i] = c[i] ? x[i] : y[i];               \
            return;                                                                           \
        }                                                                                     \
        if (s[0] == (int64_t)sizeof(T) && s[1] == 1 && ps[0] == 0 &&                          \
            ps[1] == (int64_t)sizeof(T)) { /* masked_fill */                                  \
            T *o = (T *)data[0];                                                              \
            const uint8_t *c = (const uint8_t *)data[1];                                      \
            const T x = *(const T *)p[0], *y = (const T *)p[1];                               \
            CPU_SIMD for (int64_t i = 0; i < n; i++) o[i] = c[i] ? x : y[i];                  \
            return;                                                                           \
        }                                                                                     \
        for (int64_t i = 0; i < n; i++) {                                                     \
            bool c = *(const uint8_t *)(data[1] + i * s[1]) != 0;                             \
            *(T *)(data[0] + i * s[0]) = *(const T *)(c ? p[0] + i * ps[0] : p[1] + i * ps[1]); \
        }                                                                                     \
    }
WEFT_FOR_ALL_DTYPES(WHERE_LOOP)

static int where_kernel(const struct weft_op_call *call)
{
    struct where_ctx ctx = {{call->in[1] != NULL, call->in[2] != NULL}};
    const weft_tensor *ops[4] = {call->out[0], call->in[0]};
    int nops = 2;
    for (int v = 0; v < 2; v++)
        if (ctx.tensor[v])
            ops[nops++] = call->in[1 + v];
    weft_iter_loop_fn loop = NULL;
    int64_t itemsize[4] = {0, 1, 0, 0};
    switch (call->out[0]->dtype) {
#define WHERE_CASE(name, id, T, C)                                                            \
    case id:                                                                                  \
        weft_store_##name(ctx.value[0], scalar_to_##name(call->scalar[0]));                    \
        weft_store_##name(ctx.value[1], scalar_to_##name(call->scalar[1]));                    \
        itemsize[0] = itemsize[2] = itemsize[3] = sizeof(T);                                  \
        loop = where_loop_##name;                                                             \
        break;
        WEFT_FOR_ALL_DTYPES(WHERE_CASE)
#undef WHERE_CASE
    default:
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "\"where\" not implemented for '%s' on cpu",
                              weft_dtype_torch_name(call->out[0]->dtype));
    }
    return cpu_elementwise_run(nops, ops, itemsize, loop, &ctx);
}

/* ---- clamp ------------------------------------------------------------------------------
 * min(max(a, lo), hi) with absent bounds skipped; a NaN input stays NaN (both comparisons
 * are false). */

#define CLAMP_KERNEL(name, id, T, C)                                                          \
    struct clamp_ctx_##name {                                                                 \
        C lo, hi;                                                                             \
        bool has_lo, has_hi;                                                                  \
    };                                                                                        \
    static void clamp_loop_##name(void *vctx, char **data, const int64_t *s, int64_t n)       \
    {                                                                                         \
        const struct clamp_ctx_##name *ctx = vctx;                                            \
        const C lo = ctx->lo, hi = ctx->hi;                                                   \
        const bool has_lo = ctx->has_lo, has_hi = ctx->has_hi;                                \
        if (s[0] == (int64_t)sizeof(T) && s[1] == (int64_t)sizeof(T)) {                       \
            T *o = (T *)data[0];                                                              \
            const T *x = (const T *)data[1];                                                  \
            CPU_SIMD for (int64_t i = 0; i < n; i++)                                          \
            {                                                                                 \
                C v = weft_load_##name(&x[i]);                                                 \
                v = has_lo && v < lo ? lo : v;                                                \
                weft_store_##name(&o[i], has_hi && v > hi ? hi : v);                           \
            }                                                                                 \
            return;                                                                           \
        }                                                                                     \
        for (int64_t i = 0; i < n; i++) {                                                     \
            C v = weft_load_##name(data[1] + i * s[1]);                                        \
            v = has_lo && v < lo ? lo : v;                                                    \
            weft_store_##name(data[0] + i * s[0], has_hi && v > hi ? hi : v);                  \
        }                                                                                     \
    }                                                                                         \
    static int clamp_kernel_##name(const struct weft_op_call *call)                           \
    {                                                                                         \
        struct clamp_ctx_##name ctx = {scalar_to_##name(call->scalar[0]),                     \
                                       scalar_to_##name(call->scalar[1]), call->ints[0] != 0, \
                                       call->ints[1] != 0};                                   \
        const weft_tensor *ops[2] = {call->out[0], call->in[0]};                              \
        static const int64_t itemsize[2] = {sizeof(T), sizeof(T)};                            \
        return cpu_elementwise_run(2, ops, itemsize, clamp_loop_##name, &ctx);                \
    }
WEFT_FOR_INTEGRAL_DTYPES(CLAMP_KERNEL)
WEFT_FOR_FLOATING_DTYPES(CLAMP_KERNEL)

/* ---- threshold_backward (weft/kernel.h) ------------------------------------------------
 * out = t > threshold ? g : 0 in one pass: ReLU's backward. ops: out, g, t (one dtype). */

#define THRESHOLD_BACKWARD_LOOP(name, id, T, C)                                               \
    static void threshold_backward_loop_##name(void *vctx, char **data, const int64_t *s,     \
                                               int64_t n)                                     \
    {                                                                                         \
        const C threshold = *(const C *)vctx;                                                 \
        const C zero = 0;                                                                     \
        if (s[0] == (int64_t)sizeof(T) && s[1] == (int64_t)sizeof(T) &&                       \
            s[2] == (int64_t)sizeof(T)) {                                                     \
            T *o = (T *)data[0];                                                              \
            const T *g = (const T *)data[1], *t = (const T *)data[2];                         \
            /* both loads unconditional: a select the compiler vectorizes, no branch */       \
            CPU_SIMD for (int64_t i = 0; i < n; i++) {                                        \
                C gv = weft_load_##name(g + i), tv = weft_load_##name(t + i);                 \
                weft_store_##name(o + i, tv > threshold ? gv : zero);                         \
            }                                                                                 \
            return;                                                                           \
        }                                                                                     \
        for (int64_t i = 0; i < n; i++) {                                                     \
            C t = weft_load_##name((const T *)(data[2] + i * s[2]));                          \
            C g = weft_load_##name((const T *)(data[1] + i * s[1]));                          \
            weft_store_##name((T *)(data[0] + i * s[0]), t > threshold ? g : zero);           \
        }                                                                                     \
    }                                                                                         \
    static int threshold_backward_##name(const struct weft_op_call *call)                    \
    {                                                                                         \
        const weft_tensor *ops[3] = {call->out[0], call->in[0], call->in[1]};                 \
        const int64_t itemsize[3] = {sizeof(T), sizeof(T), sizeof(T)};                       \
        C threshold = (C)call->scalar[0];                                                     \
        return cpu_elementwise_run(3, ops, itemsize, threshold_backward_loop_##name,          \
                                   &threshold);                                               \
    }
WEFT_FOR_FLOATING_DTYPES(THRESHOLD_BACKWARD_LOOP)

/* ---- add_bias_relu (weft/kernel.h) -----------------------------------------------------
 * Linear's epilogue: y[M, N] = relu(y + bias[N]) in place, rows split across threads. */

struct bias_relu_job {
    char *y;
    const char *bias;
    int64_t N;
};

#define ADD_BIAS_RELU(name, id, T, C)                                                         \
    static void add_bias_relu_rows_##name(void *ctx, int64_t begin, int64_t end)             \
    {                                                                                         \
        const struct bias_relu_job *j = ctx;                                                  \
        const T *bias = (const T *)j->bias;                                                   \
        const int64_t N = j->N;                                                               \
        for (int64_t i = begin; i < end; i++) {                                               \
            T *row = (T *)j->y + i * N;                                                       \
            CPU_SIMD for (int64_t k = 0; k < N; k++) {                                        \
                /* the sum rounded to T first, as add then relu would */                      \
                weft_store_##name(row + k,                                                     \
                                 weft_load_##name(row + k) + weft_load_##name(bias + k));      \
                C a = weft_load_##name(row + k);                                               \
                weft_store_##name(row + k, a < 0 ? (C)0 : a);                                  \
            }                                                                                 \
        }                                                                                     \
    }
WEFT_FOR_FLOATING_DTYPES(ADD_BIAS_RELU)

static int add_bias_relu_kernel(const struct weft_op_call *call)
{
    weft_tensor *y = call->out[0];
    const weft_tensor *b = call->in[0];
    if (y->ndim != 2 || b->ndim != 1 || b->shape[0] != y->shape[1] || b->dtype != y->dtype ||
        !weft_tensor_is_contiguous(y) || !weft_tensor_is_contiguous(b))
        return weft_error_set(WEFT_ERR_RUNTIME, "add_bias_relu: expected a contiguous [M, N] "
                                                "output and [N] bias of its dtype");
    struct bias_relu_job j = {weft_tensor_data(y), weft_tensor_data(b), y->shape[1]};
    void (*rows)(void *, int64_t, int64_t) = NULL;
    switch (y->dtype) {
#define ADD_BIAS_RELU_CASE(name, id, T, C)                                                    \
    case id:                                                                                  \
        rows = add_bias_relu_rows_##name;                                                     \
        break;
        WEFT_FOR_FLOATING_DTYPES(ADD_BIAS_RELU_CASE)
#undef ADD_BIAS_RELU_CASE
    default:
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED,
                              "\"add_bias_relu\" not implemented for '%s' on cpu",
                              weft_dtype_torch_name(y->dtype));
    }
    int64_t grain = CPU_PARALLEL_GRAIN / (j.N > 0 ? j.N : 1);
    cpu_parallel_for(y->shape[0], grain > 0 ? grain : 1, rows, &j);
    return 0;
}

/* ---- threshold_backward_sum (weft/kernel.h) ---------------------------------------------
 * ReLU's backward and the bias gradient in one pass over the gradient: the rows in blocks
 * of TBS_ROWS, each block's column sums (float64) in its own row of partials, which are
 * added in block order afterwards, so the sums do not depend on how blocks fall to
 * threads. */
#define TBS_ROWS 32

struct tbs_job {
    const char *g, *y;
    char *out;
    double *partial; /* [blocks, N] */
    int64_t M, N;
    double threshold;
};

#define THRESHOLD_BACKWARD_SUM(name, id, T, C)                                                \
    static void tbs_blocks_##name(void *ctx, int64_t begin, int64_t end)                     \
    {                                                                                         \
        const struct tbs_job *j = ctx;                                                        \
        const int64_t N = j->N;                                                               \
        const C threshold = (C)j->threshold;                                                  \
        for (int64_t blk = begin; blk < end; blk++) {                                         \
            double *acc = j->partial + blk * N;                                               \
            int64_t last = (blk + 1) * TBS_ROWS < j->M ? (blk + 1) * TBS_ROWS : j->M;         \
            for (int64_t k = 0; k < N; k++)                                                   \
                acc[k] = 0;                                                                   \
            /* g, y, out: [TBS_ROWS, N] rows of the block; acc: [N] */                        \
            for (int64_t i = blk * TBS_ROWS; i < last; i++) {                                 \
                const T *g = (const T *)j->g + i * N, *y = (const T *)j->y + i * N;           \
                T *out = (T *)j->out + i * N;                                                 \
                /* two loops over the row, which is in L1 for the second: GCC vectorised    \
                 * neither half while they were one loop */                                   \
                CPU_SIMD for (int64_t k = 0; k < N; k++) {                                    \
                    C gk = weft_load_##name(g + k); /* loaded either way: no branch */        \
                    weft_store_##name(out + k, weft_load_##name(y + k) > threshold ? gk : (C)0); \
                }                                                                             \
                CPU_SIMD for (int64_t k = 0; k < N; k++) acc[k] += (double)weft_load_##name(out + k); \
            }                                                                                 \
        }                                                                                     \
    }                                                                                         \
    static void tbs_finish_##name(const struct tbs_job *j, int64_t blocks, char *sum)         \
    {                                                                                         \
        T *s = (T *)sum;                                                                      \
        for (int64_t k = 0; k < j->N; k++) {                                                  \
            double total = 0;                                                                 \
            for (int64_t blk = 0; blk < blocks; blk++)                                        \
                total += j->partial[blk * j->N + k];                                          \
            weft_store_##name(s + k, (C)total);                                               \
        }                                                                                     \
    }
WEFT_FOR_FLOATING_DTYPES(THRESHOLD_BACKWARD_SUM)

static int threshold_backward_sum_kernel(const struct weft_op_call *call)
{
    const weft_tensor *g = call->in[0], *y = call->in[1];
    weft_tensor *out = call->out[0], *sum = call->out[1];
    if (g->ndim != 2 || y->ndim != 2 || out->ndim != 2 || sum->ndim != 1 ||
        y->shape[0] != g->shape[0] || y->shape[1] != g->shape[1] ||
        out->shape[0] != g->shape[0] || out->shape[1] != g->shape[1] ||
        sum->shape[0] != g->shape[1] || y->dtype != g->dtype || out->dtype != g->dtype ||
        sum->dtype != g->dtype || !weft_tensor_is_contiguous(g) ||
        !weft_tensor_is_contiguous(y) || !weft_tensor_is_contiguous(out) ||
        !weft_tensor_is_contiguous(sum))
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "threshold_backward_sum: expected contiguous [M, N] gradient, "
                              "input and output and an [N] sum, all of one dtype");
    struct tbs_job j = {weft_tensor_data(g), weft_tensor_data(y), weft_tensor_data(out), NULL,
                        g->shape[0], g->shape[1], call->scalar[0]};
    int64_t blocks = (j.M + TBS_ROWS - 1) / TBS_ROWS;
    size_t bytes = (size_t)(blocks * j.N) * sizeof(double);
    if (bytes > 0 && !(j.partial = cpu_alloc(0, bytes)))
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY,
                              "threshold_backward_sum: out of memory for %lld partial sums",
                              (long long)(blocks * j.N));
    int64_t grain = CPU_PARALLEL_GRAIN / (TBS_ROWS * (j.N > 0 ? j.N : 1));
    switch (g->dtype) {
#define THRESHOLD_BACKWARD_SUM_CASE(name, id, T, C)                                            \
    case id:                                                                                  \
        cpu_parallel_for(blocks, grain > 0 ? grain : 1, tbs_blocks_##name, &j);               \
        tbs_finish_##name(&j, blocks, weft_tensor_data(sum));                                 \
        break;
        WEFT_FOR_FLOATING_DTYPES(THRESHOLD_BACKWARD_SUM_CASE)
#undef THRESHOLD_BACKWARD_SUM_CASE
    default:
        cpu_free(0, j.partial, bytes);
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED,
                              "\"threshold_backward_sum\" not implemented for '%s' on cpu",
                              weft_dtype_torch_name(g->dtype));
    }
    cpu_free(0, j.partial, bytes);
    return 0;
}

const struct weft_kernel_entry cpu_binary_kernels[] = {
#define FLOATING_ENTRIES(name, id, T, C) BINARY_FLOATING_OPS(BINARY_ENTRY, name, id, T, C)
#define INTEGRAL_ENTRIES(name, id, T, C) BINARY_INTEGRAL_OPS(BINARY_ENTRY, name, id, T, C)
    WEFT_FOR_FLOATING_DTYPES(FLOATING_ENTRIES)
    WEFT_FOR_INTEGRAL_DTYPES(INTEGRAL_ENTRIES)
    BINARY_BOOL_OPS(BINARY_ENTRY, bool, WEFT_BOOL, bool, bool)
#define CLAMP_ENTRY(name, id, T, C) {WEFT_OP_CLAMP, NULL, WEFT_DTYPE_BIT(id), clamp_kernel_##name},
    WEFT_FOR_INTEGRAL_DTYPES(CLAMP_ENTRY)
    WEFT_FOR_FLOATING_DTYPES(CLAMP_ENTRY)
#define THRESHOLD_BACKWARD_ENTRY(name, id, T, C)                                              \
    {-1, WEFT_OP_THRESHOLD_BACKWARD_NAME, WEFT_DTYPE_BIT(id), threshold_backward_##name},
    WEFT_FOR_FLOATING_DTYPES(THRESHOLD_BACKWARD_ENTRY)
    {-1, WEFT_OP_THRESHOLD_BACKWARD_SUM_NAME, WEFT_DTYPES_FLOATING, threshold_backward_sum_kernel},
    {-1, WEFT_OP_ADD_BIAS_RELU_NAME, WEFT_DTYPES_FLOATING, add_bias_relu_kernel},
    {WEFT_OP_WHERE, NULL, WEFT_DTYPE_BIT(WEFT_BOOL), where_kernel},
    {0},
};
