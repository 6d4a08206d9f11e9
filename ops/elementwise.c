/* ops/elementwise.c: what the elementwise front ends (unary.c, binary.c, where_clamp.c)
 * share: once an op has decided its computation dtype (torch.result_type plus its rule),
 * these convert and broadcast the inputs, allocate the output, check in-place writes
 * and dispatch (elementwise.h).
 *
 * Ownership. The common case (inputs already of the computation dtype and of the output's
 * shape) allocates the output with weft_empty, which records it where the caller expects,
 * and dispatches: no scope, no temporaries. Anything that makes temporaries (dtype
 * conversions, broadcast views, out-of-place results copied back for an in-place op)
 * runs inside a scope of its own, and the result leaves it with one reference that
 * weft_tensor_finish hands to the caller's scope. */
#include <math.h>
#include <string.h>

#include "elementwise.h"
#include "memory_format.h"

/* ---- small helpers ------------------------------------------------------------------- */

/* Ends our hold on a tensor that a weft function returned: while a scope is open the
 * scope owns that reference and releases it itself. */
void ew_drop(weft_tensor *t)
{
    if (weft_scope_depth() == 0)
        weft_tensor_release(t);
}

bool ew_same_shape(const weft_tensor *t, int ndim, const int64_t *shape)
{
    return weft_same_shape_inline(t, ndim, shape);
}

/* torch.can_cast: no floating -> integral/bool, no non-bool -> bool. In-place ops write
 * their result into the first argument, which must be able to hold it. */
int ew_check_cast(enum weft_dtype result, enum weft_dtype out)
{
    bool ok = !(dtype_is_floating(result) && !dtype_is_floating(out)) &&
              !(result != WEFT_BOOL && out == WEFT_BOOL);
    if (ok)
        return 0;
    return weft_error_set(WEFT_ERR_RUNTIME, "result type %s can't be cast to the desired output type %s",
                          weft_dtype_torch_name(result), weft_dtype_torch_name(out));
}

/* An in-place op may not write through an expanded (stride 0) dim: several elements
 * would share one memory location. */
