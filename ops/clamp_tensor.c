/* ops/clamp_tensor.c: torch.clamp with tensor bounds (clamp(x, min=t1, max=t2), either may
 * be None), made of maximum and minimum, which propagate NaN as PyTorch's clamp kernel
 * does; all three broadcast and promote together. Node ClampBackward0 with PyTorch's
 * clamp_backward_min_max: x gets the gradient where min <= x <= max, min where x < min
 * (and min < max), max where x > max (or max < min). */
#include "internal.h"

static weft_tensor *clamp_forward(weft_tensor *t, weft_tensor *min, weft_tensor *max)
{
    if (!min && !max) {
        weft_error_set(WEFT_ERR_RUNTIME,
                       "torch.clamp: At least one of 'min' or 'max' must not be None");
        return NULL;
    }
    bool prev = weft_no_grad_begin();
    weft_scope_push();
    weft_tensor *r = min ? weft_maximum(t, min) : t;
    r = r && max ? weft_minimum(r, max) : r;
    weft_tensor_retain(r);
    weft_scope_pop();
    weft_grad_mode_restore(prev);
    return weft_tensor_finish(r);
}

/* Saved: 0 x, 1 min, 2 max (each may be absent). */
static int clamp_tensor_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                                 weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0], *x = weft_node_saved(node, 0);
    weft_tensor *lo = weft_node_saved(node, 1), *hi = weft_node_saved(node, 2);
    if (!g)
        return 0;
    if (weft_node_needs_input_grad(node, 0)) {
        weft_tensor *keep = lo ? weft_ge(x, lo) : NULL;
        if (hi)
            keep = keep ? weft_logical_and(keep, weft_le(x, hi)) : weft_le(x, hi);
        if (!(grad_inputs[0] = masked(keep, g)))
            return weft_error_code();
    }
    if (lo && weft_node_needs_input_grad(node, 1)) {
        weft_tensor *below = weft_lt(x, lo);
        if (hi)
            below = weft_logical_and(below, weft_lt(lo, hi));
        if (!(grad_inputs[1] = masked(below, g)))
            return weft_error_code();
    }
    if (hi && weft_node_needs_input_grad(node, 2)) {
        weft_tensor *above = weft_gt(x, hi);
        if (lo)
            above = weft_logical_or(above, weft_lt(hi, lo));
        if (!(grad_inputs[2] = masked(above, g)))
            return weft_error_code();
    }
    return 0;
}

weft_tensor *weft_clamp_tensor(weft_tensor *t, weft_tensor *min, weft_tensor *max)
{
    if (!t)
        return NULL;
    weft_tensor *ins[3] = {t, min, max};
    bool rec = weft_autograd_needed_inline(3, ins);
    weft_tensor *out = clamp_forward(t, min, max);
    if (!rec || !out)
        return out;
    struct weft_node *node = weft_node_create(OP_GRAD_FN(CLAMP_TENSOR), clamp_tensor_backward, 3,
                                              ins, 3);
    if (node && (weft_node_save(node, 0, t) != 0 || (min && weft_node_save(node, 1, min) != 0) ||
                 (max && weft_node_save(node, 2, max) != 0))) {
        weft_node_abandon(node);
        return weft_tensor_discard(out);
    }
    return weft_node_finish1(node, out);
}
