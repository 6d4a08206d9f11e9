/* tests/test_rnn.c: RNN, LSTM and GRU (weft/rnn.h) and the cpu plugin's rnn_layer kernels.
 *
 * Values and every gradient against PyTorch 1.13 (tests/rnn/gen.py wrote
 * tests/rnn/fixtures/cases.txt: parameters, input, initial states, outputs, the loss's
 * weights and gradients per case), in float64 and float32; gradients also by
 * weft_gradcheck (float64 central differences) for every layer type, bidirectional, two
 * layers, proj_size and lengths; bad input against PyTorch's texts
 * (tests/rnn/fixtures/errors.txt); the modules' names, shapes, repr and INI options. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include <weft/nn.h>
#include <weft/rnn.h>

static void setup(void)
{
    tu_setup();
    weft_scope_push();
}

static void teardown(void)
{
    weft_scope_pop();
    weft_set_grad_enabled(true);
    tu_teardown();
}

TestSuite(rnn, .init = setup, .fini = teardown);

/* ---- the fixtures ---------------------------------------------------------------------- */

struct ftensor {
    char name[64];
    int ndim;
    int64_t shape[8];
    int64_t n;
    double *v;
};

struct fcase {
    char name[64];
    int mode, I, H, layers, bias, batch_first, bidir, proj, has_h0, sorted;
    int nlen;
    int64_t len[16];
    int nt;
    struct ftensor t[64];
};

static char *fixture_path(char *buf, size_t size, const char *file)
{
    const char *dir = getenv("WEFT_TEST_SOURCE_DIR");
    snprintf(buf, size, "%s/rnn/fixtures/%s", dir ? dir : "tests", file);
    return buf;
}

static FILE *open_fixture(const char *file)
{
    char path[1024];
    FILE *f = fopen(fixture_path(path, sizeof path, file), "r");
    if (!f)
        cr_skip_test("no fixture %s (run tests/rnn/gen.py where PyTorch is installed)", path);
    return f;
}

static void free_case(struct fcase *c)
{
    for (int i = 0; i < c->nt; i++)
        free(c->t[i].v);
    c->nt = 0;
}

/* Reads the case called name from cases.txt. */
static void load_case(const char *name, struct fcase *c)
{
    FILE *f = open_fixture("cases.txt");
    char word[64];
    bool found = false;
    memset(c, 0, sizeof *c);
    while (fscanf(f, "%63s", word) == 1) {
        if (strcmp(word, "case") == 0) {
            cr_assert_eq(fscanf(f, "%63s %d %d %d %d %d %d %d %d %d %d", c->name, &c->mode,
                                &c->I, &c->H, &c->layers, &c->bias, &c->batch_first, &c->bidir,
                                &c->proj, &c->has_h0, &c->sorted), 11, "bad case line");
            found = strcmp(c->name, name) == 0;
        } else if (strcmp(word, "lengths") == 0) {
            int n;
            cr_assert_eq(fscanf(f, "%d", &n), 1);
            for (int i = 0; i < n; i++)
                cr_assert_eq(fscanf(f, "%ld", (long *)&c->len[i]), 1);
            if (found)
                c->nlen = n;
        } else if (strcmp(word, "t") == 0) {
            struct ftensor t = {0};
            cr_assert_eq(fscanf(f, "%63s %d", t.name, &t.ndim), 2);
            t.n = 1;
            for (int d = 0; d < t.ndim; d++) {
                cr_assert_eq(fscanf(f, "%ld", (long *)&t.shape[d]), 1);
                t.n *= t.shape[d];
            }
            t.v = malloc(sizeof(double) * (size_t)(t.n ? t.n : 1));
            cr_assert_not_null(t.v);
            for (int64_t i = 0; i < t.n; i++)
                cr_assert_eq(fscanf(f, "%lf", &t.v[i]), 1);
            if (found && c->nt < 64)
                c->t[c->nt++] = t;
            else
                free(t.v);
        } else if (strcmp(word, "end") == 0 && found) {
            break;
        }
    }
    fclose(f);
    cr_assert(found, "case %s not in cases.txt", name);
}

