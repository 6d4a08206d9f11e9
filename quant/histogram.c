/* quant/histogram.c: HistogramObserver (torch/ao/quantization/observer.py, 1.13): a running
 * histogram of 2048 bins over [min, max] that is re-binned onto a wider range as new data
 * widens it (the old counts spread over a grid upsample_rate times finer, then summed into
 * the new bins), and the search over it for the range whose uniform quantization into 256
 * levels has the least L2 error (caffe2's NonlinearQuantizationParamsSearch).
 *
 * Where torch 1.13 differs, on purpose: its torch.histc calls are given int(min) and
 * int(max), which truncates the range to whole numbers (values outside it fall out of the
 * histogram; fixed in torch 2.0); here the bins cover the true range. And the re-binned old
 * histogram is computed from its prefix sums instead of materialising the fine grid (torch
 * allocates bins * downsample_rate floats, which a range that grows a thousandfold between
 * two batches makes gigabytes); the numbers are the same. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "observer.h"

struct quant_histogram {
    int bins, upsample;
    bool init;
    float min, max;  /* float32, as torch's buffers */
    double *counts;  /* [bins] */
    double *scratch; /* [bins + 1] */
};

struct quant_histogram *quant_histogram_new(int bins, int upsample_rate)
{
    struct quant_histogram *h = calloc(1, sizeof *h);
    if (h) {
        h->counts = calloc((size_t)bins, sizeof *h->counts);
        h->scratch = calloc((size_t)bins + 1, sizeof *h->scratch);
    }
    if (!h || !h->counts || !h->scratch) {
        quant_histogram_free(h);
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory for a histogram observer");
        return NULL;
    }
    h->bins = bins;
    h->upsample = upsample_rate;
    return h;
}

void quant_histogram_free(struct quant_histogram *h)
{
    if (!h)
        return;
    free(h->counts);
    free(h->scratch);
    free(h);
}

/* torch.histc(x, bins, lo, hi) added into out: values outside [lo, hi] are dropped, hi goes
 * to the last bin; lo == hi widens to [lo - 1, hi + 1] as histc does. */
static void histc_add(const float *x, int64_t n, int bins, double lo, double hi, double *out)
{
    if (lo == hi) {
        lo -= 1;
        hi += 1;
    }
    const double k = bins / (hi - lo);
    for (int64_t i = 0; i < n; i++) {
        double v = x[i];
        if (!(v >= lo && v <= hi)) /* NaN too */
            continue;
        int64_t b = (int64_t)((v - lo) * k);
        out[b >= bins ? bins - 1 : b] += 1.0;
    }
}

static void batch_minmax(const float *x, int64_t n, float *lo, float *hi)
{
    float l = INFINITY, h = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        l = x[i] < l ? x[i] : l;
        h = x[i] > h ? x[i] : h;
    }
    *lo = l;
    *hi = h;
}

/* _combine_histograms' interpolation of the old counts onto the new bins: the old bins,
 * each repeated `up` times on the fine grid from start_idx, summed per `down` fine cells,
 * divided by `up`. I(p), the sum of the fine cells [0, p), comes from the old prefix sums. */
static void rebin_old(const struct quant_histogram *h, int64_t down, int64_t start, double *out)
{
    const int64_t bins = h->bins, up = h->upsample;
    double *prefix = h->scratch; /* prefix[i] = counts[0] + ... + counts[i - 1] */
    prefix[0] = 0;
    for (int64_t i = 0; i < bins; i++)
        prefix[i + 1] = prefix[i] + h->counts[i];
    /* Only the first bins * down fine cells exist in torch's array: [start, start +
     * bins * up) is clipped to them. */
    const int64_t end = start + bins * up < bins * down ? start + bins * up : bins * down;
    double prev = 0;
    for (int64_t i = 0; i < bins; i++) {
        int64_t p = (i + 1) * down; /* fine cells [0, p) */
        int64_t m = (p < end ? p : end) - start;
        double I = 0;
        if (m > 0) {
            int64_t full = m / up, part = m % up;
            I = prefix[full] * (double)up + (full < bins ? (double)part * h->counts[full] : 0.0);
        }
        out[i] += (I - prev) / (double)up;
        prev = I;
    }
}

