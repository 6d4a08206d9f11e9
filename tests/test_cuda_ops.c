/* tests/test_cuda_ops.c: the cuda kernels no conformance driver reaches, against the cpu's
 * on the same inputs, forward and backward: floor_divide and remainder, scatter and
 * scatter_reduce, layer_norm (the warp and block paths), GELU and linear+GELU, scaled
 * dot-product attention (one and several key tiles, causal, masks, dropout, head dims up
 * to 128), embedding's backward with repeated indices, fills of strided views, the
 * recurrent layers (RNN tanh/relu, GRU, LSTM with a projection, two layers both ways,
 * packed lengths), and cumsum, cumprod, sort and topk (ties, NaN, strided lines). Each
 * case runs a function of some inputs on the cpu and on cuda copies, then the gradients
 * of sum(output * w) for a random w. Skips (saying why) where no CUDA device runs;
 * tests/cuda_emu runs it on the emulated device. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <weft/nn.h>
#include <weft/rnn.h>

#include "testutil.h"

/* Each test's tensors live in a scope of its own. */
static void setup(void)
{
    tu_setup();
    weft_scope_push();
}

static void teardown(void)
{
    weft_scope_pop();
    tu_teardown();
}

TestSuite(cuda_ops, .init = setup, .fini = teardown);

static void require_cuda(void)
{
    if (weft_plugin_load("cuda") != 0) {
        fprintf(stderr, "cuda_ops checks skipped: %s\n", weft_error_message());
        weft_error_clear();
        cr_skip_test("no CUDA device here");
    }
}

static weft_tensor *to(weft_tensor *t, weft_device dev)
{
    weft_tensor *c = weft_to_device(t, dev);
    cr_assert_not_null(c, "%s", weft_error_message());
    return c;
}

static weft_tensor *rnd(int ndim, const int64_t *shape, enum weft_dtype dt, double lo, double hi,
                        uint64_t seed)
{
    return tu_random_tensor(ndim, shape, dt, lo, hi, &seed, NULL);
}

static void compare(const char *what, const weft_tensor *got, const weft_tensor *want, double tol)
{
    cr_assert_not_null(want, "%s (cpu): %s", what, weft_error_message());
    cr_assert_not_null(got, "%s (cuda): %s", what, weft_error_message());
    int64_t n = weft_tensor_numel(want);
    cr_assert_eq(weft_tensor_numel(got), n, "%s: numel", what);
    double *x = malloc(sizeof(double) * (size_t)(n + 1)), *y = malloc(sizeof(double) * (size_t)(n + 1));
    tu_read(got, x);
    tu_read(want, y);
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < n; i++) {
        bool ok = (isnan(x[i]) && isnan(y[i])) || x[i] == y[i] ||
                  fabs(x[i] - y[i]) <= tol * (1 + fabs(y[i]));
        if (!ok && bad++ == 0)
            first = i;
    }
    cr_expect_eq(bad, 0, "%s: %lld of %lld differ, first [%lld]: cuda %.9g, cpu %.9g", what,
                 (long long)bad, (long long)n, (long long)first, first >= 0 ? x[first] : 0.0,
                 first >= 0 ? y[first] : 0.0);
    free(x), free(y);
}

/* A function of n inputs on one device. */
typedef weft_tensor *(*fn_t)(weft_tensor **in, const void *ctx);

/* fn on the cpu inputs and on their cuda copies: the outputs, and when grads (a bit per
 * input) is not 0, the gradients of sum(out * w) w.r.t. those inputs. */
