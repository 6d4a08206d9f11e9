/* weft/onnx.h: models out of weft as ONNX files, torch.onnx.export's counterpart.
 *
 *     struct weft_onnx_options o = weft_onnx_defaults();   // opset 17, dynamic batch
 *     weft_tensor *x = weft_randn(2, (int64_t[]){2, 784}, WEFT_F32, WEFT_CPU);
 *     if (weft_onnx_export(model, x, &o, "model.onnx") != 0)
 *         fprintf(stderr, "%s\n", weft_error_message());
 *
 * What is written: an ONNX ModelProto, IR 8 and opset 17 by default (what Debian's
 * python3-onnx 1.12 and current ONNX Runtime both read), computing the module's forward
 * in eval mode (dropout is the identity, BatchNorm uses its running statistics). The
 * graph's input is named "input" and its output "logits" for a model of token ids
 * (integer input [B, T]) or "output" otherwise; dim 0 of the input is symbolic ("batch")
 * and, for token ids, dim 1 too ("sequence"), unless fixed by the options. Every tensor of
 * the model that the graph uses as it is becomes an initializer under its state_dict name
 * ("0.weight", "transformer.h.0.attn.c_attn.weight"); a tensor the exporter derives from
 * them (an LSTM's reordered gates, a BatchNorm folded into its Conv) is named
 * "<module>.onnx.<what>", so it is never mistaken for a state_dict entry. Constants the
 * graph needs are Constant nodes.
 *
 * How: the exporter runs the model's forward on the example input once, as
 * torch.onnx.export traces, to learn the shapes; each module type writes its own nodes
 * through the optional onnx_export method of its vtable (weft/nn.h), so a plugin's layer
 * type exports as the built-in ones do, and a module without one is refused with its
 * place in the model and its class named. The builder functions below are what those
 * methods call.
 *
 * Files: the model is written to a temporary file next to `path` and renamed over it
 * only when complete, so a failed export leaves no partial file (and an existing one
 * untouched). Protobuf limits a message to 2 GiB: a model above max_inline_bytes keeps
 * its large initializers in "<path>.data" (ONNX's external-data form, offsets aligned to
 * 4 KiB) when external_data allows it, else it is refused, saying so.
 *
 * Threads: a graph is used by one thread. Errors: weft/error.h's (sticky; the first
 * error of an export is the one reported).
 */
#ifndef WEFT_ONNX_H
#define WEFT_ONNX_H

#include <stdbool.h>
#include <stdint.h>

#include "weft/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The opsets the exporter writes: the ops it uses mean the same in each (at 20 and above
 * GELU is ONNX's Gelu op; below, its decomposition). */
#define WEFT_ONNX_OPSET_MIN 17
#define WEFT_ONNX_OPSET_MAX 21

enum weft_onnx_external_data {
    WEFT_ONNX_EXTERNAL_AUTO = 0,   /* only when the model is above max_inline_bytes */
    WEFT_ONNX_EXTERNAL_ALWAYS = 1, /* every initializer of 1 KiB or more */
    WEFT_ONNX_EXTERNAL_NEVER = 2,  /* a model above max_inline_bytes is refused */
};

/* torch.onnx.export's keyword arguments, as far as they apply. */
struct weft_onnx_options {
    int opset;        /* opset_version: WEFT_ONNX_OPSET_MIN..MAX; 0 means 17 */
    int64_t batch;    /* 0: input dim 0 symbolic ("batch"); N > 0: fixed at N */
    int64_t seq;      /* token-id inputs [B, T]: 0: dim 1 symbolic ("sequence"); N > 0: fixed */
    bool fold_batchnorm; /* a BatchNorm right after a Conv is folded into the Conv's
                            weights (one Conv node; the graph no longer shows the BN) */
    enum weft_onnx_external_data external_data;
    uint64_t max_inline_bytes; /* 0 means 2^31 - 1, protobuf's limit */
    const char *input_name;    /* NULL: "input" */
    const char *output_name;   /* NULL: "logits" for token-id inputs, else "output" */
};

/* opset 17, dynamic batch and sequence, no folding of BatchNorm, external data only when
 * needed, the default names. */
struct weft_onnx_options weft_onnx_defaults(void);

/* Writes module (any device; its float dtype) as an ONNX model to path, traced with
 * example_input (its shape gives every dim the options do not make symbolic: for token
 * ids [B, T] with T <= the model's longest sequence; with options->batch or ->seq set,
 * the example's dims must equal them). options NULL means the defaults. The module is
 * exported in eval mode and left in the mode it had. Returns 0, or negative with an
 * error: WEFT_ERR_VALUE for a bad option or an example the model does not take,
 * WEFT_ERR_NOT_IMPLEMENTED for a layer ONNX cannot express (naming it and why),
 * WEFT_ERR_IO when the file cannot be written (path named). No file is left behind on
 * error. Called with an error pending, it returns that error and does nothing (errors
 * are sticky, weft/error.h). */
int weft_onnx_export(weft_module *module, weft_tensor *example_input,
                     const struct weft_onnx_options *options, const char *path);

