/* weft/nn.h: layers, losses and modules, with PyTorch's names, defaults and semantics.
 *
 * The functional layer (weft_linear, weft_conv2d, ...) is made of recorded ops or of
 * ops with their own backward nodes, so every layer is differentiable on every backend
 * that has its kernels. Modules own their parameters (leaf tensors that require grad)
 * and buffers, and name them as torch.nn does ("0.weight", "3.running_mean"), so a
 * state_dict saved by weft loads into PyTorch and back.
 *
 * Tensors follow weft/tensor.h's ownership rules (new references, autorelease scopes);
 * modules are plain owned objects: whoever creates one frees it with weft_module_free,
 * and a container owns the children added to it.
 */
#ifndef WEFT_NN_H
#define WEFT_NN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "weft/options.h"
#include "weft/registry.h"
#include "weft/rnn.h" /* RNN, LSTM, GRU */
#include "weft/state_dict.h"
#include "weft/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- functional layers ------------------------------------------------------------- */

/* x @ weight^T + bias; weight [out, in], bias [out] or NULL; x [..., in]. */
weft_tensor *weft_linear(weft_tensor *x, weft_tensor *weight, weft_tensor *bias);
/* relu(weft_linear(x, weight, bias)), the same values, with the bias and the ReLU applied
 * in one pass over the GEMM's output where the backend has add_bias_relu, and one node
 * whose backward is one threshold_backward pass, two GEMMs and the bias sum. The node is
 * named ReluBackward0, the grad_fn PyTorch shows on relu(linear(...))'s output; unlike
 * PyTorch's, its next_functions are x's, weight's and bias's own (one node, not an
 * AddmmBackward0 first). Sequential runs a Linear followed by a ReLU through it. */
weft_tensor *weft_linear_relu(weft_tensor *x, weft_tensor *weight, weft_tensor *bias);

struct weft_conv2d_params {
    int64_t stride[2];   /* 0 means 1 */
    int64_t padding[2];
    int64_t dilation[2]; /* 0 means 1 */
    int64_t groups;      /* 0 means 1 */
};
/* x [N, C_in, H, W] (or [C_in, H, W]), weight [C_out, C_in/groups, kH, kW], bias [C_out]
 * or NULL; params NULL means stride 1, no padding, dilation 1, groups 1. */
weft_tensor *weft_conv2d(weft_tensor *x, weft_tensor *weight, weft_tensor *bias,
                         const struct weft_conv2d_params *params);

struct weft_pool2d_params {
    int64_t kernel[2];
    int64_t stride[2];   /* 0 means the kernel size (PyTorch's default) */
    int64_t padding[2];
    int64_t dilation[2]; /* max pooling only; 0 means 1 */
    bool ceil_mode;
    bool count_include_pad; /* avg pooling; PyTorch's default is true */
};
weft_tensor *weft_max_pool2d(weft_tensor *x, const struct weft_pool2d_params *params);
weft_tensor *weft_avg_pool2d(weft_tensor *x, const struct weft_pool2d_params *params);
/* F.max_pool2d(return_indices=True): the values, and in *indices (a new reference, NULL
 * on error) the int64 position h * W + w of each maximum within its input plane. */
weft_tensor *weft_max_pool2d_with_indices(weft_tensor *x, const struct weft_pool2d_params *params,
                                          weft_tensor **indices);
/* F.max_unpool2d: x [N, C, H, W] (or [C, H, W]) placed at the int64 indices (of x's shape)
 * into zeros of [N, C, oH, oW]; output_size NULL gives (H - 1) * stride - 2 * padding +
 * kernel per dim (params' kernel, stride, padding), else output_size[0..1]. Node
 * MaxUnpool2DBackward0 (the gradient gathered back at the indices). */
weft_tensor *weft_max_unpool2d(weft_tensor *x, weft_tensor *indices,
                               const struct weft_pool2d_params *params, const int64_t *output_size);
weft_tensor *weft_adaptive_avg_pool2d(weft_tensor *x, int64_t out_h, int64_t out_w);

