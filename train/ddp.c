/* train/ddp.c: DistributedDataParallel over the process group (weft/ddp.h).
 *
 * One synchronised backward, on every rank:
 *   hook(p)      p's gradient is final: copy it into its bucket slot; a bucket whose
 *                slots are all filled is ready; ready buckets are started in index order
 *   finish()     (queued by the first hook) unused parameters: error, or zero slots; start
 *                the rest; find_unused: all-reduce the used map; wait for every bucket;
 *                write the averages back into .grad
 * Buckets hold consecutive entries of `params`, which is in reverse registration order.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"
#include "weft/autograd.h"
#include "weft/ddp.h"
#include "weft/dist.h"
#include "weft/error.h"
#include "weft/ops.h"

#define FIRST_BUCKET_BYTES (1 << 20) /* PyTorch's _DEFAULT_FIRST_BUCKET_BYTES */

struct ddp_param {
    weft_ddp *ddp;
    weft_tensor *tensor; /* borrowed from the model */
    char name[128];
    int bucket;
    weft_tensor *slot;   /* its place in the bucket, shaped as the parameter (owned) */
    int hook;            /* handle of the post-accumulate hook */
    bool ready;          /* got its gradient in this backward */
};

struct ddp_bucket {
    weft_tensor *flat;   /* 1-D, contiguous (owned) */
    int first, count;    /* params[first .. first+count) */
    int pending;         /* slots not yet filled in this backward */
    weft_work *work;     /* in flight, NULL otherwise */
    double started, finished;
    int64_t nbytes;
};

struct weft_ddp {
    weft_module *model;
    struct weft_ddp_options options;
    int world;
    struct ddp_param *params;
    int num_params;
    struct ddp_bucket *buckets;
    int num_buckets;
    int next_launch;     /* the next bucket to start: buckets start in index order */
    bool active;         /* inside a synchronised backward (finish() is queued) */
    int no_sync;
    struct weft_named_tensor *buffers;
    int num_buffers;
    struct weft_ddp_stats stats;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

struct weft_ddp_options weft_ddp_options_default(void)
{
    return (struct weft_ddp_options){.bucket_mb = 25, .broadcast_buffers = true};
}

/* ---- set-up ---------------------------------------------------------------------------- */

/* FNV-1a over what must agree between ranks: the parameters' count, shapes and dtypes. */
static uint64_t shapes_hash(const struct weft_named_tensor *named, int n)
{
    uint64_t h = 1469598103934665603ull;
#define MIX(v) (h = (h ^ (uint64_t)(v)) * 1099511628211ull)
    MIX(n);
    for (int i = 0; i < n; i++) {
        const weft_tensor *t = named[i].tensor;
        MIX(t->dtype);
        MIX(t->ndim);
        for (int d = 0; d < t->ndim; d++)
            MIX(t->shape[d]);
    }
#undef MIX
    return h;
}

/* Every rank learns every rank's hash, so all of them fail alike, naming the odd rank. */
static int check_same_model(const struct weft_named_tensor *named, int n, int world)
{
    int64_t shape[1] = {1}, gathered_shape[2] = {world, 1};
    weft_tensor *mine = weft_empty(1, shape, WEFT_I64, WEFT_CPU);
    weft_tensor *all = weft_empty(2, gathered_shape, WEFT_I64, WEFT_CPU);
    if (!mine || !all)
        return weft_error_code();
    *(int64_t *)weft_tensor_data(mine) = (int64_t)shapes_hash(named, n);
    int rc = weft_dist_all_gather(all, mine);
    if (rc != 0)
        return rc;
    const int64_t *h = weft_tensor_data(all);
    for (int r = 1; r < world; r++)
        if (h[r] != h[0])
            return weft_error_set(WEFT_ERR_RUNTIME,
                                  "DistributedDataParallel: the model on rank %d differs from "
                                  "rank 0's (parameter shapes hash %016" PRIx64 " vs %016" PRIx64
                                  "): every rank must build the same model",
                                  r, (uint64_t)h[r], (uint64_t)h[0]);
    return 0;
}

/* Rank 0's tensors to every rank, in place (no autograd: these are .data updates). */
static int broadcast_all(const struct weft_named_tensor *named, int n)
{
    bool prev = weft_no_grad_begin();
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++)
        rc = weft_dist_broadcast(named[i].tensor, 0);
    weft_grad_mode_restore(prev);
    return rc;
}

