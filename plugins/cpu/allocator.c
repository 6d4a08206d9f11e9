/* plugins/cpu/allocator.c: a caching host allocator.
 *
 * Requests are rounded up to a size class, and freed blocks wait on a free list per class
 * for the next request of that class. A training step allocates the same sizes every
 * iteration, so after the first one every request is served from the cache with pages
 * that are already mapped and warm: no page faults, no zeroing by the kernel, no trips
 * through malloc's locks.
 *
 * Size classes: up to 4 KiB, multiples of 64 bytes; above, 8 classes per power of two
 * (at most 12.5% rounding). The free list links live inside the free blocks, so a block
 * carries no header and keeps its 64-byte alignment; cpu_free gets the requested size
 * back from the core and recomputes the class.
 *
 * Blocks of 1-2 MiB are mmap'd rather than malloc'd: they go back to the system the
 * moment the cache is emptied (glibc keeps freed heap memory and fragments it).
 *
 * Requests of 2 MiB and more (a deep model's activations and gradients) come from
 * segments, with PyTorch's caching allocator (plugins/cuda/caching_allocator.c, plain C
 * over function pointers: here mmap and munmap): best fit, a cached block split when the
 * rest is worth keeping, freed neighbours merged. A free list per size class cannot hand
 * a freed [B, T, 4C] block to a [B, T, C] request, so a GPT's backward, whose gradients
 * come in other sizes than the activations it frees, grew the cache by a third over what
 * tensors held (GPT-2 small's width, 4 layers: 1907 MiB reserved for a 1416 MiB peak);
 * segments bring that near what tensors hold. Smaller blocks keep their size classes:
 * a class's free list hands back the block freed last, still in a core's L2 (2 MiB
 * here), where best fit hands out the lowest address of the size, often cold. Segments
 * from 1 MiB made the MNIST CNN train 6% slower (its 1.6 MB activations), and from
 * 10 MiB GPT-2 small's 2-9 MiB weight gradients grew its reserve by 18% (4956 against
 * 4189 MiB at 4 x 1024). Segments are aligned to 2 MiB and marked MADV_HUGEPAGE, so
 * transparent huge pages back them even where THP is in "madvise" mode; strided kernels
 * (transposes) touch a new 4 KiB page every few elements and are bound by TLB misses
 * otherwise. Cached segments stay until empty_cache or a failed request (as on CUDA),
 * outside the bound below.
 *
 * The cache is bounded (a quarter of physical memory, or WEFT_CPU_CACHE_LIMIT bytes):
 * a block freed past the bound goes straight back to the system. When the system
 * refuses a request, the cache is emptied and the request retried once.
 *
 * Thread caches. A tiny op's alloc/free pair through the pool's lock was an eighth of
 * its cost, so small blocks (up to 1 KiB) freed by a thread first wait on that thread's
 * own lists (at most 32 KiB per class), and its next request of the class takes one back
 * with no lock and no atomic instruction. What a thread counts on its own (requests,
 * frees, and the bytes it handed out less those it took back) is summed by
 * cpu_memory_stats, so the figures it reads are exact whenever the other threads are not
 * allocating; a thread's byte balance joins the pool's atomic total whenever it passes
 * 64 KiB either way, and the peak is taken there and at every reading, so it misses at
 * most 64 KiB per thread of a short-lived high. At a thread's exit its counts and its
 * blocks go to the pool. empty_cache empties the calling thread's lists and, through a
 * generation number, every other thread's at its next allocation or free.
 *
 * Statistics per pool (cpu_memory_detail, for memory_summary's table): the large pool is
 * the blocks of 1 MiB and more, the small pool the rest, as PyTorch's CUDA pools divide
 * at 1 MiB. The large pool's figures and the small pool's blocks served under the lock
 * are counted under it; the thread lists' are their threads' own counts (requests,
 * frees, bytes handed out), and the small pool's bytes and blocks in use are the totals
 * less the large pool's, with peaks taken where the totals' are.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cpu.h"
#include "../cuda/caching_allocator.h"

#define SMALL_LIMIT 4096u
#define SMALL_STEP 64u
#define SMALL_CLASSES (SMALL_LIMIT / SMALL_STEP)
#define SUBCLASSES 8 /* per power of two above SMALL_LIMIT */
#define NUM_CLASSES (SMALL_CLASSES + SUBCLASSES * 52)
#define MMAP_THRESHOLD ((size_t)1 << 20)
#define HUGE_PAGE ((size_t)2 << 20)
#define SEGMENT_MIN HUGE_PAGE /* requests from here on come from segments */

struct free_block {
    struct free_block *next;
};

