/* ops/profiler.c: recording events (weft/profiler.h): the ops at the core's dispatch
 * funnel, user ranges, the autograd engine's nodes; torch.profiler's schedule; and
 * WEFT_PROFILE, read when libweft-ops loads.
 *
 * The recorder is the core's observer (weft/observer.h) while it records or the memory
 * history is on, and no observer at all otherwise: the core then tests one pointer per
 * op, storage and backward node, and nothing here runs.
 *
 * Every thread appends to its own list of events, in chunks that never move, so a report
 * can read a list while its thread goes on; start and clear bump a generation, and a
 * thread drops its events of an older generation at its next event. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "profiler_internal.h"
#include "weft/dtype.h"
#include "weft/error.h"
#include "weft/observer.h"
#include "weft/profiler.h"

static int prof_flags; /* PROF_OPS, PROF_MEMORY; atomic */

static struct {
    pthread_mutex_t lock;
    struct prof_thread *threads;
    uint32_t generation;
    struct weft_profiler_options options;
    uint64_t t0; /* ns; the trace's zero */
    /* interned names and shape strings (recording only) */
    char **strings;
    size_t nstrings, cap;
    /* the schedule */
    bool scheduled;
    struct weft_profiler_schedule sched;
    char *dir;
    int64_t step;     /* the step in progress, from 0 */
    int cycle_report; /* reports written */
    char last_report[4096];
    bool env_run;     /* WEFT_PROFILE */
} prof = {.lock = PTHREAD_MUTEX_INITIALIZER};

static __thread struct prof_thread *current;

#define PROF_FLAGS() __atomic_load_n(&prof_flags, __ATOMIC_RELAXED)
static pthread_key_t thread_key;
static pthread_once_t thread_key_once = PTHREAD_ONCE_INIT;

uint64_t weft_profiler_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t weft_profiler_zero_ns(void)
{
    return prof.t0;
}

struct prof_thread *weft_profiler_threads(void)
{
    return prof.threads;
}

uint32_t weft_profiler_generation(void)
{
    return __atomic_load_n(&prof.generation, __ATOMIC_ACQUIRE);
}

/* ---- interned strings ---------------------------------------------------------------- */

/* A copy of s that lives until the profiler is cleared; NULL when out of memory. Few
 * distinct strings (op names, ranges, shapes of a step), so a linear table of recent
 * ones is enough: looked up newest first. */
const char *weft_profiler_intern(const char *s)
{
    pthread_mutex_lock(&prof.lock);
    const char *found = NULL;
    size_t look = prof.nstrings < 256 ? prof.nstrings : 256;
    for (size_t i = 0; i < look && !found; i++)
        if (strcmp(prof.strings[prof.nstrings - 1 - i], s) == 0)
            found = prof.strings[prof.nstrings - 1 - i];
    if (!found && (prof.nstrings < prof.cap ||
                   weft_grow((void **)&prof.strings, &prof.cap, prof.nstrings + 1,
                             sizeof *prof.strings) == 0)) {
        char *copy = strdup(s);
        if (copy)
            prof.strings[prof.nstrings++] = copy;
        found = copy;
    }
    pthread_mutex_unlock(&prof.lock);
    return found;
}

static void strings_free_locked(void)
{
    for (size_t i = 0; i < prof.nstrings; i++)
        free(prof.strings[i]);
    free(prof.strings);
    prof.strings = NULL;
    prof.nstrings = prof.cap = 0;
}

/* ---- per-thread lists ---------------------------------------------------------------- */

static void thread_exit(void *arg)
{
    struct prof_thread *th = arg;
    __atomic_store_n(&th->exited, true, __ATOMIC_RELEASE);
}

static void thread_key_init(void)
{
    pthread_key_create(&thread_key, thread_exit);
}

static void chunks_free(struct prof_chunk *c)
{
    while (c) {
        struct prof_chunk *next = c->next;
        free(c);
        c = next;
    }
}

/* This thread's list at the current generation (reset when older); NULL when out of
 * memory. */
