/* core/creation.c: new tensors filled with a constant, or with host data. Checks and
 * error texts follow torch.full and from_numpy. (Sequences and eye: ops/ranges.c.) */
#include <math.h>
#include <string.h>

#include "internal.h"

static int dispatch_fill(weft_tensor *t, double value)
{
    struct weft_op_call call = {.op = WEFT_OP_FILL, .nin = 0, .nout = 1};
    call.out[0] = t;
    call.scalar[0] = value;
    return weft_dispatch(&call);
}

/* c10's overflow check for Scalar::to<T>(): integral-valued inputs behave like Python
 * ints (unsigned types wrap negatives down to -max), others like Python floats (inf is
 * fine for floating types, NaN never fits an integer). */
static int check_fill_value(enum weft_dtype dt, double v)
{
    static const struct {
        double lowest, max;
    } limits[WEFT_DTYPE_COUNT] = {
        [WEFT_BOOL] = {0, 0},
        [WEFT_U8] = {0, 255},
        [WEFT_I8] = {-128, 127},
        [WEFT_I16] = {-32768, 32767},
        [WEFT_I32] = {-2147483648.0, 2147483647.0},
        [WEFT_I64] = {-9223372036854775808.0, 9223372036854775807.0},
        [WEFT_F16] = {-65504.0, 65504.0},
        [WEFT_BF16] = {-3.38953138925153547590e+38, 3.38953138925153547590e+38},
        [WEFT_F32] = {-3.40282346638528859812e+38, 3.40282346638528859812e+38},
        [WEFT_F64] = {-INFINITY, INFINITY},
    };
    if (dt == WEFT_BOOL || dt == WEFT_F64)
        return 0;
    bool floating = weft_dtype_is_floating(dt);
    bool overflow;
    if (floating)
        overflow = !isinf(v) && !isnan(v) && (v < limits[dt].lowest || v > limits[dt].max);
    else if (isnan(v) || isinf(v))
        overflow = true;
    else /* a double is PyTorch's float scalar: full(-1.0, uint8) overflows (only a Python
          * int would wrap, and the C API has none) */
        overflow = v < limits[dt].lowest || v > limits[dt].max;
    if (overflow)
        return weft_error_set(WEFT_ERR_RUNTIME, "value cannot be converted to type %s without overflow",
                              weft_dtype_name(dt)); /* PyTorch's sentence, weft's dtype name */
    return 0;
}

weft_tensor *weft_full(int ndim, const int64_t *shape, double value, enum weft_dtype dtype,
                       weft_device dev)
{
    if (weft_dtype_valid(dtype) && check_fill_value(dtype, value) != 0)
        return NULL;
    weft_scope_push();
    weft_tensor *t = weft_empty(ndim, shape, dtype, dev);
    if (t && weft_tensor_numel(t) > 0 && dispatch_fill(t, value) != 0)
        t = NULL;
    weft_tensor_retain(t);
    weft_scope_pop();
    return weft_tensor_finish(t);
}

weft_tensor *weft_zeros(int ndim, const int64_t *shape, enum weft_dtype dtype, weft_device dev)
{
    return weft_full(ndim, shape, 0.0, dtype, dev);
}

weft_tensor *weft_ones(int ndim, const int64_t *shape, enum weft_dtype dtype, weft_device dev)
{
    return weft_full(ndim, shape, 1.0, dtype, dev);
}

/* preserve_format, as PyTorch's default: t's layout (memory_format.h) */
weft_tensor *weft_full_like(const weft_tensor *t, double value)
{
    if (!t)
        return NULL;
    if (t->layout != WEFT_LAYOUT_STRIDED)
        return weft_full(t->ndim, t->shape, value, t->dtype, t->device);
    if (weft_dtype_valid(t->dtype) && check_fill_value(t->dtype, value) != 0)
        return NULL;
    weft_scope_push();
    weft_tensor *out = weft_empty_like(t);
    if (out && weft_tensor_numel(out) > 0 && dispatch_fill(out, value) != 0)
        out = NULL;
    weft_tensor_retain(out);
    weft_scope_pop();
    return weft_tensor_finish(out);
}

