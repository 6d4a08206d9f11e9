/* apps/train/train_export.c: weft-train export: the config's model with a checkpoint's
 * weights written as an ONNX file (weft/onnx.h), and --check N: the file checked by
 * onnx.checker (python3-onnx, where installed) and run by ONNX Runtime (onnxruntime-node)
 * on N random inputs per shape against weft's own forward, printing the largest
 * difference.
 *
 *   weft-train export CONFIG --checkpoint M --out model.onnx [--opset 17]
 *       [--batch dynamic|N] [--seq dynamic|N] [--fold-batchnorm] [--external-data]
 *       [--check N [--atol 1e-4]] [--latency N [--ort-threads T]] [--set ...]
 *
 * The example input that traces the model has the shape of the config's data (one
 * sample of [data], batch 2 unless --batch fixes it; for token ids the data's sequence
 * length unless --seq fixes it). --check covers batch 1 and 7 (or the fixed one) and, for
 * token ids, sequence lengths 1, 17 and the data's (or the fixed one).
 *
 * ONNX Runtime runs in node: a script written next to the cases, whose require() finds
 * onnxruntime-node through $WEFT_ONNXRUNTIME_NODE (a node_modules folder), $NODE_PATH, or
 * build-onnx/node_modules of the source tree weft-train was built in (make onnx-deps). */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <weft/onnx.h>

#include "train.h"

int train_export_parse(struct train_export_args *a, int argc, char **argv, int i)
{
    static const char *const flags[] = {"--fold-batchnorm", "--external-data"};
    bool *flag_slots[] = {&a->fold_batchnorm, &a->external_data};
    for (int k = 0; k < 2; k++)
        if (!strcmp(argv[i], flags[k])) {
            *flag_slots[k] = true;
            return 1;
        }
    static const char *const valued[] = {"--opset", "--batch", "--seq", "--check", "--atol",
                                         "--latency", "--ort-threads"};
    const char **slots[] = {&a->opset, &a->batch, &a->seq, &a->check, &a->atol, &a->latency,
                            &a->ort_threads};
    for (int k = 0; k < 7; k++)
        if (!strcmp(argv[i], valued[k])) {
            if (i + 1 >= argc) {
                fprintf(stderr, "weft-train: %s needs a value\n", argv[i]);
                return -1;
            }
            *slots[k] = argv[i + 1];
            return 2;
        }
    return 0;
}

/* ---- the options ------------------------------------------------------------------------ */

/* "dynamic" (0) or a positive size. */
static int parse_size(const char *flag, const char *text, bool dynamic_ok, int64_t *out)
{
    *out = 0;
    if (!text || (dynamic_ok && !strcmp(text, "dynamic")))
        return 0;
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (*text && !*end && errno == 0 && v > 0 && v <= INT32_MAX) {
        *out = v;
        return 0;
    }
    return weft_error_set(WEFT_ERR_VALUE, "%s %s: expected %sa positive whole number", flag, text,
                          dynamic_ok ? "dynamic or " : "");
}

static int parse_options(const struct train_export_args *a, struct weft_onnx_options *o,
                         int64_t *check_n, double *atol, int64_t *latency_n, int64_t *threads)
{
    *threads = 1;
    if (parse_size("--latency", a->latency, false, latency_n) != 0 ||
        (a->ort_threads && parse_size("--ort-threads", a->ort_threads, false, threads) != 0))
        return weft_error_code();
    if (a->ort_threads && !a->latency)
        return weft_error_set(WEFT_ERR_VALUE, "--ort-threads belongs to --latency N");
    *o = weft_onnx_defaults();
    int64_t opset = 17;
    if ((a->opset && parse_size("--opset", a->opset, false, &opset) != 0) ||
        parse_size("--batch", a->batch, true, &o->batch) != 0 ||
        parse_size("--seq", a->seq, true, &o->seq) != 0 ||
        parse_size("--check", a->check, false, check_n) != 0)
        return weft_error_code();
    if (opset < WEFT_ONNX_OPSET_MIN || opset > WEFT_ONNX_OPSET_MAX)
        return weft_error_set(WEFT_ERR_VALUE, "--opset %s: weft writes opsets %d to %d "
                                              "(torch.onnx's default is 17)",
                              a->opset, WEFT_ONNX_OPSET_MIN, WEFT_ONNX_OPSET_MAX);
    o->opset = (int)opset;
    o->fold_batchnorm = a->fold_batchnorm;
    o->external_data = a->external_data ? WEFT_ONNX_EXTERNAL_ALWAYS : WEFT_ONNX_EXTERNAL_AUTO;
    *atol = 1e-4;
    if (a->atol) {
        char *end;
        *atol = strtod(a->atol, &end);
        if (!*a->atol || *end || !(*atol >= 0) || isinf(*atol))
            return weft_error_set(WEFT_ERR_VALUE, "--atol %s: expected a tolerance >= 0", a->atol);
    }
    if (a->atol && !a->check)
        return weft_error_set(WEFT_ERR_VALUE, "--atol belongs to --check N");
    return 0;
}

