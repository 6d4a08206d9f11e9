/* tests/test_nn_module.c: modules and layers: names, modes, repr, initialisation,
 * state dicts, conversion in place and a small training run, as torch.nn behaves. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <weft/nn.h>

TestSuite(nn_module, .init = tu_setup, .fini = tu_teardown);

/* ---- helpers ------------------------------------------------------------------------ */

static weft_module *check_module(weft_module *m)
{
    cr_assert_not_null(m, "module construction failed: %s", weft_error_message());
    return m;
}

/* Sequential(Linear(4, 3), ReLU(), Linear(3, 2), BatchNorm1d(2)). */
static weft_module *small_model(void)
{
    weft_module *layers[] = {weft_nn_linear(4, 3, true), weft_nn_relu(), weft_nn_linear(3, 2, true),
                             weft_nn_batch_norm1d(2, 1e-5, 0.1)};
    return check_module(weft_nn_sequential(4, layers));
}

static void assert_names(struct weft_named_tensor *got, int n, const char *const *expected,
                         int expected_n)
{
    cr_assert_eq(n, expected_n, "%d names, expected %d", n, expected_n);
    for (int i = 0; i < n; i++)
        cr_assert_str_eq(got[i].name, expected[i], "name %d", i);
}

static void assert_repr(const weft_module *m, const char *expected)
{
    char *text = weft_module_repr(m);
    cr_assert_not_null(text, "repr failed: %s", weft_error_message());
    cr_assert_str_eq(text, expected);
    free(text);
}

/* Asserts the pending error's exact message and clears it. */
static void assert_error_text(int code, const char *expected)
{
    cr_assert_eq(weft_error_code(), code, "code %d (%s), expected %d", weft_error_code(),
                 weft_error_message(), code);
    cr_assert_str_eq(weft_error_message(), expected);
    weft_error_clear();
}

static int64_t read_all(const weft_tensor *t, double **out)
{
    int64_t n = weft_tensor_numel(t);
    *out = malloc((size_t)(n ? n : 1) * sizeof(double));
    cr_assert_not_null(*out);
    tu_read(t, *out);
    return n;
}

static weft_tensor *random_input(int ndim, const int64_t *shape, uint64_t seed)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    double *v = malloc((size_t)n * sizeof *v);
    cr_assert_not_null(v);
    tu_random_values(v, n, -1.0, 1.0, &seed);
    weft_tensor *t = tu_tensor(ndim, shape, v, WEFT_F32);
    free(v);
    return t;
}

/* ---- names ---------------------------------------------------------------------------- */

Test(nn_module, sequential_names_parameters_and_buffers_as_torch_does)
{
    weft_module *m = small_model();
    struct weft_named_tensor *p, *b;
    int np = weft_module_named_parameters(m, &p);
    int nb = weft_module_named_buffers(m, &b);
    const char *params[] = {"0.weight", "0.bias", "2.weight", "2.bias", "3.weight", "3.bias"};
    const char *buffers[] = {"3.running_mean", "3.running_var", "3.num_batches_tracked"};
    assert_names(p, np, params, 6);
    assert_names(b, nb, buffers, 3);
    cr_assert_eq(p[0].tensor, weft_module_parameter(weft_module_child(m, "0"), "weight"));
    cr_assert_eq(b[2].tensor->dtype, WEFT_I64);
    cr_assert_eq(b[2].tensor->ndim, 0);
    cr_assert_eq(weft_module_num_parameters(m), 4 * 3 + 3 + 3 * 2 + 2 + 2 + 2);
    free(p);
    free(b);
    weft_module_free(m);
}

Test(nn_module, nested_names_are_dotted_depth_first)
{
    weft_module *inner[] = {weft_nn_linear(2, 2, false), weft_nn_batch_norm1d(2, 1e-5, 0.1)};
    weft_module *outer[] = {weft_nn_sequential(2, inner), weft_nn_linear(2, 1, true)};
    weft_module *m = check_module(weft_nn_sequential(2, outer));
    struct weft_named_tensor *p;
    int np = weft_module_named_parameters(m, &p);
    const char *expected[] = {"0.0.weight", "0.1.weight", "0.1.bias", "1.weight", "1.bias"};
    assert_names(p, np, expected, 5);
    free(p);
    weft_module_free(m);
}

Test(nn_module, parameters_are_leaves_that_require_grad_and_buffers_are_not)
{
    weft_module *m = small_model();
    struct weft_named_tensor *p, *b;
    int np = weft_module_named_parameters(m, &p), nb = weft_module_named_buffers(m, &b);
    for (int i = 0; i < np; i++) {
        cr_assert(weft_requires_grad(p[i].tensor), "%s", p[i].name);
        cr_assert(weft_is_leaf(p[i].tensor), "%s", p[i].name);
    }
    for (int i = 0; i < nb; i++)
        cr_assert_not(weft_requires_grad(b[i].tensor), "%s", b[i].name);
    free(p);
    free(b);
    weft_module_free(m);
}

Test(nn_module, a_tensor_shared_by_two_modules_is_listed_once_as_named_parameters_does)
{
    weft_module *a = weft_nn_linear(3, 3, false), *b = weft_nn_linear(3, 3, false);
    weft_module *m = check_module(weft_nn_sequential(2, (weft_module *[]){a, b}));
    weft_tensor *shared = weft_module_parameter(a, "weight");
    weft_module *extra = check_module(weft_nn_sequential(0, NULL));
    cr_assert_eq(weft_module_register_parameter(extra, "tied", shared), 0);
    cr_assert_eq(weft_nn_sequential_append(m, extra), 0);
    struct weft_named_tensor *p;
    int np = weft_module_named_parameters(m, &p);
    const char *expected[] = {"0.weight", "1.weight"};
    assert_names(p, np, expected, 2);
    cr_assert_eq(weft_module_num_parameters(m), 18);
    free(p);
    weft_module_free(m);
}

Test(nn_module, lookups_by_name_return_borrowed_members_or_null)
{
    weft_module *m = small_model();
    weft_module *bn = weft_module_child(m, "3");
    cr_assert_str_eq(weft_module_type_name(bn), "BatchNorm1d");
    cr_assert_not_null(weft_module_buffer(bn, "running_var"));
    cr_assert_null(weft_module_parameter(bn, "running_var"));
    cr_assert_null(weft_module_child(m, "4"));
    cr_assert_null(weft_module_parameter(weft_module_child(m, "1"), "weight"));
    cr_assert_null(weft_module_parameter(m, NULL));
    tu_assert_no_error();
    weft_module_free(m);
}

Test(nn_module, children_are_walked_in_order_with_their_names)
{
    weft_module *m = small_model();
    cr_assert_eq(weft_module_num_children(m), 4);
    cr_expect_str_eq(weft_module_child_name(m, 2), "2");
    cr_expect_eq(weft_module_child_at(m, 3), weft_module_child(m, "3"));
    cr_expect_null(weft_module_child_at(m, 4));
    cr_expect_null(weft_module_child_name(m, -1));
    weft_module_free(m);
}

Test(nn_module, swap_puts_a_module_in_anothers_place_keeping_its_identity)
{
    weft_module *m = small_model();
    weft_module *held = weft_module_child(m, "2"); /* as a model's state holds a layer */
    weft_tensor *old_weight = weft_module_parameter(held, "weight");
    int n = 0;
    cr_assert_not_null(weft_module_parameters(m, &n));
    cr_assert_eq(n, 6);
    weft_module *inner[1] = {weft_nn_linear(3, 5, false)};
    weft_module *replacement = check_module(weft_nn_sequential(1, inner));
    cr_assert_eq(weft_module_swap(held, replacement), 0, "%s", weft_error_message());
    cr_expect_eq(weft_module_child(m, "2"), held);
    cr_expect_str_eq(weft_module_type_name(held), "Sequential");
    cr_expect_eq(weft_module_parameter(weft_module_child(held, "0"), "bias"), NULL);
    /* the old contents went to the replacement, which is the caller's */
    cr_expect_str_eq(weft_module_type_name(replacement), "Linear");
    cr_expect_eq(weft_module_parameter(replacement, "weight"), old_weight);
    /* the parameter list follows: 6 - 2 + 1 */
    cr_assert_not_null(weft_module_parameters(m, &n));
    cr_expect_eq(n, 5);
    /* the moved child answers to its new holder: freeing it alone is refused */
    weft_module_free(weft_module_child(held, "0"));
    assert_error_text(WEFT_ERR_RUNTIME, "weft_module_free: this Linear belongs to a Sequential "
                                        "and is freed with it");
    /* a module that belongs elsewhere cannot be swapped in */
    cr_expect_lt(weft_module_swap(held, weft_module_child(m, "1")), 0);
    assert_error_text(WEFT_ERR_VALUE, "weft_module_swap: the replacement ReLU belongs to a "
                                      "Sequential; give a module of its own");
    weft_module_free(replacement);
    weft_module_free(m);
}

