/* ops/profiler_report.c: what the recorder's events say: key_averages() and its table,
 * the layout copies, and the Chrome trace (the format chrome://tracing and Perfetto
 * read: an object whose traceEvents are complete events, ph "X", times in microseconds).
 *
 * A thread's events are stored in the order they opened, each with its depth, so one
 * walk with a stack finds every event's parent; a "ProfilerStep#k" event is the parent
 * of the top-level events that opened while it was open. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "profiler_internal.h"
#include "weft/device.h"
#include "weft/error.h"
#include "weft/profiler.h"

/* Calls fn for every closed event of the current generation with its children's totals. */
struct walk_item {
    const struct prof_event *e;
    uint64_t child_ns, child_alloc, child_freed;
};

typedef int (*event_fn)(void *ctx, const struct prof_thread *th, const struct prof_event *e,
                        uint64_t child_ns, uint64_t child_alloc, uint64_t child_freed);

static int effective_depth(const struct prof_event *e)
{
    return e->kind == PROF_STEP ? -1 : e->depth;
}

static int finish_item(struct walk_item *it, struct walk_item *parent, const struct prof_thread *th,
                       event_fn fn, void *ctx)
{
    uint64_t t1 = __atomic_load_n(&it->e->t1, __ATOMIC_ACQUIRE);
    if (t1 == 0)
        return 0; /* still open: not reported, its children go to its parent */
    if (parent) {
        parent->child_ns += t1 - it->e->t0;
        parent->child_alloc += it->e->alloc;
        parent->child_freed += it->e->freed;
    }
    return fn(ctx, th, it->e, it->child_ns, it->child_alloc, it->child_freed);
}

static int walk_thread(const struct prof_thread *th, event_fn fn, void *ctx)
{
    struct walk_item stack[PROF_MAX_DEPTH + 2];
    int depth = 0, rc = 0;
    size_t left = __atomic_load_n(&th->count, __ATOMIC_ACQUIRE);
    for (const struct prof_chunk *c = th->head; c && left > 0 && rc == 0; c = c->next) {
        int used = c->used < (int)left ? c->used : (int)left;
        for (int i = 0; i < used && rc == 0; i++) {
            const struct prof_event *e = &c->events[i];
            while (depth > 0 && effective_depth(stack[depth - 1].e) >= effective_depth(e) && rc == 0) {
                depth--;
                rc = finish_item(&stack[depth], depth > 0 ? &stack[depth - 1] : NULL, th, fn, ctx);
            }
            if (depth < PROF_MAX_DEPTH + 2)
                stack[depth++] = (struct walk_item){e, 0, 0, 0};
        }
        left -= (size_t)used;
    }
    while (depth > 0 && rc == 0) {
        depth--;
        rc = finish_item(&stack[depth], depth > 0 ? &stack[depth - 1] : NULL, th, fn, ctx);
    }
    return rc;
}