static struct prof_thread *thread_get(void)
{
    struct prof_thread *th = current;
    uint32_t gen = weft_profiler_generation();
    if (th && th->generation == gen)
        return th;
    if (!th) {
        th = calloc(1, sizeof *th);
        if (!th)
            return NULL;
        th->tid = (int64_t)syscall(SYS_gettid);
        pthread_once(&thread_key_once, thread_key_init);
        pthread_setspecific(thread_key, th);
        pthread_mutex_lock(&prof.lock);
        th->next = prof.threads;
        prof.threads = th;
        pthread_mutex_unlock(&prof.lock);
        current = th;
    }
    /* Events of an older generation: forget them (reports read only this one's). */
    __atomic_store_n(&th->count, 0, __ATOMIC_RELEASE);
    chunks_free(th->head);
    th->head = th->tail = NULL;
    th->depth = 0;
    th->step_event = NULL;
    th->mark_alloc = th->alloc_total;
    th->mark_freed = th->freed_total;
    __atomic_store_n(&th->generation, gen, __ATOMIC_RELEASE);
    return th;
}

static struct prof_event *event_new(struct prof_thread *th)
{
    struct prof_chunk *c = th->tail;
    if (!c || c->used == PROF_CHUNK_EVENTS) {
        c = calloc(1, sizeof *c);
        if (!c)
            return NULL;
        if (th->tail)
            th->tail->next = c;
        else
            th->head = c;
        th->tail = c;
    }
    return &c->events[c->used];
}

/* Publishes the event event_new returned (the chunk's count, then the thread's). */
static void event_publish(struct prof_thread *th)
{
    th->tail->used++;
    __atomic_store_n(&th->count, th->count + 1, __ATOMIC_RELEASE);
}

/* Opens an event: on the thread's stack until event_close. alloc_from: the allocation
 * counts the event's memory starts from. */
static struct prof_event *event_open(struct prof_thread *th, const char *name, int kind,
                                     uint64_t alloc_from, uint64_t freed_from)
{
    if (th->depth >= PROF_MAX_DEPTH)
        return NULL;
    struct prof_event *e = event_new(th);
    if (!e)
        return NULL;
    *e = (struct prof_event){.name = name, .kind = (uint8_t)kind, .node = th->node,
                             .alloc = alloc_from, .freed = freed_from, .depth = th->depth,
                             .device_type = -1};
    event_publish(th);
    th->stack[th->depth++] = e;
    e->t0 = weft_profiler_now_ns();
    return e;
}

static void event_close(struct prof_thread *th, struct prof_event *e)
{
    uint64_t t1 = weft_profiler_now_ns();
    e->alloc = th->alloc_total - e->alloc;
    e->freed = th->freed_total - e->freed;
    th->mark_alloc = th->alloc_total;
    th->mark_freed = th->freed_total;
    __atomic_store_n(&e->t1, t1 > e->t0 ? t1 : e->t0 + 1, __ATOMIC_RELEASE);
    if (th->depth > 0 && th->stack[th->depth - 1] == e)
        th->depth--;
}

/* ---- the dispatch hook ----------------------------------------------------------------- */

/* Appends piece to buf (of size, holding *n bytes) when it fits whole, keeping room for
 * the closing bracket; false when it did not fit. */
static bool append(char *buf, size_t size, size_t *n, const char *piece)
{
    size_t len = strlen(piece);
    if (*n + len + 2 > size)
        return false;
    memcpy(buf + *n, piece, len + 1);
    *n += len;
    return true;
}

/* record_shapes: "[[64, 784], [784, 128]]" and "[\"float32\", \"float32\"]", both JSON
 * (operands that do not fit are left out whole). */
static void describe_operands(struct prof_event *e, const struct weft_op_call *call)
{
    char shapes[512] = "[", types[256] = "[", one[200];
    size_t ns = 1, nt = 1;
    for (int i = 0; i < call->nin; i++) {
        const weft_tensor *t = call->in[i];
        const char *sep = i > 0 ? ", " : "";
        snprintf(one, sizeof one, "%s", sep);
        if (t)
            weft_shape_str(t->ndim, t->shape, one + strlen(one), sizeof one - strlen(one));
        else
            snprintf(one + strlen(one), sizeof one - strlen(one), "[]");
        if (!append(shapes, sizeof shapes, &ns, one))
            break;
        snprintf(one, sizeof one, "%s\"%s\"", sep, t ? weft_dtype_name(t->dtype) : "Scalar");
        if (!append(types, sizeof types, &nt, one))
            break;
    }
    append(shapes, sizeof shapes, &ns, "]");
    append(types, sizeof types, &nt, "]");
    e->shapes = weft_profiler_intern(shapes);
    e->dtypes = weft_profiler_intern(types);
}

