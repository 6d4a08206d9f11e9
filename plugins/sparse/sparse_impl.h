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

/* Registers the layout vtables (layout.c). */
int sparse_layouts_register(void);

/* ---- the API table's entries, by file -------------------------------------------- */
/* mm.c: sparse_mm / sparse_addmm front ends (shape checks, dispatch, autograd). */
weft_tensor *sparse_api_mm(const weft_tensor *sparse, const weft_tensor *dense);
weft_tensor *sparse_api_addmm(const weft_tensor *input, const weft_tensor *sparse,
                              const weft_tensor *dense, double beta, double alpha);
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

#endif