static const struct ftensor *find(const struct fcase *c, const char *name)
{
    for (int i = 0; i < c->nt; i++)
        if (strcmp(c->t[i].name, name) == 0)
            return &c->t[i];
    return NULL;
}

static weft_tensor *make(const struct ftensor *t, enum weft_dtype dt, bool grad)
{
    weft_tensor *x = tu_tensor(t->ndim, t->shape, t->v, dt);
    cr_assert_not_null(x);
    if (grad)
        cr_assert_eq(weft_requires_grad_(x, true), 0);
    return x;
}

static void assert_matches(const weft_tensor *t, const struct ftensor *want, double tol,
                           const char *what)
{
    cr_assert_not_null(t, "%s: no tensor (%s)", what, weft_error_message());
    cr_assert_not_null(want, "%s: not in the fixture", what);
    cr_assert_eq(t->ndim, want->ndim, "%s: %d dims, want %d", what, t->ndim, want->ndim);
    for (int d = 0; d < t->ndim; d++)
        cr_assert_eq(t->shape[d], want->shape[d], "%s: dim %d is %ld, want %ld", what, d,
                     (long)t->shape[d], (long)want->shape[d]);
    double *got = malloc(sizeof(double) * (size_t)(want->n ? want->n : 1));
    cr_assert_not_null(got);
    tu_read(t, got);
    for (int64_t i = 0; i < want->n; i++) {
        double e = want->v[i];
        if (!(fabs(got[i] - e) <= tol * (1 + fabs(e)))) {
            double g = got[i];
            free(got);
            cr_assert_fail("%s[%ld] = %.10g, PyTorch %.10g", what, (long)i, g, e);
        }
    }
    free(got);
}

static struct weft_rnn_options options_of(const struct fcase *c)
{
    struct weft_rnn_options o = weft_rnn_defaults(c->mode, c->I, c->H);
    o.num_layers = c->layers;
    o.bias = c->bias;
    o.batch_first = c->batch_first;
    o.bidirectional = c->bidir;
    o.proj_size = c->proj;
    return o;
}

static bool is_param(const char *name)
{
    return strncmp(name, "weight_", 7) == 0 || strncmp(name, "bias_", 5) == 0;
}

/* Builds the module, loads PyTorch's parameters, runs forward and backward in dt, and
 * compares everything the fixture holds. */
static void replay(const char *name, enum weft_dtype dt, double tol)
{
    struct fcase *c = calloc(1, sizeof *c);
    cr_assert_not_null(c);
    load_case(name, c);
    struct weft_rnn_options o = options_of(c);
    weft_module *m = weft_nn_rnn(&o);
    cr_assert_not_null(m, "%s", weft_error_message());
    cr_assert_eq(weft_module_to(m, WEFT_CPU, dt), 0);
    int nparams = 0;
    for (int i = 0; i < c->nt; i++) {
        if (!is_param(c->t[i].name))
            continue;
        weft_tensor *p = weft_module_parameter(m, c->t[i].name);
        cr_assert_not_null(p, "%s: weft has no parameter %s", name, c->t[i].name);
        bool prev = weft_no_grad_begin();
        cr_assert_eq(weft_copy_(p, make(&c->t[i], dt, false)), 0, "%s: %s: %s", name,
                     c->t[i].name, weft_error_message());
        weft_grad_mode_restore(prev);
        nparams++;
    }
    struct weft_named_tensor *named = NULL;
    cr_assert_eq(weft_module_named_parameters(m, &named), nparams, "%s: parameter count", name);
    free(named);
    struct weft_rnn_input in = {.input = make(find(c, "input"), dt, true),
                                .enforce_sorted = c->sorted};
    if (c->has_h0) {
        in.h0 = make(find(c, "h0"), dt, true);
        if (c->mode == WEFT_RNN_LSTM)
            in.c0 = make(find(c, "c0"), dt, true);
    }
    if (c->nlen) {
        double lv[16];
        for (int i = 0; i < c->nlen; i++)
            lv[i] = (double)c->len[i];
        in.lengths = tu_tensor(1, (int64_t[]){c->nlen}, lv, WEFT_I64);
    }
    struct weft_rnn_result r;
    cr_assert_eq(weft_nn_rnn_forward(m, &in, &r), 0, "%s: %s", name, weft_error_message());
    assert_matches(r.output, find(c, "output"), tol, "output");
    assert_matches(r.h_n, find(c, "h_n"), tol, "h_n");
    if (c->mode == WEFT_RNN_LSTM)
        assert_matches(r.c_n, find(c, "c_n"), tol, "c_n");
    else
        cr_assert_null(r.c_n);
    weft_tensor *loss = weft_add(weft_sum(weft_mul(r.output, make(find(c, "w.output"), dt, false)), 0, NULL, false),
                                 weft_sum(weft_mul(r.h_n, make(find(c, "w.h_n"), dt, false)), 0, NULL, false));
    if (r.c_n)
        loss = weft_add(loss, weft_sum(weft_mul(r.c_n, make(find(c, "w.c_n"), dt, false)), 0,
                                       NULL, false));
    cr_assert_not_null(loss, "%s", weft_error_message());
    cr_assert_eq(weft_backward(loss, NULL, false), 0, "%s: %s", name, weft_error_message());
    char gname[80];
    for (int i = 0; i < c->nt; i++) {
        if (!is_param(c->t[i].name))
            continue;
        snprintf(gname, sizeof gname, "g.%s", c->t[i].name);
        assert_matches(weft_grad(weft_module_parameter(m, c->t[i].name)), find(c, gname), tol,
                       gname);
    }
    assert_matches(weft_grad(in.input), find(c, "g.input"), tol, "g.input");
    if (in.h0)
        assert_matches(weft_grad(in.h0), find(c, "g.h0"), tol, "g.h0");
    if (in.c0)
        assert_matches(weft_grad(in.c0), find(c, "g.c0"), tol, "g.c0");
    weft_module_free(m);
    free_case(c);
    free(c);
}

