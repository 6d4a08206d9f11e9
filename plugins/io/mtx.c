/* plugins/io/mtx.c: the `mtx` reader: Matrix Market coordinate files, one sample per row.
 *
 * Format (math.nist.gov/MatrixMarket/formats.html): a header line
 *     %%MatrixMarket matrix coordinate real|integer|pattern general|symmetric
 * (keywords case-insensitive), comment lines starting with '%', a size line
 * "rows columns entries", then one entry per line, "row column value" with 1-based
 * indices ("row column" for pattern matrices, whose values are 1). A symmetric file
 * lists one triangle; every entry off the diagonal stands for its mirror image too.
 * Dense ("array") files, complex values and hermitian or skew-symmetric matrices are
 * refused by name. Entries may come in any order; duplicates are summed (as scipy's
 * tocsr does), except in pattern files, where an entry is only present or not. Blank
 * lines and '%' comments are allowed anywhere after the header.
 *
 * Samples are the rows. The dataset ABI wants fixed sample shapes, so a row is handed
 * out padded to the longest row ("ELL" layout): "indices" int64 [width], the row's
 * column indices (0-based, increasing) then -1, and "values" float32 [width], its
 * values then 0. The indices field's num_classes is the number of columns: its values
 * lie in [0, columns).
 *
 * Memory follows the entries that are really there: rows and entries claimed by the
 * size line are only compared with what arrives, so a size line claiming 10^18 rows
 * allocates nothing; the rows are kept as the sorted list of non-empty ones.
 *
 * Keys: path (required; raw or gzip'd).
 */
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "io.h"

#define MTX_HEADER_HINT "'%%MatrixMarket matrix coordinate real|integer|pattern general|symmetric'"

enum mtx_field { MTX_REAL, MTX_INTEGER, MTX_PATTERN };

struct mtx_entry {
    int64_t row, col; /* 0-based */
    float val;
};

struct mtx_ctx {
    int64_t nrows_nz; /* rows with at least one entry */
    int64_t *row_ids; /* [nrows_nz], ascending */
    int64_t *row_ptr; /* [nrows_nz + 1] into cols/vals */
    int64_t *cols;
    float *vals;
    int64_t width;    /* longest row */
};

/* The parser's state: the text, the current line, what the header and size line said,
 * and the entries read so far. */
struct mtx_parse {
    const char *path;
    const char *text;
    size_t len, pos;
    int64_t line_no;
    const char *line;
    size_t line_len;
    enum mtx_field field;
    bool symmetric;
    int64_t rows, cols, nnz;
    int64_t size_line;
    struct mtx_entry *entries;
    int64_t count, cap;
};

/* ---- lines, tokens and messages ---------------------------------------------------- */

static bool next_line(struct mtx_parse *ps)
{
    if (ps->pos >= ps->len)
        return false;
    const char *start = ps->text + ps->pos;
    const char *nl = memchr(start, '\n', ps->len - ps->pos);
    size_t n = nl ? (size_t)(nl - start) : ps->len - ps->pos;
    ps->pos += n + (nl ? 1 : 0);
    if (n && start[n - 1] == '\r')
        n--;
    ps->line = start;
    ps->line_len = n;
    ps->line_no++;
    return true;
}

/* The next blank-separated token of the current line at or after *at; false at the end
 * of the line. */
static bool next_token(const struct mtx_parse *ps, const char **at, const char **tok, size_t *len)
{
    const char *p = *at, *end = ps->line + ps->line_len;
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    const char *start = p;
    while (p < end && *p != ' ' && *p != '\t')
        p++;
    *at = p;
    *tok = start;
    *len = (size_t)(p - start);
    return p > start;
}

