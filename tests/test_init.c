/* tests/test_init.c: torch.nn.init (weft/init.h) against PyTorch's formulas, and the INI
 * keys that use it ([layer.*] init, bias_init, requires_grad; [train] freeze).
 *
 * The random schemes are checked on large tensors from a fixed seed: every value inside
 * the uniform bound and the extremes near it, the sample standard deviation within 2% of
 * the formula's (on 2^17 values its own spread is about 0.2%), the mean within 5 standard
 * errors of 0. Constants are exact. The formulas (torch/nn/init.py, 1.13): fan_in =
 * size(1) * receptive field, fan_out = size(0) * receptive field; kaiming: std = gain /
 * sqrt(fan); xavier: std = gain * sqrt(2 / (fan_in + fan_out)); uniform bound sqrt(3) std. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include <weft/graph.h>
#include <weft/init.h>
#include <weft/model.h>
#include <weft/rnn.h>

TestSuite(init, .init = tu_setup, .fini = tu_teardown);

struct stats {
    double mean, std, absmax;
};

static struct stats stats_of(const weft_tensor *t)
{
    int64_t n = weft_tensor_numel(t);
    double *v = malloc((size_t)n * sizeof *v);
    cr_assert_not_null(v);
    tu_read(t, v);
    struct stats s = {0};
    for (int64_t i = 0; i < n; i++) {
        s.mean += v[i];
        s.absmax = fabs(v[i]) > s.absmax ? fabs(v[i]) : s.absmax;
    }
    s.mean /= (double)n;
    for (int64_t i = 0; i < n; i++)
        s.std += (v[i] - s.mean) * (v[i] - s.mean);
    s.std = sqrt(s.std / (double)(n - 1));
    free(v);
    return s;
}

/* A parameter-like tensor: a float32 leaf that requires grad, as a layer's weight. */
static weft_tensor *param(int ndim, const int64_t *shape)
{
    weft_tensor *t = weft_zeros(ndim, shape, WEFT_F32, WEFT_CPU);
    cr_assert_not_null(t);
    cr_assert_eq(weft_requires_grad_(t, true), 0);
    return t;
}

static void assert_uniform(const weft_tensor *t, double bound)
{
    struct stats s = stats_of(t);
    double n = (double)weft_tensor_numel(t), std = bound / sqrt(3.0);
    cr_assert_leq(s.absmax, bound * (1 + 1e-6), "a value %g outside [-%g, %g]", s.absmax, bound,
                  bound);
    cr_assert_geq(s.absmax, 0.999 * bound, "the largest |value| %g, expected near %g", s.absmax,
                  bound);
    cr_assert_leq(fabs(s.std / std - 1), 0.02, "std %g, expected %g", s.std, std);
    cr_assert_leq(fabs(s.mean), 5 * std / sqrt(n), "mean %g", s.mean);
}

static void assert_normal(const weft_tensor *t, double mean, double std)
{
    struct stats s = stats_of(t);
    double n = (double)weft_tensor_numel(t);
    cr_assert_leq(fabs(s.std / std - 1), 0.02, "std %g, expected %g", s.std, std);
    cr_assert_leq(fabs(s.mean - mean), 5 * std / sqrt(n), "mean %g, expected %g", s.mean, mean);
}

Test(init, calculate_gain_is_pytorchs_table)
{
    double g;
    struct {
        const char *nl;
        double param, want;
    } cases[] = {
        {"linear", NAN, 1},  {"conv2d", NAN, 1},     {"conv_transpose3d", NAN, 1},
        {"sigmoid", NAN, 1}, {"tanh", NAN, 5.0 / 3}, {"relu", NAN, sqrt(2.0)},
        {"selu", NAN, 0.75}, {"leaky_relu", NAN, sqrt(2.0 / (1 + 0.01 * 0.01))},
        {"leaky_relu", 0.2, sqrt(2.0 / 1.04)}, {"leaky_relu", 0, sqrt(2.0)},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        cr_assert_eq(weft_nn_init_calculate_gain(cases[i].nl, cases[i].param, &g), 0);
        cr_assert_float_eq(g, cases[i].want, 1e-15, "%s: %g", cases[i].nl, g);
    }
    cr_assert_lt(weft_nn_init_calculate_gain("swish", NAN, &g), 0);
    tu_assert_error(WEFT_ERR_VALUE, "Unsupported nonlinearity swish");
}

