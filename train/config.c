/* train/config.c: INI files (through inih) with typed, strict getters and detection of
 * sections and keys that nobody asked for.
 *
 * inih gives the handler no line numbers and calls it again, with the same key, for each
 * continuation line of a multi-line value. We feed inih through our own line reader, so
 * we know the current line: that gives line numbers in messages, tells a continuation
 * (an indented line) from a duplicate key, and catches lines too long for inih's buffer
 * (which it would otherwise split silently).
 */
#include "weft/config.h"

#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "weft/error.h"
#include "weft/file.h"
#include "weft/options.h"
#include "weft/plugin.h"

struct entry {
    char *key;
    char *value;
    int line;   /* 0 when set by weft_config_set/put */
    bool known; /* a getter asked for it */
    char *set_by; /* the weft_config_set assignment that gave the value ("layer.fc2.x=3") */
};

struct section {
    char *name;
    bool present;    /* in the file or set; absent sections only record what was asked */
    bool all_known;  /* weft_config_mark_known(cfg, section, NULL) */
    int line;        /* its [header]'s line in the file, 0 when only set */
    struct entry *entries;
    size_t n, cap;
    char **asked;    /* keys asked for, present or not: the "did you mean" candidates */
    size_t nasked, cap_asked;
    const char **keyv; /* cached NULL-terminated key list */
    weft_options *options; /* the section's view, made on first use */
};

struct weft_config {
    char *name;
    struct section *secs; /* present ones in file order; asked-only ones mixed in */
    size_t n, cap;
    const char **secv;    /* cached NULL-terminated list of present sections */
    void **retired;       /* old secv/keyv arrays: callers may still hold them */
    size_t nretired, cap_retired;
};

/* The config plugins get their sections from, if any (weft_config_serve_plugins). */
static struct weft_config *serving;

static int oom(void)
{
    return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "config: out of memory");
}


/* Keeps memory a caller may still be using until the config is freed. */
static void retire(struct weft_config *cfg, void *array)
{
    if (!array)
        return;
    bool had_error = weft_error_code() != WEFT_OK;
    if (weft_grow((void **)&cfg->retired, &cfg->cap_retired, cfg->nretired + 1,
                  sizeof(void *)) < 0) {
        /* Leaking the array beats freeing it under a caller, or failing the change. */
        if (!had_error)
            weft_error_clear();
        return;
    }
    cfg->retired[cfg->nretired++] = array;
}

/* ---- lookup ------------------------------------------------------------------------ */

static struct section *find_section(const struct weft_config *cfg, const char *name)
{
    for (size_t i = 0; i < cfg->n; i++)
        if (strcmp(cfg->secs[i].name, name) == 0)
            return &cfg->secs[i];
    return NULL;
}

static struct entry *find_entry(const struct section *s, const char *key)
{
    for (size_t i = 0; s && i < s->n; i++)
        if (strcmp(s->entries[i].key, key) == 0)
            return &s->entries[i];
    return NULL;
}

static const char *view_lookup(void *ctx, const char *section, const char *key)
{
    return weft_config_string(ctx, section, key, NULL);
}

/* A value --set gave is a path from the shell's directory; the file's, from the file's. */
static const char *view_path_base(void *ctx, const char *section, const char *key)
{
    const struct entry *e = find_entry(find_section(ctx, section), key);
    return e && e->set_by ? "" : NULL;
}

static struct section *get_section(struct weft_config *cfg, const char *name)
{
    struct section *s = find_section(cfg, name);
    if (s)
        return s;
    if (weft_grow((void **)&cfg->secs, &cfg->cap, cfg->n + 1, sizeof *cfg->secs) < 0)
        return NULL;
    s = &cfg->secs[cfg->n];
    /* The view is made with the section, so that weft_config_options() never allocates:
     * a present section always has one, and a refusal here fails the parse or the set that
     * made the section, where it can be reported. */
    *s = (struct section){.name = strdup(name)};
    if (s->name)
        s->options = weft_options_view(name, cfg->name, view_lookup, cfg);
    if (s->options)
        weft_options_view_set_path_base(s->options, view_path_base);
    if (!s->name || !s->options) {
        free(s->name);
        weft_options_free(s->options);
        oom();
        return NULL;
    }
    cfg->n++;
    return s;
}

