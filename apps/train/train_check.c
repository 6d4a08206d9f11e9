/* apps/train/train_check.c: mistakes caught before the first step.
 *
 * A run that fails after an epoch of work, or that "succeeds" on nothing, costs the user
 * more than an error at once. So set-up checks what it can without training: that the
 * checkpoint and log paths can be written (their directories made and a probe file
 * created), that no section of the config is empty (inih drops it without a word), that
 * every dataset has samples, and that the model takes one sample of the training data
 * and gives the loss what it needs, layer by layer, so that an error names the
 * [layer.*] section that did not fit. train_check_model() is also what a model summary
 * (shapes per layer) would walk. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "train.h"
#include "weft/graph.h"

int train_make_parent_dirs(const char *path)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0777) != 0 && errno != EEXIST)
            return weft_error_set(WEFT_ERR_IO, "cannot create directory %s: %s", buf, strerror(errno));
        *p = '/';
    }
    return 0;
}

/* [train] key = path: its directory exists (made if need be) and takes a new file. */
static int probe_path(const struct trainer *t, const char *key, const char *path)
{
    const char *name = weft_config_name(t->cfg);
    if (train_make_parent_dirs(path) != 0) {
        char why[1024];
        snprintf(why, sizeof why, "%s", weft_error_message());
        weft_error_clear();
        return weft_error_set(WEFT_ERR_CONFIG, "%s: [train] %s = %s: %s", name, key, path, why);
    }
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return weft_error_set(WEFT_ERR_CONFIG, "%s: [train] %s = %s is a directory: expected a "
                                               "file name", name, key, path);
    char probe[4200];
    const char *slash = strrchr(path, '/');
    snprintf(probe, sizeof probe, "%.*s.weft-probe.%ld", slash ? (int)(slash - path + 1) : 0,
             path, (long)getpid());
    int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0)
        return weft_error_set(WEFT_ERR_CONFIG, "%s: [train] %s = %s: cannot create a file in "
                                               "its directory: %s", name, key, path,
                              strerror(errno));
    close(fd);
    unlink(probe);
    /* an existing file must be writable too (a log is appended to on resume) */
    if (access(path, F_OK) == 0 && access(path, W_OK) != 0)
        return weft_error_set(WEFT_ERR_CONFIG, "%s: [train] %s = %s cannot be written: %s", name,
                              key, path, strerror(errno));
    return 0;
}

int train_check_paths(const struct trainer *t)
{
    if (t->rank != 0) /* rank 0 alone writes */
        return 0;
    if (t->s.checkpoint && *t->s.checkpoint && probe_path(t, "checkpoint", t->s.checkpoint) != 0)
        return weft_error_code();
    if (t->s.log_path && *t->s.log_path && probe_path(t, "log", t->s.log_path) != 0)
        return weft_error_code();
    return 0;
}

int train_check_sections(struct weft_config *cfg)
{
    const char *name = weft_config_name(cfg);
    FILE *f = fopen(name, "r");
    if (!f) /* a config that was not read from a file has no empty sections to find */
        return 0;
    char line[4096];
    int rc = 0, lineno = 0;
    while (rc == 0 && fgets(line, sizeof line, f)) {
        lineno++;
        /* an indented line continues a value (inih's multi-line values) */
        char *p = line;
        char *end = *p == '[' ? strchr(p, ']') : NULL;
        if (!end)
            continue;
        *end = '\0';
        const char *sec = p + 1;
        if (weft_config_has_section(cfg, sec))
            continue;
        if (strncmp(sec, "layer.", 6) == 0)
            rc = weft_error_set(WEFT_ERR_CONFIG, "%s: line %d: [%s] is empty: a layer needs at "
                                                 "least a 'type' key (an empty section would be "
                                                 "left out of the model)",
                                name, lineno, sec);
        else
            rc = weft_error_set(WEFT_ERR_CONFIG, "%s: line %d: [%s] is empty: give it keys or "
                                                 "remove it",
                                name, lineno, sec);
    }
    fclose(f);
    return rc;
}

int train_check_argument_file(const char *path)
{
    return weft_check_regular_file(path, NULL) == 0 ? 0 : weft_error_recode(WEFT_ERR_CONFIG);
}

/* A file the reader refused is the config's fault, named by its key (exit 2): missing,
 * unreadable, not a regular file (a FIFO, a directory: refused by its type, never read), or
 * not what the key expects (a corrupt header, a labels file given as images: the reader
 * names the byte). */
