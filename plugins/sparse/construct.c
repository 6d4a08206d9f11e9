/* plugins/sparse/construct.c: torch.sparse_coo_tensor and torch.sparse_csr_tensor with
 * PyTorch's checks, the component accessors, coalesce, and the host index work they rest
 * on: range checks, row-major keys and a stable radix sort.
 *
 * Index work always happens on the host in int64: components on another device are
 * copied to the cpu for it and the results copied back. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include <weft.h>

#include "sparse_impl.h"

static const char *dev_str(weft_device dev, char *buf, size_t size)
{
    return weft_device_str(dev, buf, size);
}

/* ---- host buffers ---------------------------------------------------------------------- */

const weft_tensor *sparse_host_i64(const weft_tensor *t, const int64_t **data)
{
    *data = NULL;
    weft_tensor *h = (weft_tensor *)t;
    if (t->dtype != WEFT_I64 || t->device.type != WEFT_DEVICE_CPU || !weft_tensor_is_contiguous(t))
        h = weft_contiguous(weft_to(h, WEFT_CPU, WEFT_I64, false));
    if (h)
        *data = weft_tensor_data(h);
    return h;
}

weft_tensor *sparse_new_host(int ndim, const int64_t *shape, enum weft_dtype dtype, void **data)
{
    weft_tensor *t = weft_empty(ndim, shape, dtype, WEFT_CPU);
    *data = t ? weft_tensor_data(t) : NULL;
    return t;
}

const weft_tensor *sparse_host_coo_indices(const weft_tensor *t, const int64_t **data)
{
    *data = NULL;
    struct sparse_data *s = sparse_data_of(t, -1, "sparse_host_coo_indices");
    if (!s)
        return NULL;
    if (t->layout == sparse_coo_layout)
        return sparse_host_i64(s->indices, data);
    const int64_t *crow, *col;
    int64_t rows = t->shape[0], nnz = sparse_nnz(s);
    if (!sparse_host_i64(s->crow, &crow) || !sparse_host_i64(s->col, &col))
        return NULL;
    if (sparse_check_csr_indices(crow, NULL, rows, t->shape[1], nnz, false) != 0)
        return NULL;
    int64_t shape[2] = {2, nnz};
    int64_t *out;
    weft_tensor *h = sparse_new_host(2, shape, WEFT_I64, (void **)&out);
    if (!h || nnz == 0)
        return h;
#pragma omp parallel for schedule(static) if (nnz >= SPARSE_PARALLEL_GRAIN)
    for (int64_t r = 0; r < rows; r++)
        for (int64_t e = crow[r]; e < crow[r + 1]; e++)
            out[e] = r;
    memcpy(out + nnz, col, (size_t)nnz * sizeof *out);
    *data = out;
    return h;
}

/* ---- checks ------------------------------------------------------------------------------ */

/* Smallest and largest index of each dim (nnz > 0). */
static void index_extent(const int64_t *idx, int ndim, int64_t nnz, int64_t *lo, int64_t *hi)
{
    for (int d = 0; d < ndim; d++) {
        const int64_t *row = idx + (size_t)d * (size_t)nnz;
        int64_t mn = INT64_MAX, mx = INT64_MIN;
#pragma omp parallel for reduction(min : mn) reduction(max : mx) if (nnz >= SPARSE_PARALLEL_GRAIN)
        for (int64_t k = 0; k < nnz; k++) {
            mn = row[k] < mn ? row[k] : mn;
            mx = row[k] > mx ? row[k] : mx;
        }
        lo[d] = mn;
        hi[d] = mx;
    }
}

int sparse_check_coo_indices(const int64_t *idx, int ndim, int64_t nnz, const int64_t *size)
{
    if (nnz == 0)
        return 0;
    int64_t lo[WEFT_MAX_DIMS], hi[WEFT_MAX_DIMS];
    index_extent(idx, ndim, nnz, lo, hi);
    for (int d = 0; d < ndim; d++) {
        if (lo[d] < 0)
            return weft_error_set(WEFT_ERR_RUNTIME, "found negative index %lld for dim %d",
                                  (long long)lo[d], d);
        if (size && hi[d] >= size[d])
            return weft_error_set(WEFT_ERR_RUNTIME,
                                  "size is inconsistent with indices: for dim %d, size is %lld "
                                  "but found index %lld",
                                  d, (long long)size[d], (long long)hi[d]);
    }
    return 0;
}

