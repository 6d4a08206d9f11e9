/* tests/test_dataloader.c: the data loader over a reader defined here (and the io
 * plugin's synthetic one): batching, shuffling, workers, normalisation, pinning,
 * errors, configuration.
 *
 * The "lt_seq" reader: sample i has image [3, 2, 2] uint8 with element (c, h, w) equal
 * to (7 i + 4 c + 2 h + w) % 251 and label [] int32 equal to i (num_classes = samples),
 * so a batch tells which samples it holds. Keys: samples, fail_at (reading that index
 * fails), delay_us (a batch sleeps up to that long, varying per batch, so workers finish
 * out of order). */
#include <string.h>
#include <unistd.h>

#include <weft/philox.h>

#include "testutil.h"

static int64_t seq_samples_read; /* by every lt_seq read so far */

struct seq_ctx {
    int64_t samples, fail_at, delay_us;
};

static int seq_open(const weft_options *o, struct weft_dataset_info *info, void **ctx)
{
    struct seq_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "lt_seq: out of memory");
    if (weft_options_int(o, "samples", 10, &c->samples) < 0 ||
        weft_options_int(o, "fail_at", -1, &c->fail_at) < 0 ||
        weft_options_int(o, "delay_us", 0, &c->delay_us) < 0) {
        free(c);
        return weft_error_code();
    }
    info->length = c->samples;
    info->nfields = 2;
    strcpy(info->fields[0].name, "image");
    info->fields[0].dtype = WEFT_U8;
    info->fields[0].ndim = 3;
    info->fields[0].shape[0] = 3;
    info->fields[0].shape[1] = 2;
    info->fields[0].shape[2] = 2;
    strcpy(info->fields[1].name, "label");
    info->fields[1].dtype = WEFT_I32;
    info->fields[1].num_classes = c->samples;
    *ctx = c;
    return 0;
}

static int seq_read(void *ctx, int64_t n, const int64_t *indices, void *const *buffers)
{
    const struct seq_ctx *c = ctx;
    if (c->delay_us > 0)
        usleep((useconds_t)((indices[0] * 7919) % (c->delay_us + 1)));
    uint8_t *img = buffers[0];
    int32_t *lab = buffers[1];
    for (int64_t k = 0; k < n; k++) {
        int64_t i = indices[k];
        if (i == c->fail_at)
            return weft_error_set(WEFT_ERR_IO, "lt_seq.bin: sample %lld is corrupt at byte %lld",
                                  (long long)i, (long long)(i * 16));
        for (int e = 0; e < 12; e++)
            img[k * 12 + e] = (uint8_t)((7 * i + e) % 251);
        lab[k] = (int32_t)i;
    }
    __atomic_add_fetch(&seq_samples_read, n, __ATOMIC_RELEASE);
    return 0;
}

static void seq_close(void *ctx)
{
    free(ctx);
}

static const struct weft_dataset_reader seq_reader = {
    .base = WEFT_VTABLE(WEFT_KIND_READER, "lt_seq", struct weft_dataset_reader),
    .description = "test sequence",
    .open = seq_open,
    .read = seq_read,
    .close = seq_close,
};

static void setup(void)
{
    tu_setup();
    cr_assert_geq(weft_register(&seq_reader), 0, "%s", weft_error_message());
}

TestSuite(dataloader, .init = setup, .fini = tu_teardown);

static struct weft_config *cfg_of(const char *ini)
{
    struct weft_config *cfg = weft_config_parse(ini, "loader.ini");
    tu_assert_no_error();
    cr_assert_not_null(cfg);
    return cfg;
}

static weft_dataset *open_seq(int64_t samples, int64_t fail_at, int64_t delay_us)
{
    char ini[256];
    snprintf(ini, sizeof ini, "[data]\nreader = lt_seq\nsamples = %lld\nfail_at = %lld\n"
             "delay_us = %lld\n", (long long)samples, (long long)fail_at, (long long)delay_us);
    struct weft_config *cfg = cfg_of(ini);
    weft_dataset *ds = weft_dataset_open(weft_config_options(cfg, "data"));
    weft_config_free(cfg);
    tu_assert_no_error();
    cr_assert_not_null(ds);
    return ds;
}

static weft_dataloader *loader(const weft_dataset *ds, int64_t bs, bool shuffle, int workers)
{
    struct weft_dataloader_options o = weft_dataloader_options_default();
    o.batch_size = bs;
    o.shuffle = shuffle;
    o.num_workers = workers;
    o.seed = 1234;
    weft_dataloader *dl = weft_dataloader_new(ds, &o);
    tu_assert_no_error();
    cr_assert_not_null(dl);
    return dl;
}

/* The labels (= sample indices) of one epoch in the order handed out; returns count. */
static int64_t epoch_labels(weft_dataloader *dl, int64_t epoch, int64_t *out, int64_t cap)
{
    cr_assert_eq(weft_dataloader_epoch(dl, epoch), 0);
    int64_t n = 0;
    weft_tensor *f[2];
    int rc;
    while ((rc = weft_dataloader_next(dl, f)) == 1) {
        int64_t b = weft_tensor_size(f[1], 0);
        cr_assert_leq(n + b, cap);
        double v[256];
        cr_assert_leq(b, 256);
        tu_read(f[1], v);
        for (int64_t k = 0; k < b; k++)
            out[n++] = (int64_t)v[k];
        weft_tensor_release(f[0]);
        weft_tensor_release(f[1]);
    }
    tu_assert_no_error();
    cr_assert_eq(rc, 0);
    return n;
}