/* "path:line:column: message", the column being that of `at` in the current line. */
static int parse_error(const struct mtx_parse *ps, const char *at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int parse_error(const struct mtx_parse *ps, const char *at, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return weft_error_set(WEFT_ERR_IO, "%s:%lld:%lld: %s", ps->path, (long long)ps->line_no,
                          (long long)(at - ps->line) + 1, msg);
}

static bool token_is(const char *tok, size_t len, const char *word)
{
    return strlen(word) == len && strncasecmp(tok, word, len) == 0;
}

/* A blank line or a '%' comment. */
static bool skippable(const struct mtx_parse *ps)
{
    for (size_t i = 0; i < ps->line_len; i++) {
        if (ps->line[i] == '%')
            return true;
        if (ps->line[i] != ' ' && ps->line[i] != '\t')
            return false;
    }
    return true;
}

/* ---- the header and the size line ------------------------------------------------- */

/* The next header token, or an error saying what was expected after the last one. */
static int header_token(struct mtx_parse *ps, const char **at, const char **tok, size_t *len,
                        const char *expected)
{
    if (next_token(ps, at, tok, len))
        return 0;
    return parse_error(ps, *at, "the header ends early: expected %s (a header reads %s)",
                       expected, MTX_HEADER_HINT);
}

static int parse_header(struct mtx_parse *ps)
{
    char shown[64];
    const char *at, *tok;
    size_t len;
    if (!next_line(ps)) {
        ps->line = ps->text;
        ps->line_no = 1;
        return parse_error(ps, ps->text, "empty file: expected the Matrix Market header %s",
                           MTX_HEADER_HINT);
    }
    at = ps->line;
    if (!next_token(ps, &at, &tok, &len) || !token_is(tok, len, "%%MatrixMarket"))
        return parse_error(ps, ps->line, "expected the Matrix Market header %s, found '%s'",
                           MTX_HEADER_HINT,
                           io_text_show(ps->line, ps->line_len, shown, sizeof shown));
    int rc;
    if ((rc = header_token(ps, &at, &tok, &len, "the object 'matrix'")) < 0)
        return rc;
    if (!token_is(tok, len, "matrix"))
        return parse_error(ps, tok, "object '%s' is not supported: expected 'matrix'",
                           io_text_show(tok, len, shown, sizeof shown));
    if ((rc = header_token(ps, &at, &tok, &len, "the format 'coordinate'")) < 0)
        return rc;
    if (token_is(tok, len, "array"))
        return parse_error(ps, tok, "format 'array' (a dense matrix) is not supported: expected "
                                    "'coordinate' (a sparse one)");
    if (!token_is(tok, len, "coordinate"))
        return parse_error(ps, tok, "format '%s': expected 'coordinate'",
                           io_text_show(tok, len, shown, sizeof shown));
    if ((rc = header_token(ps, &at, &tok, &len, "the field real, integer or pattern")) < 0)
        return rc;
    if (token_is(tok, len, "real") || token_is(tok, len, "double"))
        ps->field = MTX_REAL;
    else if (token_is(tok, len, "integer"))
        ps->field = MTX_INTEGER;
    else if (token_is(tok, len, "pattern"))
        ps->field = MTX_PATTERN;
    else
        return parse_error(ps, tok, "field '%s' is not supported: expected real, integer or "
                                    "pattern",
                           io_text_show(tok, len, shown, sizeof shown));
    if ((rc = header_token(ps, &at, &tok, &len, "the symmetry general or symmetric")) < 0)
        return rc;
    if (token_is(tok, len, "general"))
        ps->symmetric = false;
    else if (token_is(tok, len, "symmetric"))
        ps->symmetric = true;
    else
        return parse_error(ps, tok, "symmetry '%s' is not supported: expected general or "
                                    "symmetric",
                           io_text_show(tok, len, shown, sizeof shown));
    if (next_token(ps, &at, &tok, &len))
        return parse_error(ps, tok, "unexpected '%s' after the header: expected the end of the "
                                    "line",
                           io_text_show(tok, len, shown, sizeof shown));
    return 0;
}

static int parse_size_line(struct mtx_parse *ps)
{
    static const char *const names[] = {"rows", "columns", "entries"};
    int64_t *const out[] = {&ps->rows, &ps->cols, &ps->nnz};
    char shown[64];
    const char *at, *tok;
    size_t len;
    do {
        if (!next_line(ps))
            return weft_error_set(WEFT_ERR_IO, "%s:%lld: the file ends before the size line: "
                                               "expected 'rows columns entries'",
                                  ps->path, (long long)ps->line_no);
    } while (skippable(ps));
    ps->size_line = ps->line_no;
    at = ps->line;
    for (int i = 0; i < 3; i++) {
        if (!next_token(ps, &at, &tok, &len))
            return parse_error(ps, at, "the size line ends early: expected the number of %s "
                                       "(the size line is 'rows columns entries')",
                               names[i]);
        if (!io_parse_i64(tok, len, out[i]) || *out[i] < 0)
            return parse_error(ps, tok, "expected the number of %s (an integer >= 0) in the size "
                                        "line 'rows columns entries', found '%s'",
                               names[i], io_text_show(tok, len, shown, sizeof shown));
    }
    if (next_token(ps, &at, &tok, &len))
        return parse_error(ps, tok, "unexpected '%s' after the size line: expected 'rows columns "
                                    "entries' and the end of the line",
                           io_text_show(tok, len, shown, sizeof shown));
    if (ps->symmetric && ps->rows != ps->cols)
        return parse_error(ps, ps->line, "a symmetric matrix must be square: found %lld rows and "
                                         "%lld columns",
                           (long long)ps->rows, (long long)ps->cols);
    return 0;
}

/* ---- entries --------------------------------------------------------------------------- */

static int push_entry(struct mtx_parse *ps, int64_t row, int64_t col, float val)
{
    if (ps->count == ps->cap) {
        int64_t cap = ps->cap ? ps->cap * 2 : 1024;
        struct mtx_entry *grown = realloc(ps->entries, (size_t)cap * sizeof *grown);
        if (!grown)
            return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "%s: out of memory", ps->path);
        ps->entries = grown;
        ps->cap = cap;
    }
    ps->entries[ps->count++] = (struct mtx_entry){row, col, val};
    return 0;
}

