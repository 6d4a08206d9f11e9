/* core/ops_addmm.c: torch.addmm and torch.baddbmm, beta * input + alpha * (a @ b), with
 * their checks and texts and one node each (AddmmBackward0, BaddbmmBackward0).
 *
 * The forward is composed of mm/bmm and elementwise ops; integer dtypes take alpha and
 * beta truncated, as PyTorch casts the scalars to the tensors' type. beta == 0 ignores
 * the input entirely (NaN and inf in it do not propagate), as BLAS does. */
#include <math.h>

#include "internal.h"

/* beta * input + alpha * product, input expanded to the product's shape; grad mode off. */
static weft_tensor *combine(weft_tensor *input, weft_tensor *product, double beta, double alpha)
{
    weft_tensor *scaled = alpha == 1 ? product : weft_mul_scalar(product, alpha);
    if (beta == 0)
        return scaled;
    weft_tensor *in = beta == 1 ? input : weft_mul_scalar(input, beta);
    return weft_add(in, scaled);
}

/* Tensor.type()'s legacy class name, which expand's rank error prints. */
static const char *legacy_type(const weft_tensor *t)
{
    static const char *const cpu[WEFT_DTYPE_COUNT] = {
        [WEFT_BOOL] = "torch.BoolTensor",   [WEFT_U8] = "torch.ByteTensor",
        [WEFT_I8] = "torch.CharTensor",     [WEFT_I16] = "torch.ShortTensor",
        [WEFT_I32] = "torch.IntTensor",     [WEFT_I64] = "torch.LongTensor",
        [WEFT_F16] = "torch.HalfTensor",    [WEFT_BF16] = "torch.BFloat16Tensor",
        [WEFT_F32] = "torch.FloatTensor",   [WEFT_F64] = "torch.DoubleTensor",
    };
    static const char *const cuda[WEFT_DTYPE_COUNT] = {
        [WEFT_BOOL] = "torch.cuda.BoolTensor",  [WEFT_U8] = "torch.cuda.ByteTensor",
        [WEFT_I8] = "torch.cuda.CharTensor",    [WEFT_I16] = "torch.cuda.ShortTensor",
        [WEFT_I32] = "torch.cuda.IntTensor",    [WEFT_I64] = "torch.cuda.LongTensor",
        [WEFT_F16] = "torch.cuda.HalfTensor",   [WEFT_BF16] = "torch.cuda.BFloat16Tensor",
        [WEFT_F32] = "torch.cuda.FloatTensor",  [WEFT_F64] = "torch.cuda.DoubleTensor",
    };
    if (!weft_dtype_valid(t->dtype))
        return "torch.Tensor";
    return t->device.type == WEFT_DEVICE_CPU ? cpu[t->dtype] : cuda[t->dtype];
}

/* input expanded to [ndim, shape] (PyTorch's expand_size: an error where it does not
 * expand, not a broadcast of both); the view is only used for the check. */
static int check_expands(weft_tensor *input, int ndim, const int64_t *shape)
{
    if (input->ndim > ndim) {
        char a[160], b[160];
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "expand(%s{%s}, size=%s): the number of sizes provided (%d) must "
                              "be greater or equal to the number of dimensions in the tensor (%d)",
                              legacy_type(input), weft_shape_str(input->ndim, input->shape, a, sizeof a),
                              weft_shape_str(ndim, shape, b, sizeof b), ndim, input->ndim);
    }
    weft_tensor *e = weft_expand(input, ndim, shape);
    if (!e)
        return -1;
    if (weft_scope_depth() == 0)
        weft_tensor_release(e);
    return 0;
}

/* ---- backward ------------------------------------------------------------------------------
 * Saved: 0 a, 1 b; scalars[0] beta, scalars[1] alpha. The engine sums the input's
 * gradient back to its shape. */
static int addmm_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                          weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0], *a = weft_node_saved(node, 0), *b = weft_node_saved(node, 1);
    if (!g)
        return 0;
    double beta = weft_node_scalars(node)[0], alpha = weft_node_scalars(node)[1];
    bool batched = g->ndim == 3;
    if (weft_node_needs_input_grad(node, 0) &&
        !(grad_inputs[0] = beta == 1 ? weft_autorelease(weft_tensor_retain(g))
                                     : weft_mul_scalar(g, beta)))
        return weft_error_code();
    if (weft_node_needs_input_grad(node, 1)) {
        weft_tensor *bt = weft_transpose(b, -1, -2);
        weft_tensor *ga = batched ? weft_bmm(g, bt) : weft_mm(g, bt);
        if (!(grad_inputs[1] = alpha == 1 ? ga : weft_mul_scalar(ga, alpha)))
            return weft_error_code();
    }
    if (weft_node_needs_input_grad(node, 2)) {
        weft_tensor *at = weft_transpose(a, -1, -2);
        weft_tensor *gb = batched ? weft_bmm(at, g) : weft_mm(at, g);
        if (!(grad_inputs[2] = alpha == 1 ? gb : weft_mul_scalar(gb, alpha)))
            return weft_error_code();
    }
    return 0;
}

