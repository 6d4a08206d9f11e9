/* nn/module.c: the module object. A module is a type (vtable) and its state, plus
 * named parameters, buffers and children in registration order, as torch.nn.Module keeps
 * them; names, repr, state_dict and load_state_dict follow PyTorch so checkpoints move
 * between the two. */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "weft/state_dict.h"
#include "weft/nn.h"
#include "weft/registry.h"

/* Longest own name: a dotted name must fit struct weft_named_tensor. */
#define NAME_MAX_LEN (sizeof(((struct weft_named_tensor *)0)->name) - 1)

struct entry {
    char *name;
    void *item; /* weft_tensor * (parameters, buffers) or weft_module * (children) */
};

struct entries {
    struct entry *items;
    int count, capacity;
};

struct weft_module {
    const struct weft_module_type *type;
    void *state;
    weft_module *parent; /* the container that owns this module, if any */
    bool training;
    struct entries params, buffers, children;
    /* weft_module_parameters()'s borrowed array, made on demand; NULL when stale. */
    weft_tensor **param_cache;
    int param_cache_n;
};

/* A parameter registered anywhere below changes the parameters of every ancestor. */
static void invalidate_param_cache(weft_module *m)
{
    for (; m; m = m->parent) {
        free(m->param_cache);
        m->param_cache = NULL;
        m->param_cache_n = 0;
    }
}

/* ---- growable strings ------------------------------------------------------------- */

struct strbuf {
    char *data;
    size_t len, cap;
    bool failed; /* an allocation failed; the content is incomplete */
};

static void sb_reserve(struct strbuf *sb, size_t extra)
{
    if (sb->failed || sb->len + extra + 1 <= sb->cap)
        return;
    size_t cap = sb->cap ? sb->cap : 64;
    while (cap < sb->len + extra + 1)
        cap *= 2;
    char *p = realloc(sb->data, cap);
    if (!p) {
        sb->failed = true;
        return;
    }
    sb->data = p;
    sb->cap = cap;
}

static void sb_putn(struct strbuf *sb, const char *s, size_t n)
{
    sb_reserve(sb, n);
    if (sb->failed)
        return;
    memcpy(sb->data + sb->len, s, n);
    sb->len += n;
    sb->data[sb->len] = '\0';
}

static void sb_puts(struct strbuf *sb, const char *s)
{
    sb_putn(sb, s, strlen(s));
}