static int on_grad_accumulated(weft_tensor *leaf, void *ctx);

/* Lays the trainable parameters out in reverse registration order into buckets of one
 * dtype and device, each at most cap bytes (the first at most FIRST_BUCKET_BYTES). */
static int build_buckets(weft_ddp *d, const struct weft_named_tensor *named, int n)
{
    d->params = calloc((size_t)(n ? n : 1), sizeof *d->params);
    d->buckets = calloc((size_t)(n ? n : 1), sizeof *d->buckets);
    if (!d->params || !d->buckets)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory for DDP buckets");
    int64_t cap = (int64_t)(d->options.bucket_mb * 1048576.0);
    struct ddp_bucket *b = NULL;
    for (int i = n - 1; i >= 0; i--) {
        weft_tensor *t = named[i].tensor;
        if (!weft_requires_grad(t))
            continue;
        int64_t bytes = weft_tensor_numel(t) * (int64_t)weft_dtype_size(t->dtype);
        int64_t limit = d->num_buckets == 1 && cap > FIRST_BUCKET_BYTES ? FIRST_BUCKET_BYTES : cap;
        const weft_tensor *head = b ? d->params[b->first].tensor : NULL;
        if (!b || b->nbytes + bytes > limit || head->dtype != t->dtype ||
            !weft_device_equal(head->device, t->device)) {
            b = &d->buckets[d->num_buckets++];
            b->first = d->num_params;
        }
        struct ddp_param *p = &d->params[d->num_params++];
        p->ddp = d;
        p->tensor = t;
        p->bucket = (int)(b - d->buckets);
        snprintf(p->name, sizeof p->name, "%s", named[i].name);
        b->count++;
        b->nbytes += bytes;
    }
    /* The flat buffers and each parameter's slot in them. */
    for (int k = 0; k < d->num_buckets; k++) {
        struct ddp_bucket *bk = &d->buckets[k];
        const weft_tensor *head = d->params[bk->first].tensor;
        int64_t numel = bk->nbytes / (int64_t)weft_dtype_size(head->dtype);
        weft_scope_push();
        bk->flat = weft_tensor_retain(weft_zeros(1, &numel, head->dtype, head->device));
        int64_t offset = 0;
        for (int j = bk->first; j < bk->first + bk->count && bk->flat; j++) {
            weft_tensor *t = d->params[j].tensor;
            int64_t m = weft_tensor_numel(t);
            d->params[j].slot = weft_tensor_retain(
                weft_view(weft_narrow(bk->flat, 0, offset, m), t->ndim, t->shape));
            if (!d->params[j].slot)
                break;
            offset += m;
        }
        weft_scope_pop();
        if (!bk->flat || !d->params[bk->first + bk->count - 1].slot)
            return weft_error_code();
    }
    for (int j = 0; j < d->num_params; j++) {
        int h = weft_register_post_accumulate_grad_hook(d->params[j].tensor, on_grad_accumulated,
                                                        &d->params[j]);
        if (h < 0)
            return h;
        d->params[j].hook = h;
    }
    return 0;
}

weft_ddp *weft_ddp_new(weft_module *model, const struct weft_ddp_options *options)
{
    if (!model) {
        weft_error_set(WEFT_ERR_VALUE, "DistributedDataParallel: NULL module");
        return NULL;
    }
    struct weft_ddp_options o = options ? *options : weft_ddp_options_default();
    if (!(o.bucket_mb > 0 && o.bucket_mb <= WEFT_DDP_MAX_BUCKET_MB)) {
        weft_error_set(WEFT_ERR_VALUE, "DistributedDataParallel: bucket_mb must be > 0 and at "
                                       "most %d (1 TiB), got %g",
                       WEFT_DDP_MAX_BUCKET_MB, o.bucket_mb);
        return NULL;
    }
    weft_ddp *d = calloc(1, sizeof *d);
    if (!d) {
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory for DDP");
        return NULL;
    }
    d->model = model;
    d->options = o;
    d->world = weft_dist_world_size();
    struct weft_named_tensor *named = NULL;
    int n = weft_module_named_parameters(model, &named);
    int rc = n < 0 ? n : 0;
    if (rc == 0) {
        d->num_buffers = weft_module_named_buffers(model, &d->buffers);
        rc = d->num_buffers < 0 ? d->num_buffers : 0;
    }
    if (rc == 0 && d->world > 1) {
        weft_scope_push();
        rc = check_same_model(named, n, d->world);
        if (rc == 0)
            rc = broadcast_all(named, n);
        if (rc == 0)
            rc = broadcast_all(d->buffers, d->num_buffers);
        weft_scope_pop();
    }
    if (rc == 0)
        rc = build_buckets(d, named, n);
    free(named);
    if (rc != 0) {
        weft_ddp_free(d);
        return NULL;
    }
    return d;
}

