/* apps/train/train_dist.c: weft-train across processes ([distributed], docs/distributed.md).
 *
 * Under a launcher (mpirun -np N weft-train CONFIG) every process reads the same config,
 * joins the process group, wraps the model in DDP (rank 0's parameters everywhere,
 * gradients averaged during backward) and reads its own shard of each epoch. The batch
 * size in the config is per process. Rank 0 alone prints, logs and writes checkpoints;
 * the other ranks' standard output goes to /dev/null (their errors still reach stderr,
 * prefixed with their rank). The metrics printed are summed or averaged over the ranks.
 * Without a launcher this is a world of one and none of it costs anything.
 */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <weft/backend.h>

#include "train.h"

/* How often the ranks agree on whether one was interrupted: a signal reaches the ranks at
 * different steps, and they must stop at the same one. About every STOP_CHECK_SECONDS:
 * mpirun kills its ranks 2 s after a Ctrl-C, so the agreement must come well within that
 * whatever a step costs, and it must not cost a step of a few microseconds a collective
 * each. The interval (in steps) is agreed with the flag: each rank proposes how many
 * steps of its pace make STOP_CHECK_SECONDS, a whole number, and every rank takes the
 * mean of the proposals, rounded down: integers summed in doubles are exact, so every
 * rank computes the same interval and the checks stay at the same steps everywhere. */
#define STOP_CHECK_SECONDS 0.1
#define STOP_CHECK_MAX_STEPS 1024

int train_dist_threads(struct weft_config *cfg)
{
    struct weft_dist_env env;
    if (weft_dist_env_read(&env) != 0)
        return weft_error_code();
    if (env.local_world_size <= 1)
        return 0;
    /* N processes on a node share its cores: torchrun's OMP_NUM_THREADS rule, scaled. */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int64_t cap = cores > env.local_world_size ? cores / env.local_world_size : 1, threads = 0;
    if (weft_config_has(cfg, "cpu", "threads") &&
        weft_config_int(cfg, "cpu", "threads", 0, &threads) != 0)
        return weft_error_code();
    if (threads > 0 && threads <= cap)
        return 0;
    char set[64];
    snprintf(set, sizeof set, "cpu.threads=%lld", (long long)cap);
    if (env.rank == 0 && threads > cap)
        fprintf(stderr, "weft-train: %d processes on this node with %ld cores: [cpu] threads = %lld "
                        "lowered to %lld per process\n",
                env.local_world_size, cores, (long long)threads, (long long)cap);
    return weft_config_set(cfg, set);
}

int train_dist_setup(struct trainer *t)
{
    struct weft_config *cfg = t->cfg;
    static const char *const backends[] = {"auto", "mpi", "nccl", "none", NULL};
    int backend;
    struct weft_dist_init_options o = weft_dist_init_options_default();
    struct weft_ddp_options d = weft_ddp_options_default();
    if (weft_config_choice(cfg, "distributed", "backend", backends, 0, &backend) ||
        weft_config_double(cfg, "distributed", "timeout_s", o.timeout_s, &o.timeout_s) ||
        weft_config_bool(cfg, "distributed", "deterministic", false, &o.deterministic) ||
        weft_config_double(cfg, "distributed", "bucket_mb", d.bucket_mb, &d.bucket_mb) ||
        weft_config_bool(cfg, "distributed", "find_unused_parameters", false,
                         &d.find_unused_parameters) ||
        weft_config_bool(cfg, "distributed", "broadcast_buffers", true, &d.broadcast_buffers))
        return weft_error_code();
    if (!(o.timeout_s > 0) || isinf(o.timeout_s))
        return weft_error_set(WEFT_ERR_CONFIG,
                              "%s: [distributed] timeout_s = '%s': expected a number of seconds "
                              "> 0", weft_config_name(cfg),
                              weft_config_string(cfg, "distributed", "timeout_s", ""));
    if (!(d.bucket_mb > 0 && d.bucket_mb <= WEFT_DDP_MAX_BUCKET_MB))
        return weft_error_set(WEFT_ERR_CONFIG,
                              "%s: [distributed] bucket_mb = '%s': expected a number of MiB "
                              "above 0 and at most %d (1 TiB)", weft_config_name(cfg),
                              weft_config_string(cfg, "distributed", "bucket_mb", ""),
                              WEFT_DDP_MAX_BUCKET_MB);
    t->ddp_options = d;
    o.backend = backends[backend];
    /* auto: NCCL for device tensors, MPI for host ones, nothing for a world of one */
    struct weft_dist_env env;
    if (weft_dist_env_read(&env) != 0)
        return weft_error_code();
    if (backend == 0 && env.world_size > 1)
        o.backend = t->device.type == WEFT_DEVICE_CPU ? "mpi" : "nccl";
    if (weft_dist_init_with(&o) != 0)
        return weft_error_code();
    t->rank = weft_dist_rank();
    t->world = weft_dist_world_size();
    /* one device per process on the node */
    if (t->world > 1 && t->device.type != WEFT_DEVICE_CPU)
        t->device.index = (int16_t)(weft_dist_local_rank() %
                                    (weft_device_count(t->device.type) > 0
                                         ? weft_device_count(t->device.type) : 1));
    if (t->rank != 0 && !freopen("/dev/null", "w", stdout))
        return weft_error_set(WEFT_ERR_IO, "rank %d: cannot send its output to /dev/null", t->rank);
    return 0;
}

