/* weft/plugin.h: plugins, their descriptor and manifest, and how they are found.
 *
 * A plugin is a shared object named weft-<name>.so that exports one symbol,
 * `weft_plugin_init`, returning a pointer to a static descriptor, and that says in a
 * manifest what it provides:
 *
 *     WEFT_PLUGIN_MANIFEST("provides reader:idx reader:csv\n");
 *
 *     static const struct weft_plugin io_plugin = {
 *         .base = WEFT_VTABLE(WEFT_KIND_PLUGIN, "io", struct weft_plugin),
 *         .version = WEFT_VERSION_STRING,
 *         .description = "dataset readers",
 *         .manifest = weft_plugin_manifest,
 *         .init = io_init,
 *     };
 *     WEFT_PLUGIN_EXPORT const struct weft_plugin *weft_plugin_init(void) { return &io_plugin; }
 *
 * Loading checks the descriptor as every vtable is checked (weft/registry.h: an ABI-1
 * plugin is refused with both versions named), that its name matches the file's, runs
 * probe() (can it run here?) and then init(), which registers what the plugin provides
 * with weft_register(). Everything listed under `provides` must then be registered.
 *
 * The manifest lives in a section of its own in the file (.weft_manifest), which the
 * loader reads without loading the plugin, as packaging tools read ELF notes. That is
 * how weft_registry_get("reader", "idx") finds weft-io.so: the first plugin on the search
 * path whose manifest provides reader:idx is loaded. Its directives, one per line:
 *
 *     provides KIND:NAME [KIND:NAME ...]
 *         what init() registers (backend:cpu, layout:sparse_csr, module:scale, api:sparse)
 *     env VARIABLE KEY DEFAULT
 *         before the plugin is loaded, set VARIABLE (unless the environment has it) to the
 *         plugin's option KEY, or DEFAULT: for libraries the plugin links that read their
 *         settings once, when they load (libgomp's OMP_WAIT_POLICY)
 *
 * Options. init() receives the plugin's options: those the host supplies for the plugin's
 * name (weft-train passes the INI section named after it, [cpu] for weft-cpu.so); an
 * empty set otherwise. The options live only during init().
 */
#ifndef WEFT_PLUGIN_H
#define WEFT_PLUGIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "weft/options.h"
#include "weft/registry.h"

#ifdef __cplusplus
extern "C" {
#endif

#define WEFT_PLUGIN_ENTRY "weft_plugin_init"
#define WEFT_PLUGIN_MANIFEST_SECTION ".weft_manifest"

/* The plugin descriptor: a vtable of kind WEFT_KIND_PLUGIN whose name is the plugin's
 * ("cpu" for weft-cpu.so). init is required; probe (NULL: always usable) and fini are
 * optional. */
struct weft_plugin {
    struct weft_vtable base;
    const char *version;     /* the plugin's own version string */
    const char *description; /* one line */
    const char *manifest;    /* weft_plugin_manifest, as WEFT_PLUGIN_MANIFEST defines it */
    /* Can the plugin run on this machine? 0 when it can; otherwise nonzero with the
     * reason in why ("no CUDA device: CUDA driver version is insufficient for CUDA
     * runtime version"). Must not register anything. */
    int (*probe)(char *why, size_t why_size);
    /* Registers what the plugin provides; 0, or negative with weft_error_set(). */
    int (*init)(const weft_options *options);
    /* Optional: called at process exit, in reverse load order; releases caches. */
    void (*fini)(void);
};

typedef const struct weft_plugin *(*weft_plugin_init_fn)(void);

/* Put on the plugin's weft_plugin_init definition: plugins build with hidden visibility
 * and export only this entry. */
#define WEFT_PLUGIN_EXPORT __attribute__((visibility("default")))

/* Defines `weft_plugin_manifest` (for the descriptor's .manifest) in the section the
 * loader reads from the file. Use once per plugin, at file scope. */
#define WEFT_PLUGIN_MANIFEST(text)                                                           \
    __attribute__((used, section(WEFT_PLUGIN_MANIFEST_SECTION))) static const char           \
        weft_plugin_manifest[] = text

/* ---- loading ------------------------------------------------------------------------- */

/* Loads a plugin by name ("cpu" -> weft-cpu.so on the search path) or by path (any name
 * containing '/'). Loading twice is a no-op. A plugin whose probe says no is not
 * initialised: the call fails with the probe's reason (WEFT_ERR_DEVICE). Every failure
 * names the file and, for dlopen failures, includes dlerror() text. */
int weft_plugin_load(const char *name_or_path);
bool weft_plugin_is_loaded(const char *name);

/* Where plugins get their options: fn(ctx, plugin name) returns the options for it, or
 * NULL for none, each time a plugin loads (and for `env` directives, before). The
 * options must stay valid until the plugin's init() returns. NULL fn: no options. */
typedef const weft_options *(*weft_plugin_options_fn)(void *ctx, const char *plugin);
void weft_plugin_set_options_source(weft_plugin_options_fn fn, void *ctx);

/* ---- finding --------------------------------------------------------------------------- */

/* Search path, in order: directories added here (or by [runtime] plugin_path), then
 * WEFT_PLUGIN_PATH (colon-separated), the running executable's ../plugins (build tree)
 * and ../lib/weft/plugins, then the installed plugin directory. */
void weft_plugin_path_add(const char *dir);
/* The search path as a NULL-terminated array (valid until the path changes). */
const char *const *weft_plugin_search_path(void);
/* Installed plugin directory (compile-time). */
const char *weft_plugin_install_dir(void);
/* The first weft-<name>.so on the search path into path[size]; false when there is none. */
bool weft_plugin_find_file(const char *name, char *path, size_t size);
/* The name of the first plugin on the search path whose manifest provides kind:name, into
 * plugin[size], without loading anything; false when none does. */
bool weft_plugin_find_provider(const char *kind, const char *name, char *plugin, size_t size);

/* What weft knows of a plugin file. */
struct weft_plugin_info {
    char path[4096];
    char name[64];
    char version[64];
    char description[256];
    char manifest[1024];
    uint32_t abi_version;
    uint32_t struct_size;
    bool loaded;       /* init() ran and succeeded */
    bool usable;       /* probe() said yes */
    char why[512];     /* probe's reason, or the load error */
};

/* Inspects a plugin file without initialising it: opens it, reads its descriptor and
 * runs its probe. Fills *info (with the reason when unusable) and returns 0 when the
 * file is a valid plugin (usable or not), negative (with error) when it is not one. */
int weft_plugin_inspect(const char *path, struct weft_plugin_info *info);
/* Checks a plugin file as bytes, before anything maps it: 0, or WEFT_ERR_PLUGIN when it is
 * an ELF file of this machine cut short or damaged (its header, program headers, loadable
 * segments, dynamic section or section headers past the end), which dlopen() would die on
 * with SIGBUS. The loader does this itself; for tools that call dlopen() on a plugin. */
int weft_plugin_check_file(const char *path);
/* Calls fn for every weft-*.so on the search path (first one of each name wins). */
int weft_plugin_scan(void (*fn)(const struct weft_plugin_info *info, void *ctx), void *ctx);

#ifdef __cplusplus
}
#endif
#endif
