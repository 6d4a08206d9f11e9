/* train/transform_geometry.c: the transforms that move pixels (pad, crop, flip, resize,
 * affine warps) on one [C, H, W] float image, written to give torchvision 0.14's results
 * on float tensors: its index conventions, and float32 arithmetic where torch uses it. */
#include "weft/transforms.h"

#include <math.h>
#include <string.h>

#include "weft/error.h"

/* Where output coordinate x (in [-before, n + after)) reads from an axis of n values; -1:
 * the constant. The caller has checked that one mirror is enough. */
static int64_t pad_index(int64_t x, int64_t n, enum weft_pad_mode mode)
{
    if (x >= 0 && x < n)
        return x;
    switch (mode) {
    case WEFT_PAD_EDGE: return x < 0 ? 0 : n - 1;
    case WEFT_PAD_REFLECT: return n == 1 ? 0 : x < 0 ? -x : 2 * (n - 1) - x;
    case WEFT_PAD_SYMMETRIC: return x < 0 ? -x - 1 : 2 * n - 1 - x;
    default: return -1;
    }
}

int weft_transform_pad(const float *src, int64_t c, int64_t h, int64_t w, const int64_t pad[4],
                       enum weft_pad_mode mode, float fill, float *dst)
{
    static const char *const names[] = {"constant", "edge", "reflect", "symmetric"};
    for (int k = 0; k < 4; k++) {
        int64_t size = k % 2 == 0 ? w : h;
        if (pad[k] < 0)
            return weft_error_set(WEFT_ERR_VALUE, "pad: padding must be >= 0, got %lld",
                                  (long long)pad[k]);
        bool too_big = (mode == WEFT_PAD_REFLECT && pad[k] >= size) ||
                       (mode == WEFT_PAD_SYMMETRIC && pad[k] > size) ||
                       (mode == WEFT_PAD_EDGE && size == 0 && pad[k] > 0);
        if (too_big)
            return weft_error_set(WEFT_ERR_VALUE,
                                  "pad: padding size should be less than%s the corresponding "
                                  "input dimension for padding_mode=%s, but got padding %lld "
                                  "for a dimension of size %lld",
                                  mode == WEFT_PAD_SYMMETRIC ? " or equal to" : "", names[mode],
                                  (long long)pad[k], (long long)size);
    }
    int64_t oh = h + pad[1] + pad[3], ow = w + pad[0] + pad[2];
    /* src [c, h, w] -> dst [c, oh, ow] */
    for (int64_t k = 0; k < c; k++) {
        const float *s = src + k * h * w;
        float *d = dst + k * oh * ow;
        for (int64_t y = 0; y < oh; y++) {
            int64_t sy = pad_index(y - pad[1], h, mode);
            for (int64_t x = 0; x < ow; x++) {
                int64_t sx = pad_index(x - pad[0], w, mode);
                d[y * ow + x] = sy < 0 || sx < 0 ? fill : s[sy * w + sx];
            }
        }
    }
    return 0;
}

void weft_transform_crop(const float *src, int64_t c, int64_t h, int64_t w, int64_t top,
                         int64_t left, int64_t th, int64_t tw, float *dst)
{
    /* src [c, h, w] -> dst [c, th, tw] */
    for (int64_t k = 0; k < c; k++)
        for (int64_t y = 0; y < th; y++) {
            int64_t sy = top + y;
            float *d = dst + (k * th + y) * tw;
            for (int64_t x = 0; x < tw; x++) {
                int64_t sx = left + x;
                d[x] = sy >= 0 && sy < h && sx >= 0 && sx < w ? src[(k * h + sy) * w + sx] : 0.0f;
            }
        }
}

void weft_transform_flip(const float *src, int64_t c, int64_t h, int64_t w, bool horizontal,
                         float *dst)
{
    /* src, dst [c, h, w] */
    for (int64_t k = 0; k < c; k++)
        for (int64_t y = 0; y < h; y++) {
            const float *s = src + (k * h + (horizontal ? y : h - 1 - y)) * w;
            float *d = dst + (k * h + y) * w;
            if (horizontal)
                for (int64_t x = 0; x < w; x++)
                    d[x] = s[w - 1 - x];
            else
                memcpy(d, s, (size_t)w * sizeof *d);
        }
}

/* ---- resize: upsample_nearest2d and upsample_bilinear2d on the cpu ------------------ */

/* PyTorch's nearest_idx: the same index for equal sizes, >> 1 for doubling, else
 * floor(i * in / out) in float. */
