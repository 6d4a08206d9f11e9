/* tests/test_view.c: views share storage and move no data; their shapes, strides,
 * offsets and errors are PyTorch's. */
#include <string.h>

#include "testutil.h"

TestSuite(view, .init = tu_setup, .fini = tu_teardown);

#define SHAPE(...) ((const int64_t[]){__VA_ARGS__})
#define NDIM(...) ((int)(sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))

static void assert_geometry(const weft_tensor *t, int ndim, const int64_t *shape,
                            const int64_t *stride, int64_t offset)
{
    tu_assert_shape(t, ndim, shape);
    for (int i = 0; i < ndim; i++)
        cr_assert_eq(t->stride[i], stride[i], "stride[%d] = %lld, expected %lld", i,
                     (long long)t->stride[i], (long long)stride[i]);
    cr_assert_eq(t->offset, offset, "offset %lld, expected %lld", (long long)t->offset,
                 (long long)offset);
}

/* arange(n) as float32, reshaped. */
static weft_tensor *range_tensor(int64_t n, int ndim, const int64_t *shape)
{
    weft_tensor *a = weft_arange(0, (double)n, 1, WEFT_F32, WEFT_CPU);
    weft_tensor *r = weft_view(a, ndim, shape);
    cr_assert_not_null(r, "%s", weft_error_message());
    return r;
}

static void assert_values(const weft_tensor *t, const double *expected, int64_t n)
{
    tu_assert_close(t, expected, n, 0, 0);
}

Test(view, reshape_of_arange_has_row_major_strides)
{
    weft_scope_push();
    weft_tensor *a = weft_arange(0, 24, 1, WEFT_F32, WEFT_CPU);
    weft_tensor *r = weft_reshape(a, 3, SHAPE(2, 3, 4));
    assert_geometry(r, 3, SHAPE(2, 3, 4), SHAPE(12, 4, 1), 0);
    cr_assert(r->storage == a->storage, "reshape of a contiguous tensor is a view");
    cr_assert(weft_tensor_is_contiguous(r));
    weft_scope_pop();
}

Test(view, transpose_swaps_sizes_and_strides_and_is_not_contiguous)
{
    weft_scope_push();
    weft_tensor *r = range_tensor(24, 3, SHAPE(2, 3, 4));
    weft_tensor *t = weft_transpose(r, 0, 2);
    assert_geometry(t, 3, SHAPE(4, 3, 2), SHAPE(1, 4, 12), 0);
    cr_assert_not(weft_tensor_is_contiguous(t));
    weft_tensor *back = weft_transpose(t, -1, -3);
    assert_geometry(back, 3, SHAPE(2, 3, 4), SHAPE(12, 4, 1), 0);
    cr_assert(weft_tensor_is_contiguous(back));
    /* t[i][j][k] == r[k][j][i] */
    double expected[24];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < 2; k++)
                expected[i * 6 + j * 2 + k] = k * 12 + j * 4 + i;
    assert_values(t, expected, 24);
    weft_scope_pop();
}

Test(view, contiguity_skips_size_one_dims_and_empty_tensors)
{
    weft_scope_push();
    weft_tensor *base = weft_zeros(1, SHAPE(6), WEFT_F32, WEFT_CPU);
    weft_tensor *odd = weft_as_strided(base, 3, SHAPE(2, 1, 3), SHAPE(3, 999, 1), 0);
    cr_assert_not_null(odd, "%s", weft_error_message());
    cr_assert(weft_tensor_is_contiguous(odd), "(2,1,3) with strides (3,999,1) is contiguous");
    weft_tensor *empty = weft_as_strided(base, 2, SHAPE(0, 3), SHAPE(7, 5), 0);
    cr_assert(weft_tensor_is_contiguous(empty), "a tensor with no elements is contiguous");
    weft_tensor *scalar = weft_scalar_tensor(2, WEFT_F32, WEFT_CPU);
    cr_assert(weft_tensor_is_contiguous(scalar), "0-dim tensors are contiguous");
    weft_tensor *gappy = weft_as_strided(base, 2, SHAPE(2, 2), SHAPE(3, 1), 0);
    cr_assert_not(weft_tensor_is_contiguous(gappy));
    weft_scope_pop();
}

