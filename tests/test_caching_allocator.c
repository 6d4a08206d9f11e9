/* tests/test_caching_allocator.c: the CUDA plugin's caching allocators, run over a fake
 * device on the host, so that their logic is checked on every machine (no GPU, no CUDA
 * toolkit needed). The allocators are plain C built into this test; nothing of the weft
 * runtime is involved, hence no tu_setup.
 *
 * The fake device hands out made-up addresses (the allocators never touch the memory),
 * can be told to run out of memory or fail, logs every request, and has events that the
 * tests complete by hand. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "caching_allocator.h"
#include "host_allocator.h"

#define KiB(x) ((size_t)(x) << 10)
#define MiB(x) ((size_t)(x) << 20)

#define S0 ((ca_stream)0)        /* the default stream */
#define S1 ((ca_stream)0x1000)
#define S2 ((ca_stream)0x2000)
#define S3 ((ca_stream)0x3000)

/* ---- the fake device -------------------------------------------------------------------- */

#define FAKE_MAX 256

struct fake_event {
    ca_stream stream;
    bool complete, destroyed;
};

struct fake_segment {
    uintptr_t ptr;
    size_t size;
};

static struct fake {
    size_t capacity, used;
    uintptr_t next_addr;
    int fail_next;        /* the next n allocations run out of memory */
    bool hard_fail;       /* allocations fail with a device error */
    bool no_events;       /* event_record fails */
    size_t log[FAKE_MAX]; /* every size asked for, in order */
    int nlog;
    struct fake_segment live[FAKE_MAX];
    int nlive, nfrees;
    struct fake_event events[FAKE_MAX];
    int nevents, nsyncs, nstream_syncs;
} fake;

static int fake_alloc(void *ctx, size_t size, void **ptr, char *why, size_t why_size)
{
    struct fake *f = ctx;
    if (f->nlog < FAKE_MAX)
        f->log[f->nlog++] = size;
    if (f->hard_fail) {
        snprintf(why, why_size, "fake device: an illegal memory access was encountered");
        return CA_ERR_DEVICE;
    }
    if (f->fail_next > 0) {
        f->fail_next--;
        return CA_ERR_OOM;
    }
    if (f->used + size > f->capacity)
        return CA_ERR_OOM;
    cr_assert_lt(f->nlive, FAKE_MAX);
    f->live[f->nlive++] = (struct fake_segment){f->next_addr, size};
    *ptr = (void *)f->next_addr;
    f->next_addr += size + MiB(1); /* a gap: segments are never adjacent */
    f->used += size;
    return CA_OK;
}

static void fake_free(void *ctx, void *ptr, size_t size)
{
    struct fake *f = ctx;
    for (int i = 0; i < f->nlive; i++) {
        if (f->live[i].ptr != (uintptr_t)ptr)
            continue;
        cr_assert_eq(f->live[i].size, size, "segment %p freed with size %zu, allocated %zu",
                     ptr, size, f->live[i].size);
        f->used -= size;
        f->live[i] = f->live[--f->nlive];
        f->nfrees++;
        return;
    }
    cr_assert_fail("fake_free: %p is not a live segment", ptr);
}

static void fake_mem_info(void *ctx, size_t *free_bytes, size_t *total_bytes)
{
    struct fake *f = ctx;
    *free_bytes = f->capacity - f->used;
    *total_bytes = f->capacity;
}

static void *fake_event_record(void *ctx, ca_stream stream)
{
    struct fake *f = ctx;
    if (f->no_events)
        return NULL;
    cr_assert_lt(f->nevents, FAKE_MAX);
    f->events[f->nevents] = (struct fake_event){.stream = stream};
    return &f->events[f->nevents++];
}

static int fake_event_query(void *ctx, void *event)
{
    struct fake_event *e = event;
    cr_assert(!e->destroyed, "query of a destroyed event");
    return e->complete ? 1 : 0;
}

static void fake_event_synchronize(void *ctx, void *event)
{
    struct fake *f = ctx;
    struct fake_event *e = event;
    cr_assert(!e->destroyed, "synchronize on a destroyed event");
    e->complete = true;
    f->nsyncs++;
}

static void fake_event_destroy(void *ctx, void *event)
{
    struct fake_event *e = event;
    cr_assert(!e->destroyed, "event destroyed twice");
    e->destroyed = true;
}

static void fake_stream_synchronize(void *ctx, ca_stream stream)
{
    ((struct fake *)ctx)->nstream_syncs++;
}

/* The work queued so far on stream finishes. */
static void complete_stream(ca_stream stream)
{
    for (int i = 0; i < fake.nevents; i++)
        if (fake.events[i].stream == stream)
            fake.events[i].complete = true;
}

static int live_events(void)
{
    int n = 0;
    for (int i = 0; i < fake.nevents; i++)
        n += !fake.events[i].destroyed;
    return n;
}

static struct alloc_ops fake_ops(void)
{
    return (struct alloc_ops){
        .ctx = &fake,
        .alloc = fake_alloc,
        .free = fake_free,
        .mem_info = fake_mem_info,
        .event_record = fake_event_record,
        .event_query = fake_event_query,
        .event_synchronize = fake_event_synchronize,
        .event_destroy = fake_event_destroy,
        .stream_synchronize = fake_stream_synchronize,
    };
}

/* ---- fixtures ----------------------------------------------------------------------------- */

static struct caching_allocator *ca;
static struct host_allocator *ha;

/* A fresh device of `capacity` bytes with a caching allocator over it. */
static void open_device(size_t capacity, size_t max_split_size)
{
    caching_allocator_destroy(ca);
    host_allocator_destroy(ha);
    memset(&fake, 0, sizeof fake);
    fake.capacity = capacity;
    fake.next_addr = (uintptr_t)1 << 40;
    struct caching_allocator_config cfg = {.device = 0, .max_split_size = max_split_size,
                                           .ops = fake_ops()};
    ca = caching_allocator_new(&cfg);
    cr_assert_not_null(ca);
    struct alloc_ops ops = fake_ops();
    ha = host_allocator_new(&ops);
    cr_assert_not_null(ha);
}

