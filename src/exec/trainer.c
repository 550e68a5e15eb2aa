/*
 * trainer.c - train_from_dataset / infer_from_dataset: Hogwild trainer threads, as
 * Paddle's MultiTrainer + HogwildWorker.
 *
 * Thread t reads shares t, t + n, ... of the dataset (fl_dataset_next) and runs the
 * program on its own executor over a child scope of the caller's scope, so activations are
 * private and persistables (found in the root scope by the executor) are shared.  Thread 0
 * is the calling thread; threads 1..n-1 are spawned for the pass and joined before
 * returning.  A failing thread raises a shared stop flag that the others check between
 * batches, so a pass ends promptly with the first error.
 *
 * Divergence: in a training pass every fetched value (the loss, typically) is checked after
 * each batch.  A non-finite one, or one whose magnitude exceeds FLEET_DIVERGENCE_BOUND
 * (src/base/env.c; default 0: no bound), is a warning naming the step, the thread's batch
 * and the variable (once per variable and pass), and a summary at the end of the pass;
 * with FLEET_DIVERGENCE_STOP=1 the pass stops there with FL_EINVAL and the same words.
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "exec_internal.h"
#include "progress.h"
#include "../tensor/tensor_internal.h"

#define MAX_FETCH 16

typedef struct pass pass;

typedef struct {
    pass *ps;
    int t;
    pthread_t th;
    int started;
} worker;

struct pass {
    fl_exe *e;
    fl_prog *p;
    fl_dataset *ds;
    int nthreads, nshares, nfetch, print_period, train;
    const char *const *fetch;
    const char *const *info;
    const char *fn;
    atomic_int stop;
    atomic_llong instances, batches;
    double t0;
    fl__report rep;     /* progress line and metrics (progress.c) */
    fl__tgroup group;   /* the trainer threads, for kernels that meet once per step */
    pthread_mutex_t mu; /* first error */
    int err;
    char msg[1024];
    fl_exe_dataset_stats *stats;
    double div_bound;                  /* FLEET_DIVERGENCE_BOUND (0: none) */
    int div_stop;                      /* FLEET_DIVERGENCE_STOP */
    atomic_llong div_count[MAX_FETCH]; /* batches whose value diverged, per fetch */
    atomic_llong div_first[MAX_FETCH]; /* step of the first (0: none yet) */
};

static void fail(pass *ps, int t, int64_t batch, int st)
{
    pthread_mutex_lock(&ps->mu);
    if (!ps->err) {
        ps->err = st;
        snprintf(ps->msg, sizeof ps->msg, "%s: thread %d, batch %lld: %s", ps->fn, t, (long long)batch, fl_last_error());
    }
    pthread_mutex_unlock(&ps->mu);
    atomic_store(&ps->stop, 1);
}

/* "label (name)" of fetch i, or its name when it has no other label. */
static void fetch_label(const pass *ps, int i, char *buf, size_t cap)
{
    if (ps->info && ps->info[i] && strcmp(ps->info[i], ps->fetch[i]))
        snprintf(buf, cap, "%s (%s)", ps->info[i], ps->fetch[i]);
    else snprintf(buf, cap, "%s", ps->fetch[i]);
}

/* Checks the fetched values of one training batch (step: the process's batch count);
 * returns 0, or FL_EINVAL (the pass's error set) when FLEET_DIVERGENCE_STOP asks to stop. */
static int check_divergence(pass *ps, int t, int64_t batch, long long step, const double *vals)
{
    for (int i = 0; i < ps->nfetch; i++) {
        double v = vals[i];
        if (isfinite(v) && !(ps->div_bound > 0 && fabs(v) > ps->div_bound)) continue;
        char why[96];
        char var[160];
        fetch_label(ps, i, var, sizeof var);
        if (!isfinite(v)) snprintf(why, sizeof why, "is %g", v);
        else snprintf(why, sizeof why, "is %g, beyond FLEET_DIVERGENCE_BOUND=%g", v, ps->div_bound);
        long long zero = 0;
        int first = atomic_compare_exchange_strong(&ps->div_first[i], &zero, step);
        atomic_fetch_add(&ps->div_count[i], 1);
        if (ps->div_stop) {
            fl__err(FL_EINVAL, "training diverged at step %lld: '%s' %s (FLEET_DIVERGENCE_STOP=1 stops the pass)", step,
                    var, why);
            fail(ps, t, batch, FL_EINVAL);
            return FL_EINVAL;
        }
        if (first)
            FL_WARN(FL_SUB_EXEC,
                    "%s: training diverges: step %lld (thread %d, batch %lld): '%s' %s; set FLEET_DIVERGENCE_STOP=1 to "
                    "stop the pass with an error",
                    ps->fn, step, t, (long long)batch, var, why);
    }
    return FL_OK;
}