weft_dataset *train_open_dataset(struct weft_config *cfg, const char *section)
{
    const weft_options *o = weft_config_options(cfg, section);
    weft_dataset *ds = weft_dataset_open(o);
    if (ds || weft_error_code() != WEFT_ERR_IO)
        return ds;
    /* The reader names the file; the user wrote a key. Find the key whose file it is. */
    char why[1536];
    snprintf(why, sizeof why, "%s", weft_error_message());
    for (const char *const *k = weft_config_keys(cfg, section); *k; k++) {
        char path[4096];
        const char *value = weft_config_string(cfg, section, *k, "");
        if (weft_options_path(o, *k, path, sizeof path) != 1) {
            weft_error_clear();
            weft_error_set(WEFT_ERR_IO, "%s", why);
            continue;
        }
        size_t n = strlen(path);
        if (strncmp(why, path, n) != 0 || why[n] != ':')
            continue;
        /* where a relative value led: the config's directory, or the shell's for --set */
        char opened[8300] = "", cwd[4096];
        if (path[0] != '/' && getcwd(cwd, sizeof cwd))
            snprintf(opened, sizeof opened, " (%s/%s)", cwd, path);
        weft_error_clear();
        /* "path: why" or "path:52:5: why" (a line and column) */
        bool at = why[n + 1] != ' ';
        weft_error_set(WEFT_ERR_CONFIG, "%s: [%s] %s = %s%s%s%s", weft_config_name(cfg), section,
                       *k, value, opened, at ? ":" : ": ", why + n + (at ? 1 : 2));
        return NULL;
    }
    return NULL;
}

int train_check_samples(struct weft_config *cfg, const weft_dataset *ds)
{
    if (!ds || weft_dataset_length(ds) > 0)
        return 0;
    const char *sec = weft_dataset_section(ds);
    static const char *const keys[] = {"path", "images", "file", NULL};
    const char *key = NULL;
    for (int i = 0; keys[i] && !key; i++)
        if (weft_config_has(cfg, sec, keys[i]))
            key = keys[i];
    if (key)
        return weft_error_set(WEFT_ERR_VALUE, "%s: [%s] %s = %s (reader %s) has no samples: "
                                              "nothing to train or evaluate on",
                              weft_config_name(cfg), sec, key,
                              weft_config_string(cfg, sec, key, ""), weft_dataset_reader_name(ds));
    return weft_error_set(WEFT_ERR_VALUE, "%s: [%s] (reader %s) has no samples: nothing to "
                                          "train or evaluate on",
                          weft_config_name(cfg), sec, weft_dataset_reader_name(ds));
}

/* "[1, 784]" */
static const char *shape_str(const weft_tensor *x, char *buf, size_t size)
{
    size_t n = (size_t)snprintf(buf, size, "[");
    for (int d = 0; x && d < x->ndim && n < size; d++)
        n += (size_t)snprintf(buf + n, size - n, "%s%lld", d ? ", " : "", (long long)x->shape[d]);
    if (n < size)
        snprintf(buf + n, size - n, "]");
    return buf;
}

/* The [layer.*] section of child i of a sequential model, or NULL. */
static const char *layer_section(struct weft_config *cfg, int i)
{
    int k = 0;
    for (const char *const *sec = weft_config_sections(cfg); *sec; sec++)
        if (strncmp(*sec, "layer.", 6) == 0 && k++ == i)
            return *sec;
    return NULL;
}

/* Replaces the pending error with "<prefix>: <its message>", as WEFT_ERR_CONFIG so that
 * the run ends as a bad config (exit 2). Out of memory is no fault of the config: it keeps
 * its code, with "<doing>: " in front (what was being done when it ran out). */
static int blame(const char *prefix, const char *doing)
{
    if (weft_error_code() == WEFT_ERR_OUT_OF_MEMORY)
        return weft_error_prefix("%s", doing);
    char why[1536];
    snprintf(why, sizeof why, "%s", weft_error_message());
    weft_error_clear();
    return weft_error_set(WEFT_ERR_CONFIG, "%s: %s", prefix, why);
}

/* ---- the summary of a model that is not a chain: its modules to torchinfo's depth ---- */

#define SUMMARY_DEPTH 3 /* torchinfo's default: GPT, transformer, transformer.h, its blocks */
#define MAX_SEEN 256

