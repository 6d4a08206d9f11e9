/* apps/train/train_summary.c: the model summary printed before training, in torchinfo's
 * layout (torchinfo.summary(model, input_size=...)): one row per layer with its output
 * shape and parameter count, then the totals and the sizes in MB (10^6 bytes, as
 * torchinfo). The rows come from the check on one sample (train_check.c), so the shapes
 * are the ones the model really produced; the batch dimension shown is [data]
 * batch_size, and the activation sizes are for one such batch. */
#include <stdlib.h>
#include <string.h>

#include "train.h"

#define RULE_WIDTH 90

int train_summary_add(struct train_summary *s, const char *name, const weft_module *m,
                      const weft_tensor *out)
{
    if (s->count == s->capacity) {
        int cap = s->capacity ? 2 * s->capacity : 16;
        struct train_summary_row *p = realloc(s->rows, (size_t)cap * sizeof *p);
        if (!p)
            return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of memory for the model summary");
        s->rows = p;
        s->capacity = cap;
    }
    struct train_summary_row *r = &s->rows[s->count++];
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", name);
    snprintf(r->type, sizeof r->type, "%s", weft_module_type_name(m));
    r->params = weft_module_num_parameters(m);
    r->ndim = out ? out->ndim : 0;
    for (int d = 0; d < r->ndim; d++)
        r->shape[d] = out->shape[d];
    r->bytes = out ? (int64_t)(weft_tensor_numel(out) * (int64_t)weft_dtype_size(out->dtype)) : 0;
    return 0;
}

void train_summary_free(struct train_summary *s)
{
    free(s->rows);
    memset(s, 0, sizeof *s);
}

/* "[64, 128]": the batch dimension as batch_size; "--" for a container never called. A
 * module's output that is not batched (the position embedding's [T, C]) shows as it is:
 * only the model's input decides, by its first dimension of one. */
static const char *shape_of(const struct train_summary_row *r, int64_t batch, char *buf,
                            size_t size)
{
    if (r->ndim < 0)
        return snprintf(buf, size, "--") >= 0 ? buf : buf;
    if (r->ndim > 0 && r->shape[0] != 1)
        batch = r->shape[0];
    size_t n = (size_t)snprintf(buf, size, "[");
    for (int d = 0; d < r->ndim && n < size; d++)
        n += (size_t)snprintf(buf + n, size - n, "%s%lld", d ? ", " : "",
                              (long long)(d == 0 ? batch : r->shape[d]));
    if (n < size)
        snprintf(buf + n, size - n, "]");
    return buf;
}

/* 1234567 -> "1,234,567" (torchinfo's thousands separators). */
static const char *grouped(int64_t v, char *buf, size_t size)
{
    char digits[32];
    int n = snprintf(digits, sizeof digits, "%lld", (long long)(v < 0 ? -v : v));
    size_t k = 0;
    if (v < 0 && k + 1 < size)
        buf[k++] = '-';
    for (int i = 0; i < n && k + 1 < size; i++) {
        if (i > 0 && (n - i) % 3 == 0 && k + 1 < size)
            buf[k++] = ',';
        buf[k++] = digits[i];
    }
    buf[k] = '\0';
    return buf;
}

static void rule(FILE *f, char c)
{
    for (int i = 0; i < RULE_WIDTH; i++)
        fputc(c, f);
    fputc('\n', f);
}

int train_summary_print(const struct train_summary *s, const weft_module *model, int64_t batch,
                        int64_t input_bytes, FILE *f)
{
    struct weft_named_tensor *params = NULL;
    int n = weft_module_named_parameters(model, &params);
    if (n < 0)
        return weft_error_code();
    /* Sizes in doubles: batch times a sample's bytes need not fit an int64, and these
     * are estimates in MB. */
    int64_t total = 0, trainable = 0;
    double param_bytes = 0, act_bytes = 0;
    for (int i = 0; i < n; i++) {
        int64_t numel = weft_tensor_numel(params[i].tensor);
        total += numel;
        trainable += weft_requires_grad(params[i].tensor) ? numel : 0;
        param_bytes += (double)numel * (double)weft_dtype_size(params[i].tensor->dtype);
    }
    free(params);
    for (int i = 0; i < s->count; i++)
        act_bytes += (double)s->rows[i].bytes * (double)batch;
    char buf[160], num[32];
    /* A graph model's layers say what they read, as Keras's "Connected to" column. */
    bool graph = false;
    for (int i = 0; i < s->count; i++)
        graph = graph || s->rows[i].inputs[0];
    rule(f, '=');
    if (graph)
        fprintf(f, "%-40s %-30s %-10s %s\n", "Layer (type)", "Output Shape", "Param #",
                "Connected to");
    else
        fprintf(f, "%-40s %-30s %s\n", "Layer (type)", "Output Shape", "Param #");
    rule(f, '=');
    for (int i = 0; i < s->count; i++) {
        const struct train_summary_row *r = &s->rows[i];
        char label[160];
        snprintf(label, sizeof label, "%s (%s)", r->name, r->type);
        const char *params = r->params ? grouped(r->params, num, sizeof num) : "--";
        if (graph)
            fprintf(f, "%-40s %-30s %-10s %s\n", label, shape_of(r, batch, buf, sizeof buf),
                    params, r->inputs);
        else
            fprintf(f, "%-40s %-30s %s\n", label, shape_of(r, batch, buf, sizeof buf), params);
    }
    rule(f, '=');
    fprintf(f, "Total params: %s\n", grouped(total, num, sizeof num));
    fprintf(f, "Trainable params: %s\n", grouped(trainable, num, sizeof num));
    fprintf(f, "Non-trainable params: %s\n", grouped(total - trainable, num, sizeof num));
    rule(f, '=');
    /* torchinfo counts each output once for the forward pass and once for its gradient */
    double in_mb = (double)input_bytes * (double)batch / 1e6, act_mb = 2.0 * act_bytes / 1e6;
    double par_mb = param_bytes / 1e6;
    fprintf(f, "Input size (MB): %.2f\n", in_mb);
    fprintf(f, "Forward/backward pass size (MB): %.2f\n", act_mb);
    fprintf(f, "Params size (MB): %.2f\n", par_mb);
    fprintf(f, "Estimated Total Size (MB): %.2f\n", in_mb + act_mb + par_mb);
    rule(f, '=');
    return 0;
}
