/* nn/attention.c: scaled dot-product attention (torch.nn.functional's).
 *
 * Two paths with the same values:
 *  - fused, where the backend has sdpa_flash and sdpa_flash_backward (weft/kernel.h):
 *    FlashAttention's online softmax, never [L, S]; one node,
 *    ScaledDotProductFlashAttentionBackward0, whose backward recomputes the weights from
 *    q, k and the saved logsumexp. Masks (bool or float, broadcast) and dropout run in the
 *    kernel; the dropout mask is the one weft_dropout would draw on the weights.
 *  - composite, elsewhere and where the kernel cannot serve (a mask that requires grad or
 *    has another floating dtype, dropout_p == 1, empty sizes, inputs on two devices):
 *    scores = q k^T * scale (+ mask), softmax over the keys, dropout, then weights v;
 *    every step a recorded op, so it runs and differentiates on any backend with matmul
 *    and softmax. */
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

/* The scale as given, or PyTorch's default when none was (a given 0 or negative is used:
 * only "not given" means 1 / sqrt(E)). */
static double sdpa_scale(const struct weft_sdpa_params *p, int64_t E)
{
    return p->scale ? *p->scale : 1.0 / sqrt((double)E);
}

static weft_tensor *sdpa_composite(weft_tensor *q, weft_tensor *k, weft_tensor *v,
                                   const struct weft_sdpa_params *p)
{
    int64_t L = q->shape[q->ndim - 2], S = k->shape[k->ndim - 2], E = q->shape[q->ndim - 1];
    double scale = sdpa_scale(p, E);
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

/* ---- fused ---------------------------------------------------------------------------------- */

static int flash_op(void)
{
    static int cached = -1;
    return nn_named_op(&cached, WEFT_OP_SDPA_FLASH_NAME);
}

static int flash_backward_op(void)
{
    static int cached = -1;
    return nn_named_op(&cached, WEFT_OP_SDPA_FLASH_BACKWARD_NAME);
}

/* t expanded to [batch..., rows, cols], its last dim of stride 1 (copied once if not). */
static weft_tensor *kernel_view(weft_tensor *t, int nb, const int64_t *batch, int64_t rows,
                                int64_t cols)
{
    int64_t shape[WEFT_MAX_DIMS];
    memcpy(shape, batch, sizeof(int64_t) * (size_t)nb);
    shape[nb] = rows;
    shape[nb + 1] = cols;
    weft_tensor *e = weft_expand(t, nb + 2, shape);
    return e && e->stride[nb + 1] != 1 && cols > 1 ? weft_contiguous(e) : e;
}

static weft_tensor *make_contiguous_rows(weft_tensor *t)
{
    return t && t->stride[t->ndim - 1] != 1 && t->shape[t->ndim - 1] > 1 ? weft_contiguous(t) : t;
}

/* Saved: 0 q, 1 k, 2 v (as the kernel read them), 3 out, 4 logsumexp, 5 mask (or empty).
 * ints: 0 is_causal, 1 seed, 2 offset; scalars: 0 scale, 1 dropout_p. */
static int flash_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                          weft_tensor **grad_inputs)
{
    if (!grad_outputs[0])
        return 0;
    weft_tensor *g = make_contiguous_rows(grad_outputs[0]);
    weft_tensor *q = weft_node_saved(node, 0), *k = weft_node_saved(node, 1);
    weft_tensor *v = weft_node_saved(node, 2), *out = weft_node_saved(node, 3);
    const int64_t *ints = weft_node_ints(node);
    const double *sc = weft_node_scalars(node);
    weft_tensor *dq = weft_empty(q->ndim, q->shape, q->dtype, q->device);
    weft_tensor *dk = weft_empty(k->ndim, k->shape, k->dtype, k->device);
    weft_tensor *dv = weft_empty(v->ndim, v->shape, v->dtype, v->device);
    if (!g || !dq || !dk || !dv)
        return weft_error_code();
    struct weft_sdpa_kernel_params p = {
        .scale = sc[0], .dropout_p = sc[1], .is_causal = ints[0] != 0,
        .seed = (uint64_t)ints[1], .offset = (uint64_t)ints[2],
        .mask = weft_node_saved(node, 5), .out = out, .logsumexp = weft_node_saved(node, 4),
        .grad_value = dv};
    struct weft_op_call c = {.op = flash_backward_op(), .nin = 4, .nout = 2,
                             .in = {q, k, v, g}, .out = {dq, dk},
                             .params = &p, .params_size = sizeof p};
    if (weft_dispatch(&c) != 0)
        return weft_error_code();
    /* The engine sums the broadcast batch dims back to each input's shape. */
    grad_inputs[0] = dq;
    grad_inputs[1] = dk;
    grad_inputs[2] = dv;
    return 0;
}

