/* tests/test_io_sparse.c: the sparse text readers of weft-io.so, mtx (Matrix Market) and
 * libsvm, on small files written here: the padded ("ELL") samples they hand out, every
 * malformed input a user can hand them, sizes a file claims but does not hold; and the
 * sparse_linear layer of weft-train, checked against a dense linear layer through a
 * training run on a tiny libsvm file. */
#define _GNU_SOURCE
#include "testutil.h"

#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <weft/checkpoint.h>
#include <weft/dataset.h>
#include <weft/nn.h>

/* ---- fixtures: a temporary directory per test ----------------------------------------- */


static void sparse_setup(void)
{
    weft_error_clear();
    tu_tmpdir_create("io-sparse");
}

static void sparse_teardown(void)
{
    tu_tmpdir_remove();
    tu_teardown();
}

TestSuite(io_sparse, .init = sparse_setup, .fini = sparse_teardown);

/* A gzip file of `text` made of one stored (uncompressed) deflate block: a valid gzip
 * stream without needing zlib in the test. */
static uint32_t crc32_of(const unsigned char *p, size_t n)
{
    uint32_t crc = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++)
            crc = crc & 1 ? (crc >> 1) ^ 0xEDB88320u : crc >> 1;
    }
    return ~crc;
}

static void write_gzip(const char *name, const char *text)
{
    size_t n = strlen(text);
    cr_assert_lt(n, 65535);
    unsigned char *buf = malloc(n + 32);
    size_t k = 0;
    const unsigned char head[10] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3};
    memcpy(buf, head, 10);
    k = 10;
    buf[k++] = 1; /* BFINAL, stored */
    buf[k++] = (unsigned char)n;
    buf[k++] = (unsigned char)(n >> 8);
    buf[k++] = (unsigned char)~n;
    buf[k++] = (unsigned char)(~n >> 8);
    memcpy(buf + k, text, n);
    k += n;
    uint32_t crc = crc32_of((const unsigned char *)text, n);
    for (int i = 0; i < 4; i++)
        buf[k++] = (unsigned char)(crc >> (8 * i));
    for (int i = 0; i < 4; i++)
        buf[k++] = (unsigned char)(n >> (8 * i));
    tu_write_bytes(name, buf, k);
    free(buf);
}

/* Writes `text` as dir/m.mtx and opens it with the mtx reader. */
static weft_dataset *mtx_ok(const char *text)
{
    tu_write_text("m.mtx", text);
    return tu_open_ok("[data]\nreader = mtx\npath = m.mtx\n");
}

static void mtx_fails(const char *text, const char *message)
{
    tu_write_text("m.mtx", text);
    tu_open_fails("[data]\nreader = mtx\npath = m.mtx\n", WEFT_ERR_IO, message);
}

/* Writes `text` as dir/d.svm and opens it with the libsvm reader and `keys`. */
static weft_dataset *svm_ok(const char *text, const char *keys)
{
    char ini[512];
    tu_write_text("d.svm", text);
    snprintf(ini, sizeof ini, "[data]\nreader = libsvm\npath = d.svm\n%s", keys);
    return tu_open_ok(ini);
}

static void svm_fails(const char *text, const char *keys, const char *message)
{
    char ini[512];
    tu_write_text("d.svm", text);
    snprintf(ini, sizeof ini, "[data]\nreader = libsvm\npath = d.svm\n%s", keys);
    tu_open_fails(ini, WEFT_ERR_IO, message);
}

/* Every sample of ds in order: indices and values [length, width], labels [length] when
 * the dataset has them (field 2). The caller frees the three. */
struct samples {
    int64_t n, width;
    int64_t *indices;
    float *values;
    int64_t *labels;
};

static struct samples read_all(const weft_dataset *ds)
{
    struct samples s = {.n = weft_dataset_length(ds)};
    cr_assert_geq(weft_dataset_num_fields(ds), 2);
    const struct weft_dataset_field *fi = weft_dataset_field(ds, 0);
    const struct weft_dataset_field *fv = weft_dataset_field(ds, 1);
    cr_assert_str_eq(fi->name, "indices");
    cr_assert_eq(fi->dtype, WEFT_I64);
    cr_assert_eq(fi->ndim, 1);
    cr_assert_str_eq(fv->name, "values");
    cr_assert_eq(fv->dtype, WEFT_F32);
    cr_assert_eq(fv->ndim, 1);
    cr_assert_eq(fv->shape[0], fi->shape[0]);
    s.width = fi->shape[0];
    size_t cells = (size_t)(s.n * s.width) + 1;
    s.indices = calloc(cells, sizeof *s.indices);
    s.values = calloc(cells, sizeof *s.values);
    s.labels = calloc((size_t)s.n + 1, sizeof *s.labels);
    int64_t *order = malloc(((size_t)s.n + 1) * sizeof *order);
    for (int64_t i = 0; i < s.n; i++)
        order[i] = i;
    void *bufs[3] = {s.indices, s.values, s.labels};
    if (s.n > 0)
        cr_assert_eq(weft_dataset_read(ds, s.n, order, bufs), 0, "read: %s",
                     weft_error_message());
    free(order);
    return s;
}

static void free_samples(struct samples *s)
{
    free(s->indices);
    free(s->values);
    free(s->labels);
}