/* ---- inputs ---------------------------------------------------------------------------- */

/* What the model reads: one sample as the data loader makes it (after the reader's
 * dtype, normalisation and transforms) and, for token ids, their range. */
struct input_kind {
    int ndim;                         /* of one sample */
    int64_t shape[WEFT_MAX_DIMS];
    enum weft_dtype dtype;
    bool tokens;                      /* integer ids [B, T] */
    int64_t vocab;                    /* ids lie in [0, vocab) */
    int64_t seq;                      /* the data's sequence length */
    const char *field;                /* the data's field name, for messages */
    bool sparse;                      /* a sparse_linear first layer: padded rows */
    int64_t width, in_features;       /* its rows' width and feature count */
};

/* The model's input for the first sample of [data], as training makes it. */
static int describe_input(struct trainer *t, struct input_kind *k)
{
    memset(k, 0, sizeof *k);
    if (t->inputs.sparse) {
        const struct weft_dataset_field *f = weft_dataset_field(t->train_all, t->inputs.indices);
        k->sparse = true;
        k->width = f ? f->shape[0] : 1;
        k->in_features = t->inputs.in_features;
        k->field = t->inputs.indices_name;
        k->dtype = WEFT_F32;
        return 0;
    }
    struct weft_dataloader_options o = *weft_dataloader_options(t->train_loader);
    o.batch_size = 1;
    o.shuffle = false;
    o.drop_last = false;
    o.num_workers = 0;
    o.num_replicas = 1;
    o.rank = 0;
    o.transforms_eval = true;
    weft_dataloader *dl = weft_dataloader_new(t->train_all, &o);
    if (!dl)
        return weft_error_code();
    weft_tensor *fields[WEFT_DATASET_MAX_FIELDS];
    int got = weft_dataloader_epoch(dl, 0);
    if (got == 0)
        got = weft_dataloader_next(dl, fields);
    if (got <= 0) {
        weft_dataloader_free(dl);
        return got < 0 ? weft_error_code()
                       : weft_error_set(WEFT_ERR_CONFIG, "%s: [data] has no sample to trace the "
                                                         "model with", weft_config_name(t->cfg));
    }
    int rc = train_batch_scope(fields, weft_dataloader_num_fields(dl)) != 0 ? weft_error_code() : 0;
    weft_tensor *x = rc == 0 ? train_batch_input(&t->inputs, fields, WEFT_CPU) : NULL;
    if (rc == 0 && !x)
        rc = weft_error_code();
    if (rc == 0) {
        k->ndim = x->ndim - 1;
        memcpy(k->shape, x->shape + 1, (size_t)k->ndim * sizeof *k->shape);
        k->dtype = x->dtype;
        const struct weft_dataset_field *f = weft_dataset_field(t->train_all, t->inputs.input);
        const struct weft_dataset_field *target =
            t->inputs.target >= 0 ? weft_dataset_field(t->train_all, t->inputs.target) : NULL;
        k->field = f ? f->name : "input";
        k->tokens = k->ndim == 1 && !weft_dtype_is_floating(k->dtype) && k->dtype != WEFT_BOOL;
        if (k->tokens) {
            k->vocab = f && f->num_classes > 0                ? f->num_classes
                       : target && target->num_classes > 0 ? target->num_classes
                                                             : 2;
            k->seq = k->shape[0];
        }
    }
    weft_scope_pop();
    weft_dataloader_free(dl);
    return rc;
}

