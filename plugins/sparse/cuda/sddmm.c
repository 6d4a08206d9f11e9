/* plugins/sparse/cuda/sddmm.c: "sparse_sddmm" (out[e] = sum_n G[row(e), n] * B[col(e), n],
 * see sparse_impl.h) on CUDA.
 *
 * CSR goes through cusparseSDDMM: C = G @ B^T sampled on A's pattern, with C's values
 * being `out` (zeroed first and beta = 0, so nothing stale is read). G [M, N] and
 * B^T [N, K] are read in place in whichever order their strides give. COO (cuSPARSE's
 * SDDMM takes CSR only), dense operands whose strides fit no order, and combinations
 * cuSPARSE refuses go to weft's own kernel (sddmm_kernels.cu), which takes any strides
 * and any element order. */
#include <stdio.h>

#include "sddmm_kernels.h"
#include "sparse_cuda.h"

struct sddmm {
    const weft_tensor *a;
    const struct sparse_data *s;
    const weft_tensor *g, *b;
    weft_tensor *out;
    int64_t m, k, n, nnz;
};

static bool is_dense_2d(const weft_tensor *t, int64_t rows, int64_t cols)
{
    return t->layout == WEFT_LAYOUT_STRIDED && t->ndim == 2 && t->shape[0] == rows &&
           t->shape[1] == cols;
}

/* Reads and checks the call; a failure means a caller broke the kernel contract. */
static int sddmm_setup(const struct weft_op_call *call, struct sddmm *p)
{
    const char *what = "sparse_sddmm kernel";
    if (call->nin < 3 || call->nout < 1 || !call->in[0] || !call->in[1] || !call->in[2] ||
        !call->out[0])
        return weft_error_set(WEFT_ERR_RUNTIME, "%s: expected in[0] sparse A, in[1] G, in[2] B "
                                                "and out[0]", what);
    const weft_tensor *a = call->in[0], *g = call->in[1], *b = call->in[2];
    weft_tensor *out = call->out[0];
    const struct sparse_data *s = weft_tensor_layout_data(a);
    int rc = sc_check_sparse(a, s, what);
    if (rc != 0)
        return rc;
    int64_t m = a->shape[0], k = a->shape[1], n = g->ndim == 2 ? g->shape[1] : -1;
    int64_t nnz = sparse_nnz(s);
    if (!is_dense_2d(g, m, n) || !is_dense_2d(b, k, n) || out->layout != WEFT_LAYOUT_STRIDED ||
        out->ndim != 1 || out->shape[0] != nnz || !weft_tensor_is_contiguous(out))
        return weft_error_set(WEFT_ERR_RUNTIME, "%s: expected A [%lld, %lld], G [%lld, N], "
                                                "B [%lld, N] and a contiguous out [%lld]", what,
                              (long long)m, (long long)k, (long long)m, (long long)k,
                              (long long)nnz);
    if (g->dtype != a->dtype || b->dtype != a->dtype || out->dtype != a->dtype)
        return weft_error_set(WEFT_ERR_TYPE, "%s: G, B and out must be of A's dtype %s", what,
                              weft_dtype_name(a->dtype));
    if (!weft_device_equal(g->device, a->device) || !weft_device_equal(b->device, a->device) ||
        !weft_device_equal(out->device, a->device))
        return weft_error_set(WEFT_ERR_RUNTIME, "%s: A, G, B and out must be on one device", what);
    *p = (struct sddmm){.a = a, .s = s, .g = g, .b = b, .out = out, .m = m, .k = k, .n = n,
                        .nnz = nnz};
    return 0;
}

enum { ATTEMPT_REFUSED = 1 };

/* NOT_SUPPORTED (or INVALID_VALUE, which some releases give instead) means cuSPARSE
 * queued nothing and weft's kernel should run. */
static int refused_or_checked(cusparseStatus_t st, const char *call, int line)
{
    if (st == CUSPARSE_STATUS_NOT_SUPPORTED || st == CUSPARSE_STATUS_INVALID_VALUE)
        return ATTEMPT_REFUSED;
    return sc_cusparse_check(st, call, __FILE__, line);
}

