/* train/dataloader.c: batches of a dataset as tensors, read ahead by worker threads.
 *
 * One mutex guards the epoch state and the ring of slots. A worker takes the next batch
 * number when that batch's slot is free, reads it without the lock into host tensors it
 * creates (so each batch owns its buffers and a slot never waits for a tensor it handed
 * out), and marks the slot ready or failed. The consumer takes slots strictly in batch
 * order. Workers sleep on `work`, the consumer on `ready`: nobody spins.
 */
#include "weft/dataloader.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft.h"
#include "weft/backend.h"
#include "weft/config.h"
#include "weft/half.h"
#include "weft/philox.h"

#define MAX_FIELDS WEFT_DATASET_MAX_FIELDS
#define MESSAGE_MAX 2048
#define MAX_WORKERS 256
#define MAX_PREFETCH 1024
#define CHUNK 256 /* elements converted per step through a double buffer */

enum slot_state { SLOT_FREE, SLOT_LOADING, SLOT_READY, SLOT_FAILED };

struct failure {
    int code; /* WEFT_OK when none */
    char message[MESSAGE_MAX];
};

struct slot {
    enum slot_state state;
    int64_t batch;
    weft_tensor *host[MAX_FIELDS]; /* the batch, owned until handed over */
    void *raw[MAX_FIELDS];         /* what the reader fills for converted fields; reused */
    size_t raw_bytes[MAX_FIELDS];
    float *scratch;                /* the transforms' sample and steps; reused */
    struct failure failure;
};

/* How one field goes from the reader's buffer to the tensor handed out. */
struct field_plan {
    enum weft_dtype src, dst;
    bool convert; /* read into a scratch buffer, then convert (dtype and/or normalise) */
    int nchannels;
    int64_t sample_numel, channel_numel;
    double scale[WEFT_DATALOADER_MAX_CHANNELS], shift[WEFT_DATALOADER_MAX_CHANNELS];
    bool transform;             /* run through opt.transforms after the conversion */
    int ndim;                   /* the sample shape handed out (the pipeline's output) */
    int64_t shape[WEFT_MAX_DIMS];
};

struct weft_dataloader {
    const weft_dataset *ds;
    struct weft_dataloader_options opt;
    int nfields;
    struct field_plan plan[MAX_FIELDS];
    int64_t nsamples;         /* the dataset's */
    int64_t length, nbatches; /* per epoch on this rank: its shard's samples, their batches */
    int64_t *order;           /* the epoch's order of all nsamples (see make_order) */
    int64_t *perm;            /* this rank's shard of it, as visited: order when unsharded */
    int64_t epoch;            /* the transforms' key; written only while no worker reads */
    bool on_device; /* not the cpu: batches are copied */
    bool pinned;    /* host buffers from the device backend's pinned allocator */
    const struct weft_backend *backend;

    pthread_mutex_t lock;
    pthread_cond_t work, ready;
    bool started, active, stop;
    int64_t next_issue, next_consume;
    int nloading;
    struct failure failed; /* the epoch's error, repeated by next() */
    int nslots;
    struct slot *slots;
    bool staged;                   /* batch next_consume is already on the device */
    bool staged_side;              /* ... copied on the device's side queue */
    weft_tensor *staged_t[MAX_FIELDS];
    int nthreads;
    pthread_t *threads;
};

/* ---- options ------------------------------------------------------------------- */

struct weft_dataloader_options weft_dataloader_options_default(void)
{
    struct weft_dataloader_options o;
    memset(&o, 0, sizeof o);
    o.batch_size = 1;
    o.prefetch_factor = 2;
    o.device = WEFT_CPU;
    o.num_replicas = 1;
    return o;
}

static int check_field_options(const weft_dataset *ds, const struct weft_dataloader_options *o)
{
    int nfields = weft_dataset_num_fields(ds);
    for (int f = 0; f < MAX_FIELDS; f++) {
        const struct weft_dataloader_field_options *fo = &o->fields[f];
        if (!fo->convert && fo->nchannels == 0)
            continue;
        if (f >= nfields)
            return weft_error_set(WEFT_ERR_VALUE,
                                  "dataloader: options for field %d, but dataset [%s] has %d "
                                  "fields",
                                  f, weft_dataset_section(ds), nfields);
        const struct weft_dataset_field *fd = weft_dataset_field(ds, f);
        if (fo->convert && !weft_dtype_valid((int)fo->dtype))
            return weft_error_set(WEFT_ERR_VALUE, "dataloader: field '%s': invalid dtype %d",
                                  fd->name, (int)fo->dtype);
        if (fo->nchannels == 0)
            continue;
        int64_t channels = fd->ndim > 0 ? fd->shape[0] : 1;
        if (fo->nchannels < 0 || fo->nchannels > WEFT_DATALOADER_MAX_CHANNELS ||
            (fo->nchannels != 1 && fo->nchannels != channels))
            return weft_error_set(WEFT_ERR_VALUE,
                                  "dataloader: field '%s' has %lld channels (its sample's "
                                  "first dim), but %d mean/std values were given; expected 1 "
                                  "or %lld",
                                  fd->name, (long long)channels, fo->nchannels,
                                  (long long)channels);
        for (int c = 0; c < fo->nchannels; c++)
            if (!(fo->std[c] > 0) || !isfinite(fo->std[c]) || !isfinite(fo->mean[c]))
                return weft_error_set(WEFT_ERR_VALUE,
                                      "dataloader: field '%s': std must be finite and > 0 and "
                                      "mean finite, got mean[%d]=%g, std[%d]=%g",
                                      fd->name, c, fo->mean[c], c, fo->std[c]);
        if (fo->convert && !weft_dtype_is_floating(fo->dtype))
            return weft_error_set(WEFT_ERR_VALUE,
                                  "dataloader: field '%s' is normalised, so its dtype must be "
                                  "floating, got %s",
                                  fd->name, weft_dtype_name(fo->dtype));
    }
    return 0;
}

