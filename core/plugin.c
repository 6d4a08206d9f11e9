/* core/plugin.c: finding, checking and starting plugins, and loading the plugin that
 * provides a kind:name on demand (its manifest says so, manifest.c).
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

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "weft/device.h"
#include "weft/error.h"
#include "weft/registry.h"
#include "weft/version.h"

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
};

struct str_list {
    char **v; /* NULL-terminated when n > 0 */
    size_t n, cap;
};

static pthread_mutex_t loader_lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static struct plugin_rec *plugins; /* in load order */
static size_t nplugins, cap_plugins;
static bool fini_registered;

static struct str_list user_dirs;     /* weft_plugin_path_add, in call order */
static struct str_list search_path;   /* the full path, rebuilt when an input changes */
static char *search_path_env;         /* WEFT_PLUGIN_PATH when search_path was built */
static bool search_path_valid;

/* The manifests of plugin files, read once per file version. */
struct manifest_cache {
    char *path;
    struct timespec mtime;
    off_t size;
    char *text; /* NULL: the file has no manifest */
};
static struct manifest_cache *manifests;
static size_t nmanifests, cap_manifests;

static weft_plugin_options_fn options_source;
static void *options_ctx;

/* The plugin whose init() runs on this thread: what it registers is recorded as its. */
static _Thread_local const char *initialising;

/* ---- small helpers -------------------------------------------------------------- */

static int grow(void **v, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap * 2 : 8;
    while (n < need)
        n *= 2;
    void *p = realloc(*v, n * elem);
    if (!p)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "plugin loader: out of memory");
    *v = p;
    *cap = n;
    return 0;
}

static bool list_contains(const struct str_list *l, const char *s)
{
    for (size_t i = 0; i < l->n; i++)
        if (strcmp(l->v[i], s) == 0)
            return true;
    return false;
}

/* Appends a copy of s (len bytes) unless it is empty or already there. */
static int list_add(struct str_list *l, const char *s, size_t len)
{
    if (len == 0)
        return 0;
    char *copy = strndup(s, len);
    if (!copy)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "plugin loader: out of memory");
    if (list_contains(l, copy)) {
        free(copy);
        return 0;
    }
    if (grow((void **)&l->v, &l->cap, l->n + 2, sizeof(char *)) < 0) {
        free(copy);
        return WEFT_ERR_OUT_OF_MEMORY;
    }
    l->v[l->n++] = copy;
    l->v[l->n] = NULL;
    return 0;
}

static void list_clear(struct str_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i]);
    l->n = 0;
    if (l->v)
        l->v[0] = NULL;
}

/* Adds each entry of a colon-separated list. */
static int list_add_colon(struct str_list *l, const char *s)
{
    while (s && *s) {
        const char *colon = strchr(s, ':');
        size_t len = colon ? (size_t)(colon - s) : strlen(s);
        if (list_add(l, s, len) < 0)
            return WEFT_ERR_OUT_OF_MEMORY;
        s = colon ? colon + 1 : NULL;
    }
    return 0;
}

/* "<a>/<b>" without a doubled slash, into a fresh string. */
static char *join_path(const char *dir, const char *file)
{
    size_t n = strlen(dir);
    const char *sep = n && dir[n - 1] == '/' ? "" : "/";
    char *out = NULL;
    if (asprintf(&out, "%s%s%s", dir, sep, file) < 0)
        return NULL;
    return out;
}

static bool is_regular_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* The plugin's name from its file name: ".../weft-cuda.so" -> "cuda"; NULL if the file
 * is not named like a plugin. */
static bool name_from_file(const char *path, char *name, size_t size)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(base);
    if (n <= 8 || strncmp(base, "weft-", 5) != 0 || strcmp(base + n - 3, ".so") != 0)
        return false;
    snprintf(name, size, "%.*s", (int)(n - 8), base + 5);
    return true;
}

/* ---- the search path ---------------------------------------------------------- */

