/* ops/item.c: Tensor.item(), aten::item: a one-element tensor's value as a double.
 *
 * An op over the core's weft_tensor_read, as PyTorch's item() is an ATen op
 * (_local_scalar_dense) over c10's storage: the core only reads bytes back. */
#include "weft/autograd.h"
#include "weft/error.h"
#include "weft/layout.h"
#include "weft/tensor.h"

int weft_tensor_item(const weft_tensor *t, double *out)
{
    if (!t) {
        int code = weft_error_code();
        return code != WEFT_OK ? code : WEFT_ERR_VALUE;
    }
    if (weft_require_strided(t, "item") != 0)
        return weft_error_code();
    int64_t n = weft_tensor_numel(t);
    if (n != 1)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "a Tensor with %lld elements cannot be converted to Scalar",
                              (long long)n);
    /* float64 first, on t's device, so a GPU tensor brings back 8 bytes; not recorded */
    bool prev = weft_no_grad_begin();
    weft_scope_push();
    weft_tensor *d = weft_to_dtype((weft_tensor *)t, WEFT_F64);
    int rc = d ? weft_tensor_read(d, out, sizeof *out) : weft_error_code();
    weft_scope_pop();
    weft_grad_mode_restore(prev);
    return rc;
}
