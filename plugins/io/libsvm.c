/* plugins/io/libsvm.c: the `libsvm` reader: libsvm/svmlight sparse text, one sample per
 * line, for classification.
 *
 * Format: "label index:value index:value ... # comment". Indices are 1-based unless
 * zero_based = true, and must increase strictly within a line (as sklearn's
 * load_svmlight_file requires); an index not listed is 0. Blank lines and lines that
 * hold only a comment are skipped. Query ids ("qid:3") are refused by name.
 *
 * Labels are integers (a number with a zero fraction, "2.0", counts as one). Class
 * indices 0, 1, 2, ... are used as they are. The svmlight binary convention is
 * recognised: a file whose labels are -1 and +1 maps -1 to class 0 and +1 to class 1
 * (+1 is class 1 in both readings, so a training file in one convention and a test file
 * holding only +1 agree). A file that mixes -1 with 0 or with labels above 1 is an
 * error. num_classes defaults to 2 for -1/+1 files and to the largest label + 1
 * otherwise; when given, every label must lie below it.
 *
 * Fields, each sample padded to the longest line ("ELL" layout): "indices" int64
 * [width], the line's 0-based feature indices (increasing) then -1, with num_classes =
 * features (their value range); "values" float32 [width], the values then 0; "label"
 * int64 [].
 *
 * The file is parsed in one pass (mapped when plain, decompressed whole when gzip'd)
 * into flat arrays that grow geometrically: no allocation per line, and nothing sized by
 * what the text claims. Keys: path (required), features (default: what the indices
 * need, i.e. the largest 0-based index + 1; give it so a training and a test file agree
 * and out-of-range indices are caught here), zero_based (false), num_classes.
 */
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io.h"

struct libsvm_ctx {
    int64_t *row_ptr; /* [rows + 1] into cols/vals */
    int64_t *cols;
    float *vals;
    int64_t *labels;
    int64_t width; /* the longest line's number of features */
};

/* Which label convention the lines seen so far fix. */
enum label_convention { LABELS_OPEN, LABELS_INDEX, LABELS_PLUS_MINUS };

struct libsvm_parse {
    const char *path;
    int64_t base;        /* 1, or 0 with zero_based */
    int64_t features;    /* 0: inferred */
    int64_t num_classes; /* 0: inferred */
    int64_t line_no;
    const char *line;
    int64_t rows, cap_rows;
    int64_t *row_ptr, *labels;
    int64_t nnz, cap_nnz;
    int64_t *cols;
    float *vals;
    int64_t max_col; /* -1 before any feature */
    int64_t max_label;
    enum label_convention convention;
    int64_t convention_line, convention_label; /* the line that fixed it */
};

/* "path:line:column: message", the column being that of `at` in the current line. */
static int parse_error(const struct libsvm_parse *ps, const char *at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int parse_error(const struct libsvm_parse *ps, const char *at, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return weft_error_set(WEFT_ERR_IO, "%s:%lld:%lld: %s", ps->path, (long long)ps->line_no,
                          (long long)(at - ps->line) + 1, msg);
}

static int oom(const struct libsvm_parse *ps)
{
    return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "%s: out of memory", ps->path);
}

/* ---- growth ------------------------------------------------------------------------ */

static int grow_rows(struct libsvm_parse *ps)
{
    int64_t cap = ps->cap_rows ? ps->cap_rows * 2 : 1024;
    int64_t *rp = realloc(ps->row_ptr, (size_t)(cap + 1) * sizeof *rp);
    if (rp)
        ps->row_ptr = rp;
    int64_t *lb = rp ? realloc(ps->labels, (size_t)cap * sizeof *lb) : NULL;
    if (lb)
        ps->labels = lb;
    if (!rp || !lb)
        return oom(ps);
    ps->cap_rows = cap;
    return 0;
}

static int grow_nnz(struct libsvm_parse *ps)
{
    int64_t cap = ps->cap_nnz * 2 + 1024;
    int64_t *c = realloc(ps->cols, (size_t)cap * sizeof *c);
    if (c)
        ps->cols = c;
    float *v = c ? realloc(ps->vals, (size_t)cap * sizeof *v) : NULL;
    if (v)
        ps->vals = v;
    if (!c || !v)
        return oom(ps);
    ps->cap_nnz = cap;
    return 0;
}

/* ---- labels ------------------------------------------------------------------------- */

