/* train/transform_pipeline.c: the transforms a dataset section lists, read from the config,
 * checked against the sample shape once, then run on each sample by the loader's workers.
 *
 *     [data]
 *     transforms = random_crop, random_horizontal_flip, normalize
 *
 *     [data.transform.random_crop]
 *     size = 28
 *     padding = 4
 *
 * Each step knows its input and output shapes from the start, so a sample never meets a
 * size it was not checked for, and the loader reports the final shape before reading. */
#include "weft/transforms.h"

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft/checked.h"
#include "weft/config.h"
#include "weft/error.h"
#include "weft/tensor.h"

#define MAX_STEPS 32
#define MAXV WEFT_TRANSFORM_MAX_CHANNELS

enum kind {
    T_NORMALIZE, T_RANDOM_CROP, T_CENTER_CROP, T_HFLIP, T_VFLIP, T_RESIZED_CROP, T_RESIZE,
    T_ROTATION, T_AFFINE, T_JITTER, T_ERASING, T_COUNT
};

/* Names as the config spells them, and the keys each one reads in its section. */
static const struct {
    const char *name;
    const char *keys[8];
} kinds[T_COUNT] = {
    [T_NORMALIZE] = {"normalize", {NULL}}, /* the section's own mean and std */
    [T_RANDOM_CROP] = {"random_crop", {"size", "padding", "padding_mode", "fill", "pad_if_needed"}},
    [T_CENTER_CROP] = {"center_crop", {"size"}},
    [T_HFLIP] = {"random_horizontal_flip", {"p"}},
    [T_VFLIP] = {"random_vertical_flip", {"p"}},
    [T_RESIZED_CROP] = {"random_resized_crop", {"size", "scale", "ratio", "interpolation"}},
    [T_RESIZE] = {"resize", {"size", "interpolation"}},
    [T_ROTATION] = {"random_rotation", {"degrees", "interpolation", "fill"}},
    [T_AFFINE] = {"random_affine",
                  {"degrees", "translate", "scale", "shear", "interpolation", "fill"}},
    [T_JITTER] = {"color_jitter", {"brightness", "contrast", "saturation"}},
    [T_ERASING] = {"random_erasing", {"p", "scale", "ratio", "value"}},
};

struct step {
    enum kind kind;
    int64_t in[3], out[3]; /* c, h, w */
    int64_t size[2];
    int64_t pad[4]; /* left, top, right, bottom: the padded image is in[] grown by them */
    enum weft_pad_mode pad_mode;
    float pad_fill;
    double p, scale[2], ratio[2];
    enum weft_interp interp;
    double degrees[2], translate[2], scale_range[2], shear[4];
    bool has_translate, has_scale;
    int nshear;
    float fill[MAXV];
    int nfill;
    double jitter[3][2]; /* brightness, contrast, saturation factor ranges */
    bool has_jitter[3];
    float value[MAXV];
    int nvalue;
    bool random_value;
    double mean[MAXV], std[MAXV];
    int nmean;
};

struct weft_transforms {
    int refs;
    int ndim, nsteps;
    int64_t in[3], out[3], max_numel;
    bool normalizes;
    struct step steps[MAX_STEPS];
};

/* ---- reading keys ------------------------------------------------------------------- */

struct reader {
    struct weft_config *cfg;
    const char *section; /* the dataset's: [data] */
    char sec[160];       /* the section of the value being read, [data.transform.NAME] */
    char key[64];        /* and its key, for messages */
};

static int bad(struct reader *rd, const char *value, const char *expected)
{
    return weft_error_set(WEFT_ERR_CONFIG, "%s: [%s] %s = '%s': expected %s",
                          weft_config_name(rd->cfg), rd->sec, rd->key, value, expected);
}

/* [<section>.transform.NAME] */
static void transform_section(struct reader *rd, const char *name)
{
    snprintf(rd->sec, sizeof rd->sec, "%s.transform.%s", rd->section, name);
}

/* KEY's text in NAME's section, or NULL when absent (the key counts as known either way). */
static const char *text(struct reader *rd, const char *name, const char *key)
{
    transform_section(rd, name);
    snprintf(rd->key, sizeof rd->key, "%s", key);
    return weft_config_string(rd->cfg, rd->sec, rd->key, NULL);
}

/* Up to max comma-separated finite numbers; the count, 0 when absent, or negative. */
static int numbers(struct reader *rd, const char *name, const char *key, int max, double *v,
                   const char *expected)
{
    const char *s = text(rd, name, key), *p = s;
    if (!s)
        return 0;
    int n = 0;
    for (;;) {
        char *end;
        errno = 0;
        double x = strtod(p, &end);
        if (end == p || errno == ERANGE || !(fabs(x) <= FLT_MAX) || n == max)
            return bad(rd, s, expected);
        v[n++] = x;
        for (p = end; isspace((unsigned char)*p); p++)
            ;
        if (*p == '\0')
            return n;
        if (*p++ != ',')
            return bad(rd, s, expected);
    }
}