Test(dataloader, len_and_batch_sizes_follow_batch_size_and_drop_last)
{
    weft_dataset *ds = open_seq(10, -1, 0);
    for (int drop = 0; drop < 2; drop++) {
        struct weft_dataloader_options o = weft_dataloader_options_default();
        o.batch_size = 3;
        o.drop_last = drop;
        weft_dataloader *dl = weft_dataloader_new(ds, &o);
        cr_assert_eq(weft_dataloader_len(dl), drop ? 3 : 4);
        int64_t sizes[] = {3, 3, 3, 1};
        weft_tensor *f[2];
        for (int b = 0; b < (drop ? 3 : 4); b++) {
            cr_assert_eq(weft_dataloader_next(dl, f), 1);
            tu_assert_shape(f[0], 4, (int64_t[]){sizes[b], 3, 2, 2});
            tu_assert_shape(f[1], 1, (int64_t[]){sizes[b]});
            cr_assert_eq(f[0]->dtype, WEFT_U8);
            cr_assert_eq(f[1]->dtype, WEFT_I32);
            cr_assert(weft_device_equal(f[0]->device, WEFT_CPU));
            weft_tensor_release(f[0]);
            weft_tensor_release(f[1]);
        }
        cr_assert_eq(weft_dataloader_next(dl, f), 0);
        cr_assert_eq(weft_dataloader_next(dl, f), 0);
        weft_dataloader_free(dl);
    }
    weft_dataset_close(ds);
}

Test(dataloader, batch_holds_the_reader_bytes_unshuffled)
{
    weft_dataset *ds = open_seq(5, -1, 0);
    weft_dataloader *dl = loader(ds, 2, false, 0);
    weft_tensor *f[2];
    cr_assert_eq(weft_dataloader_next(dl, f), 1); /* starts epoch 0 by itself */
    cr_assert_eq(weft_dataloader_num_fields(dl), 2);
    double img[24];
    tu_read(f[0], img);
    for (int k = 0; k < 2; k++)
        for (int e = 0; e < 12; e++)
            cr_assert_eq(img[k * 12 + e], (7 * k + e) % 251);
    weft_tensor_release(f[0]);
    weft_tensor_release(f[1]);
    weft_dataloader_free(dl);
    weft_dataset_close(ds);
}

Test(dataloader, every_sample_appears_exactly_once_per_epoch)
{
    weft_dataset *ds = open_seq(103, -1, 0);
    for (int workers = 0; workers <= 3; workers += 3) {
        weft_dataloader *dl = loader(ds, 8, true, workers);
        for (int64_t e = 0; e < 3; e++) {
            int64_t got[103];
            cr_assert_eq(epoch_labels(dl, e, got, 103), 103);
            int seen[103] = {0};
            for (int i = 0; i < 103; i++) {
                cr_assert(got[i] >= 0 && got[i] < 103);
                seen[got[i]]++;
            }
            for (int i = 0; i < 103; i++)
                cr_assert_eq(seen[i], 1, "sample %d seen %d times", i, seen[i]);
        }
        weft_dataloader_free(dl);
    }
    weft_dataset_close(ds);
}

Test(dataloader, shuffle_differs_per_epoch_and_not_with_the_number_of_workers)
{
    weft_dataset *ds = open_seq(64, -1, 200);
    int64_t order[3][2][64];
    int workers[] = {0, 1, 4};
    for (int w = 0; w < 3; w++) {
        weft_dataloader *dl = loader(ds, 5, true, workers[w]);
        for (int e = 0; e < 2; e++)
            cr_assert_eq(epoch_labels(dl, e, order[w][e], 64), 64);
        weft_dataloader_free(dl);
    }
    cr_assert(memcmp(order[0][0], order[0][1], sizeof order[0][0]) != 0);
    for (int w = 1; w < 3; w++)
        for (int e = 0; e < 2; e++)
            cr_assert(memcmp(order[0][e], order[w][e], sizeof order[0][e]) == 0,
                      "epoch %d differs with %d workers", e, workers[w]);
    /* Not the identity either. */
    int moved = 0;
    for (int i = 0; i < 64; i++)
        moved += order[0][0][i] != i;
    cr_assert_gt(moved, 32);
    weft_dataset_close(ds);
}

Test(dataloader, shuffle_is_the_documented_philox_fisher_yates)
{
    weft_dataset *ds = open_seq(37, -1, 0);
    weft_dataloader *dl = loader(ds, 37, true, 2);
    int64_t got[37], want[37];
    for (int64_t e = 0; e < 3; e++) {
        cr_assert_eq(epoch_labels(dl, e, got, 37), 37);
        for (int i = 0; i < 37; i++)
            want[i] = i;
        for (int64_t i = 36; i > 0; i--) {
            uint64_t r = weft_philox_u64(1234, (uint64_t)e << 40, (uint64_t)(36 - i));
            int64_t j = (int64_t)(r % (uint64_t)(i + 1)), t = want[i];
            want[i] = want[j];
            want[j] = t;
        }
        cr_assert(memcmp(got, want, sizeof got) == 0, "epoch %lld", (long long)e);
    }
    weft_dataloader_free(dl);
    weft_dataset_close(ds);
}

Test(dataloader, workers_hand_out_batches_in_order)
{
    weft_dataset *ds = open_seq(90, -1, 2000); /* batches finish out of order */
    struct weft_dataloader_options o = weft_dataloader_options_default();
    o.batch_size = 3;
    o.num_workers = 4;
    o.prefetch_factor = 1;
    weft_dataloader *dl = weft_dataloader_new(ds, &o);
    int64_t got[90];
    cr_assert_eq(epoch_labels(dl, 0, got, 90), 90);
    for (int i = 0; i < 90; i++)
        cr_assert_eq(got[i], i);
    weft_dataloader_free(dl);
    weft_dataset_close(ds);
}