/* The label token as an integer: "3", "-1", "+1", "2.0". */
static int parse_label_value(const struct libsvm_parse *ps, const char *tok, size_t len,
                             int64_t *out)
{
    char shown[64];
    if (memchr(tok, ':', len))
        return parse_error(ps, tok, "expected a label before the features, found '%s' (every "
                                    "line starts with its label)",
                           io_text_show(tok, len, shown, sizeof shown));
    if (io_parse_i64(tok, len, out))
        return 0;
    double v;
    if (!io_parse_f64(tok, len, &v))
        return parse_error(ps, tok, "expected a class label (an integer), found '%s'",
                           io_text_show(tok, len, shown, sizeof shown));
    if (v != floor(v) || fabs(v) > 9e15)
        return parse_error(ps, tok, "label %s is not an integer: expected a class label (this "
                                    "reader does classification)",
                           io_text_show(tok, len, shown, sizeof shown));
    *out = (int64_t)v;
    return 0;
}

/* Checks label v against the convention the earlier lines fixed; returns the class. */
static int64_t label_class(struct libsvm_parse *ps, const char *tok, int64_t v)
{
    if (v < -1)
        return parse_error(ps, tok, "label %lld: expected a class index >= 0, or the binary "
                                    "labels -1 and +1",
                           (long long)v);
    enum label_convention want = v == -1 ? LABELS_PLUS_MINUS : v == 1 ? LABELS_OPEN : LABELS_INDEX;
    if (want != LABELS_OPEN) {
        if (ps->convention != LABELS_OPEN && ps->convention != want)
            return parse_error(ps, tok, "label %lld after label %lld on line %lld: expected class "
                                        "indices 0, 1, 2, ... or the binary labels -1 and +1, not "
                                        "a mix",
                               (long long)v, (long long)ps->convention_label,
                               (long long)ps->convention_line);
        if (ps->convention == LABELS_OPEN) {
            ps->convention = want;
            ps->convention_line = ps->line_no;
            ps->convention_label = v;
        }
    }
    int64_t cls = v < 0 ? 0 : v;
    /* Inferred, num_classes is the largest label + 1: it must fit where a given one does
     * (9223372036854775807 + 1 overflowed). */
    if (ps->num_classes == 0 && cls >= INT32_MAX)
        return parse_error(ps, tok, "label %lld is too large: expected a class index below "
                                    "%d",
                           (long long)v, INT32_MAX);
    if (ps->num_classes > 0 && cls >= ps->num_classes)
        return parse_error(ps, tok, "label %lld is out of range: expected 0 <= label < %lld "
                                    "(num_classes)",
                           (long long)v, (long long)ps->num_classes);
    return cls;
}

/* ---- features ---------------------------------------------------------------------- */

/* index:value's index; *colon is set to the ':' after it. Short plain digit strings take
 * a fast path; everything else goes through the checks that name what is wrong. */
static int parse_index(const struct libsvm_parse *ps, const char *tok, size_t len,
                       const char **colon, int64_t *index)
{
    char shown[64];
    const char *p = tok, *end = tok + len;
    int64_t v = 0;
    while (p < end && p - tok < 18 && (unsigned)(*p - '0') <= 9)
        v = v * 10 + (*p++ - '0');
    if (p > tok && p < end && *p == ':') {
        *colon = p;
        *index = v;
        return 0;
    }
    *colon = memchr(tok, ':', len);
    if (!*colon)
        return parse_error(ps, tok, "expected 'index:value', found '%s'",
                           io_text_show(tok, len, shown, sizeof shown));
    size_t ilen = (size_t)(*colon - tok);
    if (ilen == 3 && memcmp(tok, "qid", 3) == 0)
        return parse_error(ps, tok, "query ids ('%s') are not supported: expected 'index:value'",
                           io_text_show(tok, len, shown, sizeof shown));
    if (ilen == 0 || tok[0] == '+' || tok[0] == '-' || !io_parse_i64(tok, ilen, index))
        return parse_error(ps, tok, "expected a feature index (an integer >= %lld) before ':', "
                                    "found '%s'",
                           (long long)ps->base, io_text_show(tok, ilen, shown, sizeof shown));
    return 0;
}

