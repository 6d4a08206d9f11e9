/* plugins/sparse/mm.c: torch.sparse.mm and torch.sparse.addmm: sparse [M, K] (CSR, or COO,
 * coalesced first) times dense [K, N] -> dense [M, N]; a 1-D dense [K] gives [M] (torch.mv).
 *
 * The front ends check their arguments with PyTorch's messages (which differ between COO
 * and CSR in PyTorch; each layout keeps its own), allocate the result on the sparse
 * tensor's device and run the "sparse_mm" kernel registered for (device type, layout,
 * dtype). The backward uses the same kernels, so it runs wherever the forward does:
 *   dense:  alpha * A^T @ G                     (sparse_mm with the transpose flag)
 *   sparse: alpha * SDDMM(A, G, B) on A's pattern, as a sparse tensor of A's layout whose
 *           index tensors are A's own objects (the constructors' backward then takes
 *           these values as the gradient of their values tensor)
 *   input:  beta * G (the engine sums it to input's shape).
 */
#include <string.h>

#include <weft.h>

#include "sparse_impl.h"

/* The op ids, registered on first use (weft_op_register is idempotent). */
static int op_id(const char *name, int *cache)
{
    int id = __atomic_load_n(cache, __ATOMIC_RELAXED);
    if (id > 0)
        return id;
    id = weft_op_register(name);
    if (id > 0)
        __atomic_store_n(cache, id, __ATOMIC_RELAXED);
    return id;
}

static int mm_op(void)
{
    static int cache;
    return op_id(SPARSE_OP_MM, &cache);
}

static int sddmm_op(void)
{
    static int cache;
    return op_id(SPARSE_OP_SDDMM, &cache);
}

/* The kernel of op for A's (device type, layout, dtype), or NULL with an error that names
 * what is missing. */
static weft_kernel_fn find_kernel(int op, const weft_tensor *A)
{
    if (op < 0)
        return NULL;
    weft_kernel_fn fn = weft_kernel_lookup(op, A->device.type, A->layout, A->dtype);
    if (fn)
        return fn;
    const char *dev = weft_device_type_name(A->device.type);
    if (weft_kernel_dtypes(op, A->device.type, A->layout) == 0) {
        weft_error_set(WEFT_ERR_NOT_IMPLEMENTED,
                       "no kernel for op '%s' on device '%s' with layout '%s'%s", weft_op_name(op),
                       dev, weft_layout_name(A->layout),
                       strcmp(dev, "cuda") == 0
                           ? " (CUDA sparse kernels come from weft-sparse-cuda.so, which "
                             "weft-sparse.so loads when the CUDA backend is usable)"
                           : "");
        return NULL;
    }
    weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "\"%s\" not implemented for '%s' on %s",
                   weft_op_name(op), weft_dtype_torch_name(A->dtype), dev);
    return NULL;
}

/* The dense operand as the kernels take it: a [K] vector as [K, 1]. */
static weft_tensor *as_matrix(const weft_tensor *t)
{
    return t->ndim == 1 ? weft_unsqueeze((weft_tensor *)t, 1) : (weft_tensor *)t;
}

/* C = beta * C + alpha * op(A) @ B through the kernel (C contiguous, 1-D or 2-D). */
static int run_mm(const weft_tensor *A, const weft_tensor *B, weft_tensor *C, double alpha,
                  double beta, bool transpose)
{
    if (!find_kernel(mm_op(), A)) /* its error names what is missing */
        return weft_error_code();
    struct weft_op_call call = {.op = mm_op(), .nin = 2, .nout = 1};
    call.in[0] = A;
    call.in[1] = as_matrix(B);
    call.out[0] = as_matrix(C);
    call.scalar[0] = alpha;
    call.scalar[1] = beta;
    call.ints[0] = transpose;
    if (!call.in[1] || !call.out[0])
        return weft_error_code();
    return weft_dispatch(&call); /* fn, through the funnel a profiler observes */
}

/* values[e] = sum_n G[row(e), n] * B[col(e), n] on A's pattern, a new [nnz] tensor. */
static weft_tensor *run_sddmm(const weft_tensor *A, const weft_tensor *G, const weft_tensor *B)
{
    int64_t nnz = weft_tensor_nnz(A);
    if (!find_kernel(sddmm_op(), A) || nnz < 0)
        return NULL;
    weft_tensor *out = weft_empty(1, &nnz, A->dtype, A->device);
    struct weft_op_call call = {.op = sddmm_op(), .nin = 3, .nout = 1};
    call.in[0] = A;
    call.in[1] = as_matrix(G);
    call.in[2] = as_matrix(B);
    call.out[0] = out;
    if (!out || !call.in[1] || !call.in[2] || weft_dispatch(&call) != 0)
        return NULL;
    return out;
}

/* ---- argument checks ------------------------------------------------------------------- */

