/* tests/test_io_text.c: the language-model readers of weft-io.so, text (any file as
 * bytes) and tokens (llm.c's token files), on small files written here: the (x, y)
 * windows and their shift, nanoGPT's train/val split at its boundaries, the separate
 * validation file, every malformed token file, splits too short for one window, the
 * data loader's shuffled windows with and without workers and sharded over two ranks, and
 * the shipped corpus. */
#define _GNU_SOURCE
#include "testutil.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft/dataset.h>

static void text_setup(void)
{
    tu_setup();
    tu_tmpdir_create("io-text");
}

static void text_teardown(void)
{
    tu_tmpdir_remove();
    tu_teardown();
}

TestSuite(io_text, .init = text_setup, .fini = text_teardown);

/* ---- helpers -------------------------------------------------------------------------- */

/* Opens [data] with the given reader keys (one per line). */
static weft_dataset *open_ok(const char *keys)
{
    char ini[2048];
    snprintf(ini, sizeof ini, "[data]\n%s", keys);
    return tu_open_ok(ini);
}

/* Opening must fail with code and a message holding every one of the NULL-terminated
 * texts (the file, the offset, what was found, what was expected). */
static void open_fails(const char *keys, int code, ...)
{
    char ini[2048];
    snprintf(ini, sizeof ini, "[data]\n%s", keys);
    weft_dataset *ds = weft_dataset_open(weft_config_options(tu_config(ini), "data"));
    if (ds)
        weft_dataset_close(ds);
    cr_assert_null(ds, "open succeeded with:\n%s", keys);
    const char *msg = weft_error_message();
    cr_assert_eq(weft_error_code(), code, "code %d, expected %d: %s", weft_error_code(), code,
                 msg);
    va_list ap;
    va_start(ap, code);
    for (const char *t; (t = va_arg(ap, const char *));)
        cr_assert_not_null(strstr(msg, t), "the error \"%s\" does not say \"%s\"", msg, t);
    va_end(ap);
    weft_error_clear();
}

/* x and y of samples idx[0..n) as int64 [n, T] each (caller frees both). */
static void read_xy(const weft_dataset *ds, int64_t n, const int64_t *idx, int64_t **x,
                    int64_t **y)
{
    int64_t T = weft_dataset_field(ds, 0)->shape[0];
    *x = malloc((size_t)(n * T) * sizeof **x);
    *y = malloc((size_t)(n * T) * sizeof **y);
    cr_assert(*x && *y);
    void *buffers[2] = {*x, *y};
    cr_assert_eq(weft_dataset_read(ds, n, idx, buffers), 0, "%s", weft_error_message());
}

/* Asserts sample k of ds is tokens[start .. start + T], cut into x and y. */
static void assert_window(const weft_dataset *ds, int64_t k, const int64_t *tokens,
                          int64_t start)
{
    int64_t *x, *y;
    read_xy(ds, 1, &k, &x, &y);
    int64_t T = weft_dataset_field(ds, 0)->shape[0];
    for (int64_t i = 0; i < T; i++) {
        cr_assert_eq(x[i], tokens[start + i], "sample %lld x[%lld] = %lld, expected %lld",
                     (long long)k, (long long)i, (long long)x[i],
                     (long long)tokens[start + i]);
        cr_assert_eq(y[i], tokens[start + i + 1], "sample %lld y[%lld] = %lld, expected %lld",
                     (long long)k, (long long)i, (long long)y[i],
                     (long long)tokens[start + i + 1]);
    }
    free(x);
    free(y);
}

/* n pseudo-random bytes (a local LCG), written as dir/name; tokens[] gets them. */
static void write_random_text(const char *name, int64_t n, uint64_t seed, int64_t *tokens)
{
    unsigned char *b = malloc((size_t)n + 1);
    cr_assert_not_null(b);
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        b[i] = (unsigned char)(seed >> 56);
        tokens[i] = b[i];
    }
    tu_write_bytes(name, b, (size_t)n);
    free(b);
}

/* An llm.c token file: header (magic, version, count as given) then the uint16 tokens
 * little-endian, then `extra` bytes (0xAB) of trailing data; the file is cut to `cut`
 * bytes when cut >= 0. */
