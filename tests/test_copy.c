/* tests/test_copy.c: copy_, contiguous, clone, to, read and item move data exactly as
 * PyTorch does: broadcasting the source, converting dtypes, any strides, any devices. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <weft/backend.h>
#include <weft/half.h>
#include <weft/plugin.h>

#include "testutil.h"

TestSuite(copy, .init = tu_setup, .fini = tu_teardown);

#define SHAPE(...) ((const int64_t[]){__VA_ARGS__})

static const enum weft_dtype all_dtypes[] = {WEFT_BOOL, WEFT_U8,  WEFT_I8,   WEFT_I16, WEFT_I32,
                                             WEFT_I64,  WEFT_F16, WEFT_BF16, WEFT_F32, WEFT_F64};
#define NDTYPES ((int)(sizeof all_dtypes / sizeof *all_dtypes))

/* What storing v into dtype gives, written independently of the kernels: integers wrap
 * through int64 (as PyTorch on x86), 16-bit floats round to nearest even. */
static double reference_convert(enum weft_dtype dt, double v)
{
    switch (dt) {
    case WEFT_BOOL: return v != 0;
    case WEFT_U8: return (uint8_t)(int64_t)v;
    case WEFT_I8: return (int8_t)(int64_t)v;
    case WEFT_I16: return (int16_t)(int64_t)v;
    case WEFT_I32: return (int32_t)(int64_t)v;
    case WEFT_I64: return (double)(int64_t)v;
    case WEFT_F16: return weft_f16_to_float(weft_float_to_f16((float)v));
    case WEFT_BF16: return weft_bf16_to_float(weft_float_to_bf16((float)v));
    case WEFT_F32: return (float)v;
    default: return v;
    }
}

static void read_all(const weft_tensor *t, double *out)
{
    tu_read(t, out);
}

Test(copy, copy_broadcasts_the_source)
{
    weft_scope_push();
    weft_tensor *dst = weft_zeros(2, SHAPE(2, 3), WEFT_F32, WEFT_CPU);
    weft_tensor *row = tu_tensor(1, SHAPE(3), (double[]){1, 2, 3}, WEFT_F32);
    cr_assert_eq(weft_copy_(dst, row), 0, "%s", weft_error_message());
    tu_assert_close(dst, (double[]){1, 2, 3, 1, 2, 3}, 6, 0, 0);
    weft_tensor *col = tu_tensor(2, SHAPE(2, 1), (double[]){7, 8}, WEFT_I64);
    cr_assert_eq(weft_copy_(dst, col), 0, "%s", weft_error_message());
    tu_assert_close(dst, (double[]){7, 7, 7, 8, 8, 8}, 6, 0, 0);
    cr_assert_eq(weft_copy_(dst, weft_scalar_tensor(-2.5, WEFT_F64, WEFT_CPU)), 0);
    tu_assert_close(dst, (double[]){-2.5, -2.5, -2.5, -2.5, -2.5, -2.5}, 6, 0, 0);
    weft_scope_pop();
}

Test(copy, copy_rejects_shapes_that_do_not_broadcast)
{
    weft_scope_push();
    weft_tensor *dst = weft_zeros(2, SHAPE(2, 3), WEFT_F32, WEFT_CPU);
    cr_assert_lt(weft_copy_(dst, weft_zeros(1, SHAPE(4), WEFT_F32, WEFT_CPU)), 0);
    tu_assert_error(WEFT_ERR_RUNTIME,
                    "The size of tensor a (3) must match the size of tensor b (4) at "
                    "non-singleton dimension 1");
    weft_tensor *small = weft_zeros(1, SHAPE(3), WEFT_F32, WEFT_CPU);
    cr_assert_lt(weft_copy_(small, dst), 0);
    tu_assert_error(WEFT_ERR_RUNTIME, "output with shape [3] doesn't match the broadcast shape [2, 3]");
    weft_scope_pop();
}

Test(copy, copy_into_an_expanded_tensor_is_refused)
{
    weft_scope_push();
    weft_tensor *e = weft_expand(weft_zeros(1, SHAPE(1), WEFT_F32, WEFT_CPU), 1, SHAPE(3));
    cr_assert_lt(weft_copy_(e, weft_ones(1, SHAPE(3), WEFT_F32, WEFT_CPU)), 0);
    tu_assert_error(WEFT_ERR_RUNTIME,
                    "unsupported operation: more than one element of the written-to tensor "
                    "refers to a single memory location. Please clone() the tensor before "
                    "performing the operation.");
    weft_scope_pop();
}

Test(copy, every_dtype_pair_converts_like_the_reference)
{
    const double values[9] = {0, 1, -1, 2.5, -3.75, 300, 60000.5, 0.1, -129};
    for (int s = 0; s < NDTYPES; s++)
        for (int d = 0; d < NDTYPES; d++) {
            weft_scope_push();
            enum weft_dtype sd = all_dtypes[s], dd = all_dtypes[d];
            weft_tensor *src = tu_tensor(2, SHAPE(3, 3), values, sd);
            double stored[9], expected[9], expected_t[9];
            for (int i = 0; i < 9; i++)
                stored[i] = reference_convert(sd, values[i]);
            for (int i = 0; i < 9; i++)
                expected[i] = reference_convert(dd, stored[i]);
            for (int i = 0; i < 3; i++)
                for (int j = 0; j < 3; j++)
                    expected_t[i * 3 + j] = expected[j * 3 + i];
            weft_tensor *dst = weft_empty(2, SHAPE(3, 3), dd, WEFT_CPU);
            cr_assert_eq(weft_copy_(dst, src), 0, "%s", weft_error_message());
            double got[9];
            read_all(dst, got);
            for (int i = 0; i < 9; i++)
                cr_assert(got[i] == expected[i], "%s -> %s, element %d: got %.17g, expected %.17g",
                          weft_dtype_name(sd), weft_dtype_name(dd), i, got[i], expected[i]);
            /* The same through a transposed source and a transposed destination. */
            cr_assert_eq(weft_copy_(dst, weft_t(src)), 0, "%s", weft_error_message());
            read_all(dst, got);
            for (int i = 0; i < 9; i++)
                cr_assert(got[i] == expected_t[i], "%s -> %s transposed, element %d",
                          weft_dtype_name(sd), weft_dtype_name(dd), i);
            cr_assert_eq(weft_copy_(weft_t(dst), src), 0, "%s", weft_error_message());
            read_all(dst, got);
            for (int i = 0; i < 9; i++)
                cr_assert(got[i] == expected_t[i], "%s -> %s into transposed, element %d",
                          weft_dtype_name(sd), weft_dtype_name(dd), i);
            weft_scope_pop();
        }
}