static int64_t nearest_index(int64_t i, int64_t in, int64_t out)
{
    if (out == in)
        return i;
    if (out == 2 * in)
        return i >> 1;
    float scale = (float)in / (float)out;
    int64_t s = (int64_t)floorf((float)i * scale);
    return s < in - 1 ? s : in - 1;
}

/* area_pixel_compute_source_index (align_corners=False) and guard_index_and_lambda. */
static void linear_index(int64_t i, int64_t in, int64_t out, int64_t *i0, int64_t *i1,
                         float *l0, float *l1)
{
    float scale = (float)in / (float)out;
    float real = scale * ((float)i + 0.5f) - 0.5f;
    if (real < 0)
        real = 0;
    int64_t k = (int64_t)floorf(real);
    if (k > in - 1)
        k = in - 1;
    float lambda = real - (float)k;
    lambda = lambda < 0 ? 0 : lambda > 1 ? 1 : lambda;
    *i0 = k;
    *i1 = k < in - 1 ? k + 1 : k;
    *l1 = lambda;
    *l0 = 1.0f - lambda;
}

void weft_transform_resize(const float *src, int64_t c, int64_t h, int64_t w, int64_t oh,
                           int64_t ow, enum weft_interp interp, float *dst)
{
    /* src [c, h, w] -> dst [c, oh, ow] */
    for (int64_t y = 0; y < oh; y++) {
        int64_t y0, y1;
        float hy0, hy1;
        if (interp == WEFT_INTERP_NEAREST)
            y0 = y1 = nearest_index(y, h, oh), hy0 = 1, hy1 = 0;
        else
            linear_index(y, h, oh, &y0, &y1, &hy0, &hy1);
        for (int64_t x = 0; x < ow; x++) {
            if (interp == WEFT_INTERP_NEAREST) {
                int64_t sx = nearest_index(x, w, ow);
                for (int64_t k = 0; k < c; k++)
                    dst[(k * oh + y) * ow + x] = src[(k * h + y0) * w + sx];
                continue;
            }
            int64_t x0, x1;
            float wx0, wx1;
            linear_index(x, w, ow, &x0, &x1, &wx0, &wx1);
            for (int64_t k = 0; k < c; k++) {
                const float *s = src + k * h * w;
                dst[(k * oh + y) * ow + x] = hy0 * (wx0 * s[y0 * w + x0] + wx1 * s[y0 * w + x1]) +
                                             hy1 * (wx0 * s[y1 * w + x0] + wx1 * s[y1 * w + x1]);
            }
        }
    }
}

void weft_transform_resize_shape(int64_t h, int64_t w, int n, const int64_t size[2],
                                 int64_t *oh, int64_t *ow)
{
    if (n == 2) {
        *oh = size[0];
        *ow = size[1];
        return;
    }
    /* torchvision's _compute_resized_output_size: the short edge becomes size, the long
     * one int(size * long / short). */
    int64_t shorter = w <= h ? w : h, longer = w <= h ? h : w;
    double d = (double)size[0] * (double)longer / (double)shorter;
    int64_t new_long = d < 0x1p62 ? (int64_t)d : INT64_C(1) << 62; /* the caller bounds it */
    *ow = w <= h ? size[0] : new_long;
    *oh = w <= h ? new_long : size[0];
}

/* ---- affine warps: _get_inverse_affine_matrix, _gen_affine_grid, grid_sample --------- */

void weft_transform_affine_matrix(double angle, double tx, double ty, double scale,
                                  double shear_x, double shear_y, double m[6])
{
    const double deg = 3.14159265358979323846 / 180.0;
    double rot = angle * deg, sx = shear_x * deg, sy = shear_y * deg;
    /* RSS without scaling: torchvision's a, b, c, d; then its inverse, scaled, and the
     * translation applied (the centre is the origin here, so cx = cy = 0). */
    double a = cos(rot - sy) / cos(sy);
    double b = -cos(rot - sy) * tan(sx) / cos(sy) - sin(rot);
    double c = sin(rot - sy) / cos(sy);
    double d = -sin(rot - sy) * tan(sx) / cos(sy) + cos(rot);
    m[0] = d / scale;
    m[1] = -b / scale;
    m[2] = 0.0;
    m[3] = -c / scale;
    m[4] = a / scale;
    m[5] = 0.0;
    m[2] += m[0] * -tx + m[1] * -ty;
    m[5] += m[3] * -tx + m[4] * -ty;
}

static float at(const float *plane, int64_t h, int64_t w, int64_t y, int64_t x)
{
    return y >= 0 && y < h && x >= 0 && x < w ? plane[y * w + x] : 0.0f;
}

