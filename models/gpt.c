/* models/gpt.c: nanoGPT's GPT (model.py) as a module tree with nanoGPT's names, its forward,
 * GPT-2's initialisation, the "gpt" module type an INI file names, and the KV cache that
 * makes each generated token cost O(T) instead of a full forward.
 *
 * The full forward and the cached one run the same code (block_run, attn_run): the cached
 * one passes the layer's key/value buffers and the number of positions already in them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "weft.h"
#include "weft/init.h"
#include "weft/nn.h"
#include "weft/models.h"
#include "weft/checked.h"
#include "weft/ops.h"

#define LN_EPS 1e-5 /* nanoGPT's F.layer_norm(..., 1e-5) */

/* ---- the module types -------------------------------------------------------------- */

/* Borrowed pointers into the tree (the tree owns the modules). */
struct attn_state {
    weft_module *c_attn, *c_proj;
    int64_t n_head, n_embd;
    double dropout;
};

struct mlp_state {
    weft_module *c_fc, *c_proj;
    enum weft_gelu_approximate gelu;
    double dropout;
};

struct block_state {
    weft_module *ln_1, *attn, *ln_2, *mlp;
};

struct gpt_state {
    struct weft_gpt_config config;
    weft_module *wte, *wpe, *ln_f, *lm_head;
    weft_module **blocks; /* [n_layer] */
};

static void gpt_free_state(void *p)
{
    struct gpt_state *s = p;
    free(s->blocks);
    free(s);
}

static weft_tensor *attn_forward(weft_module *m, weft_tensor *x);
static weft_tensor *mlp_forward(weft_module *m, weft_tensor *x);
static weft_tensor *block_forward(weft_module *m, weft_tensor *x);
static weft_tensor *gpt_forward(weft_module *m, weft_tensor *idx);
static weft_tensor *layer_norm_forward(weft_module *m, weft_tensor *x);
static weft_tensor *tied_linear_forward(weft_module *m, weft_tensor *x);
static weft_tensor *container_forward(weft_module *m, weft_tensor *x);
static int tied_linear_repr(const weft_module *m, char *buf, size_t size);
static int gpt_config_export(const weft_module *m, struct weft_metadata *meta);
static weft_module *gpt_create(const weft_options *o);

#define GPT_TYPE(ini, class, forward_fn, ...)                                                   \
    {.base = WEFT_VTABLE(WEFT_KIND_MODULE, ini, struct weft_module_type), .class_name = class, \
     .forward = forward_fn, .free_state = free, __VA_ARGS__}

/* Only "gpt" is registered; the parts are unregistered types with nanoGPT's class names. */
static const struct weft_module_type gpt_type = {
    .base = WEFT_VTABLE(WEFT_KIND_MODULE, "gpt", struct weft_module_type),
    .class_name = "GPT",
    .forward = gpt_forward,
    .free_state = gpt_free_state,
    .create = gpt_create,
    .config_export = gpt_config_export,
    .onnx_export = models_gpt_onnx_export, /* gpt_onnx.c */
};
static const struct weft_module_type module_dict_type =
    GPT_TYPE("gpt_module_dict", "ModuleDict", container_forward);
static const struct weft_module_type module_list_type =
    GPT_TYPE("gpt_module_list", "ModuleList", container_forward);
static const struct weft_module_type block_type = GPT_TYPE("gpt_block", "Block", block_forward);
static const struct weft_module_type attn_type =
    GPT_TYPE("gpt_attention", "CausalSelfAttention", attn_forward);
static const struct weft_module_type mlp_type = GPT_TYPE("gpt_mlp", "MLP", mlp_forward);
/* nanoGPT's own LayerNorm: weight, and bias only when config.bias (PyTorch 1.13's has no
 * bias=False). */
static const struct weft_module_type layer_norm_type =
    GPT_TYPE("gpt_layer_norm", "LayerNorm", layer_norm_forward);
/* lm_head: a Linear without bias whose weight is registered from wte (the tie). */
static const struct weft_module_type tied_linear_type =
    GPT_TYPE("gpt_tied_linear", "Linear", tied_linear_forward, .extra_repr = tied_linear_repr);

/* A module of type owning a malloc'd copy of state. */
static weft_module *new_module(const struct weft_module_type *type, const void *state,
                               size_t size)
{
    void *copy = malloc(size ? size : 1);
    if (!copy) {
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory for a %s", type->class_name);
        return NULL;
    }
    if (size)
        memcpy(copy, state, size);
    weft_module *m = weft_module_new(type, copy);
    if (!m)
        free(copy);
    return m;
}

