/* plugins/dist/nccl.c: weft-dist-nccl.so, the communicator "nccl": CUDA tensors over NCCL,
 * one process per GPU (local rank % device count), bootstrapped over MPI (rank 0 makes the
 * ncclUniqueId, MPI_Bcast hands it out), which also carries the barrier.
 *
 * Streams, as PyTorch's ProcessGroupNCCL: collectives run on a stream of their own that
 * first waits for the work weft has queued on its current stream (so the buffers hold
 * their values); a request is an event recorded after the collective. The front end
 * touches the results only once the event has completed.
 *
 * dtypes: NCCL's own, float16 and bfloat16 included; bool as uint8 with max for sum (a
 * logical or) and min for min (a logical and), as torch does; int16 has no NCCL type and
 * is refused, as in torch.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <weft/cuda.h>
#include <weft/error.h>
#include <weft/plugin.h>
#include <weft/version.h>

#include <weft/cuda_probe.h>
#include "dist_plugin.h"

struct nccl_group {
    struct dist_world world;
    ncclComm_t comm;
    cudaStream_t stream;
    int device;
    int cuda_type; /* weft's device type id of "cuda" */
    bool aborted;  /* after a timeout: the communicator is gone */
};

struct nccl_req {
    const char *what;
    cudaEvent_t done;
};

static int cuda_error(cudaError_t err, const char *what, const char *call)
{
    (void)cudaGetLastError();
    return weft_error_set(WEFT_ERR_DEVICE, "%s: %s failed: %s", what, call,
                          cudaGetErrorString(err));
}

static int nccl_error(ncclResult_t res, const char *what, const char *call)
{
    return weft_error_set(WEFT_ERR_RUNTIME, "%s: %s failed: %s", what, call,
                          ncclGetErrorString(res));
}

/* ---- requests ---------------------------------------------------------------------------- */

/* Makes the communication stream wait for weft's current stream on the group's device. */
static int order_after_weft(struct nccl_group *g, const char *what)
{
    const struct weft_cuda_api *api = weft_cuda_api_get();
    if (!api)
        return weft_error_prefix("%s", what);
    cudaStream_t weft_stream = (cudaStream_t)api->current_stream(g->device);
    cudaEvent_t ready;
    cudaError_t err = cudaEventCreateWithFlags(&ready, cudaEventDisableTiming);
    if (err == cudaSuccess) {
        err = cudaEventRecord(ready, weft_stream);
        if (err == cudaSuccess)
            err = cudaStreamWaitEvent(g->stream, ready, 0);
        cudaEventDestroy(ready);
    }
    return err == cudaSuccess ? 0 : cuda_error(err, what, "ordering after weft's stream");
}

/* The request for a collective just queued on g->stream. */
static void *req_after(struct nccl_group *g, const char *what)
{
    struct nccl_req *r = malloc(sizeof *r);
    if (!r) {
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "%s: out of memory", what);
        return NULL;
    }
    r->what = what;
    cudaError_t err = cudaEventCreateWithFlags(&r->done, cudaEventDisableTiming);
    if (err == cudaSuccess)
        err = cudaEventRecord(r->done, g->stream);
    if (err != cudaSuccess) {
        cuda_error(err, what, "cudaEventRecord");
        free(r);
        return NULL;
    }
    return r;
}

static void req_release(void *request)
{
    struct nccl_req *r = request;
    cudaEventDestroy(r->done);
    free(r);
}

static int nccl_test(void *group, void *request)
{
    struct nccl_group *g = group;
    struct nccl_req *r = request;
    cudaError_t err = cudaEventQuery(r->done);
    if (err == cudaSuccess)
        return 1;
    if (err != cudaErrorNotReady)
        return cuda_error(err, r->what, "cudaEventQuery");
    /* NCCL reports a peer's failure through the communicator, not the event. */
    ncclResult_t async = ncclSuccess;
    if (!g->aborted && ncclCommGetAsyncError(g->comm, &async) == ncclSuccess &&
        async != ncclSuccess && async != ncclInProgress)
        return nccl_error(async, r->what, "NCCL");
    return 0;
}

