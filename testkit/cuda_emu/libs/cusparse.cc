/* testkit/cuda_emu/libs/cusparse.cc: libweft-cusparse-emu.so, cuSPARSE's generic SpMM and
 * SDDMM on the emulated device.
 *
 * Descriptors are copied into the queued work at the call (cuSPARSE's descriptors may be
 * destroyed as soon as the call returns), host scalars are read at the call. The checks
 * are cuSPARSE's: handles, shapes of op(A), op(B) and C, the value and compute types, and
 * the algorithm against the formats and layouts it takes: CSR_ALG2 wants A in CSR, op(A)
 * and op(B) not transposed and B and C row-major, and refuses anything else with
 * NOT_SUPPORTED, as the library does for combinations it does not implement; the default
 * algorithm takes every combination. SDDMM takes CSR only. The buffer size asked for is
 * not 0, and the work writes garbage into the buffer first, so a workspace released or
 * reused too early shows. When the work runs, the index arrays are read checked: an
 * offset or index out of range is the illegal address a GPU would meet. */
#include <cstdio>
#include <cstring>
#include <set>
#include <vector>

#include "../runtime/internal.h"
#include "cusparse.h"

struct cusparseContext {
    int device;
    cudaStream_t stream;
};

struct cusparseSpMatDescr {
    bool csr;
    int64_t rows, cols, nnz;
    void *rows_p; /* CSR offsets [rows + 1] or COO row indices [nnz] */
    void *cols_p;
    void *values;
    cusparseIndexType_t row_type, col_type;
    cusparseIndexBase_t base;
    cudaDataType value_type;
};

struct cusparseDnMatDescr {
    int64_t rows, cols, ld;
    void *values;
    cudaDataType value_type;
    cusparseOrder_t order;
};

