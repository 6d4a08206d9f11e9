/* apps/weft-info.c: what this weft is, which plugins it finds, and what they provide.
 *
 *   weft-info                 version, search path, every plugin, devices per backend
 *   weft-info --plugin FILE   step-by-step diagnosis of one plugin file
 *   weft-info --ops           the op x backend support matrix (dtypes per cell)
 *   weft-info --conformance [DEVICE] [--size small|large]  every op on DEVICE (default
 *                             cpu) checked against the cpu; exit status 1 when any
 *                             op/dtype pair fails; large adds the shapes that take a
 *                             GPU's other paths (weft/conformance.h)
 *   weft-info --memory [DEVICE]  the device allocator's memory_summary table
 *   weft-info --memory CONFIG.ini [--checkpoint N] [--set section.key=value ...]
 *                             what the config's model takes: parameters, buffers and one
 *                             step's peak, with and without checkpointing (info_memory.c)
 *
 * Exit status: 0 when all is well, 1 when conformance fails, 2 on a usage error or a plugin that cannot be used.
 */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft.h>
#include <weft/testkit.h>
#include <weft/train.h>
#include <weft/backend.h>
#include <weft/kernel.h>
#include <weft/plugin.h>
#include <weft/registry.h>

#include <weft/models.h>

#include "app_version.h"
#include "info_memory.h"

#define EXIT_PROBLEM 2

static void usage(FILE *out)
{
    fprintf(out,
            "usage: weft-info [--plugin FILE | --ops | --conformance [DEVICE] [--size SIZE] |\n"
            "                  --memory [DEVICE] |\n"
            "                  --memory CONFIG.ini [--checkpoint N] [--set section.key=value ...]]\n"
            "\n"
            "Prints the weft version, the plugin search path, every plugin found (with its\n"
            "version, ABI, manifest and whether it can run here), what the registry holds by\n"
            "kind, and the devices of each usable backend.\n"
            "\n"
            "  --plugin FILE  diagnose one plugin file: loading, entry point, ABI, probe,\n"
            "                 and what it registers\n"
            "  --ops          the op x backend matrix: the dtypes each backend registers\n"
            "  --conformance [DEVICE] [--size small|large]\n"
            "                 run every op on DEVICE (default cpu) against the cpu (on the\n"
            "                 cpu: against a double reference); exit status 1 on a failure;\n"
            "                 --size large (default small) adds shapes up to 1e6 elements\n"
            "                 that take a GPU's warp, block and split-reduction paths\n"
            "  --memory [DEVICE]\n"
            "                 the allocator statistics of DEVICE (default cpu) as\n"
            "                 torch.cuda.memory_summary() prints them\n"
            "  --memory CONFIG.ini [--checkpoint N] [--set section.key=value ...]\n"
            "                 the memory the config's model takes: parameters, buffers, what\n"
            "                 its forward keeps for backward and the peak of a forward and\n"
            "                 backward on one batch of [data]; --checkpoint N also measures\n"
            "                 it with activation checkpointing (a GPT: every block when\n"
            "                 N > 0; a sequential model: N segments)\n"
            "  --version      weft's version\n"
            "  --help         this text\n"
            "\n"
            "Plugins are searched in WEFT_PLUGIN_PATH (colon-separated), next to the program\n"
            "(../plugins, ../lib/weft/plugins) and in %s.\n"
            "Exit status: 0 ok, 2 usage error or a plugin that cannot be used.\n",
            weft_plugin_install_dir());
}

/* "1.5 MiB" */
static const char *human_bytes(uint64_t n, char *buf, size_t size)
{
    const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)n;
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, size, "%llu B", (unsigned long long)n);
    else
        snprintf(buf, size, "%.1f %s", v, units[u]);
    return buf;
}

/* ---- kernel counts ---------------------------------------------------------------------- */

struct kernel_count {
    int ops;     /* (op, layout) pairs with any kernel */
    int kernels; /* (op, layout, dtype) triples */
};

static struct kernel_count count_kernels(int device_type)
{
    struct kernel_count c = {0, 0};
    int nops = weft_op_count();
    for (int op = 0; op < nops; op++) {
        for (int layout = 0; layout < WEFT_MAX_LAYOUTS; layout++) {
            uint32_t mask = weft_kernel_dtypes(op, device_type, layout);
            if (mask) {
                c.ops++;
                c.kernels += __builtin_popcount(mask);
            }
        }
    }
    return c;
}

