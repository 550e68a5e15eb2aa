/*
 * load.c - InMemoryDataset loading: load_into_memory parses the file list with thread_num
 * threads (files handed out one at a time), each file into its own run of ~4 MiB chunks;
 * the runs are appended to the store in file-list order, so the order of records after a
 * load does not depend on thread timing and shuffles are reproducible.  A load appends to
 * what is already held.  preload_into_memory runs the same load on a background thread.
 */
#include <stdio.h>
#include <stdlib.h>

#include "data_internal.h"

typedef struct {
    fl_dataset *ds;
    fl__store_builder *out; /* one per file */
    fl__pass_log *lg;
    int next; /* atomic */
} load_job;

static int stopped(const load_job *j)
{
    return __atomic_load_n(&j->ds->cancel, __ATOMIC_RELAXED) || __atomic_load_n(&j->lg->failed, __ATOMIC_ACQUIRE);
}

static int load_file(load_job *j, int f)
{
    fl_dataset *ds = j->ds;
    fl__store_builder *b = &j->out[f];
    fl__source *src = NULL;
    fl__parser ps;
    fl__ds_parser(ds, ds->files[f], &ps);
    FL_CHECK(fl__source_open(&src, ds->files[f], ds->pipe_cmd, ds->pipe_timeout));
    fl__source_set_cancel(src, &ds->cancel);
    int st = FL_OK;
    int64_t ln = 0;
    for (;;) {
        const char *line;
        size_t len;
        int got = fl__source_next(src, &line, &len);
        if (got <= 0) {
            st = got;
            break;
        }
        ln++;
        if ((ln & 4095) == 0 && stopped(j)) break;
        size_t start = b->cur.len;
        st = fl__parse_line(&ps, line, len, ln, &b->cur);
        if (st == FL_OK) {
            FL_CHECK_GOTO(fl__builder_commit(b, start), st, out);
        } else if (st == FL_ECORRUPT && ds->skip_bad) {
            fl__ds_note_bad(ds, j->lg);
            st = FL_OK;
        } else {
            break;
        }
    }
    if (st == FL_OK) st = fl__builder_seal(b);
out:
    fl__source_close(src);
    return st;
}

static void *load_main(void *arg)
{
    load_job *j = arg;
    for (;;) {
        int f = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED);
        if (f >= j->ds->nfiles || stopped(j)) break;
        int st = load_file(j, f);
        if (st) fl__ds_note_error(j->ds, j->lg, st);
    }
    return NULL;
}

int fl__ds_load(fl_dataset *ds)
{
    int nf = ds->nfiles, nt = fl__ds_nthreads(ds), st = FL_OK;
    if (nf == 0) {
        FL_WARN(FL_SUB_DATA, "load_into_memory: the file list is empty; nothing loaded");
        __atomic_store_n(&ds->last_bad, 0, __ATOMIC_RELAXED);
        return FL_OK;
    }
    fl__pass_log lg;
    fl__pass_log_reset(&lg);
    load_job j = {ds, calloc((size_t)nf, sizeof(fl__store_builder)), &lg, 0};
    pthread_t *thr = calloc((size_t)nt, sizeof *thr);
    if (!j.out || !thr) {
        free(j.out);
        free(thr);
        return fl__err(FL_ENOMEM, "load_into_memory: out of memory");
    }
    double t0 = fl__now();
    int started = 0;
    for (; started < nt - 1; started++)
        if (pthread_create(&thr[started], NULL, load_main, &j) != 0) break;
    load_main(&j); /* the calling thread is one of the loaders */
    for (int i = 0; i < started; i++) pthread_join(thr[i], NULL);
    free(thr);
    st = fl__pass_log_finish(ds, &lg, "load_into_memory");
    if (st == FL_OK && __atomic_load_n(&ds->cancel, __ATOMIC_RELAXED))
        st = fl__err(FL_ESTATE, "load_into_memory: cancelled (the dataset is being freed or released)");
    size_t before = ds->store.nrec;
    if (st == FL_OK) {
        pthread_mutex_lock(&ds->mu);
        for (int f = 0; f < nf && st == FL_OK; f++) st = fl__store_append(&ds->store, &j.out[f].st);
        pthread_mutex_unlock(&ds->mu);
    }
    for (int f = 0; f < nf; f++) fl__builder_free(&j.out[f]);
    free(j.out);
    if (st == FL_OK)
        FL_INFO(FL_SUB_DATA, "load_into_memory: %zu records from %d files with %d threads in %.3f s (%zu held)",
                ds->store.nrec - before, nf, nt, fl__now() - t0, ds->store.nrec);
    return st;
}