namespace {

using namespace wemu;

std::set<cusparseContext *> &handles = *new std::set<cusparseContext *>;
std::set<const cusparseSpMatDescr *> &sparse_descrs =
    *new std::set<const cusparseSpMatDescr *>;
std::set<const cusparseDnMatDescr *> &dense_descrs =
    *new std::set<const cusparseDnMatDescr *>;

size_t value_size(cudaDataType t)
{
    return t == CUDA_R_64F ? 8 : 4;
}

size_t index_size(cusparseIndexType_t t)
{
    return t == CUSPARSE_INDEX_64I ? 8 : t == CUSPARSE_INDEX_32I ? 4 : 2;
}

int64_t load_index(const void *p, cusparseIndexType_t t, int64_t i)
{
    switch (t) {
    case CUSPARSE_INDEX_64I: return static_cast<const int64_t *>(p)[i];
    case CUSPARSE_INDEX_32I: return static_cast<const int32_t *>(p)[i];
    default: return static_cast<const uint16_t *>(p)[i];
    }
}

double load_value(const void *p, cudaDataType t, int64_t i)
{
    return t == CUDA_R_64F ? static_cast<const double *>(p)[i] : static_cast<const float *>(p)[i];
}

void store_value(void *p, cudaDataType t, int64_t i, double v)
{
    if (t == CUDA_R_64F)
        static_cast<double *>(p)[i] = v;
    else
        static_cast<float *>(p)[i] = (float)v;
}

bool valid_type(cudaDataType t)
{
    return t == CUDA_R_32F || t == CUDA_R_64F;
}

bool valid_index(cusparseIndexType_t t)
{
    return t == CUSPARSE_INDEX_32I || t == CUSPARSE_INDEX_64I;
}

/* Element (i, j) of a dense matrix. */
int64_t dense_at(const cusparseDnMatDescr &d, int64_t i, int64_t j)
{
    return d.order == CUSPARSE_ORDER_ROW ? i * d.ld + j : j * d.ld + i;
}

int64_t dense_extent(const cusparseDnMatDescr &d)
{
    if (d.rows == 0 || d.cols == 0)
        return 0;
    return d.order == CUSPARSE_ORDER_ROW ? (d.rows - 1) * d.ld + d.cols
                                         : (d.cols - 1) * d.ld + d.rows;
}

/* An array the work reads or writes: device memory of the device, or the illegal address. */
bool reach(int dev, const char *call, const char *what, const void *p, size_t bytes)
{
    if (bytes == 0)
        return true;
    if (const char *bad = check_device_range(p, bytes, dev)) {
        fault(dev, cudaErrorIllegalAddress,
              std::string(call) + ": " + what + " " + describe(p) + " is " + bad);
        return false;
    }
    return true;
}

bool reach_sparse(int dev, const char *call, const cusparseSpMatDescr &a)
{
    size_t nrows = a.csr ? (size_t)a.rows + 1 : (size_t)a.nnz;
    return reach(dev, call, a.csr ? "row offsets" : "row indices", a.rows_p,
                 nrows * index_size(a.row_type)) &&
           reach(dev, call, "column indices", a.cols_p, (size_t)a.nnz * index_size(a.col_type)) &&
           reach(dev, call, "values", a.values, (size_t)a.nnz * value_size(a.value_type));
}

/* The (row, column) of each specified element, read checked: false (a fault) when an
 * index or offset lies outside the matrix. */
bool elements(int dev, const char *call, const cusparseSpMatDescr &a,
              std::vector<std::pair<int64_t, int64_t>> &out)
{
    out.resize((size_t)a.nnz);
    int64_t b = a.base == CUSPARSE_INDEX_BASE_ONE;
    char why[200] = "";
    if (a.csr) {
        int64_t prev = load_index(a.rows_p, a.row_type, 0) - b;
        if (prev != 0)
            snprintf(why, sizeof why, "row offset 0 is %lld, not %lld", (long long)(prev + b),
                     (long long)b);
        for (int64_t r = 0; r < a.rows && !why[0]; r++) {
            int64_t next = load_index(a.rows_p, a.row_type, r + 1) - b;
            if (next < prev || next > a.nnz) {
                snprintf(why, sizeof why, "row offsets %lld, %lld at row %lld (nnz %lld)",
                         (long long)prev, (long long)next, (long long)r, (long long)a.nnz);
                break;
            }
            for (int64_t e = prev; e < next; e++)
                out[(size_t)e].first = r;
            prev = next;
        }
        if (!why[0] && prev != a.nnz)
            snprintf(why, sizeof why, "the last row offset is %lld, nnz %lld", (long long)prev,
                     (long long)a.nnz);
    } else {
        for (int64_t e = 0; e < a.nnz && !why[0]; e++) {
            out[(size_t)e].first = load_index(a.rows_p, a.row_type, e) - b;
            if (out[(size_t)e].first < 0 || out[(size_t)e].first >= a.rows)
                snprintf(why, sizeof why, "row index %lld of element %lld (rows %lld)",
                         (long long)out[(size_t)e].first, (long long)e, (long long)a.rows);
        }
    }
    for (int64_t e = 0; e < a.nnz && !why[0]; e++) {
        out[(size_t)e].second = load_index(a.cols_p, a.col_type, e) - b;
        if (out[(size_t)e].second < 0 || out[(size_t)e].second >= a.cols)
            snprintf(why, sizeof why, "column index %lld of element %lld (columns %lld)",
                     (long long)out[(size_t)e].second, (long long)e, (long long)a.cols);
    }
    if (why[0]) {
        fault(dev, cudaErrorIllegalAddress, std::string(call) + ": " + why);
        return false;
    }
    return true;
}

size_t workspace_size(int64_t rows)
{
    return 256 + 8 * (size_t)(rows > 0 ? rows : 0);
}

void scribble(void *buffer, size_t size)
{
    if (buffer && size)
        memset(buffer, 0xff, size);
}

struct SpMM {
    cusparseOperation_t op_a, op_b;
    double alpha, beta;
    cusparseSpMatDescr a;
    cusparseDnMatDescr b, c;
    void *buffer;
    size_t buffer_size;
};

void run_spmm(const SpMM &w, int dev)
{
    const char *call = "cusparseSpMM";
    if (!reach(dev, call, "the buffer", w.buffer, w.buffer_size) || !reach_sparse(dev, call, w.a) ||
        !reach(dev, call, "B", w.b.values, (size_t)dense_extent(w.b) * value_size(w.b.value_type)) ||
        !reach(dev, call, "C", w.c.values, (size_t)dense_extent(w.c) * value_size(w.c.value_type)))
        return;
    scribble(w.buffer, w.buffer_size);
    std::vector<std::pair<int64_t, int64_t>> el;
    if (!elements(dev, call, w.a, el))
        return;
    const cudaDataType t = w.c.value_type;
    const int64_t n = w.c.cols;
    for (int64_t i = 0; i < w.c.rows; i++)
        for (int64_t j = 0; j < n; j++) {
            int64_t at = dense_at(w.c, i, j);
            store_value(w.c.values, t, at, w.beta == 0 ? 0.0 : w.beta * load_value(w.c.values, t, at));
        }
    bool ta = w.op_a != CUSPARSE_OPERATION_NON_TRANSPOSE;
    bool tb = w.op_b != CUSPARSE_OPERATION_NON_TRANSPOSE;
    for (int64_t e = 0; e < w.a.nnz; e++) {
        int64_t r = el[(size_t)e].first, k = el[(size_t)e].second;
        if (ta)
            std::swap(r, k);
        double v = w.alpha * load_value(w.a.values, w.a.value_type, e);
        for (int64_t j = 0; j < n; j++) {
            int64_t bi = tb ? dense_at(w.b, j, k) : dense_at(w.b, k, j);
            int64_t ci = dense_at(w.c, r, j);
            store_value(w.c.values, t, ci,
                        load_value(w.c.values, t, ci) + v * load_value(w.b.values, w.b.value_type, bi));
        }
    }
}

struct SDDMM {
    cusparseOperation_t op_a, op_b;
    double alpha, beta;
    cusparseDnMatDescr a, b;
    cusparseSpMatDescr c;
    void *buffer;
    size_t buffer_size;
};

void run_sddmm(const SDDMM &w, int dev)
{
    const char *call = "cusparseSDDMM";
    if (!reach(dev, call, "the buffer", w.buffer, w.buffer_size) || !reach_sparse(dev, call, w.c) ||
        !reach(dev, call, "A", w.a.values, (size_t)dense_extent(w.a) * value_size(w.a.value_type)) ||
        !reach(dev, call, "B", w.b.values, (size_t)dense_extent(w.b) * value_size(w.b.value_type)))
        return;
    scribble(w.buffer, w.buffer_size);
    std::vector<std::pair<int64_t, int64_t>> el;
    if (!elements(dev, call, w.c, el))
        return;
    bool ta = w.op_a != CUSPARSE_OPERATION_NON_TRANSPOSE;
    bool tb = w.op_b != CUSPARSE_OPERATION_NON_TRANSPOSE;
    int64_t K = ta ? w.a.rows : w.a.cols;
    for (int64_t e = 0; e < w.c.nnz; e++) {
        int64_t r = el[(size_t)e].first, col = el[(size_t)e].second;
        double acc = 0;
        for (int64_t k = 0; k < K; k++) {
            double x = load_value(w.a.values, w.a.value_type, ta ? dense_at(w.a, k, r) : dense_at(w.a, r, k));
            double y = load_value(w.b.values, w.b.value_type, tb ? dense_at(w.b, col, k) : dense_at(w.b, k, col));
            acc += x * y;
        }
        double old = w.beta == 0 ? 0.0 : w.beta * load_value(w.c.values, w.c.value_type, e);
        store_value(w.c.values, w.c.value_type, e, w.alpha * acc + old);
    }
}

bool known(cusparseHandle_t h)
{
    return h && handles.count(h);
}

bool known(cusparseConstSpMatDescr_t d)
{
    return d && sparse_descrs.count(d);
}

bool known(cusparseConstDnMatDescr_t d)
{
    return d && dense_descrs.count(d);
}

/* op(X)'s rows and columns. */
void dims(int64_t rows, int64_t cols, cusparseOperation_t op, int64_t *r, int64_t *c)
{
    bool t = op != CUSPARSE_OPERATION_NON_TRANSPOSE;
    *r = t ? cols : rows;
    *c = t ? rows : cols;
}

bool valid_op(cusparseOperation_t op)
{
    return op == CUSPARSE_OPERATION_NON_TRANSPOSE || op == CUSPARSE_OPERATION_TRANSPOSE ||
           op == CUSPARSE_OPERATION_CONJUGATE_TRANSPOSE;
}

cusparseStatus_t check_spmm(cusparseHandle_t h, cusparseOperation_t op_a,
                            cusparseOperation_t op_b, const void *alpha,
                            cusparseConstSpMatDescr_t a, cusparseConstDnMatDescr_t b,
                            const void *beta, cusparseDnMatDescr_t c, cudaDataType ct,
                            cusparseSpMMAlg_t alg)
{
    if (!known(h))
        return CUSPARSE_STATUS_NOT_INITIALIZED;
    if (!alpha || !beta || !known(a) || !known(b) || !known(c) || !valid_op(op_a) || !valid_op(op_b))
        return CUSPARSE_STATUS_INVALID_VALUE;
    int64_t am, ak, bk, bn;
    dims(a->rows, a->cols, op_a, &am, &ak);
    dims(b->rows, b->cols, op_b, &bk, &bn);
    if (ak != bk || c->rows != am || c->cols != bn)
        return CUSPARSE_STATUS_INVALID_VALUE;
    if (a->value_type != ct || b->value_type != ct || c->value_type != ct || !valid_type(ct))
        return CUSPARSE_STATUS_NOT_SUPPORTED;
    if (b->order != c->order)
        return CUSPARSE_STATUS_NOT_SUPPORTED;
    switch (alg) {
    case CUSPARSE_SPMM_ALG_DEFAULT: return CUSPARSE_STATUS_SUCCESS;
    case CUSPARSE_SPMM_CSR_ALG1:
    case CUSPARSE_SPMM_CSR_ALG3:
        return a->csr ? CUSPARSE_STATUS_SUCCESS : CUSPARSE_STATUS_NOT_SUPPORTED;
    case CUSPARSE_SPMM_CSR_ALG2:
        return a->csr && op_a == CUSPARSE_OPERATION_NON_TRANSPOSE &&
                       op_b == CUSPARSE_OPERATION_NON_TRANSPOSE && c->order == CUSPARSE_ORDER_ROW
                   ? CUSPARSE_STATUS_SUCCESS
                   : CUSPARSE_STATUS_NOT_SUPPORTED;
    case CUSPARSE_SPMM_COO_ALG1:
    case CUSPARSE_SPMM_COO_ALG2:
    case CUSPARSE_SPMM_COO_ALG3:
    case CUSPARSE_SPMM_COO_ALG4:
        return !a->csr ? CUSPARSE_STATUS_SUCCESS : CUSPARSE_STATUS_NOT_SUPPORTED;
    }
    return CUSPARSE_STATUS_INVALID_VALUE;
}

cusparseStatus_t check_sddmm(cusparseHandle_t h, cusparseOperation_t op_a,
                             cusparseOperation_t op_b, const void *alpha,
                             cusparseConstDnMatDescr_t a, cusparseConstDnMatDescr_t b,
                             const void *beta, cusparseSpMatDescr_t c, cudaDataType ct,
                             cusparseSDDMMAlg_t alg)
{
    if (!known(h))
        return CUSPARSE_STATUS_NOT_INITIALIZED;
    if (!alpha || !beta || !known(a) || !known(b) || !known(c) || !valid_op(op_a) ||
        !valid_op(op_b) || alg != CUSPARSE_SDDMM_ALG_DEFAULT)
        return CUSPARSE_STATUS_INVALID_VALUE;
    int64_t am, ak, bk, bn;
    dims(a->rows, a->cols, op_a, &am, &ak);
    dims(b->rows, b->cols, op_b, &bk, &bn);
    if (ak != bk || c->rows != am || c->cols != bn)
        return CUSPARSE_STATUS_INVALID_VALUE;
    if (!c->csr || a->value_type != ct || b->value_type != ct || c->value_type != ct ||
        !valid_type(ct))
        return CUSPARSE_STATUS_NOT_SUPPORTED;
    return CUSPARSE_STATUS_SUCCESS;
}

double scalar(const void *p, cudaDataType t)
{
    return load_value(p, t, 0);
}

} // namespace

