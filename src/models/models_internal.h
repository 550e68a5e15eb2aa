/*
 * models_internal.h - helpers shared by the model files of src/models/ (not exported).
 */
#ifndef FL_MODELS_INTERNAL_H
#define FL_MODELS_INTERNAL_H

#include "fleet/models.h"

/* A MultiSlot dataset of kind (NULL: QueueDataset; an InMemoryDataset is loaded) over
 * files with the slots use_var.  NULL + fl_last_error() on failure. */
fl_dataset *fl__model_dataset(fl_var *const *use_var, int n, const char *kind, int batch_size, int thread,
                              const char *const *files, int nfiles);
/* Runs test once per batch of ds (one reader thread), feeding the batch's slots by name and
 * fetching fetch[0..nfetch) (at most 8); fn(user, fetched) sees each batch's results. */
int fl__model_eval_loop(fl_exe *exe, fl_prog *test, fl_dataset *ds, const char *const *fetch, int nfetch,
                        int (*fn)(void *user, fl_tensor **out), void *user);

#endif
