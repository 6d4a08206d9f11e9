/* apps/train/train_checkpoint.c: a checkpoint as one atomic unit, and --resume.
 *
 * A checkpoint is two files: the model ("runs/model.safetensors", a plain state dict that
 * PyTorch and weft-generate read alone) and the training state beside it
 * ("runs/model.train.safetensors": optimizer, scheduler, position, random state). Each
 * file is replaced atomically (weft_safetensors_save: temporary file, fsync, rename), but
 * a process killed between the two renames would leave one file of each save. So both
 * carry the same checkpoint id ("weft.checkpoint" = "step 20, after epoch 2": where the
 * run stands, deterministic, so two runs that reach the same point write the same bytes),
 * and a save goes
 *
 *   1. the new state to "runs/model.train.next.safetensors"  (the old pair is untouched)
 *   2. the model over "runs/model.safetensors"                (the commit point)
 *   3. the .next state renamed over "runs/model.train.safetensors"
 *
 * Killed before 2, the old pair is complete (a stale .next is ignored: its id is not the
 * model's); killed between 2 and 3, the model's id names the .next file, which resume
 * takes (and renames into place). A model whose id matches neither state file is refused,
 * naming both files and which one is newer.
 *
 * The id says where a run stands, not which run: a second run written to the same path
 * and killed between 2 and 3 of its first save leaves its model beside the first run's
 * .train file of the same step. So the state also records a digest of the model it was
 * saved with ("weft.model_digest": names, dtypes, shapes and bytes of its tensors), and a
 * state is taken only for the model it describes; none: refused, naming both files. A
 * digest rather than a random run id: two runs that write the same model still write the
 * same bytes, and a run restarted from scratch after a kill before its first save ends
 * with the uninterrupted run's files. Temporary files of a killed save
 * ("*.tmp.<pid>" of a process that no longer runs) are removed by the next save.
 * tests/checkpoint-durability.sh kills a save at each of these steps
 * (weft_test_crash_point) and checks that a resumed run ends where an uninterrupted one
 * does. */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <weft/quant.h>

#include "train.h"

/* "runs/x/model.safetensors" -> "runs/x/model<infix>.safetensors" */
static void sibling_path(const char *model_path, const char *infix, char *out, size_t size)
{
    const char *ext = ".safetensors";
    size_t n = strlen(model_path), e = strlen(ext);
    if (n > e && strcmp(model_path + n - e, ext) == 0)
        snprintf(out, size, "%.*s%s%s", (int)(n - e), model_path, infix, ext);
    else
        snprintf(out, size, "%s%s%s", model_path, infix, ext);
}

void train_state_path(const char *model_path, char *out, size_t size)
{
    sibling_path(model_path, ".train", out, size);
}

static void next_state_path(const char *model_path, char *out, size_t size)
{
    sibling_path(model_path, ".train.next", out, size);
}

void train_best_path(const char *model_path, char *out, size_t size)
{
    sibling_path(model_path, ".best", out, size);
}

void train_ema_path(const char *model_path, char *out, size_t size)
{
    sibling_path(model_path, ".ema", out, size);
}

/* ---- the model a training state belongs to ------------------------------------------- */

static uint64_t mix64(uint64_t h)
{
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 33);
}

/* Two 64-bit lanes over n bytes, 8 at a time (the tail zero-padded). */
static void hash_bytes(uint64_t h[2], const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i += 8) {
        uint64_t w = 0;
        memcpy(&w, p + i, n - i < 8 ? n - i : 8);
        h[0] = (h[0] ^ mix64(w + 0x9e3779b97f4a7c15ull)) * 0x100000001b3ull;
        h[1] = ((h[1] ^ w) * 0xbf58476d1ce4e5b9ull) + (h[1] >> 29);
    }
    h[0] ^= n;
    h[1] += n;
}

/* The digest of a state dict: each tensor's name, dtype, shape and bytes hashed alone, the
 * results summed, so the order of the entries does not matter (a loaded file's order need
 * not be the module's). 32 hex digits into out, or an error. */