static int check_loadable(fl_dataset *ds, const char *fn)
{
    if (!ds || ds->magic != FL_DATASET_MAGIC) return fl__err_handle(ds, "%s: dataset is NULL or invalid", fn);
    if (ds->kind != FL__DS_INMEM)
        return fl__err(FL_EINVAL, "%s: only an InMemoryDataset loads into memory (this is a QueueDataset)", fn);
    if (ds->in_pass) return fl__err(FL_ESTATE, "%s: a pass is in progress (call fl_dataset_end first)", fn);
    if (ds->preloading)
        return fl__err(FL_ESTATE, "%s: a preload is in progress (call fl_dataset_wait_preload_done first)", fn);
    if (!ds->nslots) return fl__err(FL_EINVAL, "%s: no slots (call fl_dataset_set_use_var first)", fn);
    return fl__check_layout(fn, ds->fmt, ds->slots, ds->nslots);
}

int fl_dataset_load_into_memory(fl_dataset *ds)
{
    FL_CHECK(check_loadable(ds, "fl_dataset_load_into_memory"));
    return fl__ds_load(ds);
}

static void *preload_main(void *arg)
{
    fl_dataset *ds = arg;
    int st = fl__ds_load(ds);
    ds->preload_status = st;
    snprintf(ds->preload_msg, sizeof ds->preload_msg, "%s", st ? fl_last_error() : "");
    return NULL;
}

int fl_dataset_preload_into_memory(fl_dataset *ds)
{
    FL_CHECK(check_loadable(ds, "fl_dataset_preload_into_memory"));
    ds->cancel = 0;
    ds->preload_status = FL_OK;
    if (pthread_create(&ds->preload_thr, NULL, preload_main, ds) != 0)
        return fl__err(FL_EIO, "fl_dataset_preload_into_memory: cannot start a thread");
    ds->preloading = 1;
    return FL_OK;
}

int fl_dataset_wait_preload_done(fl_dataset *ds)
{
    if (!ds || ds->magic != FL_DATASET_MAGIC)
        return fl__err_handle(ds, "fl_dataset_wait_preload_done: dataset is NULL or invalid");
    if (!ds->preloading)
        return fl__err(FL_ESTATE, "fl_dataset_wait_preload_done: no preload in progress "
                                  "(call fl_dataset_preload_into_memory first)");
    pthread_join(ds->preload_thr, NULL);
    ds->preloading = 0;
    if (ds->preload_status) return fl__err(ds->preload_status, "%s", ds->preload_msg);
    return FL_OK;
}

void fl_dataset_release_memory(fl_dataset *ds)
{
    if (!ds || ds->magic != FL_DATASET_MAGIC) return;
    if (ds->in_pass) {
        FL_ERROR(FL_SUB_DATA, "fl_dataset_release_memory: a pass is in progress; nothing released");
        return;
    }
    if (ds->preloading) { /* stop the load, then free what it had */
        __atomic_store_n(&ds->cancel, 1, __ATOMIC_RELAXED);
        pthread_join(ds->preload_thr, NULL);
        ds->preloading = 0;
        ds->cancel = 0;
    }
    pthread_mutex_lock(&ds->mu);
    fl__store_free(&ds->store);
    pthread_mutex_unlock(&ds->mu);
}

int64_t fl_dataset_get_memory_data_size(const fl_dataset *ds)
{
    if (!ds || ds->magic != FL_DATASET_MAGIC) {
        fl__err_handle(ds, "fl_dataset_get_memory_data_size: dataset is NULL or invalid");
        return 0;
    }
    fl_dataset *m = (fl_dataset *)ds; /* the mutex only; a preload may be appending */
    pthread_mutex_lock(&m->mu);
    int64_t n = (int64_t)ds->store.nrec;
    pthread_mutex_unlock(&m->mu);
    return n;
}
