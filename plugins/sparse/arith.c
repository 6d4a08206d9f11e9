/* plugins/sparse/arith.c: arithmetic on sparse tensors: torch.add(a, b, alpha=) of two
 * sparse tensors, torch.mul(sparse, scalar), and torch.sparse.sum with and without a dim.
 *
 * add follows PyTorch's CPU kernels: two coalesced COO tensors merge into a coalesced
 * result (entries present in both are added); otherwise the entries are concatenated and
 * the result is uncoalesced. Two CSR tensors merge row by row into a sorted CSR. Explicit
 * zeros are kept, as PyTorch keeps them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <weft.h>

#include "sparse_impl.h"

/* ---- values: out[k] = a[ia[k]] + alpha * b[ib[k]], a missing side (index -1) being 0 ------ */

#define DEFINE_COMBINE(name, id, T, C)                                                        \
    static void combine_##name(const void *a, const int64_t *ia, const void *b,              \
                               const int64_t *ib, double alpha, int64_t n, void *dst)        \
    {                                                                                         \
        const T *pa = a, *pb = b;                                                             \
        T *d = dst;                                                                           \
        C scale = (C)alpha;                                                                   \
        _Pragma("omp parallel for schedule(static) if (n >= SPARSE_PARALLEL_GRAIN)")          \
        for (int64_t k = 0; k < n; k++) {                                                     \
            C x = ia[k] >= 0 ? weft_load_##name(pa + ia[k]) : (C)0;                         \
            C y = ib[k] >= 0 ? weft_load_##name(pb + ib[k]) : (C)0;                         \
            weft_store_##name(d + k, (C)(x + scale * y));                                   \
        }                                                                                     \
    }
WEFT_FOR_ALL_DTYPES(DEFINE_COMBINE)
#undef DEFINE_COMBINE

typedef void (*combine_fn)(const void *, const int64_t *, const void *, const int64_t *, double,
                           int64_t, void *);

static combine_fn combine_for(enum weft_dtype dt)
{
    switch (dt) {
#define CASE(name, id, T, C)                                                                  \
    case id:                                                                                  \
        return combine_##name;
        WEFT_FOR_ALL_DTYPES(CASE)
#undef CASE
    default:
        return NULL;
    }
}

/* The combined values on the host, moved to dev. */
static weft_tensor *combine_values(const weft_tensor *va, const int64_t *ia, const weft_tensor *vb,
                                   const int64_t *ib, double alpha, int64_t n, weft_device dev)
{
    const weft_tensor *ha = weft_to_device((weft_tensor *)va, WEFT_CPU);
    const weft_tensor *hb = weft_to_device((weft_tensor *)vb, WEFT_CPU);
    void *out;
    weft_tensor *h = sparse_new_host(1, &n, va->dtype, &out);
    if (!ha || !hb || !h)
        return NULL;
    if (n > 0)
        combine_for(va->dtype)(weft_tensor_data(ha), ia, weft_tensor_data(hb), ib, alpha, n, out);
    return weft_to_device(h, dev);
}

/* ---- add ------------------------------------------------------------------------------------ */

static int add_check(const weft_tensor *a, const weft_tensor *b, double alpha)
{
    char x[160], y[160];
    if (!weft_tensor_is_sparse(a) || !weft_tensor_is_sparse(b)) {
        if (weft_tensor_is_sparse(a))
            return weft_error_set(WEFT_ERR_RUNTIME, "add(sparse, dense) is not supported. Use "
                                                    "add(dense, sparse) instead.");
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "add(): expected two sparse tensors, but got layouts %s and %s "
                              "(convert with weft_sparse_to_dense or weft_to_sparse_coo first)",
                              weft_layout_name(a->layout), weft_layout_name(b->layout));
    }
    if (a->layout != b->layout)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "add(): expected both tensors to have the same layout, but got %s "
                              "and %s",
                              weft_layout_name(a->layout), weft_layout_name(b->layout));
    if (!sparse_data_of(a, -1, "add()") || !sparse_data_of(b, -1, "add()"))
        return weft_error_code();
    if (a->ndim != b->ndim || memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof *a->shape) != 0) {
        weft_shape_str(a->ndim, a->shape, x, sizeof x);
        weft_shape_str(b->ndim, b->shape, y, sizeof y);
        if (a->layout == sparse_coo_layout)
            return weft_error_set(WEFT_ERR_RUNTIME,
                                  "add: expected sizes of 'self' and 'other' to match, but %s != %s",
                                  x, y);
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "torch.add: Expected input tensors to have the same shape, but got "
                              "tensor `self` with shape %s and tensor `other` with shape %s",
                              x, y);
    }
    if (a->dtype != b->dtype)
        return weft_error_set(WEFT_ERR_TYPE,
                              "add(): expected both sparse tensors to have the same dtype, but got "
                              "%s and %s",
                              weft_dtype_torch_name(a->dtype), weft_dtype_torch_name(b->dtype));
    if (!weft_device_equal(a->device, b->device))
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "Expected all tensors to be on the same device, but found at least "
                              "two devices, %s and %s!",
                              weft_device_str(a->device, x, sizeof x),
                              weft_device_str(b->device, y, sizeof y));
    if (!weft_dtype_is_floating(a->dtype) && alpha != floor(alpha))
        return weft_error_set(WEFT_ERR_RUNTIME, "For integral input tensors, argument alpha must "
                                                "not be a floating point number.");
    return 0;
}

