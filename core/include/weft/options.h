/* weft/options.h: key/value options, how plugins and libraries receive settings.
 *
 * An options object is one section of settings: string keys with string values, a
 * section name and where they came from (a file, for messages and for relative paths).
 * A reader gets the keys of its [data.train] section this way, an optimizer those of
 * [optim], a layer type those of its [layer.fc1], a plugin those of the section named
 * after it ([cpu]): none of them sees the INI file, so the format can change without
 * touching a plugin (SQLite's xCreate(argc, argv) in spirit).
 *
 * Getters take a key and a default; an absent key gives the default, a present value
 * that does not parse is an error (WEFT_ERR_CONFIG) that names the origin, the section,
 * the key, the value and what was expected:
 *     "configs/mnist.ini: [optim] lr = 'fast': expected a number"
 * and leaves *out untouched. A NULL options pointer is an empty section: every getter
 * gives its default.
 *
 * Hosts make options: weft_options_new() holds its own pairs (a C program that creates
 * an optimizer); weft_options_view() reads through to another store, as the INI config
 * of the train library does, which is how its unknown-key check learns what was read.
 */
#ifndef WEFT_OPTIONS_H
#define WEFT_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct weft_options weft_options;

/* ---- reading (what plugins use) ------------------------------------------------------ */

/* The section ("data.train") and origin ("configs/mnist.ini", or "" when the options do
 * not come from a file); "" for NULL. */
const char *weft_options_section(const weft_options *o);
const char *weft_options_origin(const weft_options *o);
bool weft_options_has(const weft_options *o, const char *key);
/* The value, or def when absent; the pointer lives as long as the options' store. */
const char *weft_options_string(const weft_options *o, const char *key, const char *def);
int weft_options_int(const weft_options *o, const char *key, int64_t def, int64_t *out);
/* 0 when key is present, else WEFT_ERR_CONFIG "missing required key '<key>'". */
int weft_options_require(const weft_options *o, const char *key);
/* An integer that must be positive when present ("expected a positive integer"). */
int weft_options_positive(const weft_options *o, const char *key, int64_t def, int64_t *out);
/* An integer that must lie in [lo, hi] when present (def is taken as is). */
int weft_options_int_range(const weft_options *o, const char *key, int64_t def, int64_t lo,
                           int64_t hi, int64_t *out);
int weft_options_double(const weft_options *o, const char *key, double def, double *out);
/* true/false, yes/no, on/off, 1/0 (case-insensitive). */
int weft_options_bool(const weft_options *o, const char *key, bool def, bool *out);
/* One of choices (NULL-terminated); *out is its index. The error lists the choices and
 * the closest one. */
int weft_options_choice(const weft_options *o, const char *key, const char *const *choices,
                        int def, int *out);
/* A comma-separated list of at most max integers ("3, 3") or numbers ("0.9, 0.999") into
 * out[0..*n). Absent: *n = 0 and nothing written. */
int weft_options_ints(const weft_options *o, const char *key, int max, int64_t *out, int *n);
int weft_options_doubles(const weft_options *o, const char *key, int max, double *out, int *n);
/* A file path: absolute as given, relative to the origin's directory when the origin is a
 * file path with a '/' ("configs/mnist.ini" -> "configs/<value>"), else as given; a view
 * with a path base (weft_options_view_set_path_base) may resolve a key against another
 * directory (a value given on the command line: the current one). Writes out[size] and
 * returns 1 when the key is set, 0 when it is absent; an empty value or a path too long
 * is an error. */
int weft_options_path(const weft_options *o, const char *key, char *out, size_t size);

/* Sets WEFT_ERR_CONFIG with "<origin>: [<section>] " in front of the formatted message
 * (for a plugin's own checks: "configs/x.ini: [data] images and labels disagree ...").
 * Returns WEFT_ERR_CONFIG. */
int weft_options_error(const weft_options *o, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* "<origin>: [<section>] " (or what of it is known) into buf: the prefix of those errors,
 * for messages with another code. Returns buf. */
const char *weft_options_where(const weft_options *o, char *buf, size_t size);
/* The same for one key's value: "<origin>: [<section>] <key> = '<value>': <message>". */
int weft_options_bad_value(const weft_options *o, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- making options (hosts) ---------------------------------------------------------- */

/* Empty options of their own (section and origin are copied; origin may be NULL). NULL
 * with WEFT_ERR_OUT_OF_MEMORY. */
weft_options *weft_options_new(const char *section, const char *origin);
/* Sets key to a copy of value (replacing a value already there). 0 or negative. */
int weft_options_set(weft_options *o, const char *key, const char *value);
/* Options that read through lookup(ctx, section, key) (NULL when absent); the store must
 * outlive them. */
weft_options *weft_options_view(const char *section, const char *origin,
                                const char *(*lookup)(void *ctx, const char *section,
                                                      const char *key),
                                void *ctx);
/* Where a view's relative paths of a key resolve (weft_options_path): base(ctx, section,
 * key) returns a directory ("" for the current one), or NULL for the origin's directory
 * (the default). A config gives "" for the values --set gave: a command line is written
 * from the shell's directory. 0, or WEFT_ERR_VALUE for options that are not a view. */
int weft_options_view_set_path_base(weft_options *o,
                                    const char *(*base)(void *ctx, const char *section,
                                                        const char *key));
void weft_options_free(weft_options *o); /* NULL is ignored */

/* The candidate closest to word (case-insensitive edits, neighbours swapped counting
 * once) when it is close enough to be a typo, else NULL: for "did you mean" messages. */
const char *weft_closest_name(const char *word, const char *const *candidates, size_t n);

#ifdef __cplusplus
}
#endif
#endif