static int model_digest(const struct weft_tensor_dict *d, char out[33])
{
    uint64_t sum[2] = {0, 0};
    int rc = 0;
    weft_scope_push();
    for (size_t i = 0; i < weft_tensor_dict_len(d) && rc == 0; i++) {
        const char *name = weft_tensor_dict_name(d, i);
        weft_tensor *t = weft_contiguous(weft_to_device(weft_tensor_dict_at(d, i), WEFT_CPU));
        if (!t) {
            rc = weft_error_code();
            break;
        }
        uint64_t h[2] = {0x736166657465ull, 0x6e736f7273ull};
        int64_t head[2 + WEFT_MAX_DIMS] = {t->dtype, t->ndim};
        for (int k = 0; k < t->ndim; k++)
            head[2 + k] = t->shape[k];
        hash_bytes(h, name, strlen(name) + 1);
        hash_bytes(h, head, sizeof head);
        hash_bytes(h, weft_tensor_data(t), (size_t)weft_tensor_numel(t) * weft_dtype_size(t->dtype));
        sum[0] += mix64(h[0]);
        sum[1] += mix64(h[1] ^ 0x5bd1e995ull);
    }
    weft_scope_pop();
    if (rc == 0)
        snprintf(out, 33, "%016llx%016llx", (unsigned long long)sum[0], (unsigned long long)sum[1]);
    return rc;
}

int train_load_weights(struct trainer *t, const char *path, struct weft_metadata **meta)
{
    struct weft_tensor_dict *model = NULL;
    struct weft_metadata *m = NULL;
    int rc = weft_safetensors_load(path, t->device, &model, &m);
    /* An int8 checkpoint (weft-train quantize) converts the model to its scheme first. */
    if (rc == 0 && weft_quant_metadata_present(m))
        rc = t->device.type == WEFT_DEVICE_CPU
                 ? weft_quant_load_state_dict(t->model, model, m, NULL) /* path: below */
                 : weft_error_set(WEFT_ERR_CONFIG, "an int8 checkpoint runs on the cpu: set "
                                                   "[runtime] backend = cpu");
    else if (rc == 0)
        rc = weft_module_load_state_dict(t->model, model, true);
    weft_tensor_dict_free(model);
    if (rc == 0 && meta)
        *meta = m;
    else
        weft_metadata_free(m);
    if (rc != 0)
        weft_error_prefix("%s", path);
    return rc ? weft_error_code() : 0;
}

size_t train_shell_word(const char *arg, char *out, size_t size)
{
    bool plain = *arg != '\0';
    for (const char *p = arg; *p && plain; p++)
        plain = strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-+=.,/:@%",
                       *p) != NULL;
    size_t n = 0;
#define PUT(c)                                                                                 \
    do {                                                                                       \
        if (n + 1 < size)                                                                      \
            out[n] = (c);                                                                      \
        n++;                                                                                   \
    } while (0)
    if (!plain)
        PUT('\'');
    for (const char *p = arg; *p; p++) {
        if (*p == '\'' && !plain) { /* '\'' : close, an escaped quote, open */
            PUT('\'');
            PUT('\\');
            PUT('\'');
        }
        PUT(*p);
    }
    if (!plain)
        PUT('\'');
#undef PUT
    if (size > 0)
        out[n < size ? n : size - 1] = '\0';
    return n < size ? n : size - 1;
}

void train_print_resume_command(const struct trainer *t, FILE *f)
{
    char word[8192];
    fputs("resume with: ", f);
    if (t->world > 1) /* the launcher's own options are not ours to know */
        fprintf(f, "mpirun -np %d ", t->world);
    for (int i = 0; i < t->argc; i++) {
        if (!strcmp(t->argv[i], "--resume") && i + 1 < t->argc) { /* replaced below */
            i++;
            continue;
        }
        if (!strcmp(t->argv[i], "--overwrite")) /* the run is this one now */
            continue;
        train_shell_word(t->argv[i], word, sizeof word);
        fputs(word, f);
        fputc(' ', f);
    }
    train_shell_word(t->ckpt_path[0] ? t->ckpt_path : t->s.checkpoint, word, sizeof word);
    fprintf(f, "--resume %s\n", word);
}

