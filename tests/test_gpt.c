/* tests/test_gpt.c: nanoGPT's GPT (weft/gpt.h) against PyTorch, llm.c's way.
 *
 * tests/fixtures/gpt-tiny*.safetensors were written by scripts/make-gpt-fixture.py from a
 * plain-PyTorch nanoGPT (2 layers, 2 heads, 16 wide, block 8, vocab 37): its float32
 * weights, one batch, and in float64 the logits, the loss, every gradient and every
 * parameter after one AdamW step with nanoGPT's parameter groups. weft loads the weights
 * and must reproduce them; tolerances (|weft - torch| <= atol + rtol * |torch|):
 *     float32 model: rtol 1e-5, atol 1e-6 (logits, loss, gradients; measured: 2e-7 at most)
 *                    rtol 1e-4, atol 1e-5 (parameters after AdamW; measured 6e-7: its first
 *                    step is lr * g / (|g| + eps), where float32 rounding of a tiny g shows)
 *     float64 model: rtol 1e-9, atol 1e-12 (everything; measured 1e-15)
 * Then the module tree, the tie, the config round trip, the KV cache against the full
 * forward, reproducibility from a seed and the errors. No PyTorch is needed here. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <weft/version.h>

#include "testutil.h"

#include <weft/gpt.h>
#include <weft/nn.h>

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

TestSuite(gpt, .init = setup, .fini = teardown);

/* ---- helpers -------------------------------------------------------------------------- */

struct fixture {
    struct weft_tensor_dict *d;
    struct weft_metadata *meta;
};

static struct fixture load_fixture(const char *name)
{
    const char *dir = getenv("WEFT_TEST_SOURCE_DIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/fixtures/%s", dir ? dir : "tests", name);
    struct fixture f = {0};
    cr_assert_eq(weft_safetensors_load(path, WEFT_CPU, &f.d, &f.meta), 0, "%s",
                 weft_error_message());
    return f;
}

static void free_fixture(struct fixture *f)
{
    weft_tensor_dict_free(f->d);
    weft_metadata_free(f->meta);
}

static weft_tensor *get(const struct fixture *f, const char *prefix, const char *name)
{
    char key[200];
    snprintf(key, sizeof key, "%s%s", prefix, name);
    weft_tensor *t = weft_tensor_dict_get(f->d, key);
    cr_assert_not_null(t, "the fixture has no '%s'", key);
    return t;
}

/* The model the fixture's metadata describes (through weft_module_create("gpt", ...)). */
static weft_module *fixture_model(const struct fixture *f)
{
    weft_module *m = weft_module_create_from_metadata(f->meta, "fixture");
    cr_assert_not_null(m, "%s", weft_error_message());
    return m;
}

/* The "model.*" entries of the fixture without the prefix: nanoGPT's state_dict. */
static struct weft_tensor_dict *torch_state_dict(const struct fixture *f)
{
    struct weft_tensor_dict *sd = weft_tensor_dict_new();
    cr_assert_not_null(sd);
    for (size_t i = 0; i < weft_tensor_dict_len(f->d); i++) {
        const char *key = weft_tensor_dict_name(f->d, i);
        if (strncmp(key, "model.", 6) == 0)
            cr_assert_eq(weft_tensor_dict_add(sd, key + 6, weft_tensor_dict_at(f->d, i)), 0);
    }
    return sd;
}

/* The fixture's model with PyTorch's weights, in dtype. */
static weft_module *loaded_model(const struct fixture *f, enum weft_dtype dtype)
{
    weft_module *m = fixture_model(f);
    cr_assert_eq(weft_module_to(m, WEFT_CPU, dtype), 0, "%s", weft_error_message());
    struct weft_tensor_dict *sd = torch_state_dict(f);
    cr_assert_eq(weft_module_load_state_dict(m, sd, true), 0, "%s", weft_error_message());
    weft_tensor_dict_free(sd);
    return m;
}

/* Asserts |got - want| <= atol + rtol * |want| everywhere; returns the largest |got - want|. */
static double assert_close(const char *what, const weft_tensor *got, const weft_tensor *want,
                           double rtol, double atol)
{
    cr_assert_not_null(got, "%s: %s", what, weft_error_message());
    int64_t n = weft_tensor_numel(want);
    cr_assert_eq(weft_tensor_numel(got), n, "%s: %lld elements, expected %lld", what,
                 (long long)weft_tensor_numel(got), (long long)n);
    double *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b);
    cr_assert(a && b);
    tu_read(got, a);
    tu_read(want, b);
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double err = fabs(a[i] - b[i]);
        cr_assert(err <= atol + rtol * fabs(b[i]), "%s[%lld]: weft %.10g, torch %.10g", what,
                  (long long)i, a[i], b[i]);
        worst = err > worst ? err : worst;
    }
    free(a);
    free(b);
    return worst;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static struct weft_gpt_config tiny_config(void)
{
    struct weft_gpt_config c = weft_gpt_config_default();
    c.n_layer = 2, c.n_head = 2, c.n_embd = 16, c.block_size = 8, c.vocab_size = 37;
    return c;
}

static weft_tensor *tokens(int64_t B, int64_t T, int64_t vocab, uint64_t seed)
{
    int64_t *v = malloc((size_t)(B * T) * sizeof *v);
    cr_assert_not_null(v);
    for (int64_t i = 0; i < B * T; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        v[i] = (int64_t)((seed >> 33) % (uint64_t)vocab);
    }
    weft_tensor *t = weft_from_host(v, 2, (int64_t[]){B, T}, WEFT_I64, WEFT_CPU);
    free(v);
    return t;
}

/* ---- against PyTorch ------------------------------------------------------------------ */