int sparse_check_csr_indices(const int64_t *crow, const int64_t *col, int64_t rows,
                             int64_t cols, int64_t nnz, bool full)
{
    if (crow[0] != 0)
        return weft_error_set(WEFT_ERR_RUNTIME, "`crow_indices[..., 0] == 0` is not satisfied.");
    if (crow[rows] != nnz)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "`crow_indices[..., -1] == nnz` is not satisfied.");
    /* Non-decreasing from 0 to nnz keeps every entry in [0, nnz], so the differences
     * below cannot overflow. */
    bool bad = false;
    for (int64_t r = 0; r < rows && !bad; r++)
        bad = crow[r + 1] < crow[r] || (full && crow[r + 1] - crow[r] > cols);
    if (bad)
        return weft_error_set(WEFT_ERR_RUNTIME, "`0 <= crow_indices[..., 1:] - crow_indices[..., "
                                                ":-1] <= ncols` is not satisfied.");
    if (!col)
        return 0;
#pragma omp parallel for reduction(|| : bad) if (nnz >= SPARSE_PARALLEL_GRAIN)
    for (int64_t e = 0; e < nnz; e++)
        bad = bad || col[e] < 0 || col[e] >= cols;
    if (bad)
        return weft_error_set(WEFT_ERR_RUNTIME, "`0 <= col_indices < ncols` is not satisfied.");
    if (!full)
        return 0;
#pragma omp parallel for reduction(|| : bad) if (nnz >= SPARSE_PARALLEL_GRAIN)
    for (int64_t r = 0; r < rows; r++)
        for (int64_t e = crow[r] + 1; e < crow[r + 1]; e++)
            bad = bad || col[e] <= col[e - 1];
    if (bad)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "`col_indices[..., crow_indices[..., i - 1]:crow_indices[..., i]] "
                              "for all i = 1, ..., nrows are sorted and distinct along the last "
                              "dimension values` is not satisfied.");
    return 0;
}

/* ---- keys and sorting ---------------------------------------------------------------------- */

bool sparse_linear_keys(const int64_t *idx, int ndim, int64_t nnz, const int64_t *size,
                        int64_t *keys)
{
    uint64_t stride[WEFT_MAX_DIMS], numel = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        stride[d] = numel;
        if (size[d] < 0 || __builtin_mul_overflow(numel, (uint64_t)size[d], &numel) ||
            numel > (uint64_t)INT64_MAX)
            return false;
    }
    /* Unsigned arithmetic: indices nobody checked must not make this undefined. */
#pragma omp parallel for schedule(static) if (nnz >= SPARSE_PARALLEL_GRAIN)
    for (int64_t k = 0; k < nnz; k++) {
        uint64_t key = 0;
        for (int d = 0; d < ndim; d++)
            key += (uint64_t)idx[(size_t)d * (size_t)nnz + (size_t)k] * stride[d];
        keys[k] = (int64_t)key;
    }
    return true;
}

void *sparse_scratch(int64_t count, size_t size)
{
    int64_t bytes = (count > 0 ? count : 1) * (int64_t)size;
    weft_tensor *t = weft_empty(1, &bytes, WEFT_U8, WEFT_CPU);
    return t ? weft_tensor_data(t) : NULL;
}

#define RADIX_MAX_BITS 12
#define RADIX_BUCKETS (1 << RADIX_MAX_BITS)

/* One stable counting pass over the digit (key >> shift) & mask: (ks, ps) -> (kd, pd).
 * The input is cut into nt contiguous chunks that write to bucket offsets ordered by
 * (digit, chunk), which keeps it stable. Returns false, moving nothing, when every key has the same
 * digit. */