/* cusparseSDDMM with the handle held: 0, ATTEMPT_REFUSED, or negative with error. */
static int sddmm_descriptors(const struct sddmm *p, const struct sc_ctx *ctx,
                             const struct sc_dense_view *gv, const struct sc_dense_view *btv)
{
    cudaDataType vt = sc_value_type(p->a->dtype);
    const float one_f = 1, zero_f = 0;
    const double one_d = 1, zero_d = 0;
    const void *alpha = vt == CUDA_R_64F ? (const void *)&one_d : (const void *)&one_f;
    const void *beta = vt == CUDA_R_64F ? (const void *)&zero_d : (const void *)&zero_f;
    const cusparseOperation_t op = CUSPARSE_OPERATION_NON_TRANSPOSE;
    cusparseConstDnMatDescr_t dg = NULL, db = NULL;
    cusparseSpMatDescr_t dc = NULL;
    size_t size = 0;
    void *workspace = NULL;
    cusparseStatus_t st;

    int rc = CUSPARSE_CHECK(cusparseCreateConstDnMat(&dg, gv->rows, gv->cols, gv->ld,
                                                     weft_tensor_data(p->g), vt, gv->order));
    if (rc == 0)
        rc = CUSPARSE_CHECK(cusparseCreateConstDnMat(&db, btv->rows, btv->cols, btv->ld,
                                                     weft_tensor_data(p->b), vt, btv->order));
    if (rc == 0)
        rc = sc_sparse_descr(p->a, p->s, weft_tensor_data(p->out), &dc);
    if (rc == 0) {
        st = cusparseSDDMM_bufferSize(ctx->handle, op, op, alpha, dg, db, beta, dc, vt,
                                      CUSPARSE_SDDMM_ALG_DEFAULT, &size);
        rc = refused_or_checked(st, "cusparseSDDMM_bufferSize", __LINE__);
    }
    if (rc == 0)
        rc = sc_workspace(p->out->device, size, &workspace);
    if (rc == 0) {
        st = cusparseSDDMM(ctx->handle, op, op, alpha, dg, db, beta, dc, vt,
                           CUSPARSE_SDDMM_ALG_DEFAULT, workspace);
        rc = refused_or_checked(st, "cusparseSDDMM", __LINE__);
    }
    if (dg)
        (void)cusparseDestroyDnMat(dg);
    if (db)
        (void)cusparseDestroyDnMat(db);
    if (dc)
        (void)cusparseDestroySpMat(dc);
    return rc;
}

/* CSR through cuSPARSE: 0, ATTEMPT_REFUSED (nothing set), or negative with error. */
static int sddmm_cusparse(const struct sddmm *p)
{
    struct sc_dense_view gv, btv;
    /* B^T [N, K] has B's strides swapped. */
    if (!sc_dense_view(p->m, p->n, p->g->stride[0], p->g->stride[1], &gv) ||
        !sc_dense_view(p->n, p->k, p->b->stride[1], p->b->stride[0], &btv))
        return ATTEMPT_REFUSED;
    struct sc_ctx ctx;
    if (sc_acquire(p->a->device.index, &ctx) != 0)
        return weft_error_code();
    int rc = sc_zero(p->out);
    if (rc == 0)
        rc = sddmm_descriptors(p, &ctx, &gv, &btv);
    sc_release(&ctx);
    return rc;
}

/* weft's kernel: any layout, strides and element order. */
static int sddmm_custom(const struct sddmm *p)
{
    struct sc_sddmm_args args = {
        .dtype = p->a->dtype,
        .nnz = p->nnz,
        .m = p->m,
        .n = p->n,
        .g = weft_tensor_data(p->g),
        .g_rs = p->g->stride[0],
        .g_cs = p->g->stride[1],
        .b = weft_tensor_data(p->b),
        .b_rs = p->b->stride[0],
        .b_cs = p->b->stride[1],
        .out = weft_tensor_data(p->out),
    };
    if (p->a->layout == sparse_csr_layout) {
        args.csr = true;
        args.index_dtype = p->s->crow->dtype;
        args.rows = weft_tensor_data(p->s->crow);
        args.cols = weft_tensor_data(p->s->col);
    } else {
        const char *rows = weft_tensor_data(p->s->indices);
        args.csr = false;
        args.index_dtype = WEFT_I64;
        args.rows = rows;
        args.cols = rows + (size_t)p->nnz * sizeof(int64_t);
    }
    return SC_CUDA_CHECK(sc_sddmm_launch(&args, sc_stream(p->a->device.index)));
}

static int sddmm_scoped(const struct weft_op_call *call)
{
    struct sddmm p = {0};
    int rc = sddmm_setup(call, &p);
    if (rc != 0)
        return rc;
    if (p.nnz == 0)
        return 0;
    if (sc_set_device(p.a->device.index) != 0)
        return weft_error_code();
    if (p.n == 0)
        return sc_zero(p.out);
    if (p.a->layout == sparse_csr_layout) {
        rc = sddmm_cusparse(&p);
        if (rc != ATTEMPT_REFUSED)
            return rc;
    }
    return sddmm_custom(&p);
}

/* The workspace lives in a scope and goes back to the caching allocator once the work
 * is queued on the current stream, as in spmm.c. */
int sc_sddmm_kernel(const struct weft_op_call *call)
{
    weft_scope_push();
    int rc = sddmm_scoped(call);
    weft_scope_pop();
    return rc;
}