static void sb_printf(struct strbuf *sb, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void sb_printf(struct strbuf *sb, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        sb->failed = true;
        return;
    }
    sb_reserve(sb, (size_t)n);
    if (sb->failed)
        return;
    va_start(ap, fmt);
    vsnprintf(sb->data + sb->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    sb->len += (size_t)n;
}

/* Appends s with every line after the first indented by two spaces (PyTorch's
 * _addindent(s, 2)). */
static void sb_put_indented(struct strbuf *sb, const char *s)
{
    for (const char *nl; (nl = strchr(s, '\n')); s = nl + 1) {
        sb_putn(sb, s, (size_t)(nl - s));
        sb_puts(sb, "\n  ");
    }
    sb_puts(sb, s);
}

static void sb_truncate(struct strbuf *sb, size_t len)
{
    if (!sb->failed && sb->data && len <= sb->len) {
        sb->len = len;
        sb->data[len] = '\0';
    }
}

static int sb_oom(const char *what)
{
    return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory %s", what);
}

/* ---- entry lists ------------------------------------------------------------------ */

static struct entry *entries_find(const struct entries *l, const char *name)
{
    for (int i = 0; i < l->count; i++)
        if (strcmp(l->items[i].name, name) == 0)
            return &l->items[i];
    return NULL;
}

static int entries_push(struct entries *l, const char *name, void *item)
{
    if (l->count == l->capacity) {
        int cap = l->capacity ? l->capacity * 2 : 4;
        struct entry *p = realloc(l->items, (size_t)cap * sizeof *p);
        if (!p)
            return sb_oom("registering a module member");
        l->items = p;
        l->capacity = cap;
    }
    char *copy = strdup(name);
    if (!copy)
        return sb_oom("registering a module member");
    l->items[l->count++] = (struct entry){copy, item};
    return 0;
}

/* ---- the type vtable -------------------------------------------------------------- */

const char weft_kind_module[] = "module";

static int check_module_type(const struct weft_vtable *v)
{
    const struct weft_module_type *type = (const struct weft_module_type *)v;
    if (!type->class_name || !*type->class_name || !type->forward)
        return weft_error_set(WEFT_ERR_PLUGIN, "module type '%s' needs a class_name and a forward",
                              v->name);
    return 0;
}

const struct weft_kind weft_module_kind = {
    .base = WEFT_VTABLE(WEFT_KIND_KIND, WEFT_KIND_MODULE, struct weft_kind),
    .description = "module types (the layers an INI file names)",
    /* The first ABI's struct ends at create(): plugins built before config_export was
     * appended still register. */
    .min_size = offsetof(struct weft_module_type, config_export),
    .check = check_module_type,
};

static void free_state(const struct weft_module_type *type, void *state)
{
    if (state && type->free_state)
        type->free_state(state);
}

/* ---- life cycle ------------------------------------------------------------------- */

weft_module *weft_module_new(const struct weft_module_type *type, void *state)
{
    if (!type) {
        weft_error_set(WEFT_ERR_VALUE, "weft_module_new: the module type is NULL");
        return NULL;
    }
    if (weft_registry_check(type) != 0)
        return NULL;
    if (strcmp(type->base.kind, WEFT_KIND_MODULE) != 0) {
        weft_error_set(WEFT_ERR_VALUE, "weft_module_new: '%s' is a %s, not a module type",
                       type->base.name, type->base.kind);
        return NULL;
    }
    weft_module *m = calloc(1, sizeof *m);
    if (!m) {
        sb_oom("for a module");
        return NULL;
    }
    m->type = type;
    m->state = state;
    m->training = true; /* torch.nn.Module starts in training mode */
    return m;
}

static void free_tree(weft_module *m)
{
    for (int i = 0; i < m->params.count; i++) {
        weft_tensor_release(m->params.items[i].item);
        free(m->params.items[i].name);
    }
    for (int i = 0; i < m->buffers.count; i++) {
        weft_tensor_release(m->buffers.items[i].item);
        free(m->buffers.items[i].name);
    }
    for (int i = 0; i < m->children.count; i++) {
        free_tree(m->children.items[i].item);
        free(m->children.items[i].name);
    }
    free(m->params.items);
    free(m->buffers.items);
    free(m->children.items);
    free(m->param_cache);
    free_state(m->type, m->state);
    free(m);
}

void weft_module_free(weft_module *m)
{
    if (!m)
        return;
    if (m->parent) {
        /* Freeing it here would leave a dangling child in the parent. */
        weft_error_set(WEFT_ERR_RUNTIME,
                       "weft_module_free: this %s belongs to a %s and is freed with it",
                       m->type->class_name, m->parent->type->class_name);
        return;
    }
    free_tree(m);
}

void *weft_module_state(const weft_module *m)
{
    return m ? m->state : NULL;
}

const char *weft_module_type_name(const weft_module *m)
{
    return m ? m->type->class_name : NULL;
}

const struct weft_module_type *weft_module_type(const weft_module *m)
{
    return m ? m->type : NULL;
}

weft_module *weft_module_create(const char *name, const weft_options *options)
{
    const struct weft_module_type *type = weft_registry_get(WEFT_KIND_MODULE, name);
    if (!type)
        return NULL;
    if (!WEFT_VTABLE_HAS(type, create)) {
        weft_error_set(WEFT_ERR_VALUE, "module type '%s' (%s) cannot be built from options",
                       name, type->class_name);
        return NULL;
    }
    weft_module *m = type->create(options);
    if (!m && weft_error_code() == WEFT_OK)
        weft_error_set(WEFT_ERR_RUNTIME, "module type '%s' failed to build without saying why",
                       name);
    return m;
}

int weft_module_config_export(const weft_module *m, struct weft_metadata *meta)
{
    if (!m || !meta)
        return weft_error_set(WEFT_ERR_VALUE, "weft_module_config_export: %s is NULL",
                              m ? "the metadata" : "the module");
    int rc = weft_metadata_set(meta, "model.type", m->type->base.name);
    if (rc == 0 && WEFT_VTABLE_HAS(m->type, config_export))
        rc = m->type->config_export(m, meta);
    if (rc < 0 && weft_error_code() == WEFT_OK)
        rc = weft_error_set(WEFT_ERR_RUNTIME, "%s.config_export failed without saying why",
                            m->type->class_name);
    return rc < 0 ? rc : 0;
}

weft_module *weft_module_create_from_metadata(const struct weft_metadata *meta,
                                              const char *origin)
{
    const char *type = meta ? weft_metadata_get(meta, "model.type") : NULL;
    if (!type) {
        weft_error_set(WEFT_ERR_VALUE,
                       "%s%shas no model config (no key 'model.type' in its metadata): it was "
                       "not saved with weft_module_config_export",
                       origin ? origin : "", origin ? ": the checkpoint " : "the checkpoint ");
        return NULL;
    }
    weft_options *o = weft_options_new("model", origin);
    int rc = o ? 0 : WEFT_ERR_OUT_OF_MEMORY;
    size_t n = weft_metadata_len(meta);
    for (size_t i = 0; i < n && rc == 0; i++) {
        const char *key = weft_metadata_key(meta, i);
        if (strncmp(key, "model.", 6) == 0 && strcmp(key, "model.type") != 0)
            rc = weft_options_set(o, key + 6, weft_metadata_value(meta, i));
    }
    weft_module *m = rc == 0 ? weft_module_create(type, o) : NULL;
    weft_options_free(o);
    return m;
}

/* ---- registration ----------------------------------------------------------------- */

/* PyTorch's checks in register_parameter / register_buffer / add_module. */
static int check_name(const weft_module *m, const char *kind, const char *name)
{
    if (!name)
        return weft_error_set(WEFT_ERR_TYPE, "%s name should be a string. Got NULL", kind);
    if (strchr(name, '.')) {
        if (strcmp(kind, "module") == 0)
            return weft_error_set(WEFT_ERR_VALUE, "module name can't contain \".\", got: %s",
                                  name);
        return weft_error_set(WEFT_ERR_VALUE, "%s name can't contain \".\"", kind);
    }
    if (!*name)
        return weft_error_set(WEFT_ERR_VALUE, "%s name can't be empty string \"\"", kind);
    if (strlen(name) > NAME_MAX_LEN)
        return weft_error_set(WEFT_ERR_VALUE, "%s name '%.40s...' is longer than %zu characters",
                              kind, name, NAME_MAX_LEN);
    if (entries_find(&m->params, name) || entries_find(&m->buffers, name) ||
        entries_find(&m->children, name))
        return weft_error_set(WEFT_ERR_VALUE, "attribute '%s' already exists", name);
    return 0;
}

int weft_module_register_parameter(weft_module *m, const char *name, weft_tensor *t)
{
    if (!m || !t)
        return WEFT_ERR_VALUE;
    int rc = check_name(m, "parameter", name);
    if (rc != 0)
        return rc;
    if (!weft_is_leaf(t))
        return weft_error_set(WEFT_ERR_VALUE,
                              "Cannot assign non-leaf Tensor to parameter '%s'. Model parameters "
                              "must be created explicitly. To express '%s' as a function of "
                              "another Tensor, compute the value in the forward() method.",
                              name, name);
    rc = weft_requires_grad_(t, true);
    if (rc != 0)
        return rc;
    rc = entries_push(&m->params, name, t);
    if (rc == 0) {
        weft_tensor_retain(t);
        invalidate_param_cache(m);
    }
    return rc;
}

int weft_module_register_buffer(weft_module *m, const char *name, weft_tensor *t)
{
    if (!m || !t)
        return WEFT_ERR_VALUE;
    int rc = check_name(m, "buffer", name);
    if (rc == 0)
        rc = entries_push(&m->buffers, name, t);
    if (rc == 0)
        weft_tensor_retain(t);
    return rc;
}

int weft_module_add_child(weft_module *m, const char *name, weft_module *child)
{
    if (!child)
        return WEFT_ERR_VALUE; /* a constructor failed upstream and said why */
    if (child->parent)
        return weft_error_set(WEFT_ERR_VALUE,
                              "cannot add this %s as child '%s': it already belongs to a %s",
                              child->type->class_name, name ? name : "", child->parent->type->class_name);
    for (const weft_module *a = m; a; a = a->parent)
        if (a == child)
            return weft_error_set(WEFT_ERR_VALUE,
                                  "cannot add a module as a child of itself or of one of its "
                                  "descendants");
    if (!m) {
        weft_module_free(child);
        return WEFT_ERR_VALUE;
    }
    int rc = check_name(m, "module", name);
    if (rc == 0)
        rc = entries_push(&m->children, name, child);
    if (rc != 0) {
        weft_module_free(child);
        return rc;
    }
    child->parent = m;
    invalidate_param_cache(m);
    return 0;
}

weft_tensor *weft_module_parameter(const weft_module *m, const char *name)
{
    const struct entry *e = m && name ? entries_find(&m->params, name) : NULL;
    return e ? e->item : NULL;
}

weft_tensor *weft_module_buffer(const weft_module *m, const char *name)
{
    const struct entry *e = m && name ? entries_find(&m->buffers, name) : NULL;
    return e ? e->item : NULL;
}

weft_module *weft_module_child(const weft_module *m, const char *name)
{
    const struct entry *e = m && name ? entries_find(&m->children, name) : NULL;
    return e ? e->item : NULL;
}

/* ---- running ---------------------------------------------------------------------- */

#define MAX_FORWARD_HOOKS 8
static struct {
    weft_module_forward_hook fn;
    void *ctx;
} forward_hooks[MAX_FORWARD_HOOKS];
static int nforward_hooks; /* slots in use: a forward checks one int when there are none */

int weft_register_module_forward_hook(weft_module_forward_hook fn, void *ctx)
{
    for (int i = 0; fn && i < MAX_FORWARD_HOOKS; i++)
        if (!forward_hooks[i].fn) {
            forward_hooks[i].fn = fn;
            forward_hooks[i].ctx = ctx;
            nforward_hooks++;
            return i + 1;
        }
    return weft_error_set(WEFT_ERR_VALUE, "weft_register_module_forward_hook: %s",
                          fn ? "8 hooks are registered already" : "the hook is NULL");
}

bool nn_forward_hooked(void)
{
    return nforward_hooks > 0;
}

void weft_remove_module_forward_hook(int handle)
{
    if (handle < 1 || handle > MAX_FORWARD_HOOKS || !forward_hooks[handle - 1].fn)
        return;
    forward_hooks[handle - 1].fn = NULL;
    nforward_hooks--;
}

weft_tensor *weft_module_forward(weft_module *m, weft_tensor *input)
{
    if (!m || !input)
        return NULL;
    weft_tensor *out = m->type->forward(m, input);
    if (!out && weft_error_code() == WEFT_OK)
        weft_error_set(WEFT_ERR_RUNTIME, "%s.forward returned no tensor and set no error",
                       m->type->class_name);
    for (int i = 0; nforward_hooks > 0 && i < MAX_FORWARD_HOOKS; i++)
        if (forward_hooks[i].fn)
            forward_hooks[i].fn(forward_hooks[i].ctx, m, input, out);
    return out;
}

void weft_module_train(weft_module *m, bool training)
{
    if (!m)
        return;
    m->training = training;
    for (int i = 0; i < m->children.count; i++)
        weft_module_train(m->children.items[i].item, training);
}

bool weft_module_is_training(const weft_module *m)
{
    return m && m->training;
}

/* ---- walking the tree ------------------------------------------------------------- */

enum { WALK_PARAMS = 1u, WALK_BUFFERS = 2u };

typedef int (*visit_fn)(void *ctx, const char *name, weft_tensor *t);

/* Calls fn for every parameter and/or buffer under its dotted name, in PyTorch's
 * state_dict order: a module's parameters, its buffers, then each child's in turn. */
static int walk(const weft_module *m, struct strbuf *path, unsigned kinds, visit_fn fn, void *ctx)
{
    size_t base = path->len;
    const struct entries *lists[2] = {&m->params, &m->buffers};
    for (int k = 0; k < 2; k++) {
        if (!(kinds & (1u << k)))
            continue;
        for (int i = 0; i < lists[k]->count; i++) {
            sb_truncate(path, base);
            sb_puts(path, lists[k]->items[i].name);
            if (path->failed)
                return sb_oom("naming module tensors");
            int rc = fn(ctx, path->data, lists[k]->items[i].item);
            if (rc != 0)
                return rc;
        }
    }
    for (int i = 0; i < m->children.count; i++) {
        sb_truncate(path, base);
        sb_printf(path, "%s.", m->children.items[i].name);
        if (path->failed)
            return sb_oom("naming module tensors");
        int rc = walk(m->children.items[i].item, path, kinds, fn, ctx);
        if (rc != 0)
            return rc;
    }
    sb_truncate(path, base);
    return 0;
}

static int walk_from_root(const weft_module *m, unsigned kinds, visit_fn fn, void *ctx)
{
    struct strbuf path = {0};
    sb_puts(&path, "");
    int rc = path.failed ? sb_oom("naming module tensors") : walk(m, &path, kinds, fn, ctx);
    free(path.data);
    return rc;
}

/* Named tensors, each tensor once (the first name wins, as named_parameters()). */
struct collected {
    struct weft_named_tensor *items;
    int count, capacity;
};

static int collect_visit(void *ctx, const char *name, weft_tensor *t)
{
    struct collected *c = ctx;
    for (int i = 0; i < c->count; i++)
        if (c->items[i].tensor == t)
            return 0;
    if (strlen(name) > NAME_MAX_LEN)
        return weft_error_set(WEFT_ERR_VALUE,
                              "tensor name '%.60s...' is longer than %zu characters", name,
                              NAME_MAX_LEN);
    if (c->count == c->capacity) {
        int cap = c->capacity ? c->capacity * 2 : 16;
        struct weft_named_tensor *p = realloc(c->items, (size_t)cap * sizeof *p);
        if (!p)
            return sb_oom("listing module tensors");
        c->items = p;
        c->capacity = cap;
    }
    struct weft_named_tensor *e = &c->items[c->count++];
    memset(e->name, 0, sizeof e->name);
    memcpy(e->name, name, strlen(name));
    e->tensor = t;
    return 0;
}

static int collect(const weft_module *m, unsigned kinds, struct weft_named_tensor **out)
{
    if (out)
        *out = NULL;
    if (!m || !out)
        return WEFT_ERR_VALUE;
    struct collected c = {0};
    int rc = walk_from_root(m, kinds, collect_visit, &c);
    if (rc != 0) {
        free(c.items);
        return rc;
    }
    *out = c.items;
    return c.count;
}

int weft_module_named_parameters(const weft_module *m, struct weft_named_tensor **out)
{
    return collect(m, WALK_PARAMS, out);
}

int weft_module_named_buffers(const weft_module *m, struct weft_named_tensor **out)
{
    return collect(m, WALK_BUFFERS, out);
}

weft_tensor *const *weft_module_parameters(const weft_module *m, int *n)
{
    if (n)
        *n = 0;
    if (!m || !n) {
        weft_error_set(WEFT_ERR_VALUE, "weft_module_parameters: needs a module and a count");
        return NULL;
    }
    /* The cache is a memo of the tree, not part of its value: const for the caller. */
    weft_module *mm = (weft_module *)m;
    if (!mm->param_cache) {
        struct weft_named_tensor *named;
        int count = collect(m, WALK_PARAMS, &named);
        if (count < 0)
            return NULL;
        /* one extra slot: a module without parameters still gets a non-NULL array */
        weft_tensor **arr = malloc(((size_t)count + 1) * sizeof *arr);
        if (!arr) {
            free(named);
            sb_oom("listing module parameters");
            return NULL;
        }
        for (int i = 0; i < count; i++)
            arr[i] = named[i].tensor;
        arr[count] = NULL;
        free(named);
        mm->param_cache = arr;
        mm->param_cache_n = count;
    }
    *n = mm->param_cache_n;
    return mm->param_cache;
}

int64_t weft_module_num_parameters(const weft_module *m)
{
    struct weft_named_tensor *params;
    int n = collect(m, WALK_PARAMS, &params);
    if (n < 0)
        return n;
    int64_t total = 0;
    for (int i = 0; i < n; i++)
        total += weft_tensor_numel(params[i].tensor);
    free(params);
    return total;
}

/* ---- conversion in place ---------------------------------------------------------- */

/* Exchanges everything but identity: the reference count and the autograd metadata stay
 * with the struct, so every holder of `a` sees b's data, shape, dtype and device. */
static void swap_contents(weft_tensor *a, weft_tensor *b)
{
    weft_tensor old_a = *a;
    uint32_t b_refcount = b->refcount;
    struct weft_autograd_meta *b_autograd = b->autograd;
    *a = *b;
    a->refcount = old_a.refcount;
    a->autograd = old_a.autograd;
    *b = old_a;
    b->refcount = b_refcount;
    b->autograd = b_autograd;
}

/* PyTorch's Module._apply converts floating tensors to dtype and moves all to dev. */
static weft_tensor *converted(weft_tensor *t, weft_device dev, enum weft_dtype dtype)
{
    return weft_to(t, dev, weft_dtype_is_floating(t->dtype) ? dtype : t->dtype, false);
}

int weft_module_to(weft_module *m, weft_device dev, enum weft_dtype dtype)
{
    if (!m)
        return WEFT_ERR_VALUE;
    if (!weft_dtype_valid(dtype) || !weft_dtype_is_floating(dtype))
        return weft_error_set(WEFT_ERR_TYPE,
                              "nn.Module.to only accepts floating point or complex dtypes, but "
                              "got desired dtype=torch.%s",
                              weft_dtype_name(dtype));
    struct weft_named_tensor *ts;
    int n = collect(m, WALK_PARAMS | WALK_BUFFERS, &ts);
    if (n < 0)
        return n;
    /* Tensors, then the parameters' grads; all converted before any is swapped, so a
     * failure leaves the module as it was. */
    weft_tensor **src = calloc((size_t)(2 * n + 1), sizeof *src);
    weft_tensor **dst = calloc((size_t)(2 * n + 1), sizeof *dst);
    int count = 0, rc = 0;
    if (!src || !dst) {
        rc = sb_oom("converting a module");
        goto out;
    }
    weft_scope_push();
    bool prev = weft_no_grad_begin();
    for (int i = 0; i < n && rc == 0; i++) {
        weft_tensor *t = ts[i].tensor, *g = weft_grad(t);
        src[count] = t;
        dst[count] = converted(t, dev, dtype);
        rc = dst[count++] ? 0 : weft_error_code();
        if (g && rc == 0) {
            src[count] = g;
            dst[count] = converted(g, dev, dtype);
            rc = dst[count++] ? 0 : weft_error_code();
        }
    }
    weft_grad_mode_restore(prev);
    for (int i = 0; i < count && rc == 0; i++)
        if (dst[i] != src[i])
            swap_contents(src[i], dst[i]);
    weft_scope_pop(); /* the converted headers now hold the old contents */
out:
    free(src);
    free(dst);
    free(ts);
    return rc;
}

/* ---- repr ------------------------------------------------------------------------- */

/* The type's extra_repr text (malloc'd, "" when it has none), or NULL with an error. */
static char *extra_repr(const weft_module *m)
{
    const struct weft_module_type *type = m->type;
    if (!type->extra_repr)
        return strdup("");
    char small[256];
    int n = type->extra_repr(m, small, sizeof small);
    if (n >= 0 && (size_t)n < sizeof small)
        return strdup(small);
    if (n < 0) {
        if (weft_error_code() == WEFT_OK)
            weft_error_set(WEFT_ERR_RUNTIME, "%s.extra_repr failed", type->class_name);
        return NULL;
    }
    char *big = malloc((size_t)n + 1);
    if (big && type->extra_repr(m, big, (size_t)n + 1) < 0) {
        free(big);
        return NULL;
    }
    return big;
}

/* PyTorch's Module.__repr__. */
static int repr_into(const weft_module *m, struct strbuf *sb)
{
    char *extra = extra_repr(m);
    if (!extra)
        return weft_error_code() ? weft_error_code() : sb_oom("in a module repr");
    sb_printf(sb, "%s(", m->type->class_name);
    if (*extra && !strchr(extra, '\n') && m->children.count == 0) {
        sb_puts(sb, extra); /* the one-liner most builtin modules use */
    } else if (*extra || m->children.count) {
        if (*extra) {
            sb_puts(sb, "\n  ");
            sb_put_indented(sb, extra);
        }
        for (int i = 0; i < m->children.count; i++) {
            struct strbuf child = {0};
            int rc = repr_into(m->children.items[i].item, &child);
            if (rc != 0) {
                free(child.data);
                free(extra);
                return rc;
            }
            sb_printf(sb, "\n  (%s): ", m->children.items[i].name);
            sb_put_indented(sb, child.failed ? "" : child.data);
            sb->failed |= child.failed;
            free(child.data);
        }
        sb_puts(sb, "\n");
    }
    sb_puts(sb, ")");
    free(extra);
    return sb->failed ? sb_oom("in a module repr") : 0;
}

char *weft_module_repr(const weft_module *m)
{
    if (!m)
        return NULL;
    struct strbuf sb = {0};
    if (repr_into(m, &sb) != 0) {
        free(sb.data);
        return NULL;
    }
    return sb.data;
}

/* ---- state dicts ------------------------------------------------------------------ */

static int state_visit(void *ctx, const char *name, weft_tensor *t)
{
    weft_tensor *d = weft_detach(t); /* recorded in the caller's scope */
    if (!d)
        return weft_error_code();
    return weft_tensor_dict_add(ctx, name, d) < 0 ? weft_error_code() : 0;
}

struct weft_tensor_dict *weft_module_state_dict(const weft_module *m)
{
    if (!m)
        return NULL;
    struct weft_tensor_dict *d = weft_tensor_dict_new();
    if (!d)
        return NULL;
    weft_scope_push();
    int rc = walk_from_root(m, WALK_PARAMS | WALK_BUFFERS, state_visit, d);
    weft_scope_pop();
    if (rc != 0) {
        weft_tensor_dict_free(d);
        return NULL;
    }
    return d;
}

struct pending_copy {
    weft_tensor *dst, *src; /* src: a reference owned by the load's scope */
    char *key;
};

struct load {
    const struct weft_tensor_dict *dict;
    struct strbuf missing, unexpected, errors; /* PyTorch's three lists, formatted */
    struct pending_copy *copies;
    int ncopies, capacity;
};

static void torch_size(struct strbuf *sb, const weft_tensor *t)
{
    char shape[200];
    sb_printf(sb, "torch.Size(%s)", weft_shape_str(t->ndim, t->shape, shape, sizeof shape));
}

static void list_add(struct strbuf *list, const char *key)
{
    sb_printf(list, "%s\"%s\"", list->len ? ", " : "", key);
}

static int queue_copy(struct load *ld, const char *key, weft_tensor *dst, weft_tensor *src)
{
    if (ld->ncopies == ld->capacity) {
        int cap = ld->capacity ? ld->capacity * 2 : 16;
        struct pending_copy *p = realloc(ld->copies, (size_t)cap * sizeof *p);
        if (!p)
            return sb_oom("loading a state_dict");
        ld->copies = p;
        ld->capacity = cap;
    }
    char *k = strdup(key);
    if (!k)
        return sb_oom("loading a state_dict");
    ld->copies[ld->ncopies++] = (struct pending_copy){dst, src, k};
    return 0;
}

static bool same_shape(const weft_tensor *a, const weft_tensor *b)
{
    return a->ndim == b->ndim &&
           memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof *a->shape) == 0;
}

