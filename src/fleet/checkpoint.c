/*
 * checkpoint.c - checkpoints for restart (fleet_save_checkpoint / fleet_load_checkpoint).
 *
 * Layout of ROOT (see docs/checkpoints.md):
 *   ROOT/ckpt-<seq, 10 digits>/              one checkpoint; seq counts this job's saves
 *       <the servers' tables>                PS: fl_ps_client_save (ps_manifest.json, shards)
 *       worker-<w>/persistables.safetensors  worker w's local state (fl_io_save_persistables)
 *       worker-<w>/position.json             worker w's data position and step
 *       checkpoint.json                      the commit point, written last by worker 0
 * A checkpoint is valid only when checkpoint.json is there: it is written (atomically)
 * after every worker reported its part saved, so a job killed at any moment leaves the
 * previous valid checkpoint in place.  After a commit worker 0 removes all but the newest
 * `keep` valid checkpoints and any unfinished one older than the newest.  A save that
 * fails (a full disk) names the first worker that failed on every worker, and worker 0
 * removes the unfinished directory before any worker returns.  A load removes the
 * temporary files that killed saves left in unfinished checkpoints (those of this host's
 * processes that are gone: src/io/atomic.c), which the next save would only overwrite.
 *
 * The shared part and the agreement among the workers are the runtime's (runtime.h:
 * checkpoint_shared, agree); everything else is the same for every runtime.
 */
#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "../io/io_internal.h"
#include "runtime.h"

#define CKPT_PREFIX "ckpt-"
#define MAX_META 65536

static int check(const fleet_t *f, const char *fn, fl_exe *exe, const char *root)
{
    if (!f || f->magic != FLEET_MAGIC) return fl__err_handle(f, "%s: fleet handle is NULL or invalid", fn);
    if (!fleet_is_worker(f))
        return fl__err(FL_ESTATE, "%s: this process is a server; workers save and load checkpoints", fn);
    if (!exe) return fl__err(FL_EINVAL, "%s: executor is NULL", fn);
    if (!root || !*root) return fl__err(FL_EINVAL, "%s: checkpoint directory is NULL or empty", fn);
    if (strlen(root) > 3800) return fl__err(FL_EINVAL, "%s: checkpoint directory name is longer than 3800 bytes", fn);
    return FL_OK;
}

/* Parses "ckpt-<digits>" into *seq; 0 if the name is something else. */
static int seq_of(const char *name, int64_t *seq)
{
    size_t n = strlen(CKPT_PREFIX);
    if (strncmp(name, CKPT_PREFIX, n) || !name[n]) return 0;
    int64_t v = 0;
    for (const char *p = name + n; *p; p++) {
        if (*p < '0' || *p > '9' || v > (INT64_MAX - 9) / 10) return 0;
        v = v * 10 + (*p - '0');
    }
    *seq = v;
    return 1;
}

static void ckpt_dir(char *out, size_t cap, const char *root, int64_t seq)
{
    snprintf(out, cap, "%s/" CKPT_PREFIX "%010lld", root, (long long)seq);
}

/* Reads ROOT/ckpt-N/checkpoint.json: FL_OK when it is a valid commit for seq. */
static int read_commit(const char *dir, int64_t seq, int64_t *workers)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/checkpoint.json", dir);
    char *text = NULL;
    size_t len = 0;
    FL_CHECK(fl__read_file(path, MAX_META, &text, &len));
    fl_json j = {NULL, path, FL_ECORRUPT};
    int64_t version = 0, s = -1;
    const char *format = NULL;
    int st = fl__json_parse(&j, text, len, MAX_META, 64);
    if (st == FL_OK) st = fl__json_obj(&j, j.root, "checkpoint");
    if (st == FL_OK) st = fl__json_str(&j, fl__json_find(j.root, "format"), "format", &format);
    if (st == FL_OK && strcmp(format, "fleet-checkpoint") != 0)
        st = fl__json_fail(&j, "format is '%s', not fleet-checkpoint", format);
    if (st == FL_OK) st = fl__json_int(&j, fl__json_find(j.root, "version"), "version", 1, 1, &version);
    if (st == FL_OK) st = fl__json_int(&j, fl__json_find(j.root, "seq"), "seq", 0, INT64_MAX / 2, &s);
    if (st == FL_OK && s != seq) st = fl__json_fail(&j, "seq %lld does not match the directory name", (long long)s);
    if (st == FL_OK) st = fl__json_int(&j, fl__json_find(j.root, "workers"), "workers", 1, 1 << 20, workers);
    fl__json_free(&j);
    free(text);
    return st;
}

