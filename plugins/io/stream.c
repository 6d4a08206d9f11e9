/* plugins/io/stream.c: reading a file front to back, raw or gzip'd.
 *
 * zlib's gz* functions read both: gzdirect() says whether the file was plain. For a
 * plain file we know the size up front and check it before allocating; for a gzip'd
 * one the decompressed size is unknown until the end, so buffers grow with the data
 * that really arrives instead of trusting a size read from the file.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef WEFT_IO_HAVE_ZLIB
#include <zlib.h>
#endif

#include "io.h"

#define CHUNK ((size_t)1 << 20)

static int io_oom(const char *path)
{
    return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "%s: out of memory while reading", path);
}

const char *io_stream_offset_kind(const struct io_stream *s)
{
    return s->compressed ? "(decompressed) " : "";
}

int io_stream_open(struct io_stream *s, const char *path)
{
    memset(s, 0, sizeof *s);
    s->path = path;
    /* a FIFO or a directory is refused before anything reads (or waits on) it */
    int fd = weft_open_regular_file(path, NULL);
    struct stat st;
    if (fd < 0)
        return weft_error_code();
    if (fstat(fd, &st) != 0) {
        int rc = weft_error_set(WEFT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        close(fd);
        return rc;
    }
    s->raw_size = (int64_t)st.st_size;
#ifdef WEFT_IO_HAVE_ZLIB
    gzFile gz = gzdopen(fd, "rb"); /* fails only for want of memory: fd is open */
    if (!gz) {
        close(fd);
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "%s: out of memory for zlib's stream",
                              path);
    }
    gzbuffer(gz, 1u << 17);
    s->handle = gz;
    s->compressed = !gzdirect(gz);
#else
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        close(fd);
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "%s: out of memory for a stream", path);
    }
    s->handle = f;
    unsigned char magic[2];
    size_t got = fread(magic, 1, 2, f);
    rewind(f);
    if (got == 2 && magic[0] == 0x1f && magic[1] == 0x8b) {
        fclose(f);
        s->handle = NULL;
        return weft_error_set(WEFT_ERR_IO, "%s: gzip'd file, but this weft-io was built "
                                           "without zlib; gunzip it first", path);
    }
#endif
    if (s->compressed)
        s->raw_size = -1;
    return 0;
}

void io_stream_close(struct io_stream *s)
{
    if (!s->handle)
        return;
#ifdef WEFT_IO_HAVE_ZLIB
    gzclose_r((gzFile)s->handle);
#else
    fclose((FILE *)s->handle);
#endif
    s->handle = NULL;
}

/* Reads up to n bytes; returns how many, or negative with an error for a read or
 * decompression failure (a clean end of data is a short count, not an error). */
static int64_t read_some(struct io_stream *s, void *buf, size_t n)
{
    size_t total = 0;
    while (total < n) {
        size_t want = n - total < CHUNK ? n - total : CHUNK;
#ifdef WEFT_IO_HAVE_ZLIB
        gzFile gz = (gzFile)s->handle;
        int got = gzread(gz, (char *)buf + total, (unsigned)want);
        int err = Z_OK;
        const char *msg = gzerror(gz, &err);
        if (got < 0 || (err != Z_OK && err != Z_BUF_ERROR)) {
            /* zlib's message starts with the path; we give it ourselves. */
            size_t plen = strlen(s->path);
            if (strncmp(msg, s->path, plen) == 0 && strncmp(msg + plen, ": ", 2) == 0)
                msg += plen + 2;
            /* zlib notices a bad checksum only after handing out the data before it, so
             * the offset is where the error was noticed, or later. */
            return weft_error_set(WEFT_ERR_IO, "%s: %s after %sbyte %llu: %s", s->path,
                                  s->compressed ? "corrupt gzip data" : "read error",
                                  s->compressed ? "decompressed " : "",
                                  (unsigned long long)(s->offset + total),
                                  err == Z_ERRNO ? strerror(errno) : msg);
        }
        if (got > 0) {
            total += (size_t)got;
            continue;
        }
        /* Z_BUF_ERROR: the compressed data stops before the gzip stream's end. That is
         * an end of data for the caller, whose message then says what was cut short. */
        s->gz_cut = err == Z_BUF_ERROR;
        break;
#else
        FILE *f = (FILE *)s->handle;
        size_t got = fread((char *)buf + total, 1, want, f);
        total += got;
        if (got < want) {
            if (ferror(f))
                return weft_error_set(WEFT_ERR_IO, "%s: byte %llu: read error: %s", s->path,
                                      (unsigned long long)(s->offset + total),
                                      strerror(errno));
            break;
        }
#endif
    }
    s->offset += total;
    return (int64_t)total;
}

