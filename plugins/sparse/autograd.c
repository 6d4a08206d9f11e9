/* plugins/sparse/autograd.c: the backward nodes of the sparse ops, PyTorch's names.
 *
 * A sparse tensor's history is on the sparse tensor itself (its components never carry
 * any), so gradients flowing between these nodes are sparse tensors of the forward
 * output's shape, read in one of two ways:
 *   - per entry: a sparse gradient whose index tensors are the very objects of the
 *     forward output's (what ToDenseBackward0, the sums and the mm backward make) holds
 *     the gradient of each stored value, duplicates included: its values are used as
 *     they are;
 *   - dense: any other gradient stands for its dense form (duplicates summed); a node
 *     takes its elements at the output's positions (0 where it has none), as torch's
 *     sparse_mask, and a dense gradient likewise.
 * The two agree wherever an output has no duplicate positions (coalesced COO, CSR). */
#include <stdlib.h>
#include <string.h>

#include <weft.h>

#include "sparse_impl.h"

/* ---- the values of a gradient at given positions ------------------------------------------ */

static int cmp_query(const int64_t *gi, int64_t ng, int64_t p, const int64_t *q, int64_t nq,
                     int64_t k, int nd)
{
    for (int d = 0; d < nd; d++) {
        int64_t x = gi[(size_t)d * (size_t)ng + (size_t)p], y = q[(size_t)d * (size_t)nq + (size_t)k];
        if (x != y)
            return x < y ? -1 : 1;
    }
    return 0;
}

/* For each query k the entry of coalesced g's indices gi [nd, ng] that equals it, or ng. */
static int find_entries(const int64_t *gi, int64_t ng, const int64_t *idx, int nd, int64_t n,
                        const int64_t *shape, int64_t *pos)
{
    int64_t *gk = sparse_scratch(ng, sizeof *gk);
    int64_t *qk = sparse_scratch(n, sizeof *qk);
    if (!gk || !qk)
        return weft_error_code();
    bool linear = sparse_linear_keys(gi, nd, ng, shape, gk) &&
                  sparse_linear_keys(idx, nd, n, shape, qk);
#pragma omp parallel for schedule(static) if (n >= SPARSE_PARALLEL_GRAIN)
    for (int64_t k = 0; k < n; k++) {
        int64_t lo = 0, hi = ng; /* first entry >= query */
        while (lo < hi) {
            int64_t mid = lo + (hi - lo) / 2;
            int c = linear ? (gk[mid] < qk[k] ? -1 : gk[mid] > qk[k])
                           : cmp_query(gi, ng, mid, idx, n, k, nd);
            if (c < 0)
                lo = mid + 1;
            else
                hi = mid;
        }
        bool hit = lo < ng && (linear ? gk[lo] == qk[k] : cmp_query(gi, ng, lo, idx, n, k, nd) == 0);
        pos[k] = hit ? lo : ng;
    }
    return 0;
}

static weft_tensor *sparse_values_at_sparse(const weft_tensor *g, const int64_t *idx, int nd,
                                            int64_t n)
{
    const weft_tensor *c = sparse_coalesce_nograd(sparse_to_coo_nograd(g));
    if (!c)
        return NULL;
    const struct sparse_data *s = c->layout_data;
    int64_t ng = sparse_nnz(s), ng1 = ng + 1;
    const int64_t *gi = NULL;
    /* g's values with one zero after them: a query g does not have reads that one. */
    void *pv;
    weft_tensor *padded = sparse_new_host(1, &ng1, g->dtype, &pv);
    const weft_tensor *gv = weft_to_device(s->values, WEFT_CPU);
    if (!padded || !gv || (ng > 0 && !sparse_host_i64(s->indices, &gi)))
        return NULL;
    size_t is = weft_dtype_size(g->dtype);
    if (ng > 0)
        memcpy(pv, weft_tensor_data(gv), (size_t)ng * is);
    memset((char *)pv + (size_t)ng * is, 0, is);
    void *ov;
    weft_tensor *out = sparse_new_host(1, &n, g->dtype, &ov);
    int64_t *pos = sparse_scratch(n, sizeof *pos);
    if (!out || !pos || find_entries(gi, ng, idx, nd, n, g->shape, pos) != 0)
        return NULL;
    sparse_gather(is, pv, pos, n, ov);
    return out;
}

