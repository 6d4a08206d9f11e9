/* tests/test_checkpoint.c: tensor dicts, metadata maps and safetensors files. */
#define _GNU_SOURCE /* nftw */
#include "testutil.h"

#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <weft/checkpoint.h>

/* ---- helpers ------------------------------------------------------------------------ */

static const char *test_dir;

static void setup(void)
{
    tu_setup();
    test_dir = tu_tmpdir_create("checkpoint");
}

static void teardown(void)
{
    tu_tmpdir_remove();
    tu_teardown();
}

TestSuite(checkpoint, .init = setup, .fini = teardown);

static void write_bytes(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "cannot create %s", path);
    cr_assert_eq(fwrite(data, 1, n, f), n);
    cr_assert_eq(fclose(f), 0);
}

/* The whole file, malloc'd; *n its length. */
static unsigned char *read_bytes(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc(len > 0 ? (size_t)len : 1);
    cr_assert_not_null(buf);
    cr_assert_eq(fread(buf, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    *n = (size_t)len;
    return buf;
}

/* A safetensors file with exactly this header text (no padding added) and data_len
 * bytes of data (0, 1, 2, ...). */
static void write_st(const char *path, const char *header, size_t data_len)
{
    size_t n = strlen(header);
    unsigned char *buf = malloc(8 + n + data_len);
    cr_assert_not_null(buf);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)((uint64_t)n >> (8 * i));
    memcpy(buf + 8, header, n);
    for (size_t i = 0; i < data_len; i++)
        buf[8 + n + i] = (unsigned char)i;
    write_bytes(path, buf, 8 + n + data_len);
    free(buf);
}

/* Loading fails with code and a message containing `substring`, and sets no outputs. */
static void expect_load_error(const char *path, int code, const char *substring)
{
    struct weft_tensor_dict *d = (void *)1;
    struct weft_metadata *m = (void *)1;
    int rc = weft_safetensors_load(path, WEFT_CPU, &d, &m);
    cr_assert_lt(rc, 0, "loading %s succeeded", path);
    cr_assert_null(d);
    cr_assert_null(m);
    tu_assert_error(code, substring);
}

/* Loads a header written with write_st and expects the error. */
static void expect_header_error(const char *header, size_t data_len, int code,
                                const char *substring)
{
    const char *path = tu_tmp_path("bad.safetensors");
    write_st(path, header, data_len);
    expect_load_error(path, code, substring);
}

static bool file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* Number of entries in test_dir whose name contains ".tmp.". */
static int count_temp_files(void)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "ls -a '%s' | grep -c '\\.tmp\\.' > '%s/.count'", test_dir, test_dir);
    if (system(cmd) == -1)
        return -1;
    size_t n;
    unsigned char *text = read_bytes(tu_tmp_path(".count"), &n);
    int count = atoi((char *)text);
    free(text);
    remove(tu_tmp_path(".count"));
    return count;
}

/* Random values that every dtype represents exactly after conversion. */
static void values_for(enum weft_dtype dt, double *v, int64_t n, uint64_t *state)
{
    double lo = dt == WEFT_BOOL || dt == WEFT_U8 ? 0 : -100;
    double hi = dt == WEFT_BOOL ? 2 : 100;
    tu_random_values(v, n, lo, hi, state);
    if (!weft_dtype_is_floating(dt))
        for (int64_t i = 0; i < n; i++)
            v[i] = (double)(int64_t)v[i];
}

/* The same dtype, shape and bytes (values read contiguous). */
static void assert_same_tensor(const weft_tensor *got, const weft_tensor *want)
{
    cr_assert_not_null(got, "%s", weft_error_message());
    cr_assert_eq(got->dtype, want->dtype, "dtype %s, expected %s", weft_dtype_name(got->dtype),
                 weft_dtype_name(want->dtype));
    tu_assert_shape(got, want->ndim, want->shape);
    cr_assert(weft_tensor_is_contiguous(got));
    size_t n = (size_t)weft_tensor_numel(want) * weft_tensor_itemsize(want);
    unsigned char *a = malloc(n + 1), *b = malloc(n + 1);
    cr_assert(a && b);
    cr_assert_eq(weft_tensor_read(got, a, n), 0);
    cr_assert_eq(weft_tensor_read(want, b, n), 0);
    cr_assert(memcmp(a, b, n) == 0, "values differ");
    free(a);
    free(b);
}

static struct weft_tensor_dict *dict_of(int n, const char *const *names, weft_tensor *const *ts)
{
    struct weft_tensor_dict *d = weft_tensor_dict_new();
    cr_assert_not_null(d);
    for (int i = 0; i < n; i++)
        cr_assert_eq(weft_tensor_dict_add(d, names[i], ts[i]), 0, "%s", weft_error_message());
    return d;
}

/* ---- tensor dicts ------------------------------------------------------------------- */

Test(checkpoint, a_dict_keeps_insertion_order_and_finds_entries_by_name)
{
    weft_scope_push();
    weft_tensor *a = weft_zeros(1, (int64_t[]){2}, WEFT_F32, WEFT_CPU);
    weft_tensor *b = weft_ones(1, (int64_t[]){3}, WEFT_I64, WEFT_CPU);
    struct weft_tensor_dict *d = dict_of(2, (const char *[]){"fc.weight", "fc.bias"},
                                         (weft_tensor *[]){a, b});
    cr_assert_eq(weft_tensor_dict_len(d), 2);
    cr_assert_str_eq(weft_tensor_dict_name(d, 0), "fc.weight");
    cr_assert_str_eq(weft_tensor_dict_name(d, 1), "fc.bias");
    cr_assert_eq(weft_tensor_dict_at(d, 1), b);
    cr_assert_eq(weft_tensor_dict_get(d, "fc.weight"), a);
    cr_assert_null(weft_tensor_dict_get(d, "fc.missing"));
    tu_assert_no_error();
    weft_scope_pop();
    weft_tensor_dict_free(d);
}

Test(checkpoint, a_dict_holds_its_own_references)
{
    weft_tensor *a = weft_zeros(1, (int64_t[]){2}, WEFT_F32, WEFT_CPU);
    struct weft_tensor_dict *d = dict_of(1, (const char *[]){"a"}, (weft_tensor *[]){a});
    cr_assert_eq(a->refcount, 2);
    weft_tensor_release(a);
    weft_tensor *got = weft_tensor_dict_get(d, "a"); /* a new reference: no scope open */
    cr_assert_eq(got->refcount, 2);
    weft_tensor_release(got);
    weft_tensor_dict_free(d);
}

Test(checkpoint, a_dict_rejects_a_duplicate_name)
{
    weft_scope_push();
    weft_tensor *a = weft_zeros(1, (int64_t[]){2}, WEFT_F32, WEFT_CPU);
    struct weft_tensor_dict *d = dict_of(1, (const char *[]){"0.bias"}, (weft_tensor *[]){a});
    cr_assert_lt(weft_tensor_dict_add(d, "0.bias", a), 0);
    tu_assert_error(WEFT_ERR_VALUE, "duplicate key '0.bias'");
    cr_assert_eq(weft_tensor_dict_len(d), 1);
    weft_scope_pop();
    weft_tensor_dict_free(d);
}

