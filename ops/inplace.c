/* ops/inplace.c: the in-place form of an op that has no in-place kernel (index_add_,
 * floor_divide_, remainder_, scatter_, ...): its out-of-place result written back into the
 * tensor, with the checks PyTorch makes of an in-place op's output. */
#include "elementwise.h"
#include "internal.h"

int ops_write_result_(weft_tensor *t, weft_tensor *r)
{
    if (!t || !r)
        return -1;
    if (ew_check_cast(r->dtype, t->dtype) != 0 || ew_check_broadcast_to(t, r->ndim, r->shape) != 0 ||
        ew_check_internal_overlap(t) != 0)
        return weft_error_code();
    bool prev = weft_no_grad_begin();
    int rc = weft_copy_(t, r);
    weft_grad_mode_restore(prev);
    return rc;
}