extern "C" {

const char *cusparseGetErrorString(cusparseStatus_t s)
{
    switch (s) {
    case CUSPARSE_STATUS_SUCCESS: return "success";
    case CUSPARSE_STATUS_NOT_INITIALIZED: return "initialization error";
    case CUSPARSE_STATUS_ALLOC_FAILED: return "out of memory";
    case CUSPARSE_STATUS_INVALID_VALUE: return "invalid value";
    case CUSPARSE_STATUS_ARCH_MISMATCH: return "architecture mismatch";
    case CUSPARSE_STATUS_MAPPING_ERROR: return "mapping error";
    case CUSPARSE_STATUS_EXECUTION_FAILED: return "execution failed";
    case CUSPARSE_STATUS_INTERNAL_ERROR: return "internal operation failed";
    case CUSPARSE_STATUS_MATRIX_TYPE_NOT_SUPPORTED: return "matrix type not supported";
    case CUSPARSE_STATUS_ZERO_PIVOT: return "zero pivot";
    case CUSPARSE_STATUS_NOT_SUPPORTED: return "operation not supported";
    case CUSPARSE_STATUS_INSUFFICIENT_RESOURCES: return "insufficient resources";
    }
    return "unknown error";
}

const char *cusparseGetErrorName(cusparseStatus_t s)
{
    switch (s) {
#define N(x) case x: return #x;
    N(CUSPARSE_STATUS_SUCCESS) N(CUSPARSE_STATUS_NOT_INITIALIZED) N(CUSPARSE_STATUS_ALLOC_FAILED)
    N(CUSPARSE_STATUS_INVALID_VALUE) N(CUSPARSE_STATUS_ARCH_MISMATCH)
    N(CUSPARSE_STATUS_MAPPING_ERROR) N(CUSPARSE_STATUS_EXECUTION_FAILED)
    N(CUSPARSE_STATUS_INTERNAL_ERROR) N(CUSPARSE_STATUS_MATRIX_TYPE_NOT_SUPPORTED)
    N(CUSPARSE_STATUS_ZERO_PIVOT) N(CUSPARSE_STATUS_NOT_SUPPORTED)
    N(CUSPARSE_STATUS_INSUFFICIENT_RESOURCES)
#undef N
    }
    return "CUSPARSE_STATUS_UNKNOWN";
}

cusparseStatus_t cusparseCreate(cusparseHandle_t *handle)
{
    WEMU_LOCKED;
    if (!handle)
        return CUSPARSE_STATUS_INVALID_VALUE;
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        (void)cudaGetLastError();
        return CUSPARSE_STATUS_NOT_INITIALIZED;
    }
    int dev = 0;
    cudaGetDevice(&dev);
    auto *h = new cusparseContext{dev, nullptr};
    handles.insert(h);
    *handle = h;
    return CUSPARSE_STATUS_SUCCESS;
}

