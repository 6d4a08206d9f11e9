/* tests/test_model.c: models from an INI file through the module-type registry
 * (weft/model.h): the built-in layer types, a plugin's layer type that an INI file names
 * (tests/fixtures/fixture_layer.c), and the errors a bad [layer.*] section gets. */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#include <weft/model.h>
#include <weft/registry.h>

TestSuite(model, .init = tu_setup, .fini = tu_teardown);

static struct weft_config *cfg_of(const char *text)
{
    struct weft_config *cfg = weft_config_parse(text, "model.ini");
    cr_assert_not_null(cfg, "%s", weft_error_message());
    return cfg;
}

/* The fixtures' directory on the search path, as [runtime] plugin_path would put it. */
static void add_fixtures(void)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/fixtures", getenv("WEFT_TEST_FIXTURES"));
    weft_plugin_path_add(dir);
}

Test(model, built_in_layers_are_registered_module_types_with_their_class_names)
{
    const char *const ini[] = {"linear", "conv2d", "maxpool2d", "avgpool2d", "batchnorm1d",
                               "layernorm", "dropout", "embedding", "flatten", "relu",
                               "leaky_relu", "gelu", "softmax", "log_softmax"};
    for (size_t i = 0; i < sizeof ini / sizeof *ini; i++) {
        const struct weft_module_type *t = weft_registry_find(WEFT_KIND_MODULE, ini[i]);
        cr_assert_not_null(t, "%s is not registered", ini[i]);
        cr_assert_not_null(t->create, "%s cannot be built from options", ini[i]);
        cr_assert_str_eq(weft_registry_owner(t), "", "built into libweft-nn");
    }
    cr_assert_str_eq(((const struct weft_module_type *)weft_registry_find(WEFT_KIND_MODULE,
                                                                          "batchnorm2d"))
                         ->class_name,
                     "BatchNorm2d");
}

Test(model, a_sequential_model_is_built_from_its_layer_sections_in_file_order)
{
    struct weft_config *cfg = cfg_of("[layer.fc1]\ntype = linear\nin_features = 4\n"
                                     "out_features = 3\nbias = false\n"
                                     "[layer.act]\ntype = relu\n"
                                     "[layer.fc2]\ntype = linear\nin_features = 3\n"
                                     "out_features = 2\n");
    weft_module *m = weft_model_from_config(cfg);
    cr_assert_not_null(m, "%s", weft_error_message());
    cr_assert_eq(weft_config_check_unknown(cfg), 0, "%s", weft_error_message());
    char *repr = weft_module_repr(m);
    cr_assert_str_eq(repr, "Sequential(\n"
                           "  (0): Linear(in_features=4, out_features=3, bias=False)\n"
                           "  (1): ReLU()\n"
                           "  (2): Linear(in_features=3, out_features=2, bias=True)\n"
                           ")");
    free(repr);
    cr_assert_eq(weft_module_num_parameters(m), 4 * 3 + 3 * 2 + 2);
    weft_module_free(m);
    weft_config_free(cfg);
}

Test(model, a_plugins_layer_type_named_by_an_ini_file_loads_the_plugin_and_runs)
{
    add_fixtures();
    cr_assert_null(weft_registry_find(WEFT_KIND_MODULE, "scale"), "not loaded yet");
    struct weft_config *cfg = cfg_of("[layer.fc]\ntype = linear\nin_features = 2\n"
                                     "out_features = 2\n"
                                     "[layer.s]\ntype = scale\nfactor = 2.5\n");
    weft_module *m = weft_model_from_config(cfg);
    cr_assert_not_null(m, "%s", weft_error_message());
    cr_assert(weft_plugin_is_loaded("fixture-layer"), "its manifest provides module:scale");
    cr_assert_str_eq(weft_registry_owner(weft_registry_find(WEFT_KIND_MODULE, "scale")),
                     "fixture-layer");
    cr_assert_eq(weft_config_check_unknown(cfg), 0, "%s", weft_error_message());
    weft_module *s = weft_module_child(m, "1");
    cr_assert_str_eq(weft_module_type_name(s), "Scale");
    char *repr = weft_module_repr(s);
    cr_assert_str_eq(repr, "Scale(factor=2.5)");
    free(repr);
    /* y = 2.5 * (x W^T + b) */
    weft_scope_push();
    weft_tensor *x = tu_tensor(2, (int64_t[]){1, 2}, (double[]){1, -1}, WEFT_F32);
    weft_tensor *lin = weft_module_forward(weft_module_child(m, "0"), x);
    weft_tensor *y = weft_module_forward(m, x);
    double want[2];
    tu_read(lin, want);
    want[0] *= 2.5;
    want[1] *= 2.5;
    tu_assert_close(y, want, 2, 1e-6, 1e-6);
    /* and it trains: the gradient flows through the plugin's layer */
    cr_assert_eq(weft_backward(weft_sum(y, 0, NULL, false), NULL, false), 0, "%s",
                 weft_error_message());
    weft_tensor *g = weft_grad(weft_module_parameter(weft_module_child(m, "0"), "bias"));
    tu_assert_close(g, (double[]){2.5, 2.5}, 2, 1e-6, 1e-6);
    weft_scope_pop();
    weft_module_free(m);
    weft_config_free(cfg);
}

