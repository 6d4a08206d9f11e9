/* core/ops_reduce.c: reductions (sum, mean, prod, var, std, all, any, max/min, argmax/argmin)
 * and softmax front ends.
 *
 * A reduction's front end normalises the dims, views the input with the reduced dims
 * last (no data moves), allocates the output of the kept dims and dispatches; keepdim is
 * a view of that output with the reduced dims put back as size 1. */
#include <string.h>

#include "forward.h"

/* Marks the dims a reduction covers (ndims == 0: all of them), each at most once. */
static int reduced_mask(const weft_tensor *t, int ndims, const int *dims, bool *mask)
{
    memset(mask, 0, WEFT_MAX_DIMS * sizeof *mask);
    if (ndims < 0 || (ndims > 0 && !dims))
        return weft_error_set(WEFT_ERR_VALUE, "reduction: invalid dim list (%d dims)", ndims);
    if (ndims == 0) {
        for (int d = 0; d < t->ndim; d++)
            mask[d] = true;
        return 0;
    }
    for (int i = 0; i < ndims; i++) {
        int d = weft_normalize_dim(dims[i], t->ndim);
        if (d < 0)
            return d;
        if (t->ndim == 0)
            continue; /* a 0-dim tensor's dim 0 / -1 reduces nothing */
        if (mask[d])
            return weft_error_set(WEFT_ERR_RUNTIME,
                                  "dim %d appears multiple times in the list of dims", d);
        mask[d] = true;
    }
    return 0;
}

/* The input seen with the reduced dims last, and the shapes of the result. */
struct reduction {
    weft_tensor *in;
    int k;                              /* reduced dims, trailing in `in` */
    int nkept;
    int64_t kept[WEFT_MAX_DIMS];        /* result shape */
    int ndim;
    int64_t keep_shape[WEFT_MAX_DIMS];  /* result shape with keepdim */
};

static int plan_reduction(weft_tensor *t, const bool *mask, struct reduction *r)
{
    int64_t shape[WEFT_MAX_DIMS], stride[WEFT_MAX_DIMS];
    int n = 0;
    for (int d = 0; d < t->ndim; d++)
        if (!mask[d]) {
            shape[n] = r->kept[n] = t->shape[d];
            stride[n++] = t->stride[d];
        }
    r->nkept = n;
    for (int d = 0; d < t->ndim; d++) {
        r->keep_shape[d] = mask[d] ? 1 : t->shape[d];
        if (mask[d]) {
            shape[n] = t->shape[d];
            stride[n++] = t->stride[d];
        }
    }
    r->k = n - r->nkept;
    r->ndim = t->ndim;
    r->in = weft_tensor_alias(t, t->ndim, shape, stride, t->offset);
    return r->in ? 0 : -1;
}

/* out (shaped like the kept dims) with the reduced dims back as size 1, if asked. */
static weft_tensor *keep_dims(weft_tensor *out, const struct reduction *r, bool keepdim)
{
    if (!keepdim || r->k == 0)
        return out;
    return weft_tensor_alias(out, r->ndim, r->keep_shape, NULL, out->offset);
}

/* Runs a single-output reduction inside the caller's scope (results autoreleased). */
static weft_tensor *reduce_in_scope(int op, weft_tensor *t, const bool *mask, bool keepdim,
                                    enum weft_dtype out_dtype, double correction)
{
    struct reduction r;
    if (plan_reduction(t, mask, &r) != 0)
        return NULL;
    weft_tensor *out = weft_empty(r.nkept, r.kept, out_dtype, t->device);
    if (!out)
        return NULL;
    struct weft_op_call call = {.op = op, .nin = 1, .nout = 1};
    call.in[0] = r.in;
    call.out[0] = out;
    call.scalar[0] = correction;
    call.ints[0] = r.k;
    if (weft_dispatch(&call) != 0)
        return NULL;
    return keep_dims(out, &r, keepdim);
}

