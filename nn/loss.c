/* nn/loss.c: the losses, each one backward node with PyTorch's name and formula.
 *
 * cross_entropy is fused: one forward (log_softmax, then the picked entries and, with
 * label smoothing, the class sums) and one node whose gradient is computed directly as
 * (softmax - target distribution) * weights * g / normaliser, never through exp(log)
 * chains, so it is as stable as the forward. nll_loss shares the node. The pointwise
 * losses (mse, l1, binary_cross_entropy_with_logits) share a node that reduces inside.
 *
 * Everything is written with weft ops, so it runs on any backend with their kernels. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "functional.h"

weft_tensor *nn_reduce_loss(weft_tensor *e, enum weft_reduction reduction)
{
    if (e && reduction == WEFT_REDUCTION_SUM)
        return weft_sum(e, 0, NULL, false);
    if (e && reduction == WEFT_REDUCTION_MEAN)
        return weft_mean(e, 0, NULL, false);
    return e;
}

struct weft_cross_entropy_params weft_cross_entropy_defaults(void)
{
    return (struct weft_cross_entropy_params){WEFT_REDUCTION_MEAN, -100, 0.0, NULL};
}

static int check_reduction(enum weft_reduction r)
{
    if (r == WEFT_REDUCTION_MEAN || r == WEFT_REDUCTION_SUM || r == WEFT_REDUCTION_NONE)
        return 0;
    return weft_error_set(WEFT_ERR_VALUE, "%d is not a valid value for reduction", (int)r);
}

/* ---- class-index losses: cross_entropy and nll_loss ----------------------------------------
 * Both work on input [N, C, d...] (a 1-D input is seen as [1, C]) with the class dim 1
 * and target [N, d...] seen as [N, 1, d...], so every per-position tensor has that shape.
 *
 * One node, named as PyTorch's (class_loss_in_scope): one input (logits or
 * log-probabilities). ints[0] reduction, ints[1] 1 for cross_entropy (the input is
 * logits), ints[2] class weights given; scalars[0] label smoothing.
 * Saved: 0 log_softmax (cross_entropy), 1 target with ignored entries set to 0,
 * 2 per-position weight w_t (0 where ignored), 3 the normaliser sum(w_t) (mean),
 * 4 class weights as [1, C, 1...] (smoothing with weights), 5 valid mask (smoothing). */

struct class_loss {
    weft_tensor *input;   /* [N, C, d...] */
    weft_tensor *target;  /* [N, 1, d...], ignored entries 0 */
    weft_tensor *wt;      /* [N, 1, d...] weight of each position's target, 0 where ignored */
    weft_tensor *valid;   /* [N, 1, d...] 1 where not ignored, input's dtype */
    weft_tensor *weights; /* [1, C, 1...] or NULL */
    int64_t C;            /* classes */
    int out_ndim;         /* target's shape: the unreduced loss's */
    int64_t out_shape[WEFT_MAX_DIMS];
};