static bool radix_pass(int64_t n, const uint64_t *ks, const int64_t *ps, uint64_t *kd,
                       int64_t *pd, int shift, uint64_t mask, int64_t *hist, int nt)
{
    int64_t chunk = (n + nt - 1) / nt;
    int nb = (int)mask + 1;
    memset(hist, 0, (size_t)nt * RADIX_BUCKETS * sizeof *hist);
    /* A loop over the chunks (not over threads), so every chunk is done however many
     * threads the runtime grants. */
#pragma omp parallel for num_threads(nt) schedule(static, 1) if (nt > 1)
    for (int t = 0; t < nt; t++) {
        int64_t *h = hist + (size_t)t * RADIX_BUCKETS;
        int64_t lo = t * chunk, hi = lo + chunk < n ? lo + chunk : n;
        for (int64_t i = lo; i < hi; i++)
            h[(ks[i] >> shift) & mask]++;
    }
    int64_t total = 0;
    for (int b = 0; b < nb; b++) {
        int64_t in_bucket = 0;
        for (int t = 0; t < nt; t++) {
            int64_t c = hist[(size_t)t * RADIX_BUCKETS + b];
            hist[(size_t)t * RADIX_BUCKETS + b] = total;
            total += c;
            in_bucket += c;
        }
        if (in_bucket == n)
            return false;
    }
#pragma omp parallel for num_threads(nt) schedule(static, 1) if (nt > 1)
    for (int t = 0; t < nt; t++) {
        int64_t *h = hist + (size_t)t * RADIX_BUCKETS;
        int64_t lo = t * chunk, hi = lo + chunk < n ? lo + chunk : n;
        for (int64_t i = lo; i < hi; i++) {
            int64_t at = h[(ks[i] >> shift) & mask]++;
            kd[at] = ks[i];
            pd[at] = ps[i];
        }
    }
    return true;
}

/* LSD radix sort of (key, pos) by key, stable, with as few passes of at most 12 bits as
 * the largest key needs. kt and pt are scratch of n entries. Returns 1 when the keys
 * were in order already. */
static int radix_sort(int64_t n, uint64_t *key, int64_t *pos, uint64_t *kt, int64_t *pt)
{
    uint64_t maxkey = 0;
    bool sorted = true;
    for (int64_t i = 0; i < n; i++) {
        maxkey = key[i] > maxkey ? key[i] : maxkey;
        sorted = sorted && (i == 0 || key[i - 1] <= key[i]);
    }
    if (sorted)
        return 1;
    int bits = 64 - __builtin_clzll(maxkey);
    int passes = (bits + RADIX_MAX_BITS - 1) / RADIX_MAX_BITS;
    int width = (bits + passes - 1) / passes;
    int nt = sparse_threads(n);
    int64_t *hist = malloc((size_t)nt * RADIX_BUCKETS * sizeof *hist);
    if (!hist)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "sparse: out of host memory sorting %lld "
                                                      "indices", (long long)n);
    uint64_t *k0 = key, *k1 = kt;
    int64_t *p0 = pos, *p1 = pt;
    for (int shift = 0; shift < bits; shift += width) {
        if (!radix_pass(n, k0, p0, k1, p1, shift, ((uint64_t)1 << width) - 1, hist, nt))
            continue;
        uint64_t *kx = k0;
        k0 = k1;
        k1 = kx;
        int64_t *px = p0;
        p0 = p1;
        p1 = px;
    }
    if (k0 != key) {
        memcpy(key, k0, (size_t)n * sizeof *key);
        memcpy(pos, p0, (size_t)n * sizeof *pos);
    }
    free(hist);
    return 0;
}

int sparse_sort_keys(int64_t n, uint64_t *keys, int64_t *perm)
{
    if (n < 2)
        return 1;
    uint64_t *kt = sparse_scratch(n, sizeof *kt);
    int64_t *pt = sparse_scratch(n, sizeof *pt);
    if (!kt || !pt)
        return weft_error_code();
    return radix_sort(n, keys, perm, kt, pt);
}