/* floorf without the libm call: grid coordinates are small, far inside int's range. */
static float floor_small(float v)
{
    if (!(fabsf(v) < 1e9f))
        return floorf(v);
    float t = (float)(int)v;
    return t > v ? t - 1.0f : t;
}

void weft_transform_warp(const float *src, int64_t c, int64_t h, int64_t w, const double m[6],
                         enum weft_interp interp, const float *fill, int nfill, float *dst)
{
    /* theta in float32 divided by half the size (torchvision's rescaled_theta), then per
     * output pixel its centred coordinate, the grid value (a dot product rounded once, as
     * the fused multiply-adds of torch's bmm do: near-ties of nearest sampling depend on
     * it), and the cpu grid_sample's unnormalisation (g + 1) * (size / 2) - 0.5. */
    float hw = 0.5f * (float)w, hh = 0.5f * (float)h;
    float r[6];
    for (int k = 0; k < 3; k++) {
        r[k] = (float)m[k] / hw;
        r[3 + k] = (float)m[3 + k] / hh;
    }
    /* src, dst [c, h, w] */
    for (int64_t y = 0; y < h; y++) {
        float yc = (float)y - hh + 0.5f;
        long double row_x = (long double)yc * r[1] + r[2], row_y = (long double)yc * r[4] + r[5];
        for (int64_t x = 0; x < w; x++) {
            float xc = (float)x - hw + 0.5f;
            float gx = (float)((long double)xc * r[0] + row_x);
            float gy = (float)((long double)xc * r[3] + row_y);
            /* Far outside is outside: clamped to a pixel beyond the border, so that a
             * nearly flat shear or a NaN reads nothing and converts to int64 safely. */
            float ix = fminf(fmaxf((gx + 1.0f) * hw - 0.5f, -2.0f), (float)w + 1.0f);
            float iy = fminf(fmaxf((gy + 1.0f) * hh - 0.5f, -2.0f), (float)h + 1.0f);
            float mask;
            if (interp == WEFT_INTERP_NEAREST) {
                int64_t nx = (int64_t)nearbyintf(ix), ny = (int64_t)nearbyintf(iy);
                bool in = nx >= 0 && nx < w && ny >= 0 && ny < h;
                mask = in ? 1.0f : 0.0f;
                for (int64_t k = 0; k < c; k++) {
                    float v = at(src + k * h * w, h, w, ny, nx);
                    if (fill && mask < 0.5f)
                        v = fill[nfill == 1 ? 0 : k];
                    dst[(k * h + y) * w + x] = v;
                }
                continue;
            }
            float fx = floor_small(ix), fy = floor_small(iy);
            int64_t x0 = (int64_t)fx, y0 = (int64_t)fy;
            float tx = ix - fx, ty = iy - fy;
            float nw = (1 - ty) * (1 - tx), ne = (1 - ty) * tx;
            float sw = ty * (1 - tx), se = ty * tx;
            if (x0 >= 0 && x0 + 1 < w && y0 >= 0 && y0 + 1 < h) {
                /* all four inside: the mask is 1 and fill has no part */
                for (int64_t k = 0; k < c; k++) {
                    const float *p = src + (k * h + y0) * w + x0;
                    dst[(k * h + y) * w + x] = p[0] * nw + p[1] * ne + p[w] * sw + p[w + 1] * se;
                }
                continue;
            }
            bool in00 = y0 >= 0 && y0 < h && x0 >= 0 && x0 < w;
            bool in01 = y0 >= 0 && y0 < h && x0 + 1 >= 0 && x0 + 1 < w;
            bool in10 = y0 + 1 >= 0 && y0 + 1 < h && x0 >= 0 && x0 < w;
            bool in11 = y0 + 1 >= 0 && y0 + 1 < h && x0 + 1 >= 0 && x0 + 1 < w;
            mask = (in00 ? nw : 0) + (in01 ? ne : 0) + (in10 ? sw : 0) + (in11 ? se : 0);
            for (int64_t k = 0; k < c; k++) {
                const float *p = src + k * h * w;
                float v = at(p, h, w, y0, x0) * nw + at(p, h, w, y0, x0 + 1) * ne +
                          at(p, h, w, y0 + 1, x0) * sw + at(p, h, w, y0 + 1, x0 + 1) * se;
                if (fill)
                    v = v * mask + (1.0f - mask) * fill[nfill == 1 ? 0 : k];
                dst[(k * h + y) * w + x] = v;
            }
        }
    }
}
