/* plugins/cpu/kernels_sort.c: SORT (weft/kernel.h): each line along the dim merge-sorted
 * on one thread (stable, NaN above every number), the lines shared among the threads,
 * each thread with its own scratch. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

#define NEVER_NAN(x) ((void)(x), 0)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wtype-limits"
#define CPU_KERNEL_INC "sort_lines.inc"
#define ISNAN NEVER_NAN
#define DT bool
#define ID WEFT_BOOL
#define T bool
#define C bool
#include CPU_KERNEL_INC
#undef DT
#undef ID
#undef T
#undef C
#include "each_integral_dtype.inc"
#undef ISNAN
#define ISNAN isnan
#include "each_floating_dtype.inc"
#undef ISNAN
#undef CPU_KERNEL_INC
#pragma GCC diagnostic pop

typedef void (*sort_line_fn)(const struct weft_op_call *call, int64_t l, void *scratch);

int cpu_sort_kernel(const struct weft_op_call *call)
{
    const weft_tensor *in = call->in[0];
    int dim = (int)call->ints[0];
    int64_t n = in->shape[dim], lines = n ? weft_tensor_numel(in) / n : 0;
    sort_line_fn line;
    switch (in->dtype) {
#define SORT_CASE(name, id, T, C)                                                             \
    case id:                                                                                  \
        line = CPU_CAT(sort_line_, name);                                                            \
        break;
        WEFT_FOR_ALL_DTYPES(SORT_CASE)
#undef SORT_CASE
    default:
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "\"sort\" not implemented for '%s' on cpu",
                              weft_dtype_torch_name(in->dtype));
    }
    if (lines == 0)
        return 0;
    /* keys (at most 8 bytes each), padding to 16, then 2n positions */
    size_t bytes = (size_t)n * 8 + 16 + 2 * (size_t)n * sizeof(int64_t);
    int failed = 0;
#pragma omp parallel if (lines * n > CPU_PARALLEL_GRAIN && lines > 1)
    {
        void *scratch = malloc(bytes);
        if (!scratch) {
#pragma omp atomic write
            failed = 1;
        }
        /* every thread meets the loop (a work-sharing construct); one without scratch
         * leaves its lines unsorted, and the kernel fails */
#pragma omp for
        for (int64_t l = 0; l < lines; l++)
            if (scratch)
                line(call, l, scratch);
        free(scratch);
    }
    return failed ? weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "sort: out of memory for %lld keys",
                                   (long long)n)
                  : 0;
}
