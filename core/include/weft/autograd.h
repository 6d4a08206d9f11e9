/* weft/autograd.h: define-by-run automatic differentiation, PyTorch's rules.
 *
 * A tensor requires grad when it is a leaf marked with weft_requires_grad_() or the
 * output of an op recorded while grad mode was on and an input required grad. Recording
 * makes a node (its grad_fn, e.g. "MulBackward0") that holds the backward formula, the
 * tensors it saved (with their versions) and edges to the nodes of its inputs.
 * weft_backward() walks the graph in dependency order and accumulates into the .grad of
 * leaves (and of non-leaves that called weft_retain_grad()).
 */
#ifndef WEFT_AUTOGRAD_H
#define WEFT_AUTOGRAD_H

#include <stdbool.h>

#include "weft/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the user API ------------------------------------------------------------------- */

/* Marks a leaf as requiring grad (or not). Errors as PyTorch: "Only Tensors of floating
 * point dtype can require gradients"; "you can only change requires_grad flags of leaf
 * variables." (turning it off on a non-leaf). Returns 0 or negative. */
int weft_requires_grad_(weft_tensor *t, bool requires_grad);
bool weft_requires_grad(const weft_tensor *t);
bool weft_is_leaf(const weft_tensor *t);
/* The accumulated gradient (a new reference), or NULL without error when none. */
weft_tensor *weft_grad(const weft_tensor *t);
/* Replaces .grad (NULL clears it); shape, dtype and device must match. */
int weft_set_grad(weft_tensor *t, weft_tensor *grad);
/* Clears .grad (set_to_none, PyTorch's default) or zeroes it in place. */
int weft_zero_grad(weft_tensor *t, bool set_to_none);
/* Keeps .grad for a non-leaf; a no-op on leaves. "can't retain_grad on Tensor that has
 * requires_grad=False". */
int weft_retain_grad(weft_tensor *t);
/* "MulBackward0"; NULL for leaves and tensors without history. A view whose base (or
 * another view of the base) changed in place after the view was taken reports
 * "AsStridedBackward0": its grad_fn is made again from the base's history, as PyTorch's. */
const char *weft_grad_fn_name(const weft_tensor *t);
/* grad_fn.next_functions: the names of the nodes t's grad_fn hands gradients to, one per
 * input of its op ("AccumulateGrad" for a leaf, NULL for an input that needs no gradient),
 * the first max of them into names (which may be NULL). Returns how many inputs the node
 * has: 0 for a leaf or a tensor without history. */
int weft_grad_fn_next_functions(const weft_tensor *t, int max, const char **names);

/* Backpropagates from root. grad NULL means ones (root must have one element: "grad can
 * be implicitly created only for scalar outputs"). Frees the graph's saved tensors unless
 * retain_graph. Returns 0 or negative. */
int weft_backward(weft_tensor *root, weft_tensor *grad, bool retain_graph);

/* Grad mode (thread-local, on by default). weft_no_grad_begin() turns it off and returns
 * the previous state for weft_grad_mode_restore(). */
bool weft_grad_enabled(void);
void weft_set_grad_enabled(bool enabled);
bool weft_no_grad_begin(void);
void weft_grad_mode_restore(bool previous);

/* ---- activation checkpointing ------------------------------------------------------ */

/* torch.utils.checkpoint(fn, *inputs, use_reentrant=False): runs fn(ctx, n, inputs) and
 * records its graph, but keeps none of the tensors its ops save for backward; the backward
 * reruns fn (on detached inputs, with the random generator's offset and the autocast state
 * of this call) when it first needs them. fn must compute the same thing each time: the
 * rerun must save as many tensors ("checkpoint: the recomputed forward saved ..."
 * otherwise). Without grad mode, or inside another checkpoint, fn simply runs. Returns
 * fn's result. The inputs are held until the backward is done with them. */
#define WEFT_CHECKPOINT_MAX_INPUTS 8
typedef weft_tensor *(*weft_checkpoint_fn)(void *ctx, int n, weft_tensor *const *inputs);
weft_tensor *weft_checkpoint(weft_checkpoint_fn fn, void *ctx, int n, weft_tensor *const *inputs);

/* ---- hooks ------------------------------------------------------------------------------ */

