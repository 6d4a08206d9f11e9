/* plugins/optim/optim_plugin.h: what weft-optim.so's files share (not installed). */
#ifndef WEFT_OPTIM_PLUGIN_H
#define WEFT_OPTIM_PLUGIN_H

#include <stdbool.h>
#include <stdint.h>

#include <weft.h>
#include <weft/kernel.h>
#include <weft/optim.h>
#include <weft/optim_kernels.h>

enum opt_kind { OPT_SGD, OPT_ADAM, OPT_ADAMW, OPT_RMSPROP };

/* One parameter group's hyperparameters; each kind reads the ones it has. fused = false
 * takes the composite path even where the backend has the fused op (PyTorch's
 * fused=False). */
struct opt_hparams {
    double lr, momentum, dampening, weight_decay, beta1, beta2, eps, alpha;
    bool nesterov, amsgrad, centered, fused;
};

#define OPT_MAX_BUFFERS 3

/* Per-parameter state, created lazily at the parameter's first update. */
struct opt_state {
    int64_t step;
    weft_tensor *buf[OPT_MAX_BUFFERS]; /* contiguous, the parameter's shape and dtype */
};

/* hparams.c: reads and validates the options; errors name their origin and section. */
int opt_read_hparams(enum opt_kind kind, const weft_options *o, struct opt_hparams *h);

/* update.c: one update of param p with gradient g (both non-NULL, no grad mode). Uses
 * the fused op when the backend has it, weft ops otherwise. */
int opt_update(enum opt_kind kind, const struct opt_hparams *h, weft_tensor *p, weft_tensor *g,
               struct opt_state *st);
/* Which state buffers kind uses under h, and their PyTorch names. */
bool opt_uses_buffer(enum opt_kind kind, const struct opt_hparams *h, int i);
const char *opt_buffer_name(enum opt_kind kind, int i);
bool opt_has_step(enum opt_kind kind);
/* The ids of the fused ops, registered by name (weft/optim_kernels.h) in init (plugin.c). */
extern int opt_sgd_step_op, opt_adam_step_op, opt_rmsprop_step_op;

/* The fused ops' cpu kernels (kernels_cpu.c), the plugin's kernel table. */
extern const struct weft_kernel_entry opt_cpu_kernels[];

#endif