Test(copy, to_dtype_keeps_nan_and_infinities_in_floating_types)
{
    weft_scope_push();
    weft_tensor *t = tu_tensor(1, SHAPE(3), (double[]){NAN, INFINITY, -INFINITY}, WEFT_F64);
    const enum weft_dtype floats[] = {WEFT_F16, WEFT_BF16, WEFT_F32};
    for (int i = 0; i < 3; i++)
        tu_assert_close(weft_to_dtype(t, floats[i]), (double[]){NAN, INFINITY, -INFINITY}, 3, 0, 0);
    tu_assert_close(weft_to_dtype(t, WEFT_BOOL), (double[]){1, 1, 1}, 3, 0, 0);
    weft_scope_pop();
}

/* Fills a tensor of any layout with distinct values and checks a copy elementwise. */
static void check_strided_copy(weft_tensor *dst, weft_tensor *src)
{
    int64_t n = weft_tensor_numel(src);
    double *a = malloc((size_t)(n ? n : 1) * sizeof(double));
    double *b = malloc((size_t)(n ? n : 1) * sizeof(double));
    cr_assert(a && b);
    read_all(src, a);
    cr_assert_eq(weft_copy_(dst, src), 0, "%s", weft_error_message());
    read_all(dst, b);
    for (int64_t i = 0; i < n; i++)
        cr_assert(a[i] == b[i], "element %lld: got %g, expected %g", (long long)i, b[i], a[i]);
    free(a);
    free(b);
}

static void assert_same_values(const weft_tensor *a, const weft_tensor *b)
{
    int64_t n = weft_tensor_numel(a);
    cr_assert_eq(n, weft_tensor_numel(b));
    double *x = malloc((size_t)(n ? n : 1) * sizeof(double));
    double *y = malloc((size_t)(n ? n : 1) * sizeof(double));
    cr_assert(x && y);
    read_all(a, x);
    read_all(b, y);
    for (int64_t i = 0; i < n; i++)
        cr_assert(x[i] == y[i], "element %lld: %g != %g", (long long)i, x[i], y[i]);
    free(x);
    free(y);
}

Test(copy, transposed_copies_of_every_element_size_match_a_plain_loop)
{
    const enum weft_dtype dts[] = {WEFT_U8, WEFT_I16, WEFT_F32, WEFT_F64, WEFT_BF16, WEFT_I32};
    const int64_t shapes[][2] = {{257, 129}, {64, 64}, {17, 300}, {5, 3}, {1000, 24}};
    uint64_t seed = 42;
    for (size_t k = 0; k < sizeof dts / sizeof *dts; k++)
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
            weft_scope_push();
            int64_t r = shapes[s][0], c = shapes[s][1];
            double *v = malloc((size_t)(r * c) * sizeof(double));
            tu_random_values(v, r * c, 0, 100, &seed);
            for (int64_t i = 0; i < r * c; i++)
                v[i] = floor(v[i]);
            weft_tensor *src = tu_tensor(2, SHAPE(r, c), v, dts[k]);
            weft_tensor *dst = weft_empty(2, SHAPE(c, r), dts[k], WEFT_CPU);
            check_strided_copy(dst, weft_t(src));
            /* contiguous() takes the same path. */
            assert_same_values(weft_contiguous(weft_t(src)), dst);
            free(v);
            weft_scope_pop();
        }
}

Test(copy, large_transposes_match_a_plain_loop_aligned_or_not)
{
    /* Past 4 MiB the float32 path streams its stores when rows are 32-byte aligned. */
    weft_scope_push();
    int64_t r = 1024, c = 1100;
    weft_tensor *src = weft_view(weft_arange(0, (double)(r * c), 1, WEFT_I32, WEFT_CPU), 2, SHAPE(r, c));
    weft_tensor *dst = weft_empty(2, SHAPE(c, r), WEFT_I32, WEFT_CPU);
    cr_assert_eq(weft_copy_(dst, weft_t(src)), 0, "%s", weft_error_message());
    int32_t *got = malloc((size_t)(r * c) * sizeof *got);
    cr_assert_eq(weft_tensor_read(dst, got, (size_t)(r * c) * sizeof *got), 0);
    for (int64_t i = 0; i < c; i++)
        for (int64_t j = 0; j < r; j++)
            cr_assert_eq(got[i * r + j], j * c + i, "aligned: element (%lld, %lld)", (long long)i,
                         (long long)j);
    /* The same into a destination whose rows start one element off. */
    weft_tensor *wide = weft_zeros(2, SHAPE(c, r + 1), WEFT_I32, WEFT_CPU);
    weft_tensor *shifted = weft_narrow(wide, 1, 1, r);
    cr_assert_eq(weft_copy_(shifted, weft_t(src)), 0, "%s", weft_error_message());
    cr_assert_eq(weft_tensor_read(shifted, got, (size_t)(r * c) * sizeof *got), 0);
    for (int64_t i = 0; i < c; i++)
        for (int64_t j = 0; j < r; j++)
            cr_assert_eq(got[i * r + j], j * c + i, "shifted: element (%lld, %lld)", (long long)i,
                         (long long)j);
    free(got);
    weft_scope_pop();
}