/* One 1-based index token, checked against [1, limit]; *out is 0-based. */
static int parse_index(struct mtx_parse *ps, const char *tok, size_t len, const char *what,
                       int64_t limit, const char *dim, int64_t *out)
{
    char shown[64];
    int64_t v;
    if (!io_parse_i64(tok, len, &v))
        return parse_error(ps, tok, "expected a %s index (an integer from 1 to %lld), found '%s'",
                           what, (long long)limit, io_text_show(tok, len, shown, sizeof shown));
    if (v < 1 || v > limit)
        return parse_error(ps, tok, "%s index %lld is out of range: expected 1 to %lld (the matrix "
                                    "has %lld %s; Matrix Market indices are 1-based)",
                           what, (long long)v, (long long)limit, (long long)limit, dim);
    *out = v - 1;
    return 0;
}

static int parse_value(struct mtx_parse *ps, const char *tok, size_t len, float *out)
{
    char shown[64];
    if (ps->field == MTX_INTEGER) {
        int64_t v;
        if (!io_parse_i64(tok, len, &v))
            return parse_error(ps, tok, "expected an integer value (the header says 'integer'), "
                                        "found '%s'",
                               io_text_show(tok, len, shown, sizeof shown));
        *out = (float)v;
        return 0;
    }
    double v;
    if (!io_parse_f64(tok, len, &v))
        return parse_error(ps, tok, "expected a value (a finite number), found '%s'",
                           io_text_show(tok, len, shown, sizeof shown));
    if (fabs(v) > FLT_MAX)
        return parse_error(ps, tok, "value %s is out of range for float32",
                           io_text_show(tok, len, shown, sizeof shown));
    *out = (float)v;
    return 0;
}