/* Batch norm over dim 1 of [N, C] or [N, C, ...]. In training, normalises with the
 * batch statistics and updates running_mean/var in place (unbiased variance, PyTorch's
 * momentum convention); in eval, uses the running statistics. weight/bias/running
 * tensors may be NULL. */
weft_tensor *weft_batch_norm(weft_tensor *x, weft_tensor *running_mean, weft_tensor *running_var,
                             weft_tensor *weight, weft_tensor *bias, bool training,
                             double momentum, double eps);
/* Normalises over the last `ndims` dims, which must equal normalized_shape. */
weft_tensor *weft_layer_norm(weft_tensor *x, int ndims, const int64_t *normalized_shape,
                             weft_tensor *weight, weft_tensor *bias, double eps);
/* Zeroes elements with probability p (Philox) and scales the rest by 1/(1-p) when
 * training; identity otherwise. */
weft_tensor *weft_dropout(weft_tensor *x, double p, bool training);
/* F.dropout2d: whole channels zeroed with probability p (the mask [N, C, 1, ...] drawn as
 * weft_dropout draws), the kept scaled by 1 / (1 - p). PyTorch 1.13's shapes: a 3-D input
 * is (N, C, L) (channel-wise 1-D dropout) and a 2-D one element-wise, each with its
 * UserWarning (printed once to stderr); fewer than 2 dims is an error. */
weft_tensor *weft_dropout2d(weft_tensor *x, double p, bool training);
/* Rows of weight [num, dim] picked by integer indices of any shape. */
weft_tensor *weft_embedding(weft_tensor *indices, weft_tensor *weight);
/* F.embedding(indices, weight, padding_idx): the same rows, but the row padding_idx
 * (negative: from the end; within [-num, num), else "Padding_idx must be within
 * num_embeddings") gets no gradient. */
weft_tensor *weft_embedding_padding(weft_tensor *indices, weft_tensor *weight,
                                    int64_t padding_idx);
weft_tensor *weft_leaky_relu(weft_tensor *x, double negative_slope);

/* torch.nn.functional.gelu's `approximate`: "none" is x * Phi(x) (the GELU op of
 * weft/ops.h), "tanh" is 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3))). */
enum weft_gelu_approximate { WEFT_GELU_NONE = 0, WEFT_GELU_TANH = 1 };
/* F.gelu(x, approximate=...); one node (GeluBackward0) either way. */
weft_tensor *weft_gelu_approximate(weft_tensor *x, enum weft_gelu_approximate approximate);
/* gelu(weft_linear(x, weight, bias), approximate), the same values within float rounding:
 * the bias and GELU in one pass over the GEMM's output where the backend has
 * add_bias_gelu, and one node (GeluBackward0, as PyTorch names gelu(linear(...))'s
 * grad_fn; its next_functions are x's, weight's and bias's own) whose backward is one
 * gelu_backward pass over the kept pre-activation, two GEMMs and the bias sum (a GPT
 * block's c_fc and GELU). Without a bias it is gelu(linear(...)). */
weft_tensor *weft_linear_gelu(weft_tensor *x, weft_tensor *weight, weft_tensor *bias,
                              enum weft_gelu_approximate approximate);

/* ---- resampling and distances ------------------------------------------------------ */

#define WEFT_INTERPOLATE_MAX_DIMS 3
/* F.interpolate's keyword arguments. A count of -1 is a single number for every spatial
 * dim (size=5), 0 is None, n > 0 a list of n (size=(5, 7)). */
struct weft_interpolate_params {
    /* "nearest" (also NULL), "nearest-exact", "linear" (3-D), "bilinear", "bicubic"
     * (4-D), "area" (adaptive average pooling) */
    const char *mode;
    int nsize;
    int64_t size[WEFT_INTERPOLATE_MAX_DIMS];
    int nscale;
    double scale_factor[WEFT_INTERPOLATE_MAX_DIMS];
    int align_corners;          /* -1 None (False for linear modes), 0 False, 1 True */
    int recompute_scale_factor; /* -1 None, 0 False, 1 True */
};
/* F.interpolate(x, size, scale_factor, mode, align_corners, recompute_scale_factor) on
 * [N, C, L] or [N, C, H, W] (any strides), floating dtypes (and uint8 in the nearest
 * modes, as PyTorch's kernels take it): PyTorch 1.13's values (the
 * scale_factor given without recompute_scale_factor also places the samples, at
 * 1 / scale), its errors (ValueError / NotImplementedError / RuntimeError with its words)
 * and its grad_fn (UpsampleBilinear2DBackward1, ...). The backward is the deterministic
 * adjoint; it is not itself differentiable. params NULL is an error (no size). 5-D inputs
 * and antialias are not implemented. */