static void mark_present(struct weft_config *cfg, struct section *s)
{
    if (s->present)
        return;
    s->present = true;
    retire(cfg, cfg->secv);
    cfg->secv = NULL;
}

static int add_entry(struct weft_config *cfg, struct section *s, const char *key,
                     const char *value, int line)
{
    if (weft_grow((void **)&s->entries, &s->cap, s->n + 1, sizeof *s->entries) < 0)
        return WEFT_ERR_OUT_OF_MEMORY;
    struct entry *e = &s->entries[s->n];
    *e = (struct entry){.key = strdup(key), .value = strdup(value), .line = line};
    if (!e->key || !e->value) {
        free(e->key);
        free(e->value);
        return oom();
    }
    s->n++;
    mark_present(cfg, s);
    retire(cfg, s->keyv);
    s->keyv = NULL;
    return 0;
}

/* The old value is retired, not freed: weft_config_string() promised it to live as long
 * as cfg. */
static int set_value(struct weft_config *cfg, struct entry *e, const char *value)
{
    char *copy = strdup(value);
    if (!copy)
        return oom();
    retire(cfg, e->value);
    e->value = copy;
    return 0;
}

/* ---- parsing ------------------------------------------------------------------------- */

struct parse_ctx {
    struct weft_config *cfg;
    const char *next;       /* unread text */
    int line;               /* number of the line inih is handling */
    bool indented;          /* that line starts with white space */
    bool header_since_call; /* an unindented [section] line since the last handler call */
    struct entry *last;     /* the entry the last handler call wrote */
    struct section *last_section;
    int header_line;        /* the line of the last [section] header */
    int error;              /* our first error (inih's line is reported otherwise) */
};

/* inih's line reader over our text. */
static char *read_line(char *buf, int size, void *stream)
{
    struct parse_ctx *ctx = stream;
    if (ctx->error || !*ctx->next)
        return NULL;
    const char *nl = strchr(ctx->next, '\n');
    size_t len = nl ? (size_t)(nl - ctx->next) + 1 : strlen(ctx->next);
    ctx->line++;
    size_t content = len;
    while (content && (ctx->next[content - 1] == '\n' || ctx->next[content - 1] == '\r'))
        content--;
    /* inih needs room for "\r\n\0" after the text. */
    if (size < 4 || content > (size_t)size - 3) {
        ctx->error = weft_error_set(WEFT_ERR_CONFIG,
                                    "%s: line %d is longer than %d characters, the most a "
                                    "config line may have",
                                    ctx->cfg->name, ctx->line, size - 3);
        return NULL;
    }
    /* The text and one '\n', however many CRs the line ended with: what was measured is
     * what is copied (a line and 400 CRs once overflowed inih's buffer on the stack). */
    memcpy(buf, ctx->next, content);
    buf[content] = '\n';
    buf[content + 1] = '\0';
    ctx->next += len;
    ctx->indented = buf[0] == ' ' || buf[0] == '\t';
    if (!ctx->indented && buf[0] == '[') {
        ctx->header_since_call = true;
        ctx->header_line = ctx->line;
    }
    return buf;
}

/* inih calls this again for each continuation line of a multi-line value; those are
 * joined with newlines, as Python's configparser does. */
static bool is_continuation(const struct parse_ctx *ctx, const char *section, const char *key)
{
    return ctx->indented && !ctx->header_since_call && ctx->last &&
           strcmp(ctx->last_section->name, section) == 0 && strcmp(ctx->last->key, key) == 0;
}

static int append_line(struct entry *e, const char *more)
{
    size_t a = strlen(e->value), b = strlen(more);
    char *v = realloc(e->value, a + b + 2);
    if (!v)
        return oom();
    v[a] = '\n';
    memcpy(v + a + 1, more, b + 1);
    e->value = v;
    return 0;
}

