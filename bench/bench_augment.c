/* bench/bench_augment.c: weft-bench's augmentation group, the data loader's throughput with
 * transforms on (issue 19). Every name starts with "augment_", so
 * `weft-bench --filter augment_` runs the group alone:
 *   augment_mnist_w0_images_per_s   MNIST train through the idx reader, batch 64, each image
 *   augment_mnist_w2_images_per_s   padded and randomly cropped, flipped, warped by a random
 *                                   affine (bilinear), erased and normalised; read in the
 *                                   calling thread (w0) or by 2 workers (w2)
 *   augment_none_w0_images_per_s    the same loader with normalize only, for reference
 * Each figure is followed by "..._per_cpu_s": images per second of process CPU time (all
 * threads), which a machine shared with other jobs distorts far less than wall time.
 * The data is found under $WEFT_SOURCE_ROOT/data/mnist, ./data/mnist or ../data/mnist.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <weft.h>
#include <weft/train.h>

typedef double (*time_median_fn)(void (*fn)(void *), void *ctx, int repeats);
typedef void (*report_fn)(const char *name, double value, const char *unit);

void bench_augment(bool (*selected)(const char *name), time_median_fn time_median,
                   report_fn report, int repeats);

struct epoch_ctx {
    weft_dataloader *dl;
    int nfields;
};

static long epochs_run; /* by run_epoch since the last reset */

/* One epoch, each batch dropped at once (as a training step would after use). */
static void run_epoch(void *p)
{
    struct epoch_ctx *c = p;
    epochs_run++;
    weft_tensor *f[WEFT_DATASET_MAX_FIELDS];
    weft_dataloader_epoch(c->dl, 0);
    while (weft_dataloader_next(c->dl, f) == 1)
        for (int i = 0; i < c->nfields; i++)
            weft_tensor_release(f[i]);
}

static bool find_mnist(char *images, char *labels, size_t size)
{
    const char *root = getenv("WEFT_SOURCE_ROOT");
    const char *dirs[] = {root ? root : ".", ".", ".."};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        snprintf(images, size, "%s/data/mnist/train-images-idx3-ubyte.gz", dirs[i]);
        FILE *f = fopen(images, "rb");
        if (f) {
            fclose(f);
            snprintf(labels, size, "%s/data/mnist/train-labels-idx1-ubyte.gz", dirs[i]);
            return true;
        }
    }
    return false;
}

static const char augment_ini[] =
    "[loader]\nbatch_size = 64\nshuffle = true\nmean = 0.1307\nstd = 0.3081\n"
    "transforms = random_crop, random_horizontal_flip, random_affine, random_erasing, "
    "normalize\n"
    "[loader.transform.random_crop]\nsize = 28\npadding = 4\npadding_mode = reflect\n"
    "[loader.transform.random_affine]\ndegrees = 15\ntranslate = 0.1, 0.1\nscale = 0.9, 1.1\n"
    "interpolation = bilinear\n"
    "[loader.transform.random_erasing]\np = 0.5\n";

static const char plain_ini[] =
    "[loader]\nbatch_size = 64\nshuffle = true\nmean = 0.1307\nstd = 0.3081\n"
    "transforms = normalize\n";

static void one(bool (*selected)(const char *), time_median_fn time_median, report_fn report,
                int repeats, const char *name, const char *ini, const char *workers,
                const char *images, const char *labels)
{
    if (!selected(name))
        return;
    struct weft_config *cfg = weft_config_parse(ini, "bench");
    weft_dataset *ds = NULL;
    struct epoch_ctx c = {NULL, 0};
    if (cfg && weft_config_put(cfg, "loader", "workers", workers) == 0 &&
        weft_config_put(cfg, "data", "reader", "idx") == 0 &&
        weft_config_put(cfg, "data", "images", images) == 0 &&
        weft_config_put(cfg, "data", "labels", labels) == 0 &&
        (ds = weft_dataset_open(weft_config_options(cfg, "data"))))
        c = (struct epoch_ctx){weft_dataloader_from_config(ds, cfg, "loader", WEFT_CPU),
                               weft_dataset_num_fields(ds)};
    if (!c.dl) {
        printf("# %s skipped: %s\n", name, weft_error_message());
        weft_error_clear();
    } else {
        epochs_run = 0;
        clock_t c0 = clock();
        double s = time_median(run_epoch, &c, repeats);
        double cpu = (double)(clock() - c0) / CLOCKS_PER_SEC;
        if (weft_error_code() != WEFT_OK) {
            printf("# %s failed: %s\n", name, weft_error_message());
            weft_error_clear();
        } else {
            report(name, (double)weft_dataset_length(ds) / s, "images/s");
            /* time_median may run the epoch more than `repeats` times: count them. */
            char cpu_name[96];
            snprintf(cpu_name, sizeof cpu_name, "%.*s_per_cpu_s", (int)(strlen(name) - 6), name);
            if (cpu > 0)
                report(cpu_name, (double)weft_dataset_length(ds) * (double)epochs_run / cpu,
                       "images/s");
        }
    }
    weft_dataloader_free(c.dl);
    weft_dataset_close(ds);
    weft_config_free(cfg);
}

void bench_augment(bool (*selected)(const char *name), time_median_fn time_median,
                   report_fn report, int repeats)
{
    char images[1024], labels[1024];
    if (!find_mnist(images, labels, sizeof images)) {
        if (selected("augment_mnist_w0_images_per_s"))
            printf("# augment_ skipped: data/mnist not found (set WEFT_SOURCE_ROOT)\n");
        return;
    }
    one(selected, time_median, report, repeats, "augment_mnist_w0_images_per_s", augment_ini,
        "0", images, labels);
    one(selected, time_median, report, repeats, "augment_mnist_w2_images_per_s", augment_ini,
        "2", images, labels);
    one(selected, time_median, report, repeats, "augment_none_w0_images_per_s", plain_ini, "0",
        images, labels);
}
