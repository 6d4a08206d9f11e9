/* tests/test_tensor.c: references, autorelease scopes, sticky errors, the properties of a
 * tensor header, and the cpu allocator's cache. */
#include <pthread.h>
#include <string.h>

#include <weft/backend.h>

#include "testutil.h"

TestSuite(tensor, .init = tu_setup, .fini = tu_teardown);

#define SHAPE(...) ((const int64_t[]){__VA_ARGS__})

static int deleted;
static void count_delete(void *ctx, void *data)
{
    (void)ctx;
    (void)data;
    deleted++;
}

/* A tensor whose storage reports its death through `deleted`. */
static weft_tensor *watched(float *data, int64_t n)
{
    return weft_from_blob(data, 1, &n, NULL, WEFT_F32, WEFT_CPU, count_delete, NULL);
}

Test(tensor, new_tensors_hold_one_reference)
{
    weft_tensor *t = weft_empty(1, SHAPE(3), WEFT_F32, WEFT_CPU);
    cr_assert_eq(t->refcount, 1);
    cr_assert_eq(weft_tensor_retain(t), t);
    cr_assert_eq(t->refcount, 2);
    weft_tensor_release(t);
    cr_assert_eq(t->refcount, 1);
    weft_tensor_release(t);
    weft_tensor_retain(NULL);
    weft_tensor_release(NULL);
}

Test(tensor, scope_pop_releases_what_was_created_inside)
{
    float data[4] = {0};
    deleted = 0;
    weft_scope_push();
    weft_tensor *t = watched(data, 4);
    weft_tensor *v = weft_view(t, 2, SHAPE(2, 2));
    cr_assert_not_null(v);
    cr_assert_eq(weft_scope_depth(), 1);
    weft_scope_pop();
    cr_assert_eq(deleted, 1, "tensor, view and storage are gone");
    cr_assert_eq(weft_scope_depth(), 0);
}

Test(tensor, retained_tensors_survive_their_scope)
{
    float data[4] = {0};
    deleted = 0;
    weft_scope_push();
    weft_tensor *keep = weft_tensor_retain(weft_view(watched(data, 4), 2, SHAPE(2, 2)));
    weft_scope_pop();
    cr_assert_eq(deleted, 0);
    cr_assert_eq(keep->refcount, 1);
    weft_tensor_release(keep);
    cr_assert_eq(deleted, 1);
}

Test(tensor, scopes_nest)
{
    float a[2] = {0}, b[2] = {0};
    deleted = 0;
    weft_scope_push();
    watched(a, 2);
    weft_scope_push();
    watched(b, 2);
    cr_assert_eq(weft_scope_depth(), 2);
    weft_scope_pop();
    cr_assert_eq(deleted, 1, "only the inner scope's tensor is released");
    weft_scope_pop();
    cr_assert_eq(deleted, 2);
}

Test(tensor, errors_are_sticky_and_null_propagates_through_a_chain)
{
    weft_scope_push();
    weft_tensor *a = weft_arange(0, 6, 1, WEFT_F32, WEFT_CPU);
    /* The first failure is the one reported; later calls see NULL and add nothing. */
    weft_tensor *r = weft_contiguous(weft_t(weft_view(weft_transpose(weft_view(a, 2, SHAPE(4, 2)),
                                                                      0, 1),
                                                       1, SHAPE(-1))));
    cr_assert_null(r);
    tu_assert_error(WEFT_ERR_RUNTIME, "shape '[4, 2]' is invalid for input of size 6");
    /* A later, different failure does not overwrite a pending one. */
    cr_assert_null(weft_select(a, 0, 10));
    cr_assert_null(weft_view(a, 1, SHAPE(7)));
    tu_assert_error(WEFT_ERR_INDEX, "select(): index 10 out of range for tensor of size [6] at dimension 0");
    weft_scope_pop();
}

