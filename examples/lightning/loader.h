/*
 * loader.h - the lightning example's data loader: Fashion-MNIST IDX files (examples/fmnist/idx.h)
 * in batches of configs.batch_size, this trainer's share (every n-th image of a fixed shuffle
 * per epoch, as examples/fmnist/train.h), at most configs.max_steps batches per epoch when it
 * is set.  Header-only, as the other examples' helpers.
 *
 *   loader *ld = load_fmnist_from_dir(dir, &configs, fleet);
 *   for (fl_feed *data; (data = loader_next(ld));) ... exe.run(feed=data) ...
 */
#ifndef LIGHTNING_LOADER_H
#define LIGHTNING_LOADER_H

#include <fleet.h>
#include <stdio.h>
#include <stdlib.h>

#include "../fmnist/idx.h"

typedef struct {
    fmnist_split d;
    int64_t *all, *perm, shard, batch, steps, step;
    int rank, nranks, epoch;
    uint64_t seed;
    fl_tensor *x, *y;
    fl_feed feed[2];
} loader;

/* Reads DIR/train-*-ubyte[.gz] (NULL or "": $FMNIST_DIR or Debian's dataset-fashion-mnist).
 * Prints the error and returns NULL on failure. */
static loader *load_fmnist_from_dir(const char *dir, const fl_app_config *configs, fleet_t *fleet)
{
    loader *ld = calloc(1, sizeof *ld);
    char err[8192];
    if (!ld || fmnist_load(fmnist_dir(dir), "train", &ld->d, err, sizeof err)) {
        fprintf(stderr, "%s\n", ld ? err : "out of memory");
        free(ld);
        return NULL;
    }
    ld->rank = fleet_worker_index(fleet);
    ld->nranks = fleet_worker_num(fleet);
    ld->batch = configs->batch_size;
    ld->seed = configs->seed;
    ld->shard = (ld->d.n + ld->nranks - 1) / ld->nranks;
    ld->steps = (ld->shard + ld->batch - 1) / ld->batch;
    if (configs->max_steps && ld->steps > configs->max_steps) ld->steps = configs->max_steps;
    ld->all = malloc((size_t)ld->d.n * sizeof *ld->all);
    ld->perm = malloc((size_t)ld->shard * sizeof *ld->perm);
    ld->x = fl_tensor_create(FL_FLOAT32, 4, (const int64_t[]){ld->batch, 1, FMNIST_ROWS, FMNIST_COLS});
    ld->y = fl_tensor_create(FL_INT64, 2, (const int64_t[]){ld->batch, 1});
    ld->step = ld->steps; /* the first call starts epoch 0 */
    ld->epoch = -1;
    return ld->all && ld->perm && ld->x && ld->y ? ld : NULL;
}

/* The next batch as feeds {"img", "label"}, or NULL at the end of an epoch (the following
 * call starts the next one). */
static fl_feed *loader_next(loader *ld)
{
    if (ld->step == ld->steps) { /* a new epoch: its shuffle, this trainer's share */
        ld->step = 0;
        fmnist_shuffle(ld->all, ld->d.n, ld->seed + (uint64_t)++ld->epoch);
        for (int64_t k = 0; k < ld->shard; k++) ld->perm[k] = ld->all[(ld->rank + k * ld->nranks) % ld->d.n];
        if (ld->epoch > 0) return NULL;
    }
    int64_t lo = ld->step++ * ld->batch, b = ld->shard - lo < ld->batch ? ld->shard - lo : ld->batch;
    if (fmnist_gather(&ld->d, ld->perm + lo, b, 1, ld->x, ld->y)) return NULL;
    ld->feed[0] = (fl_feed){"img", ld->x};
    ld->feed[1] = (fl_feed){"label", ld->y};
    return ld->feed;
}

static void loader_free(loader *ld)
{
    if (!ld) return;
    fmnist_free(&ld->d);
    free(ld->all);
    free(ld->perm);
    fl_tensor_free(ld->x);
    fl_tensor_free(ld->y);
    free(ld);
}

#endif
