/* ops/binary.c: the binary elementwise ops with broadcasting (weft_add ... weft_logical_or,
 * each with its in-place and scalar forms, and s - t, s / t), forward and backward, from
 * the rows of WEFT_OPS_BINARY (weft/op_table.h): each row's dtype rule picks the
 * computation and result dtypes, its autocast column whether the front end casts, its
 * GRAD_FN the node's name, SAVES what the node keeps and BACKWARD the function below that
 * holds the formula (derivatives.yaml's), written with ops. */
#include <math.h>
#include <string.h>

#include "elementwise.h"

/* ---- the backward formulas the rows name -------------------------------------------------
 * Each fills ga and gb (NULL: no gradient) for what the node needs. */

struct binary_grad {
    weft_tensor *g, *a, *b, *out; /* the gradient; the saved values the row asked for */
    bool scalar;                  /* the right operand was the scalar s */
    double s;
    bool need_a, need_b;
    weft_tensor *ga, *gb;
};

static weft_tensor *pass(weft_tensor *g)
{
    return weft_autorelease(weft_tensor_retain(g));
}

static void add_backward(struct binary_grad *x)
{
    x->ga = pass(x->g);
    x->gb = x->need_b ? pass(x->g) : NULL;
}

static void sub_backward(struct binary_grad *x)
{
    x->ga = pass(x->g);
    x->gb = x->need_b ? weft_neg(x->g) : NULL;
}

static void mul_backward(struct binary_grad *x)
{
    x->ga = x->need_a ? (x->scalar ? weft_mul_scalar(x->g, x->s) : weft_mul(x->g, x->b)) : NULL;
    x->gb = x->need_b ? weft_mul(x->g, x->a) : NULL;
}

static void div_backward(struct binary_grad *x)
{
    x->ga = x->need_a ? (x->scalar ? weft_div_scalar(x->g, x->s) : weft_div(x->g, x->b)) : NULL;
    x->gb = x->need_b ? weft_neg(weft_div(weft_mul(x->g, x->out), x->b)) : NULL;
}

static void pow_backward(struct binary_grad *x)
{
    weft_tensor *g = x->g, *a = x->a, *b = x->b;
    if (x->scalar) {
        x->ga = x->s == 0 ? weft_zeros_like(a)
                          : weft_mul(g, weft_mul_scalar(weft_pow_scalar(a, x->s - 1), x->s));
        return;
    }
    /* b * a ** (b - 1) is 0 * inf = nan at a = 0, b = 0: PyTorch masks b == 0 to 0. */
    if (x->need_a)
        x->ga = masked(weft_ne_scalar(b, 0), weft_mul(g, weft_mul(b, weft_pow(a, weft_sub_scalar(b, 1)))));
    if (x->need_b) {
        /* 0 ** b with b >= 0 has no log term: PyTorch masks it to 0. */
        weft_tensor *zero_base = weft_logical_and(weft_eq_scalar(a, 0), weft_ge_scalar(b, 0));
        x->gb = masked(weft_logical_not(zero_base), weft_mul(weft_mul(g, x->out), weft_log(a)));
    }
}

/* Ties share the gradient evenly, as PyTorch's. */
static void extreme_backward(struct binary_grad *x, bool is_max)
{
    weft_tensor *g = x->g, *a = x->a, *b = x->b;
    if (x->scalar) {
        weft_tensor *ties = weft_where(weft_eq_scalar(a, x->s), weft_mul_scalar(g, 0.5), g);
        x->ga = masked(is_max ? weft_ge_scalar(a, x->s) : weft_le_scalar(a, x->s), ties);
        return;
    }
    weft_tensor *ties = weft_where(weft_eq(a, b), weft_mul_scalar(g, 0.5), g);
    x->ga = x->need_a ? masked(is_max ? weft_ge(a, b) : weft_le(a, b), ties) : NULL;
    x->gb = x->need_b ? masked(is_max ? weft_le(a, b) : weft_ge(a, b), ties) : NULL;
}

static void maximum_backward(struct binary_grad *x)
{
    extreme_backward(x, true);
}

static void minimum_backward(struct binary_grad *x)
{
    extreme_backward(x, false);
}

/* s - t (rsub) and s / t (rdiv): the forms with the scalar on the left. */
static void rsub_backward(struct binary_grad *x)
{
    x->ga = weft_neg(x->g);
}