/* The fused forward. NULL with *served false: the kernel cannot serve this call (no
 * error set; the caller takes the composite path); NULL with *served true: an error. */
static weft_tensor *sdpa_fused(weft_tensor *q, weft_tensor *k, weft_tensor *v,
                               const struct weft_sdpa_params *p, bool *served)
{
    *served = false;
    weft_tensor *mask = p->attn_mask;
    weft_tensor *in[4] = {q, k, v, mask};
    const weft_tensor *all[4] = {q, k, v, mask};
    bool rec = weft_autograd_needed(3, in);
    if (weft_check_same_device(mask ? 4 : 3, all) != 0) {
        *served = true; /* PyTorch's error, from here */
        return NULL;
    }
    if (!nn_have_kernel(flash_op(), q) || (rec && !nn_have_kernel(flash_backward_op(), q)) ||
        q->layout != WEFT_LAYOUT_STRIDED || k->layout != WEFT_LAYOUT_STRIDED ||
        v->layout != WEFT_LAYOUT_STRIDED || !(p->dropout_p < 1))
        return NULL;
    if (mask && (mask->layout != WEFT_LAYOUT_STRIDED ||
                 (mask->dtype != WEFT_BOOL && mask->dtype != q->dtype) ||
                 weft_autograd_needed(1, &mask)))
        return NULL;
    const int nq = q->ndim, nk = k->ndim, nv = v->ndim;
    const int64_t L = q->shape[nq - 2], S = k->shape[nk - 2], E = q->shape[nq - 1];
    const int64_t Ev = v->shape[nv - 1];
    if (L == 0 || S == 0 || E == 0 || Ev == 0)
        return NULL;
    /* The batch dims: q's, k's, v's and the mask's leading dims broadcast together (a
     * failure is the error the composite's matmul or add would give). */
    int nb, n2;
    int64_t batch[WEFT_MAX_DIMS], tmp[WEFT_MAX_DIMS];
    *served = true;
    if (weft_broadcast_shapes(nq - 2, q->shape, nk - 2, k->shape, &n2, tmp) != 0 ||
        weft_broadcast_shapes(n2, tmp, nv - 2, v->shape, &nb, batch) != 0)
        return NULL;
    if (mask) {
        int64_t scores[WEFT_MAX_DIMS], full[WEFT_MAX_DIMS];
        int nf;
        memcpy(scores, batch, sizeof(int64_t) * (size_t)nb);
        scores[nb] = L;
        scores[nb + 1] = S;
        if (nb + 2 > WEFT_MAX_DIMS ||
            weft_broadcast_shapes(nb + 2, scores, mask->ndim, mask->shape, &nf, full) != 0)
            return NULL;
        if (full[nf - 2] != L || full[nf - 1] != S) {
            *served = false; /* a mask that widens the scores: the composite's broadcast */
            return NULL;
        }
        nb = nf - 2;
        memcpy(batch, full, sizeof(int64_t) * (size_t)nb);
    }
    int64_t bh = 1;
    for (int d = 0; d < nb; d++)
        bh *= batch[d];
    double scale = sdpa_scale(p, E);
    bool prev = weft_no_grad_begin();
    weft_tensor *qx = kernel_view(q, nb, batch, L, E), *kx = kernel_view(k, nb, batch, S, E);
    weft_tensor *vx = kernel_view(v, nb, batch, S, Ev);
    weft_tensor *mx = mask ? kernel_view(mask, nb, batch, L, S) : NULL;
    int64_t oshape[WEFT_MAX_DIMS];
    memcpy(oshape, batch, sizeof(int64_t) * (size_t)nb);
    oshape[nb] = L;
    oshape[nb + 1] = Ev;
    weft_tensor *out = weft_empty(nb + 2, oshape, q->dtype, q->device);
    weft_tensor *lse = weft_empty(nb + 1, oshape, q->dtype == WEFT_F64 ? WEFT_F64 : WEFT_F32,
                                  q->device);
    struct weft_sdpa_kernel_params kp = {.scale = scale, .dropout_p = p->dropout_p,
                                         .is_causal = p->is_causal, .mask = mx};
    if (p->dropout_p > 0) {
        /* Reserve the blocks weft_rand would use for the [..., L, S] weights. */
        uint64_t blocks = ((uint64_t)(bh * L * S) + 3) / 4;
        kp.seed = weft_random_seed();
        kp.offset = weft_random_offset();
        weft_random_set_offset(kp.offset + blocks);
    }
    bool ok = qx && kx && vx && (!mask || mx) && out && lse;
    if (ok) {
        struct weft_op_call c = {.op = flash_op(), .nin = 3, .nout = 2, .in = {qx, kx, vx},
                                 .out = {out, lse}, .params = &kp, .params_size = sizeof kp};
        ok = weft_dispatch(&c) == 0;
    }
    weft_grad_mode_restore(prev);
    if (!ok)
        return NULL;
    if (!rec)
        return out;
    struct weft_node *node = weft_node_create("ScaledDotProductFlashAttentionBackward0",
                                              flash_backward, 3, in, 6);
    if (!node)
        return NULL;
    if (weft_node_save(node, 0, qx) != 0 || weft_node_save(node, 1, kx) != 0 ||
        weft_node_save(node, 2, vx) != 0 || weft_node_save(node, 3, out) != 0 ||
        weft_node_save(node, 4, lse) != 0 || (mx && weft_node_save(node, 5, mx) != 0)) {
        weft_node_abandon(node);
        return NULL;
    }
    int64_t *ints = weft_node_ints(node);
    double *scalars = weft_node_scalars(node);
    ints[0] = p->is_causal;
    ints[1] = (int64_t)kp.seed;
    ints[2] = (int64_t)kp.offset;
    scalars[0] = scale;
    scalars[1] = p->dropout_p;
    return weft_nn_attach(node, out);
}

