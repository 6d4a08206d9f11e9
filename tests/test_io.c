/* tests/test_io.c: datasets and their readers (weft/dataset.h, weft-io.so): the registry,
 * the idx, csv, npy and synthetic readers on small files written here, every malformed
 * input a user can hand them, and the MNIST subset shipped in data/mnist. */
#define _GNU_SOURCE
#include "testutil.h"

#include <ftw.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <weft/dataset.h>

/* ---- fixtures: a temporary directory per test ---------------------------------------- */


static void io_setup(void)
{
    weft_error_clear();
    tu_tmpdir_create("io");
}

static void io_teardown(void)
{
    tu_tmpdir_remove();
    tu_teardown();
}

TestSuite(io, .init = io_setup, .fini = io_teardown);

static void assert_field(const weft_dataset *ds, int i, const char *name, enum weft_dtype dt,
                         int ndim, const int64_t *shape)
{
    const struct weft_dataset_field *f = weft_dataset_field(ds, i);
    cr_assert_not_null(f);
    cr_assert_str_eq(f->name, name);
    cr_assert_eq(f->dtype, dt, "field %s has dtype %s, expected %s", name,
                 weft_dtype_name(f->dtype), weft_dtype_name(dt));
    cr_assert_eq(f->ndim, ndim, "field %s has rank %d, expected %d", name, f->ndim, ndim);
    for (int d = 0; d < ndim; d++)
        cr_assert_eq(f->shape[d], shape[d], "field %s: shape[%d] = %lld, expected %lld", name, d,
                     (long long)f->shape[d], (long long)shape[d]);
}

/* Reads samples indices[0..n) of a two-field dataset into fresh buffers. */
static void read2(const weft_dataset *ds, int64_t n, const int64_t *indices, void **a, void **b)
{
    *a = calloc((size_t)n, weft_dataset_sample_bytes(ds, 0) + 1);
    *b = calloc((size_t)n, weft_dataset_sample_bytes(ds, 1) + 1);
    void *bufs[2] = {*a, *b};
    cr_assert_eq(weft_dataset_read(ds, n, indices, bufs), 0, "read: %s", weft_error_message());
}

/* ---- IDX files ------------------------------------------------------------------------ */

/* An IDX file: magic 0x0000TTNN, the dims, then `data` as given (already big-endian). */
static void write_idx(const char *name, unsigned type, int ndim, const uint32_t *dims,
                      const void *data, size_t nbytes)
{
    size_t head = 4 + 4 * (size_t)ndim;
    unsigned char *buf = malloc(head + nbytes + 1);
    buf[0] = 0;
    buf[1] = 0;
    buf[2] = (unsigned char)type;
    buf[3] = (unsigned char)ndim;
    for (int d = 0; d < ndim; d++) {
        buf[4 + 4 * d] = (unsigned char)(dims[d] >> 24);
        buf[5 + 4 * d] = (unsigned char)(dims[d] >> 16);
        buf[6 + 4 * d] = (unsigned char)(dims[d] >> 8);
        buf[7 + 4 * d] = (unsigned char)dims[d];
    }
    if (nbytes)
        memcpy(buf + head, data, nbytes);
    tu_write_bytes(name, buf, head + nbytes);
    free(buf);
}

/* Three 2x3 uint8 images (pixel = 10 * image + position) and labels 7, 0, 9. */
static void write_tiny_mnist(void)
{
    unsigned char pixels[18];
    for (int i = 0; i < 18; i++)
        pixels[i] = (unsigned char)(10 * (i / 6) + i % 6);
    write_idx("images.idx", 0x08, 3, (uint32_t[]){3, 2, 3}, pixels, sizeof pixels);
    write_idx("labels.idx", 0x08, 1, (uint32_t[]){3}, (unsigned char[]){7, 0, 9}, 3);
}

static const char *const tiny_ini = "[data]\n"
                                    "reader = idx\n"
                                    "images = images.idx\n"
                                    "labels = labels.idx\n";

Test(io, idx_reads_images_with_a_channel_dim_and_int64_labels)
{
    write_tiny_mnist();
    weft_dataset *ds = tu_open_ok(tiny_ini);
    cr_assert_eq(weft_dataset_length(ds), 3);
    cr_assert_eq(weft_dataset_num_fields(ds), 2);
    assert_field(ds, 0, "image", WEFT_U8, 3, (int64_t[]){1, 2, 3});
    assert_field(ds, 1, "label", WEFT_I64, 0, NULL);
    cr_assert_eq(weft_dataset_field(ds, 1)->num_classes, 10);
    cr_assert_eq(weft_dataset_sample_bytes(ds, 0), 6);
    cr_assert_eq(weft_dataset_sample_bytes(ds, 1), 8);
    cr_assert_str_eq(weft_dataset_reader_name(ds), "idx");
    cr_assert_str_eq(weft_dataset_section(ds), "data");

    void *img, *lab;
    read2(ds, 3, (int64_t[]){2, 0, 2}, &img, &lab);
    const unsigned char expect[18] = {20, 21, 22, 23, 24, 25, 0, 1, 2,
                                      3,  4,  5,  20, 21, 22, 23, 24, 25};
    cr_assert_arr_eq(img, expect, 18);
    const int64_t *labels = lab;
    cr_assert_eq(labels[0], 9);
    cr_assert_eq(labels[1], 7);
    cr_assert_eq(labels[2], 9);
    free(img);
    free(lab);
    weft_dataset_close(ds);
}

Test(io, idx_without_labels_has_only_the_image_field)
{
    write_tiny_mnist();
    weft_dataset *ds = tu_open_ok("[data]\nreader = idx\nimages = images.idx\n");
    cr_assert_eq(weft_dataset_num_fields(ds), 1);
    cr_assert_eq(weft_dataset_field_index(ds, "image"), 0);
    cr_assert_eq(weft_dataset_field_index(ds, "label"), -1);
    weft_dataset_close(ds);
}

Test(io, idx_converts_big_endian_int16_and_float32_to_native)
{
    /* int16 samples [2]: {258, -2}, {1, 0}; float32 samples [1]: {1.5}, {-2}. */
    const unsigned char i16[8] = {0x01, 0x02, 0xFF, 0xFE, 0x00, 0x01, 0x00, 0x00};
    write_idx("i16.idx", 0x0B, 2, (uint32_t[]){2, 2}, i16, sizeof i16);
    const unsigned char f32[8] = {0x3F, 0xC0, 0, 0, 0xC0, 0x00, 0, 0};
    write_idx("f32.idx", 0x0D, 2, (uint32_t[]){2, 1}, f32, sizeof f32);

    weft_dataset *ds = tu_open_ok("[data]\nreader = idx\nimages = i16.idx\n");
    assert_field(ds, 0, "image", WEFT_I16, 1, (int64_t[]){2});
    int16_t got16[4];
    void *bufs[1] = {got16};
    cr_assert_eq(weft_dataset_read(ds, 2, (int64_t[]){0, 1}, bufs), 0);
    cr_assert_eq(got16[0], 258);
    cr_assert_eq(got16[1], -2);
    cr_assert_eq(got16[2], 1);
    cr_assert_eq(got16[3], 0);
    weft_dataset_close(ds);

    ds = tu_open_ok("[data]\nreader = idx\nimages = f32.idx\n");
    assert_field(ds, 0, "image", WEFT_F32, 1, (int64_t[]){1});
    float gotf[2];
    bufs[0] = gotf;
    cr_assert_eq(weft_dataset_read(ds, 2, (int64_t[]){1, 0}, bufs), 0);
    cr_assert_float_eq(gotf[0], -2.0f, 0);
    cr_assert_float_eq(gotf[1], 1.5f, 0);
    weft_dataset_close(ds);
}