static int check_transforms(const weft_dataset *ds, const struct weft_dataloader_options *o)
{
    if (!o->transforms)
        return 0;
    int f = o->transforms_field, ndim;
    if (f < 0 || f >= weft_dataset_num_fields(ds))
        return weft_error_set(WEFT_ERR_VALUE,
                              "dataloader: transforms_field %d, but dataset [%s] has %d fields", f,
                              weft_dataset_section(ds), weft_dataset_num_fields(ds));
    const struct weft_dataset_field *fd = weft_dataset_field(ds, f);
    int64_t shape[WEFT_MAX_DIMS];
    weft_transforms_in_shape(o->transforms, &ndim, shape);
    char want[96], got[96];
    if (fd->ndim != ndim || memcmp(fd->shape, shape, (size_t)ndim * sizeof *shape) != 0)
        return weft_error_set(WEFT_ERR_VALUE,
                              "dataloader: the transforms were built for samples of shape %s, "
                              "but field '%s' of dataset [%s] has shape %s",
                              weft_shape_str(ndim, shape, want, sizeof want), fd->name,
                              weft_dataset_section(ds), weft_shape_str(fd->ndim, fd->shape, got, sizeof got));
    if (o->fields[f].nchannels > 0 || (o->fields[f].convert && o->fields[f].dtype != WEFT_F32))
        return weft_error_set(WEFT_ERR_VALUE,
                              "dataloader: field '%s' has transforms, so it is float32 and "
                              "normalised by the transforms' normalize, not by its field options",
                              fd->name);
    if (weft_dataset_length(ds) >= ((int64_t)1 << 30))
        return weft_error_set(WEFT_ERR_VALUE,
                              "dataloader: transforms key their draws by sample index below 2^30, "
                              "but dataset [%s] has %lld samples",
                              weft_dataset_section(ds), (long long)weft_dataset_length(ds));
    return 0;
}

static int check_options(const weft_dataset *ds, const struct weft_dataloader_options *o)
{
    if (o->batch_size < 1)
        return weft_error_set(WEFT_ERR_VALUE,
                              "batch_size should be a positive integer value, but got "
                              "batch_size=%lld",
                              (long long)o->batch_size);
    if (o->batch_size > WEFT_DATALOADER_MAX_BATCH)
        return weft_error_set(WEFT_ERR_VALUE,
                              "batch_size should be at most %lld (2^31 - 1), but got "
                              "batch_size=%lld",
                              (long long)WEFT_DATALOADER_MAX_BATCH, (long long)o->batch_size);
    if (o->num_workers < 0 || o->num_workers > MAX_WORKERS)
        return weft_error_set(WEFT_ERR_VALUE,
                              "num_workers option should be non-negative (and at most %d); "
                              "use num_workers=0 to disable worker threads, got %d",
                              MAX_WORKERS, o->num_workers);
    if (o->num_workers > 0 && (o->prefetch_factor < 1 || o->prefetch_factor > MAX_PREFETCH))
        return weft_error_set(WEFT_ERR_VALUE,
                              "prefetch_factor should be a positive integer value (at most "
                              "%d), but got prefetch_factor=%d",
                              MAX_PREFETCH, o->prefetch_factor);
    if (o->num_replicas < 1)
        return weft_error_set(WEFT_ERR_VALUE,
                              "num_replicas should be a positive integer value (1 when not "
                              "distributed), but got num_replicas=%d",
                              o->num_replicas);
    if (o->rank < 0 || o->rank >= o->num_replicas)
        return weft_error_set(WEFT_ERR_VALUE,
                              "Invalid rank %d, rank should be in the interval [0, %d]", o->rank,
                              o->num_replicas - 1);
    if (check_field_options(ds, o) < 0)
        return weft_error_code();
    return check_transforms(ds, o);
}

static void make_plans(weft_dataloader *dl)
{
    for (int f = 0; f < dl->nfields; f++) {
        const struct weft_dataset_field *fd = weft_dataset_field(dl->ds, f);
        const struct weft_dataloader_field_options *fo = &dl->opt.fields[f];
        struct field_plan *p = &dl->plan[f];
        p->src = fd->dtype;
        p->dst = fo->convert ? fo->dtype : fo->nchannels > 0 ? WEFT_F32 : fd->dtype;
        p->nchannels = fo->nchannels;
        p->convert = p->dst != p->src || p->nchannels > 0;
        p->sample_numel = weft_dataset_sample_numel(dl->ds, f);
        int groups = p->nchannels > 1 ? p->nchannels : 1;
        p->channel_numel = p->sample_numel / groups;
        double unit = fd->dtype == WEFT_U8 ? 1.0 / 255.0 : 1.0;
        for (int c = 0; c < p->nchannels; c++) {
            p->scale[c] = unit / fo->std[c];
            p->shift[c] = -fo->mean[c] / fo->std[c];
        }
        p->ndim = fd->ndim;
        memcpy(p->shape, fd->shape, sizeof p->shape);
        if (dl->opt.transforms && f == dl->opt.transforms_field) {
            p->transform = p->convert = true;
            p->dst = WEFT_F32;
            weft_transforms_out_shape(dl->opt.transforms, p->shape);
        }
    }
}

/* ---- conversion ---------------------------------------------------------------- */

static int64_t double_to_i64(double v)
{
    if (v != v)
        return 0;
    if (v >= 9.2233720368547758e18)
        return INT64_MAX;
    if (v <= -9.2233720368547758e18)
        return INT64_MIN;
    return (int64_t)v;
}

