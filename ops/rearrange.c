/* ops/rearrange.c: torch.flip, torch.roll, torch.tril, torch.triu and torch.movedim, made
 * of other ops (index_select, narrow and cat, masked_fill, permute), with the nodes PyTorch
 * records (FlipBackward0, RollBackward0, TrilBackward0, TriuBackward0; movedim is a
 * permute, PermuteBackward0, as in PyTorch). */
#include <stdio.h>
#include <string.h>

#include "internal.h"

enum rearrange_kind { RA_FLIP, RA_ROLL, RA_TRIL, RA_TRIU };

/* Node ints: [0] kind, [1] n, [2 .. 2+n) dims, [2+n .. 2+2n) shifts (roll); tril/triu
 * keep the diagonal in [2]. Roll's flattening form (no dims) has n = 0, its shift in [2]. */
#define RA_MAX_PAIRS 7

/* "[0, 1]" for errors */
static const char *dims_str(int n, const int *dims, char *buf, size_t size)
{
    size_t len = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < n && len < size; i++)
        len += (size_t)snprintf(buf + len, size - len, i ? ", %d" : "%d", dims[i]);
    if (len < size)
        snprintf(buf + len, size - len, "]");
    return buf;
}

/* Normalises dims into out, each at most once (PyTorch's dim_list_to_bitset). */
static int unique_dims(const weft_tensor *t, int n, const int *dims, int *out)
{
    bool seen[WEFT_MAX_DIMS] = {false};
    int ndim = t->ndim > 0 ? t->ndim : 1;
    for (int i = 0; i < n; i++) {
        int d = weft_normalize_dim(dims[i], t->ndim);
        if (d < 0)
            return d;
        if (seen[d])
            return weft_error_set(WEFT_ERR_RUNTIME,
                                  "dim %d appears multiple times in the list of dims", d);
        seen[d] = true;
        out[i] = d < ndim ? d : 0;
    }
    return 0;
}

/* ---- flip ------------------------------------------------------------------------------- */
static weft_tensor *flip_in_scope(weft_tensor *t, int n, const int *dims)
{
    weft_tensor *r = t;
    for (int i = 0; r && i < n && t->ndim > 0; i++) {
        int64_t size = t->shape[dims[i]];
        if (size < 2)
            continue;
        weft_tensor *rev = weft_arange((double)(size - 1), -1, -1, WEFT_I64, t->device);
        r = rev ? weft_index_select(r, dims[i], rev) : NULL;
    }
    return r == t ? weft_clone(t) : r;
}

/* ---- roll ------------------------------------------------------------------------------- */
static weft_tensor *roll_dim(weft_tensor *t, int d, int64_t shift)
{
    int64_t size = t->shape[d];
    if (size == 0)
        return t;
    int64_t s = ((shift % size) + size) % size;
    if (s == 0)
        return t;
    weft_tensor *parts[2] = {weft_narrow(t, d, size - s, s), weft_narrow(t, d, 0, size - s)};
    return parts[0] && parts[1] ? weft_cat(2, parts, d) : NULL;
}

static weft_tensor *roll_in_scope(weft_tensor *t, int nshifts, const int64_t *shifts, int n,
                                  const int *dims)
{
    if (n == 0) { /* over the flattened tensor, then back to the shape */
        int64_t numel = numel_of(t);
        weft_tensor *flat = weft_reshape(t, 1, &numel);
        weft_tensor *r = flat ? roll_dim(flat, 0, shifts[0]) : NULL;
        return r ? weft_view(r == flat ? weft_clone(r) : r, t->ndim, t->shape) : NULL;
    }
    weft_tensor *r = t;
    for (int i = 0; r && i < n; i++)
        r = t->ndim ? roll_dim(r, dims[i], shifts[i]) : r;
    return r == t ? weft_clone(t) : r;
}

static int roll_check(int nshifts, int ndims)
{
    if (nshifts == 0)
        return weft_error_set(WEFT_ERR_RUNTIME, "`shifts` required");
    if (ndims == 0 && nshifts != 1)
        return weft_error_set(WEFT_ERR_RUNTIME, "shifts and dimensions must align. shifts: %d, dims:%d",
                              nshifts, ndims);
    if (ndims != 0 && nshifts != ndims)
        return weft_error_set(WEFT_ERR_RUNTIME, "shifts and dimensions must align. shifts: %d, dims:%d",
                              nshifts, ndims);
    if (ndims > RA_MAX_PAIRS)
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "roll: at most %d dims in weft, got %d",
                              RA_MAX_PAIRS, ndims);
    return 0;
}

