/* ops/views.c: the view ops (view, reshape, transpose, t, permute, narrow, slice, select,
 * squeeze, unsqueeze, flatten, unflatten) and their gradients: new tensor headers over
 * the same storage (and so the same version counter), no data moved, except in
 * reshape/flatten when no view can express the result (then a contiguous copy is viewed,
 * as in PyTorch). Shapes, strides and error texts follow ATen's TensorShape.cpp and
 * ComputeStride, node names and formulas its derivatives.yaml. The views the core makes
 * itself (expand, as_strided, detach) are in core/view.c. */
#include <string.h>

#include "internal.h"

/* ATen's infer_size: resolves one -1 against numel into out. */
static int infer_size(int ndim, const int64_t *shape, int64_t numel, int64_t *out)
{
    int64_t newsize = 1;
    int infer_dim = -1;
    for (int d = 0; d < ndim; d++) {
        out[d] = shape[d];
        if (shape[d] == -1) {
            if (infer_dim >= 0)
                return weft_error_set(WEFT_ERR_RUNTIME, "only one dimension can be inferred");
            infer_dim = d;
        } else if (shape[d] >= 0) {
            if (__builtin_mul_overflow(newsize, shape[d], &newsize))
                newsize = -1; /* cannot match any real numel */
        } else {
            return weft_error_set(WEFT_ERR_RUNTIME, "invalid shape dimension %lld",
                                  (long long)shape[d]);
        }
    }
    char buf[200];
    if (numel == newsize || (infer_dim >= 0 && newsize > 0 && numel % newsize == 0)) {
        if (infer_dim < 0)
            return 0;
        /* Any size would do when the rest multiplies to 0: NumPy refuses, so do we. */
        if (newsize == 0)
            return weft_error_set(WEFT_ERR_RUNTIME,
                                  "cannot reshape tensor of 0 elements into shape %s because "
                                  "the unspecified dimension size -1 can be any value and is "
                                  "ambiguous",
                                  weft_shape_str(ndim, shape, buf, sizeof buf));
        out[infer_dim] = numel / newsize;
        return 0;
    }
    return weft_error_set(WEFT_ERR_RUNTIME, "shape '%s' is invalid for input of size %lld",
                          weft_shape_str(ndim, shape, buf, sizeof buf), (long long)numel);
}

/* ATen's computeStride: strides that express `newshape` over t's memory without a copy,
 * or false. Old dims are cut into chunks that are contiguous among themselves; each
 * chunk must be covered exactly by a run of new dims. */
static bool compute_stride(const weft_tensor *t, int nnew, const int64_t *newshape,
                           int64_t *newstride)
{
    int nold = t->ndim;
    const int64_t *oldshape = t->shape, *oldstride = t->stride;
    if (nold == 0) {
        for (int d = 0; d < nnew; d++)
            newstride[d] = 1;
        return true;
    }
    int64_t numel = numel_of(t);
    if (numel == 0) {
        /* Strides are arbitrary here: keep the old ones when the shape is unchanged
         * (NumPy does), else use the strides resize would give. */
        if (nnew == nold && memcmp(newshape, oldshape, (size_t)nold * sizeof *oldshape) == 0) {
            memcpy(newstride, oldstride, (size_t)nold * sizeof *oldstride);
            return true;
        }
        for (int d = nnew - 1; d >= 0; d--)
            newstride[d] = d == nnew - 1 ? 1
                                         : (newshape[d + 1] > 1 ? newshape[d + 1] : 1) *
                                               newstride[d + 1];
        return true;
    }
    int view_d = nnew - 1;
    int64_t chunk_base_stride = oldstride[nold - 1];
    int64_t tensor_numel = 1, view_numel = 1;
    for (int tensor_d = nold - 1; tensor_d >= 0; tensor_d--) {
        tensor_numel *= oldshape[tensor_d];
        bool chunk_end = tensor_d == 0 ||
                         (oldshape[tensor_d - 1] != 1 &&
                          oldstride[tensor_d - 1] != tensor_numel * chunk_base_stride);
        if (!chunk_end)
            continue;
        while (view_d >= 0 && (view_numel < tensor_numel || newshape[view_d] == 1)) {
            newstride[view_d] = view_numel * chunk_base_stride;
            view_numel *= newshape[view_d];
            view_d--;
        }
        if (view_numel != tensor_numel)
            return false;
        if (tensor_d > 0) {
            chunk_base_stride = oldstride[tensor_d - 1];
            tensor_numel = 1;
            view_numel = 1;
        }
    }
    return view_d == -1;
}

