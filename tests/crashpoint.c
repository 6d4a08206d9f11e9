/* tests/crashpoint.c: kills the process at a named crash point (weft/checkpoint.h), for
 * test programs only: the shipped libraries have the points, and a hook that is NULL
 * unless a program linked with this file installs it when it starts.
 *
 * SQLite tests its journal by crashing at every write; weft's durability test
 * (tests/checkpoint-durability.sh) does the same to a checkpoint save: it sets
 * WEFT_TEST_CRASH_AT and weft-train-crashpoints (weft-train's objects and this file)
 * dies by SIGKILL at the chosen point, with no atexit handler, no stdio flush and no
 * cleanup, as a power cut or `kill -9` would. The variable is read once. */
#include "weft/checkpoint.h"

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static bool parsed;
static char target[64]; /* the point's name, or "" for "the N-th point of any name" */
static long wanted;     /* which arrival at it kills (1: the first) */
static long arrivals;

/* "NAME", "NAME:K" or "N". */
static void parse(void)
{
    parsed = true;
    const char *v = getenv("WEFT_TEST_CRASH_AT");
    if (!v || !*v)
        return;
    char *end;
    long n = strtol(v, &end, 10);
    if (*end == '\0' && n > 0) {
        wanted = n;
        return;
    }
    const char *colon = strchr(v, ':');
    size_t len = colon ? (size_t)(colon - v) : strlen(v);
    if (len >= sizeof target)
        return;
    memcpy(target, v, len);
    target[len] = '\0';
    wanted = colon ? strtol(colon + 1, NULL, 10) : 1;
}

static void crash_at(const char *name)
{
    if (!parsed)
        parse();
    if (wanted <= 0 || (target[0] && strcmp(target, name) != 0))
        return;
    if (++arrivals < wanted)
        return;
    /* Says where it died, so a failing sweep names the step; write(2) is not buffered. */
    char line[128];
    int n = snprintf(line, sizeof line, "weft: WEFT_TEST_CRASH_AT: killed at %s\n", name);
    if (n > 0 && write(STDERR_FILENO, line, (size_t)n) < 0)
        n = 0;
    raise(SIGKILL);
}

__attribute__((constructor)) static void install(void)
{
    weft_test_set_crash_hook(crash_at);
}
