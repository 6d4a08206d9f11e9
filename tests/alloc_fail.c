/* tests/alloc_fail.c: the N-th allocation fails, for every N, as SQLite's malloc tests
 * do. Each scenario (tensor creation and ops, config parsing and a model built from it,
 * a forward/backward/optimizer step, a checkpoint saved and loaded) runs once to count
 * its allocations, then once per N with allocation N failing. Every run must end in
 * an error with a message, or succeed (a fallback that needs no memory), never crash;
 * under the sanitizer build LeakSanitizer checks at exit that no error path leaked.
 *
 * The failures are injected by tests/alloc_inject.c, whose malloc/calloc/realloc/free
 * (and aligned allocators) replace the C library's for the whole process: only
 * allocations made by weft's own code fail (alloc_inject.h), so that a failure always
 * reaches a weft function that must check it. tests/alloc-train.sh does the same to a
 * whole weft-train run.
 * And oneDNN's first use, with allocations of any caller refused (check_onednn).
 *   usage: alloc_fail [SCENARIO... | onednn]   (default: all; exit 0 ok, 1 failed) */
#define _GNU_SOURCE
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <weft.h>
#include <weft/backend.h>
#include <weft/checkpoint.h>
#include <weft/config.h>
#include <weft/model.h>
#include <weft/nn.h>
#include <weft/optim.h>
#include <weft/options.h>
#include <weft/plugin.h>

#include "alloc_inject.h"

/* ---- scenarios ------------------------------------------------------------------------ */

static char dir[256];

/* Tensors made, combined, reduced and viewed. */
static int scenario_tensor(void)
{
    weft_scope_push();
    int64_t shape[2] = {8, 5};
    weft_tensor *a = weft_randn(2, shape, WEFT_F32, WEFT_CPU);
    weft_tensor *b = weft_full(2, shape, 0.5, WEFT_F32, WEFT_CPU);
    weft_tensor *c = a && b ? weft_add(weft_mul(a, b), a) : NULL;
    weft_tensor *d = c ? weft_matmul(c, weft_t(b)) : NULL;
    weft_tensor *s = d ? weft_sum(d, 0, NULL, false) : NULL;
    weft_tensor *v = s ? weft_reshape(weft_to_dtype(d, WEFT_F64), 1, (int64_t[]){64}) : NULL;
    weft_tensor *x = v ? weft_contiguous(weft_narrow(v, 0, 3, 20)) : NULL;
    int rc = x ? 0 : weft_error_code();
    weft_scope_pop();
    return rc;
}

/* Scopes nested deeper than the marks kept inline (16), a tensor recorded in each, and
 * an op's result handed on from the innermost: a refused mark merges a scope into its
 * parent, a refused record fails the op that made the tensor. */
static int scenario_scopes(void)
{
    enum { DEPTH = 40 };
    weft_scope_push();
    int64_t shape[1] = {4};
    weft_tensor *acc = weft_zeros(1, shape, WEFT_F32, WEFT_CPU);
    int rc = acc ? 0 : weft_error_code();
    for (int d = 0; d < DEPTH; d++)
        weft_scope_push();
    weft_tensor *sum = acc;
    for (int i = 0; rc == 0 && i < 8; i++)
        if (!(sum = weft_add_scalar(sum, 1.0)))
            rc = weft_error_code();
    weft_tensor *kept = rc == 0 ? weft_tensor_retain(sum) : NULL;
    for (int d = 0; d < DEPTH; d++)
        weft_scope_pop();
    if (kept) {
        double v = 0;
        weft_tensor *first = weft_select(kept, 0, 0);
        if (!first || weft_tensor_item(first, &v) != 0)
            rc = weft_error_code();
        else if (v != 8.0)
            rc = weft_error_set(WEFT_ERR_VALUE, "scopes: expected 8, got %g", v);
        weft_tensor_release(kept);
    }
    weft_scope_pop();
    return rc;
}