/* Sample `row` is exactly cols/vals (nnz of them) padded with -1 / 0. */
static void assert_row(const struct samples *s, int64_t row, int nnz, const int64_t *cols,
                       const float *vals)
{
    const int64_t *gi = s->indices + row * s->width;
    const float *gv = s->values + row * s->width;
    for (int64_t k = 0; k < s->width; k++) {
        int64_t ei = k < nnz ? cols[k] : -1;
        float ev = k < nnz ? vals[k] : 0.0f;
        cr_assert_eq(gi[k], ei, "row %lld slot %lld: index %lld, expected %lld", (long long)row,
                     (long long)k, (long long)gi[k], (long long)ei);
        cr_assert_eq(gv[k], ev, "row %lld slot %lld: value %.9g, expected %.9g", (long long)row,
                     (long long)k, gv[k], ev);
    }
}

/* ---- mtx: valid files -------------------------------------------------------------------- */

Test(io_sparse, mtx_rows_are_samples_padded_to_the_longest_row)
{
    /* 3 x 5, entries in column-major order as most tools write them, comments, a blank
     * line; row 2 (1-based) is empty. */
    weft_dataset *ds = mtx_ok("%%MatrixMarket matrix coordinate real general\n"
                              "% a comment\n"
                              "%another\n"
                              "3 5 5\n"
                              "1 1 1.5\n"
                              "3 2 -2\n"
                              "\n"
                              "1 4 0.25\n"
                              "3 5 1e-3\n"
                              "1 5 7\n");
    cr_assert_eq(weft_dataset_length(ds), 3);
    cr_assert_eq(weft_dataset_num_fields(ds), 2);
    cr_assert_str_eq(weft_dataset_reader_name(ds), "mtx");
    cr_assert_eq(weft_dataset_field(ds, 0)->num_classes, 5, "indices lie in [0, columns)");
    cr_assert_eq(weft_dataset_field(ds, 1)->num_classes, 0);
    struct samples s = read_all(ds);
    cr_assert_eq(s.width, 3);
    assert_row(&s, 0, 3, (int64_t[]){0, 3, 4}, (float[]){1.5f, 0.25f, 7.0f});
    assert_row(&s, 1, 0, NULL, NULL);
    assert_row(&s, 2, 2, (int64_t[]){1, 4}, (float[]){-2.0f, 1e-3f});
    free_samples(&s);

    /* Any order of sample indices, repeated. */
    int64_t idx[6];
    float val[6];
    void *bufs[2] = {idx, val};
    cr_assert_eq(weft_dataset_read(ds, 2, (int64_t[]){2, 2}, bufs), 0);
    cr_assert_eq(idx[0], 1);
    cr_assert_eq(idx[3], 1);
    cr_assert_eq(idx[5], -1);
    weft_dataset_close(ds);
}

Test(io_sparse, mtx_header_keywords_are_case_insensitive_and_crlf_is_accepted)
{
    weft_dataset *ds = mtx_ok("%%matrixmarket MATRIX Coordinate Real GENERAL\r\n"
                              "2 2 1\r\n"
                              "2 1 3.0\r\n");
    struct samples s = read_all(ds);
    assert_row(&s, 0, 0, NULL, NULL);
    assert_row(&s, 1, 1, (int64_t[]){0}, (float[]){3.0f});
    free_samples(&s);
    weft_dataset_close(ds);
}

Test(io_sparse, mtx_symmetric_mirrors_the_entries_off_the_diagonal)
{
    weft_dataset *ds = mtx_ok("%%MatrixMarket matrix coordinate real symmetric\n"
                              "3 3 4\n"
                              "1 1 1\n"
                              "2 1 2\n"
                              "3 1 3\n"
                              "3 3 4\n");
    struct samples s = read_all(ds);
    cr_assert_eq(s.width, 3);
    assert_row(&s, 0, 3, (int64_t[]){0, 1, 2}, (float[]){1, 2, 3});
    assert_row(&s, 1, 1, (int64_t[]){0}, (float[]){2});
    assert_row(&s, 2, 2, (int64_t[]){0, 2}, (float[]){3, 4});
    free_samples(&s);
    weft_dataset_close(ds);
}

Test(io_sparse, mtx_pattern_entries_have_value_one_and_duplicates_stay_one)
{
    weft_dataset *ds = mtx_ok("%%MatrixMarket matrix coordinate pattern general\n"
                              "2 3 4\n"
                              "1 3\n"
                              "1 2\n"
                              "2 1\n"
                              "1 3\n");
    struct samples s = read_all(ds);
    cr_assert_eq(s.width, 2);
    assert_row(&s, 0, 2, (int64_t[]){1, 2}, (float[]){1, 1});
    assert_row(&s, 1, 1, (int64_t[]){0}, (float[]){1});
    free_samples(&s);
    weft_dataset_close(ds);
}

Test(io_sparse, mtx_integer_values_and_duplicates_are_summed_as_scipy_does)
{
    weft_dataset *ds = mtx_ok("%%MatrixMarket matrix coordinate integer general\n"
                              "1 4 3\n"
                              "1 2 -7\n"
                              "1 4 5\n"
                              "1 2 +10\n");
    struct samples s = read_all(ds);
    cr_assert_eq(s.width, 2);
    assert_row(&s, 0, 2, (int64_t[]){1, 3}, (float[]){3, 5});
    free_samples(&s);
    weft_dataset_close(ds);
}