static int nccl_wait(void *group, void *request)
{
    struct nccl_group *g = group;
    int rc = dist_wait(&g->world, group, ((struct nccl_req *)request)->what, request, nccl_test,
                       req_release);
    if (rc < 0 && g->world.stale && g->world.stale->request == request) {
        /* Timed out: unlike MPI, NCCL can abort, which ends the collective's kernels so
         * the device is not held by a communication that will never finish. */
        struct dist_stale *s = g->world.stale;
        g->world.stale = s->next;
        free(s);
        if (!g->aborted)
            ncclCommAbort(g->comm);
        g->aborted = true;
        req_release(request);
    }
    return rc;
}

static int check_alive(struct nccl_group *g, const char *what)
{
    if (g->aborted)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "%s: the NCCL communicator of rank %d was aborted after a "
                              "timeout",
                              what, g->world.rank);
    return cudaSetDevice(g->device) == cudaSuccess ? 0
                                                   : cuda_error(cudaGetLastError(), what,
                                                                "cudaSetDevice");
}

/* ---- collectives ---------------------------------------------------------------------------- */

static bool nccl_type_op(enum weft_dtype dtype, weft_reduce_op op, ncclDataType_t *type,
                         ncclRedOp_t *nop)
{
    *nop = op == WEFT_REDUCE_MAX ? ncclMax : op == WEFT_REDUCE_MIN ? ncclMin : ncclSum;
    switch (dtype) {
    case WEFT_BOOL:
        *type = ncclUint8;
        *nop = op == WEFT_REDUCE_MIN ? ncclMin : ncclMax;
        return true;
    case WEFT_U8: *type = ncclUint8; return true;
    case WEFT_I8: *type = ncclInt8; return true;
    case WEFT_I32: *type = ncclInt32; return true;
    case WEFT_I64: *type = ncclInt64; return true;
    case WEFT_F16: *type = ncclFloat16; return true;
    case WEFT_BF16: *type = ncclBfloat16; return true;
    case WEFT_F32: *type = ncclFloat32; return true;
    case WEFT_F64: *type = ncclFloat64; return true;
    default: return false;
    }
}

static void *nccl_all_reduce(void *group, void *buffer, size_t count, enum weft_dtype dtype,
                             weft_device device, weft_reduce_op op)
{
    (void)device;
    struct nccl_group *g = group;
    const char *what = "all_reduce";
    ncclDataType_t type;
    ncclRedOp_t nop;
    if (!nccl_type_op(dtype, op, &type, &nop)) {
        weft_error_set(WEFT_ERR_TYPE, "%s: NCCL has no %s type (backend nccl)", what,
                       weft_dtype_name(dtype));
        return NULL;
    }
    if (check_alive(g, what) < 0 || order_after_weft(g, what) < 0)
        return NULL;
    ncclResult_t res = ncclAllReduce(buffer, buffer, count, type, nop, g->comm, g->stream);
    if (res != ncclSuccess) {
        nccl_error(res, what, "ncclAllReduce");
        return NULL;
    }
    return req_after(g, what);
}

static void *nccl_broadcast(void *group, void *buffer, size_t nbytes, weft_device device,
                            int root)
{
    (void)device;
    struct nccl_group *g = group;
    const char *what = "broadcast";
    if (check_alive(g, what) < 0 || order_after_weft(g, what) < 0)
        return NULL;
    ncclResult_t res = ncclBroadcast(buffer, buffer, nbytes, ncclUint8, root, g->comm,
                                     g->stream);
    if (res != ncclSuccess) {
        nccl_error(res, what, "ncclBroadcast");
        return NULL;
    }
    return req_after(g, what);
}

static void *nccl_all_gather(void *group, const void *in, void *out, size_t nbytes,
                             weft_device device)
{
    (void)device;
    struct nccl_group *g = group;
    const char *what = "all_gather";
    if (check_alive(g, what) < 0 || order_after_weft(g, what) < 0)
        return NULL;
    ncclResult_t res = ncclAllGather(in, out, nbytes, ncclUint8, g->comm, g->stream);
    if (res != ncclSuccess) {
        nccl_error(res, what, "ncclAllGather");
        return NULL;
    }
    return req_after(g, what);
}

static int nccl_barrier(void *group)
{
    return dist_world_barrier(&((struct nccl_group *)group)->world);
}

static void nccl_abort(void *group, int code)
{
    struct nccl_group *g = group;
    if (!g->aborted)
        ncclCommAbort(g->comm);
    g->aborted = true;
    dist_world_abort(&g->world, code);
}

static bool nccl_supports_device(void *group, int device_type)
{
    return device_type == ((struct nccl_group *)group)->cuda_type;
}