/* ---- registration --------------------------------------------------------------------- */

Test(nn_module, registration_refuses_names_as_torch_does)
{
    weft_module *m = check_module(weft_nn_linear(2, 2, true));
    weft_tensor *t = weft_zeros(1, (int64_t[]){2}, WEFT_F32, WEFT_CPU);

    cr_assert_lt(weft_module_register_parameter(m, "weight", t), 0);
    assert_error_text(WEFT_ERR_VALUE, "attribute 'weight' already exists");
    cr_assert_lt(weft_module_register_buffer(m, "bias", t), 0);
    assert_error_text(WEFT_ERR_VALUE, "attribute 'bias' already exists");
    cr_assert_lt(weft_module_register_parameter(m, "a.b", t), 0);
    assert_error_text(WEFT_ERR_VALUE, "parameter name can't contain \".\"");
    cr_assert_lt(weft_module_register_buffer(m, "a.b", t), 0);
    assert_error_text(WEFT_ERR_VALUE, "buffer name can't contain \".\"");
    cr_assert_lt(weft_module_register_parameter(m, "", t), 0);
    assert_error_text(WEFT_ERR_VALUE, "parameter name can't be empty string \"\"");
    cr_assert_lt(weft_module_add_child(m, "x.y", weft_nn_relu()), 0);
    assert_error_text(WEFT_ERR_VALUE, "module name can't contain \".\", got: x.y");
    cr_assert_lt(weft_module_add_child(m, "weight", weft_nn_relu()), 0);
    assert_error_text(WEFT_ERR_VALUE, "attribute 'weight' already exists");

    cr_assert_eq(weft_module_register_buffer(m, "stat", t), 0);
    cr_assert_lt(weft_module_register_parameter(m, "stat", t), 0);
    assert_error_text(WEFT_ERR_VALUE, "attribute 'stat' already exists");
    cr_assert_eq(weft_module_add_child(m, "act", weft_nn_relu()), 0);
    cr_assert_lt(weft_module_register_buffer(m, "act", t), 0);
    assert_error_text(WEFT_ERR_VALUE, "attribute 'act' already exists");

    weft_tensor_release(t);
    weft_module_free(m);
}

Test(nn_module, a_parameter_must_be_a_floating_leaf)
{
    weft_module *m = check_module(weft_nn_sequential(0, NULL));
    weft_tensor *ints = weft_zeros(1, (int64_t[]){2}, WEFT_I64, WEFT_CPU);
    cr_assert_lt(weft_module_register_parameter(m, "w", ints), 0);
    tu_assert_error(WEFT_ERR_RUNTIME, "Only Tensors of floating point dtype can require gradients");

    weft_tensor *leaf = weft_ones(1, (int64_t[]){2}, WEFT_F32, WEFT_CPU);
    cr_assert_eq(weft_requires_grad_(leaf, true), 0);
    weft_tensor *computed = weft_mul_scalar(leaf, 2.0);
    cr_assert_lt(weft_module_register_parameter(m, "w", computed), 0);
    assert_error_text(WEFT_ERR_VALUE,
                      "Cannot assign non-leaf Tensor to parameter 'w'. Model parameters must "
                      "be created explicitly. To express 'w' as a function of another Tensor, "
                      "compute the value in the forward() method.");
    /* A plain tensor becomes a parameter that requires grad; NULL is refused silently. */
    weft_tensor *plain = weft_ones(1, (int64_t[]){2}, WEFT_F32, WEFT_CPU);
    cr_assert_eq(weft_module_register_parameter(m, "w", plain), 0);
    cr_assert(weft_requires_grad(plain));
    cr_assert_lt(weft_module_register_parameter(m, "v", NULL), 0);
    tu_assert_no_error();
    weft_tensor_release(ints);
    weft_tensor_release(leaf);
    weft_tensor_release(computed);
    weft_tensor_release(plain);
    weft_module_free(m);
}

Test(nn_module, a_module_has_one_parent)
{
    weft_module *a = check_module(weft_nn_sequential(0, NULL));
    weft_module *b = check_module(weft_nn_sequential(0, NULL));
    weft_module *relu = check_module(weft_nn_relu());
    cr_assert_eq(weft_module_add_child(a, "r", relu), 0);
    cr_assert_lt(weft_module_add_child(b, "r", relu), 0);
    tu_assert_error(WEFT_ERR_VALUE, "already belongs to a Sequential");
    cr_assert_lt(weft_module_add_child(a, "self", a), 0);
    tu_assert_error(WEFT_ERR_VALUE, "cannot add a module as a child of itself");
    cr_assert_eq(weft_module_add_child(b, "a", a), 0);
    cr_assert_lt(weft_module_add_child(a, "b", b), 0);
    tu_assert_error(WEFT_ERR_VALUE, "of one of its descendants");
    weft_module_free(a); /* owned by b: refused */
    tu_assert_error(WEFT_ERR_RUNTIME, "belongs to a Sequential and is freed with it");
    weft_module_free(b);
}

/* ---- custom module types -------------------------------------------------------------- */

struct scale_state {
    int *freed;
};

static weft_tensor *scale_forward(weft_module *m, weft_tensor *x)
{
    return weft_mul(x, weft_module_parameter(m, "factor"));
}

static void scale_free(void *state)
{
    struct scale_state *s = state;
    (*s->freed)++;
    free(s);
}

static int scale_repr(const weft_module *m, char *buf, size_t size)
{
    (void)m;
    return snprintf(buf, size, "first line\nsecond line");
}

/* Used unregistered, as a program's own type may be. */
static const struct weft_module_type scale_type = {
    WEFT_VTABLE(WEFT_KIND_MODULE, "test_scale", struct weft_module_type), "Scale", scale_forward,
    scale_free, scale_repr, NULL,
};

Test(nn_module, a_custom_type_runs_its_forward_and_frees_its_state)
{
    int freed = 0;
    struct scale_state *s = malloc(sizeof *s);
    s->freed = &freed;
    weft_module *m = check_module(weft_module_new(&scale_type, s));
    cr_assert_eq(weft_module_state(m), s);
    weft_scope_push();
    cr_assert_eq(weft_module_register_parameter(m, "factor",
                                                weft_full(0, NULL, 3.0, WEFT_F32, WEFT_CPU)), 0);
    weft_tensor *x = tu_tensor(1, (int64_t[]){2}, (double[]){1, 2}, WEFT_F32);
    weft_tensor *y = weft_module_forward(m, x);
    tu_assert_close(y, (double[]){3, 6}, 2, 0, 0);
    weft_scope_pop();
    weft_module_free(m);
    cr_assert_eq(freed, 1);
}

