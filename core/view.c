/* core/view.c: views, new tensor headers over the same storage (and so the same version
 * counter). No data moves here, except in reshape/flatten when no view can express the
 * result (then a contiguous copy is viewed, as in PyTorch). Shapes, strides and error
 * texts follow ATen's TensorShape.cpp and ComputeStride. */
#include <string.h>

#include "forward.h"

static int check_ndim(int ndim)
{
    if (ndim < 0 || ndim > WEFT_MAX_DIMS)
        return weft_error_set(WEFT_ERR_VALUE,
                              "weft tensors have at most %d dimensions, but %d were given",
                              WEFT_MAX_DIMS, ndim);
    return 0;
}

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
    int64_t numel = weft_tensor_numel(t);
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
    if (check_ndim(ndim) != 0)
        return WEFT_ERR_VALUE;
    int rc = infer_size(ndim, shape, weft_tensor_numel(t), size);
    if (rc != 0)
        return rc;
    *viewable = compute_stride(t, ndim, size, stride);
    return 0;
}

weft_tensor *weft_fwd_view(weft_tensor *t, int ndim, const int64_t *shape)
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

weft_tensor *weft_fwd_reshape(weft_tensor *t, int ndim, const int64_t *shape)
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
    weft_tensor *result = weft_tensor_retain(weft_fwd_view(weft_fwd_contiguous(t), ndim, size));
    weft_scope_pop();
    if (result) /* the only tensor over a fresh copy: not a view of anything (_unsafe_view) */
        result->flags &= ~WEFT_TENSOR_VIEW;
    return weft_tensor_finish(result);
}

weft_tensor *weft_fwd_transpose(weft_tensor *t, int dim0, int dim1)
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

weft_tensor *weft_fwd_t(weft_tensor *t)
{
    if (!t)
        return NULL;
    if (t->ndim > 2) {
        weft_error_set(WEFT_ERR_RUNTIME,
                       "t() expects a tensor with <= 2 dimensions, but self is %dD", t->ndim);
        return NULL;
    }
    return weft_fwd_transpose(t, 0, t->ndim < 2 ? 0 : 1);
}

weft_tensor *weft_fwd_permute(weft_tensor *t, int ndim, const int *dims)
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

weft_tensor *weft_fwd_narrow(weft_tensor *t, int dim, int64_t start, int64_t length)
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

weft_tensor *weft_fwd_slice(weft_tensor *t, int dim, int64_t start, int64_t end, int64_t step)
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

weft_tensor *weft_fwd_select(weft_tensor *t, int dim, int64_t index)
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

/* ATen's inferExpandGeometry: new leading dims and size-1 dims get stride 0 when they
 * grow; -1 keeps the existing size. */
weft_tensor *weft_fwd_expand(weft_tensor *t, int ndim, const int64_t *shape)
{
    if (!t || weft_require_strided(t, "expand") != 0)
        return NULL;
    if (check_ndim(ndim) != 0)
        return NULL;
    char tbuf[64], a[200], b[200];
    if (ndim < t->ndim) {
        weft_error_set(WEFT_ERR_RUNTIME,
                       "expand(%s{%s}, size=%s): the number of sizes provided (%d) must be "
                       "greater or equal to the number of dimensions in the tensor (%d)",
                       weft_torch_type_str(t, tbuf, sizeof tbuf),
                       weft_shape_str(t->ndim, t->shape, a, sizeof a),
                       weft_shape_str(ndim, shape, b, sizeof b), ndim, t->ndim);
        return NULL;
    }
    int64_t size[WEFT_MAX_DIMS], stride[WEFT_MAX_DIMS];
    for (int i = ndim - 1; i >= 0; i--) {
        int dim = t->ndim - ndim + i;
        int64_t cur = dim >= 0 ? t->shape[dim] : 1;
        int64_t st = dim >= 0 ? t->stride[dim] : (i == ndim - 1 ? 1 : size[i + 1] * stride[i + 1]);
        int64_t target = shape[i];
        if (target == -1) {
            if (dim < 0) {
                weft_error_set(WEFT_ERR_RUNTIME,
                               "The expanded size of the tensor (-1) isn't allowed in a leading, "
                               "non-existing dimension %d",
                               i);
                return NULL;
            }
            target = cur;
        }
        if (target < 0) {
            weft_error_set(WEFT_ERR_RUNTIME,
                           "Trying to create tensor with negative dimension %lld: %s",
                           (long long)target, weft_shape_str(ndim, shape, a, sizeof a));
            return NULL;
        }
        if (cur != target) {
            if (cur != 1) {
                weft_error_set(WEFT_ERR_RUNTIME,
                               "The expanded size of the tensor (%lld) must match the existing "
                               "size (%lld) at non-singleton dimension %d.  Target sizes: %s.  "
                               "Tensor sizes: %s",
                               (long long)target, (long long)cur, i,
                               weft_shape_str(ndim, shape, a, sizeof a),
                               weft_shape_str(t->ndim, t->shape, b, sizeof b));
                return NULL;
            }
            cur = target;
            st = 0;
        }
        size[i] = cur;
        stride[i] = st;
    }
    return weft_tensor_alias(t, ndim, size, stride, t->offset);
}

