/* apps/train/train_predict.c: `weft-train eval` and `weft-train predict`, the two things a
 * PyTorch user does with a trained checkpoint besides resuming it: the metrics on a
 * held-out set (Lightning's trainer.test / trainer.validate), and the model's outputs for
 * every sample of a dataset, in order (trainer.predict), written where numpy or pandas
 * read them. Both build everything from the config as training does, so a checkpoint is
 * read into the same model its run trained. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train.h"

int train_pick_dataset(struct trainer *t, const char *section, weft_dataset **ds,
                const struct train_inputs **in, const char **name)
{
    const char *file = weft_config_name(t->cfg);
    if (!section)
        section = t->test_set ? "data.test" : t->val_set ? "data.val" : NULL;
    if (!section)
        return weft_error_set(WEFT_ERR_CONFIG, "%s: nothing to evaluate on: the config has no "
                                               "[data.test] section and no validation set; name "
                                               "a section with --data (e.g. --data data)",
                              file);
    *name = section;
    if (!strcmp(section, "data")) {
        *ds = t->train_all;
        *in = &t->inputs;
    } else if (!strcmp(section, "data.test") && t->test_set) {
        *ds = t->test_set;
        *in = &t->test_inputs;
    } else if (!strcmp(section, "data.val") && t->val_set) {
        *ds = t->val_set;
        *in = &t->val_inputs;
        if (!t->own_val)
            *name = "data.val (the validation_split of [data])";
    } else if (t->extra_set && !strcmp(section, weft_dataset_section(t->extra_set))) {
        *ds = t->extra_set;
        *in = &t->extra_inputs;
    } else {
        return weft_error_set(WEFT_ERR_CONFIG, "%s: --data %s: the config has no such dataset "
                                               "(expected data, data.val, data.test or another "
                                               "[data.*] section of the file)",
                              file, section);
    }
    return 0;
}

int train_eval_command(struct trainer *t, const char *section)
{
    weft_dataset *ds;
    const struct train_inputs *in;
    const char *name;
    struct eval_result r;
    int rc = train_pick_dataset(t, section, &ds, &in, &name);
    if (rc == 0 && in->target < 0)
        rc = weft_error_set(WEFT_ERR_CONFIG, "%s: [%s] has no target field: eval needs labels "
                                             "(predict writes outputs without them)",
                            weft_config_name(t->cfg), name);
    if (rc == 0)
        rc = train_evaluate(t, ds, in, 0, &r);
    if (rc != 0)
        return rc;
    printf("eval [%s]: loss %.4f", name, r.loss);
    if (!isnan(r.acc))
        printf("  accuracy %.2f%%", 100 * r.acc);
    printf("  (%lld samples)\n", (long long)r.samples);
    return 0;
}

/* ---- predict ---------------------------------------------------------------------------- */

/* The rows of predictions, float32, kept until the end (an NPY header gives the row count
 * first). */
struct table {
    float *v;
    int64_t rows, cols, cap;
    bool classes; /* a classifier: the CSV adds the argmax */
    bool probs;   /* v holds probabilities (a classifier's, or bce_with_logits' sigmoids) */
};

static int table_add(struct table *tb, const float *row)
{
    if ((tb->rows + 1) * tb->cols > tb->cap) {
        int64_t cap = tb->cap ? 2 * tb->cap : 1024 * tb->cols;
        float *p = realloc(tb->v, (size_t)cap * sizeof *p);
        if (!p)
            return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory for %lld "
                                                          "predictions",
                                  (long long)tb->rows + 1);
        tb->v = p;
        tb->cap = cap;
    }
    memcpy(tb->v + tb->rows * tb->cols, row, (size_t)tb->cols * sizeof *row);
    tb->rows++;
    return 0;
}

/* One sample's outputs [cols] made probabilities in place where the loss says how:
 * softmax for cross_entropy (logits), exp for nll (log-probabilities), the sigmoid for
 * bce_with_logits; regression outputs stay as they are. */
