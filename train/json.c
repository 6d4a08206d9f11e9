/* train/json.c: the strict JSON cursor and the serde_json-compatible writer (json.h). */
#include "json.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void weft_json_init(struct weft_json *j, const char *text, size_t len)
{
    memset(j, 0, sizeof *j);
    j->text = text;
    j->len = len;
}

int weft_json_fail(struct weft_json *j, size_t at, const char *fmt, ...)
{
    if (j->failed)
        return -1;
    j->failed = true;
    j->error_at = at;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(j->error, sizeof j->error, fmt, ap);
    va_end(ap);
    return -1;
}

size_t weft_json_skip_ws(struct weft_json *j)
{
    while (j->pos < j->len) {
        char c = j->text[j->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
            break;
        j->pos++;
    }
    return j->pos;
}

static int peek(struct weft_json *j)
{
    weft_json_skip_ws(j);
    return j->pos < j->len ? (unsigned char)j->text[j->pos] : -1;
}

/* "'x'" for printable bytes, "byte 0x07" otherwise, for messages. */
static const char *describe_byte(int c, char *buf, size_t size)
{
    if (c < 0)
        snprintf(buf, size, "the end of the text");
    else if (c >= 0x20 && c < 0x7f)
        snprintf(buf, size, "'%c'", c);
    else
        snprintf(buf, size, "byte 0x%02x", c);
    return buf;
}

bool weft_json_accept(struct weft_json *j, char c)
{
    if (j->failed || peek(j) != (unsigned char)c)
        return false;
    j->pos++;
    return true;
}

int weft_json_expect(struct weft_json *j, char c)
{
    if (j->failed)
        return -1;
    if (weft_json_accept(j, c))
        return 0;
    char found[32];
    return weft_json_fail(j, j->pos, "expected '%c', found %s", c,
                          describe_byte(peek(j), found, sizeof found));
}

static bool literal_at(const struct weft_json *j, const char *word)
{
    size_t n = strlen(word);
    return j->len - j->pos >= n && memcmp(j->text + j->pos, word, n) == 0;
}

const char *weft_json_peek_kind(struct weft_json *j)
{
    int c = peek(j);
    if (c < 0)
        return "the end of the text";
    if (c == '{')
        return "an object";
    if (c == '[')
        return "an array";
    if (c == '"')
        return "a string";
    if (c == '-' || (c >= '0' && c <= '9'))
        return "a number";
    if (c == 't' && literal_at(j, "true"))
        return "true";
    if (c == 'f' && literal_at(j, "false"))
        return "false";
    if (c == 'n' && literal_at(j, "null"))
        return "null";
    return "an invalid token";
}

/* ---- UTF-8 ------------------------------------------------------------------------ */

/* Length of the valid UTF-8 sequence at s (1..4), or 0 when it is invalid (RFC 3629:
 * no overlong forms, no surrogates, nothing above U+10FFFF). */
static size_t utf8_sequence(const unsigned char *s, size_t avail)
{
    unsigned c = s[0];
    if (c < 0x80)
        return 1;
    size_t n;
    unsigned lo = 0x80, hi = 0xbf; /* range of the second byte */
    if (c >= 0xc2 && c <= 0xdf) {
        n = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
        n = 3;
        if (c == 0xe0)
            lo = 0xa0;
        if (c == 0xed)
            hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4;
        if (c == 0xf0)
            lo = 0x90;
        if (c == 0xf4)
            hi = 0x8f;
    } else {
        return 0;
    }
    if (avail < n || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if (s[i] < 0x80 || s[i] > 0xbf)
            return 0;
    return n;
}

size_t weft_utf8_invalid_at(const char *s, size_t len)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < len) {
        size_t n = utf8_sequence(u + i, len - i);
        if (n == 0)
            return i;
        i += n;
    }
    return len;
}

