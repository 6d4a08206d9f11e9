/* tests/test_attention.c: scaled_dot_product_attention (weft/nn.h) and the cpu plugin's
 * fused sdpa_flash kernels.
 *
 * The fused path is compared with a plain loop written here in double (softmax spelled
 * out) and with the composite of recorded ops (matmul, masked_fill, softmax, dropout,
 * matmul) built here as nn/attention.c's fallback builds it; gradients with
 * weft_gradcheck in float64 and against the composite's. Dropout is compared with the
 * composite at the same seed: the kernel draws the mask weft_dropout draws. */
#include <math.h>
#include <string.h>

#include "testutil.h"

#include <weft/nn.h>

static void setup(void)
{
    tu_setup();
    weft_scope_push();
}

static void teardown(void)
{
    weft_scope_pop();
    weft_set_grad_enabled(true);
    tu_teardown();
}

TestSuite(attention, .init = setup, .fini = teardown);

/* Values in [-1.5, 1.5) (testutil's generator). */
static weft_tensor *random_tensor(int ndim, const int64_t *shape, enum weft_dtype dt,
                                  uint64_t *seed)
{
    return tu_random_tensor(ndim, shape, dt, -1.5, 1.5, seed, NULL);
}

#define FLASH_NODE "ScaledDotProductFlashAttentionBackward0"

/* A bool tensor, each element true with probability 3/4 (and row 0 all true, so no row
 * of a [.., L, S] mask is empty). */
static weft_tensor *random_bool(int ndim, const int64_t *shape, uint64_t *seed)
{
    int64_t n = weft_shape_numel(ndim, shape);
    double *v = malloc((size_t)n * sizeof *v);
    cr_assert_not_null(v);
    tu_random_values(v, n, 0, 1, seed);
    int64_t S = shape[ndim - 1];
    for (int64_t i = 0; i < n; i++)
        v[i] = (i % S == 0 || v[i] < 0.75) ? 1 : 0;
    weft_tensor *t = tu_tensor(ndim, shape, v, WEFT_BOOL);
    free(v);
    return t;
}

static double *read_all(const weft_tensor *t)
{
    cr_assert_not_null(t, "%s", weft_error_message());
    int64_t n = weft_tensor_numel(t);
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    cr_assert_not_null(v);
    tu_read(t, v);
    return v;
}

/* The composite nn/attention.c falls back to, from recorded ops. */
static weft_tensor *composite(weft_tensor *q, weft_tensor *k, weft_tensor *v,
                              const struct weft_sdpa_params *p)
{
    int64_t L = q->shape[q->ndim - 2], S = k->shape[k->ndim - 2], E = q->shape[q->ndim - 1];
    double scale = p->scale ? *p->scale : 1 / sqrt((double)E);
    weft_tensor *s = weft_mul_scalar(weft_matmul(q, weft_transpose(k, -2, -1)), scale);
    weft_tensor *mask = p->attn_mask;
    if (p->is_causal) /* j <= i */
        mask = weft_le(weft_reshape(weft_arange(0, (double)S, 1, WEFT_I64, WEFT_CPU), 2,
                                    (int64_t[]){1, S}),
                       weft_reshape(weft_arange(0, (double)L, 1, WEFT_I64, WEFT_CPU), 2,
                                    (int64_t[]){L, 1}));
    if (mask && mask->dtype == WEFT_BOOL)
        s = weft_masked_fill(s, weft_logical_not(mask), -INFINITY);
    else if (mask)
        s = weft_add(s, mask);
    weft_tensor *w = weft_softmax(s, -1);
    if (p->dropout_p > 0)
        w = weft_dropout(w, p->dropout_p, true);
    return weft_matmul(w, v);
}

/* softmax(q k^T * scale + mask) v in double, on the broadcast shapes: q, k, v, mask
 * already expanded to [BH, L, E], [BH, S, E], [BH, S, Ev], [BH, L, S]. */
static void reference(const double *q, const double *k, const double *v, const double *mask,
                      bool mask_bool, bool causal, double scale, int64_t BH, int64_t L,
                      int64_t S, int64_t E, int64_t Ev, double *out)
{
    double *s = malloc((size_t)S * sizeof *s);
    cr_assert_not_null(s);
    for (int64_t b = 0; b < BH; b++)
        for (int64_t i = 0; i < L; i++) {
            double mx = -INFINITY, sum = 0;
            for (int64_t j = 0; j < S; j++) {
                double d = 0;
                for (int64_t e = 0; e < E; e++)
                    d += q[(b * L + i) * E + e] * k[(b * S + j) * E + e];
                d *= scale;
                if (mask && mask_bool && mask[(b * L + i) * S + j] == 0)
                    d = -INFINITY;
                else if (mask && !mask_bool)
                    d += mask[(b * L + i) * S + j];
                if (causal && j > i)
                    d = -INFINITY;
                s[j] = d;
                mx = d > mx ? d : mx;
            }
            for (int64_t j = 0; j < S; j++)
                sum += s[j] = exp(s[j] - mx);
            for (int64_t e = 0; e < Ev; e++) {
                double o = 0;
                for (int64_t j = 0; j < S; j++)
                    o += s[j] / sum * v[(b * S + j) * Ev + e];
                out[(b * L + i) * Ev + e] = o;
            }
        }
    free(s);
}

