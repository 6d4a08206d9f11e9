/* nn/onnx_write.c: the graph as an ONNX ModelProto on disk, encoded by hand with the
 * protobuf encoder train/'s TensorBoard writer uses (protobuf/pb.h): an ONNX model needs
 * a dozen message types of onnx.proto, and writing them directly costs less than a
 * protobuf library and generated code would, with the weights written straight from the
 * tensors (referenced, never copied into the message).
 *
 * The field numbers are onnx.proto's (ONNX 1.12, IR 8). The files are written to
 * temporary names and renamed when complete: the data file first, then the model. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "onnx_internal.h"
#include "pb.h"
#include "weft/version.h"

#define PROTOBUF_LIMIT ((uint64_t)INT32_MAX) /* one message's bytes, as protobuf reads */
#define EXTERNAL_MIN_BYTES 1024              /* smaller initializers stay in the model */
#define EXTERNAL_ALIGN 4096                  /* data offsets, so runtimes can map them */

/* Where an initializer's bytes go: in the model (offset < 0) or at offset of the data
 * file. */
struct placement {
    int64_t offset;
    uint64_t nbytes;
};

struct out_files {
    const char *path;
    char *tmp, *data_path, *data_tmp, *data_location; /* data_location: relative name */
};

static uint64_t nbytes_of(const weft_tensor *t)
{
    return (uint64_t)weft_tensor_numel(t) * weft_tensor_itemsize(t);
}

/* ---- messages ------------------------------------------------------------------------ */

/* TensorProto: dims 1, data_type 2, name 8, raw_data 9, external_data 13,
 * data_location 14. */
static void tensor_proto(struct pb *m, const char *name, const weft_tensor *t,
                         const struct placement *at, const char *location)
{
    for (int d = 0; d < t->ndim; d++)
        pb_int(m, 1, t->shape[d]);
    pb_int(m, 2, onnx_dtype(t->dtype));
    if (name)
        pb_string(m, 8, name);
    if (!at || at->offset < 0) {
        pb_bytes_ref(m, 9, weft_tensor_data(t), nbytes_of(t));
        return;
    }
    char offset[32], length[32];
    snprintf(offset, sizeof offset, "%lld", (long long)at->offset);
    snprintf(length, sizeof length, "%llu", (unsigned long long)at->nbytes);
    const char *kv[3][2] = {{"location", location}, {"offset", offset}, {"length", length}};
    for (int i = 0; i < 3; i++) {
        struct pb e = PB_INIT;
        pb_string(&e, 1, kv[i][0]);
        pb_string(&e, 2, kv[i][1]);
        pb_message(m, 13, &e);
        pb_free(&e);
    }
    pb_int(m, 14, 1); /* EXTERNAL */
}

/* AttributeProto: name 1, f 2, i 3, s 4, t 5, ints 8, strings 9, type 20. */
static void attribute(struct pb *m, const struct onnx_attr *a)
{
    struct pb at = PB_INIT;
    pb_string(&at, 1, a->name);
    switch (a->type) {
    case ONNX_ATTR_FLOAT: pb_float(&at, 2, a->f); break;
    case ONNX_ATTR_INT: pb_int(&at, 3, a->i); break;
    case ONNX_ATTR_STRING: pb_string(&at, 4, a->s ? a->s : ""); break;
    case ONNX_ATTR_TENSOR: {
        struct pb t = PB_INIT;
        tensor_proto(&t, NULL, a->t, NULL, NULL);
        pb_message(&at, 5, &t);
        pb_free(&t);
        break;
    }
    case ONNX_ATTR_INTS:
        for (int i = 0; i < a->n; i++)
            pb_int(&at, 8, a->ints[i]);
        break;
    case ONNX_ATTR_STRINGS:
        for (int i = 0; i < a->n; i++)
            pb_string(&at, 9, a->strings[i]);
        break;
    }
    pb_int(&at, 20, a->type);
    pb_message(m, 5, &at);
    pb_free(&at);
}

/* NodeProto: input 1, output 2, name 3, op_type 4, attribute 5. */
static void node_proto(struct pb *m, const struct weft_onnx_node *n)
{
    struct pb node = PB_INIT;
    for (int i = 0; i < n->n_in; i++)
        pb_string(&node, 1, n->in[i]);
    for (int i = 0; i < n->n_out; i++)
        pb_string(&node, 2, n->out[i]);
    pb_string(&node, 3, n->name);
    pb_string(&node, 4, n->op);
    for (int a = 0; a < n->n_attr; a++)
        attribute(&node, &n->attrs[a]);
    pb_message(m, 1, &node);
    pb_free(&node);
}

/* ValueInfoProto { name 1, type 2: TypeProto { tensor_type 1: { elem_type 1, shape 2:
 * TensorShapeProto { dim 1: { dim_value 1 | dim_param 2 } } } } }. */