Test(io, idx_keeps_samples_that_are_not_2d_as_they_are)
{
    unsigned char data[24] = {0};
    write_idx("rgb.idx", 0x08, 4, (uint32_t[]){2, 3, 2, 2}, data, 24);
    weft_dataset *ds = tu_open_ok("[data]\nreader = idx\nimages = rgb.idx\n");
    assert_field(ds, 0, "image", WEFT_U8, 3, (int64_t[]){3, 2, 2});
    weft_dataset_close(ds);
    write_idx("flat.idx", 0x08, 2, (uint32_t[]){4, 6}, data, 24);
    ds = tu_open_ok("[data]\nreader = idx\nimages = flat.idx\n");
    assert_field(ds, 0, "image", WEFT_U8, 1, (int64_t[]){6});
    weft_dataset_close(ds);
}

Test(io, idx_paths_are_relative_to_the_config_directory_or_absolute)
{
    write_tiny_mnist();
    char ini[1200];
    snprintf(ini, sizeof ini, "[data]\nreader = idx\nimages = %s\n", tu_tmp_path("images.idx"));
    weft_dataset *ds = tu_open_ok(ini);
    weft_dataset_close(ds);
    char out[64];
    cr_assert_eq(weft_options_path(weft_config_options(tu_config("[x]\np = /abs/file\n"), "x"),
                                   "p", out, sizeof out),
                 1);
    cr_assert_str_eq(out, "/abs/file");
    struct weft_config *plain = weft_config_parse("[x]\np = data/a.gz\n", "mnist.ini");
    cr_assert_eq(weft_options_path(weft_config_options(plain, "x"), "p", out, sizeof out), 1);
    cr_assert_str_eq(out, "data/a.gz");
    cr_assert_eq(weft_options_path(weft_config_options(plain, "x"), "absent", out, sizeof out), 0);
    weft_config_free(plain);
    struct weft_config *nested = weft_config_parse(
        "[x]\np = ../data/a.gz\nlong = a-path-much-longer-than-the-buffer-we-give-it\n",
        "configs/mnist.ini");
    const weft_options *o = weft_config_options(nested, "x");
    cr_assert_eq(weft_options_path(o, "p", out, sizeof out), 1);
    cr_assert_str_eq(out, "configs/../data/a.gz");
    cr_assert_lt(weft_options_path(o, "long", out, 16), 0);
    tu_assert_error(WEFT_ERR_CONFIG, "configs/mnist.ini: [x] long = 'a-path-much-longer-than-the-"
                                     "buffer-we-give-it': the path is too long");
    /* a value --set gave is the shell's: the current directory's, absolute paths as they are */
    cr_assert_eq(weft_config_set(nested, "x.p=here/b.gz"), 0);
    cr_assert_eq(weft_config_set(nested, "x.q=/abs/c.gz"), 0);
    cr_assert_eq(weft_options_path(o, "p", out, sizeof out), 1);
    cr_assert_str_eq(out, "here/b.gz");
    cr_assert_eq(weft_options_path(o, "q", out, sizeof out), 1);
    cr_assert_str_eq(out, "/abs/c.gz");
    /* weft_config_put (a program's own setting) keeps the file's directory */
    cr_assert_eq(weft_config_put(nested, "x", "r", "d.gz"), 0);
    cr_assert_eq(weft_options_path(o, "r", out, sizeof out), 1);
    cr_assert_str_eq(out, "configs/d.gz");
    weft_config_free(nested);
    /* options that are not a view have no per-key base */
    weft_options *own = weft_options_new("x", "a/b.ini");
    cr_assert_eq(weft_options_view_set_path_base(own, NULL), WEFT_ERR_VALUE);
    weft_error_clear();
    weft_options_free(own);
}

Test(io, idx_rejects_a_bad_magic_naming_file_and_offset)
{
    tu_write_bytes("bad.idx", "\x12\x34\x56\x78\0\0\0\0", 8);
    tu_open_fails("[data]\nreader = idx\nimages = bad.idx\n", WEFT_ERR_IO,
                  "bad.idx: byte 0: bad magic 0x12345678: expected an IDX magic 0x0000TTNN");
    tu_write_bytes("type.idx", "\x00\x00\x07\x03", 4);
    tu_open_fails("[data]\nreader = idx\nimages = type.idx\n", WEFT_ERR_IO, "bad magic 0x00000703");
}

Test(io, idx_rejects_an_images_file_given_as_labels)
{
    write_tiny_mnist();
    tu_open_fails("[data]\nreader = idx\nimages = images.idx\nlabels = images.idx\n", WEFT_ERR_IO,
                  "images.idx: byte 0: magic 0x00000803 says 3 dimensions; expected a labels file "
                  "with 1 dimension (magic 0x00000801)");
    write_idx("flabels.idx", 0x0D, 1, (uint32_t[]){3}, "\0\0\0\0\0\0\0\0\0\0\0\0", 12);
    tu_open_fails("[data]\nreader = idx\nimages = images.idx\nlabels = flabels.idx\n", WEFT_ERR_IO,
                  "says float32 elements; expected integer labels");
}

/* A labels file given as the images would be samples of rank 0 (scalars): refused when
 * it is read as images, naming the file and what it is. */
Test(io, idx_rejects_a_labels_file_given_as_images)
{
    write_tiny_mnist();
    tu_open_fails("[data]\nreader = idx\nimages = labels.idx\nlabels = labels.idx\n", WEFT_ERR_IO,
                  "labels.idx: byte 0: magic 0x00000801 says 1 dimension: a labels file, given "
                  "as images; expected an images file with 2 or more dimensions");
}

/* A FIFO or a directory as a data file is refused by its type before anything reads it
 * (the FIFO used to block the open until a writer came): through the streamed readers
 * (idx, csv) and the mapped one (npy). */
Test(io, a_fifo_or_a_directory_as_a_data_file_is_refused_without_blocking)
{
    cr_assert_eq(mkfifo(tu_tmp_path("pipe"), 0600), 0);
    tu_open_fails("[data]\nreader = idx\nimages = pipe\n", WEFT_ERR_IO,
                  "pipe: cannot open: a FIFO (named pipe), not a regular file");
    tu_open_fails("[data]\nreader = csv\npath = pipe\n", WEFT_ERR_IO,
                  "pipe: cannot open: a FIFO (named pipe), not a regular file");
    tu_open_fails("[data]\nreader = npy\npath = pipe\n", WEFT_ERR_IO,
                  "pipe: cannot open: a FIFO (named pipe), not a regular file");
    tu_open_fails("[data]\nreader = idx\nimages = /tmp\n", WEFT_ERR_IO,
                  "/tmp: cannot open: a directory, not a regular file");
    unlink(tu_tmp_path("pipe"));
}

Test(io, idx_rejects_truncated_headers)
{
    tu_write_bytes("short.idx", "\x00\x00", 2);
    tu_open_fails("[data]\nreader = idx\nimages = short.idx\n", WEFT_ERR_IO,
                  "short.idx: byte 0: truncated header (the 4-byte magic): expected 4 bytes, "
                  "found 2");
    tu_write_bytes("dims.idx", "\x00\x00\x08\x03\x00\x00\x00\x02\x00\x00", 10);
    tu_open_fails("[data]\nreader = idx\nimages = dims.idx\n", WEFT_ERR_IO,
                  "dims.idx: byte 4: truncated header (the dimension sizes): expected 12 bytes, "
                  "found 6");
}

Test(io, idx_rejects_truncated_data_before_allocating_what_the_header_claims)
{
    unsigned char pixels[20] = {0};
    write_idx("cut.idx", 0x08, 3, (uint32_t[]){4, 2, 3}, pixels, 20);
    tu_open_fails("[data]\nreader = idx\nimages = cut.idx\n", WEFT_ERR_IO,
                  "cut.idx: byte 16: truncated image data: expected 24 bytes, found 20");
    /* A header claiming 3.2 GB over 10 bytes of data is refused, not allocated. */
    write_idx("huge.idx", 0x08, 3, (uint32_t[]){4000000, 28, 28}, pixels, 10);
    tu_open_fails("[data]\nreader = idx\nimages = huge.idx\n", WEFT_ERR_IO,
                  "truncated image data: expected 3136000000 bytes, found 10");
}

