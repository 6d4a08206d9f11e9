/* plugins/io/idx.c: the `idx` reader, for MNIST-style IDX files, raw or gzip'd.
 *
 * An IDX file is big-endian: a magic 0x0000TTNN (TT the element type, NN the number of
 * dimensions), NN sizes as u32, then the elements in C order. The images file's first
 * size is the number of samples; the labels file is one-dimensional with as many
 * entries. Both files are validated completely and loaded once (the shipped MNIST
 * subset is 6 MB), so read() is a copy.
 *
 * Keys: images (required), labels (optional), num_classes (default 10).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io.h"

struct idx_type {
    unsigned code;
    enum weft_dtype dtype;
    const char *name;
};

static const struct idx_type idx_types[] = {
    {0x08, WEFT_U8, "uint8"},    {0x09, WEFT_I8, "int8"},     {0x0B, WEFT_I16, "int16"},
    {0x0C, WEFT_I32, "int32"},   {0x0D, WEFT_F32, "float32"}, {0x0E, WEFT_F64, "float64"},
};

#define IDX_MAGIC_HELP                                                                        \
    "expected an IDX magic 0x0000TTNN (TT the element type: 08 uint8, 09 int8, 0B int16, "   \
    "0C int32, 0D float32, 0E float64; NN the number of dimensions), e.g. 0x00000803 for "    \
    "MNIST images and 0x00000801 for MNIST labels"

/* One IDX file, loaded: elements in native byte order. */
struct idx_file {
    const struct idx_type *type;
    int ndim;
    int64_t dims[WEFT_MAX_DIMS];
    int64_t count;       /* elements */
    size_t sample_bytes; /* bytes per entry of the first dim */
    bool compressed;     /* offsets in messages count decompressed bytes */
    void *data;
};

struct idx_ctx {
    unsigned char *images;
    size_t image_bytes; /* per sample */
    int64_t *labels;    /* NULL without a labels file */
};

static const struct idx_type *find_type(unsigned code)
{
    for (size_t i = 0; i < sizeof idx_types / sizeof *idx_types; i++)
        if (idx_types[i].code == code)
            return &idx_types[i];
    return NULL;
}

/* Checks the magic for the file's role; max_ndim is the rank the role allows. */
static int check_magic(const char *path, const unsigned char m[4], bool labels,
                       const struct idx_type **type)
{
    uint32_t magic = io_be32(m);
    *type = find_type(m[2]);
    if (m[0] != 0 || m[1] != 0 || !*type || m[3] == 0)
        return weft_error_set(WEFT_ERR_IO, "%s: byte 0: bad magic 0x%08" PRIx32 ": %s", path,
                              magic, IDX_MAGIC_HELP);
    if (labels && m[3] != 1)
        return weft_error_set(WEFT_ERR_IO,
                              "%s: byte 0: magic 0x%08" PRIx32 " says %u dimensions; expected a "
                              "labels file with 1 dimension (magic 0x00000801)",
                              path, magic, m[3]);
    if (labels && !weft_dtype_is_integral((*type)->dtype))
        return weft_error_set(WEFT_ERR_IO,
                              "%s: byte 0: magic 0x%08" PRIx32 " says %s elements; expected "
                              "integer labels (type 08, 09, 0B or 0C)",
                              path, magic, (*type)->name);
    /* A 1-D file as images would be samples of rank 0: it is a labels file given as the
     * images (the model would meet scalars, and fail far from the cause). */
    if (!labels && m[3] == 1)
        return weft_error_set(WEFT_ERR_IO,
                              "%s: byte 0: magic 0x%08" PRIx32 " says 1 dimension: a labels file, "
                              "given as images; expected an images file with 2 or more "
                              "dimensions (samples, then each sample's shape)",
                              path, magic);
    /* The sample drops the first dim, and 2-D samples gain a channel dim. */
    if (!labels && m[3] > WEFT_MAX_DIMS)
        return weft_error_set(WEFT_ERR_IO,
                              "%s: byte 0: magic 0x%08" PRIx32 " says %u dimensions; weft "
                              "reads at most %d (samples of rank %d)",
                              path, magic, m[3], WEFT_MAX_DIMS, WEFT_MAX_DIMS - 1);
    return 0;
}