Test(copy, batched_and_sliced_transposes_match_a_plain_loop)
{
    weft_scope_push();
    uint64_t seed = 7;
    int64_t n = 3 * 70 * 90;
    double *v = malloc((size_t)n * sizeof(double));
    tu_random_values(v, n, -50, 50, &seed);
    weft_tensor *src = tu_tensor(3, SHAPE(3, 70, 90), v, WEFT_F32);
    weft_tensor *p = weft_permute(src, 3, (const int[]){0, 2, 1});
    check_strided_copy(weft_empty(3, SHAPE(3, 90, 70), WEFT_F32, WEFT_CPU), p);
    weft_tensor *q = weft_permute(src, 3, (const int[]){2, 1, 0});
    check_strided_copy(weft_empty(3, SHAPE(90, 70, 3), WEFT_F32, WEFT_CPU), q);
    /* A transposed slice with a step: nothing is contiguous. */
    weft_tensor *sl = weft_slice(weft_t(weft_select(src, 0, 1)), 0, 3, 80, 2);
    check_strided_copy(weft_empty(sl->ndim, sl->shape, WEFT_F64, WEFT_CPU), sl);
    /* And into a strided destination. */
    weft_tensor *big = weft_zeros(2, SHAPE(90, 140), WEFT_F32, WEFT_CPU);
    weft_tensor *dst = weft_slice(big, 1, 0, 140, 2);
    check_strided_copy(dst, weft_t(weft_select(src, 0, 2)));
    free(v);
    weft_scope_pop();
}

Test(copy, large_contiguous_copy_is_exact)
{
    weft_scope_push();
    weft_tensor *a = weft_arange(0, 3000000, 1, WEFT_F64, WEFT_CPU);
    weft_tensor *b = weft_clone(a);
    double *got = malloc(3000000 * sizeof(double));
    cr_assert_eq(weft_tensor_read(b, got, 3000000 * sizeof(double)), 0);
    for (int i = 0; i < 3000000; i++)
        cr_assert(got[i] == i, "element %d", i);
    free(got);
    weft_scope_pop();
}

Test(copy, zero_size_copies_do_nothing)
{
    weft_scope_push();
    weft_tensor *a = weft_empty(2, SHAPE(0, 3), WEFT_F32, WEFT_CPU);
    cr_assert_eq(weft_copy_(a, weft_zeros(1, SHAPE(3), WEFT_I64, WEFT_CPU)), 0);
    weft_tensor *c = weft_contiguous(weft_t(a));
    tu_assert_shape(c, 2, SHAPE(3, 0));
    weft_scope_pop();
}

/* PyTorch refuses a copy between dense views that share some elements but not all
 * (x[1:].copy_(x[:-1]), m.copy_(m.t())), as its TensorIterator does (issue 16, item 7). */
