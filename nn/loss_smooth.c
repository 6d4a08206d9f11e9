/* nn/loss_smooth.c: F.smooth_l1_loss and F.huber_loss, made of ops, with the nodes PyTorch
 * records (SmoothL1LossBackward0, HuberLossBackward0) and its backward's piecewise slope:
 * d <= -t gives -s, d >= t gives s, between them d / beta (smooth L1) or d (Huber), with
 * t = beta or delta and s = 1 or delta. Inputs broadcast; the mean divides by the number
 * of elements. */
#include "functional.h"

enum smooth_kind { SMOOTH_L1, HUBER };

static int check(enum smooth_kind kind, weft_tensor *x, weft_tensor *y,
                 enum weft_reduction reduction, double t)
{
    if (reduction != WEFT_REDUCTION_MEAN && reduction != WEFT_REDUCTION_SUM &&
        reduction != WEFT_REDUCTION_NONE)
        return weft_error_set(WEFT_ERR_VALUE, "%d is not a valid value for reduction", (int)reduction);
    if (kind == SMOOTH_L1 && t < 0)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "smooth_l1_loss does not support negative values for beta.");
    if (kind == HUBER && !(t > 0))
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "huber_loss does not support non-positive values for delta.");
    const weft_tensor *pair[2] = {x, y};
    if (weft_check_same_device(2, pair) != 0)
        return weft_error_code();
    if (!weft_dtype_is_floating(x->dtype))
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "\"%s\" not implemented for '%s'",
                              kind == SMOOTH_L1 ? "smooth_l1_cpu" : "huber_cpu",
                              weft_dtype_torch_name(x->dtype));
    return 0;
}

static weft_tensor *elements(enum smooth_kind kind, weft_tensor *x, weft_tensor *y, double t)
{
    /* the loss has the input's dtype (PyTorch computes into an output of it) */
    weft_tensor *d = weft_sub(x, y->dtype == x->dtype ? y : weft_to_dtype(y, x->dtype));
    weft_tensor *ad = weft_abs(d);
    if (kind == SMOOTH_L1 && t == 0)
        return ad;
    weft_tensor *sq = weft_mul_scalar(weft_mul(d, d), kind == SMOOTH_L1 ? 0.5 / t : 0.5);
    weft_tensor *lin = kind == SMOOTH_L1 ? weft_sub_scalar(ad, 0.5 * t)
                                         : weft_mul_scalar(weft_sub_scalar(ad, 0.5 * t), t);
    return ad ? weft_where(weft_lt_scalar(ad, t), sq, lin) : NULL;
}

/* ints[0] kind, ints[1] reduction; scalars[0] beta or delta, [1] the element count.
 * Saved: 0 input, 1 target. */
static int smooth_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                           weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0], *x = weft_node_saved(node, 0), *y = weft_node_saved(node, 1);
    if (!g)
        return 0;
    enum smooth_kind kind = (enum smooth_kind)weft_node_ints(node)[0];
    double t = weft_node_scalars(node)[0], n = weft_node_scalars(node)[1];
    double s = kind == SMOOTH_L1 ? 1 : t;
    weft_tensor *d = weft_sub(x, y);
    weft_tensor *mid = kind == HUBER ? d : t > 0 ? weft_div_scalar(d, t) : weft_zeros_like(d);
    weft_tensor *slope = weft_where(weft_le_scalar(d, -t), weft_full_like(d, -s),
                       weft_where(weft_ge_scalar(d, t), weft_full_like(d, s), mid));
    if (weft_node_ints(node)[1] == WEFT_REDUCTION_MEAN)
        g = weft_div_scalar(g, n);
    weft_tensor *dx = slope ? weft_mul(slope, g) : NULL;
    if (!dx)
        return weft_error_code();
    grad_inputs[0] = weft_node_needs_input_grad(node, 0) ? dx : NULL;
    if (weft_node_needs_input_grad(node, 1) && !(grad_inputs[1] = weft_neg(dx)))
        return weft_error_code();
    return 0;
}

static weft_tensor *smooth_in_scope(enum smooth_kind kind, weft_tensor *x, weft_tensor *y,
                                    enum weft_reduction reduction, double t)
{
    if (check(kind, x, y, reduction, t) != 0)
        return NULL;
    weft_tensor *in[2] = {x, y};
    bool rec = weft_autograd_needed(2, in);
    bool prev = weft_no_grad_begin();
    weft_tensor *e = elements(kind, x, y, t), *loss = nn_reduce_loss(e, reduction);
    weft_grad_mode_restore(prev);
    if (!loss || !rec)
        return loss;
    struct weft_node *node = weft_node_create(
        kind == SMOOTH_L1 ? "SmoothL1LossBackward0" : "HuberLossBackward0", smooth_backward, 2,
        in, 2);
    if (!node)
        return NULL;
    weft_node_ints(node)[0] = kind;
    weft_node_ints(node)[1] = reduction;
    weft_node_scalars(node)[0] = t;
    weft_node_scalars(node)[1] = (double)weft_tensor_numel(e);
    if (weft_node_save(node, 0, x) != 0 || weft_node_save(node, 1, y) != 0) {
        weft_node_abandon(node);
        return NULL;
    }
    return weft_nn_attach(node, loss);
}

static weft_tensor *smooth(enum smooth_kind kind, weft_tensor *x, weft_tensor *y,
                           enum weft_reduction reduction, double t)
{
    if (!x || !y)
        return NULL;
    weft_scope_push();
    weft_tensor *loss = weft_tensor_retain(smooth_in_scope(kind, x, y, reduction, t));
    weft_scope_pop();
    return weft_autorelease(loss);
}

weft_tensor *weft_smooth_l1_loss(weft_tensor *input, weft_tensor *target,
                                 enum weft_reduction reduction, double beta)
{
    weft_tensor *in[2] = {input, target};
    WEFT_AUTOCAST_RETURN("smooth_l1_loss", 2, in,
                         weft_smooth_l1_loss(in[0], in[1], reduction, beta));
    return smooth(SMOOTH_L1, input, target, reduction, beta);
}

weft_tensor *weft_huber_loss(weft_tensor *input, weft_tensor *target,
                             enum weft_reduction reduction, double delta)
{
    weft_tensor *in[2] = {input, target};
    WEFT_AUTOCAST_RETURN("huber_loss", 2, in, weft_huber_loss(in[0], in[1], reduction, delta));
    return smooth(HUBER, input, target, reduction, delta);
}