static void setup(void)
{
    open_device(MiB(1024), CA_MAX_SPLIT_UNLIMITED);
}

/* Tearing down returns every segment and destroys every event: nothing leaks. */
static void teardown(void)
{
    caching_allocator_destroy(ca);
    host_allocator_destroy(ha);
    ca = NULL;
    ha = NULL;
    cr_expect_eq(fake.nlive, 0, "%d segments were never returned to the device", fake.nlive);
    cr_expect_eq(live_events(), 0, "%d events were never destroyed", live_events());
}

TestSuite(caching_allocator, .init = setup, .fini = teardown);
TestSuite(host_allocator, .init = setup, .fini = teardown);

static void *alloc_on(size_t size, ca_stream stream)
{
    void *p = NULL;
    char why[512] = "";
    int rc = caching_allocator_malloc(ca, size, stream, &p, why, sizeof why);
    cr_assert_eq(rc, CA_OK, "malloc(%zu) failed: %s", size, why);
    cr_assert_not_null(p);
    return p;
}

static void *alloc(size_t size)
{
    return alloc_on(size, S0);
}

static void release(void *p)
{
    cr_assert_eq(caching_allocator_free(ca, p), CA_OK);
}

static struct ca_stats stats(void)
{
    struct ca_stats s;
    caching_allocator_get_stats(ca, &s);
    return s;
}

/* The snapshot's entry for the block at p (asserting there is one). */
static struct ca_block_info block_at(void *p)
{
    struct ca_block_info *info, found = {0};
    size_t n;
    cr_assert_eq(caching_allocator_snapshot(ca, &info, &n), CA_OK);
    bool seen = false;
    for (size_t i = 0; i < n && !seen; i++)
        if (info[i].ptr == p) {
            found = info[i];
            seen = true;
        }
    free(info);
    cr_assert(seen, "no block at %p", p);
    return found;
}

static size_t snapshot_count(void)
{
    struct ca_block_info *info;
    size_t n;
    cr_assert_eq(caching_allocator_snapshot(ca, &info, &n), CA_OK);
    free(info);
    return n;
}

static void assert_stat(struct ca_stat s, int64_t current, int64_t peak, int64_t allocated,
                        int64_t freed, const char *what)
{
    cr_expect_eq(s.current, current, "%s.current: %lld, expected %lld", what,
                 (long long)s.current, (long long)current);
    cr_expect_eq(s.peak, peak, "%s.peak: %lld, expected %lld", what, (long long)s.peak,
                 (long long)peak);
    cr_expect_eq(s.allocated, allocated, "%s.allocated: %lld, expected %lld", what,
                 (long long)s.allocated, (long long)allocated);
    cr_expect_eq(s.freed, freed, "%s.freed: %lld, expected %lld", what, (long long)s.freed,
                 (long long)freed);
}

/* ---- sizes ---------------------------------------------------------------------------------- */

Test(caching_allocator, rounds_requests_up_to_multiples_of_512_bytes)
{
    cr_expect_eq(caching_allocator_round_size(0), 512);
    cr_expect_eq(caching_allocator_round_size(1), 512);
    cr_expect_eq(caching_allocator_round_size(512), 512);
    cr_expect_eq(caching_allocator_round_size(513), 1024);
    cr_expect_eq(caching_allocator_round_size(MiB(1)), MiB(1));
    cr_expect_eq(caching_allocator_round_size(MiB(1) + 1), MiB(1) + 512);
}

Test(caching_allocator, requests_up_to_1_MiB_use_the_small_pool)
{
    cr_expect(caching_allocator_is_small(512));
    cr_expect(caching_allocator_is_small(MiB(1)));
    cr_expect_not(caching_allocator_is_small(MiB(1) + 512));
}

Test(caching_allocator, segment_sizes_follow_the_request_size)
{
    cr_expect_eq(caching_allocator_segment_size(512), MiB(2));
    cr_expect_eq(caching_allocator_segment_size(MiB(1)), MiB(2));
    cr_expect_eq(caching_allocator_segment_size(MiB(1) + 512), MiB(20));
    cr_expect_eq(caching_allocator_segment_size(MiB(10) - 512), MiB(20));
    cr_expect_eq(caching_allocator_segment_size(MiB(10)), MiB(10));
    cr_expect_eq(caching_allocator_segment_size(MiB(10) + 512), MiB(12));
    cr_expect_eq(caching_allocator_segment_size(MiB(33)), MiB(34));
}

Test(caching_allocator, formats_sizes_as_pytorch)
{
    char buf[32];
    cr_expect_str_eq(caching_allocator_format_size(0, buf, sizeof buf), "0 bytes");
    cr_expect_str_eq(caching_allocator_format_size(512, buf, sizeof buf), "512 bytes");
    cr_expect_str_eq(caching_allocator_format_size(1024, buf, sizeof buf), "1024 bytes");
    cr_expect_str_eq(caching_allocator_format_size(1536, buf, sizeof buf), "1.50 KiB");
    cr_expect_str_eq(caching_allocator_format_size(MiB(1), buf, sizeof buf), "1024.00 KiB");
    cr_expect_str_eq(caching_allocator_format_size(MiB(20), buf, sizeof buf), "20.00 MiB");
    cr_expect_str_eq(caching_allocator_format_size(MiB(1024), buf, sizeof buf), "1024.00 MiB");
    cr_expect_str_eq(caching_allocator_format_size(MiB(1536), buf, sizeof buf), "1.50 GiB");
}

/* ---- segments and splitting ---------------------------------------------------------------- */

