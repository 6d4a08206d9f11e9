/* ops/matmul.c: torch.matmul.
 *
 * Every case becomes [B, M, K] x [B, K, N] -> [B, M, N] views for the MATMUL kernel: a 1-D
 * left operand is a row [1, K], a 1-D right operand a column [K, 1] (the size-1 dim is
 * left out of the result), and the broadcast batch dims are flattened into B where their
 * strides allow; otherwise the kernel runs once per index of the outer batch dims. */
#include <string.h>

#include "internal.h"

/* PyTorch's message for mismatched inner sizes, which depends on the path it takes. */
static int size_mismatch(const weft_tensor *a, const weft_tensor *b, int64_t batch)
{
    int64_t ka = a->shape[a->ndim - 1], kb = b->ndim == 1 ? b->shape[0] : b->shape[b->ndim - 2];
    long long rows = 1;
    for (int d = 0; d < a->ndim - 1; d++)
        rows *= a->shape[d];
    if (a->ndim == 1 && b->ndim == 1)
        return weft_error_set(
            WEFT_ERR_RUNTIME,
            "inconsistent tensor size, expected tensor [%lld] and src [%lld] to have "
            "the same number of elements, but got %lld and %lld elements respectively",
            (long long)ka, (long long)kb, (long long)ka, (long long)kb);
    if (b->ndim == 1) /* mv, after folding a's leading dims */
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "size mismatch, got input (%lld), mat (%lldx%lld), vec (%lld)", rows,
                              rows, (long long)ka, (long long)kb);
    if (b->ndim == 2) /* mm, after folding a's leading dims */
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "mat1 and mat2 shapes cannot be multiplied (%lldx%lld and %lldx%lld)",
                              rows, (long long)ka, (long long)kb, (long long)b->shape[1]);
    return weft_error_set(
        WEFT_ERR_RUNTIME,
        "Expected size for first two dimensions of batch2 tensor to be: [%lld, %lld] "
        "but got: [%lld, %lld].",
        (long long)batch, (long long)ka, (long long)batch, (long long)kb);
}

static int check_args(const weft_tensor *a, const weft_tensor *b)
{
    if (a->ndim == 0 || b->ndim == 0)
        return weft_error_set(
            WEFT_ERR_RUNTIME,
            "both arguments to matmul need to be at least 1D, but they are %dD and %dD", a->ndim,
            b->ndim);
    const weft_tensor *both[2] = {a, b};
    if (weft_check_same_device(2, both) != 0)
        return weft_error_code();
    if (a->layout != WEFT_LAYOUT_STRIDED || b->layout != WEFT_LAYOUT_STRIDED)
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED,
                              "matmul: only strided tensors are supported");
    /* PyTorch 1.13's words: dot's for two vectors, the GEMM's dtype check otherwise */
    if (a->dtype != b->dtype && a->ndim == 1 && b->ndim == 1)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "dot : expected both vectors to have same dtype, but found %s and %s",
                              weft_dtype_torch_name(a->dtype), weft_dtype_torch_name(b->dtype));
    if (a->dtype != b->dtype)
        return weft_error_set(WEFT_ERR_RUNTIME, "expected scalar type %s but found %s",
                              weft_dtype_torch_name(a->dtype), weft_dtype_torch_name(b->dtype));
    return 0;
}

/* The broadcast batch dims with each operand's strides over them (0 where broadcast). */
struct batch {
    int n;
    int64_t shape[WEFT_MAX_DIMS], sa[WEFT_MAX_DIMS], sb[WEFT_MAX_DIMS], so[WEFT_MAX_DIMS];
};

static void operand_batch_strides(const weft_tensor *t, int nb_t, const struct batch *bt,
                                  int64_t *strides)
{
    for (int i = 0; i < bt->n; i++) {
        int d = i - (bt->n - nb_t);
        strides[i] = d >= 0 && t->shape[d] != 1 ? t->stride[d] : 0;
    }
}

/* Drops size-1 batch dims and merges neighbours that are contiguous for all three. */
static void coalesce_batch(struct batch *bt)
{
    int m = 0;
    for (int i = 0; i < bt->n; i++) {
        if (bt->shape[i] == 1)
            continue;
        if (m > 0 && bt->sa[m - 1] == bt->shape[i] * bt->sa[i] &&
            bt->sb[m - 1] == bt->shape[i] * bt->sb[i] &&
            bt->so[m - 1] == bt->shape[i] * bt->so[i]) {
            bt->shape[m - 1] *= bt->shape[i];
            bt->sa[m - 1] = bt->sa[i];
            bt->sb[m - 1] = bt->sb[i];
            bt->so[m - 1] = bt->so[i];
            continue;
        }
        bt->shape[m] = bt->shape[i];
        bt->sa[m] = bt->sa[i];
        bt->sb[m] = bt->sb[i];
        bt->so[m] = bt->so[i];
        m++;
    }
    bt->n = m;
}