static void value_info(struct pb *m, unsigned field, const struct onnx_io *io)
{
    struct pb shape = PB_INIT, tensor = PB_INIT, type = PB_INIT, vi = PB_INIT;
    for (int d = 0; d < io->ndim; d++) {
        struct pb dim = PB_INIT;
        if (io->params[d])
            pb_string(&dim, 2, io->params[d]);
        else
            pb_int(&dim, 1, io->shape[d]);
        pb_message(&shape, 1, &dim);
        pb_free(&dim);
    }
    pb_int(&tensor, 1, onnx_dtype(io->dtype));
    pb_message(&tensor, 2, &shape);
    pb_message(&type, 1, &tensor);
    pb_string(&vi, 1, io->name);
    pb_message(&vi, 2, &type);
    pb_message(m, field, &vi);
    pb_free(&shape);
    pb_free(&tensor);
    pb_free(&type);
    pb_free(&vi);
}

/* The IR version that goes with an opset (onnx/helper.py's VERSION_TABLE). */
static int ir_version(int opset)
{
    return opset <= 18 ? 8 : opset <= 20 ? 9 : 10;
}

/* ModelProto: ir_version 1, producer_name 2, producer_version 3, graph 7, opset_import 8.
 * GraphProto: node 1, name 2, initializer 5, input 11, output 12. */
static void model_proto(struct pb *m, const weft_onnx_graph *g, const struct placement *at,
                        const char *location)
{
    struct pb graph = PB_INIT;
    for (size_t i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i]->removed)
            node_proto(&graph, g->nodes[i]);
    pb_string(&graph, 2, weft_module_type_name(g->root));
    for (size_t i = 0; i < g->n_inits; i++) {
        struct pb t = PB_INIT;
        tensor_proto(&t, g->inits[i].name, g->inits[i].t, at ? &at[i] : NULL, location);
        pb_message(&graph, 5, &t);
        pb_free(&t);
    }
    for (size_t i = 0; i < g->n_inputs; i++)
        value_info(&graph, 11, &g->inputs[i]);
    value_info(&graph, 12, &g->output);

    struct pb opset = PB_INIT;
    pb_string(&opset, 1, "");
    pb_int(&opset, 2, g->o.opset);
    pb_int(m, 1, ir_version(g->o.opset));
    pb_string(m, 2, "weft");
    pb_string(m, 3, WEFT_VERSION_STRING);
    pb_message(m, 7, &graph);
    pb_message(m, 8, &opset);
    pb_free(&graph);
    pb_free(&opset);
}

/* ---- files ------------------------------------------------------------------------- */

static int io_error(const char *path, const char *what, const char *file, int err)
{
    return weft_error_set(WEFT_ERR_IO, "ONNX export: cannot write '%s' (%s '%s'): %s", path,
                          what, file, strerror(err));
}

/* A fresh temporary file (never one reached through a stale name or a planted link). */
static FILE *create_tmp(const char *path, const char *tmp)
{
    unlink(tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0) {
        io_error(path, "creating the temporary file", tmp, errno);
        return NULL;
    }
    FILE *f = fdopen(fd, "wb");
    if (!f) {
        io_error(path, "opening", tmp, errno);
        close(fd);
        unlink(tmp);
    }
    return f;
}

/* Flushes, syncs and closes f; 0 or the error. */
static int finish_file(const char *path, const char *tmp, FILE *f, int rc)
{
    if (rc == 0 && (fflush(f) != 0 || fsync(fileno(f)) != 0))
        rc = io_error(path, "writing", tmp, errno);
    if (fclose(f) != 0 && rc == 0)
        rc = io_error(path, "closing", tmp, errno);
    return rc;
}

/* Every initializer of EXTERNAL_MIN_BYTES or more into the data file, each at an aligned
 * offset; at[] says where. */
static int write_data(const weft_onnx_graph *g, const struct out_files *of, struct placement *at)
{
    FILE *f = create_tmp(of->path, of->data_tmp);
    if (!f)
        return weft_error_code();
    static const unsigned char zeros[EXTERNAL_ALIGN];
    uint64_t offset = 0;
    int rc = 0;
    for (size_t i = 0; i < g->n_inits && rc == 0; i++) {
        const weft_tensor *t = g->inits[i].t;
        uint64_t n = nbytes_of(t);
        at[i] = (struct placement){-1, n};
        if (n < EXTERNAL_MIN_BYTES)
            continue;
        uint64_t pad = (EXTERNAL_ALIGN - offset % EXTERNAL_ALIGN) % EXTERNAL_ALIGN;
        if ((pad && fwrite(zeros, 1, (size_t)pad, f) != pad) ||
            fwrite(weft_tensor_data(t), 1, (size_t)n, f) != n)
            rc = io_error(of->path, "writing", of->data_tmp, errno);
        offset += pad;
        at[i].offset = (int64_t)offset;
        offset += n;
    }
    rc = finish_file(of->path, of->data_tmp, f, rc);
    if (rc != 0)
        unlink(of->data_tmp);
    return rc;
}

