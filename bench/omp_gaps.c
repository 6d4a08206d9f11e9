/* bench/omp_gaps.c: an LD_PRELOAD shim (bench/omp-gaps.sh builds and runs it) that measures
 * how long libgomp's idle threads wait between parallel regions, in a real program.
 *
 * Between two parallel regions the worker threads wait at libgomp's dock: they spin
 * GOMP_SPINCOUNT times (one PAUSE each), then sleep in futex_wait, and the next region
 * wakes them with futex_wake. Whether a spin count keeps a quiet machine's speed is a
 * question about these gaps: a gap shorter than the spin costs no wake-up. So the shim
 * wraps GOMP_parallel (the one entry weft's plugins, OpenBLAS and oneDNN call: `nm -D`)
 * and records, on the thread that opens regions, the time from one multi-thread region's
 * end to the next one's start, in histograms of 16 bins per octave.
 *
 * The gap is measured twice: in the opening thread's own CPU time (CLOCK_THREAD_CPUTIME_ID,
 * which stops while the thread is off its core, so a busy machine does not lengthen it:
 * the gaps of a quiet machine, measurable on a busy one) and in wall time (TSC ticks:
 * what the workers actually waited here, preemptions included).
 *
 * At exit it writes (to $WEFT_OMP_GAPS, else stderr) the region count, both gaps'
 * percentiles in microseconds, and for each candidate GOMP_SPINCOUNT the length of that
 * spin here (spins x the PAUSE loop's ticks, the minimum of many timed runs: a minimum
 * does not grow with load) and the share of gaps longer than it: the regions whose
 * workers would have gone to sleep and need a futex wake-up. x86-64 Linux only. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <x86intrin.h>

#define BINS_PER_OCTAVE 16
#define N_BINS (48 * BINS_PER_OCTAVE) /* up to 2^48 ticks */

typedef void (*parallel_fn)(void (*)(void *), void *, unsigned, unsigned);

/* [0]: the opening thread's CPU time, in ns; [1]: wall time, in TSC ticks */
static uint64_t gaps[2][N_BINS], regions, gap_count;
static __thread uint64_t last_end[2]; /* this thread's last region end, 0 before the first */
static __thread int depth;

static uint64_t thread_cpu_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static int bin_of(uint64_t ticks)
{
    if (ticks < 1)
        return 0;
    int b = (int)(log2((double)ticks) * BINS_PER_OCTAVE);
    return b < 0 ? 0 : (b >= N_BINS ? N_BINS - 1 : b);
}

/* The upper edge of bin b, in ticks. */
static double bin_edge(int b)
{
    return exp2((double)(b + 1) / BINS_PER_OCTAVE);
}

void GOMP_parallel(void (*fn)(void *), void *data, unsigned num_threads, unsigned flags)
{
    static parallel_fn real;
    static int (*in_parallel)(void);
    if (!real) {
        /* libgomp came with a plugin's dlopen (RTLD_LOCAL), out of RTLD_NEXT's reach */
        void *gomp = dlopen("libgomp.so.1", RTLD_LAZY | RTLD_NOLOAD);
        in_parallel = (int (*)(void))dlsym(gomp ? gomp : RTLD_NEXT, "omp_in_parallel");
        real = (parallel_fn)dlsym(gomp ? gomp : RTLD_NEXT, "GOMP_parallel");
        if (!real || !in_parallel) {
            fprintf(stderr, "omp_gaps: no libgomp to forward to\n");
            abort();
        }
    }
    /* A team of one wakes nobody, and a region opened inside a region runs in the
     * opening thread's team: both are part of the gap around them. */
    if (num_threads == 1 || depth > 0 || in_parallel()) {
        depth++;
        real(fn, data, num_threads, flags);
        depth--;
        return;
    }
    uint64_t start[2] = {thread_cpu_ns(), __rdtsc()};
    if (last_end[1]) {
        for (int k = 0; k < 2; k++)
            __atomic_fetch_add(&gaps[k][bin_of(start[k] - last_end[k])], 1, __ATOMIC_RELAXED);
        __atomic_fetch_add(&gap_count, 1, __ATOMIC_RELAXED);
    }
    __atomic_fetch_add(&regions, 1, __ATOMIC_RELAXED);
    depth++;
    real(fn, data, num_threads, flags);
    depth--;
    last_end[1] = __rdtsc();
    last_end[0] = thread_cpu_ns();
}

