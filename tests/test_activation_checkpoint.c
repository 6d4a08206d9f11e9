/* tests/test_activation_checkpoint.c: weft_checkpoint (torch.utils.checkpoint,
 * non-reentrant). The same gradients as without it (gradcheck through a segment, bitwise
 * equal losses over 50 GPT training steps with dropout), a rerun that differs is refused,
 * and the peak memory drops by about the checkpointed blocks' activations. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include <weft/gpt.h>
#include <weft/nn.h>
#include <weft/optim.h>
#include <weft/options.h>
#include <weft/testkit.h>

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

TestSuite(activation_checkpoint, .init = setup, .fini = teardown);

/* tanh(x @ w) * sigmoid(x), dropout-free: a segment whose backward needs its inputs and
 * intermediate results. */
static weft_tensor *segment(void *ctx, int n, weft_tensor *const *in)
{
    (void)ctx, (void)n;
    return weft_mul(weft_tanh(weft_matmul(in[0], in[1])), weft_sigmoid(in[0]));
}

static weft_tensor *checkpointed(void *ctx, weft_tensor *const *in)
{
    weft_tensor *args[2] = {in[0], in[1]};
    weft_tensor *h = weft_checkpoint(segment, ctx, 2, args);
    return weft_exp(h); /* something after the segment too */
}

Test(activation_checkpoint, gradcheck_through_a_checkpointed_segment)
{
    int64_t s[2] = {3, 3};
    uint64_t state = 7;
    weft_tensor *x = tu_random_tensor(2, s, WEFT_F64, -1, 1, &state, NULL);
    weft_tensor *w = tu_random_tensor(2, s, WEFT_F64, -1, 1, &state, NULL);
    weft_requires_grad_(x, true);
    weft_requires_grad_(w, true);
    weft_tensor *in[2] = {x, w};
    cr_assert_eq(weft_gradcheck(checkpointed, NULL, 2, in, 1e-6, 1e-7, 1e-5), 0, "%s",
                 weft_error_message());
}

static int calls;
static weft_tensor *changing(void *ctx, int n, weft_tensor *const *in)
{
    (void)ctx, (void)n;
    /* the rerun computes something else: saves one tensor more */
    return calls++ == 0 ? weft_tanh(in[0]) : weft_tanh(weft_exp(in[0]));
}

Test(activation_checkpoint, a_rerun_that_saves_otherwise_is_refused)
{
    int64_t s[1] = {4};
    weft_tensor *x = weft_ones(1, s, WEFT_F32, WEFT_CPU);
    weft_requires_grad_(x, true);
    calls = 0;
    weft_tensor *y = weft_sum(weft_checkpoint(changing, NULL, 1, &x), 0, NULL, false);
    cr_assert_not_null(y);
    cr_expect_neq(weft_backward(y, NULL, false), 0);
    tu_assert_error(WEFT_ERR_RUNTIME, "the recomputed forward saved 2 tensors for backward where "
                                      "the first saved 1");
}

/* ---- GPT ----------------------------------------------------------------------------- */

static struct weft_gpt_config tiny(bool checkpoint)
{
    struct weft_gpt_config c = weft_gpt_config_default();
    c.n_layer = 3;
    c.n_head = 2;
    c.n_embd = 32;
    c.block_size = 16;
    c.vocab_size = 64;
    c.dropout = 0.1; /* random: the rerun must draw the same masks */
    c.checkpoint = checkpoint;
    return c;
}

/* The losses of `steps` AdamW steps on fixed random batches. */
static void train_losses(bool checkpoint, int steps, double *losses)
{
    weft_manual_seed(1234);
    struct weft_gpt_config c = tiny(checkpoint);
    weft_module *m = weft_gpt_new(&c);
    cr_assert_not_null(m, "%s", weft_error_message());
    weft_module_train(m, true);
    struct weft_named_tensor *p;
    int n = weft_module_named_parameters(m, &p);
    weft_tensor **params = malloc((size_t)n * sizeof *params);
    for (int i = 0; i < n; i++)
        params[i] = p[i].tensor;
    weft_options *o = weft_options_new("optim", NULL);
    weft_options_set(o, "lr", "1e-3");
    weft_optimizer *opt = weft_optimizer_create("adamw", n, params, o);
    cr_assert_not_null(opt, "%s", weft_error_message());
    int64_t shape[2] = {4, 16};
    for (int k = 0; k < steps; k++) {
        weft_scope_push();
        weft_tensor *x = weft_randint(0, 64, 2, shape, WEFT_I64, WEFT_CPU);
        weft_tensor *y = weft_randint(0, 64, 2, shape, WEFT_I64, WEFT_CPU);
        weft_tensor *loss = weft_gpt_loss(weft_module_forward(m, x), y);
        cr_assert_not_null(loss, "%s", weft_error_message());
        cr_assert_eq(weft_backward(loss, NULL, false), 0, "%s", weft_error_message());
        cr_assert_eq(weft_optimizer_step(opt), 0);
        cr_assert_eq(weft_optimizer_zero_grad(opt, true), 0);
        cr_assert_eq(weft_tensor_item(loss, &losses[k]), 0);
        weft_scope_pop();
    }
    weft_optimizer_free(opt);
    weft_options_free(o);
    free(params);
    free(p);
    weft_module_free(m);
}