static int walk(event_fn fn, void *ctx)
{
    uint32_t gen = weft_profiler_generation();
    for (const struct prof_thread *th = weft_profiler_threads(); th; th = th->next) {
        if (__atomic_load_n(&th->generation, __ATOMIC_ACQUIRE) != gen)
            continue;
        int rc = walk_thread(th, fn, ctx);
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* ---- key_averages --------------------------------------------------------------------- */

struct averages {
    struct weft_profiler_average *rows;
    size_t n, cap;
    bool by_shape;
};

static int average_add(void *ctx, const struct prof_thread *th, const struct prof_event *e,
                       uint64_t child_ns, uint64_t child_alloc, uint64_t child_freed)
{
    (void)th;
    struct averages *a = ctx;
    const char *shapes = a->by_shape && e->shapes ? e->shapes : "";
    struct weft_profiler_average *r = NULL;
    /* Few distinct names: the newest rows are the likeliest. */
    for (size_t i = a->n; i-- > 0;)
        if (a->rows[i].name == e->name && strcmp(a->rows[i].input_shapes, shapes) == 0) {
            r = &a->rows[i];
            break;
        }
    if (!r) {
        if (weft_grow((void **)&a->rows, &a->cap, a->n + 1, sizeof *a->rows) != 0)
            return weft_error_code();
        r = &a->rows[a->n++];
        *r = (struct weft_profiler_average){.name = e->name, .input_shapes = shapes,
                                            .is_range = e->kind != PROF_OP};
    }
    uint64_t dur = e->t1 - e->t0;
    r->calls++;
    r->total_us += (double)dur / 1e3;
    r->self_us += (double)(dur > child_ns ? dur - child_ns : 0) / 1e3;
    r->alloc_bytes += (int64_t)e->alloc;
    r->freed_bytes += (int64_t)e->freed;
    r->self_alloc_bytes += (int64_t)(e->alloc > child_alloc ? e->alloc - child_alloc : 0);
    r->self_freed_bytes += (int64_t)(e->freed > child_freed ? e->freed - child_freed : 0);
    return 0;
}

int weft_profiler_key_averages(bool group_by_input_shape, struct weft_profiler_average **out,
                               size_t *n)
{
    struct averages a = {.by_shape = group_by_input_shape};
    int rc = walk(average_add, &a);
    if (rc != 0) {
        free(a.rows);
        return rc;
    }
    *out = a.rows;
    *n = a.n;
    return 0;
}

struct copies {
    int64_t count, bytes;
};

static int copy_add(void *ctx, const struct prof_thread *th, const struct prof_event *e,
                    uint64_t child_ns, uint64_t child_alloc, uint64_t child_freed)
{
    (void)th, (void)child_ns, (void)child_alloc, (void)child_freed;
    struct copies *c = ctx;
    if (e->layout_copy) {
        c->count++;
        c->bytes += e->copy_bytes;
    }
    return 0;
}

int64_t weft_profiler_layout_copies(int64_t *bytes)
{
    struct copies c = {0, 0};
    walk(copy_add, &c);
    if (bytes)
        *bytes = c.bytes;
    return c.count;
}

/* ---- the table ------------------------------------------------------------------------ */

enum sort_key { BY_SELF, BY_TOTAL, BY_AVG, BY_COUNT, BY_MEM, BY_SELF_MEM, BY_NAME };
static enum sort_key sort_key_now;

static double sort_value(const struct weft_profiler_average *r)
{
    switch (sort_key_now) {
    case BY_TOTAL: return r->total_us;
    case BY_AVG: return r->total_us / (double)r->calls;
    case BY_COUNT: return (double)r->calls;
    case BY_MEM: return (double)(r->alloc_bytes - r->freed_bytes);
    case BY_SELF_MEM: return (double)(r->self_alloc_bytes - r->self_freed_bytes);
    default: return r->self_us;
    }
}

static int row_cmp(const void *pa, const void *pb)
{
    const struct weft_profiler_average *a = pa, *b = pb;
    if (sort_key_now == BY_NAME)
        return strcmp(a->name, b->name);
    double x = sort_value(a), y = sort_value(b);
    return x > y ? -1 : x < y ? 1 : strcmp(a->name, b->name);
}

/* PyTorch's _format_time: "1.025ms", "547.000us", "2.326s". */
static const char *format_time(double us, char *buf, size_t size)
{
    if (us >= 1e6)
        snprintf(buf, size, "%.3fs", us / 1e6);
    else if (us >= 1e3)
        snprintf(buf, size, "%.3fms", us / 1e3);
    else
        snprintf(buf, size, "%.3fus", us);
    return buf;
}

/* PyTorch's _format_memory: "120.00 Kb", "-1.50 Mb", "0 b". */
static const char *format_memory(int64_t bytes, char *buf, size_t size)
{
    double v = (double)bytes, a = v < 0 ? -v : v;
    if (a >= 1024.0 * 1024 * 1024)
        snprintf(buf, size, "%.2f Gb", v / (1024.0 * 1024 * 1024));
    else if (a >= 1024.0 * 1024)
        snprintf(buf, size, "%.2f Mb", v / (1024.0 * 1024));
    else if (a >= 1024)
        snprintf(buf, size, "%.2f Kb", v / 1024);
    else
        snprintf(buf, size, "%lld b", (long long)bytes);
    return buf;
}

struct text {
    char *s;
    size_t n, cap;
    bool failed;
};

static void text_add(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void text_add(struct text *t, const char *fmt, ...)
{
    if (t->failed)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int len = vsnprintf(t->s ? t->s + t->n : NULL, t->s ? t->cap - t->n : 0, fmt, ap);
        va_end(ap);
        if (len < 0) {
            t->failed = true;
            return;
        }
        if (t->s && t->n + (size_t)len < t->cap) {
            t->n += (size_t)len;
            return;
        }
        size_t cap = t->cap ? t->cap * 2 : 4096;
        while (cap < t->n + (size_t)len + 1)
            cap *= 2;
        char *s = realloc(t->s, cap);
        if (!s) {
            t->failed = true;
            return;
        }
        t->s = s;
        t->cap = cap;
    }
}

static int parse_sort(const char *s, enum sort_key *k)
{
    static const struct {
        const char *name;
        enum sort_key key;
    } keys[] = {
        {"self_cpu_time_total", BY_SELF}, {"cpu_time_total", BY_TOTAL}, {"cpu_time", BY_AVG},
        {"count", BY_COUNT}, {"cpu_memory_usage", BY_MEM}, {"self_cpu_memory_usage", BY_SELF_MEM},
        {"name", BY_NAME},
    };
    if (!s) {
        *k = BY_SELF;
        return 0;
    }
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (strcmp(s, keys[i].name) == 0) {
            *k = keys[i].key;
            return 0;
        }
    return weft_error_set(WEFT_ERR_VALUE,
                          "profiler table: sort_by '%s' is not one of self_cpu_time_total, "
                          "cpu_time_total, cpu_time, count, cpu_memory_usage, "
                          "self_cpu_memory_usage, name", s);
}

char *weft_profiler_table(const char *sort_by, int row_limit)
{
    enum sort_key key;
    if (parse_sort(sort_by, &key) != 0)
        return NULL;
    struct weft_profiler_average *rows;
    size_t n;
    if (weft_profiler_key_averages(false, &rows, &n) != 0)
        return NULL;
    sort_key_now = key;
    qsort(rows, n, sizeof *rows, row_cmp);
    double self_total = 0;
    int width = 20;
    for (size_t i = 0; i < n; i++) {
        self_total += rows[i].self_us;
        int len = (int)strlen(rows[i].name);
        width = len > width ? (len < 60 ? len : 60) : width;
    }
    size_t shown = row_limit > 0 && (size_t)row_limit < n ? (size_t)row_limit : n;
    static const char *const heads[] = {"Self CPU %", "Self CPU", "CPU total %", "CPU total",
                                        "CPU time avg", "CPU Mem", "Self CPU Mem", "# of Calls"};
    struct text t = {0};
    char rule[512];
    int rn = snprintf(rule, sizeof rule, "%.*s", width, "------------------------------------------------------------");
    for (int c = 0; c < 8 && rn < (int)sizeof rule - 16; c++)
        rn += snprintf(rule + rn, sizeof rule - (size_t)rn, "  ------------");
    text_add(&t, "%s\n%*s", rule, width, "Name");
    for (int c = 0; c < 8; c++)
        text_add(&t, "  %12s", heads[c]);
    text_add(&t, "\n%s\n", rule);
    for (size_t i = 0; i < shown; i++) {
        const struct weft_profiler_average *r = &rows[i];
        char a[32], b[32], c[32], d[32], e[32];
        text_add(&t, "%*.*s  %11.2f%%  %12s  %11.2f%%  %12s  %12s  %12s  %12s  %12lld\n", width,
                 width, r->name, self_total > 0 ? 100 * r->self_us / self_total : 0.0,
                 format_time(r->self_us, a, sizeof a),
                 self_total > 0 ? 100 * r->total_us / self_total : 0.0,
                 format_time(r->total_us, b, sizeof b),
                 format_time(r->total_us / (double)r->calls, c, sizeof c),
                 format_memory(r->alloc_bytes - r->freed_bytes, d, sizeof d),
                 format_memory(r->self_alloc_bytes - r->self_freed_bytes, e, sizeof e),
                 (long long)r->calls);
    }
    char total[32];
    int64_t copy_bytes = 0;
    int64_t copies = weft_profiler_layout_copies(&copy_bytes);
    char cb[32];
    text_add(&t, "%s\nSelf CPU time total: %s\nLayout copies (contiguous/clone into other strides): "
                 "%lld (%s)\n",
             rule, format_time(self_total, total, sizeof total), (long long)copies,
             format_memory(copy_bytes, cb, sizeof cb));
    free(rows);
    if (t.failed) {
        free(t.s);
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "profiler table: out of host memory");
        return NULL;
    }
    return t.s;
}

/* ---- the Chrome trace ------------------------------------------------------------------ */

static void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            fprintf(f, "\\u%04x", *s);
        else
            fputc(*s, f);
    }
    fputc('"', f);
}

