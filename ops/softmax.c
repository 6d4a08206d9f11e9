/* ops/softmax.c: softmax and log_softmax along one dim, forward and backward (rows
 * SOFTMAX and LOG_SOFTMAX of weft/op_table.h). */
#include "internal.h"

/* ---- forward ---------------------------------------------------------------------------- */

static weft_tensor *softmax_in_scope(int op, weft_tensor *t, int d)
{
    weft_tensor *out = weft_empty(t->ndim, t->shape, t->dtype, t->device);
    if (!out)
        return NULL;
    weft_tensor *in = t, *dst = out;
    if (t->ndim == 0) { /* a single element: a line of length 1 */
        const int64_t one = 1;
        in = weft_tensor_alias(t, 1, &one, &one, t->offset);
        dst = weft_tensor_alias(out, 1, &one, &one, out->offset);
        if (!in || !dst)
            return NULL;
    }
    struct weft_op_call call = {.op = op, .nin = 1, .nout = 1};
    call.in[0] = in;
    call.out[0] = dst;
    call.ints[0] = d;
    return weft_dispatch(&call) == 0 ? out : NULL;
}

static weft_tensor *softmax_common(int op, const char *name, weft_tensor *t, int dim)
{
    if (!t)
        return NULL;
    int d = weft_normalize_dim(dim, t->ndim);
    if (d < 0 || weft_require_strided(t, name) != 0)
        return NULL;
    /* PyTorch returns an empty input as it is, before its dtype dispatch */
    if (!weft_dtype_is_floating(t->dtype) && weft_tensor_numel(t) == 0)
        return weft_empty(t->ndim, t->shape, t->dtype, t->device);
    if (!weft_dtype_is_floating(t->dtype)) {
        bool last = t->ndim == 0 || d == t->ndim - 1;
        weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "\"%s%s_kernel_impl\" not implemented for '%s'",
                       name, last ? "_lastdim" : "", weft_dtype_torch_name(t->dtype));
        return NULL;
    }
    weft_scope_push();
    weft_tensor *result = weft_tensor_retain(softmax_in_scope(op, t, d));
    weft_scope_pop();
    return weft_tensor_finish(result);
}

static weft_tensor *softmax_forward(weft_tensor *t, int dim)
{
    return softmax_common(WEFT_OP_SOFTMAX, "softmax", t, dim);
}

static weft_tensor *log_softmax_forward(weft_tensor *t, int dim)
{
    return softmax_common(WEFT_OP_LOG_SOFTMAX, "log_softmax", t, dim);
}

/* ---- backward and the public ops ----------------------------------------------------------- */

static int softmax_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                            weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0], *y = weft_node_saved(node, 0);
    int dim = (int)weft_node_ints(node)[0];
    if (!g)
        return 0;
    if (weft_node_ints(node)[1]) /* log_softmax: g - exp(y) * sum(g) */
        grad_inputs[0] = weft_sub(g, weft_mul(weft_exp(y), weft_sum(g, 1, &dim, true)));
    else /* softmax: y * (g - sum(g * y)) */
        grad_inputs[0] = weft_mul(y, weft_sub(g, weft_sum(weft_mul(g, y), 1, &dim, true)));
    return grad_inputs[0] ? 0 : weft_error_code();
}

static weft_tensor *record_softmax(bool log, weft_tensor *in, int dim, weft_tensor *out)
{
    struct weft_node *node = weft_node_create(log ? OP_GRAD_FN(LOG_SOFTMAX) : OP_GRAD_FN(SOFTMAX),
                                              softmax_backward, 1, &in, 1);
    if (node && out) {
        weft_node_ints(node)[0] = dim < 0 ? dim + (in->ndim ? in->ndim : 1) : dim;
        weft_node_ints(node)[1] = log;
        if (weft_node_save_output(node, 0, out, 0) != 0) {
            weft_node_abandon(node);
            return weft_tensor_discard(out);
        }
    }
    return weft_node_finish1(node, out);
}

weft_tensor *weft_softmax(weft_tensor *t, int dim)
{
    OP_AUTOCAST_RETURN(SOFTMAX, 1, &t, weft_softmax(t, dim));
    bool rec = weft_autograd_needed_inline(1, &t);
    weft_tensor *out = WEFT_NO_GRAD(rec, softmax_forward(t, dim));
    return rec ? record_softmax(false, t, dim, out) : out;
}

weft_tensor *weft_log_softmax(weft_tensor *t, int dim)
{
    OP_AUTOCAST_RETURN(LOG_SOFTMAX, 1, &t, weft_log_softmax(t, dim));
    bool rec = weft_autograd_needed_inline(1, &t);
    weft_tensor *out = WEFT_NO_GRAD(rec, log_softmax_forward(t, dim));
    return rec ? record_softmax(true, t, dim, out) : out;
}
