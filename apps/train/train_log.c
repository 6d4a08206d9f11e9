/* apps/train/train_log.c: the CSV log (per epoch, or per evaluation against the step in
 * iteration mode), its SVG plot, and the progress line. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "train.h"

#define MAX_EPOCHS_PLOTTED 10000

struct train_log {
    FILE *csv;
    char *path, *svg_path;
    FILE *steps;        /* [train] log_every's rows, opened on first use */
    struct train_epoch_metrics *rows; /* what the plot draws: one row per epoch (step) */
    int count, capacity;
    bool by_step;
    char per_s[32];     /* the throughput's column: images_per_s, tokens_per_s, samples_per_s */
    char columns[1024]; /* the header: this weft's, or that of the log appended to */
};

/* "runs/log.csv" -> "runs/log<suffix>" */
static char *sibling(const char *csv_path, const char *suffix)
{
    size_t n = strlen(csv_path), k = strlen(suffix);
    const char *dot = strrchr(csv_path, '.');
    const char *slash = strrchr(csv_path, '/');
    if (dot && (!slash || dot > slash))
        n = (size_t)(dot - csv_path);
    char *p = malloc(n + k + 1);
    if (p) {
        memcpy(p, csv_path, n);
        memcpy(p + n, suffix, k + 1);
    }
    return p;
}

/* This weft's header: per epoch, or per evaluation against the step; the throughput
 * column named after the unit (images_per_s, tokens_per_s, samples_per_s); the EMA
 * model's validation figures when [train] ema_decay is set. */
static void make_header(struct train_log *log, const char *per_s, bool ema)
{
    snprintf(log->columns, sizeof log->columns,
             log->by_step ? "step,epoch,train_loss,val_loss,lr,%s,seconds,peak_allocated_bytes%s"
                          : "epoch,train_loss,train_acc,val_loss,val_acc,lr,%s,seconds,partial,"
                            "peak_allocated_bytes%s",
             per_s, !ema ? "" : log->by_step ? ",ema_val_loss" : ",ema_val_loss,ema_val_acc");
}

/* The row's value of a column of either header, "" for a column it does not know. */
static void column_value(const struct train_log *log, const struct train_epoch_metrics *m,
                         const char *col, char *out, size_t size)
{
    out[0] = '\0';
    if (!strcmp(col, "step"))
        snprintf(out, size, "%lld", (long long)m->step);
    else if (!strcmp(col, "epoch"))
        snprintf(out, size, "%d", m->epoch);
    else if (!strcmp(col, "train_loss"))
        snprintf(out, size, "%.6f", m->train_loss);
    else if (!strcmp(col, "train_acc"))
        snprintf(out, size, "%.6f", m->train_acc);
    else if (!strcmp(col, "val_loss"))
        snprintf(out, size, "%.6f", m->val_loss);
    else if (!strcmp(col, "val_acc"))
        snprintf(out, size, "%.6f", m->val_acc);
    else if (!strcmp(col, "lr"))
        snprintf(out, size, "%.6g", m->lr);
    else if (strlen(col) > 6 && !strcmp(col + strlen(col) - 6, "_per_s"))
        snprintf(out, size, "%.1f", m->images_per_s);
    else if (!strcmp(col, "seconds"))
        snprintf(out, size, "%.3f", m->seconds);
    else if (!strcmp(col, "partial"))
        snprintf(out, size, "%d", m->partial ? 1 : 0);
    else if (!strcmp(col, "peak_allocated_bytes"))
        snprintf(out, size, "%lld", (long long)m->peak_allocated_bytes);
    else if (!strcmp(col, "ema_val_loss"))
        snprintf(out, size, "%.6f", m->ema_val_loss);
    else if (!strcmp(col, "ema_val_acc"))
        snprintf(out, size, "%.6f", m->ema_val_acc);
    (void)log;
}

/* One row in the columns of the file's header: this weft's, or those of the log a resumed
 * run appends to, which is never rewritten (a column it lacks is left out, one this weft
 * does not write is left empty). */
