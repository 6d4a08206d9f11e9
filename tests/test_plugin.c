/* tests/test_plugin.c: the plugin loader (manifests, autoload by kind:name, options),
 * the backend kind and the runtime set-up, against the fixture plugins in tests/fixtures. Criterion runs every test in
 * its own process, so each starts with nothing loaded but the cpu plugin. */
#include "testutil.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <weft/backend.h>
#include <weft/plugin.h>
#include <weft/registry.h>

/* The fixture's api:fixture table (tests/fixtures/fixture_good.c). */
struct fixture_api {
    struct weft_vtable base;
    int *answer;
    int *init_calls;
};

static const struct fixture_api *fixture_api(void)
{
    return weft_registry_find(WEFT_KIND_API, "fixture");
}

TestSuite(plugin, .init = tu_setup, .fini = tu_teardown);
/* Without the set-up, which loads the cpu plugin: these tests load it themselves. */
TestSuite(plugin_host);

/* ---- helpers --------------------------------------------------------------------- */

/* Where the build put the fixture plugins. */
static const char *fixtures_dir(void)
{
    static char dir[4096];
    const char *base = getenv("WEFT_TEST_FIXTURES");
    cr_assert_not_null(base, "WEFT_TEST_FIXTURES is not set (run through meson test)");
    snprintf(dir, sizeof dir, "%s/fixtures", base);
    struct stat st;
    if (stat(dir, &st) != 0)
        snprintf(dir, sizeof dir, "%s", base);
    return dir;
}

/* "<fixtures>/weft-<name>.so" in a static buffer. */
static const char *fixture(const char *name)
{
    static char path[4096];
    snprintf(path, sizeof path, "%s/weft-%s.so", fixtures_dir(), name);
    return path;
}

static char *make_temp_dir(void)
{
    char *dir = strdup("/tmp/weft-test-plugin-XXXXXX");
    cr_assert_not_null(dir);
    cr_assert_not_null(mkdtemp(dir), "mkdtemp failed");
    return dir;
}

static void write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "cannot create %s", path);
    cr_assert_eq(fwrite(data, 1, n, f), n);
    fclose(f);
}

static void copy_file(const char *src, const char *dst)
{
    FILE *in = fopen(src, "rb");
    cr_assert_not_null(in, "cannot open %s", src);
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf, in);
    fclose(in);
    write_file(dst, buf, n);
}

/* "<dir>/<name>" in one of two static buffers. */
static const char *tu_tmp_path_in(const char *dir, const char *name)
{
    static char paths[2][4096];
    static int next;
    char *p = paths[next++ % 2];
    snprintf(p, 4096, "%s/%s", dir, name);
    return p;
}

static void remove_dir(char *dir, const char *const *files)
{
    char path[4096];
    for (int i = 0; files[i]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        unlink(path);
    }
    rmdir(dir);
    free(dir);
}

static void assert_error_has(int code, const char *a, const char *b)
{
    char msg[2048];
    snprintf(msg, sizeof msg, "%s", weft_error_message());
    cr_assert(strstr(msg, b) != NULL, "message \"%s\" lacks \"%s\"", msg, b);
    tu_assert_error(code, a);
}

/* ---- refusals ------------------------------------------------------------------------ */

Test(plugin, wrong_abi_version_is_refused_naming_both_versions)
{
    cr_assert_lt(weft_plugin_load(fixture("fixture-abi0")), 0);
    assert_error_has(WEFT_ERR_PLUGIN, "was built for weft ABI 0, but this weft has ABI 3",
                     fixture("fixture-abi0"));
    cr_assert_not(weft_plugin_is_loaded("fixture-abi0"));
}

Test(plugin, an_abi1_plugin_is_refused_naming_both_versions)
{
    /* Its init() aborts: reaching it would kill this test. */
    cr_assert_lt(weft_plugin_load(fixture("fixture-abi1")), 0);
    assert_error_has(WEFT_ERR_PLUGIN, "was built for weft ABI 1, but this weft has ABI 3",
                     "weft-fixture-abi1.so");
    cr_assert_not(weft_plugin_is_loaded("fixture-abi1"));
}

Test(plugin, descriptor_smaller_than_this_abis_is_refused)
{
    cr_assert_lt(weft_plugin_load(fixture("fixture-small")), 0);
    assert_error_has(WEFT_ERR_PLUGIN, "smaller than ABI 3's", "weft-fixture-small.so");
}

Test(plugin, larger_descriptor_from_a_newer_plugin_is_accepted)
{
    cr_assert_eq(weft_plugin_load(fixture("fixture-newer")), 0, "%s", weft_error_message());
    cr_assert(weft_plugin_is_loaded("fixture-newer"));
}

Test(plugin, missing_entry_names_the_symbol_and_dlerror_text)
{
    cr_assert_lt(weft_plugin_load(fixture("fixture-noentry")), 0);
    char msg[2048];
    snprintf(msg, sizeof msg, "%s", weft_error_message());
    cr_assert(strstr(msg, "weft-fixture-noentry.so") != NULL, "%s", msg);
    cr_assert(strstr(msg, "undefined symbol") != NULL, "no dlerror text in: %s", msg);
    tu_assert_error(WEFT_ERR_PLUGIN, "no entry point weft_plugin_init");
}

Test(plugin, file_that_is_not_a_shared_object_reports_dlerror)
{
    char *dir = make_temp_dir();
    char path[4096];
    snprintf(path, sizeof path, "%s/weft-junk.so", dir);
    write_file(path, "not an ELF file\n", 16);
    cr_assert_lt(weft_plugin_load(path), 0);
    assert_error_has(WEFT_ERR_PLUGIN, "cannot load plugin", "weft-junk.so: ");
    remove_dir(dir, (const char *const[]){"weft-junk.so", NULL});
}

Test(plugin, missing_plugin_lists_the_directories_searched)
{
    weft_plugin_path_add(fixtures_dir());
    cr_assert_lt(weft_plugin_load("nosuch"), 0);
    char msg[4096];
    snprintf(msg, sizeof msg, "%s", weft_error_message());
    cr_assert(strstr(msg, fixtures_dir()) != NULL, "search path not listed: %s", msg);
    cr_assert(strstr(msg, getenv("WEFT_PLUGIN_PATH")) != NULL, "env dir not listed: %s", msg);
    cr_assert(strstr(msg, weft_plugin_install_dir()) != NULL, "install dir missing: %s", msg);
    tu_assert_error(WEFT_ERR_PLUGIN, "plugin 'nosuch' not found: no weft-nosuch.so in");
}

Test(plugin, missing_file_by_path_names_it)
{
    cr_assert_lt(weft_plugin_load("/nonexistent/weft-x.so"), 0);
    assert_error_has(WEFT_ERR_PLUGIN, "/nonexistent/weft-x.so", "No such file or directory");
}

Test(plugin, probe_refusal_gives_the_reason_and_skips_init)
{
    /* The fixture's init() aborts: reaching it would kill this test. */
    cr_assert_lt(weft_plugin_load(fixture("fixture-nope")), 0);
    assert_error_has(WEFT_ERR_DEVICE, "no fixture device: the fixture is never usable",
                     "weft-fixture-nope.so");
    cr_assert_not(weft_plugin_is_loaded("fixture-nope"));
    /* Asking again gives the same answer. */
    cr_assert_lt(weft_plugin_load(fixture("fixture-nope")), 0);
    tu_assert_error(WEFT_ERR_DEVICE, "no fixture device");
}

