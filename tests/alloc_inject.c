/* tests/alloc_inject.c: the allocator that refuses the N-th allocation of weft's code
 * (tests/alloc_inject.h). */
#define _GNU_SOURCE
#include "alloc_inject.h"

#include <dlfcn.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static void *(*real_malloc)(size_t);
static void *(*real_calloc)(size_t, size_t);
static void *(*real_realloc)(void *, size_t);
static void (*real_free)(void *);
static int (*real_posix_memalign)(void **, size_t, size_t);
static void *(*real_aligned_alloc)(size_t, size_t);

/* dlsym itself may allocate before the real functions are known: from here. */
static _Alignas(64) char boot[16384];
static size_t boot_used;

static bool in_boot(const void *p)
{
    return (const char *)p >= boot && (const char *)p < boot + sizeof boot;
}

static void *boot_alloc(size_t n)
{
    n = (n + 63) & ~(size_t)63;
    if (boot_used + n > sizeof boot)
        return NULL;
    void *p = boot + boot_used;
    boot_used += n;
    return p;
}

static _Atomic int resolving;

static void resolve(void)
{
    if (real_malloc || atomic_exchange(&resolving, 1))
        return;
    real_calloc = dlsym(RTLD_NEXT, "calloc");
    real_malloc = dlsym(RTLD_NEXT, "malloc");
    real_realloc = dlsym(RTLD_NEXT, "realloc");
    real_free = dlsym(RTLD_NEXT, "free");
    real_posix_memalign = dlsym(RTLD_NEXT, "posix_memalign");
    real_aligned_alloc = dlsym(RTLD_NEXT, "aligned_alloc");
}

/* ---- whose allocation: the caller's object, looked up once per call site ------------- */

/* glibc's dladdr() allocates nothing, so it may run inside malloc. The sanitizer build
 * calls malloc before its shadow memory exists: what runs inside malloc is not
 * instrumented (no stack redzones to poison) and keeps no thread-local state. */
#define NOT_INSTRUMENTED __attribute__((no_sanitize("address"), noinline))

#define CACHE_BITS 14
static _Atomic uintptr_t sites[1u << CACHE_BITS]; /* (caller << 1) | weft's; 0 empty */

/* Whose allocations count: NULL for weft's objects (libweft*.so, weft-*.so, weft-*), else
 * the objects whose file name starts with it ("" every one). */
static const char *objects;

NOT_INSTRUMENTED static bool object_counts(const void *caller)
{
    Dl_info info;
    if (!dladdr(caller, &info) || !info.dli_fname)
        return false;
    const char *slash = strrchr(info.dli_fname, '/');
    const char *base = slash ? slash + 1 : info.dli_fname;
    if (objects)
        return strncmp(base, objects, strlen(objects)) == 0;
    return strncmp(base, "libweft", 7) == 0 || strncmp(base, "weft-", 5) == 0;
}

NOT_INSTRUMENTED static bool from_weft(const void *caller)
{
    uintptr_t a = (uintptr_t)caller;
    size_t h = (size_t)((a * 0x9E3779B97F4A7C15ull) >> (64 - CACHE_BITS));
    for (size_t i = 0; i < (1u << CACHE_BITS); i++) {
        _Atomic uintptr_t *slot = &sites[(h + i) & ((1u << CACHE_BITS) - 1)];
        uintptr_t e = atomic_load_explicit(slot, memory_order_relaxed);
        if (e && (e >> 1) == a)
            return e & 1;
        if (e == 0) {
            bool weft = object_counts(caller);
            uintptr_t expected = 0;
            atomic_compare_exchange_strong(slot, &expected, (a << 1) | weft);
            return weft;
        }
    }
    return object_counts(caller); /* the table is full: look it up every time */
}

/* ---- counting and refusing ---------------------------------------------------------------- */

static _Atomic bool armed;
static _Atomic long counted;
static long fail_at;
static _Atomic bool refused;
static const void *refused_caller;
static const char *refused_fn;
static size_t refused_size;

/* Whether this allocation (of size bytes, by fn at caller) is the one to refuse. */
NOT_INSTRUMENTED static bool refuse(const void *caller, const char *fn, size_t size)
{
    if (!atomic_load_explicit(&armed, memory_order_relaxed) || !from_weft(caller))
        return false;
    long n = atomic_fetch_add(&counted, 1) + 1;
    if (fail_at > 0 && n == fail_at) {
        refused_caller = caller;
        refused_fn = fn;
        refused_size = size;
        atomic_store(&refused, true);
        return true;
    }
    return false;
}

void *malloc(size_t n)
{
    resolve();
    if (!real_malloc)
        return boot_alloc(n);
    if (refuse(__builtin_return_address(0), "malloc", n))
        return NULL;
    return real_malloc(n);
}

void *calloc(size_t n, size_t size)
{
    resolve();
    if (!real_calloc) {
        void *p = n && size > SIZE_MAX / n ? NULL : boot_alloc(n * size);
        return p; /* boot memory is zero: static storage, never reused */
    }
    if (refuse(__builtin_return_address(0), "calloc", n * size))
        return NULL;
    return real_calloc(n, size);
}

void *realloc(void *p, size_t n)
{
    resolve();
    if (in_boot(p)) { /* move it out of the boot area */
        void *q = malloc(n);
        if (q)
            memcpy(q, p, n < (size_t)(boot + sizeof boot - (char *)p) ? n : (size_t)(boot + sizeof boot - (char *)p));
        return q;
    }
    if (!real_realloc)
        return NULL;
    if (refuse(__builtin_return_address(0), "realloc", n))
        return NULL;
    return real_realloc(p, n);
}

void free(void *p)
{
    if (!p || in_boot(p))
        return;
    resolve();
    if (real_free)
        real_free(p);
}

int posix_memalign(void **out, size_t align, size_t n)
{
    resolve();
    if (refuse(__builtin_return_address(0), "posix_memalign", n))
        return 12; /* ENOMEM */
    return real_posix_memalign(out, align, n);
}

void *aligned_alloc(size_t align, size_t n)
{
    resolve();
    if (refuse(__builtin_return_address(0), "aligned_alloc", n))
        return NULL;
    return real_aligned_alloc(align, n);
}

void alloc_inject_objects(const char *prefix)
{
    objects = prefix;
    memset((void *)sites, 0, sizeof sites); /* what a call site is worth has changed */
}

void alloc_inject_arm(long n)
{
    fail_at = n;
    atomic_store(&counted, 0);
    atomic_store(&refused, false);
    atomic_store(&armed, true);
}

void alloc_inject_disarm(void)
{
    atomic_store(&armed, false);
}

long alloc_inject_counted(void)
{
    return atomic_load(&counted);
}

bool alloc_inject_refused(const void **caller)
{
    if (caller)
        *caller = refused_caller;
    return atomic_load(&refused);
}

void alloc_inject_describe(char *buf, unsigned long size)
{
    Dl_info info;
    int ok = refused_caller && dladdr(refused_caller, &info);
    const char *file = ok && info.dli_fname ? strrchr(info.dli_fname, '/') : NULL;
    snprintf(buf, size, "%s of %zu bytes in %s (%s+0x%lx)", refused_fn ? refused_fn : "?",
             refused_size, ok && info.dli_sname ? info.dli_sname : "?",
             file ? file + 1 : ok && info.dli_fname ? info.dli_fname : "?",
             ok ? (unsigned long)((const char *)refused_caller - (const char *)info.dli_fbase) : 0ul);
}
