/* nn/onnx_graph.c: the ONNX graph builder of weft/onnx.h: nodes with unique torch-style
 * names ("/0/Gemm", "/0/Gemm_output_0"), attributes, initializers found by the tensor
 * they hold, Constant nodes, graph inputs, and the example tensors that tell exporters
 * the shapes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_internal.h"
#include "weft/ops.h"

/* ---- the graph ---------------------------------------------------------------------- */

weft_onnx_graph *onnx_graph_new(weft_module *root, const struct weft_onnx_options *o)
{
    weft_onnx_graph *g = calloc(1, sizeof *g);
    if (!g) {
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "ONNX export: out of host memory");
        return NULL;
    }
    g->o = *o;
    g->root = root;
    struct weft_named_tensor *params = NULL, *buffers = NULL;
    int np = weft_module_named_parameters(root, &params);
    int nb = np >= 0 ? weft_module_named_buffers(root, &buffers) : -1;
    if (np < 0 || nb < 0) {
        free(params);
        free(buffers);
        free(g);
        return NULL;
    }
    g->named = realloc(params, (size_t)(np + nb + 1) * sizeof *params);
    if (!g->named) {
        free(params);
        free(buffers);
        free(g);
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "ONNX export: out of host memory");
        return NULL;
    }
    if (nb > 0)
        memcpy(g->named + np, buffers, (size_t)nb * sizeof *buffers);
    free(buffers);
    g->n_named = np + nb;
    return g;
}

static void free_io(struct onnx_io *io)
{
    free(io->name);
    for (int d = 0; d < WEFT_MAX_DIMS; d++)
        free(io->params[d]);
}

static void free_node(struct weft_onnx_node *n)
{
    if (!n)
        return;
    for (int i = 0; i < n->n_in; i++)
        free(n->in[i]);
    for (int i = 0; i < n->n_out; i++)
        free(n->out[i]);
    for (int a = 0; a < n->n_attr; a++) {
        struct onnx_attr *at = &n->attrs[a];
        free(at->name);
        free(at->s);
        free(at->ints);
        for (int k = 0; at->strings && k < at->n; k++)
            free(at->strings[k]);
        free(at->strings);
        weft_tensor_release(at->t);
    }
    free(n->in);
    free(n->out);
    free(n->attrs);
    free(n->op);
    free(n->name);
    free(n);
}

void onnx_graph_free(weft_onnx_graph *g)
{
    if (!g)
        return;
    for (size_t i = 0; i < g->n_nodes; i++)
        free_node(g->nodes[i]);
    free(g->nodes);
    for (size_t i = 0; i < g->n_inits; i++) {
        free(g->inits[i].name);
        weft_tensor_release(g->inits[i].t);
    }
    free(g->inits);
    for (size_t i = 0; i < g->n_inputs; i++)
        free_io(&g->inputs[i]);
    free(g->inputs);
    free_io(&g->output);
    for (size_t i = 0; i < g->n_examples; i++) {
        free(g->examples[i].name);
        weft_tensor_release(g->examples[i].t);
    }
    free(g->examples);
    for (size_t i = 0; i < g->n_names; i++)
        free(g->names[i].base);
    free(g->names);
    free(g->named);
    free(g);
}

const struct weft_onnx_options *weft_onnx_graph_options(const weft_onnx_graph *g)
{
    return g ? &g->o : NULL;
}

int onnx_dtype(enum weft_dtype dtype)
{
    switch (dtype) {
    case WEFT_F32: return 1;
    case WEFT_U8: return 2;
    case WEFT_I8: return 3;
    case WEFT_I16: return 5;
    case WEFT_I32: return 6;
    case WEFT_I64: return 7;
    case WEFT_BOOL: return 9;
    case WEFT_F16: return 10;
    case WEFT_F64: return 11;
    case WEFT_BF16: return 16;
    default: return 0;
    }
}

/* ---- examples ------------------------------------------------------------------------ */

weft_tensor *weft_onnx_example(const weft_onnx_graph *g, const char *name)
{
    if (!g || !name)
        return NULL;
    for (size_t i = 0; i < g->n_examples; i++)
        if (!strcmp(g->examples[i].name, name))
            return g->examples[i].t;
    return NULL;
}

