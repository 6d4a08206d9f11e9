/* train/safetensors.c: safetensors files (checkpoint.h).
 *
 * The format is defined by the Python/Rust `safetensors` library (safetensors/src/
 * tensor.rs). The writer mirrors its `prepare`: entries sorted by descending dtype
 * alignment (the order of its Dtype enum) then by name, "__metadata__" first, compact
 * JSON, header padded with spaces to a multiple of 8. The reader mirrors its
 * `read_metadata` and `validate`, with stricter JSON (duplicate keys, unknown fields)
 * and messages that say where the file is wrong.
 */
#include "weft/checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "json.h"
#include "weft.h"
#include "weft/file.h"

/* Tensor data is stored little-endian; weft only targets little-endian hosts, where the
 * bytes of a tensor are written as they are in memory. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "safetensors.c writes tensors as they are in memory: little-endian hosts only");

/* ---- small helpers ------------------------------------------------------------------ */


static bool valid_utf8(const char *s)
{
    size_t n = strlen(s);
    return weft_utf8_invalid_at(s, n) == n;
}

/* ---- dtypes ------------------------------------------------------------------------- */

/* The safetensors Dtype enum in its declaration order, which is its alignment order: the
 * writer sorts by descending position here. `weft` is -1 where weft has no such dtype. */
static const struct {
    const char *name;
    int weft;
} st_dtypes[] = {
    {"BOOL", WEFT_BOOL}, {"F4", -1},          {"F6_E2M3", -1},     {"F6_E3M2", -1},
    {"U8", WEFT_U8},     {"I8", WEFT_I8},     {"F8_E5M2", -1},     {"F8_E4M3", -1},
    {"F8_E8M0", -1},     {"F8_E4M3FNUZ", -1}, {"F8_E5M2FNUZ", -1}, {"I16", WEFT_I16},
    {"U16", -1},         {"F16", WEFT_F16},   {"BF16", WEFT_BF16}, {"I32", WEFT_I32},
    {"U32", -1},         {"F32", WEFT_F32},   {"C64", -1},         {"F64", WEFT_F64},
    {"I64", WEFT_I64},   {"U64", -1},
};
#define ST_DTYPE_COUNT (sizeof st_dtypes / sizeof st_dtypes[0])

static int st_rank(enum weft_dtype dt)
{
    for (size_t i = 0; i < ST_DTYPE_COUNT; i++)
        if (st_dtypes[i].weft == (int)dt)
            return (int)i;
    return -1;
}

const char *weft_safetensors_dtype_name(enum weft_dtype dt)
{
    int r = st_rank(dt);
    return r < 0 ? "invalid" : st_dtypes[r].name;
}

static int st_lookup(const char *name)
{
    for (size_t i = 0; i < ST_DTYPE_COUNT; i++)
        if (strcmp(st_dtypes[i].name, name) == 0)
            return (int)i;
    return -1;
}

#define WEFT_READABLE_DTYPES "BOOL, U8, I8, I16, I32, I64, F16, BF16, F32, F64"

/* ---- save --------------------------------------------------------------------------- */

struct out_entry {
    const char *name;
    weft_tensor *tensor;
    int rank;
    uint64_t nbytes;
};

/* Descending dtype alignment, then names bytewise (Rust's str ordering). */
static int out_entry_cmp(const void *pa, const void *pb)
{
    const struct out_entry *a = pa, *b = pb;
    if (a->rank != b->rank)
        return a->rank > b->rank ? -1 : 1;
    return strcmp(a->name, b->name);
}