/* Counts allowed: bit k set when k values may be given. */
static int numbers_of(struct reader *rd, const char *name, const char *key, unsigned counts,
                      double *v, const char *expected)
{
    int n = numbers(rd, name, key, 4, v, expected);
    if (n > 0 && !(counts & (1u << n)))
        return bad(rd, text(rd, name, key), expected);
    return n;
}

static bool integral(double x)
{
    return x == floor(x) && fabs(x) < 1e15;
}

/* size = N or H, W (positive integers). */
static int read_size(struct reader *rd, const char *name, struct step *st, bool required)
{
    double v[4];
    const char *what = "a size: one positive integer (a square, or resize's shorter edge) "
                       "or two (height, width), each at most 65536";
    int n = numbers_of(rd, name, "size", 1u << 1 | 1u << 2, v, what);
    if (n < 0)
        return n;
    if (n == 0)
        return required ? weft_error_set(WEFT_ERR_CONFIG,
                                         "%s: [%s] size is missing: [%s] transforms lists %s, "
                                         "which needs it",
                                         weft_config_name(rd->cfg), rd->sec, rd->section, name)
                        : 0;
    for (int k = 0; k < n; k++)
        if (!integral(v[k]) || v[k] < 1 || v[k] > WEFT_TRANSFORM_MAX_EDGE)
            return bad(rd, text(rd, name, "size"), what);
    st->size[0] = (int64_t)v[0];
    st->size[1] = (int64_t)v[n - 1];
    return n;
}

/* A range key: one value x gives [lo(x), hi(x)] as the caller says (sym: [-x, x], jitter:
 * [max(0, 1 - x), 1 + x]); two values are the range. Every value given is at most max,
 * the range's low end at least min. */
static int read_range(struct reader *rd, const char *name, const char *key, int sym,
                      double range[2], double min, double max, const char *expected,
                      bool *present)
{
    double v[4];
    int n = numbers_of(rd, name, key, 1u << 1 | 1u << 2, v, expected);
    if (n <= 0) {
        *present = false;
        return n;
    }
    *present = true;
    for (int k = 0; k < n; k++)
        if (v[k] > max)
            return bad(rd, text(rd, name, key), expected);
    if (n == 1) {
        if (v[0] < 0)
            return bad(rd, text(rd, name, key), expected);
        range[0] = sym == 1 ? -v[0] : sym == 2 ? fmax(0.0, 1.0 - v[0]) : v[0];
        range[1] = sym == 1 ? v[0] : sym == 2 ? 1.0 + v[0] : v[0];
    } else {
        range[0] = v[0];
        range[1] = v[1];
    }
    if (range[0] > range[1] || range[0] < min)
        return bad(rd, text(rd, name, key), expected);
    return n;
}

static int read_choice(struct reader *rd, const char *name, const char *key,
                       const char *const *choices, int def, int *out)
{
    text(rd, name, key);
    return weft_config_choice(rd->cfg, rd->sec, rd->key, choices, def, out) < 0
               ? weft_error_code()
               : 0;
}

static int read_interp(struct reader *rd, const char *name, enum weft_interp def,
                       enum weft_interp *out)
{
    static const char *const modes[] = {"nearest", "bilinear", NULL};
    int k;
    int rc = read_choice(rd, name, "interpolation", modes, (int)def, &k);
    *out = (enum weft_interp)k;
    return rc;
}

static int read_p(struct reader *rd, const char *name, double def, double *p)
{
    double v[4];
    int n = numbers(rd, name, "p", 1, v, "a probability in [0, 1]");
    if (n < 0)
        return n;
    *p = n ? v[0] : def;
    if (!(*p >= 0 && *p <= 1))
        return bad(rd, text(rd, name, "p"), "a probability in [0, 1]");
    return 0;
}

/* fill/value: one number or one per channel. */
static int read_per_channel(struct reader *rd, const char *name, const char *key, int64_t c,
                            float *out, int *nout)
{
    double v[MAXV];
    char expected[96];
    snprintf(expected, sizeof expected, "one number or %lld (one per channel), in float32's "
             "range", (long long)c);
    int n = numbers(rd, name, key, MAXV, v, expected);
    if (n < 0)
        return n;
    if (n > 1 && n != c)
        return bad(rd, text(rd, name, key), expected);
    for (int k = 0; k < n; k++)
        out[k] = (float)v[k];
    if (n > 0)
        *nout = n;
    return 0;
}

/* ---- one step each ----------------------------------------------------------------- */

/* Aspect ratios as a range: from 1:1000 to 1000:1, so that a crop's edges drawn from
 * them (and the image's area) stay far inside int64's range. */
#define RATIO "two numbers lo, hi with 0.001 <= lo <= hi <= 1000 (aspect ratios)"