/* ModuleDict and ModuleList hold children; calling them is PyTorch's error. */
static weft_tensor *container_forward(weft_module *m, weft_tensor *x)
{
    (void)x;
    weft_error_set(WEFT_ERR_NOT_IMPLEMENTED,
                   "Module [%s] is missing the required \"forward\" function",
                   weft_module_type_name(m));
    return NULL;
}

/* ---- the layers' computations ------------------------------------------------------ */

static weft_tensor *layer_norm_forward(weft_module *m, weft_tensor *x)
{
    const int64_t *ndim = weft_module_state(m);
    return weft_layer_norm(x, 1, ndim, weft_module_parameter(m, "weight"),
                           weft_module_parameter(m, "bias"), LN_EPS);
}

static weft_tensor *tied_linear_forward(weft_module *m, weft_tensor *x)
{
    return weft_linear(x, weft_module_parameter(m, "weight"), NULL);
}

static int tied_linear_repr(const weft_module *m, char *buf, size_t size)
{
    const weft_tensor *w = weft_module_parameter(m, "weight");
    return snprintf(buf, size, "in_features=%lld, out_features=%lld, bias=False",
                    (long long)w->shape[1], (long long)w->shape[0]);
}

/* One layer's cache: k and v [B, nh, max_len, hd]. */
struct kv {
    weft_tensor *k, *v;
};

/* [T, S] bool, true where query i (at position past + i) may see key j: j <= past + i. The
 * bottom-right-aligned causal mask; is_causal's is top-left aligned (PyTorch's
 * tril(ones(L, S))), right only when past is 0. */
static weft_tensor *causal_mask_after(int64_t T, int64_t past, weft_device dev)
{
    const int64_t col[2] = {T, 1}, row[2] = {1, past + T};
    weft_tensor *i = weft_reshape(weft_arange((double)past, (double)(past + T), 1, WEFT_I64, dev),
                                  2, col);
    weft_tensor *j = weft_reshape(weft_arange(0, (double)(past + T), 1, WEFT_I64, dev), 2, row);
    return weft_le(j, i);
}

/* A [B, T, C] part of qkv as heads [B, nh, T, hd] (a view). */
static weft_tensor *heads(weft_tensor *part, int64_t nh)
{
    if (!part)
        return NULL;
    const int64_t B = part->shape[0], T = part->shape[1], C = part->shape[2];
    const int64_t shape[4] = {B, T, nh, C / nh};
    return weft_transpose(weft_reshape(part, 4, shape), 1, 2);
}

/* The backward of split_qkv: the three head gradients [B, nh, T, hd] written straight
 * into their places in one [B, T, 3C] gradient (zeros for one that got none). The
 * split's and the views' own backwards would first make each head gradient a contiguous
 * [B, T, C] (a layout copy each: heads' dims are not [B, T, C]'s) and then join the
 * three in a cat: two passes over [B, T, 3C] where this is one. (Three narrow()s,
 * before the cat, made ten: each a zero [B, T, 3C] gradient with its part copied in,
 * the engine then adding the three; 2.4% of a step in zero fills alone.) */
static int split_qkv_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                              weft_tensor **grad_inputs)
{
    if (!weft_node_needs_input_grad(node, 0))
        return 0;
    const int64_t *shape = weft_node_input_shape(node, 0), C = shape[2] / 3;
    weft_tensor *any = grad_outputs[0] ? grad_outputs[0] : grad_outputs[1] ? grad_outputs[1] : grad_outputs[2];
    if (!any)
        return 0;
    weft_tensor *g = weft_empty(3, shape, weft_tensor_dtype(any), weft_tensor_device(any));
    if (!g)
        return weft_error_code();
    for (int j = 0; j < 3; j++) {
        weft_tensor *dst = heads(weft_narrow(g, 2, j * C, C), any->shape[1]);
        if (!dst || (grad_outputs[j] ? weft_copy_(dst, grad_outputs[j]) != 0 : !weft_fill_(dst, 0)))
            return weft_error_code();
    }
    grad_inputs[0] = g;
    return 0;
}

/* q, k, v: qkv [B, T, 3C] split in three [B, T, C] parts along dim 2 and each viewed as
 * heads [B, nh, T, hd], as nanoGPT's qkv.split(C, dim=2) and .view(B, T, nh,
 * hd).transpose(1, 2), recorded as one SplitBackward0 node for the three. */
