/* tests/test_config.c: INI parsing, typed getters, overrides and the errors a user sees. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void no_setup(void)
{
    weft_error_clear();
}

/* The config code needs no plugin: this suite does not load one. */
TestSuite(config, .init = no_setup, .fini = tu_teardown);

static const char *const mnist =
    "; a comment\n"
    "[model]\n"
    "name = mlp\n"
    "hidden = 128 ; inline comment\n"
    "dropout = 0.25\n"
    "bias = yes\n"
    "\n"
    "[optimizer]\n"
    "kind = adam\n"
    "lr = 1e-3\n"
    "# another comment\n"
    "[layer.fc1]\n"
    "out_features = 64\n";

static struct weft_config *parse(const char *text)
{
    struct weft_config *cfg = weft_config_parse(text, "mnist.ini");
    cr_assert_not_null(cfg, "parse failed: %s", weft_error_message());
    return cfg;
}

/* ---- typed getters ------------------------------------------------------------------- */

Test(config, typed_getters_read_present_values)
{
    struct weft_config *cfg = parse(mnist);
    int64_t hidden = 0;
    double dropout = 0, lr = 0;
    bool bias = false;
    int kind = -1;
    const char *const kinds[] = {"sgd", "adam", "adamw", NULL};
    cr_assert_str_eq(weft_config_string(cfg, "model", "name", NULL), "mlp");
    cr_assert_eq(weft_config_int(cfg, "model", "hidden", 0, &hidden), 0);
    cr_assert_eq(hidden, 128);
    cr_assert_eq(weft_config_double(cfg, "model", "dropout", 0, &dropout), 0);
    cr_assert_float_eq(dropout, 0.25, 0);
    cr_assert_eq(weft_config_bool(cfg, "model", "bias", false, &bias), 0);
    cr_assert(bias);
    cr_assert_eq(weft_config_double(cfg, "optimizer", "lr", 0, &lr), 0);
    cr_assert_float_eq(lr, 1e-3, 0);
    cr_assert_eq(weft_config_choice(cfg, "optimizer", "kind", kinds, 0, &kind), 0);
    cr_assert_eq(kind, 1);
    weft_config_free(cfg);
}

Test(config, absent_values_give_the_default)
{
    struct weft_config *cfg = parse(mnist);
    int64_t i = 0;
    double d = 0;
    bool b = false;
    int c = 0;
    const char *const choices[] = {"a", "b", NULL};
    cr_assert_str_eq(weft_config_string(cfg, "model", "act", "relu"), "relu");
    cr_assert_null(weft_config_string(cfg, "model", "act", NULL));
    cr_assert_eq(weft_config_int(cfg, "train", "epochs", 10, &i), 0);
    cr_assert_eq(i, 10);
    cr_assert_eq(weft_config_double(cfg, "train", "momentum", 0.9, &d), 0);
    cr_assert_float_eq(d, 0.9, 0);
    cr_assert_eq(weft_config_bool(cfg, "train", "shuffle", true, &b), 0);
    cr_assert(b);
    cr_assert_eq(weft_config_choice(cfg, "train", "mode", choices, 1, &c), 0);
    cr_assert_eq(c, 1);
    weft_config_free(cfg);
}