/* The newest valid checkpoint under root: *seq (-1 when there is none). */
static int latest(const char *root, int64_t *seq, int64_t *workers)
{
    *seq = -1;
    DIR *d = opendir(root);
    if (!d) return FL_OK; /* no directory yet: no checkpoint */
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int64_t s, w = 0;
        if (!seq_of(e->d_name, &s) || s <= *seq) continue;
        char dir[4096];
        ckpt_dir(dir, sizeof dir, root, s);
        if (read_commit(dir, s, &w) != FL_OK) continue; /* unfinished or damaged: not a checkpoint */
        *seq = s;
        if (workers) *workers = w;
    }
    closedir(d);
    return FL_OK;
}

int fleet_checkpoint_latest(const char *root, char *dir, size_t cap, int64_t *seq)
{
    if (!root || !*root || !dir || cap == 0) return fl__err(FL_EINVAL, "fleet_checkpoint_latest: invalid arguments");
    if (strlen(root) > 3800) return fl__err(FL_EINVAL, "fleet_checkpoint_latest: directory name is longer than 3800 bytes");
    int64_t s = -1;
    FL_CHECK(latest(root, &s, NULL));
    if (seq) *seq = s;
    if (s < 0) return fl__err(FL_ENOTFOUND, "fleet_checkpoint_latest: no valid checkpoint under '%s'", root);
    ckpt_dir(dir, cap, root, s);
    return FL_OK;
}

/* rm -r of one checkpoint directory (files and one level of subdirectories, as written). */
static void remove_tree(const char *path)
{
    DIR *d = opendir(path);
    if (!d) {
        unlink(path);
        return;
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", path, e->d_name);
        struct stat sb;
        if (lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode)) remove_tree(p);
        else unlink(p);
    }
    closedir(d);
    rmdir(path);
}

/* Keeps the newest `keep` valid checkpoints; removes older ones and unfinished ones older
 * than the newest valid one. */
static void prune(const char *root, int64_t newest, int keep)
{
    DIR *d = opendir(root);
    if (!d) return;
    struct dirent *e;
    int64_t *valid = NULL;
    int nv = 0, cap = 0;
    char **doomed = NULL;
    int nd = 0, dcap = 0;
    while ((e = readdir(d)) != NULL) {
        int64_t s, w;
        if (!seq_of(e->d_name, &s) || s > newest) continue;
        char dir[4096];
        ckpt_dir(dir, sizeof dir, root, s);
        if (read_commit(dir, s, &w) == FL_OK) {
            if (nv == cap) {
                int64_t *v = realloc(valid, (size_t)(cap = cap ? 2 * cap : 16) * sizeof *v);
                if (!v) break;
                valid = v;
            }
            valid[nv++] = s;
        } else if (s < newest) {
            if (nd == dcap) {
                char **v = realloc(doomed, (size_t)(dcap = dcap ? 2 * dcap : 16) * sizeof *v);
                if (!v) break;
                doomed = v;
            }
            if (!(doomed[nd] = fl__strdup(dir))) break;
            nd++;
        }
    }
    closedir(d);
    for (int i = 0; i < nv; i++) { /* the keep newest stay */
        int newer = 0;
        for (int k = 0; k < nv; k++) newer += valid[k] > valid[i];
        if (newer < keep) continue;
        char dir[4096];
        ckpt_dir(dir, sizeof dir, root, valid[i]);
        remove_tree(dir);
    }
    for (int i = 0; i < nd; i++) {
        remove_tree(doomed[i]);
        free(doomed[i]);
    }
    free(valid);
    free(doomed);
}

/* Removes the stale temporary files (fl__tmp_sweep) in every unfinished checkpoint under
 * root and in its subdirectories (worker-<w>/, the servers' table directories): what a
 * killed save left.  Nothing else is touched, so a save that another worker of the same
 * job may already have begun is safe. */