/* The forward (already checked) and, when recording, its node. */
static weft_tensor *run(const char *name, weft_tensor *input, weft_tensor *a, weft_tensor *b,
                        double beta, double alpha, bool batched)
{
    if (!weft_dtype_is_floating(a->dtype)) {
        beta = trunc(beta);
        alpha = trunc(alpha);
    }
    weft_tensor *ins[3] = {input, a, b};
    bool rec = weft_autograd_needed_inline(3, ins);
    bool prev = weft_no_grad_begin();
    weft_scope_push();
    weft_tensor *out = combine(input, batched ? weft_bmm(a, b) : weft_mm(a, b), beta, alpha);
    weft_tensor_retain(out);
    weft_scope_pop();
    weft_grad_mode_restore(prev);
    out = weft_tensor_finish(out);
    if (!out || !rec)
        return out;
    /* a only for b's gradient, b only for a's: PyTorch saves what a gradient to compute
     * reads */
    struct weft_node *node = weft_node_create(name, addmm_backward, 3, ins, 2);
    if (!node || weft_node_save(node, 0, weft_node_needs_input_grad(node, 2) ? a : NULL) != 0 ||
        weft_node_save(node, 1, weft_node_needs_input_grad(node, 1) ? b : NULL) != 0) {
        if (node)
            weft_node_abandon(node);
        if (weft_scope_depth() == 0)
            weft_tensor_release(out);
        return NULL;
    }
    weft_node_scalars(node)[0] = beta;
    weft_node_scalars(node)[1] = alpha;
    if (weft_node_finish(node, 1, &out) != 0) {
        if (weft_scope_depth() == 0)
            weft_tensor_release(out);
        return NULL;
    }
    return out;
}

static int check_dtypes(const weft_tensor *input, const weft_tensor *a, const weft_tensor *b)
{
    const weft_tensor *all[3] = {input, a, b};
    if (weft_check_same_device(3, all) != 0)
        return -1;
    if (input->dtype != b->dtype)
        return weft_error_set(WEFT_ERR_RUNTIME, "self and mat2 must have the same dtype");
    if (a->dtype != b->dtype)
        return weft_error_set(WEFT_ERR_RUNTIME, "mat1 and mat2 must have the same dtype");
    return 0;
}

weft_tensor *weft_addmm(weft_tensor *input, weft_tensor *mat1, weft_tensor *mat2, double beta,
                        double alpha)
{
    if (!input || !mat1 || !mat2)
        return NULL;
    weft_tensor *in[3] = {input, mat1, mat2};
    OP_AUTOCAST_RETURN(ADDMM, 3, in, weft_addmm(in[0], in[1], in[2], beta, alpha));
    if (mat1->ndim != 2) {
        weft_error_set(WEFT_ERR_RUNTIME, "mat1 must be a matrix, got %d-D tensor", mat1->ndim);
        return NULL;
    }
    if (mat2->ndim != 2) {
        weft_error_set(WEFT_ERR_RUNTIME, "mat2 must be a matrix, got %d-D tensor", mat2->ndim);
        return NULL;
    }
    if (mat1->shape[1] != mat2->shape[0]) {
        weft_error_set(WEFT_ERR_RUNTIME,
                       "mat1 and mat2 shapes cannot be multiplied (%lldx%lld and %lldx%lld)",
                       (long long)mat1->shape[0], (long long)mat1->shape[1],
                       (long long)mat2->shape[0], (long long)mat2->shape[1]);
        return NULL;
    }
    const int64_t shape[2] = {mat1->shape[0], mat2->shape[1]};
    if (check_expands(input, 2, shape) != 0 || check_dtypes(input, mat1, mat2) != 0)
        return NULL;
    return run("AddmmBackward0", input, mat1, mat2, beta, alpha, false);
}

weft_tensor *weft_baddbmm(weft_tensor *input, weft_tensor *batch1, weft_tensor *batch2,
                          double beta, double alpha)
{
    if (!input || !batch1 || !batch2)
        return NULL;
    weft_tensor *in[3] = {input, batch1, batch2};
    OP_AUTOCAST_RETURN(BADDBMM, 3, in, weft_baddbmm(in[0], in[1], in[2], beta, alpha));
    if (batch1->ndim != 3) {
        weft_error_set(WEFT_ERR_RUNTIME, "batch1 must be a 3D tensor");
        return NULL;
    }
    if (batch2->ndim != 3) {
        weft_error_set(WEFT_ERR_RUNTIME, "batch2 must be a 3D tensor");
        return NULL;
    }
    if (batch2->shape[0] != batch1->shape[0] || batch2->shape[1] != batch1->shape[2]) {
        weft_error_set(WEFT_ERR_RUNTIME,
                       "Expected size for first two dimensions of batch2 tensor to be: "
                       "[%lld, %lld] but got: [%lld, %lld].",
                       (long long)batch1->shape[0], (long long)batch1->shape[2],
                       (long long)batch2->shape[0], (long long)batch2->shape[1]);
        return NULL;
    }
    const int64_t shape[3] = {batch1->shape[0], batch1->shape[1], batch2->shape[2]};
    if (check_expands(input, 3, shape) != 0)
        return NULL;
    const weft_tensor *all[3] = {input, batch1, batch2};
    if (weft_check_same_device(3, all) != 0)
        return NULL;
    if (batch1->dtype != batch2->dtype) {
        weft_error_set(WEFT_ERR_RUNTIME, "expected scalar type %s but found %s",
                       weft_dtype_torch_name(batch1->dtype), weft_dtype_torch_name(batch2->dtype));
        return NULL;
    }
    /* PyTorch 1.13 casts a baddbmm input of another dtype to the batches' */
    if (input->dtype == batch1->dtype)
        return run("BaddbmmBackward0", input, batch1, batch2, beta, alpha, true);
    weft_tensor *cast = weft_to_dtype(input, batch1->dtype);
    weft_tensor *out = cast ? run("BaddbmmBackward0", cast, batch1, batch2, beta, alpha, true)
                            : NULL;
    if (weft_scope_depth() == 0)
        weft_tensor_release(cast);
    return out;
}