Test(gpt, state_dict_has_nanogpts_names_shapes_and_order)
{
    struct fixture f = load_fixture("gpt-tiny.safetensors");
    weft_module *m = fixture_model(&f);
    struct weft_tensor_dict *mine = weft_module_state_dict(m);
    struct weft_tensor_dict *theirs = torch_state_dict(&f);
    cr_assert_not_null(mine, "%s", weft_error_message());
    cr_assert_eq(weft_tensor_dict_len(mine), weft_tensor_dict_len(theirs), "%zu keys, torch %zu",
                 weft_tensor_dict_len(mine), weft_tensor_dict_len(theirs));
    for (size_t i = 0; i < weft_tensor_dict_len(mine); i++) {
        cr_assert_str_eq(weft_tensor_dict_name(mine, i), weft_tensor_dict_name(theirs, i));
        weft_tensor *a = weft_tensor_dict_at(mine, i), *b = weft_tensor_dict_at(theirs, i);
        tu_assert_shape(a, b->ndim, b->shape);
    }
    cr_assert_str_eq(weft_tensor_dict_name(mine, 0), "transformer.wte.weight");
    cr_assert_str_eq(weft_tensor_dict_name(mine, weft_tensor_dict_len(mine) - 1),
                     "lm_head.weight");
    weft_tensor_dict_free(mine);
    weft_tensor_dict_free(theirs);
    weft_module_free(m);
    free_fixture(&f);
}

Test(gpt, bias_false_has_no_bias_parameters_as_nanogpt)
{
    struct fixture f = load_fixture("gpt-tiny-nobias-tanh.safetensors");
    weft_module *m = fixture_model(&f);
    struct weft_named_tensor *p;
    int n = weft_module_named_parameters(m, &p);
    for (int i = 0; i < n; i++)
        cr_assert(!ends_with(p[i].name, ".bias"), "unexpected %s", p[i].name);
    struct weft_tensor_dict *theirs = torch_state_dict(&f);
    cr_assert_eq(weft_module_load_state_dict(m, theirs, true), 0, "%s", weft_error_message());
    free(p);
    weft_tensor_dict_free(theirs);
    weft_module_free(m);
    free_fixture(&f);
}

Test(gpt, the_tied_weight_is_one_parameter_under_two_state_dict_keys)
{
    struct fixture f = load_fixture("gpt-tiny.safetensors");
    weft_module *m = fixture_model(&f);
    int64_t torch_count;
    cr_assert_eq(weft_metadata_get_int(f.meta, "num_parameters", &torch_count), 0);
    cr_assert_eq(weft_module_num_parameters(m), torch_count, "%lld parameters, torch %lld",
                 (long long)weft_module_num_parameters(m), (long long)torch_count);
    cr_assert_eq(torch_count, 7312);

    struct weft_named_tensor *p;
    int n = weft_module_named_parameters(m, &p);
    struct weft_tensor_dict *sd = weft_module_state_dict(m);
    cr_assert_eq((size_t)n + 1, weft_tensor_dict_len(sd), "named_parameters lists the tie once");
    for (int i = 0; i < n; i++)
        cr_assert_str_neq(p[i].name, "lm_head.weight");
    weft_tensor *wte = weft_tensor_dict_get(sd, "transformer.wte.weight");
    weft_tensor *head = weft_tensor_dict_get(sd, "lm_head.weight");
    cr_assert(wte && head);
    cr_assert_eq(weft_tensor_data(wte), weft_tensor_data(head), "one storage, two keys");
    free(p);
    weft_tensor_dict_free(sd);
    weft_module_free(m);
    free_fixture(&f);
}

/* Forward, loss and backward of the fixture's batch; logits, loss and every gradient
 * against PyTorch's. */
static void check_forward_backward(const char *file, enum weft_dtype dtype, double rtol,
                                   double atol)
{
    struct fixture f = load_fixture(file);
    weft_module *m = loaded_model(&f, dtype);
    weft_tensor *logits = weft_module_forward(m, get(&f, "", "x"));
    weft_tensor *loss = weft_gpt_loss(logits, get(&f, "", "y"));
    cr_assert_not_null(loss, "%s", weft_error_message());
    double e_logits = assert_close("logits", logits, get(&f, "", "logits"), rtol, atol);
    double e_loss = assert_close("loss", loss, get(&f, "", "loss"), rtol, atol);
    cr_assert_eq(weft_backward(loss, NULL, false), 0, "%s", weft_error_message());

    struct weft_named_tensor *p;
    int n = weft_module_named_parameters(m, &p);
    double e_grad = 0;
    for (int i = 0; i < n; i++) {
        weft_tensor *g = weft_grad(p[i].tensor);
        cr_assert_not_null(g, "%s has no gradient", p[i].name);
        double e = assert_close(p[i].name, g, get(&f, "grad.", p[i].name), rtol, atol);
        e_grad = e > e_grad ? e : e_grad;
    }
    cr_log_info("%s %s: max |weft - torch|: logits %.3g, loss %.3g, gradients %.3g", file,
                weft_dtype_name(dtype), e_logits, e_loss, e_grad);
    free(p);
    weft_module_free(m);
    free_fixture(&f);
}

Test(gpt, logits_loss_and_gradients_match_pytorch_in_float32)
{
    check_forward_backward("gpt-tiny.safetensors", WEFT_F32, 1e-5, 1e-6);
}

Test(gpt, logits_loss_and_gradients_match_pytorch_in_float64)
{
    check_forward_backward("gpt-tiny.safetensors", WEFT_F64, 1e-9, 1e-12);
}

Test(gpt, without_bias_and_with_tanh_gelu_they_match_too)
{
    check_forward_backward("gpt-tiny-nobias-tanh.safetensors", WEFT_F32, 1e-5, 1e-6);
    check_forward_backward("gpt-tiny-nobias-tanh.safetensors", WEFT_F64, 1e-9, 1e-12);
}

/* nanoGPT's configure_optimizers as two weft optimizers (the same arithmetic as PyTorch's
 * two parameter groups): weight decay 0.1 on dim >= 2, 0 on the rest. */