Test(checkpoint, a_dict_passes_a_null_tensor_through_without_a_new_error)
{
    struct weft_tensor_dict *d = weft_tensor_dict_new();
    cr_assert_lt(weft_tensor_dict_add(d, "x", NULL), 0);
    tu_assert_no_error();
    cr_assert_eq(weft_tensor_dict_len(d), 0);
    weft_tensor_dict_free(d);
}

Test(checkpoint, a_dict_index_out_of_range_is_an_index_error)
{
    struct weft_tensor_dict *d = weft_tensor_dict_new();
    cr_assert_null(weft_tensor_dict_name(d, 0));
    tu_assert_error(WEFT_ERR_INDEX, "index 0 is out of range for a tensor dict of 0 entries");
    cr_assert_null(weft_tensor_dict_at(d, 3));
    tu_assert_error(WEFT_ERR_INDEX, "index 3 is out of range");
    weft_tensor_dict_free(d);
}

Test(checkpoint, a_dict_finds_every_one_of_many_entries)
{
    weft_scope_push();
    weft_tensor *t = weft_zeros(0, NULL, WEFT_F32, WEFT_CPU);
    struct weft_tensor_dict *d = weft_tensor_dict_new();
    char name[32];
    for (int i = 0; i < 1000; i++) {
        snprintf(name, sizeof name, "layer.%d.weight", i);
        cr_assert_eq(weft_tensor_dict_add(d, name, t), 0);
    }
    for (int i = 0; i < 1000; i++) {
        snprintf(name, sizeof name, "layer.%d.weight", i);
        cr_assert_eq(weft_tensor_dict_get(d, name), t, "%s", name);
        cr_assert_str_eq(weft_tensor_dict_name(d, (size_t)i), name);
    }
    weft_scope_pop();
    weft_tensor_dict_free(d);
}

/* ---- metadata ----------------------------------------------------------------------- */

Test(checkpoint, metadata_replaces_a_value_in_place_and_keeps_order)
{
    struct weft_metadata *m = weft_metadata_new();
    cr_assert_eq(weft_metadata_set(m, "epoch", "1"), 0);
    cr_assert_eq(weft_metadata_set(m, "config", "[train]\nlr = 0.1\n"), 0);
    cr_assert_eq(weft_metadata_set(m, "epoch", "2"), 0);
    cr_assert_eq(weft_metadata_len(m), 2);
    cr_assert_str_eq(weft_metadata_key(m, 0), "epoch");
    cr_assert_str_eq(weft_metadata_value(m, 0), "2");
    cr_assert_str_eq(weft_metadata_key(m, 1), "config");
    cr_assert_str_eq(weft_metadata_get(m, "config"), "[train]\nlr = 0.1\n");
    cr_assert_null(weft_metadata_get(m, "step"));
    cr_assert_null(weft_metadata_key(m, 2));
    tu_assert_error(WEFT_ERR_INDEX, "index 2 is out of range for a metadata map of 2 entries");
    weft_metadata_free(m);
}

Test(checkpoint, metadata_integers_round_trip_through_decimal_text)
{
    struct weft_metadata *m = weft_metadata_new();
    int64_t i;
    uint64_t u;
    cr_assert_eq(weft_metadata_set_int(m, "step", -42), 0);
    cr_assert_eq(weft_metadata_set_uint(m, "rng_offset", UINT64_MAX), 0);
    cr_assert_eq(weft_metadata_set_int(m, "min", INT64_MIN), 0);
    cr_assert_str_eq(weft_metadata_get(m, "step"), "-42");
    cr_assert_str_eq(weft_metadata_get(m, "rng_offset"), "18446744073709551615");
    cr_assert_eq(weft_metadata_get_int(m, "step", &i), 0);
    cr_assert_eq(i, -42);
    cr_assert_eq(weft_metadata_get_int(m, "min", &i), 0);
    cr_assert_eq(i, INT64_MIN);
    cr_assert_eq(weft_metadata_get_uint(m, "rng_offset", &u), 0);
    cr_assert_eq(u, UINT64_MAX);
    weft_metadata_free(m);
}

Test(checkpoint, metadata_integer_getters_reject_absent_and_malformed_values)
{
    struct weft_metadata *m = weft_metadata_new();
    int64_t i = 7;
    uint64_t u = 7;
    weft_metadata_set(m, "epoch", "three");
    weft_metadata_set(m, "step", "-1");
    weft_metadata_set(m, "big", "9223372036854775808");
    weft_metadata_set(m, "spaced", " 12");
    cr_assert_lt(weft_metadata_get_int(m, "missing", &i), 0);
    tu_assert_error(WEFT_ERR_VALUE, "checkpoint metadata has no key 'missing'");
    cr_assert_lt(weft_metadata_get_int(m, "epoch", &i), 0);
    tu_assert_error(WEFT_ERR_VALUE, "checkpoint metadata 'epoch' = 'three' is not an integer");
    cr_assert_lt(weft_metadata_get_uint(m, "step", &u), 0);
    tu_assert_error(WEFT_ERR_VALUE, "'step' = '-1' is not a non-negative integer");
    cr_assert_lt(weft_metadata_get_int(m, "big", &i), 0);
    tu_assert_error(WEFT_ERR_VALUE, "'big' = '9223372036854775808' is out of the range of int64");
    cr_assert_lt(weft_metadata_get_int(m, "spaced", &i), 0);
    tu_assert_error(WEFT_ERR_VALUE, "is not an integer");
    cr_assert_eq(i, 7);
    cr_assert_eq(u, 7);
    weft_metadata_free(m);
}

/* ---- the bytes of a file ------------------------------------------------------------ */

/* What the Python library writes for {"a": torch.tensor([1., 2.])}. */
static const char tiny_expected[] =
    "\x38\0\0\0\0\0\0\0"
    "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}  "
    "\x00\x00\x80\x3f\x00\x00\x00\x40";

static void assert_file_is(const char *path, const void *expected, size_t n)
{
    size_t len;
    unsigned char *got = read_bytes(path, &len);
    cr_assert_eq(len, n, "file is %zu bytes, expected %zu: %.*s", len, n, (int)len, got);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(got[i], ((const unsigned char *)expected)[i],
                     "byte %zu is 0x%02x, expected 0x%02x; file: %.*s", i, got[i],
                     ((const unsigned char *)expected)[i], (int)len, got);
    free(got);
}

Test(checkpoint, a_tiny_file_is_byte_for_byte_what_python_writes)
{
    weft_scope_push();
    weft_tensor *a = tu_tensor(1, (int64_t[]){2}, (double[]){1, 2}, WEFT_F32);
    struct weft_tensor_dict *d = dict_of(1, (const char *[]){"a"}, (weft_tensor *[]){a});
    const char *path = tu_tmp_path("tiny.safetensors");
    cr_assert_eq(weft_safetensors_save(path, d, NULL), 0, "%s", weft_error_message());
    assert_file_is(path, tiny_expected, sizeof tiny_expected - 1);
    weft_scope_pop();
    weft_tensor_dict_free(d);
}

