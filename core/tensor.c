/* core/tensor.c: tensor headers, references and properties. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

weft_tensor *weft_tensor_alloc_struct(void)
{
    weft_tensor *t = weft_small_alloc(sizeof *t);
    if (!t) {
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory for a tensor header");
        return NULL;
    }
    /* Field by field: one 200-byte memset compiles to `rep stos`, which costs more than
     * the rest of a view. */
    t->refcount = 1;
    t->ndim = 0;
    t->dtype = WEFT_F32;
    t->layout = WEFT_LAYOUT_STRIDED;
    t->flags = 0;
    t->device = WEFT_CPU;
    t->offset = 0;
    memset(t->shape, 0, sizeof t->shape);
    memset(t->stride, 0, sizeof t->stride);
    t->storage = NULL;
    t->autograd = NULL;
    t->layout_data = NULL;
    return t;
}

weft_tensor *weft_tensor_retain(weft_tensor *t)
{
    if (t)
        WEFT_ATOMIC_INC(&t->refcount);
    return t;
}

void weft_tensor_release(weft_tensor *t)
{
    if (!t || !weft_refcount_release(&t->refcount))
        return;
    if (t->autograd)
        weft_autograd_meta_free(t);
    if (t->layout_data)
        weft_layout_data_free(t);
    weft_storage_release(t->storage);
    weft_small_free(t, sizeof *t);
}

int64_t weft_contiguous_strides(int ndim, const int64_t *shape, int64_t *stride)
{
    return contiguous_strides(ndim, shape, stride);
}

int weft_check_ndim(int ndim)
{
    if (ndim < 0 || ndim > WEFT_MAX_DIMS)
        return weft_error_set(WEFT_ERR_VALUE,
                              "weft tensors have at most %d dimensions, but %d were given",
                              WEFT_MAX_DIMS, ndim);
    return 0;
}

int weft_check_shape(int ndim, const int64_t *shape)
{
    if (ndim < 0 || ndim > WEFT_MAX_DIMS)
        return weft_error_set(WEFT_ERR_VALUE,
                              "weft tensors have at most %d dimensions, but %d were given",
                              WEFT_MAX_DIMS, ndim);
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0) {
            char buf[160];
            return weft_error_set(WEFT_ERR_RUNTIME,
                                  "Trying to create tensor with negative dimension %lld: %s",
                                  (long long)shape[i], weft_shape_str(ndim, shape, buf, sizeof buf));
        }
    return 0;
}

int64_t weft_shape_numel(int ndim, const int64_t *shape)
{
    /* One pass for the valid shapes every op allocates; weft_check_shape names what is
     * wrong with the others. */
    if ((unsigned)ndim > WEFT_MAX_DIMS) {
        weft_check_shape(ndim, shape);
        return -1;
    }
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) {
            weft_check_shape(ndim, shape);
            return -1;
        }
        if (__builtin_mul_overflow(n, shape[i], &n)) {
            if (weft_check_shape(ndim, shape) != 0) /* a negative size later on */
                return -1;
            char buf[160];
            weft_error_set(WEFT_ERR_RUNTIME, "shape %s has more elements than fit in int64",
                           weft_shape_str(ndim, shape, buf, sizeof buf));
            return -1;
        }
    }
    return n;
}

/* weft_tensor_make, taking over the caller's reference to storage (also on failure). */
static weft_tensor *tensor_make_owning(struct weft_storage *storage, int ndim, const int64_t *shape,
                                      const int64_t *stride, int64_t offset, enum weft_dtype dtype)
{
    weft_tensor *t = weft_tensor_alloc_struct();
    if (!t) {
        weft_storage_release(storage);
        return NULL;
    }
    t->ndim = ndim;
    t->dtype = dtype;
    t->layout = WEFT_LAYOUT_STRIDED;
    t->device = storage->device;
    t->offset = offset;
    /* Element by element: a memcpy call of a few bytes costs more than the loop. */
    for (int d = 0; d < ndim; d++)
        t->shape[d] = shape[d];
    if (stride)
        for (int d = 0; d < ndim; d++)
            t->stride[d] = stride[d];
    else
        contiguous_strides(ndim, shape, t->stride);
    t->storage = storage;
    return t;
}

weft_tensor *weft_tensor_from_storage(struct weft_storage *storage, int ndim,
                                      const int64_t *shape, const int64_t *stride,
                                      int64_t offset, enum weft_dtype dtype)
{
    return weft_tensor_finish(weft_tensor_make(storage, ndim, shape, stride, offset, dtype));
}

