/* weft/gpt.h: nanoGPT's GPT (Karpathy's model.py) as a weft module, and a KV cache for
 * generation.
 *
 * The module tree and its names are nanoGPT's, so a state_dict moves between the two:
 *     transformer.wte.weight [vocab_size, n_embd]   token embedding
 *     transformer.wpe.weight [block_size, n_embd]   learned positions
 *     transformer.h.<i>.ln_1.weight (.bias)         pre-LayerNorm of attention
 *     transformer.h.<i>.attn.c_attn.weight [3C, C] (.bias)   q, k, v in one Linear
 *     transformer.h.<i>.attn.c_proj.weight [C, C] (.bias)
 *     transformer.h.<i>.ln_2.weight (.bias)
 *     transformer.h.<i>.mlp.c_fc.weight [4C, C] (.bias)
 *     transformer.h.<i>.mlp.c_proj.weight [C, 4C] (.bias)
 *     transformer.ln_f.weight (.bias)
 *     lm_head.weight [vocab_size, n_embd]           the same tensor as transformer.wte.weight
 * (".bias" only when config.bias). The tied weight is one parameter: named_parameters()
 * and num_parameters() count it once (as "transformer.wte.weight"), state_dict() holds
 * both keys, as PyTorch's does.
 *
 * Forward: idx [B, T] int64 token ids, T <= block_size -> logits [B, T, vocab_size].
 * Dropout (config.dropout) acts in training mode only: after the embeddings, on the
 * attention weights, after each residual branch. Parameters are float32 on the cpu,
 * drawn from weft's generator (weft_manual_seed makes a model reproducible) with
 * GPT-2's initialisation: normal(0, 0.02) for Linear and Embedding weights,
 * normal(0, 0.02 / sqrt(2 * n_layer)) for every c_proj.weight, zero biases, LayerNorm
 * weights 1 and biases 0.
 *
 * The module type "gpt" (class "GPT") is registered when libweft-nn loads: an INI file
 * builds it with [model] type = gpt and the keys of struct weft_gpt_config; its
 * weft_module_config_export() writes those keys back ("model.n_layer" = "4", ...).
 */
#ifndef WEFT_GPT_H
#define WEFT_GPT_H

#include <stdbool.h>
#include <stdint.h>

#include "weft/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* nanoGPT's GPTConfig, plus the GELU's approximation (nanoGPT uses nn.GELU(): none). */
struct weft_gpt_config {
    int64_t n_layer, n_head, n_embd; /* n_embd % n_head == 0 */
    int64_t block_size;              /* the longest sequence (positions learned) */
    int64_t vocab_size;
    double dropout;                  /* 0 <= dropout < 1 */
    bool bias;                       /* biases in the Linears and LayerNorms */
    enum weft_gelu_approximate gelu;
    /* Each block's activations are recomputed in backward instead of kept (weft_checkpoint:
     * torch.utils.checkpoint around every block, as memory-bound GPT training does);
     * [model] checkpoint = true. Not part of the weights: not exported. */
    bool checkpoint;
};

/* nanoGPT's defaults (GPT-2 small: 12 layers, 12 heads, 768 wide, block 1024, vocab
 * 50304, dropout 0, bias true) and gelu none. */
struct weft_gpt_config weft_gpt_config_default(void);

/* A new GPT, or NULL with WEFT_ERR_VALUE naming the bad field ("n_embd (100) must be
 * divisible by n_head (3)"). Free with weft_module_free. */
weft_module *weft_gpt_new(const struct weft_gpt_config *config);
/* The config m was built with, or NULL (no error) when m is not a GPT. */
const struct weft_gpt_config *weft_gpt_config_of(const weft_module *m);

/* nanoGPT's loss: cross_entropy(logits.view(-1, V), targets.view(-1), ignore_index=-1)
 * for logits [B, T, V] and int64 targets [B, T]; a new 0-dim tensor. */
weft_tensor *weft_gpt_loss(weft_tensor *logits, weft_tensor *targets);