/* A random input [batch, ...] ([batch, seq] for token ids) on dev. */
static weft_tensor *random_input(const struct input_kind *k, int64_t batch, int64_t seq,
                                 weft_device dev)
{
    int64_t shape[WEFT_MAX_DIMS];
    shape[0] = batch;
    for (int d = 0; d < k->ndim; d++)
        shape[d + 1] = k->shape[d];
    if (k->tokens)
        return weft_randint(0, k->vocab, 2, (int64_t[]){batch, seq}, k->dtype, dev);
    if (weft_dtype_is_floating(k->dtype))
        return weft_randn(k->ndim + 1, shape, k->dtype, dev);
    return weft_randint(0, 2, k->ndim + 1, shape, k->dtype, dev);
}

/* Random padded sparse rows [batch, width] as the readers make them: each row a random
 * number of increasing feature indices, then -1; values normal. Host tensors. */
static int random_rows(const struct input_kind *k, int64_t batch, weft_tensor **indices,
                       weft_tensor **values)
{
    const int64_t shape[2] = {batch, k->width};
    *indices = weft_full(2, shape, -1, WEFT_I64, WEFT_CPU);
    *values = weft_randn(2, shape, WEFT_F32, WEFT_CPU);
    weft_tensor *draws = weft_randint(0, INT32_MAX, 2, shape, WEFT_I64, WEFT_CPU);
    if (!*indices || !*values || !draws)
        return weft_error_code();
    int64_t *ip = weft_tensor_data(*indices);
    const int64_t *r = weft_tensor_data(draws);
    float *vp = weft_tensor_data(*values);
    const int64_t gap = k->in_features / (k->width ? k->width : 1) > 1 ? k->in_features / k->width : 1;
    for (int64_t b = 0; b < batch; b++) {
        int64_t n = r[b * k->width] % (k->width + 1), at = -1;
        for (int64_t j = 0; j < k->width; j++) {
            at += 1 + r[b * k->width + j] % gap;
            if (j >= n || at >= k->in_features)
                vp[b * k->width + j] = 0; /* padding, as the readers leave it */
            else
                ip[b * k->width + j] = at;
        }
    }
    return 0;
}

/* One random input of the shape: weft's (x, on dev) and the ONNX graph's (feeds, named). */
static int make_input(struct trainer *t, const struct input_kind *k, int64_t batch, int64_t seq,
                      weft_tensor **x, weft_tensor *feeds[2], const char *names[2], int *n)
{
    if (!k->sparse) {
        *x = feeds[0] = random_input(k, batch, seq, t->device);
        names[0] = "input";
        *n = 1;
        return *x ? 0 : weft_error_code();
    }
    weft_tensor *fields[WEFT_DATASET_MAX_FIELDS] = {0};
    if (random_rows(k, batch, &feeds[0], &feeds[1]) != 0)
        return weft_error_code();
    fields[t->inputs.indices] = feeds[0];
    fields[t->inputs.values] = feeds[1];
    names[0] = t->inputs.indices_name;
    names[1] = t->inputs.values_name;
    *n = 2;
    *x = train_batch_input(&t->inputs, fields, t->device);
    return *x ? 0 : weft_error_code();
}

/* ---- ONNX Runtime through node ------------------------------------------------------- */

/* The runner: reads the cases, runs each through the model, compares with weft's output
 * and prints one line per shape; writes the largest difference to result.txt. */
