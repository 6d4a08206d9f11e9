/* tests/hosts/dlopen_host.c: loads libweft.so with dlopen() into a process that was not
 * linked with it, as Python's ctypes, Lua and Julia do, and computes through it on two
 * threads (each thread has its own error record and scopes).
 *
 *   dlopen_host PATH/TO/libweft.so
 *
 * Exit 0 when sum(arange(6)) is 15 on both threads and errors are thread-local. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#include <weft.h>

static struct {
    weft_tensor *(*arange)(double, double, double, enum weft_dtype, weft_device);
    weft_tensor *(*sum)(weft_tensor *, int, const int *, bool);
    int (*item)(const weft_tensor *, double *);
    void (*scope_push)(void);
    void (*scope_pop)(void);
    int (*error_code)(void);
    const char *(*error_message)(void);
    weft_tensor *(*view)(weft_tensor *, int, const int64_t *);
} api;

/* 0 when this thread computes 15 and then sees its own error only. */
static int compute(void)
{
    api.scope_push();
    double total = -1;
    int rc = api.item(api.sum(api.arange(0, 6, 1, WEFT_F32, WEFT_CPU), 0, NULL, false), &total);
    if (rc != 0 || total != 15.0) {
        fprintf(stderr, "dlopen_host: sum(arange(6)) = %g (rc %d): %s\n", total, rc,
                api.error_message());
        api.scope_pop();
        return 1;
    }
    /* A failing view sets this thread's error and no other's. */
    weft_tensor *bad = api.view(api.arange(0, 6, 1, WEFT_F32, WEFT_CPU), 1, (int64_t[]){7});
    int code = api.error_code();
    api.scope_pop();
    if (bad || code == WEFT_OK) {
        fprintf(stderr, "dlopen_host: a bad view did not fail\n");
        return 1;
    }
    return 0;
}

static void *thread_main(void *result)
{
    *(int *)result = compute();
    return NULL;
}

#define RESOLVE(field, symbol)                                                              \
    do {                                                                                    \
        *(void **)&api.field = dlsym(lib, symbol);                                          \
        if (!api.field) {                                                                   \
            fprintf(stderr, "dlopen_host: %s: %s\n", symbol, dlerror());                    \
            return 1;                                                                       \
        }                                                                                   \
    } while (0)

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: dlopen_host PATH/TO/libweft.so\n");
        return 2;
    }
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "dlopen_host: %s\n", dlerror());
        return 1;
    }
    RESOLVE(arange, "weft_arange");
    RESOLVE(sum, "weft_sum");
    RESOLVE(item, "weft_tensor_item");
    RESOLVE(scope_push, "weft_scope_push");
    RESOLVE(scope_pop, "weft_scope_pop");
    RESOLVE(error_code, "weft_error_code");
    RESOLVE(error_message, "weft_error_message");
    RESOLVE(view, "weft_view");
    int main_result = compute();
    int thread_result = 1;
    pthread_t th;
    if (pthread_create(&th, NULL, thread_main, &thread_result) != 0)
        return 1;
    pthread_join(th, NULL);
    if (main_result || thread_result)
        return 1;
    /* The main thread's error from compute() is still its own, untouched by the other. */
    if (api.error_code() == WEFT_OK) {
        fprintf(stderr, "dlopen_host: the main thread lost its error\n");
        return 1;
    }
    printf("dlopen_host: libweft computed through dlopen on two threads\n");
    return 0;
}
