/* plugins/cpu/kernels_norm.c: native_layer_norm and native_layer_norm_backward
 * (weft/kernel.h), llm.c's layernorm_forward/backward with PyTorch's saved statistics.
 *
 * Forward: one pass over a row for its moments (sum and sum of squares of x - x[0] in
 * double: the shift by the row's first element keeps E[x^2] - E[x]^2 from cancelling
 * when the mean is large against the spread), a second writing y. Backward: one pass for
 * the row's two means, one writing dx and adding into this block's dw/db. Rows go to
 * threads; dw/db are summed per fixed block of rows, then the blocks in order, so the
 * bits do not depend on the number of threads. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "weft/kernel_checks.h"

#ifdef _OPENMP
#define CPU_PRAGMA_STR(x) #x
/* a simd loop summing into the doubles a and b */
#define CPU_SIMD_SUM2(a, b) _Pragma(CPU_PRAGMA_STR(omp simd reduction(+ : a, b)))
#else
#define CPU_SIMD_SUM2(a, b)
#endif

/* dw/db partial sums: this many blocks of rows at most (each 2 * D doubles, and 2 * D
 * of the compute type gathering rows). */
#define LN_MAX_BLOCKS 32

struct ln_job {
    const char *x, *w, *b, *g;
    char *y, *dx;
    char *stats;      /* [2, R]: mean, rstd; float, or double for float64 */
    double *partial;  /* backward: [nblocks, 2, D] dw, db per block; NULL when not asked */
    void *acc;        /* backward: [nblocks, 2, D] of the compute type, gathering rows */
    int64_t R, D, nblocks;
    double eps;
};

#define LN_FLUSH_ROWS 32
#define CPU_KERNEL_INC "layer_norm_rows.inc"
#include "each_floating_dtype.inc"
#undef CPU_KERNEL_INC

typedef void (*ln_rows_fn)(void *ctx, int64_t begin, int64_t end);

int cpu_native_layer_norm_kernel(const struct weft_op_call *call)
{
    const weft_tensor *x = call->in[0], *w = call->in[1], *b = call->in[2];
    weft_tensor *y = call->out[0], *stats = call->out[1];
    if (weft_check_native_layer_norm(call) != 0)
        return weft_error_code();
    int64_t R = x->shape[0], D = x->shape[1];
    if (R == 0 || D == 0)
        return 0;
    struct ln_job j = {.x = weft_tensor_data(x), .w = w ? weft_tensor_data(w) : NULL,
                       .b = b ? weft_tensor_data(b) : NULL, .y = weft_tensor_data(y),
                       .stats = weft_tensor_data(stats), .R = R, .D = D,
                       .eps = call->scalar[0]};
    ln_rows_fn rows = NULL;
    switch (x->dtype) {
#define LN_FORWARD_CASE(name, id, T, C)                                                       \
    case id:                                                                                  \
        rows = ln_forward_rows_##name;                                                        \
        break;
        WEFT_FOR_FLOATING_DTYPES(LN_FORWARD_CASE)
#undef LN_FORWARD_CASE
    default:
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED,
                              "\"native_layer_norm\" not implemented for '%s' on cpu",
                              weft_dtype_torch_name(x->dtype));
    }
    int64_t grain = CPU_PARALLEL_GRAIN / D;
    cpu_parallel_for(R, grain > 0 ? grain : 1, rows, &j);
    return 0;
}

int cpu_native_layer_norm_backward_kernel(const struct weft_op_call *call)
{
    const weft_tensor *g = call->in[0], *x = call->in[1], *stats = call->in[2];
    const weft_tensor *w = call->in[3];
    weft_tensor *dx = call->out[0], *dwb = call->nout > 1 ? call->out[1] : NULL;
    if (weft_check_native_layer_norm_backward(call) != 0)
        return weft_error_code();
    int64_t R = g->shape[0], D = g->shape[1];
    ln_rows_fn blocks = NULL;
    switch (g->dtype) {
#define LN_BACKWARD_CASE(name, id, T, C)                                                      \
    case id:                                                                                  \
        blocks = ln_backward_blocks_##name;                                                   \
        break;
        WEFT_FOR_FLOATING_DTYPES(LN_BACKWARD_CASE)
#undef LN_BACKWARD_CASE
    default:
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED,
                              "\"native_layer_norm_backward\" not implemented for '%s' on cpu",
                              weft_dtype_torch_name(g->dtype));
    }
    int64_t nblocks = R < LN_MAX_BLOCKS ? R : LN_MAX_BLOCKS;
    struct ln_job j = {.x = weft_tensor_data(x), .w = w ? weft_tensor_data(w) : NULL,
                       .g = weft_tensor_data(g), .dx = weft_tensor_data(dx),
                       .stats = weft_tensor_data(stats), .R = R, .D = D, .nblocks = nblocks};
    if (dwb && nblocks > 0 && D > 0) {
        j.partial = malloc((size_t)(nblocks * 2 * D) * sizeof *j.partial);
        j.acc = malloc((size_t)(nblocks * 2 * D) * sizeof(double)); /* float or double */
        if (!j.partial || !j.acc) {
            free(j.partial);
            free(j.acc);
            return weft_error_set(WEFT_ERR_OUT_OF_MEMORY,
                                  "native_layer_norm_backward: out of memory for %lld partial "
                                  "sums", (long long)(nblocks * 2 * D));
        }
    }
    if (nblocks > 0 && D > 0)
        cpu_parallel_for(nblocks, R * D >= CPU_PARALLEL_GRAIN ? 1 : nblocks + 1, blocks, &j);
    if (dwb) {
        char *out = weft_tensor_data(dwb);
        size_t item = weft_dtype_size(dwb->dtype);
        for (int64_t i = 0; i < 2 * D; i++) {
            double s = 0;
            for (int64_t k = 0; k < nblocks; k++)
                s += j.partial[k * 2 * D + i];
            cpu_store_from_double(dwb->dtype, out + (size_t)i * item, s);
        }
    }
    free(j.partial);
    free(j.acc);
    return 0;
}