static int handle_pair(void *user, const char *section, const char *key, const char *value)
{
    struct parse_ctx *ctx = user;
    if (ctx->error)
        return 0;
    if (is_continuation(ctx, section, key)) {
        ctx->error = append_line(ctx->last, value);
        return ctx->error == 0;
    }
    ctx->header_since_call = false;
    struct section *s = get_section(ctx->cfg, section);
    if (!s) {
        ctx->error = WEFT_ERR_OUT_OF_MEMORY;
        return 0;
    }
    const struct entry *dup = find_entry(s, key);
    if (dup) {
        ctx->error = weft_error_set(WEFT_ERR_CONFIG,
                                    "%s: line %d: [%s] duplicate key '%s' (already set on line "
                                    "%d)",
                                    ctx->cfg->name, ctx->line, section, key, dup->line);
        return 0;
    }
    if (!s->line)
        s->line = ctx->header_line;
    ctx->error = add_entry(ctx->cfg, s, key, value, ctx->line);
    ctx->last = ctx->error ? NULL : &s->entries[s->n - 1];
    ctx->last_section = s;
    return ctx->error == 0;
}

static int parse_into(struct weft_config *cfg, const char *text)
{
    struct parse_ctx ctx = {.cfg = cfg, .next = text};
    int rc = ini_parse_stream(read_line, &ctx, handle_pair, &ctx);
    if (ctx.error)
        return ctx.error;
    if (rc > 0)
        return weft_error_set(WEFT_ERR_CONFIG,
                              "%s: line %d: syntax error (expected [section], key = value or a "
                              "comment)",
                              cfg->name, rc);
    if (rc < 0)
        return oom();
    return 0;
}

struct weft_config *weft_config_new(const char *name)
{
    struct weft_config *cfg = calloc(1, sizeof *cfg);
    if (!cfg) {
        oom();
        return NULL;
    }
    cfg->name = strdup(name ? name : "<config>");
    if (!cfg->name) {
        free(cfg);
        oom();
        return NULL;
    }
    return cfg;
}

struct weft_config *weft_config_parse(const char *text, const char *name)
{
    struct weft_config *cfg = weft_config_new(name ? name : "<string>");
    if (!cfg)
        return NULL;
    if (parse_into(cfg, text ? text : "") < 0) {
        weft_config_free(cfg);
        return NULL;
    }
    return cfg;
}

/* A NUL byte would end the text early and leave the rest unread (often all of it: the
 * run then complains of missing keys); a binary file given by mistake is said to be one. */
static int check_text(const char *path, const char *text, size_t len)
{
    const char *nul = memchr(text, '\0', len);
    if (!nul)
        return 0;
    int line = 1;
    for (const char *p = text; p < nul; p++)
        line += *p == '\n';
    return weft_error_set(WEFT_ERR_CONFIG,
                          "%s: line %d: a NUL byte (offset %zu): expected a text (INI) file, "
                          "not a binary one",
                          path, line, (size_t)(nul - text));
}

/* The whole file as a string; NULL with an error naming the file. Its type is checked
 * before it is read (a FIFO given as the config would block); a config that cannot be
 * read is the config's fault, so the error's code is CONFIG. */
static char *read_file(const char *path)
{
    int fd = weft_open_regular_file(path, "config file");
    if (fd < 0) {
        weft_error_recode(WEFT_ERR_CONFIG);
        return NULL;
    }
    char *text = NULL;
    size_t len = 0, cap = 0;
    int rc = 0;
    for (;;) {
        rc = weft_grow((void **)&text, &cap, len + 4096 + 1, 1);
        if (rc < 0)
            break;
        ssize_t got = read(fd, text + len, cap - len - 1);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            rc = weft_error_set(WEFT_ERR_CONFIG, "%s: cannot read config file: %s", path,
                                strerror(errno));
        if (got <= 0)
            break;
        len += (size_t)got;
    }
    close(fd);
    if (rc == 0)
        rc = check_text(path, text, len);
    if (rc < 0) {
        free(text);
        return NULL;
    }
    text[len] = '\0';
    return text;
}