weft_tensor *weft_tensor_make(struct weft_storage *storage, int ndim, const int64_t *shape,
                              const int64_t *stride, int64_t offset, enum weft_dtype dtype)
{
    weft_storage_retain(storage);
    return tensor_make_owning(storage, ndim, shape, stride, offset, dtype);
}

weft_tensor *weft_tensor_alias(weft_tensor *t, int ndim, const int64_t *shape,
                               const int64_t *stride, int64_t offset)
{
    weft_tensor *v = weft_tensor_make(t->storage, ndim, shape, stride, offset, t->dtype);
    if (v)
        v->flags |= WEFT_TENSOR_VIEW;
    return weft_tensor_finish(v);
}

weft_tensor *weft_empty_dense_strided(int ndim, const int64_t *shape, const int64_t *strides,
                                      enum weft_dtype dtype, weft_device dev)
{
    int64_t numel = weft_shape_numel(ndim, shape);
    if (numel < 0)
        return NULL;
    size_t nbytes;
    if (__builtin_mul_overflow((size_t)numel, weft_dtype_size(dtype), &nbytes)) {
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "tensor of %lld elements is too large",
                       (long long)numel);
        return NULL;
    }
    struct weft_storage *s = weft_storage_new(dev, nbytes);
    if (!s) {
        weft_oom_context(ndim, shape, dtype, dev);
        return NULL;
    }
    return weft_tensor_finish(tensor_make_owning(s, ndim, shape, strides, 0, dtype));
}

weft_tensor *weft_empty(int ndim, const int64_t *shape, enum weft_dtype dtype, weft_device dev)
{
    if (!weft_dtype_valid(dtype)) {
        weft_error_set(WEFT_ERR_TYPE, "invalid dtype %d", (int)dtype);
        return NULL;
    }
    return weft_empty_dense_strided(ndim, shape, NULL, dtype, dev);
}

weft_tensor *weft_empty_like(const weft_tensor *t)
{
    if (!t)
        return NULL;
    /* preserve_format, as PyTorch's default */
    if (t->layout != WEFT_LAYOUT_STRIDED)
        return weft_empty(t->ndim, t->shape, t->dtype, t->device);
    int64_t strides[WEFT_MAX_DIMS];
    weft_preserve_strides(t, strides);
    return weft_empty_dense_strided(t->ndim, t->shape, strides, t->dtype, t->device);
}

int64_t weft_tensor_numel(const weft_tensor *t)
{
    if (!t)
        return 0;
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

int weft_normalize_dim(int dim, int ndim)
{
    int n = ndim > 0 ? ndim : 1; /* a 0-dim tensor accepts dims -1 and 0 */
    if (dim < -n || dim >= n)
        return weft_error_set(WEFT_ERR_INDEX,
                              "Dimension out of range (expected to be in range of [%d, %d], but got %d)",
                              -n, n - 1, dim);
    return dim < 0 ? dim + n : dim;
}

int64_t weft_tensor_size(const weft_tensor *t, int dim)
{
    if (!t)
        return -1;
    int d = weft_normalize_dim(dim, t->ndim);
    if (d < 0)
        return -1;
    return t->ndim ? t->shape[d] : 1;
}

int64_t weft_tensor_stride(const weft_tensor *t, int dim)
{
    if (!t)
        return -1;
    int d = weft_normalize_dim(dim, t->ndim);
    if (d < 0)
        return -1;
    return t->ndim ? t->stride[d] : 1;
}

bool weft_tensor_is_contiguous(const weft_tensor *t)
{
    if (!t || t->layout != WEFT_LAYOUT_STRIDED)
        return false;
    if (weft_tensor_numel(t) == 0)
        return true; /* PyTorch: a tensor with no elements is contiguous, whatever its strides */
    int64_t expected = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] == 1)
            continue;
        if (t->stride[i] != expected)
            return false;
        expected *= t->shape[i];
    }
    return true;
}

size_t weft_tensor_itemsize(const weft_tensor *t)
{
    return t ? weft_dtype_size(t->dtype) : 0;
}

void *weft_tensor_data(const weft_tensor *t)
{
    if (!t || !t->storage || !t->storage->data || weft_tensor_numel(t) == 0)
        return NULL;
    return (char *)t->storage->data + (size_t)t->offset * weft_dtype_size(t->dtype);
}

uint64_t weft_tensor_version(const weft_tensor *t)
{
    return t ? weft_storage_version(t->storage) : 0;
}

void weft_tensor_bump_version(weft_tensor *t)
{
    if (t)
        weft_storage_bump_version(t->storage);
}

