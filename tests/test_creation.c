/* tests/test_creation.c: zeros/ones/full, arange, linspace, eye, from_host and from_blob
 * give PyTorch's values, lengths and errors. */
#include <math.h>
#include <string.h>

#include "testutil.h"

TestSuite(creation, .init = tu_setup, .fini = tu_teardown);

#define SHAPE(...) ((const int64_t[]){__VA_ARGS__})
#define VALUES(...) ((const double[]){__VA_ARGS__})

static const enum weft_dtype all_dtypes[] = {WEFT_BOOL, WEFT_U8,  WEFT_I8,   WEFT_I16, WEFT_I32,
                                             WEFT_I64,  WEFT_F16, WEFT_BF16, WEFT_F32, WEFT_F64};

Test(creation, zeros_ones_and_full_in_every_dtype)
{
    for (size_t k = 0; k < sizeof all_dtypes / sizeof *all_dtypes; k++) {
        weft_scope_push();
        enum weft_dtype dt = all_dtypes[k];
        weft_tensor *z = weft_zeros(2, SHAPE(2, 3), dt, WEFT_CPU);
        tu_assert_shape(z, 2, SHAPE(2, 3));
        cr_assert_eq(z->dtype, dt);
        tu_assert_close(z, VALUES(0, 0, 0, 0, 0, 0), 6, 0, 0);
        tu_assert_close(weft_ones(1, SHAPE(3), dt, WEFT_CPU), VALUES(1, 1, 1), 3, 0, 0);
        double seven = dt == WEFT_BOOL ? 1 : 7;
        tu_assert_close(weft_full(1, SHAPE(2), 7, dt, WEFT_CPU), (double[]){seven, seven}, 2, 0, 0);
        weft_tensor *like = weft_full_like(z, 1);
        tu_assert_shape(like, 2, SHAPE(2, 3));
        cr_assert_eq(like->dtype, dt);
        cr_assert_eq(weft_ones_like(z)->dtype, dt);
        cr_assert_eq(weft_zeros_like(z)->dtype, dt);
        weft_scope_pop();
    }
}

Test(creation, full_converts_like_pytorch)
{
    weft_scope_push();
    tu_assert_close(weft_full(1, SHAPE(1), 2.7, WEFT_I32, WEFT_CPU), VALUES(2), 1, 0, 0);
    tu_assert_close(weft_full(1, SHAPE(1), -2.7, WEFT_I64, WEFT_CPU), VALUES(-2), 1, 0, 0);
    tu_assert_close(weft_full(1, SHAPE(1), 0.5, WEFT_BOOL, WEFT_CPU), VALUES(1), 1, 0, 0);
    tu_assert_close(weft_full(1, SHAPE(1), INFINITY, WEFT_F16, WEFT_CPU), VALUES(INFINITY), 1, 0, 0);
    tu_assert_close(weft_full(1, SHAPE(1), 0.1, WEFT_BF16, WEFT_CPU), VALUES(0.10009765625), 1, 0, 0);
    weft_scope_pop();
}