Test(checkpoint, metadata_comes_first_in_the_header)
{
    static const char expected[] =
        "\x58\0\0\0\0\0\0\0"
        "{\"__metadata__\":{\"epoch\":\"3\"},"
        "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}     "
        "\x00\x00\x80\x3f\x00\x00\x00\x40";
    weft_scope_push();
    weft_tensor *a = tu_tensor(1, (int64_t[]){2}, (double[]){1, 2}, WEFT_F32);
    struct weft_tensor_dict *d = dict_of(1, (const char *[]){"a"}, (weft_tensor *[]){a});
    struct weft_metadata *m = weft_metadata_new();
    weft_metadata_set(m, "epoch", "3");
    const char *path = tu_tmp_path("meta.safetensors");
    cr_assert_eq(weft_safetensors_save(path, d, m), 0, "%s", weft_error_message());
    assert_file_is(path, expected, sizeof expected - 1);
    weft_scope_pop();
    weft_tensor_dict_free(d);
    weft_metadata_free(m);
}

/* The vectors of safetensors' own tests (test_serialization, test_empty). */
Test(checkpoint, files_match_the_vectors_of_the_safetensors_test_suite)
{
    static const unsigned char attn[] = {
        64,  0,   0,   0,   0,   0,   0,   0,   123, 34,  97,  116, 116, 110, 46,  48,  34,
        58,  123, 34,  100, 116, 121, 112, 101, 34,  58,  34,  70,  51,  50,  34,  44,  34,
        115, 104, 97,  112, 101, 34,  58,  91,  49,  44,  50,  44,  51,  93,  44,  34,  100,
        97,  116, 97,  95,  111, 102, 102, 115, 101, 116, 115, 34,  58,  91,  48,  44,  50,
        52,  93,  125, 125, 0,   0,   0,   0,   0,   0,   128, 63,  0,   0,   0,   64,  0,
        0,   64,  64,  0,   0,   128, 64,  0,   0,   160, 64};
    static const unsigned char empty[] = {8, 0, 0, 0, 0, 0, 0, 0, 123, 125, 32, 32, 32, 32, 32, 32};
    static const unsigned char empty_meta[] = {
        40,  0,  0,  0,   0,   0,   0,   0,   123, 34,  95,  95,  109, 101, 116, 97, 100,
        97,  116, 97, 95,  95,  34,  58,  123, 34,  102, 114, 97,  109, 101, 119, 111, 114,
        107, 34, 58, 34,  112, 116, 34,  125, 125, 32,  32,  32,  32,  32};
    weft_scope_push();
    weft_tensor *t = tu_tensor(3, (int64_t[]){1, 2, 3}, (double[]){0, 1, 2, 3, 4, 5}, WEFT_F32);
    struct weft_tensor_dict *d = dict_of(1, (const char *[]){"attn.0"}, (weft_tensor *[]){t});
    struct weft_tensor_dict *none = weft_tensor_dict_new();
    struct weft_metadata *m = weft_metadata_new();
    weft_metadata_set(m, "framework", "pt");
    cr_assert_eq(weft_safetensors_save(tu_tmp_path("attn.safetensors"), d, NULL), 0);
    cr_assert_eq(weft_safetensors_save(tu_tmp_path("empty.safetensors"), none, NULL), 0);
    cr_assert_eq(weft_safetensors_save(tu_tmp_path("empty_meta.safetensors"), none, m), 0);
    assert_file_is(tu_tmp_path("attn.safetensors"), attn, sizeof attn);
    assert_file_is(tu_tmp_path("empty.safetensors"), empty, sizeof empty);
    assert_file_is(tu_tmp_path("empty_meta.safetensors"), empty_meta, sizeof empty_meta);
    weft_scope_pop();
    weft_tensor_dict_free(d);
    weft_tensor_dict_free(none);
    weft_metadata_free(m);
}

/* The header text of a saved file (NUL-terminated, padding included). */
static char *header_of(const char *path)
{
    size_t len;
    unsigned char *buf = read_bytes(path, &len);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = (n << 8) | buf[i];
    cr_assert_leq(8 + n, len);
    cr_assert_eq(n % 8, 0, "header length %llu is not a multiple of 8", (unsigned long long)n);
    char *text = malloc(n + 1);
    memcpy(text, buf + 8, n);
    text[n] = '\0';
    free(buf);
    return text;
}

Test(checkpoint, entries_are_ordered_by_descending_dtype_alignment_then_name)
{
    weft_scope_push();
    const char *names[] = {"b", "a", "mask", "step", "emb", "h", "idx", "c", "d", "u"};
    enum weft_dtype dts[] = {WEFT_F32, WEFT_F32, WEFT_BOOL, WEFT_I64, WEFT_BF16,
                             WEFT_F16, WEFT_I32, WEFT_F64, WEFT_I16, WEFT_U8};
    weft_tensor *ts[10];
    for (int i = 0; i < 10; i++)
        ts[i] = weft_zeros(1, (int64_t[]){1}, dts[i], WEFT_CPU);
    struct weft_tensor_dict *d = dict_of(10, names, ts);
    const char *path = tu_tmp_path("order.safetensors");
    cr_assert_eq(weft_safetensors_save(path, d, NULL), 0, "%s", weft_error_message());
    char *h = header_of(path);
    const char *expected =
        "{\"step\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]},"
        "\"c\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[8,16]},"
        "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[16,20]},"
        "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[20,24]},"
        "\"idx\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[24,28]},"
        "\"emb\":{\"dtype\":\"BF16\",\"shape\":[1],\"data_offsets\":[28,30]},"
        "\"h\":{\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[30,32]},"
        "\"d\":{\"dtype\":\"I16\",\"shape\":[1],\"data_offsets\":[32,34]},"
        "\"u\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[34,35]},"
        "\"mask\":{\"dtype\":\"BOOL\",\"shape\":[1],\"data_offsets\":[35,36]}}";
    cr_assert(strncmp(h, expected, strlen(expected)) == 0, "header:\n%s\nexpected:\n%s", h,
              expected);
    cr_assert_eq(strspn(h + strlen(expected), " "), strlen(h) - strlen(expected));
    free(h);
    weft_scope_pop();
    weft_tensor_dict_free(d);
}

Test(checkpoint, names_sort_bytewise_and_scalars_have_an_empty_shape)
{
    weft_scope_push();
    weft_tensor *s = weft_zeros(0, NULL, WEFT_F32, WEFT_CPU);
    weft_tensor *z = weft_zeros(2, (int64_t[]){0, 3}, WEFT_F32, WEFT_CPU);
    struct weft_tensor_dict *d =
        dict_of(4, (const char *[]){"layer.10", "layer.9", "Layer", "zero"},
                (weft_tensor *[]){s, s, s, z});
    const char *path = tu_tmp_path("names.safetensors");
    cr_assert_eq(weft_safetensors_save(path, d, NULL), 0, "%s", weft_error_message());
    char *h = header_of(path);
    const char *expected =
        "{\"Layer\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]},"
        "\"layer.10\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[4,8]},"
        "\"layer.9\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[8,12]},"
        "\"zero\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[12,12]}}";
    cr_assert(strncmp(h, expected, strlen(expected)) == 0, "header:\n%s", h);
    free(h);
    weft_scope_pop();
    weft_tensor_dict_free(d);
}