static void rdiv_backward(struct binary_grad *x)
{
    x->ga = weft_neg(weft_div(weft_mul(x->g, x->out), x->a));
}

/* ---- the rows -------------------------------------------------------------------------- */

enum binary_rule { RULE_ARITH, RULE_SUB, RULE_DIV, RULE_POW, RULE_COMPARE };
enum { NOTHING = 0, A = 1, B = 2, OUT = 4 }; /* what a node saves */
#define AC_PROMOTE WEFT_AUTOCAST_PROMOTE
#define AC_LOWER WEFT_AUTOCAST_LOWER
#define AC_FP32 WEFT_AUTOCAST_FP32

struct binary_op {
    int id;
    enum binary_rule rule;
    const char *grad_fn; /* NULL: not differentiable */
    int saves;           /* the tensor-tensor form's */
    void (*formula)(struct binary_grad *x);
};

#define BINARY_ROW(ID, name, DTYPES, AUTOCAST, GRAD_FN, SAVES, BACKWARD, DOMAIN, REF)         \
    static const struct binary_op binary_##name = {WEFT_OP_##ID, RULE_##DTYPES, GRAD_FN, SAVES, \
                                                   BACKWARD};
WEFT_OPS_BINARY(BINARY_ROW)
#undef BINARY_ROW

/* PyTorch names s - t's node RsubBackward1, and computes s / t as t.reciprocal() * s. */
static const struct binary_op binary_rsub = {WEFT_OP_SUB, RULE_SUB, "RsubBackward1", NOTHING,
                                             rsub_backward};
static const struct binary_op binary_rdiv = {WEFT_OP_DIV, RULE_DIV, "MulBackward0", A | OUT,
                                             rdiv_backward};

/* ---- forward ---------------------------------------------------------------------------- */

/* Computation and result dtypes given the promoted dtype. b_bool: the right operand is a
 * bool tensor; scalar/s: the right operand is the scalar s. */
static int binary_dtypes(const struct binary_op *op, enum weft_dtype promoted, bool a_bool,
                         bool b_bool, bool scalar, double s, enum weft_dtype *ct,
                         enum weft_dtype *rt)
{
    *ct = promoted;
    switch (op->rule) {
    case RULE_SUB:
        if (a_bool && b_bool)
            return weft_error_set(WEFT_ERR_RUNTIME,
                                  "Subtraction, the `-` operator, with two bool tensors is not "
                                  "supported. Use the `^` or `logical_xor()` operator instead.");
        if (a_bool || b_bool)
            return weft_error_set(WEFT_ERR_RUNTIME,
                                  "Subtraction, the `-` operator, with a bool tensor is not "
                                  "supported. If you are trying to invert a mask, use the `~` or "
                                  "`logical_not()` operator instead.");
        break;
    case RULE_DIV:
        if (!dtype_is_floating(promoted))
            *ct = weft_default_dtype();
        break;
    case RULE_POW:
        if (scalar && !dtype_is_floating(promoted) && s < 0)
            return weft_error_set(WEFT_ERR_RUNTIME, "Integers to negative integer powers are not allowed.");
        break;
    default:
        break;
    }
    *rt = op->rule == RULE_COMPARE ? WEFT_BOOL : *ct;
    return 0;
}

static int binary_check(const struct binary_op *op, weft_tensor *a, weft_tensor *b,
                        enum weft_dtype *ct, enum weft_dtype *rt)
{
    const weft_tensor *pair[2] = {a, b};
    if (!weft_device_equal(a->device, b->device) && weft_check_same_device(2, pair) < 0)
        return -1;
    enum weft_dtype promoted = a->dtype == b->dtype ? a->dtype : weft_result_type(a, b);
    return binary_dtypes(op, promoted, a->dtype == WEFT_BOOL, b->dtype == WEFT_BOOL, false, 0, ct,
                         rt);
}

static int binary_scalar_check(const struct binary_op *op, weft_tensor *a, double s,
                               enum weft_dtype *ct, enum weft_dtype *rt)
{
    return binary_dtypes(op, weft_result_type_scalar(a, s), a->dtype == WEFT_BOOL, false, true, s,
                         ct, rt);
}

static weft_tensor *binary_forward(const struct binary_op *op, weft_tensor *a, weft_tensor *b)
{
    enum weft_dtype ct, rt;
    if (!a || !b || binary_check(op, a, b, &ct, &rt) < 0)
        return NULL;
    return ew_map2(&(struct weft_op_call){.op = op->id}, a, b, ct, rt);
}

