/* ops/reduce.c: the reductions (sum, mean, prod, var, std, all, any, max/min,
 * argmax/argmin), forward and backward (weft/op_table.h's WEFT_OPS_REDUCE and STD).
 *
 * A reduction's front end normalises the dims, views the input with the reduced dims
 * last (no data moves), allocates the output of the kept dims and dispatches; keepdim is
 * a view of that output with the reduced dims put back as size 1. */
#include <string.h>

#include "internal.h"

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

static weft_tensor *sum_forward(weft_tensor *t, int ndims, const int *dims, bool keepdim)
{
    if (!t)
        return NULL;
    return reduce(WEFT_OP_SUM, "sum", t, ndims, dims, keepdim, sum_dtype(t->dtype), 0);
}

static weft_tensor *prod_forward(weft_tensor *t, int ndims, const int *dims, bool keepdim)
{
    if (!t)
        return NULL;
    return reduce(WEFT_OP_PROD, "prod", t, ndims, dims, keepdim, sum_dtype(t->dtype), 0);
}

static weft_tensor *mean_forward(weft_tensor *t, int ndims, const int *dims, bool keepdim)
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

static weft_tensor *var_forward(weft_tensor *t, int ndims, const int *dims, double correction,
                          bool keepdim)
{
    if (!t || !check_var_dtype(t))
        return NULL;
    return reduce(WEFT_OP_VAR, "var", t, ndims, dims, keepdim, t->dtype, correction);
}

