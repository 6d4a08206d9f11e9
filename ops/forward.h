/* core/forward.h: the forward-only op front ends (ops_*.c, view.c, copy.c).
 *
 * The public weft_<op> of every differentiable op is an autograd wrapper
 * (autograd_ops.c): it calls weft_fwd_<op> with grad mode off and then records the
 * node. Forward front ends may call public ops freely: inside a wrapper grad mode is off,
 * so nothing is recorded twice. */
#ifndef WEFT_CORE_FORWARD_H
#define WEFT_CORE_FORWARD_H

#include "internal.h"
#include "weft/ops.h"

/* Unary ops whose public versions record a node (logical_not is not differentiable). */
#define WEFT_DIFF_UNARY_OPS(X)                                                                \
    X(neg, NEG) X(abs, ABS) X(sign, SIGN) X(exp, EXP) X(expm1, EXPM1) X(log, LOG)            \
    X(log1p, LOG1P) X(sqrt, SQRT) X(rsqrt, RSQRT) X(reciprocal, RECIPROCAL) X(sin, SIN)       \
    X(cos, COS) X(tanh, TANH) X(sigmoid, SIGMOID) X(relu, RELU) X(gelu, GELU) X(silu, SILU)  \
    X(erf, ERF) X(floor, FLOOR) X(ceil, CEIL) X(round, ROUND) X(trunc, TRUNC)

#define WEFT_DIFF_BINARY_OPS(X)                                                               \
    X(add, ADD) X(sub, SUB) X(mul, MUL) X(div, DIV) X(pow, POW) X(maximum, MAXIMUM)          \
    X(minimum, MINIMUM)

#define WEFT_FWD_UNARY(name, ID)                                                              \
    WEFT_INTERNAL weft_tensor *weft_fwd_##name(weft_tensor *t);                               \
    WEFT_INTERNAL weft_tensor *weft_fwd_##name##_(weft_tensor *t);
WEFT_DIFF_UNARY_OPS(WEFT_FWD_UNARY)
#undef WEFT_FWD_UNARY

#define WEFT_FWD_BINARY(name, ID)                                                             \
    WEFT_INTERNAL weft_tensor *weft_fwd_##name(weft_tensor *a, weft_tensor *b);               \
    WEFT_INTERNAL weft_tensor *weft_fwd_##name##_(weft_tensor *a, weft_tensor *b);            \
    WEFT_INTERNAL weft_tensor *weft_fwd_##name##_scalar(weft_tensor *a, double b);            \
    WEFT_INTERNAL weft_tensor *weft_fwd_##name##_scalar_(weft_tensor *a, double b);
WEFT_DIFF_BINARY_OPS(WEFT_FWD_BINARY)
#undef WEFT_FWD_BINARY

/* Non-differentiable elementwise ops: the public versions only forward. */
WEFT_INTERNAL weft_tensor *weft_fwd_logical_not(weft_tensor *t);
WEFT_INTERNAL weft_tensor *weft_fwd_logical_not_(weft_tensor *t);
#define WEFT_NONDIFF_BINARY_OPS(X)                                                            \
    X(eq) X(ne) X(lt) X(le) X(gt) X(ge) X(logical_and) X(logical_or)
#define WEFT_FWD_NONDIFF_BINARY(name)                                                         \
    WEFT_INTERNAL weft_tensor *weft_fwd_##name(weft_tensor *a, weft_tensor *b);               \
    WEFT_INTERNAL weft_tensor *weft_fwd_##name##_(weft_tensor *a, weft_tensor *b);            \
    WEFT_INTERNAL weft_tensor *weft_fwd_##name##_scalar(weft_tensor *a, double b);            \
    WEFT_INTERNAL weft_tensor *weft_fwd_##name##_scalar_(weft_tensor *a, double b);
WEFT_NONDIFF_BINARY_OPS(WEFT_FWD_NONDIFF_BINARY)
#undef WEFT_FWD_NONDIFF_BINARY

/* A named binary op (weft/kernel.h's binary contract) with add's type promotion. */
WEFT_INTERNAL weft_tensor *weft_fwd_binary_named(int op, weft_tensor *a, weft_tensor *b);
WEFT_INTERNAL weft_tensor *weft_fwd_binary_named_scalar(int op, weft_tensor *a, double s);
WEFT_INTERNAL weft_tensor *weft_fwd_rsub_scalar(weft_tensor *t, double s);
WEFT_INTERNAL weft_tensor *weft_fwd_rdiv_scalar(weft_tensor *t, double s);
WEFT_INTERNAL weft_tensor *weft_fwd_where(weft_tensor *cond, weft_tensor *a, weft_tensor *b);
WEFT_INTERNAL weft_tensor *weft_fwd_where_scalar(weft_tensor *cond, weft_tensor *a, double b);
WEFT_INTERNAL weft_tensor *weft_fwd_clamp(weft_tensor *t, double min, double max);
WEFT_INTERNAL weft_tensor *weft_fwd_clamp_(weft_tensor *t, double min, double max);
WEFT_INTERNAL weft_tensor *weft_fwd_masked_fill(weft_tensor *t, weft_tensor *mask, double value);
WEFT_INTERNAL weft_tensor *weft_fwd_masked_fill_(weft_tensor *t, weft_tensor *mask, double value);