void weft_ddp_free(weft_ddp *d)
{
    if (!d)
        return;
    for (int j = 0; j < d->num_params; j++) {
        if (d->params[j].hook > 0)
            weft_remove_hook(d->params[j].tensor, d->params[j].hook);
        weft_tensor_release(d->params[j].slot);
    }
    for (int k = 0; k < d->num_buckets; k++) {
        if (d->buckets[k].work)
            weft_work_wait(d->buckets[k].work);
        weft_tensor_release(d->buckets[k].flat);
    }
    free(d->params);
    free(d->buckets);
    free(d->buffers);
    free(d);
}

/* ---- the synchronised backward -------------------------------------------------------- */

/* Notices finished buckets (and drives the transport's progress). */
static void poll_buckets(weft_ddp *d)
{
    for (int k = 0; k < d->next_launch; k++) {
        struct ddp_bucket *b = &d->buckets[k];
        if (b->work && b->finished == 0 && weft_work_is_completed(b->work))
            b->finished = now_s();
    }
}

static int start_ready_buckets(weft_ddp *d)
{
    while (d->next_launch < d->num_buckets && d->buckets[d->next_launch].pending == 0) {
        struct ddp_bucket *b = &d->buckets[d->next_launch];
        b->started = now_s();
        b->finished = 0;
        b->work = weft_dist_all_reduce_async(b->flat, WEFT_REDUCE_AVG);
        if (!b->work)
            return weft_error_code();
        d->next_launch++;
    }
    return 0;
}

static int finish_backward(void *ctx);

/* A new synchronised backward: every slot empty, finish() queued. */
static int begin_backward(weft_ddp *d)
{
    for (int j = 0; j < d->num_params; j++)
        d->params[j].ready = false;
    for (int k = 0; k < d->num_buckets; k++)
        d->buckets[k].pending = d->buckets[k].count;
    d->next_launch = 0;
    int rc = weft_autograd_queue_callback(finish_backward, d);
    if (rc == 0)
        d->active = true;
    return rc;
}

static int on_grad_accumulated(weft_tensor *leaf, void *ctx)
{
    struct ddp_param *p = ctx;
    weft_ddp *d = p->ddp;
    if (d->no_sync > 0 || d->world == 1)
        return 0;
    int rc = d->active ? 0 : begin_backward(d);
    if (rc != 0)
        return rc;
    if (p->ready)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "DistributedDataParallel: Expected to mark a variable ready only "
                              "once. Parameter %s got its gradient twice in one backward",
                              p->name);
    p->ready = true;
    weft_scope_push();
    rc = weft_copy_(p->slot, weft_grad(leaf));
    weft_scope_pop();
    if (rc != 0)
        return rc;
    d->buckets[p->bucket].pending--;
    rc = start_ready_buckets(d);
    poll_buckets(d);
    return rc;
}

/* The parameters no rank used keep their .grad: the ranks agree on a used map (made in
 * the caller's scope). */
static int reduce_used_map(weft_ddp *d, weft_tensor **out_used)
{
    int64_t n = d->num_params;
    weft_tensor *used = weft_empty(1, &n, WEFT_U8, WEFT_CPU);
    if (!used)
        return weft_error_code();
    uint8_t *u = weft_tensor_data(used);
    for (int j = 0; j < d->num_params; j++)
        u[j] = d->params[j].ready;
    *out_used = used;
    return weft_dist_all_reduce(used, WEFT_REDUCE_MAX);
}

