/* ops/memory_history.c: which op allocated each live block
 * (torch.cuda.memory._record_memory_history), and the snapshot that reports it.
 *
 * Storages are remembered from their allocation to their free in a table keyed by the
 * storage, told by the profiler's observer of the core (profiler.c); the op is learnt at
 * the dispatch funnel, where a fresh block first appears as
 * an output (front ends allocate outputs just before their kernel). A block never written
 * by a kernel keeps the range or backward node that was open when it was allocated. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "profiler_internal.h"
#include "weft/backend.h"
#include "weft/error.h"
#include "weft/profiler.h"

struct live_block {
    struct live_block *next;
    const struct weft_storage *storage;
    void *data;
    size_t nbytes;
    weft_device device;
    const char *op;     /* static (an op's name) or NULL */
    char where[48];     /* the range open at allocation */
    char shape[96];
    int dtype;          /* -1 until known */
};

#define BUCKETS 4096

static struct {
    pthread_mutex_t lock;
    struct live_block *bucket[BUCKETS];
} history = {.lock = PTHREAD_MUTEX_INITIALIZER};

static size_t bucket_of(const void *p)
{
    uintptr_t x = (uintptr_t)p >> 4;
    return (size_t)((x ^ (x >> 12)) % BUCKETS);
}

int weft_memory_record_history(bool enabled)
{
    if (enabled)
        return weft_profiler_flags_change(PROF_MEMORY, 0);
    weft_profiler_flags_change(0, PROF_MEMORY);
    pthread_mutex_lock(&history.lock);
    for (size_t i = 0; i < BUCKETS; i++) {
        struct live_block *b = history.bucket[i];
        while (b) {
            struct live_block *next = b->next;
            free(b);
            b = next;
        }
        history.bucket[i] = NULL;
    }
    pthread_mutex_unlock(&history.lock);
    return 0;
}

void weft_memory_history_alloc(const struct weft_storage *s)
{
    if (!s->data)
        return;
    struct live_block *b = calloc(1, sizeof *b);
    if (!b)
        return; /* the history is best effort: a block missing from it is reported as such */
    b->storage = s;
    b->data = s->data;
    b->nbytes = s->nbytes;
    b->device = s->device;
    b->dtype = -1;
    snprintf(b->where, sizeof b->where, "%s", weft_profiler_open_range());
    size_t k = bucket_of(s);
    pthread_mutex_lock(&history.lock);
    b->next = history.bucket[k];
    history.bucket[k] = b;
    pthread_mutex_unlock(&history.lock);
}

void weft_memory_history_free(const struct weft_storage *s)
{
    if (!s->data)
        return;
    size_t k = bucket_of(s);
    pthread_mutex_lock(&history.lock);
    for (struct live_block **link = &history.bucket[k]; *link; link = &(*link)->next) {
        if ((*link)->storage == s && (*link)->data == s->data) {
            struct live_block *b = *link;
            *link = b->next;
            free(b);
            break;
        }
    }
    pthread_mutex_unlock(&history.lock);
}

void weft_memory_history_attribute(const struct weft_op_call *call)
{
    for (int i = 0; i < call->nout; i++) {
        const weft_tensor *t = call->out[i];
        if (!t || !t->storage)
            continue;
        size_t k = bucket_of(t->storage);
        pthread_mutex_lock(&history.lock);
        for (struct live_block *b = history.bucket[k]; b; b = b->next) {
            if (b->storage != t->storage || b->op)
                continue;
            b->op = weft_op_name(call->op);
            weft_shape_str(t->ndim, t->shape, b->shape, sizeof b->shape);
            b->dtype = t->dtype;
            break;
        }
        pthread_mutex_unlock(&history.lock);
    }
}

/* ---- the snapshot ---------------------------------------------------------------------- */

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

static void block_history(FILE *f, const struct live_block *h)
{
    if (!h) {
        fprintf(f, ", \"op\": null");
        return;
    }
    fprintf(f, ", \"op\": ");
    if (h->op)
        json_string(f, h->op);
    else
        fprintf(f, "null");
    fprintf(f, ", \"range\": ");
    json_string(f, h->where);
    if (h->dtype >= 0) {
        fprintf(f, ", \"shape\": ");
        /* "[64, 784]" is JSON already */
        fputs(h->shape, f);
        fprintf(f, ", \"dtype\": ");
        json_string(f, weft_dtype_name((enum weft_dtype)h->dtype));
    }
}

static const struct live_block *history_find_data(const void *data, weft_device dev)
{
    for (size_t i = 0; i < BUCKETS; i++)
        for (const struct live_block *b = history.bucket[i]; b; b = b->next)
            if (b->data == data && b->device.type == dev.type && b->device.index == dev.index)
                return b;
    return NULL;
}