/* ---- the overview ---------------------------------------------------------------------- */

struct scan_state {
    char usable[64][64];
    int nusable;
    int problems;
};

/* A plugin whose probe says no is normal (no GPU here); a file that is not a valid
 * plugin is a problem. The scan does not say which, so ask again. */
static bool is_valid_plugin(const char *path)
{
    struct weft_plugin_info again;
    if (weft_plugin_inspect(path, &again) == 0)
        return true;
    weft_error_clear();
    return false;
}

/* The manifest's lines, indented ("provides reader:idx reader:csv"). */
static void print_manifest(const char *manifest)
{
    for (const char *p = manifest; p && *p;) {
        size_t n = strcspn(p, "\n");
        if (n)
            printf("    %.*s\n", (int)n, p);
        p += n + (p[n] == '\n');
    }
}

static void print_plugin(const struct weft_plugin_info *info, void *ctx)
{
    struct scan_state *st = ctx;
    /* struct_size 0: the file never got as far as giving a descriptor. */
    char abi[16] = "?";
    if (info->struct_size)
        snprintf(abi, sizeof abi, "%u", info->abi_version);
    printf("  %-16s %-10s ABI %-3s %s\n", info->name, info->version[0] ? info->version : "-",
           abi, info->path);
    if (info->usable) {
        printf("    usable%s%s%s\n", info->loaded ? ", loaded" : "",
               info->description[0] ? ": " : "", info->description);
        print_manifest(info->manifest);
        if (st->nusable < 64)
            snprintf(st->usable[st->nusable++], 64, "%s", info->name);
        return;
    }
    if (is_valid_plugin(info->path)) {
        printf("    not usable here: %s\n", info->why);
        print_manifest(info->manifest);
        return;
    }
    printf("    invalid: %s\n", info->why);
    st->problems++;
}

static void print_backend(int type)
{
    const struct weft_backend *b = weft_backend_find(type);
    if (!b)
        return;
    int n = b->device_count(b->context);
    printf("  %s: %d device(s)\n", b->base.name, n);
    for (int i = 0; i < n; i++) {
        char name[256] = "";
        if (b->device_name)
            b->device_name(b->context, i, name, sizeof name);
        weft_device dev = {(int16_t)type, (int16_t)i};
        char str[64], label[80];
        /* an emulated device says so wherever it is named: no figure is a GPU's */
        snprintf(label, sizeof label, "%s%s", weft_device_str(dev, str, sizeof str),
                 weft_device_is_emulated(dev) ? " (emulated)" : "");
        printf("    %-8s %s\n", label, name);
    }
    if (b->features)
        printf("    features: %s\n", b->features(b->context));
    struct kernel_count kc = count_kernels(type);
    printf("    kernels: %d ops, %d op/dtype pairs\n", kc.ops, kc.kernels);
}

static void print_cpu_memory(void)
{
    struct weft_memory_stats st = {.struct_size = sizeof st};
    if (weft_memory_stats(WEFT_CPU, &st) < 0) {
        printf("  cpu allocator: %s\n", weft_error_message());
        weft_error_clear();
        return;
    }
    char a[32], r[32], pa[32], pr[32];
    printf("  cpu allocator: %s allocated, %s reserved (peaks %s, %s)\n",
           human_bytes(st.allocated_bytes, a, sizeof a), human_bytes(st.reserved_bytes, r, sizeof r),
           human_bytes(st.peak_allocated_bytes, pa, sizeof pa),
           human_bytes(st.peak_reserved_bytes, pr, sizeof pr));
    printf("    %llu allocations, %llu frees, %llu cache hits\n",
           (unsigned long long)st.num_allocs, (unsigned long long)st.num_frees,
           (unsigned long long)st.num_cache_hits);
}

/* Every kind and what is registered under it, with the plugin that registered each. */
/* Where an entry of the registry comes from: its plugin, else the library (or program)
 * that holds its vtable: libweft-nn's layers, libweft-models' gpt. */
static const char *owner_of(const struct weft_vtable *v, char *buf, size_t size)
{
    const char *owner = weft_registry_owner(v);
    Dl_info info;
    if (owner && *owner) {
        snprintf(buf, size, "from plugin %s", owner);
    } else if (dladdr(v, &info) && info.dli_fname && strstr(info.dli_fname, "/libweft")) {
        const char *lib = strrchr(info.dli_fname, '/') + 1;
        snprintf(buf, size, "built in (%.*s)", (int)strcspn(lib, "."), lib);
    } else {
        snprintf(buf, size, "built in");
    }
    return buf;
}

