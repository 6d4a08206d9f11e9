/* plugins/cuda/caching_allocator.c: PyTorch's CUDA caching allocator in plain C.
 *
 * Follows c10/cuda/CUDACachingAllocator.cpp (DeviceCachingAllocator) step by step, with
 * the same names where they help a reader compare: round_size, get_free_block,
 * alloc_block, alloc_found_block, should_split, free_block, try_merge_blocks,
 * insert_events, process_events, release_available_cached_blocks,
 * release_cached_blocks. Left out: expandable segments, graph pools, memory fraction,
 * garbage collection and free-memory callbacks.
 *
 * Host bookkeeping never fails half-way: the memory a later step needs (a pool slot for
 * every block, an event slot for every recorded stream use) is reserved by the fallible
 * step that creates the need, so free() and the event processing cannot fail. */
#include "caching_allocator.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Internal status: host memory for the bookkeeping ran out (not worth a cache flush). */
#define HOST_OOM (-100)
/* Larger requests cannot be rounded without overflow; no device has that much. */
#define MAX_REQUEST ((size_t)1 << 62)

struct pool;

/* A range of one segment: handed out, cached (in its pool), or waiting for events. */
struct block {
    char *ptr;
    size_t size;            /* multiple of 512 */
    size_t requested_size;  /* as asked, while handed out */
    ca_stream stream;       /* the segment's stream */
    struct pool *pool;
    bool allocated;
    int event_count;        /* events still to complete before reuse */
    struct block *prev, *next; /* neighbours in the segment (split blocks) */
    ca_stream *stream_uses; /* streams other than `stream` that used the block */
    size_t nuses, cap_uses;
};

/* Cached free blocks ordered by (stream, size, address): best fit is a lower bound. */
struct pool {
    struct block **v;
    size_t n, cap;
    size_t nblocks; /* blocks of this pool in any state; cap >= nblocks always */
    bool is_small;
};

/* Handed-out blocks by address (open addressing, linear probing). */
struct ptr_map {
    void **keys;
    struct block **vals;
    size_t cap, n; /* cap is 0 or a power of two */
};

struct pending_event {
    ca_stream stream;
    void *event;
    struct block *block;
};

struct caching_allocator {
    pthread_mutex_t lock;
    int device;
    size_t max_split_size;
    struct alloc_ops ops;
    struct pool small, large;
    struct ptr_map allocated;
    struct pending_event *events; /* in record order */
    size_t nevents, cap_events;
    size_t nuses;                 /* recorded stream uses not yet turned into events */
    struct ca_stats stats;
};

/* What one malloc is looking for. */
struct alloc_params {
    size_t size;       /* rounded */
    size_t alloc_size; /* segment size if a new one is needed */
    ca_stream stream;
    struct pool *pool;
};

/* ---- sizes ------------------------------------------------------------------------------ */

size_t caching_allocator_round_size(size_t size)
{
    if (size < CA_MIN_BLOCK_SIZE)
        return CA_MIN_BLOCK_SIZE;
    return CA_MIN_BLOCK_SIZE * ((size + CA_MIN_BLOCK_SIZE - 1) / CA_MIN_BLOCK_SIZE);
}

bool caching_allocator_is_small(size_t rounded)
{
    return rounded <= CA_SMALL_SIZE;
}

size_t caching_allocator_segment_size(size_t rounded)
{
    if (rounded <= CA_SMALL_SIZE)
        return CA_SMALL_BUFFER;
    if (rounded < CA_MIN_LARGE_ALLOC)
        return CA_LARGE_BUFFER;
    return CA_ROUND_LARGE * ((rounded + CA_ROUND_LARGE - 1) / CA_ROUND_LARGE);
}

char *caching_allocator_format_size(uint64_t size, char *buf, size_t buf_size)
{
    if (size <= 1024)
        snprintf(buf, buf_size, "%" PRIu64 " bytes", size);
    else if (size <= 1048576)
        snprintf(buf, buf_size, "%.2f KiB", (double)size / 1024.0);
    else if (size <= 1073741824ull)
        snprintf(buf, buf_size, "%.2f MiB", (double)size / 1048576.0);
    else
        snprintf(buf, buf_size, "%.2f GiB", (double)size / 1073741824.0);
    return buf;
}

/* ---- statistics ------------------------------------------------------------------------- */

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

/* PyTorch's get_stat_types_for_pool: the aggregate and the block's own pool. */
static void pool_stat_inc(struct ca_stat *stat, const struct pool *pool, int64_t amount)
{
    stat_inc(&stat[CA_STAT_ALL], amount);
    stat_inc(&stat[pool->is_small ? CA_STAT_SMALL : CA_STAT_LARGE], amount);
}

static void pool_stat_dec(struct ca_stat *stat, const struct pool *pool, int64_t amount)
{
    stat_dec(&stat[CA_STAT_ALL], amount);
    stat_dec(&stat[pool->is_small ? CA_STAT_SMALL : CA_STAT_LARGE], amount);
}

