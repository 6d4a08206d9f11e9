/* tests/test_ddp.c: DistributedDataParallel (weft/ddp.h) across two processes.
 *
 * Suite ddp runs under `mpirun -np 2`, one test per mpirun (tests/meson.build): each
 * test's process joins the group in .init and leaves it in .fini, and both ranks call the
 * same collectives in the same order. In a world of one its tests skip. Suite ddp_local
 * runs alone: DDP in a world of one, and argument checks.
 *
 * What two processes must give: rank r trains on rows [16k + 8r, 8) of step k; the
 * reference, computed on each rank alone, takes both halves as two micro-batches whose
 * gradients it sums and halves. With two ranks the all-reduce computes g0 + g1 (the
 * same bits on both ranks, addition commutes) and halves it (exact), as the reference
 * does: the parameters must agree bit for bit after 20 SGD-with-momentum steps. Against
 * one process with the doubled batch (a mean over 16 rows) they agree within rounding.
 */
#include <math.h>
#include <string.h>

#include <weft/ddp.h>
#include <weft/dist.h>
#include <weft/nn.h>
#include <weft/optim.h>

#include "testutil.h"

#define STEPS 20
#define ROWS 16 /* per step, over both ranks */
#define IN 6
#define HIDDEN 5
#define OUT 3

static void setup(void)
{
    tu_setup();
    if (!weft_dist_is_initialized())
        cr_assert_eq(weft_dist_init("auto", 60), 0, "%s", weft_error_message());
}

static void teardown(void)
{
    tu_teardown();
    weft_dist_finalize();
}

#define NEED_TWO_RANKS()                                                                     \
    do {                                                                                     \
        if (weft_dist_world_size() != 2)                                                     \
            cr_skip_test("needs mpirun -np 2 (world size is %d)", weft_dist_world_size());  \
    } while (0)

TestSuite(ddp, .init = setup, .fini = teardown, .timeout = 120);
TestSuite(ddp_local, .init = tu_setup, .fini = tu_teardown);

static weft_module *mlp(int64_t hidden)
{
    weft_module *layers[] = {weft_nn_linear(IN, hidden, true), weft_nn_relu(),
                             weft_nn_linear(hidden, OUT, true)};
    weft_module *m = weft_nn_sequential(3, layers);
    cr_assert(m, "%s", weft_error_message());
    return m;
}

static weft_optimizer *sgd(weft_module *m)
{
    struct weft_named_tensor *named = NULL;
    int n = weft_module_named_parameters(m, &named);
    cr_assert_gt(n, 0);
    weft_tensor *params[8];
    for (int i = 0; i < n; i++)
        params[i] = named[i].tensor;
    free(named);
    weft_options *o = weft_options_new("optimizer", "test_ddp");
    weft_options_set(o, "lr", "0.05");
    weft_options_set(o, "momentum", "0.9");
    weft_optimizer *opt = weft_optimizer_create("sgd", n, params, o);
    weft_options_free(o);
    cr_assert(opt, "%s", weft_error_message());
    return opt;
}

/* m's parameters := src's (rank 0's, once DDP has broadcast them). */
static void copy_parameters(weft_module *dst, weft_module *src)
{
    struct weft_named_tensor *a = NULL, *b = NULL;
    int n = weft_module_named_parameters(dst, &a);
    cr_assert_eq(weft_module_named_parameters(src, &b), n);
    bool prev = weft_no_grad_begin();
    for (int i = 0; i < n; i++)
        cr_assert_eq(weft_copy_(a[i].tensor, b[i].tensor), 0);
    weft_grad_mode_restore(prev);
    free(a);
    free(b);
}

/* max |a - b| over the parameters; *bitwise whether every byte agrees. */
static double parameters_diff(weft_module *a, weft_module *b, bool *bitwise)
{
    struct weft_named_tensor *pa = NULL, *pb = NULL;
    int n = weft_module_named_parameters(a, &pa);
    cr_assert_eq(weft_module_named_parameters(b, &pb), n);
    double worst = 0;
    *bitwise = true;
    for (int i = 0; i < n; i++) {
        int64_t k = weft_tensor_numel(pa[i].tensor);
        const float *x = weft_tensor_data(pa[i].tensor), *y = weft_tensor_data(pb[i].tensor);
        *bitwise &= memcmp(x, y, (size_t)k * sizeof *x) == 0;
        for (int64_t j = 0; j < k; j++)
            worst = fmax(worst, fabs((double)x[j] - (double)y[j]));
    }
    free(pa);
    free(pb);
    return worst;
}

static weft_tensor *rows(weft_tensor *all, int64_t start, int64_t n)
{
    return weft_contiguous(weft_narrow(all, 0, start, n));
}

