/*
 * dataset.c - the fl_dataset handle: creation, setters, getters and the reading pass
 * (fl_dataset_begin / fl_dataset_next / fl_dataset_end) of both kinds.
 *
 * Threads: setters are not thread safe and fail with FL_ESTATE during a pass or a preload.
 * During a pass, fl_dataset_next(ds, t, ...) may run concurrently for different t; each
 * reader touches its own state, the file queue is taken under ds->mu, and the skipped-line
 * counter and the failure flag are atomics.  A QueueDataset reader parses its current file
 * inline (no extra threads); when one reader fails under the "stop" policy the others end
 * their share at their next call (returning 0) and fl_dataset_end returns the error.
 */
#include <limits.h>
#include <math.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>

#include "data_internal.h"

static const char *const kind_names[] = {"QueueDataset", "InMemoryDataset"};
static const char *const fmt_names[] = {"multislot", "criteo", "libsvm"};

fl_dataset *fl_dataset_create(const char *kind)
{
    int k = -1;
    for (int i = 0; i < 2; i++)
        if (kind && !strcmp(kind, kind_names[i])) k = i;
    if (k < 0) {
        fl__err(FL_EINVAL, "fl_dataset_create: unknown kind '%s' (expected QueueDataset or InMemoryDataset)",
                kind ? kind : "(null)");
        return NULL;
    }
    fl_dataset *ds = calloc(1, sizeof *ds);
    if (!ds || !(ds->pipe_cmd = fl__strdup("cat"))) {
        free(ds);
        fl__err(FL_ENOMEM, "fl_dataset_create: out of memory");
        return NULL;
    }
    ds->magic = FL_DATASET_MAGIC;
    ds->kind = (fl__ds_kind)k;
    ds->batch_size = 1;
    ds->thread_req = 1;
    ds->pipe_timeout = 300;
    ds->fmt = FL__FMT_MULTISLOT;
    ds->sparse_dim = 1000001;
    pthread_mutex_init(&ds->mu, NULL);
    return ds;
}

static void free_slots(fl__slot *s, int n)
{
    for (int i = 0; s && i < n; i++) free(s[i].name);
    free(s);
}

static void free_files(char **f, int n)
{
    for (int i = 0; f && i < n; i++) free(f[i]);
    free(f);
}

static void end_pass(fl_dataset *ds);

void fl_dataset_free(fl_dataset *ds)
{
    if (!ds || ds->magic != FL_DATASET_MAGIC) return;
    if (ds->preloading) {
        __atomic_store_n(&ds->cancel, 1, __ATOMIC_RELAXED);
        pthread_join(ds->preload_thr, NULL);
        ds->preloading = 0;
    }
    if (ds->in_pass) end_pass(ds);
    fl__store_free(&ds->store);
    free_slots(ds->slots, ds->nslots);
    free_files(ds->files, ds->nfiles);
    free(ds->file_bytes);
    free(ds->pipe_cmd);
    pthread_mutex_destroy(&ds->mu);
    ds->magic = 0;
    free(ds);
}

/* ---- argument and state checks --------------------------------------------------------- */

static int check_ds(const fl_dataset *ds, const char *fn)
{
    if (!ds || ds->magic != FL_DATASET_MAGIC) return fl__err_handle(ds, "%s: dataset is NULL or invalid", fn);
    return FL_OK;
}

/* Setters and whole-store operations: not during a pass or a preload. */
static int check_idle(const fl_dataset *ds, const char *fn)
{
    FL_CHECK(check_ds(ds, fn));
    if (ds->in_pass) return fl__err(FL_ESTATE, "%s: a pass is in progress (call fl_dataset_end first)", fn);
    if (ds->preloading)
        return fl__err(FL_ESTATE, "%s: a preload is in progress (call fl_dataset_wait_preload_done first)", fn);
    return FL_OK;
}

int fl__ds_nthreads(const fl_dataset *ds)
{
    return ds->nfiles > 0 && ds->thread_req > ds->nfiles ? ds->nfiles : ds->thread_req;
}

static void log_clamp(const fl_dataset *ds)
{
    if (fl__ds_nthreads(ds) < ds->thread_req)
        FL_INFO(FL_SUB_DATA, "dataset: thread_num %d clamped to %d, the number of files", ds->thread_req,
                fl__ds_nthreads(ds));
}