/* "60000 x 28 x 28" into buf. */
static const char *dims_text(const int64_t *dims, int ndim, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int d = 0; d < ndim && used < size; d++) {
        int w = snprintf(buf + used, size - used, "%s%lld", d ? " x " : "", (long long)dims[d]);
        if (w < 0)
            break;
        used += (size_t)w;
    }
    return buf;
}

static void native_order(struct idx_file *f)
{
    if (io_host_little_endian())
        io_swap_bytes(f->data, (size_t)f->count, weft_dtype_size(f->type->dtype));
}

/* Reads and validates a whole IDX file. */
static int load_idx(const char *path, bool labels, struct idx_file *f)
{
    memset(f, 0, sizeof *f);
    struct io_stream s;
    int rc = io_stream_open(&s, path);
    if (rc < 0)
        return rc;
    f->compressed = s.compressed;
    unsigned char head[4 + 4 * WEFT_MAX_DIMS];
    rc = io_stream_read(&s, head, 4, "header (the 4-byte magic)");
    if (rc == 0)
        rc = check_magic(path, head, labels, &f->type);
    if (rc == 0) {
        f->ndim = head[3];
        rc = io_stream_read(&s, head + 4, 4 * (size_t)f->ndim, "header (the dimension sizes)");
    }
    if (rc < 0)
        goto done;
    size_t item = weft_dtype_size(f->type->dtype);
    for (int d = 0; d < f->ndim; d++)
        f->dims[d] = io_be32(head + 4 + 4 * d);
    /* Sample size first, then times the count: with a count of 0 the total alone would
     * hide a sample shape that overflows. */
    int64_t sample = (int64_t)item, bytes = 0;
    bool ok = true;
    for (int d = f->ndim - 1; d >= 1 && ok; d--)
        ok = weft_size_mul(sample, f->dims[d], WEFT_SIZE_MAX, &sample);
    ok = ok && weft_size_mul(sample, f->dims[0], WEFT_SIZE_MAX, &bytes);
    if (!ok) {
        char text[160];
        rc = weft_error_set(WEFT_ERR_IO,
                            "%s: byte 4: dimensions %s of %zu-byte elements overflow a 64-bit "
                            "size; the header is corrupt",
                            path, dims_text(f->dims, f->ndim, text, sizeof text), item);
        goto done;
    }
    f->sample_bytes = (size_t)sample;
    f->count = bytes / (int64_t)item;
    rc = io_stream_read_alloc(&s, (size_t)bytes, &f->data, labels ? "label data" : "image data");
    if (rc == 0)
        rc = io_stream_expect_end(&s, labels ? "the label data" : "the image data");
    if (rc == 0)
        native_order(f);
done:
    io_stream_close(&s);
    if (rc < 0) {
        free(f->data);
        f->data = NULL;
    }
    return rc;
}

/* Labels as int64, each checked against [0, num_classes). */
static int convert_labels(const char *path, const struct idx_file *f, int64_t num_classes,
                          int64_t **out)
{
    int64_t n = f->dims[0];
    int64_t *labels = malloc((size_t)(n ? n : 1) * sizeof *labels);
    if (!labels)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    size_t item = weft_dtype_size(f->type->dtype);
    for (int64_t i = 0; i < n; i++) {
        const unsigned char *p = (const unsigned char *)f->data + (size_t)i * item;
        int64_t v;
        switch (f->type->dtype) {
        case WEFT_U8: v = *p; break;
        case WEFT_I8: v = *(const int8_t *)p; break;
        case WEFT_I16: { int16_t x; memcpy(&x, p, 2); v = x; break; }
        default: { int32_t x; memcpy(&x, p, 4); v = x; break; }
        }
        if (v < 0 || v >= num_classes) {
            free(labels);
            return weft_error_set(WEFT_ERR_IO,
                                  "%s: byte %s%lld: label %lld of sample %lld is out of range: "
                                  "expected 0 <= label < %lld (num_classes)",
                                  path, f->compressed ? "(decompressed) " : "",
                                  (long long)(8 + i * (int64_t)item), (long long)v,
                                  (long long)i, (long long)num_classes);
        }
        labels[i] = v;
    }
    *out = labels;
    return 0;
}