Test(dataloader, normalisation_scales_u8_then_applies_mean_and_std_per_channel)
{
    weft_dataset *ds = open_seq(4, -1, 0);
    struct weft_dataloader_options o = weft_dataloader_options_default();
    o.batch_size = 4;
    o.num_workers = 2;
    double mean[3] = {0.5, 0.25, 0.0}, std[3] = {0.5, 2.0, 0.1};
    o.fields[0].nchannels = 3;
    memcpy(o.fields[0].mean, mean, sizeof mean);
    memcpy(o.fields[0].std, std, sizeof std);
    o.fields[1].convert = true;
    o.fields[1].dtype = WEFT_I64;
    weft_dataloader *dl = weft_dataloader_new(ds, &o);
    tu_assert_no_error();
    weft_tensor *f[2];
    cr_assert_eq(weft_dataloader_next(dl, f), 1);
    cr_assert_eq(f[0]->dtype, WEFT_F32);
    cr_assert_eq(f[1]->dtype, WEFT_I64);
    double want[48];
    for (int k = 0; k < 4; k++)
        for (int e = 0; e < 12; e++)
            want[k * 12 + e] = (((7 * k + e) % 251) / 255.0 - mean[e / 4]) / std[e / 4];
    tu_assert_close(f[0], want, 48, 1e-6, 1e-6);
    tu_assert_close(f[1], (double[]){0, 1, 2, 3}, 4, 0, 0);
    weft_tensor_release(f[0]);
    weft_tensor_release(f[1]);
    weft_dataloader_free(dl);

    /* One mean/std for all channels, to float64. */
    o = weft_dataloader_options_default();
    o.batch_size = 2;
    o.fields[0].nchannels = 1;
    o.fields[0].mean[0] = 0.1307;
    o.fields[0].std[0] = 0.3081;
    o.fields[0].convert = true;
    o.fields[0].dtype = WEFT_F64;
    dl = weft_dataloader_new(ds, &o);
    cr_assert_eq(weft_dataloader_next(dl, f), 1);
    cr_assert_eq(f[0]->dtype, WEFT_F64);
    for (int k = 0; k < 2; k++)
        for (int e = 0; e < 12; e++)
            want[k * 12 + e] = (((7 * k + e) % 251) / 255.0 - 0.1307) / 0.3081;
    tu_assert_close(f[0], want, 24, 1e-12, 1e-12);
    weft_tensor_release(f[0]);
    weft_tensor_release(f[1]);
    weft_dataloader_free(dl);
    weft_dataset_close(ds);
}

Test(dataloader, plain_dtype_conversion_without_normalisation)
{
    weft_dataset *ds = open_seq(3, -1, 0);
    struct weft_dataloader_options o = weft_dataloader_options_default();
    o.batch_size = 3;
    o.fields[0].convert = true;
    o.fields[0].dtype = WEFT_F16;
    weft_dataloader *dl = weft_dataloader_new(ds, &o);
    weft_tensor *f[2];
    cr_assert_eq(weft_dataloader_next(dl, f), 1);
    cr_assert_eq(f[0]->dtype, WEFT_F16);
    double want[36];
    for (int k = 0; k < 3; k++)
        for (int e = 0; e < 12; e++)
            want[k * 12 + e] = (7 * k + e) % 251;
    tu_assert_close(f[0], want, 36, 0, 0);
    weft_tensor_release(f[0]);
    weft_tensor_release(f[1]);
    weft_dataloader_free(dl);
    weft_dataset_close(ds);
}

Test(dataloader, pin_memory_on_cpu_falls_back_to_ordinary_buffers)
{
    weft_dataset *ds = open_seq(20, -1, 0);
    struct weft_dataloader_options o = weft_dataloader_options_default();
    o.batch_size = 6;
    o.num_workers = 2;
    o.pin_memory = true;
    weft_dataloader *dl = weft_dataloader_new(ds, &o);
    tu_assert_no_error();
    int64_t got[20];
    cr_assert_eq(epoch_labels(dl, 0, got, 20), 20);
    for (int i = 0; i < 20; i++)
        cr_assert_eq(got[i], i);
    weft_dataloader_free(dl);
    weft_dataset_close(ds);
}

Test(dataloader, tensors_outlive_the_loader_and_scopes_own_them)
{
    weft_dataset *ds = open_seq(8, -1, 0);
    weft_dataloader *dl = loader(ds, 4, false, 2);
    weft_tensor *f[2];
    weft_scope_push();
    cr_assert_eq(weft_dataloader_next(dl, f), 1); /* recorded in the scope */
    weft_tensor *keep = weft_tensor_retain(f[1]);
    weft_scope_pop();
    weft_dataloader_free(dl);
    weft_dataset_close(ds);
    tu_assert_close(keep, (double[]){0, 1, 2, 3}, 4, 0, 0);
    weft_tensor_release(keep);
}

static void check_failure(int workers)
{
    weft_dataset *ds = open_seq(20, 9, 0);
    weft_dataloader *dl = loader(ds, 4, false, workers);
    weft_tensor *f[2] = {NULL, NULL};
    for (int b = 0; b < 2; b++) {
        cr_assert_eq(weft_dataloader_next(dl, f), 1);
        weft_tensor_release(f[0]);
        weft_tensor_release(f[1]);
    }
    f[0] = f[1] = NULL;
    /* Batch 2 holds sample 9: the reader's code and message, and again on retry. */
    for (int again = 0; again < 2; again++) {
        cr_assert_eq(weft_dataloader_next(dl, f), WEFT_ERR_IO);
        tu_assert_error(WEFT_ERR_IO, "lt_seq.bin: sample 9 is corrupt at byte 144");
        cr_assert_null(f[0]);
    }
    /* A new epoch starts over. */
    cr_assert_eq(weft_dataloader_epoch(dl, 1), 0);
    cr_assert_eq(weft_dataloader_next(dl, f), 1);
    weft_tensor_release(f[0]);
    weft_tensor_release(f[1]);
    weft_dataloader_free(dl);
    weft_dataset_close(ds);
}

Test(dataloader, reader_errors_surface_from_next_with_the_readers_message)
{
    check_failure(0);
    check_failure(3);
}

Test(dataloader, free_mid_epoch_joins_busy_workers)
{
    weft_dataset *ds = open_seq(400, -1, 3000);
    for (int round = 0; round < 3; round++) {
        weft_dataloader *dl = loader(ds, 4, true, 4);
        weft_tensor *f[2];
        if (round > 0) {
            cr_assert_eq(weft_dataloader_next(dl, f), 1);
            weft_tensor_release(f[0]);
            weft_tensor_release(f[1]);
        }
        if (round == 2)
            cr_assert_eq(weft_dataloader_epoch(dl, 5), 0);
        weft_dataloader_free(dl); /* workers are mid-read */
    }
    weft_dataset_close(ds);
}

