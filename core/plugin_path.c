/* core/plugin_path.c: where plugins are: the search path, the plugin files on it, and
 * what their manifests say they provide (read once per file version, elf.c). Nothing
 * here loads a plugin; plugin.c does.
 *
 * One recursive lock guards the path, the file lists and the manifest cache. The loader
 * calls in with its own lock held (lock order: loader, then path); nothing here calls
 * the loader. */
#define _GNU_SOURCE
#include "weft/plugin.h"

#include <dirent.h>
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "weft/error.h"
#include "weft/version.h"

struct str_list {
    char **v; /* NULL-terminated when n > 0 */
    size_t n, cap;
};

static pthread_mutex_t path_lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
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

static char *find_locked(const char *name);

/* Forgets an error of this module's own making (an unreadable directory only means fewer
 * candidates), unless one was pending before or it is out of memory: then the cause is
 * kept, for the caller to report as it is. */
static void forget_error(bool had_error)
{
    if (!had_error && weft_error_code() != WEFT_ERR_OUT_OF_MEMORY)
        weft_error_clear();
}
static const char *manifest_locked(const char *path);

/* ---- small helpers -------------------------------------------------------------- */


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
    if (weft_grow((void **)&l->v, &l->cap, l->n + 2, sizeof(char *)) < 0) {
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

/* The plugin's name from its file name: ".../weft-foo.so" -> "foo"; NULL if the file
 * is not named like a plugin. */
bool weft_plugin_name_from_file(const char *path, char *name, size_t size)
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

/* <dir of libweft.so>/weft/plugins: where an install puts the plugins relative to the
 * library, whatever its libdir (lib, lib64, lib/x86_64-linux-gnu) and wherever the tree
 * was moved or staged (DESTDIR), so an installed program needs neither LD_LIBRARY_PATH
 * nor WEFT_PLUGIN_PATH. */
static int add_lib_dir(struct str_list *l)
{
    Dl_info info;
    if (!dladdr((void *)weft_plugin_install_dir, &info) || !info.dli_fname)
        return 0;
    /* "<prefix>/bin/../lib/libweft.so" as the rpath found it: say it plainly */
    char *lib = realpath(info.dli_fname, NULL);
    if (!lib)
        lib = strdup(info.dli_fname);
    if (!lib)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "plugin loader: out of memory");
    char *slash = strrchr(lib, '/');
    int rc = 0;
    if (slash) {
        *slash = '\0';
        char *dir = join_path(lib[0] ? lib : "/", "weft/plugins");
        rc = dir ? list_add(l, dir, strlen(dir))
                 : weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "plugin loader: out of memory");
        free(dir);
    }
    free(lib);
    return rc;
}

static bool env_changed(const char *env)
{
    if (!env || !search_path_env)
        return env != search_path_env;
    return strcmp(env, search_path_env) != 0;
}

/* Rebuilds the search path when a directory was added or WEFT_PLUGIN_PATH changed.
 * Caller holds path_lock. */
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
        rc = add_lib_dir(&search_path);
    if (rc == 0)
        rc = list_add(&search_path, WEFT_PLUGIN_DIR, strlen(WEFT_PLUGIN_DIR));
    search_path_valid = rc == 0;
    return rc;
}

void weft_plugin_path_add(const char *dir)
{
    if (!dir)
        return;
    pthread_mutex_lock(&path_lock);
    if (list_add_colon(&user_dirs, dir) == 0)
        search_path_valid = false;
    pthread_mutex_unlock(&path_lock);
}

