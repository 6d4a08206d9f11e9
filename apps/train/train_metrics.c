/* apps/train/train_metrics.c: [train] metrics = HOST:PORT, the run's figures in
 * Prometheus' text exposition format on http://HOST:PORT/metrics.
 *
 * libmicrohttpd serves from its own thread. The training thread publishes its figures
 * with relaxed atomic stores after each step and the server reads them with atomic loads
 * while it writes a page: neither ever waits for the other, and the server calls nothing
 * of weft's. A page may mix two steps' figures; a gauge scraped a step late is what
 * Prometheus expects anyway. */
#include <arpa/inet.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train.h"
#include "train_observe.h"

#ifdef WEFT_HAVE_MICROHTTPD
#include <microhttpd.h>

struct train_metrics {
    struct MHD_Daemon *daemon;
    int port;
    int rank;
    char unit[16];   /* "images" or "tokens" */
    char device[2][32];
    int ndevices;
    /* published: doubles as their bits, all through __atomic */
    uint64_t loss, lr, per_s, eta, wait_total, wait_last;
    uint64_t step, epoch, queue_depth, steps_done;
    uint64_t allocated[2], reserved[2], peak[2];
};

static void put_double(uint64_t *slot, double v)
{
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    __atomic_store_n(slot, bits, __ATOMIC_RELAXED);
}

static double get_double(const uint64_t *slot)
{
    uint64_t bits = __atomic_load_n(slot, __ATOMIC_RELAXED);
    double v;
    memcpy(&v, &bits, sizeof v);
    return v;
}

static void put(uint64_t *slot, uint64_t v)
{
    __atomic_store_n(slot, v, __ATOMIC_RELAXED);
}

static uint64_t get(const uint64_t *slot)
{
    return __atomic_load_n(slot, __ATOMIC_RELAXED);
}

void train_metrics_publish(struct train_metrics *m, const struct train_metrics_values *v)
{
    if (!m)
        return;
    put_double(&m->loss, v->loss);
    put_double(&m->lr, v->lr);
    put_double(&m->per_s, v->per_s);
    put_double(&m->eta, v->eta_seconds);
    put_double(&m->wait_total, v->loader_wait_total);
    put_double(&m->wait_last, v->loader_wait_last);
    put(&m->step, (uint64_t)v->step);
    put(&m->epoch, (uint64_t)v->epoch);
    put(&m->queue_depth, (uint64_t)v->queue_depth);
    for (int d = 0; d < m->ndevices && d < 2; d++) {
        put(&m->allocated[d], v->allocated[d]);
        put(&m->reserved[d], v->reserved[d]);
        put(&m->peak[d], v->peak[d]);
    }
    put(&m->steps_done, 1);
}

struct page {
    char *s;
    size_t n, cap;
    bool failed;
};

static void add(struct page *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(struct page *p, const char *fmt, ...)
{
    while (!p->failed) {
        va_list ap;
        va_start(ap, fmt);
        int len = vsnprintf(p->s + p->n, p->cap - p->n, fmt, ap);
        va_end(ap);
        if (len >= 0 && p->n + (size_t)len < p->cap) {
            p->n += (size_t)len;
            return;
        }
        char *s = len < 0 ? NULL : realloc(p->s, p->cap * 2 + (size_t)len);
        if (!s) {
            p->failed = true;
            return;
        }
        p->s = s;
        p->cap = p->cap * 2 + (size_t)len;
    }
}

/* "# HELP", "# TYPE" and one sample. */
static void gauge(struct page *p, const char *name, const char *help, double v)
{
    add(p, "# HELP %s %s\n# TYPE %s gauge\n%s %.17g\n", name, help, name, name, v);
}

static void per_device(struct page *p, const struct train_metrics *m, const char *name,
                       const char *help, const uint64_t *values)
{
    add(p, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name);
    for (int d = 0; d < m->ndevices; d++)
        add(p, "%s{device=\"%s\"} %llu\n", name, m->device[d], (unsigned long long)get(&values[d]));
}

static char *render(const struct train_metrics *m, size_t *len)
{
    struct page p = {malloc(4096), 0, 4096, false};
    if (!p.s)
        return NULL;
    p.s[0] = '\0';
    add(&p, "# HELP weft_train_info The run: this process's rank.\n# TYPE weft_train_info gauge\n"
            "weft_train_info{rank=\"%d\",unit=\"%s\"} 1\n", m->rank, m->unit);
    if (get(&m->steps_done)) {
        gauge(&p, "weft_train_loss", "Training loss of the last step (mean over its batch).",
              get_double(&m->loss));
        gauge(&p, "weft_train_learning_rate", "Learning rate of the next step.", get_double(&m->lr));
        char help[96];
        snprintf(help, sizeof help, "Training throughput in %s per second (this process).",
                 m->unit);
        gauge(&p, "weft_train_throughput_per_second", help, get_double(&m->per_s));
        gauge(&p, "weft_train_eta_seconds", "Estimated seconds until training ends.",
              get_double(&m->eta));
    }
    gauge(&p, "weft_train_step", "Optimizer steps taken.", (double)get(&m->step));
    gauge(&p, "weft_train_epoch", "The epoch in progress (from 1).", (double)get(&m->epoch));
    per_device(&p, m, "weft_memory_allocated_bytes", "Bytes the allocator hands out now.",
               m->allocated);
    per_device(&p, m, "weft_memory_reserved_bytes", "Bytes the allocator holds (with its cache).",
               m->reserved);
    per_device(&p, m, "weft_memory_peak_allocated_bytes",
               "Peak of the allocated bytes in the epoch in progress.", m->peak);
    gauge(&p, "weft_dataloader_queue_depth", "Batches loaded and waiting for the training step.",
          (double)get(&m->queue_depth));
    gauge(&p, "weft_dataloader_wait_seconds", "Seconds the last step waited for its batch.",
          get_double(&m->wait_last));
    add(&p, "# HELP weft_dataloader_wait_seconds_total Seconds training waited for batches.\n"
            "# TYPE weft_dataloader_wait_seconds_total counter\n"
            "weft_dataloader_wait_seconds_total %.17g\n", get_double(&m->wait_total));
    if (p.failed) {
        free(p.s);
        return NULL;
    }
    *len = p.n;
    return p.s;
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, char *body, size_t len,
                             const char *type)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", type);
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_size, void **con_cls)
{
    (void)version, (void)upload, (void)upload_size, (void)con_cls;
    const struct train_metrics *m = cls;
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return reply(c, MHD_HTTP_METHOD_NOT_ALLOWED, strdup("GET /metrics\n"), 13, "text/plain");
    if (strcmp(url, "/metrics") != 0)
        return reply(c, MHD_HTTP_NOT_FOUND, strdup("not found: the page is /metrics\n"), 32,
                     "text/plain");
    size_t len = 0;
    char *page = render(m, &len);
    if (!page)
        return MHD_NO;
    return reply(c, MHD_HTTP_OK, page, len, "text/plain; version=0.0.4; charset=utf-8");
}