Test(io, idx_rejects_data_after_the_end)
{
    unsigned char pixels[25] = {0};
    write_idx("long.idx", 0x08, 3, (uint32_t[]){4, 2, 3}, pixels, 25);
    tu_open_fails("[data]\nreader = idx\nimages = long.idx\n", WEFT_ERR_IO,
                  "long.idx: byte 40: 1 unexpected bytes after the image data");
}

Test(io, idx_rejects_dims_whose_product_overflows)
{
    write_idx("over.idx", 0x08, 3, (uint32_t[]){0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu}, NULL, 0);
    tu_open_fails("[data]\nreader = idx\nimages = over.idx\n", WEFT_ERR_IO,
                  "over.idx: byte 4: dimensions 4294967295 x 4294967295 x 4294967295 of 1-byte "
                  "elements overflow a 64-bit size");
    /* No samples does not hide an impossible sample shape. */
    write_idx("zero.idx", 0x0E, 4, (uint32_t[]){0, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu}, NULL,
              0);
    tu_open_fails("[data]\nreader = idx\nimages = zero.idx\n", WEFT_ERR_IO,
                     "overflow a 64-bit size");
}

Test(io, idx_rejects_labels_out_of_range_unless_num_classes_allows_them)
{
    write_tiny_mnist();
    write_idx("labels.idx", 0x08, 1, (uint32_t[]){3}, (unsigned char[]){1, 2, 10}, 3);
    tu_open_fails(tiny_ini, WEFT_ERR_IO,
                  "labels.idx: byte 10: label 10 of sample 2 is out of range: expected 0 <= label "
                  "< 10 (num_classes)");
    char ini[256];
    snprintf(ini, sizeof ini, "%snum_classes = 11\n", tiny_ini);
    weft_dataset *ds = tu_open_ok(ini);
    cr_assert_eq(weft_dataset_field(ds, 1)->num_classes, 11);
    weft_dataset_close(ds);
    snprintf(ini, sizeof ini, "%snum_classes = 0\n", tiny_ini);
    tu_open_fails(ini, WEFT_ERR_CONFIG, "[data] num_classes = '0': expected an integer from 1");
    /* Signed label types: negative labels are out of range too. */
    write_idx("labels.idx", 0x09, 1, (uint32_t[]){3}, (unsigned char[]){1, 0xFF, 2}, 3);
    tu_open_fails(tiny_ini, WEFT_ERR_IO, "label -1 of sample 1 is out of range");
}

Test(io, idx_rejects_a_label_count_that_differs_from_the_image_count)
{
    write_tiny_mnist();
    write_idx("labels.idx", 0x08, 1, (uint32_t[]){2}, (unsigned char[]){1, 2}, 2);
    tu_open_fails(tiny_ini, WEFT_ERR_IO, "labels.idx: byte 4: 2 labels for the 3 images of");
}

Test(io, idx_errors_name_missing_keys_and_files)
{
    tu_open_fails("[data]\nreader = idx\n", WEFT_ERR_CONFIG,
                  "test.ini: [data] missing key 'images': expected the path of an IDX images file");
    tu_open_fails("[data]\nreader = idx\nimages = nowhere.idx\n", WEFT_ERR_IO,
                  "nowhere.idx: cannot open: No such file or directory");
}

Test(io, unknown_keys_are_left_for_config_check_unknown)
{
    write_tiny_mnist();
    struct weft_config *c =
        tu_config("[data]\nreader = idx\nimages = images.idx\nlabel = labels.idx\n");
    weft_dataset *ds = weft_dataset_open(weft_config_options(c, "data"));
    cr_assert_not_null(ds, "open failed: %s", weft_error_message());
    weft_dataset_close(ds);
    cr_assert_lt(weft_config_check_unknown(c), 0);
    tu_assert_error(WEFT_ERR_CONFIG, "unknown key 'label' (did you mean 'labels'?)");
}

/* ---- the shipped MNIST subset --------------------------------------------------------- */

static const char *source_root(void)
{
    const char *root = getenv("WEFT_SOURCE_ROOT");
    cr_assert_not_null(root, "WEFT_SOURCE_ROOT is not set (tests/meson.build sets it)");
    return root;
}

static weft_dataset *open_mnist(const char *split)
{
    char ini[2048];
    snprintf(ini, sizeof ini,
             "[data]\nreader = idx\n"
             "images = %s/data/mnist/%s-images-idx3-ubyte.gz\n"
             "labels = %s/data/mnist/%s-labels-idx1-ubyte.gz\n",
             source_root(), split, source_root(), split);
    return tu_open_ok(ini);
}

static void check_mnist(const char *split, int64_t n)
{
    weft_dataset *ds = open_mnist(split);
    cr_assert_eq(weft_dataset_length(ds), n);
    assert_field(ds, 0, "image", WEFT_U8, 3, (int64_t[]){1, 28, 28});
    assert_field(ds, 1, "label", WEFT_I64, 0, NULL);
    int64_t *idx = malloc((size_t)n * sizeof *idx);
    for (int64_t i = 0; i < n; i++)
        idx[i] = i;
    void *img, *lab;
    read2(ds, n, idx, &img, &lab);
    int64_t per_class[10] = {0};
    const unsigned char *pixels = img;
    for (int64_t i = 0; i < n; i++) {
        int64_t y = ((int64_t *)lab)[i];
        cr_assert(y >= 0 && y <= 9, "sample %lld has label %lld", (long long)i, (long long)y);
        per_class[y]++;
        int lit = 0;
        for (int p = 0; p < 784; p++)
            lit += pixels[i * 784 + p] > 127;
        cr_assert(lit > 10 && lit < 500, "sample %lld has %d bright pixels: not a digit?",
                  (long long)i, lit);
    }
    for (int c = 0; c < 10; c++)
        cr_assert_gt(per_class[c], n / 20, "class %d has only %lld samples", c,
                     (long long)per_class[c]);
    free(idx);
    free(img);
    free(lab);
    weft_dataset_close(ds);
}

Test(io, shipped_mnist_train_has_8000_digits_of_all_ten_classes)
{
    check_mnist("train", 8000);
}

Test(io, shipped_mnist_test_has_2000_digits_of_all_ten_classes)
{
    check_mnist("t10k", 2000);
}

