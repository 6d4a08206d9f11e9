/* apps/train/train_observe.c: what weft-train shows of a run besides its losses: a
 * profile on torch.profiler's schedule, the peak memory of each epoch, and live metrics
 * for Prometheus (train_metrics.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train.h"
#include "train_observe.h"

struct train_observe {
    bool profiling;
    const char *profile_dir;
    struct train_metrics *metrics;
    double wait_total, wait_last;
    double last_step_t;
    int64_t steps_per_epoch;
    /* WEFT_BENCH_INJECT (bench/bench-check.py's self-test): "slow:F" spins F times each
     * step's time more, "copy" adds a layout copy to each step. */
    double inject_slow;
    bool inject_copy;
};

static int read_schedule(struct weft_config *cfg, struct weft_profiler_schedule *s,
                         struct weft_profiler_options *o)
{
    int64_t v[5];
    static const char *const keys[5] = {"profile_skip_first", "profile_wait", "profile_warmup",
                                        "profile_active", "profile_repeat"};
    static const int64_t defaults[5] = {0, 1, 1, 3, 1}; /* torch.profiler's docs' example */
    for (int i = 0; i < 5; i++) {
        if (weft_config_int(cfg, "train", keys[i], defaults[i], &v[i]) != 0)
            return weft_error_code();
        if (v[i] < (i == 3 ? 1 : 0) || v[i] > 1000000)
            return weft_error_set(WEFT_ERR_CONFIG, "%s: [train] %s = %lld: expected %s",
                                  weft_config_name(cfg), keys[i], (long long)v[i],
                                  i == 3 ? "a number of steps of at least 1"
                                         : "a number of steps, 0 or more");
    }
    *s = (struct weft_profiler_schedule){(int)v[0], (int)v[1], (int)v[2], (int)v[3], (int)v[4]};
    *o = weft_profiler_default_options();
    if (weft_config_bool(cfg, "train", "profile_record_shapes", true, &o->record_shapes) != 0 ||
        weft_config_bool(cfg, "train", "profile_memory", true, &o->profile_memory) != 0)
        return weft_error_code();
    return 0;
}

int train_observe_setup(struct trainer *t)
{
    struct weft_config *cfg = t->cfg;
    const char *dir = weft_config_string(cfg, "train", "profile", "");
    const char *where = weft_config_string(cfg, "train", "metrics", "");
    bool all_ranks = false;
    struct weft_profiler_schedule sched;
    struct weft_profiler_options popts;
    if (weft_config_bool(cfg, "train", "metrics_all_ranks", false, &all_ranks) != 0 ||
        read_schedule(cfg, &sched, &popts) != 0)
        return weft_error_code();
    if (t->command != CMD_TRAIN)
        return 0;
    struct train_observe *o = calloc(1, sizeof *o);
    if (!o)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of memory");
    t->observe = o;
    int64_t batches = weft_dataloader_len(t->train_loader);
    o->steps_per_epoch = (batches + t->s.accumulate - 1) / t->s.accumulate;
    if (*dir) {
        if (weft_profiler_schedule_begin(dir, &sched, &popts) != 0)
            return weft_error_prefix("%s: [train] profile = %s", weft_config_name(cfg), dir);
        o->profiling = true;
        o->profile_dir = dir;
    }
    /* Under DDP only rank 0 serves unless asked; then rank r listens on PORT + r. */
    if (*where && (t->rank == 0 || all_ranks)) {
        char at[300];
        snprintf(at, sizeof at, "%s", where);
        char *colon = strrchr(at, ':');
        if (colon && t->rank > 0)
            snprintf(colon + 1, sizeof at - (size_t)(colon + 1 - at), "%ld",
                     strtol(strrchr(where, ':') + 1, NULL, 10) + t->rank);
        struct train_metrics_setup ms = {.rank = t->rank, .tokens = t->sequence, .ndevices = 1,
                                         .devices = {t->device, WEFT_CPU}};
        if (t->device.type != WEFT_DEVICE_CPU)
            ms.ndevices = 2;
        if (!(o->metrics = train_metrics_start(at, &ms)))
            return weft_error_prefix("%s", weft_config_name(cfg));
        char host[256];
        snprintf(host, sizeof host, "%.*s", (int)(strrchr(at, ':') - at), at);
        printf("metrics: http://%s:%d/metrics\n", host, train_metrics_port(o->metrics));
    }
    const char *inject = getenv("WEFT_BENCH_INJECT");
    if (inject && *inject) {
        const char *slow = strstr(inject, "slow:");
        o->inject_slow = slow ? strtod(slow + 5, NULL) : 0;
        o->inject_copy = strstr(inject, "copy") != NULL;
        fprintf(stderr, "weft-train: WEFT_BENCH_INJECT=%s (a deliberate regression)\n", inject);
    }
    o->last_step_t = train_now();
    return 0;
}

static void inject(struct trainer *t, double step_seconds)
{
    struct train_observe *o = t->observe;
    if (o->inject_copy && t->nparams > 0) {
        weft_scope_push();
        weft_tensor *p = t->param_tensors[0];
        if (p->ndim == 2)
            weft_contiguous(weft_transpose(p, 0, 1));
        weft_scope_pop();
    }
    double until = train_now() + o->inject_slow * step_seconds;
    while (o->inject_slow > 0 && train_now() < until)
        ;
}