Test(init, fans_are_size1_and_size0_times_the_receptive_field)
{
    weft_scope_push();
    int64_t fi, fo;
    cr_assert_eq(weft_nn_init_fans(param(4, (int64_t[]){64, 32, 3, 5}), &fi, &fo), 0);
    cr_assert_eq(fi, 32 * 15);
    cr_assert_eq(fo, 64 * 15);
    cr_assert_eq(weft_nn_init_fans(param(2, (int64_t[]){10, 7}), &fi, &fo), 0);
    cr_assert(fi == 7 && fo == 10);
    cr_assert_lt(weft_nn_init_fans(param(1, (int64_t[]){10}), &fi, &fo), 0);
    tu_assert_error(WEFT_ERR_VALUE, "Fan in and fan out can not be computed for tensor with "
                                    "fewer than 2 dimensions");
    weft_scope_pop();
}

Test(init, kaiming_uniform_defaults_are_leaky_relu_a0_fan_in)
{
    weft_scope_push();
    weft_manual_seed(1);
    weft_tensor *w = param(4, (int64_t[]){128, 64, 4, 4}); /* fan_in 1024, fan_out 2048 */
    cr_assert_eq(weft_nn_init_kaiming_uniform_(w, 0, NULL, NULL), 0, "%s", weft_error_message());
    assert_uniform(w, sqrt(3.0) * sqrt(2.0) / sqrt(1024.0));
    cr_assert(weft_is_leaf(w) && weft_requires_grad(w), "still a parameter");
    /* a = sqrt(5) with fan_in: the bound of nn.Linear's and nn.Conv2d's own weights */
    cr_assert_eq(weft_nn_init_kaiming_uniform_(w, sqrt(5.0), "fan_in", "leaky_relu"), 0);
    assert_uniform(w, 1.0 / sqrt(1024.0));
    weft_scope_pop();
}

Test(init, kaiming_normal_fan_out_relu_has_std_sqrt2_over_sqrt_fan_out)
{
    weft_scope_push();
    weft_manual_seed(2);
    weft_tensor *w = param(4, (int64_t[]){128, 64, 4, 4});
    cr_assert_eq(weft_nn_init_kaiming_normal_(w, 0, "fan_out", "relu"), 0);
    assert_normal(w, 0, sqrt(2.0) / sqrt(2048.0));
    cr_assert_eq(weft_nn_init_kaiming_normal_(w, 0, "FAN_IN", "tanh"), 0, "mode's case is free");
    assert_normal(w, 0, 5.0 / 3 / sqrt(1024.0));
    cr_assert_lt(weft_nn_init_kaiming_normal_(w, 0, "fan_avg", "relu"), 0);
    tu_assert_error(WEFT_ERR_VALUE,
                    "Mode fan_avg not supported, please use one of ['fan_in', 'fan_out']");
    cr_assert_lt(weft_nn_init_kaiming_normal_(param(1, (int64_t[]){8}), 0, NULL, NULL), 0);
    tu_assert_error(WEFT_ERR_VALUE, "Fan in and fan out can not be computed");
    weft_scope_pop();
}

Test(init, xavier_uses_fan_in_plus_fan_out_and_the_gain)
{
    weft_scope_push();
    weft_manual_seed(3);
    weft_tensor *w = param(2, (int64_t[]){256, 512});
    cr_assert_eq(weft_nn_init_xavier_uniform_(w, 1.0), 0);
    assert_uniform(w, sqrt(6.0 / 768.0));
    cr_assert_eq(weft_nn_init_xavier_uniform_(w, 2.5), 0);
    assert_uniform(w, 2.5 * sqrt(6.0 / 768.0));
    cr_assert_eq(weft_nn_init_xavier_normal_(w, 1.5), 0);
    assert_normal(w, 0, 1.5 * sqrt(2.0 / 768.0));
    weft_scope_pop();
}

