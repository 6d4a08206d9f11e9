/* ops/masked.c: torch.nonzero, Tensor.masked_select and Tensor.masked_scatter, made of
 * other ops (cumsum, scatter, index_select, where) so that every backend that has those
 * runs them, with PyTorch's nodes (MaskedSelectBackward0, MaskedScatterBackward0). The
 * number of true elements is read back to size the result (a synchronisation on a device,
 * as in PyTorch). */
#include <math.h>
#include <string.h>

#include "internal.h"

/* The row-major positions of the true elements of the bool vector flat [n], in order
 * (int64 [count]); *count their number. The k-th true element (k = its inclusive cumsum
 * - 1) is scattered to slot k, the others to a slot past the end that is cut off. */
static weft_tensor *true_positions(weft_tensor *flat, int64_t *count)
{
    int64_t n = flat->shape[0];
    *count = 0;
    if (n == 0)
        return weft_empty(1, &n, WEFT_I64, flat->device);
    weft_tensor *pos = weft_cumsum(flat, 0);
    double last;
    if (!pos || weft_tensor_item(weft_select(pos, 0, n - 1), &last) != 0)
        return NULL;
    *count = (int64_t)last;
    weft_tensor *slot = weft_where_scalar(flat, weft_sub_scalar(pos, 1), (double)*count);
    int64_t room = *count + 1;
    weft_tensor *buf = weft_zeros(1, &room, WEFT_I64, flat->device);
    weft_tensor *iota = weft_arange(0, (double)n, 1, WEFT_I64, flat->device);
    weft_tensor *placed = slot && buf && iota ? weft_scatter(buf, 0, slot, iota) : NULL;
    return placed ? weft_narrow(placed, 0, 0, *count) : NULL;
}

/* t != 0 as a flat bool vector */
static weft_tensor *flat_truth(weft_tensor *t)
{
    int64_t n = numel_of(t);
    weft_tensor *b = t->dtype == WEFT_BOOL ? t : weft_ne_scalar(t, 0);
    return b ? weft_reshape(b, 1, &n) : NULL;
}

static weft_tensor *nonzero_in_scope(weft_tensor *t)
{
    int64_t count;
    weft_tensor *flat = flat_truth(t);
    weft_tensor *lin = flat ? true_positions(flat, &count) : NULL;
    if (!lin)
        return NULL;
    const int64_t shape[2] = {count, t->ndim};
    if (t->ndim == 0 || count == 0)
        return weft_empty(2, shape, WEFT_I64, t->device);
    weft_tensor *coords[WEFT_MAX_DIMS];
    int64_t stride = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        weft_tensor *q = weft_floor_divide_scalar(lin, (double)stride);
        coords[d] = q ? weft_remainder_scalar(q, (double)t->shape[d]) : NULL;
        if (!coords[d])
            return NULL;
        stride *= t->shape[d];
    }
    return weft_stack(t->ndim, coords, 1);
}

weft_tensor *weft_nonzero(weft_tensor *t)
{
    if (!t || weft_require_strided(t, "nonzero") != 0)
        return NULL;
    weft_scope_push();
    weft_tensor *out = weft_tensor_retain(WEFT_NO_GRAD(true, nonzero_in_scope(t)));
    weft_scope_pop();
    return weft_tensor_finish(out);
}

/* ---- masked_select, masked_scatter ------------------------------------------------------- */

/* t and mask expanded to their broadcast shape (into *a and *m) */
static int broadcast_pair(weft_tensor *t, weft_tensor *mask, weft_tensor **a, weft_tensor **m)
{
    int nd;
    int64_t shape[WEFT_MAX_DIMS];
    const weft_tensor *pair[2] = {t, mask};
    if (weft_check_same_device(2, pair) != 0 ||
        weft_broadcast_shapes(mask->ndim, mask->shape, t->ndim, t->shape, &nd, shape) != 0)
        return -1;
    *a = weft_expand(t, nd, shape);
    *m = weft_expand(mask, nd, shape);
    return *a && *m ? 0 : -1;
}

/* Node ints: [0] 0 select, 1 scatter. Saved: 0 the positions of the true elements of the
 * broadcast mask (select), or the broadcast bool mask (scatter). */
static int masked_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                           weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0], *saved = weft_node_saved(node, 0);
    if (!g)
        return 0;
    const int64_t *ints = weft_node_ints(node);
    if (ints[0] == 0) { /* g [count] back to the broadcast shape, zeros elsewhere */
        int nd = (int)ints[1];
        int64_t n = 1;
        for (int d = 0; d < nd; d++)
            n *= ints[2 + d];
        weft_tensor *flat = weft_scatter(weft_zeros(1, &n, g->dtype, g->device), 0, saved, g);
        grad_inputs[0] = flat ? weft_view(flat, nd, ints + 2) : NULL;
        return grad_inputs[0] ? 0 : weft_error_code();
    }
    if (weft_node_needs_input_grad(node, 0) && !(grad_inputs[0] = weft_masked_fill(g, saved, 0)))
        return weft_error_code();
    if (weft_node_num_inputs(node) > 1 && weft_node_needs_input_grad(node, 1)) {
        /* the values that went in, in order, then zeros for the source elements left */
        int nd = weft_node_input_ndim(node, 1);
        const int64_t *shape = weft_node_input_shape(node, 1);
        int64_t n = weft_shape_numel(nd, shape), count;
        weft_tensor *lin = true_positions(flat_truth(saved), &count);
        int64_t whole = numel_of(g);
        weft_tensor *taken = lin ? weft_index_select(weft_reshape(g, 1, &whole), 0, lin) : NULL;
        int64_t rest = n - count;
        weft_tensor *parts[2] = {taken, weft_zeros(1, &rest, g->dtype, g->device)};
        weft_tensor *flat = parts[0] && parts[1] ? weft_cat(2, parts, 0) : NULL;
        if (!flat || !(grad_inputs[1] = weft_view(flat, nd, shape)))
            return weft_error_code();
    }
    return 0;
}