Test(copy, partially_overlapping_copies_are_refused_as_in_pytorch)
{
    weft_scope_push();
    weft_tensor *a = weft_arange(0, 10, 1, WEFT_I32, WEFT_CPU);
    cr_assert_lt(weft_copy_(weft_slice(a, 0, 1, 10, 1), weft_slice(a, 0, 0, 9, 1)), 0);
    tu_assert_error(WEFT_ERR_RUNTIME,
                    "unsupported operation: some elements of the input tensor and the written-to "
                    "tensor refer to a single memory location. Please clone() the tensor before "
                    "performing the operation.");
    tu_assert_close(a, (double[]){0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, 10, 0, 0);
    weft_tensor *m = weft_view(weft_arange(0, 9, 1, WEFT_F32, WEFT_CPU), 2, SHAPE(3, 3));
    cr_assert_lt(weft_copy_(m, weft_t(m)), 0);
    weft_error_clear();
    /* disjoint halves, and the very same elements, are fine */
    cr_assert_eq(weft_copy_(weft_slice(a, 0, 0, 5, 1), weft_slice(a, 0, 5, 10, 1)), 0);
    tu_assert_close(a, (double[]){5, 6, 7, 8, 9, 5, 6, 7, 8, 9}, 10, 0, 0);
    uint64_t v = weft_tensor_version(m);
    cr_assert_eq(weft_copy_(m, m), 0);
    cr_assert_eq(weft_tensor_version(m), v + 1, "copy_ onto itself still counts as a write");
    weft_scope_pop();
}

/* Overlap PyTorch does not judge (a gapped or broadcast source) is copied as if the source
 * were read first. */
Test(copy, overlap_beyond_dense_views_reads_before_writing)
{
    weft_scope_push();
    weft_tensor *a = weft_arange(0, 10, 1, WEFT_I32, WEFT_CPU);
    cr_assert_eq(weft_copy_(weft_slice(a, 0, 1, 10, 2), weft_slice(a, 0, 0, 10, 2)), 0, "%s",
                 weft_error_message());
    tu_assert_close(a, (double[]){0, 0, 2, 2, 4, 4, 6, 6, 8, 8}, 10, 0, 0);
    cr_assert_eq(weft_copy_(weft_slice(a, 0, 1, 4, 1), weft_slice(a, 0, 0, 1, 1)), 0);
    tu_assert_close(a, (double[]){0, 0, 0, 0, 4, 4, 6, 6, 8, 8}, 10, 0, 0);
    weft_scope_pop();
}

Test(copy, contiguous_returns_the_same_tensor_when_already_contiguous)
{
    weft_tensor *a = weft_zeros(2, SHAPE(2, 3), WEFT_F32, WEFT_CPU);
    weft_tensor *c = weft_contiguous(a);
    cr_assert_eq(c, a);
    cr_assert_eq(a->refcount, 2);
    weft_tensor_release(c);
    weft_scope_push();
    weft_tensor *d = weft_contiguous(a);
    cr_assert_eq(d, a);
    cr_assert_eq(a->refcount, 2, "the extra reference is recorded in the scope");
    weft_scope_pop();
    cr_assert_eq(a->refcount, 1);
    weft_tensor *t = weft_t(a);
    weft_tensor *tc = weft_contiguous(t);
    cr_assert_neq(tc, t);
    cr_assert(weft_tensor_is_contiguous(tc));
    cr_assert_eq(tc->stride[0], 2);
    weft_tensor_release(tc);
    weft_tensor_release(t);
    weft_tensor_release(a);
}

Test(copy, clone_keeps_dense_strides_and_owns_its_storage)
{
    weft_scope_push();
    weft_tensor *a = weft_view(weft_arange(0, 6, 1, WEFT_F32, WEFT_CPU), 2, SHAPE(2, 3));
    weft_tensor *ct = weft_clone(weft_t(a));
    tu_assert_shape(ct, 2, SHAPE(3, 2));
    cr_assert_eq(ct->stride[0], 1, "clone preserves the layout of a dense tensor");
    cr_assert_eq(ct->stride[1], 3);
    cr_assert(ct->storage != a->storage);
    tu_assert_close(ct, (double[]){0, 3, 1, 4, 2, 5}, 6, 0, 0);
    weft_tensor *cs = weft_clone(weft_slice(a, 1, 0, 3, 2));
    cr_assert(weft_tensor_is_contiguous(cs), "a gappy tensor clones contiguous");
    tu_assert_close(cs, (double[]){0, 2, 3, 5}, 4, 0, 0);
    weft_tensor *cx = weft_clone(weft_expand(weft_scalar_tensor(4, WEFT_F32, WEFT_CPU), 1, SHAPE(3)));
    cr_assert_eq(cx->stride[0], 1, "an expanded tensor clones contiguous");
    weft_scope_pop();
}

Test(copy, to_returns_the_same_tensor_when_nothing_changes)
{
    weft_scope_push();
    weft_tensor *a = weft_zeros(1, SHAPE(3), WEFT_F32, WEFT_CPU);
    cr_assert_eq(weft_to_dtype(a, WEFT_F32), a);
    cr_assert_eq(weft_to_device(a, WEFT_CPU), a);
    weft_tensor *b = weft_to(a, WEFT_CPU, WEFT_F16, false);
    cr_assert_neq(b, a);
    cr_assert_eq(b->dtype, WEFT_F16);
    weft_scope_pop();
}

Test(copy, read_gives_row_major_values_of_any_strides)
{
    weft_scope_push();
    weft_tensor *a = weft_view(weft_arange(0, 6, 1, WEFT_I16, WEFT_CPU), 2, SHAPE(2, 3));
    int16_t got[6];
    cr_assert_eq(weft_tensor_read(weft_t(a), got, sizeof got), 0);
    const int16_t expected[6] = {0, 3, 1, 4, 2, 5};
    cr_assert_arr_eq(got, expected, sizeof got);
    cr_assert_lt(weft_tensor_read(a, got, 4), 0);
    tu_assert_error(WEFT_ERR_VALUE, "needs 12");
    weft_scope_pop();
}

Test(copy, item_converts_one_element_to_double)
{
    weft_scope_push();
    double v = 0;
    cr_assert_eq(weft_tensor_item(weft_scalar_tensor(3, WEFT_I8, WEFT_CPU), &v), 0);
    cr_assert_eq(v, 3);
    weft_tensor *a = weft_arange(0, 6, 1, WEFT_BF16, WEFT_CPU);
    cr_assert_eq(weft_tensor_item(weft_slice(a, 0, 5, 6, 1), &v), 0);
    cr_assert_eq(v, 5);
    cr_assert_lt(weft_tensor_item(weft_slice(a, 0, 0, 2, 1), &v), 0);
    tu_assert_error(WEFT_ERR_RUNTIME, "a Tensor with 2 elements cannot be converted to Scalar");
    weft_scope_pop();
}

Test(copy, wrapped_storage_is_not_resizable)
{
    float data[4] = {1, 2, 3, 4};
    weft_tensor *t = weft_from_blob(data, 1, SHAPE(4), NULL, WEFT_F32, WEFT_CPU, NULL, NULL);
    cr_assert_not_null(t, "%s", weft_error_message());
    cr_assert_not(t->storage->resizable);
    cr_assert_lt(weft_storage_resize(t->storage, 64), 0);
    tu_assert_error(WEFT_ERR_RUNTIME, "Trying to resize storage that is not resizable");
    weft_tensor_release(t);
}

Test(copy, null_inputs_return_without_a_new_error)
{
    weft_scope_push();
    weft_tensor *a = weft_zeros(1, SHAPE(3), WEFT_F32, WEFT_CPU);
    cr_assert_lt(weft_copy_(a, NULL), 0);
    cr_assert_lt(weft_copy_(NULL, a), 0);
    cr_assert_null(weft_contiguous(NULL));
    cr_assert_null(weft_clone(NULL));
    cr_assert_null(weft_to(NULL, WEFT_CPU, WEFT_F32, false));
    double v;
    cr_assert_lt(weft_tensor_item(NULL, &v), 0);
    tu_assert_no_error();
    weft_scope_pop();
}

/* ---- another device: a host-memory backend that checks the copy contract ------------- */

static int fake_copies;

static int fake_device_count(void *context) { return 2; }
static void *fake_alloc(void *context, int index, size_t nbytes) { (void)index; return malloc(nbytes ? nbytes : 1); }
static void fake_free(void *context, int index, void *p, size_t nbytes) { (void)index; (void)nbytes; free(p); }

static int fake_copy(void *context, weft_tensor *dst, const weft_tensor *src, bool non_blocking)
{
    (void)non_blocking;
    cr_assert(weft_tensor_is_contiguous(dst) && weft_tensor_is_contiguous(src),
              "backend copy gets contiguous tensors");
    cr_assert_eq(dst->dtype, src->dtype, "backend copy gets one dtype");
    cr_assert_eq(weft_tensor_numel(dst), weft_tensor_numel(src));
    cr_assert(dst->device.type != WEFT_DEVICE_CPU || src->device.type != WEFT_DEVICE_CPU);
    fake_copies++;
    memcpy(weft_tensor_data(dst), weft_tensor_data(src),
           (size_t)weft_tensor_numel(src) * weft_tensor_itemsize(src));
    return 0;
}

static const struct weft_backend fake_backend = {
    .base = WEFT_VTABLE(WEFT_KIND_BACKEND, "fake", struct weft_backend),
    .device_count = fake_device_count,
    .alloc = fake_alloc,
    .free = fake_free,
    .copy = fake_copy,
};

/* Registers the fake device, with the cpu COPY kernel (its memory is host memory). */
static weft_device fake_device(int index)
{
    int type = weft_register(&fake_backend);
    cr_assert_geq(type, 0, "%s", weft_error_message());
    weft_kernel_fn copy = weft_kernel_lookup(WEFT_OP_COPY, WEFT_DEVICE_CPU, WEFT_LAYOUT_STRIDED, WEFT_F32);
    cr_assert_not_null(copy);
    cr_assert_eq(weft_kernel_register(WEFT_OP_COPY, type, WEFT_LAYOUT_STRIDED, WEFT_DTYPES_ALL, copy), 0);
    return (weft_device){(int16_t)type, (int16_t)index};
}

Test(copy, to_another_device_and_back_with_conversion_and_strides)
{
    weft_scope_push();
    weft_device dev = fake_device(0);
    weft_tensor *a = weft_view(weft_arange(0, 12, 1, WEFT_F64, WEFT_CPU), 2, SHAPE(3, 4));
    weft_tensor *on = weft_to(weft_t(a), dev, WEFT_F32, false);
    cr_assert_not_null(on, "%s", weft_error_message());
    cr_assert(weft_device_equal(on->device, dev));
    cr_assert_eq(on->dtype, WEFT_F32);
    cr_assert_eq(fake_copies, 1, "one transfer, conversion done on the cpu");
    double expected[12];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++)
            expected[i * 3 + j] = j * 4 + i;
    tu_assert_close(on, expected, 12, 0, 0);
    /* Broadcast from the host into a non-dense slice on the device. */
    weft_tensor *d = weft_zeros(2, SHAPE(2, 6), WEFT_I32, WEFT_CPU);
    weft_tensor *dd = weft_to_device(d, dev);
    weft_tensor *cols = weft_slice(dd, 1, 1, 6, 2);
    cr_assert_eq(weft_copy_(cols, tu_tensor(1, SHAPE(3), (double[]){5, 6, 7}, WEFT_F64)), 0, "%s",
                 weft_error_message());
    tu_assert_close(dd, (double[]){0, 5, 0, 6, 0, 7, 0, 5, 0, 6, 0, 7}, 12, 0, 0);
    /* Between two devices of the same type, from a non-dense source. */
    weft_device dev1 = fake_device(1);
    weft_tensor *moved = weft_to(cols, dev1, WEFT_F64, false);
    cr_assert_not_null(moved, "%s", weft_error_message());
    cr_assert(weft_device_equal(moved->device, dev1));
    tu_assert_close(moved, (double[]){5, 6, 7, 5, 6, 7}, 6, 0, 0);
    double v;
    cr_assert_eq(weft_tensor_item(weft_select(weft_select(moved, 0, 1), 0, 2), &v), 0);
    cr_assert_eq(v, 7);
    weft_scope_pop();
}