static void load_doubles(enum weft_dtype dt, const void *src, int64_t n, double *out)
{
#define LOAD(T, expr)                                                                         \
    do {                                                                                      \
        const T *s = src;                                                                     \
        for (int64_t i = 0; i < n; i++)                                                       \
            out[i] = (expr);                                                                  \
    } while (0)
    switch (dt) {
    case WEFT_BOOL: LOAD(uint8_t, s[i] != 0); break;
    case WEFT_U8: LOAD(uint8_t, s[i]); break;
    case WEFT_I8: LOAD(int8_t, s[i]); break;
    case WEFT_I16: LOAD(int16_t, s[i]); break;
    case WEFT_I32: LOAD(int32_t, s[i]); break;
    case WEFT_I64: LOAD(int64_t, (double)s[i]); break;
    case WEFT_F16: LOAD(uint16_t, weft_f16_to_float(s[i])); break;
    case WEFT_BF16: LOAD(uint16_t, weft_bf16_to_float(s[i])); break;
    case WEFT_F32: LOAD(float, s[i]); break;
    case WEFT_F64: LOAD(double, s[i]); break;
    default: break;
    }
#undef LOAD
}

static void store_doubles(enum weft_dtype dt, const double *in, int64_t n, void *dst)
{
#define STORE(T, expr)                                                                        \
    do {                                                                                      \
        T *d = dst;                                                                           \
        for (int64_t i = 0; i < n; i++)                                                       \
            d[i] = (expr);                                                                    \
    } while (0)
    switch (dt) {
    case WEFT_BOOL: STORE(uint8_t, in[i] != 0); break;
    case WEFT_U8: STORE(uint8_t, (uint8_t)double_to_i64(in[i])); break;
    case WEFT_I8: STORE(int8_t, (int8_t)double_to_i64(in[i])); break;
    case WEFT_I16: STORE(int16_t, (int16_t)double_to_i64(in[i])); break;
    case WEFT_I32: STORE(int32_t, (int32_t)double_to_i64(in[i])); break;
    case WEFT_I64: STORE(int64_t, double_to_i64(in[i])); break;
    case WEFT_F16: STORE(uint16_t, weft_float_to_f16((float)in[i])); break;
    case WEFT_BF16: STORE(uint16_t, weft_float_to_bf16((float)in[i])); break;
    case WEFT_F32: STORE(float, (float)in[i]); break;
    case WEFT_F64: STORE(double, in[i]); break;
    default: break;
    }
#undef STORE
}

/* d[i] = s[i] * a + b: the image case, kept free of the double round trip so it vectorises
 * (gcc's -O2 cost model kept it scalar until told), and cloned for AVX2 and AVX-512: with
 * [data] workers = 0 it runs in the training thread, and the baseline SSE2 loop was 1.8% of
 * the MLP's batch-256 step. No FMA contraction: every clone rounds the product and then the
 * sum, as the baseline does, so a batch is the same bits on every machine. */
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"),
               optimize("fp-contract=off"))) static void
u8_affine_to_f32(const uint8_t *s, float *d, int64_t n, float a, float b)
{
#pragma omp simd
    for (int64_t i = 0; i < n; i++)
        d[i] = (float)s[i] * a + b;
}

/* One channel's run of n elements; scale/shift only when normalising. */
static void convert_run(const struct field_plan *p, const void *src, void *dst, int64_t n,
                        int channel)
{
    bool affine = p->nchannels > 0;
    double a = affine ? p->scale[channel] : 1.0, b = affine ? p->shift[channel] : 0.0;
    if (affine && p->src == WEFT_U8 && p->dst == WEFT_F32) {
        u8_affine_to_f32(src, dst, n, (float)a, (float)b);
        return;
    }
    size_t si = weft_dtype_size(p->src), di = weft_dtype_size(p->dst);
    double tmp[CHUNK];
    for (int64_t i = 0; i < n; i += CHUNK) {
        int64_t m = n - i < CHUNK ? n - i : CHUNK;
        load_doubles(p->src, (const char *)src + (size_t)i * si, m, tmp);
        if (affine)
            for (int64_t j = 0; j < m; j++)
                tmp[j] = tmp[j] * a + b;
        store_doubles(p->dst, tmp, m, (char *)dst + (size_t)i * di);
    }
}

static void convert_field(const struct field_plan *p, const void *src, void *dst, int64_t count)
{
    int groups = p->nchannels > 1 ? p->nchannels : 1;
    size_t si = weft_dtype_size(p->src), di = weft_dtype_size(p->dst);
    size_t run_in = (size_t)p->channel_numel * si, run_out = (size_t)p->channel_numel * di;
    const char *s = src;
    char *d = dst;
    for (int64_t k = 0; k < count; k++)
        for (int c = 0; c < groups; c++, s += run_in, d += run_out)
            convert_run(p, s, d, p->channel_numel, c);
}

/* ---- reading one batch ---------------------------------------------------------- */

struct pinned_block {
    const struct weft_backend *backend;
    size_t nbytes;
};

static void free_pinned(void *ctx, void *data)
{
    struct pinned_block *pb = ctx;
    pb->backend->host_free_pinned(pb->backend->context, data, pb->nbytes);
    free(pb);
}

/* A host tensor for a batch: pinned when the loader pins, else from the cpu allocator. */
static weft_tensor *host_tensor(weft_dataloader *dl, int ndim, const int64_t *shape,
                                enum weft_dtype dt)
{
    size_t nbytes = (size_t)weft_shape_numel(ndim, shape) * weft_dtype_size(dt);
    if (!dl->pinned || nbytes == 0)
        return weft_empty(ndim, shape, dt, WEFT_CPU);
    struct pinned_block *pb = malloc(sizeof *pb);
    if (!pb) {
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "dataloader: out of memory");
        return NULL;
    }
    void *data = dl->backend->host_alloc_pinned(dl->backend->context, nbytes);
    if (!data) {
        free(pb);
        if (weft_error_code() == WEFT_OK)
            weft_error_set(WEFT_ERR_OUT_OF_MEMORY,
                           "dataloader: could not allocate %zu bytes of pinned memory", nbytes);
        return NULL;
    }
    *pb = (struct pinned_block){dl->backend, nbytes};
    weft_tensor *t = weft_from_blob(data, ndim, shape, NULL, dt, WEFT_CPU, free_pinned, pb);
    if (!t)
        free_pinned(pb, data);
    return t;
}

static void release_all(weft_tensor **ts, int n)
{
    for (int f = 0; f < n; f++) {
        weft_tensor_release(ts[f]);
        ts[f] = NULL;
    }
}