static int parse_feature(struct libsvm_parse *ps, const char *tok, size_t len, int64_t prev,
                         int64_t *col)
{
    char shown[64];
    const char *colon;
    int64_t index;
    int rc = parse_index(ps, tok, len, &colon, &index);
    if (rc < 0)
        return rc;
    if (index < ps->base)
        return parse_error(ps, tok, "feature index 0 in a file read as 1-based: expected an index "
                                    ">= 1 (set zero_based = true for 0-based files)");
    int64_t c = index - ps->base;
    if (ps->features > 0 && c >= ps->features)
        return parse_error(ps, tok, "feature index %lld is out of range: expected at most %lld "
                                    "(features = %lld%s)",
                           (long long)index, (long long)(ps->features - 1 + ps->base),
                           (long long)ps->features, ps->base ? ", 1-based" : ", 0-based");
    if (c <= prev)
        return parse_error(ps, tok, "feature index %lld after index %lld: indices must increase "
                                    "within a line",
                           (long long)index, (long long)(prev + ps->base));
    const char *vtok = colon + 1;
    size_t vlen = len - (size_t)(vtok - tok);
    double v;
    if (!io_parse_f64(vtok, vlen, &v))
        return parse_error(ps, vtok, "feature %lld: expected a value (a finite number), found '%s'",
                           (long long)index, io_text_show(vtok, vlen, shown, sizeof shown));
    if (fabs(v) > FLT_MAX)
        return parse_error(ps, vtok, "feature %lld: value %s is out of range for float32",
                           (long long)index, io_text_show(vtok, vlen, shown, sizeof shown));
    if (ps->nnz == ps->cap_nnz && (rc = grow_nnz(ps)) < 0)
        return rc;
    ps->cols[ps->nnz] = c;
    ps->vals[ps->nnz] = (float)v;
    ps->nnz++;
    *col = c;
    return 0;
}

/* ---- lines ------------------------------------------------------------------------- */

static bool is_blank(char c)
{
    return c == ' ' || c == '\t';
}

/* One line without its end of line and comment: [p, end). */
static int parse_line(struct libsvm_parse *ps, const char *p, const char *end)
{
    while (p < end && is_blank(*p))
        p++;
    if (p == end)
        return 0; /* blank, or only a comment */
    if (ps->rows == ps->cap_rows) {
        int rc = grow_rows(ps);
        if (rc < 0)
            return rc;
    }
    const char *tok = p;
    while (p < end && !is_blank(*p))
        p++;
    int64_t v;
    int rc = parse_label_value(ps, tok, (size_t)(p - tok), &v);
    if (rc < 0)
        return rc;
    int64_t cls = label_class(ps, tok, v);
    if (cls < 0)
        return (int)cls;
    if (cls > ps->max_label)
        ps->max_label = cls;
    int64_t prev = -1;
    for (;;) {
        while (p < end && is_blank(*p))
            p++;
        if (p == end)
            break;
        tok = p;
        while (p < end && !is_blank(*p))
            p++;
        if ((rc = parse_feature(ps, tok, (size_t)(p - tok), prev, &prev)) < 0)
            return rc;
    }
    if (prev > ps->max_col)
        ps->max_col = prev;
    ps->labels[ps->rows] = cls;
    ps->rows++;
    ps->row_ptr[ps->rows] = ps->nnz;
    return 0;
}

static int parse_text(struct libsvm_parse *ps, const char *text, size_t len)
{
    const char *nul = memchr(text, '\0', len);
    if (nul) {
        int64_t line = 1;
        for (const char *p = text; p < nul; p++)
            line += *p == '\n';
        return weft_error_set(WEFT_ERR_IO, "%s:%lld: NUL byte in a text file; expected libsvm "
                                           "text",
                              ps->path, (long long)line);
    }
    /* Typical lines hold "index:value " pairs of about a dozen bytes. */
    ps->cap_nnz = (int64_t)(len / 12);
    ps->cols = malloc((size_t)(ps->cap_nnz + 1) * sizeof *ps->cols);
    ps->vals = malloc((size_t)(ps->cap_nnz + 1) * sizeof *ps->vals);
    if (!ps->cols || !ps->vals || grow_rows(ps) < 0)
        return oom(ps);
    ps->row_ptr[0] = 0;
    const char *p = text, *end = text + len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        if (n && p[n - 1] == '\r')
            n--;
        const char *hash = memchr(p, '#', n);
        ps->line_no++;
        ps->line = p;
        int rc = parse_line(ps, p, hash ? hash : p + n);
        if (rc < 0)
            return rc;
        p = nl ? nl + 1 : end;
    }
    if (ps->rows == 0)
        return weft_error_set(WEFT_ERR_IO, "%s: no samples: the file is empty or holds only "
                                           "comments and blank lines; expected lines like "
                                           "'1 3:0.5 7:1.25'",
                              ps->path);
    return 0;
}

/* ---- the reader ------------------------------------------------------------------- */

