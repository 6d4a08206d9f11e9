/* nn/init.c: torch.nn.init (weft/init.h). Each scheme works out a bound or a standard
 * deviation from the tensor's fans and fills through weft_uniform_ / weft_normal_, so
 * the numbers come from the Philox stream like every other initialisation. */
#include "weft/init.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"
#include "weft.h"

int weft_nn_init_calculate_gain(const char *nonlinearity, double param, double *gain)
{
    static const char *const linear[] = {"linear",           "conv1d",           "conv2d",
                                         "conv3d",           "conv_transpose1d", "conv_transpose2d",
                                         "conv_transpose3d", "sigmoid",          NULL};
    const char *nl = nonlinearity ? nonlinearity : "None";
    for (int i = 0; linear[i]; i++)
        if (strcmp(nl, linear[i]) == 0) {
            *gain = 1.0;
            return 0;
        }
    if (strcmp(nl, "tanh") == 0) {
        *gain = 5.0 / 3;
    } else if (strcmp(nl, "relu") == 0) {
        *gain = sqrt(2.0);
    } else if (strcmp(nl, "leaky_relu") == 0) {
        double slope = isnan(param) ? 0.01 : param;
        if (!isfinite(slope))
            return weft_error_set(WEFT_ERR_VALUE, "negative_slope %g not a valid number", param);
        *gain = sqrt(2.0 / (1 + slope * slope));
    } else if (strcmp(nl, "selu") == 0) {
        *gain = 3.0 / 4;
    } else {
        return weft_error_set(WEFT_ERR_VALUE, "Unsupported nonlinearity %s", nl);
    }
    return 0;
}

int weft_nn_init_fans(const weft_tensor *t, int64_t *fan_in, int64_t *fan_out)
{
    if (!t)
        return weft_error_code() ? weft_error_code() : WEFT_ERR_VALUE;
    if (t->ndim < 2)
        return weft_error_set(WEFT_ERR_VALUE, "Fan in and fan out can not be computed for "
                                              "tensor with fewer than 2 dimensions");
    int64_t receptive = 1;
    for (int d = 2; d < t->ndim; d++)
        receptive *= t->shape[d];
    *fan_in = t->shape[1] * receptive;
    *fan_out = t->shape[0] * receptive;
    return 0;
}

static _Thread_local bool init_off;

bool weft_nn_init_enable(bool on)
{
    bool was = !init_off;
    init_off = !on;
    return was;
}

bool weft_nn_init_enabled(void)
{
    return !init_off;
}

weft_tensor *nn_param_storage(int ndim, const int64_t *shape)
{
    return init_off ? weft_zeros(ndim, shape, WEFT_F32, WEFT_CPU)
                    : weft_empty(ndim, shape, WEFT_F32, WEFT_CPU);
}

/* Fills run with grad mode off: a parameter is a leaf that requires grad, which an
 * in-place op may not touch under autograd (torch.nn.init's no_grad). */
static int fill_uniform(weft_tensor *t, double a, double b)
{
    if (init_off)
        return t ? 0 : WEFT_ERR_VALUE;
    bool prev = weft_no_grad_begin();
    int rc = weft_uniform_(t, a, b);
    weft_grad_mode_restore(prev);
    return rc;
}

static int fill_normal(weft_tensor *t, double mean, double std)
{
    if (init_off)
        return t ? 0 : WEFT_ERR_VALUE;
    bool prev = weft_no_grad_begin();
    int rc = weft_normal_(t, mean, std);
    weft_grad_mode_restore(prev);
    return rc;
}

static int fill_constant(weft_tensor *t, double value)
{
    if (!t)
        return WEFT_ERR_VALUE;
    bool prev = weft_no_grad_begin();
    weft_scope_push();
    weft_tensor *c = weft_full(0, NULL, value, t->dtype, t->device);
    int rc = c ? weft_copy_(t, c) : weft_error_code();
    weft_scope_pop();
    weft_grad_mode_restore(prev);
    return rc;
}

int weft_nn_init_zeros_(weft_tensor *t)
{
    return fill_constant(t, 0.0);
}

int weft_nn_init_ones_(weft_tensor *t)
{
    return fill_constant(t, 1.0);
}

int weft_nn_init_normal_(weft_tensor *t, double mean, double std)
{
    return fill_normal(t, mean, std);
}

int weft_nn_init_uniform_(weft_tensor *t, double a, double b)
{
    return fill_uniform(t, a, b);
}

/* gain * sqrt(2 / (fan_in + fan_out)) */
static int xavier_std(const weft_tensor *t, double gain, double *std)
{
    int64_t fan_in, fan_out;
    int rc = weft_nn_init_fans(t, &fan_in, &fan_out);
    if (rc != 0)
        return rc;
    if (fan_in + fan_out == 0)
        return weft_error_set(WEFT_ERR_VALUE, "float division by zero");
    *std = gain * sqrt(2.0 / (double)(fan_in + fan_out));
    return 0;
}

int weft_nn_init_xavier_uniform_(weft_tensor *t, double gain)
{
    double std;
    int rc = xavier_std(t, gain, &std);
    return rc ? rc : fill_uniform(t, -sqrt(3.0) * std, sqrt(3.0) * std);
}

int weft_nn_init_xavier_normal_(weft_tensor *t, double gain)
{
    double std;
    int rc = xavier_std(t, gain, &std);
    return rc ? rc : fill_normal(t, 0.0, std);
}

/* gain / sqrt(fan): 1 when the tensor has no elements (nothing to fill, PyTorch warns). */
static int kaiming_std(const weft_tensor *t, double a, const char *mode, const char *nonlinearity,
                       double *std)
{
    if (!t)
        return weft_error_code() ? weft_error_code() : WEFT_ERR_VALUE;
    if (weft_tensor_numel(t) == 0) {
        fprintf(stderr, "UserWarning: Initializing zero-element tensors is a no-op\n");
        return 1;
    }
    char m[32];
    snprintf(m, sizeof m, "%s", mode ? mode : "fan_in");
    for (char *p = m; *p; p++)
        *p = (char)tolower((unsigned char)*p);
    bool in = strcmp(m, "fan_in") == 0;
    if (!in && strcmp(m, "fan_out") != 0)
        return weft_error_set(WEFT_ERR_VALUE, "Mode %s not supported, please use one of "
                                              "['fan_in', 'fan_out']",
                              m);
    int64_t fan_in, fan_out;
    double gain;
    int rc = weft_nn_init_fans(t, &fan_in, &fan_out);
    if (rc == 0)
        rc = weft_nn_init_calculate_gain(nonlinearity ? nonlinearity : "leaky_relu", a, &gain);
    if (rc != 0)
        return rc;
    *std = gain / sqrt((double)(in ? fan_in : fan_out));
    return 0;
}

int weft_nn_init_kaiming_uniform_(weft_tensor *t, double a, const char *mode,
                                  const char *nonlinearity)
{
    double std;
    int rc = kaiming_std(t, a, mode, nonlinearity, &std);
    return rc ? (rc > 0 ? 0 : rc) : fill_uniform(t, -sqrt(3.0) * std, sqrt(3.0) * std);
}

int weft_nn_init_kaiming_normal_(weft_tensor *t, double a, const char *mode,
                                 const char *nonlinearity)
{
    double std;
    int rc = kaiming_std(t, a, mode, nonlinearity, &std);
    return rc ? (rc > 0 ? 0 : rc) : fill_normal(t, 0.0, std);
}