/* Ticks per PAUSE iteration of a spin loop like libgomp's do_spin (a relaxed load, a
 * compare, PAUSE): the minimum over many timed runs. */
static double pause_ticks(void)
{
    volatile int flag = 0;
    uint64_t best = UINT64_MAX;
    for (int r = 0; r < 2000; r++) {
        uint64_t t0 = __rdtsc();
        for (int i = 0; i < 1000; i++) {
            if (__atomic_load_n(&flag, __ATOMIC_RELAXED) != 0)
                break;
            __asm__ volatile("pause" ::: "memory");
        }
        uint64_t t = __rdtsc() - t0;
        best = t < best ? t : best;
    }
    return (double)best / 1000;
}

/* TSC ticks per microsecond, against CLOCK_MONOTONIC over 20 ms. */
static double ticks_per_us(void)
{
    struct timespec a, b, nap = {0, 20000000};
    clock_gettime(CLOCK_MONOTONIC, &a);
    uint64_t t0 = __rdtsc();
    nanosleep(&nap, NULL);
    uint64_t t1 = __rdtsc();
    clock_gettime(CLOCK_MONOTONIC, &b);
    double us = (double)(b.tv_sec - a.tv_sec) * 1e6 + (double)(b.tv_nsec - a.tv_nsec) / 1e3;
    return (double)(t1 - t0) / us;
}

/* The gap below which a share p of histogram h's gaps lie: the upper edge of its bin. */
static double percentile(const uint64_t *h, double p)
{
    uint64_t want = (uint64_t)ceil(p * (double)gap_count), seen = 0;
    for (int b = 0; b < N_BINS; b++)
        if ((seen += h[b]) >= want && want > 0)
            return bin_edge(b);
    return 0;
}

/* The share of h's gaps longer than `len`, from the bins wholly above it (a bin that holds
 * `len` counts as below: the figure errs a sixteenth of an octave low). */
static double share_longer(const uint64_t *h, double len)
{
    uint64_t n = 0;
    for (int b = 0; b < N_BINS; b++)
        if (exp2((double)b / BINS_PER_OCTAVE) > len)
            n += h[b];
    return gap_count ? (double)n / (double)gap_count : 0;
}

__attribute__((destructor)) static void report(void)
{
    if (regions == 0)
        return;
    const char *path = getenv("WEFT_OMP_GAPS");
    FILE *f = path && *path ? fopen(path, "a") : stderr;
    if (!f)
        f = stderr;
    double tpu = ticks_per_us(), pause = pause_ticks();
    fprintf(f, "regions %llu  gaps %llu  tsc %.0f MHz  pause %.1f ticks (%.1f ns)\n",
            (unsigned long long)regions, (unsigned long long)gap_count, tpu, pause,
            1e3 * pause / tpu);
    static const double ps[] = {0.5, 0.75, 0.9, 0.95, 0.98, 0.99};
    static const char *const what[2] = {"cpu", "wall"};
    for (int k = 0; k < 2; k++) {
        fprintf(f, "gap percentiles, %-4s (us):", what[k]);
        for (size_t i = 0; i < sizeof ps / sizeof *ps; i++)
            fprintf(f, "  p%g %.1f", 100 * ps[i], percentile(gaps[k], ps[i]) / (k ? tpu : 1e3));
        fprintf(f, "\n");
    }
    fprintf(f, "%-12s %10s %16s %16s\n", "spin_count", "spin_us", "slept_%_of_cpu",
            "slept_%_of_wall");
    static const double spins[] = {0, 1000, 2000, 5000, 10000, 20000, 50000, 100000, 300000};
    for (size_t i = 0; i < sizeof spins / sizeof *spins; i++) {
        double ticks = spins[i] * pause;
        fprintf(f, "%-12.0f %10.1f %16.2f %16.2f\n", spins[i], ticks / tpu,
                100 * share_longer(gaps[0], 1e3 * ticks / tpu), 100 * share_longer(gaps[1], ticks));
    }
    if (f != stderr)
        fclose(f);
}