/* mean squared error of m on rows [start, n) of x, y; backward. */
static void loss_backward(weft_module *m, weft_ddp *ddp, weft_tensor *x, weft_tensor *y,
                          int64_t start, int64_t n)
{
    weft_tensor *xb = rows(x, start, n), *yb = rows(y, start, n);
    weft_tensor *out = ddp ? weft_ddp_forward(ddp, xb) : weft_module_forward(m, xb);
    weft_tensor *loss = weft_mse_loss(out, yb, WEFT_REDUCTION_MEAN);
    cr_assert(loss, "%s", weft_error_message());
    cr_assert_eq(weft_backward(loss, NULL, false), 0, "%s", weft_error_message());
}

static void halve_grads(weft_module *m)
{
    struct weft_named_tensor *p = NULL;
    int n = weft_module_named_parameters(m, &p);
    for (int i = 0; i < n; i++) {
        weft_tensor *g = weft_grad(p[i].tensor);
        cr_assert(g);
        cr_assert(weft_mul_scalar_(g, 0.5));
    }
    free(p);
}

/* DDP over two ranks against the two references, with buckets of bucket_mb. */
static void train_and_compare(double bucket_mb, int expect_buckets)
{
    int rank = weft_dist_rank();
    uint64_t state = 7;
    int64_t xs[2] = {STEPS * ROWS, IN}, ys[2] = {STEPS * ROWS, OUT};
    weft_tensor *x = tu_random_tensor(2, xs, WEFT_F32, -1, 1, &state, NULL);
    weft_tensor *y = tu_random_tensor(2, ys, WEFT_F32, -1, 1, &state, NULL);
    weft_manual_seed(100 + (uint64_t)rank); /* the ranks start apart: DDP must align them */
    weft_module *model = mlp(HIDDEN), *accum = mlp(HIDDEN), *full = mlp(HIDDEN);
    struct weft_ddp_options o = weft_ddp_options_default();
    o.bucket_mb = bucket_mb;
    weft_ddp *ddp = weft_ddp_new(model, &o);
    cr_assert(ddp, "%s", weft_error_message());
    if (expect_buckets > 0)
        cr_assert_eq(weft_ddp_num_buckets(ddp), expect_buckets);
    copy_parameters(accum, model);
    copy_parameters(full, model);
    weft_optimizer *opt = sgd(model), *opt_accum = sgd(accum), *opt_full = sgd(full);
    for (int k = 0; k < STEPS; k++) {
        weft_scope_push();
        loss_backward(model, ddp, x, y, k * ROWS + 8 * rank, 8);
        loss_backward(accum, NULL, x, y, k * ROWS, 8);
        loss_backward(accum, NULL, x, y, k * ROWS + 8, 8);
        halve_grads(accum);
        loss_backward(full, NULL, x, y, k * ROWS, ROWS);
        weft_scope_pop();
        weft_optimizer *opts[] = {opt, opt_accum, opt_full};
        for (int i = 0; i < 3; i++) {
            cr_assert_eq(weft_optimizer_step(opts[i]), 0, "%s", weft_error_message());
            cr_assert_eq(weft_optimizer_zero_grad(opts[i], true), 0);
        }
    }
    bool bitwise;
    double d = parameters_diff(model, accum, &bitwise);
    cr_expect(bitwise, "rank %d: DDP differs from the summed micro-batches by %g", rank, d);
    d = parameters_diff(model, full, &bitwise);
    cr_expect_leq(d, 1e-5, "rank %d: DDP differs from the doubled batch by %g", rank, d);
    struct weft_ddp_stats st = weft_ddp_stats(ddp);
    cr_expect_eq(st.steps, STEPS);
    cr_expect_eq(st.buckets, (int64_t)STEPS * weft_ddp_num_buckets(ddp));
    cr_expect_geq(st.comm_s, 0);
    weft_optimizer_free(opt);
    weft_optimizer_free(opt_accum);
    weft_optimizer_free(opt_full);
    weft_ddp_free(ddp);
    weft_module_free(model);
    weft_module_free(accum);
    weft_module_free(full);
    weft_tensor_release(x);
    weft_tensor_release(y);
}

Test(ddp, two_ranks_match_one_process_with_the_doubled_batch)
{
    NEED_TWO_RANKS();
    train_and_compare(25, 1);
}

Test(ddp, tiny_buckets_give_the_same_parameters)
{
    NEED_TWO_RANKS();
    /* 100 bytes, in reverse order: fc2.bias (12) + fc2.weight (60) + fc1.bias (20) fill
     * the first; fc1.weight (120) is alone in the second */
    train_and_compare(100.0 / 1048576.0, 2);
}

