/* core/small_alloc.c: thread-local free lists for the core's small objects.
 *
 * Every op makes a tensor header and a storage header, and every recorded op an autograd
 * node and metadata; backward frees them all again. A chain of a hundred ops holds
 * hundreds of them at once, more than glibc's per-thread cache keeps (7 per size), and
 * the headers are too large for its fast bins, so each pair went through _int_malloc
 * and _int_free: most of the cost of a tiny op in autograd (callgrind: 2,000 of 8,600
 * instructions per op of the fwd+bwd chain in weft-bench).
 *
 * Here a freed block waits on its thread's list for its size class (32-byte steps up to
 * 1 KiB) and the next request of that class takes it back: a pop, no lock. A list holds
 * at most 256 KiB, so a thread keeps a bounded amount; a block freed on another thread
 * than the one that took it simply joins that thread's list. A thread's lists are freed
 * when it exits (the main thread's at exit()). Sanitizer builds bypass the lists, so
 * use-after-free and leaks of these objects stay visible.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#if defined(__SANITIZE_ADDRESS__)
#define SMALL_CACHE 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(memory_sanitizer)
#define SMALL_CACHE 0
#endif
#endif
#ifndef SMALL_CACHE
#define SMALL_CACHE 1
#endif

#define STEP 32u
#define LIMIT 1024u
#define CLASSES (LIMIT / STEP)
#define LIST_BYTES ((size_t)256 << 10)

#if SMALL_CACHE
struct free_block {
    struct free_block *next;
};

struct small_cache {
    struct free_block *head[CLASSES];
    uint32_t bytes[CLASSES]; /* held on each list */
    uint8_t state; /* 0 new, 1 its drain is set up, 2 drained: frees go to free() */
};

static WEFT_FAST_TLS struct small_cache cache;
static pthread_key_t drain_key;
static pthread_once_t drain_once = PTHREAD_ONCE_INIT;

static void drain(void *unused)
{
    (void)unused;
    for (unsigned c = 0; c < CLASSES; c++) {
        struct free_block *b = cache.head[c];
        while (b) {
            struct free_block *next = b->next;
            free(b);
            b = next;
        }
        cache.head[c] = NULL;
        cache.bytes[c] = 0;
    }
    cache.state = 2;
}

static void drain_main_thread(void)
{
    drain(NULL);
}

static void drain_init(void)
{
    pthread_key_create(&drain_key, drain);
    atexit(drain_main_thread); /* key destructors do not run for the main thread */
}

/* The class of an n-byte request, or CLASSES when it is too large to cache. */
static unsigned class_of(size_t n)
{
    return n == 0 || n > LIMIT ? CLASSES : (unsigned)((n - 1) / STEP);
}

/* A block that cannot join a list yet: this thread's first free sets up the drain of its
 * lists at exit; past the list's bound, or once the lists were drained, free(). Out of
 * line, so that the common push needs no registers saved. */
static __attribute__((noinline)) void free_slow(void *p, size_t n)
{
    unsigned c = class_of(n);
    if (p && c < CLASSES && cache.state == 0) {
        pthread_once(&drain_once, drain_init);
        pthread_setspecific(drain_key, (void *)1);
        cache.state = 1;
        weft_small_free(p, n);
        return;
    }
    free(p);
}
#endif

void weft_small_free(void *p, size_t n)
{
#if SMALL_CACHE
    struct small_cache *tc = &cache;
    size_t c = (n - 1) / STEP; /* n == 0 wraps to a large class: not cached */
    uint32_t bytes = (uint32_t)(c + 1) * STEP;
    if (c < CLASSES && p && tc->state == 1 && tc->bytes[c] + bytes <= LIST_BYTES) {
        struct free_block *b = p;
        b->next = tc->head[c];
        tc->head[c] = b;
        tc->bytes[c] += bytes;
        return;
    }
    free_slow(p, n);
#else
    (void)n;
    free(p);
#endif
}

#if SMALL_CACHE
/* An empty list or a large request: whole classes from malloc, so that a block fits
 * every request of its class. */
static __attribute__((noinline)) void *alloc_slow(size_t n)
{
    unsigned c = class_of(n);
    return malloc(c < CLASSES ? (size_t)(c + 1) * STEP : n);
}
#endif

void *weft_small_alloc(size_t n)
{
#if SMALL_CACHE
    struct small_cache *tc = &cache;
    size_t c = (n - 1) / STEP;
    struct free_block *b;
    if (c < CLASSES && (b = tc->head[c]) != NULL) {
        tc->head[c] = b->next;
        tc->bytes[c] -= (uint32_t)(c + 1) * STEP;
        return b;
    }
    return alloc_slow(n);
#else
    return malloc(n);
#endif
}

void *weft_small_calloc(size_t n)
{
    void *p = weft_small_alloc(n);
    if (p)
        memset(p, 0, n);
    return p;
}