Test(dataloader, a_new_epoch_abandons_the_current_one)
{
    weft_dataset *ds = open_seq(30, -1, 100);
    weft_dataloader *dl = loader(ds, 4, true, 2);
    weft_tensor *f[2];
    cr_assert_eq(weft_dataloader_epoch(dl, 0), 0);
    cr_assert_eq(weft_dataloader_next(dl, f), 1);
    weft_tensor_release(f[0]);
    weft_tensor_release(f[1]);
    int64_t got[30];
    cr_assert_eq(epoch_labels(dl, 1, got, 30), 30);
    weft_dataloader_free(dl);
    weft_dataset_close(ds);
}

Test(dataloader, option_errors_use_pytorchs_words)
{
    weft_dataset *ds = open_seq(4, -1, 0);
    struct weft_dataloader_options o = weft_dataloader_options_default();
    o.batch_size = 0;
    cr_assert_null(weft_dataloader_new(ds, &o));
    tu_assert_error(WEFT_ERR_VALUE,
                    "batch_size should be a positive integer value, but got batch_size=0");
    o.batch_size = INT64_C(1000000000000000000); /* its bytes would not fit an int64 */
    cr_assert_null(weft_dataloader_new(ds, &o));
    tu_assert_error(WEFT_ERR_VALUE, "batch_size should be at most 2147483647 (2^31 - 1), but got "
                                    "batch_size=1000000000000000000");
    o = weft_dataloader_options_default();
    o.num_workers = -1;
    cr_assert_null(weft_dataloader_new(ds, &o));
    tu_assert_error(WEFT_ERR_VALUE, "num_workers option should be non-negative");
    o = weft_dataloader_options_default();
    o.num_workers = 2;
    o.prefetch_factor = 0;
    cr_assert_null(weft_dataloader_new(ds, &o));
    tu_assert_error(WEFT_ERR_VALUE, "but got prefetch_factor=0");
    o = weft_dataloader_options_default();
    o.fields[0].nchannels = 2;
    o.fields[0].std[0] = o.fields[0].std[1] = 1;
    cr_assert_null(weft_dataloader_new(ds, &o));
    tu_assert_error(WEFT_ERR_VALUE, "field 'image' has 3 channels (its sample's first dim), but "
                                    "2 mean/std values were given; expected 1 or 3");
    o = weft_dataloader_options_default();
    o.fields[0].nchannels = 1;
    o.fields[0].std[0] = 0;
    cr_assert_null(weft_dataloader_new(ds, &o));
    tu_assert_error(WEFT_ERR_VALUE, "std must be finite and > 0");
    o = weft_dataloader_options_default();
    o.fields[0].nchannels = 1;
    o.fields[0].std[0] = 1;
    o.fields[0].convert = true;
    o.fields[0].dtype = WEFT_I32;
    cr_assert_null(weft_dataloader_new(ds, &o));
    tu_assert_error(WEFT_ERR_VALUE, "field 'image' is normalised, so its dtype must be floating, "
                                    "got int32");
    o = weft_dataloader_options_default();
    o.fields[2].convert = true;
    cr_assert_null(weft_dataloader_new(ds, &o));
    tu_assert_error(WEFT_ERR_VALUE, "options for field 2, but dataset [data] has 2 fields");
    cr_assert_eq(weft_dataloader_next(NULL, NULL), WEFT_ERR_VALUE);
    tu_assert_error(WEFT_ERR_VALUE, "loader and fields must be set");
    cr_assert_eq(weft_dataloader_len(NULL), -1);
    weft_dataloader_free(NULL);
    weft_dataset_close(ds);
}

Test(dataloader, config_keys_set_the_options)
{
    weft_dataset *ds = open_seq(10, -1, 0);
    struct weft_config *cfg = cfg_of("[loader]\nbatch_size = 4\nshuffle = yes\ndrop_last = true\n"
                                     "workers = 2\nprefetch = 3\npin_memory = on\nseed = 77\n"
                                     "mean = 0.5, 0.4, 0.3\nstd = 0.2,0.2 , 0.25\n");
    weft_dataloader *dl = weft_dataloader_from_config(ds, cfg, "loader", WEFT_CPU);
    tu_assert_no_error();
    cr_assert_not_null(dl);
    cr_assert_eq(weft_config_check_unknown(cfg), 0);
    const struct weft_dataloader_options *o = weft_dataloader_options(dl);
    cr_assert_eq(o->batch_size, 4);
    cr_assert(o->shuffle && o->drop_last && o->pin_memory);
    cr_assert_eq(o->num_workers, 2);
    cr_assert_eq(o->prefetch_factor, 3);
    cr_assert_eq(o->seed, 77);
    cr_assert_eq(o->fields[0].nchannels, 3);
    cr_assert_float_eq(o->fields[0].mean[1], 0.4, 1e-15);
    cr_assert_float_eq(o->fields[0].std[2], 0.25, 1e-15);
    cr_assert(o->fields[1].convert && o->fields[1].dtype == WEFT_I64); /* labels */
    cr_assert_eq(weft_dataloader_len(dl), 2);
    weft_tensor *f[2];
    cr_assert_eq(weft_dataloader_next(dl, f), 1);
    cr_assert_eq(f[0]->dtype, WEFT_F32);
    cr_assert_eq(f[1]->dtype, WEFT_I64);
    weft_tensor_release(f[0]);
    weft_tensor_release(f[1]);
    weft_dataloader_free(dl);
    weft_config_free(cfg);

    cfg = cfg_of("[loader]\n");
    dl = weft_dataloader_from_config(ds, cfg, "loader", WEFT_CPU);
    o = weft_dataloader_options(dl);
    cr_assert(o->batch_size == 1 && !o->shuffle && !o->drop_last && o->num_workers == 0 &&
              o->prefetch_factor == 2 && !o->pin_memory && o->seed == 0 &&
              o->fields[0].nchannels == 0);
    weft_dataloader_free(dl);
    weft_config_free(cfg);
    weft_dataset_close(ds);
}