/* The scheduler as the config gives it, "type=step, gamma=0.5, step_size=2" (keys
 * sorted), or "none": a resumed run must continue the schedule it was saved with. */
static void describe_scheduler(struct trainer *t, char *out, size_t size)
{
    snprintf(out, size, "none");
    if (!t->sched)
        return;
    const char *const *keys = weft_config_keys(t->cfg, "scheduler");
    const char *sorted[64];
    int n = 0;
    for (int i = 0; keys && keys[i] && n < 64; i++) {
        int j = n++;
        while (j > 0 && strcmp(sorted[j - 1], keys[i]) > 0) {
            sorted[j] = sorted[j - 1];
            j--;
        }
        sorted[j] = keys[i];
    }
    size_t len = 0;
    out[0] = '\0';
    for (int i = 0; i < n && len < size; i++)
        len += (size_t)snprintf(out + len, size - len, "%s%s=%s", i ? ", " : "", sorted[i],
                                weft_config_string(t->cfg, "scheduler", sorted[i], ""));
}

/* Removes "<dir>/<base>.tmp.<pid>" files whose process is gone: what a save killed
 * mid-write left behind. A live process's file (a save running now) is left alone. */
static void remove_stale_temporaries(const char *path)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    const char *base = slash ? slash + 1 : path;
    if (slash)
        slash[slash == dir ? 1 : 0] = '\0';
    else
        snprintf(dir, sizeof dir, ".");
    char prefix[1024];
    int plen = snprintf(prefix, sizeof prefix, "%s.tmp.", base);
    if (plen <= 0 || (size_t)plen >= sizeof prefix)
        return;
    DIR *d = opendir(dir);
    if (!d)
        return;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (strncmp(e->d_name, prefix, (size_t)plen) != 0)
            continue;
        char *end;
        long pid = strtol(e->d_name + plen, &end, 10);
        if (*end || pid <= 0 || pid == (long)getpid() ||
            !(kill((pid_t)pid, 0) != 0 && errno == ESRCH))
            continue;
        char full[8192];
        snprintf(full, sizeof full, "%s/%s", dir, e->d_name);
        unlink(full);
    }
    closedir(d);
}

/* Where a run stands, as the messages number epochs (from 1): "step 150, after epoch 3"
 * or "step 1058, epoch 3 at batch 120" (deterministic, so that two runs reaching the same
 * point write the same bytes). epochs_done and batches_done are weft.epoch and
 * weft.batch: the epochs completed and the batches read of the next one. */
static void checkpoint_id(int64_t step, int64_t epochs_done, int64_t batches_done, char *out,
                          size_t size)
{
    if (batches_done > 0)
        snprintf(out, size, "step %lld, epoch %lld at batch %lld", (long long)step,
                 (long long)epochs_done + 1, (long long)batches_done);
    else if (epochs_done > 0)
        snprintf(out, size, "step %lld, after epoch %lld", (long long)step, (long long)epochs_done);
    else
        snprintf(out, size, "step %lld, before epoch 1", (long long)step);
}

