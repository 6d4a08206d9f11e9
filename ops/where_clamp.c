/* ops/where_clamp.c: where, masked_fill and clamp, forward and backward (rows WHERE,
 * CLAMP and MASKED_FILL of weft/op_table.h): selections by a mask or by bounds, whose
 * gradient is the incoming one where the input was selected and 0 elsewhere. */
#include <math.h>

#include "elementwise.h"

/* ---- forward ---------------------------------------------------------------------------- */

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
    call.in[0] = ew_prepare(cond, WEFT_BOOL, nd, shape);
    call.in[1] = ew_prepare(a, ct, nd, shape);
    call.in[2] = b ? ew_prepare(b, ct, nd, shape) : NULL;
    if (call.in[0] && call.in[1] && (!b || call.in[2]))
        r = ew_run_new(&call, b ? 3 : 2, all, nd, shape, ct, a->device, false);
    return ew_leave_scope(r);
}

static weft_tensor *where_forward(weft_tensor *cond, weft_tensor *a, weft_tensor *b)
{
    if (!cond || !a || !b)
        return NULL;
    return where_impl(cond, a, b, 0, weft_result_type(a, b));
}

static weft_tensor *where_scalar_forward(weft_tensor *cond, weft_tensor *a, double b)
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
static weft_tensor *masked_fill_forward(weft_tensor *t, weft_tensor *mask, double value)
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
    call.in[0] = ew_prepare(mask, WEFT_BOOL, nd, shape);
    call.in[2] = ew_prepare(t, t->dtype, nd, shape);
    /* PyTorch clones the expanded self in the contiguous format, then fills */
    if (call.in[0] && call.in[2])
        r = ew_run_new(&call, 0, NULL, nd, shape, t->dtype, t->device, false);
    return ew_leave_scope(r);
}

static weft_tensor *masked_fill_forward_(weft_tensor *t, weft_tensor *mask, double value)
{
    if (!t || !mask || check_mask(t, mask, value) < 0 || ew_check_internal_overlap(t) < 0)
        return NULL;
    weft_scope_push();
    int rc = -1;
    struct weft_op_call call = {.op = WEFT_OP_WHERE, .nin = 3, .nout = 1, .scalar = {value}};
    call.in[0] = ew_prepare(mask, WEFT_BOOL, t->ndim, t->shape);
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
    if (has_max && !weft_scalar_is_integral(max))
        decisive = max;
    if (has_min && !weft_scalar_is_integral(min))
        decisive = min;
    *ct = weft_result_type_scalar(t, decisive);
    return 0;
}

/* Bounds in scalar[0..1]; ints[0..1] say which are present. */
#define clamp_call(min, max)                                                                  \
    ((struct weft_op_call){.op = WEFT_OP_CLAMP, .nin = 1, .scalar = {(min), (max)},           \
                           .ints = {!isnan(min), !isnan(max)}})

static weft_tensor *clamp_forward(weft_tensor *t, double min, double max)
{
    enum weft_dtype ct;
    if (!t || clamp_check(t, min, max, &ct) < 0)
        return NULL;
    return ew_map1(&clamp_call(min, max), t, ct, ct);
}

static weft_tensor *clamp_forward_(weft_tensor *t, double min, double max)
{
    enum weft_dtype ct;
    if (!t || clamp_check(t, min, max, &ct) < 0)
        return NULL;
    return ew_map1_(&clamp_call(min, max), t, ct, ct);
}

/* ---- backward and the public ops ----------------------------------------------------------- */

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
    struct weft_node *node = weft_node_create(OP_GRAD_FN(WHERE), where_backward, 3, inputs, 1);
    if (node && out && weft_node_save(node, 0, cond) != 0) {
        weft_node_abandon(node);
        return weft_tensor_discard(out);
    }
    return weft_node_finish1(node, out);
}

weft_tensor *weft_where(weft_tensor *cond, weft_tensor *a, weft_tensor *b)
{
    weft_tensor *in[2] = {a, b};
    bool rec = weft_autograd_needed_inline(2, in);
    weft_tensor *out = WEFT_NO_GRAD(rec, where_forward(cond, a, b));
    return rec ? record_where(cond, a, b, out) : out;
}

weft_tensor *weft_where_scalar(weft_tensor *cond, weft_tensor *a, double b)
{
    bool rec = weft_autograd_needed_inline(1, &a);
    weft_tensor *out = WEFT_NO_GRAD(rec, where_scalar_forward(cond, a, b));
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
    grad_inputs[0] = keep ? masked(keep, g) : weft_autorelease(weft_tensor_retain(g));
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
            return weft_tensor_discard(out);
        }
    }
    return weft_node_finish1(node, out);
}

weft_tensor *weft_clamp(weft_tensor *t, double min, double max)
{
    bool rec = weft_autograd_needed_inline(1, &t);
    weft_tensor *out = WEFT_NO_GRAD(rec, clamp_forward(t, min, max));
    return rec ? record_saving(OP_GRAD_FN(CLAMP), clamp_backward, t, t, out, min, max) : out;
}

weft_tensor *weft_clamp_(weft_tensor *t, double min, double max)
{
    if (!weft_autograd_needed_inline(1, &t))
        return clamp_forward_(t, min, max);
    if (weft_autograd_check_inplace(t, true) != 0)
        return NULL;
    weft_tensor *orig = original_value(t);
    weft_tensor *out = orig ? WEFT_NO_GRAD(true, clamp_forward_(t, min, max)) : NULL;
    weft_tensor *r = out ? record_saving(OP_GRAD_FN(CLAMP), clamp_backward, t, orig, t, min, max)
                         : NULL;
    weft_tensor_discard(orig);
    return r;
}

weft_tensor *weft_masked_fill(weft_tensor *t, weft_tensor *mask, double value)
{
    bool rec = weft_autograd_needed_inline(1, &t);
    weft_tensor *out = WEFT_NO_GRAD(rec, masked_fill_forward(t, mask, value));
    return rec ? record_saving(OP_GRAD_FN(MASKED_FILL), masked_fill_backward, t, mask, out, 0, 0)
               : out;
}

weft_tensor *weft_masked_fill_(weft_tensor *t, weft_tensor *mask, double value)
{
    if (!weft_autograd_needed_inline(1, &t))
        return masked_fill_forward_(t, mask, value);
    if (weft_autograd_check_inplace(t, true) != 0)
        return NULL;
    weft_tensor *out = WEFT_NO_GRAD(true, masked_fill_forward_(t, mask, value));
    return out ? record_saving(OP_GRAD_FN(MASKED_FILL), masked_fill_backward, t, mask, t, 0, 0)
               : NULL;
}
