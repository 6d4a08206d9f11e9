/* core/ops_divmod.c: torch.floor_divide and torch.remainder (Python's // and %), on the
 * named FLOOR_DIVIDE and REMAINDER kernels (weft/kernel.h) with add's type promotion.
 *
 * Autograd as PyTorch 1.13: remainder records RemainderBackward0 (scalar divisor: the
 * gradient passes) or RemainderBackward1 (tensor divisor: -grad * floor_divide(a, b) for
 * it); floor_divide has no derivative, so its result records a "NotImplemented" node
 * whose backward fails with PyTorch's text. */
#include "internal.h"

/* Threads may race to set it; weft_op_register gives them all the same id. */
static int op_id(int *cached, const char *name)
{
    int op = __atomic_load_n(cached, __ATOMIC_RELAXED);
    if (op < 0) {
        op = weft_op_register(name);
        __atomic_store_n(cached, op, __ATOMIC_RELAXED);
    }
    return op;
}

static int floor_divide_op(void)
{
    static int cached = -1;
    return op_id(&cached, WEFT_OP_FLOOR_DIVIDE_NAME);
}

static int remainder_op(void)
{
    static int cached = -1;
    return op_id(&cached, WEFT_OP_REMAINDER_NAME);
}

/* The forward with grad mode off. b NULL: the scalar s. */
static weft_tensor *forward(int op, weft_tensor *a, weft_tensor *b, double s)
{
    if (op < 0)
        return NULL;
    bool prev = weft_no_grad_begin();
    weft_tensor *out = b ? weft_fwd_binary_named(op, a, b) : weft_fwd_binary_named_scalar(op, a, s);
    weft_grad_mode_restore(prev);
    return out;
}

/* Attaches node to out; on failure drops out and returns NULL. */
static weft_tensor *finish(struct weft_node *node, weft_tensor *out)
{
    if (node && weft_node_finish(node, 1, &out) == 0)
        return out;
    if (weft_scope_depth() == 0)
        weft_tensor_release(out);
    return NULL;
}

static int not_implemented_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                                    weft_tensor **grad_inputs)
{
    (void)node, (void)grad_outputs, (void)grad_inputs;
    return weft_error_set(WEFT_ERR_RUNTIME,
                          "derivative for aten::floor_divide is not implemented");
}

static weft_tensor *floor_divide(weft_tensor *a, weft_tensor *b, double s)
{
    weft_tensor *ins[2] = {a, b};
    weft_tensor *out = forward(floor_divide_op(), a, b, s);
    if (!out || !weft_autograd_needed_inline(b ? 2 : 1, ins))
        return out;
    return finish(weft_node_create("NotImplemented", not_implemented_backward, b ? 2 : 1, ins, 0),
                  out);
}

weft_tensor *weft_floor_divide(weft_tensor *a, weft_tensor *b)
{
    return a && b ? floor_divide(a, b, 0) : NULL;
}

weft_tensor *weft_floor_divide_scalar(weft_tensor *a, double b)
{
    return a ? floor_divide(a, NULL, b) : NULL;
}

/* Saved (tensor divisor only): 0 a, 1 b. */
static int remainder_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                              weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0];
    if (!g)
        return 0;
    if (weft_node_needs_input_grad(node, 0) &&
        !(grad_inputs[0] = weft_autorelease(weft_tensor_retain(g))))
        return weft_error_code();
    if (weft_node_num_inputs(node) > 1 && weft_node_needs_input_grad(node, 1)) {
        weft_tensor *q = weft_floor_divide(weft_node_saved(node, 0), weft_node_saved(node, 1));
        if (!(grad_inputs[1] = weft_neg(weft_mul(g, q))))
            return weft_error_code();
    }
    return 0;
}

static weft_tensor *remainder_of(weft_tensor *a, weft_tensor *b, double s)
{
    weft_tensor *ins[2] = {a, b};
    int n = b ? 2 : 1;
    weft_tensor *out = forward(remainder_op(), a, b, s);
    if (!out || !weft_autograd_needed_inline(n, ins))
        return out;
    struct weft_node *node = weft_node_create(b ? "RemainderBackward1" : "RemainderBackward0",
                                              remainder_backward, n, ins, b ? 2 : 0);
    if (node && b && (weft_node_save(node, 0, a) != 0 || weft_node_save(node, 1, b) != 0)) {
        weft_node_abandon(node);
        node = NULL;
    }
    return finish(node, out);
}

weft_tensor *weft_remainder(weft_tensor *a, weft_tensor *b)
{
    return a && b ? remainder_of(a, b, 0) : NULL;
}

weft_tensor *weft_remainder_scalar(weft_tensor *a, double b)
{
    return a ? remainder_of(a, NULL, b) : NULL;
}

/* ---- in place: floor_divide_, remainder_ (PyTorch's methods), the result written back
 * into a (its dtype must hold it: "result type Float can't be cast to ...") ---------------- */
static weft_tensor *floor_divide_inplace(weft_tensor *a, weft_tensor *b, double s)
{
    weft_tensor *ins[2] = {a, b};
    bool rec = weft_autograd_needed_inline(b ? 2 : 1, ins);
    if (!a || (rec && weft_autograd_check_inplace(a, true) != 0))
        return NULL;
    weft_tensor *r = forward(floor_divide_op(), a, b, s);
    int rc = ops_write_result_(a, r);
    weft_tensor_discard(r);
    if (rc != 0)
        return NULL;
    if (!rec)
        return a;
    return weft_node_finish1(weft_node_create("NotImplemented", not_implemented_backward,
                                              b ? 2 : 1, ins, 0), a);
}

weft_tensor *weft_floor_divide_(weft_tensor *a, weft_tensor *b)
{
    return b ? floor_divide_inplace(a, b, 0) : NULL;
}

weft_tensor *weft_floor_divide_scalar_(weft_tensor *a, double b)
{
    return floor_divide_inplace(a, NULL, b);
}

/* The divisor's gradient reads a's value before the op: a copy of it is saved. */
static weft_tensor *remainder_inplace(weft_tensor *a, weft_tensor *b, double s)
{
    weft_tensor *ins[2] = {a, b};
    int n = b ? 2 : 1;
    bool rec = weft_autograd_needed_inline(n, ins);
    if (!a || (rec && weft_autograd_check_inplace(a, true) != 0))
        return NULL;
    weft_tensor *orig = rec && b ? original_value(a) : NULL;
    weft_tensor *r = forward(remainder_op(), a, b, s);
    int rc = (!rec || !b || orig) ? ops_write_result_(a, r) : -1;
    weft_tensor_discard(r);
    if (rc != 0 || !rec) {
        weft_tensor_discard(orig);
        return rc == 0 ? a : NULL;
    }
    struct weft_node *node = weft_node_create(b ? "RemainderBackward1" : "RemainderBackward0",
                                              remainder_backward, n, ins, b ? 2 : 0);
    if (node && b && (weft_node_save(node, 0, orig) != 0 || weft_node_save(node, 1, b) != 0)) {
        weft_node_abandon(node);
        node = NULL;
    }
    weft_tensor_discard(orig);
    return weft_node_finish1(node, a);
}

weft_tensor *weft_remainder_(weft_tensor *a, weft_tensor *b)
{
    return b ? remainder_inplace(a, b, 0) : NULL;
}

weft_tensor *weft_remainder_scalar_(weft_tensor *a, double b)
{
    return remainder_inplace(a, NULL, b);
}