Test(tensor, contiguity_follows_pytorch)
{
    weft_scope_push();
    weft_tensor *base = weft_zeros(1, SHAPE(24), WEFT_F32, WEFT_CPU);
    struct {
        int ndim;
        int64_t shape[3], stride[3];
        bool contiguous;
    } cases[] = {
        {3, {2, 3, 4}, {12, 4, 1}, true},
        {3, {2, 1, 3}, {3, 999, 1}, true},   /* size-1 dims do not count */
        {3, {1, 1, 1}, {7, 8, 9}, true},
        {2, {3, 2}, {1, 3}, false},          /* transposed */
        {2, {2, 3}, {4, 1}, false},          /* rows with a gap */
        {2, {2, 3}, {3, 0}, false},          /* expanded */
        {1, {4}, {2}, false},
        {0, {0}, {0}, true},                 /* 0-dim */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        weft_tensor *t = weft_as_strided(base, cases[i].ndim, cases[i].shape, cases[i].stride, 0);
        cr_assert_not_null(t, "case %zu: %s", i, weft_error_message());
        cr_assert_eq(weft_tensor_is_contiguous(t), cases[i].contiguous, "case %zu", i);
    }
    weft_scope_pop();
}

Test(tensor, empty_tensors_are_contiguous_whatever_their_strides)
{
    weft_scope_push();
    weft_tensor *base = weft_zeros(1, SHAPE(4), WEFT_F32, WEFT_CPU);
    weft_tensor *t = weft_as_strided(base, 2, SHAPE(0, 3), SHAPE(7, 5), 0);
    cr_assert(weft_tensor_is_contiguous(t));
    weft_scope_pop();
}

Test(tensor, sizes_strides_and_data_pointer)
{
    weft_scope_push();
    weft_tensor *t = weft_zeros(3, SHAPE(2, 3, 4), WEFT_F64, WEFT_CPU);
    cr_assert_eq(weft_tensor_numel(t), 24);
    cr_assert_eq(weft_tensor_size(t, -1), 4);
    cr_assert_eq(weft_tensor_stride(t, 0), 12);
    cr_assert_eq(weft_tensor_itemsize(t), 8);
    cr_assert_eq(weft_tensor_size(t, 3), -1);
    tu_assert_error(WEFT_ERR_INDEX, "Dimension out of range (expected to be in range of [-3, 2], but got 3)");
    weft_tensor *s = weft_select(t, 0, 1);
    cr_assert_eq((char *)weft_tensor_data(s) - (char *)weft_tensor_data(t), 12 * 8);
    cr_assert_null(weft_tensor_data(weft_narrow(t, 0, 0, 0)), "no elements: no data pointer");
    weft_tensor *scalar = weft_scalar_tensor(1, WEFT_F32, WEFT_CPU);
    cr_assert_eq(weft_tensor_size(scalar, 0), 1);
    cr_assert_eq(weft_tensor_numel(scalar), 1);
    char buf[64];
    cr_assert_str_eq(weft_shape_str(3, t->shape, buf, sizeof buf), "[2, 3, 4]");
    weft_scope_pop();
}

Test(tensor, in_place_writes_bump_the_shared_version)
{
    weft_scope_push();
    weft_tensor *t = weft_zeros(1, SHAPE(4), WEFT_F32, WEFT_CPU);
    weft_tensor *d = weft_detach(t);
    uint64_t v = weft_tensor_version(t);
    weft_tensor_bump_version(d);
    cr_assert_eq(weft_tensor_version(t), v + 1);
    weft_copy_(weft_narrow(t, 0, 1, 2), weft_ones(1, SHAPE(2), WEFT_F32, WEFT_CPU));
    cr_assert_eq(weft_tensor_version(d), v + 2);
    weft_scope_pop();
}

static struct weft_memory_stats cpu_stats(void)
{
    struct weft_memory_stats s = {.struct_size = sizeof s};
    cr_assert_eq(weft_memory_stats(WEFT_CPU, &s), 0, "%s", weft_error_message());
    return s;
}