Test(init, normal_zeros_and_ones)
{
    weft_scope_push();
    weft_manual_seed(4);
    weft_tensor *w = param(2, (int64_t[]){256, 512});
    cr_assert_eq(weft_nn_init_normal_(w, 0.5, 0.02), 0);
    assert_normal(w, 0.5, 0.02);
    cr_assert_eq(weft_nn_init_uniform_(w, -0.25, 0.75), 0);
    struct stats s = stats_of(w);
    cr_assert_float_eq(s.mean, 0.25, 5 * 0.2887 / sqrt(131072.0));
    cr_assert_eq(weft_nn_init_zeros_(w), 0);
    s = stats_of(w);
    cr_assert(s.absmax == 0 && s.mean == 0, "zeros_ is exact");
    cr_assert_eq(weft_nn_init_ones_(w), 0);
    s = stats_of(w);
    cr_assert(s.absmax == 1 && s.mean == 1 && s.std == 0, "ones_ is exact");
    weft_scope_pop();
}

Test(init, the_same_seed_draws_the_same_values)
{
    weft_scope_push();
    weft_tensor *a = param(2, (int64_t[]){16, 8}), *b = param(2, (int64_t[]){16, 8});
    weft_manual_seed(7);
    cr_assert_eq(weft_nn_init_kaiming_normal_(a, 0, NULL, NULL), 0);
    weft_manual_seed(7);
    cr_assert_eq(weft_nn_init_kaiming_normal_(b, 0, NULL, NULL), 0);
    double va[128], vb[128];
    tu_read(a, va);
    tu_read(b, vb);
    cr_assert_arr_eq(va, vb, sizeof va);
    weft_scope_pop();
}

Test(init, a_tensor_without_elements_is_left_alone)
{
    weft_scope_push();
    cr_assert_eq(weft_nn_init_kaiming_uniform_(param(2, (int64_t[]){0, 4}), 0, NULL, NULL), 0);
    weft_scope_pop();
}

/* ---- the INI keys ------------------------------------------------------------------- */

static weft_module *model_of(const char *ini)
{
    struct weft_config *cfg = weft_config_parse(ini, "init.ini");
    cr_assert_not_null(cfg, "%s", weft_error_message());
    weft_module *m = weft_model_from_config(cfg);
    cr_assert_not_null(m, "%s", weft_error_message());
    cr_assert_eq(weft_config_check_unknown(cfg), 0, "%s", weft_error_message());
    weft_config_free(cfg);
    return m;
}

static void model_fails(const char *ini, const char *text)
{
    struct weft_config *cfg = weft_config_parse(ini, "init.ini");
    cr_assert_not_null(cfg, "%s", weft_error_message());
    weft_module *m = weft_model_from_config(cfg);
    cr_assert_null(m, "expected an error containing: %s", text);
    tu_assert_error(WEFT_ERR_CONFIG, text);
    weft_config_free(cfg);
}

#define WIDE "[layer.fc]\ntype = linear\nin_features = 512\nout_features = 256\n"

Test(init, an_init_key_fills_the_layers_weight_and_bias_init_its_bias)
{
    weft_manual_seed(5);
    weft_module *m = model_of(WIDE "init = xavier_uniform\ninit_gain = 2\nbias_init = zeros\n");
    weft_tensor *w = weft_module_parameter(weft_module_child(m, "0"), "weight");
    assert_uniform(w, 2 * sqrt(6.0 / 768.0));
    struct stats b = stats_of(weft_module_parameter(weft_module_child(m, "0"), "bias"));
    cr_assert(b.absmax == 0, "bias_init = zeros");
    weft_module_free(m);

    m = model_of(WIDE "init = kaiming_normal\ninit_mode = fan_out\ninit_nonlinearity = relu\n");
    assert_normal(weft_module_parameter(weft_module_child(m, "0"), "weight"), 0,
                  sqrt(2.0 / 256.0));
    weft_module_free(m);
    m = model_of(WIDE "init = normal\ninit_std = 0.02\n");
    assert_normal(weft_module_parameter(weft_module_child(m, "0"), "weight"), 0, 0.02);
    weft_module_free(m);
}