static void write_row(const struct train_log *log, FILE *f, const struct train_epoch_metrics *m)
{
    char cols[1024], val[64];
    snprintf(cols, sizeof cols, "%s", log->columns);
    bool first = true;
    for (char *save = NULL, *c = strtok_r(cols, ",", &save); c; c = strtok_r(NULL, ",", &save)) {
        column_value(log, m, c, val, sizeof val);
        fprintf(f, "%s%s", first ? "" : ",", val);
        first = false;
    }
    fputc('\n', f);
}

/* The plot's key of a row: its step (iteration mode) or epoch. */
static double row_key(const struct train_log *log, const struct train_epoch_metrics *m)
{
    return log->by_step ? (double)m->step : (double)m->epoch;
}

/* Keeps m for the plot. A row at or before the last one's epoch (step) replaces those
 * from there on: a resumed run that went back to its checkpoint, or an epoch finished
 * after its interrupted part was logged. */
static int plot_add(struct train_log *log, const struct train_epoch_metrics *m)
{
    while (log->count > 0 && row_key(log, &log->rows[log->count - 1]) >= row_key(log, m))
        log->count--;
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
    return 0;
}

/* The rows of an existing log, by its header's column names (a log of an older weft
 * has no `partial` column), for the plot of a resumed run. */
static int read_rows(struct train_log *log, FILE *f)
{
    char line[1024];
    if (!fgets(line, sizeof line, f))
        return 0;
    line[strcspn(line, "\r\n")] = '\0';
    if (line[0]) /* rows go on in the file's columns */
        snprintf(log->columns, sizeof log->columns, "%s", line);
    enum { C_STEP, C_EPOCH, C_TL, C_TA, C_VL, C_VA, C_LR, C_PS, C_SEC, C_PART, C_PEAK, C_N };
    static const char *const names[C_N] = {"step", "epoch", "train_loss", "train_acc",
                                           "val_loss", "val_acc", "lr", "_per_s", "seconds",
                                           "partial", "peak_allocated_bytes"};
    int col[C_N];
    for (int c = 0; c < C_N; c++)
        col[c] = -1;
    int ncol = 0;
    for (char *tok = strtok(line, ","); tok; tok = strtok(NULL, ","), ncol++)
        for (int c = 0; c < C_N; c++)
            if (strcmp(tok, names[c]) == 0 ||
                (c == C_PS && strlen(tok) > 6 && strcmp(tok + strlen(tok) - 6, "_per_s") == 0))
                col[c] = ncol;
    if (col[log->by_step ? C_STEP : C_EPOCH] < 0)
        return 0; /* not a log of this mode: plotted from this run on */
    while (fgets(line, sizeof line, f)) {
        double v[32];
        int n = 0;
        for (char *p = line; n < 32;) {
            v[n++] = strtod(p, &p);
            if (*p != ',')
                break;
            p++;
        }
        double get[C_N];
        for (int c = 0; c < C_N; c++)
            get[c] = col[c] >= 0 && col[c] < n ? v[col[c]] : (c == C_PART || c == C_PEAK ? 0 : NAN);
        struct train_epoch_metrics m = {
            .epoch = (int)get[C_EPOCH], .step = (int64_t)get[C_STEP],
            .train_loss = get[C_TL], .train_acc = get[C_TA], .val_loss = get[C_VL],
            .val_acc = get[C_VA], .lr = get[C_LR], .images_per_s = get[C_PS],
            .seconds = get[C_SEC], .partial = get[C_PART] != 0,
            .peak_allocated_bytes = (int64_t)get[C_PEAK],
        };
        if (isnan(get[log->by_step ? C_STEP : C_EPOCH]))
            continue;
        if (plot_add(log, &m) != 0)
            return weft_error_code();
    }
    return 0;
}

/* A resumed run's log: its rows for the plot, and its header for the rows to come. */
static int reopen(struct train_log *log, const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0; /* no log yet */
    int rc = read_rows(log, f);
    fclose(f);
    return rc;
}