/* Resolves -1 into size and computes view strides; negative (error set) for a bad shape.
 * *viewable is false when only a copy can give the shape. */
static int view_geometry(const weft_tensor *t, int ndim, const int64_t *shape, int64_t *size,
                         int64_t *stride, bool *viewable)
{
    if (weft_check_ndim(ndim) != 0)
        return WEFT_ERR_VALUE;
    int rc = infer_size(ndim, shape, numel_of(t), size);
    if (rc != 0)
        return rc;
    *viewable = compute_stride(t, ndim, size, stride);
    return 0;
}

static weft_tensor *fwd_view(weft_tensor *t, int ndim, const int64_t *shape)
{
    if (!t || weft_require_strided(t, "view") != 0)
        return NULL;
    int64_t size[WEFT_MAX_DIMS], stride[WEFT_MAX_DIMS];
    bool viewable;
    if (view_geometry(t, ndim, shape, size, stride, &viewable) != 0)
        return NULL;
    if (!viewable) {
        weft_error_set(WEFT_ERR_RUNTIME,
                       "view size is not compatible with input tensor's size and stride (at "
                       "least one dimension spans across two contiguous subspaces). Use "
                       ".reshape(...) instead.");
        return NULL;
    }
    return weft_tensor_alias(t, ndim, size, stride, t->offset);
}

static weft_tensor *fwd_reshape(weft_tensor *t, int ndim, const int64_t *shape)
{
    if (!t || weft_require_strided(t, "reshape") != 0)
        return NULL;
    int64_t size[WEFT_MAX_DIMS], stride[WEFT_MAX_DIMS];
    bool viewable;
    if (view_geometry(t, ndim, shape, size, stride, &viewable) != 0)
        return NULL;
    if (viewable)
        return weft_tensor_alias(t, ndim, size, stride, t->offset);
    /* No strides express it: view a contiguous copy (PyTorch's _unsafe_view of clone). */
    weft_scope_push();
    weft_tensor *result = weft_tensor_retain(fwd_view(weft_contiguous(t), ndim, size));
    weft_scope_pop();
    if (result) /* the only tensor over a fresh copy: not a view of anything (_unsafe_view) */
        result->flags &= ~WEFT_TENSOR_VIEW;
    return weft_tensor_finish(result);
}

