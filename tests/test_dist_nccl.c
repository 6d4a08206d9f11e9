/* tests/test_dist_nccl.c: weft/dist.h's collectives on cuda tensors through the NCCL
 * transport (weft-dist-nccl.so), under `mpirun -np 2`: every dtype NCCL has with every
 * reduction, int16 refused as torch refuses it, broadcast and all_gather into views, an
 * asynchronous collective with device work queued meanwhile, and the barrier. One
 * Criterion test per mpirun (MPI is initialised once per process), its cases called in
 * the same order on both ranks. Skips, saying why, without a CUDA device or outside
 * mpirun; tests/cuda_emu runs it on two emulated devices, one per rank. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft/dist.h>
#include <weft/ops.h>

#include "dist_values.h"
#include "testutil.h"

TestSuite(dist_nccl, .init = tu_setup, .fini = tu_teardown, .timeout = 300);

static int rank_;

static weft_tensor *on_cuda(weft_tensor *t)
{
    weft_tensor *c = weft_to_device(t, tu_cuda(0));
    cr_assert_not_null(c, "%s", weft_error_message());
    return c;
}

static void read_vals(const weft_tensor *t, double *out)
{
    cr_assert_not_null(t, "%s", weft_error_message());
    tu_read(t, out);
}

static void join(void)
{
    struct weft_dist_env env;
    cr_assert_eq(weft_dist_env_read(&env), 0, "%s", weft_error_message());
    if (env.world_size != 2)
        cr_skip_test("run under mpirun -np 2 (world size here: %d)", env.world_size);
    if (weft_plugin_load("cuda") != 0) {
        fprintf(stderr, "nccl checks skipped: %s\n", weft_error_message());
        weft_error_clear();
        cr_skip_test("no CUDA device here");
    }
    struct weft_dist_init_options o = weft_dist_init_options_default();
    o.backend = "nccl";
    o.timeout_s = 120;
    cr_assert_eq(weft_dist_init_with(&o), 0, "%s", weft_error_message());
    cr_assert_str_eq(weft_dist_backend(), "nccl");
    cr_assert_eq(weft_dist_world_size(), 2);
    rank_ = weft_dist_rank();
}

#define N 7

static const enum weft_dtype dtypes[] = {WEFT_BOOL, WEFT_U8,  WEFT_I8,  WEFT_I32, WEFT_I64,
                                         WEFT_F16,  WEFT_BF16, WEFT_F32, WEFT_F64};

static void case_all_reduce_every_dtype_and_op(void)
{
    const weft_reduce_op ops[] = {WEFT_REDUCE_SUM, WEFT_REDUCE_AVG, WEFT_REDUCE_MAX,
                                  WEFT_REDUCE_MIN};
    for (size_t d = 0; d < sizeof dtypes / sizeof *dtypes; d++)
        for (int k = 0; k < 4; k++) {
            enum weft_dtype dt = dtypes[d];
            if (ops[k] == WEFT_REDUCE_AVG && !weft_dtype_is_floating(dt))
                continue;
            weft_scope_push();
            double in[N], got[N];
            for (int i = 0; i < N; i++)
                in[i] = value(rank_, i, dt);
            int64_t n = N;
            weft_tensor *t = on_cuda(tu_tensor(1, &n, in, dt));
            cr_assert_eq(weft_dist_all_reduce(t, ops[k]), 0, "%s %s: %s", weft_dtype_name(dt),
                         weft_reduce_op_name(ops[k]), weft_error_message());
            read_vals(t, got);
            for (int i = 0; i < N; i++)
                cr_expect_eq(got[i], expected(i, dt, ops[k]), "%s %s [%d]: got %g, expected %g",
                             weft_dtype_name(dt), weft_reduce_op_name(ops[k]), i, got[i],
                             expected(i, dt, ops[k]));
            weft_scope_pop();
        }
}

static void case_int16_has_no_nccl_type(void)
{
    weft_scope_push();
    int64_t n = 2;
    weft_tensor *t = on_cuda(tu_tensor(1, &n, (double[]){1, 2}, WEFT_I16));
    cr_expect_lt(weft_dist_all_reduce(t, WEFT_REDUCE_SUM), 0);
    tu_assert_error(WEFT_ERR_TYPE, "NCCL has no int16 type");
    weft_scope_pop();
}

static void case_broadcast_and_all_gather(void)
{
    weft_scope_push();
    double got[12];
    for (size_t d = 0; d < sizeof dtypes / sizeof *dtypes; d++) {
        int64_t n = 6;
        weft_tensor *t = weft_full(1, &n, rank_ == 1 ? 1 : 0, dtypes[d], tu_cuda(0));
        cr_assert_eq(weft_dist_broadcast(t, 1), 0, "%s: %s", weft_dtype_name(dtypes[d]),
                     weft_error_message());
        read_vals(t, got);
        for (int i = 0; i < 6; i++)
            cr_expect_eq(got[i], 1, "broadcast %s [%d]", weft_dtype_name(dtypes[d]), i);
    }
    /* into a transposed view of a [2, 3] tensor */
    weft_tensor *base = on_cuda(weft_add_scalar(weft_arange(0, 6, 1, WEFT_F64, WEFT_CPU), 10 * rank_));
    weft_tensor *v = weft_t(weft_view(base, 2, (int64_t[]){2, 3}));
    cr_assert_eq(weft_dist_broadcast(v, 1), 0, "%s", weft_error_message());
    read_vals(base, got);
    for (int i = 0; i < 6; i++)
        cr_expect_eq(got[i], i + 10, "broadcast into a view [%d]", i);
    weft_tensor *in = on_cuda(weft_view(
        weft_add_scalar(weft_arange(0, 6, 1, WEFT_I32, WEFT_CPU), 10 * rank_), 2, (int64_t[]){2, 3}));
    weft_tensor *out = weft_zeros(3, (int64_t[]){2, 2, 3}, WEFT_I32, tu_cuda(0));
    cr_assert_eq(weft_dist_all_gather(out, in), 0, "%s", weft_error_message());
    read_vals(out, got);
    for (int k = 0; k < 12; k++)
        cr_expect_eq(got[k], (k / 6) * 10 + k % 6, "all_gather [%d]: got %g", k, got[k]);
    weft_scope_pop();
}

