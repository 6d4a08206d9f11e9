/* weft/dataloader.h: batches of a dataset as tensors on a device, as torch DataLoader.
 *
 * A loader cuts each epoch of a dataset (weft/dataset.h) into batches of batch_size
 * samples, in order or shuffled, and hands out one tensor per field with the batch as
 * its first dim: MNIST gives image [64, 1, 28, 28] and label [64].
 *
 * Shuffling. Epoch e visits the samples in the order of a Fisher-Yates shuffle of
 * 0..n-1 driven by Philox (weft/philox.h) with key `seed` and base block e << 40: for
 * i = n-1 down to 1, j = weft_philox_u64(seed, e << 40, n-1-i) % (i+1), swap(i, j). The
 * order depends on (seed, epoch) only: it differs per epoch and is identical whatever
 * the number of workers.
 *
 * Sharding. With num_replicas R > 1, the loader is PyTorch 1.13's DistributedSampler
 * (shuffle as above, seed, drop_last=False) under the batch sampler: the epoch's order
 * (the permutation above, or 0..n-1 without shuffle) is padded to total = ceil(n / R) * R
 * by repeating it from its start (as often as needed when R > n), and rank r visits
 * order[r], order[r + R], order[r + 2R], ...: num_samples = total / R samples on every
 * rank, disjoint across ranks but for the total - n padded repeats. Since the order
 * depends on (seed, epoch) only, every rank computes the same one with no communication,
 * and weft_dataloader_epoch() is set_epoch(). Batches are cut from the rank's shard:
 * drop_last and weft_dataloader_len() apply to it.
 *
 * Workers. With num_workers > 0, a fixed pool of threads reads batches ahead of the
 * consumer, at most num_workers * prefetch_factor batches in flight (PyTorch's
 * prefetch_factor), each into its own slot; batches are handed out strictly in order.
 * With num_workers == 0 the calling thread reads each batch inside next().
 *
 * Memory and copies. On the cpu the tensors handed out own the host buffers the batch
 * was read into (no copy). On another device the batch is read into host buffers,
 * pinned ones from the device's backend when pin_memory is set and the backend has
 * host_alloc_pinned (pageable ones otherwise, and always on the cpu), then copied to the
 * device: non-blocking from pinned memory (the backend keeps the host block until the
 * copy ends). next() issues the copy of batch k+1 as soon as that batch is read, while
 * batch k is in use, so the transfer overlaps the caller's work on the host.
 *
 * Normalisation and dtypes, per field: a field with normalisation becomes
 * (x * scale - mean[c]) / std[c], with scale 1/255 for uint8 fields (ToTensor) and 1
 * otherwise, and c the index along the sample's first dim (channels of a CHW image) or
 * 0 when one mean/std is given; the result is float32 unless another floating dtype is
 * asked for. A field can also just be converted to another dtype (labels to int64).
 *
 * Transforms (weft/transforms.h): with a pipeline, each sample of transforms_field is
 * made float32 (x/255 for uint8, as ToTensor), run through it in the worker that reads the
 * batch, and handed out in the pipeline's output shape (a crop or resize changes the
 * field's sample shape). The random steps of sample i in epoch e draw from
 * weft_transform_rng_sample(seed, e, i), i its index in the dataset: batches are the same
 * for any number of workers, differ between epochs, and a resumed epoch repeats them.
 *
 * Ownership: next() returns new references (recorded in the innermost scope, if any).
 * Threading: one thread drives a loader; its workers are internal.
 * Errors: NULL or negative with the thread's error set; a reader's error inside a
 * worker ends the epoch and surfaces from next() with the reader's code and message.
 */
#ifndef WEFT_DATALOADER_H
#define WEFT_DATALOADER_H

#include <stdbool.h>
#include <stdint.h>

#include "weft/dataset.h"
#include "weft/device.h"
#include "weft/dtype.h"
#include "weft/tensor.h"
#include "weft/transforms.h"

