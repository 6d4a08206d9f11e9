/* train/model_graph.c: `[model] type = graph`, a model whose layers name their inputs
 * (weft/graph.h):
 *
 *     [model]
 *     type = graph
 *
 *     [layer.conv1]              ; reads the layer above it (the first: the model's input)
 *     type = conv2d
 *     ...
 *     [layer.add1]
 *     type = add
 *     inputs = bn2, pool1        ; earlier layers, or `input` (the model's input)
 *
 * Layers run in file order and the model's output is the last layer's. An input must be
 * `input` or a layer above: a name below (which would make a cycle, or a guess at the
 * order) is refused, and so is a layer whose output nothing reads. Each error names the
 * section and its `inputs` (and the cycle, when there is one). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "weft/config.h"
#include "weft/error.h"
#include "weft/graph.h"

#define MAX_LAYERS 4096
#define GRAPH_INPUTS_MAX 64

struct layer_ref {
    const char *section; /* "layer.add1" */
    const char *name;    /* "add1" */
    char list[512];      /* its inputs, separated by '\0' */
    const char *inputs[GRAPH_INPUTS_MAX];
    int n_inputs;
};

/* The layer named name among layers[0..n), or -1. */
static int index_of(const struct layer_ref *layers, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(layers[i].name, name) == 0)
            return i;
    return -1;
}

/* Splits the section's `inputs` (default: the layer above, or `input` for the first). */
static int read_inputs(struct weft_config *cfg, struct layer_ref *L, const char *above)
{
    const char *v = weft_config_string(cfg, L->section, "inputs", NULL);
    if (!v) {
        L->inputs[0] = above ? above : WEFT_GRAPH_INPUT;
        L->n_inputs = 1;
        return 0;
    }
    snprintf(L->list, sizeof L->list, "%s", v);
    char *save = NULL;
    for (char *w = strtok_r(L->list, ", \t", &save); w; w = strtok_r(NULL, ", \t", &save)) {
        if (L->n_inputs == GRAPH_INPUTS_MAX)
            return weft_options_bad_value(weft_config_options(cfg, L->section), "inputs",
                                          "at most %d inputs", GRAPH_INPUTS_MAX);
        L->inputs[L->n_inputs++] = w;
    }
    if (L->n_inputs == 0)
        return weft_options_bad_value(weft_config_options(cfg, L->section), "inputs",
                                      "expected layer names separated by commas, or '%s'",
                                      WEFT_GRAPH_INPUT);
    return 0;
}

/* Whether layer `from` reads layer `to` through a chain of inputs; if so, the values'
 * way from `to` to `from` and on into `to` again is written into path ("add1 -> conv5 ->
 * bn5 -> add1"). A breadth-first walk over the inputs, each layer seen once. */
static bool reads(const struct layer_ref *layers, int n, int from, int to, char *path,
                  size_t size)
{
    int *queue = malloc((size_t)n * sizeof *queue), *parent = malloc((size_t)n * sizeof *parent);
    bool found = false;
    if (!queue || !parent)
        goto out;
    for (int i = 0; i < n; i++)
        parent[i] = -2;
    int head = 0, tail = 0;
    queue[tail++] = from;
    parent[from] = -1;
    while (head < tail && !found) {
        int at = queue[head++];
        for (int k = 0; k < layers[at].n_inputs && !found; k++) {
            int j = index_of(layers, n, layers[at].inputs[k]);
            if (j < 0 || parent[j] != -2)
                continue;
            parent[j] = at;
            queue[tail++] = j;
            found = j == to;
        }
    }
    if (found) { /* to, the layer reading it, ..., from, then to again */
        size_t used = (size_t)snprintf(path, size, "%s", layers[to].name);
        for (int at = parent[to]; at >= 0 && used < size; at = parent[at])
            used += (size_t)snprintf(path + used, size - used, " -> %s", layers[at].name);
        if (used < size)
            snprintf(path + used, size - used, " -> %s", layers[to].name);
    }
out:
    free(queue);
    free(parent);
    return found;
}