static const char model_ini[] = "[layer.fc1]\ntype = linear\nin_features = 4\nout_features = 16\n"
                                "[layer.act]\ntype = relu\n"
                                "[layer.drop]\ntype = dropout\np = 0.1\n"
                                "[layer.fc2]\ntype = linear\nin_features = 16\nout_features = 3\n"
                                "[optimizer]\ntype = adamw\nlr = 0.01\n"
                                "[data]\nreader = synthetic\nbatch_size = 4\n";

/* The INI text parsed, keys read, a model built from it, unknown keys checked. */
static int scenario_config(void)
{
    struct weft_config *cfg = weft_config_parse(model_ini, "alloc.ini");
    if (!cfg)
        return weft_error_code();
    int64_t bs;
    weft_module *m = NULL;
    int rc = weft_config_int(cfg, "data", "batch_size", 1, &bs);
    if (rc == 0 && weft_config_set(cfg, "train.epochs=3") != 0)
        rc = weft_error_code();
    if (rc == 0 && !(m = weft_model_from_config(cfg)))
        rc = weft_error_code();
    if (rc == 0) {
        weft_config_mark_known(cfg, "data", NULL);
        weft_config_mark_known(cfg, "optimizer", NULL);
        weft_config_mark_known(cfg, "train", NULL);
        rc = weft_config_check_unknown(cfg);
    }
    weft_module_free(m);
    weft_config_free(cfg);
    return rc;
}

/* Model and optimizer built, then forward, loss, backward and a step. */
static int scenario_step(void)
{
    struct weft_config *cfg = weft_config_parse(model_ini, "alloc.ini");
    if (!cfg)
        return weft_error_code();
    weft_module *m = weft_model_from_config(cfg);
    weft_optimizer *opt = NULL;
    struct weft_named_tensor *params = NULL;
    weft_tensor **ps = NULL;
    int n = m ? weft_module_named_parameters(m, &params) : -1;
    int rc = n < 0 ? weft_error_code() : 0;
    if (rc == 0 && !(ps = calloc((size_t)(n > 0 ? n : 1), sizeof *ps)))
        rc = weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "test: out of memory");
    for (int i = 0; rc == 0 && i < n; i++)
        ps[i] = params[i].tensor;
    if (rc == 0 && !(opt = weft_optimizer_create("adamw", n, ps, weft_config_options(cfg, "optimizer"))))
        rc = weft_error_code();
    for (int it = 0; rc == 0 && it < 2; it++) {
        weft_scope_push();
        weft_tensor *x = weft_randn(2, (int64_t[]){4, 4}, WEFT_F32, WEFT_CPU);
        weft_tensor *y = weft_full(1, (int64_t[]){4}, 1, WEFT_I64, WEFT_CPU);
        struct weft_cross_entropy_params ce = weft_cross_entropy_defaults();
        weft_tensor *out = x ? weft_module_forward(m, x) : NULL;
        weft_tensor *loss = out && y ? weft_cross_entropy(out, y, &ce) : NULL;
        if (!loss || weft_backward(loss, NULL, false) != 0 || weft_optimizer_step(opt) != 0 ||
            weft_optimizer_zero_grad(opt, true) != 0)
            rc = weft_error_code();
        weft_scope_pop();
    }
    weft_optimizer_free(opt);
    free(ps);
    free(params);
    weft_module_free(m);
    weft_config_free(cfg);
    return rc;
}

/* A model's state dict saved to a safetensors file with metadata, and loaded back. */
static int scenario_checkpoint(void)
{
    struct weft_config *cfg = weft_config_parse(model_ini, "alloc.ini");
    if (!cfg)
        return weft_error_code();
    char path[320];
    snprintf(path, sizeof path, "%s/m.safetensors", dir);
    weft_module *m = weft_model_from_config(cfg);
    struct weft_tensor_dict *sd = m ? weft_module_state_dict(m) : NULL, *back = NULL;
    struct weft_metadata *meta = weft_metadata_new(), *meta_back = NULL;
    int rc = sd && meta ? 0 : weft_error_code();
    if (rc == 0)
        rc = weft_metadata_set_int(meta, "weft.step", 7);
    if (rc == 0)
        rc = weft_safetensors_save(path, sd, meta);
    if (rc == 0)
        rc = weft_safetensors_load(path, WEFT_CPU, &back, &meta_back);
    if (rc == 0)
        rc = weft_module_load_state_dict(m, back, true);
    weft_tensor_dict_free(back);
    weft_metadata_free(meta_back);
    weft_tensor_dict_free(sd);
    weft_metadata_free(meta);
    weft_module_free(m);
    weft_config_free(cfg);
    return rc;
}