static int split_qkv(weft_tensor *qkv, int64_t C, int64_t nh, weft_tensor *out[3])
{
    bool record = weft_autograd_needed(1, &qkv);
    bool prev = weft_no_grad_begin();
    for (int j = 0; j < 3; j++)
        out[j] = heads(weft_narrow(qkv, 2, j * C, C), nh);
    weft_grad_mode_restore(prev);
    if (!out[0] || !out[1] || !out[2])
        return weft_error_code();
    if (!record)
        return 0;
    struct weft_node *node = weft_node_create("SplitBackward0", split_qkv_backward, 1, &qkv, 0);
    return node ? weft_node_finish(node, 3, out) : weft_error_code();
}

/* x [B, T, C] -> attention output [B, T, C]. kv NULL: the full causal forward. Else the
 * new keys and values go to positions [past, past + T) of kv, and the queries attend to
 * all past + T of them. Call inside a scope. */
static weft_tensor *attn_run(const struct attn_state *s, weft_tensor *x, const struct kv *kv,
                             int64_t past, bool training)
{
    if (!x) /* an op upstream failed and said why */
        return NULL;
    const int64_t B = x->shape[0], T = x->shape[1], C = s->n_embd, nh = s->n_head;
    weft_tensor *qkv = weft_module_forward(s->c_attn, x); /* [B, T, 3C] */
    if (!qkv)
        return NULL;
    weft_tensor *qkvh[3];
    if (split_qkv(qkv, C, nh, qkvh) != 0)
        return NULL;
    weft_tensor *q = qkvh[0], *k = qkvh[1], *v = qkvh[2];
    struct weft_sdpa_params p = {.is_causal = true, .dropout_p = training ? s->dropout : 0.0};
    if (kv) {
        if (weft_copy_(weft_narrow(kv->k, 2, past, T), k) != 0 ||
            weft_copy_(weft_narrow(kv->v, 2, past, T), v) != 0)
            return NULL;
        k = weft_narrow(kv->k, 2, 0, past + T); /* [B, nh, past + T, hd] */
        v = weft_narrow(kv->v, 2, 0, past + T);
        p.dropout_p = 0.0;
        if (past > 0) {
            p.is_causal = false; /* one new query sees every key; more need the mask */
            p.attn_mask = T > 1 ? causal_mask_after(T, past, x->device) : NULL;
            if (T > 1 && !p.attn_mask)
                return NULL;
        }
    }
    weft_tensor *y = weft_scaled_dot_product_attention(q, k, v, &p); /* [B, nh, T, hd] */
    const int64_t shape[3] = {B, T, C};
    y = weft_reshape(weft_transpose(y, 1, 2), 3, shape);
    return weft_dropout(weft_module_forward(s->c_proj, y), s->dropout, training);
}

/* c_proj(gelu(c_fc(x))), the bias and GELU fused into c_fc's GEMM (weft_linear_gelu). A
 * c_fc swapped for a Linear of another kind (an int8 one, weft/quant.h) runs its own
 * forward. */
static weft_tensor *mlp_run(const struct mlp_state *s, weft_tensor *x, bool training)
{
    weft_tensor *w = weft_module_parameter(s->c_fc, "weight");
    weft_tensor *h = w ? weft_linear_gelu(x, w, weft_module_parameter(s->c_fc, "bias"), s->gelu)
                       : weft_gelu_approximate(weft_module_forward(s->c_fc, x), s->gelu);
    return weft_dropout(weft_module_forward(s->c_proj, h), s->dropout, training);
}

/* x + attn(ln_1(x)), then + mlp(ln_2(x)): nanoGPT's pre-LayerNorm block. */
static weft_tensor *block_run(const struct block_state *s, weft_tensor *x, const struct kv *kv,
                              int64_t past, bool training)
{
    x = weft_add(x, attn_run(weft_module_state(s->attn), weft_module_forward(s->ln_1, x), kv, past,
                             training));
    return weft_add(x, mlp_run(weft_module_state(s->mlp), weft_module_forward(s->ln_2, x),
                               training));
}

/* A function of a scope's tensors as a new reference in the caller's scope. */
static weft_tensor *escape_scope(weft_tensor *out)
{
    weft_tensor_retain(out);
    weft_scope_pop();
    return weft_autorelease(out);
}

/* Blocks and attention take x [B, T, C]. */
static int check_btc(const weft_module *m, const weft_tensor *x)
{
    char shape[160];
    if (x->ndim == 3)
        return 0;
    return weft_error_set(WEFT_ERR_RUNTIME, "%s: expected x of shape [B, T, C], got %s",
                          weft_module_type_name(m),
                          weft_shape_str(x->ndim, x->shape, shape, sizeof shape));
}

