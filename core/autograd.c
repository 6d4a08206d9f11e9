/* core/autograd.c: tensors' autograd metadata, graph nodes and the backward engine.
 *
 * Ownership: an output holds its grad_fn; a node holds the nodes its inputs came from
 * (edges) and detached aliases of the tensors it saved; an AccumulateGrad node holds its
 * leaf. Back pointers (a leaf's accumulator, a node's retain_grad tensors) are weak and
 * cleared by whichever side dies first, so no cycle keeps memory alive. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "weft/autocast.h"
#include "weft/layout.h"
#include "weft/autograd.h"

struct weft_autograd_meta {
    bool requires_grad; /* set on leaves by weft_requires_grad_ */
    bool retains_grad;
    int output_nr;
    weft_tensor *grad;
    struct weft_node *grad_fn;     /* strong */
    struct weft_node *accumulator; /* weak: cleared by the accumulator when it dies */
    struct grad_hook *hooks;       /* post-accumulate hooks, in registration order */
    int num_hooks;
    /* A view recorded from a tensor with history: the tensor it aliases at the root of
     * its chain of views (strong; the base never points back). An in-place op on the view
     * rebases that tensor's history (CopySlices). */
    weft_tensor *base;
    /* The storage's version when grad_fn was made: once the base or another of its views
     * has changed in place since, grad_fn is made again from the base (view_refresh). */
    uint64_t view_version;
    /* A view made with grad mode off of a tensor that requires grad: it requires grad as
     * its base does, has no grad_fn, and passes no gradient on (PyTorch's
     * CreationMeta::NO_GRAD_MODE). */
    bool no_grad_view;
};

/* Where a view lies in its base, in elements (CopySlices, AsStridedBackward0). */
struct view_geom {
    int ndim, base_ndim;
    int64_t shape[WEFT_MAX_DIMS], stride[WEFT_MAX_DIMS], offset; /* offset from the base's */
    int64_t base_shape[WEFT_MAX_DIMS], base_stride[WEFT_MAX_DIMS];
    enum weft_dtype dtype;
    weft_device device;
};

struct grad_hook {
    weft_grad_hook_fn fn;
    void *ctx;
    int handle;
};

/* The callbacks queued during the backward running on this thread (NULL outside one). */
struct callback_queue {
    struct queued_callback { int (*fn)(void *ctx); void *ctx; } *items;
    int count, capacity;
    const char *running_node; /* and the node it runs now, for out-of-memory errors */
};

struct edge {
    struct weft_node *node;
    int input_nr; /* which output of `node` this gradient belongs to */
};

struct input_info {
    int ndim;
    enum weft_dtype dtype;
    weft_device device;
    int64_t shape[WEFT_MAX_DIMS];
};

struct saved_tensor {
    weft_tensor *alias; /* detached alias sharing storage and version */
    uint64_t version;
    const char *producer; /* grad_fn name of the saved tensor, for messages */
    int output_nr;
    /* A save the thread's saved-tensor hooks packed: alias NULL, the hooks and what pack
     * returned. */
    struct weft_saved_tensor_hooks *hooks;
    int64_t packed;
};

struct weft_node {
    uint32_t refcount;
    const char *name;
    weft_backward_fn backward;
    uint64_t sequence_nr;
    int num_inputs, num_outputs, num_saved;
    bool released; /* saved tensors freed by a backward without retain_graph */
    bool is_view;  /* a view op's node: its output aliases input 0 */
    struct edge *next;
    struct input_info *inputs;
    struct saved_tensor *saved;
    weft_tensor *variable;   /* AccumulateGrad: its leaf (strong) */
    struct weft_node *fn;    /* CopySlices: the in-place op's own node (strong) */
    struct view_geom *geom;  /* CopySlices, AsStridedBackward0: the view in its base */
    weft_tensor **retained;  /* per output: a non-leaf keeping its grad (weak) */
    double scalars[4];
    int64_t ints[16];
    /* engine scratch, valid during one backward */
    int deps;
    bool discovered;
    weft_tensor **buffer;
};

static WEFT_FAST_TLS bool grad_mode_off; /* zero-initialised: grad mode on */
static WEFT_FAST_TLS struct callback_queue *current_callbacks;
static WEFT_FAST_TLS struct weft_saved_tensor_hooks *saved_hooks;
/* Threads with saved-tensor hooks set: while none has, a save reads no thread-local. */
static int saved_hooks_threads;

const char *weft_autograd_running_node(void)
{
    return current_callbacks ? current_callbacks->running_node : NULL;
}
static int next_hook_handle = 1;
static bool anomaly_mode;
static uint64_t next_sequence_nr;

/* Whether a leaf's first gradient g can become its .grad as it is, without the copy
 * first_grad makes (PyTorch's AccumulateGrad steals it likewise): g is the engine's alone
 * (its one reference is the node's input buffer, and no other tensor shares its storage,
 * which it fills exactly), records no graph, and already has the leaf's shape, dtype,
 * device and a contiguous layout, so nothing can see the later in-place accumulations. */
static bool grad_stealable(const weft_tensor *leaf, const weft_tensor *g)
{
    const struct weft_storage *s = g->storage;
    return g->layout == WEFT_LAYOUT_STRIDED && s && g->autograd == NULL &&
           __atomic_load_n(&g->refcount, __ATOMIC_ACQUIRE) == 1 &&
           __atomic_load_n(&s->refcount, __ATOMIC_ACQUIRE) == 1 && g->offset == 0 &&
           g->dtype == leaf->dtype && weft_device_equal(g->device, leaf->device) &&
           g->ndim == leaf->ndim &&
           !memcmp(g->shape, leaf->shape, sizeof(int64_t) * (size_t)g->ndim) &&
           weft_tensor_is_contiguous(leaf) && weft_tensor_is_contiguous(g) &&
           s->nbytes == (size_t)weft_tensor_numel(g) * weft_dtype_size(g->dtype);
}

static int accumulate_grad_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                                    weft_tensor **grad_inputs);

/* ---- metadata ----------------------------------------------------------------------- */

static struct weft_autograd_meta *meta_get(weft_tensor *t)
{
    if (!t->autograd) {
        t->autograd = weft_small_calloc(sizeof *t->autograd);
        if (!t->autograd)
            weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory for autograd metadata");
    }
    return t->autograd;
}

static void node_release(struct weft_node *node);
static int view_refresh(weft_tensor *t);

/* Called by weft_tensor_release when the tensor dies. */
void weft_autograd_meta_free(weft_tensor *t)
{
    struct weft_autograd_meta *m = t->autograd;
    if (!m)
        return;
    if (m->accumulator)
        m->accumulator->variable = NULL; /* cannot happen: the accumulator holds t */
    if (m->retains_grad && m->grad_fn && m->grad_fn->retained &&
        m->grad_fn->retained[m->output_nr] == t)
        m->grad_fn->retained[m->output_nr] = NULL;
    weft_tensor_release(m->grad);
    weft_tensor_release(m->base);
    node_release(m->grad_fn);
    free(m->hooks);
    weft_small_free(m, sizeof *m);
    t->autograd = NULL;
}

bool weft_requires_grad(const weft_tensor *t)
{
    const struct weft_autograd_meta *m = t ? t->autograd : NULL;
    return m && (m->requires_grad || m->grad_fn || (m->no_grad_view && weft_requires_grad(m->base)));
}