Test(checkpoint, names_and_metadata_are_escaped_as_serde_json_does)
{
    weft_scope_push();
    weft_tensor *s = weft_zeros(0, NULL, WEFT_U8, WEFT_CPU);
    struct weft_tensor_dict *d =
        dict_of(1, (const char *[]){"q\"b\\s/\x01\x7f\xc3\xa9\n\t"}, (weft_tensor *[]){s});
    struct weft_metadata *m = weft_metadata_new();
    weft_metadata_set(m, "config", "[train]\r\nlr=0.1\b\f\x1f");
    const char *path = tu_tmp_path("escape.safetensors");
    cr_assert_eq(weft_safetensors_save(path, d, m), 0, "%s", weft_error_message());
    char *h = header_of(path);
    const char *expected =
        "{\"__metadata__\":{\"config\":\"[train]\\r\\nlr=0.1\\b\\f\\u001f\"},"
        "\"q\\\"b\\\\s/\\u0001\x7f\xc3\xa9\\n\\t\":{\"dtype\":\"U8\",\"shape\":[],"
        "\"data_offsets\":[0,1]}}";
    cr_assert(strncmp(h, expected, strlen(expected)) == 0, "header:\n%s\nexpected:\n%s", h,
              expected);
    free(h);
    struct weft_tensor_dict *back;
    struct weft_metadata *mback;
    cr_assert_eq(weft_safetensors_load(path, WEFT_CPU, &back, &mback), 0, "%s",
                 weft_error_message());
    cr_assert_str_eq(weft_tensor_dict_name(back, 0), "q\"b\\s/\x01\x7f\xc3\xa9\n\t");
    cr_assert_str_eq(weft_metadata_get(mback, "config"), "[train]\r\nlr=0.1\b\f\x1f");
    weft_scope_pop();
    weft_tensor_dict_free(d);
    weft_tensor_dict_free(back);
    weft_metadata_free(m);
    weft_metadata_free(mback);
}

Test(checkpoint, dtypes_have_their_safetensors_names)
{
    const char *want[WEFT_DTYPE_COUNT] = {"BOOL", "U8", "I8", "I16", "I32",
                                          "I64",  "F16", "BF16", "F32", "F64"};
    for (int dt = 0; dt < WEFT_DTYPE_COUNT; dt++)
        cr_assert_str_eq(weft_safetensors_dtype_name((enum weft_dtype)dt), want[dt]);
    cr_assert_str_eq(weft_safetensors_dtype_name(WEFT_DTYPE_COUNT), "invalid");
}

Test(checkpoint, a_stale_temporary_file_does_not_get_in_the_way)
{
    const char *path = tu_tmp_path("ckpt.safetensors");
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    write_bytes(tmp, "stale", 5);
    weft_tensor *t = weft_zeros(1, (int64_t[]){2}, WEFT_F32, WEFT_CPU);
    struct weft_tensor_dict *d = dict_of(1, (const char *[]){"w"}, (weft_tensor *[]){t});
    weft_tensor_release(t);
    cr_assert_eq(weft_safetensors_save(path, d, NULL), 0, "%s", weft_error_message());
    cr_assert_not(file_exists(tmp));
    weft_tensor_dict_free(d);
}

/* ---- round trips -------------------------------------------------------------------- */

Test(checkpoint, every_dtype_round_trips_with_its_exact_bytes)
{
    weft_scope_push();
    uint64_t state = 7;
    struct weft_tensor_dict *d = weft_tensor_dict_new();
    double v[60];
    for (int dt = 0; dt < WEFT_DTYPE_COUNT; dt++) {
        values_for((enum weft_dtype)dt, v, 60, &state);
        weft_tensor *t = tu_tensor(3, (int64_t[]){3, 4, 5}, v, (enum weft_dtype)dt);
        cr_assert_eq(weft_tensor_dict_add(d, weft_dtype_name((enum weft_dtype)dt), t), 0);
    }
    struct weft_metadata *m = weft_metadata_new();
    weft_metadata_set_int(m, "epoch", 4);
    const char *path = tu_tmp_path("dtypes.safetensors");
    cr_assert_eq(weft_safetensors_save(path, d, m), 0, "%s", weft_error_message());
    struct weft_tensor_dict *back;
    struct weft_metadata *mback;
    cr_assert_eq(weft_safetensors_load(path, WEFT_CPU, &back, &mback), 0, "%s",
                 weft_error_message());
    cr_assert_eq(weft_tensor_dict_len(back), WEFT_DTYPE_COUNT);
    for (int dt = 0; dt < WEFT_DTYPE_COUNT; dt++) {
        const char *name = weft_dtype_name((enum weft_dtype)dt);
        weft_tensor *got = weft_tensor_dict_get(back, name);
        cr_assert_not_null(got, "no tensor '%s'", name);
        cr_assert(weft_device_equal(got->device, WEFT_CPU));
        cr_assert_not(weft_requires_grad(got));
        assert_same_tensor(got, weft_tensor_dict_get(d, name));
    }
    int64_t epoch;
    cr_assert_eq(weft_metadata_get_int(mback, "epoch", &epoch), 0);
    cr_assert_eq(epoch, 4);
    weft_scope_pop();
    weft_tensor_dict_free(d);
    weft_tensor_dict_free(back);
    weft_metadata_free(m);
    weft_metadata_free(mback);
}

Test(checkpoint, scalars_and_empty_tensors_round_trip)
{
    weft_scope_push();
    weft_tensor *s = weft_scalar_tensor(-2.5, WEFT_F64, WEFT_CPU);
    weft_tensor *e = weft_zeros(3, (int64_t[]){2, 0, 4}, WEFT_I32, WEFT_CPU);
    weft_tensor *one = weft_ones(1, (int64_t[]){1}, WEFT_BOOL, WEFT_CPU);
    struct weft_tensor_dict *d = dict_of(3, (const char *[]){"s", "e", "one"},
                                         (weft_tensor *[]){s, e, one});
    const char *path = tu_tmp_path("small.safetensors");
    cr_assert_eq(weft_safetensors_save(path, d, NULL), 0, "%s", weft_error_message());
    struct weft_tensor_dict *back;
    cr_assert_eq(weft_safetensors_load(path, WEFT_CPU, &back, NULL), 0, "%s",
                 weft_error_message());
    assert_same_tensor(weft_tensor_dict_get(back, "s"), s);
    assert_same_tensor(weft_tensor_dict_get(back, "e"), e);
    assert_same_tensor(weft_tensor_dict_get(back, "one"), one);
    weft_scope_pop();
    weft_tensor_dict_free(d);
    weft_tensor_dict_free(back);
}