/* A signed change of a statistic, as free_block's net changes. */
static void pool_stat_add(struct ca_stat *stat, const struct pool *pool, int64_t delta)
{
    if (delta > 0)
        pool_stat_inc(stat, pool, delta);
    else if (delta < 0)
        pool_stat_dec(stat, pool, -delta);
}

/* ---- pools ------------------------------------------------------------------------------ */

static bool block_less(ca_stream stream, size_t size, const char *ptr, const struct block *b)
{
    if ((uintptr_t)b->stream != (uintptr_t)stream)
        return (uintptr_t)b->stream < (uintptr_t)stream;
    if (b->size != size)
        return b->size < size;
    return (uintptr_t)b->ptr < (uintptr_t)ptr;
}

/* Index of the first block not ordered before (stream, size, ptr). */
static size_t pool_lower_bound(const struct pool *pool, ca_stream stream, size_t size,
                               const char *ptr)
{
    size_t lo = 0, hi = pool->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (block_less(stream, size, ptr, pool->v[mid]))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Makes room for `extra` more blocks of this pool; the only fallible pool step. */
static int pool_reserve(struct pool *pool, size_t extra)
{
    size_t need = pool->nblocks + extra;
    if (need <= pool->cap)
        return 0;
    size_t cap = pool->cap ? pool->cap : 16;
    while (cap < need)
        cap *= 2;
    struct block **v = realloc(pool->v, cap * sizeof *v);
    if (!v)
        return HOST_OOM;
    pool->v = v;
    pool->cap = cap;
    return 0;
}

/* Cannot fail: the slot was reserved when the block was created. */
static void pool_insert(struct pool *pool, struct block *b)
{
    size_t i = pool_lower_bound(pool, b->stream, b->size, b->ptr);
    memmove(pool->v + i + 1, pool->v + i, (pool->n - i) * sizeof *pool->v);
    pool->v[i] = b;
    pool->n++;
}

static void pool_erase_at(struct pool *pool, size_t i)
{
    memmove(pool->v + i, pool->v + i + 1, (pool->n - i - 1) * sizeof *pool->v);
    pool->n--;
}

static void pool_erase(struct pool *pool, const struct block *b)
{
    size_t i = pool_lower_bound(pool, b->stream, b->size, b->ptr);
    if (i < pool->n && pool->v[i] == b)
        pool_erase_at(pool, i);
}

/* ---- handed-out blocks by address -------------------------------------------------------- */

static size_t hash_ptr(const void *p)
{
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return (size_t)x;
}

static size_t map_slot(const struct ptr_map *m, const void *key)
{
    size_t mask = m->cap - 1, i = hash_ptr(key) & mask;
    while (m->keys[i] && m->keys[i] != key)
        i = (i + 1) & mask;
    return i;
}

static struct block *map_find(const struct ptr_map *m, const void *key)
{
    if (m->cap == 0)
        return NULL;
    size_t i = map_slot(m, key);
    return m->keys[i] ? m->vals[i] : NULL;
}

/* Room for one more entry at a load of at most one half. */
static int map_reserve(struct ptr_map *m)
{
    if (2 * (m->n + 1) <= m->cap)
        return 0;
    size_t cap = m->cap ? 2 * m->cap : 64;
    struct ptr_map bigger = {calloc(cap, sizeof(void *)), calloc(cap, sizeof(struct block *)), cap,
                             0};
    if (!bigger.keys || !bigger.vals) {
        free(bigger.keys);
        free(bigger.vals);
        return HOST_OOM;
    }
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->keys[i])
            continue;
        size_t j = map_slot(&bigger, m->keys[i]);
        bigger.keys[j] = m->keys[i];
        bigger.vals[j] = m->vals[i];
        bigger.n++;
    }
    free(m->keys);
    free(m->vals);
    *m = bigger;
    return 0;
}

/* Cannot fail after map_reserve. */
static void map_insert(struct ptr_map *m, void *key, struct block *b)
{
    size_t i = map_slot(m, key);
    if (!m->keys[i])
        m->n++;
    m->keys[i] = key;
    m->vals[i] = b;
}

/* Removes key (backward-shift deletion keeps probe chains whole); returns its block. */
static struct block *map_remove(struct ptr_map *m, const void *key)
{
    if (m->cap == 0)
        return NULL;
    size_t mask = m->cap - 1, i = map_slot(m, key);
    if (!m->keys[i])
        return NULL;
    struct block *b = m->vals[i];
    m->n--;
    for (size_t j = (i + 1) & mask; m->keys[j]; j = (j + 1) & mask) {
        size_t home = hash_ptr(m->keys[j]) & mask;
        /* Entry j may fill the hole at i unless its home lies cyclically in (i, j]. */
        bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
        if (stays)
            continue;
        m->keys[i] = m->keys[j];
        m->vals[i] = m->vals[j];
        i = j;
    }
    m->keys[i] = NULL;
    m->vals[i] = NULL;
    return b;
}