static int check_save_inputs(const char *path, const struct weft_tensor_dict *dict,
                             const struct weft_metadata *metadata)
{
    if (!path || !dict)
        return weft_error_set(WEFT_ERR_VALUE,
                              "weft_safetensors_save: the path or the dict is NULL");
    for (size_t i = 0; i < weft_tensor_dict_len(dict); i++) {
        const char *name = weft_tensor_dict_name(dict, i);
        const weft_tensor *t = weft_tensor_dict_at(dict, i);
        if (strcmp(name, "__metadata__") == 0)
            return weft_error_set(WEFT_ERR_VALUE,
                                  "%s: a tensor cannot be named '__metadata__' (the key is "
                                  "reserved for the metadata map)",
                                  path);
        if (!valid_utf8(name))
            return weft_error_set(WEFT_ERR_VALUE, "%s: tensor name '%s' is not valid UTF-8",
                                  path, name);
        if (t->layout != WEFT_LAYOUT_STRIDED)
            return weft_error_set(WEFT_ERR_VALUE,
                                  "%s: tensor '%s' has a sparse layout; safetensors stores "
                                  "strided tensors only (convert it to dense first)",
                                  path, name);
        if (st_rank(t->dtype) < 0)
            return weft_error_set(WEFT_ERR_TYPE, "%s: tensor '%s' has the invalid dtype %d", path,
                                  name, (int)t->dtype);
    }
    for (size_t i = 0; i < weft_metadata_len(metadata); i++)
        if (!valid_utf8(weft_metadata_key(metadata, i)) ||
            !valid_utf8(weft_metadata_value(metadata, i)))
            return weft_error_set(WEFT_ERR_VALUE,
                                  "%s: metadata key '%s' or its value is not valid UTF-8", path,
                                  weft_metadata_key(metadata, i));
    return 0;
}

static void append_shape(struct weft_json_buf *b, const weft_tensor *t)
{
    weft_json_buf_char(b, '[');
    for (int d = 0; d < t->ndim; d++) {
        if (d > 0)
            weft_json_buf_char(b, ',');
        weft_json_buf_uint(b, (uint64_t)t->shape[d]);
    }
    weft_json_buf_char(b, ']');
}

/* The header exactly as safetensors' prepare() makes it, spaces included. */
static int build_header(const char *path, const struct out_entry *e, size_t n,
                        const struct weft_metadata *metadata, struct weft_json_buf *b)
{
    weft_json_buf_char(b, '{');
    if (metadata) {
        weft_json_buf_string(b, "__metadata__");
        weft_json_buf_append(b, ":{", 2);
        for (size_t i = 0; i < weft_metadata_len(metadata); i++) {
            if (i > 0)
                weft_json_buf_char(b, ',');
            weft_json_buf_string(b, weft_metadata_key(metadata, i));
            weft_json_buf_char(b, ':');
            weft_json_buf_string(b, weft_metadata_value(metadata, i));
        }
        weft_json_buf_char(b, '}');
    }
    uint64_t offset = 0;
    for (size_t i = 0; i < n; i++) {
        if (i > 0 || metadata)
            weft_json_buf_char(b, ',');
        weft_json_buf_string(b, e[i].name);
        weft_json_buf_append(b, ":{\"dtype\":", 10);
        weft_json_buf_string(b, st_dtypes[e[i].rank].name);
        weft_json_buf_append(b, ",\"shape\":", 9);
        append_shape(b, e[i].tensor);
        weft_json_buf_append(b, ",\"data_offsets\":[", 17);
        weft_json_buf_uint(b, offset);
        weft_json_buf_char(b, ',');
        offset += e[i].nbytes;
        weft_json_buf_uint(b, offset);
        weft_json_buf_append(b, "]}", 2);
    }
    weft_json_buf_char(b, '}');
    /* (after a failed allocation the buffer takes nothing more: do not wait for it) */
    while (!b->failed && b->len % 8 != 0)
        weft_json_buf_char(b, ' ');
    if (b->failed)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "%s: out of host memory for the header",
                              path);
    return 0;
}

static int io_error(const char *path, const char *what, const char *file, int err)
{
    return weft_error_set(WEFT_ERR_IO, "%s: %s '%s' failed: %s", path, what, file, strerror(err));
}

/* Writes one tensor's values, contiguous, from any device. */
static int write_tensor(const char *path, const char *tmp, FILE *f, const struct out_entry *e)
{
    if (e->nbytes == 0)
        return 0;
    const weft_tensor *t = e->tensor;
    void *copy = NULL;
    const void *data = weft_tensor_data(t);
    if (t->device.type != WEFT_DEVICE_CPU || !weft_tensor_is_contiguous(t)) {
        copy = malloc(e->nbytes);
        if (!copy)
            return weft_error_set(WEFT_ERR_OUT_OF_MEMORY,
                                  "%s: out of host memory for the %" PRIu64
                                  " bytes of tensor '%s'",
                                  path, e->nbytes, e->name);
        if (weft_tensor_read(t, copy, e->nbytes) != 0) {
            free(copy);
            return weft_error_code();
        }
        data = copy;
    }
    int rc = 0;
    if (fwrite(data, 1, e->nbytes, f) != e->nbytes)
        rc = io_error(path, "writing", tmp, errno);
    free(copy);
    return rc;
}

