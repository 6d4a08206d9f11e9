/* testkit/cuda_emu/libs/nccl.cc: libweft-nccl-emu.so, NCCL's collectives between emulated
 * devices of different processes, over MPI.
 *
 * A communicator is a duplicate of MPI_COMM_WORLD (the ranks must be the world's, as
 * weft's NCCL transport makes them). A collective is a point on its stream: when it is
 * called, the work queued on that stream before it runs (its input must be final) and
 * the input is sent with a non-blocking MPI collective, started in call order on every
 * rank as NCCL requires; the result is written into the output only when the stream
 * reaches the collective, so a reader that does not wait for it reads the old values.
 * Reductions combine the ranks' contributions in rank order, float16 and bfloat16 through
 * float, rounded after each step as a ring reduction would. Buffers outside the device's
 * memory are refused with ncclInvalidArgument, as NCCL checks its pointers. */
#define OMPI_SKIP_MPICXX 1 /* the C API only */
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <set>
#include <vector>

#include <weft/half.h>

#include "../runtime/internal.h"
#include "nccl.h"

struct ncclComm {
    MPI_Comm comm;
    int rank, size, device;
    bool aborted;
};

namespace {

using namespace wemu;

const char kMagic[] = "weft CUDA emulator NCCL id";
std::set<ncclComm *> &comms = *new std::set<ncclComm *>;

size_t type_size(ncclDataType_t t)
{
    switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    }
    return 0;
}

template <typename T> T combine(ncclRedOp_t op, T a, T b)
{
    switch (op) {
    case ncclProd: return (T)(a * b);
    case ncclMax: return a > b ? a : b;
    case ncclMin: return a < b ? a : b;
    default: return (T)(a + b);
    }
}

/* out[i] = op over the ranks' parts[r][i], in rank order; T the element, C how it adds. */
template <typename T, typename C, typename Load, typename Store>
void reduce(const char *parts, int nranks, size_t count, ncclRedOp_t op, char *out, Load load,
            Store store)
{
    for (size_t i = 0; i < count; i++) {
        C acc = load(reinterpret_cast<const T *>(parts)[i]);
        for (int r = 1; r < nranks; r++) {
            acc = combine<C>(op, acc, load(reinterpret_cast<const T *>(parts + (size_t)r * count * sizeof(T))[i]));
            acc = load(store(acc)); /* rounded to the type after each step */
        }
        if (op == ncclAvg)
            acc = (C)(acc / (C)nranks);
        reinterpret_cast<T *>(out)[i] = store(acc);
    }
}

template <typename T> void reduce_plain(const char *parts, int n, size_t count, ncclRedOp_t op, char *out)
{
    reduce<T, T>(parts, n, count, op, out, [](T v) { return v; }, [](T v) { return v; });
}

void reduce_any(ncclDataType_t t, const char *parts, int n, size_t count, ncclRedOp_t op, char *out)
{
    switch (t) {
    case ncclInt8: reduce_plain<int8_t>(parts, n, count, op, out); break;
    case ncclUint8: reduce_plain<uint8_t>(parts, n, count, op, out); break;
    case ncclInt32: reduce_plain<int32_t>(parts, n, count, op, out); break;
    case ncclUint32: reduce_plain<uint32_t>(parts, n, count, op, out); break;
    case ncclInt64: reduce_plain<int64_t>(parts, n, count, op, out); break;
    case ncclUint64: reduce_plain<uint64_t>(parts, n, count, op, out); break;
    case ncclFloat32: reduce_plain<float>(parts, n, count, op, out); break;
    case ncclFloat64: reduce_plain<double>(parts, n, count, op, out); break;
    case ncclFloat16:
        reduce<uint16_t, float>(parts, n, count, op, out, [](uint16_t v) { return weft_f16_to_float(v); },
                                [](float v) { return weft_float_to_f16(v); });
        break;
    case ncclBfloat16:
        reduce<uint16_t, float>(parts, n, count, op, out, [](uint16_t v) { return weft_bf16_to_float(v); },
                                [](float v) { return weft_float_to_bf16(v); });
        break;
    }
}