static void write_tokens_file(const char *name, int32_t magic, int32_t version, int32_t count,
                              const int64_t *tokens, int64_t ntokens, size_t extra,
                              long cut)
{
    size_t size = 1024 + 2 * (size_t)ntokens + extra;
    unsigned char *b = calloc(1, size);
    cr_assert_not_null(b);
    const int32_t head[3] = {magic, version, count};
    for (int h = 0; h < 3; h++)
        for (int k = 0; k < 4; k++)
            b[4 * h + k] = (unsigned char)((uint32_t)head[h] >> (8 * k));
    for (int64_t i = 0; i < ntokens; i++) {
        b[1024 + 2 * i] = (unsigned char)(tokens[i] & 0xff);
        b[1024 + 2 * i + 1] = (unsigned char)(tokens[i] >> 8);
    }
    memset(b + 1024 + 2 * ntokens, 0xAB, extra);
    tu_write_bytes(name, b, cut >= 0 ? (size_t)cut : size);
    free(b);
}

static void assert_fields(const weft_dataset *ds, int64_t T, int64_t vocab)
{
    cr_assert_eq(weft_dataset_num_fields(ds), 2);
    const struct weft_dataset_field *x = weft_dataset_field(ds, 0), *y = weft_dataset_field(ds, 1);
    cr_assert_str_eq(x->name, "x");
    cr_assert_str_eq(y->name, "y");
    for (int f = 0; f < 2; f++) {
        const struct weft_dataset_field *fd = weft_dataset_field(ds, f);
        cr_assert_eq(fd->dtype, WEFT_I64);
        cr_assert_eq(fd->ndim, 1);
        cr_assert_eq(fd->shape[0], T);
    }
    cr_assert_eq(x->num_classes, 0);
    cr_assert_eq(y->num_classes, vocab);
}

/* ---- text: windows and splits --------------------------------------------------------- */

Test(io_text, text_train_windows_start_at_every_token_and_y_is_x_shifted_by_one)
{
    const char *text = "abcdefghij"; /* 10 bytes: train is int(10 * 0.9) = 9 of them */
    int64_t tokens[10];
    for (int i = 0; i < 10; i++)
        tokens[i] = text[i];
    tu_write_text("t.txt", text);
    weft_dataset *ds = open_ok("reader = text\npath = t.txt\nblock_size = 3\n");
    assert_fields(ds, 3, 256);
    cr_assert_eq(weft_dataset_length(ds), 9 - 3);
    for (int64_t k = 0; k < 6; k++)
        assert_window(ds, k, tokens, k);
    /* the last window's y ends at token 8, the last of the train split */
    int64_t *x, *y, last = 5;
    read_xy(ds, 1, &last, &x, &y);
    cr_assert_eq(y[2], 'i');
    free(x);
    free(y);
    weft_dataset_close(ds);
}

Test(io_text, text_reads_every_byte_value_as_a_token)
{
    unsigned char b[300];
    int64_t tokens[300];
    for (int i = 0; i < 300; i++)
        tokens[i] = b[i] = (unsigned char)(255 - i % 256);
    tu_write_bytes("all.bin", b, sizeof b);
    /* train: int(300 * 0.9) = 270 tokens, 270 - 256 windows */
    weft_dataset *ds = open_ok("reader = text\npath = all.bin\nblock_size = 256\n");
    cr_assert_eq(weft_dataset_length(ds), 14);
    for (int64_t k = 0; k < 14; k++)
        assert_window(ds, k, tokens, k);
    weft_dataset_close(ds);
}

Test(io_text, text_val_windows_are_non_overlapping_from_the_cut_and_cover_the_split)
{
    int64_t tokens[100];
    write_random_text("r.bin", 100, 11, tokens);
    /* cut = int(100 * 0.75) = 75: val is tokens [75, 100), 25 of them; windows of 4 start
     * at 75, 79, ..., 95: (25 - 1) / 4 = 6, the last y ending on token 99 */
    weft_dataset *ds = open_ok("reader = text\npath = r.bin\nblock_size = 4\nsplit = val\n"
                               "val_fraction = 0.25\n");
    assert_fields(ds, 4, 256);
    cr_assert_eq(weft_dataset_length(ds), 6);
    for (int64_t k = 0; k < 6; k++)
        assert_window(ds, k, tokens, 75 + 4 * k);
    /* all six at once, in another order: each sample is its own window */
    int64_t idx[6] = {5, 0, 3, 1, 4, 2}, *x, *y;
    read_xy(ds, 6, idx, &x, &y);
    for (int k = 0; k < 6; k++)
        for (int i = 0; i < 4; i++) {
            cr_assert_eq(x[4 * k + i], tokens[75 + 4 * idx[k] + i]);
            cr_assert_eq(y[4 * k + i], tokens[75 + 4 * idx[k] + i + 1]);
        }
    cr_assert_eq(y[0 * 4 + 3], tokens[99]); /* sample 5 ends on the last token */
    free(x);
    free(y);
    weft_dataset_close(ds);
}

