/* plugins/sparse/print.c: the repr of sparse tensors, PyTorch's _str_intern for sparse
 * layouts (torch/_tensor_str.py):
 *
 *   tensor(indices=tensor([[0, 1],
 *                          [2, 0]]),
 *          values=tensor([3., 4.]),
 *          size=(2, 3), nnz=2, layout=torch.sparse_coo)
 *
 * Each component is printed by the core (weft_tensor_repr, which owns the number
 * formatting) and laid out again at the component's own indent, as PyTorch's
 * _tensor_str(component, indent) does: the elements and their common width stay, the
 * line breaks move (a row holds (80 - indent) / (width + 2) elements). */
#define _POSIX_C_SOURCE 200809L /* open_memstream */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft.h>

#include "sparse_impl.h"

#define LINEWIDTH 80

/* ---- the output: a memory stream ---------------------------------------------------- */

struct text {
    FILE *f; /* open_memstream's, over buf/len */
    char *buf;
    size_t len;
    bool failed;
};

static bool text_open(struct text *t)
{
    *t = (struct text){0};
    t->f = open_memstream(&t->buf, &t->len);
    t->failed = t->f == NULL;
    return !t->failed;
}

/* Ends the stream: the text, or NULL (freed) when anything failed. */
static char *text_close(struct text *t)
{
    if (t->f && (ferror(t->f) || fclose(t->f) != 0))
        t->failed = true;
    t->f = NULL;
    if (t->failed) {
        free(t->buf);
        t->buf = NULL;
    }
    return t->buf;
}

static void put(struct text *t, const char *s, size_t n)
{
    if (!t->failed && fwrite(s, 1, n, t->f) != n)
        t->failed = true;
}

static void puts_(struct text *t, const char *s)
{
    put(t, s, strlen(s));
}

static void spaces(struct text *t, int n)
{
    if (!t->failed && n > 0 && fprintf(t->f, "%*s", n, "") < 0)
        t->failed = true;
}