/* The output shapes of the modules a forward ran (a forward hook's record: the tensors
 * themselves go with the forward's scopes). */
struct seen {
    const weft_module *m[MAX_SEEN];
    int ndim[MAX_SEEN];
    int64_t shape[MAX_SEEN][8];
    int n;
};

static void record_output(void *ctx, weft_module *m, weft_tensor *input, weft_tensor *output)
{
    struct seen *s = ctx;
    (void)input;
    int i = 0;
    while (i < s->n && s->m[i] != m) /* a module called twice: its last output */
        i++;
    if (!output || output->ndim > 8 || i == MAX_SEEN)
        return;
    s->n += i == s->n;
    s->m[i] = m;
    s->ndim[i] = output->ndim;
    memcpy(s->shape[i], output->shape, (size_t)output->ndim * sizeof *output->shape);
}

/* Rows for m's children, depth first in registration order, indented by depth; their
 * outputs count in no size (the model's output row does): a nested row repeats what the
 * layers around it hold. */
static int add_children(struct train_summary *sum, const struct seen *seen, const weft_module *m,
                        const char *path, int depth)
{
    for (int i = 0; depth <= SUMMARY_DEPTH && i < weft_module_num_children(m); i++) {
        const weft_module *c = weft_module_child_at(m, i);
        char name[300], sub[256];
        snprintf(sub, sizeof sub, "%s%s%s", path, path[0] ? "." : "", weft_module_child_name(m, i));
        snprintf(name, sizeof name, "%*s%s", 2 * (depth - 1), "", sub);
        int k = 0;
        while (k < seen->n && seen->m[k] != c)
            k++;
        if (train_summary_add(sum, name, c, NULL) != 0)
            return weft_error_code();
        struct train_summary_row *r = &sum->rows[sum->count - 1];
        r->ndim = k < seen->n ? seen->ndim[k] : -1; /* -1: "--", never called */
        if (r->ndim > 0)
            memcpy(r->shape, seen->shape[k], (size_t)r->ndim * sizeof *r->shape);
        if (add_children(sum, seen, c, sub, depth + 1) != 0)
            return weft_error_code();
    }
    return 0;
}

/* A graph model's layers as forward_named walks them: each recorded in the summary with
 * what it reads; the one that fails named with its inputs' shapes. */
struct graph_walk {
    struct trainer *t;
    const char *data;
    bool record;
    char section[128]; /* of the last layer run */
};

static int graph_visit(void *ctx, int i, int n, weft_tensor *const *in, weft_tensor *out)
{
    struct graph_walk *w = ctx;
    weft_module *model = w->t->model;
    int which[64];
    int k = weft_nn_graph_layer_inputs(model, i, which, 64);
    char inputs[512] = "", shapes[1024] = "", shape[128];
    size_t a = 0, b = 0;
    for (int j = 0; j < n && j < k; j++) {
        const char *name = which[j] < 0 ? WEFT_GRAPH_INPUT : weft_module_child_name(model, which[j]);
        a += (size_t)snprintf(inputs + (a < sizeof inputs ? a : sizeof inputs),
                              a < sizeof inputs ? sizeof inputs - a : 0, "%s%s", j ? ", " : "",
                              name);
        b += (size_t)snprintf(shapes + (b < sizeof shapes ? b : sizeof shapes),
                              b < sizeof shapes ? sizeof shapes - b : 0, "%s%s %s",
                              j ? ", " : "", name, shape_str(in[j], shape, sizeof shape));
    }
    weft_module *layer = weft_module_child_at(model, i);
    snprintf(w->section, sizeof w->section, "layer.%s", weft_module_child_name(model, i));
    if (!out) {
        char prefix[1600], doing[256];
        snprintf(prefix, sizeof prefix, "%s: [%s] (%s) does not take its input%s, %s for one "
                                        "sample of [%s]",
                 weft_config_name(w->t->cfg), w->section, weft_module_type_name(layer),
                 n > 1 ? "s" : "", shapes, w->data);
        snprintf(doing, sizeof doing, "[%s] (%s) on one sample of [%s]", w->section,
                 weft_module_type_name(layer), w->data);
        blame(prefix, doing);
        return 1;
    }
    if (!w->record)
        return 0;
    if (train_summary_add(&w->t->summary, w->section, layer, out) != 0)
        return 1;
    struct train_summary_row *row = &w->t->summary.rows[w->t->summary.count - 1];
    snprintf(row->inputs, sizeof row->inputs, "%s", inputs);
    return 0;
}

