/* tests/test_ported.c: the functions ported programs call (issue 32) against finite
 * differences (gradcheck in float64, at points away from their kinks and ties), and what
 * the differential suite (test_torch.c's ported fixtures) cannot compare: random draws. */
#include <math.h>
#include <string.h>

#include "testutil.h"

TestSuite(ported, .init = tu_setup, .fini = tu_teardown);

/* A float64 leaf [rows, cols] of distinct values spread over [-2, 2.2] (no ties, none
 * within 0.05 of 0; seeds apart by less than 7 give leaves off each other's values). */
static weft_tensor *leaf(int64_t rows, int64_t cols, uint64_t seed)
{
    int64_t n = rows * cols, shape[2] = {rows, cols};
    double v[64];
    cr_assert(n <= 64);
    for (int64_t i = 0; i < n; i++) {
        /* a permutation of 0..n-1 scaled: distinct, then shifted off 0 */
        int64_t k = (int64_t)((i * 37 + (int64_t)seed) % n);
        v[i] = -2 + 4.0 * (double)k / (double)n + 0.07 + 0.013 * (double)(seed % 7);
    }
    weft_tensor *t = tu_tensor(2, shape, v, WEFT_F64);
    cr_assert(t && weft_requires_grad_(t, true) == 0);
    return t;
}

static weft_tensor *ints(int64_t n, const double *v)
{
    return tu_tensor(1, &n, v, WEFT_I64);
}

enum fn { CUMSUM, CUMPROD, SORT, TOPK, AMAX, AMIN, FLIP, ROLL, TRIL, TRIU, UNFOLD,
          MASKED_SELECT, MASKED_SCATTER, INDEX_ADD, INDEX_COPY, INDEX_FILL, CLAMP, SMOOTH_L1,
          HUBER, EMBEDDING, IM2COL, NFNS };
static const char *const names[NFNS] = {
    "cumsum", "cumprod", "sort", "topk", "amax", "amin", "flip", "roll", "tril", "triu",
    "unfold", "masked_select", "masked_scatter", "index_add", "index_copy", "index_fill",
    "clamp_tensor", "smooth_l1_loss", "huber_loss", "embedding_padding", "im2col"};

static weft_tensor *mask34(void)
{
    int64_t shape[2] = {3, 4};
    double m[12] = {1, 0, 0, 1, 1, 1, 0, 0, 0, 1, 0, 1};
    return tu_tensor(2, shape, m, WEFT_BOOL);
}

static weft_tensor *call(void *ctx, weft_tensor *const *in)
{
    enum fn f = (enum fn)(intptr_t)ctx;
    weft_tensor *v = NULL;
    int dims[2] = {1, 0};
    int64_t shifts[2] = {1, -2};
    const double idx3[] = {2, 0, 2}, idx2[] = {3, 1};
    switch (f) {
    case CUMSUM: return weft_cumsum(in[0], 1);
    case CUMPROD: return weft_cumprod(in[0], 0);
    case SORT: return weft_sort(in[0], 1, true, &v, NULL) == 0 ? v : NULL;
    case TOPK: return weft_topk(in[0], 2, 0, false, &v, NULL) == 0 ? v : NULL;
    case AMAX: return weft_amax(in[0], 1, dims, true);
    case AMIN: return weft_amin(in[0], 0, NULL, false);
    case FLIP: return weft_flip(in[0], 2, dims);
    case ROLL: return weft_roll(in[0], 2, shifts, 2, dims);
    case TRIL: return weft_tril(in[0], 1);
    case TRIU: return weft_triu(in[0], -1);
    case UNFOLD: return weft_unfold(in[0], 1, 3, 1);
    case MASKED_SELECT: return weft_masked_select(in[0], mask34());
    case MASKED_SCATTER: return weft_masked_scatter(in[0], mask34(), in[1]);
    case INDEX_ADD: return weft_index_add(in[0], 1, ints(3, idx3), in[1], -1.5);
    case INDEX_COPY: return weft_index_copy(in[0], 1, ints(2, idx2), in[1]);
    case INDEX_FILL: return weft_index_fill(in[0], 1, ints(2, idx2), 0.5);
    case CLAMP: return weft_clamp_tensor(in[0], in[1], weft_add_scalar(in[1], 1.5));
    case SMOOTH_L1: return weft_smooth_l1_loss(in[0], in[1], WEFT_REDUCTION_MEAN, 0.6);
    case HUBER: return weft_huber_loss(in[0], in[1], WEFT_REDUCTION_SUM, 0.6);
    case EMBEDDING: return weft_embedding_padding(ints(3, idx3), in[0], 1);
    case IM2COL: {
        const int64_t s4[4] = {1, 2, 3, 4}, k[2] = {2, 2}, one[2] = {1, 1}, pad[2] = {1, 0};
        return weft_im2col(weft_reshape(in[0], 4, s4), k, one, pad, one);
    }
    default: return NULL;
    }
}