weft_tensor *weft_interpolate(weft_tensor *x, const struct weft_interpolate_params *params);

/* torch.cdist's compute_mode: use_mm_for_euclid_dist_if_necessary (p = 2 by matrix
 * multiplication when either side has more than 25 rows), use_mm_for_euclid_dist,
 * donot_use_mm_for_euclid_dist. */
enum weft_cdist_compute_mode {
    WEFT_CDIST_USE_MM_IF_NECESSARY = 0,
    WEFT_CDIST_USE_MM = 1,
    WEFT_CDIST_DONOT_USE_MM = 2,
};
/* torch.cdist(x1, x2, p): x1 [..., P, M], x2 [..., R, M] (batch dims broadcast, any
 * strides, one floating dtype) -> [..., P, R], the p-norm (p >= 0; 0 counts differing
 * coordinates, INFINITY takes the largest) of each row difference. Differentiable with
 * PyTorch's conventions (zero gradient at zero distance; for p = inf the gradient goes to
 * every coordinate attaining the maximum). The matrix-multiply formula for p = 2 is
 * faster but loses precision for distances much smaller than the points' norms. */
weft_tensor *weft_cdist(weft_tensor *x1, weft_tensor *x2, double p);
weft_tensor *weft_cdist_mode(weft_tensor *x1, weft_tensor *x2, double p,
                             enum weft_cdist_compute_mode compute_mode);

/* ---- attention ------------------------------------------------------------------- */

/* torch.nn.functional.scaled_dot_product_attention's keyword arguments. */
struct weft_sdpa_params {
    /* NULL; or bool [..., L, S] broadcastable to the scores (true takes part, as
     * PyTorch's bool masks); or floating, added to the scores. */
    weft_tensor *attn_mask;
    double dropout_p; /* on the attention weights (Philox), as PyTorch: pass 0 in eval */
    bool is_causal;   /* query i sees keys j <= i (PyTorch's tril(ones(L, S))); not with a mask */
    /* The scores' factor, used as given (negative and 0 too; PyTorch 2's scale=), or NULL
     * for PyTorch's default, 1 / sqrt(E). */
    const double *scale;
};
/* softmax(q k^T * scale + mask) v: q [..., L, E], k [..., S, E], v [..., S, Ev] with the
 * batch dims broadcast -> [..., L, Ev]. params NULL means no mask, no dropout, not causal,
 * the default scale. Computed without materialising [L, S] where the backend has the
 * fused kernel (online softmax; the backward recomputes), else by matmul and softmax. */
weft_tensor *weft_scaled_dot_product_attention(weft_tensor *q, weft_tensor *k, weft_tensor *v,
                                               const struct weft_sdpa_params *params);

/* ---- losses ------------------------------------------------------------------------ */

enum weft_reduction { WEFT_REDUCTION_MEAN = 0, WEFT_REDUCTION_SUM, WEFT_REDUCTION_NONE };

struct weft_cross_entropy_params {
    enum weft_reduction reduction;
    int64_t ignore_index;   /* PyTorch's default is -100 */
    double label_smoothing; /* 0..1 */
    weft_tensor *weight;    /* per-class weights [C] or NULL */
};
/* PyTorch's defaults: mean, ignore_index -100, no smoothing, no weights. */
struct weft_cross_entropy_params weft_cross_entropy_defaults(void);

/* logits [N, C] (or [N, C, d...], or [C] unbatched), target int64 class indices [N] (or
 * [N, d...]): fused log-softmax + NLL, numerically stable, with one backward node.
 * Or target of the logits' shape: class probabilities (a floating dtype; ignore_index must
 * stay negative), PyTorch's -(log_softmax(x) * t * w).sum(class dim), summed or divided
 * by the number of positions, from recorded ops. params NULL means the defaults. */