cusparseStatus_t cusparseDestroy(cusparseHandle_t handle)
{
    WEMU_LOCKED;
    if (!known(handle))
        return CUSPARSE_STATUS_NOT_INITIALIZED;
    handles.erase(handle);
    delete handle;
    return CUSPARSE_STATUS_SUCCESS;
}

cusparseStatus_t cusparseSetStream(cusparseHandle_t handle, cudaStream_t stream)
{
    WEMU_LOCKED;
    if (!known(handle))
        return CUSPARSE_STATUS_NOT_INITIALIZED;
    if (!resolve(stream))
        return CUSPARSE_STATUS_INVALID_VALUE;
    handle->stream = stream;
    return CUSPARSE_STATUS_SUCCESS;
}

cusparseStatus_t cusparseGetStream(cusparseHandle_t handle, cudaStream_t *stream)
{
    WEMU_LOCKED;
    if (!known(handle))
        return CUSPARSE_STATUS_NOT_INITIALIZED;
    if (!stream)
        return CUSPARSE_STATUS_INVALID_VALUE;
    *stream = handle->stream;
    return CUSPARSE_STATUS_SUCCESS;
}

static cusparseStatus_t make_sparse(cusparseSpMatDescr_t *descr, bool csr, int64_t rows,
                                    int64_t cols, int64_t nnz, void *r, void *c, void *v,
                                    cusparseIndexType_t rt, cusparseIndexType_t ct,
                                    cusparseIndexBase_t base, cudaDataType vt)
{
    WEMU_LOCKED;
    if (!descr || rows < 0 || cols < 0 || nnz < 0 || !valid_index(rt) || !valid_index(ct) ||
        (base != CUSPARSE_INDEX_BASE_ZERO && base != CUSPARSE_INDEX_BASE_ONE) ||
        (nnz > 0 && (!c || !v || !r)) || (csr && rows > 0 && !r))
        return CUSPARSE_STATUS_INVALID_VALUE;
    if (!valid_type(vt))
        return CUSPARSE_STATUS_NOT_SUPPORTED;
    auto *d = new cusparseSpMatDescr{csr, rows, cols, nnz, r, c, v, rt, ct, base, vt};
    sparse_descrs.insert(d);
    *descr = d;
    return CUSPARSE_STATUS_SUCCESS;
}

