/* plugins/io/csv.c: the `csv` reader: numeric tables, one sample per line.
 *
 * The whole file is parsed at open (raw or gzip'd), strictly: every row has the
 * header's number of cells, every used cell is a finite number (features; nan and inf
 * are refused, as the libsvm and mtx readers refuse them) or a non-negative
 * integer (label), and each failure names file:line:column. Cells of columns that are
 * not used (an id, a name) are not parsed. Fields are "features" (float32, [ncolumns])
 * and "label" (int64, []) when label_column is set.
 *
 * Keys: path (required), header (default true), delimiter (default ","; one character,
 * or comma, semicolon, tab, space, pipe), label_column (a header name, or a 0-based
 * index), columns (comma-separated names or 0-based indices of the feature columns;
 * default all but the label), num_classes (default: largest label + 1).
 */
#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io.h"

#define CELL_TEXT_MAX 256 /* longer cells cannot be numbers we accept */
#define NAME_SHOW_MAX 64

struct cell {
    const char *p;
    size_t len;
    int col; /* 1-based character column in its line */
};

struct csv_ctx {
    float *features; /* rows x nfeat */
    int64_t *labels; /* rows, or NULL */
    int64_t nfeat;
};

/* What open() builds while parsing. */
struct csv_parse {
    const char *path;
    char delim;
    int64_t ncols;
    struct cell *names; /* header cells (ncols), or NULL */
    int64_t *feature_cols;
    int64_t nfeat;
    int64_t label_col; /* -1 without labels */
    int64_t num_classes; /* labels must be below it; 0: no limit (inferred at the end) */
    struct cell *cells; /* the current row's cells (ncols) */
    float *features;
    int64_t *labels;
    int64_t rows, cap_rows;
};

/* ---- lines and cells ------------------------------------------------------------- */

static bool is_pad(char c, char delim)
{
    return (c == ' ' || c == '\t') && c != delim;
}

/* Splits line[0..len) at delim into at most max cells, trimmed of blanks; returns the
 * number of cells in the line (which may exceed max: only the first max are stored). */
static int64_t split(const char *line, size_t len, char delim, struct cell *cells, int64_t max)
{
    int64_t n = 0;
    size_t start = 0;
    for (size_t i = 0; i <= len; i++) {
        if (i < len && line[i] != delim)
            continue;
        size_t a = start, b = i;
        while (a < b && is_pad(line[a], delim))
            a++;
        while (b > a && is_pad(line[b - 1], delim))
            b--;
        if (n < max)
            cells[n] = (struct cell){line + a, b - a, (int)(a + 1)};
        n++;
        start = i + 1;
    }
    return n;
}

static bool blank(const char *line, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (!isspace((unsigned char)line[i]))
            return false;
    return true;
}

/* A cell's text for messages, shortened and with control bytes shown as '?'. */
static const char *show(const struct cell *c, char *buf, size_t size)
{
    size_t n = c->len < size - 4 ? c->len : size - 4;
    for (size_t i = 0; i < n; i++)
        buf[i] = isprint((unsigned char)c->p[i]) ? c->p[i] : '?';
    strcpy(buf + n, n < c->len ? "..." : "");
    return buf;
}

/* "'petal_length'" with a header, "index 3" without. */
static const char *column_name(const struct csv_parse *ps, int64_t col, char *buf, size_t size)
{
    if (ps->names) {
        char name[NAME_SHOW_MAX];
        snprintf(buf, size, "'%s'", show(&ps->names[col], name, sizeof name));
    } else {
        snprintf(buf, size, "index %lld", (long long)col);
    }
    return buf;
}

/* ---- cells as values ------------------------------------------------------------- */

