/* nn/graph_internal.h: what the graph module (graph.c, graph_onnx.c) and its joining
 * layers (merge.c) share; not installed, not ABI. */
#ifndef WEFT_NN_GRAPH_INTERNAL_H
#define WEFT_NN_GRAPH_INTERNAL_H

#include "internal.h"
#include "weft/graph.h"

/* The most inputs a graph layer reads. */
#define GRAPH_MAX_INPUTS 64

/* The joining layers' types (identity, add, mul, concat), for the built-in table. */
#define NN_MERGE_TYPES 4
NN_INTERNAL extern const void *const nn_merge_types[NN_MERGE_TYPES];

/* The fewest inputs m takes when it joins values (add, mul: 2; concat: 1), or 0 for a
 * layer of one input. */
NN_INTERNAL int nn_merge_min_inputs(const weft_module *m);
NN_INTERNAL bool nn_is_identity(const weft_module *m);
/* A joining layer over inputs[0..n) (an autoreleased reference, or NULL). reuse: the input
 * (0 or 1) that is dead after this layer and may take the result in place when its shape
 * and dtype are the result's; -1 for none. The values are those of the out-of-place op. */
NN_INTERNAL weft_tensor *nn_merge_forward(weft_module *m, int n, weft_tensor *const *inputs,
                                          int reuse);
/* Its ONNX nodes over the values inputs[0..n); the output's name or NULL. */
NN_INTERNAL const char *nn_merge_onnx(weft_module *m, struct weft_onnx_graph *g, int n,
                                      const char *const *inputs);
/* The graph module's onnx_export (graph_onnx.c). */
NN_INTERNAL const char *nn_onnx_export_graph(weft_module *m, struct weft_onnx_graph *g,
                                             const char *input);

#endif