static weft_tensor *fwd_transpose(weft_tensor *t, int dim0, int dim1)
{
    if (!t || weft_require_strided(t, "transpose") != 0)
        return NULL;
    int d0 = weft_normalize_dim(dim0, t->ndim);
    int d1 = d0 < 0 ? d0 : weft_normalize_dim(dim1, t->ndim);
    if (d1 < 0)
        return NULL;
    int64_t shape[WEFT_MAX_DIMS], stride[WEFT_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    memcpy(stride, t->stride, sizeof stride);
    if (t->ndim > 0) {
        shape[d0] = t->shape[d1];
        shape[d1] = t->shape[d0];
        stride[d0] = t->stride[d1];
        stride[d1] = t->stride[d0];
    }
    return weft_tensor_alias(t, t->ndim, shape, stride, t->offset);
}

static weft_tensor *fwd_t(weft_tensor *t)
{
    if (!t)
        return NULL;
    if (t->ndim > 2) {
        weft_error_set(WEFT_ERR_RUNTIME,
                       "t() expects a tensor with <= 2 dimensions, but self is %dD", t->ndim);
        return NULL;
    }
    return fwd_transpose(t, 0, t->ndim < 2 ? 0 : 1);
}

static weft_tensor *fwd_permute(weft_tensor *t, int ndim, const int *dims)
{
    if (!t || weft_require_strided(t, "permute") != 0)
        return NULL;
    if (ndim != t->ndim) {
        /* PyTorch's dense permute shares this text with the sparse one. */
        weft_error_set(WEFT_ERR_RUNTIME,
                       "permute(sparse_coo): number of dimensions in the tensor input does not "
                       "match the length of the desired ordering of dimensions i.e. input.dim() "
                       "= %d is not equal to len(dims) = %d",
                       t->ndim, ndim);
        return NULL;
    }
    int64_t shape[WEFT_MAX_DIMS], stride[WEFT_MAX_DIMS];
    bool seen[WEFT_MAX_DIMS] = {false};
    for (int i = 0; i < ndim; i++) {
        int d = weft_normalize_dim(dims[i], ndim);
        if (d < 0)
            return NULL;
        if (seen[d]) {
            weft_error_set(WEFT_ERR_RUNTIME, "permute(): duplicate dims are not allowed.");
            return NULL;
        }
        seen[d] = true;
        shape[i] = t->shape[d];
        stride[i] = t->stride[d];
    }
    return weft_tensor_alias(t, ndim, shape, stride, t->offset);
}

static weft_tensor *fwd_narrow(weft_tensor *t, int dim, int64_t start, int64_t length)
{
    if (!t || weft_require_strided(t, "narrow") != 0)
        return NULL;
    if (t->ndim == 0) {
        weft_error_set(WEFT_ERR_RUNTIME, "narrow() cannot be applied to a 0-dim tensor.");
        return NULL;
    }
    int d = weft_normalize_dim(dim, t->ndim);
    if (d < 0)
        return NULL;
    if (length < 0) {
        weft_error_set(WEFT_ERR_RUNTIME, "narrow(): length must be non-negative.");
        return NULL;
    }
    int64_t size = t->shape[d];
    if (start < -size || start > size) {
        weft_error_set(WEFT_ERR_INDEX,
                       "start out of range (expected to be in range of [%lld, %lld], but got "
                       "%lld)",
                       (long long)-size, (long long)size, (long long)start);
        return NULL;
    }
    if (start < 0)
        start += size;
    if (start > size - length) {
        weft_error_set(WEFT_ERR_RUNTIME, "start (%lld) + length (%lld) exceeds dimension size (%lld).",
                       (long long)start, (long long)length, (long long)size);
        return NULL;
    }
    int64_t shape[WEFT_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    shape[d] = length;
    return weft_tensor_alias(t, t->ndim, shape, t->stride, t->offset + start * t->stride[d]);
}

static weft_tensor *fwd_slice(weft_tensor *t, int dim, int64_t start, int64_t end, int64_t step)
{
    if (!t || weft_require_strided(t, "slice") != 0)
        return NULL;
    if (t->ndim == 0) {
        weft_error_set(WEFT_ERR_RUNTIME, "slice() cannot be applied to a 0-dim tensor.");
        return NULL;
    }
    int d = weft_normalize_dim(dim, t->ndim);
    if (d < 0)
        return NULL;
    if (step <= 0) {
        weft_error_set(WEFT_ERR_VALUE, "slice step must be positive");
        return NULL;
    }
    /* Python's clamping: negatives count from the end, then both land in [0, size]. */
    int64_t size = t->shape[d];
    if (start < 0)
        start += size;
    if (end < 0)
        end += size;
    if (start < 0)
        start = 0;
    else if (start > size)
        start = size;
    if (end < start)
        end = start;
    else if (end > size)
        end = size;
    int64_t shape[WEFT_MAX_DIMS], stride[WEFT_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    memcpy(stride, t->stride, sizeof stride);
    shape[d] = (end - start + step - 1) / step;
    stride[d] = t->stride[d] * step;
    int64_t offset = t->offset + start * t->stride[d];
    return weft_tensor_alias(t, t->ndim, shape, stride, offset);
}

static weft_tensor *fwd_select(weft_tensor *t, int dim, int64_t index)
{
    if (!t || weft_require_strided(t, "select") != 0)
        return NULL;
    if (t->ndim == 0) {
        weft_error_set(WEFT_ERR_INDEX, "select() cannot be applied to a 0-dim tensor.");
        return NULL;
    }
    int d = weft_normalize_dim(dim, t->ndim);
    if (d < 0)
        return NULL;
    int64_t size = t->shape[d];
    if (index < -size || index >= size) {
        char buf[200];
        weft_error_set(WEFT_ERR_INDEX,
                       "select(): index %lld out of range for tensor of size %s at dimension %d",
                       (long long)index, weft_shape_str(t->ndim, t->shape, buf, sizeof buf), d);
        return NULL;
    }
    if (index < 0)
        index += size;
    int64_t shape[WEFT_MAX_DIMS], stride[WEFT_MAX_DIMS];
    int nd = 0;
    for (int i = 0; i < t->ndim; i++) {
        if (i == d)
            continue;
        shape[nd] = t->shape[i];
        stride[nd] = t->stride[i];
        nd++;
    }
    return weft_tensor_alias(t, nd, shape, stride, t->offset + index * t->stride[d]);
}

static weft_tensor *alias_dropping(weft_tensor *t, uint32_t drop)
{
    int64_t shape[WEFT_MAX_DIMS], stride[WEFT_MAX_DIMS];
    int nd = 0;
    for (int i = 0; i < t->ndim; i++) {
        if (drop & (1u << i))
            continue;
        shape[nd] = t->shape[i];
        stride[nd] = t->stride[i];
        nd++;
    }
    return weft_tensor_alias(t, nd, shape, stride, t->offset);
}

static weft_tensor *fwd_squeeze(weft_tensor *t)
{
    if (!t || weft_require_strided(t, "squeeze") != 0)
        return NULL;
    uint32_t drop = 0;
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] == 1)
            drop |= 1u << i;
    return alias_dropping(t, drop);
}

static weft_tensor *fwd_squeeze_dim(weft_tensor *t, int dim)
{
    if (!t || weft_require_strided(t, "squeeze") != 0)
        return NULL;
    int d = weft_normalize_dim(dim, t->ndim);
    if (d < 0)
        return NULL;
    bool squeezable = t->ndim > 0 && t->shape[d] == 1;
    return alias_dropping(t, squeezable ? 1u << d : 0);
}

static weft_tensor *fwd_unsqueeze(weft_tensor *t, int dim)
{
    if (!t || weft_require_strided(t, "unsqueeze") != 0)
        return NULL;
    int d = weft_normalize_dim(dim, t->ndim + 1);
    if (d < 0)
        return NULL;
    if (weft_check_ndim(t->ndim + 1) != 0)
        return NULL;
    int64_t shape[WEFT_MAX_DIMS], stride[WEFT_MAX_DIMS];
    for (int i = 0, j = 0; i <= t->ndim; i++) {
        if (i == d) {
            shape[i] = 1;
            /* The stride a contiguous tensor would have there. */
            stride[i] = d >= t->ndim ? 1 : t->shape[d] * t->stride[d];
            continue;
        }
        shape[i] = t->shape[j];
        stride[i] = t->stride[j];
        j++;
    }
    return weft_tensor_alias(t, t->ndim + 1, shape, stride, t->offset);
}

static weft_tensor *fwd_flatten(weft_tensor *t, int start_dim, int end_dim)
{
    if (!t || weft_require_strided(t, "flatten") != 0)
        return NULL;
    int s = weft_normalize_dim(start_dim, t->ndim);
    int e = s < 0 ? s : weft_normalize_dim(end_dim, t->ndim);
    if (e < 0)
        return NULL;
    if (s > e) {
        weft_error_set(WEFT_ERR_VALUE,
                       "flatten() has invalid args: start_dim cannot come after end_dim");
        return NULL;
    }
    if (t->ndim == 0) {
        int64_t one = 1;
        return fwd_reshape(t, 1, &one);
    }
    if (s == e)
        return weft_tensor_alias(t, t->ndim, t->shape, t->stride, t->offset);
    int64_t shape[WEFT_MAX_DIMS];
    int nd = 0;
    for (int i = 0; i < s; i++)
        shape[nd++] = t->shape[i];
    int64_t flat = 1;
    for (int i = s; i <= e; i++)
        flat *= t->shape[i];
    shape[nd++] = flat;
    for (int i = e + 1; i < t->ndim; i++)
        shape[nd++] = t->shape[i];
    return fwd_reshape(t, nd, shape);
}

static weft_tensor *fwd_unflatten(weft_tensor *t, int dim, int ndim, const int64_t *sizes)
{
    if (!t || weft_require_strided(t, "unflatten") != 0)
        return NULL;
    int d = weft_normalize_dim(dim, t->ndim);
    if (d < 0)
        return NULL;
    if (ndim <= 0) {
        weft_error_set(WEFT_ERR_RUNTIME, "unflatten: sizes must be non-empty");
        return NULL;
    }
    if (weft_check_ndim(t->ndim - 1 + ndim) != 0)
        return NULL;
    int64_t inferred[WEFT_MAX_DIMS];
    int64_t dim_size = t->ndim ? t->shape[d] : 1;
    bool pending = weft_error_code() != WEFT_OK;
    if (infer_size(ndim, sizes, dim_size, inferred) != 0) {
        /* Replace infer_size's text with unflatten's own, as PyTorch does (but never an
         * earlier, unrelated error: errors are sticky). */
        char buf[200];
        if (pending)
            return NULL;
        weft_error_clear();
        weft_error_set(WEFT_ERR_RUNTIME,
                       "unflatten: Provided sizes %s don't multiply up to the size of dim %d "
                       "(%lld) in the input tensor",
                       weft_shape_str(ndim, sizes, buf, sizeof buf), d, (long long)dim_size);
        return NULL;
    }
    int64_t shape[WEFT_MAX_DIMS];
    int nd = 0;
    for (int i = 0; i < d; i++)
        shape[nd++] = t->shape[i];
    for (int i = 0; i < ndim; i++)
        shape[nd++] = inferred[i];
    for (int i = d + 1; i < t->ndim; i++)
        shape[nd++] = t->shape[i];
    return fwd_view(t, nd, shape);
}

/* ---- gradients ----------------------------------------------------------------------
 * ints[0] = kind; parameters in ints[1..]. */

enum view_kind { V_RESHAPE, V_TRANSPOSE, V_PERMUTE, V_SLICE, V_SELECT };

static int view_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                         weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0];
    if (!g)
        return 0;
    int64_t *ints = weft_node_ints(node);
    int in_nd = weft_node_input_ndim(node, 0);
    const int64_t *in_shape = weft_node_input_shape(node, 0);
    weft_tensor *r = NULL;
    switch ((enum view_kind)ints[0]) {
    case V_RESHAPE:
        r = weft_reshape(g, in_nd, in_shape);
        break;
    case V_TRANSPOSE:
        r = weft_transpose(g, (int)ints[1], (int)ints[2]);
        break;
    case V_PERMUTE: {
        int inverse[WEFT_MAX_DIMS];
        for (int d = 0; d < in_nd; d++)
            inverse[ints[1 + d]] = d;
        r = weft_permute(g, in_nd, inverse);
        break;
    }
    case V_SLICE: {
        weft_tensor *z = weft_zeros(in_nd, in_shape, g->dtype, g->device);
        weft_tensor *part = weft_slice(z, (int)ints[1], ints[2], ints[3], ints[4]);
        r = part && weft_copy_(part, g) == 0 ? z : NULL;
        break;
    }
    case V_SELECT: {
        weft_tensor *z = weft_zeros(in_nd, in_shape, g->dtype, g->device);
        weft_tensor *part = weft_select(z, (int)ints[1], ints[2]);
        r = part && weft_copy_(part, g) == 0 ? z : NULL;
        break;
    }
    }
    grad_inputs[0] = r;
    return r ? 0 : weft_error_code();
}

