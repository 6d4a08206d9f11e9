/* tests/test_graph.c: models that are not a chain (weft/graph.h, `[model] type = graph`):
 * the joining layers' values, their gradients against finite differences in float64, a
 * residual block whose in-place add and ReLU give the values and gradients of the plain
 * out-of-place forward, the errors that name the layer whose inputs do not fit, and
 * configs/mnist-resnet.ini against PyTorch: its state_dict has the
 * names, shapes and order of scripts/mnist_resnet_torch.py's MnistResNet, and with that
 * model's weights it computes PyTorch's logits, loss and gradients
 * (tests/fixtures/mnist-resnet.safetensors, written by scripts/make-resnet-fixture.py). */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include <weft/graph.h>
#include <weft/model.h>
#include <weft/testkit.h>

/* A scope around each test: the tensors a safetensors load or a state_dict returns are
 * autoreleased into it. */
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

TestSuite(graph, .init = setup, .fini = teardown);

static weft_tensor *values(int ndim, const int64_t *shape, uint64_t seed)
{
    uint64_t state = seed;
    return tu_random_tensor(ndim, shape, WEFT_F32, -1, 1, &state, NULL);
}

static void read_all(const weft_tensor *t, double **out)
{
    *out = malloc((size_t)weft_tensor_numel(t) * sizeof **out);
    cr_assert_not_null(*out);
    tu_read(t, *out);
}

static void add(weft_module *g, const char *name, weft_module *layer, int n, ...)
{
    const char *in[8];
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n; i++)
        in[i] = va_arg(ap, const char *);
    va_end(ap);
    cr_assert_eq(weft_nn_graph_add(g, name, layer, n, in), 0, "%s: %s", name,
                 weft_error_message());
}

Test(graph, joining_layers_add_multiply_and_concatenate)
{
    weft_scope_push();
    weft_module *g = weft_nn_graph();
    add(g, "a", weft_nn_identity(), 1, "input");
    add(g, "sq", weft_nn_mul(), 2, "input", "a");                   /* x * x */
    add(g, "sum", weft_nn_add(), 3, "sq", "input", "input");        /* x^2 + 2x */
    add(g, "both", weft_nn_concat(1), 2, "sum", "input");           /* [x^2 + 2x, x] */
    weft_tensor *x = tu_tensor(2, (int64_t[]){2, 2}, (double[]){1, 2, -3, 0.5}, WEFT_F32);
    weft_tensor *y = weft_module_forward(g, x);
    cr_assert_not_null(y, "%s", weft_error_message());
    tu_assert_shape(y, 2, (int64_t[]){2, 4});
    tu_assert_close(y, (double[]){3, 8, 1, 2, 3, 1.25, -3, 0.5}, 8, 0, 0);
    double *xv;
    read_all(x, &xv);
    cr_assert(xv[0] == 1 && xv[3] == 0.5, "the model's input is never written");
    free(xv);
    cr_assert_eq(weft_module_num_parameters(g), 0);
    char *repr = weft_module_repr(g);
    cr_assert_str_eq(repr, "GraphModule(\n  (a): Identity()\n  (sq): Mul()\n  (sum): Add()\n"
                           "  (both): Concat(dim=1)\n)");
    free(repr);
    weft_module_free(g);
    weft_scope_pop();
}

/* conv -> bn -> relu -> conv -> bn -> add(bn2, input) -> relu -> linear -> relu -> linear:
 * every in-place case (add into BN's output, ReLU into the add's and BN's) and the fused
 * Linear + ReLU, with a residual read of the input. */
static weft_module *residual_block(void)
{
    weft_manual_seed(3);
    struct weft_conv2d_options c = {.in_channels = 2, .out_channels = 2,
                                    .kernel_size = {3, 3},
                                    .params = {.padding = {1, 1}}, .bias = false};
    weft_module *g = weft_nn_graph();
    add(g, "conv1", weft_nn_conv2d(&c), 1, "input");
    add(g, "bn1", weft_nn_batch_norm2d(2, 1e-5, 0.1), 1, "conv1");
    add(g, "relu1", weft_nn_relu(), 1, "bn1");
    add(g, "conv2", weft_nn_conv2d(&c), 1, "relu1");
    add(g, "bn2", weft_nn_batch_norm2d(2, 1e-5, 0.1), 1, "conv2");
    add(g, "add", weft_nn_add(), 2, "bn2", "input");
    add(g, "relu2", weft_nn_relu(), 1, "add");
    add(g, "flat", weft_nn_flatten(1, -1), 1, "relu2");
    add(g, "fc1", weft_nn_linear(32, 8, true), 1, "flat");
    add(g, "relu3", weft_nn_relu(), 1, "fc1");
    add(g, "fc2", weft_nn_linear(8, 3, true), 1, "relu3");
    return g;
}

