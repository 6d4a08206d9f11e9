/* plugins/optim/optim_plugin.h: what weft-optim.so's files share (not installed). */
#ifndef WEFT_OPTIM_PLUGIN_H
#define WEFT_OPTIM_PLUGIN_H

#include <stdbool.h>
#include <stdint.h>

#include <weft.h>
#include <weft/train.h>
#include <weft/kernel.h>

enum opt_kind { OPT_SGD, OPT_ADAM, OPT_ADAMW, OPT_RMSPROP };

/* One parameter group's hyperparameters; each kind reads the ones it has. */
struct opt_hparams {
    double lr, momentum, dampening, weight_decay, beta1, beta2, eps, alpha;
    bool nesterov, amsgrad, centered;
};

#define OPT_MAX_BUFFERS 3

/* Per-parameter state, created lazily at the parameter's first update. */
struct opt_state {
    int64_t step;
    weft_tensor *buf[OPT_MAX_BUFFERS]; /* contiguous, the parameter's shape and dtype */
};

/* hparams.c: reads and validates [section]; errors name the config and section. */
int opt_read_hparams(enum opt_kind kind, struct weft_config *cfg, const char *section,
                     struct opt_hparams *h);
/* Python's repr of a float ("0.1", "-1.0", "1e-05"). */
const char *opt_pyfloat(double v, char *buf, size_t size);

/* update.c: one update of param p with gradient g (both non-NULL, no grad mode). Uses
 * the fused op when the backend has it, weft ops otherwise. */
int opt_update(enum opt_kind kind, const struct opt_hparams *h, weft_tensor *p, weft_tensor *g,
               struct opt_state *st);
/* Which state buffers kind uses under h, and their PyTorch names. */
bool opt_uses_buffer(enum opt_kind kind, const struct opt_hparams *h, int i);
const char *opt_buffer_name(enum opt_kind kind, int i);
bool opt_has_step(enum opt_kind kind);
/* false forces the composite path (tests compare the two). */
extern bool opt_fused_enabled;

/* kernels_cpu.c */
int opt_register_cpu_kernels(void);

#endif