Test(view, view_infers_one_minus_one)
{
    weft_scope_push();
    weft_tensor *r = range_tensor(24, 2, SHAPE(4, -1));
    assert_geometry(r, 2, SHAPE(4, 6), SHAPE(6, 1), 0);
    weft_tensor *v = weft_view(r, 3, SHAPE(-1, 2, 3));
    assert_geometry(v, 3, SHAPE(4, 2, 3), SHAPE(6, 3, 1), 0);
    weft_scope_pop();
}

Test(view, view_of_a_sliced_tensor_splits_within_contiguous_chunks)
{
    weft_scope_push();
    weft_tensor *r = range_tensor(12, 2, SHAPE(4, 3));
    weft_tensor *n = weft_narrow(r, 1, 0, 2); /* (4, 2) strides (3, 1) */
    weft_tensor *v = weft_view(n, 3, SHAPE(2, 2, 2));
    assert_geometry(v, 3, SHAPE(2, 2, 2), SHAPE(6, 3, 1), 0);
    assert_values(v, (double[]){0, 1, 3, 4, 6, 7, 9, 10}, 8);
    cr_assert_null(weft_view(n, 1, SHAPE(8)));
    tu_assert_error(WEFT_ERR_RUNTIME,
                    "view size is not compatible with input tensor's size and stride (at least "
                    "one dimension spans across two contiguous subspaces). Use .reshape(...) "
                    "instead.");
    weft_scope_pop();
}

Test(view, view_keeps_size_one_dims_anywhere)
{
    weft_scope_push();
    weft_tensor *r = range_tensor(6, 2, SHAPE(2, 3));
    weft_tensor *t = weft_t(r); /* (3, 2) strides (1, 3) */
    weft_tensor *v = weft_view(t, 4, SHAPE(1, 3, 1, 2));
    assert_geometry(v, 4, SHAPE(1, 3, 1, 2), SHAPE(3, 1, 6, 3), 0);
    weft_scope_pop();
}

Test(view, view_of_transposed_tensor_fails_with_pytorch_text)
{
    weft_scope_push();
    weft_tensor *r = range_tensor(6, 2, SHAPE(2, 3));
    cr_assert_null(weft_view(weft_t(r), 1, SHAPE(-1)));
    tu_assert_error(WEFT_ERR_RUNTIME,
                    "view size is not compatible with input tensor's size and stride (at least "
                    "one dimension spans across two contiguous subspaces). Use .reshape(...) "
                    "instead.");
    weft_scope_pop();
}

Test(view, view_with_wrong_numel_fails)
{
    weft_scope_push();
    weft_tensor *r = range_tensor(6, 1, SHAPE(6));
    cr_assert_null(weft_view(r, 2, SHAPE(2, 5)));
    tu_assert_error(WEFT_ERR_RUNTIME, "shape '[2, 5]' is invalid for input of size 6");
    cr_assert_null(weft_view(r, 2, SHAPE(-1, 4)));
    tu_assert_error(WEFT_ERR_RUNTIME, "shape '[-1, 4]' is invalid for input of size 6");
    cr_assert_null(weft_view(r, 2, SHAPE(-1, -1)));
    tu_assert_error(WEFT_ERR_RUNTIME, "only one dimension can be inferred");
    cr_assert_null(weft_view(r, 2, SHAPE(-2, 3)));
    tu_assert_error(WEFT_ERR_RUNTIME, "invalid shape dimension -2");
    weft_scope_pop();
}