static weft_tensor *reduce(int op, const char *name, weft_tensor *t, int ndims, const int *dims,
                           bool keepdim, enum weft_dtype out_dtype, double correction)
{
    bool mask[WEFT_MAX_DIMS];
    if (weft_require_strided(t, name) != 0 || reduced_mask(t, ndims, dims, mask) != 0)
        return NULL;
    weft_scope_push();
    weft_tensor *result = weft_tensor_retain(reduce_in_scope(op, t, mask, keepdim, out_dtype,
                                                             correction));
    weft_scope_pop();
    return weft_tensor_finish(result);
}

static enum weft_dtype sum_dtype(enum weft_dtype dt)
{
    return weft_dtype_is_floating(dt) ? dt : WEFT_I64;
}

weft_tensor *weft_fwd_sum(weft_tensor *t, int ndims, const int *dims, bool keepdim)
{
    if (!t)
        return NULL;
    return reduce(WEFT_OP_SUM, "sum", t, ndims, dims, keepdim, sum_dtype(t->dtype), 0);
}

weft_tensor *weft_fwd_prod(weft_tensor *t, int ndims, const int *dims, bool keepdim)
{
    if (!t)
        return NULL;
    return reduce(WEFT_OP_PROD, "prod", t, ndims, dims, keepdim, sum_dtype(t->dtype), 0);
}

weft_tensor *weft_fwd_mean(weft_tensor *t, int ndims, const int *dims, bool keepdim)
{
    if (!t)
        return NULL;
    if (!weft_dtype_is_floating(t->dtype)) {
        weft_error_set(WEFT_ERR_RUNTIME,
                       "mean(): could not infer output dtype. Input dtype must be either a "
                       "floating point or complex dtype. Got: %s",
                       weft_dtype_torch_name(t->dtype));
        return NULL;
    }
    return reduce(WEFT_OP_MEAN, "mean", t, ndims, dims, keepdim, t->dtype, 0);
}

static bool check_var_dtype(const weft_tensor *t)
{
    if (weft_dtype_is_floating(t->dtype))
        return true;
    weft_error_set(WEFT_ERR_RUNTIME, "std and var only support floating point and complex dtypes");
    return false;
}

weft_tensor *weft_fwd_var(weft_tensor *t, int ndims, const int *dims, double correction,
                          bool keepdim)
{
    if (!t || !check_var_dtype(t))
        return NULL;
    return reduce(WEFT_OP_VAR, "var", t, ndims, dims, keepdim, t->dtype, correction);
}

weft_tensor *weft_fwd_std(weft_tensor *t, int ndims, const int *dims, double correction,
                          bool keepdim)
{
    if (!t || !check_var_dtype(t))
        return NULL;
    weft_tensor *v = reduce(WEFT_OP_VAR, "std", t, ndims, dims, keepdim, t->dtype, correction);
    if (v && !weft_fwd_sqrt_(v)) {
        /* v was recorded in the caller's scope if one is open; otherwise it is ours */
        if (weft_scope_depth() == 0)
            weft_tensor_release(v);
        return NULL;
    }
    return v;
}

/* all/any give bool, except of uint8, which PyTorch keeps uint8 (its pre-bool masks). */
static weft_tensor *logical_reduce(int op, const char *name, weft_tensor *t, int ndims,
                                   const int *dims, bool keepdim)
{
    if (!t)
        return NULL;
    if (t->dtype != WEFT_U8)
        return reduce(op, name, t, ndims, dims, keepdim, WEFT_BOOL, 0);
    weft_scope_push();
    weft_tensor *r = reduce(op, name, t, ndims, dims, keepdim, WEFT_BOOL, 0);
    weft_tensor *u = weft_tensor_retain(weft_to_dtype(r, WEFT_U8));
    weft_scope_pop();
    return weft_tensor_finish(u);
}

weft_tensor *weft_all(weft_tensor *t, int ndims, const int *dims, bool keepdim)
{
    return logical_reduce(WEFT_OP_ALL, "all", t, ndims, dims, keepdim);
}

weft_tensor *weft_any(weft_tensor *t, int ndims, const int *dims, bool keepdim)
{
    return logical_reduce(WEFT_OP_ANY, "any", t, ndims, dims, keepdim);
}

