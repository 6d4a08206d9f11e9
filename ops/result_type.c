/* ops/result_type.c: type promotion, the rule by which an op picks the dtype it computes
 * in: torch.promote_types' lattice, torch.result_type over tensors and scalars, and the
 * dtype sums and products accumulate in. Nothing in the core promotes (copy_ converts to
 * its destination's dtype), so the lattice lives with the ops that use it. */
#include <math.h>

#include "internal.h"

bool weft_scalar_is_integral(double v)
{
    return isfinite(v) && v == trunc(v);
}

int weft_dtype_category(enum weft_dtype dt)
{
    return dtype_category(dt);
}

/* torch's promoteTypes table restricted to our dtypes (c10/core/ScalarType.cpp). */
enum weft_dtype weft_promote_types(enum weft_dtype a, enum weft_dtype b)
{
    if (a == b)
        return a;
    if (a == WEFT_BOOL)
        return b;
    if (b == WEFT_BOOL)
        return a;
    bool fa = dtype_is_floating(a), fb = dtype_is_floating(b);
    if (fa != fb)
        return fa ? a : b;
    if (fa) {
        if ((a == WEFT_F16 && b == WEFT_BF16) || (a == WEFT_BF16 && b == WEFT_F16))
            return WEFT_F32;
        return weft_dtype_size(a) >= weft_dtype_size(b) ? a : b;
    }
    /* Both integral. uint8 with a signed type needs the next signed size up. */
    if (a == WEFT_U8 || b == WEFT_U8) {
        enum weft_dtype other = a == WEFT_U8 ? b : a;
        return other == WEFT_I8 ? WEFT_I16 : other;
    }
    return weft_dtype_size(a) >= weft_dtype_size(b) ? a : b;
}

enum weft_dtype weft_dtype_accumulate(enum weft_dtype dt)
{
    if (dt == WEFT_BOOL || weft_dtype_is_integral(dt))
        return WEFT_I64;
    if (dt == WEFT_F16 || dt == WEFT_BF16)
        return WEFT_F32;
    return dt;
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