static void check_adamw_step(const char *file, enum weft_dtype dtype, double rtol, double atol)
{
    struct fixture f = load_fixture(file);
    weft_module *m = loaded_model(&f, dtype);
    weft_tensor *loss = weft_gpt_loss(weft_module_forward(m, get(&f, "", "x")), get(&f, "", "y"));
    cr_assert_eq(weft_backward(loss, NULL, false), 0, "%s", weft_error_message());

    struct weft_named_tensor *p;
    int n = weft_module_named_parameters(m, &p);
    weft_tensor **groups[2];
    int counts[2] = {0, 0};
    groups[0] = malloc((size_t)n * sizeof(weft_tensor *));
    groups[1] = malloc((size_t)n * sizeof(weft_tensor *));
    cr_assert(groups[0] && groups[1]);
    for (int i = 0; i < n; i++) {
        int g = p[i].tensor->ndim >= 2 ? 0 : 1;
        groups[g][counts[g]++] = p[i].tensor;
    }
    cr_assert(counts[0] > 0 && counts[1] > 0);
    const char *decay[2] = {"0.1", "0.0"};
    for (int g = 0; g < 2; g++) {
        weft_options *o = weft_options_new("optim", NULL);
        cr_assert_not_null(o);
        weft_options_set(o, "lr", "1e-3");
        weft_options_set(o, "betas", "0.9, 0.95");
        weft_options_set(o, "eps", "1e-8");
        weft_options_set(o, "weight_decay", decay[g]);
        weft_optimizer *opt = weft_optimizer_create("adamw", counts[g], groups[g], o);
        cr_assert_not_null(opt, "%s", weft_error_message());
        cr_assert_eq(weft_optimizer_step(opt), 0, "%s", weft_error_message());
        weft_optimizer_free(opt);
        weft_options_free(o);
    }
    double worst = 0;
    for (int i = 0; i < n; i++) {
        double e = assert_close(p[i].name, p[i].tensor, get(&f, "after.", p[i].name), rtol, atol);
        worst = e > worst ? e : worst;
    }
    cr_log_info("%s %s: parameters after AdamW, max |weft - torch| %.3g", file,
                weft_dtype_name(dtype), worst);
    free(groups[0]);
    free(groups[1]);
    free(p);
    weft_module_free(m);
    free_fixture(&f);
}

Test(gpt, one_adamw_step_with_nanogpts_groups_matches_pytorch)
{
    check_adamw_step("gpt-tiny.safetensors", WEFT_F32, 1e-4, 1e-5);
    check_adamw_step("gpt-tiny.safetensors", WEFT_F64, 1e-9, 1e-12);
    check_adamw_step("gpt-tiny-nobias-tanh.safetensors", WEFT_F32, 1e-4, 1e-5);
}

/* ---- generation with the KV cache ------------------------------------------------------ */

/* Cached logits of positions [from, from + n) against the full forward's. */
static void assert_same_positions(weft_tensor *cached, weft_tensor *full, int64_t from, int64_t n,
                                  const char *what)
{
    weft_tensor *want = weft_narrow(full, 1, from, n);
    assert_close(what, cached, weft_contiguous(want), 1e-5, 1e-6);
}

Test(gpt, cached_generation_gives_the_full_forwards_logits_at_every_step)
{
    struct fixture f = load_fixture("gpt-tiny.safetensors");
    weft_module *m = loaded_model(&f, WEFT_F32);
    weft_module_train(m, false);
    weft_tensor *x = weft_narrow(get(&f, "", "x"), 0, 0, 2); /* [2, 8] */
    weft_tensor *full = weft_module_forward(m, weft_contiguous(x));
    cr_assert_not_null(full, "%s", weft_error_message());

    /* A prompt of 3, then one token at a time. */
    weft_gpt_cache *cache = weft_gpt_cache_new(m, 2, 8);
    cr_assert_not_null(cache, "%s", weft_error_message());
    weft_tensor *out = weft_gpt_forward_cached(m, cache, weft_contiguous(weft_narrow(x, 1, 0, 3)));
    assert_same_positions(out, full, 0, 3, "prompt");
    cr_assert(!weft_requires_grad(out), "generation records no history");
    for (int64_t t = 3; t < 8; t++) {
        out = weft_gpt_forward_cached(m, cache, weft_contiguous(weft_narrow(x, 1, t, 1)));
        char what[32];
        snprintf(what, sizeof what, "step %lld", (long long)t);
        assert_same_positions(out, full, t, 1, what);
        cr_assert_eq(weft_gpt_cache_len(cache), t + 1);
    }

    /* After a reset, chunks of 2 and 3 after a prompt (the bottom-right causal mask). */
    weft_gpt_cache_reset(cache);
    int64_t cuts[] = {0, 3, 5, 8};
    for (int i = 0; i < 3; i++) {
        int64_t n = cuts[i + 1] - cuts[i];
        out = weft_gpt_forward_cached(m, cache, weft_contiguous(weft_narrow(x, 1, cuts[i], n)));
        assert_same_positions(out, full, cuts[i], n, "chunk");
    }
    weft_gpt_cache_free(cache);
    weft_module_free(m);
    free_fixture(&f);
}

Test(gpt, a_full_cache_and_a_wrong_batch_are_errors)
{
    struct weft_gpt_config c = tiny_config();
    weft_module *m = weft_gpt_new(&c);
    cr_assert_not_null(m, "%s", weft_error_message());
    cr_assert_null(weft_gpt_cache_new(m, 1, 9));
    tu_assert_error(WEFT_ERR_VALUE, "max_len <= block_size (8)");
    weft_gpt_cache *cache = weft_gpt_cache_new(m, 1, 4);
    cr_assert_not_null(cache);
    cr_assert_not_null(weft_gpt_forward_cached(m, cache, tokens(1, 3, 37, 1)));
    cr_assert_null(weft_gpt_forward_cached(m, cache, tokens(1, 2, 37, 2)));
    tu_assert_error(WEFT_ERR_VALUE, "Cannot forward sequence of length 2, the KV cache has room "
                                    "only for 1");
    cr_assert_eq(weft_gpt_cache_len(cache), 3, "a failed call leaves the cache as it was");
    cr_assert_null(weft_gpt_forward_cached(m, cache, tokens(2, 1, 37, 3)));
    tu_assert_error(WEFT_ERR_VALUE, "idx has batch size 2, the cache 1");
    weft_gpt_cache_free(cache);
    weft_module_free(m);
}

/* ---- construction -------------------------------------------------------------------- */