int onnx_set_example(weft_onnx_graph *g, const char *name, weft_tensor *t)
{
    for (size_t i = 0; i < g->n_examples; i++)
        if (!strcmp(g->examples[i].name, name)) {
            weft_tensor_retain(t);
            weft_tensor_release(g->examples[i].t);
            g->examples[i].t = t;
            return 0;
        }
    char *copy = weft_strdup(name);
    if (!copy || weft_grow((void **)&g->examples, &g->cap_examples, g->n_examples + 1,
                           sizeof *g->examples) != 0) {
        free(copy);
        return weft_error_code();
    }
    g->examples[g->n_examples++] = (struct onnx_example){copy, weft_tensor_retain(t)};
    return 0;
}

/* ---- scopes and names ---------------------------------------------------------------- */

void weft_onnx_scope_push(weft_onnx_graph *g, const char *name)
{
    if (!g || g->depth >= 64)
        return;
    size_t len = strlen(g->scope);
    g->scope_len[g->depth++] = len;
    if (name && *name)
        snprintf(g->scope + len, sizeof g->scope - len, "/%s", name);
}

void weft_onnx_scope_pop(weft_onnx_graph *g)
{
    if (g && g->depth > 0)
        g->scope[g->scope_len[--g->depth]] = '\0';
}

/* "/0/Gemm", then "/0/Gemm_1", ... (malloc'd). */
static char *unique_name(weft_onnx_graph *g, const char *op)
{
    char base[1100];
    snprintf(base, sizeof base, "%s/%s", g->scope, op);
    size_t i = 0;
    while (i < g->n_names && strcmp(g->names[i].base, base) != 0)
        i++;
    if (i == g->n_names) {
        char *copy = weft_strdup(base);
        if (!copy || weft_grow((void **)&g->names, &g->cap_names, g->n_names + 1,
                               sizeof *g->names) != 0) {
            free(copy);
            return NULL;
        }
        g->names[g->n_names].base = copy;
        g->names[g->n_names++].count = 0;
    }
    int k = g->names[i].count++;
    char name[1120];
    if (k == 0)
        snprintf(name, sizeof name, "%s", base);
    else
        snprintf(name, sizeof name, "%s_%d", base, k);
    return weft_strdup(name);
}

/* ---- nodes ---------------------------------------------------------------------------- */

static int oom(void)
{
    return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "ONNX export: out of host memory");
}

weft_onnx_node *weft_onnx_node_add(weft_onnx_graph *g, const char *op_type, int n_inputs,
                                   const char *const *inputs, int n_outputs)
{
    if (!g || !op_type)
        return NULL;
    for (int i = 0; i < n_inputs; i++)
        if (!inputs[i]) {
            if (weft_error_code() == WEFT_OK)
                weft_error_set(WEFT_ERR_RUNTIME, "ONNX export: input %d of a %s node is missing",
                               i, op_type);
            return NULL;
        }
    struct weft_onnx_node *n = calloc(1, sizeof *n);
    if (!n) {
        oom();
        return NULL;
    }
    n->op = weft_strdup(op_type);
    n->name = unique_name(g, op_type);
    n->in = calloc((size_t)(n_inputs ? n_inputs : 1), sizeof *n->in);
    n->out = calloc((size_t)(n_outputs ? n_outputs : 1), sizeof *n->out);
    bool ok = n->op && n->name && n->in && n->out;
    for (int i = 0; ok && i < n_inputs; i++, n->n_in++)
        ok = (n->in[i] = weft_strdup(inputs[i])) != NULL;
    for (int i = 0; ok && i < n_outputs; i++, n->n_out++) {
        char out[1200];
        snprintf(out, sizeof out, "%s_output_%d", n->name, i);
        ok = (n->out[i] = weft_strdup(out)) != NULL;
    }
    if (ok)
        ok = weft_grow((void **)&g->nodes, &g->cap_nodes, g->n_nodes + 1, sizeof *g->nodes) == 0;
    if (!ok) {
        free_node(n);
        oom();
        return NULL;
    }
    g->nodes[g->n_nodes++] = n;
    return n;
}

const char *weft_onnx_node_output(const weft_onnx_node *node, int i)
{
    return node && i >= 0 && i < node->n_out ? node->out[i] : NULL;
}

const char *weft_onnx_op(weft_onnx_graph *g, const char *op_type, int n_inputs,
                         const char *const *inputs)
{
    return weft_onnx_node_output(weft_onnx_node_add(g, op_type, n_inputs, inputs, 1), 0);
}

/* A new attribute of node (zeroed but for name and type), or NULL (out of memory: the
 * node is then marked broken through the error state). */