/* [B, rows, cols] view of t at element offset `offset`. */
static weft_tensor *view3(weft_tensor *t, int64_t offset, int64_t B, int64_t sbatch, int64_t rows,
                          int64_t srow, int64_t cols, int64_t scol)
{
    const int64_t shape[3] = {B, rows, cols}, stride[3] = {sbatch, srow, scol};
    return weft_tensor_alias(t, 3, shape, stride, offset);
}

struct mm_plan {
    int64_t M, K, N;
    int64_t a_srow, a_scol, b_srow, b_scol, o_srow, o_scol;
};

/* One kernel call per index of the batch dims before the last (coalesced) one. */
static int run_batches(weft_tensor *a, weft_tensor *b, weft_tensor *out, const struct batch *bt,
                       const struct mm_plan *p)
{
    int outer = bt->n > 0 ? bt->n - 1 : 0;
    int64_t B = bt->n > 0 ? bt->shape[bt->n - 1] : 1;
    int64_t sa = bt->n > 0 ? bt->sa[bt->n - 1] : 0, sb = bt->n > 0 ? bt->sb[bt->n - 1] : 0,
            so = bt->n > 0 ? bt->so[bt->n - 1] : 0;
    int64_t calls = 1, idx[WEFT_MAX_DIMS] = {0};
    for (int i = 0; i < outer; i++)
        calls *= bt->shape[i];
    for (int64_t c = 0; c < calls; c++) {
        int64_t oa = a->offset, ob = b->offset, oo = out->offset;
        for (int i = 0; i < outer; i++) {
            oa += idx[i] * bt->sa[i];
            ob += idx[i] * bt->sb[i];
            oo += idx[i] * bt->so[i];
        }
        struct weft_op_call call = {.op = WEFT_OP_MATMUL, .nin = 2, .nout = 1};
        call.in[0] = view3(a, oa, B, sa, p->M, p->a_srow, p->K, p->a_scol);
        call.in[1] = view3(b, ob, B, sb, p->K, p->b_srow, p->N, p->b_scol);
        call.out[0] = view3(out, oo, B, so, p->M, p->o_srow, p->N, p->o_scol);
        if (!call.in[0] || !call.in[1] || !call.out[0] || weft_dispatch(&call) != 0)
            return weft_error_code();
        for (int i = outer - 1; i >= 0 && ++idx[i] == bt->shape[i]; i--)
            idx[i] = 0;
    }
    return 0;
}

static weft_tensor *matmul_in_scope(weft_tensor *a, weft_tensor *b)
{
    struct mm_plan p;
    p.M = a->ndim >= 2 ? a->shape[a->ndim - 2] : 1;
    p.K = a->shape[a->ndim - 1];
    p.N = b->ndim >= 2 ? b->shape[b->ndim - 1] : 1;
    int64_t kb = b->ndim >= 2 ? b->shape[b->ndim - 2] : b->shape[0];
    /* Batch dims: all but the matrix dims, broadcast together. */
    int nba = a->ndim > 2 ? a->ndim - 2 : 0, nbb = b->ndim > 2 ? b->ndim - 2 : 0;
    struct batch bt;
    if (weft_broadcast_shapes(nba, a->shape, nbb, b->shape, &bt.n, bt.shape) != 0)
        return NULL;
    int64_t batch = 1;
    for (int i = 0; i < bt.n; i++)
        batch *= bt.shape[i];
    if (p.K != kb) {
        size_mismatch(a, b, batch);
        return NULL;
    }
    int64_t oshape[WEFT_MAX_DIMS];
    int ond = bt.n;
    memcpy(oshape, bt.shape, (size_t)bt.n * sizeof *oshape);
    if (a->ndim >= 2)
        oshape[ond++] = p.M;
    if (b->ndim >= 2)
        oshape[ond++] = p.N;
    weft_tensor *out = weft_empty(ond, oshape, a->dtype, a->device);
    if (!out)
        return NULL;
    /* Matrix strides; a size-1 dim that is not really there gets stride 0. */
    p.a_scol = a->stride[a->ndim - 1];
    p.a_srow = a->ndim >= 2 ? a->stride[a->ndim - 2] : 0;
    p.b_srow = b->ndim >= 2 ? b->stride[b->ndim - 2] : b->stride[0];
    p.b_scol = b->ndim >= 2 ? b->stride[b->ndim - 1] : 0;
    p.o_scol = b->ndim >= 2 ? 1 : 0;
    p.o_srow = a->ndim >= 2 ? (b->ndim >= 2 ? p.N : 1) : 0;
    operand_batch_strides(a, nba, &bt, bt.sa);
    operand_batch_strides(b, nbb, &bt, bt.sb);
    int64_t step = p.M * p.N;
    for (int i = bt.n - 1; i >= 0; i--) {
        bt.so[i] = step;
        step *= bt.shape[i];
    }
    coalesce_batch(&bt);
    if (weft_tensor_numel(out) == 0 && p.K > 0)
        return out;
    return run_batches(a, b, out, &bt, &p) == 0 ? out : NULL;
}