/* The end-of-pass summary of check_divergence's findings. */
static void report_divergence(pass *ps)
{
    long long total = atomic_load(&ps->batches);
    for (int i = 0; i < ps->nfetch; i++) {
        long long n = atomic_load(&ps->div_count[i]);
        char var[160];
        fetch_label(ps, i, var, sizeof var);
        if (n)
            FL_WARN(FL_SUB_EXEC,
                    "%s: '%s' was non-finite or beyond the bound in %lld of %lld batches (first at step %lld): the "
                    "model is likely useless",
                    ps->fn, var, n, total, (long long)atomic_load(&ps->div_first[i]));
    }
}

static double value_of(const fl_tensor *t)
{
    if (!t || t->numel == 0) return 0.0;
    double s = 0;
    for (int64_t i = 0; i < t->numel; i++) {
        switch (t->dtype) {
        case FL_FLOAT32: s += ((const float *)t->data)[i]; break;
        case FL_FLOAT64: s += ((const double *)t->data)[i]; break;
        case FL_INT64: s += (double)((const int64_t *)t->data)[i]; break;
        case FL_INT32: s += ((const int32_t *)t->data)[i]; break;
        default: return 0.0;
        }
    }
    return s / (double)t->numel;
}

static void run_thread(pass *ps, int t)
{
    fl_scope *sc = fl_scope_create(fl_exe_scope(ps->e));
    fl_exe *ex = sc ? fl_exe_create(sc) : NULL;
    fl_data_batch *b = ex ? fl_data_batch_create(ps->ds) : NULL;
    int nslots = b ? fl_data_batch_num_slots(b) : 0;
    fl_feed *feed = b ? calloc((size_t)nslots + 1, sizeof *feed) : NULL;
    int64_t batch = 0;
    fl__tgroup_enter(&ps->group);
    if (!feed) {
        fail(ps, t, 0, fl_last_status() ? fl_last_status() : FL_ENOMEM);
        goto out;
    }
    fl_tensor *out[MAX_FETCH];
    double vals[MAX_FETCH];
    /* thread t reads the dataset's shares t, t + n, ... (fewer threads than readers still
     * read everything) */
    int share = t;
    while (!atomic_load(&ps->stop) && share < ps->nshares) {
        int r = fl_dataset_next(ps->ds, share, b);
        if (r == 0) {
            share += ps->nthreads;
            continue;
        }
        if (r < 0) {
            fail(ps, t, batch, r);
            break;
        }
        for (int i = 0; i < nslots; i++) feed[i] = (fl_feed){fl_data_batch_name(b, i), fl_data_batch_tensor(b, i)};
        int st = fl_exe_run(ex, ps->p, feed, nslots, ps->fetch, ps->nfetch, out);
        if (st != FL_OK) {
            fail(ps, t, batch, st);
            break;
        }
        batch++;
        atomic_fetch_add(&ps->instances, fl_data_batch_size(b));
        long long step = atomic_fetch_add(&ps->batches, 1) + 1;
        for (int i = 0; i < ps->nfetch; i++) vals[i] = value_of(out[i]);
        if (ps->train && check_divergence(ps, t, batch, step, vals)) break;
        if (t == 0 && ps->nfetch && ps->stats) {
            ps->stats->nfetch = ps->nfetch;
            memcpy(ps->stats->fetch, vals, sizeof(double) * (size_t)ps->nfetch);
        }
        fl__report_batch(&ps->rep, vals, fl_data_batch_size(b));
    }
out:
    fl__tgroup_leave(&ps->group);
    free(feed);
    fl_data_batch_free(b);
    fl_exe_free(ex);
    fl_scope_free(sc);
}