static int parse_feature(const struct csv_parse *ps, int64_t line, int64_t col,
                         const struct cell *c, float *out)
{
    char text[CELL_TEXT_MAX];
    bool ok = c->len > 0 && c->len < sizeof text && !memchr(c->p, 'x', c->len) &&
              !memchr(c->p, 'X', c->len);
    double v = 0;
    if (ok) {
        memcpy(text, c->p, c->len);
        text[c->len] = '\0';
        char *end;
        errno = 0;
        v = strtod(text, &end);
        ok = end == text + c->len && !(errno == ERANGE && isinf(v));
    }
    char name[NAME_SHOW_MAX + 16], shown[NAME_SHOW_MAX];
    if (!ok)
        return weft_error_set(WEFT_ERR_IO, "%s:%lld:%d: column %s: expected a number, found '%s'",
                              ps->path, (long long)line, c->col,
                              column_name(ps, col, name, sizeof name),
                              show(c, shown, sizeof shown));
    /* strtod reads "nan" and "inf"; training on them fails later as a diverging loss,
     * which points the user at the learning rate instead of the file. */
    if (!isfinite(v))
        return weft_error_set(WEFT_ERR_IO, "%s:%lld:%d: column %s: expected a finite number, "
                                           "found '%s'",
                              ps->path, (long long)line, c->col,
                              column_name(ps, col, name, sizeof name),
                              show(c, shown, sizeof shown));
    if (fabs(v) > FLT_MAX)
        return weft_error_set(WEFT_ERR_IO,
                              "%s:%lld:%d: column %s: %s is out of range for float32", ps->path,
                              (long long)line, c->col, column_name(ps, col, name, sizeof name),
                              show(c, shown, sizeof shown));
    *out = (float)v;
    return 0;
}

static int parse_label(const struct csv_parse *ps, int64_t line, const struct cell *c,
                       int64_t *out)
{
    char text[32];
    bool ok = c->len > 0 && c->len < sizeof text;
    long long v = -1;
    if (ok) {
        memcpy(text, c->p, c->len);
        text[c->len] = '\0';
        char *end;
        errno = 0;
        v = strtoll(text, &end, 10);
        ok = end == text + c->len && errno == 0 && v >= 0 && isdigit((unsigned char)text[0]);
    }
    if (ok) {
        *out = v;
        return 0;
    }
    char name[NAME_SHOW_MAX + 16], shown[NAME_SHOW_MAX];
    return weft_error_set(WEFT_ERR_IO,
                          "%s:%lld:%d: label column %s: expected a class label (an integer >= "
                          "0), found '%s'",
                          ps->path, (long long)line, c->col,
                          column_name(ps, ps->label_col, name, sizeof name),
                          show(c, shown, sizeof shown));
}

/* ---- columns named in the config --------------------------------------------------- */

/* A column by header name or 0-based index; -1 with an error when there is none. */
static int64_t find_column(const weft_options *o, const char *key,
                           const struct csv_parse *ps, const char *spec, size_t len)
{
    int64_t found = -1;
    for (int64_t i = 0; ps->names && i < ps->ncols; i++) {
        if (ps->names[i].len != len || memcmp(ps->names[i].p, spec, len) != 0)
            continue;
        if (found >= 0)
            return weft_options_error(o,
                                  "%s: column '%.*s' appears twice in the header of %s", key, (int)len, spec, ps->path);
        found = i;
    }
    if (found >= 0)
        return found;
    bool digits = len > 0 && len < 19;
    for (size_t i = 0; i < len && digits; i++)
        digits = isdigit((unsigned char)spec[i]);
    if (digits) {
        int64_t v = strtoll(spec, NULL, 10);
        if (v < ps->ncols)
            return v;
        return weft_options_error(o,
                              "%s: column index %lld is out of range: %s has %lld "
                              "columns (0 to %lld)", key, (long long)v, ps->path,
                              (long long)ps->ncols, (long long)ps->ncols - 1);
    }
    return weft_options_error(o,
                          "%s: no column '%.*s' in %s (%s)", key, (int)len, spec, ps->path,
                          ps->names ? "expected a name from its header or a 0-based index"
                                    : "it has no header: expected a 0-based index");
}

