/* train/dataset.c: the dataset-reader registry and the dataset object around a reader.
 *
 * The core knows no file format: it finds the reader named by `reader =`, loading
 * weft-io.so on demand, checks what the reader's open() describes (so a buggy plugin
 * cannot make the loader allocate nonsense), checks indices before every read, and
 * forwards the rest to the reader.
 */
#include "weft/dataset.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft/config.h"
#include "weft/error.h"

/* ABI 1's reader ends with `close`; a reader built against ABI 1 has at least this. */
#define READER_ABI1_SIZE                                                                      \
    (offsetof(struct weft_dataset_reader, close) + sizeof(void (*)(void *)))
/* A method exists when the plugin's struct is large enough to hold it and it is set. */
#define READER_HAS(r, field)                                                                  \
    ((r)->struct_size >= offsetof(struct weft_dataset_reader, field) + sizeof((r)->field) &&  \
     (r)->field != NULL)

/* The plugin that provides the built-in readers, loaded when a name is unknown. */
#define IO_PLUGIN "io"

struct weft_dataset {
    const struct weft_dataset_reader *reader;
    void *ctx;
    char *section;
    struct weft_dataset_info info;
    int64_t sample_numel[WEFT_DATASET_MAX_FIELDS];
    size_t sample_bytes[WEFT_DATASET_MAX_FIELDS];
};

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static const struct weft_dataset_reader **readers;
static int nreaders, cap_readers;

/* ---- registry ------------------------------------------------------------------- */

static int check_reader(const struct weft_dataset_reader *r)
{
    if (!r)
        return weft_error_set(WEFT_ERR_PLUGIN, "weft_dataset_reader_register: reader is NULL");
    if (r->abi_version != WEFT_PLUGIN_ABI_VERSION)
        return weft_error_set(WEFT_ERR_PLUGIN,
                              "dataset reader was built for weft plugin ABI %u, but this weft "
                              "has ABI %d; rebuild the plugin against this weft",
                              r->abi_version, WEFT_PLUGIN_ABI_VERSION);
    const char *name = r->name ? r->name : "?";
    if (r->struct_size < READER_ABI1_SIZE)
        return weft_error_set(WEFT_ERR_PLUGIN,
                              "dataset reader '%s' has struct_size %u, smaller than ABI %d's "
                              "%zu bytes; rebuild the plugin against this weft",
                              name, r->struct_size, WEFT_PLUGIN_ABI_VERSION, READER_ABI1_SIZE);
    if (!r->name || !r->name[0])
        return weft_error_set(WEFT_ERR_PLUGIN, "dataset reader has no name");
    if (!r->open || !r->read)
        return weft_error_set(WEFT_ERR_PLUGIN,
                              "dataset reader '%s' lacks a required method (open and read must "
                              "both be set)",
                              name);
    return 0;
}

/* Caller holds registry_lock. */
static const struct weft_dataset_reader *find_locked(const char *name)
{
    for (int i = 0; i < nreaders; i++)
        if (strcmp(readers[i]->name, name) == 0)
            return readers[i];
    return NULL;
}

int weft_dataset_reader_register(const struct weft_dataset_reader *reader)
{
    if (check_reader(reader) < 0)
        return WEFT_ERR_PLUGIN;
    int rc = 0;
    pthread_mutex_lock(&registry_lock);
    const struct weft_dataset_reader *old = find_locked(reader->name);
    if (old == reader) {
        rc = 0;
    } else if (old) {
        rc = weft_error_set(WEFT_ERR_PLUGIN, "dataset reader '%s' is already registered",
                            reader->name);
    } else if (nreaders == cap_readers) {
        int cap = cap_readers ? cap_readers * 2 : 8;
        const struct weft_dataset_reader **v = realloc(readers, (size_t)cap * sizeof *v);
        if (!v)
            rc = weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "dataset registry: out of memory");
        else {
            readers = v;
            cap_readers = cap;
        }
    }
    if (rc == 0 && old != reader)
        readers[nreaders++] = reader;
    pthread_mutex_unlock(&registry_lock);
    return rc;
}

const struct weft_dataset_reader *weft_dataset_reader_find(const char *name)
{
    if (!name)
        return NULL;
    pthread_mutex_lock(&registry_lock);
    const struct weft_dataset_reader *r = find_locked(name);
    pthread_mutex_unlock(&registry_lock);
    return r;
}

int weft_dataset_reader_count(void)
{
    pthread_mutex_lock(&registry_lock);
    int n = nreaders;
    pthread_mutex_unlock(&registry_lock);
    return n;
}

