/* train/transform_params.c: each sample's random stream, and the random parameters of the
 * transforms drawn from it in torchvision 0.14's order and with its arithmetic (get_params
 * of RandomCrop, RandomResizedCrop, RandomErasing, RandomAffine). Python's round() is
 * round-half-even: rint() under the default rounding mode. */
#include "weft/transforms.h"

#include <math.h>

#include "weft/philox.h"

struct weft_transform_rng weft_transform_rng_sample(uint64_t seed, int64_t epoch, int64_t index)
{
    struct weft_transform_rng r = {0};
    r.key = seed ^ WEFT_TRANSFORM_KEY;
    r.block = ((uint64_t)epoch << 40) | ((uint64_t)index << 10);
    return r;
}

struct weft_transform_rng weft_transform_rng_fixed(const double *fixed, int64_t n)
{
    struct weft_transform_rng r = {0};
    r.fixed = fixed;
    r.nfixed = n;
    return r;
}

static double next_u01(struct weft_transform_rng *r)
{
    uint64_t i = r->used++;
    if (r->fixed)
        return (int64_t)i < r->nfixed ? r->fixed[i] : 0.0;
    return weft_philox_uniform_f64(r->key, r->block, i);
}

double weft_transform_uniform(struct weft_transform_rng *r, double lo, double hi)
{
    return lo + next_u01(r) * (hi - lo);
}

int64_t weft_transform_randint(struct weft_transform_rng *r, int64_t lo, int64_t hi)
{
    int64_t k = lo + (int64_t)floor(next_u01(r) * (double)(hi - lo));
    return k < hi ? k : hi - 1;
}

/* A standard normal by Box-Muller from two draws (the noise of value = random). */
static float next_normal(struct weft_transform_rng *r)
{
    double u1 = 1.0 - next_u01(r), u2 = next_u01(r);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586476925 * u2));
}

struct weft_transform_box weft_transform_crop_params(struct weft_transform_rng *r, int64_t h,
                                                     int64_t w, int64_t th, int64_t tw)
{
    if (h == th && w == tw) /* torchvision draws nothing then */
        return (struct weft_transform_box){0, 0, h, w};
    int64_t top = weft_transform_randint(r, 0, h - th + 1);
    int64_t left = weft_transform_randint(r, 0, w - tw + 1);
    return (struct weft_transform_box){top, left, th, tw};
}

struct weft_transform_box weft_transform_resized_crop_params(struct weft_transform_rng *r,
                                                             int64_t h, int64_t w,
                                                             const double scale[2],
                                                             const double ratio[2])
{
    double area = (double)h * (double)w;
    double log_lo = log(ratio[0]), log_hi = log(ratio[1]);
    for (int attempt = 0; attempt < 10; attempt++) {
        double target = area * weft_transform_uniform(r, scale[0], scale[1]);
        double aspect = exp(weft_transform_uniform(r, log_lo, log_hi));
        int64_t cw = (int64_t)rint(sqrt(target * aspect));
        int64_t ch = (int64_t)rint(sqrt(target / aspect));
        if (cw > 0 && cw <= w && ch > 0 && ch <= h) {
            int64_t top = weft_transform_randint(r, 0, h - ch + 1);
            int64_t left = weft_transform_randint(r, 0, w - cw + 1);
            return (struct weft_transform_box){top, left, ch, cw};
        }
    }
    /* Fallback: the whole image, cut to the nearest end of the ratio range, centred. */
    double in_ratio = (double)w / (double)h;
    double lo = fmin(ratio[0], ratio[1]), hi = fmax(ratio[0], ratio[1]);
    int64_t cw = w, ch = h;
    if (in_ratio < lo)
        ch = (int64_t)rint((double)cw / lo);
    else if (in_ratio > hi)
        cw = (int64_t)rint((double)ch * hi);
    return (struct weft_transform_box){(h - ch) / 2, (w - cw) / 2, ch, cw};
}

struct weft_transform_box weft_transform_erasing_params(struct weft_transform_rng *r, int64_t c,
                                                        int64_t h, int64_t w,
                                                        const double scale[2],
                                                        const double ratio[2],
                                                        bool random_value, float *noise,
                                                        bool *found)
{
    double area = (double)h * (double)w;
    double log_lo = log(ratio[0]), log_hi = log(ratio[1]);
    for (int attempt = 0; attempt < 10; attempt++) {
        double erase = area * weft_transform_uniform(r, scale[0], scale[1]);
        double aspect = exp(weft_transform_uniform(r, log_lo, log_hi));
        int64_t eh = (int64_t)rint(sqrt(erase * aspect));
        int64_t ew = (int64_t)rint(sqrt(erase / aspect));
        if (!(eh < h && ew < w))
            continue;
        int64_t top = weft_transform_randint(r, 0, h - eh + 1);
        int64_t left = weft_transform_randint(r, 0, w - ew + 1);
        if (random_value) {
            /* Noise can need more draws than a sample's block of the stream holds: it comes
             * from a stream of its own, keyed by the sample's block, from a counter no
             * other step of the sample starts at. Fixed draws (tests) are used as they are. */
            struct weft_transform_rng own = *r;
            if (!r->fixed) {
                own.key = r->key ^ (r->block * 0x9E3779B97F4A7C15ull) ^ 0x6e6f697365ull;
                own.block = 0;
                own.used = r->used << 32;
            }
            struct weft_transform_rng *src = r->fixed ? r : &own;
            for (int64_t i = 0; i < c * eh * ew; i++)
                noise[i] = next_normal(src);
        }
        *found = true;
        return (struct weft_transform_box){top, left, eh, ew};
    }
    *found = false;
    return (struct weft_transform_box){0, 0, h, w};
}

void weft_transform_affine_params(struct weft_transform_rng *r, int64_t h, int64_t w,
                                  const double degrees[2], const double *translate,
                                  const double *scale_range, const double *shear, int nshear,
                                  double out[6])
{
    out[0] = weft_transform_uniform(r, degrees[0], degrees[1]);
    out[1] = out[2] = 0.0;
    if (translate) {
        double max_dx = translate[0] * (double)w, max_dy = translate[1] * (double)h;
        out[1] = rint(weft_transform_uniform(r, -max_dx, max_dx));
        out[2] = rint(weft_transform_uniform(r, -max_dy, max_dy));
    }
    out[3] = scale_range ? weft_transform_uniform(r, scale_range[0], scale_range[1]) : 1.0;
    out[4] = nshear >= 2 ? weft_transform_uniform(r, shear[0], shear[1]) : 0.0;
    out[5] = nshear == 4 ? weft_transform_uniform(r, shear[2], shear[3]) : 0.0;
}
