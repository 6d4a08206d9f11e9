/* apps/train/train_runs.c: a new run never destroys an earlier one.
 *
 * A run's files are its checkpoints ([train] checkpoint, with the .train state, the .best
 * and .ema models beside them) and its logs ([train] log with the .steps.csv beside it).
 * When a new run (no --resume) finds files of an earlier run at those paths, it refuses
 * to start, before anything is loaded or written, and says how to continue the earlier
 * run, replace it (--overwrite, or [train] overwrite = true) or keep both (other paths):
 * HF Trainer's overwrite_output_dir, rather than Lightning's version_N folders, because
 * every other command reads the paths the config names (eval, predict, export,
 * weft-generate, make train-gpt), and a run moved to another folder behind their back
 * would leave them reading the earlier model. A log with a header and no row, a .next
 * state or a temporary file of a save killed before it completed are no run: they are
 * replaced without a word.
 *
 * [train] checkpoint may name its files by {epoch} and {step} (Python's str.format:
 * "runs/model-{epoch}.safetensors", "ckpt-{step:06d}.safetensors"), so that every save
 * keeps its own file (`torch.save(..., f"model_{epoch}.pt")`); {epoch} is the epoch as
 * the epoch lines number it (1 for the first), the epoch that ended or the one a save
 * inside it interrupted. `keep_last = K` keeps the K newest of them (ModelCheckpoint's
 * save_top_k over time): older ones, with their states, are removed after each save.
 * The .best and .ema models are one file each, named after the checkpoint name with its
 * fields left out ("runs/model-{epoch}.safetensors" -> "runs/model.best.safetensors").
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "train.h"

#define MAX_FIELDS 4

/* One {field} of a checkpoint name: which, its zero-padded width, where it is. */
struct field {
    enum { F_EPOCH, F_STEP } kind;
    int width;
    size_t begin, end; /* [begin, end) of "{...}" in the name */
};

/* The fields of name (a file path); -1 with the error naming [train] checkpoint for a
 * brace that is not {epoch}, {step}, {epoch:0Nd} or {step:0Nd}, or a field outside the
 * file's name. */
static int parse_fields(const struct trainer *t, const char *name, struct field *f, int *n)
{
    *n = 0;
    const char *slash = strrchr(name, '/');
    for (const char *p = name; *p; p++) {
        if (*p != '{' && *p != '}')
            continue;
        const char *close = *p == '{' ? strchr(p, '}') : NULL;
        char inner[32] = "";
        if (close && (size_t)(close - p - 1) < sizeof inner)
            snprintf(inner, sizeof inner, "%.*s", (int)(close - p - 1), p + 1);
        const char *colon = strchr(inner, ':');
        size_t key = colon ? (size_t)(colon - inner) : strlen(inner);
        struct field fl = {.begin = (size_t)(p - name), .end = close ? (size_t)(close - name + 1) : 0};
        bool ok = close && *n < MAX_FIELDS;
        if (ok && key == 5 && strncmp(inner, "epoch", 5) == 0)
            fl.kind = F_EPOCH;
        else if (ok && key == 4 && strncmp(inner, "step", 4) == 0)
            fl.kind = F_STEP;
        else
            ok = false;
        if (ok && colon) { /* ":06d", ":6", ":06" */
            char *end;
            long w = strtol(colon + 1, &end, 10);
            ok = end != colon + 1 && (*end == '\0' || (end[0] == 'd' && end[1] == '\0')) &&
                 w >= 0 && w <= 20;
            fl.width = (int)w;
        }
        if (!ok)
            return weft_error_set(WEFT_ERR_CONFIG,
                                  "%s: [train] checkpoint = %s: '%.*s' is not a field of a "
                                  "checkpoint name: expected {epoch} or {step} (a width as "
                                  "{step:06d}), at most %d of them",
                                  weft_config_name(t->cfg), name,
                                  close ? (int)(close - p + 1) : (int)strlen(p), p, MAX_FIELDS);
        if (slash && p < slash)
            return weft_error_set(WEFT_ERR_CONFIG,
                                  "%s: [train] checkpoint = %s: {epoch} and {step} belong in the "
                                  "file's name, not its directory (keep_last looks in one "
                                  "directory)", weft_config_name(t->cfg), name);
        f[(*n)++] = fl;
        p = close;
    }
    return 0;
}