Test(gpt, the_same_seed_builds_the_same_model)
{
    struct weft_gpt_config c = tiny_config();
    weft_manual_seed(7);
    weft_module *a = weft_gpt_new(&c);
    weft_manual_seed(7);
    weft_module *b = weft_gpt_new(&c);
    weft_manual_seed(8);
    weft_module *d = weft_gpt_new(&c);
    cr_assert(a && b && d, "%s", weft_error_message());
    struct weft_named_tensor *pa, *pb, *pd;
    int n = weft_module_named_parameters(a, &pa);
    cr_assert_eq(weft_module_named_parameters(b, &pb), n);
    cr_assert_eq(weft_module_named_parameters(d, &pd), n);
    bool any_differs = false;
    for (int i = 0; i < n; i++) {
        assert_close(pa[i].name, pb[i].tensor, pa[i].tensor, 0, 0);
        weft_tensor *diff = weft_max(weft_abs(weft_sub(pa[i].tensor, pd[i].tensor)));
        double v;
        cr_assert_eq(weft_tensor_item(diff, &v), 0);
        any_differs |= v > 0;
    }
    cr_assert(any_differs, "another seed gives other weights");
    weft_tensor *x = tokens(2, 8, 37, 5);
    assert_close("logits", weft_module_forward(a, x), weft_module_forward(b, x), 0, 0);
    free(pa);
    free(pb);
    free(pd);
    weft_module_free(a);
    weft_module_free(b);
    weft_module_free(d);
}

/* mean and standard deviation of t's elements. */
static void moments(const weft_tensor *t, double *mean, double *std)
{
    int64_t n = weft_tensor_numel(t);
    double *v = malloc((size_t)n * sizeof *v), s = 0, ss = 0;
    cr_assert_not_null(v);
    tu_read(t, v);
    for (int64_t i = 0; i < n; i++)
        s += v[i];
    *mean = s / (double)n;
    for (int64_t i = 0; i < n; i++)
        ss += (v[i] - *mean) * (v[i] - *mean);
    *std = sqrt(ss / (double)n);
    free(v);
}

Test(gpt, initialisation_is_gpt2s)
{
    struct weft_gpt_config c = tiny_config();
    c.n_layer = 4, c.n_embd = 64, c.n_head = 4, c.block_size = 32, c.vocab_size = 256;
    weft_manual_seed(1);
    weft_module *m = weft_gpt_new(&c);
    cr_assert_not_null(m, "%s", weft_error_message());
    struct weft_named_tensor *p;
    int n = weft_module_named_parameters(m, &p);
    for (int i = 0; i < n; i++) {
        double mean, std;
        moments(p[i].tensor, &mean, &std);
        if (ends_with(p[i].name, ".bias")) {
            cr_assert(mean == 0 && std == 0, "%s: zeros", p[i].name);
        } else if (strstr(p[i].name, "ln_")) {
            cr_assert(mean == 1 && std == 0, "%s: ones", p[i].name);
        } else {
            double want = ends_with(p[i].name, "c_proj.weight") ? 0.02 / sqrt(8.0) : 0.02;
            cr_assert(fabs(std - want) < 0.1 * want && fabs(mean) < 0.2 * want,
                      "%s: std %g, expected %g", p[i].name, std, want);
        }
    }
    free(p);
    weft_module_free(m);
}

Test(gpt, repr_is_nanogpts_module_tree)
{
    struct weft_gpt_config c = tiny_config();
    c.n_layer = 1, c.gelu = WEFT_GELU_TANH;
    weft_module *m = weft_gpt_new(&c);
    char *text = weft_module_repr(m);
    cr_assert_not_null(text, "%s", weft_error_message());
    cr_assert_str_eq(text,
                     "GPT(\n"
                     "  (transformer): ModuleDict(\n"
                     "    (wte): Embedding(37, 16)\n"
                     "    (wpe): Embedding(8, 16)\n"
                     "    (drop): Dropout(p=0.0, inplace=False)\n"
                     "    (h): ModuleList(\n"
                     "      (0): Block(\n"
                     "        (ln_1): LayerNorm()\n"
                     "        (attn): CausalSelfAttention(\n"
                     "          (c_attn): Linear(in_features=16, out_features=48, bias=True)\n"
                     "          (c_proj): Linear(in_features=16, out_features=16, bias=True)\n"
                     "          (attn_dropout): Dropout(p=0.0, inplace=False)\n"
                     "          (resid_dropout): Dropout(p=0.0, inplace=False)\n"
                     "        )\n"
                     "        (ln_2): LayerNorm()\n"
                     "        (mlp): MLP(\n"
                     "          (c_fc): Linear(in_features=16, out_features=64, bias=True)\n"
                     "          (gelu): GELU(approximate='tanh')\n"
                     "          (c_proj): Linear(in_features=64, out_features=16, bias=True)\n"
                     "          (dropout): Dropout(p=0.0, inplace=False)\n"
                     "        )\n"
                     "      )\n"
                     "    )\n"
                     "    (ln_f): LayerNorm()\n"
                     "  )\n"
                     "  (lm_head): Linear(in_features=16, out_features=37, bias=False)\n"
                     ")");
    free(text);
    weft_module_free(m);
}

Test(gpt, dropout_acts_in_training_only)
{
    struct weft_gpt_config c = tiny_config();
    c.dropout = 0.5;
    weft_module *m = weft_gpt_new(&c);
    weft_tensor *x = tokens(2, 8, 37, 9);
    weft_tensor *a = weft_module_forward(m, x), *b = weft_module_forward(m, x);
    double v;
    cr_assert_eq(weft_tensor_item(weft_max(weft_abs(weft_sub(a, b))), &v), 0);
    cr_assert(v > 0, "two training forwards draw different masks");
    weft_module_train(m, false);
    assert_close("eval", weft_module_forward(m, x), weft_module_forward(m, x), 0, 0);
    weft_module_free(m);
}

/* The block is differentiable in float64 as finite differences say (input and weights
 * through the module). */
static weft_tensor *block_fn(void *ctx, weft_tensor *const *inputs)
{
    return weft_module_forward(ctx, inputs[0]);
}

Test(gpt, a_block_passes_gradcheck)
{
    struct weft_gpt_config c = tiny_config();
    c.n_embd = 8;
    weft_module *m = weft_gpt_new(&c);
    cr_assert_eq(weft_module_to(m, WEFT_CPU, WEFT_F64), 0);
    weft_module *block = weft_module_child(
        weft_module_child(weft_module_child(m, "transformer"), "h"), "1");
    cr_assert_not_null(block);
    weft_tensor *x = weft_randn(3, (int64_t[]){2, 5, 8}, WEFT_F64, WEFT_CPU);
    cr_assert_eq(weft_requires_grad_(x, true), 0);
    cr_assert_eq(weft_gradcheck(block_fn, block, 1, &x, 1e-6, 1e-7, 1e-5), 0, "%s",
                 weft_error_message());
    weft_module_free(m);
}