/* block_run in a scope of its own: what backward does not need (the projections' outputs
 * before the residual adds, 2 x [B, T, C] a layer) dies with the block instead of living
 * to the end of the model's forward, where the step's memory peaks. */
static weft_tensor *block_in_scope(const struct block_state *s, weft_tensor *x,
                                   const struct kv *kv, int64_t past, bool training)
{
    weft_scope_push();
    return escape_scope(block_run(s, x, kv, past, training));
}

static weft_tensor *attn_forward(weft_module *m, weft_tensor *x)
{
    if (check_btc(m, x) != 0)
        return NULL;
    weft_scope_push();
    return escape_scope(attn_run(weft_module_state(m), x, NULL, 0, weft_module_is_training(m)));
}

static weft_tensor *mlp_forward(weft_module *m, weft_tensor *x)
{
    weft_scope_push();
    return escape_scope(mlp_run(weft_module_state(m), x, weft_module_is_training(m)));
}

static weft_tensor *block_forward(weft_module *m, weft_tensor *x)
{
    if (check_btc(m, x) != 0)
        return NULL;
    return block_in_scope(weft_module_state(m), x, NULL, 0, weft_module_is_training(m));
}

/* idx must be int64 [B, T] with 1 <= T <= limit. */
static int check_idx(const weft_tensor *idx, int64_t limit, const char *limit_text)
{
    char shape[160];
    if (idx->ndim != 2 || idx->dtype != WEFT_I64)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "GPT: expected idx of shape [B, T] and dtype int64, got %s of "
                              "dtype %s",
                              weft_shape_str(idx->ndim, idx->shape, shape, sizeof shape),
                              weft_dtype_name(idx->dtype));
    if (idx->shape[1] > limit)
        return weft_error_set(WEFT_ERR_VALUE, "Cannot forward sequence of length %lld, %s %lld",
                              (long long)idx->shape[1], limit_text, (long long)limit);
    return 0;
}

/* tok_emb [B, T, C] + pos_emb [T, C] for the positions [past, past + T). */
static weft_tensor *embed(const struct gpt_state *s, weft_tensor *idx, int64_t past)
{
    const int64_t T = idx->shape[1];
    weft_tensor *pos = weft_arange((double)past, (double)(past + T), 1, WEFT_I64, idx->device);
    return weft_add(weft_module_forward(s->wte, idx), weft_module_forward(s->wpe, pos));
}

/* A block as weft_checkpoint's function: ctx is the block's module, which outlives the
 * backward that may rerun it. */
static weft_tensor *block_checkpointed(void *ctx, int n, weft_tensor *const *x)
{
    (void)n;
    weft_module *block = ctx;
    return block_run(weft_module_state(block), x[0], NULL, 0, weft_module_is_training(block));
}

static weft_tensor *gpt_forward(weft_module *m, weft_tensor *idx)
{
    const struct gpt_state *s = weft_module_state(m);
    if (check_idx(idx, s->config.block_size, "block size is only") != 0)
        return NULL;
    bool training = weft_module_is_training(m);
    weft_scope_push();
    weft_tensor *x = weft_dropout(embed(s, idx, 0), s->config.dropout, training);
    /* each block through its module's forward (what forward hooks, a summary, see), or
     * through an activation checkpoint */
    for (int64_t l = 0; l < s->config.n_layer && x; l++)
        x = s->config.checkpoint ? weft_checkpoint(block_checkpointed, s->blocks[l], 1, &x)
                                 : weft_module_forward(s->blocks[l], x);
    x = weft_module_forward(s->ln_f, x);
    return escape_scope(weft_module_forward(s->lm_head, x)); /* [B, T, vocab] */
}

weft_tensor *weft_gpt_loss(weft_tensor *logits, weft_tensor *targets)
{
    if (!logits || !targets)
        return NULL;
    if (logits->ndim < 1) {
        weft_error_set(WEFT_ERR_RUNTIME, "weft_gpt_loss: expected logits [B, T, V], got 0-dim");
        return NULL;
    }
    struct weft_cross_entropy_params p = weft_cross_entropy_defaults();
    p.ignore_index = -1; /* nanoGPT's */
    const int64_t flat[2] = {-1, logits->shape[logits->ndim - 1]}, all = -1;
    weft_scope_push();
    return escape_scope(
        weft_cross_entropy(weft_reshape(logits, 2, flat), weft_reshape(targets, 1, &all), &p));
}