static const struct {
    const char *name;
    int (*run)(void);
} scenarios[] = {
    {"tensor", scenario_tensor},
    {"scopes", scenario_scopes},
    {"config", scenario_config},
    {"step", scenario_step},
    {"checkpoint", scenario_checkpoint},
};

/* LeakSanitizer's check of the moment, where the sanitizer is linked (weak: NULL else). */
extern int __lsan_do_recoverable_leak_check(void) __attribute__((weak));

/* What a child's exit status says of its run. */
enum outcome { OK_ERROR_OOM = 10, OK_ERROR_OTHER, OK_RECOVERED, BAD = 20 };

/* In a child: runs the scenario with allocation n refused and judges the outcome. */
static int one_run(const char *name, int (*run)(void), long n)
{
    weft_error_clear();
    alloc_inject_arm(n);
    int rc = run();
    alloc_inject_disarm();
    bool hit = alloc_inject_refused(NULL);
    int code = weft_error_code();
    if (getenv("ALLOC_FAIL_VERBOSE") && hit) {
        char where[512];
        alloc_inject_describe(where, sizeof where);
        printf("alloc_fail: %s: allocation %ld refused: %s: %s%s\n", name, n, where,
               rc ? "error: " : code ? "success, error left pending: " : "recovered",
               code ? weft_error_message() : "");
    }
    if (weft_scope_depth() != 0) {
        fprintf(stderr, "alloc_fail: %s: allocation %ld refused: a scope was left open\n", name, n);
        return BAD;
    }
    if (rc != 0 && (!hit || !*weft_error_message())) {
        fprintf(stderr, "alloc_fail: %s: allocation %ld: an error %s: '%s'\n", name, n,
                hit ? "with no message" : "with no allocation refused", weft_error_message());
        return BAD;
    }
    if (rc == 0 && code != WEFT_OK) {
        /* success returned with an error pending: a caller that checks what it is given
         * never sees the failure */
        fprintf(stderr, "alloc_fail: %s: allocation %ld refused: success returned, with the "
                        "error '%s' left pending\n", name, n, weft_error_message());
        return BAD;
    }
    /* a refused allocation must leave nothing broken behind it */
    weft_error_clear();
    if (run() != 0) {
        fprintf(stderr, "alloc_fail: %s: after allocation %ld was refused, the scenario fails "
                        "with no fault: %s\n", name, n, weft_error_message());
        return BAD;
    }
    if (__lsan_do_recoverable_leak_check && __lsan_do_recoverable_leak_check() != 0) {
        fprintf(stderr, "alloc_fail: %s: allocation %ld refused: leaked (report above)\n", name, n);
        return BAD;
    }
    return rc == 0 ? OK_RECOVERED : code == WEFT_ERR_OUT_OF_MEMORY ? OK_ERROR_OOM : OK_ERROR_OTHER;
}

/* Runs one scenario for every N, each in a child process (a crash or a leak is that N's
 * alone, and names it); returns the number of bad outcomes. */
