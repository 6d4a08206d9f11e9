/* plugins/io/reader_tokens.c: the `tokens` reader: llm.c's token files (what its
 * dev/data scripts write, e.g. tinyshakespeare_val.bin), memory-mapped, cut into (x, y)
 * windows for a language model by token_stream.c (keys and splits there).
 *
 * Format (llm.c, dev/data/data_common.py write_datafile): a header of 256 int32
 * little-endian: [0] the magic 20240520, [1] the version, 1 (uint16 tokens; version 2
 * holds uint32 tokens and is not read here), [2] the token count; the rest 0. Then the
 * tokens, uint16 little-endian, exactly count of them.
 *
 * Keys: those of token_stream.c and vocab_size (required, 1..65536): every token must be
 * below it. open() checks the header, the size and every token, so read() never meets a
 * bad one. */
#include <stdio.h>

#include "io.h"

#define TOKENS_MAGIC 20240520
#define TOKENS_VERSION 1
#define TOKENS_HEADER_INTS 256
#define TOKENS_HEADER_BYTES (TOKENS_HEADER_INTS * 4)

static int32_t le32(const unsigned char *p)
{
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                     (uint32_t)p[3] << 24);
}

/* The header's checks; size is the file's. */
static int check_header(const char *path, const unsigned char *p, size_t size)
{
    if (size >= 4 && le32(p) != TOKENS_MAGIC)
        return weft_error_set(WEFT_ERR_IO, "%s: byte 0: bad magic %ld (int32 little-endian); "
                                           "expected %d (an llm.c token file)",
                              path, (long)le32(p), TOKENS_MAGIC);
    if (size >= 8 && le32(p + 4) != TOKENS_VERSION)
        return weft_error_set(WEFT_ERR_IO, "%s: byte 4: unsupported version %ld; expected %d "
                                           "(uint16 tokens)%s",
                              path, (long)le32(p + 4), TOKENS_VERSION,
                              le32(p + 4) == 2 ? " (version 2 is llm.c's uint32 tokens)" : "");
    if (size < TOKENS_HEADER_BYTES)
        return weft_error_set(WEFT_ERR_IO, "%s: byte %zu: truncated header: the file has %zu "
                                           "bytes; expected a %d-byte header (256 int32: magic "
                                           "%d, version %d, token count)",
                              path, size, size, TOKENS_HEADER_BYTES, TOKENS_MAGIC,
                              TOKENS_VERSION);
    if (le32(p + 8) < 0)
        return weft_error_set(WEFT_ERR_IO, "%s: byte 8: token count %ld; expected a count >= 0",
                              path, (long)le32(p + 8));
    return 0;
}

static int check_size(const char *path, int64_t count, size_t size)
{
    size_t have = size - TOKENS_HEADER_BYTES;
    size_t want = (size_t)count * 2;
    if (have < want)
        return weft_error_set(WEFT_ERR_IO, "%s: byte %zu: truncated tokens: the header counts "
                                           "%lld tokens (%zu bytes after the header), the file "
                                           "holds %zu bytes (%zu tokens%s)",
                              path, size, (long long)count, want, have, have / 2,
                              have % 2 ? " and an odd byte" : "");
    if (have > want)
        return weft_error_set(WEFT_ERR_IO, "%s: byte %zu: %zu unexpected bytes after the %lld "
                                           "tokens the header counts%s; expected the file to "
                                           "end here",
                              path, TOKENS_HEADER_BYTES + want, have - want, (long long)count,
                              (have - want) % 2 ? " (an odd byte count: not whole uint16 "
                                                  "tokens)"
                                                : "");
    return 0;
}

/* Every token below vocab: t: [count] uint16 little-endian. */
static int check_tokens(const char *path, const unsigned char *t, int64_t count,
                        int64_t vocab)
{
    for (int64_t i = 0; i < count; i++) {
        unsigned v = t[2 * i] | (unsigned)t[2 * i + 1] << 8;
        if ((int64_t)v >= vocab)
            return weft_error_set(WEFT_ERR_IO, "%s: byte %lld: token %u (token %lld) is out of "
                                               "range: expected 0 <= token < %lld (vocab_size)",
                                  path, (long long)(TOKENS_HEADER_BYTES + 2 * i), v,
                                  (long long)i, (long long)vocab);
    }
    return 0;
}

static int tokens_load(const char *path, int64_t vocab, struct io_tokens *out)
{
    int rc = io_map_open(&out->map, path);
    if (rc < 0)
        return rc;
    const unsigned char *p = out->map.data;
    size_t size = out->map.size;
    rc = check_header(path, p, size);
    int64_t count = rc == 0 ? le32(p + 8) : 0;
    if (rc == 0)
        rc = check_size(path, count, size);
    if (rc == 0)
        rc = check_tokens(path, p + TOKENS_HEADER_BYTES, count, vocab);
    if (rc < 0) {
        io_map_close(&out->map);
        return rc;
    }
    out->data = p + TOKENS_HEADER_BYTES;
    out->width = 2;
    out->count = count;
    return 0;
}

static int tokens_open(const weft_options *o, struct weft_dataset_info *info, void **ctx)
{
    int64_t vocab;
    if (!weft_options_has(o, "vocab_size"))
        return weft_options_error(o, "missing key 'vocab_size': expected the number of token "
                                     "ids, every token below it (50257 for GPT-2's)");
    int rc = weft_options_int_range(o, "vocab_size", 0, 1, 65536, &vocab);
    if (rc < 0)
        return rc;
    return io_token_stream_open(o, vocab, tokens_load, info, ctx);
}

const struct weft_dataset_reader io_tokens_reader = {
    .base = WEFT_VTABLE(WEFT_KIND_READER, "tokens", struct weft_dataset_reader),
    .description = "llm.c token files (header magic 20240520, uint16 tokens), memory-mapped: "
                   "(x, y) windows for language models",
    .open = tokens_open,
    .read = io_token_stream_read,
    .close = io_token_stream_close,
};