struct train_log *train_log_open(const char *path, bool append, bool by_step, const char *per_s,
                                 bool ema)
{
    struct train_log *log = calloc(1, sizeof *log);
    if (!log) {
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of memory opening the training log");
        return NULL;
    }
    log->by_step = by_step;
    snprintf(log->per_s, sizeof log->per_s, "%s", per_s);
    make_header(log, per_s, ema);
    if (!path || !*path)
        return log;
    log->path = strdup(path);
    log->svg_path = sibling(path, ".svg");
    if (!log->path || !log->svg_path) {
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of memory opening the training log");
        train_log_close(log);
        return NULL;
    }
    if (append && reopen(log, path) != 0) {
        train_log_close(log);
        return NULL;
    }
    log->csv = fopen(path, append ? "a" : "w");
    if (!log->csv) {
        weft_error_set(WEFT_ERR_IO, "%s: cannot open the training log: %s", path, strerror(errno));
        train_log_close(log);
        return NULL;
    }
    if (!append || ftell(log->csv) == 0) {
        make_header(log, per_s, ema);
        fprintf(log->csv, "%s\n", log->columns);
    }
    fflush(log->csv);
    return log;
}

/* Maps a value into the plot's pixel range. */
static double scale(double v, double lo, double hi, double p0, double p1)
{
    return hi > lo ? p0 + (v - lo) / (hi - lo) * (p1 - p0) : (p0 + p1) / 2;
}

struct frame {
    double x0, x1, y0, y1; /* the plot area in pixels */
    double klo, khi;       /* the x axis: epochs (steps) */
};

/* One series as a polyline, or a dot when it has a single point; nothing when it has
 * none (an empty points list is invalid SVG: renderers refuse the file). */
static void svg_series(FILE *f, const struct train_log *log, const struct frame *fr,
                       size_t offset, double lo, double hi, const char *color, const char *dash)
{
    int n = 0;
    for (int i = 0; i < log->count; i++)
        n += !isnan(*(const double *)((const char *)&log->rows[i] + offset));
    if (n == 0)
        return;
    if (n == 1)
        fprintf(f, "<circle r=\"3\" fill=\"%s\"", color);
    else
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s points=\"", color,
                dash);
    bool started = false;
    for (int i = 0; i < log->count; i++) {
        double v = *(const double *)((const char *)&log->rows[i] + offset);
        if (isnan(v))
            continue;
        double x = scale(row_key(log, &log->rows[i]), fr->klo, fr->khi, fr->x0, fr->x1);
        double y = scale(v, lo, hi, fr->y1, fr->y0);
        if (n == 1)
            fprintf(f, " cx=\"%.1f\" cy=\"%.1f\"/>\n", x, y);
        else
            fprintf(f, "%s%.1f,%.1f", started ? " " : "", x, y);
        started = true;
    }
    if (n > 1)
        fprintf(f, "\"/>\n");
}

/* A tick spacing of 1, 2 or 5 times a power of ten giving at most about 10 ticks. */
static double tick_step(double span)
{
    double raw = span / 10, p = pow(10, floor(log10(raw > 0 ? raw : 1)));
    double step = raw <= p ? p : raw <= 2 * p ? 2 * p : raw <= 5 * p ? 5 * p : 10 * p;
    return step < 1 ? 1 : step; /* epochs and steps are whole */
}

/* The x axis: ticks with labels at whole epochs (steps), the axis title under them. */
static void svg_x_axis(FILE *f, const struct train_log *log, const struct frame *fr, double h)
{
    double step = tick_step(fr->khi - fr->klo);
    for (double k = ceil(fr->klo / step) * step; k <= fr->khi + 1e-9; k += step) {
        double x = scale(k, fr->klo, fr->khi, fr->x0, fr->x1);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.0f\" x2=\"%.1f\" y2=\"%.0f\" stroke=\"#999\"/>\n", x,
                fr->y1, x, fr->y1 + 5);
        fprintf(f, "<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\">%.0f</text>\n", x,
                fr->y1 + 18, k);
    }
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">%s</text>\n",
            (fr->x0 + fr->x1) / 2, h - 8, log->by_step ? "step" : "epoch");
}

