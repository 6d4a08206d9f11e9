/* core/autograd_ops.c: the public entry of every differentiable op. Each one runs the
 * forward front end (forward.h) with grad mode off and, when an input requires grad,
 * records a node whose backward formula is written with weft ops, so it runs on every
 * backend that has the forward kernels. Formulas follow PyTorch's derivatives.yaml. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "forward.h"
#include "weft/autocast.h"
#include "weft/observer.h"

/* ---- recording helpers -------------------------------------------------------------- */

/* Runs `expr` (a forward call) with grad mode off when `rec`. */
#define FORWARD(rec, expr)                                                                    \
    ({                                                                                        \
        bool prev_mode__ = (rec) ? weft_no_grad_begin() : true;                              \
        __typeof__(expr) result__ = (expr);                                                   \
        if (rec)                                                                              \
            weft_grad_mode_restore(prev_mode__);                                              \
        result__;                                                                             \
    })

/* Under autocast, returns the op run on its inputs cast by the policy (autocast.c). */
#define AUTOCAST(op, n, inputs, call)                                                         \
    if (__builtin_expect(weft_autocast_current.enabled, 0) &&                                 \
        weft_autocast_policy(op) != WEFT_AUTOCAST_PROMOTE)                                    \
    WEFT_AUTOCAST_RETURN(op, n, inputs, call)

/* Drops the caller's reference to out when a recording step failed. */
static weft_tensor *fail_output(weft_tensor *out)
{
    if (weft_scope_depth() == 0)
        weft_tensor_release(out);
    return NULL;
}

/* Attaches node as out's grad_fn; returns out, or NULL (node freed) on failure. */
static weft_tensor *finish1(struct weft_node *node, weft_tensor *out)
{
    if (!node)
        return fail_output(out);
    if (!out) {
        weft_node_abandon(node);
        return NULL;
    }
    if (weft_node_finish(node, 1, &out) != 0)
        return fail_output(out);
    return out;
}

/* Copy of t (no history) for formulas that need an in-place op's original value. */
static weft_tensor *original_value(weft_tensor *t)
{
    bool prev = weft_no_grad_begin();
    weft_tensor *c = weft_clone(t);
    weft_grad_mode_restore(prev);
    return c;
}

static weft_tensor *pass(weft_tensor *g)
{
    return weft_autorelease(weft_tensor_retain(g));
}

/* Shape of input i with the dims listed in the node's ints[1..ndims] set to 1 (the
 * keepdim shape of a reduction). */
static int keepdim_shape(struct weft_node *node, int64_t *shape)
{
    int ndim = weft_node_input_ndim(node, 0);
    memcpy(shape, weft_node_input_shape(node, 0), (size_t)ndim * sizeof *shape);
    int64_t *ints = weft_node_ints(node);
    if (ints[0] == 0)
        for (int d = 0; d < ndim; d++)
            shape[d] = 1;
    for (int i = 0; i < ints[0]; i++)
        shape[ints[1 + i]] = 1;
    return ndim;
}

/* g reshaped to the keepdim shape, then expanded to the input's shape. */
static weft_tensor *expand_reduced(struct weft_node *node, weft_tensor *g)
{
    int64_t shape[WEFT_MAX_DIMS];
    int ndim = keepdim_shape(node, shape);
    return weft_expand(weft_reshape(g, ndim, shape), ndim, weft_node_input_shape(node, 0));
}

static int64_t reduced_count(struct weft_node *node)
{
    int ndim = weft_node_input_ndim(node, 0);
    const int64_t *shape = weft_node_input_shape(node, 0);
    int64_t *ints = weft_node_ints(node), n = 1;
    if (ints[0] == 0) {
        for (int d = 0; d < ndim; d++)
            n *= shape[d];
        return n;
    }
    for (int i = 0; i < ints[0]; i++)
        n *= shape[ints[1 + i]];
    return n;
}

/* Stores normalised, deduplicated reduction dims in ints[0] (count) and ints[1..]. */
static void store_dims(struct weft_node *node, int ndim, int ndims, const int *dims)
{
    int64_t *ints = weft_node_ints(node);
    ints[0] = 0;
    for (int i = 0; i < ndims && i < 15; i++) {
        int d = dims[i] < 0 ? dims[i] + ndim : dims[i];
        ints[1 + ints[0]++] = d;
    }
}

/* ---- unary ops ------------------------------------------------------------------------ */

/* PyTorch's grad_fn names for the elementwise ops. */
static const char *backward_name(int op)
{
    switch (op) {
    case WEFT_OP_NEG: return "NegBackward0";
    case WEFT_OP_ABS: return "AbsBackward0";
    case WEFT_OP_SIGN: return "SignBackward0";
    case WEFT_OP_EXP: return "ExpBackward0";
    case WEFT_OP_EXPM1: return "Expm1Backward0";
    case WEFT_OP_LOG: return "LogBackward0";
    case WEFT_OP_LOG1P: return "Log1PBackward0";
    case WEFT_OP_SQRT: return "SqrtBackward0";
    case WEFT_OP_RSQRT: return "RsqrtBackward0";
    case WEFT_OP_RECIPROCAL: return "ReciprocalBackward0";
    case WEFT_OP_SIN: return "SinBackward0";
    case WEFT_OP_COS: return "CosBackward0";
    case WEFT_OP_TANH: return "TanhBackward0";
    case WEFT_OP_SIGMOID: return "SigmoidBackward0";
    case WEFT_OP_RELU: return "ReluBackward0";
    case WEFT_OP_GELU: return "GeluBackward0";
    case WEFT_OP_SILU: return "SiluBackward0";
    case WEFT_OP_ERF: return "ErfBackward0";
    case WEFT_OP_FLOOR: return "FloorBackward0";
    case WEFT_OP_CEIL: return "CeilBackward0";
    case WEFT_OP_ROUND: return "RoundBackward0";
    case WEFT_OP_TRUNC: return "TruncBackward0";
    case WEFT_OP_ADD: return "AddBackward0";
    case WEFT_OP_SUB: return "SubBackward0";
    case WEFT_OP_MUL: return "MulBackward0";
    case WEFT_OP_DIV: return "DivBackward0";
    case WEFT_OP_POW: return "PowBackward0";
    case WEFT_OP_MAXIMUM: return "MaximumBackward0";
    case WEFT_OP_MINIMUM: return "MinimumBackward0";
    default: return "UnknownBackward0";
    }
}

/* A named elementwise backward op out = f(g, t) (weft/kernel.h) in one pass, where the
 * backend has it for g and t of one shape, dtype and device; *cached holds the op's id.
 * Returns NULL with *composite set (and no error) where it has not: the caller then
 * composes the formula from built-in ops. */
static weft_tensor *named_backward(int *cached, const char *name, weft_tensor *g, weft_tensor *t,
                                   double scalar, int64_t integer, bool *composite)
{
    /* Threads may race to set it; weft_op_register gives them all the same id. */
    int op = __atomic_load_n(cached, __ATOMIC_RELAXED);
    if (op < 0) {
        op = weft_op_register(name);
        __atomic_store_n(cached, op, __ATOMIC_RELAXED);
    }
    weft_kernel_fn fn = NULL;
    if (op >= 0 && g && t && g->dtype == t->dtype && g->ndim == t->ndim &&
        memcmp(g->shape, t->shape, (size_t)g->ndim * sizeof *g->shape) == 0 &&
        weft_device_equal(g->device, t->device) && g->layout == WEFT_LAYOUT_STRIDED &&
        t->layout == WEFT_LAYOUT_STRIDED)
        fn = weft_kernel_lookup(op, g->device.type, WEFT_LAYOUT_STRIDED, g->dtype);
    *composite = fn == NULL;
    if (*composite)
        return NULL;
    weft_tensor *out = weft_empty_like(g);
    if (!out)
        return NULL;
    /* The operands were checked above: the kernel runs without a second dispatch, unless
     * the core has an observer (a profiler), which must see the op (threshold_backward is
     * most of ReluBackward0's time). */
    struct weft_op_call c = {.op = op, .nin = 2, .nout = 1, .in = {g, t}, .out = {out},
                             .scalar = {scalar}, .ints = {integer}};
    int rc = __builtin_expect(weft_observer_get() != NULL, 0) ? weft_dispatch(&c) : fn(&c);
    return rc == 0 ? out : fail_output(out);
}

/* The backend's threshold_backward in one pass where it has one, else gt and where. */
weft_tensor *weft_threshold_backward(weft_tensor *g, weft_tensor *t, double threshold)
{
    static int op = -1;
    bool composite;
    weft_tensor *out = named_backward(&op, WEFT_OP_THRESHOLD_BACKWARD_NAME, g, t, threshold, 0,
                                      &composite);
    return composite ? weft_where_scalar(weft_gt_scalar(t, threshold), g, 0) : out;
}

/* tanh's backward from its result y: g (1 - y^2), one pass where the backend has it. */
static weft_tensor *tanh_backward(weft_tensor *g, weft_tensor *y)
{
    static int op = -1;
    bool composite;
    weft_tensor *out = named_backward(&op, WEFT_OP_TANH_BACKWARD_NAME, g, y, 0, 0, &composite);
    return composite ? weft_mul(g, weft_rsub_scalar(weft_mul(y, y), 1)) : out;
}

