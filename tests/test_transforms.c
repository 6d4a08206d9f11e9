/* tests/test_transforms.c: data augmentation (weft/transforms.h) against torchvision 0.14,
 * and in the data loader: the same batches for any number of workers, new ones each epoch,
 * the same ones again for a resumed epoch; config errors that name section and key.
 *
 * The torchvision answers come from tests/transforms/gen.py (fixtures/transforms.txt; its
 * docstring gives the format): each line is a functional call with its parameters, or a
 * get_params given fixed uniform draws, and what torchvision returned. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft/philox.h>
#include <weft/transforms.h>

#include "testutil.h"

/* ---- a reader of small images: sample i is [C, H, W] uint8 with element e equal to
 * (i * 37 + e * 11) % 256, and label i ------------------------------------------------- */

struct img_ctx {
    int64_t samples, c, h, w;
};

static int img_open(const weft_options *o, struct weft_dataset_info *info, void **ctx)
{
    struct img_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "tf_img: out of memory");
    if (weft_options_int(o, "samples", 24, &c->samples) < 0 ||
        weft_options_int(o, "channels", 3, &c->c) < 0 ||
        weft_options_int(o, "height", 10, &c->h) < 0 ||
        weft_options_int(o, "width", 12, &c->w) < 0) {
        free(c);
        return weft_error_code();
    }
    info->length = c->samples;
    info->nfields = 2;
    strcpy(info->fields[0].name, "image");
    info->fields[0].dtype = WEFT_U8;
    info->fields[0].ndim = 3;
    info->fields[0].shape[0] = c->c;
    info->fields[0].shape[1] = c->h;
    info->fields[0].shape[2] = c->w;
    strcpy(info->fields[1].name, "label");
    info->fields[1].dtype = WEFT_I64;
    info->fields[1].num_classes = c->samples;
    *ctx = c;
    return 0;
}

static int img_read(void *ctx, int64_t n, const int64_t *indices, void *const *buffers)
{
    const struct img_ctx *c = ctx;
    int64_t numel = c->c * c->h * c->w;
    uint8_t *img = buffers[0];
    int64_t *lab = buffers[1];
    for (int64_t k = 0; k < n; k++) {
        for (int64_t e = 0; e < numel; e++)
            img[k * numel + e] = (uint8_t)((indices[k] * 37 + e * 11) % 256);
        lab[k] = indices[k];
    }
    return 0;
}

static void img_close(void *ctx)
{
    free(ctx);
}

static const struct weft_dataset_reader img_reader = {
    .base = WEFT_VTABLE(WEFT_KIND_READER, "tf_img", struct weft_dataset_reader),
    .description = "test images",
    .open = img_open,
    .read = img_read,
    .close = img_close,
};

static void setup(void)
{
    tu_setup();
    cr_assert_geq(weft_register(&img_reader), 0, "%s", weft_error_message());
}

TestSuite(transforms, .init = setup, .fini = tu_teardown);

/* ---- replaying torchvision ------------------------------------------------------------ */

struct fixture {
    char op[32];
    int np, nu;
    double *p, *u;
    int64_t in[3], out[3]; /* c, h, w; out[0] < 0 for an R result */
    float *img, *want;
    int nr;
    double *r;
};

static double *numbers(char **save, int n)
{
    double *v = calloc((size_t)(n ? n : 1), sizeof *v);
    cr_assert_not_null(v);
    for (int i = 0; i < n; i++) {
        char *t = strtok_r(NULL, " \n", save);
        cr_assert_not_null(t, "fixture line ends early");
        v[i] = strtod(t, NULL);
    }
    return v;
}

static float *image_of(char **save, int64_t *shape)
{
    for (int k = 0; k < 3; k++)
        shape[k] = (int64_t)strtod(strtok_r(NULL, " \n", save), NULL);
    int64_t n = shape[0] * shape[1] * shape[2];
    double *d = numbers(save, (int)n);
    float *f = malloc((size_t)(n ? n : 1) * sizeof *f);
    cr_assert_not_null(f);
    for (int64_t i = 0; i < n; i++)
        f[i] = (float)d[i];
    free(d);
    return f;
}

static void parse(char *line, struct fixture *fx)
{
    memset(fx, 0, sizeof *fx);
    fx->out[0] = -1;
    char *save;
    char *t = strtok_r(line, " \n", &save);
    snprintf(fx->op, sizeof fx->op, "%s", t);
    while ((t = strtok_r(NULL, " \n", &save))) {
        if (!strcmp(t, "P")) {
            fx->np = atoi(strtok_r(NULL, " \n", &save));
            fx->p = numbers(&save, fx->np);
        } else if (!strcmp(t, "U")) {
            fx->nu = atoi(strtok_r(NULL, " \n", &save));
            fx->u = numbers(&save, fx->nu);
        } else if (!strcmp(t, "I")) {
            fx->img = image_of(&save, fx->in);
        } else if (!strcmp(t, "O")) {
            fx->want = image_of(&save, fx->out);
        } else if (!strcmp(t, "R")) {
            fx->nr = atoi(strtok_r(NULL, " \n", &save));
            fx->r = numbers(&save, fx->nr);
        } else {
            cr_assert_fail("unknown fixture token '%s' in a %s case", t, fx->op);
        }
    }
}

