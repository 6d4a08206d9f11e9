/* apps/info_memory.c: weft-info --memory CONFIG.ini [--checkpoint N] [--set section.key=value ...]
 *
 * The memory a model of an INI file takes: its parameters and buffers, what its forward
 * keeps for backward, and the peak of one training step's forward and backward on one
 * batch of its [data], measured by the device allocator. With --checkpoint N the step
 * runs twice, without activation checkpointing and with it (a GPT: every block, when
 * N > 0; a sequential model: N segments, as [model] checkpoint_segments), so the saving
 * shows beside its cost.
 *
 * The loss is [loss] type's (cross_entropy, nll, mse, l1, bce_with_logits; a sequence of
 * token ids against [B, T, V] logits as weft-train flattens it); the model is built as
 * weft-train builds it, minus weft-train's own sparse_linear layer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft.h>
#include <weft/dataloader.h>
#include <weft/models.h>
#include <weft/train.h>

#include "info_memory.h"

struct step_memory {
    uint64_t params, buffers;   /* bytes */
    uint64_t kept;              /* allocated after the forward and loss, beyond `before` */
    uint64_t peak;              /* over forward and backward */
    uint64_t before;            /* model, batch and whatever else lives */
};

static const char *mib(uint64_t n, char *buf, size_t size)
{
    if (n < 1024)
        snprintf(buf, size, "%llu B", (unsigned long long)n);
    else if (n < (1u << 20))
        snprintf(buf, size, "%.2f KiB", (double)n / 1024);
    else
        snprintf(buf, size, "%.2f MiB", (double)n / (1 << 20));
    return buf;
}

static uint64_t tensor_bytes(weft_tensor *const *t, int n)
{
    uint64_t sum = 0;
    for (int i = 0; i < n; i++)
        sum += (uint64_t)weft_tensor_numel(t[i]) * weft_dtype_size(t[i]->dtype);
    return sum;
}

static uint64_t buffer_bytes(const weft_module *m)
{
    struct weft_named_tensor *b = NULL;
    int n = weft_module_named_buffers(m, &b);
    uint64_t sum = 0;
    for (int i = 0; i < n; i++)
        sum += tensor_bytes(&b[i].tensor, 1);
    free(b);
    return sum;
}

/* The loss of [loss] type on output and target. */
static weft_tensor *loss_of(const char *type, weft_tensor *out, weft_tensor *target)
{
    bool classes = strcmp(type, "cross_entropy") == 0 || strcmp(type, "nll") == 0;
    if (classes && out->ndim == 3 && target->ndim == 2) { /* [B, T, V] against [B, T] */
        int64_t bt = out->shape[0] * out->shape[1];
        out = weft_reshape(out, 2, (int64_t[]){bt, out->shape[2]});
        target = weft_reshape(target, 1, (int64_t[]){bt});
    }
    if (!out || !target)
        return NULL;
    struct weft_cross_entropy_params ce = weft_cross_entropy_defaults();
    if (strcmp(type, "cross_entropy") == 0)
        return weft_cross_entropy(out, target, &ce);
    if (strcmp(type, "nll") == 0)
        return weft_nll_loss(out, target, &ce);
    weft_tensor *t = weft_to_dtype(target, out->dtype);
    if (strcmp(type, "mse") == 0)
        return weft_mse_loss(out, t, WEFT_REDUCTION_MEAN);
    if (strcmp(type, "l1") == 0)
        return weft_l1_loss(out, t, WEFT_REDUCTION_MEAN);
    return weft_binary_cross_entropy_with_logits(out, t, NULL, WEFT_REDUCTION_MEAN);
}

