/* plugins/io/npy.c: the `npy` reader: NumPy .npy files, memory-mapped.
 *
 * Format (numpy/lib/format.py): "\x93NUMPY", major, minor; the header length as a
 * little-endian u16 (version 1.0) or u32 (2.0, 3.0: 3.0 allows UTF-8 in the header);
 * the header, a Python dict literal {'descr': '<f4', 'fortran_order': False,
 * 'shape': (N, ...)} padded with spaces and ended by '\n'; then the data.
 *
 * The features file is mapped and never copied whole: read() copies each sample out of
 * the mapping, swapping bytes for a foreign byte order and gathering the elements of a
 * Fortran-order array into C order. The labels file (one integer per sample) is
 * converted to int64 and range-checked at open.
 *
 * Keys: path (required), labels (optional), num_classes (default: largest label + 1),
 * dtype (optional: must match the file; "bfloat16" also reads a 2-byte void descr,
 * which is how ml_dtypes' bfloat16 arrays are saved).
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io.h"

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAX_NDIM 64 /* numpy's own limit; weft samples allow WEFT_MAX_DIMS - 1 */

/* A descr's type: kind letter and size; dtype < 0 for integer types weft lacks (read
 * only as labels). */
struct npy_type {
    char kind;
    size_t size;
    int dtype;
};

static const struct npy_type npy_types[] = {
    {'b', 1, WEFT_BOOL}, {'u', 1, WEFT_U8},  {'i', 1, WEFT_I8},  {'i', 2, WEFT_I16},
    {'i', 4, WEFT_I32},  {'i', 8, WEFT_I64}, {'f', 2, WEFT_F16}, {'f', 4, WEFT_F32},
    {'f', 8, WEFT_F64},  {'u', 2, -1},       {'u', 4, -1},       {'u', 8, -1},
    {'V', 2, -1},
};

struct npy_array {
    const char *path;
    struct io_map map;
    const unsigned char *data; /* the first element */
    size_t data_offset;
    const struct npy_type *type;
    char descr[16];
    bool swap;    /* stored in the other byte order than the host's */
    bool fortran;
    int ndim;
    int64_t shape[NPY_MAX_NDIM];
    int64_t count;
};

struct npy_ctx {
    struct io_map map;
    const unsigned char *data;
    size_t item;
    bool swap, fortran;
    int64_t nsamples;
    int sample_ndim;
    int64_t sample_shape[WEFT_MAX_DIMS];
    int64_t sample_numel;
    int64_t *labels; /* NULL without labels */
};

/* ---- the header ------------------------------------------------------------------ */

/* A cursor over the header text; errors give the byte offset in the file. */
struct cursor {
    const struct npy_array *a;
    const char *text;
    size_t len, pos, base;
};

static int header_error(const struct cursor *c, const char *expected)
{
    char found[24];
    if (c->pos >= c->len)
        snprintf(found, sizeof found, "the end of the header");
    else if (isprint((unsigned char)c->text[c->pos]))
        snprintf(found, sizeof found, "'%c'", c->text[c->pos]);
    else
        snprintf(found, sizeof found, "byte 0x%02x", (unsigned char)c->text[c->pos]);
    return weft_error_set(WEFT_ERR_IO, "%s: byte %zu: bad .npy header: expected %s, found %s",
                          c->a->path, c->base + c->pos, expected, found);
}

static void skip_space(struct cursor *c)
{
    while (c->pos < c->len && isspace((unsigned char)c->text[c->pos]))
        c->pos++;
}

static bool eat(struct cursor *c, char ch)
{
    skip_space(c);
    if (c->pos < c->len && c->text[c->pos] == ch) {
        c->pos++;
        return true;
    }
    return false;
}