/* ---- building --------------------------------------------------------------------- */

/* GPT-2's Linear: weight normal(0, std), bias zero. */
static weft_module *make_linear(int64_t in, int64_t out, bool bias, double std)
{
    weft_module *m = weft_nn_linear(in, out, bias);
    if (!m)
        return NULL;
    int rc = weft_nn_init_normal_(weft_module_parameter(m, "weight"), 0.0, std);
    weft_tensor *b = weft_module_parameter(m, "bias");
    if (rc == 0 && b)
        rc = weft_nn_init_zeros_(b);
    if (rc != 0) {
        weft_module_free(m);
        return NULL;
    }
    return m;
}

static weft_module *make_embedding(int64_t num, int64_t dim)
{
    weft_module *m = weft_nn_embedding(num, dim);
    if (m && weft_nn_init_normal_(weft_module_parameter(m, "weight"), 0.0, 0.02) != 0) {
        weft_module_free(m);
        return NULL;
    }
    return m;
}

static weft_module *make_layer_norm(int64_t ndim, bool bias)
{
    weft_module *m = new_module(&layer_norm_type, &ndim, sizeof ndim);
    if (!m)
        return NULL;
    weft_scope_push();
    int rc = weft_module_register_parameter(m, "weight", weft_ones(1, &ndim, WEFT_F32, WEFT_CPU));
    if (rc == 0 && bias)
        rc = weft_module_register_parameter(m, "bias", weft_zeros(1, &ndim, WEFT_F32, WEFT_CPU));
    weft_scope_pop();
    if (rc != 0) {
        weft_module_free(m);
        return NULL;
    }
    return m;
}

/* Adds child under name; 0 or negative (child is freed on failure, as add_child does). */
static int add(weft_module *m, const char *name, weft_module *child)
{
    if (!child)
        return weft_error_code() ? weft_error_code() : WEFT_ERR_RUNTIME;
    return weft_module_add_child(m, name, child);
}

static weft_module *make_attention(const struct weft_gpt_config *c)
{
    const double proj_std = 0.02 / sqrt(2.0 * (double)c->n_layer);
    struct attn_state s = {.n_head = c->n_head, .n_embd = c->n_embd, .dropout = c->dropout};
    weft_module *m = new_module(&attn_type, &s, sizeof s);
    if (!m)
        return NULL;
    int rc = add(m, "c_attn", make_linear(c->n_embd, 3 * c->n_embd, c->bias, 0.02));
    if (rc == 0)
        rc = add(m, "c_proj", make_linear(c->n_embd, c->n_embd, c->bias, proj_std));
    if (rc == 0)
        rc = add(m, "attn_dropout", weft_nn_dropout(c->dropout));
    if (rc == 0)
        rc = add(m, "resid_dropout", weft_nn_dropout(c->dropout));
    if (rc != 0) {
        weft_module_free(m);
        return NULL;
    }
    struct attn_state *st = weft_module_state(m);
    st->c_attn = weft_module_child(m, "c_attn");
    st->c_proj = weft_module_child(m, "c_proj");
    return m;
}

static weft_module *make_mlp(const struct weft_gpt_config *c)
{
    const double proj_std = 0.02 / sqrt(2.0 * (double)c->n_layer);
    struct mlp_state s = {.gelu = c->gelu, .dropout = c->dropout};
    weft_module *m = new_module(&mlp_type, &s, sizeof s);
    if (!m)
        return NULL;
    int rc = add(m, "c_fc", make_linear(c->n_embd, 4 * c->n_embd, c->bias, 0.02));
    if (rc == 0)
        rc = add(m, "gelu", weft_nn_gelu_approximate(c->gelu));
    if (rc == 0)
        rc = add(m, "c_proj", make_linear(4 * c->n_embd, c->n_embd, c->bias, proj_std));
    if (rc == 0)
        rc = add(m, "dropout", weft_nn_dropout(c->dropout));
    if (rc != 0) {
        weft_module_free(m);
        return NULL;
    }
    struct mlp_state *st = weft_module_state(m);
    st->c_fc = weft_module_child(m, "c_fc");
    st->c_proj = weft_module_child(m, "c_proj");
    return m;
}