Test(config, integers_parse_strictly)
{
    struct weft_config *cfg = parse("[t]\n"
                                    "neg = -42\n"
                                    "max = 9223372036854775807\n"
                                    "min = -9223372036854775808\n"
                                    "word = ten\n"
                                    "tail = 12abc\n"
                                    "float = 1.5\n"
                                    "hex = 0x10\n"
                                    "big = 9223372036854775808\n"
                                    "empty =\n");
    int64_t v = 0;
    cr_assert_eq(weft_config_int(cfg, "t", "neg", 0, &v), 0);
    cr_assert_eq(v, -42);
    cr_assert_eq(weft_config_int(cfg, "t", "max", 0, &v), 0);
    cr_assert_eq(v, INT64_MAX);
    cr_assert_eq(weft_config_int(cfg, "t", "min", 0, &v), 0);
    cr_assert_eq(v, INT64_MIN);

    v = 5;
    cr_assert_eq(weft_config_int(cfg, "t", "word", 0, &v), WEFT_ERR_CONFIG);
    tu_assert_error(WEFT_ERR_CONFIG, "mnist.ini: [t] word = 'ten': expected an integer");
    cr_assert_eq(v, 5, "out must be untouched on error");
    cr_assert_lt(weft_config_int(cfg, "t", "tail", 0, &v), 0);
    tu_assert_error(WEFT_ERR_CONFIG, "[t] tail = '12abc': expected an integer");
    cr_assert_lt(weft_config_int(cfg, "t", "float", 0, &v), 0);
    tu_assert_error(WEFT_ERR_CONFIG, "[t] float = '1.5': expected an integer");
    cr_assert_lt(weft_config_int(cfg, "t", "hex", 0, &v), 0);
    tu_assert_error(WEFT_ERR_CONFIG, "[t] hex = '0x10': expected an integer");
    cr_assert_lt(weft_config_int(cfg, "t", "big", 0, &v), 0);
    tu_assert_error(WEFT_ERR_CONFIG, "[t] big = '9223372036854775808': integer out of range");
    cr_assert_lt(weft_config_int(cfg, "t", "empty", 0, &v), 0);
    tu_assert_error(WEFT_ERR_CONFIG, "[t] empty = '': expected an integer");
    cr_assert_eq(v, 5);
    weft_config_free(cfg);
}

Test(config, doubles_parse_strictly)
{
    struct weft_config *cfg = parse("[optimizer]\n"
                                    "lr = fast\n"
                                    "tiny = 1e-400\n"
                                    "huge = 1e999\n"
                                    "neg = -2.5e3\n"
                                    "unit = 3ms\n");
    double d = 7;
    cr_assert_lt(weft_config_double(cfg, "optimizer", "lr", 0, &d), 0);
    tu_assert_error(WEFT_ERR_CONFIG, "mnist.ini: [optimizer] lr = 'fast': expected a number");
    cr_assert_float_eq(d, 7, 0);
    cr_assert_lt(weft_config_double(cfg, "optimizer", "huge", 0, &d), 0);
    tu_assert_error(WEFT_ERR_CONFIG, "[optimizer] huge = '1e999': number out of range");
    cr_assert_lt(weft_config_double(cfg, "optimizer", "unit", 0, &d), 0);
    tu_assert_error(WEFT_ERR_CONFIG, "[optimizer] unit = '3ms': expected a number");
    cr_assert_eq(weft_config_double(cfg, "optimizer", "tiny", 0, &d), 0, "underflow is fine");
    cr_assert_eq(weft_config_double(cfg, "optimizer", "neg", 0, &d), 0);
    cr_assert_float_eq(d, -2500, 0);
    weft_config_free(cfg);
}

Test(config, booleans_accept_the_usual_spellings)
{
    struct weft_config *cfg = parse("[f]\na = TRUE\nb = off\nc = 1\nd = No\ne = maybe\n");
    bool v = false;
    cr_assert_eq(weft_config_bool(cfg, "f", "a", false, &v), 0);
    cr_assert(v);
    cr_assert_eq(weft_config_bool(cfg, "f", "b", true, &v), 0);
    cr_assert_not(v);
    cr_assert_eq(weft_config_bool(cfg, "f", "c", false, &v), 0);
    cr_assert(v);
    cr_assert_eq(weft_config_bool(cfg, "f", "d", true, &v), 0);
    cr_assert_not(v);
    cr_assert_lt(weft_config_bool(cfg, "f", "e", false, &v), 0);
    tu_assert_error(WEFT_ERR_CONFIG, "mnist.ini: [f] e = 'maybe': expected true or false");
    weft_config_free(cfg);
}

Test(config, choice_errors_list_the_choices_and_suggest_one)
{
    struct weft_config *cfg = parse("[optimizer]\nkind = adm\nother = lbfgs\n");
    const char *const kinds[] = {"sgd", "adam", "adamw", NULL};
    int k = 9;
    cr_assert_lt(weft_config_choice(cfg, "optimizer", "kind", kinds, 0, &k), 0);
    tu_assert_error(WEFT_ERR_CONFIG, "mnist.ini: [optimizer] kind = 'adm': expected one of sgd, "
                                     "adam, adamw (did you mean 'adam'?)");
    cr_assert_eq(k, 9);
    cr_assert_lt(weft_config_choice(cfg, "optimizer", "other", kinds, 0, &k), 0);
    tu_assert_error(WEFT_ERR_CONFIG, "[optimizer] other = 'lbfgs': expected one of sgd, adam, "
                                     "adamw");
    weft_config_free(cfg);
}