int sparse_sort_tuples(const int64_t *idx, int ndim, int64_t nnz, const int64_t *size,
                       int64_t *perm)
{
    for (int64_t k = 0; k < nnz; k++)
        perm[k] = k;
    if (nnz < 2)
        return 0;
    uint64_t *key = sparse_scratch(nnz, sizeof *key);
    uint64_t *kt = sparse_scratch(nnz, sizeof *kt);
    int64_t *pt = sparse_scratch(nnz, sizeof *pt);
    if (!key || !kt || !pt)
        return weft_error_code();
    if (sparse_linear_keys(idx, ndim, nnz, size, (int64_t *)key))
        return radix_sort(nnz, key, perm, kt, pt) < 0 ? weft_error_code() : 0;
    /* The shape has more elements than int64 counts: one stable pass per dim, the last
     * dim first, sorts the tuples lexicographically. */
    for (int d = ndim - 1; d >= 0; d--) {
        const int64_t *row = idx + (size_t)d * (size_t)nnz;
        for (int64_t k = 0; k < nnz; k++)
            key[k] = (uint64_t)row[perm[k]];
        if (radix_sort(nnz, key, perm, kt, pt) < 0)
            return weft_error_code();
    }
    return 0;
}

/* ---- constructors ---------------------------------------------------------------------------- */

/* What a sparse tensor keeps of a user's component: the tensor itself when contiguous (so
 * they share data, as in PyTorch), else a contiguous copy; never its autograd history
 * (the sparse tensor's own node stands for it). */
static weft_tensor *component(const weft_tensor *t)
{
    weft_tensor *c = weft_contiguous((weft_tensor *)t);
    return c && weft_requires_grad(c) ? weft_detach(c) : c;
}

static int require_strided_input(const weft_tensor *t, const char *fn, const char *what)
{
    if (t->layout == WEFT_LAYOUT_STRIDED)
        return 0;
    return weft_error_set(WEFT_ERR_RUNTIME, "%s(): expected %s to be a strided tensor, but got "
                                            "layout %s",
                          fn, what, weft_layout_name(t->layout));
}

static int check_values_1d(const weft_tensor *values)
{
    if (values->ndim == 1)
        return 0;
    if (values->ndim == 0)
        return weft_error_set(WEFT_ERR_RUNTIME, "values must have dimensionality > sum of batch "
                                                "and block dimensionalities (=0 + 0) but got 0");
    return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED,
                          "values must be a 1-D tensor of nnz elements, but got %d dims (hybrid "
                          "sparse tensors with dense dimensions are not supported)",
                          values->ndim);
}

static int coo_check_args(const weft_tensor *indices, const weft_tensor *values, int ndim,
                          const int64_t *size)
{
    char a[160], b[160];
    if (require_strided_input(indices, "sparse_coo_tensor", "indices") ||
        require_strided_input(values, "sparse_coo_tensor", "values"))
        return weft_error_code();
    if (indices->dtype != WEFT_I64)
        return weft_error_set(WEFT_ERR_RUNTIME, "indices must be an int64 tensor");
    if (indices->ndim != 2)
        return weft_error_set(WEFT_ERR_RUNTIME, "indices must be sparse_dim x nnz, but got: %s",
                              weft_shape_str(indices->ndim, indices->shape, a, sizeof a));
    if (check_values_1d(values) != 0)
        return weft_error_code();
    if (indices->shape[1] != values->shape[0])
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "indices and values must have same nnz, but got nnz from indices: "
                              "%lld, nnz from values: %lld",
                              (long long)indices->shape[1], (long long)values->shape[0]);
    int64_t sparse_dim = indices->shape[0];
    if (size && ndim != sparse_dim)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "number of dimensions must be sparse_dim (%lld) + dense_dim (0), "
                              "but got %d",
                              (long long)sparse_dim, ndim);
    if (sparse_dim < 1 || sparse_dim > WEFT_MAX_DIMS)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "sparse_coo_tensor(): indices must have 1 to %d rows (one per "
                              "dim), but got %lld",
                              WEFT_MAX_DIMS, (long long)sparse_dim);
    if (!weft_device_equal(indices->device, values->device))
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "device of indices (=%s) must match device of values (=%s)",
                              dev_str(indices->device, a, sizeof a),
                              dev_str(values->device, b, sizeof b));
    return 0;
}