static void *thread_main(void *arg)
{
    worker *w = arg;
    run_thread(w->ps, w->t);
    return NULL;
}

/* An op marked single_trainer (collective and synchronous parameter-server ops) counts
 * one step per process: such programs train with one thread.  Its index, or -1. */
static int single_trainer_op(const fl_prog *p)
{
    for (int i = 0; i < p->nops; i++)
        if (fl__attr_i(p->ops[i], "single_trainer", 0)) return i;
    return -1;
}

/* Trainer threads for a pass: `thread` (<= 0: the dataset's readers, or 1 for a program
 * with a single_trainer op), at most the dataset's `avail` readers.  An explicit count
 * above 1 for a single_trainer program is an error saying what to set. */
static int choose_threads(const fl_prog *p, int thread, int avail, const char *fn, int *n)
{
    int one = single_trainer_op(p);
    if (thread <= 0 && one >= 0 && avail > 1) {
        FL_INFO(FL_SUB_EXEC,
                "%s: op '%s' exchanges one step per process: training with 1 thread (the dataset has %d "
                "readers; each thread reads their shares in turn)",
                fn, p->ops[one]->def->type, avail);
        thread = 1;
    }
    *n = thread > 0 && thread < avail ? thread : avail;
    if (thread > avail)
        FL_INFO(FL_SUB_EXEC, "%s: %d threads asked, the dataset has %d readers: training with %d", fn, thread, avail,
                avail);
    if (*n > 1 && one >= 0)
        return fl__err(FL_EINVAL,
                       "%s: op '%s' exchanges one step per process (collective or synchronous parameter-server "
                       "training), so the program trains with one thread per process; got %d threads: pass thread 1 "
                       "(or 0 to choose it)",
                       fn, p->ops[one]->def->type, *n);
    return FL_OK;
}