struct weft_config *weft_config_load(const char *path)
{
    if (!path) {
        weft_error_set(WEFT_ERR_CONFIG, "weft_config_load: path is NULL");
        return NULL;
    }
    char *text = read_file(path);
    if (!text)
        return NULL;
    struct weft_config *cfg = weft_config_parse(text, path);
    free(text);
    return cfg;
}

static void free_section(struct section *s)
{
    for (size_t i = 0; i < s->n; i++) {
        free(s->entries[i].key);
        free(s->entries[i].value);
        free(s->entries[i].set_by);
    }
    for (size_t i = 0; i < s->nasked; i++)
        free(s->asked[i]);
    free(s->entries);
    free(s->asked);
    free(s->keyv);
    free(s->name);
    weft_options_free(s->options);
}

void weft_config_free(struct weft_config *cfg)
{
    if (!cfg)
        return;
    if (cfg == serving)
        weft_config_serve_plugins(NULL);
    for (size_t i = 0; i < cfg->n; i++)
        free_section(&cfg->secs[i]);
    for (size_t i = 0; i < cfg->nretired; i++)
        free(cfg->retired[i]);
    free(cfg->retired);
    free(cfg->secs);
    free(cfg->secv);
    free(cfg->name);
    free(cfg);
}

const char *weft_config_name(const struct weft_config *cfg)
{
    return cfg ? cfg->name : "<config>";
}

/* ---- setting values ---------------------------------------------------------------- */

int weft_config_put(struct weft_config *cfg, const char *section, const char *key,
                    const char *value)
{
    if (!cfg || !section || !key || !key[0] || !value)
        return weft_error_set(WEFT_ERR_CONFIG, "weft_config_put: need a config, section, key "
                                               "and value");
    struct section *s = get_section(cfg, section);
    if (!s)
        return WEFT_ERR_OUT_OF_MEMORY;
    struct entry *e = find_entry(s, key);
    if (e)
        return set_value(cfg, e, value);
    return add_entry(cfg, s, key, value, 0);
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
    return s;
}

/* Errors about a value given by weft_config_set name the assignment, not the file. */
static int remember_set(struct weft_config *cfg, const char *section, const char *key,
                        const char *assignment)
{
    struct entry *e = find_entry(find_section(cfg, section), key);
    char *copy = strdup(assignment);
    if (!e || !copy) {
        free(copy);
        return oom();
    }
    free(e->set_by);
    e->set_by = copy;
    return 0;
}

int weft_config_set(struct weft_config *cfg, const char *assignment)
{
    if (!cfg || !assignment)
        return weft_error_set(WEFT_ERR_CONFIG, "weft_config_set: NULL argument");
    char *copy = strdup(assignment);
    if (!copy)
        return oom();
    int rc = WEFT_ERR_CONFIG;
    char *eq = strchr(copy, '=');
    if (eq) {
        *eq = '\0';
        char *left = trim(copy);
        char *dot = strrchr(left, '.');
        if (dot && dot > left && dot[1]) {
            *dot = '\0';
            rc = weft_config_put(cfg, trim(left), trim(dot + 1), trim(eq + 1));
            if (rc == 0)
                rc = remember_set(cfg, left, trim(dot + 1), assignment);
        }
    }
    if (rc == WEFT_ERR_CONFIG && weft_error_code() == WEFT_OK)
        weft_error_set(WEFT_ERR_CONFIG,
                       "%s: invalid setting '%s': expected section.key=value (e.g. "
                       "runtime.backend=cuda)",
                       cfg->name, assignment);
    free(copy);
    return rc;
}

/* ---- reading values ------------------------------------------------------------------ */

bool weft_config_has(const struct weft_config *cfg, const char *section, const char *key)
{
    if (!cfg || !section || !key)
        return false;
    return find_entry(find_section(cfg, section), key) != NULL;
}