static int class_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                          weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0];
    if (!g)
        return 0;
    const int64_t *ints = weft_node_ints(node);
    enum weft_reduction reduction = (enum weft_reduction)ints[0];
    bool logits = ints[1] != 0, weighted = ints[2] != 0;
    double eps = weft_node_scalars(node)[0];
    weft_tensor *logp = weft_node_saved(node, 0), *t = weft_node_saved(node, 1),
                *wt = weft_node_saved(node, 2), *norm = weft_node_saved(node, 3),
                *weights = weft_node_saved(node, 4), *valid = weft_node_saved(node, 5);
    int nd = weft_node_input_ndim(node, 0);
    const int64_t *shape = weft_node_input_shape(node, 0);
    /* g per position: the unreduced gradient has target's shape; put the class dim back. */
    if (reduction == WEFT_REDUCTION_NONE)
        g = weft_reshape(g, t->ndim, t->shape);
    weft_tensor *a = reduction == WEFT_REDUCTION_MEAN ? weft_div(g, norm) : g;
    /* c1: the coefficient of (softmax - onehot) from the NLL term. */
    weft_tensor *c1 = weft_mul(wt, weft_mul_scalar(a, 1 - (logits ? eps : 0)));
    weft_tensor *grad;
    if (!logits) {
        grad = weft_zeros(nd, shape, g->dtype, g->device);
    } else if (eps > 0) {
        /* Smoothing adds (eps/C) * b * (sum_c(w_c) * softmax - w) on valid positions. */
        int64_t C = shape[1];
        weft_tensor *b = reduction == WEFT_REDUCTION_MEAN ? weft_div(g, norm) : g;
        weft_tensor *c2 = weft_mul(valid, weft_mul_scalar(b, eps / (double)C));
        weft_tensor *total = weighted ? weft_sum(weights, 0, NULL, false) : NULL;
        weft_tensor *c2w = weighted ? weft_mul(c2, total) : weft_mul_scalar(c2, (double)C);
        weft_tensor *p = weft_exp(logp);
        grad = weft_sub(weft_mul(p, weft_add(c1, c2w)), weighted ? weft_mul(c2, weights) : c2);
    } else {
        grad = weft_mul(weft_exp(logp), c1);
    }
    /* ... minus c1 at each position's target class. */
    grad = weft_scatter_add_(grad, 1, t, weft_neg(c1));
    grad_inputs[0] = grad;
    return grad ? 0 : weft_error_code();
}

static int class_check_target(const weft_tensor *input, const weft_tensor *target)
{
    char a[160], b[160];
    if (target->dtype != WEFT_I64)
        return weft_error_set(WEFT_ERR_RUNTIME, "expected scalar type Long but found %s",
                              weft_dtype_torch_name(target->dtype));
    if (input->ndim == 1)
        return target->ndim == 0 ? 0
                                 : weft_error_set(WEFT_ERR_RUNTIME,
                                                  "0D or 1D target tensor expected, multi-target "
                                                  "not supported");
    if (input->ndim == 2 && target->ndim != 1)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "0D or 1D target tensor expected, multi-target not supported");
    if (target->ndim >= 1 && input->shape[0] != target->shape[0])
        return weft_error_set(WEFT_ERR_VALUE,
                              "Expected input batch_size (%lld) to match target batch_size (%lld).",
                              (long long)input->shape[0], (long long)target->shape[0]);
    if (input->ndim > 2) {
        int64_t expect[WEFT_MAX_DIMS];
        expect[0] = input->shape[0];
        for (int d = 2; d < input->ndim; d++)
            expect[d - 1] = input->shape[d];
        if (target->ndim != input->ndim - 1 ||
            memcmp(expect, target->shape, (size_t)target->ndim * sizeof *expect) != 0)
            return weft_error_set(WEFT_ERR_RUNTIME, "Expected target size %s, got %s",
                                  weft_shape_str(input->ndim - 1, expect, a, sizeof a),
                                  weft_shape_str(target->ndim, target->shape, b, sizeof b));
    }
    return 0;
}

/* "Target 7 is out of bounds." for the first non-ignored target outside [0, C). Reading
 * the targets back happens only when one is bad. */
static int class_check_bounds(weft_tensor *t, weft_tensor *valid_mask, int64_t C)
{
    weft_tensor *bad = weft_logical_and(valid_mask, weft_logical_or(weft_lt_scalar(t, 0),
                                                                    weft_ge_scalar(t, (double)C)));
    double any;
    if (!bad || weft_tensor_item(weft_any(bad, 0, NULL, false), &any) != 0)
        return weft_error_code();
    if (any == 0)
        return 0;
    int64_t n = weft_tensor_numel(t);
    int64_t *values = malloc((size_t)n * sizeof *values);
    uint8_t *flags = malloc((size_t)n);
    int rc = WEFT_ERR_OUT_OF_MEMORY;
    if (!values || !flags) {
        weft_error_set(rc, "out of host memory checking targets");
    } else if ((rc = weft_tensor_read(weft_contiguous(t), values, (size_t)n * sizeof *values)) == 0 &&
               (rc = weft_tensor_read(weft_contiguous(bad), flags, (size_t)n)) == 0) {
        for (int64_t i = 0; i < n; i++)
            if (flags[i]) {
                rc = weft_error_set(WEFT_ERR_INDEX, "Target %lld is out of bounds.", (long long)values[i]);
                break;
            }
    }
    free(values);
    free(flags);
    return rc;
}