/* ---- setters --------------------------------------------------------------------------- */

int fl_dataset_set_filelist(fl_dataset *ds, const char *const *files, int n)
{
    FL_CHECK(check_idle(ds, "fl_dataset_set_filelist"));
    if (n < 0 || (n > 0 && !files))
        return fl__err(FL_EINVAL, "fl_dataset_set_filelist: files is NULL or n (%d) is negative", n);
    char **f = calloc((size_t)(n ? n : 1), sizeof *f);
    if (!f) return fl__err(FL_ENOMEM, "fl_dataset_set_filelist: out of memory");
    for (int i = 0; i < n; i++) {
        if (!files[i]) {
            free_files(f, n);
            return fl__err(FL_EINVAL, "fl_dataset_set_filelist: files[%d] is NULL", i);
        }
        if (!(f[i] = fl__strdup(files[i]))) {
            free_files(f, n);
            return fl__err(FL_ENOMEM, "fl_dataset_set_filelist: out of memory");
        }
    }
    free_files(ds->files, ds->nfiles);
    ds->files = f;
    ds->nfiles = n;
    log_clamp(ds);
    return FL_OK;
}

int fl_dataset_set_batch_size(fl_dataset *ds, int batch_size)
{
    FL_CHECK(check_idle(ds, "fl_dataset_set_batch_size"));
    if (batch_size < 1) return fl__err(FL_EINVAL, "fl_dataset_set_batch_size: batch_size must be >= 1, got %d", batch_size);
    ds->batch_size = batch_size;
    return FL_OK;
}

int fl_dataset_set_thread(fl_dataset *ds, int thread_num)
{
    FL_CHECK(check_idle(ds, "fl_dataset_set_thread"));
    if (thread_num < 1 || thread_num > 4096)
        return fl__err(FL_EINVAL, "fl_dataset_set_thread: thread_num must be in [1, 4096], got %d", thread_num);
    ds->thread_req = thread_num;
    log_clamp(ds);
    return FL_OK;
}

int fl_dataset_set_use_var(fl_dataset *ds, fl_var *const *vars, int n)
{
    static const char fn[] = "fl_dataset_set_use_var";
    FL_CHECK(check_idle(ds, fn));
    if (n < 1 || !vars) return fl__err(FL_EINVAL, "%s: vars is NULL or n (%d) < 1", fn, n);
    if (ds->store.nrec)
        return fl__err(FL_ESTATE,
                       "%s: the dataset holds %zu records of the current slots (call "
                       "fl_dataset_release_memory first)",
                       fn, ds->store.nrec);
    fl__slot *s = calloc((size_t)n, sizeof *s);
    if (!s) return fl__err(FL_ENOMEM, "%s: out of memory", fn);
    int st = FL_OK;
    for (int i = 0; i < n; i++) {
        const fl_var *v = vars[i];
        if (!v) {
            st = fl__err(FL_EINVAL, "%s: vars[%d] is NULL", fn, i);
            goto fail;
        }
        const char *name = fl_var_name(v);
        fl_dtype dt = fl_var_dtype(v);
        int lod = fl_var_lod_level(v), nd = fl_var_ndim(v);
        const int64_t *shape = fl_var_shape(v);
        if (dt != FL_INT64 && dt != FL_FLOAT32) {
            st = fl__err(FL_EINVAL, "%s: variable #%d '%s' has dtype %s; a slot must be int64 or float32", fn, i + 1, name,
                         fl_dtype_name(dt));
            goto fail;
        }
        if (lod < 0 || lod > 1) {
            st = fl__err(FL_EINVAL, "%s: variable #%d '%s' has lod_level %d; a slot has lod_level 0 or 1", fn, i + 1, name,
                         lod);
            goto fail;
        }
        int64_t width = 1;
        for (int d = 1; d < nd; d++) {
            if (shape[d] <= 0 && lod == 0) {
                st = fl__err(FL_EINVAL, "%s: variable #%d '%s' is a dense slot (lod_level 0) but dimension %d is %lld", fn,
                             i + 1, name, d, (long long)shape[d]);
                goto fail;
            }
            width *= shape[d] > 0 ? shape[d] : 1;
            if (width > INT_MAX) {
                st = fl__err(FL_EINVAL, "%s: variable #%d '%s' is wider than %d values", fn, i + 1, name, INT_MAX);
                goto fail;
            }
        }
        s[i].dtype = dt;
        s[i].dense = lod == 0;
        s[i].width = (int)width;
        s[i].esize = dt == FL_INT64 ? 8 : 4;
        if (!(s[i].name = fl__strdup(name))) {
            st = fl__err(FL_ENOMEM, "%s: out of memory", fn);
            goto fail;
        }
    }
    if (ds->fmt_set) FL_CHECK_GOTO(fl__check_layout(fn, ds->fmt, s, n), st, fail);
    free_slots(ds->slots, ds->nslots);
    ds->slots = s;
    ds->nslots = n;
    return FL_OK;
fail:
    free_slots(s, n);
    return st;
}