static weft_tensor *binary_forward_(const struct binary_op *op, weft_tensor *a, weft_tensor *b)
{
    enum weft_dtype ct, rt;
    if (!a || !b || binary_check(op, a, b, &ct, &rt) < 0)
        return NULL;
    return ew_map2_(&(struct weft_op_call){.op = op->id}, a, b, ct, rt);
}

/* The kernels take a NULL right operand as "scalar[0]". */
#define scalar_call(id, s) ((struct weft_op_call){.op = (id), .nin = 2, .scalar = {(s)}})

/* The kernel call for op(t, s). PyTorch computes t ** 0.5 as sqrt(t) and t ** -0.5 as
 * 1 / sqrt(t) (PowKernel.cpp's paths for a scalar exponent), which part from C99's pow at
 * -0 and -inf: (-0) ** -0.5 = -inf, (-0) ** 0.5 = -0, (-inf) ** +-0.5 = nan. A tensor
 * exponent takes pow itself, C99's answers, as PyTorch's does; so does float16, which
 * 1.13's cpu kernel sends to std::pow whatever the exponent. */
static struct weft_op_call scalar_op_call(const struct binary_op *op, double s, enum weft_dtype ct)
{
    if (op == &binary_pow && dtype_is_floating(ct) && ct != WEFT_F16 && (s == 0.5 || s == -0.5))
        return (struct weft_op_call){.op = s > 0 ? WEFT_OP_SQRT : WEFT_OP_RSQRT, .nin = 1};
    return scalar_call(op->id, s);
}

static weft_tensor *binary_scalar_forward(const struct binary_op *op, weft_tensor *a, double s)
{
    enum weft_dtype ct, rt;
    if (!a || binary_scalar_check(op, a, s, &ct, &rt) < 0)
        return NULL;
    struct weft_op_call call = scalar_op_call(op, s, ct);
    return ew_map1(&call, a, ct, rt);
}

static weft_tensor *binary_scalar_forward_(const struct binary_op *op, weft_tensor *a, double s)
{
    enum weft_dtype ct, rt;
    if (!a || binary_scalar_check(op, a, s, &ct, &rt) < 0)
        return NULL;
    struct weft_op_call call = scalar_op_call(op, s, ct);
    return ew_map1_(&call, a, ct, rt);
}

/* ---- backward ----------------------------------------------------------------------------
 * The node keeps its row (a pointer to it in ints[0]: rows are static), whether the right
 * operand was a scalar (ints[1]) and which (scalars[0]); saved: 0 a, 1 b, 2 the result. */

static int binary_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                           weft_tensor **grad_inputs)
{
    const struct binary_op *op = (const struct binary_op *)(intptr_t)weft_node_ints(node)[0];
    struct binary_grad x = {
        .g = grad_outputs[0],
        .a = weft_node_saved(node, 0),
        .b = weft_node_saved(node, 1),
        .out = weft_node_saved(node, 2),
        .scalar = weft_node_ints(node)[1] != 0,
        .s = weft_node_scalars(node)[0],
        .need_a = weft_node_needs_input_grad(node, 0),
    };
    x.need_b = !x.scalar && weft_node_needs_input_grad(node, 1);
    if (!x.g)
        return 0;
    op->formula(&x);
    if ((x.need_a && !x.ga) || (x.need_b && !x.gb))
        return weft_error_code();
    grad_inputs[0] = x.need_a ? x.ga : NULL;
    if (!x.scalar)
        grad_inputs[1] = x.gb;
    return 0;
}

/* What the node keeps: the row's SAVES for two tensors; the scalar form has no b, and t * s
 * and t / s read neither t nor the result, so, as in PyTorch, they save nothing and a
 * later in-place change of t does not invalidate them. Nor does mul keep an operand only
 * the other's gradient reads, nor div its result for a divisor needing no gradient
 * (PyTorch saves a tensor only when a gradient to compute reads it): x * C with C needing
 * none keeps C, not x. */
static int binary_saves(const struct binary_op *op, bool scalar, bool need_a, bool need_b)
{
    if (!scalar && op == &binary_mul)
        return (need_a ? B : 0) | (need_b ? A : 0);
    if (!scalar && op == &binary_div)
        return (need_a ? B : 0) | (need_b ? B | OUT : 0);
    if (!scalar)
        return op->saves;
    if (op == &binary_mul || op == &binary_div)
        return NOTHING;
    return op->saves & ~B;
}

