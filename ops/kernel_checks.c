/* ops/kernel_checks.c: the operand contracts of the layer norm, cdist and GELU kernels
 * (weft/kernel_checks.h), written once for every backend. */
#include <string.h>

#include "weft/error.h"
#include "weft/kernel_checks.h"
#include "weft/tensor.h"

/* t is ndim-dimensional [d0] or [d0, d1], of dtype dt and contiguous. */
static bool contiguous_shape(const weft_tensor *t, int ndim, int64_t d0, int64_t d1,
                             enum weft_dtype dt)
{
    return t && t->ndim == ndim && t->shape[0] == d0 && (ndim == 1 || t->shape[1] == d1) &&
           t->dtype == dt && weft_tensor_is_contiguous(t);
}

/* layer norm's statistics are float, double for float64 (PyTorch's acc type) */
static enum weft_dtype stats_dtype(enum weft_dtype dt)
{
    return dt == WEFT_F64 ? WEFT_F64 : WEFT_F32;
}

int weft_check_native_layer_norm(const struct weft_op_call *call)
{
    const weft_tensor *x = call->in[0], *w = call->in[1], *b = call->in[2];
    const weft_tensor *y = call->out[0], *stats = call->out[1];
    int64_t R = x->ndim == 2 ? x->shape[0] : -1, D = x->ndim == 2 ? x->shape[1] : -1;
    if (R < 0 || !contiguous_shape(x, 2, R, D, x->dtype) ||
        !contiguous_shape(y, 2, R, D, x->dtype) ||
        !contiguous_shape(stats, 2, 2, R, stats_dtype(x->dtype)) ||
        (w && !contiguous_shape(w, 1, D, 0, x->dtype)) ||
        (b && !contiguous_shape(b, 1, D, 0, x->dtype)))
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "native_layer_norm: expected contiguous x and y [R, D], weight and "
                              "bias [D] of x's dtype or absent, and stats [2, R]");
    return 0;
}

int weft_check_native_layer_norm_backward(const struct weft_op_call *call)
{
    const weft_tensor *g = call->in[0], *x = call->in[1], *stats = call->in[2];
    const weft_tensor *w = call->in[3];
    const weft_tensor *dx = call->out[0], *dwb = call->nout > 1 ? call->out[1] : NULL;
    int64_t R = g->ndim == 2 ? g->shape[0] : -1, D = g->ndim == 2 ? g->shape[1] : -1;
    if (R < 0 || !contiguous_shape(g, 2, R, D, g->dtype) ||
        !contiguous_shape(x, 2, R, D, g->dtype) || !contiguous_shape(dx, 2, R, D, g->dtype) ||
        !contiguous_shape(stats, 2, 2, R, stats_dtype(g->dtype)) ||
        (w && !contiguous_shape(w, 1, D, 0, g->dtype)) ||
        (dwb && !contiguous_shape(dwb, 2, 2, D, g->dtype)))
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "native_layer_norm_backward: expected contiguous grad, x and "
                              "grad_input [R, D], stats [2, R], weight [D] or absent and "
                              "grad_weight_bias [2, D] or absent");
    return 0;
}

static bool same_dtype(const struct weft_op_call *call)
{
    for (int i = 1; i < call->nin; i++)
        if (call->in[i]->dtype != call->in[0]->dtype)
            return false;
    return call->out[0]->dtype == call->in[0]->dtype;
}

int weft_check_cdist(const struct weft_op_call *call)
{
    const weft_tensor *x1 = call->in[0], *x2 = call->in[1], *out = call->out[0];
    if (x1->ndim != 3 || x2->ndim != 3 || out->ndim != 3 || x2->shape[0] != x1->shape[0] ||
        x2->shape[2] != x1->shape[2] || out->shape[0] != x1->shape[0] ||
        out->shape[1] != x1->shape[1] || out->shape[2] != x2->shape[1] || !same_dtype(call) ||
        !weft_tensor_is_contiguous(out))
        return weft_error_set(WEFT_ERR_RUNTIME, "cdist: expected x1 [B, P, M], x2 [B, R, M] of "
                                                "one dtype and a contiguous output [B, P, R]");
    return 0;
}

int weft_check_cdist_backward(const struct weft_op_call *call)
{
    const weft_tensor *g = call->in[0], *x1 = call->in[1], *x2 = call->in[2], *d = call->in[3];
    const weft_tensor *out = call->out[0];
    if (g->ndim != 3 || x1->ndim != 3 || x2->ndim != 3 || d->ndim != 3 || out->ndim != 3 ||
        x2->shape[0] != x1->shape[0] || x2->shape[2] != x1->shape[2] ||
        g->shape[0] != x1->shape[0] || g->shape[1] != x1->shape[1] ||
        g->shape[2] != x2->shape[1] || memcmp(d->shape, g->shape, 3 * sizeof *g->shape) != 0 ||
        memcmp(out->shape, x1->shape, 3 * sizeof *x1->shape) != 0 || !same_dtype(call) ||
        !weft_tensor_is_contiguous(out))
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "cdist_backward: expected grad and dist [B, P, R], x1 [B, P, M], "
                              "x2 [B, R, M] of one dtype and a contiguous output [B, P, M]");
    return 0;
}

int weft_check_gelu_backward(const struct weft_op_call *call)
{
    int approximate = (int)call->ints[0];
    if (approximate != 0 && approximate != 1)
        return weft_error_set(WEFT_ERR_VALUE,
                              "gelu_backward: approximate must be 0 (none) or 1 (tanh), got %d",
                              approximate);
    return 0;
}

int weft_check_add_bias_gelu(const struct weft_op_call *call)
{
    const weft_tensor *h = call->out[0], *y = call->nout > 1 ? call->out[1] : NULL;
    const weft_tensor *b = call->in[0];
    int approximate = (int)call->ints[0];
    if (!y || h->ndim != 2 || b->ndim != 1 || b->shape[0] != h->shape[1] ||
        b->dtype != h->dtype || y->ndim != 2 || y->shape[0] != h->shape[0] ||
        y->shape[1] != h->shape[1] || y->dtype != h->dtype || !weft_tensor_is_contiguous(h) ||
        !weft_tensor_is_contiguous(y) || !weft_tensor_is_contiguous(b) ||
        (approximate != 0 && approximate != 1))
        return weft_error_set(WEFT_ERR_RUNTIME, "add_bias_gelu: expected contiguous [M, N] "
                                                "pre-activation and output, a [N] bias of their "
                                                "dtype and approximate 0 or 1");
    return 0;
}
