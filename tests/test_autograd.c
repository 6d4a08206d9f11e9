/* tests/test_autograd.c: the autograd engine's rules (PyTorch's) and gradients of every
 * differentiable op checked against central differences in float64. */
#include <math.h>
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
    weft_set_grad_enabled(true);
    weft_set_anomaly_enabled(false);
    tu_teardown();
}

TestSuite(autograd, .init = setup, .fini = teardown);

static weft_tensor *leaf(int ndim, const int64_t *shape, const double *values)
{
    weft_tensor *t = tu_tensor(ndim, shape, values, WEFT_F64);
    cr_assert_eq(weft_requires_grad_(t, true), 0, "%s", weft_error_message());
    return t;
}

static weft_tensor *random_leaf(int ndim, const int64_t *shape, double lo, double hi, uint64_t *seed)
{
    double values[256];
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    cr_assert(n <= 256);
    tu_random_values(values, n, lo, hi, seed);
    return leaf(ndim, shape, values);
}

/* ---- the engine's rules -------------------------------------------------------------- */

Test(autograd, leaves_and_grad_fn_names_follow_pytorch)
{
    const int64_t shape[1] = {3};
    const double v[3] = {1, 2, 3};
    weft_tensor *x = leaf(1, shape, v);
    weft_tensor *y = weft_mul(x, x);
    cr_expect(weft_is_leaf(x));
    cr_expect(!weft_is_leaf(y));
    cr_expect(weft_requires_grad(y));
    cr_expect_str_eq(weft_grad_fn_name(y), "MulBackward0");
    cr_expect_null(weft_grad_fn_name(x));
    cr_expect_str_eq(weft_grad_fn_name(weft_sum(y, 0, NULL, false)), "SumBackward0");
    weft_tensor *z = weft_add_scalar(weft_detach(y), 1);
    cr_expect(!weft_requires_grad(z), "detach cuts history");
}

Test(autograd, only_floating_tensors_can_require_grad)
{
    const int64_t shape[1] = {2};
    weft_tensor *i = weft_zeros(1, shape, WEFT_I64, WEFT_CPU);
    cr_expect_neq(weft_requires_grad_(i, true), 0);
    tu_assert_error(WEFT_ERR_RUNTIME, "Only Tensors of floating point dtype can require gradients");
}

Test(autograd, requires_grad_flag_of_non_leaf_cannot_be_cleared)
{
    const int64_t shape[1] = {2};
    const double v[2] = {1, 2};
    weft_tensor *y = weft_exp(leaf(1, shape, v));
    cr_expect_neq(weft_requires_grad_(y, false), 0);
    tu_assert_error(WEFT_ERR_RUNTIME, "you can only change requires_grad flags of leaf variables.");
}

Test(autograd, gradient_of_a_tensor_used_twice_is_summed)
{
    const int64_t shape[1] = {3};
    const double v[3] = {1, -2, 3};
    weft_tensor *x = leaf(1, shape, v);
    /* y = x*x + 3x  ->  dy/dx = 2x + 3 */
    weft_tensor *y = weft_sum(weft_add(weft_mul(x, x), weft_mul_scalar(x, 3)), 0, NULL, false);
    cr_assert_eq(weft_backward(y, NULL, false), 0, "%s", weft_error_message());
    const double expected[3] = {5, -1, 9};
    tu_assert_close(weft_grad(x), expected, 3, 0, 1e-12);
}

/* Saved-tensor hooks that keep each save themselves, counting the calls. */
struct keeping_hooks {
    struct weft_saved_tensor_hooks hooks;
    weft_tensor *kept[4];
    int packed, unpacked, released;
};

static int64_t keep_pack(struct weft_saved_tensor_hooks *h, weft_tensor *alias)
{
    struct keeping_hooks *k = (struct keeping_hooks *)h;
    if (k->packed == 4)
        return -1; /* the node keeps it */
    k->kept[k->packed] = weft_tensor_retain(alias);
    return k->packed++;
}

static weft_tensor *keep_unpack(struct weft_saved_tensor_hooks *h, int64_t packed)
{
    struct keeping_hooks *k = (struct keeping_hooks *)h;
    k->unpacked++;
    return k->kept[packed];
}

static void keep_release(struct weft_saved_tensor_hooks *h, int64_t packed)
{
    struct keeping_hooks *k = (struct keeping_hooks *)h;
    k->released++;
    weft_tensor_release(k->kept[packed]);
    k->kept[packed] = NULL;
}

/* torch.autograd.graph.saved_tensors_hooks: a save that pack numbers is read back through
 * unpack by backward and handed back through release when the graph frees it; hooks set
 * only while the forward ran. */
Test(autograd, saved_tensor_hooks_stand_for_the_tensors_nodes_save)
{
    const int64_t shape[1] = {3};
    const double v[3] = {1, -2, 3};
    weft_tensor *x = leaf(1, shape, v);
    struct keeping_hooks k = {{sizeof k.hooks, keep_pack, keep_unpack, keep_release}};
    cr_assert_null(weft_saved_tensor_hooks_set(&k.hooks));
    weft_tensor *y = weft_sum(weft_mul(x, x), 0, NULL, false); /* mul saves both operands */
    cr_assert_eq(weft_saved_tensor_hooks_set(NULL), &k.hooks);
    cr_assert_eq(k.packed, 2);
    cr_assert_eq(k.unpacked + k.released, 0);
    cr_assert_eq(weft_backward(y, NULL, false), 0, "%s", weft_error_message());
    cr_expect_eq(k.unpacked, 2);
    cr_expect_eq(k.released, 2, "backward without retain_graph frees the saves");
    const double expected[3] = {2, -4, 6};
    tu_assert_close(weft_grad(x), expected, 3, 0, 1e-12);
}

