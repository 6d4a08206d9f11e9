/* ops/index_update.c: Tensor.index_add, index_copy and index_fill (and their in-place
 * forms), made of the scatter kernels with the 1-D index spread over the other dims, with
 * PyTorch's checks, texts and nodes (IndexAddBackward0, IndexCopyBackward0,
 * IndexFillBackward0). Index ranges are checked on the host first (one read-back each of
 * the index's least and largest value). */
#include <stdio.h>
#include <string.h>

#include "internal.h"

enum update_kind { UP_ADD, UP_COPY, UP_FILL };

static const char *const up_names[] = {"index_add_", "index_copy_", "index_fill_"};

/* index [k] (or 0-dim) as int64 of shape `like` with k along dim and 1 elsewhere, expanded
 * to like's shape with k along dim */
static weft_tensor *spread_index(weft_tensor *index, int dim, int ndim, const int64_t *like)
{
    int64_t k = numel_of(index), shape[WEFT_MAX_DIMS], full[WEFT_MAX_DIMS];
    for (int d = 0; d < ndim; d++) {
        shape[d] = d == dim ? k : 1;
        full[d] = d == dim ? k : like[d];
    }
    weft_tensor *ix = index->dtype == WEFT_I64 ? index : weft_to_dtype(index, WEFT_I64);
    ix = ix ? weft_reshape(ix, ndim, shape) : NULL;
    return ix ? weft_expand(ix, ndim, full) : NULL;
}

/* Every index in [lo, size); an error in the op's words otherwise. */
static int check_range(enum update_kind kind, weft_tensor *index, int dim, int64_t size,
                       int64_t lo)
{
    if (numel_of(index) == 0)
        return 0;
    double mn, mx;
    if (weft_tensor_item(weft_amin(index, 0, NULL, false), &mn) != 0 ||
        weft_tensor_item(weft_amax(index, 0, NULL, false), &mx) != 0)
        return weft_error_code();
    double bad = mn < (double)lo ? mn : mx >= (double)size ? mx : 0;
    if (mn >= (double)lo && mx < (double)size)
        return 0;
    if (kind == UP_ADD)
        return weft_error_set(WEFT_ERR_INDEX, "index out of range in self");
    return weft_error_set(WEFT_ERR_INDEX, "%sindex %lld is out of bounds for dimension %d with size %lld",
                          kind == UP_COPY ? "index_copy_(): " : "", (long long)bad, dim,
                          (long long)size);
}

/* index_copy's text lists the sizes of the dims other than dim, of self and of source */
static int slice_shape_error(const weft_tensor *t, const weft_tensor *src, int d)
{
    char a[160] = "", b[160] = "";
    size_t la = 0, lb = 0;
    for (int i = 0; i < t->ndim; i++)
        if (i != d) {
            la += (size_t)snprintf(a + la, sizeof a - la, la ? " %lld" : "%lld", (long long)t->shape[i]);
            lb += (size_t)snprintf(b + lb, sizeof b - lb, lb ? " %lld" : "%lld", (long long)src->shape[i]);
        }
    return weft_error_set(WEFT_ERR_INDEX,
                          "index_copy_(): Source/destination tensor must have same slice shapes. "
                          "Destination slice shape: %s at dimension %d and source slice shape: %s "
                          "at dimension 0.",
                          a, d, b);
}

