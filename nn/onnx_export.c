/* nn/onnx_export.c: weft_onnx_export: the options checked, the model traced in eval mode
 * through its types' onnx_export methods, the graph's input and output declared (with
 * their symbolic dims), the optional folding, and the file written. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_internal.h"
#include "weft/layout.h"
#include "weft/ops.h"

struct weft_onnx_options weft_onnx_defaults(void)
{
    return (struct weft_onnx_options){.opset = 17};
}

static bool is_token_ids(const weft_tensor *x)
{
    return x->ndim == 2 && !weft_dtype_is_floating(x->dtype) && x->dtype != WEFT_BOOL &&
           !weft_tensor_is_sparse(x);
}

static int check_options(const struct weft_onnx_options *o, const weft_tensor *x)
{
    if (o->opset < WEFT_ONNX_OPSET_MIN || o->opset > WEFT_ONNX_OPSET_MAX)
        return weft_error_set(WEFT_ERR_VALUE, "ONNX export: opset %d is not supported: weft "
                                              "writes opsets %d to %d (torch.onnx's default "
                                              "is 17)",
                              o->opset, WEFT_ONNX_OPSET_MIN, WEFT_ONNX_OPSET_MAX);
    if (o->batch < 0 || o->seq < 0)
        return weft_error_set(WEFT_ERR_VALUE, "ONNX export: batch (%lld) and seq (%lld) must be "
                                              "0 (dynamic) or a fixed size",
                              (long long)o->batch, (long long)o->seq);
    if ((unsigned)o->external_data > WEFT_ONNX_EXTERNAL_NEVER)
        return weft_error_set(WEFT_ERR_VALUE, "ONNX export: external_data must be AUTO, ALWAYS "
                                              "or NEVER, got %d", (int)o->external_data);
    const char *names[2] = {o->input_name, o->output_name};
    for (int i = 0; i < 2; i++)
        if (names[i] && !*names[i])
            return weft_error_set(WEFT_ERR_VALUE, "ONNX export: the %s name is empty",
                                  i ? "output" : "input");
    char shape[160];
    if (x->ndim < 1)
        return weft_error_set(WEFT_ERR_VALUE, "ONNX export: the example input is 0-dim: "
                                              "expected a batch of inputs [N, ...]");
    if (o->batch > 0 && x->shape[0] != o->batch)
        return weft_error_set(WEFT_ERR_VALUE, "ONNX export: batch is fixed at %lld, but the "
                                              "example input is %s",
                              (long long)o->batch,
                              weft_shape_str(x->ndim, x->shape, shape, sizeof shape));
    if (o->seq > 0 && !is_token_ids(x))
        return weft_error_set(WEFT_ERR_VALUE, "ONNX export: seq applies to a model of token ids "
                                              "(an integer input [B, T]); this model's input is "
                                              "%s of %s",
                              weft_shape_str(x->ndim, x->shape, shape, sizeof shape),
                              weft_dtype_name(x->dtype));
    if (o->seq > 0 && x->shape[1] != o->seq)
        return weft_error_set(WEFT_ERR_VALUE, "ONNX export: seq is fixed at %lld, but the "
                                              "example input is %s",
                              (long long)o->seq,
                              weft_shape_str(x->ndim, x->shape, shape, sizeof shape));
    return 0;
}

/* The input "input" as the example shows it, dim 0 ("batch") and for token ids dim 1
 * ("sequence") symbolic unless fixed. A sparse example is declared as its dense
 * equivalent; a layer that reads it in another form declares its own inputs. */
static const char *declare_input(weft_onnx_graph *g, const char *name, weft_tensor *x)
{
    const char *params[WEFT_MAX_DIMS] = {0};
    if (g->o.batch == 0)
        params[0] = "batch";
    if (is_token_ids(x) && g->o.seq == 0)
        params[1] = "sequence";
    const char *in = weft_onnx_input(g, name, x->dtype, x->ndim, x->shape, params);
    if (in && onnx_set_example(g, in, x) != 0)
        return NULL;
    return in;
}

/* The example with one more sample (dim 0) or one position fewer (dim 1), to see which
 * output dims follow the batch and the sequence. NULL when it cannot be made (a sparse
 * example), with no error. */
