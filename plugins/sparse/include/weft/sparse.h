/* weft/sparse.h: sparse COO and CSR tensors (torch.sparse), provided by weft-sparse.so.
 *
 * The core knows sparse layouts only as ids with a vtable (weft/layout.h); everything
 * sparse lives in the plugin and is reached through the table below, which the plugin
 * registers as the vtable api:sparse (weft/registry.h). The inline wrappers get it from
 * the registry (which loads the plugin on first use: its manifest provides api:sparse),
 * so user code calls weft_sparse_mm(a, b) like any weft function and links only libweft.
 * CUDA kernels come from weft-sparse-cuda.so (cuSPARSE), loaded by weft-sparse.so when
 * the CUDA backend is usable. A tensor's layout is sparse_coo when
 * t->layout == weft_layout_id("sparse_coo").
 *
 * Representation (PyTorch's, without hybrid dense dims: values are always 1-D [nnz]):
 *   sparse_coo: indices int64 [ndim, nnz], values [nnz]; coalesced means sorted in
 *               row-major order of the index tuples with no duplicates.
 *   sparse_csr: 2-D only; crow_indices [rows + 1], col_indices [nnz] (both int32 or both
 *               int64), values [nnz]; columns are sorted within a row.
 * Index and value tensors are contiguous and on the sparse tensor's device.
 *
 * Ownership, scopes and sticky errors are those of weft/tensor.h. Functions follow the
 * PyTorch functions named in their comments, with PyTorch's error texts.
 */
#ifndef WEFT_SPARSE_H
#define WEFT_SPARSE_H

#include <stdbool.h>
#include <stdint.h>

#include "weft/error.h"
#include "weft/layout.h"
#include "weft/registry.h"
#include "weft/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define WEFT_SPARSE_API_NAME "sparse"

struct weft_module; /* weft/nn.h */

/* A SparseLinear's sizes and, when an INI file built it, its section and the batch fields
 * it is fed from (its keys indices and values; "" for one made in C). The strings live
 * as long as the module. */
struct weft_sparse_linear_info {
    int64_t in_features, out_features;
    const char *section, *indices, *values;
};

/* The plugin's function table, a vtable of kind WEFT_KIND_API named "sparse"; entries are
 * only appended. */
struct weft_sparse_api {
    struct weft_vtable base;

    /* torch.sparse_coo_tensor(indices, values, size, check_invariants): indices int64
     * [ndim, nnz] (copied when not contiguous), values 1-D [nnz]. size NULL infers each
     * size as max index + 1 (ndim from indices). check: validate ranges with PyTorch's
     * messages. The result is marked coalesced only when nnz <= 1 (as torch).
     * Differentiable w.r.t. values. */
    weft_tensor *(*coo_tensor)(const weft_tensor *indices, const weft_tensor *values,
                               int ndim, const int64_t *size, bool check);
    /* torch.sparse_csr_tensor(crow_indices, col_indices, values, size, check): size NULL
     * infers [len(crow) - 1, max col + 1]. check: PyTorch's invariants ("`crow_indices[...,
     * -1] == nnz` is not satisfied.", ...). Differentiable w.r.t. values. */
    weft_tensor *(*csr_tensor)(const weft_tensor *crow_indices, const weft_tensor *col_indices,
                               const weft_tensor *values, const int64_t *size, bool check);

    /* Components (new references sharing the sparse tensor's data). indices() and
     * values() need a coalesced COO tensor ("Cannot get indices on an uncoalesced
     * tensor, please call .coalesce() first"); _indices()/_values() do not. values()
     * works for CSR too. crow/col: CSR only. */
    weft_tensor *(*indices)(const weft_tensor *t);
    weft_tensor *(*values)(const weft_tensor *t);
    weft_tensor *(*indices_raw)(const weft_tensor *t);  /* _indices() */
    weft_tensor *(*values_raw)(const weft_tensor *t);   /* _values() */
    weft_tensor *(*crow_indices)(const weft_tensor *t);
    weft_tensor *(*col_indices)(const weft_tensor *t);
    bool (*is_coalesced)(const weft_tensor *t);
    /* Sorted, duplicates summed (torch coalesce); a coalesced input returns itself, and
     * so does every CSR tensor (where torch raises instead). */
    weft_tensor *(*coalesce)(const weft_tensor *t);

