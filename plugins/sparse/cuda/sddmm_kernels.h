/* plugins/sparse/cuda/sddmm_kernels.h: weft's own SDDMM kernel (sddmm_kernels.cu), for
 * the cases cuSPARSE's cusparseSDDMM does not take: COO operands (cuSPARSE's SDDMM is
 * CSR-only), dense operands of any strides, and configurations cuSPARSE reports as not
 * supported. Plain C interface, shared by sddmm.c (gcc) and the kernel (nvcc). */
#ifndef WEFT_SPARSE_CUDA_SDDMM_KERNELS_H
#define WEFT_SPARSE_CUDA_SDDMM_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include <weft/dtype.h>

#ifdef __cplusplus
extern "C" {
#endif

/* out[e] = sum_n G[row(e), n] * B[col(e), n] for e < nnz, accumulated in the value type.
 * Strides are in elements and may be anything (0 included). */
struct sc_sddmm_args {
    enum weft_dtype dtype;       /* WEFT_F32 or WEFT_F64: G, B and out */
    enum weft_dtype index_dtype; /* WEFT_I32 or WEFT_I64: rows and cols */
    bool csr;                    /* rows holds CSR offsets [m + 1], else COO rows [nnz] */
    const void *rows;
    const void *cols;            /* [nnz] */
    int64_t nnz, m, n;           /* m: rows of A (CSR offsets' length - 1) */
    const void *g;
    int64_t g_rs, g_cs;
    const void *b;
    int64_t b_rs, b_cs;
    void *out;                   /* [nnz], contiguous */
};

/* Queues the kernel on stream; returns the launch status (cudaGetLastError), or
 * cudaErrorInvalidValue for an unsupported dtype pair. Requires nnz > 0 and n > 0. */
cudaError_t sc_sddmm_launch(const struct sc_sddmm_args *args, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