weft_tensor *sparse_values_at(const weft_tensor *g, const int64_t *idx, int ndim, int64_t n)
{
    if (!g)
        return NULL;
    if (g->ndim != ndim) {
        weft_error_set(WEFT_ERR_RUNTIME, "sparse backward: a gradient of %d dims for a tensor "
                                         "of %d",
                       g->ndim, ndim);
        return NULL;
    }
    if (weft_tensor_is_sparse(g))
        return sparse_values_at_sparse(g, idx, ndim, n);
    const weft_tensor *x = weft_contiguous(weft_to_device((weft_tensor *)g, WEFT_CPU));
    void *ov;
    weft_tensor *out = sparse_new_host(1, &n, g->dtype, &ov);
    if (!x || !out)
        return NULL;
    if (n == 0)
        return out;
    if (sparse_check_coo_indices(idx, ndim, n, g->shape) != 0)
        return NULL;
    int64_t *pos = sparse_scratch(n, sizeof *pos);
    if (!pos)
        return NULL;
    sparse_linear_keys(idx, ndim, n, g->shape, pos); /* g exists, so its numel fits */
    sparse_gather(weft_dtype_size(g->dtype), weft_tensor_data(x), pos, n, ov);
    return out;
}

/* g's values at pattern's entries, on pattern's device. */
static weft_tensor *values_for(const weft_tensor *g, const weft_tensor *pattern)
{
    const struct sparse_data *s = pattern->layout_data;
    const int64_t *idx = NULL;
    int64_t nnz = sparse_nnz(s);
    if (nnz > 0 && !sparse_host_coo_indices(pattern, &idx))
        return NULL;
    weft_tensor *v = sparse_values_at(g, idx, pattern->ndim, nnz);
    return v ? weft_to_device(v, pattern->device) : NULL;
}

/* A sparse tensor with pattern's index tensors (the same objects) and these values. */
static weft_tensor *with_pattern(const weft_tensor *pattern, weft_tensor *values)
{
    const struct sparse_data *s = pattern->layout_data;
    if (!values)
        return NULL;
    if (pattern->layout == sparse_coo_layout)
        return sparse_make_coo(weft_tensor_retain(s->indices), weft_tensor_retain(values),
                               pattern->ndim, pattern->shape, s->coalesced);
    return sparse_make_csr(weft_tensor_retain(s->crow), weft_tensor_retain(s->col),
                           weft_tensor_retain(values), pattern->shape);
}

static bool same_pattern(const weft_tensor *a, const weft_tensor *b)
{
    if (a->layout != b->layout || !a->layout_data || !b->layout_data)
        return false;
    const struct sparse_data *x = a->layout_data, *y = b->layout_data;
    return x->indices == y->indices && x->crow == y->crow && x->col == y->col;
}

/* ---- the constructors: values -> sparse --------------------------------------------------- */

static int constructor_backward(struct weft_node *node, weft_tensor *const *grads,
                                weft_tensor **grad_inputs)
{
    weft_tensor *g = grads[0], *pattern = weft_node_saved(node, 0);
    if (!g || !weft_node_needs_input_grad(node, 0))
        return 0;
    if (same_pattern(g, pattern)) {
        const struct sparse_data *s = g->layout_data;
        grad_inputs[0] = weft_autorelease(weft_tensor_retain(s->values));
        return 0;
    }
    grad_inputs[0] = values_for(g, pattern);
    return grad_inputs[0] ? 0 : weft_error_code();
}

int sparse_grad_constructor(weft_tensor *out, const weft_tensor *values)
{
    const char *name = out->layout == sparse_coo_layout
                           ? "SparseCooTensorWithDimsAndTensorsBackward0"
                           : "SparseCompressedTensorBackward0";
    weft_tensor *in = (weft_tensor *)values;
    struct weft_node *node = weft_node_create(name, constructor_backward, 1, &in, 1);
    if (!node)
        return weft_error_code();
    /* Not out itself (saving its own output would make a cycle) but a twin holding the
     * same components, whose index objects gradients can be matched against. */
    const struct sparse_data *s = out->layout_data;
    weft_tensor *pattern = with_pattern(out, s->values);
    if (!pattern || weft_node_save(node, 0, pattern) != 0) {
        weft_node_abandon(node);
        return weft_error_code();
    }
    return weft_node_finish(node, 1, &out);
}

/* ---- to_dense: sparse -> dense ------------------------------------------------------------ */

static int to_dense_backward(struct weft_node *node, weft_tensor *const *grads,
                             weft_tensor **grad_inputs)
{
    weft_tensor *g = grads[0], *in = weft_node_saved(node, 0);
    if (!g || !weft_node_needs_input_grad(node, 0))
        return 0;
    grad_inputs[0] = with_pattern(in, values_for(g, in));
    return grad_inputs[0] ? 0 : weft_error_code();
}

