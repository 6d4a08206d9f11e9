/* tests/test_dist.c: weft/dist.h, the process group and its collectives.
 *
 * One binary, run three ways by tests/meson.build:
 *   - plainly, suite dist_local: the launcher's environment, and the world of one that
 *     needs no transport (backend none and auto without a launcher);
 *   - under `mpirun -np 2`, one test at a time (--filter): dist_mpi/collectives (every
 *     dtype and op, views, broadcast, all_gather, async, barrier, argument errors),
 *     dist_mpi/deterministic, dist_mpi/timeout.
 * Criterion runs each test in a child process of its own, and MPI can be initialised once
 * per process: so each MPI test is one Criterion test that initialises and finalizes the
 * group once, its cases being functions it calls in the same order on both ranks.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <weft/dist.h>
#include <weft/ops.h>

#include "dist_values.h"
#include "testutil.h"

#define N 7

static const char *const launcher_vars[] = {
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE", "SLURM_PROCID",
    "SLURM_NTASKS", "SLURM_LOCALID",
};

static void clear_launcher_env(void)
{
    for (size_t i = 0; i < sizeof launcher_vars / sizeof *launcher_vars; i++)
        unsetenv(launcher_vars[i]);
}

static weft_tensor *vec(const double *v, int64_t n, enum weft_dtype dt)
{
    return tu_tensor(1, &n, v, dt);
}

static void read_vals(const weft_tensor *t, double *out)
{
    cr_assert_not_null(t, "%s", weft_error_message());
    tu_read(t, out);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ==== the launcher's environment ========================================================== */

TestSuite(dist_local, .init = tu_setup, .fini = tu_teardown);

Test(dist_local, env_without_launcher_is_a_world_of_one)
{
    clear_launcher_env();
    struct weft_dist_env env;
    cr_assert_eq(weft_dist_env_read(&env), 0);
    cr_assert_eq(env.rank, 0);
    cr_assert_eq(env.world_size, 1);
    cr_assert_eq(env.local_rank, 0);
    cr_assert_eq(env.local_world_size, 1);
    cr_assert_str_eq(env.launcher, "none");
}

Test(dist_local, env_reads_open_mpi)
{
    clear_launcher_env();
    setenv("OMPI_COMM_WORLD_RANK", "3", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);
    setenv("SLURM_PROCID", "0", 1); /* Open MPI's variables come first */
    struct weft_dist_env env;
    cr_assert_eq(weft_dist_env_read(&env), 0, "%s", weft_error_message());
    cr_assert_eq(env.rank, 3);
    cr_assert_eq(env.world_size, 4);
    cr_assert_eq(env.local_rank, 1);
    cr_assert_eq(env.local_world_size, 2);
    cr_assert_str_eq(env.launcher, "openmpi");
}

Test(dist_local, env_reads_pmi_and_slurm)
{
    clear_launcher_env();
    setenv("PMI_RANK", "1", 1);
    setenv("PMI_SIZE", "2", 1);
    struct weft_dist_env env;
    cr_assert_eq(weft_dist_env_read(&env), 0, "%s", weft_error_message());
    cr_assert_eq(env.rank, 1);
    cr_assert_eq(env.world_size, 2);
    cr_assert_str_eq(env.launcher, "pmi");

    clear_launcher_env();
    setenv("SLURM_PROCID", "5", 1);
    setenv("SLURM_NTASKS", "8", 1);
    setenv("SLURM_LOCALID", "1", 1);
    cr_assert_eq(weft_dist_env_read(&env), 0, "%s", weft_error_message());
    cr_assert_eq(env.rank, 5);
    cr_assert_eq(env.world_size, 8);
    cr_assert_eq(env.local_rank, 1);
    cr_assert_str_eq(env.launcher, "slurm");

    clear_launcher_env();
    setenv("PMIX_RANK", "2", 1);
    setenv("SLURM_NTASKS", "4", 1);
    cr_assert_eq(weft_dist_env_read(&env), 0, "%s", weft_error_message());
    cr_assert_eq(env.rank, 2);
    cr_assert_eq(env.world_size, 4);
    cr_assert_str_eq(env.launcher, "pmix");
}

