/* core/copy.c: operations that move data: contiguous, clone, copy_, to, read, item.
 *
 * Copies on one device run the COPY kernel (it broadcasts and converts). Between devices
 * the data goes through the non-cpu backend's `copy`, which only moves dense blocks of
 * one dtype: broadcasting and dtype conversion happen on the cpu side (or on the
 * destination device for device-to-device copies), in staging tensors shaped so that the
 * transfer itself is one flat block. */
#include <string.h>

#include "internal.h"

/* ---- geometry --------------------------------------------------------------------------- */

static bool same_geometry(const weft_tensor *a, const weft_tensor *b)
{
    if (a->ndim != b->ndim)
        return false;
    for (int i = 0; i < a->ndim; i++) {
        if (a->shape[i] != b->shape[i])
            return false;
        if (a->shape[i] > 1 && a->stride[i] != b->stride[i])
            return false;
    }
    return true;
}

/* Byte range [lo, hi) of the storage that t can touch (strides are never negative). */
static void byte_range(const weft_tensor *t, size_t *lo, size_t *hi)
{
    size_t itemsize = weft_dtype_size(t->dtype);
    int64_t last = 0;
    for (int i = 0; i < t->ndim; i++)
        last += (t->shape[i] - 1) * t->stride[i];
    *lo = (size_t)t->offset * itemsize;
    *hi = (size_t)(t->offset + last + 1) * itemsize;
}

/* An uninitialised tensor with t-like geometry (PyTorch's preserve_format): t's strides
 * when t is dense, else dense ones in the order of t's (memory_format.h). */
static weft_tensor *empty_preserving(const weft_tensor *t, enum weft_dtype dtype, weft_device dev)
{
    int64_t strides[WEFT_MAX_DIMS];
    weft_preserve_strides(t, strides);
    return weft_empty_dense_strided(t->ndim, t->shape, strides, dtype, dev);
}

/* A 1-D header over the dense block of t (stack storage; for the backend's copy). */
static weft_tensor flat_header(const weft_tensor *t)
{
    weft_tensor f = *t;
    f.refcount = 1;
    f.ndim = 1;
    f.shape[0] = weft_tensor_numel(t);
    f.stride[0] = 1;
    f.autograd = NULL;
    return f;
}

/* ---- copies ------------------------------------------------------------------------------- */

static int dispatch_copy(weft_tensor *dst, const weft_tensor *src)
{
    struct weft_op_call call = {.op = WEFT_OP_COPY, .nin = 1, .nout = 1};
    call.in[0] = src;
    call.out[0] = dst;
    return weft_dispatch(&call);
}

/* Moves the dense block of src into the dense block of dst: same dtype and geometry. */
static int transfer(const struct weft_backend *b, weft_tensor *dst, const weft_tensor *src,
                    bool non_blocking)
{
    if (weft_tensor_numel(src) == 0)
        return 0;
    weft_tensor d = flat_header(dst), s = flat_header(src);
    return b->copy(b->context, &d, &s, non_blocking);
}

static int copy_impl(weft_tensor *dst, const weft_tensor *src, bool non_blocking);

/* cpu -> device: broadcast and convert into a host tensor laid out like dst, then move
 * one block (through a device temporary when dst itself is not dense). */
static int copy_to_device(weft_tensor *dst, const weft_tensor *src, bool non_blocking)
{
    const struct weft_backend *b = weft_backend_get(dst->device.type);
    if (!b)
        return weft_error_code();
    bool dst_dense = weft_is_non_overlapping_and_dense(dst);
    const weft_tensor *host = src;
    if (!(dst_dense && src->dtype == dst->dtype && same_geometry(src, dst) && weft_is_non_overlapping_and_dense(src))) {
        weft_tensor *stage = dst_dense ? empty_preserving(dst, dst->dtype, WEFT_CPU)
                                       : weft_empty(dst->ndim, dst->shape, dst->dtype, WEFT_CPU);
        if (!stage || copy_impl(stage, src, false) != 0)
            return weft_error_code();
        host = stage;
    }
    if (dst_dense)
        return transfer(b, dst, host, non_blocking);
    weft_tensor *tmp = weft_empty(dst->ndim, dst->shape, dst->dtype, dst->device);
    if (!tmp || transfer(b, tmp, host, false) != 0)
        return weft_error_code();
    return dispatch_copy(dst, tmp);
}

/* device -> cpu or device -> device of the same type: make src dense on its device, move
 * the block into a tensor of the same layout on dst's device, then broadcast/convert
 * there (unless the block can land in dst directly). */