struct sdpa_case {
    int nb;
    int64_t qb[3], kb[3], vb[3]; /* batch dims of each (broadcast together) */
    int64_t L, S, E, Ev;
    bool causal;
    int mask; /* 0 none, 1 bool [L, S], 2 float [1, L, S], 3 bool full batch */
    double scale; /* 0: not given (the cases' default; a given 0 has its own test) */
};

static weft_tensor *make_operand(int nb, const int64_t *batch, int64_t r, int64_t c,
                                 enum weft_dtype dt, uint64_t *seed)
{
    int64_t shape[8];
    memcpy(shape, batch, sizeof(int64_t) * (size_t)nb);
    shape[nb] = r;
    shape[nb + 1] = c;
    return random_tensor(nb + 2, shape, dt, seed);
}

/* t expanded to [batch..., r, c] and read as doubles. */
static double *read_expanded(weft_tensor *t, int nb, const int64_t *batch, int64_t r, int64_t c)
{
    int64_t shape[8];
    memcpy(shape, batch, sizeof(int64_t) * (size_t)nb);
    shape[nb] = r;
    shape[nb + 1] = c;
    return read_all(weft_contiguous(weft_expand(t, nb + 2, shape)));
}

/* Runs one case in dtype dt through the fused path and checks it against the reference
 * and the composite; with grads, also the gradients of q, k, v against the composite's. */
static void check_case(const struct sdpa_case *c, enum weft_dtype dt, double tol, bool grads)
{
    uint64_t seed = 1234 + (uint64_t)c->L * 7 + (uint64_t)c->S;
    weft_tensor *q = make_operand(c->nb, c->qb, c->L, c->E, dt, &seed);
    weft_tensor *k = make_operand(c->nb, c->kb, c->S, c->E, dt, &seed);
    weft_tensor *v = make_operand(c->nb, c->vb, c->S, c->Ev, dt, &seed);
    int64_t batch[3];
    for (int d = 0; d < c->nb; d++) {
        batch[d] = c->qb[d] > c->kb[d] ? c->qb[d] : c->kb[d];
        batch[d] = c->vb[d] > batch[d] ? c->vb[d] : batch[d];
    }
    weft_tensor *mask = NULL;
    if (c->mask == 1)
        mask = random_bool(2, (int64_t[]){c->L, c->S}, &seed);
    else if (c->mask == 2)
        mask = random_tensor(3, (int64_t[]){1, c->L, c->S}, dt, &seed);
    else if (c->mask == 3) {
        int64_t ms[5];
        memcpy(ms, batch, sizeof(int64_t) * (size_t)c->nb);
        ms[c->nb] = c->L;
        ms[c->nb + 1] = c->S;
        mask = random_bool(c->nb + 2, ms, &seed);
    }
    struct weft_sdpa_params p = {.attn_mask = mask, .is_causal = c->causal,
                                 .scale = c->scale ? &c->scale : NULL};
    if (grads) {
        weft_requires_grad_(q, true);
        weft_requires_grad_(k, true);
        weft_requires_grad_(v, true);
    }
    weft_tensor *out = weft_scaled_dot_product_attention(q, k, v, &p);
    cr_assert_not_null(out, "%s", weft_error_message());
    int64_t oshape[5];
    memcpy(oshape, batch, sizeof(int64_t) * (size_t)c->nb);
    oshape[c->nb] = c->L;
    oshape[c->nb + 1] = c->Ev;
    tu_assert_shape(out, c->nb + 2, oshape);
    if (grads)
        cr_assert_str_eq(weft_grad_fn_name(out), FLASH_NODE);

    int64_t BH = weft_shape_numel(c->nb, batch), n = BH * c->L * c->Ev;
    double *qd = read_expanded(q, c->nb, batch, c->L, c->E);
    double *kd = read_expanded(k, c->nb, batch, c->S, c->E);
    double *vd = read_expanded(v, c->nb, batch, c->S, c->Ev);
    double *md = mask ? read_expanded(mask, c->nb, batch, c->L, c->S) : NULL;
    double *want = malloc((size_t)n * sizeof *want);
    cr_assert_not_null(want);
    double scale = c->scale ? c->scale : 1 / sqrt((double)c->E);
    reference(qd, kd, vd, md, mask && mask->dtype == WEFT_BOOL, c->causal, scale, BH, c->L, c->S,
              c->E, c->Ev, want);
    tu_assert_close(out, want, n, tol, tol);
    /* 16-bit inputs: the composite runs on their float32 values (the kernel computes in
     * float; and the composite's own 16-bit matmul is not what this suite checks) */
    bool half = dt == WEFT_F16 || dt == WEFT_BF16;
    struct weft_sdpa_params pc = p;
    if (half && mask && mask->dtype != WEFT_BOOL)
        pc.attn_mask = weft_to_dtype(mask, WEFT_F32);
    weft_tensor *comp = half ? composite(weft_to_dtype(q, WEFT_F32), weft_to_dtype(k, WEFT_F32),
                                         weft_to_dtype(v, WEFT_F32), &pc)
                             : composite(q, k, v, &p);
    cr_assert_not_null(comp, "%s", weft_error_message());
    double *cd = read_all(comp);
    tu_assert_close(out, cd, n, tol, tol);

    if (grads) {
        weft_tensor *g = make_operand(c->nb, batch, c->L, c->Ev, dt, &seed);
        weft_tensor *in[3] = {q, k, v};
        double *fused_grads[3];
        cr_assert_eq(weft_backward(out, g, false), 0, "%s", weft_error_message());
        for (int i = 0; i < 3; i++) {
            fused_grads[i] = read_all(weft_grad(in[i]));
            weft_zero_grad(in[i], true);
        }
        cr_assert_eq(weft_backward(comp, g, false), 0, "%s", weft_error_message());
        for (int i = 0; i < 3; i++) {
            weft_tensor *cg = weft_grad(in[i]);
            cr_assert_not_null(cg);
            tu_assert_close(cg, fused_grads[i], weft_tensor_numel(cg), tol, tol);
            free(fused_grads[i]);
        }
    }
    free(qd);
    free(kd);
    free(vd);
    free(md);
    free(want);
    free(cd);
}