/* ---- tril, triu ------------------------------------------------------------------------- */
static weft_tensor *triangle_in_scope(bool upper, weft_tensor *t, int64_t diagonal)
{
    int64_t rows = t->shape[t->ndim - 2], cols = t->shape[t->ndim - 1];
    const int64_t col_shape[2] = {1, cols}, row_shape[2] = {rows, 1};
    weft_tensor *col = weft_view(weft_arange(0, (double)cols, 1, WEFT_I64, t->device), 2, col_shape);
    weft_tensor *row = weft_view(weft_arange(0, (double)rows, 1, WEFT_I64, t->device), 2, row_shape);
    weft_tensor *offset = weft_sub(col, row); /* col - row, [rows, cols] */
    weft_tensor *drop = upper ? weft_lt_scalar(offset, (double)diagonal)
                              : weft_gt_scalar(offset, (double)diagonal);
    return drop ? weft_masked_fill(t, drop, 0) : NULL;
}

/* ---- the nodes and the public ops ------------------------------------------------------- */
static int rearrange_backward(struct weft_node *node, weft_tensor *const *grad_outputs,
                              weft_tensor **grad_inputs)
{
    weft_tensor *g = grad_outputs[0];
    if (!g)
        return 0;
    const int64_t *ints = weft_node_ints(node);
    int n = (int)ints[1], dims[RA_MAX_PAIRS + 1];
    int64_t shifts[RA_MAX_PAIRS + 1];
    for (int i = 0; i < n; i++) {
        dims[i] = (int)ints[2 + i];
        shifts[i] = -ints[2 + n + i];
    }
    switch ((enum rearrange_kind)ints[0]) {
    case RA_FLIP: grad_inputs[0] = weft_flip(g, n, dims); break;
    case RA_ROLL:
        if (n == 0)
            shifts[0] = -ints[2];
        grad_inputs[0] = weft_roll(g, n ? n : 1, shifts, n, dims);
        break;
    case RA_TRIL: grad_inputs[0] = weft_tril(g, ints[2]); break;
    case RA_TRIU: grad_inputs[0] = weft_triu(g, ints[2]); break;
    }
    return grad_inputs[0] ? 0 : weft_error_code();
}

static weft_tensor *record(enum rearrange_kind kind, weft_tensor *t, weft_tensor *out, int n,
                           const int *dims, const int64_t *shifts, int64_t diagonal)
{
    const char *name = kind == RA_FLIP   ? OP_GRAD_FN(FLIP)
                       : kind == RA_ROLL ? OP_GRAD_FN(ROLL)
                       : kind == RA_TRIL ? OP_GRAD_FN(TRIL)
                                         : OP_GRAD_FN(TRIU);
    struct weft_node *node = weft_node_create(name, rearrange_backward, 1, &t, 0);
    if (node) {
        int64_t *ints = weft_node_ints(node);
        ints[0] = kind;
        ints[1] = n;
        for (int i = 0; i < n; i++) {
            ints[2 + i] = dims[i];
            if (shifts)
                ints[2 + n + i] = shifts[i];
        }
        if (n == 0 && shifts)
            ints[2] = shifts[0];
        if (kind == RA_TRIL || kind == RA_TRIU)
            ints[2] = diagonal;
    }
    return weft_node_finish1(node, out);
}

/* Runs expr (the forward, in a scope of its own) with grad mode off when recording. */
#define RA_FORWARD(rec, expr)                                                                 \
    WEFT_NO_GRAD(rec, ({                                                                      \
                     weft_scope_push();                                                       \
                     weft_tensor *r_ = weft_tensor_retain(expr);                              \
                     weft_scope_pop();                                                        \
                     weft_tensor_finish(r_);                                                  \
                 }))

weft_tensor *weft_flip(weft_tensor *t, int ndims, const int *dims)
{
    int d[WEFT_MAX_DIMS];
    if (!t || weft_require_strided(t, "flip") != 0)
        return NULL;
    if (ndims < 0 || ndims > WEFT_MAX_DIMS || (ndims > 0 && !dims)) {
        weft_error_set(WEFT_ERR_VALUE, "flip: invalid dim list (%d dims)", ndims);
        return NULL;
    }
    if (unique_dims(t, ndims, dims, d) != 0)
        return NULL;
    bool rec = weft_autograd_needed_inline(1, &t);
    weft_tensor *out = RA_FORWARD(rec, flip_in_scope(t, ndims, d));
    return rec && out ? record(RA_FLIP, t, out, ndims, d, NULL, 0) : out;
}

