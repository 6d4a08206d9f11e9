/* models/gpt_onnx.c: nanoGPT's GPT (gpt.c) as an ONNX graph of opset-17 ops, for any
 * sequence length up to block_size (idx [batch, sequence] -> logits [batch, sequence,
 * vocab]). The GPT's own forward runs its blocks through gpt.c's internals, so the whole
 * tree is written here, part by part under nanoGPT's names ("/transformer/h.0/attn/...").
 *
 * The residual stream is kept as [B*T, C] between the embeddings and the head, so every
 * Linear is one Gemm on its state_dict weight (transB = 1: no transposed copy is stored)
 * and LayerNormalization normalises the last dim. Attention is decomposed as
 * scaled_dot_product_attention(is_causal=True) is: q scaled by 1/sqrt(head_dim) (on the
 * [T, hd] side, fewer elements than the [T, T] scores), q k^T, the future masked to -inf
 * by a [T, T] Where built once from Range(T), Softmax, then @ v. The tied lm_head reads
 * the one initializer "transformer.wte.weight". Positions are Range(0, T): a T beyond
 * block_size fails in the Gather of transformer.wpe.weight, as nanoGPT's forward refuses
 * it. */
#include <math.h>
#include <stdio.h>

#include "internal.h"
#include "weft.h"
#include "weft/gpt.h"
#include "weft/onnx.h"

#define LN_EPS 1e-5f /* gpt.c's, nanoGPT's */

static const char *binary(weft_onnx_graph *g, const char *op, const char *a, const char *b)
{
    return weft_onnx_op(g, op, 2, (const char *[]){a, b});
}

/* Squeeze or Unsqueeze of one constant axis. */
static const char *axis_op(weft_onnx_graph *g, const char *op, const char *x, int64_t axis)
{
    return binary(g, op, x, weft_onnx_const_ints(g, 1, &axis));
}

/* What every block shares: the shapes and the mask, computed once per run. */
struct gpt_shapes {
    const char *bthd;   /* [-1, T, n_head, head_dim], for q, k, v */
    const char *future; /* bool [T, T]: key j is after query i */
    enum weft_dtype dtype;
    int64_t C, nh;
};

static weft_module *child(const weft_module *m, const char *name)
{
    weft_module *c = weft_module_child(m, name);
    if (!c)
        weft_error_set(WEFT_ERR_RUNTIME, "ONNX export: the GPT has no module '%s'", name);
    return c;
}

/* The bias of m's, or "" when the config has none. */
static const char *bias(weft_onnx_graph *g, const weft_module *m)
{
    return weft_module_parameter(m, "bias") ? weft_onnx_param(g, m, "bias") : "";
}

/* x [N, in] @ W^T + b of a Linear (or the tied head) as one Gemm. */
static const char *gemm(weft_onnx_graph *g, const weft_module *linear, const char *x)
{
    if (!linear)
        return NULL;
    const char *b = bias(g, linear);
    const char *in[3] = {x, weft_onnx_param(g, linear, "weight"), b};
    weft_onnx_node *n = weft_onnx_node_add(g, "Gemm", *b ? 3 : 2, in, 1);
    weft_onnx_attr_int(n, "transB", 1);
    return weft_onnx_node_output(n, 0);
}

static const char *layer_norm(weft_onnx_graph *g, const weft_module *ln, const char *x)
{
    if (!ln)
        return NULL;
    const char *b = bias(g, ln);
    const char *in[3] = {x, weft_onnx_param(g, ln, "weight"), b};
    weft_onnx_node *n = weft_onnx_node_add(g, "LayerNormalization", *b ? 3 : 2, in, 1);
    weft_onnx_attr_int(n, "axis", -1);
    weft_onnx_attr_float(n, "epsilon", LN_EPS);
    return weft_onnx_node_output(n, 0);
}

/* One of q, k, v [B*T, C] as heads [B, nh, T, hd] (perm {0, 2, 1, 3}) or, for k, as
 * [B, nh, hd, T] (perm {0, 2, 3, 1}). */
