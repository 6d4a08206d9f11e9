/* core/manifest.c: the directives of plugin manifests (weft/plugin.h): checking them,
 * listing what they provide and applying their env lines. elf.c reads the text out of
 * the plugin file. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "weft/error.h"
#include "weft/plugin.h"

/* ---- directives ------------------------------------------------------------------------ */

/* The next line of *p as [start, end) without the newline; false at the end. */
static bool next_line(const char **p, const char **start, const char **end)
{
    if (!**p)
        return false;
    *start = *p;
    const char *nl = strchr(*p, '\n');
    *end = nl ? nl : *p + strlen(*p);
    *p = nl ? nl + 1 : *end;
    return true;
}

/* The next space-separated word of [*p, end) into buf; false when there is none. */
static bool next_word(const char **p, const char *end, char *buf, size_t size)
{
    while (*p < end && (**p == ' ' || **p == '\t' || **p == '\r'))
        (*p)++;
    const char *w = *p;
    while (*p < end && **p != ' ' && **p != '\t' && **p != '\r')
        (*p)++;
    size_t n = (size_t)(*p - w);
    if (n == 0 || n >= size)
        return false;
    memcpy(buf, w, n);
    buf[n] = '\0';
    return true;
}

int weft_manifest_check(const char *text, const char *plugin)
{
    const char *p = text ? text : "", *line, *end;
    for (int lineno = 1; next_line(&p, &line, &end); lineno++) {
        char word[256], rest[3][256];
        const char *q = line;
        if (!next_word(&q, end, word, sizeof word) || word[0] == '#')
            continue;
        if (strcmp(word, "provides") == 0) {
            int n = 0;
            for (; next_word(&q, end, rest[0], sizeof rest[0]); n++) {
                char *colon = strchr(rest[0], ':');
                if (!colon || colon == rest[0] || !colon[1])
                    return weft_error_set(WEFT_ERR_PLUGIN,
                                          "plugin %s: manifest line %d: '%s' is not KIND:NAME",
                                          plugin, lineno, rest[0]);
            }
            if (n == 0)
                return weft_error_set(WEFT_ERR_PLUGIN,
                                      "plugin %s: manifest line %d: 'provides' lists nothing",
                                      plugin, lineno);
        } else if (strcmp(word, "env") == 0) {
            int n = 0;
            while (n < 3 && next_word(&q, end, rest[n], sizeof rest[n]))
                n++;
            /* an optional "unless VARIABLE2" (added within ABI 2: an older weft refuses it) */
            bool unless = n == 3 && next_word(&q, end, word, sizeof word);
            if (n != 3 || (unless && (strcmp(word, "unless") != 0 ||
                                      !next_word(&q, end, word, sizeof word) ||
                                      next_word(&q, end, word, sizeof word))))
                return weft_error_set(WEFT_ERR_PLUGIN,
                                      "plugin %s: manifest line %d: expected 'env VARIABLE KEY "
                                      "DEFAULT [unless VARIABLE2]'",
                                      plugin, lineno);
        } else {
            return weft_error_set(WEFT_ERR_PLUGIN,
                                  "plugin %s: manifest line %d: unknown directive '%s' "
                                  "(expected provides or env)",
                                  plugin, lineno, word);
        }
    }
    return 0;
}

int weft_manifest_each_provided(const char *text,
                                int (*fn)(void *ctx, const char *kind, const char *name),
                                void *ctx)
{
    const char *p = text ? text : "", *line, *end;
    while (next_line(&p, &line, &end)) {
        char word[256];
        const char *q = line;
        if (!next_word(&q, end, word, sizeof word) || strcmp(word, "provides") != 0)
            continue;
        while (next_word(&q, end, word, sizeof word)) {
            char *colon = strchr(word, ':');
            if (!colon)
                continue;
            *colon = '\0';
            int rc = fn(ctx, word, colon + 1);
            if (rc != 0)
                return rc;
        }
    }
    return 0;
}

struct provides_query {
    const char *kind, *name;
};

static int match_provided(void *ctx, const char *kind, const char *name)
{
    const struct provides_query *q = ctx;
    return strcmp(kind, q->kind) == 0 && strcmp(name, q->name) == 0;
}

bool weft_manifest_provides(const char *text, const char *kind, const char *name)
{
    struct provides_query q = {kind, name};
    return weft_manifest_each_provided(text, match_provided, &q) == 1;
}

void weft_manifest_apply_env(const char *text, const weft_options *options)
{
    const char *p = text ? text : "", *line, *end;
    while (next_line(&p, &line, &end)) {
        char word[256], var[256], key[256], def[256], guard[256];
        const char *q = line;
        if (!next_word(&q, end, word, sizeof word) || strcmp(word, "env") != 0 ||
            !next_word(&q, end, var, sizeof var) || !next_word(&q, end, key, sizeof key) ||
            !next_word(&q, end, def, sizeof def))
            continue;
        /* "unless VARIABLE2": nothing when VARIABLE2 is set, by the user or by an earlier
         * line (libgomp's GOMP_SPINCOUNT would override an OMP_WAIT_POLICY the user set) */
        if (next_word(&q, end, word, sizeof word) && next_word(&q, end, guard, sizeof guard) &&
            getenv(guard))
            continue;
        /* The plugin's init() reads the key again and rejects a bad value. "default"
         * leaves the variable unset: the library's own default. */
        const char *value = weft_options_string(options, key, def);
        if (strcmp(value, "default") != 0)
            setenv(var, value, 0);
    }
}
