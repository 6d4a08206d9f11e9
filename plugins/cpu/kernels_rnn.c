/* plugins/cpu/kernels_rnn.c: rnn_layer and rnn_layer_backward (weft/kernel.h), one layer
 * and direction of RNN (tanh, relu), LSTM (with proj_size) and GRU over a whole
 * sequence, float32 and float64.
 *
 * The input projection of every step arrives as one tensor (the caller's one GEMM). Each
 * step is then one recurrent GEMM into a scratch matrix allocated once per call and one
 * gate pass over the batch rows (rows split across threads) that adds the projection and
 * b_hh, applies the nonlinearities and writes the state; nothing is allocated per step.
 * The backward walks the steps in the opposite order: one gate pass turning the gradient
 * of h (and c) into the gradient of the pre-activations, reusing the saved activations,
 * then one GEMM for the gradient reaching the previous state. Rows past their length are
 * not steps: their state, and in the backward their gradient, pass through. */
#pragma GCC optimize("no-trapping-math")
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "fast_math.h"

struct rnn_job {
    const struct weft_rnn_kernel_params *p;
    int mode;
    int64_t T, B, H, P, GH;
    const int64_t *len;
    const char *gi, *bhh, *hprev, *cprev;
    char *gates, *cs, *aux, *hs, *out; /* step t's rows */
    char *S;                           /* scratch [B, GH]: the step's recurrent GEMM */
    /* backward */
    const char *gout;            /* step t's rows of grad_out, or NULL */
    char *dh, *dc;               /* running gradients of the state [B, P], [B, H] */
    char *dht;                   /* [B, P]: dh + grad_out[t] */
    const char *dhr;             /* [B, H]: gradient of o * tanh(c) (dht when no proj) */
    char *ggi, *ggh, *direct;    /* step t's rows of grad_gi, grad_gh; GRU's z * dh [B, H] */
    char *gh;                    /* step t's rows of grad_h, or NULL */
    int64_t t;
};

static bool active(const struct rnn_job *j, int64_t b)
{
    return !j->len || j->t < j->len[b];
}

static inline float sigmoid_f32(float x)
{
    return 1.0f / (1.0f + exp_f32(-x));
}
static inline double sigmoid_f64(double x)
{
    return 1.0 / (1.0 + exp(-x));
}
static inline float tanh_act_f32(float x)
{
    return tanh_f32(x);
}
static inline double tanh_act_f64(double x)
{
    return tanh(x);
}

typedef void (*rows_fn)(void *ctx, int64_t b0, int64_t b1);
struct rnn_fns {
    rows_fn forward, proj, dht, backward, dh;
};
#define DT f32
#define T float
#include "rnn_rows.inc"
#undef DT
#undef T
#define DT f64
#define T double
#include "rnn_rows.inc"
#undef DT
#undef T

/* C [M, N] = A [M, K] op(B), row-major and contiguous; op(B) = B^T of a stored [N, K]
 * when trans_b, else B stored [K, N]. */
static int gemm(enum weft_dtype dt, bool trans_b, int64_t M, int64_t N, int64_t K,
                const void *A, const void *Bm, void *C)
{
    if (dt == WEFT_F32) {
        struct cpu_gemm g = {.trans_b = trans_b, .M = (int)M, .N = (int)N, .K = (int)K,
                             .lda = (int)K, .ldb = trans_b ? (int)K : (int)N, .ldc = (int)N,
                             .A = A, .B = Bm, .C = C};
        return cpu_sgemm(&g);
    }
    cblas_dgemm(CblasRowMajor, CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, (int)M,
                (int)N, (int)K, 1.0, A, (int)K, Bm, trans_b ? (int)K : (int)N, 0.0, C, (int)N);
    return 0;
}

static void run_rows(rows_fn fn, struct rnn_job *j, int64_t work_per_row)
{
    int64_t grain = CPU_PARALLEL_GRAIN / (work_per_row > 0 ? work_per_row : 1);
    cpu_parallel_for(j->B, grain > 0 ? grain : 1, fn, j);
}

