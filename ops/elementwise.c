/* core/ops_elementwise.c: front ends of the elementwise ops (unary, binary, where, clamp,
 * masked_fill). They decide the computation dtype (torch.result_type plus each op's
 * rule), convert and broadcast the inputs, allocate the output and dispatch.
 *
 * Ownership. The common case (inputs already of the computation dtype and of the output's
 * shape) allocates the output with weft_empty, which records it where the caller expects,
 * and dispatches: no scope, no temporaries. Anything that makes temporaries (dtype
 * conversions, broadcast views, out-of-place results copied back for an in-place op)
 * runs inside a scope of its own, and the result leaves it with one reference that
 * weft_tensor_finish hands to the caller's scope. */
#include <math.h>
#include <string.h>

#include "forward.h"
#include "internal.h"
#include "memory_format.h"
#include "weft/ops.h"

/* ---- small helpers ------------------------------------------------------------------- */

/* Ends our hold on a tensor that a weft function returned: while a scope is open the
 * scope owns that reference and releases it itself. */
static void drop(weft_tensor *t)
{
    if (weft_scope_depth() == 0)
        weft_tensor_release(t);
}

static bool same_shape(const weft_tensor *t, int ndim, const int64_t *shape)
{
    return weft_same_shape_inline(t, ndim, shape);
}

const char *weft_dtype_meta_name(enum weft_dtype dt)
{
    /* Where PyTorch prints caffe2::TypeMeta's C++ name ("c10::Half", "long int"), weft
     * keeps the sentence and prints its own dtype name: the C++ types are PyTorch's
     * internals, which a weft user never meets. */
    return weft_dtype_name(dt);
}

/* torch.can_cast: no floating -> integral/bool, no non-bool -> bool. In-place ops write
 * their result into the first argument, which must be able to hold it. */
static int check_cast(enum weft_dtype result, enum weft_dtype out)
{
    bool ok = !(weft_dtype_is_floating(result) && !weft_dtype_is_floating(out)) &&
              !(result != WEFT_BOOL && out == WEFT_BOOL);
    if (ok)
        return 0;
    return weft_error_set(WEFT_ERR_RUNTIME, "result type %s can't be cast to the desired output type %s",
                          weft_dtype_torch_name(result), weft_dtype_torch_name(out));
}

/* An in-place op may not write through an expanded (stride 0) dim: several elements
 * would share one memory location. */
static int check_internal_overlap(const weft_tensor *t)
{
    for (int d = 0; d < t->ndim; d++)
        if (t->shape[d] > 1 && t->stride[d] == 0)
            return weft_error_set(WEFT_ERR_RUNTIME,
                                  "unsupported operation: more than one element of the written-to "
                                  "tensor refers to a single memory location. Please clone() the "
                                  "tensor before performing the operation.");
    return 0;
}

/* Byte range [lo, hi) a strided tensor can touch in its storage. */
static void byte_range(const weft_tensor *t, int64_t *lo, int64_t *hi)
{
    int64_t first = t->offset, last = t->offset;
    for (int d = 0; d < t->ndim; d++) {
        int64_t span = (t->shape[d] - 1) * t->stride[d];
        if (span < 0)
            first += span;
        else
            last += span;
    }
    int64_t size = (int64_t)weft_dtype_size(t->dtype);
    *lo = first * size;
    *hi = (last + 1) * size;
}

/* Elementwise kernels read and write element i together, so an input may be the output
 * itself, but not overlap it any other way (as PyTorch refuses a.add_(a.t())). */
