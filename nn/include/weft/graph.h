/* weft/graph.h: models that are not a chain (the nn library).
 *
 * A graph module (torch.fx's GraphModule, Keras's functional model, Darknet's [route] and
 * [shortcut]) runs its layers in the order they were added, each on the values it names:
 * the graph's input ("input") or the outputs of layers added before it. Its output is the
 * last layer's. So a residual block is
 *
 *     conv1 <- input; bn1 <- conv1; relu1 <- bn1; conv2 <- relu1; bn2 <- conv2;
 *     add1 <- bn2, input (weft_nn_add); relu2 <- add1
 *
 * which is PyTorch's `relu(bn2(conv2(relu(bn1(conv1(x))))) + x)`. The layers are the
 * graph's children under their own names, so its state_dict is "conv1.weight",
 * "bn1.running_mean", ...: a torch.nn.Module with attributes of those names loads it.
 *
 * Joining layers (no parameters): add and mul (two or more inputs of broadcastable shapes,
 * summed or multiplied left to right), concat (one or more, torch.cat along dim) and
 * identity (nn.Identity). Every other layer takes one input. A value nobody else reads
 * is written in place where that is safe (the output of a conv2d, linear, batchnorm or
 * joining layer, not a view, read by this layer alone): an add writes into one of its
 * inputs (torchvision's `out += identity`) and a relu into its input (ReLU(inplace=True)),
 * with the values of the out-of-place ops; a linear with a bias read by a relu alone runs
 * as one fused layer, as in Sequential.
 *
 * Errors follow weft/error.h; a layer's failure in forward is prefixed with its name and
 * its inputs' names and shapes.
 */
#ifndef WEFT_GRAPH_H
#define WEFT_GRAPH_H

#include "weft/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The name of the graph's input among the names a layer's inputs may take. */
#define WEFT_GRAPH_INPUT "input"

/* An empty graph (class GraphModule), or NULL. */
weft_module *weft_nn_graph(void);
/* Adds layer as the child `name` computed from the values inputs[0..n_inputs) names
 * (WEFT_GRAPH_INPUT or earlier layers' names). Takes ownership of layer, also on failure.
 * Refused (WEFT_ERR_VALUE, naming the layer): a name already used, "input" or one with a
 * '.'; an input name that is not the input or an earlier layer ("... is not the input or
 * a layer added before 'add1'"); the wrong number of inputs for the layer (joining layers
 * take two or more, concat one or more, every other layer exactly one). 0 or negative. */
int weft_nn_graph_add(weft_module *graph, const char *name, weft_module *layer, int n_inputs,
                      const char *const *inputs);
/* Whether m is a graph module. */
bool weft_nn_is_graph(const weft_module *m);
/* Its layers in order (the children: weft_module_child_at); -1 for a module that is not a
 * graph. */
int weft_nn_graph_num_layers(const weft_module *graph);
/* How many values layer i reads, and in which[0..n) (at most max written) their sources:
 * the layer index, or -1 for the graph's input. -1 when i is out of range. */
int weft_nn_graph_layer_inputs(const weft_module *graph, int i, int *which, int max);
/* How many layers read layer i's output (the graph's output, the last layer's, counts as
 * a reader too); -1 when i is out of range. */
int weft_nn_graph_readers(const weft_module *graph, int i);

/* Called for each layer in order with the values it read and its output (borrowed, for
 * the call), or output NULL when the layer failed (the error pending).
 * A non-zero return stops the forward, which then returns NULL. */
typedef int (*weft_nn_graph_visit_fn)(void *ctx, int layer, int n_inputs,
                                      weft_tensor *const *inputs, weft_tensor *output);
/* The forward, layer by layer without fusion or in-place writes, calling visit after each
 * layer (a model summary, a check that names the layer whose inputs do not fit). *failed
 * (may be NULL) is the failing layer, or -1. A new reference, or NULL. */
weft_tensor *weft_nn_graph_forward_each(weft_module *graph, weft_tensor *x,
                                        weft_nn_graph_visit_fn visit, void *ctx, int *failed);

/* The joining layers and nn.Identity (also registered: [layer.x] type = add, mul, concat,
 * identity; concat's key `dim`, default 1: the channels of [N, C, ...]). */
weft_module *weft_nn_add(void);
weft_module *weft_nn_mul(void);
weft_module *weft_nn_concat(int dim);
weft_module *weft_nn_identity(void);

#ifdef __cplusplus
}
#endif
#endif