weft_tensor *weft_cross_entropy(weft_tensor *logits, weft_tensor *target,
                                const struct weft_cross_entropy_params *params);
/* log_probs [N, C], target int64 [N]; label_smoothing is ignored. */
weft_tensor *weft_nll_loss(weft_tensor *log_probs, weft_tensor *target,
                           const struct weft_cross_entropy_params *params);
/* In the operands' promoted dtype, as PyTorch (an integer input with a float target is a
 * float loss; two integer operands are refused, and l1_loss's mean of them). */
weft_tensor *weft_mse_loss(weft_tensor *input, weft_tensor *target, enum weft_reduction reduction);
weft_tensor *weft_l1_loss(weft_tensor *input, weft_tensor *target, enum weft_reduction reduction);
/* F.smooth_l1_loss(input, target, reduction, beta): 0.5 d^2 / beta where |d| < beta, else
 * |d| - 0.5 beta (beta 0: l1); F.huber_loss(..., delta): 0.5 d^2 where |d| < delta, else
 * delta (|d| - 0.5 delta). d = input - target (broadcast); nodes SmoothL1LossBackward0,
 * HuberLossBackward0. beta >= 0, delta > 0 (PyTorch's texts otherwise). */
weft_tensor *weft_smooth_l1_loss(weft_tensor *input, weft_tensor *target,
                                 enum weft_reduction reduction, double beta);
weft_tensor *weft_huber_loss(weft_tensor *input, weft_tensor *target,
                             enum weft_reduction reduction, double delta);
/* F.unfold(x, kernel_size, dilation, padding, stride) (PyTorch's im2col): x [N, C, H, W]
 * or [C, H, W] -> [N, C*kH*kW, L] (or [C*kH*kW, L]), L the number of blocks; each pair
 * (H, W). Node Im2ColBackward0 (its adjoint, col2im). */
weft_tensor *weft_im2col(weft_tensor *x, const int64_t kernel[2], const int64_t dilation[2],
                         const int64_t padding[2], const int64_t stride[2]);
/* F.fold(x, output_size, kernel_size, dilation, padding, stride) (PyTorch's col2im), the
 * adjoint of F.unfold: x [N, C*kH*kW, L] or [C*kH*kW, L] -> [N, C, H, W] (or [C, H, W]),
 * (H, W) = output_size, each block added where it came from (overlaps sum). L must be
 * the number of blocks of that geometry; PyTorch 1.13's checks and texts. Node
 * Col2ImBackward0 (its gradient is unfold's). */
weft_tensor *weft_col2im(weft_tensor *x, const int64_t output_size[2], const int64_t kernel[2],
                         const int64_t dilation[2], const int64_t padding[2],
                         const int64_t stride[2]);
/* F.binary_cross_entropy on probabilities: -w (t log(x) + (1 - t) log(1 - x)) with each
 * log clamped at -100, as PyTorch; input values outside [0, 1] are "all elements of input
 * should be between 0 and 1". target of input's shape and dtype, weight NULL or
 * broadcastable to it. Node BinaryCrossEntropyBackward0 (input and target). */
weft_tensor *weft_binary_cross_entropy(weft_tensor *input, weft_tensor *target,
                                       weft_tensor *weight, enum weft_reduction reduction);
/* pos_weight [C] or NULL. */
weft_tensor *weft_binary_cross_entropy_with_logits(weft_tensor *input, weft_tensor *target,
                                                   weft_tensor *pos_weight,
                                                   enum weft_reduction reduction);

/* ---- modules ----------------------------------------------------------------------- */

typedef struct weft_module weft_module;
struct weft_onnx_graph; /* weft/onnx.h */

/* What a kind of module does: a vtable of kind WEFT_KIND_MODULE (weft/registry.h) whose
 * name is the type an INI file names ([layer.fc1] type = linear). Types with create() are
 * registered, so weft-train builds models through the registry and a plugin adds a layer
 * type by registering one (its manifest saying "provides module:<name>"); a type that
 * only a program uses may stay unregistered (weft_module_new checks it all the same). */
