/* plugins/sparse/cuda/sparse_cuda.h: what weft-sparse-cuda.so's files share (not
 * installed, not ABI).
 *
 * This plugin is a separate shared object from weft-cuda.so: it reaches the CUDA
 * backend only through weft's public API and api:cuda (weft/cuda.h: the current stream),
 * never through weft-cuda.so's symbols, and it is the only part of weft that links
 * cuSPARSE. */
#ifndef WEFT_SPARSE_CUDA_H
#define WEFT_SPARSE_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>
/* cusparse.h declares its legacy API with types it marks deprecated, which gcc reports
 * at every include; this plugin uses the generic API only. */
#ifndef DISABLE_CUSPARSE_DEPRECATED
#define DISABLE_CUSPARSE_DEPRECATED
#endif
#include <cusparse.h>

#include <weft/error.h>
#include <weft/kernel.h>
#include <weft/tensor.h>

#include "sparse_impl.h"

#define SC_MAX_DEVICES 64

/* Checks a CUDA runtime call: 0, or WEFT_ERR_DEVICE naming the call
 * ("CUDA error: out of memory (cudaMemsetAsync(...) at spmm.c:120)"). */
#define SC_CUDA_CHECK(call) sc_cuda_check((call), #call, __FILE__, __LINE__)
int sc_cuda_check(cudaError_t err, const char *call, const char *file, int line);
/* Checks a cuSPARSE call: 0, or WEFT_ERR_DEVICE with cusparseGetErrorString and the call
 * ("cuSPARSE error: invalid value (cusparseSpMM(...) at spmm.c:140)"). */
#define CUSPARSE_CHECK(call) sc_cusparse_check((call), #call, __FILE__, __LINE__)
int sc_cusparse_check(cusparseStatus_t status, const char *call, const char *file, int line);

/* ---- context.c: devices, streams, handles, workspaces -------------------------------- */

/* Finds api:cuda and counts the devices; called from init() once the cuda plugin is
 * loaded. 0 or negative with error. */
int sc_context_init(void);
/* The device type weft gave "cuda" (plugin.c sets it in init). */
extern int sc_cuda_device_type;
/* Destroys the cuSPARSE handles (plugin fini). */
void sc_context_shutdown(void);
/* Makes device `index` the calling thread's current device; 0 or negative with error. */
int sc_set_device(int index);
/* The stream weft queues work for device `index` on (the backend's current stream). */
cudaStream_t sc_stream(int index);

/* A device's cuSPARSE handle in use: bound to the backend's current stream, with the
 * device's lock held until sc_release (a handle's stream is shared state). */
struct sc_ctx {
    int index;
    cusparseHandle_t handle;
    cudaStream_t stream;
};
/* Sets the device current, creates its handle on first use and binds it to the current
 * stream. 0 (then call sc_release) or negative with error. */
int sc_acquire(int index, struct sc_ctx *ctx);
void sc_release(struct sc_ctx *ctx);

/* nbytes of device memory for cuSPARSE's workspace, from the CUDA backend's caching
 * allocator as a uint8 tensor in the caller's scope (the caller holds one open). *data
 * is NULL when nbytes is 0. The block belongs to the stream it was allocated on (the
 * current one), so it may be released as soon as the work using it is queued there.
 * 0 or negative with error. */
int sc_workspace(weft_device dev, size_t nbytes, void **data);

/* Queues out[...] = 0 (all of contiguous t) on the device's current stream. */
int sc_zero(weft_tensor *t);

/* ---- descriptors --------------------------------------------------------------------- */

/* cuSPARSE's value type of a weft dtype (float32, float64). */
cudaDataType sc_value_type(enum weft_dtype dt);

/* How cuSPARSE reads a [rows, cols] matrix with element strides (rs, cs) in place:
 * row-major with ld = rs, or column-major with ld = cs (size-1 dims take any stride). */
struct sc_dense_view {
    int64_t rows, cols, ld;
    cusparseOrder_t order;
};
/* Fills *v and returns true when the strides allow one of the two orders (row-major
 * preferred), false otherwise (zero strides of expanded dims, general slices). */
bool sc_dense_view(int64_t rows, int64_t cols, int64_t rs, int64_t cs, struct sc_dense_view *v);

/* Checks the index tensors of a CSR or COO operand: 0 or WEFT_ERR_RUNTIME naming `what`. */
int sc_check_sparse(const weft_tensor *a, const struct sparse_data *s, const char *what);
/* A sparse descriptor of the 2-D sparse tensor a over its own indices and `values`
 * (a's values, or an output array of nnz entries). 0 or negative with error. */
int sc_sparse_descr(const weft_tensor *a, const struct sparse_data *s, void *values,
                    cusparseSpMatDescr_t *out);

/* ---- kernels ------------------------------------------------------------------------- */

int sc_spmm_kernel(const struct weft_op_call *call);  /* spmm.c: SPARSE_OP_MM */
int sc_sddmm_kernel(const struct weft_op_call *call); /* sddmm.c: SPARSE_OP_SDDMM */

#endif