/* One local parameter or buffer: PyTorch's _load_from_state_dict for it. */
static int load_local(struct load *ld, const char *key, weft_tensor *dst)
{
    weft_tensor *src = weft_tensor_dict_get(ld->dict, key);
    if (!src) {
        list_add(&ld->missing, key);
        return 0;
    }
    /* Backward compatibility (PyTorch 0.3): a 1-dim checkpoint value for a 0-dim one. */
    if (dst->ndim == 0 && src->ndim == 1 && src->shape[0] > 0)
        src = weft_select(src, 0, 0);
    if (!src)
        return weft_error_code();
    if (!same_shape(dst, src)) {
        struct strbuf *e = &ld->errors;
        sb_printf(e, "%ssize mismatch for %s: copying a param with shape ", e->len ? "\n\t" : "",
                  key);
        torch_size(e, src);
        sb_puts(e, " from checkpoint, the shape in current model is ");
        torch_size(e, dst);
        sb_puts(e, ".");
        return 0;
    }
    return queue_copy(ld, key, dst, src);
}

/* True when the first dotted component of rest names a child or local tensor of m. */
static bool key_expected(const weft_module *m, const char *rest)
{
    const char *dot = strchr(rest, '.');
    size_t n = dot ? (size_t)(dot - rest) : strlen(rest);
    const struct entries *lists[3] = {&m->params, &m->buffers, &m->children};
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < lists[k]->count; i++) {
            const char *name = lists[k]->items[i].name;
            if (strlen(name) == n && memcmp(name, rest, n) == 0)
                return true;
        }
    return false;
}

