/* core/layout.c: the registry of non-strided layouts and the tensors that use them. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "weft/layout.h"
#include "weft/plugin.h"

static const struct weft_layout_ops *registered[WEFT_LAYOUT_COUNT];
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;

static const char *const builtin_names[WEFT_LAYOUT_COUNT] = {"strided", "sparse_coo",
                                                             "sparse_csr", NULL};

static const struct weft_layout_ops *ops_of(int layout)
{
    if (layout <= WEFT_LAYOUT_STRIDED || layout >= WEFT_LAYOUT_COUNT)
        return NULL;
    return __atomic_load_n(&registered[layout], __ATOMIC_ACQUIRE);
}

int weft_layout_register(const struct weft_layout_ops *ops)
{
    if (!ops)
        return weft_error_set(WEFT_ERR_VALUE, "weft_layout_register: ops is NULL");
    if (ops->abi_version != WEFT_PLUGIN_ABI_VERSION)
        return weft_error_set(WEFT_ERR_PLUGIN,
                              "layout '%s' was built for plugin ABI %u, but this weft has ABI %d",
                              ops->name ? ops->name : "?", ops->abi_version,
                              WEFT_PLUGIN_ABI_VERSION);
    if (ops->struct_size < offsetof(struct weft_layout_ops, repr) + sizeof ops->repr)
        return weft_error_set(WEFT_ERR_PLUGIN,
                              "layout '%s': struct_size %u is smaller than ABI %d's %zu",
                              ops->name ? ops->name : "?", ops->struct_size,
                              WEFT_PLUGIN_ABI_VERSION, sizeof *ops);
    if (ops->layout <= WEFT_LAYOUT_STRIDED || ops->layout >= WEFT_LAYOUT_COUNT)
        return weft_error_set(WEFT_ERR_VALUE, "weft_layout_register: layout id %d is not in [1, %d]",
                              (int)ops->layout, WEFT_LAYOUT_COUNT - 1);
    if (!ops->name || !ops->name[0] || !ops->free || !ops->nnz)
        return weft_error_set(WEFT_ERR_PLUGIN,
                              "weft_layout_register: layout %d needs a name, free() and nnz()",
                              (int)ops->layout);
    int rc = 0;
    pthread_mutex_lock(&registry_lock);
    const struct weft_layout_ops *old = registered[ops->layout];
    if (old && old != ops)
        rc = weft_error_set(WEFT_ERR_PLUGIN, "layout %d is already registered as '%s'",
                            (int)ops->layout, old->name);
    else
        __atomic_store_n(&registered[ops->layout], ops, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&registry_lock);
    return rc;
}

const struct weft_layout_ops *weft_layout_find(int layout)
{
    return ops_of(layout);
}

const char *weft_layout_name(int layout)
{
    const struct weft_layout_ops *ops = ops_of(layout);
    if (ops)
        return ops->name;
    if (layout >= 0 && layout < WEFT_LAYOUT_COUNT && builtin_names[layout])
        return builtin_names[layout];
    static const char *const others[] = {"layout3", "layout?"};
    return layout == 3 ? others[0] : others[1];
}

weft_tensor *weft_tensor_new_layout(int layout, int ndim, const int64_t *shape,
                                    enum weft_dtype dtype, weft_device dev, void *layout_data)
{
    const struct weft_layout_ops *ops = ops_of(layout);
    if (!ops) {
        weft_error_set(WEFT_ERR_NOT_IMPLEMENTED,
                       "layout %s is not registered (load the plugin that provides it, e.g. "
                       "'sparse')", weft_layout_name(layout));
        return NULL; /* nobody can free layout_data: the caller still owns it */
    }
    if (!layout_data || weft_check_shape(ndim, shape) != 0 || !weft_dtype_valid(dtype)) {
        if (layout_data)
            ops->free(layout_data);
        if (!layout_data)
            weft_error_set(WEFT_ERR_VALUE, "weft_tensor_new_layout: layout_data is NULL");
        else if (!weft_dtype_valid(dtype))
            weft_error_set(WEFT_ERR_VALUE, "weft_tensor_new_layout: invalid dtype %d", (int)dtype);
        return NULL;
    }
    weft_tensor *t = weft_tensor_alloc_struct();
    if (!t) {
        ops->free(layout_data);
        return NULL;
    }
    t->ndim = ndim;
    t->dtype = dtype;
    t->layout = (enum weft_layout)layout;
    t->device = dev;
    for (int d = 0; d < ndim; d++)
        t->shape[d] = shape[d];
    t->layout_data = layout_data;
    return weft_tensor_finish(t);
}

void *weft_tensor_layout_data(const weft_tensor *t)
{
    return t && t->layout != WEFT_LAYOUT_STRIDED ? t->layout_data : NULL;
}

bool weft_tensor_is_sparse(const weft_tensor *t)
{
    return t && t->layout != WEFT_LAYOUT_STRIDED;
}

int64_t weft_tensor_nnz(const weft_tensor *t)
{
    if (!t)
        return -1;
    const struct weft_layout_ops *ops = ops_of(t->layout);
    if (!ops) {
        weft_error_set(WEFT_ERR_RUNTIME, "_nnz is not defined for %s tensors",
                       weft_layout_name(t->layout));
        return -1;
    }
    return ops->nnz(t);
}

void weft_layout_data_free(weft_tensor *t)
{
    const struct weft_layout_ops *ops = ops_of(t->layout);
    if (ops && t->layout_data)
        ops->free(t->layout_data);
    t->layout_data = NULL;
}

char *weft_layout_repr(const weft_tensor *t)
{
    const struct weft_layout_ops *ops = ops_of(t->layout);
    if (!ops || !ops->repr) {
        weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "repr: layout %s has no printer",
                       weft_layout_name(t->layout));
        return NULL;
    }
    return ops->repr(t);
}

int weft_require_strided(const weft_tensor *t, const char *op)
{
    if (t->layout == WEFT_LAYOUT_STRIDED && t->storage)
        return 0;
    return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED,
                          "%s(): expected a strided tensor, but got layout %s (sparse tensors "
                          "have their own ops: see weft/sparse.h)",
                          op, weft_layout_name(t->layout));
}

weft_tensor *weft_layout_add(const weft_tensor *a, const weft_tensor *b)
{
    if (!a || !b)
        return NULL;
    if (a->layout != b->layout) {
        weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "cannot add a %s gradient to a %s one",
                       weft_layout_name(b->layout), weft_layout_name(a->layout));
        return NULL;
    }
    const struct weft_layout_ops *ops = ops_of(a->layout);
    if (!ops || ops->struct_size < offsetof(struct weft_layout_ops, add) + sizeof ops->add ||
        !ops->add) {
        weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "layout %s cannot add tensors (its plugin "
                       "gives no add())", weft_layout_name(a->layout));
        return NULL;
    }
    return ops->add(a, b);
}
