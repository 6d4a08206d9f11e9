/* core/print.c: PyTorch's tensor repr (torch/_tensor_str.py), character for character:
 * the _Formatter's int/fixed/scientific modes and common width, 80-column line filling,
 * summarisation past 1000 elements with 3 edge items per dim, and the dtype/device/size
 * suffixes. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "weft/layout.h"

#define PRECISION 4
#define THRESHOLD 1000
#define EDGEITEMS 3
#define LINEWIDTH 80
#define SUFFIX_MAX 256

/* ---- a growable string -------------------------------------------------------------- */

struct text {
    char *buf;
    size_t len, cap;
    bool failed;
};

static void text_append(struct text *t, const char *s, size_t n)
{
    if (t->failed)
        return;
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 256;
        while (cap < t->len + n + 1)
            cap *= 2;
        char *p = realloc(t->buf, cap);
        if (!p) {
            t->failed = true;
            return;
        }
        t->buf = p;
        t->cap = cap;
    }
    memcpy(t->buf + t->len, s, n);
    t->len += n;
    t->buf[t->len] = '\0';
}

static void text_puts(struct text *t, const char *s)
{
    text_append(t, s, strlen(s));
}

static void text_spaces(struct text *t, int n)
{
    for (int i = 0; i < n; i++)
        text_append(t, " ", 1);
}

/* ---- values on the host --------------------------------------------------------------
 * Floating tensors are read as float64 (exact for every floating dtype), the others as
 * int64 (exact, unlike float64, for large int64 values). */
struct values {
    bool floating, boolean;
    double *f;
    int64_t *i;
    int64_t n;
};

/* ---- the formatter (_Formatter) ------------------------------------------------------ */

struct formatter {
    bool floating, boolean;
    bool int_mode, sci_mode;
    int max_width;
};

/* Python's float formatting of non-finite values: "nan", "inf", "-inf". */
static bool format_nonfinite(char *buf, size_t size, double v)
{
    if (isnan(v)) {
        snprintf(buf, size, "nan");
        return true;
    }
    if (isinf(v)) {
        snprintf(buf, size, v > 0 ? "inf" : "-inf");
        return true;
    }
    return false;
}

static void formatter_init(struct formatter *f, const struct values *v)
{
    *f = (struct formatter){.floating = v->floating, .boolean = v->boolean, .int_mode = true,
                            .max_width = 1};
    char buf[64];
    if (!v->floating) {
        for (int64_t k = 0; k < v->n; k++) {
            int len = v->boolean ? (v->i[k] ? 4 : 5)
                                 : snprintf(buf, sizeof buf, "%" PRId64, v->i[k]);
            if (len > f->max_width)
                f->max_width = len;
        }
        return;
    }
    double lo = INFINITY, hi = 0;
    bool any = false;
    for (int64_t k = 0; k < v->n; k++) {
        double x = v->f[k];
        if (!isfinite(x) || x == 0)
            continue;
        any = true;
        lo = fmin(lo, fabs(x));
        hi = fmax(hi, fabs(x));
        if (x != ceil(x))
            f->int_mode = false;
    }
    if (!any)
        return;
    bool wide = hi / lo > 1000.0 || hi > 1.0e8;
    f->sci_mode = f->int_mode ? wide : wide || lo < 1.0e-4;
    for (int64_t k = 0; k < v->n; k++) {
        double x = v->f[k];
        if (!isfinite(x) || x == 0)
            continue;
        int len;
        if (f->sci_mode)
            len = snprintf(buf, sizeof buf, "%.*e", PRECISION, x);
        else if (f->int_mode)
            len = snprintf(buf, sizeof buf, "%.0f", x) + 1; /* room for the "." */
        else
            len = snprintf(buf, sizeof buf, "%.*f", PRECISION, x);
        if (len > f->max_width)
            f->max_width = len;
    }
}

/* One element, right-aligned to the common width. */
static void format_value(const struct formatter *f, const struct values *v, int64_t k,
                         struct text *out)
{
    char buf[64];
    if (!f->floating) {
        if (f->boolean)
            snprintf(buf, sizeof buf, "%s", v->i[k] ? "True" : "False");
        else
            snprintf(buf, sizeof buf, "%" PRId64, v->i[k]);
    } else {
        double x = v->f[k];
        if (format_nonfinite(buf, sizeof buf, x))
            ;
        else if (f->sci_mode)
            snprintf(buf, sizeof buf, "%.*e", PRECISION, x);
        else if (f->int_mode)
            snprintf(buf, sizeof buf, "%.0f.", x);
        else
            snprintf(buf, sizeof buf, "%.*f", PRECISION, x);
    }
    int len = (int)strlen(buf);
    text_spaces(out, f->max_width - len);
    text_puts(out, buf);
}

/* ---- layout (_tensor_str_with_formatter / _vector_str) ------------------------------------
 * `shape` is the original shape; the values hold the summarised data, in which a dim
 * larger than 2 * EDGEITEMS keeps only its edges (when summarising). */