static int config_crop(struct reader *rd, const char *name, struct step *st)
{
    static const char *const modes[] = {"constant", "edge", "reflect", "symmetric", NULL};
    const char *what = "padding: one non-negative integer (all sides), two (left/right, "
                       "top/bottom) or four (left, top, right, bottom), each at most 65536";
    double v[4];
    int mode, n = 0, rc;
    bool if_needed;
    if ((rc = read_size(rd, name, st, true)) < 0 ||
        (n = numbers_of(rd, name, "padding", 1u << 1 | 1u << 2 | 1u << 4, v, what)) < 0 ||
        (rc = read_choice(rd, name, "padding_mode", modes, 0, &mode)) < 0)
        return n < 0 ? n : rc;
    for (int k = 0; k < n; k++)
        if (!integral(v[k]) || v[k] < 0 || v[k] > WEFT_TRANSFORM_MAX_EDGE)
            return bad(rd, text(rd, name, "padding"), what);
    int64_t pad[4] = {0, 0, 0, 0};
    if (n == 1)
        pad[0] = pad[1] = pad[2] = pad[3] = (int64_t)v[0];
    else if (n == 2)
        pad[0] = pad[2] = (int64_t)v[0], pad[1] = pad[3] = (int64_t)v[1];
    else if (n == 4)
        for (int k = 0; k < 4; k++)
            pad[k] = (int64_t)v[k];
    double fill[4];
    int nf = numbers(rd, name, "fill", 1, fill, "a number (constant padding's value)");
    text(rd, name, "pad_if_needed");
    if (nf < 0 || weft_config_bool(rd->cfg, rd->sec, rd->key, false, &if_needed) < 0)
        return weft_error_code();
    st->pad_mode = (enum weft_pad_mode)mode;
    st->pad_fill = nf ? (float)fill[0] : 0.0f;
    /* Edges of at most 65536 (the input's were checked), pads of at most 65536: these
     * sums cannot overflow; the padded image's size is checked by the caller. */
    int64_t h = st->in[1] + pad[1] + pad[3], w = st->in[2] + pad[0] + pad[2];
    /* pad_if_needed pads both sides by the shortfall, as torchvision's [size - w, 0]. */
    if (if_needed && w < st->size[1]) {
        pad[0] += st->size[1] - w;
        pad[2] += st->size[1] - w;
    }
    if (if_needed && h < st->size[0]) {
        pad[1] += st->size[0] - h;
        pad[3] += st->size[0] - h;
    }
    memcpy(st->pad, pad, sizeof pad);
    h = st->in[1] + pad[1] + pad[3];
    w = st->in[2] + pad[0] + pad[2];
    if (h < st->size[0] || w < st->size[1])
        return weft_error_set(WEFT_ERR_CONFIG,
                              "%s: [%s] size = '%s': Required crop size (%lld, %lld) is larger "
                              "than input image size (%lld, %lld); give padding or "
                              "pad_if_needed = true",
                              weft_config_name(rd->cfg), rd->sec, text(rd, name, "size"),
                              (long long)st->size[0], (long long)st->size[1], (long long)h,
                              (long long)w);
    static const char *const mode_names[] = {"constant", "edge", "reflect", "symmetric"};
    for (int k = 0; k < 4; k++) {
        int64_t along = k % 2 == 0 ? st->in[2] : st->in[1];
        if ((st->pad_mode == WEFT_PAD_REFLECT && pad[k] >= along) ||
            (st->pad_mode == WEFT_PAD_SYMMETRIC && pad[k] > along))
            return weft_error_set(WEFT_ERR_CONFIG,
                                  "%s: [%s] padding: padding %lld is too large for "
                                  "padding_mode = %s on a side of %lld pixels (expected %s %lld)",
                                  weft_config_name(rd->cfg), rd->sec,
                                  (long long)pad[k], mode_names[mode], (long long)along,
                                  st->pad_mode == WEFT_PAD_REFLECT ? "less than" : "at most",
                                  (long long)along);
    }
    st->out[1] = st->size[0];
    st->out[2] = st->size[1];
    return 0;
}

static int config_center_crop(struct reader *rd, const char *name, struct step *st)
{
    int rc = read_size(rd, name, st, true);
    if (rc < 0)
        return rc;
    if (st->size[0] > st->in[1] || st->size[1] > st->in[2])
        return weft_error_set(WEFT_ERR_CONFIG,
                              "%s: [%s] size = '%s': crop size (%lld, %lld) is larger than "
                              "the image (%lld, %lld) at this step",
                              weft_config_name(rd->cfg), rd->sec, text(rd, name, "size"), (long long)st->size[0],
                              (long long)st->size[1], (long long)st->in[1],
                              (long long)st->in[2]);
    st->out[1] = st->size[0];
    st->out[2] = st->size[1];
    return 0;
}

static int config_resized_crop(struct reader *rd, const char *name, struct step *st)
{
    bool has;
    int rc;
    st->scale[0] = 0.08, st->scale[1] = 1.0;
    st->ratio[0] = 3.0 / 4.0, st->ratio[1] = 4.0 / 3.0;
    if ((rc = read_size(rd, name, st, true)) < 0 ||
        (rc = read_range(rd, name, "scale", 0, st->scale, 0, 1000,
                         "two numbers lo, hi with 0 <= lo <= hi <= 1000 (area fractions)",
                         &has)) < 0 ||
        (rc = read_range(rd, name, "ratio", 0, st->ratio, 0.001, 1000, RATIO, &has)) < 0 ||
        (rc = read_interp(rd, name, WEFT_INTERP_BILINEAR, &st->interp)) < 0)
        return rc;
    st->out[1] = st->size[0];
    st->out[2] = st->size[1];
    return 0;
}