static void check(const char *what, fn_t fn, const void *ctx, int n, weft_tensor **cpu,
                  unsigned grads, double tol)
{
    weft_scope_push();
    weft_tensor *in[2][32], *out[2];
    for (int d = 0; d < 2; d++) {
        weft_device dev = d ? tu_cuda(0) : WEFT_CPU;
        for (int i = 0; i < n; i++) {
            in[d][i] = cpu[i] ? weft_clone(d ? to(cpu[i], dev) : cpu[i]) : NULL;
            if (in[d][i] && (grads >> i & 1))
                cr_assert_eq(weft_requires_grad_(in[d][i], true), 0, "%s", weft_error_message());
        }
        out[d] = fn(in[d], ctx);
        cr_assert_not_null(out[d], "%s on %s: %s", what, d ? "cuda" : "cpu", weft_error_message());
    }
    compare(what, out[1], out[0], tol);
    if (grads) {
        weft_tensor *w = rnd(out[0]->ndim, out[0]->shape, out[0]->dtype, -1, 1, 99);
        for (int d = 0; d < 2; d++) {
            weft_tensor *ww = d ? to(w, tu_cuda(0)) : w;
            weft_tensor *loss = weft_sum(weft_mul(out[d], ww), 0, NULL, false);
            cr_assert_eq(weft_backward(loss, NULL, false), 0, "%s backward on %s: %s", what,
                         d ? "cuda" : "cpu", weft_error_message());
        }
        for (int i = 0; i < n; i++)
            if (grads >> i & 1) {
                char name[160];
                snprintf(name, sizeof name, "%s: grad of input %d", what, i);
                compare(name, weft_grad(in[1][i]), weft_grad(in[0][i]), tol);
            }
    }
    weft_scope_pop();
}

/* ---- floor_divide and remainder ------------------------------------------------------------ */

static weft_tensor *fdiv(weft_tensor **in, const void *ctx)
{
    return *(const int *)ctx ? weft_remainder(in[0], in[1]) : weft_floor_divide(in[0], in[1]);
}

Test(cuda_ops, floor_divide_and_remainder_round_toward_minus_infinity_as_the_cpu)
{
    require_cuda();
    const enum weft_dtype dts[] = {WEFT_I8, WEFT_I32, WEFT_I64, WEFT_F32, WEFT_F64};
    int64_t s[2] = {13, 17};
    for (size_t d = 0; d < sizeof dts / sizeof *dts; d++)
        for (int rem = 0; rem < 2; rem++) {
            weft_tensor *in[2] = {rnd(2, s, dts[d], -60, 60, 1 + d), rnd(2, s, dts[d], 1, 9, 2 + d)};
            /* negative divisors too */
            in[1] = weft_mul(in[1], weft_sub_scalar(weft_mul_scalar(weft_remainder_scalar(
                rnd(2, s, WEFT_I64, 0, 2, 3), 2), 2), 1));
            in[1] = weft_to_dtype(in[1], dts[d]);
            check(rem ? "remainder" : "floor_divide", fdiv, &rem, 2, in, 0,
                  weft_dtype_is_floating(dts[d]) ? 1e-6 : 0);
        }
    /* an integer division by zero cannot fail from a kernel: 0 (kernels_divmod.cu says so;
     * PyTorch's CUDA kernels give garbage), where the cpu raises ZeroDivisionError */
    weft_scope_push();
    int64_t two = 2;
    weft_tensor *a = to(tu_tensor(1, &two, (double[]){5, 7}, WEFT_I32), tu_cuda(0));
    weft_tensor *z = to(tu_tensor(1, &two, (double[]){2, 0}, WEFT_I32), tu_cuda(0));
    tu_assert_close(weft_floor_divide(a, z), (double[]){2, 0}, 2, 0, 0);
    tu_assert_close(weft_remainder(a, z), (double[]){1, 0}, 2, 0, 0);
    weft_scope_pop();
}

/* ---- scatter and scatter_reduce -------------------------------------------------------------- */

struct scatter_ctx {
    int dim, kind; /* kind 0 scatter, 1 scatter_value, 2.. scatter_reduce */
    const char *reduce;
    bool include_self;
    weft_tensor *index[2]; /* the index on the cpu and on cuda */
};