struct train_metrics *train_metrics_start(const char *where, const struct train_metrics_setup *s)
{
    char host[256];
    const char *colon = strrchr(where, ':');
    char *end;
    long port = colon ? strtol(colon + 1, &end, 10) : -1;
    if (!colon || colon == where || (size_t)(colon - where) >= sizeof host || *end ||
        colon[1] == '\0' || port < 0 || port > 65535) {
        weft_error_set(WEFT_ERR_CONFIG, "[train] metrics = %s: expected HOST:PORT, e.g. "
                                        "127.0.0.1:9464", where);
        return NULL;
    }
    memcpy(host, where, (size_t)(colon - where));
    host[colon - where] = '\0';
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (strcmp(host, "localhost") == 0)
        snprintf(host, sizeof host, "127.0.0.1");
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
        weft_error_set(WEFT_ERR_CONFIG, "[train] metrics = %s: '%s' is not an IPv4 address",
                       where, host);
        return NULL;
    }
    struct train_metrics *m = calloc(1, sizeof *m);
    if (!m) {
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of memory starting the metrics server");
        return NULL;
    }
    m->rank = s->rank;
    snprintf(m->unit, sizeof m->unit, "%s", s->tokens ? "tokens" : "images");
    m->ndevices = s->ndevices;
    for (int d = 0; d < s->ndevices && d < 2; d++)
        weft_device_str(s->devices[d], m->device[d], sizeof m->device[d]);
    m->daemon = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD, (uint16_t)port, NULL, NULL,
                                 handle, m, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
                                 MHD_OPTION_CONNECTION_TIMEOUT, 10u, MHD_OPTION_END);
    if (!m->daemon) {
        free(m);
        weft_error_set(WEFT_ERR_CONFIG, "[train] metrics = %s: cannot listen there (in use, or "
                                        "not an address of this machine)", where);
        return NULL;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(m->daemon, MHD_DAEMON_INFO_BIND_PORT);
    m->port = info ? info->port : (int)port;
    return m;
}

int train_metrics_port(const struct train_metrics *m)
{
    return m ? m->port : 0;
}

void train_metrics_stop(struct train_metrics *m)
{
    if (!m)
        return;
    MHD_stop_daemon(m->daemon);
    free(m);
}

#else /* built without libmicrohttpd */

struct train_metrics *train_metrics_start(const char *where, const struct train_metrics_setup *s)
{
    (void)s;
    weft_error_set(WEFT_ERR_CONFIG, "[train] metrics = %s: this weft-train was built without "
                                    "libmicrohttpd (install libmicrohttpd-dev and rebuild)", where);
    return NULL;
}

void train_metrics_publish(struct train_metrics *m, const struct train_metrics_values *v)
{
    (void)m, (void)v;
}

int train_metrics_port(const struct train_metrics *m)
{
    (void)m;
    return 0;
}

void train_metrics_stop(struct train_metrics *m)
{
    (void)m;
}

#endif