static int check_args(enum update_kind kind, weft_tensor *t, int d, weft_tensor *index,
                      weft_tensor *src)
{
    char s[160];
    const weft_tensor *all[3] = {t, index, src};
    if (weft_check_same_device(src ? 3 : 2, all) != 0 || weft_require_strided(t, up_names[kind]) != 0)
        return weft_error_code();
    bool int64 = index->dtype == WEFT_I64, int32 = index->dtype == WEFT_I32;
    if (kind == UP_ADD && !int64 && !int32)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "index_add_(): Expected dtype int32/int64 for index but got: %s",
                              weft_dtype_torch_name(index->dtype));
    if (kind == UP_COPY && !int64)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "index_copy_(): Expected a long tensor for index, but got %s",
                              weft_dtype_torch_name(index->dtype));
    if (kind == UP_FILL && !int64)
        return weft_error_set(WEFT_ERR_INDEX, "index_fill_(): Expected dtype int64 for index.");
    if (index->ndim > 1) {
        if (kind == UP_FILL)
            return weft_error_set(WEFT_ERR_RUNTIME, "Index has to be a vector/scalar");
        if (kind == UP_COPY)
            return weft_error_set(WEFT_ERR_INDEX,
                                  "index_copy_(): Index should have dimension 1 or 0 (got %d)",
                                  index->ndim);
        return weft_error_set(WEFT_ERR_INDEX,
                              "%s(): Index is supposed to be a vector, but got dim: %d with type: %s and size: %s",
                              up_names[kind], index->ndim, weft_dtype_torch_name(index->dtype),
                              weft_shape_str(index->ndim, index->shape, s, sizeof s));
    }
    if (!src)
        return 0;
    if (src->dtype != t->dtype)
        return kind == UP_ADD
                   ? weft_error_set(WEFT_ERR_RUNTIME,
                                    "index_add_(): self (%s) and source (%s) must have the same scalar type",
                                    weft_dtype_torch_name(t->dtype), weft_dtype_torch_name(src->dtype))
                   : weft_error_set(WEFT_ERR_RUNTIME,
                                    "index_copy_(): self and source expected to have the same dtype, but got (self) %s and (source) %s",
                                    weft_dtype_torch_name(t->dtype), weft_dtype_torch_name(src->dtype));
    int64_t k = numel_of(index), along = src->ndim ? src->shape[d] : 1;
    if (k != along)
        return kind == UP_ADD
                   ? weft_error_set(WEFT_ERR_RUNTIME,
                                    "index_add_(): Number of indices (%lld) should be equal to source.size(dim): (%lld), for dim: %d",
                                    (long long)k, (long long)along, d)
                   : weft_error_set(WEFT_ERR_INDEX,
                                    "index_copy_(): Number of indices (%lld) should be equal to source.size(dim) (%lld)",
                                    (long long)k, (long long)along);
    if (src->ndim != t->ndim)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "%s(): source has %d dims where self has %d (weft takes equal dims)",
                              up_names[kind], src->ndim, t->ndim);
    for (int i = 0; i < t->ndim; i++)
        if (i != d && src->shape[i] != t->shape[i] && kind == UP_COPY)
            return slice_shape_error(t, src, d);
        else if (i != d && src->shape[i] != t->shape[i])
            return weft_error_set(WEFT_ERR_RUNTIME,
                                  "The size of tensor a (%lld) must match the size of tensor b (%lld) at non-singleton dimension %d",
                                  (long long)t->shape[i], (long long)src->shape[i], i);
    return 0;
}

/* The out-of-place result (no history), in the current scope. */
static weft_tensor *update_in_scope(enum update_kind kind, weft_tensor *t, int d,
                                    weft_tensor *index, weft_tensor *src, double value)
{
    int64_t size = t->ndim ? t->shape[d] : 1;
    if (check_args(kind, t, d, index, src) != 0 ||
        check_range(kind, index, d, size, kind == UP_FILL ? -size : 0) != 0)
        return NULL;
    weft_tensor *self = ops_as_vector(t), *source = src ? ops_as_vector(src) : NULL;
    if (numel_of(index) == 0)
        return weft_clone(t);
    weft_tensor *idx = index;
    if (kind == UP_FILL) /* index_fill takes negative indices from the end */
        idx = weft_remainder_scalar(weft_to_dtype(index, WEFT_I64), (double)size);
    weft_tensor *ix = idx ? spread_index(idx, d, self->ndim, source ? source->shape : self->shape)
                          : NULL;
    weft_tensor *r = NULL;
    if (!ix)
        return NULL;
    switch (kind) {
    case UP_ADD: r = weft_scatter_add(self, d, ix, source); break;
    case UP_COPY: r = weft_scatter(self, d, ix, source); break;
    case UP_FILL: r = weft_scatter_value(self, d, ix, value); break;
    }
    return r && t->ndim == 0 ? weft_view(r, 0, NULL) : r;
}

/* index_add's alpha scales the source first (integers: alpha truncated, as PyTorch). */
static weft_tensor *scaled(weft_tensor *src, double alpha)
{
    if (alpha == 1)
        return src;
    weft_tensor *r = weft_mul_scalar(src, dtype_is_floating(src->dtype) ? alpha : (double)(int64_t)alpha);
    return r && r->dtype != src->dtype ? weft_to_dtype(r, src->dtype) : r;
}

static weft_tensor *update_forward(enum update_kind kind, weft_tensor *t, int dim,
                                   weft_tensor *index, weft_tensor *src, double value)
{
    if (!t || !index || (kind != UP_FILL && !src))
        return NULL;
    int d = weft_normalize_dim(dim, t->ndim);
    if (d < 0)
        return NULL;
    bool prev = weft_no_grad_begin();
    weft_scope_push();
    weft_tensor *s = kind == UP_ADD ? scaled(src, value) : src;
    weft_tensor *r = weft_tensor_retain(kind == UP_FILL || s ? update_in_scope(kind, t, d, index, s, value)
                                                            : NULL);
    weft_scope_pop();
    weft_grad_mode_restore(prev);
    return weft_tensor_finish(r);
}

