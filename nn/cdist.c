/* nn/cdist.c: torch.cdist, p-norm distances between the rows of two batched matrices.
 *
 * As ATen's cdist (Distance.cpp, 1.13): batch dims broadcast and flatten to one, then
 * either the direct formula (the cdist kernel op, node CdistBackward0 over cdist_backward)
 * or, for p = 2 when compute_mode asks for it (by default when either side has more than
 * 25 rows), the matrix-multiply formula |a|^2 - 2 a.b + |b|^2 made of weft ops, with
 * PyTorch's _euclidean_dist_backward (EuclideanDistBackward0). That formula is faster but
 * loses precision to cancellation: a distance much smaller than the points' norms carries
 * an absolute error of about sqrt(eps) * |x| (1e-3 for float32 points of norm 10), and
 * identical points can come out a little above 0, exactly as in PyTorch. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "functional.h"

static int cdist_op(void)
{
    static int cached = -1;
    return nn_named_op(&cached, WEFT_OP_CDIST_NAME);
}

static int cdist_backward_op(void)
{
    static int cached = -1;
    return nn_named_op(&cached, WEFT_OP_CDIST_BACKWARD_NAME);
}

/* ---- the direct formula ------------------------------------------------------------------ */

/* grad_x1 [B, P, M] for (grad, x1, x2, dist) through cdist_backward. */
static weft_tensor *cdist_grad(weft_tensor *g, weft_tensor *a, weft_tensor *b, weft_tensor *dist,
                               double p)
{
    weft_tensor *out = weft_empty(3, a->shape, g->dtype, g->device);
    if (!out)
        return NULL;
    struct weft_op_call call = {.op = cdist_backward_op(), .nin = 4, .nout = 1};
    call.in[0] = g;
    call.in[1] = a;
    call.in[2] = b;
    call.in[3] = dist;
    call.out[0] = out;
    call.scalar[0] = p;
    return weft_dispatch(&call) == 0 ? out : NULL;
}

/* x as [B, rows, M]: its batch dims expanded to batch[0..nb) and flattened. */
static weft_tensor *batched(weft_tensor *x, int nb, const int64_t *batch, int64_t B)
{
    int64_t full[WEFT_MAX_DIMS];
    memcpy(full, batch, (size_t)nb * sizeof *batch);
    full[nb] = x->shape[x->ndim - 2];
    full[nb + 1] = x->shape[x->ndim - 1];
    const int64_t v[3] = {B, full[nb], full[nb + 1]};
    return weft_reshape(weft_expand(x, nb + 2, full), 3, v);
}

/* g [B, P, M] as [batch..., P, M]: the engine sums the broadcast dims back. */
static weft_tensor *unbatched(weft_tensor *g, int nb, const int64_t *batch)
{
    int64_t full[WEFT_MAX_DIMS];
    memcpy(full, batch, (size_t)nb * sizeof *batch);
    full[nb] = g ? g->shape[1] : 0;
    full[nb + 1] = g ? g->shape[2] : 0;
    return weft_reshape(g, nb + 2, full);
}

/* saved: 0 x1, 1 x2, 2 the result ([batch..., P, R]); scalars[0] p; ints[0] the number of
 * batch dims, ints[1..] the broadcast batch shape. */
static int cdist_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                          weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0];
    if (!g)
        return 0;
    const int64_t *ints = weft_node_ints(node);
    int nb = (int)ints[0];
    const int64_t *batch = ints + 1;
    int64_t B = 1;
    for (int d = 0; d < nb; d++)
        B *= batch[d];
    weft_tensor *a = batched(weft_node_saved(node, 0), nb, batch, B);
    weft_tensor *b = batched(weft_node_saved(node, 1), nb, batch, B);
    weft_tensor *dist = weft_node_saved(node, 2);
    const int64_t vd[3] = {B, dist->shape[dist->ndim - 2], dist->shape[dist->ndim - 1]};
    dist = weft_reshape(dist, 3, vd);
    g = weft_reshape(g, 3, vd);
    double p = weft_node_scalars(node)[0];
    if (!a || !b || !dist || !g)
        return weft_error_code();
    if (weft_node_needs_input_grad(node, 0) &&
        !(grad_inputs[0] = unbatched(cdist_grad(g, a, b, dist, p), nb, batch)))
        return weft_error_code();
    if (weft_node_needs_input_grad(node, 1) &&
        !(grad_inputs[1] = unbatched(cdist_grad(weft_transpose(g, 1, 2), b, a,
                                                weft_transpose(dist, 1, 2), p),
                                     nb, batch)))
        return weft_error_code();
    return 0;
}

/* y [batch..., P, R] by the kernel on the [B, ...] views a, b; the node sits on y itself,
 * as PyTorch's CdistBackward0 does. */