static int check_partial_overlap(const weft_tensor *out, const weft_tensor *in)
{
    if (!in || in->storage != out->storage || weft_tensor_numel(in) == 0 ||
        weft_tensor_numel(out) == 0)
        return 0;
    if (in->dtype == out->dtype && in->offset == out->offset && same_shape(in, out->ndim, out->shape) &&
        memcmp(in->stride, out->stride, (size_t)out->ndim * sizeof *out->stride) == 0)
        return 0;
    int64_t a_lo, a_hi, b_lo, b_hi;
    byte_range(out, &a_lo, &a_hi);
    byte_range(in, &b_lo, &b_hi);
    if (a_hi <= b_lo || b_hi <= a_lo)
        return 0;
    return weft_error_set(WEFT_ERR_RUNTIME,
                          "unsupported operation: some elements of the input tensor and the "
                          "written-to tensor refer to a single memory location. Please clone() "
                          "the tensor before performing the operation.");
}

static int check_broadcast_to(const weft_tensor *out, int ndim, const int64_t *shape)
{
    if (same_shape(out, ndim, shape))
        return 0;
    char a[160], b[160];
    return weft_error_set(WEFT_ERR_RUNTIME, "output with shape %s doesn't match the broadcast shape %s",
                          weft_shape_str(out->ndim, out->shape, a, sizeof a),
                          weft_shape_str(ndim, shape, b, sizeof b));
}

/* t converted to dt and expanded to shape; new references in the current scope. */
static weft_tensor *prepare(weft_tensor *t, enum weft_dtype dt, int ndim, const int64_t *shape)
{
    weft_tensor *c = t->dtype == dt ? t : weft_to_dtype(t, dt);
    if (!c || same_shape(c, ndim, shape))
        return c;
    return weft_expand(c, ndim, shape);
}

/* weft_dispatch; all_strided: the caller saw that every operand in call is strided, so
 * the dispatch need not check. */
static int dispatch_call(const struct weft_op_call *call, bool all_strided)
{
    return all_strided ? weft_dispatch_strided(call) : weft_dispatch(call);
}

/* ---- the generic drivers ------------------------------------------------------------------
 * `call` carries the op id and any scalars/ints; the drivers fill inputs and outputs. */

/* Fresh output of shape/dtype laid out as PyTorch lays out a result over the inputs `ins`
 * (their layout before conversion and broadcasting; memory_format.h), then the kernel;
 * the output is already finished. strided_ins: every input in call is strided
 * (dispatch_call). */
static weft_tensor *run_new(struct weft_op_call *call, int nins, const weft_tensor *const *ins,
                            int ndim, const int64_t *shape, enum weft_dtype rt, weft_device dev,
                            bool strided_ins)
{
    int64_t strides[WEFT_MAX_DIMS];
    weft_tensor *out = weft_elementwise_strides(nins, ins, ndim, shape, strides)
                           ? weft_empty(ndim, shape, rt, dev)
                           : weft_empty_dense_strided(ndim, shape, strides, rt, dev);
    if (!out)
        return NULL;
    call->nout = 1;
    call->out[0] = out;
    if (dispatch_call(call, strided_ins) != 0) {
        drop(out);
        return NULL;
    }
    return out;
}

/* The body of a scoped slow path: its result is retained past the pop and then given to
 * the caller's scope. */
static weft_tensor *leave_scope(weft_tensor *result)
{
    weft_tensor_retain(result);
    weft_scope_pop();
    return weft_tensor_finish(result);
}

/* One tensor input (plus scalars): out = f(t) with t converted to ct, out of dtype rt. */
static weft_tensor *map1(struct weft_op_call *call, weft_tensor *t, enum weft_dtype ct,
                         enum weft_dtype rt)
{
    const weft_tensor *ins[1] = {t};
    call->in[0] = t;
    if (t->dtype == ct)
        return run_new(call, 1, ins, t->ndim, t->shape, rt, t->device,
                       t->layout == WEFT_LAYOUT_STRIDED);
    weft_scope_push();
    call->in[0] = weft_to_dtype(t, ct);
    weft_tensor *r = call->in[0] ? run_new(call, 1, ins, t->ndim, t->shape, rt, t->device, false) : NULL;
    return leave_scope(r);
}