/* Checks and prepares the per-position tensors shared by the forward and the node. */
static int class_prepare(weft_tensor *input, weft_tensor *target,
                         const struct weft_cross_entropy_params *p, struct class_loss *L)
{
    char s[160];
    const weft_tensor *all[3] = {input, target, p->weight};
    if (check_reduction(p->reduction) || weft_check_same_device(p->weight ? 3 : 2, all))
        return weft_error_code();
    if (input->ndim == 0)
        return weft_error_set(WEFT_ERR_RUNTIME, "input tensor should be 1D or 2D or more, got 0D");
    if (!weft_dtype_is_floating(input->dtype))
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "\"nll_loss\" not implemented for '%s'",
                              weft_dtype_torch_name(input->dtype));
    if (class_check_target(input, target) != 0)
        return weft_error_code();
    L->input = input->ndim == 1 ? weft_unsqueeze(input, 0) : input;
    L->C = L->input->shape[1];
    if (p->weight && (p->weight->ndim != 1 || p->weight->shape[0] != L->C))
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "weight tensor should be defined either for all %lld classes or no "
                              "classes but got weight tensor of shape: %s",
                              (long long)L->C, weft_shape_str(p->weight->ndim, p->weight->shape, s, sizeof s));
    if (p->weight && p->weight->dtype != input->dtype) /* PyTorch 1.13's nll_loss kernel */
        return weft_error_set(WEFT_ERR_RUNTIME, "expected scalar type %s but found %s",
                              weft_dtype_torch_name(input->dtype),
                              weft_dtype_torch_name(p->weight->dtype));
    weft_tensor *t = weft_unsqueeze(input->ndim == 1 ? weft_unsqueeze(target, 0) : target, 1);
    weft_tensor *valid = weft_ne_scalar(t, (double)p->ignore_index);
    if (!valid || class_check_bounds(t, valid, L->C) != 0)
        return weft_error_code();
    L->out_ndim = target->ndim;
    memcpy(L->out_shape, target->shape, sizeof L->out_shape);
    L->target = weft_masked_fill(t, weft_logical_not(valid), 0);
    L->valid = weft_to_dtype(valid, input->dtype);
    L->weights = NULL;
    L->wt = L->valid;
    if (p->weight) {
        weft_tensor *w = weft_to_dtype(weft_detach(p->weight), input->dtype);
        L->weights = weft_reshape(w, 2, (const int64_t[]){1, L->C});
        if (L->input->ndim > 2) {
            int64_t shape[WEFT_MAX_DIMS];
            for (int d = 0; d < L->input->ndim; d++)
                shape[d] = d == 1 ? L->C : 1;
            L->weights = weft_reshape(w, L->input->ndim, shape);
        }
        const int64_t flat = -1;
        weft_tensor *picked = weft_index_select(w, 0, weft_reshape(L->target, 1, &flat));
        L->wt = weft_mul(weft_reshape(picked, t->ndim, t->shape), L->valid);
    }
    return L->target && L->valid && L->wt && (!p->weight || L->weights) ? 0 : weft_error_code();
}