static void fixture_free(struct fixture *fx)
{
    free(fx->p);
    free(fx->u);
    free(fx->img);
    free(fx->want);
    free(fx->r);
}

/* Elements further than atol from torchvision's; nearest sampling may land a grid point
 * on the other side of a pixel edge that float32 rounding puts within an ulp of it. */
static int64_t mismatches(const float *got, const float *want, int64_t n, double atol)
{
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++)
        bad += !(fabs((double)got[i] - (double)want[i]) <= atol);
    return bad;
}

static void check_image(const struct fixture *fx, const float *got, int line, double atol)
{
    int64_t n = fx->out[0] * fx->out[1] * fx->out[2];
    int64_t bad = mismatches(got, fx->want, n, atol);
    for (int64_t i = 0; i < n && bad; i++)
        if (!(fabs((double)got[i] - (double)fx->want[i]) <= atol))
            cr_assert_fail("line %d (%s): element %lld is %.9g, torchvision %.9g (%lld of %lld "
                           "differ)",
                           line, fx->op, (long long)i, got[i], fx->want[i], (long long)bad,
                           (long long)n);
}

/* Runs one case; returns its op's index in the list of ops covered. */
static void replay(struct fixture *fx, int line)
{
    const double *p = fx->p;
    int64_t c = fx->in[0], h = fx->in[1], w = fx->in[2];
    int64_t n = fx->out[0] > 0 ? fx->out[0] * fx->out[1] * fx->out[2] : 0;
    float *got = calloc((size_t)(n ? n : 1), sizeof *got);
    cr_assert_not_null(got);
    struct weft_transform_rng rng = weft_transform_rng_fixed(fx->u, fx->nu);
    const char *op = fx->op;
    if (!strcmp(op, "pad")) {
        int64_t pad[4] = {(int64_t)p[0], (int64_t)p[1], (int64_t)p[2], (int64_t)p[3]};
        cr_assert_eq(weft_transform_pad(fx->img, c, h, w, pad, (enum weft_pad_mode)p[4],
                                        (float)p[5], got),
                     0, "%s", weft_error_message());
        check_image(fx, got, line, 0);
    } else if (!strcmp(op, "crop")) {
        weft_transform_crop(fx->img, c, h, w, (int64_t)p[0], (int64_t)p[1], (int64_t)p[2],
                            (int64_t)p[3], got);
        check_image(fx, got, line, 0);
    } else if (!strcmp(op, "flip")) {
        weft_transform_flip(fx->img, c, h, w, p[0] != 0, got);
        check_image(fx, got, line, 0);
    } else if (!strcmp(op, "resize")) {
        int64_t size[2] = {(int64_t)p[1], (int64_t)p[2]}, oh, ow;
        weft_transform_resize_shape(h, w, (int)p[0], size, &oh, &ow);
        cr_assert(oh == fx->out[1] && ow == fx->out[2], "line %d: resize to %lldx%lld, "
                  "torchvision %lldx%lld", line, (long long)oh, (long long)ow,
                  (long long)fx->out[1], (long long)fx->out[2]);
        weft_transform_resize(fx->img, c, h, w, oh, ow, (enum weft_interp)p[3], got);
        check_image(fx, got, line, 2e-6);
    } else if (!strcmp(op, "affine") || !strcmp(op, "rotate")) {
        bool rot = !strcmp(op, "rotate");
        double m[6];
        if (rot)
            weft_transform_affine_matrix(-p[0], 0, 0, 1, 0, 0, m);
        else
            weft_transform_affine_matrix(p[0], p[1], p[2], p[3], p[4], p[5], m);
        int k = rot ? 1 : 6, nfill = (int)p[k + 1];
        float fill[WEFT_TRANSFORM_MAX_CHANNELS];
        for (int i = 0; i < nfill; i++)
            fill[i] = (float)p[k + 2 + i];
        enum weft_interp interp = (enum weft_interp)p[k];
        weft_transform_warp(fx->img, c, h, w, m, interp, nfill ? fill : NULL, nfill, got);
        check_image(fx, got, line, 2e-5);
    } else if (!strcmp(op, "normalize")) {
        int nm = (int)p[0];
        memcpy(got, fx->img, (size_t)n * sizeof *got);
        weft_transform_normalize(got, c, h, w, p + 1, p + 1 + nm, nm);
        check_image(fx, got, line, 1e-6);
    } else if (!strcmp(op, "brightness") || !strcmp(op, "contrast") ||
               !strcmp(op, "saturation")) {
        memcpy(got, fx->img, (size_t)n * sizeof *got);
        if (op[0] == 'b')
            weft_transform_brightness(got, c, h, w, p[0]);
        else if (op[0] == 'c')
            weft_transform_contrast(got, c, h, w, p[0]);
        else
            weft_transform_saturation(got, c, h, w, p[0]);
        check_image(fx, got, line, 1e-6);
    } else if (!strcmp(op, "erase")) {
        memcpy(got, fx->img, (size_t)n * sizeof *got);
        int nv = (int)p[4];
        float v[WEFT_TRANSFORM_MAX_CHANNELS];
        for (int i = 0; i < nv; i++)
            v[i] = (float)p[5 + i];
        weft_transform_erase(got, c, h, w, (int64_t)p[0], (int64_t)p[1], (int64_t)p[2],
                             (int64_t)p[3], v, nv);
        check_image(fx, got, line, 0);
    } else if (!strcmp(op, "crop_params") || !strcmp(op, "rrc_params") ||
               !strcmp(op, "erasing_params")) {
        struct weft_transform_box b;
        bool found = true;
        int64_t ph = (int64_t)p[0], pw = (int64_t)p[1];
        if (op[0] == 'c') {
            b = weft_transform_crop_params(&rng, ph, pw, (int64_t)p[2], (int64_t)p[3]);
        } else if (op[0] == 'r') {
            b = weft_transform_resized_crop_params(&rng, ph, pw, p + 2, p + 4);
        } else {
            b = weft_transform_erasing_params(&rng, 3, ph, pw, p + 2, p + 4, false, NULL, &found);
            cr_assert_eq(found, fx->r[4] != 0, "line %d: found", line);
        }
        double r[4] = {(double)b.top, (double)b.left, (double)b.h, (double)b.w};
        for (int i = 0; i < 4; i++)
            cr_assert_eq(r[i], fx->r[i], "line %d (%s): result %d is %g, torchvision %g", line,
                         op, i, r[i], fx->r[i]);
    } else if (!strcmp(op, "affine_params")) {
        /* h w d0 d1 has_t tx ty has_s s0 s1 nshear sh0..sh3 */
        double out[6];
        weft_transform_affine_params(&rng, (int64_t)p[0], (int64_t)p[1], p + 2,
                                     p[4] != 0 ? p + 5 : NULL, p[7] != 0 ? p + 8 : NULL,
                                     p + 11, (int)p[10], out);
        for (int i = 0; i < 6; i++)
            cr_assert_float_eq(out[i], fx->r[i], 1e-12, "line %d: parameter %d is %g, "
                               "torchvision %g", line, i, out[i], fx->r[i]);
    } else {
        cr_assert_fail("line %d: fixture op '%s' unknown to test_transforms.c", line, op);
    }
    free(got);
}