static weft_tensor *record_view(const char *name, enum view_kind kind, weft_tensor *in,
                                weft_tensor *out, int nparams, const int64_t *params)
{
    struct weft_node *node = weft_node_create(name, view_backward, 1, &in, 0);
    if (node && out) {
        int64_t *ints = weft_node_ints(node);
        ints[0] = kind;
        for (int i = 0; i < nparams && i < 15; i++)
            ints[1 + i] = params[i];
    }
    return weft_node_finish_view(node, in, out);
}

#define VIEW_RECORD(name, kind, nparams, params, call)                                        \
    do {                                                                                      \
        bool rec = weft_autograd_needed_inline(1, &t);                                               \
        weft_tensor *out = WEFT_NO_GRAD(rec, call);                                                \
        return rec ? record_view(name, kind, t, out, nparams, params)                         \
                   : weft_autograd_view_untracked_inline(t, out);                             \
    } while (0)

weft_tensor *weft_view(weft_tensor *t, int ndim, const int64_t *shape)
{
    VIEW_RECORD("ViewBackward0", V_RESHAPE, 0, NULL, fwd_view(t, ndim, shape));
}

/* reshape and flatten are PyTorch's _reshape_alias where a view can express them, else a
 * copy through _unsafe_view: the node is named after whichever happened. */