Test(copy, from_host_to_another_device)
{
    weft_scope_push();
    weft_device dev = fake_device(0);
    const float data[4] = {1, 2, 3, 4};
    weft_tensor *t = weft_from_host(data, 2, SHAPE(2, 2), WEFT_F32, dev);
    cr_assert_not_null(t, "%s", weft_error_message());
    tu_assert_close(t, (double[]){1, 2, 3, 4}, 4, 0, 0);
    weft_scope_pop();
}

/* PyTorch 1.13 on x86 (torch.tensor(v, dtype=float64).to(dt)), element by element: uint8
 * through int64, int8/int16/int32 through int32, what does not fit becoming the minimum
 * (NaN and +-inf too). The cuda plugin follows PyTorch on CUDA instead (test_cuda.c). */
Test(copy, float_to_integer_of_nan_inf_and_out_of_range_values_gives_pytorchs_cpu_results)
{
    weft_scope_push();
    const double m32 = -2147483648.0, m64 = -9223372036854775808.0;
    const double in[] = {NAN, INFINITY, -INFINITY, 300, -300, -3, 3e9, -3e9, 1e20, 2147483648.0,
                         3000000007.0, -3000000007.0, 70000, 255.9};
    const double u8[] = {0, 0, 0, 44, 212, 253, 0, 0, 0, 0, 7, 249, 112, 255};
    const double i8[] = {0, 0, 0, 44, -44, -3, 0, 0, 0, 0, 0, 0, 112, -1};
    const double i16[] = {0, 0, 0, 300, -300, -3, 0, 0, 0, 0, 0, 0, 4464, 255};
    const double i32[] = {m32, m32, m32, 300, -300, -3, m32, m32, m32, m32, m32, m32, 70000, 255};
    const double i64[] = {m64, m64, m64, 300, -300, -3, 3e9, -3e9, m64, 2147483648.0,
                          3000000007.0, -3000000007.0, 70000, 255};
    int64_t n = sizeof in / sizeof *in;
    weft_tensor *x = tu_tensor(1, &n, in, WEFT_F64);
    /* contiguous and strided (the iterator's other loop), from double */
    weft_tensor *pairs = weft_contiguous(weft_expand(weft_unsqueeze(x, 1), 2, SHAPE(n, 2)));
    weft_tensor *srcs[2] = {x, weft_squeeze_dim(weft_narrow(pairs, 1, 0, 1), 1)}; /* stride 2 */
    cr_assert_eq(srcs[1]->stride[0], 2);
    for (int s = 0; s < 2; s++) {
        weft_tensor *src = srcs[s];
        tu_assert_close(weft_to_dtype(src, WEFT_U8), u8, n, 0, 0);
        tu_assert_close(weft_to_dtype(src, WEFT_I8), i8, n, 0, 0);
        tu_assert_close(weft_to_dtype(src, WEFT_I16), i16, n, 0, 0);
        tu_assert_close(weft_to_dtype(src, WEFT_I32), i32, n, 0, 0);
        tu_assert_close(weft_to_dtype(src, WEFT_I64), i64, n, 0, 0);
    }
    /* from float32 (3000000007 rounds to 3000000000 there: uint8 0, not 7) */
    weft_tensor *f = weft_to_dtype(weft_narrow(x, 0, 0, 10), WEFT_F32);
    tu_assert_close(weft_to_dtype(f, WEFT_U8), u8, 10, 0, 0);
    tu_assert_close(weft_to_dtype(f, WEFT_I16), i16, 10, 0, 0);
    tu_assert_close(weft_to_dtype(f, WEFT_I32), i32, 10, 0, 0);
    /* from float16: 70000 is +inf there */
    weft_tensor *h = weft_to_dtype(tu_tensor(1, SHAPE(3), (double[]){70000, NAN, -300}, WEFT_F64),
                                   WEFT_F16);
    tu_assert_close(weft_to_dtype(h, WEFT_U8), (double[]){0, 0, 212}, 3, 0, 0);
    tu_assert_close(weft_to_dtype(h, WEFT_I32), (double[]){m32, m32, -300}, 3, 0, 0);
    weft_scope_pop();
}