static const char *data(const weft_tensor *t)
{
    return t ? weft_tensor_data(t) : NULL;
}

static bool is(const weft_tensor *t, int ndim, int64_t d0, int64_t d1, int64_t d2,
               enum weft_dtype dt)
{
    const int64_t d[3] = {d0, d1, d2};
    if (!t || t->ndim != ndim || t->dtype != dt || !weft_tensor_is_contiguous(t))
        return false;
    for (int i = 0; i < ndim; i++)
        if (t->shape[i] != d[i])
            return false;
    return true;
}

/* Checks what both kernels read; fills j's sizes. */
static int check_params(const struct weft_op_call *call, const char *op, struct rnn_job *j)
{
    if (!call->params || call->params_size != sizeof(struct weft_rnn_kernel_params))
        return weft_error_set(WEFT_ERR_RUNTIME, "%s: expected struct weft_rnn_kernel_params", op);
    const struct weft_rnn_kernel_params *p = call->params;
    const weft_tensor *gi = call->in[0];
    memset(j, 0, sizeof *j);
    j->p = p;
    j->mode = p->mode;
    j->T = p->T;
    j->B = p->B;
    j->H = p->H;
    j->P = p->P;
    int G = p->mode == WEFT_RNN_LSTM ? 4 : p->mode == WEFT_RNN_GRU ? 3 : 1;
    j->GH = G * p->H;
    enum weft_dtype dt = gi ? gi->dtype : WEFT_F32;
    bool lstm = p->mode == WEFT_RNN_LSTM, gru = p->mode == WEFT_RNN_GRU;
    bool proj = p->w_hr != NULL;
    if (p->mode < WEFT_RNN_TANH || p->mode > WEFT_RNN_GRU || p->T < 1 || p->B < 0 ||
        p->H < 1 || p->P < 1 || (!proj && p->P != p->H) || (proj && !lstm) ||
        !is(gi, 3, p->T, p->B, j->GH, dt) || !is(p->w_hh, 2, j->GH, p->P, 0, dt) ||
        (p->b_hh && !is(p->b_hh, 1, j->GH, 0, 0, dt)) ||
        (proj && !is(p->w_hr, 2, p->P, p->H, 0, dt)) || !is(p->h0, 2, p->B, p->P, 0, dt) ||
        (lstm && !is(p->c0, 2, p->B, p->H, 0, dt)) ||
        (p->lengths && !is(p->lengths, 1, p->B, 0, 0, WEFT_I64)) ||
        !is(p->hs, 3, p->T, p->B, p->P, dt) || ((lstm || gru) && !is(p->gates, 3, p->T, p->B, j->GH, dt)) ||
        (lstm && !is(p->cs, 3, p->T, p->B, p->H, dt)) ||
        ((gru || proj) && !is(p->aux, 3, p->T, p->B, p->H, dt)))
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "%s: expected contiguous operands of one dtype with the shapes "
                              "of struct weft_rnn_kernel_params (mode %d, T %lld, B %lld, H "
                              "%lld, P %lld)",
                              op, p->mode, (long long)p->T, (long long)p->B, (long long)p->H,
                              (long long)p->P);
    if (p->lengths) {
        j->len = (const int64_t *)weft_tensor_data(p->lengths);
        for (int64_t b = 0; b < p->B; b++)
            if (j->len[b] < 1 || j->len[b] > p->T)
                return weft_error_set(WEFT_ERR_VALUE, "%s: length %lld of row %lld is not in "
                                                      "[1, %lld]", op, (long long)j->len[b],
                                      (long long)b, (long long)p->T);
    }
    return 0;
}

/* The row pointer of [T, B, n] tensor t at step s. */
static char *step(const weft_tensor *t, int64_t s, int64_t B, int64_t n)
{
    return t ? (char *)weft_tensor_data(t) + (size_t)(s * B * n) * weft_dtype_size(t->dtype) : NULL;
}