static const struct sdpa_case cases[] = {
    /* L != S, E != Ev, tiles not full */
    {2, {2, 3}, {2, 3}, {2, 3}, 5, 7, 4, 6, false, 0, 0},
    /* several key and query tiles, neither a multiple of the tile */
    {1, {2}, {2}, {2}, 70, 130, 8, 5, true, 0, 0},
    {1, {2}, {2}, {2}, 130, 70, 8, 5, true, 0, 0},
    {1, {2}, {2}, {2}, 70, 130, 8, 5, false, 0, 0},
    /* T = 1, and one query over many keys */
    {1, {1}, {1}, {1}, 1, 1, 3, 2, false, 0, 0},
    {1, {1}, {1}, {1}, 1, 1, 3, 2, true, 0, 0},
    {1, {3}, {3}, {3}, 1, 9, 3, 2, true, 0, 0},
    /* broadcast batch dims */
    {2, {2, 1}, {1, 3}, {1, 1}, 6, 10, 4, 4, false, 0, 0},
    {2, {2, 1}, {1, 3}, {1, 1}, 6, 10, 4, 4, true, 0, 0},
    /* masks: bool [L, S], float [1, L, S], bool over the full batch; a custom scale */
    {2, {2, 2}, {2, 2}, {2, 2}, 9, 67, 5, 3, false, 1, 0},
    {2, {2, 2}, {2, 2}, {2, 2}, 9, 67, 5, 3, false, 2, 0},
    {1, {3}, {3}, {3}, 40, 70, 5, 7, false, 3, 0.3},
    {1, {3}, {3}, {3}, 40, 40, 5, 7, true, 0, 2.5},
    /* negative scales are used as given (issue 32: they were taken for "not given") */
    {1, {3}, {3}, {3}, 40, 70, 5, 7, false, 3, -0.6},
    {1, {2}, {2}, {2}, 9, 12, 4, 3, true, 0, -1.5},
    /* head dims past the vector widths: 32 + 8 + 5 and 32 + 5 columns */
    {1, {2}, {2}, {2}, 33, 45, 45, 37, false, 0, 0},
    {1, {2}, {2}, {2}, 45, 33, 37, 64, true, 0, 0},
    /* several key blocks of 256 and query tiles of 64 (past 256 queries), neither whole;
     * causal with more keys than queries (the last blocks hidden from every query) and
     * with fewer; a mask across block edges */
    {1, {2}, {2}, {2}, 300, 600, 8, 5, true, 0, 0},
    {1, {2}, {2}, {2}, 600, 300, 8, 5, true, 0, 0},
    {1, {1}, {1}, {1}, 290, 520, 6, 4, false, 1, 0},
};

