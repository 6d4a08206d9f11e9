/* core/ops_scatter.c: Tensor.scatter (src or value, reduce=None) and Tensor.scatter_reduce
 * (sum, prod, mean, amax, amin; include_self), on the named SCATTER and SCATTER_REDUCE
 * kernels (weft/kernel.h), with PyTorch's checks and nodes: ScatterBackward0 (src),
 * ScatterBackward1 (value), ScatterReduceBackward0. Backward formulas are
 * derivatives.yaml's, written with ops. */
#include <string.h>

#include "internal.h"

static const char *const reduce_names[] = {"sum", "prod", "mean", "amax", "amin"};
enum { R_SUM, R_PROD, R_MEAN, R_AMAX, R_AMIN };

static int named_op(int *cached, const char *name)
{
    int op = __atomic_load_n(cached, __ATOMIC_RELAXED);
    if (op < 0) {
        op = weft_op_register(name);
        __atomic_store_n(cached, op, __ATOMIC_RELAXED);
    }
    return op;
}

/* A 0-dim tensor seen as [1] (the kernels index a dim). */
static weft_tensor *as_vector(weft_tensor *t)
{
    if (!t || t->ndim > 0)
        return t;
    const int64_t one = 1;
    return weft_reshape(t, 1, &one);
}

/* Checks shared by both ops; *d gets the normalised dim. */
static int check(const char *name, weft_tensor *t, int dim, weft_tensor *index, weft_tensor *src,
                 int *d)
{
    const weft_tensor *all[3] = {t, index, src};
    if (weft_check_same_device(src ? 3 : 2, all) != 0 || weft_require_strided(t, name) != 0 ||
        weft_require_strided(index, name) != 0 || (src && weft_require_strided(src, name) != 0))
        return -1;
    *d = weft_normalize_dim(dim, t->ndim);
    if (*d < 0)
        return -1;
    if (index->dtype != WEFT_I64)
        return weft_error_set(WEFT_ERR_RUNTIME, "scatter(): Expected dtype int64 for index");
    if (src && t->dtype != src->dtype)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "scatter(): Expected self.dtype to be equal to src.dtype");
    if (weft_tensor_numel(index) == 0)
        return 0;
    return weft_scatter_shape_check(t, *d, index, src ? src : index);
}

/* out = clone(t), then the kernel in place on it; grad mode off. */
static weft_tensor *run(int op, weft_tensor *t, int d, weft_tensor *index, weft_tensor *src,
                        double value, int reduce, bool include_self)
{
    if (op < 0)
        return NULL;
    bool prev = weft_no_grad_begin();
    weft_scope_push();
    weft_tensor *out = weft_clone(t);
    if (out && weft_tensor_numel(index) > 0) {
        struct weft_op_call call = {.op = op, .nin = 2, .nout = 1,
                                    .ints = {d, reduce, include_self}, .scalar = {value}};
        call.out[0] = as_vector(out);
        call.in[0] = as_vector(index);
        call.in[1] = as_vector(src);
        if (!call.out[0] || !call.in[0] || (src && !call.in[1]) || weft_dispatch(&call) != 0)
            out = NULL;
    }
    weft_tensor_retain(out);
    weft_scope_pop();
    weft_grad_mode_restore(prev);
    return weft_tensor_finish(out);
}

static weft_tensor *finish(struct weft_node *node, weft_tensor *out)
{
    if (node && weft_node_finish(node, 1, &out) == 0)
        return out;
    if (weft_scope_depth() == 0)
        weft_tensor_release(out);
    return NULL;
}

/* ---- scatter --------------------------------------------------------------------------------
 * Saved: 0 the index; ints[0] dim. self: grad with the overwritten places zeroed; src:
 * grad gathered at the index. */
static int scatter_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                            weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0], *index = weft_node_saved(node, 0);
    int dim = (int)weft_node_ints(node)[0];
    if (!g)
        return 0;
    if (weft_node_needs_input_grad(node, 0) &&
        !(grad_inputs[0] = weft_scatter_value(g, dim, index, 0)))
        return weft_error_code();
    if (weft_node_num_inputs(node) > 1 && weft_node_needs_input_grad(node, 1) &&
        !(grad_inputs[1] = weft_gather(g, dim, index)))
        return weft_error_code();
    return 0;
}