static void config_error(const weft_dataset *ds, const char *ini, const char *message)
{
    struct weft_config *cfg = cfg_of(ini);
    cr_assert_null(weft_dataloader_from_config(ds, cfg, "loader", WEFT_CPU), "%s", ini);
    tu_assert_error(WEFT_ERR_CONFIG, message);
    weft_config_free(cfg);
}

Test(dataloader, config_errors_name_file_section_key_and_value)
{
    weft_dataset *ds = open_seq(10, -1, 0);
    config_error(ds, "[loader]\nbatch_size = 0\n",
                 "loader.ini: [loader] batch_size = '0': expected a positive integer");
    config_error(ds, "[loader]\nbatch_size = many\n",
                 "loader.ini: [loader] batch_size = 'many': expected an integer");
    config_error(ds, "[loader]\nworkers = -1\n",
                 "loader.ini: [loader] workers = '-1': expected a number of worker threads");
    config_error(ds, "[loader]\nprefetch = 0\n",
                 "loader.ini: [loader] prefetch = '0': expected a positive integer");
    config_error(ds, "[loader]\nseed = -3\n",
                 "loader.ini: [loader] seed = '-3': expected a non-negative integer");
    config_error(ds, "[loader]\nshuffle = maybe\n", "loader.ini: [loader] shuffle = 'maybe'");
    config_error(ds, "[loader]\nmean = 0.5\n",
                 "loader.ini: [loader] mean is set but std is not: give both");
    config_error(ds, "[loader]\nstd = 0.5\n",
                 "loader.ini: [loader] std is set but mean is not: give both");
    config_error(ds, "[loader]\nmean = 0.5, x\nstd = 1\n",
                 "loader.ini: [loader] mean = '0.5, x': expected a number or up to 16 "
                 "comma-separated numbers (one per channel)");
    config_error(ds, "[loader]\nmean = 0.5, 0.5\nstd = 1\n",
                 "loader.ini: [loader] mean has 2 value(s) but std has 1");
    config_error(ds, "[loader]\nmean = 0.5\nstd = 0\n",
                 "loader.ini: [loader] std = '0': every value must be > 0");
    config_error(ds, "[loader]\nmean = 0.5, 0.5\nstd = 1, 1\n",
                 "loader.ini: [loader] mean = '0.5, 0.5': 2 values for field 'image' of sample "
                 "shape [3, 2, 2]; expected 1 or 3 (one per channel)");
    weft_dataset_close(ds);
}

Test(dataloader, synthetic_reader_batches_match_direct_reads)
{
    struct weft_config *cfg = cfg_of("[data]\nreader = synthetic\nkind = blobs\nsamples = 50\n"
                                     "features = 3\nclasses = 4\nseed = 9\n"
                                     "[loader]\nbatch_size = 16\nworkers = 2\nshuffle = true\n");
    weft_dataset *ds = weft_dataset_open(weft_config_options(cfg, "data"));
    tu_assert_no_error();
    cr_assert_not_null(ds);
    weft_dataloader *dl = weft_dataloader_from_config(ds, cfg, "loader", WEFT_CPU);
    tu_assert_no_error();
    int fx = weft_dataset_field_index(ds, "features"), fl = weft_dataset_field_index(ds, "label");
    cr_assert(fx >= 0 && fl >= 0);
    cr_assert_eq(weft_dataloader_len(dl), 4);
    weft_tensor *f[WEFT_DATASET_MAX_FIELDS];
    int64_t total = 0;
    while (weft_dataloader_next(dl, f) == 1) {
        int64_t b = weft_tensor_size(f[fx], 0);
        cr_assert_eq(f[fl]->dtype, WEFT_I64);
        double feats[16 * 3], labels[16];
        tu_read(f[fx], feats);
        tu_read(f[fl], labels);
        for (int64_t k = 0; k < b; k++) {
            /* Sample i has label i % classes; its features are what read() gives. */
            int64_t found = -1;
            for (int64_t i = (int64_t)labels[k]; i < 50 && found < 0; i += 4) {
                float x[3];
                int64_t lab;
                void *bufs[2];
                bufs[fx] = x;
                bufs[fl] = &lab;
                cr_assert_eq(weft_dataset_read(ds, 1, &i, bufs), 0);
                if (x[0] == (float)feats[k * 3] && x[1] == (float)feats[k * 3 + 1] &&
                    x[2] == (float)feats[k * 3 + 2])
                    found = i;
            }
            cr_assert_geq(found, 0);
        }
        total += b;
        for (int i = 0; i < weft_dataloader_num_fields(dl); i++)
            weft_tensor_release(f[i]);
    }
    tu_assert_no_error();
    cr_assert_eq(total, 50);
    weft_dataloader_free(dl);
    weft_dataset_close(ds);
    weft_config_free(cfg);
}

/* ---- the side queue: a fake device whose memory is host memory -------------------------
 * "sidedev" logs which buffers its side copies wrote and when the device last waited, so
 * the tests can check that a staged batch's copies are waited for before the batch is
 * handed out or its memory freed. */
#define SIDE_LOG 64
static struct { const void *dst; int seq; } side_log[SIDE_LOG];
static int side_copies, side_wait_seq, side_freed_unwaited;

static int side_count(void *context) { return 1; }
static void *side_alloc(void *context, int index, size_t n) { (void)index; return malloc(n ? n : 1); }
static void *side_pin(void *context, size_t n) { return malloc(n ? n : 1); }
static void side_unpin(void *context, void *p, size_t n) { (void)n; free(p); }

/* The side copy that last wrote p and has not been waited for, or -1. */
static int side_unwaited(const void *p)
{
    for (int i = side_copies < SIDE_LOG ? side_copies - 1 : SIDE_LOG - 1; i >= 0; i--)
        if (side_log[i].dst == p)
            return side_log[i].seq > side_wait_seq ? side_log[i].seq : -1;
    return -1;
}

static void side_free(void *context, int index, void *p, size_t n)
{
    (void)index;
    (void)n;
    side_freed_unwaited += side_unwaited(p) >= 0;
    for (int i = 0; i < SIDE_LOG; i++)
        if (side_log[i].dst == p)
            side_log[i].dst = NULL; /* malloc may hand the address out again */
    free(p);
}

