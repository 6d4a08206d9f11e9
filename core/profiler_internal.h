/* core/profiler_internal.h: the profiler's hooks in the core (dispatch, storage, the
 * autograd engine) and what its recorder shares with its reports. Not installed. */
#ifndef WEFT_CORE_PROFILER_INTERNAL_H
#define WEFT_CORE_PROFILER_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "internal.h"
#include "weft/storage.h"

/* What is on: WEFT_PROFILER_OPS records events, WEFT_PROFILER_MEMORY remembers which op
 * allocated each block. Zero (the default) keeps every hook to one test of this word. */
enum { WEFT_PROFILER_OPS = 1, WEFT_PROFILER_MEMORY = 2 };
WEFT_INTERNAL extern int weft_profiler_flags;
#define WEFT_PROFILING() __builtin_expect(weft_profiler_flags != 0, 0)

/* The funnel when profiling: records the op around weft_dispatch_unprofiled. */
WEFT_INTERNAL int weft_profiler_dispatch(const struct weft_op_call *call);
WEFT_INTERNAL int weft_dispatch_unprofiled(const struct weft_op_call *call);
/* A storage's memory came or went (storage.c). */
WEFT_INTERNAL void weft_profiler_storage_new(const struct weft_storage *s);
WEFT_INTERNAL void weft_profiler_storage_free(const struct weft_storage *s);
/* The engine runs a node: returns the node that was running, for node_end. */
WEFT_INTERNAL const char *weft_profiler_node_begin(const char *name);
WEFT_INTERNAL void weft_profiler_node_end(const char *prev);

/* ---- the recorder's events (profiler.c), read by the reports (profiler_report.c) ---- */
enum { PROF_OP, PROF_RANGE, PROF_NODE, PROF_STEP };
#define PROF_CHUNK_EVENTS 1024
#define PROF_MAX_DEPTH 64

struct prof_event {
    const char *name;   /* interned */
    const char *shapes; /* "[[2, 3], [3]]" (interned) or NULL */
    const char *dtypes; /* "[float32, float32]" or NULL */
    const char *node;   /* the backward node it ran in, NULL: forward */
    uint64_t t0, t1;    /* ns; t1 0 while open */
    uint64_t alloc, freed; /* bytes over the event (with its children), once closed */
    int64_t copy_bytes;
    int16_t depth;
    int16_t device_index;
    int8_t device_type; /* -1 for ranges */
    uint8_t kind;
    bool layout_copy;
};

struct prof_chunk {
    struct prof_chunk *next;
    int used;
    struct prof_event events[PROF_CHUNK_EVENTS];
};

struct prof_thread {
    struct prof_thread *next; /* the recorder's list */
    int64_t tid;
    uint32_t generation;
    bool exited;
    size_t count;             /* events published (atomic) */
    struct prof_chunk *head, *tail;
    struct prof_event *stack[PROF_MAX_DEPTH];
    int depth;
    struct prof_event *step_event;
    const char *node;
    uint64_t alloc_total, freed_total; /* bytes this thread allocated and freed, ever */
    uint64_t mark_alloc, mark_freed;   /* ... when its last event ended */
};

WEFT_INTERNAL uint64_t weft_profiler_now_ns(void);
WEFT_INTERNAL uint64_t weft_profiler_zero_ns(void);
WEFT_INTERNAL struct prof_thread *weft_profiler_threads(void);
WEFT_INTERNAL uint32_t weft_profiler_generation(void);
WEFT_INTERNAL const char *weft_profiler_intern(const char *s);
WEFT_INTERNAL void weft_profiler_count_alloc(size_t nbytes);
WEFT_INTERNAL void weft_profiler_count_free(size_t nbytes);
/* The innermost range or backward node open on this thread, "" when none. */
WEFT_INTERNAL const char *weft_profiler_open_range(void);
/* Gives the op of call to the blocks of its outputs not yet given one (memory_history.c). */
WEFT_INTERNAL void weft_memory_history_attribute(const struct weft_op_call *call);

#endif
