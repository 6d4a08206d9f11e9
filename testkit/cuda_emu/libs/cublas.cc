/* testkit/cuda_emu/libs/cublas.cc: libweft-cublas-emu.so, cuBLAS's GEMMs on the emulated
 * device.
 *
 * C = alpha op(A) op(B) + beta C, column-major, with cuBLAS's argument checks (in its
 * order, with its status codes) at the call and the product queued on the handle's
 * stream. Host-mode scalars are read at the call, device-mode ones when the work runs, as
 * cuBLAS reads them. Each product converts op(A)'s rows and op(B)'s columns to the compute
 * type first (rounded to TF32, float16 or bfloat16 for the FAST compute types and the TF32
 * math mode), then takes dot products in order: the compute type's rounding, not its
 * summation order, which a GPU chooses freely. beta == 0 writes C without reading it.
 * Operands outside device memory are the illegal address a GPU would meet. */
#include <cstdio>
#include <cstring>
#include <set>
#include <vector>

#include <weft/half.h>

#include "../runtime/internal.h"
#include "cublas_v2.h"

struct cublasContext {
    int device;
    cudaStream_t stream;
    cublasMath_t math;
    cublasPointerMode_t pointer_mode;
};

namespace {

using namespace wemu;

std::set<cublasContext *> &handles = *new std::set<cublasContext *>;

bool valid(cublasHandle_t h)
{
    return h && handles.count(h);
}

bool valid_op(cublasOperation_t op)
{
    return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C;
}

enum Round { EXACT, TF32, HALF, BF16 };

float round_to(float v, Round r)
{
    switch (r) {
    case TF32: {
        uint32_t b = weft_float_bits(v);
        if ((b & 0x7f800000u) != 0x7f800000u) { /* nearest even, 10 mantissa bits */
            b += 0x0fffu + ((b >> 13) & 1u);
            b &= ~0x1fffu;
        }
        return weft_bits_float(b);
    }
    case HALF: return weft_f16_to_float(weft_float_to_f16(v));
    case BF16: return weft_bf16_to_float(weft_float_to_bf16(v));
    default: return v;
    }
}

double load(const char *base, cudaDataType t, long long i)
{
    switch (t) {
    case CUDA_R_64F: return reinterpret_cast<const double *>(base)[i];
    case CUDA_R_32F: return reinterpret_cast<const float *>(base)[i];
    case CUDA_R_16F: return weft_f16_to_float(reinterpret_cast<const uint16_t *>(base)[i]);
    case CUDA_R_16BF: return weft_bf16_to_float(reinterpret_cast<const uint16_t *>(base)[i]);
    case CUDA_R_8I: return reinterpret_cast<const int8_t *>(base)[i];
    case CUDA_R_32I: return reinterpret_cast<const int32_t *>(base)[i];
    default: return 0;
    }
}

void store(char *base, cudaDataType t, long long i, double v)
{
    switch (t) {
    case CUDA_R_64F: reinterpret_cast<double *>(base)[i] = v; break;
    case CUDA_R_32F: reinterpret_cast<float *>(base)[i] = (float)v; break;
    case CUDA_R_16F: reinterpret_cast<uint16_t *>(base)[i] = weft_float_to_f16((float)v); break;
    case CUDA_R_16BF: reinterpret_cast<uint16_t *>(base)[i] = weft_float_to_bf16((float)v); break;
    case CUDA_R_32I: reinterpret_cast<int32_t *>(base)[i] = (int32_t)v; break;
    default: break;
    }
}

size_t type_size(cudaDataType t)
{
    switch (t) {
    case CUDA_R_64F: return 8;
    case CUDA_R_32F: case CUDA_R_32I: return 4;
    case CUDA_R_16F: case CUDA_R_16BF: return 2;
    default: return 1;
    }
}

struct Gemm {
    const char *call;
    cublasOperation_t ta, tb;
    int m, n, k, lda, ldb, ldc, batch;
    long long sa, sb, sc;
    cudaDataType at, bt, ct;
    bool wide;      /* accumulate in double (64F) */
    Round rounding; /* of the operands */
    bool device_scalars;
    double alpha, beta;
    const void *palpha, *pbeta;
    cudaDataType scalar_type;
    const char *A, *B;
    char *C;
};

/* The last element a column-major [rows, cols] operand with ld and batch stride reaches,
 * plus one: its extent in elements. */
long long extent(long long rows, long long cols, long long ld, long long stride, int batch)
{
    if (rows == 0 || cols == 0 || batch == 0)
        return 0;
    return (long long)(batch - 1) * stride + (cols - 1) * ld + rows;
}

/* A GPU meets an illegal address where an operand leaves device memory. */
bool reachable(const Gemm &g, int dev)
{
    struct {
        const char *name;
        const void *p;
        long long n;
        cudaDataType t;
    } ops[3] = {
        {"A", g.A, g.ta == CUBLAS_OP_N ? extent(g.m, g.k, g.lda, g.sa, g.batch)
                                       : extent(g.k, g.m, g.lda, g.sa, g.batch), g.at},
        {"B", g.B, g.tb == CUBLAS_OP_N ? extent(g.k, g.n, g.ldb, g.sb, g.batch)
                                       : extent(g.n, g.k, g.ldb, g.sb, g.batch), g.bt},
        {"C", g.C, extent(g.m, g.n, g.ldc, g.sc, g.batch), g.ct},
    };
    for (auto &o : ops) {
        if (o.n <= 0 || (o.name[0] != 'C' && g.k == 0))
            continue;
        if (const char *bad = check_device_range(o.p, (size_t)o.n * type_size(o.t), dev)) {
            fault(dev, cudaErrorIllegalAddress,
                  std::string(g.call) + ": " + o.name + " (" + describe(o.p) + ", " +
                      std::to_string(o.n) + " elements) is " + bad);
            return false;
        }
    }
    return true;
}

/* C(i, j) = alpha acc + beta C(i, j), in the compute type, stored in C's. */
template <typename A> void finish(const Gemm &g, char *c, int j, int i, A acc)
{
    long long ci = (long long)j * g.ldc + i;
    A v = (A)g.alpha * acc;
    if (g.beta != 0)
        v += (A)g.beta * (A)load(c, g.ct, ci);
    store(c, g.ct, ci, (double)v);
}

template <typename A> void run_typed(Gemm g, int dev)
{
    if (!reachable(g, dev))
        return;
    if (g.device_scalars) {
        g.alpha = load(static_cast<const char *>(g.palpha), g.scalar_type, 0);
        g.beta = load(static_cast<const char *>(g.pbeta), g.scalar_type, 0);
    }
    /* rows of C two SSE registers at once, a lane each: 8 (float) or 4 (double) sums, each
     * in order over p (the same bits as one at a time), that the CPU overlaps instead of
     * waiting on every add */
    typedef A V __attribute__((vector_size(16)));
    const size_t L = sizeof(V) / sizeof(A);
    const size_t m = (size_t)g.m, k = (size_t)g.k;
    std::vector<A> at(m * k), cb((size_t)g.n * k);
    for (int b = 0; b < g.batch; b++) {
        const char *a = g.A + (size_t)(b * g.sa) * type_size(g.at);
        const char *bb = g.B + (size_t)(b * g.sb) * type_size(g.bt);
        char *c = g.C + (size_t)(b * g.sc) * type_size(g.ct);
        /* at[p][i] = op(A)(i, p); cb[j][p] = op(B)(p, j) */
        for (int i = 0; i < g.m; i++)
            for (int p = 0; p < g.k; p++) {
                long long ai = g.ta == CUBLAS_OP_N ? (long long)p * g.lda + i : (long long)i * g.lda + p;
                at[(size_t)p * m + (size_t)i] = (A)(g.rounding == EXACT
                    ? load(a, g.at, ai) : round_to((float)load(a, g.at, ai), g.rounding));
            }
        for (int j = 0; j < g.n; j++)
            for (int p = 0; p < g.k; p++) {
                long long bi = g.tb == CUBLAS_OP_N ? (long long)j * g.ldb + p : (long long)p * g.ldb + j;
                cb[(size_t)j * k + (size_t)p] = (A)(g.rounding == EXACT
                    ? load(bb, g.bt, bi) : round_to((float)load(bb, g.bt, bi), g.rounding));
            }
        for (int j = 0; j < g.n; j++) {
            const A *y = &cb[(size_t)j * k];
            size_t i = 0;
            for (; i + 2 * L <= m; i += 2 * L) {
                V acc0 = {}, acc1 = {};
                for (size_t p = 0; p < k; p++) {
                    V x0, x1;
                    memcpy(&x0, &at[p * m + i], sizeof x0);
                    memcpy(&x1, &at[p * m + i + L], sizeof x1);
                    acc0 += x0 * y[p];
                    acc1 += x1 * y[p];
                }
                for (size_t r = 0; r < L; r++) {
                    finish(g, c, j, (int)(i + r), acc0[r]);
                    finish(g, c, j, (int)(i + L + r), acc1[r]);
                }
            }
            for (; i < m; i++) {
                A acc = 0;
                for (size_t p = 0; p < k; p++)
                    acc += at[p * m + i] * y[p];
                finish(g, c, j, (int)i, acc);
            }
        }
    }
}

cublasStatus_t gemm(cublasHandle_t h, Gemm g)
{
    WEMU_LOCKED;
    if (!valid(h))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!valid_op(g.ta) || !valid_op(g.tb) || g.m < 0 || g.n < 0 || g.k < 0 || g.batch < 0)
        return CUBLAS_STATUS_INVALID_VALUE;
    int rows_a = g.ta == CUBLAS_OP_N ? g.m : g.k, rows_b = g.tb == CUBLAS_OP_N ? g.k : g.n;
    if (g.lda < (rows_a > 1 ? rows_a : 1) || g.ldb < (rows_b > 1 ? rows_b : 1) ||
        g.ldc < (g.m > 1 ? g.m : 1))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (!g.palpha || !g.pbeta)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (g.m == 0 || g.n == 0 || g.batch == 0)
        return CUBLAS_STATUS_SUCCESS;
    g.device_scalars = h->pointer_mode == CUBLAS_POINTER_MODE_DEVICE;
    if (!g.device_scalars) {
        g.alpha = load(static_cast<const char *>(g.palpha), g.scalar_type, 0);
        g.beta = load(static_cast<const char *>(g.pbeta), g.scalar_type, 0);
    }
    int dev = h->device;
    cudaError_t err = enqueue_host(h->stream, [g, dev] {
        if (g.wide)
            run_typed<double>(g, dev);
        else
            run_typed<float>(g, dev);
    }, g.call);
    return err == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

Gemm make(const char *call, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
          const void *alpha, const void *A, int lda, long long sa, const void *B, int ldb,
          long long sb, const void *beta, void *C, int ldc, long long sc, int batch)
{
    Gemm g{};
    g.call = call;
    g.ta = ta, g.tb = tb, g.m = m, g.n = n, g.k = k;
    g.lda = lda, g.ldb = ldb, g.ldc = ldc, g.sa = sa, g.sb = sb, g.sc = sc, g.batch = batch;
    g.palpha = alpha, g.pbeta = beta;
    g.A = static_cast<const char *>(A), g.B = static_cast<const char *>(B);
    g.C = static_cast<char *>(C);
    return g;
}

/* Sgemm and GemmEx with 32F data and COMPUTE_32F run in TF32 when the handle's math mode
 * asks for it (cuBLAS's CUBLAS_TF32_TENSOR_OP_MATH). */
Round float_rounding(cublasHandle_t h)
{
    return valid(h) && (h->math & 0xf) == CUBLAS_TF32_TENSOR_OP_MATH ? TF32 : EXACT;
}

/* GemmEx's supported (compute, A/B, C) combinations, as cuBLAS's table lists them, with
 * the scalar type and the rounding they imply; false: CUBLAS_STATUS_NOT_SUPPORTED. */
bool ex_types(cublasHandle_t h, cublasComputeType_t ct, cudaDataType a, cudaDataType b,
              cudaDataType c, Gemm &g)
{
    if (a != b)
        return false;
    g.at = a, g.bt = b, g.ct = c;
    g.wide = false;
    g.rounding = EXACT;
    g.scalar_type = CUDA_R_32F;
    switch (ct) {
    case CUBLAS_COMPUTE_64F:
    case CUBLAS_COMPUTE_64F_PEDANTIC:
        g.wide = true;
        g.scalar_type = CUDA_R_64F;
        return a == CUDA_R_64F && c == CUDA_R_64F;
    case CUBLAS_COMPUTE_32F:
    case CUBLAS_COMPUTE_32F_PEDANTIC:
        if (a == CUDA_R_32F && ct == CUBLAS_COMPUTE_32F)
            g.rounding = float_rounding(h);
        return (a == CUDA_R_32F && c == CUDA_R_32F) ||
               ((a == CUDA_R_16F || a == CUDA_R_16BF) && (c == a || c == CUDA_R_32F));
    case CUBLAS_COMPUTE_32F_FAST_TF32:
        g.rounding = TF32;
        return a == CUDA_R_32F && c == CUDA_R_32F;
    case CUBLAS_COMPUTE_32F_FAST_16F:
        g.rounding = HALF;
        return a == CUDA_R_32F && c == CUDA_R_32F;
    case CUBLAS_COMPUTE_32F_FAST_16BF:
        g.rounding = BF16;
        return a == CUDA_R_32F && c == CUDA_R_32F;
    default:
        return false; /* 16F and integer compute types: not emulated */
    }
}

} // namespace