weft_tensor *weft_expand_as(weft_tensor *t, const weft_tensor *other)
{
    if (!t || !other)
        return NULL;
    return weft_expand(t, other->ndim, other->shape);
}

/* A view of t without the dims whose bit is set in `drop` (all of them of size 1). */
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

weft_tensor *weft_fwd_squeeze(weft_tensor *t)
{
    if (!t || weft_require_strided(t, "squeeze") != 0)
        return NULL;
    uint32_t drop = 0;
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] == 1)
            drop |= 1u << i;
    return alias_dropping(t, drop);
}

weft_tensor *weft_fwd_squeeze_dim(weft_tensor *t, int dim)
{
    if (!t || weft_require_strided(t, "squeeze") != 0)
        return NULL;
    int d = weft_normalize_dim(dim, t->ndim);
    if (d < 0)
        return NULL;
    bool squeezable = t->ndim > 0 && t->shape[d] == 1;
    return alias_dropping(t, squeezable ? 1u << d : 0);
}

weft_tensor *weft_fwd_unsqueeze(weft_tensor *t, int dim)
{
    if (!t || weft_require_strided(t, "unsqueeze") != 0)
        return NULL;
    int d = weft_normalize_dim(dim, t->ndim + 1);
    if (d < 0)
        return NULL;
    if (check_ndim(t->ndim + 1) != 0)
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

weft_tensor *weft_fwd_flatten(weft_tensor *t, int start_dim, int end_dim)
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
        return weft_fwd_reshape(t, 1, &one);
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
    return weft_fwd_reshape(t, nd, shape);
}

weft_tensor *weft_fwd_unflatten(weft_tensor *t, int dim, int ndim, const int64_t *sizes)
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
    if (check_ndim(t->ndim - 1 + ndim) != 0)
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
    return weft_fwd_view(t, nd, shape);
}

/* ATen's computeStorageNbytes: bytes from element 0 to one past the farthest element. */
static int64_t storage_extent(int ndim, const int64_t *shape, const int64_t *stride,
                              int64_t itemsize)
{
    int64_t extent = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] == 0)
            return 0;
        extent += (shape[i] - 1) * stride[i];
    }
    return extent * itemsize;
}

weft_tensor *weft_fwd_as_strided(weft_tensor *t, int ndim, const int64_t *shape,
                             const int64_t *stride, int64_t offset)
{
    if (!t || weft_require_strided(t, "as_strided") != 0)
        return NULL;
    if (weft_check_shape(ndim, shape) != 0)
        return NULL;
    char a[200], b[200];
    for (int i = 0; i < ndim; i++)
        if (stride[i] < 0) {
            weft_error_set(WEFT_ERR_RUNTIME,
                           "as_strided: Negative strides are not supported at the moment, got "
                           "strides: %s",
                           weft_shape_str(ndim, stride, a, sizeof a));
            return NULL;
        }
    if (offset < 0) {
        weft_error_set(WEFT_ERR_RUNTIME, "Tensor: invalid storage offset %lld", (long long)offset);
        return NULL;
    }
    int64_t itemsize = (int64_t)weft_dtype_size(t->dtype);
    int64_t need = storage_extent(ndim, shape, stride, itemsize);
    if (need != 0) {
        need += offset * itemsize;
        if ((uint64_t)need > t->storage->nbytes) {
            weft_error_set(WEFT_ERR_RUNTIME,
                           "setStorage: sizes %s, strides %s, storage offset %lld, and itemsize "
                           "%lld requiring a storage size of %lld are out of bounds for storage "
                           "of size %zu",
                           weft_shape_str(ndim, shape, a, sizeof a),
                           weft_shape_str(ndim, stride, b, sizeof b), (long long)offset,
                           (long long)itemsize, (long long)need, t->storage->nbytes);
            return NULL;
        }
    }
    return weft_tensor_alias(t, ndim, shape, stride, offset);
}

