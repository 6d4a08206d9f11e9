/* plugins/io/token_stream.c: what the language-model readers (text, tokens) share: the
 * train/val split of a token stream and its (x, y) windows.
 *
 * Keys: path (required), block_size (required, >= 1), split = train | val (train),
 * val_fraction (0.1, in (0, 1)), val (a separate validation file).
 *
 * Splits follow nanoGPT: without `val`, a file of n tokens splits at
 * cut = floor(n * (1 - val_fraction)) (nanoGPT's int(n*0.9)): train is tokens [0, cut),
 * val is [cut, n). With `val`, train is all of `path` and val all of `val`.
 *
 * Windows: a sample is block_size + 1 consecutive tokens t[s .. s + block_size]; x is the
 * first block_size of them, y the last (y[i] = t[s + i + 1]). The train split has one
 * sample per start position (s = i: ntrain - block_size samples) so that the loader's
 * seeded shuffle draws random windows; the val split has non-overlapping ones
 * (s = i * block_size: (nval - 1) / block_size samples), so a full pass over it is one
 * fixed set of windows and its loss is exactly reproducible. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "io.h"

enum split { SPLIT_TRAIN, SPLIT_VAL };

struct token_stream {
    struct io_tokens file;
    const unsigned char *first; /* the split's first token */
    int64_t ntokens;            /* tokens in the split */
    int64_t block_size;
    int64_t stride;             /* between window starts: 1 (train) or block_size (val) */
};

/* The keys, read once so that every key is read (the unknown-key check reports the
 * others) whatever the split. */
struct stream_keys {
    char path[IO_PATH_MAX];
    char val[IO_PATH_MAX];
    bool has_val;
    int64_t block_size;
    int split;
    double val_fraction;
};

static int read_keys(const weft_options *o, struct stream_keys *k)
{
    static const char *const splits[] = {"train", "val", NULL};
    int rc = io_config_path(o, "path", true, "the path of the token stream's file", k->path,
                            sizeof k->path);
    if (rc < 0)
        return rc;
    int has_val = io_config_path(o, "val", false, "the path of a validation file", k->val,
                                 sizeof k->val);
    if (has_val < 0)
        return has_val;
    k->has_val = has_val == 1;
    if (!weft_options_has(o, "block_size"))
        return weft_options_error(o, "missing key 'block_size': expected the number of "
                                     "tokens in a sample (x and y), a positive integer");
    if ((rc = weft_options_positive(o, "block_size", 1, &k->block_size)) < 0 ||
        (rc = weft_options_choice(o, "split", splits, SPLIT_TRAIN, &k->split)) < 0 ||
        (rc = weft_options_double(o, "val_fraction", 0.1, &k->val_fraction)) < 0)
        return rc;
    if (!(k->val_fraction > 0.0 && k->val_fraction < 1.0))
        return weft_options_bad_value(o, "val_fraction", "expected a fraction in (0, 1), "
                                                         "e.g. 0.1");
    if (k->has_val && weft_options_has(o, "val_fraction"))
        return weft_options_error(o, "val_fraction and val are both set: with a separate "
                                     "validation file, split = train reads all of path; "
                                     "expected one of the two");
    if (k->block_size > INT64_MAX / 2)
        return weft_options_bad_value(o, "block_size", "expected a block size below 2^62");
    return 0;
}

/* ---- open ----------------------------------------------------------------------------- */

