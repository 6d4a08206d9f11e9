/* ops/index.c: cat, stack, index_select, gather, scatter_add and one_hot, forward and
 * backward (their rows in weft/op_table.h). */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* A 0-dim tensor seen as a 1-element vector (the kernels want a dim to index). */
static weft_tensor *as_vector(weft_tensor *t)
{
    if (t->ndim > 0)
        return t;
    const int64_t one = 1;
    return weft_tensor_alias(t, 1, &one, &one, t->offset);
}

/* ---- cat / stack ------------------------------------------------------------------------ */

/* PyTorch's legacy rule: 1-D empty tensors take no part in cat's shape checks. */
static bool cat_skipped(const weft_tensor *t)
{
    return t->ndim == 1 && t->shape[0] == 0;
}

static int cat_check(int n, weft_tensor *const *ts, const weft_tensor *ref, int d)
{
    for (int i = 0; i < n; i++) {
        const weft_tensor *t = ts[i];
        if (cat_skipped(t))
            continue;
        if (t->ndim != ref->ndim)
            return weft_error_set(WEFT_ERR_RUNTIME,
                                  "Tensors must have same number of dimensions: got %d and %d",
                                  ref->ndim, t->ndim);
        for (int k = 0; k < t->ndim; k++)
            if (k != d && t->shape[k] != ref->shape[k])
                return weft_error_set(
                    WEFT_ERR_RUNTIME,
                    "Sizes of tensors must match except in dimension %d. Expected size "
                    "%lld but got size %lld for tensor number %d in the list.",
                    d, (long long)ref->shape[k], (long long)t->shape[k], i);
    }
    return 0;
}

static weft_tensor *cat_in_scope(int n, weft_tensor *const *ts, int dim)
{
    enum weft_dtype dtype = ts[0]->dtype;
    const weft_tensor *ref = NULL;
    for (int i = 0; i < n; i++) {
        if (ts[i]->ndim == 0) {
            weft_error_set(WEFT_ERR_RUNTIME,
                           "zero-dimensional tensor (at position %d) cannot be concatenated", i);
            return NULL;
        }
        if (weft_require_strided(ts[i], "cat") != 0)
            return NULL;
        dtype = weft_promote_types(dtype, ts[i]->dtype);
        if (!ref && !cat_skipped(ts[i]))
            ref = ts[i];
    }
    if (weft_check_same_device(n, (const weft_tensor *const *)ts) != 0)
        return NULL;
    if (!ref) /* only legacy empty tensors */
        return weft_empty(1, (const int64_t[]){0}, dtype, ts[0]->device);
    int d = weft_normalize_dim(dim, ref->ndim);
    if (d < 0 || cat_check(n, ts, ref, d) != 0)
        return NULL;
    int64_t shape[WEFT_MAX_DIMS];
    memcpy(shape, ref->shape, sizeof shape);
    shape[d] = 0;
    for (int i = 0; i < n; i++)
        if (!cat_skipped(ts[i]))
            shape[d] += ts[i]->shape[d];
    weft_tensor *out = weft_empty(ref->ndim, shape, dtype, ref->device);
    if (!out)
        return NULL;
    int64_t at = 0;
    for (int i = 0; i < n; i++) {
        if (cat_skipped(ts[i]) || ts[i]->shape[d] == 0)
            continue;
        shape[d] = ts[i]->shape[d];
        weft_tensor *part = weft_tensor_alias(out, out->ndim, shape, out->stride,
                                              out->offset + at * out->stride[d]);
        if (!part || weft_copy_(part, ts[i]) != 0)
            return NULL;
        at += shape[d];
    }
    return out;
}

static weft_tensor *cat_forward(int n, weft_tensor *const *tensors, int dim)
{
    if (n <= 0 || !tensors) {
        weft_error_set(WEFT_ERR_RUNTIME, "torch.cat(): expected a non-empty list of Tensors");
        return NULL;
    }
    for (int i = 0; i < n; i++)
        if (!tensors[i])
            return NULL;
    weft_scope_push();
    weft_tensor *result = weft_tensor_retain(cat_in_scope(n, tensors, dim));
    weft_scope_pop();
    return weft_tensor_finish(result);
}

