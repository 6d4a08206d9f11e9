/* ops/ranges.c: tensors filled with sequences (arange, linspace) and the identity (eye);
 * checks and error texts follow torch.arange / linspace / eye (RangeFactories.cpp). */
#include <math.h>

#include "internal.h"

/* A 1-D tensor of n elements filled by the ARANGE or LINSPACE kernel. */
static weft_tensor *sequence(int op, int64_t n, double a, double b, enum weft_dtype dtype,
                             weft_device dev)
{
    weft_scope_push();
    weft_tensor *t = weft_empty(1, &n, dtype, dev);
    if (t && n > 0) {
        struct weft_op_call call = {.op = op, .nin = 0, .nout = 1};
        call.out[0] = t;
        call.scalar[0] = a;
        call.scalar[1] = b;
        call.ints[0] = n;
        if (weft_dispatch(&call) != 0)
            t = NULL;
    }
    weft_tensor_retain(t);
    weft_scope_pop();
    return weft_tensor_finish(t);
}

/* PyTorch has no arange or linspace kernel for bool: "arange_cpu" not implemented for
 * 'Bool'. */
static int check_not_bool(const char *op, enum weft_dtype dtype, weft_device dev)
{
    if (dtype != WEFT_BOOL)
        return 0;
    return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "\"%s_%s\" not implemented for 'Bool'", op,
                          weft_device_type_name(dev.type));
}

weft_tensor *weft_arange(double start, double end, double step, enum weft_dtype dtype,
                         weft_device dev)
{
    if (check_not_bool("arange", dtype, dev) != 0)
        return NULL;
    if (!isfinite(start) || !isfinite(end)) {
        weft_error_set(WEFT_ERR_RUNTIME, "unsupported range: %g -> %g", start, end);
        return NULL;
    }
    /* An integer dtype computes in int64 (PyTorch's accscalar_t): start, end and step are
     * truncated first (so a step of 0.5 is 0), and int64 also counts the elements from
     * the truncated values where other dtypes count them from the given ones. */
    double xstart = start, xend = end, xstep = step;
    bool integral = weft_dtype_valid(dtype) && weft_dtype_is_integral(dtype);
    if (integral && isfinite(step)) {
        xstart = trunc(start);
        xend = trunc(end);
        xstep = trunc(step);
    }
    if (!(xstep > 0 || xstep < 0)) {
        weft_error_set(WEFT_ERR_RUNTIME, "step must be nonzero");
        return NULL;
    }
    if (!((xstep > 0 && xend >= xstart) || (xstep < 0 && xend <= xstart))) {
        weft_error_set(WEFT_ERR_RUNTIME, "upper bound and larger bound inconsistent with step sign");
        return NULL;
    }
    double size = dtype == WEFT_I64 ? ceil((xend - xstart) / xstep) : ceil((end - start) / step);
    if (!(size >= 0 && size <= 9.2233720368547758e18)) {
        weft_error_set(WEFT_ERR_RUNTIME, "invalid size, possible overflow?");
        return NULL;
    }
    return sequence(WEFT_OP_ARANGE, (int64_t)size, xstart, xstep, dtype, dev);
}

weft_tensor *weft_linspace(double start, double end, int64_t steps, enum weft_dtype dtype,
                           weft_device dev)
{
    if (steps < 0) {
        weft_error_set(WEFT_ERR_RUNTIME, "number of steps must be non-negative");
        return NULL;
    }
    if (check_not_bool("linspace", dtype, dev) != 0)
        return NULL;
    return sequence(WEFT_OP_LINSPACE, steps, start, end, dtype, dev);
}

weft_tensor *weft_eye(int64_t n, int64_t m, enum weft_dtype dtype, weft_device dev)
{
    if (n < 0) {
        weft_error_set(WEFT_ERR_RUNTIME, "n must be greater or equal to 0, got %lld", (long long)n);
        return NULL;
    }
    if (m < 0)
        m = n;
    int64_t shape[2] = {n, m};
    weft_scope_push();
    weft_tensor *t = weft_zeros(2, shape, dtype, dev);
    int64_t diag = n < m ? n : m;
    if (t && diag > 0) {
        /* The diagonal is a 1-D view with stride m + 1. */
        int64_t stride = m + 1;
        if (!weft_fill_(weft_as_strided(t, 1, &diag, &stride, 0), 1.0))
            t = NULL;
    }
    weft_tensor_retain(t);
    weft_scope_pop();
    return weft_tensor_finish(t);
}