/* ---- structure --------------------------------------------------------------------------- */

Test(config, sections_and_keys_keep_file_order)
{
    struct weft_config *cfg = parse(mnist);
    const char *const *s = weft_config_sections(cfg);
    cr_assert_str_eq(s[0], "model");
    cr_assert_str_eq(s[1], "optimizer");
    cr_assert_str_eq(s[2], "layer.fc1");
    cr_assert_null(s[3]);
    const char *const *k = weft_config_keys(cfg, "model");
    cr_assert_str_eq(k[0], "name");
    cr_assert_str_eq(k[1], "hidden");
    cr_assert_str_eq(k[2], "dropout");
    cr_assert_str_eq(k[3], "bias");
    cr_assert_null(k[4]);
    cr_assert_null(weft_config_keys(cfg, "nosuch")[0]);
    cr_assert(weft_config_has(cfg, "model", "hidden"));
    cr_assert_not(weft_config_has(cfg, "model", "width"));
    cr_assert(weft_config_has_section(cfg, "layer.fc1"));
    cr_assert_not(weft_config_has_section(cfg, "train"));
    weft_config_free(cfg);
}

Test(config, asking_about_a_section_does_not_make_it_present)
{
    struct weft_config *cfg = parse(mnist);
    int64_t v;
    weft_config_int(cfg, "train", "epochs", 3, &v);
    cr_assert_not(weft_config_has_section(cfg, "train"));
    cr_assert_null(weft_config_sections(cfg)[3]);
    weft_config_free(cfg);
}

Test(config, multi_line_values_are_joined_not_duplicates)
{
    struct weft_config *cfg = parse("[data]\nfiles = a.csv\n  b.csv\n\n  c.csv\nnext = 1\n");
    cr_assert_str_eq(weft_config_string(cfg, "data", "files", NULL), "a.csv\nb.csv\nc.csv");
    cr_assert_str_eq(weft_config_string(cfg, "data", "next", NULL), "1");
    weft_config_free(cfg);
}

/* ---- overrides ----------------------------------------------------------------------------- */

Test(config, set_overrides_and_adds_values)
{
    struct weft_config *cfg = parse(mnist);
    cr_assert_eq(weft_config_set(cfg, "optimizer.lr=0.5"), 0);
    cr_assert_eq(weft_config_set(cfg, " runtime.backend = cuda "), 0);
    cr_assert_eq(weft_config_set(cfg, "layer.fc1.out_features=10"), 0);
    cr_assert_eq(weft_config_set(cfg, "model.name=a=b"), 0, "only the first '=' splits");
    cr_assert_str_eq(weft_config_string(cfg, "optimizer", "lr", NULL), "0.5");
    cr_assert_str_eq(weft_config_string(cfg, "runtime", "backend", NULL), "cuda");
    cr_assert_str_eq(weft_config_string(cfg, "layer.fc1", "out_features", NULL), "10");
    cr_assert_str_eq(weft_config_string(cfg, "model", "name", NULL), "a=b");
    cr_assert_str_eq(weft_config_sections(cfg)[3], "runtime");
    cr_assert_null(weft_config_keys(cfg, "layer.fc1")[1], "replaced, not added");
    weft_config_free(cfg);
}

Test(config, malformed_settings_are_errors)
{
    struct weft_config *cfg = weft_config_new("cli");
    const char *bad[] = {"lr=3", "optimizer.=3", ".lr=3", "optimizer.lr", ""};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        cr_assert_lt(weft_config_set(cfg, bad[i]), 0, "accepted '%s'", bad[i]);
        tu_assert_error(WEFT_ERR_CONFIG, "expected section.key=value");
    }
    cr_assert_null(weft_config_sections(cfg)[0]);
    weft_config_free(cfg);
}

