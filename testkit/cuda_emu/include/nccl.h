/* nccl.h (weft's CUDA emulator): the NCCL calls weft-dist-nccl.so makes, implemented by
 * libweft-nccl-emu.so over MPI (which the caller has initialised): one emulated device per
 * process, collectives queued on the emulated streams. */
#ifndef WEFT_CUDA_EMU_NCCL_H
#define WEFT_CUDA_EMU_NCCL_H

#include <stddef.h>

#include "cuda_runtime_api.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NCCL_MAJOR 2
#define NCCL_MINOR 21
#define NCCL_PATCH 0
#define NCCL_UNIQUE_ID_BYTES 128

typedef struct ncclComm *ncclComm_t;
typedef struct {
    char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7,
} ncclResult_t;

typedef enum {
    ncclInt8 = 0, ncclChar = 0,
    ncclUint8 = 1,
    ncclInt32 = 2, ncclInt = 2,
    ncclUint32 = 3,
    ncclInt64 = 4,
    ncclUint64 = 5,
    ncclFloat16 = 6, ncclHalf = 6,
    ncclFloat32 = 7, ncclFloat = 7,
    ncclFloat64 = 8, ncclDouble = 8,
    ncclBfloat16 = 9,
} ncclDataType_t;

typedef enum {
    ncclSum = 0,
    ncclProd = 1,
    ncclMax = 2,
    ncclMin = 3,
    ncclAvg = 4,
} ncclRedOp_t;

WEMU_API const char *ncclGetErrorString(ncclResult_t result);
WEMU_API ncclResult_t ncclGetVersion(int *version);
WEMU_API ncclResult_t ncclGetUniqueId(ncclUniqueId *id);
WEMU_API ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
WEMU_API ncclResult_t ncclCommDestroy(ncclComm_t comm);
WEMU_API ncclResult_t ncclCommAbort(ncclComm_t comm);
WEMU_API ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *async_error);
WEMU_API ncclResult_t ncclCommCount(ncclComm_t comm, int *count);
WEMU_API ncclResult_t ncclCommUserRank(ncclComm_t comm, int *rank);
WEMU_API ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                                    ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                    cudaStream_t stream);
WEMU_API ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                                    ncclDataType_t datatype, int root, ncclComm_t comm,
                                    cudaStream_t stream);
WEMU_API ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                                    ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