cusparseStatus_t cusparseCreateCsr(cusparseSpMatDescr_t *descr, int64_t rows, int64_t cols,
                                   int64_t nnz, void *row_offsets, void *col_ind, void *values,
                                   cusparseIndexType_t row_offsets_type,
                                   cusparseIndexType_t col_ind_type, cusparseIndexBase_t base,
                                   cudaDataType value_type)
{
    return make_sparse(descr, true, rows, cols, nnz, row_offsets, col_ind, values,
                       row_offsets_type, col_ind_type, base, value_type);
}

cusparseStatus_t cusparseCreateCoo(cusparseSpMatDescr_t *descr, int64_t rows, int64_t cols,
                                   int64_t nnz, void *row_ind, void *col_ind, void *values,
                                   cusparseIndexType_t index_type, cusparseIndexBase_t base,
                                   cudaDataType value_type)
{
    return make_sparse(descr, false, rows, cols, nnz, row_ind, col_ind, values, index_type,
                       index_type, base, value_type);
}

cusparseStatus_t cusparseDestroySpMat(cusparseConstSpMatDescr_t descr)
{
    WEMU_LOCKED;
    if (!descr)
        return CUSPARSE_STATUS_SUCCESS;
    if (!sparse_descrs.count(descr))
        return CUSPARSE_STATUS_INVALID_VALUE;
    sparse_descrs.erase(descr);
    delete const_cast<cusparseSpMatDescr *>(descr);
    return CUSPARSE_STATUS_SUCCESS;
}