Test(config, put_replaces_a_value)
{
    struct weft_config *cfg = weft_config_new(NULL);
    cr_assert_eq(weft_config_put(cfg, "a", "k", "1"), 0);
    const char *old = weft_config_string(cfg, "a", "k", NULL);
    cr_assert_eq(weft_config_put(cfg, "a", "k", "2"), 0);
    cr_assert_str_eq(weft_config_string(cfg, "a", "k", NULL), "2");
    cr_assert_str_eq(old, "1", "an earlier string stays valid while cfg lives");
    weft_config_free(cfg);
}

Test(config, null_config_reads_as_all_defaults)
{
    int64_t v = 0;
    cr_assert_eq(weft_config_int(NULL, "a", "b", 4, &v), 0);
    cr_assert_eq(v, 4);
    cr_assert_str_eq(weft_config_string(NULL, "a", "b", "x"), "x");
    cr_assert_eq(weft_config_check_unknown(NULL), 0);
}

/* ---- unknown sections and keys ---------------------------------------------------------------- */

Test(config, unknown_key_suggests_the_closest_known_one)
{
    struct weft_config *cfg = parse("[runtime]\nbackend = cpu\nthread = 4\n");
    int64_t v;
    weft_config_string(cfg, "runtime", "backend", "cpu");
    weft_config_int(cfg, "runtime", "threads", 0, &v);
    weft_config_int(cfg, "runtime", "seed", 0, &v);
    cr_assert_lt(weft_config_check_unknown(cfg), 0);
    tu_assert_error(WEFT_ERR_CONFIG,
                    "mnist.ini: line 3: [runtime] unknown key 'thread' (did you mean 'threads'?)");
    weft_config_free(cfg);
}

Test(config, unknown_key_without_a_close_match_lists_the_known_keys)
{
    struct weft_config *cfg = parse("[runtime]\nbackend = cpu\ncolour = blue\n");
    int64_t v;
    weft_config_string(cfg, "runtime", "backend", "cpu");
    weft_config_int(cfg, "runtime", "seed", 0, &v);
    cr_assert_lt(weft_config_check_unknown(cfg), 0);
    tu_assert_error(WEFT_ERR_CONFIG,
                    "mnist.ini: line 3: [runtime] unknown key 'colour' (known keys: backend, seed)");
    weft_config_free(cfg);
}

Test(config, one_letter_keys_are_not_typos_of_each_other)
{
    struct weft_config *cfg = parse("[a]\nx = 1\n");
    int64_t v;
    weft_config_int(cfg, "a", "z", 0, &v);
    cr_assert_lt(weft_config_check_unknown(cfg), 0);
    tu_assert_error(WEFT_ERR_CONFIG, "mnist.ini: line 2: [a] unknown key 'x' (known keys: z)");
    weft_config_free(cfg);
}

Test(config, unknown_section_suggests_an_asked_for_section)
{
    struct weft_config *cfg = parse("[optimiser]\nlr = 0.1\n");
    double lr;
    weft_config_double(cfg, "optimizer", "lr", 0.01, &lr);
    cr_assert_lt(weft_config_check_unknown(cfg), 0);
    tu_assert_error(WEFT_ERR_CONFIG,
                    "mnist.ini: line 1: unknown section [optimiser] (did you mean [optimizer]?)");
    weft_config_free(cfg);
}

Test(config, unknown_section_without_a_close_match_lists_the_known_ones)
{
    struct weft_config *cfg = parse("[zzz]\nlr = 0.1\n");
    double lr;
    weft_config_double(cfg, "optimizer", "lr", 0.01, &lr);
    weft_config_double(cfg, "model", "dropout", 0, &lr);
    cr_assert_lt(weft_config_check_unknown(cfg), 0);
    tu_assert_error(WEFT_ERR_CONFIG,
                    "mnist.ini: line 1: unknown section [zzz] (known sections: [optimizer], [model])");
    weft_config_free(cfg);
}

Test(config, everything_asked_for_passes_the_check)
{
    struct weft_config *cfg = parse(mnist);
    const char *const kinds[] = {"sgd", "adam", NULL};
    int64_t i;
    double d;
    bool b;
    int k;
    weft_config_string(cfg, "model", "name", NULL);
    weft_config_int(cfg, "model", "hidden", 0, &i);
    weft_config_double(cfg, "model", "dropout", 0, &d);
    weft_config_bool(cfg, "model", "bias", false, &b);
    weft_config_choice(cfg, "optimizer", "kind", kinds, 0, &k);
    weft_config_double(cfg, "optimizer", "lr", 0, &d);
    weft_config_mark_known(cfg, "layer.fc1", NULL);
    cr_assert_eq(weft_config_check_unknown(cfg), 0, "%s", weft_error_message());
    weft_config_free(cfg);
}