static int unused_error(weft_ddp *d)
{
    char names[512] = "";
    size_t len = 0;
    for (int j = 0; j < d->num_params && len + 1 < sizeof names; j++)
        if (!d->params[j].ready)
            len += (size_t)snprintf(names + len, sizeof names - len, "%s%s", len ? ", " : "",
                                    d->params[j].name);
    return weft_error_set(WEFT_ERR_RUNTIME,
                          "DistributedDataParallel: parameters that were not used in producing "
                          "the loss on rank %d: %s. Set find_unused_parameters (the [distributed] "
                          "key, or weft_ddp_options) if the model has parameters that take no part "
                          "in some steps",
                          weft_dist_rank(), names);
}

static int finish_backward(void *ctx)
{
    weft_ddp *d = ctx;
    d->active = false;
    double t0 = now_s();
    weft_scope_push();
    int rc = 0;
    bool all_used = true;
    for (int j = 0; j < d->num_params; j++)
        all_used &= d->params[j].ready;
    if (!all_used && !d->options.find_unused_parameters)
        rc = unused_error(d);
    if (rc == 0 && !all_used) {
        for (int j = 0; j < d->num_params && rc == 0; j++) {
            struct ddp_param *p = &d->params[j];
            if (p->ready)
                continue;
            rc = weft_copy_(p->slot, weft_zeros_like(p->slot));
            d->buckets[p->bucket].pending--;
        }
    }
    if (rc == 0)
        rc = start_ready_buckets(d);
    weft_tensor *used = NULL;
    if (rc == 0 && d->options.find_unused_parameters)
        rc = reduce_used_map(d, &used);
    /* Wait for everything started, even after a failure: a request must not be dropped. */
    for (int k = 0; k < d->next_launch; k++) {
        struct ddp_bucket *b = &d->buckets[k];
        if (!b->work)
            continue;
        int w = weft_work_wait(b->work);
        b->work = NULL;
        double end = b->finished ? b->finished : now_s();
        d->stats.comm_s += end - b->started;
        d->stats.buckets++;
        d->stats.bytes += b->nbytes;
        if (rc == 0)
            rc = w;
    }
    const uint8_t *u = used ? weft_tensor_data(used) : NULL;
    for (int j = 0; j < d->num_params && rc == 0; j++) {
        struct ddp_param *p = &d->params[j];
        if (u && !u[j])
            continue; /* no rank used it: .grad untouched */
        weft_tensor *g = weft_grad(p->tensor);
        if (g)
            rc = weft_copy_(g, p->slot);
        else
            rc = weft_set_grad(p->tensor, weft_clone(p->slot));
    }
    weft_scope_pop(); /* releases used */
    d->stats.exposed_s += now_s() - t0;
    d->stats.steps += rc == 0;
    return rc;
}

/* ---- the rest ------------------------------------------------------------------------ */

weft_module *weft_ddp_module(const weft_ddp *d)
{
    return d ? d->model : NULL;
}

int weft_ddp_sync_buffers(weft_ddp *d)
{
    if (!d)
        return weft_error_set(WEFT_ERR_VALUE, "DistributedDataParallel: NULL ddp");
    if (d->world == 1 || !d->options.broadcast_buffers || d->num_buffers == 0)
        return 0;
    return broadcast_all(d->buffers, d->num_buffers);
}

weft_tensor *weft_ddp_forward(weft_ddp *d, weft_tensor *input)
{
    if (weft_ddp_sync_buffers(d) != 0)
        return NULL;
    return weft_module_forward(d->model, input);
}

void weft_ddp_no_sync_begin(weft_ddp *d)
{
    if (d)
        d->no_sync++;
}

void weft_ddp_no_sync_end(weft_ddp *d)
{
    if (d && d->no_sync > 0)
        d->no_sync--;
}

int weft_ddp_num_buckets(const weft_ddp *d)
{
    return d ? d->num_buckets : 0;
}

int weft_ddp_bucket_info(const weft_ddp *d, int bucket, int *num_params, int64_t *nbytes)
{
    if (!d || bucket < 0 || bucket >= d->num_buckets)
        return weft_error_set(WEFT_ERR_INDEX, "DDP bucket %d out of range (the ddp has %d)",
                              bucket, d ? d->num_buckets : 0);
    if (num_params)
        *num_params = d->buckets[bucket].count;
    if (nbytes)
        *nbytes = d->buckets[bucket].nbytes;
    return 0;
}

struct weft_ddp_stats weft_ddp_stats(const weft_ddp *d)
{
    return d ? d->stats : (struct weft_ddp_stats){0};
}
