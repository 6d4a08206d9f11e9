/* plugins/cuda/kernels_matmul.c: MATMUL ([B, M, K] x [B, K, N] -> [B, M, N]) through
 * cuBLAS's strided-batched GEMM.
 *
 * cuBLAS is column-major. A row-major C = A B is the column-major C^T = B^T A^T, and a
 * row-major matrix read as column-major is its transpose, so: C is computed as C^T with
 * ldc = C's row stride; an operand whose columns are unit-stride goes in as is (OP_N),
 * one whose rows are unit-stride (a transposed view) goes in as OP_T. Anything else (and
 * an output whose rows are not unit-stride) goes through a contiguous temporary, made
 * and copied back with the COPY kernel. Batch strides pass through, 0 included. */
#include <pthread.h>
#include <stdio.h>

#include <cublas_v2.h>

#include <weft/ops.h>

#include "cuda_plugin.h"

static cublasHandle_t handles[CUDA_MAX_DEVICES];
static pthread_mutex_t handle_lock = PTHREAD_MUTEX_INITIALIZER;

static int blas_check(cublasStatus_t status, const char *call, int line)
{
    if (status == CUBLAS_STATUS_SUCCESS)
        return 0;
    return weft_error_set(WEFT_ERR_DEVICE, "cuBLAS error: %s (%s at kernels_matmul.c:%d)",
                          cublasGetStatusString(status), call, line);
}
#define BLAS_CHECK(call) blas_check((call), #call, __LINE__)

/* The device's handle (made on first use), bound to its current stream. The caller has
 * made `index` the current device. */
static cublasHandle_t blas_handle(int index)
{
    pthread_mutex_lock(&handle_lock);
    if (!handles[index] && BLAS_CHECK(cublasCreate(&handles[index])) != 0)
        handles[index] = NULL;
    cublasHandle_t h = handles[index];
    pthread_mutex_unlock(&handle_lock);
    if (h && BLAS_CHECK(cublasSetStream(h, cuda_current_stream(index))) != 0)
        return NULL;
    return h;
}

void *cuda_blas_handle(int index)
{
    return blas_handle(index);
}

void cuda_blas_shutdown(void)
{
    pthread_mutex_lock(&handle_lock);
    for (int i = 0; i < CUDA_MAX_DEVICES; i++) {
        if (handles[i] && cudaSetDevice(i) == cudaSuccess)
            cublasDestroy(handles[i]);
        handles[i] = NULL;
    }
    pthread_mutex_unlock(&handle_lock);
}

void cuda_blas_version(char *buf, size_t size)
{
    int major = 0, minor = 0, patch = 0;
    if (cublasGetProperty(MAJOR_VERSION, &major) != CUBLAS_STATUS_SUCCESS ||
        cublasGetProperty(MINOR_VERSION, &minor) != CUBLAS_STATUS_SUCCESS ||
        cublasGetProperty(PATCH_LEVEL, &patch) != CUBLAS_STATUS_SUCCESS) {
        snprintf(buf, size, "cuBLAS");
        return;
    }
    snprintf(buf, size, "cuBLAS %d.%d.%d", major, minor, patch);
}

/* ---- operands ---------------------------------------------------------------------------- */

struct operand {
    cublasOperation_t op;
    int ld;
    long long batch_stride; /* elements */
    const void *data;
};

static bool fits_int(int64_t v)
{
    return v >= 0 && v <= INT32_MAX;
}

/* The row-major [rows, cols] matrix t[b] (dims 1 and 2 of t) as a cuBLAS operand of the
 * transposed product; false when neither dim is unit-stride. */
static bool as_operand(const weft_tensor *t, struct operand *o)
{
    int64_t rows = t->shape[1], cols = t->shape[2];
    int64_t srow = t->stride[1], scol = t->stride[2];
    int64_t ld;
    if (scol == 1 && (rows == 1 || srow >= (cols > 1 ? cols : 1))) {
        o->op = CUBLAS_OP_N;
        ld = rows == 1 ? (cols > 1 ? cols : 1) : srow;
    } else if (srow == 1 && (cols == 1 || scol >= (rows > 1 ? rows : 1))) {
        o->op = CUBLAS_OP_T;
        ld = cols == 1 ? (rows > 1 ? rows : 1) : scol;
    } else {
        return false;
    }
    if (!fits_int(ld))
        return false;
    o->ld = (int)ld;
    o->batch_stride = t->shape[0] == 1 ? 0 : t->stride[0];
    o->data = weft_tensor_data(t);
    return true;
}

/* t itself when cuBLAS can read it, else a contiguous copy (in the caller's scope). */
static const weft_tensor *readable(const weft_tensor *t, struct operand *o)
{
    if (as_operand(t, o))
        return t;
    weft_tensor *c = weft_contiguous((weft_tensor *)t);
    if (!c || !as_operand(c, o))
        return NULL;
    return c;
}

/* ---- the GEMM -------------------------------------------------------------------------------- */

struct gemm {
    int m, n, k, batch; /* of the column-major product C^T = B^T A^T: m = N, n = M */
    struct operand a, b; /* a: the right factor B, b: the left factor A */
    void *c;
    int ldc;
    long long c_stride;
};