/* A collective in flight: MPI works into `in`, the stream's turn finishes it into out. */
struct Flight {
    MPI_Request request = MPI_REQUEST_NULL;
    std::vector<char> send, in;
    void *out = nullptr;
    size_t bytes = 0; /* of out */
    std::function<void(Flight &)> finish;
};

bool alive(ncclComm_t c)
{
    return c && comms.count(c) && !c->aborted;
}

/* Checks the buffers, runs the stream's earlier work, starts MPI; 0 or an NCCL error. */
ncclResult_t start(ncclComm_t comm, cudaStream_t stream, const char *call,
                   std::initializer_list<std::pair<const void *, size_t>> buffers, Stream **out)
{
    if (!alive(comm))
        return ncclInvalidArgument;
    Stream *s = resolve(stream);
    if (!s || s->device != comm->device)
        return ncclInvalidArgument;
    for (auto &b : buffers)
        if (b.second && check_device_range(b.first, b.second, comm->device)) {
            report("%s: %s is %s", call, describe(b.first).c_str(),
                   check_device_range(b.first, b.second, comm->device));
            return ncclInvalidArgument;
        }
    if (sticky(s->device) != cudaSuccess)
        return ncclUnhandledCudaError;
    run_until(s, s->enqueued);
    *out = s;
    return ncclSuccess;
}

ncclResult_t queue(Stream *s, std::shared_ptr<Flight> f, const char *call)
{
    enqueue_fn(s, [f] {
        MPI_Wait(&f->request, MPI_STATUS_IGNORE);
        f->finish(*f);
    }, call);
    return ncclSuccess;
}

} // namespace

extern "C" {

const char *ncclGetErrorString(ncclResult_t r)
{
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    }
    return "unknown result code";
}

ncclResult_t ncclGetVersion(int *version)
{
    if (!version)
        return ncclInvalidArgument;
    *version = NCCL_MAJOR * 10000 + NCCL_MINOR * 100 + NCCL_PATCH;
    return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    if (!id)
        return ncclInvalidArgument;
    memset(id, 0, sizeof *id);
    memcpy(id->internal, kMagic, sizeof kMagic);
    std::random_device rd;
    for (size_t i = sizeof kMagic; i + 4 <= sizeof id->internal; i += 4) {
        unsigned v = rd();
        memcpy(id->internal + i, &v, 4);
    }
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
    WEMU_LOCKED;
    if (!comm || nranks < 1 || rank < 0 || rank >= nranks ||
        memcmp(id.internal, kMagic, sizeof kMagic) != 0)
        return ncclInvalidArgument;
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        report("ncclCommInitRank: the emulated NCCL runs over MPI, which is not initialised");
        return ncclInvalidUsage;
    }
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || device_count() == 0)
        return ncclUnhandledCudaError;
    auto *c = new ncclComm{MPI_COMM_NULL, rank, nranks, dev, false};
    int wr = -1, ws = -1;
    if (MPI_Comm_dup(MPI_COMM_WORLD, &c->comm) != MPI_SUCCESS) {
        delete c;
        return ncclSystemError;
    }
    MPI_Comm_rank(c->comm, &wr);
    MPI_Comm_size(c->comm, &ws);
    if (wr != rank || ws != nranks) {
        report("ncclCommInitRank(rank %d of %d): the emulated NCCL takes the MPI world's ranks "
               "(rank %d of %d)", rank, nranks, wr, ws);
        MPI_Comm_free(&c->comm);
        delete c;
        return ncclInvalidArgument;
    }
    comms.insert(c);
    *comm = c;
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    WEMU_LOCKED;
    if (!comm || !comms.count(comm))
        return ncclInvalidArgument;
    drain_device(comm->device); /* collectives still queued finish first */
    if (!comm->aborted)
        MPI_Comm_free(&comm->comm);
    comms.erase(comm);
    delete comm;
    return ncclSuccess;
}