int train_save_checkpoint(struct trainer *t, int64_t next_epoch, int64_t batches_done)
{
    if (t->rank != 0) /* the ranks hold the same model and optimizer state */
        return 0;
    char path[4096], state_path[4096], next_path[4096], id[128], sched[1024];
    /* {epoch}: the epoch as the epoch lines number it, the one that ended or the one this
     * save interrupts */
    if (train_checkpoint_expand(t, batches_done > 0 ? next_epoch + 1 : next_epoch, t->step, path,
                                sizeof path) != 0)
        return weft_error_code();
    train_state_path(path, state_path, sizeof state_path);
    next_state_path(path, next_path, sizeof next_path);
    checkpoint_id(t->step, next_epoch, batches_done, id, sizeof id);
    describe_scheduler(t, sched, sizeof sched);
    struct weft_tensor_dict *model = weft_module_state_dict(t->model);
    struct weft_tensor_dict *state = weft_tensor_dict_new();
    struct weft_metadata *meta = weft_metadata_new();
    struct weft_metadata *model_meta = weft_metadata_new();
    int rc = model && state && meta && model_meta ? 0 : weft_error_code();
    /* The model's own config (weft_module_config_export: "model.type" = "gpt", ...), so
     * weft-generate and a PyTorch script rebuild the architecture from the file alone. */
    if (rc == 0)
        rc = weft_module_config_export(t->model, model_meta);
    if (rc == 0)
        rc = weft_metadata_set_int(model_meta, "weft.step", t->step) ||
             weft_metadata_set(model_meta, "weft.checkpoint", id);
    if (rc == 0)
        rc = train_make_parent_dirs(path);
    if (rc == 0)
        rc = weft_optimizer_state_export(t->opt, state, meta);
    if (rc == 0 && t->sched)
        rc = weft_scheduler_state_export(t->sched, meta);
    if (rc == 0 && t->scaler)
        rc = weft_grad_scaler_state_export(t->scaler, meta);
    if (rc == 0)
        rc = train_ema_export(t, state, meta); /* [train] ema_decay */
    char digest[33];
    if (rc == 0 && (rc = model_digest(model, digest)) == 0)
        rc = weft_metadata_set(meta, "weft.model_digest", digest);
    if (rc == 0)
        rc = weft_metadata_set_int(meta, "weft.epoch", next_epoch) ||
             weft_metadata_set_int(meta, "weft.batch", batches_done) ||
             weft_metadata_set_int(meta, "weft.world_size", t->world) ||
             weft_metadata_set_int(meta, "weft.step", t->step) ||
             weft_metadata_set_uint(meta, "weft.rng_seed", weft_random_seed()) ||
             weft_metadata_set_uint(meta, "weft.rng_offset", weft_random_offset()) ||
             weft_metadata_set(meta, "weft.config", weft_config_name(t->cfg)) ||
             weft_metadata_set(meta, "weft.scheduler", sched) ||
             weft_metadata_set(meta, "weft.checkpoint", id);
    if (rc == 0 && t->patience.seen) {
        char best[40];
        snprintf(best, sizeof best, "%.17g", t->patience.best);
        rc = weft_metadata_set(meta, "weft.patience_best", best) ||
             weft_metadata_set_int(meta, "weft.patience_since", t->patience.since);
    }
    if (rc == 0) {
        remove_stale_temporaries(path);
        remove_stale_temporaries(state_path);
        remove_stale_temporaries(next_path);
        weft_test_crash_point("checkpoint.begin");
    }
    /* The state first, beside the old pair; then the model, which commits the save. */
    if (rc == 0)
        rc = weft_safetensors_save(next_path, state, meta);
    if (rc == 0 && (rc = weft_safetensors_save(path, model, model_meta)) != 0)
        unlink(next_path); /* the old pair stands; give back the space (a full disk) */
    bool committed = rc == 0;
    if (rc == 0 && rename(next_path, state_path) != 0)
        rc = weft_error_set(WEFT_ERR_IO, "%s: renaming '%s' to '%s' failed: %s (the checkpoint "
                                         "is complete: resume reads the state from '%s')",
                            path, next_path, state_path, strerror(errno), next_path);
    if (committed)
        snprintf(t->ckpt_path, sizeof t->ckpt_path, "%s", path);
    if (rc == 0)
        weft_test_crash_point("checkpoint.promoted");
    /* the average as a model file of its own (resume reads it from the state) */
    if (rc == 0)
        rc = train_ema_save(t, t->s.checkpoint, model_meta);
    if (rc == 0)
        rc = train_runs_prune(t); /* [train] keep_last */
    if (rc != 0 && !committed)
        weft_error_prefix("checkpoint %s not saved (the previous one, if any, is intact)", path);
    weft_tensor_dict_free(model);
    weft_tensor_dict_free(state);
    weft_metadata_free(meta);
    weft_metadata_free(model_meta);
    return rc;
}