Test(io_sparse, mtx_reads_gzip_files_by_content)
{
    write_gzip("m.mtx.gz", "%%MatrixMarket matrix coordinate real general\n"
                           "2 2 2\n1 2 0.5\n2 2 -1\n");
    weft_dataset *ds = weft_dataset_open(weft_config_options(tu_config("[data]\nreader = mtx\npath = m.mtx.gz\n"), "data"));
    if (!ds && strstr(weft_error_message(), "without zlib")) {
        weft_error_clear();
        TU_SKIP_TEST("weft-io was built without zlib");
    }
    cr_assert_not_null(ds, "open: %s", weft_error_message());
    struct samples s = read_all(ds);
    assert_row(&s, 0, 1, (int64_t[]){1}, (float[]){0.5f});
    assert_row(&s, 1, 1, (int64_t[]){1}, (float[]){-1.0f});
    free_samples(&s);
    weft_dataset_close(ds);
}

Test(io_sparse, mtx_empty_matrix_has_samples_of_width_zero)
{
    weft_dataset *ds = mtx_ok("%%MatrixMarket matrix coordinate real general\n4 6 0\n");
    cr_assert_eq(weft_dataset_length(ds), 4);
    cr_assert_eq(weft_dataset_field(ds, 0)->shape[0], 0);
    weft_dataset_close(ds);
}

Test(io_sparse, mtx_sizes_the_file_claims_allocate_nothing)
{
    /* 10^18 rows and columns hold one entry: a valid matrix, stored as its one row. */
    weft_dataset *ds = mtx_ok("%%MatrixMarket matrix coordinate real general\n"
                              "1000000000000000000 1000000000000000000 1\n"
                              "999999999999999999 1000000000000000000 2\n");
    cr_assert_eq(weft_dataset_length(ds), 1000000000000000000LL);
    cr_assert_eq(weft_dataset_field(ds, 0)->num_classes, 1000000000000000000LL);
    int64_t idx[2];
    float val[2];
    void *bufs[2] = {idx, val};
    cr_assert_eq(weft_dataset_read(ds, 2, (int64_t[]){999999999999999998LL, 5}, bufs), 0);
    cr_assert_eq(idx[0], 999999999999999999LL);
    cr_assert_eq(val[0], 2.0f);
    cr_assert_eq(idx[1], -1);
    weft_dataset_close(ds);
    /* 10^18 claimed entries, two present. */
    mtx_fails("%%MatrixMarket matrix coordinate real general\n"
              "5 5 1000000000000000000\n1 1 1\n2 2 2\n",
              "m.mtx:4: the file ends after 2 of the 1000000000000000000 entries the size line "
              "(line 2) declares");
}

/* ---- mtx: malformed files -------------------------------------------------------------- */

Test(io_sparse, mtx_rejects_a_missing_or_foreign_header)
{
    mtx_fails("", "m.mtx:1:1: empty file: expected the Matrix Market header '%%MatrixMarket "
                  "matrix coordinate real|integer|pattern general|symmetric'");
    mtx_fails("3 3 1\n1 1 1\n", "m.mtx:1:1: expected the Matrix Market header '%%MatrixMarket "
                                "matrix coordinate real|integer|pattern general|symmetric', "
                                "found '3 3 1'");
    mtx_fails("%%MatrixMarket vector coordinate real general\n",
              "m.mtx:1:16: object 'vector' is not supported: expected 'matrix'");
    mtx_fails("%%MatrixMarket matrix\n", "m.mtx:1:22: the header ends early: expected the format "
                                         "'coordinate'");
    mtx_fails("%%MatrixMarket matrix sparse real general\n",
              "m.mtx:1:23: format 'sparse': expected 'coordinate'");
    mtx_fails("%%MatrixMarket matrix coordinate real general extra\n",
              "m.mtx:1:47: unexpected 'extra' after the header: expected the end of the line");
}

Test(io_sparse, mtx_refuses_dense_complex_hermitian_and_skew_symmetric_files_by_name)
{
    mtx_fails("%%MatrixMarket matrix array real general\n2 2\n1\n2\n3\n4\n",
              "m.mtx:1:23: format 'array' (a dense matrix) is not supported: expected "
              "'coordinate' (a sparse one)");
    mtx_fails("%%MatrixMarket matrix coordinate complex general\n1 1 1\n1 1 1 0\n",
              "m.mtx:1:34: field 'complex' is not supported: expected real, integer or pattern");
    mtx_fails("%%MatrixMarket matrix coordinate real hermitian\n",
              "m.mtx:1:39: symmetry 'hermitian' is not supported: expected general or symmetric");
    mtx_fails("%%MatrixMarket matrix coordinate real skew-symmetric\n",
              "m.mtx:1:39: symmetry 'skew-symmetric' is not supported: expected general or "
              "symmetric");
    mtx_fails("%%MatrixMarket matrix coordinate real\n",
              "m.mtx:1:38: the header ends early: expected the symmetry general or symmetric");
}

