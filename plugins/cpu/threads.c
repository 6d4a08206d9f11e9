/* plugins/cpu/threads.c: how many threads the cpu kernels split their work into, and how
 * many of those threads run it.
 *
 * Two numbers, kept apart on purpose:
 *  - the split ([cpu] threads, torch.set_num_threads): how a kernel whose bits depend on
 *    its partition cuts its work (a reduction's chunks, the pieces of a convolution's
 *    weight gradient). Fixed for a run, so a run's results are the same bits however many
 *    threads the machine lets it have;
 *  - the running count ([cpu] run_threads): how many OpenMP threads execute that work. A
 *    parallel region ends when its slowest thread does: on a machine whose cores other
 *    programs also want, a thread taken off its core for a scheduler slice (milliseconds)
 *    holds up a region of 50 us and every thread behind it. Two threads beside one busy
 *    process on 2 cores kept 13-30% of their quiet speed (bench/contention.sh), one thread
 *    on its own core keeps about 55%. So by default (`auto`) the count follows the cores
 *    the other processes leave free (cpu_load.c), sampled every SAMPLE_MS. A drop is taken
 *    at once, a rise once RISE_SAMPLES samples in a row ask for it, so a competitor's pause
 *    of a moment does not bring the wait at every join back.
 *
 * Every parallel entry of the plugin asks cpu_run_threads(), which also brings the calling
 * thread's OpenMP setting (read by oneDNN, OpenBLAS's OpenMP build and the other plugins'
 * loops) to the count. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "cpu.h"
#include "cpu_load.h"

extern void openblas_set_num_threads(int n);

#define SAMPLE_MS 200
#define RISE_SAMPLES 2

static int split;              /* [cpu] threads; 0: OpenMP's own count */
static int fixed_run;          /* [cpu] run_threads = N; 0: auto */
static atomic_int running;     /* 0 until configured: the split */
static atomic_llong next_sample_ms;
static bool trace; /* WEFT_CPU_THREADS_TRACE set: each change of the count on stderr */

/* The governor's last sample; guarded by governor_lock (a trylock: a thread that finds it
 * taken keeps the count it has). */
static pthread_mutex_t governor_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    atomic_bool off;      /* /proc/stat unreadable: the count stays the split */
    bool primed;          /* last holds a sample */
    struct cpu_load last;
    int rises;            /* samples in a row that asked for more threads */
} gov;

int cpu_split_threads(void)
{
    if (split > 0)
        return split;
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

/* The count for `capacity` cores left free by other programs, from `now` running, at most
 * `most`; a rise only once it was asked for RISE_SAMPLES times in a row (*rises). */
static int threads_for_capacity(int now, int most, double capacity, int *rises)
{
    /* the whole cores left over, a quarter of one counting as none */
    int want = (int)(capacity + 0.25);
    if (want > most)
        want = most;
    if (want < 1)
        want = 1;
    if (want > now) {
        if (++*rises < RISE_SAMPLES)
            return now;
    }
    *rises = 0;
    return want;
}

static void set_running(int n)
{
    atomic_store_explicit(&running, n, memory_order_relaxed);
    openblas_set_num_threads(n);
}

/* Takes a sample when SAMPLE_MS have passed since the last, and moves the count. */
static void governor_tick(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    long long now = ts.tv_sec * 1000ll + ts.tv_nsec / 1000000;
    if (now < atomic_load_explicit(&next_sample_ms, memory_order_relaxed) ||
        pthread_mutex_trylock(&governor_lock) != 0)
        return;
    atomic_store_explicit(&next_sample_ms, now + SAMPLE_MS, memory_order_relaxed);
    struct cpu_load s;
    if (cpu_load_sample(&s) != 0) {
        gov.off = true; /* no /proc: every thread runs, as before the governor */
        set_running(cpu_split_threads());
    } else if (gov.primed) {
        double capacity = s.cores - cpu_load_others(&gov.last, &s);
        int was = atomic_load_explicit(&running, memory_order_relaxed);
        int n = threads_for_capacity(was, cpu_split_threads(), capacity, &gov.rises);
        if (n != was) {
            set_running(n);
            if (trace)
                fprintf(stderr, "weft cpu: %d -> %d threads (%.2f of %d cores free)\n", was, n,
                        capacity, s.cores);
        }
    }
    gov.last = s;
    gov.primed = !gov.off;
    pthread_mutex_unlock(&governor_lock);
}

/* How many run now: the split until the plugin is configured. */
static int running_now(void)
{
    int n = atomic_load_explicit(&running, memory_order_relaxed);
    return n > 0 ? n : cpu_split_threads();
}

int cpu_run_threads(void)
{
    if (!fixed_run && !gov.off && cpu_split_threads() > 1)
        governor_tick();
    int n = running_now();
#ifdef _OPENMP
    if (!omp_in_parallel() && omp_get_max_threads() != n)
        omp_set_num_threads(n); /* this thread's own setting, the one oneDNN reads */
#endif
    return n;
}

void cpu_describe_threads(char *buf, size_t size)
{
    if (fixed_run)
        snprintf(buf, size, "%d threads, run_threads = %d", cpu_split_threads(), fixed_run);
    else
        snprintf(buf, size, "%d threads, run_threads = auto (%d running)", cpu_split_threads(),
                 running_now());
}

int cpu_set_threads(int n, int run)
{
    if (run < 0)
        run = fixed_run > n ? n : fixed_run; /* torch.set_num_threads keeps run_threads */
    if (n < 1)
        return weft_error_set(WEFT_ERR_VALUE, "threads must be at least 1, got %d", n);
    pthread_mutex_lock(&governor_lock);
    split = n;
    fixed_run = run;
    gov.primed = false;
    gov.rises = 0;
    trace = getenv("WEFT_CPU_THREADS_TRACE") != NULL;
    atomic_store_explicit(&next_sample_ms, 0, memory_order_relaxed);
    set_running(run > 0 ? run : n);
    pthread_mutex_unlock(&governor_lock);
#ifdef _OPENMP
    omp_set_num_threads(run > 0 ? run : n);
#endif
    return 0;
}