static weft_module *make_block(const struct weft_gpt_config *c)
{
    struct block_state s = {0};
    weft_module *m = new_module(&block_type, &s, sizeof s);
    if (!m)
        return NULL;
    int rc = add(m, "ln_1", make_layer_norm(c->n_embd, c->bias));
    if (rc == 0)
        rc = add(m, "attn", make_attention(c));
    if (rc == 0)
        rc = add(m, "ln_2", make_layer_norm(c->n_embd, c->bias));
    if (rc == 0)
        rc = add(m, "mlp", make_mlp(c));
    if (rc != 0) {
        weft_module_free(m);
        return NULL;
    }
    struct block_state *st = weft_module_state(m);
    *st = (struct block_state){weft_module_child(m, "ln_1"), weft_module_child(m, "attn"),
                               weft_module_child(m, "ln_2"), weft_module_child(m, "mlp")};
    return m;
}

/* transformer = ModuleDict(wte, wpe, drop, h = ModuleList(Block...), ln_f), as nanoGPT. */
static weft_module *make_transformer(const struct weft_gpt_config *c)
{
    weft_module *t = new_module(&module_dict_type, NULL, 0);
    if (!t)
        return NULL;
    int rc = add(t, "wte", make_embedding(c->vocab_size, c->n_embd));
    if (rc == 0)
        rc = add(t, "wpe", make_embedding(c->block_size, c->n_embd));
    if (rc == 0)
        rc = add(t, "drop", weft_nn_dropout(c->dropout));
    weft_module *h = rc == 0 ? new_module(&module_list_type, NULL, 0) : NULL;
    if (rc == 0)
        rc = add(t, "h", h);
    for (int64_t l = 0; l < c->n_layer && rc == 0; l++) {
        char name[24];
        snprintf(name, sizeof name, "%lld", (long long)l);
        rc = add(h, name, make_block(c));
    }
    if (rc == 0)
        rc = add(t, "ln_f", make_layer_norm(c->n_embd, c->bias));
    if (rc != 0) {
        weft_module_free(t);
        return NULL;
    }
    return t;
}

struct weft_gpt_config weft_gpt_config_default(void)
{
    return (struct weft_gpt_config){.n_layer = 12, .n_head = 12, .n_embd = 768,
                                    .block_size = 1024, .vocab_size = 50304, .dropout = 0.0,
                                    .bias = true, .gelu = WEFT_GELU_NONE};
}

/* The field that is wrong, in the words of its key. */
static int check_config(const struct weft_gpt_config *c)
{
    const struct {
        const char *key;
        int64_t value;
    } sizes[] = {{"n_layer", c->n_layer}, {"n_head", c->n_head}, {"n_embd", c->n_embd},
                 {"block_size", c->block_size}, {"vocab_size", c->vocab_size}};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        if (sizes[i].value <= 0)
            return weft_error_set(WEFT_ERR_VALUE, "GPT: %s must be a positive integer, got %lld",
                                  sizes[i].key, (long long)sizes[i].value);
    int64_t wide; /* the MLP's hidden width, 4 x n_embd, is a size too */
    if (!weft_size_mul(c->n_embd, 4, WEFT_SIZE_MAX, &wide))
        return weft_error_set(WEFT_ERR_VALUE, "GPT: n_embd = %lld: expected a width below 2^61 "
                                              "(4 x n_embd is the MLP's)",
                              (long long)c->n_embd);
    if (c->n_embd % c->n_head != 0)
        return weft_error_set(WEFT_ERR_VALUE,
                              "GPT: n_embd (%lld) must be divisible by n_head (%lld)",
                              (long long)c->n_embd, (long long)c->n_head);
    if (!(c->dropout >= 0.0 && c->dropout < 1.0))
        return weft_error_set(WEFT_ERR_VALUE, "GPT: dropout must be in [0, 1), got %g",
                              c->dropout);
    if (c->gelu != WEFT_GELU_NONE && c->gelu != WEFT_GELU_TANH)
        return weft_error_set(WEFT_ERR_VALUE, "GPT: gelu must be none or tanh");
    return 0;
}