Test(io_text, split_cut_is_nanogpts_int_of_n_times_one_minus_val_fraction)
{
    /* (n, val_fraction, Python's int(n * (1 - val_fraction))) */
    static const struct {
        int64_t n;
        const char *vf;
        int64_t cut;
    } cases[] = {{20, "0.1", 18}, {100, "0.1", 90}, {29, "0.3", 20}, {7, "0.5", 3},
                 {333, "0.7", 99}, {1000, "0.3", 700}};
    int64_t tokens[1000];
    write_random_text("r.bin", 1000, 5, tokens);
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        char name[32], keys[256];
        snprintf(name, sizeof name, "r%zu.bin", c);
        unsigned char b[1000];
        for (int64_t i = 0; i < cases[c].n; i++)
            b[i] = (unsigned char)tokens[i];
        tu_write_bytes(name, b, (size_t)cases[c].n);
        snprintf(keys, sizeof keys, "reader = text\npath = %s\nblock_size = 1\n"
                                    "val_fraction = %s\n", name, cases[c].vf);
        weft_dataset *train = open_ok(keys);
        cr_assert_eq(weft_dataset_length(train), cases[c].cut - 1, "n %lld: train %lld",
                     (long long)cases[c].n, (long long)weft_dataset_length(train));
        weft_dataset_close(train);
        snprintf(keys, sizeof keys, "reader = text\npath = %s\nblock_size = 1\nsplit = val\n"
                                    "val_fraction = %s\n", name, cases[c].vf);
        weft_dataset *val = open_ok(keys);
        cr_assert_eq(weft_dataset_length(val), cases[c].n - cases[c].cut - 1);
        assert_window(val, 0, tokens, cases[c].cut); /* val starts right at the cut */
        weft_dataset_close(val);
    }
}

Test(io_text, splits_at_the_boundary_hold_exactly_one_window_then_none)
{
    int64_t tokens[20];
    write_random_text("r.bin", 20, 3, tokens);
    /* train: int(20 * 0.5) = 10 tokens: block 9 gives one window, block 10 none */
    weft_dataset *ds = open_ok("reader = text\npath = r.bin\nblock_size = 9\n"
                               "val_fraction = 0.5\n");
    cr_assert_eq(weft_dataset_length(ds), 1);
    assert_window(ds, 0, tokens, 0);
    weft_dataset_close(ds);
    open_fails("reader = text\npath = r.bin\nblock_size = 10\nval_fraction = 0.5\n",
               WEFT_ERR_CONFIG, "r.bin: split 'train' has 10 tokens", "block_size = 10",
               "at least block_size + 1 = 11", NULL);
    /* val: the other 10 tokens: (10 - 1) / 9 = 1 window, (10 - 1) / 10 = 0 */
    ds = open_ok("reader = text\npath = r.bin\nblock_size = 9\nval_fraction = 0.5\n"
                 "split = val\n");
    cr_assert_eq(weft_dataset_length(ds), 1);
    assert_window(ds, 0, tokens, 10);
    weft_dataset_close(ds);
    /* (10 - 1) / 4 = 2 windows: tokens 10..14 and 14..18; token 19 is never an x */
    ds = open_ok("reader = text\npath = r.bin\nblock_size = 4\nval_fraction = 0.5\n"
                 "split = val\n");
    cr_assert_eq(weft_dataset_length(ds), 2);
    assert_window(ds, 1, tokens, 14);
    weft_dataset_close(ds);
    open_fails("reader = text\npath = r.bin\nblock_size = 10\nval_fraction = 0.5\n"
               "split = val\n",
               WEFT_ERR_CONFIG, "r.bin: split 'val' has 10 tokens", "block_size = 10", NULL);
}

