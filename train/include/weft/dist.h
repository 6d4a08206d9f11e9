/* weft/dist.h: collective communication between the processes of one job, for
 * data-parallel training (weft/ddp.h), with torch.distributed's semantics.
 *
 * One process group per process, the world the launcher started (mpirun, srun, a PMI
 * scheduler). The launcher's environment says how big it is; a process started without
 * one is a world of size 1 that needs no transport at all:
 *
 *     if (weft_dist_init("auto", 300) < 0) ...      // mpi, nccl or none, from the launcher
 *     weft_dist_all_reduce(grad, WEFT_REDUCE_AVG);   // in place, every rank gets the mean
 *     weft_work *w = weft_dist_all_reduce_async(t, WEFT_REDUCE_SUM);
 *     ... compute ...
 *     weft_work_wait(w);                             // waits and frees the handle
 *     weft_dist_finalize();
 *
 * Transports are plugins (weft-dist-mpi.so for host tensors over Open MPI,
 * weft-dist-nccl.so for CUDA tensors over NCCL) that register a struct weft_communicator
 * of kind "communicator"; this library holds the front end: argument checks, staging of
 * non-contiguous tensors, AVG as SUM then a division, the world-of-one fast path and the
 * deterministic mode. Nothing here includes an MPI header.
 *
 * Errors are weft's sticky errors (WEFT_ERR_RUNTIME for a transport failure or timeout,
 * WEFT_ERR_VALUE for bad arguments): "all_reduce: rank 1 waited 30 s for the other ranks
 * (timeout_s = 30); a rank died or stopped calling collectives". Collectives must be called
 * in the same order with the same shapes on every rank, as in PyTorch.
 *
 * Threads: collectives are issued from one thread at a time (the training thread).
 */
#ifndef WEFT_DIST_H
#define WEFT_DIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "weft/options.h"
#include "weft/registry.h"
#include "weft/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* torch.distributed.ReduceOp's SUM, AVG, MAX, MIN. AVG is for floating dtypes only. */
typedef enum weft_reduce_op {
    WEFT_REDUCE_SUM = 0,
    WEFT_REDUCE_AVG = 1,
    WEFT_REDUCE_MAX = 2,
    WEFT_REDUCE_MIN = 3,
} weft_reduce_op;

/* "sum", "avg", "max", "min". */
const char *weft_reduce_op_name(weft_reduce_op op);

/* ---- the process group ----------------------------------------------------------------- */

struct weft_dist_init_options {
    const char *backend;  /* "auto" (or NULL), "mpi", "nccl", "none" */
    double timeout_s;     /* how long a collective may wait for the other ranks; > 0 */
    /* Reductions in a fixed order (rank 0 + rank 1 + ...) whatever the transport's
     * algorithm, so results are bitwise reproducible run to run: slower (an all_gather). */
    bool deterministic;
};

/* backend "auto", timeout_s 1800 (PyTorch's default), deterministic false. */
struct weft_dist_init_options weft_dist_init_options_default(void);

/* What the launcher's environment says about this process: Open MPI's OMPI_COMM_WORLD_*,
 * then PMIx's PMIX_RANK, then PMI's PMI_RANK/PMI_SIZE, then Slurm's SLURM_PROCID/NTASKS.
 * Without any of them: rank 0 of 1 and launcher "none". Returns 0, or negative with an
 * error naming the variable whose value is malformed. */
struct weft_dist_env {
    int rank, world_size;             /* world_size 0: the launcher did not say (PMIx alone);
                                         the transport's own view decides */
    int local_rank, local_world_size; /* on this node; 0 and 1 when the launcher says nothing */
    const char *launcher;             /* "openmpi", "pmix", "pmi", "slurm", "none" */
};
int weft_dist_env_read(struct weft_dist_env *env);

/* Joins the world. backend "auto": "none" when the launcher says the world is 1 process,
 * else "mpi". "none" with a world larger than 1 is an error (each process would train
 * alone); "mpi"/"nccl" load their plugin (communicator:mpi, communicator:nccl) even for a
 * world of 1, so a config that asks for a transport fails early where it is missing.
 * Calling it twice is an error ("weft_dist_init: already initialized with backend mpi").
 * Returns 0 or negative with an error. */
int weft_dist_init(const char *backend, double timeout_s);
int weft_dist_init_with(const struct weft_dist_init_options *options);
bool weft_dist_is_initialized(void);
/* Leaves the group (MPI_Finalize); a no-op when not initialized. 0 or negative. */
int weft_dist_finalize(void);

/* Before init these answer for a world of one: rank 0, size 1, backend "none". */
int weft_dist_rank(void);
int weft_dist_world_size(void);
int weft_dist_local_rank(void);
const char *weft_dist_backend(void);
double weft_dist_timeout_s(void);
bool weft_dist_deterministic(void);

