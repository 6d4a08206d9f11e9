/* plugins/io/util.c: the path key shared by the readers, byte order. */
#include <string.h>

#include "io.h"

int io_config_path(const weft_options *o, const char *key, bool required, const char *what,
                   char *out, size_t size)
{
    const char *value = weft_options_string(o, key, NULL);
    if (!value) {
        if (!required)
            return 0;
        return weft_options_error(o, "missing key '%s': expected %s", key, what);
    }
    if (!value[0])
        return weft_options_error(o, "%s = '': expected %s", key, what);
    return weft_options_path(o, key, out, size);
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
