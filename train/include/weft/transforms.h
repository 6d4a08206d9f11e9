/* weft/transforms.h: torchvision's image transforms on one sample, and the pipeline of them
 * that the data loader runs in its workers (data augmentation).
 *
 * An image here is C planes of H x W float32 values in C order, [C, H, W]: what
 * torchvision's ToTensor gives, and what the loader makes of a sample before the first
 * transform (x/255 for uint8 fields, the value itself otherwise). A [H, W] field is one
 * plane.
 *
 * Every transform has a deterministic function that takes its parameters explicitly, as
 * torchvision.transforms.functional does (weft_transform_pad, _crop, _flip, _resize,
 * _warp, _normalize, _blend...), and every random one a sampler that draws those
 * parameters as the torchvision class's get_params does, from a weft_transform_rng. The
 * pipeline (weft_transforms) strings them together in the order the config lists them.
 *
 * Randomness. The loader gives each sample its own stream, keyed by (seed, epoch, sample
 * index) and by nothing else (not the worker, not the batch): Philox (weft/philox.h) with
 * key seed ^ WEFT_TRANSFORM_KEY and blocks from (epoch << 40) | (index << 10), one 32-bit
 * word per draw (weft_philox_uniform_f64). So any number of workers gives bit-identical
 * batches, two epochs differ, and a resumed run draws what the first one would have.
 * Sample indices must be below 2^30 and a sample uses at most 4096 draws; random_erasing's
 * noise (value = random) comes from a stream of its own, keyed by the sample's block.
 *
 * Threading: the functions are pure; a built pipeline is immutable and may be applied from
 * several threads at once. Errors: negative (or NULL) with the thread's error set.
 */
#ifndef WEFT_TRANSFORMS_H
#define WEFT_TRANSFORMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct weft_config;

#define WEFT_TRANSFORM_KEY 0x6175676d656e74ull /* "augment": apart from the shuffle's key */
#define WEFT_TRANSFORM_MAX_CHANNELS 16          /* per-channel values (fill, mean, value) */
/* Bounds on what a config may ask of the pipeline, each refused naming its key: an edge
 * (size, one side's padding, resize's longer edge) of at most 65536 pixels, and an image
 * (input, padded or output, C x H x W) of at most 2^30 values between two steps; the
 * loader's buffers hold three such images per sample in flight. */
#define WEFT_TRANSFORM_MAX_EDGE 65536
#define WEFT_TRANSFORM_MAX_NUMEL (INT64_C(1) << 30)

enum weft_interp { WEFT_INTERP_NEAREST, WEFT_INTERP_BILINEAR };
/* torchvision's padding modes: a constant, the edge value repeated, a mirror without
 * the edge (torch's reflect: pad < size) and with it (symmetric: pad <= size). */
enum weft_pad_mode { WEFT_PAD_CONSTANT, WEFT_PAD_EDGE, WEFT_PAD_REFLECT, WEFT_PAD_SYMMETRIC };

/* ---- random draws ----------------------------------------------------------------- */

/* A stream of uniform draws in [0, 1): Philox words, or (fixed != NULL) the values
 * fixed[0..nfixed) in order, then zeros: how the tests give a sampler torchvision's
 * draws. */
struct weft_transform_rng {
    uint64_t key, block, used;
    const double *fixed;
    int64_t nfixed;
};

/* Sample `index`'s stream in `epoch` for loader seed `seed` (see Randomness). */
struct weft_transform_rng weft_transform_rng_sample(uint64_t seed, int64_t epoch, int64_t index);
/* The stream that replays fixed[0..n) (not copied: it must outlive the stream). */
struct weft_transform_rng weft_transform_rng_fixed(const double *fixed, int64_t n);
/* torch's uniform_(lo, hi) on one draw u: lo + u * (hi - lo). */
double weft_transform_uniform(struct weft_transform_rng *r, double lo, double hi);
/* torch.randint(lo, hi): lo + floor(u * (hi - lo)), an integer in [lo, hi); hi > lo. */
int64_t weft_transform_randint(struct weft_transform_rng *r, int64_t lo, int64_t hi);

/* ---- geometry (transform_geometry.c) ---------------------------------------------- */

/* F.pad: pad = {left, top, right, bottom}, each >= 0; dst is
 * [c, h + top + bottom, w + left + right]. Errors: reflect with a pad >= the size along
 * it, symmetric with a pad > it (torch's and torchvision's limits). */