weft_module *weft_gpt_new(const struct weft_gpt_config *config)
{
    if (!config) {
        weft_error_set(WEFT_ERR_VALUE, "weft_gpt_new: config is NULL");
        return NULL;
    }
    if (check_config(config) != 0)
        return NULL;
    struct gpt_state *s = calloc(1, sizeof *s);
    weft_module **blocks = calloc((size_t)config->n_layer, sizeof *blocks);
    weft_module *m = s && blocks ? weft_module_new(&gpt_type, s) : NULL;
    if (!m) {
        if (!s || !blocks)
            weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory for a GPT");
        free(s);
        free(blocks);
        return NULL;
    }
    s->config = *config;
    s->blocks = blocks;
    int rc = add(m, "transformer", make_transformer(config));
    weft_module *t = weft_module_child(m, "transformer");
    weft_module *head = rc == 0 ? new_module(&tied_linear_type, NULL, 0) : NULL;
    if (rc == 0)
        rc = add(m, "lm_head", head);
    if (rc == 0) /* the tie: lm_head.weight IS transformer.wte.weight */
        rc = weft_module_register_parameter(
            head, "weight", weft_module_parameter(weft_module_child(t, "wte"), "weight"));
    if (rc != 0) {
        weft_module_free(m);
        return NULL;
    }
    s->wte = weft_module_child(t, "wte");
    s->wpe = weft_module_child(t, "wpe");
    s->ln_f = weft_module_child(t, "ln_f");
    s->lm_head = head;
    weft_module *h = weft_module_child(t, "h");
    for (int64_t l = 0; l < config->n_layer; l++) {
        char name[24];
        snprintf(name, sizeof name, "%lld", (long long)l);
        s->blocks[l] = weft_module_child(h, name);
    }
    return m;
}

const struct weft_gpt_config *weft_gpt_config_of(const weft_module *m)
{
    if (weft_module_type(m) != &gpt_type)
        return NULL;
    return &((const struct gpt_state *)weft_module_state(m))->config;
}

/* ---- from options and back --------------------------------------------------------- */

static const char *const gelu_names[] = {"none", "tanh", NULL};

static weft_module *gpt_create(const weft_options *o)
{
    struct weft_gpt_config c = weft_gpt_config_default();
    int gelu = 0;
    if (weft_options_positive(o, "n_layer", c.n_layer, &c.n_layer) ||
        weft_options_positive(o, "n_head", c.n_head, &c.n_head) ||
        weft_options_positive(o, "n_embd", c.n_embd, &c.n_embd) ||
        weft_options_positive(o, "block_size", c.block_size, &c.block_size) ||
        weft_options_positive(o, "vocab_size", c.vocab_size, &c.vocab_size) ||
        weft_options_double(o, "dropout", c.dropout, &c.dropout) ||
        weft_options_bool(o, "bias", c.bias, &c.bias) ||
        weft_options_bool(o, "checkpoint", c.checkpoint, &c.checkpoint) ||
        weft_options_choice(o, "gelu", gelu_names, 0, &gelu))
        return NULL;
    c.gelu = gelu == 1 ? WEFT_GELU_TANH : WEFT_GELU_NONE;
    if (c.n_embd % c.n_head != 0) {
        weft_options_bad_value(o, "n_head", "n_embd (%lld) must be divisible by n_head (%lld)",
                               (long long)c.n_embd, (long long)c.n_head);
        return NULL;
    }
    if (!(c.dropout >= 0.0 && c.dropout < 1.0)) {
        weft_options_bad_value(o, "dropout", "expected a probability in [0, 1)");
        return NULL;
    }
    return weft_gpt_new(&c);
}

static int gpt_config_export(const weft_module *m, struct weft_metadata *meta)
{
    const struct weft_gpt_config *c = weft_gpt_config_of(m);
    char dropout[40];
    snprintf(dropout, sizeof dropout, "%.17g", c->dropout);
    int rc = weft_metadata_set_int(meta, "model.n_layer", c->n_layer);
    if (rc == 0)
        rc = weft_metadata_set_int(meta, "model.n_head", c->n_head);
    if (rc == 0)
        rc = weft_metadata_set_int(meta, "model.n_embd", c->n_embd);
    if (rc == 0)
        rc = weft_metadata_set_int(meta, "model.block_size", c->block_size);
    if (rc == 0)
        rc = weft_metadata_set_int(meta, "model.vocab_size", c->vocab_size);
    if (rc == 0)
        rc = weft_metadata_set(meta, "model.dropout", dropout);
    if (rc == 0)
        rc = weft_metadata_set(meta, "model.bias", c->bias ? "true" : "false");
    if (rc == 0)
        rc = weft_metadata_set(meta, "model.gelu", gelu_names[c->gelu == WEFT_GELU_TANH]);
    return rc;
}

/* ---- the KV cache ----------------------------------------------------------------- */

struct weft_gpt_cache {
    const weft_module *model;
    int64_t batch, max_len, len;
    int64_t n_layer;
    struct kv layers[]; /* [n_layer] */
};