int sparse_grad_to_dense(weft_tensor *out, const weft_tensor *in)
{
    weft_tensor *t = (weft_tensor *)in;
    struct weft_node *node = weft_node_create("ToDenseBackward0", to_dense_backward, 1, &t, 1);
    if (!node)
        return weft_error_code();
    if (weft_node_save(node, 0, t) != 0) {
        weft_node_abandon(node);
        return weft_error_code();
    }
    return weft_node_finish(node, 1, &out);
}

/* ---- linear maps: the gradient passes through, scaled ------------------------------------- */

/* An uncoalesced COO output of these nodes lists its inputs' entries in order (add
 * concatenates a's then b's; a move or a COO transpose keeps the order), so a gradient
 * given per entry (sharing the output's index tensors) splits back onto the inputs'
 * entries exactly. Any other gradient means its dense form, whatever its duplicates. */
static bool per_entry(const weft_tensor *out)
{
    const struct sparse_data *s = out->layout_data;
    return out->layout == sparse_coo_layout && !s->coalesced;
}

/* Slot 0: out's twin (for per-entry gradients), slots 1...: the sparse inputs. */
static int save_pattern_and_inputs(struct weft_node *node, const weft_tensor *out, int nin,
                                   const weft_tensor *const *in)
{
    const struct sparse_data *s = out->layout_data;
    weft_tensor *twin = with_pattern(out, s->values);
    int rc = twin ? weft_node_save(node, 0, twin) : weft_error_code();
    for (int i = 0; i < nin && rc == 0; i++)
        if (weft_tensor_is_sparse(in[i]))
            rc = weft_node_save(node, 1 + i, (weft_tensor *)in[i]);
    return rc;
}

/* g's values split over the saved inputs' entries (in order), scaled: grad_inputs[i]
 * shares input i's pattern. */
static int split_per_entry(struct weft_node *node, const weft_tensor *g, const double *scales,
                           weft_tensor **grad_inputs)
{
    const struct sparse_data *gs = g->layout_data;
    int64_t off = 0;
    for (int i = 0; i < weft_node_num_inputs(node); i++) {
        weft_tensor *in = weft_node_saved(node, 1 + i);
        if (!in)
            return weft_error_set(WEFT_ERR_RUNTIME, "sparse backward: input %d was not saved", i);
        int64_t n = weft_tensor_nnz(in);
        if (weft_node_needs_input_grad(node, i)) {
            weft_tensor *v = weft_contiguous(weft_narrow(gs->values, 0, off, n));
            if (v && scales[i] != 1.0)
                v = weft_mul_scalar(v, scales[i]);
            if (v && !weft_device_equal(v->device, in->device))
                v = weft_to_device(v, in->device);
            if (!(grad_inputs[i] = with_pattern(in, v)))
                return weft_error_code();
        }
        off += n;
    }
    return 0;
}

/* ints[i]: input i's layout; ints[4 + i], ints[8 + i]: its device; scalars[i]: its scale. */
static int linear_backward(struct weft_node *node, weft_tensor *const *grads,
                           weft_tensor **grad_inputs)
{
    weft_tensor *g = grads[0], *twin = weft_node_saved(node, 0);
    const int64_t *ints = weft_node_ints(node);
    const double *scales = weft_node_scalars(node);
    if (!g)
        return 0;
    if (twin && same_pattern(g, twin))
        return split_per_entry(node, g, scales, grad_inputs);
    for (int i = 0; i < weft_node_num_inputs(node); i++) {
        if (!weft_node_needs_input_grad(node, i))
            continue;
        bool sparse = weft_tensor_is_sparse(g);
        weft_tensor *gi = weft_autorelease(weft_tensor_retain(g));
        if (scales[i] != 1.0)
            gi = sparse ? sparse_mul_scalar_nograd(gi, scales[i]) : weft_mul_scalar(gi, scales[i]);
        if (gi && sparse && ints[i] == WEFT_LAYOUT_STRIDED)
            gi = sparse_to_dense_nograd(gi);
        weft_device dev = {(int16_t)ints[4 + i], (int16_t)ints[8 + i]};
        if (gi && !weft_device_equal(gi->device, dev))
            gi = weft_tensor_is_sparse(gi) ? sparse_api_to_device(gi, dev, false)
                                           : weft_to_device(gi, dev);
        if (!gi)
            return weft_error_code();
        grad_inputs[i] = gi;
    }
    return 0;
}

