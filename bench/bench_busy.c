/* bench/bench_busy.c: how busy the machine was with other programs while weft-bench ran.
 *
 * Figures taken while other processes use the cores measure the contention, not weft
 * (2-4x slower with a spinning OpenMP pool: docs/config.md, [cpu] wait_policy). The
 * kernel's counters (/proc/stat: every core's busy time) less this process's own CPU time
 * (getrusage: all its threads) over the run's wall time are the cores the others kept busy. */
#include <stdio.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

struct bench_load {
    double busy;  /* seconds every core spent busy (/proc/stat) */
    double self;  /* seconds of this process's CPU time */
    double wall;  /* CLOCK_MONOTONIC */
};

/* 0, or -1 where /proc/stat cannot be read (then no verdict). */
int bench_load_sample(struct bench_load *s)
{
    FILE *f = fopen("/proc/stat", "r");
    if (!f)
        return -1;
    unsigned long long v[8] = {0}; /* user nice system idle iowait irq softirq steal */
    int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                   &v[4], &v[5], &v[6], &v[7]);
    fclose(f);
    long tick = sysconf(_SC_CLK_TCK);
    if (n < 4 || tick <= 0)
        return -1;
    s->busy = (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / (double)tick;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    s->self = (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec +
              (double)ru.ru_stime.tv_sec + 1e-6 * (double)ru.ru_stime.tv_usec;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    s->wall = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    return 0;
}

/* The cores other processes kept busy between a and b, on average. */
double bench_load_others(const struct bench_load *a, const struct bench_load *b)
{
    double wall = b->wall - a->wall;
    double others = (b->busy - a->busy) - (b->self - a->self);
    return wall > 0 && others > 0 ? others / wall : 0;
}