static weft_tensor *scatter(weft_tensor *t, int dim, weft_tensor *index, weft_tensor *src,
                            double value)
{
    static int cached = -1;
    int d;
    if (!t || !index || check("scatter", t, dim, index, src, &d) != 0)
        return NULL;
    weft_tensor *ins[2] = {t, src};
    int n = src ? 2 : 1;
    weft_tensor *out = run(named_op(&cached, WEFT_OP_SCATTER_NAME), t, d, index, src, value, 0, 0);
    if (!out || !weft_autograd_needed_inline(n, ins))
        return out;
    struct weft_node *node = weft_node_create(src ? "ScatterBackward0" : "ScatterBackward1",
                                              scatter_backward, n, ins, 1);
    if (node && weft_node_save(node, 0, index) != 0) {
        weft_node_abandon(node);
        node = NULL;
    }
    if (node)
        weft_node_ints(node)[0] = d;
    return finish(node, out);
}

weft_tensor *weft_scatter(weft_tensor *t, int dim, weft_tensor *index, weft_tensor *src)
{
    return src ? scatter(t, dim, index, src, 0) : NULL;
}

weft_tensor *weft_scatter_value(weft_tensor *t, int dim, weft_tensor *index, double value)
{
    return scatter(t, dim, index, NULL, value);
}

/* ---- scatter_reduce -----------------------------------------------------------------------
 * Saved: 0 self, 1 index, 2 src, 3 the result; ints[0] dim, ints[1] reduce, ints[2]
 * include_self. PyTorch's scatter_reduce_backward, except that prod with several zeros
 * scattered to one place gives their gradient as if each were alone (PyTorch raises there
 * when that gradient is used). */
static int reduce_grads(struct weft_node *node, weft_tensor *g, weft_tensor **gself,
                        weft_tensor **gsrc)
{
    weft_tensor *self = weft_node_saved(node, 0), *index = weft_node_saved(node, 1);
    weft_tensor *src = weft_node_saved(node, 2), *result = weft_node_saved(node, 3);
    int64_t *ints = weft_node_ints(node);
    int dim = (int)ints[0], reduce = (int)ints[1];
    bool include_self = ints[2] != 0;
    switch (reduce) {
    case R_SUM:
        *gself = weft_autorelease(weft_tensor_retain(g));
        *gsrc = weft_gather(g, dim, index);
        break;
    case R_PROD: {
        weft_tensor *masked_self = weft_masked_fill(self, weft_eq_scalar(self, 0), 1);
        weft_tensor *masked_result = weft_scatter_reduce(masked_self, dim, index, src, "prod",
                                                         include_self);
        *gself = weft_div(weft_mul(g, masked_result), masked_self);
        weft_tensor *src_zero = weft_eq_scalar(src, 0);
        weft_tensor *zeros = weft_scatter_add(weft_zeros_like(self), dim, index,
                                              weft_to_dtype(src_zero, self->dtype));
        weft_tensor *single = weft_logical_and(src_zero,
                                               weft_eq_scalar(weft_gather(zeros, dim, index), 1));
        weft_tensor *masked_src = weft_masked_fill(src, single, 1);
        weft_tensor *masked_src_result = weft_scatter_reduce(self, dim, index, masked_src, "prod",
                                                             include_self);
        *gsrc = weft_where(single, weft_gather(weft_mul(g, masked_src_result), dim, index),
                           weft_div(weft_gather(weft_mul(g, result), dim, index),
                                    weft_masked_fill(src, src_zero, 1)));
        break;
    }
    case R_MEAN: {
        weft_tensor *count = include_self ? weft_ones_like(g) : weft_zeros_like(g);
        count = weft_scatter_add(count, dim, index, weft_ones_like(src));
        count = weft_masked_fill(count, weft_eq_scalar(count, 0), 1);
        *gself = weft_div(g, count);
        *gsrc = weft_div(weft_gather(g, dim, index), weft_gather(count, dim, index));
        break;
    }
    default: { /* amax, amin: the gradient shared evenly among the elements that won */
        weft_tensor *value = weft_gather(result, dim, index);
        weft_tensor *self_won = weft_eq(self, result), *src_won = weft_eq(src, value);
        weft_tensor *n = weft_scatter_add(weft_to_dtype(self_won, self->dtype), dim, index,
                                          weft_to_dtype(src_won, self->dtype));
        weft_tensor *shared = weft_div(g, n);
        *gself = weft_mul(self_won, shared);
        *gsrc = weft_mul(src_won, weft_gather(shared, dim, index));
        break;
    }
    }
    if (*gself && !include_self)
        *gself = weft_scatter_value(*gself, dim, index, 0);
    return *gself && *gsrc ? 0 : weft_error_code();
}