/* The loss and the gradients of every parameter, through the fast forward or the plain
 * one (forward_each: no fusion, no in-place writes). */
static double loss_and_grads(weft_module *g, weft_tensor *x, bool plain, double **grads, int *n)
{
    weft_scope_push();
    weft_tensor *y = plain ? weft_nn_graph_forward_each(g, x, NULL, NULL, NULL)
                           : weft_module_forward(g, x);
    cr_assert_not_null(y, "%s", weft_error_message());
    weft_tensor *loss = weft_sum(weft_mul(y, weft_sin(y)), 0, NULL, false);
    cr_assert_eq(weft_backward(loss, NULL, false), 0, "%s", weft_error_message());
    double l;
    tu_read(loss, &l);
    int np = 0;
    weft_tensor *const *p = weft_module_parameters(g, &np);
    *n = np;
    int64_t total = 0;
    for (int i = 0; i < np; i++)
        total += weft_tensor_numel(p[i]);
    *grads = malloc((size_t)total * sizeof **grads);
    cr_assert_not_null(*grads);
    int64_t at = 0;
    for (int i = 0; i < np; i++) {
        tu_read(weft_grad(p[i]), *grads + at);
        at += weft_tensor_numel(p[i]);
        weft_zero_grad(p[i], true);
    }
    weft_scope_pop();
    return l;
}

Test(graph, in_place_adds_and_relus_give_the_plain_forwards_values_and_gradients)
{
    weft_scope_push();
    weft_module *g = residual_block();
    weft_tensor *x = values(4, (int64_t[]){3, 2, 4, 4}, 11);
    double *g_fast, *g_plain;
    int n1, n2;
    double l_fast = loss_and_grads(g, x, false, &g_fast, &n1);
    double l_plain = loss_and_grads(g, x, true, &g_plain, &n2);
    cr_assert_eq(n1, n2);
    cr_assert_eq(l_fast, l_plain, "loss %.9g against %.9g", l_fast, l_plain);
    int np;
    weft_tensor *const *p = weft_module_parameters(g, &np);
    int64_t total = 0;
    for (int i = 0; i < np; i++)
        total += weft_tensor_numel(p[i]);
    for (int64_t i = 0; i < total; i++)
        cr_assert_float_eq(g_fast[i], g_plain[i], 1e-6 * (1 + fabs(g_plain[i])), "grad %lld",
                           (long long)i);
    free(g_fast);
    free(g_plain);
    /* evaluation mode, without autograd: the same in-place paths */
    weft_module_train(g, false);
    bool prev = weft_no_grad_begin();
    weft_tensor *a = weft_module_forward(g, x);
    weft_tensor *b = weft_nn_graph_forward_each(g, x, NULL, NULL, NULL);
    weft_grad_mode_restore(prev);
    cr_assert(a && b, "%s", weft_error_message());
    double *va, *vb;
    read_all(a, &va);
    read_all(b, &vb);
    cr_assert_arr_eq(va, vb, 9 * sizeof *va);
    free(va);
    free(vb);
    weft_module_free(g);
    weft_scope_pop();
}

/* Every joining layer's backward, through the fast forward's in-place writes and through
 * the plain one: the gradient of the input against central differences in float64. The
 * fast forward writes m into fc1's output, s into m's, r into c's and gate into fc3's;
 * fc2 (three readers) and gate (read twice by sq) are kept. */
struct graph_gc {
    weft_module *g;
    bool plain;
};

static weft_tensor *graph_gc_fn(void *ctx, weft_tensor *const *inputs)
{
    const struct graph_gc *c = ctx;
    return c->plain ? weft_nn_graph_forward_each(c->g, inputs[0], NULL, NULL, NULL)
                    : weft_module_forward(c->g, inputs[0]);
}