Test(checkpoint, non_contiguous_tensors_are_written_contiguous)
{
    weft_scope_push();
    weft_tensor *base = weft_reshape(weft_arange(0, 24, 1, WEFT_F32, WEFT_CPU), 2,
                                     (int64_t[]){4, 6});
    weft_tensor *transposed = weft_t(base);                  /* [6, 4], strides (1, 6) */
    weft_tensor *strided = weft_slice(base, 1, 1, 6, 2);     /* [4, 3], strides (6, 2) */
    weft_tensor *row = weft_narrow(base, 0, 2, 1);           /* [1, 6] at offset 12 */
    weft_tensor *expanded = weft_expand(row, 2, (int64_t[]){3, 6}); /* stride 0 */
    weft_tensor *cast = weft_to_dtype(weft_t(base), WEFT_I16);
    cr_assert_not(weft_tensor_is_contiguous(transposed));
    cr_assert_not(weft_tensor_is_contiguous(strided));
    cr_assert_eq(expanded->stride[0], 0);
    struct weft_tensor_dict *d =
        dict_of(4, (const char *[]){"t", "s", "x", "c"},
                (weft_tensor *[]){transposed, strided, expanded, cast});
    const char *path = tu_tmp_path("views.safetensors");
    cr_assert_eq(weft_safetensors_save(path, d, NULL), 0, "%s", weft_error_message());
    struct weft_tensor_dict *back;
    cr_assert_eq(weft_safetensors_load(path, WEFT_CPU, &back, NULL), 0, "%s",
                 weft_error_message());
    double want_t[24], want_s[12], want_x[18];
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 4; j++)
            want_t[i * 4 + j] = j * 6 + i;
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++)
            want_s[i * 3 + j] = i * 6 + 1 + 2 * j;
    for (int i = 0; i < 18; i++)
        want_x[i] = 12 + i % 6;
    tu_assert_close(weft_tensor_dict_get(back, "t"), want_t, 24, 0, 0);
    tu_assert_close(weft_tensor_dict_get(back, "s"), want_s, 12, 0, 0);
    tu_assert_close(weft_tensor_dict_get(back, "x"), want_x, 18, 0, 0);
    tu_assert_close(weft_tensor_dict_get(back, "c"), want_t, 24, 0, 0);
    /* 24 + 12 + 18 floats and 24 int16 after the header */
    size_t len;
    free(read_bytes(path, &len));
    char *h = header_of(path);
    cr_assert_eq(len, 8 + strlen(h) + (24 + 12 + 18) * 4 + 24 * 2);
    free(h);
    weft_scope_pop();
    weft_tensor_dict_free(d);
    weft_tensor_dict_free(back);
}

Test(checkpoint, loading_keeps_header_order_and_reads_files_of_other_writers)
{
    /* Pretty-printed, not sorted, no padding, metadata last: still a valid file. */
    const char *header = "{\n  \"b\": {\"data_offsets\": [8, 12], \"shape\": [1], \"dtype\": "
                         "\"I32\"},\n  \"a\": {\"dtype\": \"U8\", \"shape\": [2, 4], "
                         "\"data_offsets\": [0, 8]},\n  \"__metadata__\": {\"format\": "
                         "\"pt\"}\n}\n";
    const char *path = tu_tmp_path("other.safetensors");
    write_st(path, header, 12);
    weft_scope_push();
    struct weft_tensor_dict *d;
    struct weft_metadata *m;
    cr_assert_eq(weft_safetensors_load(path, WEFT_CPU, &d, &m), 0, "%s", weft_error_message());
    cr_assert_eq(weft_tensor_dict_len(d), 2);
    cr_assert_str_eq(weft_tensor_dict_name(d, 0), "b");
    cr_assert_str_eq(weft_tensor_dict_name(d, 1), "a");
    tu_assert_close(weft_tensor_dict_get(d, "a"), (double[]){0, 1, 2, 3, 4, 5, 6, 7}, 8, 0, 0);
    /* little-endian bytes 8, 9, 10, 11 */
    double b = 8 + 9 * 256 + 10 * 65536 + 11 * 16777216.0;
    tu_assert_close(weft_tensor_dict_get(d, "b"), &b, 1, 0, 0);
    cr_assert_str_eq(weft_metadata_get(m, "format"), "pt");
    weft_scope_pop();
    weft_tensor_dict_free(d);
    weft_metadata_free(m);
}

Test(checkpoint, loading_decodes_json_escapes_in_names_and_metadata)
{
    const char *path = tu_tmp_path("escapes.safetensors");
    write_st(path, "{\"__metadata__\":{\"n\\/ote\":\"tab\\there\\u0021\"},"
                   "\"caf\\u00e9.\\ud83d\\ude00\":{\"dtype\":\"I8\",\"shape\":[1],"
                   "\"data_offsets\":[0,1]}}",
             1);
    struct weft_tensor_dict *d;
    struct weft_metadata *m;
    cr_assert_eq(weft_safetensors_load(path, WEFT_CPU, &d, &m), 0, "%s", weft_error_message());
    cr_assert_str_eq(weft_tensor_dict_name(d, 0), "caf\xc3\xa9.\xf0\x9f\x98\x80");
    cr_assert_str_eq(weft_metadata_key(m, 0), "n/ote");
    cr_assert_str_eq(weft_metadata_value(m, 0), "tab\there!");
    weft_tensor_dict_free(d);
    weft_metadata_free(m);
}

Test(checkpoint, loading_only_the_metadata_still_validates_the_file)
{
    const char *path = tu_tmp_path("meta_only.safetensors");
    write_st(path, "{\"__metadata__\":{\"step\":\"12\"},\"w\":{\"dtype\":\"F32\",\"shape\":[2],"
                   "\"data_offsets\":[0,8]}}",
             8);
    struct weft_metadata *m;
    cr_assert_eq(weft_safetensors_load(path, WEFT_CPU, NULL, &m), 0, "%s", weft_error_message());
    cr_assert_str_eq(weft_metadata_get(m, "step"), "12");
    weft_metadata_free(m);
    write_st(path, "{\"__metadata__\":{\"step\":\"12\"},\"w\":{\"dtype\":\"F32\",\"shape\":[2],"
                   "\"data_offsets\":[0,8]}}",
             4);
    m = (void *)1;
    cr_assert_lt(weft_safetensors_load(path, WEFT_CPU, NULL, &m), 0);
    cr_assert_null(m);
    tu_assert_error(WEFT_ERR_VALUE, "the file is truncated");
}

Test(checkpoint, a_file_without_metadata_gives_an_empty_map)
{
    const char *path = tu_tmp_path("nometa.safetensors");
    write_st(path, "{}", 0);
    struct weft_tensor_dict *d;
    struct weft_metadata *m;
    cr_assert_eq(weft_safetensors_load(path, WEFT_CPU, &d, &m), 0, "%s", weft_error_message());
    cr_assert_eq(weft_tensor_dict_len(d), 0);
    cr_assert_eq(weft_metadata_len(m), 0);
    weft_tensor_dict_free(d);
    weft_metadata_free(m);
}

/* ---- malformed files ---------------------------------------------------------------- */

Test(checkpoint, rejects_a_missing_file)
{
    expect_load_error(tu_tmp_path("nope.safetensors"), WEFT_ERR_IO,
                      "nope.safetensors: cannot open: No such file or directory");
}

/* A FIFO or a directory is refused by its type before anything reads it: the FIFO
 * would otherwise block the load until a writer came. */
