/* nn/onnx_fold.c: BatchNorm folded into the Conv before it (options.fold_batchnorm), as
 * inference engines and torch.fx's fuse_conv_bn_eval do: y = (conv(x) - mean) * s + beta
 * with s = gamma / sqrt(var + eps) is conv(x) with weights W * s (per output channel)
 * and bias (b - mean) * s + beta, one node instead of two. Computed in float64 and
 * stored in the weights' dtype. Off by default, since the graph then no longer shows the
 * BatchNorm (torch.onnx keeps it too unless the model is fused first). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_internal.h"
#include "weft/ops.h"

/* The initializer read at input k of n, or NULL. */
static struct onnx_init *input_init(const weft_onnx_graph *g, const struct weft_onnx_node *n,
                                    int k)
{
    return k < n->n_in && *n->in[k] ? onnx_init_named(g, n->in[k]) : NULL;
}

static float attr_float(const struct weft_onnx_node *n, const char *name, float fallback)
{
    for (int a = 0; a < n->n_attr; a++)
        if (!strcmp(n->attrs[a].name, name) && n->attrs[a].type == ONNX_ATTR_FLOAT)
            return n->attrs[a].f;
    return fallback;
}

/* "<conv weight's module prefix>.onnx.<what>": "0.weight" -> "0.onnx.weight_bn_folded". */
static void folded_name(const char *weight, const char *what, char *buf, size_t size)
{
    const char *dot = strrchr(weight, '.');
    int keep = dot ? (int)(dot - weight) : 0;
    snprintf(buf, size, "%.*s%sonnx.%s", keep, weight, keep ? "." : "", what);
}

static int replace_input(struct weft_onnx_node *n, int k, const char *name)
{
    char *copy = weft_strdup(name);
    if (!copy)
        return weft_error_code();
    if (k < n->n_in) {
        free(n->in[k]);
        n->in[k] = copy;
        return 0;
    }
    char **in = realloc(n->in, (size_t)(k + 1) * sizeof *in);
    if (!in) {
        free(copy);
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "ONNX export: out of host memory");
    }
    n->in = in;
    n->in[n->n_in++] = copy;
    return 0;
}

/* Folds bn (reading conv's only output) into conv. */
static int fold(weft_onnx_graph *g, struct weft_onnx_node *conv, struct weft_onnx_node *bn)
{
    struct onnx_init *w = input_init(g, conv, 1), *b = input_init(g, conv, 2);
    struct onnx_init *gamma = input_init(g, bn, 1), *beta = input_init(g, bn, 2);
    struct onnx_init *mean = input_init(g, bn, 3), *var = input_init(g, bn, 4);
    if (!w || !gamma || !beta || !mean || !var || (conv->n_in > 2 && *conv->in[2] && !b))
        return 0; /* not all constants: left as it is */
    enum weft_dtype dt = w->t->dtype;
    double eps = attr_float(bn, "epsilon", 1e-5f);
    char wname[700], bname[700];
    folded_name(w->name, "weight_bn_folded", wname, sizeof wname);
    folded_name(w->name, "bias_bn_folded", bname, sizeof bname);
    weft_scope_push();
    weft_tensor *s = weft_div(weft_to_dtype(gamma->t, WEFT_F64),
                              weft_sqrt(weft_add_scalar(weft_to_dtype(var->t, WEFT_F64), eps)));
    int64_t shape[WEFT_MAX_DIMS] = {-1};
    for (int d = 1; d < w->t->ndim; d++)
        shape[d] = 1;
    weft_tensor *w2 = weft_mul(weft_to_dtype(w->t, WEFT_F64), weft_reshape(s, w->t->ndim, shape));
    weft_tensor *b0 = b ? weft_to_dtype(b->t, WEFT_F64) : weft_zeros_like(weft_to_dtype(mean->t, WEFT_F64));
    weft_tensor *b2 = weft_add(weft_mul(weft_sub(b0, weft_to_dtype(mean->t, WEFT_F64)), s),
                               weft_to_dtype(beta->t, WEFT_F64));
    /* the names first: add_initializer may move g->inits, and w, b point into it */
    const char *wn = onnx_add_initializer(g, wname, weft_to_dtype(w2, dt));
    const char *bn_name = wn ? onnx_add_initializer(g, bname, weft_to_dtype(b2, dt)) : NULL;
    int rc = bn_name ? 0 : weft_error_code();
    weft_scope_pop();
    if (rc == 0)
        rc = replace_input(conv, 1, wn);
    if (rc == 0)
        rc = replace_input(conv, 2, bn_name);
    if (rc != 0)
        return rc;
    /* conv now writes what the BatchNorm wrote */
    char *out = bn->out[0];
    bn->out[0] = conv->out[0];
    conv->out[0] = out;
    bn->removed = true;
    return 0;
}

int onnx_fold_batchnorm(weft_onnx_graph *g)
{
    for (size_t i = 0; i < g->n_nodes; i++) {
        struct weft_onnx_node *bn = g->nodes[i];
        if (bn->removed || strcmp(bn->op, "BatchNormalization") != 0 || bn->n_out != 1)
            continue;
        struct weft_onnx_node *conv = onnx_producer(g, bn->in[0]);
        if (!conv || strcmp(conv->op, "Conv") != 0 || onnx_readers(g, bn->in[0]) != 1 ||
            !strcmp(bn->in[0], g->output.name))
            continue;
        int rc = fold(g, conv, bn);
        if (rc != 0)
            return rc;
    }
    return 0;
}
