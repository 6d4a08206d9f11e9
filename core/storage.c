/* core/storage.c: refcounted device buffers and the shared version counter. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "weft/storage.h"

static struct weft_storage *storage_header(weft_device dev, void *data, size_t nbytes)
{
    struct weft_storage *s = weft_small_alloc(sizeof *s);
    if (!s) {
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory for a storage header");
        return NULL;
    }
    *s = (struct weft_storage){.refcount = 1, .device = dev, .data = data, .nbytes = nbytes};
    return s;
}

struct weft_storage *weft_storage_new(weft_device dev, size_t nbytes)
{
    const struct weft_backend *backend = weft_backend_get(dev.type);
    if (!backend)
        return NULL;
    void *data = NULL;
    if (nbytes > 0) {
        data = backend->alloc(backend->context, dev.index, nbytes);
        if (!data) {
            weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "%s: failed to allocate %zu bytes",
                           weft_device_name_tl(dev), nbytes);
            return NULL;
        }
    }
    struct weft_storage *s = storage_header(dev, data, nbytes);
    if (!s) {
        backend->free(backend->context, dev.index, data, nbytes);
        return NULL;
    }
    s->backend = backend;
    s->resizable = true;
    const struct weft_observer *o = WEFT_OBSERVER();
    if (__builtin_expect(o != NULL, 0))
        weft_observe_storage(o, s, true);
    return s;
}

struct weft_storage *weft_storage_wrap(weft_device dev, void *data, size_t nbytes,
                                       weft_deleter deleter, void *deleter_ctx)
{
    struct weft_storage *s = storage_header(dev, data, nbytes);
    if (!s)
        return NULL;
    s->deleter = deleter;
    s->deleter_ctx = deleter_ctx;
    return s;
}

void weft_storage_retain(struct weft_storage *s)
{
    if (s)
        WEFT_ATOMIC_INC(&s->refcount);
}

void weft_storage_release(struct weft_storage *s)
{
    if (!s || !weft_refcount_release(&s->refcount))
        return;
    const struct weft_observer *o = WEFT_OBSERVER();
    if (__builtin_expect(o != NULL, 0) && s->backend)
        weft_observe_storage(o, s, false);
    if (s->backend)
        s->backend->free(s->backend->context, s->device.index, s->data, s->nbytes);
    else if (s->deleter)
        s->deleter(s->deleter_ctx, s->data);
    weft_small_free(s, sizeof *s);
}

/* Moves `nbytes` from old to new memory on the storage's device. */
static int storage_move_bytes(struct weft_storage *s, void *dst, const void *src, size_t nbytes)
{
    if (nbytes == 0)
        return 0;
    if (s->device.type == WEFT_DEVICE_CPU) {
        memcpy(dst, src, nbytes);
        return 0;
    }
    /* Device memory: describe both buffers as 1-D uint8 tensors for the backend. */
    struct weft_storage from = {.refcount = 1, .device = s->device, .data = (void *)src,
                                .nbytes = nbytes};
    struct weft_storage to = from;
    to.data = dst;
    weft_tensor a = {.refcount = 1, .ndim = 1, .dtype = WEFT_U8, .device = s->device,
                     .shape = {(int64_t)nbytes}, .stride = {1}, .storage = &from};
    weft_tensor b = a;
    b.storage = &to;
    return s->backend->copy(s->backend->context, &b, &a, false);
}

int weft_storage_resize(struct weft_storage *s, size_t nbytes)
{
    if (!s)
        return WEFT_ERR_VALUE;
    if (!s->resizable)
        return weft_error_set(WEFT_ERR_RUNTIME, "Trying to resize storage that is not resizable");
    if (nbytes == s->nbytes)
        return 0;
    void *data = NULL;
    if (nbytes > 0) {
        data = s->backend->alloc(s->backend->context, s->device.index, nbytes);
        if (!data)
            return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "%s: failed to allocate %zu bytes",
                                  weft_device_name_tl(s->device), nbytes);
    }
    size_t keep = nbytes < s->nbytes ? nbytes : s->nbytes;
    int rc = storage_move_bytes(s, data, s->data, keep);
    if (rc != 0) {
        s->backend->free(s->backend->context, s->device.index, data, nbytes);
        return rc;
    }
    const struct weft_observer *o = WEFT_OBSERVER();
    if (__builtin_expect(o != NULL, 0))
        weft_observe_storage(o, s, false);
    s->backend->free(s->backend->context, s->device.index, s->data, s->nbytes);
    s->data = data;
    s->nbytes = nbytes;
    if (__builtin_expect(o != NULL, 0))
        weft_observe_storage(o, s, true);
    return 0;
}

uint64_t weft_storage_version(const struct weft_storage *s)
{
    return s ? __atomic_load_n(&s->version, __ATOMIC_RELAXED) : 0;
}

void weft_storage_bump_version(struct weft_storage *s)
{
    if (s)
        __atomic_add_fetch(&s->version, 1, __ATOMIC_RELAXED);
}
