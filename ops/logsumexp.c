/* core/ops_logsumexp.c: torch.logsumexp, log(sum(exp(x))) over dims without overflow,
 * and its node LogsumexpBackward0.
 *
 * PyTorch 1.13's formula (ReduceOps.cpp, logsumexp_out_impl): m = amax(x, dims, keepdim)
 * with infinite maxima replaced by 0, then log(sum(exp(x - m))) + m. So a row of -inf
 * gives -inf and a row holding +inf gives +inf, not NaN. Bool and integer inputs compute
 * in the default floating dtype. */
#include <math.h>
#include <string.h>

#include "internal.h"

/* Normalised, deduplicated dims (all of them when ndims == 0) into out; count or -1. */
static int reduced_dims(const weft_tensor *t, int ndims, const int *dims, int *out)
{
    bool seen[WEFT_MAX_DIMS] = {false};
    int n = 0;
    if (ndims == 0) {
        for (int d = 0; d < t->ndim; d++)
            out[n++] = d;
        return n;
    }
    for (int i = 0; i < ndims; i++) {
        int d = weft_normalize_dim(dims[i], t->ndim);
        if (d < 0)
            return -1;
        if (t->ndim == 0)
            continue;
        if (seen[d]) {
            weft_error_set(WEFT_ERR_RUNTIME, "dim %d appears multiple times in the list of dims", d);
            return -1;
        }
        seen[d] = true;
        out[n++] = d;
    }
    return n;
}

/* The forward with grad mode off; x is floating. */
static weft_tensor *forward(weft_tensor *x, int n, const int *dims, bool keepdim)
{
    if (weft_tensor_numel(x) == 0)
        return weft_log(weft_sum(weft_exp(x), n, dims, keepdim));
    weft_tensor *m = x;
    for (int i = 0; i < n && m; i++) {
        weft_tensor *values = NULL;
        if (weft_max_dim(m, dims[i], true, &values, NULL) != 0)
            return NULL;
        m = values;
    }
    if (!m)
        return NULL;
    m = weft_masked_fill(m, weft_eq_scalar(weft_abs(m), INFINITY), 0);
    weft_tensor *r = weft_log(weft_sum(weft_exp(weft_sub(x, m)), n, dims, keepdim));
    if (!r)
        return NULL;
    return weft_add(r, keepdim ? m : weft_reshape(m, r->ndim, r->shape));
}

/* Saved: 0 x, 1 the result; ints[0] keepdim. grad * exp(x - result), the gradient and
 * result viewed with the reduced dims kept. */
static int logsumexp_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                              weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0], *x = weft_node_saved(node, 0), *r = weft_node_saved(node, 1);
    if (!g)
        return 0;
    int64_t shape[WEFT_MAX_DIMS];
    memcpy(shape, x->shape, (size_t)x->ndim * sizeof *shape);
    int64_t *ints = weft_node_ints(node);
    for (int i = 0; i < ints[1]; i++)
        shape[ints[2 + i]] = 1;
    weft_tensor *gk = weft_reshape(g, x->ndim, shape), *rk = weft_reshape(r, x->ndim, shape);
    grad_inputs[0] = weft_mul(gk, weft_exp(weft_sub(x, rk)));
    return grad_inputs[0] ? 0 : weft_error_code();
}

weft_tensor *weft_logsumexp(weft_tensor *t, int ndims, const int *dims, bool keepdim)
{
    if (!t)
        return NULL;
    int rd[WEFT_MAX_DIMS];
    if (ndims > WEFT_MAX_DIMS) {
        weft_error_set(WEFT_ERR_VALUE, "logsumexp: at most %d dims, got %d", WEFT_MAX_DIMS, ndims);
        return NULL;
    }
    int n = reduced_dims(t, ndims, dims, rd);
    if (n < 0)
        return NULL;
    bool rec = weft_autograd_needed_inline(1, &t);
    bool prev = weft_no_grad_begin();
    weft_scope_push();
    /* 16-bit floats compute in float32 and round once, as PyTorch's CUDA kernels do */
    bool half = t->dtype == WEFT_F16 || t->dtype == WEFT_BF16;
    weft_tensor *x = weft_dtype_is_floating(t->dtype) && !half
                         ? t
                         : weft_to_dtype(t, half ? WEFT_F32 : weft_default_dtype());
    weft_tensor *out = x ? forward(x, n, rd, keepdim) : NULL;
    if (out && half)
        out = weft_to_dtype(out, t->dtype);
    weft_tensor_retain(out);
    weft_scope_pop();
    weft_grad_mode_restore(prev);
    out = weft_tensor_finish(out);
    if (!out || !rec)
        return out;
    struct weft_node *node = weft_node_create("LogsumexpBackward0", logsumexp_backward, 1, &t, 2);
    if (!node)
        goto fail;
    int64_t *ints = weft_node_ints(node);
    ints[0] = keepdim;
    ints[1] = n < 14 ? n : 14;
    for (int i = 0; i < ints[1]; i++)
        ints[2 + i] = rd[i];
    if (weft_node_save(node, 0, t) != 0 || weft_node_save_output(node, 1, out, 0) != 0) {
        weft_node_abandon(node);
        goto fail;
    }
    if (weft_node_finish(node, 1, &out) != 0)
        goto fail;
    return out;
fail:
    if (weft_scope_depth() == 0)
        weft_tensor_release(out);
    return NULL;
}
