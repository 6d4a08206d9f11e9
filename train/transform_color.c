/* train/transform_color.c: the transforms that change values in place (normalize, the
 * brightness/contrast/saturation blends of ColorJitter, erasing) on one [C, H, W] float
 * image, with torchvision 0.14's formulas for float tensors. */
#include "weft/transforms.h"

void weft_transform_normalize(float *img, int64_t c, int64_t h, int64_t w, const double *mean,
                              const double *std, int n)
{
    /* img [c, h, w]; torchvision's sub_(mean).div_(std) in float32 */
    for (int64_t k = 0; k < c; k++) {
        float mu = (float)mean[n == 1 ? 0 : k], sd = (float)std[n == 1 ? 0 : k];
        float *p = img + k * h * w;
        for (int64_t i = 0; i < h * w; i++)
            p[i] = (p[i] - mu) / sd;
    }
}

/* _blend's (ratio * a + (1 - ratio) * b).clamp(0, 1) for one value. */
static float blend(float a, float b, float ratio)
{
    float v = ratio * a + (1.0f - ratio) * b;
    return v < 0.0f ? 0.0f : v > 1.0f ? 1.0f : v;
}

/* rgb_to_grayscale's weights, in float32 as torchvision computes them. */
static float gray(const float *img, int64_t plane, int64_t i)
{
    return 0.2989f * img[i] + 0.587f * img[plane + i] + 0.114f * img[2 * plane + i];
}

void weft_transform_brightness(float *img, int64_t c, int64_t h, int64_t w, double factor)
{
    /* img [c, h, w] */
    for (int64_t i = 0; i < c * h * w; i++)
        img[i] = blend(img[i], 0.0f, (float)factor);
}

void weft_transform_contrast(float *img, int64_t c, int64_t h, int64_t w, double factor)
{
    /* img [c, h, w]: the mean of the grayscale image (of all values unless RGB) */
    int64_t plane = h * w;
    double sum = 0;
    if (c == 3)
        for (int64_t i = 0; i < plane; i++)
            sum += gray(img, plane, i);
    else
        for (int64_t i = 0; i < c * plane; i++)
            sum += img[i];
    int64_t n = c == 3 ? plane : c * plane;
    float mean = n > 0 ? (float)(sum / (double)n) : 0.0f;
    for (int64_t i = 0; i < c * plane; i++)
        img[i] = blend(img[i], mean, (float)factor);
}

void weft_transform_saturation(float *img, int64_t c, int64_t h, int64_t w, double factor)
{
    if (c != 3) /* torchvision returns a one-channel image unchanged (PIL's behaviour) */
        return;
    /* img [3, h, w] */
    int64_t plane = h * w;
    for (int64_t i = 0; i < plane; i++) {
        float g = gray(img, plane, i);
        for (int64_t k = 0; k < 3; k++)
            img[k * plane + i] = blend(img[k * plane + i], g, (float)factor);
    }
}

void weft_transform_erase(float *img, int64_t c, int64_t h, int64_t w, int64_t i, int64_t j,
                          int64_t eh, int64_t ew, const float *v, int64_t nv)
{
    /* img [c, h, w]; v [1], [c] or [c, eh, ew] */
    for (int64_t k = 0; k < c; k++)
        for (int64_t y = 0; y < eh; y++)
            for (int64_t x = 0; x < ew; x++) {
                float val = nv == 1 ? v[0] : nv == c ? v[k] : v[(k * eh + y) * ew + x];
                img[(k * h + i + y) * w + j + x] = val;
            }
}