Test(tensor, the_cpu_allocator_reuses_freed_blocks)
{
    weft_empty_cache(WEFT_CPU);
    struct weft_memory_stats s0 = cpu_stats();
    weft_tensor *a = weft_empty(1, SHAPE(1000), WEFT_F32, WEFT_CPU);
    void *first = a->storage->data;
    struct weft_memory_stats s1 = cpu_stats();
    cr_assert_eq(s1.num_allocs, s0.num_allocs + 1);
    cr_assert_geq(s1.allocated_bytes, s0.allocated_bytes + 4000);
    weft_tensor_release(a);
    struct weft_memory_stats s2 = cpu_stats();
    cr_assert_eq(s2.num_frees, s1.num_frees + 1);
    cr_assert_eq(s2.allocated_bytes, s0.allocated_bytes);
    cr_assert_eq(s2.reserved_bytes, s1.reserved_bytes, "the block stays cached");
    /* The same size class comes back from the cache: same block, no new memory. */
    weft_tensor *b = weft_empty(1, SHAPE(995), WEFT_F32, WEFT_CPU);
    struct weft_memory_stats s3 = cpu_stats();
    cr_assert_eq(b->storage->data, first);
    cr_assert_eq(s3.num_cache_hits, s2.num_cache_hits + 1);
    cr_assert_eq(s3.reserved_bytes, s2.reserved_bytes);
    cr_assert_eq(((uintptr_t)b->storage->data) % 64, 0, "64-byte alignment");
    weft_tensor_release(b);
    weft_empty_cache(WEFT_CPU);
    struct weft_memory_stats s4 = cpu_stats();
    cr_assert_eq(s4.reserved_bytes, s4.allocated_bytes, "empty_cache returns every cached block");
    cr_assert_geq(s4.peak_allocated_bytes, s1.allocated_bytes);
    cr_assert_geq(s4.peak_reserved_bytes, s1.reserved_bytes);
}

/* Requests of 2 MiB and more come from segments (plugins/cpu/allocator.c): a freed block serves
 * smaller requests of other sizes, split, and its pieces merge back when freed, with no
 * new memory from the system; a free list per size class would map new blocks for both. */
Test(tensor, the_cpu_allocator_splits_and_merges_large_blocks)
{
    const int64_t mib = 262144; /* float32 elements */
    weft_empty_cache(WEFT_CPU);
    struct weft_memory_stats s0 = cpu_stats();
    weft_tensor *a = weft_empty(1, SHAPE(48 * mib), WEFT_F32, WEFT_CPU);
    cr_assert_not_null(a, "%s", weft_error_message());
    void *front = a->storage->data;
    weft_tensor_release(a);
    struct weft_memory_stats s1 = cpu_stats();
    cr_assert_geq(s1.reserved_bytes, s0.reserved_bytes + 48 * 1048576);
    weft_tensor *b = weft_empty(1, SHAPE(12 * mib), WEFT_F32, WEFT_CPU);
    weft_tensor *c = weft_empty(1, SHAPE(36 * mib), WEFT_F32, WEFT_CPU);
    cr_assert(b && c, "%s", weft_error_message());
    struct weft_memory_stats s2 = cpu_stats();
    cr_assert_eq(s2.reserved_bytes, s1.reserved_bytes, "12 + 36 MiB from the cached 48 MiB");
    cr_assert_eq(s2.num_cache_hits, s1.num_cache_hits + 2);
    cr_assert_eq(b->storage->data, front, "best fit takes the front of the block");
    cr_assert_eq(((uintptr_t)c->storage->data) % 64, 0, "64-byte alignment");
    weft_tensor_release(b);
    weft_tensor_release(c);
    weft_tensor *d = weft_empty(1, SHAPE(48 * mib), WEFT_F32, WEFT_CPU);
    cr_assert_not_null(d, "%s", weft_error_message());
    struct weft_memory_stats s3 = cpu_stats();
    cr_assert_eq(s3.reserved_bytes, s1.reserved_bytes, "the pieces merged back into 48 MiB");
    cr_assert_eq(d->storage->data, front);
    cr_assert_eq(s3.allocated_bytes, s0.allocated_bytes + 48 * 1048576);
    weft_tensor_release(d);
    cr_assert_eq(cpu_stats().allocated_bytes, s0.allocated_bytes);
    weft_empty_cache(WEFT_CPU);
    struct weft_memory_stats s4 = cpu_stats();
    cr_assert_eq(s4.reserved_bytes, s0.reserved_bytes, "empty_cache returns the segment");
    cr_assert_geq(s4.peak_reserved_bytes, s1.reserved_bytes);
}

/* Below 2 MiB a request gets the block of its size freed last, still in cache, not the
 * lowest address as the segments' best fit would (it made the MNIST CNN's 1.6 MB
 * activations 6% slower). */
