/* tests/test_profiler.c: weft/profiler.h. The ops of one MLP training step counted at the
 * dispatch funnel, nesting of ranges, backward nodes and ops, self and total times,
 * memory per op, the layout copies, the schedule's cycles, the Chrome trace's events
 * (every one with ph, ts, dur, pid, tid), the memory snapshot's ops and a caching
 * allocator's segments in it, and the cpu allocator's summary against its statistics. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include <weft/nn.h>
#include <weft/optim.h>
#include <weft/options.h>
#include <weft/backend.h>
#include <weft/observer.h>

/* Every op of one step of the MLP below, in the order first dispatched, with its calls:
 * forward (linear+relu fused, addmm's matmul, cross-entropy's checks, log_softmax, nll's
 * gather), backward (the loss's formulas, matmuls for the weights' and input's gradients,
 * the fused ReLU-and-bias backward), the optimizer (one fused SGD step per parameter). A
 * change here is a change in what a training step dispatches: update it knowingly. */
#define MLP_STEP_OPS                                                                            \
    "matmul:5 add_bias_relu:1 add:1 ne:1 ge:1 lt:1 logical_or:1 logical_and:1 any:1 copy:2 "    \
    "logical_not:1 where:1 log_softmax:1 gather:1 mul:4 neg:2 sum:3 div:2 fill:1 exp:1 "        \
    "scatter_add:1 threshold_backward_sum:1 sgd_step:4 "

static void setup(void)
{
    tu_setup();
    weft_scope_push();
    tu_tmpdir_create("profiler");
}

static void teardown(void)
{
    weft_profiler_stop();
    weft_profiler_clear();
    weft_memory_record_history(false);
    weft_scope_pop();
    tu_tmpdir_remove();
    tu_teardown();
}

TestSuite(profiler, .init = setup, .fini = teardown);

/* A 784-256-10 MLP's step on a batch of 8: forward, loss, backward, SGD with momentum. */
struct mlp {
    weft_tensor *w1, *b1, *w2, *b2, *x, *y;
    weft_optimizer *opt;
};

static struct mlp mlp_new(void)
{
    struct mlp m;
    int64_t s1[2] = {256, 784}, s2[2] = {10, 256}, sb1[1] = {256}, sb2[1] = {10}, sx[2] = {8, 784};
    m.w1 = weft_tensor_retain(weft_randn(2, s1, WEFT_F32, WEFT_CPU));
    m.b1 = weft_tensor_retain(weft_zeros(1, sb1, WEFT_F32, WEFT_CPU));
    m.w2 = weft_tensor_retain(weft_randn(2, s2, WEFT_F32, WEFT_CPU));
    m.b2 = weft_tensor_retain(weft_zeros(1, sb2, WEFT_F32, WEFT_CPU));
    m.x = weft_tensor_retain(weft_rand(2, sx, WEFT_F32, WEFT_CPU));
    int64_t sy[1] = {8};
    m.y = weft_tensor_retain(weft_randint(0, 10, 1, sy, WEFT_I64, WEFT_CPU));
    weft_tensor *params[4] = {m.w1, m.b1, m.w2, m.b2};
    for (int i = 0; i < 4; i++)
        cr_assert_eq(weft_requires_grad_(params[i], true), 0);
    weft_options *o = weft_options_new("optim", NULL);
    weft_options_set(o, "lr", "0.01");
    weft_options_set(o, "momentum", "0.9");
    m.opt = weft_optimizer_create("sgd", 4, params, o);
    weft_options_free(o);
    cr_assert_not_null(m.opt, "%s", weft_error_message());
    return m;
}