static int check_device(const weft_tensor *A, const weft_tensor *other)
{
    if (!other || weft_device_equal(A->device, other->device))
        return 0;
    char a[32], b[32];
    return weft_error_set(WEFT_ERR_RUNTIME,
                          "Expected all tensors to be on the same device, but found at least "
                          "two devices, %s and %s!",
                          weft_device_str(other->device, a, sizeof a),
                          weft_device_str(A->device, b, sizeof b));
}

static int check_dtype(const weft_tensor *A, const weft_tensor *other)
{
    if (!other || other->dtype == A->dtype)
        return 0;
    return weft_error_set(WEFT_ERR_RUNTIME, "expected scalar type %s but found %s",
                          weft_dtype_torch_name(A->dtype), weft_dtype_torch_name(other->dtype));
}

static int check_strided(const weft_tensor *t, const char *what)
{
    if (t->layout == WEFT_LAYOUT_STRIDED)
        return 0;
    return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED,
                          "sparse_mm: expected %s to be a strided (dense) tensor, but got layout "
                          "%s",
                          what, weft_layout_name(t->layout));
}

/* PyTorch's checks of addmm(input, A, B), in its order and words (COO and CSR differ). */
static int check_args(const weft_tensor *input, const weft_tensor *A, const weft_tensor *B)
{
    if (!sparse_data_of(A, -1, "sparse_mm") || check_strided(B, "the dense operand") != 0 ||
        (input && check_strided(input, "input") != 0))
        return weft_error_code();
    bool csr = A->layout == sparse_csr_layout;
    if (A->ndim != 2)
        return weft_error_set(WEFT_ERR_RUNTIME, "addmm: matrices expected, got %dD tensor",
                              A->ndim);
    if (B->ndim != 1 && B->ndim != 2)
        return csr ? weft_error_set(WEFT_ERR_RUNTIME, "mat2 must be a matrix, got %d-D tensor",
                                    B->ndim)
                   : weft_error_set(WEFT_ERR_RUNTIME, "addmm: matrices expected, got %dD tensor",
                                    B->ndim);
    if (check_device(A, B) != 0 || check_device(A, input) != 0 || check_dtype(A, B) != 0 ||
        check_dtype(A, input) != 0)
        return weft_error_code();
    long long M = A->shape[0], K = A->shape[1], Kb = B->shape[0];
    if (Kb == K)
        return 0;
    if (B->ndim == 1)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "size mismatch, got input (%lld), mat (%lldx%lld), vec (%lld)", M, M,
                              K, Kb);
    if (csr)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "mat1 and mat2 shapes cannot be multiplied (%lldx%lld and %lldx%lld)",
                              M, K, Kb, (long long)B->shape[1]);
    return weft_error_set(WEFT_ERR_RUNTIME,
                          "addmm: Argument #3 (dense): Expected dim 0 size %lld, got %lld", K, Kb);
}

/* ---- forward ------------------------------------------------------------------------------ */

/* A itself, or its coalesced copy for an uncoalesced COO (the kernels want sorted rows). */
static weft_tensor *kernel_operand(const weft_tensor *A)
{
    const struct sparse_data *s = A->layout_data;
    if (A->layout != sparse_coo_layout || s->coalesced)
        return (weft_tensor *)A;
    return sparse_coalesce_nograd(A);
}

/* beta * input + alpha * A @ B inside the caller's scope (grad mode off). *used gets the
 * operand the kernel read (A or its coalesced copy). */
static weft_tensor *forward(const weft_tensor *input, const weft_tensor *A, const weft_tensor *B,
                            double beta, double alpha, weft_tensor **used)
{
    int64_t shape[2] = {A->shape[0], B->ndim == 2 ? B->shape[1] : 1};
    int ndim = B->ndim;
    weft_tensor *ex = input ? weft_expand((weft_tensor *)input, ndim, shape) : NULL;
    if (input && !ex)
        return NULL;
    weft_tensor *Ak = kernel_operand(A);
    weft_tensor *out = weft_empty(ndim, shape, A->dtype, A->device);
    if (!Ak || !out)
        return NULL;
    *used = Ak;
    if (!input || beta == 0) /* as PyTorch: beta == 0 ignores input, NaN included */
        beta = 0;
    else if (weft_copy_(out, ex) != 0)
        return NULL;
    if (weft_tensor_numel(out) == 0)
        return out;
    return run_mm(Ak, B, out, alpha, beta, false) == 0 ? out : NULL;
}

/* ---- backward ----------------------------------------------------------------------------- */

enum { SAVED_A, SAVED_B, SAVED_A_USED, NUM_SAVED };
enum { IN_INPUT, IN_SPARSE, IN_DENSE, NUM_INPUTS };

/* A sparse tensor of A's layout and pattern, with A's index tensors and these values. */
static weft_tensor *with_values(const weft_tensor *A, weft_tensor *values)
{
    const struct sparse_data *s = A->layout_data;
    if (A->layout == sparse_csr_layout)
        return sparse_make_csr(weft_tensor_retain(s->crow), weft_tensor_retain(s->col),
                               weft_tensor_retain(values), A->shape);
    return sparse_make_coo(weft_tensor_retain(s->indices), weft_tensor_retain(values), A->ndim,
                           A->shape, s->coalesced);
}