static weft_tensor *std_forward(weft_tensor *t, int ndims, const int *dims, double correction,
                          bool keepdim)
{
    if (!t || !check_var_dtype(t))
        return NULL;
    weft_tensor *v = reduce(WEFT_OP_VAR, "std", t, ndims, dims, keepdim, t->dtype, correction);
    if (v && !weft_sqrt_(v)) {
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

static weft_tensor *max_forward(weft_tensor *t)
{
    return extreme_all(WEFT_OP_MAX, "max", t);
}

static weft_tensor *min_forward(weft_tensor *t)
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

static int max_dim_forward(weft_tensor *t, int dim, bool keepdim, weft_tensor **values,
                     weft_tensor **indices)
{
    return extreme_dim(WEFT_OP_MAX, "max", t, dim, keepdim, values, indices);
}

static int min_dim_forward(weft_tensor *t, int dim, bool keepdim, weft_tensor **values,
                     weft_tensor **indices)
{
    return extreme_dim(WEFT_OP_MIN, "min", t, dim, keepdim, values, indices);
}

static weft_tensor *arg_dim(int op, const char *name, weft_tensor *t, int dim, bool keepdim)
{
    weft_tensor *indices = NULL;
    /* PyTorch sizes an empty input's result before its dtype dispatch, which has no bool
     * kernel: the same checks and shape through an empty uint8 input */
    bool empty_bool = t && t->dtype == WEFT_BOOL && weft_tensor_numel(t) == 0;
    weft_tensor *in = empty_bool ? weft_to_dtype(t, WEFT_U8) : t;
    if (!in || extreme_dim(op, name, in, dim, keepdim, NULL, &indices) != 0)
        indices = NULL;
    if (empty_bool)
        weft_tensor_discard(in);
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

/* ---- backward and the public ops ------------------------------------------------------------
 * ints[0] = number of reduced dims (0: all), ints[1..] the dims (normalised);
 * scalars[0] = correction for var/std. Saved: 0 input, 1 output. */

/* Shape of input i with the dims listed in the node's ints[1..ndims] set to 1 (the
 * keepdim shape of a reduction). */
static int keepdim_shape(struct weft_node *node, int64_t *shape)
{
    int ndim = weft_node_input_ndim(node, 0);
    memcpy(shape, weft_node_input_shape(node, 0), (size_t)ndim * sizeof *shape);
    int64_t *ints = weft_node_ints(node);
    if (ints[0] == 0)
        for (int d = 0; d < ndim; d++)
            shape[d] = 1;
    for (int i = 0; i < ints[0]; i++)
        shape[ints[1 + i]] = 1;
    return ndim;
}

/* g reshaped to the keepdim shape, then expanded to the input's shape. */
static weft_tensor *expand_reduced(struct weft_node *node, weft_tensor *g)
{
    int64_t shape[WEFT_MAX_DIMS];
    int ndim = keepdim_shape(node, shape);
    return weft_expand(weft_reshape(g, ndim, shape), ndim, weft_node_input_shape(node, 0));
}

static int64_t reduced_count(struct weft_node *node)
{
    int ndim = weft_node_input_ndim(node, 0);
    const int64_t *shape = weft_node_input_shape(node, 0);
    int64_t *ints = weft_node_ints(node), n = 1;
    if (ints[0] == 0) {
        for (int d = 0; d < ndim; d++)
            n *= shape[d];
        return n;
    }
    for (int i = 0; i < ints[0]; i++)
        n *= shape[ints[1 + i]];
    return n;
}

/* Stores normalised, deduplicated reduction dims in ints[0] (count) and ints[1..]. */
static void store_dims(struct weft_node *node, int ndim, int ndims, const int *dims)
{
    int64_t *ints = weft_node_ints(node);
    ints[0] = 0;
    for (int i = 0; i < ndims && i < 15; i++) {
        int d = dims[i] < 0 ? dims[i] + ndim : dims[i];
        ints[1 + ints[0]++] = d;
    }
}

enum reduce_kind { R_SUM, R_MEAN, R_PROD, R_VAR, R_STD, R_AMAX };

static weft_tensor *prod_grad(weft_tensor *x, weft_tensor *g_full, struct weft_node *node,
                              weft_tensor *out_full)
{
    /* Without zeros: prod / x. With zeros: only a lone zero in its slice gets the product
     * of the others; everything else in that slice gets 0. */
    int nd = (int)weft_node_ints(node)[0];
    int dims[WEFT_MAX_DIMS];
    for (int i = 0; i < nd; i++)
        dims[i] = (int)weft_node_ints(node)[1 + i];
    weft_tensor *is_zero = weft_eq_scalar(x, 0);
    weft_tensor *zeros_in_slice = weft_expand_as(weft_sum(is_zero, nd, dims, true), x);
    weft_tensor *others = weft_expand_as(weft_prod(weft_masked_fill(x, is_zero, 1), nd, dims, true), x);
    weft_tensor *no_zero = weft_div(out_full, x);
    weft_tensor *lone = weft_where_scalar(weft_logical_and(is_zero, weft_eq_scalar(zeros_in_slice, 1)),
                                          others, 0);
    weft_tensor *grad = weft_where(weft_eq_scalar(zeros_in_slice, 0), no_zero, lone);
    return weft_mul(g_full, grad);
}

static int reduce_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                           weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0];
    if (!g)
        return 0;
    weft_tensor *x = weft_node_saved(node, 0), *out = weft_node_saved(node, 1);
    weft_tensor *g_full = expand_reduced(node, g);
    int nd = (int)weft_node_ints(node)[0];
    int dims[WEFT_MAX_DIMS];
    for (int i = 0; i < nd; i++)
        dims[i] = (int)weft_node_ints(node)[1 + i];
    double correction = weft_node_scalars(node)[0];
    double n = (double)reduced_count(node);
    weft_tensor *r = NULL;
    switch ((enum reduce_kind)weft_node_ints(node)[15]) {
    case R_SUM: r = g_full; break;
    case R_MEAN: r = weft_div_scalar(g_full, n); break;
    case R_PROD: r = prod_grad(x, g_full, node, expand_reduced(node, out)); break;
    case R_VAR:
    case R_STD: {
        weft_tensor *centered = weft_sub(x, weft_mean(x, nd, dims, true));
        double denom = n - correction > 0 ? n - correction : 0;
        r = weft_mul(g_full, weft_mul_scalar(centered, 2.0 / denom));
        if (weft_node_ints(node)[15] == R_STD) { /* d std = d var / (2 std) */
            weft_tensor *std = expand_reduced(node, out);
            /* a constant input: 0 / 0, which PyTorch's std_backward masks to 0 */
            r = masked(weft_ne_scalar(std, 0), weft_div(r, weft_mul_scalar(std, 2)));
        }
        break;
    }
    case R_AMAX: {
        /* max()/min() over everything, amax/amin over dims: ties share the gradient
         * evenly, as PyTorch. */
        weft_tensor *hits = weft_to_dtype(weft_eq(x, expand_reduced(node, out)), g->dtype);
        r = weft_div(weft_mul(g_full, hits), weft_sum(hits, nd, dims, true));
        break;
    }
    }
    grad_inputs[0] = r;
    return r ? 0 : weft_error_code();
}

/* The rows' names, by kind (weft/op_table.h). */
static const char *reduce_name(enum reduce_kind kind)
{
    switch (kind) {
    case R_SUM: return OP_GRAD_FN(SUM);
    case R_MEAN: return OP_GRAD_FN(MEAN);
    case R_PROD: return OP_GRAD_FN(PROD);
    case R_VAR: return OP_GRAD_FN(VAR);
    case R_STD: return OP_GRAD_FN(STD);
    case R_AMAX: return OP_GRAD_FN(MAX);
    }
    return NULL;
}

/* `name` overrides the table (min's node); NULL keeps it. PyTorch names the overload:
 * sum() is SumBackward0, sum(dim) and sum((), keepdim=True) SumBackward1. */
static weft_tensor *record_reduce(enum reduce_kind kind, const char *name, weft_tensor *in,
                                  int ndims, const int *dims, bool keepdim, double correction,
                                  weft_tensor *out)
{
    if (!name)
        name = reduce_name(kind);
    if (ndims == 0 && !keepdim && (kind == R_SUM || kind == R_MEAN || kind == R_PROD))
        name = kind == R_SUM ? "SumBackward0" : kind == R_MEAN ? "MeanBackward0" : "ProdBackward0";
    struct weft_node *node = weft_node_create(name, reduce_backward, 1, &in, 2);
    if (!node || !out)
        return weft_node_finish1(node, out);
    store_dims(node, in->ndim, ndims, dims);
    weft_node_ints(node)[15] = kind;
    weft_node_scalars(node)[0] = correction;
    int rc = 0;
    if (kind != R_SUM && kind != R_MEAN)
        rc = weft_node_save(node, 0, in);
    if (rc == 0 && (kind == R_PROD || kind == R_STD || kind == R_AMAX))
        rc = weft_node_save_output(node, 1, out, 0);
    if (rc != 0) {
        weft_node_abandon(node);
        return weft_tensor_discard(out);
    }
    return weft_node_finish1(node, out);
}

#define REDUCE_WRAPPER(name, ID, KIND)                                                            \
    weft_tensor *weft_##name(weft_tensor *t, int ndims, const int *dims, bool keepdim)        \
    {                                                                                         \
        OP_AUTOCAST_RETURN(ID, 1, &t, weft_##name(t, ndims, dims, keepdim));                         \
        bool rec = weft_autograd_needed_inline(1, &t);                                               \
        weft_tensor *out = WEFT_NO_GRAD(rec, name##_forward(t, ndims, dims, keepdim));            \
        return rec ? record_reduce(KIND, NULL, t, ndims, dims, keepdim, 0, out) : out;                       \
    }
REDUCE_WRAPPER(sum, SUM, R_SUM)
REDUCE_WRAPPER(mean, MEAN, R_MEAN)
REDUCE_WRAPPER(prod, PROD, R_PROD)
#undef REDUCE_WRAPPER

weft_tensor *weft_var(weft_tensor *t, int ndims, const int *dims, double correction, bool keepdim)
{
    bool rec = weft_autograd_needed_inline(1, &t);
    weft_tensor *out = WEFT_NO_GRAD(rec, var_forward(t, ndims, dims, correction, keepdim));
    return rec ? record_reduce(R_VAR, NULL, t, ndims, dims, keepdim, correction, out) : out;
}

weft_tensor *weft_std(weft_tensor *t, int ndims, const int *dims, double correction, bool keepdim)
{
    bool rec = weft_autograd_needed_inline(1, &t);
    weft_tensor *out = WEFT_NO_GRAD(rec, std_forward(t, ndims, dims, correction, keepdim));
    return rec ? record_reduce(R_STD, NULL, t, ndims, dims, keepdim, correction, out) : out;
}

weft_tensor *weft_max(weft_tensor *t)
{
    bool rec = weft_autograd_needed_inline(1, &t);
    weft_tensor *out = WEFT_NO_GRAD(rec, max_forward(t));
    return rec ? record_reduce(R_AMAX, OP_GRAD_FN(MAX), t, 0, NULL, false, 0, out) : out;
}

weft_tensor *weft_min(weft_tensor *t)
{
    bool rec = weft_autograd_needed_inline(1, &t);
    weft_tensor *out = WEFT_NO_GRAD(rec, min_forward(t));
    return rec ? record_reduce(R_AMAX, OP_GRAD_FN(MIN), t, 0, NULL, false, 0, out) : out;
}

/* max_dim/min_dim: the gradient goes to the selected index. Saved: 0 indices. */
static int select_dim_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                               weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0], *idx = weft_node_saved(node, 0);
    if (!g)
        return 0;
    int dim = (int)weft_node_ints(node)[0];
    bool keepdim = weft_node_ints(node)[1] != 0;
    if (!keepdim && weft_node_input_ndim(node, 0) > 0) {
        g = weft_unsqueeze(g, dim);
        idx = weft_unsqueeze(idx, dim);
    }
    weft_tensor *zeros = weft_zeros(weft_node_input_ndim(node, 0), weft_node_input_shape(node, 0),
                                    g ? g->dtype : WEFT_F32, g ? g->device : WEFT_CPU);
    grad_inputs[0] = weft_scatter_add(zeros, dim, idx, g);
    return grad_inputs[0] ? 0 : weft_error_code();
}

static int select_dim_wrapper(bool is_max, weft_tensor *t, int dim, bool keepdim,
                              weft_tensor **values, weft_tensor **indices)
{
    bool rec = weft_autograd_needed_inline(1, &t);
    weft_tensor *v = NULL, *i = NULL;
    int rc = WEFT_NO_GRAD(rec, is_max ? max_dim_forward(t, dim, keepdim, &v, &i)
                                 : min_dim_forward(t, dim, keepdim, &v, &i));
    if (rc == 0 && rec) {
        struct weft_node *node = weft_node_create(is_max ? "MaxBackward0" : "MinBackward0",
                                                  select_dim_backward, 1, &t, 1);
        if (node) {
            weft_node_ints(node)[0] = dim < 0 ? dim + (t->ndim ? t->ndim : 1) : dim;
            weft_node_ints(node)[1] = keepdim;
            rc = weft_node_save(node, 0, i);
            weft_tensor *outs[2] = {v, i};
            if (rc == 0)
                rc = weft_node_finish(node, 2, outs);
            else
                weft_node_abandon(node);
        } else {
            rc = weft_error_code();
        }
    }
    return weft_ops_hand_out_pair(rc, v, i, values, indices);
}

int weft_max_dim(weft_tensor *t, int dim, bool keepdim, weft_tensor **values, weft_tensor **indices)
{
    return select_dim_wrapper(true, t, dim, keepdim, values, indices);
}

int weft_min_dim(weft_tensor *t, int dim, bool keepdim, weft_tensor **values, weft_tensor **indices)
{
    return select_dim_wrapper(false, t, dim, keepdim, values, indices);
}


/* ---- amax, amin: max/min over dims, values only ------------------------------------------- */
static weft_tensor *extreme_dims_forward(int op, const char *name, weft_tensor *t, int ndims,
                                         const int *dims, bool keepdim)
{
    bool mask[WEFT_MAX_DIMS];
    if (!t || weft_require_strided(t, name) != 0 || reduced_mask(t, ndims, dims, mask) != 0)
        return NULL;
    if (numel_of(t) == 0)
        for (int d = 0; d < t->ndim; d++)
            if (mask[d] && t->shape[d] == 0) {
                weft_error_set(WEFT_ERR_INDEX,
                               "%s(): Expected reduction dim %d to have non-zero size.", name, d);
                return NULL;
            }
    return reduce(op, name, t, ndims, dims, keepdim, t->dtype, 0);
}

static weft_tensor *extreme_dims(bool is_max, weft_tensor *t, int ndims, const int *dims,
                                 bool keepdim)
{
    bool rec = weft_autograd_needed_inline(1, &t);
    weft_tensor *out = WEFT_NO_GRAD(rec, extreme_dims_forward(is_max ? WEFT_OP_MAX : WEFT_OP_MIN,
                                                              is_max ? "amax" : "amin", t, ndims,
                                                              dims, keepdim));
    return rec ? record_reduce(R_AMAX, is_max ? OP_GRAD_FN(AMAX) : OP_GRAD_FN(AMIN), t, ndims,
                               dims, keepdim, 0, out)
               : out;
}

weft_tensor *weft_amax(weft_tensor *t, int ndims, const int *dims, bool keepdim)
{
    return extreme_dims(true, t, ndims, dims, keepdim);
}

weft_tensor *weft_amin(weft_tensor *t, int ndims, const int *dims, bool keepdim)
{
    return extreme_dims(false, t, ndims, dims, keepdim);
}

int weft_ops_hand_out_pair(int rc, weft_tensor *v, weft_tensor *i, weft_tensor **values,
                           weft_tensor **indices)
{
    if (rc != 0 || !values)
        weft_tensor_discard(v);
    if (rc != 0 || !indices)
        weft_tensor_discard(i);
    if (rc != 0)
        return rc;
    if (values)
        *values = v;
    if (indices)
        *indices = i;
    return 0;
}