static void mlp_step(struct mlp *m)
{
    weft_scope_push();
    weft_profiler_range_push("forward");
    weft_tensor *h = weft_linear_relu(m->x, m->w1, m->b1);
    weft_tensor *logits = weft_linear(h, m->w2, m->b2);
    weft_tensor *loss = weft_cross_entropy(logits, m->y, NULL);
    weft_profiler_range_pop();
    cr_assert_not_null(loss, "%s", weft_error_message());
    weft_profiler_range_push("backward");
    cr_assert_eq(weft_backward(loss, NULL, false), 0, "%s", weft_error_message());
    weft_profiler_range_pop();
    weft_profiler_range_push("optimizer");
    cr_assert_eq(weft_optimizer_step(m->opt), 0, "%s", weft_error_message());
    cr_assert_eq(weft_optimizer_zero_grad(m->opt, true), 0);
    weft_profiler_range_pop();
    weft_scope_pop();
}

static void mlp_free(struct mlp *m)
{
    weft_optimizer_free(m->opt);
    weft_tensor *all[6] = {m->w1, m->b1, m->w2, m->b2, m->x, m->y};
    for (int i = 0; i < 6; i++)
        weft_tensor_release(all[i]);
}

static const struct weft_profiler_average *row(const struct weft_profiler_average *rows, size_t n,
                                               const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(rows[i].name, name) == 0)
            return &rows[i];
    return NULL;
}

Test(profiler, one_mlp_step_dispatches_exactly_these_ops)
{
    struct mlp m = mlp_new();
    mlp_step(&m); /* the first step makes the optimizer's state */
    cr_assert_eq(weft_profiler_start(NULL), 0, "%s", weft_error_message());
    mlp_step(&m);
    weft_profiler_stop();
    struct weft_profiler_average *rows;
    size_t n;
    cr_assert_eq(weft_profiler_key_averages(false, &rows, &n), 0);
    /* The ops of the step (forward: fused linear+relu, addmm's matmul, log_softmax and
     * nll; backward: their formulas; the optimizer: one fused SGD step per parameter).
     * A change here is a change in what a training step costs: update the list knowingly. */
    static const struct {
        const char *name;
        int64_t calls;
    } expected[] = {
        {"matmul", 5}, {"add_bias_relu", 1}, {"log_softmax", 1}, {"sgd_step", 4},
    };
    for (size_t i = 0; i < sizeof expected / sizeof expected[0]; i++) {
        const struct weft_profiler_average *r = row(rows, n, expected[i].name);
        cr_assert_not_null(r, "op %s was not dispatched", expected[i].name);
        cr_expect_eq(r->calls, expected[i].calls, "%s: %lld calls, expected %lld", expected[i].name,
                     (long long)r->calls, (long long)expected[i].calls);
    }
    int64_t ops = 0;
    char seen[2048] = "";
    for (size_t i = 0; i < n; i++) {
        if (rows[i].is_range)
            continue;
        ops += rows[i].calls;
        size_t len = strlen(seen);
        snprintf(seen + len, sizeof seen - len, "%s:%lld ", rows[i].name, (long long)rows[i].calls);
    }
    cr_log_info("one MLP step: %s", seen);
    cr_expect_str_eq(seen, MLP_STEP_OPS, "the step's ops changed: %s", seen);
    cr_expect_not_null(row(rows, n, "forward"));
    cr_expect_not_null(row(rows, n, "backward"));
    cr_expect_not_null(row(rows, n, "ReluBackward0"), "the engine's nodes are ranges");
    /* nesting: the backward range's total holds its nodes' */
    const struct weft_profiler_average *bw = row(rows, n, "backward");
    cr_expect(bw->total_us >= bw->self_us && bw->self_us < bw->total_us);
    free(rows);
    mlp_free(&m);
}

/* The backward formulas a backend runs in one pass (threshold_backward for ReLU,
 * tanh_backward, sigmoid_backward, gelu_backward) are ops the profiler sees, each in its
 * node; they ran their kernels past the funnel once, and their time showed as the node's. */