/* "module", as a symbol of libweft-nn: a vtable that names its kind links the library that
 * defines it, which registers the kind when it loads, before a plugin's init() runs. */
extern const char weft_kind_module[];
#define WEFT_KIND_MODULE weft_kind_module

struct weft_module_type {
    struct weft_vtable base; /* kind WEFT_KIND_MODULE; name: "linear" */
    const char *class_name;  /* PyTorch's class name, for repr and messages: "Linear" */
    /* Required: the forward computation (a new reference, or NULL with an error). */
    weft_tensor *(*forward)(weft_module *m, weft_tensor *input);
    /* Optional: frees the state pointer given to weft_module_new. */
    void (*free_state)(void *state);
    /* Optional: the text inside the parentheses of the repr ("in_features=784, ..."). */
    int (*extra_repr)(const weft_module *m, char *buf, size_t size);
    /* Optional: a new module built from options (the keys of torch.nn's constructor:
     * in_features, out_features, bias), or NULL with an error that names the key. */
    weft_module *(*create)(const weft_options *options);
    /* Added in ABI 2 (after create). Optional: writes the options create() would rebuild
     * this module from into meta as "model.<key>" = "<value>" ("model.n_layer" = "4");
     * "model.type" is written by weft_module_config_export. 0 or negative. */
    int (*config_export)(const weft_module *m, struct weft_metadata *meta);
    /* Added in ABI 2 (after config_export). Optional: writes into g the ONNX nodes that
     * compute forward in eval mode from the value named input, through weft/onnx.h's
     * builder, and returns the output value's name (owned by g), or NULL with an error
     * that says why this module cannot be exported. Without it, weft_onnx_export refuses
     * the module, naming it. */
    const char *(*onnx_export)(weft_module *m, struct weft_onnx_graph *g, const char *input);
};

/* A new module of the registered type `name` built from options (loading the plugin
 * that provides module:<name> on first use); NULL with an error naming the type, the
 * registered ones and the closest, or what create() said. */
weft_module *weft_module_create(const char *name, const weft_options *options);

/* A module of `type` owning `state` (freed by type->free_state). NULL on error, and the
 * state then stays the caller's. */
weft_module *weft_module_new(const struct weft_module_type *type, void *state);
void weft_module_free(weft_module *m); /* frees children too; NULL is ignored */
void *weft_module_state(const weft_module *m);
/* The type's class name ("Linear"); NULL for NULL. */
const char *weft_module_type_name(const weft_module *m);
const struct weft_module_type *weft_module_type(const weft_module *m);

/* Registers a parameter (made a leaf that requires grad) or a buffer; the module takes
 * its own reference. Names must be unique within the module and contain no '.'. */
int weft_module_register_parameter(weft_module *m, const char *name, weft_tensor *t);
int weft_module_register_buffer(weft_module *m, const char *name, weft_tensor *t);
/* Adds a child under `name`; the module takes ownership (also on failure, except when
 * child already has a parent or is m or one of its ancestors, which are refused). */
int weft_module_add_child(weft_module *m, const char *name, weft_module *child);
/* This module's own parameter/buffer/child by name (borrowed), or NULL. */
weft_tensor *weft_module_parameter(const weft_module *m, const char *name);
weft_tensor *weft_module_buffer(const weft_module *m, const char *name);
weft_module *weft_module_child(const weft_module *m, const char *name);
/* The children in registration order, for walking a tree (Module.named_children()):
 * their count, child i (borrowed; NULL out of range) and its own name (owned by m). */
int weft_module_num_children(const weft_module *m);
weft_module *weft_module_child_at(const weft_module *m, int i);
const char *weft_module_child_name(const weft_module *m, int i);
/* Module swapping in place, as torch.ao.quantization's convert and fuse_modules replace a
 * child: a and b exchange everything but their identity and their place in the tree (type,
 * state, parameters, buffers, children, training mode), so whoever holds a (its parent, a
 * model's state that keeps a pointer to it) runs b's computation from then on. b must have
 * no parent; it keeps a's old contents and stays its caller's to free. 0 or negative. */
int weft_module_swap(weft_module *a, weft_module *b);