Test(attention, fused_matches_reference_and_composite_float32)
{
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        check_case(&cases[i], WEFT_F32, 2e-5, false);
}

Test(attention, fused_matches_reference_and_composite_float64)
{
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        check_case(&cases[i], WEFT_F64, 1e-12, false);
}

Test(attention, fused_gradients_match_composite)
{
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        check_case(&cases[i], WEFT_F64, 1e-11, true);
        check_case(&cases[i], WEFT_F32, 1e-4, true);
    }
}

Test(attention, sixteen_bit_floats_compute_in_float)
{
    check_case(&cases[1], WEFT_BF16, 3e-2, false);
    check_case(&cases[9], WEFT_F16, 5e-3, false);
}

/* bfloat16 heads of 16 queries or more run on the bf16 matmul (attention_bf16.inc), whose
 * probabilities and dS are rounded to bfloat16 before they multiply; shorter ones on the
 * float tiles. Every case, forward and gradients, against float32 on the same values. */
Test(attention, bfloat16_matches_float32_forward_and_gradients)
{
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        check_case(&cases[i], WEFT_BF16, 3e-2, true);
}

Test(attention, the_fused_kernel_records_one_flash_node)
{
    uint64_t seed = 5;
    weft_tensor *q = random_tensor(3, (int64_t[]){2, 4, 8}, WEFT_F32, &seed);
    weft_requires_grad_(q, true);
    weft_tensor *k = random_tensor(3, (int64_t[]){2, 4, 8}, WEFT_F32, &seed);
    weft_tensor *out = weft_scaled_dot_product_attention(q, k, k, NULL);
    cr_assert_not_null(out, "%s", weft_error_message());
    cr_assert_str_eq(weft_grad_fn_name(out), FLASH_NODE);
    /* a float mask that requires grad needs the composite (the kernel gives it none) */
    weft_tensor *m = random_tensor(2, (int64_t[]){4, 4}, WEFT_F32, &seed);
    weft_requires_grad_(m, true);
    struct weft_sdpa_params p = {.attn_mask = m};
    out = weft_scaled_dot_product_attention(q, k, k, &p);
    cr_assert_not_null(out, "%s", weft_error_message());
    cr_assert_str_neq(weft_grad_fn_name(out), FLASH_NODE);
}

/* ---- non-contiguous inputs ------------------------------------------------------------- */

Test(attention, transposed_views_give_the_contiguous_result)
{
    /* q, k, v as GPT makes them: [B, T, nh, hd] viewed as [B, nh, T, hd] */
    const int64_t B = 2, T = 37, nh = 3, hd = 8;
    uint64_t seed = 9;
    weft_tensor *x[3], *xc[3];
    for (int i = 0; i < 3; i++) {
        x[i] = weft_transpose(random_tensor(4, (int64_t[]){B, T, nh, hd}, WEFT_F32, &seed), 1, 2);
        cr_assert(!weft_tensor_is_contiguous(x[i]));
        xc[i] = weft_contiguous(x[i]);
        weft_requires_grad_(xc[i], true);
    }
    struct weft_sdpa_params p = {.is_causal = true};
    weft_tensor *a = weft_scaled_dot_product_attention(x[0], x[1], x[2], &p);
    weft_tensor *b = weft_scaled_dot_product_attention(xc[0], xc[1], xc[2], &p);
    cr_assert_not_null(a, "%s", weft_error_message());
    cr_assert_not_null(b, "%s", weft_error_message());
    double *bd = read_all(b);
    tu_assert_close(a, bd, weft_tensor_numel(b), 0, 0);
    free(bd);
    /* a non-contiguous grad_out (and a last dim of stride != 1 in value) */
    weft_tensor *g = weft_transpose(random_tensor(4, (int64_t[]){B, nh, hd, T}, WEFT_F32, &seed),
                                    2, 3);
    weft_tensor *vt = weft_transpose(weft_contiguous(weft_transpose(xc[2], 2, 3)), 2, 3);
    cr_assert_neq(vt->stride[3], 1);
    weft_tensor *c = weft_scaled_dot_product_attention(xc[0], xc[1], vt, &p);
    cr_assert_eq(weft_backward(c, g, false), 0, "%s", weft_error_message());
    double *gq = read_all(weft_grad(xc[0]));
    weft_zero_grad(xc[0], true);
    cr_assert_eq(weft_backward(b, weft_contiguous(g), false), 0, "%s", weft_error_message());
    tu_assert_close(weft_grad(xc[0]), gq, weft_tensor_numel(xc[0]), 1e-6, 1e-6);
    free(gq);
}

