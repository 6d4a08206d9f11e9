/* plugins/cpu/cpu_load.h: how busy other programs keep the cores this process may use.
 * Compiled into the cpu plugin (threads.c: how many threads run) and into weft-bench (its
 * warning that figures taken on a busy machine are not meaningful). */
#ifndef WEFT_CPU_LOAD_H
#define WEFT_CPU_LOAD_H

struct cpu_load {
    long long busy_ticks; /* busy time of the cores this process may run on, USER_HZ ticks */
    long long self_ns;    /* this process's CPU time, all its threads */
    long long wall_ns;    /* CLOCK_MONOTONIC */
    int cores;            /* how many cores busy_ticks counts */
};

/* 0, or -1 where /proc/stat cannot be read (then no verdict). */
int cpu_load_sample(struct cpu_load *s);
/* The cores other processes kept busy between samples a and b, on average (0 or more). */
double cpu_load_others(const struct cpu_load *a, const struct cpu_load *b);

#endif