weft_tensor *sparse_api_coo_tensor(const weft_tensor *indices, const weft_tensor *values,
                                   int ndim, const int64_t *size, bool check)
{
    if (!indices || !values)
        return NULL;
    if (coo_check_args(indices, values, ndim, size) != 0)
        return NULL;
    bool record = weft_autograd_needed(1, (weft_tensor *const *)&values);
    struct sparse_frame f = sparse_begin();
    weft_tensor *out = NULL;
    int sd = (int)indices->shape[0];
    int64_t nnz = indices->shape[1], shape[WEFT_MAX_DIMS];
    if (size)
        memcpy(shape, size, (size_t)sd * sizeof *shape);
    if (check || !size) {
        const int64_t *idx;
        if (!sparse_host_i64(indices, &idx) ||
            sparse_check_coo_indices(idx, sd, nnz, size && check ? size : NULL) != 0)
            goto done;
        if (!size) {
            int64_t lo[WEFT_MAX_DIMS], hi[WEFT_MAX_DIMS];
            if (nnz > 0)
                index_extent(idx, sd, nnz, lo, hi);
            for (int d = 0; d < sd; d++)
                shape[d] = nnz > 0 ? hi[d] + 1 : 0;
        }
    }
    weft_tensor *ci = component(indices), *cv = component(values);
    out = sparse_make_coo(weft_tensor_retain(ci), weft_tensor_retain(cv), sd, shape, nnz <= 1);
    if (out && record && sparse_grad_constructor(out, values) != 0)
        out = NULL;
done:
    return sparse_end(f, out);
}

static int csr_check_args(const weft_tensor *crow, const weft_tensor *col,
                          const weft_tensor *values, const int64_t *size)
{
    char a[160], b[160];
    if (require_strided_input(crow, "sparse_csr_tensor", "crow_indices") ||
        require_strided_input(col, "sparse_csr_tensor", "col_indices") ||
        require_strided_input(values, "sparse_csr_tensor", "values"))
        return weft_error_code();
    if (crow->dtype != col->dtype)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "crow_indices and col_indices must have the same dtype, bot got %s "
                              "and %s, respectively",
                              weft_dtype_torch_name(crow->dtype), weft_dtype_torch_name(col->dtype));
    if (crow->dtype != WEFT_I32 && crow->dtype != WEFT_I64)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "crow_indices and col_indices dtype must be Int or Long, but got %s",
                              weft_dtype_torch_name(crow->dtype));
    if (crow->ndim != col->ndim)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "crow_indices and col_indices dimensionalities must be equal but got "
                              "%d and %d, respectively",
                              crow->ndim, col->ndim);
    if (crow->ndim != 1)
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED,
                              "crow_indices and col_indices must be 1-D, but got %d dims (batched "
                              "sparse CSR tensors are not supported)",
                              crow->ndim);
    if (check_values_1d(values) != 0)
        return weft_error_code();
    if (size && crow->shape[0] != size[0] + 1)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "crow_indices.shape[-1] must be equal to the number of rows + 1 "
                              "(=%lld), but got %lld",
                              (long long)size[0] + 1, (long long)crow->shape[0]);
    if (crow->shape[0] < 1)
        return weft_error_set(WEFT_ERR_RUNTIME, "crow_indices.shape[-1] must be the number of "
                                                "rows + 1 (at least 1), but got 0");
    if (col->shape[0] != values->shape[0])
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "col_indices.shape[-1] must be equal to nnz (=%lld) as defined by "
                              "values.shape[0], but got %lld",
                              (long long)values->shape[0], (long long)col->shape[0]);
    const weft_tensor *idx[2] = {crow, col};
    const char *names[2] = {"crow_indices", "col_indices"};
    for (int i = 0; i < 2; i++)
        if (!weft_device_equal(idx[i]->device, values->device))
            return weft_error_set(WEFT_ERR_RUNTIME,
                                  "device of %s (=%s) must match device of values (=%s)", names[i],
                                  dev_str(idx[i]->device, a, sizeof a),
                                  dev_str(values->device, b, sizeof b));
    return 0;
}

