/* weft/ddp.h: data-parallel training over the process group (weft/dist.h), with
 * torch.nn.parallel.DistributedDataParallel's semantics.
 *
 *     weft_dist_init("auto", 1800);
 *     weft_ddp *ddp = weft_ddp_new(model, NULL);      // rank 0's parameters everywhere
 *     for (...) {
 *         weft_tensor *y = weft_ddp_forward(ddp, x);  // rank 0's buffers, then the model
 *         weft_backward(loss(y), NULL, false);        // grads averaged over the ranks on return
 *         weft_optimizer_step(opt);
 *     }
 *
 * At creation every rank checks that its model has the same parameter shapes as rank
 * 0's (a hash of names' count, shapes and dtypes, all-gathered, so every rank fails
 * alike and names the odd rank), then takes rank 0's parameters and buffers.
 *
 * Buckets. The parameters that require grad are laid out in reverse registration order
 * (the order backward tends to produce their gradients) into flat buckets of one dtype
 * and device each, of at most bucket_mb MiB (the first at most 1 MiB, as PyTorch, so
 * that communication starts early). During backward a hook on each parameter copies its
 * gradient into its bucket as soon as it has been accumulated; a bucket whose gradients
 * are all there is all-reduced (average) asynchronously while backward goes on, buckets
 * being started in index order on every rank (collectives must match across ranks). When
 * backward ends, the remaining buckets are started, all are waited for, and the averages
 * are written back into the parameters' .grad. The time spent waiting there is the part
 * of communication not hidden under backward (weft_ddp_stats).
 *
 * Unused parameters. A parameter that got no gradient in a backward is an error at the
 * end of that backward, naming it, unless find_unused_parameters is set: then its bucket
 * slot holds zeros, the ranks agree (one more all-reduce) on which parameters any rank
 * used, and a parameter no rank used keeps its .grad untouched.
 *
 * no_sync: between weft_ddp_no_sync_begin and _end, backward accumulates gradients
 * locally and communicates nothing; the first backward after _end all-reduces the
 * accumulated sums (gradient accumulation, PyTorch's no_sync context).
 *
 * A world of one communicates nothing and costs nothing. Threads: one thread drives a
 * ddp (the one running backward).
 */
#ifndef WEFT_DDP_H
#define WEFT_DDP_H

#include <stdbool.h>
#include <stdint.h>

#include "weft/nn.h"
#include "weft/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The largest bucket (MiB): 1 TiB, far above any model, so the bytes stay an int64. */
#define WEFT_DDP_MAX_BUCKET_MB 1048576

struct weft_ddp_options {
    double bucket_mb;            /* in (0, WEFT_DDP_MAX_BUCKET_MB]; PyTorch's bucket_cap_mb, 25 */
    bool find_unused_parameters; /* false */
    bool broadcast_buffers;      /* true: rank 0's buffers before every weft_ddp_forward */
};

struct weft_ddp_options weft_ddp_options_default(void);

typedef struct weft_ddp weft_ddp;

/* Wraps model (which must outlive the ddp; it is not owned) for the initialized process
 * group (weft_dist_init; a world of one when it was not called). Collective: every rank
 * must call it. NULL options: the defaults. NULL with an error. */
weft_ddp *weft_ddp_new(weft_module *model, const struct weft_ddp_options *options);
/* Removes the hooks; the model is left as it is. NULL is ignored. */
void weft_ddp_free(weft_ddp *ddp);

weft_module *weft_ddp_module(const weft_ddp *ddp);
/* Rank 0's buffers (BatchNorm's running statistics) to every rank, when broadcast_buffers
 * is set, then the model's forward. */
weft_tensor *weft_ddp_forward(weft_ddp *ddp, weft_tensor *input);
/* Rank 0's buffers to every rank: what weft_ddp_forward does first, for callers that
 * run the model's forward themselves. 0 or negative. */
int weft_ddp_sync_buffers(weft_ddp *ddp);

/* Gradient accumulation without communication (PyTorch's no_sync). They nest. */
void weft_ddp_no_sync_begin(weft_ddp *ddp);
void weft_ddp_no_sync_end(weft_ddp *ddp);

/* Buckets as laid out: how many, and the parameter count and bytes of each. */
int weft_ddp_num_buckets(const weft_ddp *ddp);
int weft_ddp_bucket_info(const weft_ddp *ddp, int bucket, int *num_params, int64_t *nbytes);

/* Since creation: how many synchronised backwards, buckets all-reduced, bytes reduced;
 * comm_s the summed time from each bucket's start to its completion being seen;
 * exposed_s the time backward's end spent waiting for them (not hidden under compute). */
struct weft_ddp_stats {
    int64_t steps, buckets, bytes;
    double comm_s, exposed_s;
};
struct weft_ddp_stats weft_ddp_stats(const weft_ddp *ddp);

#ifdef __cplusplus
}
#endif
#endif