int fl_dataset_set_pipe_command(fl_dataset *ds, const char *cmd)
{
    FL_CHECK(check_idle(ds, "fl_dataset_set_pipe_command"));
    if (!cmd || !*cmd) return fl__err(FL_EINVAL, "fl_dataset_set_pipe_command: cmd is NULL or empty");
    char *c = fl__strdup(cmd);
    if (!c) return fl__err(FL_ENOMEM, "fl_dataset_set_pipe_command: out of memory");
    free(ds->pipe_cmd);
    ds->pipe_cmd = c;
    return FL_OK;
}

int fl_dataset_set_pipe_timeout(fl_dataset *ds, double seconds)
{
    FL_CHECK(check_idle(ds, "fl_dataset_set_pipe_timeout"));
    if (!(seconds > 0) || !isfinite(seconds) || seconds > 1e7)
        return fl__err(FL_EINVAL, "fl_dataset_set_pipe_timeout: seconds must be in (0, 1e7], got %g", seconds);
    ds->pipe_timeout = seconds;
    return FL_OK;
}

int fl_dataset_set_format(fl_dataset *ds, const char *format)
{
    static const char fn[] = "fl_dataset_set_format";
    FL_CHECK(check_idle(ds, fn));
    int f = -1;
    for (int i = 0; i < 3; i++)
        if (format && !strcmp(format, fmt_names[i])) f = i;
    if (f < 0)
        return fl__err(FL_EINVAL, "%s: unknown format '%s' (expected multislot, criteo or libsvm)", fn,
                       format ? format : "(null)");
    if (ds->nslots) FL_CHECK(fl__check_layout(fn, (fl__data_format)f, ds->slots, ds->nslots));
    ds->fmt = (fl__data_format)f;
    ds->fmt_set = 1;
    return FL_OK;
}

int fl_dataset_set_sparse_feature_dim(fl_dataset *ds, uint64_t dim)
{
    FL_CHECK(check_idle(ds, "fl_dataset_set_sparse_feature_dim"));
    if (dim < 1) return fl__err(FL_EINVAL, "fl_dataset_set_sparse_feature_dim: dim must be >= 1");
    ds->sparse_dim = dim;
    return FL_OK;
}

int fl_dataset_set_bad_line_policy(fl_dataset *ds, const char *policy)
{
    FL_CHECK(check_idle(ds, "fl_dataset_set_bad_line_policy"));
    if (policy && !strcmp(policy, "stop")) ds->skip_bad = 0;
    else if (policy && !strcmp(policy, "skip")) ds->skip_bad = 1;
    else
        return fl__err(FL_EINVAL, "fl_dataset_set_bad_line_policy: unknown policy '%s' (expected stop or skip)",
                       policy ? policy : "(null)");
    return FL_OK;
}

/* ---- getters --------------------------------------------------------------------------- */