Test(view, view_of_empty_tensor)
{
    weft_scope_push();
    weft_tensor *e = weft_zeros(2, SHAPE(0, 4), WEFT_F32, WEFT_CPU);
    weft_tensor *v = weft_view(e, 3, SHAPE(2, 0, 2));
    assert_geometry(v, 3, SHAPE(2, 0, 2), SHAPE(2, 2, 1), 0);
    weft_tensor *same = weft_view(e, 2, SHAPE(0, 4));
    assert_geometry(same, 2, SHAPE(0, 4), SHAPE(4, 1), 0);
    cr_assert_null(weft_view(e, 2, SHAPE(-1, 0)));
    tu_assert_error(WEFT_ERR_RUNTIME,
                    "cannot reshape tensor of 0 elements into shape [-1, 0] because the "
                    "unspecified dimension size -1 can be any value and is ambiguous");
    weft_scope_pop();
}

Test(view, view_of_zero_dim_tensor)
{
    weft_scope_push();
    weft_tensor *s = weft_scalar_tensor(7, WEFT_F32, WEFT_CPU);
    weft_tensor *v = weft_view(s, 2, SHAPE(1, -1));
    assert_geometry(v, 2, SHAPE(1, 1), SHAPE(1, 1), 0);
    weft_tensor *back = weft_view(v, 0, NULL);
    cr_assert_eq(back->ndim, 0);
    assert_values(back, (double[]){7}, 1);
    weft_scope_pop();
}

Test(view, reshape_copies_only_when_no_view_exists)
{
    weft_scope_push();
    weft_tensor *r = range_tensor(6, 2, SHAPE(2, 3));
    weft_tensor *t = weft_t(r);
    weft_tensor *flat = weft_reshape(t, 1, SHAPE(-1));
    tu_assert_shape(flat, 1, SHAPE(6));
    cr_assert(flat->storage != r->storage, "no view exists, so reshape copies");
    assert_values(flat, (double[]){0, 3, 1, 4, 2, 5}, 6);
    weft_tensor *same = weft_reshape(t, 3, SHAPE(3, 1, 2));
    cr_assert(same->storage == r->storage, "a view exists, so reshape is a view");
    weft_scope_pop();
}

Test(view, t_of_small_tensors_and_its_error)
{
    weft_scope_push();
    weft_tensor *v = range_tensor(3, 1, SHAPE(3));
    assert_geometry(weft_t(v), 1, SHAPE(3), SHAPE(1), 0);
    weft_tensor *s = weft_scalar_tensor(1, WEFT_F32, WEFT_CPU);
    cr_assert_eq(weft_t(s)->ndim, 0);
    weft_tensor *m = range_tensor(6, 2, SHAPE(2, 3));
    assert_geometry(weft_t(m), 2, SHAPE(3, 2), SHAPE(1, 3), 0);
    weft_tensor *c = range_tensor(24, 3, SHAPE(2, 3, 4));
    cr_assert_null(weft_t(c));
    tu_assert_error(WEFT_ERR_RUNTIME, "t() expects a tensor with <= 2 dimensions, but self is 3D");
    weft_scope_pop();
}

Test(view, transpose_checks_dims)
{
    weft_scope_push();
    weft_tensor *m = range_tensor(6, 2, SHAPE(2, 3));
    cr_assert_null(weft_transpose(m, 0, 2));
    tu_assert_error(WEFT_ERR_INDEX,
                    "Dimension out of range (expected to be in range of [-2, 1], but got 2)");
    weft_scope_pop();
}

Test(view, permute_reorders_dims)
{
    weft_scope_push();
    weft_tensor *r = range_tensor(24, 3, SHAPE(2, 3, 4));
    weft_tensor *p = weft_permute(r, 3, (const int[]){2, 0, 1});
    assert_geometry(p, 3, SHAPE(4, 2, 3), SHAPE(1, 12, 4), 0);
    weft_tensor *q = weft_permute(r, 3, (const int[]){-1, -2, -3});
    assert_geometry(q, 3, SHAPE(4, 3, 2), SHAPE(1, 4, 12), 0);
    weft_scope_pop();
}