struct layout {
    const struct values *v;
    const struct formatter *f;
    const int64_t *shape;
    int ndim;
    bool summarize;
};

static bool dim_cut(const struct layout *l, int d)
{
    return l->summarize && l->shape[d] > 2 * EDGEITEMS;
}

/* Number of stored values per index of dim d (product of stored sizes after d). */
static int64_t stored_block(const struct layout *l, int d)
{
    int64_t n = 1;
    for (int i = d + 1; i < l->ndim; i++)
        n *= dim_cut(l, i) ? 2 * EDGEITEMS : l->shape[i];
    return n;
}

static void format_vector(const struct layout *l, int64_t base, int indent, struct text *out)
{
    int d = l->ndim - 1;
    int per_line = (LINEWIDTH - indent) / (l->f->max_width + 2);
    if (per_line < 1)
        per_line = 1;
    bool cut = dim_cut(l, d);
    int64_t count = cut ? 2 * EDGEITEMS + 1 : l->shape[d]; /* the "..." is an item too */
    text_puts(out, "[");
    for (int64_t k = 0; k < count; k++) {
        if (k > 0)
            text_puts(out, k % per_line == 0 ? "," : ", ");
        if (k > 0 && k % per_line == 0) {
            text_puts(out, "\n");
            text_spaces(out, indent + 1);
        }
        if (cut && k == EDGEITEMS) {
            text_puts(out, " ...");
            continue;
        }
        int64_t stored = cut && k > EDGEITEMS ? k - 1 : k;
        format_value(l->f, l->v, base + stored, out);
    }
    text_puts(out, "]");
}

static void format_dims(const struct layout *l, int d, int64_t base, int indent, struct text *out)
{
    if (d == l->ndim - 1) {
        format_vector(l, base, indent, out);
        return;
    }
    bool cut = dim_cut(l, d);
    int64_t count = cut ? 2 * EDGEITEMS + 1 : l->shape[d];
    int64_t block = stored_block(l, d);
    text_puts(out, "[");
    for (int64_t k = 0; k < count; k++) {
        if (k > 0) {
            text_puts(out, ",");
            for (int i = 0; i < l->ndim - d - 1; i++)
                text_puts(out, "\n");
            text_spaces(out, indent + 1);
        }
        if (cut && k == EDGEITEMS) {
            text_puts(out, "...");
            continue;
        }
        int64_t stored = cut && k > EDGEITEMS ? k - 1 : k;
        format_dims(l, d + 1, base + stored * block, indent + 1, out);
    }
    text_puts(out, "]");
}

/* ---- reading the (summarised) values ---------------------------------------------------- */

/* Copies t into host buffer `dst` of shape `cut_shape`: for each cut dim, the head and
 * the tail EDGEITEMS are copied as separate pieces (2^cuts pieces in all). */
static int read_summarised(weft_tensor *t, bool summarize, enum weft_dtype dtype, void *dst,
                           int64_t *stored_shape)
{
    int cut[WEFT_MAX_DIMS], ncut = 0;
    for (int d = 0; d < t->ndim; d++) {
        bool c = summarize && t->shape[d] > 2 * EDGEITEMS;
        stored_shape[d] = c ? 2 * EDGEITEMS : t->shape[d];
        if (c)
            cut[ncut++] = d;
    }
    int64_t numel = weft_shape_numel(t->ndim, stored_shape);
    struct weft_storage *s =
        weft_storage_wrap(WEFT_CPU, dst, (size_t)numel * weft_dtype_size(dtype), NULL, NULL);
    if (!s)
        return weft_error_code();
    /* A scope of our own owns host and the views; grad mode off: none is recorded. */
    weft_scope_push();
    bool prev = weft_no_grad_begin();
    weft_tensor *host = weft_tensor_from_storage(s, t->ndim, stored_shape, NULL, 0, dtype);
    weft_storage_release(s);
    int rc = host ? 0 : weft_error_code();
    for (int piece = 0; piece < (1 << ncut) && rc == 0; piece++) {
        weft_tensor *from = t, *to = host;
        for (int j = 0; j < ncut && from && to; j++) {
            bool tail = piece >> j & 1;
            int d = cut[j];
            from = weft_narrow(from, d, tail ? t->shape[d] - EDGEITEMS : 0, EDGEITEMS);
            to = weft_narrow(to, d, tail ? EDGEITEMS : 0, EDGEITEMS);
        }
        rc = from && to ? weft_copy_(to, from) : weft_error_code();
    }
    weft_grad_mode_restore(prev);
    weft_scope_pop();
    return rc;
}

static int read_values(weft_tensor *t, bool summarize, struct values *v, int64_t *stored_shape)
{
    v->floating = weft_dtype_is_floating(t->dtype);
    v->boolean = t->dtype == WEFT_BOOL;
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= summarize && t->shape[d] > 2 * EDGEITEMS ? 2 * EDGEITEMS : t->shape[d];
    v->n = n;
    void *buf = malloc((size_t)(n > 0 ? n : 1) * 8);
    if (!buf)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory printing a tensor");
    if (v->floating)
        v->f = buf;
    else
        v->i = buf;
    return read_summarised(t, summarize, v->floating ? WEFT_F64 : WEFT_I64, buf, stored_shape);
}