Test(caching_allocator, small_request_takes_the_front_of_a_new_2_MiB_segment)
{
    void *a = alloc(1000);
    cr_assert_eq(fake.nlog, 1);
    cr_expect_eq(fake.log[0], MiB(2));
    struct ca_block_info b = block_at(a);
    cr_expect_eq(b.size, 1024);
    cr_expect_eq(b.requested_size, 1000);
    cr_expect_eq(b.segment, a);
    cr_expect_eq(b.segment_size, MiB(2));
    cr_expect(b.small_pool);
    cr_expect(b.allocated);
    /* the rest stays cached as one free block */
    cr_expect_eq(snapshot_count(), 2);
    struct ca_block_info rest = block_at((char *)a + 1024);
    cr_expect_eq(rest.size, MiB(2) - 1024);
    cr_expect_not(rest.allocated);
}

Test(caching_allocator, second_small_request_is_carved_from_the_same_segment)
{
    char *a = alloc(1000);
    char *b = alloc(3000);
    cr_expect_eq(b, a + 1024);
    cr_expect_eq(fake.nlog, 1, "no second device allocation");
    cr_expect_eq(block_at(b).size, 3072);
}

Test(caching_allocator, zero_bytes_is_a_512_byte_block)
{
    void *a = alloc(0);
    cr_expect_eq(block_at(a).size, 512);
    cr_expect_eq(block_at(a).requested_size, 0);
}

Test(caching_allocator, small_blocks_split_when_at_least_512_bytes_remain)
{
    char *a = alloc(MiB(1));
    char *b = alloc(MiB(1) - 512); /* leaves exactly 512 bytes: split */
    char *c = alloc(512);          /* fills the segment */
    cr_expect_eq(b, a + MiB(1));
    cr_expect_eq(c, a + MiB(2) - 512);
    cr_expect_eq(fake.nlog, 1);
    cr_expect_eq(block_at(b).size, MiB(1) - 512);
    cr_expect_eq(snapshot_count(), 3);
}

Test(caching_allocator, large_request_below_10_MiB_gets_a_20_MiB_segment_and_splits)
{
    char *a = alloc(MiB(5));
    cr_assert_eq(fake.nlog, 1);
    cr_expect_eq(fake.log[0], MiB(20));
    cr_expect_eq(block_at(a).size, MiB(5));
    cr_expect_not(block_at(a).small_pool);
    char *b = alloc(MiB(15)); /* exactly the rest: no new segment, no split */
    cr_expect_eq(b, a + MiB(5));
    cr_expect_eq(fake.nlog, 1);
    cr_expect_eq(block_at(b).size, MiB(15));
}

Test(caching_allocator, large_blocks_split_only_when_more_than_1_MiB_remains)
{
    char *a = alloc(MiB(19)); /* remainder exactly 1 MiB: kept in the block */
    cr_expect_eq(block_at(a).size, MiB(20));
    cr_expect_eq(block_at(a).requested_size, MiB(19));
    cr_expect_eq(snapshot_count(), 1);
    char *b = alloc(MiB(19) - 512); /* remainder 1 MiB + 512: split */
    cr_expect_eq(block_at(b).size, MiB(19) - 512);
    cr_expect_eq(snapshot_count(), 3);
}

Test(caching_allocator, large_request_from_10_MiB_gets_a_segment_rounded_to_2_MiB)
{
    char *a = alloc(MiB(10) + 1);
    cr_assert_eq(fake.nlog, 1);
    cr_expect_eq(fake.log[0], MiB(12));
    /* 2 MiB - 512 remain, more than 1 MiB: split */
    cr_expect_eq(block_at(a).size, MiB(10) + 512);
    cr_expect_eq(snapshot_count(), 2);
}

/* ---- reuse, best fit, merging ---------------------------------------------------------------- */

Test(caching_allocator, freed_block_is_reused_for_the_next_request_that_fits)
{
    char *a = alloc(1000);
    release(a);
    char *b = alloc(900);
    cr_expect_eq(b, a);
    cr_expect_eq(fake.nlog, 1);
    cr_expect_eq(stats().num_cache_hits, 1);
}

Test(caching_allocator, best_fit_takes_the_smallest_block_that_fits_then_the_lowest_address)
{
    /* free blocks of 4096, 2048, 8192 and 2048 bytes, kept apart by live blocks */
    char *f1 = alloc(4096);
    alloc(512);
    char *f2 = alloc(2048);
    alloc(512);
    char *f3 = alloc(8192);
    alloc(512);
    char *f4 = alloc(2048);
    alloc(512);
    release(f1);
    release(f2);
    release(f3);
    release(f4);
    cr_expect_eq(alloc(2000), f2, "the lower of the two 2048-byte blocks");
    cr_expect_eq(alloc(2000), f4);
    cr_expect_eq(alloc(3000), f1, "4096 is the best fit for 3072");
    cr_expect_eq(alloc(5000), f3);
    cr_expect_eq(fake.nlog, 1);
}

Test(caching_allocator, cached_blocks_serve_only_their_own_stream)
{
    char *a = alloc_on(1000, S1);
    release(a);
    char *b = alloc_on(1000, S2);
    cr_expect_neq(block_at(b).segment, block_at(a).segment);
    cr_expect_eq(fake.nlog, 2, "a second segment for the second stream");
    cr_expect_eq(block_at(b).stream, S2);
    cr_expect_eq(alloc_on(1000, S1), a);
}