Test(view, permute_errors_use_pytorch_texts)
{
    weft_scope_push();
    weft_tensor *r = range_tensor(24, 3, SHAPE(2, 3, 4));
    cr_assert_null(weft_permute(r, 2, (const int[]){0, 1}));
    tu_assert_error(WEFT_ERR_RUNTIME,
                    "permute(sparse_coo): number of dimensions in the tensor input does not "
                    "match the length of the desired ordering of dimensions i.e. input.dim() = "
                    "3 is not equal to len(dims) = 2");
    cr_assert_null(weft_permute(r, 3, (const int[]){0, 1, -3}));
    tu_assert_error(WEFT_ERR_RUNTIME, "permute(): duplicate dims are not allowed.");
    cr_assert_null(weft_permute(r, 3, (const int[]){0, 1, 3}));
    tu_assert_error(WEFT_ERR_INDEX,
                    "Dimension out of range (expected to be in range of [-3, 2], but got 3)");
    weft_scope_pop();
}

Test(view, narrow_moves_the_offset)
{
    weft_scope_push();
    weft_tensor *r = range_tensor(24, 2, SHAPE(4, 6));
    weft_tensor *n = weft_narrow(r, 1, 2, 3);
    assert_geometry(n, 2, SHAPE(4, 3), SHAPE(6, 1), 2);
    weft_tensor *m = weft_narrow(r, 0, -2, 2);
    assert_geometry(m, 2, SHAPE(2, 6), SHAPE(6, 1), 12);
    assert_values(weft_narrow(n, 0, 1, 1), (double[]){8, 9, 10}, 3);
    weft_scope_pop();
}

Test(view, narrow_errors_use_pytorch_texts)
{
    weft_scope_push();
    weft_tensor *r = range_tensor(6, 1, SHAPE(6));
    cr_assert_null(weft_narrow(r, 0, 5, 3));
    tu_assert_error(WEFT_ERR_RUNTIME, "start (5) + length (3) exceeds dimension size (6).");
    cr_assert_null(weft_narrow(r, 0, 7, 0));
    tu_assert_error(WEFT_ERR_INDEX,
                    "start out of range (expected to be in range of [-6, 6], but got 7)");
    cr_assert_null(weft_narrow(r, 0, 0, -1));
    tu_assert_error(WEFT_ERR_RUNTIME, "narrow(): length must be non-negative.");
    weft_scope_pop();
}

Test(view, slice_with_step_and_python_clamping)
{
    weft_scope_push();
    weft_tensor *r = range_tensor(10, 1, SHAPE(10));
    weft_tensor *s = weft_slice(r, 0, 1, 100, 3);
    assert_geometry(s, 1, SHAPE(3), SHAPE(3), 1);
    assert_values(s, (double[]){1, 4, 7}, 3);
    assert_values(weft_slice(r, 0, -3, INT64_MAX, 1), (double[]){7, 8, 9}, 3);
    assert_values(weft_slice(r, 0, -100, 2, 1), (double[]){0, 1}, 2);
    weft_tensor *e = weft_slice(r, 0, 6, 2, 1);
    assert_geometry(e, 1, SHAPE(0), SHAPE(1), 6);
    weft_tensor *m = range_tensor(12, 2, SHAPE(3, 4));
    weft_tensor *cols = weft_slice(m, -1, 0, 4, 2);
    assert_geometry(cols, 2, SHAPE(3, 2), SHAPE(4, 2), 0);
    assert_values(cols, (double[]){0, 2, 4, 6, 8, 10}, 6);
    cr_assert_null(weft_slice(r, 0, 0, 5, 0));
    tu_assert_error(WEFT_ERR_VALUE, "slice step must be positive");
    weft_scope_pop();
}

Test(view, select_drops_a_dim)
{
    weft_scope_push();
    weft_tensor *r = range_tensor(24, 3, SHAPE(2, 3, 4));
    weft_tensor *s = weft_select(r, 1, 2);
    assert_geometry(s, 2, SHAPE(2, 4), SHAPE(12, 1), 8);
    weft_tensor *last = weft_select(r, 0, -1);
    assert_geometry(last, 2, SHAPE(3, 4), SHAPE(4, 1), 12);
    weft_tensor *x = weft_select(weft_select(r, 0, 1), 0, 2);
    assert_values(x, (double[]){20, 21, 22, 23}, 4);
    weft_scope_pop();
}