/* ---- the repr ------------------------------------------------------------------------- */

/* _add_suffixes: ", suffix" on the same line while it fits in 80 columns. */
static void add_suffixes(struct text *out, char suffixes[][SUFFIX_MAX], int n, int indent)
{
    const char *nl = out->buf ? strrchr(out->buf, '\n') : NULL;
    size_t last_line = out->len - (nl ? (size_t)(nl - out->buf) : 0) + 1;
    /* Python's len - rfind('\n') + 1, where rfind gives -1 when there is none. */
    if (!nl)
        last_line = out->len + 2;
    for (int i = 0; i < n; i++) {
        size_t len = strlen(suffixes[i]);
        if (last_line + len + 2 > LINEWIDTH) {
            text_puts(out, ",\n");
            text_spaces(out, indent);
            last_line = (size_t)indent + len;
        } else {
            text_puts(out, ", ");
            last_line += len + 2;
        }
        text_puts(out, suffixes[i]);
    }
    text_puts(out, ")");
}

static bool default_dtype_shown_implicitly(enum weft_dtype dt)
{
    return dt == weft_default_dtype() || dt == WEFT_I64 || dt == WEFT_BOOL;
}

char *weft_tensor_repr(const weft_tensor *t)
{
    if (!t)
        return NULL;
    if (t->layout != WEFT_LAYOUT_STRIDED)
        return weft_layout_repr(t);
    const char *prefix = "tensor(";
    int indent = (int)strlen(prefix);
    struct text out = {0};
    char suffixes[5][SUFFIX_MAX];
    int nsuffix = 0;
    char dev[32];
    if (t->device.type != WEFT_DEVICE_CPU)
        snprintf(suffixes[nsuffix++], SUFFIX_MAX, "device='%s'",
                 weft_device_str(t->device, dev, sizeof dev));
    text_puts(&out, prefix);
    int64_t numel = weft_tensor_numel(t);
    struct values v = {0};
    int rc = 0;
    if (numel == 0) {
        if (t->ndim != 1) {
            /* Python's tuple "(0, 3)" (never one dim here, so never "(0,)"). */
            int used = snprintf(suffixes[nsuffix], SUFFIX_MAX, "size=(");
            for (int d = 0; d < t->ndim; d++)
                used += snprintf(suffixes[nsuffix] + used, SUFFIX_MAX - (size_t)used,
                                 d ? ", %lld" : "%lld", (long long)t->shape[d]);
            snprintf(suffixes[nsuffix] + used, SUFFIX_MAX - (size_t)used, ")");
            nsuffix++;
        }
        if (t->dtype != weft_default_dtype())
            snprintf(suffixes[nsuffix++], SUFFIX_MAX, "dtype=torch.%s", weft_dtype_name(t->dtype));
        text_puts(&out, "[]");
    } else {
        if (!default_dtype_shown_implicitly(t->dtype))
            snprintf(suffixes[nsuffix++], SUFFIX_MAX, "dtype=torch.%s", weft_dtype_name(t->dtype));
        bool summarize = numel > THRESHOLD;
        int64_t stored_shape[WEFT_MAX_DIMS];
        rc = read_values((weft_tensor *)t, summarize, &v, stored_shape);
        if (rc == 0) {
            struct formatter f;
            formatter_init(&f, &v);
            if (t->ndim == 0) {
                format_value(&f, &v, 0, &out);
            } else {
                struct layout l = {&v, &f, t->shape, t->ndim, summarize};
                format_dims(&l, 0, 0, indent, &out);
            }
        }
    }
    free(v.floating ? (void *)v.f : (void *)v.i);
    /* Autograd state, last, as PyTorch: the node that made it, else the leaf flag. */
    const char *grad_fn = weft_grad_fn_name(t);
    if (grad_fn)
        snprintf(suffixes[nsuffix++], SUFFIX_MAX, "grad_fn=<%s>", grad_fn);
    else if (weft_requires_grad(t))
        snprintf(suffixes[nsuffix++], SUFFIX_MAX, "requires_grad=True");
    if (rc == 0)
        add_suffixes(&out, suffixes, nsuffix, indent);
    if (rc == 0 && out.failed)
        rc = weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory printing a tensor");
    if (rc != 0) {
        free(out.buf);
        return NULL;
    }
    return out.buf;
}

int weft_tensor_print(const weft_tensor *t, FILE *f)
{
    if (!t)
        return weft_error_code() != WEFT_OK ? weft_error_code() : WEFT_ERR_VALUE;
    char *s = weft_tensor_repr(t);
    if (!s)
        return weft_error_code();
    int rc = fprintf(f, "%s\n", s) < 0 ? weft_error_set(WEFT_ERR_IO, "print: write failed") : 0;
    free(s);
    return rc;
}