static weft_tensor *cdist_direct(weft_tensor *x1, weft_tensor *x2, weft_tensor *a, weft_tensor *b,
                                 int nb, const int64_t *batch, double p)
{
    int64_t shape[WEFT_MAX_DIMS];
    memcpy(shape, batch, (size_t)nb * sizeof *batch);
    shape[nb] = a->shape[1];
    shape[nb + 1] = b->shape[1];
    const int64_t v[3] = {a->shape[0], a->shape[1], b->shape[1]};
    weft_tensor *y = weft_empty(nb + 2, shape, x1->dtype, x1->device);
    bool prev = weft_no_grad_begin();
    weft_tensor *y3 = weft_view(y, 3, v);
    weft_grad_mode_restore(prev);
    if (!y3)
        return NULL;
    struct weft_op_call call = {.op = cdist_op(), .nin = 2, .nout = 1};
    call.in[0] = a;
    call.in[1] = b;
    call.out[0] = y3;
    call.scalar[0] = p;
    if (weft_dispatch(&call) != 0)
        return NULL;
    weft_tensor *in[2] = {x1, x2};
    if (!weft_autograd_needed(2, in))
        return y;
    struct weft_node *node = weft_node_create("CdistBackward0", cdist_backward, 2, in, 3);
    if (!node)
        return NULL;
    weft_node_scalars(node)[0] = p;
    weft_node_ints(node)[0] = nb;
    memcpy(weft_node_ints(node) + 1, batch, (size_t)nb * sizeof *batch);
    if (weft_node_save(node, 0, x1) != 0 || weft_node_save(node, 1, x2) != 0 ||
        weft_node_save(node, 2, y) != 0) {
        weft_node_abandon(node);
        return NULL;
    }
    return weft_nn_attach(node, y);
}

/* ---- p = 2 by matrix multiplication: ATen's _euclidean_dist ------------------------------- */

/* saved: 0 x1, 1 x2, 2 the result. PyTorch's _euclidean_dist_backward: ratio = grad / res,
 * 0 where res == 0 (the subgradient at coincident points). */
static int euclid_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                           weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0];
    if (!g)
        return 0;
    weft_tensor *x1 = weft_node_saved(node, 0), *x2 = weft_node_saved(node, 1);
    weft_tensor *res = weft_node_saved(node, 2);
    weft_tensor *ratio = weft_masked_fill(weft_div(g, res), weft_eq_scalar(res, 0), 0);
    const int last[1] = {-1}, rows[1] = {-2};
    if (weft_node_needs_input_grad(node, 0) &&
        !(grad_inputs[0] = weft_sub(weft_mul(x1, weft_sum(ratio, 1, last, true)),
                                    weft_matmul(ratio, x2))))
        return weft_error_code();
    if (weft_node_needs_input_grad(node, 1) &&
        !(grad_inputs[1] = weft_sub(weft_mul(x2, weft_unsqueeze(weft_sum(ratio, 1, rows, false), -1)),
                                    weft_matmul(weft_transpose(ratio, -1, -2), x1))))
        return weft_error_code();
    return 0;
}

static weft_tensor *cdist_mm(weft_tensor *x1, weft_tensor *x2)
{
    const int last[1] = {-1};
    bool prev = weft_no_grad_begin();
    weft_tensor *n1 = weft_sum(weft_mul(x1, x1), 1, last, true);
    weft_tensor *n2 = weft_sum(weft_mul(x2, x2), 1, last, true);
    weft_tensor *a[3] = {weft_mul_scalar(x1, -2), n1, weft_ones_like(n1)};
    weft_tensor *b[3] = {x2, weft_ones_like(n2), n2};
    weft_tensor *res = NULL;
    if (a[0] && a[2] && b[1]) {
        res = weft_matmul(weft_cat(3, a, -1), weft_transpose(weft_cat(3, b, -1), -1, -2));
        res = weft_sqrt(weft_clamp(res, 0, NAN));
    }
    weft_grad_mode_restore(prev);
    weft_tensor *in[2] = {x1, x2};
    if (!res || !weft_autograd_needed(2, in))
        return res;
    struct weft_node *node = weft_node_create("EuclideanDistBackward0", euclid_backward, 2, in, 3);
    if (!node)
        return NULL;
    if (weft_node_save(node, 0, x1) != 0 || weft_node_save(node, 1, x2) != 0 ||
        weft_node_save(node, 2, res) != 0) {
        weft_node_abandon(node);
        return NULL;
    }
    return weft_nn_attach(node, res);
}

/* ---- front end ------------------------------------------------------------------------------ */