    /* Conversions: dense/CSR -> COO (coalesced), dense (2-D)/COO -> CSR (int64 indices),
     * sparse -> dense (duplicates summed). A tensor already in the target layout is
     * returned itself. to_dense is differentiable (the gradient keeps the pattern). */
    weft_tensor *(*to_sparse_coo)(const weft_tensor *t);
    weft_tensor *(*to_sparse_csr)(const weft_tensor *t);
    weft_tensor *(*to_dense)(const weft_tensor *t);
    /* transpose(t, dim0, dim1): COO any dims (not coalesced afterwards); CSR 2-D gives a
     * CSR of the transpose (its rows re-sorted). */
    weft_tensor *(*transpose)(const weft_tensor *t, int dim0, int dim1);
    /* Tensor.to(device): indices and values moved; non_blocking as weft_to_device. */
    weft_tensor *(*to_device)(const weft_tensor *t, weft_device dev, bool non_blocking);

    /* torch.sparse.mm / torch.mm(sparse, dense): sparse [M, K] (COO or CSR) times dense
     * [K, N] -> dense [M, N]; a 1-D dense [K] gives [M] (torch.mv). Dense operands may
     * have any strides. Differentiable w.r.t. the dense operand and the sparse operand's
     * values (whose gradient keeps the sparsity pattern). */
    weft_tensor *(*mm)(const weft_tensor *sparse, const weft_tensor *dense);
    /* torch.sparse.addmm / torch.addmm(input, sparse, dense, beta, alpha):
     * beta * input + alpha * (sparse @ dense); input broadcasts to [M, N]. */
    weft_tensor *(*addmm)(const weft_tensor *input, const weft_tensor *sparse,
                          const weft_tensor *dense, double beta, double alpha);
    /* torch.add(a, b, alpha=alpha) for two sparse tensors of one layout, shape, dtype
     * and device: two coalesced COO tensors merge into a coalesced one, other COO pairs
     * concatenate (uncoalesced), as torch's CPU kernel does; CSR merges rows. */
    weft_tensor *(*add)(const weft_tensor *a, const weft_tensor *b, double alpha);
    /* torch.mul(sparse, scalar): same pattern, values scaled. */
    weft_tensor *(*mul_scalar)(const weft_tensor *t, double scalar);
    /* torch.sparse.sum(t): every element -> 0-dim dense (duplicates counted). */
    weft_tensor *(*sum)(const weft_tensor *t);
    /* torch.sparse.sum(t, dim): a COO tensor of ndim - 1 dims, coalesced; a 1-D input
     * gives a 0-dim dense tensor, as torch. */
    weft_tensor *(*sum_dim)(const weft_tensor *t, int dim);

    /* SparseLinear (the module type "sparse_linear"): x @ W^T + b for a sparse CSR or COO
     * x [batch, in_features] (a dense x takes weft_linear); Linear's parameters "weight"
     * [out, in] and "bias" [out], initialised as nn.Linear's, so a checkpoint loads into
     * torch.nn.Linear. Differentiable w.r.t. weight and bias. An owned module
     * (weft_module_free). (ABI 3) */
    struct weft_module *(*linear)(int64_t in_features, int64_t out_features, bool bias);
    /* 0 and *info when m is a SparseLinear, 1 when it is another module. */
    int (*linear_info)(const struct weft_module *m, struct weft_sparse_linear_info *info);
};

/* The table from the registry (loading the plugin that provides it on first use, then
 * kept); NULL with an error when no plugin provides it or it lacks functions this header
 * declares. */
static inline const struct weft_sparse_api *weft_sparse_api_get(void)
{
    static const struct weft_sparse_api *cached;
    const struct weft_sparse_api *api = __atomic_load_n(&cached, __ATOMIC_ACQUIRE);
    if (api)
        return api;
    api = (const struct weft_sparse_api *)weft_registry_get(WEFT_KIND_API, WEFT_SPARSE_API_NAME);
    if (!api)
        return NULL;
    if (api->base.struct_size < sizeof(struct weft_sparse_api)) {
        weft_error_set(WEFT_ERR_PLUGIN, "the sparse plugin's api:%s has %u bytes, fewer than "
                       "this program's %zu (rebuild the sparse plugin)",
                       WEFT_SPARSE_API_NAME, api->base.struct_size,
                       sizeof(struct weft_sparse_api));
        return NULL;
    }
    __atomic_store_n(&cached, api, __ATOMIC_RELEASE);
    return api;
}

#define WEFT_SPARSE_CALL_(fn, fail, ...)                                                    \
    do {                                                                                     \
        const struct weft_sparse_api *api_ = weft_sparse_api_get();                          \
        return api_ ? api_->fn(__VA_ARGS__) : (fail);                                        \
    } while (0)