Test(tensor, the_cpu_allocator_reuses_the_block_freed_last_below_2_mib)
{
    const int64_t n = 1605632 / 4; /* [64, 8, 28, 28] float32 */
    weft_empty_cache(WEFT_CPU);
    weft_tensor *a = weft_empty(1, SHAPE(n), WEFT_F32, WEFT_CPU);
    weft_tensor *b = weft_empty(1, SHAPE(n), WEFT_F32, WEFT_CPU);
    cr_assert(a && b, "%s", weft_error_message());
    void *first = a->storage->data, *second = b->storage->data;
    weft_tensor_release(a);
    weft_tensor_release(b);
    struct weft_memory_stats s0 = cpu_stats();
    weft_tensor *c = weft_empty(1, SHAPE(n), WEFT_F32, WEFT_CPU);
    cr_assert_not_null(c, "%s", weft_error_message());
    cr_assert_eq(c->storage->data, second, "the block freed last (%p), not %p",
                 second, first);
    cr_assert_eq(cpu_stats().reserved_bytes, s0.reserved_bytes, "from the cache");
    weft_tensor_release(c);
    weft_empty_cache(WEFT_CPU);
}

/* Small blocks wait on the freeing thread's own lists (plugins/cpu/allocator.c); the
 * statistics must not show it. */
static void *alloc_and_free_small(void *arg)
{
    weft_tensor **handed = arg; /* tensors made on the main thread, released here */
    for (int i = 0; i < 20; i++) {
        weft_tensor *t = weft_empty(1, SHAPE(1 + i), WEFT_F32, WEFT_CPU);
        weft_tensor_release(t);
    }
    for (int i = 0; handed && handed[i]; i++)
        weft_tensor_release(handed[i]);
    return NULL;
}

Test(tensor, small_blocks_cached_per_thread_keep_the_statistics_exact)
{
    weft_empty_cache(WEFT_CPU);
    struct weft_memory_stats s0 = cpu_stats();
    /* the same thread: the blocks come back from its lists, counted as cache hits */
    weft_tensor *t[64];
    for (int i = 0; i < 64; i++)
        t[i] = weft_empty(1, SHAPE(1 + i % 16), WEFT_F32, WEFT_CPU);
    struct weft_memory_stats s1 = cpu_stats();
    cr_assert_eq(s1.num_allocs, s0.num_allocs + 64);
    cr_assert_gt(s1.allocated_bytes, s0.allocated_bytes);
    cr_assert_geq(s1.peak_allocated_bytes, s1.allocated_bytes, "a reading is a peak");
    for (int i = 0; i < 64; i++)
        weft_tensor_release(t[i]);
    struct weft_memory_stats s2 = cpu_stats();
    cr_assert_eq(s2.num_frees, s1.num_frees + 64);
    cr_assert_eq(s2.allocated_bytes, s0.allocated_bytes);
    for (int i = 0; i < 64; i++)
        t[i] = weft_empty(1, SHAPE(1 + i % 16), WEFT_F32, WEFT_CPU);
    struct weft_memory_stats s3 = cpu_stats();
    cr_assert_eq(s3.num_cache_hits, s2.num_cache_hits + 64);
    cr_assert_eq(s3.reserved_bytes, s2.reserved_bytes, "no new memory");
    cr_assert_eq(s3.allocated_bytes, s1.allocated_bytes);

    /* another thread makes and frees its own, and frees ours: exact once it has exited,
     * its blocks back in the pool */
    weft_tensor *handed[65];
    memcpy(handed, t, sizeof t);
    handed[64] = NULL;
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, alloc_and_free_small, handed), 0);
    cr_assert_eq(pthread_join(th, NULL), 0);
    struct weft_memory_stats s4 = cpu_stats();
    cr_assert_eq(s4.num_allocs, s3.num_allocs + 20);
    cr_assert_eq(s4.num_frees, s3.num_frees + 20 + 64);
    cr_assert_eq(s4.allocated_bytes, s0.allocated_bytes);
    weft_empty_cache(WEFT_CPU);
    struct weft_memory_stats s5 = cpu_stats();
    cr_assert_eq(s5.reserved_bytes, s5.allocated_bytes, "empty_cache returns every cached block");
    cr_assert_geq(s5.peak_allocated_bytes, s3.allocated_bytes);
}

static pthread_barrier_t parked;

/* Fills its lists (one block of 64 bytes and one of 128: each is freed before the next
 * is made), waits while the main thread empties the cache, then makes and frees one more
 * block. */
