/* DLPack export and import (weft/dlpack.h): the managed tensor carries a reference to
 * the weft storage one way, and the weft storage carries the managed tensor the other. */
#include "weft/dlpack.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "weft/autograd.h"
#include "weft/error.h"

/* DLPack device types of backends' devices, as the backends register them. */
enum { MAX_DL_DEVICES = 16 };
static struct {
    int weft_type;
    int32_t dl_type;
} dl_devices[MAX_DL_DEVICES];
static int num_dl_devices;
static pthread_mutex_t dl_devices_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- dtypes -------------------------------------------------------------------------- */

static const struct {
    enum weft_dtype weft;
    uint8_t code, bits;
} DTYPES[] = {
    {WEFT_BOOL, kDLBool, 8},   {WEFT_U8, kDLUInt, 8},     {WEFT_I8, kDLInt, 8},
    {WEFT_I16, kDLInt, 16},    {WEFT_I32, kDLInt, 32},    {WEFT_I64, kDLInt, 64},
    {WEFT_F16, kDLFloat, 16},  {WEFT_BF16, kDLBfloat, 16}, {WEFT_F32, kDLFloat, 32},
    {WEFT_F64, kDLFloat, 64},
};

static int dtype_to_dl(enum weft_dtype dt, DLDataType *out)
{
    for (size_t i = 0; i < sizeof DTYPES / sizeof DTYPES[0]; i++)
        if (DTYPES[i].weft == dt) {
            *out = (DLDataType){DTYPES[i].code, DTYPES[i].bits, 1};
            return 0;
        }
    return weft_error_set(WEFT_ERR_TYPE, "to_dlpack: dtype %s has no DLPack type",
                          weft_dtype_name(dt));
}

static int dtype_from_dl(DLDataType d, enum weft_dtype *out)
{
    if (d.lanes != 1)
        return weft_error_set(WEFT_ERR_TYPE,
                              "from_dlpack: only one lane is supported, got %u lanes",
                              (unsigned)d.lanes);
    for (size_t i = 0; i < sizeof DTYPES / sizeof DTYPES[0]; i++)
        if (DTYPES[i].code == d.code && DTYPES[i].bits == d.bits) {
            *out = DTYPES[i].weft;
            return 0;
        }
    return weft_error_set(WEFT_ERR_TYPE,
                          "from_dlpack: unsupported DLPack dtype (code %u, %u bits); weft "
                          "takes bool, uint8, int8/16/32/64, float16/32/64 and bfloat16",
                          (unsigned)d.code, (unsigned)d.bits);
}

/* ---- devices ------------------------------------------------------------------------- */

int weft_dlpack_register_device_type(int weft_device_type, int32_t dl_device_type)
{
    if (weft_device_type <= WEFT_DEVICE_CPU || dl_device_type == kDLCPU)
        return weft_error_set(WEFT_ERR_VALUE, "weft_dlpack_register_device_type: the cpu is "
                                              "built in; got weft device type %d, DLPack %d",
                              weft_device_type, (int)dl_device_type);
    int rc = 0;
    pthread_mutex_lock(&dl_devices_lock);
    int i = 0;
    while (i < num_dl_devices && dl_devices[i].dl_type != dl_device_type)
        i++;
    if (i < num_dl_devices && dl_devices[i].weft_type != weft_device_type)
        rc = weft_error_set(WEFT_ERR_VALUE, "DLPack device type %d is weft's %s already, not %s",
                            (int)dl_device_type, weft_device_type_name(dl_devices[i].weft_type),
                            weft_device_type_name(weft_device_type));
    else if (i == num_dl_devices && i == MAX_DL_DEVICES)
        rc = weft_error_set(WEFT_ERR_VALUE, "weft_dlpack_register_device_type: more than %d "
                                            "DLPack device types", MAX_DL_DEVICES);
    else if (i == num_dl_devices)
        dl_devices[num_dl_devices++] = (typeof(dl_devices[0])){weft_device_type, dl_device_type};
    pthread_mutex_unlock(&dl_devices_lock);
    return rc;
}

/* The registered partner of a weft type (want_dl) or of a DLPack type; -1 when none. */
static int64_t dl_device_lookup(int64_t key, bool want_dl)
{
    int64_t found = -1;
    pthread_mutex_lock(&dl_devices_lock);
    for (int i = 0; i < num_dl_devices && found < 0; i++)
        if ((want_dl ? dl_devices[i].weft_type : dl_devices[i].dl_type) == key)
            found = want_dl ? dl_devices[i].dl_type : dl_devices[i].weft_type;
    pthread_mutex_unlock(&dl_devices_lock);
    return found;
}

