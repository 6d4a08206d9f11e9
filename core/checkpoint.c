/* core/checkpoint.c: activation checkpointing, torch.utils.checkpoint's non-reentrant
 * form (use_reentrant=False).
 *
 * The segment's forward runs once with grad mode on, so its graph (nodes and edges, to
 * the parameters it uses too) is recorded as usual, but the tensors its nodes save are
 * not kept: each saved slot holds a placeholder, the frame and the save's number. The
 * first backward node that asks for one of them reruns the segment's forward, on detached
 * copies of its inputs, with the random generator's offset and the autocast state of the
 * first run, and keeps what that run saves, by number; every node of the segment then
 * reads its own. A recomputed tensor is dropped when its node is done with it, and the
 * frame (with its inputs) when its last placeholder goes. */
#include <stdlib.h>

#include "internal.h"
#include "weft/autocast.h"

enum frame_mode { RECORD, RECOMPUTE };

struct weft_checkpoint_frame {
    uint32_t refs; /* placeholders, and the forward while it runs */
    weft_checkpoint_fn fn;
    void *ctx;
    int n;
    weft_tensor **inputs;
    uint64_t rng_offset;
    weft_autocast_state autocast;
    enum frame_mode mode;
    int nsaved;             /* saves in the first run */
    int nrecomputed;        /* saves in the rerun so far */
    weft_tensor **recomputed;
    bool done;
};

static WEFT_FAST_TLS struct weft_checkpoint_frame *active;
int weft_checkpoint_running;

/* Makes f this thread's frame (NULL: none), counting the frames in use. */
static void set_active(struct weft_checkpoint_frame *f)
{
    if (f && !active)
        __atomic_add_fetch(&weft_checkpoint_running, 1, __ATOMIC_RELAXED);
    else if (!f && active)
        __atomic_sub_fetch(&weft_checkpoint_running, 1, __ATOMIC_RELAXED);
    active = f;
}

struct weft_checkpoint_frame *weft_checkpoint_active(void)
{
    return active;
}

int weft_checkpoint_placeholder(struct weft_checkpoint_frame *f)
{
    f->refs++;
    return f->nsaved++;
}

bool weft_checkpoint_recording(const struct weft_checkpoint_frame *f)
{
    return f->mode == RECORD;
}

void weft_checkpoint_store(struct weft_checkpoint_frame *f, weft_tensor *alias)
{
    int k = f->nrecomputed++;
    if (k < f->nsaved && !f->recomputed[k])
        f->recomputed[k] = weft_tensor_retain(alias);
}

static void frame_unref(struct weft_checkpoint_frame *f)
{
    if (--f->refs > 0)
        return;
    for (int i = 0; f->recomputed && i < f->nsaved; i++)
        weft_tensor_release(f->recomputed[i]);
    for (int i = 0; i < f->n; i++)
        weft_tensor_release(f->inputs[i]);
    free(f->recomputed);
    free(f->inputs);
    free(f);
}

/* Reruns the segment's forward, keeping what its nodes save. */
static int recompute(struct weft_checkpoint_frame *f)
{
    f->recomputed = calloc((size_t)(f->nsaved ? f->nsaved : 1), sizeof *f->recomputed);
    if (!f->recomputed)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "checkpoint: out of host memory");
    uint64_t offset = weft_grad_random_offset();
    weft_grad_random_set_offset(f->rng_offset);
    bool grad = weft_grad_enabled();
    weft_set_grad_enabled(true);
    weft_autocast_state autocast = weft_autocast_get();
    weft_autocast_end(f->autocast);
    struct weft_checkpoint_frame *outer = active;
    set_active(f);
    f->mode = RECOMPUTE;
    f->nrecomputed = 0;
    weft_scope_push();
    weft_tensor *args[WEFT_CHECKPOINT_MAX_INPUTS];
    int rc = 0;
    for (int i = 0; i < f->n && rc == 0; i++) {
        args[i] = f->inputs[i] ? weft_detach(f->inputs[i]) : NULL;
        if (f->inputs[i] && !args[i])
            rc = weft_error_code();
        else if (args[i] && weft_requires_grad(f->inputs[i]))
            rc = weft_requires_grad_(args[i], true);
    }
    weft_tensor *out = rc == 0 ? f->fn(f->ctx, f->n, args) : NULL;
    if (rc == 0 && !out)
        rc = weft_error_code() ? weft_error_code() : WEFT_ERR_RUNTIME;
    weft_scope_pop();
    set_active(outer);
    weft_autocast_end(autocast);
    weft_set_grad_enabled(grad);
    weft_grad_random_set_offset(offset);
    f->done = true;
    if (rc == 0 && f->nrecomputed != f->nsaved)
        rc = weft_error_set(WEFT_ERR_RUNTIME,
                            "checkpoint: the recomputed forward saved %d tensors for backward "
                            "where the first saved %d: the checkpointed function must compute "
                            "the same thing each time it runs",
                            f->nrecomputed, f->nsaved);
    return rc;
}

/* Out of line and cold: the saved-tensor read it sits behind is every backward's. */
__attribute__((noinline, cold)) weft_tensor *weft_checkpoint_saved(struct weft_checkpoint_frame *f,
                                                                   int index)
{
    if (!f->done && recompute(f) != 0)
        return NULL;
    weft_tensor *t = index < f->nsaved ? f->recomputed[index] : NULL;
    if (!t)
        weft_error_set(WEFT_ERR_RUNTIME, "checkpoint: saved tensor %d was not recomputed", index);
    return t;
}

void weft_checkpoint_drop(struct weft_checkpoint_frame *f, int index)
{
    if (f->recomputed && index < f->nsaved) {
        weft_tensor_release(f->recomputed[index]);
        f->recomputed[index] = NULL;
    }
    frame_unref(f);
}

weft_tensor *weft_checkpoint(weft_checkpoint_fn fn, void *ctx, int n, weft_tensor *const *inputs)
{
    if (!fn || n < 0 || n > WEFT_CHECKPOINT_MAX_INPUTS || (n > 0 && !inputs)) {
        weft_error_set(WEFT_ERR_VALUE, "checkpoint: a function and at most %d inputs are "
                                       "expected, got %d", WEFT_CHECKPOINT_MAX_INPUTS, n);
        return NULL;
    }
    /* Nothing to save without grad mode; a segment inside a segment is the outer one's. */
    if (!weft_grad_enabled() || active)
        return fn(ctx, n, inputs);
    struct weft_checkpoint_frame *f = calloc(1, sizeof *f);
    weft_tensor **kept = calloc((size_t)(n ? n : 1), sizeof *kept);
    if (!f || !kept) {
        free(f);
        free(kept);
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "checkpoint: out of host memory");
        return NULL;
    }
    for (int i = 0; i < n; i++)
        kept[i] = weft_tensor_retain(inputs[i]);
    *f = (struct weft_checkpoint_frame){.refs = 1, .fn = fn, .ctx = ctx, .n = n, .inputs = kept,
                                        .rng_offset = weft_grad_random_offset(),
                                        .autocast = weft_autocast_get(), .mode = RECORD};
    set_active(f);
    /* The segment's intermediate results die at its end, not with the caller's scope:
     * that is the memory checkpointing saves. */
    weft_scope_push();
    weft_tensor *out = weft_tensor_retain(fn(ctx, n, inputs));
    weft_scope_pop();
    set_active(NULL);
    frame_unref(f);
    return weft_autorelease(out);
}