/* Started, device work queued on weft's stream meanwhile, then waited: the results are the
 * blocking calls' and the work's inputs were not disturbed. */
static void case_async_with_device_work_in_between(void)
{
    weft_scope_push();
    int64_t m = 4096;
    weft_tensor *a = weft_full(1, &m, rank_ + 1, WEFT_F32, tu_cuda(0));
    weft_work *w = weft_dist_all_reduce_async(a, WEFT_REDUCE_AVG);
    cr_assert_not_null(w, "%s", weft_error_message());
    int64_t s[2] = {64, 64};
    weft_tensor *x = weft_rand(2, s, WEFT_F32, tu_cuda(0));
    for (int i = 0; i < 4; i++)
        x = weft_tanh(weft_matmul(x, x));
    cr_assert_not_null(x, "%s", weft_error_message());
    cr_assert_eq(weft_work_wait(w), 0, "%s", weft_error_message());
    double v = 0;
    cr_assert_eq(weft_tensor_item(weft_select(a, 0, m - 1), &v), 0);
    cr_expect_eq(v, 1.5);
    cr_assert_eq(weft_dist_barrier(), 0, "%s", weft_error_message());
    weft_scope_pop();
}

Test(dist_nccl, collectives)
{
    join();
    case_all_reduce_every_dtype_and_op();
    case_int16_has_no_nccl_type();
    case_broadcast_and_all_gather();
    case_async_with_device_work_in_between();
    cr_assert_eq(weft_dist_finalize(), 0, "%s", weft_error_message());
}

TU_MAIN_SKIPPED_WHEN_ALL_SKIP("dist_nccl")