bool train_checkpoint_is_template(const char *name)
{
    return name && strchr(name, '{') != NULL;
}

int train_checkpoint_expand(const struct trainer *t, int64_t epoch, int64_t step, char *out,
                            size_t size)
{
    struct field f[MAX_FIELDS];
    int n;
    const char *name = t->s.checkpoint;
    if (parse_fields(t, name, f, &n) != 0)
        return weft_error_code();
    size_t len = 0, from = 0;
    for (int i = 0; i <= n && len < size; i++) {
        size_t to = i < n ? f[i].begin : strlen(name);
        len += (size_t)snprintf(out + len, size - len, "%.*s", (int)(to - from), name + from);
        if (i < n && len < size)
            len += (size_t)snprintf(out + len, size - len, "%0*lld", f[i].width,
                                    (long long)(f[i].kind == F_EPOCH ? epoch : step));
        from = i < n ? f[i].end : to;
    }
    if (len >= size)
        return weft_error_set(WEFT_ERR_CONFIG, "%s: [train] checkpoint = %s: the path is too long",
                              weft_config_name(t->cfg), name);
    return 0;
}

void train_checkpoint_base(const char *name, char *out, size_t size)
{
    /* the fields out, and a separator before each ("model-{epoch}" -> "model") */
    size_t len = 0;
    bool removed = false;
    for (const char *p = name; *p && len + 1 < size; p++) {
        const char *close = *p == '{' ? strchr(p, '}') : NULL;
        if (!close) {
            out[len++] = *p;
            continue;
        }
        removed = true;
        while (len > 0 && strchr("-_=.", out[len - 1]) && (len < 2 || out[len - 2] != '/'))
            len--;
        p = close;
    }
    out[len] = '\0';
    /* "runs/{epoch}.safetensors" leaves no stem: "runs/model.safetensors" */
    const char *slash = strrchr(out, '/');
    const char *base = slash ? slash + 1 : out;
    if (removed && (base[0] == '.' || base[0] == '\0')) {
        char rest[4096];
        snprintf(rest, sizeof rest, "%s", base);
        snprintf(out + (base - out), size - (size_t)(base - out), "model%s", rest);
    }
}

/* ---- the files of a run -------------------------------------------------------------- */

/* Whether base (a file name) is name's file name with digits in place of its fields;
 * *key gets the step (else the epoch) it was saved at, for ordering. */
static bool matches(const char *name, const struct field *f, int n, const char *base, int64_t *key)
{
    const char *slash = strrchr(name, '/');
    size_t off = slash ? (size_t)(slash - name + 1) : 0;
    const char *b = base;
    size_t from = off;
    int64_t epoch = -1, step = -1;
    for (int i = 0; i <= n; i++) {
        size_t to = i < n ? f[i].begin : strlen(name);
        if (strncmp(b, name + from, to - from) != 0)
            return false;
        b += to - from;
        if (i == n)
            break;
        char *end;
        errno = 0;
        long long v = strtoll(b, &end, 10);
        if (end == b || *b < '0' || *b > '9' || errno)
            return false;
        *(f[i].kind == F_EPOCH ? &epoch : &step) = v;
        b = end;
        from = f[i].end;
    }
    if (*b)
        return false;
    *key = step >= 0 ? step : epoch;
    return true;
}

struct saved {
    char path[4096 + 260];
    int64_t key;
};

/* The checkpoints a name's template matches in its directory (all of them, or the file
 * itself when it has no field), newest last. *out is malloc'd (free it). */