/* Called with the leaf once backward has accumulated a gradient into its .grad (which
 * weft_grad() then returns): torch's register_post_accumulate_grad_hook. Runs on the
 * thread running backward, with grad mode off; a negative return fails the backward. */
typedef int (*weft_grad_hook_fn)(weft_tensor *leaf, void *ctx);
/* Registers fn on a leaf that requires grad ("post accumulate grad hooks cannot be
 * registered on non-leaf tensors..."); hooks run in registration order. Returns a handle
 * (> 0) for weft_remove_hook, or negative. */
int weft_register_post_accumulate_grad_hook(weft_tensor *leaf, weft_grad_hook_fn fn, void *ctx);
int weft_remove_hook(weft_tensor *t, int handle);
/* From inside a backward (a hook or a backward function): fn(ctx) runs once, after the
 * backward has run every node and before weft_backward returns, on the same thread; also
 * when the backward failed, so that fn can clean up (torch's
 * Variable._execution_engine.queue_callback). A negative return becomes weft_backward's
 * when it had none. Outside a backward: an error. */
int weft_autograd_queue_callback(int (*fn)(void *ctx), void *ctx);

/* Anomaly mode (process-wide): the first backward node that returns NaN/Inf fails with
 * "Function 'MulBackward0' returned nan values in its 0th output." */
void weft_set_anomaly_enabled(bool enabled);
bool weft_anomaly_enabled(void);

/* ---- defining differentiable ops (core ops, plugins) -------------------------------- */

struct weft_node;

/* Computes grad_inputs[i] for each input i with weft_node_needs_input_grad(node, i)
 * (NULL means zero). Results are references owned by the engine's scope: tensors made by
 * weft ops are; to pass a grad_output through unchanged, return
 * weft_autorelease(weft_tensor_retain(g)). grad_outputs[j] is the gradient of forward output j
 * (NULL when no gradient reached it). Runs with grad mode off, inside a scope. Any
 * broadcast the forward did may be left in the result: the engine sums it back to the
 * input's shape and converts it to the input's dtype. Returns 0 or negative. */
typedef int (*weft_backward_fn)(struct weft_node *node, weft_tensor *const *grad_outputs,
                                weft_tensor **grad_inputs);

/* True when grad mode is on and one of the tensors requires grad. */
bool weft_autograd_needed(int n, weft_tensor *const *tensors);
/* The same, with its common answer inline for front ends in other libraries: tensors that
 * autograd never touched (no metadata) need nothing, whatever the grad mode, and asking
 * costs no call into libweft. */
static inline bool weft_autograd_needed_inline(int n, weft_tensor *const *tensors)
{
    for (int i = 0; i < n; i++)
        if (tensors[i] && tensors[i]->autograd)
            return weft_autograd_needed(n, tensors);
    return false;
}

/* A new node named `name` (a string literal or otherwise static) with edges to the
 * inputs' histories (NULL inputs and inputs that do not require grad get no edge) and
 * room for num_saved saved tensors. The caller owns the node until weft_node_finish. */
struct weft_node *weft_node_create(const char *name, weft_backward_fn backward, int num_inputs,
                                   weft_tensor *const *inputs, int num_saved);
/* Saves t in slot, remembering its current version; saving an output of this node keeps
 * a detached alias so the graph has no cycle. */
int weft_node_save(struct weft_node *node, int slot, weft_tensor *t);
/* The saved tensor (borrowed), NULL if the slot is empty. */
weft_tensor *weft_node_saved(struct weft_node *node, int slot);
/* Per-node parameters copied from the forward (dims, scalars). */
int64_t *weft_node_ints(struct weft_node *node);    /* 16 entries */
double *weft_node_scalars(struct weft_node *node);  /* 4 entries */
int weft_node_num_inputs(const struct weft_node *node);
bool weft_node_needs_input_grad(const struct weft_node *node, int i);
/* Forward input i's shape and dtype as recorded. */
int weft_node_input_ndim(const struct weft_node *node, int i);
const int64_t *weft_node_input_shape(const struct weft_node *node, int i);
enum weft_dtype weft_node_input_dtype(const struct weft_node *node, int i);
/* Makes node the grad_fn of outputs (output j gets output_nr j), consuming the caller's
 * reference. For in-place ops the output is the modified input: its history is replaced
 * (the node's edge to the old history was taken at create time). Returns 0 or negative;
 * on failure the node is freed. */
