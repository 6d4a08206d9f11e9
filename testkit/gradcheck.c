/* testkit/gradcheck.c: torch.autograd.gradcheck's test, central differences in float64. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "weft.h"
#include "weft/testkit.h"
#include "weft/ops.h"

/* sum(fn(inputs) * w) as a double, with grad mode as the caller set it. */
static int weighted_output(weft_gradcheck_fn fn, void *ctx, weft_tensor *const *inputs,
                           weft_tensor *w, double *value, weft_tensor **loss)
{
    weft_tensor *y = fn(ctx, inputs);
    if (!y)
        return weft_error_code() ? weft_error_code() : WEFT_ERR_RUNTIME;
    weft_tensor *l = weft_sum(weft_mul(weft_to_dtype(y, WEFT_F64), w), 0, NULL, false);
    if (!l || weft_tensor_item(l, value) != 0)
        return weft_error_code();
    if (loss)
        *loss = l;
    return 0;
}

/* Address of the k-th element (row-major) of a cpu float64 tensor with any strides. */
static double *element(weft_tensor *t, int64_t k)
{
    int64_t off = 0;
    for (int d = t->ndim - 1; d >= 0; d--) {
        off += (k % t->shape[d]) * t->stride[d];
        k /= t->shape[d];
    }
    return (double *)weft_tensor_data(t) + off;
}

int weft_gradcheck(weft_gradcheck_fn fn, void *ctx, int ninputs, weft_tensor *const *inputs,
                   double eps, double atol, double rtol)
{
    for (int i = 0; i < ninputs; i++)
        if (inputs[i] && weft_requires_grad(inputs[i]) &&
            (inputs[i]->dtype != WEFT_F64 || inputs[i]->device.type != WEFT_DEVICE_CPU))
            return weft_error_set(WEFT_ERR_VALUE,
                                  "gradcheck: input %d must be a float64 cpu tensor (got %s on %s)",
                                  i, weft_dtype_name(inputs[i]->dtype),
                                  weft_device_type_name(inputs[i]->device.type));
    weft_scope_push();
    int rc = 0;
    /* A fixed, non-trivial weighting so every output element matters differently. */
    bool prev = weft_no_grad_begin();
    weft_tensor *probe = fn(ctx, inputs);
    weft_tensor *w = NULL;
    if (probe) {
        w = weft_empty(probe->ndim, probe->shape, WEFT_F64, probe->device);
        int64_t n = weft_tensor_numel(w);
        for (int64_t k = 0; w && k < n; k++)
            ((double *)weft_tensor_data(w))[k] = 0.5 + 0.37 * (double)((k * 7919) % 11);
    }
    weft_grad_mode_restore(prev);
    if (!w) {
        rc = weft_error_code() ? weft_error_code() : WEFT_ERR_RUNTIME;
        goto out;
    }
    for (int i = 0; i < ninputs; i++)
        if (inputs[i] && weft_requires_grad(inputs[i]) && (rc = weft_zero_grad(inputs[i], true)))
            goto out;
    double value;
    weft_tensor *loss = NULL;
    if ((rc = weighted_output(fn, ctx, inputs, w, &value, &loss)) != 0)
        goto out;
    if (weft_requires_grad(loss) && (rc = weft_backward(loss, NULL, false)) != 0)
        goto out;
    prev = weft_no_grad_begin();
    for (int i = 0; i < ninputs && rc == 0; i++) {
        weft_tensor *x = inputs[i];
        if (!x || !weft_requires_grad(x))
            continue;
        weft_tensor *g = weft_grad(x);
        int64_t n = weft_tensor_numel(x);
        double *analytical = calloc((size_t)(n ? n : 1), sizeof *analytical);
        if (!analytical) {
            rc = weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "gradcheck: out of memory");
            break;
        }
        if (g && (rc = weft_tensor_read(weft_contiguous(g), analytical, (size_t)n * sizeof(double))))
            goto next;
        for (int64_t k = 0; k < n && rc == 0; k++) {
            double *p = element(x, k), saved = *p, plus, minus;
            *p = saved + eps;
            rc = weighted_output(fn, ctx, inputs, w, &plus, NULL);
            *p = saved - eps;
            if (rc == 0)
                rc = weighted_output(fn, ctx, inputs, w, &minus, NULL);
            *p = saved;
            if (rc != 0)
                break;
            double numerical = (plus - minus) / (2 * eps);
            if (!(fabs(analytical[k] - numerical) <= atol + rtol * fabs(numerical)))
                rc = weft_error_set(WEFT_ERR_RUNTIME,
                                    "Jacobian mismatch for output 0 with respect to input %d, "
                                    "element %lld: numerical %.10g, analytical %.10g",
                                    i, (long long)k, numerical, analytical[k]);
        }
    next:
        free(analytical);
    }
    weft_grad_mode_restore(prev);
out:
    weft_scope_pop();
    return rc;
}
