/* plugins/cpu/elementwise_run.c: cpu_elementwise_run (cpu.h), how every elementwise kernel
 * (unary, binary, where, clamp, activations) walks its operands: as flat arrays split
 * across threads when all are contiguous, else through the core's iterator. */
#include "cpu.h"

struct flat_job {
    weft_iter_loop_fn loop;
    void *ctx;
    int nops;
    char *data[WEFT_ITER_MAX_OPERANDS];
    int64_t stride[WEFT_ITER_MAX_OPERANDS];
};

static void flat_range(void *vjob, int64_t begin, int64_t end)
{
    const struct flat_job *job = vjob;
    char *data[WEFT_ITER_MAX_OPERANDS];
    for (int k = 0; k < job->nops; k++)
        data[k] = job->data[k] + begin * job->stride[k];
    job->loop(job->ctx, data, job->stride, end - begin);
}

/* PyTorch's contiguity rule (weft_tensor_is_contiguous) for a non-empty strided tensor,
 * inlined because it runs for every operand of every small op. */
static inline bool dense(const weft_tensor *t)
{
    int64_t expected = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->shape[d] == 1)
            continue;
        if (t->stride[d] != expected)
            return false;
        expected *= t->shape[d];
    }
    return true;
}

/* Runs loop over ops[0..nops) (out first, all of one shape; itemsize[k] is operand k's).
 * When every operand is contiguous the loop gets them as flat arrays directly: small
 * tensors are dominated by per-call costs, and the iterator's set-up is the largest of
 * them. Otherwise the iterator walks them in memory order. */
int cpu_elementwise_run(int nops, const weft_tensor *const *ops, const int64_t *itemsize,
                        weft_iter_loop_fn loop, void *ctx)
{
    const weft_tensor *out = ops[0];
    int64_t n = 1;
    for (int d = 0; d < out->ndim; d++)
        n *= out->shape[d];
    if (n == 0)
        return 0;
    /* Only the first nops slots are set: zeroing the rest cost a small op more than its
     * arithmetic. */
    struct flat_job job;
    job.loop = loop;
    job.ctx = ctx;
    job.nops = nops;
    bool flat = true;
    for (int k = 0; k < nops && flat; k++) {
        const weft_tensor *t = ops[k];
        flat = dense(t);
        job.stride[k] = itemsize[k];
        job.data[k] = (char *)t->storage->data + t->offset * itemsize[k];
    }
    if (flat && n < CPU_PARALLEL_GRAIN) {
        loop(ctx, job.data, job.stride, n);
        return 0;
    }
    if (flat) {
        cpu_parallel_for(n, CPU_PARALLEL_GRAIN, flat_range, &job);
        return 0;
    }
    struct weft_iter it;
    int rc = weft_iter_init(&it, nops, ops);
    if (rc != 0)
        return rc;
    cpu_iter_parallel(&it, loop, ctx);
    return 0;
}
