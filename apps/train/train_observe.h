/* apps/train/train_observe.h: watching a run: the profiler's schedule ([train] profile),
 * the peak memory per epoch, the live metrics server ([train] metrics) and the ranges
 * the profile shows (data, forward, backward, optimizer). */
#ifndef WEFT_APP_TRAIN_OBSERVE_H
#define WEFT_APP_TRAIN_OBSERVE_H

#include <stdbool.h>
#include <stdint.h>

#include <weft.h>

struct trainer;
struct train_batch_stats;

/* Reads [train] profile, profile_skip_first, profile_wait, profile_warmup,
 * profile_active, profile_repeat, profile_record_shapes, profile_memory, metrics and
 * metrics_all_ranks, and starts what they ask for (training only). 0 or negative. */
int train_observe_setup(struct trainer *t);
/* The next batch, timed as the loader's wait and recorded as the "data" range. */
int train_next_batch(struct trainer *t, weft_tensor **fields);
/* After each optimizer step: the profiler's step, the metrics' figures. 0 or negative
 * (a profile that could not be written). */
int train_observe_step(struct trainer *t, const struct train_batch_stats *st, int64_t epoch);
/* The peak window: restarted at each epoch (or evaluation window), read at its end. */
void train_observe_peak_reset(struct trainer *t);
int64_t train_observe_peak(struct trainer *t);
/* The whole run's peak allocated and reserved bytes (false: the device keeps no
 * statistics). */
bool train_observe_run_peaks(struct trainer *t, int64_t *allocated, int64_t *reserved);
/* Stops the profiler (writing a cycle in progress) and the metrics server. */
void train_observe_end(struct trainer *t);
/* On an out-of-memory error: the allocators' memory_summary tables, to stderr. */
void train_observe_oom(const struct trainer *t);

/* ---- the metrics server (train_metrics.c) -------------------------------------------- */
struct train_metrics;
struct train_metrics_setup {
    int rank;
    bool tokens;           /* throughput in tokens (a language model), else images */
    int ndevices;          /* the training device, and the cpu when it is another */
    weft_device devices[2];
};
struct train_metrics_values {
    double loss, lr, per_s, eta_seconds, loader_wait_total, loader_wait_last;
    int64_t step, epoch, queue_depth;
    uint64_t allocated[2], reserved[2], peak[2];
};
/* Serves /metrics on HOST:PORT (port 0: any free one) from its own thread. NULL with an
 * error naming the key when the address is malformed or taken. */
struct train_metrics *train_metrics_start(const char *where, const struct train_metrics_setup *s);
void train_metrics_publish(struct train_metrics *m, const struct train_metrics_values *v);
int train_metrics_port(const struct train_metrics *m);
void train_metrics_stop(struct train_metrics *m);

#endif
