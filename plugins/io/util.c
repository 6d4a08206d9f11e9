/* plugins/io/util.c: config keys shared by the readers, byte order, overflow checks. */
#include <string.h>

#include "io.h"

int io_config_path(struct weft_config *cfg, const char *section, const char *key, bool required,
                   const char *what, char *out, size_t size)
{
    const char *value = weft_config_string(cfg, section, key, NULL);
    if (!value) {
        if (!required)
            return 0;
        return weft_error_set(WEFT_ERR_CONFIG, "%s: [%s] missing key '%s': expected %s",
                              weft_config_name(cfg), section, key, what);
    }
    if (!value[0])
        return weft_error_set(WEFT_ERR_CONFIG, "%s: [%s] %s = '': expected %s",
                              weft_config_name(cfg), section, key, what);
    int rc = weft_dataset_resolve_path(cfg, value, out, size);
    return rc < 0 ? rc : 1;
}

int io_config_int_range(struct weft_config *cfg, const char *section, const char *key,
                        int64_t def, int64_t lo, int64_t hi, int64_t *out)
{
    int64_t v;
    bool present = weft_config_has(cfg, section, key);
    int rc = weft_config_int(cfg, section, key, def, &v);
    if (rc < 0)
        return rc;
    if (present && (v < lo || v > hi))
        return weft_error_set(WEFT_ERR_CONFIG, "%s: [%s] %s = '%lld': expected an integer "
                                               "from %lld to %lld",
                              weft_config_name(cfg), section, key, (long long)v,
                              (long long)lo, (long long)hi);
    *out = v;
    return 0;
}

bool io_host_little_endian(void)
{
    const uint16_t one = 1;
    unsigned char first;
    memcpy(&first, &one, 1);
    return first == 1;
}

void io_copy_item(void *dst, const void *src, size_t size, bool swap)
{
    if (!swap) {
        memcpy(dst, src, size);
        return;
    }
    const unsigned char *s = src;
    unsigned char *d = dst;
    for (size_t i = 0; i < size; i++)
        d[i] = s[size - 1 - i];
}

void io_swap_bytes(void *data, size_t n, size_t size)
{
    if (size < 2)
        return;
    unsigned char *p = data;
    for (size_t k = 0; k < n; k++, p += size)
        for (size_t i = 0, j = size - 1; i < j; i++, j--) {
            unsigned char t = p[i];
            p[i] = p[j];
            p[j] = t;
        }
}

bool io_mul_i64(int64_t a, int64_t b, int64_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}