extern "C" {

cublasStatus_t cublasCreate(cublasHandle_t *handle)
{
    WEMU_LOCKED;
    if (!handle)
        return CUBLAS_STATUS_INVALID_VALUE;
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        (void)cudaGetLastError();
        return CUBLAS_STATUS_NOT_INITIALIZED;
    }
    int dev = 0;
    cudaGetDevice(&dev);
    auto *h = new cublasContext{dev, nullptr, CUBLAS_DEFAULT_MATH, CUBLAS_POINTER_MODE_HOST};
    handles.insert(h);
    *handle = h;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t handle)
{
    WEMU_LOCKED;
    if (!valid(handle))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    handles.erase(handle);
    delete handle;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream)
{
    WEMU_LOCKED;
    if (!valid(handle))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!resolve(stream))
        return CUBLAS_STATUS_INVALID_VALUE;
    handle->stream = stream;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetStream(cublasHandle_t handle, cudaStream_t *stream)
{
    WEMU_LOCKED;
    if (!valid(handle))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!stream)
        return CUBLAS_STATUS_INVALID_VALUE;
    *stream = handle->stream;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode)
{
    WEMU_LOCKED;
    if (!valid(handle))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    int base = mode & 0xf;
    if (base > CUBLAS_TF32_TENSOR_OP_MATH || (mode & ~0x1f))
        return CUBLAS_STATUS_INVALID_VALUE;
    handle->math = mode;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t *mode)
{
    WEMU_LOCKED;
    if (!valid(handle))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!mode)
        return CUBLAS_STATUS_INVALID_VALUE;
    *mode = handle->math;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetPointerMode(cublasHandle_t handle, cublasPointerMode_t mode)
{
    WEMU_LOCKED;
    if (!valid(handle))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (mode != CUBLAS_POINTER_MODE_HOST && mode != CUBLAS_POINTER_MODE_DEVICE)
        return CUBLAS_STATUS_INVALID_VALUE;
    handle->pointer_mode = mode;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetPointerMode(cublasHandle_t handle, cublasPointerMode_t *mode)
{
    WEMU_LOCKED;
    if (!valid(handle))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!mode)
        return CUBLAS_STATUS_INVALID_VALUE;
    *mode = handle->pointer_mode;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetProperty(libraryPropertyType type, int *value)
{
    if (!value)
        return CUBLAS_STATUS_INVALID_VALUE;
    switch (type) {
    case MAJOR_VERSION: *value = 13; return CUBLAS_STATUS_SUCCESS;
    case MINOR_VERSION: *value = 0; return CUBLAS_STATUS_SUCCESS;
    case PATCH_LEVEL: *value = 0; return CUBLAS_STATUS_SUCCESS;
    default: return CUBLAS_STATUS_INVALID_VALUE;
    }
}

const char *cublasGetStatusString(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "the operation completed successfully";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "an absent device architectural feature is required";
    case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    case CUBLAS_STATUS_LICENSE_ERROR: return "error detected trying to check the license";
    }
    return "unknown error";
}