static size_t utf8_encode(uint32_t cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* ---- strings ---------------------------------------------------------------------- */

static int hex4(struct weft_json *j, size_t at, uint32_t *out)
{
    if (j->len - at < 4)
        return weft_json_fail(j, at, "truncated \\u escape");
    uint32_t v = 0;
    for (size_t i = 0; i < 4; i++) {
        char c = j->text[at + i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0)
            return weft_json_fail(j, at + i, "invalid hex digit in a \\u escape");
        v = v * 16 + (uint32_t)d;
    }
    *out = v;
    return 0;
}

/* Decodes the \u escape whose 'u' is at `at` (a surrogate pair takes two escapes);
 * returns the number of bytes consumed after the backslash, or -1. */
static int unicode_escape(struct weft_json *j, size_t at, uint32_t *cp)
{
    uint32_t hi;
    if (hex4(j, at + 1, &hi) != 0)
        return -1;
    if (hi >= 0xdc00 && hi <= 0xdfff)
        return weft_json_fail(j, at - 1, "lone trailing surrogate in a \\u escape");
    if (hi < 0xd800 || hi > 0xdbff) {
        *cp = hi;
        return 5;
    }
    uint32_t lo;
    if (j->len - at < 7 || j->text[at + 5] != '\\' || j->text[at + 6] != 'u' ||
        hex4(j, at + 7, &lo) != 0 || lo < 0xdc00 || lo > 0xdfff)
        return weft_json_fail(j, at - 1, "lone leading surrogate in a \\u escape");
    *cp = 0x10000 + ((hi - 0xd800) << 10) + (lo - 0xdc00);
    return 11;
}

/* Raw length of the string body starting after the opening quote (an upper bound of
 * the decoded length), or -1 when it never ends. */
static int64_t raw_string_length(const struct weft_json *j, size_t start)
{
    for (size_t i = start; i < j->len; i++) {
        if (j->text[i] == '\\')
            i++;
        else if (j->text[i] == '"')
            return (int64_t)(i - start);
    }
    return -1;
}

static int decode_escape(struct weft_json *j, size_t *i, char *out, size_t *n)
{
    size_t at = *i; /* the byte after the backslash */
    char c = at < j->len ? j->text[at] : 0;
    const char *simple = strchr("\"\\/bfnrt", c);
    if (c && simple) {
        static const char decoded[] = "\"\\/\b\f\n\r\t";
        out[(*n)++] = decoded[simple - "\"\\/bfnrt"];
        *i = at + 1;
        return 0;
    }
    if (c != 'u') {
        char found[32];
        return weft_json_fail(j, at - 1, "invalid escape: backslash followed by %s",
                              describe_byte(at < j->len ? (unsigned char)c : -1, found,
                                            sizeof found));
    }
    uint32_t cp = 0;
    int used = unicode_escape(j, at, &cp);
    if (used < 0)
        return -1;
    *n += utf8_encode(cp, out + *n);
    *i = at + (size_t)used;
    return 0;
}

int weft_json_string(struct weft_json *j, char **out, size_t *len)
{
    *out = NULL;
    if (j->failed)
        return -1;
    if (peek(j) != '"')
        return -2;
    size_t start = j->pos + 1;
    int64_t raw = raw_string_length(j, start);
    if (raw < 0)
        return weft_json_fail(j, j->pos, "unterminated string");
    char *s = malloc((size_t)raw + 1);
    if (!s)
        return weft_json_fail(j, j->pos, "out of memory for a %lld-byte string", (long long)raw);
    size_t n = 0, i = start, end = start + (size_t)raw;
    while (i < end) {
        unsigned char c = (unsigned char)j->text[i];
        if (c == '\\') {
            i++;
            if (decode_escape(j, &i, s, &n) != 0)
                goto fail;
        } else if (c < 0x20) {
            weft_json_fail(j, i, "control character 0x%02x in a string (escape it)", c);
            goto fail;
        } else {
            size_t k = utf8_sequence((const unsigned char *)j->text + i, end - i);
            if (k == 0) {
                weft_json_fail(j, i, "invalid UTF-8 in a string");
                goto fail;
            }
            memcpy(s + n, j->text + i, k);
            n += k;
            i += k;
        }
    }
    s[n] = '\0';
    j->pos = end + 1;
    *out = s;
    if (len)
        *len = n;
    return 0;
fail:
    free(s);
    return -1;
}

/* ---- numbers ---------------------------------------------------------------------- */

static bool is_digit(const struct weft_json *j, size_t i)
{
    return i < j->len && j->text[i] >= '0' && j->text[i] <= '9';
}

int weft_json_uint(struct weft_json *j, uint64_t *out)
{
    if (j->failed)
        return -1;
    int c = peek(j);
    if (c != '-' && !(c >= '0' && c <= '9'))
        return -2;
    size_t at = j->pos, i = at;
    bool negative = j->text[i] == '-', fraction = false, exponent = false, overflow = false;
    if (negative)
        i++;
    if (!is_digit(j, i))
        return weft_json_fail(j, i, "invalid number: expected a digit");
    if (j->text[i] == '0' && is_digit(j, i + 1))
        return weft_json_fail(j, i, "invalid number: leading zeros are not allowed");
    uint64_t v = 0;
    for (; is_digit(j, i); i++) {
        unsigned d = (unsigned)(j->text[i] - '0');
        overflow |= __builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, d, &v);
    }
    if (i < j->len && j->text[i] == '.') {
        fraction = true;
        if (!is_digit(j, ++i))
            return weft_json_fail(j, i, "invalid number: expected a digit after '.'");
        while (is_digit(j, i))
            i++;
    }
    if (i < j->len && (j->text[i] == 'e' || j->text[i] == 'E')) {
        exponent = true;
        i++;
        if (i < j->len && (j->text[i] == '+' || j->text[i] == '-'))
            i++;
        if (!is_digit(j, i))
            return weft_json_fail(j, i, "invalid number: expected a digit in the exponent");
        while (is_digit(j, i))
            i++;
    }
    j->pos = i;
    if (negative || fraction || exponent || overflow)
        return -2;
    *out = v;
    return 0;
}