Test(plugin, failing_init_is_reported_with_its_error)
{
    cr_assert_lt(weft_plugin_load(fixture("fixture-initfail")), 0);
    assert_error_has(WEFT_ERR_PLUGIN, "failed to initialise: fixture-initfail: the widget table "
                                      "is full",
                     "weft-fixture-initfail.so");
    cr_assert_not(weft_plugin_is_loaded("fixture-initfail"));
}

Test(plugin, file_whose_name_disagrees_with_its_descriptor_is_refused)
{
    char *dir = make_temp_dir();
    char path[4096];
    snprintf(path, sizeof path, "%s/weft-other.so", dir);
    copy_file(fixture("fixture"), path);
    weft_plugin_path_add(dir);
    cr_assert_lt(weft_plugin_load("other"), 0);
    tu_assert_error(WEFT_ERR_PLUGIN, "calls itself 'fixture', but its file name says 'other'");
    remove_dir(dir, (const char *const[]){"weft-other.so", NULL});
}

/* ---- a good plugin ------------------------------------------------------------------ */

Test(plugin, good_plugin_loads_by_name_from_an_added_directory)
{
    weft_plugin_path_add(fixtures_dir());
    cr_assert_eq(weft_plugin_load("fixture"), 0, "%s", weft_error_message());
    cr_assert(weft_plugin_is_loaded("fixture"));
}

Test(plugin, a_plugins_api_table_is_found_in_the_registry_with_its_owner)
{
    cr_assert_null(fixture_api());
    cr_assert_eq(weft_plugin_load(fixture("fixture")), 0, "%s", weft_error_message());
    const struct fixture_api *api = fixture_api();
    cr_assert_not_null(api);
    cr_assert_eq(*api->answer, 42);
    cr_assert_str_eq(weft_registry_owner(api), "fixture");
    cr_assert_null(weft_registry_find(WEFT_KIND_API, "question"));
    /* The descriptor joins the registry too, once the plugin has started. */
    const struct weft_plugin *desc = weft_registry_find(WEFT_KIND_PLUGIN, "fixture");
    cr_assert_not_null(desc);
    cr_assert_str_eq(desc->version, "1.2.3");
    tu_assert_no_error();
}

Test(plugin, a_manifest_is_read_from_the_file_without_loading_it)
{
    weft_plugin_path_add(fixtures_dir());
    char name[64];
    cr_assert(weft_plugin_find_provider(WEFT_KIND_API, "fixture", name, sizeof name));
    cr_assert_str_eq(name, "fixture");
    cr_assert(weft_plugin_find_provider(WEFT_KIND_MODULE, "scale", name, sizeof name));
    cr_assert_str_eq(name, "fixture-layer");
    cr_assert_not(weft_plugin_find_provider(WEFT_KIND_API, "nothing", name, sizeof name));
    cr_assert_not(weft_plugin_is_loaded("fixture"), "finding a provider loads nothing");
    cr_assert_not(weft_plugin_is_loaded("fixture-layer"));
    struct weft_plugin_info info;
    cr_assert_eq(weft_plugin_inspect(fixture("fixture"), &info), 0);
    cr_assert_str_eq(info.manifest, "provides backend:fixture api:fixture\n");
    tu_assert_no_error();
}

Test(plugin, registry_get_loads_the_plugin_whose_manifest_provides_the_name)
{
    weft_plugin_path_add(fixtures_dir());
    const struct fixture_api *api = weft_registry_get(WEFT_KIND_API, "fixture");
    cr_assert_not_null(api, "%s", weft_error_message());
    cr_assert(weft_plugin_is_loaded("fixture"));
    cr_assert_eq(*api->init_calls, 1);
    cr_assert_not(weft_plugin_is_loaded("fixture-layer"), "only the provider loads");
}

Test(plugin, registry_get_of_a_name_nobody_provides_lists_what_there_is)
{
    weft_plugin_path_add(fixtures_dir());
    cr_assert_null(weft_registry_get(WEFT_KIND_BACKEND, "cpv"));
    assert_error_has(WEFT_ERR_PLUGIN, "no backend 'cpv' (known: cpu, ",
                     "did you mean 'cpu'?), and no plugin on the search path provides "
                     "backend:cpv");
}

/* A broken plugin earlier on the path shadows a good one of the same file name: the
 * error names the broken file and why it was rejected, and says the good one was not
 * tried (it said "no plugin on the search path provides api:fixture", naming nothing). */
Test(plugin, a_broken_plugin_that_shadows_a_good_one_is_named_with_its_reason)
{
    char *dir = make_temp_dir();
    char copy[4096], good[4096];
    snprintf(copy, sizeof copy, "%s/weft-fixture.so", dir);
    snprintf(good, sizeof good, "%s", fixture("fixture"));
    static char head[4000];
    FILE *in = fopen(good, "rb");
    cr_assert_not_null(in);
    cr_assert_eq(fread(head, 1, sizeof head, in), sizeof head);
    fclose(in);
    write_file(copy, head, sizeof head); /* cut: its segments lie past its end */
    weft_plugin_path_add(dir);
    weft_plugin_path_add(fixtures_dir());
    cr_assert_null(weft_registry_get(WEFT_KIND_API, "fixture"));
    char want[12288];
    snprintf(want, sizeof want, "no api 'fixture'; %s, the first file of its name on the search "
             "path, was rejected (cannot load plugin %s: truncated ELF file", copy, copy);
    char tail[8192];
    snprintf(tail, sizeof tail, "it shadows %s, which provides api:fixture and was not tried "
             "(weft loads the first file of a name on the search path", good);
    assert_error_has(WEFT_ERR_PLUGIN, want, tail);
    cr_assert_not(weft_plugin_is_loaded("fixture"), "the shadowed copy was loaded");
    remove_dir(dir, (const char *const[]){"weft-fixture.so", NULL});
}

/* The same for a plugin of another ABI in front (an older build of the same plugin). */
Test(plugin, a_wrong_abi_plugin_that_shadows_a_good_one_is_named_with_both_versions)
{
    char *dir = make_temp_dir();
    char copy[4096];
    snprintf(copy, sizeof copy, "%s/weft-fixture.so", dir);
    copy_file(fixture("fixture-abi0"), copy);
    weft_plugin_path_add(dir);
    weft_plugin_path_add(fixtures_dir());
    cr_assert_null(weft_registry_get(WEFT_KIND_API, "fixture"));
    char want[8192];
    snprintf(want, sizeof want, "was rejected (plugin %s was built for weft ABI 0, but this weft "
             "has ABI %d; rebuild the plugin against this weft); it shadows", copy,
             WEFT_ABI_VERSION);
    assert_error_has(WEFT_ERR_PLUGIN, want, "which provides api:fixture and was not tried");
    remove_dir(dir, (const char *const[]){"weft-fixture.so", NULL});
}

/* A provider in front that fails to load: its own reason, and the later copy named as not
 * tried. */