int sparse_grad_linear(const char *name, weft_tensor *out, int nin, const weft_tensor *const *in,
                       const double *scales)
{
    bool entries = per_entry(out);
    struct weft_node *node = weft_node_create(name, linear_backward, nin,
                                              (weft_tensor *const *)in, entries ? 1 + nin : 0);
    if (!node)
        return weft_error_code();
    int64_t *ints = weft_node_ints(node);
    double *sc = weft_node_scalars(node);
    for (int i = 0; i < nin && i < 4; i++) {
        ints[i] = in[i]->layout;
        ints[4 + i] = in[i]->device.type;
        ints[8 + i] = in[i]->device.index;
        sc[i] = scales[i];
    }
    if (entries && save_pattern_and_inputs(node, out, nin, in) != 0) {
        weft_node_abandon(node);
        return weft_error_code();
    }
    return weft_node_finish(node, 1, &out);
}

/* ---- transpose ---------------------------------------------------------------------------- */

static int transpose_backward(struct weft_node *node, weft_tensor *const *grads,
                              weft_tensor **grad_inputs)
{
    weft_tensor *g = grads[0], *twin = weft_node_saved(node, 0);
    const int64_t *ints = weft_node_ints(node);
    if (!g || !weft_node_needs_input_grad(node, 0))
        return 0;
    if (twin && same_pattern(g, twin))
        return split_per_entry(node, g, (const double[]){1.0}, grad_inputs);
    int d0 = (int)ints[0], d1 = (int)ints[1];
    grad_inputs[0] = weft_tensor_is_sparse(g) ? sparse_transpose_nograd(g, d0, d1)
                                              : weft_transpose(g, d0, d1);
    return grad_inputs[0] ? 0 : weft_error_code();
}

int sparse_grad_transpose(weft_tensor *out, const weft_tensor *in, int dim0, int dim1)
{
    weft_tensor *t = (weft_tensor *)in;
    bool entries = per_entry(out);
    struct weft_node *node =
        weft_node_create("TransposeBackward0", transpose_backward, 1, &t, entries ? 2 : 0);
    if (!node)
        return weft_error_code();
    weft_node_ints(node)[0] = dim0;
    weft_node_ints(node)[1] = dim1;
    if (entries && save_pattern_and_inputs(node, out, 1, &in) != 0) {
        weft_node_abandon(node);
        return weft_error_code();
    }
    return weft_node_finish(node, 1, &out);
}

/* ---- sums --------------------------------------------------------------------------------- */

/* The projection of in's entries onto the dims other than `dim`, host [nd - 1, nnz]. */
static const int64_t *project(const weft_tensor *in, int dim, int64_t nnz)
{
    const int64_t *idx;
    int nd = in->ndim;
    int64_t shape[2] = {nd - 1, nnz};
    int64_t *out;
    if (!sparse_host_coo_indices(in, &idx) || !sparse_new_host(2, shape, WEFT_I64, (void **)&out))
        return NULL;
    for (int d = 0, o = 0; d < nd; d++)
        if (d != dim)
            memcpy(out + (size_t)o++ * (size_t)nnz, idx + (size_t)d * (size_t)nnz,
                   (size_t)nnz * sizeof *out);
    return out;
}

static int sum_backward(struct weft_node *node, weft_tensor *const *grads,
                        weft_tensor **grad_inputs)
{
    weft_tensor *g = grads[0], *in = weft_node_saved(node, 0);
    int dim = (int)weft_node_ints(node)[0];
    if (!g || !weft_node_needs_input_grad(node, 0))
        return 0;
    int64_t nnz = weft_tensor_nnz(in);
    weft_tensor *values;
    if (g->ndim == 0) {
        /* Every entry gets the one gradient value. */
        int64_t one = 1;
        weft_tensor *v = weft_expand(weft_reshape(g, 1, &one), 1, &nnz);
        values = weft_to(weft_contiguous(v), in->device, in->dtype, false);
    } else {
        const int64_t *proj = nnz > 0 ? project(in, dim, nnz) : NULL;
        if (nnz > 0 && !proj)
            return weft_error_code();
        values = weft_to_device(sparse_values_at(g, proj, in->ndim - 1, nnz), in->device);
    }
    grad_inputs[0] = with_pattern(in, values);
    return grad_inputs[0] ? 0 : weft_error_code();
}

int sparse_grad_sum(weft_tensor *out, const weft_tensor *in, int dim)
{
    weft_tensor *t = (weft_tensor *)in;
    const char *name = dim < 0 ? "SumBackward0" : "SparseSumBackward0";
    struct weft_node *node = weft_node_create(name, sum_backward, 1, &t, 1);
    if (!node)
        return weft_error_code();
    weft_node_ints(node)[0] = dim;
    if (weft_node_save(node, 0, t) != 0) {
        weft_node_abandon(node);
        return weft_error_code();
    }
    return weft_node_finish(node, 1, &out);
}