static int pick_columns(const weft_options *o, struct csv_parse *ps,
                        const char *label_spec, const char *columns_spec)
{
    ps->label_col = -1;
    if (label_spec) {
        ps->label_col = find_column(o, "label_column", ps, label_spec,
                                    strlen(label_spec));
        if (ps->label_col < 0)
            return (int)ps->label_col;
    }
    ps->feature_cols = malloc((size_t)ps->ncols * sizeof *ps->feature_cols);
    if (!ps->feature_cols)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "%s: out of memory", ps->path);
    ps->nfeat = 0;
    if (!columns_spec) {
        for (int64_t i = 0; i < ps->ncols; i++)
            if (i != ps->label_col)
                ps->feature_cols[ps->nfeat++] = i;
    } else {
        const char *p = columns_spec;
        for (;;) {
            const char *comma = strchr(p, ',');
            size_t len = comma ? (size_t)(comma - p) : strlen(p);
            while (len && isspace((unsigned char)*p))
                p++, len--;
            while (len && isspace((unsigned char)p[len - 1]))
                len--;
            if (len == 0)
                return weft_options_error(o,
                                      "columns = '%s': empty entry; expected "
                                      "comma-separated column names or 0-based indices", columns_spec);
            int64_t col = find_column(o, "columns", ps, p, len);
            if (col < 0)
                return (int)col;
            for (int64_t k = 0; k < ps->nfeat; k++)
                if (ps->feature_cols[k] == col)
                    return weft_options_error(o,
                                          "columns: '%.*s' is listed twice", (int)len, p);
            if (col == ps->label_col)
                return weft_options_error(o,
                                      "columns: '%.*s' is the label column", (int)len, p);
            if (ps->nfeat == ps->ncols)
                break;
            ps->feature_cols[ps->nfeat++] = col;
            if (!comma)
                break;
            p = comma + 1;
        }
    }
    if (ps->nfeat == 0)
        return weft_options_error(o, "%s has no feature columns", ps->path);
    return 0;
}

/* ---- rows ------------------------------------------------------------------------ */

static int grow_rows(struct csv_parse *ps)
{
    if (ps->rows < ps->cap_rows)
        return 0;
    int64_t cap = ps->cap_rows ? ps->cap_rows * 2 : 256;
    float *f = realloc(ps->features, (size_t)cap * (size_t)ps->nfeat * sizeof *f);
    if (f)
        ps->features = f;
    int64_t *l = ps->labels;
    if (f && ps->label_col >= 0) {
        l = realloc(ps->labels, (size_t)cap * sizeof *l);
        if (l)
            ps->labels = l;
    }
    if (!f || (ps->label_col >= 0 && !l))
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "%s: out of memory", ps->path);
    ps->cap_rows = cap;
    return 0;
}

static int parse_row(struct csv_parse *ps, int64_t line, const char *text, size_t len,
                     bool header_given)
{
    int64_t n = split(text, len, ps->delim, ps->cells, ps->ncols);
    if (n != ps->ncols)
        return weft_error_set(WEFT_ERR_IO, "%s:%lld: expected %lld columns (as in the %s), found "
                                           "%lld",
                              ps->path, (long long)line, (long long)ps->ncols,
                              header_given ? "header" : "first line", (long long)n);
    int rc = grow_rows(ps);
    if (rc < 0)
        return rc;
    float *row = ps->features + ps->rows * ps->nfeat;
    for (int64_t k = 0; k < ps->nfeat; k++) {
        int64_t col = ps->feature_cols[k];
        rc = parse_feature(ps, line, col, &ps->cells[col], &row[k]);
        if (rc < 0)
            return rc;
    }
    if (ps->label_col >= 0) {
        const struct cell *c = &ps->cells[ps->label_col];
        rc = parse_label(ps, line, c, &ps->labels[ps->rows]);
        if (rc < 0)
            return rc;
        if (ps->num_classes > 0 && ps->labels[ps->rows] >= ps->num_classes)
            return weft_error_set(WEFT_ERR_IO,
                                  "%s:%lld:%d: label %lld is out of range: expected 0 <= label "
                                  "< %lld (num_classes)",
                                  ps->path, (long long)line, c->col,
                                  (long long)ps->labels[ps->rows], (long long)ps->num_classes);
    }
    ps->rows++;
    return 0;
}