/* The running program's directory's parent (<build> for <build>/apps/weft-info). */
static char *exe_parent_dir(void)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return NULL;
    exe[n] = '\0';
    for (int i = 0; i < 2; i++) {
        char *slash = strrchr(exe, '/');
        if (!slash)
            return NULL;
        *slash = '\0';
    }
    return strdup(exe[0] ? exe : "/");
}

static int add_exe_dirs(struct str_list *l)
{
    char *parent = exe_parent_dir();
    if (!parent)
        return 0; /* no /proc: the other entries still work */
    char *a = join_path(parent, "plugins");
    char *b = join_path(parent, "lib/weft/plugins");
    int rc = a && b ? 0 : weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "plugin loader: out of memory");
    if (rc == 0)
        rc = list_add(l, a, strlen(a));
    if (rc == 0)
        rc = list_add(l, b, strlen(b));
    free(a);
    free(b);
    free(parent);
    return rc;
}

static bool env_changed(const char *env)
{
    if (!env || !search_path_env)
        return env != search_path_env;
    return strcmp(env, search_path_env) != 0;
}

/* Rebuilds the search path when a directory was added or WEFT_PLUGIN_PATH changed.
 * Caller holds loader_lock. */
static int refresh_search_path(void)
{
    const char *env = getenv("WEFT_PLUGIN_PATH");
    if (search_path_valid && !env_changed(env))
        return 0;
    free(search_path_env);
    search_path_env = env ? strdup(env) : NULL;
    list_clear(&search_path);
    search_path_valid = false;
    int rc = 0;
    for (size_t i = 0; i < user_dirs.n && rc == 0; i++)
        rc = list_add(&search_path, user_dirs.v[i], strlen(user_dirs.v[i]));
    if (rc == 0)
        rc = list_add_colon(&search_path, env);
    if (rc == 0)
        rc = add_exe_dirs(&search_path);
    if (rc == 0)
        rc = list_add(&search_path, WEFT_PLUGIN_DIR, strlen(WEFT_PLUGIN_DIR));
    search_path_valid = rc == 0;
    return rc;
}

void weft_plugin_path_add(const char *dir)
{
    if (!dir)
        return;
    pthread_mutex_lock(&loader_lock);
    if (list_add_colon(&user_dirs, dir) == 0)
        search_path_valid = false;
    pthread_mutex_unlock(&loader_lock);
}

const char *const *weft_plugin_search_path(void)
{
    static const char *const empty[] = {NULL};
    pthread_mutex_lock(&loader_lock);
    refresh_search_path();
    const char *const *v = search_path.n ? (const char *const *)search_path.v : empty;
    pthread_mutex_unlock(&loader_lock);
    return v;
}

const char *weft_plugin_install_dir(void)
{
    return WEFT_PLUGIN_DIR;
}

/* "/a, /b, /c" for messages. */
static void describe_search_path(char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < search_path.n && used < size; i++) {
        int w = snprintf(buf + used, size - used, "%s%s", i ? ", " : "", search_path.v[i]);
        if (w < 0)
            break;
        used += (size_t)w;
    }
}

/* The first weft-<name>.so on the search path, as a fresh string; NULL with an error
 * listing the directories searched. Caller holds loader_lock. */
static char *find_plugin_file(const char *name)
{
    if (refresh_search_path() < 0)
        return NULL;
    char file[128];
    snprintf(file, sizeof file, "weft-%s.so", name);
    for (size_t i = 0; i < search_path.n; i++) {
        char *path = join_path(search_path.v[i], file);
        if (!path) {
            weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "plugin loader: out of memory");
            return NULL;
        }
        if (is_regular_file(path))
            return path;
        free(path);
    }
    char dirs[2048];
    describe_search_path(dirs, sizeof dirs);
    weft_error_set(WEFT_ERR_PLUGIN,
                   "plugin '%s' not found: no %s in %s (add a directory with WEFT_PLUGIN_PATH "
                   "or [runtime] plugin_path)",
                   name, file, dirs);
    return NULL;
}

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
        weft_error_set(WEFT_ERR_PLUGIN, "cannot load plugin %s: %s", path, dlerror());
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
    if (grow((void **)&plugins, &cap_plugins, nplugins + 1, sizeof *plugins) < 0)
        return NULL;
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
    int code = r->state == PLUGIN_REFUSED ? WEFT_ERR_DEVICE : WEFT_ERR_PLUGIN;
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
        if (!had_error && weft_error_code() != WEFT_OK)
            snprintf(msg, sizeof msg, "%s", weft_error_message());
        if (!had_error)
            weft_error_clear();
        /* r may have moved if init() loaded other plugins. */
        return refuse_rec(find_rec(NULL, path), PLUGIN_FAILED, WEFT_ERR_PLUGIN,
                          "plugin %s failed to initialise: %s", path, msg);
    }
    r = find_rec(NULL, path);
    r->state = PLUGIN_LOADED;
    if (!fini_registered)
        fini_registered = atexit(run_finis) == 0;
    return 0;
}