Test(graph, joining_layers_gradients_match_finite_differences_in_float64)
{
    weft_scope_push();
    weft_manual_seed(5);
    weft_module *g = weft_nn_graph();
    add(g, "fc1", weft_nn_linear(4, 4, true), 1, "input");
    add(g, "fc2", weft_nn_linear(4, 4, true), 1, "input");
    add(g, "m", weft_nn_mul(), 2, "fc1", "fc2");
    add(g, "s", weft_nn_add(), 3, "m", "fc2", "input");
    add(g, "c", weft_nn_concat(1), 3, "s", "input", "fc2"); /* [3, 12] */
    add(g, "r", weft_nn_relu(), 1, "c");
    add(g, "fc3", weft_nn_linear(12, 12, true), 1, "r");
    add(g, "gate", weft_nn_mul(), 2, "fc3", "r");
    add(g, "sq", weft_nn_mul(), 2, "gate", "gate");
    cr_assert_eq(weft_module_to(g, WEFT_CPU, WEFT_F64), 0, "%s", weft_error_message());
    uint64_t state = 17;
    weft_tensor *x = tu_random_tensor(2, (int64_t[]){3, 4}, WEFT_F64, -1, 1, &state, NULL);
    cr_assert_eq(weft_requires_grad_(x, true), 0);
    for (int plain = 0; plain < 2; plain++) {
        struct graph_gc c = {g, plain};
        cr_expect_eq(weft_gradcheck(graph_gc_fn, &c, 1, &x, 1e-6, 1e-7, 1e-5), 0, "%s: %s",
                     plain ? "plain" : "fast", weft_error_message());
        weft_error_clear();
    }
    weft_module_free(g);
    weft_scope_pop();
}

Test(graph, its_state_dict_names_are_the_layers_names)
{
    weft_scope_push();
    weft_module *g = residual_block();
    struct weft_tensor_dict *d = weft_module_state_dict(g);
    const char *want[] = {"conv1.weight", "bn1.weight", "bn1.bias", "bn1.running_mean",
                          "bn1.running_var", "bn1.num_batches_tracked", "conv2.weight"};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        cr_assert_str_eq(weft_tensor_dict_name(d, i), want[i]);
    cr_assert_eq(weft_nn_graph_num_layers(g), 11);
    int which[2];
    cr_assert_eq(weft_nn_graph_layer_inputs(g, 5, which, 2), 2);
    cr_assert(which[0] == 4 && which[1] == -1, "add reads bn2 and the input");
    cr_assert_eq(weft_nn_graph_readers(g, 10), 1, "the output counts as a reader");
    weft_tensor_dict_free(d);
    weft_module_free(g);
    weft_scope_pop();
}

Test(graph, a_layer_whose_inputs_do_not_fit_is_named_with_their_shapes)
{
    weft_scope_push();
    weft_module *g = weft_nn_graph();
    add(g, "fc", weft_nn_linear(4, 3, true), 1, "input");
    add(g, "sum", weft_nn_add(), 2, "fc", "input");
    weft_tensor *x = values(2, (int64_t[]){2, 4}, 1);
    cr_assert_null(weft_module_forward(g, x));
    tu_assert_error(WEFT_ERR_RUNTIME, "layer 'sum' (Add) on fc [2, 3], input [2, 4]: The size of "
                                    "tensor a (3) must match the size of tensor b (4) at "
                                    "non-singleton dimension 1");
    int failed = 0;
    cr_assert_null(weft_nn_graph_forward_each(g, x, NULL, NULL, &failed));
    cr_assert_eq(failed, 1);
    weft_error_clear();
    weft_module_free(g);

    g = weft_nn_graph();
    add(g, "fc", weft_nn_linear(4, 3, true), 1, "input");
    add(g, "cat", weft_nn_concat(1), 2, "fc", "input");
    cr_assert_not_null(weft_module_forward(g, x), "concat of [2, 3] and [2, 4] along 1");
    weft_tensor *x3 = values(3, (int64_t[]){2, 5, 4}, 2);
    cr_assert_null(weft_module_forward(g, x3));
    tu_assert_error(WEFT_ERR_RUNTIME, "layer 'cat' (Concat) on fc [2, 5, 3], input [2, 5, 4]: "
                                    "Sizes of tensors must match except in dimension 1");
    weft_module_free(g);
    weft_scope_pop();
}