static void print_registry(void)
{
    /* the module types a config may name beyond nn's and the plugins' */
    if (weft_models_register() != 0) {
        printf("\n%s\n", weft_error_message());
        weft_error_clear();
    }
    printf("\nregistry:\n");
    for (int k = 0; k < weft_registry_count(WEFT_KIND_KIND); k++) {
        const struct weft_kind *kind = weft_registry_at(WEFT_KIND_KIND, k);
        const char *name = kind->base.name;
        if (strcmp(name, WEFT_KIND_KIND) == 0)
            continue;
        printf("  %-10s %s\n", name, kind->description ? kind->description : "");
        int n = weft_registry_count(name);
        if (n == 0)
            printf("    (none)\n");
        for (int i = 0; i < n; i++) {
            const struct weft_vtable *v = weft_registry_at(name, i);
            char owner[160];
            printf("    %-20s %s\n", v->name, owner_of(v, owner, sizeof owner));
        }
    }
}

static int overview(void)
{
    printf("weft %s (ABI %d)\n\n", weft_version(), WEFT_ABI_VERSION);
    printf("plugin search path:\n");
    for (const char *const *p = weft_plugin_search_path(); *p; p++)
        printf("  %s\n", *p);

    struct scan_state st = {.nusable = 0};
    printf("\nplugins:\n");
    int n = weft_plugin_scan(print_plugin, &st);
    if (n < 0) {
        fprintf(stderr, "weft-info: %s\n", weft_error_message());
        return EXIT_PROBLEM;
    }
    if (n == 0)
        printf("  (none found)\n");

    for (int i = 0; i < st.nusable; i++) {
        if (weft_plugin_load(st.usable[i]) < 0) {
            printf("\n%s failed to load: %s\n", st.usable[i], weft_error_message());
            weft_error_clear();
            st.problems++;
        }
    }

    printf("\nbackends:\n");
    for (int type = 0; type < WEFT_MAX_DEVICE_TYPES; type++)
        print_backend(type);
    print_registry();
    printf("\nthreads: %d\n", weft_get_num_threads());
    if (weft_backend_find(WEFT_DEVICE_CPU)) {
        printf("\nmemory:\n");
        print_cpu_memory();
    }
    return st.problems ? EXIT_PROBLEM : 0;
}

/* ---- one plugin, step by step ---------------------------------------------------------- */

#define MAX_KINDS 32

struct snapshot {
    int nkinds;
    const struct weft_kind *kinds[MAX_KINDS];
    int counts[MAX_KINDS];
    struct kernel_count kernels[WEFT_MAX_DEVICE_TYPES];
};

static void take_snapshot(struct snapshot *s)
{
    s->nkinds = 0;
    for (int k = 0; k < weft_registry_count(WEFT_KIND_KIND) && k < MAX_KINDS; k++) {
        s->kinds[s->nkinds] = weft_registry_at(WEFT_KIND_KIND, k);
        s->counts[s->nkinds] = weft_registry_count(s->kinds[s->nkinds]->base.name);
        s->nkinds++;
    }
    for (int t = 0; t < WEFT_MAX_DEVICE_TYPES; t++)
        s->kernels[t] = count_kernels(t);
}

/* How many entries of the kind called name the snapshot saw (0 for a kind it did not). */
static int count_before(const struct snapshot *s, const char *name)
{
    for (int k = 0; k < s->nkinds; k++)
        if (strcmp(s->kinds[k]->base.name, name) == 0)
            return s->counts[k];
    return 0;
}

static void print_registrations(const struct snapshot *before)
{
    struct snapshot after;
    take_snapshot(&after);
    bool any = false;
    for (int k = 0; k < after.nkinds; k++) {
        const char *kind = after.kinds[k]->base.name;
        for (int i = count_before(before, kind); i < after.counts[k]; i++) {
            const struct weft_vtable *v = weft_registry_at(kind, i);
            printf("  %s '%s'\n", kind, v->name);
            any = true;
        }
    }
    for (int t = 0; t < WEFT_MAX_DEVICE_TYPES; t++) {
        int ops = after.kernels[t].ops - before->kernels[t].ops;
        int kernels = after.kernels[t].kernels - before->kernels[t].kernels;
        if (kernels > 0) {
            printf("  kernels on %s: %d ops, %d op/dtype pairs\n", weft_device_type_name(t), ops,
                   kernels);
            any = true;
        }
    }
    if (!any)
        printf("  nothing\n");
}