/* sigmoid's backward from its result y: g (1 - y) y, one pass where the backend has it. */
static weft_tensor *sigmoid_backward(weft_tensor *g, weft_tensor *y)
{
    static int op = -1;
    bool composite;
    weft_tensor *out = named_backward(&op, WEFT_OP_SIGMOID_BACKWARD_NAME, g, y, 0, 0, &composite);
    return composite ? weft_mul(weft_mul(g, weft_rsub_scalar(y, 1)), y) : out;
}

/* d/dx of x Phi(x) (approximate 0) or of 0.5 x (1 + tanh(k (x + c x^3))) (1), composed
 * of ops: PyTorch's gelu_backward formulas. */
static weft_tensor *gelu_backward_composite(weft_tensor *g, weft_tensor *x, int approximate)
{
    if (approximate == 0) {
        /* Phi(x) + x phi(x) */
        weft_tensor *cdf = weft_mul_scalar(weft_add_scalar(weft_erf(weft_mul_scalar(x, M_SQRT1_2)), 1), 0.5);
        weft_tensor *pdf = weft_mul_scalar(weft_exp(weft_mul_scalar(weft_mul(x, x), -0.5)),
                                           0.3989422804014327);
        return weft_mul(g, weft_add(cdf, weft_mul(x, pdf)));
    }
    /* 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2), t = tanh(k (x + c x^3)) */
    const double k = 0.7978845608028654, c = 0.044715;
    weft_tensor *x2 = weft_mul(x, x);
    weft_tensor *t = weft_tanh(weft_mul_scalar(weft_add(x, weft_mul_scalar(weft_mul(x2, x), c)), k));
    weft_tensor *left = weft_mul_scalar(weft_add_scalar(t, 1), 0.5);
    weft_tensor *inner = weft_mul_scalar(weft_add_scalar(weft_mul_scalar(x2, 3 * c), 1), k);
    weft_tensor *right = weft_mul(weft_mul(weft_mul_scalar(x, 0.5), weft_rsub_scalar(weft_mul(t, t), 1)),
                                  inner);
    return weft_mul(g, weft_add(left, right));
}

/* The backend's gelu_backward in one pass where it has one (weft/kernel.h), else the
 * composite. */
weft_tensor *weft_gelu_backward(weft_tensor *g, weft_tensor *x, int approximate)
{
    if (approximate != 0 && approximate != 1) {
        weft_error_set(WEFT_ERR_VALUE, "approximate argument must be either none or tanh.");
        return NULL;
    }
    static int op = -1;
    bool composite;
    weft_tensor *out = named_backward(&op, WEFT_OP_GELU_BACKWARD_NAME, g, x, 0, approximate,
                                      &composite);
    return composite ? gelu_backward_composite(g, x, approximate) : out;
}

static int unary_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                          weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0], *x = weft_node_saved(node, 0), *y = weft_node_saved(node, 1);
    if (!g)
        return 0;
    weft_tensor *r = NULL;
    switch (weft_node_ints(node)[0]) {
    case WEFT_OP_NEG: r = weft_neg(g); break;
    case WEFT_OP_ABS: r = weft_mul(g, weft_sign(x)); break;
    case WEFT_OP_SIGN:
    case WEFT_OP_FLOOR:
    case WEFT_OP_CEIL:
    case WEFT_OP_ROUND:
    case WEFT_OP_TRUNC: r = weft_zeros_like(g); break;
    case WEFT_OP_EXP: r = weft_mul(g, y); break;
    case WEFT_OP_EXPM1: r = weft_mul(g, weft_add_scalar(y, 1)); break;
    case WEFT_OP_LOG: r = weft_div(g, x); break;
    case WEFT_OP_LOG1P: r = weft_div(g, weft_add_scalar(x, 1)); break;
    case WEFT_OP_SQRT: r = weft_div(g, weft_mul_scalar(y, 2)); break;
    case WEFT_OP_RSQRT: r = weft_mul(g, weft_mul_scalar(weft_pow_scalar(y, 3), -0.5)); break;
    case WEFT_OP_RECIPROCAL: r = weft_mul(g, weft_neg(weft_mul(y, y))); break;
    case WEFT_OP_SIN: r = weft_mul(g, weft_cos(x)); break;
    case WEFT_OP_COS: r = weft_mul(g, weft_neg(weft_sin(x))); break;
    case WEFT_OP_TANH: r = tanh_backward(g, y); break;
    case WEFT_OP_SIGMOID: r = sigmoid_backward(g, y); break;
    case WEFT_OP_RELU: r = weft_threshold_backward(g, y, 0); break;
    case WEFT_OP_GELU: r = weft_gelu_backward(g, x, 0); break;
    case WEFT_OP_SILU: {
        weft_tensor *s = weft_sigmoid(x);
        r = weft_mul(g, weft_mul(s, weft_add_scalar(weft_mul(x, weft_rsub_scalar(s, 1)), 1)));
        break;
    }
    case WEFT_OP_ERF:
        r = weft_mul(g, weft_mul_scalar(weft_exp(weft_neg(weft_mul(x, x))), M_2_SQRTPI));
        break;
    default:
        return weft_error_set(WEFT_ERR_RUNTIME, "unary backward: unknown op %lld",
                              (long long)weft_node_ints(node)[0]);
    }
    grad_inputs[0] = r;
    return r ? 0 : weft_error_code();
}

/* Whether a unary op's formula reads its input (slot 0) or its output (slot 1). */
static bool unary_needs_input(int op)
{
    switch (op) {
    case WEFT_OP_ABS: case WEFT_OP_LOG: case WEFT_OP_LOG1P: case WEFT_OP_SIN: case WEFT_OP_COS:
    case WEFT_OP_GELU: case WEFT_OP_SILU: case WEFT_OP_ERF:
        return true;
    default:
        return false;
    }
}

static bool unary_needs_output(int op)
{
    switch (op) {
    case WEFT_OP_EXP: case WEFT_OP_EXPM1: case WEFT_OP_SQRT: case WEFT_OP_RSQRT:
    case WEFT_OP_RECIPROCAL: case WEFT_OP_TANH: case WEFT_OP_SIGMOID: case WEFT_OP_RELU:
        return true;
    default:
        return false;
    }
}

static weft_tensor *record_unary(int op, const char *name, weft_tensor *x_saved, weft_tensor *in,
                                 weft_tensor *out)
{
    struct weft_node *node = weft_node_create(name, unary_backward, 1, &in, 2);
    if (!node || !out)
        return finish1(node, out);
    weft_node_ints(node)[0] = op;
    int rc = 0;
    if (unary_needs_input(op))
        rc = weft_node_save(node, 0, x_saved);
    if (rc == 0 && unary_needs_output(op))
        rc = weft_node_save_output(node, 1, out, 0);
    if (rc != 0) {
        weft_node_abandon(node);
        return fail_output(out);
    }
    return finish1(node, out);
}

