/* tests/test_print.c: weft_tensor_repr prints exactly what PyTorch's repr prints. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <weft/autograd.h>
#include <weft/backend.h>
#include <weft/plugin.h>

#include "testutil.h"

TestSuite(print, .init = tu_setup, .fini = tu_teardown);

#define SHAPE(...) ((const int64_t[]){__VA_ARGS__})
#define VALUES(...) ((const double[]){__VA_ARGS__})

static void assert_repr(const weft_tensor *t, const char *expected)
{
    cr_assert_not_null(t, "%s", weft_error_message());
    char *got = weft_tensor_repr(t);
    cr_assert_not_null(got, "%s", weft_error_message());
    cr_assert_str_eq(got, expected, "\ngot:\n%s\nexpected:\n%s", got, expected);
    free(got);
}

static weft_tensor *values(int ndim, const int64_t *shape, const double *v, enum weft_dtype dt)
{
    return tu_tensor(ndim, shape, v, dt);
}

Test(print, float_matrix_integral_values_print_with_a_dot)
{
    weft_scope_push();
    assert_repr(values(2, SHAPE(2, 2), VALUES(1, 2, 3, 4), WEFT_F32),
                "tensor([[1., 2.],\n        [3., 4.]])");
    weft_scope_pop();
}

Test(print, fixed_point_has_four_decimals_and_a_common_width)
{
    weft_scope_push();
    assert_repr(values(1, SHAPE(1), VALUES(0.123456), WEFT_F32), "tensor([0.1235])");
    assert_repr(values(1, SHAPE(3), VALUES(1.5, -10.25, 100), WEFT_F32),
                "tensor([  1.5000, -10.2500, 100.0000])");
    assert_repr(values(2, SHAPE(2, 2), VALUES(1, -100, 0, 7), WEFT_F32),
                "tensor([[   1., -100.],\n        [   0.,    7.]])");
    weft_scope_pop();
}

Test(print, scientific_mode_when_pytorch_uses_it)
{
    weft_scope_push();
    assert_repr(values(1, SHAPE(2), VALUES(1e-5, 1), WEFT_F32), "tensor([1.0000e-05, 1.0000e+00])");
    assert_repr(values(1, SHAPE(2), VALUES(1, 10000), WEFT_F32), "tensor([1.0000e+00, 1.0000e+04])");
    assert_repr(values(1, SHAPE(1), VALUES(1e9), WEFT_F64),
                "tensor([1.0000e+09], dtype=torch.float64)");
    assert_repr(values(1, SHAPE(2), VALUES(1e-5, NAN), WEFT_F64),
                "tensor([1.0000e-05,        nan], dtype=torch.float64)");
    /* Ratio exactly 1000 is not above it. */
    assert_repr(values(1, SHAPE(2), VALUES(1, 1000), WEFT_F32), "tensor([   1., 1000.])");
    weft_scope_pop();
}

Test(print, non_finite_and_negative_zero)
{
    weft_scope_push();
    assert_repr(values(1, SHAPE(4), VALUES(NAN, INFINITY, -INFINITY, 1), WEFT_F32),
                "tensor([nan, inf, -inf, 1.])");
    assert_repr(values(1, SHAPE(2), VALUES(-0.0, 1), WEFT_F32), "tensor([-0., 1.])");
    assert_repr(values(1, SHAPE(2), VALUES(0, 0), WEFT_F32), "tensor([0., 0.])");
    weft_scope_pop();
}

Test(print, integers_and_bools)
{
    weft_scope_push();
    assert_repr(weft_arange(0, 3, 1, WEFT_I64, WEFT_CPU), "tensor([0, 1, 2])");
    assert_repr(weft_arange(0, 3, 1, WEFT_I32, WEFT_CPU), "tensor([0, 1, 2], dtype=torch.int32)");
    assert_repr(values(1, SHAPE(3), VALUES(-5, 10, 200), WEFT_U8),
                "tensor([251,  10, 200], dtype=torch.uint8)");
    assert_repr(values(1, SHAPE(2), VALUES(1, 0), WEFT_BOOL), "tensor([ True, False])");
    int64_t big[2] = {INT64_MAX, -3};
    weft_tensor *b = weft_from_host(big, 1, SHAPE(2), WEFT_I64, WEFT_CPU);
    assert_repr(b, "tensor([9223372036854775807,                  -3])");
    weft_scope_pop();
}

