/* nn/loss_bce.c: F.binary_cross_entropy on probabilities, with PyTorch's clamp of each
 * log at -100 (so a probability of exactly 0 or 1 gives a finite loss) and its node
 * BinaryCrossEntropyBackward0:
 *   input:  g w (x - t) / max((1 - x) x, 1e-12)
 *   target: -g w logit(x)
 * (divided by numel for the mean), derivatives.yaml's binary_cross_entropy_backward and
 * binary_cross_entropy_target_backward. */
#include <math.h>
#include <string.h>

#include "functional.h"

/* PyTorch's EPSILON in binary_cross_entropy_backward. */
#define BCE_EPSILON 1e-12

/* Elementwise losses; grad mode off. */
static weft_tensor *elements(weft_tensor *x, weft_tensor *t, weft_tensor *w)
{
    weft_tensor *log_x = weft_clamp(weft_log(x), -100, NAN);
    weft_tensor *log_1mx = weft_clamp(weft_log(weft_rsub_scalar(x, 1)), -100, NAN);
    /* -(t log x + (1 - t) log(1 - x)) */
    weft_tensor *e = weft_neg(weft_add(weft_mul(t, log_x), weft_mul(weft_rsub_scalar(t, 1), log_1mx)));
    return w ? weft_mul(e, w) : e;
}

/* Saved: 0 x, 1 t, 2 weight or empty; ints[0] reduction. */
static int bce_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                        weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0];
    weft_tensor *x = weft_node_saved(node, 0), *t = weft_node_saved(node, 1);
    weft_tensor *w = weft_node_saved(node, 2);
    if (!g)
        return 0;
    enum weft_reduction reduction = (enum weft_reduction)weft_node_ints(node)[0];
    if (reduction == WEFT_REDUCTION_MEAN)
        g = weft_div_scalar(g, (double)weft_tensor_numel(x));
    if (g && w)
        g = weft_mul(g, w);
    if (!g)
        return weft_error_code();
    if (weft_node_needs_input_grad(node, 0)) {
        weft_tensor *denom = weft_clamp(weft_mul(weft_rsub_scalar(x, 1), x), BCE_EPSILON, NAN);
        if (!(grad_inputs[0] = weft_div(weft_mul(g, weft_sub(x, t)), denom)))
            return weft_error_code();
    }
    if (weft_node_needs_input_grad(node, 1)) {
        weft_tensor *logit = weft_log(weft_div(x, weft_rsub_scalar(x, 1)));
        if (!(grad_inputs[1] = weft_neg(weft_mul(g, logit))))
            return weft_error_code();
    }
    return 0;
}

/* PyTorch's checks: the same size (F.binary_cross_entropy's ValueError), the same dtype,
 * probabilities in [0, 1]. */
static int check(weft_tensor *x, weft_tensor *t, enum weft_reduction reduction)
{
    if (reduction != WEFT_REDUCTION_MEAN && reduction != WEFT_REDUCTION_SUM &&
        reduction != WEFT_REDUCTION_NONE)
        return weft_error_set(WEFT_ERR_VALUE, "%d is not a valid value for reduction",
                              (int)reduction);
    if (x->ndim != t->ndim || memcmp(x->shape, t->shape, (size_t)x->ndim * sizeof *x->shape)) {
        char a[160], b[160];
        return weft_error_set(WEFT_ERR_VALUE,
                              "Using a target size (torch.Size(%s)) that is different to the "
                              "input size (torch.Size(%s)) is deprecated. Please ensure they have "
                              "the same size.",
                              weft_shape_str(t->ndim, t->shape, a, sizeof a),
                              weft_shape_str(x->ndim, x->shape, b, sizeof b));
    }
    if (x->dtype != t->dtype)
        return weft_error_set(WEFT_ERR_RUNTIME, "Found dtype %s but expected %s",
                              weft_dtype_torch_name(t->dtype), weft_dtype_torch_name(x->dtype));
    if (!weft_dtype_is_floating(x->dtype))
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED,
                              "\"binary_cross_entropy\" not implemented for '%s'",
                              weft_dtype_torch_name(x->dtype));
    if (weft_tensor_numel(x) == 0)
        return 0;
    double lo, hi;
    if (weft_tensor_item(weft_min(x), &lo) != 0 || weft_tensor_item(weft_max(x), &hi) != 0)
        return weft_error_code();
    if (!(lo >= 0 && hi <= 1))
        return weft_error_set(WEFT_ERR_RUNTIME, "all elements of input should be between 0 and 1");
    return 0;
}

static weft_tensor *bce_in_scope(weft_tensor *x, weft_tensor *t, weft_tensor *w,
                                 enum weft_reduction reduction)
{
    bool prev = weft_no_grad_begin();
    int rc = check(x, t, reduction);
    weft_tensor *wx = rc == 0 && w ? weft_expand(w, x->ndim, x->shape) : NULL;
    weft_tensor *loss = rc == 0 && (!w || wx) ? nn_reduce_loss(elements(x, t, wx), reduction) : NULL;
    weft_grad_mode_restore(prev);
    weft_tensor *in[2] = {x, t};
    if (!loss || !weft_autograd_needed(2, in))
        return loss;
    struct weft_node *node = weft_node_create("BinaryCrossEntropyBackward0", bce_backward, 2, in, 3);
    if (node && (weft_node_save(node, 0, x) != 0 || weft_node_save(node, 1, t) != 0 ||
                 (wx && weft_node_save(node, 2, wx) != 0))) {
        weft_node_abandon(node);
        node = NULL;
    }
    if (node)
        weft_node_ints(node)[0] = reduction;
    return weft_nn_attach(node, loss);
}

weft_tensor *weft_binary_cross_entropy(weft_tensor *input, weft_tensor *target,
                                       weft_tensor *weight, enum weft_reduction reduction)
{
    if (!input || !target)
        return NULL;
    weft_tensor *in[3] = {input, target, weight};
    WEFT_AUTOCAST_RETURN("binary_cross_entropy", 3, in,
                         weft_binary_cross_entropy(in[0], in[1], in[2], reduction));
    weft_scope_push();
    weft_tensor *loss = weft_tensor_retain(bce_in_scope(input, target, weight, reduction));
    weft_scope_pop();
    return weft_autorelease(loss);
}
