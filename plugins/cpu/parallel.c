/* plugins/cpu/parallel.c: splitting loops across OpenMP threads. */
#ifdef _OPENMP
#include <omp.h>
#endif

#include "cpu.h"

void cpu_parallel_for(int64_t n, int64_t grain, void (*fn)(void *ctx, int64_t begin, int64_t end),
                      void *ctx)
{
    if (n <= 0)
        return;
#ifdef _OPENMP
    int nthreads = n >= grain && !omp_in_parallel() ? cpu_run_threads() : 1;
    if (nthreads > 1) {
        /* how many run, not the split: every caller's bits are the same for any range */
        int64_t chunks = n / (grain > 0 ? grain : 1);
        if (chunks > nthreads)
            chunks = nthreads;
#pragma omp parallel num_threads((int)chunks)
        {
            int64_t tid = omp_get_thread_num(), nt = omp_get_num_threads();
            int64_t begin = n * tid / nt, end = n * (tid + 1) / nt;
            if (begin < end)
                fn(ctx, begin, end);
        }
        return;
    }
#endif
    fn(ctx, 0, n);
}

struct iter_job {
    const struct weft_iter *it;
    weft_iter_loop_fn loop;
    void *ctx;
};

static void iter_range(void *ctx, int64_t begin, int64_t end)
{
    struct iter_job *job = ctx;
    weft_iter_run(job->it, begin, end, job->loop, job->ctx);
}

void cpu_iter_parallel(const struct weft_iter *it, weft_iter_loop_fn loop, void *ctx)
{
    struct iter_job job = {it, loop, ctx};
    if (it->numel < CPU_PARALLEL_GRAIN) {
        weft_iter_run(it, 0, it->numel, loop, ctx);
        return;
    }
    cpu_parallel_for(it->numel, CPU_PARALLEL_GRAIN, iter_range, &job);
}
