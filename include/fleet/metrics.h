/*
 * fleet/metrics.h - training metrics written to files, per rank: a CSV file and TensorBoard
 * event files.
 *
 * A metrics writer owns one directory shared by every rank of a job.  Rank R writes
 *
 *   <dir>/metrics.rank<R>.csv     wall_time,rank,epoch,step,tag,value   (one scalar a line)
 *   <dir>/rank<R>/events.out.tfevents.<unix time>.<host>.<pid>        (TensorBoard)
 *
 * so `tensorboard --logdir <dir>` shows one run per rank and scripts/plot-metrics.sh turns
 * the CSV files into a PNG.  A CSV file that exists is appended to (a restarted job goes on
 * in the same file; its header is written once); each writer starts a new event file.
 *
 * fl_exe_train_from_dataset writes its metrics when the executor has a writer
 * (fl_exe_set_metrics) or, when none was set, when the environment variable
 * FLEET_METRICS_DIR names a directory: every print_period batches the fetched values under
 * their fetch_info labels (loss, auc, ...), examples_per_s and lr at the process's global
 * step, and after each pass the same under epoch/<label> at the pass's epoch number
 * (docs/metrics.md).  Programs with their own loop call fl_metrics_scalar.
 *
 * This is not a metrics server: nothing is sent anywhere, and ranks never talk to each
 * other about metrics.  A writer is used by one thread at a time.
 */
#ifndef FLEET_METRICS_H
#define FLEET_METRICS_H

#include "fleet/exec.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fl_metrics fl_metrics;

typedef struct {
    /* The rank in the file names; < 0 (the default): the process's rank, as fleet_init set
     * it for the log (fl_log_set_identity), else PADDLE_TRAINER_ID, else 0. */
    int rank;
    /* Comma list of the formats to write: "csv", "tensorboard" (NULL: both). */
    const char *formats;
} fl_metrics_opts;

FL_API fl_metrics_opts fl_metrics_opts_default(void);

/* Creates dir (and dir/rank<R>/ for TensorBoard) as needed and opens this rank's files.
 * opts may be NULL (the defaults).  NULL with the error (naming the file) on failure. */
FL_API fl_metrics *fl_metrics_open(const char *dir, const fl_metrics_opts *opts);
/* Opens a writer on $FLEET_METRICS_DIR with the defaults; *out is NULL (FL_OK) when the
 * variable is unset or empty. */
FL_API int fl_metrics_open_env(fl_metrics **out);
/* Flushes and closes; returns the first write error of the writer's life (FL_EIO naming
 * the file), FL_OK otherwise.  NULL is ignored. */
FL_API int fl_metrics_close(fl_metrics *m);

/* One scalar: tag (letters, digits, '_', '-', '.', '/'; at most 128 bytes), the global
 * step it belongs to (>= 0) and the epoch (>= 0, or -1: none).  Buffered: visible in the
 * files after fl_metrics_flush (fl_exe_train_from_dataset flushes after each group). */
FL_API int fl_metrics_scalar(fl_metrics *m, const char *tag, int64_t step, int epoch, double value);
FL_API int fl_metrics_flush(fl_metrics *m);
FL_API int fl_metrics_rank(const fl_metrics *m);
/* The directory given at open (owned by m). */
FL_API const char *fl_metrics_dir(const fl_metrics *m);

/* Makes e write its training metrics into dir (see above); dir NULL switches metrics off,
 * FLEET_METRICS_DIR included.  The executor owns the writer it opens and closes it in
 * fl_exe_free or at the next call.  opts may be NULL. */
FL_API int fl_exe_set_metrics(fl_exe *e, const char *dir, const fl_metrics_opts *opts);
/* *out: the executor's writer (borrowed; NULL when metrics are off), opening
 * FLEET_METRICS_DIR's on first use when none was set.  An error when that open fails. */
FL_API int fl_exe_get_metrics(fl_exe *e, fl_metrics **out);

#ifdef __cplusplus
}
#endif
#endif
