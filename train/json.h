/* core/json.h: a small strict JSON reader (a cursor, no tree) and writer; internal.
 *
 * The reader never builds a document tree: callers walk the text with the cursor and keep
 * only what they need, so memory stays proportional to what they keep, not to the input.
 * It accepts exactly RFC 8259 (no comments, no trailing commas, no leading zeros, no raw
 * control characters or lone surrogates in strings). Positions are byte offsets into
 * the text. The first error is kept in the reader with its position; every later call
 * fails at once, so callers can check once at the end of a step.
 *
 * The writer appends to a growable buffer and escapes strings the way serde_json does
 * (the safetensors writer): `"` `\` and control characters only, `\b \f \n \r \t` by name,
 * the rest as `\u00xx`; everything else, non-ASCII included, is copied as is.
 */
#ifndef WEFT_CORE_JSON_H
#define WEFT_CORE_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifndef WEFT_INTERNAL
#define WEFT_INTERNAL __attribute__((visibility("hidden")))
#endif

struct weft_json {
    const char *text;
    size_t len;
    size_t pos;        /* next byte to read */
    bool failed;
    size_t error_at;   /* position of the first error */
    char error[160];   /* what was wrong there, e.g. "expected ':'" */
};

WEFT_INTERNAL void weft_json_init(struct weft_json *j, const char *text, size_t len);
/* Records an error at byte `at` unless one is recorded; returns -1. */
WEFT_INTERNAL int weft_json_fail(struct weft_json *j, size_t at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Skips whitespace (space, tab, CR, LF) and returns the position of the next byte. */
WEFT_INTERNAL size_t weft_json_skip_ws(struct weft_json *j);
/* Skips whitespace; true (and consumes it) when the next byte is c. */
WEFT_INTERNAL bool weft_json_accept(struct weft_json *j, char c);
/* Skips whitespace and consumes c, or fails with "expected 'c'". Returns 0 or -1. */
WEFT_INTERNAL int weft_json_expect(struct weft_json *j, char c);
/* What the next value looks like, for messages: "a string", "a number", "an object",
 * "an array", "true", "false", "null", "the end of the text" or "an invalid token". */
WEFT_INTERNAL const char *weft_json_peek_kind(struct weft_json *j);

/* Reads a string value: *out is a malloc'd, NUL-terminated UTF-8 copy with escapes
 * decoded and *len its length (strlen(*out) is shorter only when the string holds
 * \u0000). Returns 0; -1 on a syntax error (recorded); -2 when the next value is not a
 * string (nothing consumed, nothing recorded: the caller knows what was expected). */
WEFT_INTERNAL int weft_json_string(struct weft_json *j, char **out, size_t *len);
/* Reads a number that must be a non-negative integer below 2^64. Returns 0; -1 on a
 * syntax error (recorded); -2 when the next value is not a number (nothing consumed) or
 * is a valid number with a sign, a fraction, an exponent or too many digits (consumed,
 * so the caller can quote text[start, pos)); nothing is recorded for -2. */
WEFT_INTERNAL int weft_json_uint(struct weft_json *j, uint64_t *out);

/* Object and array walking, after the opening '{' or '[' was consumed:
 * `first` starts true and the functions keep it. object_next returns 1 with the next
 * member's key read (malloc'd, see weft_json_string; *key_at is its position) and the ':'
 * consumed, 0 when the object ended (its '}' consumed), -1 on error. array_next returns
 * 1 when an element follows, 0 at the closing ']' (consumed), -1 on error. */
WEFT_INTERNAL int weft_json_object_next(struct weft_json *j, bool *first, char **key,
                                        size_t *key_len, size_t *key_at);
WEFT_INTERNAL int weft_json_array_next(struct weft_json *j, bool *first);

/* Position of the first byte that is not valid UTF-8 (overlong forms, surrogates and
 * code points above U+10FFFF are invalid), or len when all of it is valid. */
WEFT_INTERNAL size_t weft_utf8_invalid_at(const char *s, size_t len);

/* ---- writer ----------------------------------------------------------------------- */

struct weft_json_buf {
    char *data;   /* NUL-terminated while not failed */
    size_t len, cap;
    bool failed;  /* an allocation failed; everything after it was dropped */
};

WEFT_INTERNAL void weft_json_buf_append(struct weft_json_buf *b, const char *s, size_t n);
WEFT_INTERNAL void weft_json_buf_char(struct weft_json_buf *b, char c);
/* Appends "s" quoted and escaped as serde_json does. */
WEFT_INTERNAL void weft_json_buf_string(struct weft_json_buf *b, const char *s);
WEFT_INTERNAL void weft_json_buf_uint(struct weft_json_buf *b, uint64_t v);
WEFT_INTERNAL void weft_json_buf_free(struct weft_json_buf *b);

#endif