/* ---- configuration ------------------------------------------------------------------- */

Test(gpt, config_export_and_create_from_metadata_round_trip)
{
    struct weft_gpt_config c = tiny_config();
    c.bias = false, c.gelu = WEFT_GELU_TANH, c.dropout = 0.1;
    weft_module *m = weft_gpt_new(&c);
    struct weft_metadata *meta = weft_metadata_new();
    cr_assert_eq(weft_module_config_export(m, meta), 0, "%s", weft_error_message());
    cr_assert_str_eq(weft_metadata_get(meta, "model.type"), "gpt");
    cr_assert_str_eq(weft_metadata_get(meta, "model.n_layer"), "2");
    cr_assert_str_eq(weft_metadata_get(meta, "model.n_embd"), "16");
    cr_assert_str_eq(weft_metadata_get(meta, "model.bias"), "false");
    cr_assert_str_eq(weft_metadata_get(meta, "model.gelu"), "tanh");
    weft_module *back = weft_module_create_from_metadata(meta, "ckpt.safetensors");
    cr_assert_not_null(back, "%s", weft_error_message());
    const struct weft_gpt_config *d = weft_gpt_config_of(back);
    cr_assert_not_null(d);
    cr_assert(d->n_layer == 2 && d->n_head == 2 && d->n_embd == 16 && d->block_size == 8 &&
              d->vocab_size == 37 && d->dropout == 0.1 && !d->bias && d->gelu == WEFT_GELU_TANH);
    weft_module_free(back);
    weft_module_free(m);
    weft_metadata_free(meta);

    /* A type without config_export writes its type only. */
    weft_module *lin = weft_nn_linear(2, 3, true);
    meta = weft_metadata_new();
    cr_assert_eq(weft_module_config_export(lin, meta), 0);
    cr_assert_eq(weft_metadata_len(meta), 1);
    cr_assert_str_eq(weft_metadata_get(meta, "model.type"), "linear");
    weft_module_free(lin);
    weft_metadata_free(meta);

    meta = weft_metadata_new();
    cr_assert_null(weft_module_create_from_metadata(meta, "ckpt.safetensors"));
    tu_assert_error(WEFT_ERR_VALUE, "ckpt.safetensors: the checkpoint has no model config");
    weft_metadata_free(meta);
}

/* [model] type = gpt with the given extra lines must fail with code and text. */
static void config_fails(const char *lines, int code, const char *text)
{
    char ini[1024];
    snprintf(ini, sizeof ini, "[model]\ntype = gpt\n%s", lines);
    tu_tmpdir_create("gpt");
    struct weft_config *cfg = tu_config(ini);
    weft_module *m = weft_model_from_config(cfg);
    if (m) { /* built: then the unknown-key check must refuse it, as weft-train does */
        int rc = weft_config_check_unknown(cfg);
        weft_module_free(m);
        cr_assert_lt(rc, 0, "%s should fail", lines);
    }
    tu_assert_error(code, text);
    tu_tmpdir_remove();
}

Test(gpt, an_ini_file_builds_it_with_nanogpts_keys)
{
    tu_tmpdir_create("gpt");
    struct weft_config *cfg = tu_config("[model]\ntype = gpt\nn_layer = 3\nn_head = 4\n"
                                        "n_embd = 32\nblock_size = 16\nvocab_size = 256\n"
                                        "dropout = 0.2\nbias = false\ngelu = tanh\n");
    weft_module *m = weft_model_from_config(cfg);
    cr_assert_not_null(m, "%s", weft_error_message());
    const struct weft_gpt_config *c = weft_gpt_config_of(m);
    cr_assert_not_null(c);
    cr_assert(c->n_layer == 3 && c->n_head == 4 && c->n_embd == 32 && c->block_size == 16 &&
              c->vocab_size == 256 && c->dropout == 0.2 && !c->bias && c->gelu == WEFT_GELU_TANH);
    cr_assert_str_eq(weft_module_type_name(m), "GPT");
    weft_module_free(m);
    tu_tmpdir_remove();
}

Test(gpt, bad_config_keys_are_errors_naming_the_key)
{
    config_fails("n_embd = 100\nn_head = 3\n", WEFT_ERR_CONFIG,
                 "[model] n_head = '3': n_embd (100) must be divisible by n_head (3)");
    config_fails("n_layer = 0\n", WEFT_ERR_CONFIG, "n_layer = '0'");
    config_fails("gelu = relu\n", WEFT_ERR_CONFIG, "gelu = 'relu'");
    config_fails("dropout = 1.5\n", WEFT_ERR_CONFIG, "dropout = '1.5'");
    config_fails("bias = maybe\n", WEFT_ERR_CONFIG, "bias = 'maybe'");
    config_fails("n_embd = 24\nn_layer = 1\nvocab_size = 10\nblock_size = 4\nn_layers = 2\n",
                 WEFT_ERR_CONFIG, "unknown key 'n_layers' (did you mean 'n_layer'");

    struct weft_gpt_config c = tiny_config();
    c.n_head = 3;
    cr_assert_null(weft_gpt_new(&c));
    tu_assert_error(WEFT_ERR_VALUE, "n_embd (16) must be divisible by n_head (3)");
    c = tiny_config(); /* 4 x n_embd, the MLP's width, would overflow int64 */
    c.n_embd = INT64_C(1) << 62, c.n_head = 1;
    cr_assert_null(weft_gpt_new(&c));
    tu_assert_error(WEFT_ERR_VALUE, "GPT: n_embd = 4611686018427387904: expected a width below "
                                    "2^61 (4 x n_embd is the MLP's)");
}

Test(gpt, a_sequence_longer_than_the_block_is_pytorchs_error)
{
    struct weft_gpt_config c = tiny_config();
    weft_module *m = weft_gpt_new(&c);
    cr_assert_null(weft_module_forward(m, tokens(1, 9, 37, 1)));
    tu_assert_error(WEFT_ERR_VALUE, "Cannot forward sequence of length 9, block size is only 8");
    weft_tensor *f = weft_zeros(2, (int64_t[]){1, 4}, WEFT_F32, WEFT_CPU);
    cr_assert_null(weft_module_forward(m, f));
    tu_assert_error(WEFT_ERR_RUNTIME, "expected idx of shape [B, T] and dtype int64");
    weft_module_free(m);
}