Test(checkpoint, rejects_a_fifo_and_a_directory_without_blocking)
{
    const char *fifo = tu_tmp_path("pipe.safetensors");
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    expect_load_error(fifo, WEFT_ERR_IO,
                      "pipe.safetensors: cannot open: a FIFO (named pipe), not a regular file");
    unlink(fifo);
    expect_load_error("/tmp", WEFT_ERR_IO, "/tmp: cannot open: a directory, not a regular file");
}

Test(checkpoint, rejects_a_file_too_short_for_the_length_field)
{
    const char *path = tu_tmp_path("short.safetensors");
    write_bytes(path, "\x02\0\0\0\0", 5);
    expect_load_error(path, WEFT_ERR_VALUE,
                      "short.safetensors: the file is 5 bytes, too short for the 8-byte header "
                      "length");
}

Test(checkpoint, rejects_a_header_length_beyond_the_file)
{
    const char *path = tu_tmp_path("long.safetensors");
    uint64_t n = 123456789012ull;
    unsigned char buf[16] = "........{}      ";
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)(n >> (8 * i));
    write_bytes(path, buf, sizeof buf);
    expect_load_error(path, WEFT_ERR_VALUE,
                      "long.safetensors: header length 123456789012 exceeds the file size (16 "
                      "bytes)");
}

Test(checkpoint, rejects_a_header_over_the_limit_before_allocating_it)
{
    /* A sparse file big enough to hold the claimed header. */
    const char *path = tu_tmp_path("huge.safetensors");
    uint64_t n = WEFT_SAFETENSORS_MAX_HEADER + 1ull;
    unsigned char len[8];
    for (int i = 0; i < 8; i++)
        len[i] = (unsigned char)(n >> (8 * i));
    write_bytes(path, len, 8);
    cr_assert_eq(truncate(path, (off_t)(8 + n)), 0);
    expect_load_error(path, WEFT_ERR_VALUE,
                      "header length 100000001 exceeds the limit of 100000000 bytes");
}

Test(checkpoint, rejects_an_empty_header)
{
    expect_header_error("", 0, WEFT_ERR_VALUE, "the header is empty");
}

Test(checkpoint, rejects_a_header_that_is_not_a_json_object)
{
    expect_header_error("[1, 2]  ", 0, WEFT_ERR_VALUE,
                        "the header must be a JSON object starting with '{', but it starts with "
                        "byte 0x5b");
    expect_header_error(" {}     ", 0, WEFT_ERR_VALUE, "starts with byte 0x20");
}

Test(checkpoint, rejects_a_header_that_is_not_utf8)
{
    expect_header_error("{\"a\xff\":1}", 0, WEFT_ERR_VALUE,
                        "the header is not valid UTF-8 at byte 3");
}

Test(checkpoint, rejects_invalid_json_naming_the_byte)
{
    expect_header_error("{\"a\" {}}", 0, WEFT_ERR_VALUE,
                        "bad.safetensors: invalid JSON at byte 5 of the header: expected ':', "
                        "found '{'");
    expect_header_error("{nope}", 0, WEFT_ERR_VALUE,
                        "invalid JSON at byte 1 of the header: expected a string key, found 'n'");
    expect_header_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]},}", 4,
                        WEFT_ERR_VALUE, "expected a string key, found '}'");
    expect_header_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,],\"data_offsets\":[0,4]}}", 4,
                        WEFT_ERR_VALUE, "expected a value after ',', found ']'");
    expect_header_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[01],\"data_offsets\":[0,4]}}", 4,
                        WEFT_ERR_VALUE, "leading zeros are not allowed");
    expect_header_error("{\"a\":{\"dtype\":\"F32\" \"shape\":[1]}}", 4, WEFT_ERR_VALUE,
                        "expected ',' or '}', found '\"'");
    expect_header_error("{\"a", 0, WEFT_ERR_VALUE, "unterminated string");
    expect_header_error("{\"a\\q\":1}", 0, WEFT_ERR_VALUE,
                        "invalid escape: backslash followed by 'q'");
    expect_header_error("{\"a\\ud800\":1}", 0, WEFT_ERR_VALUE, "lone leading surrogate");
    expect_header_error("{\"a\tb\":1}", 0, WEFT_ERR_VALUE, "control character 0x09 in a string");
    expect_header_error("{}  x   ", 0, WEFT_ERR_VALUE,
                        "invalid JSON at byte 4 of the header: unexpected 'x' after the header "
                        "object");
    expect_header_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}", 4,
                        WEFT_ERR_VALUE, "expected ',' or '}', found the end of the text");
    expect_header_error("{\"a\":{\"dtype\":tru,\"shape\":[],\"data_offsets\":[0,4]}}", 4,
                        WEFT_ERR_VALUE,
                        "invalid JSON at byte 14 of the header: unexpected character");
}

Test(checkpoint, rejects_duplicate_keys)
{
    const char *entry = "{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}";
    char header[512];
    snprintf(header, sizeof header, "{\"0.bias\":%s,\"0.bias\":%s}", entry, entry);
    expect_header_error(header, 4, WEFT_ERR_VALUE,
                        "bad.safetensors: duplicate key '0.bias' at byte 59 of the header");
    expect_header_error("{\"__metadata__\":{},\"__metadata__\":{}}", 0, WEFT_ERR_VALUE,
                        "duplicate key '__metadata__' at byte 19 of the header");
    expect_header_error("{\"__metadata__\":{\"a\":\"1\",\"a\":\"2\"}}", 0, WEFT_ERR_VALUE,
                        "duplicate key 'a' in __metadata__ at byte 25 of the header");
    expect_header_error("{\"w\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],"
                        "\"data_offsets\":[0,4]}}",
                        4, WEFT_ERR_VALUE, "tensor 'w': duplicate key 'dtype' at byte 20");
}

Test(checkpoint, rejects_unknown_and_unsupported_dtypes)
{
    expect_header_error("{\"w\":{\"dtype\":\"F17\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
                        WEFT_ERR_VALUE, "tensor 'w': unknown dtype 'F17' at byte 14 of the header");
    expect_header_error("{\"w\":{\"dtype\":\"U16\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4,
                        WEFT_ERR_TYPE,
                        "bad.safetensors: tensor 'w': dtype U16 is not supported by weft (it "
                        "reads BOOL, U8, I8, I16, I32, I64, F16, BF16, F32, F64)");
    expect_header_error("{\"w\":{\"dtype\":\"F8_E4M3\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4,
                        WEFT_ERR_TYPE, "tensor 'w': dtype F8_E4M3 is not supported by weft");
    expect_header_error("{\"w\":{\"dtype\":8,\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
                        WEFT_ERR_VALUE,
                        "tensor 'w': dtype must be a string such as \"F32\", found a number at "
                        "byte 14");
}