static int scatter_reduce_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                                   weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0], *gself = NULL, *gsrc = NULL;
    if (!g)
        return 0;
    if (reduce_grads(node, g, &gself, &gsrc) != 0)
        return weft_error_code();
    if (weft_node_needs_input_grad(node, 0))
        grad_inputs[0] = gself;
    if (weft_node_needs_input_grad(node, 1))
        grad_inputs[1] = gsrc;
    return 0;
}

weft_tensor *weft_scatter_reduce(weft_tensor *t, int dim, weft_tensor *index, weft_tensor *src,
                                 const char *reduce, bool include_self)
{
    static int cached = -1;
    if (!t || !index || !src)
        return NULL;
    int r = -1, d;
    for (int i = 0; reduce && i < 5; i++)
        if (!strcmp(reduce, reduce_names[i]))
            r = i;
    if (r < 0) {
        weft_error_set(WEFT_ERR_RUNTIME,
                       "reduce argument must be either sum, prod, mean, amax or amin.");
        return NULL;
    }
    if (check("scatter_reduce", t, dim, index, src, &d) != 0)
        return NULL;
    if (t->dtype == WEFT_BOOL) {
        /* PyTorch's bool arithmetic: sum and amax are or, prod and amin are and, mean has no
         * kernel; run on 0/1 in int64 (no count can wrap) and read back != 0. */
        if (r == 2) {
            weft_error_set(WEFT_ERR_NOT_IMPLEMENTED,
                           "\"scatter_gather_tensor_%s_reduce_mean\" not implemented for 'Bool'",
                           weft_device_type_name(t->device.type));
            return NULL;
        }
        weft_scope_push();
        weft_tensor *wide = weft_scatter_reduce(weft_to_dtype(t, WEFT_I64), dim, index,
                                                weft_to_dtype(src, WEFT_I64), reduce, include_self);
        weft_tensor *out = weft_tensor_retain(wide ? weft_ne_scalar(wide, 0) : NULL);
        weft_scope_pop();
        return weft_autorelease(out);
    }
    weft_tensor *ins[2] = {t, src};
    weft_tensor *out = run(named_op(&cached, WEFT_OP_SCATTER_REDUCE_NAME), t, d, index, src, 0, r,
                           include_self);
    if (!out || !weft_autograd_needed_inline(2, ins))
        return out;
    struct weft_node *node = weft_node_create("ScatterReduceBackward0", scatter_reduce_backward, 2,
                                              ins, 4);
    if (node && (weft_node_save(node, 0, t) != 0 || weft_node_save(node, 1, index) != 0 ||
                 weft_node_save(node, 2, src) != 0 || weft_node_save_output(node, 3, out, 0) != 0)) {
        weft_node_abandon(node);
        node = NULL;
    }
    if (node) {
        int64_t *ints = weft_node_ints(node);
        ints[0] = d;
        ints[1] = r;
        ints[2] = include_self;
    }
    return finish(node, out);
}

/* ---- in place: Tensor.scatter_(dim, index, src) and scatter_(dim, index, value) ----------- */
static weft_tensor *scatter_inplace(weft_tensor *t, int dim, weft_tensor *index, weft_tensor *src,
                                    double value)
{
    weft_tensor *ins[2] = {t, src};
    int n = src ? 2 : 1;
    bool rec = weft_autograd_needed_inline(n, ins);
    if (!t || (rec && weft_autograd_check_inplace(t, true) != 0))
        return NULL;
    bool prev = weft_no_grad_begin();
    weft_tensor *r = src ? weft_scatter(t, dim, index, src) : weft_scatter_value(t, dim, index, value);
    weft_grad_mode_restore(prev);
    int rc = ops_write_result_(t, r);
    weft_tensor_discard(r);
    if (rc != 0)
        return NULL;
    if (!rec)
        return t;
    struct weft_node *node = weft_node_create(src ? "ScatterBackward0" : "ScatterBackward1",
                                              scatter_backward, n, ins, 1);
    if (node && weft_node_save(node, 0, index) != 0) {
        weft_node_abandon(node);
        node = NULL;
    }
    if (node)
        weft_node_ints(node)[0] = weft_normalize_dim(dim, t->ndim);
    return weft_node_finish1(node, t);
}

weft_tensor *weft_scatter_(weft_tensor *t, int dim, weft_tensor *index, weft_tensor *src)
{
    return src ? scatter_inplace(t, dim, index, src, 0) : NULL;
}

weft_tensor *weft_scatter_value_(weft_tensor *t, int dim, weft_tensor *index, double value)
{
    return scatter_inplace(t, dim, index, NULL, value);
}