/* A copy that changes a tensor's strides on its own device and dtype: contiguous(), or a
 * clone into another layout (what PyTorch's profile shows as aten::contiguous/clone). */
static bool is_layout_copy(const struct weft_op_call *call)
{
    if (call->op != WEFT_OP_COPY || call->nin < 1 || call->nout < 1 || !call->in[0] ||
        !call->out[0])
        return false;
    const weft_tensor *a = call->in[0], *b = call->out[0];
    if (a->dtype != b->dtype || a->device.type != b->device.type ||
        a->device.index != b->device.index || a->ndim != b->ndim)
        return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] > 1 && a->stride[d] != b->stride[d])
            return true;
    return false;
}

/* The observer's op_enter: the op's event, handed to op_exit (NULL when not recorded). */
static void *op_enter(const struct weft_op_call *call)
{
    int flags = PROF_FLAGS();
    if (flags & PROF_MEMORY)
        weft_memory_history_attribute(call);
    struct prof_thread *th = (flags & PROF_OPS) ? thread_get() : NULL;
    /* The op's memory counts from the previous op's end: its front end allocated its
     * outputs in between. */
    struct prof_event *e =
        th ? event_open(th, weft_op_name(call->op), PROF_OP, th->mark_alloc, th->mark_freed)
           : NULL;
    if (!e)
        return NULL;
    const weft_tensor *where = call->nout > 0 && call->out[0] ? call->out[0]
                               : call->nin > 0 && call->in[0] ? call->in[0]
                                                              : NULL;
    if (where) {
        e->device_type = (int8_t)where->device.type;
        e->device_index = (int16_t)where->device.index;
    }
    if (prof.options.record_shapes)
        describe_operands(e, call);
    if (is_layout_copy(call)) {
        e->layout_copy = true;
        e->copy_bytes = weft_tensor_numel(call->out[0]) * (int64_t)weft_dtype_size(call->out[0]->dtype);
    }
    th->mark_alloc = th->alloc_total;
    th->mark_freed = th->freed_total;
    return e;
}

static void op_exit(void *token, const struct weft_op_call *call, int rc)
{
    (void)call, (void)rc;
    struct prof_thread *th = current;
    if (token && th)
        event_close(th, token);
}

/* The observer's storage methods: the bytes each thread allocated and freed, and the
 * memory history. */
static void storage_alloc(const struct weft_storage *s)
{
    int flags = PROF_FLAGS();
    struct prof_thread *th = (flags & PROF_OPS) && prof.options.profile_memory ? thread_get() : NULL;
    if (th)
        th->alloc_total += s->nbytes;
    if (flags & PROF_MEMORY)
        weft_memory_history_alloc(s);
}

static void storage_free(const struct weft_storage *s)
{
    int flags = PROF_FLAGS();
    struct prof_thread *th = (flags & PROF_OPS) && prof.options.profile_memory ? thread_get() : NULL;
    if (th)
        th->freed_total += s->nbytes;
    if (flags & PROF_MEMORY)
        weft_memory_history_free(s);
}

const char *weft_profiler_open_range(void)
{
    struct prof_thread *th = current;
    if (!th || th->generation != weft_profiler_generation())
        return "";
    for (int d = th->depth - 1; d >= 0; d--)
        if (th->stack[d]->kind != PROF_OP)
            return th->stack[d]->name;
    return th->node ? th->node : "";
}

/* ---- ranges and the engine's nodes --------------------------------------------------------- */

static void range_push(const char *name, int kind)
{
    struct prof_thread *th = thread_get();
    const char *copy = th ? weft_profiler_intern(name) : NULL;
    if (copy)
        event_open(th, copy, kind, th->alloc_total, th->freed_total);
}

static void range_pop(int kind)
{
    struct prof_thread *th = thread_get();
    if (!th || th->depth == 0 || th->stack[th->depth - 1]->kind != kind)
        return;
    event_close(th, th->stack[th->depth - 1]);
}

