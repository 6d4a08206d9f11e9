/* ops/sort.c: torch.sort, torch.argsort and torch.topk on the named SORT kernel
 * (weft/kernel.h), with their nodes (SortBackward0, TopkBackward0; weft/op_table.h's
 * WEFT_OPS_PORTED). topk is the first k of a sort: PyTorch selects them without sorting
 * the rest, which is faster for small k, and orders ties as its selection meets them. */
#include "internal.h"

/* values and int64 indices of t sorted along d, in the current scope */
static int sort_in_scope(weft_tensor *t, int d, bool descending, weft_tensor **values,
                         weft_tensor **indices)
{
    static int cached = -1;
    int op = ops_named_op(&cached, WEFT_OP_SORT_NAME);
    *values = weft_empty(t->ndim, t->shape, t->dtype, t->device);
    *indices = weft_empty(t->ndim, t->shape, WEFT_I64, t->device);
    if (op < 0 || !*values || !*indices)
        return weft_error_code();
    if (numel_of(t) == 0)
        return 0;
    struct weft_op_call call = {.op = op, .nin = 1, .nout = 2, .ints = {d, descending}};
    call.in[0] = ops_as_vector(t);
    call.out[0] = ops_as_vector(*values);
    call.out[1] = ops_as_vector(*indices);
    if (!call.in[0] || !call.out[0] || !call.out[1])
        return weft_error_code();
    return weft_dispatch(&call);
}

/* k < 0: all of them (sort) */
static int sort_forward(const char *name, weft_tensor *t, int dim, bool descending, int64_t k,
                        weft_tensor **values, weft_tensor **indices)
{
    *values = *indices = NULL;
    if (!t || weft_require_strided(t, name) != 0)
        return WEFT_ERR_VALUE;
    int d = weft_normalize_dim(dim, t->ndim);
    if (d < 0)
        return d;
    int64_t size = t->ndim ? t->shape[d] : 1;
    if (k > size)
        return weft_error_set(WEFT_ERR_RUNTIME, "selected index k out of range");
    if (k >= 0 && t->dtype == WEFT_BOOL)
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "\"topk_cpu\" not implemented for 'Bool'");
    weft_scope_push();
    weft_tensor *v = NULL, *i = NULL;
    int rc = sort_in_scope(t, d, descending, &v, &i);
    if (rc == 0 && k >= 0 && t->ndim > 0) {
        v = weft_narrow(v, d, 0, k);
        i = weft_narrow(i, d, 0, k);
        /* PyTorch's topk gives fresh contiguous results, not views into a sort */
        v = v ? weft_contiguous(v) : NULL;
        i = i ? weft_contiguous(i) : NULL;
        rc = v && i ? 0 : weft_error_code();
    }
    if (rc == 0) {
        *values = weft_tensor_retain(v);
        *indices = weft_tensor_retain(i);
    }
    weft_scope_pop();
    if (rc != 0)
        return rc;
    weft_tensor_finish(*values);
    weft_tensor_finish(*indices);
    return 0;
}

/* The gradient goes back to where each value came from. ints[0] dim. Saved: 0 indices. */
static int sort_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                         weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0], *idx = weft_node_saved(node, 0);
    if (!g)
        return 0;
    int dim = (int)weft_node_ints(node)[0];
    weft_tensor *zeros = weft_zeros(weft_node_input_ndim(node, 0), weft_node_input_shape(node, 0),
                                    g->dtype, g->device);
    grad_inputs[0] = g->ndim == 0 ? weft_autorelease(weft_tensor_retain(g))
                                  : weft_scatter(zeros, dim, idx, g);
    return grad_inputs[0] ? 0 : weft_error_code();
}

static int sort_record(const char *grad_fn, weft_tensor *t, int dim, weft_tensor *v,
                       weft_tensor *i)
{
    struct weft_node *node = weft_node_create(grad_fn, sort_backward, 1, &t, 1);
    if (!node)
        return weft_error_code();
    weft_node_ints(node)[0] = weft_normalize_dim(dim, t->ndim);
    int rc = weft_node_save(node, 0, i);
    weft_tensor *outs[2] = {v, i};
    if (rc == 0)
        return weft_node_finish(node, 2, outs);
    weft_node_abandon(node);
    return rc;
}

static int sort_op(const char *grad_fn, weft_tensor *t, int dim, bool descending, int64_t k,
                   weft_tensor **values, weft_tensor **indices)
{
    bool rec = weft_autograd_needed_inline(1, &t);
    weft_tensor *v = NULL, *i = NULL;
    int rc = WEFT_NO_GRAD(rec, sort_forward(k < 0 ? "sort" : "topk", t, dim, descending, k, &v,
                                            &i));
    if (rc == 0 && rec)
        rc = sort_record(grad_fn, t, dim, v, i);
    return weft_ops_hand_out_pair(rc, v, i, values, indices);
}

int weft_sort(weft_tensor *t, int dim, bool descending, weft_tensor **values,
              weft_tensor **indices)
{
    return sort_op(OP_GRAD_FN(SORT), t, dim, descending, -1, values, indices);
}

weft_tensor *weft_argsort(weft_tensor *t, int dim, bool descending)
{
    weft_tensor *indices = NULL;
    return weft_sort(t, dim, descending, NULL, &indices) == 0 ? indices : NULL;
}

int weft_topk(weft_tensor *t, int64_t k, int dim, bool largest, weft_tensor **values,
              weft_tensor **indices)
{
    if (k < 0)
        return weft_error_set(WEFT_ERR_RUNTIME, "selected index k out of range");
    return sort_op(OP_GRAD_FN(TOPK), t, dim, largest, k, values, indices);
}