bool weft_is_leaf(const weft_tensor *t)
{
    return !t || !t->autograd || !t->autograd->grad_fn;
}

int weft_requires_grad_(weft_tensor *t, bool requires_grad)
{
    if (!t)
        return WEFT_ERR_VALUE;
    if (!weft_is_leaf(t)) {
        if (!requires_grad)
            return weft_error_set(WEFT_ERR_RUNTIME,
                                  "you can only change requires_grad flags of leaf variables. If "
                                  "you want to use a computed variable in a subgraph that doesn't "
                                  "require differentiation use var_no_grad = var.detach().");
        return 0;
    }
    if (requires_grad && !weft_dtype_is_floating(t->dtype))
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "Only Tensors of floating point dtype can require gradients");
    if (!requires_grad && !t->autograd)
        return 0;
    struct weft_autograd_meta *m = meta_get(t);
    if (!m)
        return WEFT_ERR_OUT_OF_MEMORY;
    m->requires_grad = requires_grad;
    return 0;
}

weft_tensor *weft_grad(const weft_tensor *t)
{
    if (!t || !t->autograd || !t->autograd->grad)
        return NULL;
    return weft_tensor_finish(weft_tensor_retain(t->autograd->grad));
}

static bool same_meta(const weft_tensor *a, const weft_tensor *b)
{
    return a->ndim == b->ndim && a->dtype == b->dtype && weft_device_equal(a->device, b->device) &&
           memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof *a->shape) == 0;
}

int weft_set_grad(weft_tensor *t, weft_tensor *grad)
{
    if (!t)
        return WEFT_ERR_VALUE;
    if (grad && !same_meta(t, grad)) {
        char a[160], b[160];
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "assigned grad has data of a different size, type or device: %s %s "
                              "on %s, expected %s %s on %s",
                              weft_shape_str(grad->ndim, grad->shape, a, sizeof a),
                              weft_dtype_name(grad->dtype), weft_device_name_tl(grad->device),
                              weft_shape_str(t->ndim, t->shape, b, sizeof b),
                              weft_dtype_name(t->dtype), weft_device_type_name(t->device.type));
    }
    if (!grad && !t->autograd)
        return 0;
    struct weft_autograd_meta *m = meta_get(t);
    if (!m)
        return WEFT_ERR_OUT_OF_MEMORY;
    weft_tensor_retain(grad);
    weft_tensor_release(m->grad);
    m->grad = grad;
    return 0;
}

int weft_zero_grad(weft_tensor *t, bool set_to_none)
{
    if (!t)
        return WEFT_ERR_VALUE;
    if (!t->autograd || !t->autograd->grad)
        return 0;
    if (set_to_none)
        return weft_set_grad(t, NULL);
    bool prev = weft_no_grad_begin();
    int rc = weft_fill_(t->autograd->grad, 0.0) ? 0 : weft_error_code();
    weft_grad_mode_restore(prev);
    return rc;
}

int weft_retain_grad(weft_tensor *t)
{
    if (!t)
        return WEFT_ERR_VALUE;
    if (!weft_requires_grad(t))
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "can't retain_grad on Tensor that has requires_grad=False");
    struct weft_autograd_meta *m = t->autograd;
    if (m->base && view_refresh(t) != 0)
        return weft_error_code();
    if (!m->grad_fn || m->retains_grad)
        return 0; /* leaves keep their grad anyway */
    struct weft_node *fn = m->grad_fn;
    if (!fn->retained) {
        fn->retained = calloc((size_t)fn->num_outputs, sizeof *fn->retained);
        if (!fn->retained)
            return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory in retain_grad");
    }
    fn->retained[m->output_nr] = t;
    m->retains_grad = true;
    return 0;
}

const char *weft_grad_fn_name(const weft_tensor *t)
{
    /* the name of the node a gradient would reach now: a view's is made again when its
     * base changed in place (PyTorch's grad_fn getter does the same) */
    if (t && t->autograd && t->autograd->base && !t->autograd->no_grad_view &&
        view_refresh((weft_tensor *)t) != 0)
        return NULL;
    return t && t->autograd && t->autograd->grad_fn ? t->autograd->grad_fn->name : NULL;
}

int weft_grad_fn_next_functions(const weft_tensor *t, int max, const char **names)
{
    if (!weft_grad_fn_name(t)) /* makes a view's grad_fn again when it must */
        return 0;
    const struct weft_node *fn = t->autograd->grad_fn;
    for (int i = 0; names && i < max && i < fn->num_inputs; i++)
        names[i] = fn->next[i].node ? fn->next[i].node->name : NULL;
    return fn->num_inputs;
}

/* ---- modes -------------------------------------------------------------------------- */

bool weft_grad_enabled(void)
{
    return !grad_mode_off;
}

void weft_set_grad_enabled(bool enabled)
{
    grad_mode_off = !enabled;
}

bool weft_no_grad_begin(void)
{
    bool prev = !grad_mode_off;
    grad_mode_off = true;
    return prev;
}

void weft_grad_mode_restore(bool previous)
{
    grad_mode_off = !previous;
}

struct weft_saved_tensor_hooks *weft_saved_tensor_hooks_set(struct weft_saved_tensor_hooks *h)
{
    struct weft_saved_tensor_hooks *prev = saved_hooks;
    if (h && !prev)
        __atomic_add_fetch(&saved_hooks_threads, 1, __ATOMIC_RELAXED);
    else if (!h && prev)
        __atomic_sub_fetch(&saved_hooks_threads, 1, __ATOMIC_RELAXED);
    saved_hooks = h;
    return prev;
}

void weft_set_anomaly_enabled(bool enabled)
{
    __atomic_store_n(&anomaly_mode, enabled, __ATOMIC_RELAXED);
}

bool weft_anomaly_enabled(void)
{
    return __atomic_load_n(&anomaly_mode, __ATOMIC_RELAXED);
}

bool weft_autograd_needed(int n, weft_tensor *const *tensors)
{
    if (grad_mode_off)
        return false;
    for (int i = 0; i < n; i++)
        if (weft_requires_grad(tensors[i]))
            return true;
    return false;
}

/* ---- nodes -------------------------------------------------------------------------- */

/* One block: the node, then its edges, input shapes and saved slots. A node per op is
 * the hot path of recording; four allocations each were most of its cost. */
static size_t node_size(int num_inputs, int num_saved)
{
    return sizeof(struct weft_node) + (size_t)num_inputs * sizeof(struct edge) +
           (size_t)num_inputs * sizeof(struct input_info) +
           (size_t)num_saved * sizeof(struct saved_tensor);
}

static struct weft_node *node_alloc(const char *name, weft_backward_fn backward, int num_inputs,
                                    int num_saved)
{
    struct weft_node *n = weft_small_calloc(node_size(num_inputs, num_saved));
    if (!n) {
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory for an autograd node");
        return NULL;
    }
    n->refcount = 1;
    n->name = name;
    n->backward = backward;
    n->sequence_nr = __atomic_fetch_add(&next_sequence_nr, 1, __ATOMIC_RELAXED);
    n->num_inputs = num_inputs;
    n->num_outputs = 1;
    n->num_saved = num_saved;
    char *tail = (char *)(n + 1);
    n->next = num_inputs ? (struct edge *)tail : NULL;
    tail += (size_t)num_inputs * sizeof(struct edge);
    n->inputs = num_inputs ? (struct input_info *)tail : NULL;
    tail += (size_t)num_inputs * sizeof(struct input_info);
    n->saved = num_saved ? (struct saved_tensor *)tail : NULL;
    return n;
}

