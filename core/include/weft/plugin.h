/* weft/plugin.h: plugins, their descriptor, loading and name lookup.
 *
 * A plugin is a shared object exporting one symbol, `weft_plugin_init`, that returns a
 * pointer to a static descriptor. The core checks abi_version (must equal
 * WEFT_PLUGIN_ABI_VERSION; both versions are named when they differ) and struct_size (at
 * least the size of ABI 1's descriptor; larger is a newer plugin whose extra fields are
 * ignored), calls probe(), and when the plugin can run here, init(), which registers what
 * the plugin provides: backends, kernels, layouts, readers, optimizers, extras.
 */
#ifndef WEFT_PLUGIN_H
#define WEFT_PLUGIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define WEFT_PLUGIN_ABI_VERSION 1
#define WEFT_PLUGIN_ENTRY "weft_plugin_init"

/* name and init are required; probe (NULL: always usable) and fini are optional. */
struct weft_plugin {
    uint32_t abi_version;    /* WEFT_PLUGIN_ABI_VERSION */
    uint32_t struct_size;    /* sizeof(struct weft_plugin) */
    const char *name;        /* "cpu"; the file is weft-<name>.so */
    const char *version;     /* plugin's own version string */
    const char *description; /* one line */
    /* Can the plugin run on this machine? Returns 0 when it can; otherwise nonzero with
     * the reason written to why (e.g. "no CUDA device: CUDA driver version is
     * insufficient for CUDA runtime version"). Must not register anything. */
    int (*probe)(char *why, size_t why_size);
    /* Registers what the plugin provides; 0 or negative with weft_error_set(). */
    int (*init)(void);
    /* Optional: called at unload (process exit); releases caches. */
    void (*fini)(void);
};

typedef const struct weft_plugin *(*weft_plugin_init_fn)(void);

/* Put on the plugin's weft_plugin_init definition: plugins build with hidden visibility
 * and export only this entry. */
#define WEFT_PLUGIN_EXPORT __attribute__((visibility("default")))

/* What weft knows of a plugin file. */
struct weft_plugin_info {
    char path[4096];
    char name[64];
    char version[64];
    char description[256];
    uint32_t abi_version;
    uint32_t struct_size;
    bool loaded;       /* init() ran and succeeded */
    bool usable;       /* probe() said yes */
    char why[512];     /* probe's reason, or the load error */
};

/* Loads a plugin by name ("cpu" -> weft-cpu.so on the search path) or by path (any
 * name containing '/'). Loading twice is a no-op. A plugin whose probe says no is not
 * initialised: the call fails with the probe's reason (WEFT_ERR_DEVICE). Every failure
 * names the file and, for dlopen failures, includes dlerror() text. */
int weft_plugin_load(const char *name_or_path);
bool weft_plugin_is_loaded(const char *name);

/* Search path, in order: directories added here (or by [runtime] plugin_path), then
 * WEFT_PLUGIN_PATH (colon-separated), the running executable's ../plugins (build tree)
 * and ../lib/weft/plugins, then the installed plugin directory. */
void weft_plugin_path_add(const char *dir);
/* The search path as a NULL-terminated array (valid until the path changes). */
const char *const *weft_plugin_search_path(void);
/* Installed plugin directory (compile-time). */
const char *weft_plugin_install_dir(void);

/* Inspects a plugin file without initialising it: opens it, reads its descriptor and
 * runs its probe. Fills *info (with the reason when unusable) and returns 0 when the
 * file is a valid plugin (usable or not), negative (with error) when it is not one. */
int weft_plugin_inspect(const char *path, struct weft_plugin_info *info);
/* Calls fn for every weft-*.so on the search path (first one of each name wins). */
int weft_plugin_scan(void (*fn)(const struct weft_plugin_info *info, void *ctx), void *ctx);

/* Named extras: plugin-specific functions or data reached without link-time symbols,
 * e.g. weft_extra_find("cpu.blas_info"). Names are "<plugin>.<thing>". */
int weft_extra_register(const char *name, void *ptr);
void *weft_extra_find(const char *name);

#ifdef __cplusplus
}
#endif
#endif