weft_tensor *sparse_api_csr_tensor(const weft_tensor *crow, const weft_tensor *col,
                                   const weft_tensor *values, const int64_t *size, bool check)
{
    if (!crow || !col || !values)
        return NULL;
    if (csr_check_args(crow, col, values, size) != 0)
        return NULL;
    bool record = weft_autograd_needed(1, (weft_tensor *const *)&values);
    struct sparse_frame f = sparse_begin();
    weft_tensor *out = NULL;
    int64_t nnz = values->shape[0];
    int64_t shape[2] = {crow->shape[0] - 1, size ? size[1] : 0};
    if (check || !size) {
        const int64_t *c, *k;
        if (!sparse_host_i64(crow, &c) || !sparse_host_i64(col, &k))
            goto done;
        if (!size && nnz > 0) {
            int64_t lo, hi;
            index_extent(k, 1, nnz, &lo, &hi);
            if (lo < 0) {
                weft_error_set(WEFT_ERR_RUNTIME, "`0 <= col_indices < ncols` is not satisfied.");
                goto done;
            }
            shape[1] = hi + 1;
        }
        if (check && sparse_check_csr_indices(c, k, shape[0], shape[1], nnz, true) != 0)
            goto done;
    }
    weft_tensor *cc = component(crow), *ck = component(col), *cv = component(values);
    out = sparse_make_csr(weft_tensor_retain(cc), weft_tensor_retain(ck), weft_tensor_retain(cv),
                          shape);
    if (out && record && sparse_grad_constructor(out, values) != 0)
        out = NULL;
done:
    return sparse_end(f, out);
}

/* ---- accessors ---------------------------------------------------------------------------- */

static weft_tensor *share(weft_tensor *component)
{
    return weft_autorelease_shared(component);
}

static struct sparse_data *coalesced_coo(const weft_tensor *t, const char *what, const char *fn)
{
    struct sparse_data *s = sparse_data_of(t, sparse_coo_layout, fn);
    if (s && !s->coalesced) {
        weft_error_set(WEFT_ERR_RUNTIME,
                       "Cannot get %s on an uncoalesced tensor, please call .coalesce() first",
                       what);
        return NULL;
    }
    return s;
}

weft_tensor *sparse_api_indices(const weft_tensor *t)
{
    struct sparse_data *s = t ? coalesced_coo(t, "indices", "indices()") : NULL;
    return s ? share(s->indices) : NULL;
}

weft_tensor *sparse_api_values(const weft_tensor *t)
{
    if (!t)
        return NULL;
    if (t->layout == sparse_csr_layout) {
        struct sparse_data *s = sparse_data_of(t, sparse_csr_layout, "values()");
        return s ? share(s->values) : NULL;
    }
    struct sparse_data *s = coalesced_coo(t, "values", "values()");
    return s ? share(s->values) : NULL;
}

weft_tensor *sparse_api_indices_raw(const weft_tensor *t)
{
    struct sparse_data *s = sparse_data_of(t, sparse_coo_layout, "_indices()");
    return s ? share(s->indices) : NULL;
}

weft_tensor *sparse_api_values_raw(const weft_tensor *t)
{
    struct sparse_data *s = sparse_data_of(t, sparse_coo_layout, "_values()");
    return s ? share(s->values) : NULL;
}

weft_tensor *sparse_api_crow_indices(const weft_tensor *t)
{
    struct sparse_data *s = sparse_data_of(t, sparse_csr_layout, "crow_indices()");
    return s ? share(s->crow) : NULL;
}

weft_tensor *sparse_api_col_indices(const weft_tensor *t)
{
    struct sparse_data *s = sparse_data_of(t, sparse_csr_layout, "col_indices()");
    return s ? share(s->col) : NULL;
}

bool sparse_api_is_coalesced(const weft_tensor *t)
{
    struct sparse_data *s = t ? sparse_data_of(t, -1, "is_coalesced()") : NULL;
    return s && s->coalesced;
}

/* ---- coalesce ------------------------------------------------------------------------------- */

static bool same_tuple(const int64_t *idx, int ndim, int64_t nnz, int64_t a, int64_t b)
{
    for (int d = 0; d < ndim; d++)
        if (idx[(size_t)d * (size_t)nnz + (size_t)a] != idx[(size_t)d * (size_t)nnz + (size_t)b])
            return false;
    return true;
}

/* The order of the entries (perm) and where each run of equal tuples starts (starts,
 * nseg of them, then nnz). With linear keys the runs come from the sorted keys, which
 * also give each run's tuple back (keys holds them sorted); without, from comparing
 * tuples. Returns 1 when the entries were sorted and distinct already. */