weft_tensor *weft_fill_(weft_tensor *t, double value)
{
    if (!t || weft_require_strided(t, "fill_") != 0 || check_fill_value(t->dtype, value) != 0)
        return NULL;
    if (weft_autograd_needed(1, &t)) {
        weft_error_set(WEFT_ERR_NOT_IMPLEMENTED,
                       "fill_ is not recorded by autograd; call it under weft_no_grad_begin()");
        return NULL;
    }
    if (weft_tensor_numel(t) > 0 && dispatch_fill(t, value) != 0)
        return NULL;
    weft_tensor_bump_version(t);
    return t;
}

weft_tensor *weft_zeros_like(const weft_tensor *t)
{
    return weft_full_like(t, 0.0);
}

weft_tensor *weft_ones_like(const weft_tensor *t)
{
    return weft_full_like(t, 1.0);
}

weft_tensor *weft_scalar_tensor(double value, enum weft_dtype dtype, weft_device dev)
{
    return weft_full(0, NULL, value, dtype, dev);
}

weft_tensor *weft_from_host(const void *data, int ndim, const int64_t *shape,
                            enum weft_dtype dtype, weft_device dev)
{
    weft_scope_push();
    weft_tensor *t = weft_empty(ndim, shape, dtype, dev);
    size_t nbytes = (size_t)weft_tensor_numel(t) * weft_dtype_size(dtype);
    if (t && nbytes > 0 && !data) {
        weft_error_set(WEFT_ERR_VALUE, "weft_from_host: data is NULL for %zu bytes", nbytes);
        t = NULL;
    }
    if (t && nbytes > 0) {
        if (dev.type == WEFT_DEVICE_CPU) {
            memcpy(weft_tensor_data(t), data, nbytes);
        } else {
            /* Describe the host buffer as a cpu tensor and let copy_ move it. */
            weft_tensor *host = weft_from_blob((void *)data, ndim, shape, NULL, dtype, WEFT_CPU,
                                               NULL, NULL);
            if (!host || weft_copy_(t, host) != 0)
                t = NULL;
        }
    }
    weft_tensor_retain(t);
    weft_scope_pop();
    return weft_tensor_finish(t);
}

weft_tensor *weft_from_blob(void *data, int ndim, const int64_t *shape, const int64_t *strides,
                            enum weft_dtype dtype, weft_device dev, weft_deleter deleter,
                            void *ctx)
{
    if (!weft_dtype_valid(dtype)) {
        weft_error_set(WEFT_ERR_TYPE, "invalid dtype %d", (int)dtype);
        return NULL;
    }
    if (weft_shape_numel(ndim, shape) < 0)
        return NULL;
    int64_t contiguous[WEFT_MAX_DIMS];
    if (!strides) {
        weft_contiguous_strides(ndim, shape, contiguous);
        strides = contiguous;
    }
    /* The storage spans exactly the bytes the strides can reach. */
    int64_t extent = 1;
    for (int i = 0; i < ndim; i++) {
        if (strides[i] < 0) {
            weft_error_set(WEFT_ERR_VALUE, "weft_from_blob: negative strides are not supported");
            return NULL;
        }
        extent = shape[i] == 0 ? 0 : extent;
    }
    for (int i = 0; i < ndim && extent > 0; i++)
        extent += (shape[i] - 1) * strides[i];
    size_t nbytes = (size_t)extent * weft_dtype_size(dtype);
    if (nbytes > 0 && !data) {
        weft_error_set(WEFT_ERR_VALUE, "weft_from_blob: data is NULL for %zu bytes", nbytes);
        return NULL;
    }
    struct weft_storage *s = weft_storage_wrap(dev, data, nbytes, deleter, ctx);
    if (!s)
        return NULL;
    weft_tensor *t = weft_tensor_make(s, ndim, shape, strides, 0, dtype);
    weft_storage_release(s);
    return weft_tensor_finish(t);
}