Test(caching_allocator, freed_neighbours_merge_back_into_the_whole_segment)
{
    char *a = alloc(1000);
    char *b = alloc(1000);
    char *c = alloc(1000);
    cr_expect_eq(snapshot_count(), 4); /* a, b, c and the free rest */
    release(a);
    release(c); /* merges with the rest */
    cr_expect_eq(snapshot_count(), 3);
    cr_expect_eq(block_at(c).size, MiB(2) - 2048);
    release(b); /* merges with both sides */
    cr_expect_eq(snapshot_count(), 1);
    struct ca_block_info whole = block_at(a);
    cr_expect_eq(whole.size, MiB(2));
    cr_expect_not(whole.allocated);
    struct ca_stats s = stats();
    cr_expect_eq(s.inactive_split[CA_STAT_ALL].current, 0);
    cr_expect_eq(s.inactive_split_bytes[CA_STAT_ALL].current, 0);
}

Test(caching_allocator, a_whole_free_segment_is_split_again_when_reused)
{
    char *a = alloc(MiB(1));
    release(a);
    char *b = alloc(4096);
    cr_expect_eq(b, a);
    cr_expect_eq(block_at(b).size, 4096);
    cr_expect_eq(snapshot_count(), 2);
}

/* ---- streams and events -------------------------------------------------------------------- */

Test(caching_allocator, block_used_on_another_stream_waits_for_its_event)
{
    char *a = alloc_on(1000, S1);
    cr_assert_eq(caching_allocator_record_stream(ca, a, S2), CA_OK);
    release(a);
    cr_assert_eq(fake.nevents, 1);
    cr_expect_eq(fake.events[0].stream, S2, "the event is recorded on the using stream");
    cr_expect(block_at(a).pending);
    struct ca_stats s = stats();
    cr_expect_eq(s.allocation[CA_STAT_ALL].current, 0, "no longer allocated");
    cr_expect_eq(s.active[CA_STAT_ALL].current, 1, "but still active");
    cr_expect_eq(s.active_bytes[CA_STAT_ALL].current, 1024);

    char *b = alloc_on(1000, S1);
    cr_expect_neq(b, a, "not reused while S2 may still use it");

    complete_stream(S2);
    char *c = alloc_on(1000, S1);
    cr_expect_eq(c, a, "reused once the event completed");
    cr_expect_eq(live_events(), 0);
    cr_expect_eq(stats().active[CA_STAT_ALL].current, 2);
}

Test(caching_allocator, block_waits_for_the_events_of_every_stream_that_used_it)
{
    char *a = alloc_on(1000, S1);
    caching_allocator_record_stream(ca, a, S2);
    caching_allocator_record_stream(ca, a, S3);
    caching_allocator_record_stream(ca, a, S2); /* once per stream */
    release(a);
    cr_assert_eq(fake.nevents, 2);
    complete_stream(S2);
    cr_expect_neq(alloc_on(1000, S1), a);
    complete_stream(S3);
    cr_expect_eq(alloc_on(1000, S1), a);
}

Test(caching_allocator, use_on_the_allocation_stream_needs_no_event)
{
    char *a = alloc_on(1000, S1);
    cr_assert_eq(caching_allocator_record_stream(ca, a, S1), CA_OK);
    release(a);
    cr_expect_eq(fake.nevents, 0);
    cr_expect_eq(alloc_on(1000, S1), a);
}

Test(caching_allocator, an_unfinished_stream_does_not_hold_back_other_streams)
{
    char *a = alloc_on(1000, S1);
    char *b = alloc_on(1000, S1);
    caching_allocator_record_stream(ca, a, S2);
    caching_allocator_record_stream(ca, b, S3);
    release(a); /* event on S2 first */
    release(b); /* then on S3 */
    complete_stream(S3);
    cr_expect_eq(alloc_on(1000, S1), b, "b is back although S2's earlier event is pending");
}

Test(caching_allocator, without_an_event_the_allocator_waits_for_the_stream)
{
    char *a = alloc_on(1000, S1);
    caching_allocator_record_stream(ca, a, S2);
    fake.no_events = true;
    release(a);
    cr_expect_eq(fake.nstream_syncs, 1);
    cr_expect_eq(alloc_on(1000, S1), a);
}

Test(caching_allocator, unknown_pointers_are_refused)
{
    int x;
    cr_expect_eq(caching_allocator_free(ca, &x), CA_ERR_INVALID);
    cr_expect_eq(caching_allocator_record_stream(ca, &x, S1), CA_ERR_INVALID);
    cr_expect_eq(caching_allocator_free(ca, NULL), CA_OK);
    char *a = alloc(1000);
    release(a);
    cr_expect_eq(caching_allocator_free(ca, a), CA_ERR_INVALID, "double free");
    char *b = alloc(4096);
    cr_expect_eq(caching_allocator_free(ca, b + 512), CA_ERR_INVALID, "interior pointer");
}

/* ---- empty_cache ----------------------------------------------------------------------------- */

Test(caching_allocator, empty_cache_returns_only_unsplit_cached_segments)
{
    char *a = alloc(1000);      /* small segment, stays in use */
    char *b = alloc(MiB(12));   /* its own 12 MiB segment */
    char *c = alloc(MiB(30));   /* 30 MiB */
    alloc(MiB(3));              /* a 20 MiB segment, split and in use */
    release(b);
    release(c);
    caching_allocator_empty_cache(ca);
    cr_expect_eq(fake.nfrees, 2);
    cr_expect_eq(fake.used, MiB(2) + MiB(20));
    struct ca_stats s = stats();
    cr_expect_eq(s.reserved_bytes[CA_STAT_ALL].current, (int64_t)(MiB(2) + MiB(20)));
    cr_expect_eq(s.segment[CA_STAT_ALL].current, 2);
    cr_expect_eq(s.segment[CA_STAT_LARGE].freed, 2);
    (void)a;
}

Test(caching_allocator, empty_cache_waits_for_pending_events_first)
{
    char *a = alloc_on(MiB(12), S1);
    caching_allocator_record_stream(ca, a, S2);
    release(a);
    caching_allocator_empty_cache(ca);
    cr_expect_eq(fake.nsyncs, 1);
    cr_expect_eq(fake.nfrees, 1);
    cr_expect_eq(fake.used, 0);
    cr_expect_eq(stats().active[CA_STAT_ALL].current, 0);
}

