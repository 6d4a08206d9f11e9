/* plugins/cpu/kernels_cdist.c: cdist and cdist_backward (weft/kernel.h), p-norm distances
 * between the rows of two batched matrices by the direct formula.
 *
 * Both kernels split rows of x1 (b, i) across threads: each owns out[b, i, :], so the
 * backward sums over j in order with no atomics. The norm is chosen once per call (p = 0,
 * 1, 2, inf or general) so the inner loops stay straight. Formulas follow PyTorch's CPU
 * kernels (aten/src/ATen/native/cpu/DistanceOpsKernel.cpp). */
#include <math.h>
#include <stdlib.h>

#include "cpu.h"
#include "weft/kernel_checks.h"

enum norm { NORM_0, NORM_1, NORM_2, NORM_INF, NORM_LT2, NORM_GT2 };

static enum norm norm_of(double p)
{
    if (p == 0)
        return NORM_0;
    if (p == 1)
        return NORM_1;
    if (p == 2)
        return NORM_2;
    if (isinf(p))
        return NORM_INF;
    return p < 2 ? NORM_LT2 : NORM_GT2;
}

struct cdist_job {
    const struct weft_op_call *call;
    enum norm norm;
    double p;
    int64_t P, R, M;
    int failed; /* a thread could not get its scratch buffer */
};

/* Element pointer of t[b, i, 0] (t 3-d, strides in elements). */
static const char *row_of(const weft_tensor *t, int64_t b, int64_t i)
{
    return (const char *)weft_tensor_data(t) +
           (b * t->stride[0] + i * t->stride[1]) * (int64_t)weft_tensor_itemsize(t);
}

static double sign_of(double v)
{
    return (double)((v > 0) - (v < 0));
}

#define CPU_KERNEL_INC "cdist_rows.inc"
#include "each_floating_dtype.inc"
#undef CPU_KERNEL_INC

static void forward_range(void *ctx, int64_t begin, int64_t end)
{
    struct cdist_job *j = ctx;
    switch (j->call->in[0]->dtype) {
#define CASE(name, id, T, C)                                                                  \
    case id:                                                                                  \
        cdist_rows_##name(j, begin, end);                                                     \
        break;
        WEFT_FOR_FLOATING_DTYPES(CASE)
#undef CASE
    default:
        break;
    }
}

static void backward_range(void *ctx, int64_t begin, int64_t end)
{
    struct cdist_job *j = ctx;
    double *acc = malloc((size_t)(j->M > 0 ? j->M : 1) * sizeof *acc); /* room for any C */
    if (!acc) {
        __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    switch (j->call->in[0]->dtype) {
#define CASE(name, id, T, C)                                                                  \
    case id:                                                                                  \
        cdist_backward_rows_##name(j, begin, end, (C *)acc);                                  \
        break;
        WEFT_FOR_FLOATING_DTYPES(CASE)
#undef CASE
    default:
        break;
    }
    free(acc);
}

int cpu_cdist_kernel(const struct weft_op_call *call)
{
    const weft_tensor *x1 = call->in[0], *x2 = call->in[1];
    if (weft_check_cdist(call) != 0)
        return weft_error_code();
    struct cdist_job j = {call, norm_of(call->scalar[0]), call->scalar[0], x1->shape[1],
                          x2->shape[1], x1->shape[2], 0};
    int64_t rows = x1->shape[0] * j.P, work = j.R * (j.M > 0 ? j.M : 1);
    int64_t grain = CPU_PARALLEL_GRAIN / (work > 0 ? work : 1);
    cpu_parallel_for(rows, grain > 0 ? grain : 1, forward_range, &j);
    return 0;
}

int cpu_cdist_backward_kernel(const struct weft_op_call *call)
{
    const weft_tensor *x1 = call->in[1], *x2 = call->in[2];
    if (weft_check_cdist_backward(call) != 0)
        return weft_error_code();
    struct cdist_job j = {call, norm_of(call->scalar[0]), call->scalar[0], x1->shape[1],
                          x2->shape[1], x1->shape[2], 0};
    int64_t rows = x1->shape[0] * j.P, work = (j.R > 0 ? j.R : 1) * (j.M > 0 ? j.M : 1);
    int64_t grain = CPU_PARALLEL_GRAIN / work;
    cpu_parallel_for(rows, grain > 0 ? grain : 1, backward_range, &j);
    if (j.failed)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "cdist_backward: out of host memory");
    return 0;
}