static int check_args(const weft_tensor *x1, const weft_tensor *x2, double p, int mode)
{
    if (x1->ndim < 2)
        return weft_error_set(WEFT_ERR_RUNTIME, "cdist only supports at least 2D tensors, X1 got: %dD",
                              x1->ndim);
    if (x2->ndim < 2)
        return weft_error_set(WEFT_ERR_RUNTIME, "cdist only supports at least 2D tensors, X2 got: %dD",
                              x2->ndim);
    if (x1->shape[x1->ndim - 1] != x2->shape[x2->ndim - 1])
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "X1 and X2 must have the same number of columns. X1: %lld X2: %lld",
                              (long long)x1->shape[x1->ndim - 1], (long long)x2->shape[x2->ndim - 1]);
    if (!weft_dtype_is_floating(x1->dtype))
        return weft_error_set(WEFT_ERR_RUNTIME, "cdist only supports floating-point dtypes, X1 got: %s",
                              weft_dtype_torch_name(x1->dtype));
    if (!weft_dtype_is_floating(x2->dtype))
        return weft_error_set(WEFT_ERR_RUNTIME, "cdist only supports floating-point dtypes, X2 got: %s",
                              weft_dtype_torch_name(x2->dtype));
    if (!(p >= 0))
        return weft_error_set(WEFT_ERR_RUNTIME, "cdist only supports non-negative p values");
    if (mode < 0 || mode > 2)
        return weft_error_set(WEFT_ERR_RUNTIME, "possible modes: 0, 1, 2, but was: %d", mode);
    if (x1->dtype != x2->dtype)
        return weft_error_set(WEFT_ERR_RUNTIME, "expected scalar type %s but found %s",
                              weft_dtype_torch_name(x1->dtype), weft_dtype_torch_name(x2->dtype));
    const weft_tensor *both[2] = {x1, x2};
    if (weft_check_same_device(2, both) != 0)
        return weft_error_code();
    if (x1->layout != WEFT_LAYOUT_STRIDED || x2->layout != WEFT_LAYOUT_STRIDED)
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "cdist: only strided tensors are supported");
    return 0;
}

static weft_tensor *cdist_in_scope(weft_tensor *x1, weft_tensor *x2, double p, int mode)
{
    if (check_args(x1, x2, p, mode) != 0)
        return NULL;
    int64_t batch[WEFT_MAX_DIMS], full[WEFT_MAX_DIMS];
    int nb;
    if (weft_broadcast_shapes(x1->ndim - 2, x1->shape, x2->ndim - 2, x2->shape, &nb, batch) != 0)
        return NULL;
    if (nb > WEFT_MAX_DIMS - 2) {
        weft_error_set(WEFT_ERR_RUNTIME, "cdist: at most %d batch dims", WEFT_MAX_DIMS - 2);
        return NULL;
    }
    int64_t B = 1, P = x1->shape[x1->ndim - 2], R = x2->shape[x2->ndim - 2];
    int64_t M = x1->shape[x1->ndim - 1];
    for (int d = 0; d < nb; d++)
        B *= batch[d];
    bool mm = p == 2 && (mode == WEFT_CDIST_USE_MM || (mode == WEFT_CDIST_USE_MM_IF_NECESSARY &&
                                                       (P > 25 || R > 25)));
    if (!mm || B * P * R == 0 || M == 0) {
        bool prev = weft_no_grad_begin(); /* the [B, rows, M] views are the kernel's only */
        weft_tensor *a = batched(x1, nb, batch, B), *b = batched(x2, nb, batch, B);
        weft_grad_mode_restore(prev);
        return a && b ? cdist_direct(x1, x2, a, b, nb, batch, p) : NULL;
    }
    /* PyTorch: _euclidean_dist on the [B, rows, M] tensors, then a view to the result */
    weft_tensor *y = cdist_mm(batched(x1, nb, batch, B), batched(x2, nb, batch, B));
    memcpy(full, batch, (size_t)nb * sizeof *batch);
    full[nb] = P, full[nb + 1] = R;
    return weft_view(y, nb + 2, full);
}

weft_tensor *weft_cdist_mode(weft_tensor *x1, weft_tensor *x2, double p,
                             enum weft_cdist_compute_mode compute_mode)
{
    if (!x1 || !x2)
        return NULL;
    weft_tensor *in[2] = {x1, x2};
    WEFT_AUTOCAST_RETURN("cdist", 2, in, weft_cdist_mode(in[0], in[1], p, compute_mode));
    weft_scope_push();
    weft_tensor *y = weft_tensor_retain(cdist_in_scope(x1, x2, p, (int)compute_mode));
    weft_scope_pop();
    return weft_autorelease(y);
}

weft_tensor *weft_cdist(weft_tensor *x1, weft_tensor *x2, double p)
{
    return weft_cdist_mode(x1, x2, p, WEFT_CDIST_USE_MM_IF_NECESSARY);
}