/* The loss from log-probabilities; *norm gets sum(w_t), the mean's normaliser. */
static weft_tensor *class_forward(const struct class_loss *L, weft_tensor *logp, double eps,
                                  enum weft_reduction reduction, weft_tensor **norm)
{
    const int cls = 1;
    weft_tensor *nll = weft_neg(weft_mul(weft_gather(logp, 1, L->target), L->wt));
    weft_tensor *smooth = NULL;
    if (eps > 0) { /* PyTorch's -sum_c(w_c * logp_c), zero where ignored */
        weft_tensor *lp = L->weights ? weft_mul(logp, L->weights) : logp;
        smooth = weft_mul(weft_neg(weft_sum(lp, 1, &cls, true)), L->valid);
    }
    *norm = weft_sum(L->wt, 0, NULL, false);
    if (reduction == WEFT_REDUCTION_NONE) {
        weft_tensor *loss = nll;
        if (smooth)
            loss = weft_add(weft_mul_scalar(nll, 1 - eps), weft_mul_scalar(smooth, eps / (double)L->C));
        return weft_reshape(loss, L->out_ndim, L->out_shape);
    }
    weft_tensor *total = weft_sum(nll, 0, NULL, false);
    if (reduction == WEFT_REDUCTION_MEAN)
        total = weft_div(total, *norm);
    if (!smooth)
        return total;
    /* Smoothing's mean has the NLL term's divisor: the targets' summed weights, which
     * without class weights is the number of positions not ignored (PyTorch 1.13's
     * smooth_loss.sum() / (~ignore_mask).sum(), not smooth_loss.mean()). */
    weft_tensor *s = weft_sum(smooth, 0, NULL, false);
    if (reduction == WEFT_REDUCTION_MEAN)
        s = weft_div(s, *norm);
    return weft_add(weft_mul_scalar(total, 1 - eps), weft_mul_scalar(s, eps / (double)L->C));
}

static int class_save(struct weft_node *node, const struct class_loss *L, weft_tensor *logp,
                      weft_tensor *norm, bool logits, double eps, enum weft_reduction reduction)
{
    int64_t *ints = weft_node_ints(node);
    ints[0] = reduction;
    ints[1] = logits;
    ints[2] = L->weights != NULL;
    weft_node_scalars(node)[0] = eps;
    int rc = logits ? weft_node_save(node, 0, logp) : 0;
    if (rc == 0)
        rc = weft_node_save(node, 1, L->target);
    if (rc == 0)
        rc = weft_node_save(node, 2, L->wt);
    if (rc == 0 && reduction == WEFT_REDUCTION_MEAN)
        rc = weft_node_save(node, 3, norm);
    if (rc == 0 && eps > 0)
        rc = weft_node_save(node, 4, L->weights);
    if (rc == 0 && eps > 0)
        rc = weft_node_save(node, 5, L->valid);
    return rc;
}

static weft_tensor *class_loss_in_scope(weft_tensor *input, weft_tensor *target,
                                        const struct weft_cross_entropy_params *params, bool logits)
{
    struct weft_cross_entropy_params p = params ? *params : weft_cross_entropy_defaults();
    if (logits && !(p.label_smoothing >= 0 && p.label_smoothing <= 1)) {
        /* C++'s stream formatting of a double, which is %g's */
        weft_error_set(WEFT_ERR_RUNTIME, "label_smoothing must be between 0.0 and 1.0. Got: %g",
                       p.label_smoothing);
        return NULL;
    }
    double eps = logits ? p.label_smoothing : 0;
    struct class_loss L;
    if (class_prepare(input, target, &p, &L) != 0)
        return NULL;
    bool rec = weft_autograd_needed(1, &L.input);
    /* The node PyTorch's user sees: nll_loss's for 1-D and 2-D inputs, nll_loss2d's for
     * more (an unreduced loss of a 3-D or 5-D+ input is a view of it), and with label
     * smoothing the sum of the two terms, AddBackward0. */
    const char *name = eps > 0 ? "AddBackward0" : input->ndim <= 2 ? "NllLossBackward0"
                                                                    : "NllLoss2DBackward0";
    bool viewed = eps == 0 && p.reduction == WEFT_REDUCTION_NONE && input->ndim != 4 &&
                  input->ndim > 2;
    bool prev = weft_no_grad_begin();
    weft_tensor *logp = logits ? weft_log_softmax(L.input, 1) : L.input, *norm = NULL;
    weft_tensor *loss = logp ? class_forward(&L, logp, eps, p.reduction, &norm) : NULL;
    int64_t numel = loss ? weft_tensor_numel(loss) : 0;
    if (loss && rec && viewed)
        loss = weft_reshape(loss, 1, &numel);
    weft_grad_mode_restore(prev);
    if (!loss || !rec)
        return loss;
    struct weft_node *node = weft_node_create(name, class_backward, 1, &L.input, 6);
    if (!node)
        return NULL;
    if (class_save(node, &L, logp, norm, logits, eps, p.reduction) != 0) {
        weft_node_abandon(node);
        return NULL;
    }
    loss = weft_nn_attach(node, loss);
    return viewed && loss ? weft_view(loss, L.out_ndim, L.out_shape) : loss;
}

