/* weft/optim.h: optimizers, learning-rate schedulers and gradient clipping.
 *
 * Optimizers. An optimizer type (SGD, Adam, ...) is a vtable of kind WEFT_KIND_OPTIMIZER
 * (weft/registry.h) a plugin registers; weft-optim.so provides "sgd", "adam", "adamw" and
 * "rmsprop" and is loaded when one is named. An optimizer holds one or more parameter
 * groups, as torch.optim: each group is some parameters (it keeps a reference to each)
 * and the hyperparameters read from its options (a config section):
 *
 *     [optimizer]
 *     type = adam            ; read by weft_optimizer_create when name is NULL
 *     lr = 0.001
 *     betas = 0.9, 0.999
 *     weight_decay = 0
 *     decay = all            ; all | matrices (nanoGPT's two groups, below)
 *
 * Groups. The type's methods run once per group, each group with its own ctx, so a type
 * written for one group serves any number. weft_optimizer_create makes one group, or
 * with `decay = matrices` nanoGPT's configure_optimizers: group 0 the parameters of dim
 * >= 2 (weight matrices, embeddings) with the section's weight_decay, group 1 the others
 * (biases, LayerNorm gains) with weight_decay 0; an empty group is left out.
 * weft_optimizer_create_groups takes any groups. Parameters are numbered globally, group
 * after group, as in PyTorch's state_dict: weft_optimizer_param(opt, i) and "state.<i>"
 * use that number.
 *
 * Keys per type (defaults as PyTorch): sgd: lr (1e-3), momentum (0), dampening (0),
 * nesterov (false), weight_decay (0); adam/adamw: lr (1e-3), betas (0.9, 0.999), eps
 * (1e-8), weight_decay (0; adamw 1e-2), amsgrad (false); rmsprop: lr (1e-2), alpha
 * (0.99), eps (1e-8), weight_decay (0), momentum (0), centered (false). Invalid values
 * fail with PyTorch's text ("Invalid learning rate: -0.1"), prefixed with the config's
 * name and section.
 *
 * step() updates every parameter that has a .grad (others are skipped, as PyTorch) with
 * PyTorch's exact formulas, one fused pass per parameter where the backend has the
 * kernel of the step op (below) and weft ops otherwise, under no_grad; `fused = false`
 * asks for the ops (PyTorch's foreach=False, fused=False). Gradient accumulation: backward() adds into .grad, so calling backward over
 * several micro-batches and then step() once and zero_grad() once accumulates (scale
 * the loss by 1/k for a mean).
 *
 * State dicts. weft_optimizer_state_export() flattens PyTorch's optimizer.state_dict():
 * tensors "state.<i>.<name>" (i = global parameter index; "step" is a 0-dim float32
 * tensor as in PyTorch, then "exp_avg", "momentum_buffer", ...) and metadata
 * "param_groups.<g>.<hyper>" as text ("param_groups.0.lr" = "0.001"),
 * "param_groups.<g>.params" (the group's global indices, "0, 1, 2") plus "optimizer" =
 * the type name. The type's methods see one group as group 0 with local indices; the
 * library renumbers. Importing restores the state and every group's learning rate, so a
 * resumed run takes exactly the steps the original would have.
 *
 * Versioning: the type vtable is checked like every vtable; fields are only appended and
 * NULL optional methods mean "not provided".
 */
#ifndef WEFT_OPTIM_H
#define WEFT_OPTIM_H

#include <stdbool.h>
#include <stdint.h>

#include "weft/options.h"
#include "weft/registry.h"
#include "weft/state_dict.h"
#include "weft/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* "optimizer", as a symbol of libweft-train (see WEFT_KIND_READER in weft/dataset.h). */
extern const char weft_kind_optimizer[];
#define WEFT_KIND_OPTIMIZER weft_kind_optimizer

/* An optimizer type: what a plugin registers. Methods get back the ctx create() made and
 * that group's parameters (params[0..n), in creation order); each group has its own ctx. */