static int config_resize(struct reader *rd, const char *name, struct step *st)
{
    int n, rc;
    if ((n = read_size(rd, name, st, true)) < 0 ||
        (rc = read_interp(rd, name, WEFT_INTERP_BILINEAR, &st->interp)) < 0)
        return n < 0 ? n : rc;
    weft_transform_resize_shape(st->in[1], st->in[2], n, st->size, &st->out[1], &st->out[2]);
    st->size[0] = st->out[1];
    st->size[1] = st->out[2];
    if (st->out[1] < 1 || st->out[2] < 1)
        return bad(rd, text(rd, name, "size"), "a size that leaves both edges >= 1");
    if (st->out[1] > WEFT_TRANSFORM_MAX_EDGE || st->out[2] > WEFT_TRANSFORM_MAX_EDGE) {
        char what[160];
        snprintf(what, sizeof what, "a size that leaves both edges at most 65536 (the %lld x "
                 "%lld image's longer edge would become %lld)", (long long)st->in[1],
                 (long long)st->in[2], (long long)(st->out[1] > st->out[2] ? st->out[1] : st->out[2]));
        return bad(rd, text(rd, name, "size"), what);
    }
    return 0;
}

static int config_warp(struct reader *rd, const char *name, struct step *st)
{
    bool has;
    int rc;
    const char *deg = "degrees: one number d in [0, 360] (the range -d, d) or two (lo, hi) "
                      "within [-360, 360]";
    if ((rc = read_range(rd, name, "degrees", 1, st->degrees, -360, 360, deg, &has)) < 0)
        return rc;
    if (!has)
        return weft_error_set(WEFT_ERR_CONFIG,
                              "%s: [%s] degrees is missing: %s needs it (0 for none)",
                              weft_config_name(rd->cfg), rd->sec, name);
    if ((rc = read_interp(rd, name, WEFT_INTERP_NEAREST, &st->interp)) < 0)
        return rc;
    st->fill[0] = 0.0f;
    st->nfill = 1;
    if ((rc = read_per_channel(rd, name, "fill", st->in[0], st->fill, &st->nfill)) < 0)
        return rc;
    if (st->kind == T_ROTATION)
        return 0;
    double v[4];
    const char *tr = "two fractions of the width and the height, each in [0, 1]";
    int n = numbers_of(rd, name, "translate", 1u << 2, v, tr);
    if (n < 0)
        return n;
    if (n == 2) {
        if (!(v[0] >= 0 && v[0] <= 1 && v[1] >= 0 && v[1] <= 1))
            return bad(rd, text(rd, name, "translate"), tr);
        st->has_translate = true;
        st->translate[0] = v[0], st->translate[1] = v[1];
    }
    const char *sc = "two numbers lo, hi with 0.001 <= lo <= hi <= 1000";
    if ((n = numbers_of(rd, name, "scale", 1u << 2, v, sc)) < 0)
        return n;
    if (n == 2) {
        if (!(v[0] >= 0.001 && v[0] <= v[1] && v[1] <= 1000))
            return bad(rd, text(rd, name, "scale"), sc);
        st->has_scale = true;
        st->scale_range[0] = v[0], st->scale_range[1] = v[1];
    }
    const char *sh = "shear: one number s in [0, 360] (x in -s, s), two (an x range) or "
                     "four (x and y ranges), in degrees within [-360, 360]";
    if ((n = numbers_of(rd, name, "shear", 1u << 1 | 1u << 2 | 1u << 4, v, sh)) < 0)
        return n;
    for (int k = 0; k < n; k++)
        if (fabs(v[k]) > 360)
            return bad(rd, text(rd, name, "shear"), sh);
    if (n == 1) {
        if (v[0] < 0)
            return bad(rd, text(rd, name, "shear"), sh);
        st->shear[0] = -v[0], st->shear[1] = v[0];
        st->nshear = 2;
    } else if (n > 1) {
        memcpy(st->shear, v, (size_t)n * sizeof *v);
        st->nshear = n;
    }
    return 0;
}