/* The next line of text[*pos..len) without its end of line; false at the end. */
static bool next_line(const char *text, size_t len, size_t *pos, const char **line,
                      size_t *line_len)
{
    if (*pos >= len)
        return false;
    const char *start = text + *pos;
    const char *nl = memchr(start, '\n', len - *pos);
    size_t n = nl ? (size_t)(nl - start) : len - *pos;
    *pos += n + (nl ? 1 : 0);
    if (n && start[n - 1] == '\r')
        n--;
    *line = start;
    *line_len = n;
    return true;
}

/* ---- the reader -------------------------------------------------------------------- */

/* The delimiter: one character, or a name for the ones an INI value cannot hold (';'
 * starts a comment, spaces are trimmed). */
static int parse_delimiter(const weft_options *o, char *out)
{
    static const struct {
        const char *name;
        char c;
    } names[] = {
        {"comma", ','}, {"semicolon", ';'}, {"tab", '\t'},
        {"\\t", '\t'}, {"space", ' '},     {"pipe", '|'},
    };
    const char *d = weft_options_string(o, "delimiter", ",");
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (strcmp(d, names[i].name) == 0) {
            *out = names[i].c;
            return 0;
        }
    if (strlen(d) == 1 && d[0] != '"' && d[0] != '.' && d[0] != '-' && d[0] != '+' &&
        !isalnum((unsigned char)d[0])) {
        *out = d[0];
        return 0;
    }
    return weft_options_error(o,
                          "delimiter = '%s': expected one character that cannot be "
                          "part of a number (e.g. ',' or '|'), or one of comma, semicolon, tab, "
                          "space, pipe (';' would start an INI comment)", d);
}

static void free_parse(struct csv_parse *ps)
{
    free(ps->names);
    free(ps->feature_cols);
    free(ps->cells);
    free(ps->features);
    free(ps->labels);
}

static void csv_close(void *ctx)
{
    struct csv_ctx *c = ctx;
    if (!c)
        return;
    free(c->features);
    free(c->labels);
    free(c);
}

/* Reads the first line: the column count and, with a header, the names. */
static int parse_first_line(struct csv_parse *ps, bool header, const char *line, size_t len)
{
    struct cell probe;
    ps->ncols = split(line, len, ps->delim, &probe, 1);
    ps->cells = malloc((size_t)ps->ncols * sizeof *ps->cells);
    if (!ps->cells)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "%s: out of memory", ps->path);
    split(line, len, ps->delim, ps->cells, ps->ncols);
    if (!header)
        return 0;
    ps->names = malloc((size_t)ps->ncols * sizeof *ps->names);
    if (!ps->names)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "%s: out of memory", ps->path);
    for (int64_t i = 0; i < ps->ncols; i++) {
        struct cell c = ps->cells[i];
        if (c.len >= 2 && c.p[0] == '"' && c.p[c.len - 1] == '"')
            c = (struct cell){c.p + 1, c.len - 2, c.col + 1};
        ps->names[i] = c;
    }
    return 0;
}

/* num_classes when the config leaves it out: the largest label + 1 (at least 1). */
static int64_t infer_classes(const struct csv_parse *ps)
{
    int64_t max = 0;
    for (int64_t i = 0; i < ps->rows; i++)
        if (ps->labels[i] > max)
            max = ps->labels[i];
    return max + 1;
}

