/* progress.h - the progress line and metrics records of a dataset pass (progress.c). */
#ifndef FL_PROGRESS_H
#define FL_PROGRESS_H

#include <pthread.h>

#include "exec_internal.h"
#include "fleet/metrics.h"

#define FL__REPORT_MAX_FETCH 16

typedef struct {
    double sum[FL__REPORT_MAX_FETCH], last[FL__REPORT_MAX_FETCH];
    double weight;
} fl__report_acc;

typedef struct {
    fl__exe_metrics *x;
    fl_metrics *m; /* borrowed from the executor; NULL: none */
    fl_dataset *ds;
    const fl_tensor *lr; /* NULL: the program has no update op */
    int nfetch, print_period, train, tty, warned;
    char label[FL__REPORT_MAX_FETCH][64]; /* as shown */
    char tag[FL__REPORT_MAX_FETCH][64];   /* as written to the metrics files */
    int cumulative[FL__REPORT_MAX_FETCH];
    double t0, win_t0, last_print;
    pthread_mutex_t mu; /* the rest */
    int64_t batches, examples, win_examples;
    fl__report_acc win, epoch;
} fl__report;

/* Opens the executor's metrics writer if needed (an error when FLEET_METRICS_DIR cannot be
 * opened) and prepares the labels; fetch names nfetch <= 16 variables of p. */
int fl__report_begin(fl__report *r, fl_exe *e, fl_prog *p, fl_dataset *ds, const char *const *fetch,
                     const char *const *info, int nfetch, int print_period, int train);
/* One batch of any thread: its fetched values (scalars or tensor means) and examples. */
void fl__report_batch(fl__report *r, const double *vals, int examples);
/* After the threads joined: the final line, the epoch's records (ok: the pass succeeded),
 * the executor's epoch and step counts. */
void fl__report_end(fl__report *r, int ok, double seconds);

#endif