Test(creation, full_refuses_values_that_overflow_the_dtype)
{
    weft_scope_push();
    cr_assert_null(weft_full(1, SHAPE(1), 300, WEFT_U8, WEFT_CPU));
    tu_assert_error(WEFT_ERR_RUNTIME, "value cannot be converted to type uint8 without overflow");
    /* the value is a double, PyTorch's float scalar: torch.full((1,), -1.0, dtype=uint8)
     * raises (only a Python int would wrap to 255; weft's API has none) (issue 32) */
    cr_assert_null(weft_full(1, SHAPE(1), -1, WEFT_U8, WEFT_CPU));
    tu_assert_error(WEFT_ERR_RUNTIME, "value cannot be converted to type uint8 without overflow");
    cr_assert_null(weft_fill_(weft_zeros(1, SHAPE(2), WEFT_U8, WEFT_CPU), -1));
    tu_assert_error(WEFT_ERR_RUNTIME, "value cannot be converted to type uint8 without overflow");
    cr_assert_null(weft_full(1, SHAPE(1), 128, WEFT_I8, WEFT_CPU));
    tu_assert_error(WEFT_ERR_RUNTIME, "value cannot be converted to type int8 without overflow");
    cr_assert_null(weft_full(1, SHAPE(1), NAN, WEFT_I32, WEFT_CPU));
    tu_assert_error(WEFT_ERR_RUNTIME, "value cannot be converted to type int32 without overflow");
    cr_assert_null(weft_full(1, SHAPE(1), 1e39, WEFT_F32, WEFT_CPU));
    tu_assert_error(WEFT_ERR_RUNTIME, "value cannot be converted to type float32 without overflow");
    cr_assert_null(weft_full(1, SHAPE(1), 70000, WEFT_F16, WEFT_CPU));
    tu_assert_error(WEFT_ERR_RUNTIME, "value cannot be converted to type float16 without overflow");
    weft_scope_pop();
}

Test(creation, negative_sizes_are_refused)
{
    cr_assert_null(weft_zeros(2, SHAPE(2, -1), WEFT_F32, WEFT_CPU));
    tu_assert_error(WEFT_ERR_RUNTIME, "Trying to create tensor with negative dimension -1: [2, -1]");
}

Test(creation, scalar_tensor_has_no_dims)
{
    weft_scope_push();
    weft_tensor *s = weft_scalar_tensor(2.5, WEFT_F64, WEFT_CPU);
    cr_assert_eq(s->ndim, 0);
    cr_assert_eq(weft_tensor_numel(s), 1);
    double v;
    cr_assert_eq(weft_tensor_item(s, &v), 0);
    cr_assert_eq(v, 2.5);
    weft_scope_pop();
}

Test(creation, arange_length_is_ceil_of_the_span_over_the_step)
{
    weft_scope_push();
    tu_assert_close(weft_arange(0, 10, 3, WEFT_I64, WEFT_CPU), VALUES(0, 3, 6, 9), 4, 0, 0);
    tu_assert_close(weft_arange(1, 2.5, 0.5, WEFT_F32, WEFT_CPU), VALUES(1, 1.5, 2), 3, 0, 0);
    tu_assert_close(weft_arange(5, 0, -2, WEFT_I32, WEFT_CPU), VALUES(5, 3, 1), 3, 0, 0);
    tu_assert_shape(weft_arange(0, 1, 0.1, WEFT_F64, WEFT_CPU), 1, SHAPE(10));
    /* PyTorch's documented floating-point surprise: (1.3 - 1) / 0.1 > 3. */
    tu_assert_close(weft_arange(1, 1.3, 0.1, WEFT_F64, WEFT_CPU), VALUES(1, 1.1, 1.2, 1.3), 4, 1e-15, 0);
    tu_assert_shape(weft_arange(3, 3, 1, WEFT_F32, WEFT_CPU), 1, SHAPE(0));
    weft_scope_pop();
}

Test(creation, arange_errors_use_pytorch_texts)
{
    cr_assert_null(weft_arange(0, 10, 0, WEFT_F32, WEFT_CPU));
    tu_assert_error(WEFT_ERR_RUNTIME, "step must be nonzero");
    cr_assert_null(weft_arange(0, 10, -1, WEFT_F32, WEFT_CPU));
    tu_assert_error(WEFT_ERR_RUNTIME, "upper bound and larger bound inconsistent with step sign");
    cr_assert_null(weft_arange(0, INFINITY, 1, WEFT_F32, WEFT_CPU));
    tu_assert_error(WEFT_ERR_RUNTIME, "unsupported range: 0 -> inf");
}

