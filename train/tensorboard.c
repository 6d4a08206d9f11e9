/* TensorBoard event files: TFRecord framing around hand-encoded Event protobufs
 * (weft/tensorboard.h). Only the handful of fields TensorBoard needs for scalars are
 * written, with the small encoder the ONNX exporter uses too (protobuf/pb.h), in place
 * of a protobuf library. */
#include "weft/tensorboard.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "pb.h"
#include "weft/error.h"

struct weft_summary_writer {
    FILE *f;
    char *path;
    bool failed; /* a write failed: later calls report it instead of writing half records */
};

/* ---- CRC-32C (Castagnoli, reflected polynomial 0x82f63b78) ------------------------- */

static uint32_t crc32c_table[256];
static pthread_once_t crc32c_once = PTHREAD_ONCE_INIT;

static void crc32c_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
        crc32c_table[i] = c;
    }
}

uint32_t weft_tfrecord_masked_crc32c(const void *data, size_t n)
{
    pthread_once(&crc32c_once, crc32c_init);
    const unsigned char *p = data;
    uint32_t crc = 0xffffffffu;
    for (size_t i = 0; i < n; i++)
        crc = crc32c_table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    crc ^= 0xffffffffu;
    /* TFRecord masks the CRC so that a CRC of data that itself holds CRCs stays sound. */
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

/* ---- records ------------------------------------------------------------------------ */

static double wall_time(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + tv.tv_usec / 1e6;
}

static int write_record(weft_summary_writer *w, const struct pb *m)
{
    if (w->failed)
        return weft_error_set(WEFT_ERR_IO, "%s: an earlier write failed", w->path);
    if (pb_failed(m))
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "%s: out of memory for an event", w->path);
    unsigned char head[12];
    uint64_t n = m->len;
    for (int i = 0; i < 8; i++)
        head[i] = (unsigned char)(n >> (8 * i));
    uint32_t hcrc = weft_tfrecord_masked_crc32c(head, 8);
    uint32_t dcrc = weft_tfrecord_masked_crc32c(m->buf, m->len);
    for (int i = 0; i < 4; i++)
        head[8 + i] = (unsigned char)(hcrc >> (8 * i));
    unsigned char tail[4];
    for (int i = 0; i < 4; i++)
        tail[i] = (unsigned char)(dcrc >> (8 * i));
    if (fwrite(head, 1, sizeof head, w->f) != sizeof head ||
        fwrite(m->buf, 1, m->len, w->f) != m->len ||
        fwrite(tail, 1, sizeof tail, w->f) != sizeof tail) {
        w->failed = true;
        return weft_error_set(WEFT_ERR_IO, "%s: write failed: %s", w->path, strerror(errno));
    }
    return 0;
}

/* mkdir -p: TensorBoard users name a run directory that does not exist yet. */
static int make_dirs(const char *dir)
{
    char buf[4096];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof buf)
        return weft_error_set(WEFT_ERR_IO, "tensorboard: bad log directory '%s'", dir);
    memcpy(buf, dir, n + 1);
    for (char *p = buf + 1; ; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char c = *p;
        *p = '\0';
        if (mkdir(buf, 0777) != 0 && errno != EEXIST)
            return weft_error_set(WEFT_ERR_IO, "tensorboard: cannot create directory '%s': %s",
                                  buf, strerror(errno));
        *p = c;
        if (c == '\0')
            break;
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return weft_error_set(WEFT_ERR_IO, "tensorboard: '%s' is not a directory", dir);
    return 0;
}

weft_summary_writer *weft_summary_writer_open(const char *logdir)
{
    if (!logdir) {
        weft_error_set(WEFT_ERR_VALUE, "tensorboard: no log directory given");
        return NULL;
    }
    if (make_dirs(logdir) < 0)
        return NULL;
    weft_summary_writer *w = calloc(1, sizeof *w);
    if (!w) {
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "tensorboard: out of memory");
        return NULL;
    }
    char host[256] = "localhost";
    if (gethostname(host, sizeof host) != 0)
        strcpy(host, "localhost");
    host[sizeof host - 1] = '\0';
    size_t size = strlen(logdir) + strlen(host) + 64;
    w->path = malloc(size);
    if (!w->path) {
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "tensorboard: out of memory");
        goto fail;
    }
    /* Two writers opened in the same second (a quick restart) must not share a file:
     * "x" refuses an existing name and a counter is appended, as TensorBoard's own
     * writers add a suffix. */
    long now = (long)time(NULL);
    for (int k = 0; k < 100 && !w->f; k++) {
        if (k == 0)
            snprintf(w->path, size, "%s/events.out.tfevents.%ld.%s", logdir, now, host);
        else
            snprintf(w->path, size, "%s/events.out.tfevents.%ld.%s.%d", logdir, now, host, k);
        w->f = fopen(w->path, "wbx");
        if (!w->f && errno != EEXIST)
            break;
    }
    if (!w->f) {
        weft_error_set(WEFT_ERR_IO, "tensorboard: cannot create '%s': %s", w->path,
                       strerror(errno));
        goto fail;
    }
    struct pb m = PB_INIT;
    pb_double(&m, 1, wall_time());
    pb_int(&m, 2, 0);
    pb_string(&m, 3, "brain.Event:2");
    int rc = write_record(w, &m);
    pb_free(&m);
    if (rc < 0 || weft_summary_writer_flush(w) < 0)
        goto fail;
    return w;
fail:
    if (w->f) {
        fclose(w->f);
        unlink(w->path);
    }
    free(w->path);
    free(w);
    return NULL;
}

int weft_summary_writer_add_scalar(weft_summary_writer *w, const char *tag, double value,
                                   int64_t step)
{
    if (!w || !tag)
        return weft_error_set(WEFT_ERR_VALUE, "tensorboard: add_scalar needs a writer and a tag");
    size_t taglen = strlen(tag);
    if (taglen == 0 || taglen > 255)
        return weft_error_set(WEFT_ERR_VALUE,
                              "tensorboard: tag '%s' must have 1 to 255 characters", tag);
    struct pb val = PB_INIT, sum = PB_INIT, ev = PB_INIT;
    pb_bytes(&val, 1, tag, taglen);
    pb_float(&val, 2, (float)value);
    pb_message(&sum, 1, &val);
    pb_double(&ev, 1, wall_time());
    pb_int(&ev, 2, step); /* int64: negative steps take ten bytes, as protobuf */
    pb_message(&ev, 5, &sum);
    int rc = pb_failed(&ev) ? weft_error_set(WEFT_ERR_OUT_OF_MEMORY,
                                             "tensorboard: out of memory for tag '%s'", tag)
                            : write_record(w, &ev);
    pb_free(&val);
    pb_free(&sum);
    pb_free(&ev);
    return rc;
}

int weft_summary_writer_flush(weft_summary_writer *w)
{
    if (!w)
        return 0;
    if (w->failed || fflush(w->f) != 0) {
        w->failed = true;
        return weft_error_set(WEFT_ERR_IO, "%s: write failed: %s", w->path, strerror(errno));
    }
    return 0;
}

const char *weft_summary_writer_path(const weft_summary_writer *w)
{
    return w ? w->path : NULL;
}

int weft_summary_writer_close(weft_summary_writer *w)
{
    if (!w)
        return 0;
    int rc = weft_summary_writer_flush(w);
    if (fclose(w->f) != 0 && rc == 0)
        rc = weft_error_set(WEFT_ERR_IO, "%s: close failed: %s", w->path, strerror(errno));
    free(w->path);
    free(w);
    return rc;
}
