/* tests/alloc_train.c: what turns weft-train into weft-train-allocfail (tests/meson.build
 * links it with weft-train's own objects and tests/alloc_inject.c): WEFT_ALLOC_FAIL_AT=N
 * refuses the N-th allocation of weft's code in the run (0: none, only count), and at
 * exit one line on stderr says what happened, for tests/alloc-train.sh to judge:
 *   alloc-train: 1234 allocations of weft's
 *   alloc-train: allocation 77 of 1234 refused: malloc of 24 bytes in weft_grow (libweft.so+0x1a2b)
 *   alloc-train: allocation 5000 never came (1234 in the run)
 * WEFT_ALLOC_FAIL_OBJECTS= (empty) counts every allocation of the process, the libraries'
 * too. One thread of OpenMP and no reader threads make the count the same in every run. */
#include <stdio.h>
#include <stdlib.h>

#include "alloc_inject.h"

static long fail_at;

static void report(void)
{
    alloc_inject_disarm();
    long n = alloc_inject_counted();
    char where[512];
    if (fail_at == 0) {
        fprintf(stderr, "alloc-train: %ld allocations of weft's\n", n);
    } else if (alloc_inject_refused(NULL)) {
        alloc_inject_describe(where, sizeof where);
        fprintf(stderr, "alloc-train: allocation %ld of %ld refused: %s\n", fail_at, n, where);
    } else {
        fprintf(stderr, "alloc-train: allocation %ld never came (%ld in the run)\n", fail_at, n);
    }
}

__attribute__((constructor)) static void arm_from_env(void)
{
    const char *v = getenv("WEFT_ALLOC_FAIL_AT");
    if (!v)
        return;
    fail_at = strtol(v, NULL, 10);
    /* WEFT_ALLOC_FAIL_OBJECTS: whose allocations count (alloc_inject_objects): "" every
     * caller's, "libstdc++" C++'s operator new; unset, weft's */
    alloc_inject_objects(getenv("WEFT_ALLOC_FAIL_OBJECTS"));
    atexit(report);
    alloc_inject_arm(fail_at > 0 ? fail_at : 0);
}