Test(plugin, a_provider_that_fails_to_load_names_the_later_copy_not_tried)
{
    char *dir = make_temp_dir();
    char copy[4096], later[4096];
    snprintf(copy, sizeof copy, "%s/weft-fixture-liar.so", dir);
    snprintf(later, sizeof later, "%s", fixture("fixture-liar"));
    copy_file(later, copy);
    weft_plugin_path_add(dir);
    weft_plugin_path_add(fixtures_dir());
    cr_assert_null(weft_registry_get(WEFT_KIND_API, "liar"));
    char want[8192];
    snprintf(want, sizeof want, "cannot load the plugin that provides api:liar: plugin %s failed "
             "to initialise: its manifest says it provides api:liar", copy);
    char tail[8192];
    snprintf(tail, sizeof tail, "; a later copy, %s, was not tried (weft loads the first file of "
             "a name on the search path", later);
    assert_error_has(WEFT_ERR_PLUGIN, want, tail);
    remove_dir(dir, (const char *const[]){"weft-fixture-liar.so", NULL});
}

Test(plugin, a_manifest_that_promises_what_init_does_not_register_fails_the_load)
{
    cr_assert_lt(weft_plugin_load(fixture("fixture-liar")), 0);
    assert_error_has(WEFT_ERR_PLUGIN, "its manifest says it provides api:liar, but init() "
                                      "registered no api 'liar'",
                     "weft-fixture-liar.so failed to initialise");
    cr_assert_not(weft_plugin_is_loaded("fixture-liar"));
}

static const weft_options *fixture_options(void *ctx, const char *plugin)
{
    return strcmp(plugin, "fixture") == 0 ? ctx : NULL;
}

Test(plugin, init_gets_the_options_the_host_supplies_for_the_plugin)
{
    weft_options *o = weft_options_new("fixture", "host.ini");
    cr_assert_eq(weft_options_set(o, "answer", "7"), 0);
    weft_plugin_set_options_source(fixture_options, o);
    cr_assert_eq(weft_plugin_load(fixture("fixture")), 0, "%s", weft_error_message());
    cr_assert_eq(*fixture_api()->answer, 7);
    weft_plugin_set_options_source(NULL, NULL);
    weft_options_free(o);
}

Test(plugin, a_bad_option_fails_the_plugins_init_naming_the_key)
{
    weft_options *o = weft_options_new("fixture", "host.ini");
    cr_assert_eq(weft_options_set(o, "answer", "many"), 0);
    weft_plugin_set_options_source(fixture_options, o);
    cr_assert_lt(weft_plugin_load(fixture("fixture")), 0);
    tu_assert_error(WEFT_ERR_PLUGIN, "host.ini: [fixture] answer = 'many': expected an integer");
    weft_plugin_set_options_source(NULL, NULL);
    weft_options_free(o);
}

static const weft_options *cpu_options(void *ctx, const char *plugin)
{
    return strcmp(plugin, "cpu") == 0 ? ctx : NULL;
}

Test(plugin_host, a_manifest_env_line_sets_the_variable_before_the_plugin_loads)
{
    unsetenv("OMP_WAIT_POLICY");
    weft_options *o = weft_options_new("cpu", "host.ini");
    cr_assert_eq(weft_options_set(o, "wait_policy", "active"), 0);
    weft_plugin_set_options_source(cpu_options, o);
    cr_assert_not_null(weft_backend_get(WEFT_DEVICE_CPU), "%s", weft_error_message());
    const char *policy = getenv("OMP_WAIT_POLICY");
    cr_assert_not_null(policy);
    cr_assert_str_eq(policy, "active");
    weft_plugin_set_options_source(NULL, NULL);
    weft_options_free(o);
}

Test(plugin_host, a_manifest_env_value_of_default_leaves_the_variable_unset)
{
    unsetenv("OMP_WAIT_POLICY");
    cr_assert_not_null(weft_backend_get(WEFT_DEVICE_CPU), "%s", weft_error_message());
    cr_assert_null(getenv("OMP_WAIT_POLICY"), "the cpu plugin's default wait_policy set "
                                               "OMP_WAIT_POLICY=%s", getenv("OMP_WAIT_POLICY"));
}

Test(plugin_host, a_manifest_env_line_keeps_a_value_the_user_set)
{
    setenv("OMP_WAIT_POLICY", "ACTIVE", 1);
    cr_assert_not_null(weft_backend_get(WEFT_DEVICE_CPU), "%s", weft_error_message());
    cr_assert_str_eq(getenv("OMP_WAIT_POLICY"), "ACTIVE");
}

Test(plugin_host, the_cpu_plugin_reads_its_threads_and_checks_its_wait_policy)
{
    weft_options *o = weft_options_new("cpu", "host.ini");
    cr_assert_eq(weft_options_set(o, "threads", "3"), 0);
    weft_plugin_set_options_source(cpu_options, o);
    cr_assert_not_null(weft_backend_get(WEFT_DEVICE_CPU), "%s", weft_error_message());
    cr_assert_eq(weft_get_num_threads(), 3);
    weft_plugin_set_options_source(NULL, NULL);
    weft_options_free(o);
}

Test(plugin_host, a_bad_cpu_wait_policy_is_refused_with_the_choices)
{
    weft_options *o = weft_options_new("cpu", "host.ini");
    cr_assert_eq(weft_options_set(o, "wait_policy", "spin"), 0);
    weft_plugin_set_options_source(cpu_options, o);
    cr_assert_null(weft_backend_get(WEFT_DEVICE_CPU));
    tu_assert_error(WEFT_ERR_PLUGIN, "host.ini: [cpu] wait_policy = 'spin': expected one of "
                                     "default, passive, active");
    weft_plugin_set_options_source(NULL, NULL);
    weft_options_free(o);
}

/* The cpu plugin's default wait: a bounded spin (GOMP_SPINCOUNT), then sleep. The manifest
 * sets the count before libgomp loads, unless a wait policy is set: by [cpu] wait_policy
 * (an earlier line of the manifest) or by the user's environment. */
static void load_cpu_with(const char *key, const char *value, const char *key2,
                          const char *value2)
{
    weft_options *o = weft_options_new("cpu", "host.ini");
    if (key)
        cr_assert_eq(weft_options_set(o, key, value), 0);
    if (key2)
        cr_assert_eq(weft_options_set(o, key2, value2), 0);
    weft_plugin_set_options_source(cpu_options, o);
    cr_assert_not_null(weft_backend_get(WEFT_DEVICE_CPU), "%s", weft_error_message());
    weft_plugin_set_options_source(NULL, NULL);
    weft_options_free(o);
}

Test(plugin_host, the_cpu_plugins_default_wait_is_a_bounded_spin)
{
    unsetenv("OMP_WAIT_POLICY");
    unsetenv("GOMP_SPINCOUNT");
    load_cpu_with(NULL, NULL, NULL, NULL);
    cr_assert_null(getenv("OMP_WAIT_POLICY"));
    cr_assert_not_null(getenv("GOMP_SPINCOUNT"), "no spin bound set");
    cr_assert_str_eq(getenv("GOMP_SPINCOUNT"), "20000");
}

Test(plugin_host, cpu_spin_count_sets_the_bound)
{
    unsetenv("OMP_WAIT_POLICY");
    unsetenv("GOMP_SPINCOUNT");
    load_cpu_with("spin_count", "5000", NULL, NULL);
    cr_assert_str_eq(getenv("GOMP_SPINCOUNT"), "5000");
}

Test(plugin_host, cpu_spin_count_default_leaves_libgomps_own)
{
    unsetenv("OMP_WAIT_POLICY");
    unsetenv("GOMP_SPINCOUNT");
    load_cpu_with("spin_count", "default", NULL, NULL);
    cr_assert_null(getenv("GOMP_SPINCOUNT"), "GOMP_SPINCOUNT=%s", getenv("GOMP_SPINCOUNT"));
}

