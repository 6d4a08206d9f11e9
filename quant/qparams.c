/* quant/qparams.c: scales and zero points from a range (torch.ao's _calculate_qparams),
 * symmetric int8 weights, and the small host tensors the quantized modules keep. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* In float32, as torch computes them on its float32 min/max tensors. */
int weft_qparams_from_range(double min, double max, enum weft_dtype dtype, bool symmetric,
                            float *scale, int64_t *zero_point)
{
    if (dtype != WEFT_U8 && dtype != WEFT_I8)
        return weft_error_set(WEFT_ERR_VALUE,
                              "quantization: expected dtype uint8 (quint8) or int8 (qint8), got %s",
                              weft_dtype_name(dtype));
    if (isnan(min) || isnan(max) || min > max)
        return weft_error_set(WEFT_ERR_VALUE,
                              "quantization: min (%g) must be less than or equal to max (%g)",
                              min, max);
    const float qmin = dtype == WEFT_U8 ? 0.0f : -128.0f, qmax = dtype == WEFT_U8 ? 255.0f : 127.0f;
    float lo = fminf((float)min, 0.0f), hi = fmaxf((float)max, 0.0f);
    if (symmetric) {
        hi = fmaxf(-lo, hi);
        *scale = fmaxf(hi / ((qmax - qmin) / 2.0f), FLT_EPSILON);
        *zero_point = dtype == WEFT_U8 ? 128 : 0;
        return 0;
    }
    *scale = fmaxf((hi - lo) / (qmax - qmin), FLT_EPSILON);
    float zp = qmin - nearbyintf(lo / *scale);
    *zero_point = (int64_t)fminf(fmaxf(zp, qmin), qmax);
    return 0;
}

/* ---- host tensors ----------------------------------------------------------------------- */

weft_tensor *quant_f32(int ndim, const int64_t *shape, const float *data)
{
    return weft_from_host(data, ndim, shape, WEFT_F32, WEFT_CPU);
}

weft_tensor *quant_i64(int ndim, const int64_t *shape, const int64_t *data)
{
    return weft_from_host(data, ndim, shape, WEFT_I64, WEFT_CPU);
}

weft_tensor *quant_i32(int64_t n, const int32_t *data)
{
    return weft_from_host(data, 1, &n, WEFT_I32, WEFT_CPU);
}

float quant_get_f32(const weft_tensor *t)
{
    return *(const float *)weft_tensor_data(t);
}

int64_t quant_get_i64(const weft_tensor *t)
{
    return *(const int64_t *)weft_tensor_data(t);
}

int32_t quant_round_i32(double v)
{
    v = nearbyint(v);
    return v >= 2147483647.0 ? INT32_MAX : v <= -2147483648.0 ? INT32_MIN : (int32_t)v;
}

void quant_row_absmax(const float *w, int64_t N, int64_t K, bool per_row, float *out)
{
    float all = 0.0f;
    for (int64_t n = 0; n < N; n++) {
        float m = 0.0f;
        for (int64_t k = 0; k < K; k++)
            m = fmaxf(m, fabsf(w[n * K + k]));
        if (per_row)
            out[n] = m;
        all = fmaxf(all, m);
    }
    if (!per_row)
        out[0] = all;
}

/* Symmetric int8 weights (torch's default_per_channel_weight_observer, or
 * default_weight_observer per tensor): the min/max observer's qparams, then
 * torch.quantize_per_channel / per_tensor. */
int quant_weight(weft_tensor *w, bool per_tensor, weft_tensor **q, weft_tensor **scale,
                 weft_tensor **zero_point)
{
    *q = *scale = *zero_point = NULL;
    if (!w || w->dtype != WEFT_F32 || w->ndim < 2)
        return weft_error_set(WEFT_ERR_VALUE, "quantization: expected a float32 weight of at "
                                              "least 2 dims");
    weft_scope_push();
    int rc = 0;
    weft_tensor *wc = weft_contiguous(w);
    const int64_t N = w->shape[0], K = N ? weft_tensor_numel(w) / N : 0;
    float *s = malloc((size_t)(N ? N : 1) * sizeof *s);
    int64_t *z = calloc((size_t)(N ? N : 1), sizeof *z);
    if (!wc || !s || !z) {
        rc = wc ? weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory quantizing a weight")
                : weft_error_code();
        goto out;
    }
    quant_row_absmax(weft_tensor_data(wc), N, K, !per_tensor, s);
    const int64_t nscale = per_tensor ? 1 : N;
    for (int64_t i = 0; i < nscale && rc == 0; i++) {
        int64_t zp;
        rc = weft_qparams_from_range(-s[i], s[i], WEFT_I8, true, &s[i], &zp);
    }
    if (rc != 0)
        goto out;
    if (per_tensor) {
        *scale = quant_f32(0, NULL, s);
        *zero_point = quant_i64(0, NULL, z);
        *q = weft_quantize_per_tensor(wc, s[0], 0, WEFT_I8);
    } else {
        *scale = quant_f32(1, &N, s);
        *zero_point = quant_i64(1, &N, z);
        *q = weft_quantize_per_channel(wc, *scale, *zero_point, 0, WEFT_I8);
    }
    if (!*q || !*scale || !*zero_point)
        rc = weft_error_code();
out:
    free(s);
    free(z);
    if (rc == 0) {
        weft_tensor_retain(*q);
        weft_tensor_retain(*scale);
        weft_tensor_retain(*zero_point);
    }
    weft_scope_pop();
    if (rc != 0) {
        *q = *scale = *zero_point = NULL;
        return rc;
    }
    weft_autorelease(*q);
    weft_autorelease(*scale);
    weft_autorelease(*zero_point);
    return 0;
}
