/* train/dataset.c: the reader kind and the dataset object around a reader.
 *
 * The library knows no file format: it finds the reader named by `reader =` in the
 * registry (which loads the plugin that provides it), checks what the reader's open()
 * describes (so a buggy plugin cannot make the loader allocate nonsense), checks indices
 * before every read, and forwards the rest to the reader.
 */
#include "weft/dataset.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "weft/checked.h"
#include "weft/error.h"

struct weft_dataset {
    const struct weft_dataset_reader *reader;
    void *ctx;
    char *section;
    struct weft_dataset_info info;
    int64_t sample_numel[WEFT_DATASET_MAX_FIELDS];
    size_t sample_bytes[WEFT_DATASET_MAX_FIELDS];
};

static int check_reader(const struct weft_vtable *v)
{
    const struct weft_dataset_reader *r = (const struct weft_dataset_reader *)v;
    if (!r->open || !r->read)
        return weft_error_set(WEFT_ERR_PLUGIN,
                              "dataset reader '%s' lacks a required method (open and read must "
                              "both be set)",
                              v->name);
    return 0;
}

const struct weft_kind weft_reader_kind = {
    .base = WEFT_VTABLE(WEFT_KIND_KIND, WEFT_KIND_READER, struct weft_kind),
    .description = "dataset readers (the file formats [data] reader = names)",
    .min_size = sizeof(struct weft_dataset_reader),
    .check = check_reader,
};

/* The reader `reader =` names; on failure the error names the origin, the section and
 * what is available. */
static const struct weft_dataset_reader *find_reader(const weft_options *o)
{
    const char *name = weft_options_string(o, "reader", NULL);
    if (!name) {
        char known[512];
        weft_registry_describe(WEFT_KIND_READER, NULL, known, sizeof known);
        weft_options_error(o, "missing key 'reader': expected the name of a dataset reader "
                              "(known: %s)",
                           known);
        return NULL;
    }
    bool had_error = weft_error_code() != WEFT_OK;
    const struct weft_dataset_reader *r = weft_registry_get(WEFT_KIND_READER, name);
    if (!r && !had_error) { /* named by its key; out of memory stays the cause */
        char msg[1536];
        int code = weft_error_code();
        snprintf(msg, sizeof msg, "%s", weft_error_message());
        weft_error_clear();
        weft_options_bad_value(o, "reader", "%s", msg);
        if (code == WEFT_ERR_OUT_OF_MEMORY)
            weft_error_recode(code);
    }
    return r;
}

/* ---- opening ------------------------------------------------------------------- */

/* Refuses a description no loader could use; the reader is named as the culprit. */
static int check_info(const struct weft_dataset_reader *r, const char *section,
                      struct weft_dataset *ds)
{
    const struct weft_dataset_info *info = &ds->info;
    if (info->length < 0)
        return weft_error_set(WEFT_ERR_PLUGIN, "dataset reader '%s' ([%s]) gave length %lld",
                              r->base.name, section, (long long)info->length);
    if (info->nfields < 1 || info->nfields > WEFT_DATASET_MAX_FIELDS)
        return weft_error_set(WEFT_ERR_PLUGIN,
                              "dataset reader '%s' ([%s]) gave %d fields; expected 1 to %d",
                              r->base.name, section, info->nfields, WEFT_DATASET_MAX_FIELDS);
    for (int f = 0; f < info->nfields; f++) {
        const struct weft_dataset_field *fd = &info->fields[f];
        if (!fd->name[0] || memchr(fd->name, '\0', sizeof fd->name) == NULL)
            return weft_error_set(WEFT_ERR_PLUGIN,
                                  "dataset reader '%s' ([%s]): field %d has no name or an "
                                  "unterminated one",
                                  r->base.name, section, f);
        for (int g = 0; g < f; g++)
            if (strcmp(info->fields[g].name, fd->name) == 0)
                return weft_error_set(WEFT_ERR_PLUGIN,
                                      "dataset reader '%s' ([%s]): two fields are called '%s'",
                                      r->base.name, section, fd->name);
        if (!weft_dtype_valid((int)fd->dtype) || fd->ndim < 0 || fd->ndim >= WEFT_MAX_DIMS ||
            fd->num_classes < 0)
            return weft_error_set(WEFT_ERR_PLUGIN,
                                  "dataset reader '%s' ([%s]): field '%s' has dtype %d, rank "
                                  "%d, num_classes %lld; expected a weft dtype, rank 0 to %d",
                                  r->base.name, section, fd->name, (int)fd->dtype, fd->ndim,
                                  (long long)fd->num_classes, WEFT_MAX_DIMS - 1);
        int64_t numel, bytes;
        if (!weft_size_product(&numel, WEFT_SIZE_MAX, fd->ndim, fd->shape))
            return weft_error_set(WEFT_ERR_PLUGIN,
                                  "dataset reader '%s' ([%s]): field '%s' has a negative "
                                  "or overflowing sample shape",
                                  r->base.name, section, fd->name);
        if (!weft_size_mul(numel, (int64_t)weft_dtype_size(fd->dtype), WEFT_SIZE_MAX, &bytes))
            return weft_error_set(WEFT_ERR_PLUGIN,
                                  "dataset reader '%s' ([%s]): field '%s' has a sample too "
                                  "large to address",
                                  r->base.name, section, fd->name);
        ds->sample_numel[f] = numel;
        ds->sample_bytes[f] = (size_t)bytes;
    }
    return 0;
}

weft_dataset *weft_dataset_open(const weft_options *options)
{
    const struct weft_dataset_reader *r = find_reader(options);
    if (!r)
        return NULL;
    const char *section = weft_options_section(options);
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
    if (r->open(options, &ds->info, &ds->ctx) < 0) {
        if (weft_error_code() == WEFT_OK)
            weft_error_set(WEFT_ERR_PLUGIN, "dataset reader '%s' failed to open [%s] without "
                           "saying why", r->base.name, section);
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
    if (ds->reader->close)
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
    return ds ? ds->reader->base.name : "";
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

/* Not registered: no config names it. */
static const struct weft_dataset_reader subset_reader = {
    .base = WEFT_VTABLE(WEFT_KIND_READER, "subset", struct weft_dataset_reader),
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