static int side_copy(void *context, weft_tensor *dst, const weft_tensor *src, bool non_blocking)
{
    (void)non_blocking;
    memcpy(weft_tensor_data(dst), weft_tensor_data(src),
           (size_t)weft_tensor_numel(src) * weft_tensor_itemsize(src));
    return 0;
}

static int side_copy_side(void *context, weft_tensor *dst, const weft_tensor *src)
{
    cr_assert_lt(side_copies, SIDE_LOG);
    side_log[side_copies].dst = dst->storage->data;
    side_log[side_copies].seq = side_copies + 1;
    side_copies++;
    return side_copy(context, dst, src, true);
}

static int side_wait(void *context, int index)
{
    (void)index;
    side_wait_seq = side_copies;
    return 0;
}

static const struct weft_backend side_backend = {
    .base = WEFT_VTABLE(WEFT_KIND_BACKEND, "sidedev", struct weft_backend),
    .device_count = side_count,
    .alloc = side_alloc,
    .free = side_free,
    .copy = side_copy,
    .host_alloc_pinned = side_pin,
    .host_free_pinned = side_unpin,
    .copy_side = side_copy_side,
    .wait_side = side_wait,
};

static weft_dataloader *side_loader(weft_dataset *ds, int batch)
{
    int type = weft_register(&side_backend);
    cr_assert_geq(type, 0);
    memset(side_log, 0, sizeof side_log);
    side_copies = side_wait_seq = side_freed_unwaited = 0;
    struct weft_dataloader_options o = weft_dataloader_options_default();
    o.batch_size = batch;
    o.num_workers = 1;
    o.prefetch_factor = 4;
    o.pin_memory = true;
    o.device = (weft_device){type, 0};
    weft_dataloader *dl = weft_dataloader_new(ds, &o);
    tu_assert_no_error();
    return dl;
}

/* Lets the worker read samples [0, n) (bounded, a guard against a hang, not a timing
 * assumption: the assertions hold whether or not a batch gets staged), so that the loader
 * has the next batch ready to stage when the current one is handed out. */
static void side_let_worker_read(int64_t n)
{
    for (int i = 0; i < 2000 && __atomic_load_n(&seq_samples_read, __ATOMIC_ACQUIRE) < n; i++)
        usleep(1000);
    usleep(5000);
}

Test(dataloader, staged_batches_go_through_the_side_queue_and_are_waited_for)
{
    weft_dataset *ds = open_seq(20, -1, 0);
    weft_dataloader *dl = side_loader(ds, 4);
    __atomic_store_n(&seq_samples_read, 0, __ATOMIC_RELEASE);
    cr_assert_eq(weft_dataloader_epoch(dl, 0), 0);
    weft_tensor *f[2];
    int64_t seen = 0;
    side_let_worker_read(8);
    while (weft_dataloader_next(dl, f) == 1) {
        for (int k = 0; k < 2; k++)
            cr_assert_eq(side_unwaited(f[k]->storage->data), -1,
                         "batch %lld field %d was handed out before its side copy was waited for",
                         (long long)(seen / 4), k);
        int32_t *labels = weft_tensor_data(f[1]);
        for (int64_t k = 0; k < 4; k++)
            cr_assert_eq(labels[k], seen + k);
        seen += 4;
        weft_tensor_release(f[0]);
        weft_tensor_release(f[1]);
        side_let_worker_read(seen + 8 < 20 ? seen + 8 : 20);
    }
    tu_assert_no_error();
    cr_assert_eq(seen, 20);
    cr_assert_geq(side_copies, 2, "staged batches were copied on the side queue (%d copies)",
                  side_copies);

    /* A batch staged when the next epoch starts is dropped: waited for, then freed. */
    side_let_worker_read(28);
    cr_assert_eq(weft_dataloader_epoch(dl, 1), 0);
    cr_assert_eq(weft_dataloader_next(dl, f), 1);
    weft_tensor_release(f[0]);
    weft_tensor_release(f[1]);
    side_let_worker_read(32);
    cr_assert_eq(weft_dataloader_epoch(dl, 2), 0);
    weft_dataloader_free(dl);
    weft_dataset_close(ds);
    cr_assert_eq(side_freed_unwaited, 0, "device memory was freed under a pending side copy");
}

/* ---- sharding: PyTorch's DistributedSampler under the batch sampler ----------------------
 * The reference is the unsharded loader's own order (labels = sample indices, same seed and
 * epoch), padded by repeating it from its start and strided by R from the rank, exactly as
 * DistributedSampler.__iter__ does; hard-coded shards pin the padding rule itself. */

static weft_dataloader *shard_loader(const weft_dataset *ds, int64_t bs, bool shuffle,
                                     int workers, int replicas, int rank, bool drop_last)
{
    struct weft_dataloader_options o = weft_dataloader_options_default();
    o.batch_size = bs;
    o.shuffle = shuffle;
    o.num_workers = workers;
    o.seed = 1234;
    o.num_replicas = replicas;
    o.rank = rank;
    o.drop_last = drop_last;
    weft_dataloader *dl = weft_dataloader_new(ds, &o);
    tu_assert_no_error();
    cr_assert_not_null(dl);
    return dl;
}

/* Rank `rank`'s labels over `epoch`, with the batch sizes checked against bs. */
static int64_t shard_labels(const weft_dataset *ds, int64_t bs, bool shuffle, int workers,
                            int replicas, int rank, int64_t epoch, int64_t *out, int64_t cap)
{
    weft_dataloader *dl = shard_loader(ds, bs, shuffle, workers, replicas, rank, false);
    int64_t got = epoch_labels(dl, epoch, out, cap);
    weft_dataloader_free(dl);
    return got;
}

