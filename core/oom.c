/* core/oom.c: what an out-of-memory error says beyond the allocator's words: the op whose
 * front end wanted the memory, the tensor it wanted, and the backward node it ran in, as
 * a PyTorch user reads them off the traceback.
 *
 * The op is the innermost exported weft_ function on the stack above the allocation
 * (backtrace and the dynamic symbol table: a frame inside a static function is skipped,
 * and a frame of code outside weft ends the search). Only the failing path pays. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <link.h>
#include <string.h>

#include "internal.h"

static bool is_allocation(const char *name)
{
    static const char *const prefixes[] = {"weft_empty", "weft_storage_", "weft_tensor_"};
    for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++)
        if (strncmp(name, prefixes[i], strlen(prefixes[i])) == 0)
            return true;
    return false;
}

static const char *calling_op(void)
{
    void *frames[48];
    int n = backtrace(frames, 48);
    for (int i = 1; i < n; i++) {
        Dl_info info;
        const ElfW(Sym) *sym = NULL;
        if (!dladdr1(frames[i], &info, (void **)&sym, RTLD_DL_SYMENT) || !info.dli_sname || !sym)
            continue;
        /* A return address lies after its call: inside the caller, unless the symbol
         * found only precedes a static function's code. */
        uintptr_t at = (uintptr_t)frames[i] - 1, start = (uintptr_t)info.dli_saddr;
        if (at < start || at >= start + sym->st_size)
            continue;
        if (strncmp(info.dli_sname, "weft_", 5) != 0)
            return NULL;
        if (!is_allocation(info.dli_sname))
            return info.dli_sname;
    }
    return NULL;
}

void weft_oom_context(int ndim, const int64_t *shape, enum weft_dtype dtype, weft_device dev)
{
    if (weft_error_code() != WEFT_ERR_OUT_OF_MEMORY)
        return;
    const char *op = calling_op(), *node = weft_autograd_running_node();
    char dims[200], where[64] = "";
    weft_shape_str(ndim, shape, dims, sizeof dims);
    if (node)
        snprintf(where, sizeof where, " in the backward of %s", node);
    weft_error_prefix("%s%swanted a %s tensor of shape %s on %s%s", op ? op : "",
                      op ? " " : "", weft_dtype_name(dtype), dims, weft_device_name_tl(dev), where);
}