/* The output and the three gradients of a causal attention over GPT-shaped views (several
 * query tiles and key blocks), run with the given number of threads. */
static double *run_with_threads(int threads, int64_t *numel)
{
    int before = weft_get_num_threads();
    cr_assert_eq(weft_set_num_threads(threads), 0, "%s", weft_error_message());
    weft_scope_push();
    const int64_t B = 2, T = 300, nh = 3, hd = 16, n = B * T * nh * hd;
    uint64_t seed = 21;
    weft_tensor *x[3];
    for (int i = 0; i < 3; i++) {
        x[i] = random_tensor(4, (int64_t[]){B, T, nh, hd}, WEFT_F32, &seed);
        weft_requires_grad_(x[i], true);
    }
    struct weft_sdpa_params p = {.is_causal = true};
    weft_tensor *y = weft_scaled_dot_product_attention(
        weft_transpose(x[0], 1, 2), weft_transpose(x[1], 1, 2), weft_transpose(x[2], 1, 2), &p);
    cr_assert_not_null(y, "%s", weft_error_message());
    weft_tensor *g = random_tensor(4, (int64_t[]){B, nh, T, hd}, WEFT_F32, &seed);
    cr_assert_eq(weft_backward(y, g, false), 0, "%s", weft_error_message());
    double *all = malloc(4 * (size_t)n * sizeof *all);
    cr_assert_not_null(all);
    tu_read(y, all);
    for (int i = 0; i < 3; i++)
        tu_read(weft_grad(x[i]), all + (i + 1) * n);
    *numel = 4 * n;
    weft_scope_pop();
    weft_set_num_threads(before);
    return all;
}

Test(attention, the_same_bits_for_any_number_of_threads)
{
    int64_t n1, n2;
    double *a = run_with_threads(1, &n1), *b = run_with_threads(2, &n2);
    cr_assert_eq(n1, n2);
    cr_assert_eq(memcmp(a, b, (size_t)n1 * sizeof *a), 0, "1 and 2 threads differ");
    free(a);
    free(b);
}

/* ---- gradcheck ------------------------------------------------------------------------------ */

struct gc_ctx {
    struct weft_sdpa_params p;
    uint64_t seed; /* dropout: every evaluation draws the same mask */
};

static weft_tensor *apply_sdpa(void *ctx, weft_tensor *const *in)
{
    struct gc_ctx *c = ctx;
    if (c->p.dropout_p > 0)
        weft_manual_seed(c->seed);
    weft_tensor *out = weft_scaled_dot_product_attention(in[0], in[1], in[2], &c->p);
    if (out && weft_requires_grad(in[0]) && weft_grad_enabled())
        cr_expect_str_eq(weft_grad_fn_name(out), FLASH_NODE);
    return out;
}

static weft_tensor *leaf64(int ndim, const int64_t *shape, uint64_t *seed)
{
    weft_tensor *t = random_tensor(ndim, shape, WEFT_F64, seed);
    cr_assert_eq(weft_requires_grad_(t, true), 0, "%s", weft_error_message());
    return t;
}

static void gradcheck_sdpa(struct gc_ctx *c, int64_t L, int64_t S, int64_t E, int64_t Ev)
{
    uint64_t seed = 77;
    weft_tensor *in[3] = {leaf64(3, (int64_t[]){2, L, E}, &seed),
                          leaf64(3, (int64_t[]){2, S, E}, &seed),
                          leaf64(3, (int64_t[]){2, S, Ev}, &seed)};
    int rc = weft_gradcheck(apply_sdpa, c, 3, in, 1e-6, 1e-6, 1e-5);
    cr_expect_eq(rc, 0, "%s", weft_error_message());
    weft_error_clear();
}

Test(attention, gradcheck_float64)
{
    struct gc_ctx c = {{0}};
    gradcheck_sdpa(&c, 5, 7, 3, 4);
    c.p.is_causal = true;
    gradcheck_sdpa(&c, 7, 5, 3, 4);
    gradcheck_sdpa(&c, 66, 70, 2, 2); /* two key tiles, causal skipping */
    c.p.is_causal = false;
    c.p.scale = &(double){0.7};
    uint64_t seed = 3;
    c.p.attn_mask = random_bool(2, (int64_t[]){6, 5}, &seed);
    gradcheck_sdpa(&c, 6, 5, 3, 2);
    c.p.attn_mask = random_tensor(3, (int64_t[]){2, 1, 5}, WEFT_F64, &seed);
    gradcheck_sdpa(&c, 6, 5, 3, 2);
    c.p.scale = &(double){-1.3};
    gradcheck_sdpa(&c, 6, 5, 3, 2);
    c.p.scale = &(double){0};
    c.p.attn_mask = NULL;
    gradcheck_sdpa(&c, 6, 5, 3, 2);
}