/* ---- class-probability targets ---------------------------------------------------------------
 * PyTorch 1.13's cross_entropy_loss_prob_target, for a target of the input's shape: the
 * same recorded ops, so the gradient and the grad_fn a user sees are PyTorch's:
 * -(log_softmax(x) * t * w).sum(class dim) per position (t smoothed to
 * t (1 - eps) + eps / C), summed, or divided by the number of positions (numel / C, not
 * the weights' sum as with class indices). */

/* t / n for a count n, PyTorch's div.Scalar: its node is DivBackward1 (weft_div_scalar's
 * is DivBackward0, PyTorch's for a Python number, which it wraps as a tensor). */
static int div_count_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                              weft_tensor **grad_inputs)
{
    if (grad_outputs[0] && !(grad_inputs[0] = weft_div_scalar(grad_outputs[0], weft_node_scalars(node)[0])))
        return weft_error_code();
    return 0;
}

static weft_tensor *div_count(weft_tensor *t, double n)
{
    bool rec = weft_autograd_needed(1, &t);
    weft_tensor *out = WEFT_NO_GRAD(rec, weft_div_scalar(t, n));
    if (!rec || !out)
        return out;
    struct weft_node *node = weft_node_create("DivBackward1", div_count_backward, 1, &t, 0);
    if (node)
        weft_node_scalars(node)[0] = n;
    return weft_nn_attach(node, out);
}

static weft_tensor *prob_loss_in_scope(weft_tensor *input, weft_tensor *target,
                                       const struct weft_cross_entropy_params *params)
{
    struct weft_cross_entropy_params p = params ? *params : weft_cross_entropy_defaults();
    const weft_tensor *all[3] = {input, target, p.weight};
    char s[160];
    if (check_reduction(p.reduction) || weft_check_same_device(p.weight ? 3 : 2, all))
        return NULL;
    if (!weft_dtype_is_floating(target->dtype)) {
        weft_error_set(WEFT_ERR_RUNTIME,
                       "Expected floating point type for target with class probabilities, got %s",
                       weft_dtype_torch_name(target->dtype));
        return NULL;
    }
    if (p.ignore_index >= 0) {
        weft_error_set(WEFT_ERR_RUNTIME, "ignore_index is not supported for floating point target");
        return NULL;
    }
    if (!weft_dtype_is_floating(input->dtype)) {
        weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "\"log_softmax_lastdim_kernel_impl\" not implemented for '%s'",
                       weft_dtype_torch_name(input->dtype));
        return NULL;
    }
    int cls = input->ndim == 1 ? 0 : 1;
    int64_t C = input->shape[cls];
    if (p.weight && (p.weight->ndim != 1 || p.weight->shape[0] != C)) {
        weft_error_set(WEFT_ERR_RUNTIME,
                       "cross_entropy: weight tensor should be defined either for all %lld classes "
                       "or no classes but got weight tensor of shape: %s",
                       (long long)C, weft_shape_str(p.weight->ndim, p.weight->shape, s, sizeof s));
        return NULL;
    }
    double eps = p.label_smoothing;
    if (!(eps >= 0 && eps <= 1)) {
        weft_error_set(WEFT_ERR_RUNTIME, "label_smoothing must be between 0.0 and 1.0. Got: %g", eps);
        return NULL;
    }
    weft_tensor *logp = weft_log_softmax(input, cls);
    weft_tensor *t = eps > 0 ? weft_add_scalar(weft_mul_scalar(target, 1 - eps), eps / (double)C) : target;
    weft_tensor *prod = weft_mul(logp, t);
    if (p.weight) {
        int64_t shape[WEFT_MAX_DIMS];
        for (int d = 0; d < input->ndim; d++)
            shape[d] = d == cls ? C : 1;
        prod = weft_mul(prod, weft_view(p.weight, input->ndim, shape));
    }
    if (p.reduction == WEFT_REDUCTION_NONE)
        return weft_neg(weft_sum(prod, 1, &cls, false));
    weft_tensor *total = weft_sum(prod, 0, NULL, false);
    if (p.reduction == WEFT_REDUCTION_SUM)
        return weft_neg(total);
    int64_t n = weft_tensor_numel(input);
    if (n == 0) /* PyTorch: -(...).sum().fill_(nan) */
        return weft_neg(weft_mul_scalar(total, NAN));
    return div_count(weft_neg(total), (double)(n / C));
}

