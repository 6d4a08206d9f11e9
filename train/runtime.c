/* train/runtime.c: process set-up from the [runtime] section of a configuration. */
#include "weft/runtime.h"

#include "weft/ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft/backend.h"
#include "weft/error.h"
#include "weft/plugin.h"
#include "weft/registry.h"
#include "weft/tensor.h"

#define SECTION "runtime"

struct runtime_opts {
    const char *backend;
    int64_t device;
    int64_t seed;
    bool has_seed;
    const char *plugins;
    const char *plugin_path;
    bool allow_tf32;
};


/* Replaces the error the failed call just set with "<prefix>: <it>", keeping its code.
 * Leaves an older error (pending before that call) alone: the first error wins. */
static int wrap_error(bool had_error, const char *prefix)
{
    if (had_error)
        return weft_error_code();
    return weft_error_prefix("%s", prefix);
}

static int non_negative(struct weft_config *cfg, const char *key, int64_t v, int64_t max)
{
    if (v >= 0 && v <= max)
        return 0;
    return weft_error_set(WEFT_ERR_CONFIG, "%s: [%s] %s = %lld: expected an integer from 0 to %lld",
                          weft_config_name(cfg), SECTION, key, (long long)v, (long long)max);
}

/* Keys that moved to the section of the plugin that reads them. */
static int moved_key(struct weft_config *cfg, const char *key, const char *plugin)
{
    if (!weft_config_has(cfg, SECTION, key))
        return 0;
    weft_config_mark_known(cfg, SECTION, key);
    return weft_error_set(WEFT_ERR_CONFIG,
                          "%s: [%s] %s: this setting belongs to the %s plugin now: write it as "
                          "[%s] %s",
                          weft_config_name(cfg), SECTION, key, plugin, plugin, key);
}

static int read_opts(struct weft_config *cfg, struct runtime_opts *o)
{
    o->backend = weft_config_string(cfg, SECTION, "backend", "cpu");
    o->plugins = weft_config_string(cfg, SECTION, "plugins", "");
    o->plugin_path = weft_config_string(cfg, SECTION, "plugin_path", "");
    o->has_seed = weft_config_has(cfg, SECTION, "seed");
    if (moved_key(cfg, "threads", "cpu") < 0 || moved_key(cfg, "wait_policy", "cpu") < 0 ||
        weft_config_int(cfg, SECTION, "device", 0, &o->device) < 0 ||
        weft_config_int(cfg, SECTION, "seed", 0, &o->seed) < 0 ||
        weft_config_bool(cfg, SECTION, "allow_tf32", false, &o->allow_tf32) < 0)
        return WEFT_ERR_CONFIG;
    if (non_negative(cfg, "device", o->device, INT16_MAX) < 0)
        return WEFT_ERR_CONFIG;
    /* Seeds are unsigned 64-bit; a negative one is far more likely a typo than 2^64-1. */
    if (o->has_seed && o->seed < 0)
        return weft_error_set(WEFT_ERR_CONFIG, "%s: [%s] seed = %lld: expected a non-negative "
                                               "integer",
                              weft_config_name(cfg), SECTION, (long long)o->seed);
    if (!o->backend[0] || strchr(o->backend, '/'))
        return weft_error_set(WEFT_ERR_CONFIG, "%s: [%s] backend = '%s': expected a backend "
                                               "name such as cpu or cuda",
                              weft_config_name(cfg), SECTION, o->backend);
    return 0;
}

/* Loads each plugin named in a space- or comma-separated list. */
static int load_plugin_list(struct weft_config *cfg, const char *list)
{
    char *copy = strdup(list);
    if (!copy)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "runtime: out of memory");
    int rc = 0;
    char *save = NULL;
    for (char *name = strtok_r(copy, " \t\n,", &save); name && rc == 0;
         name = strtok_r(NULL, " \t\n,", &save)) {
        bool had_error = weft_error_code() != WEFT_OK;
        if (weft_plugin_load(name) < 0) {
            char prefix[256];
            snprintf(prefix, sizeof prefix, "%s: [%s] plugins: '%s'", weft_config_name(cfg),
                     SECTION, name);
            rc = wrap_error(had_error, prefix);
        }
    }
    free(copy);
    return rc;
}

/* Finds the backend (loading the plugin that provides it); an unusable device says why
 * in the probe's words. */
static int load_backend(struct weft_config *cfg, const char *name)
{
    bool had_error = weft_error_code() != WEFT_OK;
    if (weft_registry_get(WEFT_KIND_BACKEND, name))
        return 0;
    char prefix[256];
    if (weft_error_code() == WEFT_ERR_DEVICE)
        snprintf(prefix, sizeof prefix, "backend '%s' is not usable", name);
    else if (cfg)
        snprintf(prefix, sizeof prefix, "%s: [%s] backend = '%s'", weft_config_name(cfg), SECTION,
                 name);
    else
        snprintf(prefix, sizeof prefix, "backend '%s'", name);
    return wrap_error(had_error, prefix);
}

static int select_device(const char *name, int64_t index, weft_device *device)
{
    int type = weft_device_type_id(name, false);
    const struct weft_backend *b = type >= 0 ? weft_backend_find(type) : NULL;
    if (!b)
        return weft_error_set(WEFT_ERR_PLUGIN,
                              "plugin '%s' loaded but registered no backend named '%s'", name,
                              name);
    int count = b->device_count(b->context);
    if (count < 0)
        count = 0;
    if (index >= count)
        return weft_error_set(WEFT_ERR_DEVICE, "%s:%lld requested but only %d %s device(s) present",
                              name, (long long)index, count, name);
    device->type = (int16_t)type;
    device->index = (int16_t)index;
    return 0;
}

int weft_runtime_init(struct weft_config *cfg, weft_device *device)
{
    struct runtime_opts o;
    int rc = read_opts(cfg, &o);
    if (rc < 0)
        return rc;
    if (o.plugin_path[0])
        weft_plugin_path_add(o.plugin_path);
    /* Every plugin loaded from now on (this backend, a reader named later) gets the
     * section named after it, [cpu] for weft-cpu.so. */
    if (cfg)
        weft_config_serve_plugins(cfg);
    rc = load_backend(cfg, o.backend);
    if (rc == 0)
        rc = load_plugin_list(cfg, o.plugins);
    weft_device dev = WEFT_CPU;
    if (rc == 0)
        rc = select_device(o.backend, o.device, &dev);
    if (rc < 0)
        return rc;
    if (o.has_seed)
        weft_manual_seed((uint64_t)o.seed);
    weft_set_allow_tf32(o.allow_tf32);
    if (device)
        *device = dev;
    return 0;
}