int train_next_batch(struct trainer *t, weft_tensor **fields)
{
    weft_profiler_range_push("data");
    double t0 = train_now();
    int got = weft_dataloader_next(t->train_loader, fields);
    double waited = train_now() - t0;
    weft_profiler_range_pop();
    if (t->observe) {
        t->observe->wait_last = waited;
        t->observe->wait_total += waited;
    }
    return got;
}

static void publish(struct trainer *t, const struct train_batch_stats *st, int64_t epoch)
{
    struct train_observe *o = t->observe;
    double now = train_now(), dt = now - o->last_step_t;
    int64_t total = t->s.max_iters > 0 ? t->s.max_iters : t->s.epochs * o->steps_per_epoch;
    int64_t done = t->step - t->start_step;
    double per_step = done > 0 ? (now - t->run_t0) / (double)done : NAN;
    struct train_metrics_values v = {
        .loss = st->loss,
        .lr = weft_optimizer_get_lr(t->opt),
        .per_s = dt > 0 ? (double)(st->tokens * t->s.accumulate) / dt : 0,
        .eta_seconds = done > 0 && total > t->step ? per_step * (double)(total - t->step) : 0,
        .loader_wait_total = o->wait_total,
        .loader_wait_last = o->wait_last,
        .step = t->step,
        .epoch = epoch + 1,
        .queue_depth = weft_dataloader_queue_depth(t->train_loader),
    };
    weft_device devs[2] = {t->device, WEFT_CPU};
    for (int d = 0; d < (t->device.type != WEFT_DEVICE_CPU ? 2 : 1); d++) {
        struct weft_memory_stats ms = {.struct_size = sizeof ms};
        if (weft_memory_stats(devs[d], &ms) != 0) {
            weft_error_clear(); /* a device without statistics shows zeros */
            continue;
        }
        v.allocated[d] = ms.allocated_bytes;
        v.reserved[d] = ms.reserved_bytes;
        v.peak[d] = ms.peak_allocated_bytes;
    }
    train_metrics_publish(o->metrics, &v);
}

int train_observe_step(struct trainer *t, const struct train_batch_stats *st, int64_t epoch)
{
    struct train_observe *o = t->observe;
    if (!o)
        return 0;
    if (o->inject_slow > 0 || o->inject_copy)
        inject(t, train_now() - o->last_step_t);
    if (o->metrics)
        publish(t, st, epoch);
    o->last_step_t = train_now();
    if (!o->profiling)
        return 0;
    int rc = weft_profiler_step();
    if (rc < 0)
        return weft_error_prefix("[train] profile = %s", o->profile_dir);
    if (rc > 0 && t->rank == 0) {
        char *table = weft_profiler_table(NULL, 10);
        train_progress_clear(t->tty);
        printf("profile at step %lld: %s (open it in Perfetto or chrome://tracing); the ops "
               "by self time:\n%s", (long long)t->step, weft_profiler_last_report(),
               table ? table : "");
        free(table);
        weft_error_clear();
        fflush(stdout);
    }
    return 0;
}

/* The interval's peaks join the run's (the device allocator keeps one peak, which the
 * per-epoch figures restart); *interval_peak (if given) gets the interval's peak allocated
 * bytes. False where the device keeps no statistics. */
static bool fold_peaks(struct trainer *t, int64_t *interval_peak)
{
    struct weft_memory_stats ms = {.struct_size = sizeof ms};
    if (weft_memory_stats(t->device, &ms) != 0) {
        weft_error_clear();
        return false;
    }
    if ((int64_t)ms.peak_allocated_bytes > t->run_peak_allocated)
        t->run_peak_allocated = (int64_t)ms.peak_allocated_bytes;
    if ((int64_t)ms.peak_reserved_bytes > t->run_peak_reserved)
        t->run_peak_reserved = (int64_t)ms.peak_reserved_bytes;
    if (interval_peak)
        *interval_peak = (int64_t)ms.peak_allocated_bytes;
    return true;
}

void train_observe_peak_reset(struct trainer *t)
{
    fold_peaks(t, NULL);
    weft_reset_peak_memory_stats(t->device);
}

int64_t train_observe_peak(struct trainer *t)
{
    int64_t peak = 0;
    fold_peaks(t, &peak);
    return peak;
}

bool train_observe_run_peaks(struct trainer *t, int64_t *allocated, int64_t *reserved)
{
    if (!fold_peaks(t, NULL))
        return false;
    *allocated = t->run_peak_allocated;
    *reserved = t->run_peak_reserved;
    return true;
}

void train_observe_end(struct trainer *t)
{
    struct train_observe *o = t->observe;
    if (!o)
        return;
    if (o->profiling && weft_profiler_schedule_end() != 0) {
        fprintf(stderr, "weft-train: [train] profile: %s\n", weft_error_message());
        weft_error_clear();
    }
    train_metrics_stop(o->metrics);
    free(o);
    t->observe = NULL;
}

void train_observe_oom(const struct trainer *t)
{
    weft_device devs[2] = {t->device, WEFT_CPU};
    for (int d = 0; d < (t->device.type != WEFT_DEVICE_CPU ? 2 : 1); d++) {
        char *table = weft_memory_summary(devs[d], false);
        if (table)
            fputs(table, stderr);
        free(table);
    }
}

const char *train_format_bytes(int64_t bytes, char *buf, size_t size)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    snprintf(buf, size, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
    return buf;
}