Test(io_sparse, mtx_reports_a_missing_or_malformed_size_line)
{
    mtx_fails("%%MatrixMarket matrix coordinate real general\n% only comments\n\n",
              "m.mtx:3: the file ends before the size line: expected 'rows columns entries'");
    mtx_fails("%%MatrixMarket matrix coordinate real general\n3 x 1\n",
              "m.mtx:2:3: expected the number of columns (an integer >= 0) in the size line 'rows "
              "columns entries', found 'x'");
    mtx_fails("%%MatrixMarket matrix coordinate real general\n3 3\n",
              "m.mtx:2:4: the size line ends early: expected the number of entries");
    mtx_fails("%%MatrixMarket matrix coordinate real general\n-3 3 1\n",
              "m.mtx:2:1: expected the number of rows (an integer >= 0)");
    mtx_fails("%%MatrixMarket matrix coordinate real general\n99999999999999999999 3 1\n",
              "m.mtx:2:1: expected the number of rows (an integer >= 0) in the size line 'rows "
              "columns entries', found '99999999999999999999'");
    mtx_fails("%%MatrixMarket matrix coordinate real general\n3 3 1 4\n",
              "m.mtx:2:7: unexpected '4' after the size line");
    mtx_fails("%%MatrixMarket matrix coordinate real symmetric\n3 4 1\n",
              "m.mtx:2:1: a symmetric matrix must be square: found 3 rows and 4 columns");
}

Test(io_sparse, mtx_checks_the_number_of_entries_against_the_size_line)
{
    mtx_fails("%%MatrixMarket matrix coordinate real general\n3 3 3\n1 1 1\n2 2 2\n",
              "m.mtx:4: the file ends after 2 of the 3 entries the size line (line 2) declares");
    mtx_fails("%%MatrixMarket matrix coordinate real general\n3 3 1\n1 1 1\n% c\n2 2 2\n",
              "m.mtx:5:1: one entry more than the 1 the size line (line 2) declares");
}

Test(io_sparse, mtx_reports_bad_entries_with_line_and_column)
{
    const char *head = "%%MatrixMarket matrix coordinate real general\n3 4 1\n";
    char text[256];
#define ENTRY(line) (snprintf(text, sizeof text, "%s%s\n", head, line), text)
    mtx_fails(ENTRY("0 1 1"), "m.mtx:3:1: row index 0 is out of range: expected 1 to 3 (the "
                              "matrix has 3 rows; Matrix Market indices are 1-based)");
    mtx_fails(ENTRY("1 5 1"), "m.mtx:3:3: column index 5 is out of range: expected 1 to 4 (the "
                              "matrix has 4 columns; Matrix Market indices are 1-based)");
    mtx_fails(ENTRY("a 1 1"), "m.mtx:3:1: expected a row index (an integer from 1 to 3), found "
                              "'a'");
    mtx_fails(ENTRY("  2  1.5 1"), "m.mtx:3:6: expected a column index (an integer from 1 to 4), "
                                   "found '1.5'");
    mtx_fails(ENTRY("1"), "m.mtx:3:2: the entry ends after the row index: expected 'row column "
                          "value'");
    mtx_fails(ENTRY("1 1"), "m.mtx:3:4: the entry ends after the column index: expected 'row "
                            "column value'");
    mtx_fails(ENTRY("1 1 abc"), "m.mtx:3:5: expected a value (a finite number), found 'abc'");
    mtx_fails(ENTRY("1 1 nan"), "m.mtx:3:5: expected a value (a finite number), found 'nan'");
    mtx_fails(ENTRY("1 1 1e39"), "m.mtx:3:5: value 1e39 is out of range for float32");
    mtx_fails(ENTRY("1 1 2 7"), "m.mtx:3:7: unexpected '7' after the entry: expected the end of "
                                "the line (entries are 'row column value')");
#undef ENTRY
    mtx_fails("%%MatrixMarket matrix coordinate integer general\n2 2 1\n1 1 1.5\n",
              "m.mtx:3:5: expected an integer value (the header says 'integer'), found '1.5'");
    mtx_fails("%%MatrixMarket matrix coordinate pattern general\n2 2 1\n1 1 1\n",
              "m.mtx:3:5: unexpected '1' after the entry: expected the end of the line (entries "
              "are 'row column')");
    tu_write_bytes("m.mtx", "%%MatrixMarket matrix coordinate real general\n1 1 1\n1 \0 1\n", 57);
    tu_open_fails("[data]\nreader = mtx\npath = m.mtx\n", WEFT_ERR_IO,
                  "m.mtx:3: NUL byte in a text file; expected Matrix Market text");
}

Test(io_sparse, mtx_config_errors_name_the_key)
{
    tu_open_fails("[data]\nreader = mtx\n", WEFT_ERR_CONFIG,
                  "[data] missing key 'path': expected the path of a Matrix Market (.mtx) file");
    tu_open_fails("[data]\nreader = mtx\npath = nowhere.mtx\n", WEFT_ERR_IO,
                  "nowhere.mtx: cannot open: No such file or directory");
}

/* ---- libsvm: valid files ----------------------------------------------------------------- */

Test(io_sparse, libsvm_reads_labels_indices_and_values_padded_to_the_longest_line)
{
    weft_dataset *ds = svm_ok("# a comment line\n"
                              "2 1:0.5 3:-1.25 10:4 # trailing comment\n"
                              "\n"
                              "0\t2:1e2\n"
                              "1\n"
                              "  1 4:3.0   5:0.125  \n",
                              "");
    cr_assert_eq(weft_dataset_length(ds), 4);
    cr_assert_eq(weft_dataset_num_fields(ds), 3);
    const struct weft_dataset_field *fl = weft_dataset_field(ds, 2);
    cr_assert_str_eq(fl->name, "label");
    cr_assert_eq(fl->dtype, WEFT_I64);
    cr_assert_eq(fl->ndim, 0);
    cr_assert_eq(fl->num_classes, 3, "largest label + 1");
    cr_assert_eq(weft_dataset_field(ds, 0)->num_classes, 10, "features: the largest index");
    struct samples s = read_all(ds);
    cr_assert_eq(s.width, 3);
    assert_row(&s, 0, 3, (int64_t[]){0, 2, 9}, (float[]){0.5f, -1.25f, 4.0f});
    assert_row(&s, 1, 1, (int64_t[]){1}, (float[]){100.0f});
    assert_row(&s, 2, 0, NULL, NULL);
    assert_row(&s, 3, 2, (int64_t[]){3, 4}, (float[]){3.0f, 0.125f});
    cr_assert_eq(s.labels[0], 2);
    cr_assert_eq(s.labels[1], 0);
    cr_assert_eq(s.labels[2], 1);
    cr_assert_eq(s.labels[3], 1);
    free_samples(&s);
    weft_dataset_close(ds);
}