bool weft_config_has_section(const struct weft_config *cfg, const char *section)
{
    const struct section *s = cfg && section ? find_section(cfg, section) : NULL;
    return s && s->present;
}

int weft_config_rename_section(struct weft_config *cfg, const char *old_name, const char *name)
{
    struct section *s = cfg && old_name && name ? find_section(cfg, old_name) : NULL;
    if (!s || !s->present || find_section(cfg, name))
        return 0;
    char *copy = strdup(name);
    weft_options *view = copy ? weft_options_view(name, cfg->name, view_lookup, cfg) : NULL;
    if (!view) {
        free(copy);
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of memory renaming [%s]", old_name);
    }
    free(s->name);
    weft_options_free(s->options);
    s->name = copy;
    s->options = view;
    retire(cfg, cfg->secv); /* the cached list of section names */
    cfg->secv = NULL;
    return 1;
}

static void remember_asked(struct section *s, const char *key)
{
    for (size_t i = 0; i < s->nasked; i++)
        if (strcmp(s->asked[i], key) == 0)
            return;
    bool had_error = weft_error_code() != WEFT_OK;
    char *copy = strdup(key);
    if (!copy || weft_grow((void **)&s->asked, &s->cap_asked, s->nasked + 1, sizeof(char *)) < 0) {
        /* Only suggestions would suffer; do not turn a read into a failure. */
        free(copy);
        if (!had_error)
            weft_error_clear();
        return;
    }
    s->asked[s->nasked++] = copy;
}

/* Records that (section, key) is known and returns its entry, or NULL when absent. */
static struct entry *lookup(struct weft_config *cfg, const char *section, const char *key)
{
    if (!cfg || !section || !key)
        return NULL;
    bool had_error = weft_error_code() != WEFT_OK;
    struct section *s = get_section(cfg, section);
    if (!s) {
        if (!had_error)
            weft_error_clear(); /* bookkeeping only; the value can still be read */
        s = find_section(cfg, section);
        return s ? find_entry(s, key) : NULL;
    }
    remember_asked(s, key);
    struct entry *e = find_entry(s, key);
    if (e)
        e->known = true;
    return e;
}

const char *weft_config_string(struct weft_config *cfg, const char *section, const char *key,
                               const char *def)
{
    const struct entry *e = lookup(cfg, section, key);
    return e ? e->value : def;
}

/* ---- sections as options ------------------------------------------------------------ */

const weft_options *weft_config_options(struct weft_config *cfg, const char *section)
{
    if (!cfg || !section)
        return NULL;
    /* Only a section absent from the config can fail here (present ones were made with
     * their view): reading it without a view reads its defaults, which is what an absent
     * section means, so the refusal of this bookkeeping is no error. */
    bool had_error = weft_error_code() != WEFT_OK;
    struct section *s = get_section(cfg, section);
    if (!s && !had_error)
        weft_error_clear();
    return s ? s->options : NULL;
}

static const weft_options *section_for_plugin(void *ctx, const char *plugin)
{
    struct weft_config *cfg = ctx;
    return weft_config_has_section(cfg, plugin) ? weft_config_options(cfg, plugin) : NULL;
}

void weft_config_serve_plugins(struct weft_config *cfg)
{
    serving = cfg;
    weft_plugin_set_options_source(cfg ? section_for_plugin : NULL, cfg);
}

/* The typed getters are the options' own, on the section's view, so a value parses and
 * fails the same whether a plugin or the program reads it. */
int weft_config_int(struct weft_config *cfg, const char *section, const char *key, int64_t def,
                    int64_t *out)
{
    return weft_options_int(weft_config_options(cfg, section), key, def, out);
}

int weft_config_double(struct weft_config *cfg, const char *section, const char *key, double def,
                       double *out)
{
    return weft_options_double(weft_config_options(cfg, section), key, def, out);
}

int weft_config_bool(struct weft_config *cfg, const char *section, const char *key, bool def,
                     bool *out)
{
    return weft_options_bool(weft_config_options(cfg, section), key, def, out);
}

