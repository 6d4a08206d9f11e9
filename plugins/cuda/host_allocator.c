/* plugins/cuda/host_allocator.c: pinned host memory, cached as PyTorch's
 * CachingHostAllocator does (power-of-two blocks, never split, one free list per size,
 * reuse only after the events of the copies that used a block have completed).
 *
 * As in the device allocator, the memory a later infallible step needs (a free-list
 * slot per block, an event slot per recorded copy) is reserved by the fallible step that
 * creates the need. */
#include "host_allocator.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One free list per power of two: index log2(size). */
#define NLISTS 64

struct hblock {
    char *ptr;
    size_t size; /* a power of two */
    bool allocated;
    int event_count; /* recorded copies not known to be finished */
};

struct free_list {
    struct hblock **v; /* a stack: the most recently freed block is reused first */
    size_t n, cap;
    size_t nblocks;    /* blocks of this size in any state; cap >= nblocks */
};

struct host_event {
    void *event;
    struct hblock *block;
};

struct host_allocator {
    pthread_mutex_t lock;
    struct alloc_ops ops;
    struct hblock **blocks; /* every block, by address */
    size_t nblocks, cap_blocks;
    struct free_list lists[NLISTS];
    struct host_event *events; /* oldest first */
    size_t nevents, cap_events;
    struct host_stats stats;
};

size_t host_allocator_round_size(size_t size)
{
    if (size <= 1)
        return 1;
    if (size > (SIZE_MAX >> 1) + 1)
        return 0;
    return (size_t)1 << (64 - __builtin_clzll((unsigned long long)(size - 1)));
}

static int size_index(size_t pow2)
{
    return 63 - __builtin_clzll((unsigned long long)pow2);
}

static void stat_inc(struct ca_stat *s, int64_t amount)
{
    s->current += amount;
    if (s->current > s->peak)
        s->peak = s->current;
    s->allocated += amount;
}

static void stat_dec(struct ca_stat *s, int64_t amount)
{
    s->current -= amount;
    s->freed += amount;
}

/* ---- the block table, by address ------------------------------------------------------- */