/* A quoted Python string into out (at most size-1 bytes). */
static int parse_string(struct cursor *c, char *out, size_t size, const char *what)
{
    skip_space(c);
    char q = c->pos < c->len ? c->text[c->pos] : 0;
    if (q != '\'' && q != '"')
        return header_error(c, what);
    size_t start = ++c->pos;
    while (c->pos < c->len && c->text[c->pos] != q)
        c->pos++;
    if (c->pos >= c->len)
        return header_error(c, "a closing quote");
    size_t n = c->pos - start;
    if (n >= size) {
        c->pos = start;
        return header_error(c, what);
    }
    memcpy(out, c->text + start, n);
    out[n] = '\0';
    c->pos++;
    return 0;
}

static int parse_bool(struct cursor *c, bool *out)
{
    skip_space(c);
    const char *p = c->text + c->pos;
    size_t left = c->len - c->pos;
    if (left >= 4 && memcmp(p, "True", 4) == 0) {
        *out = true;
        c->pos += 4;
        return 0;
    }
    if (left >= 5 && memcmp(p, "False", 5) == 0) {
        *out = false;
        c->pos += 5;
        return 0;
    }
    return header_error(c, "True or False for 'fortran_order'");
}

/* "(3, 4)", "(3,)", "()"; Python 2's "3L" is accepted. */
static int parse_shape(struct cursor *c, struct npy_array *a)
{
    if (!eat(c, '('))
        return header_error(c, "a tuple such as (100, 28, 28) for 'shape'");
    a->ndim = 0;
    for (;;) {
        if (eat(c, ')'))
            return 0;
        skip_space(c);
        size_t start = c->pos;
        int64_t v = 0;
        while (c->pos < c->len && isdigit((unsigned char)c->text[c->pos])) {
            int digit = c->text[c->pos] - '0';
            if (v > (INT64_MAX - digit) / 10) {
                c->pos = start;
                return header_error(c, "a dimension size below 2^63");
            }
            v = v * 10 + digit;
            c->pos++;
        }
        if (c->pos == start)
            return header_error(c, "a non-negative integer dimension size or ')'");
        if (c->pos < c->len && c->text[c->pos] == 'L')
            c->pos++;
        if (a->ndim == NPY_MAX_NDIM)
            return header_error(c, "at most 64 dimensions");
        a->shape[a->ndim++] = v;
        if (eat(c, ','))
            continue;
        if (eat(c, ')'))
            return 0;
        return header_error(c, "',' or ')' in 'shape'");
    }
}

static int parse_descr(struct cursor *c, struct npy_array *a)
{
    skip_space(c);
    if (c->pos < c->len && c->text[c->pos] == '[')
        return header_error(c, "a simple type such as '<f4' for 'descr' (structured dtypes "
                               "are not supported)");
    size_t at = c->pos;
    int rc = parse_string(c, a->descr, sizeof a->descr, "a type string such as '<f4'");
    if (rc < 0)
        return rc;
    const char *d = a->descr;
    char order = d[0];
    char *end = NULL;
    long size = strlen(d) >= 3 ? strtol(d + 2, &end, 10) : 0;
    if ((order == '<' || order == '>' || order == '|' || order == '=') && end && *end == '\0') {
        for (size_t i = 0; i < sizeof npy_types / sizeof *npy_types; i++) {
            const struct npy_type *t = &npy_types[i];
            if (t->kind != d[1] || (long)t->size != size)
                continue;
            bool little = order == '<' || order == '|' || (order == '=' && io_host_little_endian());
            a->type = t;
            a->swap = t->size > 1 && little != io_host_little_endian();
            return 0;
        }
    }
    c->pos = at;
    return header_error(c, "a 'descr' weft reads: byte order <, >, | or = and one of b1 "
                           "(bool), u1, i1, i2, i4, i8, f2, f4, f8 (u2, u4, u8 for labels)");
}