int weft_transform_pad(const float *src, int64_t c, int64_t h, int64_t w, const int64_t pad[4],
                       enum weft_pad_mode mode, float fill, float *dst);
/* F.crop: dst [c, th, tw] is src from row top, column left; what lies outside src is 0
 * (torchvision pads then). */
void weft_transform_crop(const float *src, int64_t c, int64_t h, int64_t w, int64_t top,
                         int64_t left, int64_t th, int64_t tw, float *dst);
/* F.hflip (horizontal) or F.vflip: dst [c, h, w]. */
void weft_transform_flip(const float *src, int64_t c, int64_t h, int64_t w, bool horizontal,
                         float *dst);
/* torch's interpolate(size=(oh, ow), mode, align_corners=False, antialias=False), what
 * F.resize does to a float tensor: dst [c, oh, ow]. */
void weft_transform_resize(const float *src, int64_t c, int64_t h, int64_t w, int64_t oh,
                           int64_t ow, enum weft_interp interp, float *dst);
/* F.resize's output size: n == 2 is size = {h, w} as given; n == 1 matches the shorter
 * edge to size[0] and keeps the aspect ratio (the longer edge truncated). */
void weft_transform_resize_shape(int64_t h, int64_t w, int n, const int64_t size[2],
                                 int64_t *oh, int64_t *ow);
/* torchvision's _get_inverse_affine_matrix about the image centre: the 2x3 matrix that
 * maps an output pixel (centred coordinates) to where it is read in the input, for a
 * rotation by `angle` degrees (clockwise, as F.affine; F.rotate passes -angle), a
 * translation (tx, ty) in pixels, a scale and shears in degrees. */
void weft_transform_affine_matrix(double angle, double tx, double ty, double scale,
                                  double shear_x, double shear_y, double m[6]);
/* F.affine / F.rotate on a tensor: dst [c, h, w] sampled from src through m (above) with
 * grid_sample(align_corners=False, padding_mode="zeros"); pixel centres at x + 0.5.
 * fill: NULL is torchvision's fill=None (zeros outside); else nfill values (1 or c)
 * blended in by the sampled mask as torchvision does: out * mask + (1 - mask) * fill for
 * bilinear, fill where mask < 0.5 for nearest. */
void weft_transform_warp(const float *src, int64_t c, int64_t h, int64_t w, const double m[6],
                         enum weft_interp interp, const float *fill, int nfill, float *dst);

/* ---- values (transform_color.c) --------------------------------------------------- */

/* F.normalize in place: (x - mean[k]) / std[k], k the channel (n == 1: one for all). */
void weft_transform_normalize(float *img, int64_t c, int64_t h, int64_t w, const double *mean,
                              const double *std, int n);
/* F.adjust_brightness, _contrast, _saturation in place, for values in [0, 1]: torchvision's
 * blend (factor * img + (1 - factor) * other).clamp(0, 1) with other = 0, the mean of the
 * grayscale image (of the image when c != 3), and the grayscale image (saturation leaves
 * a one-channel image as it is). */
void weft_transform_brightness(float *img, int64_t c, int64_t h, int64_t w, double factor);
void weft_transform_contrast(float *img, int64_t c, int64_t h, int64_t w, double factor);
void weft_transform_saturation(float *img, int64_t c, int64_t h, int64_t w, double factor);
/* F.erase in place: rows [i, i + eh) and columns [j, j + ew) become v: nv == 1 one value,
 * nv == c one per channel, nv == c * eh * ew a [c, eh, ew] block. */
void weft_transform_erase(float *img, int64_t c, int64_t h, int64_t w, int64_t i, int64_t j,
                          int64_t eh, int64_t ew, const float *v, int64_t nv);

/* ---- parameters, as torchvision's get_params (transform_params.c) ----------------- */

/* A box of an image: rows [top, top + h), columns [left, left + w). */
struct weft_transform_box {
    int64_t top, left, h, w;
};

/* RandomCrop.get_params on an (already padded) h x w image: top = randint(0, h - th + 1),
 * then left = randint(0, w - tw + 1). The caller checks th <= h and tw <= w. */
struct weft_transform_box weft_transform_crop_params(struct weft_transform_rng *r, int64_t h,
                                                     int64_t w, int64_t th, int64_t tw);
