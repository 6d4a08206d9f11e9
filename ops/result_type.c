/* ops/result_type.c: torch.result_type, the dtype an op on two operands computes in. */
#include <math.h>

#include "internal.h"

bool weft_scalar_is_integral(double v)
{
    return isfinite(v) && v == trunc(v);
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
        } else if (dtype_category(s->dtype[cls]) > dtype_category(result)) {
            /* A floating scalar promotes an integral tensor to the default dtype, not
             * float64; a higher-category 0-dim tensor keeps its own type. */
            result = cls == 2 ? (dtype_is_floating(s->dtype[cls]) ? weft_default_dtype()
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
    state_add(&s, 2, weft_scalar_is_integral(v) ? WEFT_I64 : WEFT_F64);
    return state_result(&s);
}