/* ---- float32 <-> bfloat16 / float16: the vector loops against weft/half.h's helpers ------
 * The cpu plugin converts unit-stride runs of these four pairs with AVX-512 or AVX2/F16C
 * bodies (plugins/cpu/convert.c); each must give the helpers' bits exactly. The checks
 * below run in the suite `copy` on the widest body this cpu has, and in `convert_simd`
 * once per body, chosen through [cpu] simd. */

static float float_of_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* The float32 values where rounding has its edge cases: signed zeros and infinities,
 * quiet and signalling NaNs with payloads, subnormals, the largest finite values, and
 * values on and beside the ties of both 16-bit formats. */
static const uint32_t special_f32[] = {
    0x00000000, 0x80000000, 0x7f800000, 0xff800000,             /* +-0, +-inf */
    0x7fc00000, 0xffc00000, 0x7f800001, 0xff800001, 0x7fa00000, /* NaNs: quiet, signalling */
    0x7fbfffff, 0x7f8000ff, 0x7fff0000, 0xffffffff,             /* ... payloads high and low */
    0x00000001, 0x80000001, 0x007fffff, 0x807fffff, 0x00008000, /* float32 subnormals */
    0x00018000, 0x00017fff, 0x00800000, 0x7f7fffff, 0xff7fffff, /* min normal, max finite */
    0x3f800000, 0xbf800000, 0x3f808000, 0x3f818000, 0x3f807fff, /* bf16 ties: to even */
    0x3f808001, 0xbf818000, 0x7f7f8000, 0x7f7f7fff, 0x7f7fc000, /* ties at the top: to inf */
    0x3f801000, 0x3f803000, 0x3f800fff, 0x3f801001,             /* f16 ties around 1 */
    0x477fe000, 0x477fefff, 0x477ff000, 0xc77ff000, 0x47800000, /* 65504, 65520 (overflow) */
    0x38800000, 0x387fe000, 0x387ff000, 0x33800000,             /* f16 min normal, subnormals */
    0x33000000, 0x33000001, 0x33c00000, 0x33400000, 0x32ffffff, /* f16 subnormal ties */
    0xb3000000, 0x34200000, 0x34600000,                         /* 2.5, 3.5 units: to even */
    0x35000000, 0x35100000, 0x35300000, 0x3f7fffff, 0x40490fdb, /* 2^-21 +- halves; pi */
};
#define NSPECIAL ((int64_t)(sizeof special_f32 / sizeof *special_f32))

static uint16_t narrow_ref(enum weft_dtype dt, uint32_t bits)
{
    float f = float_of_bits(bits);
    return dt == WEFT_BF16 ? weft_float_to_bf16(f) : weft_float_to_f16(f);
}

static uint32_t widen_ref(enum weft_dtype dt, uint16_t h)
{
    return weft_float_bits(dt == WEFT_BF16 ? weft_bf16_to_float(h) : weft_f16_to_float(h));
}

/* A float32 tensor of n elements holding these bit patterns, starting `offset` elements
 * into its storage (so the runs start unaligned too). */