static weft_tensor *scatter_fn(weft_tensor **in, const void *ctx)
{
    const struct scatter_ctx *c = ctx;
    weft_tensor *index = in[0]->device.type == WEFT_DEVICE_CPU ? c->index[0] : c->index[1];
    if (c->kind == 0)
        return weft_scatter(in[0], c->dim, index, in[1]);
    if (c->kind == 1)
        return weft_scatter_value(in[0], c->dim, index, 2.5);
    return weft_scatter_reduce(in[0], c->dim, index, in[1], c->reduce, c->include_self);
}

Test(cuda_ops, scatter_and_every_scatter_reduce_match_the_cpu)
{
    require_cuda();
    const char *reduces[] = {"sum", "prod", "mean", "amax", "amin"};
    const enum weft_dtype dts[] = {WEFT_F32, WEFT_F64, WEFT_I32, WEFT_I64};
    int64_t ts[2] = {5, 7}, is[2] = {4, 6};
    for (int dim = 0; dim < 2; dim++) {
        /* unique positions for scatter (the winner of duplicates is unspecified on cuda);
         * duplicates for scatter_reduce, whose cuda kernel walks the cpu's order */
        double uniq[24], dup[24];
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 6; j++) {
                uniq[i * 6 + j] = dim == 0 ? (i + j) % 5 : (i + 2 * j) % 7;
                dup[i * 6 + j] = dim == 0 ? (i * j) % 3 : (i + j) % 4;
            }
        for (size_t d = 0; d < sizeof dts / sizeof *dts; d++)
            for (int k = 0; k < 2 + 10; k++) {
                weft_scope_push();
                struct scatter_ctx c = {.dim = dim, .kind = k < 2 ? k : 2,
                                        .reduce = k < 2 ? NULL : reduces[(k - 2) / 2],
                                        .include_self = (k - 2) % 2 == 0};
                /* the unique index keeps one column in range for dim 1 too */
                weft_tensor *idx = tu_tensor(2, is, k < 2 ? uniq : dup, WEFT_I64);
                c.index[0] = idx;
                c.index[1] = to(idx, tu_cuda(0));
                weft_tensor *in[2] = {rnd(2, ts, dts[d], -4, 4, 10 + k), rnd(2, is, dts[d], -4, 4, 20 + k)};
                char what[96];
                snprintf(what, sizeof what, "%s dim %d %s%s", k == 0 ? "scatter" : k == 1 ? "scatter_value"
                         : c.reduce, dim, weft_dtype_name(dts[d]), k >= 2 && c.include_self ? " include_self" : "");
                check(what, scatter_fn, &c, 2, in, 0, 1e-6);
                weft_scope_pop();
            }
    }
    /* an index out of range: the same error on both */
    weft_scope_push();
    int64_t one[2] = {1, 1};
    weft_tensor *t = weft_zeros(2, ts, WEFT_F32, tu_cuda(0));
    weft_tensor *bad = to(tu_tensor(2, one, (double[]){9}, WEFT_I64), tu_cuda(0));
    cr_expect_null(weft_scatter_value(t, 0, bad, 1.0));
    tu_assert_error(WEFT_ERR_RUNTIME, "out of bounds for dimension 0 with size 5");
    weft_scope_pop();
}

/* ---- layer_norm, GELU, linear+GELU, embedding ---------------------------------------------------- */

static weft_tensor *layer_norm_fn(weft_tensor **in, const void *ctx)
{
    const int64_t *len = ctx;
    return weft_layer_norm(in[0], 1, len, in[1], in[2], 1e-5);
}

Test(cuda_ops, layer_norm_forward_and_backward_on_warp_and_block_paths)
{
    require_cuda();
    const int64_t lens[] = {17, 300, 1000};
    for (size_t l = 0; l < 3; l++)
        for (int dt = 0; dt < 2; dt++)
            for (int affine = 0; affine < 2; affine++) {
                weft_scope_push();
                enum weft_dtype t = dt ? WEFT_F64 : WEFT_F32;
                int64_t xs[2] = {5, lens[l]};
                weft_tensor *in[3] = {rnd(2, xs, t, -2, 2, 30 + l), affine ? rnd(1, &lens[l], t, 0.5, 1.5, 31) : NULL,
                                      affine ? rnd(1, &lens[l], t, -1, 1, 32) : NULL};
                char what[64];
                snprintf(what, sizeof what, "layer_norm [5, %lld] %s%s", (long long)lens[l],
                         weft_dtype_name(t), affine ? " affine" : "");
                check(what, layer_norm_fn, &lens[l], 3, in, affine ? 7 : 1, dt ? 1e-10 : 2e-5);
                weft_scope_pop();
            }
}