static int truncated(const struct io_stream *s, uint64_t start, size_t want, size_t got,
                     const char *what)
{
    return weft_error_set(WEFT_ERR_IO,
                          "%s: byte %s%llu: truncated %s: expected %zu bytes, found %zu%s",
                          s->path, io_stream_offset_kind(s), (unsigned long long)start, what,
                          want, got, s->gz_cut ? " (the gzip stream ends early)" : "");
}

int io_stream_read(struct io_stream *s, void *buf, size_t n, const char *what)
{
    uint64_t start = s->offset;
    int64_t got = read_some(s, buf, n);
    if (got < 0)
        return (int)got;
    if ((size_t)got < n)
        return truncated(s, start, n, (size_t)got, what);
    return 0;
}

int io_stream_read_alloc(struct io_stream *s, size_t n, void **out, const char *what)
{
    *out = NULL;
    uint64_t start = s->offset;
    if (s->raw_size >= 0 && (uint64_t)s->raw_size - s->offset < n)
        return truncated(s, start, n, (size_t)((uint64_t)s->raw_size - s->offset), what);
    /* Plain files were checked above: allocate at once. Compressed ones grow. */
    size_t cap = s->raw_size >= 0 || n <= CHUNK ? n : CHUNK;
    unsigned char *buf = malloc(cap ? cap : 1);
    if (!buf)
        return io_oom(s->path);
    size_t have = 0;
    while (have < n) {
        if (have == cap) {
            size_t next = cap > n / 2 ? n : cap * 2;
            unsigned char *grown = realloc(buf, next);
            if (!grown) {
                free(buf);
                return io_oom(s->path);
            }
            buf = grown;
            cap = next;
        }
        int64_t got = read_some(s, buf + have, cap - have);
        if (got < 0) {
            free(buf);
            return (int)got;
        }
        have += (size_t)got;
        if (have < cap)
            break; /* end of data */
    }
    if (have < n) {
        free(buf);
        return truncated(s, start, n, have, what);
    }
    *out = buf;
    return 0;
}

int io_stream_read_all(struct io_stream *s, char **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    size_t cap = s->raw_size >= 0 ? (size_t)s->raw_size - s->offset + 1 : CHUNK;
    char *buf = malloc(cap);
    if (!buf)
        return io_oom(s->path);
    size_t have = 0;
    for (;;) {
        if (cap - have < 2) {
            char *grown = cap > SIZE_MAX / 2 ? NULL : realloc(buf, cap * 2);
            if (!grown) {
                free(buf);
                return io_oom(s->path);
            }
            buf = grown;
            cap *= 2;
        }
        int64_t got = read_some(s, buf + have, cap - have - 1);
        if (got < 0) {
            free(buf);
            return (int)got;
        }
        have += (size_t)got;
        if (got == 0)
            break;
    }
    if (s->gz_cut) {
        free(buf);
        return weft_error_set(WEFT_ERR_IO,
                              "%s: byte (decompressed) %zu: the gzip stream ends early (the "
                              "file is truncated)",
                              s->path, have);
    }
    buf[have] = '\0';
    *out = buf;
    *len = have;
    return 0;
}

int io_stream_expect_end(struct io_stream *s, const char *after)
{
    unsigned char extra[64];
    uint64_t start = s->offset;
    int64_t got = read_some(s, extra, sizeof extra);
    if (got < 0)
        return (int)got;
    if (got == 0)
        return 0;
    if (s->raw_size >= 0)
        return weft_error_set(WEFT_ERR_IO,
                              "%s: byte %llu: %lld unexpected bytes after %s (expected the "
                              "file to end here)",
                              s->path, (unsigned long long)start,
                              (long long)(s->raw_size - (int64_t)start), after);
    return weft_error_set(WEFT_ERR_IO,
                          "%s: byte (decompressed) %llu: unexpected data after %s (expected "
                          "the file to end here)",
                          s->path, (unsigned long long)start, after);
}