/* The manifest of the file at path (cached per file version), or NULL when it has none.
 * Caller holds loader_lock; the text lives as long as the process. */
static const char *manifest_of(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return NULL;
    for (size_t i = 0; i < nmanifests; i++) {
        struct manifest_cache *m = &manifests[i];
        if (strcmp(m->path, path) != 0)
            continue;
        if (m->size == st.st_size && m->mtime.tv_sec == st.st_mtim.tv_sec &&
            m->mtime.tv_nsec == st.st_mtim.tv_nsec)
            return m->text;
        /* The file changed: a stale text stays allocated (callers may hold it). */
        m->text = weft_manifest_read(path);
        m->size = st.st_size;
        m->mtime = st.st_mtim;
        return m->text;
    }
    bool had_error = weft_error_code() != WEFT_OK;
    char *copy = strdup(path);
    if (!copy || grow((void **)&manifests, &cap_manifests, nmanifests + 1, sizeof *manifests) < 0) {
        free(copy);
        if (!had_error)
            weft_error_clear(); /* a cache miss costs a read, nothing more */
        return weft_manifest_read(path);
    }
    manifests[nmanifests++] =
        (struct manifest_cache){copy, st.st_mtim, st.st_size, weft_manifest_read(path)};
    return manifests[nmanifests - 1].text;
}

/* Loads the file at path; `want` is the name it was looked up by (NULL for a path). */
static int load_file(const char *path, const char *want)
{
    char name[64];
    if (name_from_file(path, name, sizeof name))
        weft_manifest_apply_env(manifest_of(path), options_for(name));
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
    char *found = find_plugin_file(name);
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

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The plugin files of one directory, sorted, into *files (full paths). A missing or
 * unreadable directory has none. */
static int list_dir_plugins(const char *dir, struct str_list *files)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    struct str_list names = {0};
    int rc = 0;
    struct dirent *e;
    char name[256];
    while (rc == 0 && (e = readdir(d)) != NULL)
        if (name_from_file(e->d_name, name, sizeof name))
            rc = list_add(&names, e->d_name, strlen(e->d_name));
    closedir(d);
    if (names.n)
        qsort(names.v, names.n, sizeof(char *), cmp_str);
    for (size_t i = 0; i < names.n && rc == 0; i++) {
        char *path = join_path(dir, names.v[i]);
        rc = path ? list_add(files, path, strlen(path))
                  : weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "plugin loader: out of memory");
        free(path);
    }
    list_clear(&names);
    free(names.v);
    return rc;
}

/* Every plugin file on the search path, first of each name only. */
static int collect_plugin_files(struct str_list *out)
{
    struct str_list all = {0}, seen = {0};
    pthread_mutex_lock(&loader_lock);
    int rc = refresh_search_path();
    for (size_t i = 0; i < search_path.n && rc == 0; i++)
        rc = list_dir_plugins(search_path.v[i], &all);
    pthread_mutex_unlock(&loader_lock);
    char name[256];
    for (size_t i = 0; i < all.n && rc == 0; i++) {
        name_from_file(all.v[i], name, sizeof name);
        if (list_contains(&seen, name))
            continue;
        rc = list_add(&seen, name, strlen(name));
        if (rc == 0)
            rc = list_add(out, all.v[i], strlen(all.v[i]));
    }
    list_clear(&all);
    free(all.v);
    list_clear(&seen);
    free(seen.v);
    return rc;
}