static void saved_release(struct saved_tensor *s)
{
    weft_tensor_release(s->alias);
    s->alias = NULL;
    if (s->hooks)
        s->hooks->release(s->hooks, s->packed);
    s->hooks = NULL;
}

static void node_free_saved(struct weft_node *n)
{
    for (int i = 0; i < n->num_saved; i++)
        saved_release(&n->saved[i]);
}

/* Frees nodes iteratively: a long chain must not recurse once per node. */
static void node_release(struct weft_node *node)
{
    struct weft_node *stack_small[64];
    struct weft_node **stack = stack_small;
    size_t count = 0, capacity = 64;
    if (!node)
        return;
    stack[count++] = node;
    while (count > 0) {
        struct weft_node *n = stack[--count];
        if (!weft_refcount_release(&n->refcount))
            continue;
        for (int i = 0; i < n->num_inputs; i++) {
            if (!n->next[i].node)
                continue;
            if (count == capacity) {
                size_t cap = capacity * 2;
                struct weft_node **grown = malloc(cap * sizeof *grown);
                if (!grown)
                    continue; /* leaks the subgraph rather than crash */
                memcpy(grown, stack, count * sizeof *grown);
                if (stack != stack_small)
                    free(stack);
                stack = grown;
                capacity = cap;
            }
            stack[count++] = n->next[i].node;
        }
        if (n->fn && count < capacity) /* CopySlices' op node */
            stack[count++] = n->fn;
        else if (n->fn)
            node_release(n->fn); /* one level deeper: its own chain goes on the stack */
        free(n->geom);
        node_free_saved(n);
        if (n->variable) {
            if (n->variable->autograd && n->variable->autograd->accumulator == n)
                n->variable->autograd->accumulator = NULL;
            weft_tensor_release(n->variable);
        }
        if (n->retained)
            for (int j = 0; j < n->num_outputs; j++)
                if (n->retained[j] && n->retained[j]->autograd)
                    n->retained[j]->autograd->retains_grad = false;
        free(n->retained);
        weft_small_free(n, node_size(n->num_inputs, n->num_saved));
    }
    if (stack != stack_small)
        free(stack);
}

/* The edge a gradient for t flows along: its grad_fn, or its leaf accumulator. */
static int gradient_edge(weft_tensor *t, struct edge *out)
{
    *out = (struct edge){0};
    if (!weft_requires_grad(t))
        return 0;
    struct weft_autograd_meta *m = t->autograd;
    if (m->base && view_refresh(t) != 0)
        return weft_error_code();
    if (m->grad_fn) {
        WEFT_ATOMIC_INC(&m->grad_fn->refcount);
        *out = (struct edge){m->grad_fn, m->output_nr};
        return 0;
    }
    if (!m->requires_grad) /* a view made under no_grad: its gradient goes nowhere */
        return 0;
    if (!m->accumulator) {
        struct weft_node *acc = node_alloc("AccumulateGrad", accumulate_grad_backward, 0, 0);
        if (!acc)
            return WEFT_ERR_OUT_OF_MEMORY;
        acc->variable = weft_tensor_retain(t);
        m->accumulator = acc; /* weak; the edge below holds the node */
        *out = (struct edge){acc, 0};
        return 0;
    }
    WEFT_ATOMIC_INC(&m->accumulator->refcount);
    *out = (struct edge){m->accumulator, 0};
    return 0;
}

struct weft_node *weft_node_create(const char *name, weft_backward_fn backward, int num_inputs,
                                   weft_tensor *const *inputs, int num_saved)
{
    struct weft_node *n = node_alloc(name, backward, num_inputs, num_saved);
    if (!n)
        return NULL;
    for (int i = 0; i < num_inputs; i++) {
        weft_tensor *t = inputs[i];
        if (!t)
            continue;
        struct input_info *info = &n->inputs[i];
        info->ndim = t->ndim;
        info->dtype = t->dtype;
        info->device = t->device;
        memcpy(info->shape, t->shape, sizeof info->shape);
        if (gradient_edge(t, &n->next[i]) != 0) {
            node_release(n);
            return NULL;
        }
    }
    return n;
}

static int node_save(struct weft_node *node, int slot, weft_tensor *t, const char *producer,
                     int output_nr, bool is_output)
{
    if (!node || slot < 0 || slot >= node->num_saved)
        return weft_error_set(WEFT_ERR_VALUE, "weft_node_save: slot %d out of range", slot);
    if (!t)
        return 0;
    weft_tensor *alias;
    if (t->layout != WEFT_LAYOUT_STRIDED) {
        /* A sparse tensor has no storage to alias: save it itself (as PyTorch saves
         * inputs), which would make a cycle only for this node's own outputs. */
        if (is_output)
            return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED,
                                  "%s: saving its own %s output is not supported", node->name,
                                  weft_layout_name(t->layout));
        alias = weft_tensor_retain(t);
    } else {
        alias = weft_tensor_make(t->storage, t->ndim, t->shape, t->stride, t->offset, t->dtype);
        if (!alias)
            return WEFT_ERR_OUT_OF_MEMORY;
        alias->flags = t->flags;
    }
    struct saved_tensor *s = &node->saved[slot];
    saved_release(s);
    *s = (struct saved_tensor){alias, weft_tensor_version(t), producer, output_nr, NULL, 0};
    struct weft_saved_tensor_hooks *h =
        __builtin_expect(__atomic_load_n(&saved_hooks_threads, __ATOMIC_RELAXED) != 0, 0)
            ? saved_hooks
            : NULL;
    int64_t packed = h && t->layout == WEFT_LAYOUT_STRIDED ? h->pack(h, alias) : -1;
    if (packed >= 0) {
        weft_tensor_release(alias);
        *s = (struct saved_tensor){NULL, s->version, producer, output_nr, h, packed};
    }
    return 0;
}

int weft_node_save(struct weft_node *node, int slot, weft_tensor *t)
{
    const char *producer = t && t->autograd && t->autograd->grad_fn ? t->autograd->grad_fn->name
                                                                    : NULL;
    int output_nr = t && t->autograd ? t->autograd->output_nr : 0;
    return node_save(node, slot, t, producer, output_nr, false);
}

int weft_node_save_output(struct weft_node *node, int slot, weft_tensor *t, int output_nr)
{
    return node_save(node, slot, t, node ? node->name : NULL, output_nr, true);
}

weft_tensor *weft_node_saved(struct weft_node *node, int slot)
{
    if (!node || slot < 0 || slot >= node->num_saved)
        return NULL;
    const struct saved_tensor *s = &node->saved[slot];
    if (__builtin_expect(s->hooks != NULL, 0))
        return s->hooks->unpack(s->hooks, s->packed);
    return s->alias;
}

int64_t *weft_node_ints(struct weft_node *node)
{
    return node->ints;
}

double *weft_node_scalars(struct weft_node *node)
{
    return node->scalars;
}