Test(profiler, one_pass_backward_kernels_are_ops_in_their_nodes)
{
    int64_t s[2] = {4, 8};
    weft_tensor *x = weft_ones(2, s, WEFT_F32, WEFT_CPU);
    weft_requires_grad_(x, true);
    weft_tensor *y = weft_add(weft_add(weft_relu(x), weft_tanh(x)),
                              weft_add(weft_sigmoid(x), weft_gelu(x)));
    weft_tensor *loss = weft_sum(y, 0, NULL, false);
    cr_assert_eq(weft_profiler_start(NULL), 0, "%s", weft_error_message());
    cr_assert_eq(weft_backward(loss, NULL, false), 0, "%s", weft_error_message());
    weft_profiler_stop();
    const char *path = tu_tmp_path("backward.json");
    cr_assert_eq(weft_profiler_export_chrome_trace(path), 0, "%s", weft_error_message());
    static char text[1 << 18];
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    text[fread(text, 1, sizeof text - 1, f)] = '\0';
    fclose(f);
    static const char *const pairs[][2] = {{"threshold_backward", "ReluBackward0"},
                                           {"tanh_backward", "TanhBackward0"},
                                           {"sigmoid_backward", "SigmoidBackward0"},
                                           {"gelu_backward", "GeluBackward0"}};
    for (size_t i = 0; i < sizeof pairs / sizeof *pairs; i++) {
        char name[64], node[96];
        snprintf(name, sizeof name, "\"name\": \"%s\"", pairs[i][0]);
        snprintf(node, sizeof node, "\"autograd node\": \"%s\"", pairs[i][1]);
        const char *e = strstr(text, name);
        cr_expect_not_null(e, "no %s op in the trace", pairs[i][0]);
        const char *end = e ? strchr(e, '}') : NULL;
        const char *n = e ? strstr(e, node) : NULL;
        cr_expect(n && n < end, "%s ran outside %s: %.300s", pairs[i][0], pairs[i][1], e ? e : "");
    }
}

Test(profiler, off_records_nothing_and_ranges_are_ignored)
{
    weft_profiler_clear();
    weft_profiler_range_push("nothing");
    int64_t s[1] = {4};
    weft_add(weft_ones(1, s, WEFT_F32, WEFT_CPU), weft_ones(1, s, WEFT_F32, WEFT_CPU));
    weft_profiler_range_pop();
    struct weft_profiler_average *rows;
    size_t n;
    cr_assert_eq(weft_profiler_key_averages(false, &rows, &n), 0);
    cr_expect_eq(n, 0);
    free(rows);
    cr_expect(!weft_profiler_enabled());
}

/* Off, the core has no observer (its hooks cost one untaken branch); the profiler and the
 * memory history each set it, and it goes when both are off. Another observer keeps the
 * profiler from starting. */
Test(profiler, it_observes_the_core_only_while_on)
{
    cr_expect_null(weft_observer_get());
    cr_assert_eq(weft_profiler_start(NULL), 0);
    const struct weft_observer *mine = weft_observer_get();
    cr_expect_not_null(mine);
    cr_assert_eq(weft_memory_record_history(true), 0);
    weft_profiler_stop();
    cr_expect_eq(weft_observer_get(), mine, "the history still observes");
    weft_memory_record_history(false);
    cr_expect_null(weft_observer_get());

    static const struct weft_observer other = {.struct_size = sizeof other};
    cr_assert_eq(weft_observer_set(&other), 0);
    cr_expect_neq(weft_profiler_start(NULL), 0);
    tu_assert_error(WEFT_ERR_RUNTIME, "an observer is already set");
    cr_expect(!weft_profiler_enabled());
    weft_error_clear();
    cr_assert_eq(weft_observer_set(NULL), 0);
}