#define UNARY_WRAPPER(name, ID)                                                               \
    weft_tensor *weft_##name(weft_tensor *t)                                                  \
    {                                                                                         \
        AUTOCAST(#name, 1, &t, weft_##name(t));                                               \
        bool rec = weft_autograd_needed(1, &t);                                               \
        weft_tensor *out = FORWARD(rec, weft_fwd_##name(t));                                  \
        return rec ? record_unary(WEFT_OP_##ID, backward_name(WEFT_OP_##ID), t, t, out) : out;            \
    }                                                                                         \
    weft_tensor *weft_##name##_(weft_tensor *t)                                               \
    {                                                                                         \
        bool rec = weft_autograd_needed(1, &t);                                               \
        if (!rec)                                                                             \
            return weft_fwd_##name##_(t);                                                     \
        if (weft_autograd_check_inplace(t, true) != 0)                                        \
            return NULL;                                                                      \
        weft_tensor *orig = unary_needs_input(WEFT_OP_##ID) ? original_value(t) : t;          \
        struct weft_node *node = weft_node_create(backward_name(WEFT_OP_##ID), unary_backward, 1, &t, 2); \
        weft_tensor *out = FORWARD(rec, weft_fwd_##name##_(t));                               \
        if (!node || !out || !orig) {                                                         \
            weft_node_abandon(node);                                                          \
            if (orig != t && weft_scope_depth() == 0)                                         \
                weft_tensor_release(orig);                                                    \
            return NULL;                                                                      \
        }                                                                                     \
        weft_node_ints(node)[0] = WEFT_OP_##ID;                                               \
        int rc = unary_needs_input(WEFT_OP_##ID) ? weft_node_save(node, 0, orig) : 0;         \
        if (rc == 0 && unary_needs_output(WEFT_OP_##ID))                                      \
            rc = weft_node_save_output(node, 1, t, 0);                                        \
        if (orig != t && weft_scope_depth() == 0)                                             \
            weft_tensor_release(orig);                                                        \
        if (rc != 0) {                                                                        \
            weft_node_abandon(node);                                                          \
            return NULL;                                                                      \
        }                                                                                     \
        return weft_node_finish(node, 1, &t) == 0 ? t : NULL;                                 \
    }
WEFT_DIFF_UNARY_OPS(UNARY_WRAPPER)
#undef UNARY_WRAPPER

/* ---- non-differentiable elementwise ops: bool results carry no gradient --------------- */

weft_tensor *weft_logical_not(weft_tensor *t)
{
    return weft_fwd_logical_not(t);
}

weft_tensor *weft_logical_not_(weft_tensor *t)
{
    if (weft_autograd_needed(1, &t) && weft_autograd_check_inplace(t, false) != 0)
        return NULL;
    return weft_fwd_logical_not_(t);
}

#define NONDIFF_BINARY(name)                                                                  \
    weft_tensor *weft_##name(weft_tensor *a, weft_tensor *b) { return weft_fwd_##name(a, b); } \
    weft_tensor *weft_##name##_scalar(weft_tensor *a, double s)                               \
    {                                                                                         \
        return weft_fwd_##name##_scalar(a, s);                                                \
    }                                                                                         \
    weft_tensor *weft_##name##_(weft_tensor *a, weft_tensor *b)                               \
    {                                                                                         \
        if (weft_autograd_needed(1, &a) && weft_autograd_check_inplace(a, false) != 0)        \
            return NULL;                                                                      \
        return weft_fwd_##name##_(a, b);                                                      \
    }                                                                                         \
    weft_tensor *weft_##name##_scalar_(weft_tensor *a, double s)                              \
    {                                                                                         \
        if (weft_autograd_needed(1, &a) && weft_autograd_check_inplace(a, false) != 0)        \
            return NULL;                                                                      \
        return weft_fwd_##name##_scalar_(a, s);                                               \
    }
WEFT_NONDIFF_BINARY_OPS(NONDIFF_BINARY)
#undef NONDIFF_BINARY

/* ---- binary ops ----------------------------------------------------------------------- */

enum { OP_RSUB = -1, OP_RDIV = -2 };

static weft_tensor *masked(weft_tensor *keep, weft_tensor *g)
{
    return weft_where_scalar(keep, g, 0);
}

static int binary_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                           weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0];
    weft_tensor *a = weft_node_saved(node, 0), *b = weft_node_saved(node, 1);
    weft_tensor *out = weft_node_saved(node, 2);
    int64_t op = weft_node_ints(node)[0];
    bool scalar = weft_node_ints(node)[1] != 0;
    double s = weft_node_scalars(node)[0];
    bool need_a = weft_node_needs_input_grad(node, 0);
    bool need_b = !scalar && weft_node_needs_input_grad(node, 1);
    weft_tensor *ga = NULL, *gb = NULL;
    if (!g)
        return 0;
    switch (op) {
    case WEFT_OP_ADD:
        ga = pass(g);
        gb = need_b ? pass(g) : NULL;
        break;
    case WEFT_OP_SUB:
        ga = pass(g);
        gb = need_b ? weft_neg(g) : NULL;
        break;
    case WEFT_OP_MUL:
        ga = need_a ? (scalar ? weft_mul_scalar(g, s) : weft_mul(g, b)) : NULL;
        gb = need_b ? weft_mul(g, a) : NULL;
        break;
    case WEFT_OP_DIV:
        ga = need_a ? (scalar ? weft_div_scalar(g, s) : weft_div(g, b)) : NULL;
        gb = need_b ? weft_neg(weft_div(weft_mul(g, out), b)) : NULL;
        break;
    case WEFT_OP_POW:
        if (scalar) {
            ga = s == 0 ? weft_zeros_like(a) : weft_mul(g, weft_mul_scalar(weft_pow_scalar(a, s - 1), s));
            break;
        }
        /* b * a ** (b - 1) is 0 * inf = nan at a = 0, b = 0: PyTorch masks b == 0 to 0. */
        ga = need_a ? masked(weft_ne_scalar(b, 0),
                             weft_mul(g, weft_mul(b, weft_pow(a, weft_sub_scalar(b, 1)))))
                    : NULL;
        if (need_b) {
            /* 0 ** b with b >= 0 has no log term: PyTorch masks it to 0. */
            weft_tensor *zero_base = weft_logical_and(weft_eq_scalar(a, 0), weft_ge_scalar(b, 0));
            gb = masked(weft_logical_not(zero_base), weft_mul(weft_mul(g, out), weft_log(a)));
        }
        break;
    case WEFT_OP_MAXIMUM:
    case WEFT_OP_MINIMUM: {
        bool is_max = op == WEFT_OP_MAXIMUM;
        if (scalar) {
            weft_tensor *ties = weft_where(weft_eq_scalar(a, s), weft_mul_scalar(g, 0.5), g);
            ga = masked(is_max ? weft_ge_scalar(a, s) : weft_le_scalar(a, s), ties);
            break;
        }
        weft_tensor *ties = weft_where(weft_eq(a, b), weft_mul_scalar(g, 0.5), g);
        ga = need_a ? masked(is_max ? weft_ge(a, b) : weft_le(a, b), ties) : NULL;
        gb = need_b ? masked(is_max ? weft_le(a, b) : weft_ge(a, b), ties) : NULL;
        break;
    }
    case OP_RSUB:
        ga = weft_neg(g);
        break;
    case OP_RDIV:
        ga = weft_neg(weft_div(weft_mul(g, out), a));
        break;
    default:
        return weft_error_set(WEFT_ERR_RUNTIME, "binary backward: unknown op %lld", (long long)op);
    }
    if ((need_a && !ga) || (need_b && !gb))
        return weft_error_code();
    grad_inputs[0] = need_a ? ga : NULL;
    if (!scalar)
        grad_inputs[1] = gb;
    return 0;
}

static const char *binary_name(int64_t op, bool scalar)
{
    if (op == OP_RSUB)
        return "RsubBackward1";
    if (op == OP_RDIV) /* Python's `s / t` is t.reciprocal() * s */
        return "MulBackward0";
    if (op == WEFT_OP_POW && !scalar)
        return "PowBackward1";
    return backward_name((int)op);
}

/* Which saved values a binary formula reads. t * s and t / s read neither t nor the
 * result, so, as in PyTorch, they save nothing and a later in-place change of t does not
 * invalidate them. */
static void binary_needs(int64_t op, bool scalar, bool *a, bool *b, bool *out)
{
    bool by_scalar = scalar && (op == WEFT_OP_MUL || op == WEFT_OP_DIV);
    *a = !by_scalar && (op == WEFT_OP_MUL || op == WEFT_OP_POW || op == WEFT_OP_MAXIMUM ||
                        op == WEFT_OP_MINIMUM || op == OP_RDIV);
    *b = op == WEFT_OP_MUL || op == WEFT_OP_DIV || op == WEFT_OP_POW || op == WEFT_OP_MAXIMUM ||
         op == WEFT_OP_MINIMUM;
    *out = !by_scalar && (op == WEFT_OP_DIV || op == WEFT_OP_POW || op == OP_RDIV);
}

/* a_value: a's value before the op (a itself, or a copy for in-place ops). */
static weft_tensor *record_binary(int64_t op, bool scalar, double s, weft_tensor *a,
                                  weft_tensor *a_value, weft_tensor *b, weft_tensor *out)
{
    weft_tensor *inputs[2] = {a, b};
    struct weft_node *node = weft_node_create(binary_name(op, scalar), binary_backward,
                                              scalar ? 1 : 2, inputs, 3);
    if (!node || !out)
        return finish1(node, out);
    weft_node_ints(node)[0] = op;
    weft_node_ints(node)[1] = scalar;
    weft_node_scalars(node)[0] = s;
    bool need_a, need_b, need_out;
    binary_needs(op, scalar, &need_a, &need_b, &need_out);
    int rc = need_a ? weft_node_save(node, 0, a_value) : 0;
    if (rc == 0 && need_b && !scalar)
        rc = weft_node_save(node, 1, b);
    if (rc == 0 && need_out)
        rc = weft_node_save_output(node, 2, out, 0);
    if (rc != 0) {
        weft_node_abandon(node);
        return fail_output(out);
    }
    return finish1(node, out);
}

/* In-place: check, keep a's old value when the formula reads it, run, record. */
static weft_tensor *record_binary_inplace(int64_t op, bool scalar, double s, weft_tensor *a,
                                          weft_tensor *b, weft_tensor *(*fwd_t)(weft_tensor *, weft_tensor *),
                                          weft_tensor *(*fwd_s)(weft_tensor *, double))
{
    if (weft_autograd_check_inplace(a, true) != 0)
        return NULL;
    bool need_a, need_b, need_out;
    binary_needs(op, scalar, &need_a, &need_b, &need_out);
    weft_tensor *orig = need_a ? original_value(a) : a;
    if (!orig)
        return NULL;
    weft_tensor *out = FORWARD(true, scalar ? fwd_s(a, s) : fwd_t(a, b));
    weft_tensor *r = out ? record_binary(op, scalar, s, a, orig, b, a) : NULL;
    if (orig != a && weft_scope_depth() == 0)
        weft_tensor_release(orig);
    return r;
}

#define BINARY_WRAPPER(name, ID)                                                              \
    weft_tensor *weft_##name(weft_tensor *a, weft_tensor *b)                                  \
    {                                                                                         \
        weft_tensor *in[2] = {a, b};                                                          \
        AUTOCAST(#name, 2, in, weft_##name(in[0], in[1]));                                    \
        bool rec = weft_autograd_needed(2, in);                                               \
        weft_tensor *out = FORWARD(rec, weft_fwd_##name(a, b));                               \
        return rec ? record_binary(WEFT_OP_##ID, false, 0, a, a, b, out) : out;               \
    }                                                                                         \
    weft_tensor *weft_##name##_scalar(weft_tensor *a, double s)                               \
    {                                                                                         \
        AUTOCAST(#name, 1, &a, weft_##name##_scalar(a, s));                                   \
        bool rec = weft_autograd_needed(1, &a);                                               \
        weft_tensor *out = FORWARD(rec, weft_fwd_##name##_scalar(a, s));                      \
        return rec ? record_binary(WEFT_OP_##ID, true, s, a, a, NULL, out) : out;             \
    }                                                                                         \
    weft_tensor *weft_##name##_(weft_tensor *a, weft_tensor *b)                               \
    {                                                                                         \
        weft_tensor *in[2] = {a, b};                                                          \
        if (!weft_autograd_needed(2, in))                                                     \
            return weft_fwd_##name##_(a, b);                                                  \
        return record_binary_inplace(WEFT_OP_##ID, false, 0, a, b, weft_fwd_##name##_, NULL); \
    }                                                                                         \
    weft_tensor *weft_##name##_scalar_(weft_tensor *a, double s)                              \
    {                                                                                         \
        if (!weft_autograd_needed(1, &a))                                                     \
            return weft_fwd_##name##_scalar_(a, s);                                           \
        return record_binary_inplace(WEFT_OP_##ID, true, s, a, NULL, NULL,                    \
                                     weft_fwd_##name##_scalar_);                              \
    }
WEFT_DIFF_BINARY_OPS(BINARY_WRAPPER)
#undef BINARY_WRAPPER

weft_tensor *weft_rsub_scalar(weft_tensor *t, double s)
{
    bool rec = weft_autograd_needed(1, &t);
    weft_tensor *out = FORWARD(rec, weft_fwd_rsub_scalar(t, s));
    return rec ? record_binary(OP_RSUB, true, s, t, t, NULL, out) : out;
}

weft_tensor *weft_rdiv_scalar(weft_tensor *t, double s)
{
    bool rec = weft_autograd_needed(1, &t);
    weft_tensor *out = FORWARD(rec, weft_fwd_rdiv_scalar(t, s));
    return rec ? record_binary(OP_RDIV, true, s, t, t, NULL, out) : out;
}

/* ---- where, clamp, masked_fill --------------------------------------------------------- */

static int where_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                          weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0], *cond = weft_node_saved(node, 0);
    if (!g)
        return 0;
    /* inputs: 0 cond (no grad), 1 a, 2 b (absent for where_scalar) */
    if (weft_node_needs_input_grad(node, 1) && !(grad_inputs[1] = masked(cond, g)))
        return weft_error_code();
    if (weft_node_needs_input_grad(node, 2) &&
        !(grad_inputs[2] = masked(weft_logical_not(cond), g)))
        return weft_error_code();
    return 0;
}

static weft_tensor *record_where(weft_tensor *cond, weft_tensor *a, weft_tensor *b, weft_tensor *out)
{
    weft_tensor *inputs[3] = {NULL, a, b};
    struct weft_node *node = weft_node_create("WhereBackward0", where_backward, 3, inputs, 1);
    if (node && out && weft_node_save(node, 0, cond) != 0) {
        weft_node_abandon(node);
        return fail_output(out);
    }
    return finish1(node, out);
}

weft_tensor *weft_where(weft_tensor *cond, weft_tensor *a, weft_tensor *b)
{
    weft_tensor *in[2] = {a, b};
    bool rec = weft_autograd_needed(2, in);
    weft_tensor *out = FORWARD(rec, weft_fwd_where(cond, a, b));
    return rec ? record_where(cond, a, b, out) : out;
}

weft_tensor *weft_where_scalar(weft_tensor *cond, weft_tensor *a, double b)
{
    bool rec = weft_autograd_needed(1, &a);
    weft_tensor *out = FORWARD(rec, weft_fwd_where_scalar(cond, a, b));
    return rec ? record_where(cond, a, NULL, out) : out;
}

/* masked_fill: the filled positions get no gradient. Saves the mask in slot 0. */
static int masked_fill_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                                weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0];
    if (!g)
        return 0;
    grad_inputs[0] = masked(weft_logical_not(weft_node_saved(node, 0)), g);
    return grad_inputs[0] ? 0 : weft_error_code();
}

/* clamp: gradient only where the input lay within the bounds. Saves the input. */
static int clamp_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                          weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0], *x = weft_node_saved(node, 0);
    double lo = weft_node_scalars(node)[0], hi = weft_node_scalars(node)[1];
    if (!g)
        return 0;
    weft_tensor *keep = NULL;
    if (!isnan(lo))
        keep = weft_ge_scalar(x, lo);
    if (!isnan(hi))
        keep = keep ? weft_logical_and(keep, weft_le_scalar(x, hi)) : weft_le_scalar(x, hi);
    grad_inputs[0] = keep ? masked(keep, g) : pass(g);
    return grad_inputs[0] ? 0 : weft_error_code();
}

static weft_tensor *record_saving(const char *name, weft_backward_fn fn, weft_tensor *in,
                                  weft_tensor *saved, weft_tensor *out, double s0, double s1)
{
    struct weft_node *node = weft_node_create(name, fn, 1, &in, 1);
    if (node && out) {
        weft_node_scalars(node)[0] = s0;
        weft_node_scalars(node)[1] = s1;
        if (weft_node_save(node, 0, saved) != 0) {
            weft_node_abandon(node);
            return fail_output(out);
        }
    }
    return finish1(node, out);
}

weft_tensor *weft_clamp(weft_tensor *t, double min, double max)
{
    bool rec = weft_autograd_needed(1, &t);
    weft_tensor *out = FORWARD(rec, weft_fwd_clamp(t, min, max));
    return rec ? record_saving("ClampBackward1", clamp_backward, t, t, out, min, max) : out;
}

weft_tensor *weft_clamp_(weft_tensor *t, double min, double max)
{
    if (!weft_autograd_needed(1, &t))
        return weft_fwd_clamp_(t, min, max);
    if (weft_autograd_check_inplace(t, true) != 0)
        return NULL;
    weft_tensor *orig = original_value(t);
    weft_tensor *out = orig ? FORWARD(true, weft_fwd_clamp_(t, min, max)) : NULL;
    weft_tensor *r = out ? record_saving("ClampBackward1", clamp_backward, t, orig, t, min, max)
                         : NULL;
    if (weft_scope_depth() == 0)
        weft_tensor_release(orig);
    return r;
}

weft_tensor *weft_masked_fill(weft_tensor *t, weft_tensor *mask, double value)
{
    bool rec = weft_autograd_needed(1, &t);
    weft_tensor *out = FORWARD(rec, weft_fwd_masked_fill(t, mask, value));
    return rec ? record_saving("MaskedFillBackward0", masked_fill_backward, t, mask, out, 0, 0)
               : out;
}

weft_tensor *weft_masked_fill_(weft_tensor *t, weft_tensor *mask, double value)
{
    if (!weft_autograd_needed(1, &t))
        return weft_fwd_masked_fill_(t, mask, value);
    if (weft_autograd_check_inplace(t, true) != 0)
        return NULL;
    weft_tensor *out = FORWARD(true, weft_fwd_masked_fill_(t, mask, value));
    return out ? record_saving("MaskedFillBackward0", masked_fill_backward, t, mask, t, 0, 0)
               : NULL;
}

/* ---- reductions ------------------------------------------------------------------------
 * ints[0] = number of reduced dims (0: all), ints[1..] the dims (normalised);
 * scalars[0] = correction for var/std. Saved: 0 input, 1 output. */

enum reduce_kind { R_SUM, R_MEAN, R_PROD, R_VAR, R_STD, R_AMAX };

static weft_tensor *prod_grad(weft_tensor *x, weft_tensor *g_full, struct weft_node *node,
                              weft_tensor *out_full)
{
    /* Without zeros: prod / x. With zeros: only a lone zero in its slice gets the product
     * of the others; everything else in that slice gets 0. */
    int nd = (int)weft_node_ints(node)[0];
    int dims[WEFT_MAX_DIMS];
    for (int i = 0; i < nd; i++)
        dims[i] = (int)weft_node_ints(node)[1 + i];
    weft_tensor *is_zero = weft_eq_scalar(x, 0);
    weft_tensor *zeros_in_slice = weft_expand_as(weft_sum(is_zero, nd, dims, true), x);
    weft_tensor *others = weft_expand_as(weft_prod(weft_masked_fill(x, is_zero, 1), nd, dims, true), x);
    weft_tensor *no_zero = weft_div(out_full, x);
    weft_tensor *lone = weft_where_scalar(weft_logical_and(is_zero, weft_eq_scalar(zeros_in_slice, 1)),
                                          others, 0);
    weft_tensor *grad = weft_where(weft_eq_scalar(zeros_in_slice, 0), no_zero, lone);
    return weft_mul(g_full, grad);
}

static int reduce_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                           weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0];
    if (!g)
        return 0;
    weft_tensor *x = weft_node_saved(node, 0), *out = weft_node_saved(node, 1);
    weft_tensor *g_full = expand_reduced(node, g);
    int nd = (int)weft_node_ints(node)[0];
    int dims[WEFT_MAX_DIMS];
    for (int i = 0; i < nd; i++)
        dims[i] = (int)weft_node_ints(node)[1 + i];
    double correction = weft_node_scalars(node)[0];
    double n = (double)reduced_count(node);
    weft_tensor *r = NULL;
    switch ((enum reduce_kind)weft_node_ints(node)[15]) {
    case R_SUM: r = g_full; break;
    case R_MEAN: r = weft_div_scalar(g_full, n); break;
    case R_PROD: r = prod_grad(x, g_full, node, expand_reduced(node, out)); break;
    case R_VAR:
    case R_STD: {
        weft_tensor *centered = weft_sub(x, weft_mean(x, nd, dims, true));
        double denom = n - correction > 0 ? n - correction : 0;
        r = weft_mul(g_full, weft_mul_scalar(centered, 2.0 / denom));
        if (weft_node_ints(node)[15] == R_STD) { /* d std = d var / (2 std) */
            weft_tensor *std = expand_reduced(node, out);
            /* a constant input: 0 / 0, which PyTorch's std_backward masks to 0 */
            r = masked(weft_ne_scalar(std, 0), weft_div(r, weft_mul_scalar(std, 2)));
        }
        break;
    }
    case R_AMAX: {
        /* max()/min() over everything: ties share the gradient evenly, as PyTorch. */
        weft_tensor *hits = weft_to_dtype(weft_eq(x, expand_reduced(node, out)), g->dtype);
        r = weft_div(weft_mul(g_full, hits), weft_sum(hits, 0, NULL, false));
        break;
    }
    }
    grad_inputs[0] = r;
    return r ? 0 : weft_error_code();
}

static const char *reduce_names[] = {"SumBackward1", "MeanBackward1", "ProdBackward1",
                                     "VarBackward0", "StdBackward0", "MaxBackward1"};

/* `name` overrides the table (min's node); NULL keeps it. PyTorch names the overload:
 * sum() is SumBackward0, sum(dim) and sum((), keepdim=True) SumBackward1. */
static weft_tensor *record_reduce(enum reduce_kind kind, const char *name, weft_tensor *in,
                                  int ndims, const int *dims, bool keepdim, double correction,
                                  weft_tensor *out)
{
    if (!name)
        name = reduce_names[kind];
    if (ndims == 0 && !keepdim && (kind == R_SUM || kind == R_MEAN || kind == R_PROD))
        name = kind == R_SUM ? "SumBackward0" : kind == R_MEAN ? "MeanBackward0" : "ProdBackward0";
    struct weft_node *node = weft_node_create(name, reduce_backward, 1, &in, 2);
    if (!node || !out)
        return finish1(node, out);
    store_dims(node, in->ndim, ndims, dims);
    weft_node_ints(node)[15] = kind;
    weft_node_scalars(node)[0] = correction;
    int rc = 0;
    if (kind != R_SUM && kind != R_MEAN)
        rc = weft_node_save(node, 0, in);
    if (rc == 0 && (kind == R_PROD || kind == R_STD || kind == R_AMAX))
        rc = weft_node_save_output(node, 1, out, 0);
    if (rc != 0) {
        weft_node_abandon(node);
        return fail_output(out);
    }
    return finish1(node, out);
}

#define REDUCE_WRAPPER(name, KIND)                                                            \
    weft_tensor *weft_##name(weft_tensor *t, int ndims, const int *dims, bool keepdim)        \
    {                                                                                         \
        AUTOCAST(#name, 1, &t, weft_##name(t, ndims, dims, keepdim));                         \
        bool rec = weft_autograd_needed(1, &t);                                               \
        weft_tensor *out = FORWARD(rec, weft_fwd_##name(t, ndims, dims, keepdim));            \
        return rec ? record_reduce(KIND, NULL, t, ndims, dims, keepdim, 0, out) : out;                       \
    }
REDUCE_WRAPPER(sum, R_SUM)
REDUCE_WRAPPER(mean, R_MEAN)
REDUCE_WRAPPER(prod, R_PROD)
#undef REDUCE_WRAPPER

weft_tensor *weft_var(weft_tensor *t, int ndims, const int *dims, double correction, bool keepdim)
{
    bool rec = weft_autograd_needed(1, &t);
    weft_tensor *out = FORWARD(rec, weft_fwd_var(t, ndims, dims, correction, keepdim));
    return rec ? record_reduce(R_VAR, NULL, t, ndims, dims, keepdim, correction, out) : out;
}

weft_tensor *weft_std(weft_tensor *t, int ndims, const int *dims, double correction, bool keepdim)
{
    bool rec = weft_autograd_needed(1, &t);
    weft_tensor *out = FORWARD(rec, weft_fwd_std(t, ndims, dims, correction, keepdim));
    return rec ? record_reduce(R_STD, NULL, t, ndims, dims, keepdim, correction, out) : out;
}

weft_tensor *weft_max(weft_tensor *t)
{
    bool rec = weft_autograd_needed(1, &t);
    weft_tensor *out = FORWARD(rec, weft_fwd_max(t));
    return rec ? record_reduce(R_AMAX, "MaxBackward1", t, 0, NULL, false, 0, out) : out;
}

weft_tensor *weft_min(weft_tensor *t)
{
    bool rec = weft_autograd_needed(1, &t);
    weft_tensor *out = FORWARD(rec, weft_fwd_min(t));
    return rec ? record_reduce(R_AMAX, "MinBackward1", t, 0, NULL, false, 0, out) : out;
}

/* max_dim/min_dim: the gradient goes to the selected index. Saved: 0 indices. */
static int select_dim_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                               weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0], *idx = weft_node_saved(node, 0);
    if (!g)
        return 0;
    int dim = (int)weft_node_ints(node)[0];
    bool keepdim = weft_node_ints(node)[1] != 0;
    if (!keepdim && weft_node_input_ndim(node, 0) > 0) {
        g = weft_unsqueeze(g, dim);
        idx = weft_unsqueeze(idx, dim);
    }
    weft_tensor *zeros = weft_zeros(weft_node_input_ndim(node, 0), weft_node_input_shape(node, 0),
                                    g ? g->dtype : WEFT_F32, g ? g->device : WEFT_CPU);
    grad_inputs[0] = weft_scatter_add(zeros, dim, idx, g);
    return grad_inputs[0] ? 0 : weft_error_code();
}

static int select_dim_wrapper(bool is_max, weft_tensor *t, int dim, bool keepdim,
                              weft_tensor **values, weft_tensor **indices)
{
    bool rec = weft_autograd_needed(1, &t);
    weft_tensor *v = NULL, *i = NULL;
    int rc = FORWARD(rec, is_max ? weft_fwd_max_dim(t, dim, keepdim, &v, &i)
                                 : weft_fwd_min_dim(t, dim, keepdim, &v, &i));
    if (rc == 0 && rec) {
        struct weft_node *node = weft_node_create(is_max ? "MaxBackward0" : "MinBackward0",
                                                  select_dim_backward, 1, &t, 1);
        if (node) {
            weft_node_ints(node)[0] = dim < 0 ? dim + (t->ndim ? t->ndim : 1) : dim;
            weft_node_ints(node)[1] = keepdim;
            rc = weft_node_save(node, 0, i);
            weft_tensor *outs[2] = {v, i};
            if (rc == 0)
                rc = weft_node_finish(node, 2, outs);
            else
                weft_node_abandon(node);
        } else {
            rc = weft_error_code();
        }
    }
    if (rc != 0) {
        if (weft_scope_depth() == 0) {
            weft_tensor_release(v);
            weft_tensor_release(i);
        }
        return rc;
    }
    if (values)
        *values = v;
    else if (weft_scope_depth() == 0)
        weft_tensor_release(v);
    if (indices)
        *indices = i;
    else if (weft_scope_depth() == 0)
        weft_tensor_release(i);
    return 0;
}

int weft_max_dim(weft_tensor *t, int dim, bool keepdim, weft_tensor **values, weft_tensor **indices)
{
    return select_dim_wrapper(true, t, dim, keepdim, values, indices);
}

int weft_min_dim(weft_tensor *t, int dim, bool keepdim, weft_tensor **values, weft_tensor **indices)
{
    return select_dim_wrapper(false, t, dim, keepdim, values, indices);
}

/* ---- softmax ---------------------------------------------------------------------------- */

static int softmax_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                            weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0], *y = weft_node_saved(node, 0);
    int dim = (int)weft_node_ints(node)[0];
    if (!g)
        return 0;
    if (weft_node_ints(node)[1]) /* log_softmax: g - exp(y) * sum(g) */
        grad_inputs[0] = weft_sub(g, weft_mul(weft_exp(y), weft_sum(g, 1, &dim, true)));
    else /* softmax: y * (g - sum(g * y)) */
        grad_inputs[0] = weft_mul(y, weft_sub(g, weft_sum(weft_mul(g, y), 1, &dim, true)));
    return grad_inputs[0] ? 0 : weft_error_code();
}

static weft_tensor *record_softmax(bool log, weft_tensor *in, int dim, weft_tensor *out)
{
    struct weft_node *node = weft_node_create(log ? "LogSoftmaxBackward0" : "SoftmaxBackward0",
                                              softmax_backward, 1, &in, 1);
    if (node && out) {
        weft_node_ints(node)[0] = dim < 0 ? dim + (in->ndim ? in->ndim : 1) : dim;
        weft_node_ints(node)[1] = log;
        if (weft_node_save_output(node, 0, out, 0) != 0) {
            weft_node_abandon(node);
            return fail_output(out);
        }
    }
    return finish1(node, out);
}

weft_tensor *weft_softmax(weft_tensor *t, int dim)
{
    AUTOCAST("softmax", 1, &t, weft_softmax(t, dim));
    bool rec = weft_autograd_needed(1, &t);
    weft_tensor *out = FORWARD(rec, weft_fwd_softmax(t, dim));
    return rec ? record_softmax(false, t, dim, out) : out;
}

weft_tensor *weft_log_softmax(weft_tensor *t, int dim)
{
    AUTOCAST("log_softmax", 1, &t, weft_log_softmax(t, dim));
    bool rec = weft_autograd_needed(1, &t);
    weft_tensor *out = FORWARD(rec, weft_fwd_log_softmax(t, dim));
    return rec ? record_softmax(true, t, dim, out) : out;
}

/* ---- matmul --------------------------------------------------------------------------------
 * Saved: 0 a, 1 b. 1-D operands are handled as PyTorch's matmul promotes them; broadcast
 * batch dims are summed by the engine. */

/* True for a 2-D matrix stored column by column (a transposed view of a contiguous one). */
static bool column_major(const weft_tensor *t)
{
    return t->ndim == 2 && t->stride[0] == 1 && t->stride[1] == t->shape[0] && t->shape[0] > 1;
}

static int matmul_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                           weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0], *a = weft_node_saved(node, 0), *b = weft_node_saved(node, 1);
    if (!g)
        return 0;
    bool need_a = weft_node_needs_input_grad(node, 0), need_b = weft_node_needs_input_grad(node, 1);
    if (a->ndim == 1 && b->ndim == 1) {
        grad_inputs[0] = need_a ? weft_mul(g, b) : NULL;
        grad_inputs[1] = need_b ? weft_mul(g, a) : NULL;
    } else {
        /* Promote 1-D operands (and the gradient) the way the forward did. */
        weft_tensor *a2 = a->ndim == 1 ? weft_unsqueeze(a, 0) : a;
        weft_tensor *b2 = b->ndim == 1 ? weft_unsqueeze(b, 1) : b;
        weft_tensor *g2 = g;
        if (a->ndim == 1)
            g2 = weft_unsqueeze(g2, -2);
        if (b->ndim == 1)
            g2 = weft_unsqueeze(g2, -1);
        if (need_a) {
            weft_tensor *ga = weft_matmul(g2, weft_transpose(b2, -1, -2));
            grad_inputs[0] = a->ndim == 1 ? weft_squeeze_dim(ga, -2) : ga;
        }
        if (need_b) {
            /* A transposed b (Linear's W^T) gets its gradient in its own layout, as
             * PyTorch's mm_mat2_backward: (g^T a)^T, whose transpose back to W is
             * contiguous, where a^T g would be a transposed copy to make later. */
            weft_tensor *gb = column_major(b2) && a2->ndim == 2
                                  ? weft_t(weft_matmul(weft_t(g2), a2))
                                  : weft_matmul(weft_transpose(a2, -1, -2), g2);
            grad_inputs[1] = b->ndim == 1 ? weft_squeeze_dim(gb, -1) : gb;
        }
    }
    if ((need_a && !grad_inputs[0]) || (need_b && !grad_inputs[1]))
        return weft_error_code();
    return 0;
}

/* One node does every case; it carries the name of the op PyTorch 1.13's matmul ends
 * in for those ranks (dot, mv, mm; 1-D @ 2-D squeezes an mm; batched cases fold into
 * bmm/mm and _unsafe_view, except 2-D @ batched, which expands and clones). */
static const char *matmul_name(const weft_tensor *a, const weft_tensor *b)
{
    if (!a || !b)
        return "MatmulBackward0";
    if (a->ndim == 1 && b->ndim == 1)
        return "DotBackward0";
    if (a->ndim == 2 && b->ndim == 1)
        return "MvBackward0";
    if (a->ndim == 1 && b->ndim == 2)
        return "SqueezeBackward3";
    if (a->ndim == 2 && b->ndim == 2)
        return "MmBackward0";
    if (a->ndim == 2)
        return "CloneBackward0";
    return "UnsafeViewBackward0";
}

/* mm and bmm take no mixed dtypes, with PyTorch's text (matmul has its own). */
static int check_same_dtype(const weft_tensor *a, const weft_tensor *b)
{
    if (a->dtype == b->dtype)
        return 0;
    return weft_error_set(WEFT_ERR_RUNTIME, "expected scalar type %s but found %s",
                          weft_dtype_torch_name(a->dtype), weft_dtype_torch_name(b->dtype));
}

/* matmul under one node named `name` (the forward's own name, or mm/bmm's). */
static weft_tensor *matmul_named(weft_tensor *a, weft_tensor *b, const char *name)
{
    weft_tensor *in[2] = {a, b};
    bool rec = weft_autograd_needed(2, in);
    weft_tensor *out = FORWARD(rec, weft_fwd_matmul(a, b));
    if (!rec)
        return out;
    struct weft_node *node = weft_node_create(name ? name : matmul_name(a, b), matmul_backward,
                                              2, in, 2);
    if (node && out &&
        (weft_node_save(node, 0, a) != 0 || weft_node_save(node, 1, b) != 0)) {
        weft_node_abandon(node);
        return fail_output(out);
    }
    return finish1(node, out);
}

weft_tensor *weft_matmul(weft_tensor *a, weft_tensor *b)
{
    weft_tensor *in[2] = {a, b};
    AUTOCAST("matmul", 2, in, weft_matmul(in[0], in[1]));
    return matmul_named(a, b, NULL);
}

weft_tensor *weft_mm(weft_tensor *a, weft_tensor *b)
{
    if (!a || !b)
        return NULL;
    if (a->ndim != 2) {
        weft_error_set(WEFT_ERR_RUNTIME, "self must be a matrix");
        return NULL;
    }
    if (b->ndim != 2) {
        weft_error_set(WEFT_ERR_RUNTIME, "mat2 must be a matrix");
        return NULL;
    }
    if (a->shape[1] != b->shape[0]) {
        weft_error_set(WEFT_ERR_RUNTIME,
                       "mat1 and mat2 shapes cannot be multiplied (%lldx%lld and %lldx%lld)",
                       (long long)a->shape[0], (long long)a->shape[1], (long long)b->shape[0],
                       (long long)b->shape[1]);
        return NULL;
    }
    if (check_same_dtype(a, b) < 0)
        return NULL;
    weft_tensor *in[2] = {a, b};
    AUTOCAST("matmul", 2, in, weft_mm(in[0], in[1]));
    return matmul_named(a, b, "MmBackward0");
}

weft_tensor *weft_bmm(weft_tensor *a, weft_tensor *b)
{
    if (!a || !b)
        return NULL;
    if (a->ndim != 3) {
        weft_error_set(WEFT_ERR_RUNTIME, "batch1 must be a 3D tensor");
        return NULL;
    }
    if (b->ndim != 3) {
        weft_error_set(WEFT_ERR_RUNTIME, "batch2 must be a 3D tensor");
        return NULL;
    }
    if (b->shape[0] != a->shape[0] || b->shape[1] != a->shape[2]) {
        weft_error_set(WEFT_ERR_RUNTIME,
                       "Expected size for first two dimensions of batch2 tensor to be: "
                       "[%lld, %lld] but got: [%lld, %lld].",
                       (long long)a->shape[0], (long long)a->shape[2], (long long)b->shape[0],
                       (long long)b->shape[1]);
        return NULL;
    }
    if (check_same_dtype(a, b) < 0)
        return NULL;
    weft_tensor *in[2] = {a, b};
    AUTOCAST("matmul", 2, in, weft_bmm(in[0], in[1]));
    return matmul_named(a, b, "BmmBackward0");
}

/* ---- joining and indexing ------------------------------------------------------------- */

/* cat: each input gets its slice of the gradient. ints[0] = dim. Legacy empty 1-D inputs
 * were skipped by the forward and get no gradient. */
static int cat_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                        weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0];
    if (!g)
        return 0;
    int dim = (int)weft_node_ints(node)[0];
    bool stack = weft_node_ints(node)[1] != 0;
    int64_t offset = 0;
    for (int i = 0; i < weft_node_num_inputs(node); i++) {
        int ndim = weft_node_input_ndim(node, i);
        const int64_t *shape = weft_node_input_shape(node, i);
        if (stack) {
            if (weft_node_needs_input_grad(node, i) && !(grad_inputs[i] = weft_select(g, dim, i)))
                return weft_error_code();
            continue;
        }
        if (ndim == 1 && shape[0] == 0 && g->ndim != 1)
            continue;
        int64_t size = shape[dim];
        if (weft_node_needs_input_grad(node, i) &&
            !(grad_inputs[i] = weft_narrow(g, dim, offset, size)))
            return weft_error_code();
        offset += size;
    }
    return 0;
}

static weft_tensor *joined(bool stack, int n, weft_tensor *const *tensors, int dim)
{
    bool rec = n > 0 && weft_autograd_needed(n, tensors);
    weft_tensor *out = FORWARD(rec, stack ? weft_fwd_stack(n, tensors, dim)
                                          : weft_fwd_cat(n, tensors, dim));
    if (!rec || !out)
        return out;
    struct weft_node *node = weft_node_create(stack ? "StackBackward0" : "CatBackward0",
                                              cat_backward, n, tensors, 0);
    if (node) {
        weft_node_ints(node)[0] = dim < 0 ? dim + out->ndim : dim;
        weft_node_ints(node)[1] = stack;
    }
    return finish1(node, out);
}

weft_tensor *weft_cat(int n, weft_tensor *const *tensors, int dim)
{
    return joined(false, n, tensors, dim);
}

weft_tensor *weft_stack(int n, weft_tensor *const *tensors, int dim)
{
    return joined(true, n, tensors, dim);
}

/* index_select/gather/scatter_add. ints[0] = dim, ints[1] = kind. Saved: 0 index. */
enum index_kind { IX_INDEX_SELECT, IX_GATHER, IX_SCATTER_ADD };

static int index_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                          weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0], *idx = weft_node_saved(node, 0);
    if (!g)
        return 0;
    int dim = (int)weft_node_ints(node)[0];
    switch ((enum index_kind)weft_node_ints(node)[1]) {
    case IX_INDEX_SELECT: {
        /* Scatter-add rows back; the 1-D index is broadcast along the other dims. */
        int nd = g->ndim;
        int64_t shape[WEFT_MAX_DIMS];
        for (int d = 0; d < nd; d++)
            shape[d] = d == dim ? g->shape[d] : 1;
        weft_tensor *ix = weft_expand(weft_reshape(weft_to_dtype(idx, WEFT_I64), nd, shape), nd, g->shape);
        weft_tensor *zeros = weft_zeros(weft_node_input_ndim(node, 0), weft_node_input_shape(node, 0),
                                        g->dtype, g->device);
        grad_inputs[0] = weft_scatter_add(zeros, dim, ix, g);
        break;
    }
    case IX_GATHER: {
        weft_tensor *zeros = weft_zeros(weft_node_input_ndim(node, 0), weft_node_input_shape(node, 0),
                                        g->dtype, g->device);
        grad_inputs[0] = weft_scatter_add(zeros, dim, idx, g);
        break;
    }
    case IX_SCATTER_ADD:
        /* inputs: 0 self, 1 src */
        if (weft_node_needs_input_grad(node, 0))
            grad_inputs[0] = pass(g);
        if (weft_node_needs_input_grad(node, 1) && !(grad_inputs[1] = weft_gather(g, dim, idx)))
            return weft_error_code();
        return 0;
    }
    return grad_inputs[0] ? 0 : weft_error_code();
}

