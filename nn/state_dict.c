/* nn/state_dict.c: tensor dicts (what state_dict() returns) and string metadata maps,
 * each an insertion-ordered list with a hash index from name to entry (state_dict.h). */
#include "weft/state_dict.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft/error.h"

/* ---- small helpers ------------------------------------------------------------------ */


/* ---- name index: open addressing from a name to its entry number -------------------- */

struct name_slot {
    const char *key; /* borrowed from the entry; NULL when empty */
    size_t index;
};

struct name_index {
    struct name_slot *slots;
    size_t cap, count; /* cap is 0 or a power of two */
};

static uint64_t hash_name(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static long index_find(const struct name_index *ix, const char *key)
{
    if (ix->cap == 0)
        return -1;
    for (size_t i = hash_name(key) & (ix->cap - 1);; i = (i + 1) & (ix->cap - 1)) {
        if (!ix->slots[i].key)
            return -1;
        if (strcmp(ix->slots[i].key, key) == 0)
            return (long)ix->slots[i].index;
    }
}

static void index_place(struct name_slot *slots, size_t cap, const char *key, size_t index)
{
    size_t i = hash_name(key) & (cap - 1);
    while (slots[i].key)
        i = (i + 1) & (cap - 1);
    slots[i] = (struct name_slot){key, index};
}

/* Adds key (which must be absent and outlive the index). Returns 0 or an OOM error. */
static int index_add(struct name_index *ix, const char *key, size_t index)
{
    if (2 * (ix->count + 1) > ix->cap) {
        size_t cap = ix->cap ? ix->cap * 2 : 16;
        struct name_slot *slots = calloc(cap, sizeof *slots);
        if (!slots)
            return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory for a name index");
        for (size_t i = 0; i < ix->cap; i++)
            if (ix->slots[i].key)
                index_place(slots, cap, ix->slots[i].key, ix->slots[i].index);
        free(ix->slots);
        ix->slots = slots;
        ix->cap = cap;
    }
    index_place(ix->slots, ix->cap, key, index);
    ix->count++;
    return 0;
}

static void index_free(struct name_index *ix)
{
    free(ix->slots);
    memset(ix, 0, sizeof *ix);
}

/* ---- tensor dicts ------------------------------------------------------------------- */

struct dict_entry {
    char *name;
    weft_tensor *tensor; /* owned reference */
};

struct weft_tensor_dict {
    struct dict_entry *v;
    size_t n, cap;
    struct name_index index;
};

struct weft_tensor_dict *weft_tensor_dict_new(void)
{
    struct weft_tensor_dict *d = calloc(1, sizeof *d);
    if (!d)
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory for a tensor dict");
    return d;
}

void weft_tensor_dict_free(struct weft_tensor_dict *d)
{
    if (!d)
        return;
    for (size_t i = 0; i < d->n; i++) {
        weft_tensor_release(d->v[i].tensor);
        free(d->v[i].name);
    }
    free(d->v);
    index_free(&d->index);
    free(d);
}

int weft_tensor_dict_add(struct weft_tensor_dict *d, const char *name, weft_tensor *t)
{
    if (!t)
        return WEFT_ERR_VALUE;
    if (!d || !name)
        return weft_error_set(WEFT_ERR_VALUE, "weft_tensor_dict_add: the dict or the name is NULL");
    if (index_find(&d->index, name) >= 0)
        return weft_error_set(WEFT_ERR_VALUE, "duplicate key '%s'", name);
    if (weft_grow((void **)&d->v, &d->cap, d->n + 1, sizeof *d->v) != 0)
        return WEFT_ERR_OUT_OF_MEMORY;
    char *copy = weft_strdup(name);
    if (!copy)
        return WEFT_ERR_OUT_OF_MEMORY;
    if (index_add(&d->index, copy, d->n) != 0) {
        free(copy);
        return WEFT_ERR_OUT_OF_MEMORY;
    }
    d->v[d->n++] = (struct dict_entry){copy, weft_tensor_retain(t)};
    return 0;
}

size_t weft_tensor_dict_len(const struct weft_tensor_dict *d)
{
    return d ? d->n : 0;
}

weft_tensor *weft_tensor_dict_get(const struct weft_tensor_dict *d, const char *name)
{
    long i = d && name ? index_find(&d->index, name) : -1;
    if (i < 0)
        return NULL;
    return weft_autorelease_shared(d->v[i].tensor);
}

static bool dict_index_ok(const struct weft_tensor_dict *d, size_t i)
{
    if (d && i < d->n)
        return true;
    weft_error_set(WEFT_ERR_INDEX, "index %zu is out of range for a tensor dict of %zu entries",
                   i, weft_tensor_dict_len(d));
    return false;
}

const char *weft_tensor_dict_name(const struct weft_tensor_dict *d, size_t i)
{
    return dict_index_ok(d, i) ? d->v[i].name : NULL;
}

weft_tensor *weft_tensor_dict_at(const struct weft_tensor_dict *d, size_t i)
{
    if (!dict_index_ok(d, i))
        return NULL;
    return weft_autorelease_shared(d->v[i].tensor);
}

/* ---- metadata ----------------------------------------------------------------------- */

struct meta_entry {
    char *key;
    char *value;
};

struct weft_metadata {
    struct meta_entry *v;
    size_t n, cap;
    struct name_index index;
};

struct weft_metadata *weft_metadata_new(void)
{
    struct weft_metadata *m = calloc(1, sizeof *m);
    if (!m)
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory for a metadata map");
    return m;
}

void weft_metadata_free(struct weft_metadata *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n; i++) {
        free(m->v[i].key);
        free(m->v[i].value);
    }
    free(m->v);
    index_free(&m->index);
    free(m);
}