int ew_check_internal_overlap(const weft_tensor *t)
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
int ew_check_partial_overlap(const weft_tensor *out, const weft_tensor *in)
{
    if (!in || in->storage != out->storage || weft_tensor_numel(in) == 0 ||
        weft_tensor_numel(out) == 0)
        return 0;
    if (in->dtype == out->dtype && in->offset == out->offset && ew_same_shape(in, out->ndim, out->shape) &&
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

int ew_check_broadcast_to(const weft_tensor *out, int ndim, const int64_t *shape)
{
    if (ew_same_shape(out, ndim, shape))
        return 0;
    char a[160], b[160];
    return weft_error_set(WEFT_ERR_RUNTIME, "output with shape %s doesn't match the broadcast shape %s",
                          weft_shape_str(out->ndim, out->shape, a, sizeof a),
                          weft_shape_str(ndim, shape, b, sizeof b));
}

/* t converted to dt and expanded to shape; new references in the current scope. */
weft_tensor *ew_prepare(weft_tensor *t, enum weft_dtype dt, int ndim, const int64_t *shape)
{
    weft_tensor *c = t->dtype == dt ? t : weft_to_dtype(t, dt);
    if (!c || ew_same_shape(c, ndim, shape))
        return c;
    return weft_expand(c, ndim, shape);
}

/* weft_dispatch; all_strided: the caller saw that every operand in call is strided, so
 * the dispatch need not check. */
int ew_dispatch(const struct weft_op_call *call, bool all_strided)
{
    return all_strided ? weft_dispatch_strided(call) : weft_dispatch(call);
}

/* ---- the generic drivers ------------------------------------------------------------------
 * `call` carries the op id and any scalars/ints; the drivers fill inputs and outputs. */

/* Fresh output of shape/dtype laid out as PyTorch lays out a result over the inputs `ins`
 * (their layout before conversion and broadcasting; memory_format.h), then the kernel;
 * the output is already finished. strided_ins: every input in call is strided
 * (dispatch_call). */
weft_tensor *ew_run_new(struct weft_op_call *call, int nins, const weft_tensor *const *ins,
                            int ndim, const int64_t *shape, enum weft_dtype rt, weft_device dev,
                            bool strided_ins)
{
    int64_t strides[WEFT_MAX_DIMS];
    weft_tensor *out = weft_elementwise_strides(nins, ins, ndim, shape, strides)
                           ? weft_empty_dense_strided(ndim, shape, NULL, rt, dev)
                           : weft_empty_dense_strided(ndim, shape, strides, rt, dev);
    if (!out)
        return NULL;
    call->nout = 1;
    call->out[0] = out;
    if (ew_dispatch(call, strided_ins) != 0) {
        ew_drop(out);
        return NULL;
    }
    return out;
}

/* The body of a scoped slow path: its result is retained past the pop and then given to
 * the caller's scope. */
weft_tensor *ew_leave_scope(weft_tensor *result)
{
    weft_tensor_retain(result);
    weft_scope_pop();
    return weft_tensor_finish(result);
}

/* One tensor input (plus scalars): out = f(t) with t converted to ct, out of dtype rt. */
weft_tensor *ew_map1(struct weft_op_call *call, weft_tensor *t, enum weft_dtype ct,
                         enum weft_dtype rt)
{
    const weft_tensor *ins[1] = {t};
    call->in[0] = t;
    if (t->dtype == ct)
        return ew_run_new(call, 1, ins, t->ndim, t->shape, rt, t->device,
                       t->layout == WEFT_LAYOUT_STRIDED);
    weft_scope_push();
    call->in[0] = weft_to_dtype(t, ct);
    weft_tensor *r = call->in[0] ? ew_run_new(call, 1, ins, t->ndim, t->shape, rt, t->device, false) : NULL;
    return ew_leave_scope(r);
}

/* In-place form of map1: the result goes back into t. */
weft_tensor *ew_map1_(struct weft_op_call *call, weft_tensor *t, enum weft_dtype ct,
                          enum weft_dtype rt)
{
    if (ew_check_cast(rt, t->dtype) < 0 || ew_check_internal_overlap(t) < 0)
        return NULL;
    if (t->dtype == ct && t->dtype == rt) {
        call->in[0] = t;
        call->nout = 1;
        call->out[0] = t;
        if (ew_dispatch(call, t->layout == WEFT_LAYOUT_STRIDED) != 0)
            return NULL;
        weft_tensor_bump_version(t);
        return t;
    }
    /* Another computation dtype: compute aside and copy back (copy_ bumps the version). */
    weft_scope_push();
    weft_tensor *r = ew_map1(call, t, ct, rt);
    int rc = r ? weft_copy_(t, r) : -1;
    weft_scope_pop();
    return rc == 0 ? t : NULL;
}

/* Two tensors broadcast together: out = f(a, b) in ct, out of dtype rt. */
weft_tensor *ew_map2(struct weft_op_call *call, weft_tensor *a, weft_tensor *b,
                         enum weft_dtype ct, enum weft_dtype rt)
{
    const weft_tensor *ins[2] = {a, b};
    call->nin = 2;
    if (a->dtype == ct && b->dtype == ct && ew_same_shape(b, a->ndim, a->shape)) {
        call->in[0] = a;
        call->in[1] = b;
        return ew_run_new(call, 2, ins, a->ndim, a->shape, rt, a->device,
                       (a->layout | b->layout) == WEFT_LAYOUT_STRIDED);
    }
    int nd;
    int64_t shape[WEFT_MAX_DIMS];
    if (weft_broadcast_shapes(a->ndim, a->shape, b->ndim, b->shape, &nd, shape) < 0)
        return NULL;
    weft_scope_push();
    weft_tensor *r = NULL;
    call->in[0] = ew_prepare(a, ct, nd, shape);
    call->in[1] = ew_prepare(b, ct, nd, shape);
    if (call->in[0] && call->in[1])
        r = ew_run_new(call, 2, ins, nd, shape, rt, a->device, false);
    return ew_leave_scope(r);
}

/* In-place form of map2: a op= b, b broadcast to a's shape. */
weft_tensor *ew_map2_(struct weft_op_call *call, weft_tensor *a, weft_tensor *b,
                          enum weft_dtype ct, enum weft_dtype rt)
{
    int nd;
    int64_t shape[WEFT_MAX_DIMS];
    if (weft_broadcast_shapes(a->ndim, a->shape, b->ndim, b->shape, &nd, shape) < 0 ||
        ew_check_broadcast_to(a, nd, shape) < 0 || ew_check_cast(rt, a->dtype) < 0 ||
        ew_check_internal_overlap(a) < 0)
        return NULL;
    call->nin = 2;
    call->nout = 1;
    if (a->dtype == ct && a->dtype == rt && b->dtype == ct && ew_same_shape(b, nd, shape)) {
        if (ew_check_partial_overlap(a, b) < 0)
            return NULL;
        call->in[0] = a;
        call->in[1] = b;
        call->out[0] = a;
        if (ew_dispatch(call, (a->layout | b->layout) == WEFT_LAYOUT_STRIDED) != 0)
            return NULL;
        weft_tensor_bump_version(a);
        return a;
    }
    weft_scope_push();
    int rc = -1;
    if (a->dtype == ct && a->dtype == rt) {
        call->in[0] = a;
        call->in[1] = ew_prepare(b, ct, nd, shape);
        call->out[0] = a;
        if (call->in[1] && ew_check_partial_overlap(a, call->in[1]) == 0)
            rc = weft_dispatch(call);
        if (rc == 0)
            weft_tensor_bump_version(a);
    } else {
        weft_tensor *r = ew_map2(call, a, b, ct, rt);
        rc = r ? weft_copy_(a, r) : -1;
    }
    weft_scope_pop();
    return rc == 0 ? a : NULL;
}

weft_tensor *original_value(weft_tensor *t)
{
    bool prev = weft_no_grad_begin();
    weft_tensor *c = weft_clone(t);
    weft_grad_mode_restore(prev);
    return c;
}