int weft_node_num_inputs(const struct weft_node *node)
{
    return node->num_inputs;
}

bool weft_node_needs_input_grad(const struct weft_node *node, int i)
{
    return i >= 0 && i < node->num_inputs && node->next[i].node != NULL;
}

int weft_node_input_ndim(const struct weft_node *node, int i)
{
    return node->inputs[i].ndim;
}

const int64_t *weft_node_input_shape(const struct weft_node *node, int i)
{
    return node->inputs[i].shape;
}

enum weft_dtype weft_node_input_dtype(const struct weft_node *node, int i)
{
    return node->inputs[i].dtype;
}

static int rebase_view(struct weft_node *node, weft_tensor *view);
static int check_saved(const struct weft_node *n);

int weft_node_finish(struct weft_node *node, int num_outputs, weft_tensor *const *outputs)
{
    if (!node)
        return weft_error_code() ? weft_error_code() : WEFT_ERR_VALUE;
    /* An in-place op on a view of a tensor with history: PyTorch's CopySlices. */
    if (num_outputs == 1 && outputs[0] && outputs[0]->autograd && outputs[0]->autograd->base &&
        !node->is_view)
        return rebase_view(node, outputs[0]);
    node->num_outputs = num_outputs;
    for (int j = 0; j < num_outputs; j++) {
        if (!outputs[j] || !weft_dtype_is_floating(outputs[j]->dtype))
            continue; /* integer outputs (indices) are not differentiable */
        struct weft_autograd_meta *m = meta_get(outputs[j]);
        if (!m) {
            node_release(node);
            return WEFT_ERR_OUT_OF_MEMORY;
        }
        WEFT_ATOMIC_INC(&node->refcount);
        node_release(m->grad_fn); /* in-place: the node's edge keeps the old history */
        m->grad_fn = node;
        m->output_nr = j;
        m->retains_grad = false;
    }
    node_release(node); /* the caller's reference */
    return 0;
}

/* ---- in-place ops on views: CopySlices ------------------------------------------------
 * PyTorch's rule (torch/csrc/autograd/VariableTypeUtils.h, rebase_history): after
 * view.op_() while recording, the base's grad_fn becomes CopySlices, which holds the op's
 * own node; the view's grad_fn becomes AsStridedBackward0 of the base's new history. Given
 * the base's gradient, CopySlices hands the part outside the view on to the base's old
 * history, runs the op's backward on the view's part and puts what it returns for the
 * view's old value back in that part; the op's other inputs get the rest. */

static void view_input_info(const struct view_geom *g, struct input_info *info)
{
    info->ndim = g->base_ndim;
    info->dtype = g->dtype;
    info->device = g->device;
    memcpy(info->shape, g->base_shape, sizeof info->shape);
}

/* Where view lies in base (whose offset the view's is counted from). */
static void view_geom_fill(struct view_geom *g, const weft_tensor *view, const weft_tensor *base)
{
    *g = (struct view_geom){.ndim = view->ndim, .base_ndim = base->ndim,
                            .offset = view->offset - base->offset, .dtype = base->dtype,
                            .device = base->device};
    memcpy(g->shape, view->shape, sizeof g->shape);
    memcpy(g->stride, view->stride, sizeof g->stride);
    memcpy(g->base_shape, base->shape, sizeof g->base_shape);
    memcpy(g->base_stride, base->stride, sizeof g->base_stride);
}

/* g's values laid out as the base (which is dense), and the view's part of it. */
static weft_tensor *base_buffer(const struct view_geom *g, weft_tensor *grad, weft_tensor **part)
{
    int64_t numel = weft_shape_numel(g->base_ndim, g->base_shape);
    struct weft_storage *s = numel < 0 ? NULL
                                       : weft_storage_new(g->device, (size_t)numel * weft_dtype_size(g->dtype));
    if (!s)
        return NULL;
    weft_tensor *buf = weft_tensor_finish(
        weft_tensor_make(s, g->base_ndim, g->base_shape, g->base_stride, 0, g->dtype));
    weft_storage_release(s);
    if (!buf || weft_copy_(buf, grad) != 0)
        return NULL;
    *part = weft_tensor_alias(buf, g->ndim, g->shape, g->stride, g->offset); /* autoreleased */
    return *part ? buf : NULL;
}

static int copy_slices_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                                weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0], *part = NULL;
    struct weft_node *fn = node->fn;
    if (!g)
        return 0;
    if (check_saved(fn) != 0)
        return weft_error_code();
    weft_tensor *result = base_buffer(node->geom, g, &part);
    weft_tensor *part_grad = result ? weft_clone(part) : NULL;
    if (!part_grad)
        return weft_error_code();
    weft_tensor *fn_grads[8] = {0}; /* in-place ops take few inputs; more go on the heap */
    weft_tensor **res = fn->num_inputs <= 8 ? fn_grads : calloc((size_t)fn->num_inputs, sizeof *res);
    if (!res)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory in backward");
    int rc = fn->backward(fn, &part_grad, res);
    if (rc == 0)
        rc = res[0] ? weft_copy_(part, res[0]) : weft_copy_(part, weft_zeros(0, NULL, part->dtype, part->device));
    if (rc == 0) {
        grad_inputs[0] = result;
        for (int i = 1; i < fn->num_inputs; i++)
            grad_inputs[i] = res[i];
    }
    if (res != fn_grads)
        free(res);
    return rc == 0 ? 0 : weft_error_code();
}

/* The view made again from its base (AsStridedBackward0): the gradient added into zeros
 * laid out as the base, where the view lies. */
static int view_of_base_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                                 weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0];
    const struct view_geom *geom = node->geom;
    if (!g || !weft_node_needs_input_grad(node, 0))
        return 0;
    grad_inputs[0] = weft_grad_as_strided_backward(g, geom->stride, geom->offset, geom->base_ndim,
                                                   geom->base_shape, geom->base_stride);
    return grad_inputs[0] ? 0 : weft_error_code();
}

/* A grad_fn for view as a view of base with the base's history now: AsStridedBackward0,
 * as PyTorch makes when it regenerates a view. */
static struct weft_node *view_of_base_node(const weft_tensor *view, weft_tensor *base)
{
    struct view_geom *geom = malloc(sizeof *geom);
    struct weft_node *as = node_alloc("AsStridedBackward0", view_of_base_backward, 1, 0);
    if (!geom || !as || gradient_edge(base, &as->next[0]) != 0) {
        free(geom);
        node_release(as);
        if (!weft_error_code())
            weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory for a view's grad_fn");
        return NULL;
    }
    view_geom_fill(geom, view, base);
    view_input_info(geom, &as->inputs[0]);
    as->geom = geom;
    as->is_view = true;
    return as;
}

/* Makes node the view's grad_fn, keeping retain_grad, and notes the version it is of. */
static int view_set_grad_fn(weft_tensor *view, struct weft_node *node)
{
    struct weft_autograd_meta *vm = view->autograd;
    struct weft_node *old = vm->grad_fn;
    bool retained = vm->retains_grad;
    if (retained && old && old->retained && old->retained[vm->output_nr] == view)
        old->retained[vm->output_nr] = NULL;
    vm->grad_fn = node;
    vm->output_nr = 0;
    vm->retains_grad = false;
    vm->view_version = weft_tensor_version(view);
    node_release(old);
    return retained ? weft_retain_grad(view) : 0;
}

