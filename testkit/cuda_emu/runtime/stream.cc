/* testkit/cuda_emu/runtime/stream.cc: streams, events and copies.
 *
 * A stream is a queue: launches, copies, memsets, event records and the libraries' calls
 * are appended and run only when the host synchronises on them: a stream or event
 * synchronisation, a blocking copy, cudaDeviceSynchronize, cudaFree, or a query. So a
 * result read without waiting for the work that makes it is not there yet, and a buffer
 * reused before the work queued on another stream has finished is overwritten first.
 * Each piece of work carries the positions it waits for on other streams: an event's
 * record (cudaStreamWaitEvent), and the legacy default stream's implicit ordering with
 * the blocking streams. cudaDeviceSynchronize runs the streams' work one piece at a time
 * in an order drawn from the seed, so streams that should wait for each other and do not
 * meet in either order; a wait on one stream or event first runs the device's streams
 * that outrank it (priorities drawn from the seed at each wait) to their ends, so work
 * that misses a wait for work on the stream waited on runs before it under some seed.
 *
 * Queries: the first query of an event (or stream) since its work was queued answers
 * cudaErrorNotReady, as a busy GPU would; the next runs the work and answers cudaSuccess,
 * so polling loops end. Copies from pageable host memory are staged at the call, as
 * CUDA's are; copies to pageable host memory return once done (CUDA's rules); pinned
 * memory is read and written when the copy's turn comes. */
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <set>

#include "internal.h"

struct CUstream_st {}; /* handles are wemu::Stream pointers; this only names the type */
struct CUevent_st {};