/* RandomResizedCrop.get_params: up to 10 attempts of an area fraction in scale[] and a
 * log-uniform aspect ratio in ratio[] (4 draws each when it fits, 2 when not), then the
 * centred fallback clamped to the ratio range. */
struct weft_transform_box weft_transform_resized_crop_params(struct weft_transform_rng *r,
                                                             int64_t h, int64_t w,
                                                             const double scale[2],
                                                             const double ratio[2]);
/* RandomErasing.get_params: up to 10 attempts as above but with h from * ratio and w from
 * / ratio and strictly inside the image; *found false (box = the whole image) when none
 * fits. With random_value, c * box.h * box.w standard normals (Box-Muller) into noise[]
 * (sized c * h * w by the caller), from the noise stream (see Randomness). */
struct weft_transform_box weft_transform_erasing_params(struct weft_transform_rng *r, int64_t c,
                                                        int64_t h, int64_t w,
                                                        const double scale[2],
                                                        const double ratio[2],
                                                        bool random_value, float *noise,
                                                        bool *found);
/* RandomAffine.get_params, into {angle, tx, ty, scale, shear_x, shear_y}: the angle in
 * degrees[]; with translate (fractions of width and height) tx, ty rounded to whole
 * pixels; with scale_range a scale; shear (n = 0, 2 or 4 values) an x and a y shear. */
void weft_transform_affine_params(struct weft_transform_rng *r, int64_t h, int64_t w,
                                  const double degrees[2], const double *translate,
                                  const double *scale_range, const double *shear, int nshear,
                                  double out[6]);

/* ---- the pipeline (transform_pipeline.c) ----------------------------------------- */

typedef struct weft_transforms weft_transforms;

/* The pipeline [section] of cfg describes for samples of shape (ndim 2: [H, W]; 3:
 * [C, H, W]): the key `transforms` lists them in order ("random_crop,
 * random_horizontal_flip, normalize") and each one's keys are in a section
 * [<section>.transform.NAME] (size = 28 in [data.transform.random_crop]); normalize's are
 * the section's own mean and std. NULL without an error when there is no `transforms` key.
 * Errors (WEFT_ERR_CONFIG) name the file, section, key, the value and what was expected:
 * an unknown transform, a bad size, p outside [0, 1], a crop larger than the (padded)
 * image, a section of a transform that is not listed, a key its transform does not
 * take, a value past its key's upper bound (the limits above; degrees and shear within
 * a turn, 360; scale and ratio ranges within [1/1000, 1000] (random_erasing's scale
 * within [0, 1], as torchvision's); color_jitter's factors up to 1000; fill and value in
 * float32's range)... The caller owns the result (weft_transforms_release). */
weft_transforms *weft_transforms_from_config(struct weft_config *cfg, const char *section,
                                             int ndim, const int64_t *shape);
weft_transforms *weft_transforms_retain(weft_transforms *t);
void weft_transforms_release(weft_transforms *t); /* NULL is a no-op */

/* The sample shape the pipeline was built for (*ndim 2 or 3), and the shape after it (what
 * the loader reports), of the same ndim. */
void weft_transforms_in_shape(const weft_transforms *t, int *ndim, int64_t *shape);
void weft_transforms_out_shape(const weft_transforms *t, int64_t *shape);
/* Floats of the largest image between two steps (a scratch buffer holds twice that). */
int64_t weft_transforms_max_numel(const weft_transforms *t);
/* Whether normalize is listed (the loader then does not normalise again). */
bool weft_transforms_normalizes(const weft_transforms *t);

/* Runs the pipeline on one sample: in [C, H, W] (the input shape), out (the output
 * shape), scratch (2 * max_numel floats). train: the random transforms draw from rng;
 * otherwise they take their evaluation form, as torchvision's usual test transforms:
 * random_crop is a centre crop to its size, random_resized_crop a resize of the whole
 * image to its size, and the flips, rotation, affine, color_jitter and erasing do
 * nothing. Returns 0 or negative. */
int weft_transforms_apply(const weft_transforms *t, const float *in, float *out, float *scratch,
                          struct weft_transform_rng *rng, bool train);

/* One line naming the steps, "random_crop(28x28) -> normalize" (for logs). */
const char *weft_transforms_describe(const weft_transforms *t, char *buf, size_t size);

#ifdef __cplusplus
}
#endif
#endif