Test(config, an_unknown_key_given_by_set_names_the_set_argument_not_the_file)
{
    struct weft_config *cfg = parse("[runtime]\nseed = 1\n");
    cr_assert_eq(weft_config_set(cfg, "runtime.thread=4"), 0);
    int64_t v;
    weft_config_int(cfg, "runtime", "seed", 0, &v);
    weft_config_int(cfg, "runtime", "threads", 0, &v);
    cr_assert_lt(weft_config_check_unknown(cfg), 0);
    tu_assert_error(WEFT_ERR_CONFIG, "--set runtime.thread=4: [runtime] unknown key 'thread' "
                                     "(did you mean 'threads'?)");
    weft_config_free(cfg);
}

Test(config, an_unknown_section_made_by_set_names_the_set_argument)
{
    struct weft_config *cfg = parse("[optimizer]\nlr = 0.1\n");
    cr_assert_eq(weft_config_set(cfg, "optimiser.lr=0.5"), 0);
    double lr;
    weft_config_double(cfg, "optimizer", "lr", 0.01, &lr);
    cr_assert_lt(weft_config_check_unknown(cfg), 0);
    tu_assert_error(WEFT_ERR_CONFIG, "--set optimiser.lr=0.5: unknown section [optimiser] (did "
                                     "you mean [optimizer]?)");
    weft_config_free(cfg);
}

Test(config, a_bad_value_given_by_set_is_blamed_on_the_set_argument)
{
    struct weft_config *cfg = parse("[optimizer]\nlr = 0.1\n[train]\nepochs = 2\n");
    cr_assert_eq(weft_config_set(cfg, "optimizer.lr=fast"), 0);
    double lr;
    int rc = weft_config_double(cfg, "optimizer", "lr", 0.01, &lr);
    cr_assert_lt(rc, 0);
    cr_assert_eq(weft_config_explain_error(cfg, rc), WEFT_ERR_CONFIG);
    tu_assert_error(WEFT_ERR_CONFIG, "--set optimizer.lr=fast (set on the command line, over "
                                     "mnist.ini): [optimizer] lr = 'fast'");
    weft_config_free(cfg);
}

Test(config, an_error_about_a_value_of_the_file_still_names_the_file)
{
    struct weft_config *cfg = parse("[optimizer]\nlr = fast\n");
    cr_assert_eq(weft_config_set(cfg, "optimizer.momentum=0.9"), 0);
    double lr;
    int rc = weft_config_double(cfg, "optimizer", "lr", 0.01, &lr);
    cr_assert_eq(weft_config_explain_error(cfg, rc), WEFT_ERR_CONFIG);
    tu_assert_error(WEFT_ERR_CONFIG, "mnist.ini: [optimizer] lr = 'fast'");
    weft_config_free(cfg);
}

Test(config, mark_known_covers_one_key_or_a_whole_section)
{
    struct weft_config *cfg = parse("[a]\nx = 1\ny = 2\n");
    weft_config_mark_known(cfg, "a", "x");
    cr_assert_lt(weft_config_check_unknown(cfg), 0);
    tu_assert_error(WEFT_ERR_CONFIG, "[a] unknown key 'y'");
    weft_config_mark_known(cfg, "a", NULL);
    cr_assert_eq(weft_config_check_unknown(cfg), 0);
    weft_config_free(cfg);
}

/* ---- malformed files --------------------------------------------------------------------------- */

Test(config, duplicate_keys_are_errors_naming_file_line_section_and_key)
{
    cr_assert_null(weft_config_parse("[optimizer]\nlr = 0.1\nmomentum = 0.9\nlr = 0.2\n",
                                     "mnist.ini"));
    tu_assert_error(WEFT_ERR_CONFIG, "mnist.ini: line 4: [optimizer] duplicate key 'lr' (already "
                                     "set on line 2)");
}