Test(transforms, every_transform_matches_torchvision)
{
    const char *dir = getenv("WEFT_TEST_SOURCE_DIR");
    if (!dir)
        cr_skip_test("WEFT_TEST_SOURCE_DIR is not set (run through meson test)");
    char path[1024];
    snprintf(path, sizeof path, "%s/transforms/fixtures/transforms.txt", dir);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "cannot open %s (tests/transforms/gen.py writes it)", path);
    static const char *const ops[] = {"pad", "crop", "flip", "resize", "affine", "rotate",
                                      "normalize", "brightness", "contrast", "saturation",
                                      "erase", "crop_params", "rrc_params", "erasing_params",
                                      "affine_params"};
    int seen[sizeof ops / sizeof ops[0]] = {0};
    char *line = NULL;
    size_t cap = 0;
    int lineno = 0;
    while (getline(&line, &cap, f) > 0) {
        lineno++;
        struct fixture fx;
        parse(line, &fx);
        for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++)
            seen[k] += !strcmp(fx.op, ops[k]);
        replay(&fx, lineno);
        fixture_free(&fx);
    }
    free(line);
    fclose(f);
    cr_assert_gt(lineno, 100, "only %d cases", lineno);
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++)
        cr_assert_gt(seen[k], 0, "no %s case in the fixtures", ops[k]);
}

/* ---- the random stream -------------------------------------------------------------- */

Test(transforms, each_samples_stream_is_the_documented_philox_block)
{
    struct weft_transform_rng r = weft_transform_rng_sample(42, 3, 17);
    uint64_t key = 42 ^ WEFT_TRANSFORM_KEY, block = ((uint64_t)3 << 40) | ((uint64_t)17 << 10);
    for (uint64_t i = 0; i < 9; i++)
        cr_assert_eq(weft_transform_uniform(&r, 0, 1), weft_philox_uniform_f64(key, block, i));
    struct weft_transform_rng a = weft_transform_rng_sample(42, 3, 18);
    struct weft_transform_rng b = weft_transform_rng_sample(42, 4, 17);
    cr_assert_neq(a.block, r.block);
    cr_assert_neq(b.block, r.block);
    double fixed[2] = {0.25, 0.999};
    struct weft_transform_rng f = weft_transform_rng_fixed(fixed, 2);
    cr_assert_eq(weft_transform_randint(&f, 0, 8), 2);
    cr_assert_eq(weft_transform_randint(&f, 3, 5), 4);
    cr_assert_eq(weft_transform_uniform(&f, 1, 2), 1.0, "past the list: zeros");
}