/* ---- running out of memory ------------------------------------------------------------------- */

Test(caching_allocator, out_of_memory_frees_the_cache_and_retries)
{
    open_device(MiB(40), CA_MAX_SPLIT_UNLIMITED);
    char *x = alloc(MiB(15)); /* 16 MiB segment */
    release(x);               /* cached */
    char *y = alloc(MiB(30)); /* 16 + 30 > 40: flush, retry */
    cr_expect_not_null(y);
    cr_assert_eq(fake.nlog, 3);
    cr_expect_eq(fake.log[0], MiB(16));
    cr_expect_eq(fake.log[1], MiB(30), "first attempt fails");
    cr_expect_eq(fake.log[2], MiB(30), "retry after freeing the cached 16 MiB");
    struct ca_stats s = stats();
    cr_expect_eq(s.num_alloc_retries, 1);
    cr_expect_eq(s.num_ooms, 0);
    cr_expect_eq(s.segment[CA_STAT_ALL].freed, 1);
}

Test(caching_allocator, out_of_memory_retry_waits_for_pending_blocks)
{
    open_device(MiB(40), CA_MAX_SPLIT_UNLIMITED);
    char *x = alloc_on(MiB(15), S1);
    caching_allocator_record_stream(ca, x, S2);
    release(x);
    cr_expect_not_null(alloc_on(MiB(30), S1));
    cr_expect_eq(fake.nsyncs, 1, "the pending event was waited for");
    cr_expect_eq(stats().num_alloc_retries, 1);
}

Test(caching_allocator, out_of_memory_reports_pytorchs_message_and_counts)
{
    open_device(MiB(40), CA_MAX_SPLIT_UNLIMITED);
    alloc(MiB(15)); /* 16 MiB, in use */
    alloc(1000);    /* 2 MiB small segment, 1 KiB in use */
    void *p = (void *)1;
    char why[512];
    int rc = caching_allocator_malloc(ca, MiB(30), S0, &p, why, sizeof why);
    cr_assert_eq(rc, CA_ERR_OOM);
    cr_expect_null(p);
    cr_expect_str_eq(why, "CUDA out of memory. Tried to allocate 30.00 MiB. GPU 0 has a total "
                          "capacity of 40.00 MiB of which 22.00 MiB is free. Of the allocated "
                          "memory 16.00 MiB is allocated by weft, and 2.00 MiB is reserved by "
                          "weft but unallocated.");
    struct ca_stats s = stats();
    cr_expect_eq(s.num_ooms, 1);
    cr_expect_eq(s.num_alloc_retries, 1);
    cr_expect_eq(fake.nlog, 4, "16 MiB, 2 MiB, then 30 MiB twice");
    cr_expect_eq(s.allocation[CA_STAT_ALL].current, 2, "failed requests change nothing");
}

Test(caching_allocator, out_of_memory_message_names_the_device_and_the_segment_size)
{
    caching_allocator_destroy(ca);
    memset(&fake, 0, sizeof fake);
    fake.capacity = MiB(1536);
    fake.used = MiB(1024); /* someone else's */
    fake.next_addr = (uintptr_t)1 << 40;
    struct caching_allocator_config cfg = {.device = 3, .ops = fake_ops()};
    ca = caching_allocator_new(&cfg);
    void *p;
    char why[512];
    cr_assert_eq(caching_allocator_malloc(ca, MiB(600), S0, &p, why, sizeof why), CA_ERR_OOM);
    cr_expect(strstr(why, "Tried to allocate 600.00 MiB. GPU 3 has a total capacity of 1.50 GiB "
                          "of which 512.00 MiB is free.") != NULL,
              "%s", why);
    cr_expect(strstr(why, "0 bytes is allocated by weft, and 0 bytes is reserved") != NULL, "%s",
              why);
    fake.used = 0;
}

Test(caching_allocator, device_errors_are_reported_without_retrying)
{
    fake.hard_fail = true;
    void *p;
    char why[512];
    cr_assert_eq(caching_allocator_malloc(ca, 1000, S0, &p, why, sizeof why), CA_ERR_DEVICE);
    cr_expect_str_eq(why, "fake device: an illegal memory access was encountered");
    cr_expect_eq(fake.nlog, 1);
    cr_expect_eq(stats().num_ooms, 0);
    cr_expect_eq(stats().num_alloc_retries, 0);
}

Test(caching_allocator, absurd_sizes_are_out_of_memory)
{
    void *p;
    char why[512];
    cr_assert_eq(caching_allocator_malloc(ca, SIZE_MAX - 10, S0, &p, why, sizeof why),
                 CA_ERR_OOM);
    cr_expect(strstr(why, "CUDA out of memory. Tried to allocate") == why, "%s", why);
    cr_expect_eq(fake.nlog, 0);
}

/* ---- max_split_size ---------------------------------------------------------------------- */

Test(caching_allocator, oversize_blocks_are_not_split_and_serve_only_similar_requests)
{
    open_device(MiB(1024), MiB(40));
    char *a = alloc(MiB(60));
    cr_expect_eq(block_at(a).size, MiB(60));
    release(a);
    cr_expect_eq(alloc(MiB(50)), a, "60 MiB is within 20 MiB of 50 MiB");
    cr_expect_eq(block_at(a).size, MiB(60), "and is not split");
    release(a);
    char *b = alloc(MiB(30));
    cr_expect_neq(b, a, "a request below max_split_size never takes an oversize block");
    char *c = alloc(MiB(40));
    cr_expect_neq(c, a, "60 MiB is not under 40 + 20 MiB");
    struct ca_stats s = stats();
    cr_expect_eq(s.oversize_segments.current, 2);
    cr_expect_eq(s.oversize_allocations.current, 1);
    cr_expect_eq(s.oversize_allocations.allocated, 3);
}