const struct weft_dataset_reader *weft_dataset_reader_get(int i)
{
    pthread_mutex_lock(&registry_lock);
    const struct weft_dataset_reader *r = i >= 0 && i < nreaders ? readers[i] : NULL;
    pthread_mutex_unlock(&registry_lock);
    return r;
}

/* ---- finding the reader a section names ------------------------------------------- */

static size_t edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63)
        return SIZE_MAX;
    size_t row[64];
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

/* "csv, idx, npy" into buf, and the registered name closest to `name` (NULL if none
 * is close enough to be a likely typo). */
static const char *describe_readers(const char *name, char *buf, size_t size)
{
    const char *best = NULL;
    size_t best_d = 3; /* suggest only within two edits */
    size_t used = 0;
    buf[0] = '\0';
    pthread_mutex_lock(&registry_lock);
    for (int i = 0; i < nreaders; i++) {
        const char *rn = readers[i]->name;
        int w = snprintf(buf + used, size - used, "%s%s", i ? ", " : "", rn);
        if (w > 0 && (size_t)w < size - used)
            used += (size_t)w;
        size_t d = name ? edit_distance(name, rn) : SIZE_MAX;
        if (d < best_d) {
            best_d = d;
            best = rn;
        }
    }
    pthread_mutex_unlock(&registry_lock);
    if (!buf[0])
        snprintf(buf, size, "none registered");
    return best;
}

/* The reader for `name`, loading weft-io.so when it is not registered yet. On failure
 * the error names the config, the section and what is available. */
static const struct weft_dataset_reader *find_reader(struct weft_config *cfg,
                                                     const char *section, const char *name)
{
    const struct weft_dataset_reader *r = name ? weft_dataset_reader_find(name) : NULL;
    if (r)
        return r;
    /* The io plugin provides the built-in readers; its failure to load only matters if
     * the reader stays unknown, and then its reason is part of the message. */
    char load_error[512] = "";
    if (!weft_plugin_is_loaded(IO_PLUGIN) && weft_error_code() == WEFT_OK) {
        if (weft_plugin_load(IO_PLUGIN) < 0) {
            snprintf(load_error, sizeof load_error, "; loading plugin '%s' failed: %s",
                     IO_PLUGIN, weft_error_message());
            weft_error_clear();
        }
        r = name ? weft_dataset_reader_find(name) : NULL;
        if (r)
            return r;
    }
    char known[512];
    const char *close = describe_readers(name, known, sizeof known);
    const char *file = weft_config_name(cfg);
    if (!name) {
        weft_error_set(WEFT_ERR_CONFIG,
                       "%s: [%s] missing key 'reader': expected the name of a dataset reader "
                       "(%s)%s",
                       file, section, known, load_error);
        return NULL;
    }
    char hint[96] = "";
    if (close)
        snprintf(hint, sizeof hint, "; did you mean '%s'?", close);
    weft_error_set(WEFT_ERR_CONFIG,
                   "%s: [%s] reader = '%s': unknown dataset reader (registered: %s)%s%s", file,
                   section, name, known, hint, load_error);
    return NULL;
}

/* ---- opening ------------------------------------------------------------------- */