namespace wemu {

namespace {

struct Event {
    int device;
    unsigned flags;
    Stream *stream = nullptr; /* where it was last recorded; null: never */
    uint64_t seq = 0;
    bool queried = false;     /* the first query since the record answered not ready */
};

std::set<Stream *> &live_streams = *new std::set<Stream *>;
std::set<Event *> &live_events = *new std::set<Event *>;
/* destroyed streams: kept, as waits may name them */
std::vector<Stream *> &retired = *new std::vector<Stream *>;
/* queried once since their last enqueue */
std::set<Stream *> &queried_streams = *new std::set<Stream *>;
uint64_t drains;

struct Marker : Op {
    void run() override {}
};

struct Copy : Op {
    void *dst;
    const void *src;
    size_t n;
    std::vector<char> staged; /* a pageable source, copied at the call */
    void run() override { memcpy(dst, staged.empty() ? src : staged.data(), n); }
};

struct Set : Op {
    void *dst;
    int value;
    size_t n;
    void run() override { memset(dst, value, n); }
};

struct Host : Op {
    std::function<void()> fn;
    void run() override { fn(); }
};

Event *event_of(cudaEvent_t e)
{
    Event *ev = reinterpret_cast<Event *>(e);
    return live_events.count(ev) ? ev : nullptr;
}

bool done(const Stream *s, uint64_t seq)
{
    return s->completed >= seq;
}

const char *kind_name(cudaMemcpyKind k)
{
    switch (k) {
    case cudaMemcpyHostToHost: return "HostToHost";
    case cudaMemcpyHostToDevice: return "HostToDevice";
    case cudaMemcpyDeviceToHost: return "DeviceToHost";
    case cudaMemcpyDeviceToDevice: return "DeviceToDevice";
    default: return "Default";
    }
}

/* Checks a copy's pointers against its kind (Default: inferred) and queues it on s; sync:
 * returns once it is done. */
cudaError_t copy(void *dst, const void *src, size_t n, cudaMemcpyKind kind, Stream *s,
                 bool sync, const char *call)
{
    if (!s)
        return fail(cudaErrorInvalidResourceHandle);
    if (sticky(s->device) != cudaSuccess)
        return fail(sticky(s->device));
    if (n == 0)
        return cudaSuccess;
    if (!dst || !src)
        return fail(cudaErrorInvalidValue);
    /* memory freed as device memory may be the host's again: only live device memory is
     * device memory here */
    Region rd = classify(dst), rs = classify(src);
    bool dst_dev = rd.kind == Mem::device, src_dev = rs.kind == Mem::device;
    if (kind == cudaMemcpyDefault)
        kind = dst_dev ? (src_dev ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                       : (src_dev ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
    bool want_dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    bool want_src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    const char *bad_dst = want_dst_dev ? check_device_range(dst, n, -1)
                          : dst_dev    ? "device memory, not host memory"
                                       : nullptr;
    const char *bad_src = want_src_dev ? check_device_range(src, n, -1)
                          : src_dev    ? "device memory, not host memory"
                                       : nullptr;
    if (bad_dst || bad_src) {
        report("%s(dst %s, src %s, %zu bytes, cudaMemcpy%s): the %s is %s", call,
               describe(dst).c_str(), describe(src).c_str(), n, kind_name(kind),
               bad_dst ? "destination" : "source", bad_dst ? bad_dst : bad_src);
        return fail(cudaErrorInvalidValue);
    }
    auto op = std::make_unique<Copy>();
    op->dst = dst;
    op->src = src;
    op->n = n;
    op->what = call;
    bool pageable_src = !src_dev && rs.kind != Mem::pinned;
    bool pageable_dst = !dst_dev && rd.kind != Mem::pinned;
    if (kind == cudaMemcpyHostToDevice && pageable_src)
        op->staged.assign(static_cast<const char *>(src), static_cast<const char *>(src) + n);
    uint64_t pos = enqueue(s, std::move(op));
    /* to pageable memory CUDA returns once the copy is done (also cudaMemcpyAsync) */
    if (sync || (pageable_dst && kind != cudaMemcpyDeviceToDevice))
        settle(s, pos);
    return sticky(s->device) != cudaSuccess ? fail(sticky(s->device)) : cudaSuccess;
}

cudaError_t set(void *dst, int value, size_t n, Stream *s, const char *call)
{
    if (!s)
        return fail(cudaErrorInvalidResourceHandle);
    if (sticky(s->device) != cudaSuccess)
        return fail(sticky(s->device));
    if (n == 0)
        return cudaSuccess;
    if (const char *bad = check_device_range(dst, n, -1)) {
        report("%s(%s, %d, %zu bytes): the destination is %s", call, describe(dst).c_str(),
               value, n, bad);
        return fail(cudaErrorInvalidValue);
    }
    auto op = std::make_unique<Set>();
    op->dst = dst;
    op->value = value;
    op->n = n;
    op->what = call;
    enqueue(s, std::move(op));
    return cudaSuccess;
}

/* The first query since the work was queued: not ready; later ones run it. */
cudaError_t query(Stream *s, uint64_t seq, bool *queried)
{
    if (done(s, seq))
        return sticky(s->device) != cudaSuccess ? sticky(s->device) : cudaSuccess;
    if (!*queried) {
        *queried = true;
        return cudaErrorNotReady;
    }
    settle(s, seq);
    return sticky(s->device) != cudaSuccess ? fail(sticky(s->device)) : cudaSuccess;
}

} // namespace

Stream *resolve(cudaStream_t h)
{
    if (device_count() == 0)
        return nullptr;
    if (h == nullptr || h == cudaStreamLegacy || h == cudaStreamPerThread)
        return device(current_device()).legacy;
    Stream *s = reinterpret_cast<Stream *>(h);
    return live_streams.count(s) ? s : nullptr;
}

uint64_t enqueue(Stream *s, std::unique_ptr<Op> op)
{
    Device &d = device(s->device);
    if (s->legacy) {
        for (Stream *t : d.streams)
            if (t != s && !(t->flags & cudaStreamNonBlocking) && !done(t, t->enqueued))
                op->deps.emplace_back(t, t->enqueued);
    } else if (!(s->flags & cudaStreamNonBlocking) && !done(d.legacy, d.legacy->enqueued)) {
        op->deps.emplace_back(d.legacy, d.legacy->enqueued);
    }
    op->device = s->device;
    s->queue.push_back(std::move(op));
    queried_streams.erase(s);
    return ++s->enqueued;
}

cudaError_t enqueue_host(cudaStream_t stream, std::function<void()> fn, const std::string &what)
{
    WEMU_LOCKED;
    Stream *s = resolve(stream);
    if (!s)
        return fail(cudaErrorInvalidResourceHandle);
    if (sticky(s->device) != cudaSuccess)
        return fail(sticky(s->device));
    enqueue_fn(s, std::move(fn), what);
    return cudaSuccess;
}

void enqueue_fn(Stream *s, std::function<void()> fn, const std::string &what)
{
    auto op = std::make_unique<Host>();
    op->fn = std::move(fn);
    op->what = what;
    enqueue(s, std::move(op));
}

void run_until(Stream *s, uint64_t seq)
{
    while (!done(s, seq)) {
        Op &op = *s->queue.front();
        for (auto &d : op.deps)
            run_until(d.first, d.second);
        if (sticky(op.device) == cudaSuccess) { /* a faulted device runs nothing more */
            if (!config().trace) {
                op.run();
            } else {
                auto t0 = std::chrono::steady_clock::now();
                op.run();
                double ms = std::chrono::duration<double, std::milli>(
                                std::chrono::steady_clock::now() - t0)
                                .count();
                report("cuda:%d stream %p: %s (%.3f ms on the CPU)", op.device, (void *)s,
                       op.what.c_str(), ms);
            }
        }
        s->queue.pop_front();
        s->completed++;
    }
}

void settle(Stream *s, uint64_t seq)
{
    if (done(s, seq))
        return;
    Rng rng(seed() * 0xD1B54A32D192ED03ull + ++drains);
    uint64_t mine = rng.next();
    std::vector<std::pair<uint64_t, Stream *>> ahead;
    for (Stream *t : device(s->device).streams)
        if (t != s) {
            uint64_t rank = rng.next();
            if (rank > mine && !done(t, t->enqueued))
                ahead.emplace_back(rank, t);
        }
    std::sort(ahead.begin(), ahead.end(),
              [](const std::pair<uint64_t, Stream *> &a, const std::pair<uint64_t, Stream *> &b) {
                  return a.first > b.first;
              });
    for (auto &a : ahead)
        run_until(a.second, a.second->enqueued);
    run_until(s, seq);
}

void drain_device(int dev)
{
    Device &d = device(dev);
    Rng rng(seed() * 0x9E3779B97F4A7C15ull + ++drains);
    std::vector<Stream *> pending;
    for (;;) {
        pending.clear();
        for (Stream *s : d.streams)
            if (!done(s, s->enqueued))
                pending.push_back(s);
        if (pending.empty())
            return;
        Stream *s = pending[(size_t)rng.below(pending.size())];
        run_until(s, s->completed + 1);
    }
}

void drain_all()
{
    for (int i = 0; i < device_count(); i++)
        drain_device(i);
}

std::vector<std::pair<Stream *, uint64_t>> tails(int dev)
{
    std::vector<std::pair<Stream *, uint64_t>> t;
    for (Stream *s : device(dev).streams)
        if (!done(s, s->enqueued))
            t.emplace_back(s, s->enqueued);
    return t;
}

} // namespace wemu

using namespace wemu;

extern "C" {

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags)
{
    WEMU_LOCKED;
    if (!stream || flags > cudaStreamNonBlocking)
        return fail(cudaErrorInvalidValue);
    if (device_count() == 0)
        return fail(cudaErrorNoDevice);
    Stream *s = new Stream{current_device(), flags, false};
    device(s->device).streams.push_back(s);
    live_streams.insert(s);
    *stream = reinterpret_cast<cudaStream_t>(s);
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *stream)
{
    return cudaStreamCreateWithFlags(stream, cudaStreamDefault);
}

/* CUDA lets the work finish after the call; here it runs first (nothing may use the
 * handle afterwards). */
cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
    WEMU_LOCKED;
    Stream *s = reinterpret_cast<Stream *>(stream);
    if (!stream || !live_streams.count(s))
        return fail(cudaErrorInvalidResourceHandle);
    run_until(s, s->enqueued);
    live_streams.erase(s);
    queried_streams.erase(s);
    auto &v = device(s->device).streams;
    for (size_t i = 0; i < v.size(); i++)
        if (v[i] == s) {
            v.erase(v.begin() + (long)i);
            break;
        }
    retired.push_back(s);
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
    WEMU_LOCKED;
    Stream *s = resolve(stream);
    if (!s)
        return fail(cudaErrorInvalidResourceHandle);
    settle(s, s->enqueued);
    return sticky(s->device) != cudaSuccess ? fail(sticky(s->device)) : cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream)
{
    WEMU_LOCKED;
    Stream *s = resolve(stream);
    if (!s)
        return fail(cudaErrorInvalidResourceHandle);
    bool queried = queried_streams.count(s) != 0;
    cudaError_t e = query(s, s->enqueued, &queried);
    if (queried)
        queried_streams.insert(s);
    return e;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
    WEMU_LOCKED;
    Stream *s = resolve(stream);
    Event *e = event_of(event);
    if (!s || !e)
        return fail(cudaErrorInvalidResourceHandle);
    if (flags != 0)
        return fail(cudaErrorInvalidValue);
    auto op = std::make_unique<Marker>();
    op->what = "cudaStreamWaitEvent";
    if (e->stream && !done(e->stream, e->seq)) /* the record as it stands now */
        op->deps.emplace_back(e->stream, e->seq);
    enqueue(s, std::move(op));
    return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
    WEMU_LOCKED;
    if (!event || flags > 0x0f)
        return fail(cudaErrorInvalidValue);
    if (device_count() == 0)
        return fail(cudaErrorNoDevice);
    Event *e = new Event{current_device(), flags};
    live_events.insert(e);
    *event = reinterpret_cast<cudaEvent_t>(e);
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *event)
{
    return cudaEventCreateWithFlags(event, cudaEventDefault);
}

/* Waits already queued keep the record they were given. */
cudaError_t cudaEventDestroy(cudaEvent_t event)
{
    WEMU_LOCKED;
    Event *e = event_of(event);
    if (!e)
        return fail(cudaErrorInvalidResourceHandle);
    live_events.erase(e);
    delete e;
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
    WEMU_LOCKED;
    Event *e = event_of(event);
    Stream *s = resolve(stream);
    if (!e || !s)
        return fail(cudaErrorInvalidResourceHandle);
    if (s->device != e->device) {
        report("cudaEventRecord: the event was made on cuda:%d, the stream is cuda:%d's",
               e->device, s->device);
        return fail(cudaErrorInvalidResourceHandle);
    }
    auto op = std::make_unique<Marker>();
    op->what = "cudaEventRecord";
    e->seq = enqueue(s, std::move(op));
    e->stream = s;
    e->queried = false;
    return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event)
{
    WEMU_LOCKED;
    Event *e = event_of(event);
    if (!e)
        return fail(cudaErrorInvalidResourceHandle);
    if (!e->stream)
        return cudaSuccess;
    return query(e->stream, e->seq, &e->queried);
}

cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
    WEMU_LOCKED;
    Event *e = event_of(event);
    if (!e)
        return fail(cudaErrorInvalidResourceHandle);
    if (!e->stream)
        return cudaSuccess;
    settle(e->stream, e->seq);
    return sticky(e->device) != cudaSuccess ? fail(sticky(e->device)) : cudaSuccess;
}

