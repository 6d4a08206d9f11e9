/* weft/layout.h: tensor layouts other than strided, as the core sees them.
 *
 * The core knows a non-strided layout only by the id it got when its plugin registered
 * it and by the small vtable below (kind WEFT_KIND_LAYOUT, weft/registry.h):
 * weft-sparse.so registers sparse_coo and sparse_csr. Such a tensor has no storage; its
 * ndim, shape, dtype and device describe the logical (dense) tensor, and `layout_data`
 * is the plugin's own state (for sparse layouts, the index and value tensors). The core
 * frees layout_data through the vtable when the last reference goes, prints the tensor
 * through it, and refuses strided-only operations on it with errors that name the layout.
 *
 * Ops on a layout are ordinary kernels registered for (op, device type, layout id) with
 * weft_kernel_register (weft/dispatch.h).
 */
#ifndef WEFT_LAYOUT_H
#define WEFT_LAYOUT_H

#include <stdint.h>
#include <stdio.h>

#include "weft/registry.h"
#include "weft/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

struct weft_layout {
    struct weft_vtable base; /* kind WEFT_KIND_LAYOUT; name: "sparse_coo", as torch.sparse_coo */
    /* Required: frees a tensor's layout_data (never NULL when called). */
    void (*free)(void *layout_data);
    /* Required: number of specified elements (torch's _nnz()). */
    int64_t (*nnz)(const weft_tensor *t);
    /* Optional: PyTorch's repr of t as a malloc'd string, or NULL with an error set. */
    char *(*repr)(const weft_tensor *t);
    /* Optional: a + b for two tensors of this layout with one shape, dtype and device, a
     * new reference (as any weft result), or NULL with an error. Autograd sums the
     * gradients of a tensor used twice with it; without it that is an error. */
    weft_tensor *(*add)(const weft_tensor *a, const weft_tensor *b);
};

/* The id of the layout called name, loading the plugin that provides it on first use;
 * negative with an error when there is none ("strided" is WEFT_LAYOUT_STRIDED). */
int weft_layout_id(const char *name);
/* The registered vtable of a layout id, or NULL (no error set). */
const struct weft_layout *weft_layout_find(int layout);
/* "strided", "sparse_coo", ...: the registered name, or "layout<N>" for an id nobody
 * registered. */
const char *weft_layout_name(int layout);

/* A new tensor of a registered non-strided layout owning layout_data (freed through the
 * layout's free() when the last reference goes, or right away when this call fails).
 * shape describes the logical tensor. Returned like any new tensor (scopes apply). */
weft_tensor *weft_tensor_new_layout(int layout, int ndim, const int64_t *shape,
                                    enum weft_dtype dtype, weft_device dev, void *layout_data);
/* layout_data of a non-strided tensor (borrowed), NULL otherwise. */
void *weft_tensor_layout_data(const weft_tensor *t);
/* Number of specified elements, as torch's _nnz(): the layout's nnz(); -1 with an error
 * for strided tensors ("_nnz is not defined for strided tensors"). */
int64_t weft_tensor_nnz(const weft_tensor *t);
/* True for every layout but strided. */
bool weft_tensor_is_sparse(const weft_tensor *t);

/* The layout's repr of a non-strided tensor, or NULL with an error. */
char *weft_layout_repr(const weft_tensor *t);

#ifdef __cplusplus
}
#endif
#endif