/* Refuses a description no loader could use; the reader is named as the culprit. */
static int check_info(const struct weft_dataset_reader *r, const char *section,
                      struct weft_dataset *ds)
{
    const struct weft_dataset_info *info = &ds->info;
    if (info->length < 0)
        return weft_error_set(WEFT_ERR_PLUGIN, "dataset reader '%s' ([%s]) gave length %lld",
                              r->name, section, (long long)info->length);
    if (info->nfields < 1 || info->nfields > WEFT_DATASET_MAX_FIELDS)
        return weft_error_set(WEFT_ERR_PLUGIN,
                              "dataset reader '%s' ([%s]) gave %d fields; expected 1 to %d",
                              r->name, section, info->nfields, WEFT_DATASET_MAX_FIELDS);
    for (int f = 0; f < info->nfields; f++) {
        const struct weft_dataset_field *fd = &info->fields[f];
        if (!fd->name[0] || memchr(fd->name, '\0', sizeof fd->name) == NULL)
            return weft_error_set(WEFT_ERR_PLUGIN,
                                  "dataset reader '%s' ([%s]): field %d has no name or an "
                                  "unterminated one",
                                  r->name, section, f);
        for (int g = 0; g < f; g++)
            if (strcmp(info->fields[g].name, fd->name) == 0)
                return weft_error_set(WEFT_ERR_PLUGIN,
                                      "dataset reader '%s' ([%s]): two fields are called '%s'",
                                      r->name, section, fd->name);
        if (!weft_dtype_valid((int)fd->dtype) || fd->ndim < 0 || fd->ndim >= WEFT_MAX_DIMS ||
            fd->num_classes < 0)
            return weft_error_set(WEFT_ERR_PLUGIN,
                                  "dataset reader '%s' ([%s]): field '%s' has dtype %d, rank "
                                  "%d, num_classes %lld; expected a weft dtype, rank 0 to %d",
                                  r->name, section, fd->name, (int)fd->dtype, fd->ndim,
                                  (long long)fd->num_classes, WEFT_MAX_DIMS - 1);
        int64_t numel = 1;
        for (int d = 0; d < fd->ndim; d++) {
            int64_t s = fd->shape[d];
            if (s < 0 || (s > 0 && numel > INT64_MAX / s))
                return weft_error_set(WEFT_ERR_PLUGIN,
                                      "dataset reader '%s' ([%s]): field '%s' has a negative "
                                      "or overflowing sample shape",
                                      r->name, section, fd->name);
            numel *= s;
        }
        size_t item = weft_dtype_size(fd->dtype);
        if ((uint64_t)numel > SIZE_MAX / item)
            return weft_error_set(WEFT_ERR_PLUGIN,
                                  "dataset reader '%s' ([%s]): field '%s' has a sample too "
                                  "large to address",
                                  r->name, section, fd->name);
        ds->sample_numel[f] = numel;
        ds->sample_bytes[f] = (size_t)numel * item;
    }
    return 0;
}

weft_dataset *weft_dataset_open(struct weft_config *cfg, const char *section)
{
    if (!cfg || !section) {
        weft_error_set(WEFT_ERR_VALUE, "weft_dataset_open: config and section must be set");
        return NULL;
    }
    const char *name = weft_config_string(cfg, section, "reader", NULL);
    const struct weft_dataset_reader *r = find_reader(cfg, section, name);
    if (!r)
        return NULL;
    weft_dataset *ds = calloc(1, sizeof *ds);
    char *sec = strdup(section);
    if (!ds || !sec) {
        free(ds);
        free(sec);
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "weft_dataset_open: out of memory");
        return NULL;
    }
    ds->reader = r;
    ds->section = sec;
    if (r->open(cfg, section, &ds->info, &ds->ctx) < 0) {
        if (weft_error_code() == WEFT_OK)
            weft_error_set(WEFT_ERR_PLUGIN, "dataset reader '%s' failed to open [%s] without "
                           "saying why", r->name, section);
        free(ds->section);
        free(ds);
        return NULL;
    }
    if (check_info(r, section, ds) < 0) {
        weft_dataset_close(ds);
        return NULL;
    }
    return ds;
}

void weft_dataset_close(weft_dataset *ds)
{
    if (!ds)
        return;
    if (READER_HAS(ds->reader, close))
        ds->reader->close(ds->ctx);
    free(ds->section);
    free(ds);
}

/* ---- queries -------------------------------------------------------------------- */

int64_t weft_dataset_length(const weft_dataset *ds)
{
    return ds ? ds->info.length : -1;
}

int weft_dataset_num_fields(const weft_dataset *ds)
{
    return ds ? ds->info.nfields : 0;
}

const struct weft_dataset_field *weft_dataset_field(const weft_dataset *ds, int i)
{
    if (!ds || i < 0 || i >= ds->info.nfields)
        return NULL;
    return &ds->info.fields[i];
}

int weft_dataset_field_index(const weft_dataset *ds, const char *name)
{
    if (!ds || !name)
        return -1;
    for (int i = 0; i < ds->info.nfields; i++)
        if (strcmp(ds->info.fields[i].name, name) == 0)
            return i;
    return -1;
}

int64_t weft_dataset_sample_numel(const weft_dataset *ds, int i)
{
    return weft_dataset_field(ds, i) ? ds->sample_numel[i] : 0;
}

size_t weft_dataset_sample_bytes(const weft_dataset *ds, int i)
{
    return weft_dataset_field(ds, i) ? ds->sample_bytes[i] : 0;
}

const char *weft_dataset_reader_name(const weft_dataset *ds)
{
    return ds ? ds->reader->name : "";
}

const char *weft_dataset_section(const weft_dataset *ds)
{
    return ds ? ds->section : "";
}

/* ---- reading -------------------------------------------------------------------- */