/* ---- building a graph: what a module type's onnx_export method calls ---------------
 *
 * Values are named by strings the graph owns (valid until the export ends). A function
 * given a NULL value name (an earlier call failed and set the error) does nothing and
 * returns NULL, so a chain of calls needs one check at its end; an optional input that
 * is left out is "" (ONNX's convention). */

typedef struct weft_onnx_graph weft_onnx_graph;
typedef struct weft_onnx_node weft_onnx_node;

/* The options of this export (the defaults filled in: opset is never 0). */
const struct weft_onnx_options *weft_onnx_graph_options(const weft_onnx_graph *g);

/* The tensor that flows through value `name` when the example input runs through weft's
 * forward (borrowed): its ndim, the static sizes of its dims, its dtype. Where a dim is
 * symbolic the example's size is only one instance: write nodes that do not depend on it
 * (Reshape with 0 and -1, Shape). NULL (no error) for a value without an example. */
weft_tensor *weft_onnx_example(const weft_onnx_graph *g, const char *name);

/* A container's call for each child: exports child m (named `name` in its parent, which
 * becomes part of the node names) from value input through m's onnx_export, records the
 * example of the output (m's forward of input's example) and returns the output's name.
 * A type without onnx_export is refused: "layer 2 (Upsample): Upsample has no ONNX export
 * (its module type has no onnx_export method)". Errors of the method are prefixed with
 * the layer's place the same way. */
const char *weft_onnx_export_module(weft_onnx_graph *g, weft_module *m, const char *name,
                                    const char *input);

/* A node of op_type (default ONNX domain) with n_inputs inputs and n_outputs new outputs,
 * named after the op and the scope ("/0/Gemm", output "/0/Gemm_output_0"). NULL when an
 * input is NULL or out of memory. */
weft_onnx_node *weft_onnx_node_add(weft_onnx_graph *g, const char *op_type, int n_inputs,
                                   const char *const *inputs, int n_outputs);
/* Its i-th output's name, or NULL for NULL. */
const char *weft_onnx_node_output(const weft_onnx_node *node, int i);
/* Attributes (NULL node: nothing happens). */
void weft_onnx_attr_int(weft_onnx_node *node, const char *name, int64_t v);
void weft_onnx_attr_float(weft_onnx_node *node, const char *name, float v);
void weft_onnx_attr_string(weft_onnx_node *node, const char *name, const char *v);
void weft_onnx_attr_ints(weft_onnx_node *node, const char *name, int n, const int64_t *v);
void weft_onnx_attr_strings(weft_onnx_node *node, const char *name, int n,
                            const char *const *v);
/* A one-output node without attributes; its output's name. */
const char *weft_onnx_op(weft_onnx_graph *g, const char *op_type, int n_inputs,
                         const char *const *inputs);

/* Small patterns: Reshape to a constant shape (0 copies the input's dim, -1 is
 * inferred), Transpose by perm, and F.gelu(x, approximate) on x of dtype (ONNX's Gelu from
 * opset 20; below, the decomposition ONNX Runtime fuses back into one kernel). */
const char *weft_onnx_reshape(weft_onnx_graph *g, const char *x, int n, const int64_t *shape);
const char *weft_onnx_transpose(weft_onnx_graph *g, const char *x, int n, const int64_t *perm);
const char *weft_onnx_gelu(weft_onnx_graph *g, const char *x,
                           enum weft_gelu_approximate approximate, enum weft_dtype dtype);

/* m's own parameter or buffer `name` as an initializer under its state_dict name (a
 * tensor reached twice, as a tied weight, is one initializer). NULL with an error when m
 * has no such tensor or it is not part of the exported model. */
const char *weft_onnx_param(weft_onnx_graph *g, const weft_module *m, const char *name);
/* t (any device, kept by reference until the file is written) as an initializer named
 * "<m's state_dict prefix>.onnx.<name>": for tensors an exporter derives from m's. */
const char *weft_onnx_initializer(weft_onnx_graph *g, const weft_module *m, const char *name,
                                  weft_tensor *t);
/* Constant nodes: an int64 vector [n] (n >= 0), and a 0-dim scalar of a float dtype or
 * int64. */
const char *weft_onnx_const_ints(weft_onnx_graph *g, int n, const int64_t *v);
const char *weft_onnx_const_scalar(weft_onnx_graph *g, enum weft_dtype dtype, double v);

/* Declares a graph input: dims with a dim_params[i] (not NULL) are symbolic, the others
 * shape[i]. For a layer whose ONNX form takes other inputs than the model's tensor (a
 * sparse layer's indices and values): an input no node reads is dropped from the graph.
 * Returns its name (an existing input of that name is an error). */
const char *weft_onnx_input(weft_onnx_graph *g, const char *name, enum weft_dtype dtype,
                            int ndim, const int64_t *shape, const char *const *dim_params);
/* The symbolic name of the batch dim ("batch"), or NULL when options->batch fixes it. */
const char *weft_onnx_batch_param(const weft_onnx_graph *g);

/* Node names below this point start with "/<name>" until the matching pop (an exporter
 * that writes a whole tree itself, as GPT's, names its parts so). */
void weft_onnx_scope_push(weft_onnx_graph *g, const char *name);
void weft_onnx_scope_pop(weft_onnx_graph *g);

#ifdef __cplusplus
}
#endif
#endif