static weft_tensor *stack_parts(int n, weft_tensor *const *ts, int d, weft_tensor **parts)
{
    const weft_tensor *first = ts[0];
    for (int i = 0; i < n; i++) {
        const weft_tensor *t = ts[i];
        if (t->ndim != first->ndim ||
            memcmp(t->shape, first->shape, (size_t)t->ndim * sizeof *t->shape) != 0) {
            char a[160], b[160];
            weft_error_set(
                WEFT_ERR_RUNTIME,
                "stack expects each tensor to be equal size, but got %s at entry 0 and %s "
                "at entry %d",
                weft_shape_str(first->ndim, first->shape, a, sizeof a),
                weft_shape_str(t->ndim, t->shape, b, sizeof b), i);
            return NULL;
        }
        if (weft_require_strided(t, "stack") != 0)
            return NULL;
        int64_t shape[WEFT_MAX_DIMS], stride[WEFT_MAX_DIMS];
        for (int k = 0, j = 0; k <= t->ndim; k++) {
            if (k == d) {
                shape[k] = 1;
                stride[k] = j < t->ndim ? t->shape[j] * t->stride[j] : 1;
                continue;
            }
            shape[k] = t->shape[j];
            stride[k] = t->stride[j++];
        }
        parts[i] = weft_tensor_alias(ts[i], t->ndim + 1, shape, stride, t->offset);
        if (!parts[i])
            return NULL;
    }
    return cat_forward(n, parts, d);
}

static weft_tensor *stack_in_scope(int n, weft_tensor *const *ts, int d)
{
    weft_tensor **parts = malloc((size_t)n * sizeof *parts);
    if (!parts) {
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory stacking %d tensors", n);
        return NULL;
    }
    weft_tensor *out = stack_parts(n, ts, d, parts);
    free(parts);
    return out;
}

static weft_tensor *stack_forward(int n, weft_tensor *const *tensors, int dim)
{
    if (n <= 0 || !tensors) {
        weft_error_set(WEFT_ERR_RUNTIME, "stack expects a non-empty TensorList");
        return NULL;
    }
    for (int i = 0; i < n; i++)
        if (!tensors[i])
            return NULL;
    if (tensors[0]->ndim + 1 > WEFT_MAX_DIMS) {
        weft_error_set(WEFT_ERR_VALUE, "weft tensors have at most %d dimensions, but %d were given",
                       WEFT_MAX_DIMS, tensors[0]->ndim + 1);
        return NULL;
    }
    int d = weft_normalize_dim(dim, tensors[0]->ndim + 1);
    if (d < 0)
        return NULL;
    weft_scope_push();
    weft_tensor *result = weft_tensor_retain(stack_in_scope(n, tensors, d));
    weft_scope_pop();
    return weft_tensor_finish(result);
}

/* ---- index_select ------------------------------------------------------------------------- */

static weft_tensor *index_select_in_scope(weft_tensor *t, int d, weft_tensor *index)
{
    int64_t nidx = weft_tensor_numel(index);
    if (t->ndim == 0 && nidx != 1) {
        weft_error_set(WEFT_ERR_INDEX,
                       "index_select(): Index to scalar can have only 1 value, got %lld value(s)",
                       (long long)nidx);
        return NULL;
    }
    weft_tensor *idx = weft_to_dtype(index, WEFT_I64);
    weft_tensor *src = idx ? as_vector(t) : NULL;
    idx = idx ? as_vector(idx) : NULL;
    if (!src || !idx)
        return NULL;
    int64_t shape[WEFT_MAX_DIMS];
    memcpy(shape, src->shape, sizeof shape);
    shape[d] = nidx;
    weft_tensor *out = weft_empty(src->ndim, shape, t->dtype, t->device);
    if (!out)
        return NULL;
    struct weft_op_call call = {.op = WEFT_OP_INDEX_SELECT, .nin = 2, .nout = 1};
    call.in[0] = src;
    call.in[1] = idx;
    call.out[0] = out;
    call.ints[0] = d;
    if (weft_dispatch(&call) != 0)
        return NULL;
    return t->ndim == 0 ? weft_tensor_alias(out, 0, NULL, NULL, out->offset) : out;
}