static weft_tensor *record_index(enum index_kind kind, int ninputs, weft_tensor **inputs, int dim,
                                 weft_tensor *index, weft_tensor *out)
{
    static const char *names[] = {"IndexSelectBackward0", "GatherBackward0", "ScatterAddBackward0"};
    struct weft_node *node = weft_node_create(names[kind], index_backward, ninputs, inputs, 1);
    if (node && out) {
        int nd = inputs[0] ? inputs[0]->ndim : 1;
        weft_node_ints(node)[0] = dim < 0 ? dim + (nd ? nd : 1) : dim;
        weft_node_ints(node)[1] = kind;
        if (weft_node_save(node, 0, index) != 0) {
            weft_node_abandon(node);
            return fail_output(out);
        }
    }
    return finish1(node, out);
}

weft_tensor *weft_index_select(weft_tensor *t, int dim, weft_tensor *index)
{
    bool rec = weft_autograd_needed(1, &t);
    weft_tensor *out = FORWARD(rec, weft_fwd_index_select(t, dim, index));
    return rec ? record_index(IX_INDEX_SELECT, 1, &t, dim, index, out) : out;
}

weft_tensor *weft_gather(weft_tensor *t, int dim, weft_tensor *index)
{
    bool rec = weft_autograd_needed(1, &t);
    weft_tensor *out = FORWARD(rec, weft_fwd_gather(t, dim, index));
    return rec ? record_index(IX_GATHER, 1, &t, dim, index, out) : out;
}