/* More rows than the grid's 65536 blocks: a block takes a second row and reuses its shared
 * partials, which block_reduce's second barrier protects. Two warps a row (40 columns). */
Test(cuda_ops, layer_norm_blocks_that_take_a_second_row_reuse_their_shared_memory_safely)
{
    require_cuda();
    int64_t len = 40, xs[2] = {65536 + 64, 40};
    weft_tensor *in[3] = {rnd(2, xs, WEFT_F32, -2, 2, 35), rnd(1, &len, WEFT_F32, 0.5, 1.5, 36),
                          rnd(1, &len, WEFT_F32, -1, 1, 37)};
    check("layer_norm [65600, 40]", layer_norm_fn, &len, 3, in, 0, 2e-5);
}

static weft_tensor *gelu_fn(weft_tensor **in, const void *ctx)
{
    return weft_gelu_approximate(in[0], *(const enum weft_gelu_approximate *)ctx);
}

static weft_tensor *linear_gelu_fn(weft_tensor **in, const void *ctx)
{
    return weft_linear_gelu(in[0], in[1], in[2], *(const enum weft_gelu_approximate *)ctx);
}

Test(cuda_ops, gelu_and_linear_gelu_forward_and_backward)
{
    require_cuda();
    for (int a = 0; a < 2; a++) {
        enum weft_gelu_approximate ap = a ? WEFT_GELU_TANH : WEFT_GELU_NONE;
        int64_t s[2] = {9, 33}, ws[2] = {21, 33}, b = 21;
        weft_tensor *x[1] = {rnd(2, s, WEFT_F32, -3, 3, 40)};
        check(a ? "gelu tanh" : "gelu", gelu_fn, &ap, 1, x, 1, 2e-5);
        weft_tensor *in[3] = {rnd(2, s, WEFT_F32, -1, 1, 41), rnd(2, ws, WEFT_F32, -0.3, 0.3, 42),
                              rnd(1, &b, WEFT_F32, -0.5, 0.5, 43)};
        check(a ? "linear_gelu tanh" : "linear_gelu", linear_gelu_fn, &ap, 3, in, 7, 2e-5);
    }
}

static weft_tensor *embedding_fn(weft_tensor **in, const void *ctx)
{
    weft_tensor *const *idx = ctx;
    return weft_embedding(in[0]->device.type == WEFT_DEVICE_CPU ? idx[0] : idx[1], in[0]);
}

Test(cuda_ops, embedding_backward_sums_repeated_rows_as_the_cpu)
{
    require_cuda();
    int64_t ws[2] = {50, 16}, is[2] = {3, 9};
    double idx[27];
    for (int i = 0; i < 27; i++)
        idx[i] = (i * 7) % 11; /* repeats */
    weft_tensor *ix[2];
    ix[0] = tu_tensor(2, is, idx, WEFT_I64);
    ix[1] = to(ix[0], tu_cuda(0));
    for (int dt = 0; dt < 2; dt++) {
        weft_tensor *w[1] = {rnd(2, ws, dt ? WEFT_F64 : WEFT_F32, -1, 1, 50)};
        check("embedding", embedding_fn, ix, 1, w, 1, 1e-6);
    }
}

/* ---- attention ------------------------------------------------------------------------------------ */

struct sdpa_case {
    int64_t L, S, E, Ev;
    bool causal;
    int mask; /* 0 none, 1 bool, 2 float */
    double dropout;
    weft_tensor *masks[2];
};

