/* bench/bench_loader_config.c: weft-bench --config CONFIG.ini: the data loader of a
 * config's [data] on its own, as the regression gate measures it (bench/bench-check.py):
 * "loader_<config>_samples_per_s", samples per second over `batches` batches (after one
 * batch of warm-up, the epoch restarting when it runs out), the median of `repeats`.
 *
 * WEFT_BENCH_INJECT=slow:F (the gate's self-test) spins F times each batch's time more. */
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <weft.h>
#include <weft/train.h>

typedef void (*report_fn)(const char *name, double value, const char *unit);

int bench_loader_config(const char *path, int batches, int repeats, report_fn report);

struct loader_run {
    weft_dataloader *dl;
    int nfields;
    int batches;
    double inject_slow;
    int64_t samples;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One batch, dropped at once as a training step would after use; 1, or 0 at the end of
 * the epoch (the next epoch started), negative on error. */
static int one_batch(struct loader_run *r, int64_t *epoch)
{
    weft_tensor *f[WEFT_DATASET_MAX_FIELDS];
    double t0 = now_s();
    int got = weft_dataloader_next(r->dl, f);
    if (got == 0)
        return weft_dataloader_epoch(r->dl, ++*epoch);
    if (got < 0)
        return got;
    r->samples += f[0]->ndim > 0 ? f[0]->shape[0] : 1;
    for (int i = 0; i < r->nfields; i++)
        weft_tensor_release(f[i]);
    for (double until = now_s() + r->inject_slow * (now_s() - t0); now_s() < until;)
        ;
    return 1;
}

static int compare(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int bench_loader_config(const char *path, int batches, int repeats, report_fn report)
{
    struct weft_config *cfg = weft_config_load(path);
    weft_dataset *ds = cfg ? weft_dataset_open(weft_config_options(cfg, "data")) : NULL;
    struct loader_run r = {ds ? weft_dataloader_from_config(ds, cfg, "data", WEFT_CPU) : NULL,
                           ds ? weft_dataset_num_fields(ds) : 0, batches, 0, 0};
    const char *inject = getenv("WEFT_BENCH_INJECT");
    if (inject && strstr(inject, "slow:"))
        r.inject_slow = strtod(strstr(inject, "slow:") + 5, NULL);
    double rates[64];
    int64_t epoch = 0;
    int rc = r.dl ? weft_dataloader_epoch(r.dl, 0) : -1;
    while (rc >= 0 && (rc = one_batch(&r, &epoch)) == 0) /* warm-up */
        ;
    for (int k = 0; k < repeats && k < 64 && rc >= 0; k++) {
        r.samples = 0;
        double t0 = now_s();
        for (int b = 0; b < batches && rc >= 0;)
            if ((rc = one_batch(&r, &epoch)) == 1)
                b++;
        rates[k] = (double)r.samples / (now_s() - t0);
    }
    if (rc >= 0) {
        qsort(rates, (size_t)repeats, sizeof *rates, compare);
        char copy[4096], name[256];
        snprintf(copy, sizeof copy, "%s", path);
        char *base = basename(copy), *dot = strrchr(base, '.');
        if (dot)
            *dot = '\0';
        snprintf(name, sizeof name, "loader_%s_samples_per_s", base);
        report(name, rates[repeats / 2], "samples/s");
    } else {
        fprintf(stderr, "weft-bench: --config %s: %s\n", path, weft_error_message());
    }
    weft_dataloader_free(r.dl);
    weft_dataset_close(ds);
    weft_config_free(cfg);
    return rc >= 0 ? 0 : 1;
}