Test(autograd, broadcast_inputs_get_gradients_reduced_to_their_shape)
{
    const int64_t sa[2] = {2, 3}, sb[1] = {3};
    const double va[6] = {1, 2, 3, 4, 5, 6}, vb[3] = {10, 20, 30};
    weft_tensor *a = leaf(2, sa, va), *b = leaf(1, sb, vb);
    weft_tensor *y = weft_sum(weft_mul(a, b), 0, NULL, false);
    cr_assert_eq(weft_backward(y, NULL, false), 0, "%s", weft_error_message());
    const double ga[6] = {10, 20, 30, 10, 20, 30}, gb[3] = {5, 7, 9};
    tu_assert_close(weft_grad(a), ga, 6, 0, 1e-12);
    tu_assert_close(weft_grad(b), gb, 3, 0, 1e-12);
}

Test(autograd, gradients_accumulate_until_zeroed)
{
    const int64_t shape[1] = {2};
    const double v[2] = {1, 2};
    weft_tensor *x = leaf(1, shape, v);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(weft_backward(weft_sum(weft_mul_scalar(x, 2), 0, NULL, false), NULL, false), 0);
    const double expected[2] = {6, 6};
    tu_assert_close(weft_grad(x), expected, 2, 0, 0);
    cr_assert_eq(weft_zero_grad(x, false), 0);
    const double zero[2] = {0, 0};
    tu_assert_close(weft_grad(x), zero, 2, 0, 0);
    cr_assert_eq(weft_zero_grad(x, true), 0);
    cr_expect_null(weft_grad(x));
}

Test(autograd, second_backward_without_retain_graph_fails_with_pytorchs_text)
{
    const int64_t shape[1] = {2};
    const double v[2] = {1, 2};
    weft_tensor *x = leaf(1, shape, v);
    weft_tensor *y = weft_sum(weft_exp(x), 0, NULL, false);
    cr_assert_eq(weft_backward(y, NULL, false), 0);
    cr_expect_neq(weft_backward(y, NULL, false), 0);
    tu_assert_error(WEFT_ERR_RUNTIME, "Trying to backward through the graph a second time");
}

Test(autograd, retain_graph_allows_a_second_backward)
{
    const int64_t shape[1] = {2};
    const double v[2] = {0, 1};
    weft_tensor *x = leaf(1, shape, v);
    weft_tensor *y = weft_sum(weft_exp(x), 0, NULL, false);
    cr_assert_eq(weft_backward(y, NULL, true), 0);
    cr_assert_eq(weft_backward(y, NULL, false), 0, "%s", weft_error_message());
    const double expected[2] = {2, 2 * M_E};
    tu_assert_close(weft_grad(x), expected, 2, 1e-12, 0);
}

Test(autograd, non_scalar_backward_needs_a_gradient)
{
    const int64_t shape[1] = {2};
    const double v[2] = {1, 2};
    weft_tensor *x = leaf(1, shape, v);
    weft_tensor *y = weft_mul_scalar(x, 3);
    cr_expect_neq(weft_backward(y, NULL, false), 0);
    tu_assert_error(WEFT_ERR_RUNTIME, "grad can be implicitly created only for scalar outputs");
    const double gv[2] = {1, 10};
    cr_assert_eq(weft_backward(y, tu_tensor(1, shape, gv, WEFT_F64), false), 0);
    const double expected[2] = {3, 30};
    tu_assert_close(weft_grad(x), expected, 2, 0, 0);
}

Test(autograd, backward_on_a_tensor_without_history_fails)
{
    const int64_t shape[1] = {1};
    weft_tensor *x = weft_ones(1, shape, WEFT_F64, WEFT_CPU);
    cr_expect_neq(weft_backward(x, NULL, false), 0);
    tu_assert_error(WEFT_ERR_RUNTIME, "element 0 of tensors does not require grad and does not have a grad_fn");
}

Test(autograd, no_grad_records_nothing)
{
    const int64_t shape[1] = {2};
    const double v[2] = {1, 2};
    weft_tensor *x = leaf(1, shape, v);
    bool prev = weft_no_grad_begin();
    weft_tensor *y = weft_mul(x, x);
    weft_grad_mode_restore(prev);
    cr_expect(!weft_requires_grad(y));
    cr_expect(weft_grad_enabled());
}

Test(autograd, retain_grad_keeps_a_non_leafs_gradient)
{
    const int64_t shape[1] = {2};
    const double v[2] = {1, 2};
    weft_tensor *x = leaf(1, shape, v);
    weft_tensor *h = weft_mul_scalar(x, 3);
    cr_assert_eq(weft_retain_grad(h), 0);
    cr_assert_eq(weft_backward(weft_sum(weft_mul(h, h), 0, NULL, false), NULL, false), 0);
    const double gh[2] = {6, 12}, gx[2] = {18, 36};
    tu_assert_close(weft_grad(h), gh, 2, 0, 1e-12);
    tu_assert_close(weft_grad(x), gx, 2, 0, 1e-12);
    weft_tensor *plain = weft_zeros(1, shape, WEFT_F64, WEFT_CPU);
    cr_expect_neq(weft_retain_grad(plain), 0);
    tu_assert_error(WEFT_ERR_RUNTIME, "can't retain_grad on Tensor that has requires_grad=False");
}

Test(autograd, modifying_a_saved_tensor_in_place_is_caught_with_versions)
{
    const int64_t shape[2] = {64, 1};
    weft_tensor *a = weft_ones(2, shape, WEFT_F32, WEFT_CPU);
    cr_assert_eq(weft_requires_grad_(a, true), 0);
    weft_tensor *y = weft_exp(a);          /* ExpBackward0 saves its output y */
    weft_tensor *z = weft_sum(weft_mul_scalar(y, 2), 0, NULL, false);
    cr_assert_not_null(weft_add_scalar_(y, 1)); /* y is now at version 1 */
    cr_expect_neq(weft_backward(z, NULL, false), 0);
    tu_assert_error(WEFT_ERR_RUNTIME,
                    "one of the variables needed for gradient computation has been modified by "
                    "an inplace operation: [float32 tensor [64, 1]], which is output 0 of "
                    "ExpBackward0, is at version 1; expected version 0 instead.");
}