int fl_dataset_thread_num(const fl_dataset *ds) { return check_ds(ds, "fl_dataset_thread_num") ? 0 : fl__ds_nthreads(ds); }
int fl_dataset_batch_size(const fl_dataset *ds) { return check_ds(ds, "fl_dataset_batch_size") ? 0 : ds->batch_size; }
int fl_dataset_num_slots(const fl_dataset *ds) { return check_ds(ds, "fl_dataset_num_slots") ? 0 : ds->nslots; }
const char *fl_dataset_slot_name(const fl_dataset *ds, int i)
{
    if (check_ds(ds, "fl_dataset_slot_name")) return NULL;
    return i >= 0 && i < ds->nslots ? ds->slots[i].name : NULL;
}
int64_t fl_dataset_bad_lines(const fl_dataset *ds)
{
    return check_ds(ds, "fl_dataset_bad_lines") ? 0 : __atomic_load_n(&ds->last_bad, __ATOMIC_RELAXED);
}

/* ---- bad lines and errors of a pass or load -------------------------------------------- */

void fl__ds_parser(const fl_dataset *ds, const char *file, fl__parser *ps)
{
    ps->slots = ds->slots;
    ps->nslots = ds->nslots;
    ps->fmt = ds->fmt;
    ps->sparse_dim = ds->sparse_dim;
    ps->file = file;
}

void fl__pass_log_reset(fl__pass_log *lg) { memset(lg, 0, sizeof *lg); }

void fl__ds_note_bad(fl_dataset *ds, fl__pass_log *lg)
{
    (void)ds;
    int64_t n = __atomic_fetch_add(&lg->bad, 1, __ATOMIC_RELAXED);
    if (n < FL__DATA_LOG_FIRST)
        FL_WARN(FL_SUB_DATA, "skipping bad line (policy skip%s): %s",
                n == FL__DATA_LOG_FIRST - 1 ? "; further ones are only counted" : "", fl_last_error());
}

void fl__ds_note_error(fl_dataset *ds, fl__pass_log *lg, int st)
{
    pthread_mutex_lock(&ds->mu);
    if (!lg->err_status) {
        lg->err_status = st;
        snprintf(lg->err_msg, sizeof lg->err_msg, "%s", fl_last_error());
    }
    pthread_mutex_unlock(&ds->mu);
    __atomic_store_n(&lg->failed, 1, __ATOMIC_RELEASE);
}

int fl__pass_log_finish(fl_dataset *ds, fl__pass_log *lg, const char *what)
{
    int64_t bad = __atomic_load_n(&lg->bad, __ATOMIC_RELAXED);
    __atomic_store_n(&ds->last_bad, bad, __ATOMIC_RELAXED);
    if (bad) FL_WARN(FL_SUB_DATA, "%s: skipped %lld bad line%s (policy skip)", what, (long long)bad, bad == 1 ? "" : "s");
    if (lg->err_status) return fl__err(lg->err_status, "%s", lg->err_msg);
    return FL_OK;
}

/* ---- the reading pass ------------------------------------------------------------------ */

int fl_dataset_begin(fl_dataset *ds)
{
    static const char fn[] = "fl_dataset_begin";
    FL_CHECK(check_idle(ds, fn));
    if (!ds->nslots) return fl__err(FL_EINVAL, "%s: no slots (call fl_dataset_set_use_var first)", fn);
    FL_CHECK(fl__check_layout(fn, ds->fmt, ds->slots, ds->nslots));
    /* Paddle trains "0 s with no AUC" on an InMemoryDataset nobody loaded: say so instead */
    if (ds->kind == FL__DS_INMEM && ds->store.nrec == 0)
        return fl__err(FL_ESTATE,
                       "%s: the InMemoryDataset holds no records: call fl_dataset_load_into_memory (or "
                       "fl_dataset_wait_preload_done) first, with a file list of non-empty files",
                       fn);
    int nt = fl__ds_nthreads(ds);
    fl__reader *r = calloc((size_t)nt, sizeof *r);
    if (!r) return fl__err(FL_ENOMEM, "%s: out of memory", fn);
    if (ds->kind == FL__DS_QUEUE && ds->nfiles == 0)
        FL_WARN(FL_SUB_DATA, "%s: the file list is empty; the pass has no data", fn);
    for (int t = 0; t < nt; t++) {
        r[t].file = -1;
        if (ds->kind == FL__DS_INMEM) {
            r[t].begin = r[t].pos = ds->store.nrec * (size_t)t / (size_t)nt;
            r[t].end = ds->store.nrec * (size_t)(t + 1) / (size_t)nt;
        }
    }
    int64_t total = 0;
    if (ds->kind == FL__DS_QUEUE) {
        int64_t *fb = realloc(ds->file_bytes, sizeof *fb * (size_t)(ds->nfiles ? ds->nfiles : 1));
        if (!fb) {
            free(r);
            return fl__err(FL_ENOMEM, "%s: out of memory", fn);
        }
        ds->file_bytes = fb;
        for (int i = 0; i < ds->nfiles; i++) {
            struct stat sb;
            fb[i] = stat(ds->files[i], &sb) == 0 && S_ISREG(sb.st_mode) ? (int64_t)sb.st_size : 0;
            total += fb[i];
        }
    } else {
        total = (int64_t)ds->store.nrec;
    }
    __atomic_store_n(&ds->prog_done, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&ds->prog_files_done, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&ds->prog_total, total, __ATOMIC_RELAXED);
    ds->readers = r;
    ds->nreaders = nt;
    ds->next_file = 0;
    fl__pass_log_reset(&ds->log);
    ds->in_pass = 1;
    return FL_OK;
}