/* Frees a staged batch that will not be handed out; its side copies must end before
 * the device may reuse their destinations. */
static void drop_staged(weft_dataloader *dl)
{
    if (dl->staged_side)
        (void)weft_wait_side(dl->opt.device);
    dl->staged_side = false;
    release_all(dl->staged_t, MAX_FIELDS);
    dl->staged = false;
}

static void *grow(struct slot *s, int f, size_t nbytes)
{
    if (s->raw_bytes[f] >= nbytes && s->raw[f])
        return s->raw[f];
    void *p = realloc(s->raw[f], nbytes ? nbytes : 1);
    if (!p)
        return NULL;
    s->raw[f] = p;
    s->raw_bytes[f] = nbytes;
    return p;
}

/* Field f of the batch at start..start+count through the transforms: each sample made
 * float32 as ToTensor does, then run with its own stream (seed, epoch, dataset index). */
static int transform_field(weft_dataloader *dl, struct slot *s, int f, const void *raw,
                           int64_t start, int64_t count)
{
    const struct field_plan *p = &dl->plan[f];
    const weft_transforms *tf = dl->opt.transforms;
    int64_t in_numel = p->sample_numel, out_numel = weft_shape_numel(p->ndim, p->shape);
    if (!s->scratch) {
        /* the sample and two images as large as the pipeline's largest (both bounded by
         * weft_transforms_from_config, so this cannot overflow; checked all the same) */
        int64_t n = 0, bytes;
        if (!weft_size_mul(weft_transforms_max_numel(tf), 2, WEFT_SIZE_MAX, &n) ||
            !weft_size_add(n, in_numel, WEFT_SIZE_MAX, &n) ||
            !weft_size_mul(n, (int64_t)sizeof *s->scratch, WEFT_SIZE_MAX, &bytes) ||
            !(s->scratch = malloc((size_t)bytes)))
            return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "dataloader: out of memory for the "
                                                          "transforms' buffers (%lld floats)",
                                  (long long)n);
    }
    float *sample = s->scratch, *work = s->scratch + in_numel;
    float *out = weft_tensor_data(s->host[f]);
    size_t si = weft_dtype_size(p->src);
    double tmp[CHUNK];
    for (int64_t k = 0; k < count; k++) {
        const char *src = (const char *)raw + (size_t)(k * in_numel) * si;
        if (p->src == WEFT_U8) {
            for (int64_t i = 0; i < in_numel; i++)
                sample[i] = (float)((const uint8_t *)src)[i] / 255.0f;
        } else {
            for (int64_t i = 0; i < in_numel; i += CHUNK) {
                int64_t m = in_numel - i < CHUNK ? in_numel - i : CHUNK;
                load_doubles(p->src, src + (size_t)i * si, m, tmp);
                for (int64_t j = 0; j < m; j++)
                    sample[i + j] = (float)tmp[j];
            }
        }
        struct weft_transform_rng rng =
            weft_transform_rng_sample(dl->opt.seed, dl->epoch, dl->perm[start + k]);
        if (weft_transforms_apply(tf, sample, out + k * out_numel, work, &rng,
                                  !dl->opt.transforms_eval) < 0)
            return weft_error_code();
    }
    return 0;
}

/* Reads batch k into s->host; negative with the thread's error set on failure. Runs in
 * a worker without the lock: only the slot and the reader's thread-safe read are used. */
static int fill_slot(weft_dataloader *dl, struct slot *s, int64_t k)
{
    static char empty_buffer[1]; /* a non-NULL address for zero-byte buffers */
    int64_t bs = dl->opt.batch_size, start = k * bs;
    int64_t count = dl->length - start < bs ? dl->length - start : bs;
    void *buffers[MAX_FIELDS];
    /* Without workers this runs on the caller's thread, maybe inside next()'s scope:
     * the slot keeps its own references. */
    weft_scope_push();
    for (int f = 0; f < dl->nfields; f++) {
        const struct field_plan *p = &dl->plan[f];
        int64_t shape[WEFT_MAX_DIMS];
        shape[0] = count;
        memcpy(shape + 1, p->shape, (size_t)p->ndim * sizeof *shape);
        weft_tensor *t = host_tensor(dl, p->ndim + 1, shape, p->dst);
        s->host[f] = weft_tensor_retain(t);
        if (!s->host[f])
            goto fail;
        int64_t raw = INT64_MAX;
        bool fits = weft_size_mul(count, (int64_t)weft_dataset_sample_bytes(dl->ds, f),
                                  WEFT_SIZE_MAX, &raw);
        buffers[f] = !fits                  ? NULL
                     : dl->plan[f].convert ? grow(s, f, (size_t)raw)
                                           : weft_tensor_data(s->host[f]);
        if (!buffers[f] && raw > 0) {
            weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "dataloader: out of memory for a batch of "
                                                   "%lld samples of field '%s' (%lld bytes)",
                           (long long)count, weft_dataset_field(dl->ds, f)->name,
                           (long long)raw);
            goto fail;
        }
        if (!buffers[f])
            buffers[f] = empty_buffer;
    }
    if (weft_dataset_read(dl->ds, count, dl->perm + start, buffers) < 0) {
        if (weft_error_code() == WEFT_OK)
            weft_error_set(WEFT_ERR_RUNTIME, "dataset reader '%s' failed without saying why",
                           weft_dataset_reader_name(dl->ds));
        goto fail;
    }
    for (int f = 0; f < dl->nfields; f++) {
        if (dl->plan[f].transform && weft_tensor_numel(s->host[f]) > 0) {
            if (transform_field(dl, s, f, buffers[f], start, count) < 0)
                goto fail;
        } else if (dl->plan[f].convert && weft_tensor_numel(s->host[f]) > 0) {
            convert_field(&dl->plan[f], buffers[f], weft_tensor_data(s->host[f]), count);
        }
    }
    weft_scope_pop();
    return 0;