static weft_tensor *varied(weft_tensor *x, int dim)
{
    if (weft_tensor_is_sparse(x))
        return NULL;
    if (dim == 0) {
        weft_tensor *parts[2] = {x, weft_narrow(x, 0, 0, 1)};
        return weft_cat(2, parts, 0);
    }
    return x->shape[1] > 1 ? weft_narrow(x, 1, 0, x->shape[1] - 1) : NULL;
}

/* The graph output: the example output's shape, with the dims that change with the
 * batch (or sequence) symbolic. */
static int declare_output(weft_onnx_graph *g, weft_module *m, weft_tensor *x, const char *name,
                          weft_tensor *y)
{
    struct onnx_io *io = &g->output;
    *io = (struct onnx_io){.dtype = y->dtype, .ndim = y->ndim};
    if (!(io->name = weft_strdup(name)))
        return weft_error_code();
    memcpy(io->shape, y->shape, (size_t)y->ndim * sizeof *y->shape);
    const struct {
        bool dynamic;
        int dim;
        const char *param;
    } axes[2] = {{g->o.batch == 0, 0, "batch"},
                 {is_token_ids(x) && g->o.seq == 0, 1, "sequence"}};
    for (int a = 0; a < 2; a++) {
        if (!axes[a].dynamic)
            continue;
        weft_tensor *x2 = varied(x, axes[a].dim);
        weft_tensor *y2 = x2 ? weft_module_forward(m, x2) : NULL;
        if (x2 && !y2)
            return weft_error_code();
        for (int d = 0; d < y->ndim; d++) {
            bool follows = y2 ? y2->ndim == y->ndim && y2->shape[d] != y->shape[d]
                              : d == axes[a].dim; /* no variant: assume batch-first */
            if (follows && !io->params[d] && !(io->params[d] = weft_strdup(axes[a].param)))
                return weft_error_code();
        }
    }
    return 0;
}

/* The traced output `out` renamed to the graph's output name; an Identity when the
 * output is not a node's (a model that returns its input). */
static int name_output(weft_onnx_graph *g, const char *out, const char *name)
{
    if (!onnx_producer(g, out)) {
        out = weft_onnx_op(g, "Identity", 1, &out);
        if (!out)
            return weft_error_code();
    }
    if (strcmp(out, name) == 0)
        return 0;
    for (size_t i = 0; i < g->n_inputs; i++)
        if (!strcmp(g->inputs[i].name, name))
            return weft_error_set(WEFT_ERR_VALUE, "ONNX export: the output name '%s' is the "
                                                  "input's", name);
    return onnx_rename(g, out, name);
}

/* Graph inputs no node reads (the model's tensor when a layer declared other inputs)
 * are left out. */
static void drop_unread_inputs(weft_onnx_graph *g)
{
    size_t kept = 0;
    for (size_t i = 0; i < g->n_inputs; i++) {
        if (onnx_readers(g, g->inputs[i].name) > 0 || !strcmp(g->inputs[i].name, g->output.name)) {
            g->inputs[kept++] = g->inputs[i];
            continue;
        }
        free(g->inputs[i].name);
        for (int d = 0; d < WEFT_MAX_DIMS; d++)
            free(g->inputs[i].params[d]);
    }
    g->n_inputs = kept;
}

/* Initializers no live node reads (folded away) are left out. */
static void drop_unread_initializers(weft_onnx_graph *g)
{
    size_t kept = 0;
    for (size_t i = 0; i < g->n_inits; i++) {
        if (onnx_readers(g, g->inits[i].name) > 0) {
            g->inits[kept++] = g->inits[i];
            continue;
        }
        free(g->inits[i].name);
        weft_tensor_release(g->inits[i].t);
    }
    g->n_inits = kept;
}