static weft_tensor *grad_dense(const weft_tensor *Au, weft_tensor *g, double alpha)
{
    int64_t shape[2] = {Au->shape[1], g->ndim == 2 ? g->shape[1] : 1};
    weft_tensor *gb = weft_empty(g->ndim, shape, g->dtype, g->device);
    if (!gb)
        return NULL;
    if (weft_tensor_numel(gb) == 0)
        return gb;
    return run_mm(Au, g, gb, alpha, 0.0, true) == 0 ? gb : NULL;
}

static weft_tensor *grad_sparse(const weft_tensor *A, weft_tensor *g, const weft_tensor *B,
                                double alpha)
{
    weft_tensor *values = run_sddmm(A, g, B);
    if (values && alpha != 1)
        values = weft_mul_scalar(values, alpha);
    return values ? with_values(A, values) : NULL;
}

static int spmm_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                         weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0];
    if (!g)
        return 0;
    double alpha = weft_node_scalars(node)[0], beta = weft_node_scalars(node)[1];
    weft_tensor *A = weft_node_saved(node, SAVED_A), *B = weft_node_saved(node, SAVED_B);
    weft_tensor *Au = weft_node_saved(node, SAVED_A_USED);
    if (weft_node_needs_input_grad(node, IN_INPUT) &&
        !(grad_inputs[IN_INPUT] = beta == 1 ? weft_autorelease(weft_tensor_retain(g))
                                            : weft_mul_scalar(g, beta)))
        return weft_error_code();
    if (weft_node_needs_input_grad(node, IN_DENSE) &&
        !(grad_inputs[IN_DENSE] = grad_dense(Au ? Au : A, g, alpha)))
        return weft_error_code();
    if (weft_node_needs_input_grad(node, IN_SPARSE) &&
        !(grad_inputs[IN_SPARSE] = grad_sparse(A, g, B, alpha)))
        return weft_error_code();
    return 0;
}

/* Makes out's grad_fn; on failure releases the caller's reference (with no scope open). */
static weft_tensor *record(weft_tensor *const *ins, weft_tensor *out, weft_tensor *used,
                           double beta, double alpha)
{
    const weft_tensor *A = ins[IN_SPARSE], *B = ins[IN_DENSE];
    struct weft_node *node = weft_node_create(B->ndim == 1 ? "MvBackward0" : "SparseAddmmBackward0",
                                              spmm_backward, NUM_INPUTS, ins, NUM_SAVED);
    if (!node)
        goto fail;
    weft_node_scalars(node)[0] = alpha;
    weft_node_scalars(node)[1] = beta;
    bool need_sparse = weft_node_needs_input_grad(node, IN_SPARSE);
    bool need_dense = weft_node_needs_input_grad(node, IN_DENSE);
    /* The dense gradient reads the operand the kernel read (A, or its coalesced copy); the
     * sparse one A's own pattern and B. */
    bool copy = used != A;
    if (((need_sparse || (need_dense && !copy)) &&
         weft_node_save(node, SAVED_A, ins[IN_SPARSE]) != 0) ||
        (need_sparse && weft_node_save(node, SAVED_B, ins[IN_DENSE]) != 0) ||
        (need_dense && copy && weft_node_save(node, SAVED_A_USED, used) != 0)) {
        weft_node_abandon(node);
        goto fail;
    }
    if (weft_node_finish(node, 1, &out) != 0)
        goto fail;
    return out;
fail:
    if (weft_scope_depth() == 0)
        weft_tensor_release(out);
    return NULL;
}

static weft_tensor *spmm(const weft_tensor *input, const weft_tensor *A, const weft_tensor *B,
                         double beta, double alpha)
{
    if (check_args(input, A, B) != 0 || !find_kernel(mm_op(), A))
        return NULL;
    weft_tensor *ins[NUM_INPUTS] = {(weft_tensor *)input, (weft_tensor *)A, (weft_tensor *)B};
    bool rec = weft_autograd_needed(NUM_INPUTS, ins);
    bool prev = weft_no_grad_begin();
    weft_scope_push();
    weft_tensor *used = NULL;
    weft_tensor *out = weft_tensor_retain(forward(input, A, B, beta, alpha, &used));
    weft_tensor_retain(used);
    weft_scope_pop();
    weft_grad_mode_restore(prev);
    out = weft_autorelease(out); /* NULL, out released, when it cannot be recorded */
    if (out && rec)
        out = record(ins, out, used, beta, alpha);
    weft_tensor_release(used);
    return out;
}

weft_tensor *sparse_api_mm(const weft_tensor *sparse, const weft_tensor *dense)
{
    if (!sparse || !dense)
        return NULL;
    return spmm(NULL, sparse, dense, 0.0, 1.0);
}

weft_tensor *sparse_api_addmm(const weft_tensor *input, const weft_tensor *sparse,
                              const weft_tensor *dense, double beta, double alpha)
{
    if (!input || !sparse || !dense)
        return NULL;
    return spmm(input, sparse, dense, beta, alpha);
}