int weft_config_choice(struct weft_config *cfg, const char *section, const char *key,
                       const char *const *choices, int def, int *out)
{
    return weft_options_choice(weft_config_options(cfg, section), key, choices, def, out);
}

/* "a, b, c" into buf, each wrapped as open..close. */
static void join_list(char *buf, size_t size, const char *const *items, size_t n,
                      const char *open, const char *close)
{
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < n && used < size; i++) {
        int w = snprintf(buf + used, size - used, "%s%s%s%s", i ? ", " : "", open, items[i],
                         close);
        if (w < 0)
            break;
        used += (size_t)w;
    }
}

/* ---- listing and unknown detection ----------------------------------------------------- */

const char *const *weft_config_sections(const struct weft_config *cfg_const)
{
    static const char *const empty[] = {NULL};
    struct weft_config *cfg = (struct weft_config *)cfg_const; /* the cache is not state */
    if (!cfg)
        return empty;
    if (cfg->secv)
        return cfg->secv;
    const char **v = malloc((cfg->n + 1) * sizeof *v);
    if (!v) {
        oom();
        return empty;
    }
    size_t k = 0;
    for (size_t i = 0; i < cfg->n; i++)
        if (cfg->secs[i].present)
            v[k++] = cfg->secs[i].name;
    v[k] = NULL;
    cfg->secv = v;
    return v;
}

const char *const *weft_config_keys(const struct weft_config *cfg, const char *section)
{
    static const char *const empty[] = {NULL};
    struct section *s = cfg && section ? find_section(cfg, section) : NULL;
    if (!s)
        return empty;
    if (s->keyv)
        return s->keyv;
    const char **v = malloc((s->n + 1) * sizeof *v);
    if (!v) {
        oom();
        return empty;
    }
    for (size_t i = 0; i < s->n; i++)
        v[i] = s->entries[i].key;
    v[s->n] = NULL;
    s->keyv = v;
    return v;
}

void weft_config_mark_known(struct weft_config *cfg, const char *section, const char *key)
{
    if (!cfg || !section)
        return;
    if (key) {
        lookup(cfg, section, key);
        return;
    }
    bool had_error = weft_error_code() != WEFT_OK;
    struct section *s = get_section(cfg, section);
    if (s)
        s->all_known = true;
    else if (!had_error)
        weft_error_clear();
}

static bool section_known(const struct section *s)
{
    return s->all_known || s->nasked > 0;
}

/* Where an entry came from: "mnist.ini: line 12", or "--set runtime.thread=4". */
static const char *entry_where(const struct weft_config *cfg, const struct entry *e, char *buf,
                               size_t size)
{
    if (e->set_by)
        snprintf(buf, size, "--set %s", e->set_by);
    else if (e->line > 0)
        snprintf(buf, size, "%s: line %d", cfg->name, e->line);
    else
        snprintf(buf, size, "%s", cfg->name);
    return buf;
}

/* Where a section came from: its header's line, or the --set that made it. */
static const char *section_where(const struct weft_config *cfg, const struct section *s,
                                 char *buf, size_t size)
{
    if (s->line > 0)
        snprintf(buf, size, "%s: line %d", cfg->name, s->line);
    else if (s->n > 0)
        return entry_where(cfg, &s->entries[0], buf, size);
    else
        snprintf(buf, size, "%s", cfg->name);
    return buf;
}

static int unknown_section(const struct weft_config *cfg, const struct section *s)
{
    char where[1024];
    section_where(cfg, s, where, sizeof where);
    const char *asked[64] = {NULL};
    size_t n = 0;
    for (size_t i = 0; i < cfg->n && n < 64; i++)
        if (section_known(&cfg->secs[i]))
            asked[n++] = cfg->secs[i].name;
    const char *hint = weft_closest_name(s->name, asked, n);
    if (hint)
        return weft_error_set(WEFT_ERR_CONFIG, "%s: unknown section [%s] (did you mean [%s]?)",
                              where, s->name, hint);
    char list[1024];
    join_list(list, sizeof list, asked, n, "[", "]");
    if (n == 0)
        return weft_error_set(WEFT_ERR_CONFIG, "%s: unknown section [%s]", where, s->name);
    return weft_error_set(WEFT_ERR_CONFIG, "%s: unknown section [%s] (known sections: %s)",
                          where, s->name, list);
}

