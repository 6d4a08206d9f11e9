/* quant/observer.c: torch.ao.quantization's observers: MinMaxObserver and
 * PerChannelMinMaxObserver, their moving-average forms, and HistogramObserver (whose
 * histogram and range search are in histogram.c). Ranges are kept in float32, as torch
 * keeps them in float32 buffers; the qparams come from weft_qparams_from_range. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "observer.h"

struct weft_observer {
    struct weft_observer_options o;
    bool seen;
    int64_t channels;  /* 1 per tensor */
    float *min, *max;  /* [channels] */
    struct quant_histogram *hist;
};

struct weft_observer_options weft_observer_defaults(enum weft_observer_kind kind)
{
    return (struct weft_observer_options){.kind = kind, .dtype = WEFT_U8, .symmetric = false,
                                          .ch_axis = -1, .averaging_constant = 0.01,
                                          .bins = 2048, .upsample_rate = 128};
}

weft_observer *weft_observer_new(const struct weft_observer_options *options)
{
    if (!options) {
        weft_error_set(WEFT_ERR_VALUE, "weft_observer_new: options is NULL");
        return NULL;
    }
    struct weft_observer_options o = *options;
    if (o.averaging_constant == 0)
        o.averaging_constant = 0.01;
    o.bins = o.bins ? o.bins : 2048;
    o.upsample_rate = o.upsample_rate ? o.upsample_rate : 128;
    if (o.kind != WEFT_OBSERVER_MINMAX && o.kind != WEFT_OBSERVER_MOVING_AVERAGE &&
        o.kind != WEFT_OBSERVER_HISTOGRAM) {
        weft_error_set(WEFT_ERR_VALUE, "weft_observer_new: unknown observer kind %d", (int)o.kind);
        return NULL;
    }
    if (o.dtype != WEFT_U8 && o.dtype != WEFT_I8) {
        weft_error_set(WEFT_ERR_VALUE, "Default Observer only works for qint8 and quint8 data "
                                       "type (weft: int8, uint8), got %s",
                       weft_dtype_name(o.dtype));
        return NULL;
    }
    if (o.kind == WEFT_OBSERVER_HISTOGRAM && o.ch_axis >= 0) {
        weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "HistogramObserver's qscheme only support "
                                                 "torch.per_tensor_symmetric and "
                                                 "torch.per_tensor_affine.");
        return NULL;
    }
    if (!(o.averaging_constant > 0 && o.averaging_constant <= 1) || o.bins < 1 ||
        o.upsample_rate < 1) {
        weft_error_set(WEFT_ERR_VALUE, "weft_observer_new: averaging_constant must be in (0, 1], "
                                       "bins and upsample_rate at least 1");
        return NULL;
    }
    weft_observer *obs = calloc(1, sizeof *obs);
    if (!obs) {
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory for an observer");
        return NULL;
    }
    obs->o = o;
    obs->channels = 0;
    if (o.kind == WEFT_OBSERVER_HISTOGRAM &&
        !(obs->hist = quant_histogram_new(o.bins, o.upsample_rate))) {
        free(obs);
        return NULL;
    }
    return obs;
}

void weft_observer_free(weft_observer *o)
{
    if (!o)
        return;
    quant_histogram_free(o->hist);
    free(o->min);
    free(o->max);
    free(o);
}

bool weft_observer_seen(const weft_observer *o)
{
    return o && o->seen;
}

/* Per channel of a contiguous [outer, C, inner] view: the batch's min and max (NaN skipped;
 * +inf/-inf where a channel saw no number). */
static void batch_range(const float *x, int64_t outer, int64_t C, int64_t inner, float *lo,
                        float *hi)
{
    for (int64_t c = 0; c < C; c++) {
        lo[c] = INFINITY;
        hi[c] = -INFINITY;
    }
    for (int64_t a = 0; a < outer; a++)
        for (int64_t c = 0; c < C; c++) {
            const float *p = x + (a * C + c) * inner;
            float l = lo[c], h = hi[c];
            for (int64_t i = 0; i < inner; i++) {
                l = p[i] < l ? p[i] : l; /* NaN compares false: skipped */
                h = p[i] > h ? p[i] : h;
            }
            lo[c] = l;
            hi[c] = h;
        }
}