Test(activation_checkpoint, fifty_gpt_steps_give_the_same_losses_bit_for_bit)
{
    enum { STEPS = 50 };
    double plain[STEPS], ckpt[STEPS];
    train_losses(false, STEPS, plain);
    train_losses(true, STEPS, ckpt);
    for (int k = 0; k < STEPS; k++)
        cr_expect_eq(memcmp(&plain[k], &ckpt[k], sizeof(double)), 0,
                     "step %d: loss %.17g without checkpointing, %.17g with", k, plain[k], ckpt[k]);
    cr_expect_lt(ckpt[STEPS - 1], ckpt[0], "it trains");
}

/* Allocated bytes after the forward, and the peak over forward and backward. */
static void measure(bool checkpoint, uint64_t *after_forward, uint64_t *forward_peak, uint64_t *peak,
                    uint64_t *base)
{
    weft_manual_seed(5);
    struct weft_gpt_config c = tiny(checkpoint);
    c.n_layer = 6;
    c.n_embd = 64;
    c.block_size = 64;
    c.dropout = 0;
    weft_module *m = weft_gpt_new(&c);
    cr_assert_not_null(m);
    int64_t shape[2] = {8, 64};
    weft_scope_push();
    weft_tensor *x = weft_randint(0, 64, 2, shape, WEFT_I64, WEFT_CPU);
    weft_tensor *y = weft_randint(0, 64, 2, shape, WEFT_I64, WEFT_CPU);
    struct weft_memory_stats st = {.struct_size = sizeof st};
    weft_memory_stats(WEFT_CPU, &st);
    *base = st.allocated_bytes;
    weft_reset_peak_memory_stats(WEFT_CPU);
    weft_tensor *loss = weft_gpt_loss(weft_module_forward(m, x), y);
    cr_assert_not_null(loss);
    weft_memory_stats(WEFT_CPU, &st);
    *after_forward = st.allocated_bytes;
    *forward_peak = st.peak_allocated_bytes;
    cr_assert_eq(weft_backward(loss, NULL, false), 0, "%s", weft_error_message());
    weft_memory_stats(WEFT_CPU, &st);
    *peak = st.peak_allocated_bytes;
    weft_scope_pop();
    weft_module_free(m);
}

Test(activation_checkpoint, the_peak_drops_by_about_the_blocks_activations)
{
    uint64_t fwd_plain, fpeak_plain, peak_plain, base_plain, fwd_ckpt, fpeak_ckpt, peak_ckpt, base_ckpt;
    measure(false, &fwd_plain, &fpeak_plain, &peak_plain, &base_plain);
    measure(true, &fwd_ckpt, &fpeak_ckpt, &peak_ckpt, &base_ckpt);
    /* What the blocks keep for backward is what the forward leaves allocated beyond the
     * checkpointed run. Checkpointed, the forward keeps none of it and the backward holds
     * one block's recomputed activations at a time (each node drops its own once it ran,
     * with the gradients that came into it), so both peaks should be lower by about
     * (L - 1) / L of it. */
    double kept = (double)(fwd_plain - base_plain) - (double)(fwd_ckpt - base_ckpt);
    double expected = kept * 5.0 / 6.0;
    double fwd_drop = (double)fpeak_plain - (double)fpeak_ckpt;
    double step_drop = (double)peak_plain - (double)peak_ckpt;
    printf("checkpointing, GPT 6 blocks B=8 T=64 C=64: the blocks keep %.2f MiB of activations; "
           "expected drop of either peak %.2f MiB; measured: forward %.2f MiB, forward+backward "
           "%.2f MiB (%.2f -> %.2f MiB)\n", kept / 1048576, expected / 1048576,
           fwd_drop / 1048576, step_drop / 1048576, (double)(peak_plain - base_plain) / 1048576,
           (double)(peak_ckpt - base_ckpt) / 1048576);
    cr_expect_gt(kept, 1 << 20, "the blocks' activations are megabytes");
    cr_expect(fwd_drop > 0.75 * expected && fwd_drop < 1.25 * expected,
              "forward peak: expected a drop of %.0f bytes, measured %.0f", expected, fwd_drop);
    cr_expect(step_drop > 0.75 * expected && step_drop < 1.25 * expected,
              "forward+backward peak: expected a drop of %.0f bytes, measured %.0f", expected,
              step_drop);
}