/* ---- generation with a KV cache ------------------------------------------------------ */

/* Per layer, the keys and values of the positions seen so far, in preallocated
 * [batch, n_head, max_len, head_dim] buffers (float32, on the model's device). */
typedef struct weft_gpt_cache weft_gpt_cache;

/* A cache for `batch` sequences of at most max_len tokens (1 <= max_len <= block_size).
 * NULL with an error. The model must outlive it. */
weft_gpt_cache *weft_gpt_cache_new(const weft_module *gpt, int64_t batch, int64_t max_len);
void weft_gpt_cache_free(weft_gpt_cache *cache); /* NULL is ignored */
/* Positions held (the next token's position); 0 after new or reset. */
int64_t weft_gpt_cache_len(const weft_gpt_cache *cache);
int64_t weft_gpt_cache_capacity(const weft_gpt_cache *cache);
void weft_gpt_cache_reset(weft_gpt_cache *cache);

/* The logits [B, T_new, vocab] of idx_new [B, T_new] int64, the tokens at positions
 * len .. len + T_new - 1, each attending to every cached position and to the new ones
 * before it; their keys and values are appended to the cache. The same values as the
 * last T_new positions of the full forward over the whole sequence, in eval mode (no
 * dropout), with no autograd history. A new token costs O(len), not a full forward.
 * Errors: B differs from the cache's batch, len + T_new > max_len ("the KV cache holds
 * 64 positions; 60 are used and 8 more were given"), a model other than the cache's. */
weft_tensor *weft_gpt_forward_cached(weft_module *gpt, weft_gpt_cache *cache,
                                     weft_tensor *idx_new);

/* ---- sampling (nanoGPT's generate()) ------------------------------------------------ */

struct weft_gpt_sampling {
    double temperature; /* > 0: the logits are divided by it (nanoGPT's default 1.0); 0:
                         * greedy, the argmax (the first of equals), no draw */
    int64_t top_k;      /* keep the k likeliest tokens (ties with the kth too); 0: all */
};
/* Called with each new token as it is drawn; a nonzero return stops the generation. */
typedef int (*weft_gpt_token_fn)(void *ctx, int64_t token);

/* nanoGPT's generate() for one sequence: tokens[0..n) is the prompt (ids < vocab_size,
 * n >= 1) and tokens must have room for n + max_new_tokens; each new token is drawn from
 * softmax(top_k(logits of the last position / temperature)) of the context cropped to
 * the last block_size tokens, with one uniform from weft's generator (weft_rand), so a
 * seed gives one text. Runs in eval mode (no dropout) with a KV cache: a token costs one
 * position's forward; when the crop moves the window (past block_size) every position
 * changes and the cache is refilled from the window, as nanoGPT's full forward would.
 * on_token (may be NULL) sees each token. Returns 0 (also when on_token stopped it) or
 * negative with an error. */
int weft_gpt_generate(weft_module *gpt, int64_t *tokens, int64_t n, int64_t max_new_tokens,
                      const struct weft_gpt_sampling *sampling, weft_gpt_token_fn on_token,
                      void *ctx);

/* Called with the tokens just drawn for each of the batch's rows; nonzero stops. */
typedef int (*weft_gpt_tokens_fn)(void *ctx, const int64_t *tokens, int64_t batch);

/* weft_gpt_generate for `batch` rows at once (nanoGPT's generate() on idx [batch, n]):
 * tokens is [batch, n + max_new_tokens], row-major, each row starting with its n-token
 * prompt; every step runs one cached forward over the batch and draws one token per row,
 * from batch uniforms of one weft_rand (batch 1 draws what weft_gpt_generate does).
 * on_tokens (may be NULL) sees each step's tokens. 0 or negative with an error. */
int weft_gpt_generate_batch(weft_module *gpt, int64_t batch, int64_t *tokens, int64_t n,
                            int64_t max_new_tokens, const struct weft_gpt_sampling *sampling,
                            weft_gpt_tokens_fn on_tokens, void *ctx);

#ifdef __cplusplus
}
#endif
#endif
