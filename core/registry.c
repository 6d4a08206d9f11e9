/* core/registry.c: the one registry of vtables (weft/registry.h).
 *
 * One table of entries in registration order, under one lock: registration and lookups
 * by name happen when plugins start, datasets open or models are built, never per op.
 * Hot lookups keep their own arrays filled through a kind's added() hook (backends by
 * device type in backend.c, layouts by id in layout.c).
 *
 * The lock is recursive: a kind's check() or added() may look at the registry. */
#define _GNU_SOURCE
#include "weft/registry.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "weft/error.h"
#include "weft/options.h"

#define NAME_MAX_LEN 63

struct entry {
    const struct weft_vtable *v;
    const struct weft_kind *kind;
    const char *owner; /* the plugin whose init() registered it; "" for the program */
    int id;
};

static pthread_mutex_t lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static struct entry *entries;
static int nentries, cap_entries;
static bool bootstrapped;

static const struct weft_kind kind_kind = {
    .base = WEFT_VTABLE(WEFT_KIND_KIND, WEFT_KIND_KIND, struct weft_kind),
    .description = "kinds of vtables",
    .min_size = sizeof(struct weft_kind),
};

static const struct weft_kind api_kind = {
    .base = WEFT_VTABLE(WEFT_KIND_KIND, WEFT_KIND_API, struct weft_kind),
    .description = "plugin function tables that programs call (weft/sparse.h)",
    .min_size = sizeof(struct weft_vtable),
};

/* ---- lookups (caller holds the lock) ----------------------------------------------- */

static struct entry *find_entry(const char *kind, const char *name)
{
    for (int i = 0; i < nentries; i++)
        if (strcmp(entries[i].v->kind, kind) == 0 && strcmp(entries[i].v->name, name) == 0)
            return &entries[i];
    return NULL;
}

static struct entry *find_pointer(const void *v)
{
    for (int i = 0; i < nentries; i++)
        if (entries[i].v == v)
            return &entries[i];
    return NULL;
}

static int count_kind(const char *kind)
{
    int n = 0;
    for (int i = 0; i < nentries; i++)
        n += strcmp(entries[i].v->kind, kind) == 0;
    return n;
}

static const struct weft_kind *find_kind(const char *name)
{
    struct entry *e = find_entry(WEFT_KIND_KIND, name);
    return e ? (const struct weft_kind *)e->v : NULL;
}

/* ---- checks -------------------------------------------------------------------------- */

static bool valid_name(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n > NAME_MAX_LEN)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '-' || c == '.';
        if (!ok)
            return false;
    }
    return true;
}

/* Every check of weft_register() but uniqueness; *kind_out gets the kind. Caller holds
 * the lock. */
static int check_locked(const struct weft_vtable *v, const struct weft_kind **kind_out)
{
    if (!v)
        return weft_error_set(WEFT_ERR_PLUGIN, "weft_register: the vtable is NULL");
    /* Past the version nothing can be trusted: an ABI-1 struct has other fields there. */
    if (v->abi_version != WEFT_ABI_VERSION)
        return weft_error_set(WEFT_ERR_PLUGIN,
                              "a vtable was built for weft ABI %u, but this weft has ABI %d; "
                              "rebuild its plugin against this weft",
                              v->abi_version, WEFT_ABI_VERSION);
    if (v->struct_size < sizeof(struct weft_vtable) || !v->kind || !v->name)
        return weft_error_set(WEFT_ERR_PLUGIN,
                              "a vtable's header is incomplete (struct_size %u, kind %s, name %s)",
                              v->struct_size, v->kind ? v->kind : "NULL",
                              v->name ? v->name : "NULL");
    const struct weft_kind *kind =
        strcmp(v->kind, WEFT_KIND_KIND) == 0 ? &kind_kind : find_kind(v->kind);
    if (!kind) {
        char known[512];
        size_t used = 0;
        known[0] = '\0';
        for (int i = 0; i < nentries && used < sizeof known; i++)
            if (strcmp(entries[i].v->kind, WEFT_KIND_KIND) == 0)
                used += (size_t)snprintf(known + used, sizeof known - used, "%s%s",
                                         used ? ", " : "", entries[i].v->name);
        return weft_error_set(WEFT_ERR_PLUGIN,
                              "%s '%s': unknown kind '%s' (known kinds: %s; a library defines "
                              "its kinds when it loads)",
                              v->kind, v->name, v->kind, known);
    }
    if (v->struct_size < kind->min_size)
        return weft_error_set(WEFT_ERR_PLUGIN,
                              "%s '%s' has struct_size %u, smaller than ABI %d's %u bytes; "
                              "rebuild it against this weft",
                              v->kind, v->name, v->struct_size, WEFT_ABI_VERSION,
                              kind->min_size);
    if (!valid_name(v->name))
        return weft_error_set(WEFT_ERR_PLUGIN,
                              "%s name '%s' is not valid: expected 1 to %d letters, digits, "
                              "'_', '-' or '.'",
                              v->kind, v->name, NAME_MAX_LEN);
    if (kind->check && kind->check(v) < 0)
        return weft_error_code() ? weft_error_code() : WEFT_ERR_PLUGIN;
    *kind_out = kind;
    return 0;
}