static void sweep_unfinished(const char *root)
{
    DIR *d = opendir(root);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int64_t s, w;
        char dir[4096];
        if (!seq_of(e->d_name, &s)) continue;
        ckpt_dir(dir, sizeof dir, root, s);
        if (read_commit(dir, s, &w) == FL_OK) continue;
        int n = fl__tmp_sweep(dir);
        DIR *sub = opendir(dir);
        struct dirent *se;
        while (sub && (se = readdir(sub)) != NULL) {
            char p[4400];
            struct stat sb;
            if (se->d_name[0] == '.') continue;
            snprintf(p, sizeof p, "%s/%s", dir, se->d_name);
            if (lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode)) n += fl__tmp_sweep(p);
        }
        if (sub) closedir(sub);
        if (n)
            FL_INFO(FL_SUB_FLEET, "removed %d temporary file%s of a killed save from the unfinished checkpoint %s", n,
                    n == 1 ? "" : "s", dir);
    }
    closedir(d);
}

/* After an agreement that not every worker passed (failed: this one did not): the lowest
 * index of a worker that failed, into *who.  Each round is one more agreement, on whether
 * a failed worker lies in the lower half of the range still open, so it costs about
 * log2(workers) agreements, on the failure path only. */
static int first_failed(fleet_t *f, int failed, const char *fn, int *who)
{
    int me = fleet_worker_index(f), lo = 0, hi = fleet_worker_num(f);
    while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2, none = 0;
        FL_CHECK(f->runtime->agree(f, !(failed && me >= lo && me < mid), fn, &none));
        if (none) lo = mid;
        else hi = mid;
    }
    *who = lo;
    return FL_OK;
}

/* A save that failed on some worker: worker 0 removes the unfinished directory (every
 * worker's attempt is over: they agreed), then all agree once more, so that no worker
 * returns, and perhaps saves again into the same directory, before it is gone. */
static int drop_unfinished(fleet_t *f, const char *dir, const char *fn)
{
    if (fleet_is_first_worker(f)) {
        remove_tree(dir);
        FL_WARN(FL_SUB_FLEET, "%s: removed the unfinished checkpoint %s", fn, dir);
    }
    int all = 0;
    return f->runtime->agree(f, 1, fn, &all);
}

static int write_position(const char *wdir, const fleet_checkpoint_pos *pos)
{
    char path[4400], text[512];
    snprintf(path, sizeof path, "%s/position.json", wdir);
    int n = snprintf(text, sizeof text, "{\"epoch\": %lld, \"file\": %lld, \"offset\": %lld, \"step\": %lld}\n",
                     (long long)pos->epoch, (long long)pos->file, (long long)pos->offset, (long long)pos->step);
    return fl__write_file_atomic(path, text, (size_t)n);
}

static int read_position(const char *wdir, fleet_checkpoint_pos *pos)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/position.json", wdir);
    char *text = NULL;
    size_t len = 0;
    FL_CHECK(fl__read_file(path, MAX_META, &text, &len));
    fl_json j = {NULL, path, FL_ECORRUPT};
    int st = fl__json_parse(&j, text, len, MAX_META, 64);
    if (st == FL_OK) st = fl__json_obj(&j, j.root, "position");
    if (st == FL_OK) st = fl__json_int(&j, fl__json_find(j.root, "epoch"), "epoch", 0, INT64_MAX / 2, &pos->epoch);
    if (st == FL_OK) st = fl__json_int(&j, fl__json_find(j.root, "file"), "file", 0, INT64_MAX / 2, &pos->file);
    if (st == FL_OK) st = fl__json_int(&j, fl__json_find(j.root, "offset"), "offset", 0, INT64_MAX / 2, &pos->offset);
    if (st == FL_OK) st = fl__json_int(&j, fl__json_find(j.root, "step"), "step", 0, INT64_MAX / 2, &pos->step);
    fl__json_free(&j);
    free(text);
    return st;
}