Test(view, select_errors_use_pytorch_texts)
{
    weft_scope_push();
    weft_tensor *v = range_tensor(3, 1, SHAPE(3));
    cr_assert_null(weft_select(v, 0, 5));
    tu_assert_error(WEFT_ERR_INDEX, "select(): index 5 out of range for tensor of size [3] at dimension 0");
    cr_assert_null(weft_select(v, 0, -4));
    tu_assert_error(WEFT_ERR_INDEX, "select(): index -4 out of range for tensor of size [3] at dimension 0");
    cr_assert_null(weft_select(weft_scalar_tensor(1, WEFT_F32, WEFT_CPU), 0, 0));
    tu_assert_error(WEFT_ERR_INDEX, "select() cannot be applied to a 0-dim tensor.");
    weft_scope_pop();
}

Test(view, expand_gives_stride_zero)
{
    weft_scope_push();
    weft_tensor *r = range_tensor(3, 2, SHAPE(3, 1));
    weft_tensor *e = weft_expand(r, 3, SHAPE(2, 3, 4));
    assert_geometry(e, 3, SHAPE(2, 3, 4), SHAPE(0, 1, 0), 0);
    weft_tensor *k = weft_expand(r, 2, SHAPE(-1, 2));
    assert_geometry(k, 2, SHAPE(3, 2), SHAPE(1, 0), 0);
    assert_values(k, (double[]){0, 0, 1, 1, 2, 2}, 6);
    weft_tensor *s = weft_expand(weft_scalar_tensor(5, WEFT_F32, WEFT_CPU), 2, SHAPE(2, 2));
    assert_geometry(s, 2, SHAPE(2, 2), SHAPE(0, 0), 0);
    weft_tensor *other = weft_zeros(3, SHAPE(5, 3, 2), WEFT_F32, WEFT_CPU);
    assert_geometry(weft_expand_as(r, other), 3, SHAPE(5, 3, 2), SHAPE(0, 1, 0), 0);
    weft_scope_pop();
}

Test(view, expand_errors_use_pytorch_texts)
{
    weft_scope_push();
    weft_tensor *r = range_tensor(6, 2, SHAPE(2, 3));
    cr_assert_null(weft_expand(r, 2, SHAPE(2, 4)));
    tu_assert_error(WEFT_ERR_RUNTIME,
                    "The expanded size of the tensor (4) must match the existing size (3) at "
                    "non-singleton dimension 1.  Target sizes: [2, 4].  Tensor sizes: [2, 3]");
    cr_assert_null(weft_expand(r, 1, SHAPE(3)));
    tu_assert_error(WEFT_ERR_RUNTIME,
                    "expand(float32 tensor{[2, 3]}, size=[3]): the number of sizes provided "
                    "(1) must be greater or equal to the number of dimensions in the tensor (2)");
    cr_assert_null(weft_expand(r, 3, SHAPE(-1, 2, 3)));
    tu_assert_error(WEFT_ERR_RUNTIME,
                    "The expanded size of the tensor (-1) isn't allowed in a leading, "
                    "non-existing dimension 0");
    weft_scope_pop();
}