Test(graph, layers_that_cannot_be_added_are_refused_by_name)
{
    weft_module *g = weft_nn_graph();
    add(g, "fc", weft_nn_linear(4, 4, true), 1, "input");
    const char *two[] = {"fc", "input"}, *later[] = {"nope"};
    cr_assert_lt(weft_nn_graph_add(g, "fc2", weft_nn_linear(4, 4, true), 2, two), 0);
    tu_assert_error(WEFT_ERR_VALUE, "layer 'fc2' (Linear) takes one input, got 2: join values "
                                    "first with an add, mul or concat layer");
    cr_assert_lt(weft_nn_graph_add(g, "sum", weft_nn_add(), 1, two), 0);
    tu_assert_error(WEFT_ERR_VALUE, "layer 'sum' (Add) joins two or more inputs, got 1");
    cr_assert_lt(weft_nn_graph_add(g, "fc3", weft_nn_relu(), 1, later), 0);
    tu_assert_error(WEFT_ERR_VALUE, "layer 'fc3': input 'nope' is not 'input' or a layer added "
                                    "before it");
    cr_assert_lt(weft_nn_graph_add(g, "fc", weft_nn_relu(), 1, two), 0);
    tu_assert_error(WEFT_ERR_VALUE, "a layer named 'fc' is already in the graph");
    cr_assert_lt(weft_nn_graph_add(g, "input", weft_nn_relu(), 1, two), 0);
    tu_assert_error(WEFT_ERR_VALUE, "layer name 'input' is not allowed");
    cr_assert_lt(weft_nn_graph_add(g, "a.b", weft_nn_relu(), 1, two), 0);
    tu_assert_error(WEFT_ERR_VALUE, "layer name 'a.b' is not allowed");
    cr_assert_eq(weft_nn_graph_num_layers(g), 1, "nothing was added");
    /* a joining layer alone, outside a graph */
    weft_module *sum = weft_nn_add();
    weft_scope_push();
    cr_assert_null(weft_module_forward(sum, values(1, (int64_t[]){3}, 1)));
    tu_assert_error(WEFT_ERR_VALUE, "Add joins two or more inputs: it runs in a graph model");
    weft_scope_pop();
    weft_module_free(sum);
    weft_module_free(g);
}

/* ---- [model] type = graph -------------------------------------------------------------- */

static void config_fails(const char *ini, const char *text)
{
    struct weft_config *cfg = weft_config_parse(ini, "graph.ini");
    cr_assert_not_null(cfg, "%s", weft_error_message());
    weft_module *m = weft_model_from_config(cfg);
    cr_assert_null(m, "expected an error containing: %s", text);
    tu_assert_error(WEFT_ERR_CONFIG, text);
    weft_config_free(cfg);
}

#define GRAPH "[model]\ntype = graph\n"
#define FC(name, in) "[layer." name "]\ntype = linear\nin_features = 4\nout_features = 4\n" in
#define SUM(name, in) "[layer." name "]\ntype = add\ninputs = " in "\n"

Test(graph, an_ini_graph_reads_the_layer_above_unless_it_names_its_inputs)
{
    struct weft_config *cfg = weft_config_parse(
        GRAPH FC("a", "") FC("b", "") SUM("res", "b, input") "[layer.out]\ntype = relu\n",
        "graph.ini");
    weft_module *m = weft_model_from_config(cfg);
    cr_assert_not_null(m, "%s", weft_error_message());
    cr_assert_eq(weft_config_check_unknown(cfg), 0, "%s", weft_error_message());
    cr_assert(weft_nn_is_graph(m));
    int which[2];
    cr_assert_eq(weft_nn_graph_layer_inputs(m, 0, which, 2), 1);
    cr_assert_eq(which[0], -1, "the first layer reads the input");
    cr_assert_eq(weft_nn_graph_layer_inputs(m, 1, which, 2), 1);
    cr_assert_eq(which[0], 0, "b reads a");
    cr_assert_eq(weft_nn_graph_layer_inputs(m, 2, which, 2), 2);
    cr_assert(which[0] == 1 && which[1] == -1);
    cr_assert_not_null(weft_module_child(m, "res"));
    weft_module_free(m);
    weft_config_free(cfg);
}

