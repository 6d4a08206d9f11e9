/* models/gpt_generate.c: nanoGPT's generate(): crop, last position's logits / temperature,
 * top-k, softmax, one multinomial draw per token and row, over weft_gpt_forward_cached;
 * temperature 0 is greedy decoding (the argmax, as HF's do_sample=False), with no draw. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "weft.h"
#include "weft/nn.h"
#include "weft/gpt.h"

static int desc_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x < y) - (x > y);
}

/* One draw from softmax(top_k(logits / temperature)) with the uniform u in [0, 1): the
 * first token whose cumulative probability passes u (torch.multinomial's inversion).
 * The top-k threshold is the kth largest value; values equal to it stay, as nanoGPT's
 * logits[logits < v[:, [-1]]] = -inf keeps them. scratch holds V doubles. */
static int64_t sample(const float *logits, int64_t V, const struct weft_gpt_sampling *s, double u,
                      double *scratch)
{
    double cut = -INFINITY, max = -INFINITY, sum = 0;
    if (s->top_k > 0 && s->top_k < V) {
        for (int64_t i = 0; i < V; i++)
            scratch[i] = logits[i] / s->temperature;
        qsort(scratch, (size_t)V, sizeof *scratch, desc_double);
        cut = scratch[s->top_k - 1];
    }
    for (int64_t i = 0; i < V; i++) {
        double l = logits[i] / s->temperature;
        scratch[i] = l < cut ? -INFINITY : l;
        max = scratch[i] > max ? scratch[i] : max;
    }
    for (int64_t i = 0; i < V; i++) {
        scratch[i] = exp(scratch[i] - max);
        sum += scratch[i];
    }
    double target = u * sum, acc = 0;
    int64_t last = 0;
    for (int64_t i = 0; i < V; i++) {
        if (scratch[i] == 0)
            continue;
        acc += scratch[i];
        last = i;
        if (target < acc)
            return i;
    }
    return last; /* u * sum rounded past the total */
}

/* torch.argmax: the first of the largest (NaN counts as the largest, as there). */
static int64_t argmax(const float *logits, int64_t V)
{
    int64_t best = 0;
    for (int64_t i = 1; i < V && !isnan(logits[best]); i++)
        if (logits[i] > logits[best] || isnan(logits[i]))
            best = i;
    return best;
}

static int check_args(const struct weft_gpt_config *c, const int64_t *tokens, int64_t n,
                      int64_t max_new_tokens, const struct weft_gpt_sampling *s)
{
    if (!c)
        return weft_error_set(WEFT_ERR_VALUE, "weft_gpt_generate: the module is not a GPT");
    if (!tokens || n < 1 || max_new_tokens < 0)
        return weft_error_set(WEFT_ERR_VALUE,
                              "weft_gpt_generate: expected a prompt of at least one token and "
                              "max_new_tokens >= 0, got %lld tokens and %lld",
                              (long long)n, (long long)max_new_tokens);
    if (!s || !(s->temperature >= 0) || isinf(s->temperature) || s->top_k < 0)
        return weft_error_set(WEFT_ERR_VALUE, "weft_gpt_generate: expected a finite temperature "
                                              ">= 0 (0: greedy) and top_k >= 0");
    for (int64_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= c->vocab_size)
            return weft_error_set(WEFT_ERR_INDEX,
                                  "weft_gpt_generate: prompt token %lld is %lld, out of range "
                                  "for a vocabulary of %lld",
                                  (long long)i, (long long)tokens[i], (long long)c->vocab_size);
    return 0;
}