static const struct rnn_fns *fns_for(enum weft_dtype dt, const char *op)
{
    if (dt == WEFT_F32)
        return &fns_f32;
    if (dt == WEFT_F64)
        return &fns_f64;
    weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "\"%s\" not implemented for '%s' on cpu", op,
                   weft_dtype_torch_name(dt));
    return NULL;
}

int cpu_rnn_layer_kernel(const struct weft_op_call *call)
{
    struct rnn_job j;
    int rc = check_params(call, "rnn_layer", &j);
    if (rc)
        return rc;
    const struct weft_rnn_kernel_params *p = call->params;
    const enum weft_dtype dt = call->in[0]->dtype;
    const struct rnn_fns *fn = fns_for(dt, "rnn_layer");
    if (!fn)
        return weft_error_code();
    const int64_t T = j.T, B = j.B, H = j.H, P = j.P, GH = j.GH;
    const size_t isz = weft_dtype_size(dt);
    const bool lstm = p->mode == WEFT_RNN_LSTM;
    if (!is(p->out, 3, T, B, P, dt) || !is(p->h_n, 2, B, P, 0, dt) ||
        (lstm && !is(p->c_n, 2, B, H, 0, dt)))
        return weft_error_set(WEFT_ERR_RUNTIME, "rnn_layer: expected out [T, B, P], h_n [B, P] "
                                                "and c_n [B, H], contiguous");
    if (B == 0)
        return 0;
    /* scratch [B, GH], then a zero b_hh [GH] when there is none */
    char *S = calloc((size_t)(B * GH + GH), isz);
    if (!S)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "rnn_layer: out of memory for the scratch");
    j.S = S;
    j.bhh = p->b_hh ? data(p->b_hh) : S + (size_t)(B * GH) * isz;
    for (int64_t k = 0; k < T && rc == 0; k++) {
        /* gi, hs, gates, cs, aux, out: [T, B, ...], step t's rows; hprev [B, P] */
        int64_t t = p->reverse ? T - 1 - k : k, tp = p->reverse ? t + 1 : t - 1;
        j.t = t;
        j.hprev = k == 0 ? data(p->h0) : step(p->hs, tp, B, P);
        j.cprev = !lstm ? NULL : k == 0 ? data(p->c0) : step(p->cs, tp, B, H);
        j.gi = step(call->in[0], t, B, GH);
        j.gates = step(p->gates, t, B, GH);
        j.cs = step(p->cs, t, B, H);
        j.aux = step(p->aux, t, B, H);
        j.hs = step(p->hs, t, B, P);
        j.out = step(p->out, t, B, P);
        rc = gemm(dt, true, B, GH, P, j.hprev, data(p->w_hh), S);
        if (rc == 0)
            run_rows(fn->forward, &j, 4 * GH);
        if (rc == 0 && p->w_hr) {
            rc = gemm(dt, true, B, P, H, j.aux, data(p->w_hr), j.hs);
            if (rc == 0)
                run_rows(fn->proj, &j, P);
        }
    }
    if (rc == 0) {
        int64_t last = p->reverse ? 0 : T - 1;
        memcpy(weft_tensor_data(p->h_n), step(p->hs, last, B, P), (size_t)(B * P) * isz);
        if (lstm)
            memcpy(weft_tensor_data(p->c_n), step(p->cs, last, B, H), (size_t)(B * H) * isz);
    }
    free(S);
    return rc;
}