static weft_tensor *index_select_forward(weft_tensor *t, int dim, weft_tensor *index)
{
    if (!t || !index)
        return NULL;
    const weft_tensor *both[2] = {t, index};
    if (weft_check_same_device(2, both) != 0 || weft_require_strided(t, "index_select") != 0 ||
        weft_require_strided(index, "index_select") != 0)
        return NULL;
    int d = weft_normalize_dim(dim, t->ndim);
    if (d < 0)
        return NULL;
    if (index->ndim > 1) {
        weft_error_set(WEFT_ERR_INDEX, "index_select(): Index is supposed to be a vector");
        return NULL;
    }
    if (index->dtype != WEFT_I64 && index->dtype != WEFT_I32) {
        weft_error_set(WEFT_ERR_INDEX, "index_select(): Expected dtype int32 or int64 for index");
        return NULL;
    }
    weft_scope_push();
    weft_tensor *result = weft_tensor_retain(index_select_in_scope(t, d, index));
    weft_scope_pop();
    return weft_tensor_finish(result);
}

/* ---- gather / scatter_add ------------------------------------------------------------------- */

static int nonempty_ndim(const weft_tensor *t)
{
    return t->ndim > 0 ? t->ndim : 1;
}

static int64_t nonempty_size(const weft_tensor *t, int d)
{
    return t->ndim > 0 ? t->shape[d] : 1;
}

static int gather_shape_check(const weft_tensor *t, int d, const weft_tensor *index)
{
    if (nonempty_ndim(t) != nonempty_ndim(index))
        return weft_error_set(
            WEFT_ERR_RUNTIME,
            "Index tensor must have the same number of dimensions as input tensor");
    for (int k = 0; k < nonempty_ndim(t); k++)
        if (k != d && nonempty_size(index, k) > nonempty_size(t, k)) {
            char a[160], b[160];
            return weft_error_set(
                WEFT_ERR_RUNTIME,
                "Size does not match at dimension %d expected index %s to be smaller "
                "than self %s apart from dimension %d",
                k, weft_shape_str(index->ndim, index->shape, a, sizeof a),
                weft_shape_str(t->ndim, t->shape, b, sizeof b), d);
        }
    return 0;
}

static weft_tensor *gather_forward(weft_tensor *t, int dim, weft_tensor *index)
{
    if (!t || !index)
        return NULL;
    const weft_tensor *both[2] = {t, index};
    if (weft_check_same_device(2, both) != 0 || weft_require_strided(t, "gather") != 0 ||
        weft_require_strided(index, "gather") != 0)
        return NULL;
    int d = weft_normalize_dim(dim, t->ndim);
    if (d < 0)
        return NULL;
    bool empty = weft_tensor_numel(index) == 0;
    if (!empty && index->dtype != WEFT_I64) {
        weft_error_set(WEFT_ERR_RUNTIME, "gather(): Expected dtype int64 for index");
        return NULL;
    }
    if (!empty && gather_shape_check(t, d, index) != 0)
        return NULL;
    weft_scope_push();
    weft_tensor *result = weft_empty(index->ndim, index->shape, t->dtype, t->device);
    if (result && !empty) {
        struct weft_op_call call = {.op = WEFT_OP_GATHER, .nin = 2, .nout = 1};
        call.in[0] = as_vector(t);
        call.in[1] = as_vector(index);
        call.out[0] = as_vector(result);
        call.ints[0] = d;
        if (!call.in[0] || !call.in[1] || !call.out[0] || weft_dispatch(&call) != 0)
            result = NULL;
    }
    weft_tensor_retain(result);
    weft_scope_pop();
    return weft_tensor_finish(result);
}

int weft_scatter_shape_check(const weft_tensor *t, int d, const weft_tensor *index,
                             const weft_tensor *src)
{
    int nd = nonempty_ndim(t);
    if (nd != nonempty_ndim(index))
        return weft_error_set(
            WEFT_ERR_RUNTIME,
            "Index tensor must have the same number of dimensions as self tensor");
    bool wrong = false;
    for (int k = 0; k < nd && !wrong; k++)
        wrong = k != d && nonempty_size(index, k) > nonempty_size(t, k);
    if (nonempty_ndim(src) != nonempty_ndim(index))
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "Index tensor must have the same number of dimensions as src tensor");
    for (int k = 0; k < nd && !wrong; k++)
        wrong = nonempty_size(index, k) > nonempty_size(src, k);
    if (wrong) {
        char a[160], b[160], c[160];
        return weft_error_set(
            WEFT_ERR_RUNTIME,
            "Expected index %s to be smaller than self %s apart from dimension %d and "
            "to be smaller size than src %s",
            weft_shape_str(index->ndim, index->shape, a, sizeof a),
            weft_shape_str(t->ndim, t->shape, b, sizeof b), d,
            weft_shape_str(src->ndim, src->shape, c, sizeof c));
    }
    return 0;
}

