/* ops/memory_summary.c: torch.cuda.memory_summary for any device (weft/profiler.h).
 *
 * The table is torch.cuda.memory_summary's (PyTorch 1.13): one block of rows per
 * statistic, each with its large and small pool unless abbreviated, made from the
 * backend's memory_detail; the backend's notes, printed under it, say what the pools and
 * rows mean on its device. A backend with its own table (cuda) prints that one; one with
 * only memory_stats gets the rows those figures fill, "-" where a figure is unknown. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft/backend.h"
#include "weft/error.h"
#include "weft/profiler.h"

#define UNKNOWN INT64_MIN

struct text {
    char *buf;
    size_t len, cap;
    bool failed;
};

static void text_add(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void text_add(struct text *t, const char *fmt, ...)
{
    while (!t->failed) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
        va_end(ap);
        if (n >= 0 && (size_t)n < t->cap - t->len) {
            t->len += (size_t)n;
            return;
        }
        char *buf = n < 0 ? NULL : realloc(t->buf, 2 * t->cap + (size_t)n);
        if (!buf) {
            t->failed = true;
            return;
        }
        t->buf = buf;
        t->cap = 2 * t->cap + (size_t)n;
    }
}

/* _format_size: the unit is chosen by the all-pools value of the same column (pref), so
 * that a block's rows share it; the value is divided down in whole units, as PyTorch's. */
static void bytes_cell(char *cell, size_t size, int64_t value, int64_t pref)
{
    static const char *const units[] = {"B  ", "KiB", "MiB", "GiB", "TiB", "PiB"};
    int u = 0;
    for (double p = (double)pref; u < 5 && p >= 768.0 * 1024.0; p /= 1024.0, u++)
        value /= 1024;
    snprintf(cell, size, "%6" PRId64 " %s", value, units[u]);
}

/* _format_count: "%7d" with a K or M suffix chosen likewise. */
static void count_cell(char *cell, size_t size, int64_t value, int64_t pref)
{
    static const char *const units[] = {" ", "K", "M"};
    int u = 0;
    for (double p = (double)pref; u < 2 && p >= 750.0 * 1000.0; p /= 1000.0, u++)
        value /= 1000;
    snprintf(cell, size, "%7" PRId64 " %s ", value, units[u]);
}

typedef void (*cell_fn)(char *cell, size_t size, int64_t value, int64_t pref);

static void row(struct text *t, const char *name, const struct weft_memory_stat *s,
                const struct weft_memory_stat *pref, cell_fn fmt)
{
    const int64_t v[4] = {s->current, s->peak, s->allocated, s->freed};
    const int64_t p[4] = {pref->current, pref->peak, pref->allocated, pref->freed};
    char cells[4][32];
    for (int i = 0; i < 4; i++) {
        if (v[i] == UNKNOWN)
            snprintf(cells[i], sizeof cells[i], "%10s", "- ");
        else
            fmt(cells[i], sizeof cells[i], v[i], p[i]);
    }
    /* PyTorch's 21 characters for the name (a long device word is cut) */
    text_add(t, "| %-21.21s | %s | %s | %s | %s |\n", name, cells[0], cells[1], cells[2], cells[3]);
}

#define RULE_EQ "|===========================================================================|\n"
#define RULE_DASH "|---------------------------------------------------------------------------|\n"