static int list_checkpoints(const struct trainer *t, struct saved **out, int *count)
{
    *out = NULL;
    *count = 0;
    const char *name = t->s.checkpoint;
    struct field f[MAX_FIELDS];
    int n;
    if (parse_fields(t, name, f, &n) != 0)
        return weft_error_code();
    if (n == 0) {
        if (access(name, F_OK) != 0)
            return 0;
        if (!(*out = calloc(1, sizeof **out)))
            return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of memory listing checkpoints");
        snprintf((*out)[0].path, sizeof (*out)[0].path, "%s", name);
        *count = 1;
        return 0;
    }
    char dir[4096];
    const char *slash = strrchr(name, '/');
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - name) : 1, slash ? name : ".");
    if (slash == name)
        snprintf(dir, sizeof dir, "/");
    DIR *d = opendir(dir);
    if (!d)
        return 0; /* no directory: no checkpoint */
    int cap = 0, rc = 0;
    for (struct dirent *e; rc == 0 && (e = readdir(d)) != NULL;) {
        int64_t key;
        if (!matches(name, f, n, e->d_name, &key))
            continue;
        if (*count == cap) {
            cap = cap ? 2 * cap : 16;
            struct saved *p = realloc(*out, (size_t)cap * sizeof *p);
            if (!p) {
                rc = weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of memory listing checkpoints");
                break;
            }
            *out = p;
        }
        struct saved *s = &(*out)[(*count)++];
        snprintf(s->path, sizeof s->path, "%s%s%s", slash ? dir : "", slash && slash != name ? "/" : "",
                 e->d_name);
        s->key = key;
    }
    closedir(d);
    /* oldest first: insertion sort by the step (epoch) in the name */
    for (int i = 1; i < *count; i++)
        for (int j = i; j > 0 && (*out)[j - 1].key > (*out)[j].key; j--) {
            struct saved tmp = (*out)[j];
            (*out)[j] = (*out)[j - 1];
            (*out)[j - 1] = tmp;
        }
    if (rc != 0) {
        free(*out);
        *out = NULL;
        *count = 0;
    }
    return rc;
}

/* "runs/log.csv" -> "runs/log<suffix>" (as train_log.c names the files beside a log) */
static void log_sibling(const char *log, const char *suffix, char *out, size_t size)
{
    const char *dot = strrchr(log, '.'), *slash = strrchr(log, '/');
    int n = dot && (!slash || dot > slash) ? (int)(dot - log) : (int)strlen(log);
    snprintf(out, size, "%.*s%s", n, log, suffix);
}

/* Lines after the header of a CSV file (0 when it is missing or holds the header alone). */
static int64_t csv_rows(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    int64_t lines = 0;
    bool mid = false;
    for (int c; (c = fgetc(f)) != EOF;) {
        if (c == '\n')
            lines++;
        mid = c != '\n';
    }
    fclose(f);
    lines += mid;
    return lines > 0 ? lines - 1 : 0;
}

/* Where a checkpoint stands, from its id ("step 150, after epoch 3"), into buf. */
static const char *describe(const char *path, char *buf, size_t size)
{
    struct weft_metadata *meta = NULL;
    snprintf(buf, size, "a checkpoint");
    if (weft_safetensors_load(path, WEFT_CPU, NULL, &meta) != 0) {
        weft_error_clear();
        return buf;
    }
    const char *id = weft_metadata_get(meta, "weft.checkpoint");
    const char *best = weft_metadata_get(meta, "weft.best_epoch");
    if (id)
        snprintf(buf, size, "%s", id);
    else if (best)
        snprintf(buf, size, "the best model, epoch %s", best);
    weft_metadata_free(meta);
    return buf;
}

/* For a checkpoint whose run is over at this config's length: how to go on, else "". */
static void finished_note(const struct trainer *t, const char *path, char *out, size_t size)
{
    char state[4096];
    struct weft_metadata *meta = NULL;
    int64_t epoch = 0, batch = 0, step = 0;
    out[0] = '\0';
    train_state_path(path, state, sizeof state);
    if (weft_safetensors_load(state, WEFT_CPU, NULL, &meta) != 0 ||
        weft_metadata_get_int(meta, "weft.epoch", &epoch) != 0 ||
        weft_metadata_get_int(meta, "weft.batch", &batch) != 0 ||
        weft_metadata_get_int(meta, "weft.step", &step) != 0) {
        weft_error_clear();
        weft_metadata_free(meta);
        return;
    }
    weft_metadata_free(meta);
    if (t->s.max_iters > 0 && step >= t->s.max_iters)
        snprintf(out, size, " (it finished its %lld step%s: add --set train.max_iters=N, N above "
                            "%lld)", (long long)step, step == 1 ? "" : "s", (long long)step);
    else if (t->s.max_iters == 0 && epoch >= t->s.epochs && batch == 0)
        snprintf(out, size, " (it finished its %lld epoch%s: add --set train.epochs=N, N above "
                            "%lld)", (long long)epoch, epoch == 1 ? "" : "s", (long long)epoch);
}