static const char runner_js[] =
    "const fs = require('fs');\n"
    "let ort;\n"
    "try { ort = require('onnxruntime-node'); } catch (e) {\n"
    "  console.error('onnxruntime-node is not installed (' + e.message.split('\\n')[0] + ')');\n"
    "  process.exit(3);\n"
    "}\n"
    "const [model, dir, mode, runs, threads] = process.argv.slice(2);\n"
    "const cases = JSON.parse(fs.readFileSync(dir + '/cases.json'));\n"
    "const blob = fs.readFileSync(dir + '/cases.bin');\n"
    "const types = {float32: Float32Array, float64: Float64Array, int64: BigInt64Array,\n"
    "               int32: Int32Array, uint8: Uint8Array};\n"
    "function view(type, off, len) {\n"
    "  const T = types[type];\n"
    "  return new T(blob.buffer.slice(blob.byteOffset + off, blob.byteOffset + off + len));\n"
    "}\n"
    "async function latency() {\n"
    "  const n = Number(threads);\n"
    "  const session = await ort.InferenceSession.create(model, {intraOpNumThreads: n, interOpNumThreads: 1});\n"
    "  const c = cases[0], feeds = {};\n"
    "  for (const i of c.inputs) feeds[i.name] = new ort.Tensor(i.type, view(i.type, i.offset, i.length), i.dims);\n"
    "  for (let k = 0; k < 5; k++) await session.run(feeds);\n"
    "  const ms = [];\n"
    "  for (let k = 0; k < Number(runs); k++) {\n"
    "    const t0 = process.hrtime.bigint();\n"
    "    await session.run(feeds);\n"
    "    ms.push(Number(process.hrtime.bigint() - t0) / 1e6);\n"
    "  }\n"
    "  ms.sort((a, b) => a - b);\n"
    "  const median = ms[Math.floor(ms.length / 2)];\n"
    "  console.log('latency: onnxruntime ' + c.label + ': median ' + median.toFixed(3) + ' ms, min ' + ms[0].toFixed(3) + ' ms (' + ms.length + ' runs, ' + n + ' threads, ONNX Runtime ' + ort.env.versions.common + ')');\n"
    "}\n"
    "(async () => {\n"
    "  if (mode === 'latency') return latency();\n"
    "  /* one thread: the check compares values, and weft's threads share the cores */\n"
    "  const session = await ort.InferenceSession.create(model, {intraOpNumThreads: 1, interOpNumThreads: 1});\n"
    "  const groups = new Map();\n"
    "  let worst = 0;\n"
    "  for (const c of cases) {\n"
    "    const feeds = {};\n"
    "    for (const i of c.inputs) feeds[i.name] = new ort.Tensor(i.type, view(i.type, i.offset, i.length), i.dims);\n"
    "    const out = (await session.run(feeds))[session.outputNames[0]];\n"
    "    const want = view('float32', c.output.offset, c.output.length);\n"
    "    if (out.dims.join(',') !== c.output.dims.join(','))\n"
    "      throw new Error(c.label + ': ONNX Runtime gave shape [' + out.dims + '], weft [' + c.output.dims + ']');\n"
    "    let diff = 0;\n"
    "    for (let j = 0; j < want.length; j++) {\n"
    "      const d = Math.abs(Number(out.data[j]) - want[j]);\n"
    "      if (!(d <= diff)) diff = d;\n"
    "    }\n"
    "    const g = groups.get(c.label) || {n: 0, max: 0};\n"
    "    g.n++; if (!(diff <= g.max)) g.max = diff; groups.set(c.label, g);\n"
    "    if (!(diff <= worst)) worst = diff;\n"
    "  }\n"
    "  for (const [label, g] of groups)\n"
    "    console.log('check: ' + label + ': ' + g.n + ' inputs, largest |weft - onnxruntime| ' + g.max.toExponential(2));\n"
    "  console.log('check: ONNX Runtime ' + ort.env.versions.common + ', ' + session.inputNames.join(', ') + ' -> ' + session.outputNames.join(', '));\n"
    "  fs.writeFileSync(dir + '/result.txt', String(worst) + '\\n');\n"
    "})().catch(e => { console.error('check: ' + e.message); process.exit(1); });\n";

struct cases {
    char dir[4096];
    FILE *json, *bin;
    uint64_t offset;
    int n;
};