Test(config, a_key_repeated_in_a_reopened_section_is_a_duplicate)
{
    cr_assert_null(weft_config_parse("[a]\nx = 1\n[b]\ny = 1\n[a]\nx = 2\n", "mnist.ini"));
    tu_assert_error(WEFT_ERR_CONFIG, "mnist.ini: line 6: [a] duplicate key 'x'");
}

Test(config, syntax_errors_give_the_line_number)
{
    cr_assert_null(weft_config_parse("[model]\nhidden = 3\nthis line has no equals sign\n",
                                     "mnist.ini"));
    tu_assert_error(WEFT_ERR_CONFIG, "mnist.ini: line 3: syntax error");
    cr_assert_null(weft_config_parse("[model\nx = 1\n", "mnist.ini"));
    tu_assert_error(WEFT_ERR_CONFIG, "mnist.ini: line 1: syntax error");
}

Test(config, overlong_lines_are_errors_not_silently_split)
{
    char text[512];
    int n = snprintf(text, sizeof text, "[a]\nkey = ");
    memset(text + n, 'x', 300);
    text[n + 300] = '\n';
    text[n + 301] = '\0';
    cr_assert_null(weft_config_parse(text, "mnist.ini"));
    tu_assert_error(WEFT_ERR_CONFIG, "mnist.ini: line 2 is longer than");
}

Test(config, missing_file_is_an_error_naming_it)
{
    cr_assert_null(weft_config_load("/nonexistent/mnist.ini"));
    tu_assert_error(WEFT_ERR_CONFIG, "/nonexistent/mnist.ini: cannot open config file: No such "
                                     "file or directory");
}

Test(config, directory_is_not_a_readable_file)
{
    cr_assert_null(weft_config_load("/tmp"));
    tu_assert_error(WEFT_ERR_CONFIG, "/tmp: cannot open config file: a directory, not a "
                                     "regular file");
}

/* A FIFO as the config is refused at once: opened for reading it would wait for a writer
 * forever (the test would time out). */
Test(config, a_fifo_is_refused_without_waiting_for_a_writer)
{
    const char *path = tu_tmp_path("pipe.ini");
    cr_assert_eq(mkfifo(path, 0600), 0);
    cr_assert_null(weft_config_load(path));
    tu_assert_error(WEFT_ERR_CONFIG, "pipe.ini: cannot open config file: a FIFO (named pipe), "
                                     "not a regular file");
    unlink(path);
}

Test(config, files_load_with_their_path_as_the_name)
{
    char path[] = "/tmp/weft-test-config-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    const char text[] = "[train]\nepochs = many\n";
    cr_assert_eq(write(fd, text, sizeof text - 1), (ssize_t)(sizeof text - 1));
    close(fd);
    struct weft_config *cfg = weft_config_load(path);
    unlink(path);
    cr_assert_not_null(cfg, "%s", weft_error_message());
    cr_assert_str_eq(weft_config_name(cfg), path);
    int64_t v;
    cr_assert_lt(weft_config_int(cfg, "train", "epochs", 1, &v), 0);
    char expect[128];
    snprintf(expect, sizeof expect, "%s: [train] epochs = 'many': expected an integer", path);
    tu_assert_error(WEFT_ERR_CONFIG, expect);
    weft_config_free(cfg);
}

/* ---- line endings and binary files --------------------------------------------------- */

/* A line and its trailing CRs once went whole into inih's 200-byte buffer on the stack,
 * after only the text before them had been measured (SIGSEGV; found by fuzz/fuzz_ini). */
Test(config, a_line_ending_in_hundreds_of_carriage_returns_is_read_as_one_line)
{
    size_t ncr = 400;
    char *text = malloc(64 + ncr);
    cr_assert_not_null(text);
    int n = snprintf(text, 64, "[runtime]\nseed = 0");
    memset(text + n, '\r', ncr);
    strcpy(text + n + ncr, "\nthreads = 2\r\r\n");
    struct weft_config *cfg = parse(text);
    free(text);
    int64_t seed = -1, threads = -1;
    cr_assert_eq(weft_config_int(cfg, "runtime", "seed", 7, &seed), 0, "%s", weft_error_message());
    cr_assert_eq(seed, 0);
    cr_assert_eq(weft_config_int(cfg, "runtime", "threads", 1, &threads), 0);
    cr_assert_eq(threads, 2);
    cr_assert_eq(weft_config_check_unknown(cfg), 0, "%s", weft_error_message());
    weft_config_free(cfg);
}

