/* nn/internal.h: what the nn library's files share; not installed, not ABI. */
#ifndef WEFT_NN_INTERNAL_H
#define WEFT_NN_INTERNAL_H

#include "weft.h"
#include "weft/nn.h"

#define NN_INTERNAL __attribute__((visibility("hidden")))

/* The module kind (module.c), registered with the built-in types when the library loads
 * (builtin_layers.c). */
NN_INTERNAL extern const struct weft_kind weft_module_kind;

/* The built-in module types an INI file names, registered from this one table when the
 * library loads (builtin_layers.c); each defined beside its layer (layers.c,
 * rnn_module.c). */
#define NN_BUILTIN_TYPES(X)                                                                   \
    X(linear_type) X(conv2d_type) X(max_pool2d_type) X(avg_pool2d_type)                      \
    X(adaptive_avg_pool2d_type) X(batch_norm1d_type) X(batch_norm2d_type) X(layer_norm_type) \
    X(embedding_type) X(dropout_type) X(flatten_type) X(relu_type) X(gelu_type)              \
    X(tanh_type) X(sigmoid_type) X(leaky_relu_type) X(softmax_type) X(log_softmax_type)      \
    X(rnn_type) X(lstm_type) X(gru_type)
#define NN_DECLARE_TYPE(type) NN_INTERNAL extern const struct weft_module_type type;
NN_BUILTIN_TYPES(NN_DECLARE_TYPE)
#undef NN_DECLARE_TYPE

/* Each built-in layer type's create() from options (layer_options.c). */
#define NN_LAYER_CREATORS(X)                                                                  \
    X(linear) X(conv2d) X(max_pool2d) X(avg_pool2d) X(adaptive_avg_pool2d) X(batch_norm1d)   \
    X(batch_norm2d) X(layer_norm) X(dropout) X(embedding) X(flatten) X(relu) X(gelu)         \
    X(tanh) X(sigmoid) X(leaky_relu) X(softmax) X(log_softmax)
#define NN_DECLARE_CREATE(name) NN_INTERNAL weft_module *nn_create_##name(const weft_options *o);
NN_LAYER_CREATORS(NN_DECLARE_CREATE)
#undef NN_DECLARE_CREATE

/* A new float32 parameter's storage before an init fill (init.c): uninitialised, which
 * the fill overwrites, or zeros while initialisation is off (weft_nn_init_enable), which
 * the fills then leave. */
NN_INTERNAL weft_tensor *nn_param_storage(int ndim, const int64_t *shape);

/* Whether a forward hook is registered (module.c): Sequential then runs every layer
 * through weft_module_forward, fusing none, so that the hooks see each as PyTorch's do. */
NN_INTERNAL bool nn_forward_hooked(void);

/* Whether m is the built-in Linear / ReLU (layers.c): Sequential fuses the pair. */
NN_INTERNAL bool nn_is_linear(const weft_module *m);
NN_INTERNAL bool nn_is_relu(const weft_module *m);
/* The built-in GELU's approximate (enum weft_gelu_approximate), or -1 when m is not one:
 * Sequential fuses a Linear and a GELU too. */
NN_INTERNAL int nn_gelu_form(const weft_module *m);

/* The onnx_export methods of the built-in types (weft/onnx.h): layers.c's types through
 * one dispatcher on the type's name (onnx_layers.c), the recurrent ones (onnx_rnn.c) and
 * Sequential (onnx_layers.c). */
struct weft_onnx_graph;
NN_INTERNAL const char *nn_onnx_export_builtin(weft_module *m, struct weft_onnx_graph *g,
                                               const char *input);
NN_INTERNAL const char *nn_onnx_export_rnn(weft_module *m, struct weft_onnx_graph *g,
                                           const char *input);
NN_INTERNAL const char *nn_onnx_export_sequential(weft_module *m, struct weft_onnx_graph *g,
                                                  const char *input);

#endif
