/* nn/graph_onnx.c: a graph module as ONNX nodes (weft/onnx.h). A one-input layer exports
 * through its own onnx_export (weft_onnx_export_module, named after the layer: "/conv1/Conv");
 * a joining layer as Add, Mul or Concat nodes over its inputs' values, its example (the
 * value weft computes, for the layers after it) recorded here. */
#include <stdlib.h>

#include "graph_internal.h"
#include "onnx_internal.h"

/* The joining layer i: its nodes under the layer's name, and its example. */
static const char *export_merge(weft_onnx_graph *g, weft_module *m, const char *name, int n,
                                const char *const *in)
{
    weft_tensor *ex[GRAPH_MAX_INPUTS];
    bool all = true;
    for (int k = 0; k < n; k++)
        all = (ex[k] = weft_onnx_example(g, in[k])) != NULL && all;
    weft_onnx_scope_push(g, name);
    const char *out = nn_merge_onnx(m, g, n, in);
    weft_onnx_scope_pop(g);
    if (!out || !all)
        return out;
    weft_scope_push();
    bool prev = weft_no_grad_begin();
    weft_tensor *y = nn_merge_forward(m, n, ex, -1);
    weft_grad_mode_restore(prev);
    if (!y || onnx_set_example(g, out, y) != 0) {
        weft_error_prefix("ONNX export: layer '%s' (%s)", name, weft_module_type_name(m));
        out = NULL;
    }
    weft_scope_pop();
    return out;
}

const char *nn_onnx_export_graph(weft_module *m, struct weft_onnx_graph *g, const char *input)
{
    int n = weft_nn_graph_num_layers(m);
    const char **vals = calloc((size_t)(n > 0 ? n : 1), sizeof *vals);
    if (!vals) {
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory for a graph's ONNX export");
        return NULL;
    }
    const char *out = n == 0 ? input : NULL;
    for (int i = 0; i < n; i++) {
        int which[GRAPH_MAX_INPUTS];
        const char *in[GRAPH_MAX_INPUTS];
        int k = weft_nn_graph_layer_inputs(m, i, which, GRAPH_MAX_INPUTS);
        for (int j = 0; j < k; j++)
            in[j] = which[j] < 0 ? input : vals[which[j]];
        weft_module *layer = weft_module_child_at(m, i);
        const char *name = weft_module_child_name(m, i);
        vals[i] = nn_merge_min_inputs(layer) > 0 ? export_merge(g, layer, name, k, in)
                                                 : weft_onnx_export_module(g, layer, name, in[0]);
        if (!(out = vals[i]))
            break;
    }
    free(vals);
    return out;
}