Test(config, windows_line_endings_and_a_last_line_without_one_parse)
{
    struct weft_config *cfg = parse("[a]\r\nx = 1\r\n\r\ny = two words\r");
    cr_assert_str_eq(weft_config_string(cfg, "a", "x", NULL), "1");
    cr_assert_str_eq(weft_config_string(cfg, "a", "y", NULL), "two words");
    weft_config_free(cfg);
}

Test(config, the_longest_line_fits_and_one_more_character_is_an_error_with_crs_or_not)
{
    /* inih's buffer is 200 bytes: 197 characters and "\r\n\0" */
    for (int crs = 0; crs <= 300; crs += 150) {
        char text[1024];
        int n = snprintf(text, sizeof text, "[a]\nk = ");
        memset(text + n, 'v', 197 - 4);
        n += 197 - 4;
        memset(text + n, '\r', (size_t)crs);
        n += crs;
        strcpy(text + n, "\n");
        struct weft_config *cfg = parse(text);
        cr_assert_eq(strlen(weft_config_string(cfg, "a", "k", "")), 197 - 4);
        weft_config_free(cfg);
        memmove(text + 8 + 1, text + 8, strlen(text + 8) + 1);
        cr_assert_null(weft_config_parse(text, "mnist.ini"));
        tu_assert_error(WEFT_ERR_CONFIG, "mnist.ini: line 2 is longer than 197 characters");
        weft_error_clear();
    }
}

static char *write_temp(const void *data, size_t len)
{
    static char path[64];
    snprintf(path, sizeof path, "/tmp/weft-test-config-XXXXXX");
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, data, len), (ssize_t)len);
    close(fd);
    return path;
}

Test(config, a_binary_file_is_refused_as_one_naming_the_line)
{
    /* Text up to the first NUL used to be all that was read: often nothing, and the run
     * then failed on a missing [data] key. */
    static const unsigned char elf[] = {0x7f, 'E', 'L', 'F', 2, 1, 1, 0, 0, 0};
    char *path = write_temp(elf, sizeof elf);
    cr_assert_null(weft_config_load(path));
    unlink(path);
    char expect[160];
    snprintf(expect, sizeof expect, "%s: line 1: a NUL byte (offset 7): expected a text (INI) "
                                    "file, not a binary one", path);
    tu_assert_error(WEFT_ERR_CONFIG, expect);
    weft_error_clear();
    static const char late[] = "[a]\nx = 1\n\0garbage";
    path = write_temp(late, sizeof late - 1);
    cr_assert_null(weft_config_load(path));
    unlink(path);
    tu_assert_error(WEFT_ERR_CONFIG, "line 3: a NUL byte (offset 10)");
}

Test(config, random_bytes_never_crash_the_parser)
{
    /* a deterministic smoke; fuzz/fuzz_ini.c is the real search */
    uint64_t state = 0x9e3779b97f4a7c15ull;
    char text[2048];
    for (int round = 0; round < 2000; round++) {
        size_t len = (size_t)(round % 997) + 1;
        for (size_t i = 0; i < len; i++) {
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            unsigned c = (unsigned)(state >> 59);
            /* mostly INI punctuation, CRs and newlines */
            static const char alphabet[] = "\r\n\r\r[]=;: \tab#\n\r\r\rxyz=[\r\r\r\r\r\n";
            text[i] = alphabet[c % (sizeof alphabet - 1)];
        }
        text[len] = '\0';
        struct weft_config *cfg = weft_config_parse(text, "fuzz.ini");
        weft_config_free(cfg);
        weft_error_clear();
    }
}

/* ---- typos before missing keys -------------------------------------------------------- */

/* What a program sees when a reader failed on [data]: the keys it asked for, the error
 * it got. */
static int fail_on_missing(struct weft_config *cfg, const char *section, const char *key)
{
    const char *v = weft_config_string(cfg, section, key, NULL);
    cr_assert_null(v);
    return weft_error_set(WEFT_ERR_CONFIG, "%s: [%s] missing key '%s'", weft_config_name(cfg),
                          section, key);
}

