/* tests/alloc_inject.h: the N-th allocation of weft's own code refused, as SQLite's malloc
 * tests do, for the programs that link tests/alloc_inject.c (tests/alloc_fail.c, the
 * weft-train of tests/alloc_train.c).
 *
 * alloc_inject.c defines malloc, calloc, realloc, free, posix_memalign and aligned_alloc,
 * which replace the C library's for the whole process and pass through to the next
 * definition (libc's, or the sanitizer's). Only allocations made by weft's own code are
 * counted and may fail: the caller's address must lie in libweft*.so, a weft-*.so plugin
 * or an executable called weft-*, so the C library's, OpenMP's and OpenBLAS's inner
 * allocations (whose failure weft can only pass on) are outside (alloc_inject_objects
 * widens that). That way a refusal always
 * reaches a weft function that must check it. Plugins loaded while armed count too (the
 * caller's object is looked up once per call site). */
#ifndef WEFT_TESTS_ALLOC_INJECT_H
#define WEFT_TESTS_ALLOC_INJECT_H

#include <stdbool.h>

/* Counts weft's allocations from now on; the fail_at-th (from 1) is refused, none when
 * fail_at is 0. */
void alloc_inject_arm(long fail_at);
void alloc_inject_disarm(void);
/* Whose allocations count (and may fail), to be set before arming: NULL (the default)
 * weft's objects, else the objects whose file name starts with prefix: "" every one, what
 * a real shortage does to the libraries weft calls; "libstdc++" the allocations of C++'s
 * operator new, which throws std::bad_alloc (oneDNN's). */
void alloc_inject_objects(const char *prefix);
/* weft's allocations since the last arm. */
long alloc_inject_counted(void);
/* Whether the chosen allocation was refused; *caller (may be NULL) gets its return
 * address. */
bool alloc_inject_refused(const void **caller);
/* "malloc of 24 bytes in weft_grow (libweft.so+0x1234)" for the refused allocation, into
 * buf. */
void alloc_inject_describe(char *buf, unsigned long size);

#endif
