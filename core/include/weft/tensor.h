/* weft/tensor.h: strided tensors over refcounted storage, their views and copies.
 *
 * Ownership. Every function that returns a tensor returns a new reference. While an
 * autorelease scope is open on the calling thread (weft_scope_push), that reference is
 * also recorded in the innermost scope, and weft_scope_pop() releases it: inside a scope,
 * compose ops freely and call weft_tensor_retain() on what must outlive it. With no scope
 * open, the caller owns the reference and ends it with weft_tensor_release().
 *
 * Errors. Functions return NULL (or a negative status) and set the thread's error
 * (weft/error.h). Every function accepts NULL tensor inputs and then returns NULL without
 * setting a new error, so a chain of calls needs one check at the end.
 *
 * Dims may be negative (counted from the end) wherever a dim is taken, as in PyTorch.
 */
#ifndef WEFT_TENSOR_H
#define WEFT_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "weft/device.h"
#include "weft/dtype.h"
#include "weft/storage.h"

#ifdef __cplusplus
extern "C" {
#endif

#define WEFT_MAX_DIMS 8

/* Strided is the core's own layout; plugins register the others (weft/layout.h), which
 * get the ids 1 .. WEFT_MAX_LAYOUTS - 1 in registration order. */
#define WEFT_LAYOUT_STRIDED 0
#define WEFT_MAX_LAYOUTS 8

struct weft_autograd_meta; /* owned by the autograd engine; opaque */

/* flags: the tensor is a view of another tensor's storage (made by a view op). */
#define WEFT_TENSOR_VIEW 0x1u

/* Plugins read this struct directly; its layout is part of the ABI. */
typedef struct weft_tensor {
    uint32_t refcount;        /* atomic; use retain/release */
    int32_t ndim;             /* 0..WEFT_MAX_DIMS */
    enum weft_dtype dtype;
    int32_t layout;           /* WEFT_LAYOUT_STRIDED or a registered layout's id */
    uint32_t flags;           /* WEFT_TENSOR_* bits */
    weft_device device;
    int64_t offset;           /* in elements, from storage->data */
    int64_t shape[WEFT_MAX_DIMS];
    int64_t stride[WEFT_MAX_DIMS]; /* in elements; may be 0 (expanded) */
    struct weft_storage *storage;  /* NULL only for non-strided layouts */
    struct weft_autograd_meta *autograd; /* NULL when autograd never touched it */
    void *layout_data;        /* layout-specific state for non-strided layouts */
} weft_tensor;

/* ---- references and scopes ---------------------------------------------------- */

weft_tensor *weft_tensor_retain(weft_tensor *t); /* returns t; NULL is ignored */
void weft_tensor_release(weft_tensor *t);        /* NULL is ignored */

/* Opens an autorelease scope on this thread (they nest). It cannot fail: should memory
 * for a deep scope's mark be refused, that scope merges into the enclosing one, whose pop
 * then releases what it recorded. */
void weft_scope_push(void);
/* Releases every reference recorded since the matching push and closes the scope. */
void weft_scope_pop(void);
/* Number of open scopes on this thread. */
int weft_scope_depth(void);
/* Records `t` in the innermost scope (what weft functions do with their results);
 * returns t. With no scope open it does nothing. Should memory to record it be refused,
 * it releases t and returns NULL with WEFT_ERR_OUT_OF_MEMORY, as a failed op would: use
 * what it returns, not t. */
weft_tensor *weft_autorelease(weft_tensor *t);
/* What an accessor hands out (a dict's entry, a sparse tensor's values): a new reference
 * to t recorded in the innermost scope, so it outlives its owner inside the scope. Should
 * memory to record it be refused, t itself, borrowed (valid while its owner lives), and
 * no error: an accessor does not fail. */
weft_tensor *weft_autorelease_shared(weft_tensor *t);
/* Gives up a reference a weft function returned, on an error path: released now with no
 * scope open; inside one the scope releases it. Returns NULL, for `return
 * weft_tensor_discard(out);`. */
weft_tensor *weft_tensor_discard(weft_tensor *t);

/* ---- properties ---------------------------------------------------------------- */

int64_t weft_tensor_numel(const weft_tensor *t);
/* Tensor.dim(); -1 for NULL. */
int weft_tensor_ndim(const weft_tensor *t);
/* Tensor.shape and Tensor.stride() as arrays of ndim values, borrowed from t (valid while
 * t is); NULL for NULL. Strides are in elements, as PyTorch's. */
const int64_t *weft_tensor_shape(const weft_tensor *t);
const int64_t *weft_tensor_strides(const weft_tensor *t);
/* Tensor.storage_offset(), in elements; -1 for NULL. */
int64_t weft_tensor_storage_offset(const weft_tensor *t);
/* Tensor.dtype; WEFT_DTYPE_COUNT (not a valid dtype) for NULL. */
enum weft_dtype weft_tensor_dtype(const weft_tensor *t);
/* Tensor.device; {-1, -1} for NULL. */
weft_device weft_tensor_device(const weft_tensor *t);
/* Size/stride of dim (negative allowed); -1 with an IndexError when out of range. */
int64_t weft_tensor_size(const weft_tensor *t, int dim);
int64_t weft_tensor_stride(const weft_tensor *t, int dim);
/* PyTorch's rule: numel 0 -> true; else walking dims last to first, size-1 dims are
 * skipped and every other stride must equal the product of the sizes after it. */
bool weft_tensor_is_contiguous(const weft_tensor *t);
/* Address of element 0: storage data + itemsize * offset; NULL when numel is 0. */
void *weft_tensor_data(const weft_tensor *t);
size_t weft_tensor_itemsize(const weft_tensor *t);
uint64_t weft_tensor_version(const weft_tensor *t);
/* Marks an in-place modification (shared by all views of the storage). */
void weft_tensor_bump_version(weft_tensor *t);
/* Normalises a possibly negative dim against ndim; IndexError with PyTorch's text
 * "Dimension out of range (expected to be in range of [-2, 1], but got 2)". */
int weft_normalize_dim(int dim, int ndim);
/* "[2, 3, 4]" into buf; returns buf. */
char *weft_shape_str(int ndim, const int64_t *shape, char *buf, size_t size);
/* numel of a shape; -1 with an error on negative sizes or overflow. */
int64_t weft_shape_numel(int ndim, const int64_t *shape);
/* 0 when 0 <= ndim <= WEFT_MAX_DIMS, else an error saying so. */
int weft_check_ndim(int ndim);
/* 0 when every size is >= 0 and ndim <= WEFT_MAX_DIMS, else an error in PyTorch's words. */
int weft_check_shape(int ndim, const int64_t *shape);
/* 0 for a strided tensor with storage, else NotImplemented naming op and the layout. */
int weft_require_strided(const weft_tensor *t, const char *op);
/* PyTorch's is_non_overlapping_and_dense: the elements tile numel slots exactly, in some
 * order of the dims. */
bool weft_is_non_overlapping_and_dense(const weft_tensor *t);
/* Contiguous strides (in elements) for shape into stride; returns numel, or -1 when it
 * overflows. */
int64_t weft_contiguous_strides(int ndim, const int64_t *shape, int64_t *stride);
/* PyTorch's perm_ order of dims, fastest first: an insertion sort of ndim - 1 .. 0 with a
 * comparison that may abstain (cmp > 0: dim0 goes after dim1, < 0 before, 0 undecided).
 * The rule behind empty_like's strides and an elementwise result's. */
void weft_sort_dims(int ndim, int *perm, int (*cmp)(const void *ctx, int dim0, int dim1),
                    const void *ctx);
/* 0 when every non-NULL tensor is on one device, else PyTorch's "Expected all tensors to
 * be on the same device, but found at least two devices, cuda:0 and cpu!". */
int weft_check_same_device(int n, const weft_tensor *const *ts);

/* ---- creation -------------------------------------------------------------------- */

/* Uninitialised contiguous tensor. shape may be NULL when ndim is 0. */
weft_tensor *weft_empty(int ndim, const int64_t *shape, enum weft_dtype dtype, weft_device dev);
/* Uninitialised with those strides, which must be dense and non-overlapping (NULL:
 * contiguous, as weft_empty). */
weft_tensor *weft_empty_dense_strided(int ndim, const int64_t *shape, const int64_t *strides,
                                      enum weft_dtype dtype, weft_device dev);
/* The *_like functions keep t's layout (preserve_format, PyTorch's default): t's strides
 * when t is dense and non-overlapping, else dense strides in the order of t's. */
weft_tensor *weft_empty_like(const weft_tensor *t);
weft_tensor *weft_zeros(int ndim, const int64_t *shape, enum weft_dtype dtype, weft_device dev);
weft_tensor *weft_ones(int ndim, const int64_t *shape, enum weft_dtype dtype, weft_device dev);
weft_tensor *weft_full(int ndim, const int64_t *shape, double value, enum weft_dtype dtype,
                       weft_device dev);
weft_tensor *weft_zeros_like(const weft_tensor *t);
weft_tensor *weft_ones_like(const weft_tensor *t);
weft_tensor *weft_full_like(const weft_tensor *t, double value);
/* Tensor.fill_: every element of t (any strides) set to value, checked as torch.full
 * checks it; bumps the version; returns t. Not recorded by autograd: a tensor that needs
 * it is refused (NotImplemented). */
weft_tensor *weft_fill_(weft_tensor *t, double value);
/* 0-dim tensor holding value. */
weft_tensor *weft_scalar_tensor(double value, enum weft_dtype dtype, weft_device dev);
/* Copies numel * itemsize bytes of contiguous host data into a new tensor on dev. */
weft_tensor *weft_from_host(const void *data, int ndim, const int64_t *shape,
                            enum weft_dtype dtype, weft_device dev);
/* A tensor over storage (retained) with that geometry (stride NULL: contiguous), as
 * storage-wrapping importers make them (DLPack). */
weft_tensor *weft_tensor_from_storage(struct weft_storage *storage, int ndim,
                                      const int64_t *shape, const int64_t *stride,
                                      int64_t offset, enum weft_dtype dtype);
/* Wraps host (or device) memory without copying; strides NULL means contiguous.
 * The storage is not resizable; deleter(ctx, data) runs when the last reference goes. */
weft_tensor *weft_from_blob(void *data, int ndim, const int64_t *shape, const int64_t *strides,
                            enum weft_dtype dtype, weft_device dev, weft_deleter deleter,
                            void *ctx);

/* ---- views: new tensors over the same storage; no data moves -----------------------
 * The core's own: the view ops (view, reshape, transpose, narrow, as_strided, ...) are
 * the op layer's (weft/ops.h). */

/* Broadcast to shape (stride 0 on expanded dims); -1 keeps a size. */
weft_tensor *weft_expand(weft_tensor *t, int ndim, const int64_t *shape);
/* The broadcast shape of two shapes, or -1 with PyTorch's "The size of tensor a (3) must
 * match the size of tensor b (4) at non-singleton dimension 1". */
int weft_broadcast_shapes(int ndim_a, const int64_t *a, int ndim_b, const int64_t *b,
                          int *ndim_out, int64_t *out);
/* Same storage and version counter, no autograd history. */
weft_tensor *weft_detach(weft_tensor *t);
/* Tensor.detach_(): t itself leaves the graph (no grad_fn, requires_grad false), its
 * storage and .grad kept; "Can't detach views in-place" for a view autograd tracks.
 * Returns 0 or negative. */
int weft_detach_(weft_tensor *t);
/* A view header over t's storage with that geometry, unchecked and unrecorded (what view
 * ops build their results with, after checking it). */
weft_tensor *weft_tensor_alias(weft_tensor *t, int ndim, const int64_t *shape,
                               const int64_t *stride, int64_t offset);

/* ---- copies ------------------------------------------------------------------------ */

/* t itself (one more reference) when contiguous, else a contiguous copy. */
weft_tensor *weft_contiguous(weft_tensor *t);
weft_tensor *weft_clone(weft_tensor *t);
/* Copies src into dst: src broadcast to dst's shape, converted to dst's dtype, any pair
 * of devices. Bumps dst's version. Returns 0 or negative.
 * Floating to integer conversions truncate toward zero and give, for values the
 * destination cannot hold, what PyTorch gives on the same device: uint8 goes through
 * int64, int8/int16/int32 through int32, then wrap (-3.0 -> uint8 253, 300.0 -> int8 44).
 * On the cpu a value outside int64 (int32), NaN and +-inf included, becomes its minimum
 * (x86's rule: +inf -> uint8 0, int32 -2147483648); on cuda it saturates, NaN -> 0
 * (+inf -> uint8 255, int32 2147483647). Integers convert among themselves by wrapping. */
int weft_copy_(weft_tensor *dst, const weft_tensor *src);
int weft_copy_nonblocking_(weft_tensor *dst, const weft_tensor *src, bool non_blocking);
/* t itself (one more reference) when already of that dtype/device, else a copy. */
weft_tensor *weft_to_dtype(weft_tensor *t, enum weft_dtype dtype);
weft_tensor *weft_to_device(weft_tensor *t, weft_device dev);
weft_tensor *weft_to(weft_tensor *t, weft_device dev, enum weft_dtype dtype, bool non_blocking);

/* Copies the values of t (any strides, any device) to host memory as a contiguous array
 * of t's dtype; nbytes must be at least numel * itemsize. */
int weft_tensor_read(const weft_tensor *t, void *dst, size_t nbytes);

#ifdef __cplusplus
}
#endif
#endif