static int parse_header(struct npy_array *a, const char *text, size_t len, size_t base)
{
    struct cursor c = {a, text, len, 0, base};
    bool seen[3] = {false, false, false};
    static const char *const keys[3] = {"descr", "fortran_order", "shape"};
    if (!eat(&c, '{'))
        return header_error(&c, "'{' (a Python dict)");
    for (;;) {
        if (eat(&c, '}'))
            break;
        char key[32];
        size_t at = c.pos;
        int rc = parse_string(&c, key, sizeof key, "a key: 'descr', 'fortran_order' or 'shape'");
        if (rc < 0)
            return rc;
        int k = 0;
        while (k < 3 && strcmp(key, keys[k]) != 0)
            k++;
        if (k == 3 || seen[k]) {
            c.pos = at;
            skip_space(&c);
            return header_error(&c, k == 3 ? "only the keys 'descr', 'fortran_order' and 'shape'"
                                           : "each key once");
        }
        seen[k] = true;
        if (!eat(&c, ':'))
            return header_error(&c, "':'");
        rc = k == 0 ? parse_descr(&c, a) : k == 1 ? parse_bool(&c, &a->fortran)
                                                  : parse_shape(&c, a);
        if (rc < 0)
            return rc;
        if (eat(&c, ','))
            continue;
        if (eat(&c, '}'))
            break;
        return header_error(&c, "',' or '}'");
    }
    skip_space(&c);
    if (c.pos != c.len)
        return header_error(&c, "only spaces after the dict");
    for (int k = 0; k < 3; k++)
        if (!seen[k])
            return weft_error_set(WEFT_ERR_IO,
                                  "%s: byte %zu: bad .npy header: the key '%s' is missing "
                                  "(expected 'descr', 'fortran_order' and 'shape')",
                                  a->path, base, keys[k]);
    return 0;
}

/* ---- the file -------------------------------------------------------------------- */

static int open_array(const char *path, struct npy_array *a)
{
    memset(a, 0, sizeof *a);
    a->path = path;
    int rc = io_map_open(&a->map, path);
    if (rc < 0)
        return rc;
    const unsigned char *p = a->map.data;
    size_t size = a->map.size;
    if (size < 8 || memcmp(p, NPY_MAGIC, 6) != 0) {
        if (size >= 6 && memcmp(p, NPY_MAGIC, 6) != 0)
            return weft_error_set(WEFT_ERR_IO, "%s: byte 0: bad magic: expected \"\\x93NUMPY\" "
                                               "(a .npy file)", path);
        return weft_error_set(WEFT_ERR_IO, "%s: byte 0: truncated header: the file has %zu "
                                           "bytes; expected at least 10 (a .npy file)", path, size);
    }
    unsigned major = p[6], minor = p[7];
    if (major < 1 || major > 3 || minor != 0)
        return weft_error_set(WEFT_ERR_IO, "%s: byte 6: unsupported .npy format version %u.%u "
                                           "(weft reads 1.0, 2.0 and 3.0)", path, major, minor);
    size_t lensize = major == 1 ? 2 : 4;
    size_t hstart = 8 + lensize;
    if (size < hstart)
        return weft_error_set(WEFT_ERR_IO, "%s: byte 8: truncated header: expected a %zu-byte "
                                           "header length, the file has %zu bytes", path, lensize,
                              size);
    uint64_t hlen = p[8] | (uint64_t)p[9] << 8;
    if (lensize == 4)
        hlen |= (uint64_t)p[10] << 16 | (uint64_t)p[11] << 24;
    if (hlen > size - hstart)
        return weft_error_set(WEFT_ERR_IO, "%s: byte %zu: truncated header: expected %llu bytes "
                                           "of header, the file has %zu",
                              path, hstart, (unsigned long long)hlen, size - hstart);
    if (hlen == 0 || p[hstart + hlen - 1] != '\n')
        return weft_error_set(WEFT_ERR_IO, "%s: byte %zu: bad .npy header: expected it to end "
                                           "with a newline",
                              path, (size_t)(hstart + (hlen ? hlen - 1 : 0)));
    rc = parse_header(a, (const char *)p + hstart, (size_t)hlen, hstart);
    if (rc < 0)
        return rc;
    a->data_offset = hstart + (size_t)hlen;
    a->data = p + a->data_offset;
    int64_t bytes = (int64_t)a->type->size;
    for (int d = 0; d < a->ndim; d++)
        if (!weft_size_mul(bytes, a->shape[d], WEFT_SIZE_MAX, &bytes))
            return weft_error_set(WEFT_ERR_IO, "%s: byte %zu: bad .npy header: shape of %d "
                                               "dimensions with %zu-byte elements overflows a "
                                               "64-bit size",
                                  path, hstart, a->ndim, a->type->size);
    a->count = bytes / (int64_t)a->type->size;
    size_t have = size - a->data_offset;
    if ((uint64_t)bytes > have)
        return weft_error_set(WEFT_ERR_IO, "%s: byte %zu: truncated data: expected %lld bytes "
                                           "(shape and '%s'), the file has %zu",
                              path, a->data_offset, (long long)bytes, a->descr, have);
    if ((uint64_t)bytes < have)
        return weft_error_set(WEFT_ERR_IO, "%s: byte %lld: %lld unexpected bytes after the data "
                                           "(expected the file to end here)",
                              path, (long long)(a->data_offset + (size_t)bytes),
                              (long long)(have - (size_t)bytes));
    return 0;
}

