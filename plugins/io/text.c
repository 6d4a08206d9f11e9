/* plugins/io/text.c: whole text files for the sparse readers (mtx, libsvm), and the
 * number parsers they share.
 *
 * A plain file is mapped, so parsing it is one pass over the page cache with no copy; a
 * gzip'd one is decompressed into memory first (its size is unknown until the end).
 * The parsers take a whole token and accept exactly one number in it: no leading
 * blanks, no trailing bytes. Floating-point text is parsed by hand when the result is
 * exact by Clinger's rule (at most 19 significant digits forming an integer m <= 2^53,
 * and a power of ten 10^e with |e| <= 22: m and 10^e are exact doubles, so one multiply
 * or divide rounds correctly, exactly as strtod does); anything else goes to strtod.
 * That keeps a 60 MB libsvm file to a fraction of a second.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "io.h"

#define NUMBER_TEXT_MAX 128 /* longer tokens are not numbers we accept */

int io_text_open(struct io_text *t, const char *path)
{
    memset(t, 0, sizeof *t);
    struct io_stream s;
    int rc = io_stream_open(&s, path);
    if (rc < 0)
        return rc;
    if (s.compressed) {
        rc = io_stream_read_all(&s, &t->owned, &t->len);
        io_stream_close(&s);
        t->data = t->owned;
        t->compressed = true;
        return rc;
    }
    io_stream_close(&s);
    rc = io_map_open(&t->map, path);
    if (rc < 0)
        return rc;
    /* An empty file maps to NULL: hand out an empty string so parsers never see NULL. */
    t->data = t->map.data ? (const char *)t->map.data : "";
    t->len = t->map.size;
    return 0;
}

void io_text_close(struct io_text *t)
{
    io_map_close(&t->map);
    free(t->owned);
    memset(t, 0, sizeof *t);
}

const char *io_text_show(const char *p, size_t len, char *buf, size_t size)
{
    size_t room = size > 52 ? 48 : size - 4;
    size_t n = len < room ? len : room;
    for (size_t i = 0; i < n; i++)
        buf[i] = isprint((unsigned char)p[i]) ? p[i] : '?';
    strcpy(buf + n, n < len ? "..." : "");
    return buf;
}

bool io_parse_i64(const char *p, size_t len, int64_t *out)
{
    const char *s = p, *e = p + len;
    bool negative = false;
    if (s < e && (*s == '+' || *s == '-'))
        negative = *s++ == '-';
    if (s == e)
        return false;
    uint64_t v = 0;
    const uint64_t limit = negative ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    bool may_overflow = e - s > 18; /* 18 digits always fit */
    for (; s < e; s++) {
        unsigned d = (unsigned)(unsigned char)*s - '0';
        if (d > 9 || (may_overflow && v > (limit - d) / 10))
            return false;
        v = v * 10 + d;
    }
    *out = negative ? (int64_t)(0 - v) : (int64_t)v;
    return true;
}

/* strtod on a copy of the token, for the cases the fast path cannot round exactly. */
static bool parse_f64_slow(const char *p, size_t len, double *out)
{
    char text[NUMBER_TEXT_MAX];
    if (len >= sizeof text)
        return false;
    memcpy(text, p, len);
    text[len] = '\0';
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (end != text + len || !isfinite(v))
        return false;
    *out = v;
    return true;
}

bool io_parse_f64(const char *p, size_t len, double *out)
{
    static const double pow10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                   1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                   1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
    const char *s = p, *e = p + len;
    bool negative = false;
    if (s < e && (*s == '+' || *s == '-'))
        negative = *s++ == '-';
    uint64_t mant = 0;
    int nd = 0;          /* significant digits in mant */
    int64_t exp10 = 0;   /* value = mant * 10^exp10 (before the exponent part) */
    bool digits = false; /* at least one mantissa digit */
    bool inexact = false;
    for (; s < e && (unsigned)(*s - '0') <= 9; s++) {
        digits = true;
        unsigned d = (unsigned)(*s - '0');
        if (mant == 0 && d == 0)
            continue;
        if (nd < 19) {
            mant = mant * 10 + d;
            nd++;
        } else {
            exp10++;
            inexact |= d != 0;
        }
    }
    if (s < e && *s == '.') {
        for (s++; s < e && (unsigned)(*s - '0') <= 9; s++) {
            digits = true;
            unsigned d = (unsigned)(*s - '0');
            if (mant == 0 && d == 0) {
                exp10--;
            } else if (nd < 19) {
                mant = mant * 10 + d;
                nd++;
                exp10--;
            } else {
                inexact |= d != 0;
            }
        }
    }
    if (!digits)
        return false;
    if (s < e && (*s == 'e' || *s == 'E')) {
        s++;
        bool eneg = false;
        if (s < e && (*s == '+' || *s == '-'))
            eneg = *s++ == '-';
        if (s == e)
            return false;
        int64_t ev = 0;
        for (; s < e && (unsigned)(*s - '0') <= 9; s++)
            if (ev < 100000) /* far beyond any double: saturate, strtod decides */
                ev = ev * 10 + (*s - '0');
        exp10 += eneg ? -ev : ev;
    }
    if (s != e)
        return false;
    if (mant == 0) {
        *out = negative ? -0.0 : 0.0;
        return true;
    }
    if (inexact || mant > (UINT64_C(1) << 53) || exp10 < -22 || exp10 > 22)
        return parse_f64_slow(p, len, out);
    double v = exp10 < 0 ? (double)mant / pow10[-exp10] : (double)mant * pow10[exp10];
    *out = negative ? -v : v;
    return true;
}