static void idx_close(void *ctx)
{
    struct idx_ctx *c = ctx;
    if (!c)
        return;
    free(c->images);
    free(c->labels);
    free(c);
}

static void set_image_field(struct weft_dataset_field *fd, const struct idx_file *f)
{
    snprintf(fd->name, sizeof fd->name, "image");
    fd->dtype = f->type->dtype;
    if (f->ndim == 3) { /* [N, H, W]: one channel, as torchvision's MNIST gives */
        fd->ndim = 3;
        fd->shape[0] = 1;
        fd->shape[1] = f->dims[1];
        fd->shape[2] = f->dims[2];
        return;
    }
    fd->ndim = f->ndim - 1;
    for (int d = 1; d < f->ndim; d++)
        fd->shape[d - 1] = f->dims[d];
}

static int idx_open(const weft_options *o, struct weft_dataset_info *info,
                    void **out)
{
    char images_path[IO_PATH_MAX], labels_path[IO_PATH_MAX];
    int64_t num_classes;
    int has_labels;
    int rc = io_config_path(o, "images", true, "the path of an IDX images file",
                            images_path, sizeof images_path);
    if (rc < 0)
        return rc;
    has_labels = io_config_path(o, "labels", false, "the path of an IDX labels file",
                                labels_path, sizeof labels_path);
    if (has_labels < 0)
        return has_labels;
    rc = weft_options_int_range(o, "num_classes", 10, 1, INT32_MAX, &num_classes);
    if (rc < 0)
        return rc;

    struct idx_file images, labels = {0};
    rc = load_idx(images_path, false, &images);
    if (rc < 0)
        return rc;
    struct idx_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        free(images.data);
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "idx reader: out of memory");
    }
    c->images = images.data;
    c->image_bytes = images.sample_bytes;
    info->length = images.dims[0];
    info->nfields = 1;
    set_image_field(&info->fields[0], &images);
    if (has_labels) {
        rc = load_idx(labels_path, true, &labels);
        if (rc == 0 && labels.dims[0] != images.dims[0])
            rc = weft_error_set(WEFT_ERR_IO,
                                "%s: byte 4: %lld labels for the %lld images of %s; expected "
                                "one label per image",
                                labels_path, (long long)labels.dims[0],
                                (long long)images.dims[0], images_path);
        if (rc == 0)
            rc = convert_labels(labels_path, &labels, num_classes, &c->labels);
        free(labels.data);
        if (rc < 0) {
            idx_close(c);
            return rc;
        }
        struct weft_dataset_field *fd = &info->fields[info->nfields++];
        snprintf(fd->name, sizeof fd->name, "label");
        fd->dtype = WEFT_I64;
        fd->ndim = 0;
        fd->num_classes = num_classes;
    }
    *out = c;
    return 0;
}

static int idx_read(void *ctx, int64_t n, const int64_t *indices, void *const *buffers)
{
    const struct idx_ctx *c = ctx;
    unsigned char *images = buffers[0];
    for (int64_t k = 0; k < n; k++)
        memcpy(images + (size_t)k * c->image_bytes, c->images + (size_t)indices[k] * c->image_bytes,
               c->image_bytes);
    if (c->labels) {
        int64_t *labels = buffers[1];
        for (int64_t k = 0; k < n; k++)
            labels[k] = c->labels[indices[k]];
    }
    return 0;
}

const struct weft_dataset_reader io_idx_reader = {
    .base = WEFT_VTABLE(WEFT_KIND_READER, "idx", struct weft_dataset_reader),
    .description = "MNIST-style IDX files (images and labels), raw or gzip'd",
    .open = idx_open,
    .read = idx_read,
    .close = idx_close,
};