Test(io_sparse, libsvm_zero_based_indices_and_the_features_key)
{
    weft_dataset *ds = svm_ok("1 0:1 4:2\n0 2:3\n", "zero_based = true\nfeatures = 8\n");
    cr_assert_eq(weft_dataset_field(ds, 0)->num_classes, 8);
    struct samples s = read_all(ds);
    assert_row(&s, 0, 2, (int64_t[]){0, 4}, (float[]){1, 2});
    assert_row(&s, 1, 1, (int64_t[]){2}, (float[]){3});
    free_samples(&s);
    weft_dataset_close(ds);
    ds = svm_ok("1 1:1 4:2\n0 2:3\n", "");
    cr_assert_eq(weft_dataset_field(ds, 0)->num_classes, 4, "1-based: the largest index");
    weft_dataset_close(ds);
}

Test(io_sparse, libsvm_binary_minus_one_plus_one_labels_become_zero_and_one)
{
    weft_dataset *ds = svm_ok("+1 1:1\n-1 2:1\n1 3:1\n-1.0 1:2\n", "");
    cr_assert_eq(weft_dataset_field(ds, 2)->num_classes, 2);
    struct samples s = read_all(ds);
    cr_assert_eq(s.labels[0], 1);
    cr_assert_eq(s.labels[1], 0);
    cr_assert_eq(s.labels[2], 1);
    cr_assert_eq(s.labels[3], 0);
    free_samples(&s);
    weft_dataset_close(ds);
    /* A test file holding only -1 still has two classes. */
    ds = svm_ok("-1 1:1\n", "");
    cr_assert_eq(weft_dataset_field(ds, 2)->num_classes, 2);
    weft_dataset_close(ds);
    /* Only +1: class 1 in both conventions. */
    ds = svm_ok("+1 1:1\n", "");
    cr_assert_eq(weft_dataset_field(ds, 2)->num_classes, 2);
    s = read_all(ds);
    cr_assert_eq(s.labels[0], 1);
    free_samples(&s);
    weft_dataset_close(ds);
}

Test(io_sparse, libsvm_num_classes_key_is_kept_and_checked)
{
    weft_dataset *ds = svm_ok("0 1:1\n1 2:1\n", "num_classes = 5\n");
    cr_assert_eq(weft_dataset_field(ds, 2)->num_classes, 5);
    weft_dataset_close(ds);
    svm_fails("0 1:1\n5 2:1\n", "num_classes = 5\n",
              "d.svm:2:1: label 5 is out of range: expected 0 <= label < 5 (num_classes)");
}

Test(io_sparse, libsvm_reads_gzip_files_and_crlf_lines)
{
    write_gzip("d.svm.gz", "1 1:0.5 3:2\r\n0 2:1\r\n");
    weft_dataset *ds = weft_dataset_open(weft_config_options(tu_config("[data]\nreader = libsvm\npath = d.svm.gz\n"), "data"));
    if (!ds && strstr(weft_error_message(), "without zlib")) {
        weft_error_clear();
        TU_SKIP_TEST("weft-io was built without zlib");
    }
    cr_assert_not_null(ds, "open: %s", weft_error_message());
    struct samples s = read_all(ds);
    assert_row(&s, 0, 2, (int64_t[]){0, 2}, (float[]){0.5f, 2.0f});
    assert_row(&s, 1, 1, (int64_t[]){1}, (float[]){1.0f});
    cr_assert_eq(s.labels[0], 1);
    free_samples(&s);
    weft_dataset_close(ds);
}

Test(io_sparse, libsvm_values_round_as_strtod_does)
{
    /* The fast path and strtod must agree: long mantissas, big and tiny exponents. */
    static const char *const texts[] = {
        "0.1",  "3.14159265358979323846", "1e-30",         "-2.5E+3", "123456789012345678901",
        ".5",   "7.",                      "0.000001234567", "1e22",    "1e23",
        "-0",   "0.30000000000000004",     "9007199254740993", "4.9e-324", "340282346638528859811704183484516925440",
    };
    char text[2048] = "";
    size_t n = sizeof texts / sizeof *texts;
    for (size_t i = 0; i < n; i++) {
        char pair[96];
        snprintf(pair, sizeof pair, " %zu:%s", i + 1, texts[i]);
        strcat(text, pair);
    }
    char line[2100];
    snprintf(line, sizeof line, "0%s\n", text);
    weft_dataset *ds = svm_ok(line, "");
    struct samples s = read_all(ds);
    cr_assert_eq(s.width, (int64_t)n);
    for (size_t i = 0; i < n; i++) {
        float want = (float)strtod(texts[i], NULL);
        cr_assert_eq(memcmp(&s.values[i], &want, sizeof want), 0, "'%s': got %.9g, expected %.9g",
                     texts[i], s.values[i], want);
    }
    free_samples(&s);
    weft_dataset_close(ds);
}