#ifdef __cplusplus
extern "C" {
#endif

struct weft_config;

#define WEFT_DATALOADER_MAX_CHANNELS 16 /* mean/std values per field */

/* What happens to one field of the dataset. All-zero: handed out as read. */
struct weft_dataloader_field_options {
    bool convert;          /* hand out `dtype` instead of the dataset's dtype */
    enum weft_dtype dtype; /* with convert (a floating dtype when normalising) */
    int nchannels;         /* 0: no normalisation; 1: one mean/std; else the sample's
                            * first dim, one mean/std per channel */
    double mean[WEFT_DATALOADER_MAX_CHANNELS];
    double std[WEFT_DATALOADER_MAX_CHANNELS]; /* > 0 */
};

/* The largest batch: 2^31 - 1 samples (PyTorch sets none; a larger one is a mistake, and
 * the batch's sizes in bytes must stay far inside int64). */
#define WEFT_DATALOADER_MAX_BATCH INT64_C(2147483647)

struct weft_dataloader_options {
    int64_t batch_size;  /* 1 ..  WEFT_DATALOADER_MAX_BATCH */
    bool shuffle;        /* a new permutation every epoch (see above) */
    bool drop_last;      /* drop the last batch when it is smaller than batch_size */
    int num_workers;     /* 0: read in the calling thread */
    int prefetch_factor; /* batches in flight per worker, >= 1 (used with workers) */
    bool pin_memory;     /* pinned host buffers when the device's backend has them */
    uint64_t seed;       /* shuffling key */
    weft_device device;  /* where the tensors handed out live */
    struct weft_dataloader_field_options fields[WEFT_DATASET_MAX_FIELDS]; /* by field index */
    int num_replicas;    /* shards of each epoch (processes), >= 1; 1: not distributed */
    int rank;            /* the shard read here, 0 <= rank < num_replicas (see Sharding) */
    /* Data augmentation (see Transforms). */
    weft_transforms *transforms; /* NULL: none; the loader holds its own reference */
    int transforms_field;        /* the field they transform (an image [C, H, W] or [H, W]) */
    bool transforms_eval;        /* their evaluation form: no random step (test sets) */
};

typedef struct weft_dataloader weft_dataloader;

/* PyTorch's defaults: batch_size 1, no shuffle, no drop_last, 0 workers,
 * prefetch_factor 2, no pinning, seed 0, cpu, fields as read, num_replicas 1, rank 0. */
struct weft_dataloader_options weft_dataloader_options_default(void);

/* A loader over ds (which must outlive it) and its worker threads. Errors
 * (WEFT_ERR_VALUE, PyTorch's words where it has some): batch_size < 1 (or above
 * WEFT_DATALOADER_MAX_BATCH), num_workers < 0,
 * prefetch_factor < 1 with workers, an unknown device, a field option for a field the
 * dataset lacks, nchannels not 1 nor the sample's first dim, std <= 0, normalising to a
 * non-floating dtype, num_replicas < 1, rank outside [0, num_replicas - 1], transforms
 * on a field whose sample shape is not theirs, or on a dataset of 2^30 samples or more. */
weft_dataloader *weft_dataloader_new(const weft_dataset *ds,
                                     const struct weft_dataloader_options *options);

/* A loader configured by [section] of cfg (weft_config getters, so unknown keys can be
 * reported later): batch_size (default 1), shuffle (false), drop_last (false),
 * workers (0), prefetch (2), pin_memory (false), seed (0), and mean/std: a number or
 * comma-separated numbers, one per channel, for the field called "image" if there is
 * one, else the first field that is not class labels; both or neither. Fields with
 * num_classes > 0 (labels) are handed out as int64. `transforms` and the sections of its
 * steps (weft_transforms_from_config) augment that same field; normalize, listed there, then
 * takes mean/std at its place in the list. Errors (WEFT_ERR_CONFIG) name the
 * file, section, key and value. No key shards the loader (num_replicas 1, rank 0): a
 * distributed trainer copies weft_dataloader_options(), sets num_replicas and rank from
 * its process group and makes the loader it uses with weft_dataloader_new(). */
weft_dataloader *weft_dataloader_from_config(const weft_dataset *ds, struct weft_config *cfg,
                                             const char *section, weft_device device);

/* Starts epoch `epoch` (>= 0), PyTorch's set_epoch: computes its order (this rank's
 * shard of it) and sets the workers going. Abandons an epoch in progress (waiting for
 * the batches being read). next() before any call starts epoch 0. Returns 0 or
 * negative. */
int weft_dataloader_epoch(weft_dataloader *dl, int64_t epoch);

/* The next batch of the epoch: fields[f] receives field f's tensor (new references,
 * on the loader's device, one per dataset field). Returns 1 with a batch, 0 at the end
 * of the epoch (fields untouched), negative on error (fields untouched; the error
 * repeats until the next weft_dataloader_epoch()). */
int weft_dataloader_next(weft_dataloader *dl, weft_tensor **fields);

/* Batches per epoch on this rank: ceil(m / batch_size), or floor with drop_last, where
 * m is the shard's num_samples (n when not sharded); -1 for NULL. */
int64_t weft_dataloader_len(const weft_dataloader *dl);
/* Number of fields (the dataset's); 0 for NULL. */
int weft_dataloader_num_fields(const weft_dataloader *dl);
/* The options in use (after defaults and config); NULL for NULL. */
const struct weft_dataloader_options *weft_dataloader_options(const weft_dataloader *dl);

/* Stops and joins the workers (also mid-epoch) and frees what the loader holds.
 * Tensors already handed out stay valid. NULL is a no-op. */
void weft_dataloader_free(weft_dataloader *dl);
/* Batches loaded by the workers and waiting to be taken (0 without workers): the queue
 * depth a job's metrics show. Takes the loader's lock briefly. */
int weft_dataloader_queue_depth(weft_dataloader *dl);

#ifdef __cplusplus
}
#endif
#endif