/* Runs forward (a new reference). */
weft_tensor *weft_module_forward(weft_module *m, weft_tensor *input);

/* torch.nn.modules.module.register_module_forward_hook: hook(ctx, module, input, output)
 * runs after the forward of every module called through weft_module_forward (output NULL
 * when the forward failed), for tools such as a model summary (torchinfo records the
 * output shapes of nested modules this way). While one is registered, Sequential runs
 * every layer through weft_module_forward (it fuses Linear with a following ReLU or GELU
 * otherwise), so each is seen, as in PyTorch. Global and not locked: register and remove
 * where no forward runs on another thread. Returns a handle > 0 for
 * weft_remove_module_forward_hook, or WEFT_ERR_VALUE (fn NULL, or 8 already registered). */
typedef void (*weft_module_forward_hook)(void *ctx, weft_module *m, weft_tensor *input,
                                         weft_tensor *output);
int weft_register_module_forward_hook(weft_module_forward_hook fn, void *ctx);
void weft_remove_module_forward_hook(int handle); /* an unknown handle is ignored */
/* Sets training mode recursively (PyTorch's train()/eval()). */
void weft_module_train(weft_module *m, bool training);
bool weft_module_is_training(const weft_module *m);
/* Moves/converts every parameter and buffer in place (the tensors keep their identity,
 * so optimizers built before still point at them). Floating dtypes only are converted. */
int weft_module_to(weft_module *m, weft_device dev, enum weft_dtype dtype);

/* Full dotted names and tensors (borrowed), in registration order, depth first:
 * parameters "0.weight", "0.bias", ...; buffers "1.running_mean", ... Returns the count
 * and a malloc'd array the caller frees with free(); names live in the array. A tensor
 * registered under several names (a tied weight) is listed once, under the first name
 * (PyTorch's remove_duplicate=True); state_dict keeps every name. */
struct weft_named_tensor {
    char name[128];
    weft_tensor *tensor;
};
int weft_module_named_parameters(const weft_module *m, struct weft_named_tensor **out);
int weft_module_named_buffers(const weft_module *m, struct weft_named_tensor **out);
/* Module.parameters(): the tensors of weft_module_named_parameters, in the same order,
 * as an array borrowed from m (no names copied; NULL-terminated; *n its length). It stays
 * valid until a parameter or child is added to m or below it, or m is freed; the
 * tensors are m's own (borrowed). Pass it straight to an optimizer. NULL with an error
 * on failure. Not for concurrent calls on one module tree. */
weft_tensor *const *weft_module_parameters(const weft_module *m, int *n);
/* Total number of parameter elements (a tied weight counted once). */
int64_t weft_module_num_parameters(const weft_module *m);
/* PyTorch's repr of a module tree, malloc'd. */
char *weft_module_repr(const weft_module *m);


/* The model's constructor config as checkpoint metadata: "model.type" = the type's
 * registered name ("gpt"), then what the type's config_export writes ("model.n_layer" =
 * "4", ...; nothing more when it has none). weft_module_create(type, options made from
 * the "model.*" keys without the prefix) rebuilds the same architecture. 0 or negative. */
int weft_module_config_export(const weft_module *m, struct weft_metadata *meta);
/* The reverse: a new module of type "model.type" built from the other "model.*" keys of
 * meta (a checkpoint's __metadata__) as options of section [model]; origin (the file, or
 * NULL) prefixes messages. NULL with WEFT_ERR_VALUE when meta has no "model.type", or
 * what weft_module_create said. */
weft_module *weft_module_create_from_metadata(const struct weft_metadata *meta,
                                              const char *origin);

/* PyTorch's state_dict(): for each module depth first, its parameters, then its buffers,
 * then its children's entries, under dotted names; each value a detached reference to
 * the module's tensor (same storage, no history). A new dict (weft/checkpoint.h). */
struct weft_tensor_dict *weft_module_state_dict(const weft_module *m);
/* PyTorch's load_state_dict(): copies every entry of d into the parameter or buffer of
 * that name in place (grad mode off; dtype and device converted as copy_ does). strict
 * makes missing and unexpected keys errors. All problems are reported together, in
 * PyTorch's words ("Error(s) in loading state_dict for Sequential:\n\tMissing key(s) in
 * state_dict: \"0.bias\". \n\tsize mismatch for 0.weight: ..."); unlike PyTorch nothing
 * is copied then. Returns 0 or negative (WEFT_ERR_RUNTIME). */