fail:
    release_all(s->host, dl->nfields);
    weft_scope_pop();
    return weft_error_code() != WEFT_OK ? weft_error_code() : WEFT_ERR_RUNTIME;
}

/* Moves the calling thread's error into f and clears it. */
static void capture_error(struct failure *f, int rc)
{
    f->code = weft_error_code() != WEFT_OK ? weft_error_code() : (rc < 0 ? rc : WEFT_ERR_RUNTIME);
    snprintf(f->message, sizeof f->message, "%s", weft_error_message());
    weft_error_clear();
}

/* ---- workers ------------------------------------------------------------------- */

/* Caller holds the lock. */
static bool can_issue(const weft_dataloader *dl)
{
    return dl->active && dl->next_issue < dl->nbatches &&
           dl->slots[dl->next_issue % dl->nslots].state == SLOT_FREE;
}

static void *worker_main(void *arg)
{
    weft_dataloader *dl = arg;
    pthread_mutex_lock(&dl->lock);
    for (;;) {
        while (!dl->stop && !can_issue(dl))
            pthread_cond_wait(&dl->work, &dl->lock);
        if (dl->stop)
            break;
        int64_t k = dl->next_issue++;
        struct slot *s = &dl->slots[k % dl->nslots];
        s->state = SLOT_LOADING;
        s->batch = k;
        dl->nloading++;
        pthread_mutex_unlock(&dl->lock);

        int rc = fill_slot(dl, s, k);
        if (rc < 0)
            capture_error(&s->failure, rc);

        pthread_mutex_lock(&dl->lock);
        s->state = rc < 0 ? SLOT_FAILED : SLOT_READY;
        dl->nloading--;
        pthread_cond_broadcast(&dl->ready);
    }
    pthread_mutex_unlock(&dl->lock);
    return NULL;
}

/* Stops the workers, joins them and frees what the slots hold. */
static void stop_workers(weft_dataloader *dl)
{
    pthread_mutex_lock(&dl->lock);
    dl->stop = true;
    dl->active = false;
    pthread_cond_broadcast(&dl->work);
    pthread_mutex_unlock(&dl->lock);
    for (int i = 0; i < dl->nthreads; i++)
        pthread_join(dl->threads[i], NULL);
    dl->nthreads = 0;
}

/* ---- the loader ---------------------------------------------------------------- */

static int pick_backend(weft_dataloader *dl)
{
    weft_device dev = dl->opt.device;
    dl->backend = weft_backend_get(dev.type);
    if (!dl->backend)
        return weft_error_code();
    int count = weft_device_count(dev.type);
    if (dev.index < 0 || dev.index >= count) {
        char name[32];
        return weft_error_set(WEFT_ERR_DEVICE,
                              "dataloader: device %s is not available (%d %s device(s))",
                              weft_device_str(dev, name, sizeof name), count,
                              weft_device_type_name(dev.type));
    }
    dl->on_device = dev.type != WEFT_DEVICE_CPU;
    dl->pinned = dl->opt.pin_memory && dl->on_device &&
                 WEFT_VTABLE_HAS(dl->backend, host_alloc_pinned) &&
                 WEFT_VTABLE_HAS(dl->backend, host_free_pinned);
    /* PyTorch's UserWarning, once per process as Python's warnings filter shows it: a
     * setting that does nothing should say so rather than be accepted silently. */
    static int warned;
    if (dl->opt.pin_memory && !dl->pinned && !__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
        fprintf(stderr, "weft: UserWarning: 'pin_memory' argument is set as true but no "
                        "accelerator is found, then device pinned memory won't be used.\n");
    return 0;
}

static int start_workers(weft_dataloader *dl)
{
    int n = dl->opt.num_workers;
    if (n == 0)
        return 0;
    dl->threads = calloc((size_t)n, sizeof *dl->threads);
    if (!dl->threads)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "dataloader: out of memory");
    for (int i = 0; i < n; i++) {
        int err = pthread_create(&dl->threads[i], NULL, worker_main, dl);
        if (err != 0)
            return weft_error_set(WEFT_ERR_RUNTIME,
                                  "dataloader: could not start worker thread %d of %d: %s", i,
                                  n, strerror(err));
        dl->nthreads++;
    }
    return 0;
}

weft_dataloader *weft_dataloader_new(const weft_dataset *ds,
                                     const struct weft_dataloader_options *options)
{
    if (!ds || !options) {
        weft_error_set(WEFT_ERR_VALUE, "weft_dataloader_new: dataset and options must be set");
        return NULL;
    }
    if (check_options(ds, options) < 0)
        return NULL;
    weft_dataloader *dl = calloc(1, sizeof *dl);
    if (!dl) {
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "dataloader: out of memory");
        return NULL;
    }
    dl->ds = ds;
    dl->opt = *options;
    weft_transforms_retain(dl->opt.transforms);
    dl->nfields = weft_dataset_num_fields(ds);
    dl->nsamples = weft_dataset_length(ds);
    /* DistributedSampler's num_samples = ceil(n / R) with drop_last=False. */
    int64_t replicas = options->num_replicas;
    dl->length = dl->nsamples / replicas + (dl->nsamples % replicas != 0);
    int64_t bs = options->batch_size;
    dl->nbatches = options->drop_last ? dl->length / bs : (dl->length + bs - 1) / bs;
    dl->nslots = options->num_workers > 0 ? options->num_workers * options->prefetch_factor : 1;
    make_plans(dl);
    pthread_mutex_init(&dl->lock, NULL);
    pthread_cond_init(&dl->work, NULL);
    pthread_cond_init(&dl->ready, NULL);
    dl->order = malloc((size_t)(dl->nsamples ? dl->nsamples : 1) * sizeof *dl->order);
    dl->perm = replicas == 1 ? dl->order
                             : malloc((size_t)(dl->length ? dl->length : 1) * sizeof *dl->perm);
    dl->slots = calloc((size_t)dl->nslots, sizeof *dl->slots);
    if (!dl->order || !dl->perm || !dl->slots) {
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "dataloader: out of memory for %lld samples",
                       (long long)dl->nsamples);
        weft_dataloader_free(dl);
        return NULL;
    }
    if (pick_backend(dl) < 0 || start_workers(dl) < 0) {
        weft_dataloader_free(dl);
        return NULL;
    }
    return dl;
}