/* What backward does not need (each block's projection outputs before the residual adds)
 * dies with its block: the forward's memory peak is what it keeps plus one block's
 * temporaries, not plus every block's (2 x [B, T, C] each; the step's peak is there). */
Test(gpt, a_blocks_temporaries_die_with_the_block)
{
    struct weft_gpt_config c = weft_gpt_config_default();
    c.n_layer = 8, c.n_head = 2, c.n_embd = 64, c.block_size = 32, c.vocab_size = 37;
    c.bias = false;
    weft_module *m = weft_gpt_new(&c);
    cr_assert_not_null(m, "%s", weft_error_message());
    const uint64_t btc = 4 * 32 * 64 * sizeof(float); /* one [B, T, C] */
    weft_scope_push();
    weft_tensor *idx = tokens(4, 32, 37, 3);
    struct weft_memory_stats st = {.struct_size = sizeof st};
    weft_reset_peak_memory_stats(WEFT_CPU);
    weft_tensor *logits = weft_module_forward(m, idx);
    cr_assert_not_null(logits, "%s", weft_error_message());
    cr_assert_eq(weft_memory_stats(WEFT_CPU, &st), 0, "%s", weft_error_message());
    uint64_t above = st.peak_allocated_bytes - st.allocated_bytes;
    cr_expect_lt(above, 6 * btc, "the forward peaked %llu bytes (%.1f [B, T, C]) above what it "
                                 "kept", (unsigned long long)above, (double)above / (double)btc);
    weft_scope_pop();
    weft_module_free(m);
}

/* ---- sampling ------------------------------------------------------------------------ */

/* The full forward's last-position logits for the context tokens[0..n) cropped to block. */
static void full_forward_last(weft_module *m, const int64_t *tokens, int64_t n, int64_t block,
                              int64_t vocab, double *out)
{
    int64_t start = n > block ? n - block : 0;
    weft_scope_push();
    weft_tensor *idx = weft_from_host(tokens + start, 2, (int64_t[]){1, n - start}, WEFT_I64,
                                      WEFT_CPU);
    weft_tensor *logits = weft_module_forward(m, idx);
    cr_assert_not_null(logits, "%s", weft_error_message());
    tu_read(weft_select(weft_select(logits, 0, 0), 0, n - start - 1), out);
    weft_scope_pop();
    (void)vocab;
}

Test(gpt, greedy_generation_follows_the_full_forward_past_the_block)
{
    struct weft_gpt_config c = tiny_config();
    weft_manual_seed(11);
    weft_module *m = weft_gpt_new(&c);
    weft_module_train(m, false);
    int64_t tokens[5 + 12] = {3, 1, 4, 1, 5};
    struct weft_gpt_sampling s = {.temperature = 1.0, .top_k = 1};
    cr_assert_eq(weft_gpt_generate(m, tokens, 5, 12, &s, NULL, NULL), 0, "%s",
                 weft_error_message());
    double logits[37];
    for (int64_t n = 5; n < 17; n++) { /* the window slides from n = 9 on */
        full_forward_last(m, tokens, n, 8, 37, logits);
        int64_t best = 0;
        for (int64_t v = 1; v < 37; v++)
            best = logits[v] > logits[best] ? v : best;
        cr_assert_eq(tokens[n], best, "token %lld: %lld, the full forward's argmax %lld",
                     (long long)n, (long long)tokens[n], (long long)best);
    }
    weft_module_free(m);
}

Test(gpt, temperature_zero_is_greedy_and_draws_nothing)
{
    struct weft_gpt_config c = tiny_config();
    weft_manual_seed(11);
    weft_module *m = weft_gpt_new(&c);
    weft_module_train(m, false);
    int64_t greedy[5 + 12] = {3, 1, 4, 1, 5}, top1[5 + 12] = {3, 1, 4, 1, 5};
    struct weft_gpt_sampling zero = {.temperature = 0}, one = {.temperature = 1.0, .top_k = 1};
    weft_manual_seed(3);
    uint64_t before = weft_random_offset();
    cr_assert_eq(weft_gpt_generate(m, greedy, 5, 12, &zero, NULL, NULL), 0, "%s",
                 weft_error_message());
    cr_assert_eq(weft_random_offset(), before, "greedy decoding drew random numbers");
    cr_assert_eq(weft_gpt_generate(m, top1, 5, 12, &one, NULL, NULL), 0);
    cr_assert_arr_eq(greedy, top1, sizeof greedy, "temperature 0 is not top_k 1's argmax");
    weft_module_free(m);
}

/* Rows of a batch are independent: greedy, each row is what one sequence gives, past the
 * block (the window slides for every row at once). */
Test(gpt, batched_generation_gives_each_row_its_own_sequence)
{
    struct weft_gpt_config c = tiny_config();
    weft_manual_seed(13);
    weft_module *m = weft_gpt_new(&c);
    enum { N = 3, NEW = 12, ROW = N + NEW };
    int64_t rows[3][ROW] = {{3, 1, 4}, {1, 5, 9}, {2, 6, 5}};
    struct weft_gpt_sampling s = {.temperature = 1.0, .top_k = 1};
    cr_assert_eq(weft_gpt_generate_batch(m, 3, &rows[0][0], N, NEW, &s, NULL, NULL), 0, "%s",
                 weft_error_message());
    for (int r = 0; r < 3; r++) {
        int64_t one[ROW];
        memcpy(one, rows[r], N * sizeof *one);
        cr_assert_eq(weft_gpt_generate(m, one, N, NEW, &s, NULL, NULL), 0, "%s",
                     weft_error_message());
        cr_assert_arr_eq(one, rows[r], sizeof one, "row %d differs from its sequence alone", r);
    }
    cr_assert_neq(weft_gpt_generate_batch(m, 0, &rows[0][0], N, NEW, &s, NULL, NULL), 0);
    tu_assert_error(WEFT_ERR_VALUE, "expected batch >= 1");
    rows[2][1] = 37;
    cr_assert_neq(weft_gpt_generate_batch(m, 3, &rows[0][0], N, NEW, &s, NULL, NULL), 0);
    tu_assert_error(WEFT_ERR_INDEX, "prompt token 1 is 37");
    weft_module_free(m);
}

struct stop_after {
    int seen, limit;
};

static int count_tokens(void *ctx, int64_t token)
{
    struct stop_after *s = ctx;
    (void)token;
    return ++s->seen >= s->limit;
}