static weft_tensor *sdpa_fn(weft_tensor **in, const void *ctx)
{
    const struct sdpa_case *c = ctx;
    struct weft_sdpa_params p = {.is_causal = c->causal, .dropout_p = c->dropout};
    if (c->mask)
        p.attn_mask = in[0]->device.type == WEFT_DEVICE_CPU ? c->masks[0] : c->masks[1];
    if (c->dropout > 0)
        weft_manual_seed(7); /* the same Philox draws on either device */
    return weft_scaled_dot_product_attention(in[0], in[1], in[2], &p);
}

Test(cuda_ops, attention_forward_and_backward_match_the_cpu)
{
    require_cuda();
    struct sdpa_case cases[] = {
        {5, 7, 8, 8, false, 0, 0},    {70, 66, 40, 24, false, 0, 0}, /* two key tiles */
        {70, 70, 32, 32, true, 0, 0}, {9, 9, 100, 100, false, 0, 0}, /* head dim 128 */
        {12, 10, 16, 16, false, 1, 0}, {12, 10, 16, 16, false, 2, 0},
        {20, 20, 16, 16, false, 0, 0.25},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++)
        for (int dt = 0; dt < 2; dt++) {
            weft_scope_push();
            struct sdpa_case *c = &cases[k];
            enum weft_dtype t = dt ? WEFT_F64 : WEFT_F32;
            int64_t qs[4] = {2, 3, c->L, c->E}, ks[4] = {2, 3, c->S, c->E}, vs[4] = {2, 3, c->S, c->Ev};
            int64_t ms[2] = {c->L, c->S};
            if (c->mask) {
                c->masks[0] = c->mask == 1 ? weft_gt_scalar(rnd(2, ms, WEFT_F32, 0, 1, 60), 0.3)
                                           : rnd(2, ms, t, -1, 1, 61);
                c->masks[1] = to(c->masks[0], tu_cuda(0));
            }
            weft_tensor *in[3] = {rnd(4, qs, t, -1, 1, 62 + k), rnd(4, ks, t, -1, 1, 63 + k),
                                  rnd(4, vs, t, -1, 1, 64 + k)};
            char what[96];
            snprintf(what, sizeof what, "sdpa L %lld S %lld E %lld Ev %lld%s%s%s %s",
                     (long long)c->L, (long long)c->S, (long long)c->E, (long long)c->Ev,
                     c->causal ? " causal" : "", c->mask == 1 ? " bool mask" : c->mask ? " float mask" : "",
                     c->dropout > 0 ? " dropout" : "", weft_dtype_name(t));
            check(what, sdpa_fn, c, 3, in, 7, dt ? 1e-10 : 5e-5);
            weft_scope_pop();
        }
}

/* ---- fills of strided views ------------------------------------------------------------------------ */

Test(cuda_ops, fill_writes_only_the_elements_of_a_strided_view)
{
    require_cuda();
    const enum weft_dtype dts[] = {WEFT_BOOL, WEFT_U8, WEFT_I16, WEFT_F16, WEFT_F32, WEFT_F64};
    int64_t s[2] = {9, 14};
    for (size_t d = 0; d < sizeof dts / sizeof *dts; d++)
        for (int zero = 0; zero < 2; zero++) {
            weft_scope_push();
            weft_tensor *base[2];
            base[0] = rnd(2, s, dts[d], 0, 5, 70 + d);
            base[1] = to(base[0], tu_cuda(0));
            for (int k = 0; k < 2; k++) {
                weft_tensor *v = weft_t(weft_slice(base[k], 1, 1, 14, 3)); /* every third column */
                struct weft_op_call c = {.op = WEFT_OP_FILL, .nout = 1, .out = {v}};
                c.scalar[0] = zero ? 0 : 3;
                cr_assert_eq(weft_dispatch(&c), 0, "%s", weft_error_message());
            }
            compare(weft_dtype_name(dts[d]), base[1], base[0], 0);
            weft_scope_pop();
        }
}

/* ---- recurrent layers -------------------------------------------------------------------------------- */

struct rnn_case {
    struct weft_rnn_options o;
    int nweights;
    bool lengths;
};