/* The model's forward on x, layer by layer for a sequential or graph model, so that an
 * error names its section; *last_section the section of the last layer (or "model"). */
static weft_tensor *forward_named(struct trainer *t, weft_tensor *x, const char *data,
                                  bool record, const char **last_section)
{
    struct weft_config *cfg = t->cfg;
    const char *file = weft_config_name(cfg);
    char shape[128], prefix[512];
    *last_section = "model";
    if (weft_nn_is_graph(t->model)) {
        static struct graph_walk w; /* *last_section points into it */
        w = (struct graph_walk){.t = t, .data = data, .record = record};
        weft_tensor *y = weft_nn_graph_forward_each(t->model, x, graph_visit, &w, NULL);
        *last_section = w.section;
        return y;
    }
    if (strcmp(weft_config_string(cfg, "model", "type", "sequential"), "sequential") != 0) {
        struct seen seen = {.n = 0};
        int hook = record ? weft_register_module_forward_hook(record_output, &seen) : 0;
        if (hook < 0)
            weft_error_clear(); /* no nested rows: the summary is a courtesy */
        weft_tensor *y = weft_module_forward(t->model, x);
        if (hook > 0)
            weft_remove_module_forward_hook(hook);
        if (!y) {
            char doing[256];
            snprintf(prefix, sizeof prefix, "%s: [model] does not take one sample of [%s] "
                                            "(shape %s)", file, data, shape_str(x, shape, sizeof shape));
            snprintf(doing, sizeof doing, "[model] on one sample of [%s]", data);
            blame(prefix, doing);
        }
        if (y && record && (train_summary_add(&t->summary, "model", t->model, y) != 0 ||
                            add_children(&t->summary, &seen, t->model, "", 1) != 0))
            return NULL;
        return y;
    }
    weft_tensor *h = x;
    for (int i = 0;; i++) {
        char idx[16];
        snprintf(idx, sizeof idx, "%d", i);
        weft_module *layer = weft_module_child(t->model, idx);
        if (!layer)
            return h;
        const char *sec = layer_section(cfg, i);
        *last_section = sec ? sec : "model";
        weft_tensor *y = weft_module_forward(layer, h);
        if (!y) {
            char doing[256];
            snprintf(prefix, sizeof prefix, "%s: [%s] (%s) does not take its input, of shape %s "
                                            "for one sample of [%s]%s",
                     file, *last_section, weft_module_type_name(layer),
                     shape_str(h, shape, sizeof shape), data,
                     i ? " after the layers before it" : "");
            snprintf(doing, sizeof doing, "[%s] (%s) on one sample of [%s]", *last_section,
                     weft_module_type_name(layer), data);
            blame(prefix, doing);
            return NULL;
        }
        if (record && train_summary_add(&t->summary, *last_section, layer, y) != 0)
            return NULL;
        h = y;
    }
}

int train_blame_layer(struct trainer *t, weft_tensor *x)
{
    int code = weft_error_code();
    char first[1536];
    snprintf(first, sizeof first, "%s", weft_error_message());
    /* out of memory is its own cause: running the layers again would only allocate more */
    if (code == WEFT_OK || code == WEFT_ERR_OUT_OF_MEMORY || strncmp(first, "[layer.", 7) == 0)
        return code;
    if (weft_nn_is_graph(t->model)) {
        /* the graph's own message names the layer and its inputs: say it as a section */
        int failed = -1;
        weft_error_clear();
        weft_scope_push();
        weft_nn_graph_forward_each(t->model, x, NULL, NULL, &failed);
        weft_scope_pop();
        weft_error_clear();
        if (failed < 0)
            return weft_error_set(code, "%s", first);
        const char *name = weft_module_child_name(t->model, failed);
        char own[160];
        snprintf(own, sizeof own, "layer '%s' ", name);
        size_t n = strlen(own);
        return weft_error_set(code, "[layer.%s] %s", name,
                              strncmp(first, own, n) == 0 ? first + n : first);
    }
    if (strcmp(weft_config_string(t->cfg, "model", "type", "sequential"), "sequential") != 0)
        return code;
    weft_error_clear();
    const char *sec = NULL;
    weft_tensor *h = x;
    weft_scope_push();
    for (int i = 0; !sec; i++) {
        char idx[16];
        snprintf(idx, sizeof idx, "%d", i);
        weft_module *layer = weft_module_child(t->model, idx);
        if (!layer)
            break;
        if (!(h = weft_module_forward(layer, h)))
            sec = layer_section(t->cfg, i);
    }
    weft_scope_pop();
    weft_error_clear();
    if (sec)
        return weft_error_set(code, "[%s] %s", sec, first);
    return weft_error_set(code, "%s", first);
}