/* Class indices, or class probabilities when the target has the input's shape (PyTorch's
 * test in cross_entropy_loss). */
static weft_tensor *cross_entropy_in_scope(weft_tensor *logits, weft_tensor *target,
                                           const struct weft_cross_entropy_params *params)
{
    if (logits->ndim == target->ndim &&
        !memcmp(logits->shape, target->shape, sizeof(int64_t) * (size_t)logits->ndim))
        return prob_loss_in_scope(logits, target, params);
    return class_loss_in_scope(logits, target, params, true);
}

weft_tensor *weft_cross_entropy(weft_tensor *logits, weft_tensor *target,
                                const struct weft_cross_entropy_params *params)
{
    if (!logits || !target)
        return NULL;
    /* under autocast the class weights are cast with the logits, as PyTorch casts every
     * tensor argument */
    struct weft_cross_entropy_params cast = params ? *params : weft_cross_entropy_defaults();
    weft_tensor *in[3] = {logits, target, cast.weight};
    WEFT_AUTOCAST_RETURN("cross_entropy", 3, in,
                         weft_cross_entropy(in[0], in[1], (cast.weight = in[2], &cast)));
    weft_scope_push();
    weft_tensor *loss = weft_tensor_retain(cross_entropy_in_scope(logits, target, params));
    weft_scope_pop();
    return weft_autorelease(loss);
}

weft_tensor *weft_nll_loss(weft_tensor *log_probs, weft_tensor *target,
                           const struct weft_cross_entropy_params *params)
{
    if (!log_probs || !target)
        return NULL;
    struct weft_cross_entropy_params cast = params ? *params : weft_cross_entropy_defaults();
    weft_tensor *in[3] = {log_probs, target, cast.weight};
    WEFT_AUTOCAST_RETURN("nll_loss", 3, in,
                         weft_nll_loss(in[0], in[1], (cast.weight = in[2], &cast)));
    weft_scope_push();
    weft_tensor *loss = weft_tensor_retain(class_loss_in_scope(log_probs, target, params, false));
    weft_scope_pop();
    return weft_autorelease(loss);
}

/* ---- pointwise losses ------------------------------------------------------------------------
 * One node per loss with PyTorch's name; the reduction happens inside it. Inputs: 0 input,
 * 1 target, 2 pos_weight (BCE); all three saved in the same slots. ints[0] kind, ints[1]
 * reduction; scalars[0] the number of loss elements (the mean's divisor). */

enum pointwise_kind { PW_MSE, PW_L1, PW_BCE_LOGITS };

/* softplus(-x) = log(1 + exp(-x)) = -log(sigmoid(x)), without overflow. */
static weft_tensor *softplus_neg(weft_tensor *x)
{
    return weft_add(weft_log1p(weft_exp(weft_neg(weft_abs(x)))), weft_relu(weft_neg(x)));
}

/* lw = (pos_weight - 1) * y + 1, the weight of the positive term. */
static weft_tensor *log_weight(weft_tensor *y, weft_tensor *pw)
{
    return weft_add_scalar(weft_mul(weft_sub_scalar(pw, 1), y), 1);
}