Test(io_text, block_size_larger_than_the_split_names_file_split_count_and_block_size)
{
    int64_t tokens[100];
    write_random_text("r.bin", 100, 1, tokens);
    open_fails("reader = text\npath = r.bin\nblock_size = 200\n", WEFT_ERR_CONFIG,
               "test.ini: [data]", "r.bin: split 'train' has 90 tokens",
               "the first 0.9 of its 100 tokens", "block_size = 200", NULL);
    open_fails("reader = text\npath = r.bin\nblock_size = 10\nsplit = val\n", WEFT_ERR_CONFIG,
               "r.bin: split 'val' has 10 tokens", "the last 0.1 of its 100 tokens",
               "block_size = 10", "expected at least block_size + 1 = 11 tokens", NULL);
}

Test(io_text, empty_file_is_an_error_naming_it)
{
    tu_write_bytes("empty.txt", "", 0);
    open_fails("reader = text\npath = empty.txt\nblock_size = 1\n", WEFT_ERR_CONFIG,
               "empty.txt: split 'train' has 0 tokens", "the file is empty", "block_size = 1",
               NULL);
    tu_write_bytes("empty.bin", "", 0);
    open_fails("reader = tokens\npath = empty.bin\nblock_size = 1\nvocab_size = 256\n",
               WEFT_ERR_IO, "empty.bin: byte 0: truncated header", "has 0 bytes",
               "1024-byte header", NULL);
}

Test(io_text, separate_val_file_makes_each_split_a_whole_file)
{
    int64_t a[50], b[30];
    write_random_text("a.txt", 50, 21, a);
    write_random_text("b.txt", 30, 22, b);
    weft_dataset *train = open_ok("reader = text\npath = a.txt\nval = b.txt\nblock_size = 5\n");
    cr_assert_eq(weft_dataset_length(train), 50 - 5); /* all of a.txt */
    assert_window(train, 44, a, 44);
    weft_dataset_close(train);
    weft_dataset *val = open_ok("reader = text\npath = a.txt\nval = b.txt\nblock_size = 5\n"
                                "split = val\n");
    cr_assert_eq(weft_dataset_length(val), (30 - 1) / 5); /* all of b.txt */
    for (int64_t k = 0; k < 5; k++)
        assert_window(val, k, b, 5 * k);
    weft_dataset_close(val);
    /* the val split never opens path, the train split never opens val */
    val = open_ok("reader = text\npath = missing.txt\nval = b.txt\nblock_size = 5\n"
                  "split = val\n");
    weft_dataset_close(val);
    open_fails("reader = text\npath = a.txt\nval = missing.txt\nblock_size = 5\nsplit = val\n",
               WEFT_ERR_IO, "missing.txt: cannot open", NULL);
    open_fails("reader = text\npath = a.txt\nval = b.txt\nval_fraction = 0.2\nblock_size = 5\n",
               WEFT_ERR_CONFIG, "val_fraction and val are both set", NULL);
    open_fails("reader = text\npath = a.txt\nval = b.txt\nblock_size = 30\nsplit = val\n",
               WEFT_ERR_CONFIG, "b.txt: split 'val' has 30 tokens, too few", NULL);
}

Test(io_text, keys_are_checked_with_the_expected_values_named)
{
    tu_write_text("t.txt", "hello, world\n");
    open_fails("reader = text\nblock_size = 4\n", WEFT_ERR_CONFIG, "missing key 'path'", NULL);
    open_fails("reader = text\npath = t.txt\n", WEFT_ERR_CONFIG, "missing key 'block_size'",
               NULL);
    open_fails("reader = text\npath = t.txt\nblock_size = 0\n", WEFT_ERR_CONFIG,
               "block_size = '0'", "positive integer", NULL);
    open_fails("reader = text\npath = t.txt\nblock_size = 2\nsplit = test\n", WEFT_ERR_CONFIG,
               "split = 'test'", "train", "val", NULL);
    open_fails("reader = text\npath = t.txt\nblock_size = 2\nval_fraction = 1\n",
               WEFT_ERR_CONFIG, "val_fraction = '1'", "expected a fraction in (0, 1)", NULL);
    open_fails("reader = text\npath = t.txt\nblock_size = 2\nval_fraction = 0\n",
               WEFT_ERR_CONFIG, "val_fraction = '0'", "(0, 1)", NULL);
    open_fails("reader = text\npath = nowhere.txt\nblock_size = 2\n", WEFT_ERR_IO,
               "nowhere.txt: cannot open", NULL);
    tu_write_bytes("t.bin", "", 0);
    open_fails("reader = tokens\npath = t.bin\nblock_size = 2\n", WEFT_ERR_CONFIG,
               "missing key 'vocab_size'", NULL);
    open_fails("reader = tokens\npath = t.bin\nblock_size = 2\nvocab_size = 70000\n",
               WEFT_ERR_CONFIG, "vocab_size = '70000'", NULL);
}