const char *const *weft_plugin_search_path(void)
{
    static const char *const empty[] = {NULL};
    pthread_mutex_lock(&path_lock);
    refresh_search_path();
    const char *const *v = search_path.n ? (const char *const *)search_path.v : empty;
    pthread_mutex_unlock(&path_lock);
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
 * listing the directories searched. Caller holds path_lock. */
char *weft_plugin_path_find(const char *name)
{
    pthread_mutex_lock(&path_lock);
    char *found = find_locked(name);
    pthread_mutex_unlock(&path_lock);
    return found;
}

static char *find_locked(const char *name)
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

/* The manifest of the file at path (cached per file version), or NULL when it has none.
 * Caller holds path_lock; the text lives as long as the process. */
const char *weft_plugin_manifest_of(const char *path)
{
    pthread_mutex_lock(&path_lock);
    const char *text = manifest_locked(path);
    pthread_mutex_unlock(&path_lock);
    return text;
}

static const char *manifest_locked(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return NULL;
    struct manifest_cache *m = NULL;
    for (size_t i = 0; i < nmanifests && !m; i++)
        if (strcmp(manifests[i].path, path) == 0)
            m = &manifests[i];
    if (m && m->size == st.st_size && m->mtime.tv_sec == st.st_mtim.tv_sec &&
        m->mtime.tv_nsec == st.st_mtim.tv_nsec)
        return m->text;
    bool had_error = weft_error_code() != WEFT_OK;
    char *text = weft_manifest_read(path);
    if (!text && !had_error && weft_error_code() != WEFT_OK)
        return NULL; /* out of memory: not "no manifest", so not remembered */
    if (m) { /* the file changed: a stale text stays allocated (callers may hold it) */
        *m = (struct manifest_cache){m->path, st.st_mtim, st.st_size, text};
        return text;
    }
    char *copy = strdup(path);
    if (!copy ||
        weft_grow((void **)&manifests, &cap_manifests, nmanifests + 1, sizeof *manifests) < 0) {
        free(copy);
        free(text); /* callers keep the text for the process's life: uncached, it would leak */
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of memory caching a plugin's manifest");
        return NULL;
    }
    manifests[nmanifests++] = (struct manifest_cache){copy, st.st_mtim, st.st_size, text};
    return text;
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
        if (weft_plugin_name_from_file(e->d_name, name, sizeof name))
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
    pthread_mutex_lock(&path_lock);
    int rc = refresh_search_path();
    for (size_t i = 0; i < search_path.n && rc == 0; i++)
        rc = list_dir_plugins(search_path.v[i], &all);
    pthread_mutex_unlock(&path_lock);
    char name[256];
    for (size_t i = 0; i < all.n && rc == 0; i++) {
        weft_plugin_name_from_file(all.v[i], name, sizeof name);
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

/* ---- finding what provides a thing ------------------------------------------------------ */

bool weft_plugin_find_file(const char *name, char *path, size_t size)
{
    if (!name || !path || size == 0)
        return false;
    bool had_error = weft_error_code() != WEFT_OK;
    pthread_mutex_lock(&path_lock);
    char *found = weft_plugin_path_find(name);
    pthread_mutex_unlock(&path_lock);
    if (!found)
        forget_error(had_error); /* "not found" is this function's answer, not an error */
    bool ok = found && (size_t)snprintf(path, size, "%s", found) < size;
    free(found);
    return ok;
}

/* The first plugin file on the search path whose manifest provides kind:name, as a fresh
 * string, or NULL. */
char *weft_plugin_provider_file(const char *kind, const char *name)
{
    struct str_list files = {0};
    char *found = NULL;
    bool had_error = weft_error_code() != WEFT_OK;
    pthread_mutex_lock(&path_lock);
    if (collect_plugin_files(&files) == 0)
        for (size_t i = 0; i < files.n && !found && (had_error || !weft_error_code()); i++)
            if (weft_manifest_provides(manifest_locked(files.v[i]), kind, name) &&
                !(found = strdup(files.v[i])))
                weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "plugin loader: out of memory");
    pthread_mutex_unlock(&path_lock);
    forget_error(had_error); /* an unreadable directory only means fewer candidates */
    list_clear(&files);
    free(files.v);
    return found;
}

/* Every plugin file on the search path, in path order, shadowed ones included. */
static int collect_all_files(struct str_list *all)
{
    pthread_mutex_lock(&path_lock);
    int rc = refresh_search_path();
    for (size_t i = 0; i < search_path.n && rc == 0; i++)
        rc = list_dir_plugins(search_path.v[i], all);
    pthread_mutex_unlock(&path_lock);
    return rc;
}

static bool same_file_name(const char *a, const char *b)
{
    const char *sa = strrchr(a, '/'), *sb = strrchr(b, '/');
    return strcmp(sa ? sa + 1 : a, sb ? sb + 1 : b) == 0;
}

/* The same file reached by two entries of the path (a relative and an absolute one). */
static bool same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

bool weft_plugin_path_shadowed(const char *kind, const char *name, char **shadow,
                               char **provider)
{
    struct str_list all = {0};
    bool had_error = weft_error_code() != WEFT_OK;
    *shadow = *provider = NULL;
    if (collect_all_files(&all) == 0) {
        pthread_mutex_lock(&path_lock);
        for (size_t i = 0; i < all.n && !*provider; i++) {
            size_t first = 0;
            while (!same_file_name(all.v[first], all.v[i]))
                first++;
            if (first < i && !same_file(all.v[first], all.v[i]) &&
                weft_manifest_provides(manifest_locked(all.v[i]), kind, name)) {
                *shadow = strdup(all.v[first]);
                *provider = strdup(all.v[i]);
            }
        }
        pthread_mutex_unlock(&path_lock);
    }
    forget_error(had_error); /* an unreadable directory only means fewer candidates */
    list_clear(&all);
    free(all.v);
    if (*shadow && *provider)
        return true;
    free(*shadow);
    free(*provider);
    *shadow = *provider = NULL;
    return false;
}

char *weft_plugin_path_later_copy(const char *path)
{
    struct str_list all = {0};
    bool had_error = weft_error_code() != WEFT_OK;
    char *later = NULL;
    if (collect_all_files(&all) == 0) {
        bool seen = false;
        for (size_t i = 0; i < all.n && !later; i++) {
            if (!same_file_name(all.v[i], path))
                continue;
            if (seen && !same_file(all.v[i], path))
                later = strdup(all.v[i]);
            seen = seen || strcmp(all.v[i], path) == 0;
        }
    }
    forget_error(had_error);
    list_clear(&all);
    free(all.v);
    return later;
}

bool weft_plugin_find_provider(const char *kind, const char *name, char *plugin, size_t size)
{
    if (!kind || !name)
        return false;
    char *file = weft_plugin_provider_file(kind, name);
    if (file && plugin && size)
        weft_plugin_name_from_file(file, plugin, size);
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
    pthread_mutex_lock(&path_lock);
    if (collect_plugin_files(&files) == 0)
        for (size_t i = 0; i < files.n; i++)
            weft_manifest_each_provided(manifest_locked(files.v[i]), each_of_kind, &p);
    pthread_mutex_unlock(&path_lock);
    forget_error(had_error);
    list_clear(&files);
    free(files.v);
}

int weft_plugin_path_files(char ***out)
{
    struct str_list files = {0};
    *out = NULL;
    int rc = collect_plugin_files(&files);
    if (rc < 0) {
        list_clear(&files);
        free(files.v);
        return rc;
    }
    *out = files.v;
    return (int)files.n;
}