Test(plugin_host, a_wait_policy_from_the_config_leaves_the_spin_unbounded_by_weft)
{
    unsetenv("OMP_WAIT_POLICY");
    unsetenv("GOMP_SPINCOUNT");
    load_cpu_with("wait_policy", "passive", NULL, NULL);
    cr_assert_str_eq(getenv("OMP_WAIT_POLICY"), "passive");
    cr_assert_null(getenv("GOMP_SPINCOUNT"), "GOMP_SPINCOUNT=%s would override passive",
                   getenv("GOMP_SPINCOUNT"));
}

Test(plugin_host, a_wait_policy_from_the_environment_leaves_the_spin_alone)
{
    setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    unsetenv("GOMP_SPINCOUNT");
    load_cpu_with(NULL, NULL, NULL, NULL);
    cr_assert_null(getenv("GOMP_SPINCOUNT"), "GOMP_SPINCOUNT=%s would override PASSIVE",
                   getenv("GOMP_SPINCOUNT"));
}

Test(plugin_host, a_spin_count_in_the_environment_wins)
{
    unsetenv("OMP_WAIT_POLICY");
    setenv("GOMP_SPINCOUNT", "123", 1);
    load_cpu_with("spin_count", "5000", NULL, NULL);
    cr_assert_str_eq(getenv("GOMP_SPINCOUNT"), "123");
}

static void cpu_option_fails(const char *key, const char *value, const char *key2,
                             const char *value2, const char *text)
{
    unsetenv("OMP_WAIT_POLICY");
    unsetenv("GOMP_SPINCOUNT");
    weft_options *o = weft_options_new("cpu", "host.ini");
    cr_assert_eq(weft_options_set(o, key, value), 0);
    if (key2)
        cr_assert_eq(weft_options_set(o, key2, value2), 0);
    weft_plugin_set_options_source(cpu_options, o);
    cr_assert_null(weft_backend_get(WEFT_DEVICE_CPU));
    tu_assert_error(WEFT_ERR_PLUGIN, text);
    weft_plugin_set_options_source(NULL, NULL);
    weft_options_free(o);
}

Test(plugin_host, a_bad_cpu_spin_count_is_refused_naming_the_key)
{
    cpu_option_fails("spin_count", "lots", NULL, NULL,
                     "host.ini: [cpu] spin_count = 'lots': expected a number of spins from 0 "
                     "to 10^12, 'infinite' or 'default' (libgomp's own)");
}

Test(plugin_host, a_spin_count_with_a_wait_policy_is_refused)
{
    cpu_option_fails("wait_policy", "passive", "spin_count", "100",
                     "host.ini: [cpu] spin_count = '100': a spin count bounds the spin of "
                     "wait_policy = default, not of wait_policy = passive: set one of the two");
}

Test(plugin, a_manifest_env_line_with_an_unknown_ending_is_refused_naming_the_line)
{
    unsetenv("WEFT_FIXTURE_BADENV");
    cr_assert_lt(weft_plugin_load(fixture("fixture-badenv")), 0);
    assert_error_has(WEFT_ERR_PLUGIN, "plugin fixture-badenv: manifest line 2: expected 'env "
                                      "VARIABLE KEY DEFAULT [unless VARIABLE2]'",
                     "weft-fixture-badenv.so");
    cr_assert_null(getenv("WEFT_FIXTURE_BADENV"), "nothing was set");
}

Test(plugin, loading_twice_is_a_no_op)
{
    weft_plugin_path_add(fixtures_dir());
    cr_assert_eq(weft_plugin_load("fixture"), 0, "%s", weft_error_message());
    cr_assert_eq(weft_plugin_load("fixture"), 0, "%s", weft_error_message());
    cr_assert_eq(weft_plugin_load(fixture("fixture")), 0, "%s", weft_error_message());
    cr_assert_not_null(fixture_api());
    cr_assert_eq(*fixture_api()->init_calls, 1, "init ran %d times", *fixture_api()->init_calls);
}

static void *load_fixture(void *arg)
{
    int type = weft_device_type_id("fixture", true);
    bool ok = weft_plugin_load(arg) == 0 && weft_backend_get(type) != NULL;
    return ok ? arg : NULL;
}

Test(plugin, concurrent_loads_initialise_once)
{
    pthread_t t[8];
    for (int i = 0; i < 8; i++)
        cr_assert_eq(pthread_create(&t[i], NULL, load_fixture, (void *)fixture("fixture")), 0);
    for (int i = 0; i < 8; i++) {
        void *ok;
        pthread_join(t[i], &ok);
        cr_assert_not_null(ok, "a thread failed to load the fixture");
    }
    cr_assert_not_null(fixture_api());
    cr_assert_eq(*fixture_api()->init_calls, 1);
}

Test(plugin, good_plugin_registers_its_backend_and_device_type)
{
    cr_assert_eq(weft_plugin_load(fixture("fixture")), 0, "%s", weft_error_message());
    int type = weft_device_type_id("fixture", false);
    cr_assert_geq(type, 1);
    const struct weft_backend *b = weft_backend_find(type);
    cr_assert_not_null(b);
    cr_assert_str_eq(b->base.name, "fixture");
    cr_assert_eq(weft_registry_id(b), type, "a backend's id is its device type");
    cr_assert_eq(weft_device_count(type), 2);
    cr_assert_eq(weft_kernel_dtypes(WEFT_OP_FILL, type, WEFT_LAYOUT_STRIDED),
                 WEFT_DTYPE_BIT(WEFT_F32));
    weft_device dev;
    cr_assert_eq(weft_device_parse("fixture:1", &dev), 0, "%s", weft_error_message());
    cr_assert_eq(dev.type, type);
    cr_assert_eq(dev.index, 1);
    char buf[32];
    cr_assert_str_eq(weft_device_str(dev, buf, sizeof buf), "fixture:1");
}

Test(plugin, backend_get_loads_the_plugin_that_provides_the_device_type)
{
    weft_plugin_path_add(fixtures_dir());
    int type = weft_device_type_id("fixture", true);
    cr_assert_null(weft_backend_find(type));
    const struct weft_backend *b = weft_backend_get(type);
    cr_assert_not_null(b, "%s", weft_error_message());
    cr_assert(weft_plugin_is_loaded("fixture"));
}

Test(plugin, backend_get_without_a_plugin_keeps_the_loaders_reason)
{
    int type = weft_device_type_id("ghost", true);
    cr_assert_null(weft_backend_get(type));
    tu_assert_error(WEFT_ERR_PLUGIN, "no backend for device 'ghost': no backend 'ghost'");
    cr_assert_eq(weft_device_count(type), 0, "an unloadable backend has no devices");
    tu_assert_no_error();
}

/* ---- inspection and scanning ------------------------------------------------------------ */

Test(plugin, inspect_reads_the_descriptor_and_probe_without_initialising)
{
    struct weft_plugin_info info;
    cr_assert_eq(weft_plugin_inspect(fixture("fixture"), &info), 0, "%s", weft_error_message());
    cr_assert_str_eq(info.name, "fixture");
    cr_assert_str_eq(info.version, "1.2.3");
    cr_assert_eq(info.abi_version, WEFT_ABI_VERSION);
    cr_assert_eq(info.struct_size, sizeof(struct weft_plugin));
    cr_assert(info.usable);
    cr_assert_not(info.loaded);
    cr_assert_not(weft_plugin_is_loaded("fixture"));

    cr_assert_eq(weft_plugin_inspect(fixture("fixture-nope"), &info), 0);
    cr_assert_not(info.usable);
    cr_assert_str_eq(info.why, "no fixture device: the fixture is never usable");
}