/* ---- tokens: llm.c's files ------------------------------------------------------------ */

Test(io_text, tokens_windows_decode_uint16_little_endian_and_shift)
{
    int64_t tokens[200];
    for (int i = 0; i < 200; i++)
        tokens[i] = (int64_t)((i * 7919 + 300) % 50257); /* values above 255 */
    write_tokens_file("t.bin", 20240520, 1, 200, tokens, 200, 0, -1);
    weft_dataset *ds = open_ok("reader = tokens\npath = t.bin\nvocab_size = 50257\n"
                               "block_size = 16\n");
    assert_fields(ds, 16, 50257);
    cr_assert_eq(weft_dataset_length(ds), 180 - 16);
    for (int64_t k = 0; k < 180 - 16; k += 7)
        assert_window(ds, k, tokens, k);
    assert_window(ds, 163, tokens, 163);
    weft_dataset_close(ds);
    ds = open_ok("reader = tokens\npath = t.bin\nvocab_size = 50257\nblock_size = 16\n"
                 "split = val\n");
    cr_assert_eq(weft_dataset_length(ds), (20 - 1) / 16);
    assert_window(ds, 0, tokens, 180);
    weft_dataset_close(ds);
}

Test(io_text, tokens_separate_val_file)
{
    int64_t a[40], b[25];
    for (int i = 0; i < 40; i++)
        a[i] = 1000 + i;
    for (int i = 0; i < 25; i++)
        b[i] = 2000 + i;
    write_tokens_file("train.bin", 20240520, 1, 40, a, 40, 0, -1);
    write_tokens_file("val.bin", 20240520, 1, 25, b, 25, 0, -1);
    const char *keys = "reader = tokens\npath = train.bin\nval = val.bin\nvocab_size = 4096\n"
                       "block_size = 8\n";
    weft_dataset *ds = open_ok(keys);
    cr_assert_eq(weft_dataset_length(ds), 32);
    assert_window(ds, 31, a, 31);
    weft_dataset_close(ds);
    char val_keys[256];
    snprintf(val_keys, sizeof val_keys, "%ssplit = val\n", keys);
    ds = open_ok(val_keys);
    cr_assert_eq(weft_dataset_length(ds), 3);
    for (int64_t k = 0; k < 3; k++)
        assert_window(ds, k, b, 8 * k);
    weft_dataset_close(ds);
}

static const char *const TOKENS_KEYS =
    "reader = tokens\npath = bad.bin\nvocab_size = 1000\nblock_size = 2\n";

Test(io_text, tokens_bad_magic_names_file_offset_found_and_expected)
{
    int64_t t[4] = {1, 2, 3, 4};
    write_tokens_file("bad.bin", 20240521, 1, 4, t, 4, 0, -1);
    open_fails(TOKENS_KEYS, WEFT_ERR_IO, "bad.bin: byte 0: bad magic 20240521",
               "expected 20240520", NULL);
    /* a text file handed to the tokens reader */
    char text[2000];
    memset(text, 'a', sizeof text - 1);
    text[sizeof text - 1] = '\0';
    tu_write_text("bad.bin", text);
    open_fails(TOKENS_KEYS, WEFT_ERR_IO, "bad.bin: byte 0: bad magic 1633771873", NULL);
}

Test(io_text, tokens_bad_version_names_the_version)
{
    int64_t t[4] = {1, 2, 3, 4};
    write_tokens_file("bad.bin", 20240520, 3, 4, t, 4, 0, -1);
    open_fails(TOKENS_KEYS, WEFT_ERR_IO, "bad.bin: byte 4: unsupported version 3",
               "expected 1", NULL);
    write_tokens_file("bad.bin", 20240520, 2, 4, t, 4, 0, -1);
    open_fails(TOKENS_KEYS, WEFT_ERR_IO, "byte 4: unsupported version 2", "uint32", NULL);
}