/* Too few outputs for the labels: cross-entropy would fail at the first batch (or, on
 * some devices, read out of bounds). */
static int check_classes(struct trainer *t, const weft_dataset *ds, const struct train_inputs *in,
                         const weft_tensor *out, const weft_tensor *target,
                         const char *last_section)
{
    if (!t->loss.classification || !out || out->ndim < 2 || in->target < 0)
        return 0;
    const struct weft_dataset_field *f = weft_dataset_field(ds, in->target);
    if (!f || f->num_classes <= 0)
        return 0;
    bool seq = train_loss_is_sequence(&t->loss, out, target);
    int64_t c = out->shape[seq ? 2 : 1];
    if (c >= f->num_classes)
        return 0;
    const char *file = weft_config_name(t->cfg);
    if (weft_config_has(t->cfg, last_section, "out_features"))
        return weft_error_set(WEFT_ERR_CONFIG, "%s: [%s] out_features = %lld, but field '%s' "
                                               "of [%s] has %lld classes: expected "
                                               "out_features = %lld",
                              file, last_section, (long long)c, f->name, weft_dataset_section(ds),
                              (long long)f->num_classes, (long long)f->num_classes);
    return weft_error_set(WEFT_ERR_CONFIG, "%s: [%s] gives %lld outputs per position, but "
                                           "field '%s' of [%s] has %lld classes",
                          file, last_section, (long long)c, f->name, weft_dataset_section(ds),
                          (long long)f->num_classes);
}

/* A language model's vocabulary against the data's: the tokens of the input are those of
 * the target, shifted, so a target of V classes means ids up to V - 1 at the embedding;
 * fewer rows than that fails at the first sample with PyTorch's "index out of range in
 * self", naming nothing. The model's vocabulary is [model] vocab_size (gpt) or the
 * num_embeddings of a first [layer.*] of type embedding. */
static int check_vocabulary(struct trainer *t, const weft_dataset *ds,
                            const struct train_inputs *in)
{
    if (!t->sequence || in->target < 0)
        return 0;
    const struct weft_dataset_field *f = weft_dataset_field(ds, in->target);
    const char *sec = "model", *key = "vocab_size";
    if (!weft_config_has(t->cfg, sec, key)) {
        sec = layer_section(t->cfg, 0);
        key = "num_embeddings";
        if (!sec || strcmp(weft_config_string(t->cfg, sec, "type", ""), "embedding") != 0)
            return 0;
    }
    int64_t vocab = 0;
    if (!f || f->num_classes <= 0 || weft_config_int(t->cfg, sec, key, 0, &vocab) != 0 ||
        vocab >= f->num_classes) {
        weft_error_clear(); /* a bad value was reported when the model was built */
        return 0;
    }
    return weft_error_set(WEFT_ERR_CONFIG,
                          "%s: [%s] %s = %lld, but the tokens of [%s] (reader %s) have a "
                          "vocabulary of %lld (field '%s' has %lld classes): expected %s = %lld "
                          "or more",
                          weft_config_name(t->cfg), sec, key, (long long)vocab,
                          weft_dataset_section(ds), weft_dataset_reader_name(ds),
                          (long long)f->num_classes, f->name, (long long)f->num_classes, key,
                          (long long)f->num_classes);
}

/* A sample's input as stored: a sparse one by its indices and values (a row of a
 * million features with a few set is a few bytes, not the 4 MB of its dense form), as
 * torchinfo would count the tensors it is made of. */
static int64_t stored_bytes(weft_tensor *x)
{
    if (x->layout == WEFT_LAYOUT_STRIDED)
        return weft_tensor_numel(x) * (int64_t)weft_dtype_size(x->dtype);
    weft_tensor *parts[3] = {NULL};
    if (x->layout == weft_layout_id("sparse_csr")) {
        parts[0] = weft_sparse_crow_indices(x);
        parts[1] = weft_sparse_col_indices(x);
    } else {
        parts[0] = weft_sparse_indices_raw(x);
    }
    parts[2] = weft_sparse_values_raw(x);
    int64_t bytes = 0;
    for (int i = 0; i < 3; i++)
        if (parts[i]) /* inside the check's scope: released with it */
            bytes += weft_tensor_numel(parts[i]) * (int64_t)weft_dtype_size(parts[i]->dtype);
    weft_error_clear(); /* a part this layout lacks is no error of the model's */
    return bytes;
}