static int cmp_tuple(const int64_t *ia, int64_t na, int64_t p, const int64_t *ib, int64_t nb,
                     int64_t q, int nd)
{
    for (int d = 0; d < nd; d++) {
        int64_t x = ia[(size_t)d * (size_t)na + (size_t)p], y = ib[(size_t)d * (size_t)nb + (size_t)q];
        if (x != y)
            return x < y ? -1 : 1;
    }
    return 0;
}

/* Entries of a and b (both coalesced) in order: src_a/src_b say where each came from. */
static int64_t merge_sorted(const int64_t *ia, int64_t na, const int64_t *ib, int64_t nb, int nd,
                            int64_t *src_a, int64_t *src_b)
{
    int64_t p = 0, q = 0, n = 0;
    while (p < na || q < nb) {
        int c = p >= na ? 1 : q >= nb ? -1 : cmp_tuple(ia, na, p, ib, nb, q, nd);
        src_a[n] = c <= 0 ? p++ : -1;
        src_b[n] = c >= 0 ? q++ : -1;
        n++;
    }
    return n;
}

static weft_tensor *coo_add(const weft_tensor *a, const weft_tensor *b, double alpha)
{
    const struct sparse_data *sa = a->layout_data, *sb = b->layout_data;
    int nd = a->ndim;
    int64_t na = sparse_nnz(sa), nb = sparse_nnz(sb), cap = na + nb;
    bool merge = sa->coalesced && sb->coalesced;
    const int64_t *ia, *ib;
    if (!sparse_host_i64(sa->indices, &ia) || !sparse_host_i64(sb->indices, &ib))
        return NULL;
    int64_t *src_a = sparse_scratch(cap, sizeof *src_a);
    int64_t *src_b = sparse_scratch(cap, sizeof *src_b);
    if (!src_a || !src_b)
        return NULL;
    int64_t n = cap;
    if (merge) {
        n = merge_sorted(ia, na, ib, nb, nd, src_a, src_b);
    } else {
        for (int64_t k = 0; k < cap; k++) {
            src_a[k] = k < na ? k : -1;
            src_b[k] = k < na ? -1 : k - na;
        }
    }
    int64_t ishape[2] = {nd, n}, *oi;
    weft_tensor *hi = sparse_new_host(2, ishape, WEFT_I64, (void **)&oi);
    if (!hi)
        return NULL;
    for (int d = 0; d < nd; d++)
        for (int64_t k = 0; k < n; k++)
            oi[(size_t)d * (size_t)n + (size_t)k] =
                src_a[k] >= 0 ? ia[(size_t)d * (size_t)na + (size_t)src_a[k]]
                              : ib[(size_t)d * (size_t)nb + (size_t)src_b[k]];
    weft_tensor *v = combine_values(sa->values, src_a, sb->values, src_b, alpha, n, a->device);
    return sparse_make_coo(weft_tensor_retain(weft_to_device(hi, a->device)),
                           weft_tensor_retain(v), nd, a->shape, merge || n <= 1);
}

/* Merges row r of a and b (columns sorted) into out[at...]; returns the count. With out
 * NULL it only counts. */