static inline weft_tensor *weft_sparse_coo_tensor(const weft_tensor *indices,
                                                  const weft_tensor *values, int ndim,
                                                  const int64_t *size, bool check)
{ WEFT_SPARSE_CALL_(coo_tensor, NULL, indices, values, ndim, size, check); }
static inline weft_tensor *weft_sparse_csr_tensor(const weft_tensor *crow_indices,
                                                  const weft_tensor *col_indices,
                                                  const weft_tensor *values, const int64_t *size,
                                                  bool check)
{ WEFT_SPARSE_CALL_(csr_tensor, NULL, crow_indices, col_indices, values, size, check); }
static inline weft_tensor *weft_sparse_indices(const weft_tensor *t)
{ WEFT_SPARSE_CALL_(indices, NULL, t); }
static inline weft_tensor *weft_sparse_values(const weft_tensor *t)
{ WEFT_SPARSE_CALL_(values, NULL, t); }
static inline weft_tensor *weft_sparse_indices_raw(const weft_tensor *t)
{ WEFT_SPARSE_CALL_(indices_raw, NULL, t); }
static inline weft_tensor *weft_sparse_values_raw(const weft_tensor *t)
{ WEFT_SPARSE_CALL_(values_raw, NULL, t); }
static inline weft_tensor *weft_sparse_crow_indices(const weft_tensor *t)
{ WEFT_SPARSE_CALL_(crow_indices, NULL, t); }
static inline weft_tensor *weft_sparse_col_indices(const weft_tensor *t)
{ WEFT_SPARSE_CALL_(col_indices, NULL, t); }
static inline bool weft_sparse_is_coalesced(const weft_tensor *t)
{ WEFT_SPARSE_CALL_(is_coalesced, false, t); }
static inline weft_tensor *weft_sparse_coalesce(const weft_tensor *t)
{ WEFT_SPARSE_CALL_(coalesce, NULL, t); }
static inline weft_tensor *weft_to_sparse_coo(const weft_tensor *t)
{ WEFT_SPARSE_CALL_(to_sparse_coo, NULL, t); }
static inline weft_tensor *weft_to_sparse_csr(const weft_tensor *t)
{ WEFT_SPARSE_CALL_(to_sparse_csr, NULL, t); }
static inline weft_tensor *weft_sparse_to_dense(const weft_tensor *t)
{ WEFT_SPARSE_CALL_(to_dense, NULL, t); }
static inline weft_tensor *weft_sparse_transpose(const weft_tensor *t, int dim0, int dim1)
{ WEFT_SPARSE_CALL_(transpose, NULL, t, dim0, dim1); }
static inline weft_tensor *weft_sparse_to_device(const weft_tensor *t, weft_device dev,
                                                 bool non_blocking)
{ WEFT_SPARSE_CALL_(to_device, NULL, t, dev, non_blocking); }
static inline weft_tensor *weft_sparse_mm(const weft_tensor *sparse, const weft_tensor *dense)
{ WEFT_SPARSE_CALL_(mm, NULL, sparse, dense); }
static inline weft_tensor *weft_sparse_addmm(const weft_tensor *input, const weft_tensor *sparse,
                                             const weft_tensor *dense, double beta, double alpha)
{ WEFT_SPARSE_CALL_(addmm, NULL, input, sparse, dense, beta, alpha); }
static inline weft_tensor *weft_sparse_add(const weft_tensor *a, const weft_tensor *b,
                                           double alpha)
{ WEFT_SPARSE_CALL_(add, NULL, a, b, alpha); }
static inline weft_tensor *weft_sparse_mul_scalar(const weft_tensor *t, double scalar)
{ WEFT_SPARSE_CALL_(mul_scalar, NULL, t, scalar); }
static inline weft_tensor *weft_sparse_sum(const weft_tensor *t)
{ WEFT_SPARSE_CALL_(sum, NULL, t); }
static inline weft_tensor *weft_sparse_sum_dim(const weft_tensor *t, int dim)
{ WEFT_SPARSE_CALL_(sum_dim, NULL, t, dim); }
static inline struct weft_module *weft_sparse_linear(int64_t in_features, int64_t out_features,
                                                     bool bias)
{ WEFT_SPARSE_CALL_(linear, NULL, in_features, out_features, bias); }
static inline int weft_sparse_linear_info(const struct weft_module *m,
                                          struct weft_sparse_linear_info *info)
{ WEFT_SPARSE_CALL_(linear_info, weft_error_code(), m, info); }

#undef WEFT_SPARSE_CALL_

#ifdef __cplusplus
}
#endif
#endif
