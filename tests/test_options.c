/* tests/test_options.c: key/value options and their getters (weft/options.h): what every
 * plugin, reader, optimizer and layer type reads its settings with. */
#include "testutil.h"

#include <math.h>
#include <string.h>

#include <weft/options.h>

TestSuite(options, .init = tu_setup, .fini = tu_teardown);

static weft_options *opts(const char *const *kv)
{
    weft_options *o = weft_options_new("optim", "run.ini");
    cr_assert_not_null(o);
    for (; kv && kv[0]; kv += 2)
        cr_assert_eq(weft_options_set(o, kv[0], kv[1]), 0);
    return o;
}

Test(options, absent_keys_give_the_default_and_null_options_are_empty)
{
    int64_t i = 0;
    double d = 0;
    bool b = false;
    int c = -1;
    cr_assert_eq(weft_options_int(NULL, "n", 7, &i), 0);
    cr_assert_eq(i, 7);
    cr_assert_eq(weft_options_double(NULL, "x", 0.5, &d), 0);
    cr_assert_eq(d, 0.5);
    cr_assert_eq(weft_options_bool(NULL, "b", true, &b), 0);
    cr_assert(b);
    cr_assert_eq(weft_options_choice(NULL, "c", (const char *const[]){"a", "b", NULL}, 1, &c), 0);
    cr_assert_eq(c, 1);
    cr_assert_str_eq(weft_options_string(NULL, "s", "def"), "def");
    cr_assert_not(weft_options_has(NULL, "s"));
    cr_assert_str_eq(weft_options_section(NULL), "");
}

Test(options, typed_getters_parse_whole_values)
{
    weft_options *o = opts((const char *const[]){"n", "-12", "x", "1e-3", "b", "Yes", "c",
                                                 "cosine", "l", " 3 , 4 ", "f", "0.9, 0.999",
                                                 NULL});
    int64_t n;
    double x, f[2];
    bool b;
    int c, k;
    int64_t l[2];
    cr_assert_eq(weft_options_int(o, "n", 0, &n), 0);
    cr_assert_eq(n, -12);
    cr_assert_eq(weft_options_double(o, "x", 0, &x), 0);
    cr_assert_eq(x, 1e-3);
    cr_assert_eq(weft_options_bool(o, "b", false, &b), 0);
    cr_assert(b);
    cr_assert_eq(weft_options_choice(o, "c", (const char *const[]){"step", "cosine", NULL}, 0, &c),
                 0);
    cr_assert_eq(c, 1);
    cr_assert_eq(weft_options_ints(o, "l", 2, l, &k), 0);
    cr_assert_eq(k, 2);
    cr_assert_eq(l[0], 3);
    cr_assert_eq(l[1], 4);
    cr_assert_eq(weft_options_doubles(o, "f", 2, f, &k), 0);
    cr_assert_eq(f[1], 0.999);
    cr_assert_eq(weft_options_ints(o, "absent", 2, l, &k), 0);
    cr_assert_eq(k, 0);
    cr_assert_eq(weft_options_set(o, "n", "5"), 0, "setting again replaces");
    cr_assert_eq(weft_options_int(o, "n", 0, &n), 0);
    cr_assert_eq(n, 5);
    weft_options_free(o);
}