Test(io_text, tokens_truncated_header)
{
    int64_t t[4] = {1, 2, 3, 4};
    write_tokens_file("bad.bin", 20240520, 1, 4, t, 4, 0, 100);
    open_fails(TOKENS_KEYS, WEFT_ERR_IO, "bad.bin: byte 100: truncated header",
               "the file has 100 bytes", "expected a 1024-byte header", NULL);
    write_tokens_file("bad.bin", 20240520, 1, 4, t, 4, 0, 2); /* not even a magic */
    open_fails(TOKENS_KEYS, WEFT_ERR_IO, "bad.bin: byte 2: truncated header", NULL);
    write_tokens_file("bad.bin", 20240520, 1, 4, t, 4, 0, 1023);
    open_fails(TOKENS_KEYS, WEFT_ERR_IO, "bad.bin: byte 1023: truncated header", NULL);
}

Test(io_text, tokens_truncated_tokens_give_the_count_and_what_the_file_holds)
{
    int64_t t[10] = {0};
    write_tokens_file("bad.bin", 20240520, 1, 10, t, 9, 0, -1);
    open_fails(TOKENS_KEYS, WEFT_ERR_IO, "bad.bin: byte 1042: truncated tokens",
               "the header counts 10 tokens (20 bytes", "holds 18 bytes (9 tokens)", NULL);
    /* 9.5 tokens: cut inside the last one */
    write_tokens_file("bad.bin", 20240520, 1, 10, t, 10, 0, 1024 + 19);
    open_fails(TOKENS_KEYS, WEFT_ERR_IO, "bad.bin: byte 1043: truncated tokens",
               "9 tokens and an odd byte", NULL);
    /* a count far beyond the file allocates nothing and says so */
    write_tokens_file("bad.bin", 20240520, 1, INT32_MAX, t, 10, 0, -1);
    open_fails(TOKENS_KEYS, WEFT_ERR_IO, "truncated tokens", "counts 2147483647 tokens", NULL);
    write_tokens_file("bad.bin", 20240520, 1, -5, t, 10, 0, -1);
    open_fails(TOKENS_KEYS, WEFT_ERR_IO, "bad.bin: byte 8: token count -5",
               "expected a count >= 0", NULL);
}

Test(io_text, tokens_odd_byte_count_and_trailing_data_are_errors)
{
    int64_t t[10] = {0};
    write_tokens_file("bad.bin", 20240520, 1, 10, t, 10, 1, -1);
    open_fails(TOKENS_KEYS, WEFT_ERR_IO, "bad.bin: byte 1044: 1 unexpected bytes",
               "odd byte count", "expected the file to end here", NULL);
    write_tokens_file("bad.bin", 20240520, 1, 10, t, 10, 6, -1);
    open_fails(TOKENS_KEYS, WEFT_ERR_IO, "bad.bin: byte 1044: 6 unexpected bytes after the 10 "
                                         "tokens", NULL);
    /* a zero count with tokens after the header */
    write_tokens_file("bad.bin", 20240520, 1, 0, t, 10, 0, -1);
    open_fails(TOKENS_KEYS, WEFT_ERR_IO, "bad.bin: byte 1024: 20 unexpected bytes", NULL);
}

Test(io_text, tokens_at_or_above_vocab_size_name_the_offset_and_value)
{
    int64_t t[10] = {0, 1, 2, 3, 999, 5, 1000, 7, 8, 9};
    write_tokens_file("bad.bin", 20240520, 1, 10, t, 10, 0, -1);
    open_fails(TOKENS_KEYS, WEFT_ERR_IO, "bad.bin: byte 1036: token 1000 (token 6) is out of "
                                         "range", "expected 0 <= token < 1000 (vocab_size)", NULL);
    t[6] = 65535; /* the largest uint16: read unsigned */
    write_tokens_file("bad.bin", 20240520, 1, 10, t, 10, 0, -1);
    open_fails(TOKENS_KEYS, WEFT_ERR_IO, "byte 1036: token 65535", NULL);
    t[6] = 6; /* 999 is the largest valid one */
    write_tokens_file("bad.bin", 20240520, 1, 10, t, 10, 0, -1);
    weft_dataset *ds = open_ok(TOKENS_KEYS);
    assert_window(ds, 3, t, 3);
    weft_dataset_close(ds);
}