/* a_value: a's value before the op (a itself, or a copy for in-place ops). */
static weft_tensor *record_binary(const struct binary_op *op, bool scalar, double s,
                                  weft_tensor *a, weft_tensor *a_value, weft_tensor *b,
                                  weft_tensor *out)
{
    weft_tensor *inputs[2] = {a, b};
    const char *name = scalar && op == &binary_pow ? "PowBackward0" : op->grad_fn;
    struct weft_node *node = weft_node_create(name, binary_backward, scalar ? 1 : 2, inputs, 3);
    if (!node || !out)
        return weft_node_finish1(node, out);
    weft_node_ints(node)[0] = (intptr_t)op;
    weft_node_ints(node)[1] = scalar;
    weft_node_scalars(node)[0] = s;
    int saves = binary_saves(op, scalar, weft_node_needs_input_grad(node, 0),
                             !scalar && weft_node_needs_input_grad(node, 1));
    int rc = saves & A ? weft_node_save(node, 0, a_value) : 0;
    if (rc == 0 && (saves & B))
        rc = weft_node_save(node, 1, b);
    if (rc == 0 && (saves & OUT))
        rc = weft_node_save_output(node, 2, out, 0);
    if (rc != 0) {
        weft_node_abandon(node);
        return weft_tensor_discard(out);
    }
    return weft_node_finish1(node, out);
}

/* In-place: check, keep a's old value when the formula reads it, run, record. */
static weft_tensor *record_binary_inplace(const struct binary_op *op, bool scalar, double s,
                                          weft_tensor *a, weft_tensor *b)
{
    if (weft_autograd_check_inplace(a, true) != 0)
        return NULL;
    /* in place, a's old value is kept when the formula may read it (a needs a gradient
     * here, which is what made this op record) */
    weft_tensor *orig = binary_saves(op, scalar, true, !scalar && weft_requires_grad(b)) & A
                            ? original_value(a)
                            : a;
    if (!orig)
        return NULL;
    weft_tensor *out = WEFT_NO_GRAD(true, scalar ? binary_scalar_forward_(op, a, s)
                                                 : binary_forward_(op, a, b));
    weft_tensor *r = out ? record_binary(op, scalar, s, a, orig, b, a) : NULL;
    if (orig != a)
        weft_tensor_discard(orig);
    return r;
}

/* ---- the public ops ---------------------------------------------------------------------- */

static weft_tensor *binary_op(const struct binary_op *op, weft_tensor *a, weft_tensor *b)
{
    weft_tensor *in[2] = {a, b};
    bool rec = op->grad_fn && weft_autograd_needed_inline(2, in);
    weft_tensor *out = WEFT_NO_GRAD(rec, binary_forward(op, a, b));
    return rec ? record_binary(op, false, 0, a, a, b, out) : out;
}

static weft_tensor *binary_op_(const struct binary_op *op, weft_tensor *a, weft_tensor *b)
{
    weft_tensor *in[2] = {a, b};
    if (!weft_autograd_needed_inline(2, in))
        return binary_forward_(op, a, b);
    if (!op->grad_fn) /* a bool result: nothing to record */
        return weft_autograd_check_inplace(a, false) == 0 ? binary_forward_(op, a, b) : NULL;
    return record_binary_inplace(op, false, 0, a, b);
}

static weft_tensor *binary_scalar_op(const struct binary_op *op, weft_tensor *a, double s)
{
    bool rec = op->grad_fn && weft_autograd_needed_inline(1, &a);
    weft_tensor *out = WEFT_NO_GRAD(rec, binary_scalar_forward(op, a, s));
    return rec ? record_binary(op, true, s, a, a, NULL, out) : out;
}

static weft_tensor *binary_scalar_op_(const struct binary_op *op, weft_tensor *a, double s)
{
    if (!weft_autograd_needed_inline(1, &a))
        return binary_scalar_forward_(op, a, s);
    if (!op->grad_fn)
        return weft_autograd_check_inplace(a, false) == 0 ? binary_scalar_forward_(op, a, s) : NULL;
    return record_binary_inplace(op, true, s, a, NULL);
}

/* weft_<name>, weft_<name>_, weft_<name>_scalar, weft_<name>_scalar_: under autocast, an
 * op whose row casts runs on its cast inputs (the in-place forms keep their dtype). */