Test(plugin, inspect_of_a_wrong_abi_reports_its_version)
{
    struct weft_plugin_info info;
    cr_assert_lt(weft_plugin_inspect(fixture("fixture-abi0"), &info), 0);
    cr_assert_eq(info.abi_version, 0);
    cr_assert(strstr(info.why, "ABI 0") != NULL, "%s", info.why);
    tu_assert_error(WEFT_ERR_PLUGIN, "ABI 0");
}

struct seen {
    char names[32][64];
    char why[32][512];
    char path[32][4096];
    int n;
};

static void record(const struct weft_plugin_info *info, void *ctx)
{
    struct seen *s = ctx;
    cr_assert_lt(s->n, 32);
    snprintf(s->names[s->n], 64, "%s", info->name);
    snprintf(s->why[s->n], 512, "%s", info->why);
    snprintf(s->path[s->n], 4096, "%s", info->path);
    s->n++;
}

static int seen_index(const struct seen *s, const char *name)
{
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->names[i], name) == 0)
            return i;
    return -1;
}

Test(plugin, scan_reports_every_plugin_file_once_first_on_the_path_winning)
{
    /* A copy of the good fixture in a directory searched before the fixtures'. */
    char *dir = make_temp_dir();
    char copy[4096];
    snprintf(copy, sizeof copy, "%s/weft-fixture.so", dir);
    copy_file(fixture("fixture"), copy);
    weft_plugin_path_add(dir);
    weft_plugin_path_add(fixtures_dir());

    static struct seen s;
    int n = weft_plugin_scan(record, &s);
    cr_assert_eq(n, s.n, "%s", weft_error_message());
    const char *expect[] = {"cpu",          "fixture",       "fixture-abi0",
                            "fixture-abi1", "fixture-noentry", "fixture-nope",
                            "fixture-newer", "fixture-small", "fixture-initfail",
                            "fixture-layer", "fixture-liar"};
    for (size_t i = 0; i < sizeof expect / sizeof *expect; i++)
        cr_assert_geq(seen_index(&s, expect[i]), 0, "scan missed %s", expect[i]);
    int good = seen_index(&s, "fixture");
    cr_assert(strncmp(s.path[good], dir, strlen(dir)) == 0, "found %s, not the copy in %s",
              s.path[good], dir);
    for (int i = 0; i < s.n; i++)
        cr_assert(i == good || strcmp(s.names[i], "fixture") != 0, "fixture reported twice");
    cr_assert(strstr(s.why[seen_index(&s, "fixture-abi0")], "ABI 0") != NULL);
    cr_assert(strstr(s.why[seen_index(&s, "fixture-nope")], "no fixture device") != NULL);
    tu_assert_no_error();
    remove_dir(dir, (const char *const[]){"weft-fixture.so", NULL});
}

Test(plugin, search_path_order_is_added_then_env_then_exe_then_installed)
{
    weft_plugin_path_add("/opt/first:/opt/second");
    const char *const *path = weft_plugin_search_path();
    cr_assert_str_eq(path[0], "/opt/first");
    cr_assert_str_eq(path[1], "/opt/second");
    cr_assert_str_eq(path[2], getenv("WEFT_PLUGIN_PATH"));
    int n = 0;
    while (path[n])
        n++;
    cr_assert_str_eq(path[n - 1], weft_plugin_install_dir());
    /* before it, weft/plugins beside the libweft.so that is loaded (an installed tree) */
    bool beside_lib = false;
    for (int i = 0; i < n - 1; i++) {
        size_t len = strlen(path[i]);
        beside_lib |= len > 13 && strcmp(path[i] + len - 13, "/weft/plugins") == 0 &&
                      strstr(path[i], "/core/") != NULL;
    }
    cr_assert(beside_lib, "no <dir of libweft.so>/weft/plugins on the search path");

    setenv("WEFT_PLUGIN_PATH", "/opt/env1:/opt/env2", 1);
    path = weft_plugin_search_path();
    cr_assert_str_eq(path[2], "/opt/env1");
    cr_assert_str_eq(path[3], "/opt/env2");
}

/* ---- the backend kind ----------------------------------------------------------------- */

static int one_device(void *context)
{
    return 1;
}

static void *no_alloc(void *context, int index, size_t nbytes)
{
    return NULL;
}

static void no_free(void *context, int index, void *ptr, size_t nbytes)
{
}

static int no_copy(void *context, weft_tensor *dst, const weft_tensor *src, bool non_blocking)
{
    return 0;
}

static struct weft_backend test_backend(const char *name)
{
    return (struct weft_backend){
        .base = WEFT_VTABLE(WEFT_KIND_BACKEND, name, struct weft_backend),
        .device_count = one_device,
        .alloc = no_alloc,
        .free = no_free,
        .copy = no_copy,
    };
}

Test(plugin, backend_with_a_wrong_abi_is_refused_naming_both_versions)
{
    static struct weft_backend b;
    b = test_backend("oldabi");
    b.base.abi_version = 0;
    cr_assert_lt(weft_register(&b), 0);
    tu_assert_error(WEFT_ERR_PLUGIN, "built for weft ABI 0, but this weft has ABI 3");
}

Test(plugin, backend_smaller_than_this_abis_is_refused_larger_is_accepted)
{
    static struct weft_backend small;
    small = test_backend("small");
    small.base.struct_size = 24;
    cr_assert_lt(weft_register(&small), 0);
    tu_assert_error(WEFT_ERR_PLUGIN, "backend 'small' has struct_size 24, smaller than ABI 3's");

    static struct {
        struct weft_backend backend;
        void *future;
    } big;
    big.backend = test_backend("big");
    big.backend.base.struct_size = sizeof big;
    int type = weft_register(&big.backend);
    cr_assert_geq(type, 1, "%s", weft_error_message());
    cr_assert_eq(weft_backend_find(type), &big.backend);
}

Test(plugin, backend_without_required_methods_is_refused)
{
    static struct weft_backend b;
    b = test_backend("nocopy");
    b.copy = NULL;
    cr_assert_lt(weft_register(&b), 0);
    tu_assert_error(WEFT_ERR_PLUGIN, "backend 'nocopy' lacks a required method");
}

Test(plugin, a_second_backend_for_a_device_type_is_refused)
{
    static struct weft_backend a, b;
    a = test_backend("twice");
    b = test_backend("twice");
    int type = weft_register(&a);
    cr_assert_geq(type, 0);
    cr_assert_eq(weft_register(&a), type, "the same one again is fine");
    cr_assert_lt(weft_register(&b), 0);
    tu_assert_error(WEFT_ERR_PLUGIN, "backend 'twice' is already registered");
}

Test(plugin, device_helpers_check_the_device_index)
{
    struct weft_memory_stats st = {.struct_size = sizeof st};
    weft_device bad = {WEFT_DEVICE_CPU, 3};
    cr_assert_lt(weft_memory_stats(bad, &st), 0);
    tu_assert_error(WEFT_ERR_DEVICE, "only 1 cpu device(s) present");
    cr_assert_eq(weft_memory_stats(WEFT_CPU, &st), 0, "%s", weft_error_message());
    cr_assert_eq(weft_synchronize(WEFT_CPU), 0);
    cr_assert_geq(weft_get_num_threads(), 1);
}

