/* ops/unary.c: the unary elementwise ops (weft_neg ... weft_sinc), forward and backward,
 * all generated from the rows of WEFT_OPS_UNARY (weft/op_table.h): each row's dtype rule
 * picks the computation and result dtypes, its autocast column whether the front end
 * casts, its GRAD_FN the node's name, SAVES what the node keeps and BACKWARD the formula,
 * an expression of g (the gradient), x (the input) and y (the result) written with ops,
 * so it runs on every backend that has the forward kernels. */
#include <math.h>
#include <string.h>

#include "elementwise.h"
#include "memory_format.h"
#include "weft/observer.h"

/* ---- the backward formulas the rows name ------------------------------------------------ */

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
    return rc == 0 ? out : weft_tensor_discard(out);
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

/* silu's: sigmoid(x) (1 + x (1 - sigmoid(x))). */
static weft_tensor *silu_backward(weft_tensor *g, weft_tensor *x)
{
    weft_tensor *s = weft_sigmoid(x);
    return weft_mul(g, weft_mul(s, weft_add_scalar(weft_mul(x, weft_rsub_scalar(s, 1)), 1)));
}

/* ---- the rows -------------------------------------------------------------------------- */

enum unary_rule { RULE_SAME, RULE_FLOAT, RULE_FLOATING, RULE_NEG, RULE_RELU, RULE_ROUNDING, RULE_NOT };
enum { SAVE_NOTHING = 0, SAVE_INPUT = 1, SAVE_RESULT = 2, SAVE_INPUT_RESULT = 3 };
#define AC_PROMOTE WEFT_AUTOCAST_PROMOTE
#define AC_LOWER WEFT_AUTOCAST_LOWER
#define AC_FP32 WEFT_AUTOCAST_FP32

typedef weft_tensor *(*unary_formula)(weft_tensor *g, weft_tensor *x, weft_tensor *y);

struct unary_op {
    int id;
    enum unary_rule rule;
    const char *name;
    const char *grad_fn; /* NULL: not differentiable */
    int saves;           /* SAVE_* */
    unary_formula formula;
};

/* Each row's formula as a function of (g, x, y). */
#define UNARY_FORMULA(ID, name, DTYPES, AUTOCAST, GRAD_FN, SAVES, BACKWARD, DOMAIN, REF)      \
    static weft_tensor *formula_##name(weft_tensor *g, weft_tensor *x, weft_tensor *y)        \
    {                                                                                         \
        (void)g, (void)x, (void)y;                                                            \
        return BACKWARD;                                                                      \
    }                                                                                         \
    static const struct unary_op unary_##name = {WEFT_OP_##ID, RULE_##DTYPES, #name, GRAD_FN, \
                                                 SAVE_##SAVES, formula_##name};
WEFT_OPS_UNARY(UNARY_FORMULA)
#undef UNARY_FORMULA

/* The rows by id, for the backward (a node keeps its op's id). */
static const struct unary_op *const unary_ops[WEFT_OP_BUILTIN_COUNT] = {
#define UNARY_BY_ID(ID, name, ...) [WEFT_OP_##ID] = &unary_##name,
    WEFT_OPS_UNARY(UNARY_BY_ID)
#undef UNARY_BY_ID
};

/* ---- forward ---------------------------------------------------------------------------- */

/* Computation and result dtypes of a unary op on dt. */
static int unary_dtypes(const struct unary_op *u, enum weft_dtype dt, enum weft_dtype *ct,
                        enum weft_dtype *rt)
{
    if (u->rule == RULE_NEG && dt == WEFT_BOOL)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "Negation, the `-` operator, on a bool tensor is not supported. If "
                              "you are trying to invert a mask, use the `~` or `logical_not()` "
                              "operator instead.");
    if (u->rule == RULE_RELU && dt == WEFT_BOOL)
        return weft_error_set(WEFT_ERR_RUNTIME, "Boolean inputs not supported for relu");
    if (u->rule == RULE_FLOATING && !dtype_is_floating(dt))
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "\"%s\" not implemented for '%s'",
                              u->name, weft_dtype_torch_name(dt));
    *ct = u->rule == RULE_FLOAT && !dtype_is_floating(dt) ? weft_default_dtype() : dt;
    *rt = u->rule == RULE_NOT ? WEFT_BOOL : *ct;
    return 0;
}

/* A copy of t laid out as an elementwise result over t (PyTorch copies integers through
 * its iterator for floor, ceil, round and trunc, not with clone's layout). */
static weft_tensor *copy_as_result(weft_tensor *t)
{
    int64_t strides[WEFT_MAX_DIMS];
    weft_scope_push();
    weft_tensor *out = weft_elementwise_strides(1, (const weft_tensor *const *)&t, t->ndim,
                                                t->shape, strides)
                           ? weft_empty_dense_strided(t->ndim, t->shape, NULL, t->dtype, t->device)
                           : weft_empty_dense_strided(t->ndim, t->shape, strides, t->dtype,
                                                      t->device);
    if (out && weft_copy_(out, t) != 0)
        out = NULL;
    return ew_leave_scope(out);
}