Test(autograd, in_place_on_a_leaf_that_requires_grad_is_refused)
{
    const int64_t shape[1] = {2};
    const double v[2] = {1, 2};
    weft_tensor *x = leaf(1, shape, v);
    cr_expect_null(weft_mul_scalar_(x, 2));
    tu_assert_error(WEFT_ERR_RUNTIME, "a leaf Variable that requires grad is being used in an in-place operation.");
    cr_expect_null(weft_add_scalar_(weft_narrow(x, 0, 0, 1), 2));
    tu_assert_error(WEFT_ERR_RUNTIME, "a view of a leaf Variable that requires grad is being used in an in-place operation.");
    /* Under no_grad the update an optimizer makes is allowed. */
    bool prev = weft_no_grad_begin();
    cr_expect_not_null(weft_mul_scalar_(x, 2));
    weft_grad_mode_restore(prev);
}

Test(autograd, in_place_on_a_non_leaf_rebases_its_history)
{
    const int64_t shape[1] = {3};
    const double v[3] = {1, 2, 3};
    weft_tensor *x = leaf(1, shape, v);
    weft_tensor *y = weft_mul_scalar(x, 2);
    cr_assert_not_null(weft_mul_(y, x)); /* y = 2x * x */
    cr_expect_str_eq(weft_grad_fn_name(y), "MulBackward0");
    cr_assert_eq(weft_backward(weft_sum(y, 0, NULL, false), NULL, false), 0, "%s", weft_error_message());
    const double expected[3] = {4, 8, 12};
    tu_assert_close(weft_grad(x), expected, 3, 0, 1e-12);
}

/* PyTorch's CopySlices (issue 16, item 2): the base's history is rebased onto the
 * in-place op, the view is regenerated from the base. */
Test(autograd, in_place_on_a_view_while_recording_rebases_the_base_as_copyslices)
{
    const int64_t shape[1] = {4};
    const double v[4] = {1, 2, 3, 4};
    weft_tensor *x = leaf(1, shape, v);
    weft_tensor *y = weft_mul_scalar(x, 1);
    weft_tensor *part = weft_narrow(y, 0, 1, 2);
    uint64_t version = weft_tensor_version(y);
    cr_assert_not_null(weft_mul_scalar_(part, 3), "%s", weft_error_message());
    cr_expect_eq(weft_tensor_version(y), version + 1, "the view and its base share a version");
    cr_expect_str_eq(weft_grad_fn_name(y), "CopySlices");
    cr_expect_str_eq(weft_grad_fn_name(part), "AsStridedBackward0");
    cr_assert_eq(weft_backward(weft_sum(y, 0, NULL, false), NULL, false), 0, "%s",
                 weft_error_message());
    const double expected[4] = {1, 3, 3, 1};
    tu_assert_close(weft_grad(x), expected, 4, 0, 1e-12);
}

/* Views taken before an in-place op on their base (issue 32): PyTorch makes the view's
 * grad_fn again from the base's new history (AsStridedBackward0) once the base's version
 * has moved. h = x * 1; v = h[0:2]; h.mul_(3): v is 3 x[0:2], so x.grad is [3, 3, 0, 0]
 * (weft gave [1, 1, 0, 0]). */
Test(autograd, a_view_taken_before_an_in_place_op_on_its_base_sees_the_new_history)
{
    const int64_t shape[1] = {4};
    const double v[4] = {1, 2, 3, 4};
    weft_tensor *x = leaf(1, shape, v);
    weft_tensor *h = weft_mul_scalar(x, 1);
    weft_tensor *view = weft_narrow(h, 0, 0, 2);
    cr_expect_str_eq(weft_grad_fn_name(view), "SliceBackward0");
    cr_assert_not_null(weft_mul_scalar_(h, 3));
    cr_expect_str_eq(weft_grad_fn_name(view), "AsStridedBackward0");
    cr_assert_eq(weft_backward(weft_sum(view, 0, NULL, false), NULL, false), 0, "%s",
                 weft_error_message());
    const double expected[4] = {3, 3, 0, 0};
    tu_assert_close(weft_grad(x), expected, 4, 0, 0);
    /* no history changed: a version moved under no_grad still makes the view again, as
     * PyTorch does, with the same gradient */
    weft_tensor *x2 = leaf(1, shape, v), *h2 = weft_mul_scalar(x2, 2);
    weft_tensor *view2 = weft_narrow(h2, 0, 1, 2);
    bool prev = weft_no_grad_begin();
    cr_assert_not_null(weft_add_scalar_(h2, 1));
    weft_grad_mode_restore(prev);
    cr_assert_eq(weft_backward(weft_sum(view2, 0, NULL, false), NULL, false), 0);
    cr_expect_str_eq(weft_grad_fn_name(view2), "AsStridedBackward0");
    const double expected2[4] = {0, 2, 2, 0};
    tu_assert_close(weft_grad(x2), expected2, 4, 0, 0);
}

/* The patterns of issue 32 as functions of float64 leaves, for gradcheck: the base changed
 * after the view (0), a residual skip = h[:, :2] before h.relu_() (1), an overlapping
 * sibling view changed (2), a view of a view (3), a view whose base is itself a view (4),
 * an expanded view, whose elements overlap (5), a transposed view of a base changed by an
 * op that saves its result (6), and two views sharing an element changed in turn (7). */
static weft_tensor *apply_view_before_inplace(void *ctx, weft_tensor *const *in)
{
    int variant = *(const int *)ctx;
    weft_tensor *x = in[0], *w = in[1]; /* x [3, 4], w [4] */
    weft_tensor *h = weft_mul(x, w);
    switch (variant) {
    case 0: {
        weft_tensor *v = weft_narrow(h, 0, 0, 2);
        return weft_mul_(h, w) ? weft_mul(v, v) : NULL;
    }
    case 1: {
        weft_tensor *skip = weft_narrow(h, 1, 0, 2);
        return weft_relu_(h) ? weft_add(weft_exp(skip), weft_narrow(h, 1, 2, 2)) : NULL;
    }
    case 2: {
        weft_tensor *v1 = weft_narrow(h, 1, 0, 3);
        return weft_exp_(weft_narrow(h, 1, 1, 3)) ? weft_mul(v1, v1) : NULL;
    }
    case 3: {
        weft_tensor *vv = weft_select(weft_narrow(h, 0, 1, 2), 1, 2);
        return weft_mul_(h, x) ? weft_exp(vv) : NULL;
    }
    case 4: {
        weft_tensor *hv = weft_narrow(h, 0, 1, 2), *vv = weft_t(hv);
        return weft_mul_(hv, w) ? weft_sin(vv) : NULL;
    }
    case 5: {
        const int64_t shape[2] = {3, 4};
        weft_tensor *g = weft_mul(weft_narrow(x, 0, 0, 1), w);
        weft_tensor *e = weft_expand(g, 2, shape);
        return weft_mul_(g, w) ? weft_mul(e, x) : NULL;
    }
    case 6: {
        weft_tensor *t = weft_t(h);
        return weft_tanh_(h) ? weft_mul_scalar(t, 2) : NULL;
    }
    case 7: {
        weft_tensor *v1 = weft_select(h, 0, 0), *v2 = weft_select(h, 1, 0);
        return weft_mul_(v1, w) && weft_exp_(v2) ? weft_mul(h, v1) : NULL;
    }
    }
    return NULL;
}