/* In-place form of map1: the result goes back into t. */
static weft_tensor *map1_(struct weft_op_call *call, weft_tensor *t, enum weft_dtype ct,
                          enum weft_dtype rt)
{
    if (check_cast(rt, t->dtype) < 0 || check_internal_overlap(t) < 0)
        return NULL;
    if (t->dtype == ct && t->dtype == rt) {
        call->in[0] = t;
        call->nout = 1;
        call->out[0] = t;
        if (dispatch_call(call, t->layout == WEFT_LAYOUT_STRIDED) != 0)
            return NULL;
        weft_tensor_bump_version(t);
        return t;
    }
    /* Another computation dtype: compute aside and copy back (copy_ bumps the version). */
    weft_scope_push();
    weft_tensor *r = map1(call, t, ct, rt);
    int rc = r ? weft_copy_(t, r) : -1;
    weft_scope_pop();
    return rc == 0 ? t : NULL;
}

/* Two tensors broadcast together: out = f(a, b) in ct, out of dtype rt. */
static weft_tensor *map2(struct weft_op_call *call, weft_tensor *a, weft_tensor *b,
                         enum weft_dtype ct, enum weft_dtype rt)
{
    const weft_tensor *ins[2] = {a, b};
    call->nin = 2;
    if (a->dtype == ct && b->dtype == ct && same_shape(b, a->ndim, a->shape)) {
        call->in[0] = a;
        call->in[1] = b;
        return run_new(call, 2, ins, a->ndim, a->shape, rt, a->device,
                       (a->layout | b->layout) == WEFT_LAYOUT_STRIDED);
    }
    int nd;
    int64_t shape[WEFT_MAX_DIMS];
    if (weft_broadcast_shapes(a->ndim, a->shape, b->ndim, b->shape, &nd, shape) < 0)
        return NULL;
    weft_scope_push();
    weft_tensor *r = NULL;
    call->in[0] = prepare(a, ct, nd, shape);
    call->in[1] = prepare(b, ct, nd, shape);
    if (call->in[0] && call->in[1])
        r = run_new(call, 2, ins, nd, shape, rt, a->device, false);
    return leave_scope(r);
}

/* In-place form of map2: a op= b, b broadcast to a's shape. */
static weft_tensor *map2_(struct weft_op_call *call, weft_tensor *a, weft_tensor *b,
                          enum weft_dtype ct, enum weft_dtype rt)
{
    int nd;
    int64_t shape[WEFT_MAX_DIMS];
    if (weft_broadcast_shapes(a->ndim, a->shape, b->ndim, b->shape, &nd, shape) < 0 ||
        check_broadcast_to(a, nd, shape) < 0 || check_cast(rt, a->dtype) < 0 ||
        check_internal_overlap(a) < 0)
        return NULL;
    call->nin = 2;
    call->nout = 1;
    if (a->dtype == ct && a->dtype == rt && b->dtype == ct && same_shape(b, nd, shape)) {
        if (check_partial_overlap(a, b) < 0)
            return NULL;
        call->in[0] = a;
        call->in[1] = b;
        call->out[0] = a;
        if (dispatch_call(call, (a->layout | b->layout) == WEFT_LAYOUT_STRIDED) != 0)
            return NULL;
        weft_tensor_bump_version(a);
        return a;
    }
    weft_scope_push();
    int rc = -1;
    if (a->dtype == ct && a->dtype == rt) {
        call->in[0] = a;
        call->in[1] = prepare(b, ct, nd, shape);
        call->out[0] = a;
        if (call->in[1] && check_partial_overlap(a, call->in[1]) == 0)
            rc = weft_dispatch(call);
        if (rc == 0)
            weft_tensor_bump_version(a);
    } else {
        weft_tensor *r = map2(call, a, b, ct, rt);
        rc = r ? weft_copy_(a, r) : -1;
    }
    weft_scope_pop();
    return rc == 0 ? a : NULL;
}

/* ---- unary ops ---------------------------------------------------------------------- */