struct trace_ctx {
    FILE *f;
    bool first;
    uint64_t zero;
    int pid;
};

static int trace_event(void *ctx, const struct prof_thread *th, const struct prof_event *e,
                       uint64_t child_ns, uint64_t child_alloc, uint64_t child_freed)
{
    (void)child_ns, (void)child_alloc, (void)child_freed;
    struct trace_ctx *c = ctx;
    static const char *const cats[] = {"cpu_op", "user_annotation", "autograd", "step"};
    fprintf(c->f, "%s\n{\"ph\": \"X\", \"cat\": \"%s\", \"name\": ", c->first ? "" : ",",
            cats[e->kind]);
    c->first = false;
    json_string(c->f, e->name);
    double ts = (double)(e->t0 - c->zero) / 1e3, dur = (double)(e->t1 - e->t0) / 1e3;
    fprintf(c->f, ", \"pid\": %d, \"tid\": %" PRId64 ", \"ts\": %.3f, \"dur\": %.3f, \"args\": {",
            c->pid, th->tid, ts, dur);
    fprintf(c->f, "\"phase\": \"%s\"", e->node ? "backward" : "forward");
    if (e->node && e->kind == PROF_OP) {
        fprintf(c->f, ", \"autograd node\": ");
        json_string(c->f, e->node);
    }
    if (e->device_type >= 0) {
        char dev[32];
        weft_device_str((weft_device){.type = e->device_type, .index = e->device_index}, dev,
                        sizeof dev);
        fprintf(c->f, ", \"device\": \"%s\"", dev);
    }
    if (e->shapes)
        fprintf(c->f, ", \"Input Dims\": %s, \"Input type\": %s", e->shapes,
                e->dtypes ? e->dtypes : "[]");
    fprintf(c->f, ", \"bytes allocated\": %" PRIu64 ", \"bytes freed\": %" PRIu64, e->alloc, e->freed);
    if (e->layout_copy)
        fprintf(c->f, ", \"layout copy\": true");
    fprintf(c->f, "}}");
    return ferror(c->f) ? -1 : 0;
}

int weft_profiler_export_chrome_trace(const char *path)
{
    if (!path || !*path)
        return weft_error_set(WEFT_ERR_VALUE, "export_chrome_trace: a file path is required");
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return weft_error_set(WEFT_ERR_IO, "export_chrome_trace: cannot write %s: %s", tmp,
                              strerror(errno));
    struct trace_ctx c = {f, true, weft_profiler_zero_ns(), (int)getpid()};
    fprintf(f, "{\"schemaVersion\": 1, \"displayTimeUnit\": \"ms\", \"traceEvents\": [");
    int rc = walk(trace_event, &c);
    fprintf(f, "\n]}\n");
    if (ferror(f))
        rc = -1;
    if (fclose(f) != 0 || rc != 0 || rename(tmp, path) != 0) {
        int err = errno;
        remove(tmp);
        return weft_error_set(WEFT_ERR_IO, "export_chrome_trace: cannot write %s: %s", path,
                              strerror(err));
    }
    return 0;
}