static weft_tensor *rnn_fn(weft_tensor **in, const void *ctx)
{
    const struct rnn_case *c = ctx;
    struct weft_rnn_input ri = {.input = in[0]};
    double lens[3] = {6, 3, 5};
    int64_t three = 3;
    if (c->lengths)
        ri.lengths = tu_tensor(1, &three, lens, WEFT_I64);
    struct weft_rnn_result r;
    if (weft_rnn(&c->o, in + 1, true, &ri, &r) != 0)
        return NULL;
    return r.output;
}

Test(cuda_ops, recurrent_layers_forward_and_backward_match_the_cpu)
{
    require_cuda();
    const int modes[] = {WEFT_RNN_TANH, WEFT_RNN_RELU, WEFT_RNN_GRU, WEFT_RNN_LSTM, WEFT_RNN_LSTM};
    for (size_t m = 0; m < sizeof modes / sizeof *modes; m++)
        for (int dt = 0; dt < 2; dt++) {
            weft_scope_push();
            enum weft_dtype t = dt ? WEFT_F64 : WEFT_F32;
            struct rnn_case c = {.o = weft_rnn_defaults(modes[m], 4, 6)};
            bool proj = m == 4;
            if (proj)
                c.o.proj_size = 3;
            c.o.num_layers = 2;
            c.o.bidirectional = m % 2 == 0;
            c.lengths = m >= 2;
            int64_t T = 6, B = 3, I = 4, H = 6, P = proj ? 3 : 6, D = c.o.bidirectional ? 2 : 1;
            int64_t G = modes[m] == WEFT_RNN_LSTM ? 4 : modes[m] == WEFT_RNN_GRU ? 3 : 1;
            weft_tensor *in[33];
            int64_t xs[3] = {T, B, I};
            in[0] = rnd(3, xs, t, -1, 1, 80 + m);
            int n = 1;
            for (int layer = 0; layer < 2; layer++)
                for (int64_t dir = 0; dir < D; dir++) {
                    int64_t in_size = layer == 0 ? I : D * P;
                    int64_t wih[2] = {G * H, in_size}, whh[2] = {G * H, P}, bs = G * H, whr[2] = {P, H};
                    in[n] = rnd(2, wih, t, -0.4, 0.4, 90 + n), n++;
                    in[n] = rnd(2, whh, t, -0.4, 0.4, 90 + n), n++;
                    in[n] = rnd(1, &bs, t, -0.4, 0.4, 90 + n), n++;
                    in[n] = rnd(1, &bs, t, -0.4, 0.4, 90 + n), n++;
                    if (proj)
                        in[n] = rnd(2, whr, t, -0.4, 0.4, 90 + n), n++;
                }
            char what[80];
            snprintf(what, sizeof what, "rnn mode %d%s%s%s %s", modes[m], proj ? " proj" : "",
                     c.o.bidirectional ? " bidirectional" : "", c.lengths ? " lengths" : "",
                     weft_dtype_name(t));
            /* every input and weight's gradient (n <= 32 bits) */
            check(what, rnn_fn, &c, n, in, (unsigned)((1ull << n) - 1), dt ? 1e-10 : 3e-5);
            weft_scope_pop();
        }
}

/* ---- cumsum, cumprod, sort and topk ---------------------------------------------------------------- */

/* [37, 29] with ties (a pattern of 11 values), zeros, and with nans a NaN every 13th
 * element of a floating dtype: sort's stable order and NaN's place, cumprod's zeros. */
static weft_tensor *ties(enum weft_dtype dt, bool nans)
{
    int64_t s[2] = {37, 29};
    double v[37 * 29];
    bool floating = weft_dtype_is_floating(dt);
    for (int i = 0; i < 37 * 29; i++)
        v[i] = dt == WEFT_BOOL             ? i % 3 == 0
               : floating && nans && i % 13 == 5 ? NAN
               : (i * 7 % 11 - (dt == WEFT_U8 ? 0 : 5)) * (floating ? 0.25 : 1);
    return tu_tensor(2, s, v, dt);
}