int weft_node_finish(struct weft_node *node, int num_outputs, weft_tensor *const *outputs);
/* Frees a node that will not be finished (an error path). */
void weft_node_abandon(struct weft_node *node);
/* weft_node_finish for one output, as a front end ends: returns out, now with node as its
 * grad_fn; or NULL, with node freed and out discarded (weft_tensor_discard), when either
 * is NULL or finishing failed. */
weft_tensor *weft_node_finish1(struct weft_node *node, weft_tensor *out);
/* weft_node_finish1 for a view op (out a view of in's storage): also marks node as a
 * view's, so in-place checks find the leaf a view came from, and records in out the
 * tensor at the root of its views and the storage's version: an in-place op on out
 * rebases that tensor's history (PyTorch's CopySlices), and once the version moves (the
 * base or another of its views changed in place) out's grad_fn is made again from the
 * base's history (AsStridedBackward0), as PyTorch regenerates a view's. */
weft_tensor *weft_node_finish_view(struct weft_node *node, weft_tensor *in, weft_tensor *out);
/* For a view op that recorded no node (out a view of in's storage): a view made with grad
 * mode off of a tensor that requires grad requires grad as PyTorch's does, with no
 * grad_fn and no gradient flowing through it to in; modifying it in place with grad mode
 * on is PyTorch's error. Returns out (NULL when marking it failed). */
weft_tensor *weft_autograd_view_untracked(weft_tensor *in, weft_tensor *out);
/* The same, its common answer inline: a tensor autograd never touched needs nothing. */
static inline weft_tensor *weft_autograd_view_untracked_inline(weft_tensor *in, weft_tensor *out)
{
    return in && in->autograd ? weft_autograd_view_untracked(in, out) : out;
}
/* Saves an output of the node itself (its producer is the node) in slot: a detached alias
 * that remembers output_nr, so the graph holds no cycle and backward can see the output
 * was changed in place. */
int weft_node_save_output(struct weft_node *node, int slot, weft_tensor *t, int output_nr);

/* Evaluates expr, an op's forward computation, with grad mode off when rec (the op will
 * record one node itself), so that the ops it is made of record nothing. GNU C. */
#define WEFT_NO_GRAD(rec, expr)                                                               \
    ({                                                                                        \
        bool weft_prev_mode__ = (rec) ? weft_no_grad_begin() : true;                         \
        __typeof__(expr) weft_result__ = (expr);                                              \
        if (rec)                                                                              \
            weft_grad_mode_restore(weft_prev_mode__);                                         \
        weft_result__;                                                                        \
    })

/* ---- the ops the engine computes with ------------------------------------------------
 * The engine sums the gradients that reach a tensor, accumulates them into .grad, sums
 * them back over the dims the forward broadcast, and scatters them back through
 * as_strided, with ops of the op layer above the core (libweft-ops). That library
 * installs them when it loads, as libtorch installs autograd into c10's TensorImpl
 * through AutogradMetaFactory; until then a backward that needs one fails, naming it. */
struct weft_autograd_ops {
    size_t struct_size; /* sizeof(struct weft_autograd_ops) */
    weft_tensor *(*add)(weft_tensor *a, weft_tensor *b);
    weft_tensor *(*add_)(weft_tensor *a, weft_tensor *b);
    weft_tensor *(*sum)(weft_tensor *t, int ndims, const int *dims, bool keepdim);
    weft_tensor *(*scatter_add)(weft_tensor *t, int dim, weft_tensor *index, weft_tensor *src);
    /* The random stream's position (weft_random_offset / weft_random_set_offset): an
     * activation checkpoint reruns its segment from the offset its forward started at, so
     * that dropout draws the same masks (torch.utils.checkpoint's preserve_rng_state). */
    uint64_t (*random_offset)(void);
    void (*random_set_offset)(uint64_t offset);
};
/* Installs the ops (copied); returns 0, or an error for a struct of another size. */
int weft_autograd_set_ops(const struct weft_autograd_ops *ops);
/* Checks before an in-place op on t: errors for a leaf that requires grad ("a leaf
 * Variable that requires grad is being used in an in-place operation.") and for views
 * when recording (weft refuses rather than risk a wrong gradient). */
int weft_autograd_check_inplace(weft_tensor *t, bool recording);

#ifdef __cplusplus
}
#endif
#endif