int quant_histogram_update(struct quant_histogram *h, const float *x, int64_t n)
{
    float lo, hi;
    batch_minmax(x, n, &lo, &hi);
    if (lo > hi) /* nothing but NaN */
        return 0;
    if (!h->init || h->min == h->max) {
        h->min = lo;
        h->max = hi;
        memset(h->counts, 0, (size_t)h->bins * sizeof *h->counts);
        histc_add(x, n, h->bins, lo, hi, h->counts);
        h->init = true;
        return 0;
    }
    /* _adjust_min_max: a grid of width (max - min) / (bins * up) common to both ranges;
     * the new range grows at the top to a whole number of old grids. */
    float cmin = fminf(lo, h->min), cmax = fmaxf(hi, h->max);
    const float fine = (h->max - h->min) / (float)((double)h->bins * h->upsample);
    const int64_t down = (int64_t)ceilf((cmax - cmin) / ((float)h->bins * fine));
    const float e = (float)down * ((float)h->bins * fine) - (cmax - cmin);
    cmax = cmax + e;
    const int64_t start = (int64_t)nearbyintf((h->min - cmin) / fine);
    double *fresh = calloc((size_t)h->bins, sizeof *fresh);
    if (!fresh)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory in a histogram observer");
    histc_add(x, n, h->bins, cmin, cmax, fresh);
    if (cmin == h->min && cmax == h->max) {
        for (int i = 0; i < h->bins; i++)
            fresh[i] += h->counts[i];
    } else {
        rebin_old(h, down, start, fresh);
    }
    memcpy(h->counts, fresh, (size_t)h->bins * sizeof *fresh);
    free(fresh);
    h->min = cmin;
    h->max = cmax;
    return 0;
}

/* density * (end^3 - begin^3) / 3: the L2 error of values spread uniformly over a bin. */
static double norm_of(double begin, double end, double density)
{
    return density * (end * end * end - begin * begin * begin) / 3.0;
}

/* _compute_quantization_error: the error of quantizing the histogram into dst_bins levels
 * spread over source bins [start, end]. */
static double quantization_error(const struct quant_histogram *h, int dst_bins, int64_t start,
                                 int64_t end)
{
    const double bin_width = ((double)h->max - (double)h->min) / h->bins;
    const double dst_width = bin_width * (double)(end - start + 1) / dst_bins;
    if (dst_width == 0.0)
        return 0.0;
    double total = 0;
    for (int64_t b = 0; b < h->bins; b++) {
        const double density = h->counts[b] / bin_width;
        if (density == 0)
            continue;
        const double begin = (double)(b - start) * bin_width, stop = begin + bin_width;
        const double db = fmin(fmax(floor(begin / dst_width), 0), dst_bins - 1);
        const double de = fmin(fmax(floor(stop / dst_width), 0), dst_bins - 1);
        total += norm_of(begin - (db + 0.5) * dst_width, dst_width / 2, density);
        total += (de - db - 1) * norm_of(-dst_width / 2, dst_width / 2, density);
        total += norm_of(-dst_width / 2, stop - (de * dst_width + dst_width / 2), density);
    }
    return total;
}

int quant_histogram_range(const struct quant_histogram *h, enum weft_dtype dtype, double *min,
                          double *max)
{
    if (!h->init)
        return weft_error_set(WEFT_ERR_RUNTIME, "observer: must run observer before calling "
                                                "calculate_qparams (it saw no data)");
    (void)dtype;
    const int dst_bins = 256; /* 2 ** bits of uint8 and int8 alike */
    const int64_t bins = h->bins;
    double *csum = h->scratch, total = 0;
    for (int64_t i = 0; i < bins; i++)
        csum[i] = total += h->counts[i];
    /* Walk the quantiles inwards in steps of 1e-5, from the side that moves further,
     * while the error keeps falling. */
    const double step = 1e-5;
    double alpha = 0, beta = 1, norm_min = INFINITY;
    int64_t start = 0, end = bins - 1;
    while (alpha < beta) {
        double next_alpha = alpha + step, next_beta = beta - step;
        int64_t l = start, r = end;
        while (l < end && csum[l] < next_alpha * total)
            l++;
        while (r > start && csum[r] > next_beta * total)
            r--;
        int64_t next_start = start, next_end = end;
        if (l - start > end - r) {
            next_start = l;
            alpha = next_alpha;
        } else {
            next_end = r;
            beta = next_beta;
        }
        if (next_start == start && next_end == end)
            continue;
        double norm = quantization_error(h, dst_bins, next_start, next_end);
        if (norm > norm_min)
            break;
        norm_min = norm;
        start = next_start;
        end = next_end;
    }
    const float width = (h->max - h->min) / (float)bins;
    *min = h->min + width * (float)start;
    *max = h->min + width * (float)(end + 1);
    return 0;
}
