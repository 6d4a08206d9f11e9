/* nn/merge.c: the layers that join values in a graph model (weft/graph.h): add, mul and
 * concat over two or more inputs (x + f(x), a gate, a channel concatenation), and
 * Identity (nn.Identity). In PyTorch these are `a + b`, `a * b` and `torch.cat` in a
 * forward: they have no parameters, so a graph's state_dict is its other layers'.
 *
 * A merge layer's computation takes several tensors, which a module's forward (one
 * input) cannot: the graph calls nn_merge_forward, and the one-input forward below
 * refuses. add and mul may write into one of their inputs when the graph says it is
 * dead after them (nn_merge_forward's reuse): a residual add then costs no new tensor,
 * as torchvision's `out += identity`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"
#include "weft/onnx.h"
#include "weft/ops.h"

enum merge_op { MERGE_ADD, MERGE_MUL, MERGE_CONCAT };

struct merge_state {
    enum merge_op op;
    int dim; /* concat */
};

static weft_tensor *identity_forward(weft_module *m, weft_tensor *x)
{
    (void)m;
    return weft_autorelease(weft_tensor_retain(x)); /* nn.Identity returns its input */
}

static const char *identity_onnx(weft_module *m, struct weft_onnx_graph *g, const char *input)
{
    (void)m;
    (void)g;
    return input; /* torch.onnx drops nn.Identity: the value flows on unchanged */
}

static weft_module *identity_create(const weft_options *o)
{
    (void)o;
    return weft_nn_identity();
}

static const struct weft_module_type identity_type = {
    .base = WEFT_VTABLE(WEFT_KIND_MODULE, "identity", struct weft_module_type),
    .class_name = "Identity",
    .forward = identity_forward,
    .create = identity_create,
    .onnx_export = identity_onnx,
};

weft_module *weft_nn_identity(void)
{
    return weft_module_new(&identity_type, NULL);
}

/* A merge layer run as an ordinary one-input layer: only a graph gives it its inputs. */
static weft_tensor *merge_forward_one(weft_module *m, weft_tensor *x)
{
    (void)x;
    weft_error_set(WEFT_ERR_VALUE, "%s joins two or more inputs: it runs in a graph model, "
                                   "whose layers name their inputs",
                   weft_module_type_name(m));
    return NULL;
}

static int concat_repr(const weft_module *m, char *buf, size_t size)
{
    const struct merge_state *s = weft_module_state(m);
    return snprintf(buf, size, "dim=%d", s->dim);
}

static weft_module *merge_new(const struct weft_module_type *type, enum merge_op op, int dim);

static weft_module *add_create(const weft_options *o);
static weft_module *mul_create(const weft_options *o);
static weft_module *concat_create(const weft_options *o);

#define MERGE_TYPE(ini, cls, repr, create_fn)                                                 \
    {.base = WEFT_VTABLE(WEFT_KIND_MODULE, ini, struct weft_module_type), .class_name = cls,  \
     .forward = merge_forward_one, .free_state = free, .extra_repr = repr,                    \
     .create = create_fn, .onnx_export = nn_merge_onnx_one}

/* Exported through the graph (nn_merge_onnx); alone it is refused like its forward. */
static const char *nn_merge_onnx_one(weft_module *m, struct weft_onnx_graph *g, const char *in)
{
    (void)g;
    (void)in;
    weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "%s joins two or more inputs: it exports as part "
                                             "of a graph model",
                   weft_module_type_name(m));
    return NULL;
}

static const struct weft_module_type add_type = MERGE_TYPE("add", "Add", NULL, add_create);
static const struct weft_module_type mul_type = MERGE_TYPE("mul", "Mul", NULL, mul_create);
static const struct weft_module_type concat_type =
    MERGE_TYPE("concat", "Concat", concat_repr, concat_create);

static weft_module *merge_new(const struct weft_module_type *type, enum merge_op op, int dim)
{
    struct merge_state *s = malloc(sizeof *s);
    if (!s) {
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory for a %s", type->class_name);
        return NULL;
    }
    *s = (struct merge_state){op, dim};
    weft_module *m = weft_module_new(type, s);
    if (!m)
        free(s);
    return m;
}

weft_module *weft_nn_add(void)
{
    return merge_new(&add_type, MERGE_ADD, 0);
}