enum unary_kind {
    U_SAME,     /* dtype kept; the kernel table says which dtypes exist */
    U_FLOAT,    /* floating-only function: bool/integer inputs compute in float32 */
    U_FLOATING, /* activations PyTorch implements for floating dtypes only (gelu, silu) */
    U_NEG,      /* no bool */
    U_RELU,     /* no bool */
    U_ROUNDING, /* identity on integers */
    U_NOT,      /* bool result */
};

struct unary_op {
    int id;
    enum unary_kind kind;
    const char *name;
};

/* X(name, OP, kind); must list exactly the ops of WEFT_UNARY_OPS (checked below). */
#define UNARY_TABLE(X)                                                                        \
    X(neg, NEG, U_NEG) X(abs, ABS, U_SAME) X(sign, SIGN, U_SAME) X(exp, EXP, U_FLOAT)         \
    X(expm1, EXPM1, U_FLOAT) X(log, LOG, U_FLOAT) X(log1p, LOG1P, U_FLOAT)                    \
    X(sqrt, SQRT, U_FLOAT) X(rsqrt, RSQRT, U_FLOAT) X(reciprocal, RECIPROCAL, U_FLOAT)        \
    X(sin, SIN, U_FLOAT) X(cos, COS, U_FLOAT) X(tanh, TANH, U_FLOAT)                          \
    X(sigmoid, SIGMOID, U_FLOAT) X(relu, RELU, U_RELU) X(gelu, GELU, U_FLOATING)                 \
    X(silu, SILU, U_FLOATING) X(erf, ERF, U_FLOAT) X(floor, FLOOR, U_ROUNDING)                   \
    X(ceil, CEIL, U_ROUNDING) X(round, ROUND, U_ROUNDING) X(trunc, TRUNC, U_ROUNDING)         \
    X(logical_not, LOGICAL_NOT, U_NOT)

#define COUNT_ONE(...) +1
_Static_assert(0 UNARY_TABLE(COUNT_ONE) == 0 WEFT_UNARY_OPS(COUNT_ONE),
               "UNARY_TABLE must list the ops of WEFT_UNARY_OPS");

/* Computation and result dtypes of a unary op on dt. */
static int unary_dtypes(const struct unary_op *u, enum weft_dtype dt, enum weft_dtype *ct,
                        enum weft_dtype *rt)
{
    if (u->kind == U_NEG && dt == WEFT_BOOL)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "Negation, the `-` operator, on a bool tensor is not supported. If "
                              "you are trying to invert a mask, use the `~` or `logical_not()` "
                              "operator instead.");
    if (u->kind == U_RELU && dt == WEFT_BOOL)
        return weft_error_set(WEFT_ERR_RUNTIME, "Boolean inputs not supported for relu");
    if (u->kind == U_FLOATING && !weft_dtype_is_floating(dt))
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "\"%s\" not implemented for '%s'",
                              u->name, weft_dtype_torch_name(dt));
    *ct = u->kind == U_FLOAT && !weft_dtype_is_floating(dt) ? weft_default_dtype() : dt;
    *rt = u->kind == U_NOT ? WEFT_BOOL : *ct;
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
                           ? weft_empty(t->ndim, t->shape, t->dtype, t->device)
                           : weft_empty_dense_strided(t->ndim, t->shape, strides, t->dtype,
                                                      t->device);
    if (out && weft_copy_(out, t) != 0)
        out = NULL;
    return leave_scope(out);
}

static weft_tensor *unary(const struct unary_op *u, weft_tensor *t)
{
    enum weft_dtype ct, rt;
    if (!t || unary_dtypes(u, t->dtype, &ct, &rt) < 0)
        return NULL;
    if (u->kind == U_ROUNDING && weft_dtype_is_integral(t->dtype))
        return copy_as_result(t);
    return map1(&(struct weft_op_call){.op = u->id, .nin = 1}, t, ct, rt);
}

