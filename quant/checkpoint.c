/* quant/checkpoint.c: a quantized model's scheme as checkpoint metadata, and loading a
 * quantized state dict: the float model is converted to the scheme's structure (placeholder
 * qparams), then every tensor of that structure must come from the file with its exact
 * dtype and shape, since load_state_dict would convert a float32 weight into int8 or an
 * int64 scale into float32 without a word. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define FORMAT "1"

int weft_quant_metadata_export(const struct weft_qconfig *qconfig, bool dynamic,
                               struct weft_metadata *meta)
{
    if (!qconfig || !meta)
        return weft_error_set(WEFT_ERR_VALUE, "weft_quant_metadata_export: NULL argument");
    static const char *const observers[] = {"minmax", "moving_average", "histogram"};
    int rc = weft_metadata_set(meta, "quant.format", FORMAT);
    if (rc == 0)
        rc = weft_metadata_set(meta, "quant.mode", dynamic ? "dynamic" : "static");
    if (rc == 0)
        rc = weft_metadata_set(meta, "quant.weights", qconfig->per_tensor_weights
                                                          ? "per_tensor_symmetric_int8"
                                                          : "per_channel_symmetric_int8");
    if (rc == 0)
        rc = weft_metadata_set(meta, "quant.activations",
                               dynamic ? "per_tensor_affine_uint8_dynamic" : "per_tensor_affine_uint8");
    if (rc == 0 && !dynamic && (unsigned)qconfig->activation < 3)
        rc = weft_metadata_set(meta, "quant.observer", observers[qconfig->activation]);
    return rc;
}

bool weft_quant_metadata_present(const struct weft_metadata *meta)
{
    return meta && weft_metadata_get(meta, "quant.mode") != NULL;
}

/* The scheme meta names; WEFT_ERR_VALUE naming the key otherwise. */
static int read_scheme(const struct weft_metadata *meta, const char *origin, bool *dynamic,
                       struct weft_qconfig *qc)
{
    const char *format = weft_metadata_get(meta, "quant.format");
    const char *mode = weft_metadata_get(meta, "quant.mode");
    const char *weights = weft_metadata_get(meta, "quant.weights");
    const char *sep = origin ? ": " : "";
    origin = origin ? origin : "";
    *qc = weft_qconfig_default();
    if (!format || strcmp(format, FORMAT) != 0)
        return weft_error_set(WEFT_ERR_VALUE, "%s%squant.format is '%s', expected '" FORMAT "' (a "
                                              "newer weft wrote this int8 checkpoint?)",
                              origin, sep, format ? format : "(missing)");
    if (!mode || (strcmp(mode, "static") && strcmp(mode, "dynamic")))
        return weft_error_set(WEFT_ERR_VALUE, "%s%squant.mode is '%s', expected static or dynamic",
                              origin, sep, mode ? mode : "(missing)");
    if (!weights || (strcmp(weights, "per_channel_symmetric_int8") &&
                     strcmp(weights, "per_tensor_symmetric_int8")))
        return weft_error_set(WEFT_ERR_VALUE, "%s%squant.weights is '%s', expected "
                                              "per_channel_symmetric_int8 or "
                                              "per_tensor_symmetric_int8",
                              origin, sep, weights ? weights : "(missing)");
    *dynamic = !strcmp(mode, "dynamic");
    qc->per_tensor_weights = !strcmp(weights, "per_tensor_symmetric_int8");
    return 0;
}

/* "int8 [256, 784]" */
static const char *describe(const weft_tensor *t, char *buf, size_t size)
{
    char shape[160];
    snprintf(buf, size, "%s %s", weft_dtype_name(t->dtype),
             weft_shape_str(t->ndim, t->shape, shape, sizeof shape));
    return buf;
}

/* A list of keys in a message: the first few, then how many more. */
struct key_list {
    char text[640];
    size_t used;
    int count;
};

static void key_list_add(struct key_list *l, const char *fmt, const char *key, const char *a,
                         const char *b)
{
    if (l->count++ < 4 && l->used < sizeof l->text)
        l->used += (size_t)snprintf(l->text + l->used, sizeof l->text - l->used, fmt, key, a, b);
}

static void key_list_end(struct key_list *l)
{
    if (l->count > 4 && l->used < sizeof l->text)
        snprintf(l->text + l->used, sizeof l->text - l->used, "\n\t... and %d more", l->count - 4);
}

/* Every entry of want must be in d with its dtype and shape, and d must hold nothing else:
 * one error naming origin and the keys at fault, by kind. */
static int check_tensors(const struct weft_tensor_dict *want, const struct weft_tensor_dict *d,
                         const char *origin, const char *mode)
{
    struct key_list missing = {0}, wrong = {0}, extra = {0};
    weft_scope_push();
    for (size_t i = 0; i < weft_tensor_dict_len(want); i++) {
        const char *key = weft_tensor_dict_name(want, i);
        weft_tensor *w = weft_tensor_dict_at(want, i), *got = weft_tensor_dict_get(d, key);
        char a[200], b[200];
        if (!got)
            key_list_add(&missing, "\n\tmissing '%s' (%s)%s", key, describe(w, a, sizeof a), "");
        else if (got->dtype != w->dtype || got->ndim != w->ndim ||
                 memcmp(got->shape, w->shape, (size_t)w->ndim * sizeof *w->shape) != 0)
            key_list_add(&wrong, "\n\t'%s' is %s, expected %s", key, describe(got, a, sizeof a),
                         describe(w, b, sizeof b));
    }
    for (size_t i = 0; i < weft_tensor_dict_len(d); i++) {
        const char *key = weft_tensor_dict_name(d, i);
        if (!weft_tensor_dict_get(want, key))
            key_list_add(&extra, "\n\tunexpected '%s'%s%s", key, "", "");
    }
    weft_scope_pop();
    key_list_end(&missing);
    key_list_end(&wrong);
    key_list_end(&extra);
    const int problems = missing.count + wrong.count + extra.count;
    if (!problems)
        return 0;
    return weft_error_set(WEFT_ERR_VALUE, "%s%snot a %s int8 checkpoint of this model (%d "
                                          "problem%s):%s%s%s",
                          origin ? origin : "", origin ? ": " : "", mode, problems,
                          problems == 1 ? "" : "s", wrong.text, missing.text, extra.text);
}

int weft_quant_load_state_dict(weft_module *model, const struct weft_tensor_dict *d,
                               const struct weft_metadata *meta, const char *origin)
{
    if (!model || !d || !meta)
        return weft_error_set(WEFT_ERR_VALUE, "weft_quant_load_state_dict: NULL argument");
    bool dynamic = false;
    struct weft_qconfig qc;
    int rc = read_scheme(meta, origin, &dynamic, &qc);
    if (rc == 0) {
        rc = dynamic ? weft_quantize_dynamic(model, &qc) : quant_static_structure(model, &qc);
        rc = rc < 0 ? rc : 0;
    }
    if (rc != 0)
        return rc;
    struct weft_tensor_dict *want = weft_module_state_dict(model);
    rc = want ? check_tensors(want, d, origin, dynamic ? "dynamic" : "static") : weft_error_code();
    weft_tensor_dict_free(want);
    if (rc == 0)
        rc = weft_module_load_state_dict(model, d, true);
    if (rc == 0)
        weft_module_train(model, false);
    return rc;
}