/* PyTorch's load(): this module's tensors, its unexpected keys, then its children. */
static int load_module(struct load *ld, const weft_module *m, struct strbuf *prefix)
{
    size_t base = prefix->len;
    const struct entries *lists[2] = {&m->params, &m->buffers};
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < lists[k]->count; i++) {
            sb_truncate(prefix, base);
            sb_puts(prefix, lists[k]->items[i].name);
            if (prefix->failed)
                return sb_oom("loading a state_dict");
            int rc = load_local(ld, prefix->data, lists[k]->items[i].item);
            if (rc != 0)
                return rc;
        }
    sb_truncate(prefix, base);
    size_t n = weft_tensor_dict_len(ld->dict);
    for (size_t i = 0; i < n; i++) {
        const char *key = weft_tensor_dict_name(ld->dict, i);
        if (strncmp(key, prefix->data, base) == 0 && !key_expected(m, key + base))
            list_add(&ld->unexpected, key);
    }
    for (int i = 0; i < m->children.count; i++) {
        sb_truncate(prefix, base);
        sb_printf(prefix, "%s.", m->children.items[i].name);
        if (prefix->failed)
            return sb_oom("loading a state_dict");
        int rc = load_module(ld, m->children.items[i].item, prefix);
        if (rc != 0)
            return rc;
    }
    sb_truncate(prefix, base);
    return 0;
}