static int device_to_dl(weft_device dev, DLDevice *out)
{
    if (dev.type == WEFT_DEVICE_CPU) {
        *out = (DLDevice){kDLCPU, 0};
        return 0;
    }
    int64_t dl = dl_device_lookup(dev.type, true);
    if (dl >= 0) {
        *out = (DLDevice){(DLDeviceType)dl, dev.index};
        return 0;
    }
    char buf[32];
    return weft_error_set(WEFT_ERR_DEVICE, "to_dlpack: device %s has no DLPack device type",
                          weft_device_str(dev, buf, sizeof buf));
}

static int device_from_dl(DLDevice d, weft_device *out)
{
    switch (d.device_type) {
    case kDLCPU:
    case kDLCUDAHost: /* pinned host memory is host memory */
    case kDLROCMHost:
        *out = WEFT_CPU;
        return 0;
    default:
        break;
    }
    /* managed memory is the device's memory to the device's kernels */
    int32_t dl = d.device_type == kDLCUDAManaged ? kDLCUDA : (int32_t)d.device_type;
    int64_t type = dl_device_lookup(dl, false);
    if (type < 0)
        return weft_error_set(WEFT_ERR_DEVICE,
                              "from_dlpack: unsupported DLPack device type %d: no loaded backend "
                              "registered it; weft takes the cpu, pinned host memory and the "
                              "devices of its backends",
                              (int)d.device_type);
    if (d.device_id < 0 || d.device_id > INT16_MAX)
        return weft_error_set(WEFT_ERR_DEVICE, "from_dlpack: device index %d is out of range",
                              (int)d.device_id);
    *out = (weft_device){(int16_t)type, (int16_t)d.device_id};
    return 0;
}

/* ---- export ---------------------------------------------------------------------------
 * One allocation holds both managed-tensor shapes, the shape and stride arrays, and the
 * storage reference: the deleter frees it in one go. */

struct export_ctx {
    union {
        DLManagedTensor plain;
        DLManagedTensorVersioned versioned;
    } m;
    struct weft_storage *storage;
    int64_t shape[WEFT_MAX_DIMS];
    int64_t strides[WEFT_MAX_DIMS];
};

static void export_free(struct export_ctx *c)
{
    weft_storage_release(c->storage);
    free(c);
}

static void plain_deleter(DLManagedTensor *self)
{
    if (self)
        export_free(self->manager_ctx);
}

static void versioned_deleter(DLManagedTensorVersioned *self)
{
    if (self)
        export_free(self->manager_ctx);
}

static struct export_ctx *export_make(weft_tensor *t, DLTensor *dl)
{
    if (!t)
        return NULL;
    if (t->layout != WEFT_LAYOUT_STRIDED) {
        weft_error_set(WEFT_ERR_RUNTIME, "to_dlpack: only strided tensors can be exported");
        return NULL;
    }
    if (weft_requires_grad(t)) {
        weft_error_set(WEFT_ERR_RUNTIME,
                       "Can't export tensors that require gradient, use tensor.detach()");
        return NULL;
    }
    DLDataType dt;
    DLDevice dev;
    if (dtype_to_dl(t->dtype, &dt) < 0 || device_to_dl(t->device, &dev) < 0)
        return NULL;
    struct export_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "to_dlpack: out of memory");
        return NULL;
    }
    memcpy(c->shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
    memcpy(c->strides, t->stride, sizeof(int64_t) * (size_t)t->ndim);
    c->storage = t->storage;
    weft_storage_retain(c->storage);
    /* As PyTorch: data is the first element itself, so byte_offset is 0. */
    char *base = t->storage->data;
    *dl = (DLTensor){
        .data = base ? base + (size_t)t->offset * weft_dtype_size(t->dtype) : NULL,
        .device = dev,
        .ndim = t->ndim,
        .dtype = dt,
        .shape = c->shape,
        .strides = c->strides,
        .byte_offset = 0,
    };
    return c;
}

DLManagedTensor *weft_to_dlpack(weft_tensor *t)
{
    DLTensor dl;
    struct export_ctx *c = export_make(t, &dl);
    if (!c)
        return NULL;
    c->m.plain = (DLManagedTensor){.dl_tensor = dl, .manager_ctx = c, .deleter = plain_deleter};
    return &c->m.plain;
}

DLManagedTensorVersioned *weft_to_dlpack_versioned(weft_tensor *t)
{
    DLTensor dl;
    struct export_ctx *c = export_make(t, &dl);
    if (!c)
        return NULL;
    c->m.versioned = (DLManagedTensorVersioned){
        .version = {DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION},
        .manager_ctx = c,
        .deleter = versioned_deleter,
        .flags = 0,
        .dl_tensor = dl,
    };
    return &c->m.versioned;
}

/* ---- import ---------------------------------------------------------------------------
 * The storage's deleter calls the producer's deleter. `armed` is set only once the tensor
 * exists: a failure half way must leave the managed tensor to the caller untouched. */

