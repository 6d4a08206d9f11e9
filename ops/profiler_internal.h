/* ops/profiler_internal.h: what the profiler's files share (the recorder's events, read by
 * the reports; the memory history, fed by the recorder's observer). Not installed. */
#ifndef WEFT_OPS_PROFILER_INTERNAL_H
#define WEFT_OPS_PROFILER_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "weft/kernel.h"
#include "weft/storage.h"
#include "weft/tensor.h"

#define PROF_INTERNAL __attribute__((visibility("hidden")))

/* What is on: PROF_OPS records events, PROF_MEMORY remembers which op allocated each
 * block. The profiler is the core's observer (weft/observer.h) while either is. */
enum { PROF_OPS = 1, PROF_MEMORY = 2 };
PROF_INTERNAL int weft_profiler_flags(void);
/* Sets the bits of on and clears those of off, setting or removing the observer. 0 or
 * negative (another observer is set). */
PROF_INTERNAL int weft_profiler_flags_change(int on, int off);

/* The memory history's side of the observer (memory_history.c). */
PROF_INTERNAL void weft_memory_history_alloc(const struct weft_storage *s);
PROF_INTERNAL void weft_memory_history_free(const struct weft_storage *s);
/* Gives the op of call to the blocks of its outputs not yet given one. */
PROF_INTERNAL void weft_memory_history_attribute(const struct weft_op_call *call);

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

PROF_INTERNAL uint64_t weft_profiler_now_ns(void);
PROF_INTERNAL uint64_t weft_profiler_zero_ns(void);
PROF_INTERNAL struct prof_thread *weft_profiler_threads(void);
PROF_INTERNAL uint32_t weft_profiler_generation(void);
PROF_INTERNAL const char *weft_profiler_intern(const char *s);
/* The innermost range or backward node open on this thread, "" when none. */
PROF_INTERNAL const char *weft_profiler_open_range(void);

#endif