/* ---- registration ------------------------------------------------------------------ */

static int add_locked(const struct weft_vtable *v, const struct weft_kind *kind)
{
    if (nentries == cap_entries) {
        int cap = cap_entries ? cap_entries * 2 : 64;
        struct entry *grown = realloc(entries, (size_t)cap * sizeof *grown);
        if (!grown)
            return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "registry: out of host memory");
        entries = grown;
        cap_entries = cap;
    }
    int index = count_kind(v->kind);
    entries[nentries++] = (struct entry){v, kind, weft_plugin_initialising(), index};
    if (!kind->added)
        return index;
    int id = kind->added(v, index);
    struct entry *e = find_pointer(v); /* added() may have registered more, moving entries */
    if (id < 0) {
        memmove(e, e + 1, (size_t)(&entries[nentries] - (e + 1)) * sizeof *e);
        nentries--;
        return id;
    }
    e->id = id;
    return id;
}

static void bootstrap_locked(void)
{
    if (bootstrapped)
        return;
    bootstrapped = true;
    const struct weft_kind *const builtin[] = {&kind_kind, &weft_plugin_kind, &weft_backend_kind,
                                               &weft_layout_kind, &api_kind};
    for (size_t i = 0; i < sizeof builtin / sizeof *builtin; i++)
        if (add_locked(&builtin[i]->base, &kind_kind) < 0)
            bootstrapped = false; /* out of memory: try again next time */
}