/* ---- blocks and segments --------------------------------------------------------------- */

static bool is_split(const struct block *b)
{
    return b->prev || b->next;
}

static void delete_block(struct block *b)
{
    b->pool->nblocks--;
    free(b->stream_uses);
    free(b);
}

/* Returns a cached, unsplit block (a whole segment) to the device. */
static void release_block(struct caching_allocator *ca, struct block *b)
{
    struct pool *pool = b->pool;
    pool_erase(pool, b);
    ca->ops.free(ca->ops.ctx, b->ptr, b->size);
    pool_stat_dec(ca->stats.segment, pool, 1);
    pool_stat_dec(ca->stats.reserved_bytes, pool, (int64_t)b->size);
    if (b->size >= ca->max_split_size)
        stat_dec(&ca->stats.oversize_segments, 1);
    delete_block(b);
}

/* Frees every cached block of the pool that is a whole segment. */
static void release_blocks(struct caching_allocator *ca, struct pool *pool)
{
    size_t i = 0;
    while (i < pool->n) {
        struct block *b = pool->v[i];
        if (is_split(b))
            i++;
        else
            release_block(ca, b); /* shifts the rest down to i */
    }
}

/* Merges the free block src into dst (being freed, not in the pool); returns the bytes
 * gained, 0 when src cannot merge. */
static size_t try_merge_blocks(struct block *dst, struct block *src)
{
    if (!src || src->allocated || src->event_count > 0 || src->nuses > 0)
        return 0;
    pool_erase(src->pool, src);
    if (dst->prev == src) { /* [src dst] */
        dst->ptr = src->ptr;
        dst->prev = src->prev;
        if (dst->prev)
            dst->prev->next = dst;
    } else { /* [dst src] */
        dst->next = src->next;
        if (dst->next)
            dst->next->prev = dst;
    }
    size_t subsumed = src->size;
    dst->size += subsumed;
    delete_block(src);
    return subsumed;
}

/* A block nobody uses any more goes back to its pool, merged with free neighbours. */
static void free_block(struct caching_allocator *ca, struct block *b)
{
    struct pool *pool = b->pool;
    size_t original_size = b->size, requested = b->requested_size;
    int64_t net_inactive_blocks = 0, net_inactive_bytes = 0;
    struct block *candidates[2] = {b->prev, b->next};
    for (int i = 0; i < 2; i++) {
        size_t subsumed = try_merge_blocks(b, candidates[i]);
        if (subsumed > 0) {
            net_inactive_blocks -= 1;
            net_inactive_bytes -= (int64_t)subsumed;
        }
    }
    pool_insert(pool, b);
    if (is_split(b)) {
        net_inactive_blocks += 1;
        net_inactive_bytes += (int64_t)b->size;
    }
    pool_stat_add(ca->stats.inactive_split, pool, net_inactive_blocks);
    pool_stat_add(ca->stats.inactive_split_bytes, pool, net_inactive_bytes);
    pool_stat_dec(ca->stats.active, pool, 1);
    pool_stat_dec(ca->stats.active_bytes, pool, (int64_t)original_size);
    pool_stat_dec(ca->stats.requested_bytes, pool, (int64_t)requested);
    b->requested_size = 0;
}

/* ---- events ------------------------------------------------------------------------------ */

/* One event finished: the block returns to its pool when it was the last. */
static void event_done(struct caching_allocator *ca, struct pending_event *e)
{
    ca->ops.event_destroy(ca->ops.ctx, e->event);
    if (--e->block->event_count == 0)
        free_block(ca, e->block);
}

/* At free time, an event on every other stream that used the block. */
static void insert_events(struct caching_allocator *ca, struct block *b)
{
    for (size_t i = 0; i < b->nuses; i++) {
        ca_stream stream = b->stream_uses[i];
        void *event = ca->ops.event_record(ca->ops.ctx, stream);
        if (!event) {
            /* No event: wait for the stream now, then nothing is pending on it. */
            ca->ops.stream_synchronize(ca->ops.ctx, stream);
            continue;
        }
        /* The slot was reserved by record_stream. */
        ca->events[ca->nevents++] = (struct pending_event){stream, event, b};
        b->event_count++;
    }
    ca->nuses -= b->nuses;
    b->nuses = 0;
    if (b->event_count == 0)
        free_block(ca, b);
}

static bool stream_in(const ca_stream *streams, size_t n, ca_stream s)
{
    for (size_t i = 0; i < n; i++)
        if (streams[i] == s)
            return true;
    return false;
}

/* Completed events release their blocks. Each stream's events are taken in order and a
 * stream stops at its first unfinished event (a later one cannot have finished before
 * it), but other streams go on: no head-of-line blocking across streams. */