/* The files of a run at t's paths that exist now. */
struct run_files {
    struct saved *ckpts;
    int nckpts;
    char extra[6][4096]; /* the .best, .ema, lone .train states, the logs */
    int nextra;
    int64_t log_rows, step_rows;
};

static void add_extra(struct run_files *r, const char *path)
{
    if (r->nextra < 6 && access(path, F_OK) == 0)
        snprintf(r->extra[r->nextra++], sizeof r->extra[0], "%s", path);
}

static int find_run_files(const struct trainer *t, struct run_files *r)
{
    memset(r, 0, sizeof *r);
    char path[4096], base[4096];
    const char *ckpt = t->s.checkpoint, *log = t->s.log_path;
    if (ckpt && *ckpt) {
        if (list_checkpoints(t, &r->ckpts, &r->nckpts) != 0)
            return weft_error_code();
        train_checkpoint_base(ckpt, base, sizeof base);
        train_best_path(base, path, sizeof path);
        add_extra(r, path);
        train_ema_path(base, path, sizeof path);
        add_extra(r, path);
        if (!train_checkpoint_is_template(ckpt) && r->nckpts == 0) { /* a state alone */
            train_state_path(ckpt, path, sizeof path);
            add_extra(r, path);
        }
    }
    if (log && *log) {
        if ((r->log_rows = csv_rows(log)) > 0)
            add_extra(r, log);
        log_sibling(log, ".steps.csv", path, sizeof path);
        if ((r->step_rows = csv_rows(path)) > 0)
            add_extra(r, path);
    }
    return 0;
}

/* Whether path is one of the checkpoints t's name stands for (the run that --resume
 * continues writes where it was read from). */
static bool same_run(const struct trainer *t, const char *path)
{
    struct field f[MAX_FIELDS];
    int n;
    if (parse_fields(t, t->s.checkpoint, f, &n) != 0) {
        weft_error_clear();
        return false;
    }
    char a[PATH_MAX], b[PATH_MAX], da[4096], db[4096];
    const char *sa = strrchr(path, '/'), *sb = strrchr(t->s.checkpoint, '/');
    snprintf(da, sizeof da, "%.*s", sa ? (int)(sa - path) + (sa == path) : 1, sa ? path : ".");
    snprintf(db, sizeof db, "%.*s", sb ? (int)(sb - t->s.checkpoint) + (sb == t->s.checkpoint) : 1,
             sb ? t->s.checkpoint : ".");
    if (!realpath(da, a) || !realpath(db, b) || strcmp(a, b) != 0)
        return false;
    int64_t key;
    const char *base = sa ? sa + 1 : path;
    return n == 0 ? strcmp(base, sb ? sb + 1 : t->s.checkpoint) == 0
                  : matches(t->s.checkpoint, f, n, base, &key);
}

/* The command line again, leaving out --resume and --overwrite (and, for new paths, the
 * --set of the old ones), then more (a shell line). */
static void command_line(const struct trainer *t, const char *more, bool new_paths, char *out,
                         size_t size)
{
    size_t len = 0;
    for (int i = 0; i < t->argc && len < size; i++) {
        bool path_set = new_paths && !strcmp(t->argv[i], "--set") && i + 1 < t->argc &&
                        (!strncmp(t->argv[i + 1], "train.checkpoint=", 17) ||
                         !strncmp(t->argv[i + 1], "train.log=", 10));
        if ((!strcmp(t->argv[i], "--resume") && i + 1 < t->argc) || path_set) {
            i++;
            continue;
        }
        if (!strcmp(t->argv[i], "--overwrite"))
            continue;
        len += train_shell_word(t->argv[i], out + len, size - len);
        if (len < size)
            out[len++] = ' ';
    }
    if (len < size)
        snprintf(out + len, size - len, "%s", more);
    else if (size > 0)
        out[size - 1] = '\0';
}