WEFT_INTERNAL weft_tensor *weft_fwd_sum(weft_tensor *t, int ndims, const int *dims, bool keepdim);
WEFT_INTERNAL weft_tensor *weft_fwd_mean(weft_tensor *t, int ndims, const int *dims, bool keepdim);
WEFT_INTERNAL weft_tensor *weft_fwd_prod(weft_tensor *t, int ndims, const int *dims, bool keepdim);
WEFT_INTERNAL weft_tensor *weft_fwd_var(weft_tensor *t, int ndims, const int *dims,
                                        double correction, bool keepdim);
WEFT_INTERNAL weft_tensor *weft_fwd_std(weft_tensor *t, int ndims, const int *dims,
                                        double correction, bool keepdim);
WEFT_INTERNAL weft_tensor *weft_fwd_max(weft_tensor *t);
WEFT_INTERNAL weft_tensor *weft_fwd_min(weft_tensor *t);
WEFT_INTERNAL int weft_fwd_max_dim(weft_tensor *t, int dim, bool keepdim, weft_tensor **values,
                                   weft_tensor **indices);
WEFT_INTERNAL int weft_fwd_min_dim(weft_tensor *t, int dim, bool keepdim, weft_tensor **values,
                                   weft_tensor **indices);
WEFT_INTERNAL weft_tensor *weft_fwd_softmax(weft_tensor *t, int dim);
WEFT_INTERNAL weft_tensor *weft_fwd_log_softmax(weft_tensor *t, int dim);
WEFT_INTERNAL weft_tensor *weft_fwd_matmul(weft_tensor *a, weft_tensor *b);
WEFT_INTERNAL weft_tensor *weft_fwd_cat(int n, weft_tensor *const *tensors, int dim);
WEFT_INTERNAL weft_tensor *weft_fwd_stack(int n, weft_tensor *const *tensors, int dim);
WEFT_INTERNAL weft_tensor *weft_fwd_index_select(weft_tensor *t, int dim, weft_tensor *index);
WEFT_INTERNAL weft_tensor *weft_fwd_gather(weft_tensor *t, int dim, weft_tensor *index);
/* scatter's shape rules (ops_index.c): same ndim as self and src, the index no larger than
 * src anywhere nor than self outside dim d; 0 or an error in PyTorch's words. */
WEFT_INTERNAL int weft_scatter_shape_check(const weft_tensor *t, int d, const weft_tensor *index,
                                           const weft_tensor *src);
WEFT_INTERNAL weft_tensor *weft_fwd_scatter_add(weft_tensor *t, int dim, weft_tensor *index,
                                                weft_tensor *src);
WEFT_INTERNAL weft_tensor *weft_fwd_scatter_add_(weft_tensor *t, int dim, weft_tensor *index,
                                                 weft_tensor *src);

WEFT_INTERNAL weft_tensor *weft_fwd_view(weft_tensor *t, int ndim, const int64_t *shape);
WEFT_INTERNAL weft_tensor *weft_fwd_reshape(weft_tensor *t, int ndim, const int64_t *shape);
WEFT_INTERNAL weft_tensor *weft_fwd_transpose(weft_tensor *t, int dim0, int dim1);
WEFT_INTERNAL weft_tensor *weft_fwd_t(weft_tensor *t);
WEFT_INTERNAL weft_tensor *weft_fwd_permute(weft_tensor *t, int ndim, const int *dims);
WEFT_INTERNAL weft_tensor *weft_fwd_narrow(weft_tensor *t, int dim, int64_t start, int64_t length);
WEFT_INTERNAL weft_tensor *weft_fwd_slice(weft_tensor *t, int dim, int64_t start, int64_t end,
                                          int64_t step);
WEFT_INTERNAL weft_tensor *weft_fwd_select(weft_tensor *t, int dim, int64_t index);
WEFT_INTERNAL weft_tensor *weft_fwd_expand(weft_tensor *t, int ndim, const int64_t *shape);
WEFT_INTERNAL weft_tensor *weft_fwd_squeeze(weft_tensor *t);
WEFT_INTERNAL weft_tensor *weft_fwd_squeeze_dim(weft_tensor *t, int dim);
WEFT_INTERNAL weft_tensor *weft_fwd_unsqueeze(weft_tensor *t, int dim);
WEFT_INTERNAL weft_tensor *weft_fwd_flatten(weft_tensor *t, int start_dim, int end_dim);
WEFT_INTERNAL weft_tensor *weft_fwd_unflatten(weft_tensor *t, int dim, int ndim,
                                              const int64_t *sizes);
WEFT_INTERNAL weft_tensor *weft_fwd_as_strided(weft_tensor *t, int ndim, const int64_t *shape,
                                               const int64_t *stride, int64_t offset);

WEFT_INTERNAL weft_tensor *weft_fwd_contiguous(weft_tensor *t);
WEFT_INTERNAL weft_tensor *weft_fwd_clone(weft_tensor *t);
WEFT_INTERNAL int weft_fwd_copy_nonblocking_(weft_tensor *dst, const weft_tensor *src,
                                             bool non_blocking);
WEFT_INTERNAL weft_tensor *weft_fwd_to(weft_tensor *t, weft_device dev, enum weft_dtype dtype,
                                       bool non_blocking);

#endif