/* ---- the loader ------------------------------------------------------------------------ */

/* Every batch of epochs 0 and 1 over ds, shuffled with seed 7: x then y of each batch,
 * concatenated into out (n values returned). */
static int64_t shuffled_batches(const weft_dataset *ds, int workers, int64_t *out, int64_t cap)
{
    struct weft_dataloader_options o = weft_dataloader_options_default();
    o.batch_size = 12;
    o.shuffle = true;
    o.seed = 7;
    o.num_workers = workers;
    weft_dataloader *dl = weft_dataloader_new(ds, &o);
    cr_assert_not_null(dl, "%s", weft_error_message());
    int64_t n = 0;
    for (int64_t epoch = 0; epoch < 2; epoch++) {
        cr_assert_eq(weft_dataloader_epoch(dl, epoch), 0);
        weft_tensor *f[2];
        int rc;
        while ((rc = weft_dataloader_next(dl, f)) == 1) {
            for (int k = 0; k < 2; k++) {
                cr_assert_eq(f[k]->dtype, WEFT_I64);
                int64_t m = weft_tensor_numel(f[k]);
                cr_assert_leq(n + m, cap);
                const int64_t *p = weft_tensor_data(f[k]);
                memcpy(out + n, p, (size_t)m * sizeof *out);
                n += m;
                weft_tensor_release(f[k]);
            }
        }
        cr_assert_eq(rc, 0, "%s", weft_error_message());
    }
    weft_dataloader_free(dl);
    return n;
}

Test(io_text, loader_shuffles_windows_identically_with_0_and_2_workers)
{
    int64_t tokens[600];
    write_random_text("r.bin", 600, 99, tokens);
    /* train: 540 tokens, 540 - 8 = 532 windows, 45 batches of 12 (the last of 4) */
    weft_dataset *ds = open_ok("reader = text\npath = r.bin\nblock_size = 8\n");
    int64_t cap = 2 * 2 * 532 * 8;
    int64_t *a = malloc((size_t)cap * sizeof *a), *b = malloc((size_t)cap * sizeof *b);
    cr_assert(a && b);
    int64_t na = shuffled_batches(ds, 0, a, cap), nb = shuffled_batches(ds, 2, b, cap);
    cr_assert_eq(na, cap);
    cr_assert_eq(nb, cap);
    cr_assert_eq(memcmp(a, b, (size_t)cap * sizeof *a), 0, "batches differ with 2 workers");
    /* each row of a batch is a window of the text, y = x shifted, and the order is not the
     * unshuffled one; the two epochs differ */
    int64_t starts_in_order = 0;
    for (int64_t off = 0, batch = 0; off < cap; batch++) {
        int64_t rows = batch % 45 == 44 ? 4 : 12;
        const int64_t *x = a + off, *y = a + off + rows * 8;
        for (int64_t r = 0; r < rows; r++) {
            int64_t s = -1;
            for (int64_t c = 0; c + 8 < 540 && s < 0; c++)
                if (memcmp(tokens + c, x + r * 8, 8 * sizeof *x) == 0 &&
                    memcmp(tokens + c + 1, y + r * 8, 8 * sizeof *y) == 0)
                    s = c;
            cr_assert_geq(s, 0, "batch %lld row %lld is no window of the train split",
                          (long long)batch, (long long)r);
            starts_in_order += s == (batch % 45) * 12 + r;
        }
        off += 2 * rows * 8;
    }
    cr_assert_lt(starts_in_order, 20, "%lld of 1064 windows in unshuffled place",
                 (long long)starts_in_order);
    cr_assert_neq(memcmp(a, a + cap / 2, (size_t)(cap / 2) * sizeof *a), 0,
                  "both epochs gave the same order");
    free(a);
    free(b);
    weft_dataset_close(ds);
}