Test(checkpoint, rejects_bad_shapes)
{
    expect_header_error("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,-1],\"data_offsets\":[0,4]}}", 4,
                        WEFT_ERR_VALUE,
                        "tensor 'w': shape[1] must be a non-negative integer below 2^64, found -1 "
                        "at byte 31 of the header");
    expect_header_error("{\"w\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", 8,
                        WEFT_ERR_VALUE,
                        "shape[0] must be a non-negative integer below 2^64, found 2.0");
    expect_header_error("{\"w\":{\"dtype\":\"F32\",\"shape\":[\"2\"],\"data_offsets\":[0,8]}}", 8,
                        WEFT_ERR_VALUE,
                        "tensor 'w': shape[0] must be a non-negative integer, found a string");
    expect_header_error("{\"w\":{\"dtype\":\"F32\",\"shape\":2,\"data_offsets\":[0,8]}}", 8,
                        WEFT_ERR_VALUE,
                        "tensor 'w': shape must be an array of non-negative integers, found a "
                        "number at byte 28");
    expect_header_error("{\"w\":{\"dtype\":\"F32\",\"shape\":[99999999999999999999],"
                        "\"data_offsets\":[0,8]}}",
                        8, WEFT_ERR_VALUE, "found 99999999999999999999");
    expect_header_error("{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],"
                        "\"data_offsets\":[0,4]}}",
                        4, WEFT_ERR_VALUE,
                        "tensor 'w': shape has more than 8 dimensions, which weft does not "
                        "support");
    expect_header_error("{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4],"
                        "\"data_offsets\":[0,4]}}",
                        4, WEFT_ERR_VALUE,
                        "tensor 'w': shape [4294967296, 4294967296, 4] of F32 is too large");
}

Test(checkpoint, rejects_missing_and_unknown_fields)
{
    expect_header_error("{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, WEFT_ERR_VALUE,
                        "tensor 'w': missing field 'shape' in its entry at byte 1 of the header");
    expect_header_error("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"offsets\":[0,4]}}", 4,
                        WEFT_ERR_VALUE,
                        "tensor 'w': unknown field 'offsets' at byte 32 of the header (expected "
                        "dtype, shape and data_offsets)");
    expect_header_error("{\"w\":[1]}", 0, WEFT_ERR_VALUE,
                        "tensor 'w': its entry must be an object with dtype, shape and "
                        "data_offsets, found an array at byte 5");
}

Test(checkpoint, rejects_malformed_data_offsets)
{
    expect_header_error("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4,
                        WEFT_ERR_VALUE,
                        "tensor 'w': data_offsets must be [begin, end], found 1 value");
    expect_header_error("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 4,
                        WEFT_ERR_VALUE, "found more than 2 values");
    expect_header_error("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":{}}}", 4,
                        WEFT_ERR_VALUE,
                        "tensor 'w': data_offsets must be an array [begin, end], found an object");
}

Test(checkpoint, rejects_a_span_that_does_not_match_the_shape)
{
    const char *path = tu_tmp_path("model.safetensors");
    write_st(path, "{\"0.weight\":{\"dtype\":\"F32\",\"shape\":[3,5],\"data_offsets\":[0,48]}}",
             48);
    expect_load_error(path, WEFT_ERR_VALUE,
                      "model.safetensors: tensor '0.weight': data_offsets [0, 48] span 48 bytes "
                      "but shape [3, 5] of F32 needs 60");
}

Test(checkpoint, rejects_overlapping_offsets)
{
    expect_header_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                        "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                        12, WEFT_ERR_VALUE,
                        "tensor 'b': data_offsets [4, 12] overlap tensor 'a', which ends at 8");
}

Test(checkpoint, rejects_holes_between_tensors_or_before_the_first)
{
    expect_header_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                        "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
                        12, WEFT_ERR_VALUE,
                        "tensor 'b': data_offsets [8, 12] leave a hole of 4 bytes after tensor "
                        "'a'");
    expect_header_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8,
                        WEFT_ERR_VALUE,
                        "tensor 'a': data_offsets [4, 8] leave a hole of 4 bytes after the start "
                        "of the data");
    expect_header_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", 8,
                        WEFT_ERR_VALUE, "tensor 'a': data_offsets [8, 4] end before they begin");
}

Test(checkpoint, rejects_a_file_shorter_or_longer_than_its_data)
{
    const char *h = "{\"a\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,16]}}";
    expect_header_error(h, 15, WEFT_ERR_VALUE,
                        "the file is truncated: it is 78 bytes, but its 16 bytes of tensor data "
                        "start at byte 63");
    expect_header_error(h, 17, WEFT_ERR_VALUE,
                        "the file is 80 bytes, but its tensor data ends at byte 79 (1 unexpected "
                        "bytes follow the last tensor)");
}

Test(checkpoint, rejects_metadata_that_is_not_a_map_of_strings)
{
    expect_header_error("{\"__metadata__\":{\"epoch\":3}}", 0, WEFT_ERR_VALUE,
                        "bad.safetensors: __metadata__ value of 'epoch' must be a string, found a "
                        "number at byte 25 of the header");
    expect_header_error("{\"__metadata__\":{\"ok\":null}}", 0, WEFT_ERR_VALUE,
                        "__metadata__ value of 'ok' must be a string, found null");
    expect_header_error("{\"__metadata__\":[\"a\"]}", 0, WEFT_ERR_VALUE,
                        "__metadata__ must be an object of strings, found an array at byte 16");
}

Test(checkpoint, rejects_names_with_a_nul_character)
{
    expect_header_error("{\"a\\u0000b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
                        4, WEFT_ERR_VALUE,
                        "a tensor name at byte 1 of the header contains a NUL character");
}

/* ---- saving errors and atomicity ---------------------------------------------------- */

/* Saves a one-tensor checkpoint holding `value` and returns the file's bytes. */
static unsigned char *save_value(const char *path, double value, size_t *len)
{
    weft_tensor *t = weft_full(1, (int64_t[]){4}, value, WEFT_F32, WEFT_CPU);
    struct weft_tensor_dict *d = dict_of(1, (const char *[]){"w"}, (weft_tensor *[]){t});
    weft_tensor_release(t);
    cr_assert_eq(weft_safetensors_save(path, d, NULL), 0, "%s", weft_error_message());
    weft_tensor_dict_free(d);
    return read_bytes(path, len);
}

static void assert_unchanged(const char *path, const unsigned char *before, size_t len)
{
    size_t now_len;
    unsigned char *now = read_bytes(path, &now_len);
    cr_assert_eq(now_len, len, "the previous checkpoint changed size");
    cr_assert(memcmp(now, before, len) == 0, "the previous checkpoint changed");
    free(now);
    cr_assert_eq(count_temp_files(), 0, "a temporary file was left behind");
}

Test(checkpoint, a_save_replaces_the_previous_file_and_leaves_no_temporary_file)
{
    const char *path = tu_tmp_path("ckpt.safetensors");
    size_t len;
    free(save_value(path, 1.0, &len));
    free(save_value(path, 2.0, &len));
    cr_assert_eq(count_temp_files(), 0);
    struct weft_tensor_dict *d;
    cr_assert_eq(weft_safetensors_load(path, WEFT_CPU, &d, NULL), 0);
    weft_scope_push();
    tu_assert_close(weft_tensor_dict_get(d, "w"), (double[]){2, 2, 2, 2}, 4, 0, 0);
    weft_scope_pop();
    weft_tensor_dict_free(d);
}