static weft_tensor *scatter_add_forward_(weft_tensor *t, int dim, weft_tensor *index, weft_tensor *src)
{
    if (!t || !index || !src)
        return NULL;
    const weft_tensor *all[3] = {t, index, src};
    if (weft_check_same_device(3, all) != 0 || weft_require_strided(t, "scatter_add") != 0 ||
        weft_require_strided(index, "scatter_add") != 0 || weft_require_strided(src, "scatter_add") != 0)
        return NULL;
    int d = weft_normalize_dim(dim, t->ndim);
    if (d < 0)
        return NULL;
    bool empty = weft_tensor_numel(index) == 0;
    if (!empty && index->dtype != WEFT_I64) {
        weft_error_set(WEFT_ERR_RUNTIME, "scatter(): Expected dtype int64 for index");
        return NULL;
    }
    if (t->dtype != src->dtype) {
        weft_error_set(WEFT_ERR_RUNTIME, "scatter(): Expected self.dtype to be equal to src.dtype");
        return NULL;
    }
    if (!empty && weft_scatter_shape_check(t, d, index, src) != 0)
        return NULL;
    int rc = 0;
    if (!empty) {
        weft_scope_push();
        struct weft_op_call call = {.op = WEFT_OP_SCATTER_ADD, .nin = 2, .nout = 1};
        call.in[0] = as_vector(index);
        call.in[1] = as_vector(src);
        call.out[0] = as_vector(t);
        call.ints[0] = d;
        rc = !call.in[0] || !call.in[1] || !call.out[0] ? -1 : weft_dispatch(&call);
        weft_scope_pop();
    }
    if (rc != 0)
        return NULL;
    weft_tensor_bump_version(t);
    return t;
}

static weft_tensor *scatter_add_forward(weft_tensor *t, int dim, weft_tensor *index, weft_tensor *src)
{
    if (!t || !index || !src)
        return NULL;
    weft_scope_push();
    weft_tensor *result = weft_tensor_retain(scatter_add_forward_(weft_clone(t), dim, index, src));
    weft_scope_pop();
    return weft_tensor_finish(result);
}

/* ---- one_hot ---------------------------------------------------------------------------- */

static int extreme_value(weft_tensor *(*fn)(weft_tensor *), weft_tensor *t, int64_t *out)
{
    double v;
    weft_tensor *e = fn(t);
    if (!e || weft_tensor_item(e, &v) != 0)
        return -1;
    *out = (int64_t)v;
    return 0;
}

static weft_tensor *one_hot_in_scope(weft_tensor *t, int64_t num_classes)
{
    int64_t shape[WEFT_MAX_DIMS + 1];
    memcpy(shape, t->shape, (size_t)t->ndim * sizeof *shape);
    int nd = t->ndim + 1;
    if (weft_tensor_numel(t) == 0) {
        if (num_classes <= 0) {
            weft_error_set(WEFT_ERR_RUNTIME,
                           "Can not infer total number of classes from empty tensor.");
            return NULL;
        }
        shape[t->ndim] = num_classes;
        return weft_empty(nd, shape, WEFT_I64, t->device);
    }
    int64_t lo, hi;
    if (extreme_value(weft_min, t, &lo) != 0 || extreme_value(weft_max, t, &hi) != 0)
        return NULL;
    if (lo < 0) {
        weft_error_set(WEFT_ERR_RUNTIME, "Class values must be non-negative.");
        return NULL;
    }
    if (num_classes < 0) {
        num_classes = hi + 1;
    } else if (hi >= num_classes) {
        weft_error_set(WEFT_ERR_RUNTIME, "Class values must be smaller than num_classes.");
        return NULL;
    }
    shape[t->ndim] = num_classes;
    weft_tensor *out = weft_zeros(nd, shape, WEFT_I64, t->device);
    if (!out)
        return NULL;
    /* index: t with a trailing size-1 dim; the ones it adds: one value seen everywhere. */
    int64_t stride[WEFT_MAX_DIMS + 1] = {0};
    memcpy(stride, t->stride, (size_t)t->ndim * sizeof *stride);
    shape[t->ndim] = 1;
    weft_tensor *index = weft_tensor_alias(t, nd, shape, stride, t->offset);
    weft_tensor *one = weft_scalar_tensor(1, WEFT_I64, t->device);
    int64_t zero[WEFT_MAX_DIMS] = {0};
    weft_tensor *ones = one ? weft_tensor_alias(one, nd, shape, zero, one->offset) : NULL;
    if (!index || !ones || !scatter_add_forward_(out, -1, index, ones))
        return NULL;
    return out;
}