#define BINARY_PUBLIC(ID, name, DTYPES, AUTOCAST, ...)                                        \
    weft_tensor *weft_##name(weft_tensor *a, weft_tensor *b)                                  \
    {                                                                                         \
        weft_tensor *in[2] = {a, b};                                                          \
        if (AC_##AUTOCAST != WEFT_AUTOCAST_PROMOTE)                                           \
            WEFT_AUTOCAST_RETURN(#name, 2, in, weft_##name(in[0], in[1]));                    \
        return binary_op(&binary_##name, a, b);                                               \
    }                                                                                         \
    weft_tensor *weft_##name##_(weft_tensor *a, weft_tensor *b)                               \
    {                                                                                         \
        return binary_op_(&binary_##name, a, b);                                              \
    }                                                                                         \
    weft_tensor *weft_##name##_scalar(weft_tensor *a, double s)                               \
    {                                                                                         \
        if (AC_##AUTOCAST != WEFT_AUTOCAST_PROMOTE)                                           \
            WEFT_AUTOCAST_RETURN(#name, 1, &a, weft_##name##_scalar(a, s));                   \
        return binary_scalar_op(&binary_##name, a, s);                                        \
    }                                                                                         \
    weft_tensor *weft_##name##_scalar_(weft_tensor *a, double s)                              \
    {                                                                                         \
        return binary_scalar_op_(&binary_##name, a, s);                                      \
    }
WEFT_OPS_BINARY(BINARY_PUBLIC)
#undef BINARY_PUBLIC

/* A named binary op (weft/kernel.h) with add's promotion: the promoted dtype computes and
 * is the result's (floor_divide, remainder: divmod.c). */
weft_tensor *weft_fwd_binary_named(int op, weft_tensor *a, weft_tensor *b)
{
    const struct binary_op named = {.id = op, .rule = RULE_ARITH};
    return binary_forward(&named, a, b);
}

weft_tensor *weft_fwd_binary_named_scalar(int op, weft_tensor *a, double s)
{
    const struct binary_op named = {.id = op, .rule = RULE_ARITH};
    return binary_scalar_forward(&named, a, s);
}

/* s op t: the scalar becomes a 0-dim tensor of the computation dtype on the left. */
static weft_tensor *reversed_scalar(const struct binary_op *op, weft_tensor *t, double s)
{
    enum weft_dtype ct, rt;
    if (!t || binary_dtypes(op, weft_result_type_scalar(t, s), false, t->dtype == WEFT_BOOL, true,
                            s, &ct, &rt) < 0)
        return NULL;
    weft_scope_push();
    weft_tensor *left = weft_scalar_tensor(s, ct, t->device);
    weft_tensor *r = left ? ew_map2(&(struct weft_op_call){.op = op->id}, left, t, ct, rt) : NULL;
    return ew_leave_scope(r);
}

/* s - t for a float32/float64 t: (-t) + s, the same bits (IEEE defines x - y as
 * x + (-y)), in two passes over t instead of a 0-dim tensor broadcast through the
 * general path, which cost a tiny backward (tanh's, sigmoid's) more than the rest of it. */
static weft_tensor *rsub_forward(weft_tensor *t, double s)
{
    if (!t || (t->dtype != WEFT_F32 && t->dtype != WEFT_F64) ||
        weft_result_type_scalar(t, s) != t->dtype)
        return reversed_scalar(&binary_sub, t, s);
    weft_tensor *neg = ew_map1(&(struct weft_op_call){.op = WEFT_OP_NEG, .nin = 1}, t, t->dtype, t->dtype);
    return neg ? ew_map1_(&scalar_call(WEFT_OP_ADD, s), neg, t->dtype, t->dtype) : NULL;
}

static weft_tensor *rdiv_forward(weft_tensor *t, double s)
{
    return reversed_scalar(&binary_div, t, s);
}

weft_tensor *weft_rsub_scalar(weft_tensor *t, double s)
{
    bool rec = weft_autograd_needed_inline(1, &t);
    weft_tensor *out = WEFT_NO_GRAD(rec, rsub_forward(t, s));
    return rec ? record_binary(&binary_rsub, true, s, t, t, NULL, out) : out;
}

weft_tensor *weft_rdiv_scalar(weft_tensor *t, double s)
{
    bool rec = weft_autograd_needed_inline(1, &t);
    weft_tensor *out = WEFT_NO_GRAD(rec, rdiv_forward(t, s));
    return rec ? record_binary(&binary_rdiv, true, s, t, t, NULL, out) : out;
}