/* scale = 0 is a scale like any other (PyTorch 2's scale=0.0): every score is 0, so each
 * query averages the values of the keys it sees; only a NULL scale means 1 / sqrt(E). */
Test(attention, a_given_scale_of_zero_averages_the_visible_values)
{
    uint64_t seed = 9;
    weft_tensor *q = random_tensor(3, (int64_t[]){1, 3, 4}, WEFT_F64, &seed);
    weft_tensor *v = random_tensor(3, (int64_t[]){1, 3, 2}, WEFT_F64, &seed);
    struct weft_sdpa_params p = {.is_causal = true, .scale = &(double){0}};
    weft_tensor *out = weft_scaled_dot_product_attention(q, q, v, &p);
    cr_assert_not_null(out, "%s", weft_error_message());
    double vv[6], want[6];
    tu_read(v, vv);
    for (int i = 0; i < 3; i++)
        for (int e = 0; e < 2; e++) {
            double sum = 0;
            for (int j = 0; j <= i; j++)
                sum += vv[j * 2 + e];
            want[i * 2 + e] = sum / (i + 1);
        }
    tu_assert_close(out, want, 6, 1e-14, 1e-14);
    p.scale = NULL;
    double got[6], diff = 0;
    tu_read(weft_scaled_dot_product_attention(q, q, v, &p), got);
    for (int i = 0; i < 6; i++)
        diff += fabs(got[i] - want[i]);
    cr_expect_gt(diff, 1e-6, "the default scale is not 0");
}

/* ---- dropout -------------------------------------------------------------------------------- */

Test(attention, dropout_same_seed_same_output_and_the_composites_mask)
{
    uint64_t seed = 11;
    weft_tensor *q = random_tensor(4, (int64_t[]){2, 3, 20, 8}, WEFT_F32, &seed);
    weft_tensor *k = random_tensor(4, (int64_t[]){2, 3, 30, 8}, WEFT_F32, &seed);
    weft_tensor *v = random_tensor(4, (int64_t[]){2, 3, 30, 5}, WEFT_F32, &seed);
    struct weft_sdpa_params p = {.dropout_p = 0.3, .is_causal = true};
    weft_manual_seed(42);
    weft_tensor *a = weft_scaled_dot_product_attention(q, k, v, &p);
    uint64_t after = weft_random_offset();
    cr_assert_eq(after, (2 * 3 * 20 * 30 + 3) / 4, "the offset moves as weft_rand's would");
    weft_tensor *b = weft_scaled_dot_product_attention(q, k, v, &p);
    weft_manual_seed(42);
    weft_tensor *c = weft_scaled_dot_product_attention(q, k, v, &p);
    weft_manual_seed(42);
    weft_tensor *d = composite(q, k, v, &p);
    cr_assert(a && b && c && d, "%s", weft_error_message());
    double *ad = read_all(a), *bd = read_all(b), *dd = read_all(d);
    tu_assert_close(c, ad, weft_tensor_numel(a), 0, 0);
    tu_assert_close(a, dd, weft_tensor_numel(a), 1e-5, 1e-5);
    int same = 0;
    for (int64_t i = 0; i < weft_tensor_numel(a); i++)
        same += ad[i] == bd[i];
    cr_expect_lt(same, weft_tensor_numel(a) / 2, "the next call draws a new mask");
    free(ad);
    free(bd);
    free(dd);
}

/* The bf16 matmul path (16 queries or more) keeps and drops the weights the float tiles do:
 * its forward and gradients on bfloat16 values match float32's on the same values at the
 * same seed (a weight dropped on one side only would move an output by about 0.07). */