static int parse_entry(struct mtx_parse *ps)
{
    char shown[64];
    const char *format = ps->field == MTX_PATTERN ? "'row column'" : "'row column value'";
    const char *at = ps->line, *tok;
    size_t len;
    int64_t row, col;
    float val = 1.0f;
    int rc;
    next_token(ps, &at, &tok, &len);
    if ((rc = parse_index(ps, tok, len, "row", ps->rows, "rows", &row)) < 0)
        return rc;
    if (!next_token(ps, &at, &tok, &len))
        return parse_error(ps, at, "the entry ends after the row index: expected %s", format);
    if ((rc = parse_index(ps, tok, len, "column", ps->cols, "columns", &col)) < 0)
        return rc;
    if (ps->field != MTX_PATTERN) {
        if (!next_token(ps, &at, &tok, &len))
            return parse_error(ps, at, "the entry ends after the column index: expected %s",
                               format);
        if ((rc = parse_value(ps, tok, len, &val)) < 0)
            return rc;
    }
    if (next_token(ps, &at, &tok, &len))
        return parse_error(ps, tok, "unexpected '%s' after the entry: expected the end of the line "
                                    "(entries are %s)",
                           io_text_show(tok, len, shown, sizeof shown), format);
    rc = push_entry(ps, row, col, val);
    if (rc == 0 && ps->symmetric && row != col)
        rc = push_entry(ps, col, row, val);
    return rc;
}

static int parse_entries(struct mtx_parse *ps)
{
    int64_t seen = 0;
    while (next_line(ps)) {
        if (skippable(ps))
            continue;
        if (seen == ps->nnz)
            return parse_error(ps, ps->line, "one entry more than the %lld the size line (line "
                                             "%lld) declares",
                               (long long)ps->nnz, (long long)ps->size_line);
        int rc = parse_entry(ps);
        if (rc < 0)
            return rc;
        seen++;
    }
    if (seen < ps->nnz)
        return weft_error_set(WEFT_ERR_IO, "%s:%lld: the file ends after %lld of the %lld entries "
                                           "the size line (line %lld) declares",
                              ps->path, (long long)ps->line_no, (long long)seen,
                              (long long)ps->nnz, (long long)ps->size_line);
    return 0;
}

/* ---- entries into rows ---------------------------------------------------------------- */

static int entry_cmp(const void *a, const void *b)
{
    const struct mtx_entry *x = a, *y = b;
    if (x->row != y->row)
        return x->row < y->row ? -1 : 1;
    return x->col < y->col ? -1 : x->col > y->col;
}

static bool entries_sorted(const struct mtx_entry *e, int64_t n)
{
    for (int64_t i = 1; i < n; i++)
        if (entry_cmp(&e[i - 1], &e[i]) > 0)
            return false;
    return true;
}

/* Sorts the entries by (row, column), merges duplicates and builds the rows. */
static int build_rows(struct mtx_parse *ps, struct mtx_ctx *c)
{
    struct mtx_entry *e = ps->entries;
    int64_t n = ps->count;
    if (!entries_sorted(e, n))
        qsort(e, (size_t)n, sizeof *e, entry_cmp);
    int64_t m = 0, nrows = 0;
    for (int64_t i = 0; i < n; i++) {
        if (m > 0 && e[m - 1].row == e[i].row && e[m - 1].col == e[i].col) {
            if (ps->field != MTX_PATTERN)
                e[m - 1].val += e[i].val;
            continue;
        }
        nrows += m == 0 || e[m - 1].row != e[i].row;
        e[m++] = e[i];
    }
    size_t nn = (size_t)(m ? m : 1), nr = (size_t)nrows;
    c->cols = malloc(nn * sizeof *c->cols);
    c->vals = malloc(nn * sizeof *c->vals);
    c->row_ids = malloc((nr ? nr : 1) * sizeof *c->row_ids);
    c->row_ptr = malloc((nr + 1) * sizeof *c->row_ptr);
    if (!c->cols || !c->vals || !c->row_ids || !c->row_ptr)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "%s: out of memory", ps->path);
    int64_t r = -1;
    c->row_ptr[0] = 0;
    for (int64_t i = 0; i < m; i++) {
        if (i == 0 || e[i].row != e[i - 1].row) {
            if (r >= 0)
                c->row_ptr[r + 1] = i;
            c->row_ids[++r] = e[i].row;
        }
        c->cols[i] = e[i].col;
        c->vals[i] = e[i].val;
    }
    c->row_ptr[nrows] = m;
    c->nrows_nz = nrows;
    c->width = 0;
    for (int64_t k = 0; k < nrows; k++)
        if (c->row_ptr[k + 1] - c->row_ptr[k] > c->width)
            c->width = c->row_ptr[k + 1] - c->row_ptr[k];
    return 0;
}

