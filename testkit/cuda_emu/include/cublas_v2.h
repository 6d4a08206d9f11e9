/* cublas_v2.h (weft's CUDA emulator): the cuBLAS calls weft's CUDA plugin makes, and the
 * settings around them, implemented by libweft-cublas-emu.so on the emulated device's
 * streams: column-major GEMMs (plain, strided batched, Ex with data and compute types),
 * math and pointer modes, cuBLAS's argument checks and status codes. */
#ifndef WEFT_CUDA_EMU_CUBLAS_V2_H
#define WEFT_CUDA_EMU_CUBLAS_V2_H

#include "cuda_runtime_api.h"
#include "library_types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_ALLOC_FAILED = 3,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_ARCH_MISMATCH = 8,
    CUBLAS_STATUS_MAPPING_ERROR = 11,
    CUBLAS_STATUS_EXECUTION_FAILED = 13,
    CUBLAS_STATUS_INTERNAL_ERROR = 14,
    CUBLAS_STATUS_NOT_SUPPORTED = 15,
    CUBLAS_STATUS_LICENSE_ERROR = 16,
} cublasStatus_t;

typedef enum {
    CUBLAS_OP_N = 0,
    CUBLAS_OP_T = 1,
    CUBLAS_OP_C = 2,
} cublasOperation_t;

typedef enum {
    CUBLAS_POINTER_MODE_HOST = 0,
    CUBLAS_POINTER_MODE_DEVICE = 1,
} cublasPointerMode_t;

typedef enum {
    CUBLAS_DEFAULT_MATH = 0,
    CUBLAS_TENSOR_OP_MATH = 1,
    CUBLAS_PEDANTIC_MATH = 2,
    CUBLAS_TF32_TENSOR_OP_MATH = 3,
    CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION = 16,
} cublasMath_t;

typedef enum {
    CUBLAS_COMPUTE_16F = 64,
    CUBLAS_COMPUTE_16F_PEDANTIC = 65,
    CUBLAS_COMPUTE_32F = 68,
    CUBLAS_COMPUTE_32F_PEDANTIC = 69,
    CUBLAS_COMPUTE_32F_FAST_16F = 74,
    CUBLAS_COMPUTE_32F_FAST_16BF = 75,
    CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
    CUBLAS_COMPUTE_64F = 70,
    CUBLAS_COMPUTE_64F_PEDANTIC = 71,
    CUBLAS_COMPUTE_32I = 72,
    CUBLAS_COMPUTE_32I_PEDANTIC = 73,
} cublasComputeType_t;

typedef enum {
    CUBLAS_GEMM_DEFAULT = -1,
    CUBLAS_GEMM_DEFAULT_TENSOR_OP = 99,
} cublasGemmAlgo_t;

typedef struct cublasContext *cublasHandle_t;

WEMU_API cublasStatus_t cublasCreate(cublasHandle_t *handle);
WEMU_API cublasStatus_t cublasDestroy(cublasHandle_t handle);
WEMU_API cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream);
WEMU_API cublasStatus_t cublasGetStream(cublasHandle_t handle, cudaStream_t *stream);
WEMU_API cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode);
WEMU_API cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t *mode);
WEMU_API cublasStatus_t cublasSetPointerMode(cublasHandle_t handle, cublasPointerMode_t mode);
WEMU_API cublasStatus_t cublasGetPointerMode(cublasHandle_t handle, cublasPointerMode_t *mode);
WEMU_API cublasStatus_t cublasGetProperty(libraryPropertyType type, int *value);
WEMU_API const char *cublasGetStatusString(cublasStatus_t status);
WEMU_API const char *cublasGetStatusName(cublasStatus_t status);

WEMU_API cublasStatus_t cublasSgemm(cublasHandle_t handle, cublasOperation_t transa,
                                    cublasOperation_t transb, int m, int n, int k,
                                    const float *alpha, const float *A, int lda, const float *B,
                                    int ldb, const float *beta, float *C, int ldc);
WEMU_API cublasStatus_t cublasDgemm(cublasHandle_t handle, cublasOperation_t transa,
                                    cublasOperation_t transb, int m, int n, int k,
                                    const double *alpha, const double *A, int lda,
                                    const double *B, int ldb, const double *beta, double *C,
                                    int ldc);
WEMU_API cublasStatus_t cublasSgemmStridedBatched(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
    int k, const float *alpha, const float *A, int lda, long long strideA, const float *B,
    int ldb, long long strideB, const float *beta, float *C, int ldc, long long strideC,
    int batchCount);
WEMU_API cublasStatus_t cublasDgemmStridedBatched(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
    int k, const double *alpha, const double *A, int lda, long long strideA, const double *B,
    int ldb, long long strideB, const double *beta, double *C, int ldc, long long strideC,
    int batchCount);
WEMU_API cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                                     cublasOperation_t transb, int m, int n, int k,
                                     const void *alpha, const void *A, cudaDataType Atype, int lda,
                                     const void *B, cudaDataType Btype, int ldb, const void *beta,
                                     void *C, cudaDataType Ctype, int ldc,
                                     cublasComputeType_t computeType, cublasGemmAlgo_t algo);
WEMU_API cublasStatus_t cublasGemmStridedBatchedEx(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
    int k, const void *alpha, const void *A, cudaDataType Atype, int lda, long long strideA,
    const void *B, cudaDataType Btype, int ldb, long long strideB, const void *beta, void *C,
    cudaDataType Ctype, int ldc, long long strideC, int batchCount,
    cublasComputeType_t computeType, cublasGemmAlgo_t algo);

#ifdef __cplusplus
}
#endif
#endif