Test(print, zero_dim_tensors)
{
    weft_scope_push();
    assert_repr(weft_scalar_tensor(3, WEFT_F32, WEFT_CPU), "tensor(3.)");
    assert_repr(weft_scalar_tensor(5, WEFT_I64, WEFT_CPU), "tensor(5)");
    assert_repr(weft_scalar_tensor(0.5, WEFT_F64, WEFT_CPU), "tensor(0.5000, dtype=torch.float64)");
    assert_repr(weft_scalar_tensor(1, WEFT_BOOL, WEFT_CPU), "tensor(True)");
    weft_scope_pop();
}

Test(print, empty_tensors_show_their_size_and_dtype)
{
    weft_scope_push();
    assert_repr(weft_empty(2, SHAPE(0, 3), WEFT_F32, WEFT_CPU), "tensor([], size=(0, 3))");
    assert_repr(weft_empty(1, SHAPE(0), WEFT_F32, WEFT_CPU), "tensor([])");
    assert_repr(weft_empty(1, SHAPE(0), WEFT_I64, WEFT_CPU), "tensor([], dtype=torch.int64)");
    assert_repr(weft_empty(3, SHAPE(2, 0, 1), WEFT_F16, WEFT_CPU),
                "tensor([], size=(2, 0, 1), dtype=torch.float16)");
    weft_scope_pop();
}

Test(print, sixteen_bit_floats_print_like_float_with_their_dtype)
{
    weft_scope_push();
    assert_repr(values(1, SHAPE(2), VALUES(1.5, 2), WEFT_F16), "tensor([1.5000, 2.0000], dtype=torch.float16)");
    assert_repr(values(1, SHAPE(1), VALUES(3), WEFT_BF16), "tensor([3.], dtype=torch.bfloat16)");
    weft_scope_pop();
}

Test(print, long_rows_wrap_at_eighty_columns)
{
    weft_scope_push();
    assert_repr(weft_arange(0, 30, 1, WEFT_F32, WEFT_CPU),
                "tensor([ 0.,  1.,  2.,  3.,  4.,  5.,  6.,  7.,  8.,  9., 10., 11., 12., 13.,\n"
                "        14., 15., 16., 17., 18., 19., 20., 21., 22., 23., 24., 25., 26., 27.,\n"
                "        28., 29.])");
    weft_scope_pop();
}

Test(print, a_suffix_that_does_not_fit_goes_on_its_own_line)
{
    weft_scope_push();
    assert_repr(weft_arange(0, 12, 1, WEFT_F64, WEFT_CPU),
                "tensor([ 0.,  1.,  2.,  3.,  4.,  5.,  6.,  7.,  8.,  9., 10., 11.],\n"
                "       dtype=torch.float64)");
    weft_scope_pop();
}

Test(print, three_dims_separate_blocks_with_a_blank_line)
{
    weft_scope_push();
    weft_tensor *t = weft_view(weft_arange(0, 8, 1, WEFT_I64, WEFT_CPU), 3, SHAPE(2, 2, 2));
    assert_repr(t, "tensor([[[0, 1],\n"
                   "         [2, 3]],\n"
                   "\n"
                   "        [[4, 5],\n"
                   "         [6, 7]]])");
    /* Strides do not matter, only values. */
    assert_repr(weft_transpose(t, 0, 2), "tensor([[[0, 4],\n"
                                         "         [2, 6]],\n"
                                         "\n"
                                         "        [[1, 5],\n"
                                         "         [3, 7]]])");
    weft_scope_pop();
}