/* The error for input `name` of layer i, which is not an earlier layer. */
static int bad_input(struct weft_config *cfg, const struct layer_ref *layers, int n, int i,
                     const char *name)
{
    const weft_options *o = weft_config_options(cfg, layers[i].section);
    int j = index_of(layers, n, name);
    if (j == i)
        return weft_options_bad_value(o, "inputs", "a layer cannot read its own output");
    if (j > i) {
        char path[1024] = "";
        if (reads(layers, n, j, i, path, sizeof path))
            return weft_options_bad_value(o, "inputs", "[layer.%s] reads this layer's output "
                                                       "itself: a cycle (%s)",
                                          name, path);
        return weft_options_bad_value(o, "inputs", "[layer.%s] comes later in the file: a "
                                                   "layer reads '%s' (the model's input) or "
                                                   "layers above it",
                                      name, WEFT_GRAPH_INPUT);
    }
    const char *cand[MAX_LAYERS + 1];
    cand[0] = WEFT_GRAPH_INPUT;
    for (int k = 0; k < i; k++)
        cand[k + 1] = layers[k].name;
    const char *hint = weft_closest_name(name, cand, (size_t)i + 1);
    char mean[300] = "";
    if (hint)
        snprintf(mean, sizeof mean, " (did you mean '%s'?)", hint);
    return weft_options_bad_value(o, "inputs", "no layer named '%s'%s: an input is '%s' (the "
                                               "model's input) or a layer above this one",
                                  name, mean, WEFT_GRAPH_INPUT);
}

weft_module *train_build_graph(struct weft_config *cfg)
{
    const char *file = weft_config_name(cfg);
    int n = 0;
    for (const char *const *sec = weft_config_sections(cfg); *sec; sec++)
        n += strncmp(*sec, "layer.", 6) == 0;
    if (n == 0) {
        weft_error_set(WEFT_ERR_CONFIG, "%s: the model has no layers: add [layer.<name>] sections "
                                        "with a 'type' key (one of linear, conv2d, add, ...)",
                       file);
        return NULL;
    }
    if (n > MAX_LAYERS) {
        weft_error_set(WEFT_ERR_CONFIG, "%s: %d layers: a graph model has at most %d", file, n,
                       MAX_LAYERS);
        return NULL;
    }
    struct layer_ref *layers = calloc((size_t)n, sizeof *layers);
    weft_module *graph = layers ? weft_nn_graph() : NULL;
    if (!layers) {
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory for the graph's layers");
        return NULL;
    }
    int k = 0, rc = graph ? 0 : weft_error_code();
    for (const char *const *sec = weft_config_sections(cfg); *sec && rc == 0; sec++) {
        if (strncmp(*sec, "layer.", 6) != 0)
            continue;
        struct layer_ref *L = &layers[k];
        L->section = *sec;
        L->name = *sec + 6;
        if (strcmp(L->name, WEFT_GRAPH_INPUT) == 0 || strchr(L->name, '.'))
            rc = weft_error_set(WEFT_ERR_CONFIG, "%s: [%s]: %s", file, *sec,
                                strchr(L->name, '.')
                                    ? "a graph model's layer names have no '.' (each is a "
                                      "module name of the state_dict)"
                                    : "'input' is the model's input among a layer's inputs: "
                                      "give the layer another name");
        else
            rc = read_inputs(cfg, L, k ? layers[k - 1].name : NULL);
        k++;
    }
    /* every input checked before any layer is built: a wiring mistake is reported first */
    for (int i = 0; i < n && rc == 0; i++)
        for (int j = 0; j < layers[i].n_inputs && rc == 0; j++) {
            const char *in = layers[i].inputs[j];
            int at = index_of(layers, n, in);
            if (strcmp(in, WEFT_GRAPH_INPUT) != 0 && !(at >= 0 && at < i))
                rc = bad_input(cfg, layers, n, i, in);
        }
    for (int i = 0; i < n && rc == 0; i++) {
        weft_module *layer = train_model_layer(cfg, layers[i].section);
        if (!layer) {
            rc = weft_error_code();
            break;
        }
        if (weft_nn_graph_add(graph, layers[i].name, layer, layers[i].n_inputs,
                              layers[i].inputs) != 0) {
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", weft_error_message());
            weft_error_clear();
            rc = weft_options_bad_value(weft_config_options(cfg, layers[i].section), "inputs",
                                        "%s", msg);
        }
    }
    for (int i = 0; i + 1 < n && rc == 0; i++)
        if (weft_nn_graph_readers(graph, i) == 0)
            rc = weft_error_set(WEFT_ERR_CONFIG,
                                "%s: [%s]: no layer reads its output (the model's output is "
                                "the last layer's, [%s]): name '%s' in a layer's inputs, or "
                                "remove the section",
                                file, layers[i].section, layers[n - 1].section, layers[i].name);
    free(layers);
    if (rc != 0) {
        weft_module_free(graph);
        return NULL;
    }
    return graph;
}
