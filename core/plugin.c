/* core/plugin.c: the loader: checking and starting plugins, and loading the one that
 * provides a kind:name on demand (its manifest says so). plugin_path.c finds the files.
 *
 * One recursive lock guards the loader: a plugin's init() may load another plugin, or
 * ask for a backend that loads one, on the same thread. Lock order: loader, then the
 * backend/kernel/device registries (which never call back into the loader).
 *
 * Plugins are never dlclose()d once their code has run: they may have registered
 * pointers into themselves, started threads or initialised a driver, and sanitizers and
 * OpenMP runtimes misbehave when a library vanishes under them.
 */
#define _GNU_SOURCE
#include "weft/plugin.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "weft/device.h"
#include "weft/error.h"
#include "weft/registry.h"

static int check_plugin(const struct weft_vtable *v)
{
    const struct weft_plugin *p = (const struct weft_plugin *)v;
    if (!p->init)
        return weft_error_set(WEFT_ERR_PLUGIN, "plugin '%s': its descriptor has no init()",
                              v->name);
    return 0;
}

const struct weft_kind weft_plugin_kind = {
    .base = WEFT_VTABLE(WEFT_KIND_KIND, WEFT_KIND_PLUGIN, struct weft_kind),
    .description = "plugins (their descriptors, registered once they have started)",
    .min_size = sizeof(struct weft_plugin),
    .check = check_plugin,
};

enum plugin_state { PLUGIN_STARTING, PLUGIN_LOADED, PLUGIN_REFUSED, PLUGIN_FAILED };

struct plugin_rec {
    char *name;
    char *path;
    const struct weft_plugin *desc;
    enum plugin_state state;
    char *why; /* the error a refused or failed plugin gave, repeated on later loads */
    int code;  /* and its code */
};


static pthread_mutex_t loader_lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static struct plugin_rec *plugins; /* in load order */
static size_t nplugins, cap_plugins;
static bool fini_registered;


static weft_plugin_options_fn options_source;
static void *options_ctx;

/* The plugin whose init() runs on this thread: what it registers is recorded as its. */
static _Thread_local const char *initialising;

/* ---- small helpers -------------------------------------------------------------- */

/* ---- opening and checking a plugin file --------------------------------------- */

/* Opens path, calls its entry and checks the descriptor's ABI and required fields.
 * Reports the descriptor's abi_version and struct_size as soon as they are known (for
 * weft_plugin_inspect), even when the check then fails. */
static const struct weft_plugin *open_plugin(const char *path, uint32_t *abi, uint32_t *size)
{
    if (weft_elf_check_whole(path) < 0)
        return NULL;
    dlerror();
    void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        /* the dynamic loader's own words for running out of memory: the cause as it is */
        const char *why = dlerror();
        bool oom = why && (strstr(why, "cannot allocate memory") ||
                           strstr(why, "Cannot allocate memory") ||
                           strstr(why, "cannot create shared object descriptor") ||
                           strstr(why, "out of memory"));
        weft_error_set(oom ? WEFT_ERR_OUT_OF_MEMORY : WEFT_ERR_PLUGIN,
                       "cannot load plugin %s: %s%s", path, why ? why : "dlopen failed",
                       oom ? " (out of memory)" : "");
        return NULL;
    }
    dlerror();
    weft_plugin_init_fn entry = (weft_plugin_init_fn)dlsym(handle, WEFT_PLUGIN_ENTRY);
    if (!entry) {
        const char *why = dlerror();
        weft_error_set(WEFT_ERR_PLUGIN, "plugin %s has no entry point %s: %s", path,
                       WEFT_PLUGIN_ENTRY, why ? why : "symbol is NULL");
        goto refuse;
    }
    const struct weft_plugin *desc = entry();
    if (!desc) {
        weft_error_set(WEFT_ERR_PLUGIN, "plugin %s: %s() returned no descriptor", path,
                       WEFT_PLUGIN_ENTRY);
        goto refuse;
    }
    *abi = desc->base.abi_version;
    *size = desc->base.struct_size;
    if (desc->base.abi_version != WEFT_ABI_VERSION) {
        weft_error_set(WEFT_ERR_PLUGIN,
                       "plugin %s was built for weft ABI %u, but this weft has ABI %d; "
                       "rebuild the plugin against this weft",
                       path, desc->base.abi_version, WEFT_ABI_VERSION);
        goto refuse;
    }
    if (weft_registry_check(desc) < 0 ||
        weft_manifest_check(desc->manifest, desc->base.name) < 0) {
        weft_error_prefix("plugin %s", path);
        goto refuse;
    }
    if (strcmp(desc->base.kind, WEFT_KIND_PLUGIN) != 0) {
        weft_error_set(WEFT_ERR_PLUGIN, "plugin %s: its descriptor is a '%s', not a '%s'", path,
                       desc->base.kind, WEFT_KIND_PLUGIN);
        goto refuse;
    }
    return desc;