static int write_file(const char *path, const char *tmp, FILE *f,
                      const struct weft_json_buf *header, const struct out_entry *e, size_t n)
{
    uint8_t len[8];
    for (int i = 0; i < 8; i++)
        len[i] = (uint8_t)((uint64_t)header->len >> (8 * i));
    if (fwrite(len, 1, 8, f) != 8 || fwrite(header->data, 1, header->len, f) != header->len ||
        fflush(f) != 0)
        return io_error(path, "writing", tmp, errno);
    weft_test_crash_point("safetensors.partial");
    for (size_t i = 0; i < n; i++)
        if (write_tensor(path, tmp, f, &e[i]) != 0)
            return weft_error_code();
    if (fflush(f) != 0)
        return io_error(path, "writing", tmp, errno);
    if (fsync(fileno(f)) != 0)
        return io_error(path, "fsync of", tmp, errno);
    return 0;
}

/* fsync of the directory holding path, so the rename itself is durable. Filesystems
 * that cannot sync a directory (EINVAL) are not an error. */
static int sync_directory(const char *path)
{
    char *dir = weft_strdup(path);
    if (!dir)
        return WEFT_ERR_OUT_OF_MEMORY;
    char *slash = strrchr(dir, '/');
    if (!slash)
        strcpy(dir, ".");
    else
        slash[slash == dir ? 1 : 0] = '\0';
    int rc = 0;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || (fsync(fd) != 0 && errno != EINVAL))
        rc = io_error(path, "fsync of the directory", dir, errno);
    if (fd >= 0)
        close(fd);
    free(dir);
    return rc;
}

/* Writes the temporary file and renames it over path; removes it on any failure. */
static int save_atomically(const char *path, const struct weft_json_buf *header,
                           const struct out_entry *e, size_t n)
{
    char *tmp = malloc(strlen(path) + 32);
    if (!tmp)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory for a file name");
    sprintf(tmp, "%s.tmp.%ld", path, (long)getpid());
    int rc = 0;
    FILE *f = NULL;
    /* A fresh file, never one reached through whatever sits at the predictable name
     * (a stale temporary file of a crashed save, or a planted link). */
    unlink(tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0) {
        rc = io_error(path, "creating the temporary file", tmp, errno);
        goto out;
    }
    f = fdopen(fd, "wb");
    if (!f) {
        rc = io_error(path, "opening", tmp, errno);
        close(fd);
        goto fail;
    }
    rc = write_file(path, tmp, f, header, e, n);
    int closed = fclose(f);
    if (rc == 0 && closed != 0)
        rc = io_error(path, "closing", tmp, errno);
    if (rc != 0)
        goto fail;
    weft_test_crash_point("safetensors.written");
    if (rename(tmp, path) != 0) {
        rc = weft_error_set(WEFT_ERR_IO, "%s: renaming '%s' to '%s' failed: %s", path, tmp, path,
                            strerror(errno));
        goto fail;
    }
    weft_test_crash_point("safetensors.renamed");
    rc = sync_directory(path);
    goto out;
fail:
    unlink(tmp);
out:
    free(tmp);
    return rc;
}

/* The dict's tensors are references recorded in a scope of the caller's. */
static int save_entries(const char *path, const struct weft_tensor_dict *dict,
                        const struct weft_metadata *metadata)
{
    if (check_save_inputs(path, dict, metadata) != 0)
        return weft_error_code();
    size_t n = weft_tensor_dict_len(dict);
    struct out_entry *e = calloc(n ? n : 1, sizeof *e);
    if (!e)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory for %zu entries", n);
    for (size_t i = 0; i < n; i++) {
        weft_tensor *t = weft_tensor_dict_at(dict, i);
        e[i] = (struct out_entry){weft_tensor_dict_name(dict, i), t, st_rank(t->dtype),
                                  (uint64_t)weft_tensor_numel(t) * weft_tensor_itemsize(t)};
    }
    qsort(e, n, sizeof *e, out_entry_cmp);
    struct weft_json_buf header = {0};
    int rc = build_header(path, e, n, metadata, &header);
    if (rc == 0)
        rc = save_atomically(path, &header, e, n);
    weft_json_buf_free(&header);
    free(e);
    return rc;
}