static void process_events(struct caching_allocator *ca)
{
    ca_stream busy[64];
    size_t nbusy = 0, kept = 0;
    for (size_t i = 0; i < ca->nevents; i++) {
        struct pending_event e = ca->events[i];
        bool wait = stream_in(busy, nbusy, e.stream);
        if (!wait && ca->ops.event_query(ca->ops.ctx, e.event) == 0) {
            wait = true;
            if (nbusy < sizeof busy / sizeof *busy)
                busy[nbusy++] = e.stream;
        }
        if (wait) {
            ca->events[kept++] = e;
            continue;
        }
        event_done(ca, &e);
    }
    ca->nevents = kept;
}

static void synchronize_and_free_events(struct caching_allocator *ca)
{
    for (size_t i = 0; i < ca->nevents; i++) {
        ca->ops.event_synchronize(ca->ops.ctx, ca->events[i].event);
        event_done(ca, &ca->events[i]);
    }
    ca->nevents = 0;
}

/* ---- malloc ------------------------------------------------------------------------------ */

/* Best fit among the cached blocks of the request's pool and stream. */
static struct block *get_free_block(struct caching_allocator *ca, const struct alloc_params *p)
{
    struct pool *pool = p->pool;
    size_t i = pool_lower_bound(pool, p->stream, p->size, NULL);
    if (i == pool->n || pool->v[i]->stream != p->stream)
        return NULL;
    struct block *b = pool->v[i];
    /* Oversized blocks serve only oversized requests, and not much smaller ones. */
    if (p->size < ca->max_split_size && b->size >= ca->max_split_size)
        return NULL;
    if (p->size >= ca->max_split_size && b->size >= p->size + CA_LARGE_BUFFER)
        return NULL;
    pool_erase_at(pool, i);
    return b;
}

/* A new segment from the device. */
static int alloc_block(struct caching_allocator *ca, const struct alloc_params *p, bool is_retry,
                       struct block **out, char *why, size_t why_size)
{
    if (is_retry)
        ca->stats.num_alloc_retries++;
    struct block *b = calloc(1, sizeof *b);
    if (!b || pool_reserve(p->pool, 1) != 0) {
        free(b);
        return HOST_OOM;
    }
    void *ptr = NULL;
    int rc = ca->ops.alloc(ca->ops.ctx, p->alloc_size, &ptr, why, why_size);
    if (rc != CA_OK) {
        free(b);
        return rc == CA_ERR_OOM ? CA_ERR_OOM : CA_ERR_DEVICE;
    }
    *b = (struct block){.ptr = ptr, .size = p->alloc_size, .stream = p->stream, .pool = p->pool};
    p->pool->nblocks++;
    pool_stat_inc(ca->stats.segment, p->pool, 1);
    pool_stat_inc(ca->stats.reserved_bytes, p->pool, (int64_t)p->alloc_size);
    if (p->alloc_size >= ca->max_split_size)
        stat_inc(&ca->stats.oversize_segments, 1);
    *out = b;
    return CA_OK;
}

/* Frees cached oversized blocks of the request's stream, the largest first, until one
 * that fits or enough bytes have gone; false when that is not possible. */
static bool release_available_cached_blocks(struct caching_allocator *ca,
                                            const struct alloc_params *p)
{
    if (ca->max_split_size == CA_MAX_SPLIT_UNLIMITED)
        return false;
    struct pool *pool = p->pool;
    size_t key = p->size < ca->max_split_size ? ca->max_split_size : p->size;
    size_t i = pool_lower_bound(pool, p->stream, key, NULL);
    if (i < pool->n && pool->v[i]->stream == p->stream) {
        struct block *b = pool->v[i];
        if (is_split(b))
            return false;
        release_block(ca, b);
        return true;
    }
    size_t released = 0;
    while (i > 0 && released < key) {
        struct block *b = pool->v[i - 1];
        if (b->size < ca->max_split_size || b->stream != p->stream)
            break;
        i--;
        if (!is_split(b)) {
            released += b->size;
            release_block(ca, b); /* erases index i; lower indices stay */
        }
    }
    return released >= key;
}

/* Waits for all events, then frees every cached unsplit segment of both pools. */
static void release_cached_blocks(struct caching_allocator *ca)
{
    synchronize_and_free_events(ca);
    release_blocks(ca, &ca->large);
    release_blocks(ca, &ca->small);
}

static bool should_split(const struct caching_allocator *ca, const struct block *b, size_t size)
{
    size_t remaining = b->size - size;
    if (b->pool->is_small)
        return remaining >= CA_MIN_BLOCK_SIZE;
    return size < ca->max_split_size && remaining > CA_SMALL_SIZE;
}

/* Hands out b (found in the cache or new), keeping what the request does not need as a
 * free block. On host OOM b goes back to its pool. */