Test(print, large_tensors_are_summarised_with_three_edge_items)
{
    weft_scope_push();
    assert_repr(weft_arange(0, 2000, 1, WEFT_I64, WEFT_CPU),
                "tensor([   0,    1,    2,  ..., 1997, 1998, 1999])");
    weft_tensor *m = weft_view(weft_arange(0, 10000, 1, WEFT_I64, WEFT_CPU), 2, SHAPE(100, 100));
    assert_repr(m, "tensor([[   0,    1,    2,  ...,   97,   98,   99],\n"
                   "        [ 100,  101,  102,  ...,  197,  198,  199],\n"
                   "        [ 200,  201,  202,  ...,  297,  298,  299],\n"
                   "        ...,\n"
                   "        [9700, 9701, 9702,  ..., 9797, 9798, 9799],\n"
                   "        [9800, 9801, 9802,  ..., 9897, 9898, 9899],\n"
                   "        [9900, 9901, 9902,  ..., 9997, 9998, 9999]])");
    /* Only the printed elements decide the format. */
    weft_tensor *ones = weft_ones(1, SHAPE(1001), WEFT_F32, WEFT_CPU);
    weft_copy_(weft_select(ones, 0, 500), weft_scalar_tensor(123456.5, WEFT_F32, WEFT_CPU));
    assert_repr(ones, "tensor([1., 1., 1.,  ..., 1., 1., 1.])");
    weft_scope_pop();
}

Test(print, summarised_dims_keep_short_dims_whole)
{
    weft_scope_push();
    weft_tensor *t = weft_view(weft_arange(0, 1004, 1, WEFT_I64, WEFT_CPU), 2, SHAPE(251, 4));
    assert_repr(t, "tensor([[   0,    1,    2,    3],\n"
                   "        [   4,    5,    6,    7],\n"
                   "        [   8,    9,   10,   11],\n"
                   "        ...,\n"
                   "        [ 992,  993,  994,  995],\n"
                   "        [ 996,  997,  998,  999],\n"
                   "        [1000, 1001, 1002, 1003]])");
    weft_scope_pop();
}

Test(print, leaves_that_require_grad_say_so)
{
    weft_scope_push();
    weft_tensor *t = values(1, SHAPE(2), VALUES(1, 2), WEFT_F32);
    cr_assert_eq(weft_requires_grad_(t, true), 0, "%s", weft_error_message());
    assert_repr(t, "tensor([1., 2.], requires_grad=True)");
    weft_scope_pop();
}

Test(print, print_writes_the_repr_and_a_newline)
{
    weft_scope_push();
    char *buf = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&buf, &size);
    cr_assert_not_null(f);
    cr_assert_eq(weft_tensor_print(weft_scalar_tensor(2, WEFT_I64, WEFT_CPU), f), 0);
    fclose(f);
    cr_assert_str_eq(buf, "tensor(2)\n");
    free(buf);
    cr_assert_null(weft_tensor_repr(NULL));
    tu_assert_no_error();
    weft_scope_pop();
}

/* A second device type living in host memory, to see the device suffix. */
static int fake_count(void *context) { return 1; }
static void *fake_alloc(void *context, int index, size_t n) { (void)index; return malloc(n ? n : 1); }
static void fake_free(void *context, int index, void *p, size_t n) { (void)index; (void)n; free(p); }
static int fake_copy(void *context, weft_tensor *dst, const weft_tensor *src, bool nb)
{
    (void)nb;
    memcpy(weft_tensor_data(dst), weft_tensor_data(src),
           (size_t)weft_tensor_numel(src) * weft_tensor_itemsize(src));
    return 0;
}
static const struct weft_backend fake_backend = {
    .base = WEFT_VTABLE(WEFT_KIND_BACKEND, "fake", struct weft_backend), .device_count = fake_count, .alloc = fake_alloc, .free = fake_free,
    .copy = fake_copy,
};

Test(print, other_devices_are_named)
{
    weft_scope_push();
    int type = weft_register(&fake_backend);
    cr_assert_geq(type, 0, "%s", weft_error_message());
    weft_tensor *t = weft_to_device(values(1, SHAPE(2), VALUES(1, 2), WEFT_F32),
                                    (weft_device){(int16_t)type, 0});
    assert_repr(t, "tensor([1., 2.], device='fake:0')");
    weft_scope_pop();
}