/* PyTorch's VariableHooks::grad_fn: once the base, or another view of it, has changed in
 * place since a view's grad_fn was made, that grad_fn describes a value the view no longer
 * has; the view's grad_fn is made again from the base's history now. A view made under
 * no_grad cannot be (PyTorch's error). */
static int view_refresh(weft_tensor *t)
{
    struct weft_autograd_meta *m = t->autograd;
    if (weft_tensor_version(t) == m->view_version)
        return 0;
    if (m->no_grad_view)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "A view was created in no_grad mode and its base or another view "
                              "of its base has been modified inplace with grad mode enabled. "
                              "Given that this use case is ambiguous and error-prone, it is "
                              "forbidden. You can clarify your code by moving both the view and "
                              "the inplace either both inside the no_grad block (if you don't "
                              "want the inplace to be tracked) or both outside (if you want the "
                              "inplace to be tracked).");
    struct weft_node *as = view_of_base_node(t, m->base);
    return as ? view_set_grad_fn(t, as) : weft_error_code();
}

static int rebase_view(struct weft_node *node, weft_tensor *view)
{
    weft_tensor *base = view->autograd->base;
    struct view_geom *geom = malloc(sizeof *geom);
    struct weft_node *cs = node_alloc("CopySlices", copy_slices_backward, node->num_inputs, 0);
    struct weft_autograd_meta *bm = meta_get(base);
    if (!geom || !cs || !bm || gradient_edge(base, &cs->next[0]) != 0) {
        free(geom);
        node_release(cs);
        node_release(node);
        return weft_error_code() ? weft_error_code() : WEFT_ERR_OUT_OF_MEMORY;
    }
    view_geom_fill(geom, view, base);
    /* CopySlices: edge 0 the base's old history, the others the op's own */
    view_input_info(geom, &cs->inputs[0]);
    for (int i = 1; i < node->num_inputs; i++) {
        cs->next[i] = node->next[i];
        if (cs->next[i].node)
            WEFT_ATOMIC_INC(&cs->next[i].node->refcount);
        cs->inputs[i] = node->inputs[i];
    }
    cs->fn = node; /* the caller's reference */
    cs->geom = geom;
    node_release(bm->grad_fn);
    bm->grad_fn = cs; /* our reference */
    bm->output_nr = 0;
    /* the view, made again from the base's new history */
    struct weft_node *as = view_of_base_node(view, base);
    return as ? view_set_grad_fn(view, as) : weft_error_code();
}

/* Records in a view recorded from `in` the tensor at the root of its views (CopySlices),
 * and the version its grad_fn is of. */
static void set_view_base(weft_tensor *view, weft_tensor *in)
{
    if (!view || !in || !view->autograd || view->storage != in->storage)
        return;
    view->autograd->view_version = weft_tensor_version(view);
    weft_tensor *base = in->autograd && in->autograd->base ? in->autograd->base : in;
    if (view->autograd->base == base)
        return;
    weft_tensor_release(view->autograd->base);
    view->autograd->base = weft_tensor_retain(base);
}

weft_tensor *weft_autograd_view_untracked(weft_tensor *in, weft_tensor *out)
{
    if (!in || !out || !grad_mode_off || out->storage != in->storage || !weft_requires_grad(in))
        return out;
    struct weft_autograd_meta *m = meta_get(out);
    if (!m)
        return weft_tensor_discard(out);
    weft_tensor *base = in->autograd->base ? in->autograd->base : in;
    m->base = weft_tensor_retain(base);
    m->no_grad_view = true;
    m->view_version = weft_tensor_version(out);
    return out;
}

weft_tensor *weft_node_finish1(struct weft_node *node, weft_tensor *out)
{
    if (!node)
        return weft_tensor_discard(out);
    if (!out) {
        weft_node_abandon(node);
        return NULL;
    }
    if (weft_node_finish(node, 1, &out) != 0)
        return weft_tensor_discard(out);
    return out;
}

weft_tensor *weft_node_finish_view(struct weft_node *node, weft_tensor *in, weft_tensor *out)
{
    if (node)
        node->is_view = true;
    out = weft_node_finish1(node, out);
    set_view_base(out, in);
    return out;
}

void weft_node_abandon(struct weft_node *node)
{
    node_release(node);
}

int weft_autograd_check_inplace(weft_tensor *t, bool recording)
{
    if (!t || grad_mode_off)
        return 0;
    if (t->autograd && t->autograd->no_grad_view && weft_requires_grad(t))
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "A view was created in no_grad mode and is being modified inplace "
                              "with grad mode enabled. Given that this use case is ambiguous and "
                              "error-prone, it is forbidden. You can clarify your code by moving "
                              "both the view and the inplace either both inside the no_grad "
                              "block (if you don't want the inplace to be tracked) or both "
                              "outside (if you want the inplace to be tracked).");
    if (weft_requires_grad(t) && weft_is_leaf(t)) {
        if (t->flags & WEFT_TENSOR_VIEW)
            return weft_error_set(WEFT_ERR_RUNTIME,
                                  "a view of a leaf Variable that requires grad is being used in "
                                  "an in-place operation.");
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "a leaf Variable that requires grad is being used in an in-place "
                              "operation.");
    }
    /* A view made (through view ops only) from a leaf that requires grad. */
    struct weft_node *fn = t->autograd ? t->autograd->grad_fn : NULL;
    while (fn && fn->is_view && fn->num_inputs > 0 && fn->next[0].node)
        fn = fn->next[0].node;
    if ((t->flags & WEFT_TENSOR_VIEW) && fn && fn->backward == accumulate_grad_backward)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "a view of a leaf Variable that requires grad is being used in an "
                              "in-place operation.");
    /* a view recorded from a base with a dense layout: CopySlices takes it (rebase_view) */
    weft_tensor *base = t->autograd ? t->autograd->base : NULL;
    if (recording && (t->flags & WEFT_TENSOR_VIEW) && base && base->layout == WEFT_LAYOUT_STRIDED &&
        weft_is_non_overlapping_and_dense(base))
        return 0;
    if (recording && (t->flags & WEFT_TENSOR_VIEW))
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "weft does not record in-place operations on views while autograd "
                              "is recording (the base's history would be wrong); use the "
                              "out-of-place op, or run it under weft_no_grad_begin()");
    return 0;
}

/* ---- the engine ----------------------------------------------------------------------- */

struct node_list {
    struct weft_node **items;
    size_t count, capacity;
};

static int list_push(struct node_list *l, struct weft_node *n)
{
    if (l->count == l->capacity) {
        size_t cap = l->capacity ? l->capacity * 2 : 64;
        struct weft_node **p = realloc(l->items, cap * sizeof *p);
        if (!p)
            return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory in backward");
        l->items = p;
        l->capacity = cap;
    }
    l->items[l->count++] = n;
    return 0;
}

/* Max-heap on sequence_nr: the most recently created ready node runs first. */
static void heap_push(struct node_list *h, struct weft_node *n)
{
    size_t i = h->count - 1;
    h->items[i] = n;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (h->items[parent]->sequence_nr >= h->items[i]->sequence_nr)
            break;
        struct weft_node *tmp = h->items[parent];
        h->items[parent] = h->items[i];
        h->items[i] = tmp;
        i = parent;
    }
}