/* "Error(s) in loading state_dict for Sequential:\n\t" and the messages, PyTorch's order:
 * missing keys, unexpected keys (both only when strict), then the rest. */
static int report(const struct load *ld, const weft_module *m, bool strict)
{
    struct strbuf msg = {0};
    sb_printf(&msg, "Error(s) in loading state_dict for %s:", m->type->class_name);
    bool any = false;
    if (strict && ld->missing.len) {
        sb_printf(&msg, "\n\tMissing key(s) in state_dict: %s. ", ld->missing.data);
        any = true;
    }
    if (strict && ld->unexpected.len) {
        sb_printf(&msg, "\n\tUnexpected key(s) in state_dict: %s. ", ld->unexpected.data);
        any = true;
    }
    if (ld->errors.len) {
        sb_printf(&msg, "\n\t%s", ld->errors.data);
        any = true;
    }
    int rc = 0;
    if (msg.failed || ld->missing.failed || ld->unexpected.failed || ld->errors.failed)
        rc = sb_oom("loading a state_dict");
    else if (any)
        rc = weft_error_set(WEFT_ERR_RUNTIME, "%s", msg.data);
    free(msg.data);
    return rc;
}

/* Copies with grad mode off; a failing copy is reported as PyTorch wraps it. */
static int run_copies(const struct load *ld, const weft_module *m)
{
    bool prev = weft_no_grad_begin();
    int rc = 0;
    for (int i = 0; i < ld->ncopies && rc == 0; i++) {
        const struct pending_copy *c = &ld->copies[i];
        if (weft_copy_(c->dst, c->src) == 0)
            continue;
        struct strbuf msg = {0};
        sb_printf(&msg,
                  "Error(s) in loading state_dict for %s:\n\tWhile copying the parameter named "
                  "\"%s\", whose dimensions in the model are ",
                  m->type->class_name, c->key);
        torch_size(&msg, c->dst);
        sb_puts(&msg, " and whose dimensions in the checkpoint are ");
        torch_size(&msg, c->src);
        sb_printf(&msg, ", an exception occurred : ('%s',).", weft_error_message());
        rc = weft_error_code();
        if (!msg.failed) {
            weft_error_clear();
            weft_error_set(rc, "%s", msg.data);
        }
        free(msg.data);
    }
    weft_grad_mode_restore(prev);
    return rc;
}