const char *cublasGetStatusName(cublasStatus_t s)
{
    switch (s) {
#define N(x) case x: return #x;
    N(CUBLAS_STATUS_SUCCESS) N(CUBLAS_STATUS_NOT_INITIALIZED) N(CUBLAS_STATUS_ALLOC_FAILED)
    N(CUBLAS_STATUS_INVALID_VALUE) N(CUBLAS_STATUS_ARCH_MISMATCH) N(CUBLAS_STATUS_MAPPING_ERROR)
    N(CUBLAS_STATUS_EXECUTION_FAILED) N(CUBLAS_STATUS_INTERNAL_ERROR)
    N(CUBLAS_STATUS_NOT_SUPPORTED) N(CUBLAS_STATUS_LICENSE_ERROR)
#undef N
    }
    return "CUBLAS_STATUS_UNKNOWN";
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta,
                                         cublasOperation_t tb, int m, int n, int k,
                                         const float *alpha, const float *A, int lda,
                                         long long sa, const float *B, int ldb, long long sb,
                                         const float *beta, float *C, int ldc, long long sc,
                                         int batch)
{
    Gemm g = make("cublasSgemmStridedBatched", ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb,
                  beta, C, ldc, sc, batch);
    g.at = g.bt = g.ct = g.scalar_type = CUDA_R_32F;
    g.rounding = float_rounding(h);
    return gemm(h, g);
}