Test(profiler, ops_carry_shapes_memory_and_the_layout_copies_are_counted)
{
    cr_assert_eq(weft_profiler_start(NULL), 0);
    int64_t s[2] = {32, 64};
    weft_tensor *a = weft_ones(2, s, WEFT_F32, WEFT_CPU);
    weft_tensor *t = weft_transpose(a, 0, 1);
    weft_tensor *c = weft_contiguous(t);      /* a layout copy: 64x32 floats */
    weft_tensor *d = weft_clone(a);            /* same strides: a copy, not a layout copy */
    weft_tensor *e = weft_to_dtype(a, WEFT_F64); /* a conversion, not a layout copy */
    cr_assert(c && d && e);
    weft_profiler_stop();
    int64_t bytes = 0;
    cr_expect_eq(weft_profiler_layout_copies(&bytes), 1);
    cr_expect_eq(bytes, 32 * 64 * 4);
    struct weft_profiler_average *rows;
    size_t n;
    cr_assert_eq(weft_profiler_key_averages(true, &rows, &n), 0);
    const struct weft_profiler_average *copy = NULL;
    for (size_t i = 0; i < n; i++)
        if (strcmp(rows[i].name, "copy") == 0 && strcmp(rows[i].input_shapes, "[[64, 32]]") == 0)
            copy = &rows[i];
    cr_assert_not_null(copy, "grouped by input shape, contiguous()'s copy reads [64, 32]");
    cr_expect_eq(copy->alloc_bytes, 32 * 64 * 4, "its output was allocated for it");
    free(rows);
    char *table = weft_profiler_table("count", 5);
    cr_assert_not_null(table);
    cr_expect_not_null(strstr(table, "Layout copies (contiguous/clone into other strides): 1 (8.00 Kb)"),
                       "%s", table);
    cr_expect_not_null(strstr(table, "# of Calls"));
    free(table);
    cr_expect_null(weft_profiler_table("by_magic", 0));
    tu_assert_error(WEFT_ERR_VALUE, "sort_by 'by_magic' is not one of");
}

/* The trace is one JSON object whose events all have ph, ts, dur, pid and tid (checked
 * field by field here; tests/train-profile.sh parses it with Python's json). */
Test(profiler, chrome_trace_events_have_ph_ts_dur_pid_tid)
{
    struct mlp m = mlp_new();
    cr_assert_eq(weft_profiler_start(NULL), 0);
    mlp_step(&m);
    weft_profiler_stop();
    const char *path = tu_tmp_path("trace.json");
    cr_assert_eq(weft_profiler_export_chrome_trace(path), 0, "%s", weft_error_message());
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    char line[8192];
    int events = 0;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "{\"ph\"", 5) != 0)
            continue;
        events++;
        const char *keys[] = {"\"ph\": \"X\"", "\"ts\": ", "\"dur\": ", "\"pid\": ", "\"tid\": "};
        for (int k = 0; k < 5; k++)
            cr_assert_not_null(strstr(line, keys[k]), "event without %s: %s", keys[k], line);
    }
    fclose(f);
    cr_expect_gt(events, 20);
    mlp_free(&m);
}

Test(profiler, the_schedule_reports_active_steps_only)
{
    const char *dir = tu_tmp_path("prof");
    struct weft_profiler_schedule s = {.skip_first = 1, .wait = 1, .warmup = 1, .active = 2,
                                       .repeat = 1};
    cr_assert_eq(weft_profiler_schedule_begin(dir, &s, NULL), 0, "%s", weft_error_message());
    int64_t sh[1] = {8};
    int reports = 0;
    for (int step = 0; step < 8; step++) {
        weft_add(weft_ones(1, sh, WEFT_F32, WEFT_CPU), weft_ones(1, sh, WEFT_F32, WEFT_CPU));
        int rc = weft_profiler_step();
        cr_assert_geq(rc, 0, "%s", weft_error_message());
        reports += rc;
        /* steps 0 skipped, 1 waits, 2 warms up, 3-4 active: reported after step 4 */
        cr_expect_eq(rc, step == 4 ? 1 : 0, "step %d", step);
        if (step == 4) {
            struct weft_profiler_average *rows;
            size_t n;
            cr_assert_eq(weft_profiler_key_averages(false, &rows, &n), 0);
            const struct weft_profiler_average *add = row(rows, n, "add");
            cr_assert_not_null(add);
            cr_expect_eq(add->calls, 2, "the warm-up's ops are dropped");
            cr_expect_not_null(row(rows, n, "ProfilerStep#3"));
            cr_expect_not_null(row(rows, n, "ProfilerStep#4"));
            free(rows);
        }
    }
    cr_expect_eq(reports, 1);
    cr_expect_eq(weft_profiler_schedule_end(), 0);
    char path[4200];
    snprintf(path, sizeof path, "%s/trace.1.json", dir);
    FILE *f = fopen(path, "r");
    cr_expect_not_null(f, "%s", path);
    if (f)
        fclose(f);
    snprintf(path, sizeof path, "%s/ops.1.txt", dir);
    f = fopen(path, "r");
    cr_expect_not_null(f, "%s", path);
    if (f)
        fclose(f);
    struct weft_profiler_schedule bad = {.active = 0};
    cr_expect_lt(weft_profiler_schedule_begin(dir, &bad, NULL), 0);
    tu_assert_error(WEFT_ERR_VALUE, "active >= 1");
}