/* Copies a fraction of a file; with flip, inverts the byte in the middle instead. */
static void copy_file(const char *from, const char *to_name, double fraction, bool flip)
{
    FILE *f = fopen(from, "rb");
    cr_assert_not_null(f, "cannot open %s", from);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    rewind(f);
    char *buf = malloc((size_t)size);
    cr_assert_eq(fread(buf, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    if (flip)
        buf[size / 2] = (char)~buf[size / 2];
    tu_write_bytes(to_name, buf, (size_t)(size * fraction));
    free(buf);
}

Test(io, idx_recognises_gzip_by_content_and_reports_cut_or_corrupt_streams)
{
    char from[1024];
    snprintf(from, sizeof from, "%s/data/mnist/t10k-labels-idx1-ubyte.gz", source_root());
    copy_file(from, "labels-named-plainly", 1.0, false);
    snprintf(from, sizeof from, "%s/data/mnist/t10k-images-idx3-ubyte.gz", source_root());
    copy_file(from, "images.gz", 1.0, false);
    weft_dataset *ds = tu_open_ok("[data]\nreader = idx\nimages = images.gz\n"
                                  "labels = labels-named-plainly\n");
    cr_assert_eq(weft_dataset_length(ds), 2000);
    weft_dataset_close(ds);
    copy_file(from, "cut.gz", 0.5, false);
    tu_open_fails("[data]\nreader = idx\nimages = cut.gz\n", WEFT_ERR_IO,
                  "cut.gz: byte (decompressed) 16: truncated image data: expected 1568000 bytes");
    copy_file(from, "bad.gz", 1.0, true);
    tu_open_fails("[data]\nreader = idx\nimages = bad.gz\n", WEFT_ERR_IO,
                  "bad.gz: corrupt gzip data after decompressed byte");
}

/* Worker threads read the same dataset at once into their own buffers. */
struct reader_job {
    const weft_dataset *ds;
    int64_t first;
    unsigned char *images;
    int64_t labels[500];
    int rc;
};

static void *read_job(void *arg)
{
    struct reader_job *job = arg;
    int64_t idx[500];
    for (int i = 0; i < 500; i++)
        idx[i] = (job->first + 7 * i) % 8000;
    void *bufs[2] = {job->images, job->labels};
    job->rc = weft_dataset_read(job->ds, 500, idx, bufs);
    return NULL;
}

Test(io, concurrent_reads_on_disjoint_buffers_match_a_serial_read)
{
    weft_dataset *ds = open_mnist("train");
    struct reader_job jobs[4];
    pthread_t threads[4];
    for (int t = 0; t < 4; t++) {
        jobs[t] = (struct reader_job){.ds = ds, .first = 1000 * t, .images = malloc(500 * 784)};
        pthread_create(&threads[t], NULL, read_job, &jobs[t]);
    }
    for (int t = 0; t < 4; t++)
        pthread_join(threads[t], NULL);
    for (int t = 0; t < 4; t++) {
        cr_assert_eq(jobs[t].rc, 0);
        struct reader_job serial = {.ds = ds, .first = 1000 * t, .images = malloc(500 * 784)};
        read_job(&serial);
        cr_assert_arr_eq(serial.images, jobs[t].images, 500 * 784);
        cr_assert_arr_eq(serial.labels, jobs[t].labels, sizeof serial.labels);
        free(serial.images);
        free(jobs[t].images);
    }
    weft_dataset_close(ds);
}

/* ---- CSV ------------------------------------------------------------------------------ */

static void read_csv(const weft_dataset *ds, int64_t i, float *features, int64_t *label)
{
    void *bufs[2] = {features, label};
    cr_assert_eq(weft_dataset_read(ds, 1, &i, bufs), 0, "read: %s", weft_error_message());
}

Test(io, csv_reads_features_and_a_label_column_by_name)
{
    tu_write_text("iris.csv", "a,b,species,c\n"
                           "1.5, 2 ,0,-3e2\n"
                           "\n"
                           "4,5.25,2,6\r\n"
                           "-0,1e-3,1,-0.5\n");
    weft_dataset *ds =
        tu_open_ok("[data]\nreader = csv\npath = iris.csv\nlabel_column = species\n");
    cr_assert_eq(weft_dataset_length(ds), 3);
    assert_field(ds, 0, "features", WEFT_F32, 1, (int64_t[]){3});
    assert_field(ds, 1, "label", WEFT_I64, 0, NULL);
    cr_assert_eq(weft_dataset_field(ds, 1)->num_classes, 3, "inferred as largest label + 1");
    float x[3];
    int64_t y;
    read_csv(ds, 0, x, &y);
    cr_assert_float_eq(x[0], 1.5f, 0);
    cr_assert_float_eq(x[1], 2.0f, 0);
    cr_assert_float_eq(x[2], -300.0f, 0);
    cr_assert_eq(y, 0);
    read_csv(ds, 1, x, &y);
    cr_assert_float_eq(x[1], 5.25f, 0);
    cr_assert_float_eq(x[2], 6.0f, 0);
    cr_assert_eq(y, 2);
    read_csv(ds, 2, x, &y);
    cr_assert(x[0] == 0.0f && signbit(x[0]));
    cr_assert_float_eq(x[1], 1e-3f, 0);
    cr_assert_eq(y, 1);
    weft_dataset_close(ds);
}

Test(io, csv_reads_without_header_by_index_with_other_delimiters)
{
    tu_write_text("t.tsv", "3\t1\t2\n6\t0\t5\n");
    weft_dataset *ds = tu_open_ok("[data]\nreader = csv\npath = t.tsv\nheader = false\n"
                                  "delimiter = tab\nlabel_column = 1\n");
    float x[2];
    int64_t y;
    read_csv(ds, 1, x, &y);
    cr_assert_float_eq(x[0], 6.0f, 0);
    cr_assert_float_eq(x[1], 5.0f, 0);
    cr_assert_eq(y, 0);
    weft_dataset_close(ds);

    tu_write_text("s.csv", "id;name;x;y;label\n17;bob;1;2;1\n18;amy;3;4;0\n");
    ds = tu_open_ok("[data]\nreader = csv\npath = s.csv\ndelimiter = semicolon\n"
                    "label_column = label\ncolumns = y, 2\nnum_classes = 4\n");
    assert_field(ds, 0, "features", WEFT_F32, 1, (int64_t[]){2});
    cr_assert_eq(weft_dataset_field(ds, 1)->num_classes, 4);
    read_csv(ds, 1, x, &y);
    cr_assert_float_eq(x[0], 4.0f, 0, "columns keep the listed order");
    cr_assert_float_eq(x[1], 3.0f, 0);
    weft_dataset_close(ds);
}

Test(io, csv_without_label_column_has_only_features)
{
    tu_write_text("f.csv", "x,y\n1,2\n");
    weft_dataset *ds = tu_open_ok("[data]\nreader = csv\npath = f.csv\n");
    cr_assert_eq(weft_dataset_num_fields(ds), 1);
    assert_field(ds, 0, "features", WEFT_F32, 1, (int64_t[]){2});
    weft_dataset_close(ds);
}

static const char *const csv_ini = "[data]\nreader = csv\npath = d.csv\nlabel_column = y\n";

Test(io, csv_rejects_a_wrong_column_count_naming_the_line)
{
    tu_write_text("d.csv", "a,b,y\n1,2,0\n\n3,4\n");
    tu_open_fails(csv_ini, WEFT_ERR_IO, "d.csv:4: expected 3 columns (as in the header), found 2");
    tu_write_text("d.csv", "1,2,0\n3,4,1,5\n");
    tu_open_fails("[data]\nreader = csv\npath = d.csv\nheader = false\n", WEFT_ERR_IO,
                  "d.csv:2: expected 3 columns (as in the first line), found 4");
}

Test(io, csv_rejects_non_numeric_cells_naming_line_and_column)
{
    tu_write_text("d.csv", "a,b,y\n1,2,0\n1,abc,0\n");
    tu_open_fails(csv_ini, WEFT_ERR_IO, "d.csv:3:3: column 'b': expected a number, found 'abc'");
    tu_write_text("d.csv", "a,b,y\n1,,0\n");
    tu_open_fails(csv_ini, WEFT_ERR_IO, "d.csv:2:3: column 'b': expected a number, found ''");
    tu_write_text("d.csv", "a,b,y\n0x10,1,0\n");
    tu_open_fails(csv_ini, WEFT_ERR_IO, "d.csv:2:1: column 'a': expected a number, found '0x10'");
    tu_write_text("d.csv", "a,b,y\n1 2,1,0\n");
    tu_open_fails(csv_ini, WEFT_ERR_IO, "d.csv:2:1: column 'a': expected a number, found '1 2'");
    tu_write_text("d.csv", "a,b,y\n1,1e39,0\n");
    tu_open_fails(csv_ini, WEFT_ERR_IO, "d.csv:2:3: column 'b': 1e39 is out of range for float32");
    tu_write_text("d.csv", "1,x\n");
    tu_open_fails("[data]\nreader = csv\npath = d.csv\nheader = false\n", WEFT_ERR_IO,
                  "d.csv:1:3: column index 1: expected a number, found 'x'");
}

Test(io, csv_rejects_nan_and_infinities_naming_line_and_column)
{
    /* strtod reads them all; the libsvm and mtx readers refuse them, and so must csv */
    static const char *const cells[] = {"nan", "NaN", "-nan", "inf", "-inf", "+Infinity",
                                        "nan(0x1)"};
    for (size_t i = 0; i < sizeof cells / sizeof *cells; i++) {
        char text[64], want[128];
        snprintf(text, sizeof text, "a,b,y\n1,2,0\n1,%s,1\n", cells[i]);
        tu_write_text("d.csv", text);
        snprintf(want, sizeof want, "d.csv:3:3: column 'b': expected a finite number, found '%s'",
                 cells[i]);
        if (strchr(cells[i], 'x'))
            snprintf(want, sizeof want, "d.csv:3:3: column 'b': expected a number");
        tu_open_fails(csv_ini, WEFT_ERR_IO, want);
    }
}

Test(io, csv_rejects_labels_that_are_not_class_indices)
{
    tu_write_text("d.csv", "a,b,y\n1,2,1.5\n");
    tu_open_fails(csv_ini, WEFT_ERR_IO,
                  "d.csv:2:5: label column 'y': expected a class label (an integer >= 0), found "
                  "'1.5'");
    tu_write_text("d.csv", "a,b,y\n1,2,-1\n");
    tu_open_fails(csv_ini, WEFT_ERR_IO, "found '-1'");
    tu_write_text("d.csv", "a,b,y\n1,2,1\n1,2,5\n");
    char ini[256];
    snprintf(ini, sizeof ini, "%snum_classes = 3\n", csv_ini);
    tu_open_fails(ini, WEFT_ERR_IO,
                  "d.csv:3:5: label 5 is out of range: expected 0 <= label < 3 (num_classes)");
}

Test(io, csv_rejects_columns_it_cannot_find)
{
    tu_write_text("d.csv", "a,b,y\n1,2,1\n");
    tu_open_fails("[data]\nreader = csv\npath = d.csv\nlabel_column = z\n", WEFT_ERR_CONFIG,
                  "test.ini: [data] label_column: no column 'z' in");
    tu_open_fails("[data]\nreader = csv\npath = d.csv\nlabel_column = 3\n", WEFT_ERR_CONFIG,
                  "column index 3 is out of range");
    tu_open_fails("[data]\nreader = csv\npath = d.csv\nlabel_column = y\ncolumns = a, a\n",
                  WEFT_ERR_CONFIG, "columns: 'a' is listed twice");
    tu_open_fails("[data]\nreader = csv\npath = d.csv\nlabel_column = y\ncolumns = a, y\n",
                  WEFT_ERR_CONFIG, "columns: 'y' is the label column");
    tu_open_fails("[data]\nreader = csv\npath = d.csv\ncolumns = a,,b\n", WEFT_ERR_CONFIG,
                  "columns = 'a,,b': empty entry");
    tu_open_fails("[data]\nreader = csv\npath = d.csv\ndelimiter = ab\n", WEFT_ERR_CONFIG,
                  "[data] delimiter = 'ab': expected one character");
}

Test(io, csv_rejects_empty_files_and_binary_data)
{
    tu_write_text("d.csv", "\n\n");
    tu_open_fails(csv_ini, WEFT_ERR_IO, "d.csv: empty file; expected CSV text with a header line");
    tu_write_bytes("d.csv", "a,b,y\n1,\0,1\n", 12);
    tu_open_fails(csv_ini, WEFT_ERR_IO, "d.csv:2: NUL byte in a text file");
}

/* ---- NPY ------------------------------------------------------------------------------ */

/* A .npy file of the given version with `dict` as its header, padded as numpy pads it,
 * then `data`. */
static void write_npy_raw(const char *name, int major, const char *dict, const void *data,
                          size_t nbytes)
{
    size_t lensize = major == 1 ? 2 : 4;
    size_t pre = 8 + lensize;
    size_t hlen = strlen(dict) + 1;
    hlen += (64 - (pre + hlen) % 64) % 64;
    unsigned char *buf = calloc(1, pre + hlen + nbytes + 1);
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (unsigned char)major;
    buf[7] = 0;
    for (size_t b = 0; b < lensize; b++)
        buf[8 + b] = (unsigned char)(hlen >> (8 * b));
    memset(buf + pre, ' ', hlen);
    memcpy(buf + pre, dict, strlen(dict));
    buf[pre + hlen - 1] = '\n';
    if (nbytes)
        memcpy(buf + pre + hlen, data, nbytes);
    tu_write_bytes(name, buf, pre + hlen + nbytes);
    free(buf);
}

static void write_npy(const char *name, const char *descr, bool fortran, const char *shape,
                      const void *data, size_t nbytes)
{
    char dict[256];
    snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }", descr,
             fortran ? "True" : "False", shape);
    write_npy_raw(name, 1, dict, data, nbytes);
}