static weft_tensor *unary_forward(const struct unary_op *u, weft_tensor *t)
{
    enum weft_dtype ct, rt;
    if (!t || unary_dtypes(u, t->dtype, &ct, &rt) < 0)
        return NULL;
    if (u->rule == RULE_ROUNDING && weft_dtype_is_integral(t->dtype))
        return copy_as_result(t);
    return ew_map1(&(struct weft_op_call){.op = u->id, .nin = 1}, t, ct, rt);
}

static weft_tensor *unary_forward_(const struct unary_op *u, weft_tensor *t)
{
    enum weft_dtype ct, rt;
    if (!t || unary_dtypes(u, t->dtype, &ct, &rt) < 0)
        return NULL;
    if (u->rule == RULE_ROUNDING && weft_dtype_is_integral(t->dtype)) {
        weft_tensor_bump_version(t);
        return t;
    }
    return ew_map1_(&(struct weft_op_call){.op = u->id, .nin = 1}, t, ct, rt);
}

/* ---- backward --------------------------------------------------------------------------
 * ints[0] the op's id; saved: 0 the input, 1 the result (as the row's SAVES says). */

static int unary_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                          weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0];
    int64_t id = weft_node_ints(node)[0];
    const struct unary_op *u = id >= 0 && id < WEFT_OP_BUILTIN_COUNT ? unary_ops[id] : NULL;
    if (!u)
        return weft_error_set(WEFT_ERR_RUNTIME, "unary backward: unknown op %lld", (long long)id);
    if (!g)
        return 0;
    grad_inputs[0] = u->formula(g, weft_node_saved(node, 0), weft_node_saved(node, 1));
    return grad_inputs[0] ? 0 : weft_error_code();
}

/* A node for u over in, saving x (the input's value) and the result as the row says. */
static struct weft_node *unary_node(const struct unary_op *u, weft_tensor *in, weft_tensor *x,
                                    weft_tensor *out)
{
    struct weft_node *node = weft_node_create(u->grad_fn, unary_backward, 1, &in, 2);
    if (!node || !out)
        return node;
    weft_node_ints(node)[0] = u->id;
    int rc = u->saves & SAVE_INPUT ? weft_node_save(node, 0, x) : 0;
    if (rc == 0 && (u->saves & SAVE_RESULT))
        rc = weft_node_save_output(node, 1, out, 0);
    if (rc != 0) {
        weft_node_abandon(node);
        return NULL;
    }
    return node;
}

/* ---- the public ops ---------------------------------------------------------------------- */

static weft_tensor *unary_op(const struct unary_op *u, weft_tensor *t)
{
    bool rec = u->grad_fn && weft_autograd_needed_inline(1, &t);
    weft_tensor *out = WEFT_NO_GRAD(rec, unary_forward(u, t));
    if (!rec)
        return out;
    struct weft_node *node = unary_node(u, t, t, out);
    return node ? weft_node_finish1(node, out) : weft_tensor_discard(out);
}

static weft_tensor *unary_op_(const struct unary_op *u, weft_tensor *t)
{
    if (!weft_autograd_needed_inline(1, &t))
        return unary_forward_(u, t);
    if (weft_autograd_check_inplace(t, u->grad_fn != NULL) != 0)
        return NULL;
    if (!u->grad_fn) /* a bool result: nothing to record */
        return unary_forward_(u, t);
    weft_tensor *orig = u->saves & SAVE_INPUT ? original_value(t) : t;
    if (!orig)
        return NULL;
    struct weft_node *node = weft_node_create(u->grad_fn, unary_backward, 1, &t, 2);
    weft_tensor *out = node ? WEFT_NO_GRAD(true, unary_forward_(u, t)) : NULL;
    int rc = out ? 0 : -1;
    if (rc == 0) {
        weft_node_ints(node)[0] = u->id;
        if (u->saves & SAVE_INPUT)
            rc = weft_node_save(node, 0, orig);
        if (rc == 0 && (u->saves & SAVE_RESULT))
            rc = weft_node_save_output(node, 1, t, 0);
    }
    if (orig != t)
        weft_tensor_discard(orig);
    if (rc != 0) {
        weft_node_abandon(node);
        return NULL;
    }
    return weft_node_finish(node, 1, &t) == 0 ? t : NULL;
}

/* weft_<name> and weft_<name>_: under autocast, an op whose row casts runs on its cast
 * input (the in-place form keeps its tensor's dtype, as PyTorch's). */
#define UNARY_PUBLIC(ID, name, DTYPES, AUTOCAST, ...)                                         \
    weft_tensor *weft_##name(weft_tensor *t)                                                  \
    {                                                                                         \
        if (AC_##AUTOCAST != WEFT_AUTOCAST_PROMOTE)                                           \
            WEFT_AUTOCAST_RETURN(#name, 1, &t, weft_##name(t));                               \
        return unary_op(&unary_##name, t);                                                    \
    }                                                                                         \
    weft_tensor *weft_##name##_(weft_tensor *t) { return unary_op_(&unary_##name, t); }
WEFT_OPS_UNARY(UNARY_PUBLIC)
#undef UNARY_PUBLIC