/* "runs/m.safetensors" -> "runs/m-2.safetensors" (the first free N from 2). */
static void free_name(const char *path, const char *ext, char *out, size_t size)
{
    size_t n = strlen(path), e = strlen(ext);
    bool has = n > e && strcmp(path + n - e, ext) == 0;
    for (int k = 2; k < 1000; k++) {
        snprintf(out, size, "%.*s-%d%s", (int)(has ? n - e : n), path, k, has ? ext : "");
        if (access(out, F_OK) != 0)
            return;
    }
}

/* "its checkpoint runs/m-3.safetensors (step 150, after epoch 3) and 2 older ones,
 * runs/log.csv (3 rows)" into what. */
static void say_what(const struct trainer *t, const struct run_files *r, char *what, size_t size)
{
    char desc[256];
    size_t len = 0;
    what[0] = '\0';
    if (r->nckpts > 0) {
        const char *last = r->ckpts[r->nckpts - 1].path;
        len += (size_t)snprintf(what, size, "the checkpoint %s (%s)", last,
                                describe(last, desc, sizeof desc));
        if (r->nckpts > 1 && len < size)
            len += (size_t)snprintf(what + len, size - len, " and %d older one%s", r->nckpts - 1,
                                    r->nckpts > 2 ? "s" : "");
    }
    for (int i = 0; i < r->nextra && len < size; i++) {
        const char *p = r->extra[i];
        int64_t rows = t->s.log_path && strcmp(p, t->s.log_path) == 0 ? r->log_rows
                       : strstr(p, ".steps.csv")                      ? r->step_rows
                                                                      : -1;
        len += (size_t)snprintf(what + len, size - len, "%s%s", len ? ", " : "", p);
        if (rows >= 0 && len < size)
            len += (size_t)snprintf(what + len, size - len, " (%lld row%s)", (long long)rows,
                                    rows == 1 ? "" : "s");
    }
}

