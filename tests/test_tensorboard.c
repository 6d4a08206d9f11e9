/* TensorBoard event files (weft/tensorboard.h), read back by a decoder written here from
 * the TFRecord and protobuf specs, independent of the writer: every CRC is checked and
 * every field read. */
#include "testutil.h"

#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <weft/tensorboard.h>

/* CRC-32C bit by bit (no table), so the check does not share the writer's table code. */
static uint32_t crc32c_bitwise(const unsigned char *p, size_t n)
{
    uint32_t crc = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++)
            crc = (crc >> 1) ^ (0x82f63b78u & (0u - (crc & 1u)));
    }
    return ~crc;
}

static uint32_t masked(const unsigned char *p, size_t n)
{
    uint32_t c = crc32c_bitwise(p, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

static uint64_t le(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

struct event {
    double wall_time;
    int64_t step;
    char file_version[64];
    char tag[256];
    float simple_value;
    bool has_summary, has_value;
};

/* Reads one varint at *p (bounded by end); asserts it is complete. */
static uint64_t varint(const unsigned char **p, const unsigned char *end)
{
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        cr_assert_lt(*p, end, "truncated varint");
        unsigned char b = *(*p)++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return v;
    }
    cr_assert_fail("varint longer than 10 bytes");
    return 0;
}

/* Walks a message calling back per field; unknown fields are an error here, since the
 * writer has no business writing any. */
static void parse_value(const unsigned char *p, const unsigned char *end, struct event *ev)
{
    while (p < end) {
        uint64_t key = varint(&p, end);
        if (key == (1 << 3 | 2)) {
            uint64_t n = varint(&p, end);
            cr_assert_leq(n, (uint64_t)(end - p));
            cr_assert_lt(n, sizeof ev->tag);
            memcpy(ev->tag, p, n);
            ev->tag[n] = '\0';
            p += n;
        } else if (key == (2 << 3 | 5)) {
            cr_assert_leq(4, end - p);
            uint32_t u = (uint32_t)le(p, 4);
            memcpy(&ev->simple_value, &u, 4);
            p += 4;
        } else {
            cr_assert_fail("unexpected Summary.Value field key %llu", (unsigned long long)key);
        }
    }
}

static void parse_summary(const unsigned char *p, const unsigned char *end, struct event *ev)
{
    while (p < end) {
        uint64_t key = varint(&p, end);
        cr_assert_eq(key, 1 << 3 | 2, "unexpected Summary field key %llu",
                     (unsigned long long)key);
        uint64_t n = varint(&p, end);
        cr_assert_leq(n, (uint64_t)(end - p));
        cr_assert_not(ev->has_value, "one value per event expected");
        parse_value(p, p + n, ev);
        ev->has_value = true;
        p += n;
    }
}

static void parse_event(const unsigned char *p, const unsigned char *end, struct event *ev)
{
    memset(ev, 0, sizeof *ev);
    while (p < end) {
        uint64_t key = varint(&p, end);
        switch (key) {
        case 1 << 3 | 1: {
            cr_assert_leq(8, end - p);
            uint64_t u = le(p, 8);
            memcpy(&ev->wall_time, &u, 8);
            p += 8;
            break;
        }
        case 2 << 3 | 0:
            ev->step = (int64_t)varint(&p, end);
            break;
        case 3 << 3 | 2: {
            uint64_t n = varint(&p, end);
            cr_assert_leq(n, (uint64_t)(end - p));
            cr_assert_lt(n, sizeof ev->file_version);
            memcpy(ev->file_version, p, n);
            ev->file_version[n] = '\0';
            p += n;
            break;
        }
        case 5 << 3 | 2: {
            uint64_t n = varint(&p, end);
            cr_assert_leq(n, (uint64_t)(end - p));
            parse_summary(p, p + n, ev);
            ev->has_summary = true;
            p += n;
            break;
        }
        default:
            cr_assert_fail("unexpected Event field key %llu", (unsigned long long)key);
        }
    }
}

/* Decodes the whole file into evs[0..max); returns the count. Asserts every framing CRC. */
static int read_events(const char *path, struct event *evs, int max)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot open %s", path);
    int n = 0;
    unsigned char head[12];
    size_t got;
    while ((got = fread(head, 1, sizeof head, f)) > 0) {
        cr_assert_eq(got, sizeof head, "truncated record header");
        uint64_t len = le(head, 8);
        cr_assert_eq((uint32_t)le(head + 8, 4), masked(head, 8), "length CRC mismatch");
        cr_assert_lt(len, 1u << 20);
        unsigned char *data = malloc(len + 4);
        cr_assert_not_null(data);
        cr_assert_eq(fread(data, 1, len + 4, f), len + 4, "truncated record");
        cr_assert_eq((uint32_t)le(data + len, 4), masked(data, len), "data CRC mismatch");
        cr_assert_lt(n, max);
        parse_event(data, data + len, &evs[n++]);
        free(data);
    }
    fclose(f);
    return n;
}

static void setup(void)
{
    tu_setup();
    tu_tmpdir_create("tensorboard");
}

static void teardown(void)
{
    tu_tmpdir_remove();
    tu_teardown();
}

TestSuite(tensorboard, .init = setup, .fini = teardown);

Test(tensorboard, masked_crc32c_matches_the_known_check_value)
{
    /* CRC-32C("123456789") = 0xe3069283 (the catalogue's check value), then masked. */
    uint32_t c = 0xe3069283u;
    cr_assert_eq(weft_tfrecord_masked_crc32c("123456789", 9),
                 ((c >> 15) | (c << 17)) + 0xa282ead8u);
    cr_assert_eq(weft_tfrecord_masked_crc32c("123456789", 9),
                 masked((const unsigned char *)"123456789", 9));
}

Test(tensorboard, file_is_named_as_tensorboard_globs_it_and_starts_with_the_version)
{
    const char *dir = tu_tmp_path("runs/exp1"); /* a missing parent is created */
    weft_summary_writer *w = weft_summary_writer_open(dir);
    tu_assert_no_error();
    cr_assert_not_null(w);
    const char *path = weft_summary_writer_path(w);
    const char *base = strrchr(path, '/') + 1;
    cr_assert(strncmp(path, dir, strlen(dir)) == 0);
    cr_assert(strncmp(base, "events.out.tfevents.", 20) == 0, "%s", base);
    char *endp;
    long t = strtol(base + 20, &endp, 10);
    cr_assert_gt(t, 1600000000L);
    cr_assert_eq(*endp, '.', "host after the time: %s", base);
    cr_assert_eq(weft_summary_writer_close(w), 0);

    DIR *d = opendir(dir);
    cr_assert_not_null(d);
    struct dirent *e;
    char found[512] = "";
    while ((e = readdir(d)))
        if (strncmp(e->d_name, "events.out.tfevents.", 20) == 0)
            snprintf(found, sizeof found, "%s/%s", dir, e->d_name);
    closedir(d);
    cr_assert_neq(found[0], '\0');
    struct event evs[4];
    cr_assert_eq(read_events(found, evs, 4), 1);
    cr_assert_str_eq(evs[0].file_version, "brain.Event:2");
    cr_assert_not(evs[0].has_summary);
    cr_assert_gt(evs[0].wall_time, 1600000000.0);
}

Test(tensorboard, scalars_read_back_with_tag_value_step_and_time)
{
    weft_summary_writer *w = weft_summary_writer_open(tu_tmp_path("run"));
    cr_assert_not_null(w);
    cr_assert_eq(weft_summary_writer_add_scalar(w, "loss/train", 2.302585, 0), 0);
    cr_assert_eq(weft_summary_writer_add_scalar(w, "loss/train", 0.125, 1), 0);
    cr_assert_eq(weft_summary_writer_add_scalar(w, "lr", 1e-3, 300), 0);
    /* a step past 2^31 and a varint of many bytes */
    cr_assert_eq(weft_summary_writer_add_scalar(w, "throughput", 123456.0, 5000000000LL), 0);
    cr_assert_eq(weft_summary_writer_add_scalar(w, "neg", -7.5, -1), 0);
    cr_assert_eq(weft_summary_writer_flush(w), 0);

    /* flushed: readable while the writer is still open, as TensorBoard reads it */
    struct event evs[8];
    int n = read_events(weft_summary_writer_path(w), evs, 8);
    cr_assert_eq(n, 6);
    cr_assert_str_eq(evs[0].file_version, "brain.Event:2");
    const char *tags[] = {"loss/train", "loss/train", "lr", "throughput", "neg"};
    const float values[] = {2.302585f, 0.125f, 1e-3f, 123456.0f, -7.5f};
    const int64_t steps[] = {0, 1, 300, 5000000000LL, -1};
    for (int i = 0; i < 5; i++) {
        const struct event *ev = &evs[i + 1];
        cr_assert(ev->has_summary && ev->has_value);
        cr_assert_str_eq(ev->tag, tags[i]);
        cr_assert_eq(ev->simple_value, values[i], "%s: %g", tags[i], ev->simple_value);
        cr_assert_eq(ev->step, steps[i]);
        cr_assert_geq(ev->wall_time, evs[0].wall_time);
        cr_assert_eq(ev->file_version[0], '\0');
    }
    cr_assert_eq(weft_summary_writer_close(w), 0);
}

Test(tensorboard, two_writers_in_one_second_get_two_files)
{
    const char *dir = tu_tmp_path("same");
    weft_summary_writer *a = weft_summary_writer_open(dir);
    weft_summary_writer *b = weft_summary_writer_open(dir);
    cr_assert(a && b);
    cr_assert_str_neq(weft_summary_writer_path(a), weft_summary_writer_path(b));
    weft_summary_writer_close(a);
    weft_summary_writer_close(b);
}

Test(tensorboard, bad_arguments_are_errors_naming_what)
{
    /* a log directory under a regular file */
    const char *file = tu_tmp_path("plain");
    FILE *f = fopen(file, "w");
    cr_assert_not_null(f);
    fclose(f);
    char sub[600];
    snprintf(sub, sizeof sub, "%s/run", file);
    cr_assert_null(weft_summary_writer_open(sub));
    tu_assert_error(WEFT_ERR_IO, "plain");

    weft_summary_writer *w = weft_summary_writer_open(tu_tmp_path("ok"));
    cr_assert_not_null(w);
    cr_assert_lt(weft_summary_writer_add_scalar(w, "", 1.0, 0), 0);
    tu_assert_error(WEFT_ERR_VALUE, "tag");
    char longtag[300];
    memset(longtag, 'a', sizeof longtag - 1);
    longtag[sizeof longtag - 1] = '\0';
    cr_assert_lt(weft_summary_writer_add_scalar(w, longtag, 1.0, 0), 0);
    tu_assert_error(WEFT_ERR_VALUE, "255");
    cr_assert_eq(weft_summary_writer_close(w), 0);
    cr_assert_eq(weft_summary_writer_close(NULL), 0);
}

/* TensorBoard's own reader, where Python has it installed (it seldom is here). */
Test(tensorboard, tensorboards_own_reader_agrees)
{
    if (system("/usr/bin/python3 -c 'import tensorboard' >/dev/null 2>&1") != 0)
        TU_SKIP_TEST("python3 has no tensorboard package");
    const char *dir = tu_tmp_path("tb");
    weft_summary_writer *w = weft_summary_writer_open(dir);
    cr_assert_not_null(w);
    weft_summary_writer_add_scalar(w, "loss", 0.5, 3);
    weft_summary_writer_close(w);
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 -c \"import sys; "
             "from tensorboard.backend.event_processing.event_accumulator import "
             "EventAccumulator as E; a = E(sys.argv[1]); a.Reload(); "
             "s = a.Scalars('loss'); assert len(s) == 1 and s[0].step == 3 and "
             "s[0].value == 0.5, s\" %s",
             dir);
    cr_assert_eq(system(cmd), 0);
}