Test(creation, linspace_is_symmetric_and_inclusive)
{
    weft_scope_push();
    tu_assert_close(weft_linspace(0, 1, 5, WEFT_F32, WEFT_CPU), VALUES(0, 0.25, 0.5, 0.75, 1), 5, 0, 0);
    tu_assert_close(weft_linspace(-1, 1, 4, WEFT_F64, WEFT_CPU), VALUES(-1, -1.0 / 3, 1.0 / 3, 1), 4,
                    1e-15, 0);
    tu_assert_close(weft_linspace(0, 10, 4, WEFT_I64, WEFT_CPU), VALUES(0, 3, 6, 10), 4, 0, 0);
    tu_assert_close(weft_linspace(3, 10, 1, WEFT_F32, WEFT_CPU), VALUES(3), 1, 0, 0);
    tu_assert_shape(weft_linspace(3, 10, 0, WEFT_F32, WEFT_CPU), 1, SHAPE(0));
    /* The last element is exactly end, whatever the rounding of the step. */
    weft_tensor *l = weft_linspace(0.1, 0.7, 7, WEFT_F64, WEFT_CPU);
    double v;
    cr_assert_eq(weft_tensor_item(weft_select(l, 0, -1), &v), 0);
    cr_assert_eq(v, 0.7);
    cr_assert_null(weft_linspace(0, 1, -1, WEFT_F32, WEFT_CPU));
    tu_assert_error(WEFT_ERR_RUNTIME, "number of steps must be non-negative");
    weft_scope_pop();
}

Test(creation, eye_fills_the_diagonal)
{
    weft_scope_push();
    tu_assert_close(weft_eye(3, -1, WEFT_F32, WEFT_CPU), VALUES(1, 0, 0, 0, 1, 0, 0, 0, 1), 9, 0, 0);
    tu_assert_close(weft_eye(2, 4, WEFT_I64, WEFT_CPU), VALUES(1, 0, 0, 0, 0, 1, 0, 0), 8, 0, 0);
    tu_assert_close(weft_eye(3, 2, WEFT_BOOL, WEFT_CPU), VALUES(1, 0, 0, 1, 0, 0), 6, 0, 0);
    tu_assert_shape(weft_eye(0, -1, WEFT_F32, WEFT_CPU), 2, SHAPE(0, 0));
    cr_assert_null(weft_eye(-2, -1, WEFT_F32, WEFT_CPU));
    tu_assert_error(WEFT_ERR_RUNTIME, "n must be greater or equal to 0, got -2");
    weft_scope_pop();
}

Test(creation, from_host_copies_the_data)
{
    weft_scope_push();
    int32_t data[6] = {1, 2, 3, 4, 5, 6};
    weft_tensor *t = weft_from_host(data, 2, SHAPE(3, 2), WEFT_I32, WEFT_CPU);
    tu_assert_shape(t, 2, SHAPE(3, 2));
    data[0] = 100;
    tu_assert_close(t, VALUES(1, 2, 3, 4, 5, 6), 6, 0, 0);
    cr_assert(t->storage->resizable);
    weft_scope_pop();
}

static int deleted;
static void count_delete(void *ctx, void *data)
{
    (void)data;
    deleted += *(int *)ctx;
}

Test(creation, from_blob_wraps_memory_without_copying)
{
    float data[6] = {0, 1, 2, 3, 4, 5};
    int weight = 1;
    deleted = 0;
    weft_tensor *t = weft_from_blob(data, 2, SHAPE(2, 3), NULL, WEFT_F32, WEFT_CPU, count_delete,
                                    &weight);
    cr_assert_not_null(t, "%s", weft_error_message());
    cr_assert_eq(weft_tensor_data(t), (void *)data);
    cr_assert_eq(t->storage->nbytes, sizeof data);
    data[4] = 40;
    weft_scope_push();
    tu_assert_close(t, VALUES(0, 1, 2, 3, 40, 5), 6, 0, 0);
    weft_tensor *view = weft_tensor_retain(weft_t(t));
    weft_scope_pop();
    weft_tensor_release(t);
    cr_assert_eq(deleted, 0, "a view still holds the storage");
    weft_tensor_release(view);
    cr_assert_eq(deleted, 1, "the deleter runs once, with the last reference");
}