Test(dist_local, env_malformed_values_name_the_variable)
{
    struct weft_dist_env env;
    clear_launcher_env();
    setenv("OMPI_COMM_WORLD_RANK", "one", 1);
    cr_assert_lt(weft_dist_env_read(&env), 0);
    tu_assert_error(WEFT_ERR_VALUE, "OMPI_COMM_WORLD_RANK = 'one'");

    clear_launcher_env();
    setenv("PMI_RANK", "0", 1);
    setenv("PMI_SIZE", "0", 1);
    cr_assert_lt(weft_dist_env_read(&env), 0);
    tu_assert_error(WEFT_ERR_VALUE, "PMI_SIZE = '0'");

    clear_launcher_env();
    setenv("SLURM_PROCID", "4", 1);
    setenv("SLURM_NTASKS", "4", 1);
    cr_assert_lt(weft_dist_env_read(&env), 0);
    tu_assert_error(WEFT_ERR_VALUE, "SLURM_PROCID = 4 is not below the world size 4");
}

/* ==== the world of one ======================================================================= */

Test(dist_local, before_init_it_answers_for_a_world_of_one)
{
    cr_assert_not(weft_dist_is_initialized());
    cr_assert_eq(weft_dist_rank(), 0);
    cr_assert_eq(weft_dist_world_size(), 1);
    cr_assert_str_eq(weft_dist_backend(), "none");
    weft_tensor *t = vec((double[]){1, 2}, 2, WEFT_F32);
    cr_assert_lt(weft_dist_all_reduce(t, WEFT_REDUCE_SUM), 0);
    tu_assert_error(WEFT_ERR_RUNTIME, "not initialized");
    cr_assert_lt(weft_dist_barrier(), 0);
    tu_assert_error(WEFT_ERR_RUNTIME, "not initialized");
    cr_assert_eq(weft_dist_finalize(), 0); /* a no-op */
    weft_tensor_release(t);
}

Test(dist_local, auto_without_a_launcher_needs_no_transport)
{
    clear_launcher_env();
    cr_assert_eq(weft_dist_init("auto", 10), 0, "%s", weft_error_message());
    cr_assert(weft_dist_is_initialized());
    cr_assert_str_eq(weft_dist_backend(), "none");
    cr_assert_eq(weft_dist_rank(), 0);
    cr_assert_eq(weft_dist_world_size(), 1);
    cr_assert_float_eq(weft_dist_timeout_s(), 10.0, 0);
    /* No transport plugin was loaded for it. */
    cr_assert_not(weft_plugin_is_loaded("dist-mpi"));
    cr_assert_eq(weft_dist_init("none", 10), WEFT_ERR_RUNTIME);
    tu_assert_error(WEFT_ERR_RUNTIME, "already initialized with backend none");
    cr_assert_eq(weft_dist_finalize(), 0);
    cr_assert_not(weft_dist_is_initialized());
    /* A world of one may join again. */
    cr_assert_eq(weft_dist_init(NULL, 10), 0, "%s", weft_error_message());
    cr_assert_eq(weft_dist_finalize(), 0);
}