Test(view, squeeze_and_unsqueeze)
{
    weft_scope_push();
    weft_tensor *r = range_tensor(6, 4, SHAPE(1, 2, 1, 3));
    assert_geometry(weft_squeeze(r), 2, SHAPE(2, 3), SHAPE(3, 1), 0);
    assert_geometry(weft_squeeze_dim(r, 2), 3, SHAPE(1, 2, 3), SHAPE(6, 3, 1), 0);
    assert_geometry(weft_squeeze_dim(r, 1), 4, SHAPE(1, 2, 1, 3), SHAPE(6, 3, 3, 1), 0);
    weft_tensor *m = range_tensor(6, 2, SHAPE(2, 3));
    assert_geometry(weft_unsqueeze(m, 0), 3, SHAPE(1, 2, 3), SHAPE(6, 3, 1), 0);
    assert_geometry(weft_unsqueeze(m, 1), 3, SHAPE(2, 1, 3), SHAPE(3, 3, 1), 0);
    assert_geometry(weft_unsqueeze(m, -1), 3, SHAPE(2, 3, 1), SHAPE(3, 1, 1), 0);
    weft_tensor *s = weft_scalar_tensor(1, WEFT_F32, WEFT_CPU);
    assert_geometry(weft_unsqueeze(s, 0), 1, SHAPE(1), SHAPE(1), 0);
    cr_assert_eq(weft_squeeze(weft_unsqueeze(s, 0))->ndim, 0);
    cr_assert_null(weft_unsqueeze(m, 3));
    tu_assert_error(WEFT_ERR_INDEX,
                    "Dimension out of range (expected to be in range of [-3, 2], but got 3)");
    weft_scope_pop();
}

Test(view, flatten_and_unflatten)
{
    weft_scope_push();
    weft_tensor *r = range_tensor(24, 3, SHAPE(2, 3, 4));
    assert_geometry(weft_flatten(r, 0, -1), 1, SHAPE(24), SHAPE(1), 0);
    assert_geometry(weft_flatten(r, 1, 2), 2, SHAPE(2, 12), SHAPE(12, 1), 0);
    weft_tensor *ft = weft_flatten(weft_transpose(r, 0, 2), 0, 1); /* needs a copy */
    tu_assert_shape(ft, 2, SHAPE(12, 2));
    assert_geometry(weft_flatten(weft_scalar_tensor(1, WEFT_F32, WEFT_CPU), 0, -1), 1, SHAPE(1),
                    SHAPE(1), 0);
    weft_tensor *u = weft_unflatten(r, 2, 2, SHAPE(2, -1));
    assert_geometry(u, 4, SHAPE(2, 3, 2, 2), SHAPE(12, 4, 2, 1), 0);
    cr_assert_null(weft_unflatten(r, 2, 2, SHAPE(3, 2)));
    tu_assert_error(WEFT_ERR_RUNTIME,
                    "unflatten: Provided sizes [3, 2] don't multiply up to the size of dim 2 (4) "
                    "in the input tensor");
    cr_assert_null(weft_flatten(r, 2, 1));
    tu_assert_error(WEFT_ERR_VALUE, "flatten() has invalid args: start_dim cannot come after end_dim");
    weft_scope_pop();
}

Test(view, as_strided_is_checked_against_the_storage)
{
    weft_scope_push();
    weft_tensor *r = range_tensor(6, 1, SHAPE(6));
    weft_tensor *w = weft_as_strided(r, 2, SHAPE(2, 2), SHAPE(1, 2), 1);
    assert_geometry(w, 2, SHAPE(2, 2), SHAPE(1, 2), 1);
    assert_values(w, (double[]){1, 3, 2, 4}, 4);
    cr_assert_null(weft_as_strided(r, 2, SHAPE(2, 3), SHAPE(3, 1), 1));
    tu_assert_error(WEFT_ERR_RUNTIME,
                    "setStorage: sizes [2, 3], strides [3, 1], storage offset 1, and itemsize 4 "
                    "requiring a storage size of 28 are out of bounds for storage of size 24");
    /* No elements: any geometry fits. */
    cr_assert_not_null(weft_as_strided(r, 2, SHAPE(0, 100), SHAPE(100, 1), 50));
    cr_assert_null(weft_as_strided(r, 1, SHAPE(2), SHAPE(-1), 1));
    tu_assert_error(WEFT_ERR_RUNTIME,
                    "as_strided: Negative strides are not supported at the moment, got strides: [-1]");
    weft_scope_pop();
}

