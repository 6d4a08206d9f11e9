/* nn/graph.c: the graph module (weft/graph.h): layers that name their inputs, run in the
 * order they were added. Each value lives until its last reader has run (a layer's output
 * that nobody reads any more is released at once, as a Python forward's locals die). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"
#include "weft/ops.h"

struct graph_layer {
    int n_in;
    int *in;     /* source layers, -1 for the graph's input */
    int readers; /* layers reading this one's output, +1 for the graph's output */
};

struct graph_state {
    int n, cap;
    struct graph_layer *layers;
};

static void graph_free_state(void *p)
{
    struct graph_state *s = p;
    if (!s)
        return;
    for (int i = 0; i < s->n; i++)
        free(s->layers[i].in);
    free(s->layers);
    free(s);
}

static weft_tensor *graph_forward(weft_module *m, weft_tensor *x);

static const struct weft_module_type graph_type = {
    .base = WEFT_VTABLE(WEFT_KIND_MODULE, "graph", struct weft_module_type),
    .class_name = "GraphModule",
    .forward = graph_forward,
    .free_state = graph_free_state,
    .onnx_export = nn_onnx_export_graph,
};

weft_module *weft_nn_graph(void)
{
    struct graph_state *s = calloc(1, sizeof *s);
    if (!s) {
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory for a GraphModule");
        return NULL;
    }
    weft_module *m = weft_module_new(&graph_type, s);
    if (!m)
        free(s);
    return m;
}

bool weft_nn_is_graph(const weft_module *m)
{
    return m && weft_module_type(m) == &graph_type;
}

static struct graph_state *state_of(const weft_module *m)
{
    return weft_nn_is_graph(m) ? weft_module_state(m) : NULL;
}

int weft_nn_graph_num_layers(const weft_module *graph)
{
    const struct graph_state *s = state_of(graph);
    return s ? s->n : -1;
}

int weft_nn_graph_layer_inputs(const weft_module *graph, int i, int *which, int max)
{
    const struct graph_state *s = state_of(graph);
    if (!s || i < 0 || i >= s->n)
        return -1;
    for (int k = 0; k < s->layers[i].n_in && k < max; k++)
        which[k] = s->layers[i].in[k];
    return s->layers[i].n_in;
}

int weft_nn_graph_readers(const weft_module *graph, int i)
{
    const struct graph_state *s = state_of(graph);
    return s && i >= 0 && i < s->n ? s->layers[i].readers : -1;
}

/* The source a name gives among the layers before `before`: -1 for the input, the layer's
 * index, or -2 when there is none. */
static int source_of(const weft_module *graph, int before, const char *name)
{
    if (strcmp(name, WEFT_GRAPH_INPUT) == 0)
        return -1;
    for (int i = 0; i < before; i++)
        if (strcmp(weft_module_child_name(graph, i), name) == 0)
            return i;
    return -2;
}

static int check_arity(const char *name, const weft_module *layer, int n)
{
    int least = nn_merge_min_inputs(layer);
    const char *cls = weft_module_type_name(layer);
    if (least == 0 && n != 1)
        return weft_error_set(WEFT_ERR_VALUE, "layer '%s' (%s) takes one input, got %d: join "
                                              "values first with an add, mul or concat layer",
                              name, cls, n);
    if (n < least)
        return weft_error_set(WEFT_ERR_VALUE, "layer '%s' (%s) joins %s inputs, got %d", name,
                              cls, least == 2 ? "two or more" : "one or more", n);
    if (n > GRAPH_MAX_INPUTS)
        return weft_error_set(WEFT_ERR_VALUE, "layer '%s' (%s): %d inputs, at most %d", name,
                              cls, n, GRAPH_MAX_INPUTS);
    return 0;
}