int train_runs_check(struct trainer *t, const char *resume_path)
{
    if (t->rank != 0)
        return 0;
    const char *file = weft_config_name(t->cfg);
    struct field f[MAX_FIELDS];
    int nf = 0;
    if (t->s.checkpoint && *t->s.checkpoint && parse_fields(t, t->s.checkpoint, f, &nf) != 0)
        return weft_error_code();
    if (t->s.keep_last > 0 && nf == 0)
        return weft_error_set(WEFT_ERR_CONFIG,
                              "%s: [train] keep_last = %lld keeps the newest of several "
                              "checkpoints, and [train] checkpoint = %s names one: put {epoch} or "
                              "{step} in its name (model-{epoch}.safetensors)",
                              file, (long long)t->s.keep_last, t->s.checkpoint);
    bool resuming = resume_path != NULL;
    if (resuming && train_check_argument_file(resume_path) != 0) {
        weft_error_clear(); /* --resume says what is wrong with its file */
        return 0;
    }
    if (resuming && t->s.overwrite && same_run(t, resume_path))
        return weft_error_set(WEFT_ERR_CONFIG,
                              "--overwrite starts a new run over the files at [train] checkpoint "
                              "= %s, and --resume %s continues the run they hold: give one of "
                              "them", t->s.checkpoint, resume_path);
    if (t->s.overwrite)
        return 0;
    struct run_files r;
    if (find_run_files(t, &r) != 0)
        return weft_error_code();
    /* A resumed run continues its own files and appends to its log; one resumed into
     * another run's checkpoint path would write over that run. */
    bool others = resuming ? r.nckpts > 0 && !same_run(t, resume_path)
                           : r.nckpts > 0 || r.nextra > 0;
    if (!others) {
        free(r.ckpts);
        return 0;
    }
    if (resuming)
        r.nextra = 0; /* the run's log and best file go on with it */
    /* refused: what is there, and the ways on */
    char what[1536], cont[2400] = "", over[2048], both[3072], more[1536], arg[1200], alt[1024];
    say_what(t, &r, what, sizeof what);
    if (r.nckpts > 0 && !resuming) {
        char note[160];
        train_shell_word(r.ckpts[r.nckpts - 1].path, arg, sizeof arg);
        snprintf(more, sizeof more, "--resume %s", arg);
        command_line(t, more, false, cont, 2048);
        finished_note(t, r.ckpts[r.nckpts - 1].path, note, sizeof note);
        snprintf(cont + strlen(cont), sizeof cont - strlen(cont), "%s", note);
    }
    command_line(t, "--overwrite", false, over, sizeof over);
    size_t m = 0;
    more[0] = '\0';
    if (t->s.checkpoint && *t->s.checkpoint) {
        free_name(t->s.checkpoint, ".safetensors", alt, sizeof alt);
        train_shell_word(alt, arg, sizeof arg);
        m += (size_t)snprintf(more, sizeof more, "--set train.checkpoint=%s", arg);
    }
    if (t->s.log_path && *t->s.log_path && m < sizeof more && !resuming) {
        free_name(t->s.log_path, ".csv", alt, sizeof alt);
        train_shell_word(alt, arg, sizeof arg);
        m += (size_t)snprintf(more + m, sizeof more - m, "%s--set train.log=%s", m ? " " : "", arg);
    }
    if (resuming && m < sizeof more) { /* keep --resume in the other line */
        train_shell_word(resume_path, arg, sizeof arg);
        snprintf(more + m, sizeof more - m, " --resume %s", arg);
    }
    command_line(t, more, true, both, sizeof both);
    free(r.ckpts);
    if (resuming)
        return weft_error_set(WEFT_ERR_CONFIG,
                              "%s: [train] checkpoint = %s holds another run than the one "
                              "--resume %s continues (%s): resuming would write over it; "
                              "nothing was written.\n"
                              "  replace it:   %s\n"
                              "  keep it:      %s",
                              file, t->s.checkpoint, resume_path, what, over, both);
    return weft_error_set(WEFT_ERR_CONFIG,
                          "%s: an earlier run is at the paths of [train] checkpoint and log: "
                          "%s. A new run would replace it; nothing was written.\n"
                          "%s%s%s"
                          "  replace it:   %s\n"
                          "  keep both:    %s",
                          file, what, cont[0] ? "  continue it:  " : "", cont,
                          cont[0] ? "\n" : "", over, both);
}

int train_runs_clear(struct trainer *t, const char *resume_path)
{
    if (t->rank != 0 || !t->s.overwrite || resume_path)
        return 0;
    struct run_files r;
    if (find_run_files(t, &r) != 0)
        return weft_error_code();
    int removed = 0;
    char path[4096];
    for (int i = 0; i < r.nckpts; i++) {
        train_state_path(r.ckpts[i].path, path, sizeof path);
        removed += unlink(r.ckpts[i].path) == 0;
        removed += unlink(path) == 0;
    }
    for (int i = 0; i < r.nextra; i++)
        removed += unlink(r.extra[i]) == 0;
    if (t->s.log_path && *t->s.log_path) { /* the plot of the log that went */
        log_sibling(t->s.log_path, ".svg", path, sizeof path);
        if (r.log_rows > 0)
            unlink(path);
    }
    if (removed > 0)
        printf("overwrite: removed the earlier run's %d file%s (%s%s)\n", removed,
               removed == 1 ? "" : "s", r.nckpts ? r.ckpts[r.nckpts - 1].path : r.extra[0],
               removed > 1 ? ", ..." : "");
    free(r.ckpts);
    return 0;
}

int train_runs_prune(struct trainer *t)
{
    if (t->rank != 0 || t->s.keep_last <= 0)
        return 0;
    struct saved *s;
    int n;
    if (list_checkpoints(t, &s, &n) != 0)
        return weft_error_code();
    char state[4096];
    for (int i = 0; i + t->s.keep_last < n; i++) {
        if (strcmp(s[i].path, t->ckpt_path) == 0)
            continue; /* never the one just saved */
        train_state_path(s[i].path, state, sizeof state);
        unlink(state);
        unlink(s[i].path);
    }
    free(s);
    return 0;
}