static int trace(weft_onnx_graph *g, weft_module *m, weft_tensor *x)
{
    const char *in_name = g->o.input_name ? g->o.input_name : "input";
    const char *out_name = g->o.output_name ? g->o.output_name
                           : is_token_ids(x)  ? "logits"
                                              : "output";
    const char *in = declare_input(g, in_name, x);
    const char *out = in ? weft_onnx_export_module(g, m, "", in) : NULL;
    if (!out)
        return weft_error_code();
    weft_tensor *y = weft_onnx_example(g, out);
    if (!y)
        return weft_error_set(WEFT_ERR_RUNTIME, "ONNX export: %s's forward gave no output",
                              weft_module_type_name(m));
    int rc = declare_output(g, m, x, out_name, y);
    if (rc == 0)
        rc = name_output(g, out, out_name);
    if (rc == 0 && g->o.fold_batchnorm)
        rc = onnx_fold_batchnorm(g);
    if (rc != 0)
        return rc;
    drop_unread_inputs(g);
    drop_unread_initializers(g);
    /* an attribute or name that failed to allocate left its error and nothing else */
    return weft_error_code();
}

int weft_onnx_export(weft_module *module, weft_tensor *example_input,
                     const struct weft_onnx_options *options, const char *path)
{
    if (weft_error_code() != WEFT_OK)
        return weft_error_code(); /* sticky: an earlier failure is the one to report */
    if (!module || !example_input || !path)
        return weft_error_set(WEFT_ERR_VALUE, "weft_onnx_export: the module, the example input "
                                              "and the path are required");
    struct weft_onnx_options o = options ? *options : weft_onnx_defaults();
    if (o.opset == 0)
        o.opset = 17;
    if (check_options(&o, example_input) != 0)
        return weft_error_code();
    bool training = weft_module_is_training(module);
    weft_module_train(module, false);
    bool grad = weft_no_grad_begin();
    weft_scope_push();
    weft_onnx_graph *g = onnx_graph_new(module, &o);
    int rc = g ? trace(g, module, example_input) : weft_error_code();
    if (rc == 0)
        rc = onnx_write(g, path);
    onnx_graph_free(g);
    weft_scope_pop();
    weft_grad_mode_restore(grad);
    weft_module_train(module, training);
    return rc;
}

/* ---- a container's call for each child ------------------------------------------------ */

/* "layer 2 (LSTM)", "the model (GPT)", "module transformer.h.0 (Block)". */
static const char *place(const weft_onnx_graph *g, const weft_module *m, char *buf, size_t size)
{
    if (!*g->path)
        snprintf(buf, size, "the model (%s)", weft_module_type_name(m));
    else if (!strchr(g->path, '.'))
        snprintf(buf, size, "layer %s (%s)", g->path, weft_module_type_name(m));
    else
        snprintf(buf, size, "module %s (%s)", g->path, weft_module_type_name(m));
    return buf;
}

const char *weft_onnx_export_module(weft_onnx_graph *g, weft_module *m, const char *name,
                                    const char *input)
{
    if (!g || !m || !input)
        return NULL;
    const struct weft_module_type *type = weft_module_type(m);
    weft_tensor *x = weft_onnx_example(g, input);
    size_t path_len = strlen(g->path);
    if (name && *name)
        snprintf(g->path + path_len, sizeof g->path - path_len, "%s%s", path_len ? "." : "", name);
    char where[600];
    place(g, m, where, sizeof where);
    const char *out = NULL;
    weft_tensor *y = NULL;
    if (!WEFT_VTABLE_HAS(type, onnx_export)) {
        weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "ONNX export: %s: %s has no ONNX export (its "
                                                 "module type '%s' has no onnx_export method)",
                       where, type->class_name, type->base.name);
        g->blamed = true;
        goto out;
    }
    /* weft's forward first: an example the layer does not take is its own error */
    if (x && !(y = weft_module_forward(m, x))) {
        weft_error_prefix("ONNX export: %s: the example input does not fit", where);
        g->blamed = true;
        goto out;
    }
    weft_onnx_scope_push(g, name);
    out = type->onnx_export(m, g, input);
    weft_onnx_scope_pop(g);
    if (!out) {
        if (weft_error_code() == WEFT_OK)
            weft_error_set(WEFT_ERR_RUNTIME, "its onnx_export method failed without saying why");
        if (!g->blamed) /* the innermost module is the one to name */
            weft_error_prefix("ONNX export: %s", where);
        g->blamed = true;
        goto out;
    }
    if (y && !weft_onnx_example(g, out) && onnx_set_example(g, out, y) != 0)
        out = NULL;
out:
    g->path[path_len] = '\0';
    return out;
}