weft_tensor *weft_detach(weft_tensor *t)
{
    if (!t)
        return NULL;
    if (weft_require_strided(t, "detach") != 0)
        return NULL;
    /* A fresh header carries no autograd metadata; the storage (and version) is shared. */
    return weft_tensor_alias(t, t->ndim, t->shape, t->stride, t->offset);
}

/* PyTorch's Tensor.view(dtype): same itemsize reinterprets in place; a different itemsize
 * rescales the last dim, which must be contiguous. */
weft_tensor *weft_view_dtype(weft_tensor *t, enum weft_dtype dtype)
{
    if (!t || weft_require_strided(t, "view") != 0)
        return NULL;
    if (!weft_dtype_valid(dtype)) {
        weft_error_set(WEFT_ERR_TYPE, "invalid dtype %d", (int)dtype);
        return NULL;
    }
    int64_t old_size = (int64_t)weft_dtype_size(t->dtype), new_size = (int64_t)weft_dtype_size(dtype);
    const char *from = weft_dtype_torch_name(t->dtype), *to = weft_dtype_torch_name(dtype);
    int64_t shape[WEFT_MAX_DIMS], stride[WEFT_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    memcpy(stride, t->stride, sizeof stride);
    int64_t offset = t->offset;
    if (old_size != new_size) {
        int last = t->ndim - 1;
        if (t->ndim == 0) {
            weft_error_set(WEFT_ERR_RUNTIME,
                           "self.dim() cannot be 0 to view %s as %s (different element sizes)",
                           from, to);
            return NULL;
        }
        if (t->stride[last] != 1) {
            weft_error_set(WEFT_ERR_RUNTIME,
                           "self.stride(-1) must be 1 to view %s as %s (different element "
                           "sizes), but got %lld",
                           from, to, (long long)t->stride[last]);
            return NULL;
        }
        if (new_size > old_size) {
            int64_t ratio = new_size / old_size;
            if (t->shape[last] % ratio != 0) {
                weft_error_set(WEFT_ERR_RUNTIME,
                               "self.size(-1) must be divisible by %lld to view %s as %s "
                               "(different element sizes), but got %lld",
                               (long long)ratio, from, to, (long long)t->shape[last]);
                return NULL;
            }
            if (offset % ratio != 0) {
                weft_error_set(WEFT_ERR_RUNTIME,
                               "self.storage_offset() must be divisible by %lld to view %s as "
                               "%s (different element sizes), but got %lld",
                               (long long)ratio, from, to, (long long)offset);
                return NULL;
            }
            for (int i = 0; i < last; i++)
                if (t->stride[i] % ratio != 0) {
                    weft_error_set(WEFT_ERR_RUNTIME,
                                   "self.stride(%d) must be divisible by %lld to view %s as %s "
                                   "(different element sizes), but got %lld",
                                   i, (long long)ratio, from, to, (long long)t->stride[i]);
                    return NULL;
                }
            for (int i = 0; i < last; i++)
                stride[i] /= ratio;
            shape[last] /= ratio;
            offset /= ratio;
        } else {
            int64_t ratio = old_size / new_size;
            for (int i = 0; i < last; i++)
                stride[i] *= ratio;
            shape[last] *= ratio;
            offset *= ratio;
        }
    }
    weft_tensor *v = weft_tensor_make(t->storage, t->ndim, shape, stride, offset, dtype);
    if (v)
        v->flags |= WEFT_TENSOR_VIEW;
    return weft_tensor_finish(v);
}
