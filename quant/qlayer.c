/* quant/qlayer.c: what the quantized Linear and Conv2d share: their buffers (torch's names,
 * plain dtypes), the watch that tells them when their kernel inputs must be derived again,
 * and channels-last tensors. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

const char *const quant_layer_watched[] = {"weight", "bias", "weight_scale", "input_scale",
                                           "input_zero_point", "scale", "zero_point", NULL};

bool quant_watch_changed(struct quant_watch *w, const weft_module *m, const char *const *names)
{
    bool changed = false;
    int n = 0;
    for (; names[n] && n < QUANT_WATCH_MAX; n++) {
        const weft_tensor *t = weft_module_buffer(m, names[n]);
        uint64_t v = t ? weft_tensor_version(t) : 0;
        if (n >= w->n || w->t[n] != t || w->version[n] != v)
            changed = true;
        w->t[n] = t;
        w->version[n] = v;
    }
    changed = changed || w->n != n;
    w->n = n;
    return changed;
}

static int add(weft_module *m, const char *name, weft_tensor *t)
{
    return t ? weft_module_register_buffer(m, name, t) : weft_error_code();
}

int quant_layer_buffers(weft_module *m, const struct quant_layer_spec *spec, bool dynamic)
{
    weft_scope_push();
    weft_tensor *q, *scale, *zp;
    int rc = quant_weight(spec->weight, spec->per_tensor, &q, &scale, &zp);
    if (rc == 0)
        rc = add(m, "weight", q);
    if (rc == 0 && spec->bias)
        rc = add(m, "bias", weft_clone(weft_detach(weft_to_dtype(spec->bias, WEFT_F32))));
    if (rc == 0)
        rc = add(m, "weight_scale", scale);
    if (rc == 0)
        rc = add(m, "weight_zero_point", zp);
    if (rc == 0 && !dynamic) {
        const int64_t izp = spec->input_zero_point, ozp = spec->zero_point;
        rc = add(m, "input_scale", quant_f32(0, NULL, &spec->input_scale));
        if (rc == 0)
            rc = add(m, "input_zero_point", quant_i64(0, NULL, &izp));
        if (rc == 0 && !spec->float_output)
            rc = add(m, "scale", quant_f32(0, NULL, &spec->scale));
        if (rc == 0 && !spec->float_output)
            rc = add(m, "zero_point", quant_i64(0, NULL, &ozp));
    }
    weft_scope_pop();
    return rc;
}

float *quant_weight_scales(const weft_module *m, int64_t N)
{
    const weft_tensor *s = weft_module_buffer(m, "weight_scale");
    float *out = malloc((size_t)(N ? N : 1) * sizeof *out);
    if (!out) {
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory");
        return NULL;
    }
    const float *d = weft_tensor_data(s);
    const bool per_tensor = weft_tensor_numel(s) == 1 && s->ndim == 0;
    for (int64_t n = 0; n < N; n++)
        out[n] = per_tensor ? d[0] : d[n];
    return out;
}

const char *quant_weight_qscheme(const weft_module *m)
{
    const weft_tensor *s = weft_module_buffer(m, "weight_scale");
    return s && s->ndim == 0 ? "torch.per_tensor_affine" : "torch.per_channel_affine";
}

weft_tensor *quant_empty_channels_last(int64_t N, int64_t C, int64_t H, int64_t W,
                                       enum weft_dtype dtype)
{
    const int64_t shape[4] = {N, H, W, C};
    const int order[4] = {0, 3, 1, 2};
    return weft_permute(weft_empty(4, shape, dtype, WEFT_CPU), 4, order);
}

bool quant_is_channels_last(const weft_tensor *t)
{
    if (t->ndim != 4)
        return false;
    const int64_t C = t->shape[1], H = t->shape[2], W = t->shape[3];
    return (C == 1 || t->stride[1] == 1) && (W == 1 || t->stride[3] == C) &&
           (H == 1 || t->stride[2] == W * C) && (t->shape[0] == 1 || t->stride[0] == H * W * C);
}
