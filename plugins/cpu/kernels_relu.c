/* plugins/cpu/kernels_relu.c: ReLU's fused kernels (weft/kernel.h): threshold_backward
 * (out = t > threshold ? g : 0 in one pass, ops out, g, t of one dtype), add_bias_relu
 * (Linear's epilogue) and threshold_backward_sum (the backward and the bias gradient in
 * one pass). */
#include "cpu.h"

/* ---- add_bias_relu (weft/kernel.h) -----------------------------------------------------
 * Linear's epilogue: y[M, N] = relu(y + bias[N]) in place, rows split across threads. */

struct bias_relu_job {
    char *y;
    const char *bias;
    int64_t N;
};

/* ---- threshold_backward_sum (weft/kernel.h) ---------------------------------------------
 * ReLU's backward and the bias gradient in one pass over the gradient: the rows in blocks
 * of TBS_ROWS, each block's column sums (float64) in its own row of partials, which are
 * added in block order afterwards, so the sums do not depend on how blocks fall to
 * threads. */
#define TBS_ROWS 32

struct tbs_job {
    const char *g, *y;
    char *out;
    double *partial; /* [blocks, N] */
    int64_t M, N;
    double threshold;
};

#define CPU_KERNEL_INC "relu_loops.inc"
#include "each_floating_dtype.inc"
#undef CPU_KERNEL_INC

static int add_bias_relu_kernel(const struct weft_op_call *call)
{
    weft_tensor *y = call->out[0];
    const weft_tensor *b = call->in[0];
    if (y->ndim != 2 || b->ndim != 1 || b->shape[0] != y->shape[1] || b->dtype != y->dtype ||
        !weft_tensor_is_contiguous(y) || !weft_tensor_is_contiguous(b))
        return weft_error_set(WEFT_ERR_RUNTIME, "add_bias_relu: expected a contiguous [M, N] "
                                                "output and [N] bias of its dtype");
    struct bias_relu_job j = {weft_tensor_data(y), weft_tensor_data(b), y->shape[1]};
    void (*rows)(void *, int64_t, int64_t) = NULL;
    switch (y->dtype) {
#define ADD_BIAS_RELU_CASE(name, id, T, C)                                                    \
    case id:                                                                                  \
        rows = add_bias_relu_rows_##name;                                                     \
        break;
        WEFT_FOR_FLOATING_DTYPES(ADD_BIAS_RELU_CASE)
#undef ADD_BIAS_RELU_CASE
    default:
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED,
                              "\"add_bias_relu\" not implemented for '%s' on cpu",
                              weft_dtype_torch_name(y->dtype));
    }
    int64_t grain = CPU_PARALLEL_GRAIN / (j.N > 0 ? j.N : 1);
    cpu_parallel_for(y->shape[0], grain > 0 ? grain : 1, rows, &j);
    return 0;
}

static int threshold_backward_sum_kernel(const struct weft_op_call *call)
{
    const weft_tensor *g = call->in[0], *y = call->in[1];
    weft_tensor *out = call->out[0], *sum = call->out[1];
    if (g->ndim != 2 || y->ndim != 2 || out->ndim != 2 || sum->ndim != 1 ||
        y->shape[0] != g->shape[0] || y->shape[1] != g->shape[1] ||
        out->shape[0] != g->shape[0] || out->shape[1] != g->shape[1] ||
        sum->shape[0] != g->shape[1] || y->dtype != g->dtype || out->dtype != g->dtype ||
        sum->dtype != g->dtype || !weft_tensor_is_contiguous(g) ||
        !weft_tensor_is_contiguous(y) || !weft_tensor_is_contiguous(out) ||
        !weft_tensor_is_contiguous(sum))
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "threshold_backward_sum: expected contiguous [M, N] gradient, "
                              "input and output and an [N] sum, all of one dtype");
    struct tbs_job j = {weft_tensor_data(g), weft_tensor_data(y), weft_tensor_data(out), NULL,
                        g->shape[0], g->shape[1], call->scalar[0]};
    int64_t blocks = (j.M + TBS_ROWS - 1) / TBS_ROWS;
    size_t bytes = (size_t)(blocks * j.N) * sizeof(double);
    if (bytes > 0 && !(j.partial = cpu_alloc(0, bytes)))
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY,
                              "threshold_backward_sum: out of memory for %lld partial sums",
                              (long long)(blocks * j.N));
    int64_t grain = CPU_PARALLEL_GRAIN / (TBS_ROWS * (j.N > 0 ? j.N : 1));
    switch (g->dtype) {
#define THRESHOLD_BACKWARD_SUM_CASE(name, id, T, C)                                            \
    case id:                                                                                  \
        cpu_parallel_for(blocks, grain > 0 ? grain : 1, tbs_blocks_##name, &j);               \
        tbs_finish_##name(&j, blocks, weft_tensor_data(sum));                                 \
        break;
        WEFT_FOR_FLOATING_DTYPES(THRESHOLD_BACKWARD_SUM_CASE)
#undef THRESHOLD_BACKWARD_SUM_CASE
    default:
        cpu_free(0, j.partial, bytes);
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED,
                              "\"threshold_backward_sum\" not implemented for '%s' on cpu",
                              weft_dtype_torch_name(g->dtype));
    }
    cpu_free(0, j.partial, bytes);
    return 0;
}

const struct weft_kernel_entry cpu_relu_kernels[] = {
#define THRESHOLD_BACKWARD_ENTRY(name, id, T, C)                                              \
    {-1, WEFT_OP_THRESHOLD_BACKWARD_NAME, WEFT_DTYPE_BIT(id), threshold_backward_##name},
    WEFT_FOR_FLOATING_DTYPES(THRESHOLD_BACKWARD_ENTRY)
#undef THRESHOLD_BACKWARD_ENTRY
    {-1, WEFT_OP_THRESHOLD_BACKWARD_SUM_NAME, WEFT_DTYPES_FLOATING, threshold_backward_sum_kernel},
    {-1, WEFT_OP_ADD_BIAS_RELU_NAME, WEFT_DTYPES_FLOATING, add_bias_relu_kernel},
    {0},
};