static weft_tensor *pointwise_elements(enum pointwise_kind kind, weft_tensor *x, weft_tensor *y,
                                       weft_tensor *pw)
{
    switch (kind) {
    case PW_MSE: {
        weft_tensor *d = weft_sub(x, y);
        return weft_mul(d, d);
    }
    case PW_L1:
        return weft_abs(weft_sub(x, y));
    case PW_BCE_LOGITS: {
        /* (1 - y) * x + lw * softplus(-x): max(x, 0) - x*y + log(1 + exp(-|x|)) when lw = 1 */
        weft_tensor *sp = softplus_neg(x);
        return weft_add(weft_mul(weft_rsub_scalar(y, 1), x), pw ? weft_mul(log_weight(y, pw), sp) : sp);
    }
    }
    return NULL;
}

static int pointwise_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                              weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0];
    if (!g)
        return 0;
    weft_tensor *x = weft_node_saved(node, 0), *y = weft_node_saved(node, 1),
                *pw = weft_node_saved(node, 2);
    enum pointwise_kind kind = (enum pointwise_kind)weft_node_ints(node)[0];
    if (weft_node_ints(node)[1] == WEFT_REDUCTION_MEAN)
        g = weft_div_scalar(g, weft_node_scalars(node)[0]);
    weft_tensor *dx = NULL, *dy = NULL, *dpw = NULL;
    bool need_y = weft_node_needs_input_grad(node, 1), need_pw = weft_node_needs_input_grad(node, 2);
    switch (kind) {
    case PW_MSE:
        dx = weft_mul(weft_mul_scalar(weft_sub(x, y), 2), g);
        dy = need_y ? weft_neg(dx) : NULL;
        break;
    case PW_L1:
        dx = weft_mul(weft_sign(weft_sub(x, y)), g);
        dy = need_y ? weft_neg(dx) : NULL;
        break;
    case PW_BCE_LOGITS: {
        /* d/dx = lw * sigmoid(x) - pos_weight * y (sigmoid(x) - y without pos_weight);
         * d/dy = -x + (pos_weight - 1) * softplus(-x); d/dpos_weight = y * softplus(-x). */
        weft_tensor *sig = weft_sigmoid(x);
        dx = pw ? weft_sub(weft_mul(log_weight(y, pw), sig), weft_mul(pw, y)) : weft_sub(sig, y);
        dx = weft_mul(dx, g);
        weft_tensor *sp = need_y || need_pw ? softplus_neg(x) : NULL;
        if (need_y)
            dy = weft_mul(pw ? weft_sub(weft_mul(weft_sub_scalar(pw, 1), sp), x) : weft_neg(x), g);
        if (need_pw)
            dpw = weft_mul(weft_mul(y, sp), g);
        break;
    }
    }
    if (!dx || (need_y && !dy) || (need_pw && !dpw))
        return weft_error_code();
    grad_inputs[0] = weft_node_needs_input_grad(node, 0) ? dx : NULL;
    grad_inputs[1] = dy;
    grad_inputs[2] = dpw;
    return 0;
}

/* PyTorch 1.13's l1_loss is composite, (x - y).abs() then mean or sum: its grad_fn is
 * the last of those. */
static const char *pointwise_name(enum pointwise_kind kind, enum weft_reduction reduction)
{
    static const char *const names[] = {"MseLossBackward0", "L1LossBackward0",
                                        "BinaryCrossEntropyWithLogitsBackward0"};
    static const char *const l1[] = {[WEFT_REDUCTION_MEAN] = "MeanBackward0",
                                     [WEFT_REDUCTION_SUM] = "SumBackward0",
                                     [WEFT_REDUCTION_NONE] = "AbsBackward0"};
    return kind == PW_L1 ? l1[reduction] : names[kind];
}