int weft_register(const void *vtable)
{
    const struct weft_vtable *v = vtable;
    pthread_mutex_lock(&lock);
    bootstrap_locked();
    const struct weft_kind *kind = NULL;
    int rc = check_locked(v, &kind);
    if (rc == 0) {
        struct entry *same = find_pointer(v);
        struct entry *taken = same ? NULL : find_entry(v->kind, v->name);
        if (same)
            rc = same->id;
        else if (taken)
            rc = weft_error_set(WEFT_ERR_PLUGIN, "%s '%s' is already registered%s%s", v->kind,
                                v->name, taken->owner[0] ? " by plugin " : "", taken->owner);
        else
            rc = add_locked(v, kind);
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

int weft_register_all(int n, const void *const *vtables)
{
    for (int i = 0; i < n; i++) {
        int rc = weft_register(vtables[i]);
        if (rc < 0)
            return rc;
    }
    return 0;
}

int weft_registry_check(const void *vtable)
{
    pthread_mutex_lock(&lock);
    bootstrap_locked();
    const struct weft_kind *kind;
    int rc = check_locked(vtable, &kind);
    pthread_mutex_unlock(&lock);
    return rc;
}

/* ---- lookups ----------------------------------------------------------------------- */

const void *weft_registry_find(const char *kind, const char *name)
{
    if (!kind || !name)
        return NULL;
    pthread_mutex_lock(&lock);
    bootstrap_locked();
    struct entry *e = find_entry(kind, name);
    const void *v = e ? e->v : NULL;
    pthread_mutex_unlock(&lock);
    return v;
}

#define KNOWN_MAX 128

/* Names of a kind, registered or provided by a plugin on the search path, each once. */
struct known_names {
    char names[KNOWN_MAX][NAME_MAX_LEN + 1];
    const char *ptrs[KNOWN_MAX];
    size_t n;
};

static void add_known(void *ctx, const char *name)
{
    struct known_names *k = ctx;
    for (size_t i = 0; i < k->n; i++)
        if (strcmp(k->names[i], name) == 0)
            return;
    if (k->n < KNOWN_MAX) {
        snprintf(k->names[k->n], sizeof k->names[k->n], "%s", name);
        k->ptrs[k->n] = k->names[k->n];
        k->n++;
    }
}

const void *weft_registry_get(const char *kind, const char *name)
{
    if (!kind || !name) {
        weft_error_set(WEFT_ERR_VALUE, "weft_registry_get: kind and name must be set");
        return NULL;
    }
    const void *v = weft_registry_find(kind, name);
    if (v)
        return v;
    bool had_error = weft_error_code() != WEFT_OK;
    int rc = weft_plugin_autoload(kind, name);
    v = weft_registry_find(kind, name);
    if (had_error || (v && rc >= 0))
        return v;
    /* rc < 0 with v found: the provider failed in init() after registering it; what it
     * left half made is not handed out, and its failure is the answer */
    if (rc > 0 && weft_error_code() == WEFT_ERR_OUT_OF_MEMORY) { /* the cause, as it is */
        weft_error_prefix("looking for the plugin that provides %s:%s", kind, name);
        return NULL;
    }
    if (rc < 0) { /* a plugin provides it but did not load: its reason is the answer */
        char later[1536] = "";
        /* out of memory is the cause as it is, not the plugin's fault: nothing to add */
        char *file = weft_error_code() == WEFT_ERR_OUT_OF_MEMORY
                         ? NULL
                         : weft_plugin_provider_file(kind, name);
        if (file)
            weft_plugin_explain_missing(kind, name, file, later, sizeof later);
        free(file);
        weft_error_prefix("cannot load the plugin that provides %s:%s", kind, name);
        if (later[0]) {
            char *msg = weft_strdup(weft_error_message());
            int code = weft_error_code();
            if (msg) {
                weft_error_clear();
                weft_error_set(code, "%s%s", msg, later);
                free(msg);
            }
        }
        return NULL;
    }
    char known[1536], shadowed[3072] = "";
    weft_registry_describe(kind, name, known, sizeof known);
    weft_plugin_explain_missing(kind, name, NULL, shadowed, sizeof shadowed);
    if (shadowed[0])
        weft_error_set(WEFT_ERR_PLUGIN, "no %s '%s'%s", kind, name, shadowed);
    else
        weft_error_set(WEFT_ERR_PLUGIN,
                       "no %s '%s' (known: %s), and no plugin on the search path provides %s:%s",
                       kind, name, known, kind, name);
    return NULL;
}

int weft_registry_count(const char *kind)
{
    if (!kind)
        return 0;
    pthread_mutex_lock(&lock);
    bootstrap_locked();
    int n = count_kind(kind);
    pthread_mutex_unlock(&lock);
    return n;
}

const void *weft_registry_at(const char *kind, int i)
{
    const void *v = NULL;
    if (!kind || i < 0)
        return NULL;
    pthread_mutex_lock(&lock);
    bootstrap_locked();
    for (int k = 0; k < nentries && !v; k++)
        if (strcmp(entries[k].v->kind, kind) == 0 && i-- == 0)
            v = entries[k].v;
    pthread_mutex_unlock(&lock);
    return v;
}

int weft_registry_id(const void *vtable)
{
    pthread_mutex_lock(&lock);
    struct entry *e = find_pointer(vtable);
    int id = e ? e->id : -1;
    pthread_mutex_unlock(&lock);
    return id;
}

const char *weft_registry_owner(const void *vtable)
{
    pthread_mutex_lock(&lock);
    struct entry *e = find_pointer(vtable);
    const char *owner = e ? e->owner : NULL; /* a string that never moves */
    pthread_mutex_unlock(&lock);
    return owner;
}

void weft_registry_describe(const char *kind, const char *near, char *buf, size_t size)
{
    struct known_names *k = calloc(1, sizeof *k);
    if (!k) {
        snprintf(buf, size, "?");
        return;
    }
    pthread_mutex_lock(&lock);
    bootstrap_locked();
    for (int i = 0; i < nentries; i++)
        if (strcmp(entries[i].v->kind, kind) == 0)
            add_known(k, entries[i].v->name);
    pthread_mutex_unlock(&lock);
    weft_plugin_each_provided(kind, add_known, k);
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < k->n && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s%s", i ? ", " : "", k->names[i]);
    if (k->n == 0)
        used = (size_t)snprintf(buf, size, "none");
    const char *close = near ? weft_closest_name(near, k->ptrs, k->n) : NULL;
    if (close && used < size)
        snprintf(buf + used, size - used, "; did you mean '%s'?", close);
    free(k);
}