Test(dist_local, collectives_of_a_world_of_one_are_local)
{
    clear_launcher_env();
    cr_assert_eq(weft_dist_init("none", 10), 0, "%s", weft_error_message());
    double v[3];
    weft_tensor *f = vec((double[]){1.5, -2, 3}, 3, WEFT_F32);
    cr_assert_eq(weft_dist_all_reduce(f, WEFT_REDUCE_AVG), 0, "%s", weft_error_message());
    cr_assert_eq(weft_dist_all_reduce(f, WEFT_REDUCE_SUM), 0);
    read_vals(f, v);
    cr_assert(v[0] == 1.5 && v[1] == -2 && v[2] == 3);
    weft_tensor *i = vec((double[]){4, 5, 6}, 3, WEFT_I64);
    cr_assert_eq(weft_dist_all_reduce(i, WEFT_REDUCE_MAX), 0);
    cr_assert_lt(weft_dist_all_reduce(i, WEFT_REDUCE_AVG), 0);
    tu_assert_error(WEFT_ERR_TYPE, "avg needs a floating dtype");
    cr_assert_eq(weft_dist_broadcast(i, 0), 0);
    cr_assert_lt(weft_dist_broadcast(i, 1), 0);
    tu_assert_error(WEFT_ERR_VALUE, "root 1 is not a rank of this world (0 .. 0)");
    read_vals(i, v);
    cr_assert(v[0] == 4 && v[1] == 5 && v[2] == 6);

    weft_tensor *out = weft_zeros(2, (int64_t[]){1, 3}, WEFT_I64, WEFT_CPU);
    cr_assert_eq(weft_dist_all_gather(out, i), 0, "%s", weft_error_message());
    read_vals(out, v);
    cr_assert(v[0] == 4 && v[1] == 5 && v[2] == 6);
    weft_tensor *bad = weft_zeros(2, (int64_t[]){2, 3}, WEFT_I64, WEFT_CPU);
    cr_assert_lt(weft_dist_all_gather(bad, i), 0);
    tu_assert_error(WEFT_ERR_RUNTIME, "out has shape [2, 3] but expected [1, 3]");

    weft_work *w = weft_dist_all_reduce_async(f, WEFT_REDUCE_SUM);
    cr_assert_not_null(w, "%s", weft_error_message());
    cr_assert(weft_work_is_completed(w));
    cr_assert_eq(weft_work_wait(w), 0);
    cr_assert_eq(weft_dist_barrier(), 0);
    cr_assert_eq(weft_dist_finalize(), 0);
    weft_tensor_release(f);
    weft_tensor_release(i);
    weft_tensor_release(out);
    weft_tensor_release(bad);
}