static weft_tensor *masked_select_in_scope(weft_tensor *t, weft_tensor *mask, weft_tensor **lin)
{
    weft_tensor *a, *m;
    int64_t count;
    if (broadcast_pair(t, mask, &a, &m) != 0)
        return NULL;
    int64_t n = numel_of(a);
    weft_tensor *flat = flat_truth(m);
    *lin = flat ? true_positions(flat, &count) : NULL;
    weft_tensor *values = *lin ? weft_reshape(a, 1, &n) : NULL;
    return values ? weft_index_select(values, 0, *lin) : NULL;
}

weft_tensor *weft_masked_select(weft_tensor *t, weft_tensor *mask)
{
    if (!t || !mask || weft_require_strided(t, "masked_select") != 0)
        return NULL;
    if (mask->dtype != WEFT_BOOL && mask->dtype != WEFT_U8) {
        weft_error_set(WEFT_ERR_RUNTIME, "masked_select: expected BoolTensor or ByteTensor for mask");
        return NULL;
    }
    bool rec = weft_autograd_needed_inline(1, &t);
    weft_tensor *lin = NULL, *out = NULL;
    int nd = 0;
    int64_t shape[WEFT_MAX_DIMS];
    bool prev = weft_no_grad_begin();
    weft_scope_push();
    out = weft_tensor_retain(masked_select_in_scope(t, mask, &lin));
    if (out && rec && weft_broadcast_shapes(mask->ndim, mask->shape, t->ndim, t->shape, &nd,
                                            shape) == 0)
        weft_tensor_retain(lin);
    else
        lin = NULL;
    weft_scope_pop();
    weft_grad_mode_restore(prev);
    out = weft_tensor_finish(out);
    lin = weft_tensor_finish(lin);
    if (!rec || !out)
        return out;
    struct weft_node *node = weft_node_create(OP_GRAD_FN(MASKED_SELECT), masked_backward, 1, &t, 1);
    if (node) {
        int64_t *ints = weft_node_ints(node);
        ints[0] = 0;
        ints[1] = nd;
        memcpy(ints + 2, shape, (size_t)nd * sizeof *shape);
        if (!lin || weft_node_save(node, 0, lin) != 0) {
            weft_node_abandon(node);
            return weft_tensor_discard(out);
        }
    }
    return weft_node_finish1(node, out);
}

static weft_tensor *masked_scatter_in_scope(weft_tensor *t, weft_tensor *mask,
                                            weft_tensor *source, weft_tensor **bmask)
{
    weft_tensor *a, *m;
    int64_t count;
    if (broadcast_pair(t, mask, &a, &m) != 0)
        return NULL;
    weft_tensor *flat = flat_truth(m);
    weft_tensor *lin = flat ? true_positions(flat, &count) : NULL;
    if (!lin)
        return NULL;
    if (count > numel_of(source)) {
        weft_error_set(WEFT_ERR_RUNTIME, "Number of elements of source < number of ones in mask");
        return NULL;
    }
    *bmask = weft_view(flat, m->ndim, m->shape);
    if (count == 0)
        return weft_contiguous(weft_clone(a));
    /* element i of the result takes source's (cumsum(mask)[i] - 1)-th where the mask holds */
    int64_t ns = numel_of(source);
    weft_tensor *k = weft_clamp(weft_sub_scalar(weft_cumsum(flat, 0), 1), 0, NAN);
    weft_tensor *vals = k ? weft_index_select(weft_reshape(source, 1, &ns), 0, k) : NULL;
    vals = vals ? weft_view(vals, m->ndim, m->shape) : NULL;
    return vals && *bmask ? weft_where(*bmask, vals, a) : NULL;
}

weft_tensor *weft_masked_scatter(weft_tensor *t, weft_tensor *mask, weft_tensor *source)
{
    if (!t || !mask || !source || weft_require_strided(t, "masked_scatter") != 0)
        return NULL;
    if (t->dtype != source->dtype) {
        weft_error_set(WEFT_ERR_RUNTIME,
                       "masked_scatter: expected self and source to have same dtypes but got%s and %s",
                       weft_dtype_torch_name(t->dtype), weft_dtype_torch_name(source->dtype));
        return NULL;
    }
    const weft_tensor *all[3] = {t, mask, source};
    if (weft_check_same_device(3, all) != 0)
        return NULL;
    weft_tensor *ins[2] = {t, source};
    bool rec = weft_autograd_needed_inline(2, ins);
    weft_tensor *bmask = NULL, *out;
    bool prev = weft_no_grad_begin();
    weft_scope_push();
    out = weft_tensor_retain(masked_scatter_in_scope(t, mask, source, &bmask));
    bmask = out && rec ? weft_tensor_retain(bmask) : NULL;
    weft_scope_pop();
    weft_grad_mode_restore(prev);
    out = weft_tensor_finish(out);
    bmask = weft_tensor_finish(bmask);
    if (!rec || !out)
        return out;
    struct weft_node *node = weft_node_create(OP_GRAD_FN(MASKED_SCATTER), masked_backward, 2, ins, 1);
    if (node) {
        weft_node_ints(node)[0] = 1;
        if (!bmask || weft_node_save(node, 0, bmask) != 0) {
            weft_node_abandon(node);
            return weft_tensor_discard(out);
        }
    }
    return weft_node_finish1(node, out);
}