static int sweep(const char *name, int (*run)(void))
{
    weft_error_clear();
    if (run() != 0) { /* loads what is loaded once (plugins) outside the sweep */
        fprintf(stderr, "alloc_fail: %s fails without any fault: %s\n", name, weft_error_message());
        return 1;
    }
    alloc_inject_arm(0);
    int rc = run();
    alloc_inject_disarm();
    long total = alloc_inject_counted();
    if (rc != 0 || total == 0) {
        fprintf(stderr, "alloc_fail: %s: %s\n", name,
                rc ? weft_error_message() : "no allocation of weft's was seen");
        return 1;
    }
    int bad = 0;
    long count[BAD + 1] = {0};
    for (long n = 1; n <= total; n++) {
        fflush(stdout);
        fflush(stderr);
        pid_t pid = fork();
        if (pid < 0) {
            perror("alloc_fail: fork");
            return bad + 1;
        }
        if (pid == 0) {
            int out = one_run(name, run, n);
            fflush(stdout);
            fflush(stderr);
            _exit(out);
        }
        int status;
        if (waitpid(pid, &status, 0) != pid) {
            perror("alloc_fail: waitpid");
            return bad + 1;
        }
        if (WIFSIGNALED(status)) {
            fprintf(stderr, "alloc_fail: %s: allocation %ld refused: the process died of "
                            "signal %d (%s)\n", name, n, WTERMSIG(status), strsignal(WTERMSIG(status)));
            bad++;
            continue;
        }
        int out = WEXITSTATUS(status);
        if (out < OK_ERROR_OOM || out > BAD) {
            fprintf(stderr, "alloc_fail: %s: allocation %ld refused: the process exited with "
                            "%d\n", name, n, out);
            out = BAD;
        }
        count[out]++;
        bad += out == BAD;
    }
    printf("alloc_fail: %s: %ld allocations of weft's, each refused in turn: %ld errors (%ld "
           "out of memory), %ld recovered, %ld bad\n", name, total,
           count[OK_ERROR_OOM] + count[OK_ERROR_OTHER], count[OK_ERROR_OOM], count[OK_RECOVERED],
           count[BAD]);
    return bad;
}

/* ---- oneDNN's first use ------------------------------------------------------------------ */

static const weft_options *cpu_options(void *ctx, const char *plugin)
{
    return strcmp(plugin, "cpu") == 0 ? ctx : NULL;
}

/* A float32 product through oneDNN's sgemm ([cpu] gemm = onednn): 0, or the error's code. */
static int onednn_product(void)
{
    weft_scope_push();
    int64_t shape[2] = {64, 64};
    weft_tensor *a = weft_ones(2, shape, WEFT_F32, WEFT_CPU);
    weft_tensor *c = a ? weft_matmul(a, a) : NULL;
    int rc = c ? 0 : weft_error_code();
    weft_scope_pop();
    return rc;
}

/* Runs fn in a child; its exit status, or 128 + the signal that ended it. */
static int in_child(int (*fn)(long), long arg)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0)
        _exit(fn(arg)); /* _exit: oneDNN's half-made kernels are not ours to leak-check */
    int status;
    if (pid < 0 || waitpid(pid, &status, 0) != pid)
        return 255;
    return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

static long onednn_total;

/* In a child: the first product with allocation n of the whole process refused (0: count
 * them into onednn_total's pipe... here: print). 0 ok, 1 out of memory, 2 another error. */
static int onednn_first_product(long n)
{
    alloc_inject_objects("libstdc++"); /* operator new's: what throws std::bad_alloc */
    alloc_inject_arm(n);
    int rc = onednn_product();
    alloc_inject_disarm();
    if (n == 0) {
        printf("%ld\n", alloc_inject_counted());
        fflush(stdout); /* the child ends with _exit */
        if (rc != 0)
            fprintf(stderr, "alloc_fail: onednn: %s\n", weft_error_message());
        return rc == 0 ? 0 : 2;
    }
    if (rc != 0 && rc != WEFT_ERR_OUT_OF_MEMORY)
        fprintf(stderr, "alloc_fail: onednn: allocation %ld refused: %s\n", n,
                weft_error_message());
    weft_error_clear();
    return rc == 0 ? 0 : rc == WEFT_ERR_OUT_OF_MEMORY ? 1 : 2;
}

/* oneDNN's first sgemm runs its JIT's one-time initialisation, thousands of allocations
 * of its own through C++'s operator new, where std::bad_alloc once ended the process
 * (std::terminate: it left oneDNN's C API into the plugin's C frames). With operator new's
 * allocations refused there, one at a time over a sample of 60, the product must fail
 * with an out-of-memory error or succeed, never die. (oneDNN's few plain mallocs are not
 * refused: it does not check some of them, a NULL it dereferences, out of weft's reach.)
 * Returns the number of bad outcomes; skipped without oneDNN, and in a sanitizer build,
 * whose operator new does not call malloc. */