Test(gpt, sampling_keeps_the_top_k_and_one_seed_gives_one_text)
{
    struct weft_gpt_config c = tiny_config();
    weft_manual_seed(12);
    weft_module *m = weft_gpt_new(&c);
    int64_t a[2 + 20] = {7, 8}, b[2 + 20] = {7, 8}, d[2 + 20] = {7, 8};
    struct weft_gpt_sampling s = {.temperature = 3.0, .top_k = 3};
    weft_manual_seed(5);
    cr_assert_eq(weft_gpt_generate(m, a, 2, 20, &s, NULL, NULL), 0, "%s", weft_error_message());
    weft_manual_seed(5);
    cr_assert_eq(weft_gpt_generate(m, b, 2, 20, &s, NULL, NULL), 0);
    cr_assert_arr_eq(a, b, sizeof a, "one seed, one text");
    weft_manual_seed(6);
    cr_assert_eq(weft_gpt_generate(m, d, 2, 20, &s, NULL, NULL), 0);
    cr_assert(memcmp(a, d, sizeof a) != 0, "another seed, another text");

    double logits[37];
    int distinct = 0;
    for (int64_t n = 2; n < 22; n++) {
        full_forward_last(m, a, n, 8, 37, logits);
        int above = 0; /* how many logits beat the chosen token's: fewer than k */
        for (int64_t v = 0; v < 37; v++)
            above += logits[v] > logits[a[n]];
        cr_assert_lt(above, 3, "token %lld is not among the top 3", (long long)n);
        distinct += above > 0;
    }
    cr_assert_gt(distinct, 0, "at temperature 3 not every draw is the argmax");

    struct stop_after stop = {0, 4};
    int64_t e[2 + 20] = {7, 8};
    cr_assert_eq(weft_gpt_generate(m, e, 2, 20, &s, count_tokens, &stop), 0);
    cr_assert_eq(stop.seen, 4, "on_token's nonzero return stops it");
    weft_module_free(m);
}

Test(gpt, generation_refuses_bad_prompts_and_settings)
{
    struct weft_gpt_config c = tiny_config();
    weft_module *m = weft_gpt_new(&c);
    int64_t t[4] = {1, 40};
    struct weft_gpt_sampling s = {.temperature = 1.0};
    cr_assert_neq(weft_gpt_generate(m, t, 2, 2, &s, NULL, NULL), 0);
    tu_assert_error(WEFT_ERR_INDEX, "prompt token 1 is 40, out of range for a vocabulary of 37");
    t[1] = 2;
    s.temperature = -1;
    cr_assert_neq(weft_gpt_generate(m, t, 2, 2, &s, NULL, NULL), 0);
    tu_assert_error(WEFT_ERR_VALUE, "temperature >= 0 (0: greedy)");
    s.temperature = INFINITY;
    cr_assert_neq(weft_gpt_generate(m, t, 2, 2, &s, NULL, NULL), 0);
    tu_assert_error(WEFT_ERR_VALUE, "a finite temperature");
    s.temperature = 1;
    cr_assert_neq(weft_gpt_generate(m, t, 0, 2, &s, NULL, NULL), 0);
    tu_assert_error(WEFT_ERR_VALUE, "a prompt of at least one token");
    weft_module_free(m);
}

/* ---- weft-generate ------------------------------------------------------------------- */

/* Runs weft-generate with args; its stdout (and stderr when with_stderr) into out; the
 * exit code. */
static size_t generated_bytes; /* of the last run_generate */