static struct weft_node *heap_pop(struct node_list *h)
{
    struct weft_node *top = h->items[0];
    h->items[0] = h->items[--h->count];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, best = i;
        if (l < h->count && h->items[l]->sequence_nr > h->items[best]->sequence_nr)
            best = l;
        if (r < h->count && h->items[r]->sequence_nr > h->items[best]->sequence_nr)
            best = r;
        if (best == i)
            break;
        struct weft_node *tmp = h->items[best];
        h->items[best] = h->items[i];
        h->items[i] = tmp;
        i = best;
    }
    return top;
}

/* a + b for gradients: the op layer's add for strided ones, the layout's add() for others (sparse
 * gradients of a tensor used twice). A new reference in the current scope. */
static weft_tensor *grad_sum(weft_tensor *a, weft_tensor *b)
{
    if (a->layout == WEFT_LAYOUT_STRIDED && b->layout == WEFT_LAYOUT_STRIDED)
        return weft_grad_add(a, b);
    return weft_layout_add(a, b);
}

/* The first gradient of `owner` as the tensor to keep: PyTorch's gradient layout
 * contract, a copy with the owner's layout. A contiguous parameter gets a contiguous
 * .grad even when backward made a transposed one (Linear's weight gradient is (x^T g)^T),
 * which is what fused optimizer kernels and a later in-place accumulation want. */
static weft_tensor *first_grad(const weft_tensor *owner, weft_tensor *g)
{
    if (g->layout != WEFT_LAYOUT_STRIDED)
        return g;
    if (weft_tensor_is_contiguous(owner) && !weft_tensor_is_contiguous(g))
        return weft_contiguous(g);
    return weft_clone(g);
}

/* Accumulates g into *slot (a .grad): in place for strided gradients; a strided first
 * gradient is copied, since g may alias a buffer another node still reads. Other layouts
 * are not modified in place by weft, so they are kept and summed out of place. */
static int grad_store(const weft_tensor *owner, weft_tensor **slot, weft_tensor *g)
{
    if (*slot && (*slot)->layout == WEFT_LAYOUT_STRIDED && g->layout == WEFT_LAYOUT_STRIDED)
        return weft_grad_add_(*slot, g) ? 0 : weft_error_code();
    weft_tensor *own = !*slot ? first_grad(owner, g) : grad_sum(*slot, g);
    if (!own)
        return weft_error_code();
    weft_tensor_retain(own);
    weft_tensor_release(*slot);
    *slot = own;
    return 0;
}

/* Finds every node reachable from root and counts the edges into each. */
static int discover(struct weft_node *root, struct node_list *all)
{
    struct node_list stack = {0};
    int rc = list_push(&stack, root);
    if (rc == 0) {
        root->discovered = true;
        rc = list_push(all, root);
    }
    while (rc == 0 && stack.count > 0) {
        struct weft_node *n = stack.items[--stack.count];
        for (int i = 0; i < n->num_inputs && rc == 0; i++) {
            struct weft_node *next = n->next[i].node;
            if (!next)
                continue;
            next->deps++;
            if (next->discovered)
                continue;
            next->discovered = true;
            rc = list_push(all, next);
            if (rc == 0)
                rc = list_push(&stack, next);
        }
    }
    free(stack.items);
    return rc;
}

static int buffer_add(struct weft_node *n, int slot, weft_tensor *grad)
{
    if (!n->buffer) {
        n->buffer = weft_small_calloc((size_t)n->num_outputs * sizeof *n->buffer);
        if (!n->buffer)
            return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory in backward");
    }
    if (!n->buffer[slot]) {
        n->buffer[slot] = weft_tensor_retain(grad);
        return 0;
    }
    weft_tensor *sum = grad_sum(n->buffer[slot], grad);
    if (!sum)
        return weft_error_code();
    weft_tensor_retain(sum);
    weft_tensor_release(n->buffer[slot]);
    n->buffer[slot] = sum;
    return 0;
}

static void version_error(const struct weft_node *n, const struct saved_tensor *s)
{
    char shape[160];
    const weft_tensor *t = s->alias;
    weft_shape_str(t->ndim, t->shape, shape, sizeof shape);
    char type[64];
    char which[160] = "";
    if (s->producer)
        snprintf(which, sizeof which, ", which is output %d of %s,", s->output_nr, s->producer);
    weft_error_set(WEFT_ERR_RUNTIME,
                   "one of the variables needed for gradient computation has been modified by "
                   "an inplace operation: [%s %s]%s is at version %llu; expected "
                   "version %llu instead. Hint: enable anomaly detection to find the operation "
                   "that failed to compute its gradient, with weft_set_anomaly_enabled(true). "
                   "(needed by %s)",
                   weft_torch_type_str(t, type, sizeof type), shape, which,
                   (unsigned long long)weft_tensor_version(t), (unsigned long long)s->version,
                   n->name);
}

static int check_saved(const struct weft_node *n)
{
    if (n->released && n->num_saved > 0)
        return weft_error_set(
            WEFT_ERR_RUNTIME,
            "Trying to backward through the graph a second time (or directly access saved "
            "tensors after they have already been freed). Saved intermediate values of the "
            "graph are freed when you call .backward() or autograd.grad(). Specify "
            "retain_graph=True if you need to backward through the graph a second time or if "
            "you need to access saved tensors after calling backward.");
    for (int i = 0; i < n->num_saved; i++) {
        const struct saved_tensor *s = &n->saved[i];
        if (s->alias && weft_tensor_version(s->alias) != s->version) {
            version_error(n, s);
            return WEFT_ERR_RUNTIME;
        }
    }
    return 0;
}

/* True when every element is finite. Anomaly mode is for debugging, so the values are
 * read on the host as float64 rather than checked with ops the core does not have. */
static int check_finite(weft_tensor *g, bool *finite)
{
    *finite = true;
    if (!weft_dtype_is_floating(g->dtype) || g->layout != WEFT_LAYOUT_STRIDED)
        return 0;
    int64_t n = weft_tensor_numel(g);
    double *values = malloc(sizeof(double) * (size_t)(n ? n : 1));
    if (!values)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory checking a gradient");
    weft_tensor *h = weft_to(g, WEFT_CPU, WEFT_F64, false);
    int rc = h ? weft_tensor_read(h, values, sizeof(double) * (size_t)n) : weft_error_code();
    for (int64_t i = 0; rc == 0 && i < n && *finite; i++)
        *finite = isfinite(values[i]);
    free(values);
    return rc;
}

