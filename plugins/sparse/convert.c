/* plugins/sparse/convert.c: conversions between dense, COO and CSR (Tensor.to_sparse,
 * to_sparse_csr, to_dense), transpose, moves between devices, and the typed value
 * kernels they use (written once for every dtype with WEFT_FOR_ALL_DTYPES).
 *
 * Every algorithm is O(nnz) or O(nnz + rows/cols) after the optional sort of coalesce;
 * the dense scans and scatters run in parallel above SPARSE_PARALLEL_GRAIN. */
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include <weft.h>

#include "sparse_impl.h"

static weft_tensor *share(const weft_tensor *t)
{
    return weft_autorelease_shared((weft_tensor *)t);
}

/* A host tensor moved to dev (itself when dev is the cpu). */
static weft_tensor *to_dev(weft_tensor *host, weft_device dev)
{
    return weft_to_device(host, dev);
}

/* ---- typed value kernels --------------------------------------------------------------- */

#define DEFINE_GATHER(T)                                                                      \
    static void gather_##T(const void *src, const int64_t *idx, int64_t n, void *dst)        \
    {                                                                                         \
        const T *s = src;                                                                     \
        T *d = dst;                                                                           \
        _Pragma("omp parallel for schedule(static) if (n >= SPARSE_PARALLEL_GRAIN)")          \
        for (int64_t k = 0; k < n; k++)                                                       \
            d[k] = s[idx[k]];                                                                 \
    }
DEFINE_GATHER(uint8_t)
DEFINE_GATHER(uint16_t)
DEFINE_GATHER(uint32_t)
DEFINE_GATHER(uint64_t)
#undef DEFINE_GATHER

void sparse_gather(size_t itemsize, const void *src, const int64_t *idx, int64_t n, void *dst)
{
    if (n <= 0)
        return;
    switch (itemsize) {
    case 1: gather_uint8_t(src, idx, n, dst); break;
    case 2: gather_uint16_t(src, idx, n, dst); break;
    case 4: gather_uint32_t(src, idx, n, dst); break;
    default: gather_uint64_t(src, idx, n, dst); break;
    }
}