void weft_profiler_range_push(const char *name)
{
    if (PROF_FLAGS() & PROF_OPS)
        range_push(name ? name : "", PROF_RANGE);
}

void weft_profiler_range_pop(void)
{
    if (PROF_FLAGS() & PROF_OPS)
        range_pop(PROF_RANGE);
}

/* The observer's node methods: a backward node is a range, and the ops inside it carry
 * its name. The token is the node that was running (nodes nest when a backward function
 * runs a checkpointed segment's forward). */
static void *node_enter(const char *name)
{
    struct prof_thread *th = (PROF_FLAGS() & PROF_OPS) ? thread_get() : NULL;
    if (!th)
        return NULL;
    const char *prev = th->node;
    range_push(name, PROF_NODE);
    th->node = name; /* a node's name is static (weft_node_create) */
    return (void *)prev;
}

static void node_exit(void *token)
{
    struct prof_thread *th = current;
    if (!th || th->generation != weft_profiler_generation())
        return;
    range_pop(PROF_NODE);
    th->node = token;
}

static const struct weft_observer observer = {
    .struct_size = sizeof(struct weft_observer),
    .op_enter = op_enter,
    .op_exit = op_exit,
    .storage_alloc = storage_alloc,
    .storage_free = storage_free,
    .node_enter = node_enter,
    .node_exit = node_exit,
};

int weft_profiler_flags(void)
{
    return PROF_FLAGS();
}

int weft_profiler_flags_change(int on, int off)
{
    pthread_mutex_lock(&prof.lock);
    int was = PROF_FLAGS(), now = (was | on) & ~off, rc = 0;
    if (!was && now)
        rc = weft_observer_set(&observer);
    if (rc == 0)
        __atomic_store_n(&prof_flags, now, __ATOMIC_RELEASE);
    if (rc == 0 && was && !now && weft_observer_get() == &observer)
        weft_observer_set(NULL);
    pthread_mutex_unlock(&prof.lock);
    return rc;
}

/* ---- start, stop, clear ------------------------------------------------------------------- */

struct weft_profiler_options weft_profiler_default_options(void)
{
    return (struct weft_profiler_options){.struct_size = sizeof(struct weft_profiler_options),
                                          .record_shapes = true, .profile_memory = true};
}

/* Forgets every thread's events: threads that have exited are freed here, live ones drop
 * theirs at their next event (this one's now). Caller holds no lock. */
static void clear_events(void)
{
    pthread_mutex_lock(&prof.lock);
    __atomic_add_fetch(&prof.generation, 1, __ATOMIC_ACQ_REL);
    struct prof_thread **link = &prof.threads;
    while (*link) {
        struct prof_thread *th = *link;
        if (__atomic_load_n(&th->exited, __ATOMIC_ACQUIRE)) {
            *link = th->next;
            chunks_free(th->head);
            free(th);
            continue;
        }
        link = &th->next;
    }
    pthread_mutex_unlock(&prof.lock);
    if (current)
        thread_get();
}

int weft_profiler_start(const struct weft_profiler_options *o)
{
    if (PROF_FLAGS() & PROF_OPS)
        return weft_error_set(WEFT_ERR_RUNTIME, "profiler is already running");
    struct weft_profiler_options opts = weft_profiler_default_options();
    if (o) {
        size_t n = o->struct_size && o->struct_size < sizeof opts ? o->struct_size : sizeof opts;
        memcpy(&opts, o, n);
        opts.struct_size = sizeof opts;
    }
    clear_events();
    prof.options = opts;
    prof.t0 = prof.t0 ? prof.t0 : weft_profiler_now_ns();
    int rc = weft_profiler_flags_change(PROF_OPS, 0);
    return rc == 0 ? 0 : weft_error_prefix("profiler");
}

int weft_profiler_stop(void)
{
    weft_profiler_flags_change(0, PROF_OPS);
    /* Ranges still open on this thread end here. */
    struct prof_thread *th = current;
    while (th && th->generation == weft_profiler_generation() && th->depth > 0)
        event_close(th, th->stack[th->depth - 1]);
    if (th && th->step_event) {
        event_close(th, th->step_event);
        th->step_event = NULL;
    }
    return 0;
}