int weft_gpt_generate_batch(weft_module *gpt, int64_t batch, int64_t *tokens, int64_t n,
                            int64_t max_new_tokens, const struct weft_gpt_sampling *sampling,
                            weft_gpt_tokens_fn on_tokens, void *ctx)
{
    const struct weft_gpt_config *c = weft_gpt_config_of(gpt);
    if (batch < 1)
        return weft_error_set(WEFT_ERR_VALUE, "weft_gpt_generate_batch: expected batch >= 1, got %lld",
                              (long long)batch);
    const int64_t stride = n + max_new_tokens; /* a row of tokens */
    for (int64_t b = 0; b < batch; b++) {
        int rc = check_args(c, tokens ? tokens + b * stride : NULL, n, max_new_tokens, sampling);
        if (rc != 0)
            return rc;
    }
    const int64_t V = c->vocab_size, bs = c->block_size;
    /* The final LayerNorm's gain: float on the model's device whatever the Linears and
     * embeddings became (int8 ones hold their weights as buffers). */
    weft_device dev = weft_module_parameter(
        weft_module_child(weft_module_child(gpt, "transformer"), "ln_f"), "weight")->device;
    int rc = 0;
    float *logits = malloc((size_t)(batch * V) * sizeof *logits);
    double *scratch = malloc((size_t)V * sizeof *scratch), *u = malloc((size_t)batch * sizeof *u);
    int64_t *idx_host = malloc((size_t)(batch * (bs < stride ? bs : stride)) * sizeof *idx_host);
    int64_t *drawn = malloc((size_t)batch * sizeof *drawn);
    weft_gpt_cache *cache = weft_gpt_cache_new(gpt, batch, bs);
    if (!logits || !scratch || !u || !idx_host || !drawn || !cache) {
        rc = cache ? weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory for sampling")
                   : weft_error_code();
        goto out;
    }
    int64_t window = 0; /* the cache's position 0 holds column `window` of every row */
    for (int64_t step = 0; step < max_new_tokens; step++) {
        /* nanoGPT's idx[:, -block_size:]: when the crop moves, every position changes. */
        int64_t start = n > bs ? n - bs : 0;
        if (start != window) {
            weft_gpt_cache_reset(cache);
            window = start;
        }
        int64_t from = window + weft_gpt_cache_len(cache), T = n - from;
        for (int64_t b = 0; b < batch; b++)
            memcpy(idx_host + b * T, tokens + b * stride + from, (size_t)T * sizeof *idx_host);
        weft_scope_push();
        weft_tensor *idx = weft_from_host(idx_host, 2, (int64_t[]){batch, T}, WEFT_I64, dev);
        weft_tensor *out = weft_gpt_forward_cached(gpt, cache, idx); /* [B, T, V] */
        weft_tensor *last = weft_to_dtype(weft_contiguous(weft_select(out, 1, T - 1)), WEFT_F32);
        bool greedy = sampling->temperature == 0;
        weft_tensor *draws = greedy ? NULL : weft_rand(1, (int64_t[]){batch}, WEFT_F64, WEFT_CPU);
        if (!last || (!greedy && !draws) ||
            weft_tensor_read(last, logits, (size_t)(batch * V) * sizeof *logits) != 0 ||
            (!greedy && weft_tensor_read(draws, u, (size_t)batch * sizeof *u) != 0))
            rc = weft_error_code();
        weft_scope_pop();
        if (rc != 0)
            break;
        for (int64_t b = 0; b < batch; b++) {
            drawn[b] = greedy ? argmax(logits + b * V, V)
                              : sample(logits + b * V, V, sampling, u[b], scratch);
            tokens[b * stride + n] = drawn[b];
        }
        n++;
        if (on_tokens && on_tokens(ctx, drawn, batch) != 0)
            break;
    }
out:
    weft_gpt_cache_free(cache);
    free(logits);
    free(scratch);
    free(u);
    free(idx_host);
    free(drawn);
    return rc;
}

/* weft_gpt_generate's on_token, called through the batch's on_tokens. */
struct one_row {
    weft_gpt_token_fn on_token;
    void *ctx;
};

static int one_token(void *ctx, const int64_t *tokens, int64_t batch)
{
    (void)batch;
    const struct one_row *r = ctx;
    return r->on_token ? r->on_token(r->ctx, tokens[0]) : 0;
}

int weft_gpt_generate(weft_module *gpt, int64_t *tokens, int64_t n, int64_t max_new_tokens,
                      const struct weft_gpt_sampling *sampling, weft_gpt_token_fn on_token,
                      void *ctx)
{
    struct one_row r = {on_token, ctx};
    return weft_gpt_generate_batch(gpt, 1, tokens, n, max_new_tokens, sampling, one_token, &r);
}
