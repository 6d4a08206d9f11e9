/* core/layout.c: the layout kind (layouts by id) and the tensors that use them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "weft/layout.h"
#include "weft/registry.h"

static const struct weft_layout *layouts[WEFT_MAX_LAYOUTS];

static int check_layout(const struct weft_vtable *v)
{
    const struct weft_layout *l = (const struct weft_layout *)v;
    if (!l->free || !l->nnz)
        return weft_error_set(WEFT_ERR_PLUGIN, "layout '%s' needs free() and nnz()", v->name);
    if (strcmp(v->name, "strided") == 0)
        return weft_error_set(WEFT_ERR_PLUGIN, "layout 'strided' is the core's own");
    return 0;
}

/* Ids follow registration: the first plugin layout is 1. */
static int layout_added(const struct weft_vtable *v, int index)
{
    int id = index + 1;
    if (id >= WEFT_MAX_LAYOUTS)
        return weft_error_set(WEFT_ERR_PLUGIN,
                              "cannot register layout '%s': all %d layout ids are taken", v->name,
                              WEFT_MAX_LAYOUTS - 1);
    __atomic_store_n(&layouts[id], (const struct weft_layout *)v, __ATOMIC_RELEASE);
    return id;
}

const struct weft_kind weft_layout_kind = {
    .base = WEFT_VTABLE(WEFT_KIND_KIND, WEFT_KIND_LAYOUT, struct weft_kind),
    .description = "tensor layouts other than strided",
    .min_size = sizeof(struct weft_layout),
    .check = check_layout,
    .added = layout_added,
};

static const struct weft_layout *ops_of(int layout)
{
    if (layout <= WEFT_LAYOUT_STRIDED || layout >= WEFT_MAX_LAYOUTS)
        return NULL;
    return __atomic_load_n(&layouts[layout], __ATOMIC_ACQUIRE);
}

int weft_layout_id(const char *name)
{
    if (name && strcmp(name, "strided") == 0)
        return WEFT_LAYOUT_STRIDED;
    const void *v = weft_registry_get(WEFT_KIND_LAYOUT, name);
    return v ? weft_registry_id(v) : (weft_error_code() ? weft_error_code() : WEFT_ERR_PLUGIN);
}

const struct weft_layout *weft_layout_find(int layout)
{
    return ops_of(layout);
}

const char *weft_layout_name(int layout)
{
    static const char *const names[WEFT_MAX_LAYOUTS + 1] = {
        "strided", "layout1", "layout2", "layout3", "layout4", "layout5", "layout6",
        "layout7", "layout?"};
    const struct weft_layout *l = ops_of(layout);
    if (l)
        return l->base.name;
    return names[layout >= 0 && layout < WEFT_MAX_LAYOUTS ? layout : WEFT_MAX_LAYOUTS];
}

weft_tensor *weft_tensor_new_layout(int layout, int ndim, const int64_t *shape,
                                    enum weft_dtype dtype, weft_device dev, void *layout_data)
{
    const struct weft_layout *ops = ops_of(layout);
    if (!ops) {
        weft_error_set(WEFT_ERR_NOT_IMPLEMENTED,
                       "layout %s is not registered (its plugin registers it when it loads)",
                       weft_layout_name(layout));
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
    t->layout = layout;
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
    const struct weft_layout *ops = ops_of(t->layout);
    if (!ops) {
        weft_error_set(WEFT_ERR_RUNTIME, "_nnz is not defined for %s tensors",
                       weft_layout_name(t->layout));
        return -1;
    }
    return ops->nnz(t);
}

void weft_layout_data_free(weft_tensor *t)
{
    const struct weft_layout *ops = ops_of(t->layout);
    if (ops && t->layout_data)
        ops->free(t->layout_data);
    t->layout_data = NULL;
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
    const struct weft_layout *ops = ops_of(a->layout);
    if (!ops || !WEFT_VTABLE_HAS(ops, add)) {
        weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "layout %s cannot add tensors (its plugin "
                       "gives no add())", weft_layout_name(a->layout));
        return NULL;
    }
    return ops->add(a, b);
}