static int check_onednn(void)
{
    weft_options *o = weft_options_new("cpu", "alloc.ini");
    if (!o || weft_options_set(o, "gemm", "onednn") != 0)
        return 1;
    weft_plugin_set_options_source(cpu_options, o);
    if (!weft_backend_get(WEFT_DEVICE_CPU)) {
        bool absent = strstr(weft_error_message(), "without oneDNN") != NULL;
        printf("alloc_fail: onednn: %s\n", absent ? "skipped: this weft-cpu.so was built "
                                                      "without oneDNN"
                                                    : weft_error_message());
        return absent ? 0 : 1;
    }
    /* the count, from a child whose stdout is a pipe */
    int fds[2];
    if (pipe(fds) != 0)
        return 1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], STDOUT_FILENO);
        _exit(onednn_first_product(0));
    }
    close(fds[1]);
    char buf[64] = "";
    ssize_t got = read(fds[0], buf, sizeof buf - 1);
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    onednn_total = got > 0 ? strtol(buf, NULL, 10) : 0;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && onednn_total == 0) {
        /* the sanitizer's own operator new never reaches this malloc */
        printf("alloc_fail: onednn: skipped: no allocation of operator new reaches this "
               "program's malloc here (a sanitizer build)\n");
        return 0;
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || onednn_total <= 0) {
        fprintf(stderr, "alloc_fail: onednn: the first product fails without a fault (status "
                        "%d, count '%s')\n", status, buf);
        return 1;
    }
    int bad = 0, oom = 0, ok = 0, tried = 0;
    for (int i = 0; i < 60; i++) {
        long n = 1 + (long)((double)i * (double)(onednn_total - 1) / 59.0);
        int out = in_child(onednn_first_product, n);
        tried++;
        if (out == 0)
            ok++;
        else if (out == 1)
            oom++;
        else {
            bad++;
            if (out > 128)
                fprintf(stderr, "alloc_fail: onednn: allocation %ld of %ld refused: the "
                                "process died of signal %d (%s)\n",
                        n, onednn_total, out - 128, strsignal(out - 128));
        }
    }
    printf("alloc_fail: onednn: %ld allocations of operator new in oneDNN's first sgemm, %d "
           "refused in turn: %d out-of-memory errors, %d recovered, %d bad\n",
           onednn_total, tried, oom, ok, bad);
    return bad;
}

int main(int argc, char **argv)
{
    /* One OpenMP thread: the sweep forks, and a child of a process with an OpenMP pool
     * may hang in its first parallel region (libgomp is not fork-safe). */
    setenv("OMP_NUM_THREADS", "1", 1);
    snprintf(dir, sizeof dir, "%s/weft-alloc.XXXXXX", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
    if (!mkdtemp(dir)) {
        perror("alloc_fail: mkdtemp");
        return 1;
    }
    int bad = 0;
    /* before the cpu plugin is loaded here: in a child that loads it with gemm = onednn */
    bool onednn = argc < 2;
    for (int a = 1; a < argc; a++)
        onednn = onednn || strcmp(argv[a], "onednn") == 0;
    if (onednn) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            int rc = check_onednn();
            fflush(stdout);
            _exit(rc ? 1 : 0);
        }
        int status;
        bad += pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
               WEXITSTATUS(status) != 0;
    }
    if (!weft_backend_get(WEFT_DEVICE_CPU)) {
        fprintf(stderr, "alloc_fail: no cpu backend: %s\n", weft_error_message());
        return 1;
    }
    weft_manual_seed(1);
    for (size_t i = 0; i < sizeof scenarios / sizeof *scenarios; i++) {
        bool chosen = argc < 2;
        for (int a = 1; a < argc; a++)
            chosen = chosen || strcmp(argv[a], scenarios[i].name) == 0;
        if (chosen)
            bad += sweep(scenarios[i].name, scenarios[i].run);
    }
    char path[320];
    snprintf(path, sizeof path, "%s/m.safetensors", dir);
    unlink(path);
    rmdir(dir);
    if (bad)
        fprintf(stderr, "alloc_fail: %d bad outcomes\n", bad);
    return bad ? 1 : 0;
}