int weft_nn_graph_add(weft_module *graph, const char *name, weft_module *layer, int n_inputs,
                      const char *const *inputs)
{
    struct graph_state *s = state_of(graph);
    int rc = 0;
    if (!layer)
        rc = weft_error_code() ? weft_error_code() : WEFT_ERR_VALUE;
    else if (!s)
        rc = weft_error_set(WEFT_ERR_TYPE, "weft_nn_graph_add: expected a GraphModule, got %s",
                            graph ? weft_module_type_name(graph) : "NULL");
    else if (!name || !*name || strchr(name, '.') || strcmp(name, WEFT_GRAPH_INPUT) == 0)
        rc = weft_error_set(WEFT_ERR_VALUE, "layer name '%s' is not allowed: a name without "
                                            "'.', other than '%s' (the graph's input)",
                            name ? name : "", WEFT_GRAPH_INPUT);
    else if (weft_module_child(graph, name))
        rc = weft_error_set(WEFT_ERR_VALUE, "a layer named '%s' is already in the graph", name);
    else
        rc = check_arity(name, layer, n_inputs);
    int *in = NULL;
    if (rc == 0 && !(in = malloc((size_t)n_inputs * sizeof *in)))
        rc = weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory for a graph layer");
    for (int k = 0; rc == 0 && k < n_inputs; k++) {
        in[k] = source_of(graph, s->n, inputs[k]);
        if (in[k] == -2)
            rc = weft_error_set(WEFT_ERR_VALUE, "layer '%s': input '%s' is not '%s' or a layer "
                                                "added before it",
                                name, inputs[k], WEFT_GRAPH_INPUT);
    }
    if (rc == 0 && s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 16;
        struct graph_layer *p = realloc(s->layers, (size_t)cap * sizeof *p);
        if (!p)
            rc = weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory for a graph layer");
        else
            s->layers = p, s->cap = cap;
    }
    if (rc != 0) {
        free(in);
        weft_module_free(layer);
        return rc;
    }
    /* The child first: it may be refused (it already has a parent) and is then freed. */
    if ((rc = weft_module_add_child(graph, name, layer)) != 0) {
        free(in);
        return rc;
    }
    if (s->n > 0)
        s->layers[s->n - 1].readers--; /* no longer the output */
    s->layers[s->n] = (struct graph_layer){n_inputs, in, 1};
    for (int k = 0; k < n_inputs; k++)
        if (in[k] >= 0)
            s->layers[in[k]].readers++;
    s->n++;
    return 0;
}

/* ---- forward ------------------------------------------------------------------------- */

/* Whether layer p's output v may be overwritten by its one reader: the producers whose
 * backward keeps no reference to their output (Conv2d, Linear, BatchNorm, the joining
 * layers; not ReLU or Sigmoid, which save it), and v a tensor of its own, not a view. */
static bool overwritable(const weft_module *graph, const struct graph_state *s, int p,
                         const weft_tensor *v)
{
    if (p < 0 || s->layers[p].readers != 1 || !v || (v->flags & WEFT_TENSOR_VIEW))
        return false;
    const weft_module *m = weft_module_child_at((weft_module *)graph, p);
    return weft_nn_conv2d_options(m) || nn_is_linear(m) || weft_nn_batch_norm_eps(m) >= 0 ||
           nn_merge_min_inputs(m) > 0;
}

struct run {
    weft_module *graph;
    const struct graph_state *s;
    weft_tensor *x;
    weft_tensor **vals;
    int *left; /* readers still to run, per layer */
    bool plain; /* no fusion, no in-place writes, every value kept (forward_each) */
};

static weft_tensor *value(const struct run *r, int src)
{
    return src < 0 ? r->x : r->vals[src];
}

/* A Linear with a bias at i read by the ReLU at i + 1 alone: one fused layer. */
static bool fuses(const struct run *r, int i)
{
    const struct graph_state *s = r->s;
    if (r->plain || i + 1 >= s->n || s->layers[i].readers != 1 || s->layers[i + 1].n_in != 1 ||
        s->layers[i + 1].in[0] != i)
        return false;
    const weft_module *lin = weft_module_child_at(r->graph, i);
    return nn_is_linear(lin) && weft_module_parameter(lin, "bias") &&
           nn_is_relu(weft_module_child_at(r->graph, i + 1));
}

/* Layer i's output (an autoreleased reference in the caller's scope), or NULL. */
static weft_tensor *run_layer(struct run *r, int i, weft_tensor *const *in)
{
    const struct graph_layer *L = &r->s->layers[i];
    weft_module *m = weft_module_child_at(r->graph, i);
    if (nn_merge_min_inputs(m) > 0) {
        int reuse = -1;
        for (int k = 0; k < 2 && k < L->n_in && reuse < 0 && !r->plain; k++)
            if (overwritable(r->graph, r->s, L->in[k], in[k]))
                reuse = k;
        return nn_merge_forward(m, L->n_in, in, reuse);
    }
    if (!r->plain && nn_is_relu(m) && overwritable(r->graph, r->s, L->in[0], in[0])) {
        weft_tensor *y = weft_relu_(in[0]);
        return y ? weft_autorelease(weft_tensor_retain(y)) : NULL;
    }
    return weft_module_forward(m, in[0]);
}