static int alloc_found_block(struct caching_allocator *ca, const struct alloc_params *p,
                             struct block *b, size_t orig_size, void **out)
{
    struct pool *pool = p->pool;
    bool split = should_split(ca, b, p->size);
    struct block *head = NULL;
    if (map_reserve(&ca->allocated) != 0 ||
        (split && (pool_reserve(pool, 1) != 0 || !(head = calloc(1, sizeof *head))))) {
        pool_insert(pool, b);
        return HOST_OOM;
    }
    bool already_split = is_split(b);
    if (split) {
        /* head takes the front p->size bytes; b keeps the rest and stays cached. */
        struct block *remaining = b;
        *head = (struct block){.ptr = b->ptr, .size = p->size, .stream = p->stream, .pool = pool,
                               .prev = b->prev, .next = remaining};
        if (head->prev)
            head->prev->next = head;
        remaining->prev = head;
        remaining->ptr += p->size;
        remaining->size -= p->size;
        pool->nblocks++;
        pool_insert(pool, remaining);
        if (already_split) {
            pool_stat_dec(ca->stats.inactive_split_bytes, pool, (int64_t)head->size);
        } else {
            pool_stat_inc(ca->stats.inactive_split_bytes, pool, (int64_t)remaining->size);
            pool_stat_inc(ca->stats.inactive_split, pool, 1);
        }
        b = head;
    } else if (already_split) {
        pool_stat_dec(ca->stats.inactive_split_bytes, pool, (int64_t)b->size);
        pool_stat_dec(ca->stats.inactive_split, pool, 1);
    }
    b->allocated = true;
    b->requested_size = orig_size;
    map_insert(&ca->allocated, b->ptr, b);
    pool_stat_inc(ca->stats.allocation, pool, 1);
    pool_stat_inc(ca->stats.allocated_bytes, pool, (int64_t)b->size);
    pool_stat_inc(ca->stats.active, pool, 1);
    pool_stat_inc(ca->stats.active_bytes, pool, (int64_t)b->size);
    pool_stat_inc(ca->stats.requested_bytes, pool, (int64_t)orig_size);
    if (b->size >= ca->max_split_size)
        stat_inc(&ca->stats.oversize_allocations, 1);
    *out = b->ptr;
    return CA_OK;
}

/* PyTorch's out-of-memory message (without its PYTORCH_CUDA_ALLOC_CONF hint). */
static void oom_message(struct caching_allocator *ca, size_t alloc_size, char *why,
                        size_t why_size)
{
    size_t dev_free = 0, dev_total = 0;
    if (ca->ops.mem_info)
        ca->ops.mem_info(ca->ops.ctx, &dev_free, &dev_total);
    uint64_t allocated = (uint64_t)ca->stats.allocated_bytes[CA_STAT_ALL].current;
    uint64_t reserved = (uint64_t)ca->stats.reserved_bytes[CA_STAT_ALL].current;
    char want[32], total[32], avail[32], alloc[32], unused[32];
    snprintf(why, why_size,
             "CUDA out of memory. Tried to allocate %s. GPU %d has a total capacity of %s of "
             "which %s is free. Of the allocated memory %s is allocated by weft, and %s is "
             "reserved by weft but unallocated.",
             caching_allocator_format_size(alloc_size, want, sizeof want), ca->device,
             caching_allocator_format_size(dev_total, total, sizeof total),
             caching_allocator_format_size(dev_free, avail, sizeof avail),
             caching_allocator_format_size(allocated, alloc, sizeof alloc),
             caching_allocator_format_size(reserved - allocated, unused, sizeof unused));
}

/* A new segment, after freeing cached memory when the device has none left. */
static int obtain_block(struct caching_allocator *ca, const struct alloc_params *p,
                        struct block **out, char *why, size_t why_size)
{
    int rc = alloc_block(ca, p, false, out, why, why_size);
    if (rc == CA_ERR_OOM && release_available_cached_blocks(ca, p))
        rc = alloc_block(ca, p, false, out, why, why_size);
    if (rc == CA_ERR_OOM) {
        release_cached_blocks(ca);
        rc = alloc_block(ca, p, true, out, why, why_size);
    }
    return rc;
}

static int finish_error(struct caching_allocator *ca, int rc, size_t alloc_size, char *why,
                        size_t why_size)
{
    if (rc == HOST_OOM) {
        snprintf(why, why_size, "CUDA caching allocator: out of host memory for its bookkeeping");
        return CA_ERR_OOM;
    }
    if (rc == CA_ERR_OOM) {
        ca->stats.num_ooms++;
        oom_message(ca, alloc_size, why, why_size);
    }
    return rc;
}