static weft_tensor *record_reshape(weft_tensor *t, weft_tensor *out)
{
    const char *name = out && t && out->storage != t->storage ? "UnsafeViewBackward0"
                                                              : "ReshapeAliasBackward0";
    return record_view(name, V_RESHAPE, t, out, 0, NULL);
}

weft_tensor *weft_reshape(weft_tensor *t, int ndim, const int64_t *shape)
{
    bool rec = weft_autograd_needed_inline(1, &t);
    weft_tensor *out = WEFT_NO_GRAD(rec, fwd_reshape(t, ndim, shape));
    return rec ? record_reshape(t, out) : weft_autograd_view_untracked_inline(t, out);
}

weft_tensor *weft_squeeze(weft_tensor *t)
{
    VIEW_RECORD("SqueezeBackward0", V_RESHAPE, 0, NULL, fwd_squeeze(t));
}

weft_tensor *weft_squeeze_dim(weft_tensor *t, int dim)
{
    VIEW_RECORD("SqueezeBackward1", V_RESHAPE, 0, NULL, fwd_squeeze_dim(t, dim));
}

weft_tensor *weft_unsqueeze(weft_tensor *t, int dim)
{
    VIEW_RECORD("UnsqueezeBackward0", V_RESHAPE, 0, NULL, fwd_unsqueeze(t, dim));
}

