/* core/options.c: key/value options and their typed getters (weft/options.h). */
#define _GNU_SOURCE
#include "weft/options.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "weft/error.h"

struct pair {
    char *key;
    char *value;
};

struct weft_options {
    char *section;
    char *origin;
    /* a view reads through lookup; otherwise the pairs are the store */
    const char *(*lookup)(void *ctx, const char *section, const char *key);
    const char *(*path_base)(void *ctx, const char *section, const char *key); /* or NULL */
    void *ctx;
    struct pair *pairs;
    size_t n, cap;
};

static int oom(void)
{
    return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "options: out of host memory");
}

/* ---- making options ------------------------------------------------------------------ */

static weft_options *make(const char *section, const char *origin)
{
    weft_options *o = calloc(1, sizeof *o);
    if (o) {
        o->section = strdup(section ? section : "");
        o->origin = strdup(origin ? origin : "");
    }
    if (!o || !o->section || !o->origin) {
        weft_options_free(o);
        oom();
        return NULL;
    }
    return o;
}

weft_options *weft_options_new(const char *section, const char *origin)
{
    return make(section, origin);
}

weft_options *weft_options_view(const char *section, const char *origin,
                                const char *(*lookup)(void *ctx, const char *section,
                                                      const char *key),
                                void *ctx)
{
    if (!lookup) {
        weft_error_set(WEFT_ERR_VALUE, "weft_options_view: lookup is NULL");
        return NULL;
    }
    weft_options *o = make(section, origin);
    if (o) {
        o->lookup = lookup;
        o->ctx = ctx;
    }
    return o;
}

int weft_options_view_set_path_base(weft_options *o,
                                    const char *(*base)(void *ctx, const char *section,
                                                        const char *key))
{
    if (!o || !o->lookup)
        return weft_error_set(WEFT_ERR_VALUE, "weft_options_view_set_path_base: not a view");
    o->path_base = base;
    return 0;
}

void weft_options_free(weft_options *o)
{
    if (!o)
        return;
    for (size_t i = 0; i < o->n; i++) {
        free(o->pairs[i].key);
        free(o->pairs[i].value);
    }
    free(o->pairs);
    free(o->section);
    free(o->origin);
    free(o);
}

static struct pair *find_pair(const weft_options *o, const char *key)
{
    for (size_t i = 0; i < o->n; i++)
        if (strcmp(o->pairs[i].key, key) == 0)
            return &o->pairs[i];
    return NULL;
}

int weft_options_set(weft_options *o, const char *key, const char *value)
{
    if (!o || !key || !*key || !value || o->lookup)
        return weft_error_set(WEFT_ERR_VALUE,
                              "weft_options_set: needs options of their own, a key and a value");
    char *v = strdup(value);
    if (!v)
        return oom();
    struct pair *p = find_pair(o, key);
    if (p) {
        free(p->value);
        p->value = v;
        return 0;
    }
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 8;
        struct pair *grown = realloc(o->pairs, cap * sizeof *grown);
        if (!grown) {
            free(v);
            return oom();
        }
        o->pairs = grown;
        o->cap = cap;
    }
    char *k = strdup(key);
    if (!k) {
        free(v);
        return oom();
    }
    o->pairs[o->n++] = (struct pair){k, v};
    return 0;
}

/* ---- reading --------------------------------------------------------------------------- */

const char *weft_options_section(const weft_options *o)
{
    return o ? o->section : "";
}

const char *weft_options_origin(const weft_options *o)
{
    return o ? o->origin : "";
}

static const char *value_of(const weft_options *o, const char *key)
{
    if (!o || !key)
        return NULL;
    if (o->lookup)
        return o->lookup(o->ctx, o->section, key);
    const struct pair *p = find_pair(o, key);
    return p ? p->value : NULL;
}

bool weft_options_has(const weft_options *o, const char *key)
{
    return value_of(o, key) != NULL;
}

const char *weft_options_string(const weft_options *o, const char *key, const char *def)
{
    const char *v = value_of(o, key);
    return v ? v : def;
}

/* "configs/x.ini: [optim] " or "[optim] " into buf. */
const char *weft_options_where(const weft_options *o, char *buf, size_t size)
{
    const char *origin = weft_options_origin(o), *section = weft_options_section(o);
    if (*origin && *section)
        snprintf(buf, size, "%s: [%s] ", origin, section);
    else if (*origin)
        snprintf(buf, size, "%s: ", origin);
    else if (*section)
        snprintf(buf, size, "[%s] ", section);
    else
        buf[0] = '\0';
    return buf;
}

int weft_options_error(const weft_options *o, const char *fmt, ...)
{
    char prefix[1024], msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return weft_error_set(WEFT_ERR_CONFIG, "%s%s", weft_options_where(o, prefix, sizeof prefix), msg);
}