/* Builds the model as cfg says now and measures one step on (x, target). */
static int measure(struct weft_config *cfg, weft_device dev, uint64_t seed, const char *loss,
                   weft_tensor *x, weft_tensor *target, struct step_memory *m)
{
    weft_manual_seed(seed);
    weft_module *model = weft_model_from_config(cfg);
    if (!model || weft_module_to(model, dev, WEFT_F32) != 0) {
        weft_module_free(model);
        return weft_error_code();
    }
    weft_module_train(model, true);
    int np = 0;
    weft_tensor *const *p = weft_module_parameters(model, &np);
    m->params = tensor_bytes(p, np);
    m->buffers = buffer_bytes(model);
    struct weft_memory_stats st = {.struct_size = sizeof st};
    int rc = weft_synchronize(dev);
    if (rc == 0)
        rc = weft_memory_stats(dev, &st);
    m->before = st.allocated_bytes;
    weft_reset_peak_memory_stats(dev);
    weft_scope_push();
    /* x.to(model.dtype) for floating inputs, as weft-train feeds them */
    weft_tensor *in = weft_dtype_is_floating(x->dtype) ? weft_to_dtype(x, WEFT_F32) : x;
    weft_tensor *l = rc == 0 ? loss_of(loss, weft_module_forward(model, in), target) : NULL;
    if (rc == 0 && !l)
        rc = weft_error_code();
    if (rc == 0 && (rc = weft_synchronize(dev)) == 0 && (rc = weft_memory_stats(dev, &st)) == 0)
        m->kept = st.allocated_bytes - m->before;
    if (rc == 0)
        rc = weft_backward(l, NULL, false);
    if (rc == 0 && (rc = weft_synchronize(dev)) == 0 && (rc = weft_memory_stats(dev, &st)) == 0)
        m->peak = st.peak_allocated_bytes;
    weft_scope_pop();
    weft_module_free(model);
    return rc;
}

/* The batch's first field is the input, "label" (else the second) the target. */
static int one_batch(struct weft_config *cfg, weft_device dev, weft_tensor **x, weft_tensor **target)
{
    weft_dataset *ds = weft_dataset_open(weft_config_options(cfg, "data"));
    if (!ds)
        return weft_error_code();
    int rc = 0, n = weft_dataset_num_fields(ds), t = weft_dataset_field_index(ds, "label");
    t = t < 0 ? 1 : t;
    weft_tensor **fields = calloc((size_t)n, sizeof *fields);
    weft_dataloader *dl = fields ? weft_dataloader_from_config(ds, cfg, "data", dev) : NULL;
    if (!dl)
        rc = weft_error_code() ? weft_error_code() : WEFT_ERR_OUT_OF_MEMORY;
    else if (t >= n)
        rc = weft_error_set(WEFT_ERR_CONFIG, "%s: the data of [data] has no target field for "
                                             "the loss", weft_config_name(cfg));
    else if ((rc = weft_dataloader_next(dl, fields)) > 0)
        rc = 0;
    else if (rc == 0)
        rc = weft_error_set(WEFT_ERR_CONFIG, "%s: [data] gave no batch", weft_config_name(cfg));
    if (rc == 0) {
        *x = weft_tensor_retain(fields[0]);
        *target = weft_tensor_retain(fields[t]);
    }
    for (int i = 0; fields && dl && i < n; i++)
        weft_tensor_release(fields[i]);
    free(fields);
    weft_dataloader_free(dl);
    weft_dataset_close(ds);
    return rc;
}

/* Sets the checkpointing of cfg's model: segments for a sequential model, on or off for a
 * GPT's blocks; what the column is called in *what. */
static int set_checkpoint(struct weft_config *cfg, bool gpt, int64_t n, char *what, size_t size)
{
    char value[32];
    if (gpt)
        snprintf(value, sizeof value, "%s", n > 0 ? "true" : "false");
    else
        snprintf(value, sizeof value, "%lld", (long long)n);
    if (n == 0)
        snprintf(what, size, "checkpointing off");
    else if (gpt)
        snprintf(what, size, "every block");
    else
        snprintf(what, size, "%lld segments", (long long)n);
    return weft_config_put(cfg, "model", gpt ? "checkpoint" : "checkpoint_segments", value);
}

static void print_row(const char *name, const struct step_memory *m, int runs,
                      uint64_t (*get)(const struct step_memory *))
{
    printf("%-34s", name);
    for (int i = 0; i < runs; i++) {
        char b[32];
        printf("  %18s", mib(get(&m[i]), b, sizeof b));
    }
    printf("\n");
}

static uint64_t get_params(const struct step_memory *m) { return m->params; }
static uint64_t get_buffers(const struct step_memory *m) { return m->buffers; }
static uint64_t get_kept(const struct step_memory *m) { return m->kept; }
static uint64_t get_peak(const struct step_memory *m) { return m->peak; }
static uint64_t get_step(const struct step_memory *m) { return m->peak - m->before; }

