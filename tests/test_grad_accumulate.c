/* tests/test_grad_accumulate.c: how a leaf's .grad is made (core/autograd.c).
 *
 * A first gradient that only the engine holds becomes the leaf's .grad as it is (PyTorch's
 * AccumulateGrad steals it too): no copy, so the first backward of a step allocates no
 * more than a later one that accumulates in place. A gradient that something else still
 * holds (two leaves fed the same tensor, a retained non-leaf gradient) is copied, so the
 * in-place accumulation of one .grad never shows in another. */
#include <string.h>

#include "testutil.h"

static void setup(void)
{
    tu_setup();
    weft_scope_push();
}

static void teardown(void)
{
    weft_scope_pop();
    tu_teardown();
}

TestSuite(grad_accumulate, .init = setup, .fini = teardown);

static int64_t cpu_allocs(void)
{
    struct weft_memory_stats s = {.struct_size = sizeof s};
    cr_assert_eq(weft_memory_stats(WEFT_CPU, &s), 0, "%s", weft_error_message());
    return (int64_t)s.num_allocs;
}

/* Allocations made by one backward of sum(a * c). */
static int64_t backward_allocs(weft_tensor *a, weft_tensor *c)
{
    weft_scope_push();
    weft_tensor *y = weft_sum(weft_mul(a, c), 0, NULL, false);
    cr_assert_not_null(y, "%s", weft_error_message());
    int64_t before = cpu_allocs();
    cr_assert_eq(weft_backward(y, NULL, false), 0, "%s", weft_error_message());
    int64_t n = cpu_allocs() - before;
    weft_scope_pop();
    return n;
}

Test(grad_accumulate, the_first_gradient_becomes_the_grad_without_a_copy)
{
    uint64_t seed = 5;
    const int64_t shape[1] = {4096};
    double av[4096], cv[4096];
    weft_tensor *a = tu_random_tensor(1, shape, WEFT_F32, -1, 1, &seed, av);
    weft_tensor *c = tu_random_tensor(1, shape, WEFT_F32, -1, 1, &seed, cv);
    cr_assert_eq(weft_requires_grad_(a, true), 0);
    int64_t first = backward_allocs(a, c);  /* .grad made */
    int64_t second = backward_allocs(a, c); /* .grad accumulated in place */
    cr_expect_eq(first, second, "the first backward allocated %lld times, a later one %lld",
                 (long long)first, (long long)second);
    double twice[4096];
    for (int i = 0; i < 4096; i++)
        twice[i] = 2 * (double)(float)cv[i];
    tu_assert_close(weft_grad(a), twice, 4096, 1e-6, 0);
    cr_assert(weft_tensor_is_contiguous(weft_grad(a)));
}

Test(grad_accumulate, two_leaves_fed_one_gradient_get_their_own_grads)
{
    const int64_t shape[1] = {3};
    weft_tensor *a = weft_zeros(1, shape, WEFT_F32, WEFT_CPU);
    weft_tensor *b = weft_zeros(1, shape, WEFT_F32, WEFT_CPU);
    cr_assert_eq(weft_requires_grad_(a, true), 0);
    cr_assert_eq(weft_requires_grad_(b, true), 0);
    for (int k = 0; k < 2; k++) { /* AddBackward passes the one gradient to both */
        weft_scope_push();
        cr_assert_eq(weft_backward(weft_sum(weft_add(a, b), 0, NULL, false), NULL, false), 0,
                     "%s", weft_error_message());
        weft_scope_pop();
    }
    cr_assert_neq(weft_tensor_data(weft_grad(a)), weft_tensor_data(weft_grad(b)));
    tu_assert_close(weft_grad(a), (const double[]){2, 2, 2}, 3, 0, 0);
    tu_assert_close(weft_grad(b), (const double[]){2, 2, 2}, 3, 0, 0);
}

Test(grad_accumulate, a_retained_gradient_and_the_leafs_grad_stay_apart)
{
    const int64_t shape[1] = {3};
    weft_tensor *a = weft_ones(1, shape, WEFT_F32, WEFT_CPU);
    cr_assert_eq(weft_requires_grad_(a, true), 0);
    for (int k = 0; k < 2; k++) {
        weft_scope_push();
        weft_tensor *h = weft_mul_scalar(a, 3.0); /* h.grad = 1, a.grad += 3 */
        cr_assert_eq(weft_retain_grad(h), 0, "%s", weft_error_message());
        cr_assert_eq(weft_backward(weft_sum(h, 0, NULL, false), NULL, false), 0, "%s",
                     weft_error_message());
        tu_assert_close(weft_grad(h), (const double[]){1, 1, 1}, 3, 0, 0);
        weft_scope_pop();
    }
    tu_assert_close(weft_grad(a), (const double[]){6, 6, 6}, 3, 0, 0);
}
