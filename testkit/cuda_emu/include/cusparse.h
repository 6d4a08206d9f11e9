/* cusparse.h (weft's CUDA emulator): cuSPARSE's generic API as weft-sparse-cuda.so calls
 * it (handles, CSR/COO and dense descriptors, SpMM and SDDMM with their buffer sizes),
 * implemented by libweft-cusparse-emu.so on the emulated device's streams. */
#ifndef WEFT_CUDA_EMU_CUSPARSE_H
#define WEFT_CUDA_EMU_CUSPARSE_H

#include <stdint.h>

#include "cuda_runtime_api.h"
#include "library_types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    CUSPARSE_STATUS_SUCCESS = 0,
    CUSPARSE_STATUS_NOT_INITIALIZED = 1,
    CUSPARSE_STATUS_ALLOC_FAILED = 2,
    CUSPARSE_STATUS_INVALID_VALUE = 3,
    CUSPARSE_STATUS_ARCH_MISMATCH = 4,
    CUSPARSE_STATUS_MAPPING_ERROR = 5,
    CUSPARSE_STATUS_EXECUTION_FAILED = 6,
    CUSPARSE_STATUS_INTERNAL_ERROR = 7,
    CUSPARSE_STATUS_MATRIX_TYPE_NOT_SUPPORTED = 8,
    CUSPARSE_STATUS_ZERO_PIVOT = 9,
    CUSPARSE_STATUS_NOT_SUPPORTED = 10,
    CUSPARSE_STATUS_INSUFFICIENT_RESOURCES = 11,
} cusparseStatus_t;

typedef enum {
    CUSPARSE_OPERATION_NON_TRANSPOSE = 0,
    CUSPARSE_OPERATION_TRANSPOSE = 1,
    CUSPARSE_OPERATION_CONJUGATE_TRANSPOSE = 2,
} cusparseOperation_t;

typedef enum {
    CUSPARSE_INDEX_16U = 1,
    CUSPARSE_INDEX_32I = 2,
    CUSPARSE_INDEX_64I = 3,
} cusparseIndexType_t;

typedef enum {
    CUSPARSE_INDEX_BASE_ZERO = 0,
    CUSPARSE_INDEX_BASE_ONE = 1,
} cusparseIndexBase_t;

typedef enum {
    CUSPARSE_ORDER_COL = 1,
    CUSPARSE_ORDER_ROW = 2,
} cusparseOrder_t;

typedef enum {
    CUSPARSE_SPMM_ALG_DEFAULT = 0,
    CUSPARSE_SPMM_COO_ALG1 = 1,
    CUSPARSE_SPMM_COO_ALG2 = 2,
    CUSPARSE_SPMM_COO_ALG3 = 3,
    CUSPARSE_SPMM_COO_ALG4 = 5,
    CUSPARSE_SPMM_CSR_ALG1 = 4,
    CUSPARSE_SPMM_CSR_ALG2 = 6,
    CUSPARSE_SPMM_CSR_ALG3 = 12,
} cusparseSpMMAlg_t;

typedef enum {
    CUSPARSE_SDDMM_ALG_DEFAULT = 0,
} cusparseSDDMMAlg_t;

typedef struct cusparseContext *cusparseHandle_t;
typedef struct cusparseSpMatDescr *cusparseSpMatDescr_t;
typedef const struct cusparseSpMatDescr *cusparseConstSpMatDescr_t;
typedef struct cusparseDnMatDescr *cusparseDnMatDescr_t;
typedef const struct cusparseDnMatDescr *cusparseConstDnMatDescr_t;

WEMU_API const char *cusparseGetErrorString(cusparseStatus_t status);
WEMU_API const char *cusparseGetErrorName(cusparseStatus_t status);
WEMU_API cusparseStatus_t cusparseCreate(cusparseHandle_t *handle);
WEMU_API cusparseStatus_t cusparseDestroy(cusparseHandle_t handle);
WEMU_API cusparseStatus_t cusparseSetStream(cusparseHandle_t handle, cudaStream_t stream);
WEMU_API cusparseStatus_t cusparseGetStream(cusparseHandle_t handle, cudaStream_t *stream);

WEMU_API cusparseStatus_t cusparseCreateCsr(cusparseSpMatDescr_t *descr, int64_t rows,
                                            int64_t cols, int64_t nnz, void *row_offsets,
                                            void *col_ind, void *values,
                                            cusparseIndexType_t row_offsets_type,
                                            cusparseIndexType_t col_ind_type,
                                            cusparseIndexBase_t base, cudaDataType value_type);
WEMU_API cusparseStatus_t cusparseCreateCoo(cusparseSpMatDescr_t *descr, int64_t rows,
                                            int64_t cols, int64_t nnz, void *row_ind,
                                            void *col_ind, void *values,
                                            cusparseIndexType_t index_type,
                                            cusparseIndexBase_t base, cudaDataType value_type);
WEMU_API cusparseStatus_t cusparseDestroySpMat(cusparseConstSpMatDescr_t descr);
WEMU_API cusparseStatus_t cusparseCreateDnMat(cusparseDnMatDescr_t *descr, int64_t rows,
                                              int64_t cols, int64_t ld, void *values,
                                              cudaDataType value_type, cusparseOrder_t order);
WEMU_API cusparseStatus_t cusparseCreateConstDnMat(cusparseConstDnMatDescr_t *descr,
                                                   int64_t rows, int64_t cols, int64_t ld,
                                                   const void *values, cudaDataType value_type,
                                                   cusparseOrder_t order);
WEMU_API cusparseStatus_t cusparseDestroyDnMat(cusparseConstDnMatDescr_t descr);

WEMU_API cusparseStatus_t cusparseSpMM_bufferSize(cusparseHandle_t handle,
                                                  cusparseOperation_t op_a,
                                                  cusparseOperation_t op_b, const void *alpha,
                                                  cusparseConstSpMatDescr_t a,
                                                  cusparseConstDnMatDescr_t b, const void *beta,
                                                  cusparseDnMatDescr_t c,
                                                  cudaDataType compute_type,
                                                  cusparseSpMMAlg_t alg, size_t *size);
WEMU_API cusparseStatus_t cusparseSpMM(cusparseHandle_t handle, cusparseOperation_t op_a,
                                       cusparseOperation_t op_b, const void *alpha,
                                       cusparseConstSpMatDescr_t a, cusparseConstDnMatDescr_t b,
                                       const void *beta, cusparseDnMatDescr_t c,
                                       cudaDataType compute_type, cusparseSpMMAlg_t alg,
                                       void *buffer);
WEMU_API cusparseStatus_t cusparseSDDMM_bufferSize(cusparseHandle_t handle,
                                                   cusparseOperation_t op_a,
                                                   cusparseOperation_t op_b, const void *alpha,
                                                   cusparseConstDnMatDescr_t a,
                                                   cusparseConstDnMatDescr_t b, const void *beta,
                                                   cusparseSpMatDescr_t c,
                                                   cudaDataType compute_type,
                                                   cusparseSDDMMAlg_t alg, size_t *size);
WEMU_API cusparseStatus_t cusparseSDDMM(cusparseHandle_t handle, cusparseOperation_t op_a,
                                        cusparseOperation_t op_b, const void *alpha,
                                        cusparseConstDnMatDescr_t a,
                                        cusparseConstDnMatDescr_t b, const void *beta,
                                        cusparseSpMatDescr_t c, cudaDataType compute_type,
                                        cusparseSDDMMAlg_t alg, void *buffer);

#ifdef __cplusplus
}
#endif
#endif
