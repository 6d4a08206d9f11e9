/* plugins/sparse/cuda/context.c: the plugin's view of the CUDA devices: error checks,
 * the backend's current stream, one cuSPARSE handle per device, workspaces, and the
 * descriptors the kernels share. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <weft/cuda.h>
#include <weft/cuda.h>
#include <weft/plugin.h>

#include "sparse_cuda.h"

int sparse_coo_layout = -1, sparse_csr_layout = -1;
int sc_cuda_device_type = -1;

/* A device's handle is made on first use and then reused; its lock is held while a
 * kernel uses it, because the stream bound to a handle is shared state. */
struct device_slot {
    pthread_mutex_t lock;
    cusparseHandle_t handle;
};

static struct device_slot slots[SC_MAX_DEVICES];
static int ndevices;
static const struct weft_cuda_api *cuda_api;

static const char *base_name(const char *file)
{
    const char *slash = strrchr(file, '/');
    return slash ? slash + 1 : file;
}

int sc_cuda_check(cudaError_t err, const char *call, const char *file, int line)
{
    if (err == cudaSuccess)
        return 0;
    /* Clears the error unless it is sticky (then the context is lost anyway). */
    (void)cudaGetLastError();
    return weft_error_set(WEFT_ERR_DEVICE, "CUDA error: %s (%s at %s:%d)", cudaGetErrorString(err),
                          call, base_name(file), line);
}

int sc_cusparse_check(cusparseStatus_t status, const char *call, const char *file, int line)
{
    if (status == CUSPARSE_STATUS_SUCCESS)
        return 0;
    return weft_error_set(WEFT_ERR_DEVICE, "cuSPARSE error: %s (%s at %s:%d)",
                          cusparseGetErrorString(status), call, base_name(file), line);
}

/* ---- devices and streams ------------------------------------------------------------- */

int sc_context_init(void)
{
    cuda_api = weft_cuda_api_get();
    if (!cuda_api)
        return weft_error_code();
    int n = 0;
    if (SC_CUDA_CHECK(cudaGetDeviceCount(&n)) != 0)
        return WEFT_ERR_DEVICE;
    ndevices = n < SC_MAX_DEVICES ? n : SC_MAX_DEVICES;
    for (int i = 0; i < SC_MAX_DEVICES; i++) {
        if (pthread_mutex_init(&slots[i].lock, NULL) != 0)
            return weft_error_set(WEFT_ERR_RUNTIME, "weft-sparse-cuda: pthread_mutex_init failed");
        slots[i].handle = NULL;
    }
    return 0;
}

/* Errors are ignored: at exit the runtime may be unloading, and nobody is left to tell. */
void sc_context_shutdown(void)
{
    for (int i = 0; i < ndevices; i++) {
        pthread_mutex_lock(&slots[i].lock);
        if (slots[i].handle && cudaSetDevice(i) == cudaSuccess)
            cusparseDestroy(slots[i].handle);
        slots[i].handle = NULL;
        pthread_mutex_unlock(&slots[i].lock);
    }
    (void)cudaGetLastError();
}

static int check_index(int index)
{
    if (index >= 0 && index < ndevices)
        return 0;
    return weft_error_set(WEFT_ERR_DEVICE, "invalid device cuda:%d: only %d CUDA device(s) present",
                          index, ndevices);
}

int sc_set_device(int index)
{
    if (check_index(index) != 0)
        return WEFT_ERR_DEVICE;
    int current = -1;
    if (cudaGetDevice(&current) == cudaSuccess && current == index)
        return 0;
    return SC_CUDA_CHECK(cudaSetDevice(index));
}

cudaStream_t sc_stream(int index)
{
    return cuda_api ? (cudaStream_t)cuda_api->current_stream(index) : NULL;
}

/* ---- handles --------------------------------------------------------------------------- */

int sc_acquire(int index, struct sc_ctx *ctx)
{
    if (sc_set_device(index) != 0)
        return WEFT_ERR_DEVICE;
    struct device_slot *slot = &slots[index];
    pthread_mutex_lock(&slot->lock);
    if (!slot->handle && CUSPARSE_CHECK(cusparseCreate(&slot->handle)) != 0) {
        slot->handle = NULL;
        pthread_mutex_unlock(&slot->lock);
        return WEFT_ERR_DEVICE;
    }
    cudaStream_t stream = sc_stream(index);
    if (CUSPARSE_CHECK(cusparseSetStream(slot->handle, stream)) != 0) {
        pthread_mutex_unlock(&slot->lock);
        return WEFT_ERR_DEVICE;
    }
    *ctx = (struct sc_ctx){.index = index, .handle = slot->handle, .stream = stream};
    return 0;
}