cusparseStatus_t cusparseCreateConstDnMat(cusparseConstDnMatDescr_t *descr, int64_t rows,
                                          int64_t cols, int64_t ld, const void *values,
                                          cudaDataType value_type, cusparseOrder_t order)
{
    WEMU_LOCKED;
    if (!descr || rows < 0 || cols < 0 ||
        (order != CUSPARSE_ORDER_ROW && order != CUSPARSE_ORDER_COL) ||
        ld < (order == CUSPARSE_ORDER_ROW ? cols : rows) || (rows * cols > 0 && !values))
        return CUSPARSE_STATUS_INVALID_VALUE;
    if (!valid_type(value_type))
        return CUSPARSE_STATUS_NOT_SUPPORTED;
    auto *d = new cusparseDnMatDescr{rows, cols, ld, const_cast<void *>(values), value_type, order};
    dense_descrs.insert(d);
    *descr = d;
    return CUSPARSE_STATUS_SUCCESS;
}

cusparseStatus_t cusparseCreateDnMat(cusparseDnMatDescr_t *descr, int64_t rows, int64_t cols,
                                     int64_t ld, void *values, cudaDataType value_type,
                                     cusparseOrder_t order)
{
    cusparseConstDnMatDescr_t d = nullptr;
    cusparseStatus_t st = cusparseCreateConstDnMat(&d, rows, cols, ld, values, value_type, order);
    if (st == CUSPARSE_STATUS_SUCCESS)
        *descr = const_cast<cusparseDnMatDescr *>(d);
    return st;
}

cusparseStatus_t cusparseDestroyDnMat(cusparseConstDnMatDescr_t descr)
{
    WEMU_LOCKED;
    if (!descr)
        return CUSPARSE_STATUS_SUCCESS;
    if (!dense_descrs.count(descr))
        return CUSPARSE_STATUS_INVALID_VALUE;
    dense_descrs.erase(descr);
    delete const_cast<cusparseDnMatDescr *>(descr);
    return CUSPARSE_STATUS_SUCCESS;
}

