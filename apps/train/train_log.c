/* apps/train/train_log.c: the CSV log (per epoch, or per evaluation against the step in
 * iteration mode), its SVG plot, and the progress line. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train.h"

#define MAX_EPOCHS_PLOTTED 10000

struct train_log {
    FILE *csv;
    char *svg_path;
    struct train_epoch_metrics *rows;
    int count, capacity;
    bool by_step, tokens;
};

static char *svg_path_for(const char *csv_path)
{
    size_t n = strlen(csv_path);
    const char *dot = strrchr(csv_path, '.');
    const char *slash = strrchr(csv_path, '/');
    if (dot && (!slash || dot > slash))
        n = (size_t)(dot - csv_path);
    char *p = malloc(n + 5);
    if (p) {
        memcpy(p, csv_path, n);
        memcpy(p + n, ".svg", 5);
    }
    return p;
}

struct train_log *train_log_open(const char *path, bool append, bool by_step, bool tokens)
{
    struct train_log *log = calloc(1, sizeof *log);
    if (!log) {
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of memory opening the training log");
        return NULL;
    }
    log->by_step = by_step;
    log->tokens = tokens;
    if (!path || !*path)
        return log;
    log->csv = fopen(path, append ? "a" : "w");
    log->svg_path = svg_path_for(path);
    if (!log->csv || !log->svg_path) {
        weft_error_set(WEFT_ERR_IO, "%s: cannot open the training log: %s", path, strerror(errno));
        train_log_close(log);
        return NULL;
    }
    if ((!append || ftell(log->csv) == 0) && by_step)
        fprintf(log->csv, "step,epoch,train_loss,val_loss,lr,%s,seconds\n",
                tokens ? "tokens_per_s" : "images_per_s");
    else if (!append || ftell(log->csv) == 0)
        fprintf(log->csv, "epoch,train_loss,train_acc,val_loss,val_acc,lr,images_per_s,seconds\n");
    fflush(log->csv);
    return log;
}

/* Maps a value into the plot's pixel range. */
static double scale(double v, double lo, double hi, double p0, double p1)
{
    return hi > lo ? p0 + (v - lo) / (hi - lo) * (p1 - p0) : (p0 + p1) / 2;
}

static void svg_series(FILE *f, const struct train_log *log, size_t offset, double lo, double hi,
                       const char *color, const char *dash, double x0, double x1, double y0, double y1)
{
    bool started = false;
    fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s points=\"", color, dash);
    for (int i = 0; i < log->count; i++) {
        double v = *(const double *)((const char *)&log->rows[i] + offset);
        if (isnan(v))
            continue;
        double x = log->by_step ? scale((double)log->rows[i].step, 0,
                                        (double)log->rows[log->count - 1].step, x0, x1)
                                : scale(i, 0, log->count > 1 ? log->count - 1 : 1, x0, x1);
        fprintf(f, "%s%.1f,%.1f", started ? " " : "", x, scale(v, lo, hi, y1, y0));
        started = true;
    }
    fprintf(f, "\"/>\n");
}