static weft_tensor *unary_(const struct unary_op *u, weft_tensor *t)
{
    enum weft_dtype ct, rt;
    if (!t || unary_dtypes(u, t->dtype, &ct, &rt) < 0)
        return NULL;
    if (u->kind == U_ROUNDING && weft_dtype_is_integral(t->dtype)) {
        weft_tensor_bump_version(t);
        return t;
    }
    return map1_(&(struct weft_op_call){.op = u->id, .nin = 1}, t, ct, rt);
}

#define DEFINE_UNARY(name, OP, kind)                                                          \
    static const struct unary_op unary_##name = {WEFT_OP_##OP, kind, #name};                         \
    weft_tensor *weft_fwd_##name(weft_tensor *t) { return unary(&unary_##name, t); }          \
    weft_tensor *weft_fwd_##name##_(weft_tensor *t) { return unary_(&unary_##name, t); }
UNARY_TABLE(DEFINE_UNARY)
#undef DEFINE_UNARY

/* ---- binary ops ------------------------------------------------------------------------ */

enum binary_kind {
    B_ARITH,   /* add mul maximum minimum: the promoted dtype */
    B_SUB,     /* as arith, but no bool operand */
    B_DIV,     /* true division: integers compute in float32 */
    B_POW,     /* no negative integer scalar exponent for integer bases */
    B_COMPARE, /* bool result */
};

struct binary_op {
    int id;
    enum binary_kind kind;
};

/* X(name, OP, kind); must list exactly the ops of WEFT_BINARY_OPS (checked below). */
#define BINARY_TABLE(X)                                                                       \
    X(add, ADD, B_ARITH) X(sub, SUB, B_SUB) X(mul, MUL, B_ARITH) X(div, DIV, B_DIV)           \
    X(pow, POW, B_POW) X(maximum, MAXIMUM, B_ARITH) X(minimum, MINIMUM, B_ARITH)              \
    X(eq, EQ, B_COMPARE) X(ne, NE, B_COMPARE) X(lt, LT, B_COMPARE) X(le, LE, B_COMPARE)       \
    X(gt, GT, B_COMPARE) X(ge, GE, B_COMPARE) X(logical_and, LOGICAL_AND, B_COMPARE)          \
    X(logical_or, LOGICAL_OR, B_COMPARE)

_Static_assert(0 BINARY_TABLE(COUNT_ONE) == 0 WEFT_BINARY_OPS(COUNT_ONE),
               "BINARY_TABLE must list the ops of WEFT_BINARY_OPS");

/* Computation and result dtypes given the promoted dtype. b_bool: the right operand is a
 * bool tensor; scalar/s: the right operand is the scalar s. */
