/* ops/internal.h: what the op layer's files share (not installed, not ABI).
 *
 * Each family's file holds its forward front ends and its backward formulas. The public
 * weft_<op> of a differentiable op runs its forward with grad mode off (WEFT_NO_GRAD) and
 * then records the node, so a forward may call public ops freely: nothing is recorded
 * twice. The op layer reads the core through its public headers only. */
#ifndef WEFT_OPS_INTERNAL_H
#define WEFT_OPS_INTERNAL_H

#include "weft.h"
#include "weft/kernel.h"
#include "weft/op_table.h"

/* Functions the op layer's files share, hidden from other libraries. */
#define WEFT_INTERNAL __attribute__((visibility("hidden")))
/* Hands a freshly created tensor to the innermost scope; returns it. */
#define weft_tensor_finish(t) weft_autorelease(t)
/* weft_dtype_is_floating and weft_dtype_category (0 bool, 1 integral, 2 floating) without
 * the call into libweft: every op's type promotion asks. */
static inline bool dtype_is_floating(enum weft_dtype dt)
{
    return (WEFT_DTYPE_BIT(dt) & WEFT_DTYPES_FLOATING) != 0;
}

static inline int dtype_category(enum weft_dtype dt)
{
    return dt == WEFT_BOOL ? 0 : dtype_is_floating(dt) ? 2 : 1;
}

/* weft_tensor_numel without the call into libweft, for hot front ends. */
static inline int64_t numel_of(const weft_tensor *t)
{
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= t->shape[d];
    return n;
}

/* ---- the op table's rows (weft/op_table.h) ---------------------------------------------
 * The composite rows (no kernel) get ids past the kernels': they index ops_rows and are
 * never dispatched. */
enum ops_composite_id {
    OPS_COMPOSITE_BEFORE_FIRST_ = WEFT_OP_BUILTIN_COUNT - 1,
#define OPS_COMPOSITE_ENUM(ID, ...) WEFT_OP_##ID,
    WEFT_OPS_COMPOSITE(OPS_COMPOSITE_ENUM)
#undef OPS_COMPOSITE_ENUM
    OPS_ROW_COUNT
};

/* Each row's autocast policy as a constant, OPS_AUTOCAST_<ID> (front ends test it at
 * compile time: an op that runs as given pays nothing for autocast). */
enum ops_autocast {
#define OPS_AUTOCAST_ENUM(ID, name, DTYPES, AUTOCAST, ...) OPS_AUTOCAST_##ID = WEFT_AUTOCAST_##AUTOCAST,
    WEFT_OP_TABLE(OPS_AUTOCAST_ENUM) WEFT_OPS_COMPOSITE(OPS_AUTOCAST_ENUM)
#undef OPS_AUTOCAST_ENUM
};

struct ops_row {
    const char *name;
    const char *grad_fn; /* NULL: not differentiable */
    enum weft_autocast_policy autocast;
};
/* Every row by id (op_table.c). */
WEFT_INTERNAL extern const struct ops_row ops_rows[OPS_ROW_COUNT];
#define OP_GRAD_FN(ID) (ops_rows[WEFT_OP_##ID].grad_fn)

/* For a front end: under autocast, when row ID casts, returns the op run on its inputs
 * cast by the row's policy (weft/autocast_policy.h). Costs nothing for a row that runs as
 * given. */
#define OP_AUTOCAST_RETURN(ID, n, inputs, call)                                               \
    do {                                                                                      \
        if ((int)OPS_AUTOCAST_##ID != (int)WEFT_AUTOCAST_PROMOTE)                             \
            WEFT_AUTOCAST_RETURN(ops_rows[WEFT_OP_##ID].name, n, inputs, call);               \
    } while (0)

/* The id of a named kernel (weft/kernel.h), registered on first use and cached in
 * *cached (-1 at first); threads may race to set it, weft_op_register gives them all the
 * same id. */
static inline int ops_named_op(int *cached, const char *name)
{
    int op = __atomic_load_n(cached, __ATOMIC_RELAXED);
    if (op < 0) {
        op = weft_op_register(name);
        __atomic_store_n(cached, op, __ATOMIC_RELAXED);
    }
    return op;
}

/* A 0-dim tensor seen as [1] (kernels that walk a dim), others as they are. */
static inline weft_tensor *ops_as_vector(weft_tensor *t)
{
    if (!t || t->ndim > 0)
        return t;
    const int64_t one = 1;
    return weft_tensor_alias(t, 1, &one, &one, t->offset);
}

/* ---- helpers the families share ----------------------------------------------------------- */

/* A copy of t (no history) for formulas that need an in-place op's original value
 * (elementwise.c). */
WEFT_INTERNAL weft_tensor *original_value(weft_tensor *t);
/* g where keep, else 0. */
static inline weft_tensor *masked(weft_tensor *keep, weft_tensor *g)
{
    return weft_where_scalar(keep, g, 0);
}

/* A double scalar counts as an integer scalar for type promotion when finite and whole
 * (weft/ops.h), so int_tensor + 2 stays integral (result_type.c). */
WEFT_INTERNAL bool weft_scalar_is_integral(double v);
/* A named binary op (weft/kernel.h's binary contract) with add's type promotion
 * (binary.c; floor_divide and remainder). */
WEFT_INTERNAL weft_tensor *weft_fwd_binary_named(int op, weft_tensor *a, weft_tensor *b);
WEFT_INTERNAL weft_tensor *weft_fwd_binary_named_scalar(int op, weft_tensor *a, double s);
/* scatter's shape rules (index.c): same ndim as self and src, the index no larger than
 * src anywhere nor than self outside dim d; 0 or an error in PyTorch's words. */
WEFT_INTERNAL int weft_scatter_shape_check(const weft_tensor *t, int d, const weft_tensor *index,
                                           const weft_tensor *src);

/* Writes r, an op's out-of-place result computed from t, into t (no history; the caller
 * records the in-place node), after PyTorch's checks of an in-place output: r's dtype can
 * be cast to t's, r has t's shape, t has no expanded dim. 0 or negative (inplace.c). */
WEFT_INTERNAL int ops_write_result_(weft_tensor *t, weft_tensor *r);

/* A (values, indices) result handed out (reduce.c): on rc == 0 each to its pointer, or
 * discarded where the caller passed NULL; on an error both discarded and rc returned. */
WEFT_INTERNAL int weft_ops_hand_out_pair(int rc, weft_tensor *v, weft_tensor *i,
                                         weft_tensor **values, weft_tensor **indices);

#endif
