/* train/crash_hook.c: the crash points of weft/checkpoint.h, which call a hook that only
 * a test program installs (tests/crashpoint.c); in any other each point is a branch. */
#include "weft/checkpoint.h"

static void (*crash_hook)(const char *name);

void weft_test_set_crash_hook(void (*hook)(const char *name))
{
    __atomic_store_n(&crash_hook, hook, __ATOMIC_RELEASE);
}

void weft_test_crash_point(const char *name)
{
    void (*hook)(const char *) = __atomic_load_n(&crash_hook, __ATOMIC_ACQUIRE);
    if (hook)
        hook(name);
}