static weft_tensor *matmul_forward(weft_tensor *a, weft_tensor *b)
{
    if (!a || !b || check_args(a, b) != 0)
        return NULL;
    weft_scope_push();
    weft_tensor *result = weft_tensor_retain(matmul_in_scope(a, b));
    weft_scope_pop();
    return weft_tensor_finish(result);
}

/* ---- backward and the public ops ------------------------------------------------------------
 * Saved: 0 a (when b needs a gradient), 1 b (when a does), as PyTorch saves only what the
 * gradients to compute read: x @ C with C needing none survives a later x.add_(1).
 * ints[0]: b was a column-major matrix. 1-D operands are handled as PyTorch's matmul
 * promotes them; broadcast batch dims are summed by the engine. */

/* True for a 2-D matrix stored column by column (a transposed view of a contiguous one). */
static bool column_major(const weft_tensor *t)
{
    return t->ndim == 2 && t->stride[0] == 1 && t->stride[1] == t->shape[0] && t->shape[0] > 1;
}

static int matmul_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                           weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0], *a = weft_node_saved(node, 0), *b = weft_node_saved(node, 1);
    if (!g)
        return 0;
    bool need_a = weft_node_needs_input_grad(node, 0), need_b = weft_node_needs_input_grad(node, 1);
    int and = weft_node_input_ndim(node, 0), bnd = weft_node_input_ndim(node, 1);
    if (and == 1 && bnd == 1) {
        grad_inputs[0] = need_a ? weft_mul(g, b) : NULL;
        grad_inputs[1] = need_b ? weft_mul(g, a) : NULL;
    } else {
        /* Promote 1-D operands (and the gradient) the way the forward did. */
        weft_tensor *g2 = g;
        if (and == 1)
            g2 = weft_unsqueeze(g2, -2);
        if (bnd == 1)
            g2 = weft_unsqueeze(g2, -1);
        if (need_a) {
            weft_tensor *b2 = bnd == 1 ? weft_unsqueeze(b, 1) : b;
            weft_tensor *ga = weft_matmul(g2, weft_transpose(b2, -1, -2));
            grad_inputs[0] = and == 1 ? weft_squeeze_dim(ga, -2) : ga;
        }
        if (need_b) {
            /* A transposed b (Linear's W^T) gets its gradient in its own layout, as
             * PyTorch's mm_mat2_backward: (g^T a)^T, whose transpose back to W is
             * contiguous, where a^T g would be a transposed copy to make later. */
            weft_tensor *a2 = and == 1 ? weft_unsqueeze(a, 0) : a;
            weft_tensor *gb = weft_node_ints(node)[0] && a2 && a2->ndim == 2
                                  ? weft_t(weft_matmul(weft_t(g2), a2))
                                  : weft_matmul(weft_transpose(a2, -1, -2), g2);
            grad_inputs[1] = bnd == 1 ? weft_squeeze_dim(gb, -1) : gb;
        }
    }
    if ((need_a && !grad_inputs[0]) || (need_b && !grad_inputs[1]))
        return weft_error_code();
    return 0;
}

/* One node does every case; it carries the name of the op PyTorch 1.13's matmul ends
 * in for those ranks (dot, mv, mm; 1-D @ 2-D squeezes an mm; batched cases fold into
 * bmm/mm and _unsafe_view, except 2-D @ batched, which expands and clones). */
static const char *matmul_name(const weft_tensor *a, const weft_tensor *b)
{
    if (!a || !b)
        return OP_GRAD_FN(MATMUL);
    if (a->ndim == 1 && b->ndim == 1)
        return "DotBackward0";
    if (a->ndim == 2 && b->ndim == 1)
        return "MvBackward0";
    if (a->ndim == 1 && b->ndim == 2)
        return "SqueezeBackward3";
    if (a->ndim == 2 && b->ndim == 2)
        return OP_GRAD_FN(MM);
    if (a->ndim == 2)
        return "CloneBackward0";
    return "UnsafeViewBackward0";
}