/* Sums a gradient over the dims the forward broadcast, and converts its dtype. */
static weft_tensor *fit_to_input(weft_tensor *g, const struct input_info *info)
{
    if (g->ndim == info->ndim &&
        memcmp(g->shape, info->shape, (size_t)info->ndim * sizeof *info->shape) == 0)
        return g->dtype == info->dtype ? g : weft_to_dtype(g, info->dtype);
    int dims[WEFT_MAX_DIMS], nd = 0;
    int lead = g->ndim - info->ndim;
    if (lead < 0)
        goto mismatch;
    for (int d = 0; d < g->ndim; d++) {
        int id = d - lead;
        if (id < 0 || (info->shape[id] == 1 && g->shape[d] != 1))
            dims[nd++] = d;
        else if (info->shape[id] != g->shape[d])
            goto mismatch;
    }
    weft_tensor *r = nd ? weft_grad_sum(g, nd, dims, true) : g;
    r = weft_reshape_contiguous(r, info->ndim, info->shape);
    return r && r->dtype != info->dtype ? weft_to_dtype(r, info->dtype) : r;
mismatch:;
    char a[160], b[160];
    weft_error_set(WEFT_ERR_RUNTIME,
                   "Function returned an invalid gradient: got shape %s but expected shape "
                   "compatible with %s",
                   weft_shape_str(g->ndim, g->shape, a, sizeof a),
                   weft_shape_str(info->ndim, info->shape, b, sizeof b));
    return NULL;
}

static int accumulate_grad_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                                    weft_tensor **grad_inputs)
{
    (void)grad_inputs;
    weft_tensor *leaf = node->variable, *g = grad_outputs[0];
    if (!leaf || !g)
        return 0;
    struct weft_autograd_meta *m = meta_get(leaf);
    if (!m)
        return WEFT_ERR_OUT_OF_MEMORY;
    int rc;
    if (!m->grad && grad_stealable(leaf, g)) {
        m->grad = weft_tensor_retain(g);
        rc = 0;
    } else {
        struct input_info info = {leaf->ndim, leaf->dtype, leaf->device, {0}};
        memcpy(info.shape, leaf->shape, sizeof info.shape);
        g = fit_to_input(g, &info);
        if (!g)
            return weft_error_code();
        rc = grad_store(leaf, &m->grad, g);
    }
    for (int i = 0; rc == 0 && i < m->num_hooks; i++)
        rc = m->hooks[i].fn(leaf, m->hooks[i].ctx);
    return rc;
}

/* ---- the op layer's ops (weft_autograd_set_ops) --------------------------------------- */

static struct weft_autograd_ops grad_ops;

int weft_autograd_set_ops(const struct weft_autograd_ops *ops)
{
    if (!ops || ops->struct_size != sizeof grad_ops)
        return weft_error_set(WEFT_ERR_VALUE,
                              "weft_autograd_set_ops: a struct of %zu bytes, expected %zu",
                              ops ? ops->struct_size : 0, sizeof grad_ops);
    grad_ops = *ops;
    return 0;
}

static bool have_grad_op(const void *fn, const char *name)
{
    if (!fn)
        weft_error_set(WEFT_ERR_RUNTIME,
                       "backward needs the op '%s', which libweft-ops provides, and it is not "
                       "loaded", name);
    return fn != NULL;
}

weft_tensor *weft_grad_add(weft_tensor *a, weft_tensor *b)
{
    return have_grad_op(grad_ops.add, "add") ? grad_ops.add(a, b) : NULL;
}

weft_tensor *weft_grad_add_(weft_tensor *a, weft_tensor *b)
{
    return have_grad_op(grad_ops.add_, "add_") ? grad_ops.add_(a, b) : NULL;
}

weft_tensor *weft_grad_sum(weft_tensor *t, int ndims, const int *dims, bool keepdim)
{
    return have_grad_op(grad_ops.sum, "sum") ? grad_ops.sum(t, ndims, dims, keepdim) : NULL;
}

weft_tensor *weft_grad_as_strided_backward(weft_tensor *g, const int64_t *stride, int64_t offset,
                                           int base_ndim, const int64_t *base_shape,
                                           const int64_t *base_stride)
{
    return have_grad_op(grad_ops.as_strided_backward, "as_strided_backward")
               ? grad_ops.as_strided_backward(g, stride, offset, base_ndim, base_shape, base_stride)
               : NULL;
}

/* ---- hooks ---------------------------------------------------------------------------- */

int weft_register_post_accumulate_grad_hook(weft_tensor *leaf, weft_grad_hook_fn fn, void *ctx)
{
    if (!leaf || !fn)
        return weft_error_set(WEFT_ERR_VALUE, "register_post_accumulate_grad_hook: NULL %s",
                              leaf ? "hook" : "tensor");
    if (!weft_is_leaf(leaf) || !weft_requires_grad(leaf))
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "post accumulate grad hooks cannot be registered on non-leaf "
                              "tensors or tensors that do not require grad");
    struct weft_autograd_meta *m = leaf->autograd;
    struct grad_hook *hooks = realloc(m->hooks, (size_t)(m->num_hooks + 1) * sizeof *hooks);
    if (!hooks)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory for a grad hook");
    m->hooks = hooks;
    int handle = __atomic_fetch_add(&next_hook_handle, 1, __ATOMIC_RELAXED);
    m->hooks[m->num_hooks++] = (struct grad_hook){fn, ctx, handle};
    return handle;
}

int weft_remove_hook(weft_tensor *t, int handle)
{
    struct weft_autograd_meta *m = t ? t->autograd : NULL;
    for (int i = 0; m && i < m->num_hooks; i++)
        if (m->hooks[i].handle == handle) {
            memmove(&m->hooks[i], &m->hooks[i + 1],
                    (size_t)(m->num_hooks - i - 1) * sizeof *m->hooks);
            m->num_hooks--;
            return 0;
        }
    return weft_error_set(WEFT_ERR_VALUE, "remove_hook: no hook with handle %d on this tensor",
                          handle);
}

int weft_autograd_queue_callback(int (*fn)(void *ctx), void *ctx)
{
    struct callback_queue *q = current_callbacks;
    if (!q)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "queue_callback: no backward is running on this thread");
    if (q->count == q->capacity) {
        int capacity = q->capacity ? 2 * q->capacity : 4;
        void *items = realloc(q->items, (size_t)capacity * sizeof *q->items);
        if (!items)
            return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory for a callback");
        q->items = items;
        q->capacity = capacity;
    }
    q->items[q->count++] = (struct queued_callback){fn, ctx};
    return 0;
}

/* Runs the callbacks queued during a backward, in order, even after a failure (so that
 * whoever queued one can clean up); returns the first failure, rc's when it had one. */
static int run_callbacks(struct callback_queue *q, int rc)
{
    for (int i = 0; i < q->count; i++) { /* a callback may queue another */
        int r = q->items[i].fn(q->items[i].ctx);
        if (rc == 0)
            rc = r;
    }
    free(q->items);
    return rc;
}

/* A given root gradient whose meta differs from the root's: of another dtype it is cast
 * to the root's (PyTorch's validate_outputs casts, so a float64 gradient drives a float32
 * output); of another shape or device it is refused in PyTorch's words. */
static weft_tensor *root_gradient(const weft_tensor *root, weft_tensor *grad)
{
    char a[160], b[160];
    if (root->ndim != grad->ndim ||
        memcmp(root->shape, grad->shape, (size_t)root->ndim * sizeof *root->shape) != 0) {
        weft_error_set(WEFT_ERR_RUNTIME,
                       "Mismatch in shape: grad_output[0] has a shape of %s and output[0] has a "
                       "shape of %s.",
                       weft_shape_str(grad->ndim, grad->shape, a, sizeof a),
                       weft_shape_str(root->ndim, root->shape, b, sizeof b));
        return NULL;
    }
    if (!weft_device_equal(root->device, grad->device)) {
        weft_error_set(WEFT_ERR_RUNTIME, "invalid gradient at index 0 - expected device %s but got %s",
                       weft_device_str(root->device, a, sizeof a),
                       weft_device_str(grad->device, b, sizeof b));
        return NULL;
    }
    return weft_to_dtype(grad, root->dtype);
}