/* "(100, 28, 28)" for messages. */
static const char *shape_text(const struct npy_array *a, char *buf, size_t size)
{
    size_t used = snprintf(buf, size, "(");
    for (int d = 0; d < a->ndim && used < size; d++)
        used += snprintf(buf + used, size - used, "%s%lld", d ? ", " : "", (long long)a->shape[d]);
    if (used < size)
        snprintf(buf + used, size - used, a->ndim == 1 ? ",)" : ")");
    return buf;
}

/* The features' weft dtype, given the optional `dtype` key. */
static int features_dtype(const weft_options *o, const struct npy_array *a,
                          enum weft_dtype *out)
{
    const char *want = weft_options_string(o, "dtype", NULL);
    enum weft_dtype wanted = WEFT_F32;
    if (want && weft_dtype_parse(want, &wanted) < 0)
        return weft_options_error(o, "dtype = '%s': expected a weft dtype "
                                               "(bool, uint8, int8, int16, int32, int64, "
                                               "float16, bfloat16, float32, float64)", want);
    if (a->type->kind == 'V') {
        if (want && wanted == WEFT_BF16) {
            *out = WEFT_BF16;
            return 0;
        }
        return weft_error_set(WEFT_ERR_IO, "%s: descr '%s' is raw 2-byte values; if they are "
                                           "bfloat16 (as ml_dtypes saves them), set dtype = "
                                           "bfloat16 in [%s]",
                              a->path, a->descr, weft_options_section(o));
    }
    if (a->type->dtype < 0)
        return weft_error_set(WEFT_ERR_IO, "%s: descr '%s': weft has no unsigned %zu-byte "
                                           "dtype (only labels may use it)",
                              a->path, a->descr, a->type->size);
    if (want && wanted != (enum weft_dtype)a->type->dtype)
        return weft_options_error(o, "dtype = '%s', but %s holds %s (descr "
                                               "'%s'); weft does not convert", want, a->path,
                              weft_dtype_name((enum weft_dtype)a->type->dtype), a->descr);
    *out = (enum weft_dtype)a->type->dtype;
    return 0;
}