/* Element i of dtype dt (as stored in host order) as a double. */
static double element(const void *buf, enum weft_dtype dt, int64_t i)
{
    const char *p = (const char *)buf + i * (int64_t)weft_dtype_size(dt);
    switch (dt) {
    case WEFT_BOOL: return *(const bool *)p;
    case WEFT_U8: return *(const uint8_t *)p;
    case WEFT_I8: return *(const int8_t *)p;
    case WEFT_I16: { int16_t v; memcpy(&v, p, 2); return v; }
    case WEFT_I32: { int32_t v; memcpy(&v, p, 4); return v; }
    case WEFT_I64: { int64_t v; memcpy(&v, p, 8); return (double)v; }
    case WEFT_F16: { uint16_t v; memcpy(&v, p, 2); return weft_f16_to_float(v); }
    case WEFT_BF16: { uint16_t v; memcpy(&v, p, 2); return weft_bf16_to_float(v); }
    case WEFT_F32: { float v; memcpy(&v, p, 4); return v; }
    case WEFT_F64: { double v; memcpy(&v, p, 8); return v; }
    default: return NAN;
    }
}

/* Stores v as dtype dt at element i, in little- or big-endian byte order. */
static void put(void *buf, enum weft_dtype dt, int64_t i, double v, bool big)
{
    size_t size = weft_dtype_size(dt);
    unsigned char tmp[8];
    switch (dt) {
    case WEFT_BOOL: tmp[0] = v != 0; break;
    case WEFT_U8: tmp[0] = (uint8_t)v; break;
    case WEFT_I8: { int8_t x = (int8_t)v; memcpy(tmp, &x, 1); break; }
    case WEFT_I16: { int16_t x = (int16_t)v; memcpy(tmp, &x, 2); break; }
    case WEFT_I32: { int32_t x = (int32_t)v; memcpy(tmp, &x, 4); break; }
    case WEFT_I64: { int64_t x = (int64_t)v; memcpy(tmp, &x, 8); break; }
    case WEFT_F16: { uint16_t x = weft_float_to_f16((float)v); memcpy(tmp, &x, 2); break; }
    case WEFT_BF16: { uint16_t x = weft_float_to_bf16((float)v); memcpy(tmp, &x, 2); break; }
    case WEFT_F32: { float x = (float)v; memcpy(tmp, &x, 4); break; }
    case WEFT_F64: memcpy(tmp, &v, 8); break;
    default: break;
    }
    unsigned char *dst = (unsigned char *)buf + (size_t)i * size;
    for (size_t b = 0; b < size; b++)
        dst[b] = big ? tmp[size - 1 - b] : tmp[b]; /* the test hosts are little-endian */
}

static const struct {
    const char *code; /* descr without the byte order */
    enum weft_dtype dtype;
} npy_dtypes[] = {
    {"b1", WEFT_BOOL}, {"u1", WEFT_U8},  {"i1", WEFT_I8},  {"i2", WEFT_I16}, {"i4", WEFT_I32},
    {"i8", WEFT_I64},  {"f2", WEFT_F16}, {"f4", WEFT_F32}, {"f8", WEFT_F64},
};

/* The value of element e of the test arrays: signed where the dtype allows it. */
static double test_value(enum weft_dtype dt, int64_t e)
{
    if (dt == WEFT_BOOL)
        return (double)(e % 2);
    if (dt == WEFT_U8)
        return (double)(e * 3);
    return (e % 2 ? -1.0 : 1.0) * (double)(e * 3);
}

/* Writes a [2, 3, 4] array of dtype dt in every byte order and memory order and checks
 * that sample 1 reads back in C order with host byte order. */