Test(attention, bfloat16_dropout_draws_the_float_kernels_mask)
{
    uint64_t seed = 12;
    const int64_t shapes[3][4] = {{2, 3, 24, 8}, {2, 3, 20, 8}, {2, 3, 20, 6}};
    weft_tensor *x16[3], *x32[3];
    for (int i = 0; i < 3; i++) {
        weft_tensor *r = random_tensor(4, shapes[i], WEFT_F32, &seed);
        x16[i] = weft_to_dtype(r, WEFT_BF16);
        x32[i] = weft_to_dtype(x16[i], WEFT_F32);
        weft_requires_grad_(x16[i], true);
        weft_requires_grad_(x32[i], true);
    }
    struct weft_sdpa_params p = {.dropout_p = 0.3};
    weft_manual_seed(42);
    weft_tensor *a = weft_scaled_dot_product_attention(x16[0], x16[1], x16[2], &p);
    weft_manual_seed(42);
    weft_tensor *b = weft_scaled_dot_product_attention(x32[0], x32[1], x32[2], &p);
    cr_assert(a && b, "%s", weft_error_message());
    double *bd = read_all(b);
    tu_assert_close(a, bd, weft_tensor_numel(b), 2e-2, 2e-2);
    weft_tensor *g = random_tensor(4, (int64_t[]){2, 3, 24, 6}, WEFT_F32, &seed);
    weft_tensor *g16 = weft_to_dtype(g, WEFT_BF16);
    cr_assert_eq(weft_backward(a, g16, false), 0, "%s", weft_error_message());
    cr_assert_eq(weft_backward(b, weft_to_dtype(g16, WEFT_F32), false), 0, "%s",
                 weft_error_message());
    for (int i = 0; i < 3; i++) {
        double *want = read_all(weft_grad(x32[i]));
        tu_assert_close(weft_grad(x16[i]), want, weft_tensor_numel(x32[i]), 3e-2, 3e-2);
        free(want);
    }
    free(bd);
}

Test(attention, dropout_drops_about_p_of_the_weights)
{
    /* q = 0: every weight is 1/S; with v the identity the output is the weights */
    const int64_t B = 4, L = 64, S = 64;
    weft_tensor *q = weft_zeros(3, (int64_t[]){B, L, 8}, WEFT_F32, WEFT_CPU);
    weft_tensor *k = weft_zeros(3, (int64_t[]){B, S, 8}, WEFT_F32, WEFT_CPU);
    weft_tensor *v = weft_eye(S, S, WEFT_F32, WEFT_CPU);
    struct weft_sdpa_params p = {.dropout_p = 0.25};
    weft_manual_seed(7);
    weft_tensor *w = weft_scaled_dot_product_attention(q, k, v, &p);
    double *wd = read_all(w);
    int64_t n = B * L * S, zeros = 0;
    for (int64_t i = 0; i < n; i++) {
        if (wd[i] == 0)
            zeros++;
        else
            cr_assert_float_eq(wd[i], 1.0 / S / 0.75, 1e-6);
    }
    cr_expect(fabs((double)zeros / (double)n - 0.25) < 0.02, "dropped %lld of %lld",
              (long long)zeros, (long long)n);
    free(wd);
}

Test(attention, dropout_backward_matches_finite_differences_with_the_mask_fixed)
{
    struct gc_ctx c = {.p = {.dropout_p = 0.4}, .seed = 99};
    gradcheck_sdpa(&c, 6, 9, 3, 4);
    c.p.is_causal = true;
    gradcheck_sdpa(&c, 9, 6, 3, 4);
}

/* ---- edges and errors --------------------------------------------------------------------- */

Test(attention, a_fully_masked_row_is_nan_as_the_math_path_gives)
{
    uint64_t seed = 21;
    weft_tensor *q = random_tensor(3, (int64_t[]){1, 3, 4}, WEFT_F32, &seed);
    weft_tensor *k = random_tensor(3, (int64_t[]){1, 5, 4}, WEFT_F32, &seed);
    weft_tensor *v = random_tensor(3, (int64_t[]){1, 5, 2}, WEFT_F32, &seed);
    const double mv[15] = {1, 0, 1, 0, 1, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1};
    struct weft_sdpa_params p = {.attn_mask = tu_tensor(2, (int64_t[]){3, 5}, mv, WEFT_BOOL)};
    weft_tensor *a = weft_scaled_dot_product_attention(q, k, v, &p);
    weft_tensor *b = composite(q, k, v, &p);
    double *bd = read_all(b), *ad = read_all(a);
    cr_assert(isnan(ad[2]) && isnan(ad[3]), "row 1 sees no key");
    cr_assert(isnan(bd[2]) && isnan(bd[3]));
    tu_assert_close(a, bd, 6, 1e-6, 1e-6);
    free(ad);
    free(bd);
}

