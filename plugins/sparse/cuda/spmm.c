/* plugins/sparse/cuda/spmm.c: "sparse_mm" (C = beta * C + alpha * op(A) @ B, see
 * sparse_impl.h) on CUDA through cusparseSpMM.
 *
 * C is contiguous, so it is always a row-major cuSPARSE matrix. B is read in place when
 * its strides allow: row-major as itself, column-major as the row-major matrix B^T with
 * opB = TRANSPOSE (PyTorch's way: cuSPARSE wants B and C in one order). Any other B is
 * made contiguous first. The algorithm is CSR_ALG2 (the row-major one) for A @ B on CSR,
 * cuSPARSE's default otherwise; a combination cuSPARSE refuses (NOT_SUPPORTED, or
 * INVALID_VALUE from releases that say so instead) is retried with the default
 * algorithm, then with a contiguous B. Empty products (no
 * specified element, or K == 0) never reach cuSPARSE: C is only scaled by beta. */
#include <stdio.h>

#include "sparse_cuda.h"

struct spmm {
    const weft_tensor *a;
    const struct sparse_data *s;
    const weft_tensor *b;
    weft_tensor *c;
    bool trans;     /* op(A) = A^T */
    int64_t rows_b; /* rows of B: op(A)'s columns */
    double alpha, beta;
};

/* Reads and checks the call; the front end has checked shapes already, so a failure
 * here means a caller broke the kernel contract. */
static int spmm_setup(const struct weft_op_call *call, struct spmm *p)
{
    const char *what = "sparse_mm kernel";
    if (call->nin < 2 || call->nout < 1 || !call->in[0] || !call->in[1] || !call->out[0])
        return weft_error_set(WEFT_ERR_RUNTIME, "%s: expected in[0] sparse A, in[1] dense B and "
                                                "out[0] dense C", what);
    const weft_tensor *a = call->in[0], *b = call->in[1];
    weft_tensor *c = call->out[0];
    const struct sparse_data *s = weft_tensor_layout_data(a);
    int rc = sc_check_sparse(a, s, what);
    if (rc != 0)
        return rc;
    bool trans = call->ints[0] != 0;
    int64_t rows_c = trans ? a->shape[1] : a->shape[0];
    int64_t rows_b = trans ? a->shape[0] : a->shape[1];
    if (b->layout != WEFT_LAYOUT_STRIDED || c->layout != WEFT_LAYOUT_STRIDED || b->ndim != 2 ||
        c->ndim != 2 || b->shape[0] != rows_b || c->shape[0] != rows_c ||
        c->shape[1] != b->shape[1] || !weft_tensor_is_contiguous(c))
        return weft_error_set(WEFT_ERR_RUNTIME, "%s: expected op(A) [%lld, %lld] @ B [%lld, N] into "
                                                "a contiguous C [%lld, N]", what,
                              (long long)rows_c, (long long)rows_b, (long long)rows_b,
                              (long long)rows_c);
    if (b->dtype != a->dtype || c->dtype != a->dtype || s->values->dtype != a->dtype ||
        !weft_tensor_is_contiguous(s->values))
        return weft_error_set(WEFT_ERR_TYPE, "%s: A's values, B and C must be of A's dtype %s",
                              what, weft_dtype_name(a->dtype));
    if (!weft_device_equal(b->device, a->device) || !weft_device_equal(c->device, a->device))
        return weft_error_set(WEFT_ERR_RUNTIME, "%s: A, B and C must be on one device", what);
    if (a->layout == sparse_coo_layout && !s->coalesced)
        return weft_error_set(WEFT_ERR_RUNTIME, "%s: cuSPARSE needs a coalesced COO operand", what);
    *p = (struct spmm){.a = a, .s = s, .b = b, .c = c, .trans = trans, .rows_b = rows_b,
                       .alpha = call->scalar[0], .beta = call->scalar[1]};
    return 0;
}

/* C = beta * C, for products that are all zeros. beta == 0 writes zeros without reading
 * C, as BLAS does. */
static int scale_only(weft_tensor *c, double beta)
{
    if (beta == 0.0)
        return sc_zero(c);
    if (beta == 1.0)
        return 0;
    struct weft_op_call mul = {.op = WEFT_OP_MUL, .nin = 2, .nout = 1};
    mul.in[0] = c;
    mul.in[1] = NULL; /* the right operand is scalar[0] */
    mul.out[0] = c;
    mul.scalar[0] = beta;
    return weft_dispatch(&mul);
}