/* An emulated device has no timings worth reading. */
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    WEMU_LOCKED;
    Event *a = event_of(start), *b = event_of(end);
    if (!ms || !a || !b)
        return fail(cudaErrorInvalidResourceHandle);
    report("cudaEventElapsedTime: an emulated device has no timings");
    return fail(cudaErrorNotSupported);
}

cudaError_t cudaDeviceSynchronize(void)
{
    WEMU_LOCKED;
    if (device_count() == 0)
        return fail(cudaErrorNoDevice);
    drain_device(current_device());
    return sticky(current_device()) != cudaSuccess ? fail(sticky(current_device())) : cudaSuccess;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *user_data)
{
    if (!fn)
        return fail(cudaErrorInvalidValue);
    return enqueue_host(stream, [fn, user_data] { fn(user_data); }, "cudaLaunchHostFunc");
}

/* cudaMemcpy: the legacy stream's turn, then back once done (device to device: queued). */
cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
    WEMU_LOCKED;
    if (device_count() == 0)
        return fail(cudaErrorNoDevice);
    return copy(dst, src, count, kind, resolve(nullptr), kind != cudaMemcpyDeviceToDevice,
                "cudaMemcpy");
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                            cudaStream_t stream)
{
    WEMU_LOCKED;
    return copy(dst, src, count, kind, resolve(stream), false, "cudaMemcpyAsync");
}