Test(plugin, set_num_threads_reaches_the_cpu_backend)
{
    cr_assert_eq(weft_set_num_threads(3), 0, "%s", weft_error_message());
    cr_assert_eq(weft_get_num_threads(), 3);
    cr_assert_lt(weft_set_num_threads(0), 0);
    tu_assert_error(WEFT_ERR_VALUE, "positive");
}

/* ---- device strings --------------------------------------------------------------------- */

Test(plugin, device_strings_parse_and_print_like_pytorch)
{
    weft_device d;
    char buf[32];
    cr_assert_eq(weft_device_parse("cpu", &d), 0);
    cr_assert(weft_device_equal(d, WEFT_CPU));
    cr_assert_str_eq(weft_device_str(d, buf, sizeof buf), "cpu");
    /* A type is known once a plugin on the search path provides its backend. */
    weft_plugin_path_add(fixtures_dir());
    cr_assert_eq(weft_device_parse("fixture:1", &d), 0, "%s", weft_error_message());
    cr_assert_eq(d.type, weft_device_type_id("fixture", false));
    cr_assert_eq(d.index, 1);
    cr_assert_str_eq(weft_device_str(d, buf, sizeof buf), "fixture:1");
    cr_assert_not(weft_plugin_is_loaded("fixture"), "parsing loads nothing, as torch.device");
    weft_device d0;
    cr_assert_eq(weft_device_parse("fixture", &d0), 0);
    cr_assert(weft_device_equal(d0, (weft_device){d.type, 0}));

    cr_assert_lt(weft_device_parse("gpu", &d), 0);
    tu_assert_error(WEFT_ERR_VALUE,
                    "Expected one of cpu, fixture device type at start of device string: gpu");
    cr_assert_lt(weft_device_parse("fixture:x", &d), 0);
    tu_assert_error(WEFT_ERR_VALUE, "Invalid device string: 'fixture:x'");
    cr_assert_lt(weft_device_parse("fixture:-1", &d), 0);
    tu_assert_error(WEFT_ERR_VALUE, "Device index must not be negative");
    cr_assert_lt(weft_device_parse("cpu:1", &d), 0);
    tu_assert_error(WEFT_ERR_VALUE, "CPU device index must be -1 or zero, got 1");
    cr_assert_str_eq(weft_device_type_name(99), "unknown");
    cr_assert_eq(weft_device_type_id("nosuch", false), -1);
}

/* ---- runtime set-up --------------------------------------------------------------------- */

static struct weft_config *runtime_config(const char *text)
{
    struct weft_config *cfg = weft_config_parse(text, "run.ini");
    cr_assert_not_null(cfg, "%s", weft_error_message());
    return cfg;
}

Test(plugin, runtime_defaults_to_the_cpu)
{
    weft_device dev = {3, 5};
    cr_assert_eq(weft_runtime_init(NULL, &dev), 0, "%s", weft_error_message());
    cr_assert(weft_device_equal(dev, WEFT_CPU));
}

Test(plugin, runtime_selects_a_plugin_backend_and_device)
{
    char text[4096];
    snprintf(text, sizeof text,
             "[runtime]\nbackend = fixture\ndevice = 1\nseed = 7\nplugin_path = %s\n"
             "[fixture]\nanswer = 9\n",
             fixtures_dir());
    struct weft_config *cfg = runtime_config(text);
    weft_device dev;
    cr_assert_eq(weft_runtime_init(cfg, &dev), 0, "%s", weft_error_message());
    cr_assert_eq(dev.type, weft_device_type_id("fixture", false));
    cr_assert_eq(dev.index, 1);
    cr_assert_eq(*fixture_api()->answer, 9, "the plugin got its [fixture] section");
    cr_assert_eq(weft_config_check_unknown(cfg), 0, "%s", weft_error_message());
    weft_config_free(cfg);
}

Test(plugin, runtime_rejects_a_device_index_past_the_count)
{
    char text[4096];
    snprintf(text, sizeof text, "[runtime]\nbackend = fixture\ndevice = 3\nplugin_path = %s\n",
             fixtures_dir());
    struct weft_config *cfg = runtime_config(text);
    weft_device dev;
    cr_assert_lt(weft_runtime_init(cfg, &dev), 0);
    tu_assert_error(WEFT_ERR_DEVICE, "fixture:3 requested but only 2 fixture device(s) present");
    weft_config_free(cfg);
}

Test(plugin, runtime_reports_an_unusable_backend_with_the_probe_reason)
{
    char text[4096];
    snprintf(text, sizeof text, "[runtime]\nbackend = fixture-nope\nplugin_path = %s\n",
             fixtures_dir());
    struct weft_config *cfg = runtime_config(text);
    weft_device dev;
    cr_assert_lt(weft_runtime_init(cfg, &dev), 0);
    tu_assert_error(WEFT_ERR_DEVICE, "backend 'fixture-nope' is not usable");
    weft_config_free(cfg);
}

Test(plugin, runtime_loads_extra_plugins_and_names_the_key_on_failure)
{
    char text[4096];
    snprintf(text, sizeof text, "[runtime]\nplugins = fixture-newer, fixture\nplugin_path = %s\n",
             fixtures_dir());
    struct weft_config *cfg = runtime_config(text);
    weft_device dev;
    cr_assert_eq(weft_runtime_init(cfg, &dev), 0, "%s", weft_error_message());
    cr_assert(weft_plugin_is_loaded("fixture-newer"));
    cr_assert(weft_plugin_is_loaded("fixture"));
    weft_config_free(cfg);

    cfg = runtime_config("[runtime]\nplugins = nosuch\n");
    cr_assert_lt(weft_runtime_init(cfg, &dev), 0);
    tu_assert_error(WEFT_ERR_PLUGIN, "run.ini: [runtime] plugins: 'nosuch': plugin 'nosuch' not "
                                     "found");
    weft_config_free(cfg);
}

Test(plugin, runtime_checks_its_values)
{
    struct weft_config *cfg = runtime_config("[runtime]\nthreads = 2\n");
    weft_device dev;
    cr_assert_lt(weft_runtime_init(cfg, &dev), 0);
    tu_assert_error(WEFT_ERR_CONFIG, "run.ini: [runtime] threads: this setting belongs to the cpu "
                                     "plugin now: write it as [cpu] threads");
    weft_config_free(cfg);

    cfg = runtime_config("[runtime]\ndevice = first\n");
    cr_assert_lt(weft_runtime_init(cfg, &dev), 0);
    tu_assert_error(WEFT_ERR_CONFIG, "run.ini: [runtime] device = 'first': expected an integer");
    weft_config_free(cfg);

    cfg = runtime_config("[runtime]\nbackend = gpu\n");
    cr_assert_lt(weft_runtime_init(cfg, &dev), 0);
    tu_assert_error(WEFT_ERR_PLUGIN, "run.ini: [runtime] backend = 'gpu': no backend 'gpu'");
    weft_config_free(cfg);
}

