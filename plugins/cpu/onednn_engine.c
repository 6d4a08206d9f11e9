/* plugins/cpu/onednn_engine.c: the plugin's one oneDNN CPU engine, which the bfloat16
 * matmuls (onednn_matmul.c) and the convolutions (conv_onednn.c) share. */
#ifdef WEFT_HAVE_ONEDNN
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

#include <weft/error.h>

#include "onednn_engine.h"

static dnnl_engine_t engine;
static dnnl_status_t engine_status = dnnl_runtime_error;
static pthread_once_t engine_once = PTHREAD_ONCE_INIT;

static void engine_create(void)
{
    engine_status = dnnl_engine_create(&engine, dnnl_cpu, 0);
}

dnnl_engine_t cpu_onednn_engine(dnnl_status_t *status)
{
    pthread_once(&engine_once, engine_create);
    *status = engine_status;
    return engine_status == dnnl_success ? engine : NULL;
}

int cpu_onednn_error(dnnl_status_t st, const char *fmt, ...)
{
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (st == dnnl_out_of_memory)
        return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "%s: oneDNN ran out of memory", what);
    return weft_error_set(WEFT_ERR_RUNTIME, "%s failed (status %d)", what, (int)st);
}
#else
typedef int cpu_onednn_engine_absent; /* ISO C: a translation unit declares something */
#endif
