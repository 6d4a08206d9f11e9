/* fuzz/fuzz.h: what the libFuzzer targets share: a scratch directory of their own, the
 * input written there as a file (the readers take paths), and the build's plugins on the
 * search path.
 *
 * Each target defines LLVMFuzzerTestOneInput and calls fuzz_init() from
 * LLVMFuzzerInitialize. A target must never crash or leak whatever the bytes: an error
 * (weft_error_*) is a pass, and is cleared before the next input. */
#ifndef WEFT_FUZZ_H
#define WEFT_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <weft/error.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char fuzz_dir[256];

/* dir/name, in one of four static buffers. */
static inline const char *fuzz_path(const char *name)
{
    static char paths[4][512];
    static int next;
    char *p = paths[next++ % 4];
    snprintf(p, sizeof paths[0], "%s/%s", fuzz_dir, name);
    return p;
}

/* Writes data[0..size) to dir/name and returns the path. */
static inline const char *fuzz_write(const char *name, const void *data, size_t size)
{
    const char *path = fuzz_path(name);
    FILE *f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size)) {
        perror(path);
        abort();
    }
    fclose(f);
    return path;
}

static inline void fuzz_cleanup(void)
{
    static const char *const names[] = {"a", "b", "c", "weft-fuzz.so", NULL};
    for (int i = 0; names[i]; i++)
        unlink(fuzz_path(names[i]));
    rmdir(fuzz_dir);
}

/* A scratch directory under $TMPDIR (removed at exit), and the build's plugin folder on
 * the search path (FUZZ_PLUGIN_DIR, set by fuzz/meson.build). */
static inline void fuzz_init(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(fuzz_dir, sizeof fuzz_dir, "%s/weft-fuzz-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(fuzz_dir)) {
        perror(fuzz_dir);
        abort();
    }
    atexit(fuzz_cleanup);
#ifdef FUZZ_PLUGIN_DIR
    setenv("WEFT_PLUGIN_PATH", FUZZ_PLUGIN_DIR, 0);
#endif
}

#endif
