/* quant/dynamic.c: torch.ao.quantization.quantize_dynamic(model, {Linear, LSTM, GRU}) in
 * place: each such module of the tree is swapped for its dynamic int8 form, whoever holds a
 * pointer to it (a GPT block's state does) runs the new one. Embeddings become weight-only
 * int8 tables as well (torch does that when asked, with float_qparams_weight_only_qconfig). */
#include <string.h>

#include "internal.h"

/* nn.Linear, or a module that computes as one (GPT's lm_head: class Linear, a 2-D weight
 * parameter, an optional bias, no children). */
static bool is_linear(const weft_module *m)
{
    const weft_tensor *w = weft_module_parameter(m, "weight");
    return (!strcmp(weft_module_type(m)->base.name, "linear") ||
            !strcmp(weft_module_type_name(m), "Linear")) &&
           w && w->ndim == 2 && w->dtype == WEFT_F32 && weft_module_num_children(m) == 0;
}

/* The dynamic form of m, NULL when m is not quantized (*failed on an error). */
static weft_module *dynamic_form(const weft_module *m, const struct weft_qconfig *qc, bool *failed)
{
    weft_module *q = NULL;
    if (is_linear(m)) {
        struct quant_layer_spec spec = {.weight = weft_module_parameter(m, "weight"),
                                        .bias = weft_module_parameter(m, "bias"),
                                        .per_tensor = qc->per_tensor_weights};
        q = quant_dynamic_linear_new(&spec);
        *failed = !q;
    } else if (!strcmp(weft_module_type(m)->base.name, "embedding")) {
        q = quant_embedding_new(weft_module_parameter(m, "weight"));
        *failed = !q;
    } else if (weft_nn_rnn_options(m)) {
        q = quant_dynamic_lstm_new(m, qc->per_tensor_weights);
        *failed = !q;
    }
    return q;
}

static int walk(weft_module *m, const struct weft_qconfig *qc)
{
    bool failed = false;
    weft_module *q = dynamic_form(m, qc, &failed);
    if (failed)
        return weft_error_code();
    if (q) {
        int rc = weft_module_swap(m, q);
        weft_module_free(q); /* the float module, after the swap */
        return rc == 0 ? 1 : rc;
    }
    int count = 0;
    for (int i = 0; i < weft_module_num_children(m); i++) {
        int rc = walk(weft_module_child_at(m, i), qc);
        if (rc < 0)
            return rc;
        count += rc;
    }
    return count;
}

int weft_quantize_dynamic(weft_module *model, const struct weft_qconfig *qconfig)
{
    if (!model)
        return weft_error_set(WEFT_ERR_VALUE, "quantize_dynamic: model is NULL");
    struct weft_qconfig qc = qconfig ? *qconfig : weft_qconfig_default();
    weft_module_train(model, false);
    int n = walk(model, &qc);
    if (n == 0)
        return weft_error_set(WEFT_ERR_VALUE, "quantize_dynamic: the model has no Linear, LSTM, "
                                              "GRU or Embedding to quantize");
    return n;
}
