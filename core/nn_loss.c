/* core/nn_loss.c: the losses, each one backward node with PyTorch's name and formula.
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

#include "nn_functional.h"

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
 * Node "NllLossBackward0": one input (logits or log-probabilities). ints[0] reduction,
 * ints[1] 1 for cross_entropy (the input is logits), ints[2] class weights given;
 * scalars[0] label smoothing, scalars[1] positions M (smoothing's unweighted mean).
 * Saved: 0 log_softmax (cross_entropy), 1 target with ignored entries set to 0,
 * 2 per-position weight w_t (0 where ignored), 3 the normaliser sum(w_t) (mean),
 * 4 class weights as [1, C, 1...] (smoothing with weights), 5 valid mask (smoothing). */

struct class_loss {
    weft_tensor *input;   /* [N, C, d...] */
    weft_tensor *target;  /* [N, 1, d...], ignored entries 0 */
    weft_tensor *wt;      /* [N, 1, d...] weight of each position's target, 0 where ignored */
    weft_tensor *valid;   /* [N, 1, d...] 1 where not ignored, input's dtype */
    weft_tensor *weights; /* [1, C, 1...] or NULL */
    int64_t C, M;
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
    double eps = weft_node_scalars(node)[0], M = weft_node_scalars(node)[1];
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
        weft_tensor *b = g;
        if (reduction == WEFT_REDUCTION_MEAN)
            b = weighted ? weft_div(g, norm) : weft_div_scalar(g, M);
        weft_tensor *c2 = weft_mul(valid, weft_mul_scalar(b, eps / (double)C));
        weft_tensor *total = weighted ? weft_sum(weights, 0, NULL, false) : NULL;
        weft_tensor *c2w = weighted ? weft_mul(c2, total) : weft_mul_scalar(c2, (double)C);
        weft_tensor *p = weft_exp(logp);
        grad = weft_sub(weft_mul(p, weft_add(c1, c2w)), weighted ? weft_mul(c2, weights) : c2);
    } else {
        grad = weft_mul(weft_exp(logp), c1);
    }
    /* ... minus c1 at each position's target class. */
    grad = weft_scatter_add_(grad, 1, t, weft_neg(weft_expand_as(c1, t)));
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
    weft_tensor *t = weft_unsqueeze(input->ndim == 1 ? weft_unsqueeze(target, 0) : target, 1);
    weft_tensor *valid = weft_ne_scalar(t, (double)p->ignore_index);
    if (!valid || class_check_bounds(t, valid, L->C) != 0)
        return weft_error_code();
    L->M = weft_tensor_numel(t);
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