int info_memory_config(const char *path, int argc, char **argv)
{
    int64_t checkpoint = -1;
    struct weft_config *cfg = weft_config_load(path);
    int rc = cfg ? 0 : weft_error_code();
    for (int i = 0; rc == 0 && i < argc; i += 2) {
        if (i + 1 >= argc) {
            rc = weft_error_set(WEFT_ERR_VALUE, "%s needs a value", argv[i]);
        } else if (strcmp(argv[i], "--set") == 0) {
            rc = weft_config_set(cfg, argv[i + 1]);
        } else if (strcmp(argv[i], "--checkpoint") == 0) {
            char *end;
            checkpoint = strtoll(argv[i + 1], &end, 10);
            if (*end || end == argv[i + 1] || checkpoint < 0)
                rc = weft_error_set(WEFT_ERR_VALUE, "--checkpoint %s: expected a number of "
                                                    "segments >= 0", argv[i + 1]);
        } else {
            rc = weft_error_set(WEFT_ERR_VALUE, "unknown option %s (expected --checkpoint N or "
                                                "--set section.key=value)", argv[i]);
        }
    }
    weft_device dev = WEFT_CPU;
    int64_t seed = 0;
    if (rc == 0)
        rc = weft_runtime_init(cfg, &dev);
    if (rc == 0)
        rc = weft_config_int(cfg, "runtime", "seed", 0, &seed);
    if (rc == 0)
        rc = weft_models_register();
    const char *type = cfg ? weft_config_string(cfg, "model", "type", "sequential") : "";
    const char *loss = cfg ? weft_config_string(cfg, "loss", "type", "cross_entropy") : "";
    static const char *const losses[] = {"cross_entropy", "nll", "mse", "l1", "bce_with_logits"};
    bool known = false;
    for (size_t i = 0; i < sizeof losses / sizeof *losses; i++)
        known |= strcmp(loss, losses[i]) == 0;
    if (rc == 0 && !known)
        rc = weft_error_set(WEFT_ERR_CONFIG, "%s: [loss] type = %s: expected one of "
                                             "cross_entropy, nll, mse, l1, bce_with_logits",
                            weft_config_name(cfg), loss);
    weft_tensor *x = NULL, *target = NULL;
    if (rc == 0)
        rc = one_batch(cfg, dev, &x, &target);
    bool gpt = strcmp(type, "gpt") == 0;
    struct step_memory m[2] = {{0}};
    char what[2][48] = {"as configured", ""};
    int runs = checkpoint < 0 ? 1 : 2;
    for (int r = 0; r < runs && rc == 0; r++) {
        if (checkpoint >= 0)
            rc = set_checkpoint(cfg, gpt, r == 0 ? 0 : checkpoint, what[r], sizeof what[r]);
        if (rc == 0)
            rc = measure(cfg, dev, (uint64_t)seed, loss, x, target, &m[r]);
    }
    if (rc == 0) {
        char xs[96], ts[96], dn[32];
        printf("%s: model %s on %s; one batch: input %s %s, target %s %s; loss %s\n",
               weft_config_name(cfg), type, weft_device_str(dev, dn, sizeof dn),
               weft_shape_str(x->ndim, x->shape, xs, sizeof xs), weft_dtype_name(x->dtype),
               weft_shape_str(target->ndim, target->shape, ts, sizeof ts),
               weft_dtype_name(target->dtype), loss);
        printf("%-34s", "");
        for (int r = 0; r < runs; r++)
            printf("  %18s", what[r]);
        printf("\n");
        print_row("parameters", m, runs, get_params);
        print_row("buffers", m, runs, get_buffers);
        print_row("kept by the forward for backward", m, runs, get_kept);
        print_row("forward+backward peak", m, runs, get_step);
        print_row("  with the model, batch, the rest", m, runs, get_peak);
    }
    weft_tensor_release(x);
    weft_tensor_release(target);
    if (rc != 0)
        fprintf(stderr, "weft-info: --memory %s: %s\n", path, weft_error_message());
    weft_config_free(cfg);
    return rc;
}
