/* weft/error.h: sticky, thread-local error state.
 *
 * A function that fails returns NULL (or a negative status) and records a code and a
 * message for the calling thread. The first error wins: later failures do not
 * overwrite it until weft_error_clear() is called, and an op given a NULL input returns
 * NULL without touching the record. A chain of calls therefore needs one check at the end.
 */
#ifndef WEFT_ERROR_H
#define WEFT_ERROR_H

#include <stdarg.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Error codes; each maps to the PyTorch exception class a user would expect. */
enum weft_status {
    WEFT_OK = 0,
    WEFT_ERR_VALUE = -1,           /* ValueError: a value out of its allowed range */
    WEFT_ERR_INDEX = -2,           /* IndexError: a dim or index out of range */
    WEFT_ERR_TYPE = -3,            /* TypeError: wrong dtype */
    WEFT_ERR_RUNTIME = -4,         /* RuntimeError: shape/device mismatch, invariants */
    WEFT_ERR_OUT_OF_MEMORY = -5,   /* an allocator could not satisfy a request */
    WEFT_ERR_NOT_IMPLEMENTED = -6, /* no kernel for (op, device, layout, dtype) */
    WEFT_ERR_IO = -7,              /* file could not be read or written */
    WEFT_ERR_PLUGIN = -8,          /* plugin not found, refused or failed to start */
    WEFT_ERR_CONFIG = -9,          /* bad configuration file, key or value */
    WEFT_ERR_DEVICE = -10,         /* device unavailable or failed */
};

/* Records `code` and the printf-formatted message unless an error is already pending.
 * Returns `code`, so `return weft_error_set(...)` reads naturally. */
int weft_error_set(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int weft_error_setv(int code, const char *fmt, va_list ap);

/* Puts context in front of the pending error's message ("<prefix>: <message>"), keeping
 * its code, which it returns. With no error pending it returns WEFT_ERR_RUNTIME and
 * records nothing. */
int weft_error_prefix(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Gives the pending error another code, keeping its message: the caller knows better
 * whose fault it is (a data file that is a FIFO is the config's, not an I/O failure).
 * Returns code; with no error pending it returns WEFT_ERR_RUNTIME and records nothing. */
int weft_error_recode(int code);

/* The pending code (WEFT_OK when none) and message ("" when none). The message stays
 * valid until the next weft_error_clear() on this thread. */
int weft_error_code(void);
const char *weft_error_message(void);

/* Forgets the pending error. */
void weft_error_clear(void);

/* Name of a code, e.g. "RuntimeError" for WEFT_ERR_RUNTIME. Never NULL. */
const char *weft_status_name(int code);

/* Host allocations that record an OUT_OF_MEMORY error when they fail, for the growing
 * arrays and copied strings of parsers and registries. weft_grow makes *array hold at
 * least `needed` elements of elem_size bytes (doubling *capacity, from 8); returns 0 or
 * the error. weft_strdup returns a malloc'd copy or NULL with the error set. */
int weft_grow(void **array, size_t *capacity, size_t needed, size_t elem_size);
char *weft_strdup(const char *s);

/* Python's repr(float) of v into buf ("0.1", "1.0", "1e-05", "100000.0", "inf"), for
 * messages that quote a value as PyTorch does. Returns buf. */
const char *weft_repr_float(double v, char *buf, size_t size);

#ifdef __cplusplus
}
#endif
#endif