/* Every rank's copy of t, gathered; true when they all equal rank 0's. */
static bool same_on_all_ranks(weft_tensor *t)
{
    int world = weft_dist_world_size();
    int64_t shape[9] = {world};
    memcpy(shape + 1, t->shape, (size_t)t->ndim * sizeof *shape);
    weft_scope_push();
    weft_tensor *all = weft_empty(t->ndim + 1, shape, t->dtype, WEFT_CPU);
    cr_assert_eq(weft_dist_all_gather(all, t), 0, "%s", weft_error_message());
    size_t bytes = (size_t)weft_tensor_numel(t) * weft_dtype_size(t->dtype);
    const char *p = weft_tensor_data(all);
    bool same = true;
    for (int r = 1; r < world; r++)
        same &= memcmp(p, p + (size_t)r * bytes, bytes) == 0;
    weft_scope_pop();
    return same;
}

Test(ddp, parameters_and_buffers_start_from_rank_0)
{
    NEED_TWO_RANKS();
    weft_manual_seed(1 + (uint64_t)weft_dist_rank());
    weft_module *layers[] = {weft_nn_linear(IN, 4, true), weft_nn_batch_norm1d(4, 1e-5, 0.1)};
    weft_module *m = weft_nn_sequential(2, layers);
    weft_tensor *mean = weft_module_buffer(weft_module_child(m, "1"), "running_mean");
    cr_assert(mean);
    ((float *)weft_tensor_data(mean))[0] = (float)weft_dist_rank() + 1; /* apart */
    weft_tensor *w = weft_module_parameter(weft_module_child(m, "0"), "weight");
    cr_assert(!same_on_all_ranks(w), "the seeds should have made the ranks differ");
    weft_ddp *ddp = weft_ddp_new(m, NULL);
    cr_assert(ddp, "%s", weft_error_message());
    cr_expect(same_on_all_ranks(w));
    cr_expect(same_on_all_ranks(mean));
    cr_expect_eq(((float *)weft_tensor_data(mean))[0], 1.0f);
    /* a training forward moves the running statistics apart (each rank its own batch);
     * the next forward starts from rank 0's again */
    uint64_t state = 11 + (uint64_t)weft_dist_rank();
    int64_t xs[2] = {8, IN};
    weft_scope_push();
    weft_tensor *x = tu_random_tensor(2, xs, WEFT_F32, -1, 1, &state, NULL); /* scoped */
    cr_assert(weft_ddp_forward(ddp, x));
    cr_expect(!same_on_all_ranks(mean));
    cr_assert_eq(weft_ddp_sync_buffers(ddp), 0);
    cr_expect(same_on_all_ranks(mean));
    weft_scope_pop();
    weft_ddp_free(ddp);
    weft_module_free(m);
}

Test(ddp, a_different_model_on_one_rank_fails_everywhere_naming_it)
{
    NEED_TWO_RANKS();
    weft_module *m = mlp(weft_dist_rank() == 1 ? HIDDEN + 1 : HIDDEN);
    weft_ddp *ddp = weft_ddp_new(m, NULL);
    cr_expect_null(ddp);
    tu_assert_error(WEFT_ERR_RUNTIME, "the model on rank 1 differs from rank 0's");
    weft_module_free(m);
}

Test(ddp, no_sync_accumulates_locally_then_averages_the_sums)
{
    NEED_TWO_RANKS();
    int rank = weft_dist_rank();
    uint64_t state = 5;
    int64_t xs[2] = {ROWS, IN}, ys[2] = {ROWS, OUT};
    weft_tensor *x = tu_random_tensor(2, xs, WEFT_F32, -1, 1, &state, NULL);
    weft_tensor *y = tu_random_tensor(2, ys, WEFT_F32, -1, 1, &state, NULL);
    weft_module *model = mlp(HIDDEN), *ref = mlp(HIDDEN);
    weft_ddp *ddp = weft_ddp_new(model, NULL);
    cr_assert(ddp);
    copy_parameters(ref, model);
    weft_scope_push();
    weft_ddp_no_sync_begin(ddp);
    loss_backward(model, ddp, x, y, 8 * rank, 4);
    weft_ddp_no_sync_end(ddp);
    cr_expect_eq(weft_ddp_stats(ddp).buckets, 0, "no_sync communicated");
    weft_tensor *w = weft_module_parameter(weft_module_child(model, "0"), "weight");
    cr_expect(!same_on_all_ranks(weft_grad(w)), "local gradients should differ before the sync");
    loss_backward(model, ddp, x, y, 8 * rank + 4, 4);
    cr_expect_eq(weft_ddp_stats(ddp).steps, 1);
    cr_expect(same_on_all_ranks(weft_grad(w)));
    for (int part = 0; part < 4; part++)
        loss_backward(ref, NULL, x, y, 4 * part, 4);
    halve_grads(ref);
    struct weft_named_tensor *a = NULL, *b = NULL;
    int n = weft_module_named_parameters(model, &a);
    weft_module_named_parameters(ref, &b);
    for (int i = 0; i < n; i++) {
        double expect[64];
        weft_tensor *gr = weft_grad(b[i].tensor);
        tu_read(gr, expect);
        tu_assert_close(weft_grad(a[i].tensor), expect, weft_tensor_numel(gr), 1e-6, 1e-7);
    }
    free(a);
    free(b);
    weft_scope_pop();
    weft_ddp_free(ddp);
    weft_module_free(model);
    weft_module_free(ref);
    weft_tensor_release(x);
    weft_tensor_release(y);
}

