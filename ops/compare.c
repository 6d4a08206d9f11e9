/* ops/compare.c: torch.isclose and torch.allclose, made of other ops as PyTorch 1.13
 * writes them: equal, or both NaN with equal_nan, or a finite |a - b| <= atol + |rtol b|
 * (bool operands compared in the default float dtype). */
#include "internal.h"

static int check(weft_tensor *a, weft_tensor *b, double rtol, double atol)
{
    const weft_tensor *pair[2] = {a, b};
    if (weft_check_same_device(2, pair) != 0)
        return weft_error_code();
    if (a->dtype != b->dtype)
        return weft_error_set(WEFT_ERR_RUNTIME, "%s did not match %s",
                              weft_dtype_torch_name(a->dtype), weft_dtype_torch_name(b->dtype));
    if (rtol < 0)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "rtol must be greater than or equal to zero, but got %g", rtol);
    if (atol < 0)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "atol must be greater than or equal to zero, but got %g", atol);
    return 0;
}

static weft_tensor *isclose_in_scope(weft_tensor *a, weft_tensor *b, double rtol, double atol,
                                     bool equal_nan)
{
    weft_tensor *close = weft_eq(a, b);
    if (close && equal_nan && dtype_is_floating(a->dtype))
        close = weft_logical_or(close, weft_logical_and(weft_ne(a, a), weft_ne(b, b)));
    if (!close || (rtol == 0 && atol == 0))
        return close;
    if (!dtype_is_floating(a->dtype)) { /* no wrap-around in an integer a - b */
        a = weft_to_dtype(a, weft_default_dtype());
        b = a ? weft_to_dtype(b, weft_default_dtype()) : NULL;
        if (!b)
            return NULL;
    }
    weft_tensor *allowed = weft_add_scalar(weft_abs(weft_mul_scalar(b, rtol)), atol);
    weft_tensor *actual = weft_abs(weft_sub(a, b));
    /* x - x is 0 exactly when x is finite */
    weft_tensor *finite = actual ? weft_eq_scalar(weft_sub(actual, actual), 0) : NULL;
    return weft_logical_or(close, weft_logical_and(finite, weft_le(actual, allowed)));
}

weft_tensor *weft_isclose(weft_tensor *a, weft_tensor *b, double rtol, double atol,
                          bool equal_nan)
{
    if (!a || !b || check(a, b, rtol, atol) != 0)
        return NULL;
    bool prev = weft_no_grad_begin();
    weft_scope_push();
    weft_tensor *r = weft_tensor_retain(isclose_in_scope(a, b, rtol, atol, equal_nan));
    weft_scope_pop();
    weft_grad_mode_restore(prev);
    return weft_tensor_finish(r);
}

int weft_allclose(weft_tensor *a, weft_tensor *b, double rtol, double atol, bool equal_nan,
                  bool *result)
{
    double v = 0;
    weft_scope_push();
    weft_tensor *close = weft_isclose(a, b, rtol, atol, equal_nan);
    int rc = close ? weft_tensor_item(weft_all(close, 0, NULL, false), &v) : weft_error_code();
    weft_scope_pop();
    if (rc == 0 && result)
        *result = v != 0;
    return rc;
}