Test(plugin, runtime_sets_allow_tf32_off_by_default)
{
    weft_device dev;
    cr_assert_eq(weft_runtime_init(NULL, &dev), 0, "%s", weft_error_message());
    cr_assert(!weft_allow_tf32(), "TF32 is off unless asked for, as in PyTorch");
    struct weft_config *cfg = runtime_config("[runtime]\nallow_tf32 = true\n");
    cr_assert_eq(weft_runtime_init(cfg, &dev), 0, "%s", weft_error_message());
    cr_assert(weft_allow_tf32());
    weft_config_free(cfg);
    cfg = runtime_config("[runtime]\nallow_tf32 = maybe\n");
    cr_assert_lt(weft_runtime_init(cfg, &dev), 0);
    tu_assert_error(WEFT_ERR_CONFIG, "allow_tf32");
    weft_config_free(cfg);
}

Test(plugin, memory_summary_tabulates_the_allocator_statistics)
{
    weft_tensor *t = weft_empty(1, (int64_t[]){1 << 20}, WEFT_F32, WEFT_CPU);
    cr_assert_not_null(t);
    char *table = weft_memory_summary(WEFT_CPU, false);
    cr_assert_not_null(table, "%s", weft_error_message());
    cr_assert_not_null(strstr(table, "weft CPU memory summary, device ID 0"), "%s", table);
    cr_assert_not_null(strstr(table, "| Allocated memory      |   4096 KiB |"),
                       "the 4 MiB tensor is counted (PyTorch's units):\n%s", table);
    free(table);
    weft_tensor_release(t);
    weft_device nowhere = {weft_device_type_id("fixture_nodev", true), 0};
    cr_assert_null(weft_memory_summary(nowhere, false));
    tu_assert_error(WEFT_ERR_PLUGIN, "fixture_nodev");
}

Test(plugin, runtime_hands_plugins_their_sections_and_the_unknown_check_covers_them)
{
    char text[4096];
    snprintf(text, sizeof text,
             "[runtime]\nbackend = fixture\nplugin_path = %s\n[fixture]\nanswr = 9\n",
             fixtures_dir());
    struct weft_config *cfg = runtime_config(text);
    weft_device dev;
    cr_assert_eq(weft_runtime_init(cfg, &dev), 0, "%s", weft_error_message());
    cr_assert_lt(weft_config_check_unknown(cfg), 0);
    tu_assert_error(WEFT_ERR_CONFIG, "run.ini: line 5: [fixture] unknown key 'answr' (did you mean "
                                     "'answer'?)");
    weft_config_free(cfg);
}

Test(plugin, a_section_of_a_plugin_this_run_did_not_load_is_not_unknown)
{
    char text[4096];
    snprintf(text, sizeof text, "[runtime]\nplugin_path = %s\n[fixture]\nanswer = 9\n",
             fixtures_dir());
    struct weft_config *cfg = runtime_config(text);
    weft_device dev;
    cr_assert_eq(weft_runtime_init(cfg, &dev), 0, "%s", weft_error_message());
    cr_assert_eq(weft_config_check_unknown(cfg), 0, "%s", weft_error_message());
    weft_config_free(cfg);
}

/* ---- manifests against malformed files --------------------------------------------------- */

Test(plugin, a_manifest_with_an_unknown_directive_is_refused_naming_the_line)
{
    cr_assert_lt(weft_plugin_load(fixture("fixture-badmanifest")), 0);
    assert_error_has(WEFT_ERR_PLUGIN, "plugin fixture-badmanifest: manifest line 2: unknown "
                                      "directive 'requires' (expected provides or env)",
                     "weft-fixture-badmanifest.so");
}

/* Writes the first n bytes of src to dir/name, then, when patch is set, overwrites
 * `len` bytes at offset `at` with `patch`. */
static void write_variant(const char *dir, const char *name, const char *src, size_t n,
                          size_t at, const void *patch, size_t len)
{
    FILE *in = fopen(src, "rb");
    cr_assert_not_null(in);
    static unsigned char buf[1 << 20];
    size_t got = fread(buf, 1, sizeof buf, in);
    fclose(in);
    if (n > got)
        n = got;
    if (patch)
        memcpy(buf + at, patch, len);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    write_file(path, buf, n);
}

Test(plugin, malformed_plugin_files_have_no_manifest_and_break_nothing)
{
    char *dir = make_temp_dir();
    const char *good = fixture("fixture");
    uint64_t huge = UINT64_MAX / 2;
    uint16_t many = 0xffff;
    /* cut inside the section headers; section headers claimed past the end; a huge
     * section count; an empty file; text */
    write_variant(dir, "weft-cut.so", good, 4096, 0, NULL, 0);
    write_variant(dir, "weft-far.so", good, 1 << 20, 0x28, &huge, sizeof huge);
    write_variant(dir, "weft-many.so", good, 1 << 20, 0x3c, &many, sizeof many);
    write_file(tu_tmp_path_in(dir, "weft-empty.so"), "", 0);
    write_file(tu_tmp_path_in(dir, "weft-text.so"), "provides api:text\n", 18);
    weft_plugin_path_add(dir);
    char name[64];
    cr_assert_not(weft_plugin_find_provider(WEFT_KIND_API, "text", name, sizeof name));
    cr_assert_not(weft_plugin_find_provider(WEFT_KIND_API, "nothing", name, sizeof name));
    cr_assert_null(weft_registry_get(WEFT_KIND_API, "nothing"));
    tu_assert_error(WEFT_ERR_PLUGIN, "no plugin on the search path provides api:nothing");
    static struct seen s;
    weft_plugin_scan(record, &s);
    tu_assert_no_error();
    int cut = seen_index(&s, "cut");
    cr_assert_geq(cut, 0);
    cr_assert(strstr(s.why[cut], "a cut or damaged file") != NULL, "%s", s.why[cut]);
    /* dlopen() of it would die of SIGBUS: the loader refuses it first */
    cr_assert_lt(weft_plugin_load(tu_tmp_path_in(dir, "weft-cut.so")), 0);
    tu_assert_error(WEFT_ERR_PLUGIN, "a cut or damaged file");
    remove_dir(dir, (const char *const[]){"weft-cut.so", "weft-far.so", "weft-many.so",
                                          "weft-empty.so", "weft-text.so", NULL});
}

/* ---- truncated plugin files ----------------------------------------------------------- */

/* The build's own cpu plugin, next to the fixtures. */
static const char *cpu_plugin(void)
{
    static char path[4096];
    snprintf(path, sizeof path, "%s", getenv("WEFT_PLUGIN_PATH"));
    char *colon = strchr(path, ':');
    if (colon)
        *colon = '\0';
    snprintf(path + strlen(path), sizeof path - strlen(path), "/weft-cpu.so");
    return path;
}

Test(plugin, the_first_20_kb_of_the_cpu_plugin_are_refused_naming_the_segment)
{
    /* dlopen() of it dies of SIGBUS (weft-info --plugin did, with no message) */
    char *dir = make_temp_dir();
    write_variant(dir, "weft-cpu.so", cpu_plugin(), 20 << 10, 0, NULL, 0);
    const char *cut = tu_tmp_path_in(dir, "weft-cpu.so");
    cr_assert_lt(weft_plugin_check_file(cut), 0);
    char want[4200];
    /* which segment is cut first depends on the build's layout (1 in release, 0 in debug) */
    snprintf(want, sizeof want, "cannot load plugin %s: truncated ELF file: segment ", cut);
    cr_assert(strstr(weft_error_message(), ", the file has 20480: a cut or damaged file") != NULL,
              "%s", weft_error_message());
    tu_assert_error(WEFT_ERR_PLUGIN, want);
    struct weft_plugin_info info;
    cr_assert_lt(weft_plugin_inspect(cut, &info), 0);
    cr_assert(strstr(info.why, "truncated ELF file") != NULL, "%s", info.why);
    weft_error_clear();
    cr_assert_lt(weft_plugin_load(cut), 0);
    tu_assert_error(WEFT_ERR_PLUGIN, "truncated ELF file: segment ");
    weft_error_clear();
    cr_assert_eq(weft_plugin_check_file(cpu_plugin()), 0, "%s", weft_error_message());
    remove_dir(dir, (const char *const[]){"weft-cpu.so", NULL});
}