static int copy_from_device(weft_tensor *dst, const weft_tensor *src, bool non_blocking)
{
    const struct weft_backend *b = weft_backend_get(src->device.type);
    if (!b)
        return weft_error_code();
    const weft_tensor *ready = src;
    if (!weft_is_non_overlapping_and_dense(src)) {
        weft_tensor *c = weft_empty(src->ndim, src->shape, src->dtype, src->device);
        if (!c || dispatch_copy(c, src) != 0)
            return weft_error_code();
        ready = c;
    }
    if (weft_is_non_overlapping_and_dense(dst) && dst->dtype == ready->dtype && same_geometry(dst, ready))
        return transfer(b, dst, ready, non_blocking);
    weft_tensor *landing = empty_preserving(ready, ready->dtype, dst->device);
    if (!landing || transfer(b, landing, ready, false) != 0)
        return weft_error_code();
    return copy_impl(dst, landing, false);
}

static int copy_across_devices(weft_tensor *dst, const weft_tensor *src, bool non_blocking)
{
    if (src->device.type == WEFT_DEVICE_CPU)
        return copy_to_device(dst, src, non_blocking);
    if (dst->device.type == WEFT_DEVICE_CPU || dst->device.type == src->device.type)
        return copy_from_device(dst, src, non_blocking);
    /* Two different device types: no backend knows both, so go through the host. */
    weft_tensor *host = weft_empty(src->ndim, src->shape, src->dtype, WEFT_CPU);
    if (!host || copy_from_device(host, src, false) != 0)
        return weft_error_code();
    return copy_to_device(dst, host, non_blocking);
}

/* Error unless src broadcasts to dst's shape; sets *expanded to src viewed at it. */
static int broadcast_source(const weft_tensor *dst, const weft_tensor *src, weft_tensor **expanded)
{
    int nd;
    int64_t shape[WEFT_MAX_DIMS];
    if (weft_broadcast_shapes(dst->ndim, dst->shape, src->ndim, src->shape, &nd, shape) != 0)
        return weft_error_code();
    if (nd != dst->ndim || memcmp(shape, dst->shape, (size_t)nd * sizeof *shape) != 0) {
        char a[200], b[200];
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "output with shape %s doesn't match the broadcast shape %s",
                              weft_shape_str(dst->ndim, dst->shape, a, sizeof a),
                              weft_shape_str(nd, shape, b, sizeof b));
    }
    *expanded = weft_fwd_expand((weft_tensor *)src, dst->ndim, dst->shape);
    return *expanded ? 0 : weft_error_code();
}

static int check_writable(const weft_tensor *dst)
{
    for (int i = 0; i < dst->ndim; i++)
        if (dst->shape[i] > 1 && dst->stride[i] == 0)
            return weft_error_set(WEFT_ERR_RUNTIME,
                                  "unsupported operation: more than one element of the "
                                  "written-to tensor refers to a single memory location. Please "
                                  "clone() the tensor before performing the operation.");
    return 0;
}

/* PyTorch's get_overlap_status(dst, src) == PARTIAL (aten/src/ATen/MemoryOverlap.cpp):
 * both dense, their blocks intersect, and they are not the very same elements. Beyond
 * dense tensors it is "too hard" and PyTorch does not refuse. */
static bool partial_overlap(const weft_tensor *dst, const weft_tensor *src)
{
    if (dst->storage != src->storage || weft_tensor_numel(dst) == 0 ||
        weft_tensor_numel(src) == 0 || !weft_is_non_overlapping_and_dense(dst) || !weft_is_non_overlapping_and_dense(src))
        return false;
    size_t a = (size_t)dst->offset * weft_dtype_size(dst->dtype);
    size_t a_end = a + (size_t)weft_tensor_numel(dst) * weft_dtype_size(dst->dtype);
    size_t b = (size_t)src->offset * weft_dtype_size(src->dtype);
    size_t b_end = b + (size_t)weft_tensor_numel(src) * weft_dtype_size(src->dtype);
    if (a == b && a_end == b_end)
        return dst->ndim != src->ndim ||
               memcmp(dst->stride, src->stride, (size_t)dst->ndim * sizeof *dst->stride) != 0;
    return a < b_end && b < a_end;
}