char *weft_shape_str(int ndim, const int64_t *shape, char *buf, size_t size)
{
    size_t used = 0;
    used += (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < ndim && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, i ? ", %lld" : "%lld",
                                 (long long)shape[i]);
    if (used < size)
        snprintf(buf + used, size - used, "]");
    return buf;
}

int weft_check_same_device(int n, const weft_tensor *const *ts)
{
    const weft_tensor *first = NULL;
    for (int i = 0; i < n; i++) {
        if (!ts[i])
            continue;
        if (!first) {
            first = ts[i];
            continue;
        }
        if (!weft_device_equal(first->device, ts[i]->device)) {
            char a[32], b[32];
            return weft_error_set(WEFT_ERR_RUNTIME,
                                  "Expected all tensors to be on the same device, but found at "
                                  "least two devices, %s and %s!",
                                  weft_device_str(first->device, a, sizeof a),
                                  weft_device_str(ts[i]->device, b, sizeof b));
        }
    }
    return 0;
}

const char *weft_torch_type_str(const weft_tensor *t, char *buf, size_t size)
{
    /* PyTorch prints Tensor.type() ("torch.cuda.FloatTensor"), a legacy class name; weft
     * says the same with its dtype and device names ("float32 tensor on cuda"). */
    bool host = t->device.type == WEFT_DEVICE_CPU;
    snprintf(buf, size, "%s tensor%s%s", weft_dtype_name(t->dtype), host ? "" : " on ",
             host ? "" : weft_device_type_name(t->device.type));
    return buf;
}

/* ---- the strides of new tensors (empty_like's preserve_format) -------------------------- */

bool weft_is_non_overlapping_and_dense(const weft_tensor *t)
{
    int n = t->ndim, perm[WEFT_MAX_DIMS];
    if (n == 1)
        return t->shape[0] < 2 || t->stride[0] == 1;
    for (int i = 0; i < n; i++)
        perm[i] = i;
    /* by stride, dims of size < 2 last (their strides do not matter) */
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0; j--) {
            int a = perm[j - 1], b = perm[j];
            bool swap = t->shape[a] < 2 ? t->shape[b] >= 2
                                        : t->shape[b] >= 2 && t->stride[b] < t->stride[a];
            if (!swap)
                break;
            perm[j - 1] = b;
            perm[j] = a;
        }
    int64_t expected = 1;
    for (int i = 0; i < n; i++) {
        int d = perm[i];
        if (t->shape[d] < 2)
            return true;
        if (t->stride[d] != expected)
            return false;
        expected *= t->shape[d];
    }
    return true;
}

/* Insertion sort with undecided comparisons, fastest dim first (PyTorch's perm_). */
void weft_sort_dims(int ndim, int *perm, int (*cmp)(const void *ctx, int dim0, int dim1),
                    const void *ctx)
{
    for (int i = 0; i < ndim; i++)
        perm[i] = ndim - 1 - i;
    for (int i = 1; i < ndim; i++) {
        int dim1 = i;
        for (int dim0 = i - 1; dim0 >= 0; dim0--) {
            int c = cmp(ctx, perm[dim0], perm[dim1]);
            if (c > 0) {
                int tmp = perm[dim0];
                perm[dim0] = perm[dim1];
                perm[dim1] = tmp;
                dim1 = dim0;
            } else if (c < 0) {
                break;
            }
        }
    }
}

/* infer_dense_strides' comparison: broadcast dims keep the contiguous order. */
static int dense_cmp(const void *ctx, int dim0, int dim1)
{
    const weft_tensor *t = ctx;
    int64_t s0 = t->stride[dim0], s1 = t->stride[dim1];
    if (s0 == 0 || s1 == 0)
        return 0;
    if (s0 != s1)
        return s0 < s1 ? -1 : 1;
    return t->shape[dim0] > t->shape[dim1] ? 1 : 0;
}

bool weft_preserve_strides(const weft_tensor *t, int64_t *strides)
{
    if (weft_is_non_overlapping_and_dense(t)) {
        memcpy(strides, t->stride, (size_t)t->ndim * sizeof *strides);
        return weft_tensor_is_contiguous(t);
    }
    int perm[WEFT_MAX_DIMS];
    weft_sort_dims(t->ndim, perm, dense_cmp, t);
    int64_t next = 1;
    bool contiguous = true;
    for (int i = 0; i < t->ndim; i++) {
        strides[perm[i]] = next;
        contiguous = contiguous && perm[i] == t->ndim - 1 - i;
        if (t->shape[perm[i]] > 1)
            next *= t->shape[perm[i]];
    }
    if (contiguous)
        contiguous_strides(t->ndim, t->shape, strides);
    return contiguous;
}