static int unknown_key(const struct weft_config *cfg, const struct section *s,
                       const struct entry *e)
{
    char where[1024];
    entry_where(cfg, e, where, sizeof where);
    const char *hint = weft_closest_name(e->key, (const char *const *)s->asked, s->nasked);
    if (hint)
        return weft_error_set(WEFT_ERR_CONFIG, "%s: [%s] unknown key '%s' (did you mean '%s'?)",
                              where, s->name, e->key, hint);
    char list[1024];
    join_list(list, sizeof list, (const char *const *)s->asked, s->nasked, "", "");
    return weft_error_set(WEFT_ERR_CONFIG, "%s: [%s] unknown key '%s' (known keys: %s)",
                          where, s->name, e->key, list);
}

/* A section named after a plugin that did not load in this run ([cuda] in a config run
 * with --set runtime.backend=cpu): only that plugin knows its keys. */
static bool unloaded_plugin_section(const struct section *s)
{
    char path[4096];
    return !weft_plugin_is_loaded(s->name) && weft_plugin_find_file(s->name, path, sizeof path);
}

int weft_config_check_unknown(const struct weft_config *cfg)
{
    if (!cfg)
        return 0;
    for (size_t i = 0; i < cfg->n; i++) {
        const struct section *s = &cfg->secs[i];
        if (!s->present || s->all_known || unloaded_plugin_section(s))
            continue;
        if (!section_known(s))
            return unknown_section(cfg, s);
        for (size_t j = 0; j < s->n; j++)
            if (!s->entries[j].known)
                return unknown_key(cfg, s, &s->entries[j]);
    }
    return 0;
}

/* ---- explaining a failure by a typo --------------------------------------------------- */

/* A present section nobody asked for whose closest asked-for name is absent: [dta] beside
 * a missing [data]. NULL when none. */
static const struct section *misspelt_section(const struct weft_config *cfg,
                                              const char **meant)
{
    const char *asked[64] = {NULL};
    size_t n = 0;
    for (size_t i = 0; i < cfg->n && n < 64; i++)
        if (section_known(&cfg->secs[i]) && !cfg->secs[i].present)
            asked[n++] = cfg->secs[i].name;
    for (size_t i = 0; i < cfg->n; i++) {
        const struct section *s = &cfg->secs[i];
        if (!s->present || section_known(s) || unloaded_plugin_section(s))
            continue;
        if ((*meant = weft_closest_name(s->name, asked, n)) != NULL)
            return s;
    }
    return NULL;
}

/* A present key nobody asked for whose closest asked-for key of its section is absent:
 * 'reder' beside a missing 'reader'. NULL when none. */
static const struct entry *misspelt_key(const struct weft_config *cfg,
                                        const struct section **in, const char **meant)
{
    for (size_t i = 0; i < cfg->n; i++) {
        const struct section *s = &cfg->secs[i];
        if (!s->present || s->all_known)
            continue;
        const char *missing[64] = {NULL};
        size_t n = 0;
        for (size_t j = 0; j < s->nasked && n < 64; j++)
            if (!find_entry(s, s->asked[j]))
                missing[n++] = s->asked[j];
        for (size_t j = 0; j < s->n; j++) {
            if (s->entries[j].known)
                continue;
            if ((*meant = weft_closest_name(s->entries[j].key, missing, n)) != NULL) {
                *in = s;
                return &s->entries[j];
            }
        }
    }
    return NULL;
}

/* Whether word occurs in text as a whole word (not inside a longer name). */
static bool mentions(const char *text, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = strstr(text, word); p && n; p = strstr(p + 1, word)) {
        bool before = p == text || !(isalnum((unsigned char)p[-1]) || p[-1] == '_');
        bool after = !(isalnum((unsigned char)p[n]) || p[n] == '_');
        if (before && after)
            return true;
    }
    return false;
}