/* ---- resume ----------------------------------------------------------------------------- */

/* A state file's metadata, or NULL (no error) when the file does not exist. */
static struct weft_metadata *peek(const char *path, bool *exists)
{
    struct weft_metadata *meta = NULL;
    *exists = access(path, F_OK) == 0;
    if (*exists && weft_safetensors_load(path, WEFT_CPU, NULL, &meta) != 0)
        return NULL;
    return meta;
}

static bool same_id(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

/* "step 20, epoch 2, batch 0", or what stands for a missing id. */
static const char *id_or(const struct weft_metadata *m)
{
    const char *id = m ? weft_metadata_get(m, "weft.checkpoint") : NULL;
    return id ? id : "no checkpoint id: written by a weft before 0.x or by another tool";
}

/* Whether the state st was saved with this model: the same checkpoint id and, where the
 * state records one (weft 0.1 files after issue 33 do), the model's digest. */
static bool belongs(const struct weft_metadata *st, const char *want, const char *digest)
{
    const char *saved = weft_metadata_get(st, "weft.model_digest");
    return same_id(want, weft_metadata_get(st, "weft.checkpoint")) &&
           (!saved || strcmp(saved, digest) == 0);
}

/* Picks the training state that belongs to the model file at path (its tensors: model):
 * its .train file, or the .next one a save killed after its commit point left (renamed
 * into place here). Sets *chosen to its path. */
static int find_state(struct trainer *t, const char *path, const struct weft_tensor_dict *model,
                      const struct weft_metadata *model_meta, char *chosen, size_t size)
{
    char state_path[4096], next_path[4096], digest[33];
    train_state_path(path, state_path, sizeof state_path);
    next_state_path(path, next_path, sizeof next_path);
    const char *want = weft_metadata_get(model_meta, "weft.checkpoint");
    if (model_digest(model, digest) != 0)
        return weft_error_code();
    bool have_state, have_next = false;
    struct weft_metadata *st = peek(state_path, &have_state);
    if (have_state && !st)
        return weft_error_code();
    if (have_state && belongs(st, want, digest)) {
        weft_metadata_free(st);
        snprintf(chosen, size, "%s", state_path);
        return 0;
    }
    struct weft_metadata *nx = want ? peek(next_path, &have_next) : NULL;
    if (have_next && !nx) {
        weft_metadata_free(st);
        return weft_error_code();
    }
    if (nx && belongs(nx, want, digest)) {
        weft_metadata_free(st);
        weft_metadata_free(nx);
        /* The save was killed after its commit point: finish it. Not under several
         * processes, whose other ranks may be reading the file by its .next name now;
         * the next save renames its own. */
        if (t->world == 1 && rename(next_path, state_path) == 0)
            snprintf(chosen, size, "%s", state_path);
        else
            snprintf(chosen, size, "%s", next_path);
        return 0;
    }
    weft_metadata_free(nx);
    int rc;
    if (!have_state) {
        rc = weft_error_set(WEFT_ERR_IO, "the training state %s (written beside the model by "
                                         "every save) does not exist", state_path);
    } else if (same_id(want, weft_metadata_get(st, "weft.checkpoint"))) {
        rc = weft_error_set(WEFT_ERR_VALUE,
                            "the model %s (%s, digest %s) and the training state %s (%s, saved "
                            "with a model of digest %s) are from different runs: a second run "
                            "written to the same path was stopped before its first save "
                            "completed, or the files were mixed by hand; resume from a "
                            "complete pair, or start a new run",
                            path, id_or(model_meta), digest, state_path, id_or(st),
                            weft_metadata_get(st, "weft.model_digest"));
    } else {
        int64_t ms = -1, ss = -1;
        if (weft_metadata_get(model_meta, "weft.step"))
            weft_metadata_get_int(model_meta, "weft.step", &ms);
        if (weft_metadata_get(st, "weft.step"))
            weft_metadata_get_int(st, "weft.step", &ss);
        weft_error_clear();
        const char *newer = ms > ss   ? "the model file is newer"
                            : ms < ss ? "the training state is newer"
                                      : "neither is newer";
        rc = weft_error_set(WEFT_ERR_VALUE,
                            "the model %s (%s) and the training state %s (%s) are not from the "
                            "same save (%s): a save was interrupted or the files were mixed by "
                            "hand; resume from a complete pair",
                            path, id_or(model_meta), state_path, id_or(st), newer);
    }
    weft_metadata_free(st);
    return rc;
}

/* The type in a description of describe_scheduler(): "step" of "gamma=0.5, type=step". */
static void scheduler_type(const char *desc, char *out, size_t size)
{
    snprintf(out, size, "%s", strcmp(desc, "none") == 0 ? "none" : "");
    for (const char *p = desc; (p = strstr(p, "type=")) != NULL; p += 5)
        if (p == desc || p[-1] == ' ') {
            snprintf(out, size, "%.*s", (int)strcspn(p + 5, ","), p + 5);
            return;
        }
}

/* A resumed run continues its schedule from the saved step. Another type of schedule, or
 * none where there was one (or the reverse), cannot continue the saved state: refused.
 * Other keys of the same type may change (nanoGPT reads lr_decay_iters and the like from
 * its config at every step, so a run extended on resume with a longer decay is a
 * PyTorch user's habit): allowed, with a warning that says what changed. */
static int check_scheduler(struct trainer *t, const struct weft_metadata *meta)
{
    char now[1024], then_type[128], now_type[128];
    describe_scheduler(t, now, sizeof now);
    const char *then = weft_metadata_get(meta, "weft.scheduler");
    if (!then) { /* a checkpoint of an older weft: only whether there was one */
        bool had = weft_metadata_get(meta, "scheduler.last_epoch") != NULL;
        if (had == (t->sched != NULL))
            return 0;
        then = had ? "(a scheduler)" : "none";
    }
    if (strcmp(then, now) == 0)
        return 0;
    scheduler_type(then, then_type, sizeof then_type);
    scheduler_type(now, now_type, sizeof now_type);
    if (strcmp(then_type, now_type) == 0 && then_type[0]) {
        fprintf(stderr, "weft-train: warning: [scheduler] differs from the checkpoint's (saved "
                        "with %s, now %s): the schedule continues from step %s with the new "
                        "settings\n", then, now,
                weft_metadata_get(meta, "weft.step") ? weft_metadata_get(meta, "weft.step") : "?");
        return 0;
    }
    return weft_error_set(WEFT_ERR_CONFIG,
                          "%s: the checkpoint was saved with [scheduler] %s, the config now "
                          "gives %s: a resumed run continues the schedule it was saved with "
                          "(restore the [scheduler] section, or start a new run)",
                          weft_config_name(t->cfg), then, now);
}

/* Resuming a run that is already over trains nothing: say so. */
static int check_left_to_train(const struct trainer *t)
{
    const char *name = weft_config_name(t->cfg);
    if (t->s.max_iters > 0 && t->start_step >= t->s.max_iters)
        return weft_error_set(WEFT_ERR_CONFIG,
                              "%s: the checkpoint is at step %lld; [train] max_iters = %lld "
                              "trains nothing: set max_iters above %lld",
                              name, (long long)t->start_step, (long long)t->s.max_iters,
                              (long long)t->start_step);
    /* epochs numbered as the epoch lines number them: the checkpoint is after epoch
     * start_epoch, or inside the next one */
    char where[96];
    if (t->skip_batches > 0)
        snprintf(where, sizeof where, "in epoch %lld (after batch %lld)",
                 (long long)t->start_epoch + 1, (long long)t->skip_batches);
    else
        snprintf(where, sizeof where, "after epoch %lld", (long long)t->start_epoch);
    if (t->s.max_iters == 0 && t->start_epoch >= t->s.epochs)
        return weft_error_set(WEFT_ERR_CONFIG,
                              "%s: the checkpoint is %s; [train] epochs = %lld trains nothing: "
                              "set epochs above %lld",
                              name, where, (long long)t->s.epochs, (long long)t->start_epoch);
    return 0;
}

/* Early stopping's state (absent from checkpoints of runs before it was saved: count anew). */
static int read_patience(struct trainer *t, const char *state_path, const struct weft_metadata *meta)
{
    const char *best = weft_metadata_get(meta, "weft.patience_best");
    if (!best)
        return 0;
    char *end;
    errno = 0;
    t->patience.best = strtod(best, &end);
    if (errno || end == best || *end || weft_metadata_get_int(meta, "weft.patience_since",
                                                               &t->patience.since) != 0 ||
        t->patience.since < 0)
        return weft_error_set(WEFT_ERR_VALUE, "%s: metadata weft.patience_best = '%s' / "
                                              "weft.patience_since: expected a number and a "
                                              "count of evaluations", state_path, best);
    t->patience.seen = true;
    return 0;
}

int train_resume(struct trainer *t, const char *path)
{
    char state_path[4096];
    struct weft_tensor_dict *model = NULL, *state = NULL;
    struct weft_metadata *meta = NULL, *model_meta = NULL;
    uint64_t seed = 0, offset = 0;
    int rc = train_check_argument_file(path);
    if (rc == 0)
        rc = weft_safetensors_load(path, t->device, &model, &model_meta);
    if (rc == 0)
        rc = find_state(t, path, model, model_meta, state_path, sizeof state_path);
    if (rc == 0)
        rc = weft_module_load_state_dict(t->model, model, true);
    if (rc == 0)
        rc = weft_safetensors_load(state_path, t->device, &state, &meta);
    if (rc == 0)
        rc = check_scheduler(t, meta);
    if (rc == 0)
        rc = weft_optimizer_state_import(t->opt, state, meta);
    if (rc == 0 && t->sched)
        rc = weft_scheduler_state_import(t->sched, meta);
    /* a checkpoint of an fp32 or bf16 run has no scaler: start from the defaults */
    if (rc == 0 && t->scaler && weft_metadata_get(meta, "scaler.scale"))
        rc = weft_grad_scaler_state_import(t->scaler, meta);
    if (rc == 0)
        rc = train_ema_import(t, state_path, state, meta);
    if (rc == 0)
        rc = weft_metadata_get_int(meta, "weft.epoch", &t->start_epoch) ||
             weft_metadata_get_int(meta, "weft.batch", &t->skip_batches) ||
             (weft_metadata_get(meta, "weft.step") &&
              weft_metadata_get_int(meta, "weft.step", &t->start_step)) ||
             weft_metadata_get_uint(meta, "weft.rng_seed", &seed) ||
             weft_metadata_get_uint(meta, "weft.rng_offset", &offset);
    if (rc == 0)
        rc = read_patience(t, state_path, meta);
    if (rc == 0)
        rc = check_left_to_train(t);
    /* weft.batch counts one rank's batches: under another number of processes, resume
     * after as many samples of the epoch (rounded down to a whole batch). */
    int64_t world = 1;
    if (rc == 0 && weft_metadata_get(meta, "weft.world_size"))
        rc = weft_metadata_get_int(meta, "weft.world_size", &world);
    if (rc == 0 && world != t->world && t->skip_batches > 0) {
        int64_t skip = t->skip_batches * world / t->world;
        printf("resuming a %lld-process checkpoint under %d: %lld batches of the epoch read "
               "become %lld\n", (long long)world, t->world, (long long)t->skip_batches,
               (long long)skip);
        t->skip_batches = skip;
    }
    if (rc == 0) {
        weft_manual_seed(seed);
        weft_random_set_offset(offset);
        t->step = t->start_step;
    }
    weft_tensor_dict_free(model);
    weft_tensor_dict_free(state);
    weft_metadata_free(meta);
    weft_metadata_free(model_meta);
    return rc ? weft_error_code() : 0;
}