static void reader_free(fl__reader *r)
{
    fl__source_close(r->src);
    r->src = NULL;
    fl__arena_free(&r->recs);
    free(r->offs);
    free(r->refs);
    r->offs = NULL;
    r->refs = NULL;
}

static void end_pass(fl_dataset *ds)
{
    for (int t = 0; t < ds->nreaders; t++) reader_free(&ds->readers[t]);
    free(ds->readers);
    ds->readers = NULL;
    ds->nreaders = 0;
    ds->in_pass = 0;
}

int fl_dataset_end(fl_dataset *ds)
{
    FL_CHECK(check_ds(ds, "fl_dataset_end"));
    if (!ds->in_pass) return fl__err(FL_ESTATE, "fl_dataset_end: no pass in progress (call fl_dataset_begin first)");
    end_pass(ds);
    /* a pass over an InMemoryDataset's records parses nothing: the bad-line count stays
     * the load's (its log counted no line and must not reset it to 0) */
    int64_t load_bad = __atomic_load_n(&ds->last_bad, __ATOMIC_RELAXED);
    int st = fl__pass_log_finish(ds, &ds->log, "dataset pass");
    if (ds->kind == FL__DS_INMEM) __atomic_store_n(&ds->last_bad, load_bad, __ATOMIC_RELAXED);
    return st;
}

/* Fails the reader: records the error for fl_dataset_end and stops the other readers. */
static int reader_fail(fl_dataset *ds, fl__reader *r, int st)
{
    fl__ds_note_error(ds, &ds->log, st);
    fl__source_close(r->src);
    r->src = NULL;
    r->done = 1;
    return st;
}

/* Adds the bytes of r's current file read up to `upto` (clamped to its size at
 * fl_dataset_begin) to the pass's progress; a finished file counts whole. */
static void note_bytes(fl_dataset *ds, fl__reader *r, int64_t upto, int finished)
{
    int64_t size = ds->file_bytes[r->file];
    if (finished || upto > size) upto = size;
    if (upto > r->counted) __atomic_fetch_add(&ds->prog_done, upto - r->counted, __ATOMIC_RELAXED);
    r->counted = upto > r->counted ? upto : r->counted;
    if (finished) __atomic_fetch_add(&ds->prog_files_done, 1, __ATOMIC_RELAXED);
}