/* "bn2 [4, 16, 7, 7], input [4, 1, 28, 28]" */
static void describe_inputs(const struct run *r, int i, weft_tensor *const *in, char *buf,
                            size_t size)
{
    const struct graph_layer *L = &r->s->layers[i];
    size_t used = 0;
    buf[0] = '\0';
    for (int k = 0; k < L->n_in && used < size; k++) {
        const char *name = L->in[k] < 0 ? WEFT_GRAPH_INPUT
                                        : weft_module_child_name(r->graph, L->in[k]);
        char shape[128];
        used += (size_t)snprintf(buf + used, size - used, "%s%s %s", k ? ", " : "", name,
                                 in[k] ? weft_shape_str(in[k]->ndim, in[k]->shape, shape,
                                                        sizeof shape)
                                       : "(none)");
    }
}

/* Releases the values layer i read that no later layer reads. */
static void release_dead(struct run *r, int i)
{
    const struct graph_layer *L = &r->s->layers[i];
    for (int k = 0; k < L->n_in; k++) {
        int src = L->in[k];
        if (src >= 0 && --r->left[src] == 0 && !r->plain) {
            weft_tensor_release(r->vals[src]);
            r->vals[src] = NULL;
        }
    }
}

static weft_tensor *run(struct run *r, weft_nn_graph_visit_fn visit, void *ctx, int *failed)
{
    const struct graph_state *s = r->s;
    int n = s->n;
    if (failed)
        *failed = -1;
    if (n == 0)
        return weft_autorelease(weft_tensor_retain(r->x)); /* as an empty Sequential */
    r->vals = calloc((size_t)n, sizeof *r->vals);
    r->left = malloc((size_t)n * sizeof *r->left);
    weft_tensor *out = NULL;
    if (!r->vals || !r->left) {
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory for a graph's values");
        goto done;
    }
    for (int i = 0; i < n; i++)
        r->left[i] = s->layers[i].readers;
    for (int i = 0; i < n; i++) {
        const struct graph_layer *L = &s->layers[i];
        weft_tensor *in[GRAPH_MAX_INPUTS];
        for (int k = 0; k < L->n_in; k++)
            in[k] = value(r, L->in[k]);
        weft_scope_push();
        weft_tensor *y;
        int last = i;
        if (fuses(r, i)) {
            weft_module *lin = weft_module_child_at(r->graph, i);
            y = weft_linear_relu(in[0], weft_module_parameter(lin, "weight"),
                                 weft_module_parameter(lin, "bias"));
            last = i + 1;
        } else {
            y = run_layer(r, i, in);
        }
        r->vals[last] = weft_tensor_retain(y);
        int stop = 0;
        if (visit)
            stop = visit(ctx, i, L->n_in, in, y);
        if (!y && !visit) {
            char inputs[512];
            describe_inputs(r, i, in, inputs, sizeof inputs);
            weft_error_prefix("layer '%s' (%s) on %s", weft_module_child_name(r->graph, i),
                              weft_module_type_name(weft_module_child_at(r->graph, i)), inputs);
        }
        weft_scope_pop();
        if (!y || stop) {
            if (failed)
                *failed = y ? -1 : i;
            if (y && weft_error_code() == WEFT_OK)
                weft_error_set(WEFT_ERR_RUNTIME, "the graph's forward was stopped at layer '%s'",
                               weft_module_child_name(r->graph, i));
            goto done;
        }
        release_dead(r, i);
        if (last != i) { /* the fused ReLU read layer i alone */
            r->left[i] = 0;
            i = last;
        }
    }
    out = weft_autorelease(weft_tensor_retain(r->vals[n - 1]));
done:
    for (int i = 0; r->vals && i < n; i++)
        weft_tensor_release(r->vals[i]);
    free(r->vals);
    free(r->left);
    return out;
}

static weft_tensor *graph_forward(weft_module *m, weft_tensor *x)
{
    if (!x)
        return NULL;
    struct run r = {.graph = m, .s = weft_module_state(m), .x = x};
    return run(&r, NULL, NULL, NULL);
}

weft_tensor *weft_nn_graph_forward_each(weft_module *graph, weft_tensor *x,
                                        weft_nn_graph_visit_fn visit, void *ctx, int *failed)
{
    if (failed)
        *failed = -1;
    const struct graph_state *s = state_of(graph);
    if (!s) {
        weft_error_set(WEFT_ERR_TYPE, "weft_nn_graph_forward_each: expected a GraphModule, got %s",
                       graph ? weft_module_type_name(graph) : "NULL");
        return NULL;
    }
    if (!x)
        return NULL;
    struct run r = {.graph = graph, .s = s, .x = x, .plain = true};
    return run(&r, visit, ctx, failed);
}
