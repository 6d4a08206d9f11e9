/* cuda_runtime_api.h (weft's CUDA emulator): the CUDA runtime's host API as weft's CUDA
 * plugins call it, implemented by libweft-cudart-emu.so on the CPU.
 *
 * Written for the emulator, not copied from the toolkit: the names, the numbers of the
 * enumerators and the error texts are CUDA's (so messages read the same as on a GPU), the
 * structures hold only what the emulator fills. Plain C, so the plugins' .c files build
 * against it as they build against the toolkit's header. docs/cuda-emulator.md has the
 * model (deferred streams, device memory, limits). */
#ifndef WEFT_CUDA_EMU_RUNTIME_API_H
#define WEFT_CUDA_EMU_RUNTIME_API_H

#include <stddef.h>
#include <stdint.h>

#include "library_types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define WEFT_CUDA_EMULATED 1 /* this header is the emulator's */
#define CUDART_VERSION 13000
#define WEMU_API __attribute__((visibility("default")))

/* ---- errors (driver_types.h's numbers) ---------------------------------------------------- */
typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInitializationError = 3,
    cudaErrorCudartUnloading = 4,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidPitchValue = 12,
    cudaErrorInvalidSymbol = 13,
    cudaErrorInvalidDevicePointer = 17,
    cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorInsufficientDriver = 35,
    cudaErrorInvalidDeviceFunction = 98,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorNotReady = 600,
    cudaErrorIllegalAddress = 700,
    cudaErrorLaunchOutOfResources = 701,
    cudaErrorAssert = 710,
    cudaErrorIllegalInstruction = 715,
    cudaErrorMisalignedAddress = 716,
    cudaErrorLaunchFailure = 719,
    cudaErrorNotSupported = 801,
    cudaErrorUnknown = 999,
} cudaError_t;

/* ---- handles and small types -------------------------------------------------------------- */
typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
/* The legacy default stream (also NULL) and the per-thread default stream. */
#define cudaStreamLegacy ((cudaStream_t)0x1)
#define cudaStreamPerThread ((cudaStream_t)0x2)

#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
#define cudaEventDefault 0x00
#define cudaEventBlockingSync 0x01
#define cudaEventDisableTiming 0x02
#define cudaHostAllocDefault 0x00
#define cudaHostAllocPortable 0x01
#define cudaHostAllocMapped 0x02
#define cudaHostAllocWriteCombined 0x04

enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4,
};

enum cudaMemoryType {
    cudaMemoryTypeUnregistered = 0,
    cudaMemoryTypeHost = 1,
    cudaMemoryTypeDevice = 2,
    cudaMemoryTypeManaged = 3,
};

struct cudaPointerAttributes {
    enum cudaMemoryType type;
    int device;
    void *devicePointer;
    void *hostPointer;
};

enum cudaDeviceAttr {
    cudaDevAttrMaxThreadsPerBlock = 1,
    cudaDevAttrMaxBlockDimX = 2,
    cudaDevAttrMaxBlockDimY = 3,
    cudaDevAttrMaxBlockDimZ = 4,
    cudaDevAttrMaxGridDimX = 5,
    cudaDevAttrMaxGridDimY = 6,
    cudaDevAttrMaxGridDimZ = 7,
    cudaDevAttrMaxSharedMemoryPerBlock = 8,
    cudaDevAttrWarpSize = 10,
    cudaDevAttrMultiProcessorCount = 16,
    cudaDevAttrComputeCapabilityMajor = 75,
    cudaDevAttrComputeCapabilityMinor = 76,
    cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
};

enum cudaFuncAttribute {
    cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
    cudaFuncAttributePreferredSharedMemoryCarveout = 9,
};

struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    size_t sharedMemPerBlock;
    int regsPerBlock;
    int warpSize;
    int maxThreadsPerBlock;
    int maxThreadsDim[3];
    int maxGridSize[3];
    int major, minor;
    int multiProcessorCount;
    size_t sharedMemPerBlockOptin;
    int unifiedAddressing;
    int integrated;
};