/* mm and bmm take no mixed dtypes, with PyTorch's text (matmul has its own). */
static int check_same_dtype(const weft_tensor *a, const weft_tensor *b)
{
    if (a->dtype == b->dtype)
        return 0;
    return weft_error_set(WEFT_ERR_RUNTIME, "expected scalar type %s but found %s",
                          weft_dtype_torch_name(a->dtype), weft_dtype_torch_name(b->dtype));
}

/* matmul under one node named `name` (the forward's own name, or mm/bmm's). */
static weft_tensor *matmul_named(weft_tensor *a, weft_tensor *b, const char *name)
{
    weft_tensor *in[2] = {a, b};
    bool rec = weft_autograd_needed_inline(2, in);
    weft_tensor *out = WEFT_NO_GRAD(rec, matmul_forward(a, b));
    if (!rec)
        return out;
    struct weft_node *node = weft_node_create(name ? name : matmul_name(a, b), matmul_backward,
                                              2, in, 2);
    if (node && out &&
        (weft_node_save(node, 0, weft_node_needs_input_grad(node, 1) ? a : NULL) != 0 ||
         weft_node_save(node, 1, weft_node_needs_input_grad(node, 0) ? b : NULL) != 0)) {
        weft_node_abandon(node);
        return weft_tensor_discard(out);
    }
    if (node)
        weft_node_ints(node)[0] = column_major(b);
    return weft_node_finish1(node, out);
}

weft_tensor *weft_matmul(weft_tensor *a, weft_tensor *b)
{
    weft_tensor *in[2] = {a, b};
    OP_AUTOCAST_RETURN(MATMUL, 2, in, weft_matmul(in[0], in[1]));
    return matmul_named(a, b, NULL);
}

weft_tensor *weft_mm(weft_tensor *a, weft_tensor *b)
{
    if (!a || !b)
        return NULL;
    if (a->ndim != 2) {
        weft_error_set(WEFT_ERR_RUNTIME, "self must be a matrix");
        return NULL;
    }
    if (b->ndim != 2) {
        weft_error_set(WEFT_ERR_RUNTIME, "mat2 must be a matrix");
        return NULL;
    }
    if (a->shape[1] != b->shape[0]) {
        weft_error_set(WEFT_ERR_RUNTIME,
                       "mat1 and mat2 shapes cannot be multiplied (%lldx%lld and %lldx%lld)",
                       (long long)a->shape[0], (long long)a->shape[1], (long long)b->shape[0],
                       (long long)b->shape[1]);
        return NULL;
    }
    if (check_same_dtype(a, b) < 0)
        return NULL;
    weft_tensor *in[2] = {a, b};
    OP_AUTOCAST_RETURN(MM, 2, in, weft_mm(in[0], in[1]));
    return matmul_named(a, b, OP_GRAD_FN(MM));
}

weft_tensor *weft_bmm(weft_tensor *a, weft_tensor *b)
{
    if (!a || !b)
        return NULL;
    if (a->ndim != 3) {
        weft_error_set(WEFT_ERR_RUNTIME, "batch1 must be a 3D tensor");
        return NULL;
    }
    if (b->ndim != 3) {
        weft_error_set(WEFT_ERR_RUNTIME, "batch2 must be a 3D tensor");
        return NULL;
    }
    if (b->shape[0] != a->shape[0] || b->shape[1] != a->shape[2]) {
        weft_error_set(WEFT_ERR_RUNTIME,
                       "Expected size for first two dimensions of batch2 tensor to be: "
                       "[%lld, %lld] but got: [%lld, %lld].",
                       (long long)a->shape[0], (long long)a->shape[2], (long long)b->shape[0],
                       (long long)b->shape[1]);
        return NULL;
    }
    if (check_same_dtype(a, b) < 0)
        return NULL;
    weft_tensor *in[2] = {a, b};
    OP_AUTOCAST_RETURN(BMM, 2, in, weft_bmm(in[0], in[1]));
    return matmul_named(a, b, OP_GRAD_FN(BMM));
}

/* ---- torch.backends.cuda.matmul.allow_tf32 ------------------------------------------------- */

static bool allow_tf32_flag;

void weft_set_allow_tf32(bool allow)
{
    __atomic_store_n(&allow_tf32_flag, allow, __ATOMIC_RELAXED);
}

bool weft_allow_tf32(void)
{
    return __atomic_load_n(&allow_tf32_flag, __ATOMIC_RELAXED);
}
