/* weft/registry.h: the one registry through which everything extends weft.
 *
 * Every extension is a vtable: a static struct of function pointers and constants that
 * opens with struct weft_vtable (ABI version, struct size, kind, name). Backends, layouts,
 * dataset readers, optimizers, module types, plugin APIs and the plugin descriptors
 * themselves are all registered the same way, with weft_register(), and checked in one
 * place against their kind:
 *
 *     static const struct weft_dataset_reader idx_reader = {
 *         .base = WEFT_VTABLE(WEFT_KIND_READER, "idx", struct weft_dataset_reader),
 *         .open = idx_open, .read = idx_read, .close = idx_close,
 *     };
 *     ...
 *     int rc = weft_register(&idx_reader);
 *
 * Kinds. A kind (struct weft_kind) says how big its vtables are at least, which of their
 * methods are required and, for kinds whose entries need a number (device types,
 * layouts), what id an entry gets. The core defines the kinds it uses itself ("kind",
 * "plugin", "backend", "layout", "api"); the nn and train libraries define "module",
 * "reader" and "optimizer" when they load, and anything may define more.
 *
 * Versioning, as SQLite's vtables: fields are only appended; struct_size says how much
 * of the struct its author compiled, and WEFT_VTABLE_HAS() tells whether an appended
 * method is there. A vtable of another ABI is refused with both versions named.
 *
 * Lookup: weft_registry_find() only looks; weft_registry_get() also loads, on a miss,
 * the first plugin on the search path whose manifest says it provides kind:name
 * (weft/plugin.h), so no code names the plugin that provides a thing.
 *
 * Lifetime and threads: the registry keeps the pointer (the vtable must outlive the
 * process, as a static does); entries are never removed. Every function here may be
 * called from any thread.
 */
#ifndef WEFT_REGISTRY_H
#define WEFT_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI of everything a plugin sees: vtables, the tensor struct, kernel calls. Bumped
 * whenever one of them changes other than by appending. ABI 2: the vtable header, the
 * registry, manifests, options, typed kernel parameters, layout ids by registration.
 * ABI 3 (docs/plugins.md): op ids from the op table, named ops from id 256, backend
 * methods take the backend's context, the communicator's open() takes options. */
#define WEFT_ABI_VERSION 3

/* The header every vtable opens with. */
struct weft_vtable {
    uint32_t abi_version; /* WEFT_ABI_VERSION, as its author compiled it */
    uint32_t struct_size; /* sizeof the whole vtable, as its author compiled it */
    const char *kind;     /* WEFT_KIND_BACKEND, WEFT_KIND_READER, ... */
    const char *name;     /* unique within the kind: letters, digits, '_', '-', '.' */
};

/* The header of a vtable of `type` (its first member, called base). */
#define WEFT_VTABLE(kind, name, type) {WEFT_ABI_VERSION, (uint32_t)sizeof(type), (kind), (name)}

/* True when vtable v (a pointer to the whole struct) holds `field` as its author compiled
 * it, and the field is set: how callers test for methods appended in a later release. */
#define WEFT_VTABLE_HAS(v, field)                                                             \
    ((v)->base.struct_size >= offsetof(__typeof__(*(v)), field) + sizeof((v)->field) &&       \
     (v)->field)

/* The kinds the core defines. */
#define WEFT_KIND_KIND "kind"
#define WEFT_KIND_PLUGIN "plugin"   /* struct weft_plugin (weft/plugin.h) */
#define WEFT_KIND_BACKEND "backend" /* struct weft_backend (weft/backend.h) */
#define WEFT_KIND_LAYOUT "layout"   /* struct weft_layout (weft/layout.h) */
/* A plugin's function table that programs call through inline wrappers (weft/sparse.h);
 * its struct opens with struct weft_vtable and is the plugin's own. */
#define WEFT_KIND_API "api"

/* A kind of vtable. Registered like any vtable (its own kind is "kind"). */
struct weft_kind {
    struct weft_vtable base;  /* kind WEFT_KIND_KIND; name: the kind's name */
    const char *description;  /* "dataset readers", for weft-info */
    uint32_t min_size;        /* the smallest struct_size accepted: the size of the first
                                 ABI's struct of this kind */
    /* Optional: 0 when v has what the kind requires, else an error that says what is
     * missing (v passed every generic check). */
    int (*check)(const struct weft_vtable *v);
    /* Optional: called once v is in the registry as the kind's `index`-th entry; returns
     * its id (a device type, a layout id), or negative with an error, which takes v out
     * again. Without it the id is the index. */
    int (*added)(const struct weft_vtable *v, int index);
};

/* Registers vtable (which opens with struct weft_vtable) and returns its id (>= 0).
 * Checks, in order: the ABI version (a mismatch names both), that the kind is known,
 * the struct size against the kind's minimum, the name, the kind's own check, and that
 * no other vtable of the kind has the name ("reader 'idx' is already registered by
 * plugin io"). The same pointer twice returns its id again. Errors: WEFT_ERR_PLUGIN. */
int weft_register(const void *vtable);
/* Registers n vtables in order; stops at the first failure. Returns 0 or negative. */
int weft_register_all(int n, const void *const *vtables);
/* Every check weft_register() makes but the name's uniqueness, without registering: for
 * vtables used unregistered (a module type only a program uses). 0 or negative. */
int weft_registry_check(const void *vtable);

/* The vtable of kind:name, or NULL (no error set). Loads nothing. */
const void *weft_registry_find(const char *kind, const char *name);
/* The vtable of kind:name, loading the plugin that provides it on a miss; NULL with an
 * error (WEFT_ERR_PLUGIN) that lists what the kind has, the closest name, and why the
 * providing plugin (if any) did not load. */
const void *weft_registry_get(const char *kind, const char *name);
/* Entries of a kind in registration order: how many, and the i-th (NULL out of range). */
int weft_registry_count(const char *kind);
const void *weft_registry_at(const char *kind, int i);
/* The id weft_register() gave v, or -1 when v is not registered. */
int weft_registry_id(const void *vtable);
/* The plugin that registered v ("" for the program or a library), or NULL when v is not
 * registered. */
const char *weft_registry_owner(const void *vtable);
/* The names of a kind into buf, for messages: the registered ones in registration order,
 * then those that plugins on the search path provide and have not registered yet
 * ("csv, idx, npy"; "none" when there are none); with `near` set and close to one of them,
 * "; did you mean 'idx'?" after them. */
void weft_registry_describe(const char *kind, const char *near, char *buf, size_t size);

#ifdef __cplusplus
}
#endif
#endif