int caching_allocator_malloc(struct caching_allocator *ca, size_t size, ca_stream stream,
                             void **out, char *why, size_t why_size)
{
    *out = NULL;
    pthread_mutex_lock(&ca->lock);
    int rc;
    if (size > MAX_REQUEST) {
        rc = finish_error(ca, CA_ERR_OOM, size, why, why_size);
        goto done;
    }
    process_events(ca);
    struct alloc_params p = {.size = caching_allocator_round_size(size), .stream = stream};
    p.pool = caching_allocator_is_small(p.size) ? &ca->small : &ca->large;
    p.alloc_size = caching_allocator_segment_size(p.size);
    struct block *b = get_free_block(ca, &p);
    rc = CA_OK;
    if (b)
        ca->stats.num_cache_hits++;
    else
        rc = obtain_block(ca, &p, &b, why, why_size);
    if (rc == CA_OK)
        rc = alloc_found_block(ca, &p, b, size, out);
    if (rc != CA_OK)
        rc = finish_error(ca, rc, p.alloc_size, why, why_size);
done:
    pthread_mutex_unlock(&ca->lock);
    return rc;
}

/* ---- free and streams -------------------------------------------------------------------- */

int caching_allocator_free(struct caching_allocator *ca, void *ptr)
{
    if (!ptr)
        return CA_OK;
    pthread_mutex_lock(&ca->lock);
    struct block *b = map_remove(&ca->allocated, ptr);
    if (b) {
        b->allocated = false;
        pool_stat_dec(ca->stats.allocation, b->pool, 1);
        pool_stat_dec(ca->stats.allocated_bytes, b->pool, (int64_t)b->size);
        if (b->size >= ca->max_split_size)
            stat_dec(&ca->stats.oversize_allocations, 1);
        if (b->nuses > 0)
            insert_events(ca, b);
        else
            free_block(ca, b);
    }
    pthread_mutex_unlock(&ca->lock);
    return b ? CA_OK : CA_ERR_INVALID;
}

/* Room for one more use of b and for the event it will become. */
static int reserve_use(struct caching_allocator *ca, struct block *b)
{
    if (b->nuses == b->cap_uses) {
        size_t cap = b->cap_uses ? 2 * b->cap_uses : 4;
        ca_stream *v = realloc(b->stream_uses, cap * sizeof *v);
        if (!v)
            return CA_ERR_OOM;
        b->stream_uses = v;
        b->cap_uses = cap;
    }
    size_t need = ca->nevents + ca->nuses + 1;
    if (need > ca->cap_events) {
        size_t cap = ca->cap_events ? 2 * ca->cap_events : 16;
        while (cap < need)
            cap *= 2;
        struct pending_event *v = realloc(ca->events, cap * sizeof *v);
        if (!v)
            return CA_ERR_OOM;
        ca->events = v;
        ca->cap_events = cap;
    }
    return CA_OK;
}

int caching_allocator_record_stream(struct caching_allocator *ca, void *ptr, ca_stream stream)
{
    pthread_mutex_lock(&ca->lock);
    int rc = CA_OK;
    struct block *b = map_find(&ca->allocated, ptr);
    if (!b)
        rc = CA_ERR_INVALID;
    else if (stream != b->stream && !stream_in(b->stream_uses, b->nuses, stream)) {
        rc = reserve_use(ca, b);
        if (rc == CA_OK) {
            b->stream_uses[b->nuses++] = stream;
            ca->nuses++;
        }
    }
    pthread_mutex_unlock(&ca->lock);
    return rc;
}

void caching_allocator_empty_cache(struct caching_allocator *ca)
{
    pthread_mutex_lock(&ca->lock);
    release_cached_blocks(ca);
    pthread_mutex_unlock(&ca->lock);
}

/* ---- statistics ------------------------------------------------------------------------- */

void caching_allocator_get_stats(struct caching_allocator *ca, struct ca_stats *out)
{
    pthread_mutex_lock(&ca->lock);
    *out = ca->stats;
    pthread_mutex_unlock(&ca->lock);
}

/* Calls fn on every struct ca_stat of s. */
static void each_stat(struct ca_stats *s, void (*fn)(struct ca_stat *))
{
    struct ca_stat *arrays[] = {s->allocation,      s->segment,         s->active,
                                s->inactive_split,  s->allocated_bytes, s->reserved_bytes,
                                s->active_bytes,    s->inactive_split_bytes,
                                s->requested_bytes};
    for (size_t a = 0; a < sizeof arrays / sizeof *arrays; a++)
        for (int t = 0; t < CA_STAT_TYPES; t++)
            fn(&arrays[a][t]);
    fn(&s->oversize_allocations);
    fn(&s->oversize_segments);
}

static void reset_peak(struct ca_stat *s)
{
    s->peak = s->current;
}

static void reset_accumulated(struct ca_stat *s)
{
    s->allocated = 0;
    s->freed = 0;
}

void caching_allocator_reset_peak_stats(struct caching_allocator *ca)
{
    pthread_mutex_lock(&ca->lock);
    each_stat(&ca->stats, reset_peak);
    pthread_mutex_unlock(&ca->lock);
}

void caching_allocator_reset_accumulated_stats(struct caching_allocator *ca)
{
    pthread_mutex_lock(&ca->lock);
    each_stat(&ca->stats, reset_accumulated);
    ca->stats.num_alloc_retries = 0;
    ca->stats.num_ooms = 0;
    ca->stats.num_cache_hits = 0;
    pthread_mutex_unlock(&ca->lock);
}