/* ---- the API ------------------------------------------------------------------------------- */
WEMU_API const char *cudaGetErrorString(cudaError_t error);
WEMU_API const char *cudaGetErrorName(cudaError_t error);
WEMU_API cudaError_t cudaGetLastError(void);
WEMU_API cudaError_t cudaPeekAtLastError(void);

WEMU_API cudaError_t cudaGetDeviceCount(int *count);
WEMU_API cudaError_t cudaSetDevice(int device);
WEMU_API cudaError_t cudaGetDevice(int *device);
WEMU_API cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device);
WEMU_API cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device);
WEMU_API cudaError_t cudaDeviceSynchronize(void);
WEMU_API cudaError_t cudaDeviceReset(void);
WEMU_API cudaError_t cudaRuntimeGetVersion(int *version);
WEMU_API cudaError_t cudaDriverGetVersion(int *version);
WEMU_API cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes);

WEMU_API cudaError_t cudaMalloc(void **ptr, size_t size);
WEMU_API cudaError_t cudaFree(void *ptr);
WEMU_API cudaError_t cudaMallocAsync(void **ptr, size_t size, cudaStream_t stream);
WEMU_API cudaError_t cudaFreeAsync(void *ptr, cudaStream_t stream);
WEMU_API cudaError_t cudaHostAlloc(void **ptr, size_t size, unsigned int flags);
WEMU_API cudaError_t cudaMallocHost(void **ptr, size_t size);
WEMU_API cudaError_t cudaFreeHost(void *ptr);
WEMU_API cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attr, const void *ptr);

WEMU_API cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind);
WEMU_API cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count,
                                     enum cudaMemcpyKind kind, cudaStream_t stream);
WEMU_API cudaError_t cudaMemcpyPeerAsync(void *dst, int dst_device, const void *src,
                                         int src_device, size_t count, cudaStream_t stream);
WEMU_API cudaError_t cudaMemset(void *ptr, int value, size_t count);
WEMU_API cudaError_t cudaMemsetAsync(void *ptr, int value, size_t count, cudaStream_t stream);

WEMU_API cudaError_t cudaStreamCreate(cudaStream_t *stream);
WEMU_API cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags);
WEMU_API cudaError_t cudaStreamDestroy(cudaStream_t stream);
WEMU_API cudaError_t cudaStreamSynchronize(cudaStream_t stream);
WEMU_API cudaError_t cudaStreamQuery(cudaStream_t stream);
WEMU_API cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags);

WEMU_API cudaError_t cudaEventCreate(cudaEvent_t *event);
WEMU_API cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags);
WEMU_API cudaError_t cudaEventDestroy(cudaEvent_t event);
WEMU_API cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
WEMU_API cudaError_t cudaEventQuery(cudaEvent_t event);
WEMU_API cudaError_t cudaEventSynchronize(cudaEvent_t event);
WEMU_API cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end);

typedef void (*cudaHostFn_t)(void *user_data);
WEMU_API cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *user_data);

/* Kernels are identified by their host function's address, as CUDA does. */
WEMU_API cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value);

/* ---- the emulator's own calls (no CUDA counterpart) ------------------------------------------- */
/* For a sub-allocator of device memory (weft's caching allocator): the block at ptr, of
 * size bytes, is handed out for work on stream (NULL: the legacy stream of the device
 * that holds ptr, whichever is current) and its first `valid` bytes are in use;
 * later, the block is given back. The emulator makes the rest, and the block once given
 * back, unaddressable (AddressSanitizer) or garbage, each in stream order. */
/* The seed the blocks' and threads' orders are drawn from from now on (the environment's
 * WEFT_CUDA_EMU_SEED, default 1, until then): for tests that try several orders. */
WEMU_API void wemu_set_seed(uint64_t seed);
WEMU_API void wemu_annotate_alloc(void *ptr, size_t valid, size_t size, cudaStream_t stream);
WEMU_API void wemu_annotate_free(void *ptr, size_t size);

#ifdef __cplusplus
}
#endif
#endif