int io_token_stream_open(const weft_options *o, int64_t vocab, io_tokens_load_fn load,
                         struct weft_dataset_info *info, void **out)
{
    struct stream_keys k;
    memset(&k, 0, sizeof k);
    int rc = read_keys(o, &k);
    if (rc < 0)
        return rc;
    const char *path = k.split == SPLIT_VAL && k.has_val ? k.val : k.path;
    struct token_stream *s = calloc(1, sizeof *s);
    if (!s)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    rc = load(path, vocab, &s->file);
    if (rc < 0) {
        free(s);
        return rc;
    }
    int64_t n = s->file.count;
    int64_t start = 0, count = n;
    if (!k.has_val) {
        /* nanoGPT's int(n * 0.9): the product rounded once in double, then truncated */
        int64_t cut = (int64_t)floor((double)n * (1.0 - k.val_fraction));
        if (cut > n)
            cut = n;
        start = k.split == SPLIT_TRAIN ? 0 : cut;
        count = k.split == SPLIT_TRAIN ? cut : n - cut;
    }
    s->ntokens = count;
    s->block_size = k.block_size;
    s->stride = k.split == SPLIT_TRAIN ? 1 : k.block_size;
    int64_t length = count > k.block_size
                         ? (k.split == SPLIT_TRAIN ? count - k.block_size
                                                   : (count - 1) / k.block_size)
                         : 0;
    if (length < 1) {
        char part[96] = "";
        if (!k.has_val)
            snprintf(part, sizeof part, " (the %s %g of its %lld tokens)",
                     k.split == SPLIT_TRAIN ? "first" : "last",
                     k.split == SPLIT_TRAIN ? 1.0 - k.val_fraction : k.val_fraction,
                     (long long)n);
        rc = weft_options_error(o, "%s: split '%s' has %lld tokens%s%s, too few for one "
                                   "window of block_size = %lld: expected at least "
                                   "block_size + 1 = %lld tokens",
                                path, k.split == SPLIT_TRAIN ? "train" : "val",
                                (long long)count, part, n == 0 ? ", the file is empty" : "",
                                (long long)k.block_size, (long long)k.block_size + 1);
        io_token_stream_close(s);
        return rc;
    }
    /* Only now: an empty file has no mapping, and NULL + 0 is undefined (found by
     * fuzz/fuzz_dataset_text; the seed corpus keeps the empty file). */
    s->first = s->file.data + (size_t)start * (size_t)s->file.width;
    info->length = length;
    info->nfields = 2;
    static const char *const names[2] = {"x", "y"};
    for (int f = 0; f < 2; f++) {
        struct weft_dataset_field *fd = &info->fields[f];
        snprintf(fd->name, sizeof fd->name, "%s", names[f]);
        fd->dtype = WEFT_I64;
        fd->ndim = 1;
        fd->shape[0] = k.block_size;
    }
    info->fields[1].num_classes = vocab;
    *out = s;
    return 0;
}

void io_token_stream_close(void *ctx)
{
    struct token_stream *s = ctx;
    if (!s)
        return;
    io_map_close(&s->file.map);
    free(s);
}

/* ---- read ----------------------------------------------------------------------------- */

/* The window copy, once per token width. x, y: [n, T] int64 (T = block_size); sample k
 * starts at token s = indices[k] * stride; x[k][i] = t[s + i], y[k][i] = t[s + i + 1]. */
#define TOKEN_U8(p, i) ((int64_t)(p)[i])
#define TOKEN_U16LE(p, i) ((int64_t)((p)[2 * (i)] | (unsigned)(p)[2 * (i) + 1] << 8))
#define DEFINE_WINDOWS(NAME, TOKEN, WIDTH)                                                   \
    static void NAME(const struct token_stream *s, int64_t n, const int64_t *indices,       \
                     int64_t *x, int64_t *y)                                                 \
    {                                                                                        \
        const int64_t T = s->block_size;                                                     \
        for (int64_t k = 0; k < n; k++) {                                                    \
            const unsigned char *t = s->first + (size_t)(indices[k] * s->stride) * (WIDTH);  \
            int64_t *xk = x + k * T, *yk = y + k * T;                                        \
            int64_t prev = TOKEN(t, 0);                                                      \
            for (int64_t i = 0; i < T; i++) {                                                \
                int64_t next = TOKEN(t, i + 1);                                              \
                xk[i] = prev;                                                                \
                yk[i] = next;                                                                \
                prev = next;                                                                 \
            }                                                                                \
        }                                                                                    \
    }
DEFINE_WINDOWS(windows_u8, TOKEN_U8, 1)
DEFINE_WINDOWS(windows_u16le, TOKEN_U16LE, 2)

int io_token_stream_read(void *ctx, int64_t n, const int64_t *indices, void *const *buffers)
{
    const struct token_stream *s = ctx;
    if (s->file.width == 1)
        windows_u8(s, n, indices, buffers[0], buffers[1]);
    else
        windows_u16le(s, n, indices, buffers[0], buffers[1]);
    return 0;
}