static int64_t merge_row(const int64_t *ca, int64_t pa, int64_t ea, const int64_t *cb, int64_t pb,
                         int64_t eb, int64_t *col, int64_t *src_a, int64_t *src_b)
{
    int64_t n = 0;
    while (pa < ea || pb < eb) {
        int c = pa >= ea ? 1 : pb >= eb ? -1 : ca[pa] < cb[pb] ? -1 : ca[pa] > cb[pb] ? 1 : 0;
        if (col) {
            col[n] = c <= 0 ? ca[pa] : cb[pb];
            src_a[n] = c <= 0 ? pa : -1;
            src_b[n] = c >= 0 ? pb : -1;
        }
        pa += c <= 0;
        pb += c >= 0;
        n++;
    }
    return n;
}

static weft_tensor *csr_add(const weft_tensor *a, const weft_tensor *b, double alpha)
{
    const struct sparse_data *sa = a->layout_data, *sb = b->layout_data;
    int64_t rows = a->shape[0], cols = a->shape[1], na = sparse_nnz(sa), nb = sparse_nnz(sb);
    const int64_t *ra, *ca, *rb, *cb;
    if (!sparse_host_i64(sa->crow, &ra) || !sparse_host_i64(sa->col, &ca) ||
        !sparse_host_i64(sb->crow, &rb) || !sparse_host_i64(sb->col, &cb) ||
        sparse_check_csr_indices(ra, ca, rows, cols, na, false) != 0 ||
        sparse_check_csr_indices(rb, cb, rows, cols, nb, false) != 0)
        return NULL;
    int64_t nrow1 = rows + 1, *crow;
    weft_tensor *tc = sparse_new_host(1, &nrow1, WEFT_I64, (void **)&crow);
    if (!tc)
        return NULL;
    crow[0] = 0;
#pragma omp parallel for schedule(dynamic, 256) if (na + nb >= SPARSE_PARALLEL_GRAIN)
    for (int64_t r = 0; r < rows; r++)
        crow[r + 1] = merge_row(ca, ra[r], ra[r + 1], cb, rb[r], rb[r + 1], NULL, NULL, NULL);
    for (int64_t r = 0; r < rows; r++)
        crow[r + 1] += crow[r];
    int64_t n = crow[rows], *col;
    weft_tensor *tk = sparse_new_host(1, &n, WEFT_I64, (void **)&col);
    int64_t *src_a = sparse_scratch(n, sizeof *src_a);
    int64_t *src_b = sparse_scratch(n, sizeof *src_b);
    if (!tk || !src_a || !src_b)
        return NULL;
#pragma omp parallel for schedule(dynamic, 256) if (n >= SPARSE_PARALLEL_GRAIN)
    for (int64_t r = 0; r < rows; r++)
        merge_row(ca, ra[r], ra[r + 1], cb, rb[r], rb[r + 1], col + crow[r], src_a + crow[r],
                  src_b + crow[r]);
    weft_tensor *v = combine_values(sa->values, src_a, sb->values, src_b, alpha, n, a->device);
    /* int32 indices stay int32 when both inputs had them and the result fits. */
    enum weft_dtype it = sa->crow->dtype == WEFT_I32 && sb->crow->dtype == WEFT_I32 &&
                                 n <= INT32_MAX && cols <= INT32_MAX
                             ? WEFT_I32
                             : WEFT_I64;
    return sparse_make_csr(weft_tensor_retain(weft_to(tc, a->device, it, false)),
                           weft_tensor_retain(weft_to(tk, a->device, it, false)),
                           weft_tensor_retain(v), a->shape);
}

weft_tensor *sparse_api_add(const weft_tensor *a, const weft_tensor *b, double alpha)
{
    if (!a || !b)
        return NULL;
    if (add_check(a, b, alpha) != 0)
        return NULL;
    const weft_tensor *in[2] = {a, b};
    bool record = weft_autograd_needed(2, (weft_tensor *const *)in);
    struct sparse_frame f = sparse_begin();
    weft_tensor *out = a->layout == sparse_coo_layout ? coo_add(a, b, alpha)
                                                           : csr_add(a, b, alpha);
    double scales[2] = {1.0, alpha};
    if (out && record && sparse_grad_linear("AddBackward0", out, 2, in, scales) != 0)
        out = NULL;
    return sparse_end(f, out);
}

/* ---- mul by a scalar ----------------------------------------------------------------------- */

