/* plugins/sparse/sparse_impl.h: what weft-sparse.so and weft-sparse-cuda.so share: the
 * representation of COO and CSR tensors (a weft_tensor's layout_data) and the contract
 * of the per-device kernels, which are ordinary dispatch kernels registered for
 * (op, device type, layout) under the op names below. */
#ifndef WEFT_SPARSE_IMPL_H
#define WEFT_SPARSE_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include <weft/kernel.h>
#include <weft/layout.h>
#include <weft/sparse.h>
#include <weft/tensor.h>

/* layout_data of a sparse tensor. Every component is contiguous, on the tensor's device,
 * and owned (one reference) by the struct. */
struct sparse_data {
    weft_tensor *indices;  /* COO: int64 [ndim, nnz]; NULL for CSR */
    weft_tensor *crow;     /* CSR: [rows + 1], int32 or int64; NULL for COO */
    weft_tensor *col;      /* CSR: [nnz], crow's dtype; NULL for COO */
    weft_tensor *values;   /* [nnz], the tensor's dtype */
    bool coalesced;        /* COO: sorted row-major, no duplicates; CSR: always true */
};

/* The layout state of t (borrowed), or NULL with an error naming `what` when t is not
 * of `layout` (pass -1 to accept either sparse layout). */
struct sparse_data *sparse_data_of(const weft_tensor *t, int layout, const char *what);
static inline int64_t sparse_nnz(const struct sparse_data *s)
{
    return s->values->shape[0];
}

/* New sparse tensors that take over the references to their components (released on
 * failure too). No validation beyond shapes and dtypes: constructors that face users
 * validate first. */
weft_tensor *sparse_make_coo(weft_tensor *indices, weft_tensor *values, int ndim,
                             const int64_t *size, bool coalesced);
weft_tensor *sparse_make_csr(weft_tensor *crow, weft_tensor *col, weft_tensor *values,
                             const int64_t size[2]);

/* The ids weft gave sparse_coo and sparse_csr when they were registered (layout.c in
 * weft-sparse.so, which registers them; context.c in weft-sparse-cuda.so, which looks
 * them up): layouts have no fixed numbers. */
extern int sparse_coo_layout, sparse_csr_layout;

/* Registers the layout vtables and sets the ids (layout.c). */
int sparse_layouts_register(void);

/* ---- the API table's entries, by file -------------------------------------------- */
/* mm.c: sparse_mm / sparse_addmm front ends (shape checks, dispatch, autograd). */
weft_tensor *sparse_api_mm(const weft_tensor *sparse, const weft_tensor *dense);
weft_tensor *sparse_api_addmm(const weft_tensor *input, const weft_tensor *sparse,
                              const weft_tensor *dense, double beta, double alpha);
/* linear.c: SparseLinear (the module type "sparse_linear", registered in init). */
struct weft_module *sparse_linear(int64_t in_features, int64_t out_features, bool bias);
int sparse_linear_info(const struct weft_module *m, struct weft_sparse_linear_info *info);
int sparse_linear_register(void);
/* spmm_cpu.c: registers the CPU kernels for SPARSE_OP_MM and SPARSE_OP_SDDMM. */
int sparse_cpu_kernels_register(void);

/* ---- kernels (registered by op name; the CPU ones in weft-sparse.so, CUDA ones in
 * weft-sparse-cuda.so). Dtypes: float32 and float64. ---------------------------------- */

/* "sparse_mm": C = beta * C + alpha * (op(A) @ B).
 *   in[0] A sparse (CSR, or coalesced COO) [M, K]; ints[0] = 1 means op(A) = A^T, so C is
 *         [K, N] and B is [M, N].
 *   in[1] B dense, any strides (a [K] vector is passed as [K, 1]).
 *   out[0] C dense contiguous; scalar[0] = alpha, scalar[1] = beta; beta == 0 overwrites
 *         C without reading it (NaN in C does not propagate, as BLAS).
 * Dispatch key: (op, A's device type, A's layout, A's dtype); B and C share A's dtype. */
#define SPARSE_OP_MM "sparse_mm"
/* "sparse_sddmm": sampled dense-dense product on A's pattern (the gradient of the values):
 *   in[0] A sparse [M, K] (pattern only), in[1] G dense [M, N], in[2] B dense [K, N],
 *   out[0] contiguous [nnz]: out[e] = sum_n G[row(e), n] * B[col(e), n]. */
#define SPARSE_OP_SDDMM "sparse_sddmm"

/* ---- what construct.c, convert.c, arith.c, print.c and autograd.c share ------------- */
#include <stddef.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include <weft/autograd.h>
#include <weft/half.h>