Test(caching_allocator, out_of_memory_first_frees_oversize_blocks_largest_first)
{
    open_device(MiB(150), MiB(40));
    char *a = alloc(MiB(60));
    char *e = alloc(MiB(45));
    char *c = alloc(MiB(30));
    release(a);
    release(e);
    release(c);
    cr_expect_not_null(alloc(MiB(90))); /* 135 + 90 > 150: free 60 + 45, keep the 30 */
    struct ca_stats s = stats();
    cr_expect_eq(s.num_alloc_retries, 0, "no full flush was needed");
    cr_expect_eq(s.reserved_bytes[CA_STAT_ALL].current, (int64_t)MiB(120));
    cr_expect_eq(alloc(MiB(30)), c, "the 30 MiB block stayed cached");
}

Test(caching_allocator, out_of_memory_frees_a_fitting_oversize_block)
{
    open_device(MiB(150), MiB(40));
    char *a = alloc(MiB(100));
    alloc(MiB(30));
    release(a);
    /* 100 MiB is too large to serve 60 MiB; 130 + 60 > 150: release it and retry */
    cr_expect_not_null(alloc(MiB(60)));
    cr_expect_eq(stats().num_alloc_retries, 0);
    cr_expect_eq(fake.used, MiB(90));
}

/* ---- statistics -------------------------------------------------------------------------- */

Test(caching_allocator, statistics_follow_a_scripted_sequence)
{
    char *a = alloc(1000);   /* small: 1024 of a 2 MiB segment */
    char *b = alloc(MiB(3)); /* large: 3 MiB of a 20 MiB segment */
    release(a);              /* merges back: the small segment is whole again */
    char *c = alloc(1000);   /* cache hit, split again */
    struct ca_stats s = stats();
    const int64_t K1 = 1024, M3 = (int64_t)MiB(3), M2 = (int64_t)MiB(2);
    assert_stat(s.allocation[CA_STAT_ALL], 2, 2, 3, 1, "allocation.all");
    assert_stat(s.allocation[CA_STAT_SMALL], 1, 1, 2, 1, "allocation.small");
    assert_stat(s.allocation[CA_STAT_LARGE], 1, 1, 1, 0, "allocation.large");
    assert_stat(s.active[CA_STAT_ALL], 2, 2, 3, 1, "active.all");
    assert_stat(s.segment[CA_STAT_ALL], 2, 2, 2, 0, "segment.all");
    assert_stat(s.segment[CA_STAT_SMALL], 1, 1, 1, 0, "segment.small");
    assert_stat(s.allocated_bytes[CA_STAT_ALL], K1 + M3, K1 + M3, 2 * K1 + M3, K1,
                "allocated_bytes.all");
    assert_stat(s.allocated_bytes[CA_STAT_LARGE], M3, M3, M3, 0, "allocated_bytes.large");
    assert_stat(s.active_bytes[CA_STAT_SMALL], K1, K1, 2 * K1, K1, "active_bytes.small");
    assert_stat(s.reserved_bytes[CA_STAT_ALL], M2 + (int64_t)MiB(20), M2 + (int64_t)MiB(20),
                M2 + (int64_t)MiB(20), 0, "reserved_bytes.all");
    assert_stat(s.reserved_bytes[CA_STAT_SMALL], M2, M2, M2, 0, "reserved_bytes.small");
    assert_stat(s.inactive_split[CA_STAT_SMALL], 1, 1, 2, 1, "inactive_split.small");
    assert_stat(s.inactive_split[CA_STAT_LARGE], 1, 1, 1, 0, "inactive_split.large");
    assert_stat(s.inactive_split[CA_STAT_ALL], 2, 2, 3, 1, "inactive_split.all");
    assert_stat(s.inactive_split_bytes[CA_STAT_SMALL], M2 - K1, M2 - K1, 2 * (M2 - K1), M2 - K1,
                "inactive_split_bytes.small");
    assert_stat(s.inactive_split_bytes[CA_STAT_LARGE], (int64_t)MiB(17), (int64_t)MiB(17),
                (int64_t)MiB(17), 0, "inactive_split_bytes.large");
    assert_stat(s.requested_bytes[CA_STAT_ALL], 1000 + M3, 1000 + M3, 2000 + M3, 1000,
                "requested_bytes.all");
    cr_expect_eq(s.num_cache_hits, 1);
    cr_expect_eq(s.num_alloc_retries, 0);
    cr_expect_eq(s.num_ooms, 0);

    release(b);
    release(c);
    caching_allocator_empty_cache(ca);
    s = stats();
    assert_stat(s.reserved_bytes[CA_STAT_ALL], 0, M2 + (int64_t)MiB(20), M2 + (int64_t)MiB(20),
                M2 + (int64_t)MiB(20), "reserved_bytes.all after empty_cache");
    assert_stat(s.inactive_split[CA_STAT_ALL], 0, 2, 3, 3, "inactive_split.all at the end");
    assert_stat(s.requested_bytes[CA_STAT_ALL], 0, 1000 + M3, 2000 + M3, 2000 + M3,
                "requested_bytes.all at the end");
}

Test(caching_allocator, peaks_and_totals_can_be_reset)
{
    char *a = alloc(MiB(4));
    release(a);
    caching_allocator_reset_peak_stats(ca);
    struct ca_stats s = stats();
    assert_stat(s.allocated_bytes[CA_STAT_ALL], 0, 0, (int64_t)MiB(4), (int64_t)MiB(4),
                "after reset_peak");
    caching_allocator_reset_accumulated_stats(ca);
    s = stats();
    assert_stat(s.allocated_bytes[CA_STAT_ALL], 0, 0, 0, 0, "after reset_accumulated");
    assert_stat(s.reserved_bytes[CA_STAT_ALL], (int64_t)MiB(20), (int64_t)MiB(20), 0, 0,
                "reserved after reset_accumulated");
}