#define PYTORCH_CASE(name)                                                                    \
    Test(rnn, name##_matches_pytorch_in_float64)                                              \
    {                                                                                         \
        replay(#name, WEFT_F64, 1e-10);                                                       \
    }                                                                                         \
    Test(rnn, name##_matches_pytorch_in_float32)                                              \
    {                                                                                         \
        replay(#name, WEFT_F32, 2e-5);                                                        \
    }
PYTORCH_CASE(rnn_tanh)
PYTORCH_CASE(rnn_relu_2layer_bidir_bf)
PYTORCH_CASE(rnn_tanh_nobias_lengths)
PYTORCH_CASE(lstm)
PYTORCH_CASE(lstm_2layer_bidir)
PYTORCH_CASE(lstm_proj_2layer_bidir)
PYTORCH_CASE(lstm_lengths_bidir)
PYTORCH_CASE(lstm_proj_lengths)
PYTORCH_CASE(lstm_unbatched)
PYTORCH_CASE(gru)
PYTORCH_CASE(gru_2layer_bidir_bf)
PYTORCH_CASE(gru_lengths_unsorted)

/* ---- gradcheck -------------------------------------------------------------------------- */

struct gc {
    struct weft_rnn_options o;
    int nweights;      /* inputs[0..nweights) are the weights, then x, h0 (, c0) */
    bool has_c0;
    weft_tensor *lengths;
    bool enforce_sorted;
    int which;         /* 0 output, 1 h_n, 2 c_n */
};

static weft_tensor *gc_fn(void *ctx, weft_tensor *const *inputs)
{
    struct gc *g = ctx;
    struct weft_rnn_input in = {.input = inputs[g->nweights], .h0 = inputs[g->nweights + 1],
                                .c0 = g->has_c0 ? inputs[g->nweights + 2] : NULL,
                                .lengths = g->lengths, .enforce_sorted = g->enforce_sorted};
    struct weft_rnn_result r;
    if (weft_rnn(&g->o, inputs, true, &in, &r) != 0)
        return NULL;
    /* all three outputs in one: the loss reaches every path */
    weft_tensor *parts[3] = {weft_flatten(r.output, 0, -1), weft_flatten(r.h_n, 0, -1),
                             r.c_n ? weft_flatten(r.c_n, 0, -1) : NULL};
    return weft_cat(r.c_n ? 3 : 2, parts, 0);
}

static void run_gradcheck(struct weft_rnn_options o, int64_t T, int64_t B, const int64_t *len,
                          bool sorted)
{
    uint64_t seed = 42;
    const int64_t L = o.num_layers > 0 ? o.num_layers : 1, D = o.bidirectional ? 2 : 1;
    const int64_t H = o.hidden_size, P = o.proj_size ? o.proj_size : H;
    const int64_t G = o.mode == WEFT_RNN_LSTM ? 4 : o.mode == WEFT_RNN_GRU ? 3 : 1;
    weft_tensor *inputs[64];
    int n = 0;
    for (int64_t l = 0; l < L; l++)
        for (int64_t d = 0; d < D; d++) {
            int64_t in = l == 0 ? o.input_size : P * D;
            inputs[n++] = tu_random_tensor(2, (int64_t[]){G * H, in}, WEFT_F64, -0.7, 0.7, &seed, NULL);
            inputs[n++] = tu_random_tensor(2, (int64_t[]){G * H, P}, WEFT_F64, -0.7, 0.7, &seed, NULL);
            if (o.bias) {
                inputs[n++] = tu_random_tensor(1, (int64_t[]){G * H}, WEFT_F64, -0.5, 0.5, &seed, NULL);
                inputs[n++] = tu_random_tensor(1, (int64_t[]){G * H}, WEFT_F64, -0.5, 0.5, &seed, NULL);
            }
            if (o.proj_size)
                inputs[n++] = tu_random_tensor(2, (int64_t[]){P, H}, WEFT_F64, -0.7, 0.7, &seed, NULL);
        }
    struct gc g = {.o = o, .nweights = n, .has_c0 = o.mode == WEFT_RNN_LSTM,
                   .enforce_sorted = sorted};
    const int64_t xs[3] = {o.batch_first ? B : T, o.batch_first ? T : B, o.input_size};
    inputs[n++] = tu_random_tensor(3, xs, WEFT_F64, -1, 1, &seed, NULL);
    inputs[n++] = tu_random_tensor(3, (int64_t[]){L * D, B, P}, WEFT_F64, -0.8, 0.8, &seed, NULL);
    if (g.has_c0)
        inputs[n++] = tu_random_tensor(3, (int64_t[]){L * D, B, H}, WEFT_F64, -0.8, 0.8, &seed, NULL);
    if (len) {
        double lv[16];
        for (int64_t b = 0; b < B; b++)
            lv[b] = (double)len[b];
        g.lengths = tu_tensor(1, (int64_t[]){B}, lv, WEFT_I64);
    }
    for (int i = 0; i < n; i++)
        cr_assert_eq(weft_requires_grad_(inputs[i], true), 0);
    int rc = weft_gradcheck(gc_fn, &g, n, inputs, 1e-6, 1e-6, 1e-4);
    cr_assert_eq(rc, 0, "%s", weft_error_message());
}

Test(rnn, gradcheck_rnn_tanh_two_layers_bidirectional)
{
    struct weft_rnn_options o = weft_rnn_defaults(WEFT_RNN_TANH, 3, 4);
    o.num_layers = 2;
    o.bidirectional = true;
    run_gradcheck(o, 4, 2, NULL, true);
}

Test(rnn, gradcheck_rnn_relu_batch_first_no_bias)
{
    struct weft_rnn_options o = weft_rnn_defaults(WEFT_RNN_RELU, 3, 4);
    o.batch_first = true;
    o.bias = false;
    run_gradcheck(o, 4, 3, NULL, true);
}

Test(rnn, gradcheck_lstm_two_layers_bidirectional)
{
    struct weft_rnn_options o = weft_rnn_defaults(WEFT_RNN_LSTM, 3, 3);
    o.num_layers = 2;
    o.bidirectional = true;
    run_gradcheck(o, 4, 2, NULL, true);
}

Test(rnn, gradcheck_lstm_proj_size)
{
    struct weft_rnn_options o = weft_rnn_defaults(WEFT_RNN_LSTM, 3, 4);
    o.proj_size = 2;
    o.num_layers = 2;
    o.bidirectional = true;
    run_gradcheck(o, 3, 2, NULL, true);
}

Test(rnn, gradcheck_gru_two_layers_bidirectional)
{
    struct weft_rnn_options o = weft_rnn_defaults(WEFT_RNN_GRU, 3, 3);
    o.num_layers = 2;
    o.bidirectional = true;
    run_gradcheck(o, 4, 2, NULL, true);
}

Test(rnn, gradcheck_lstm_lengths_bidirectional)
{
    struct weft_rnn_options o = weft_rnn_defaults(WEFT_RNN_LSTM, 2, 3);
    o.bidirectional = true;
    run_gradcheck(o, 5, 3, (const int64_t[]){5, 3, 1}, true);
}

Test(rnn, gradcheck_gru_lengths_unsorted_two_layers)
{
    struct weft_rnn_options o = weft_rnn_defaults(WEFT_RNN_GRU, 2, 3);
    o.num_layers = 2;
    o.bidirectional = true;
    run_gradcheck(o, 4, 3, (const int64_t[]){2, 4, 3}, false);
}

Test(rnn, gradcheck_rnn_tanh_lengths)
{
    struct weft_rnn_options o = weft_rnn_defaults(WEFT_RNN_TANH, 2, 3);
    run_gradcheck(o, 4, 3, (const int64_t[]){4, 2, 1}, true);
}

Test(rnn, gradcheck_lstm_proj_lengths)
{
    struct weft_rnn_options o = weft_rnn_defaults(WEFT_RNN_LSTM, 2, 4);
    o.proj_size = 3;
    o.bidirectional = true;
    run_gradcheck(o, 4, 3, (const int64_t[]){4, 4, 2}, true);
}

/* ---- behaviour ---------------------------------------------------------------------------- */

Test(rnn, one_node_per_layer_and_direction)
{
    struct weft_rnn_options o = weft_rnn_defaults(WEFT_RNN_LSTM, 3, 4);
    weft_module *m = weft_nn_rnn(&o);
    cr_assert_not_null(m);
    uint64_t seed = 1;
    struct weft_rnn_input in = {
        .input = tu_random_tensor(3, (int64_t[]){5, 2, 3}, WEFT_F32, -1, 1, &seed, NULL)};
    struct weft_rnn_result r;
    cr_assert_eq(weft_nn_rnn_forward(m, &in, &r), 0, "%s", weft_error_message());
    cr_assert_str_eq(weft_grad_fn_name(r.output), "LstmLayerBackward0");
    tu_assert_shape(r.output, 3, (int64_t[]){5, 2, 4});
    tu_assert_shape(r.h_n, 3, (int64_t[]){1, 2, 4});
    tu_assert_shape(r.c_n, 3, (int64_t[]){1, 2, 4});
    weft_module_free(m);
}

Test(rnn, outputs_past_a_length_are_zero_and_h_n_is_the_last_step)
{
    struct weft_rnn_options o = weft_rnn_defaults(WEFT_RNN_GRU, 2, 3);
    weft_module *m = weft_nn_rnn(&o);
    cr_assert_not_null(m);
    uint64_t seed = 3;
    weft_tensor *x = tu_random_tensor(3, (int64_t[]){4, 2, 2}, WEFT_F32, -1, 1, &seed, NULL);
    struct weft_rnn_input in = {.input = x, .lengths = tu_tensor(1, (int64_t[]){2},
                                                                 (double[]){4, 2}, WEFT_I64),
                                .enforce_sorted = true};
    struct weft_rnn_result r;
    cr_assert_eq(weft_nn_rnn_forward(m, &in, &r), 0, "%s", weft_error_message());
    double out[4 * 2 * 3], hn[2 * 3];
    tu_read(r.output, out);
    tu_read(r.h_n, hn);
    for (int t = 2; t < 4; t++)
        for (int k = 0; k < 3; k++)
            cr_assert_eq(out[(t * 2 + 1) * 3 + k], 0.0);
    for (int k = 0; k < 3; k++) {
        cr_assert_eq(hn[3 + k], out[(1 * 2 + 1) * 3 + k]); /* row 1's step 1 */
        cr_assert_eq(hn[k], out[(3 * 2 + 0) * 3 + k]);     /* row 0's step 3 */
    }
    weft_module_free(m);
}

Test(rnn, module_names_shapes_and_repr_are_pytorchs)
{
    struct weft_rnn_options o = weft_rnn_defaults(WEFT_RNN_LSTM, 10, 20);
    o.num_layers = 2;
    o.bidirectional = true;
    o.proj_size = 5;
    o.batch_first = true;
    o.dropout = 0.5;
    weft_module *m = weft_nn_rnn(&o);
    cr_assert_not_null(m, "%s", weft_error_message());
    struct weft_named_tensor *p = NULL;
    int n = weft_module_named_parameters(m, &p);
    const char *names[] = {"weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0",
                           "weight_hr_l0", "weight_ih_l0_reverse", "weight_hh_l0_reverse",
                           "bias_ih_l0_reverse", "bias_hh_l0_reverse", "weight_hr_l0_reverse",
                           "weight_ih_l1", "weight_hh_l1", "bias_ih_l1", "bias_hh_l1",
                           "weight_hr_l1"};
    cr_assert_eq(n, 20);
    for (int i = 0; i < 15; i++)
        cr_assert_str_eq(p[i].name, names[i]);
    tu_assert_shape(p[0].tensor, 2, (int64_t[]){80, 10});
    tu_assert_shape(p[1].tensor, 2, (int64_t[]){80, 5});
    tu_assert_shape(p[4].tensor, 2, (int64_t[]){5, 20});
    tu_assert_shape(p[10].tensor, 2, (int64_t[]){80, 10}); /* layer 1 reads 2 * proj_size */
    /* uniform on [-1/sqrt(20), 1/sqrt(20)] */
    double v[80 * 10];
    tu_read(p[0].tensor, v);
    double lo = 1, hi = -1;
    for (int i = 0; i < 800; i++) {
        lo = v[i] < lo ? v[i] : lo;
        hi = v[i] > hi ? v[i] : hi;
    }
    cr_assert(lo >= -1 / sqrt(20.0) && hi <= 1 / sqrt(20.0) && hi - lo > 0.3);
    free(p);
    char *repr = weft_module_repr(m);
    cr_assert_str_eq(repr, "LSTM(10, 20, proj_size=5, num_layers=2, batch_first=True, "
                           "dropout=0.5, bidirectional=True)");
    free(repr);
    weft_module_free(m);
}

static weft_module *from_ini(const char *type, const char *const *kv)
{
    weft_options *o = weft_options_new("layer.rnn", "test.ini");
    cr_assert_not_null(o);
    for (int i = 0; kv[i]; i += 2)
        cr_assert_eq(weft_options_set(o, kv[i], kv[i + 1]), 0);
    weft_module *m = weft_module_create(type, o);
    weft_options_free(o);
    return m;
}

Test(rnn, ini_lstm_with_output_last_feeds_a_linear)
{
    const char *kv[] = {"input_size", "3", "hidden_size", "4", "bidirectional", "true",
                        "batch_first", "true", "num_layers", "2", "output", "last", NULL};
    weft_module *seq[2] = {from_ini("lstm", kv), weft_nn_linear(8, 2, true)};
    cr_assert_not_null(seq[0], "%s", weft_error_message());
    weft_module *model = weft_nn_sequential(2, seq);
    cr_assert_not_null(model);
    uint64_t seed = 5;
    weft_tensor *x = tu_random_tensor(3, (int64_t[]){6, 7, 3}, WEFT_F32, -1, 1, &seed, NULL);
    weft_tensor *y = weft_module_forward(model, x);
    cr_assert_not_null(y, "%s", weft_error_message());
    tu_assert_shape(y, 2, (int64_t[]){6, 2});
    cr_assert_eq(weft_backward(weft_sum(y, 0, NULL, false), NULL, false), 0);
    cr_assert_not_null(weft_grad(weft_module_parameter(weft_module_child(model, "0"),
                                                       "weight_hh_l1_reverse")));
    weft_module_free(model);
}

Test(rnn, ini_rnn_relu_and_gru_sequence_output)
{
    const char *kv[] = {"input_size", "3", "hidden_size", "4", "nonlinearity", "relu", NULL};
    weft_module *m = from_ini("rnn", kv);
    cr_assert_not_null(m, "%s", weft_error_message());
    cr_assert_eq(weft_nn_rnn_options(m)->mode, WEFT_RNN_RELU);
    char *repr = weft_module_repr(m);
    cr_assert_str_eq(repr, "RNN(3, 4, nonlinearity=relu)");
    free(repr);
    weft_module_free(m);
    const char *kg[] = {"input_size", "3", "hidden_size", "4", NULL};
    m = from_ini("gru", kg);
    cr_assert_not_null(m, "%s", weft_error_message());
    uint64_t seed = 9;
    weft_tensor *y = weft_module_forward(
        m, tu_random_tensor(3, (int64_t[]){5, 2, 3}, WEFT_F32, -1, 1, &seed, NULL));
    tu_assert_shape(y, 3, (int64_t[]){5, 2, 4});
    weft_module_free(m);
}

Test(rnn, ini_bad_values_name_the_key)
{
    const char *bad_nl[] = {"input_size", "3", "hidden_size", "4", "nonlinearity", "sigmoid",
                            NULL};
    cr_assert_null(from_ini("rnn", bad_nl));
    tu_assert_error(WEFT_ERR_CONFIG, "nonlinearity");
    const char *bad_proj[] = {"input_size", "3", "hidden_size", "4", "proj_size", "4", NULL};
    cr_assert_null(from_ini("lstm", bad_proj));
    tu_assert_error(WEFT_ERR_CONFIG, "proj_size");
    const char *missing[] = {"input_size", "3", NULL};
    cr_assert_null(from_ini("gru", missing));
    tu_assert_error(WEFT_ERR_CONFIG, "hidden_size");
}

/* ---- errors, in PyTorch's words ------------------------------------------------------------ */

static void expected_error(const char *key, char *buf, size_t size)
{
    FILE *f = open_fixture("errors.txt");
    char line[1024];
    size_t n = strlen(key);
    buf[0] = 0;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, n) == 0 && line[n] == '\t') {
            snprintf(buf, size, "%s", line + n + 1);
            buf[strcspn(buf, "\n")] = 0;
        }
    fclose(f);
    cr_assert(buf[0], "no error %s in errors.txt", key);
}

static void assert_pytorch_error(const char *key, int rc)
{
    char want[1024];
    expected_error(key, want, sizeof want);
    cr_assert_lt(rc, 0, "%s: no error", key);
    cr_assert_str_eq(weft_error_message(), want, "%s", key);
    weft_error_clear();
}

static weft_tensor *zeros3(int64_t a, int64_t b, int64_t c)
{
    return weft_zeros(3, (int64_t[]){a, b, c}, WEFT_F32, WEFT_CPU);
}

static int call(weft_module *m, weft_tensor *x, weft_tensor *h0, weft_tensor *c0,
                weft_tensor *lengths)
{
    struct weft_rnn_input in = {.input = x, .h0 = h0, .c0 = c0, .lengths = lengths,
                                .enforce_sorted = true};
    struct weft_rnn_result r;
    return weft_nn_rnn_forward(m, &in, &r);
}

Test(rnn, bad_input_gives_pytorchs_errors)
{
    struct weft_rnn_options ol = weft_rnn_defaults(WEFT_RNN_LSTM, 4, 3), og = ol, orr = ol;
    ol.num_layers = 2;
    og.mode = WEFT_RNN_GRU;
    orr.mode = WEFT_RNN_TANH;
    orr.bidirectional = true;
    weft_module *lstm = weft_nn_rnn(&ol), *gru = weft_nn_rnn(&og), *rnn = weft_nn_rnn(&orr);
    cr_assert(lstm && gru && rnn);
    weft_tensor *x = zeros3(5, 2, 4);
    assert_pytorch_error("input_size", call(lstm, zeros3(5, 2, 3), NULL, NULL, NULL));
    assert_pytorch_error(
        "input_dims",
        call(gru, weft_zeros(4, (int64_t[]){5, 2, 2, 4}, WEFT_F32, WEFT_CPU), NULL, NULL, NULL));
    assert_pytorch_error("lstm_h0_shape", call(lstm, x, zeros3(2, 3, 3), zeros3(2, 2, 3), NULL));
    assert_pytorch_error("lstm_c0_shape", call(lstm, x, zeros3(2, 2, 3), zeros3(1, 2, 3), NULL));
    assert_pytorch_error("gru_h0_shape", call(gru, x, zeros3(2, 2, 3), NULL, NULL));
    assert_pytorch_error("rnn_h0_shape", call(rnn, x, zeros3(1, 2, 3), NULL, NULL));
    weft_tensor *z2 = weft_zeros(2, (int64_t[]){2, 3}, WEFT_F32, WEFT_CPU);
    assert_pytorch_error("rnn_h0_dims", call(rnn, x, z2, NULL, NULL));
    assert_pytorch_error("rnn_unbatched_h0_dims",
                         call(rnn, weft_zeros(2, (int64_t[]){5, 4}, WEFT_F32, WEFT_CPU),
                              zeros3(2, 1, 3), NULL, NULL));
    assert_pytorch_error("lstm_h0_dims", call(lstm, x, z2, z2, NULL));
    assert_pytorch_error("dtype", call(lstm, weft_zeros(3, (int64_t[]){5, 2, 4}, WEFT_F64,
                                                        WEFT_CPU), NULL, NULL, NULL));
    assert_pytorch_error("empty", call(lstm, zeros3(0, 2, 4), NULL, NULL, NULL));
    weft_tensor *l35 = tu_tensor(1, (int64_t[]){2}, (double[]){3, 5}, WEFT_I64);
    weft_tensor *l50 = tu_tensor(1, (int64_t[]){2}, (double[]){5, 0}, WEFT_I64);
    weft_tensor *l543 = tu_tensor(1, (int64_t[]){3}, (double[]){5, 4, 3}, WEFT_I64);
    weft_tensor *l2d = tu_tensor(2, (int64_t[]){1, 2}, (double[]){5, 4}, WEFT_I64);
    assert_pytorch_error("lengths_unsorted", call(gru, x, NULL, NULL, l35));
    assert_pytorch_error("lengths_zero", call(gru, x, NULL, NULL, l50));
    assert_pytorch_error("lengths_count", call(gru, x, NULL, NULL, l543));
    assert_pytorch_error("lengths_dims", call(gru, x, NULL, NULL, l2d));
    /* PyTorch packs a length past the input's end without a word; weft refuses it */
    weft_tensor *l65 = tu_tensor(1, (int64_t[]){2}, (double[]){6, 5}, WEFT_I64);
    cr_assert_lt(call(gru, x, NULL, NULL, l65), 0);
    tu_assert_error(WEFT_ERR_RUNTIME, "a length of 6 is longer than the input's 5 steps");
    weft_module_free(lstm);
    weft_module_free(gru);
    weft_module_free(rnn);
}

Test(rnn, bad_options_give_pytorchs_errors)
{
    struct weft_rnn_options o = weft_rnn_defaults(WEFT_RNN_LSTM, 4, 3);
    o.proj_size = 3;
    assert_pytorch_error("proj_too_big", weft_nn_rnn(&o) ? 0 : -1);
    o = weft_rnn_defaults(WEFT_RNN_GRU, 4, 3);
    o.proj_size = 2;
    assert_pytorch_error("proj_not_lstm", weft_nn_rnn(&o) ? 0 : -1);
    o = weft_rnn_defaults(WEFT_RNN_LSTM, 4, 3);
    o.dropout = 1.5;
    assert_pytorch_error("dropout_range", weft_nn_rnn(&o) ? 0 : -1);
    /* sizes from a config: the gates' 4 x hidden_size must fit int64 (it overflowed) */
    o = weft_rnn_defaults(WEFT_RNN_LSTM, 4, INT64_C(1) << 62);
    cr_assert_null(weft_nn_rnn(&o));
    tu_assert_error(WEFT_ERR_VALUE, "LSTM: input_size = 4 and hidden_size = 4611686018427387904: "
                                    "expected sizes below 2^61");
}
