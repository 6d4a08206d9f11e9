/* core/backend.c: the backend kind (backends by device type) and the generic helpers
 * that forward to a device's backend. */
#include "weft/backend.h"

#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "weft/device.h"
#include "weft/error.h"
#include "weft/plugin.h"

static const struct weft_backend *backends[WEFT_MAX_DEVICE_TYPES];

static int check_backend(const struct weft_vtable *v)
{
    const struct weft_backend *b = (const struct weft_backend *)v;
    if (!b->device_count || !b->alloc || !b->free || !b->copy)
        return weft_error_set(WEFT_ERR_PLUGIN,
                              "backend '%s' lacks a required method (device_count, alloc, free "
                              "and copy must all be set)",
                              v->name);
    return 0;
}

/* A backend's id is its device type's; the table by type is what hot paths read. */
static int backend_added(const struct weft_vtable *v, int index)
{
    int type = weft_device_type_id(v->name, true);
    if (type < 0)
        return weft_error_set(WEFT_ERR_PLUGIN,
                              "cannot register backend '%s': all %d device types are taken",
                              v->name, WEFT_MAX_DEVICE_TYPES);
    if (backends[type]) /* registry names are unique: only a foreign registration gets here */
        return weft_error_set(WEFT_ERR_PLUGIN,
                              "a backend for device type '%s' is already registered", v->name);
    __atomic_store_n(&backends[type], (const struct weft_backend *)v, __ATOMIC_RELEASE);
    return type;
}

const struct weft_kind weft_backend_kind = {
    .base = WEFT_VTABLE(WEFT_KIND_KIND, WEFT_KIND_BACKEND, struct weft_kind),
    .description = "device backends (one per device type)",
    .min_size = sizeof(struct weft_backend),
    .check = check_backend,
    .added = backend_added,
};

const struct weft_backend *weft_backend_find(int device_type)
{
    if (device_type < 0 || device_type >= WEFT_MAX_DEVICE_TYPES)
        return NULL;
    return __atomic_load_n(&backends[device_type], __ATOMIC_ACQUIRE);
}

/* Puts prefix before the error the failed call just set; an older error (pending
 * before that call) is left alone: the first error wins. */
static int wrap_error(bool had_error, const char *prefix)
{
    if (had_error)
        return weft_error_code();
    return weft_error_prefix("%s", prefix);
}

const struct weft_backend *weft_backend_get(int device_type)
{
    const struct weft_backend *b = weft_backend_find(device_type);
    if (b)
        return b;
    const char *name = weft_device_type_name(device_type);
    if (device_type < 0 || device_type >= WEFT_MAX_DEVICE_TYPES || strcmp(name, "unknown") == 0) {
        weft_error_set(WEFT_ERR_DEVICE, "no backend for device type %d: no such device type",
                       device_type);
        return NULL;
    }
    char prefix[96];
    snprintf(prefix, sizeof prefix, "no backend for device '%s'", name);
    bool had_error = weft_error_code() != WEFT_OK;
    if (!weft_registry_get(WEFT_KIND_BACKEND, name)) {
        wrap_error(had_error, prefix);
        return NULL;
    }
    return weft_backend_find(device_type);
}

/* Like PyTorch's torch.cuda.device_count(): a backend that cannot be loaded has no
 * devices, and asking is not an error. */
int weft_device_count(int device_type)
{
    const struct weft_backend *b = weft_backend_find(device_type);
    if (!b) {
        bool had_error = weft_error_code() != WEFT_OK;
        b = weft_backend_get(device_type);
        if (!b && !had_error)
            weft_error_clear();
    }
    if (!b)
        return 0;
    int n = b->device_count(b->context);
    return n < 0 ? 0 : n;
}

/* The backend that owns dev, with the index checked; NULL with an error otherwise. */
static const struct weft_backend *device_backend(weft_device dev)
{
    const struct weft_backend *b = weft_backend_get(dev.type);
    if (!b)
        return NULL;
    int n = b->device_count(b->context);
    if (dev.index < 0 || dev.index >= n) {
        weft_error_set(WEFT_ERR_DEVICE, "invalid device %s: only %d %s device(s) present",
                       weft_device_name_tl(dev), n < 0 ? 0 : n, b->base.name);
        return NULL;
    }
    return b;
}