static int cases_open(struct cases *c)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(c->dir, sizeof c->dir, "%s/weft-onnx-check.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(c->dir))
        return weft_error_set(WEFT_ERR_IO, "--check: cannot create a directory for the inputs "
                                           "(%s): %s", c->dir, strerror(errno));
    char path[4200];
    snprintf(path, sizeof path, "%s/cases.json", c->dir);
    c->json = fopen(path, "w");
    snprintf(path, sizeof path, "%s/cases.bin", c->dir);
    c->bin = fopen(path, "wb");
    snprintf(path, sizeof path, "%s/check.js", c->dir);
    FILE *js = fopen(path, "w");
    bool ok = c->json && c->bin && js && fputs(runner_js, js) >= 0;
    if (js && fclose(js) != 0)
        ok = false;
    if (!ok)
        return weft_error_set(WEFT_ERR_IO, "--check: cannot write in %s: %s", c->dir,
                              strerror(errno));
    fputs("[\n", c->json);
    return 0;
}

static void cases_remove(struct cases *c)
{
    if (!c->dir[0])
        return;
    if (c->json)
        fclose(c->json);
    if (c->bin)
        fclose(c->bin);
    c->json = c->bin = NULL;
    static const char *const files[] = {"cases.json", "cases.bin", "check.js", "result.txt"};
    char path[4200];
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/%s", c->dir, files[i]);
        unlink(path);
    }
    rmdir(c->dir);
}

static const char *js_type(enum weft_dtype dt)
{
    switch (dt) {
    case WEFT_F32: return "float32";
    case WEFT_F64: return "float64";
    case WEFT_I64: return "int64";
    case WEFT_I32: return "int32";
    case WEFT_U8: return "uint8";
    default: return NULL;
    }
}

/* t's bytes (host, contiguous) appended to the blob; its JSON description into buf. */
static int add_tensor(struct cases *c, const char *name, weft_tensor *t, char *buf, size_t size)
{
    weft_tensor *h = weft_contiguous(weft_to_device(t, WEFT_CPU));
    if (!h)
        return weft_error_code();
    const char *type = js_type(h->dtype);
    if (!type)
        return weft_error_set(WEFT_ERR_TYPE, "--check: inputs of dtype %s are not supported",
                              weft_dtype_name(h->dtype));
    uint64_t n = (uint64_t)weft_tensor_numel(h) * weft_tensor_itemsize(h);
    if (fwrite(weft_tensor_data(h), 1, (size_t)n, c->bin) != n)
        return weft_error_set(WEFT_ERR_IO, "--check: writing %s/cases.bin: %s", c->dir,
                              strerror(errno));
    size_t used = (size_t)snprintf(buf, size, "{\"name\": \"%s\", \"type\": \"%s\", \"dims\": [",
                                   name ? name : "", type);
    for (int d = 0; d < h->ndim && used < size; d++)
        used += (size_t)snprintf(buf + used, size - used, "%s%lld", d ? ", " : "",
                                 (long long)h->shape[d]);
    if (used < size)
        snprintf(buf + used, size - used, "], \"offset\": %llu, \"length\": %llu}",
                 (unsigned long long)c->offset, (unsigned long long)n);
    c->offset += n;
    return 0;
}

/* One case: the model's input(s) as named in the ONNX graph, and weft's output. */
static int add_case(struct cases *c, const char *label, int n_in, const char *const *names,
                    weft_tensor *const *inputs, weft_tensor *output)
{
    char in[8][512], out[512];
    for (int i = 0; i < n_in; i++)
        if (add_tensor(c, names[i], inputs[i], in[i], sizeof in[i]) != 0)
            return weft_error_code();
    if (add_tensor(c, NULL, weft_to_dtype(output, WEFT_F32), out, sizeof out) != 0)
        return weft_error_code();
    fprintf(c->json, "%s{\"label\": \"%s\", \"inputs\": [", c->n++ ? ",\n" : "", label);
    for (int i = 0; i < n_in; i++)
        fprintf(c->json, "%s%s", i ? ", " : "", in[i]);
    fprintf(c->json, "], \"output\": %s}", out);
    return 0;
}