static int run_generate(const char *args, bool with_stderr, char *out, size_t size)
{
    const char *build = getenv("WEFT_TEST_FIXTURES"); /* <build>/tests */
    cr_assert_not_null(build);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s/../apps/weft-generate %s %s", build, args,
             with_stderr ? "2>&1" : "2>/dev/null");
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    size_t n = fread(out, 1, size - 1, p);
    out[n] = '\0';
    generated_bytes = n;
    int status = pclose(p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Whether out[0..n) holds text: generated bytes may hold a NUL, where strstr stops. */
static bool holds(const char *out, size_t n, const char *text)
{
    size_t len = strlen(text);
    for (size_t i = 0; i + len <= n; i++)
        if (memcmp(out + i, text, len) == 0)
            return true;
    return false;
}

/* A byte-level GPT checkpoint as the trainer writes it: state_dict + config metadata. */
static void write_checkpoint(const char *path, bool with_config)
{
    struct weft_gpt_config c = tiny_config();
    c.vocab_size = 256;
    weft_manual_seed(21);
    weft_module *m = weft_gpt_new(&c);
    struct weft_tensor_dict *d = weft_module_state_dict(m);
    struct weft_metadata *meta = weft_metadata_new();
    cr_assert(d && meta);
    if (with_config)
        cr_assert_eq(weft_module_config_export(m, meta), 0);
    cr_assert_eq(weft_safetensors_save(path, d, meta), 0, "%s", weft_error_message());
    weft_tensor_dict_free(d);
    weft_metadata_free(meta);
    weft_module_free(m);
}

Test(gpt, weft_generate_samples_a_checkpoint_reproducibly)
{
    tu_tmpdir_create("gpt");
    write_checkpoint(tu_tmp_path("gpt.safetensors"), true);
    char args[1024], a[4096], b[4096];
    snprintf(args, sizeof args, "%s --prompt 'Once upon a time' --max-new-tokens 40 --top-k 20 "
                                "--seed 3 --temperature 0.9",
             tu_tmp_path("gpt.safetensors"));
    cr_assert_eq(run_generate(args, false, a, sizeof a), 0, "%s", a);
    size_t n = generated_bytes;
    cr_assert_eq(run_generate(args, false, b, sizeof b), 0, "%s", b);
    cr_assert(n == generated_bytes && memcmp(a, b, n) == 0, "one seed, one text");
    cr_assert_eq(strncmp(a, "Once upon a time", 16), 0, "the prompt comes first: %s", a);
    cr_assert_eq(n, 16 + 40 + 1, "the prompt, 40 bytes and a newline: %s", a);
    char one[4096];
    memcpy(one, a, n);
    cr_assert_eq(run_generate(args, true, b, sizeof b), 0, "%s", b);
    /* the sample is bytes: a NUL may come before the timing line */
    cr_assert(holds(b, generated_bytes, "weft-generate: 40 tokens in"), "%s", b);

    /* three samples as one batch: each the prompt and 40 bytes, then a line of dashes */
    snprintf(args, sizeof args, "%s --prompt 'Once upon a time' --max-new-tokens 40 --top-k 20 "
                                "--seed 3 --num-samples 3",
             tu_tmp_path("gpt.safetensors"));
    cr_assert_eq(run_generate(args, false, a, sizeof a), 0, "%s", a);
    cr_assert_eq(generated_bytes, 3 * (16 + 40 + 1 + 16), "%s", a);
    for (int i = 0; i < 3; i++) {
        const char *sample = a + i * (16 + 40 + 1 + 16);
        cr_assert_eq(strncmp(sample, "Once upon a time", 16), 0, "sample %d: %s", i, a);
        cr_assert_eq(strncmp(sample + 16 + 40, "\n---------------\n", 17), 0, "sample %d: %s",
                     i, a);
    }
    cr_assert_eq(run_generate(args, true, b, sizeof b), 0, "%s", b);
    cr_assert(holds(b, generated_bytes, "weft-generate: 3 x 40 tokens in"), "%s", b);

    /* --warmup draws tokens before the timed run, then reseeds: the same samples */
    char warm[1100];
    snprintf(warm, sizeof warm, "%s --warmup 7", args);
    cr_assert_eq(run_generate(warm, false, b, sizeof b), 0, "%s", b);
    cr_assert(generated_bytes == 3 * (16 + 40 + 1 + 16) && memcmp(a, b, generated_bytes) == 0,
              "--warmup changed the batch's samples: %s", b);
    snprintf(args, sizeof args, "%s --prompt 'Once upon a time' --max-new-tokens 40 --top-k 20 "
                                "--seed 3 --temperature 0.9 --warmup 5",
             tu_tmp_path("gpt.safetensors"));
    cr_assert_eq(run_generate(args, false, b, sizeof b), 0, "%s", b);
    cr_assert(generated_bytes == n && memcmp(one, b, n) == 0, "--warmup changed the text: %s", b);
    snprintf(args, sizeof args, "%s --warmup -1", tu_tmp_path("gpt.safetensors"));
    cr_assert_eq(run_generate(args, true, b, sizeof b), 2);
    cr_assert(strstr(b, "--warmup '-1': expected an integer >= 0"), "%s", b);

    snprintf(args, sizeof args, "%s/missing.safetensors", tu_tmp_path(""));
    cr_assert_eq(run_generate(args, true, a, sizeof a), 1);
    cr_assert(strstr(a, "missing.safetensors") && strstr(a, "No such file"), "%s", a);

    write_checkpoint(tu_tmp_path("bare.safetensors"), false);
    cr_assert_eq(run_generate(tu_tmp_path("bare.safetensors"), true, a, sizeof a), 1);
    cr_assert(strstr(a, "has no model config"), "%s", a);

    snprintf(args, sizeof args, "%s --top-k 0", tu_tmp_path("gpt.safetensors"));
    cr_assert_eq(run_generate(args, true, a, sizeof a), 2);
    cr_assert(strstr(a, "--top-k '0': expected an integer >= 1"), "%s", a);
    tu_tmpdir_remove();
}

Test(gpt, weft_generate_temperature_zero_is_greedy_whatever_the_seed)
{
    tu_tmpdir_create("gpt");
    write_checkpoint(tu_tmp_path("gpt.safetensors"), true);
    char args[1024], a[4096], b[4096], c[4096];
    size_t na, nb;
    snprintf(args, sizeof args, "%s --prompt 'Once' --max-new-tokens 30 --temperature 0 --seed 1",
             tu_tmp_path("gpt.safetensors"));
    cr_assert_eq(run_generate(args, false, a, sizeof a), 0, "%s", a);
    na = generated_bytes;
    snprintf(args, sizeof args, "%s --prompt 'Once' --max-new-tokens 30 --temperature 0 --seed 2",
             tu_tmp_path("gpt.safetensors"));
    cr_assert_eq(run_generate(args, false, b, sizeof b), 0, "%s", b);
    nb = generated_bytes;
    cr_assert(na == nb && memcmp(a, b, na) == 0, "greedy: the seed changed the text");
    /* the argmax each time: what top_k 1 draws */
    snprintf(args, sizeof args, "%s --prompt 'Once' --max-new-tokens 30 --top-k 1 --seed 3",
             tu_tmp_path("gpt.safetensors"));
    cr_assert_eq(run_generate(args, false, c, sizeof c), 0, "%s", c);
    cr_assert(na == generated_bytes && memcmp(a, c, na) == 0, "temperature 0 is not the argmax");
    snprintf(args, sizeof args, "%s --temperature -1", tu_tmp_path("gpt.safetensors"));
    cr_assert_eq(run_generate(args, true, a, sizeof a), 2);
    cr_assert(strstr(a, "--temperature '-1': expected a number > 0, or 0 for greedy decoding"),
              "%s", a);
    cr_assert_eq(run_generate("--version", false, a, sizeof a), 0);
    cr_assert(!strncmp(a, "weft-generate " WEFT_VERSION_STRING "\n", strlen(a)), "%s", a);
    tu_tmpdir_remove();
}

/* A checkpoint of another model (weft-train's MLP: model.type = sequential) is named. */
Test(gpt, weft_generate_names_a_checkpoint_that_is_no_language_model)
{
    tu_tmpdir_create("gpt");
    weft_module *m = weft_nn_linear(4, 2, true);
    struct weft_tensor_dict *d = weft_module_state_dict(m);
    struct weft_metadata *meta = weft_metadata_new();
    cr_assert_eq(weft_metadata_set(meta, "model.type", "sequential"), 0);
    cr_assert_eq(weft_safetensors_save(tu_tmp_path("mlp.safetensors"), d, meta), 0, "%s",
                 weft_error_message());
    char a[4096];
    cr_assert_eq(run_generate(tu_tmp_path("mlp.safetensors"), true, a, sizeof a), 1, "%s", a);
    cr_assert(strstr(a, "not a language-model checkpoint (model type sequential)"), "%s", a);
    weft_tensor_dict_free(d);
    weft_metadata_free(meta);
    weft_module_free(m);
    tu_tmpdir_remove();
}