static int config_jitter(struct reader *rd, const char *name, struct step *st)
{
    static const char *const keys[3] = {"brightness", "contrast", "saturation"};
    const char *what = "one number x in [0, 1000] (a factor in max(0, 1 - x), 1 + x) or two "
                       "(lo, hi) with 0 <= lo <= hi <= 1000";
    for (int k = 0; k < 3; k++) {
        int rc = read_range(rd, name, keys[k], 2, st->jitter[k], 0, 1000, what,
                            &st->has_jitter[k]);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int config_erasing(struct reader *rd, const char *name, struct step *st)
{
    bool has;
    int rc;
    st->scale[0] = 0.02, st->scale[1] = 0.33;
    st->ratio[0] = 0.3, st->ratio[1] = 3.3;
    if ((rc = read_p(rd, name, 0.5, &st->p)) < 0 ||
        (rc = read_range(rd, name, "scale", 0, st->scale, 0, 1,
                         "two numbers lo, hi with 0 <= lo <= hi <= 1 (area fractions)",
                         &has)) < 0 ||
        (rc = read_range(rd, name, "ratio", 0, st->ratio, 0.001, 1000, RATIO, &has)) < 0)
        return rc;
    const char *v = text(rd, name, "value");
    st->value[0] = 0.0f;
    st->nvalue = 1;
    if (v && strcmp(v, "random") == 0) {
        st->random_value = true;
        return 0;
    }
    return read_per_channel(rd, name, "value", st->in[0], st->value, &st->nvalue);
}

/* normalize: the section's mean and std, as without transforms. */
static int config_normalize(struct reader *rd, struct step *st)
{
    const char *file = weft_config_name(rd->cfg);
    const char *mean = weft_config_string(rd->cfg, rd->section, "mean", NULL);
    const char *std = weft_config_string(rd->cfg, rd->section, "std", NULL);
    if (!mean || !std)
        return weft_error_set(WEFT_ERR_CONFIG,
                              "%s: [%s] transforms lists normalize but %s is not set: give "
                              "mean and std (one value or one per channel)",
                              file, rd->section, mean ? "std" : "mean");
    double sd[MAXV];
    char expected[96];
    snprintf(expected, sizeof expected, "one number or %lld (one per channel)",
             (long long)st->in[0]);
    const char *texts[2] = {mean, std};
    double *dst[2] = {st->mean, sd};
    int counts[2];
    snprintf(rd->sec, sizeof rd->sec, "%s", rd->section);
    for (int i = 0; i < 2; i++) {
        snprintf(rd->key, sizeof rd->key, "%s", i ? "std" : "mean");
        const char *p = texts[i];
        int n = 0;
        for (;;) {
            char *end;
            errno = 0;
            double x = strtod(p, &end);
            if (end == p || errno == ERANGE || !isfinite(x) || n == MAXV)
                return bad(rd, texts[i], expected);
            dst[i][n++] = x;
            for (p = end; isspace((unsigned char)*p); p++)
                ;
            if (*p == '\0')
                break;
            if (*p++ != ',')
                return bad(rd, texts[i], expected);
        }
        if (n != 1 && n != st->in[0])
            return bad(rd, texts[i], expected);
        counts[i] = n;
    }
    if (counts[0] != counts[1])
        return weft_error_set(WEFT_ERR_CONFIG,
                              "%s: [%s] mean has %d value(s) but std has %d: give one per "
                              "channel for both",
                              file, rd->section, counts[0], counts[1]);
    for (int k = 0; k < counts[1]; k++) {
        if (!(sd[k] > 0))
            return weft_error_set(WEFT_ERR_CONFIG, "%s: [%s] std = '%s': every value must be > 0",
                                  file, rd->section, std);
        st->std[k] = sd[k];
    }
    st->nmean = counts[0];
    return 0;
}

/* ---- building ------------------------------------------------------------------------ */

static int kind_named(const char *name, size_t len)
{
    for (int k = 0; k < T_COUNT; k++)
        if (strlen(kinds[k].name) == len && strncmp(kinds[k].name, name, len) == 0)
            return k;
    return -1;
}

static int unknown_transform(struct weft_config *cfg, const char *section, const char *list,
                             const char *name, size_t len)
{
    char names[512];
    size_t n = 0;
    names[0] = '\0';
    for (int k = 0; k < T_COUNT && n < sizeof names; k++)
        n += (size_t)snprintf(names + n, sizeof names - n, "%s%s", k ? ", " : "", kinds[k].name);
    if (!*list) /* a section [data.transform.NAME] */
        return weft_error_set(WEFT_ERR_CONFIG,
                              "%s: section [%s]: unknown transform '%.*s' (expected one of: %s)",
                              weft_config_name(cfg), section, (int)len, name, names);
    return weft_error_set(WEFT_ERR_CONFIG,
                          "%s: [%s] transforms = '%s': unknown transform '%.*s' (expected a "
                          "comma-separated list of: %s)",
                          weft_config_name(cfg), section, list, (int)len, name, names);
}

/* A [<section>.transform.NAME] section of no transform or of one not listed, or a key
 * NAME does not read: a mistake the unknown-key check would report without saying why. */
static int check_sections(struct weft_config *cfg, const char *section,
                          const bool listed[T_COUNT])
{
    char prefix[160];
    int np = snprintf(prefix, sizeof prefix, "%s.transform.", section);
    const char *const *secs = weft_config_sections(cfg);
    for (int i = 0; secs && secs[i]; i++) {
        if (strncmp(secs[i], prefix, (size_t)np) != 0)
            continue;
        const char *name = secs[i] + np;
        int k = kind_named(name, strlen(name));
        if (k < 0)
            return unknown_transform(cfg, secs[i], "", name, strlen(name));
        if (!listed[k])
            return weft_error_set(WEFT_ERR_CONFIG,
                                  "%s: section [%s] is given but [%s] transforms does not list "
                                  "%s",
                                  weft_config_name(cfg), secs[i], section, name);
        const char *const *keys = weft_config_keys(cfg, secs[i]);
        for (int j = 0; keys && keys[j]; j++) {
            bool known = false;
            for (int m = 0; kinds[k].keys[m] && !known; m++)
                known = strcmp(keys[j], kinds[k].keys[m]) == 0;
            if (known)
                continue;
            char list[256];
            size_t n = 0;
            list[0] = '\0';
            for (int m = 0; kinds[k].keys[m] && n < sizeof list; m++)
                n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", m ? ", " : "",
                                      kinds[k].keys[m]);
            return weft_error_set(WEFT_ERR_CONFIG, "%s: [%s] unknown key '%s': %s takes %s",
                                  weft_config_name(cfg), secs[i], keys[j], name,
                                  n ? list : "no keys");
        }
    }
    return 0;
}

/* The largest image of a configured step (a crop's padded one, or its output) into
 * *numel: at most WEFT_TRANSFORM_MAX_NUMEL values, else an error naming the key that made
 * it grow (padding, or size). */
static int step_numel(struct reader *rd, const struct step *st, int64_t *numel)
{
    int64_t ph = st->in[1] + st->pad[1] + st->pad[3], pw = st->in[2] + st->pad[0] + st->pad[2];
    int64_t padded[3] = {st->in[0], ph > st->out[1] ? ph : st->out[1],
                         pw > st->out[2] ? pw : st->out[2]};
    if (weft_size_product(numel, WEFT_TRANSFORM_MAX_NUMEL, 3, padded))
        return 0;
    const char *name = kinds[st->kind].name;
    bool padded_most = ph > st->out[1] || pw > st->out[2];
    const char *key = padded_most && text(rd, name, "padding") ? "padding" : "size";
    return weft_error_set(WEFT_ERR_CONFIG,
                          "%s: [%s] %s = '%s': the image would be %lld x %lld x %lld (C x H x "
                          "W) at %s, more than 2^30 values",
                          weft_config_name(rd->cfg), rd->sec, key, text(rd, name, key),
                          (long long)padded[0], (long long)padded[1], (long long)padded[2],
                          padded_most ? "its padding" : "its output");
}

static int config_step(struct reader *rd, struct step *st)
{
    const char *name = kinds[st->kind].name;
    switch (st->kind) {
    case T_NORMALIZE: return config_normalize(rd, st);
    case T_RANDOM_CROP: return config_crop(rd, name, st);
    case T_CENTER_CROP: return config_center_crop(rd, name, st);
    case T_HFLIP:
    case T_VFLIP: return read_p(rd, name, 0.5, &st->p);
    case T_RESIZED_CROP: return config_resized_crop(rd, name, st);
    case T_RESIZE: return config_resize(rd, name, st);
    case T_ROTATION:
    case T_AFFINE: return config_warp(rd, name, st);
    case T_JITTER: return config_jitter(rd, name, st);
    case T_ERASING: return config_erasing(rd, name, st);
    default: return weft_error_set(WEFT_ERR_RUNTIME, "transforms: bad step kind");
    }
}

weft_transforms *weft_transforms_from_config(struct weft_config *cfg, const char *section,
                                             int ndim, const int64_t *shape)
{
    if (!cfg || !section || (ndim > 0 && !shape)) {
        weft_error_set(WEFT_ERR_VALUE, "weft_transforms_from_config: cfg, section and shape "
                                       "must be set");
        return NULL;
    }
    const char *list = weft_config_string(cfg, section, "transforms", NULL);
    if (!list)
        return NULL;
    const char *file = weft_config_name(cfg);
    if (ndim != 2 && ndim != 3) {
        weft_error_set(WEFT_ERR_CONFIG,
                       "%s: [%s] transforms = '%s': transforms work on images of shape [C, H, "
                       "W] or [H, W], but the field they would apply to has %d dims",
                       file, section, list, ndim);
        return NULL;
    }
    weft_transforms *t = calloc(1, sizeof *t);
    if (!t) {
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "transforms: out of memory");
        return NULL;
    }
    t->refs = 1;
    t->ndim = ndim;
    t->in[0] = ndim == 3 ? shape[0] : 1;
    t->in[1] = shape[ndim - 2];
    t->in[2] = shape[ndim - 1];
    int64_t cur[3] = {t->in[0], t->in[1], t->in[2]};
    if (!weft_size_product(&t->max_numel, WEFT_TRANSFORM_MAX_NUMEL, 3, cur) ||
        cur[1] > WEFT_TRANSFORM_MAX_EDGE || cur[2] > WEFT_TRANSFORM_MAX_EDGE) {
        char sh[96];
        weft_error_set(WEFT_ERR_CONFIG,
                       "%s: [%s] transforms = '%s': the field's samples, of shape %s, are "
                       "larger than transforms take (edges of at most %d pixels, at most "
                       "2^30 values)",
                       file, section, list, weft_shape_str(ndim, shape, sh, sizeof sh),
                       WEFT_TRANSFORM_MAX_EDGE);
        goto fail;
    }
    bool listed[T_COUNT] = {false};
    struct reader rd = {cfg, section, "", ""};
    const char *p = list;
    for (;;) {
        while (isspace((unsigned char)*p))
            p++;
        const char *end = p;
        while (*end && *end != ',')
            end++;
        size_t len = (size_t)(end - p);
        while (len > 0 && isspace((unsigned char)p[len - 1]))
            len--;
        int k = kind_named(p, len);
        if (k < 0) {
            unknown_transform(cfg, section, list, p, len);
            goto fail;
        }
        if (t->nsteps == MAX_STEPS) {
            weft_error_set(WEFT_ERR_CONFIG, "%s: [%s] transforms = '%s': at most %d steps",
                           file, section, list, MAX_STEPS);
            goto fail;
        }
        struct step *st = &t->steps[t->nsteps++];
        st->kind = (enum kind)k;
        memcpy(st->in, cur, sizeof cur);
        memcpy(st->out, cur, sizeof cur);
        int64_t biggest = 0;
        if (config_step(&rd, st) < 0 || step_numel(&rd, st, &biggest) < 0)
            goto fail;
        if (biggest > t->max_numel)
            t->max_numel = biggest;
        memcpy(cur, st->out, sizeof cur);
        listed[k] = true;
        t->normalizes |= k == T_NORMALIZE;
        if (*end == '\0')
            break;
        p = end + 1;
    }
    memcpy(t->out, cur, sizeof cur);
    if (!t->normalizes && (weft_config_has(cfg, section, "mean") ||
                           weft_config_has(cfg, section, "std"))) {
        weft_error_set(WEFT_ERR_CONFIG,
                       "%s: [%s] mean and std are normalize's keys, but transforms = '%s' does "
                       "not list normalize: add it where it should run (usually last)",
                       file, section, list);
        goto fail;
    }
    if (check_sections(cfg, section, listed) < 0)
        goto fail;
    return t;
fail:
    free(t);
    return NULL;
}