static const char *heads(weft_onnx_graph *g, const struct gpt_shapes *s, const char *part,
                         const int64_t perm[4])
{
    return weft_onnx_transpose(g, binary(g, "Reshape", part, s->bthd), 4, perm);
}

/* x [B*T, C] -> the attention branch's output [B*T, C]. */
static const char *attention(weft_onnx_graph *g, const struct gpt_shapes *s,
                             const weft_module *attn, const char *x)
{
    if (!attn)
        return NULL;
    weft_onnx_scope_push(g, "c_attn");
    const char *qkv = gemm(g, child(attn, "c_attn"), x);
    weft_onnx_scope_pop(g);
    const char *split_in[2] = {qkv, weft_onnx_const_ints(g, 3, (const int64_t[]){s->C, s->C, s->C})};
    weft_onnx_node *split = weft_onnx_node_add(g, "Split", 2, split_in, 3);
    weft_onnx_attr_int(split, "axis", 1);
    static const int64_t to_heads[4] = {0, 2, 1, 3}, to_keys[4] = {0, 2, 3, 1};
    const char *q = heads(g, s, weft_onnx_node_output(split, 0), to_heads);
    const char *kt = heads(g, s, weft_onnx_node_output(split, 1), to_keys);
    const char *v = heads(g, s, weft_onnx_node_output(split, 2), to_heads);
    const double scale = 1.0 / sqrt((double)(s->C / s->nh));
    q = binary(g, "Mul", q, weft_onnx_const_scalar(g, s->dtype, scale));
    const char *scores = binary(g, "MatMul", q, kt); /* [B, nh, T, T] */
    const char *where[3] = {s->future, weft_onnx_const_scalar(g, s->dtype, -INFINITY), scores};
    weft_onnx_node *sm = weft_onnx_node_add(g, "Softmax", 1,
                                            (const char *[]){weft_onnx_op(g, "Where", 3, where)}, 1);
    weft_onnx_attr_int(sm, "axis", -1);
    const char *y = binary(g, "MatMul", weft_onnx_node_output(sm, 0), v); /* [B, nh, T, hd] */
    y = weft_onnx_reshape(g, weft_onnx_transpose(g, y, 4, to_heads), 2, (const int64_t[]){-1, s->C});
    weft_onnx_scope_push(g, "c_proj");
    y = gemm(g, child(attn, "c_proj"), y);
    weft_onnx_scope_pop(g);
    return y;
}

static const char *mlp(weft_onnx_graph *g, const weft_module *mlp, const char *x,
                       enum weft_gelu_approximate form, enum weft_dtype dt)
{
    if (!mlp)
        return NULL;
    weft_onnx_scope_push(g, "c_fc");
    const char *h = gemm(g, child(mlp, "c_fc"), x);
    weft_onnx_scope_pop(g);
    weft_onnx_scope_push(g, "gelu");
    h = weft_onnx_gelu(g, h, form, dt);
    weft_onnx_scope_pop(g);
    weft_onnx_scope_push(g, "c_proj");
    h = gemm(g, child(mlp, "c_proj"), h);
    weft_onnx_scope_pop(g);
    return h;
}

/* A part of a block under its name: x + branch(ln(x)). */
static const char *residual(weft_onnx_graph *g, const struct gpt_shapes *s,
                            const weft_module *block, const char *x, bool attn,
                            enum weft_gelu_approximate form)
{
    const char *ln_name = attn ? "ln_1" : "ln_2", *part = attn ? "attn" : "mlp";
    weft_onnx_scope_push(g, ln_name);
    const char *h = layer_norm(g, child(block, ln_name), x);
    weft_onnx_scope_pop(g);
    weft_onnx_scope_push(g, part);
    h = attn ? attention(g, s, child(block, part), h)
             : mlp(g, child(block, part), h, form, s->dtype);
    weft_onnx_scope_pop(g);
    return binary(g, "Add", x, h);
}