Test(dist_local, bad_init_arguments_are_errors)
{
    clear_launcher_env();
    cr_assert_lt(weft_dist_init("gloo", 10), 0);
    tu_assert_error(WEFT_ERR_VALUE, "backend 'gloo' is not one of auto, mpi, nccl, none");
    cr_assert_lt(weft_dist_init("none", 0), 0);
    tu_assert_error(WEFT_ERR_VALUE, "timeout_s = 0");
    setenv("OMPI_COMM_WORLD_RANK", "0", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
    cr_assert_lt(weft_dist_init("none", 10), 0);
    tu_assert_error(WEFT_ERR_VALUE, "backend none cannot join a world of 2 processes");
    cr_assert_not(weft_dist_is_initialized());
    cr_assert_lt(weft_work_wait(NULL), 0);
    tu_assert_error(WEFT_ERR_VALUE, "NULL");
}

Test(dist_local, the_mpi_communicator_is_found_by_its_manifest)
{
    const struct weft_communicator *c = weft_registry_get(WEFT_KIND_COMMUNICATOR, "mpi");
    if (!c && strstr(weft_error_message(), "mpi")) {
        weft_error_clear();
        cr_skip_test("weft-dist-mpi.so is not built here (no MPI)");
    }
    cr_assert_not_null(c, "%s", weft_error_message());
    cr_assert_str_eq(c->base.name, "mpi");
    cr_assert_not_null(strstr(c->description, "host tensors"));
}

Test(dist_local, abort_prints_and_exits_with_the_code, .exit_code = 3)
{
    clear_launcher_env();
    cr_assert_eq(weft_dist_init("none", 10), 0);
    weft_dist_abort(3, "stopping on purpose");
}

/* ==== two processes under mpirun ================================================================ */

static int rank_, world_;

/* Joins the world of two that mpirun started, or skips (the plain run filters these out). */
/* Joins a world of `size` processes (the test is skipped under another mpirun -np). */
static void join_n(bool deterministic, double timeout_s, int size)
{
    struct weft_dist_env env;
    cr_assert_eq(weft_dist_env_read(&env), 0, "%s", weft_error_message());
    if (env.world_size != size)
        cr_skip_test("run under mpirun -np %d (world size here: %d)", size, env.world_size);
    struct weft_dist_init_options o = weft_dist_init_options_default();
    o.backend = "mpi";
    o.timeout_s = timeout_s;
    o.deterministic = deterministic;
    cr_assert_eq(weft_dist_init_with(&o), 0, "%s", weft_error_message());
    rank_ = weft_dist_rank();
    world_ = weft_dist_world_size();
    cr_assert_eq(world_, size);
    cr_assert_eq(rank_, env.rank);
    cr_assert_str_eq(weft_dist_backend(), "mpi");
    cr_assert_eq(weft_dist_deterministic(), deterministic);
}

static void join(bool deterministic, double timeout_s)
{
    join_n(deterministic, timeout_s, 2);
}

static void leave(void)
{
    cr_assert_eq(weft_dist_finalize(), 0, "%s", weft_error_message());
}

TestSuite(dist_mpi, .init = tu_setup, .fini = tu_teardown, .timeout = 120);

static const enum weft_dtype all_dtypes[] = {WEFT_BOOL, WEFT_U8,  WEFT_I8,   WEFT_I16, WEFT_I32,
                                             WEFT_I64,  WEFT_F16, WEFT_BF16, WEFT_F32, WEFT_F64};

static void case_all_reduce_every_dtype_and_op(void)
{
    const weft_reduce_op ops[] = {WEFT_REDUCE_SUM, WEFT_REDUCE_AVG, WEFT_REDUCE_MAX,
                                  WEFT_REDUCE_MIN};
    for (size_t d = 0; d < sizeof all_dtypes / sizeof *all_dtypes; d++) {
        enum weft_dtype dt = all_dtypes[d];
        for (int k = 0; k < 4; k++) {
            if (ops[k] == WEFT_REDUCE_AVG && !weft_dtype_is_floating(dt))
                continue;
            double in[N], got[N];
            for (int i = 0; i < N; i++)
                in[i] = value(rank_, i, dt);
            weft_tensor *t = vec(in, N, dt);
            cr_assert_eq(weft_dist_all_reduce(t, ops[k]), 0, "%s %s: %s",
                         weft_dtype_name(dt), weft_reduce_op_name(ops[k]), weft_error_message());
            read_vals(t, got);
            for (int i = 0; i < N; i++)
                cr_assert_eq(got[i], expected(i, dt, ops[k]), "%s %s [%d]: got %g, expected %g",
                             weft_dtype_name(dt), weft_reduce_op_name(ops[k]), i, got[i],
                             expected(i, dt, ops[k]));
            weft_tensor_release(t);
        }
    }
}

static void case_all_reduce_avg_on_integers_is_an_error(void)
{
    weft_tensor *t = vec((double[]){1, 2}, 2, WEFT_I32);
    cr_assert_lt(weft_dist_all_reduce(t, WEFT_REDUCE_AVG), 0);
    tu_assert_error(WEFT_ERR_TYPE, "op avg needs a floating dtype, but t is int32");
    cr_assert_lt(weft_dist_all_reduce(NULL, WEFT_REDUCE_SUM), 0);
    tu_assert_error(WEFT_ERR_VALUE, "t is NULL");
    weft_tensor_release(t);
}

/* Only the view's elements change, each to the sum over ranks. */
static void case_all_reduce_non_contiguous_views(void)
{
    weft_scope_push();
    double got[12];
    /* base[i] = i + 100 * rank; a transposed view covers all of it. */
    weft_tensor *base = weft_add_scalar(weft_arange(0, 12, 1, WEFT_F32, WEFT_CPU), 100 * rank_);
    weft_tensor *tview = weft_t(weft_view(base, 2, (int64_t[]){3, 4}));
    cr_assert_not(weft_tensor_is_contiguous(tview));
    cr_assert_eq(weft_dist_all_reduce(tview, WEFT_REDUCE_SUM), 0, "%s", weft_error_message());
    read_vals(base, got);
    for (int i = 0; i < 12; i++)
        cr_assert_eq(got[i], 2 * i + 100, "transposed [%d]: got %g", i, got[i]);

    /* A narrowed slice: columns 1 and 2 of a [3, 4] matrix. */
    weft_tensor *m = weft_add_scalar(weft_arange(0, 12, 1, WEFT_I64, WEFT_CPU), 100 * rank_);
    weft_tensor *cols = weft_narrow(weft_view(m, 2, (int64_t[]){3, 4}), 1, 1, 2);
    cr_assert_not(weft_tensor_is_contiguous(cols));
    cr_assert_eq(weft_dist_all_reduce(cols, WEFT_REDUCE_MAX), 0, "%s", weft_error_message());
    read_vals(m, got);
    for (int i = 0; i < 12; i++) {
        int c = i % 4;
        double want = (c == 1 || c == 2) ? i + 100 : i + 100 * rank_;
        cr_assert_eq(got[i], want, "narrowed [%d]: got %g, expected %g", i, got[i], want);
    }
    /* An expanded view has elements that share memory: refused. */
    weft_tensor *e = weft_expand(weft_scalar_tensor(1, WEFT_F32, WEFT_CPU), 1, (int64_t[]){4});
    cr_assert_lt(weft_dist_all_reduce(e, WEFT_REDUCE_SUM), 0);
    tu_assert_error(WEFT_ERR_RUNTIME, "expanded view");
    weft_scope_pop();
}

static void case_broadcast_from_root_1(void)
{
    weft_scope_push();
    double got[6];
    for (size_t d = 0; d < sizeof all_dtypes / sizeof *all_dtypes; d++) {
        enum weft_dtype dt = all_dtypes[d];
        weft_tensor *t = weft_full(1, (int64_t[]){6}, rank_ == 1 ? 1 : 0, dt, WEFT_CPU);
        cr_assert_eq(weft_dist_broadcast(t, 1), 0, "%s: %s", weft_dtype_name(dt),
                     weft_error_message());
        read_vals(t, got);
        for (int i = 0; i < 6; i++)
            cr_assert_eq(got[i], 1, "%s [%d]", weft_dtype_name(dt), i);
    }
    /* Into a transposed view. */
    weft_tensor *base = weft_add_scalar(weft_arange(0, 6, 1, WEFT_F64, WEFT_CPU), 10 * rank_);
    weft_tensor *v = weft_t(weft_view(base, 2, (int64_t[]){2, 3}));
    cr_assert_eq(weft_dist_broadcast(v, 1), 0, "%s", weft_error_message());
    read_vals(base, got);
    for (int i = 0; i < 6; i++)
        cr_assert_eq(got[i], i + 10);
    cr_assert_lt(weft_dist_broadcast(base, 2), 0);
    tu_assert_error(WEFT_ERR_VALUE, "root 2 is not a rank of this world (0 .. 1)");
    cr_assert_lt(weft_dist_broadcast(base, -1), 0);
    tu_assert_error(WEFT_ERR_VALUE, "root -1");
    weft_scope_pop();
}

static void case_all_gather(void)
{
    weft_scope_push();
    double got[12];
    weft_tensor *in = weft_add_scalar(weft_arange(0, 6, 1, WEFT_I32, WEFT_CPU), 10 * rank_);
    in = weft_view(in, 2, (int64_t[]){2, 3});
    weft_tensor *out = weft_zeros(3, (int64_t[]){2, 2, 3}, WEFT_I32, WEFT_CPU);
    cr_assert_eq(weft_dist_all_gather(out, in), 0, "%s", weft_error_message());
    read_vals(out, got);
    for (int k = 0; k < 12; k++)
        cr_assert_eq(got[k], (k / 6) * 10 + k % 6, "[%d]: got %g", k, got[k]);

    /* A non-contiguous out (a permuted view) and a non-contiguous in (transposed). */
    weft_tensor *store = weft_zeros(3, (int64_t[]){3, 2, 2}, WEFT_F32, WEFT_CPU);
    weft_tensor *pout = weft_permute(store, 3, (int[]){1, 2, 0});
    weft_tensor *tin = weft_t(weft_to_dtype(weft_view(in, 2, (int64_t[]){3, 2}), WEFT_F32));
    cr_assert_not(weft_tensor_is_contiguous(pout));
    cr_assert_eq(weft_dist_all_gather(pout, tin), 0, "%s", weft_error_message());
    weft_tensor *want = weft_stack(2, (weft_tensor *[]){
        weft_sub_scalar(tin, 10 * rank_), weft_add_scalar(weft_sub_scalar(tin, 10 * rank_), 10)},
        0);
    double w[12];
    read_vals(pout, got);
    read_vals(want, w);
    for (int k = 0; k < 12; k++)
        cr_assert_eq(got[k], w[k], "permuted out [%d]: got %g, expected %g", k, got[k], w[k]);

    weft_tensor *bad = weft_zeros(3, (int64_t[]){1, 2, 3}, WEFT_I32, WEFT_CPU);
    cr_assert_lt(weft_dist_all_gather(bad, in), 0);
    tu_assert_error(WEFT_ERR_RUNTIME, "out has shape [1, 2, 3] but expected [2, 2, 3]");
    weft_tensor *badt = weft_zeros(3, (int64_t[]){2, 2, 3}, WEFT_I64, WEFT_CPU);
    cr_assert_lt(weft_dist_all_gather(badt, in), 0);
    tu_assert_error(WEFT_ERR_RUNTIME, "must have in's dtype and device");
    weft_scope_pop();
}

/* Started, then compute, then waited: the results are those of the blocking calls. */
static void case_async_with_compute_in_between(void)
{
    weft_scope_push();
    enum { M = 4096 };
    weft_tensor *a = weft_full(1, (int64_t[]){M}, rank_ + 1, WEFT_F32, WEFT_CPU);
    weft_tensor *b = weft_full(1, (int64_t[]){M}, rank_ + 1, WEFT_BF16, WEFT_CPU);
    weft_tensor *g = weft_zeros(2, (int64_t[]){2, 3}, WEFT_I64, WEFT_CPU);
    weft_tensor *in = weft_full(1, (int64_t[]){3}, rank_, WEFT_I64, WEFT_CPU);
    weft_work *w1 = weft_dist_all_reduce_async(a, WEFT_REDUCE_AVG);
    weft_work *w2 = weft_dist_broadcast_async(b, 0);
    weft_work *w3 = weft_dist_all_gather_async(g, in);
    cr_assert(w1 && w2 && w3, "%s", weft_error_message());
    weft_tensor *x = weft_rand(2, (int64_t[]){64, 64}, WEFT_F32, WEFT_CPU);
    for (int i = 0; i < 10; i++)
        x = weft_tanh(weft_matmul(x, x));
    cr_assert_not_null(x);
    for (int spins = 0; !weft_work_is_completed(w1) && spins < 1000000; spins++)
        ;
    cr_assert_eq(weft_work_wait(w1), 0, "%s", weft_error_message());
    cr_assert_eq(weft_work_wait(w3), 0, "%s", weft_error_message());
    cr_assert_eq(weft_work_wait(w2), 0, "%s", weft_error_message());
    double v;
    cr_assert_eq(weft_tensor_item(weft_select(a, 0, M - 1), &v), 0);
    cr_assert_eq(v, 1.5);
    cr_assert_eq(weft_tensor_item(weft_select(b, 0, 0), &v), 0);
    cr_assert_eq(v, 1);
    double got[6];
    read_vals(g, got);
    cr_assert(got[0] == 0 && got[2] == 0 && got[3] == 1 && got[5] == 1);
    weft_scope_pop();
}

/* Seven float sums in flight at once, from 1 element to 4 MiB and past it (DDP's buckets
 * come this way), waited for newest first: every element the exact sum on both ranks. */
static void case_float_sums_in_flight(void)
{
    weft_scope_push();
    const int64_t slot = ((int64_t)4 << 20) / 4;
    const struct {
        enum weft_dtype dt;
        int64_t n;
    } cases[] = {{WEFT_F32, 1},    {WEFT_F32, 1001},     {WEFT_F64, 333},  {WEFT_F32, slot},
                 {WEFT_F32, slot + 1}, {WEFT_F64, slot / 2}, {WEFT_F32, 77}};
    enum { K = sizeof cases / sizeof *cases };
    weft_tensor *t[K];
    weft_work *w[K];
    for (int k = 0; k < K; k++) {
        /* rank r holds (r + 1) (i % 7 + 0.5): the sum over ranks is exact */
        weft_tensor *i = weft_arange(0, (double)cases[k].n, 1, cases[k].dt, WEFT_CPU);
        t[k] = weft_mul_scalar(weft_add_scalar(weft_remainder_scalar(i, 7), 0.5), rank_ + 1);
        cr_assert_not_null(t[k], "%s", weft_error_message());
        w[k] = weft_dist_all_reduce_async(t[k], WEFT_REDUCE_SUM);
        cr_assert_not_null(w[k], "%s", weft_error_message());
    }
    const double ranks_sum = world_ * (world_ + 1) / 2.0;
    for (int k = K - 1; k >= 0; k--) {
        cr_assert_eq(weft_work_wait(w[k]), 0, "%s", weft_error_message());
        int64_t n = cases[k].n;
        double *got = malloc((size_t)n * sizeof *got);
        cr_assert_not_null(got);
        read_vals(t[k], got);
        for (int64_t i = 0; i < n; i++)
            if (got[i] != ranks_sum * ((double)(i % 7) + 0.5))
                cr_assert_fail("all_reduce %d (%s, %lld elements): element %lld is %g, want %g",
                               k, weft_dtype_name(cases[k].dt), (long long)n, (long long)i,
                               got[i], ranks_sum * ((double)(i % 7) + 0.5));
        free(got);
    }
    weft_scope_pop();
}

static void case_barrier_and_init_twice(void)
{
    cr_assert_eq(weft_dist_barrier(), 0, "%s", weft_error_message());
    cr_assert_lt(weft_dist_init("mpi", 10), 0);
    tu_assert_error(WEFT_ERR_RUNTIME, "already initialized with backend mpi");
    cr_assert_eq(weft_dist_barrier(), 0, "%s", weft_error_message());
}

/* Open MPI's variable for its shared-memory single-copy mechanism (5.0 renamed btl vader
 * to sm), its value now or NULL. */
static const char *single_copy_setting(void)
{
    const char *v = getenv("OMPI_MCA_btl_vader_single_copy_mechanism");
    return v ? v : getenv("OMPI_MCA_btl_sm_single_copy_mechanism");
}

Test(dist_mpi, collectives)
{
    join(false, 60);
    case_all_reduce_every_dtype_and_op();
    case_all_reduce_avg_on_integers_is_an_error();
    case_all_reduce_non_contiguous_views();
    case_broadcast_from_root_1();
    case_all_gather();
    case_async_with_compute_in_between();
    case_float_sums_in_flight();
    case_barrier_and_init_twice();
    leave();
}

/* Deterministic mode: every op on every dtype gives what the transport gives (exact here),
 * floats are rank 0's value plus rank 1's rounded once, and both ranks hold the same bits. */
Test(dist_mpi, deterministic)
{
    join(true, 60);
    case_all_reduce_every_dtype_and_op();
    case_all_reduce_non_contiguous_views();
    weft_scope_push();
    enum { M = 1000 };
    const enum weft_dtype fdt[] = {WEFT_F32, WEFT_F64, WEFT_BF16, WEFT_F16};
    for (int d = 0; d < 4; d++) {
        uint64_t seed = 12345;
        double x0[M], x1[M];
        weft_tensor *t0 = tu_random_tensor(1, (int64_t[]){M}, fdt[d], -1, 1, &seed, x0);
        weft_tensor *t1 = tu_random_tensor(1, (int64_t[]){M}, fdt[d], -1, 1, &seed, x1);
        weft_tensor *mine = weft_clone(rank_ == 0 ? t0 : t1);
        cr_assert_eq(weft_dist_all_reduce(mine, WEFT_REDUCE_SUM), 0, "%s", weft_error_message());
        weft_tensor *want = weft_add(t0, t1); /* rank order, one rounding */
        weft_tensor *both = weft_zeros(2, (int64_t[]){2, M}, fdt[d], WEFT_CPU);
        cr_assert_eq(weft_dist_all_gather(both, mine), 0, "%s", weft_error_message());
        size_t nb = (size_t)M * weft_tensor_itemsize(mine);
        cr_assert_eq(memcmp(weft_tensor_data(mine), weft_tensor_data(want), nb), 0,
                     "%s: not rank 0 + rank 1", weft_dtype_name(fdt[d]));
        cr_assert_eq(memcmp(weft_tensor_data(both), (char *)weft_tensor_data(both) + nb, nb), 0,
                     "%s: the ranks differ", weft_dtype_name(fdt[d]));
    }
    weft_scope_pop();
    leave();
}

/* weft asks Open MPI's shared memory to copy through its segment rather than read the
 * other rank's pages (plugins/dist/group.c), unless the environment chose: tests/meson.build
 * runs this test once without the variable (weft's "none") and once with it set to
 * "emulated" (left as it is). */
Test(dist_mpi, single_copy_mechanism)
{
    const char *set = single_copy_setting();
    char expected[64];
    snprintf(expected, sizeof expected, "%s", set ? set : "none");
    join(false, 60);
    const char *after = single_copy_setting();
    cr_assert(after, "weft set no single-copy mechanism before MPI_Init");
    cr_assert_str_eq(after, expected, "the environment said %s before weft_dist_init",
                     set ? expected : "nothing");
    leave();
}

/* Rank 1 comes to the collective late (after rank 0's timeout): rank 0's wait fails
 * within the timeout, naming the collective, the rank and the timeout, and any later
 * collective fails at once; the late collective then completes in finalize and both ranks
 * end cleanly. */
Test(dist_mpi, timeout)
{
    join(false, 2.0);
    weft_tensor *t = weft_ones(1, (int64_t[]){16}, WEFT_F32, WEFT_CPU);
    if (rank_ == 0) {
        double start = now_s();
        int rc = weft_dist_all_reduce(t, WEFT_REDUCE_SUM);
        double took = now_s() - start;
        cr_assert_lt(rc, 0, "rank 1 never called all_reduce, yet it succeeded");
        cr_assert_geq(took, 1.9, "gave up after %g s", took);
        cr_assert_lt(took, 3.0, "gave up only after %g s (timeout_s = 2)", took);
        tu_assert_error(WEFT_ERR_RUNTIME, "all_reduce: rank 0 waited 2 s for the other ranks "
                                          "(timeout_s = 2); rank 1 did not arrive (no answer: "
                                          "stopped, died, or still busy outside the "
                                          "collectives)");
        /* the group is now out of step: what follows fails at once, saying why, rather
         * than each collective waiting out its own timeout */
        start = now_s();
        cr_assert_lt(weft_dist_broadcast(t, 0), 0);
        cr_assert_lt(now_s() - start, 0.5);
        tu_assert_error(WEFT_ERR_RUNTIME, "broadcast: the process group failed earlier: "
                                          "all_reduce: rank 0 waited 2 s");
    } else {
        sleep(3);
        cr_assert_eq(weft_dist_all_reduce(t, WEFT_REDUCE_SUM), 0, "%s", weft_error_message());
    }
    weft_tensor_release(t);
    leave();
}

/* Under mpirun -np 3: rank 1 is busy outside the collectives past the others' timeout;
 * ranks 0 and 2 each name rank 1 as the one that did not arrive, and each other as
 * waiting too (the waiting rank used to name only itself). */
Test(dist_mpi, timeout_names_the_ranks_that_did_not_arrive)
{
    join_n(false, 1.0, 3);
    weft_tensor *t = weft_ones(1, (int64_t[]){4}, WEFT_F32, WEFT_CPU);
    if (rank_ == 1) {
        sleep(2);
        cr_assert_eq(weft_dist_all_reduce(t, WEFT_REDUCE_SUM), 0, "%s", weft_error_message());
    } else {
        cr_assert_lt(weft_dist_all_reduce(t, WEFT_REDUCE_SUM), 0);
        char want[256];
        snprintf(want, sizeof want, "all_reduce: rank %d waited 1 s for the other ranks "
                 "(timeout_s = 1); rank 1 did not arrive (no answer: stopped, died, or still busy "
                 "outside the collectives); rank %d waits too", rank_, 2 - rank_);
        tu_assert_error(WEFT_ERR_RUNTIME, want);
    }
    weft_tensor_release(t);
    leave();
}

/* Rank 0 aborts while rank 1 waits in a barrier: the whole job ends at once (not after
 * the timeout), rank 0 having said why. meson checks the output and the exit status. */
Test(dist_mpi, abort_ends_the_job)
{
    join(false, 60);
    if (rank_ == 0)
        weft_dist_abort(5, "stopping the job on purpose");
    weft_dist_barrier();
    cr_assert_fail("rank 1 left the barrier: %s", weft_error_message());
}
