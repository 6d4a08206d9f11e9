/* core/backend.c: the registry of device backends, one per device type, and the generic
 * helpers that forward to them. */
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

/* ABI 1's struct ends with `features`; a plugin built against ABI 1 has at least this. */
#define BACKEND_ABI1_SIZE (offsetof(struct weft_backend, features) + sizeof(void *))

/* A method exists when the plugin's struct is large enough to hold it and it is set.
 * Fields appended after ABI 1 must be read through this, never directly. */
#define BACKEND_HAS(b, field)                                                            \
    ((b)->struct_size >= offsetof(struct weft_backend, field) + sizeof((b)->field) &&    \
     (b)->field != NULL)

static const struct weft_backend *backends[WEFT_MAX_DEVICE_TYPES];
static pthread_mutex_t backend_lock = PTHREAD_MUTEX_INITIALIZER;

static int check_backend(const struct weft_backend *b)
{
    if (!b)
        return weft_error_set(WEFT_ERR_PLUGIN, "weft_backend_register: backend is NULL");
    const char *name = b->abi_version == WEFT_PLUGIN_ABI_VERSION && b->name ? b->name : "?";
    if (b->abi_version != WEFT_PLUGIN_ABI_VERSION)
        return weft_error_set(WEFT_ERR_PLUGIN,
                              "backend was built for weft plugin ABI %u, but this weft has ABI "
                              "%d; rebuild the plugin against this weft",
                              b->abi_version, WEFT_PLUGIN_ABI_VERSION);
    if (b->struct_size < BACKEND_ABI1_SIZE)
        return weft_error_set(WEFT_ERR_PLUGIN,
                              "backend '%s' has struct_size %u, smaller than ABI %d's %zu bytes; "
                              "rebuild the plugin against this weft",
                              name, b->struct_size, WEFT_PLUGIN_ABI_VERSION, BACKEND_ABI1_SIZE);
    if (!b->name || !b->device_count || !b->alloc || !b->free || !b->copy)
        return weft_error_set(WEFT_ERR_PLUGIN,
                              "backend '%s' lacks a required method (name, device_count, "
                              "alloc, free and copy must all be set)",
                              name);
    return 0;
}

int weft_backend_register(const struct weft_backend *backend)
{
    if (check_backend(backend) < 0)
        return WEFT_ERR_PLUGIN;
    int type = weft_device_type_id(backend->name, true);
    if (type < 0)
        return weft_error_set(WEFT_ERR_PLUGIN,
                              "cannot register backend '%s': not a valid device type name, or "
                              "all %d device types are taken",
                              backend->name, WEFT_MAX_DEVICE_TYPES);
    int rc = type;
    pthread_mutex_lock(&backend_lock);
    if (backends[type] && backends[type] != backend)
        rc = weft_error_set(WEFT_ERR_PLUGIN, "a backend for device type '%s' is already registered",
                            backend->name);
    else
        __atomic_store_n(&backends[type], backend, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&backend_lock);
    return rc;
}

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
    if (weft_plugin_autoload_for_device(device_type) < 0) {
        wrap_error(had_error, prefix);
        return NULL;
    }
    b = weft_backend_find(device_type);
    if (!b)
        weft_error_set(WEFT_ERR_DEVICE, "%s: plugin '%s' loaded but registered no such backend",
                       prefix, name);
    return b;
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
    int n = b->device_count();
    return n < 0 ? 0 : n;
}

/* The backend that owns dev, with the index checked; NULL with an error otherwise. */
static const struct weft_backend *device_backend(weft_device dev)
{
    const struct weft_backend *b = weft_backend_get(dev.type);
    if (!b)
        return NULL;
    int n = b->device_count();
    if (dev.index < 0 || dev.index >= n) {
        weft_error_set(WEFT_ERR_DEVICE, "invalid device %s: only %d %s device(s) present",
                       weft_device_name_tl(dev), n < 0 ? 0 : n, b->name);
        return NULL;
    }
    return b;
}