int weft_safetensors_save(const char *path, const struct weft_tensor_dict *dict,
                          const struct weft_metadata *metadata)
{
    weft_scope_push();
    int rc = save_entries(path, dict, metadata);
    weft_scope_pop();
    return rc;
}

/* ---- load --------------------------------------------------------------------------- */

struct st_entry {
    char *name;
    size_t at;      /* header position of the name, for messages */
    int st_dtype;   /* index into st_dtypes */
    int ndim;
    int64_t shape[WEFT_MAX_DIMS];
    uint64_t begin, end;
};

struct loader {
    const char *path;
    int fd;
    uint64_t file_size, header_len;
    char *header;
    struct weft_json json;
    struct st_entry *v;
    size_t n, cap;
    struct weft_metadata *names; /* the tensor names seen so far, as a set (values "") */
    struct weft_metadata *metadata;
    bool seen_metadata;
};

/* Sets "<path>: <message>" and returns code. */
static int fail(const struct loader *L, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(const struct loader *L, int code, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return weft_error_set(code, "%s: %s", L->path, msg);
}

static int json_error(const struct loader *L)
{
    /* the parser's only failure that is not the file's fault (train/json.c) */
    if (strncmp(L->json.error, "out of memory", 13) == 0)
        return fail(L, WEFT_ERR_OUT_OF_MEMORY, "reading the header: %s", L->json.error);
    return fail(L, WEFT_ERR_VALUE, "invalid JSON at byte %zu of the header: %s",
                L->json.error_at, L->json.error);
}

/* The next value is not what `what` must be: a JSON error when it is not even a value. */
static int unexpected(struct loader *L, const char *tensor, const char *what,
                      const char *expected)
{
    struct weft_json *j = &L->json;
    if (j->failed)
        return json_error(L);
    const char *kind = weft_json_peek_kind(j);
    size_t at = j->pos;
    if (strcmp(kind, "an invalid token") == 0 || strcmp(kind, "the end of the text") == 0) {
        weft_json_fail(j, at, "unexpected %s",
                       at < j->len ? "character" : "end of the header");
        return json_error(L);
    }
    if (tensor)
        return fail(L, WEFT_ERR_VALUE,
                    "tensor '%s': %s must be %s, found %s at byte %zu of the header", tensor,
                    what, expected, kind, at);
    return fail(L, WEFT_ERR_VALUE, "%s must be %s, found %s at byte %zu of the header", what,
                expected, kind, at);
}

/* A string that will become a C string: no NUL inside. */
static int check_no_nul(const struct loader *L, const char *s, size_t len, size_t at,
                        const char *what)
{
    if (strlen(s) == len)
        return 0;
    return fail(L, WEFT_ERR_VALUE, "%s at byte %zu of the header contains a NUL character", what,
                at);
}

static int read_uint(struct loader *L, const struct st_entry *e, const char *field, int i,
                     uint64_t *out)
{
    struct weft_json *j = &L->json;
    size_t at = weft_json_skip_ws(j);
    int rc = weft_json_uint(j, out);
    if (rc == 0)
        return 0;
    if (rc == -1)
        return json_error(L);
    char what[64];
    snprintf(what, sizeof what, "%s[%d]", field, i);
    if (j->pos == at)
        return unexpected(L, e->name, what, "a non-negative integer");
    int shown = j->pos - at > 40 ? 40 : (int)(j->pos - at);
    return fail(L, WEFT_ERR_VALUE,
                "tensor '%s': %s must be a non-negative integer below 2^64, found %.*s at "
                "byte %zu of the header",
                e->name, what, shown, j->text + at, at);
}

static int parse_dtype(struct loader *L, struct st_entry *e)
{
    struct weft_json *j = &L->json;
    size_t at = weft_json_skip_ws(j);
    char *name;
    size_t len;
    int rc = weft_json_string(j, &name, &len);
    if (rc == -2)
        return unexpected(L, e->name, "dtype", "a string such as \"F32\"");
    if (rc != 0)
        return json_error(L);
    e->st_dtype = strlen(name) == len ? st_lookup(name) : -1;
    if (e->st_dtype < 0)
        rc = fail(L, WEFT_ERR_VALUE,
                  "tensor '%s': unknown dtype '%s' at byte %zu of the header (safetensors "
                  "dtypes are BOOL, U8, I8, I16, U16, I32, U32, I64, U64, F16, BF16, F32, F64, "
                  "C64 and F8/F6/F4 variants)",
                  e->name, name, at);
    else if (st_dtypes[e->st_dtype].weft < 0)
        rc = fail(L, WEFT_ERR_TYPE,
                  "tensor '%s': dtype %s is not supported by weft (it reads " WEFT_READABLE_DTYPES
                  ")",
                  e->name, name);
    free(name);
    return rc;
}

static int parse_shape(struct loader *L, struct st_entry *e)
{
    struct weft_json *j = &L->json;
    if (!weft_json_accept(j, '['))
        return unexpected(L, e->name, "shape", "an array of non-negative integers");
    bool first = true;
    int rc;
    while ((rc = weft_json_array_next(j, &first)) == 1) {
        if (e->ndim == WEFT_MAX_DIMS)
            return fail(L, WEFT_ERR_VALUE,
                        "tensor '%s': shape has more than %d dimensions, which weft does not "
                        "support",
                        e->name, WEFT_MAX_DIMS);
        uint64_t size;
        if (read_uint(L, e, "shape", e->ndim, &size) != 0)
            return weft_error_code();
        if (size > INT64_MAX)
            return fail(L, WEFT_ERR_VALUE, "tensor '%s': shape[%d] = %" PRIu64 " is too large",
                        e->name, e->ndim, size);
        e->shape[e->ndim++] = (int64_t)size;
    }
    return rc < 0 ? json_error(L) : 0;
}

static int parse_offsets(struct loader *L, struct st_entry *e)
{
    struct weft_json *j = &L->json;
    if (!weft_json_accept(j, '['))
        return unexpected(L, e->name, "data_offsets", "an array [begin, end]");
    uint64_t v[2];
    bool first = true;
    int count = 0, rc;
    while ((rc = weft_json_array_next(j, &first)) == 1) {
        if (count == 2)
            return fail(L, WEFT_ERR_VALUE,
                        "tensor '%s': data_offsets must be [begin, end], found more than 2 values",
                        e->name);
        if (read_uint(L, e, "data_offsets", count, &v[count]) != 0)
            return weft_error_code();
        count++;
    }
    if (rc < 0)
        return json_error(L);
    if (count != 2)
        return fail(L, WEFT_ERR_VALUE,
                    "tensor '%s': data_offsets must be [begin, end], found %d value%s", e->name,
                    count, count == 1 ? "" : "s");
    e->begin = v[0];
    e->end = v[1];
    return 0;
}

/* One "name": {"dtype": ..., "shape": [...], "data_offsets": [b, e]} entry; the name
 * was read. */
static int parse_entry(struct loader *L, struct st_entry *e)
{
    struct weft_json *j = &L->json;
    if (!weft_json_accept(j, '{'))
        return unexpected(L, e->name, "its entry", "an object with dtype, shape and data_offsets");
    static const char *const fields[] = {"dtype", "shape", "data_offsets"};
    bool seen[3] = {false, false, false};
    bool first = true;
    for (;;) {
        char *key;
        size_t len, at;
        int rc = weft_json_object_next(j, &first, &key, &len, &at);
        if (rc < 0)
            return json_error(L);
        if (rc == 0)
            break;
        int f = 0;
        while (f < 3 && strcmp(key, fields[f]) != 0)
            f++;
        if (f == 3 || seen[f]) {
            rc = fail(L, WEFT_ERR_VALUE,
                      f == 3 ? "tensor '%s': unknown field '%s' at byte %zu of the header "
                               "(expected dtype, shape and data_offsets)"
                             : "tensor '%s': duplicate key '%s' at byte %zu of the header",
                      e->name, key, at);
            free(key);
            return rc;
        }
        free(key);
        seen[f] = true;
        rc = f == 0 ? parse_dtype(L, e) : f == 1 ? parse_shape(L, e) : parse_offsets(L, e);
        if (rc != 0)
            return rc;
    }
    for (int f = 0; f < 3; f++)
        if (!seen[f])
            return fail(L, WEFT_ERR_VALUE,
                        "tensor '%s': missing field '%s' in its entry at byte %zu of the header",
                        e->name, fields[f], e->at);
    return 0;
}

/* One "key": "value" member of __metadata__; the key (at byte `at`) was read. */
static int parse_metadata_member(struct loader *L, const char *key, size_t klen, size_t at)
{
    struct weft_json *j = &L->json;
    if (check_no_nul(L, key, klen, at, "a __metadata__ key") != 0)
        return weft_error_code();
    if (weft_metadata_get(L->metadata, key))
        return fail(L, WEFT_ERR_VALUE,
                    "duplicate key '%s' in __metadata__ at byte %zu of the header", key, at);
    size_t vat = weft_json_skip_ws(j);
    char *value;
    size_t vlen;
    int rc = weft_json_string(j, &value, &vlen);
    if (rc == -2) {
        char what[160];
        snprintf(what, sizeof what, "__metadata__ value of '%.100s'", key);
        return unexpected(L, NULL, what, "a string");
    }
    if (rc != 0)
        return json_error(L);
    rc = check_no_nul(L, value, vlen, vat, "a __metadata__ value");
    if (rc == 0)
        rc = weft_metadata_set(L->metadata, key, value);
    free(value);
    return rc;
}

static int parse_metadata(struct loader *L, size_t key_at)
{
    struct weft_json *j = &L->json;
    if (L->seen_metadata)
        return fail(L, WEFT_ERR_VALUE, "duplicate key '__metadata__' at byte %zu of the header",
                    key_at);
    L->seen_metadata = true;
    if (!weft_json_accept(j, '{'))
        return unexpected(L, NULL, "__metadata__", "an object of strings");
    bool first = true;
    for (;;) {
        char *key;
        size_t klen, at;
        int rc = weft_json_object_next(j, &first, &key, &klen, &at);
        if (rc <= 0)
            return rc < 0 ? json_error(L) : 0;
        rc = parse_metadata_member(L, key, klen, at);
        free(key);
        if (rc != 0)
            return rc;
    }
}

/* Takes ownership of name. */
static int add_entry(struct loader *L, char *name, size_t at)
{
    if (weft_metadata_get(L->names, name)) {
        int rc = fail(L, WEFT_ERR_VALUE, "duplicate key '%s' at byte %zu of the header", name, at);
        free(name);
        return rc;
    }
    if (weft_grow((void **)&L->v, &L->cap, L->n + 1, sizeof *L->v) != 0 ||
        weft_metadata_set(L->names, name, "") != 0) {
        free(name);
        return weft_error_code();
    }
    struct st_entry *e = &L->v[L->n++];
    memset(e, 0, sizeof *e);
    e->name = name;
    e->at = at;
    return parse_entry(L, e);
}

static int parse_header(struct loader *L)
{
    struct weft_json *j = &L->json;
    weft_json_init(j, L->header, L->header_len);
    size_t bad = weft_utf8_invalid_at(L->header, L->header_len);
    if (bad < L->header_len)
        return fail(L, WEFT_ERR_VALUE, "the header is not valid UTF-8 at byte %zu", bad);
    if (L->header[0] != '{')
        return fail(L, WEFT_ERR_VALUE,
                    "the header must be a JSON object starting with '{', but it starts with "
                    "byte 0x%02x",
                    (unsigned char)L->header[0]);
    weft_json_expect(j, '{');
    bool first = true;
    for (;;) {
        char *key;
        size_t len, at;
        int rc = weft_json_object_next(j, &first, &key, &len, &at);
        if (rc < 0)
            return json_error(L);
        if (rc == 0)
            break;
        if (check_no_nul(L, key, len, at, "a tensor name") != 0) {
            free(key);
            return weft_error_code();
        }
        if (strcmp(key, "__metadata__") == 0) {
            free(key);
            rc = parse_metadata(L, at);
        } else {
            rc = add_entry(L, key, at);
        }
        if (rc != 0)
            return rc;
    }
    size_t end = weft_json_skip_ws(j);
    if (end != j->len)
        return fail(L, WEFT_ERR_VALUE,
                    "invalid JSON at byte %zu of the header: unexpected '%c' after the header "
                    "object (only spaces may follow it)",
                    end, j->text[end]);
    return 0;
}

static const char *entry_dtype(const struct st_entry *e)
{
    return st_dtypes[e->st_dtype].name;
}

static int entry_offset_cmp(const void *pa, const void *pb)
{
    const struct st_entry *a = *(const struct st_entry *const *)pa;
    const struct st_entry *b = *(const struct st_entry *const *)pb;
    if (a->begin != b->begin)
        return a->begin < b->begin ? -1 : 1;
    if (a->end != b->end)
        return a->end < b->end ? -1 : 1;
    return a->at < b->at ? -1 : a->at > b->at;
}

/* Bytes the shape and dtype need, or an error when that overflows. */
static int entry_nbytes(const struct loader *L, const struct st_entry *e, uint64_t *out)
{
    uint64_t n = weft_dtype_size((enum weft_dtype)st_dtypes[e->st_dtype].weft);
    bool overflow = false;
    for (int d = 0; d < e->ndim; d++)
        overflow |= __builtin_mul_overflow(n, (uint64_t)e->shape[d], &n);
    char shape[160];
    if (overflow || n / weft_dtype_size((enum weft_dtype)st_dtypes[e->st_dtype].weft) > INT64_MAX)
        return fail(L, WEFT_ERR_VALUE, "tensor '%s': shape %s of %s is too large", e->name,
                    weft_shape_str(e->ndim, e->shape, shape, sizeof shape), entry_dtype(e));
    *out = n;
    return 0;
}

static int check_entry_span(const struct loader *L, const struct st_entry *e,
                            const struct st_entry *prev, uint64_t start)
{
    uint64_t need = 0;
    char shape[160];
    if (e->end < e->begin)
        return fail(L, WEFT_ERR_VALUE,
                    "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] end before they begin",
                    e->name, e->begin, e->end);
    if (e->begin > start)
        return fail(L, WEFT_ERR_VALUE,
                    "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] leave a hole of %" PRIu64
                    " bytes after %s%s%s (the data must be tiled without gaps)",
                    e->name, e->begin, e->end, e->begin - start,
                    prev ? "tensor '" : "the start of the data", prev ? prev->name : "",
                    prev ? "'" : "");
    if (e->begin < start)
        return fail(L, WEFT_ERR_VALUE,
                    "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                    "] overlap tensor '%s', which ends at %" PRIu64,
                    e->name, e->begin, e->end, prev->name, start);
    if (entry_nbytes(L, e, &need) != 0)
        return weft_error_code();
    if (e->end - e->begin != need)
        return fail(L, WEFT_ERR_VALUE,
                    "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] span %" PRIu64
                    " bytes but shape %s of %s needs %" PRIu64,
                    e->name, e->begin, e->end, e->end - e->begin,
                    weft_shape_str(e->ndim, e->shape, shape, sizeof shape), entry_dtype(e), need);
    return 0;
}