Test(graph, an_ini_graphs_wiring_mistakes_name_the_section)
{
    config_fails(GRAPH FC("a", "") SUM("res", "a, inptu"),
                 "graph.ini: [layer.res] inputs = 'a, inptu': no layer named 'inptu' (did you "
                 "mean 'input'?): an input is 'input' (the model's input) or a layer above "
                 "this one");
    config_fails(GRAPH FC("a", "inputs = b\n") FC("b", "inputs = input\n"),
                 "[layer.a] inputs = 'b': [layer.b] comes later in the file: a layer reads "
                 "'input' (the model's input) or layers above it");
    config_fails(GRAPH FC("a", "inputs = c\n") FC("b", "") FC("c", ""),
                 "[layer.a] inputs = 'c': [layer.c] reads this layer's output itself: a cycle "
                 "(a -> b -> c -> a)");
    config_fails(GRAPH FC("a", "inputs = a\n"), "[layer.a] inputs = 'a': a layer cannot read its "
                                                "own output");
    config_fails(GRAPH FC("a", "") FC("b", "inputs = a, input\n"),
                 "[layer.b] inputs = 'a, input': layer 'b' (Linear) takes one input, got 2");
    config_fails(GRAPH FC("a", "") SUM("res", "a"),
                 "[layer.res] inputs = 'a': layer 'res' (Add) joins two or more inputs, got 1");
    config_fails(GRAPH FC("a", "") FC("b", "inputs = input\n") SUM("res", "b, input"),
                 "graph.ini: [layer.a]: no layer reads its output (the model's output is the "
                 "last layer's, [layer.res])");
    config_fails(GRAPH FC("input", ""), "[layer.input]: 'input' is the model's input");
    config_fails(GRAPH FC("a.b", ""), "[layer.a.b]: a graph model's layer names have no '.'");
    config_fails(FC("a", "") SUM("res", "a, input"),
                 "[layer.res] inputs: the layers of a sequential model read the layer before "
                 "them; for layers that name their inputs set [model] type = graph");
    config_fails(GRAPH "[layer.cat]\ntype = concat\ndim = 9\n", "[layer.cat] dim");
}

/* ---- configs/mnist-resnet.ini against PyTorch ------------------------------------------ */

struct fixture {
    struct weft_tensor_dict *d;
    struct weft_metadata *meta;
};

static struct fixture load_fixture(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/fixtures/mnist-resnet.safetensors",
             getenv("WEFT_TEST_SOURCE_DIR"));
    struct fixture f = {0};
    cr_assert_eq(weft_safetensors_load(path, WEFT_CPU, &f.d, &f.meta), 0, "%s",
                 weft_error_message());
    return f;
}

static weft_tensor *get(const struct fixture *f, const char *prefix, const char *name)
{
    char key[200];
    snprintf(key, sizeof key, "%s%s", prefix, name);
    weft_tensor *t = weft_tensor_dict_get(f->d, key);
    cr_assert_not_null(t, "the fixture has no '%s'", key);
    return t;
}

static weft_module *shipped_resnet(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/configs/mnist-resnet.ini", getenv("WEFT_SOURCE_ROOT"));
    struct weft_config *cfg = weft_config_load(path);
    cr_assert_not_null(cfg, "%s", weft_error_message());
    weft_module *m = weft_model_from_config(cfg);
    cr_assert_not_null(m, "%s", weft_error_message());
    weft_config_free(cfg);
    return m;
}

static void assert_close(const char *what, const weft_tensor *got, const weft_tensor *want,
                         double rtol, double atol)
{
    int64_t n = weft_tensor_numel(want);
    cr_assert_eq(weft_tensor_numel(got), n, "%s: %lld values, expected %lld", what,
                 (long long)weft_tensor_numel(got), (long long)n);
    double *a, *b;
    read_all(got, &a);
    read_all(want, &b);
    for (int64_t i = 0; i < n; i++)
        cr_assert(fabs(a[i] - b[i]) <= atol + rtol * fabs(b[i]), "%s[%lld]: weft %.9g, torch %.9g",
                  what, (long long)i, a[i], b[i]);
    free(a);
    free(b);
}