int weft_module_load_state_dict(weft_module *m, const struct weft_tensor_dict *d, bool strict)
{
    if (!m || !d)
        return WEFT_ERR_VALUE;
    struct load ld = {.dict = d};
    struct strbuf prefix = {0};
    sb_puts(&prefix, "");
    weft_scope_push();
    int rc = prefix.failed ? sb_oom("loading a state_dict") : load_module(&ld, m, &prefix);
    if (rc == 0)
        rc = report(&ld, m, strict);
    if (rc == 0)
        rc = run_copies(&ld, m);
    weft_scope_pop();
    for (int i = 0; i < ld.ncopies; i++)
        free(ld.copies[i].key);
    free(ld.copies);
    free(ld.missing.data);
    free(ld.unexpected.data);
    free(ld.errors.data);
    free(prefix.data);
    return rc;
}

/* ---- children and swapping ---------------------------------------------------------- */

int weft_module_num_children(const weft_module *m)
{
    return m ? m->children.count : 0;
}

weft_module *weft_module_child_at(const weft_module *m, int i)
{
    return m && i >= 0 && i < m->children.count ? m->children.items[i].item : NULL;
}

const char *weft_module_child_name(const weft_module *m, int i)
{
    return m && i >= 0 && i < m->children.count ? m->children.items[i].name : NULL;
}

int weft_module_swap(weft_module *a, weft_module *b)
{
    if (!a || !b)
        return weft_error_set(WEFT_ERR_VALUE, "weft_module_swap: a module is NULL");
    if (b->parent)
        return weft_error_set(WEFT_ERR_VALUE,
                              "weft_module_swap: the replacement %s belongs to a %s; give a "
                              "module of its own",
                              b->type->class_name, b->parent->type->class_name);
    for (const weft_module *p = a; p; p = p->parent)
        if (p == b)
            return weft_error_set(WEFT_ERR_VALUE, "weft_module_swap: a module cannot take the "
                                                  "place of one of its descendants");
    weft_module tmp = *a;
    *a = *b;
    *b = tmp;
    /* Identity and place stay: a keeps its parent, b (parentless) stays so; the children
     * moved with the contents and now answer to their new holder. */
    a->parent = tmp.parent;
    b->parent = NULL;
    for (int i = 0; i < a->children.count; i++)
        ((weft_module *)a->children.items[i].item)->parent = a;
    for (int i = 0; i < b->children.count; i++)
        ((weft_module *)b->children.items[i].item)->parent = b;
    invalidate_param_cache(a);
    invalidate_param_cache(b);
    return 0;
}
