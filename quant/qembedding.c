/* quant/qembedding.c: torch.ao.nn.quantized.Embedding, weight-only: the table int8, one
 * symmetric scale per row (torch's float_qparams_weight_only_qconfig keeps a scale and a
 * zero point per row; symmetric rows need no zero point), the looked-up rows dequantized.
 * Dynamic quantization takes embeddings too: a language model's token table is as large as
 * a layer (GPT's 256 x 128 is 12% of the file). */
#include <stdio.h>
#include <stdlib.h>

#include "internal.h"

static weft_tensor *forward(weft_module *m, weft_tensor *idx)
{
    weft_tensor *w = weft_module_buffer(m, "weight"), *s = weft_module_buffer(m, "weight_scale");
    weft_scope_push();
    const int64_t col[2] = {-1, 1};
    weft_tensor *rows = weft_to_dtype(weft_embedding(idx, w), WEFT_F32);
    weft_tensor *scales = weft_embedding(idx, weft_reshape(s, 2, col)); /* [..., 1] */
    weft_tensor *y = weft_tensor_retain(weft_mul(rows, scales));
    weft_scope_pop();
    return weft_autorelease(y);
}

static int repr(const weft_module *m, char *buf, size_t size)
{
    const weft_tensor *w = weft_module_buffer(m, "weight");
    return snprintf(buf, size, "num_embeddings=%lld, embedding_dim=%lld, dtype=torch.qint8, "
                               "qscheme=torch.per_channel_affine",
                    (long long)w->shape[0], (long long)w->shape[1]);
}

static const struct weft_module_type embedding_type = {
    .base = WEFT_VTABLE(WEFT_KIND_MODULE, "quantized_embedding", struct weft_module_type),
    .class_name = "QuantizedEmbedding",
    .forward = forward,
    .extra_repr = repr,
};

weft_module *quant_embedding_new(weft_tensor *weight)
{
    weft_module *m = weft_module_new(&embedding_type, NULL);
    if (!m)
        return NULL;
    weft_scope_push();
    weft_tensor *q, *scale, *zp;
    int rc = quant_weight(weight, false, &q, &scale, &zp);
    if (rc == 0)
        rc = weft_module_register_buffer(m, "weight", q);
    if (rc == 0)
        rc = weft_module_register_buffer(m, "weight_scale", scale);
    if (rc == 0)
        rc = weft_module_register_buffer(m, "weight_zero_point", zp);
    weft_scope_pop();
    if (rc != 0) {
        weft_module_free(m);
        return NULL;
    }
    weft_module_train(m, false);
    return m;
}