static int csv_parse_text(const weft_options *o, struct csv_parse *ps,
                          const char *text, size_t len, bool header)
{
    const char *label_spec = weft_options_string(o, "label_column", NULL);
    const char *columns_spec = weft_options_string(o, "columns", NULL);
    size_t pos = 0;
    int64_t line_no = 0;
    const char *line;
    size_t line_len;
    bool first = true;
    while (next_line(text, len, &pos, &line, &line_len)) {
        line_no++;
        if (memchr(line, '\0', line_len))
            return weft_error_set(WEFT_ERR_IO, "%s:%lld: NUL byte in a text file; expected "
                                               "CSV text",
                                  ps->path, (long long)line_no);
        if (blank(line, line_len))
            continue;
        if (first) {
            first = false;
            int rc = parse_first_line(ps, header, line, line_len);
            if (rc == 0)
                rc = pick_columns(o, ps, label_spec, columns_spec);
            if (rc < 0)
                return rc;
            if (header)
                continue;
        }
        int rc = parse_row(ps, line_no, line, line_len, header);
        if (rc < 0)
            return rc;
    }
    if (first)
        return weft_error_set(WEFT_ERR_IO, "%s: empty file; expected CSV text%s", ps->path,
                              header ? " with a header line" : "");
    return 0;
}

static int csv_open(const weft_options *o, struct weft_dataset_info *info,
                    void **out)
{
    char path[IO_PATH_MAX];
    bool header;
    struct csv_parse ps = {.path = path};
    int rc = io_config_path(o, "path", true, "the path of a CSV file", path,
                            sizeof path);
    if (rc < 0)
        return rc;
    if ((rc = weft_options_bool(o, "header", true, &header)) < 0 ||
        (rc = parse_delimiter(o, &ps.delim)) < 0 ||
        (rc = weft_options_int_range(o, "num_classes", 0, 1, INT32_MAX,
                                  &ps.num_classes)) < 0)
        return rc;
    struct io_stream s;
    char *text = NULL;
    size_t len = 0;
    rc = io_stream_open(&s, path);
    if (rc == 0) {
        rc = io_stream_read_all(&s, &text, &len);
        io_stream_close(&s);
    }
    if (rc == 0)
        rc = csv_parse_text(o, &ps, text, len, header);
    struct csv_ctx *c = NULL;
    if (rc == 0 && !(c = calloc(1, sizeof *c)))
        rc = weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    free(text);
    if (rc < 0) {
        free_parse(&ps);
        return rc;
    }
    int64_t num_classes = ps.num_classes    ? ps.num_classes
                          : ps.label_col >= 0 ? infer_classes(&ps)
                                              : 0;
    c->features = ps.features;
    c->labels = ps.labels;
    c->nfeat = ps.nfeat;
    ps.features = NULL;
    ps.labels = NULL;
    info->length = ps.rows;
    info->nfields = 1;
    struct weft_dataset_field *fd = &info->fields[0];
    snprintf(fd->name, sizeof fd->name, "features");
    fd->dtype = WEFT_F32;
    fd->ndim = 1;
    fd->shape[0] = ps.nfeat;
    if (ps.label_col >= 0) {
        fd = &info->fields[info->nfields++];
        snprintf(fd->name, sizeof fd->name, "label");
        fd->dtype = WEFT_I64;
        fd->num_classes = num_classes;
    }
    free_parse(&ps);
    *out = c;
    return 0;
}

static int csv_read(void *ctx, int64_t n, const int64_t *indices, void *const *buffers)
{
    const struct csv_ctx *c = ctx;
    float *features = buffers[0];
    size_t row_bytes = (size_t)c->nfeat * sizeof(float);
    for (int64_t k = 0; k < n; k++)
        memcpy(features + k * c->nfeat, c->features + indices[k] * c->nfeat, row_bytes);
    if (c->labels) {
        int64_t *labels = buffers[1];
        for (int64_t k = 0; k < n; k++)
            labels[k] = c->labels[indices[k]];
    }
    return 0;
}

const struct weft_dataset_reader io_csv_reader = {
    .base = WEFT_VTABLE(WEFT_KIND_READER, "csv", struct weft_dataset_reader),
    .description = "numeric CSV tables: features and an integer label column",
    .open = csv_open,
    .read = csv_read,
    .close = csv_close,
};