/* Opens the file ourselves first, so that a failure is shown at the step that failed. */
static int check_entry(const char *path)
{
    /* dlopen() of a cut file dies of SIGBUS instead of failing */
    if (weft_plugin_check_file(path) < 0) {
        printf("file check:  failed: %s\n", weft_error_message());
        weft_error_clear();
        return EXIT_PROBLEM;
    }
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        printf("dlopen:      failed: %s\n", dlerror());
        return EXIT_PROBLEM;
    }
    printf("dlopen:      ok\n");
    dlerror();
    void *entry = dlsym(h, WEFT_PLUGIN_ENTRY);
    if (!entry) {
        const char *err = dlerror();
        printf("entry:       %s missing: %s\n", WEFT_PLUGIN_ENTRY, err ? err : "NULL symbol");
        printf("             (plugins export it with WEFT_PLUGIN_EXPORT; see weft/plugin.h)\n");
        return EXIT_PROBLEM;
    }
    printf("entry:       %s found\n", WEFT_PLUGIN_ENTRY);
    return 0;
}

static int diagnose(const char *path)
{
    printf("file:        %s\n", path);
    if (check_entry(path) != 0)
        return EXIT_PROBLEM;
    struct weft_plugin_info info;
    int rc = weft_plugin_inspect(path, &info);
    printf("ABI version: %u (this weft: %d)\n", info.abi_version, WEFT_ABI_VERSION);
    printf("struct size: %u bytes (this weft's descriptor: %zu)\n", info.struct_size,
           sizeof(struct weft_plugin));
    if (rc < 0) {
        printf("refused:     %s\n", weft_error_message());
        weft_error_clear();
        return EXIT_PROBLEM;
    }
    printf("name:        %s\nversion:     %s\ndescription: %s\n", info.name, info.version,
           info.description);
    printf("manifest:\n");
    print_manifest(info.manifest);
    if (!info.usable) {
        printf("probe:       not usable: %s\n", info.why);
        return EXIT_PROBLEM;
    }
    printf("probe:       usable\n");
    /* Load the host's backend first, so the diff shows only this plugin's registrations. */
    if (!weft_backend_get(WEFT_DEVICE_CPU))
        weft_error_clear();
    struct snapshot before;
    take_snapshot(&before);
    if (weft_plugin_load(path) < 0) {
        printf("init:        failed: %s\n", weft_error_message());
        weft_error_clear();
        return EXIT_PROBLEM;
    }
    printf("init:        ok\nregisters:\n");
    print_registrations(&before);
    return 0;
}

/* ---- the support matrix and the conformance run ---------------------------------------- */

/* Loads every usable plugin quietly, so their backends and kernels are registered. */
static void load_usable(const struct weft_plugin_info *info, void *ctx)
{
    (void)ctx;
    if (info->usable && weft_plugin_load(info->name) < 0)
        weft_error_clear();
}

/* "f32 f64 f16 bf16 i* bool", or "-" when mask is 0. */
static const char *dtype_cell(uint32_t mask, char *buf, size_t size)
{
    static const struct { enum weft_dtype dt; const char *name; } order[] = {
        {WEFT_F32, "f32"}, {WEFT_F64, "f64"}, {WEFT_F16, "f16"}, {WEFT_BF16, "bf16"},
        {WEFT_U8, "u8"}, {WEFT_I8, "i8"}, {WEFT_I16, "i16"}, {WEFT_I32, "i32"},
        {WEFT_I64, "i64"}, {WEFT_BOOL, "bool"},
    };
    size_t len = 0;
    buf[0] = '\0';
    bool all_ints = (mask & WEFT_DTYPES_INTEGRAL) == WEFT_DTYPES_INTEGRAL;
    for (size_t i = 0; i < sizeof order / sizeof order[0] && len < size; i++) {
        enum weft_dtype dt = order[i].dt;
        if (!(mask & WEFT_DTYPE_BIT(dt)))
            continue;
        bool integral = (WEFT_DTYPE_BIT(dt) & WEFT_DTYPES_INTEGRAL) != 0;
        if (all_ints && integral && dt != WEFT_U8)
            continue;
        const char *name = all_ints && integral ? "i*" : order[i].name;
        len += (size_t)snprintf(buf + len, size - len, "%s%s", len ? " " : "", name);
    }
    if (!mask)
        snprintf(buf, size, "-");
    return buf;
}