Test(io_sparse, libsvm_huge_indices_allocate_nothing)
{
    weft_dataset *ds = svm_ok("1 1000000000000000000:2\n", "");
    cr_assert_eq(weft_dataset_field(ds, 0)->num_classes, 1000000000000000000LL);
    struct samples s = read_all(ds);
    assert_row(&s, 0, 1, (int64_t[]){999999999999999999LL}, (float[]){2});
    free_samples(&s);
    weft_dataset_close(ds);
}

/* ---- libsvm: malformed files ---------------------------------------------------------- */

Test(io_sparse, libsvm_rejects_empty_files_and_lines_without_labels)
{
    svm_fails("", "", "d.svm: no samples: the file is empty or holds only comments and blank "
                      "lines; expected lines like '1 3:0.5 7:1.25'");
    svm_fails("# nothing\n\n", "", "d.svm: no samples");
    svm_fails("1 1:1\n3:0.5 4:1\n", "", "d.svm:2:1: expected a label before the features, found "
                                        "'3:0.5' (every line starts with its label)");
    svm_fails("abc 1:1\n", "", "d.svm:1:1: expected a class label (an integer), found 'abc'");
    svm_fails("0.5 1:1\n", "", "d.svm:1:1: label 0.5 is not an integer: expected a class label");
    svm_fails("-2 1:1\n", "", "d.svm:1:1: label -2: expected a class index >= 0, or the binary "
                              "labels -1 and +1");
}

Test(io_sparse, libsvm_refuses_labels_too_large_for_a_class_count_naming_line_and_column)
{
    /* the largest label + 1 is the class count: INT64_MAX + 1 overflowed (UBSan) and the
     * error came later, from the trainer, naming no file */
    svm_fails("0 1:1\n9223372036854775807 2:1\n", "",
              "d.svm:2:1: label 9223372036854775807 is too large: expected a class index below "
              "2147483647");
    svm_fails("0 1:1\n\n 2147483647 2:1\n", "", "d.svm:3:2: label 2147483647 is too large");
    svm_fails("9223372036854775808 1:1\n", "", "d.svm:1:1: label 9223372036854775808 is not an "
                                                "integer");
    svm_fails("4e15 1:1\n", "", "d.svm:1:1: label 4000000000000000 is too large");
    svm_fails("-9223372036854775808 1:1\n", "", "d.svm:1:1: label -9223372036854775808: "
                                                 "expected a class index >= 0");
    /* the largest that fits, and one that num_classes bounds */
    weft_dataset *ds = svm_ok("2147483646 1:1\n", "");
    cr_assert_eq(weft_dataset_field(ds, 2)->num_classes, 2147483647);
    weft_dataset_close(ds);
    svm_fails("9223372036854775807 1:1\n", "num_classes = 4\n",
              "d.svm:1:1: label 9223372036854775807 is out of range: expected 0 <= label < 4");
}

Test(io_sparse, libsvm_refuses_a_mix_of_label_conventions)
{
    svm_fails("-1 1:1\n+1 1:1\n0 1:1\n", "",
              "d.svm:3:1: label 0 after label -1 on line 1: expected class indices 0, 1, 2, ... "
              "or the binary labels -1 and +1, not a mix");
    svm_fails("2 1:1\n\n-1 1:1\n", "", "d.svm:3:1: label -1 after label 2 on line 1");
}

Test(io_sparse, libsvm_checks_indices_base_range_and_order)
{
    svm_fails("1 0:1\n", "", "d.svm:1:3: feature index 0 in a file read as 1-based: expected an "
                             "index >= 1 (set zero_based = true for 0-based files)");
    svm_fails("1 1:1 6:1\n", "features = 5\n",
              "d.svm:1:7: feature index 6 is out of range: expected at most 5 (features = 5, "
              "1-based)");
    svm_fails("1 0:1 5:1\n", "features = 5\nzero_based = true\n",
              "d.svm:1:7: feature index 5 is out of range: expected at most 4 (features = 5, "
              "0-based)");
    svm_fails("1 2:1 7:1 3:1\n", "", "d.svm:1:11: feature index 3 after index 7: indices must "
                                     "increase within a line");
    svm_fails("1 2:1 2:1\n", "", "d.svm:1:7: feature index 2 after index 2");
    svm_fails("1 -3:1\n", "", "d.svm:1:3: expected a feature index (an integer >= 1) before ':', "
                              "found '-3'");
    svm_fails("1 x:1\n", "", "d.svm:1:3: expected a feature index (an integer >= 1) before ':', "
                             "found 'x'");
    svm_fails("1 99999999999999999999:1\n", "", "d.svm:1:3: expected a feature index");
}