static weft_tensor *pointwise_in_scope(enum pointwise_kind kind, weft_tensor *x, weft_tensor *y,
                                       weft_tensor *pw, enum weft_reduction reduction)
{
    if (check_reduction(reduction) != 0)
        return NULL;
    /* PyTorch's mse_loss runs in the operands' promoted dtype (an integer input with a float
     * target is a float loss); its l1_loss is (x - y).abs() and a reduction, whose own
     * errors stand (bool operands, the mean of integers); with logits the input must be
     * floating. */
    enum weft_dtype dt = kind == PW_MSE ? weft_result_type(x, y) : x->dtype;
    if (kind != PW_L1 && !weft_dtype_is_floating(dt)) {
        static const char *const kernels[] = {"mse_cpu", "l1_cpu", "binary_cross_entropy_with_logits"};
        weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "\"%s\" not implemented for '%s'", kernels[kind],
                       weft_dtype_torch_name(dt));
        return NULL;
    }
    if (kind == PW_MSE && (x->dtype != dt || y->dtype != dt)) { /* a bool input too */
        x = weft_to_dtype(x, dt);
        y = weft_to_dtype(y, dt);
        if (!x || !y)
            return NULL;
    }
    if (kind == PW_BCE_LOGITS &&
        (x->ndim != y->ndim || memcmp(x->shape, y->shape, (size_t)x->ndim * sizeof *x->shape) != 0)) {
        char a[160], b[160];
        weft_error_set(WEFT_ERR_VALUE,
                       "Target size (torch.Size(%s)) must be the same as input size (torch.Size(%s))",
                       weft_shape_str(y->ndim, y->shape, a, sizeof a),
                       weft_shape_str(x->ndim, x->shape, b, sizeof b));
        return NULL;
    }
    weft_tensor *in[3] = {x, y, pw};
    bool rec = weft_autograd_needed(3, in);
    bool prev = weft_no_grad_begin();
    weft_tensor *e = pointwise_elements(kind, x, y, pw), *loss = nn_reduce_loss(e, reduction);
    weft_grad_mode_restore(prev);
    if (!loss || !rec)
        return loss;
    struct weft_node *node = weft_node_create(pointwise_name(kind, reduction), pointwise_backward, 3, in, 3);
    if (!node)
        return NULL;
    weft_node_ints(node)[0] = kind;
    weft_node_ints(node)[1] = reduction;
    weft_node_scalars(node)[0] = (double)weft_tensor_numel(e);
    if (weft_node_save(node, 0, x) != 0 || weft_node_save(node, 1, y) != 0 ||
        weft_node_save(node, 2, pw) != 0) {
        weft_node_abandon(node);
        return NULL;
    }
    return weft_nn_attach(node, loss);
}

#define POINTWISE_ENTRY(kind, x, y, pw, reduction)                                            \
    do {                                                                                      \
        if (!(x) || !(y))                                                                     \
            return NULL;                                                                      \
        weft_scope_push();                                                                    \
        weft_tensor *loss__ = weft_tensor_retain(pointwise_in_scope(kind, x, y, pw, reduction)); \
        weft_scope_pop();                                                                     \
        return weft_autorelease(loss__);                                                    \
    } while (0)

weft_tensor *weft_mse_loss(weft_tensor *input, weft_tensor *target, enum weft_reduction reduction)
{
    weft_tensor *in[2] = {input, target};
    WEFT_AUTOCAST_RETURN("mse_loss", 2, in, weft_mse_loss(in[0], in[1], reduction));
    POINTWISE_ENTRY(PW_MSE, input, target, NULL, reduction);
}

weft_tensor *weft_l1_loss(weft_tensor *input, weft_tensor *target, enum weft_reduction reduction)
{
    weft_tensor *in[2] = {input, target};
    WEFT_AUTOCAST_RETURN("l1_loss", 2, in, weft_l1_loss(in[0], in[1], reduction));
    POINTWISE_ENTRY(PW_L1, input, target, NULL, reduction);
}

weft_tensor *weft_binary_cross_entropy_with_logits(weft_tensor *input, weft_tensor *target,
                                                   weft_tensor *pos_weight,
                                                   enum weft_reduction reduction)
{
    weft_tensor *in[3] = {input, target, pos_weight};
    WEFT_AUTOCAST_RETURN("binary_cross_entropy_with_logits", 3, in,
                         weft_binary_cross_entropy_with_logits(in[0], in[1], in[2], reduction));
    POINTWISE_ENTRY(PW_BCE_LOGITS, input, target, pos_weight, reduction);
}
