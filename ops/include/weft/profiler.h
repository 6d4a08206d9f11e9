/* weft/profiler.h: torch.profiler for weft. What ran, where, for how long, and what memory
 * it took.
 *
 * The profiler records at the dispatch funnel (weft_dispatch), where every kernel call
 * passes: the op's name, its operands' shapes and dtypes (record_shapes), its device, its
 * wall time, the bytes allocated and freed on its thread since the previous op ended
 * (profile_memory: an op's output is allocated by its front end just before its kernel
 * runs), the autograd node it ran in (the backward node's name, or none: forward) and the
 * thread. User ranges (weft_profiler_range_push/pop, PyTorch's record_function) and the
 * backward nodes the autograd engine runs are recorded around the ops they contain.
 *
 * Off by default and free when off: the profiler is libweft-ops' observer of the core
 * (weft/observer.h), set only while it records, and without an observer the core tests
 * one pointer per op, storage and backward node. Turned on by
 * weft_profiler_start(), by a schedule (weft_profiler_schedule_begin, torch.profiler's
 * schedule with prof.step()), or for a whole program by WEFT_PROFILE=DIR in the
 * environment, read when libweft-ops loads (the trace and the table are written to DIR
 * when the program exits).
 *
 * Times are host wall times: on an asynchronous device (cuda) an op's time is its
 * launch, not its kernel. Threads: any thread may record; start, stop, clear and the
 * reports must not run while another thread is dispatching ops.
 */
#ifndef WEFT_PROFILER_H
#define WEFT_PROFILER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "weft/device.h"

#ifdef __cplusplus
extern "C" {
#endif

struct weft_profiler_options {
    size_t struct_size;  /* sizeof the caller's struct: fields are only appended */
    bool record_shapes;  /* operands' shapes and dtypes in every event */
    bool profile_memory; /* bytes allocated and freed per op */
};

/* Defaults: record_shapes and profile_memory on. */
struct weft_profiler_options weft_profiler_default_options(void);

/* Forgets earlier events and starts recording (o NULL: defaults). 0 or negative (already
 * recording: "profiler is already running"; another observer of the core is set). */
int weft_profiler_start(const struct weft_profiler_options *o);
/* Stops recording; the events stay for the reports until the next start or clear. */
int weft_profiler_stop(void);
bool weft_profiler_enabled(void);
/* Frees the recorded events. */
void weft_profiler_clear(void);

/* record_function: a named range on this thread, nested; name is copied. Nothing when
 * not recording (a pop without its push is ignored). */
void weft_profiler_range_push(const char *name);
void weft_profiler_range_pop(void);

/* ---- the schedule: torch.profiler.schedule(skip_first, wait, warmup, active, repeat) --- */
struct weft_profiler_schedule {
    int skip_first; /* steps ignored before the first cycle */
    int wait;       /* steps not recorded at the start of each cycle */
    int warmup;     /* steps recorded and discarded (the first ones pay for set-up) */
    int active;     /* steps recorded and reported: at least 1 */
    int repeat;     /* cycles; 0: until schedule_end */
};
/* Starts a schedule whose reports go to dir (created): each cycle's Chrome trace as
 * dir/trace.N.json and its table as dir/ops.N.txt (N from 1). Steps are counted by
 * weft_profiler_step(); each recorded step is a "ProfilerStep#K" range, as PyTorch's. */
int weft_profiler_schedule_begin(const char *dir, const struct weft_profiler_schedule *s,
                                 const struct weft_profiler_options *o);
/* prof.step(): ends a step. Returns 1 when it ended an active cycle (its reports were
 * written: weft_profiler_last_report() names them), 0 otherwise, negative on error. */
int weft_profiler_step(void);
/* Stops the schedule; a cycle in progress is reported when it recorded an active step. */
int weft_profiler_schedule_end(void);
/* The trace file of the last report, "" when none. */
const char *weft_profiler_last_report(void);

/* ---- reports ------------------------------------------------------------------------ */

/* One row of key_averages(): events grouped by name (and by input shapes when asked).
 * Times in microseconds; memory in bytes. */
struct weft_profiler_average {
    const char *name;        /* valid until the next clear */
    const char *input_shapes; /* "[[64, 784], [784, 128]]", or "" when not grouped by it */
    int64_t calls;
    double self_us, total_us;
    int64_t self_alloc_bytes, self_freed_bytes; /* this event alone, its children's apart */
    int64_t alloc_bytes, freed_bytes;           /* with its children */
    bool is_range;            /* a user range or a backward node, not an op */
};
/* key_averages(group_by_input_shape): a malloc'd array (caller frees) of *n rows in the
 * order first seen. */
int weft_profiler_key_averages(bool group_by_input_shape, struct weft_profiler_average **out,
                               size_t *n);
/* key_averages().table(sort_by, row_limit): a malloc'd string. sort_by is one of
 * self_cpu_time_total (NULL), cpu_time_total, cpu_time (average), count,
 * cpu_memory_usage, self_cpu_memory_usage, name; row_limit <= 0: every row. The table
 * ends with the total self time and, on a line of its own, the layout copies. */
char *weft_profiler_table(const char *sort_by, int row_limit);
/* Copies that changed a tensor's layout (contiguous(), or a clone into other strides:
 * same device, same dtype, different strides) among the recorded ops; *bytes (may be
 * NULL) the bytes they wrote. */
int64_t weft_profiler_layout_copies(int64_t *bytes);
/* Writes the recorded events as Chrome trace JSON (Perfetto, chrome://tracing), through
 * a temporary file renamed into place. 0 or negative. */
int weft_profiler_export_chrome_trace(const char *path);

/* ---- memory: torch.cuda.memory_summary, _record_memory_history, _snapshot ----------- */

/* torch.cuda.memory_summary(device, abbreviated): the table of the device allocator's
 * statistics PyTorch prints (allocated, active, reserved and non-releasable memory,
 * allocations, active allocations, reserved segments, non-releasable allocations, per
 * pool unless abbreviated, and the OOMs), as a malloc'd string the caller frees (NULL
 * with an error). The backend's own memory_summary when it has one; otherwise the table
 * is made from its memory_detail (weft/backend.h), with the notes that say what each
 * row means on that device, or from weft_memory_stats alone. */
char *weft_memory_summary(weft_device dev, bool abbreviated);

/* Remembers, for every block allocated from now on, its size, device and the op whose
 * output it became (its shape and dtype), for weft_memory_snapshot; false forgets them
 * and stops. While it is on, libweft-ops observes the core (weft/observer.h): each op
 * pays for a look-up. 0 or negative (another observer is set). */
int weft_memory_record_history(bool enabled);

/* torch.cuda.memory._snapshot() written as JSON to path: the device allocator's segments
 * and blocks (address, size, requested size, state) and, for each live block recorded by
 * the history, the op that allocated it, its shape and dtype. 0 or negative. */
int weft_memory_snapshot(weft_device dev, const char *path);

#ifdef __cplusplus
}
#endif
#endif