Test(profiler, the_snapshot_names_the_op_of_each_live_block)
{
    weft_memory_record_history(true);
    int64_t s[2] = {16, 32};
    weft_tensor *a = weft_ones(2, s, WEFT_F32, WEFT_CPU);       /* fill */
    weft_tensor *b = weft_exp(a);                               /* exp */
    cr_assert(a && b);
    const char *path = tu_tmp_path("snapshot.json");
    cr_assert_eq(weft_memory_snapshot(WEFT_CPU, path), 0, "%s", weft_error_message());
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    static char text[1 << 20];
    size_t len = fread(text, 1, sizeof text - 1, f);
    text[len] = '\0';
    fclose(f);
    cr_expect_not_null(strstr(text, "\"segments\": ["));
    cr_expect_not_null(strstr(text, "\"op\": \"exp\", \"range\": \"\", \"shape\": [16, 32], "
                                    "\"dtype\": \"float32\""), "%s", text);
    cr_expect_not_null(strstr(text, "\"op\": \"fill\""));
    cr_expect_not_null(strstr(text, "\"state\": \"active_allocated\""));
}

/* memory_detail's figures for the cpu, as memory_summary prints them. */
static struct weft_memory_detail cpu_detail(void)
{
    const struct weft_backend *b = weft_backend_get(WEFT_DEVICE_CPU);
    struct weft_memory_detail d = {.struct_size = sizeof d};
    cr_assert(b && WEFT_VTABLE_HAS(b, memory_detail), "the cpu backend has memory_detail");
    cr_assert_eq(b->memory_detail(b->context, 0, &d), 0, "%s", weft_error_message());
    return d;
}

#define LARGE WEFT_MEMORY_POOL_LARGE
#define SMALL WEFT_MEMORY_POOL_SMALL

/* PyTorch's _format_size for a cell whose column's all-pools value is pref. */
static void size_cell(char *cell, size_t n, int64_t v, int64_t pref)
{
    static const char *const units[] = {"B  ", "KiB", "MiB", "GiB"};
    int u = 0;
    for (double p = (double)pref; u < 3 && p >= 768.0 * 1024; p /= 1024, u++)
        v /= 1024;
    snprintf(cell, n, "%6lld %s", (long long)v, units[u]);
}

/* A backend with memory_stats alone: the table has the rows those figures fill, "-"
 * where a figure is unknown, and no pools. */