refuse:
    /* Only the entry point has run, so unloading is safe and keeps refused files from
     * piling up in the process. */
    dlclose(handle);
    return NULL;
}

/* Runs the probe; true when the plugin can run here, else why holds the reason. */
static bool probe_plugin(const struct weft_plugin *desc, char *why, size_t size)
{
    why[0] = '\0';
    if (!desc->probe)
        return true;
    if (desc->probe(why, size) == 0)
        return true;
    if (!why[0])
        snprintf(why, size, "the plugin's probe gave no reason");
    return false;
}

/* ---- the loaded-plugin table (caller holds loader_lock) ---------------------------- */

static struct plugin_rec *find_rec(const char *name, const char *path)
{
    for (size_t i = 0; i < nplugins; i++) {
        if (name && strcmp(plugins[i].name, name) == 0)
            return &plugins[i];
        if (path && strcmp(plugins[i].path, path) == 0)
            return &plugins[i];
    }
    return NULL;
}

static struct plugin_rec *add_rec(const char *name, const char *path,
                                  const struct weft_plugin *desc)
{
    if (nplugins == cap_plugins) {
        size_t cap = cap_plugins ? cap_plugins * 2 : 16;
        struct plugin_rec *grown = realloc(plugins, cap * sizeof *grown);
        if (!grown) {
            weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "plugin loader: out of memory");
            return NULL;
        }
        plugins = grown;
        cap_plugins = cap;
    }
    struct plugin_rec *r = &plugins[nplugins];
    *r = (struct plugin_rec){.name = strdup(name), .path = strdup(path), .desc = desc,
                             .state = PLUGIN_STARTING};
    if (!r->name || !r->path) {
        free(r->name);
        free(r->path);
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "plugin loader: out of memory");
        return NULL;
    }
    nplugins++;
    return r;
}

/* Records why a plugin cannot be used, so that later loads fail the same way without
 * probing again, and sets that error. */
static int refuse_rec(struct plugin_rec *r, enum plugin_state state, int code, const char *fmt,
                      ...) __attribute__((format(printf, 4, 5)));