void sc_release(struct sc_ctx *ctx)
{
    pthread_mutex_unlock(&slots[ctx->index].lock);
    ctx->handle = NULL;
}

/* ---- memory -------------------------------------------------------------------------- */

int sc_workspace(weft_device dev, size_t nbytes, void **data)
{
    *data = NULL;
    if (nbytes == 0)
        return 0;
    int64_t shape[1] = {(int64_t)nbytes};
    weft_tensor *ws = weft_empty(1, shape, WEFT_U8, dev);
    if (!ws)
        return weft_error_code();
    *data = weft_tensor_data(ws);
    return 0;
}

int sc_zero(weft_tensor *t)
{
    size_t nbytes = (size_t)weft_tensor_numel(t) * weft_tensor_itemsize(t);
    if (nbytes == 0)
        return 0;
    if (sc_set_device(t->device.index) != 0)
        return WEFT_ERR_DEVICE;
    return SC_CUDA_CHECK(
        cudaMemsetAsync(weft_tensor_data(t), 0, nbytes, sc_stream(t->device.index)));
}

/* ---- descriptors ----------------------------------------------------------------------- */

cudaDataType sc_value_type(enum weft_dtype dt)
{
    return dt == WEFT_F64 ? CUDA_R_64F : CUDA_R_32F;
}

bool sc_dense_view(int64_t rows, int64_t cols, int64_t rs, int64_t cs, struct sc_dense_view *v)
{
    int64_t rows1 = rows > 1 ? rows : 1, cols1 = cols > 1 ? cols : 1;
    if ((cols <= 1 || cs == 1) && (rows <= 1 || rs >= cols1)) {
        *v = (struct sc_dense_view){rows, cols, rows <= 1 ? cols1 : rs, CUSPARSE_ORDER_ROW};
        return true;
    }
    if ((rows <= 1 || rs == 1) && (cols <= 1 || cs >= rows1)) {
        *v = (struct sc_dense_view){rows, cols, cols <= 1 ? rows1 : cs, CUSPARSE_ORDER_COL};
        return true;
    }
    return false;
}

static bool is_index_vector(const weft_tensor *t, int64_t len, enum weft_dtype dt)
{
    return t && t->dtype == dt && t->ndim == 1 && t->shape[0] == len &&
           weft_tensor_is_contiguous(t);
}

int sc_check_sparse(const weft_tensor *a, const struct sparse_data *s, const char *what)
{
    if (!s || a->ndim != 2 || !s->values || s->values->ndim != 1)
        return weft_error_set(WEFT_ERR_RUNTIME, "%s: expected a 2-D sparse operand", what);
    int64_t nnz = sparse_nnz(s);
    if (a->layout == sparse_csr_layout) {
        enum weft_dtype it = s->crow ? s->crow->dtype : WEFT_I64;
        if ((it != WEFT_I32 && it != WEFT_I64) || !is_index_vector(s->crow, a->shape[0] + 1, it) ||
            !is_index_vector(s->col, nnz, it))
            return weft_error_set(WEFT_ERR_RUNTIME, "%s: CSR indices must be contiguous int32 or "
                                                    "int64 [rows + 1] and [nnz] of one dtype",
                                  what);
        return 0;
    }
    const weft_tensor *ix = s->indices;
    if (!ix || ix->dtype != WEFT_I64 || ix->ndim != 2 || ix->shape[0] != 2 ||
        ix->shape[1] != nnz || !weft_tensor_is_contiguous(ix))
        return weft_error_set(WEFT_ERR_RUNTIME, "%s: COO indices must be contiguous int64 [2, nnz]",
                              what);
    return 0;
}

int sc_sparse_descr(const weft_tensor *a, const struct sparse_data *s, void *values,
                    cusparseSpMatDescr_t *out)
{
    int64_t nnz = sparse_nnz(s);
    cudaDataType vt = sc_value_type(a->dtype);
    if (a->layout == sparse_csr_layout) {
        cusparseIndexType_t it = s->crow->dtype == WEFT_I32 ? CUSPARSE_INDEX_32I : CUSPARSE_INDEX_64I;
        return CUSPARSE_CHECK(cusparseCreateCsr(out, a->shape[0], a->shape[1], nnz,
                                                weft_tensor_data(s->crow), weft_tensor_data(s->col),
                                                values, it, it, CUSPARSE_INDEX_BASE_ZERO, vt));
    }
    /* Structure of arrays: row indices, then column indices. */
    char *rows = weft_tensor_data(s->indices);
    return CUSPARSE_CHECK(cusparseCreateCoo(out, a->shape[0], a->shape[1], nnz, rows,
                                            rows + (size_t)nnz * sizeof(int64_t), values,
                                            CUSPARSE_INDEX_64I, CUSPARSE_INDEX_BASE_ZERO, vt));
}