Test(autograd, gradcheck_views_taken_before_in_place_ops)
{
    uint64_t seed = 32;
    const int64_t xs[2] = {3, 4}, ws[1] = {4};
    for (int variant = 0; variant <= 7; variant++) {
        weft_tensor *in[2] = {random_leaf(2, xs, -1, 1, &seed), random_leaf(1, ws, 0.5, 1.5, &seed)};
        cr_expect_eq(weft_gradcheck(apply_view_before_inplace, &variant, 2, in, 1e-6, 1e-5, 1e-4),
                     0, "variant %d: %s", variant, weft_error_message());
        weft_error_clear();
    }
}

/* A view taken under no_grad of a tensor that requires grad (PyTorch 1.13): it requires
 * grad, is a leaf with no grad_fn, passes no gradient on; changing it in place with grad
 * mode on is refused, and so is using it once its base has changed in place. */
Test(autograd, a_view_taken_under_no_grad_requires_grad_as_in_pytorch)
{
    const int64_t shape[1] = {4};
    const double v[4] = {1, 2, 3, 4};
    weft_tensor *x = leaf(1, shape, v), *h = weft_mul_scalar(x, 1);
    bool prev = weft_no_grad_begin();
    weft_tensor *view = weft_narrow(h, 0, 0, 2), *leaf_view = weft_narrow(x, 0, 1, 2);
    weft_tensor *copy = weft_reshape(weft_t(weft_unsqueeze(h, 1)), 1, shape);
    weft_grad_mode_restore(prev);
    cr_expect(weft_requires_grad(view) && weft_is_leaf(view));
    cr_expect(weft_requires_grad(leaf_view) && weft_is_leaf(leaf_view));
    cr_expect_null(weft_grad_fn_name(view));
    cr_expect(weft_requires_grad(copy), "a view of a view");
    weft_tensor *y = weft_mul_scalar(view, 2);
    cr_expect_str_eq(weft_grad_fn_name(y), "MulBackward0");
    cr_assert_eq(weft_backward(weft_sum(y, 0, NULL, false), NULL, false), 0, "%s",
                 weft_error_message());
    cr_expect_null(weft_grad(x), "no gradient flows through a view made under no_grad");
    cr_expect_null(weft_grad(view));
    cr_expect_null(weft_mul_scalar_(view, 2));
    tu_assert_error(WEFT_ERR_RUNTIME, "A view was created in no_grad mode and is being modified "
                                      "inplace with grad mode enabled.");
    prev = weft_no_grad_begin();
    cr_expect_not_null(weft_mul_scalar_(view, 2), "allowed under no_grad");
    weft_grad_mode_restore(prev);
    cr_expect_null(weft_mul_scalar(view, 2));
    tu_assert_error(WEFT_ERR_RUNTIME, "A view was created in no_grad mode and its base or another "
                                      "view of its base has been modified inplace");
    /* detach and a view of a tensor that needs no grad stay without */
    prev = weft_no_grad_begin();
    cr_expect(!weft_requires_grad(weft_narrow(weft_detach(h), 0, 0, 2)));
    weft_grad_mode_restore(prev);
}

/* A node saves only what the gradients it will compute read (PyTorch's saved variables):
 * after y = x @ C with C needing no gradient, x.add_(1) leaves the backward working (only C
 * was kept) and the gradient is C's; when C needs one too, x is kept and the change is
 * PyTorch's error (issue 32). */
Test(autograd, a_node_keeps_only_what_its_gradients_read)
{
    const int64_t s[2] = {2, 2};
    const double cv[4] = {1, 2, 3, 4};
    for (int variant = 0; variant < 4; variant++) {
        for (int c_needs = 0; c_needs < 2; c_needs++) {
            weft_scope_push();
            weft_tensor *a = leaf(2, s, cv), *C = tu_tensor(2, s, cv, WEFT_F64);
            if (c_needs)
                weft_requires_grad_(C, true);
            weft_tensor *x = weft_mul_scalar(a, 1);
            weft_tensor *y = variant == 0   ? weft_matmul(x, C)
                             : variant == 1 ? weft_mul(x, C)
                             : variant == 2 ? weft_addmm(weft_select(C, 0, 0), x, C, 1, 1)
                                            : weft_linear(x, C, NULL);
            cr_assert_not_null(weft_add_scalar_(x, 1));
            int rc = weft_backward(weft_sum(y, 0, NULL, false), NULL, false);
            if (c_needs) {
                cr_expect_neq(rc, 0, "variant %d: C's gradient reads the changed x", variant);
                tu_assert_error(WEFT_ERR_RUNTIME, "modified by an inplace operation");
            } else {
                cr_expect_eq(rc, 0, "variant %d: %s", variant, weft_error_message());
                /* d sum(x @ C) / dx = 1 C^T (row sums of C); x * C: C; x C^T: column sums */
                const double mm[4] = {3, 7, 3, 7}, lin[4] = {4, 6, 4, 6};
                tu_assert_close(weft_grad(a), variant == 1 ? cv : variant == 3 ? lin : mm, 4, 0, 1e-12);
            }
            weft_scope_pop();
        }
    }
}

/* A view made from a tensor without history (so no base was recorded) is still refused
 * rather than given a wrong gradient. */