/* Where onnxruntime-node may be: $WEFT_ONNXRUNTIME_NODE, $NODE_PATH, and the source
 * tree's build-onnx/node_modules next to the build folder weft-train runs from. */
static void node_path(char *buf, size_t size)
{
    const char *mine = getenv("WEFT_ONNXRUNTIME_NODE"), *theirs = getenv("NODE_PATH");
    size_t used = (size_t)snprintf(buf, size, "%s%s%s", mine ? mine : "", mine ? ":" : "",
                                   theirs ? theirs : "");
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0 || used >= size)
        return;
    exe[n] = '\0';
    /* <tree>/<build>/apps/weft-train -> <tree>/build-onnx/node_modules */
    for (int up = 0; up < 3; up++) {
        char *slash = strrchr(exe, '/');
        if (slash)
            *slash = '\0';
    }
    snprintf(buf + used, size - used, "%s%s/build-onnx/node_modules", used ? ":" : "", exe);
}

/* Runs the runner on the cases; its lines go to stdout. The largest difference in *worst.
 * 0, or negative with the error (node or onnxruntime-node missing: WEFT_ERR_VALUE). */
static int run_runtime(struct cases *c, const char *model, const char *const mode[3],
                       double *worst)
{
    char path[8192], script[4200];
    node_path(path, sizeof path);
    snprintf(script, sizeof script, "%s/check.js", c->dir);
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0)
        return weft_error_set(WEFT_ERR_IO, "--check: fork: %s", strerror(errno));
    if (pid == 0) {
        setenv("NODE_PATH", path, 1);
        execlp("node", "node", script, model, c->dir, mode[0], mode[1], mode[2], (char *)NULL);
        fprintf(stderr, "--check: cannot run node: %s\n", strerror(errno));
        _exit(127);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
    if (code == 127 || code == 3)
        return weft_error_set(WEFT_ERR_VALUE, "--check needs ONNX Runtime: %s; `make onnx-deps` "
                                              "installs it (node and onnxruntime-node), or point "
                                              "WEFT_ONNXRUNTIME_NODE at a node_modules folder "
                                              "holding onnxruntime-node",
                              code == 127 ? "node is not installed" : "onnxruntime-node was not "
                                                                      "found");
    if (code != 0)
        return weft_error_set(WEFT_ERR_RUNTIME, "--check: ONNX Runtime failed on %s (exit %d)",
                              model, code);
    if (!worst)
        return 0;
    snprintf(path, sizeof path, "%s/result.txt", c->dir);
    FILE *f = fopen(path, "r");
    int got = f ? fscanf(f, "%lf", worst) : 0;
    if (f)
        fclose(f);
    if (got != 1)
        return weft_error_set(WEFT_ERR_RUNTIME, "--check: the runner left no result in %s", path);
    return 0;
}

/* onnx.checker.check_model(path, full_check=True) through a python3 that has onnx. */
static void run_checker(const char *model)
{
    static const char *const pythons[] = {"python3", "/usr/bin/python3"};
    /* an opset newer than the checker's own is not its to judge */
    const char *code = "import sys, onnx\n"
                       "m = onnx.load(sys.argv[1], load_external_data=False)\n"
                       "mine = onnx.defs.onnx_opset_version()\n"
                       "if m.opset_import[0].version > mine:\n"
                       "    print('check: onnx.checker skipped: onnx %s knows opsets up to %d' %\n"
                       "          (onnx.__version__, mine))\n"
                       "    sys.exit(0)\n"
                       "onnx.checker.check_model(sys.argv[1], full_check=True)\n"
                       "print('check: onnx.checker (onnx %s, full_check): ok' % onnx.__version__)\n";
    for (int i = 0; i < 2; i++) {
        char probe[256];
        snprintf(probe, sizeof probe, "%s -c 'import onnx' >/dev/null 2>&1", pythons[i]);
        if (system(probe) != 0)
            continue;
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            execlp(pythons[i], pythons[i], "-c", code, model, (char *)NULL);
            _exit(127);
        }
        int status = 0;
        if (pid > 0)
            while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
                ;
        if (pid < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
            printf("check: onnx.checker rejected %s (its message is above)\n", model);
        return;
    }
    printf("check: onnx.checker skipped: no python3 with the onnx module (Debian's python3-onnx)\n");
}

