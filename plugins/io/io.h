/* plugins/io/io.h: what the readers of weft-io.so share: config helpers, files read
 * whole or as a stream (raw or gzip'd), memory-mapped files and byte order. */
#ifndef WEFT_IO_H
#define WEFT_IO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <weft/options.h>
#include <weft/dataset.h>
#include <weft/checked.h>
#include <weft/error.h>
#include <weft/file.h>

#define IO_PATH_MAX 4096

/* The readers (one file each). */
extern const struct weft_dataset_reader io_idx_reader;
extern const struct weft_dataset_reader io_csv_reader;
extern const struct weft_dataset_reader io_npy_reader;
extern const struct weft_dataset_reader io_synthetic_reader;
extern const struct weft_dataset_reader io_mtx_reader;
extern const struct weft_dataset_reader io_libsvm_reader;
extern const struct weft_dataset_reader io_text_reader;
extern const struct weft_dataset_reader io_tokens_reader;

/* ---- options ---------------------------------------------------------------------- */

/* Reads key as a path resolved against the config's directory into out. Returns 1 when
 * set, 0 when absent and optional, negative with an error ("missing key 'images':
 * expected <what>") when absent and required or when the value is empty. */
int io_config_path(const weft_options *o, const char *key, bool required, const char *what,
                   char *out, size_t size);

/* ---- sequential reading, raw or gzip'd ------------------------------------------ */

/* A file read front to back; a gzip'd file (recognised by its magic, whatever its
 * name) is decompressed on the fly through zlib. `offset` counts decompressed bytes. */
struct io_stream {
    const char *path;
    void *handle;      /* gzFile with zlib, FILE * without */
    bool compressed;
    bool gz_cut;       /* the gzip data ended before the stream's end marker */
    uint64_t offset;   /* bytes consumed so far */
    int64_t raw_size;  /* file size when not compressed, else -1 */
};

int io_stream_open(struct io_stream *s, const char *path);
void io_stream_close(struct io_stream *s);
/* Reads exactly n bytes; a short read is "<path>: byte <offset>: truncated <what>:
 * expected n bytes, found k". */
int io_stream_read(struct io_stream *s, void *buf, size_t n, const char *what);
/* Reads exactly n bytes into a new malloc'd *out. Memory grows only as data really
 * arrives (or is checked against the file size first), so a size that a corrupt header
 * claims never becomes an allocation. */
int io_stream_read_alloc(struct io_stream *s, size_t n, void **out, const char *what);
/* Reads everything that is left into a new malloc'd, NUL-terminated *out (*len bytes,
 * NUL not counted). */
int io_stream_read_all(struct io_stream *s, char **out, size_t *len);
/* Error unless the stream is at its end ("<path>: byte N: unexpected data after ..."). */
int io_stream_expect_end(struct io_stream *s, const char *after);
/* "(decompressed) " for compressed streams, "" otherwise: for messages that give
 * offsets. */
const char *io_stream_offset_kind(const struct io_stream *s);

/* ---- memory-mapped files -------------------------------------------------------- */

struct io_map {
    const unsigned char *data;
    size_t size;
};
/* Maps the whole file read-only; an empty file is mapped as data NULL, size 0. */
int io_map_open(struct io_map *m, const char *path);
void io_map_close(struct io_map *m);

/* ---- text files (mtx, libsvm) ------------------------------------------------------ */

/* A text file held whole: mapped when plain, decompressed into memory when gzip'd.
 * data is not NUL-terminated (a mapping cannot be): parsers go by len. */
struct io_text {
    const char *data;
    size_t len;
    bool compressed;
    struct io_map map; /* plain files */
    char *owned;       /* decompressed files */
};
int io_text_open(struct io_text *t, const char *path);
void io_text_close(struct io_text *t);

/* A token of text, for messages: at most 48 bytes, non-printable bytes shown as '?',
 * "..." when cut. */
const char *io_text_show(const char *p, size_t len, char *buf, size_t size);

/* Whole-token parsers: the token p[0..len) must be exactly a number. */
/* A decimal integer with an optional sign, within int64. */
bool io_parse_i64(const char *p, size_t len, int64_t *out);
/* A decimal floating-point number as strtod reads it (no hex, no inf/nan: only finite
 * values pass). Common short forms ("0.125", "-3e-2") take a fast path that rounds
 * exactly as strtod does. */
bool io_parse_f64(const char *p, size_t len, double *out);

/* ---- sparse rows as fixed-shape samples (mtx, libsvm) --------------------------------- */

/* One row of a sparse matrix written as a padded ("ELL") sample: the first nnz slots
 * hold the column indices and values, the rest -1 and 0. */
static inline void io_ell_row(const int64_t *cols, const float *vals, int64_t nnz, int64_t width,
                              int64_t *out_cols, float *out_vals)
{
    for (int64_t k = 0; k < nnz; k++) {
        out_cols[k] = cols[k];
        out_vals[k] = vals[k];
    }
    for (int64_t k = nnz; k < width; k++) {
        out_cols[k] = -1;
        out_vals[k] = 0.0f;
    }
}

/* ---- token streams (text, tokens) ------------------------------------------------ */

/* The tokens of one mapped file: count tokens of width bytes each from data (width 1:
 * bytes; width 2: uint16 little-endian, whatever the host's byte order). */
struct io_tokens {
    struct io_map map;
    const unsigned char *data;
    int width;
    int64_t count;
};

/* A reader's file format: maps path into *out and validates it whole (every token
 * < vocab). Returns 0, or negative with an error naming the file and the byte offset and
 * nothing left mapped. */
typedef int (*io_tokens_load_fn)(const char *path, int64_t vocab, struct io_tokens *out);

/* The open() of a language-model reader (token_stream.c): reads the keys path, val,
 * split, val_fraction and block_size, loads the file the split needs with load and
 * describes the samples: "x" and "y", int64 [block_size], y = x shifted by one token, y
 * with num_classes = vocab. The ctx it makes goes to io_token_stream_read/close. */
int io_token_stream_open(const weft_options *o, int64_t vocab, io_tokens_load_fn load,
                         struct weft_dataset_info *info, void **ctx);
int io_token_stream_read(void *ctx, int64_t n, const int64_t *indices, void *const *buffers);
void io_token_stream_close(void *ctx);

/* ---- byte order and sizes -------------------------------------------------------- */

static inline uint32_t io_be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Reverses the bytes of each of n items of `size` bytes (1, 2, 4 or 8) in place. */
void io_swap_bytes(void *data, size_t n, size_t size);
/* Copies one item of `size` bytes, reversing its bytes when swap is set. */
void io_copy_item(void *dst, const void *src, size_t size, bool swap);
/* true when the host is little-endian. */
bool io_host_little_endian(void);

#endif