static weft_tensor *float32_of_bits(const uint32_t *bits, int64_t n, int64_t offset)
{
    int64_t total = n + offset;
    weft_tensor *base = weft_empty(1, &total, WEFT_F32, WEFT_CPU);
    cr_assert_not_null(base, "%s", weft_error_message());
    memcpy((uint32_t *)weft_tensor_data(base) + offset, bits, (size_t)n * sizeof *bits);
    return weft_narrow(base, 0, offset, n);
}

/* Converts bits[0..n) (float32) to dt through copy_ and compares bit for bit. */
static void check_narrowing(enum weft_dtype dt, const uint32_t *bits, int64_t n, int64_t offset)
{
    weft_scope_push();
    weft_tensor *src = float32_of_bits(bits, n, offset);
    weft_tensor *dst = weft_empty(1, &n, dt, WEFT_CPU);
    cr_assert_eq(weft_copy_(dst, src), 0, "%s", weft_error_message());
    const uint16_t *got = weft_tensor_data(dst);
    for (int64_t i = 0; i < n; i++)
        cr_assert_eq(got[i], narrow_ref(dt, bits[i]),
                     "float32 0x%08x -> %s gave 0x%04x, expected 0x%04x (element %lld of %lld)",
                     bits[i], weft_dtype_name(dt), got[i], narrow_ref(dt, bits[i]),
                     (long long)i, (long long)n);
    weft_scope_pop();
}

/* Converts h[0..n) (dt) to float32 through copy_ and compares bit for bit. */
static void check_widening(enum weft_dtype dt, const uint16_t *h, int64_t n)
{
    weft_scope_push();
    weft_tensor *src = weft_empty(1, &n, dt, WEFT_CPU);
    memcpy(weft_tensor_data(src), h, (size_t)n * sizeof *h);
    weft_tensor *dst = weft_empty(1, &n, WEFT_F32, WEFT_CPU);
    cr_assert_eq(weft_copy_(dst, src), 0, "%s", weft_error_message());
    const uint32_t *got = weft_tensor_data(dst);
    for (int64_t i = 0; i < n; i++)
        cr_assert_eq(got[i], widen_ref(dt, h[i]),
                     "%s 0x%04x -> float32 gave 0x%08x, expected 0x%08x (element %lld of %lld)",
                     weft_dtype_name(dt), h[i], got[i], widen_ref(dt, h[i]), (long long)i,
                     (long long)n);
    weft_scope_pop();
}