bool weft_profiler_enabled(void)
{
    return (PROF_FLAGS() & PROF_OPS) != 0;
}

void weft_profiler_clear(void)
{
    clear_events();
    if (!weft_profiler_enabled()) {
        pthread_mutex_lock(&prof.lock);
        strings_free_locked();
        pthread_mutex_unlock(&prof.lock);
    }
}

/* ---- steps and the schedule ------------------------------------------------------------- */

enum action { ACT_NONE, ACT_WARMUP, ACT_RECORD, ACT_RECORD_AND_SAVE };

static enum action action_at(int64_t step)
{
    const struct weft_profiler_schedule *s = &prof.sched;
    if (step < s->skip_first)
        return ACT_NONE;
    int64_t period = (int64_t)s->wait + s->warmup + s->active;
    int64_t k = step - s->skip_first, cycle = k / period, pos = k % period;
    if (s->repeat > 0 && cycle >= s->repeat)
        return ACT_NONE;
    if (pos < s->wait)
        return ACT_NONE;
    if (pos < s->wait + s->warmup)
        return ACT_WARMUP;
    return pos == period - 1 ? ACT_RECORD_AND_SAVE : ACT_RECORD;
}

/* Opens "ProfilerStep#k" on this thread (outside the range stack, which user ranges own). */
static void step_open(void)
{
    struct prof_thread *th = thread_get();
    if (!th || !weft_profiler_enabled())
        return;
    char name[48];
    snprintf(name, sizeof name, "ProfilerStep#%lld", (long long)prof.step);
    const char *copy = weft_profiler_intern(name);
    if (!copy)
        return;
    struct prof_event *e = event_new(th);
    if (!e)
        return;
    *e = (struct prof_event){.name = copy, .kind = PROF_STEP, .alloc = th->alloc_total,
                             .freed = th->freed_total, .depth = 0, .device_type = -1};
    event_publish(th);
    e->t0 = weft_profiler_now_ns();
    th->step_event = e;
}

static void step_close(void)
{
    struct prof_thread *th = current;
    if (!th || th->generation != weft_profiler_generation() || !th->step_event)
        return;
    uint64_t t1 = weft_profiler_now_ns();
    struct prof_event *e = th->step_event;
    e->alloc = th->alloc_total - e->alloc;
    e->freed = th->freed_total - e->freed;
    __atomic_store_n(&e->t1, t1 > e->t0 ? t1 : e->t0 + 1, __ATOMIC_RELEASE);
    th->step_event = NULL;
}

static int write_reports(void)
{
    prof.cycle_report++;
    char path[4096], table_path[4096];
    snprintf(path, sizeof path, "%s/trace.%d.json", prof.dir, prof.cycle_report);
    snprintf(table_path, sizeof table_path, "%s/ops.%d.txt", prof.dir, prof.cycle_report);
    if (weft_profiler_export_chrome_trace(path) != 0)
        return weft_error_code();
    char *table = weft_profiler_table(NULL, 0);
    if (!table)
        return weft_error_code();
    FILE *f = fopen(table_path, "w");
    if (!f) {
        free(table);
        return weft_error_set(WEFT_ERR_IO, "profiler: cannot write %s: %s", table_path,
                              strerror(errno));
    }
    fputs(table, f);
    free(table);
    if (fclose(f) != 0)
        return weft_error_set(WEFT_ERR_IO, "profiler: cannot write %s: %s", table_path,
                              strerror(errno));
    snprintf(prof.last_report, sizeof prof.last_report, "%s", path);
    return 0;
}

/* Brings the recorder to what step prof.step's action asks; entering RECORD from WARMUP
 * drops the warm-up's events. */
static int enter_step(enum action before)
{
    enum action now = action_at(prof.step);
    int rc = 0;
    if (now == ACT_NONE) {
        if (weft_profiler_enabled())
            weft_profiler_stop();
        return 0;
    }
    if (!weft_profiler_enabled())
        rc = weft_profiler_start(&prof.options);
    else if (now != ACT_WARMUP && before == ACT_WARMUP)
        clear_events();
    if (rc == 0)
        step_open();
    return rc;
}