/* Labels as int64 in [0, num_classes). *num_classes is 0 to infer it. */
static int load_labels(const char *path, int64_t nsamples, const char *features_path,
                       int64_t *num_classes, int64_t **out)
{
    struct npy_array a;
    int rc = open_array(path, &a);
    char text[64];
    if (rc == 0 && (a.ndim != 1 || a.shape[0] != nsamples))
        rc = weft_error_set(WEFT_ERR_IO, "%s: labels of shape %s; expected shape (%lld,), one "
                                         "label per sample of %s",
                            path, shape_text(&a, text, sizeof text), (long long)nsamples,
                            features_path);
    if (rc == 0 && a.type->kind != 'i' && a.type->kind != 'u')
        rc = weft_error_set(WEFT_ERR_IO, "%s: labels have descr '%s'; expected an integer type "
                                         "(i1, i2, i4, i8, u1, u2, u4, u8)",
                            path, a.descr);
    int64_t *labels = NULL;
    if (rc == 0 && !(labels = malloc((size_t)(nsamples ? nsamples : 1) * sizeof *labels)))
        rc = weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    int64_t max = 0;
    bool file_little = rc == 0 && a.swap != io_host_little_endian();
    for (int64_t i = 0; rc == 0 && i < nsamples; i++) {
        size_t item = a.type->size;
        const unsigned char *raw = a.data + (size_t)i * item;
        uint64_t u = 0;
        int64_t v;
        for (size_t b = 0; b < item; b++)
            u |= (uint64_t)raw[file_little ? b : item - 1 - b] << (8 * b);
        bool is_signed = a.type->kind == 'i';
        if (is_signed && item < 8 && (u >> (8 * item - 1)) & 1)
            u |= ~(uint64_t)0 << (8 * item); /* sign-extend */
        v = (int64_t)u;
        bool negative = is_signed ? v < 0 : u > (uint64_t)INT64_MAX;
        if (negative || (*num_classes > 0 && v >= *num_classes)) {
            char value[32];
            snprintf(value, sizeof value, is_signed ? "%lld" : "%llu",
                     is_signed ? (long long)v : (unsigned long long)u);
            if (*num_classes > 0)
                rc = weft_error_set(WEFT_ERR_IO, "%s: byte %zu: label %s of sample %lld is out "
                                                 "of range: expected 0 <= label < %lld "
                                                 "(num_classes)",
                                    path, a.data_offset + (size_t)i * item, value, (long long)i,
                                    (long long)*num_classes);
            else
                rc = weft_error_set(WEFT_ERR_IO, "%s: byte %zu: label %s of sample %lld is out "
                                                 "of range: expected a class label >= 0",
                                    path, a.data_offset + (size_t)i * item, value, (long long)i);
            break;
        }
        labels[i] = v;
        if (v > max)
            max = v;
    }
    io_map_close(&a.map);
    if (rc < 0) {
        free(labels);
        return rc;
    }
    if (*num_classes == 0)
        *num_classes = max + 1;
    *out = labels;
    return 0;
}

static void npy_close(void *ctx)
{
    struct npy_ctx *c = ctx;
    if (!c)
        return;
    io_map_close(&c->map);
    free(c->labels);
    free(c);
}