Test(checkpoint, a_save_that_fails_while_writing_leaves_the_previous_file_intact)
{
    const char *path = tu_tmp_path("ckpt.safetensors");
    size_t len;
    unsigned char *before = save_value(path, 1.0, &len);
    /* The disk "fills up" after 4 KiB: writing a 64 KiB checkpoint fails midway. */
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit old, small;
    getrlimit(RLIMIT_FSIZE, &old);
    small = old;
    small.rlim_cur = 4096;
    cr_assert_eq(setrlimit(RLIMIT_FSIZE, &small), 0);
    weft_tensor *big = weft_ones(2, (int64_t[]){128, 128}, WEFT_F32, WEFT_CPU);
    struct weft_tensor_dict *d = dict_of(1, (const char *[]){"w"}, (weft_tensor *[]){big});
    weft_tensor_release(big);
    int rc = weft_safetensors_save(path, d, NULL);
    setrlimit(RLIMIT_FSIZE, &old);
    cr_assert_lt(rc, 0);
    tu_assert_error(WEFT_ERR_IO, "File too large");
    assert_unchanged(path, before, len);
    free(before);
    weft_tensor_dict_free(d);
}

Test(checkpoint, a_save_that_cannot_rename_removes_its_temporary_file)
{
    const char *path = tu_tmp_path("ckpt.safetensors");
    cr_assert_eq(mkdir(path, 0755), 0);
    weft_tensor *t = weft_zeros(1, (int64_t[]){2}, WEFT_F32, WEFT_CPU);
    struct weft_tensor_dict *d = dict_of(1, (const char *[]){"w"}, (weft_tensor *[]){t});
    weft_tensor_release(t);
    cr_assert_lt(weft_safetensors_save(path, d, NULL), 0);
    tu_assert_error(WEFT_ERR_IO, "ckpt.safetensors' failed: Is a directory");
    cr_assert(file_exists(path), "the directory in the way was removed");
    cr_assert_eq(count_temp_files(), 0);
    weft_tensor_dict_free(d);
}

Test(checkpoint, a_save_into_a_missing_directory_names_the_file)
{
    weft_tensor *t = weft_zeros(1, (int64_t[]){2}, WEFT_F32, WEFT_CPU);
    struct weft_tensor_dict *d = dict_of(1, (const char *[]){"w"}, (weft_tensor *[]){t});
    weft_tensor_release(t);
    cr_assert_lt(weft_safetensors_save(tu_tmp_path("missing/ckpt.safetensors"), d, NULL), 0);
    tu_assert_error(WEFT_ERR_IO, "missing/ckpt.safetensors: creating the temporary file");
    weft_tensor_dict_free(d);
}

Test(checkpoint, a_save_into_a_read_only_directory_leaves_the_previous_file_intact)
{
    if (geteuid() == 0)
        TU_SKIP_TEST("root ignores directory permissions");
    const char *path = tu_tmp_path("ckpt.safetensors");
    size_t len;
    unsigned char *before = save_value(path, 1.0, &len);
    cr_assert_eq(chmod(test_dir, 0555), 0);
    weft_tensor *t = weft_zeros(1, (int64_t[]){2}, WEFT_F32, WEFT_CPU);
    struct weft_tensor_dict *d = dict_of(1, (const char *[]){"w"}, (weft_tensor *[]){t});
    weft_tensor_release(t);
    cr_assert_lt(weft_safetensors_save(path, d, NULL), 0);
    tu_assert_error(WEFT_ERR_IO, "Permission denied");
    chmod(test_dir, 0700);
    assert_unchanged(path, before, len);
    free(before);
    weft_tensor_dict_free(d);
}

Test(checkpoint, a_rejected_save_does_not_touch_the_previous_file)
{
    const char *path = tu_tmp_path("ckpt.safetensors");
    size_t len;
    unsigned char *before = save_value(path, 1.0, &len);
    weft_tensor *t = weft_zeros(1, (int64_t[]){2}, WEFT_F32, WEFT_CPU);
    struct weft_tensor_dict *d = dict_of(1, (const char *[]){"__metadata__"}, (weft_tensor *[]){t});
    weft_tensor_release(t);
    cr_assert_lt(weft_safetensors_save(path, d, NULL), 0);
    tu_assert_error(WEFT_ERR_VALUE, "a tensor cannot be named '__metadata__'");
    assert_unchanged(path, before, len);
    weft_tensor_dict_free(d);
    d = dict_of(0, NULL, NULL);
    struct weft_metadata *m = weft_metadata_new();
    weft_metadata_set(m, "bad", "\xff");
    cr_assert_lt(weft_safetensors_save(path, d, m), 0);
    tu_assert_error(WEFT_ERR_VALUE, "metadata key 'bad' or its value is not valid UTF-8");
    assert_unchanged(path, before, len);
    free(before);
    weft_tensor_dict_free(d);
    weft_metadata_free(m);
}

/* ---- an independent reader ---------------------------------------------------------- */

/* Runs tests/safetensors_check.py on path (its report silenced when quiet); its exit
 * status. */
static int python_check(const char *path, bool quiet)
{
    const char *src = getenv("WEFT_TEST_SOURCE_DIR");
    if (!src || system("python3 -c 'import json' 2>/dev/null") != 0)
        TU_SKIP_TEST("python3 or WEFT_TEST_SOURCE_DIR is not available");
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "python3 '%s/safetensors_check.py' '%s'%s", src, path,
             quiet ? " > /dev/null" : "");
    int status = system(cmd);
    cr_assert(WIFEXITED(status), "the checker did not run");
    return WEXITSTATUS(status);
}

Test(checkpoint, python_reads_and_rewrites_the_file_byte_for_byte)
{
    weft_scope_push();
    uint64_t state = 11;
    struct weft_tensor_dict *d = weft_tensor_dict_new();
    double v[24];
    const char *names[] = {"0.weight", "0.bias", "b\xc3\xa9ta", "q\"uote", "z\\back", "ctl\x01",
                           "layer.10.w", "layer.9.w", "A", "empty"};
    for (int i = 0; i < 10; i++) {
        enum weft_dtype dt = (enum weft_dtype)(i % WEFT_DTYPE_COUNT);
        values_for(dt, v, 24, &state);
        int64_t shape[3] = {2, 3, i == 9 ? 0 : 4};
        weft_tensor *t = tu_tensor(3, shape, v, dt);
        cr_assert_eq(weft_tensor_dict_add(d, names[i], i % 3 ? weft_transpose(t, 0, 2) : t), 0);
    }
    struct weft_metadata *m = weft_metadata_new();
    weft_metadata_set(m, "format", "pt");
    weft_metadata_set(m, "config", "[train]\nlr = 0.1 ; \"quoted\" \xe2\x9c\x93\n");
    weft_metadata_set_uint(m, "rng_offset", 1234567890123ull);
    const char *path = tu_tmp_path("python.safetensors");
    cr_assert_eq(weft_safetensors_save(path, d, m), 0, "%s", weft_error_message());
    cr_assert_eq(python_check(path, false), 0, "the Python checker rejected the file");
    /* ...and the checker is not vacuous: it rejects a file with a hole. */
    write_st(tu_tmp_path("hole.safetensors"),
             "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8);
    cr_assert_eq(python_check(tu_tmp_path("hole.safetensors"), true), 1);
    weft_scope_pop();
    weft_tensor_dict_free(d);
    weft_metadata_free(m);
}
