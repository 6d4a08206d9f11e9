/* ops/random_like.c: torch.rand_like, randn_like and randint_like: t's shape, dtype,
 * device and layout (empty_like's preserve_format), drawn from the one Philox stream as
 * weft_rand, weft_randn and weft_randint draw. */
#include "internal.h"

static weft_tensor *like(const weft_tensor *t, weft_tensor *drawn)
{
    if (!drawn || weft_tensor_is_contiguous(t))
        return drawn;
    weft_tensor *out = weft_empty_like(t);
    if (out && weft_copy_(out, drawn) == 0)
        return out;
    return weft_tensor_discard(out);
}

weft_tensor *weft_rand_like(const weft_tensor *t)
{
    if (!t)
        return NULL;
    weft_scope_push();
    weft_tensor *r = weft_tensor_retain(like(t, weft_rand(t->ndim, t->shape, t->dtype, t->device)));
    weft_scope_pop();
    return weft_tensor_finish(r);
}

weft_tensor *weft_randn_like(const weft_tensor *t)
{
    if (!t)
        return NULL;
    weft_scope_push();
    weft_tensor *r = weft_tensor_retain(like(t, weft_randn(t->ndim, t->shape, t->dtype, t->device)));
    weft_scope_pop();
    return weft_tensor_finish(r);
}

weft_tensor *weft_randint_like(const weft_tensor *t, int64_t low, int64_t high)
{
    if (!t)
        return NULL;
    weft_scope_push();
    weft_tensor *r = weft_tensor_retain(
        like(t, weft_randint(low, high, t->ndim, t->shape, t->dtype, t->device)));
    weft_scope_pop();
    return weft_tensor_finish(r);
}