int weft_dataset_read(const weft_dataset *ds, int64_t n, const int64_t *indices,
                      void *const *field_buffers)
{
    if (!ds)
        return weft_error_set(WEFT_ERR_VALUE, "weft_dataset_read: dataset is NULL");
    if (n < 0)
        return weft_error_set(WEFT_ERR_VALUE, "weft_dataset_read: n must be >= 0, got %lld",
                              (long long)n);
    if (n == 0)
        return 0;
    if (!indices || !field_buffers)
        return weft_error_set(WEFT_ERR_VALUE,
                              "weft_dataset_read: indices and field_buffers must be set");
    for (int f = 0; f < ds->info.nfields; f++)
        if (!field_buffers[f])
            return weft_error_set(WEFT_ERR_VALUE,
                                  "weft_dataset_read: buffer for field '%s' is NULL",
                                  ds->info.fields[f].name);
    for (int64_t k = 0; k < n; k++)
        if (indices[k] < 0 || indices[k] >= ds->info.length)
            return weft_error_set(WEFT_ERR_INDEX,
                                  "index %lld is out of bounds for dataset [%s] with %lld "
                                  "samples",
                                  (long long)indices[k], ds->section,
                                  (long long)ds->info.length);
    return ds->reader->read(ds->ctx, n, indices, field_buffers);
}

/* ---- helpers for readers ------------------------------------------------------- */

int weft_dataset_resolve_path(const struct weft_config *cfg, const char *path, char *out,
                              size_t size)
{
    if (!path || !out || size == 0)
        return weft_error_set(WEFT_ERR_VALUE, "weft_dataset_resolve_path: path and out must "
                                              "be set");
    const char *name = weft_config_name(cfg);
    const char *slash = strrchr(name, '/');
    int w;
    if (path[0] == '/' || !slash)
        w = snprintf(out, size, "%s", path);
    else
        w = snprintf(out, size, "%.*s/%s", (int)(slash - name), name, path);
    if (w < 0 || (size_t)w >= size)
        return weft_error_set(WEFT_ERR_CONFIG, "%s: path '%s' is too long (at most %zu bytes "
                                               "once made relative to the config's directory)",
                              name, path, size - 1);
    return 0;
}

/* ---- subsets ------------------------------------------------------------------------- */

/* A subset reads through to its base with its indices mapped; it is how a trainer holds
 * out a validation split without copying samples. */
struct subset_ctx {
    const weft_dataset *base;
    int64_t n;
    int64_t *map;
};

static int subset_read(void *ctx, int64_t n, const int64_t *indices, void *const *buffers)
{
    const struct subset_ctx *s = ctx;
    int64_t small[256] = {0};
    int64_t *mapped = n <= 256 ? small : malloc((size_t)n * sizeof *mapped);
    if (!mapped)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "dataset subset: out of memory");
    for (int64_t k = 0; k < n; k++)
        mapped[k] = s->map[indices[k]];
    int rc = weft_dataset_read(s->base, n, mapped, buffers);
    if (mapped != small)
        free(mapped);
    return rc;
}

static void subset_close(void *ctx)
{
    struct subset_ctx *s = ctx;
    free(s->map);
    free(s);
}

static const struct weft_dataset_reader subset_reader = {
    .abi_version = WEFT_PLUGIN_ABI_VERSION,
    .struct_size = sizeof(struct weft_dataset_reader),
    .name = "subset",
    .description = "a subset of another dataset's samples",
    .read = subset_read,
    .close = subset_close,
};

weft_dataset *weft_dataset_subset(const weft_dataset *base, int64_t n, const int64_t *indices)
{
    if (!base)
        return NULL;
    for (int64_t k = 0; k < n; k++)
        if (indices[k] < 0 || indices[k] >= base->info.length) {
            weft_error_set(WEFT_ERR_INDEX,
                           "subset index %lld is out of bounds for dataset [%s] with %lld samples",
                           (long long)indices[k], base->section, (long long)base->info.length);
            return NULL;
        }
    weft_dataset *ds = calloc(1, sizeof *ds);
    struct subset_ctx *s = calloc(1, sizeof *s);
    int64_t *map = malloc((size_t)(n > 0 ? n : 1) * sizeof *map);
    char *section = strdup(base->section);
    if (!ds || !s || !map || !section) {
        free(ds);
        free(s);
        free(map);
        free(section);
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "dataset subset: out of memory");
        return NULL;
    }
    if (n > 0)
        memcpy(map, indices, (size_t)n * sizeof *map);
    *s = (struct subset_ctx){base, n, map};
    *ds = *base;
    ds->reader = &subset_reader;
    ds->ctx = s;
    ds->section = section;
    ds->info.length = n;
    return ds;
}