cublasStatus_t cublasDgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta,
                                         cublasOperation_t tb, int m, int n, int k,
                                         const double *alpha, const double *A, int lda,
                                         long long sa, const double *B, int ldb, long long sb,
                                         const double *beta, double *C, int ldc, long long sc,
                                         int batch)
{
    Gemm g = make("cublasDgemmStridedBatched", ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb,
                  beta, C, ldc, sc, batch);
    g.at = g.bt = g.ct = g.scalar_type = CUDA_R_64F;
    g.wide = true;
    return gemm(h, g);
}

cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                           int n, int k, const float *alpha, const float *A, int lda,
                           const float *B, int ldb, const float *beta, float *C, int ldc)
{
    Gemm g = make("cublasSgemm", ta, tb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
    g.at = g.bt = g.ct = g.scalar_type = CUDA_R_32F;
    g.rounding = float_rounding(h);
    return gemm(h, g);
}

cublasStatus_t cublasDgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                           int n, int k, const double *alpha, const double *A, int lda,
                           const double *B, int ldb, const double *beta, double *C, int ldc)
{
    Gemm g = make("cublasDgemm", ta, tb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
    g.at = g.bt = g.ct = g.scalar_type = CUDA_R_64F;
    g.wide = true;
    return gemm(h, g);
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta,
                                          cublasOperation_t tb, int m, int n, int k,
                                          const void *alpha, const void *A, cudaDataType at,
                                          int lda, long long sa, const void *B, cudaDataType bt,
                                          int ldb, long long sb, const void *beta, void *C,
                                          cudaDataType ct, int ldc, long long sc, int batch,
                                          cublasComputeType_t compute, cublasGemmAlgo_t algo)
{
    Gemm g = make("cublasGemmStridedBatchedEx", ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb,
                  beta, C, ldc, sc, batch);
    {
        WEMU_LOCKED;
        if (!valid(h))
            return CUBLAS_STATUS_NOT_INITIALIZED;
        if (algo != CUBLAS_GEMM_DEFAULT && algo != CUBLAS_GEMM_DEFAULT_TENSOR_OP &&
            (algo < 0 || algo > 23) && (algo < 99 || algo > 115))
            return CUBLAS_STATUS_INVALID_VALUE;
        if (!ex_types(h, compute, at, bt, ct, g))
            return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    return gemm(h, g);
}

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                            int n, int k, const void *alpha, const void *A, cudaDataType at,
                            int lda, const void *B, cudaDataType bt, int ldb, const void *beta,
                            void *C, cudaDataType ct, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t algo)
{
    return cublasGemmStridedBatchedEx(h, ta, tb, m, n, k, alpha, A, at, lda, 0, B, bt, ldb, 0,
                                      beta, C, ct, ldc, 0, 1, compute, algo);
}

} /* extern "C" */
