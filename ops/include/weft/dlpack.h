/* weft/dlpack.h: zero-copy exchange of tensors with other frameworks through DLPack
 * (https://dmlc.github.io/dlpack/latest/), as torch.utils.dlpack.
 *
 * The DLPack declarations below are written from the specification (version 1.0) so
 * that weft needs no copy of its header; they are binary compatible with it. A program
 * that also includes DLPack's own dlpack.h defines WEFT_HAVE_DLPACK_H first and gets
 * only weft's functions. */
#ifndef WEFT_DLPACK_H
#define WEFT_DLPACK_H

#include <stdint.h>

#include "weft/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifndef DLPACK_DLPACK_H_
#define DLPACK_DLPACK_H_
#define DLPACK_MAJOR_VERSION 1
#define DLPACK_MINOR_VERSION 0

typedef struct {
    uint32_t major;
    uint32_t minor;
} DLPackVersion;

typedef enum {
    kDLCPU = 1,
    kDLCUDA = 2,
    kDLCUDAHost = 3, /* pinned host memory */
    kDLOpenCL = 4,
    kDLVulkan = 7,
    kDLMetal = 8,
    kDLVPI = 9,
    kDLROCM = 10,
    kDLROCMHost = 11,
    kDLExtDev = 12,
    kDLCUDAManaged = 13,
    kDLOneAPI = 14,
    kDLWebGPU = 15,
    kDLHexagon = 16,
} DLDeviceType;

typedef struct {
    DLDeviceType device_type;
    int32_t device_id;
} DLDevice;

typedef enum {
    kDLInt = 0U,
    kDLUInt = 1U,
    kDLFloat = 2U,
    kDLOpaqueHandle = 3U,
    kDLBfloat = 4U,
    kDLComplex = 5U,
    kDLBool = 6U,
} DLDataTypeCode;

typedef struct {
    uint8_t code;   /* a DLDataTypeCode */
    uint8_t bits;
    uint16_t lanes; /* 1 for scalars */
} DLDataType;

typedef struct {
    void *data;           /* base pointer; element 0 is at data + byte_offset */
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape;
    int64_t *strides;     /* in elements; NULL: compact row-major */
    uint64_t byte_offset;
} DLTensor;

/* The pre-1.0 managed tensor (PyCapsule "dltensor"). */
typedef struct DLManagedTensor {
    DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensor *self); /* the consumer calls it when done */
} DLManagedTensor;

#define DLPACK_FLAG_BITMASK_READ_ONLY (1UL << 0UL)
#define DLPACK_FLAG_BITMASK_IS_COPIED (1UL << 1UL)

/* The 1.0 managed tensor (PyCapsule "dltensor_versioned"): the version comes first so
 * that a consumer can refuse a major version it does not know before reading on. */
typedef struct DLManagedTensorVersioned {
    DLPackVersion version;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensorVersioned *self);
    uint64_t flags;
    DLTensor dl_tensor;
} DLManagedTensorVersioned;
#endif

/* A backend says which DLPack device type its weft device type is (the cuda plugin:
 * kDLCUDA, which kDLCUDAManaged memory maps to as well), so that the core names no
 * backend's device. Registering the same pair again is a no-op; 0, or an error when the
 * DLPack type belongs to another weft device type already. */
int weft_dlpack_register_device_type(int weft_device_type, int32_t dl_device_type);

/* torch.utils.dlpack.to_dlpack: a DLManagedTensor over t's memory (no copy). weft keeps
 * the storage alive until the consumer calls the result's deleter exactly once. data is
 * t's first element (byte_offset 0), strides are always given. Errors (NULL): t is not
 * strided, lives on a device DLPack cannot name, or requires grad (PyTorch's "Can't
 * export tensors that require gradient, use tensor.detach()"). */
DLManagedTensor *weft_to_dlpack(weft_tensor *t);
#if DLPACK_MAJOR_VERSION >= 1 /* not with a pre-1.0 dlpack.h included first */
/* The same as a DLPack 1.0 DLManagedTensorVersioned (version 1.0, flags 0). */
DLManagedTensorVersioned *weft_to_dlpack_versioned(weft_tensor *t);
#endif

/* torch.utils.dlpack.from_dlpack: a tensor over the producer's memory (no copy). On
 * success weft owns m and calls m->deleter(m) when the last tensor over that memory is
 * released; on failure (NULL with an error naming the dtype or device) nothing is taken
 * and the caller still owns m. Accepted: the cpu, pinned host memory (kDLCUDAHost,
 * kDLROCMHost: host pointers) and kDLCUDA / kDLCUDAManaged as device type cuda; dtypes
 * bool (kDLBool, 8 bits), uint8, int8/16/32/64, float16/32/64, bfloat16, one lane;
 * non-negative strides (NULL: compact row-major). */
weft_tensor *weft_from_dlpack(DLManagedTensor *m);
/* The same for DLPack 1.0: a major version other than 1 is refused (the spec's rule),
 * and so is a read-only tensor (weft tensors are always writable). */
#if DLPACK_MAJOR_VERSION >= 1
weft_tensor *weft_from_dlpack_versioned(DLManagedTensorVersioned *m);
#endif

#ifdef __cplusplus
}
#endif
#endif