/* The copy itself; the caller has a scope open for the temporaries. */
static int copy_scoped(weft_tensor *dst, const weft_tensor *src, bool non_blocking)
{
    if (dst->layout != WEFT_LAYOUT_STRIDED || src->layout != WEFT_LAYOUT_STRIDED)
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED,
                              "copy_(): only strided tensors are supported by the core's copy");
    if (check_writable(dst) != 0)
        return weft_error_code();
    if (!weft_device_equal(dst->device, src->device))
        return copy_across_devices(dst, src, non_blocking);
    weft_tensor *from;
    if (broadcast_source(dst, src, &from) != 0)
        return weft_error_code();
    if (weft_tensor_numel(dst) == 0)
        return 0;
    if (dst->storage == from->storage) {
        if (dst->dtype == from->dtype && dst->offset == from->offset && same_geometry(dst, from))
            return 0; /* the same elements: nothing to move */
        if (partial_overlap(dst, src))
            return weft_error_set(WEFT_ERR_RUNTIME,
                                  "unsupported operation: some elements of the input tensor and "
                                  "the written-to tensor refer to a single memory location. "
                                  "Please clone() the tensor before performing the operation.");
        size_t dlo, dhi, slo, shi;
        byte_range(dst, &dlo, &dhi);
        byte_range(from, &slo, &shi);
        if (dlo < shi && slo < dhi) {
            /* Overlap PyTorch cannot judge (a broadcast or gapped source, which it copies
             * in whatever order): read everything before writing anything. */
            weft_tensor *tmp = weft_empty(from->ndim, from->shape, from->dtype, from->device);
            if (!tmp || dispatch_copy(tmp, from) != 0)
                return weft_error_code();
            from = tmp;
        }
    }
    return dispatch_copy(dst, from);
}

static int copy_impl(weft_tensor *dst, const weft_tensor *src, bool non_blocking)
{
    weft_scope_push();
    int rc = copy_scoped(dst, src, non_blocking);
    weft_scope_pop();
    return rc;
}

static int null_status(void)
{
    int code = weft_error_code();
    return code != WEFT_OK ? code : WEFT_ERR_VALUE;
}

static int weft_fwd_copy_nonblocking_(weft_tensor *dst, const weft_tensor *src, bool non_blocking)
{
    if (!dst || !src)
        return null_status();
    int rc = copy_impl(dst, src, non_blocking);
    if (rc != 0)
        return rc;
    weft_tensor_bump_version(dst);
    return 0;
}

int weft_copy_(weft_tensor *dst, const weft_tensor *src)
{
    return weft_copy_nonblocking_(dst, src, false);
}

/* A new tensor on dev of dtype with t's values; strides as empty_preserving. */
static weft_tensor *copy_as(weft_tensor *t, enum weft_dtype dtype, weft_device dev, bool contiguous,
                            bool non_blocking)
{
    weft_scope_push();
    weft_tensor *out = contiguous ? weft_empty(t->ndim, t->shape, dtype, dev)
                                  : empty_preserving(t, dtype, dev);
    if (out && copy_impl(out, t, non_blocking) != 0)
        out = NULL;
    weft_tensor_retain(out);
    weft_scope_pop();
    return weft_tensor_finish(out);
}

/* One more reference to t, recorded like a new result. */
static weft_tensor *same(weft_tensor *t)
{
    return weft_tensor_finish(weft_tensor_retain(t));
}

static weft_tensor *weft_fwd_contiguous(weft_tensor *t)
{
    if (!t)
        return NULL;
    if (weft_tensor_is_contiguous(t))
        return same(t);
    if (weft_require_strided(t, "contiguous") != 0)
        return NULL;
    return copy_as(t, t->dtype, t->device, true, false);
}

static weft_tensor *weft_fwd_clone(weft_tensor *t)
{
    if (!t || weft_require_strided(t, "clone") != 0)
        return NULL;
    return copy_as(t, t->dtype, t->device, false, false);
}

static weft_tensor *weft_fwd_to(weft_tensor *t, weft_device dev, enum weft_dtype dtype, bool non_blocking)
{
    if (!t)
        return NULL;
    if (!weft_dtype_valid(dtype)) {
        weft_error_set(WEFT_ERR_TYPE, "invalid dtype %d", (int)dtype);
        return NULL;
    }
    if (t->dtype == dtype && weft_device_equal(t->device, dev))
        return same(t);
    if (weft_require_strided(t, "to") != 0)
        return NULL;
    return copy_as(t, dtype, dev, false, non_blocking);
}

weft_tensor *weft_to_dtype(weft_tensor *t, enum weft_dtype dtype)
{
    return t ? weft_to(t, t->device, dtype, false) : NULL;
}

weft_tensor *weft_to_device(weft_tensor *t, weft_device dev)
{
    return t ? weft_to(t, dev, t->dtype, false) : NULL;
}

/* ---- reading values back ----------------------------------------------------------------- */

/* Copies t into host memory dst viewed as a contiguous tensor. */
static int read_host(const weft_tensor *t, void *dst)
{
    enum weft_dtype dtype = t->dtype;
    size_t nbytes = (size_t)weft_tensor_numel(t) * weft_dtype_size(dtype);
    if (nbytes == 0)
        return 0;
    if (t->device.type == WEFT_DEVICE_CPU && weft_tensor_is_contiguous(t)) {
        memcpy(dst, weft_tensor_data(t), nbytes);
        return 0;
    }
    struct weft_storage *s = weft_storage_wrap(WEFT_CPU, dst, nbytes, NULL, NULL);
    if (!s)
        return weft_error_code();
    weft_tensor *view = weft_tensor_make(s, t->ndim, t->shape, NULL, 0, dtype);
    weft_storage_release(s);
    if (!view)
        return weft_error_code();
    int rc = copy_impl(view, t, false);
    weft_tensor_release(view);
    return rc;
}