/* Loss (left axis) and accuracy (right axis, 0..100%) per epoch (step), over every row
 * of the log, a resumed run's earlier ones included. */
static void write_svg(const struct train_log *log)
{
    const double w = 640, h = 360;
    struct frame fr = {.x0 = 60, .x1 = 580, .y0 = 30, .y1 = 310};
    double lo = INFINITY, hi = -INFINITY;
    bool acc = false, val = false;
    for (int i = 0; i < log->count; i++) {
        const struct train_epoch_metrics *m = &log->rows[i];
        const double vals[2] = {m->train_loss, m->val_loss};
        for (int k = 0; k < 2; k++)
            if (!isnan(vals[k]) && isfinite(vals[k])) {
                lo = fmin(lo, vals[k]);
                hi = fmax(hi, vals[k]);
            }
        acc = acc || !isnan(m->train_acc) || !isnan(m->val_acc);
        val = val || !isnan(m->val_loss);
    }
    if (!isfinite(lo)) {
        lo = 0;
        hi = 1;
    }
    lo = fmin(lo, 0);
    /* from epoch 1 (step 0) to the last; one epoch alone sits in the middle */
    fr.klo = log->by_step ? 0 : 1;
    fr.khi = log->count ? fmax(fr.klo, row_key(log, &log->rows[log->count - 1])) : fr.klo;
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", log->svg_path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
               "font-family=\"sans-serif\" font-size=\"12\">\n", w, h);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(f, "<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" stroke=\"#999\"/>\n",
            fr.x0, fr.y0, fr.x1 - fr.x0, fr.y1 - fr.y0);
    for (int t = 0; t <= 4; t++) {
        double y = fr.y1 - (fr.y1 - fr.y0) * t / 4;
        fprintf(f, "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">%.3g</text>\n", fr.x0 - 6,
                y + 4, lo + (hi - lo) * t / 4);
        if (acc)
            fprintf(f, "<text x=\"%.0f\" y=\"%.1f\">%d%%</text>\n", fr.x1 + 6, y + 4, 25 * t);
    }
    svg_x_axis(f, log, &fr, h);
    svg_series(f, log, &fr, offsetof(struct train_epoch_metrics, train_loss), lo, hi, "#1f77b4", "");
    svg_series(f, log, &fr, offsetof(struct train_epoch_metrics, val_loss), lo, hi, "#1f77b4",
               " stroke-dasharray=\"6 4\"");
    svg_series(f, log, &fr, offsetof(struct train_epoch_metrics, train_acc), 0, 1, "#d62728", "");
    svg_series(f, log, &fr, offsetof(struct train_epoch_metrics, val_acc), 0, 1, "#d62728",
               " stroke-dasharray=\"6 4\"");
    fprintf(f, "<text x=\"%.0f\" y=\"20\" fill=\"#1f77b4\">%s</text>\n", fr.x0,
            val ? "loss (train solid, validation dashed)" : "loss (train)");
    if (acc)
        fprintf(f, "<text x=\"%.0f\" y=\"20\" fill=\"#d62728\" text-anchor=\"end\">accuracy</text>\n", fr.x1);
    fprintf(f, "</svg>\n");
    if (fclose(f) == 0)
        rename(tmp, log->svg_path);
}

int train_log_epoch(struct train_log *log, const struct train_epoch_metrics *m)
{
    if (train_tensorboard_epoch(m) != 0)
        return weft_error_code();
    if (!log || !log->csv)
        return 0;
    write_row(log, log->csv, m);
    fflush(log->csv);
    if (plot_add(log, m) != 0)
        return weft_error_code();
    write_svg(log);
    return 0;
}