struct weft_optimizer_type {
    struct weft_vtable base; /* kind WEFT_KIND_OPTIMIZER; name: "adam" */
    const char *description; /* one line; optional */
    /* Required. Reads and validates the hyperparameters in options (NULL: all defaults)
     * and fills *ctx. Returns 0, or negative with an error set and nothing allocated. */
    int (*create)(int n, weft_tensor *const *params, const weft_options *options, void **ctx);
    /* Required. One update of every parameter that has a gradient. */
    int (*step)(void *ctx, int n, weft_tensor *const *params);
    /* Required. Frees ctx. */
    void (*destroy)(void *ctx);
    /* Required. The group's learning rate, and setting it (schedulers do). */
    double (*get_lr)(void *ctx);
    int (*set_lr)(void *ctx, double lr);
    /* Optional. Adds the state to d and m as described above. NULL: no state to save. */
    int (*state_export)(void *ctx, int n, weft_tensor *const *params,
                        struct weft_tensor_dict *d, struct weft_metadata *m);
    /* Optional. Restores what state_export wrote (shapes checked). */
    int (*state_import)(void *ctx, int n, weft_tensor *const *params,
                        const struct weft_tensor_dict *d, const struct weft_metadata *m);
    /* Optional. NULL: the core calls weft_zero_grad() on every parameter. */
    int (*zero_grad)(void *ctx, int n, weft_tensor *const *params, bool set_to_none);
    /* Optional, appended after zero_grad (read through WEFT_VTABLE_HAS). The momentum
     * OneCycleLR cycles: SGD's and RMSprop's `momentum`, Adam's and AdamW's `betas[0]`
     * (PyTorch's rule: betas when the optimizer has them). NULL: none to cycle. */
    double (*get_momentum)(void *ctx);
    int (*set_momentum)(void *ctx, double momentum);
};

typedef struct weft_optimizer weft_optimizer;

/* ---- optimizers ----------------------------------------------------------------- */

/* Creates an optimizer of type `name` (NULL: the options' `type` key, required) over
 * params[0..n) (floating leaf tensors; the optimizer keeps a reference to each) with
 * the hyperparameters in options (NULL: all defaults). Finds the type in the registry,
 * loading the plugin that provides it. Unknown names fail with WEFT_ERR_CONFIG listing
 * the registered types. Free with weft_optimizer_free(). */
weft_optimizer *weft_optimizer_create(const char *name, int n, weft_tensor *const *params,
                                      const weft_options *options);

/* One parameter group for weft_optimizer_create_groups. */
struct weft_param_group {
    int n;                      /* >= 1 */
    weft_tensor *const *params; /* params[0..n) */
    const weft_options *options; /* this group's hyperparameters; NULL: all defaults */
};

/* An optimizer of type `name` (NULL: group 0's options' `type` key) over groups[0..ngroups),
 * each created by the type from its own options (torch.optim.AdamW([{...}, {...}])). A
 * tensor may belong to one group only ("some parameters appear in more than one parameter
 * group", PyTorch's words). Free with weft_optimizer_free(). */
weft_optimizer *weft_optimizer_create_groups(const char *name, int ngroups,
                                             const struct weft_param_group *groups);
/* nanoGPT's weight-decay rule: a parameter is decayed when its dim is >= 2. */
bool weft_param_decays(const weft_tensor *p);

void weft_optimizer_free(weft_optimizer *opt); /* NULL is ignored */
const char *weft_optimizer_name(const weft_optimizer *opt);
/* All groups' parameters together. */
int weft_optimizer_num_params(const weft_optimizer *opt);
/* Parameter i (global index, group after group; borrowed), NULL when out of range. */
weft_tensor *weft_optimizer_param(const weft_optimizer *opt, int i);
int weft_optimizer_num_groups(const weft_optimizer *opt); /* 0 for NULL */
/* Group g's size and first global index; -1 when g is out of range. */
int weft_optimizer_group_size(const weft_optimizer *opt, int g);
int weft_optimizer_group_offset(const weft_optimizer *opt, int g);
/* Group g's learning rate; NAN when g is out of range. */
double weft_optimizer_group_lr(const weft_optimizer *opt, int g);

/* One update. Returns 0 or negative. */
int weft_optimizer_step(weft_optimizer *opt);
/* Clears (set_to_none, PyTorch's default) or zeroes every parameter's .grad. */
int weft_optimizer_zero_grad(weft_optimizer *opt, bool set_to_none);
/* Group 0's lr (NAN for NULL); setting sets every group's (a scheduler's step). */
double weft_optimizer_get_lr(const weft_optimizer *opt);
int weft_optimizer_set_lr(weft_optimizer *opt, double lr);

/* Group 0's momentum (struct weft_optimizer_type's get_momentum; NAN for a type without
 * one); setting sets every group's (OneCycleLR's cycle_momentum). Setting fails with
 * WEFT_ERR_CONFIG naming the type when it has none. */