Test(io_sparse, libsvm_reports_junk_tokens_and_bad_values)
{
    svm_fails("1 1:1\n0 2:1 junk\n", "", "d.svm:2:7: expected 'index:value', found 'junk'");
    svm_fails("1 3:abc\n", "", "d.svm:1:5: feature 3: expected a value (a finite number), found "
                               "'abc'");
    svm_fails("1 3:\n", "", "d.svm:1:5: feature 3: expected a value (a finite number), found ''");
    svm_fails("1 3:inf\n", "", "d.svm:1:5: feature 3: expected a value (a finite number), found "
                               "'inf'");
    svm_fails("1 3:0x10\n", "", "d.svm:1:5: feature 3: expected a value (a finite number), found "
                                "'0x10'");
    svm_fails("1 3:1e39\n", "", "d.svm:1:5: feature 3: value 1e39 is out of range for float32");
    svm_fails("1 qid:3 1:1\n", "", "d.svm:1:3: query ids ('qid:3') are not supported: expected "
                                   "'index:value'");
    tu_write_bytes("d.svm", "1 1:1\n0 2\0:1\n", 13);
    tu_open_fails("[data]\nreader = libsvm\npath = d.svm\n", WEFT_ERR_IO,
                  "d.svm:2: NUL byte in a text file; expected libsvm text");
}

Test(io_sparse, libsvm_config_errors_name_the_key)
{
    tu_write_text("d.svm", "1 1:1\n");
    tu_open_fails("[data]\nreader = libsvm\n", WEFT_ERR_CONFIG,
                  "[data] missing key 'path': expected the path of a libsvm/svmlight file");
    tu_open_fails("[data]\nreader = libsvm\npath = d.svm\nfeatures = 0\n", WEFT_ERR_CONFIG,
                  "[data] features = '0': expected an integer from 1 to");
    tu_open_fails("[data]\nreader = libsvm\npath = d.svm\nzero_based = maybe\n", WEFT_ERR_CONFIG,
                  "zero_based");
    tu_open_fails("[data]\nreader = libsvm\npath = d.svm\nnum_classes = -1\n", WEFT_ERR_CONFIG,
                  "[data] num_classes = '-1': expected an integer from 1 to");
}

/* ---- weft-train's sparse_linear layer ------------------------------------------------------ */

/* The weft-train next to the plugins under test (build/apps/weft-train), or NULL. */
static const char *weft_train_path(void)
{
    static char path[1024];
    const char *plugins = getenv("WEFT_PLUGIN_PATH");
    if (!plugins)
        return NULL;
    snprintf(path, sizeof path, "%s/../apps/weft-train", plugins);
    return access(path, X_OK) == 0 ? path : NULL;
}