weft_tensor *weft_one_hot(weft_tensor *t, int64_t num_classes)
{
    if (!t)
        return NULL;
    if (t->dtype != WEFT_I64) {
        weft_error_set(WEFT_ERR_RUNTIME,
                       "one_hot is only applicable to index tensor of type LongTensor.");
        return NULL;
    }
    if (t->ndim + 1 > WEFT_MAX_DIMS) {
        weft_error_set(WEFT_ERR_VALUE, "weft tensors have at most %d dimensions, but %d were given",
                       WEFT_MAX_DIMS, t->ndim + 1);
        return NULL;
    }
    weft_scope_push();
    weft_tensor *result = weft_tensor_retain(one_hot_in_scope(t, num_classes));
    weft_scope_pop();
    return weft_tensor_finish(result);
}

/* ---- backward and the public ops -------------------------------------------------------------- */

/* cat: each input gets its slice of the gradient. ints[0] = dim. Legacy empty 1-D inputs
 * were skipped by the forward and get no gradient. */
static int cat_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                        weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0];
    if (!g)
        return 0;
    int dim = (int)weft_node_ints(node)[0];
    bool stack = weft_node_ints(node)[1] != 0;
    int64_t offset = 0;
    for (int i = 0; i < weft_node_num_inputs(node); i++) {
        int ndim = weft_node_input_ndim(node, i);
        const int64_t *shape = weft_node_input_shape(node, i);
        if (stack) {
            if (weft_node_needs_input_grad(node, i) && !(grad_inputs[i] = weft_select(g, dim, i)))
                return weft_error_code();
            continue;
        }
        if (ndim == 1 && shape[0] == 0 && g->ndim != 1)
            continue;
        int64_t size = shape[dim];
        if (weft_node_needs_input_grad(node, i) &&
            !(grad_inputs[i] = weft_narrow(g, dim, offset, size)))
            return weft_error_code();
        offset += size;
    }
    return 0;
}

static weft_tensor *joined(bool stack, int n, weft_tensor *const *tensors, int dim)
{
    bool rec = n > 0 && weft_autograd_needed_inline(n, tensors);
    weft_tensor *out = WEFT_NO_GRAD(rec, stack ? stack_forward(n, tensors, dim)
                                          : cat_forward(n, tensors, dim));
    if (!rec || !out)
        return out;
    struct weft_node *node = weft_node_create(stack ? OP_GRAD_FN(STACK) : OP_GRAD_FN(CAT),
                                              cat_backward, n, tensors, 0);
    if (node) {
        weft_node_ints(node)[0] = dim < 0 ? dim + out->ndim : dim;
        weft_node_ints(node)[1] = stack;
    }
    return weft_node_finish1(node, out);
}

weft_tensor *weft_cat(int n, weft_tensor *const *tensors, int dim)
{
    return joined(false, n, tensors, dim);
}

weft_tensor *weft_stack(int n, weft_tensor *const *tensors, int dim)
{
    return joined(true, n, tensors, dim);
}

/* index_select/gather/scatter_add. ints[0] = dim, ints[1] = kind. Saved: 0 index. */
enum index_kind { IX_INDEX_SELECT, IX_GATHER, IX_SCATTER_ADD };