weft_tensor *weft_scatter_add(weft_tensor *t, int dim, weft_tensor *index, weft_tensor *src)
{
    weft_tensor *in[2] = {t, src};
    bool rec = weft_autograd_needed(2, in);
    weft_tensor *out = FORWARD(rec, weft_fwd_scatter_add(t, dim, index, src));
    return rec ? record_index(IX_SCATTER_ADD, 2, in, dim, index, out) : out;
}

weft_tensor *weft_scatter_add_(weft_tensor *t, int dim, weft_tensor *index, weft_tensor *src)
{
    weft_tensor *in[2] = {t, src};
    if (!weft_autograd_needed(2, in))
        return weft_fwd_scatter_add_(t, dim, index, src);
    if (weft_autograd_check_inplace(t, true) != 0)
        return NULL;
    weft_tensor *out = FORWARD(true, weft_fwd_scatter_add_(t, dim, index, src));
    return out ? record_index(IX_SCATTER_ADD, 2, in, dim, index, t) : NULL;
}

/* ---- views ------------------------------------------------------------------------------
 * ints[0] = kind; parameters in ints[1..]. */

enum view_kind { V_RESHAPE, V_TRANSPOSE, V_PERMUTE, V_SLICE, V_SELECT, V_EXPAND, V_AS_STRIDED };