Test(ported, every_differentiable_function_passes_gradcheck)
{
    for (int f = 0; f < NFNS; f++) {
        weft_scope_push();
        weft_tensor *in[2] = {f == IM2COL ? leaf(6, 4, 1) : leaf(3, 4, 5 + (uint64_t)f), NULL};
        if (f == INDEX_ADD)
            in[1] = leaf(3, 3, 11);
        else if (f == INDEX_COPY)
            in[1] = leaf(3, 2, 13);
        else if (f == MASKED_SCATTER)
            in[1] = leaf(2, 4, 17);
        else if (f == CLAMP)
            in[1] = leaf(1, 4, 24); /* the bounds: off x's values (seed 24 vs 5 + CLAMP) */
        else if (f == SMOOTH_L1 || f == HUBER)
            in[1] = leaf(3, 4, 23);
        int rc = weft_gradcheck(call, (void *)(intptr_t)f, in[1] ? 2 : 1, in, 1e-6, 1e-5, 1e-3);
        cr_expect_eq(rc, 0, "%s: %s", names[f], weft_error_message());
        weft_error_clear();
        weft_scope_pop();
    }
}

/* The padding row gets no gradient, the others the sum of their uses. */
Test(ported, embedding_padding_idx_row_gets_no_gradient)
{
    weft_scope_push();
    weft_tensor *w = leaf(4, 2, 3);
    const double idx[] = {1, 3, 1, 0};
    weft_tensor *y = weft_embedding_padding(ints(4, idx), w, -1); /* row 3 */
    cr_assert_eq(weft_backward(weft_sum(y, 0, NULL, false), NULL, false), 0, "%s",
                 weft_error_message());
    double want[8] = {1, 1, 2, 2, 0, 0, 0, 0};
    tu_assert_close(weft_grad(w), want, 8, 0, 0);
    weft_scope_pop();
}

/* rand_like and randn_like keep the shape, dtype and layout; values in range; randint_like
 * integers in [low, high). */
Test(ported, random_like_functions_keep_shape_dtype_and_layout)
{
    weft_scope_push();
    int64_t shape[2] = {40, 50};
    weft_tensor *t = weft_t(weft_zeros(2, shape, WEFT_F32, WEFT_CPU)); /* [50, 40], strides (1, 50) */
    weft_tensor *r = weft_rand_like(t), *n = weft_randn_like(t), *k = weft_randint_like(t, -3, 4);
    cr_assert(r && n && k, "%s", weft_error_message());
    const weft_tensor *all[3] = {r, n, k};
    for (int i = 0; i < 3; i++) {
        cr_expect_eq(all[i]->dtype, WEFT_F32);
        cr_expect(all[i]->shape[0] == 50 && all[i]->shape[1] == 40);
        cr_expect(all[i]->stride[0] == 1 && all[i]->stride[1] == 50, "not t's layout");
    }
    static double v[2000];
    double sum = 0;
    tu_read(r, v);
    for (int i = 0; i < 2000; i++) {
        cr_assert(v[i] >= 0 && v[i] < 1);
        sum += v[i];
    }
    cr_expect(fabs(sum / 2000 - 0.5) < 0.05, "mean %g", sum / 2000);
    tu_read(k, v);
    bool seen_lo = false, seen_hi = false;
    for (int i = 0; i < 2000; i++) {
        cr_assert(v[i] >= -3 && v[i] < 4 && v[i] == floor(v[i]), "%g", v[i]);
        seen_lo |= v[i] == -3;
        seen_hi |= v[i] == 3;
    }
    cr_expect(seen_lo && seen_hi);
    cr_expect_null(weft_rand_like(weft_zeros(2, shape, WEFT_I64, WEFT_CPU)));
    tu_assert_error(WEFT_ERR_NOT_IMPLEMENTED, "check_uniform_bounds");
    weft_scope_pop();
}

/* detach_ takes the tensor itself out of the graph: no grad_fn, no longer requiring grad,
 * the same storage; a tracked view refuses, as in PyTorch. */
Test(ported, detach_in_place_leaves_the_graph)
{
    weft_scope_push();
    weft_tensor *x = leaf(2, 3, 1);
    weft_tensor *y = weft_mul_scalar(x, 2);
    cr_assert(weft_grad_fn_name(y));
    void *data = weft_tensor_data(y);
    cr_assert_eq(weft_detach_(y), 0, "%s", weft_error_message());
    cr_expect_null(weft_grad_fn_name(y));
    cr_expect(!weft_requires_grad(y));
    cr_expect_eq(weft_tensor_data(y), data);
    cr_expect_lt(weft_backward(weft_sum(y, 0, NULL, false), NULL, false), 0);
    weft_error_clear();
    weft_tensor *v = weft_select(weft_mul_scalar(x, 3), 0, 1);
    cr_expect_lt(weft_detach_(v), 0);
    tu_assert_error(WEFT_ERR_RUNTIME, "Can't detach views in-place");
    /* a leaf keeps its .grad */
    cr_assert_eq(weft_backward(weft_sum(weft_mul_scalar(x, 2), 0, NULL, false), NULL, false), 0);
    cr_assert_eq(weft_detach_(x), 0);
    cr_expect(!weft_requires_grad(x) && weft_grad(x));
    weft_scope_pop();
}
