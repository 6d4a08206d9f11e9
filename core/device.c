/* core/device.c: device type names and the "cuda:1" spelling of devices. */
#include "weft/device.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "weft/error.h"
#include "weft/plugin.h"

#define TYPE_NAME_MAX 32

/* The host is type 0 under PyTorch's name for it: host memory, printing and copies need
 * it without a lookup. It names a device type, not the plugin that provides its backend.
 * Entries are written once, under the lock, and never change afterwards, so readers of a
 * registered slot need no lock. */
#define HOST_DEVICE_TYPE_NAME "cpu"
static char type_names[WEFT_MAX_DEVICE_TYPES][TYPE_NAME_MAX] = {HOST_DEVICE_TYPE_NAME};
static int type_count = 1;
static pthread_mutex_t type_lock = PTHREAD_MUTEX_INITIALIZER;

static bool valid_type_name(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n >= TYPE_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
        if (!ok)
            return false;
    }
    return true;
}

static int find_type(const char *name, size_t len)
{
    int n = __atomic_load_n(&type_count, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n; i++)
        if (strlen(type_names[i]) == len && memcmp(type_names[i], name, len) == 0)
            return i;
    return -1;
}

int weft_device_type_id(const char *name, bool create)
{
    if (!name)
        return -1;
    int id = find_type(name, strlen(name));
    if (id >= 0 || !create || !valid_type_name(name))
        return id;
    pthread_mutex_lock(&type_lock);
    id = find_type(name, strlen(name));
    if (id < 0 && type_count < WEFT_MAX_DEVICE_TYPES) {
        id = type_count;
        snprintf(type_names[id], TYPE_NAME_MAX, "%s", name);
        __atomic_store_n(&type_count, id + 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&type_lock);
    return id;
}

const char *weft_device_type_name(int type)
{
    if (type < 0 || type >= __atomic_load_n(&type_count, __ATOMIC_ACQUIRE))
        return "unknown";
    return type_names[type];
}

char *weft_device_str(weft_device dev, char *buf, size_t size)
{
    if (!buf || size == 0)
        return buf;
    /* PyTorch prints the cpu without an index. */
    if (dev.type == WEFT_DEVICE_CPU)
        snprintf(buf, size, "%s", HOST_DEVICE_TYPE_NAME);
    else
        snprintf(buf, size, "%s:%d", weft_device_type_name(dev.type), dev.index);
    return buf;
}

const char *weft_device_name_tl(weft_device dev)
{
    static _Thread_local char buf[TYPE_NAME_MAX + 16];
    return weft_device_str(dev, buf, sizeof buf);
}

/* "cpu, cuda, ref" for the error message. */
static void list_types(char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    int n = __atomic_load_n(&type_count, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n && used < size; i++) {
        int w = snprintf(buf + used, size - used, "%s%s", i ? ", " : "", type_names[i]);
        if (w < 0)
            break;
        used += (size_t)w;
    }
}

static int parse_index(const char *text, const char *digits, int type, int16_t *out)
{
    char *end;
    errno = 0;
    if (*digits == '-')
        return weft_error_set(WEFT_ERR_VALUE, "Device index must not be negative");
    if (*digits < '0' || *digits > '9')
        return weft_error_set(WEFT_ERR_VALUE, "Invalid device string: '%s'", text);
    long v = strtol(digits, &end, 10);
    if (*end != '\0')
        return weft_error_set(WEFT_ERR_VALUE, "Invalid device string: '%s'", text);
    if (errno == ERANGE || v > INT16_MAX)
        return weft_error_set(WEFT_ERR_VALUE, "Device index %s is out of range in '%s'", digits,
                              text);
    if (type == WEFT_DEVICE_CPU && v != 0)
        return weft_error_set(WEFT_ERR_VALUE, "CPU device index must be -1 or zero, got %ld", v);
    *out = (int16_t)v;
    return 0;
}

int weft_device_parse(const char *text, weft_device *out)
{
    if (!text || !out)
        return weft_error_set(WEFT_ERR_VALUE, "weft_device_parse: NULL argument");
    const char *colon = strchr(text, ':');
    size_t len = colon ? (size_t)(colon - text) : strlen(text);
    int type = find_type(text, len);
    char name[TYPE_NAME_MAX];
    if (type < 0 && len < sizeof name) {
        memcpy(name, text, len);
        name[len] = '\0';
        if (weft_plugin_find_provider(WEFT_KIND_BACKEND, name, NULL, 0))
            type = weft_device_type_id(name, true);
    }
    if (type < 0) {
        char types[WEFT_MAX_DEVICE_TYPES * (TYPE_NAME_MAX + 2)];
        list_types(types, sizeof types);
        return weft_error_set(WEFT_ERR_VALUE,
                              "Expected one of %s device type at start of device string: %s",
                              types, text);
    }
    int16_t index = 0;
    if (colon && parse_index(text, colon + 1, type, &index) < 0)
        return WEFT_ERR_VALUE;
    out->type = (int16_t)type;
    out->index = index;
    return 0;
}