weft_tensor *sparse_mul_scalar_nograd(const weft_tensor *t, double scalar)
{
    struct sparse_data *s = sparse_data_of(t, -1, "mul()");
    if (!s)
        return NULL;
    /* The values are scaled where they live (an elementwise op every backend has); the
     * pattern is shared. */
    weft_tensor *v = weft_mul_scalar(s->values, scalar);
    if (!v)
        return NULL;
    if (t->layout == sparse_coo_layout)
        return sparse_make_coo(weft_tensor_retain(s->indices), weft_tensor_retain(v), t->ndim,
                               t->shape, s->coalesced);
    return sparse_make_csr(weft_tensor_retain(s->crow), weft_tensor_retain(s->col),
                           weft_tensor_retain(v), t->shape);
}

weft_tensor *sparse_api_mul_scalar(const weft_tensor *t, double scalar)
{
    if (!t || !sparse_data_of(t, -1, "mul()"))
        return NULL;
    bool record = weft_autograd_needed(1, (weft_tensor *const *)&t);
    struct sparse_frame f = sparse_begin();
    weft_tensor *out = sparse_mul_scalar_nograd(t, scalar);
    if (out && record && sparse_grad_linear("MulBackward0", out, 1, &t, &scalar) != 0)
        out = NULL;
    return sparse_end(f, out);
}

/* ---- sums ----------------------------------------------------------------------------------- */

/* Sum of every value (duplicates counted), a 0-dim tensor on t's device; on the host when
 * the device has no sum kernel. Integers sum to int64, as torch.sum. */
static weft_tensor *sum_values(const weft_tensor *t, const struct sparse_data *s)
{
    weft_tensor *v = s->values;
    bool here = weft_kernel_lookup(WEFT_OP_SUM, v->device.type, WEFT_LAYOUT_STRIDED, v->dtype);
    if (here)
        return weft_sum(v, 0, NULL, false);
    return weft_to_device(weft_sum(weft_to_device(v, WEFT_CPU), 0, NULL, false), t->device);
}

weft_tensor *sparse_api_sum(const weft_tensor *t)
{
    struct sparse_data *s = t ? sparse_data_of(t, -1, "sum()") : NULL;
    if (!s)
        return NULL;
    bool record = weft_autograd_needed(1, (weft_tensor *const *)&t);
    struct sparse_frame f = sparse_begin();
    weft_tensor *out = sum_values(t, s);
    if (out && record && sparse_grad_sum(out, t, -1) != 0)
        out = NULL;
    return sparse_end(f, out);
}

/* COO over the other dims: the dim's index row dropped, then coalesced (duplicates, which
 * now abound, summed in t's dtype, as torch.sparse.sum). */
static weft_tensor *sum_dim_coo(const weft_tensor *t, int dim)
{
    const weft_tensor *c = sparse_to_coo_nograd(t);
    if (!c)
        return NULL;
    const struct sparse_data *s = c->layout_data;
    int nd = t->ndim;
    int64_t nnz = sparse_nnz(s), ishape[2] = {nd - 1, nnz}, shape[WEFT_MAX_DIMS], *oi;
    const int64_t *idx;
    weft_tensor *h = sparse_new_host(2, ishape, WEFT_I64, (void **)&oi);
    if (!h || !sparse_host_i64(s->indices, &idx))
        return NULL;
    for (int d = 0, o = 0; d < nd; d++) {
        if (d == dim)
            continue;
        shape[o] = t->shape[d];
        if (nnz > 0)
            memcpy(oi + (size_t)o * (size_t)nnz, idx + (size_t)d * (size_t)nnz,
                   (size_t)nnz * sizeof *oi);
        o++;
    }
    weft_tensor *u = sparse_make_coo(weft_tensor_retain(weft_to_device(h, t->device)),
                                     weft_tensor_retain(s->values), nd - 1, shape, nnz <= 1);
    return sparse_coalesce_nograd(u);
}

weft_tensor *sparse_api_sum_dim(const weft_tensor *t, int dim)
{
    struct sparse_data *s = t ? sparse_data_of(t, -1, "sum()") : NULL;
    if (!s)
        return NULL;
    int d = weft_normalize_dim(dim, t->ndim);
    if (d < 0)
        return NULL;
    bool record = weft_autograd_needed(1, (weft_tensor *const *)&t);
    struct sparse_frame f = sparse_begin();
    weft_tensor *out = t->ndim == 1 ? sum_values(t, s) : sum_dim_coo(t, d);
    if (out && record && sparse_grad_sum(out, t, d) != 0)
        out = NULL;
    return sparse_end(f, out);
}