Test(view, views_share_the_version_counter_and_detach_too)
{
    weft_scope_push();
    weft_tensor *base = weft_zeros(2, SHAPE(2, 3), WEFT_F32, WEFT_CPU);
    weft_tensor *row = weft_select(base, 0, 1);
    weft_tensor *d = weft_detach(base);
    assert_geometry(d, 2, SHAPE(2, 3), SHAPE(3, 1), 0);
    cr_assert(d->storage == base->storage);
    uint64_t v0 = weft_tensor_version(base);
    cr_assert_eq(weft_copy_(row, weft_ones(1, SHAPE(3), WEFT_F32, WEFT_CPU)), 0);
    cr_assert_eq(weft_tensor_version(base), v0 + 1);
    cr_assert_eq(weft_tensor_version(d), v0 + 1);
    cr_assert_eq(weft_tensor_version(row), v0 + 1);
    assert_values(d, (double[]){0, 0, 0, 1, 1, 1}, 6);
    weft_scope_pop();
}

Test(view, view_dtype_reinterprets_bits)
{
    weft_scope_push();
    weft_tensor *f = weft_full(1, SHAPE(2), 1.0, WEFT_F32, WEFT_CPU);
    weft_tensor *i = weft_view_dtype(f, WEFT_I32);
    cr_assert_eq(i->dtype, WEFT_I32);
    assert_values(i, (double[]){1065353216, 1065353216}, 2);
    weft_tensor *h = weft_view_dtype(f, WEFT_F16);
    assert_geometry(h, 1, SHAPE(4), SHAPE(1), 0);
    weft_tensor *back = weft_view_dtype(h, WEFT_F32);
    assert_geometry(back, 1, SHAPE(2), SHAPE(1), 0);
    weft_tensor *m = weft_zeros(2, SHAPE(3, 2), WEFT_F16, WEFT_CPU);
    cr_assert_null(weft_view_dtype(weft_t(m), WEFT_F32));
    tu_assert_error(WEFT_ERR_RUNTIME,
                    "self.stride(-1) must be 1 to view Half as Float (different element sizes), "
                    "but got 2");
    cr_assert_null(weft_view_dtype(weft_zeros(1, SHAPE(3), WEFT_F16, WEFT_CPU), WEFT_F32));
    tu_assert_error(WEFT_ERR_RUNTIME,
                    "self.size(-1) must be divisible by 2 to view Half as Float (different "
                    "element sizes), but got 3");
    weft_scope_pop();
}

Test(view, null_inputs_give_null_without_an_error)
{
    cr_assert_null(weft_view(NULL, 1, SHAPE(3)));
    cr_assert_null(weft_reshape(NULL, 1, SHAPE(3)));
    cr_assert_null(weft_transpose(NULL, 0, 1));
    cr_assert_null(weft_permute(NULL, 1, (const int[]){0}));
    cr_assert_null(weft_narrow(NULL, 0, 0, 1));
    cr_assert_null(weft_slice(NULL, 0, 0, 1, 1));
    cr_assert_null(weft_select(NULL, 0, 0));
    cr_assert_null(weft_expand(NULL, 1, SHAPE(3)));
    cr_assert_null(weft_squeeze(NULL));
    cr_assert_null(weft_unsqueeze(NULL, 0));
    cr_assert_null(weft_flatten(NULL, 0, -1));
    cr_assert_null(weft_as_strided(NULL, 1, SHAPE(1), SHAPE(1), 0));
    cr_assert_null(weft_detach(NULL));
    cr_assert_null(weft_view_dtype(NULL, WEFT_I32));
    tu_assert_no_error();
}

Test(view, views_without_a_scope_are_owned_by_the_caller)
{
    weft_tensor *a = weft_zeros(1, SHAPE(4), WEFT_F32, WEFT_CPU);
    weft_tensor *v = weft_view(a, 2, SHAPE(2, 2));
    cr_assert_eq(v->refcount, 1);
    cr_assert_eq(a->storage->refcount, 2);
    weft_tensor_release(a);
    assert_values(v, (double[]){0, 0, 0, 0}, 4); /* the storage outlives the base */
    weft_tensor_release(v);
}