/* ---- memory_summary ------------------------------------------------------------------------ */

static bool has_line(const char *text, const char *line)
{
    size_t n = strlen(line);
    for (const char *p = strstr(text, line); p; p = strstr(p + 1, line))
        if ((p == text || p[-1] == '\n') && p[n] == '\n')
            return true;
    return false;
}

Test(caching_allocator, summary_is_torch_cuda_memory_summary_table)
{
    alloc(MiB(1));
    char *text = caching_allocator_summary(ca, false);
    cr_assert_not_null(text);
    const char *expected[] = {
        "|===========================================================================|",
        "|                     weft CUDA memory summary, device ID 0                 |",
        "|            CUDA OOMs: 0            |        cudaMalloc retries: 0         |",
        "|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |",
        "| Allocated memory      |   1024 KiB |   1024 KiB |   1024 KiB |      0 B   |",
        "|       from large pool |      0 KiB |      0 KiB |      0 KiB |      0 B   |",
        "|       from small pool |   1024 KiB |   1024 KiB |   1024 KiB |      0 B   |",
        "| GPU reserved memory   |   2048 KiB |   2048 KiB |   2048 KiB |      0 B   |",
        "| Non-releasable memory |   1024 KiB |   1024 KiB |   1024 KiB |      0 B   |",
        "| Allocations           |       1    |       1    |       1    |       0    |",
        "| GPU reserved segments |       1    |       1    |       1    |       0    |",
        "| Oversize allocations  |       0    |       0    |       0    |       0    |",
        "| Oversize GPU segments |       0    |       0    |       0    |       0    |",
    };
    for (size_t i = 0; i < sizeof expected / sizeof *expected; i++)
        cr_expect(has_line(text, expected[i]), "missing line\n%s\nin\n%s", expected[i], text);
    /* every line is 77 characters wide */
    int lines = 0;
    for (const char *p = text; *p; lines++) {
        const char *nl = strchr(p, '\n');
        cr_assert_not_null(nl);
        cr_expect_eq(nl - p, 77, "line %d is %d wide", lines, (int)(nl - p));
        p = nl + 1;
    }
    cr_expect_eq(lines, 6 + 9 * 4 + 4 + 1);
    free(text);
    text = caching_allocator_summary(ca, true);
    cr_expect_null(strstr(text, "from large pool"));
    free(text);
}

/* ---- teardown and threads ------------------------------------------------------------------ */

Test(caching_allocator, destroy_returns_segments_still_in_use)
{
    alloc(1000);
    alloc(MiB(30));
    char *p = alloc_on(1000, S1);
    caching_allocator_record_stream(ca, p, S2);
    release(p);
    /* teardown checks that every segment and event was released */
}

struct worker {
    unsigned seed;
    int failures;
};

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    static const size_t sizes[] = {1, 700, 4096, 100000, MiB(1), MiB(1) + 1, MiB(3), MiB(11)};
    void *live[8] = {0};
    for (int i = 0; i < 2000; i++) {
        int slot = rand_r(&w->seed) % 8;
        if (live[slot]) {
            w->failures += caching_allocator_free(ca, live[slot]) != CA_OK;
            live[slot] = NULL;
            continue;
        }
        char why[512];
        size_t size = sizes[rand_r(&w->seed) % 8];
        ca_stream stream = (ca_stream)(uintptr_t)(rand_r(&w->seed) % 2 * 0x1000);
        w->failures += caching_allocator_malloc(ca, size, stream, &live[slot], why, sizeof why) !=
                       CA_OK;
    }
    for (int slot = 0; slot < 8; slot++)
        w->failures += caching_allocator_free(ca, live[slot]) != CA_OK;
    return NULL;
}