/* ---- objects and arrays ----------------------------------------------------------- */

int weft_json_object_next(struct weft_json *j, bool *first, char **key, size_t *key_len,
                          size_t *key_at)
{
    *key = NULL;
    if (j->failed)
        return -1;
    if (weft_json_accept(j, '}'))
        return 0;
    if (!*first && !weft_json_accept(j, ',')) {
        char found[32];
        return weft_json_fail(j, j->pos, "expected ',' or '}', found %s",
                              describe_byte(peek(j), found, sizeof found));
    }
    *first = false;
    *key_at = weft_json_skip_ws(j);
    int rc = weft_json_string(j, key, key_len);
    if (rc == -2) {
        char found[32];
        return weft_json_fail(j, j->pos, "expected a string key, found %s",
                              describe_byte(peek(j), found, sizeof found));
    }
    if (rc != 0 || weft_json_expect(j, ':') != 0) {
        free(*key);
        *key = NULL;
        return -1;
    }
    return 1;
}

int weft_json_array_next(struct weft_json *j, bool *first)
{
    if (j->failed)
        return -1;
    if (weft_json_accept(j, ']'))
        return 0;
    if (!*first && !weft_json_accept(j, ',')) {
        char found[32];
        return weft_json_fail(j, j->pos, "expected ',' or ']', found %s",
                              describe_byte(peek(j), found, sizeof found));
    }
    if (!*first && peek(j) == ']')
        return weft_json_fail(j, j->pos, "expected a value after ',', found ']'");
    *first = false;
    return 1;
}

/* ---- writer ----------------------------------------------------------------------- */

static bool buf_reserve(struct weft_json_buf *b, size_t extra)
{
    if (b->failed)
        return false;
    if (b->len + extra + 1 <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1)
        cap *= 2;
    char *d = realloc(b->data, cap);
    if (!d) {
        b->failed = true;
        return false;
    }
    b->data = d;
    b->cap = cap;
    return true;
}

void weft_json_buf_append(struct weft_json_buf *b, const char *s, size_t n)
{
    if (!buf_reserve(b, n))
        return;
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void weft_json_buf_char(struct weft_json_buf *b, char c)
{
    weft_json_buf_append(b, &c, 1);
}

void weft_json_buf_string(struct weft_json_buf *b, const char *s)
{
    weft_json_buf_char(b, '"');
    for (const char *p = s; *p; p++) {
        unsigned char c = (unsigned char)*p;
        const char *named = c == '"'    ? "\\\""
                            : c == '\\' ? "\\\\"
                            : c == '\b' ? "\\b"
                            : c == '\f' ? "\\f"
                            : c == '\n' ? "\\n"
                            : c == '\r' ? "\\r"
                            : c == '\t' ? "\\t"
                                        : NULL;
        if (named) {
            weft_json_buf_append(b, named, 2);
        } else if (c < 0x20) {
            char esc[8];
            snprintf(esc, sizeof esc, "\\u%04x", c);
            weft_json_buf_append(b, esc, 6);
        } else {
            weft_json_buf_char(b, (char)c);
        }
    }
    weft_json_buf_char(b, '"');
}

void weft_json_buf_uint(struct weft_json_buf *b, uint64_t v)
{
    char digits[24];
    int n = snprintf(digits, sizeof digits, "%llu", (unsigned long long)v);
    weft_json_buf_append(b, digits, (size_t)n);
}

void weft_json_buf_free(struct weft_json_buf *b)
{
    free(b->data);
    memset(b, 0, sizeof *b);
}