/* segment_sum, the COO and CSR scatters into a dense block, and the nonzero scan. */
#define DEFINE_VALUE_KERNELS(name, id, T, C)                                                  \
    static void segment_sum_##name(const void *src, const int64_t *perm, const int64_t *starts, \
                                   int64_t nseg, void *dst)                                   \
    {                                                                                         \
        const T *s = src;                                                                     \
        T *d = dst;                                                                           \
        _Pragma("omp parallel for schedule(static) if (nseg >= SPARSE_PARALLEL_GRAIN)")       \
        for (int64_t g = 0; g < nseg; g++) {                                                  \
            C acc = 0;                                                                        \
            for (int64_t i = starts[g]; i < starts[g + 1]; i++)                               \
                acc = (C)(acc + weft_load_##name(s + (perm ? perm[i] : i)));                \
            weft_store_##name(d + g, acc);                                                  \
        }                                                                                     \
    }                                                                                         \
    /* dst[pos[k]] += src[k]; in parallel only when the positions are distinct. */           \
    static void scatter_coo_##name(void *dst, const int64_t *pos, const void *src, int64_t n,  \
                                   bool distinct)                                             \
    {                                                                                         \
        const T *s = src;                                                                     \
        T *d = dst;                                                                           \
        _Pragma("omp parallel for schedule(static) if (distinct && n >= SPARSE_PARALLEL_GRAIN)") \
        for (int64_t k = 0; k < n; k++)                                                       \
            weft_store_##name(d + pos[k],                                                   \
                                (C)(weft_load_##name(d + pos[k]) + weft_load_##name(s + k))); \
    }                                                                                         \
    /* Row r of dst [rows, cols] += the CSR entries of row r; a row stays on one thread, so */ \
    /* duplicate columns (possible in an unchecked tensor) still add up. */                  \
    static void scatter_csr_##name(void *dst, const int64_t *crow, const int64_t *col,       \
                                   const void *src, int64_t rows, int64_t cols, int64_t nnz)  \
    {                                                                                         \
        const T *s = src;                                                                     \
        T *d = dst;                                                                           \
        _Pragma("omp parallel for schedule(dynamic, 256) if (nnz >= SPARSE_PARALLEL_GRAIN)") \
        for (int64_t r = 0; r < rows; r++) {                                                  \
            T *line = d + r * cols;                                                           \
            for (int64_t e = crow[r]; e < crow[r + 1]; e++)                                   \
                weft_store_##name(line + col[e], (C)(weft_load_##name(line + col[e]) +   \
                                                       weft_load_##name(s + e)));           \
        }                                                                                     \
    }                                                                                         \
    /* -0.0 is zero and NaN is not, as PyTorch's to_sparse. */                                \
    static int64_t count_nonzero_##name(const void *src, int64_t lo, int64_t hi)             \
    {                                                                                         \
        const T *s = src;                                                                     \
        int64_t c = 0;                                                                        \
        for (int64_t i = lo; i < hi; i++)                                                     \
            c += weft_load_##name(s + i) != 0;                                              \
        return c;                                                                             \
    }                                                                                         \
    static void list_nonzero_##name(const void *src, int64_t lo, int64_t hi, int64_t *out)    \
    {                                                                                         \
        const T *s = src;                                                                     \
        for (int64_t i = lo; i < hi; i++)                                                     \
            if (weft_load_##name(s + i) != 0)                                               \
                *out++ = i;                                                                   \
    }
WEFT_FOR_ALL_DTYPES(DEFINE_VALUE_KERNELS)
#undef DEFINE_VALUE_KERNELS

struct value_kernels {
    void (*segment_sum)(const void *, const int64_t *, const int64_t *, int64_t, void *);
    void (*scatter_coo)(void *, const int64_t *, const void *, int64_t, bool);
    void (*scatter_csr)(void *, const int64_t *, const int64_t *, const void *, int64_t, int64_t,
                        int64_t);
    int64_t (*count_nonzero)(const void *, int64_t, int64_t);
    void (*list_nonzero)(const void *, int64_t, int64_t, int64_t *);
};

static const struct value_kernels *kernels_for(enum weft_dtype dt)
{
    static const struct value_kernels table[WEFT_DTYPE_COUNT] = {
#define ENTRY(name, id, T, C)                                                                 \
    [id] = {segment_sum_##name, scatter_coo_##name, scatter_csr_##name, count_nonzero_##name,  \
            list_nonzero_##name},
        WEFT_FOR_ALL_DTYPES(ENTRY)
#undef ENTRY
    };
    return weft_dtype_valid(dt) ? &table[dt] : NULL;
}

void sparse_segment_sum(enum weft_dtype dt, const void *src, const int64_t *perm,
                        const int64_t *starts, int64_t nseg, void *dst)
{
    if (nseg > 0)
        kernels_for(dt)->segment_sum(src, perm, starts, nseg, dst);
}

/* ---- sparse -> dense ------------------------------------------------------------------- */

static weft_tensor *coo_to_dense(const weft_tensor *t, const struct sparse_data *s)
{
    int64_t nnz = sparse_nnz(s);
    void *dd;
    weft_tensor *dense = weft_zeros(t->ndim, t->shape, t->dtype, WEFT_CPU);
    if (!dense)
        return NULL;
    if (nnz == 0)
        return to_dev(dense, t->device);
    dd = weft_tensor_data(dense);
    const int64_t *idx;
    const weft_tensor *vh = weft_to_device(s->values, WEFT_CPU);
    if (!vh || !sparse_host_i64(s->indices, &idx) ||
        sparse_check_coo_indices(idx, t->ndim, nnz, t->shape) != 0)
        return NULL;
    int64_t *pos = sparse_scratch(nnz, sizeof *pos);
    if (!pos)
        return NULL;
    sparse_linear_keys(idx, t->ndim, nnz, t->shape, pos); /* the dense numel fits */
    kernels_for(t->dtype)->scatter_coo(dd, pos, weft_tensor_data(vh), nnz, s->coalesced);
    return to_dev(dense, t->device);
}

static weft_tensor *csr_to_dense(const weft_tensor *t, const struct sparse_data *s)
{
    int64_t nnz = sparse_nnz(s), rows = t->shape[0], cols = t->shape[1];
    weft_tensor *dense = weft_zeros(2, t->shape, t->dtype, WEFT_CPU);
    if (!dense)
        return NULL;
    if (nnz == 0)
        return to_dev(dense, t->device);
    const int64_t *crow, *col;
    const weft_tensor *vh = weft_to_device(s->values, WEFT_CPU);
    if (!vh || !sparse_host_i64(s->crow, &crow) || !sparse_host_i64(s->col, &col) ||
        sparse_check_csr_indices(crow, col, rows, cols, nnz, false) != 0)
        return NULL;
    kernels_for(t->dtype)->scatter_csr(weft_tensor_data(dense), crow, col, weft_tensor_data(vh),
                                       rows, cols, nnz);
    return to_dev(dense, t->device);
}

weft_tensor *sparse_to_dense_nograd(const weft_tensor *t)
{
    if (!t)
        return NULL;
    if (t->layout == WEFT_LAYOUT_STRIDED)
        return share(t);
    struct sparse_data *s = sparse_data_of(t, -1, "to_dense()");
    if (!s)
        return NULL;
    return t->layout == sparse_coo_layout ? coo_to_dense(t, s) : csr_to_dense(t, s);
}

/* ---- dense -> sparse ------------------------------------------------------------------- */

/* The linear positions of the nonzeros of host contiguous x, ascending, in a new host
 * int64 tensor [nnz]. Chunks are counted in parallel, then listed at their offsets. */
static weft_tensor *dense_nonzeros(const weft_tensor *x, int64_t **lin, int64_t *nnz_out)
{
    int64_t n = weft_tensor_numel(x);
    const void *src = weft_tensor_data(x);
    const struct value_kernels *k = kernels_for(x->dtype);
    int nt = sparse_threads(n);
    int64_t counts[257] = {0};
    if (nt > 256)
        nt = 256;
    int64_t chunk = n > 0 ? (n + nt - 1) / nt : 0;
#pragma omp parallel for num_threads(nt) schedule(static, 1) if (nt > 1)
    for (int c = 0; c < nt; c++) {
        int64_t lo = c * chunk, hi = lo + chunk < n ? lo + chunk : n;
        counts[c + 1] = lo < hi ? k->count_nonzero(src, lo, hi) : 0;
    }
    for (int c = 0; c < nt; c++)
        counts[c + 1] += counts[c];
    int64_t nnz = counts[nt];
    weft_tensor *out = sparse_new_host(1, &nnz, WEFT_I64, (void **)lin);
    if (!out)
        return NULL;
#pragma omp parallel for num_threads(nt) schedule(static, 1) if (nt > 1)
    for (int c = 0; c < nt; c++) {
        int64_t lo = c * chunk, hi = lo + chunk < n ? lo + chunk : n;
        if (lo < hi && counts[c + 1] > counts[c])
            k->list_nonzero(src, lo, hi, *lin + counts[c]);
    }
    *nnz_out = nnz;
    return out;
}

/* The values at lin from host contiguous x, in a new host tensor [nnz]. */
static weft_tensor *gather_values(const weft_tensor *x, const int64_t *lin, int64_t nnz)
{
    void *v;
    weft_tensor *out = sparse_new_host(1, &nnz, x->dtype, &v);
    if (out && nnz > 0)
        sparse_gather(weft_tensor_itemsize(x), weft_tensor_data(x), lin, nnz, v);
    return out;
}

static const weft_tensor *host_contiguous(const weft_tensor *t)
{
    return weft_contiguous(weft_to_device((weft_tensor *)t, WEFT_CPU));
}

static weft_tensor *dense_to_coo(const weft_tensor *t)
{
    if (t->ndim < 1) {
        weft_error_set(WEFT_ERR_RUNTIME,
                       "to_sparse(): expected a tensor of at least 1 dim, but got a 0-dim tensor");
        return NULL;
    }
    const weft_tensor *x = host_contiguous(t);
    int64_t *lin, nnz;
    if (!x || !dense_nonzeros(x, &lin, &nnz))
        return NULL;
    int nd = t->ndim;
    int64_t ishape[2] = {nd, nnz}, *idx;
    weft_tensor *indices = sparse_new_host(2, ishape, WEFT_I64, (void **)&idx);
    weft_tensor *values = gather_values(x, lin, nnz);
    if (!indices || !values)
        return NULL;
#pragma omp parallel for schedule(static) if (nnz >= SPARSE_PARALLEL_GRAIN)
    for (int64_t k = 0; k < nnz; k++) {
        int64_t rest = lin[k];
        for (int d = nd - 1; d >= 0; d--) {
            idx[(size_t)d * (size_t)nnz + (size_t)k] = rest % t->shape[d];
            rest /= t->shape[d];
        }
    }
    return sparse_make_coo(weft_tensor_retain(to_dev(indices, t->device)),
                           weft_tensor_retain(to_dev(values, t->device)), nd, t->shape, true);
}

/* crow [rows + 1] of entries sorted by row: crow[r] = first entry of a row >= r. Each
 * entry fills the rows it opens, so the work splits over entries. */
static void crow_from_sorted_rows(const int64_t *row, int64_t nnz, int64_t rows, int64_t *crow)
{
#pragma omp parallel for schedule(static) if (nnz >= SPARSE_PARALLEL_GRAIN)
    for (int64_t e = 0; e < nnz; e++) {
        int64_t from = e == 0 ? 0 : row[e - 1] + 1;
        for (int64_t r = from; r <= row[e]; r++)
            crow[r] = e;
    }
    for (int64_t r = nnz > 0 ? row[nnz - 1] + 1 : 0; r <= rows; r++)
        crow[r] = nnz;
}

static weft_tensor *dense_to_csr(const weft_tensor *t)
{
    if (t->ndim != 2) {
        weft_error_set(WEFT_ERR_RUNTIME,
                       "to_sparse_csr(): expected a 2-D dense tensor, but got %d dims (batched "
                       "and hybrid CSR tensors are not supported)",
                       t->ndim);
        return NULL;
    }
    const weft_tensor *x = host_contiguous(t);
    int64_t *lin, nnz, rows = t->shape[0], cols = t->shape[1];
    if (!x || !dense_nonzeros(x, &lin, &nnz))
        return NULL;
    int64_t nrow1 = rows + 1, *crow, *col, *row;
    weft_tensor *tc = sparse_new_host(1, &nrow1, WEFT_I64, (void **)&crow);
    weft_tensor *tk = sparse_new_host(1, &nnz, WEFT_I64, (void **)&col);
    weft_tensor *values = gather_values(x, lin, nnz);
    row = sparse_scratch(nnz, sizeof *row);
    if (!tc || !tk || !values || !row)
        return NULL;
#pragma omp parallel for schedule(static) if (nnz >= SPARSE_PARALLEL_GRAIN)
    for (int64_t e = 0; e < nnz; e++) {
        row[e] = lin[e] / cols;
        col[e] = lin[e] % cols;
    }
    crow_from_sorted_rows(row, nnz, rows, crow);
    return sparse_make_csr(weft_tensor_retain(to_dev(tc, t->device)),
                           weft_tensor_retain(to_dev(tk, t->device)),
                           weft_tensor_retain(to_dev(values, t->device)), t->shape);
}

/* ---- COO <-> CSR ------------------------------------------------------------------------- */

static weft_tensor *csr_to_coo(const weft_tensor *t, const struct sparse_data *s)
{
    const int64_t *idx;
    const weft_tensor *h = sparse_host_coo_indices(t, &idx);
    if (!h)
        return NULL;
    /* Rows ascend and columns are sorted within a row: the COO is coalesced, and shares
     * the values. */
    return sparse_make_coo(weft_tensor_retain(to_dev((weft_tensor *)h, t->device)),
                           weft_tensor_retain(s->values), 2, t->shape, true);
}

/* The rows of a coalesced COO ascend, so crow comes from one pass over them and the
 * columns are the indices' second row itself (a view: nothing is copied). Only the first
 * and last rows need a range check for crow to be written safely. */
static weft_tensor *coo_to_csr(const weft_tensor *t)
{
    if (t->ndim != 2) {
        weft_error_set(WEFT_ERR_RUNTIME,
                       "to_sparse_csr(): expected a 2-D sparse_coo tensor, but got %d dims",
                       t->ndim);
        return NULL;
    }
    const weft_tensor *c = sparse_coalesce_nograd(t);
    if (!c)
        return NULL;
    const struct sparse_data *s = c->layout_data;
    int64_t nnz = sparse_nnz(s), rows = t->shape[0], nrow1 = rows + 1;
    const int64_t *idx;
    int64_t *crow;
    weft_tensor *tc = sparse_new_host(1, &nrow1, WEFT_I64, (void **)&crow);
    if (!tc || !sparse_host_i64(s->indices, &idx))
        return NULL;
    if (nnz > 0 && idx[0] < 0) {
        weft_error_set(WEFT_ERR_RUNTIME, "found negative index %lld for dim 0", (long long)idx[0]);
        return NULL;
    }
    if (nnz > 0 && idx[nnz - 1] >= rows) {
        weft_error_set(WEFT_ERR_RUNTIME,
                       "size is inconsistent with indices: for dim 0, size is %lld but found "
                       "index %lld",
                       (long long)rows, (long long)idx[nnz - 1]);
        return NULL;
    }
    crow_from_sorted_rows(idx, nnz, rows, crow);
    weft_tensor *col = weft_reshape(weft_narrow(s->indices, 0, 1, 1), 1, &nnz);
    return sparse_make_csr(weft_tensor_retain(to_dev(tc, t->device)), weft_tensor_retain(col),
                           weft_tensor_retain(s->values), t->shape);
}

weft_tensor *sparse_to_coo_nograd(const weft_tensor *t)
{
    if (!t)
        return NULL;
    if (t->layout == WEFT_LAYOUT_STRIDED)
        return dense_to_coo(t);
    struct sparse_data *s = sparse_data_of(t, -1, "to_sparse()");
    if (!s)
        return NULL;
    return t->layout == sparse_coo_layout ? share(t) : csr_to_coo(t, s);
}

weft_tensor *sparse_to_csr_nograd(const weft_tensor *t)
{
    if (!t)
        return NULL;
    if (t->layout == WEFT_LAYOUT_STRIDED)
        return dense_to_csr(t);
    struct sparse_data *s = sparse_data_of(t, -1, "to_sparse_csr()");
    if (!s)
        return NULL;
    return t->layout == sparse_csr_layout ? share(t) : coo_to_csr(t);
}

/* ---- transpose ----------------------------------------------------------------------------- */

static weft_tensor *coo_transpose(const weft_tensor *t, const struct sparse_data *s, int d0,
                                  int d1)
{
    int nd = t->ndim;
    int64_t nnz = sparse_nnz(s), ishape[2] = {nd, nnz}, shape[WEFT_MAX_DIMS];
    const int64_t *idx;
    int64_t *out;
    weft_tensor *h = sparse_new_host(2, ishape, WEFT_I64, (void **)&out);
    if (!h || !sparse_host_i64(s->indices, &idx))
        return NULL;
    for (int d = 0; d < nd; d++) {
        int from = d == d0 ? d1 : d == d1 ? d0 : d;
        shape[d] = t->shape[from];
        if (nnz > 0)
            memcpy(out + (size_t)d * (size_t)nnz, idx + (size_t)from * (size_t)nnz,
                   (size_t)nnz * sizeof *out);
    }
    return sparse_make_coo(weft_tensor_retain(to_dev(h, t->device)), weft_tensor_retain(s->values),
                           nd, shape, nnz <= 1);
}

/* The CSR of the transpose: a counting sort of the entries by column, O(nnz + cols).
 * Walking rows in order keeps each new row's columns (the old rows) ascending. */
static weft_tensor *csr_transpose(const weft_tensor *t, const struct sparse_data *s)
{
    int64_t rows = t->shape[0], cols = t->shape[1], nnz = sparse_nnz(s), ncrow = cols + 1;
    const int64_t *crow, *col;
    int64_t *ncr, *ncol, *perm = NULL, *next = NULL;
    void *nv;
    const weft_tensor *vh = weft_to_device(s->values, WEFT_CPU);
    weft_tensor *tc = sparse_new_host(1, &ncrow, WEFT_I64, (void **)&ncr);
    weft_tensor *tk = sparse_new_host(1, &nnz, WEFT_I64, (void **)&ncol);
    weft_tensor *tv = sparse_new_host(1, &nnz, t->dtype, &nv);
    if (!vh || !tc || !tk || !tv || !sparse_host_i64(s->crow, &crow) ||
        !sparse_host_i64(s->col, &col) ||
        sparse_check_csr_indices(crow, col, rows, cols, nnz, false) != 0)
        return NULL;
    perm = sparse_scratch(nnz, sizeof *perm);
    next = sparse_scratch(ncrow, sizeof *next);
    if (!perm || !next)
        return NULL;
    memset(ncr, 0, (size_t)ncrow * sizeof *ncr);
    for (int64_t e = 0; e < nnz; e++)
        ncr[col[e] + 1]++;
    for (int64_t c = 0; c < cols; c++)
        ncr[c + 1] += ncr[c];
    memcpy(next, ncr, (size_t)ncrow * sizeof *next);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t e = crow[r]; e < crow[r + 1]; e++) {
            int64_t p = next[col[e]]++;
            ncol[p] = r;
            perm[p] = e;
        }
    sparse_gather(weft_tensor_itemsize(t), weft_tensor_data(vh), perm, nnz, nv);
    int64_t shape[2] = {cols, rows};
    enum weft_dtype it = s->crow->dtype;
    return sparse_make_csr(weft_tensor_retain(weft_to(tc, t->device, it, false)),
                           weft_tensor_retain(weft_to(tk, t->device, it, false)),
                           weft_tensor_retain(to_dev(tv, t->device)), shape);
}

/* Normalises both dims; returns 0 or negative. */
static int transpose_dims(const weft_tensor *t, int *dim0, int *dim1)
{
    *dim0 = weft_normalize_dim(*dim0, t->ndim);
    *dim1 = *dim0 < 0 ? -1 : weft_normalize_dim(*dim1, t->ndim);
    return *dim1 < 0 ? weft_error_code() : 0;
}

weft_tensor *sparse_transpose_nograd(const weft_tensor *t, int dim0, int dim1)
{
    struct sparse_data *s = t ? sparse_data_of(t, -1, "transpose()") : NULL;
    if (!s || transpose_dims(t, &dim0, &dim1) != 0)
        return NULL;
    if (dim0 == dim1)
        return share(t);
    return t->layout == sparse_coo_layout ? coo_transpose(t, s, dim0, dim1)
                                               : csr_transpose(t, s);
}

/* ---- devices ------------------------------------------------------------------------------ */

static weft_tensor *move(const weft_tensor *t, weft_device dev, bool non_blocking)
{
    const struct sparse_data *s = t->layout_data;
    if (weft_device_equal(t->device, dev))
        return share(t);
    weft_tensor *v = weft_to(s->values, dev, s->values->dtype, non_blocking);
    if (t->layout == sparse_coo_layout) {
        weft_tensor *i = weft_to(s->indices, dev, WEFT_I64, non_blocking);
        return sparse_make_coo(weft_tensor_retain(i), weft_tensor_retain(v), t->ndim, t->shape,
                               s->coalesced);
    }
    weft_tensor *c = weft_to(s->crow, dev, s->crow->dtype, non_blocking);
    weft_tensor *k = weft_to(s->col, dev, s->col->dtype, non_blocking);
    return sparse_make_csr(weft_tensor_retain(c), weft_tensor_retain(k), weft_tensor_retain(v),
                           t->shape);
}

/* ---- the API entries: the conversions above plus their autograd nodes ---------------------- */

static const double unit_scale[1] = {1.0};

weft_tensor *sparse_api_to_sparse_coo(const weft_tensor *t)
{
    if (!t)
        return NULL;
    if (t->layout == sparse_coo_layout)
        return share(t);
    bool record = weft_autograd_needed(1, (weft_tensor *const *)&t);
    struct sparse_frame f = sparse_begin();
    weft_tensor *out = sparse_to_coo_nograd(t);
    if (out && record &&
        sparse_grad_linear("ToSparseBackward0", out, 1, &t, unit_scale) != 0)
        out = NULL;
    return sparse_end(f, out);
}

weft_tensor *sparse_api_to_sparse_csr(const weft_tensor *t)
{
    if (!t)
        return NULL;
    if (t->layout == sparse_csr_layout)
        return share(t);
    bool record = weft_autograd_needed(1, (weft_tensor *const *)&t);
    struct sparse_frame f = sparse_begin();
    weft_tensor *out = sparse_to_csr_nograd(t);
    if (out && record &&
        sparse_grad_linear("ToSparseCsrBackward0", out, 1, &t, unit_scale) != 0)
        out = NULL;
    return sparse_end(f, out);
}

weft_tensor *sparse_api_to_dense(const weft_tensor *t)
{
    if (!t)
        return NULL;
    if (t->layout == WEFT_LAYOUT_STRIDED)
        return share(t);
    bool record = weft_autograd_needed(1, (weft_tensor *const *)&t);
    struct sparse_frame f = sparse_begin();
    weft_tensor *out = sparse_to_dense_nograd(t);
    if (out && record && sparse_grad_to_dense(out, t) != 0)
        out = NULL;
    return sparse_end(f, out);
}

weft_tensor *sparse_api_transpose(const weft_tensor *t, int dim0, int dim1)
{
    if (!t)
        return NULL;
    if (t->layout == WEFT_LAYOUT_STRIDED)
        return weft_transpose((weft_tensor *)t, dim0, dim1);
    bool record = weft_autograd_needed(1, (weft_tensor *const *)&t);
    struct sparse_frame f = sparse_begin();
    weft_tensor *out = sparse_transpose_nograd(t, dim0, dim1);
    if (out && out != t && record && sparse_grad_transpose(out, t, dim0, dim1) != 0)
        out = NULL;
    return sparse_end(f, out);
}

weft_tensor *sparse_api_to_device(const weft_tensor *t, weft_device dev, bool non_blocking)
{
    if (!t)
        return NULL;
    if (t->layout == WEFT_LAYOUT_STRIDED)
        return weft_to((weft_tensor *)t, dev, t->dtype, non_blocking);
    if (!sparse_data_of(t, -1, "to()"))
        return NULL;
    if (weft_device_equal(t->device, dev))
        return share(t);
    bool record = weft_autograd_needed(1, (weft_tensor *const *)&t);
    struct sparse_frame f = sparse_begin();
    weft_tensor *out = move(t, dev, non_blocking);
    if (out && record && sparse_grad_linear("ToCopyBackward0", out, 1, &t, unit_scale) != 0)
        out = NULL;
    return sparse_end(f, out);
}