static void to_probabilities(const struct train_loss *loss, float *v, int64_t cols)
{
    if (loss->kind == LOSS_CROSS_ENTROPY) {
        float mx = -INFINITY;
        double sum = 0;
        for (int64_t c = 0; c < cols; c++)
            mx = fmaxf(mx, v[c]);
        for (int64_t c = 0; c < cols; c++)
            sum += (double)(v[c] = expf(v[c] - mx));
        for (int64_t c = 0; c < cols; c++)
            v[c] = (float)((double)v[c] / sum);
    } else if (loss->kind == LOSS_NLL) {
        for (int64_t c = 0; c < cols; c++)
            v[c] = expf(v[c]);
    } else if (loss->kind == LOSS_BCE_WITH_LOGITS) {
        for (int64_t c = 0; c < cols; c++)
            v[c] = 1.0f / (1.0f + expf(-v[c]));
    }
}

/* A batch's outputs [B, ...] as B rows of the table. */
static int add_batch(struct trainer *t, struct table *tb, weft_tensor *out)
{
    int64_t b = out->ndim ? out->shape[0] : 1;
    int64_t cols = b ? weft_tensor_numel(out) / b : 0;
    if (tb->cols == 0)
        tb->cols = cols;
    if (cols != tb->cols || cols == 0)
        return weft_error_set(WEFT_ERR_VALUE, "predict: the model gave %lld outputs per sample "
                                              "for one batch and %lld for another",
                              (long long)cols, (long long)tb->cols);
    weft_tensor *host = weft_contiguous(weft_to_dtype(weft_to_device(out, WEFT_CPU), WEFT_F32));
    if (!host)
        return weft_error_code();
    const float *p = weft_tensor_data(host);
    float *row = malloc((size_t)cols * sizeof *row);
    if (!row)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory for predictions");
    int rc = 0;
    for (int64_t i = 0; i < b && rc == 0; i++) {
        memcpy(row, p + i * cols, (size_t)cols * sizeof *row);
        if (tb->probs)
            to_probabilities(&t->loss, row, cols);
        rc = table_add(tb, row);
    }
    free(row);
    return rc;
}

/* The model's outputs for every sample of ds, in order, under no_grad in evaluation mode. */
static int run_model(struct trainer *t, weft_dataset *ds, const struct train_inputs *in,
                     struct table *tb)
{
    struct weft_dataloader_options o = *weft_dataloader_options(t->train_loader);
    o.shuffle = false;
    o.drop_last = false;
    o.num_replicas = 1;
    o.rank = 0;
    o.transforms_eval = true;
    /* unlabelled data has fewer fields than the training set the options were made for */
    for (int f = weft_dataset_num_fields(ds); f < WEFT_DATASET_MAX_FIELDS; f++)
        memset(&o.fields[f], 0, sizeof o.fields[f]);
    if (o.transforms_field >= weft_dataset_num_fields(ds))
        o.transforms = NULL;
    weft_dataloader *dl = weft_dataloader_new(ds, &o);
    if (!dl)
        return weft_error_code();
    weft_module_train(t->model, false);
    bool prev = weft_no_grad_begin();
    int rc = weft_dataloader_epoch(dl, 0);
    weft_tensor *fields[WEFT_DATASET_MAX_FIELDS];
    while (rc == 0) {
        int got = weft_dataloader_next(dl, fields);
        if (got <= 0) {
            rc = got < 0 ? got : 0;
            break;
        }
        rc = train_batch_scope(fields, weft_dataloader_num_fields(dl)) != 0 ? weft_error_code() : 0;
        weft_tensor *x = rc == 0 ? train_batch_input(in, fields, t->device) : NULL;
        weft_tensor *out = x ? weft_module_forward(t->model, x) : NULL;
        if (rc == 0)
            rc = out ? add_batch(t, tb, out) : weft_error_code();
        weft_scope_pop();
    }
    weft_grad_mode_restore(prev);
    weft_dataloader_free(dl);
    return rc;
}