static int npy_open(const weft_options *o, struct weft_dataset_info *info,
                    void **out)
{
    char path[IO_PATH_MAX], labels_path[IO_PATH_MAX];
    int64_t num_classes;
    int rc = io_config_path(o, "path", true, "the path of a .npy file", path,
                            sizeof path);
    if (rc < 0)
        return rc;
    int has_labels = io_config_path(o, "labels", false, "the path of a .npy file",
                                    labels_path, sizeof labels_path);
    if (has_labels < 0)
        return has_labels;
    rc = weft_options_int_range(o, "num_classes", 0, 1, INT32_MAX, &num_classes);
    if (rc < 0)
        return rc;

    struct npy_array a;
    enum weft_dtype dtype = WEFT_F32;
    char text[64];
    rc = open_array(path, &a);
    if (rc == 0 && a.ndim < 1)
        rc = weft_error_set(WEFT_ERR_IO, "%s: shape (); expected at least one dimension (the "
                                         "samples)", path);
    if (rc == 0 && a.ndim > WEFT_MAX_DIMS)
        rc = weft_error_set(WEFT_ERR_IO, "%s: shape %s has %d dimensions; weft reads at most %d "
                                         "(samples of rank %d)",
                            path, shape_text(&a, text, sizeof text), a.ndim, WEFT_MAX_DIMS,
                            WEFT_MAX_DIMS - 1);
    if (rc == 0)
        rc = features_dtype(o, &a, &dtype);
    struct npy_ctx *c = NULL;
    if (rc == 0 && !(c = calloc(1, sizeof *c)))
        rc = weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "npy reader: out of memory");
    if (rc < 0) {
        io_map_close(&a.map);
        return rc;
    }
    c->map = a.map;
    c->data = a.data;
    c->item = a.type->size;
    c->swap = a.swap;
    c->fortran = a.fortran && a.ndim > 1;
    c->nsamples = a.shape[0];
    c->sample_ndim = a.ndim - 1;
    c->sample_numel = 1;
    for (int d = 1; d < a.ndim; d++) {
        c->sample_shape[d - 1] = a.shape[d];
        c->sample_numel *= a.shape[d];
    }
    if (has_labels) {
        rc = load_labels(labels_path, c->nsamples, path, &num_classes, &c->labels);
        if (rc < 0) {
            npy_close(c);
            return rc;
        }
    }
    info->length = c->nsamples;
    info->nfields = 1;
    struct weft_dataset_field *fd = &info->fields[0];
    snprintf(fd->name, sizeof fd->name, "features");
    fd->dtype = dtype;
    fd->ndim = c->sample_ndim;
    memcpy(fd->shape, c->sample_shape, sizeof c->sample_shape);
    if (has_labels) {
        fd = &info->fields[info->nfields++];
        snprintf(fd->name, sizeof fd->name, "label");
        fd->dtype = WEFT_I64;
        fd->num_classes = num_classes;
    }
    *out = c;
    return 0;
}

/* Copies sample i of a Fortran-order array into C order. Element (i, j1, ..., jk) sits
 * at i + N*(j1 + d1*(j2 + d2*(...))), so the sample's dims have strides N, N*d1, ...
 * in elements; an odometer walks them in C order. */
static void read_fortran(const struct npy_ctx *c, int64_t i, unsigned char *dst)
{
    int k = c->sample_ndim;
    int64_t stride[WEFT_MAX_DIMS], pos[WEFT_MAX_DIMS] = {0};
    int64_t s = c->nsamples;
    for (int d = 0; d < k; d++) {
        stride[d] = s;
        s *= c->sample_shape[d];
    }
    int64_t offset = i;
    for (int64_t e = 0; e < c->sample_numel; e++) {
        io_copy_item(dst + (size_t)e * c->item, c->data + (size_t)offset * c->item, c->item,
                     c->swap);
        for (int d = k - 1; d >= 0; d--) {
            offset += stride[d];
            if (++pos[d] < c->sample_shape[d])
                break;
            offset -= stride[d] * pos[d];
            pos[d] = 0;
        }
    }
}

static int npy_read(void *ctx, int64_t n, const int64_t *indices, void *const *buffers)
{
    const struct npy_ctx *c = ctx;
    unsigned char *out = buffers[0];
    size_t sample_bytes = (size_t)c->sample_numel * c->item;
    for (int64_t k = 0; k < n; k++) {
        unsigned char *dst = out + (size_t)k * sample_bytes;
        if (c->fortran) {
            read_fortran(c, indices[k], dst);
            continue;
        }
        memcpy(dst, c->data + (size_t)indices[k] * sample_bytes, sample_bytes);
        if (c->swap)
            io_swap_bytes(dst, (size_t)c->sample_numel, c->item);
    }
    if (c->labels) {
        int64_t *labels = buffers[1];
        for (int64_t k = 0; k < n; k++)
            labels[k] = c->labels[indices[k]];
    }
    return 0;
}

const struct weft_dataset_reader io_npy_reader = {
    .base = WEFT_VTABLE(WEFT_KIND_READER, "npy", struct weft_dataset_reader),
    .description = "NumPy .npy arrays (versions 1-3, any byte order, C or Fortran order), "
                   "memory-mapped",
    .open = npy_open,
    .read = npy_read,
    .close = npy_close,
};
