/*
 * app_internal.h - the parts of fl_app_* shared by app.c (registry, options), app_data.c
 * (readers, metrics) and app_train.c (train, eval, infer).
 */
#ifndef FLEET_MODELS_APP_INTERNAL_H
#define FLEET_MODELS_APP_INTERNAL_H

#include "fleet/app.h"
#include "../base/base_internal.h"

/* One pass's results.  loss and metric: the mean over batches of the fetched values
 * (a cumulative metric such as the global AUC: its last value). */
typedef struct {
    int64_t instances, batches;
    double seconds, loss, metric;
} app_pass;

/* Called after each batch of an evaluation pass with the fetched tensors. */
typedef int (*app_batch_fn)(void *user, fl_tensor **fetched, int nfetch, int batch);

/* A data reader: a row of the reader table (app_data.c), chosen by fl_app_row.reader.
 * open reads (or lists) the split of dir: train 1 for training data, this worker's share
 * (rank of nranks); feeds are the program's input variables in reader order.
 * pass runs p once per batch: fetch[0] is the loss (or NULL in evaluation), fetch[1] the
 * metric; train 1 uses the trainer threads (thread, 1 for collective programs), train 0
 * one thread in file order calling fn after every batch. */
typedef struct {
    const char *name;
    int (*open)(const fl_app_config *c, const char *dir, int train, int rank, int nranks, fl_var *const *feeds, int nfeeds,
                void **st);
    int (*pass)(void *st, fl_exe *e, fl_prog *p, int train, int thread, const char *const *fetch, int nfetch, int epoch,
                app_pass *out, app_batch_fn fn, void *user);
    void (*close)(void *st);
    int64_t (*steps)(void *st, int batch_size); /* batches of one training pass (a learning-rate schedule's epoch) */
} app_reader;

/* A metric: built on predict and label into predict's program; cumulative metrics keep
 * persistable statistics (zeroed with app_metric_reset before an evaluation). */
typedef struct {
    const char *name;
    fl_var *(*build)(fl_var *predict, fl_var *label);
    int cumulative;
} app_metric;

const app_reader *fl__app_reader(const char *name);
const app_metric *fl__app_metric(const char *name);

#endif