static struct onnx_attr *new_attr(weft_onnx_node *node, const char *name,
                                  enum onnx_attr_type type)
{
    if (!node)
        return NULL;
    struct onnx_attr *attrs = realloc(node->attrs, (size_t)(node->n_attr + 1) * sizeof *attrs);
    char *copy = attrs ? weft_strdup(name) : NULL;
    if (!copy) {
        if (attrs)
            node->attrs = attrs;
        oom();
        return NULL;
    }
    node->attrs = attrs;
    struct onnx_attr *a = &attrs[node->n_attr++];
    *a = (struct onnx_attr){.name = copy, .type = type};
    return a;
}

void weft_onnx_attr_int(weft_onnx_node *node, const char *name, int64_t v)
{
    struct onnx_attr *a = new_attr(node, name, ONNX_ATTR_INT);
    if (a)
        a->i = v;
}

void weft_onnx_attr_float(weft_onnx_node *node, const char *name, float v)
{
    struct onnx_attr *a = new_attr(node, name, ONNX_ATTR_FLOAT);
    if (a)
        a->f = v;
}

void weft_onnx_attr_string(weft_onnx_node *node, const char *name, const char *v)
{
    struct onnx_attr *a = new_attr(node, name, ONNX_ATTR_STRING);
    if (a)
        a->s = weft_strdup(v); /* NULL: out of memory, and the export fails on the error */
}

void weft_onnx_attr_ints(weft_onnx_node *node, const char *name, int n, const int64_t *v)
{
    struct onnx_attr *a = new_attr(node, name, ONNX_ATTR_INTS);
    if (!a)
        return;
    a->ints = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
    if (!a->ints) {
        oom();
        return;
    }
    if (n > 0)
        memcpy(a->ints, v, (size_t)n * sizeof *v);
    a->n = n;
}

void weft_onnx_attr_strings(weft_onnx_node *node, const char *name, int n,
                            const char *const *v)
{
    struct onnx_attr *a = new_attr(node, name, ONNX_ATTR_STRINGS);
    if (!a)
        return;
    a->strings = calloc((size_t)(n > 0 ? n : 1), sizeof *a->strings);
    if (!a->strings) {
        oom();
        return;
    }
    for (int i = 0; i < n; i++, a->n++)
        if (!(a->strings[i] = weft_strdup(v[i])))
            return;
}

/* ---- initializers and constants ------------------------------------------------------ */

struct onnx_init *onnx_init_named(const weft_onnx_graph *g, const char *name)
{
    for (size_t i = 0; i < g->n_inits; i++)
        if (!strcmp(g->inits[i].name, name))
            return &g->inits[i];
    return NULL;
}

/* t's values as a contiguous cpu tensor with no history (a new reference). */
static weft_tensor *host_copy(weft_tensor *t)
{
    weft_scope_push();
    weft_tensor *h = weft_contiguous(weft_detach(weft_to_device(t, WEFT_CPU)));
    weft_tensor_retain(h);
    weft_scope_pop();
    return h;
}

static const char *add_init(weft_onnx_graph *g, const char *name, weft_tensor *t,
                            const weft_tensor *source)
{
    if (onnx_dtype(t->dtype) == 0) {
        weft_error_set(WEFT_ERR_TYPE, "ONNX export: %s has dtype %s, which ONNX has no type for",
                       name, weft_dtype_name(t->dtype));
        return NULL;
    }
    weft_tensor *h = host_copy(t);
    char *copy = h ? weft_strdup(name) : NULL;
    if (!copy || weft_grow((void **)&g->inits, &g->cap_inits, g->n_inits + 1,
                           sizeof *g->inits) != 0) {
        free(copy);
        weft_tensor_release(h);
        return NULL;
    }
    g->inits[g->n_inits] = (struct onnx_init){copy, h, source};
    return g->inits[g->n_inits++].name;
}

const char *onnx_add_initializer(weft_onnx_graph *g, const char *name, weft_tensor *t)
{
    if (onnx_init_named(g, name)) {
        weft_error_set(WEFT_ERR_RUNTIME, "ONNX export: two initializers named '%s'", name);
        return NULL;
    }
    return add_init(g, name, t, NULL);
}

/* m's own parameter or buffer `name`. */
static weft_tensor *own_tensor(const weft_module *m, const char *name)
{
    weft_tensor *t = weft_module_parameter(m, name);
    return t ? t : weft_module_buffer(m, name);
}