const char *models_gpt_onnx_export(weft_module *m, struct weft_onnx_graph *g, const char *idx)
{
    const struct weft_gpt_config *c = weft_gpt_config_of(m);
    weft_module *t = child(m, "transformer");
    weft_module *wte = t ? child(t, "wte") : NULL, *wpe = t ? child(t, "wpe") : NULL;
    weft_module *h = t ? child(t, "h") : NULL, *head = child(m, "lm_head");
    if (!c || !wte || !wpe || !h || !head)
        return NULL;
    const weft_tensor *w = weft_module_parameter(wte, "weight");
    struct gpt_shapes s = {.dtype = w->dtype, .C = c->n_embd, .nh = c->n_head};

    /* T as a [1] vector and a scalar; positions 0..T-1; the causal mask */
    weft_onnx_node *shape = weft_onnx_node_add(g, "Shape", 1, &idx, 1);
    weft_onnx_attr_int(shape, "start", 1);
    weft_onnx_attr_int(shape, "end", 2);
    const char *t_vec = weft_onnx_node_output(shape, 0);
    const char *t_scalar = axis_op(g, "Squeeze", t_vec, 0);
    const char *range[3] = {weft_onnx_const_scalar(g, WEFT_I64, 0), t_scalar,
                            weft_onnx_const_scalar(g, WEFT_I64, 1)};
    const char *pos = weft_onnx_op(g, "Range", 3, range);
    const char *rows = axis_op(g, "Unsqueeze", pos, 1);
    const char *cols = axis_op(g, "Unsqueeze", pos, 0);
    s.future = binary(g, "Greater", cols, rows);
    const char *bthd_parts[3] = {weft_onnx_const_ints(g, 1, (const int64_t[]){-1}), t_vec,
                                 weft_onnx_const_ints(g, 2, (const int64_t[]){c->n_head,
                                                                             c->n_embd / c->n_head})};
    weft_onnx_node *bthd = weft_onnx_node_add(g, "Concat", 3, bthd_parts, 1);
    weft_onnx_attr_int(bthd, "axis", 0);
    s.bthd = weft_onnx_node_output(bthd, 0);

    /* tok_emb + pos_emb, flattened to [B*T, C] */
    weft_onnx_scope_push(g, "transformer");
    const char *tok[2] = {weft_onnx_param(g, wte, "weight"), idx};
    const char *pe[2] = {weft_onnx_param(g, wpe, "weight"), pos};
    const char *x = binary(g, "Add", weft_onnx_op(g, "Gather", 2, tok),
                                weft_onnx_op(g, "Gather", 2, pe));
    x = weft_onnx_reshape(g, x, 2, (const int64_t[]){-1, c->n_embd});
    for (int64_t l = 0; l < c->n_layer && x; l++) {
        char name[32];
        snprintf(name, sizeof name, "h.%lld", (long long)l);
        weft_module *block = child(h, name + 2); /* the ModuleList's key: "0", "1", ... */
        weft_onnx_scope_push(g, name);
        x = residual(g, &s, block, x, true, c->gelu);
        x = residual(g, &s, block, x, false, c->gelu);
        weft_onnx_scope_pop(g);
    }
    weft_onnx_scope_push(g, "ln_f");
    x = layer_norm(g, child(t, "ln_f"), x);
    weft_onnx_scope_pop(g);
    weft_onnx_scope_pop(g);

    /* the tied head, and [B*T, V] back to [B, T, V] */
    weft_onnx_scope_push(g, "lm_head");
    const char *logits = gemm(g, head, x);
    weft_onnx_scope_pop(g);
    const char *btv_parts[3] = {weft_onnx_const_ints(g, 1, (const int64_t[]){-1}), t_vec,
                                weft_onnx_const_ints(g, 1, &c->vocab_size)};
    weft_onnx_node *btv = weft_onnx_node_add(g, "Concat", 3, btv_parts, 1);
    weft_onnx_attr_int(btv, "axis", 0);
    return binary(g, "Reshape", logits, weft_onnx_node_output(btv, 0));
}