static int stats_count(void *context) { return 1; }
static void *stats_alloc(void *context, int index, size_t nbytes) { (void)index; return malloc(nbytes ? nbytes : 1); }
static void stats_free(void *context, int index, void *p, size_t nbytes) { (void)index, (void)nbytes; free(p); }
static int stats_copy(void *context, weft_tensor *dst, const weft_tensor *src, bool non_blocking)
{
    (void)dst, (void)src, (void)non_blocking;
    return 0;
}
static int stats_stats(void *context, int index, struct weft_memory_stats *out)
{
    (void)index;
    out->allocated_bytes = 3 << 20;
    out->peak_allocated_bytes = 5 << 20;
    out->reserved_bytes = 6 << 20;
    out->peak_reserved_bytes = 6 << 20;
    out->num_allocs = 7;
    out->num_frees = 4;
    out->num_ooms = 2;
    return 0;
}
static const struct weft_backend stats_backend = {
    .base = WEFT_VTABLE(WEFT_KIND_BACKEND, "statsonly", struct weft_backend),
    .device_count = stats_count, .alloc = stats_alloc, .free = stats_free, .copy = stats_copy,
    .memory_stats = stats_stats,
};

Test(profiler, a_backend_with_only_memory_stats_gets_the_rows_they_fill)
{
    int type = weft_register(&stats_backend);
    cr_assert_geq(type, 0, "%s", weft_error_message());
    char *table = weft_memory_summary((weft_device){type, 0}, false);
    cr_assert_not_null(table, "%s", weft_error_message());
    static const char *const rows[] = {
        "weft statsonly memory summary, device ID 0", "statsonly OOMs: 2",
        "| Allocated memory      |   3072 KiB |   5120 KiB |         -  |         -  |",
        "| statsonly reserved me |", /* the name is cut at PyTorch's 21 characters */
        "| Allocations           |       3    |         -  |       7    |       4    |"};
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++)
        cr_expect_not_null(strstr(table, rows[i]), "no '%s' in\n%s", rows[i], table);
    cr_expect_null(strstr(table, "from large pool"), "no pools without memory_detail");
    free(table);
}

/* A caching allocator's view, as a backend's memory_blocks gives it (the cuda plugin's):
 * segments of several blocks. The fake backend hands out the C heap's memory, and lists
 * its one live block inside a made-up 2 MiB small segment beside a pending and a free
 * block, and a free 20 MiB large segment. */
static void *live_ptr;
static size_t live_size;
static void *blocks_alloc(void *context, int index, size_t nbytes)
{
    (void)index;
    live_size = nbytes;
    return live_ptr = malloc(nbytes ? nbytes : 1);
}
static void blocks_free(void *context, int index, void *p, size_t nbytes)
{
    (void)index, (void)nbytes;
    if (p == live_ptr)
        live_ptr = NULL;
    free(p);
}
static int blocks_list(void *context, int index, struct weft_memory_block **out, size_t *n)
{
    (void)index;
    void *small = (void *)(uintptr_t)0x200000, *large = (void *)(uintptr_t)0x400000;
    struct weft_memory_block b[4] = {
        {.ptr = live_ptr, .size = 512, .requested_size = live_size, .segment = small,
         .segment_size = 2 << 20, .small_pool = true, .allocated = true},
        {.ptr = (char *)small + 512, .size = 512, .requested_size = 100, .segment = small,
         .segment_size = 2 << 20, .stream = 7, .small_pool = true, .pending = true},
        {.ptr = (char *)small + 1024, .size = (2 << 20) - 1024, .segment = small,
         .segment_size = 2 << 20, .small_pool = true},
        {.ptr = large, .size = 20 << 20, .segment = large, .segment_size = 20 << 20},
    };
    size_t first = live_ptr ? 0 : 1; /* no live block: the segment starts with the pending one */
    *n = 4 - first;
    *out = malloc(*n * sizeof **out);
    if (!*out)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of memory");
    memcpy(*out, b + first, *n * sizeof **out);
    return 0;
}
static int blocks_fill(const struct weft_op_call *call)
{
    (void)call;
    return 0;
}
static const struct weft_backend blocks_backend = {
    .base = WEFT_VTABLE(WEFT_KIND_BACKEND, "blocks", struct weft_backend),
    .device_count = stats_count, .alloc = blocks_alloc, .free = blocks_free, .copy = stats_copy,
    .memory_blocks = blocks_list,
};