static int print_ops(void)
{
    weft_plugin_scan(load_usable, NULL);
    weft_error_clear();
    int types[WEFT_MAX_DEVICE_TYPES], ntypes = 0;
    for (int t = 0; t < WEFT_MAX_DEVICE_TYPES; t++)
        if (weft_backend_find(t))
            types[ntypes++] = t;
    printf("%-20s", "op");
    for (int i = 0; i < ntypes; i++)
        printf(" %-28s", weft_device_type_name(types[i]));
    printf("\n");
    for (int op = 0; op < weft_op_count(); op++) {
        if (strcmp(weft_op_name(op), "unknown") == 0)
            continue; /* an id between the built-in ops and the named ones */
        printf("%-20s", weft_op_name(op));
        for (int i = 0; i < ntypes; i++) {
            char cell[96];
            printf(" %-28s", dtype_cell(weft_kernel_dtypes(op, types[i], WEFT_LAYOUT_STRIDED),
                                        cell, sizeof cell));
        }
        printf("\n");
    }
    return 0;
}

static int conformance(const char *device, const char *size)
{
    weft_device dev = WEFT_CPU;
    struct weft_conformance_options o = {.verbose = stdout};
    if (size && weft_conformance_size_parse(size, &o.size) < 0) {
        fprintf(stderr, "weft-info: --size: %s\n", weft_error_message());
        return EXIT_PROBLEM;
    }
    /* "ref:0" names a device type a plugin on the search path provides (its manifest). */
    if (device && weft_device_parse(device, &dev) < 0) {
        fprintf(stderr, "weft-info: %s\n", weft_error_message());
        return EXIT_PROBLEM;
    }
    struct weft_conformance_report rep;
    int rc = weft_conformance_run(dev.type, &o, &rep);
    if (rc < 0) {
        fprintf(stderr, "weft-info: conformance: %s\n", weft_error_message());
        return EXIT_PROBLEM;
    }
    weft_conformance_print(&rep, stdout);
    weft_conformance_report_free(&rep);
    return rc ? 1 : 0;
}

static int memory(const char *device_text)
{
    weft_device dev = WEFT_CPU;
    if (device_text && weft_device_parse(device_text, &dev) < 0) {
        fprintf(stderr, "weft-info: --memory: %s\n", weft_error_message());
        return EXIT_PROBLEM;
    }
    char *table = weft_memory_summary(dev, false);
    if (!table) {
        fprintf(stderr, "weft-info: --memory: %s\n", weft_error_message());
        return EXIT_PROBLEM;
    }
    fputs(table, stdout);
    free(table);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 3 && strcmp(argv[1], "--memory") == 0 && strlen(argv[2]) > 4 &&
        strcmp(argv[2] + strlen(argv[2]) - 4, ".ini") == 0)
        return info_memory_config(argv[2], argc - 3, argv + 3) == 0 ? 0 : EXIT_PROBLEM;
    if ((argc == 2 || argc == 3) && strcmp(argv[1], "--memory") == 0)
        return memory(argc == 3 ? argv[2] : NULL);
    if (argc == 2 && strcmp(argv[1], "--ops") == 0)
        return print_ops();
    if (argc >= 2 && argc <= 5 && strcmp(argv[1], "--conformance") == 0) {
        /* --conformance [DEVICE] [--size SIZE], the device first when both are given */
        const char *device = NULL, *size = NULL;
        int i = 2;
        if (i < argc && strcmp(argv[i], "--size") != 0)
            device = argv[i++];
        if (i + 1 < argc && strcmp(argv[i], "--size") == 0) {
            size = argv[i + 1];
            i += 2;
        }
        if (i == argc)
            return conformance(device, size);
    }
    if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        usage(stdout);
        return 0;
    }
    if (argc == 2 && strcmp(argv[1], "--version") == 0) {
        app_print_version(stdout, "weft-info");
        return 0;
    }
    if (argc == 3 && strcmp(argv[1], "--plugin") == 0) {
        /* A bare file name means this directory, not the search path. */
        char path[4096];
        snprintf(path, sizeof path, "%s%s", strchr(argv[2], '/') ? "" : "./", argv[2]);
        return diagnose(path);
    }
    if (argc != 1) {
        usage(stderr);
        return EXIT_PROBLEM;
    }
    return overview();
}
