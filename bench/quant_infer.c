/* bench/quant_infer.c: weft-infer, inference throughput and accuracy of checkpoints of one
 * config (a float32 one and its int8 forms), timed in turns in one process so a drift of
 * the machine lands on all of them. bench/quant-throughput.sh runs it against PyTorch.
 *
 *   weft-infer CONFIG CKPT [CKPT ...] [--batch B] [--passes P] [--data SECTION]
 *              [--max-batches N] [--set section.key=value ...]
 *
 * The evaluation set ([data.test], else [data.val], or --data) is read once, in order,
 * with [data]'s normalisation, into batches of B (its first N with --max-batches); a pass is the model's forward over all
 * of them (eval mode, no autograd). Each checkpoint gets P passes, in turns with the
 * others after one warm-up pass each. Prints per checkpoint one line:
 *   "infer NAME batch B: median M min L max H samples/s accuracy A loss X"
 * samples/s counts tokens for a language model ([B, T] targets); accuracy is the argmax's
 * against the labels (NaN for a language model), loss the mean cross-entropy. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <weft.h>
#include <weft/checkpoint.h>
#include <weft/config.h>
#include <weft/dataloader.h>
#include <weft/dataset.h>
#include <weft/model.h>
#include <weft/models.h>
#include <weft/nn.h>
#include <weft/quant.h>
#include <weft/runtime.h>

#include "../apps/app_version.h"

#define MAX_CKPTS 8
#define MAX_PASSES 64

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void die(const char *what)
{
    fprintf(stderr, "weft-infer: %s: %s\n", what, weft_error_message());
    exit(1);
}

struct batches {
    int n;
    weft_tensor **x, **y; /* inputs and int64 targets */
    int64_t samples;      /* per pass: images, or tokens for [B, T] targets */
    bool sequence;
};

static void read_batches(struct weft_config *cfg, const char *section, int64_t batch,
                         int64_t max_batches, struct batches *b)
{
    weft_dataset *ds = weft_dataset_open(weft_config_options(cfg, section));
    weft_dataset *train = ds ? weft_dataset_open(weft_config_options(cfg, "data")) : NULL;
    /* [data]'s loader settings (normalisation) over the evaluation set */
    weft_dataloader *base = train ? weft_dataloader_from_config(ds, cfg, "data", WEFT_CPU) : NULL;
    if (!base)
        die(section);
    struct weft_dataloader_options o = *weft_dataloader_options(base);
    o.batch_size = batch;
    o.shuffle = false;
    o.drop_last = false;
    o.num_workers = 0;
    o.transforms_eval = true;
    weft_dataloader *dl = weft_dataloader_new(ds, &o);
    int label = weft_dataset_field_index(ds, "label");
    label = label >= 0 ? label : 1;
    if (!dl || weft_dataloader_epoch(dl, 0) != 0)
        die("the loader");
    int64_t nb = weft_dataloader_len(dl);
    nb = max_batches > 0 && max_batches < nb ? max_batches : nb;
    b->x = calloc((size_t)nb, sizeof *b->x);
    b->y = calloc((size_t)nb, sizeof *b->y);
    weft_tensor *fields[WEFT_DATASET_MAX_FIELDS];
    while (b->x && b->y && b->n < nb && weft_dataloader_next(dl, fields) > 0) {
        b->x[b->n] = fields[0];
        b->y[b->n] = weft_to_dtype(fields[label], WEFT_I64);
        for (int f = 1; f < weft_dataloader_num_fields(dl); f++)
            weft_tensor_release(fields[f]);
        b->sequence = b->y[b->n]->ndim == 2;
        b->samples += b->sequence ? weft_tensor_numel(b->y[b->n]) : b->y[b->n]->shape[0];
        b->n++;
    }
    if (weft_error_code() != WEFT_OK)
        die("reading the data");
    weft_dataloader_free(dl);
    weft_dataloader_free(base);
    weft_dataset_close(train);
    weft_dataset_close(ds);
}

static weft_module *load(struct weft_config *cfg, const char *path)
{
    weft_module *m = weft_models_register() == 0 ? weft_model_from_config(cfg) : NULL; /* gpt */
    struct weft_tensor_dict *d = NULL;
    struct weft_metadata *meta = NULL;
    if (!m || weft_safetensors_load(path, WEFT_CPU, &d, &meta) != 0)
        die(path);
    int rc = weft_quant_metadata_present(meta) ? weft_quant_load_state_dict(m, d, meta, path)
                                               : weft_module_load_state_dict(m, d, true);
    if (rc != 0)
        die(path);
    weft_module_train(m, false);
    weft_tensor_dict_free(d);
    weft_metadata_free(meta);
    return m;
}

