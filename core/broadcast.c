/* core/broadcast.c: broadcast shapes and torch.result_type. */
#include "internal.h"
#include "weft/ops.h"

int weft_broadcast_shapes(int ndim_a, const int64_t *a, int ndim_b, const int64_t *b,
                          int *ndim_out, int64_t *out)
{
    int nd = ndim_a > ndim_b ? ndim_a : ndim_b;
    int64_t result[WEFT_MAX_DIMS];
    for (int i = 0; i < nd; i++) {
        int ia = ndim_a - nd + i, ib = ndim_b - nd + i;
        int64_t sa = ia >= 0 ? a[ia] : 1, sb = ib >= 0 ? b[ib] : 1;
        if (sa != sb && sa != 1 && sb != 1)
            return weft_error_set(WEFT_ERR_RUNTIME,
                                  "The size of tensor a (%lld) must match the size of tensor b "
                                  "(%lld) at non-singleton dimension %d",
                                  (long long)sa, (long long)sb, i);
        result[i] = sa == 1 ? sb : sa;
    }
    for (int i = 0; i < nd; i++)
        out[i] = result[i];
    *ndim_out = nd;
    return 0;
}

/* Promotion within PyTorch's three priority classes: dimensioned tensors, zero-dim
 * tensors, then wrapped scalars. A lower class only matters when its category (bool <
 * integral < floating) is higher than everything above it. */
struct result_state {
    int have[3];
    enum weft_dtype dtype[3];
};

static void state_add(struct result_state *s, int cls, enum weft_dtype dt)
{
    s->dtype[cls] = s->have[cls] ? weft_promote_types(s->dtype[cls], dt) : dt;
    s->have[cls] = 1;
}

static enum weft_dtype state_result(const struct result_state *s)
{
    enum weft_dtype result = WEFT_BOOL;
    int have = 0;
    for (int cls = 0; cls < 3; cls++) {
        if (!s->have[cls])
            continue;
        if (!have) {
            result = s->dtype[cls];
            have = 1;
        } else if (weft_dtype_category(s->dtype[cls]) > weft_dtype_category(result)) {
            /* A floating scalar promotes an integral tensor to the default dtype, not
             * float64; a higher-category 0-dim tensor keeps its own type. */
            result = cls == 2 ? (weft_dtype_is_floating(s->dtype[cls]) ? weft_default_dtype()
                                                                        : WEFT_I64)
                              : s->dtype[cls];
        }
    }
    return result;
}

static int tensor_class(const weft_tensor *t)
{
    return t->ndim == 0 ? 1 : 0;
}

enum weft_dtype weft_result_type(const weft_tensor *a, const weft_tensor *b)
{
    struct result_state s = {{0}};
    state_add(&s, tensor_class(a), a->dtype);
    state_add(&s, tensor_class(b), b->dtype);
    return state_result(&s);
}

enum weft_dtype weft_result_type_scalar(const weft_tensor *a, double v)
{
    struct result_state s = {{0}};
    state_add(&s, tensor_class(a), a->dtype);
    state_add(&s, 2, weft_dtype_from_value_is_integral(v) ? WEFT_I64 : WEFT_F64);
    return state_result(&s);
}