static int refuse_rec(struct plugin_rec *r, enum plugin_state state, int code, const char *fmt,
                      ...)
{
    char msg[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    r->state = state;
    r->code = code;
    free(r->why);
    r->why = strdup(msg); /* NULL is survivable: later loads give a vaguer message */
    return weft_error_set(code, "%s", msg);
}

/* atexit: fini() in reverse load order, while every plugin is still mapped. */
static void run_finis(void)
{
    pthread_mutex_lock(&loader_lock);
    for (size_t i = nplugins; i-- > 0;) {
        struct plugin_rec *r = &plugins[i];
        if (r->state == PLUGIN_LOADED && r->desc->fini)
            r->desc->fini();
        r->state = PLUGIN_FAILED;
        free(r->why);
        r->why = strdup("weft is shutting down");
    }
    pthread_mutex_unlock(&loader_lock);
}

/* The answer for a plugin already in the table. */
static int existing_result(const struct plugin_rec *r)
{
    if (r->state == PLUGIN_LOADED || r->state == PLUGIN_STARTING)
        return 0; /* STARTING: its own init() asked for it again */
    int code = r->code ? r->code : r->state == PLUGIN_REFUSED ? WEFT_ERR_DEVICE : WEFT_ERR_PLUGIN;
    return weft_error_set(code, "%s", r->why ? r->why : "plugin failed earlier");
}

/* The host's options for plugin `name`, or NULL. Caller holds loader_lock. */
static const weft_options *options_for(const char *name)
{
    return options_source ? options_source(options_ctx, name) : NULL;
}

struct provided_check {
    const char *plugin;
};

static int check_registered(void *ctx, const char *kind, const char *name)
{
    const struct provided_check *c = ctx;
    if (weft_registry_find(kind, name))
        return 0;
    weft_error_set(WEFT_ERR_PLUGIN,
                   "its manifest says it provides %s:%s, but init() registered no %s '%s'",
                   kind, name, kind, name);
    (void)c;
    return -1;
}

/* init() with the plugin's options, recording what it registers as its own; then the
 * descriptor joins the registry and everything the manifest promises must be there. */
static int run_init(const struct weft_plugin *desc)
{
    const char *outer = initialising;
    initialising = desc->base.name;
    int rc = desc->init(options_for(desc->base.name));
    if (rc >= 0 && weft_error_code() == WEFT_OK)
        rc = weft_register(desc);
    if (rc >= 0 && weft_error_code() == WEFT_OK) {
        struct provided_check c = {desc->base.name};
        rc = weft_manifest_each_provided(desc->manifest, check_registered, &c);
    }
    initialising = outer;
    return rc < 0 ? rc : 0;
}

/* Probes and initialises a checked plugin. Caller holds loader_lock. */
static int start_plugin(const char *path, const struct weft_plugin *desc)
{
    struct plugin_rec *r = add_rec(desc->base.name, path, desc);
    if (!r)
        return WEFT_ERR_OUT_OF_MEMORY;
    char why[512];
    if (!probe_plugin(desc, why, sizeof why))
        return refuse_rec(r, PLUGIN_REFUSED, WEFT_ERR_DEVICE, "%s (plugin %s)", why, path);
    bool had_error = weft_error_code() != WEFT_OK;
    int rc = run_init(desc);
    if (rc < 0 || (!had_error && weft_error_code() != WEFT_OK)) {
        char msg[1024] = "init() failed without saying why";
        /* out of memory in init() is the cause as it is (exit 1), not a broken plugin */
        int code = !had_error && weft_error_code() == WEFT_ERR_OUT_OF_MEMORY
                       ? WEFT_ERR_OUT_OF_MEMORY
                       : WEFT_ERR_PLUGIN;
        if (!had_error && weft_error_code() != WEFT_OK)
            snprintf(msg, sizeof msg, "%s", weft_error_message());
        if (!had_error)
            weft_error_clear();
        /* r may have moved if init() loaded other plugins. */
        return refuse_rec(find_rec(NULL, path), PLUGIN_FAILED, code,
                          "plugin %s failed to initialise: %s", path, msg);
    }
    r = find_rec(NULL, path);
    r->state = PLUGIN_LOADED;
    if (!fini_registered)
        fini_registered = atexit(run_finis) == 0;
    return 0;
}

/* Loads the file at path; `want` is the name it was looked up by (NULL for a path). */
static int load_file(const char *path, const char *want)
{
    char name[64];
    if (weft_plugin_name_from_file(path, name, sizeof name))
        weft_manifest_apply_env(weft_plugin_manifest_of(path), options_for(name));
    uint32_t abi = 0, size = 0;
    const struct weft_plugin *desc = open_plugin(path, &abi, &size);
    if (!desc)
        return WEFT_ERR_PLUGIN;
    if (want && strcmp(desc->base.name, want) != 0)
        return weft_error_set(WEFT_ERR_PLUGIN,
                              "plugin %s calls itself '%s', but its file name says '%s'", path,
                              desc->base.name, want);
    struct plugin_rec *same_name = find_rec(desc->base.name, NULL);
    if (same_name) {
        if (strcmp(same_name->path, path) == 0)
            return existing_result(same_name);
        return weft_error_set(WEFT_ERR_PLUGIN, "plugin %s: a plugin named '%s' is already loaded "
                                               "from %s",
                              path, desc->base.name, same_name->path);
    }
    return start_plugin(path, desc);
}

static int load_by_path(const char *given)
{
    char real[PATH_MAX];
    if (!realpath(given, real))
        return weft_error_set(WEFT_ERR_PLUGIN, "cannot load plugin %s: %s", given,
                              strerror(errno));
    struct plugin_rec *r = find_rec(NULL, real);
    if (r)
        return existing_result(r);
    return load_file(real, NULL);
}

static int load_by_name(const char *name)
{
    if (!name[0] || strlen(name) > 63)
        return weft_error_set(WEFT_ERR_PLUGIN, "invalid plugin name '%s'", name);
    struct plugin_rec *r = find_rec(name, NULL);
    if (r)
        return existing_result(r);
    char *found = weft_plugin_path_find(name);
    if (!found)
        return WEFT_ERR_PLUGIN;
    char real[PATH_MAX];
    const char *path = realpath(found, real) ? real : found;
    int rc = load_file(path, name);
    free(found);
    return rc;
}

int weft_plugin_load(const char *name_or_path)
{
    if (!name_or_path)
        return weft_error_set(WEFT_ERR_PLUGIN, "weft_plugin_load: name is NULL");
    pthread_mutex_lock(&loader_lock);
    int rc = strchr(name_or_path, '/') ? load_by_path(name_or_path) : load_by_name(name_or_path);
    pthread_mutex_unlock(&loader_lock);
    return rc < 0 ? rc : 0;
}

bool weft_plugin_is_loaded(const char *name)
{
    if (!name)
        return false;
    pthread_mutex_lock(&loader_lock);
    struct plugin_rec *r = find_rec(name, NULL);
    bool loaded = r && r->state == PLUGIN_LOADED;
    pthread_mutex_unlock(&loader_lock);
    return loaded;
}

const char *weft_plugin_initialising(void)
{
    return initialising ? initialising : "";
}

void weft_plugin_set_options_source(weft_plugin_options_fn fn, void *ctx)
{
    pthread_mutex_lock(&loader_lock);
    options_source = fn;
    options_ctx = ctx;
    pthread_mutex_unlock(&loader_lock);
}

/* ---- inspection and scanning ---------------------------------------------------- */

static void fill_from_desc(struct weft_plugin_info *info, const struct weft_plugin *desc)
{
    snprintf(info->name, sizeof info->name, "%s", desc->base.name);
    snprintf(info->manifest, sizeof info->manifest, "%s", desc->manifest ? desc->manifest : "");
    snprintf(info->version, sizeof info->version, "%s", desc->version ? desc->version : "");
    snprintf(info->description, sizeof info->description, "%s",
             desc->description ? desc->description : "");
}

/* Caller holds loader_lock. */
static int inspect_locked(const char *path, struct weft_plugin_info *info)
{
    char real[PATH_MAX];
    if (!realpath(path, real))
        return weft_error_set(WEFT_ERR_PLUGIN, "cannot load plugin %s: %s", path,
                              strerror(errno));
    snprintf(info->path, sizeof info->path, "%s", real);
    const struct weft_plugin *desc = open_plugin(real, &info->abi_version, &info->struct_size);
    if (!desc) {
        snprintf(info->why, sizeof info->why, "%s", weft_error_message());
        return WEFT_ERR_PLUGIN;
    }
    fill_from_desc(info, desc);
    const struct plugin_rec *r = find_rec(NULL, real);
    if (r && r->state != PLUGIN_REFUSED) {
        /* Its probe already said yes. */
        info->usable = true;
        info->loaded = r->state == PLUGIN_LOADED;
        if (r->state == PLUGIN_FAILED)
            snprintf(info->why, sizeof info->why, "%s", r->why ? r->why : "");
        return 0;
    }
    info->usable = probe_plugin(desc, info->why, sizeof info->why);
    return 0;
}

int weft_plugin_check_file(const char *path)
{
    if (!path)
        return weft_error_set(WEFT_ERR_PLUGIN, "weft_plugin_check_file: path is NULL");
    return weft_elf_check_whole(path);
}

int weft_plugin_inspect(const char *path, struct weft_plugin_info *info)
{
    if (!path || !info)
        return weft_error_set(WEFT_ERR_PLUGIN, "weft_plugin_inspect: NULL argument");
    memset(info, 0, sizeof *info);
    pthread_mutex_lock(&loader_lock);
    int rc = inspect_locked(path, info);
    pthread_mutex_unlock(&loader_lock);
    return rc;
}

int weft_plugin_scan(void (*fn)(const struct weft_plugin_info *info, void *ctx), void *ctx)
{
    if (!fn)
        return weft_error_set(WEFT_ERR_PLUGIN, "weft_plugin_scan: fn is NULL");
    char **files = NULL;
    int n = weft_plugin_path_files(&files);
    struct weft_plugin_info *info = malloc(sizeof *info);
    int rc = n < 0 ? n : info ? 0 : weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "plugin loader: "
                                                                           "out of memory");
    /* A file that is not a valid plugin is still reported (with why); its error is
     * ours to clear, unless an older one was pending. */
    bool had_error = weft_error_code() != WEFT_OK;
    for (int i = 0; i < n && rc == 0; i++) {
        if (weft_plugin_inspect(files[i], info) < 0) {
            weft_plugin_name_from_file(files[i], info->name, sizeof info->name);
            snprintf(info->path, sizeof info->path, "%s", files[i]);
            if (!had_error)
                weft_error_clear();
        }
        fn(info, ctx);
    }
    free(info);
    for (int i = 0; i < n; i++)
        free(files[i]);
    free(files);
    return rc < 0 ? rc : n;
}