static int binary_dtypes(const struct binary_op *op, enum weft_dtype promoted, bool a_bool,
                         bool b_bool, bool scalar, double s, enum weft_dtype *ct,
                         enum weft_dtype *rt)
{
    *ct = promoted;
    switch (op->kind) {
    case B_SUB:
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
    case B_DIV:
        if (!weft_dtype_is_floating(promoted))
            *ct = weft_default_dtype();
        break;
    case B_POW:
        if (scalar && !weft_dtype_is_floating(promoted) && s < 0)
            return weft_error_set(WEFT_ERR_RUNTIME, "Integers to negative integer powers are not allowed.");
        break;
    default:
        break;
    }
    *rt = op->kind == B_COMPARE ? WEFT_BOOL : *ct;
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

static weft_tensor *binary(const struct binary_op *op, weft_tensor *a, weft_tensor *b)
{
    enum weft_dtype ct, rt;
    if (!a || !b || binary_check(op, a, b, &ct, &rt) < 0)
        return NULL;
    return map2(&(struct weft_op_call){.op = op->id}, a, b, ct, rt);
}

static weft_tensor *binary_(const struct binary_op *op, weft_tensor *a, weft_tensor *b)
{
    enum weft_dtype ct, rt;
    if (!a || !b || binary_check(op, a, b, &ct, &rt) < 0)
        return NULL;
    return map2_(&(struct weft_op_call){.op = op->id}, a, b, ct, rt);
}

/* The kernels take a NULL right operand as "scalar[0]". */
#define scalar_call(id, s) ((struct weft_op_call){.op = (id), .nin = 2, .scalar = {(s)}})

static weft_tensor *binary_scalar(const struct binary_op *op, weft_tensor *a, double s)
{
    enum weft_dtype ct, rt;
    if (!a || binary_scalar_check(op, a, s, &ct, &rt) < 0)
        return NULL;
    return map1(&scalar_call(op->id, s), a, ct, rt);
}

static weft_tensor *binary_scalar_(const struct binary_op *op, weft_tensor *a, double s)
{
    enum weft_dtype ct, rt;
    if (!a || binary_scalar_check(op, a, s, &ct, &rt) < 0)
        return NULL;
    return map1_(&scalar_call(op->id, s), a, ct, rt);
}

#define DEFINE_BINARY(name, OP, kind)                                                         \
    static const struct binary_op binary_##name = {WEFT_OP_##OP, kind};                       \
    weft_tensor *weft_fwd_##name(weft_tensor *a, weft_tensor *b)                              \
    {                                                                                         \
        return binary(&binary_##name, a, b);                                                  \
    }                                                                                         \
    weft_tensor *weft_fwd_##name##_(weft_tensor *a, weft_tensor *b)                           \
    {                                                                                         \
        return binary_(&binary_##name, a, b);                                                 \
    }                                                                                         \
    weft_tensor *weft_fwd_##name##_scalar(weft_tensor *a, double s)                           \
    {                                                                                         \
        return binary_scalar(&binary_##name, a, s);                                           \
    }                                                                                         \
    weft_tensor *weft_fwd_##name##_scalar_(weft_tensor *a, double s)                          \
    {                                                                                         \
        return binary_scalar_(&binary_##name, a, s);                                          \
    }
BINARY_TABLE(DEFINE_BINARY)
#undef DEFINE_BINARY

/* A named binary op (weft/kernel.h) with add's promotion: the promoted dtype computes and
 * is the result's (floor_divide, remainder: ops_divmod.c). */
weft_tensor *weft_fwd_binary_named(int op, weft_tensor *a, weft_tensor *b)
{
    const struct binary_op named = {op, B_ARITH};
    return binary(&named, a, b);
}

weft_tensor *weft_fwd_binary_named_scalar(int op, weft_tensor *a, double s)
{
    const struct binary_op named = {op, B_ARITH};
    return binary_scalar(&named, a, s);
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
    weft_tensor *r = left ? map2(&(struct weft_op_call){.op = op->id}, left, t, ct, rt) : NULL;
    return leave_scope(r);
}

/* s - t for a float32/float64 t: (-t) + s, the same bits (IEEE defines x - y as
 * x + (-y)), in two passes over t instead of a 0-dim tensor broadcast through the
 * general path, which cost a tiny backward (tanh's, sigmoid's) more than the rest of it. */
weft_tensor *weft_fwd_rsub_scalar(weft_tensor *t, double s)
{
    if (!t || (t->dtype != WEFT_F32 && t->dtype != WEFT_F64) ||
        weft_result_type_scalar(t, s) != t->dtype)
        return reversed_scalar(&binary_sub, t, s);
    weft_tensor *neg = map1(&(struct weft_op_call){.op = WEFT_OP_NEG, .nin = 1}, t, t->dtype, t->dtype);
    return neg ? map1_(&scalar_call(WEFT_OP_ADD, s), neg, t->dtype, t->dtype) : NULL;
}

weft_tensor *weft_fwd_rdiv_scalar(weft_tensor *t, double s)
{
    return reversed_scalar(&binary_div, t, s);
}

/* ---- where, masked_fill, clamp ------------------------------------------------------- */

/* bool, or uint8, which PyTorch 1.13 still takes (deprecated, with a warning) */
static int check_bool_condition(const weft_tensor *cond)
{
    if (cond->dtype == WEFT_BOOL || cond->dtype == WEFT_U8)
        return 0;
    return weft_error_set(WEFT_ERR_RUNTIME,
                          "where expected condition to be a boolean tensor, but got a tensor with "
                          "dtype %s",
                          weft_dtype_torch_name(cond->dtype));
}

/* cond ? a : b (b NULL: the scalar s), everything broadcast together, values in ct. */
static weft_tensor *where_impl(weft_tensor *cond, weft_tensor *a, weft_tensor *b, double s,
                               enum weft_dtype ct)
{
    const weft_tensor *all[3] = {cond, a, b};
    if (check_bool_condition(cond) < 0 || weft_check_same_device(3, all) < 0)
        return NULL;
    int nd;
    int64_t shape[WEFT_MAX_DIMS];
    if (weft_broadcast_shapes(cond->ndim, cond->shape, a->ndim, a->shape, &nd, shape) < 0 ||
        (b && weft_broadcast_shapes(nd, shape, b->ndim, b->shape, &nd, shape) < 0))
        return NULL;
    weft_scope_push();
    weft_tensor *r = NULL;
    struct weft_op_call call = {.op = WEFT_OP_WHERE, .nin = 3, .scalar = {0, s}};
    call.in[0] = prepare(cond, WEFT_BOOL, nd, shape);
    call.in[1] = prepare(a, ct, nd, shape);
    call.in[2] = b ? prepare(b, ct, nd, shape) : NULL;
    if (call.in[0] && call.in[1] && (!b || call.in[2]))
        r = run_new(&call, b ? 3 : 2, all, nd, shape, ct, a->device, false);
    return leave_scope(r);
}

weft_tensor *weft_fwd_where(weft_tensor *cond, weft_tensor *a, weft_tensor *b)
{
    if (!cond || !a || !b)
        return NULL;
    return where_impl(cond, a, b, 0, weft_result_type(a, b));
}

weft_tensor *weft_fwd_where_scalar(weft_tensor *cond, weft_tensor *a, double b)
{
    if (!cond || !a)
        return NULL;
    return where_impl(cond, a, NULL, b, weft_result_type_scalar(a, b));
}

/* PyTorch's overflow message names a C++ type ("at::Half"); weft its dtype name. */
static const char *c_type_name(enum weft_dtype dt)
{
    return weft_dtype_meta_name(dt);
}

/* PyTorch's checked_convert of a fill value: a finite value outside the dtype's range is
 * an error, not a wrap (uint8 masked_fill(-1.5)); NaN and infinities pass to floats, and
 * bool takes anything. */
static int check_fill_value(enum weft_dtype dt, double v)
{
    double lo = 0, hi = 0;
    switch (dt) {
    case WEFT_U8: lo = 0; hi = 255; break;
    case WEFT_I8: lo = -128; hi = 127; break;
    case WEFT_I16: lo = -32768; hi = 32767; break;
    case WEFT_I32: lo = -2147483648.0; hi = 2147483647.0; break;
    case WEFT_I64: lo = -9223372036854775808.0; hi = 9223372036854775807.0; break;
    case WEFT_F16: lo = -65504; hi = 65504; break;
    case WEFT_BF16: lo = -3.3895313892515355e38; hi = 3.3895313892515355e38; break;
    case WEFT_F32: lo = -3.4028234663852886e38; hi = 3.4028234663852886e38; break;
    default: return 0;
    }
    if (isfinite(v) && (v < lo || v > hi))
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "value cannot be converted to type %s without overflow",
                              c_type_name(dt));
    return 0;
}

/* Masks are bool; uint8 masks are still accepted, as PyTorch 1.13 does (it warns that they
 * are deprecated). */
static int check_mask(const weft_tensor *t, const weft_tensor *mask, double value)
{
    const weft_tensor *pair[2] = {t, mask};
    if (mask->dtype != WEFT_BOOL && mask->dtype != WEFT_U8)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "masked_fill_ only supports boolean masks, but got mask with dtype %s",
                              weft_dtype_meta_name(mask->dtype));
    if (check_fill_value(t->dtype, value) < 0)
        return -1;
    return weft_check_same_device(2, pair);
}

/* masked_fill is where(mask, value, t) with the value cast to t's dtype (no promotion). */
weft_tensor *weft_fwd_masked_fill(weft_tensor *t, weft_tensor *mask, double value)
{
    if (!t || !mask || check_mask(t, mask, value) < 0)
        return NULL;
    int nd;
    int64_t shape[WEFT_MAX_DIMS];
    if (weft_broadcast_shapes(mask->ndim, mask->shape, t->ndim, t->shape, &nd, shape) < 0)
        return NULL;
    weft_scope_push();
    weft_tensor *r = NULL;
    struct weft_op_call call = {.op = WEFT_OP_WHERE, .nin = 3, .scalar = {value}};
    call.in[0] = prepare(mask, WEFT_BOOL, nd, shape);
    call.in[2] = prepare(t, t->dtype, nd, shape);
    /* PyTorch clones the expanded self in the contiguous format, then fills */
    if (call.in[0] && call.in[2])
        r = run_new(&call, 0, NULL, nd, shape, t->dtype, t->device, false);
    return leave_scope(r);
}

weft_tensor *weft_fwd_masked_fill_(weft_tensor *t, weft_tensor *mask, double value)
{
    if (!t || !mask || check_mask(t, mask, value) < 0 || check_internal_overlap(t) < 0)
        return NULL;
    weft_scope_push();
    int rc = -1;
    struct weft_op_call call = {.op = WEFT_OP_WHERE, .nin = 3, .nout = 1, .scalar = {value}};
    call.in[0] = prepare(mask, WEFT_BOOL, t->ndim, t->shape);
    call.in[2] = t;
    call.out[0] = t;
    if (call.in[0])
        rc = weft_dispatch(&call);
    weft_scope_pop();
    if (rc != 0)
        return NULL;
    weft_tensor_bump_version(t);
    return t;
}

/* Computation dtype of clamp: result_type(t, min, max). The two scalars promote among
 * themselves first, so a floating bound, if any, is the one that decides. */
static int clamp_check(weft_tensor *t, double min, double max, enum weft_dtype *ct)
{
    bool has_min = !isnan(min), has_max = !isnan(max);
    if (!has_min && !has_max)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "torch.clamp: At least one of 'min' or 'max' must not be None");
    double decisive = has_min ? min : max;
    if (has_max && !weft_dtype_from_value_is_integral(max))
        decisive = max;
    if (has_min && !weft_dtype_from_value_is_integral(min))
        decisive = min;
    *ct = weft_result_type_scalar(t, decisive);
    return 0;
}

/* Bounds in scalar[0..1]; ints[0..1] say which are present. */
#define clamp_call(min, max)                                                                  \
    ((struct weft_op_call){.op = WEFT_OP_CLAMP, .nin = 1, .scalar = {(min), (max)},           \
                           .ints = {!isnan(min), !isnan(max)}})

weft_tensor *weft_fwd_clamp(weft_tensor *t, double min, double max)
{
    enum weft_dtype ct;
    if (!t || clamp_check(t, min, max, &ct) < 0)
        return NULL;
    return map1(&clamp_call(min, max), t, ct, ct);
}

weft_tensor *weft_fwd_clamp_(weft_tensor *t, double min, double max)
{
    enum weft_dtype ct;
    if (!t || clamp_check(t, min, max, &ct) < 0)
        return NULL;
    return map1_(&clamp_call(min, max), t, ct, ct);
}