Test(options, bad_values_name_origin_section_key_and_what_was_expected)
{
    weft_options *o = opts((const char *const[]){"n", "12x", "x", "fast", "b", "maybe", "c", "cosin",
                                                 "l", "3,,4", "m", "1,2,3", "r", "9", "p", "0",
                                                 "big", "99999999999999999999", NULL});
    int64_t n, l[2];
    double x;
    bool b;
    int c, k;
    cr_assert_lt(weft_options_int(o, "n", 0, &n), 0);
    tu_assert_error(WEFT_ERR_CONFIG, "run.ini: [optim] n = '12x': expected an integer");
    cr_assert_lt(weft_options_int(o, "big", 0, &n), 0);
    tu_assert_error(WEFT_ERR_CONFIG, "integer out of range");
    cr_assert_lt(weft_options_double(o, "x", 0, &x), 0);
    tu_assert_error(WEFT_ERR_CONFIG, "run.ini: [optim] x = 'fast': expected a number");
    cr_assert_lt(weft_options_bool(o, "b", false, &b), 0);
    tu_assert_error(WEFT_ERR_CONFIG, "b = 'maybe': expected true or false");
    cr_assert_lt(weft_options_choice(o, "c", (const char *const[]){"step", "cosine", NULL}, 0, &c),
                 0);
    tu_assert_error(WEFT_ERR_CONFIG, "c = 'cosin': expected one of step, cosine (did you mean "
                                     "'cosine'?)");
    cr_assert_lt(weft_options_ints(o, "l", 2, l, &k), 0);
    tu_assert_error(WEFT_ERR_CONFIG, "l = '3,,4': expected integers separated by commas");
    cr_assert_lt(weft_options_ints(o, "m", 2, l, &k), 0);
    tu_assert_error(WEFT_ERR_CONFIG, "m = '1,2,3': expected at most 2 comma-separated values");
    cr_assert_lt(weft_options_int_range(o, "r", 0, 1, 4, &n), 0);
    tu_assert_error(WEFT_ERR_CONFIG, "r = '9': expected an integer from 1 to 4");
    cr_assert_lt(weft_options_positive(o, "p", 1, &n), 0);
    tu_assert_error(WEFT_ERR_CONFIG, "p = '0': expected a positive integer");
    cr_assert_lt(weft_options_require(o, "q"), 0);
    tu_assert_error(WEFT_ERR_CONFIG, "run.ini: [optim] missing required key 'q'");
    n = 77;
    cr_assert_lt(weft_options_int(o, "n", 0, &n), 0);
    weft_error_clear();
    cr_assert_eq(n, 77, "a failed getter leaves *out alone");
    weft_options_free(o);
}

Test(options, paths_are_relative_to_the_origins_directory)
{
    weft_options *o = weft_options_new("data", "configs/mnist.ini");
    weft_options_set(o, "rel", "../data/a.gz");
    weft_options_set(o, "abs", "/data/a.gz");
    weft_options_set(o, "empty", "");
    char out[64];
    cr_assert_eq(weft_options_path(o, "rel", out, sizeof out), 1);
    cr_assert_str_eq(out, "configs/../data/a.gz");
    cr_assert_eq(weft_options_path(o, "abs", out, sizeof out), 1);
    cr_assert_str_eq(out, "/data/a.gz");
    cr_assert_eq(weft_options_path(o, "none", out, sizeof out), 0);
    cr_assert_lt(weft_options_path(o, "empty", out, sizeof out), 0);
    tu_assert_error(WEFT_ERR_CONFIG, "empty = '': expected a file path");
    weft_options_free(o);
}

static const char *lookup(void *ctx, const char *section, const char *key)
{
    (*(int *)ctx)++;
    return strcmp(section, "s") == 0 && strcmp(key, "k") == 0 ? "v" : NULL;
}

Test(options, a_view_reads_through_to_its_store)
{
    int calls = 0;
    weft_options *o = weft_options_view("s", NULL, lookup, &calls);
    cr_assert_str_eq(weft_options_string(o, "k", NULL), "v");
    cr_assert_null(weft_options_string(o, "other", NULL));
    cr_assert_eq(calls, 2);
    cr_assert_lt(weft_options_set(o, "k", "w"), 0, "a view has no pairs of its own");
    tu_assert_error(WEFT_ERR_VALUE, "options of their own");
    weft_options_free(o);
}

Test(options, closest_name_finds_typos_only)
{
    const char *const c[] = {"threads", "wait_policy", "seed"};
    cr_assert_str_eq(weft_closest_name("thraeds", c, 3), "threads");
    cr_assert_str_eq(weft_closest_name("SEED", c, 3), "seed");
    cr_assert_null(weft_closest_name("x", c, 3));
    cr_assert_null(weft_closest_name("backend", c, 3));
}