weft_module *weft_nn_mul(void)
{
    return merge_new(&mul_type, MERGE_MUL, 0);
}

weft_module *weft_nn_concat(int dim)
{
    return merge_new(&concat_type, MERGE_CONCAT, dim);
}

static weft_module *add_create(const weft_options *o)
{
    (void)o;
    return weft_nn_add();
}

static weft_module *mul_create(const weft_options *o)
{
    (void)o;
    return weft_nn_mul();
}

static weft_module *concat_create(const weft_options *o)
{
    int64_t dim;
    if (weft_options_int_range(o, "dim", 1, -WEFT_MAX_DIMS, WEFT_MAX_DIMS - 1, &dim) < 0)
        return NULL;
    return weft_nn_concat((int)dim);
}

int nn_merge_min_inputs(const weft_module *m)
{
    const struct weft_module_type *t = weft_module_type(m);
    if (t == &add_type || t == &mul_type)
        return 2;
    return t == &concat_type ? 1 : 0;
}

bool nn_is_identity(const weft_module *m)
{
    return weft_module_type(m) == &identity_type;
}

/* Whether t can take the result over the inputs in place: every input of t's dtype, and
 * t of their broadcast shape already (a + b with b broadcast into a). */
static bool fits_in_place(const weft_tensor *t, int n, weft_tensor *const *inputs)
{
    int ndim = t->ndim;
    int64_t shape[WEFT_MAX_DIMS], next[WEFT_MAX_DIMS];
    memcpy(shape, t->shape, (size_t)ndim * sizeof *shape);
    for (int i = 0; i < n; i++) {
        if (inputs[i]->dtype != t->dtype || !weft_device_equal(inputs[i]->device, t->device) ||
            weft_broadcast_shapes(ndim, shape, inputs[i]->ndim, inputs[i]->shape, &ndim,
                                  next) != 0) {
            weft_error_clear(); /* the out-of-place op reports it, in PyTorch's words */
            return false;
        }
        memcpy(shape, next, (size_t)ndim * sizeof *shape);
    }
    return ndim == t->ndim && memcmp(shape, t->shape, (size_t)ndim * sizeof *shape) == 0;
}

weft_tensor *nn_merge_forward(weft_module *m, int n, weft_tensor *const *inputs, int reuse)
{
    const struct merge_state *s = weft_module_state(m);
    if (s->op == MERGE_CONCAT)
        return weft_cat(n, inputs, s->dim);
    weft_tensor *(*op)(weft_tensor *, weft_tensor *) = s->op == MERGE_ADD ? weft_add : weft_mul;
    weft_tensor *(*op_)(weft_tensor *, weft_tensor *) = s->op == MERGE_ADD ? weft_add_ : weft_mul_;
    /* In place into input 0 or 1 only: ((a + b) + c) in either is the out-of-place sum's
     * order (a + b == b + a exactly), so the values do not depend on the reuse. */
    if ((reuse == 0 || reuse == 1) && fits_in_place(inputs[reuse], n, inputs)) {
        weft_tensor *acc = op_(inputs[reuse], inputs[1 - reuse]);
        for (int i = 2; i < n && acc; i++)
            acc = op_(acc, inputs[i]);
        return acc ? weft_autorelease(weft_tensor_retain(acc)) : NULL;
    }
    weft_tensor *acc = op(inputs[0], inputs[1]);
    for (int i = 2; i < n && acc; i++)
        acc = op(acc, inputs[i]);
    return acc;
}

const char *nn_merge_onnx(weft_module *m, struct weft_onnx_graph *g, int n,
                          const char *const *inputs)
{
    const struct merge_state *s = weft_module_state(m);
    if (s->op == MERGE_CONCAT) {
        weft_onnx_node *node = weft_onnx_node_add(g, "Concat", n, inputs, 1);
        weft_onnx_attr_int(node, "axis", s->dim);
        return weft_onnx_node_output(node, 0);
    }
    const char *op = s->op == MERGE_ADD ? "Add" : "Mul";
    const char *acc = weft_onnx_op(g, op, 2, inputs);
    for (int i = 2; i < n && acc; i++)
        acc = weft_onnx_op(g, op, 2, (const char *const[]){acc, inputs[i]});
    return acc;
}

const void *const nn_merge_types[NN_MERGE_TYPES] = {&identity_type, &add_type, &mul_type,
                                                    &concat_type};