int weft_module_load_state_dict(weft_module *m, const struct weft_tensor_dict *d, bool strict);

/* ---- layers (defaults as torch.nn; float32 on cpu, initialised as PyTorch does) ------ */

weft_module *weft_nn_linear(int64_t in_features, int64_t out_features, bool bias);
struct weft_conv2d_options {
    int64_t in_channels, out_channels;
    int64_t kernel_size[2];
    struct weft_conv2d_params params;
    bool bias;
};
weft_module *weft_nn_conv2d(const struct weft_conv2d_options *options);
weft_module *weft_nn_max_pool2d(const struct weft_pool2d_params *params);
weft_module *weft_nn_avg_pool2d(const struct weft_pool2d_params *params);
weft_module *weft_nn_adaptive_avg_pool2d(int64_t out_h, int64_t out_w);
/* eps 1e-5, momentum 0.1 are PyTorch's defaults. */
weft_module *weft_nn_batch_norm1d(int64_t num_features, double eps, double momentum);
weft_module *weft_nn_batch_norm2d(int64_t num_features, double eps, double momentum);
weft_module *weft_nn_layer_norm(int ndims, const int64_t *normalized_shape, double eps,
                                bool elementwise_affine);
weft_module *weft_nn_dropout(double p);
weft_module *weft_nn_embedding(int64_t num_embeddings, int64_t embedding_dim);
/* nn.Embedding(num_embeddings, embedding_dim, padding_idx): row padding_idx (negative
 * counts from the end, kept non-negative as PyTorch keeps it; out of range is "Padding_idx
 * must be within num_embeddings") starts as zeros and gets no gradient (its forward is
 * weft_embedding_padding). */
weft_module *weft_nn_embedding_padding(int64_t num_embeddings, int64_t embedding_dim,
                                       int64_t padding_idx);
weft_module *weft_nn_flatten(int start_dim, int end_dim); /* PyTorch: 1, -1 */
weft_module *weft_nn_relu(void);
weft_module *weft_nn_leaky_relu(double negative_slope); /* PyTorch: 0.01 */
weft_module *weft_nn_gelu(void);
/* nn.GELU(approximate='tanh'): F.gelu with that form; weft_nn_gelu() is approximate
 * 'none'. ValueError for any other value. */
weft_module *weft_nn_gelu_approximate(enum weft_gelu_approximate approximate);
weft_module *weft_nn_tanh(void);
weft_module *weft_nn_sigmoid(void);
weft_module *weft_nn_softmax(int dim);
weft_module *weft_nn_log_softmax(int dim);
/* What a built-in layer was made with, for code that rebuilds layers (fusion,
 * quantization): NULL (or a negative eps) when m is not one of that type. */
const struct weft_conv2d_options *weft_nn_conv2d_options(const weft_module *m);
const struct weft_pool2d_params *weft_nn_max_pool2d_params(const weft_module *m);
const int *weft_nn_flatten_dims(const weft_module *m); /* [start_dim, end_dim] */
double weft_nn_batch_norm_eps(const weft_module *m); /* BatchNorm1d or BatchNorm2d */
/* Children named "0", "1", ... in order; takes ownership of all (also on failure). */
weft_module *weft_nn_sequential(int n, weft_module *const *modules);
/* Adds m as child str(len(seq)); takes ownership of m (also on failure). */
int weft_nn_sequential_append(weft_module *seq, weft_module *m);
/* torch.utils.checkpoint.checkpoint_sequential(seq, segments, input): the children split
 * into `segments` runs of n / segments (the last takes the rest), every run but the last
 * recomputed in backward (weft_checkpoint) instead of keeping its activations; 0 or 1:
 * off. [model] checkpoint_segments = N. 0 or negative. */
int weft_nn_sequential_checkpoint(weft_module *seq, int segments);

#ifdef __cplusplus
}
#endif
#endif