double weft_optimizer_get_momentum(const weft_optimizer *opt);
int weft_optimizer_set_momentum(weft_optimizer *opt, double momentum);

/* Adds the state to d (tensors) and m (metadata; may be NULL) as described above. */
int weft_optimizer_state_export(const weft_optimizer *opt, struct weft_tensor_dict *d,
                                struct weft_metadata *m);
/* Restores it; "optimizer" in m, when present, must name this type, and the groups
 * saved must be as many and as large as this optimizer's (PyTorch's errors). Entries of
 * d that do not start with "state." are ignored (one dict may hold the model too). */
int weft_optimizer_state_import(weft_optimizer *opt, const struct weft_tensor_dict *d,
                                const struct weft_metadata *m);

/* ---- optimizers from C: torch.optim's constructors ----------------------------------
 * The hyperparameters as structs, field for field torch.optim's keyword arguments, for
 * programs that do not read an INI file. Start from the *_INIT macro (PyTorch's
 * defaults) and change what differs:
 *
 *     struct weft_adam_options o = WEFT_ADAM_OPTIONS_INIT;
 *     o.lr = 3e-4;
 *     weft_optimizer *opt = weft_adam(n, params, &o);   // torch.optim.Adam(params, lr=3e-4)
 *
 * Each makes an optimizer as weft_optimizer_create would from the same keys (options
 * NULL: the defaults), with the same checks and PyTorch's messages ("Invalid learning
 * rate: -0.1"). `fused` false asks for the op-by-op update (foreach=False). Free with
 * weft_optimizer_free(). */
struct weft_sgd_options {
    double lr, momentum, dampening, weight_decay;
    bool nesterov;
    bool fused;
};
#define WEFT_SGD_OPTIONS_INIT                                                                 \
    ((struct weft_sgd_options){                                                               \
        .lr = 1e-3, .momentum = 0, .dampening = 0, .weight_decay = 0, .nesterov = false,      \
        .fused = true})

struct weft_adam_options {
    double lr;
    double betas[2];
    double eps, weight_decay;
    bool amsgrad;
    bool fused;
};
#define WEFT_ADAM_OPTIONS_INIT                                                                \
    ((struct weft_adam_options){                                                              \
        .lr = 1e-3, .betas = {0.9, 0.999}, .eps = 1e-8, .weight_decay = 0, .amsgrad = false,  \
        .fused = true})
/* AdamW takes Adam's arguments; only weight_decay's default differs (1e-2). */
#define WEFT_ADAMW_OPTIONS_INIT                                                               \
    ((struct weft_adam_options){                                                              \
        .lr = 1e-3, .betas = {0.9, 0.999}, .eps = 1e-8, .weight_decay = 1e-2,                 \
        .amsgrad = false, .fused = true})

struct weft_rmsprop_options {
    double lr, alpha, eps, weight_decay, momentum;
    bool centered;
    bool fused;
};
#define WEFT_RMSPROP_OPTIONS_INIT                                                             \
    ((struct weft_rmsprop_options){                                                           \
        .lr = 1e-2, .alpha = 0.99, .eps = 1e-8, .weight_decay = 0, .momentum = 0,             \
        .centered = false, .fused = true})

weft_optimizer *weft_sgd(int n, weft_tensor *const *params, const struct weft_sgd_options *o);
weft_optimizer *weft_adam(int n, weft_tensor *const *params, const struct weft_adam_options *o);
weft_optimizer *weft_adamw(int n, weft_tensor *const *params,
                           const struct weft_adam_options *o);
weft_optimizer *weft_rmsprop(int n, weft_tensor *const *params,
                             const struct weft_rmsprop_options *o);

/* ---- fused update ops ------------------------------------------------------------------
 * An optimizer's step dispatches a named op per parameter (sgd_step, adam_step,
 * rmsprop_step) where a backend has it: their contracts and parameter blocks are the
 * optim plugin's, weft/optim_kernels.h. */

/* ---- gradient clipping ------------------------------------------------------------ */

/* torch.nn.utils.clip_grad_norm_: total = norm_type-norm of the per-tensor norms of the
 * gradients (parameters without .grad are skipped; norm_type INFINITY for the max norm);
 * when total > max_norm every gradient is multiplied in place by max_norm/(total + 1e-6).
 * *total_norm (may be NULL) receives total (0 when no gradient; NaN/Inf kept, as
 * error_if_nonfinite=False). Returns 0 or negative. */
int weft_clip_grad_norm_(int n, weft_tensor *const *params, double max_norm, double norm_type,
                         double *total_norm);