int weft_options_bad_value(const weft_options *o, const char *key, const char *fmt, ...)
{
    char prefix[1024], msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *v = weft_options_string(o, key, "");
    return weft_error_set(WEFT_ERR_CONFIG, "%s%s = '%s': %s", weft_options_where(o, prefix, sizeof prefix),
                          key, v, msg);
}

/* Whole-string parsers: leading spaces, trailing junk and empty strings are refused. */
static int parse_int(const weft_options *o, const char *key, const char *text, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (end == text || *end != '\0' || isspace((unsigned char)text[0]))
        return weft_options_bad_value(o, key, "expected an integer");
    if (errno == ERANGE)
        return weft_options_bad_value(o, key, "integer out of range (expected between "
                                              "-9223372036854775808 and 9223372036854775807)");
    *out = (int64_t)v;
    return 0;
}

static int parse_double(const weft_options *o, const char *key, const char *text, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || *end != '\0' || isspace((unsigned char)text[0]))
        return weft_options_bad_value(o, key, "expected a number");
    /* Underflow to a tiny or zero value is fine; overflow to infinity is not. */
    if (errno == ERANGE && isinf(v))
        return weft_options_bad_value(o, key, "number out of range for a double");
    *out = v;
    return 0;
}

int weft_options_int(const weft_options *o, const char *key, int64_t def, int64_t *out)
{
    const char *text = value_of(o, key);
    int64_t v = def;
    if (text && parse_int(o, key, text, &v) < 0)
        return WEFT_ERR_CONFIG;
    if (out)
        *out = v;
    return 0;
}

int weft_options_require(const weft_options *o, const char *key)
{
    return weft_options_has(o, key) ? 0 : weft_options_error(o, "missing required key '%s'", key);
}

int weft_options_positive(const weft_options *o, const char *key, int64_t def, int64_t *out)
{
    int64_t v;
    if (weft_options_int(o, key, def, &v) < 0)
        return WEFT_ERR_CONFIG;
    if (weft_options_has(o, key) && v <= 0)
        return weft_options_bad_value(o, key, "expected a positive integer");
    if (out)
        *out = v;
    return 0;
}

int weft_options_int_range(const weft_options *o, const char *key, int64_t def, int64_t lo,
                           int64_t hi, int64_t *out)
{
    int64_t v;
    if (weft_options_int(o, key, def, &v) < 0)
        return WEFT_ERR_CONFIG;
    if (weft_options_has(o, key) && (v < lo || v > hi))
        return weft_options_bad_value(o, key, "expected an integer from %lld to %lld",
                                      (long long)lo, (long long)hi);
    if (out)
        *out = v;
    return 0;
}

int weft_options_double(const weft_options *o, const char *key, double def, double *out)
{
    const char *text = value_of(o, key);
    double v = def;
    if (text && parse_double(o, key, text, &v) < 0)
        return WEFT_ERR_CONFIG;
    if (out)
        *out = v;
    return 0;
}

int weft_options_bool(const weft_options *o, const char *key, bool def, bool *out)
{
    static const char *const yes[] = {"true", "yes", "on", "1"};
    static const char *const no[] = {"false", "no", "off", "0"};
    const char *text = value_of(o, key);
    bool v = def;
    if (text) {
        size_t i = 0;
        for (; i < sizeof yes / sizeof *yes; i++)
            if (strcasecmp(text, yes[i]) == 0 || strcasecmp(text, no[i]) == 0)
                break;
        if (i == sizeof yes / sizeof *yes)
            return weft_options_bad_value(o, key,
                                          "expected true or false (or yes/no, on/off, 1/0)");
        v = strcasecmp(text, yes[i]) == 0;
    }
    if (out)
        *out = v;
    return 0;
}

/* "a, b, c" into buf. */
static void join(char *buf, size_t size, const char *const *items, size_t n)
{
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < n && used < size; i++) {
        int w = snprintf(buf + used, size - used, "%s%s", i ? ", " : "", items[i]);
        if (w < 0)
            break;
        used += (size_t)w;
    }
}

int weft_options_choice(const weft_options *o, const char *key, const char *const *choices,
                        int def, int *out)
{
    const char *text = value_of(o, key);
    if (!text) {
        if (out)
            *out = def;
        return 0;
    }
    size_t n = 0;
    while (choices && choices[n])
        n++;
    for (size_t i = 0; i < n; i++)
        if (strcmp(text, choices[i]) == 0) {
            if (out)
                *out = (int)i;
            return 0;
        }
    char list[1024];
    join(list, sizeof list, choices, n);
    const char *hint = weft_closest_name(text, choices, n);
    if (hint)
        return weft_options_bad_value(o, key, "expected one of %s (did you mean '%s'?)", list,
                                      hint);
    return weft_options_bad_value(o, key, "expected one of %s", list);
}

/* Splits a comma-separated list and parses each item with parse(), which reports errors
 * about the whole value. */