/* Gradient of as_strided: every output element adds into the storage position it read.
 * Positions are measured from the input's own offset: ints[1] ndim, ints[2..] shape
 * (ndim), then strides (ndim), then the offset relative to the input. */
static weft_tensor *as_strided_grad(struct weft_node *node, weft_tensor *g)
{
    int64_t *ints = weft_node_ints(node);
    int nd = (int)ints[1];
    const int64_t *stride = ints + 2 + nd;
    int64_t rel_offset = ints[2 + 2 * nd];
    int in_nd = weft_node_input_ndim(node, 0);
    const int64_t *in_shape = weft_node_input_shape(node, 0);
    /* The input is assumed contiguous-like: its elements span numel positions. */
    int64_t in_numel = 1;
    for (int d = 0; d < in_nd; d++)
        in_numel *= in_shape[d];
    int64_t span = in_numel;
    int64_t max_pos = rel_offset;
    for (int d = 0; d < nd; d++)
        if (g->shape[d] > 0)
            max_pos += (g->shape[d] - 1) * stride[d];
    if (max_pos + 1 > span)
        span = max_pos + 1;
    /* positions[i] = rel_offset + sum_d idx_d * stride_d, built by broadcasting aranges. */
    weft_tensor *pos = weft_full(nd, g->shape, (double)rel_offset, WEFT_I64, g->device);
    for (int d = 0; d < nd; d++) {
        int64_t shape[WEFT_MAX_DIMS];
        for (int k = 0; k < nd; k++)
            shape[k] = k == d ? g->shape[d] : 1;
        weft_tensor *ar = weft_mul_scalar(weft_arange(0, (double)g->shape[d], 1, WEFT_I64, g->device),
                                          (double)stride[d]);
        pos = weft_add(pos, weft_reshape(ar, nd, shape));
    }
    int64_t flat_n = weft_tensor_numel(g);
    weft_tensor *flat = weft_zeros(1, &span, g->dtype, g->device);
    flat = weft_scatter_add(flat, 0, weft_reshape(pos, 1, &flat_n), weft_reshape(g, 1, &flat_n));
    /* The input's elements in row-major order are the first in_numel positions. */
    return weft_reshape(weft_narrow(flat, 0, 0, in_numel), in_nd, in_shape);
}