static int run_pass(fl_exe *e, fl_prog *p, fl_dataset *ds, int thread, const char *const *fetch_list,
                    const char *const *fetch_info, int nfetch, int print_period, fl_exe_dataset_stats *stats, int train,
                    const char *fn)
{
    if (!e || !fl_exe_scope(e)) return fl__err_handle(e, "%s: executor is NULL or invalid", fn);
    if (!p || p->magic != FL_PROG_MAGIC) return fl__err_handle(p, "%s: program is NULL or invalid", fn);
    if (!ds) return fl__err(FL_EINVAL, "%s: dataset is NULL", fn);
    if (nfetch < 0 || nfetch > MAX_FETCH || (nfetch && !fetch_list))
        return fl__err(FL_EINVAL, "%s: fetch list of %d variables (at most %d)", fn, nfetch, MAX_FETCH);
    if (print_period < 0) return fl__err(FL_EINVAL, "%s: print_period must be >= 0, got %d", fn, print_period);
    int avail = fl_dataset_thread_num(ds);
    if (avail < 1) return fl__err(FL_EINVAL, "%s: the dataset has no file list or no reader threads", fn);
    int n;
    FL_CHECK(choose_threads(p, thread, avail, fn, &n));
    if (train) fl__untrained_warn(e, p, fn);
    if (stats) memset(stats, 0, sizeof *stats);
    pass ps = {.e = e,
               .p = p,
               .ds = ds,
               .nthreads = n,
               .nshares = avail,
               .nfetch = nfetch,
               .print_period = print_period,
               .train = train,
               .fetch = fetch_list,
               .info = fetch_info,
               .fn = fn,
               .stats = stats};
    atomic_init(&ps.stop, 0);
    atomic_init(&ps.instances, 0);
    atomic_init(&ps.batches, 0);
    for (int i = 0; i < MAX_FETCH; i++) {
        atomic_init(&ps.div_count[i], 0);
        atomic_init(&ps.div_first[i], 0);
    }
    int64_t dstop = 0;
    if (train && (fl__env_double("FLEET_DIVERGENCE_BOUND", 0.0, &ps.div_bound) ||
                  fl__env_int("FLEET_DIVERGENCE_STOP", 0, 0, 1, &dstop)))
        return fl__err(FL_EINVAL, "%s: %s", fn, fl_last_error());
    if (!(ps.div_bound >= 0.0))
        return fl__err(FL_EINVAL, "%s: FLEET_DIVERGENCE_BOUND must be a number >= 0 (0: no bound), got %g", fn,
                       ps.div_bound);
    ps.div_stop = (int)dstop;
    pthread_mutex_init(&ps.mu, NULL);
    fl__tgroup_init(&ps.group, n);
    worker *ws = calloc((size_t)n, sizeof *ws);
    if (!ws) {
        fl__tgroup_destroy(&ps.group);
        pthread_mutex_destroy(&ps.mu);
        return fl__err(FL_ENOMEM, "%s: out of memory", fn);
    }
    int st = fl__report_begin(&ps.rep, e, p, ds, fetch_list, fetch_info, nfetch, print_period, train);
    if (st != FL_OK) {
        free(ws);
        fl__tgroup_destroy(&ps.group);
        pthread_mutex_destroy(&ps.mu);
        return fl__err(st, "%s: %s", fn, fl_last_error());
    }
    st = fl_dataset_begin(ds);
    if (st != FL_OK) {
        fl__report_end(&ps.rep, 0, 0);
        free(ws);
        fl__tgroup_destroy(&ps.group);
        pthread_mutex_destroy(&ps.mu);
        return fl__err(st, "%s: %s", fn, fl_last_error());
    }
    int blas = n > 1 ? fl__blas_single_begin() : 0;
    ps.t0 = fl__now();
    for (int t = 1; t < n; t++) {
        ws[t] = (worker){&ps, t, 0, 0};
        if (pthread_create(&ws[t].th, NULL, thread_main, &ws[t]) != 0) {
            fl__err(FL_ENOMEM, "could not start trainer thread %d", t);
            fail(&ps, t, 0, FL_ENOMEM);
            for (int u = t; u < n; u++) fl__tgroup_leave(&ps.group); /* never entered */
            break;
        }
        ws[t].started = 1;
    }
    if (!atomic_load(&ps.stop)) run_thread(&ps, 0);
    else fl__tgroup_leave(&ps.group); /* thread 0 never entered */
    for (int t = 1; t < n; t++)
        if (ws[t].started) pthread_join(ws[t].th, NULL);
    if (n > 1) fl__blas_single_end(blas);
    double el = fl__now() - ps.t0;
    if (train && !ps.div_stop) report_divergence(&ps);
    int est = fl_dataset_end(ds);
    fl__report_end(&ps.rep, !ps.err && est == FL_OK, el);
    if (stats) {
        stats->instances = atomic_load(&ps.instances);
        stats->batches = atomic_load(&ps.batches);
        stats->seconds = el;
    }
    free(ws);
    fl__tgroup_destroy(&ps.group);
    pthread_mutex_destroy(&ps.mu);
    if (ps.err) return fl__err(ps.err, "%s", ps.msg);
    if (est != FL_OK) return fl__err(est, "%s: %s", fn, fl_last_error());
    return FL_OK;
}

int fl_exe_train_from_dataset(fl_exe *e, fl_prog *p, fl_dataset *ds, int thread, const char *const *fetch_list,
                              const char *const *fetch_info, int nfetch, int print_period, fl_exe_dataset_stats *stats)
{
    return run_pass(e, p, ds, thread, fetch_list, fetch_info, nfetch, print_period, stats, 1, "fl_exe_train_from_dataset");
}

int fl_exe_infer_from_dataset(fl_exe *e, fl_prog *p, fl_dataset *ds, int thread, const char *const *fetch_list,
                              const char *const *fetch_info, int nfetch, int print_period, fl_exe_dataset_stats *stats)
{
    return run_pass(e, p, ds, thread, fetch_list, fetch_info, nfetch, print_period, stats, 0, "fl_exe_infer_from_dataset");
}