static int sort_and_split(const weft_tensor *t, const int64_t *idx, int64_t nnz, int64_t *perm,
                          uint64_t *keys, bool *linear, int64_t *starts, int64_t *nseg)
{
    int nd = t->ndim;
    for (int64_t k = 0; k < nnz; k++)
        perm[k] = k;
    *linear = sparse_linear_keys(idx, nd, nnz, t->shape, (int64_t *)keys);
    int rc = *linear ? sparse_sort_keys(nnz, keys, perm)
                     : sparse_sort_tuples(idx, nd, nnz, t->shape, perm);
    if (rc < 0)
        return rc;
    int64_t n = 0;
    for (int64_t k = 0; k < nnz; k++) {
        bool same = k > 0 && (*linear ? keys[k] == keys[k - 1]
                                      : same_tuple(idx, nd, nnz, perm[k], perm[k - 1]));
        if (!same)
            starts[n++] = k;
    }
    starts[n] = nnz;
    *nseg = n;
    return rc == 1 && n == nnz;
}

weft_tensor *sparse_coalesce_nograd(const weft_tensor *t)
{
    struct sparse_data *s = sparse_data_of(t, -1, "coalesce()");
    if (!s)
        return NULL;
    if (s->coalesced)
        return share((weft_tensor *)t);
    int nd = t->ndim;
    int64_t nnz = sparse_nnz(s), nseg;
    const int64_t *idx;
    const weft_tensor *vh = weft_to_device(s->values, WEFT_CPU);
    int64_t *perm = sparse_scratch(nnz + 1, sizeof *perm);
    int64_t *starts = sparse_scratch(nnz + 1, sizeof *starts);
    uint64_t *keys = sparse_scratch(nnz + 1, sizeof *keys);
    bool linear;
    if (!vh || !perm || !starts || !keys || !sparse_host_i64(s->indices, &idx))
        return NULL;
    int rc = sort_and_split(t, idx, nnz, perm, keys, &linear, starts, &nseg);
    if (rc < 0)
        return NULL;
    if (rc == 1) /* in order already: the same components, now known to be coalesced */
        return sparse_make_coo(weft_tensor_retain(s->indices), weft_tensor_retain(s->values), nd,
                               t->shape, true);
    int64_t ishape[2] = {nd, nseg};
    int64_t *oi;
    void *ov;
    weft_tensor *ni = sparse_new_host(2, ishape, WEFT_I64, (void **)&oi);
    weft_tensor *nv = sparse_new_host(1, &nseg, t->dtype, &ov);
    if (!ni || !nv)
        return NULL;
    /* Each run's tuple: unravelled from its key (sequential), else gathered. */
#pragma omp parallel for schedule(static) if (nseg >= SPARSE_PARALLEL_GRAIN)
    for (int64_t g = 0; g < nseg; g++) {
        if (linear) {
            uint64_t rest = keys[starts[g]];
            for (int d = nd - 1; d >= 0; d--) {
                uint64_t size = (uint64_t)t->shape[d];
                oi[(size_t)d * (size_t)nseg + (size_t)g] = (int64_t)(size ? rest % size : 0);
                rest = size ? rest / size : 0;
            }
        } else {
            for (int d = 0; d < nd; d++)
                oi[(size_t)d * (size_t)nseg + (size_t)g] =
                    idx[(size_t)d * (size_t)nnz + (size_t)perm[starts[g]]];
        }
    }
    sparse_segment_sum(t->dtype, weft_tensor_data(vh), perm, starts, nseg, ov);
    return sparse_make_coo(weft_tensor_retain(weft_to_device(ni, t->device)),
                           weft_tensor_retain(weft_to_device(nv, t->device)), nd, t->shape, true);
}

weft_tensor *sparse_api_coalesce(const weft_tensor *t)
{
    struct sparse_data *s = t ? sparse_data_of(t, -1, "coalesce()") : NULL;
    if (!s)
        return NULL;
    if (s->coalesced)
        return share((weft_tensor *)t);
    bool record = weft_autograd_needed(1, (weft_tensor *const *)&t);
    struct sparse_frame f = sparse_begin();
    weft_tensor *out = sparse_coalesce_nograd(t);
    if (out && record &&
        sparse_grad_linear("CoalesceBackward0", out, 1, &t, (const double[]){1.0}) != 0)
        out = NULL;
    return sparse_end(f, out);
}