/* The shapes --check runs: batch 1 and 7 and, for token ids, sequences 1, 17 and the
 * data's; fixed sizes replace them. */
static int check_shapes(const struct input_kind *k, const struct weft_onnx_options *o,
                        int64_t batches[2], int64_t seqs[3], int *nb, int *ns)
{
    *nb = 0;
    *ns = 0;
    if (o->batch > 0)
        batches[(*nb)++] = o->batch;
    else {
        batches[(*nb)++] = 1;
        batches[(*nb)++] = 7;
    }
    if (!k->tokens) {
        seqs[(*ns)++] = 0;
        return 0;
    }
    if (o->seq > 0) {
        seqs[(*ns)++] = o->seq;
        return 0;
    }
    const int64_t want[3] = {1, 17, k->seq};
    for (int i = 0; i < 3; i++)
        if (want[i] <= k->seq && (*ns == 0 || seqs[*ns - 1] != want[i]))
            seqs[(*ns)++] = want[i];
    return 0;
}

static int check(struct trainer *t, const struct input_kind *k, const struct weft_onnx_options *o,
                 int64_t n, double atol, const char *model, bool *passed)
{
    run_checker(model);
    struct cases c = {0};
    int rc = cases_open(&c);
    int64_t batches[2], seqs[3];
    int nb, ns;
    check_shapes(k, o, batches, seqs, &nb, &ns);
    for (int b = 0; b < nb && rc == 0; b++)
        for (int s = 0; s < ns && rc == 0; s++) {
            char label[64];
            if (k->tokens)
                snprintf(label, sizeof label, "batch %lld, sequence %lld", (long long)batches[b],
                         (long long)seqs[s]);
            else
                snprintf(label, sizeof label, "batch %lld", (long long)batches[b]);
            for (int64_t i = 0; i < n && rc == 0; i++) {
                weft_scope_push();
                weft_tensor *x, *feeds[2];
                const char *names[2];
                int nin;
                rc = make_input(t, k, batches[b], seqs[s], &x, feeds, names, &nin);
                weft_tensor *y = rc == 0 ? weft_module_forward(t->model, x) : NULL;
                rc = y ? add_case(&c, label, nin, names, feeds, y) : weft_error_code();
                weft_scope_pop();
            }
        }
    if (rc == 0) {
        fputs("\n]\n", c.json);
        if (fclose(c.json) != 0 || fclose(c.bin) != 0)
            rc = weft_error_set(WEFT_ERR_IO, "--check: writing in %s: %s", c.dir, strerror(errno));
        c.json = c.bin = NULL;
    }
    double worst = 0;
    const char *const mode[3] = {"check", "0", "1"};
    if (rc == 0)
        rc = run_runtime(&c, model, mode, &worst);
    cases_remove(&c);
    if (rc != 0)
        return rc;
    *passed = worst <= atol;
    printf("check: largest difference %.3g %s the tolerance %.3g\n", worst,
           *passed ? "within" : "ABOVE", atol);
    return 0;
}

/* --latency N: weft's forward and ONNX Runtime's at batch 1 (the data's sequence length for
 * token ids), N timed runs each after 5 untimed, medians and minimums. ONNX Runtime gets
 * `threads` intra-op threads; weft runs with its config's ([cpu] threads). */