static void free_parse(struct libsvm_parse *ps)
{
    free(ps->row_ptr);
    free(ps->labels);
    free(ps->cols);
    free(ps->vals);
}

static void libsvm_close(void *ctx)
{
    struct libsvm_ctx *c = ctx;
    if (!c)
        return;
    free(c->row_ptr);
    free(c->labels);
    free(c->cols);
    free(c->vals);
    free(c);
}

static int read_keys(const weft_options *o, struct libsvm_parse *ps,
                     char *path, size_t size)
{
    bool zero_based;
    int rc = io_config_path(o, "path", true, "the path of a libsvm/svmlight file",
                            path, size);
    if (rc < 0 || (rc = weft_options_bool(o, "zero_based", false, &zero_based)) < 0 ||
        (rc = weft_options_int_range(o, "features", 0, 1, INT64_MAX, &ps->features)) < 0 ||
        (rc = weft_options_int_range(o, "num_classes", 0, 1, INT32_MAX,
                                  &ps->num_classes)) < 0)
        return rc;
    ps->base = zero_based ? 0 : 1;
    return 0;
}

static int libsvm_open(const weft_options *o,
                       struct weft_dataset_info *info, void **out)
{
    char path[IO_PATH_MAX];
    struct libsvm_parse ps = {.path = path, .max_col = -1, .max_label = -1};
    int rc = read_keys(o, &ps, path, sizeof path);
    if (rc < 0)
        return rc;
    struct io_text text;
    if ((rc = io_text_open(&text, path)) < 0)
        return rc;
    rc = parse_text(&ps, text.data, text.len);
    io_text_close(&text);
    struct libsvm_ctx *c = NULL;
    if (rc == 0 && !(c = calloc(1, sizeof *c)))
        rc = oom(&ps);
    if (rc < 0) {
        free_parse(&ps);
        return rc;
    }
    for (int64_t r = 0; r < ps.rows; r++)
        if (ps.row_ptr[r + 1] - ps.row_ptr[r] > c->width)
            c->width = ps.row_ptr[r + 1] - ps.row_ptr[r];
    /* Give back what the geometric growth over-reserved (shrinking cannot fail for
     * long; keep the old block if it does). */
    size_t keep = (size_t)(ps.nnz ? ps.nnz : 1);
    int64_t *cols = realloc(ps.cols, keep * sizeof *cols);
    float *vals = realloc(ps.vals, keep * sizeof *vals);
    c->cols = cols ? cols : ps.cols;
    c->vals = vals ? vals : ps.vals;
    c->row_ptr = ps.row_ptr;
    c->labels = ps.labels;
    int64_t features = ps.features ? ps.features : ps.max_col + 1;
    int64_t classes = ps.num_classes                         ? ps.num_classes
                      : ps.convention == LABELS_PLUS_MINUS ? 2
                                                           : ps.max_label + 1;
    info->length = ps.rows;
    info->nfields = 3;
    struct weft_dataset_field *f = &info->fields[0];
    snprintf(f->name, sizeof f->name, "indices");
    f->dtype = WEFT_I64;
    f->ndim = 1;
    f->shape[0] = c->width;
    f->num_classes = features; /* the value range of the indices */
    f = &info->fields[1];
    snprintf(f->name, sizeof f->name, "values");
    f->dtype = WEFT_F32;
    f->ndim = 1;
    f->shape[0] = c->width;
    f = &info->fields[2];
    snprintf(f->name, sizeof f->name, "label");
    f->dtype = WEFT_I64;
    f->num_classes = classes;
    *out = c;
    return 0;
}

static int libsvm_read(void *ctx, int64_t n, const int64_t *indices, void *const *buffers)
{
    const struct libsvm_ctx *c = ctx;
    int64_t *cols = buffers[0];
    float *vals = buffers[1];
    int64_t *labels = buffers[2];
    for (int64_t k = 0; k < n; k++) {
        int64_t r = indices[k], begin = c->row_ptr[r];
        io_ell_row(c->cols + begin, c->vals + begin, c->row_ptr[r + 1] - begin, c->width,
                   cols + k * c->width, vals + k * c->width);
        labels[k] = c->labels[r];
    }
    return 0;
}

const struct weft_dataset_reader io_libsvm_reader = {
    .base = WEFT_VTABLE(WEFT_KIND_READER, "libsvm", struct weft_dataset_reader),
    .description = "libsvm/svmlight sparse text (raw or gzip'd): padded indices and values, "
                   "integer labels (-1/+1 read as 0/1)",
    .open = libsvm_open,
    .read = libsvm_read,
    .close = libsvm_close,
};