/* fc -> [fc2 on the ranks in use_fc2]: fc2 is unused on the others. */
static weft_tensor *two_layer_forward(weft_module *m, weft_tensor *x, bool use_fc2)
{
    weft_tensor *h = weft_module_forward(weft_module_child(m, "0"), x);
    return use_fc2 ? weft_module_forward(weft_module_child(m, "1"), h) : h;
}

static void unused_case(bool find_unused, bool rank0_uses, bool rank1_uses)
{
    int rank = weft_dist_rank();
    weft_module *layers[] = {weft_nn_linear(IN, OUT, true), weft_nn_linear(OUT, OUT, true)};
    weft_module *m = weft_nn_sequential(2, layers);
    struct weft_ddp_options o = weft_ddp_options_default();
    o.find_unused_parameters = find_unused;
    weft_ddp *ddp = weft_ddp_new(m, &o);
    cr_assert(ddp, "%s", weft_error_message());
    uint64_t state = 3 + (uint64_t)rank;
    int64_t xs[2] = {4, IN};
    weft_scope_push();
    weft_tensor *x = tu_random_tensor(2, xs, WEFT_F32, -1, 1, &state, NULL);
    weft_tensor *out = two_layer_forward(m, x, rank == 0 ? rank0_uses : rank1_uses);
    int rc = weft_backward(weft_sum(out, 0, NULL, false), NULL, false);
    weft_tensor *fc2_w = weft_module_parameter(weft_module_child(m, "1"), "weight");
    weft_tensor *fc1_w = weft_module_parameter(weft_module_child(m, "0"), "weight");
    if (!find_unused) {
        cr_expect_neq(rc, 0);
        tu_assert_error(WEFT_ERR_RUNTIME, "1.weight");
    } else {
        cr_assert_eq(rc, 0, "%s", weft_error_message());
        cr_expect(same_on_all_ranks(weft_grad(fc1_w)));
        if (rank0_uses || rank1_uses)
            cr_expect(weft_grad(fc2_w) && same_on_all_ranks(weft_grad(fc2_w)),
                      "a parameter one rank used gets the average on every rank");
        else
            cr_expect_null(weft_grad(fc2_w), "a parameter no rank used keeps no gradient");
    }
    weft_scope_pop();
    weft_ddp_free(ddp);
    weft_module_free(m);
}

Test(ddp, an_unused_parameter_is_an_error_naming_it)
{
    NEED_TWO_RANKS();
    unused_case(false, false, false);
}

Test(ddp, find_unused_parameters_averages_what_some_rank_used)
{
    NEED_TWO_RANKS();
    unused_case(true, true, false);
    unused_case(true, false, false);
}

Test(ddp_local, a_world_of_one_is_plain_training)
{
    weft_module *m = mlp(HIDDEN);
    weft_ddp *ddp = weft_ddp_new(m, NULL);
    cr_assert(ddp, "%s", weft_error_message());
    uint64_t state = 9;
    int64_t xs[2] = {4, IN}, ys[2] = {4, OUT};
    weft_scope_push();
    weft_tensor *x = tu_random_tensor(2, xs, WEFT_F32, -1, 1, &state, NULL);
    weft_tensor *y = tu_random_tensor(2, ys, WEFT_F32, -1, 1, &state, NULL);
    loss_backward(m, ddp, x, y, 0, 4);
    weft_tensor *w = weft_module_parameter(weft_module_child(m, "0"), "weight");
    cr_expect(weft_grad(w));
    cr_expect_eq(weft_ddp_stats(ddp).steps, 0);
    weft_scope_pop();
    weft_ddp_free(ddp);
    weft_module_free(m);
}

Test(ddp_local, bad_options_are_refused)
{
    weft_module *m = mlp(HIDDEN);
    struct weft_ddp_options o = weft_ddp_options_default();
    o.bucket_mb = 0;
    cr_expect_null(weft_ddp_new(m, &o));
    tu_assert_error(WEFT_ERR_VALUE, "bucket_mb must be > 0");
    cr_expect_null(weft_ddp_new(NULL, NULL));
    tu_assert_error(WEFT_ERR_VALUE, "NULL module");
    weft_module_free(m);
}