/* ints[0] kind, ints[1] dim; scalars[0] alpha (add). Saved: 0 the index. */
static int index_update_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                                 weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0], *index = weft_node_saved(node, 0);
    if (!g)
        return 0;
    enum update_kind kind = (enum update_kind)weft_node_ints(node)[0];
    int dim = (int)weft_node_ints(node)[1];
    if (weft_node_needs_input_grad(node, 0)) {
        grad_inputs[0] = kind == UP_ADD ? weft_autorelease(weft_tensor_retain(g))
                                        : weft_index_fill(g, dim, index, 0);
        if (!grad_inputs[0])
            return weft_error_code();
    }
    if (kind != UP_FILL && weft_node_num_inputs(node) > 1 && weft_node_needs_input_grad(node, 1)) {
        weft_tensor *one_d = index->ndim ? index : weft_reshape(index, 1, (const int64_t[]){1});
        weft_tensor *sel = g->ndim ? weft_index_select(g, dim, one_d) : g;
        if (sel && kind == UP_ADD)
            sel = weft_mul_scalar(sel, weft_node_scalars(node)[0]);
        if (sel && weft_node_input_ndim(node, 1) != sel->ndim)
            sel = weft_reshape(sel, weft_node_input_ndim(node, 1), weft_node_input_shape(node, 1));
        if (!(grad_inputs[1] = sel))
            return weft_error_code();
    }
    return 0;
}

static weft_tensor *record(enum update_kind kind, weft_tensor *t, weft_tensor *src, int dim,
                           weft_tensor *index, double alpha, weft_tensor *out)
{
    const char *name = kind == UP_ADD    ? OP_GRAD_FN(INDEX_ADD)
                       : kind == UP_COPY ? OP_GRAD_FN(INDEX_COPY)
                                         : OP_GRAD_FN(INDEX_FILL);
    weft_tensor *ins[2] = {t, src};
    struct weft_node *node = weft_node_create(name, index_update_backward, src ? 2 : 1, ins, 1);
    if (node && out) {
        weft_node_ints(node)[0] = kind;
        weft_node_ints(node)[1] = weft_normalize_dim(dim, t->ndim);
        weft_node_scalars(node)[0] = alpha;
        if (weft_node_save(node, 0, index) != 0) {
            weft_node_abandon(node);
            return weft_tensor_discard(out);
        }
    }
    return weft_node_finish1(node, out);
}

static weft_tensor *update(enum update_kind kind, weft_tensor *t, int dim, weft_tensor *index,
                           weft_tensor *src, double value)
{
    weft_tensor *ins[2] = {t, src};
    bool rec = weft_autograd_needed_inline(src ? 2 : 1, ins);
    weft_tensor *out = update_forward(kind, t, dim, index, src, value);
    return rec && out ? record(kind, t, src, dim, index, value, out) : out;
}

static weft_tensor *update_(enum update_kind kind, weft_tensor *t, int dim, weft_tensor *index,
                            weft_tensor *src, double value)
{
    weft_tensor *ins[2] = {t, src};
    bool rec = weft_autograd_needed_inline(src ? 2 : 1, ins);
    if (rec && weft_autograd_check_inplace(t, true) != 0)
        return NULL;
    weft_tensor *r = update_forward(kind, t, dim, index, src, value);
    int rc = ops_write_result_(t, r);
    weft_tensor_discard(r);
    if (rc != 0)
        return NULL;
    return rec ? record(kind, t, src, dim, index, value, t) : t;
}

weft_tensor *weft_index_add(weft_tensor *t, int dim, weft_tensor *index, weft_tensor *source,
                            double alpha)
{
    return update(UP_ADD, t, dim, index, source, alpha);
}

weft_tensor *weft_index_add_(weft_tensor *t, int dim, weft_tensor *index, weft_tensor *source,
                             double alpha)
{
    return update_(UP_ADD, t, dim, index, source, alpha);
}

weft_tensor *weft_index_copy(weft_tensor *t, int dim, weft_tensor *index, weft_tensor *source)
{
    return update(UP_COPY, t, dim, index, source, 0);
}

weft_tensor *weft_index_copy_(weft_tensor *t, int dim, weft_tensor *index, weft_tensor *source)
{
    return update_(UP_COPY, t, dim, index, source, 0);
}

weft_tensor *weft_index_fill(weft_tensor *t, int dim, weft_tensor *index, double value)
{
    return update(UP_FILL, t, dim, index, NULL, value);
}

weft_tensor *weft_index_fill_(weft_tensor *t, int dim, weft_tensor *index, double value)
{
    return update_(UP_FILL, t, dim, index, NULL, value);
}