/* Classes up to 1 KiB: that keeps this file's thread-locals (struct thread_cache) under
 * the 512 bytes of static TLS glibc lends a dlopen()ed module, whose thread-locals then
 * cost two instructions to find rather than a call into _dl_tlsdesc_dynamic (6% of a
 * tiny op). */
#define THREAD_CLASSES 16u
#define THREAD_LIST_BYTES (32u << 10)
#define THREAD_BALANCE_LIMIT ((int64_t)64 << 10)

/* The counts a thread makes on its own lists (written by it alone, read under the pool's
 * lock by cpu_memory_stats: relaxed atomics). */
struct thread_counts {
    uint64_t num_allocs, num_frees;
    uint64_t bytes_in; /* bytes handed out */
    int64_t balance; /* bytes handed out less bytes taken back, not yet in the pool's total */
    int64_t flushed_blocks; /* num_allocs - num_frees when the balance last joined the total */
    struct thread_counts *prev, *next; /* the pool's list of live threads */
};

/* A pool's figures (index WEFT_MEMORY_POOL_LARGE or _SMALL), under the lock; the small
 * pool's bytes and blocks exclude the thread lists' (see above). */
struct pool_figures {
    struct weft_memory_stat bytes, blocks, reserved, segments;
};

static struct {
    pthread_mutex_t lock;
    struct free_block *free[NUM_CLASSES];
    size_t cached_bytes, cache_limit;
    uint64_t segments_mapped; /* segment_map calls: a request that made one missed */
    struct weft_memory_stats stats; /* allocated and peak: atomics; the rest: the lock's */
    struct thread_counts *threads;
    uint32_t generation; /* bumped by empty_cache */
    struct pool_figures pools[WEFT_MEMORY_POOLS]; /* [ALL]: segments and their peak only */
    /* Atomics: the blocks handed out (as allocated_bytes counts bytes), its peak, and the
     * small pool's peaks (the totals less the large pool's current figures). */
    int64_t live_blocks, peak_live_blocks, small_peak_bytes, small_peak_blocks;
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER};

struct thread_cache {
    struct free_block *head[THREAD_CLASSES];
    uint32_t bytes[THREAD_CLASSES];
    uint32_t generation;
    uint8_t state; /* 0 new, 1 in use (registered), 2 its thread has exited */
    struct thread_counts counts;
};

static __thread struct thread_cache tcache;
static pthread_key_t tcache_key;
static pthread_once_t tcache_once = PTHREAD_ONCE_INIT;

/* The class of a request and the bytes that class holds. */
static int size_class(size_t n, size_t *class_bytes)
{
    if (n <= SMALL_LIMIT) {
        int idx = n == 0 ? 0 : (int)((n + SMALL_STEP - 1) / SMALL_STEP) - 1;
        *class_bytes = (size_t)(idx + 1) * SMALL_STEP;
        return idx;
    }
    int k = 63 - __builtin_clzll((unsigned long long)(n - 1)); /* 2^k < n <= 2^(k+1) */
    size_t step = (size_t)1 << (k - 3);
    size_t m = (n + step - 1) / step; /* 9..16 */
    *class_bytes = m * step;
    return (int)SMALL_CLASSES + (k - 12) * SUBCLASSES + (int)(m - 9);
}

/* The bytes class c holds (the inverse of size_class). */
static size_t class_bytes(int c)
{
    if (c < (int)SMALL_CLASSES)
        return (size_t)(c + 1) * SMALL_STEP;
    int k = 12 + (c - (int)SMALL_CLASSES) / SUBCLASSES;
    size_t m = 9 + (size_t)((c - (int)SMALL_CLASSES) % SUBCLASSES);
    return m << (k - 3);
}

static int pool_of(size_t class_bytes)
{
    return class_bytes >= MMAP_THRESHOLD ? WEFT_MEMORY_POOL_LARGE : WEFT_MEMORY_POOL_SMALL;
}

/* stat.current += delta, and its totals and peak; caller holds the lock. */
static void stat_add(struct weft_memory_stat *st, int64_t delta)
{
    /* current is read without the lock by note_peak */
    int64_t now = __atomic_load_n(&st->current, __ATOMIC_RELAXED) + delta;
    __atomic_store_n(&st->current, now, __ATOMIC_RELAXED);
    if (delta > 0)
        st->allocated += delta;
    else
        st->freed -= delta;
    if (now > st->peak)
        st->peak = now;
}

/* Memory from (delta > 0) or back to the system, in blocks of class_bytes; caller holds
 * the lock. */