/* Loss (left axis) and accuracy (right axis, 0..100%) per epoch. */
static void write_svg(const struct train_log *log)
{
    const double w = 640, h = 360, x0 = 60, x1 = 580, y0 = 30, y1 = 310;
    double lo = INFINITY, hi = -INFINITY;
    for (int i = 0; i < log->count; i++) {
        const double vals[2] = {log->rows[i].train_loss, log->rows[i].val_loss};
        for (int k = 0; k < 2; k++)
            if (!isnan(vals[k])) {
                lo = fmin(lo, vals[k]);
                hi = fmax(hi, vals[k]);
            }
    }
    if (!isfinite(lo)) {
        lo = 0;
        hi = 1;
    }
    lo = fmin(lo, 0);
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", log->svg_path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
               "font-family=\"sans-serif\" font-size=\"12\">\n", w, h);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(f, "<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" stroke=\"#999\"/>\n",
            x0, y0, x1 - x0, y1 - y0);
    bool acc = false;
    for (int i = 0; i < log->count; i++)
        acc = acc || !isnan(log->rows[i].train_acc) || !isnan(log->rows[i].val_acc);
    for (int t = 0; t <= 4; t++) {
        double y = y1 - (y1 - y0) * t / 4;
        fprintf(f, "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">%.3g</text>\n", x0 - 6, y + 4,
                lo + (hi - lo) * t / 4);
        if (acc)
            fprintf(f, "<text x=\"%.0f\" y=\"%.1f\">%d%%</text>\n", x1 + 6, y + 4, 25 * t);
    }
    if (log->by_step)
        fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">step (0..%lld)</text>\n",
                (x0 + x1) / 2, h - 20, log->count ? (long long)log->rows[log->count - 1].step : 0LL);
    else
        fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">epoch (1..%d)</text>\n",
                (x0 + x1) / 2, h - 20, log->count);
    svg_series(f, log, offsetof(struct train_epoch_metrics, train_loss), lo, hi, "#1f77b4", "", x0, x1, y0, y1);
    svg_series(f, log, offsetof(struct train_epoch_metrics, val_loss), lo, hi, "#1f77b4",
               " stroke-dasharray=\"6 4\"", x0, x1, y0, y1);
    svg_series(f, log, offsetof(struct train_epoch_metrics, train_acc), 0, 1, "#d62728", "", x0, x1, y0, y1);
    svg_series(f, log, offsetof(struct train_epoch_metrics, val_acc), 0, 1, "#d62728",
               " stroke-dasharray=\"6 4\"", x0, x1, y0, y1);
    fprintf(f, "<text x=\"%.0f\" y=\"20\" fill=\"#1f77b4\">loss (train solid, validation dashed)</text>\n", x0);
    if (acc)
        fprintf(f, "<text x=\"%.0f\" y=\"20\" fill=\"#d62728\" text-anchor=\"end\">accuracy</text>\n", x1);
    fprintf(f, "</svg>\n");
    if (fclose(f) == 0)
        rename(tmp, log->svg_path);
}

int train_log_epoch(struct train_log *log, const struct train_epoch_metrics *m)
{
    if (!log || !log->csv)
        return 0;
    if (log->by_step)
        fprintf(log->csv, "%lld,%d,%.6f,%.6f,%.6g,%.1f,%.3f\n", (long long)m->step, m->epoch,
                m->train_loss, m->val_loss, m->lr, m->images_per_s, m->seconds);
    else
        fprintf(log->csv, "%d,%.6f,%.6f,%.6f,%.6f,%.6g,%.1f,%.3f\n", m->epoch, m->train_loss,
                m->train_acc, m->val_loss, m->val_acc, m->lr, m->images_per_s, m->seconds);
    fflush(log->csv);
    if (log->count == log->capacity && log->count < MAX_EPOCHS_PLOTTED) {
        int cap = log->capacity ? log->capacity * 2 : 16;
        struct train_epoch_metrics *p = realloc(log->rows, (size_t)cap * sizeof *p);
        if (!p)
            return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of memory in the training log");
        log->rows = p;
        log->capacity = cap;
    }
    if (log->count < log->capacity)
        log->rows[log->count++] = *m;
    write_svg(log);
    return 0;
}

void train_log_close(struct train_log *log)
{
    if (!log)
        return;
    if (log->csv)
        fclose(log->csv);
    free(log->svg_path);
    free(log->rows);
    free(log);
}

const char *train_format_duration(double seconds, char *buf, size_t size)
{
    long s = isfinite(seconds) && seconds > 0 ? (long)(seconds + 0.5) : 0;
    if (s >= 3600)
        snprintf(buf, size, "%ldh%02ldm", s / 3600, s / 60 % 60);
    else if (s >= 60)
        snprintf(buf, size, "%ldm%02lds", s / 60, s % 60);
    else
        snprintf(buf, size, "%lds", s);
    return buf;
}

void train_progress(int epoch, int epochs, int64_t batch, int64_t batches, double loss,
                    double per_s, const char *unit, double lr, double eta_s, bool tty)
{
    if (!tty)
        return; /* plain output gets only the per-epoch lines */
    const int width = 30;
    int filled = batches > 0 ? (int)(width * batch / batches) : width;
    char bar[64];
    for (int i = 0; i < width; i++)
        bar[i] = i < filled ? '#' : '.';
    bar[width] = '\0';
    char eta[32];
    fprintf(stdout, "\repoch %d/%d [%s] %lld/%lld  loss %.4f  %.0f %s  lr %.3g  ETA %s ", epoch,
            epochs, bar, (long long)batch, (long long)batches, loss, per_s, unit, lr,
            train_format_duration(eta_s, eta, sizeof eta));
    fflush(stdout);
}