/* B as cuSPARSE reads it: the descriptor's shape and order, and opB. */
struct b_operand {
    const weft_tensor *t;
    struct sc_dense_view view;
    cusparseOperation_t op;
};

/* False when B's strides fit neither order. */
static bool b_operand(const weft_tensor *b, struct b_operand *o)
{
    struct sc_dense_view v;
    if (!sc_dense_view(b->shape[0], b->shape[1], b->stride[0], b->stride[1], &v))
        return false;
    o->t = b;
    if (v.order == CUSPARSE_ORDER_ROW) {
        o->view = v;
        o->op = CUSPARSE_OPERATION_NON_TRANSPOSE;
    } else {
        /* Column-major [R, N] with ld is the row-major [N, R] with the same ld. */
        o->view = (struct sc_dense_view){v.cols, v.rows, v.ld, CUSPARSE_ORDER_ROW};
        o->op = CUSPARSE_OPERATION_TRANSPOSE;
    }
    return true;
}

/* alpha and beta in the compute type (cuSPARSE reads them through host pointers). */
struct scalars {
    float f[2];
    double d[2];
};

enum { ATTEMPT_REFUSED = 1 };

/* Why the last attempt was refused, for the error when every attempt is. */
struct refusal {
    cusparseStatus_t status;
    const char *call;
    cusparseSpMMAlg_t alg;
};

/* cuSPARSE answers a combination it does not implement with NOT_SUPPORTED, and some
 * releases with INVALID_VALUE; either way nothing was queued, and another algorithm or
 * B layout may be accepted. */
static int refused_or_checked(cusparseStatus_t st, const char *call, cusparseSpMMAlg_t alg,
                              struct refusal *why, int line)
{
    if (st != CUSPARSE_STATUS_NOT_SUPPORTED && st != CUSPARSE_STATUS_INVALID_VALUE)
        return sc_cusparse_check(st, call, __FILE__, line);
    *why = (struct refusal){st, call, alg};
    return ATTEMPT_REFUSED;
}

/* One cusparseSpMM with a given algorithm and B: 0 when queued, ATTEMPT_REFUSED (no
 * error set, nothing queued, *why filled) when cuSPARSE refuses the combination,
 * negative with error otherwise. */
static int attempt(const struct spmm *p, const struct sc_ctx *ctx, const struct b_operand *b,
                   cusparseSpMMAlg_t alg, struct refusal *why)
{
    cudaDataType vt = sc_value_type(p->a->dtype);
    struct scalars sc = {{(float)p->alpha, (float)p->beta}, {p->alpha, p->beta}};
    const void *alpha = vt == CUDA_R_64F ? (const void *)&sc.d[0] : (const void *)&sc.f[0];
    const void *beta = vt == CUDA_R_64F ? (const void *)&sc.d[1] : (const void *)&sc.f[1];
    cusparseOperation_t op_a = p->trans ? CUSPARSE_OPERATION_TRANSPOSE
                                        : CUSPARSE_OPERATION_NON_TRANSPOSE;
    int64_t n = p->c->shape[1];
    cusparseSpMatDescr_t da = NULL;
    cusparseConstDnMatDescr_t db = NULL;
    cusparseDnMatDescr_t dc = NULL;
    size_t size = 0;
    void *workspace = NULL;
    cusparseStatus_t st;

    int rc = sc_sparse_descr(p->a, p->s, weft_tensor_data(p->s->values), &da);
    if (rc == 0)
        rc = CUSPARSE_CHECK(cusparseCreateConstDnMat(&db, b->view.rows, b->view.cols, b->view.ld,
                                                     weft_tensor_data(b->t), vt,
                                                     CUSPARSE_ORDER_ROW));
    if (rc == 0)
        rc = CUSPARSE_CHECK(cusparseCreateDnMat(&dc, p->c->shape[0], n, n, weft_tensor_data(p->c),
                                                vt, CUSPARSE_ORDER_ROW));
    if (rc == 0) {
        st = cusparseSpMM_bufferSize(ctx->handle, op_a, b->op, alpha, da, db, beta, dc, vt, alg,
                                     &size);
        rc = refused_or_checked(st, "cusparseSpMM_bufferSize", alg, why, __LINE__);
    }
    if (rc == 0)
        rc = sc_workspace(p->c->device, size, &workspace);
    if (rc == 0) {
        st = cusparseSpMM(ctx->handle, op_a, b->op, alpha, da, db, beta, dc, vt, alg, workspace);
        rc = refused_or_checked(st, "cusparseSpMM", alg, why, __LINE__);
    }
    /* Destroying a descriptor only frees host memory; a failure there is not worth
     * hiding the result for. */
    if (da)
        (void)cusparseDestroySpMat(da);
    if (db)
        (void)cusparseDestroyDnMat(db);
    if (dc)
        (void)cusparseDestroyDnMat(dc);
    return rc;
}