weft_transforms *weft_transforms_retain(weft_transforms *t)
{
    if (t)
        __atomic_add_fetch(&t->refs, 1, __ATOMIC_RELAXED);
    return t;
}

void weft_transforms_release(weft_transforms *t)
{
    if (t && __atomic_sub_fetch(&t->refs, 1, __ATOMIC_ACQ_REL) == 0)
        free(t);
}

void weft_transforms_in_shape(const weft_transforms *t, int *ndim, int64_t *shape)
{
    *ndim = t->ndim;
    if (t->ndim == 3)
        shape[0] = t->in[0];
    shape[t->ndim - 2] = t->in[1];
    shape[t->ndim - 1] = t->in[2];
}

void weft_transforms_out_shape(const weft_transforms *t, int64_t *shape)
{
    if (t->ndim == 3)
        shape[0] = t->out[0];
    shape[t->ndim - 2] = t->out[1];
    shape[t->ndim - 1] = t->out[2];
}

int64_t weft_transforms_max_numel(const weft_transforms *t)
{
    return t->max_numel;
}

bool weft_transforms_normalizes(const weft_transforms *t)
{
    return t && t->normalizes;
}

/* ---- running ------------------------------------------------------------------------- */

/* One step from cur (its in[] shape) into other when it moves pixels; *moved says so. */
static int run_step(const struct step *st, float *cur, float *other, bool *moved,
                    struct weft_transform_rng *rng, bool train)
{
    int64_t c = st->in[0], h = st->in[1], w = st->in[2];
    *moved = false;
    switch (st->kind) {
    case T_NORMALIZE:
        weft_transform_normalize(cur, c, h, w, st->mean, st->std, st->nmean);
        return 0;
    case T_RANDOM_CROP: {
        int64_t ph = h + st->pad[1] + st->pad[3], pw = w + st->pad[0] + st->pad[2];
        const float *padded = cur;
        if (ph != h || pw != w) {
            if (weft_transform_pad(cur, c, h, w, st->pad, st->pad_mode, st->pad_fill, other) < 0)
                return weft_error_code();
            padded = other;
        }
        struct weft_transform_box b;
        if (train) {
            b = weft_transform_crop_params(rng, ph, pw, st->size[0], st->size[1]);
        } else {
            b.top = (int64_t)rint((double)(ph - st->size[0]) / 2.0);
            b.left = (int64_t)rint((double)(pw - st->size[1]) / 2.0);
        }
        /* The padded copy is in other: crop back into cur (the crop is no larger). */
        float *dst = padded == cur ? other : cur;
        weft_transform_crop(padded, c, ph, pw, b.top, b.left, st->size[0], st->size[1], dst);
        *moved = dst == other;
        return 0;
    }
    case T_CENTER_CROP:
        weft_transform_crop(cur, c, h, w, (int64_t)rint((double)(h - st->size[0]) / 2.0),
                            (int64_t)rint((double)(w - st->size[1]) / 2.0), st->size[0],
                            st->size[1], other);
        *moved = true;
        return 0;
    case T_HFLIP:
    case T_VFLIP:
        if (train && weft_transform_uniform(rng, 0, 1) < st->p) {
            weft_transform_flip(cur, c, h, w, st->kind == T_HFLIP, other);
            *moved = true;
        }
        return 0;
    case T_RESIZED_CROP: {
        struct weft_transform_box b = {0, 0, h, w};
        if (train)
            b = weft_transform_resized_crop_params(rng, h, w, st->scale, st->ratio);
        const float *src = cur;
        if (b.h != h || b.w != w || b.top || b.left) {
            weft_transform_crop(cur, c, h, w, b.top, b.left, b.h, b.w, other);
            src = other;
        }
        weft_transform_resize(src, c, b.h, b.w, st->size[0], st->size[1], st->interp,
                              src == cur ? other : cur);
        *moved = src == cur;
        return 0;
    }
    case T_RESIZE:
        weft_transform_resize(cur, c, h, w, st->out[1], st->out[2], st->interp, other);
        *moved = true;
        return 0;
    case T_ROTATION:
    case T_AFFINE: {
        if (!train)
            return 0;
        double m[6], a[6] = {0, 0, 0, 1, 0, 0};
        if (st->kind == T_ROTATION)
            a[0] = -weft_transform_uniform(rng, st->degrees[0], st->degrees[1]);
        else
            weft_transform_affine_params(rng, h, w, st->degrees,
                                         st->has_translate ? st->translate : NULL,
                                         st->has_scale ? st->scale_range : NULL, st->shear,
                                         st->nshear, a);
        weft_transform_affine_matrix(a[0], a[1], a[2], a[3], a[4], a[5], m);
        weft_transform_warp(cur, c, h, w, m, st->interp, st->fill, st->nfill, other);
        *moved = true;
        return 0;
    }
    case T_JITTER: {
        if (!train)
            return 0;
        /* torchvision: a random order of its four adjustments (randperm(4)), then the
         * factors in the fixed order brightness, contrast, saturation. */
        int order[4] = {0, 1, 2, 3};
        for (int i = 3; i > 0; i--) {
            int j = (int)weft_transform_randint(rng, 0, i + 1), tmp = order[i];
            order[i] = order[j];
            order[j] = tmp;
        }
        double f[3];
        for (int k = 0; k < 3; k++)
            if (st->has_jitter[k])
                f[k] = weft_transform_uniform(rng, st->jitter[k][0], st->jitter[k][1]);
        for (int i = 0; i < 4; i++) {
            int k = order[i];
            if (k == 3 || !st->has_jitter[k])
                continue;
            if (k == 0)
                weft_transform_brightness(cur, c, h, w, f[0]);
            else if (k == 1)
                weft_transform_contrast(cur, c, h, w, f[1]);
            else
                weft_transform_saturation(cur, c, h, w, f[2]);
        }
        return 0;
    }
    case T_ERASING: {
        if (!train || !(weft_transform_uniform(rng, 0, 1) < st->p))
            return 0;
        bool found;
        struct weft_transform_box b = weft_transform_erasing_params(
            rng, c, h, w, st->scale, st->ratio, st->random_value, other, &found);
        if (found)
            weft_transform_erase(cur, c, h, w, b.top, b.left, b.h, b.w,
                                 st->random_value ? other : st->value,
                                 st->random_value ? c * b.h * b.w : st->nvalue);
        return 0;
    }
    default: return weft_error_set(WEFT_ERR_RUNTIME, "transforms: bad step kind");
    }
}

