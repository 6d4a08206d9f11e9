/* bench/bench_rnn.c: weft-bench's recurrent group, nn.LSTM's forward and forward+backward
 * (issue 19; bench/rnn-lstm.sh runs it beside PyTorch). Every name starts with "rnn_", so
 * `weft-bench --filter rnn_` runs the group alone:
 *   rnn_lstm_T64_B32_H128_fwd_ms      one LSTM layer (input_size = hidden_size = H) over
 *   rnn_lstm_T64_B32_H128_fwdbwd_ms   [T, B, H] float32: forward under no_grad, or forward
 *                                     and backward of sum(output) (weight gradients too)
 * The sizes are TxBxH triples in $WEFT_BENCH_RNN_SIZES ("64x32x128 256x64x512"), default
 * "64x32x128".
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft.h>
#include <weft/nn.h>

typedef double (*time_median_fn)(void (*fn)(void *), void *ctx, int repeats);
typedef void (*report_fn)(const char *name, double value, const char *unit);

void bench_rnn(bool (*selected)(const char *name), time_median_fn time_median, report_fn report,
               int repeats);

struct lstm_ctx {
    weft_module *m;
    weft_tensor *x;
    bool backward;
};

static void run_lstm(void *p)
{
    struct lstm_ctx *c = p;
    weft_scope_push();
    bool prev = c->backward ? weft_grad_enabled() : weft_no_grad_begin();
    struct weft_rnn_input in = {.input = c->x};
    struct weft_rnn_result r;
    if (weft_nn_rnn_forward(c->m, &in, &r) == 0 && c->backward)
        weft_backward(weft_sum(r.output, 0, NULL, false), NULL, false);
    weft_grad_mode_restore(prev);
    weft_scope_pop();
}

static void one_size(bool (*selected)(const char *), time_median_fn time_median,
                     report_fn report, int repeats, long T, long B, long H)
{
    char fwd[96], both[96];
    snprintf(fwd, sizeof fwd, "rnn_lstm_T%ld_B%ld_H%ld_fwd_ms", T, B, H);
    snprintf(both, sizeof both, "rnn_lstm_T%ld_B%ld_H%ld_fwdbwd_ms", T, B, H);
    if (!selected(fwd) && !selected(both))
        return;
    struct weft_rnn_options o = weft_rnn_defaults(WEFT_RNN_LSTM, H, H);
    struct lstm_ctx c = {.m = weft_nn_rnn(&o)};
    weft_tensor *x = weft_empty(3, (int64_t[]){T, B, H}, WEFT_F32, WEFT_CPU);
    if (x && weft_uniform_(x, -1, 1) == 0)
        c.x = x;
    if (!c.m || !c.x) {
        printf("# rnn_lstm skipped: %s\n", weft_error_message());
        weft_error_clear();
    } else {
        const char *names[2] = {fwd, both};
        for (int bwd = 0; bwd < 2; bwd++) {
            if (!selected(names[bwd]))
                continue;
            c.backward = bwd;
            run_lstm(&c); /* warm-up: GEMM provider choices, allocator caches */
            double s = time_median(run_lstm, &c, repeats);
            if (weft_error_code() != WEFT_OK) {
                printf("# %s failed: %s\n", names[bwd], weft_error_message());
                weft_error_clear();
            } else {
                report(names[bwd], s * 1e3, "ms");
            }
        }
    }
    weft_tensor_release(x);
    weft_module_free(c.m);
}

void bench_rnn(bool (*selected)(const char *name), time_median_fn time_median, report_fn report,
               int repeats)
{
    const char *env = getenv("WEFT_BENCH_RNN_SIZES");
    char sizes[512];
    snprintf(sizes, sizeof sizes, "%s", env && *env ? env : "64x32x128");
    for (char *save = NULL, *tok = strtok_r(sizes, " ,", &save); tok;
         tok = strtok_r(NULL, " ,", &save)) {
        long T, B, H;
        if (sscanf(tok, "%ldx%ldx%ld", &T, &B, &H) != 3 || T < 1 || B < 1 || H < 1) {
            printf("# rnn_: bad size '%s' in WEFT_BENCH_RNN_SIZES (expected TxBxH)\n", tok);
            continue;
        }
        one_size(selected, time_median, report, repeats, T, B, H);
    }
}