Test(autograd, in_place_on_a_view_without_a_recorded_base_is_refused)
{
    const int64_t shape[1] = {4}, two = 2;
    const double v[4] = {1, 2, 3, 4}, wv[2] = {2, 2};
    weft_tensor *z = tu_tensor(1, shape, v, WEFT_F64);
    weft_tensor *part = weft_narrow(z, 0, 1, 2);
    weft_tensor *w = leaf(1, &two, wv);
    cr_expect_null(weft_mul_(part, w));
    tu_assert_error(WEFT_ERR_RUNTIME, "in-place operations on views");
}

Test(autograd, anomaly_mode_names_the_node_that_made_nan)
{
    const int64_t shape[1] = {2};
    const double v[2] = {0, 1};
    weft_tensor *x = leaf(1, shape, v);
    weft_set_anomaly_enabled(true);
    /* d sqrt(x)/dx at 0 is inf */
    weft_tensor *y = weft_sum(weft_sqrt(x), 0, NULL, false);
    cr_expect_neq(weft_backward(y, NULL, false), 0);
    tu_assert_error(WEFT_ERR_RUNTIME, "Function 'SqrtBackward0' returned nan values in its 0th output.");
}

Test(autograd, long_chains_free_without_recursion)
{
    const int64_t shape[1] = {16};
    weft_tensor *x = weft_ones(1, shape, WEFT_F32, WEFT_CPU);
    cr_assert_eq(weft_requires_grad_(x, true), 0);
    weft_tensor *y = x;
    for (int i = 0; i < 20000; i++)
        y = weft_mul_scalar(y, 1.0);
    cr_assert_eq(weft_backward(weft_sum(y, 0, NULL, false), NULL, false), 0);
    const double ones[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    tu_assert_close(weft_grad(x), ones, 16, 0, 0);
}

/* A chain of 32 ops on 1 MiB tensors: each node's incoming gradient is freed once the node
 * has run, so backward holds a few gradients at a time, not one per node until it ends
 * (what a deep model's peak memory during backward came from). */
Test(autograd, backward_frees_each_nodes_gradient_once_the_node_has_run)
{
    const int64_t shape[1] = {262144}; /* 1 MiB of float32 */
    const double mib = 1048576.0;
    weft_tensor *x = weft_ones(1, shape, WEFT_F32, WEFT_CPU);
    cr_assert_eq(weft_requires_grad_(x, true), 0);
    weft_scope_push(); /* the forward's intermediates die with it; the graph does not */
    weft_tensor *y = x;
    for (int i = 0; i < 32; i++)
        y = weft_mul_scalar(y, 1.0);
    weft_tensor *loss = weft_tensor_retain(weft_sum(y, 0, NULL, false));
    weft_scope_pop();
    cr_assert_not_null(loss, "%s", weft_error_message());
    struct weft_memory_stats st = {.struct_size = sizeof st};
    cr_assert_eq(weft_memory_stats(WEFT_CPU, &st), 0, "%s", weft_error_message());
    const double before = (double)st.allocated_bytes;
    weft_reset_peak_memory_stats(WEFT_CPU);
    cr_assert_eq(weft_backward(loss, NULL, false), 0, "%s", weft_error_message());
    weft_tensor_release(loss);
    cr_assert_eq(weft_memory_stats(WEFT_CPU, &st), 0, "%s", weft_error_message());
    const double held = ((double)st.peak_allocated_bytes - before) / mib;
    cr_expect_lt(held, 4.0, "backward held %.1f MiB at its peak: the 32 nodes' gradients "
                            "were kept until it ended", held);
    cr_expect_eq(weft_tensor_numel(weft_grad(x)), 262144);
}

/* ---- gradcheck sweep --------------------------------------------------------------------- */

typedef weft_tensor *(*op1)(weft_tensor *);

static weft_tensor *apply_unary(void *ctx, weft_tensor *const *in)
{
    return ((op1)ctx)(in[0]);
}

static void check_unary(const char *name, op1 fn, double lo, double hi)
{
    uint64_t seed = 42;
    const int64_t shape[2] = {3, 4};
    weft_tensor *x = random_leaf(2, shape, lo, hi, &seed);
    weft_tensor *in[1] = {x};
    cr_expect_eq(weft_gradcheck(apply_unary, (void *)fn, 1, in, 1e-6, 1e-5, 1e-4), 0, "%s: %s",
                 name, weft_error_message());
    weft_error_clear();
}

Test(autograd, gradcheck_unary_ops)
{
    check_unary("neg", weft_neg, -2, 2);
    check_unary("abs", weft_abs, 0.1, 2);
    check_unary("exp", weft_exp, -2, 2);
    check_unary("expm1", weft_expm1, -2, 2);
    check_unary("log", weft_log, 0.1, 3);
    check_unary("log1p", weft_log1p, 0.1, 3);
    check_unary("sqrt", weft_sqrt, 0.1, 3);
    check_unary("rsqrt", weft_rsqrt, 0.1, 3);
    check_unary("reciprocal", weft_reciprocal, 0.5, 3);
    check_unary("sin", weft_sin, -3, 3);
    check_unary("cos", weft_cos, -3, 3);
    check_unary("tanh", weft_tanh, -2, 2);
    check_unary("sigmoid", weft_sigmoid, -3, 3);
    check_unary("relu", weft_relu, 0.1, 2);
    check_unary("gelu", weft_gelu, -3, 3);
    check_unary("silu", weft_silu, -3, 3);
    check_unary("erf", weft_erf, -2, 2);
}

typedef weft_tensor *(*op2)(weft_tensor *, weft_tensor *);

static weft_tensor *apply_binary(void *ctx, weft_tensor *const *in)
{
    return ((op2)ctx)(in[0], in[1]);
}

static void check_binary(const char *name, op2 fn, double lo, double hi, bool broadcast)
{
    uint64_t seed = 7;
    const int64_t sa[2] = {3, 4}, sb_full[2] = {3, 4}, sb_row[1] = {4};
    weft_tensor *a = random_leaf(2, sa, lo, hi, &seed);
    weft_tensor *b = broadcast ? random_leaf(1, sb_row, lo, hi, &seed)
                               : random_leaf(2, sb_full, lo, hi, &seed);
    weft_tensor *in[2] = {a, b};
    cr_expect_eq(weft_gradcheck(apply_binary, (void *)fn, 2, in, 1e-6, 1e-5, 1e-4), 0, "%s: %s",
                 name, weft_error_message());
    weft_error_clear();
}

Test(autograd, gradcheck_binary_ops_with_and_without_broadcast)
{
    for (int bc = 0; bc < 2; bc++) {
        check_binary("add", weft_add, -2, 2, bc);
        check_binary("sub", weft_sub, -2, 2, bc);
        check_binary("mul", weft_mul, -2, 2, bc);
        check_binary("div", weft_div, 0.5, 2, bc);
        check_binary("pow", weft_pow, 0.5, 2, bc);
        check_binary("maximum", weft_maximum, -2, 2, bc);
        check_binary("minimum", weft_minimum, -2, 2, bc);
        check_binary("matmul-like mul", weft_mul, -1, 1, bc);
    }
}

struct call_ctx {
    int kind;
    int dim;
};

static weft_tensor *apply_misc(void *p, weft_tensor *const *in)
{
    const struct call_ctx *c = p;
    weft_tensor *x = in[0];
    int dims[2] = {c->dim, 0};
    switch (c->kind) {
    case 0: return weft_sum(x, 1, dims, false);
    case 1: return weft_mean(x, 1, dims, true);
    case 2: return weft_prod(x, 1, dims, false);
    case 3: return weft_var(x, 1, dims, 1, false);
    case 4: return weft_std(x, 1, dims, 1, true);
    case 5: return weft_softmax(x, c->dim);
    case 6: return weft_log_softmax(x, c->dim);
    case 7: return weft_max(x);
    case 8: {
        weft_tensor *v = NULL;
        return weft_max_dim(x, c->dim, false, &v, NULL) == 0 ? v : NULL;
    }
    case 9: return weft_clamp(x, -0.5, 0.5);
    case 10: return weft_transpose(weft_mul_scalar(x, 2), 0, 1);
    case 11: {
        const int perm[2] = {1, 0};
        return weft_permute(x, 2, perm);
    }
    case 12: return weft_narrow(x, c->dim, 1, 2);
    case 13: return weft_select(x, c->dim, 1);
    case 14: {
        const int64_t shape[3] = {2, 3, 4};
        return weft_expand(weft_unsqueeze(x, 0), 3, shape);
    }
    case 15: {
        const int64_t shape[1] = {12};
        return weft_view(weft_contiguous(x), 1, shape);
    }
    case 16: {
        const int64_t shape[2] = {4, 3};
        return weft_reshape(weft_t(x), 2, shape);
    }
    case 17: {
        weft_tensor *parts[2] = {x, weft_mul_scalar(x, 3)};
        return weft_cat(2, parts, c->dim);
    }
    case 18: {
        weft_tensor *parts[2] = {x, weft_exp(x)};
        return weft_stack(2, parts, c->dim);
    }
    case 19: {
        const int64_t shape[2] = {2, 2}, stride[2] = {1, 3};
        return weft_as_strided(x, 2, shape, stride, 1);
    }
    case 20: return weft_slice(x, 1, 0, 4, 2);
    case 21: return weft_squeeze(weft_unsqueeze(x, 1));
    case 22: return weft_flatten(x, 0, 1);
    case 23: return weft_sum(x, 0, NULL, false);
    case 24: return weft_mean(x, 0, NULL, false);
    default: return NULL;
    }
}

Test(autograd, gradcheck_reductions_softmax_views_and_joins)
{
    uint64_t seed = 3;
    const int64_t shape[2] = {3, 4};
    for (int kind = 0; kind <= 24; kind++) {
        for (int dim = 0; dim < 2; dim++) {
            weft_tensor *x = random_leaf(2, shape, 0.2, 2, &seed);
            weft_tensor *in[1] = {x};
            struct call_ctx c = {kind, dim};
            cr_expect_eq(weft_gradcheck(apply_misc, &c, 1, in, 1e-6, 1e-5, 1e-4), 0,
                         "kind %d dim %d: %s", kind, dim, weft_error_message());
            weft_error_clear();
        }
    }
}

static weft_tensor *apply_matmul(void *ctx, weft_tensor *const *in)
{
    (void)ctx;
    return weft_matmul(in[0], in[1]);
}

Test(autograd, gradcheck_matmul_shapes)
{
    uint64_t seed = 11;
    struct {
        int na, nb;
        int64_t a[3], b[3];
    } cases[] = {
        {1, 1, {4}, {4}},           {2, 2, {3, 4}, {4, 2}},      {1, 2, {4}, {4, 3}},
        {2, 1, {3, 4}, {4}},        {3, 3, {2, 3, 4}, {2, 4, 5}}, {3, 2, {2, 3, 4}, {4, 2}},
        {2, 3, {3, 4}, {2, 4, 2}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        weft_tensor *a = random_leaf(cases[i].na, cases[i].a, -1, 1, &seed);
        weft_tensor *b = random_leaf(cases[i].nb, cases[i].b, -1, 1, &seed);
        weft_tensor *in[2] = {a, b};
        cr_expect_eq(weft_gradcheck(apply_matmul, NULL, 2, in, 1e-6, 1e-5, 1e-4), 0,
                     "case %zu: %s", i, weft_error_message());
        weft_error_clear();
    }
}

static weft_tensor *apply_index(void *ctx, weft_tensor *const *in)
{
    int kind = *(int *)ctx;
    const int64_t ishape[1] = {3}, gshape[2] = {3, 2};
    const double iv[3] = {2, 0, 2}, gv[6] = {0, 3, 1, 1, 2, 0};
    weft_tensor *idx = tu_tensor(1, ishape, iv, WEFT_I64);
    weft_tensor *gidx = tu_tensor(2, gshape, gv, WEFT_I64);
    switch (kind) {
    case 0: return weft_index_select(in[0], 0, idx);
    case 1: return weft_index_select(in[0], 1, idx);
    case 2: return weft_gather(in[0], 1, gidx);
    case 3: return weft_scatter_add(in[0], 1, gidx, in[1]);
    case 4: {
        weft_tensor *cond = weft_gt_scalar(in[1], 0);
        return weft_where(weft_narrow(cond, 1, 0, 2), weft_narrow(in[0], 1, 0, 2), in[1]);
    }
    case 5: return weft_masked_fill(in[0], weft_gt_scalar(in[0], 0), 0.5);
    default: return NULL;
    }
}

Test(autograd, gradcheck_index_ops_and_where)
{
    uint64_t seed = 5;
    const int64_t shape[2] = {3, 4}, src[2] = {3, 2};
    for (int kind = 0; kind <= 5; kind++) {
        weft_tensor *x = random_leaf(2, shape, -1, 1, &seed);
        weft_tensor *s = random_leaf(2, src, -1, 1, &seed);
        weft_tensor *in[2] = {x, s};
        cr_expect_eq(weft_gradcheck(apply_index, &kind, 2, in, 1e-6, 1e-5, 1e-4), 0,
                     "kind %d: %s", kind, weft_error_message());
        weft_error_clear();
    }
}

/* ReLU's backward runs the cpu backend's threshold_backward (one pass): it must be there,
 * and give the composite's values (g where x > 0, else 0; NaN inputs pass no gradient)
 * for every floating dtype, on a transposed view too. */
Test(autograd, relu_backward_takes_the_fused_threshold_backward)
{
    int op = weft_op_lookup(WEFT_OP_THRESHOLD_BACKWARD_NAME);
    cr_assert_geq(op, 0);
    const enum weft_dtype dts[] = {WEFT_F64, WEFT_F32, WEFT_BF16, WEFT_F16};
    for (size_t k = 0; k < 4; k++) {
        cr_assert_not_null(weft_kernel_lookup(op, WEFT_DEVICE_CPU, WEFT_LAYOUT_STRIDED, dts[k]));
        weft_scope_push();
        double v[12] = {-2, -0.5, 0, 0.25, 1, 3, -1, NAN, 2, -0.0, 0.5, -3};
        double gv[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
        weft_tensor *base = tu_tensor(2, (const int64_t[]){3, 4}, v, dts[k]);
        cr_assert_eq(weft_requires_grad_(base, true), 0);
        weft_tensor *x = weft_transpose(base, 0, 1); /* [4, 3], strided */
        weft_tensor *g = tu_tensor(2, (const int64_t[]){4, 3}, gv, dts[k]);
        cr_assert_eq(weft_backward(weft_relu(x), g, false), 0, "%s", weft_error_message());
        /* base[i][j] = v[i*4+j] gets g[j][i] = gv[j*3+i] where v > 0 */
        double expect[12];
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 4; j++)
                expect[i * 4 + j] = v[i * 4 + j] > 0 ? gv[j * 3 + i] : 0;
        tu_assert_close(weft_grad(base), expect, 12, 0, 0);
        weft_scope_pop();
    }
}

/* ---- hooks: post-accumulate-grad hooks and queued callbacks (what DDP is built on) ---- */

struct hook_log {
    int calls[4];
    double seen[4]; /* the leaf's .grad[0] when its hook ran */
    int order[8], n;
    int callbacks;
    int fail_with;  /* a hook or callback returning this fails the backward */
};

/* What one hook was registered with: the log and which leaf it is. */
struct hook_ctx {
    struct hook_log *log;
    int which;
};

static int record_hook(weft_tensor *leaf, void *ctx)
{
    struct hook_ctx *h = ctx;
    struct hook_log *log = h->log;
    log->calls[h->which]++;
    log->order[log->n++] = h->which;
    double v[8];
    tu_read(weft_grad(leaf), v);
    log->seen[h->which] = v[0];
    return h->which == 0 ? log->fail_with : 0; /* only leaf 0's hook fails */
}

static int record_callback(void *ctx)
{
    struct hook_log *log = ctx;
    log->callbacks++;
    log->order[log->n++] = 100;
    return log->fail_with;
}

static int hook_queuing_callback(weft_tensor *leaf, void *ctx)
{
    (void)leaf;
    return weft_autograd_queue_callback(record_callback, ctx);
}

Test(autograd, post_accumulate_grad_hooks_see_the_summed_gradient_once)
{
    struct hook_log log = {0};
    struct hook_ctx ca = {&log, 0}, cb = {&log, 1};
    weft_scope_push();
    weft_tensor *a = tu_tensor(1, (const int64_t[]){2}, (double[]){1, 2}, WEFT_F64);
    weft_tensor *b = tu_tensor(1, (const int64_t[]){2}, (double[]){3, 4}, WEFT_F64);
    weft_requires_grad_(a, true);
    weft_requires_grad_(b, true);
    int ha = weft_register_post_accumulate_grad_hook(a, record_hook, &ca);
    int hb = weft_register_post_accumulate_grad_hook(b, record_hook, &cb);
    cr_assert_gt(ha, 0);
    cr_assert_gt(hb, 0);
    cr_assert_neq(ha, hb);
    /* a is used twice: its hook runs once, after both contributions are summed */
    weft_tensor *y = weft_sum(weft_add(weft_mul(a, b), weft_mul_scalar(a, 3)), 0, NULL, false);
    cr_assert_eq(weft_backward(y, NULL, false), 0, "%s", weft_error_message());
    cr_expect_eq(log.calls[0], 1);
    cr_expect_eq(log.calls[1], 1);
    cr_expect_eq(log.seen[0], 3 + 3); /* d/da = b + 3 */
    cr_expect_eq(log.seen[1], 1);     /* d/db = a */
    /* a second backward accumulates: the hook sees the sum */
    y = weft_sum(weft_mul(a, b), 0, NULL, false);
    cr_assert_eq(weft_backward(y, NULL, false), 0);
    cr_expect_eq(log.seen[0], 6 + 3);
    /* removed hooks stay quiet */
    cr_expect_eq(weft_remove_hook(a, ha), 0);
    cr_expect_neq(weft_remove_hook(a, ha), 0);
    tu_assert_error(WEFT_ERR_VALUE, "no hook with handle");
    y = weft_sum(weft_mul(a, b), 0, NULL, false);
    cr_assert_eq(weft_backward(y, NULL, false), 0);
    cr_expect_eq(log.calls[0], 2);
    cr_expect_eq(log.calls[1], 3);
    /* non-leaves and tensors without grad are refused */
    cr_expect_lt(weft_register_post_accumulate_grad_hook(weft_mul(a, b), record_hook, &ca), 0);
    tu_assert_error(WEFT_ERR_RUNTIME, "non-leaf");
    weft_tensor *c = tu_tensor(1, (const int64_t[]){2}, (double[]){1, 1}, WEFT_F64);
    cr_expect_lt(weft_register_post_accumulate_grad_hook(c, record_hook, &ca), 0);
    tu_assert_error(WEFT_ERR_RUNTIME, "do not require grad");
    weft_scope_pop();
}

Test(autograd, queued_callbacks_run_once_after_every_node_even_on_failure)
{
    struct hook_log log = {0};
    struct hook_ctx ca = {&log, 0}, cb = {&log, 1};
    cr_expect_lt(weft_autograd_queue_callback(record_callback, &log), 0);
    tu_assert_error(WEFT_ERR_RUNTIME, "no backward is running");
    weft_scope_push();
    weft_tensor *a = tu_tensor(1, (const int64_t[]){2}, (double[]){1, 2}, WEFT_F64);
    weft_tensor *b = tu_tensor(1, (const int64_t[]){2}, (double[]){3, 4}, WEFT_F64);
    weft_requires_grad_(a, true);
    weft_requires_grad_(b, true);
    weft_register_post_accumulate_grad_hook(a, hook_queuing_callback, &log);
    weft_register_post_accumulate_grad_hook(a, record_hook, &ca);
    weft_register_post_accumulate_grad_hook(b, record_hook, &cb);
    weft_tensor *y = weft_sum(weft_mul(a, b), 0, NULL, false);
    cr_assert_eq(weft_backward(y, NULL, false), 0, "%s", weft_error_message());
    cr_expect_eq(log.callbacks, 1);
    cr_expect_eq(log.n, 3);
    cr_expect_eq(log.order[2], 100, "the callback runs after every hook");
    /* a failing hook (a's, after a's hook queued the callback) fails the backward; the
     * queued callback still runs */
    log = (struct hook_log){.fail_with = WEFT_ERR_RUNTIME};
    weft_error_clear();
    y = weft_sum(weft_mul(a, b), 0, NULL, false);
    cr_expect_neq(weft_backward(y, NULL, false), 0);
    cr_expect_eq(log.callbacks, 1);
    weft_error_clear();
    weft_scope_pop();
}

/* PyTorch's derivatives.yaml conventions at the points where the formula is 0/0 or 0*inf:
 * d/da a**b at a = 0, b = 0 is 0 (pow_backward masks exponent == 0), and std's gradient
 * on a constant input is 0 (std_backward masks result == 0), not nan. */
Test(autograd, pow_at_zero_and_std_of_a_constant_have_zero_gradients_as_pytorch)
{
    weft_scope_push();
    const double zeros[3] = {0, 0, 0}, ones[4] = {1, 1, 1, 1};
    weft_tensor *a = tu_tensor(1, (const int64_t[]){3}, zeros, WEFT_F64);
    weft_tensor *b = tu_tensor(1, (const int64_t[]){3}, (double[]){0, 2, 0.5}, WEFT_F64);
    weft_requires_grad_(a, true);
    weft_requires_grad_(b, true);
    cr_assert_eq(weft_backward(weft_sum(weft_pow(a, b), 0, NULL, false), NULL, false), 0);
    /* b = 0: masked; b = 2: 2 * 0 = 0; b = 0.5: 0.5 * 0 ** -0.5 = inf, as PyTorch */
    tu_assert_close(weft_grad(a), (const double[]){0, 0, INFINITY}, 3, 0, 0);
    tu_assert_close(weft_grad(b), (const double[]){0, 0, 0}, 3, 0, 0);
    weft_tensor *c = tu_tensor(1, (const int64_t[]){4}, ones, WEFT_F64);
    weft_requires_grad_(c, true);
    cr_assert_eq(weft_backward(weft_std(c, 0, NULL, 1, false), NULL, false), 0);
    tu_assert_close(weft_grad(c), (const double[]){0, 0, 0, 0}, 4, 0, 0);
    /* away from the constant the gradient is the usual one: (x - mean) / ((n - 1) std) */
    weft_tensor *d = tu_tensor(1, (const int64_t[]){2}, (double[]){1, 3}, WEFT_F64);
    weft_requires_grad_(d, true);
    cr_assert_eq(weft_backward(weft_std(d, 0, NULL, 1, false), NULL, false), 0);
    tu_assert_close(weft_grad(d), (const double[]){-M_SQRT1_2, M_SQRT1_2}, 2, 1e-12, 0);
    weft_scope_pop();
}

/* backward(y, grad) with a gradient of another dtype: the engine casts it to y's (PyTorch's
 * validate_outputs); another shape is refused with PyTorch's text. */
Test(autograd, a_root_gradient_of_another_dtype_is_cast_to_the_outputs)
{
    const int64_t shape[1] = {3};
    const double v[3] = {1, -2, 3}, g[3] = {0.5, 1, 2}, expected[3] = {1.5, 3, 6};
    weft_tensor *x = tu_tensor(1, shape, v, WEFT_F32);
    cr_assert_eq(weft_requires_grad_(x, true), 0);
    weft_tensor *y = weft_mul_scalar(x, 3);
    cr_assert_eq(weft_backward(y, tu_tensor(1, shape, g, WEFT_F64), true), 0, "%s",
                 weft_error_message());
    cr_expect_eq(weft_grad(x)->dtype, WEFT_F32);
    tu_assert_close(weft_grad(x), expected, 3, 0, 1e-6);
    const int64_t other[1] = {2};
    cr_assert_neq(weft_backward(y, tu_tensor(1, other, g, WEFT_F64), false), 0);
    cr_expect(strstr(weft_error_message(), "Mismatch in shape: grad_output[0] has a shape of [2] "
                                           "and output[0] has a shape of [3].") != NULL,
              "%s", weft_error_message());
    weft_error_clear();
}