int weft_plugin_scan(void (*fn)(const struct weft_plugin_info *info, void *ctx), void *ctx)
{
    if (!fn)
        return weft_error_set(WEFT_ERR_PLUGIN, "weft_plugin_scan: fn is NULL");
    struct str_list files = {0};
    int rc = collect_plugin_files(&files);
    struct weft_plugin_info *info = malloc(sizeof *info);
    if (rc == 0 && !info)
        rc = weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "plugin loader: out of memory");
    /* A file that is not a valid plugin is still reported (with why); its error is
     * ours to clear, unless an older one was pending. */
    bool had_error = weft_error_code() != WEFT_OK;
    for (size_t i = 0; i < files.n && rc == 0; i++) {
        if (weft_plugin_inspect(files.v[i], info) < 0) {
            name_from_file(files.v[i], info->name, sizeof info->name);
            snprintf(info->path, sizeof info->path, "%s", files.v[i]);
            if (!had_error)
                weft_error_clear();
        }
        fn(info, ctx);
    }
    free(info);
    size_t n = files.n;
    list_clear(&files);
    free(files.v);
    return rc < 0 ? rc : (int)n;
}

/* ---- finding what provides a thing ------------------------------------------------------ */

bool weft_plugin_find_file(const char *name, char *path, size_t size)
{
    if (!name || !path || size == 0)
        return false;
    bool had_error = weft_error_code() != WEFT_OK;
    pthread_mutex_lock(&loader_lock);
    char *found = find_plugin_file(name);
    pthread_mutex_unlock(&loader_lock);
    if (!found && !had_error)
        weft_error_clear(); /* "not found" is this function's answer, not an error */
    bool ok = found && (size_t)snprintf(path, size, "%s", found) < size;
    free(found);
    return ok;
}

/* The first plugin file on the search path whose manifest provides kind:name, as a fresh
 * string, or NULL. */
static char *provider_file(const char *kind, const char *name)
{
    struct str_list files = {0};
    char *found = NULL;
    bool had_error = weft_error_code() != WEFT_OK;
    pthread_mutex_lock(&loader_lock);
    if (collect_plugin_files(&files) == 0)
        for (size_t i = 0; i < files.n && !found; i++)
            if (weft_manifest_provides(manifest_of(files.v[i]), kind, name))
                found = strdup(files.v[i]);
    pthread_mutex_unlock(&loader_lock);
    if (!had_error)
        weft_error_clear(); /* an unreadable directory only means fewer candidates */
    list_clear(&files);
    free(files.v);
    return found;
}

bool weft_plugin_find_provider(const char *kind, const char *name, char *plugin, size_t size)
{
    if (!kind || !name)
        return false;
    char *file = provider_file(kind, name);
    if (file && plugin && size)
        name_from_file(file, plugin, size);
    free(file);
    return file != NULL;
}

struct provided_kind {
    const char *kind;
    void (*fn)(void *ctx, const char *name);
    void *ctx;
};

static int each_of_kind(void *ctx, const char *kind, const char *name)
{
    const struct provided_kind *p = ctx;
    if (strcmp(kind, p->kind) == 0)
        p->fn(p->ctx, name);
    return 0;
}

void weft_plugin_each_provided(const char *kind, void (*fn)(void *ctx, const char *name),
                               void *ctx)
{
    struct str_list files = {0};
    bool had_error = weft_error_code() != WEFT_OK;
    struct provided_kind p = {kind, fn, ctx};
    pthread_mutex_lock(&loader_lock);
    if (collect_plugin_files(&files) == 0)
        for (size_t i = 0; i < files.n; i++)
            weft_manifest_each_provided(manifest_of(files.v[i]), each_of_kind, &p);
    pthread_mutex_unlock(&loader_lock);
    if (!had_error)
        weft_error_clear();
    list_clear(&files);
    free(files.v);
}

int weft_plugin_autoload(const char *kind, const char *name)
{
    char *file = provider_file(kind, name);
    if (!file)
        return 1;
    int rc = weft_plugin_load(file);
    free(file);
    return rc;
}