/* Runs weft-train on dir/train.ini with `args`; returns its exit code, its output in out. */
static int run_weft_train(const char *args, char *out, size_t size)
{
    const char *exe = weft_train_path();
    if (!exe)
        TU_SKIP_TEST("weft-train is not built next to the plugins");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' '%s' --overwrite %s 2>&1", exe, tu_tmp_path("train.ini"), args);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p, "popen failed");
    size_t n = fread(out, 1, size - 1, p);
    out[n] = '\0';
    int status = pclose(p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Six samples of five features in three classes; the same rows as a dense matrix. */
static const char tiny_svm[] = "0 1:0.5 4:-1.5\n"
                               "1 2:2 3:0.25 5:1\n"
                               "2\n"
                               "1 1:-1 5:3\n"
                               "0 3:1.5\n"
                               "2 1:0.75 2:-0.5 3:1 4:2 5:-2\n";
static const double tiny_dense[6][5] = {
    {0.5, 0, 0, -1.5, 0}, {0, 2, 0.25, 0, 1}, {0, 0, 0, 0, 0},
    {-1, 0, 0, 0, 3},     {0, 0, 1.5, 0, 0},  {0.75, -0.5, 1, 2, -2},
};
static const int64_t tiny_labels[6] = {0, 1, 2, 1, 0, 2};

/* A config training sparse_linear(5 -> 3) on tiny.svm in one batch of six with plain SGD
 * at learning rate lr, writing its checkpoint and log into dir. */
static void write_train_ini(double lr, const char *extra_layers)
{
    char ini[2048];
    snprintf(ini, sizeof ini,
             "[runtime]\nseed = 7\n"
             "[data]\nreader = libsvm\npath = tiny.svm\nfeatures = 5\nbatch_size = 6\n"
             "%s"
             "[layer.fc]\ntype = sparse_linear\nin_features = 5\nout_features = 3\n"
             "[loss]\ntype = cross_entropy\n"
             "[optimizer]\ntype = sgd\nlr = %g\n"
             "[train]\nepochs = 1\ncheckpoint = %s\nlog = %s\n",
             extra_layers, lr, tu_tmp_path("model.safetensors"), tu_tmp_path("log.csv"));
    tu_write_text("train.ini", ini);
    tu_write_text("tiny.svm", tiny_svm);
}

/* The first epoch's train_loss from dir/log.csv. */
static double logged_loss(void)
{
    FILE *f = fopen(tu_tmp_path("log.csv"), "r");
    cr_assert_not_null(f, "no log.csv");
    char header[256];
    int epoch;
    double loss = NAN;
    cr_assert_not_null(fgets(header, sizeof header, f));
    cr_assert_eq(fscanf(f, "%d,%lf", &epoch, &loss), 2);
    fclose(f);
    return loss;
}

/* weight [3, 5] and bias [3] of the checkpoint, as doubles. */
static void load_params(double weight[15], double bias[3])
{
    struct weft_tensor_dict *d = NULL;
    cr_assert_eq(weft_safetensors_load(tu_tmp_path("model.safetensors"), WEFT_CPU, &d, NULL), 0, "%s",
                 weft_error_message());
    cr_assert_eq(weft_tensor_dict_len(d), 2, "the checkpoint holds Linear's two parameters");
    weft_tensor *w = weft_tensor_dict_get(d, "0.weight"), *b = weft_tensor_dict_get(d, "0.bias");
    cr_assert_not_null(w, "no 0.weight");
    cr_assert_not_null(b, "no 0.bias");
    tu_assert_shape(w, 2, (int64_t[]){3, 5});
    tu_assert_shape(b, 1, (int64_t[]){3});
    tu_read(w, weight);
    tu_read(b, bias);
    weft_tensor_release(w);
    weft_tensor_release(b);
    weft_tensor_dict_free(d);
}

/* Mean cross entropy of dense logits X W^T + b, and its gradients w.r.t. W and b, in
 * double. */
static double dense_reference(const double weight[15], const double bias[3], double grad[15],
                              double grad_bias[3])
{
    double loss = 0;
    for (int k = 0; k < 15; k++)
        grad[k] = 0;
    for (int c = 0; c < 3; c++)
        grad_bias[c] = 0;
    for (int r = 0; r < 6; r++) {
        double z[3], zmax = -INFINITY, sum = 0;
        for (int c = 0; c < 3; c++) {
            z[c] = bias[c];
            for (int j = 0; j < 5; j++)
                z[c] += tiny_dense[r][j] * weight[c * 5 + j];
            zmax = fmax(zmax, z[c]);
        }
        for (int c = 0; c < 3; c++)
            sum += exp(z[c] - zmax);
        loss += log(sum) + zmax - z[tiny_labels[r]];
        for (int c = 0; c < 3; c++) {
            double dz = (exp(z[c] - zmax) / sum - (c == tiny_labels[r])) / 6;
            grad_bias[c] += dz;
            for (int j = 0; j < 5; j++)
                grad[c * 5 + j] += dz * tiny_dense[r][j];
        }
    }
    return loss / 6;
}

Test(io_sparse, sparse_linear_trains_as_a_dense_linear_layer_on_the_same_rows)
{
    char out[8192];
    /* lr 0: the logged loss is the initial weights' (which the checkpoint holds). */
    write_train_ini(0.0, "");
    int code = run_weft_train("", out, sizeof out);
    cr_assert_eq(code, 0, "weft-train failed (%d):\n%s", code, out);
    cr_assert(strstr(out, "18 parameters"), "weight [3, 5] and bias [3]:\n%s", out);
    double w0[15], b0[3], grad[15], grad_bias[3];
    load_params(w0, b0);
    double ref = dense_reference(w0, b0, grad, grad_bias);
    cr_assert_float_eq(logged_loss(), ref, 2e-6, "loss %.7f, dense reference %.7f", logged_loss(),
                       ref);
    for (int k = 0; k < 15; k++) /* nn.Linear's init: U(-1/sqrt(5), 1/sqrt(5)) */
        cr_assert_leq(fabs(w0[k]), 1 / sqrt(5.0) + 1e-7);

    /* lr 1, one step from the same seed: W1 = W0 - dL/dW. */
    write_train_ini(1.0, "");
    code = run_weft_train("", out, sizeof out);
    cr_assert_eq(code, 0, "weft-train failed (%d):\n%s", code, out);
    double w1[15], b1[3];
    load_params(w1, b1);
    for (int k = 0; k < 15; k++)
        cr_assert_float_eq(w0[k] - w1[k], grad[k], 1e-5, "weight %d: step %.7f, gradient %.7f", k,
                           w0[k] - w1[k], grad[k]);
    for (int c = 0; c < 3; c++)
        cr_assert_float_eq(b0[c] - b1[c], grad_bias[c], 1e-5, "bias %d: step %.7f, gradient %.7f",
                           c, b0[c] - b1[c], grad_bias[c]);
}

Test(io_sparse, sparse_linear_config_errors_name_the_layer_and_the_data)
{
    char out[8192];
    write_train_ini(0.1, "[layer.first]\ntype = relu\n");
    int code = run_weft_train("", out, sizeof out);
    cr_assert_eq(code, 2, "exit code %d:\n%s", code, out);
    cr_assert(strstr(out, "[layer.fc] type = sparse_linear must be the model's first layer: its "
                          "input is the batch's sparse fields"),
              "%s", out);

    write_train_ini(0.1, "");
    code = run_weft_train("--set layer.fc.in_features=4", out, sizeof out);
    cr_assert_eq(code, 2, "exit code %d:\n%s", code, out);
    cr_assert(strstr(out, "[layer.fc] in_features = 4, but the data of [data] has 5 features "
                          "(its 'indices' lie in [0, 5))"),
              "%s", out);

    code = run_weft_train("--set layer.fc.values=vals", out, sizeof out);
    cr_assert_eq(code, 2, "exit code %d:\n%s", code, out);
    cr_assert(strstr(out, "[layer.fc] values = 'vals': the data of [data] (reader libsvm) has no "
                          "such field (its fields: indices, values, label)"),
              "%s", out);

    /* Matrix Market rows carry no labels to train on. */
    tu_write_text("m.mtx", "%%MatrixMarket matrix coordinate real general\n2 5 1\n1 3 1\n");
    tu_write_text("train.ini", "[data]\nreader = mtx\npath = m.mtx\n"
                            "[layer.fc]\ntype = sparse_linear\nin_features = 5\nout_features = 2\n");
    code = run_weft_train("", out, sizeof out);
    cr_assert_eq(code, 2, "exit code %d:\n%s", code, out);
    cr_assert(strstr(out, "the data of [data] (reader mtx) has no 'label' field for the loss (its "
                          "fields: indices, values)"),
              "%s", out);
}
