/* plugins/sparse/layout.c: the sparse_coo and sparse_csr layouts: their ids, the vtables
 * the core calls (free, nnz, repr, add) and the internal constructors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft/error.h>
#include <weft/registry.h>

#include "sparse_impl.h"

static void sparse_data_free(void *p)
{
    struct sparse_data *s = p;
    weft_tensor_release(s->indices);
    weft_tensor_release(s->crow);
    weft_tensor_release(s->col);
    weft_tensor_release(s->values);
    free(s);
}

static int64_t sparse_data_nnz(const weft_tensor *t)
{
    const struct sparse_data *s = t->layout_data;
    return s ? sparse_nnz(s) : 0;
}

/* Autograd sums the gradients of a sparse tensor used twice with this (grad mode is off
 * while backward runs, so nothing is recorded). */
static weft_tensor *sparse_layout_add(const weft_tensor *a, const weft_tensor *b)
{
    return sparse_api_add(a, b, 1.0);
}

int sparse_coo_layout = -1, sparse_csr_layout = -1;

static const struct weft_layout coo_ops = {
    .base = WEFT_VTABLE(WEFT_KIND_LAYOUT, "sparse_coo", struct weft_layout),
    .free = sparse_data_free,
    .nnz = sparse_data_nnz,
    .repr = sparse_repr,
    .add = sparse_layout_add,
};

static const struct weft_layout csr_ops = {
    .base = WEFT_VTABLE(WEFT_KIND_LAYOUT, "sparse_csr", struct weft_layout),
    .free = sparse_data_free,
    .nnz = sparse_data_nnz,
    .repr = sparse_repr,
    .add = sparse_layout_add,
};

int sparse_layouts_register(void)
{
    sparse_coo_layout = weft_register(&coo_ops);
    sparse_csr_layout = sparse_coo_layout < 0 ? -1 : weft_register(&csr_ops);
    return sparse_csr_layout < 0 ? WEFT_ERR_PLUGIN : 0;
}

struct sparse_data *sparse_data_of(const weft_tensor *t, int layout, const char *what)
{
    if (!t)
        return NULL;
    bool ok = layout < 0 ? t->layout == sparse_coo_layout || t->layout == sparse_csr_layout
                         : (int)t->layout == layout;
    if (!ok || !t->layout_data) {
        weft_error_set(WEFT_ERR_RUNTIME, "%s expected a %s tensor, but got layout %s", what,
                       layout < 0 ? "sparse" : weft_layout_name(layout),
                       weft_layout_name(t->layout));
        return NULL;
    }
    return t->layout_data;
}

static void release_all(weft_tensor *a, weft_tensor *b, weft_tensor *c)
{
    weft_tensor_release(a);
    weft_tensor_release(b);
    weft_tensor_release(c);
}

weft_tensor *sparse_make_coo(weft_tensor *indices, weft_tensor *values, int ndim,
                             const int64_t *size, bool coalesced)
{
    if (!indices || !values) {
        release_all(indices, values, NULL);
        return NULL;
    }
    struct sparse_data *s = calloc(1, sizeof *s);
    if (!s) {
        release_all(indices, values, NULL);
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "sparse_coo: out of host memory");
        return NULL;
    }
    s->indices = indices;
    s->values = values;
    s->coalesced = coalesced;
    return weft_tensor_new_layout(sparse_coo_layout, ndim, size, values->dtype,
                                  values->device, s);
}

weft_tensor *sparse_make_csr(weft_tensor *crow, weft_tensor *col, weft_tensor *values,
                             const int64_t size[2])
{
    if (!crow || !col || !values) {
        release_all(crow, col, values);
        return NULL;
    }
    struct sparse_data *s = calloc(1, sizeof *s);
    if (!s) {
        release_all(crow, col, values);
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "sparse_csr: out of host memory");
        return NULL;
    }
    s->crow = crow;
    s->col = col;
    s->values = values;
    s->coalesced = true;
    return weft_tensor_new_layout(sparse_csr_layout, 2, size, values->dtype, values->device,
                                  s);
}