/* The API table's other entries, by file (plugin.c fills the table). */
/* construct.c */
weft_tensor *sparse_api_coo_tensor(const weft_tensor *indices, const weft_tensor *values,
                                   int ndim, const int64_t *size, bool check);
weft_tensor *sparse_api_csr_tensor(const weft_tensor *crow, const weft_tensor *col,
                                   const weft_tensor *values, const int64_t *size, bool check);
weft_tensor *sparse_api_indices(const weft_tensor *t);
weft_tensor *sparse_api_values(const weft_tensor *t);
weft_tensor *sparse_api_indices_raw(const weft_tensor *t);
weft_tensor *sparse_api_values_raw(const weft_tensor *t);
weft_tensor *sparse_api_crow_indices(const weft_tensor *t);
weft_tensor *sparse_api_col_indices(const weft_tensor *t);
bool sparse_api_is_coalesced(const weft_tensor *t);
weft_tensor *sparse_api_coalesce(const weft_tensor *t);
/* convert.c */
weft_tensor *sparse_api_to_sparse_coo(const weft_tensor *t);
weft_tensor *sparse_api_to_sparse_csr(const weft_tensor *t);
weft_tensor *sparse_api_to_dense(const weft_tensor *t);
weft_tensor *sparse_api_transpose(const weft_tensor *t, int dim0, int dim1);
weft_tensor *sparse_api_to_device(const weft_tensor *t, weft_device dev, bool non_blocking);
/* arith.c */
weft_tensor *sparse_api_add(const weft_tensor *a, const weft_tensor *b, double alpha);
weft_tensor *sparse_api_mul_scalar(const weft_tensor *t, double scalar);
weft_tensor *sparse_api_sum(const weft_tensor *t);
weft_tensor *sparse_api_sum_dim(const weft_tensor *t, int dim);
/* print.c: the layouts' repr (PyTorch's _str_intern for sparse tensors). */
char *sparse_repr(const weft_tensor *t);

/* The same operations without recording autograd, for the plugin's own use (backward
 * formulas, mm.c). Same contracts as the API entries; results are new references
 * recorded in the current scope; inputs may be on any device (index work happens on the
 * host, results go back to the input's device). */
weft_tensor *sparse_coalesce_nograd(const weft_tensor *t);
weft_tensor *sparse_to_coo_nograd(const weft_tensor *t);
weft_tensor *sparse_to_csr_nograd(const weft_tensor *t);
weft_tensor *sparse_to_dense_nograd(const weft_tensor *t);
weft_tensor *sparse_transpose_nograd(const weft_tensor *t, int dim0, int dim1);
weft_tensor *sparse_mul_scalar_nograd(const weft_tensor *t, double scalar);

/* ---- host index work ----------------------------------------------------------------
 * Index components are read on the host as int64; these hold what the kernels walk. */

/* t (any device, int32 or int64, any strides) as contiguous int64 host data: t itself when
 * it already is, else a converted copy recorded in the current scope. *data is NULL when
 * t is empty. Returns the host tensor, or NULL with an error. */
const weft_tensor *sparse_host_i64(const weft_tensor *t, const int64_t **data);
/* A new contiguous cpu tensor (recorded in the current scope); *data is its memory (NULL
 * when empty). */
weft_tensor *sparse_new_host(int ndim, const int64_t *shape, enum weft_dtype dtype, void **data);
/* The COO indices of a sparse tensor as host int64 [ndim, nnz] (CSR rows expanded). */
const weft_tensor *sparse_host_coo_indices(const weft_tensor *t, const int64_t **data);
/* Range checks with PyTorch's messages: COO indices [ndim, nnz] against size (size NULL:
 * only negatives). CSR: crow[0] == 0, crow[rows] == nnz, rows never shrink, and (col not
 * NULL) columns in [0, cols): what walking it needs; `full` adds PyTorch's remaining
 * invariants (at most cols per row, columns sorted and distinct within a row). Return 0
 * or negative. */
int sparse_check_coo_indices(const int64_t *idx, int ndim, int64_t nnz, const int64_t *size);
int sparse_check_csr_indices(const int64_t *crow, const int64_t *col, int64_t rows,
                             int64_t cols, int64_t nnz, bool full);
/* Row-major linear keys of index tuples when the shape's numel fits in int64 (returns true
 * and fills keys[nnz]); false, filling nothing, when it does not. */
bool sparse_linear_keys(const int64_t *idx, int ndim, int64_t nnz, const int64_t *size,
                        int64_t *keys);
