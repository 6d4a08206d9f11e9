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
 * Blocks of 1 MiB and more are mmap'd rather than malloc'd: they go back to the system
 * the moment the cache is emptied (glibc keeps freed heap memory and fragments it), and
 * from 2 MiB on they are aligned to 2 MiB and marked MADV_HUGEPAGE, so transparent huge
 * pages back them even where THP is in "madvise" mode; strided kernels (transposes)
 * touch a new 4 KiB page every few elements and are bound by TLB misses otherwise.
 *
 * The cache is bounded (a quarter of physical memory, or WEFT_CPU_CACHE_LIMIT bytes):
 * a block freed past the bound goes straight back to the system. When the system
 * refuses a request, the cache is emptied and the request retried once.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cpu.h"

#define SMALL_LIMIT 4096u
#define SMALL_STEP 64u
#define SMALL_CLASSES (SMALL_LIMIT / SMALL_STEP)
#define SUBCLASSES 8 /* per power of two above SMALL_LIMIT */
#define NUM_CLASSES (SMALL_CLASSES + SUBCLASSES * 52)
#define MMAP_THRESHOLD ((size_t)1 << 20)
#define HUGE_PAGE ((size_t)2 << 20)

struct free_block {
    struct free_block *next;
};

static struct {
    pthread_mutex_t lock;
    struct free_block *free[NUM_CLASSES];
    size_t cached_bytes, cache_limit;
    struct weft_memory_stats stats;
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER};

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
            pool.stats.reserved_bytes -= bytes;
            b = next;
        }
        pool.free[c] = NULL;
    }
    pool.cached_bytes = 0;
}

static void note_allocation(size_t bytes, bool from_cache)
{
    pool.stats.num_allocs++;
    pool.stats.allocated_bytes += bytes;
    if (pool.stats.allocated_bytes > pool.stats.peak_allocated_bytes)
        pool.stats.peak_allocated_bytes = pool.stats.allocated_bytes;
    if (from_cache) {
        pool.stats.num_cache_hits++;
        return;
    }
    pool.stats.reserved_bytes += bytes;
    if (pool.stats.reserved_bytes > pool.stats.peak_reserved_bytes)
        pool.stats.peak_reserved_bytes = pool.stats.reserved_bytes;
}

void *cpu_alloc(int index, size_t nbytes)
{
    (void)index;
    size_t bytes = 0;
    int c = nbytes > (SIZE_MAX >> 2) ? NUM_CLASSES : size_class(nbytes, &bytes);
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
    if (!p && pool.cached_bytes > 0) {
        pool.stats.num_alloc_retries++;
        release_cache_locked();
        pthread_mutex_unlock(&pool.lock);
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
    size_t bytes;
    int c = size_class(nbytes, &bytes);
    pthread_mutex_lock(&pool.lock);
    if (pool.cache_limit == 0)
        pool.cache_limit = default_cache_limit();
    pool.stats.num_frees++;
    pool.stats.allocated_bytes -= bytes;
    if (pool.cached_bytes + bytes <= pool.cache_limit) {
        struct free_block *b = ptr;
        b->next = pool.free[c];
        pool.free[c] = b;
        pool.cached_bytes += bytes;
        pthread_mutex_unlock(&pool.lock);
        return;
    }
    pool.stats.reserved_bytes -= bytes;
    pthread_mutex_unlock(&pool.lock);
    system_free(ptr, bytes);
}

int cpu_memory_stats(int index, struct weft_memory_stats *out)
{
    (void)index;
    size_t size = out->struct_size;
    if (size > sizeof *out)
        size = sizeof *out;
    pthread_mutex_lock(&pool.lock);
    struct weft_memory_stats now = pool.stats;
    pthread_mutex_unlock(&pool.lock);
    /* Fill only the fields the caller's struct has. */
    now.struct_size = out->struct_size;
    memcpy(out, &now, size);
    return 0;
}

void cpu_empty_cache(int index)
{
    (void)index;
    pthread_mutex_lock(&pool.lock);
    release_cache_locked();
    pthread_mutex_unlock(&pool.lock);
}