Test(config, a_misspelt_section_explains_the_missing_key_it_caused)
{
    struct weft_config *cfg = parse("[runtime]\nseed = 1\n[dta]\nreader = idx\n[model]\nx = 1\n");
    int64_t seed;
    weft_config_int(cfg, "runtime", "seed", 0, &seed);
    int rc = fail_on_missing(cfg, "data", "reader");
    cr_assert_eq(weft_config_explain_error(cfg, rc), WEFT_ERR_CONFIG);
    tu_assert_error(WEFT_ERR_CONFIG, "mnist.ini: line 3: unknown section [dta] (did you mean [data]?)");
    weft_config_free(cfg);
}

Test(config, a_misspelt_key_explains_the_missing_key_it_caused)
{
    struct weft_config *cfg = parse("[data]\nreder = idx\nbatch_size = 4\n");
    int rc = fail_on_missing(cfg, "data", "reader");
    cr_assert_eq(weft_config_explain_error(cfg, rc), WEFT_ERR_CONFIG);
    tu_assert_error(WEFT_ERR_CONFIG, "mnist.ini: line 2: [data] unknown key 'reder' (did you mean "
                                     "'reader'?)");
    weft_config_free(cfg);
}

Test(config, sections_and_keys_not_asked_for_yet_do_not_take_the_blame)
{
    /* [model] and batch_size are read later in a run: they are not typos of anything
     * asked for, so the missing key stays the error */
    struct weft_config *cfg = parse("[data]\nbatch_size = 4\nimages = a.idx\n[model]\nx = 1\n");
    int rc = fail_on_missing(cfg, "data", "reader");
    cr_assert_eq(weft_config_explain_error(cfg, rc), rc);
    tu_assert_error(WEFT_ERR_CONFIG, "mnist.ini: [data] missing key 'reader'");
    weft_error_clear();
    /* a near miss of a key that is present is not the cause either */
    struct weft_config *cfg2 = parse("[data]\nreader = idx\nreaders = 2\n[datas]\nx = 1\n");
    weft_config_string(cfg2, "data", "reader", NULL);
    rc = fail_on_missing(cfg2, "data", "images");
    cr_assert_eq(weft_config_explain_error(cfg2, rc), rc);
    tu_assert_error(WEFT_ERR_CONFIG, "missing key 'images'");
    weft_error_clear();
    /* other errors, and no error, are left alone */
    cr_assert_eq(weft_config_explain_error(cfg, 0), 0);
    tu_assert_no_error();
    weft_error_set(WEFT_ERR_IO, "d.csv:3: bad");
    cr_assert_eq(weft_config_explain_error(cfg, WEFT_ERR_IO), WEFT_ERR_IO);
    tu_assert_error(WEFT_ERR_IO, "d.csv:3: bad");
    weft_config_free(cfg);
    weft_config_free(cfg2);
}

/* [optim], the optimizer section's former name, is read as [optimizer] (weft-train warns);
 * a file that has both keeps both, and nothing else is renamed. */
Test(config, an_old_section_name_is_read_under_its_new_one)
{
    struct weft_config *cfg = weft_config_parse("[optim]\ntype = adam\nlr = 0.5\n", "old.ini");
    cr_assert_not_null(cfg, "%s", weft_error_message());
    cr_assert_eq(weft_config_rename_section(cfg, "optim", "optimizer"), 1);
    cr_expect_str_eq(weft_config_string(cfg, "optimizer", "type", "sgd"), "adam");
    cr_expect_eq(weft_config_has_section(cfg, "optim"), false);
    cr_expect_eq(weft_config_rename_section(cfg, "optim", "optimizer"), 0);
    weft_config_free(cfg);
    cfg = weft_config_parse("[optim]\nlr = 1\n[optimizer]\ntype = sgd\n", "both.ini");
    cr_assert_not_null(cfg);
    cr_expect_eq(weft_config_rename_section(cfg, "optim", "optimizer"), 0);
    cr_expect_str_eq(weft_config_string(cfg, "optimizer", "type", "x"), "sgd");
    weft_config_free(cfg);
}
