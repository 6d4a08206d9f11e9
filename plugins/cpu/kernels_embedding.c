/* plugins/cpu/kernels_embedding.c: embedding_dense_backward (weft/kernel.h), an index-add
 * of gradient rows into a zeroed table.
 *
 * Threads split the columns, never the rows: each thread walks every index in order and
 * adds its own columns of each gradient row, so repeated indices are summed in the same
 * order whatever the thread count, with no atomics and no sort. */
#include <string.h>

#include "cpu.h"

struct embedding_job {
    const char *grad;
    const int64_t *idx;
    char *out;
    int64_t N, D;
};

#define CPU_KERNEL_INC "embedding_cols.inc"
#include "each_floating_dtype.inc"
#undef CPU_KERNEL_INC

int cpu_embedding_dense_backward_kernel(const struct weft_op_call *call)
{
    const weft_tensor *grad = call->in[0], *idx = call->in[1];
    weft_tensor *out = call->out[0];
    if (grad->ndim != 2 || idx->ndim != 1 || idx->dtype != WEFT_I64 || out->ndim != 2 ||
        idx->shape[0] != grad->shape[0] || out->shape[1] != grad->shape[1] ||
        out->dtype != grad->dtype || !weft_tensor_is_contiguous(grad) ||
        !weft_tensor_is_contiguous(idx) || !weft_tensor_is_contiguous(out))
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "embedding_dense_backward: expected contiguous grad [N, D], int64 "
                              "indices [N] and an output [num_weights, D] of grad's dtype");
    struct embedding_job j = {weft_tensor_data(grad), weft_tensor_data(idx),
                              weft_tensor_data(out), grad->shape[0], grad->shape[1]};
    const int64_t num = out->shape[0];
    /* every index checked before anything is written */
    for (int64_t i = 0; i < j.N; i++)
        if (j.idx[i] < 0 || j.idx[i] >= num)
            return weft_error_set(WEFT_ERR_INDEX, "index out of range in self");
    if (num * j.D > 0)
        memset(j.out, 0, (size_t)(num * j.D) * weft_dtype_size(out->dtype));
    void (*cols)(void *, int64_t, int64_t) = NULL;
    switch (grad->dtype) {
#define EMBEDDING_BACKWARD_CASE(name, id, T, C)                                               \
    case id:                                                                                  \
        cols = embedding_backward_cols_##name;                                                \
        break;
        WEFT_FOR_FLOATING_DTYPES(EMBEDDING_BACKWARD_CASE)
#undef EMBEDDING_BACKWARD_CASE
    default:
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED,
                              "\"embedding_dense_backward\" not implemented for '%s' on cpu",
                              weft_dtype_torch_name(grad->dtype));
    }
    if (j.N == 0 || j.D == 0)
        return 0;
    /* a thread gets at least 16 columns (whole cache lines of float32) */
    int64_t grain = CPU_PARALLEL_GRAIN / j.N;
    cpu_parallel_for(j.D, grain > 16 ? grain : 16, cols, &j);
    return 0;
}