Test(plugin, every_cut_of_a_plugin_file_is_refused_before_dlopen)
{
    /* Whatever the length: the header, the program headers, a segment, the dynamic
     * section or the section headers (last in the file) is missing. */
    char *dir = make_temp_dir();
    copy_file(fixture("fixture"), tu_tmp_path_in(dir, "weft-fixture.so"));
    const char *path = tu_tmp_path_in(dir, "weft-fixture.so");
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    cr_assert_eq(weft_plugin_check_file(path), 0, "%s", weft_error_message());
    for (off_t size = st.st_size - 1; size >= 0; size--) {
        cr_assert_eq(truncate(path, size), 0);
        int rc = weft_plugin_check_file(path);
        /* below the ELF header's 4-byte magic, it is not ELF: dlopen() refuses that */
        if (size < 64) {
            weft_error_clear();
            continue;
        }
        cr_assert_lt(rc, 0, "a cut at %lld bytes passed the check", (long long)size);
        tu_assert_error(WEFT_ERR_PLUGIN, "a cut or damaged file");
        weft_error_clear();
        if (size % 4096 == 0) { /* the loader refuses it too, without dying */
            cr_assert_lt(weft_plugin_load(path), 0);
            weft_error_clear();
        }
    }
    remove_dir(dir, (const char *const[]){"weft-fixture.so", NULL});
}

Test(plugin, damaged_headers_are_refused_before_dlopen)
{
    char *dir = make_temp_dir();
    const char *good = fixture("fixture");
    uint16_t zero = 0, big = 0x1000;
    uint64_t far = (uint64_t)1 << 40;
    /* e_phentsize 0; e_phnum beyond the file; e_phoff far away; e_shentsize wrong */
    write_variant(dir, "weft-a.so", good, 1 << 20, 0x36, &zero, sizeof zero);
    write_variant(dir, "weft-b.so", good, 1 << 20, 0x38, &big, sizeof big);
    write_variant(dir, "weft-c.so", good, 1 << 20, 0x20, &far, sizeof far);
    write_variant(dir, "weft-d.so", good, 1 << 20, 0x3a, &big, sizeof big);
    static const char *const want[] = {"bad ELF header", "the program headers end at byte",
                                       "the program headers end at byte",
                                       "the section headers end at byte"};
    static const char *const names[] = {"weft-a.so", "weft-b.so", "weft-c.so", "weft-d.so"};
    for (int i = 0; i < 4; i++) {
        cr_assert_lt(weft_plugin_load(tu_tmp_path_in(dir, names[i])), 0, "%s", names[i]);
        tu_assert_error(WEFT_ERR_PLUGIN, want[i]);
        weft_error_clear();
    }
    remove_dir(dir, (const char *const[]){"weft-a.so", "weft-b.so", "weft-c.so", "weft-d.so",
                                          NULL});
}

/* Runs weft-info with args (NULL-terminated), output into *out; returns its wait status. */
static int run_weft_info(const char *const *args, const char *plugin_path, char *out,
                         size_t size)
{
    char exe[4096];
    snprintf(exe, sizeof exe, "%s/../apps/weft-info", getenv("WEFT_TEST_FIXTURES"));
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        dup2(fds[1], 1);
        dup2(fds[1], 2);
        close(fds[0]);
        if (plugin_path)
            setenv("WEFT_PLUGIN_PATH", plugin_path, 1);
        const char *argv[8] = {exe};
        for (int i = 0; args[i] && i < 6; i++)
            argv[i + 1] = args[i];
        execv(exe, (char *const *)argv);
        _exit(127);
    }
    close(fds[1]);
    size_t used = 0;
    ssize_t n;
    while ((n = read(fds[0], out + used, size - 1 - used)) > 0 && used < size - 1)
        used += (size_t)n;
    out[used] = '\0';
    close(fds[0]);
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    return status;
}

Test(plugin, weft_info_reports_a_truncated_plugin_and_does_not_crash)
{
    char exe[4096];
    snprintf(exe, sizeof exe, "%s/../apps/weft-info", getenv("WEFT_TEST_FIXTURES"));
    if (access(exe, X_OK) != 0)
        cr_skip_test("no weft-info at %s", exe);
    char *dir = make_temp_dir();
    write_variant(dir, "weft-cpu.so", cpu_plugin(), 20 << 10, 0, NULL, 0);
    static char out[1 << 16];
    /* on the search path, ahead of the good one: the overview lists it as invalid */
    char search[8192];
    snprintf(search, sizeof search, "%s:%s", dir, getenv("WEFT_PLUGIN_PATH"));
    int status = run_weft_info((const char *const[]){NULL}, search, out, sizeof out);
    cr_assert(WIFEXITED(status), "weft-info died of signal %d:\n%s", WTERMSIG(status), out);
    cr_assert(strstr(out, "truncated ELF file: segment ") != NULL, "%s", out);
    /* diagnosed by name: it used to dlopen() the file first, and die of SIGBUS */
    status = run_weft_info((const char *const[]){"--plugin", tu_tmp_path_in(dir, "weft-cpu.so"),
                                                 NULL},
                           NULL, out, sizeof out);
    cr_assert(WIFEXITED(status), "weft-info --plugin died of signal %d:\n%s", WTERMSIG(status),
              out);
    cr_assert_neq(WEXITSTATUS(status), 0, "%s", out);
    cr_assert(strstr(out, "file check:  failed: cannot load plugin") != NULL, "%s", out);
    cr_assert(strstr(out, "the file has 20480: a cut or damaged file") != NULL, "%s", out);
    remove_dir(dir, (const char *const[]){"weft-cpu.so", NULL});
}

/* Every module type a config may name is listed, with where it comes from, and the
 * optimizer types under the section that names them, [optimizer]. */
Test(plugin, weft_info_lists_every_module_type)
{
    char exe[4096];
    snprintf(exe, sizeof exe, "%s/../apps/weft-info", getenv("WEFT_TEST_FIXTURES"));
    if (access(exe, X_OK) != 0)
        cr_skip_test("no weft-info at %s", exe);
    static char out[1 << 16];
    int status = run_weft_info((const char *const[]){NULL}, NULL, out, sizeof out);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s", out);
    static const char *const listed[] = {
        "    linear               built in (libweft-nn)\n",
        "    lstm                 built in (libweft-nn)\n",
        "    gpt                  built in (libweft-models)\n",
        "    sparse_linear        from plugin sparse\n",
        "  optimizer  optimizer types ([optimizer] type = names them)\n",
    };
    for (size_t i = 0; i < sizeof listed / sizeof *listed; i++)
        cr_assert(strstr(out, listed[i]), "no line '%s' in:\n%s", listed[i], out);
}