Test(init, without_init_keys_a_layer_keeps_pytorchs_default)
{
    weft_manual_seed(6);
    weft_module *a = model_of(WIDE);
    weft_manual_seed(6);
    weft_module *b = model_of(WIDE "init = default\nbias_init = default\n");
    weft_tensor *wa = weft_module_parameter(weft_module_child(a, "0"), "weight");
    assert_uniform(wa, 1 / sqrt(512.0)); /* nn.Linear: kaiming_uniform_(a=sqrt(5)) */
    int64_t n = weft_tensor_numel(wa);
    double *va = malloc((size_t)n * sizeof *va), *vb = malloc((size_t)n * sizeof *vb);
    tu_read(wa, va);
    tu_read(weft_module_parameter(weft_module_child(b, "0"), "weight"), vb);
    cr_assert_arr_eq(va, vb, (size_t)n * sizeof *va);
    free(va);
    free(vb);
    weft_module_free(a);
    weft_module_free(b);
}

Test(init, an_lstms_weights_are_every_weight_parameter)
{
    weft_module *m = model_of("[layer.lstm]\ntype = lstm\ninput_size = 4\nhidden_size = 8\n"
                              "num_layers = 2\ninit = zeros\nbias_init = zeros\n");
    struct weft_named_tensor *p = NULL;
    int n = weft_module_named_parameters(m, &p);
    cr_assert_eq(n, 8);
    for (int i = 0; i < n; i++)
        cr_assert(stats_of(p[i].tensor).absmax == 0, "%s was not zeroed", p[i].name);
    free(p);
    weft_module_free(m);
}

Test(init, bad_init_keys_name_the_section_and_key)
{
    model_fails(WIDE "init = kaiming_normal\ninit_std = 0.1\n",
                "init.ini: [layer.fc] init_std is for init = normal (torch.nn.init's 'std'), "
                "not init = kaiming_normal");
    model_fails(WIDE "init = he_normal\n", "[layer.fc] init");
    model_fails(WIDE "init = kaiming_uniform\ninit_mode = fan_avg\n",
                "Mode fan_avg not supported, please use one of ['fan_in', 'fan_out'] (weight, of "
                "shape [256, 512])");
    model_fails(WIDE "init = kaiming_uniform\ninit_nonlinearity = swish\n",
                "Unsupported nonlinearity swish");
    model_fails(WIDE "init = normal\ninit_std = -1\n", "[layer.fc] init_std");
    model_fails("[layer.act]\ntype = relu\ninit = xavier_normal\n",
                "[layer.act] init = 'xavier_normal': ReLU has no weight parameter to initialise");
    model_fails("[layer.bn]\ntype = batchnorm1d\nnum_features = 4\ninit = kaiming_normal\n",
                "Fan in and fan out can not be computed for tensor with fewer than 2 dimensions "
                "(weight, of shape [4])");
    model_fails(WIDE "bias = false\nbias_init = zeros\n", "Linear has no bias parameter");
}

/* ---- freezing ------------------------------------------------------------------------ */

static int64_t trainable(const weft_module *m)
{
    struct weft_named_tensor *p = NULL;
    int n = weft_module_named_parameters(m, &p);
    int64_t k = 0;
    for (int i = 0; i < n; i++)
        k += weft_requires_grad(p[i].tensor) ? weft_tensor_numel(p[i].tensor) : 0;
    free(p);
    return k;
}

#define TWO_LAYERS                                                                            \
    "[layer.fc1]\ntype = linear\nin_features = 4\nout_features = 3\n"                         \
    "[layer.act]\ntype = relu\n"                                                              \
    "[layer.fc2]\ntype = linear\nin_features = 3\nout_features = 2\n"

