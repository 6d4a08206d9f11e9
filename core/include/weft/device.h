/* weft/device.h: devices are a (type, index) pair. Types are named: "cpu", the host,
 * is always type 0; every other type ("cuda", "ref") gets the next free id when it is
 * first named, by a backend registering or by a device string naming it. */
#ifndef WEFT_DEVICE_H
#define WEFT_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define WEFT_MAX_DEVICE_TYPES 8

enum { WEFT_DEVICE_CPU = 0 };

typedef struct weft_device {
    int16_t type;  /* WEFT_DEVICE_CPU or a named type's id */
    int16_t index; /* device ordinal within the type; always 0 for cpu */
} weft_device;

#define WEFT_CPU ((weft_device){WEFT_DEVICE_CPU, 0})

static inline bool weft_device_equal(weft_device a, weft_device b)
{
    return a.type == b.type && a.index == b.index;
}

/* Type id for a device type name, registering it when `create` is true.
 * Returns -1 (no error set) when unknown and not created, or when the table is full. */
int weft_device_type_id(const char *name, bool create);
/* Name of a device type ("cpu", "cuda", ...), or "unknown". */
const char *weft_device_type_name(int type);
/* Writes "cpu", "cuda:0", ... into buf (PyTorch's spelling); returns buf. */
char *weft_device_str(weft_device dev, char *buf, size_t size);
/* Parses "cpu", "cuda", "cuda:1", "ref:0": the type is one already named or one that a
 * plugin on the search path provides a backend for (nothing is loaded: as torch.device,
 * naming a device that cannot run here is not an error until it is used). Sets a
 * WEFT_ERR_VALUE error on failure. */
int weft_device_parse(const char *text, weft_device *out);

#ifdef __cplusplus
}
#endif
#endif