Test(io_text, two_ranks_draw_disjoint_random_windows_that_cover_the_train_split)
{
    /* Byte i of the file is i, so a window's first token is its start offset. train:
     * int(256 * 0.9) = 230 tokens, 230 - 4 = 226 windows, 113 per rank (no padding). */
    unsigned char bytes[256];
    for (int i = 0; i < 256; i++)
        bytes[i] = (unsigned char)i;
    tu_write_bytes("ramp.bin", bytes, sizeof bytes);
    weft_dataset *ds = open_ok("reader = text\npath = ramp.bin\nblock_size = 4\n");
    cr_assert_eq(weft_dataset_length(ds), 226);
    for (int64_t epoch = 0; epoch < 2; epoch++) {
        int owner[226];
        int64_t starts[2][113];
        for (int i = 0; i < 226; i++)
            owner[i] = -1;
        for (int rank = 0; rank < 2; rank++) {
            struct weft_dataloader_options o = weft_dataloader_options_default();
            o.batch_size = 10;
            o.shuffle = true;
            o.seed = 7;
            o.num_workers = rank; /* rank 1 reads with a worker thread */
            o.num_replicas = 2;
            o.rank = rank;
            weft_dataloader *dl = weft_dataloader_new(ds, &o);
            cr_assert_not_null(dl, "%s", weft_error_message());
            cr_assert_eq(weft_dataloader_len(dl), 12);
            cr_assert_eq(weft_dataloader_epoch(dl, epoch), 0);
            int64_t n = 0;
            weft_tensor *f[2];
            int rc;
            while ((rc = weft_dataloader_next(dl, f)) == 1) {
                const int64_t *x = weft_tensor_data(f[0]), *y = weft_tensor_data(f[1]);
                for (int64_t r = 0; r < weft_tensor_size(f[0], 0); r++, n++) {
                    int64_t s = x[r * 4];
                    cr_assert_lt(n, 113);
                    cr_assert(s >= 0 && s < 226, "window start %lld", (long long)s);
                    for (int64_t i = 0; i < 4; i++) {
                        cr_assert_eq(x[r * 4 + i], s + i);
                        cr_assert_eq(y[r * 4 + i], s + i + 1);
                    }
                    cr_assert_eq(owner[s], -1, "epoch %lld: window at %lld read by ranks %d "
                                 "and %d", (long long)epoch, (long long)s, owner[s], rank);
                    owner[s] = rank;
                    starts[rank][n] = s;
                }
                weft_tensor_release(f[0]);
                weft_tensor_release(f[1]);
            }
            cr_assert_eq(rc, 0, "%s", weft_error_message());
            cr_assert_eq(n, 113);
            weft_dataloader_free(dl);
        }
        for (int i = 0; i < 226; i++)
            cr_assert_neq(owner[i], -1, "epoch %lld: no rank read the window at %d",
                          (long long)epoch, i);
        /* Random windows: neither rank reads its shard as a run of ascending starts. */
        for (int rank = 0; rank < 2; rank++) {
            int ascending = 0;
            for (int i = 1; i < 113; i++)
                ascending += starts[rank][i] > starts[rank][i - 1];
            cr_assert(ascending > 30 && ascending < 83, "rank %d: %d of 112 steps ascend", rank,
                      ascending);
        }
    }
    weft_dataset_close(ds);
}

/* ---- the shipped corpus ------------------------------------------------------------------- */

Test(io_text, shipped_corpus_reads_as_documented)
{
    const char *root = getenv("WEFT_SOURCE_ROOT");
    cr_assert_not_null(root, "WEFT_SOURCE_ROOT is not set");
    char keys[1024];
    snprintf(keys, sizeof keys, "reader = text\npath = %s/data/text/kjv-genesis-2kings.txt\n"
                                "block_size = 64\n", root);
    weft_dataset *train = open_ok(keys);
    /* 1,514,707 bytes: train int(1514707 * 0.9) = 1,363,236, val 151,471 */
    cr_assert_eq(weft_dataset_length(train), 1363236 - 64);
    int64_t k = 0, *x, *y;
    read_xy(train, 1, &k, &x, &y);
    const char *start = "Genesis 1\n\nIn the beginning God created the heaven and the earth.";
    for (int i = 0; i < 64; i++) {
        cr_assert_eq(x[i], (unsigned char)start[i]);
        cr_assert_eq(y[i], (unsigned char)start[i + 1]);
    }
    free(x);
    free(y);
    weft_dataset_close(train);
    snprintf(keys + strlen(keys), sizeof keys - strlen(keys), "split = val\n");
    weft_dataset *val = open_ok(keys);
    cr_assert_eq(weft_dataset_length(val), (151471 - 1) / 64);
    weft_dataset_close(val);
}