static void note_reserved(size_t class_bytes, int64_t blocks)
{
    struct pool_figures *f = &pool.pools[pool_of(class_bytes)];
    stat_add(&f->reserved, blocks * (int64_t)class_bytes);
    stat_add(&f->segments, blocks);
    stat_add(&pool.pools[WEFT_MEMORY_POOL_ALL].segments, blocks);
    pool.stats.reserved_bytes += (uint64_t)(blocks * (int64_t)class_bytes);
    if (pool.stats.reserved_bytes > pool.stats.peak_reserved_bytes)
        pool.stats.peak_reserved_bytes = pool.stats.reserved_bytes;
}

/* Bytes actually mapped for a large block: whole huge pages from 2 MiB on. */
static size_t mapped_bytes(size_t class_bytes)
{
    if (class_bytes < HUGE_PAGE)
        return class_bytes;
    return (class_bytes + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
}

static void *map_large(size_t class_bytes)
{
    size_t len = mapped_bytes(class_bytes);
    if (len < HUGE_PAGE) {
        void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        return p == MAP_FAILED ? NULL : p;
    }
    /* Map a huge page more than needed, then trim both ends to a 2 MiB boundary. */
    size_t span = len + HUGE_PAGE;
    char *raw = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED)
        return NULL;
    char *start = (char *)(((uintptr_t)raw + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    size_t head = (size_t)(start - raw), tail = span - head - len;
    if (head)
        munmap(raw, head);
    if (tail)
        munmap(start + len, tail);
#ifdef MADV_HUGEPAGE
    madvise(start, len, MADV_HUGEPAGE);
#endif
    return start;
}

static void *system_alloc(size_t class_bytes)
{
    if (class_bytes >= MMAP_THRESHOLD)
        return map_large(class_bytes);
    return aligned_alloc(64, class_bytes);
}

static void system_free(void *p, size_t class_bytes)
{
    if (class_bytes >= MMAP_THRESHOLD)
        munmap(p, mapped_bytes(class_bytes));
    else
        free(p);
}

static size_t default_cache_limit(void)
{
    const char *env = getenv("WEFT_CPU_CACHE_LIMIT");
    if (env && *env) {
        char *end;
        unsigned long long v = strtoull(env, &end, 10);
        if (*end == '\0')
            return (size_t)v;
    }
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page <= 0)
        return (size_t)1 << 30;
    return (size_t)pages * (size_t)page / 4;
}

/* Frees every cached block; the caller holds the lock. */
static void release_cache_locked(void)
{
    for (int c = 0; c < NUM_CLASSES; c++) {
        struct free_block *b = pool.free[c];
        if (!b)
            continue;
        size_t bytes = class_bytes(c);
        while (b) {
            struct free_block *next = b->next;
            system_free(b, bytes);
            note_reserved(bytes, -1);
            b = next;
        }
        pool.free[c] = NULL;
    }
    pool.cached_bytes = 0;
}

/* *peak = max(itself, now), without the lock. */
static void note_max(int64_t *peak, int64_t now)
{
    int64_t p = __atomic_load_n(peak, __ATOMIC_RELAXED);
    while (now > p && !__atomic_compare_exchange_n(peak, &p, now, true, __ATOMIC_RELAXED,
                                                   __ATOMIC_RELAXED))
        ;
}

/* The peaks of the bytes in use (now) and of the small pool's, without the lock. The
 * pool's own total can be below zero for a while (a thread returned bytes that another,
 * which handed them out, has not added yet): such a reading is no peak. */
static void note_peak(uint64_t now)
{
    if ((int64_t)now < 0)
        return;
    uint64_t peak = __atomic_load_n(&pool.stats.peak_allocated_bytes, __ATOMIC_RELAXED);
    while (now > peak && !__atomic_compare_exchange_n(&pool.stats.peak_allocated_bytes, &peak, now,
                                                      true, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
    int64_t large = __atomic_load_n(&pool.pools[WEFT_MEMORY_POOL_LARGE].bytes.current,
                                    __ATOMIC_RELAXED);
    note_max(&pool.small_peak_bytes, (int64_t)now - large);
}

/* The same for the blocks in use. */
static void note_blocks(int64_t delta)
{
    int64_t now = __atomic_add_fetch(&pool.live_blocks, delta, __ATOMIC_RELAXED);
    if (now < 0)
        return;
    note_max(&pool.peak_live_blocks, now);
    int64_t large = __atomic_load_n(&pool.pools[WEFT_MEMORY_POOL_LARGE].blocks.current,
                                    __ATOMIC_RELAXED);
    note_max(&pool.small_peak_blocks, now - large);
}

/* allocated_bytes += delta (a signed byte count) and its peak, without the lock. */
static void note_allocated(int64_t delta)
{
    note_peak(__atomic_add_fetch(&pool.stats.allocated_bytes, (uint64_t)delta, __ATOMIC_RELAXED));
}

/* A thread's blocks in use join the total with its bytes (balance_add, at its exit). */
static void flush_blocks(struct thread_counts *t)
{
    int64_t live = (int64_t)(t->num_allocs - t->num_frees);
    note_blocks(live - t->flushed_blocks);
    __atomic_store_n(&t->flushed_blocks, live, __ATOMIC_RELAXED); /* read by the statistics */
}

/* Relaxed updates of counters only their own thread writes (and others read). */
static void count_up(uint64_t *counter)
{
    __atomic_store_n(counter, __atomic_load_n(counter, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
}

/* A thread's balance b joins the pool's totals, with its blocks: out of line, so that
 * balance_add stays inlined in the lock-free paths (with this inside, it was not: 21
 * instructions more per alloc and free pair). */
static __attribute__((noinline)) void balance_flush(struct thread_counts *t, int64_t b)
{
    note_allocated(b);
    flush_blocks(t);
}

static inline void balance_add(struct thread_counts *t, int64_t delta)
{
    int64_t b = __atomic_load_n(&t->balance, __ATOMIC_RELAXED) + delta;
    if (__builtin_expect(b > THREAD_BALANCE_LIMIT || b < -THREAD_BALANCE_LIMIT, 0)) {
        balance_flush(t, b);
        b = 0;
    }
    __atomic_store_n(&t->balance, b, __ATOMIC_RELAXED);
}

/* A block of `bytes` handed out (+1) or taken back (-1) under the lock: its pool's
 * figures (in use now: atomics, which note_peak reads without the lock) and the totals. */
static void note_block_locked(size_t bytes, int dir)
{
    struct pool_figures *f = &pool.pools[pool_of(bytes)];
    stat_add(&f->bytes, dir * (int64_t)bytes);
    stat_add(&f->blocks, dir);
    note_allocated(dir * (int64_t)bytes);
    note_blocks(dir);
}

/* Caller holds the lock. */
static void note_allocation(size_t bytes, bool from_cache)
{
    pool.stats.num_allocs++;
    note_block_locked(bytes, 1);
    if (from_cache) {
        pool.stats.num_cache_hits++;
        return;
    }
    note_reserved(bytes, 1);
}

/* Moves the thread's cached blocks to the pool's lists (to_system: back to the system
 * instead); caller holds the lock. Returns the bytes moved. */
static size_t thread_cache_empty_locked(struct thread_cache *tc, bool to_system)
{
    size_t moved = 0;
    for (int c = 0; c < (int)THREAD_CLASSES; c++) {
        size_t bytes = class_bytes(c);
        struct free_block *b = tc->head[c];
        while (b) {
            struct free_block *next = b->next;
            if (to_system) {
                system_free(b, bytes);
                note_reserved(bytes, -1);
            } else {
                b->next = pool.free[c];
                pool.free[c] = b;
                pool.cached_bytes += bytes;
            }
            b = next;
        }
        moved += tc->bytes[c];
        tc->head[c] = NULL;
        tc->bytes[c] = 0;
    }
    return moved;
}

/* At thread exit: the blocks and counts go to the pool. */
static void thread_cache_exit(void *unused)
{
    (void)unused;
    struct thread_cache *tc = &tcache;
    pthread_mutex_lock(&pool.lock);
    thread_cache_empty_locked(tc, false);
    pool.stats.num_allocs += tc->counts.num_allocs;
    pool.stats.num_cache_hits += tc->counts.num_allocs; /* every lock-free request is a hit */
    pool.stats.num_frees += tc->counts.num_frees;
    struct pool_figures *small = &pool.pools[WEFT_MEMORY_POOL_SMALL];
    small->blocks.allocated += (int64_t)tc->counts.num_allocs;
    small->blocks.freed += (int64_t)tc->counts.num_frees;
    small->bytes.allocated += (int64_t)tc->counts.bytes_in;
    note_allocated(tc->counts.balance);
    flush_blocks(&tc->counts);
    tc->counts.balance = 0;
    if (tc->counts.prev)
        tc->counts.prev->next = tc->counts.next;
    else
        pool.threads = tc->counts.next;
    if (tc->counts.next)
        tc->counts.next->prev = tc->counts.prev;
    pthread_mutex_unlock(&pool.lock);
    tc->state = 2;
}

static void thread_cache_key_init(void)
{
    pthread_key_create(&tcache_key, thread_cache_exit);
}

/* Whether this thread's lists may be used now: registers a new thread (its exit then
 * returns them), and empties them when empty_cache ran since. */
static __attribute__((noinline)) bool thread_cache_ready(struct thread_cache *tc)
{
    if (tc->state == 2)
        return false;
    uint32_t gen = __atomic_load_n(&pool.generation, __ATOMIC_RELAXED);
    if (tc->state == 0) {
        pthread_once(&tcache_once, thread_cache_key_init);
        if (pthread_setspecific(tcache_key, (void *)1) != 0)
            return false;
        pthread_mutex_lock(&pool.lock);
        tc->counts.prev = NULL;
        tc->counts.next = pool.threads;
        if (pool.threads)
            pool.threads->prev = &tc->counts;
        pool.threads = &tc->counts;
        pthread_mutex_unlock(&pool.lock);
        tc->generation = gen;
        tc->state = 1;
    }
    if (tc->generation != gen) {
        pthread_mutex_lock(&pool.lock);
        thread_cache_empty_locked(tc, true);
        pthread_mutex_unlock(&pool.lock);
        tc->generation = gen;
    }
    return true;
}

/* The thread's list for an n-byte request, or -1 when the pool serves it. */
static inline int thread_class(size_t nbytes)
{
    size_t c = (nbytes - 1) / SMALL_STEP; /* 0 wraps around: the pool's */
    return c < THREAD_CLASSES ? (int)c : -1;
}

static inline bool thread_cache_current(const struct thread_cache *tc)
{
    return tc->state == 1 && tc->generation == __atomic_load_n(&pool.generation, __ATOMIC_RELAXED);
}

/* ---- requests of 2 MiB and more: segments ------------------------------------------- */

static struct caching_allocator *segments;
static pthread_once_t segments_once = PTHREAD_ONCE_INIT;

/* The caching allocator's ops. They run under its lock and take the pool's: the pool's
 * lock is never held while calling the caching allocator. */
static int segment_map(void *ctx, size_t size, void **ptr, char *why, size_t why_size)
{
    (void)ctx, (void)why, (void)why_size;
    *ptr = map_large(size); /* size: a multiple of 2 MiB */
    if (!*ptr)
        return CA_ERR_OOM;
    pthread_mutex_lock(&pool.lock);
    pool.segments_mapped++;
    note_reserved(size, 1); /* one segment of the large pool */
    pthread_mutex_unlock(&pool.lock);
    return CA_OK;
}

static void segment_unmap(void *ctx, void *ptr, size_t size)
{
    (void)ctx;
    munmap(ptr, size);
    pthread_mutex_lock(&pool.lock);
    note_reserved(size, -1);
    pthread_mutex_unlock(&pool.lock);
}

/* One stream and no events: record_stream is never called on the host. */
static void *no_event(void *ctx, ca_stream stream)
{
    (void)ctx, (void)stream;
    return NULL;
}

static int event_done(void *ctx, void *event)
{
    (void)ctx, (void)event;
    return 1;
}

static void no_wait(void *ctx, void *arg)
{
    (void)ctx, (void)arg;
}

static void segments_init(void)
{
    const struct caching_allocator_config cfg = {
        .max_split_size = CA_MAX_SPLIT_UNLIMITED,
        .ops = {.alloc = segment_map, .free = segment_unmap, .event_record = no_event,
                .event_query = event_done, .event_synchronize = no_wait,
                .event_destroy = no_wait, .stream_synchronize = no_wait},
    };
    __atomic_store_n(&segments, caching_allocator_new(&cfg), __ATOMIC_RELEASE);
}

/* Read by threads that may not have passed segments_once (empty_cache, a failed small
 * request): NULL until the first request of SEGMENT_MIN bytes. */
static void segments_empty_cache(void)
{
    struct caching_allocator *ca = __atomic_load_n(&segments, __ATOMIC_ACQUIRE);
    if (ca)
        caching_allocator_empty_cache(ca);
}

static void *segments_alloc(size_t nbytes)
{
    pthread_once(&segments_once, segments_init);
    void *p = NULL;
    int rc = CA_ERR_OOM;
    char why[256];
    if (segments) {
        uint64_t mapped = __atomic_load_n(&pool.segments_mapped, __ATOMIC_RELAXED);
        rc = caching_allocator_malloc(segments, nbytes, NULL, &p, why, sizeof why);
        if (rc == CA_ERR_OOM) { /* it emptied its own cache and retried; now ours too */
            pthread_mutex_lock(&pool.lock);
            if (tcache.state == 1)
                thread_cache_empty_locked(&tcache, true);
            pool.stats.num_alloc_retries++;
            release_cache_locked();
            pthread_mutex_unlock(&pool.lock);
            rc = caching_allocator_malloc(segments, nbytes, NULL, &p, why, sizeof why);
        }
        pthread_mutex_lock(&pool.lock);
        if (rc == CA_OK) {
            pool.stats.num_allocs++;
            note_block_locked(caching_allocator_round_size(nbytes), 1); /* the large pool */
            if (pool.segments_mapped == mapped)
                pool.stats.num_cache_hits++;
        } else {
            pool.stats.num_ooms++;
        }
        pthread_mutex_unlock(&pool.lock);
    }
    if (rc != CA_OK)
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY,
                       "DefaultCPUAllocator: not enough memory: you tried to allocate %zu bytes.",
                       nbytes);
    return p;
}

static void segments_free(void *ptr, size_t nbytes)
{
    caching_allocator_free(segments, ptr);
    pthread_mutex_lock(&pool.lock);
    pool.stats.num_frees++;
    note_block_locked(caching_allocator_round_size(nbytes), -1);
    pthread_mutex_unlock(&pool.lock);
}

/* ---- the allocator's entry points ----------------------------------------------------- */

void *cpu_alloc(int index, size_t nbytes)
{
    (void)index;
    struct thread_cache *tc = &tcache;
    int tclass = thread_class(nbytes);
    if (tclass >= 0 && tc->head[tclass] && thread_cache_current(tc)) {
        struct free_block *b = tc->head[tclass];
        size_t bytes = class_bytes(tclass);
        tc->head[tclass] = b->next;
        tc->bytes[tclass] -= (uint32_t)bytes;
        count_up(&tc->counts.num_allocs);
        __atomic_store_n(&tc->counts.bytes_in,
                         __atomic_load_n(&tc->counts.bytes_in, __ATOMIC_RELAXED) + bytes,
                         __ATOMIC_RELAXED);
        balance_add(&tc->counts, (int64_t)bytes);
        return b;
    }
    if (nbytes >= SEGMENT_MIN)
        return segments_alloc(nbytes);
    size_t bytes = 0;
    int c = size_class(nbytes, &bytes);
    if (c >= NUM_CLASSES) {
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY,
                       "DefaultCPUAllocator: not enough memory: you tried to allocate %zu bytes.",
                       nbytes);
        return NULL;
    }
    pthread_mutex_lock(&pool.lock);
    struct free_block *b = pool.free[c];
    if (b) {
        pool.free[c] = b->next;
        pool.cached_bytes -= bytes;
        note_allocation(bytes, true);
        pthread_mutex_unlock(&pool.lock);
        return b;
    }
    pthread_mutex_unlock(&pool.lock);
    /* The system call runs outside the lock: mapping 64 MiB should not stall others. */
    void *p = system_alloc(bytes);
    pthread_mutex_lock(&pool.lock);
    if (!p) { /* everything cached goes back, segments too, and the request is retried */
        if (tcache.state == 1)
            thread_cache_empty_locked(&tcache, true);
        pool.stats.num_alloc_retries++;
        release_cache_locked();
        pthread_mutex_unlock(&pool.lock);
        segments_empty_cache();
        p = system_alloc(bytes);
        pthread_mutex_lock(&pool.lock);
    }
    if (p)
        note_allocation(bytes, false);
    else
        pool.stats.num_ooms++;
    pthread_mutex_unlock(&pool.lock);
    if (!p)
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY,
                       "DefaultCPUAllocator: not enough memory: you tried to allocate %zu bytes.",
                       nbytes);
    return p;
}

void cpu_free(int index, void *ptr, size_t nbytes)
{
    (void)index;
    if (!ptr)
        return;
    struct thread_cache *tc = &tcache;
    int tclass = thread_class(nbytes);
    if (tclass >= 0 && (thread_cache_current(tc) || thread_cache_ready(tc))) {
        uint32_t bytes = (uint32_t)class_bytes(tclass);
        if (tc->bytes[tclass] + bytes <= THREAD_LIST_BYTES) {
            struct free_block *b = ptr;
            b->next = tc->head[tclass];
            tc->head[tclass] = b;
            tc->bytes[tclass] += bytes;
            count_up(&tc->counts.num_frees);
            balance_add(&tc->counts, -(int64_t)bytes);
            return;
        }
    }
    if (nbytes >= SEGMENT_MIN) {
        segments_free(ptr, nbytes);
        return;
    }
    size_t bytes;
    int c = size_class(nbytes, &bytes);
    pthread_mutex_lock(&pool.lock);
    if (pool.cache_limit == 0)
        pool.cache_limit = default_cache_limit();
    pool.stats.num_frees++;
    note_block_locked(bytes, -1);
    if (pool.cached_bytes + bytes <= pool.cache_limit) {
        struct free_block *b = ptr;
        b->next = pool.free[c];
        pool.free[c] = b;
        pool.cached_bytes += bytes;
        pthread_mutex_unlock(&pool.lock);
        return;
    }
    note_reserved(bytes, -1);
    pthread_mutex_unlock(&pool.lock);
    system_free(ptr, bytes);
}

/* A thread's blocks in use not yet in pool.live_blocks. */
static int64_t thread_unflushed_blocks(const struct thread_counts *t)
{
    return (int64_t)(__atomic_load_n(&t->num_allocs, __ATOMIC_RELAXED) -
                     __atomic_load_n(&t->num_frees, __ATOMIC_RELAXED)) -
           __atomic_load_n(&t->flushed_blocks, __ATOMIC_RELAXED);
}

/* What memory_summary's rows mean here (weft_memory_detail's notes). */
static const char detail_notes[] =
    "  The cpu allocator's pools: large, its blocks of 1 MiB and more (below 2 MiB each\n"
    "  mmap'd on its own, from 2 MiB split from segments as on CUDA; empty_cache returns\n"
    "  both to the system); small, the smaller blocks (from the C heap), those of 1 KiB or\n"
    "  less first kept on the freeing thread's own lists. The non-releasable and oversize\n"
    "  rows are not counted (0). No streams: active\n"
    "  is allocated. Reserved is allocated plus the cache. Figures counted by the threads\n"
    "  (small blocks) are exact while no other thread allocates; peaks may miss up to\n"
    "  64 KiB per thread.\n";

int cpu_memory_detail(int index, struct weft_memory_detail *out)
{
    (void)index;
    struct weft_memory_detail d = {.struct_size = sizeof d, .device_word = "CPU",
                                   .notes = detail_notes};
    pthread_mutex_lock(&pool.lock);
    struct pool_figures large = pool.pools[WEFT_MEMORY_POOL_LARGE];
    struct pool_figures small = pool.pools[WEFT_MEMORY_POOL_SMALL];
    int64_t bytes = (int64_t)__atomic_load_n(&pool.stats.allocated_bytes, __ATOMIC_RELAXED);
    int64_t blocks = __atomic_load_n(&pool.live_blocks, __ATOMIC_RELAXED);
    for (const struct thread_counts *t = pool.threads; t; t = t->next) {
        bytes += __atomic_load_n(&t->balance, __ATOMIC_RELAXED);
        blocks += thread_unflushed_blocks(t);
        small.bytes.allocated += (int64_t)__atomic_load_n(&t->bytes_in, __ATOMIC_RELAXED);
        small.blocks.allocated += (int64_t)__atomic_load_n(&t->num_allocs, __ATOMIC_RELAXED);
    }
    note_peak((uint64_t)bytes);
    note_max(&pool.peak_live_blocks, blocks);
    note_max(&pool.small_peak_blocks, blocks - large.blocks.current);
    /* The small pool in use: the totals less the large pool's (see the top). */
    small.bytes.current = bytes - large.bytes.current;
    small.bytes.freed = small.bytes.allocated - small.bytes.current;
    small.bytes.peak = __atomic_load_n(&pool.small_peak_bytes, __ATOMIC_RELAXED);
    small.blocks.current = blocks - large.blocks.current;
    small.blocks.freed = small.blocks.allocated - small.blocks.current;
    small.blocks.peak = __atomic_load_n(&pool.small_peak_blocks, __ATOMIC_RELAXED);
    const struct pool_figures *by_pool[3] = {NULL, &large, &small};
    for (int p = WEFT_MEMORY_POOL_LARGE; p <= WEFT_MEMORY_POOL_SMALL; p++) {
        d.allocated_bytes[p] = d.active_bytes[p] = by_pool[p]->bytes;
        d.allocation[p] = d.active[p] = by_pool[p]->blocks;
        d.reserved_bytes[p] = by_pool[p]->reserved;
        d.segment[p] = by_pool[p]->segments;
    }
    /* All pools: the sums, with the peaks of the totals. */
    struct weft_memory_stat *rows[4] = {d.allocated_bytes, d.allocation, d.reserved_bytes, d.segment};
    for (int r = 0; r < 4; r++) {
        struct weft_memory_stat *all = &rows[r][WEFT_MEMORY_POOL_ALL];
        const struct weft_memory_stat *l = &rows[r][WEFT_MEMORY_POOL_LARGE],
                                      *s = &rows[r][WEFT_MEMORY_POOL_SMALL];
        *all = (struct weft_memory_stat){l->current + s->current, 0, l->allocated + s->allocated,
                                         l->freed + s->freed};
    }
    d.allocated_bytes[0].peak = (int64_t)__atomic_load_n(&pool.stats.peak_allocated_bytes,
                                                         __ATOMIC_RELAXED);
    d.allocation[0].peak = __atomic_load_n(&pool.peak_live_blocks, __ATOMIC_RELAXED);
    d.reserved_bytes[0].peak = (int64_t)pool.stats.peak_reserved_bytes;
    d.segment[0].peak = pool.pools[WEFT_MEMORY_POOL_ALL].segments.peak;
    d.active_bytes[0] = d.allocated_bytes[0];
    d.active[0] = d.allocation[0];
    d.num_alloc_retries = (int64_t)pool.stats.num_alloc_retries;
    d.num_ooms = (int64_t)pool.stats.num_ooms;
    pthread_mutex_unlock(&pool.lock);
    size_t size = out->struct_size < sizeof d ? out->struct_size : sizeof d;
    d.struct_size = out->struct_size;
    memcpy(out, &d, size);
    return 0;
}

int cpu_memory_stats(int index, struct weft_memory_stats *out)
{
    (void)index;
    size_t size = out->struct_size;
    if (size > sizeof *out)
        size = sizeof *out;
    pthread_mutex_lock(&pool.lock);
    struct weft_memory_stats now = pool.stats;
    now.allocated_bytes = __atomic_load_n(&pool.stats.allocated_bytes, __ATOMIC_RELAXED);
    now.peak_allocated_bytes = __atomic_load_n(&pool.stats.peak_allocated_bytes, __ATOMIC_RELAXED);
    for (const struct thread_counts *t = pool.threads; t; t = t->next) {
        uint64_t allocs = __atomic_load_n(&t->num_allocs, __ATOMIC_RELAXED);
        now.num_allocs += allocs;
        now.num_cache_hits += allocs;
        now.num_frees += __atomic_load_n(&t->num_frees, __ATOMIC_RELAXED);
        now.allocated_bytes += (uint64_t)__atomic_load_n(&t->balance, __ATOMIC_RELAXED);
    }
    note_peak(now.allocated_bytes);
    now.peak_allocated_bytes = __atomic_load_n(&pool.stats.peak_allocated_bytes, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&pool.lock);
    /* Fill only the fields the caller's struct has. */
    now.struct_size = out->struct_size;
    memcpy(out, &now, size);
    return 0;
}

/* torch.cuda.reset_peak_memory_stats for the cpu pool: the peaks restart from now (the
 * threads' unflushed balances included, as a reading counts them). */
void cpu_reset_peak_memory_stats(int index)
{
    (void)index;
    pthread_mutex_lock(&pool.lock);
    uint64_t now = __atomic_load_n(&pool.stats.allocated_bytes, __ATOMIC_RELAXED);
    int64_t blocks = __atomic_load_n(&pool.live_blocks, __ATOMIC_RELAXED);
    for (const struct thread_counts *t = pool.threads; t; t = t->next) {
        now += (uint64_t)__atomic_load_n(&t->balance, __ATOMIC_RELAXED);
        blocks += thread_unflushed_blocks(t);
    }
    __atomic_store_n(&pool.stats.peak_allocated_bytes, now, __ATOMIC_RELAXED);
    pool.stats.peak_reserved_bytes = pool.stats.reserved_bytes;
    struct pool_figures *large = &pool.pools[WEFT_MEMORY_POOL_LARGE];
    __atomic_store_n(&pool.peak_live_blocks, blocks, __ATOMIC_RELAXED);
    __atomic_store_n(&pool.small_peak_bytes, (int64_t)now - large->bytes.current, __ATOMIC_RELAXED);
    __atomic_store_n(&pool.small_peak_blocks, blocks - large->blocks.current, __ATOMIC_RELAXED);
    for (int p = 0; p < WEFT_MEMORY_POOLS; p++) {
        struct pool_figures *f = &pool.pools[p];
        f->bytes.peak = f->bytes.current;
        f->blocks.peak = f->blocks.current;
        f->reserved.peak = f->reserved.current;
        f->segments.peak = f->segments.current;
    }
    pthread_mutex_unlock(&pool.lock);
}

void cpu_empty_cache(int index)
{
    (void)index;
    pthread_mutex_lock(&pool.lock);
    __atomic_add_fetch(&pool.generation, 1, __ATOMIC_RELAXED); /* the other threads' lists */
    if (tcache.state == 1) {
        thread_cache_empty_locked(&tcache, true);
        tcache.generation = pool.generation;
    }
    release_cache_locked();
    pthread_mutex_unlock(&pool.lock);
    segments_empty_cache();
}
