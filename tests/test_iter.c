/* tests/test_iter.c: the strided iterator's coalescing, ordering and ranges. */
#include <string.h>

#include "testutil.h"

TestSuite(iter, .init = tu_setup, .fini = tu_teardown);

/* A header-only tensor over fake storage: the iterator only reads metadata. */
static weft_tensor fake(int ndim, const int64_t *shape, const int64_t *stride, enum weft_dtype dt)
{
    static struct weft_storage storage = {.refcount = 1, .data = (void *)0x1000, .nbytes = 1 << 30};
    weft_tensor t = {.refcount = 1, .ndim = ndim, .dtype = dt, .storage = &storage};
    if (ndim > 0) {
        memcpy(t.shape, shape, (size_t)ndim * sizeof *shape);
        memcpy(t.stride, stride, (size_t)ndim * sizeof *stride);
    }
    return t;
}

Test(iter, contiguous_operands_collapse_to_one_dim)
{
    int64_t shape[3] = {2, 3, 4}, stride[3] = {12, 4, 1};
    weft_tensor a = fake(3, shape, stride, WEFT_F32), b = fake(3, shape, stride, WEFT_F64);
    const weft_tensor *ops[2] = {&a, &b};
    struct weft_iter it;
    cr_assert_eq(weft_iter_init(&it, 2, ops), 0);
    cr_expect_eq(it.ndim, 1);
    cr_expect_eq(it.shape[0], 24);
    cr_expect_eq(it.strides[0][0], 4);
    cr_expect_eq(it.strides[1][0], 8);
}

Test(iter, size_one_dims_are_dropped)
{
    int64_t shape[4] = {1, 5, 1, 3}, stride[4] = {999, 3, 7, 1};
    weft_tensor a = fake(4, shape, stride, WEFT_F32);
    const weft_tensor *ops[1] = {&a};
    struct weft_iter it;
    cr_assert_eq(weft_iter_init(&it, 1, ops), 0);
    cr_expect_eq(it.ndim, 1);
    cr_expect_eq(it.shape[0], 15);
}

Test(iter, walks_in_the_first_operands_memory_order)
{
    /* Output transposed in memory: the walk follows it, so its inner stride is 1. */
    int64_t shape[2] = {3, 5}, tstride[2] = {1, 3}, cstride[2] = {5, 1};
    weft_tensor out = fake(2, shape, tstride, WEFT_F32), in = fake(2, shape, cstride, WEFT_F32);
    const weft_tensor *ops[2] = {&out, &in};
    struct weft_iter it;
    cr_assert_eq(weft_iter_init(&it, 2, ops), 0);
    cr_expect_eq(it.ndim, 2);
    cr_expect_eq(it.shape[1], 3, "inner dim is the one with stride 1 in the output");
    cr_expect_eq(it.strides[0][1], 4);
    cr_expect_eq(it.strides[1][1], 20);
}

Test(iter, broadcast_operands_keep_zero_strides)
{
    int64_t shape[2] = {4, 6}, stride[2] = {6, 1}, bstride[2] = {0, 1};
    weft_tensor out = fake(2, shape, stride, WEFT_F32), row = fake(2, shape, bstride, WEFT_F32);
    const weft_tensor *ops[2] = {&out, &row};
    struct weft_iter it;
    cr_assert_eq(weft_iter_init(&it, 2, ops), 0);
    cr_expect_eq(it.ndim, 2, "a broadcast operand stops the merge");
    cr_expect_eq(it.strides[1][0], 0);
}

Test(iter, mismatched_shapes_are_refused)
{
    int64_t s1[2] = {2, 3}, s2[2] = {3, 2}, st[2] = {3, 1}, st2[2] = {2, 1};
    weft_tensor a = fake(2, s1, st, WEFT_F32), b = fake(2, s2, st2, WEFT_F32);
    const weft_tensor *ops[2] = {&a, &b};
    struct weft_iter it;
    cr_assert_neq(weft_iter_init(&it, 2, ops), 0);
    tu_assert_error(WEFT_ERR_RUNTIME, "operand 1 has shape [3, 2], expected [2, 3]");
}

struct visit {
    int64_t count;
    int64_t offsets[64];
};

static void record(void *ctx, char **data, const int64_t *stride, int64_t n)
{
    struct visit *v = ctx;
    for (int64_t i = 0; i < n; i++)
        v->offsets[v->count++] = (int64_t)(data[0] + i * stride[0] - (char *)0x1000) / 4;
}

Test(iter, ranges_visit_each_element_once_in_row_major_order)
{
    /* A sliced (non-mergeable) 3x4 view with row stride 10. */
    int64_t shape[2] = {3, 4}, stride[2] = {10, 1};
    weft_tensor a = fake(2, shape, stride, WEFT_F32);
    const weft_tensor *ops[1] = {&a};
    struct weft_iter it;
    cr_assert_eq(weft_iter_init(&it, 1, ops), 0);
    struct visit v = {0};
    /* Split at awkward points: pieces must not cross a line and must cover all. */
    weft_iter_run(&it, 0, 5, record, &v);
    weft_iter_run(&it, 5, 7, record, &v);
    weft_iter_run(&it, 7, 100, record, &v);
    int64_t expected[12] = {0, 1, 2, 3, 10, 11, 12, 13, 20, 21, 22, 23};
    cr_assert_eq(v.count, 12);
    for (int i = 0; i < 12; i++)
        cr_expect_eq(v.offsets[i], expected[i], "element %d", i);
}

Test(iter, zero_size_visits_nothing_and_zero_dim_visits_one)
{
    int64_t shape[2] = {0, 4}, stride[2] = {4, 1};
    weft_tensor a = fake(2, shape, stride, WEFT_F32);
    const weft_tensor *ops[1] = {&a};
    struct weft_iter it;
    cr_assert_eq(weft_iter_init(&it, 1, ops), 0);
    struct visit v = {0};
    weft_iter_run(&it, 0, it.numel, record, &v);
    cr_expect_eq(v.count, 0);
    weft_tensor s = fake(0, NULL, NULL, WEFT_F32);
    const weft_tensor *sops[1] = {&s};
    cr_assert_eq(weft_iter_init(&it, 1, sops), 0);
    weft_iter_run(&it, 0, it.numel, record, &v);
    cr_expect_eq(v.count, 1);
}