Test(dataloader, default_options_are_not_sharded)
{
    struct weft_dataloader_options o = weft_dataloader_options_default();
    cr_assert_eq(o.num_replicas, 1);
    cr_assert_eq(o.rank, 0);
    weft_dataset *ds = open_seq(10, -1, 0);
    struct weft_config *cfg = cfg_of("[loader]\nbatch_size = 3\nshuffle = true\n");
    weft_dataloader *dl = weft_dataloader_from_config(ds, cfg, "loader", WEFT_CPU);
    tu_assert_no_error();
    cr_assert_eq(weft_dataloader_options(dl)->num_replicas, 1);
    cr_assert_eq(weft_dataloader_options(dl)->rank, 0);
    cr_assert_eq(weft_dataloader_len(dl), 4);
    cr_assert_eq(weft_config_check_unknown(cfg), 0);
    weft_dataloader_free(dl);
    weft_config_free(cfg);
    weft_dataset_close(ds);
}

Test(dataloader, unshuffled_shards_pad_by_repeating_the_start_as_pytorch_does)
{
    /* torch DistributedSampler(range(n), num_replicas=R, rank=r, shuffle=False). */
    static const struct {
        int64_t n;
        int replicas;
        int64_t want[8][4]; /* per rank */
        int64_t per_rank;
    } cases[] = {
        {10, 4, {{0, 4, 8}, {1, 5, 9}, {2, 6, 0}, {3, 7, 1}}, 3},
        {11, 3, {{0, 3, 6, 9}, {1, 4, 7, 10}, {2, 5, 8, 0}}, 4},
        {7, 2, {{0, 2, 4, 6}, {1, 3, 5, 0}}, 4},
        {3, 4, {{0}, {1}, {2}, {0}}, 1},
        {1, 4, {{0}, {0}, {0}, {0}}, 1},
        {3, 8, {{0}, {1}, {2}, {0}, {1}, {2}, {0}, {1}}, 1}, /* padding 5 > n: wraps twice */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        weft_dataset *ds = open_seq(cases[c].n, -1, 0);
        for (int r = 0; r < cases[c].replicas; r++) {
            int64_t got[16];
            int64_t m = shard_labels(ds, 2, false, 0, cases[c].replicas, r, 0, got, 16);
            cr_assert_eq(m, cases[c].per_rank, "n=%lld R=%d rank %d: %lld samples",
                         (long long)cases[c].n, cases[c].replicas, r, (long long)m);
            for (int64_t i = 0; i < m; i++)
                cr_assert_eq(got[i], cases[c].want[r][i], "n=%lld R=%d rank %d [%lld]: %lld",
                             (long long)cases[c].n, cases[c].replicas, r, (long long)i,
                             (long long)got[i]);
        }
        weft_dataset_close(ds);
    }
}

Test(dataloader, shards_are_equal_disjoint_but_for_padding_and_cover_the_permutation)
{
    static const int64_t sizes[] = {10, 11, 7, 1, 3};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        int64_t n = sizes[s];
        weft_dataset *ds = open_seq(n, -1, 0);
        for (int shuffle = 0; shuffle < 2; shuffle++)
            for (int64_t epoch = 0; epoch < 2; epoch++) {
                /* The documented order of this epoch, from the unsharded loader. */
                int64_t order[16];
                cr_assert_eq(shard_labels(ds, 4, shuffle, 0, 1, 0, epoch, order, 16), n);
                for (int R = 2; R <= 4; R++) {
                    int64_t per = (n + R - 1) / R, total = per * R;
                    int seen[16] = {0};
                    for (int r = 0; r < R; r++) {
                        int64_t got[16];
                        cr_assert_eq(shard_labels(ds, 2, shuffle, 0, R, r, epoch, got, 16), per,
                                     "n=%lld R=%d rank %d", (long long)n, R, r);
                        for (int64_t i = 0; i < per; i++) {
                            int64_t want = order[(r + i * R) % n];
                            cr_assert_eq(got[i], want,
                                         "n=%lld R=%d rank %d shuffle %d epoch %lld [%lld]: "
                                         "%lld, expected %lld",
                                         (long long)n, R, r, shuffle, (long long)epoch,
                                         (long long)i, (long long)got[i], (long long)want);
                            seen[got[i]]++;
                        }
                    }
                    /* Every sample once, and the first total - n of the order once more. */
                    for (int64_t j = 0; j < n; j++) {
                        int extra = 0;
                        for (int64_t p = n; p < total; p++)
                            extra += p % n == j;
                        cr_assert_eq(seen[order[j]], 1 + extra,
                                     "n=%lld R=%d: sample %lld seen %d times, expected %d",
                                     (long long)n, R, (long long)order[j], seen[order[j]],
                                     1 + extra);
                    }
                }
            }
        weft_dataset_close(ds);
    }
}

Test(dataloader, a_shard_follows_seed_and_epoch_only)
{
    weft_dataset *ds = open_seq(103, -1, 300); /* batches finish out of order */
    enum { R = 3, PER = 35 };
    for (int r = 0; r < R; r++) {
        int64_t a[2][PER], b[2][PER], w[2][PER], pin[2][PER];
        for (int64_t e = 0; e < 2; e++) {
            cr_assert_eq(shard_labels(ds, 4, true, 0, R, r, e, a[e], PER), PER);
            cr_assert_eq(shard_labels(ds, 4, true, 0, R, r, e, b[e], PER), PER);
            cr_assert_eq(shard_labels(ds, 4, true, 2, R, r, e, w[e], PER), PER);
            /* Workers, prefetching and pinning (which falls back on the cpu) together. */
            struct weft_dataloader_options o = weft_dataloader_options_default();
            o.batch_size = 4;
            o.shuffle = true;
            o.seed = 1234;
            o.num_workers = 3;
            o.prefetch_factor = 3;
            o.pin_memory = true;
            o.num_replicas = R;
            o.rank = r;
            weft_dataloader *dl = weft_dataloader_new(ds, &o);
            tu_assert_no_error();
            cr_assert_eq(epoch_labels(dl, e, pin[e], PER), PER);
            weft_dataloader_free(dl);
            cr_assert(memcmp(a[e], b[e], sizeof a[e]) == 0, "rank %d epoch %lld: two loaders "
                      "with one seed and epoch differ", r, (long long)e);
            cr_assert(memcmp(a[e], w[e], sizeof a[e]) == 0, "rank %d epoch %lld: 2 workers "
                      "give another shard than 0", r, (long long)e);
            cr_assert(memcmp(a[e], pin[e], sizeof a[e]) == 0, "rank %d epoch %lld: pinned "
                      "prefetching workers give another shard", r, (long long)e);
        }
        cr_assert(memcmp(a[0], a[1], sizeof a[0]) != 0, "rank %d: epochs 0 and 1 give one "
                  "shard", r);
        /* Another seed, another shard. */
        struct weft_dataloader_options o = weft_dataloader_options_default();
        o.batch_size = 4;
        o.shuffle = true;
        o.seed = 1235;
        o.num_replicas = R;
        o.rank = r;
        weft_dataloader *dl = weft_dataloader_new(ds, &o);
        int64_t other[PER];
        cr_assert_eq(epoch_labels(dl, 0, other, PER), PER);
        cr_assert(memcmp(a[0], other, sizeof other) != 0);
        weft_dataloader_free(dl);
    }
    weft_dataset_close(ds);
}

