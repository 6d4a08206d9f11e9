/* nn/attention.c: scaled dot-product attention (torch.nn.functional's).
 *
 * The composite path: scores = q k^T * scale (+ mask), softmax over the keys, dropout,
 * then weights v; every step a recorded op, so it runs and differentiates on any backend
 * with matmul and softmax. */
#include <math.h>
#include <string.h>

#include "functional.h"

/* [L, S] bool: key j is visible from query i when j <= i (PyTorch's tril(ones(L, S))). */
static weft_tensor *causal_mask(int64_t L, int64_t S, weft_device dev)
{
    const int64_t col[2] = {L, 1}, row[2] = {1, S};
    weft_tensor *i = weft_reshape(weft_arange(0, (double)L, 1, WEFT_I64, dev), 2, col);
    weft_tensor *j = weft_reshape(weft_arange(0, (double)S, 1, WEFT_I64, dev), 2, row);
    return weft_le(j, i);
}

static weft_tensor *sdpa_composite(weft_tensor *q, weft_tensor *k, weft_tensor *v,
                                   const struct weft_sdpa_params *p)
{
    int64_t L = q->shape[q->ndim - 2], S = k->shape[k->ndim - 2], E = q->shape[q->ndim - 1];
    double scale = p->scale > 0 ? p->scale : 1.0 / sqrt((double)E);
    weft_tensor *scores = weft_mul_scalar(weft_matmul(q, weft_transpose(k, -2, -1)), scale);
    weft_tensor *mask = p->is_causal ? causal_mask(L, S, q->device) : p->attn_mask;
    if (mask && mask->dtype == WEFT_BOOL)
        scores = weft_masked_fill(scores, weft_logical_not(mask), -INFINITY);
    else if (mask)
        scores = weft_add(scores, mask);
    weft_tensor *w = weft_softmax(scores, -1);
    if (p->dropout_p > 0)
        w = weft_dropout(w, p->dropout_p, true);
    return weft_matmul(w, v);
}

static int check_sdpa(const weft_tensor *q, const weft_tensor *k, const weft_tensor *v,
                      const struct weft_sdpa_params *p)
{
    char a[160], b[160], c[160];
    if (q->ndim < 2 || k->ndim < 2 || v->ndim < 2)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "scaled_dot_product_attention: expected query, key and value to "
                              "have at least 2 dims, got %dD, %dD and %dD",
                              q->ndim, k->ndim, v->ndim);
    if (q->shape[q->ndim - 1] != k->shape[k->ndim - 1] ||
        k->shape[k->ndim - 2] != v->shape[v->ndim - 2])
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "scaled_dot_product_attention: expected query [..., L, E], key "
                              "[..., S, E] and value [..., S, Ev], got %s, %s and %s",
                              weft_shape_str(q->ndim, q->shape, a, sizeof a),
                              weft_shape_str(k->ndim, k->shape, b, sizeof b),
                              weft_shape_str(v->ndim, v->shape, c, sizeof c));
    if (q->dtype != k->dtype || q->dtype != v->dtype)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "Expected query, key, and value to have the same dtype, but got "
                              "query.dtype: %s key.dtype: %s and value.dtype: %s instead.",
                              weft_dtype_name(q->dtype), weft_dtype_name(k->dtype),
                              weft_dtype_name(v->dtype));
    if (!weft_dtype_is_floating(q->dtype))
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "scaled_dot_product_attention: expected a floating dtype, got %s",
                              weft_dtype_name(q->dtype));
    if (p->is_causal && p->attn_mask)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "_scaled_dot_product_attention: Explicit attn_mask should not be "
                              "set when is_causal=True");
    if (!(p->dropout_p >= 0 && p->dropout_p <= 1))
        return weft_error_set(WEFT_ERR_VALUE,
                              "dropout probability has to be between 0 and 1, but got %g",
                              p->dropout_p);
    return 0;
}

weft_tensor *weft_scaled_dot_product_attention(weft_tensor *q, weft_tensor *k, weft_tensor *v,
                                               const struct weft_sdpa_params *params)
{
    if (!q || !k || !v)
        return NULL;
    struct weft_sdpa_params p = params ? *params : (struct weft_sdpa_params){0};
    if (check_sdpa(q, k, v, &p) != 0)
        return NULL;
    weft_scope_push();
    weft_tensor *out = weft_tensor_retain(sdpa_composite(q, k, v, &p));
    weft_scope_pop();
    return weft_autorelease(out);
}