int train_dist_wrap(struct trainer *t)
{
    if (!(t->ddp = weft_ddp_new(t->model, &t->ddp_options)))
        return weft_error_code();
    if (t->world == 1)
        return 0;
    /* this rank's shard of every epoch (DistributedSampler) */
    struct weft_dataloader_options o = *weft_dataloader_options(t->train_loader);
    o.num_replicas = t->world;
    o.rank = t->rank;
    weft_dataloader *sharded = weft_dataloader_new(t->train_set, &o);
    if (!sharded)
        return weft_error_code();
    weft_dataloader_free(t->train_loader);
    t->train_loader = sharded;
    return 0;
}

int train_dist_sum(const struct trainer *t, double *values, int n)
{
    if (t->world == 1)
        return 0;
    int64_t shape[1] = {n};
    weft_scope_push();
    weft_tensor *v = weft_empty(1, shape, WEFT_F64, WEFT_CPU);
    int rc = v ? 0 : weft_error_code();
    if (rc == 0)
        memcpy(weft_tensor_data(v), values, (size_t)n * sizeof *values);
    if (rc == 0 && (rc = weft_dist_all_reduce(v, WEFT_REDUCE_SUM)) == 0)
        memcpy(values, weft_tensor_data(v), (size_t)n * sizeof *values);
    weft_scope_pop();
    return rc;
}

int train_dist_should_stop(const struct trainer *t)
{
    static int64_t next_check = -1, interval = 1;
    static double last_check;
    if (t->world == 1)
        return train_interrupted ? 1 : 0;
    double now = train_now();
    double propose = 1; /* the first check: no pace seen yet */
    if (next_check >= 0) {
        if (t->step < next_check)
            return 0;
        /* at most twice the interval: the pace of a few steps may not last */
        double per_step = (now - last_check) / (double)interval;
        double most = fmin(STOP_CHECK_MAX_STEPS, 2.0 * (double)interval);
        propose = per_step > 0 ? fmin(most, floor(STOP_CHECK_SECONDS / per_step)) : most;
        propose = propose < 1 ? 1 : propose;
    }
    double v[2] = {train_interrupted ? 1 : 0, propose};
    int rc = train_dist_sum(t, v, 2);
    if (rc != 0)
        return rc;
    interval = (int64_t)(v[1] / t->world);
    interval = interval < 1 ? 1 : interval;
    next_check = t->step + interval;
    last_check = now;
    if (v[0] > 0 && !train_interrupted)
        train_interrupted = SIGINT; /* every rank stops as the signalled one does */
    return v[0] > 0;
}

void train_dist_fail(const struct trainer *t, int code)
{
    if (t->world > 1)
        weft_dist_abort(code, weft_error_message());
}

void train_dist_end(struct trainer *t)
{
    /* How much of the all-reduce time backward hid (bench/ddp-scaling.sh reads this). The
     * exposed time also counts the copies back into .grad, so it may exceed comm: clamp. */
    if (t->ddp && t->world > 1 && t->rank == 0) {
        struct weft_ddp_stats s = weft_ddp_stats(t->ddp);
        double hidden = s.comm_s > 0 ? 1 - s.exposed_s / s.comm_s : 0;
        hidden = hidden < 0 ? 0 : hidden > 1 ? 1 : hidden;
        printf("ddp: %lld steps, %lld buckets all-reduced, %.1f MB, comm %.3f s, exposed %.3f s "
               "(hidden %.0f%%)\n",
               (long long)s.steps, (long long)s.buckets, (double)s.bytes / 1e6, s.comm_s,
               s.exposed_s, 100 * hidden);
        fflush(stdout);
    }
    weft_ddp_free(t->ddp);
    t->ddp = NULL;
    weft_dist_finalize();
}
