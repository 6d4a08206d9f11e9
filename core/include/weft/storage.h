/* weft/storage.h: a refcounted byte buffer that belongs to one device.
 *
 * Storage also carries the version counter: every tensor over a storage (a base, its
 * views, detach()ed aliases) shares it, and in-place ops bump it, as in PyTorch. */
#ifndef WEFT_STORAGE_H
#define WEFT_STORAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "weft/device.h"

#ifdef __cplusplus
extern "C" {
#endif

struct weft_backend;

typedef void (*weft_deleter)(void *ctx, void *data);

struct weft_storage {
    uint32_t refcount;   /* atomic; use retain/release */
    bool resizable;      /* false for external buffers */
    weft_device device;
    void *data;          /* NULL when nbytes == 0 */
    size_t nbytes;
    uint64_t version;    /* shared version counter; atomic */
    const struct weft_backend *backend; /* allocator owner; NULL for external memory */
    weft_deleter deleter; /* for external memory; may be NULL (memory not owned) */
    void *deleter_ctx;
};

/* New storage of nbytes on dev, allocated by the device's backend (loaded on demand).
 * Contents are uninitialised. Returns a new reference, or NULL with an error set. */
struct weft_storage *weft_storage_new(weft_device dev, size_t nbytes);

/* Wraps memory weft does not own, without copying. The storage is not resizable;
 * `deleter(ctx, data)` runs when the last reference goes (may be NULL). */
struct weft_storage *weft_storage_wrap(weft_device dev, void *data, size_t nbytes,
                                       weft_deleter deleter, void *deleter_ctx);

void weft_storage_retain(struct weft_storage *s);
void weft_storage_release(struct weft_storage *s); /* NULL is ignored */

/* Grows or shrinks the buffer, keeping min(old, new) bytes. Fails with
 * "Trying to resize storage that is not resizable" for wrapped memory. */
int weft_storage_resize(struct weft_storage *s, size_t nbytes);

uint64_t weft_storage_version(const struct weft_storage *s);
void weft_storage_bump_version(struct weft_storage *s);

#ifdef __cplusplus
}
#endif
#endif