static int view_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                         weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0];
    if (!g)
        return 0;
    int64_t *ints = weft_node_ints(node);
    int in_nd = weft_node_input_ndim(node, 0);
    const int64_t *in_shape = weft_node_input_shape(node, 0);
    weft_tensor *r = NULL;
    switch ((enum view_kind)ints[0]) {
    case V_RESHAPE:
        r = weft_reshape(g, in_nd, in_shape);
        break;
    case V_TRANSPOSE:
        r = weft_transpose(g, (int)ints[1], (int)ints[2]);
        break;
    case V_PERMUTE: {
        int inverse[WEFT_MAX_DIMS];
        for (int d = 0; d < in_nd; d++)
            inverse[ints[1 + d]] = d;
        r = weft_permute(g, in_nd, inverse);
        break;
    }
    case V_SLICE: {
        weft_tensor *z = weft_zeros(in_nd, in_shape, g->dtype, g->device);
        weft_tensor *part = weft_slice(z, (int)ints[1], ints[2], ints[3], ints[4]);
        r = part && weft_copy_(part, g) == 0 ? z : NULL;
        break;
    }
    case V_SELECT: {
        weft_tensor *z = weft_zeros(in_nd, in_shape, g->dtype, g->device);
        weft_tensor *part = weft_select(z, (int)ints[1], ints[2]);
        r = part && weft_copy_(part, g) == 0 ? z : NULL;
        break;
    }
    case V_EXPAND:
        r = pass(g); /* the engine sums the broadcast dims */
        break;
    case V_AS_STRIDED:
        r = as_strided_grad(node, g);
        break;
    }
    grad_inputs[0] = r;
    return r ? 0 : weft_error_code();
}

static weft_tensor *record_view(const char *name, enum view_kind kind, weft_tensor *in,
                                weft_tensor *out, int nparams, const int64_t *params)
{
    struct weft_node *node = weft_node_create(name, view_backward, 1, &in, 0);
    weft_node_mark_view(node);
    if (node && out) {
        int64_t *ints = weft_node_ints(node);
        ints[0] = kind;
        for (int i = 0; i < nparams && i < 15; i++)
            ints[1 + i] = params[i];
    }
    out = finish1(node, out);
    weft_autograd_set_view_base(out, in);
    return out;
}

#define VIEW_RECORD(name, kind, nparams, params, call)                                        \
    do {                                                                                      \
        bool rec = weft_autograd_needed(1, &t);                                               \
        weft_tensor *out = FORWARD(rec, call);                                                \
        return rec ? record_view(name, kind, t, out, nparams, params) : out;                  \
    } while (0)

weft_tensor *weft_view(weft_tensor *t, int ndim, const int64_t *shape)
{
    VIEW_RECORD("ViewBackward0", V_RESHAPE, 0, NULL, weft_fwd_view(t, ndim, shape));
}

