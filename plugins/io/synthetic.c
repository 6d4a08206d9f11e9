/* plugins/io/synthetic.c: the `synthetic` reader: seeded toy problems for tests and
 * demos, computed per sample and never stored.
 *
 * Sample i has label i % classes and features drawn from Philox keyed by the seed, with
 * a counter block reserved for each sample, so any sample is the same whichever order,
 * batch or thread asks for it, on every machine.
 *
 *   blobs:   class k has a centre, uniform in [-10, 10)^features (blocks 0..); a sample
 *            is its class's centre plus noise * N(0, 1) per feature.
 *   spirals: class k is an arm of a spiral in the first two features: at t in [0, 1]
 *            (the sample's place within its class), radius t and angle
 *            2 pi k / classes + 4 t + noise * N(0, 1); x = r sin(angle), y = r cos(angle)
 *            (as in CS231n's example). Further features are noise * N(0, 1).
 *
 * Keys: kind (blobs or spirals, default blobs), samples (default 1000), features
 * (default 2), classes (default 3), seed (default 0), noise (default 1.0 for blobs,
 * 0.2 for spirals).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <weft/philox.h>

#include "io.h"

#define MAX_SAMPLES ((int64_t)1 << 40)
#define MAX_FEATURES ((int64_t)1 << 20)
#define MAX_CLASSES ((int64_t)1 << 20)
#define MAX_CENTRE_VALUES ((int64_t)1 << 24)

enum kind { BLOBS, SPIRALS };

struct synth_ctx {
    enum kind kind;
    int64_t samples, features, classes;
    uint64_t seed;
    double noise;
    uint64_t first_sample_block; /* blocks below belong to the centres */
    uint64_t blocks_per_sample;
    float *centres; /* classes x features (blobs) */
};

/* Standard normal number j of sample i. */
static double sample_normal(const struct synth_ctx *c, int64_t i, int64_t j)
{
    uint64_t base = c->first_sample_block + (uint64_t)i * c->blocks_per_sample;
    return weft_philox_normal(c->seed, base, (uint64_t)j);
}

static void make_sample(const struct synth_ctx *c, int64_t i, float *x)
{
    int64_t k = i % c->classes;
    if (c->kind == BLOBS) {
        for (int64_t j = 0; j < c->features; j++)
            x[j] = (float)(c->centres[k * c->features + j] + c->noise * sample_normal(c, i, j));
        return;
    }
    /* Samples of class k are k, k + classes, ...: this one is number i / classes of n. */
    int64_t n = (c->samples - k + c->classes - 1) / c->classes;
    double t = n > 1 ? (double)(i / c->classes) / (double)(n - 1) : 0.0;
    double angle = 6.283185307179586 * (double)k / (double)c->classes + 4.0 * t +
                   c->noise * sample_normal(c, i, 0);
    x[0] = (float)(t * sin(angle));
    x[1] = (float)(t * cos(angle));
    for (int64_t j = 2; j < c->features; j++)
        x[j] = (float)(c->noise * sample_normal(c, i, j));
}

static int read_keys(const weft_options *o, struct synth_ctx *c)
{
    static const char *const kinds[] = {"blobs", "spirals", NULL};
    int kind;
    int64_t seed;
    int rc = weft_options_choice(o, "kind", kinds, BLOBS, &kind);
    if (rc == 0)
        rc = weft_options_int_range(o, "samples", 1000, 1, MAX_SAMPLES, &c->samples);
    if (rc == 0)
        rc = weft_options_int_range(o, "features", 2, 1, MAX_FEATURES, &c->features);
    if (rc == 0)
        rc = weft_options_int_range(o, "classes", 3, 1, MAX_CLASSES, &c->classes);
    if (rc == 0)
        rc = weft_options_int(o, "seed", 0, &seed);
    if (rc == 0)
        rc = weft_options_double(o, "noise", kind == BLOBS ? 1.0 : 0.2, &c->noise);
    if (rc < 0)
        return rc;
    c->kind = (enum kind)kind;
    c->seed = (uint64_t)seed;
    if (!(c->noise >= 0) || !isfinite(c->noise))
        return weft_options_bad_value(o, "noise", "expected a finite number >= 0");
    if (c->kind == SPIRALS && c->features < 2)
        return weft_options_bad_value(o, "features", "spirals need at least 2 features");
    if (c->kind == BLOBS && c->classes * c->features > MAX_CENTRE_VALUES)
        return weft_options_error(o, "classes x features = %lld: expected at most %lld for blobs",
                                  (long long)(c->classes * c->features),
                                  (long long)MAX_CENTRE_VALUES);
    return 0;
}

static void synth_close(void *ctx)
{
    struct synth_ctx *c = ctx;
    if (!c)
        return;
    free(c->centres);
    free(c);
}

static int synth_open(const weft_options *o, struct weft_dataset_info *info,
                      void **out)
{
    struct synth_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "synthetic reader: out of memory");
    int rc = read_keys(o, c);
    if (rc < 0) {
        synth_close(c);
        return rc;
    }
    int64_t ncentre = c->kind == BLOBS ? c->classes * c->features : 0;
    c->first_sample_block = (uint64_t)(ncentre + 3) / 4;
    c->blocks_per_sample = (uint64_t)(c->features + 3) / 4;
    if (ncentre) {
        c->centres = malloc((size_t)ncentre * sizeof *c->centres);
        if (!c->centres) {
            synth_close(c);
            return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "synthetic reader: out of memory");
        }
        for (int64_t v = 0; v < ncentre; v++)
            c->centres[v] = 20.0f * weft_philox_uniform_f32(c->seed, 0, (uint64_t)v) - 10.0f;
    }
    info->length = c->samples;
    info->nfields = 2;
    struct weft_dataset_field *fd = &info->fields[0];
    snprintf(fd->name, sizeof fd->name, "features");
    fd->dtype = WEFT_F32;
    fd->ndim = 1;
    fd->shape[0] = c->features;
    fd = &info->fields[1];
    snprintf(fd->name, sizeof fd->name, "label");
    fd->dtype = WEFT_I64;
    fd->num_classes = c->classes;
    *out = c;
    return 0;
}

static int synth_read(void *ctx, int64_t n, const int64_t *indices, void *const *buffers)
{
    const struct synth_ctx *c = ctx;
    float *features = buffers[0];
    int64_t *labels = buffers[1];
    for (int64_t k = 0; k < n; k++) {
        make_sample(c, indices[k], features + k * c->features);
        labels[k] = indices[k] % c->classes;
    }
    return 0;
}

const struct weft_dataset_reader io_synthetic_reader = {
    .base = WEFT_VTABLE(WEFT_KIND_READER, "synthetic", struct weft_dataset_reader),
    .description = "seeded toy problems (blobs, spirals) computed per sample",
    .open = synth_open,
    .read = synth_read,
    .close = synth_close,
};