/* ---- in the loader ---------------------------------------------------------------- */

static const char *augment_ini =
    "[data]\nreader = tf_img\nsamples = 24\n"
    "[loader]\nbatch_size = 5\nshuffle = true\nseed = 9\n"
    "transforms = random_crop, random_horizontal_flip, random_affine, color_jitter, "
    "normalize, random_erasing\n"
    "mean = 0.5, 0.4, 0.3\nstd = 0.2, 0.25, 0.3\n"
    "[loader.transform.random_crop]\nsize = 8, 10\npadding = 2\npadding_mode = reflect\n"
    "[loader.transform.random_affine]\ndegrees = 15\ntranslate = 0.1, 0.1\n"
    "interpolation = bilinear\n"
    "[loader.transform.color_jitter]\nbrightness = 0.4\ncontrast = 0.4\nsaturation = 0.3\n"
    "[loader.transform.random_erasing]\np = 0.7\n";

struct run {
    struct weft_config *cfg;
    weft_dataset *ds;
    weft_dataloader *dl;
};

static struct run start(const char *ini, int workers)
{
    struct run r;
    r.cfg = weft_config_parse(ini, "aug.ini");
    tu_assert_no_error();
    char w[16];
    snprintf(w, sizeof w, "%d", workers);
    weft_config_put(r.cfg, "loader", "workers", w);
    r.ds = weft_dataset_open(weft_config_options(r.cfg, "data"));
    tu_assert_no_error();
    r.dl = weft_dataloader_from_config(r.ds, r.cfg, "loader", WEFT_CPU);
    tu_assert_no_error();
    cr_assert_not_null(r.dl);
    cr_assert_eq(weft_config_check_unknown(r.cfg), 0, "%s", weft_error_message());
    return r;
}

static void stop(struct run *r)
{
    weft_dataloader_free(r->dl);
    weft_dataset_close(r->ds);
    weft_config_free(r->cfg);
}

/* An epoch's images, concatenated, into out (n floats); returns n. */
static int64_t epoch_images(weft_dataloader *dl, int64_t epoch, float *out, int64_t cap)
{
    cr_assert_eq(weft_dataloader_epoch(dl, epoch), 0);
    weft_tensor *f[2];
    int64_t n = 0;
    int rc;
    while ((rc = weft_dataloader_next(dl, f)) == 1) {
        int64_t m = weft_tensor_numel(f[0]);
        cr_assert_eq(f[0]->dtype, WEFT_F32);
        cr_assert_leq(n + m, cap);
        memcpy(out + n, weft_tensor_data(f[0]), (size_t)m * sizeof *out);
        n += m;
        weft_tensor_release(f[0]);
        weft_tensor_release(f[1]);
    }
    cr_assert_eq(rc, 0, "%s", weft_error_message());
    return n;
}

#define CAP (24 * 3 * 10 * 12)

Test(transforms, workers_0_1_2_and_8_give_bit_identical_batches)
{
    static float ref[CAP], got[CAP];
    struct run r = start(augment_ini, 0);
    int64_t n = epoch_images(r.dl, 1, ref, CAP);
    cr_assert_eq(n, 24 * 3 * 8 * 10, "random_crop.size = 8, 10 is the shape handed out");
    stop(&r);
    const int workers[] = {1, 2, 8};
    for (int i = 0; i < 3; i++) {
        r = start(augment_ini, workers[i]);
        cr_assert_eq(epoch_images(r.dl, 1, got, CAP), n);
        cr_assert_eq(memcmp(ref, got, (size_t)n * sizeof *ref), 0, "%d workers differ",
                     workers[i]);
        stop(&r);
    }
}

Test(transforms, two_epochs_differ_and_a_resumed_epoch_repeats_its_stream)
{
    static float e0[CAP], e1[CAP], again[CAP];
    struct run r = start(augment_ini, 2);
    int64_t n = epoch_images(r.dl, 0, e0, CAP);
    cr_assert_eq(epoch_images(r.dl, 1, e1, CAP), n);
    cr_assert_neq(memcmp(e0, e1, (size_t)n * sizeof *e0), 0, "epochs 0 and 1 are the same");
    stop(&r);
    /* A new process resuming at epoch 1 (what weft-train does from a checkpoint). */
    r = start(augment_ini, 1);
    cr_assert_eq(epoch_images(r.dl, 1, again, CAP), n);
    cr_assert_eq(memcmp(e1, again, (size_t)n * sizeof *e1), 0);
    stop(&r);
}