static char *format_table(const struct weft_memory_detail *d, const char *device, int index,
                          bool pools)
{
    const char *word = d->device_word ? d->device_word : device;
    char reserved[32], segments[32], oversize[32];
    snprintf(reserved, sizeof reserved, "%s reserved memory", word);
    snprintf(segments, sizeof segments, "%s reserved segments", word);
    snprintf(oversize, sizeof oversize, "Oversize %s segments", word);
    const struct {
        const char *name;
        const struct weft_memory_stat *stat;
        cell_fn fmt;
    } metrics[] = {
        {"Allocated memory", d->allocated_bytes, bytes_cell},
        {"Active memory", d->active_bytes, bytes_cell},
        {reserved, d->reserved_bytes, bytes_cell},
        {"Non-releasable memory", d->inactive_split_bytes, bytes_cell},
        {"Allocations", d->allocation, count_cell},
        {"Active allocs", d->active, count_cell},
        {segments, d->segment, count_cell},
        {"Non-releasable allocs", d->inactive_split, count_cell},
    };
    struct text t = {malloc(8192), 0, 8192, false};
    if (!t.buf)
        return NULL;
    char title[96], ooms[48], retries[48];
    int n = snprintf(title, sizeof title, "weft %s memory summary, device ID %d", word, index);
    snprintf(ooms, sizeof ooms, "%s OOMs: %" PRId64, word, d->num_ooms);
    snprintf(retries, sizeof retries, "allocation retries: %" PRId64, d->num_alloc_retries);
    text_add(&t, RULE_EQ "|%*s%*s|\n" RULE_DASH, 37 + (n + 1) / 2, title, 38 - (n + 1) / 2, "");
    text_add(&t, "|  %9s%-24s | %6s%-29s  |\n" RULE_EQ, "", ooms, "", retries);
    text_add(&t, "|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |\n");
    for (size_t m = 0; m < sizeof metrics / sizeof *metrics; m++) {
        const struct weft_memory_stat *all = &metrics[m].stat[WEFT_MEMORY_POOL_ALL];
        text_add(&t, RULE_DASH);
        row(&t, metrics[m].name, all, all, metrics[m].fmt);
        if (!pools)
            continue;
        row(&t, "      from large pool", &metrics[m].stat[WEFT_MEMORY_POOL_LARGE], all,
            metrics[m].fmt);
        row(&t, "      from small pool", &metrics[m].stat[WEFT_MEMORY_POOL_SMALL], all,
            metrics[m].fmt);
    }
    text_add(&t, RULE_DASH);
    row(&t, "Oversize allocations", &d->oversize_allocations, &d->oversize_allocations, count_cell);
    text_add(&t, RULE_DASH);
    row(&t, oversize, &d->oversize_segments, &d->oversize_segments, count_cell);
    text_add(&t, RULE_EQ);
    if (d->notes)
        text_add(&t, "%s", d->notes);
    if (t.failed) {
        free(t.buf);
        return NULL;
    }
    return t.buf;
}

/* What weft_memory_stats alone says: the all-pools rows it fills. */
static void detail_from_stats(const struct weft_memory_stats *st, struct weft_memory_detail *d)
{
    const struct weft_memory_stat unknown = {UNKNOWN, UNKNOWN, UNKNOWN, UNKNOWN};
    struct weft_memory_stat *all[] = {d->allocated_bytes, d->active_bytes, d->reserved_bytes,
                                      d->inactive_split_bytes, d->allocation, d->active,
                                      d->segment, d->inactive_split};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        all[i][WEFT_MEMORY_POOL_ALL] = unknown;
    d->oversize_allocations = d->oversize_segments = unknown;
    d->allocated_bytes[0] = (struct weft_memory_stat){(int64_t)st->allocated_bytes,
                                                      (int64_t)st->peak_allocated_bytes, UNKNOWN,
                                                      UNKNOWN};
    d->reserved_bytes[0] = (struct weft_memory_stat){(int64_t)st->reserved_bytes,
                                                     (int64_t)st->peak_reserved_bytes, UNKNOWN,
                                                     UNKNOWN};
    d->allocation[0] = (struct weft_memory_stat){(int64_t)(st->num_allocs - st->num_frees), UNKNOWN,
                                                 (int64_t)st->num_allocs, (int64_t)st->num_frees};
    d->num_alloc_retries = (int64_t)st->num_alloc_retries;
    d->num_ooms = (int64_t)st->num_ooms;
}

char *weft_memory_summary(weft_device dev, bool abbreviated)
{
    /* memory_stats checks the device and says when the backend keeps no statistics. */
    struct weft_memory_stats st = {.struct_size = sizeof st};
    if (weft_memory_stats(dev, &st) != 0)
        return NULL;
    const struct weft_backend *b = weft_backend_get(dev.type);
    if (!b)
        return NULL;
    if (WEFT_VTABLE_HAS(b, memory_summary))
        return b->memory_summary(b->context, dev.index, abbreviated);
    struct weft_memory_detail d = {.struct_size = sizeof d};
    bool pools = !abbreviated;
    if (WEFT_VTABLE_HAS(b, memory_detail)) {
        if (b->memory_detail(b->context, dev.index, &d) != 0)
            return NULL;
    } else {
        detail_from_stats(&st, &d);
        pools = false;
    }
    char *table = format_table(&d, b->base.name, dev.index, pools);
    if (!table)
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "memory_summary: out of host memory");
    return table;
}