Test(graph, mnist_resnet_has_the_torch_models_state_dict_names_shapes_and_order)
{
    struct fixture f = load_fixture();
    weft_module *m = shipped_resnet();
    struct weft_tensor_dict *sd = weft_module_state_dict(m);
    size_t k = 0;
    for (size_t i = 0; i < weft_tensor_dict_len(f.d); i++) {
        const char *key = weft_tensor_dict_name(f.d, i);
        if (strncmp(key, "model.", 6) != 0)
            continue;
        cr_assert_lt(k, weft_tensor_dict_len(sd), "torch has more entries than weft");
        cr_assert_str_eq(weft_tensor_dict_name(sd, k), key + 6, "entry %zu", k);
        const weft_tensor *a = weft_tensor_dict_at(sd, k), *b = weft_tensor_dict_at(f.d, i);
        cr_assert_eq(a->ndim, b->ndim, "%s", key);
        for (int d = 0; d < a->ndim; d++)
            cr_assert_eq(a->shape[d], b->shape[d], "%s dim %d", key, d);
        k++;
    }
    cr_assert_eq(k, weft_tensor_dict_len(sd), "weft has entries torch does not");
    weft_tensor_dict_free(sd);
    weft_module_free(m);
    weft_tensor_dict_free(f.d);
    weft_metadata_free(f.meta);
}

/* The fixture's weights (float32 values, with running statistics of their own) loaded into
 * the shipped config's model in float64; PyTorch's answers were computed in float64. */
Test(graph, mnist_resnet_computes_pytorchs_logits_loss_and_gradients)
{
    struct fixture f = load_fixture();
    weft_module *m = shipped_resnet();
    cr_assert_eq(weft_module_to(m, WEFT_CPU, WEFT_F64), 0);
    struct weft_tensor_dict *sd = weft_tensor_dict_new();
    for (size_t i = 0; i < weft_tensor_dict_len(f.d); i++) {
        const char *key = weft_tensor_dict_name(f.d, i);
        if (strncmp(key, "model.", 6) == 0)
            cr_assert_eq(weft_tensor_dict_add(sd, key + 6, weft_tensor_dict_at(f.d, i)), 0);
    }
    cr_assert_eq(weft_module_load_state_dict(m, sd, true), 0, "%s", weft_error_message());
    weft_tensor_dict_free(sd);
    weft_scope_push();
    weft_tensor *x = get(&f, "", "x"), *y = get(&f, "", "y");
    weft_module_train(m, false);
    bool prev = weft_no_grad_begin();
    weft_tensor *eval = weft_module_forward(m, x);
    weft_grad_mode_restore(prev);
    cr_assert_not_null(eval, "%s", weft_error_message());
    assert_close("eval logits", eval, get(&f, "", "logits_eval"), 1e-9, 1e-11);
    weft_module_train(m, true);
    weft_tensor *logits = weft_module_forward(m, x);
    cr_assert_not_null(logits, "%s", weft_error_message());
    assert_close("train logits", logits, get(&f, "", "logits"), 1e-9, 1e-11);
    weft_tensor *loss = weft_cross_entropy(logits, y, NULL);
    assert_close("loss", loss, get(&f, "", "loss"), 1e-9, 1e-12);
    cr_assert_eq(weft_backward(loss, NULL, false), 0, "%s", weft_error_message());
    struct weft_named_tensor *p = NULL;
    int n = weft_module_named_parameters(m, &p);
    for (int i = 0; i < n; i++)
        assert_close(p[i].name, weft_grad(p[i].tensor), get(&f, "grad.", p[i].name), 1e-8,
                     1e-11);
    /* the running statistics after that training forward, BatchNorm's momentum update */
    struct weft_named_tensor *b = NULL;
    int nb = weft_module_named_buffers(m, &b);
    for (int i = 0; i < nb; i++)
        assert_close(b[i].name, b[i].tensor, get(&f, "after.", b[i].name), 1e-9, 1e-12);
    free(p);
    free(b);
    weft_scope_pop();
    weft_module_free(m);
    weft_tensor_dict_free(f.d);
    weft_metadata_free(f.meta);
}