/* The model on one sample of ds (the section `data` names in messages); record: fill the
 * summary. */
static int check_on(struct trainer *t, weft_dataset *ds, const struct train_inputs *in,
                    const char *data, bool record)
{
    struct weft_dataloader_options o = *weft_dataloader_options(t->train_loader);
    o.batch_size = 1;
    o.shuffle = false;
    o.drop_last = false;
    o.num_workers = 0;
    o.num_replicas = 1;
    o.rank = 0;
    /* a validation or test set may lack fields the options of [data] name */
    for (int f = weft_dataset_num_fields(ds); f < WEFT_DATASET_MAX_FIELDS; f++)
        memset(&o.fields[f], 0, sizeof o.fields[f]);
    if (o.transforms_field >= weft_dataset_num_fields(ds))
        o.transforms = NULL;
    o.transforms_eval = true;
    weft_dataloader *dl = weft_dataloader_new(ds, &o);
    if (!dl)
        return weft_error_prefix("reading one sample of [%s] to check the model", data);
    weft_tensor *fields[WEFT_DATASET_MAX_FIELDS];
    int got = weft_dataloader_epoch(dl, 0);
    if (got == 0)
        got = weft_dataloader_next(dl, fields);
    if (got <= 0) {
        weft_dataloader_free(dl);
        return got < 0 ? weft_error_prefix("reading one sample of [%s] to check the model", data)
                       : train_check_samples(t->cfg, ds); /* no sample at all */
    }
    /* Evaluation mode, no autograd: no running statistics change, no random draw. */
    weft_module_train(t->model, false);
    bool prev = weft_no_grad_begin();
    int rc = train_batch_scope(fields, weft_dataloader_num_fields(dl)) != 0 ? weft_error_code() : 0;
    const char *file = weft_config_name(t->cfg), *last = "model";
    weft_tensor *x = rc == 0 ? train_batch_input(in, fields, t->device) : NULL;
    weft_tensor *target = rc == 0 ? train_batch_target(in, fields, t->device) : NULL;
    if (record)
        train_summary_free(&t->summary);
    if (x && record)
        t->summary.input_bytes = stored_bytes(x);
    if (rc == 0 && (!x || !target)) {
        char prefix[512];
        snprintf(prefix, sizeof prefix, "%s: one sample of [%s] could not be made the model's "
                                        "input and target", file, data);
        rc = blame(prefix, "making one sample the model's input and target");
    }
    if (rc == 0)
        rc = check_vocabulary(t, ds, in);
    weft_tensor *out = rc == 0 ? forward_named(t, x, data, record, &last) : NULL;
    if (rc == 0 && !out)
        rc = weft_error_code();
    if (rc == 0)
        rc = check_classes(t, ds, in, out, target, last);
    if (rc == 0 && !train_loss_compute(&t->loss, out, target)) {
        char prefix[512], so[128], st[128];
        snprintf(prefix, sizeof prefix, "%s: [loss] type = %s does not take the model's output "
                                        "(shape %s, from [%s]) and the target of [%s] (shape "
                                        "%s)",
                 file, weft_config_string(t->cfg, "loss", "type", "cross_entropy"),
                 shape_str(out, so, sizeof so), last, data, shape_str(target, st, sizeof st));
        rc = blame(prefix, "[loss] on one sample's output and target");
    }
    weft_scope_pop();
    weft_grad_mode_restore(prev);
    weft_module_train(t->model, true);
    weft_dataloader_free(dl);
    return rc;
}

int train_check_model(struct trainer *t)
{
    /* the validation and test sets too: a set whose samples the model does not take
     * would fail only after the first epoch */
    if (check_on(t, t->train_set, &t->inputs, "data", true) != 0 ||
        (t->own_val && check_on(t, t->val_set, &t->val_inputs, "data.val", false) != 0) ||
        (t->test_set && check_on(t, t->test_set, &t->test_inputs, "data.test", false) != 0))
        return weft_error_code();
    return 0;
}