/* The requests in flight cannot be cancelled: the communicator stops taking work. */
ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    WEMU_LOCKED;
    if (!comm || !comms.count(comm))
        return ncclInvalidArgument;
    comm->aborted = true;
    return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *async_error)
{
    WEMU_LOCKED;
    if (!comm || !comms.count(comm) || !async_error)
        return ncclInvalidArgument;
    *async_error = ncclSuccess;
    return ncclSuccess;
}

ncclResult_t ncclCommCount(ncclComm_t comm, int *count)
{
    if (!comm || !count)
        return ncclInvalidArgument;
    *count = comm->size;
    return ncclSuccess;
}

ncclResult_t ncclCommUserRank(ncclComm_t comm, int *rank)
{
    if (!comm || !rank)
        return ncclInvalidArgument;
    *rank = comm->rank;
    return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream)
{
    WEMU_LOCKED;
    size_t size = type_size(datatype), bytes = count * size;
    if (!size || op < ncclSum || op > ncclAvg)
        return ncclInvalidArgument;
    Stream *s = nullptr;
    ncclResult_t r = start(comm, stream, "ncclAllReduce", {{sendbuff, bytes}, {recvbuff, bytes}}, &s);
    if (r != ncclSuccess || count == 0)
        return r;
    auto f = std::make_shared<Flight>();
    f->send.assign(static_cast<const char *>(sendbuff), static_cast<const char *>(sendbuff) + bytes);
    f->in.resize(bytes * (size_t)comm->size);
    f->out = recvbuff;
    int n = comm->size;
    f->finish = [datatype, op, n, count](Flight &x) {
        reduce_any(datatype, x.in.data(), n, count, op, static_cast<char *>(x.out));
    };
    MPI_Iallgather(f->send.data(), (int)bytes, MPI_BYTE, f->in.data(), (int)bytes, MPI_BYTE,
                   comm->comm, &f->request);
    return queue(s, f, "ncclAllReduce");
}

ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream)
{
    WEMU_LOCKED;
    size_t size = type_size(datatype), bytes = count * size;
    if (!size || !comm || root < 0 || root >= comm->size)
        return ncclInvalidArgument;
    bool is_root = comm->rank == root;
    Stream *s = nullptr;
    ncclResult_t r = start(comm, stream, "ncclBroadcast",
                           {{is_root ? sendbuff : nullptr, is_root ? bytes : 0}, {recvbuff, bytes}}, &s);
    if (r != ncclSuccess || count == 0)
        return r;
    auto f = std::make_shared<Flight>();
    f->in.resize(bytes);
    if (is_root)
        memcpy(f->in.data(), sendbuff, bytes);
    f->out = recvbuff;
    f->finish = [bytes](Flight &x) { memcpy(x.out, x.in.data(), bytes); };
    MPI_Ibcast(f->in.data(), (int)bytes, MPI_BYTE, root, comm->comm, &f->request);
    return queue(s, f, "ncclBroadcast");
}

ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)
{
    WEMU_LOCKED;
    size_t size = type_size(datatype), bytes = sendcount * size;
    if (!size || !comm)
        return ncclInvalidArgument;
    Stream *s = nullptr;
    ncclResult_t r = start(comm, stream, "ncclAllGather",
                           {{sendbuff, bytes}, {recvbuff, bytes * (size_t)comm->size}}, &s);
    if (r != ncclSuccess || sendcount == 0)
        return r;
    auto f = std::make_shared<Flight>();
    f->send.assign(static_cast<const char *>(sendbuff), static_cast<const char *>(sendbuff) + bytes);
    f->in.resize(bytes * (size_t)comm->size);
    f->out = recvbuff;
    f->finish = [](Flight &x) { memcpy(x.out, x.in.data(), x.in.size()); };
    MPI_Iallgather(f->send.data(), (int)bytes, MPI_BYTE, f->in.data(), (int)bytes, MPI_BYTE,
                   comm->comm, &f->request);
    return queue(s, f, "ncclAllGather");
}

} /* extern "C" */