/* ---- collectives ---------------------------------------------------------------------- */

/* An asynchronous collective in flight. */
typedef struct weft_work weft_work;

/* In place: every rank's t becomes the reduction of all ranks' t. t may be a view and
 * non-contiguous (it is staged through a contiguous copy); every dtype; the device must
 * be one the transport moves. 0 or negative. */
int weft_dist_all_reduce(weft_tensor *t, weft_reduce_op op);
/* In place: every rank's t becomes rank root's. */
int weft_dist_broadcast(weft_tensor *t, int root);
/* out (shape [world_size, *in.shape], in's dtype and device) receives every rank's in,
 * rank i at out[i]: torch.distributed.all_gather_into_tensor with a leading dim. */
int weft_dist_all_gather(weft_tensor *out, const weft_tensor *in);
/* Returns when every rank has called it (or fails after timeout_s). */
int weft_dist_barrier(void);

/* The same, started and not waited for: a handle for weft_work_wait(), or NULL with an
 * error. The tensors must not be touched, nor freed, until the wait (they are retained). */
weft_work *weft_dist_all_reduce_async(weft_tensor *t, weft_reduce_op op);
weft_work *weft_dist_broadcast_async(weft_tensor *t, int root);
weft_work *weft_dist_all_gather_async(weft_tensor *out, const weft_tensor *in);

/* Waits for w to finish (at most timeout_s), writes staged results back and frees w,
 * whatever happens. 0, or negative with the error. NULL w: returns the pending error. */
int weft_work_wait(weft_work *w);
/* Has w finished? Drives the transport's progress; never blocks. Does not free w. */
bool weft_work_is_completed(weft_work *w);

/* Ends every process of the job (MPI_Abort with the message printed by this rank first):
 * what a rank does on an error the others cannot know about, so that nobody waits for a
 * collective that will never come. Prints "weft: rank R: MESSAGE" to stderr and exits with
 * code (1 when 0) even when the group is a world of one. Does not return. */
__attribute__((noreturn)) void weft_dist_abort(int code, const char *message);

/* ---- the transport's vtable (for plugins) -------------------------------------------- */

#define WEFT_KIND_COMMUNICATOR "communicator"

/* A transport: registered by a plugin with weft_register(), found by name ("mpi",
 * "nccl"). The front end above has checked every argument and hands the transport
 * contiguous buffers on a device it said it moves, and never AVG (it sends SUM). The
 * transport owns its group state (`group`) and its requests. */
struct weft_communicator {
    struct weft_vtable base; /* kind WEFT_KIND_COMMUNICATOR */
    const char *description; /* one line, for weft-info: "Open MPI 4.1.4, host tensors" */

    /* Joins the world the launcher started; env is what weft_dist_env_read() found (the
     * transport may trust its own library's view instead, and must then agree with it
     * or fail). options (section "dist", read with the getters of weft/options.h, valid
     * during the call) hold the group's settings: backend, timeout_s (seconds, > 0) and
     * deterministic. Sets *rank and *world_size. Returns the group, or NULL with an
     * error. (ABI 3: options were struct weft_dist_init_options.) */
    void *(*open)(const weft_options *options, const struct weft_dist_env *env, int *rank,
                  int *world_size);
    /* Leaves and frees the group; 0 or negative. */
    int (*close)(void *group);
    /* True when the transport moves tensors of device type (WEFT_DEVICE_CPU, ...). */
    bool (*supports_device)(void *group, int device_type);

    /* Start a collective; return a request or NULL with an error. count is in elements
     * of dtype; buffers live on device. Each request is finished by exactly one wait(). */
    void *(*all_reduce)(void *group, void *buffer, size_t count, enum weft_dtype dtype,
                        weft_device device, weft_reduce_op op);
    void *(*broadcast)(void *group, void *buffer, size_t nbytes, weft_device device, int root);
    /* out holds world_size * nbytes, rank i's bytes at out + i * nbytes. */
    void *(*all_gather)(void *group, const void *in, void *out, size_t nbytes, weft_device device);
    /* 1 when finished, 0 when not yet, negative on failure (with an error); drives
     * progress; does not free. */
    int (*test)(void *group, void *request);
    /* Waits at most timeout_s (from options) and frees the request, whatever happens.
     * 0, or negative with an error that names the collective, the rank and the timeout. */
    int (*wait)(void *group, void *request);
    /* Returns when every rank has called it, or fails after the timeout. */
    int (*barrier)(void *group);
    /* Ends every process of the job with code; message is already printed. Must not
     * return (call exit() if the transport's own abort returns). */
    void (*abort)(void *group, int code);
};

#ifdef __cplusplus
}
#endif
#endif