/* QueueDataset: parses up to batch_size lines from the shared file queue into r->recs. */
static int queue_fill(fl_dataset *ds, fl__reader *r, int *count)
{
    int bs = ds->batch_size, n = 0;
    fl__parser ps;
    r->recs.len = 0;
    if (!r->offs) {
        r->offs = malloc((size_t)bs * sizeof *r->offs);
        r->refs = malloc((size_t)bs * sizeof *r->refs);
        if (!r->offs || !r->refs) return fl__err(FL_ENOMEM, "fl_dataset_next: out of memory for a batch of %d", bs);
    }
    if (r->src) fl__ds_parser(ds, ds->files[r->file], &ps);
    while (n < bs) {
        if (!r->src) {
            pthread_mutex_lock(&ds->mu);
            int f = ds->next_file < ds->nfiles ? ds->next_file++ : -1;
            pthread_mutex_unlock(&ds->mu);
            if (f < 0) break;
            r->file = f;
            r->lineno = 0;
            r->counted = 0;
            FL_CHECK(fl__source_open(&r->src, ds->files[f], ds->pipe_cmd, ds->pipe_timeout));
            fl__ds_parser(ds, ds->files[f], &ps);
        }
        const char *line;
        size_t len;
        int got = fl__source_next(r->src, &line, &len);
        if (got < 0) return got;
        if (got == 0) {
            fl__source_close(r->src);
            r->src = NULL;
            note_bytes(ds, r, 0, 1);
            continue;
        }
        r->lineno++;
        size_t start = r->recs.len;
        int st = fl__parse_line(&ps, line, len, r->lineno, &r->recs);
        if (st == FL_OK) {
            r->offs[n++] = start;
        } else if (st == FL_ECORRUPT && ds->skip_bad) {
            fl__ds_note_bad(ds, &ds->log);
        } else {
            return st;
        }
    }
    if (r->src) note_bytes(ds, r, fl__source_consumed(r->src), 0);
    *count = n;
    return FL_OK;
}

int fl_dataset_next(fl_dataset *ds, int thread, fl_data_batch *b)
{
    static const char fn[] = "fl_dataset_next";
    FL_CHECK(check_ds(ds, fn));
    if (!ds->in_pass) return fl__err(FL_ESTATE, "%s: no pass in progress (call fl_dataset_begin first)", fn);
    if (thread < 0 || thread >= ds->nreaders)
        return fl__err(FL_EINVAL, "%s: thread %d out of range [0, %d)", fn, thread, ds->nreaders);
    FL_CHECK(fl__batch_check(b, ds, fn));
    fl__reader *r = &ds->readers[thread];
    if (r->done) return 0;
    if (__atomic_load_n(&ds->log.failed, __ATOMIC_ACQUIRE)) {
        fl__source_close(r->src);
        r->src = NULL;
        r->done = 1;
        return 0;
    }
    int st;
    if (ds->kind == FL__DS_INMEM) {
        size_t n = r->end - r->pos;
        if (n > (size_t)ds->batch_size) n = (size_t)ds->batch_size;
        if (n == 0) {
            r->done = 1;
            return 0;
        }
        st = fl__batch_fill(b, ds->store.recs + r->pos, (int)n);
        if (st) return reader_fail(ds, r, st);
        r->pos += n;
        __atomic_fetch_add(&ds->prog_done, (int64_t)n, __ATOMIC_RELAXED);
        return 1;
    }
    int n = 0;
    st = queue_fill(ds, r, &n);
    if (st) return reader_fail(ds, r, st);
    if (n == 0) {
        r->done = 1;
        return 0;
    }
    for (int i = 0; i < n; i++) {
        size_t e = i + 1 < n ? r->offs[i + 1] : r->recs.len;
        r->refs[i] = (fl__rec){r->recs.p + r->offs[i], e - r->offs[i]};
    }
    st = fl__batch_fill(b, r->refs, n);
    if (st) return reader_fail(ds, r, st);
    return 1;
}

int fl_dataset_progress(const fl_dataset *ds, fl_data_progress *out)
{
    FL_CHECK(check_ds(ds, "fl_dataset_progress"));
    if (!out) return fl__err(FL_EINVAL, "fl_dataset_progress: out is NULL");
    int queue = ds->kind == FL__DS_QUEUE;
    out->done = __atomic_load_n(&ds->prog_done, __ATOMIC_RELAXED);
    out->total = __atomic_load_n(&ds->prog_total, __ATOMIC_RELAXED);
    out->files_done = queue ? (int)__atomic_load_n(&ds->prog_files_done, __ATOMIC_RELAXED) : 0;
    out->files = queue ? ds->nfiles : 0;
    out->unit = queue ? "bytes" : "records";
    out->fraction = out->total > 0 ? (double)out->done / (double)out->total : (out->files_done ? 1.0 : 0.0);
    if (out->fraction > 1.0) out->fraction = 1.0;
    return FL_OK;
}
