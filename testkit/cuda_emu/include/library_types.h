/* library_types.h (weft's CUDA emulator): the data types and library properties that
 * cuBLAS, cuSPARSE and the runtime share, with CUDA's numbers. */
#ifndef WEFT_CUDA_EMU_LIBRARY_TYPES_H
#define WEFT_CUDA_EMU_LIBRARY_TYPES_H

typedef enum cudaDataType_t {
    CUDA_R_32F = 0,
    CUDA_R_64F = 1,
    CUDA_R_16F = 2,
    CUDA_R_8I = 3,
    CUDA_R_8U = 8,
    CUDA_R_32I = 10,
    CUDA_R_16BF = 14,
} cudaDataType_t;
typedef cudaDataType_t cudaDataType;

typedef enum libraryPropertyType_t {
    MAJOR_VERSION = 0,
    MINOR_VERSION = 1,
    PATCH_LEVEL = 2,
} libraryPropertyType_t;
typedef libraryPropertyType_t libraryPropertyType;

#endif