/* NPY format 1.0: magic, version, a header dict padded with spaces to a multiple of 64
 * bytes and ended by '\n', then the little-endian float32 data in C order. */
static int write_npy(FILE *f, const struct table *tb)
{
    char dict[128];
    int n = snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': "
                                        "(%lld, %lld), }",
                     (long long)tb->rows, (long long)tb->cols);
    int total = 10 + n + 1, pad = (64 - total % 64) % 64;
    unsigned hlen = (unsigned)(n + pad + 1);
    fwrite("\x93NUMPY\x01\x00", 1, 8, f);
    fputc((int)(hlen & 0xff), f);
    fputc((int)(hlen >> 8), f);
    fprintf(f, "%s%*s\n", dict, pad, "");
    fwrite(tb->v, sizeof *tb->v, (size_t)(tb->rows * tb->cols), f);
    return 0;
}

/* CSV: index, then class and prob_0.. for a classifier, or output_0.. */
static int write_csv(FILE *f, const struct table *tb)
{
    fprintf(f, "index%s", tb->classes ? ",class" : "");
    for (int64_t c = 0; c < tb->cols; c++)
        fprintf(f, ",%s_%lld", tb->probs ? "prob" : "output", (long long)c);
    fputc('\n', f);
    for (int64_t r = 0; r < tb->rows; r++) {
        const float *v = tb->v + r * tb->cols;
        fprintf(f, "%lld", (long long)r);
        if (tb->classes) {
            int64_t best = 0;
            for (int64_t c = 1; c < tb->cols; c++)
                best = v[c] > v[best] ? c : best;
            fprintf(f, ",%lld", (long long)best);
        }
        for (int64_t c = 0; c < tb->cols; c++)
            fprintf(f, ",%.6g", (double)v[c]);
        fputc('\n', f);
    }
    return 0;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* Written to a temporary beside out, then renamed: a reader never sees half a file. */
static int write_table(const char *out, const struct table *tb, bool npy)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", out, (long)getpid());
    if (train_make_parent_dirs(out) != 0)
        return weft_error_code();
    FILE *f = fopen(tmp, "wb");
    if (!f)
        return weft_error_set(WEFT_ERR_IO, "--out %s: cannot create the file: %s", out,
                              strerror(errno));
    if (npy)
        write_npy(f, tb);
    else
        write_csv(f, tb);
    bool ok = !ferror(f);
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, out) != 0) {
        int rc = weft_error_set(WEFT_ERR_IO, "--out %s: cannot write the predictions: %s", out,
                                strerror(errno));
        unlink(tmp);
        return rc;
    }
    return 0;
}

int train_predict_command(struct trainer *t, const char *section, const char *out)
{
    bool npy = ends_with(out, ".npy");
    if (!npy && !ends_with(out, ".csv"))
        return weft_error_set(WEFT_ERR_CONFIG, "--out %s: expected a file name ending in .csv or "
                                               ".npy", out);
    if (t->sequence)
        return weft_error_set(WEFT_ERR_CONFIG, "predict writes one row per sample, and this model "
                                               "is a language model (an output per position): "
                                               "sample from it with weft-generate");
    weft_dataset *ds;
    const struct train_inputs *in;
    const char *name;
    struct table tb = {.classes = t->loss.classification,
                       .probs = t->loss.classification || t->loss.kind == LOSS_BCE_WITH_LOGITS};
    int rc = train_pick_dataset(t, section, &ds, &in, &name);
    if (rc == 0)
        rc = run_model(t, ds, in, &tb);
    if (rc == 0)
        rc = write_table(out, &tb, npy);
    if (rc == 0)
        printf("predict [%s]: %lld samples x %lld %s -> %s\n", name, (long long)tb.rows,
               (long long)tb.cols, tb.probs ? "probabilities" : "outputs", out);
    free(tb.v);
    return rc;
}