Test(caching_allocator, is_safe_to_use_from_several_threads)
{
    open_device((size_t)64 << 30, CA_MAX_SPLIT_UNLIMITED);
    pthread_t threads[4];
    struct worker workers[4];
    for (int i = 0; i < 4; i++) {
        workers[i] = (struct worker){.seed = 17u * (unsigned)i + 1u};
        cr_assert_eq(pthread_create(&threads[i], NULL, worker_main, &workers[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(threads[i], NULL);
        cr_expect_eq(workers[i].failures, 0);
    }
    struct ca_stats s = stats();
    cr_expect_eq(s.allocation[CA_STAT_ALL].current, 0);
    cr_expect_eq(s.allocated_bytes[CA_STAT_ALL].current, 0);
    cr_expect_eq(s.active_bytes[CA_STAT_ALL].current, 0);
    cr_expect_eq(s.requested_bytes[CA_STAT_ALL].current, 0);
    cr_expect_eq(s.allocation[CA_STAT_ALL].allocated, s.allocation[CA_STAT_ALL].freed);
    caching_allocator_empty_cache(ca);
    cr_expect_eq(stats().reserved_bytes[CA_STAT_ALL].current, 0,
                 "every segment merged back whole");
    cr_expect_eq(fake.used, 0);
}

/* ---- pinned host memory ---------------------------------------------------------------------- */

static void *host_alloc(size_t size)
{
    void *p = NULL;
    char why[256] = "";
    cr_assert_eq(host_allocator_malloc(ha, size, &p, why, sizeof why), CA_OK, "%s", why);
    cr_assert_not_null(p);
    return p;
}

static struct host_stats host_stats(void)
{
    struct host_stats s;
    host_allocator_get_stats(ha, &s);
    return s;
}

Test(host_allocator, rounds_sizes_up_to_powers_of_two)
{
    cr_expect_eq(host_allocator_round_size(0), 1);
    cr_expect_eq(host_allocator_round_size(1), 1);
    cr_expect_eq(host_allocator_round_size(3), 4);
    cr_expect_eq(host_allocator_round_size(4096), 4096);
    cr_expect_eq(host_allocator_round_size(4097), 8192);
    cr_expect_eq(host_allocator_round_size(SIZE_MAX), 0);
}

Test(host_allocator, allocates_a_power_of_two_block_and_reuses_it_for_that_size)
{
    char *a = host_alloc(3000);
    cr_assert_eq(fake.nlog, 1);
    cr_expect_eq(fake.log[0], 4096);
    cr_expect_eq(host_allocator_free(ha, a), CA_OK);
    cr_expect_eq(host_alloc(4000), a);
    cr_expect_eq(fake.nlog, 1);
    cr_expect_eq(host_stats().num_cache_hits, 1);
}

Test(host_allocator, never_splits_a_larger_free_block)
{
    char *big = host_alloc(8192);
    host_allocator_free(ha, big);
    char *small = host_alloc(4096);
    cr_expect_neq(small, big);
    cr_expect_eq(fake.nlog, 2);
    cr_expect_eq(fake.log[1], 4096);
    cr_expect_eq(host_alloc(5000), big, "the 8192 list serves 5000");
}

Test(host_allocator, block_returns_only_after_the_events_of_its_copies)
{
    char *a = host_alloc(4096);
    cr_expect_eq(host_allocator_record_event(ha, a + 100, S1), 1, "any address in the block");
    cr_expect_eq(fake.nevents, 1);
    host_allocator_free(ha, a);
    char *b = host_alloc(4096);
    cr_expect_neq(b, a, "the copy may still be reading it");
    complete_stream(S1);
    cr_expect_eq(host_alloc(4096), a);
    cr_expect_eq(live_events(), 0);
}

Test(host_allocator, a_copy_finished_before_free_does_not_delay_reuse)
{
    char *a = host_alloc(4096);
    host_allocator_record_event(ha, a, S1);
    complete_stream(S1);
    host_allocator_free(ha, a);
    cr_expect_eq(host_alloc(4096), a);
}

Test(host_allocator, events_complete_in_the_order_they_were_recorded)
{
    char *a = host_alloc(4096);
    char *b = host_alloc(4096);
    host_allocator_record_event(ha, a, S1);
    host_allocator_record_event(ha, b, S2);
    host_allocator_free(ha, a);
    host_allocator_free(ha, b);
    complete_stream(S2);
    char *c = host_alloc(4096);
    cr_expect(c != a && c != b, "one queue: b waits behind a's unfinished copy");
    complete_stream(S1);
    char *d = host_alloc(4096);
    cr_expect(d == a || d == b);
    cr_expect_eq(host_stats().num_pending_events, 0);
}

Test(host_allocator, record_event_tells_pinned_from_pageable_memory)
{
    int pageable = 0;
    cr_expect_eq(host_allocator_record_event(ha, &pageable, S1), 0);
    cr_expect_not(host_allocator_contains(ha, &pageable));
    char *a = host_alloc(100);
    cr_expect(host_allocator_contains(ha, a + 127));
    cr_expect_not(host_allocator_contains(ha, a + 128));
    host_allocator_free(ha, a);
    cr_expect_eq(host_allocator_record_event(ha, a, S1), CA_ERR_INVALID, "block already freed");
    cr_expect_not(host_allocator_contains(ha, a));
    cr_expect_eq(fake.nevents, 0);
}

Test(host_allocator, without_an_event_the_allocator_waits_for_the_stream)
{
    char *a = host_alloc(4096);
    fake.no_events = true;
    cr_expect_eq(host_allocator_record_event(ha, a, S1), 1);
    cr_expect_eq(fake.nstream_syncs, 1);
    host_allocator_free(ha, a);
    cr_expect_eq(host_alloc(4096), a);
}

Test(host_allocator, refuses_pointers_it_did_not_hand_out)
{
    int x;
    cr_expect_eq(host_allocator_free(ha, &x), CA_ERR_INVALID);
    char *a = host_alloc(64);
    cr_expect_eq(host_allocator_free(ha, a + 1), CA_ERR_INVALID);
    cr_expect_eq(host_allocator_free(ha, a), CA_OK);
    cr_expect_eq(host_allocator_free(ha, a), CA_ERR_INVALID, "double free");
    cr_expect_eq(host_allocator_free(ha, NULL), CA_OK);
}

Test(host_allocator, empty_cache_frees_only_free_blocks)
{
    char *a = host_alloc(4096);
    char *b = host_alloc(8192);
    char *c = host_alloc(4096);
    host_allocator_record_event(ha, c, S1);
    host_allocator_free(ha, b);
    host_allocator_free(ha, c); /* still waiting for its copy */
    host_allocator_empty_cache(ha);
    cr_expect_eq(fake.nfrees, 1, "only b");
    struct host_stats s = host_stats();
    cr_expect_eq(s.segment.current, 2);
    cr_expect_eq(s.reserved_bytes.current, 8192);
    cr_expect_eq(s.allocated_bytes.current, 4096);
    cr_expect_eq(s.allocation.current, 1);
    cr_expect_eq(s.allocation.allocated, 3);
    (void)a;
}

Test(host_allocator, reports_the_drivers_failure)
{
    fake.capacity = 1000;
    void *p;
    char why[256] = "";
    cr_expect_eq(host_allocator_malloc(ha, 4096, &p, why, sizeof why), CA_ERR_OOM);
    cr_expect_null(p);
    fake.hard_fail = true;
    cr_expect_eq(host_allocator_malloc(ha, 16, &p, why, sizeof why), CA_ERR_DEVICE);
    cr_expect_str_eq(why, "fake device: an illegal memory access was encountered");
}