int weft_tensor_read(const weft_tensor *t, void *dst, size_t nbytes)
{
    if (!t)
        return null_status();
    if (weft_require_strided(t, "weft_tensor_read") != 0)
        return weft_error_code();
    size_t need = (size_t)weft_tensor_numel(t) * weft_tensor_itemsize(t);
    if (nbytes < need)
        return weft_error_set(WEFT_ERR_VALUE,
                              "weft_tensor_read: the buffer holds %zu bytes but the tensor "
                              "needs %zu (%lld elements of %s)",
                              nbytes, need, (long long)weft_tensor_numel(t),
                              weft_dtype_name(t->dtype));
    return read_host(t, dst);
}

/* ---- copies ------------------------------------------------------------------------------ */

/* The gradient g unchanged, on the source's device, which a copy's node keeps in
 * ints[0..1] (the engine converts the dtype). */
static weft_tensor *grad_to_source(struct weft_node *node, weft_tensor *g)
{
    weft_device dev = {(int16_t)weft_node_ints(node)[0], (int16_t)weft_node_ints(node)[1]};
    return weft_device_equal(dev, g->device) ? weft_autorelease(weft_tensor_retain(g))
                                             : weft_to_device(g, dev);
}

/* to / clone / contiguous: the gradient goes back unchanged. */
static int copy_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                         weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0];
    if (!g)
        return 0;
    grad_inputs[0] = grad_to_source(node, g);
    return grad_inputs[0] ? 0 : weft_error_code();
}

static weft_tensor *record_copy(const char *name, weft_tensor *in, weft_tensor *out)
{
    if (out == in) /* no-op conversion: same tensor, same history */
        return out;
    struct weft_node *node = weft_node_create(name, copy_backward, 1, &in, 0);
    if (node && out) {
        weft_node_ints(node)[0] = in->device.type;
        weft_node_ints(node)[1] = in->device.index;
    }
    return weft_node_finish1(node, out);
}

weft_tensor *weft_contiguous(weft_tensor *t)
{
    bool rec = weft_autograd_needed(1, &t);
    weft_tensor *out = WEFT_NO_GRAD(rec, weft_fwd_contiguous(t));
    return rec ? record_copy("CloneBackward0", t, out) : out;
}

weft_tensor *weft_clone(weft_tensor *t)
{
    bool rec = weft_autograd_needed(1, &t);
    weft_tensor *out = WEFT_NO_GRAD(rec, weft_fwd_clone(t));
    return rec ? record_copy("CloneBackward0", t, out) : out;
}

weft_tensor *weft_to(weft_tensor *t, weft_device dev, enum weft_dtype dtype, bool non_blocking)
{
    bool rec = weft_autograd_needed(1, &t);
    weft_tensor *out = WEFT_NO_GRAD(rec, weft_fwd_to(t, dev, dtype, non_blocking));
    return rec ? record_copy("ToCopyBackward0", t, out) : out;
}

/* copy_: dst's old value is overwritten (no gradient); src gets the gradient. */
static int copy_inplace_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                                 weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0];
    if (!g)
        return 0;
    if (weft_node_needs_input_grad(node, 0) && !(grad_inputs[0] = weft_zeros_like(g)))
        return weft_error_code();
    if (weft_node_needs_input_grad(node, 1) && !(grad_inputs[1] = grad_to_source(node, g)))
        return weft_error_code();
    return 0;
}

int weft_copy_nonblocking_(weft_tensor *dst, const weft_tensor *src, bool non_blocking)
{
    weft_tensor *in[2] = {dst, (weft_tensor *)src};
    if (!weft_autograd_needed(2, in))
        return weft_fwd_copy_nonblocking_(dst, src, non_blocking);
    if (weft_autograd_check_inplace(dst, true) != 0)
        return weft_error_code();
    int rc = WEFT_NO_GRAD(true, weft_fwd_copy_nonblocking_(dst, src, non_blocking));
    if (rc != 0)
        return rc;
    struct weft_node *node = weft_node_create("CopyBackwards", copy_inplace_backward, 2, in, 0);
    if (!node)
        return weft_error_code();
    weft_node_ints(node)[0] = src->device.type;
    weft_node_ints(node)[1] = src->device.index;
    return weft_node_finish(node, 1, &dst);
}