/* reshape and flatten are PyTorch's _reshape_alias where a view can express them, else a
 * copy through _unsafe_view: the node is named after whichever happened. */
static weft_tensor *record_reshape(weft_tensor *t, weft_tensor *out)
{
    const char *name = out && t && out->storage != t->storage ? "UnsafeViewBackward0"
                                                              : "ReshapeAliasBackward0";
    return record_view(name, V_RESHAPE, t, out, 0, NULL);
}

weft_tensor *weft_reshape(weft_tensor *t, int ndim, const int64_t *shape)
{
    bool rec = weft_autograd_needed(1, &t);
    weft_tensor *out = FORWARD(rec, weft_fwd_reshape(t, ndim, shape));
    return rec ? record_reshape(t, out) : out;
}

weft_tensor *weft_squeeze(weft_tensor *t)
{
    VIEW_RECORD("SqueezeBackward0", V_RESHAPE, 0, NULL, weft_fwd_squeeze(t));
}

weft_tensor *weft_squeeze_dim(weft_tensor *t, int dim)
{
    VIEW_RECORD("SqueezeBackward1", V_RESHAPE, 0, NULL, weft_fwd_squeeze_dim(t, dim));
}

weft_tensor *weft_unsqueeze(weft_tensor *t, int dim)
{
    VIEW_RECORD("UnsqueezeBackward0", V_RESHAPE, 0, NULL, weft_fwd_unsqueeze(t, dim));
}

weft_tensor *weft_flatten(weft_tensor *t, int start_dim, int end_dim)
{
    bool rec = weft_autograd_needed(1, &t);
    weft_tensor *out = FORWARD(rec, weft_fwd_flatten(t, start_dim, end_dim));
    return rec ? record_reshape(t, out) : out;
}

weft_tensor *weft_unflatten(weft_tensor *t, int dim, int ndim, const int64_t *sizes)
{
    VIEW_RECORD("ViewBackward0", V_RESHAPE, 0, NULL, weft_fwd_unflatten(t, dim, ndim, sizes));
}

weft_tensor *weft_transpose(weft_tensor *t, int dim0, int dim1)
{
    int nd = t && t->ndim ? t->ndim : 1;
    int64_t params[2] = {dim0 < 0 ? dim0 + nd : dim0, dim1 < 0 ? dim1 + nd : dim1};
    VIEW_RECORD("TransposeBackward0", V_TRANSPOSE, 2, params, weft_fwd_transpose(t, dim0, dim1));
}

weft_tensor *weft_t(weft_tensor *t)
{
    int64_t params[2] = {0, t && t->ndim == 2 ? 1 : 0};
    VIEW_RECORD("TBackward0", V_TRANSPOSE, 2, params, weft_fwd_t(t));
}

weft_tensor *weft_permute(weft_tensor *t, int ndim, const int *dims)
{
    int64_t params[WEFT_MAX_DIMS];
    for (int i = 0; i < ndim && i < WEFT_MAX_DIMS; i++)
        params[i] = dims[i] < 0 ? dims[i] + ndim : dims[i];
    VIEW_RECORD("PermuteBackward0", V_PERMUTE, ndim, params, weft_fwd_permute(t, ndim, dims));
}

weft_tensor *weft_narrow(weft_tensor *t, int dim, int64_t start, int64_t length)
{
    int nd = t && t->ndim ? t->ndim : 1;
    int d = dim < 0 ? dim + nd : dim;
    int64_t s = t && start < 0 && d >= 0 && d < t->ndim ? start + t->shape[d] : start;
    int64_t params[4] = {d, s, s + length, 1};
    VIEW_RECORD("SliceBackward0", V_SLICE, 4, params, weft_fwd_narrow(t, dim, start, length));
}

weft_tensor *weft_slice(weft_tensor *t, int dim, int64_t start, int64_t end, int64_t step)
{
    int nd = t && t->ndim ? t->ndim : 1;
    int64_t params[4] = {dim < 0 ? dim + nd : dim, start, end, step};
    VIEW_RECORD("SliceBackward0", V_SLICE, 4, params, weft_fwd_slice(t, dim, start, end, step));
}

weft_tensor *weft_select(weft_tensor *t, int dim, int64_t index)
{
    int nd = t && t->ndim ? t->ndim : 1;
    int d = dim < 0 ? dim + nd : dim;
    int64_t i = t && index < 0 && d >= 0 && d < t->ndim ? index + t->shape[d] : index;
    int64_t params[2] = {d, i};
    VIEW_RECORD("SelectBackward0", V_SELECT, 2, params, weft_fwd_select(t, dim, index));
}

weft_tensor *weft_expand(weft_tensor *t, int ndim, const int64_t *shape)
{
    VIEW_RECORD("ExpandBackward0", V_EXPAND, 0, NULL, weft_fwd_expand(t, ndim, shape));
}

weft_tensor *weft_as_strided(weft_tensor *t, int ndim, const int64_t *shape, const int64_t *stride,
                             int64_t offset)
{
    int64_t params[15] = {ndim};
    if (ndim > 0 && ndim <= 6) {
        memcpy(params + 1, shape, (size_t)ndim * sizeof *shape);
        memcpy(params + 1 + ndim, stride, (size_t)ndim * sizeof *stride);
        params[1 + 2 * ndim] = t ? offset - t->offset : 0;
    }
    bool rec = weft_autograd_needed(1, &t);
    if (rec && !weft_tensor_is_contiguous(t)) {
        weft_error_set(WEFT_ERR_NOT_IMPLEMENTED,
                       "as_strided of a non-contiguous tensor that requires grad is not "
                       "supported; call contiguous() first");
        return NULL;
    }
    if (rec && ndim > 6) {
        weft_error_set(WEFT_ERR_NOT_IMPLEMENTED,
                       "as_strided backward supports at most 6 dims, got %d", ndim);
        return NULL;
    }
    weft_tensor *out = FORWARD(rec, weft_fwd_as_strided(t, ndim, shape, stride, offset));
    return rec ? record_view("AsStridedBackward0", V_AS_STRIDED, t, out, 2 + 2 * ndim, params) : out;
}

/* ---- copies ------------------------------------------------------------------------------ */

/* to / clone / contiguous: the gradient goes back unchanged, moved to the input's device
 * (the engine converts the dtype). ints[0..1]: input device. */
static int copy_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                         weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0];
    if (!g)
        return 0;
    weft_device dev = {(int16_t)weft_node_ints(node)[0], (int16_t)weft_node_ints(node)[1]};
    grad_inputs[0] = weft_device_equal(dev, g->device) ? pass(g) : weft_to_device(g, dev);
    return grad_inputs[0] ? 0 : weft_error_code();
}

static weft_tensor *record_copy(const char *name, weft_tensor *in, weft_tensor *out)
{
    if (out == in) /* no-op conversion: same tensor, same history */
        return out;
    struct weft_node *node = weft_node_create(name, copy_backward, 1, &in, 0);
    if (node && out) {
        weft_node_ints(node)[0] = in->device.type;
        weft_node_ints(node)[1] = in->device.index;
    }
    return finish1(node, out);
}

weft_tensor *weft_contiguous(weft_tensor *t)
{
    bool rec = weft_autograd_needed(1, &t);
    weft_tensor *out = FORWARD(rec, weft_fwd_contiguous(t));
    return rec ? record_copy("CloneBackward0", t, out) : out;
}

weft_tensor *weft_clone(weft_tensor *t)
{
    bool rec = weft_autograd_needed(1, &t);
    weft_tensor *out = FORWARD(rec, weft_fwd_clone(t));
    return rec ? record_copy("CloneBackward0", t, out) : out;
}

weft_tensor *weft_to(weft_tensor *t, weft_device dev, enum weft_dtype dtype, bool non_blocking)
{
    bool rec = weft_autograd_needed(1, &t);
    weft_tensor *out = FORWARD(rec, weft_fwd_to(t, dev, dtype, non_blocking));
    return rec ? record_copy("ToCopyBackward0", t, out) : out;
}

/* copy_: dst's old value is overwritten (no gradient); src gets the gradient. */
static int copy_inplace_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                                 weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0];
    if (!g)
        return 0;
    if (weft_node_needs_input_grad(node, 0) && !(grad_inputs[0] = weft_zeros_like(g)))
        return weft_error_code();
    if (weft_node_needs_input_grad(node, 1)) {
        weft_device dev = {(int16_t)weft_node_ints(node)[0], (int16_t)weft_node_ints(node)[1]};
        grad_inputs[1] = weft_device_equal(dev, g->device) ? pass(g) : weft_to_device(g, dev);
        if (!grad_inputs[1])
            return weft_error_code();
    }
    return 0;
}

int weft_copy_nonblocking_(weft_tensor *dst, const weft_tensor *src, bool non_blocking)
{
    weft_tensor *in[2] = {dst, (weft_tensor *)src};
    if (!weft_autograd_needed(2, in))
        return weft_fwd_copy_nonblocking_(dst, src, non_blocking);
    if (weft_autograd_check_inplace(dst, true) != 0)
        return weft_error_code();
    int rc = FORWARD(true, weft_fwd_copy_nonblocking_(dst, src, non_blocking));
    if (rc != 0)
        return rc;
    struct weft_node *node = weft_node_create("CopyBackwards", copy_inplace_backward, 2, in, 0);
    if (!node)
        return weft_error_code();
    weft_node_ints(node)[0] = src->device.type;
    weft_node_ints(node)[1] = src->device.index;
    return weft_node_finish(node, 1, &dst);
}
