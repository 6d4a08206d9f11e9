/* plugins/cpu/cpu_load.c: how busy other programs keep the cores this process may use.
 *
 * The kernel's counters (/proc/stat: each core's busy time, in USER_HZ ticks) summed over
 * the cores of this process's affinity mask, less this process's own CPU time (all its
 * threads, CLOCK_PROCESS_CPUTIME_ID), over the wall time between two samples: the cores
 * the other processes kept busy. Busy is everything but idle and iowait (user, nice,
 * system, irq, softirq and steal: a hypervisor's stolen time is a core nobody here has). */
#define _GNU_SOURCE
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cpu_load.h"

static long long clock_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

int cpu_load_sample(struct cpu_load *s)
{
    cpu_set_t mine;
    bool all = sched_getaffinity(0, sizeof mine, &mine) != 0;
    FILE *f = fopen("/proc/stat", "r");
    if (!f)
        return -1;
    char line[512];
    s->busy_ticks = 0;
    s->cores = 0;
    while (fgets(line, sizeof line, f) && strncmp(line, "cpu", 3) == 0) {
        int cpu;
        long long v[8] = {0}; /* user nice system idle iowait irq softirq steal */
        if (sscanf(line, "cpu%d %lld %lld %lld %lld %lld %lld %lld %lld", &cpu, &v[0], &v[1],
                   &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]) < 9 ||
            cpu < 0 || (!all && (cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &mine))))
            continue; /* the total line, or a core this process may not use */
        s->busy_ticks += v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
        s->cores++;
    }
    fclose(f);
    s->self_ns = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
    s->wall_ns = clock_ns(CLOCK_MONOTONIC);
    return s->cores > 0 ? 0 : -1;
}

double cpu_load_others(const struct cpu_load *a, const struct cpu_load *b)
{
    static long tick;
    if (!tick)
        tick = sysconf(_SC_CLK_TCK) > 0 ? sysconf(_SC_CLK_TCK) : 100;
    double wall = (double)(b->wall_ns - a->wall_ns) / 1e9;
    double others = (double)(b->busy_ticks - a->busy_ticks) / (double)tick -
                    (double)(b->self_ns - a->self_ns) / 1e9;
    return wall > 0 && others > 0 ? others / wall : 0;
}