Test(init, requires_grad_false_and_train_freeze_freeze_a_layer)
{
    weft_module *m = model_of(TWO_LAYERS "requires_grad = false\n");
    cr_assert_eq(trainable(m), 4 * 3 + 3, "fc2 frozen");
    cr_assert(weft_is_leaf(weft_module_parameter(weft_module_child(m, "2"), "weight")));
    weft_module_free(m);
    m = model_of(TWO_LAYERS "[train]\nfreeze = fc1\n");
    cr_assert_eq(trainable(m), 3 * 2 + 2, "fc1 (child 0) frozen");
    cr_assert(!weft_requires_grad(weft_module_parameter(weft_module_child(m, "0"), "bias")));
    weft_module_free(m);
    m = model_of(TWO_LAYERS "[train]\nfreeze = fc1, fc2\n");
    cr_assert_eq(trainable(m), 0);
    weft_module_free(m);
    /* a graph model's layers are its children by name; a module path reaches deeper */
    m = model_of("[model]\ntype = graph\n" TWO_LAYERS "[train]\nfreeze = fc2\n");
    cr_assert_eq(trainable(m), 4 * 3 + 3);
    weft_module_free(m);
}

Test(init, freezing_what_is_not_there_names_it)
{
    model_fails(TWO_LAYERS "[train]\nfreeze = fc3\n",
                "init.ini: [train] freeze = 'fc3': no layer or module named 'fc3' (did you mean "
                "'fc1'?): expected layer names of this model (fc1, act, fc2)");
    model_fails(TWO_LAYERS "[train]\nfreeze = act\n", "'act' (ReLU) has no parameters to freeze");
    model_fails("[layer.act]\ntype = relu\nrequires_grad = false\n",
                "[layer.act] requires_grad = 'false': ReLU has no parameters to freeze");
}

/* Sums |x| over every parameter of m. */
static double abs_sum(weft_module *m)
{
    weft_scope_push();
    struct weft_tensor_dict *d = weft_module_state_dict(m);
    double s = 0;
    for (size_t i = 0; d && i < weft_tensor_dict_len(d); i++) {
        weft_tensor *t = weft_contiguous(weft_to_dtype(weft_tensor_dict_at(d, i), WEFT_F64));
        int64_t n = weft_tensor_numel(t);
        double *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
        cr_assert(v && weft_tensor_read(t, v, (size_t)n * sizeof *v) == 0);
        for (int64_t k = 0; k < n; k++)
            s += fabs(v[k]);
        free(v);
    }
    weft_tensor_dict_free(d);
    weft_scope_pop();
    return s;
}

/* The next number of the generator, as a double. */
static double next_draw(void)
{
    double u;
    weft_scope_push();
    cr_assert_eq(weft_tensor_read(weft_rand(1, (int64_t[]){1}, WEFT_F64, WEFT_CPU), &u, sizeof u), 0);
    weft_scope_pop();
    return u;
}

Test(init, switched_off_modules_start_at_zero_and_draw_nothing_from_the_generator)
{
    weft_scope_push();
    weft_manual_seed(11);
    double fresh = next_draw();
    weft_manual_seed(11);
    cr_assert(weft_nn_init_enabled(), "on by default");
    cr_assert(weft_nn_init_enable(false), "the previous setting: on");
    weft_module *lin = weft_nn_linear(5, 3, true);
    struct weft_rnn_options o = {.mode = WEFT_RNN_LSTM, .input_size = 4, .hidden_size = 3};
    weft_module *lstm = weft_nn_rnn(&o);
    weft_module *emb = weft_nn_embedding(7, 2);
    weft_tensor *t = weft_ones(2, (int64_t[]){3, 3}, WEFT_F32, WEFT_CPU);
    cr_assert_eq(weft_nn_init_kaiming_uniform_(t, 0, NULL, NULL), 0);
    cr_assert(lin && lstm && emb && t);
    cr_assert_eq(abs_sum(lin) + abs_sum(lstm) + abs_sum(emb), 0.0, "zeros, for a checkpoint");
    double total;
    cr_assert_eq(weft_tensor_item(weft_sum(t, 0, NULL, false), &total), 0);
    cr_assert_eq(total, 9.0, "a fill leaves the tensor as it was");
    cr_assert_eq(next_draw(), fresh, "nothing was drawn from the generator");
    cr_assert(!weft_nn_init_enable(true), "the previous setting: off");
    weft_module *again = weft_nn_linear(5, 3, true);
    cr_assert_gt(abs_sum(again), 0.0, "on again: PyTorch's initialisation");
    weft_module_free(lin);
    weft_module_free(lstm);
    weft_module_free(emb);
    weft_module_free(again);
    weft_scope_pop();
}