static void check_npy_dtype(const char *code, enum weft_dtype dt)
{
    const int64_t N = 2, D1 = 3, D2 = 4, n = N * D1 * D2;
    for (int variant = 0; variant < 4; variant++) {
        bool big = variant & 1, fortran = variant & 2;
        unsigned char data[24 * 8];
        for (int64_t i = 0; i < N; i++)
            for (int64_t a = 0; a < D1; a++)
                for (int64_t b = 0; b < D2; b++) {
                    int64_t c_index = (i * D1 + a) * D2 + b;
                    int64_t at = fortran ? i + N * (a + D1 * b) : c_index;
                    put(data, dt, at, test_value(dt, c_index), big);
                }
        char descr[8];
        bool one_byte = weft_dtype_size(dt) == 1;
        snprintf(descr, sizeof descr, "%c%s", one_byte ? '|' : big ? '>' : '<', code);
        write_npy("x.npy", descr, fortran, "(2, 3, 4)", data, (size_t)n * weft_dtype_size(dt));
        weft_dataset *ds = tu_open_ok("[data]\nreader = npy\npath = x.npy\n");
        assert_field(ds, 0, "features", dt, 2, (int64_t[]){3, 4});
        unsigned char got[12 * 8];
        void *bufs[1] = {got};
        cr_assert_eq(weft_dataset_read(ds, 1, (int64_t[]){1}, bufs), 0);
        for (int64_t e = 0; e < 12; e++)
            cr_assert_eq(element(got, dt, e), test_value(dt, 12 + e),
                         "%s (%s order): element %lld is %g, expected %g", descr,
                         fortran ? "Fortran" : "C", (long long)e, element(got, dt, e),
                         test_value(dt, 12 + e));
        weft_dataset_close(ds);
    }
}

Test(io, npy_reads_every_dtype_in_both_byte_orders_and_memory_orders)
{
    for (size_t i = 0; i < sizeof npy_dtypes / sizeof *npy_dtypes; i++)
        check_npy_dtype(npy_dtypes[i].code, npy_dtypes[i].dtype);
}

Test(io, npy_reads_bfloat16_saved_as_two_byte_void_when_asked)
{
    unsigned char data[4];
    put(data, WEFT_BF16, 0, 1.5, false);
    put(data, WEFT_BF16, 1, -2.0, false);
    write_npy("bf.npy", "|V2", false, "(2,)", data, 4);
    tu_open_fails("[data]\nreader = npy\npath = bf.npy\n", WEFT_ERR_IO,
                  "bf.npy: descr '|V2' is raw 2-byte values; if they are bfloat16");
    weft_dataset *ds = tu_open_ok("[data]\nreader = npy\npath = bf.npy\ndtype = bfloat16\n");
    assert_field(ds, 0, "features", WEFT_BF16, 0, NULL);
    unsigned char got[4];
    void *bufs[1] = {got};
    cr_assert_eq(weft_dataset_read(ds, 2, (int64_t[]){1, 0}, bufs), 0);
    cr_assert_eq(element(got, WEFT_BF16, 0), -2.0);
    cr_assert_eq(element(got, WEFT_BF16, 1), 1.5);
    weft_dataset_close(ds);
    write_npy("f.npy", "<f4", false, "(2,)", (float[]){1, 2}, 8);
    tu_open_fails("[data]\nreader = npy\npath = f.npy\ndtype = int32\n", WEFT_ERR_CONFIG,
                  "[data] dtype = 'int32', but");
}

Test(io, npy_reads_version_2_and_3_headers_and_python2_longs)
{
    float data[6] = {0, 1, 2, 3, 4, 5};
    write_npy_raw("v2.npy", 2, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2)}", data,
                  24);
    write_npy_raw("v3.npy", 3, "{\"shape\": (3L, 2L), \"fortran_order\": False, "
                               "\"descr\": \"<f4\"}", data, 24);
    for (int v = 2; v <= 3; v++) {
        char ini[128];
        snprintf(ini, sizeof ini, "[data]\nreader = npy\npath = v%d.npy\n", v);
        weft_dataset *ds = tu_open_ok(ini);
        cr_assert_eq(weft_dataset_length(ds), 3);
        assert_field(ds, 0, "features", WEFT_F32, 1, (int64_t[]){2});
        float got[2];
        void *bufs[1] = {got};
        cr_assert_eq(weft_dataset_read(ds, 1, (int64_t[]){2}, bufs), 0);
        cr_assert_float_eq(got[0], 4.0f, 0);
        cr_assert_float_eq(got[1], 5.0f, 0);
        weft_dataset_close(ds);
    }
}

Test(io, npy_reads_integer_labels_of_any_width_and_byte_order)
{
    float x[3] = {0, 1, 2};
    write_npy("x.npy", "<f4", false, "(3,)", x, 12);
    const unsigned char be16[6] = {0, 2, 0, 0, 0, 1};
    write_npy("y.npy", ">u2", false, "(3,)", be16, 6);
    weft_dataset *ds = tu_open_ok("[data]\nreader = npy\npath = x.npy\nlabels = y.npy\n");
    assert_field(ds, 0, "features", WEFT_F32, 0, NULL);
    assert_field(ds, 1, "label", WEFT_I64, 0, NULL);
    cr_assert_eq(weft_dataset_field(ds, 1)->num_classes, 3);
    float got_x[3];
    int64_t got_y[3];
    void *bufs[2] = {got_x, got_y};
    cr_assert_eq(weft_dataset_read(ds, 3, (int64_t[]){0, 1, 2}, bufs), 0);
    cr_assert_eq(got_y[0], 2);
    cr_assert_eq(got_y[1], 0);
    cr_assert_eq(got_y[2], 1);
    weft_dataset_close(ds);
}

Test(io, npy_rejects_bad_labels)
{
    float x[3] = {0, 1, 2};
    write_npy("x.npy", "<f4", false, "(3,)", x, 12);
    const char *ini = "[data]\nreader = npy\npath = x.npy\nlabels = y.npy\nnum_classes = 5\n";
    int64_t y[3] = {0, 5, 1};
    write_npy("y.npy", "<i8", false, "(3,)", y, 24);
    tu_open_fails(ini, WEFT_ERR_IO,
                  "y.npy: byte 136: label 5 of sample 1 is out of range: expected 0 <= label < 5");
    y[1] = -3;
    write_npy("y.npy", "<i8", false, "(3,)", y, 24);
    tu_open_fails(ini, WEFT_ERR_IO, "label -3 of sample 1 is out of range");
    write_npy("y.npy", "<i8", false, "(2,)", y, 16);
    tu_open_fails(ini, WEFT_ERR_IO, "y.npy: labels of shape (2,); expected shape (3,)");
    write_npy("y.npy", "<f4", false, "(3,)", x, 12);
    tu_open_fails(ini, WEFT_ERR_IO, "y.npy: labels have descr '<f4'; expected an integer type");
}

Test(io, npy_rejects_a_bad_magic_or_version)
{
    tu_write_bytes("m.npy", "\x93NUMPX\x01\x00\x00\x00", 10);
    tu_open_fails("[data]\nreader = npy\npath = m.npy\n", WEFT_ERR_IO,
                  "m.npy: byte 0: bad magic: expected \"\\x93NUMPY\"");
    tu_write_bytes("m.npy", "\x93NUM", 4);
    tu_open_fails("[data]\nreader = npy\npath = m.npy\n", WEFT_ERR_IO,
                  "m.npy: byte 0: truncated header: the file has 4 bytes");
    tu_write_bytes("m.npy", "\x93NUMPY\x04\x00\x00\x00", 10);
    tu_open_fails("[data]\nreader = npy\npath = m.npy\n", WEFT_ERR_IO,
                  "m.npy: byte 6: unsupported .npy format version 4.0");
}