/* An error "<file>: [section] key ..." (after a prefix such as "epoch 1, batch 6 of 12: ")
 * about a value that a --set gave, or about a section whose values --set changed, names
 * those --set arguments in place of the file: the file is not where the mistake is. A
 * message naming a key of the file also blames the --set keys of the section it mentions
 * ("n_embd (130) must be divisible by n_head (4)" after --set model.n_embd=130). */
static int blame_set(const struct weft_config *cfg, int rc)
{
    const char *all = weft_error_message();
    size_t n = strlen(cfg->name);
    char head[256];
    snprintf(head, sizeof head, "%s: [", cfg->name);
    /* the last such place: a plugin's refusal comes after the [runtime] line that loaded it */
    const char *msg = NULL;
    for (const char *p = strstr(all, head); p; p = strstr(p + 1, head))
        if (p == all || strncmp(p - 2, ": ", 2) == 0)
            msg = p;
    if (!msg)
        return rc;
    const char *sec = msg + n + 3, *close = strchr(sec, ']');
    if (!close || (close[1] != ' ' && close[1] != '\0'))
        return rc;
    const char *after = close[1] ? close + 2 : close + 1;
    char name[256];
    snprintf(name, sizeof name, "%.*s", (int)(close - sec), sec);
    const struct section *s = find_section(cfg, name);
    if (!s)
        return rc;
    /* The key named after the section decides: blamed when --set gave it; when the file
     * did, the --set keys the message mentions are blamed, else none. A message about the
     * whole section blames every --set of it. */
    char sets[1024] = "";
    size_t used = 0;
    size_t klen = strcspn(after, " =:");
    const struct entry *named = NULL;
    for (size_t i = 0; i < s->n && !named; i++)
        if (klen && strlen(s->entries[i].key) == klen && !strncmp(after, s->entries[i].key, klen))
            named = &s->entries[i];
    for (size_t i = 0; i < s->n; i++) {
        const struct entry *e = &s->entries[i];
        bool blamed = named ? e == named || (!named->set_by && mentions(after + klen, e->key))
                            : true;
        if (e->set_by && blamed && used < sizeof sets)
            used += (size_t)snprintf(sets + used, sizeof sets - used, "%s--set %s",
                                     used ? ", " : "", e->set_by);
    }
    if (!sets[0])
        return rc;
    char prefix[1024], rest[1536];
    snprintf(prefix, sizeof prefix, "%.*s", (int)(msg - all), all);
    snprintf(rest, sizeof rest, "%s", msg + n + 2);
    int code = weft_error_code();
    weft_error_clear();
    return weft_error_set(code, "%s%s (set on the command line, over %s): %s", prefix, sets,
                          cfg->name, rest);
}

int weft_config_explain_error(const struct weft_config *cfg, int rc)
{
    int code = weft_error_code();
    if (!cfg || rc >= 0)
        return rc;
    /* a value that cannot work, whoever refused it: the device, a plugin, a range */
    if (code == WEFT_ERR_VALUE || code == WEFT_ERR_PLUGIN || code == WEFT_ERR_DEVICE)
        return blame_set(cfg, rc);
    if (code != WEFT_ERR_CONFIG)
        return rc;
    const char *meant = NULL;
    const struct section *s = misspelt_section(cfg, &meant);
    char where[1024];
    if (s) {
        weft_error_clear();
        return weft_error_set(WEFT_ERR_CONFIG, "%s: unknown section [%s] (did you mean [%s]?)",
                              section_where(cfg, s, where, sizeof where), s->name, meant);
    }
    const struct entry *e = misspelt_key(cfg, &s, &meant);
    if (e) {
        weft_error_clear();
        return weft_error_set(WEFT_ERR_CONFIG, "%s: [%s] unknown key '%s' (did you mean '%s'?)",
                              entry_where(cfg, e, where, sizeof where), s->name, e->key, meant);
    }
    return blame_set(cfg, rc);
}