/* Offsets sorted by (begin, end) must tile [0, data length) exactly, and the file must
 * end where the data does. */
static int validate_offsets(const struct loader *L)
{
    const struct st_entry **order = malloc((L->n ? L->n : 1) * sizeof *order);
    if (!order)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory for %zu entries", L->n);
    for (size_t i = 0; i < L->n; i++)
        order[i] = &L->v[i];
    qsort(order, L->n, sizeof *order, entry_offset_cmp);
    uint64_t start = 0;
    int rc = 0;
    for (size_t i = 0; i < L->n && rc == 0; i++) {
        rc = check_entry_span(L, order[i], i ? order[i - 1] : NULL, start);
        start = order[i]->end;
    }
    free(order);
    if (rc != 0)
        return rc;
    uint64_t data_start = 8 + L->header_len, expected;
    if (__builtin_add_overflow(data_start, start, &expected) || expected > L->file_size)
        return fail(L, WEFT_ERR_VALUE,
                    "the file is truncated: it is %" PRIu64 " bytes, but its %" PRIu64
                    " bytes of tensor data start at byte %" PRIu64,
                    L->file_size, start, data_start);
    if (expected < L->file_size)
        return fail(L, WEFT_ERR_VALUE,
                    "the file is %" PRIu64 " bytes, but its tensor data ends at byte %" PRIu64
                    " (%" PRIu64 " unexpected bytes follow the last tensor)",
                    L->file_size, expected, L->file_size - expected);
    return 0;
}