weft_tensor *weft_roll(weft_tensor *t, int nshifts, const int64_t *shifts, int ndims,
                       const int *dims)
{
    int d[WEFT_MAX_DIMS];
    if (!t || weft_require_strided(t, "roll") != 0 || roll_check(nshifts, ndims) != 0)
        return NULL;
    for (int i = 0; i < ndims; i++) {
        d[i] = weft_normalize_dim(dims[i], t->ndim);
        if (d[i] < 0)
            return NULL;
    }
    bool rec = weft_autograd_needed_inline(1, &t);
    weft_tensor *out = RA_FORWARD(rec, roll_in_scope(t, nshifts, shifts, ndims, d));
    return rec && out ? record(RA_ROLL, t, out, ndims, d, shifts, 0) : out;
}

static weft_tensor *triangle(bool upper, weft_tensor *t, int64_t diagonal)
{
    const char *name = upper ? "triu" : "tril";
    if (!t || weft_require_strided(t, name) != 0)
        return NULL;
    if (t->ndim < 2) { /* PyTorch's words: it asks for dim -2 */
        if (weft_normalize_dim(-2, t->ndim) >= 0)
            weft_error_set(WEFT_ERR_RUNTIME, "%s: input tensor must have at least 2 dimensions", name);
        return NULL;
    }
    bool rec = weft_autograd_needed_inline(1, &t);
    weft_tensor *out = RA_FORWARD(rec, triangle_in_scope(upper, t, diagonal));
    return rec && out ? record(upper ? RA_TRIU : RA_TRIL, t, out, 0, NULL, NULL, diagonal) : out;
}

weft_tensor *weft_tril(weft_tensor *t, int64_t diagonal)
{
    return triangle(false, t, diagonal);
}

weft_tensor *weft_triu(weft_tensor *t, int64_t diagonal)
{
    return triangle(true, t, diagonal);
}

weft_tensor *weft_movedim(weft_tensor *t, int nsource, const int *source, int ndestination,
                          const int *destination)
{
    char s1[96], s2[96];
    int n = nsource;
    if (!t)
        return NULL;
    if (n < 0 || n > WEFT_MAX_DIMS || ndestination < 0 || ndestination > WEFT_MAX_DIMS ||
        (n > 0 && !source) || (ndestination > 0 && !destination)) {
        weft_error_set(WEFT_ERR_VALUE, "movedim: invalid dim list (%d and %d dims)", n,
                       ndestination);
        return NULL;
    }
    if (nsource != ndestination) {
        weft_error_set(WEFT_ERR_RUNTIME,
                       "movedim: Invalid source or destination dims: source (%s dims) should "
                       "contain the same number of dims as destination (%s dims)",
                       dims_str(nsource, source, s1, sizeof s1),
                       dims_str(ndestination, destination, s2, sizeof s2));
        return NULL;
    }
    int src[WEFT_MAX_DIMS], dst[WEFT_MAX_DIMS], perm[WEFT_MAX_DIMS];
    bool src_used[WEFT_MAX_DIMS] = {false}, dst_used[WEFT_MAX_DIMS] = {false};
    for (int i = 0; i < n; i++) {
        src[i] = weft_normalize_dim(source[i], t->ndim);
        dst[i] = weft_normalize_dim(destination[i], t->ndim);
        if (src[i] < 0 || dst[i] < 0)
            return NULL;
        if (t->ndim == 0)
            return weft_permute(t, 0, perm);
        if (src_used[src[i]]) {
            weft_error_set(WEFT_ERR_RUNTIME, "movedim: repeated dim in `source` (%s)",
                           dims_str(n, source, s1, sizeof s1));
            return NULL;
        }
        if (dst_used[dst[i]]) {
            weft_error_set(WEFT_ERR_RUNTIME, "movedim: repeated dim in `destination` (%s)",
                           dims_str(n, destination, s2, sizeof s2));
            return NULL;
        }
        src_used[src[i]] = dst_used[dst[i]] = true;
        perm[dst[i]] = src[i];
    }
    /* the dims not moved keep their order in the places left */
    int next = 0;
    for (int d = 0; d < t->ndim; d++) {
        if (dst_used[d])
            continue;
        while (src_used[next])
            next++;
        perm[d] = next++;
    }
    return weft_permute(t, t->ndim, perm);
}