Test(io, npy_rejects_truncated_or_malformed_headers)
{
    tu_write_bytes("h.npy", "\x93NUMPY\x02\x00\x10", 9);
    tu_open_fails("[data]\nreader = npy\npath = h.npy\n", WEFT_ERR_IO,
                  "h.npy: byte 8: truncated header: expected a 4-byte header length");
    tu_write_bytes("h.npy", "\x93NUMPY\x01\x00\xff\x00{'descr'", 17);
    tu_open_fails("[data]\nreader = npy\npath = h.npy\n", WEFT_ERR_IO,
                  "h.npy: byte 10: truncated header: expected 255 bytes of header, the file has 7");
    tu_write_bytes("h.npy", "\x93NUMPY\x01\x00\x04\x00{}  ", 14);
    tu_open_fails("[data]\nreader = npy\npath = h.npy\n", WEFT_ERR_IO,
                  "h.npy: byte 13: bad .npy header: expected it to end with a newline");
    write_npy_raw("h.npy", 1, "{'descr': '<f4', 'shape': (3,)}", NULL, 0);
    tu_open_fails("[data]\nreader = npy\npath = h.npy\n", WEFT_ERR_IO,
                  "bad .npy header: the key 'fortran_order' is missing");
    write_npy_raw("h.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'x': 1}",
                  NULL, 0);
    tu_open_fails("[data]\nreader = npy\npath = h.npy\n", WEFT_ERR_IO,
                  "h.npy: byte 66: bad .npy header: expected only the keys 'descr', "
                  "'fortran_order' and 'shape', found '''");
    write_npy_raw("h.npy", 1, "{'descr': '<f4', 'fortran_order': Maybe, 'shape': (3,)}", NULL, 0);
    tu_open_fails("[data]\nreader = npy\npath = h.npy\n", WEFT_ERR_IO,
                  "h.npy: byte 44: bad .npy header: expected True or False for 'fortran_order', "
                  "found 'M'");
    write_npy_raw("h.npy", 1, "['descr']", NULL, 0);
    tu_open_fails("[data]\nreader = npy\npath = h.npy\n", WEFT_ERR_IO,
                  "h.npy: byte 10: bad .npy header: expected '{' (a Python dict), found '['");
    write_npy_raw("h.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,)} junk", NULL,
                  0);
    tu_open_fails("[data]\nreader = npy\npath = h.npy\n", WEFT_ERR_IO,
                  "expected only spaces after the dict, found 'j'");
}

Test(io, npy_rejects_descrs_and_shapes_it_cannot_read)
{
    const char *ini = "[data]\nreader = npy\npath = d.npy\n";
    write_npy("d.npy", "<c8", false, "(1,)", "\0\0\0\0\0\0\0\0", 8);
    tu_open_fails(ini, WEFT_ERR_IO,
                     "d.npy: byte 20: bad .npy header: expected a 'descr' weft reads");
    write_npy("d.npy", "f4", false, "(1,)", "\0\0\0\0", 4);
    tu_open_fails(ini, WEFT_ERR_IO, "expected a 'descr' weft reads");
    write_npy_raw("d.npy", 1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,)}",
                  NULL, 0);
    tu_open_fails(ini, WEFT_ERR_IO, "structured dtypes are not supported");
    write_npy("d.npy", "<u4", false, "(1,)", "\0\0\0\0", 4);
    tu_open_fails(ini, WEFT_ERR_IO, "d.npy: descr '<u4': weft has no unsigned 4-byte dtype");
    write_npy("d.npy", "<f4", false, "(3, -1)", NULL, 0);
    tu_open_fails(ini, WEFT_ERR_IO,
                  "expected a non-negative integer dimension size or ')', found '-'");
    write_npy("d.npy", "<f4", false, "()", "\0\0\0\0", 4);
    tu_open_fails(ini, WEFT_ERR_IO, "d.npy: shape (); expected at least one dimension");
    write_npy("d.npy", "<f4", false, "(1, 1, 1, 1, 1, 1, 1, 1, 1)", "\0\0\0\0", 4);
    tu_open_fails(ini, WEFT_ERR_IO, "has 9 dimensions; weft reads at most 8");
}

Test(io, npy_rejects_shapes_whose_size_overflows)
{
    const char *ini = "[data]\nreader = npy\npath = d.npy\n";
    write_npy("d.npy", "<f8", false, "(4294967296, 4294967296, 4294967296)", NULL, 0);
    tu_open_fails(ini, WEFT_ERR_IO, "d.npy: byte 10: bad .npy header: shape of 3 dimensions with "
                                    "8-byte elements overflows a 64-bit size");
    write_npy("d.npy", "<f8", false, "(99999999999999999999,)", NULL, 0);
    tu_open_fails(ini, WEFT_ERR_IO, "expected a dimension size below 2^63");
}

Test(io, npy_rejects_truncated_or_overlong_data)
{
    const char *ini = "[data]\nreader = npy\npath = d.npy\n";
    write_npy("d.npy", "<f4", false, "(2, 3)", "\0\0\0\0\0\0\0\0", 8);
    tu_open_fails(ini, WEFT_ERR_IO,
                  "d.npy: byte 128: truncated data: expected 24 bytes (shape and '<f4'), the file "
                  "has 8");
    /* A shape claiming terabytes over a small file is refused, never mapped or allocated. */
    write_npy("d.npy", "<f4", false, "(1000000, 1000000)", "\0\0\0\0", 4);
    tu_open_fails(ini, WEFT_ERR_IO, "expected 4000000000000 bytes");
    write_npy("d.npy", "<f4", false, "(1,)", "\0\0\0\0\0", 5);
    tu_open_fails(ini, WEFT_ERR_IO, "d.npy: byte 132: 1 unexpected bytes after the data");
}

/* ---- synthetic ------------------------------------------------------------------------- */

static void read_all_synth(const weft_dataset *ds, float **x, int64_t **y)
{
    int64_t n = weft_dataset_length(ds);
    int64_t *idx = malloc((size_t)n * sizeof *idx);
    for (int64_t i = 0; i < n; i++)
        idx[i] = i;
    read2(ds, n, idx, (void **)x, (void **)y);
    free(idx);
}

Test(io, synthetic_blobs_are_deterministic_and_independent_of_batching)
{
    const char *ini = "[data]\nreader = synthetic\nkind = blobs\nsamples = 50\nfeatures = 3\n"
                      "classes = 4\nseed = 7\n";
    weft_dataset *ds = tu_open_ok(ini);
    cr_assert_eq(weft_dataset_length(ds), 50);
    assert_field(ds, 0, "features", WEFT_F32, 1, (int64_t[]){3});
    assert_field(ds, 1, "label", WEFT_I64, 0, NULL);
    cr_assert_eq(weft_dataset_field(ds, 1)->num_classes, 4);
    float *x;
    int64_t *y;
    read_all_synth(ds, &x, &y);
    for (int64_t i = 0; i < 50; i++)
        cr_assert_eq(y[i], i % 4);
    float one[3];
    int64_t label;
    void *bufs[2] = {one, &label};
    cr_assert_eq(weft_dataset_read(ds, 1, (int64_t[]){37}, bufs), 0);
    cr_assert_arr_eq(one, x + 37 * 3, sizeof one);
    weft_dataset_close(ds);

    weft_dataset *again = tu_open_ok(ini);
    float *x2;
    int64_t *y2;
    read_all_synth(again, &x2, &y2);
    cr_assert_arr_eq(x, x2, 150 * sizeof(float), "same seed, same data");
    weft_dataset_close(again);
    free(x2);
    free(y2);

    weft_dataset *other = tu_open_ok("[data]\nreader = synthetic\nsamples = 50\nfeatures = 3\n"
                                     "classes = 4\nseed = 8\n");
    read_all_synth(other, &x2, &y2);
    cr_assert(memcmp(x, x2, 150 * sizeof(float)) != 0, "another seed, other data");
    weft_dataset_close(other);
    free(x2);
    free(y2);
    free(x);
    free(y);
}

Test(io, synthetic_blobs_without_noise_sit_on_distinct_class_centres)
{
    weft_dataset *ds = tu_open_ok("[data]\nreader = synthetic\nsamples = 9\nclasses = 3\n"
                                  "noise = 0\n");
    float *x;
    int64_t *y;
    read_all_synth(ds, &x, &y);
    for (int i = 3; i < 9; i++)
        cr_assert_arr_eq(x + 2 * i, x + 2 * (i % 3), 2 * sizeof(float));
    cr_assert(memcmp(x, x + 2, 2 * sizeof(float)) != 0);
    for (int i = 0; i < 18; i++)
        cr_assert(x[i] >= -10 && x[i] < 10);
    weft_dataset_close(ds);
    free(x);
    free(y);
}