Test(model, a_plugin_layers_own_keys_are_checked_by_the_unknown_key_check)
{
    add_fixtures();
    struct weft_config *cfg = cfg_of("[layer.s]\ntype = scale\nfactor = 2\nfactr = 3\n");
    weft_module *m = weft_model_from_config(cfg);
    cr_assert_not_null(m, "%s", weft_error_message());
    cr_assert_lt(weft_config_check_unknown(cfg), 0);
    tu_assert_error(WEFT_ERR_CONFIG, "model.ini: line 4: [layer.s] unknown key 'factr' (did you mean "
                                     "'factor'?)");
    weft_module_free(m);
    weft_config_free(cfg);
}

Test(model, a_model_type_other_than_sequential_is_built_from_the_model_section)
{
    add_fixtures();
    struct weft_config *cfg = cfg_of("[model]\ntype = scale\nfactor = 3\n");
    weft_module *m = weft_model_from_config(cfg);
    cr_assert_not_null(m, "%s", weft_error_message());
    cr_assert_str_eq(weft_module_type_name(m), "Scale");
    weft_module_free(m);
    weft_config_free(cfg);
}

static void expect_model_error(const char *ini, const char *text)
{
    struct weft_config *cfg = cfg_of(ini);
    cr_assert_null(weft_model_from_config(cfg), "accepted:\n%s", ini);
    tu_assert_error(WEFT_ERR_CONFIG, text);
    weft_config_free(cfg);
}

Test(model, bad_layer_sections_name_the_file_the_section_and_the_key)
{
    add_fixtures();
    expect_model_error("[layer.a]\ntype = linaer\n",
                       "model.ini: [layer.a] type = 'linaer': no module 'linaer' (known: linear");
    expect_model_error("[layer.a]\ntype = linaer\n", "did you mean 'linear'?");
    expect_model_error("[layer.a]\nin_features = 3\n", "model.ini: [layer.a] missing required "
                                                       "key 'type'");
    expect_model_error("[layer.a]\ntype = linear\nout_features = 3\n",
                       "model.ini: [layer.a] missing required key 'in_features'");
    expect_model_error("[layer.a]\ntype = linear\nin_features = -3\nout_features = 3\n",
                       "model.ini: [layer.a] in_features = '-3': expected a positive integer");
    expect_model_error("[layer.a]\ntype = conv2d\nin_channels = 3\nout_channels = 4\n"
                       "kernel_size = 3, x\n",
                       "model.ini: [layer.a] kernel_size = '3, x': expected integers separated "
                       "by commas");
    expect_model_error("[layer.a]\ntype = dropout\np = 1.5\n",
                       "model.ini: [layer.a] dropout probability has to be between 0 and 1, but "
                       "got 1.5");
    expect_model_error("[layer.a]\ntype = scale\n", "model.ini: [layer.a] missing required key "
                                                    "'factor'");
    expect_model_error("[model]\ntype = sequential\n", "model.ini: the model has no layers");
    expect_model_error("[model]\ntype = sequentail\n",
                       "model.ini: [model] type = 'sequentail': no module 'sequentail'");
}