weft_gpt_cache *weft_gpt_cache_new(const weft_module *gpt, int64_t batch, int64_t max_len)
{
    const struct weft_gpt_config *c = weft_gpt_config_of(gpt);
    if (!c) {
        weft_error_set(WEFT_ERR_VALUE, "weft_gpt_cache_new: the module is a %s, not a GPT",
                       gpt ? weft_module_type_name(gpt) : "NULL");
        return NULL;
    }
    if (batch <= 0 || max_len <= 0 || max_len > c->block_size) {
        weft_error_set(WEFT_ERR_VALUE,
                       "weft_gpt_cache_new: expected batch >= 1 and 1 <= max_len <= block_size "
                       "(%lld), got batch %lld and max_len %lld",
                       (long long)c->block_size, (long long)batch, (long long)max_len);
        return NULL;
    }
    weft_gpt_cache *cache = calloc(1, sizeof *cache + (size_t)c->n_layer * sizeof(struct kv));
    if (!cache) {
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory for a KV cache");
        return NULL;
    }
    *cache = (weft_gpt_cache){.model = gpt, .batch = batch, .max_len = max_len,
                              .n_layer = c->n_layer};
    /* The model's device and dtype, whatever weft_module_to made them: the final
     * LayerNorm's gain, a float parameter whatever the Linears and embeddings became. */
    const weft_tensor *w = weft_module_parameter(((const struct gpt_state *)weft_module_state(gpt))->ln_f,
                                                 "weight");
    const int64_t shape[4] = {batch, c->n_head, max_len, c->n_embd / c->n_head};
    weft_scope_push();
    int rc = 0;
    for (int64_t l = 0; l < c->n_layer && rc == 0; l++) {
        struct kv *kv = &cache->layers[l];
        kv->k = weft_tensor_retain(weft_zeros(4, shape, w->dtype, w->device));
        kv->v = weft_tensor_retain(weft_zeros(4, shape, w->dtype, w->device));
        rc = kv->k && kv->v ? 0 : weft_error_code();
    }
    weft_scope_pop();
    if (rc != 0) {
        weft_gpt_cache_free(cache);
        return NULL;
    }
    return cache;
}

void weft_gpt_cache_free(weft_gpt_cache *cache)
{
    if (!cache)
        return;
    for (int64_t l = 0; l < cache->n_layer; l++) {
        weft_tensor_release(cache->layers[l].k);
        weft_tensor_release(cache->layers[l].v);
    }
    free(cache);
}

int64_t weft_gpt_cache_len(const weft_gpt_cache *cache)
{
    return cache ? cache->len : 0;
}

int64_t weft_gpt_cache_capacity(const weft_gpt_cache *cache)
{
    return cache ? cache->max_len : 0;
}

void weft_gpt_cache_reset(weft_gpt_cache *cache)
{
    if (cache)
        cache->len = 0;
}

weft_tensor *weft_gpt_forward_cached(weft_module *gpt, weft_gpt_cache *cache, weft_tensor *idx)
{
    if (!gpt || !cache || !idx)
        return NULL;
    if (cache->model != gpt) {
        weft_error_set(WEFT_ERR_VALUE, "weft_gpt_forward_cached: the cache belongs to another model");
        return NULL;
    }
    const struct gpt_state *s = weft_module_state(gpt);
    if (check_idx(idx, cache->max_len - cache->len, "the KV cache has room only for") != 0)
        return NULL;
    if (idx->shape[0] != cache->batch) {
        weft_error_set(WEFT_ERR_VALUE,
                       "weft_gpt_forward_cached: idx has batch size %lld, the cache %lld",
                       (long long)idx->shape[0], (long long)cache->batch);
        return NULL;
    }
    const int64_t past = cache->len;
    bool prev = weft_no_grad_begin();
    weft_scope_push();
    weft_tensor *x = embed(s, idx, past);
    for (int64_t l = 0; l < s->config.n_layer; l++)
        x = block_in_scope(weft_module_state(s->blocks[l]), x, &cache->layers[l], past, false);
    weft_tensor *logits = escape_scope(weft_module_forward(s->lm_head,
                                                           weft_module_forward(s->ln_f, x)));
    weft_grad_mode_restore(prev);
    if (logits)
        cache->len = past + idx->shape[1];
    return logits;
}

int weft_models_register(void)
{
    return weft_register(&gpt_type) < 0 ? weft_error_code() : 0;
}

/* Registered when libweft-models loads too: libweft-nn, which it links, has registered
 * the module kind by then (its constructors run first). */
__attribute__((constructor)) static void register_gpt(void)
{
    weft_models_register();
}