static void printf_(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void printf_(struct text *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (!t->failed && vfprintf(t->f, fmt, ap) < 0)
        t->failed = true;
    va_end(ap);
}

/* Python's str(tuple(shape)): "(2, 3)", "(5,)", "()". */
static void put_tuple(struct text *t, int ndim, const int64_t *shape)
{
    puts_(t, "(");
    for (int d = 0; d < ndim; d++)
        printf_(t, d ? ", %lld" : "%lld", (long long)shape[d]);
    puts_(t, ndim == 1 ? ",)" : ")");
}

/* ---- re-laying out a component's elements ------------------------------------------------- */

/* The elements of a 1-D or 2-D repr, as token offsets into the repr; "..." tokens stand
 * for the summarised middle of a row (inside a row) or of the rows (between rows). */
struct token {
    const char *s;
    int len;
    int row; /* -1: a row-level "..." */
};

struct tokens {
    struct token *v;
    size_t n, cap;
    int width; /* the widest element */
};

static int add_token(struct tokens *tk, const char *s, int len, int row)
{
    if (tk->n == tk->cap) {
        size_t cap = tk->cap ? 2 * tk->cap : 64;
        struct token *p = realloc(tk->v, cap * sizeof *p);
        if (!p)
            return -1;
        tk->v = p;
        tk->cap = cap;
    }
    tk->v[tk->n++] = (struct token){s, len, row};
    bool ellipsis = len == 3 && memcmp(s, "...", 3) == 0;
    if (!ellipsis && len > tk->width)
        tk->width = len;
    return 0;
}

/* Splits the bracketed part of `repr` (the core's "tensor([...], ...)"). */
static int tokenize(const char *repr, int ndim, struct tokens *tk)
{
    const char *p = strchr(repr, '[');
    int depth = 0, row = -1;
    for (; p && *p; p++) {
        if (*p == '[') {
            depth++;
            if (depth == ndim)
                row++;
            continue;
        }
        if (*p == ']') {
            if (--depth == 0)
                break;
            continue;
        }
        if (*p == ',' || *p == ' ' || *p == '\n')
            continue;
        const char *start = p;
        while (p[1] && p[1] != ',' && p[1] != ' ' && p[1] != '\n' && p[1] != ']')
            p++;
        if (add_token(tk, start, (int)(p - start + 1), depth == ndim ? row : -1) != 0)
            return -1;
    }
    return 0;
}

/* _vector_str: one row's elements from tokens [from, to). */
static void put_vector(struct text *out, const struct tokens *tk, size_t from, size_t to,
                       int indent)
{
    int per_line = (LINEWIDTH - indent) / (tk->width + 2);
    if (per_line < 1)
        per_line = 1;
    puts_(out, "[");
    for (size_t k = from; k < to; k++) {
        size_t i = k - from;
        if (i > 0) {
            puts_(out, i % (size_t)per_line == 0 ? "," : ", ");
            if (i % (size_t)per_line == 0) {
                puts_(out, "\n");
                spaces(out, indent + 1);
            }
        }
        const struct token *t = &tk->v[k];
        if (t->len == 3 && memcmp(t->s, "...", 3) == 0) {
            puts_(out, " ...");
            continue;
        }
        spaces(out, tk->width - t->len);
        put(out, t->s, (size_t)t->len);
    }
    puts_(out, "]");
}

/* _tensor_str(x, indent) for a non-empty 1-D or 2-D component. */
static void put_elements(struct text *out, const struct tokens *tk, int ndim, int indent)
{
    if (ndim == 1) {
        put_vector(out, tk, 0, tk->n, indent);
        return;
    }
    puts_(out, "[");
    size_t k = 0;
    bool first = true;
    while (k < tk->n) {
        if (!first) {
            puts_(out, ",\n");
            spaces(out, indent + 1);
        }
        first = false;
        if (tk->v[k].row < 0) {
            puts_(out, "...");
            k++;
            continue;
        }
        size_t end = k;
        while (end < tk->n && tk->v[end].row == tk->v[k].row)
            end++;
        put_vector(out, tk, k, end, indent + 1);
        k = end;
    }
    puts_(out, "]");
}

/* "<prefix>tensor(<elements>[, size=(...)])" for one component at the given indent. */
static int put_component(struct text *out, const char *prefix, const weft_tensor *x, int indent)
{
    puts_(out, prefix);
    if (weft_tensor_numel(x) == 0) {
        puts_(out, "[], size=");
        put_tuple(out, x->ndim, x->shape);
        puts_(out, ")");
        return 0;
    }
    char *repr = weft_tensor_repr(x);
    if (!repr)
        return weft_error_code();
    struct tokens tk = {0};
    int rc = tokenize(repr, x->ndim, &tk);
    if (rc == 0)
        put_elements(out, &tk, x->ndim, indent);
    else
        out->failed = true;
    puts_(out, ")");
    free(tk.v);
    free(repr);
    return 0;
}

/* ---- the repr ------------------------------------------------------------------------------ */

/* _add_suffixes: ", suffix" while the line stays within 80 columns; force_newline puts
 * the first one on a new line (PyTorch does so for COO). */
static void add_suffixes(struct text *out, char suffixes[][96], int n, int indent, bool force)
{
    if (fflush(out->f) != 0) { /* brings buf and len up to date */
        out->failed = true;
        return;
    }
    const char *nl = strrchr(out->buf, '\n');
    /* Python's len(s) - s.rfind('\n') + 1, rfind giving -1 without a newline. */
    size_t last = nl ? out->len - (size_t)(nl - out->buf) + 1 : out->len + 2;
    for (int i = 0; i < n; i++) {
        size_t len = strlen(suffixes[i]);
        if (force || last + len + 2 > LINEWIDTH) {
            puts_(out, ",\n");
            spaces(out, indent);
            last = (size_t)indent + len;
            force = false;
        } else {
            puts_(out, ", ");
            last += len + 2;
        }
        puts_(out, suffixes[i]);
    }
    puts_(out, ")");
}

char *sparse_repr(const weft_tensor *t)
{
    struct sparse_data *s = sparse_data_of(t, -1, "repr()");
    if (!s)
        return NULL;
    const int indent = 7; /* "tensor(" */
    bool coo = t->layout == sparse_coo_layout;
    char suffixes[8][96];
    int n = 0;
    char dev[32];
    if (t->device.type != WEFT_DEVICE_CPU)
        snprintf(suffixes[n++], sizeof suffixes[0], "device='%s'",
                 weft_device_str(t->device, dev, sizeof dev));
    struct text size;
    text_open(&size);
    puts_(&size, "size=");
    put_tuple(&size, t->ndim, t->shape);
    char *size_text = text_close(&size);
    snprintf(suffixes[n++], sizeof suffixes[0], "%s", size_text ? size_text : "size=?");
    free(size_text);
    snprintf(suffixes[n++], sizeof suffixes[0], "nnz=%lld", (long long)sparse_nnz(s));
    if (t->dtype != weft_default_dtype() && t->dtype != WEFT_I64 && t->dtype != WEFT_BOOL)
        snprintf(suffixes[n++], sizeof suffixes[0], "dtype=torch.%s", weft_dtype_name(t->dtype));
    snprintf(suffixes[n++], sizeof suffixes[0], "layout=torch.%s", weft_layout_name(t->layout));
    const char *grad_fn = weft_grad_fn_name(t);
    if (grad_fn)
        snprintf(suffixes[n++], sizeof suffixes[0], "grad_fn=<%s>", grad_fn);
    else if (weft_requires_grad(t))
        snprintf(suffixes[n++], sizeof suffixes[0], "requires_grad=True");

    struct text out;
    int rc = text_open(&out) ? 0 : weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory "
                                                  "printing a sparse tensor");
    puts_(&out, "tensor(");
    if (coo) {
        rc = put_component(&out, "indices=tensor(", s->indices, indent + 15);
        puts_(&out, ",\n");
        spaces(&out, indent);
    } else {
        rc = put_component(&out, "crow_indices=tensor(", s->crow, indent + 20);
        puts_(&out, ",\n");
        spaces(&out, indent);
        if (rc == 0)
            rc = put_component(&out, "col_indices=tensor(", s->col, indent + 19);
        puts_(&out, ",\n");
        spaces(&out, indent);
    }
    if (rc == 0)
        rc = put_component(&out, "values=tensor(", s->values, indent + 14);
    if (rc == 0 && !out.failed)
        add_suffixes(&out, suffixes, n, indent, coo);
    if (rc != 0)
        out.failed = true;
    char *text = text_close(&out);
    if (!text && rc == 0)
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory printing a sparse tensor");
    return text;
}