/* ---- learning-rate schedulers ----------------------------------------------------
 * Read from a config section:
 *
 *     [scheduler]
 *     type = cosine          ; none | step | multistep | cosine | warmup_cosine | plateau |
 *                            ; onecycle
 *     T_max = 100            ; cosine; eta_min (0)
 *     lr_decay_iters = 5000  ; warmup_cosine; warmup_iters (0), min_lr (0)
 *     step_size = 30         ; step; gamma (0.1)
 *     milestones = 30, 80    ; multistep; gamma (0.1)
 *     warmup_steps = 5       ; optional linear warmup (0: none)
 *     warmup_start_factor = 0.1
 *
 * With base = the optimizer's lr at creation and e = the step count (0 at creation, +1
 * per weft_scheduler_step), the lr is PyTorch's closed form: step base·γ^⌊e/step_size⌋;
 * multistep base·γ^(milestones ≤ e); cosine η_min + (base − η_min)(1 + cos(π·e/T_max))/2;
 * none base; warmup_cosine nanoGPT's get_lr(e): base·(e+1)/(warmup_iters+1) while
 * e < warmup_iters, min_lr once e > lr_decay_iters, else min_lr + (base − min_lr)·
 * (1 + cos(π·(e − warmup_iters)/(lr_decay_iters − warmup_iters)))/2. A warmup of w steps
 * (warmup_steps; not with warmup_cosine, which has its own) runs first as LinearLR(start_factor, 1.0, w) and the
 * main schedule then starts from e = 0 (SequentialLR(milestones=[w])). Creating sets the
 * optimizer's lr to the schedule at e = 0; the lr is every parameter group's (base is
 * group 0's). Call weft_scheduler_step() after each optimizer step (or epoch), as
 * PyTorch; weft-train steps warmup_cosine per optimizer step.
 *
 * onecycle is OneCycleLR: max_lr (default: the optimizer's lr), total_steps or epochs and
 * steps_per_epoch, pct_start (0.3), anneal_strategy (cos | linear), div_factor (25),
 * final_div_factor (1e4), three_phase (false), cycle_momentum (true: the optimizer's
 * momentum, Adam's beta1, goes from max_momentum 0.95 to base_momentum 0.85 and back),
 * stepped per optimizer step; past total_steps a step fails with PyTorch's "Tried to step
 * N times". Its warmup climbs to the cycle's first lr, max_lr/div_factor, with the
 * cycle's first momentum, as SequentialLR([LinearLR, OneCycleLR], [w]) does.
 *
 * plateau is ReduceLROnPlateau: mode (min | max), factor (0.1), patience (10), threshold
 * (1e-4), threshold_mode (rel | abs), cooldown (0), min_lr (0), eps (1e-8). It is stepped
 * with a metric, weft_scheduler_step_metric() after each evaluation; weft_scheduler_step()
 * only advances its warmup, and metrics that come during the warmup are not judged (the
 * plateau starts from the base lr once the warmup is over). lr_at(e) past the warmup is
 * the lr it holds now. Its state (best, bad epochs, cooldown, lr) is in the metadata. */
typedef struct weft_scheduler weft_scheduler;

/* options NULL: type none. */
weft_scheduler *weft_scheduler_create(weft_optimizer *opt, const weft_options *options);
void weft_scheduler_free(weft_scheduler *s); /* NULL is ignored */
/* Advances e by one and sets the optimizer's lr. */
int weft_scheduler_step(weft_scheduler *s);
/* plateau: ReduceLROnPlateau.step(metric) (a NaN metric is never better). Other types:
 * WEFT_ERR_VALUE. */
int weft_scheduler_step_metric(weft_scheduler *s, double metric);
/* Whether s is stepped with a metric (plateau). */
bool weft_scheduler_wants_metric(const weft_scheduler *s);
/* The lr the schedule gives at step e (no side effect). */
double weft_scheduler_lr_at(const weft_scheduler *s, int64_t e);
int64_t weft_scheduler_last_epoch(const weft_scheduler *s);
/* Metadata "scheduler.last_epoch" and "scheduler.base_lr" (plateau: "scheduler.plateau.*"
 * too); import sets e and the lr (and onecycle's momentum). */
int weft_scheduler_state_export(const weft_scheduler *s, struct weft_metadata *m);
int weft_scheduler_state_import(weft_scheduler *s, const struct weft_metadata *m);

#ifdef __cplusplus
}
#endif
#endif