static int read_at(const struct loader *L, void *buf, uint64_t n, uint64_t offset)
{
    char *p = buf;
    while (n > 0) {
        ssize_t r = pread(L->fd, p, n > (1u << 30) ? (1u << 30) : n, (off_t)offset);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return fail(L, WEFT_ERR_IO, "reading at byte %" PRIu64 " failed: %s", offset,
                        strerror(errno));
        if (r == 0)
            return fail(L, WEFT_ERR_IO,
                        "unexpected end of file at byte %" PRIu64 " (was it changed while "
                        "being read?)",
                        offset);
        p += r;
        n -= (uint64_t)r;
        offset += (uint64_t)r;
    }
    return 0;
}

/* Opens the file and reads its header, bounded by the file size and the limit. */
static int read_header(struct loader *L)
{
    L->fd = weft_open_regular_file(L->path, NULL); /* a FIFO is refused, never waited on */
    if (L->fd < 0)
        return weft_error_code();
    struct stat st;
    if (fstat(L->fd, &st) != 0)
        return fail(L, WEFT_ERR_IO, "fstat failed: %s", strerror(errno));
    L->file_size = (uint64_t)st.st_size;
    if (L->file_size < 8)
        return fail(L, WEFT_ERR_VALUE,
                    "the file is %" PRIu64 " bytes, too short for the 8-byte header length",
                    L->file_size);
    uint8_t len[8];
    if (read_at(L, len, 8, 0) != 0)
        return weft_error_code();
    for (int i = 7; i >= 0; i--)
        L->header_len = (L->header_len << 8) | len[i];
    if (L->header_len > L->file_size - 8)
        return fail(L, WEFT_ERR_VALUE,
                    "header length %" PRIu64 " exceeds the file size (%" PRIu64 " bytes)",
                    L->header_len, L->file_size);
    if (L->header_len > WEFT_SAFETENSORS_MAX_HEADER)
        return fail(L, WEFT_ERR_VALUE, "header length %" PRIu64 " exceeds the limit of %u bytes",
                    L->header_len, WEFT_SAFETENSORS_MAX_HEADER);
    if (L->header_len == 0)
        return fail(L, WEFT_ERR_VALUE, "the header is empty (expected a JSON object)");
    L->header = malloc(L->header_len + 1);
    if (!L->header)
        return fail(L, WEFT_ERR_OUT_OF_MEMORY, "out of host memory for a %" PRIu64 "-byte header",
                    L->header_len);
    L->header[L->header_len] = '\0';
    return read_at(L, L->header, L->header_len, 8);
}