struct import_ctx {
    DLManagedTensor *plain;
    DLManagedTensorVersioned *versioned;
    bool armed;
};

static void import_deleter(void *ctx, void *data)
{
    struct import_ctx *c = ctx;
    if (c->armed) {
        if (c->plain && c->plain->deleter)
            c->plain->deleter(c->plain);
        if (c->versioned && c->versioned->deleter)
            c->versioned->deleter(c->versioned);
    }
    free(c);
}

static weft_tensor *import_tensor(const DLTensor *dl, struct import_ctx *c)
{
    enum weft_dtype dtype = WEFT_F32; /* set below; the initialisers quiet -Wmaybe-uninitialized */
    weft_device dev = WEFT_CPU;
    if (dtype_from_dl(dl->dtype, &dtype) < 0 || device_from_dl(dl->device, &dev) < 0)
        goto fail;
    if (dl->ndim < 0 || dl->ndim > WEFT_MAX_DIMS) {
        weft_error_set(WEFT_ERR_VALUE, "from_dlpack: %d dims; weft takes at most %d",
                       (int)dl->ndim, WEFT_MAX_DIMS);
        goto fail;
    }
    if (dl->ndim > 0 && !dl->shape) {
        weft_error_set(WEFT_ERR_VALUE, "from_dlpack: shape is NULL for %d dims", (int)dl->ndim);
        goto fail;
    }
    if (dl->strides)
        for (int i = 0; i < dl->ndim; i++)
            if (dl->strides[i] < 0) {
                weft_error_set(WEFT_ERR_VALUE,
                               "from_dlpack: negative strides are not supported (dim %d has "
                               "stride %lld)", i, (long long)dl->strides[i]);
                goto fail;
            }
    if (weft_shape_numel(dl->ndim, dl->shape) < 0)
        goto fail;
    int64_t strides[WEFT_MAX_DIMS];
    if (dl->strides)
        memcpy(strides, dl->strides, sizeof(int64_t) * (size_t)dl->ndim);
    else
        weft_contiguous_strides(dl->ndim, dl->shape, strides);
    /* The storage spans exactly the bytes the strides reach from element 0. */
    int64_t extent = 1;
    for (int i = 0; i < dl->ndim; i++)
        if (dl->shape[i] == 0)
            extent = 0;
    for (int i = 0; i < dl->ndim && extent > 0; i++)
        extent += (dl->shape[i] - 1) * strides[i];
    size_t nbytes = (size_t)extent * weft_dtype_size(dtype);
    if (nbytes > 0 && !dl->data) {
        weft_error_set(WEFT_ERR_VALUE, "from_dlpack: data is NULL for %zu bytes", nbytes);
        goto fail;
    }
    char *data = dl->data ? (char *)dl->data + dl->byte_offset : NULL;
    struct weft_storage *s = weft_storage_wrap(dev, data, nbytes, import_deleter, c);
    if (!s)
        goto fail;
    /* From here the storage owns c: releasing it frees c, unarmed. */
    /* may fail and release the tensor: c then goes unarmed */
    weft_tensor *t = weft_tensor_from_storage(s, dl->ndim, dl->shape, strides, 0, dtype);
    weft_storage_release(s);
    if (!t)
        return NULL;
    c->armed = true;
    return t;
fail:
    free(c);
    return NULL;
}

weft_tensor *weft_from_dlpack(DLManagedTensor *m)
{
    if (!m) {
        weft_error_set(WEFT_ERR_VALUE, "from_dlpack: no managed tensor given");
        return NULL;
    }
    struct import_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "from_dlpack: out of memory");
        return NULL;
    }
    c->plain = m;
    return import_tensor(&m->dl_tensor, c);
}

weft_tensor *weft_from_dlpack_versioned(DLManagedTensorVersioned *m)
{
    if (!m) {
        weft_error_set(WEFT_ERR_VALUE, "from_dlpack: no managed tensor given");
        return NULL;
    }
    if (m->version.major != DLPACK_MAJOR_VERSION) {
        weft_error_set(WEFT_ERR_VALUE,
                       "from_dlpack: DLPack version %u.%u is not supported (weft reads "
                       "major version %d)",
                       m->version.major, m->version.minor, DLPACK_MAJOR_VERSION);
        return NULL;
    }
    if (m->flags & DLPACK_FLAG_BITMASK_READ_ONLY) {
        weft_error_set(WEFT_ERR_VALUE,
                       "from_dlpack: the tensor is read-only and weft tensors are writable; "
                       "copy it first");
        return NULL;
    }
    struct import_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "from_dlpack: out of memory");
        return NULL;
    }
    c->versioned = m;
    return import_tensor(&m->dl_tensor, c);
}