static int run_gemm(cublasHandle_t h, enum weft_dtype dt, const struct gemm *g)
{
    if (dt == WEFT_F32 && weft_allow_tf32()) {
        const float one = 1, zero = 0;
        return BLAS_CHECK(cublasGemmStridedBatchedEx(
            h, g->a.op, g->b.op, g->m, g->n, g->k, &one, g->a.data, CUDA_R_32F, g->a.ld,
            g->a.batch_stride, g->b.data, CUDA_R_32F, g->b.ld, g->b.batch_stride, &zero, g->c,
            CUDA_R_32F, g->ldc, g->c_stride, g->batch, CUBLAS_COMPUTE_32F_FAST_TF32,
            CUBLAS_GEMM_DEFAULT));
    }
    if (dt == WEFT_F32) {
        const float one = 1, zero = 0;
        return BLAS_CHECK(cublasSgemmStridedBatched(
            h, g->a.op, g->b.op, g->m, g->n, g->k, &one, g->a.data, g->a.ld, g->a.batch_stride,
            g->b.data, g->b.ld, g->b.batch_stride, &zero, g->c, g->ldc, g->c_stride, g->batch));
    }
    if (dt == WEFT_F64) {
        const double one = 1, zero = 0;
        return BLAS_CHECK(cublasDgemmStridedBatched(
            h, g->a.op, g->b.op, g->m, g->n, g->k, &one, g->a.data, g->a.ld, g->a.batch_stride,
            g->b.data, g->b.ld, g->b.batch_stride, &zero, g->c, g->ldc, g->c_stride, g->batch));
    }
    /* 16-bit floats: inputs and output in the dtype, accumulation in float. */
    cudaDataType_t type = dt == WEFT_F16 ? CUDA_R_16F : CUDA_R_16BF;
    const float one = 1, zero = 0;
    return BLAS_CHECK(cublasGemmStridedBatchedEx(
        h, g->a.op, g->b.op, g->m, g->n, g->k, &one, g->a.data, type, g->a.ld, g->a.batch_stride,
        g->b.data, type, g->b.ld, g->b.batch_stride, &zero, g->c, type, g->ldc, g->c_stride,
        g->batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

/* out's rows are unit-stride: it can be cuBLAS's C^T directly. */
static bool writable(const weft_tensor *out)
{
    int64_t M = out->shape[1], N = out->shape[2];
    return (out->stride[2] == 1 || N == 1) &&
           (M == 1 || out->stride[1] >= (N > 1 ? N : 1)) && fits_int(out->stride[1]);
}

static int dispatch_op(int op, weft_tensor *out, const weft_tensor *in, double scalar)
{
    struct weft_op_call call = {.op = op, .nin = in ? 1 : 0, .nout = 1};
    call.in[0] = in;
    call.out[0] = out;
    call.scalar[0] = scalar;
    return weft_dispatch(&call);
}

/* The product into `out` (rows unit-stride); the operands as they are or made readable. */
static int matmul_into(weft_tensor *out, const weft_tensor *a, const weft_tensor *b)
{
    int64_t B = out->shape[0], M = out->shape[1], N = out->shape[2], K = a->shape[2];
    if (!fits_int(B) || !fits_int(M) || !fits_int(N) || !fits_int(K))
        return weft_error_set(WEFT_ERR_RUNTIME, "matmul on cuda: sizes beyond 2^31 are not "
                                                "supported by cuBLAS");
    struct gemm g = {.m = (int)N, .n = (int)M, .k = (int)K, .batch = (int)B};
    if (!readable(b, &g.a) || !readable(a, &g.b))
        return weft_error_code();
    g.c = weft_tensor_data(out);
    g.ldc = M == 1 ? (int)(N > 1 ? N : 1) : (int)out->stride[1];
    g.c_stride = out->stride[0];
    cublasHandle_t h = blas_handle(out->device.index);
    if (!h)
        return weft_error_code();
    return run_gemm(h, out->dtype, &g);
}

static int matmul_scoped(const struct weft_op_call *call)
{
    const weft_tensor *a = call->in[0], *b = call->in[1];
    weft_tensor *out = call->out[0];
    if (a->ndim != 3 || b->ndim != 3 || out->ndim != 3 || a->shape[2] != b->shape[1] ||
        out->shape[1] != a->shape[1] || out->shape[2] != b->shape[2] || a->dtype != b->dtype ||
        a->dtype != out->dtype)
        return weft_error_set(WEFT_ERR_RUNTIME, "matmul kernel: expected [B, M, K] x [B, K, N] -> "
                                                "[B, M, N] of one dtype");
    if (out->shape[0] == 0 || out->shape[1] == 0 || out->shape[2] == 0)
        return 0;
    if (cuda_set_device(out->device.index) != 0)
        return weft_error_code();
    if (a->shape[2] == 0)
        return dispatch_op(WEFT_OP_FILL, out, NULL, 0.0);
    if (writable(out))
        return matmul_into(out, a, b);
    weft_tensor *tmp = weft_empty(3, out->shape, out->dtype, out->device);
    if (!tmp || matmul_into(tmp, a, b) != 0)
        return weft_error_code();
    return dispatch_op(WEFT_OP_COPY, out, tmp, 0.0);
}

/* Temporaries (contiguous copies) are released before returning; the caching allocator
 * keeps their memory off-limits to other streams until the queued work is done. */
static int matmul_kernel(const struct weft_op_call *call)
{
    weft_scope_push();
    int rc = matmul_scoped(call);
    weft_scope_pop();
    return rc;
}

const struct weft_kernel_entry cuda_matmul_kernels[] = {
    {WEFT_OP_MATMUL, NULL,
     WEFT_DTYPE_BIT(WEFT_F32) | WEFT_DTYPE_BIT(WEFT_F64) | WEFT_DTYPE_BIT(WEFT_F16) |
         WEFT_DTYPE_BIT(WEFT_BF16),
     matmul_kernel},
    {0},
};
