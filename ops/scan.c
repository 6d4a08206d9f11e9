/* ops/scan.c: torch.cumsum and torch.cumprod on the named CUMSUM and CUMPROD kernels
 * (weft/kernel.h), with their nodes (CumsumBackward0, CumprodBackward0; weft/op_table.h's
 * WEFT_OPS_PORTED). Bool and integer inputs give int64, as PyTorch's default dtype does. */
#include "internal.h"

static weft_tensor *scan_in_scope(bool prod, weft_tensor *t, int d)
{
    static int cached[2] = {-1, -1};
    int op = ops_named_op(&cached[prod], prod ? WEFT_OP_CUMPROD_NAME : WEFT_OP_CUMSUM_NAME);
    enum weft_dtype dt = dtype_is_floating(t->dtype) ? t->dtype : WEFT_I64;
    weft_tensor *src = t->dtype == dt ? t : weft_to_dtype(t, dt);
    weft_tensor *out = weft_empty(t->ndim, t->shape, dt, t->device);
    if (!src || !out || op < 0)
        return NULL;
    if (numel_of(t) == 0)
        return out;
    struct weft_op_call call = {.op = op, .nin = 1, .nout = 1, .ints = {d}};
    call.in[0] = ops_as_vector(src);
    call.out[0] = ops_as_vector(out);
    if (!call.in[0] || !call.out[0] || weft_dispatch(&call) != 0)
        return NULL;
    return out;
}

static weft_tensor *scan_forward(bool prod, weft_tensor *t, int dim)
{
    if (!t || weft_require_strided(t, prod ? "cumprod" : "cumsum") != 0)
        return NULL;
    int d = weft_normalize_dim(dim, t->ndim);
    if (d < 0)
        return NULL;
    weft_scope_push();
    weft_tensor *out = weft_tensor_retain(scan_in_scope(prod, t, d));
    weft_scope_pop();
    return weft_tensor_finish(out);
}

/* The sum over j >= i along dim: cumsum of the flipped gradient, flipped back. */
static weft_tensor *reverse_cumsum(weft_tensor *g, int dim)
{
    return weft_flip(weft_cumsum(weft_flip(g, 1, &dim), dim), 1, &dim);
}

/* d y_j / d x_k = prod_{i <= j, i != k} x_i. Where x_k != 0 that is y_j / x_k; of the zeros
 * in a line only the first gets a gradient, sum_{j >= k} g_j y'_j with y' the cumprod of
 * the line with that zero made 1 (PyTorch's cumprod_backward, as ops). Saved: 0 the input,
 * 1 the result. */
static weft_tensor *cumprod_grad(weft_tensor *g, weft_tensor *x, weft_tensor *y, int dim)
{
    weft_tensor *is_zero = weft_eq_scalar(x, 0);
    weft_tensor *first_zero = weft_logical_and(
        is_zero, weft_eq_scalar(weft_cumsum(is_zero, dim), 1));
    weft_tensor *nonzero = weft_div(reverse_cumsum(weft_mul(g, y), dim),
                                    weft_masked_fill(x, is_zero, 1));
    weft_tensor *y1 = weft_cumprod(weft_masked_fill(x, first_zero, 1), dim);
    weft_tensor *at_zero = reverse_cumsum(weft_mul(g, y1), dim);
    return weft_where(first_zero, at_zero, weft_masked_fill(nonzero, is_zero, 0));
}

static int scan_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                         weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0];
    int dim = (int)weft_node_ints(node)[0];
    bool prod = weft_node_ints(node)[1] != 0;
    if (!g)
        return 0;
    if (g->ndim == 0) /* a 0-dim scan is the identity */
        grad_inputs[0] = weft_autorelease(weft_tensor_retain(g));
    else if (prod)
        grad_inputs[0] = cumprod_grad(g, weft_node_saved(node, 0), weft_node_saved(node, 1), dim);
    else
        grad_inputs[0] = reverse_cumsum(g, dim);
    return grad_inputs[0] ? 0 : weft_error_code();
}

static weft_tensor *scan(bool prod, weft_tensor *t, int dim)
{
    bool rec = weft_autograd_needed_inline(1, &t);
    weft_tensor *out = WEFT_NO_GRAD(rec, scan_forward(prod, t, dim));
    if (!rec || !out)
        return out;
    struct weft_node *node = weft_node_create(prod ? OP_GRAD_FN(CUMPROD) : OP_GRAD_FN(CUMSUM),
                                              scan_backward, 1, &t, prod ? 2 : 0);
    if (node) {
        weft_node_ints(node)[0] = weft_normalize_dim(dim, t->ndim);
        weft_node_ints(node)[1] = prod;
        if (prod && (weft_node_save(node, 0, t) != 0 ||
                     weft_node_save_output(node, 1, out, 0) != 0)) {
            weft_node_abandon(node);
            return weft_tensor_discard(out);
        }
    }
    return weft_node_finish1(node, out);
}

weft_tensor *weft_cumsum(weft_tensor *t, int dim)
{
    OP_AUTOCAST_RETURN(CUMSUM, 1, &t, weft_cumsum(t, dim));
    return scan(false, t, dim);
}

weft_tensor *weft_cumprod(weft_tensor *t, int dim)
{
    OP_AUTOCAST_RETURN(CUMPROD, 1, &t, weft_cumprod(t, dim));
    return scan(true, t, dim);
}