/* ---- segments: snapshot and teardown -------------------------------------------------- */

static int cmp_block_ptr(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)(*(struct block *const *)a)->ptr;
    uintptr_t y = (uintptr_t)(*(struct block *const *)b)->ptr;
    return (x > y) - (x < y);
}

static struct block *segment_head(struct block *b)
{
    while (b->prev)
        b = b->prev;
    return b;
}

/* The first block of every segment, in address order. Every block is cached (in a
 * pool), handed out (in the map) or waiting (in the event list), so walking from those
 * to the front finds every segment. Caller frees *out. */
static int collect_segments(struct caching_allocator *ca, struct block ***out, size_t *n)
{
    /* A waiting block appears once per pending event, hence the extra room. */
    size_t room = ca->small.nblocks + ca->large.nblocks + ca->nevents, k = 0;
    struct block **heads = malloc((room ? room : 1) * sizeof *heads);
    if (!heads)
        return CA_ERR_OOM;
    struct pool *pools[2] = {&ca->small, &ca->large};
    for (int p = 0; p < 2; p++)
        for (size_t i = 0; i < pools[p]->n; i++)
            heads[k++] = segment_head(pools[p]->v[i]);
    for (size_t i = 0; i < ca->allocated.cap; i++)
        if (ca->allocated.keys[i])
            heads[k++] = segment_head(ca->allocated.vals[i]);
    for (size_t i = 0; i < ca->nevents; i++)
        heads[k++] = segment_head(ca->events[i].block);
    qsort(heads, k, sizeof *heads, cmp_block_ptr);
    size_t unique = 0;
    for (size_t i = 0; i < k; i++)
        if (unique == 0 || heads[unique - 1] != heads[i])
            heads[unique++] = heads[i];
    *out = heads;
    *n = unique;
    return CA_OK;
}

int caching_allocator_snapshot(struct caching_allocator *ca, struct ca_block_info **out,
                               size_t *n)
{
    pthread_mutex_lock(&ca->lock);
    struct block **heads = NULL;
    size_t nheads = 0, total = ca->small.nblocks + ca->large.nblocks, k = 0;
    struct ca_block_info *info = malloc((total ? total : 1) * sizeof *info);
    int rc = info ? collect_segments(ca, &heads, &nheads) : CA_ERR_OOM;
    for (size_t s = 0; rc == CA_OK && s < nheads; s++) {
        size_t seg_size = 0;
        for (struct block *b = heads[s]; b; b = b->next)
            seg_size += b->size;
        for (struct block *b = heads[s]; b; b = b->next)
            info[k++] = (struct ca_block_info){
                .ptr = b->ptr, .size = b->size, .requested_size = b->requested_size,
                .segment = heads[s]->ptr, .segment_size = seg_size, .stream = b->stream,
                .small_pool = b->pool->is_small, .allocated = b->allocated,
                .pending = !b->allocated && (b->event_count > 0 || b->nuses > 0)};
    }
    pthread_mutex_unlock(&ca->lock);
    free(heads);
    if (rc != CA_OK) {
        free(info);
        return rc;
    }
    *out = info;
    *n = k;
    return CA_OK;
}

struct caching_allocator *caching_allocator_new(const struct caching_allocator_config *cfg)
{
    struct caching_allocator *ca = calloc(1, sizeof *ca);
    if (!ca)
        return NULL;
    if (pthread_mutex_init(&ca->lock, NULL) != 0) {
        free(ca);
        return NULL;
    }
    ca->device = cfg->device;
    ca->max_split_size = cfg->max_split_size ? cfg->max_split_size : CA_MAX_SPLIT_UNLIMITED;
    ca->ops = cfg->ops;
    ca->small.is_small = true;
    return ca;
}

void caching_allocator_destroy(struct caching_allocator *ca)
{
    if (!ca)
        return;
    pthread_mutex_lock(&ca->lock);
    synchronize_and_free_events(ca);
    struct block **heads = NULL;
    size_t nheads = 0;
    if (collect_segments(ca, &heads, &nheads) == CA_OK) {
        for (size_t s = 0; s < nheads; s++) {
            size_t seg_size = 0;
            for (struct block *b = heads[s]; b; b = b->next)
                seg_size += b->size;
            void *base = heads[s]->ptr;
            for (struct block *b = heads[s], *next; b; b = next) {
                next = b->next;
                delete_block(b);
            }
            ca->ops.free(ca->ops.ctx, base, seg_size);
        }
    }
    free(heads);
    free(ca->small.v);
    free(ca->large.v);
    free(ca->allocated.keys);
    free(ca->allocated.vals);
    free(ca->events);
    pthread_mutex_unlock(&ca->lock);
    pthread_mutex_destroy(&ca->lock);
    free(ca);
}

/* ---- memory_summary ---------------------------------------------------------------------- */