int train_log_step(struct train_log *log, int64_t step, int epoch, int64_t batch, double loss,
                   double lr, double per_s, double seconds)
{
    if (train_tensorboard_step(step, loss, lr, per_s) != 0)
        return weft_error_code();
    if (!log || !log->path)
        return 0;
    if (!log->steps) {
        char *p = sibling(log->path, ".steps.csv");
        log->steps = p ? fopen(p, "a") : NULL;
        if (!log->steps) {
            int rc = weft_error_set(WEFT_ERR_IO, "%s: cannot open the steps log: %s",
                                    p ? p : log->path, strerror(errno));
            free(p);
            return rc;
        }
        free(p);
        if (ftell(log->steps) == 0)
            fprintf(log->steps, "step,epoch,batch,loss,lr,%s,seconds\n", log->per_s);
    }
    fprintf(log->steps, "%lld,%d,%lld,%.6f,%.6g,%.1f,%.3f\n", (long long)step, epoch,
            (long long)batch, loss, lr, per_s, seconds);
    fflush(log->steps);
    return 0;
}

void train_log_close(struct train_log *log)
{
    if (!log)
        return;
    if (log->csv)
        fclose(log->csv);
    if (log->steps)
        fclose(log->steps);
    free(log->path);
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

/* The terminal's width, 80 when it cannot be told. */
static int columns(void)
{
    struct winsize ws;
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
        return ws.ws_col;
    const char *env = getenv("COLUMNS");
    return env && atoi(env) > 0 ? atoi(env) : 80;
}

void train_progress(int epoch, int epochs, int64_t batch, int64_t batches, double loss,
                    double per_s, const char *unit, double lr, const struct train_times *tm,
                    bool tty)
{
    if (!tty)
        return; /* plain output gets only the per-epoch lines */
    /* at most 10 redraws a second (tqdm's mininterval): a fast epoch would flood the
     * terminal, and a log of it, with lines nobody sees */
    static double last;
    double now = train_now();
    if (batch > 1 && batch < batches && now - last < 0.1)
        return;
    last = now;
    char ee[32], el[32], re[32], rl[32], head[64], tail[256];
    snprintf(head, sizeof head, "epoch %d/%d ", epoch, epochs);
    /* tqdm's elapsed<remaining, for the epoch and for the run */
    snprintf(tail, sizeof tail, " %lld/%lld  loss %.4f  %.0f %s  lr %.3g  epoch %s<%s  run %s<%s",
             (long long)batch, (long long)batches, loss, per_s, unit, lr,
             train_format_duration(tm->epoch_elapsed, ee, sizeof ee),
             train_format_duration(tm->epoch_eta, el, sizeof el),
             train_format_duration(tm->run_elapsed, re, sizeof re),
             train_format_duration(tm->run_eta, rl, sizeof rl));
    /* One line that fits: a wrapped line would not be overwritten by the next. */
    int cols = columns() - 1;
    int width = cols - (int)strlen(head) - (int)strlen(tail) - 2;
    /* the bar only shrinks within an epoch (as the numbers grow), so it does not jitter */
    static int stable = 30;
    if (batch <= 1)
        stable = 30;
    width = width > stable ? stable : width;
    stable = width;
    char bar[40];
    snprintf(bar, sizeof bar, "%3d%%", batches > 0 ? (int)(100 * batch / batches) : 100);
    if (width >= 10) { /* else the percentage alone: a narrow terminal */
        int filled = batches > 0 ? (int)(width * batch / batches) : width;
        bar[0] = '[';
        for (int i = 0; i < width; i++)
            bar[i + 1] = i < filled ? '#' : '.';
        bar[width + 1] = ']';
        bar[width + 2] = '\0';
    }
    char line[512];
    snprintf(line, sizeof line, "%s%s%s", head, bar, tail);
    if (cols > 0 && (int)strlen(line) > cols)
        line[cols] = '\0';
    fprintf(stdout, "\r%s\033[K", line);
    fflush(stdout);
}

void train_progress_clear(bool tty)
{
    if (tty) {
        fputs("\r\033[K", stdout);
        fflush(stdout);
    }
}