static weft_tensor *extreme_all(int op, const char *name, weft_tensor *t)
{
    if (!t)
        return NULL;
    if (weft_tensor_numel(t) == 0) {
        weft_error_set(WEFT_ERR_RUNTIME,
                       "%s(): Expected reduction dim to be specified for input.numel() == 0. "
                       "Specify the reduction dim with the 'dim' argument.",
                       name);
        return NULL;
    }
    return reduce(op, name, t, 0, NULL, false, t->dtype, 0);
}

weft_tensor *weft_fwd_max(weft_tensor *t)
{
    return extreme_all(WEFT_OP_MAX, "max", t);
}

weft_tensor *weft_fwd_min(weft_tensor *t)
{
    return extreme_all(WEFT_OP_MIN, "min", t);
}

/* ---- along one dim, with indices ------------------------------------------------------ */

/* Values (in t's dtype) and/or int64 indices of op along dim; results autoreleased in the
 * current scope. A 0-dim input is reduced as a 1-element vector and stays 0-dim. */
static int extreme_dim_in_scope(int op, const char *name, weft_tensor *t, int dim, bool keepdim,
                                weft_tensor **values, weft_tensor **indices)
{
    int d = weft_normalize_dim(dim, t->ndim);
    if (d < 0)
        return d;
    if (t->ndim > 0 && t->shape[d] == 0)
        return weft_error_set(WEFT_ERR_INDEX,
                              "%s(): Expected reduction dim %d to have non-zero size.", name, d);
    weft_tensor *src = t;
    if (t->ndim == 0) {
        const int64_t one = 1;
        src = weft_tensor_alias(t, 1, &one, &one, t->offset);
        if (!src)
            return weft_error_code();
        keepdim = false;
    }
    bool mask[WEFT_MAX_DIMS] = {false};
    mask[d] = true;
    struct reduction r;
    if (plan_reduction(src, mask, &r) != 0)
        return weft_error_code();
    bool argop = op == WEFT_OP_ARGMAX || op == WEFT_OP_ARGMIN;
    weft_tensor *vals = argop ? NULL : weft_empty(r.nkept, r.kept, t->dtype, t->device);
    weft_tensor *idx = indices || argop ? weft_empty(r.nkept, r.kept, WEFT_I64, t->device) : NULL;
    if ((!argop && !vals) || ((indices || argop) && !idx))
        return weft_error_code();
    struct weft_op_call call = {.op = op, .nin = 1};
    call.in[0] = r.in;
    call.ints[0] = r.k;
    call.out[call.nout++] = argop ? idx : vals;
    if (!argop && idx)
        call.out[call.nout++] = idx;
    if (weft_dispatch(&call) != 0)
        return weft_error_code();
    if (values)
        *values = keep_dims(vals, &r, keepdim);
    if (indices)
        *indices = keep_dims(idx, &r, keepdim);
    return 0;
}

static int extreme_dim(int op, const char *name, weft_tensor *t, int dim, bool keepdim,
                       weft_tensor **values, weft_tensor **indices)
{
    if (values)
        *values = NULL;
    if (indices)
        *indices = NULL;
    if (!t)
        return WEFT_ERR_VALUE;
    if (weft_require_strided(t, name) != 0)
        return weft_error_code();
    weft_tensor *v = NULL, *i = NULL;
    weft_scope_push();
    int rc = extreme_dim_in_scope(op, name, t, dim, keepdim, values ? &v : NULL,
                                  indices ? &i : NULL);
    if (rc == 0) {
        weft_tensor_retain(v);
        weft_tensor_retain(i);
    }
    weft_scope_pop();
    if (rc != 0)
        return rc;
    if (values)
        *values = weft_tensor_finish(v);
    if (indices)
        *indices = weft_tensor_finish(i);
    return 0;
}

int weft_fwd_max_dim(weft_tensor *t, int dim, bool keepdim, weft_tensor **values,
                     weft_tensor **indices)
{
    return extreme_dim(WEFT_OP_MAX, "max", t, dim, keepdim, values, indices);
}

int weft_fwd_min_dim(weft_tensor *t, int dim, bool keepdim, weft_tensor **values,
                     weft_tensor **indices)
{
    return extreme_dim(WEFT_OP_MIN, "min", t, dim, keepdim, values, indices);
}