Test(dataloader, len_and_drop_last_apply_to_the_shard)
{
    /* n = 11, R = 3: num_samples 4 per rank; batch_size 3 gives [3, 1], or [3] with
     * drop_last (the unsharded loader would give 4 or 3 batches). */
    weft_dataset *ds = open_seq(11, -1, 0);
    for (int r = 0; r < 3; r++)
        for (int drop = 0; drop < 2; drop++)
            for (int workers = 0; workers <= 2; workers += 2) {
                weft_dataloader *dl = shard_loader(ds, 3, true, workers, 3, r, drop);
                cr_assert_eq(weft_dataloader_len(dl), drop ? 1 : 2);
                cr_assert_eq(weft_dataloader_epoch(dl, 1), 0);
                int64_t sizes[] = {3, 1}, b = 0;
                weft_tensor *f[2];
                int rc;
                while ((rc = weft_dataloader_next(dl, f)) == 1) {
                    cr_assert_lt(b, drop ? 1 : 2);
                    cr_assert_eq(weft_tensor_size(f[1], 0), sizes[b], "rank %d batch %lld", r,
                                 (long long)b);
                    b++;
                    weft_tensor_release(f[0]);
                    weft_tensor_release(f[1]);
                }
                cr_assert_eq(rc, 0);
                cr_assert_eq(b, drop ? 1 : 2);
                weft_dataloader_free(dl);
            }
    /* R > n: one (padded) sample per rank, so drop_last with batch_size 2 leaves none. */
    weft_dataset *one = open_seq(1, -1, 0);
    weft_dataloader *dl = shard_loader(one, 2, false, 0, 4, 3, true);
    cr_assert_eq(weft_dataloader_len(dl), 0);
    weft_tensor *f[2];
    cr_assert_eq(weft_dataloader_next(dl, f), 0);
    weft_dataloader_free(dl);
    dl = shard_loader(one, 2, false, 0, 4, 3, false);
    cr_assert_eq(weft_dataloader_len(dl), 1);
    weft_dataloader_free(dl);
    weft_dataset_close(one);
    weft_dataset_close(ds);
}

Test(dataloader, bad_rank_or_num_replicas_use_pytorchs_words)
{
    weft_dataset *ds = open_seq(4, -1, 0);
    struct weft_dataloader_options o = weft_dataloader_options_default();
    o.num_replicas = 2;
    o.rank = 2;
    cr_assert_null(weft_dataloader_new(ds, &o));
    tu_assert_error(WEFT_ERR_VALUE, "Invalid rank 2, rank should be in the interval [0, 1]");
    o.rank = -1;
    cr_assert_null(weft_dataloader_new(ds, &o));
    tu_assert_error(WEFT_ERR_VALUE, "Invalid rank -1, rank should be in the interval [0, 1]");
    o.num_replicas = 0;
    o.rank = 0;
    cr_assert_null(weft_dataloader_new(ds, &o));
    tu_assert_error(WEFT_ERR_VALUE, "num_replicas should be a positive integer value (1 when not "
                                    "distributed), but got num_replicas=0");
    o.num_replicas = -3;
    cr_assert_null(weft_dataloader_new(ds, &o));
    tu_assert_error(WEFT_ERR_VALUE, "but got num_replicas=-3");
    o.num_replicas = 1;
    o.rank = 1;
    cr_assert_null(weft_dataloader_new(ds, &o));
    tu_assert_error(WEFT_ERR_VALUE, "Invalid rank 1, rank should be in the interval [0, 0]");
    weft_dataset_close(ds);
}

Test(dataloader, a_shard_copied_to_a_device_through_pinned_staging_is_the_same_shard)
{
    weft_dataset *ds = open_seq(40, -1, 0);
    int64_t want[14];
    cr_assert_eq(shard_labels(ds, 4, true, 0, 3, 2, 1, want, 14), 14);
    weft_dataloader *base = side_loader(ds, 4); /* registers sidedev; its options */
    struct weft_dataloader_options o = *weft_dataloader_options(base);
    weft_dataloader_free(base);
    o.shuffle = true;
    o.seed = 1234;
    o.num_replicas = 3;
    o.rank = 2;
    weft_dataloader *dl = weft_dataloader_new(ds, &o);
    tu_assert_no_error();
    cr_assert_eq(weft_dataloader_len(dl), 4);
    cr_assert_eq(weft_dataloader_epoch(dl, 1), 0);
    weft_tensor *f[2];
    int64_t n = 0;
    while (weft_dataloader_next(dl, f) == 1) {
        cr_assert_eq(f[1]->device.type, o.device.type);
        const int32_t *labels = weft_tensor_data(f[1]); /* sidedev memory is host memory */
        for (int64_t k = 0; k < weft_tensor_size(f[1], 0); k++, n++) {
            cr_assert_lt(n, 14);
            cr_assert_eq(labels[k], want[n], "sample %lld: %d, expected %lld", (long long)n,
                         labels[k], (long long)want[n]);
        }
        weft_tensor_release(f[0]);
        weft_tensor_release(f[1]);
    }
    tu_assert_no_error();
    cr_assert_eq(n, 14);
    weft_dataloader_free(dl);
    weft_dataset_close(ds);
}