/* ---- the group -------------------------------------------------------------------------------- */

static void *nccl_open(const weft_options *options,
                       const struct weft_dist_env *env, int *rank, int *world_size)
{
    struct nccl_group *g = calloc(1, sizeof *g);
    if (!g) {
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "nccl: out of memory");
        return NULL;
    }
    g->cuda_type = weft_device_type_id("cuda", true);
    int ndev = 0;
    cudaError_t err = cudaGetDeviceCount(&ndev);
    if (err != cudaSuccess || ndev == 0) {
        weft_error_set(WEFT_ERR_DEVICE, "nccl: no CUDA device%s%s",
                       err != cudaSuccess ? ": " : "",
                       err != cudaSuccess ? cudaGetErrorString(err) : "");
        (void)cudaGetLastError();
        free(g);
        return NULL;
    }
    if (dist_world_open(&g->world, "nccl", options, env) < 0) {
        free(g);
        return NULL;
    }
    /* One process per GPU: the launcher's local rank picks it (0 without a launcher). */
    g->device = env->local_rank % ndev;
    ncclUniqueId id;
    ncclResult_t res = ncclSuccess;
    err = cudaSetDevice(g->device);
    if (err != cudaSuccess) {
        cuda_error(err, "nccl", "cudaSetDevice");
        goto fail;
    }
    if (g->world.rank == 0 && (res = ncclGetUniqueId(&id)) != ncclSuccess) {
        /* The other ranks wait in MPI_Bcast: take them down with this one. */
        nccl_error(res, "nccl", "ncclGetUniqueId");
        fprintf(stderr, "weft: rank 0: %s\n", weft_error_message());
        dist_world_abort(&g->world, 1);
    }
    int rc = MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, g->world.comm);
    if (rc != MPI_SUCCESS) {
        dist_mpi_error(rc, "nccl", "MPI_Bcast of the NCCL id");
        goto fail;
    }
    res = ncclCommInitRank(&g->comm, g->world.size, id, g->world.rank);
    if (res != ncclSuccess) {
        nccl_error(res, "nccl", "ncclCommInitRank");
        goto fail;
    }
    err = cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking);
    if (err != cudaSuccess) {
        cuda_error(err, "nccl", "cudaStreamCreateWithFlags");
        ncclCommDestroy(g->comm);
        goto fail;
    }
    *rank = g->world.rank;
    *world_size = g->world.size;
    return g;
fail:
    dist_world_close(&g->world, g);
    free(g);
    return NULL;
}

static int nccl_close(void *group)
{
    struct nccl_group *g = group;
    if (!g->aborted) {
        cudaStreamSynchronize(g->stream);
        ncclCommDestroy(g->comm);
    }
    cudaStreamDestroy(g->stream);
    int rc = dist_world_close(&g->world, g);
    free(g);
    return rc;
}

static const struct weft_communicator nccl_communicator = {
    .base = WEFT_VTABLE(WEFT_KIND_COMMUNICATOR, "nccl", struct weft_communicator),
    .description = "NCCL, CUDA tensors (one process per GPU; bootstrapped over MPI)",
    .open = nccl_open,
    .close = nccl_close,
    .supports_device = nccl_supports_device,
    .all_reduce = nccl_all_reduce,
    .broadcast = nccl_broadcast,
    .all_gather = nccl_all_gather,
    .test = nccl_test,
    .wait = nccl_wait,
    .barrier = nccl_barrier,
    .abort = nccl_abort,
};

static int dist_nccl_init(const weft_options *options)
{
    (void)options;
    return weft_register(&nccl_communicator) < 0 ? -1 : 0;
}

WEFT_PLUGIN_MANIFEST("provides communicator:nccl\n");

static const struct weft_plugin dist_nccl_plugin = {
    .base = WEFT_VTABLE(WEFT_KIND_PLUGIN, "dist-nccl", struct weft_plugin),
    .version = WEFT_VERSION_STRING,
    .description = "collectives over NCCL for CUDA tensors (communicator nccl)",
    .manifest = weft_plugin_manifest,
    .probe = weft_cuda_probe_devices, /* as weft-cuda.so refuses */
    .init = dist_nccl_init,
};

WEFT_PLUGIN_EXPORT const struct weft_plugin *weft_plugin_init(void)
{
    return &dist_nccl_plugin;
}