/* Index of the first block whose address is > p. */
static size_t upper_bound(const struct host_allocator *ha, const void *p)
{
    size_t lo = 0, hi = ha->nblocks;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if ((uintptr_t)ha->blocks[mid]->ptr <= (uintptr_t)p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The block whose range holds p, or NULL. */
static struct hblock *find_containing(const struct host_allocator *ha, const void *p)
{
    size_t i = upper_bound(ha, p);
    if (i == 0)
        return NULL;
    struct hblock *b = ha->blocks[i - 1];
    return (uintptr_t)p < (uintptr_t)b->ptr + b->size ? b : NULL;
}

static void table_insert(struct host_allocator *ha, struct hblock *b)
{
    size_t i = upper_bound(ha, b->ptr);
    memmove(ha->blocks + i + 1, ha->blocks + i, (ha->nblocks - i) * sizeof *ha->blocks);
    ha->blocks[i] = b;
    ha->nblocks++;
}

static void table_erase(struct host_allocator *ha, const struct hblock *b)
{
    size_t i = upper_bound(ha, b->ptr);
    if (i == 0 || ha->blocks[i - 1] != b)
        return;
    i--;
    memmove(ha->blocks + i, ha->blocks + i + 1, (ha->nblocks - i - 1) * sizeof *ha->blocks);
    ha->nblocks--;
}

/* Room for one more block of this size in the table and in its list. */
static int reserve_block(struct host_allocator *ha, struct free_list *list)
{
    if (ha->nblocks == ha->cap_blocks) {
        size_t cap = ha->cap_blocks ? 2 * ha->cap_blocks : 16;
        struct hblock **v = realloc(ha->blocks, cap * sizeof *v);
        if (!v)
            return CA_ERR_OOM;
        ha->blocks = v;
        ha->cap_blocks = cap;
    }
    if (list->nblocks == list->cap) {
        size_t cap = list->cap ? 2 * list->cap : 4;
        struct hblock **v = realloc(list->v, cap * sizeof *v);
        if (!v)
            return CA_ERR_OOM;
        list->v = v;
        list->cap = cap;
    }
    return CA_OK;
}

/* ---- events ------------------------------------------------------------------------------ */

static void make_available(struct host_allocator *ha, struct hblock *b)
{
    struct free_list *list = &ha->lists[size_index(b->size)];
    list->v[list->n++] = b;
}

/* Completed events release their blocks, oldest first, up to the first one that has not
 * completed (PyTorch's order: one queue for all streams). */
static void process_events(struct host_allocator *ha)
{
    size_t done = 0;
    while (done < ha->nevents) {
        struct host_event *e = &ha->events[done];
        if (ha->ops.event_query(ha->ops.ctx, e->event) == 0)
            break;
        ha->ops.event_destroy(ha->ops.ctx, e->event);
        if (--e->block->event_count == 0 && !e->block->allocated)
            make_available(ha, e->block);
        done++;
    }
    if (done == 0)
        return;
    memmove(ha->events, ha->events + done, (ha->nevents - done) * sizeof *ha->events);
    ha->nevents -= done;
}

/* Waits for every recorded copy. */
static void synchronize_events(struct host_allocator *ha)
{
    for (size_t i = 0; i < ha->nevents; i++) {
        struct host_event *e = &ha->events[i];
        ha->ops.event_synchronize(ha->ops.ctx, e->event);
        ha->ops.event_destroy(ha->ops.ctx, e->event);
        if (--e->block->event_count == 0 && !e->block->allocated)
            make_available(ha, e->block);
    }
    ha->nevents = 0;
}

/* ---- allocation -------------------------------------------------------------------------- */

/* A new block of `size` bytes from the driver, entered in the table. */
static int new_block(struct host_allocator *ha, size_t size, struct hblock **out, char *why,
                     size_t why_size)
{
    struct free_list *list = &ha->lists[size_index(size)];
    struct hblock *b = calloc(1, sizeof *b);
    if (!b || reserve_block(ha, list) != CA_OK) {
        free(b);
        snprintf(why, why_size, "pinned host allocator: out of host memory for its bookkeeping");
        return CA_ERR_OOM;
    }
    void *ptr = NULL;
    int rc = ha->ops.alloc(ha->ops.ctx, size, &ptr, why, why_size);
    if (rc != CA_OK) {
        free(b);
        return rc == CA_ERR_OOM ? CA_ERR_OOM : CA_ERR_DEVICE;
    }
    *b = (struct hblock){.ptr = ptr, .size = size};
    table_insert(ha, b);
    list->nblocks++;
    stat_inc(&ha->stats.segment, 1);
    stat_inc(&ha->stats.reserved_bytes, (int64_t)size);
    *out = b;
    return CA_OK;
}

int host_allocator_malloc(struct host_allocator *ha, size_t size, void **out, char *why,
                          size_t why_size)
{
    *out = NULL;
    size_t rounded = host_allocator_round_size(size);
    if (rounded == 0) {
        snprintf(why, why_size, "pinned host allocator: cannot allocate %zu bytes", size);
        return CA_ERR_OOM;
    }
    pthread_mutex_lock(&ha->lock);
    process_events(ha);
    struct free_list *list = &ha->lists[size_index(rounded)];
    struct hblock *b = NULL;
    int rc = CA_OK;
    if (list->n > 0) {
        b = list->v[--list->n];
        ha->stats.num_cache_hits++;
    } else {
        rc = new_block(ha, rounded, &b, why, why_size);
    }
    if (rc == CA_OK) {
        b->allocated = true;
        stat_inc(&ha->stats.allocation, 1);
        stat_inc(&ha->stats.allocated_bytes, (int64_t)b->size);
        *out = b->ptr;
    }
    pthread_mutex_unlock(&ha->lock);
    return rc;
}

int host_allocator_free(struct host_allocator *ha, void *ptr)
{
    if (!ptr)
        return CA_OK;
    pthread_mutex_lock(&ha->lock);
    struct hblock *b = find_containing(ha, ptr);
    int rc = b && b->ptr == ptr && b->allocated ? CA_OK : CA_ERR_INVALID;
    if (rc == CA_OK) {
        b->allocated = false;
        stat_dec(&ha->stats.allocation, 1);
        stat_dec(&ha->stats.allocated_bytes, (int64_t)b->size);
        if (b->event_count == 0)
            make_available(ha, b);
    }
    pthread_mutex_unlock(&ha->lock);
    return rc;
}

static int record_locked(struct host_allocator *ha, const void *ptr, ca_stream stream)
{
    struct hblock *b = find_containing(ha, ptr);
    if (!b)
        return 0;
    if (!b->allocated)
        return CA_ERR_INVALID;
    if (ha->nevents == ha->cap_events) {
        size_t cap = ha->cap_events ? 2 * ha->cap_events : 16;
        struct host_event *v = realloc(ha->events, cap * sizeof *v);
        if (!v)
            return CA_ERR_OOM;
        ha->events = v;
        ha->cap_events = cap;
    }
    void *event = ha->ops.event_record(ha->ops.ctx, stream);
    if (!event) {
        /* Without an event, make the copy finished now. */
        ha->ops.stream_synchronize(ha->ops.ctx, stream);
        return 1;
    }
    ha->events[ha->nevents++] = (struct host_event){event, b};
    b->event_count++;
    return 1;
}

int host_allocator_record_event(struct host_allocator *ha, const void *ptr, ca_stream stream)
{
    pthread_mutex_lock(&ha->lock);
    int rc = record_locked(ha, ptr, stream);
    pthread_mutex_unlock(&ha->lock);
    return rc;
}

bool host_allocator_contains(struct host_allocator *ha, const void *ptr)
{
    pthread_mutex_lock(&ha->lock);
    struct hblock *b = find_containing(ha, ptr);
    bool yes = b && b->allocated;
    pthread_mutex_unlock(&ha->lock);
    return yes;
}

static void release(struct host_allocator *ha, struct hblock *b)
{
    table_erase(ha, b);
    ha->lists[size_index(b->size)].nblocks--;
    ha->ops.free(ha->ops.ctx, b->ptr, b->size);
    stat_dec(&ha->stats.segment, 1);
    stat_dec(&ha->stats.reserved_bytes, (int64_t)b->size);
    free(b);
}

void host_allocator_empty_cache(struct host_allocator *ha)
{
    pthread_mutex_lock(&ha->lock);
    process_events(ha);
    for (int i = 0; i < NLISTS; i++) {
        struct free_list *list = &ha->lists[i];
        while (list->n > 0)
            release(ha, list->v[--list->n]);
    }
    pthread_mutex_unlock(&ha->lock);
}

void host_allocator_get_stats(struct host_allocator *ha, struct host_stats *out)
{
    pthread_mutex_lock(&ha->lock);
    *out = ha->stats;
    out->num_pending_events = (int64_t)ha->nevents;
    pthread_mutex_unlock(&ha->lock);
}

struct host_allocator *host_allocator_new(const struct alloc_ops *ops)
{
    struct host_allocator *ha = calloc(1, sizeof *ha);
    if (!ha)
        return NULL;
    if (pthread_mutex_init(&ha->lock, NULL) != 0) {
        free(ha);
        return NULL;
    }
    ha->ops = *ops;
    return ha;
}

void host_allocator_destroy(struct host_allocator *ha)
{
    if (!ha)
        return;
    pthread_mutex_lock(&ha->lock);
    synchronize_events(ha);
    while (ha->nblocks > 0)
        release(ha, ha->blocks[ha->nblocks - 1]);
    for (int i = 0; i < NLISTS; i++)
        free(ha->lists[i].v);
    free(ha->blocks);
    free(ha->events);
    pthread_mutex_unlock(&ha->lock);
    pthread_mutex_destroy(&ha->lock);
    free(ha);
}