int weft_metadata_set(struct weft_metadata *m, const char *key, const char *value)
{
    if (!m || !key || !value)
        return weft_error_set(WEFT_ERR_VALUE, "weft_metadata_set: the map, key or value is NULL");
    char *v = weft_strdup(value);
    if (!v)
        return WEFT_ERR_OUT_OF_MEMORY;
    long i = index_find(&m->index, key);
    if (i >= 0) {
        free(m->v[i].value);
        m->v[i].value = v;
        return 0;
    }
    char *k = NULL;
    if (weft_grow((void **)&m->v, &m->cap, m->n + 1, sizeof *m->v) != 0 ||
        !(k = weft_strdup(key)) ||
        index_add(&m->index, k, m->n) != 0) {
        free(k);
        free(v);
        return weft_error_code();
    }
    m->v[m->n++] = (struct meta_entry){k, v};
    return 0;
}

const char *weft_metadata_get(const struct weft_metadata *m, const char *key)
{
    long i = m && key ? index_find(&m->index, key) : -1;
    return i < 0 ? NULL : m->v[i].value;
}

size_t weft_metadata_len(const struct weft_metadata *m)
{
    return m ? m->n : 0;
}

static bool meta_index_ok(const struct weft_metadata *m, size_t i)
{
    if (m && i < m->n)
        return true;
    weft_error_set(WEFT_ERR_INDEX, "index %zu is out of range for a metadata map of %zu entries",
                   i, weft_metadata_len(m));
    return false;
}

const char *weft_metadata_key(const struct weft_metadata *m, size_t i)
{
    return meta_index_ok(m, i) ? m->v[i].key : NULL;
}

const char *weft_metadata_value(const struct weft_metadata *m, size_t i)
{
    return meta_index_ok(m, i) ? m->v[i].value : NULL;
}

int weft_metadata_set_int(struct weft_metadata *m, const char *key, int64_t value)
{
    char text[32];
    snprintf(text, sizeof text, "%" PRId64, value);
    return weft_metadata_set(m, key, text);
}

int weft_metadata_set_uint(struct weft_metadata *m, const char *key, uint64_t value)
{
    char text[32];
    snprintf(text, sizeof text, "%" PRIu64, value);
    return weft_metadata_set(m, key, text);
}

/* The value of key when it is a plain decimal integer (optional '-' when `is_signed`,
 * then digits only); NULL with an error otherwise. */
static const char *integer_text(const struct weft_metadata *m, const char *key, bool is_signed)
{
    const char *text = weft_metadata_get(m, key);
    if (!text) {
        weft_error_set(WEFT_ERR_VALUE, "checkpoint metadata has no key '%s'", key ? key : "");
        return NULL;
    }
    const char *p = text + (is_signed && text[0] == '-');
    bool digits = *p != '\0';
    for (; *p; p++)
        digits &= *p >= '0' && *p <= '9';
    if (!digits) {
        weft_error_set(WEFT_ERR_VALUE, "checkpoint metadata '%s' = '%s' is not %s integer", key,
                       text, is_signed ? "an" : "a non-negative");
        return NULL;
    }
    return text;
}

int weft_metadata_get_int(const struct weft_metadata *m, const char *key, int64_t *out)
{
    const char *text = integer_text(m, key, true);
    if (!text)
        return WEFT_ERR_VALUE;
    errno = 0;
    long long v = strtoll(text, NULL, 10);
    if (errno == ERANGE)
        return weft_error_set(WEFT_ERR_VALUE,
                              "checkpoint metadata '%s' = '%s' is out of the range of int64",
                              key, text);
    *out = v;
    return 0;
}

int weft_metadata_get_uint(const struct weft_metadata *m, const char *key, uint64_t *out)
{
    const char *text = integer_text(m, key, false);
    if (!text)
        return WEFT_ERR_VALUE;
    errno = 0;
    unsigned long long v = strtoull(text, NULL, 10);
    if (errno == ERANGE)
        return weft_error_set(WEFT_ERR_VALUE,
                              "checkpoint metadata '%s' = '%s' is out of the range of uint64",
                              key, text);
    *out = v;
    return 0;
}