int cpu_rnn_layer_backward_kernel(const struct weft_op_call *call)
{
    struct rnn_job j;
    int rc = check_params(call, "rnn_layer_backward", &j);
    if (rc)
        return rc;
    const struct weft_rnn_kernel_params *p = call->params;
    const enum weft_dtype dt = call->in[0]->dtype;
    const struct rnn_fns *fn = fns_for(dt, "rnn_layer_backward");
    if (!fn)
        return weft_error_code();
    const int64_t T = j.T, B = j.B, H = j.H, P = j.P, GH = j.GH;
    const size_t isz = weft_dtype_size(dt);
    const bool lstm = p->mode == WEFT_RNN_LSTM, gru = p->mode == WEFT_RNN_GRU;
    const bool proj = p->w_hr != NULL;
    if ((p->grad_out && !is(p->grad_out, 3, T, B, P, dt)) ||
        (p->grad_hn && !is(p->grad_hn, 2, B, P, 0, dt)) ||
        (p->grad_cn && !is(p->grad_cn, 2, B, H, 0, dt)) || !is(p->grad_gi, 3, T, B, GH, dt) ||
        (gru && !is(p->grad_gh, 3, T, B, GH, dt)) ||
        (proj && !is(p->grad_h, 3, T, B, P, dt)) || !is(p->grad_h0, 2, B, P, 0, dt) ||
        (lstm && !is(p->grad_c0, 2, B, H, 0, dt)))
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "rnn_layer_backward: expected the gradients with the shapes of "
                              "struct weft_rnn_kernel_params, contiguous");
    if (B == 0)
        return 0;
    /* S [B, max(P, H)] the GEMM's result, dht [B, P], direct [B, H] (GRU); dh and dc are
     * grad_h0 and grad_c0, updated in place step by step. */
    int64_t wide = P > H ? P : H;
    char *S = calloc((size_t)(B * (wide + P + H)), isz);
    if (!S)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY,
                              "rnn_layer_backward: out of memory for the scratch");
    j.S = S;
    j.dht = S + (size_t)(B * wide) * isz;
    j.direct = gru ? j.dht + (size_t)(B * P) * isz : NULL;
    j.dh = weft_tensor_data(p->grad_h0);
    j.dc = lstm ? weft_tensor_data(p->grad_c0) : NULL;
    if (p->grad_hn)
        memcpy(j.dh, data(p->grad_hn), (size_t)(B * P) * isz);
    else
        memset(j.dh, 0, (size_t)(B * P) * isz);
    if (lstm) {
        if (p->grad_cn)
            memcpy(j.dc, data(p->grad_cn), (size_t)(B * H) * isz);
        else
            memset(j.dc, 0, (size_t)(B * H) * isz);
    }
    for (int64_t k = T - 1; k >= 0 && rc == 0; k--) {
        /* the forward's k-th step: t, with its previous state at tp (or h0, c0) */
        int64_t t = p->reverse ? T - 1 - k : k, tp = p->reverse ? t + 1 : t - 1;
        j.t = t;
        j.hprev = k == 0 ? data(p->h0) : step(p->hs, tp, B, P);
        j.cprev = !lstm ? NULL : k == 0 ? data(p->c0) : step(p->cs, tp, B, H);
        j.gates = step(p->gates, t, B, GH);
        j.cs = step(p->cs, t, B, H);
        j.aux = step(p->aux, t, B, H);
        j.hs = step(p->hs, t, B, P);
        j.gout = step(p->grad_out, t, B, P);
        j.ggi = step(p->grad_gi, t, B, GH);
        j.ggh = step(p->grad_gh, t, B, GH);
        j.gh = step(p->grad_h, t, B, P);
        run_rows(fn->dht, &j, P);
        j.dhr = j.dht;
        if (proj) {
            rc = gemm(dt, false, B, H, P, j.dht, data(p->w_hr), S);
            j.dhr = S;
        }
        if (rc == 0)
            run_rows(fn->backward, &j, 4 * GH);
        if (rc == 0)
            rc = gemm(dt, false, B, P, GH, gru ? j.ggh : j.ggi, data(p->w_hh), S);
        if (rc == 0)
            run_rows(fn->dh, &j, P);
    }
    free(S);
    return rc;
}