cusparseStatus_t cusparseSpMM_bufferSize(cusparseHandle_t handle, cusparseOperation_t op_a,
                                         cusparseOperation_t op_b, const void *alpha,
                                         cusparseConstSpMatDescr_t a, cusparseConstDnMatDescr_t b,
                                         const void *beta, cusparseDnMatDescr_t c,
                                         cudaDataType compute_type, cusparseSpMMAlg_t alg,
                                         size_t *size)
{
    WEMU_LOCKED;
    cusparseStatus_t st = check_spmm(handle, op_a, op_b, alpha, a, b, beta, c, compute_type, alg);
    if (st != CUSPARSE_STATUS_SUCCESS)
        return st;
    if (!size)
        return CUSPARSE_STATUS_INVALID_VALUE;
    *size = workspace_size(c->rows);
    return CUSPARSE_STATUS_SUCCESS;
}

cusparseStatus_t cusparseSpMM(cusparseHandle_t handle, cusparseOperation_t op_a,
                              cusparseOperation_t op_b, const void *alpha,
                              cusparseConstSpMatDescr_t a, cusparseConstDnMatDescr_t b,
                              const void *beta, cusparseDnMatDescr_t c, cudaDataType compute_type,
                              cusparseSpMMAlg_t alg, void *buffer)
{
    WEMU_LOCKED;
    cusparseStatus_t st = check_spmm(handle, op_a, op_b, alpha, a, b, beta, c, compute_type, alg);
    if (st != CUSPARSE_STATUS_SUCCESS)
        return st;
    SpMM w{op_a, op_b, scalar(alpha, compute_type), scalar(beta, compute_type), *a, *b, *c, buffer,
           workspace_size(c->rows)};
    if (!buffer)
        return CUSPARSE_STATUS_INVALID_VALUE;
    int dev = handle->device;
    cudaError_t err = enqueue_host(handle->stream, [w, dev] { run_spmm(w, dev); }, "cusparseSpMM");
    return err == cudaSuccess ? CUSPARSE_STATUS_SUCCESS : CUSPARSE_STATUS_EXECUTION_FAILED;
}

cusparseStatus_t cusparseSDDMM_bufferSize(cusparseHandle_t handle, cusparseOperation_t op_a,
                                          cusparseOperation_t op_b, const void *alpha,
                                          cusparseConstDnMatDescr_t a, cusparseConstDnMatDescr_t b,
                                          const void *beta, cusparseSpMatDescr_t c,
                                          cudaDataType compute_type, cusparseSDDMMAlg_t alg,
                                          size_t *size)
{
    WEMU_LOCKED;
    cusparseStatus_t st = check_sddmm(handle, op_a, op_b, alpha, a, b, beta, c, compute_type, alg);
    if (st != CUSPARSE_STATUS_SUCCESS)
        return st;
    if (!size)
        return CUSPARSE_STATUS_INVALID_VALUE;
    *size = workspace_size(c->rows);
    return CUSPARSE_STATUS_SUCCESS;
}

cusparseStatus_t cusparseSDDMM(cusparseHandle_t handle, cusparseOperation_t op_a,
                               cusparseOperation_t op_b, const void *alpha,
                               cusparseConstDnMatDescr_t a, cusparseConstDnMatDescr_t b,
                               const void *beta, cusparseSpMatDescr_t c, cudaDataType compute_type,
                               cusparseSDDMMAlg_t alg, void *buffer)
{
    WEMU_LOCKED;
    cusparseStatus_t st = check_sddmm(handle, op_a, op_b, alpha, a, b, beta, c, compute_type, alg);
    if (st != CUSPARSE_STATUS_SUCCESS)
        return st;
    if (!buffer)
        return CUSPARSE_STATUS_INVALID_VALUE;
    SDDMM w{op_a, op_b, scalar(alpha, compute_type), scalar(beta, compute_type), *a, *b, *c,
            buffer, workspace_size(c->rows)};
    int dev = handle->device;
    cudaError_t err = enqueue_host(handle->stream, [w, dev] { run_sddmm(w, dev); }, "cusparseSDDMM");
    return err == cudaSuccess ? CUSPARSE_STATUS_SUCCESS : CUSPARSE_STATUS_EXECUTION_FAILED;
}

} /* extern "C" */