int weft_synchronize(weft_device dev)
{
    const struct weft_backend *b = device_backend(dev);
    if (!b)
        return weft_error_code() ? weft_error_code() : WEFT_ERR_DEVICE;
    if (!WEFT_VTABLE_HAS(b, synchronize))
        return 0; /* a backend without queues is always synchronized */
    return b->synchronize(b->context, dev.index);
}

int weft_copy_side(weft_tensor *dst, const weft_tensor *src)
{
    if (!dst || !src)
        return weft_error_code();
    if (dst->device.type == WEFT_DEVICE_CPU || src->device.type != WEFT_DEVICE_CPU ||
        dst->dtype != src->dtype || !weft_tensor_is_contiguous(dst) ||
        !weft_tensor_is_contiguous(src) || weft_tensor_numel(dst) != weft_tensor_numel(src))
        return 0;
    const struct weft_backend *b = device_backend(dst->device);
    if (!b)
        return weft_error_code() ? weft_error_code() : WEFT_ERR_DEVICE;
    if (!WEFT_VTABLE_HAS(b, copy_side) || !WEFT_VTABLE_HAS(b, wait_side))
        return 0;
    int rc = b->copy_side(b->context, dst, src);
    if (rc < 0)
        return rc;
    weft_tensor_bump_version(dst);
    return 1;
}

int weft_wait_side(weft_device dev)
{
    const struct weft_backend *b = device_backend(dev);
    if (!b)
        return weft_error_code() ? weft_error_code() : WEFT_ERR_DEVICE;
    return WEFT_VTABLE_HAS(b, wait_side) ? b->wait_side(b->context, dev.index) : 0;
}

int weft_memory_stats(weft_device dev, struct weft_memory_stats *out)
{
    if (!out || out->struct_size < sizeof(out->struct_size))
        return weft_error_set(WEFT_ERR_VALUE,
                              "weft_memory_stats: out must be set, with out->struct_size = "
                              "sizeof(struct weft_memory_stats)");
    const struct weft_backend *b = device_backend(dev);
    if (!b)
        return weft_error_code() ? weft_error_code() : WEFT_ERR_DEVICE;
    if (!WEFT_VTABLE_HAS(b, memory_stats))
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED,
                              "the %s backend does not provide memory statistics", b->base.name);
    /* Fields the backend does not know read as zero. */
    size_t size = out->struct_size;
    memset((char *)out + sizeof(out->struct_size), 0, size - sizeof(out->struct_size));
    return b->memory_stats(b->context, dev.index, out);
}

void weft_reset_peak_memory_stats(weft_device dev)
{
    const struct weft_backend *b = weft_backend_find(dev.type);
    if (b && WEFT_VTABLE_HAS(b, reset_peak_memory_stats))
        b->reset_peak_memory_stats(b->context, dev.index);
}

void weft_empty_cache(weft_device dev)
{
    const struct weft_backend *b = weft_backend_find(dev.type);
    if (b && WEFT_VTABLE_HAS(b, empty_cache))
        b->empty_cache(b->context, dev.index);
}

int weft_set_num_threads(int n)
{
    if (n < 1)
        return weft_error_set(WEFT_ERR_VALUE, "set_num_threads expects a positive integer, got %d",
                              n);
    int rc = 0;
    for (int type = 0; type < WEFT_MAX_DEVICE_TYPES; type++) {
        const struct weft_backend *b = weft_backend_find(type);
        if (!b || !WEFT_VTABLE_HAS(b, set_num_threads))
            continue;
        int r = b->set_num_threads(b->context, n);
        if (r < 0 && rc == 0)
            rc = r;
    }
    return rc;
}

int weft_get_num_threads(void)
{
    const struct weft_backend *b = weft_backend_find(WEFT_DEVICE_CPU);
    if (!b || !WEFT_VTABLE_HAS(b, get_num_threads))
        return 1;
    int n = b->get_num_threads(b->context);
    return n > 0 ? n : 1;
}