Test(attention, errors_in_pytorchs_words)
{
    uint64_t seed = 1;
    weft_tensor *q = random_tensor(3, (int64_t[]){2, 4, 8}, WEFT_F32, &seed);
    weft_tensor *k = random_tensor(3, (int64_t[]){2, 5, 8}, WEFT_F32, &seed);
    weft_tensor *v = random_tensor(3, (int64_t[]){2, 5, 3}, WEFT_F32, &seed);
    weft_tensor *k7 = random_tensor(3, (int64_t[]){2, 5, 7}, WEFT_F32, &seed);
    weft_tensor *v64 = random_tensor(3, (int64_t[]){2, 5, 3}, WEFT_F64, &seed);
    weft_tensor *v6 = random_tensor(3, (int64_t[]){2, 6, 3}, WEFT_F32, &seed);
    weft_tensor *k3 = random_tensor(3, (int64_t[]){3, 5, 8}, WEFT_F32, &seed);
    cr_assert_null(weft_scaled_dot_product_attention(q, k7, v, NULL));
    tu_assert_error(WEFT_ERR_RUNTIME, "expected query [..., L, E], key [..., S, E]");
    cr_assert_null(weft_scaled_dot_product_attention(q, k, v6, NULL));
    tu_assert_error(WEFT_ERR_RUNTIME, "value [..., S, Ev], got [2, 4, 8], [2, 5, 8] and [2, 6, 3]");
    cr_assert_null(weft_scaled_dot_product_attention(q, k, v64, NULL));
    tu_assert_error(WEFT_ERR_RUNTIME, "Expected query, key, and value to have the same dtype, "
                                      "but got query.dtype: float32 key.dtype: float32 and "
                                      "value.dtype: float64 instead.");
    cr_assert_null(weft_scaled_dot_product_attention(q, k3, v, NULL));
    tu_assert_error(WEFT_ERR_RUNTIME, "The size of tensor a (2) must match the size of tensor b (3)");
    struct weft_sdpa_params p = {.is_causal = true,
                                 .attn_mask = weft_ones(2, (int64_t[]){4, 5}, WEFT_BOOL, WEFT_CPU)};
    cr_assert_null(weft_scaled_dot_product_attention(q, k, v, &p));
    tu_assert_error(WEFT_ERR_RUNTIME, "Explicit attn_mask should not be set when is_causal=True");
    p = (struct weft_sdpa_params){.dropout_p = 1.5};
    cr_assert_null(weft_scaled_dot_product_attention(q, k, v, &p));
    tu_assert_error(WEFT_ERR_VALUE, "dropout probability has to be between 0 and 1, but got 1.5");
    weft_tensor *i64 = weft_zeros(3, (int64_t[]){2, 4, 8}, WEFT_I64, WEFT_CPU);
    cr_assert_null(weft_scaled_dot_product_attention(i64, i64, i64, NULL));
    tu_assert_error(WEFT_ERR_RUNTIME, "expected a floating dtype");
    cr_assert_null(weft_scaled_dot_product_attention(weft_zeros(1, (int64_t[]){8}, WEFT_F32,
                                                                WEFT_CPU), k, v, NULL));
    tu_assert_error(WEFT_ERR_RUNTIME, "at least 2 dims");
    /* a NULL input passes the first error on */
    cr_assert_null(weft_scaled_dot_product_attention(NULL, k, v, NULL));
}

Test(attention, the_kernel_checks_its_contract)
{
    uint64_t seed = 1;
    weft_tensor *q = random_tensor(3, (int64_t[]){2, 4, 8}, WEFT_F32, &seed);
    weft_tensor *k = random_tensor(3, (int64_t[]){1, 5, 8}, WEFT_F32, &seed);
    weft_tensor *out = weft_empty(3, (int64_t[]){2, 4, 8}, WEFT_F32, WEFT_CPU);
    weft_tensor *lse = weft_empty(2, (int64_t[]){2, 4}, WEFT_F32, WEFT_CPU);
    struct weft_sdpa_kernel_params kp = {.scale = 1};
    struct weft_op_call c = {.op = weft_op_register(WEFT_OP_SDPA_FLASH_NAME), .nin = 3, .nout = 2,
                             .in = {q, k, k}, .out = {out, lse}, .params = &kp,
                             .params_size = sizeof kp};
    cr_assert_lt(weft_dispatch(&c), 0, "k's batch dims are not expanded");
    tu_assert_error(WEFT_ERR_RUNTIME, "expected key with the query's batch dims");
    c.in[1] = c.in[2] = q;
    c.params_size = 8;
    cr_assert_lt(weft_dispatch(&c), 0);
    tu_assert_error(WEFT_ERR_RUNTIME, "expected struct weft_sdpa_kernel_params");
    c.params_size = sizeof kp;
    c.out[1] = weft_empty(2, (int64_t[]){2, 4}, WEFT_F64, WEFT_CPU);
    cr_assert_lt(weft_dispatch(&c), 0);
    tu_assert_error(WEFT_ERR_RUNTIME, "logsumexp [..., L] of float32");
    c.out[1] = lse;
    cr_assert_eq(weft_dispatch(&c), 0, "%s", weft_error_message());
}