void weft_dataloader_free(weft_dataloader *dl)
{
    if (!dl)
        return;
    stop_workers(dl);
    for (int i = 0; i < dl->nslots && dl->slots; i++) {
        release_all(dl->slots[i].host, MAX_FIELDS);
        for (int f = 0; f < MAX_FIELDS; f++)
            free(dl->slots[i].raw[f]);
        free(dl->slots[i].scratch);
    }
    weft_transforms_release(dl->opt.transforms);
    drop_staged(dl);
    pthread_cond_destroy(&dl->ready);
    pthread_cond_destroy(&dl->work);
    pthread_mutex_destroy(&dl->lock);
    free(dl->threads);
    free(dl->slots);
    if (dl->perm != dl->order)
        free(dl->perm);
    free(dl->order);
    free(dl);
}

/* The epoch's order (Fisher-Yates driven by Philox, as the header spells out), then this
 * rank's shard of it into perm: the one place that decides which samples batch k holds,
 * whoever reads it (the caller or a worker). */
static void make_order(weft_dataloader *dl, int64_t epoch)
{
    int64_t n = dl->nsamples;
    int64_t *order = dl->order;
    for (int64_t i = 0; i < n; i++)
        order[i] = i;
    if (dl->opt.shuffle) {
        uint64_t base = (uint64_t)epoch << 40;
        for (int64_t i = n - 1; i > 0; i--) {
            uint64_t r = weft_philox_u64(dl->opt.seed, base, (uint64_t)(n - 1 - i));
            int64_t j = (int64_t)(r % (uint64_t)(i + 1));
            int64_t t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
    }
    if (dl->perm == order)
        return;
    /* DistributedSampler: the order padded to length * R by repeating it from its start
     * (position p holds order[p % n], however many times the padding wraps), then every
     * R-th position from `rank`. */
    int64_t replicas = dl->opt.num_replicas, p = dl->opt.rank;
    for (int64_t i = 0; i < dl->length; i++, p += replicas)
        dl->perm[i] = order[p % n];
}

int weft_dataloader_epoch(weft_dataloader *dl, int64_t epoch)
{
    if (!dl)
        return weft_error_set(WEFT_ERR_VALUE, "weft_dataloader_epoch: loader is NULL");
    if (epoch < 0 || epoch >= ((int64_t)1 << 24))
        return weft_error_set(WEFT_ERR_VALUE,
                              "weft_dataloader_epoch: epoch must be in [0, 16777216), got %lld",
                              (long long)epoch);
    /* Quiesce: no new batches, and wait for those being read (bounded by one each). */
    pthread_mutex_lock(&dl->lock);
    dl->active = false;
    while (dl->nloading > 0)
        pthread_cond_wait(&dl->ready, &dl->lock);
    for (int i = 0; i < dl->nslots; i++) {
        release_all(dl->slots[i].host, MAX_FIELDS);
        dl->slots[i].state = SLOT_FREE;
    }
    pthread_mutex_unlock(&dl->lock);
    drop_staged(dl);

    make_order(dl, epoch); /* no worker reads perm (or epoch) while inactive */
    dl->epoch = epoch;

    pthread_mutex_lock(&dl->lock);
    dl->next_issue = dl->next_consume = 0;
    dl->failed.code = WEFT_OK;
    dl->started = true;
    dl->active = true;
    pthread_cond_broadcast(&dl->work);
    pthread_mutex_unlock(&dl->lock);
    return 0;
}

/* Host tensors of batch k into host[]: read here without workers, else waited for. */
static int take_batch(weft_dataloader *dl, int64_t k, weft_tensor **host)
{
    if (dl->nthreads == 0) {
        struct slot *s = &dl->slots[0];
        int rc = fill_slot(dl, s, k);
        if (rc < 0) {
            capture_error(&dl->failed, rc);
            return dl->failed.code;
        }
        memcpy(host, s->host, sizeof s->host);
        memset(s->host, 0, sizeof s->host);
        return 0;
    }
    struct slot *s = &dl->slots[k % dl->nslots];
    pthread_mutex_lock(&dl->lock);
    while (!(s->batch == k && (s->state == SLOT_READY || s->state == SLOT_FAILED)))
        pthread_cond_wait(&dl->ready, &dl->lock);
    int rc = 0;
    if (s->state == SLOT_FAILED) {
        dl->failed = s->failure;
        dl->active = false; /* the epoch ends here */
        rc = dl->failed.code;
    } else {
        memcpy(host, s->host, sizeof s->host);
        memset(s->host, 0, sizeof s->host);
    }
    s->state = SLOT_FREE;
    pthread_cond_broadcast(&dl->work);
    pthread_mutex_unlock(&dl->lock);
    return rc;
}

/* Turns host tensors into the tensors handed out (owned references in out[]): the same
 * tensors on the cpu, else device copies, non-blocking from pinned memory; on the
 * device's side queue when `side` and the backend has one (*used_side then says so).
 * Consumes host[]. Caller has a scope open. */
static int to_device(weft_dataloader *dl, weft_tensor **host, weft_tensor **out, bool side,
                     bool *used_side)
{
    if (!dl->on_device) {
        memcpy(out, host, (size_t)dl->nfields * sizeof *out);
        return 0;
    }
    int rc = 0;
    for (int f = 0; f < dl->nfields; f++) {
        weft_tensor *h = host[f];
        weft_tensor *d = rc < 0 ? NULL : weft_empty(h->ndim, h->shape, h->dtype, dl->opt.device);
        int queued = rc == 0 && d && side && dl->pinned ? weft_copy_side(d, h) : 0;
        if (queued > 0)
            *used_side = true;
        if (rc == 0 && (!d || queued < 0 ||
                        (queued == 0 && weft_copy_nonblocking_(d, h, dl->pinned) < 0)))
            rc = weft_error_code() != WEFT_OK ? weft_error_code() : WEFT_ERR_DEVICE;
        out[f] = rc < 0 ? NULL : weft_tensor_retain(d);
        weft_tensor_release(h); /* a pinned block outlives its pending copy */
        host[f] = NULL;
    }
    if (rc < 0)
        release_all(out, dl->nfields);
    return rc;
}

/* Double buffering: when batch next_consume is already read, its copy is issued now,
 * while the caller works on the batch it is about to get. Caller has a scope open. */
static void stage_next(weft_dataloader *dl)
{
    int64_t k = dl->next_consume;
    if (!dl->on_device || dl->nthreads == 0 || k >= dl->nbatches)
        return;
    struct slot *s = &dl->slots[k % dl->nslots];
    weft_tensor *host[MAX_FIELDS] = {0};
    pthread_mutex_lock(&dl->lock);
    bool ready = s->batch == k && s->state == SLOT_READY;
    if (ready) {
        memcpy(host, s->host, sizeof s->host);
        memset(s->host, 0, sizeof s->host);
        s->state = SLOT_FREE;
        pthread_cond_broadcast(&dl->work);
    }
    pthread_mutex_unlock(&dl->lock);
    if (!ready)
        return;
    bool side = false;
    int rc = to_device(dl, host, dl->staged_t, true, &side);
    dl->staged_side = side;
    if (rc < 0) {
        /* Reported by the next call, which would have met it anyway. */
        capture_error(&dl->failed, rc);
        pthread_mutex_lock(&dl->lock);
        dl->active = false;
        pthread_mutex_unlock(&dl->lock);
        return;
    }
    dl->staged = true;
}

int weft_dataloader_next(weft_dataloader *dl, weft_tensor **fields)
{
    if (!dl || !fields)
        return weft_error_set(WEFT_ERR_VALUE, "weft_dataloader_next: loader and fields must be "
                                              "set");
    if (!dl->started && weft_dataloader_epoch(dl, 0) < 0)
        return weft_error_code();
    if (dl->failed.code != WEFT_OK)
        return weft_error_set(dl->failed.code, "%s", dl->failed.message);
    if (dl->next_consume >= dl->nbatches)
        return 0;
    weft_tensor *out[MAX_FIELDS] = {0};
    int rc = 0;
    weft_scope_push();
    if (dl->staged) {
        /* The device's work from now on (the caller's step) must see the copies. */
        if (dl->staged_side && weft_wait_side(dl->opt.device) < 0)
            rc = weft_error_code();
        dl->staged_side = false;
        memcpy(out, dl->staged_t, sizeof out);
        memset(dl->staged_t, 0, sizeof dl->staged_t);
        dl->staged = false;
    } else {
        weft_tensor *host[MAX_FIELDS] = {0};
        rc = take_batch(dl, dl->next_consume, host);
        if (rc == 0)
            rc = to_device(dl, host, out, false, &(bool){false});
        else if (dl->failed.code == WEFT_OK)
            capture_error(&dl->failed, rc);
    }
    if (rc == 0) {
        dl->next_consume++;
        stage_next(dl);
    }
    weft_scope_pop();
    if (rc < 0) {
        if (dl->failed.code == WEFT_OK)
            capture_error(&dl->failed, rc);
        return weft_error_set(dl->failed.code, "%s", dl->failed.message);
    }
    for (int f = 0; f < dl->nfields; f++)
        fields[f] = weft_autorelease(out[f]);
    return 1;
}

int64_t weft_dataloader_len(const weft_dataloader *dl)
{
    return dl ? dl->nbatches : -1;
}

int weft_dataloader_num_fields(const weft_dataloader *dl)
{
    return dl ? dl->nfields : 0;
}

const struct weft_dataloader_options *weft_dataloader_options(const weft_dataloader *dl)
{
    return dl ? &dl->opt : NULL;
}

/* ---- configuration ------------------------------------------------------------- */

/* "0.485, 0.456, 0.406" into v; the count, or negative with a config error. */
static int parse_numbers(struct weft_config *cfg, const char *section, const char *key,
                         const char *text, double *v)
{
    int n = 0;
    const char *p = text;
    for (;;) {
        while (isspace((unsigned char)*p))
            p++;
        char *end;
        errno = 0;
        double x = strtod(p, &end);
        if (end == p || errno == ERANGE || !isfinite(x) || n == WEFT_DATALOADER_MAX_CHANNELS)
            return weft_error_set(WEFT_ERR_CONFIG,
                                  "%s: [%s] %s = '%s': expected a number or up to %d "
                                  "comma-separated numbers (one per channel)",
                                  weft_config_name(cfg), section, key, text,
                                  WEFT_DATALOADER_MAX_CHANNELS);
        v[n++] = x;
        p = end;
        while (isspace((unsigned char)*p))
            p++;
        if (*p == '\0')
            return n;
        if (*p != ',')
            return weft_error_set(WEFT_ERR_CONFIG,
                                  "%s: [%s] %s = '%s': expected a number or up to %d "
                                  "comma-separated numbers (one per channel)",
                                  weft_config_name(cfg), section, key, text,
                                  WEFT_DATALOADER_MAX_CHANNELS);
        p++;
    }
}

/* The field mean/std apply to: "image", else the first that is not class labels. */
static int normalised_field(const weft_dataset *ds)
{
    int f = weft_dataset_field_index(ds, "image");
    if (f >= 0)
        return f;
    for (f = 0; f < weft_dataset_num_fields(ds); f++)
        if (weft_dataset_field(ds, f)->num_classes == 0)
            return f;
    return -1;
}

static int config_normalize(const weft_dataset *ds, struct weft_config *cfg, const char *section,
                            struct weft_dataloader_options *o)
{
    const char *file = weft_config_name(cfg);
    const char *mean = weft_config_string(cfg, section, "mean", NULL);
    const char *std = weft_config_string(cfg, section, "std", NULL);
    if (!mean && !std)
        return 0;
    if (!mean || !std)
        return weft_error_set(WEFT_ERR_CONFIG, "%s: [%s] %s is set but %s is not: give both",
                              file, section, mean ? "mean" : "std", mean ? "std" : "mean");
    int f = normalised_field(ds);
    if (f < 0)
        return weft_error_set(WEFT_ERR_CONFIG,
                              "%s: [%s] mean = '%s': dataset [%s] has no field to normalise "
                              "(no 'image' field and every field holds class labels)",
                              file, section, mean, weft_dataset_section(ds));
    struct weft_dataloader_field_options *fo = &o->fields[f];
    int nm = parse_numbers(cfg, section, "mean", mean, fo->mean);
    if (nm < 0)
        return nm;
    int ns = parse_numbers(cfg, section, "std", std, fo->std);
    if (ns < 0)
        return ns;
    if (nm != ns)
        return weft_error_set(WEFT_ERR_CONFIG,
                              "%s: [%s] mean has %d value(s) but std has %d: give one per "
                              "channel for both",
                              file, section, nm, ns);
    for (int c = 0; c < ns; c++)
        if (!(fo->std[c] > 0))
            return weft_error_set(WEFT_ERR_CONFIG, "%s: [%s] std = '%s': every value must be "
                                                   "> 0",
                                  file, section, std);
    const struct weft_dataset_field *fd = weft_dataset_field(ds, f);
    int64_t channels = fd->ndim > 0 ? fd->shape[0] : 1;
    if (nm != 1 && nm != channels) {
        char shape[96];
        return weft_error_set(WEFT_ERR_CONFIG,
                              "%s: [%s] mean = '%s': %d values for field '%s' of sample shape "
                              "%s; expected 1 or %lld (one per channel)",
                              file, section, mean, nm, fd->name,
                              weft_shape_str(fd->ndim, fd->shape, shape, sizeof shape),
                              (long long)channels);
    }
    fo->nchannels = nm;
    return 0;
}

/* `transforms` and their keys, for the field mean/std would normalise. */
static int config_transforms(const weft_dataset *ds, struct weft_config *cfg,
                             const char *section, struct weft_dataloader_options *o)
{
    if (!weft_config_has(cfg, section, "transforms"))
        return 0;
    int f = normalised_field(ds);
    if (f < 0)
        return weft_error_set(WEFT_ERR_CONFIG,
                              "%s: [%s] transforms: dataset [%s] has no field to transform (no "
                              "'image' field and every field holds class labels)",
                              weft_config_name(cfg), section, weft_dataset_section(ds));
    const struct weft_dataset_field *fd = weft_dataset_field(ds, f);
    o->transforms = weft_transforms_from_config(cfg, section, fd->ndim, fd->shape);
    o->transforms_field = f;
    return o->transforms ? 0 : weft_error_code();
}

/* An integer key within [lo, hi]; the error quotes the value. */
static int config_range(struct weft_config *cfg, const char *section, const char *key,
                        int64_t def, int64_t lo, int64_t hi, const char *what, int64_t *out)
{
    if (weft_config_int(cfg, section, key, def, out) < 0)
        return weft_error_code();
    if (*out >= lo && *out <= hi)
        return 0;
    return weft_error_set(WEFT_ERR_CONFIG, "%s: [%s] %s = '%s': expected %s", weft_config_name(cfg),
                          section, key, weft_config_string(cfg, section, key, ""), what);
}

weft_dataloader *weft_dataloader_from_config(const weft_dataset *ds, struct weft_config *cfg,
                                             const char *section, weft_device device)
{
    if (!ds || !cfg || !section) {
        weft_error_set(WEFT_ERR_VALUE,
                       "weft_dataloader_from_config: dataset, config and section must be set");
        return NULL;
    }
    struct weft_dataloader_options o = weft_dataloader_options_default();
    int64_t bs, workers, prefetch, seed;
    if (config_range(cfg, section, "batch_size", 1, 1, WEFT_DATALOADER_MAX_BATCH,
                     "a positive integer up to 2147483647 (2^31 - 1)", &bs) < 0 ||
        config_range(cfg, section, "workers", 0, 0, MAX_WORKERS,
                     "a number of worker threads from 0 to 256", &workers) < 0 ||
        config_range(cfg, section, "prefetch", 2, 1, MAX_PREFETCH,
                     "a positive integer up to 1024 (batches in flight per worker)",
                     &prefetch) < 0 ||
        config_range(cfg, section, "seed", 0, 0, INT64_MAX, "a non-negative integer", &seed) <
            0 ||
        weft_config_bool(cfg, section, "shuffle", false, &o.shuffle) < 0 ||
        weft_config_bool(cfg, section, "drop_last", false, &o.drop_last) < 0 ||
        weft_config_bool(cfg, section, "pin_memory", false, &o.pin_memory) < 0 ||
        config_transforms(ds, cfg, section, &o) < 0 ||
        (!o.transforms && config_normalize(ds, cfg, section, &o) < 0))
        return NULL;
    o.batch_size = bs;
    o.num_workers = (int)workers;
    o.prefetch_factor = (int)prefetch;
    o.seed = (uint64_t)seed;
    o.device = device;
    for (int f = 0; f < weft_dataset_num_fields(ds); f++)
        if (weft_dataset_field(ds, f)->num_classes > 0) {
            o.fields[f].convert = true;
            o.fields[f].dtype = WEFT_I64;
        }
    weft_dataloader *dl = weft_dataloader_new(ds, &o);
    weft_transforms_release(o.transforms); /* the loader holds its own */
    return dl;
}

int weft_dataloader_queue_depth(weft_dataloader *dl)
{
    if (!dl || dl->nthreads == 0)
        return 0;
    int ready = 0;
    pthread_mutex_lock(&dl->lock);
    for (int i = 0; i < dl->nslots; i++)
        ready += dl->slots[i].state == SLOT_READY;
    pthread_mutex_unlock(&dl->lock);
    return ready;
}