static void write_segment(FILE *f, bool *first, weft_device dev, const struct weft_memory_block *b,
                          size_t nb)
{
    size_t total = b[0].segment_size, allocated = 0, requested = 0, active = 0;
    for (size_t i = 0; i < nb; i++) {
        allocated += b[i].allocated ? b[i].size : 0;
        active += b[i].allocated || b[i].pending ? b[i].size : 0;
        requested += b[i].requested_size;
    }
    fprintf(f, "%s\n    {\"device\": %d, \"address\": %" PRIuPTR ", \"total_size\": %zu, "
               "\"allocated_size\": %zu, \"active_size\": %zu, \"requested_size\": %zu, "
               "\"stream\": %" PRId64 ", \"segment_type\": \"%s\", \"blocks\": [",
            *first ? "" : ",", dev.index, (uintptr_t)b[0].segment, total, allocated, active,
            requested, b[0].stream, b[0].small_pool ? "small" : "large");
    *first = false;
    for (size_t i = 0; i < nb; i++) {
        const char *state = b[i].allocated ? "active_allocated"
                            : b[i].pending ? "active_pending_free"
                                           : "inactive";
        fprintf(f, "%s\n      {\"address\": %" PRIuPTR ", \"size\": %zu, \"requested_size\": %zu, "
                   "\"state\": \"%s\"",
                i ? "," : "", (uintptr_t)b[i].ptr, b[i].size, b[i].requested_size, state);
        if (b[i].allocated)
            block_history(f, history_find_data(b[i].ptr, dev));
        fputc('}', f);
    }
    fprintf(f, "]}");
}

static int snapshot_write(FILE *f, weft_device dev, struct weft_memory_block *blocks, size_t nblocks)
{
    char name[32];
    fprintf(f, "{\"device\": \"%s\", \"history\": %s, \"segments\": [",
            weft_device_str(dev, name, sizeof name),
            (weft_profiler_flags() & PROF_MEMORY) ? "true" : "false");
    bool first = true;
    /* The allocator's own segments (a cuda device: all of them; the cpu: its cache). */
    for (size_t i = 0; i < nblocks;) {
        size_t j = i + 1;
        while (j < nblocks && blocks[j].segment == blocks[i].segment)
            j++;
        write_segment(f, &first, dev, blocks + i, j - i);
        i = j;
    }
    /* Live blocks the allocator does not list (the cpu's): each is a segment of its own. */
    for (size_t k = 0; k < BUCKETS; k++) {
        for (const struct live_block *h = history.bucket[k]; h; h = h->next) {
            if (h->device.type != dev.type || h->device.index != dev.index)
                continue;
            bool listed = false;
            for (size_t i = 0; i < nblocks && !listed; i++)
                listed = blocks[i].ptr == h->data;
            if (listed)
                continue;
            struct weft_memory_block one = {.ptr = h->data, .size = h->nbytes,
                                            .requested_size = h->nbytes, .segment = h->data,
                                            .segment_size = h->nbytes,
                                            .small_pool = h->nbytes <= ((size_t)1 << 20),
                                            .allocated = true};
            write_segment(f, &first, dev, &one, 1);
        }
    }
    fprintf(f, "\n]}\n");
    return ferror(f) ? -1 : 0;
}

int weft_memory_snapshot(weft_device dev, const char *path)
{
    const struct weft_backend *be = weft_backend_get(dev.type);
    if (!be)
        return weft_error_code();
    if (!path || !*path)
        return weft_error_set(WEFT_ERR_VALUE, "memory snapshot: a file path is required");
    struct weft_memory_block *blocks = NULL;
    size_t nblocks = 0;
    if (WEFT_VTABLE_HAS(be, memory_blocks) && be->memory_blocks(be->context, dev.index, &blocks, &nblocks) != 0)
        return weft_error_code();
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        free(blocks);
        return weft_error_set(WEFT_ERR_IO, "memory snapshot: cannot write %s: %s", tmp,
                              strerror(errno));
    }
    pthread_mutex_lock(&history.lock);
    int rc = snapshot_write(f, dev, blocks, nblocks);
    pthread_mutex_unlock(&history.lock);
    free(blocks);
    if (fclose(f) != 0 || rc != 0 || rename(tmp, path) != 0) {
        int e = errno;
        remove(tmp);
        return weft_error_set(WEFT_ERR_IO, "memory snapshot: cannot write %s: %s", path, strerror(e));
    }
    return 0;
}
