/* nn/dropout2d.c: F.dropout2d, channel-wise dropout (PyTorch's feature_dropout): one keep
 * decision per (sample, channel), the mask [N, C, 1, ...] broadcast over the rest, the
 * kept scaled by 1 / (1 - p). The result is x * mask, recorded as MulBackward0 as in
 * PyTorch.
 *
 * PyTorch 1.13's shape rules, warnings included: a 3-D input is taken as (N, C, L), not as
 * an unbatched (C, H, W); a 2-D input gets a mask of its own shape (element-wise); fewer
 * dims is an error. The warnings go to stderr once per process, as Python's default
 * filter shows a UserWarning once per call site. */
#include <stdio.h>

#include "functional.h"

static void warn_once(int *done, const char *text)
{
    if (__atomic_exchange_n(done, 1, __ATOMIC_RELAXED) == 0)
        fprintf(stderr, "UserWarning: %s\n", text);
}

static void shape_warnings(int ndim)
{
    static int warned_other, warned_3d;
    if (ndim != 3 && ndim != 4) {
        char text[640];
        snprintf(text, sizeof text,
                 "dropout2d: Received a %d-D input to dropout2d, which is deprecated and will "
                 "result in an error in a future release. To retain the behavior and silence this "
                 "warning, please use dropout instead. Note that dropout2d exists to provide "
                 "channel-wise dropout on inputs with 2 spatial dimensions, a channel dimension, "
                 "and an optional batch dimension (i.e. 3D or 4D inputs).",
                 ndim);
        warn_once(&warned_other, text);
    }
    if (ndim == 3)
        warn_once(&warned_3d,
                  "dropout2d: Received a 3D input to dropout2d and assuming that channel-wise 1D "
                  "dropout behavior is desired - input is interpreted as shape (N, C, L), where C "
                  "is the channel dim. This behavior will change in a future release to interpret "
                  "the input as one without a batch dimension, i.e. shape (C, H, W). To maintain "
                  "the 1D channel-wise dropout behavior, please switch to using dropout1d instead.");
}

static weft_tensor *dropout2d_in_scope(weft_tensor *x, double p, bool training)
{
    if (!(p >= 0 && p <= 1)) {
        char buf[32];
        weft_error_set(WEFT_ERR_VALUE, "dropout probability has to be between 0 and 1, but got %s",
                       weft_repr_float(p, buf, sizeof buf));
        return NULL;
    }
    shape_warnings(x->ndim);
    /* PyTorch's order: no check at all when nothing is drawn */
    if (!training || p == 0 || weft_tensor_numel(x) == 0)
        return weft_autorelease(weft_tensor_retain(x));
    if (p == 1) /* PyTorch multiplies by zero: the result still has x's history */
        return weft_mul_scalar(x, 0);
    if (x->ndim < 2) {
        weft_error_set(WEFT_ERR_RUNTIME, "Feature dropout requires at least 2 dimensions in the input");
        return NULL;
    }
    if (!weft_dtype_is_floating(x->dtype)) {
        weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "dropout2d: expected a floating tensor, got %s",
                       weft_dtype_torch_name(x->dtype));
        return NULL;
    }
    int64_t noise[WEFT_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++)
        noise[d] = d < 2 ? x->shape[d] : 1;
    enum weft_dtype udt = x->dtype == WEFT_F64 ? WEFT_F64 : WEFT_F32;
    weft_tensor *u = weft_rand(x->ndim, noise, udt, x->device);
    weft_tensor *keep = weft_to_dtype(weft_lt_scalar(u, 1 - p), x->dtype);
    return weft_mul(x, weft_mul_scalar(keep, 1 / (1 - p)));
}

weft_tensor *weft_dropout2d(weft_tensor *x, double p, bool training)
{
    if (!x)
        return NULL;
    weft_scope_push();
    weft_tensor *y = weft_tensor_retain(dropout2d_in_scope(x, p, training));
    weft_scope_pop();
    return weft_autorelease(y);
}