/* Stores the gradient flowing into a non-leaf that asked for retain_grad. */
static int store_retained(struct weft_node *n)
{
    if (!n->retained || !n->buffer)
        return 0;
    for (int j = 0; j < n->num_outputs; j++) {
        weft_tensor *t = n->retained[j];
        if (!t || !n->buffer[j])
            continue;
        int rc = grad_store(t, &t->autograd->grad, n->buffer[j]);
        if (rc != 0)
            return rc;
    }
    return 0;
}

static void buffer_release(struct weft_node *n)
{
    if (!n->buffer)
        return;
    for (int j = 0; j < n->num_outputs; j++)
        weft_tensor_release(n->buffer[j]);
    weft_small_free(n->buffer, (size_t)n->num_outputs * sizeof *n->buffer);
    n->buffer = NULL;
}

static int run_node(struct weft_node *n, struct node_list *ready, bool retain_graph,
                    struct callback_queue *run)
{
    int rc = check_saved(n);
    if (rc != 0)
        return rc;
    weft_tensor *empty[1] = {NULL};
    weft_tensor *const *grad_outputs = n->buffer ? n->buffer : empty;
    int ninputs = n->num_inputs;
    weft_tensor *grad_inputs_small[8] = {0};
    weft_tensor **grad_inputs = grad_inputs_small;
    if (ninputs > 8) {
        grad_inputs = calloc((size_t)ninputs, sizeof *grad_inputs);
        if (!grad_inputs)
            return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory in backward");
    }
    weft_scope_push();
    const struct weft_observer *o = WEFT_OBSERVER();
    void *token = __builtin_expect(o != NULL, 0) ? weft_observe_node_enter(o, n->name) : NULL;
    run->running_node = n->name;
    rc = store_retained(n);
    if (rc == 0)
        rc = n->backward(n, grad_outputs, grad_inputs);
    run->running_node = NULL;
    if (__builtin_expect(o != NULL, 0))
        weft_observe_node_exit(o, token);
    for (int i = 0; i < ninputs && rc == 0; i++) {
        struct edge *e = &n->next[i];
        weft_tensor *g = grad_inputs[i];
        if (!e->node || !g)
            continue;
        if (weft_anomaly_enabled()) {
            bool finite = true;
            rc = check_finite(g, &finite);
            if (rc == 0 && !finite)
                rc = weft_error_set(WEFT_ERR_RUNTIME,
                                    "Function '%s' returned nan values in its %dth output.",
                                    n->name, i);
            if (rc)
                break;
        }
        g = fit_to_input(g, &n->inputs[i]);
        if (!g) {
            rc = weft_error_code();
            break;
        }
        rc = buffer_add(e->node, e->input_nr, g);
        if (rc == 0 && --e->node->deps == 0) {
            rc = list_push(ready, e->node);
            if (rc == 0)
                heap_push(ready, e->node);
        }
    }
    weft_scope_pop();
    /* Results not recorded in the scope (no scope was open in the formula's caller) are
     * released here; those recorded were released by the pop. */
    if (grad_inputs != grad_inputs_small)
        free(grad_inputs);
    /* The gradients that came in die with the node's run, as PyTorch's InputBuffer does:
     * kept to the end of the backward, they held a gradient for every activation of the
     * graph at once, and a checkpointed segment's recomputed tensors with them
     * (weft/activation_checkpoint.h). */
    buffer_release(n);
    if (!retain_graph && rc == 0) {
        node_free_saved(n);
        n->released = true;
    }
    return rc;
}

static void engine_cleanup(struct node_list *all)
{
    for (size_t i = 0; i < all->count; i++) {
        struct weft_node *n = all->items[i];
        buffer_release(n);
        n->deps = 0;
        n->discovered = false;
    }
    free(all->items);
}

int weft_backward(weft_tensor *root, weft_tensor *grad, bool retain_graph)
{
    if (!root)
        return weft_error_code() ? weft_error_code() : WEFT_ERR_VALUE;
    if (!weft_requires_grad(root))
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "element 0 of tensors does not require grad and does not have a "
                              "grad_fn");
    bool prev = weft_no_grad_begin();
    /* Backward runs outside autocast: each gradient keeps its forward's dtype. */
    weft_autocast_state prev_autocast = weft_autocast_suspend();
    struct callback_queue callbacks = {0}, *outer_callbacks = current_callbacks;
    current_callbacks = &callbacks;
    weft_scope_push();
    int rc = 0;
    if (!grad) {
        if (weft_tensor_numel(root) != 1) {
            rc = weft_error_set(WEFT_ERR_RUNTIME,
                                "grad can be implicitly created only for scalar outputs");
            goto out;
        }
        grad = weft_ones_like(root);
        if (!grad) {
            rc = weft_error_code();
            goto out;
        }
    } else if (!same_meta(root, grad) && !(grad = root_gradient(root, grad))) {
        rc = weft_error_code();
        goto out;
    }
    struct edge root_edge;
    rc = gradient_edge(root, &root_edge);
    if (rc != 0)
        goto out;
    struct node_list all = {0}, ready = {0};
    rc = discover(root_edge.node, &all);
    if (rc == 0)
        rc = buffer_add(root_edge.node, root_edge.input_nr, grad);
    if (rc == 0)
        rc = list_push(&ready, root_edge.node);
    if (rc == 0)
        heap_push(&ready, root_edge.node);
    while (rc == 0 && ready.count > 0)
        rc = run_node(heap_pop(&ready), &ready, retain_graph, &callbacks);
    free(ready.items);
    engine_cleanup(&all);
    node_release(root_edge.node);
out:
    rc = run_callbacks(&callbacks, rc);
    current_callbacks = outer_callbacks;
    weft_scope_pop();
    weft_autocast_end(prev_autocast);
    weft_grad_mode_restore(prev);
    return rc;
}

/* ---- Tensor.detach_ ------------------------------------------------------------------------ */

int weft_detach_(weft_tensor *t)
{
    if (!t)
        return WEFT_ERR_VALUE;
    struct weft_autograd_meta *m = t->autograd;
    if (!m)
        return 0;
    /* PyTorch refuses a view that autograd tracks: its base's history would still flow
     * into it through CopySlices */
    if (m->base)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "Can't detach views in-place. Use detach() instead. If you are "
                              "using DistributedDataParallel (DDP) for training, and "
                              "gradient_as_bucket_view is set as True, gradients are views of "
                              "DDP buckets, and hence detach_() cannot be called on these "
                              "gradients. To fix this error, please refer to the "
                              "Optimizer.zero_grad() function in torch/optim/optimizer.py as the "
                              "solution.");
    if (m->retains_grad && m->grad_fn && m->grad_fn->retained &&
        m->grad_fn->retained[m->output_nr] == t)
        m->grad_fn->retained[m->output_nr] = NULL;
    node_release(m->grad_fn);
    m->grad_fn = NULL;
    m->requires_grad = false;
    m->retains_grad = false;
    m->output_nr = 0;
    return 0;
}