/* Every entry as a new tensor on device, in header order. Runs inside a scope. */
static int read_tensors(const struct loader *L, weft_device device, struct weft_tensor_dict *d)
{
    for (size_t i = 0; i < L->n; i++) {
        const struct st_entry *e = &L->v[i];
        enum weft_dtype dt = (enum weft_dtype)st_dtypes[e->st_dtype].weft;
        weft_tensor *t = weft_empty(e->ndim, e->shape, dt, WEFT_CPU);
        if (!t)
            return weft_error_code();
        uint64_t nbytes = e->end - e->begin;
        if (nbytes > 0 && read_at(L, weft_tensor_data(t), nbytes, 8 + L->header_len + e->begin))
            return weft_error_code();
        if (device.type != WEFT_DEVICE_CPU && !(t = weft_to_device(t, device)))
            return weft_error_code();
        if (weft_tensor_dict_add(d, e->name, t) != 0)
            return weft_error_code();
    }
    return 0;
}

static void loader_free(struct loader *L)
{
    if (L->fd >= 0)
        close(L->fd);
    free(L->header);
    for (size_t i = 0; i < L->n; i++)
        free(L->v[i].name);
    free(L->v);
    weft_metadata_free(L->names);
    weft_metadata_free(L->metadata);
}

int weft_safetensors_load(const char *path, weft_device device, struct weft_tensor_dict **dict,
                          struct weft_metadata **metadata)
{
    if (dict)
        *dict = NULL;
    if (metadata)
        *metadata = NULL;
    if (!path)
        return weft_error_set(WEFT_ERR_VALUE, "weft_safetensors_load: the path is NULL");
    struct loader L = {.path = path, .fd = -1};
    struct weft_tensor_dict *d = NULL;
    int rc = 0;
    if (!(L.metadata = weft_metadata_new()) || !(L.names = weft_metadata_new()) ||
        read_header(&L) != 0 || parse_header(&L) != 0 ||
        validate_offsets(&L) != 0) {
        rc = weft_error_code();
        goto out;
    }
    if (dict) {
        if (!(d = weft_tensor_dict_new())) {
            rc = weft_error_code();
            goto out;
        }
        weft_scope_push();
        rc = read_tensors(&L, device, d);
        weft_scope_pop();
        if (rc != 0) {
            weft_tensor_dict_free(d);
            goto out;
        }
        *dict = d;
    }
    if (metadata) {
        *metadata = L.metadata;
        L.metadata = NULL;
    }
out:
    loader_free(&L);
    return rc;
}
