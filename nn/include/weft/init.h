/* weft/init.h: torch.nn.init, the initialisation schemes of a parameter, filled in place
 * (grad mode off, as torch.nn.init does) from the Philox stream (weft_manual_seed).
 *
 * The formulas are PyTorch's (torch/nn/init.py, 1.13): fan_in = size(1) * receptive field
 * and fan_out = size(0) * receptive field (the product of the dims after the first two);
 * kaiming: std = gain / sqrt(fan), uniform on [-sqrt(3) std, sqrt(3) std]; xavier:
 * std = gain * sqrt(2 / (fan_in + fan_out)), uniform on [-sqrt(3) std, sqrt(3) std].
 * Errors carry PyTorch's words ("Fan in and fan out can not be computed for tensor with
 * fewer than 2 dimensions", "Mode fan_avg not supported, please use one of ['fan_in',
 * 'fan_out']", "Unsupported nonlinearity swish"). Every function returns 0 or negative.
 */
#ifndef WEFT_INIT_H
#define WEFT_INIT_H

#include <stdbool.h>
#include <stdint.h>

#include "weft/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Whether parameters are initialised on this thread (PyTorch's torch.nn.utils.skip_init):
 * while off, the modules built start with zero parameters and the random fills of this
 * file leave tensors as they are, drawing nothing from the generator. For a model whose
 * every parameter a checkpoint is about to overwrite (a strict load), where random
 * initialisation is wasted: a third of weft-generate's start-up on the baby GPT. Returns
 * the previous setting; on by default. */
bool weft_nn_init_enable(bool on);
bool weft_nn_init_enabled(void);

/* nn.init.calculate_gain(nonlinearity, param): param is leaky_relu's negative slope, NAN for
 * None (0.01). Writes the gain to *gain. */
int weft_nn_init_calculate_gain(const char *nonlinearity, double param, double *gain);
/* nn.init._calculate_fan_in_and_fan_out(t): t needs 2 dims or more. */
int weft_nn_init_fans(const weft_tensor *t, int64_t *fan_in, int64_t *fan_out);

int weft_nn_init_zeros_(weft_tensor *t);
int weft_nn_init_ones_(weft_tensor *t);
/* normal_(mean, std); uniform_(a, b) */
int weft_nn_init_normal_(weft_tensor *t, double mean, double std);
int weft_nn_init_uniform_(weft_tensor *t, double a, double b);
/* xavier_uniform_ / xavier_normal_ (Glorot): PyTorch's default gain is 1. */
int weft_nn_init_xavier_uniform_(weft_tensor *t, double gain);
int weft_nn_init_xavier_normal_(weft_tensor *t, double gain);
/* kaiming_uniform_ / kaiming_normal_ (He): PyTorch's defaults a = 0, mode "fan_in",
 * nonlinearity "leaky_relu" (mode and nonlinearity NULL mean those). A tensor with no
 * elements is left alone, with PyTorch's warning ("Initializing zero-element tensors is
 * a no-op") on stderr. */
int weft_nn_init_kaiming_uniform_(weft_tensor *t, double a, const char *mode,
                                  const char *nonlinearity);
int weft_nn_init_kaiming_normal_(weft_tensor *t, double a, const char *mode,
                                 const char *nonlinearity);

#ifdef __cplusplus
}
#endif
#endif