static cusparseSpMMAlg_t preferred_alg(const struct spmm *p)
{
    if (!p->trans && p->a->layout == sparse_csr_layout)
        return CUSPARSE_SPMM_CSR_ALG2;
    return CUSPARSE_SPMM_ALG_DEFAULT;
}

/* The product through cuSPARSE, with the fallbacks the file comment lists. The handle
 * is held across the attempts; making B contiguous dispatches a copy kernel, which does
 * not touch it. */
static int spmm_cusparse(const struct spmm *p, const struct b_operand *b0)
{
    struct sc_ctx ctx;
    if (sc_acquire(p->a->device.index, &ctx) != 0)
        return weft_error_code();
    struct refusal why = {CUSPARSE_STATUS_SUCCESS, "", CUSPARSE_SPMM_ALG_DEFAULT};
    cusparseSpMMAlg_t alg = preferred_alg(p);
    int rc = attempt(p, &ctx, b0, alg, &why);
    if (rc == ATTEMPT_REFUSED && alg != CUSPARSE_SPMM_ALG_DEFAULT)
        rc = attempt(p, &ctx, b0, CUSPARSE_SPMM_ALG_DEFAULT, &why);
    if (rc == ATTEMPT_REFUSED && !weft_tensor_is_contiguous(b0->t)) {
        struct b_operand b1;
        const weft_tensor *bc = weft_contiguous((weft_tensor *)b0->t);
        if (!bc)
            rc = weft_error_code();
        else if (!b_operand(bc, &b1))
            rc = weft_error_set(WEFT_ERR_RUNTIME, "sparse_mm on cuda: a contiguous B is not "
                                                  "row-major");
        else
            rc = attempt(p, &ctx, &b1, CUSPARSE_SPMM_ALG_DEFAULT, &why);
    }
    sc_release(&ctx);
    if (rc == ATTEMPT_REFUSED)
        rc = weft_error_set(why.status == CUSPARSE_STATUS_NOT_SUPPORTED ? WEFT_ERR_NOT_IMPLEMENTED
                                                                        : WEFT_ERR_DEVICE,
                            "cuSPARSE error: %s (%s, algorithm %d, for %s%s @ dense of %s)",
                            cusparseGetErrorString(why.status), why.call, (int)why.alg,
                            p->a->layout == sparse_csr_layout ? "sparse_csr" : "sparse_coo",
                            p->trans ? "^T" : "", weft_dtype_name(p->a->dtype));
    return rc;
}

static int spmm_scoped(const struct weft_op_call *call)
{
    struct spmm p = {0};
    int rc = spmm_setup(call, &p);
    if (rc != 0)
        return rc;
    if (weft_tensor_numel(p.c) == 0)
        return 0;
    if (sc_set_device(p.a->device.index) != 0)
        return weft_error_code();
    if (sparse_nnz(p.s) == 0 || p.rows_b == 0)
        return scale_only(p.c, p.beta);
    struct b_operand b;
    if (!b_operand(p.b, &b)) {
        const weft_tensor *bc = weft_contiguous((weft_tensor *)p.b);
        if (!bc)
            return weft_error_code();
        if (!b_operand(bc, &b))
            return weft_error_set(WEFT_ERR_RUNTIME, "sparse_mm on cuda: a contiguous B is not "
                                                    "row-major");
    }
    return spmm_cusparse(&p, &b);
}

/* Temporaries (a contiguous B, the workspace) live in a scope and go back to the
 * caching allocator once the work is queued: their blocks belong to the current stream,
 * on which any later use is ordered after this product. */
int sc_spmm_kernel(const struct weft_op_call *call)
{
    weft_scope_push();
    int rc = spmm_scoped(call);
    weft_scope_pop();
    return rc;
}
