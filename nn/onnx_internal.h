/* nn/onnx_internal.h: the ONNX graph builder's state, shared by the exporter's files
 * (onnx_graph.c builds, onnx_fold.c rewrites, onnx_write.c encodes, onnx_export.c drives);
 * not installed, not ABI. */
#ifndef WEFT_NN_ONNX_INTERNAL_H
#define WEFT_NN_ONNX_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "internal.h"
#include "weft/onnx.h"

/* ONNX's AttributeProto.AttributeType values. */
enum onnx_attr_type {
    ONNX_ATTR_FLOAT = 1, ONNX_ATTR_INT = 2, ONNX_ATTR_STRING = 3, ONNX_ATTR_TENSOR = 4,
    ONNX_ATTR_INTS = 7, ONNX_ATTR_STRINGS = 8,
};

struct onnx_attr {
    char *name;
    enum onnx_attr_type type;
    int64_t i;
    float f;
    char *s;
    int n;             /* INTS, STRINGS */
    int64_t *ints;
    char **strings;
    weft_tensor *t;    /* TENSOR: a contiguous cpu tensor (owned reference) */
};

struct weft_onnx_node {
    char *op, *name;
    int n_in, n_out, n_attr;
    char **in, **out;
    struct onnx_attr *attrs;
    bool removed; /* folded away (onnx_fold.c) */
};

/* An initializer: a contiguous cpu tensor (owned reference) and, for a module's own
 * tensor, that tensor (so one reached twice is stored once). */
struct onnx_init {
    char *name;
    weft_tensor *t;
    const weft_tensor *source;
};

/* A graph input or output. dims with a param are symbolic. */
struct onnx_io {
    char *name;
    enum weft_dtype dtype;
    int ndim;
    int64_t shape[WEFT_MAX_DIMS];
    char *params[WEFT_MAX_DIMS];
};

struct onnx_example {
    char *name;
    weft_tensor *t; /* owned reference */
};

struct weft_onnx_graph {
    struct weft_onnx_options o;
    weft_module *root;
    struct weft_named_tensor *named; /* the root's parameters, then its buffers */
    int n_named;
    struct weft_onnx_node **nodes;
    size_t n_nodes, cap_nodes;
    struct onnx_init *inits;
    size_t n_inits, cap_inits;
    struct onnx_io *inputs;
    size_t n_inputs, cap_inputs;
    struct onnx_io output;
    struct onnx_example *examples;
    size_t n_examples, cap_examples;
    /* node names used so far (base name, count), for unique names */
    struct {
        char *base;
        int count;
    } *names;
    size_t n_names, cap_names;
    char scope[1024];   /* "/transformer/h.0": the node-name prefix */
    size_t scope_len[64];
    int depth;
    char path[512];     /* "2" or "transformer.h.0": the module being exported, for messages */
    bool blamed;        /* a failure's message names its module already */
};

NN_INTERNAL weft_onnx_graph *onnx_graph_new(weft_module *root, const struct weft_onnx_options *o);
NN_INTERNAL void onnx_graph_free(weft_onnx_graph *g);
/* Records t (retained) as the example of value name; replaces an earlier one. 0 or negative. */
NN_INTERNAL int onnx_set_example(weft_onnx_graph *g, const char *name, weft_tensor *t);
/* The node that writes value name, or NULL (a graph input, an initializer). */
NN_INTERNAL struct weft_onnx_node *onnx_producer(const weft_onnx_graph *g, const char *name);
/* How many live nodes read value name. */
NN_INTERNAL int onnx_readers(const weft_onnx_graph *g, const char *name);
NN_INTERNAL struct onnx_init *onnx_init_named(const weft_onnx_graph *g, const char *name);
/* Renames value `from` to `to` wherever it appears (node inputs and outputs). */
NN_INTERNAL int onnx_rename(weft_onnx_graph *g, const char *from, const char *to);
/* Small node patterns the exporters share (besides weft/onnx.h's): Squeeze/Unsqueeze of
 * constant axes, a binary op, and a Constant node of t. */
NN_INTERNAL const char *onnx_axes_op(weft_onnx_graph *g, const char *op, const char *x, int n,
                                     const int64_t *axes);
NN_INTERNAL const char *onnx_binary(weft_onnx_graph *g, const char *op, const char *a,
                                    const char *b);
NN_INTERNAL const char *onnx_constant(weft_onnx_graph *g, weft_tensor *t);
/* t (any device) as an initializer of exactly this name. Its name (owned by g) or NULL. */
NN_INTERNAL const char *onnx_add_initializer(weft_onnx_graph *g, const char *name,
                                             weft_tensor *t);
/* ONNX's TensorProto.DataType of a weft dtype; 0 for none. */
NN_INTERNAL int onnx_dtype(enum weft_dtype dtype);

/* BatchNormalization nodes right after a Conv folded into it (options.fold_batchnorm). */
NN_INTERNAL int onnx_fold_batchnorm(weft_onnx_graph *g);
/* Writes the graph as a model to path (temp file and rename; "<path>.data" for external
 * data). 0 or negative. */
NN_INTERNAL int onnx_write(weft_onnx_graph *g, const char *path);

#endif