/* PyTorch's sdpa messages print caffe2::TypeMeta's C++ names; weft its dtype names. */
static const char *typemeta_name(enum weft_dtype dt)
{
    return weft_dtype_meta_name(dt);
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
                              typemeta_name(q->dtype), typemeta_name(k->dtype),
                              typemeta_name(v->dtype));
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

/* sdpa with params' mask replaced (autocast's cast of it). */
static weft_tensor *sdpa_with_mask(weft_tensor *q, weft_tensor *k, weft_tensor *v,
                                   weft_tensor *mask, const struct weft_sdpa_params *params)
{
    struct weft_sdpa_params p = params ? *params : (struct weft_sdpa_params){0};
    p.attn_mask = mask;
    return weft_scaled_dot_product_attention(q, k, v, &p);
}

weft_tensor *weft_scaled_dot_product_attention(weft_tensor *q, weft_tensor *k, weft_tensor *v,
                                               const struct weft_sdpa_params *params)
{
    if (!q || !k || !v)
        return NULL;
    /* A floating mask is cast with q, k and v, so the scores keep one dtype. */
    weft_tensor *in[4] = {q, k, v, params ? params->attn_mask : NULL};
    WEFT_AUTOCAST_RETURN("scaled_dot_product_attention", 4, in,
                         sdpa_with_mask(in[0], in[1], in[2], in[3], params));
    struct weft_sdpa_params p = params ? *params : (struct weft_sdpa_params){0};
    if (check_sdpa(q, k, v, &p) != 0)
        return NULL;
    weft_scope_push();
    bool served;
    weft_tensor *out = sdpa_fused(q, k, v, &p, &served);
    if (!served)
        out = sdpa_composite(q, k, v, &p);
    weft_tensor_retain(out);
    weft_scope_pop();
    return weft_autorelease(out);
}
