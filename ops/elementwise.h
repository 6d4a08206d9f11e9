/* ops/elementwise.h: the drivers the elementwise front ends share (elementwise.c).
 *
 * An op decides its computation dtype ct and result dtype rt, fills a weft_op_call with
 * its id and scalars, and hands it to a driver, which converts and broadcasts the inputs,
 * allocates the output (laid out as PyTorch's TensorIterator lays it out) and dispatches.
 *
 * Ownership. The common case (inputs already of ct and of the output's shape) allocates
 * the output, which records it where the caller expects, and dispatches: no scope, no
 * temporaries. Anything that makes temporaries (conversions, broadcast views, results
 * copied back for an in-place op) runs inside a scope of its own, and the result leaves
 * it with one reference that goes to the caller's scope. */
#ifndef WEFT_OPS_ELEMENTWISE_H
#define WEFT_OPS_ELEMENTWISE_H

#include "internal.h"

/* One tensor input (plus the call's scalars): out = f(t) computed in ct, of dtype rt. */
WEFT_INTERNAL weft_tensor *ew_map1(struct weft_op_call *call, weft_tensor *t, enum weft_dtype ct,
                                   enum weft_dtype rt);
/* In place: the result goes back into t (checked: rt must fit t, no expanded dims). */
WEFT_INTERNAL weft_tensor *ew_map1_(struct weft_op_call *call, weft_tensor *t, enum weft_dtype ct,
                                    enum weft_dtype rt);
/* Two tensors broadcast together: out = f(a, b) in ct, of dtype rt. */
WEFT_INTERNAL weft_tensor *ew_map2(struct weft_op_call *call, weft_tensor *a, weft_tensor *b,
                                   enum weft_dtype ct, enum weft_dtype rt);
/* In place: a op= b, b broadcast to a's shape. */
WEFT_INTERNAL weft_tensor *ew_map2_(struct weft_op_call *call, weft_tensor *a, weft_tensor *b,
                                    enum weft_dtype ct, enum weft_dtype rt);
/* A fresh output of [ndim, shape] and dtype rt on dev laid out over the inputs ins (their
 * layout before conversion), then the kernel; strided_ins: every input in call is strided
 * (the dispatch need not check). The output is already finished. */
WEFT_INTERNAL weft_tensor *ew_run_new(struct weft_op_call *call, int nins,
                                      const weft_tensor *const *ins, int ndim,
                                      const int64_t *shape, enum weft_dtype rt, weft_device dev,
                                      bool strided_ins);
/* t converted to dt and expanded to shape; new references in the current scope. */
WEFT_INTERNAL weft_tensor *ew_prepare(weft_tensor *t, enum weft_dtype dt, int ndim,
                                      const int64_t *shape);
/* Ends a scoped slow path: result survives the pop and goes to the caller's scope. */
WEFT_INTERNAL weft_tensor *ew_leave_scope(weft_tensor *result);
/* Ends our hold on a tensor a weft function returned (the scope's, while one is open). */
WEFT_INTERNAL void ew_drop(weft_tensor *t);
WEFT_INTERNAL bool ew_same_shape(const weft_tensor *t, int ndim, const int64_t *shape);
/* torch.can_cast for an in-place result: 0 or PyTorch's "result type Float can't be cast
 * to the desired output type Long". */
WEFT_INTERNAL int ew_check_cast(enum weft_dtype result, enum weft_dtype out);
/* 0 unless an in-place op would write through an expanded (stride 0) dim. */
WEFT_INTERNAL int ew_check_internal_overlap(const weft_tensor *t);
/* 0 unless in overlaps out other than as out itself (a.add_(a.t())). */
WEFT_INTERNAL int ew_check_partial_overlap(const weft_tensor *out, const weft_tensor *in);
/* 0 when out has the broadcast shape, else PyTorch's "output with shape ... doesn't match
 * the broadcast shape ...". */
WEFT_INTERNAL int ew_check_broadcast_to(const weft_tensor *out, int ndim, const int64_t *shape);
/* weft_dispatch; all_strided: the caller saw every operand strided. */
WEFT_INTERNAL int ew_dispatch(const struct weft_op_call *call, bool all_strided);

#endif