struct text {
    char *buf;
    size_t len, cap;
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
        int n = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->failed = true;
            return;
        }
        if ((size_t)n < t->cap - t->len) {
            t->len += (size_t)n;
            return;
        }
        size_t cap = 2 * t->cap + (size_t)n;
        char *buf = realloc(t->buf, cap);
        if (!buf) {
            t->failed = true;
            return;
        }
        t->buf = buf;
        t->cap = cap;
    }
}

/* torch.cuda.memory_summary's _format_size: value and unit chosen by the pool's value
 * for the same column (pref), so a column's rows share a unit. 10 characters. */
static void format_bytes_cell(char *cell, size_t size, int64_t value, int64_t pref)
{
    static const char *const units[] = {"B  ", "KiB", "MiB", "GiB", "TiB", "PiB"};
    int u = 0;
    double p = (double)pref;
    while (u < 5 && p >= 768.0 * 1024.0) {
        value /= 1024;
        p /= 1024.0;
        u++;
    }
    snprintf(cell, size, "%6" PRId64 " %s", value, units[u]);
}

/* _format_count: "%7d" and a K/M suffix, 10 characters. */
static void format_count_cell(char *cell, size_t size, int64_t value, int64_t pref)
{
    static const char *const units[] = {" ", "K", "M"};
    int u = 0;
    double p = (double)pref;
    while (u < 2 && p >= 750.0 * 1000.0) {
        value /= 1000;
        p /= 1000.0;
        u++;
    }
    snprintf(cell, size, "%7" PRId64 " %s ", value, units[u]);
}

typedef void (*cell_fn)(char *cell, size_t size, int64_t value, int64_t pref);

static void summary_row(struct text *t, const char *name, const struct ca_stat *s,
                        const struct ca_stat *pref, cell_fn fmt)
{
    char cells[4][32];
    fmt(cells[0], sizeof cells[0], s->current, pref->current);
    fmt(cells[1], sizeof cells[1], s->peak, pref->peak);
    fmt(cells[2], sizeof cells[2], s->allocated, pref->allocated);
    fmt(cells[3], sizeof cells[3], s->freed, pref->freed);
    text_add(t, "| %-21s | %s | %s | %s | %s |\n", name, cells[0], cells[1], cells[2], cells[3]);
}

#define RULE_EQ "|===========================================================================|\n"
#define RULE_DASH "|---------------------------------------------------------------------------|\n"

char *caching_allocator_summary(struct caching_allocator *ca, bool abbreviated)
{
    struct ca_stats s;
    caching_allocator_get_stats(ca, &s);
    struct {
        const char *name;
        const struct ca_stat *stat;
        cell_fn fmt;
    } metrics[] = {
        {"Allocated memory", s.allocated_bytes, format_bytes_cell},
        {"Active memory", s.active_bytes, format_bytes_cell},
        {"Requested memory", s.requested_bytes, format_bytes_cell},
        {"GPU reserved memory", s.reserved_bytes, format_bytes_cell},
        {"Non-releasable memory", s.inactive_split_bytes, format_bytes_cell},
        {"Allocations", s.allocation, format_count_cell},
        {"Active allocs", s.active, format_count_cell},
        {"GPU reserved segments", s.segment, format_count_cell},
        {"Non-releasable allocs", s.inactive_split, format_count_cell},
    };
    struct text t = {malloc(8192), 0, 8192, false};
    if (!t.buf)
        return NULL;
    text_add(&t, RULE_EQ);
    text_add(&t, "| %19s weft CUDA memory summary, device ID %-17d |\n", "", ca->device);
    text_add(&t, RULE_DASH);
    text_add(&t, "|  %9s CUDA OOMs: %-12" PRId64 " | %6s cudaMalloc retries: %-8" PRId64 "  |\n",
             "", s.num_ooms, "", s.num_alloc_retries);
    text_add(&t, RULE_EQ);
    text_add(&t, "|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |\n");
    for (size_t m = 0; m < sizeof metrics / sizeof *metrics; m++) {
        const struct ca_stat *all = &metrics[m].stat[CA_STAT_ALL];
        text_add(&t, RULE_DASH);
        summary_row(&t, metrics[m].name, all, all, metrics[m].fmt);
        if (abbreviated)
            continue;
        summary_row(&t, "      from large pool", &metrics[m].stat[CA_STAT_LARGE], all,
                    metrics[m].fmt);
        summary_row(&t, "      from small pool", &metrics[m].stat[CA_STAT_SMALL], all,
                    metrics[m].fmt);
    }
    text_add(&t, RULE_DASH);
    summary_row(&t, "Oversize allocations", &s.oversize_allocations, &s.oversize_allocations,
                format_count_cell);
    text_add(&t, RULE_DASH);
    summary_row(&t, "Oversize GPU segments", &s.oversize_segments, &s.oversize_segments,
                format_count_cell);
    text_add(&t, RULE_EQ);
    if (t.failed) {
        free(t.buf);
        return NULL;
    }
    return t.buf;
}