Test(transforms, a_sample_gets_the_same_augmentation_whatever_its_batch)
{
    /* Shuffled or not, sample i in epoch e draws from its own stream: the label says
     * which sample an image is, and the image must then be the same. */
    static float a[CAP], b[CAP];
    struct run r = start(augment_ini, 0);
    int64_t n = epoch_images(r.dl, 2, a, CAP);
    stop(&r);
    char ini[2048];
    snprintf(ini, sizeof ini, "%s", augment_ini);
    char *s = strstr(ini, "shuffle = true");
    memcpy(s, "shuffle = no  ", 14);
    r = start(ini, 2);
    cr_assert_eq(epoch_images(r.dl, 2, b, CAP), n);
    stop(&r);
    /* The shuffled order of epoch 2, from the loader's documented permutation. */
    int64_t order[24];
    for (int64_t i = 0; i < 24; i++)
        order[i] = i;
    for (int64_t i = 23; i > 0; i--) {
        int64_t j = (int64_t)(weft_philox_u64(9, (uint64_t)2 << 40, (uint64_t)(23 - i)) %
                              (uint64_t)(i + 1));
        int64_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    int64_t per = n / 24;
    for (int64_t k = 0; k < 24; k++)
        cr_assert_eq(memcmp(a + k * per, b + order[k] * per, (size_t)per * sizeof *a), 0,
                     "sample %lld", (long long)order[k]);
}

Test(transforms, evaluation_form_is_deterministic_and_drops_the_random_steps)
{
    static float a[CAP], b[CAP];
    struct run r = start("[data]\nreader = tf_img\nsamples = 4\nchannels = 1\n"
                         "[loader]\nbatch_size = 4\n"
                         "transforms = random_crop, random_horizontal_flip, random_rotation\n"
                         "[loader.transform.random_crop]\nsize = 10, 12\npadding = 3\n"
                         "[loader.transform.random_rotation]\ndegrees = 40\n",
                         0);
    struct weft_dataloader_options o = *weft_dataloader_options(r.dl);
    o.transforms_eval = true;
    weft_dataloader *dl = weft_dataloader_new(r.ds, &o);
    tu_assert_no_error();
    int64_t n = epoch_images(dl, 0, a, CAP);
    cr_assert_eq(epoch_images(dl, 1, b, CAP), n);
    cr_assert_eq(memcmp(a, b, (size_t)n * sizeof *a), 0);
    /* The centre crop of the image padded by 3 back to its size is the image itself. */
    for (int64_t i = 0; i < n; i++) {
        int64_t s = i / 120, e = i % 120;
        cr_assert_eq(a[i], (float)((s * 37 + e * 11) % 256) / 255.0f, "element %lld", (long long)i);
    }
    weft_dataloader_free(dl);
    stop(&r);
}

Test(transforms, resize_and_resized_crop_set_the_shape_handed_out)
{
    struct run r = start("[data]\nreader = tf_img\nsamples = 3\n"
                         "[loader]\nbatch_size = 3\n"
                         "transforms = resize, random_resized_crop, center_crop\n"
                         "[loader.transform.resize]\nsize = 20\ninterpolation = nearest\n"
                         "[loader.transform.random_resized_crop]\nsize = 16, 18\n"
                         "[loader.transform.center_crop]\nsize = 7\n",
                         2);
    weft_tensor *f[2];
    char line[128];
    cr_assert_str_eq(weft_transforms_describe(weft_dataloader_options(r.dl)->transforms, line,
                                              sizeof line),
                     "resize(20x24) -> random_resized_crop(16x18) -> center_crop(7x7)");
    cr_assert_eq(weft_dataloader_next(r.dl, f), 1, "%s", weft_error_message());
    tu_assert_shape(f[0], 4, (int64_t[]){3, 3, 7, 7});
    weft_tensor_release(f[0]);
    weft_tensor_release(f[1]);
    stop(&r);
    /* resize's int size matches the shorter edge: 10x12 -> 20x24 */
    r = start("[data]\nreader = tf_img\nsamples = 3\n[loader]\ntransforms = resize\n"
              "[loader.transform.resize]\nsize = 20\n",
              0);
    cr_assert_eq(weft_dataloader_next(r.dl, f), 1, "%s", weft_error_message());
    tu_assert_shape(f[0], 4, (int64_t[]){1, 3, 20, 24});
    weft_tensor_release(f[0]);
    weft_tensor_release(f[1]);
    stop(&r);
}

Test(transforms, normalize_in_the_list_equals_mean_and_std_without_it)
{
    static float a[CAP], b[CAP];
    const char *plain = "[data]\nreader = tf_img\n[loader]\nbatch_size = 8\nmean = 0.5, 0.4, 0.3\n"
                        "std = 0.2, 0.25, 0.3\n";
    const char *listed = "[data]\nreader = tf_img\n[loader]\nbatch_size = 8\n"
                         "transforms = normalize\nmean = 0.5, 0.4, 0.3\nstd = 0.2, 0.25, 0.3\n";
    struct run r = start(plain, 0);
    int64_t n = epoch_images(r.dl, 0, a, CAP);
    stop(&r);
    r = start(listed, 2);
    cr_assert_eq(epoch_images(r.dl, 0, b, CAP), n);
    stop(&r);
    for (int64_t i = 0; i < n; i++)
        cr_assert_float_eq(a[i], b[i], 1e-5, "element %lld", (long long)i);
}

/* ---- errors ------------------------------------------------------------------------- */

/* keys: [loader]'s keys, then "|NAME: k = v; k = v" for [loader.transform.NAME]. */
static void config_fails(const char *keys, const char *message)
{
    char ini[1024];
    int n = snprintf(ini, sizeof ini, "[data]\nreader = tf_img\n[loader]\n");
    for (const char *p = keys; *p; p++) {
        if (*p == '|') {
            const char *colon = strchr(p, ':');
            n += snprintf(ini + n, sizeof ini - (size_t)n, "[loader.transform.%.*s]\n",
                          (int)(colon - p - 1), p + 1);
            p = colon + (colon[1] == ' ');
        } else {
            ini[n++] = *p == ';' ? '\n' : *p;
            ini[n] = '\0';
            if (*p == ';') /* a leading blank would continue the value (inih) */
                while (p[1] == ' ')
                    p++;
        }
    }
    struct weft_config *cfg = weft_config_parse(ini, "aug.ini");
    tu_assert_no_error();
    weft_dataset *ds = weft_dataset_open(weft_config_options(cfg, "data"));
    tu_assert_no_error();
    weft_dataloader *dl = weft_dataloader_from_config(ds, cfg, "loader", WEFT_CPU);
    cr_assert_null(dl, "accepted: %s", ini);
    tu_assert_error(WEFT_ERR_CONFIG, message);
    weft_dataset_close(ds);
    weft_config_free(cfg);
}

Test(transforms, malformed_options_name_the_section_key_and_value)
{
    config_fails("transforms = random_crop, random_flip\n|random_crop: size = 4\n",
                 "aug.ini: [loader] transforms = 'random_crop, random_flip': unknown transform "
                 "'random_flip' (expected a comma-separated list of: normalize, random_crop");
    config_fails("transforms = random_crop\n|random_crop: size = 0\n",
                 "aug.ini: [loader.transform.random_crop] size = '0': expected a size");
    config_fails("transforms = random_crop\n|random_crop: size = 4, 5, 6\n",
                 "[loader.transform.random_crop] size = '4, 5, 6'");
    config_fails("transforms = random_crop\n",
                 "[loader.transform.random_crop] size is missing: [loader] transforms lists "
                 "random_crop");
    config_fails("transforms = random_horizontal_flip\n|random_horizontal_flip: p = 1.5\n",
                 "[loader.transform.random_horizontal_flip] p = '1.5': expected a probability "
                 "in [0, 1]");
    config_fails("transforms = random_erasing\n|random_erasing: p = -0.1\n",
                 "p = '-0.1': expected a probability in [0, 1]");
    config_fails("transforms = random_crop\n|random_crop: size = 11, 12\n",
                 "[loader.transform.random_crop] size = '11, 12': Required crop size (11, 12) "
                 "is larger than input image size (10, 12)");
    config_fails("transforms = random_crop\n|random_crop: size = 8; padding = 10; "
                 "padding_mode = reflect\n",
                 "[loader.transform.random_crop] padding: padding 10 is too large for "
                 "padding_mode = reflect");
    config_fails("transforms = random_crop\n|random_crop: size = 8; padding_mode = mirror\n",
                 "padding_mode");
    config_fails("transforms = random_horizontal_flip\n|random_crop: size = 8\n",
                 "section [loader.transform.random_crop] is given but [loader] transforms does "
                 "not list random_crop");
    config_fails("transforms = random_horizontal_flip\n|random_flip: p = 0.2\n",
                 "section [loader.transform.random_flip]: unknown transform 'random_flip'");
    config_fails("transforms = random_crop\n|random_crop: size = 8; pading = 2\n",
                 "[loader.transform.random_crop] unknown key 'pading': random_crop takes size, "
                 "padding");
    config_fails("transforms = random_horizontal_flip\nmean = 0.5\nstd = 0.2\n",
                 "mean and std are normalize's keys, but transforms");
    config_fails("transforms = normalize\nmean = 0.5\n", "transforms lists normalize but std");
    config_fails("transforms = normalize\nmean = 0.5, 0.5\nstd = 0.2, 0.2\n",
                 "[loader] mean = '0.5, 0.5': expected one number or 3 (one per channel)");
    config_fails("transforms = random_rotation\n",
                 "[loader.transform.random_rotation] degrees is missing");
    config_fails("transforms = random_affine\n|random_affine: degrees = 5; translate = 0.1, 2\n",
                 "translate = '0.1, 2': expected two fractions");
    config_fails("transforms = color_jitter\n|color_jitter: brightness = -1\n",
                 "[loader.transform.color_jitter] brightness = '-1'");
    config_fails("transforms = random_erasing\n|random_erasing: value = 1, 2\n",
                 "value = '1, 2': expected one number or 3");
    config_fails("transforms = resize\n|resize: size = 8; interpolation = bicubic\n",
                 "interpolation");
    config_fails("transforms = center_crop\n|center_crop: size = 20\n",
                 "size = '20': crop size (20, 20) is larger than the image (10, 12)");
}

/* Every parameter has an upper bound, named with its key: padding = 1073741810 once
 * wrapped the loader's buffer size (a heap overflow); a flat shear or a tiny scale once
 * sent coordinates past int64 in the warp. */
Test(transforms, every_parameter_has_an_upper_bound_named_with_its_key)
{
    config_fails("transforms = random_crop\n|random_crop: size = 8; padding = 1073741810\n",
                 "aug.ini: [loader.transform.random_crop] padding = '1073741810': expected "
                 "padding: one non-negative integer (all sides), two (left/right, top/bottom) "
                 "or four (left, top, right, bottom), each at most 65536");
    config_fails("transforms = random_crop\n|random_crop: size = 8; padding = 65536\n",
                 "[loader.transform.random_crop] padding = '65536': the image would be 3 x "
                 "131082 x 131084 (C x H x W) at its padding, more than 2^30 values");
    config_fails("transforms = random_crop\n|random_crop: size = 65536; pad_if_needed = true\n",
                 "[loader.transform.random_crop] size = '65536': the image would be 3 x 131062 "
                 "x 131060 (C x H x W) at its padding, more than 2^30 values");
    config_fails("transforms = random_crop\n|random_crop: size = 65537\n",
                 "size = '65537': expected a size: one positive integer (a square, or resize's "
                 "shorter edge) or two (height, width), each at most 65536");
    config_fails("transforms = resize\n|resize: size = 1e15\n", "size = '1e15': expected a size");
    config_fails("transforms = resize\n|resize: size = 60000\n",
                 "[loader.transform.resize] size = '60000': expected a size that leaves both "
                 "edges at most 65536 (the 10 x 12 image's longer edge would become 72000)");
    config_fails("transforms = random_resized_crop\n|random_resized_crop: size = 20000, 20000\n",
                 "[loader.transform.random_resized_crop] size = '20000, 20000': the image would "
                 "be 3 x 20000 x 20000 (C x H x W) at its output");
    config_fails("transforms = random_resized_crop\n|random_resized_crop: size = 4; "
                 "ratio = 1e-300, 1\n",
                 "[loader.transform.random_resized_crop] ratio = '1e-300, 1': expected two "
                 "numbers lo, hi with 0.001 <= lo <= hi <= 1000 (aspect ratios)");
    config_fails("transforms = random_resized_crop\n|random_resized_crop: size = 4; "
                 "scale = 0.5, 1e300\n",
                 "scale = '0.5, 1e300': expected two numbers lo, hi with 0 <= lo <= hi <= 1000");
    config_fails("transforms = random_erasing\n|random_erasing: scale = 0.1, 2\n",
                 "[loader.transform.random_erasing] scale = '0.1, 2': expected two numbers lo, "
                 "hi with 0 <= lo <= hi <= 1");
    config_fails("transforms = random_erasing\n|random_erasing: ratio = 0.5, 1e9\n",
                 "[loader.transform.random_erasing] ratio = '0.5, 1e9'");
    config_fails("transforms = random_rotation\n|random_rotation: degrees = 1e300\n",
                 "[loader.transform.random_rotation] degrees = '1e300': expected degrees: one "
                 "number d in [0, 360]");
    config_fails("transforms = random_affine\n|random_affine: degrees = -400, 0\n",
                 "[loader.transform.random_affine] degrees = '-400, 0'");
    config_fails("transforms = random_affine\n|random_affine: degrees = 0; shear = 0, 0, 89, 1e20\n",
                 "[loader.transform.random_affine] shear = '0, 0, 89, 1e20': expected shear");
    config_fails("transforms = random_affine\n|random_affine: degrees = 0; scale = 1e-300, 1\n",
                 "[loader.transform.random_affine] scale = '1e-300, 1': expected two numbers lo, "
                 "hi with 0.001 <= lo <= hi <= 1000");
    config_fails("transforms = color_jitter\n|color_jitter: contrast = 1e30\n",
                 "[loader.transform.color_jitter] contrast = '1e30': expected one number x in "
                 "[0, 1000]");
    config_fails("transforms = random_rotation\n|random_rotation: degrees = 5; fill = 1e39\n",
                 "[loader.transform.random_rotation] fill = '1e39': expected one number or 3 "
                 "(one per channel), in float32's range");
    config_fails("transforms = random_crop\n|random_crop: size = 8; padding = 2; fill = -1e39\n",
                 "[loader.transform.random_crop] fill = '-1e39'");
}

/* Coordinates far outside the image (a shear of 89.9 degrees) read the fill, never an
 * int64 conversion out of range (UBSan's check in the sanitizer build). */
Test(transforms, a_nearly_flat_shear_reads_the_fill)
{
    float src[2 * 3] = {1, 2, 3, 4, 5, 6}, dst[6], fill = 7;
    double m[6];
    weft_transform_affine_matrix(0, 0, 0, 0.001, 89.9, 89.9, m);
    for (int interp = 0; interp < 2; interp++) {
        weft_transform_warp(src, 1, 2, 3, m, (enum weft_interp)interp, &fill, 1, dst);
        for (int i = 0; i < 6; i++)
            cr_assert(dst[i] == fill || (dst[i] >= 1 && dst[i] <= 7), "%g", dst[i]);
    }
    m[0] = NAN;
    weft_transform_warp(src, 1, 2, 3, m, WEFT_INTERP_NEAREST, &fill, 1, dst);
    cr_assert_eq(dst[0], fill);
}

Test(transforms, a_loader_refuses_transforms_built_for_another_shape)
{
    struct run r = start("[data]\nreader = tf_img\n[loader]\ntransforms = random_horizontal_flip\n",
                         0);
    struct weft_config *cfg = weft_config_parse("[data]\nreader = tf_img\nwidth = 5\n", "b.ini");
    weft_dataset *other = weft_dataset_open(weft_config_options(cfg, "data"));
    tu_assert_no_error();
    struct weft_dataloader_options o = *weft_dataloader_options(r.dl);
    cr_assert_null(weft_dataloader_new(other, &o));
    tu_assert_error(WEFT_ERR_VALUE, "the transforms were built for samples of shape [3, 10, 12], "
                                    "but field 'image' of dataset [data] has shape [3, 10, 5]");
    weft_dataset_close(other);
    weft_config_free(cfg);
    stop(&r);
}

Test(transforms, random_erasing_noise_is_normal_and_keyed_by_the_sample)
{
    struct weft_config *cfg = weft_config_parse(
        "[d]\ntransforms = random_erasing\n[d.transform.random_erasing]\np = 1\n"
        "scale = 0.3, 0.33\nratio = 1, 1\nvalue = random\n",
        "noise.ini");
    tu_assert_no_error();
    int64_t shape[3] = {3, 40, 40};
    weft_transforms *t = weft_transforms_from_config(cfg, "d", 3, shape);
    tu_assert_no_error();
    cr_assert_not_null(t);
    int64_t n = 3 * 40 * 40, m = weft_transforms_max_numel(t);
    float *in = malloc((size_t)n * sizeof *in), *a = malloc((size_t)n * sizeof *a);
    float *b = malloc((size_t)n * sizeof *b), *scratch = malloc((size_t)(2 * m) * sizeof *scratch);
    cr_assert(in && a && b && scratch);
    for (int64_t i = 0; i < n; i++)
        in[i] = 7.0f; /* far from any normal draw */
    struct weft_transform_rng r1 = weft_transform_rng_sample(5, 2, 3);
    struct weft_transform_rng r2 = weft_transform_rng_sample(5, 2, 3);
    cr_assert_eq(weft_transforms_apply(t, in, a, scratch, &r1, true), 0);
    cr_assert_eq(weft_transforms_apply(t, in, b, scratch, &r2, true), 0);
    cr_assert_eq(memcmp(a, b, (size_t)n * sizeof *a), 0, "the same sample, the same noise");
    /* About a third of the image erased (scale 0.3..0.33 of 1600, square): its values are
     * standard normal draws. */
    double sum = 0, sq = 0;
    int64_t erased = 0;
    for (int64_t i = 0; i < n; i++)
        if (a[i] != 7.0f) {
            erased++;
            sum += a[i];
            sq += (double)a[i] * a[i];
        }
    cr_assert(erased >= 3 * 400 && erased <= 3 * 600, "%lld erased", (long long)erased);
    double mean = sum / (double)erased, var = sq / (double)erased - mean * mean;
    cr_assert(fabs(mean) < 0.1 && fabs(var - 1) < 0.15, "mean %g var %g", mean, var);
    struct weft_transform_rng r3 = weft_transform_rng_sample(5, 2, 4);
    cr_assert_eq(weft_transforms_apply(t, in, b, scratch, &r3, true), 0);
    cr_assert_neq(memcmp(a, b, (size_t)n * sizeof *a), 0, "another sample, other noise");
    free(in);
    free(a);
    free(b);
    free(scratch);
    weft_transforms_release(t);
    weft_config_free(cfg);
}