const char *weft_onnx_param(weft_onnx_graph *g, const weft_module *m, const char *name)
{
    if (!g || !m || !name)
        return NULL;
    weft_tensor *t = own_tensor(m, name);
    if (!t) {
        weft_error_set(WEFT_ERR_RUNTIME, "ONNX export: %s has no parameter or buffer '%s'",
                       weft_module_type_name(m), name);
        return NULL;
    }
    for (size_t i = 0; i < g->n_inits; i++)
        if (g->inits[i].source == t)
            return g->inits[i].name;
    for (int i = 0; i < g->n_named; i++)
        if (g->named[i].tensor == t)
            return add_init(g, g->named[i].name, t, t);
    weft_error_set(WEFT_ERR_RUNTIME, "ONNX export: %s's '%s' is not a tensor of the exported "
                                     "model", weft_module_type_name(m), name);
    return NULL;
}

/* m's state_dict prefix ("1", "transformer.h.0.attn"; "" for the root) into buf: found
 * through the first tensor of m's tree, whose local and full names differ by it. */
static int module_prefix(const weft_onnx_graph *g, const weft_module *m, char *buf, size_t size)
{
    struct weft_named_tensor *mine = NULL;
    int n = weft_module_named_parameters(m, &mine);
    if (n == 0) {
        free(mine);
        n = weft_module_named_buffers(m, &mine);
    }
    if (n <= 0) {
        free(mine);
        return n < 0 ? n : weft_error_set(WEFT_ERR_RUNTIME, "ONNX export: %s holds no tensor to "
                                                            "derive an initializer from",
                                          weft_module_type_name(m));
    }
    int found = -1;
    for (int i = 0; i < g->n_named && found < 0; i++)
        if (g->named[i].tensor == mine[0].tensor)
            found = i;
    if (found >= 0) {
        size_t full = strlen(g->named[found].name), local = strlen(mine[0].name);
        size_t keep = full > local ? full - local - 1 : 0;
        snprintf(buf, size, "%.*s", (int)keep, g->named[found].name);
    }
    free(mine);
    if (found < 0)
        return weft_error_set(WEFT_ERR_RUNTIME, "ONNX export: the %s is not part of the "
                                                "exported model", weft_module_type_name(m));
    return 0;
}

const char *weft_onnx_initializer(weft_onnx_graph *g, const weft_module *m, const char *name,
                                  weft_tensor *t)
{
    if (!g || !m || !name || !t)
        return NULL;
    char prefix[512], full[700];
    if (module_prefix(g, m, prefix, sizeof prefix) != 0)
        return NULL;
    snprintf(full, sizeof full, "%s%sonnx.%s", prefix, *prefix ? "." : "", name);
    char unique[720];
    snprintf(unique, sizeof unique, "%s", full);
    for (int k = 1; onnx_init_named(g, unique); k++)
        snprintf(unique, sizeof unique, "%s_%d", full, k);
    return add_init(g, unique, t, NULL);
}

/* A Constant node holding t (a new reference is taken). */
const char *onnx_constant(weft_onnx_graph *g, weft_tensor *t)
{
    if (!t)
        return NULL;
    weft_onnx_node *n = weft_onnx_node_add(g, "Constant", 0, NULL, 1);
    struct onnx_attr *a = new_attr(n, "value", ONNX_ATTR_TENSOR);
    if (!a)
        return NULL;
    if (!(a->t = host_copy(t)))
        return NULL;
    return n->out[0];
}

const char *weft_onnx_const_ints(weft_onnx_graph *g, int n, const int64_t *v)
{
    if (!g || n < 0)
        return NULL;
    weft_scope_push();
    const int64_t shape = n;
    weft_tensor *t = weft_from_host(n ? v : (const int64_t[]){0}, 1, &shape, WEFT_I64, WEFT_CPU);
    const char *out = onnx_constant(g, t);
    weft_scope_pop();
    return out;
}

const char *weft_onnx_const_scalar(weft_onnx_graph *g, enum weft_dtype dtype, double v)
{
    if (!g)
        return NULL;
    weft_scope_push();
    const char *out = onnx_constant(g, weft_full(0, NULL, v, dtype, WEFT_CPU));
    weft_scope_pop();
    return out;
}

/* ---- graph inputs ---------------------------------------------------------------------- */