/* ---- the reader -------------------------------------------------------------------------- */

static void mtx_close(void *ctx)
{
    struct mtx_ctx *c = ctx;
    if (!c)
        return;
    free(c->row_ids);
    free(c->row_ptr);
    free(c->cols);
    free(c->vals);
    free(c);
}

static int mtx_parse_text(struct mtx_parse *ps)
{
    if (memchr(ps->text, '\0', ps->len)) {
        const char *nul = memchr(ps->text, '\0', ps->len);
        int64_t line = 1;
        for (const char *p = ps->text; p < nul; p++)
            line += *p == '\n';
        return weft_error_set(WEFT_ERR_IO, "%s:%lld: NUL byte in a text file; expected Matrix "
                                           "Market text",
                              ps->path, (long long)line);
    }
    int rc = parse_header(ps);
    if (rc == 0)
        rc = parse_size_line(ps);
    if (rc == 0)
        rc = parse_entries(ps);
    return rc;
}

static int mtx_open(const weft_options *o, struct weft_dataset_info *info,
                    void **out)
{
    char path[IO_PATH_MAX];
    int rc = io_config_path(o, "path", true, "the path of a Matrix Market (.mtx) file",
                            path, sizeof path);
    if (rc < 0)
        return rc;
    struct io_text text;
    if ((rc = io_text_open(&text, path)) < 0)
        return rc;
    struct mtx_parse ps = {.path = path, .text = text.data, .len = text.len};
    struct mtx_ctx *c = calloc(1, sizeof *c);
    if (!c)
        rc = weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    if (rc == 0)
        rc = mtx_parse_text(&ps);
    io_text_close(&text);
    if (rc == 0)
        rc = build_rows(&ps, c);
    free(ps.entries);
    if (rc < 0) {
        mtx_close(c);
        return rc;
    }
    info->length = ps.rows;
    info->nfields = 2;
    struct weft_dataset_field *f = &info->fields[0];
    snprintf(f->name, sizeof f->name, "indices");
    f->dtype = WEFT_I64;
    f->ndim = 1;
    f->shape[0] = c->width;
    f->num_classes = ps.cols; /* the value range of the indices */
    f = &info->fields[1];
    snprintf(f->name, sizeof f->name, "values");
    f->dtype = WEFT_F32;
    f->ndim = 1;
    f->shape[0] = c->width;
    *out = c;
    return 0;
}

/* The position of row in c->row_ids, or -1 when the row is empty. */
static int64_t find_row(const struct mtx_ctx *c, int64_t row)
{
    int64_t lo = 0, hi = c->nrows_nz;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (c->row_ids[mid] < row)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < c->nrows_nz && c->row_ids[lo] == row ? lo : -1;
}

static int mtx_read(void *ctx, int64_t n, const int64_t *indices, void *const *buffers)
{
    const struct mtx_ctx *c = ctx;
    int64_t *cols = buffers[0];
    float *vals = buffers[1];
    for (int64_t k = 0; k < n; k++) {
        int64_t r = find_row(c, indices[k]);
        int64_t begin = r >= 0 ? c->row_ptr[r] : 0;
        int64_t nnz = r >= 0 ? c->row_ptr[r + 1] - begin : 0;
        io_ell_row(c->cols + begin, c->vals + begin, nnz, c->width, cols + k * c->width,
                   vals + k * c->width);
    }
    return 0;
}

const struct weft_dataset_reader io_mtx_reader = {
    .base = WEFT_VTABLE(WEFT_KIND_READER, "mtx", struct weft_dataset_reader),
    .description = "Matrix Market coordinate files (raw or gzip'd): one sample per row, as "
                   "padded indices and values",
    .open = mtx_open,
    .read = mtx_read,
    .close = mtx_close,
};