static void *cache_then_wait(void *arg)
{
    (void)arg;
    alloc_and_free_small(NULL);
    pthread_barrier_wait(&parked); /* lists full */
    pthread_barrier_wait(&parked); /* the main thread has called empty_cache */
    weft_tensor_release(weft_empty(1, SHAPE(1), WEFT_F32, WEFT_CPU));
    pthread_barrier_wait(&parked);
    pthread_barrier_wait(&parked); /* the main thread has read the statistics */
    return NULL;
}

/* empty_cache empties the other threads' lists at their next allocation or free. */
Test(tensor, empty_cache_reaches_the_other_threads_lists)
{
    weft_empty_cache(WEFT_CPU);
    cr_assert_eq(pthread_barrier_init(&parked, NULL, 2), 0);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, cache_then_wait, NULL), 0);
    pthread_barrier_wait(&parked);
    weft_empty_cache(WEFT_CPU);
    struct weft_memory_stats s0 = cpu_stats();
    cr_expect_eq(s0.reserved_bytes - s0.allocated_bytes, 64 + 128,
                 "the parked thread still holds its lists");
    pthread_barrier_wait(&parked);
    pthread_barrier_wait(&parked);
    struct weft_memory_stats s1 = cpu_stats();
    cr_expect_eq(s1.reserved_bytes - s1.allocated_bytes, 64,
                 "its next free emptied its lists, then kept that one block");
    pthread_barrier_wait(&parked);
    cr_assert_eq(pthread_join(th, NULL), 0);
    pthread_barrier_destroy(&parked);
    weft_empty_cache(WEFT_CPU);
    struct weft_memory_stats s2 = cpu_stats();
    cr_expect_eq(s2.reserved_bytes, s2.allocated_bytes);
}

Test(tensor, large_blocks_are_cached_too)
{
    weft_empty_cache(WEFT_CPU);
    int64_t n = 3 << 20; /* 12 MiB of float32: mapped, huge-page aligned */
    weft_tensor *a = weft_empty(1, &n, WEFT_F32, WEFT_CPU);
    cr_assert_not_null(a, "%s", weft_error_message());
    void *p = a->storage->data;
    cr_assert_eq(((uintptr_t)p) % (2 << 20), 0, "large blocks are 2 MiB aligned");
    memset(p, 1, (size_t)n * 4);
    weft_tensor_release(a);
    struct weft_memory_stats s0 = cpu_stats();
    weft_tensor *b = weft_zeros(1, &n, WEFT_F32, WEFT_CPU);
    cr_assert_eq(b->storage->data, p);
    struct weft_memory_stats s1 = cpu_stats();
    cr_assert_eq(s1.num_cache_hits, s0.num_cache_hits + 1);
    weft_tensor_release(b);
    weft_empty_cache(WEFT_CPU);
}

Test(tensor, reset_peak_memory_stats_restarts_the_cpu_peaks_from_now)
{
    weft_empty_cache(WEFT_CPU);
    int64_t n = 1 << 20; /* 4 MiB */
    weft_tensor *a = weft_empty(1, &n, WEFT_F32, WEFT_CPU);
    cr_assert_not_null(a, "%s", weft_error_message());
    weft_tensor_release(a);
    struct weft_memory_stats before = cpu_stats();
    cr_assert_geq(before.peak_allocated_bytes, before.allocated_bytes + (4u << 20));
    weft_reset_peak_memory_stats(WEFT_CPU);
    struct weft_memory_stats after = cpu_stats();
    cr_expect_eq(after.peak_allocated_bytes, after.allocated_bytes);
    cr_expect_eq(after.peak_reserved_bytes, after.reserved_bytes);
    weft_tensor *b = weft_empty(1, &n, WEFT_F32, WEFT_CPU); /* the peak rises again */
    cr_expect_geq(cpu_stats().peak_allocated_bytes, after.allocated_bytes + (4u << 20));
    weft_tensor_release(b);
    weft_empty_cache(WEFT_CPU);
}

Test(tensor, stats_fill_only_the_callers_struct)
{
    struct {
        struct weft_memory_stats s;
        uint64_t guard;
    } small;
    memset(&small, 0xab, sizeof small);
    small.s.struct_size = offsetof(struct weft_memory_stats, num_allocs);
    cr_assert_eq(weft_memory_stats(WEFT_CPU, &small.s), 0);
    cr_assert_eq(small.s.num_allocs, 0xababababababababull, "fields past struct_size untouched");
    cr_assert_eq(small.guard, 0xababababababababull);
}