static int count_of(const char *text, const char *what)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, what)) != NULL; p += strlen(what))
        n++;
    return n;
}

Test(profiler, the_snapshot_lists_a_caching_allocators_segments_and_blocks)
{
    int type = weft_register(&blocks_backend);
    cr_assert_geq(type, 0, "%s", weft_error_message());
    cr_assert_eq(weft_kernel_register(WEFT_OP_FILL, type, WEFT_LAYOUT_STRIDED, WEFT_DTYPES_ALL,
                                      blocks_fill), 0, "%s", weft_error_message());
    weft_device dev = {type, 0};
    cr_assert_eq(weft_memory_record_history(true), 0, "%s", weft_error_message());
    int64_t s[1] = {100};
    weft_tensor *t = weft_zeros(1, s, WEFT_F32, dev);
    cr_assert_not_null(t, "%s", weft_error_message());
    const char *path = tu_tmp_path("blocks.json");
    cr_assert_eq(weft_memory_snapshot(dev, path), 0, "%s", weft_error_message());
    static char text[1 << 16];
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    text[fread(text, 1, sizeof text - 1, f)] = '\0';
    fclose(f);
    static const char *const want[] = {
        "{\"device\": \"blocks:0\", \"history\": true, \"segments\": [",
        "{\"device\": 0, \"address\": 2097152, \"total_size\": 2097152, \"allocated_size\": 512, "
        "\"active_size\": 1024, \"requested_size\": 500, \"stream\": 0, \"segment_type\": "
        "\"small\", \"blocks\": [",
        "\"size\": 512, \"requested_size\": 400, \"state\": \"active_allocated\", \"op\": "
        "\"fill\", \"range\": \"\", \"shape\": [100], \"dtype\": \"float32\"}",
        "{\"address\": 2097664, \"size\": 512, \"requested_size\": 100, \"state\": "
        "\"active_pending_free\"}",
        "{\"address\": 2098176, \"size\": 2096128, \"requested_size\": 0, \"state\": \"inactive\"}",
        "{\"device\": 0, \"address\": 4194304, \"total_size\": 20971520, \"allocated_size\": 0, "
        "\"active_size\": 0, \"requested_size\": 0, \"stream\": 0, \"segment_type\": \"large\"",
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        cr_expect_not_null(strstr(text, want[i]), "no '%s' in\n%s", want[i], text);
    /* The live block is the allocator's: not listed again as a segment of its own. */
    cr_expect_eq(count_of(text, "\"total_size\""), 2, "%s", text);
    cr_expect_eq(count_of(text, "\"op\": \"fill\""), 1, "%s", text);
    weft_scope_pop();
    weft_scope_push();
    cr_assert_null(live_ptr, "the tensor was freed");
    cr_assert_eq(weft_memory_snapshot(dev, path), 0, "%s", weft_error_message());
    f = fopen(path, "r");
    cr_assert_not_null(f);
    text[fread(text, 1, sizeof text - 1, f)] = '\0';
    fclose(f);
    cr_expect_eq(count_of(text, "active_allocated"), 0, "%s", text);
    cr_expect_eq(count_of(text, "\"op\""), 0, "nothing live, no op: %s", text);
}

/* A 4 MiB tensor lands in the large pool, ten of 400 bytes in the small one (448-byte
 * blocks, on this thread's lists when it has some); the summary's rows are the
 * allocator's statistics, pool by pool, and its allocated memory weft_memory_stats'. */
Test(profiler, the_cpu_summary_shows_the_allocators_statistics_per_pool)
{
    struct weft_memory_detail d0 = cpu_detail();
    int64_t big[1] = {1 << 20}, small[1] = {100};
    weft_scope_push(); /* the tensors are the test's alone, freed by its releases */
    weft_tensor *a = weft_tensor_retain(weft_ones(1, big, WEFT_F32, WEFT_CPU));
    weft_tensor *t[10];
    for (int i = 0; i < 10; i++)
        t[i] = weft_tensor_retain(weft_zeros(1, small, WEFT_F32, WEFT_CPU));
    weft_scope_pop();
    struct weft_memory_detail d1 = cpu_detail();
    cr_expect_eq(d1.allocated_bytes[LARGE].current - d0.allocated_bytes[LARGE].current, 4 << 20);
    cr_expect_eq(d1.allocation[LARGE].current - d0.allocation[LARGE].current, 1);
    cr_expect_eq(d1.allocated_bytes[SMALL].current - d0.allocated_bytes[SMALL].current, 10 * 448);
    cr_expect_eq(d1.allocation[SMALL].current - d0.allocation[SMALL].current, 10);
    cr_expect_eq(d1.allocated_bytes[SMALL].allocated - d0.allocated_bytes[SMALL].allocated, 10 * 448);
    for (int p = 0; p < WEFT_MEMORY_POOLS; p++) {
        cr_expect_geq(d1.reserved_bytes[p].current, d1.allocated_bytes[p].current, "pool %d", p);
        cr_expect_geq(d1.allocated_bytes[p].peak, d1.allocated_bytes[p].current, "pool %d", p);
        cr_expect_eq(d1.allocated_bytes[p].allocated - d1.allocated_bytes[p].freed,
                     d1.allocated_bytes[p].current, "pool %d", p);
        cr_expect_eq(d1.active_bytes[p].current, d1.allocated_bytes[p].current, "no streams");
        cr_expect_eq(d1.inactive_split_bytes[p].current, 0, "blocks are never split");
    }
    cr_expect_eq(d1.allocated_bytes[0].current,
                 d1.allocated_bytes[LARGE].current + d1.allocated_bytes[SMALL].current);
    struct weft_memory_stats st = {.struct_size = sizeof st};
    cr_assert_eq(weft_memory_stats(WEFT_CPU, &st), 0);
    cr_expect_eq((uint64_t)d1.allocated_bytes[0].current, st.allocated_bytes);

    char *table = weft_memory_summary(WEFT_CPU, false);
    cr_assert_not_null(table, "%s", weft_error_message());
    char all[16], large[16], want[128];
    size_cell(all, sizeof all, (int64_t)st.allocated_bytes, (int64_t)st.allocated_bytes);
    size_cell(large, sizeof large, d1.allocated_bytes[LARGE].current, (int64_t)st.allocated_bytes);
    snprintf(want, sizeof want, "| Allocated memory      | %s |", all);
    cr_expect_not_null(strstr(table, want), "expected '%s' in\n%s", want, table);
    snprintf(want, sizeof want, "|       from large pool | %s |", large);
    cr_expect_not_null(strstr(table, want), "expected '%s' in\n%s", want, table);
    for (const char *row = "CPU OOMs: 0"; row; row = NULL)
        cr_expect_not_null(strstr(table, row), "%s", table);
    static const char *const rows[] = {"| Active memory ", "| CPU reserved memory ",
                                       "| Non-releasable memory ", "| Allocations ",
                                       "| Active allocs ", "| CPU reserved segments ",
                                       "| Non-releasable allocs ", "| Oversize allocations ",
                                       "from small pool", "The cpu allocator's pools"};
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++)
        cr_expect_not_null(strstr(table, rows[i]), "no '%s' in\n%s", rows[i], table);
    free(table);
    table = weft_memory_summary(WEFT_CPU, true);
    cr_assert_not_null(table);
    cr_expect_null(strstr(table, "from large pool"), "abbreviated: no pools");
    free(table);

    weft_tensor_release(a);
    for (int i = 0; i < 10; i++)
        weft_tensor_release(t[i]);
    struct weft_memory_detail d2 = cpu_detail();
    cr_expect_eq(d2.allocated_bytes[LARGE].freed - d1.allocated_bytes[LARGE].freed, 4 << 20);
    cr_expect_eq(d2.allocation[SMALL].freed - d1.allocation[SMALL].freed, 10);
}