/* One pass: seconds; the hits and loss sum when asked. */
static double pass(weft_module *m, const struct batches *b, int64_t *hits, double *loss)
{
    double t0 = now();
    for (int i = 0; i < b->n; i++) {
        weft_scope_push();
        weft_tensor *out = weft_module_forward(m, b->x[i]);
        if (!out)
            die("forward");
        if (hits) {
            const int64_t flat[2] = {-1, out->shape[out->ndim - 1]}, all = -1;
            weft_tensor *logits = weft_reshape(out, 2, flat), *y = weft_reshape(b->y[i], 1, &all);
            double h = 0, l = 0;
            if (weft_tensor_item(weft_sum(weft_eq(weft_argmax(logits, 1, false), y), 0, NULL, false),
                                 &h) != 0 ||
                weft_tensor_item(weft_cross_entropy(logits, y, NULL), &l) != 0)
                die("scoring");
            *hits += (int64_t)h;
            *loss += l * (double)y->shape[0];
        }
        weft_scope_pop();
    }
    return now() - t0;
}

int main(int argc, char **argv)
{
    const char *config = NULL, *ckpts[MAX_CKPTS], *section = NULL;
    int nckpt = 0, passes = 7;
    int64_t batch = 64, max_batches = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--version")) {
            app_print_version(stdout, "weft-infer");
            return 0;
        }
        if (!strcmp(argv[i], "--batch") && i + 1 < argc)
            batch = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--passes") && i + 1 < argc)
            passes = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--data") && i + 1 < argc)
            section = argv[++i];
        else if (!strcmp(argv[i], "--max-batches") && i + 1 < argc)
            max_batches = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--set") && i + 1 < argc)
            i++; /* applied below, once the config is loaded */
        else if (!config)
            config = argv[i];
        else if (nckpt < MAX_CKPTS)
            ckpts[nckpt++] = argv[i];
    }
    if (!config || nckpt == 0 || batch < 1 || passes < 1 || passes > MAX_PASSES ||
        max_batches < 0) {
        fprintf(stderr, "usage: weft-infer CONFIG CKPT [CKPT ...] [--batch B] [--passes P<=64] "
                        "[--data SECTION] [--max-batches N] [--set section.key=value ...]\n");
        return 2;
    }
    struct weft_config *cfg = weft_config_load(config);
    for (int i = 1; cfg && i + 1 < argc; i++)
        if (!strcmp(argv[i], "--set") && weft_config_set(cfg, argv[++i]) != 0)
            die(argv[i]);
    weft_device dev;
    if (!cfg || weft_runtime_init(cfg, &dev) != 0)
        die(config);
    if (!section)
        section = weft_config_has_section(cfg, "data.test") ? "data.test" : "data.val";
    struct batches b = {0};
    read_batches(cfg, section, batch, max_batches, &b);
    weft_module *models[MAX_CKPTS];
    int64_t hits[MAX_CKPTS] = {0};
    double loss[MAX_CKPTS] = {0}, seconds[MAX_CKPTS][MAX_PASSES];
    bool prev = weft_no_grad_begin();
    for (int k = 0; k < nckpt; k++) {
        models[k] = load(cfg, ckpts[k]);
        pass(models[k], &b, &hits[k], &loss[k]); /* warm-up, scored */
    }
    for (int p = 0; p < passes; p++)
        for (int k = 0; k < nckpt; k++)
            seconds[k][p] = pass(models[k], &b, NULL, NULL);
    weft_grad_mode_restore(prev);
    for (int k = 0; k < nckpt; k++) {
        qsort(seconds[k], (size_t)passes, sizeof(double), cmp_double);
        const double n = (double)b.samples;
        const double scored = b.sequence ? n : (double)b.samples;
        printf("infer %s batch %lld: median %.0f min %.0f max %.0f %s/s accuracy %.4f loss %.4f\n",
               ckpts[k], (long long)batch, n / seconds[k][passes / 2], n / seconds[k][passes - 1],
               n / seconds[k][0], b.sequence ? "tokens" : "images",
               b.sequence ? NAN : (double)hits[k] / scored, loss[k] / scored);
        weft_module_free(models[k]);
    }
    for (int i = 0; i < b.n; i++) {
        weft_tensor_release(b.x[i]);
        weft_tensor_release(b.y[i]);
    }
    free(b.x);
    free(b.y);
    weft_config_free(cfg);
    return 0;
}