const char *weft_onnx_input(weft_onnx_graph *g, const char *name, enum weft_dtype dtype,
                            int ndim, const int64_t *shape, const char *const *dim_params)
{
    if (!g || !name)
        return NULL;
    for (size_t i = 0; i < g->n_inputs; i++)
        if (!strcmp(g->inputs[i].name, name)) {
            weft_error_set(WEFT_ERR_VALUE, "ONNX export: the graph has an input '%s' already",
                           name);
            return NULL;
        }
    if (ndim < 0 || ndim > WEFT_MAX_DIMS || onnx_dtype(dtype) == 0) {
        weft_error_set(WEFT_ERR_VALUE, "ONNX export: input '%s': bad rank %d or dtype %s", name,
                       ndim, weft_dtype_name(dtype));
        return NULL;
    }
    if (weft_grow((void **)&g->inputs, &g->cap_inputs, g->n_inputs + 1, sizeof *g->inputs) != 0)
        return NULL;
    struct onnx_io *io = &g->inputs[g->n_inputs];
    *io = (struct onnx_io){.dtype = dtype, .ndim = ndim};
    bool ok = (io->name = weft_strdup(name)) != NULL;
    for (int d = 0; ok && d < ndim; d++) {
        io->shape[d] = shape[d];
        if (dim_params && dim_params[d])
            ok = (io->params[d] = weft_strdup(dim_params[d])) != NULL;
    }
    if (!ok) {
        free_io(io);
        return NULL;
    }
    return g->inputs[g->n_inputs++].name;
}

const char *weft_onnx_batch_param(const weft_onnx_graph *g)
{
    return g && g->o.batch == 0 ? "batch" : NULL;
}

/* ---- queries and rewrites for the exporter's own passes ------------------------------- */

struct weft_onnx_node *onnx_producer(const weft_onnx_graph *g, const char *name)
{
    for (size_t i = 0; i < g->n_nodes; i++) {
        struct weft_onnx_node *n = g->nodes[i];
        for (int k = 0; !n->removed && k < n->n_out; k++)
            if (!strcmp(n->out[k], name))
                return n;
    }
    return NULL;
}

int onnx_readers(const weft_onnx_graph *g, const char *name)
{
    int count = 0;
    for (size_t i = 0; i < g->n_nodes; i++) {
        const struct weft_onnx_node *n = g->nodes[i];
        for (int k = 0; !n->removed && k < n->n_in; k++)
            count += !strcmp(n->in[k], name);
    }
    return count;
}

static int rename_in(char **slot, const char *from, const char *to)
{
    if (strcmp(*slot, from) != 0)
        return 0;
    char *copy = weft_strdup(to);
    if (!copy)
        return weft_error_code();
    free(*slot);
    *slot = copy;
    return 0;
}

int onnx_rename(weft_onnx_graph *g, const char *from, const char *to)
{
    char *old = weft_strdup(from); /* from may be one of the slots rewritten */
    if (!old)
        return weft_error_code();
    int rc = 0;
    for (size_t i = 0; i < g->n_nodes && rc == 0; i++) {
        struct weft_onnx_node *n = g->nodes[i];
        for (int k = 0; k < n->n_in && rc == 0; k++)
            rc = rename_in(&n->in[k], old, to);
        for (int k = 0; k < n->n_out && rc == 0; k++)
            rc = rename_in(&n->out[k], old, to);
    }
    free(old);
    return rc;
}

/* ---- small patterns ------------------------------------------------------------------ */

const char *weft_onnx_reshape(weft_onnx_graph *g, const char *x, int n, const int64_t *shape)
{
    const char *in[2] = {x, weft_onnx_const_ints(g, n, shape)};
    return weft_onnx_op(g, "Reshape", 2, in);
}

const char *weft_onnx_transpose(weft_onnx_graph *g, const char *x, int n, const int64_t *perm)
{
    weft_onnx_node *node = weft_onnx_node_add(g, "Transpose", 1, &x, 1);
    weft_onnx_attr_ints(node, "perm", n, perm);
    return weft_onnx_node_output(node, 0);
}

const char *onnx_axes_op(weft_onnx_graph *g, const char *op, const char *x, int n,
                         const int64_t *axes)
{
    const char *in[2] = {x, weft_onnx_const_ints(g, n, axes)};
    return weft_onnx_op(g, op, 2, in);
}

const char *onnx_binary(weft_onnx_graph *g, const char *op, const char *a, const char *b)
{
    const char *in[2] = {a, b};
    return weft_onnx_op(g, op, 2, in);
}