static weft_tensor *arg_dim(int op, const char *name, weft_tensor *t, int dim, bool keepdim)
{
    weft_tensor *indices = NULL;
    if (!t || extreme_dim(op, name, t, dim, keepdim, NULL, &indices) != 0)
        return NULL;
    return indices;
}

weft_tensor *weft_argmax(weft_tensor *t, int dim, bool keepdim)
{
    return arg_dim(WEFT_OP_ARGMAX, "argmax", t, dim, keepdim);
}

weft_tensor *weft_argmin(weft_tensor *t, int dim, bool keepdim)
{
    return arg_dim(WEFT_OP_ARGMIN, "argmin", t, dim, keepdim);
}

/* Index into the flattened tensor: the reduction of its row-major flattening. */
static weft_tensor *arg_all(int op, const char *name, weft_tensor *t)
{
    if (!t)
        return NULL;
    if (weft_tensor_numel(t) == 0) {
        weft_error_set(WEFT_ERR_RUNTIME,
                       "%s(): Expected reduction dim to be specified for input.numel() == 0.",
                       name);
        return NULL;
    }
    if (weft_require_strided(t, name) != 0)
        return NULL;
    weft_scope_push();
    weft_tensor *result = NULL, *flat = NULL;
    weft_tensor *c = weft_contiguous(t);
    if (c) {
        int64_t n = weft_tensor_numel(c), one = 1;
        flat = weft_tensor_alias(c, 1, &n, &one, c->offset);
    }
    if (flat && extreme_dim_in_scope(op, name, flat, 0, false, NULL, &result) == 0)
        weft_tensor_retain(result);
    else
        result = NULL;
    weft_scope_pop();
    return weft_tensor_finish(result);
}

weft_tensor *weft_argmax_all(weft_tensor *t)
{
    return arg_all(WEFT_OP_ARGMAX, "argmax", t);
}

weft_tensor *weft_argmin_all(weft_tensor *t)
{
    return arg_all(WEFT_OP_ARGMIN, "argmin", t);
}

/* ---- softmax ------------------------------------------------------------------------------ */

static weft_tensor *softmax_in_scope(int op, weft_tensor *t, int d)
{
    weft_tensor *out = weft_empty(t->ndim, t->shape, t->dtype, t->device);
    if (!out)
        return NULL;
    weft_tensor *in = t, *dst = out;
    if (t->ndim == 0) { /* a single element: a line of length 1 */
        const int64_t one = 1;
        in = weft_tensor_alias(t, 1, &one, &one, t->offset);
        dst = weft_tensor_alias(out, 1, &one, &one, out->offset);
        if (!in || !dst)
            return NULL;
    }
    struct weft_op_call call = {.op = op, .nin = 1, .nout = 1};
    call.in[0] = in;
    call.out[0] = dst;
    call.ints[0] = d;
    return weft_dispatch(&call) == 0 ? out : NULL;
}

static weft_tensor *softmax_common(int op, const char *name, weft_tensor *t, int dim)
{
    if (!t)
        return NULL;
    int d = weft_normalize_dim(dim, t->ndim);
    if (d < 0 || weft_require_strided(t, name) != 0)
        return NULL;
    if (!weft_dtype_is_floating(t->dtype)) {
        bool last = t->ndim == 0 || d == t->ndim - 1;
        weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "\"%s%s_kernel_impl\" not implemented for '%s'",
                       name, last ? "_lastdim" : "", weft_dtype_torch_name(t->dtype));
        return NULL;
    }
    weft_scope_push();
    weft_tensor *result = weft_tensor_retain(softmax_in_scope(op, t, d));
    weft_scope_pop();
    return weft_tensor_finish(result);
}

weft_tensor *weft_fwd_softmax(weft_tensor *t, int dim)
{
    return softmax_common(WEFT_OP_SOFTMAX, "softmax", t, dim);
}

weft_tensor *weft_fwd_log_softmax(weft_tensor *t, int dim)
{
    return softmax_common(WEFT_OP_LOG_SOFTMAX, "log_softmax", t, dim);
}