int weft_transforms_apply(const weft_transforms *t, const float *in, float *out, float *scratch,
                          struct weft_transform_rng *rng, bool train)
{
    if (!t || !in || !out || !scratch || (train && !rng))
        return weft_error_set(WEFT_ERR_VALUE, "weft_transforms_apply: transforms, in, out, "
                                              "scratch and (to train) rng must be set");
    float *cur = scratch, *other = scratch + t->max_numel;
    memcpy(cur, in, (size_t)(t->in[0] * t->in[1] * t->in[2]) * sizeof *cur);
    for (int i = 0; i < t->nsteps; i++) {
        bool moved;
        int rc = run_step(&t->steps[i], cur, other, &moved, rng, train);
        if (rc < 0)
            return rc;
        if (moved) {
            float *tmp = cur;
            cur = other;
            other = tmp;
        }
    }
    memcpy(out, cur, (size_t)(t->out[0] * t->out[1] * t->out[2]) * sizeof *out);
    return 0;
}

const char *weft_transforms_describe(const weft_transforms *t, char *buf, size_t size)
{
    size_t n = 0;
    if (size == 0)
        return buf;
    buf[0] = '\0';
    for (int i = 0; t && i < t->nsteps && n < size; i++) {
        const struct step *st = &t->steps[i];
        n += (size_t)snprintf(buf + n, size - n, "%s%s", i ? " -> " : "", kinds[st->kind].name);
        if (n < size && (st->out[1] != st->in[1] || st->out[2] != st->in[2]))
            n += (size_t)snprintf(buf + n, size - n, "(%lldx%lld)", (long long)st->out[1],
                                  (long long)st->out[2]);
    }
    return buf;
}