struct scan_ctx {
    int dim;
    bool prod, transposed; /* transposed: the lines of a transposed view (other strides) */
};

static weft_tensor *scan_fn(weft_tensor **in, const void *ctx)
{
    const struct scan_ctx *c = ctx;
    weft_tensor *x = c->transposed ? weft_t(in[0]) : in[0];
    return c->prod ? weft_cumprod(x, c->dim) : weft_cumsum(x, c->dim);
}

Test(cuda_ops, cumsum_and_cumprod_match_the_cpu_along_either_dim_of_strided_views)
{
    require_cuda();
    const enum weft_dtype dts[] = {WEFT_BOOL, WEFT_I32, WEFT_I64, WEFT_F16, WEFT_BF16, WEFT_F32, WEFT_F64};
    for (size_t d = 0; d < sizeof dts / sizeof *dts; d++)
        for (int k = 0; k < 8; k++) {
            weft_scope_push();
            struct scan_ctx c = {.dim = k & 1, .prod = k >> 1 & 1, .transposed = k >> 2 & 1};
            weft_tensor *in[1] = {ties(dts[d], false)};
            char what[80];
            snprintf(what, sizeof what, "%s dim %d %s%s", c.prod ? "cumprod" : "cumsum", c.dim,
                     weft_dtype_name(dts[d]), c.transposed ? " transposed" : "");
            /* float64 backward too (cumprod's through its zeros) */
            bool f64 = dts[d] == WEFT_F64;
            check(what, scan_fn, &c, 1, in, f64, f64 ? 1e-12 : dts[d] == WEFT_F32 ? 1e-6 : 1e-2);
            weft_scope_pop();
        }
}

static weft_tensor *sort_values_fn(weft_tensor **in, const void *ctx)
{
    weft_tensor *v = NULL;
    return weft_sort(in[0], *(const int *)ctx, true, &v, NULL) == 0 ? v : NULL;
}

Test(cuda_ops, sort_and_topk_match_the_cpu_with_ties_and_nans_in_order)
{
    require_cuda();
    const enum weft_dtype dts[] = {WEFT_BOOL, WEFT_U8, WEFT_I16, WEFT_I32, WEFT_I64,
                                   WEFT_F16, WEFT_BF16, WEFT_F32, WEFT_F64};
    for (size_t d = 0; d < sizeof dts / sizeof *dts; d++)
        for (int k = 0; k < 16; k++) {
            int dim = k & 1;
            bool descending = k >> 1 & 1, transposed = k >> 2 & 1, topk = k >> 3 & 1;
            if (topk && dts[d] == WEFT_BOOL) /* refused on both, as PyTorch does */
                continue;
            weft_scope_push();
            weft_tensor *x = ties(dts[d], true), *v[2], *i[2];
            for (int dev = 0; dev < 2; dev++) {
                weft_tensor *t = dev ? to(x, tu_cuda(0)) : x;
                t = transposed ? weft_t(t) : t;
                int rc = topk ? weft_topk(t, 5, dim, descending, &v[dev], &i[dev])
                              : weft_sort(t, dim, descending, &v[dev], &i[dev]);
                cr_assert_eq(rc, 0, "%s", weft_error_message());
            }
            char what[96];
            snprintf(what, sizeof what, "%s dim %d %s%s%s", topk ? "topk 5" : "sort", dim,
                     weft_dtype_name(dts[d]), descending ? " descending" : "",
                     transposed ? " transposed" : "");
            compare(what, v[1], v[0], 0);
            strcat(what, ": indices");
            compare(what, i[1], i[0], 0);
            weft_scope_pop();
        }
    /* the gradient goes back to where each value came from */
    for (int dim = 0; dim < 2; dim++) {
        weft_tensor *in[1] = {ties(WEFT_F64, false)};
        check("sort backward", sort_values_fn, &dim, 1, in, 1, 0);
    }
}

TU_MAIN_SKIPPED_WHEN_ALL_SKIP("cuda_ops")