static int parse_list(const weft_options *o, const char *key, int max, void *out, size_t item,
                      int *n, int (*parse)(const weft_options *, const char *, const char *,
                                           void *))
{
    *n = 0;
    const char *text = value_of(o, key);
    if (!text)
        return 0;
    char *copy = strdup(text);
    if (!copy)
        return oom();
    int rc = 0, count = 0;
    for (char *tok = copy, *next; tok && rc == 0; tok = next) {
        next = strchr(tok, ',');
        if (next)
            *next++ = '\0';
        while (isspace((unsigned char)*tok))
            tok++;
        char *end = tok + strlen(tok);
        while (end > tok && isspace((unsigned char)end[-1]))
            *--end = '\0';
        if (count == max)
            rc = weft_options_bad_value(o, key, "expected at most %d comma-separated values",
                                        max);
        else
            rc = parse(o, key, tok, (char *)out + (size_t)count++ * item);
    }
    if (rc == 0 && count == 0)
        rc = weft_options_bad_value(o, key, "expected a comma-separated list of values");
    free(copy);
    if (rc == 0)
        *n = count;
    return rc;
}

static int parse_list_int(const weft_options *o, const char *key, const char *tok, void *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(tok, &end, 10);
    if (end == tok || *end != '\0' || errno == ERANGE)
        return weft_options_bad_value(o, key, "expected integers separated by commas, "
                                              "like '3, 3'");
    *(int64_t *)out = v;
    return 0;
}

static int parse_list_double(const weft_options *o, const char *key, const char *tok, void *out)
{
    char *end;
    errno = 0;
    double v = strtod(tok, &end);
    if (end == tok || *end != '\0' || (errno == ERANGE && isinf(v)))
        return weft_options_bad_value(o, key, "expected numbers separated by commas, "
                                              "like '0.9, 0.999'");
    *(double *)out = v;
    return 0;
}

int weft_options_ints(const weft_options *o, const char *key, int max, int64_t *out, int *n)
{
    return parse_list(o, key, max, out, sizeof *out, n, parse_list_int);
}

int weft_options_doubles(const weft_options *o, const char *key, int max, double *out, int *n)
{
    return parse_list(o, key, max, out, sizeof *out, n, parse_list_double);
}

int weft_options_path(const weft_options *o, const char *key, char *out, size_t size)
{
    const char *value = value_of(o, key);
    if (!value)
        return 0;
    if (!value[0])
        return weft_options_bad_value(o, key, "expected a file path");
    const char *origin = weft_options_origin(o);
    const char *base = o->path_base ? o->path_base(o->ctx, o->section, key) : NULL;
    const char *slash = strrchr(origin, '/');
    int w;
    if (value[0] == '/' || (base && !base[0]) || (!base && !slash))
        w = snprintf(out, size, "%s", value);
    else if (base)
        w = snprintf(out, size, "%s/%s", base, value);
    else
        w = snprintf(out, size, "%.*s/%s", (int)(slash - origin), origin, value);
    if (w < 0 || (size_t)w >= size)
        return weft_options_bad_value(o, key, "the path is too long (at most %zu bytes once "
                                              "made relative to the directory of %s)",
                                      size - 1, base ? "the command line" : origin);
    return 1;
}

/* ---- did you mean -------------------------------------------------------------------- */

/* Case-insensitive edit distance (insert, delete, substitute, swap neighbours). */
static size_t edit_distance(const char *a, const char *b)
{
    size_t n = strlen(a), m = strlen(b);
    if (n > 64 || m > 64)
        return (size_t)-1;
    size_t d[65][65];
    for (size_t i = 0; i <= n; i++)
        d[i][0] = i;
    for (size_t j = 0; j <= m; j++)
        d[0][j] = j;
    for (size_t i = 1; i <= n; i++) {
        for (size_t j = 1; j <= m; j++) {
            int ai = tolower((unsigned char)a[i - 1]), bj = tolower((unsigned char)b[j - 1]);
            size_t best = d[i - 1][j - 1] + (ai != bj);
            if (d[i - 1][j] + 1 < best)
                best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best)
                best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && ai == tolower((unsigned char)b[j - 2]) &&
                tolower((unsigned char)a[i - 2]) == bj && d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    }
    return d[n][m];
}

const char *weft_closest_name(const char *word, const char *const *candidates, size_t n)
{
    if (!word || !candidates)
        return NULL;
    size_t len = strlen(word);
    size_t limit = len <= 3 ? 1 : (len + 2) / 3;
    const char *best = NULL;
    size_t best_d = limit + 1;
    for (size_t i = 0; i < n; i++) {
        size_t d = edit_distance(word, candidates[i]);
        size_t longer = strlen(candidates[i]) > len ? strlen(candidates[i]) : len;
        /* Replacing every letter is not a typo ("x" is no misspelling of "z"). */
        if (d < best_d && d < longer) {
            best = candidates[i];
            best_d = d;
        }
    }
    return best;
}
