/* testkit/cuda_emu/runtime/block.cc: the executor: a launch's blocks one after another,
 * each block's threads as fibers of the host thread that synchronises.
 *
 * Between two barriers the block's threads run in an order drawn from the seed
 * (WEFT_CUDA_EMU_SEED), each until it blocks or ends: code that relies on an order the
 * hardware does not promise sees another one here. The order is a priority per thread,
 * drawn afresh at the block's start and at each barrier; the ready thread of highest
 * priority runs. So the threads that drew low priorities lag behind the others until the
 * next barrier, however many warp exchanges those go through (a warp can run ahead into
 * the next loop trip and overwrite shared memory another warp has yet to read, which a
 * uniform pick among the ready threads, catching up at every exchange, all but never
 * shows). A barrier (__syncthreads and its
 * counting forms) releases once every thread of the block waits at the same one; a thread
 * that ended first, or threads at different barriers, are a divergent barrier and a fault.
 * A warp exchange (shuffles, votes, __syncwarp) completes when every lane its mask names
 * has arrived with the same mask and kind; a lane of the mask that can never arrive
 * (ended, at a barrier, not in the block) is a deadlock and a fault. Shared memory is a
 * heap block per declaration and block, garbage-filled, so AddressSanitizer sees its
 * bounds; the blocks' order is a permutation drawn from the seed too.
 *
 * A fault stops the launch: the device keeps it as a sticky error (as a GPU's context
 * does), with the kernel, block and thread named on stderr. */
#include <signal.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>

#include "fiber.h"
#include "internal.h"
#include "sanitizers.h"

extern "C" {
WEMU_API const wemu::ThreadView *wemu_self = nullptr;
}