static int mkdir_p(const char *dir)
{
    char path[4096];
    snprintf(path, sizeof path, "%s", dir);
    for (char *p = path + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(path, 0777) != 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    return mkdir(path, 0777) != 0 && errno != EEXIST ? -1 : 0;
}

int weft_profiler_schedule_begin(const char *dir, const struct weft_profiler_schedule *s,
                                 const struct weft_profiler_options *o)
{
    if (!dir || !*dir || !s)
        return weft_error_set(WEFT_ERR_VALUE, "profiler schedule: a directory and a schedule "
                                              "are required");
    if (s->skip_first < 0 || s->wait < 0 || s->warmup < 0 || s->active < 1 || s->repeat < 0)
        return weft_error_set(WEFT_ERR_VALUE,
                              "profiler schedule: expected skip_first, wait, warmup, repeat >= 0 "
                              "and active >= 1, got %d, %d, %d, %d and %d",
                              s->skip_first, s->wait, s->warmup, s->repeat, s->active);
    if (prof.scheduled || weft_profiler_enabled())
        return weft_error_set(WEFT_ERR_RUNTIME, "profiler is already running%s",
                              prof.env_run ? " (WEFT_PROFILE is set)" : "");
    if (mkdir_p(dir) != 0)
        return weft_error_set(WEFT_ERR_IO, "profiler: cannot create %s: %s", dir, strerror(errno));
    char *copy = strdup(dir);
    if (!copy)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "profiler: out of host memory");
    free(prof.dir);
    prof.dir = copy;
    prof.sched = *s;
    prof.options = weft_profiler_default_options();
    if (o) {
        size_t n = o->struct_size && o->struct_size < sizeof prof.options ? o->struct_size
                                                                            : sizeof prof.options;
        memcpy(&prof.options, o, n);
        prof.options.struct_size = sizeof prof.options;
    }
    prof.step = 0;
    prof.cycle_report = 0;
    prof.last_report[0] = '\0';
    prof.scheduled = true;
    return enter_step(ACT_NONE);
}

int weft_profiler_step(void)
{
    if (!prof.scheduled) { /* WEFT_PROFILE or a manual start: steps are ranges only */
        step_close();
        prof.step++;
        step_open();
        return 0;
    }
    enum action was = action_at(prof.step);
    step_close();
    int rc = 0, reported = 0;
    if (was == ACT_RECORD_AND_SAVE) {
        weft_profiler_stop();
        rc = write_reports();
        reported = rc == 0;
    }
    prof.step++;
    if (rc == 0)
        rc = enter_step(was);
    return rc < 0 ? rc : reported;
}

int weft_profiler_schedule_end(void)
{
    if (!prof.scheduled)
        return 0;
    enum action was = action_at(prof.step);
    step_close();
    bool recording = weft_profiler_enabled();
    weft_profiler_stop();
    prof.scheduled = false;
    /* A cycle cut short is reported when it reached its active steps. */
    int rc = recording && (was == ACT_RECORD || was == ACT_RECORD_AND_SAVE) ? write_reports() : 0;
    weft_profiler_clear();
    return rc;
}

const char *weft_profiler_last_report(void)
{
    return prof.last_report;
}

/* ---- WEFT_PROFILE=DIR: every program that runs ops links libweft-ops ------------------- */

static void env_report(void)
{
    if (!prof.env_run || prof.scheduled)
        return;
    step_close();
    weft_profiler_stop();
    prof.cycle_report = 0;
    int rc = write_reports();
    fprintf(stderr, rc == 0 ? "weft profiler: wrote %s and %s/ops.1.txt\n"
                            : "weft profiler: %s%s: could not write the reports\n",
            rc == 0 ? prof.last_report : weft_error_message(), rc == 0 ? prof.dir : "");
}

__attribute__((constructor)) static void env_start(void)
{
    const char *dir = getenv("WEFT_PROFILE");
    if (!dir || !*dir)
        return;
    if (mkdir_p(dir) != 0 || !(prof.dir = strdup(dir))) {
        fprintf(stderr, "weft profiler: WEFT_PROFILE=%s: cannot create the directory\n", dir);
        return;
    }
    if (weft_profiler_start(NULL) != 0)
        return;
    prof.env_run = true;
    atexit(env_report);
}