int weft_synchronize(weft_device dev)
{
    const struct weft_backend *b = device_backend(dev);
    if (!b)
        return weft_error_code() ? weft_error_code() : WEFT_ERR_DEVICE;
    if (!BACKEND_HAS(b, synchronize))
        return 0; /* a backend without queues is always synchronized */
    return b->synchronize(dev.index);
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
    if (!BACKEND_HAS(b, copy_side) || !BACKEND_HAS(b, wait_side))
        return 0;
    int rc = b->copy_side(dst, src);
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
    return BACKEND_HAS(b, wait_side) ? b->wait_side(dev.index) : 0;
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
    if (!BACKEND_HAS(b, memory_stats))
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED,
                              "the %s backend does not provide memory statistics", b->name);
    /* Fields the backend does not know read as zero. */
    size_t size = out->struct_size;
    memset((char *)out + sizeof(out->struct_size), 0, size - sizeof(out->struct_size));
    return b->memory_stats(dev.index, out);
}

void weft_empty_cache(weft_device dev)
{
    const struct weft_backend *b = weft_backend_find(dev.type);
    if (b && BACKEND_HAS(b, empty_cache))
        b->empty_cache(dev.index);
}

int weft_set_num_threads(int n)
{
    if (n < 1)
        return weft_error_set(WEFT_ERR_VALUE, "set_num_threads expects a positive integer, got %d",
                              n);
    int rc = 0;
    for (int type = 0; type < WEFT_MAX_DEVICE_TYPES; type++) {
        const struct weft_backend *b = weft_backend_find(type);
        if (!b || !BACKEND_HAS(b, set_num_threads))
            continue;
        int r = b->set_num_threads(n);
        if (r < 0 && rc == 0)
            rc = r;
    }
    return rc;
}

int weft_get_num_threads(void)
{
    const struct weft_backend *b = weft_backend_find(WEFT_DEVICE_CPU);
    if (!b || !BACKEND_HAS(b, get_num_threads))
        return 1;
    int n = b->get_num_threads();
    return n > 0 ? n : 1;
}

/* ---- memory summary ---------------------------------------------------------------- */

static void format_bytes(uint64_t n, char *buf, size_t size)
{
    static const char *const units[] = {"B  ", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)n;
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    snprintf(buf, size, u == 0 ? "%.0f %s" : "%.2f %s", v, units[u]);
}

char *weft_memory_summary(weft_device dev, bool abbreviated)
{
    char extra[64];
    snprintf(extra, sizeof extra, "%s.memory_summary", weft_device_type_name(dev.type));
    char *(*own)(int, bool) = (char *(*)(int, bool))weft_extra_find(extra);
    if (own) {
        if (!device_backend(dev))
            return NULL;
        return own(dev.index, abbreviated);
    }
    struct weft_memory_stats st = {.struct_size = sizeof st};
    if (weft_memory_stats(dev, &st) < 0)
        return NULL;
    char name[32], a[24], pa[24], r[24], pr[24];
    format_bytes(st.allocated_bytes, a, sizeof a);
    format_bytes(st.peak_allocated_bytes, pa, sizeof pa);
    format_bytes(st.reserved_bytes, r, sizeof r);
    format_bytes(st.peak_reserved_bytes, pr, sizeof pr);
    static const char rule[] =
        "|===========================================================================|\n";
    static const char thin[] =
        "|---------------------------------------------------------------------------|\n";
    size_t size = 4096;
    char *out = malloc(size);
    if (!out) {
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "memory_summary: out of host memory");
        return NULL;
    }
    char title[80];
    snprintf(title, sizeof title, "weft memory summary, device %s",
             weft_device_str(dev, name, sizeof name));
    int n = snprintf(out, size,
                     "%s|%*s%*s|\n%s"
                     "|            Metric         | Cur Usage  | Peak Usage |    Requests       |\n"
                     "%s"
                     "| Allocated memory          | %10s | %10s | %9llu allocs  |\n"
                     "| Reserved memory           | %10s | %10s | %9llu frees   |\n"
                     "%s"
                     "| Requests served from the cache                    | %17llu |\n"
                     "| Allocation retries after freeing the cache        | %17llu |\n"
                     "| Out-of-memory errors                              | %17llu |\n"
                     "%s",
                     rule, (int)(38 + strlen(title) / 2), title, (int)(37 - strlen(title) / 2), "",
                     rule, thin, a, pa, (unsigned long long)st.num_allocs, r, pr,
                     (unsigned long long)st.num_frees, thin,
                     (unsigned long long)st.num_cache_hits,
                     (unsigned long long)st.num_alloc_retries, (unsigned long long)st.num_ooms,
                     rule);
    (void)abbreviated; /* the generic table is already the short one */
    if (n < 0 || (size_t)n >= size) {
        free(out);
        weft_error_set(WEFT_ERR_RUNTIME, "memory_summary: table too long");
        return NULL;
    }
    return out;
}