namespace wemu {

namespace {

enum class TState { ready, running, barrier, warp, done };

struct DevThread {
    ThreadView view;
    Fiber *fiber;
    TState state;
    int linear, lane, warp;
    int pos;             /* its place in the order until the next barrier (0: first) */
    uint64_t xres;       /* the warp exchange's result for this lane */
    int pred, bres;      /* barrier predicate and result */
    const void *site;    /* the barrier it waits at */
    const char *what;    /* the intrinsic it waits in */
};

struct Exchange {
    unsigned mask, arrived;
    int kind, width;
    const char *what;
    uint64_t val[32];
    int arg[32];
};

/* A warp's exchanges in progress: one per set of lanes (masks are disjoint). */
struct WarpState {
    Exchange ex[32];
    int n;
};

struct SharedDecl {
    void *key;
    void *mem;
    size_t size;
};

/* The block being executed: one at a time, under the API lock. */
struct Run {
    const LaunchSpec *spec;
    KernelJob *job;
    int dev;
    unsigned nthreads;
    size_t smem_limit;
    std::vector<DevThread> threads;
    /* The priority order drawn for the interval (order[k]: the thread at place k) and the
     * ready threads as a bit per place: the ready thread of highest priority is the lowest
     * bit set, found in a word or two (a heap of ranks took half of the emulator's time
     * with the 32 wake-ups of every shuffle). */
    std::vector<int> order;
    std::vector<uint64_t> ready;
    size_t ready_from;    /* no bit is set in the words below it */
    int nready;
    int live, at_barrier, exited;
    WarpState *warps;     /* one per warp of the block (warp_pool) */
    Rng rng{0};
    std::vector<SharedDecl> shared;
    void *dynamic;
    size_t static_bytes;
    DevThread *cur;
    bool faulted;
    cudaError_t error;
    std::string message;
};

Run *run_;
Fiber executor; /* the host thread's own stack, while it runs a block */
/* Fibers not in use, the last freed on top: a thread gets one when it first runs and gives
 * it back when it ends, so a block whose threads never block runs them all on two warm
 * stacks instead of touching one per thread. */
std::vector<Fiber *> &free_fibers = *new std::vector<Fiber *>;
unsigned fibers_made;
Fiber *dying; /* the stack of the thread that just ended: free once another one runs */
/* Static shared memory per kernel, learnt when it ran: a later launch that cannot fit it
 * fails at once, as the GPU's would. */
std::unordered_map<const void *, size_t> &kernel_static_smem =
    *new std::unordered_map<const void *, size_t>;
std::vector<WarpState> &warp_pool = *new std::vector<WarpState>;

const size_t kStackSize = 256 * 1024;
const uint64_t kPoison = ~0ull; /* what a lane reads from a lane outside the exchange */

std::string where(const Run &r, const DevThread *t)
{
    char buf[256];
    if (t)
        snprintf(buf, sizeof buf, "kernel %s, block (%u,%u,%u), thread (%u,%u,%u)",
                 r.spec->name, t->view.bid.x, t->view.bid.y, t->view.bid.z, t->view.tid.x,
                 t->view.tid.y, t->view.tid.z);
    else
        snprintf(buf, sizeof buf, "kernel %s, block (%u,%u,%u)", r.spec->name,
                 r.threads.empty() ? 0 : r.threads[0].view.bid.x,
                 r.threads.empty() ? 0 : r.threads[0].view.bid.y,
                 r.threads.empty() ? 0 : r.threads[0].view.bid.z);
    return buf;
}

void set_fault(Run &r, const DevThread *t, cudaError_t err, const std::string &what)
{
    if (r.faulted)
        return;
    r.faulted = true;
    r.error = err;
    r.message = where(r, t) + ": " + what;
}

/* From a device thread: the fault ends the launch; the thread is never resumed (so what
 * is a plain string: nothing on this stack is ever destroyed). */
[[noreturn]] void fault_here(cudaError_t err, const char *what)
{
    Run &r = *run_;
    DevThread *t = r.cur;
    set_fault(r, t, err, what);
    t->fiber->dirty = true;
    r.cur = nullptr;
    wemu_self = nullptr;
    fiber_switch(*t->fiber, executor, false);
    abort(); /* not reached: a faulted launch resumes no thread */
}

Run &need_run(const char *what)
{
    if (!run_ || !run_->cur) {
        report("%s called outside device code (no kernel is running on this thread)", what);
        abort();
    }
    return *run_;
}

void thread_entry();

/* Puts back the stack of the thread that ended before the switch that got here. */
void release_dying()
{
    if (dying)
        free_fibers.push_back(dying);
    dying = nullptr;
}

/* The next thread to run: the ready one of highest priority, with a stack when it has
 * none yet; NULL (a fault set) when no stack can be mapped. */
WEMU_HOT DevThread *pick(Run &r)
{
    while (!r.ready[r.ready_from])
        r.ready_from++;
    uint64_t &word = r.ready[r.ready_from];
    int place = (int)(r.ready_from * 64) + __builtin_ctzll(word);
    DevThread &t = r.threads[(size_t)r.order[(size_t)place]];
    if (!t.fiber) {
        if (free_fibers.empty()) {
            Fiber *f = new Fiber;
            if (!fiber_alloc(*f, kStackSize, fibers_made)) {
                delete f;
                set_fault(r, &t, cudaErrorLaunchOutOfResources,
                          "no memory for the stack of another device thread");
                return nullptr;
            }
            fibers_made++;
            free_fibers.push_back(f);
        }
        t.fiber = free_fibers.back();
        free_fibers.pop_back();
        fiber_reset(*t.fiber, thread_entry);
    }
    word &= word - 1;
    r.nready--;
    t.state = TState::running;
    r.cur = &t;
    wemu_self = &t.view;
    return &t;
}

/* From device thread t, which blocks or has ended: straight on to another ready thread,
 * or back to the executor when none is (a barrier to release, the block's end). */
WEMU_HOT void yield(Run &r, DevThread *t, bool exiting)
{
    if (exiting)
        dying = t->fiber;
    DevThread *n = !r.faulted && r.nready > 0 ? pick(r) : nullptr;
    if (n) {
        fiber_switch(*t->fiber, *n->fiber, exiting);
    } else {
        r.cur = nullptr;
        wemu_self = nullptr;
        fiber_switch(*t->fiber, executor, exiting);
    }
    release_dying(); /* t runs again */
}

__attribute__((no_sanitize_address)) void thread_entry()
{
    Run &r = *run_;
    DevThread *t = r.cur;
    fiber_started(*t->fiber);
    release_dying();
    r.job->run();
    t->state = TState::done;
    r.live--;
    r.exited++;
    yield(r, t, true);
    abort(); /* an ended thread is never entered again */
}

WEMU_HOT void make_ready(Run &r, DevThread &t)
{
    t.state = TState::ready;
    size_t w = (size_t)t.pos / 64;
    r.ready[w] |= 1ull << (t.pos % 64);
    r.ready_from = std::min(r.ready_from, w);
    r.nready++;
}

/* A fresh order for the interval that begins, with no thread ready yet: a permutation
 * (Fisher-Yates) from a generator seeded by one draw of the launch's, so that the
 * launch's sequence does not depend on the block's size. */
void draw_order(Run &r)
{
    Rng rng(r.rng.next());
    for (unsigned i = 0; i < r.nthreads; i++)
        r.order[i] = (int)i;
    for (unsigned i = r.nthreads - 1; i > 0; i--)
        std::swap(r.order[i], r.order[(size_t)rng.below(i + 1)]);
    for (unsigned k = 0; k < r.nthreads; k++)
        r.threads[(size_t)r.order[k]].pos = (int)k;
    std::fill(r.ready.begin(), r.ready.end(), 0);
    r.ready_from = r.ready.size() - 1;
    r.nready = 0;
}

/* Every live thread waits at a barrier: release it, or fault when it diverged. */
void release_barrier(Run &r)
{
    const DevThread *first = nullptr;
    int count = 0;
    for (DevThread &t : r.threads) {
        if (t.state != TState::barrier)
            continue;
        if (!first)
            first = &t;
        else if (t.site != first->site) {
            set_fault(r, &t, cudaErrorLaunchFailure,
                      "threads wait at different __syncthreads (thread (" +
                          std::to_string(first->view.tid.x) + "," +
                          std::to_string(first->view.tid.y) + "," +
                          std::to_string(first->view.tid.z) +
                          ") at another one): a divergent barrier");
            return;
        }
        count += t.pred != 0;
    }
    if (r.exited > 0) {
        set_fault(r, first, cudaErrorLaunchFailure,
                  "__syncthreads reached by " + std::to_string(r.at_barrier) + " of " +
                      std::to_string(r.nthreads) + " threads; " + std::to_string(r.exited) +
                      " ended without reaching it (a divergent barrier)");
        return;
    }
    r.at_barrier = 0;
    draw_order(r);
    for (DevThread &t : r.threads)
        if (t.state == TState::barrier) {
            t.bres = count;
            make_ready(r, t);
        }
}

/* No thread can run: name who waits for what. */
void deadlock(Run &r)
{
    const DevThread *w = nullptr;
    int in_warp = 0;
    for (DevThread &t : r.threads)
        if (t.state == TState::warp) {
            in_warp++;
            if (!w)
                w = &t;
        }
    std::string msg = "deadlock: " + std::to_string(in_warp) + " thread(s) wait in " +
                      (w ? w->what : "a warp intrinsic") + " for lanes that never arrive (" +
                      std::to_string(r.exited) + " ended, " + std::to_string(r.at_barrier) +
                      " wait at __syncthreads)";
    set_fault(r, w, cudaErrorLaunchFailure, msg);
}

void free_shared(Run &r)
{
    for (SharedDecl &s : r.shared)
        free(s.mem);
    r.shared.clear();
    free(r.dynamic);
    r.dynamic = nullptr;
}

void run_block(Run &r, uint3 bid)
{
    const dim3 b = r.spec->block;
    draw_order(r);
    for (unsigned i = 0; i < r.nthreads; i++) {
        DevThread &t = r.threads[i];
        t.view.tid = uint3{i % b.x, (i / b.x) % b.y, i / (b.x * b.y)};
        t.view.bid = bid;
        t.view.bdim = b;
        t.view.gdim = r.spec->grid;
        t.fiber = nullptr; /* one when it first runs */
        t.linear = (int)i;
        t.lane = (int)(i % 32);
        t.warp = (int)(i / 32);
        make_ready(r, t);
    }
    for (unsigned w = 0; w < (r.nthreads + 31) / 32; w++)
        r.warps[w].n = 0;
    r.live = (int)r.nthreads;
    r.at_barrier = r.exited = 0;
    r.static_bytes = 0;
    /* exactly shmem bytes: an access past them is out of bounds (any access when 0) */
    if (posix_memalign(&r.dynamic, 128, r.spec->shmem ? r.spec->shmem : 1) != 0) {
        set_fault(r, nullptr, cudaErrorMemoryAllocation, "out of host memory for shared memory");
        return;
    }
    memset(r.dynamic, 0xff, r.spec->shmem ? r.spec->shmem : 1);
    while (!r.faulted) {
        if (r.nready == 0) {
            if (r.live == 0)
                break;
            if (r.at_barrier == r.live) {
                release_barrier(r);
                continue;
            }
            deadlock(r);
            break;
        }
        DevThread *t = pick(r);
        if (!t)
            break;
        fiber_switch(executor, *t->fiber, false);
        release_dying();
        wemu_self = nullptr;
        r.cur = nullptr;
    }
    /* the stacks of threads left mid-kernel by a fault: cleaned before their reuse */
    for (DevThread &t : r.threads)
        if (t.fiber && t.state != TState::done) {
            t.fiber->dirty = true;
            free_fibers.push_back(t.fiber);
        }
    free_shared(r);
}

bool coprime(uint64_t a, uint64_t b)
{
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a == 1;
}

uint64_t launches;

/* Prints the running thread when a sanitizer reports. */
[[maybe_unused]] void print_context()
{
    if (run_ && run_->cur)
        fprintf(stderr, "weft CUDA emulator: in %s\n", where(*run_, run_->cur).c_str());
}

void on_signal(int sig, siginfo_t *info, void *)
{
    if (run_ && run_->cur) {
        const char *why = sig == SIGILL ? "misaligned address (an access not aligned to its "
                                          "size; a GPU reports cudaErrorMisalignedAddress)"
                          : sig == SIGBUS ? "bus error"
                                          : "illegal address (cudaErrorIllegalAddress on a GPU)";
        char buf[512];
        int n = snprintf(buf, sizeof buf, "weft CUDA emulator: %s: %s at %p\n",
                         where(*run_, run_->cur).c_str(), why, info ? info->si_addr : nullptr);
        if (n > 0)
            (void)!write(2, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

} // namespace

/* Installs the context printers once (the first launch). */
static void install_handlers()
{
    static bool done;
    if (done)
        return;
    done = true;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    /* SIGILL: -fsanitize=alignment traps in the release build's kernels. */
    sigaction(SIGILL, &sa, nullptr);
#ifdef WEMU_ASAN
    __sanitizer_set_death_callback(print_context);
#else
    sigaction(SIGSEGV, &sa, nullptr);
    sigaction(SIGBUS, &sa, nullptr);
#endif
}

cudaError_t run_grid(const LaunchSpec &spec, KernelJob &job, int dev, size_t smem_limit)
{
    install_handlers();
    Run r;
    r.spec = &spec;
    r.job = &job;
    r.dev = dev;
    r.nthreads = spec.block.x * spec.block.y * spec.block.z;
    r.smem_limit = smem_limit;
    r.threads.resize(r.nthreads);
    r.order.resize(r.nthreads);
    r.ready.resize((r.nthreads + 63) / 64);
    if (warp_pool.size() < (r.nthreads + 31) / 32) /* kept across launches: 13 KB a warp */
        warp_pool.resize((r.nthreads + 31) / 32);
    r.warps = warp_pool.data();
    r.dynamic = nullptr;
    r.cur = nullptr;
    r.faulted = false;
    r.error = cudaSuccess;
    r.rng = Rng(seed() * 0x2545F4914F6CDD1Dull + ++launches);
    const uint64_t gx = spec.grid.x, gy = spec.grid.y, gz = spec.grid.z;
    const uint64_t n = gx * gy * gz;
    uint64_t start = r.rng.below(n), stride = 1;
    for (int i = 0; i < 8 && n > 2; i++) {
        uint64_t s = 1 + r.rng.below(n - 1);
        if (coprime(s, n)) {
            stride = s;
            break;
        }
    }
    Run *outer = run_;
    run_ = &r;
    uint64_t b = start;
    for (uint64_t i = 0; i < n && !r.faulted; i++) {
        run_block(r, uint3{(unsigned)(b % gx), (unsigned)(b / gx % gy), (unsigned)(b / (gx * gy))});
        b = (b + stride) % n;
    }
    run_ = outer;
    if (!r.faulted) {
        kernel_static_smem[spec.fn] = r.static_bytes;
        return cudaSuccess;
    }
    fault(dev, r.error, r.message);
    return r.error;
}

/* The static shared memory a kernel was seen to use (0 before it first ran). */
size_t static_smem_of(const void *fn)
{
    auto it = kernel_static_smem.find(fn);
    return it == kernel_static_smem.end() ? 0 : it->second;
}

} // namespace wemu

using namespace wemu;

extern "C" WEMU_API int wemu_syncthreads(int kind, int pred)
{
    Run &r = need_run("__syncthreads");
    DevThread *t = r.cur;
    t->state = TState::barrier;
    t->pred = kind == 0 ? 0 : pred != 0;
    t->site = __builtin_return_address(0);
    r.at_barrier++;
    yield(r, t, false);
    switch (kind) {
    case 1: return t->bres;                               /* count */
    case 2: return t->bres == r.nthreads;                 /* and */
    case 3: return t->bres > 0;                           /* or */
    default: return 0;
    }
}

extern "C" WEMU_API WEMU_HOT uint64_t wemu_warp(int kind, unsigned mask, uint64_t value, int arg,
                                       int width, const char *what)
{
    Run &r = need_run(what);
    DevThread *t = r.cur;
    const unsigned bit = 1u << t->lane;
    char buf[256];
    if (!(mask & bit)) {
        snprintf(buf, sizeof buf, "%s with mask 0x%08x, which does not name the calling lane %d",
                 what, mask, t->lane);
        fault_here(cudaErrorLaunchFailure, buf);
    }
    if (width < 1 || width > 32 || (width & (width - 1)) != 0) {
        snprintf(buf, sizeof buf, "%s with width %d (a power of 2 up to 32)", what, width);
        fault_here(cudaErrorLaunchFailure, buf);
    }
    const unsigned lanes = r.nthreads - (unsigned)t->warp * 32 < 32 ? r.nthreads - (unsigned)t->warp * 32 : 32;
    const unsigned exist = lanes == 32 ? ~0u : (1u << lanes) - 1;
    if (mask & ~exist) {
        snprintf(buf, sizeof buf,
                 "%s with mask 0x%08x names lanes that do not exist: warp %d of a %u-thread "
                 "block has %u",
                 what, mask, t->warp, r.nthreads, lanes);
        fault_here(cudaErrorLaunchFailure, buf);
    }
    WarpState &ws = r.warps[t->warp];
    Exchange *e = nullptr;
    for (int i = 0; i < ws.n; i++)
        if (ws.ex[i].mask & mask) {
            e = &ws.ex[i];
            break;
        }
    if (!e) {
        e = &ws.ex[ws.n++]; /* at most 32: the masks are disjoint and name a lane each */
        e->mask = mask;
        e->arrived = 0;
        e->kind = kind;
        e->width = width;
        e->what = what;
    } else if (e->mask != mask || e->kind != kind || e->width != width) {
        snprintf(buf, sizeof buf,
                 "%s with mask 0x%08x while lanes of its warp wait in %s with mask 0x%08x "
                 "(divergent warp intrinsics)",
                 what, mask, e->what, e->mask);
        fault_here(cudaErrorLaunchFailure, buf);
    }
    e->val[t->lane] = value;
    e->arg[t->lane] = arg;
    e->arrived |= bit;
    if (e->arrived != e->mask) {
        t->state = TState::warp;
        t->what = what;
        yield(r, t, false);
        return t->xres;
    }
    /* the last lane in: everyone's result */
    const unsigned w = (unsigned)e->width;
    uint64_t votes = 0;
    for (int l = 0; l < 32; l++)
        if (e->mask & (1u << l))
            votes |= (uint64_t)(e->val[l] != 0) << l;
    uint64_t mine = 0;
    const int base_warp = t->warp * 32;
    for (int l = 0; l < 32; l++) {
        if (!(e->mask & (1u << l)))
            continue;
        unsigned group = (unsigned)l & ~(w - 1), in = (unsigned)l & (w - 1);
        int src = l;
        switch (e->kind) {
        case SHFL_IDX: src = (int)(group + ((unsigned)e->arg[l] & (w - 1))); break;
        case SHFL_UP: src = in >= (unsigned)e->arg[l] ? l - e->arg[l] : l; break;
        case SHFL_DOWN: src = in + (unsigned)e->arg[l] < w ? l + e->arg[l] : l; break;
        case SHFL_XOR: {
            int x = l ^ e->arg[l];
            src = (x < 0 || x >= 32 || ((unsigned)x & ~(w - 1)) > group) ? l : x;
            break;
        }
        default: break;
        }
        uint64_t res;
        switch (e->kind) {
        case BALLOT: res = votes; break;
        case ANY: res = votes != 0; break;
        case ALL: res = votes == (uint64_t)e->mask; break;
        case SYNCWARP: res = 0; break;
        default: res = (e->mask & (1u << src)) ? e->val[src] : kPoison; break;
        }
        if (l == t->lane) {
            mine = res;
            continue;
        }
        DevThread &o = r.threads[(size_t)(base_warp + l)];
        o.xres = res;
        make_ready(r, o);
    }
    *e = ws.ex[--ws.n];
    return mine;
}

extern "C" WEMU_API void *wemu_shared_static(void *key, size_t size, size_t align, const char *name)
{
    Run &r = need_run("__shared__");
    for (SharedDecl &s : r.shared)
        if (s.key == key)
            return s.mem;
    size_t total = r.static_bytes + size + r.spec->shmem;
    if (total > r.smem_limit) {
        char buf[256];
        snprintf(buf, sizeof buf,
                 "__shared__ %s takes the block's shared memory to %zu bytes (%zu static, %zu "
                 "dynamic), more than the %zu a block may use",
                 name, total, r.static_bytes + size, r.spec->shmem, r.smem_limit);
        fault_here(cudaErrorLaunchOutOfResources, buf);
    }
    void *mem = nullptr;
    if (posix_memalign(&mem, align > 16 ? align : 16, size ? size : 1) != 0)
        fault_here(cudaErrorMemoryAllocation, "out of host memory for __shared__ memory");
    memset(mem, 0xff, size ? size : 1);
    r.shared.push_back(SharedDecl{key, mem, size});
    r.static_bytes += size;
    return mem;
}

extern "C" WEMU_API void *wemu_shared_dynamic(size_t align, const char *name)
{
    Run &r = need_run("extern __shared__");
    if (align > 16) {
        char buf[160];
        snprintf(buf, sizeof buf,
                 "extern __shared__ %s asks for %zu-byte alignment; dynamic shared memory is "
                 "only promised 16",
                 name, align);
        fault_here(cudaErrorMisalignedAddress, buf);
    }
    return r.dynamic;
}

extern "C" WEMU_API void wemu_fault(const char *what, const void *addr)
{
    if (!run_ || !run_->cur) {
        report("%s outside device code", what);
        abort();
    }
    char buf[200];
    if (addr) {
        snprintf(buf, sizeof buf, "%s on %p, which is not aligned to its size", what, addr);
        fault_here(cudaErrorMisalignedAddress, buf);
    }
    fault_here(cudaErrorLaunchFailure, what);
}