Test(nn_module, a_type_of_another_abi_is_refused)
{
    struct weft_module_type old = scale_type;
    old.base.abi_version = WEFT_ABI_VERSION + 1;
    cr_assert_null(weft_module_new(&old, NULL));
    tu_assert_error(WEFT_ERR_PLUGIN, "built for weft ABI 4, but this weft has ABI 3");
    struct weft_module_type no_forward = scale_type;
    no_forward.forward = NULL;
    cr_assert_null(weft_module_new(&no_forward, NULL));
    tu_assert_error(WEFT_ERR_PLUGIN, "module type 'test_scale' needs a class_name and a forward");
    struct weft_module_type not_a_module = scale_type;
    not_a_module.base.kind = WEFT_KIND_READER;
    cr_assert_null(weft_module_new(&not_a_module, NULL));
    cr_assert_neq(weft_error_code(), WEFT_OK);
    weft_error_clear();
}

/* ---- modes ------------------------------------------------------------------------------ */

Test(nn_module, train_and_eval_reach_every_descendant)
{
    weft_module *inner[] = {weft_nn_dropout(0.5), weft_nn_batch_norm1d(3, 1e-5, 0.1)};
    weft_module *outer[] = {weft_nn_linear(3, 3, true), weft_nn_sequential(2, inner)};
    weft_module *m = check_module(weft_nn_sequential(2, outer));
    weft_module *nested = weft_module_child(m, "1");
    cr_assert(weft_module_is_training(m), "modules start in training mode");
    weft_module_train(m, false);
    cr_assert_not(weft_module_is_training(m));
    cr_assert_not(weft_module_is_training(weft_module_child(m, "0")));
    cr_assert_not(weft_module_is_training(weft_module_child(nested, "0")));
    cr_assert_not(weft_module_is_training(weft_module_child(nested, "1")));
    weft_module_train(nested, true);
    cr_assert_not(weft_module_is_training(m));
    cr_assert(weft_module_is_training(weft_module_child(nested, "1")));
    weft_module_free(m);
}

/* ---- repr ------------------------------------------------------------------------------- */

Test(nn_module, sequential_repr_is_pytorchs)
{
    weft_module *layers[] = {weft_nn_linear(784, 256, true), weft_nn_relu(), weft_nn_dropout(0.5)};
    weft_module *m = check_module(weft_nn_sequential(3, layers));
    assert_repr(m, "Sequential(\n"
                   "  (0): Linear(in_features=784, out_features=256, bias=True)\n"
                   "  (1): ReLU()\n"
                   "  (2): Dropout(p=0.5, inplace=False)\n"
                   ")");
    weft_module_free(m);
}

Test(nn_module, nested_repr_indents_children)
{
    weft_module *inner[] = {weft_nn_linear(2, 2, false)};
    weft_module *outer[] = {weft_nn_sequential(1, inner), weft_nn_relu(),
                            weft_nn_sequential(0, NULL)};
    weft_module *m = check_module(weft_nn_sequential(3, outer));
    assert_repr(m, "Sequential(\n"
                   "  (0): Sequential(\n"
                   "    (0): Linear(in_features=2, out_features=2, bias=False)\n"
                   "  )\n"
                   "  (1): ReLU()\n"
                   "  (2): Sequential()\n"
                   ")");
    weft_module_free(m);
}

Test(nn_module, a_multi_line_extra_repr_goes_on_its_own_lines_before_the_children)
{
    int freed = 0;
    struct scale_state *s = malloc(sizeof *s);
    s->freed = &freed;
    weft_module *m = check_module(weft_module_new(&scale_type, s));
    assert_repr(m, "Scale(\n  first line\n  second line\n)");
    cr_assert_eq(weft_module_add_child(m, "fc", weft_nn_linear(1, 1, true)), 0);
    assert_repr(m, "Scale(\n"
                   "  first line\n"
                   "  second line\n"
                   "  (fc): Linear(in_features=1, out_features=1, bias=True)\n"
                   ")");
    weft_module_free(m);
}