/* count items of `size` bytes of host scratch memory from weft's cpu allocator (whose
 * cache hands back warm pages where malloc would fault fresh ones in), held by a tensor
 * recorded in the current scope: call it with a scope open. Not NULL for count 0; NULL
 * with an error when memory runs out. */
void *sparse_scratch(int64_t count, size_t size);
/* Sorts keys[n] ascending, moving perm[n] along (stable LSD radix sort, parallel above
 * SPARSE_PARALLEL_GRAIN). Returns 1 when the keys were in order already (nothing moved),
 * 0 after sorting, negative on error. */
int sparse_sort_keys(int64_t n, uint64_t *keys, int64_t *perm);
/* Stable ascending order of the index tuples (row-major): perm[k] = position of the k-th
 * smallest. Linear keys when they fit, else one stable pass per dim. Returns 0 or
 * negative (out of memory). */
int sparse_sort_tuples(const int64_t *idx, int ndim, int64_t nnz, const int64_t *size,
                       int64_t *perm);
/* The values of g (dense, COO or CSR of shape `size`, any device) at the index tuples
 * idx [ndim, n] (host): dense entries read directly, sparse ones summed over duplicates
 * and 0 where g has none. Returns a contiguous cpu tensor [n] of g's dtype. */
weft_tensor *sparse_values_at(const weft_tensor *g, const int64_t *idx, int ndim, int64_t n);

/* ---- values, written once for every dtype with weft/dtype_kernels.h's lists and
 * accessors (bool saturates: PyTorch's add on bool is a logical or). */
#include <weft/dtype_kernels.h>

/* Typed value kernels (convert.c), on host memory, OpenMP above SPARSE_PARALLEL_GRAIN. */
#define SPARSE_PARALLEL_GRAIN 32768
/* Threads for a host loop over n items: all of OpenMP's above the grain, else one. */
static inline int sparse_threads(int64_t n)
{
#ifdef _OPENMP
    if (n >= SPARSE_PARALLEL_GRAIN && !omp_in_parallel())
        return omp_get_max_threads();
#endif
    (void)n;
    return 1;
}
/* dst[k] = src[idx[k]] for k < n (bytes of itemsize). */
void sparse_gather(size_t itemsize, const void *src, const int64_t *idx, int64_t n, void *dst);
/* dst[s] = sum of src[perm[i]] for i in [starts[s], starts[s + 1]), s < nseg (perm NULL:
 * identity). */
void sparse_segment_sum(enum weft_dtype dt, const void *src, const int64_t *perm,
                        const int64_t *starts, int64_t nseg, void *dst);

/* ---- autograd (autograd.c): each records its node when `record` was true on entry (the
 * caller tested weft_autograd_needed before turning grad mode off). Return 0 or negative.
 * values -> a sparse tensor made of them (coo_tensor, csr_tensor). */
int sparse_grad_constructor(weft_tensor *out, const weft_tensor *values);
/* sparse -> dense (to_dense): the gradient keeps the input's pattern. */
int sparse_grad_to_dense(weft_tensor *out, const weft_tensor *in);
/* The gradient passes through (coalesce, add's first operand, layout conversions
 * between sparse layouts, moves to another device), scaled by `scale` for mul_scalar and
 * add's second operand; `name` is the node's. Dense inputs (to_sparse) get a dense
 * gradient; a move gets it moved back. */
int sparse_grad_linear(const char *name, weft_tensor *out, int nin, const weft_tensor *const *in,
                       const double *scales);
/* transpose: the gradient transposed back. */
int sparse_grad_transpose(weft_tensor *out, const weft_tensor *in, int dim0, int dim1);
/* sum (dim < 0: every element, a 0-dim gradient) and sum_dim: the gradient broadcast back
 * onto the input's pattern. */
int sparse_grad_sum(weft_tensor *out, const weft_tensor *in, int dim);

/* ---- front ends: a scope for temporaries and grad mode off around the work --------- */
struct sparse_frame {
    bool grad; /* grad mode on entry */
};
static inline struct sparse_frame sparse_begin(void)
{
    weft_scope_push();
    struct sparse_frame f = {weft_no_grad_begin()};
    return f;
}
/* Closes the frame; out (may be NULL) becomes one new reference recorded in the caller's
 * scope, as every weft result. */
static inline weft_tensor *sparse_end(struct sparse_frame f, weft_tensor *out)
{
    weft_grad_mode_restore(f.grad);
    weft_tensor_retain(out);
    weft_scope_pop();
    return weft_autorelease(out);
}

#endif