int fleet_save_checkpoint(fleet_t *f, fl_exe *exe, const char *root, const fl_prog *prog, const fleet_checkpoint_pos *pos,
                          int keep)
{
    const char *fn = "fleet_save_checkpoint";
    FL_CHECK(check(f, fn, exe, root));
    if (!pos) return fl__err(FL_EINVAL, "%s: position is NULL", fn);
    if (keep < 1) return fl__err(FL_EINVAL, "%s: keep = %d must be at least 1", fn, keep);
    if (pos->epoch < 0 || pos->file < 0 || pos->offset < 0 || pos->step < 0)
        return fl__err(FL_EINVAL, "%s: the position (epoch, file, offset, step) must not be negative", fn);
    if (!f->ckpt_known) { /* a job that loaded nothing continues after what is there */
        int64_t last = -1;
        FL_CHECK(latest(root, &last, NULL));
        f->ckpt_seq = last < 0 ? 0 : last;
        f->ckpt_known = 1;
    }
    int64_t seq = f->ckpt_seq + 1;
    char dir[4096], wdir[4200];
    ckpt_dir(dir, sizeof dir, root, seq);
    snprintf(wdir, sizeof wdir, "%s/worker-%d", dir, fleet_worker_index(f));
    /* 1. what the workers share (the servers' tables); 2. each worker's own part */
    int st = fl__mkdir_p(dir);
    if (st == FL_OK) st = f->runtime->checkpoint_shared(f, dir, pos->step);
    if (st == FL_OK) st = fl_io_save_persistables(exe, wdir, prog);
    if (st == FL_OK) st = write_position(wdir, pos);
    char why[1024] = "";
    if (st != FL_OK) snprintf(why, sizeof why, "%s", fl_last_error());
    /* 3. every worker's part is there: worker 0 commits */
    int all = 0, who = -1;
    FL_CHECK(f->runtime->agree(f, st == FL_OK, fn, &all));
    if (!all) {
        FL_CHECK(first_failed(f, st != FL_OK, fn, &who));
        FL_CHECK(drop_unfinished(f, dir, fn));
    }
    if (st != FL_OK)
        return fl__err(st, "%s: worker %d could not save its part of '%s' (removed): %s", fn, fleet_worker_index(f), dir,
                       why);
    if (!all)
        return fl__err(FL_EREMOTE,
                       "%s: worker %d could not save its part of '%s' (removed); its error is in its log and in "
                       "fleetrun's summary",
                       fn, who, dir);
    if (fleet_is_first_worker(f)) {
        char path[4400], text[512];
        snprintf(path, sizeof path, "%s/checkpoint.json", dir);
        int n = snprintf(
            text, sizeof text,
            "{\"format\": \"fleet-checkpoint\", \"version\": 1, \"seq\": %lld, \"workers\": %d, \"step\": %lld}\n",
            (long long)seq, fleet_worker_num(f), (long long)pos->step);
        st = fl__write_file_atomic(path, text, (size_t)n);
        if (st != FL_OK) snprintf(why, sizeof why, "%s", fl_last_error());
        else prune(root, seq, keep);
    }
    FL_CHECK(f->runtime->agree(f, st == FL_OK, fn, &all));
    if (!all) FL_CHECK(drop_unfinished(f, dir, fn));
    if (st != FL_OK) return fl__err(st, "%s: committing '%s' failed (removed): %s", fn, dir, why);
    if (!all)
        return fl__err(FL_EREMOTE,
                       "%s: worker 0 could not commit '%s' (removed); its error is in its log and in "
                       "fleetrun's summary",
                       fn, dir);
    f->ckpt_seq = seq;
    FL_INFO(FL_SUB_FLEET, "checkpoint %lld saved to %s (step %lld)", (long long)seq, dir, (long long)pos->step);
    return FL_OK;
}

int fleet_load_checkpoint(fleet_t *f, fl_exe *exe, const char *root, const fl_prog *prog, fleet_checkpoint_pos *pos)
{
    const char *fn = "fleet_load_checkpoint";
    FL_CHECK(check(f, fn, exe, root));
    if (!pos) return fl__err(FL_EINVAL, "%s: position is NULL", fn);
    int64_t seq = -1, workers = 0;
    sweep_unfinished(root);
    FL_CHECK(latest(root, &seq, &workers));
    if (seq < 0) return fl__err(FL_ENOTFOUND, "%s: no valid checkpoint under '%s'", fn, root);
    char dir[4096], wdir[4200];
    ckpt_dir(dir, sizeof dir, root, seq);
    if (workers != fleet_worker_num(f))
        return fl__err(FL_EINVAL, "%s: '%s' was saved by %lld workers; this job has %d", fn, dir, (long long)workers,
                       fleet_worker_num(f));
    snprintf(wdir, sizeof wdir, "%s/worker-%d", dir, fleet_worker_index(f));
    fleet_checkpoint_pos p;
    FL_CHECK(read_position(wdir, &p));
    FL_CHECK(fl_io_load_persistables(exe, wdir, prog));
    *pos = p;
    f->ckpt_seq = seq;
    f->ckpt_known = 1;
    FL_INFO(FL_SUB_FLEET, "resumed from checkpoint %s: epoch %lld, file %lld, offset %lld, step %lld", dir,
            (long long)p.epoch, (long long)p.file, (long long)p.offset, (long long)p.step);
    return FL_OK;
}
