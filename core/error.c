/* core/error.c: the sticky thread-local error record, and floats as PyTorch quotes them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "weft/error.h"

#define WEFT_ERROR_MESSAGE_MAX 2048

static WEFT_FAST_TLS int error_code;
static __thread char error_message[WEFT_ERROR_MESSAGE_MAX];

int weft_error_setv(int code, const char *fmt, va_list ap)
{
    if (error_code != WEFT_OK)
        return code; /* the first error is the cause; keep it */
    error_code = code;
    vsnprintf(error_message, sizeof error_message, fmt, ap);
    return code;
}

int weft_error_set(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    weft_error_setv(code, fmt, ap);
    va_end(ap);
    return code;
}

int weft_error_prefix(const char *fmt, ...)
{
    if (error_code == WEFT_OK)
        return WEFT_ERR_RUNTIME;
    char prefix[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    /* Shift the message right and put "<prefix>: " in front; truncate at the end. */
    size_t plen = strlen(prefix) + 2, mlen = strlen(error_message);
    if (plen + mlen >= sizeof error_message)
        mlen = sizeof error_message - plen - 1;
    memmove(error_message + plen, error_message, mlen);
    error_message[plen + mlen] = '\0';
    memcpy(error_message, prefix, plen - 2);
    memcpy(error_message + plen - 2, ": ", 2);
    return error_code;
}

int weft_error_recode(int code)
{
    if (error_code == WEFT_OK)
        return WEFT_ERR_RUNTIME;
    error_code = code;
    return code;
}

int weft_error_code(void)
{
    return error_code;
}

const char *weft_error_message(void)
{
    return error_message;
}

void weft_error_clear(void)
{
    error_code = WEFT_OK;
    error_message[0] = '\0';
}

const char *weft_status_name(int code)
{
    switch (code) {
    case WEFT_OK: return "OK";
    case WEFT_ERR_VALUE: return "ValueError";
    case WEFT_ERR_INDEX: return "IndexError";
    case WEFT_ERR_TYPE: return "TypeError";
    case WEFT_ERR_RUNTIME: return "RuntimeError";
    case WEFT_ERR_OUT_OF_MEMORY: return "OutOfMemoryError";
    case WEFT_ERR_NOT_IMPLEMENTED: return "NotImplementedError";
    case WEFT_ERR_IO: return "IOError";
    case WEFT_ERR_PLUGIN: return "PluginError";
    case WEFT_ERR_CONFIG: return "ConfigError";
    case WEFT_ERR_DEVICE: return "DeviceError";
    default: return "UnknownError";
    }
}

/* repr(float): the shortest digits that read back as v, in exponent form when the
 * decimal exponent is below -4 or at least 16 ("1e-05", "1e+16"), else fixed with a
 * ".0" on whole numbers ("0.1", "1.0"). */
const char *weft_repr_float(double v, char *buf, size_t size)
{
    if (isnan(v) || isinf(v)) {
        snprintf(buf, size, "%s", isnan(v) ? "nan" : v < 0 ? "-inf" : "inf");
        return buf;
    }
    char sci[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(sci, sizeof sci, "%.*e", prec - 1, v);
        if (strtod(sci, NULL) == v)
            break;
    }
    /* sci is "[-]d[.ddd]e[+-]xx": split into sign, digits and exponent. */
    const char *p = sci;
    bool negative = *p == '-';
    p += negative;
    char digits[24];
    int nd = 0;
    for (; *p != 'e'; p++)
        if (*p != '.')
            digits[nd++] = *p;
    digits[nd] = '\0';
    int exp = atoi(p + 1);
    const char *sign = negative ? "-" : "";
    if (exp < -4 || exp >= 16) {
        snprintf(buf, size, "%s%c%s%se%c%02d", sign, digits[0], nd > 1 ? "." : "", digits + 1,
                 exp < 0 ? '-' : '+', abs(exp));
    } else if (exp < 0) {
        snprintf(buf, size, "%s0.%.*s%s", sign, -exp - 1, "0000", digits);
    } else if (exp + 1 >= nd) {
        snprintf(buf, size, "%s%s%.*s.0", sign, digits, exp + 1 - nd, "0000000000000000");
    } else {
        snprintf(buf, size, "%s%.*s.%s", sign, exp + 1, digits, digits + exp + 1);
    }
    return buf;
}

int weft_grow(void **array, size_t *capacity, size_t needed, size_t elem_size)
{
    if (needed <= *capacity)
        return 0;
    size_t n = *capacity ? *capacity : 8, bytes;
    while (n < needed)
        n *= 2;
    if (__builtin_mul_overflow(n, elem_size, &bytes))
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory for %zu entries", n);
    void *p = realloc(*array, bytes);
    if (!p)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory for %zu entries", n);
    *array = p;
    *capacity = n;
    return 0;
}

char *weft_strdup(const char *s)
{
    char *d = strdup(s);
    if (!d)
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory for a %zu-byte string",
                       strlen(s));
    return d;
}