int weft_observer_update(weft_observer *o, weft_tensor *x)
{
    if (!o || !x)
        return o ? weft_error_code() : weft_error_set(WEFT_ERR_VALUE, "observer is NULL");
    if (x->dtype != WEFT_F32 || x->device.type != WEFT_DEVICE_CPU)
        return weft_error_set(WEFT_ERR_TYPE, "observer: expected a float32 tensor on the cpu, got "
                                             "%s",
                              weft_dtype_name(x->dtype));
    int64_t n = weft_tensor_numel(x);
    if (n == 0)
        return 0; /* torch returns an empty input untouched */
    int axis = o->o.ch_axis;
    if (axis >= 0 && axis >= x->ndim)
        return weft_error_set(WEFT_ERR_INDEX, "observer: ch_axis %d is out of range for a %d-d "
                                              "input",
                              axis, x->ndim);
    int64_t C = axis >= 0 ? x->shape[axis] : 1, inner = 1;
    for (int d = axis + 1; axis >= 0 && d < x->ndim; d++)
        inner *= x->shape[d];
    if (o->channels && C != o->channels)
        return weft_error_set(WEFT_ERR_RUNTIME, "observer: saw %lld channels, then %lld",
                              (long long)o->channels, (long long)C);
    weft_scope_push();
    int rc = 0;
    weft_tensor *xc = weft_contiguous(x);
    float *lo = malloc((size_t)C * sizeof *lo), *hi = malloc((size_t)C * sizeof *hi);
    if (!xc || !lo || !hi) {
        rc = xc ? weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory in an observer")
                : weft_error_code();
        goto out;
    }
    const float *data = weft_tensor_data(xc);
    if (o->hist) {
        rc = quant_histogram_update(o->hist, data, n);
        o->seen = o->seen || rc == 0;
        goto out;
    }
    batch_range(data, n / (C * inner), C, inner, lo, hi);
    if (!o->channels) {
        o->min = lo;
        o->max = hi;
        o->channels = C;
        lo = hi = NULL;
    } else {
        /* torch: min/max of all seen, or the moving average min += c * (batch_min - min) */
        const float c = (float)o->o.averaging_constant;
        for (int64_t k = 0; k < C; k++) {
            if (o->o.kind == WEFT_OBSERVER_MOVING_AVERAGE) {
                o->min[k] = o->min[k] + c * (lo[k] - o->min[k]);
                o->max[k] = o->max[k] + c * (hi[k] - o->max[k]);
            } else {
                o->min[k] = fminf(o->min[k], lo[k]);
                o->max[k] = fmaxf(o->max[k], hi[k]);
            }
        }
    }
    o->seen = true;
out:
    free(lo);
    free(hi);
    weft_scope_pop();
    return rc;
}

static int not_seen(void)
{
    return weft_error_set(WEFT_ERR_RUNTIME, "observer: must run observer before calling "
                                            "calculate_qparams (it saw no data)");
}

int weft_observer_range(const weft_observer *o, double *min, double *max)
{
    if (!o || !o->seen)
        return o ? not_seen() : weft_error_set(WEFT_ERR_VALUE, "observer is NULL");
    if (o->hist)
        return quant_histogram_range(o->hist, o->o.dtype, min, max);
    if (o->channels != 1 || o->o.ch_axis >= 0)
        return weft_error_set(WEFT_ERR_RUNTIME, "observer: a per-channel observer has a range "
                                                "per channel (weft_observer_qparams_per_channel)");
    *min = o->min[0];
    *max = o->max[0];
    return 0;
}

/* A channel that saw no number (all NaN) gets torch's default qparams range: 0. */
static int channel_qparams(const weft_observer *o, float lo, float hi, float *scale, int64_t *zp)
{
    if (lo > hi)
        lo = hi = 0.0f;
    return weft_qparams_from_range(lo, hi, o->o.dtype, o->o.symmetric, scale, zp);
}

int weft_observer_qparams(const weft_observer *o, float *scale, int64_t *zero_point)
{
    double lo, hi;
    int rc = weft_observer_range(o, &lo, &hi);
    return rc ? rc : channel_qparams(o, (float)lo, (float)hi, scale, zero_point);
}

int weft_observer_qparams_per_channel(const weft_observer *o, weft_tensor **scales,
                                      weft_tensor **zero_points)
{
    *scales = *zero_points = NULL;
    if (!o || !o->seen)
        return o ? not_seen() : weft_error_set(WEFT_ERR_VALUE, "observer is NULL");
    if (o->hist)
        return weft_error_set(WEFT_ERR_RUNTIME, "observer: a histogram observer is per tensor");
    const int64_t C = o->channels;
    float *s = malloc((size_t)C * sizeof *s);
    int64_t *z = malloc((size_t)C * sizeof *z);
    int rc = s && z ? 0 : weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory");
    for (int64_t c = 0; c < C && rc == 0; c++)
        rc = channel_qparams(o, o->min[c], o->max[c], &s[c], &z[c]);
    weft_scope_push();
    weft_tensor *st = rc == 0 ? quant_f32(1, &C, s) : NULL;
    weft_tensor *zt = rc == 0 ? quant_i64(1, &C, z) : NULL;
    if (rc == 0 && (!st || !zt))
        rc = weft_error_code();
    if (rc == 0) {
        weft_tensor_retain(st);
        weft_tensor_retain(zt);
    }
    weft_scope_pop();
    free(s);
    free(z);
    if (rc != 0)
        return rc;
    *scales = weft_autorelease(st);
    *zero_points = weft_autorelease(zt);
    return *scales && *zero_points ? 0 : weft_error_code();
}