static uint64_t next_random(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Every special value at every lane of a vector and in every tail: runs of each length
 * 1..3*16+1 cut from the specials rotated, at storage offsets 0..3. */
static void check_specials_at_every_length(enum weft_dtype dt)
{
    uint32_t run[3 * 16 + 1];
    for (int64_t len = 1; len <= 3 * 16 + 1; len++)
        for (int64_t rot = 0; rot < NSPECIAL; rot += len < 8 ? 1 : 7) {
            for (int64_t i = 0; i < len; i++)
                run[i] = special_f32[(rot + i) % NSPECIAL];
            check_narrowing(dt, run, len, rot % 4);
        }
}

/* A long run (not a multiple of any vector width, split across threads) of random bit
 * patterns, half of them ordinary floats of either format's range. */
static void check_long_random_run(enum weft_dtype dt)
{
    const int64_t n = ((int64_t)1 << 20) + 13;
    uint32_t *bits = malloc((size_t)n * sizeof *bits);
    cr_assert_not_null(bits);
    uint64_t s = 0x9e3779b97f4a7c15u;
    for (int64_t i = 0; i < n; i++) {
        uint32_t r = (uint32_t)next_random(&s);
        /* odd elements: exponent in [2^-30, 2^17), around both formats' ranges */
        bits[i] = i % 2 ? (r & 0x807fffffu) | ((97u + (r >> 8) % 47u) << 23) : r;
    }
    check_narrowing(dt, bits, n, 1);
    free(bits);
}

static void check_every_16_bit_pattern(enum weft_dtype dt)
{
    static uint16_t all[65536 + 5];
    for (int i = 0; i < 65536 + 5; i++)
        all[i] = (uint16_t)(i * 40503u); /* every pattern once, in scrambled order, then 5 */
    check_widening(dt, all, 65536 + 5);
    for (int64_t len = 1; len <= 33; len++) /* every tail */
        check_widening(dt, all + 1000 * len, len);
}

static void check_all_conversions(void)
{
    const enum weft_dtype halves[] = {WEFT_BF16, WEFT_F16};
    for (int k = 0; k < 2; k++) {
        check_specials_at_every_length(halves[k]);
        check_long_random_run(halves[k]);
        check_every_16_bit_pattern(halves[k]);
    }
}

Test(copy, special_float32_values_round_to_bfloat16_as_the_helper_says)
{
    check_specials_at_every_length(WEFT_BF16);
    /* and the helper's rule spelled out: to nearest, ties to even, NaN quieted (0x40) */
    const uint32_t in[] = {0x3f808000, 0x3f818000, 0x3f808001, 0x7f800001, 0xff800001,
                           0x7f7f8000, 0x00000001, 0x80000000, 0x00018000};
    const uint16_t want[] = {0x3f80, 0x3f82, 0x3f81, 0x7fc0, 0xffc0, 0x7f80, 0x0000, 0x8000,
                             0x0002};
    for (size_t i = 0; i < sizeof in / sizeof *in; i++)
        cr_assert_eq(narrow_ref(WEFT_BF16, in[i]), want[i], "0x%08x", in[i]);
    check_narrowing(WEFT_BF16, in, sizeof in / sizeof *in, 0);
}

Test(copy, special_float32_values_round_to_float16_as_the_helper_says)
{
    check_specials_at_every_length(WEFT_F16);
    /* ties to even around 1 and in the subnormals, overflow at 65520, NaN canonical */
    const uint32_t in[] = {0x3f801000, 0x3f803000, 0x477ff000, 0x477fefff, 0x33000000,
                           0x33000001, 0x33c00000, 0x34200000, 0x34600000, 0x7fa00001,
                           0xff800001};
    const uint16_t want[] = {0x3c00, 0x3c02, 0x7c00, 0x7bff, 0x0000, 0x0001, 0x0002, 0x0002,
                             0x0004, 0x7e00, 0xfe00};
    for (size_t i = 0; i < sizeof in / sizeof *in; i++)
        cr_assert_eq(narrow_ref(WEFT_F16, in[i]), want[i], "0x%08x", in[i]);
    check_narrowing(WEFT_F16, in, sizeof in / sizeof *in, 0);
}

Test(copy, long_random_runs_narrow_bit_for_bit_as_the_helpers)
{
    check_long_random_run(WEFT_BF16);
    check_long_random_run(WEFT_F16);
}

Test(copy, every_bfloat16_and_float16_pattern_widens_as_the_helpers)
{
    check_every_16_bit_pattern(WEFT_BF16);
    check_every_16_bit_pattern(WEFT_F16);
}

/* Runs that are not unit-stride take the scalar loop; a transposed source and a strided
 * destination still give the helpers' bits, both ways. */
Test(copy, strided_conversions_to_and_from_16_bit_floats_match_the_helpers)
{
    weft_scope_push();
    const int64_t R = 37, C = 53, n = R * C;
    uint32_t *bits = malloc((size_t)n * sizeof *bits);
    cr_assert_not_null(bits);
    uint64_t s = 77;
    for (int64_t i = 0; i < n; i++)
        bits[i] = i < NSPECIAL ? special_f32[i] : (uint32_t)next_random(&s);
    weft_tensor *src = weft_view(float32_of_bits(bits, n, 0), 2, SHAPE(R, C));
    weft_tensor *srct = weft_t(src); /* [C, R], column-major */
    const enum weft_dtype halves[] = {WEFT_BF16, WEFT_F16};
    for (int k = 0; k < 2; k++) {
        enum weft_dtype dt = halves[k];
        weft_tensor *h = weft_contiguous(weft_to_dtype(srct, dt)); /* transposed source */
        cr_assert_not_null(h, "%s", weft_error_message());
        const uint16_t *hv = weft_tensor_data(h);
        for (int64_t c = 0; c < C; c++)
            for (int64_t r = 0; r < R; r++)
                cr_assert_eq(hv[c * R + r], narrow_ref(dt, bits[r * C + c]), "(%lld, %lld)",
                             (long long)r, (long long)c);
        /* back to float32 into every other column of a wider tensor (strided destination) */
        weft_tensor *wide = weft_zeros(2, SHAPE(C, 2 * R), WEFT_F32, WEFT_CPU);
        weft_tensor *every_other = weft_slice(wide, 1, 0, 2 * R, 2);
        cr_assert_eq(weft_copy_(every_other, h), 0, "%s", weft_error_message());
        const uint32_t *wv = weft_tensor_data(wide);
        for (int64_t c = 0; c < C; c++)
            for (int64_t r = 0; r < R; r++) {
                cr_assert_eq(wv[c * 2 * R + 2 * r], widen_ref(dt, hv[c * R + r]));
                cr_assert_eq(wv[c * 2 * R + 2 * r + 1], 0u);
            }
    }
    free(bits);
    weft_scope_pop();
}

/* ---- each vector body in turn ([cpu] simd) ---------------------------------------------- */

static const weft_options *simd_options(void *ctx, const char *plugin)
{
    return strcmp(plugin, "cpu") == 0 ? ctx : NULL;
}

/* Loads the cpu plugin with [cpu] simd = level (each test runs in its own process), runs
 * every conversion check, and unhooks the options. Skips where the cpu lacks the set. */
static void check_with_simd(const char *level, bool cpu_has_it)
{
    if (!cpu_has_it)
        cr_skip_test("this cpu has no %s: its body cannot run here", level);
    weft_options *o = weft_options_new("cpu", "simd.ini");
    cr_assert_eq(weft_options_set(o, "simd", level), 0);
    weft_plugin_set_options_source(simd_options, o);
    if (!weft_backend_get(WEFT_DEVICE_CPU))
        cr_assert_fail("[cpu] simd = %s: %s", level, weft_error_message());
    check_all_conversions();
    weft_plugin_set_options_source(NULL, NULL);
    weft_options_free(o);
}

static bool x86_has(const char *what)
{
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (!strcmp(what, "avx512"))
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl");
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
#else
    (void)what;
    return false;
#endif
}

TestSuite(convert_simd, .fini = tu_teardown);

Test(convert_simd, the_avx512_body_gives_the_helpers_bits)
{
    check_with_simd("avx512", x86_has("avx512"));
}

Test(convert_simd, the_avx2_body_gives_the_helpers_bits)
{
    check_with_simd("avx2", x86_has("avx2"));
}

Test(convert_simd, the_scalar_body_gives_the_helpers_bits)
{
    check_with_simd("none", true);
}

Test(convert_simd, an_unknown_simd_level_is_refused_with_the_choices)
{
    weft_options *o = weft_options_new("cpu", "simd.ini");
    cr_assert_eq(weft_options_set(o, "simd", "sse9"), 0);
    weft_plugin_set_options_source(simd_options, o);
    cr_assert_null(weft_backend_get(WEFT_DEVICE_CPU));
    tu_assert_error(WEFT_ERR_PLUGIN, "simd.ini: [cpu] simd = 'sse9': expected one of auto, "
                                     "avx512, avx2, none");
    weft_plugin_set_options_source(NULL, NULL);
    weft_options_free(o);
}