static int write_model(const struct out_files *of, const struct pb *m)
{
    FILE *f = create_tmp(of->path, of->tmp);
    if (!f)
        return weft_error_code();
    int rc = pb_write(m, f) != 0 ? io_error(of->path, "writing", of->tmp, errno) : 0;
    rc = finish_file(of->path, of->tmp, f, rc);
    if (rc != 0)
        unlink(of->tmp);
    return rc;
}

/* fsync of the directory holding path, so the renames are durable (EINVAL: a file
 * system that cannot sync a directory). */
static void sync_directory(const char *path)
{
    char *dir = weft_strdup(path);
    if (!dir) {
        weft_error_clear(); /* the file is complete; durability is best effort here */
        return;
    }
    char *slash = strrchr(dir, '/');
    if (!slash)
        strcpy(dir, ".");
    else
        slash[slash == dir ? 1 : 0] = '\0';
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    free(dir);
}

static int make_names(const char *path, struct out_files *of)
{
    size_t n = strlen(path) + 48;
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    of->path = path;
    of->tmp = malloc(n);
    of->data_path = malloc(n);
    of->data_tmp = malloc(n);
    of->data_location = malloc(n);
    if (!of->tmp || !of->data_path || !of->data_tmp || !of->data_location)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "ONNX export: out of host memory");
    long pid = (long)getpid();
    snprintf(of->tmp, n, "%s.tmp.%ld", path, pid);
    snprintf(of->data_path, n, "%s.data", path);
    snprintf(of->data_tmp, n, "%s.data.tmp.%ld", path, pid);
    snprintf(of->data_location, n, "%s.data", base);
    return 0;
}

static void free_names(struct out_files *of)
{
    free(of->tmp);
    free(of->data_path);
    free(of->data_tmp);
    free(of->data_location);
}

static const char *human_bytes(uint64_t n, char *buf, size_t size)
{
    if (n >= (1ull << 30))
        snprintf(buf, size, "%.2f GiB", (double)n / (double)(1ull << 30));
    else
        snprintf(buf, size, "%.1f MiB", (double)n / (double)(1ull << 20));
    return buf;
}

int onnx_write(weft_onnx_graph *g, const char *path)
{
    if (!path || !*path)
        return weft_error_set(WEFT_ERR_VALUE, "ONNX export: no output path given");
    struct out_files of = {0};
    struct placement *at = NULL;
    struct pb inline_model = PB_INIT, model = PB_INIT;
    int rc = make_names(path, &of);
    if (rc != 0)
        goto out;
    model_proto(&inline_model, g, NULL, NULL);
    if (pb_failed(&inline_model)) {
        rc = weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "ONNX export: out of host memory encoding %s",
                            path);
        goto out;
    }
    uint64_t limit = g->o.max_inline_bytes ? g->o.max_inline_bytes : PROTOBUF_LIMIT;
    bool external = g->o.external_data == WEFT_ONNX_EXTERNAL_ALWAYS ||
                    (inline_model.size > limit && g->o.external_data == WEFT_ONNX_EXTERNAL_AUTO);
    char size[32], lim[32];
    if (!external && inline_model.size > limit) {
        rc = weft_error_set(WEFT_ERR_VALUE, "ONNX export: %s: the model would be %s, above the "
                                            "%s one protobuf message may hold; export its "
                                            "weights as external data (--external-data, "
                                            "options.external_data)",
                            path, human_bytes(inline_model.size, size, sizeof size),
                            human_bytes(limit, lim, sizeof lim));
        goto out;
    }
    const struct pb *chosen = &inline_model;
    if (external) {
        at = calloc(g->n_inits ? g->n_inits : 1, sizeof *at);
        if (!at) {
            rc = weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "ONNX export: out of host memory");
            goto out;
        }
        if ((rc = write_data(g, &of, at)) != 0)
            goto out;
        model_proto(&model, g, at, of.data_location);
        if (pb_failed(&model) || model.size > limit) {
            rc = pb_failed(&model)
                     ? weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "ONNX export: out of host memory")
                     : weft_error_set(WEFT_ERR_VALUE, "ONNX export: %s: the graph without its "
                                                      "weights is still %s, above the limit of "
                                                      "%s", path,
                                      human_bytes(model.size, size, sizeof size),
                                      human_bytes(limit, lim, sizeof lim));
            unlink(of.data_tmp);
            goto out;
        }
        chosen = &model;
    }
    if ((rc = write_model(&of, chosen)) != 0) {
        if (external)
            unlink(of.data_tmp);
        goto out;
    }
    if (external && rename(of.data_tmp, of.data_path) != 0) {
        rc = io_error(path, "renaming", of.data_tmp, errno);
        unlink(of.data_tmp);
        unlink(of.tmp);
        goto out;
    }
    if (rename(of.tmp, path) != 0) {
        rc = io_error(path, "renaming", of.tmp, errno);
        unlink(of.tmp);
        if (external)
            unlink(of.data_path);
        goto out;
    }
    sync_directory(path);
out:
    pb_free(&inline_model);
    pb_free(&model);
    free(at);
    free_names(&of);
    return rc;
}