Test(creation, from_blob_with_strides_spans_only_what_they_reach)
{
    double data[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    weft_tensor *t = weft_from_blob(data, 2, SHAPE(2, 2), SHAPE(1, 4), WEFT_F64, WEFT_CPU, NULL, NULL);
    cr_assert_not_null(t, "%s", weft_error_message());
    cr_assert_eq(t->storage->nbytes, 6 * sizeof(double));
    weft_scope_push();
    tu_assert_close(t, VALUES(0, 4, 1, 5), 4, 0, 0);
    weft_scope_pop();
    weft_tensor_release(t);
}

Test(creation, creation_results_are_recorded_in_the_scope)
{
    weft_scope_push();
    weft_tensor *t = weft_zeros(1, SHAPE(4), WEFT_F32, WEFT_CPU);
    cr_assert_eq(t->refcount, 1);
    weft_tensor_retain(t);
    weft_scope_pop();
    cr_assert_eq(t->refcount, 1, "the scope released its reference, ours remains");
    weft_tensor_release(t);
}

/* An out-of-memory error names the op whose front end wanted the memory and the tensor
 * it wanted, before the allocator's own words. */
Test(creation, an_out_of_memory_error_names_the_op_and_the_shape)
{
    weft_scope_push();
    int64_t one[2] = {1, 1}, huge[2] = {(int64_t)1 << 31, (int64_t)1 << 30};
    weft_tensor *x = weft_expand(weft_ones(2, one, WEFT_F32, WEFT_CPU), 2, huge);
    cr_assert_not_null(x, "%s", weft_error_message());
    cr_expect_null(weft_exp(x));
    tu_assert_error(WEFT_ERR_OUT_OF_MEMORY, "weft_exp wanted a float32 tensor of shape "
                                            "[2147483648, 1073741824] on cpu: DefaultCPUAllocator: "
                                            "not enough memory");
    weft_error_clear();
    /* Called from outside weft: no op to name. */
    int64_t big[2] = {(int64_t)1 << 30, (int64_t)1 << 30};
    cr_expect_null(weft_empty(2, big, WEFT_F64, WEFT_CPU));
    cr_expect_eq(strncmp(weft_error_message(), "wanted a float64 tensor of shape "
                                               "[1073741824, 1073741824] on cpu: ", 60), 0,
                 "%s", weft_error_message());
    weft_error_clear();
    weft_scope_pop();
}

/* A backward whose formula wants too much: the message says which node ran. */
static int greedy_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                           weft_tensor **grad_inputs)
{
    (void)node, (void)grad_outputs;
    int64_t huge[2] = {(int64_t)1 << 31, (int64_t)1 << 30};
    grad_inputs[0] = weft_exp(weft_expand(weft_ones(1, (int64_t[]){1}, WEFT_F32, WEFT_CPU), 2, huge));
    return grad_inputs[0] ? 0 : weft_error_code();
}

Test(creation, an_out_of_memory_error_in_backward_names_the_node)
{
    weft_scope_push();
    int64_t s[1] = {2};
    weft_tensor *x = weft_ones(1, s, WEFT_F32, WEFT_CPU);
    weft_requires_grad_(x, true);
    weft_tensor *z = weft_zeros(1, s, WEFT_F32, WEFT_CPU); /* the node's output */
    struct weft_node *node = weft_node_create("GreedyBackward0", greedy_backward, 1, &x, 0);
    cr_assert_not_null(node);
    cr_assert_eq(weft_node_finish(node, 1, &z), 0, "%s", weft_error_message());
    cr_expect_neq(weft_backward(weft_sum(z, 0, NULL, false), NULL, false), 0);
    tu_assert_error(WEFT_ERR_OUT_OF_MEMORY, "weft_exp wanted a float32 tensor of shape "
                                            "[2147483648, 1073741824] on cpu in the backward of "
                                            "GreedyBackward0: DefaultCPUAllocator");
    weft_error_clear();
    weft_scope_pop();
}