static int compare_ms(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int latency(struct trainer *t, const struct input_kind *k, int64_t runs, int64_t threads,
                   const char *model)
{
    struct cases c = {0};
    weft_tensor *x, *feeds[2];
    const char *names[2];
    int nin;
    double *ms = calloc((size_t)runs, sizeof *ms);
    int rc = ms ? cases_open(&c) : weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of memory");
    char label[64];
    if (k->tokens)
        snprintf(label, sizeof label, "batch 1, sequence %lld", (long long)k->seq);
    else
        snprintf(label, sizeof label, "batch 1");
    weft_scope_push();
    if (rc == 0)
        rc = make_input(t, k, 1, k->seq, &x, feeds, names, &nin);
    for (int64_t i = -5; i < runs && rc == 0; i++) {
        weft_scope_push();
        double t0 = train_now();
        weft_tensor *y = weft_module_forward(t->model, x);
        double dt = train_now() - t0;
        if (i == runs - 1 && y)
            rc = add_case(&c, label, nin, names, feeds, y);
        weft_scope_pop();
        if (!y)
            rc = weft_error_code();
        else if (i >= 0)
            ms[i] = dt * 1e3;
    }
    weft_scope_pop();
    if (rc == 0) {
        qsort(ms, (size_t)runs, sizeof *ms, compare_ms);
        printf("latency: weft %s: median %.3f ms, min %.3f ms (%lld runs)\n", label,
               ms[runs / 2], ms[0], (long long)runs);
        fputs("\n]\n", c.json);
        if (fclose(c.json) != 0 || fclose(c.bin) != 0)
            rc = weft_error_set(WEFT_ERR_IO, "--latency: writing in %s: %s", c.dir, strerror(errno));
        c.json = c.bin = NULL;
    }
    char n_runs[32], n_threads[32];
    snprintf(n_runs, sizeof n_runs, "%lld", (long long)runs);
    snprintf(n_threads, sizeof n_threads, "%lld", (long long)threads);
    const char *const mode[3] = {"latency", n_runs, n_threads};
    if (rc == 0)
        rc = run_runtime(&c, model, mode, NULL);
    if (c.dir[0])
        cases_remove(&c);
    free(ms);
    return rc;
}

/* ---- the command ---------------------------------------------------------------------- */

static double file_mib(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (double)st.st_size / (1 << 20) : 0;
}

int train_export_command(struct trainer *t, const struct train_export_args *a, const char *out)
{
    struct weft_onnx_options o;
    int64_t check_n = 0, latency_n = 0, ort_threads = 1;
    double atol = 1e-4;
    struct input_kind k;
    if (parse_options(a, &o, &check_n, &atol, &latency_n, &ort_threads) != 0 ||
        describe_input(t, &k) != 0)
        return weft_error_code();
    if (o.seq > 0 && !k.tokens)
        return weft_error_set(WEFT_ERR_VALUE, "--seq %s: the model's input is not a sequence of "
                                              "token ids (its data field '%s' is %s)",
                              a->seq, k.field, weft_dtype_name(k.dtype));
    weft_module_train(t->model, false);
    bool grad = weft_no_grad_begin();
    weft_scope_push();
    weft_tensor *x, *feeds[2];
    const char *names[2];
    int nin;
    int rc = make_input(t, &k, o.batch > 0 ? o.batch : 2, o.seq > 0 ? o.seq : k.seq, &x, feeds,
                        names, &nin);
    double t0 = train_now(), wall0 = (double)time(NULL) - 1;
    if (rc == 0)
        rc = weft_onnx_export(t->model, x, &o, out);
    double seconds = train_now() - t0;
    weft_scope_pop();
    if (rc == 0) {
        char data[4200];
        snprintf(data, sizeof data, "%s.data", out);
        printf("exported: %s (ONNX opset %d, %.2f MiB", out, o.opset, file_mib(out));
        struct stat st;
        if (stat(data, &st) == 0 && (double)st.st_mtime >= wall0) /* written now */
            printf(", weights in %s: %.2f MiB", data, file_mib(data));
        printf(") in %.3f s\n", seconds);
    }
    bool passed = true;
    if (rc == 0 && check_n > 0)
        rc = check(t, &k, &o, check_n, atol, out, &passed);
    if (rc == 0 && latency_n > 0)
        rc = latency(t, &k, latency_n, ort_threads, out);
    weft_grad_mode_restore(grad);
    if (rc != 0)
        return rc;
    return passed ? 0 : 1;
}