Test(io, synthetic_spirals_stay_in_the_unit_disc_without_noise)
{
    weft_dataset *ds = tu_open_ok("[data]\nreader = synthetic\nkind = spirals\nsamples = 300\n"
                                  "classes = 3\nnoise = 0\nfeatures = 2\n");
    float *x;
    int64_t *y;
    read_all_synth(ds, &x, &y);
    for (int i = 0; i < 300; i++) {
        double r = sqrt((double)x[2 * i] * x[2 * i] + (double)x[2 * i + 1] * x[2 * i + 1]);
        double t = (double)(i / 3) / 99.0;
        cr_assert_float_eq(r, t, 1e-6, "sample %d: radius %g, expected %g", i, r, t);
    }
    weft_dataset_close(ds);
    free(x);
    free(y);
}

Test(io, synthetic_rejects_bad_settings)
{
    tu_open_fails("[data]\nreader = synthetic\nkind = moons\n", WEFT_ERR_CONFIG, "kind = 'moons'");
    tu_open_fails("[data]\nreader = synthetic\nkind = spirals\nfeatures = 1\n", WEFT_ERR_CONFIG,
                  "spirals need at least 2 features");
    tu_open_fails("[data]\nreader = synthetic\nsamples = 0\n", WEFT_ERR_CONFIG,
                  "[data] samples = '0': expected an integer from 1 to");
    tu_open_fails("[data]\nreader = synthetic\nnoise = -1\n", WEFT_ERR_CONFIG,
                  "noise = '-1': expected a finite number >= 0");
    tu_open_fails("[data]\nreader = synthetic\nclasses = 100000\nfeatures = 100000\n",
                  WEFT_ERR_CONFIG, "classes x features = 10000000000: expected at most");
}

/* ---- the registry and the dataset object ------------------------------------------------ */

Test(io, open_names_an_unknown_reader_and_suggests_the_closest)
{
    tu_open_fails("[data]\nreader = idz\n", WEFT_ERR_CONFIG,
                  "test.ini: [data] reader = 'idz': no reader 'idz' (known: idx, csv, npy, "
                  "synthetic, mtx, libsvm, text, tokens; did you mean 'idx'?)");
    tu_open_fails("[data]\nimages = x\n", WEFT_ERR_CONFIG,
                  "test.ini: [data] missing key 'reader': expected the name of a dataset reader "
                  "(known: idx, csv, npy, synthetic, mtx, libsvm, text, tokens)");
}

Test(io, read_checks_indices_counts_and_buffers)
{
    weft_dataset *ds = tu_open_ok("[data]\nreader = synthetic\nsamples = 10\n");
    float x[4];
    int64_t y[2];
    void *bufs[2] = {x, y};
    cr_assert_lt(weft_dataset_read(ds, 2, (int64_t[]){3, 10}, bufs), 0);
    tu_assert_error(WEFT_ERR_INDEX, "index 10 is out of bounds for dataset [data] with 10 samples");
    cr_assert_lt(weft_dataset_read(ds, 1, (int64_t[]){-1}, bufs), 0);
    tu_assert_error(WEFT_ERR_INDEX, "index -1 is out of bounds");
    cr_assert_lt(weft_dataset_read(ds, -1, (int64_t[]){0}, bufs), 0);
    tu_assert_error(WEFT_ERR_VALUE, "n must be >= 0, got -1");
    cr_assert_eq(weft_dataset_read(ds, 0, NULL, NULL), 0, "nothing to read");
    void *missing[2] = {x, NULL};
    cr_assert_lt(weft_dataset_read(ds, 1, (int64_t[]){0}, missing), 0);
    tu_assert_error(WEFT_ERR_VALUE, "buffer for field 'label' is NULL");
    weft_dataset_close(ds);
    weft_dataset_close(NULL);
    cr_assert_eq(weft_dataset_length(NULL), -1);
    cr_assert_eq(weft_dataset_num_fields(NULL), 0);
    cr_assert_null(weft_dataset_field(NULL, 0));
}

/* A reader defined here, to check what the core enforces on plugins. */
static int closed;
static int bad_nfields;

static int test_open(const weft_options *o, struct weft_dataset_info *info, void **ctx)
{
    (void)o;
    info->length = 2;
    info->nfields = bad_nfields;
    snprintf(info->fields[0].name, sizeof info->fields[0].name, "x");
    info->fields[0].dtype = WEFT_F32;
    *ctx = &closed;
    return 0;
}

static int test_read(void *ctx, int64_t n, const int64_t *indices, void *const *buffers)
{
    (void)ctx;
    for (int64_t k = 0; k < n; k++)
        ((float *)buffers[0])[k] = (float)indices[k];
    return 0;
}

static void test_close(void *ctx)
{
    (*(int *)ctx)++;
}

static const struct weft_dataset_reader test_reader = {
    .base = WEFT_VTABLE(WEFT_KIND_READER, "test.counting", struct weft_dataset_reader),
    .open = test_open,
    .read = test_read,
    .close = test_close,
};

Test(io, readers_registered_in_process_are_opened_by_name_and_checked)
{
    int id = weft_register(&test_reader);
    cr_assert_geq(id, 0, "%s", weft_error_message());
    cr_assert_eq(weft_register(&test_reader), id, "the same struct twice: no-op");
    cr_assert_eq(weft_registry_find(WEFT_KIND_READER, "test.counting"), &test_reader);
    cr_assert_str_eq(weft_registry_owner(&test_reader), "", "registered by the program");
    bad_nfields = 1;
    weft_dataset *ds = tu_open_ok("[data]\nreader = test.counting\n");
    float x[2];
    void *bufs[1] = {x};
    cr_assert_eq(weft_dataset_read(ds, 2, (int64_t[]){1, 0}, bufs), 0);
    cr_assert_float_eq(x[0], 1.0f, 0);
    weft_dataset_close(ds);
    cr_assert_eq(closed, 1);
    cr_assert_not(weft_plugin_is_loaded("io"), "a registered reader needs no plugin");

    bad_nfields = 0;
    tu_open_fails("[data]\nreader = test.counting\n", WEFT_ERR_PLUGIN,
                  "dataset reader 'test.counting' ([data]) gave 0 fields; expected 1 to 8");
    cr_assert_eq(closed, 2, "a refused dataset is closed");
}

Test(io, register_refuses_wrong_versions_names_and_missing_methods)
{
    struct weft_dataset_reader r = test_reader;
    r.base.abi_version = 99;
    cr_assert_lt(weft_register(&r), 0);
    tu_assert_error(WEFT_ERR_PLUGIN, "a vtable was built for weft ABI 99, but this weft has ABI 3");
    r = test_reader;
    r.base.struct_size = 24;
    cr_assert_lt(weft_register(&r), 0);
    tu_assert_error(WEFT_ERR_PLUGIN, "reader 'test.counting' has struct_size 24, smaller than "
                                     "ABI 3's");
    r = test_reader;
    r.read = NULL;
    cr_assert_lt(weft_register(&r), 0);
    tu_assert_error(WEFT_ERR_PLUGIN, "lacks a required method");
    r = test_reader;
    cr_assert_geq(weft_register(&test_reader), 0);
    cr_assert_lt(weft_register(&r), 0);
    tu_assert_error(WEFT_ERR_PLUGIN, "reader 'test.counting' is already registered");
    /* Its struct may grow: a newer plugin's larger struct is accepted. */
    struct {
        struct weft_dataset_reader r;
        void *later_method;
    } newer = {test_reader, NULL};
    newer.r.base.name = "test.newer";
    newer.r.base.struct_size = sizeof newer;
    cr_assert_geq(weft_register(&newer.r), 0, "%s", weft_error_message());
    int n = weft_registry_count(WEFT_KIND_READER);
    cr_assert_eq(weft_registry_at(WEFT_KIND_READER, n - 1), &newer.r);
    cr_assert_null(weft_registry_at(WEFT_KIND_READER, n));
}