static int index_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                          weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0], *idx = weft_node_saved(node, 0);
    if (!g)
        return 0;
    int dim = (int)weft_node_ints(node)[0];
    switch ((enum index_kind)weft_node_ints(node)[1]) {
    case IX_INDEX_SELECT: {
        /* Scatter-add rows back; the 1-D index is broadcast along the other dims. */
        int nd = g->ndim;
        int64_t shape[WEFT_MAX_DIMS];
        for (int d = 0; d < nd; d++)
            shape[d] = d == dim ? g->shape[d] : 1;
        weft_tensor *ix = weft_expand(weft_reshape(weft_to_dtype(idx, WEFT_I64), nd, shape), nd, g->shape);
        weft_tensor *zeros = weft_zeros(weft_node_input_ndim(node, 0), weft_node_input_shape(node, 0),
                                        g->dtype, g->device);
        grad_inputs[0] = weft_scatter_add(zeros, dim, ix, g);
        break;
    }
    case IX_GATHER: {
        weft_tensor *zeros = weft_zeros(weft_node_input_ndim(node, 0), weft_node_input_shape(node, 0),
                                        g->dtype, g->device);
        grad_inputs[0] = weft_scatter_add(zeros, dim, idx, g);
        break;
    }
    case IX_SCATTER_ADD:
        /* inputs: 0 self, 1 src */
        if (weft_node_needs_input_grad(node, 0))
            grad_inputs[0] = weft_autorelease(weft_tensor_retain(g));
        if (weft_node_needs_input_grad(node, 1) && !(grad_inputs[1] = weft_gather(g, dim, idx)))
            return weft_error_code();
        return 0;
    }
    return grad_inputs[0] ? 0 : weft_error_code();
}

static weft_tensor *record_index(enum index_kind kind, int ninputs, weft_tensor **inputs, int dim,
                                 weft_tensor *index, weft_tensor *out)
{
    const char *name = kind == IX_INDEX_SELECT ? OP_GRAD_FN(INDEX_SELECT)
                       : kind == IX_GATHER     ? OP_GRAD_FN(GATHER)
                                               : OP_GRAD_FN(SCATTER_ADD);
    struct weft_node *node = weft_node_create(name, index_backward, ninputs, inputs, 1);
    if (node && out) {
        int nd = inputs[0] ? inputs[0]->ndim : 1;
        weft_node_ints(node)[0] = dim < 0 ? dim + (nd ? nd : 1) : dim;
        weft_node_ints(node)[1] = kind;
        if (weft_node_save(node, 0, index) != 0) {
            weft_node_abandon(node);
            return weft_tensor_discard(out);
        }
    }
    return weft_node_finish1(node, out);
}

weft_tensor *weft_index_select(weft_tensor *t, int dim, weft_tensor *index)
{
    bool rec = weft_autograd_needed_inline(1, &t);
    weft_tensor *out = WEFT_NO_GRAD(rec, index_select_forward(t, dim, index));
    return rec ? record_index(IX_INDEX_SELECT, 1, &t, dim, index, out) : out;
}

weft_tensor *weft_gather(weft_tensor *t, int dim, weft_tensor *index)
{
    bool rec = weft_autograd_needed_inline(1, &t);
    weft_tensor *out = WEFT_NO_GRAD(rec, gather_forward(t, dim, index));
    return rec ? record_index(IX_GATHER, 1, &t, dim, index, out) : out;
}

weft_tensor *weft_scatter_add(weft_tensor *t, int dim, weft_tensor *index, weft_tensor *src)
{
    weft_tensor *in[2] = {t, src};
    bool rec = weft_autograd_needed_inline(2, in);
    weft_tensor *out = WEFT_NO_GRAD(rec, scatter_add_forward(t, dim, index, src));
    return rec ? record_index(IX_SCATTER_ADD, 2, in, dim, index, out) : out;
}

weft_tensor *weft_scatter_add_(weft_tensor *t, int dim, weft_tensor *index, weft_tensor *src)
{
    weft_tensor *in[2] = {t, src};
    if (!weft_autograd_needed_inline(2, in))
        return scatter_add_forward_(t, dim, index, src);
    if (weft_autograd_check_inplace(t, true) != 0)
        return NULL;
    weft_tensor *out = WEFT_NO_GRAD(true, scatter_add_forward_(t, dim, index, src));
    return out ? record_index(IX_SCATTER_ADD, 2, in, dim, index, t) : NULL;
}