cudaError_t cudaMemcpyPeerAsync(void *dst, int dst_device, const void *src, int src_device,
                                size_t count, cudaStream_t stream)
{
    WEMU_LOCKED;
    if (dst_device < 0 || dst_device >= device_count() || src_device < 0 ||
        src_device >= device_count())
        return fail(cudaErrorInvalidDevice);
    const char *bad = check_device_range(dst, count, dst_device);
    if (!bad)
        bad = check_device_range(src, count, src_device);
    if (bad && count) {
        report("cudaMemcpyPeerAsync(%s on cuda:%d, %s on cuda:%d, %zu bytes): %s",
               describe(dst).c_str(), dst_device, describe(src).c_str(), src_device, count, bad);
        return fail(cudaErrorInvalidValue);
    }
    return copy(dst, src, count, cudaMemcpyDeviceToDevice, resolve(stream), false,
                "cudaMemcpyPeerAsync");
}

cudaError_t cudaMemset(void *ptr, int value, size_t count)
{
    WEMU_LOCKED;
    if (device_count() == 0)
        return fail(cudaErrorNoDevice);
    return set(ptr, value, count, resolve(nullptr), "cudaMemset");
}

cudaError_t cudaMemsetAsync(void *ptr, int value, size_t count, cudaStream_t stream)
{
    WEMU_LOCKED;
    return set(ptr, value, count, resolve(stream), "cudaMemsetAsync");
}

} /* extern "C" */