Test(nn_module, every_layer_reprs_as_torch_nn)
{
    struct {
        weft_module *m;
        const char *text;
    } cases[] = {
        {weft_nn_linear(3, 4, false), "Linear(in_features=3, out_features=4, bias=False)"},
        {weft_nn_conv2d(&(struct weft_conv2d_options){1, 8, {3, 3}, .bias = true}),
         "Conv2d(1, 8, kernel_size=(3, 3), stride=(1, 1))"},
        {weft_nn_conv2d(&(struct weft_conv2d_options){
             4, 8, {3, 5}, {.stride = {2, 2}, .padding = {1, 2}, .dilation = {2, 1}, .groups = 2},
             false}),
         "Conv2d(4, 8, kernel_size=(3, 5), stride=(2, 2), padding=(1, 2), dilation=(2, 1), "
         "groups=2, bias=False)"},
        {weft_nn_batch_norm2d(8, 1e-5, 0.1),
         "BatchNorm2d(8, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)"},
        {weft_nn_batch_norm1d(16, 0.001, 1.0),
         "BatchNorm1d(16, eps=0.001, momentum=1.0, affine=True, track_running_stats=True)"},
        {weft_nn_max_pool2d(&(struct weft_pool2d_params){.kernel = {2, 2}}),
         "MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)"},
        {weft_nn_max_pool2d(&(struct weft_pool2d_params){
             .kernel = {3, 2}, .stride = {1, 1}, .padding = {1, 0}, .ceil_mode = true}),
         "MaxPool2d(kernel_size=(3, 2), stride=1, padding=(1, 0), dilation=1, ceil_mode=True)"},
        {weft_nn_avg_pool2d(&(struct weft_pool2d_params){.kernel = {2, 2}}),
         "AvgPool2d(kernel_size=2, stride=2, padding=0)"},
        {weft_nn_adaptive_avg_pool2d(1, 1), "AdaptiveAvgPool2d(output_size=1)"},
        {weft_nn_adaptive_avg_pool2d(5, 7), "AdaptiveAvgPool2d(output_size=(5, 7))"},
        {weft_nn_layer_norm(1, (int64_t[]){10}, 1e-5, true),
         "LayerNorm((10,), eps=1e-05, elementwise_affine=True)"},
        {weft_nn_layer_norm(2, (int64_t[]){2, 3}, 1e-12, false),
         "LayerNorm((2, 3), eps=1e-12, elementwise_affine=False)"},
        {weft_nn_dropout(0.25), "Dropout(p=0.25, inplace=False)"},
        {weft_nn_dropout(0.0), "Dropout(p=0.0, inplace=False)"},
        {weft_nn_embedding(10, 3), "Embedding(10, 3)"},
        {weft_nn_flatten(1, -1), "Flatten(start_dim=1, end_dim=-1)"},
        {weft_nn_relu(), "ReLU()"},
        {weft_nn_leaky_relu(0.01), "LeakyReLU(negative_slope=0.01)"},
        {weft_nn_leaky_relu(0.2), "LeakyReLU(negative_slope=0.2)"},
        {weft_nn_gelu(), "GELU(approximate='none')"},
        {weft_nn_tanh(), "Tanh()"},
        {weft_nn_sigmoid(), "Sigmoid()"},
        {weft_nn_softmax(1), "Softmax(dim=1)"},
        {weft_nn_log_softmax(-1), "LogSoftmax(dim=-1)"},
        {weft_nn_sequential(0, NULL), "Sequential()"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        check_module(cases[i].m);
        assert_repr(cases[i].m, cases[i].text);
        weft_module_free(cases[i].m);
    }
}

Test(nn_module, floats_in_reprs_are_written_as_python_writes_them)
{
    struct {
        double v;
        const char *text;
    } cases[] = {
        {0.1, "0.1"},         {0.3, "0.3"},       {1e-05, "1e-05"},   {2.5e-05, "2.5e-05"},
        {0.0001, "0.0001"},   {0.00015, "0.00015"}, {1.0, "1.0"},     {100.0, "100.0"},
        {12.5, "12.5"},       {1e16, "1e+16"},    {1.5e300, "1.5e+300"}, {-0.75, "-0.75"},
        {1e15, "1000000000000000.0"}, {0.0, "0.0"}, {1.0 / 3.0, "0.3333333333333333"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        weft_module *m = check_module(weft_nn_leaky_relu(cases[i].v));
        char expected[80];
        snprintf(expected, sizeof expected, "LeakyReLU(negative_slope=%s)", cases[i].text);
        assert_repr(m, expected);
        weft_module_free(m);
    }
}

/* ---- constructor checks --------------------------------------------------------------- */

Test(nn_module, constructors_check_arguments_as_torch_does)
{
    cr_assert_null(weft_nn_dropout(1.5));
    assert_error_text(WEFT_ERR_VALUE, "dropout probability has to be between 0 and 1, but got 1.5");
    cr_assert_null(weft_nn_dropout(-0.1));
    assert_error_text(WEFT_ERR_VALUE,
                      "dropout probability has to be between 0 and 1, but got -0.1");
    cr_assert_null(weft_nn_conv2d(&(struct weft_conv2d_options){3, 8, {3, 3}, {.groups = 2}}));
    assert_error_text(WEFT_ERR_VALUE, "in_channels must be divisible by groups");
    cr_assert_null(weft_nn_conv2d(&(struct weft_conv2d_options){4, 6, {3, 3}, {.groups = 4}}));
    assert_error_text(WEFT_ERR_VALUE, "out_channels must be divisible by groups");
    cr_assert_null(weft_nn_conv2d(&(struct weft_conv2d_options){4, 8, {3, 3}, {.groups = -1}}));
    assert_error_text(WEFT_ERR_VALUE, "groups must be a positive integer");
    cr_assert_null(weft_nn_max_pool2d(NULL));
    assert_error_text(WEFT_ERR_TYPE,
                      "MaxPool2d.__init__() missing 1 required positional argument: 'kernel_size'");
    cr_assert_null(weft_nn_linear(-1, 3, true));
    tu_assert_error(WEFT_ERR_RUNTIME,
                    "Trying to create tensor with negative dimension -1: [3, -1]");
    cr_assert_null(weft_nn_layer_norm(9, (int64_t[9]){1}, 1e-5, true));
    tu_assert_error(WEFT_ERR_VALUE, "at most 8 dimensions");
}

Test(nn_module, sequential_consumes_every_module_even_when_one_failed)
{
    weft_module *layers[] = {weft_nn_linear(2, 2, true), weft_nn_dropout(2.0), weft_nn_relu()};
    cr_assert_null(layers[1]);
    cr_assert_null(weft_nn_sequential(3, layers));
    tu_assert_error(WEFT_ERR_VALUE, "dropout probability"); /* the first error is kept */
    /* Under ASan, a leak of layers[0] or layers[2] would fail this suite. */
}

Test(nn_module, append_names_the_new_child_after_the_count)
{
    weft_module *m = check_module(weft_nn_sequential(1, (weft_module *[]){weft_nn_relu()}));
    cr_assert_eq(weft_nn_sequential_append(m, weft_nn_tanh()), 0);
    cr_assert_str_eq(weft_module_type_name(weft_module_child(m, "1")), "Tanh");
    weft_module *lin = check_module(weft_nn_linear(1, 1, true));
    cr_assert_lt(weft_nn_sequential_append(lin, weft_nn_relu()), 0);
    tu_assert_error(WEFT_ERR_TYPE, "expected a Sequential, got a Linear");
    weft_module_free(lin);
    weft_module_free(m);
}

Test(nn_module, an_empty_sequential_returns_its_input)
{
    weft_module *m = check_module(weft_nn_sequential(0, NULL));
    weft_scope_push();
    weft_tensor *x = weft_ones(1, (int64_t[]){3}, WEFT_F32, WEFT_CPU);
    cr_assert_eq(weft_module_forward(m, x), x);
    weft_scope_pop();
    weft_module_free(m);
}

Test(nn_module, batch_norm_checks_the_input_rank)
{
    weft_module *bn1 = check_module(weft_nn_batch_norm1d(3, 1e-5, 0.1));
    weft_module *bn2 = check_module(weft_nn_batch_norm2d(3, 1e-5, 0.1));
    weft_scope_push();
    weft_tensor *x4 = weft_zeros(4, (int64_t[]){2, 3, 2, 2}, WEFT_F32, WEFT_CPU);
    cr_assert_null(weft_module_forward(bn1, x4));
    assert_error_text(WEFT_ERR_VALUE, "expected 2D or 3D input (got 4D input)");
    cr_assert_null(weft_module_forward(bn2, weft_zeros(2, (int64_t[]){2, 3}, WEFT_F32, WEFT_CPU)));
    assert_error_text(WEFT_ERR_VALUE, "expected 4D input (got 2D input)");
    weft_scope_pop();
    weft_module_free(bn1);
    weft_module_free(bn2);
}

/* ---- forward ------------------------------------------------------------------------ */

Test(nn_module, every_layer_forwards_to_its_functional_form)
{
    weft_manual_seed(5);
    weft_scope_push();
    weft_tensor *img = random_input(4, (int64_t[]){2, 4, 6, 6}, 21);
    struct {
        weft_module *m;
        weft_tensor *x;
        int ndim;
        int64_t shape[4];
    } cases[] = {
        {weft_nn_conv2d(&(struct weft_conv2d_options){4, 8, {3, 3}, {.padding = {1, 1}}, true}),
         img, 4, {2, 8, 6, 6}},
        {weft_nn_conv2d(&(struct weft_conv2d_options){4, 6, {3, 3}, {.stride = {2, 2}, .groups = 2},
                                                      false}),
         img, 4, {2, 6, 2, 2}},
        {weft_nn_max_pool2d(&(struct weft_pool2d_params){.kernel = {2, 2}}), img, 4, {2, 4, 3, 3}},
        {weft_nn_avg_pool2d(&(struct weft_pool2d_params){.kernel = {3, 3}}), img, 4, {2, 4, 2, 2}},
        {weft_nn_adaptive_avg_pool2d(1, 1), img, 4, {2, 4, 1, 1}},
        {weft_nn_batch_norm2d(4, 1e-5, 0.1), img, 4, {2, 4, 6, 6}},
        {weft_nn_layer_norm(2, (int64_t[]){6, 6}, 1e-5, true), img, 4, {2, 4, 6, 6}},
        {weft_nn_flatten(1, -1), img, 2, {2, 144}},
        {weft_nn_flatten(2, 3), img, 3, {2, 4, 36}},
        {weft_nn_linear(6, 3, true), img, 4, {2, 4, 6, 3}},
        {weft_nn_embedding(10, 3), weft_randint(0, 10, 2, (int64_t[]){2, 5}, WEFT_I64, WEFT_CPU), 3,
         {2, 5, 3}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        check_module(cases[i].m);
        weft_tensor *y = weft_module_forward(cases[i].m, cases[i].x);
        cr_assert_not_null(y, "%s: %s", weft_module_type_name(cases[i].m), weft_error_message());
        tu_assert_shape(y, cases[i].ndim, cases[i].shape);
        weft_module_free(cases[i].m);
    }
    weft_scope_pop();
}

Test(nn_module, activations_compute_their_functions)
{
    weft_scope_push();
    weft_tensor *x = tu_tensor(2, (int64_t[]){1, 3}, (double[]){-2, 0, 1}, WEFT_F32);
    double e = exp(1.0), sum = exp(-2.0) + 1 + e;
    struct {
        weft_module *m;
        double expected[3];
    } cases[] = {
        {weft_nn_relu(), {0, 0, 1}},
        {weft_nn_leaky_relu(0.1), {-0.2, 0, 1}},
        {weft_nn_tanh(), {tanh(-2.0), 0, tanh(1.0)}},
        {weft_nn_sigmoid(), {1 / (1 + exp(2.0)), 0.5, 1 / (1 + exp(-1.0))}},
        {weft_nn_gelu(), {-2 * 0.5 * erfc(2 / sqrt(2.0)), 0, 0.5 * (1 + erf(1 / sqrt(2.0)))}},
        {weft_nn_softmax(1), {exp(-2.0) / sum, 1 / sum, e / sum}},
        {weft_nn_log_softmax(-1), {-2 - log(sum), -log(sum), 1 - log(sum)}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        check_module(cases[i].m);
        tu_assert_close(weft_module_forward(cases[i].m, x), cases[i].expected, 3, 1e-6, 1e-6);
        weft_module_free(cases[i].m);
    }
    weft_scope_pop();
}

Test(nn_module, batch_norm_tracks_batches_in_training_and_uses_running_stats_in_eval)
{
    weft_module *bn = check_module(weft_nn_batch_norm1d(2, 1e-5, 0.1));
    weft_scope_push();
    weft_tensor *x = tu_tensor(2, (int64_t[]){2, 2}, (double[]){1, 10, 3, 20}, WEFT_F32);
    cr_assert_not_null(weft_module_forward(bn, x), "%s", weft_error_message());
    cr_assert_not_null(weft_module_forward(bn, x), "%s", weft_error_message());
    tu_assert_close(weft_module_buffer(bn, "num_batches_tracked"), (double[]){2}, 1, 0, 0);
    /* mean 2 and 15 twice with momentum 0.1: 0.19 * mean; unbiased var 2 and 50. */
    tu_assert_close(weft_module_buffer(bn, "running_mean"), (double[]){0.38, 2.85}, 2, 1e-5, 0);
    tu_assert_close(weft_module_buffer(bn, "running_var"),
                    (double[]){0.81 + 0.19 * 2, 0.81 + 0.19 * 50}, 2, 1e-5, 0);

    weft_module_train(bn, false);
    weft_tensor *y = weft_module_forward(bn, x);
    tu_assert_close(weft_module_buffer(bn, "num_batches_tracked"), (double[]){2}, 1, 0, 0);
    double mean[2] = {0.38, 2.85}, var[2] = {0.81 + 0.38, 0.81 + 9.5}, in[4] = {1, 10, 3, 20};
    double expected[4];
    for (int i = 0; i < 4; i++)
        expected[i] = (in[i] - mean[i % 2]) / sqrt(var[i % 2] + 1e-5);
    tu_assert_close(y, expected, 4, 1e-5, 1e-6);
    weft_scope_pop();
    weft_module_free(bn);
}

Test(nn_module, dropout_drops_only_in_training)
{
    weft_manual_seed(9);
    weft_module *m = check_module(weft_nn_dropout(0.5));
    weft_scope_push();
    weft_tensor *x = weft_ones(1, (int64_t[]){1000}, WEFT_F32, WEFT_CPU);
    double *v;
    int64_t n = read_all(weft_module_forward(m, x), &v);
    int zeros = 0;
    for (int64_t i = 0; i < n; i++) {
        cr_assert(v[i] == 0 || v[i] == 2, "element %lld is %g", (long long)i, v[i]);
        zeros += v[i] == 0;
    }
    cr_assert(zeros > 400 && zeros < 600, "%d zeros", zeros);
    free(v);
    weft_module_train(m, false);
    read_all(weft_module_forward(m, x), &v);
    for (int64_t i = 0; i < n; i++)
        cr_assert_eq(v[i], 1.0);
    free(v);
    weft_scope_pop();
    weft_module_free(m);
}

/* ---- initialisation ----------------------------------------------------------------- */

struct stats {
    double min, max, mean, std;
};

static struct stats stats_of(const weft_tensor *t)
{
    double *v;
    int64_t n = read_all(t, &v);
    struct stats s = {INFINITY, -INFINITY, 0, 0};
    for (int64_t i = 0; i < n; i++) {
        s.min = fmin(s.min, v[i]);
        s.max = fmax(s.max, v[i]);
        s.mean += v[i] / (double)n;
    }
    for (int64_t i = 0; i < n; i++)
        s.std += (v[i] - s.mean) * (v[i] - s.mean) / (double)(n - 1);
    s.std = sqrt(s.std);
    free(v);
    return s;
}

/* U(-b, b): inside the bounds, mean near 0, std near b / sqrt(3). */
static void assert_uniform(const weft_tensor *t, double bound, const char *what)
{
    struct stats s = stats_of(t);
    double n = (double)weft_tensor_numel(t);
    cr_assert(s.min >= -bound && s.max <= bound, "%s: [%g, %g] outside +-%g", what, s.min, s.max,
              bound);
    cr_assert(s.max > 0.9 * bound && s.min < -0.9 * bound, "%s does not fill +-%g", what, bound);
    cr_assert_lt(fabs(s.mean), 5 * bound / sqrt(3 * n), "%s: mean %g", what, s.mean);
    cr_assert_lt(fabs(s.std - bound / sqrt(3)), 0.05 * bound, "%s: std %g", what, s.std);
}

Test(nn_module, linear_draws_weight_and_bias_from_u_of_one_over_sqrt_fan_in)
{
    weft_manual_seed(0);
    weft_module *m = check_module(weft_nn_linear(784, 256, true));
    weft_tensor *w = weft_module_parameter(m, "weight"), *b = weft_module_parameter(m, "bias");
    tu_assert_shape(w, 2, (int64_t[]){256, 784});
    tu_assert_shape(b, 1, (int64_t[]){256});
    cr_assert_eq(w->dtype, WEFT_F32);
    cr_assert(weft_device_equal(w->device, WEFT_CPU));
    assert_uniform(w, 1 / sqrt(784.0), "Linear weight");
    struct stats s = stats_of(b);
    cr_assert(s.min >= -1 / sqrt(784.0) && s.max <= 1 / sqrt(784.0));
    weft_module_free(m);
}

Test(nn_module, conv2d_fan_in_is_channels_per_group_times_kernel_area)
{
    weft_manual_seed(1);
    weft_module *m = check_module(weft_nn_conv2d(
        &(struct weft_conv2d_options){8, 64, {3, 3}, {.groups = 2}, .bias = true}));
    weft_tensor *w = weft_module_parameter(m, "weight");
    tu_assert_shape(w, 4, (int64_t[]){64, 4, 3, 3});
    assert_uniform(w, 1 / sqrt(36.0), "Conv2d weight");
    struct stats s = stats_of(weft_module_parameter(m, "bias"));
    cr_assert(s.min >= -1 / 6.0 && s.max <= 1 / 6.0);
    weft_module_free(m);
}

Test(nn_module, embedding_is_standard_normal)
{
    weft_manual_seed(2);
    weft_module *m = check_module(weft_nn_embedding(1000, 64));
    struct stats s = stats_of(weft_module_parameter(m, "weight"));
    cr_assert_lt(fabs(s.mean), 0.01, "mean %g", s.mean);
    cr_assert_lt(fabs(s.std - 1), 0.01, "std %g", s.std);
    weft_module_free(m);
}

Test(nn_module, norms_start_at_identity_statistics)
{
    weft_module *bn = check_module(weft_nn_batch_norm2d(3, 1e-5, 0.1));
    tu_assert_close(weft_module_parameter(bn, "weight"), (double[]){1, 1, 1}, 3, 0, 0);
    tu_assert_close(weft_module_parameter(bn, "bias"), (double[]){0, 0, 0}, 3, 0, 0);
    tu_assert_close(weft_module_buffer(bn, "running_mean"), (double[]){0, 0, 0}, 3, 0, 0);
    tu_assert_close(weft_module_buffer(bn, "running_var"), (double[]){1, 1, 1}, 3, 0, 0);
    tu_assert_close(weft_module_buffer(bn, "num_batches_tracked"), (double[]){0}, 1, 0, 0);
    weft_module *ln = check_module(weft_nn_layer_norm(2, (int64_t[]){2, 2}, 1e-5, true));
    tu_assert_shape(weft_module_parameter(ln, "weight"), 2, (int64_t[]){2, 2});
    tu_assert_close(weft_module_parameter(ln, "weight"), (double[]){1, 1, 1, 1}, 4, 0, 0);
    tu_assert_close(weft_module_parameter(ln, "bias"), (double[]){0, 0, 0, 0}, 4, 0, 0);
    weft_module *plain = check_module(weft_nn_layer_norm(1, (int64_t[]){4}, 1e-5, false));
    cr_assert_eq(weft_module_num_parameters(plain), 0);
    weft_module_free(bn);
    weft_module_free(ln);
    weft_module_free(plain);
}

Test(nn_module, the_same_seed_builds_the_same_model)
{
    weft_manual_seed(42);
    weft_module *a = small_model();
    weft_manual_seed(42);
    weft_module *b = small_model();
    weft_module *c = small_model();
    struct weft_named_tensor *pa, *pb, *pc;
    int n = weft_module_named_parameters(a, &pa);
    cr_assert_eq(weft_module_named_parameters(b, &pb), n);
    cr_assert_eq(weft_module_named_parameters(c, &pc), n);
    double *va, *vb, *vc;
    int64_t k = read_all(pa[0].tensor, &va);
    read_all(pb[0].tensor, &vb);
    read_all(pc[0].tensor, &vc);
    cr_assert_eq(memcmp(va, vb, (size_t)k * sizeof *va), 0, "same seed, different weights");
    cr_assert_neq(memcmp(va, vc, (size_t)k * sizeof *va), 0, "the stream did not advance");
    free(va), free(vb), free(vc);
    free(pa), free(pb), free(pc);
    weft_module_free(a), weft_module_free(b), weft_module_free(c);
}

/* ---- state dicts ------------------------------------------------------------------------ */

/* A module with a parameter, a buffer and a child, to show PyTorch's order. */
static weft_module *module_with_all_kinds(void)
{
    weft_module *m = check_module(weft_nn_sequential(0, NULL));
    weft_scope_push();
    cr_assert_eq(weft_module_add_child(m, "fc", weft_nn_linear(2, 2, true)), 0);
    weft_tensor *one = weft_ones(0, NULL, WEFT_F32, WEFT_CPU);
    cr_assert_eq(weft_module_register_buffer(m, "scale", one), 0);
    cr_assert_eq(weft_module_register_parameter(m, "gain", weft_ones(1, (int64_t[]){2}, WEFT_F32,
                                                                     WEFT_CPU)), 0);
    weft_scope_pop();
    return m;
}

Test(nn_module, state_dict_lists_parameters_then_buffers_then_children)
{
    weft_module *m = module_with_all_kinds();
    struct weft_tensor_dict *d = weft_module_state_dict(m);
    cr_assert_not_null(d, "%s", weft_error_message());
    const char *expected[] = {"gain", "scale", "fc.weight", "fc.bias"};
    cr_assert_eq(weft_tensor_dict_len(d), 4);
    for (size_t i = 0; i < 4; i++)
        cr_assert_str_eq(weft_tensor_dict_name(d, i), expected[i]);
    weft_tensor_dict_free(d);

    weft_module *s = small_model();
    d = weft_module_state_dict(s);
    const char *seq[] = {"0.weight", "0.bias", "2.weight", "2.bias", "3.weight", "3.bias",
                         "3.running_mean", "3.running_var", "3.num_batches_tracked"};
    cr_assert_eq(weft_tensor_dict_len(d), 9);
    for (size_t i = 0; i < 9; i++)
        cr_assert_str_eq(weft_tensor_dict_name(d, i), seq[i]);
    weft_tensor_dict_free(d);
    weft_module_free(m);
    weft_module_free(s);
}

Test(nn_module, state_dict_values_are_detached_aliases_of_the_module_tensors)
{
    weft_module *m = check_module(weft_nn_linear(2, 2, true));
    struct weft_tensor_dict *d = weft_module_state_dict(m);
    weft_scope_push();
    weft_tensor *w = weft_tensor_dict_get(d, "weight");
    weft_tensor *param = weft_module_parameter(m, "weight");
    cr_assert_neq(w, param);
    cr_assert_not(weft_requires_grad(w));
    cr_assert_eq(weft_tensor_data(w), weft_tensor_data(param), "not the same storage");
    weft_scope_pop();
    weft_tensor_dict_free(d);
    weft_module_free(m);
}

static char tmp_path[64];

static const char *temp_file(void)
{
    strcpy(tmp_path, "/tmp/weft-nn-XXXXXX");
    int fd = mkstemp(tmp_path);
    cr_assert_geq(fd, 0);
    close(fd);
    return tmp_path;
}

Test(nn_module, a_state_dict_saved_as_safetensors_rebuilds_the_model)
{
    weft_manual_seed(3);
    weft_module *a = small_model();
    weft_module_train(a, false);
    /* Non-default statistics, so the buffers are really carried over. */
    weft_scope_push();
    weft_copy_(weft_module_buffer(weft_module_child(a, "3"), "running_mean"),
               tu_tensor(1, (int64_t[]){2}, (double[]){0.5, -0.25}, WEFT_F32));
    weft_copy_(weft_module_buffer(weft_module_child(a, "3"), "num_batches_tracked"),
               tu_tensor(0, NULL, (double[]){7}, WEFT_I64));
    weft_scope_pop();

    const char *path = temp_file();
    struct weft_tensor_dict *d = weft_module_state_dict(a);
    cr_assert_eq(weft_safetensors_save(path, d, NULL), 0, "%s", weft_error_message());
    weft_tensor_dict_free(d);

    weft_manual_seed(4);
    weft_module *b = small_model();
    weft_module_train(b, false);
    struct weft_tensor_dict *loaded;
    cr_assert_eq(weft_safetensors_load(path, WEFT_CPU, &loaded, NULL), 0, "%s",
                 weft_error_message());
    unlink(path);
    cr_assert_eq(weft_module_load_state_dict(b, loaded, true), 0, "%s", weft_error_message());
    weft_tensor_dict_free(loaded);

    weft_scope_push();
    weft_tensor *x = random_input(2, (int64_t[]){5, 4}, 11);
    weft_tensor *ya = weft_module_forward(a, x), *yb = weft_module_forward(b, x);
    cr_assert_not_null(ya, "%s", weft_error_message());
    cr_assert_not_null(yb, "%s", weft_error_message());
    double *va, *vb;
    int64_t n = read_all(ya, &va);
    read_all(yb, &vb);
    cr_assert_eq(memcmp(va, vb, (size_t)n * sizeof *va), 0, "outputs differ");
    weft_tensor *tracked = weft_module_buffer(weft_module_child(b, "3"), "num_batches_tracked");
    tu_assert_close(tracked, (double[]){7}, 1, 0, 0);
    cr_assert_eq(tracked->dtype, WEFT_I64);
    free(va), free(vb);
    weft_scope_pop();
    weft_module_free(a);
    weft_module_free(b);
}

/* Sequential(Linear(4, 4)). */
static weft_module *one_linear(void)
{
    return check_module(weft_nn_sequential(1, (weft_module *[]){weft_nn_linear(4, 4, true)}));
}

/* The state dict of m with `drop` left out and (name, value) entries added. */
static struct weft_tensor_dict *edited_state(const weft_module *m, const char *drop,
                                             const char *add, weft_tensor *value)
{
    struct weft_tensor_dict *src = weft_module_state_dict(m), *d = weft_tensor_dict_new();
    weft_scope_push();
    for (size_t i = 0; i < weft_tensor_dict_len(src); i++) {
        const char *name = weft_tensor_dict_name(src, i);
        if (!drop || strcmp(name, drop) != 0)
            weft_tensor_dict_add(d, name, weft_tensor_dict_at(src, i));
    }
    if (add)
        weft_tensor_dict_add(d, add, value);
    weft_scope_pop();
    weft_tensor_dict_free(src);
    return d;
}

Test(nn_module, missing_and_unexpected_keys_are_reported_together_as_torch_does)
{
    weft_module *m = one_linear();
    weft_scope_push();
    weft_tensor *extra = weft_zeros(1, (int64_t[]){1}, WEFT_F32, WEFT_CPU);
    struct weft_tensor_dict *d = edited_state(m, "0.bias", "extra", extra);
    cr_assert_lt(weft_module_load_state_dict(m, d, true), 0);
    assert_error_text(WEFT_ERR_RUNTIME, "Error(s) in loading state_dict for Sequential:\n"
                                        "\tMissing key(s) in state_dict: \"0.bias\". \n"
                                        "\tUnexpected key(s) in state_dict: \"extra\". ");
    /* Not strict: the same dict loads. */
    cr_assert_eq(weft_module_load_state_dict(m, d, false), 0, "%s", weft_error_message());
    weft_tensor_dict_free(d);

    /* Keys under a child that the child does not have are the child's unexpected keys. */
    d = edited_state(m, NULL, "0.running_mean", weft_zeros(1, (int64_t[]){4}, WEFT_F32, WEFT_CPU));
    weft_tensor_dict_add(d, "1.weight", weft_zeros(1, (int64_t[]){4}, WEFT_F32, WEFT_CPU));
    cr_assert_lt(weft_module_load_state_dict(m, d, true), 0);
    assert_error_text(WEFT_ERR_RUNTIME, "Error(s) in loading state_dict for Sequential:\n"
                                        "\tUnexpected key(s) in state_dict: \"1.weight\", "
                                        "\"0.running_mean\". ");
    weft_tensor_dict_free(d);
    weft_scope_pop();
    weft_module_free(m);
}

Test(nn_module, a_shape_mismatch_is_an_error_even_when_not_strict_and_nothing_is_copied)
{
    weft_module *m = one_linear();
    weft_scope_push();
    weft_tensor *before = weft_clone(weft_module_parameter(weft_module_child(m, "0"), "bias"));
    struct weft_tensor_dict *d = weft_tensor_dict_new();
    weft_tensor_dict_add(d, "0.weight", weft_zeros(2, (int64_t[]){3, 4}, WEFT_F32, WEFT_CPU));
    weft_tensor_dict_add(d, "0.bias", weft_full(1, (int64_t[]){4}, 9.0, WEFT_F32, WEFT_CPU));
    for (int strict = 0; strict < 2; strict++) {
        cr_assert_lt(weft_module_load_state_dict(m, d, strict), 0);
        assert_error_text(WEFT_ERR_RUNTIME,
                          "Error(s) in loading state_dict for Sequential:\n"
                          "\tsize mismatch for 0.weight: copying a param with shape "
                          "torch.Size([3, 4]) from checkpoint, the shape in current model is "
                          "torch.Size([4, 4]).");
    }
    double *b0, *b1;
    read_all(before, &b0);
    read_all(weft_module_parameter(weft_module_child(m, "0"), "bias"), &b1);
    cr_assert_eq(memcmp(b0, b1, 4 * sizeof *b0), 0, "the bias was copied despite the error");
    free(b0), free(b1);

    /* Missing keys come first, then unexpected ones, then the mismatches. */
    weft_tensor_dict_free(d);
    d = weft_tensor_dict_new();
    weft_tensor_dict_add(d, "0.weight", weft_zeros(0, NULL, WEFT_F32, WEFT_CPU));
    weft_tensor_dict_add(d, "x", weft_zeros(0, NULL, WEFT_F32, WEFT_CPU));
    cr_assert_lt(weft_module_load_state_dict(m, d, true), 0);
    assert_error_text(WEFT_ERR_RUNTIME,
                      "Error(s) in loading state_dict for Sequential:\n"
                      "\tMissing key(s) in state_dict: \"0.bias\". \n"
                      "\tUnexpected key(s) in state_dict: \"x\". \n"
                      "\tsize mismatch for 0.weight: copying a param with shape torch.Size([]) "
                      "from checkpoint, the shape in current model is torch.Size([4, 4]).");
    weft_tensor_dict_free(d);
    weft_scope_pop();
    weft_module_free(m);
}

Test(nn_module, loading_converts_dtypes_as_copy_does_and_keeps_the_tensors)
{
    weft_module *m = check_module(weft_nn_linear(2, 1, true));
    weft_tensor *w = weft_module_parameter(m, "weight");
    weft_scope_push();
    struct weft_tensor_dict *d = weft_tensor_dict_new();
    weft_tensor *w64 = tu_tensor(2, (int64_t[]){1, 2}, (double[]){0.5, -2}, WEFT_F64);
    weft_tensor_dict_add(d, "weight", w64);
    weft_tensor_dict_add(d, "bias", tu_tensor(1, (int64_t[]){1}, (double[]){3}, WEFT_I64));
    cr_assert_eq(weft_module_load_state_dict(m, d, true), 0, "%s", weft_error_message());
    cr_assert_eq(weft_module_parameter(m, "weight"), w);
    cr_assert_eq(w->dtype, WEFT_F32);
    cr_assert(weft_requires_grad(w) && weft_is_leaf(w));
    tu_assert_close(w, (double[]){0.5, -2}, 2, 0, 0);
    tu_assert_close(weft_module_parameter(m, "bias"), (double[]){3}, 1, 0, 0);
    weft_tensor_dict_free(d);
    weft_scope_pop();
    weft_module_free(m);
}

/* ---- conversion in place ------------------------------------------------------------- */

Test(nn_module, to_converts_floating_tensors_in_place_keeping_their_identity)
{
    weft_module *m = small_model();
    struct weft_named_tensor *p, *b;
    int np = weft_module_named_parameters(m, &p), nb = weft_module_named_buffers(m, &b);
    weft_tensor *held = weft_tensor_retain(p[0].tensor); /* as an optimizer would */
    double *before;
    int64_t n = read_all(held, &before);

    cr_assert_eq(weft_module_to(m, WEFT_CPU, WEFT_F64), 0, "%s", weft_error_message());
    struct weft_named_tensor *p2;
    cr_assert_eq(weft_module_named_parameters(m, &p2), np);
    for (int i = 0; i < np; i++) {
        cr_assert_eq(p2[i].tensor, p[i].tensor, "%s changed identity", p[i].name);
        cr_assert_eq(p[i].tensor->dtype, WEFT_F64, "%s", p[i].name);
        cr_assert(weft_requires_grad(p[i].tensor) && weft_is_leaf(p[i].tensor));
    }
    for (int i = 0; i < nb; i++)
        cr_assert_eq(b[i].tensor->dtype, i == 2 ? WEFT_I64 : WEFT_F64, "%s", b[i].name);
    cr_assert_eq(held->dtype, WEFT_F64);
    tu_assert_close(held, before, n, 1e-7, 0);

    /* The converted model runs in float64. */
    weft_module_train(m, false);
    weft_scope_push();
    weft_tensor *x = weft_to_dtype(random_input(2, (int64_t[]){3, 4}, 5), WEFT_F64);
    weft_tensor *y = weft_module_forward(m, x);
    cr_assert_not_null(y, "%s", weft_error_message());
    cr_assert_eq(y->dtype, WEFT_F64);
    weft_scope_pop();

    weft_tensor_release(held);
    free(before), free(p), free(p2), free(b);
    weft_module_free(m);
}

Test(nn_module, to_converts_existing_grads_too_and_refuses_integer_dtypes)
{
    weft_module *m = check_module(weft_nn_linear(2, 2, false));
    weft_tensor *w = weft_module_parameter(m, "weight");
    weft_scope_push();
    cr_assert_eq(weft_set_grad(w, weft_ones_like(w)), 0);
    weft_scope_pop();
    cr_assert_eq(weft_module_to(m, WEFT_CPU, WEFT_F64), 0, "%s", weft_error_message());
    weft_scope_push();
    weft_tensor *g = weft_grad(w);
    cr_assert_eq(g->dtype, WEFT_F64);
    tu_assert_close(g, (double[]){1, 1, 1, 1}, 4, 0, 0);
    weft_scope_pop();

    cr_assert_lt(weft_module_to(m, WEFT_CPU, WEFT_I64), 0);
    assert_error_text(WEFT_ERR_TYPE, "nn.Module.to only accepts floating point or complex dtypes, "
                                     "but got desired dtype=torch.int64");
    cr_assert_eq(w->dtype, WEFT_F64);
    weft_module_free(m);
}

/* ---- training ------------------------------------------------------------------------- */

Test(nn_module, an_mlp_learns_with_hand_written_sgd)
{
    weft_manual_seed(7);
    weft_module *layers[] = {weft_nn_flatten(1, -1), weft_nn_linear(784, 32, true), weft_nn_relu(),
                             weft_nn_linear(32, 10, true)};
    weft_module *m = check_module(weft_nn_sequential(4, layers));
    weft_tensor *x = random_input(3, (int64_t[]){64, 28, 28}, 99);
    weft_tensor *target = weft_randint(0, 10, 1, (int64_t[]){64}, WEFT_I64, WEFT_CPU);
    cr_assert_not_null(target);
    struct weft_named_tensor *params;
    int np = weft_module_named_parameters(m, &params);
    cr_assert_eq(np, 4);

    double losses[20];
    for (int step = 0; step < 20; step++) {
        weft_scope_push();
        weft_tensor *loss = weft_cross_entropy(weft_module_forward(m, x), target, NULL);
        cr_assert_not_null(loss, "step %d: %s", step, weft_error_message());
        cr_assert_eq(weft_tensor_item(loss, &losses[step]), 0);
        cr_assert_eq(weft_backward(loss, NULL, false), 0, "%s", weft_error_message());
        bool prev = weft_no_grad_begin();
        for (int i = 0; i < np; i++) {
            weft_tensor *g = weft_grad(params[i].tensor);
            cr_assert_not_null(g, "no grad for %s", params[i].name);
            cr_assert_not_null(weft_sub_(params[i].tensor, weft_mul_scalar(g, 0.1)), "%s",
                               weft_error_message());
            cr_assert_eq(weft_zero_grad(params[i].tensor, true), 0);
        }
        weft_grad_mode_restore(prev);
        weft_scope_pop();
    }
    cr_assert(isfinite(losses[19]));
    cr_assert_lt(losses[19], 0.75 * losses[0], "loss %g -> %g", losses[0], losses[19]);
    int rises = 0;
    for (int i = 1; i < 20; i++)
        rises += losses[i] > losses[i - 1];
    cr_assert_leq(rises, 2, "the loss rose %d times", rises);
    free(params);
    weft_tensor_release(x);
    weft_tensor_release(target);
    weft_module_free(m);
}

/* ---- devices ------------------------------------------------------------------------ */

Test(nn_module, to_moves_a_model_to_cuda_and_back_when_a_gpu_is_present)
{
    if (weft_plugin_load("cuda") != 0) {
        char why[256];
        snprintf(why, sizeof why, "%s", weft_error_message());
        weft_error_clear();
        cr_skip_test("%s", why);
    }
    weft_manual_seed(8);
    weft_module *layers[] = {weft_nn_linear(4, 8, true), weft_nn_relu(),
                             weft_nn_linear(8, 2, true)};
    weft_module *m = check_module(weft_nn_sequential(3, layers));
    weft_tensor *w = weft_module_parameter(weft_module_child(m, "0"), "weight");
    weft_scope_push();
    weft_tensor *x = random_input(2, (int64_t[]){5, 4}, 3);
    double *expected;
    int64_t n = read_all(weft_module_forward(m, x), &expected);

    cr_assert_eq(weft_module_to(m, tu_cuda(0), WEFT_F32), 0, "%s", weft_error_message());
    cr_assert_eq(weft_module_parameter(weft_module_child(m, "0"), "weight"), w);
    cr_assert(weft_device_equal(w->device, tu_cuda(0)));
    cr_assert(weft_requires_grad(w) && weft_is_leaf(w));
    weft_tensor *y = weft_module_forward(m, weft_to_device(x, tu_cuda(0)));
    cr_assert_not_null(y, "%s", weft_error_message());
    cr_assert(weft_device_equal(y->device, tu_cuda(0)));
    tu_assert_close(y, expected, n, 1e-5, 1e-6);

    cr_assert_eq(weft_module_to(m, WEFT_CPU, WEFT_F32), 0, "%s", weft_error_message());
    cr_assert(weft_device_equal(w->device, WEFT_CPU));
    tu_assert_close(weft_module_forward(m, x), expected, n, 1e-6, 0);
    free(expected);
    weft_scope_pop();
    weft_module_free(m);
}

/* Sequential runs a Linear with a bias and the ReLU after it as one fused layer (one
 * node), with the values of the two run apart; other pairs run module by module. */
Test(nn_module, sequential_fuses_a_linear_and_its_relu)
{
    weft_module *fused[] = {weft_nn_linear(6, 4, true), weft_nn_relu()};
    weft_module *seq = weft_nn_sequential(2, fused);
    cr_assert_not_null(seq, "%s", weft_error_message());
    weft_tensor *x = weft_randn(2, (const int64_t[]){3, 6}, WEFT_F32, WEFT_CPU);
    weft_tensor *y = weft_module_forward(seq, x);
    cr_assert_not_null(y, "%s", weft_error_message());
    /* one node, named as PyTorch's relu(linear(x)) output is, over x, w and b */
    cr_expect_str_eq(weft_grad_fn_name(y), "ReluBackward0");
    cr_expect_eq(weft_grad_fn_next_functions(y, 0, NULL), 3);
    weft_module *lin = weft_module_child(seq, "0"), *relu = weft_module_child(seq, "1");
    weft_tensor *h = weft_module_forward(lin, x);
    weft_tensor *apart = weft_module_forward(relu, h);
    double v[12];
    tu_read(apart, v);
    tu_assert_close(y, v, 12, 0, 0);
    weft_tensor_release(h);
    weft_tensor_release(apart);
    weft_tensor_release(y);
    weft_module_free(seq);
    weft_module *plain[] = {weft_nn_linear(6, 4, false), weft_nn_relu()};
    seq = weft_nn_sequential(2, plain);
    y = weft_module_forward(seq, x);
    cr_expect_str_eq(weft_grad_fn_name(y), "ReluBackward0");
    weft_tensor_release(y);
    weft_module_free(seq);
    weft_tensor_release(x);
}

/* register_module_forward_hook: every module's forward, the container's after its
 * children's, with their outputs; removed, it is called no more. */
struct hook_log {
    const weft_module *m[8];
    int64_t last_dim[8];
    int n;
};

static void log_forward(void *ctx, weft_module *m, weft_tensor *input, weft_tensor *output)
{
    struct hook_log *l = ctx;
    cr_assert_not_null(input);
    if (l->n < 8 && output) {
        l->m[l->n] = m;
        l->last_dim[l->n++] = output->shape[output->ndim - 1];
    }
}

Test(nn_module, a_global_forward_hook_sees_every_module_with_its_output)
{
    weft_module *fc1 = weft_nn_linear(4, 3, true), *act = weft_nn_relu(),
                *fc2 = weft_nn_linear(3, 2, true);
    weft_module *seq = weft_nn_sequential(3, (weft_module *const[]){fc1, act, fc2});
    struct hook_log log = {.n = 0};
    int h = weft_register_module_forward_hook(log_forward, &log);
    cr_assert_gt(h, 0, "%s", weft_error_message());
    weft_scope_push();
    weft_tensor *x = weft_zeros(2, (int64_t[]){5, 4}, WEFT_F32, WEFT_CPU);
    cr_assert_not_null(weft_module_forward(seq, x), "%s", weft_error_message());
    cr_assert_eq(log.n, 4, "fc1, relu, fc2, then the Sequential: %d calls", log.n);
    const weft_module *order[4] = {fc1, act, fc2, seq};
    const int64_t dims[4] = {3, 3, 2, 2};
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(log.m[i], order[i], "call %d", i);
        cr_assert_eq(log.last_dim[i], dims[i], "call %d", i);
    }
    weft_remove_module_forward_hook(h);
    weft_remove_module_forward_hook(h); /* twice: ignored */
    cr_assert_not_null(weft_module_forward(seq, x));
    cr_assert_eq(log.n, 4, "a removed hook was called");
    weft_scope_pop();
    cr_assert_lt(weft_register_module_forward_hook(NULL, NULL), 0);
    weft_error_clear();
    weft_module_free(seq);
}