/* ---- why a thing could not be had ----------------------------------------------------- */

/* The first file of a name on the search path is the one weft loads, even when it is
 * broken and a later copy would work: a later copy may be an older build or another
 * configuration, and running it in the broken one's place would hide what the user put
 * first. So the later copy is named, not tried. */
#define NOT_TRIED "weft loads the first file of a name on the search path, so that a broken " \
                  "plugin in front is fixed or removed rather than silently replaced by " \
                  "another build"

/* Why the plugin file at path, the first of its name on the search path, does not provide
 * kind:name (inspecting it as weft-info does: its entry point runs, nothing more). */
static void rejection(const char *path, const char *kind, const char *name, char *why,
                      size_t size)
{
    if (weft_plugin_manifest_of(path)) {
        snprintf(why, size, "its manifest does not list %s:%s", kind, name);
        return;
    }
    struct weft_plugin_info *info = malloc(sizeof *info);
    if (!info) {
        snprintf(why, size, "it has no manifest (and no memory was left to look further)");
        return;
    }
    if (weft_plugin_inspect(path, info) < 0)
        snprintf(why, size, "%s", info->why);
    else if (!info->usable)
        snprintf(why, size, "its probe refused it: %s", info->why);
    else
        snprintf(why, size, "it has no manifest saying what it provides");
    free(info);
}

void weft_plugin_explain_missing(const char *kind, const char *name, const char *failed,
                                 char *buf, size_t size)
{
    bool had_error = weft_error_code() != WEFT_OK;
    size_t used = strlen(buf);
    if (failed) {
        char *later = weft_plugin_path_later_copy(failed);
        if (later && used < size)
            snprintf(buf + used, size - used, "; a later copy, %s, was not tried (%s)", later,
                     NOT_TRIED);
        free(later);
    } else {
        char *shadow, *provider;
        if (weft_plugin_path_shadowed(kind, name, &shadow, &provider)) {
            char why[1024];
            rejection(shadow, kind, name, why, sizeof why);
            if (used < size)
                snprintf(buf + used, size - used,
                         "; %s, the first file of its name on the search path, was rejected "
                         "(%s); it shadows %s, which provides %s:%s and was not tried (%s)",
                         shadow, why, provider, kind, name, NOT_TRIED);
            free(shadow);
            free(provider);
        }
    }
    if (!had_error)
        weft_error_clear();
}

int weft_plugin_autoload(const char *kind, const char *name)
{
    char *file = weft_plugin_provider_file(kind, name);
    if (!file)
        return 1;
    int rc = weft_plugin_load(file);
    free(file);
    return rc;
}
