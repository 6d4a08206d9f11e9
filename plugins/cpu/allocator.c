/* plugins/cpu/allocator.c: host memory (to become a caching allocator). */
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

void *cpu_alloc(int index, size_t nbytes)
{
    (void)index;
    size_t rounded = (nbytes + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, rounded ? rounded : 64);
    if (!p)
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "cpu: failed to allocate %zu bytes", nbytes);
    return p;
}

void cpu_free(int index, void *ptr, size_t nbytes)
{
    (void)index;
    (void)nbytes;
    free(ptr);
}

int cpu_memory_stats(int index, struct weft_memory_stats *out)
{
    (void)index;
    size_t size = out->struct_size;
    memset(out, 0, size);
    out->struct_size = size;
    return 0;
}

void cpu_empty_cache(int index)
{
    (void)index;
}