weft_tensor *weft_flatten(weft_tensor *t, int start_dim, int end_dim)
{
    bool rec = weft_autograd_needed_inline(1, &t);
    weft_tensor *out = WEFT_NO_GRAD(rec, fwd_flatten(t, start_dim, end_dim));
    return rec ? record_reshape(t, out) : weft_autograd_view_untracked_inline(t, out);
}

weft_tensor *weft_unflatten(weft_tensor *t, int dim, int ndim, const int64_t *sizes)
{
    VIEW_RECORD("ViewBackward0", V_RESHAPE, 0, NULL, fwd_unflatten(t, dim, ndim, sizes));
}

weft_tensor *weft_transpose(weft_tensor *t, int dim0, int dim1)
{
    int nd = t && t->ndim ? t->ndim : 1;
    int64_t params[2] = {dim0 < 0 ? dim0 + nd : dim0, dim1 < 0 ? dim1 + nd : dim1};
    VIEW_RECORD("TransposeBackward0", V_TRANSPOSE, 2, params, fwd_transpose(t, dim0, dim1));
}

weft_tensor *weft_t(weft_tensor *t)
{
    int64_t params[2] = {0, t && t->ndim == 2 ? 1 : 0};
    VIEW_RECORD("TBackward0", V_TRANSPOSE, 2, params, fwd_t(t));
}

weft_tensor *weft_permute(weft_tensor *t, int ndim, const int *dims)
{
    int64_t params[WEFT_MAX_DIMS];
    for (int i = 0; i < ndim && i < WEFT_MAX_DIMS; i++)
        params[i] = dims[i] < 0 ? dims[i] + ndim : dims[i];
    VIEW_RECORD("PermuteBackward0", V_PERMUTE, ndim, params, fwd_permute(t, ndim, dims));
}

weft_tensor *weft_narrow(weft_tensor *t, int dim, int64_t start, int64_t length)
{
    int nd = t && t->ndim ? t->ndim : 1;
    int d = dim < 0 ? dim + nd : dim;
    int64_t s = t && start < 0 && d >= 0 && d < t->ndim ? start + t->shape[d] : start;
    int64_t params[4] = {d, s, s + length, 1};
    VIEW_RECORD("SliceBackward0", V_SLICE, 4, params, fwd_narrow(t, dim, start, length));
}

weft_tensor *weft_slice(weft_tensor *t, int dim, int64_t start, int64_t end, int64_t step)
{
    int nd = t && t->ndim ? t->ndim : 1;
    int64_t params[4] = {dim < 0 ? dim + nd : dim, start, end, step};
    VIEW_RECORD("SliceBackward0", V_SLICE, 4, params, fwd_slice(t, dim, start, end, step));
}

weft_tensor *weft_select(weft_tensor *t, int dim, int64_t index)
{
    int nd = t && t->ndim ? t->ndim : 1;
    int d = dim < 0 ? dim + nd : dim;
    int64_t i = t && index < 0 && d >= 0 && d < t->ndim ? index + t->shape[d] : index;
    int64_t params[2] = {d, i};
    VIEW_RECORD("SelectBackward0", V_SELECT, 2, params, fwd_select(t, dim, index));
}

