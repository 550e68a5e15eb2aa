/*
 * train.h - the training program shared by the Fashion-MNIST examples: options, data,
 * shards, the epochs and the test-set score.  Each program (train_mlp.c, train_cnn.c) is
 * only its model and its options: it fills an fmnist_model and calls fmnist_train_main().
 *
 * Momentum (--lr, default 0.01; --momentum, default 0.9), --batch per trainer (default 64;
 * global batch = trainers x batch), --epochs (default 1), then the test accuracy on the
 * 10,000 test images after each epoch.  Data: see idx.h, pixels scaled to [0, 1].  Each
 * epoch shuffles the training set with a fixed permutation (seed S + epoch, S = 0 by
 * default); trainer r of n takes every n-th sample of it (perm[r::n], as the PyTorch
 * reference does), padded by wrapping round when n does not divide the set, so every
 * trainer runs the same number of steps.  Epoch time runs from a barrier before the first
 * step to the last step of the slowest trainer (data loading excluded, as in the
 * reference); samples/s = training images / epoch time.  The test set is evaluated by a
 * program cloned for test before minimize.  --dump PATH: after training, the first worker (or
 * the single process) writes the parameters to PATH as safetensors (one tensor per
 * parameter, by name), for comparing a distributed run with a local one.  --metrics_dir DIR
 * (or FLEET_METRICS_DIR): each trainer writes its loss every 50 steps and per epoch, its
 * samples/s, the learning rate and the test accuracy to DIR/metrics.rank<R>.csv and
 * TensorBoard files in DIR/rank<R>/ (include/fleet/metrics.h; scripts/plot-metrics.sh DIR).
 *
 * A single-machine loop: the lines marked "+" make it data-parallel under fleetrun, and
 * without fleetrun it trains as one local worker.
 *
 * Header-only (static functions), as idx.h, so each example stays one translation unit.
 */
#ifndef FMNIST_TRAIN_H
#define FMNIST_TRAIN_H

#include <fleet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "idx.h"

/* ---- clock and command line ------------------------------------------------------------------ */

static inline double fmnist_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct {
    const char *data;        /* --data DIR (NULL: $FMNIST_DIR or the default) */
    int epochs;              /* --epochs N (1) */
    int64_t batch;           /* --batch N per trainer (64) */
    float lr, momentum;      /* --lr F (0.01), --momentum F (0.9) */
    uint64_t seed;           /* --seed S (0) */
    int batch_norm;          /* --batch_norm, when allowed */
    const char *dump;        /* --dump PATH: the parameters after training (NULL: none) */
    const char *metrics_dir; /* --metrics_dir DIR (NULL: $FLEET_METRICS_DIR or none) */
} fmnist_opts;

/* Parses the examples' options into *o (defaults first).  Returns -1 to go on, or the exit
 * status (0 after --help, 2 on a usage error, with the message printed). */
static inline int fmnist_parse_args(int argc, char **argv, int allow_batch_norm, void (*usage)(const char *),
                                    fmnist_opts *o)
{
    *o = (fmnist_opts){NULL, 1, 64, 0.01f, 0.9f, 0, 0, NULL, NULL};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(argv[0]);
            return 0;
        }
        if (allow_batch_norm && !strcmp(a, "--batch_norm")) {
            o->batch_norm = 1;
            continue;
        }
        if (!v) {
            fprintf(stderr, "%s: %s needs a value\n", argv[0], a);
            usage(argv[0]);
            return 2;
        }
        i++;
        if (!strcmp(a, "--data")) o->data = v;
        else if (!strcmp(a, "--epochs")) o->epochs = (int)strtol(v, &end, 10);
        else if (!strcmp(a, "--batch")) o->batch = strtoll(v, &end, 10);
        else if (!strcmp(a, "--lr")) o->lr = strtof(v, &end);
        else if (!strcmp(a, "--momentum")) o->momentum = strtof(v, &end);
        else if (!strcmp(a, "--seed")) o->seed = strtoull(v, &end, 10);
        else if (!strcmp(a, "--dump")) o->dump = v;
        else if (!strcmp(a, "--metrics_dir")) o->metrics_dir = v;
        else {
            fprintf(stderr, "%s: unknown option %s\n", argv[0], a);
            usage(argv[0]);
            return 2;
        }
        if (end && (*end || end == v)) {
            fprintf(stderr, "%s: %s: '%s' is not a number\n", argv[0], a, v);
            return 2;
        }
        if (o->epochs < 1 || o->batch < 1 || !(o->lr > 0) || o->momentum < 0) {
            fprintf(stderr, "%s: %s %s is out of range\n", argv[0], a, v);
            return 2;
        }
    }
    return -1;
}

/* ---- the program ----------------------------------------------------------------------------- */

/* What a program brings: its options and its model. */
typedef struct {
    void (*usage)(const char *argv0); /* prints the options to stderr */
    int allow_batch_norm;             /* accept --batch_norm (sets fmnist_opts.batch_norm) */
    int image;                        /* 1: "img" is [1, 28, 28]; 0: "img" is [784] */
    /* Builds the model into p: data "img" float32 and "label" int64 [1], *prediction
     * (softmax [N, 10]) and *loss (mean cross-entropy [1]).  Returns FL_OK or the status
     * (fl_last_error() has the message). */
    int (*build)(fl_prog *p, const fmnist_opts *o, fl_var **prediction, fl_var **loss);
    /* 0: each trainer scores its share of the test set and the counts are summed.  1: the
     * first worker scores the whole set (for batch_norm, whose moving statistics are each
     * trainer's own: there is no sync_batch_norm) and also prints the time it took. */
    int test_on_first_worker;
    int64_t test_batch; /* test images per run */
} fmnist_model;

/* The test accuracy of test_prog (fetching `acc`) on images [lo, hi): the number correct. */
static int fmnist__score(fl_exe *exe, fl_prog *test_prog, fl_var *acc_var, const fmnist_split *test, const fmnist_model *m,
                         int64_t lo, int64_t hi, double *correct)
{
    const char *tfetch[] = {fl_var_name(acc_var)};
    for (int64_t i = lo; i < hi; i += m->test_batch) {
        int64_t b = hi - i < m->test_batch ? hi - i : m->test_batch;
        const int64_t xs[4] = {b, m->image ? 1 : FMNIST_PIXELS, FMNIST_ROWS, FMNIST_COLS};
        fl_tensor *tx = fl_tensor_from_data(FL_FLOAT32, m->image ? 4 : 2, xs, test->x + i * FMNIST_PIXELS);
        fl_tensor *ty = fl_tensor_from_data(FL_INT64, 2, (const int64_t[]){b, 1}, test->y + i);
        fl_feed feed[] = {{"img", tx}, {"label", ty}};
        fl_tensor *acc;
        if (!tx || !ty || fl_exe_run(exe, test_prog, feed, 2, tfetch, 1, &acc) != FL_OK) {
            fprintf(stderr, "test failed: %s\n", fl_last_error());
            return 1;
        }
        *correct += (double)(int64_t)(fl_tensor_f32(acc)[0] * (float)b + 0.5f);
        fl_tensor_free(tx);
        fl_tensor_free(ty);
    }
    return 0;
}

/* Writes every parameter of prog found in the executor's scope to the safetensors file path. */
static int fmnist__dump(fl_exe *exe, const fl_prog *prog, const char *path)
{
    int nvars = fl_prog_num_vars(prog), n = 0;
    const char **names = malloc((size_t)nvars * sizeof *names);
    const fl_tensor **ts = malloc((size_t)nvars * sizeof *ts);
    int st = names && ts ? FL_OK : FL_ENOMEM;
    for (int i = 0; st == FL_OK && i < nvars; i++) {
        fl_var *v = fl_prog_var_at(prog, i);
        fl_tensor *t = fl_var_is_param(v) ? fl_scope_find(fl_exe_scope(exe), fl_var_name(v)) : NULL;
        if (!t) continue;
        names[n] = fl_var_name(v);
        ts[n++] = t;
    }
    if (st == FL_OK) st = fl_io_write_safetensors(path, names, ts, n);
    if (st == FL_OK) printf("%d parameters written to %s\n", n, path);
    free(names);
    free(ts);
    return st;
}

/* The whole program: parses the options, trains and reports.  Returns the exit status. */
static int fmnist_train_main(int argc, char **argv, const fmnist_model *m)
{
    fmnist_opts opt;
    int rc = fmnist_parse_args(argc, argv, m->allow_batch_norm, m->usage, &opt);
    if (rc >= 0) return rc;
    const int epochs = opt.epochs;
    const int64_t batch = opt.batch;
    setvbuf(stdout, NULL, _IOLBF, 0);

    /* ---- data ---- */
    const char *dir = fmnist_dir(opt.data);
    char err[8192];
    fmnist_split train, test;
    double t_load = fmnist_now();
    if (fmnist_load(dir, "train", &train, err, sizeof err) || fmnist_load(dir, "t10k", &test, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    t_load = fmnist_now() - t_load;

    /* ---- model ---- */
    fl_prog *prog = fl_prog_create();
    fl_var *prediction = NULL, *avg_cost = NULL;
    if (!prog || m->build(prog, &opt, &prediction, &avg_cost) != FL_OK) {
        fprintf(stderr, "building the model failed: %s\n", fl_last_error());
        return 1;
    }
    fl_prog *test_prog = fl_prog_clone(prog, 1); /* before minimize: forward ops only */
    fl_var *test_acc = test_prog ? fl_layer_accuracy(fl_prog_var(test_prog, fl_var_name(prediction)),
                                                     fl_prog_var(test_prog, "label"), 1)
                                 : NULL;
    if (!test_acc) {
        fprintf(stderr, "building the test program failed: %s\n", fl_last_error());
        return 1;
    }

    fl_opt *optimizer = fl_opt_momentum(opt.lr, opt.momentum, 0);
    fleet_t *fleet = fleet_init_collective(NULL, NULL); /* + */
    if (!fleet) {
        fprintf(stderr, "fleet_init_collective: %s\n", fl_last_error());
        return 1;
    }
    optimizer = fleet_distributed_optimizer(fleet, optimizer, NULL); /* + */
    if (!optimizer || fl_opt_minimize(optimizer, avg_cost) != FL_OK) {
        fprintf(stderr, "building the model failed: %s\n", fl_last_error());
        return 1;
    }
    int rank = fleet_worker_index(fleet), nranks = fleet_worker_num(fleet); /* + */

    fl_exe *exe = fl_exe_create(NULL);
    if (fl_exe_run(exe, fl_prog_startup(prog), NULL, 0, NULL, 0, NULL) != FL_OK) {
        fprintf(stderr, "startup failed: %s\n", fl_last_error());
        return 1;
    }
    /* metrics of this hand-written loop (after fleet_init: the files carry the rank) */
    fl_metrics *mx = NULL;
    if (opt.metrics_dir ? !(mx = fl_metrics_open(opt.metrics_dir, NULL)) : fl_metrics_open_env(&mx) != FL_OK) {
        fprintf(stderr, "metrics: %s\n", fl_last_error());
        return 1;
    }

    /* ---- this trainer's shard: perm[rank::nranks], padded to the same length on all ---- */
    int64_t shard = (train.n + nranks - 1) / nranks;
    int64_t steps = (shard + batch - 1) / batch;
    int64_t *perm = malloc((size_t)train.n * sizeof *perm), *mine = malloc((size_t)shard * sizeof *mine);
    const int64_t xshape[4] = {batch, m->image ? 1 : FMNIST_PIXELS, FMNIST_ROWS, FMNIST_COLS};
    fl_tensor *x = fl_tensor_create(FL_FLOAT32, m->image ? 4 : 2, xshape);
    fl_tensor *y = fl_tensor_create(FL_INT64, 2, (const int64_t[]){batch, 1});
    if (!perm || !mine || !x || !y) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    printf("worker %d/%d: %lld training images (data loaded in %.2f s from %s), %lld steps/epoch of batch %lld "
           "(global batch %lld)%s\n",
           rank, nranks, (long long)shard, t_load, dir, (long long)steps, (long long)batch, (long long)batch * nranks,
           opt.batch_norm ? ", with batch_norm" : "");

    const char *fetch[] = {fl_var_name(avg_cost)};
    for (int ep = 0; ep < epochs; ep++) {
        fmnist_shuffle(perm, train.n, opt.seed + (uint64_t)ep);
        for (int64_t k = 0; k < shard; k++) mine[k] = perm[(rank + k * nranks) % train.n];

        if (fleet_barrier_worker(fleet) != FL_OK) { /* + */
            fprintf(stderr, "barrier: %s\n", fl_last_error());
            return 1;
        }
        double t0 = fmnist_now(), loss_sum = 0, window = 0;
        for (int64_t s = 0; s < steps; s++) {
            int64_t b = s == steps - 1 ? shard - s * batch : batch;
            if (fmnist_gather(&train, mine + s * batch, b, m->image, x, y)) {
                fprintf(stderr, "batch: %s\n", fl_last_error());
                return 1;
            }
            fl_feed feed[] = {{"img", x}, {"label", y}};
            fl_tensor *cost;
            if (fl_exe_run(exe, prog, feed, 2, fetch, 1, &cost) != FL_OK) {
                fprintf(stderr, "epoch %d step %lld failed: %s\n", ep + 1, (long long)s, fl_last_error());
                return 1;
            }
            loss_sum += fl_tensor_f32(cost)[0];
            window += fl_tensor_f32(cost)[0];
            int64_t step = (int64_t)ep * steps + s + 1;
            if (mx && step % 50 == 0) {
                if (fl_metrics_scalar(mx, "loss", step, ep, window / 50) != FL_OK || fl_metrics_flush(mx) != FL_OK) {
                    fprintf(stderr, "metrics: %s\n", fl_last_error());
                    return 1;
                }
                window = 0;
            }
        }
        double stat[2] = {fmnist_now() - t0, loss_sum / (double)steps};
        /* slowest trainer's time; mean loss over trainers */
        if (fleet_util_all_reduce(fleet, &stat[0], 1, FL_FLOAT64, "max") != FL_OK || /* + */
            fleet_util_all_reduce(fleet, &stat[1], 1, FL_FLOAT64, "sum") != FL_OK) { /* + */
            fprintf(stderr, "all_reduce: %s\n", fl_last_error());
            return 1;
        }
        stat[1] /= nranks;

        /* test accuracy: this trainer's share of the test set, counts summed over trainers;
         * or the whole set on the first worker */
        double correct = 0, t_test = fmnist_now();
        int report = rank == 0;
        if (!m->test_on_first_worker) {
            if (fmnist__score(exe, test_prog, test_acc, &test, m, test.n * rank / nranks, test.n * (rank + 1) / nranks,
                              &correct))
                return 1;
            if (fleet_util_all_reduce(fleet, &correct, 1, FL_FLOAT64, "sum") != FL_OK) { /* + */
                fprintf(stderr, "all_reduce: %s\n", fl_last_error());
                return 1;
            }
        } else if ((report = fleet_is_first_worker(fleet))) { /* + */
            if (fmnist__score(exe, test_prog, test_acc, &test, m, 0, test.n, &correct)) return 1;
        }
        int64_t at = ep; /* epoch records: step = epoch (0-based), as fl_exe_train_from_dataset */
        if (mx && (fl_metrics_scalar(mx, "epoch/loss", at, ep, stat[1]) != FL_OK ||
                   fl_metrics_scalar(mx, "epoch/examples_per_s", at, ep, (double)train.n / stat[0]) != FL_OK ||
                   fl_metrics_scalar(mx, "epoch/lr", at, ep, opt.lr) != FL_OK ||
                   (report && fl_metrics_scalar(mx, "epoch/test_acc", at, ep, correct / (double)test.n) != FL_OK) ||
                   fl_metrics_flush(mx) != FL_OK)) {
            fprintf(stderr, "metrics: %s\n", fl_last_error());
            return 1;
        }
        if (report) {
            char took[32] = "";
            if (m->test_on_first_worker) snprintf(took, sizeof took, " (test %.2f s)", fmnist_now() - t_test);
            printf("epoch %d/%d: loss %.4f  samples/s %.0f  time %.3f s  test_acc %.2f%% (%.0f/%lld)  "
                   "[%d trainer%s x batch %lld]%s\n",
                   ep + 1, epochs, stat[1], (double)train.n / stat[0], stat[0], 100.0 * correct / (double)test.n, correct,
                   (long long)test.n, nranks, nranks == 1 ? "" : "s", (long long)batch, took);
        }
    }
    if (opt.dump && fleet_is_first_worker(fleet) && fmnist__dump(exe, prog, opt.dump) != FL_OK) { /* + */
        fprintf(stderr, "--dump %s: %s\n", opt.dump, fl_last_error());
        return 1;
    }
    /* the others wait for the first worker's test before leaving */
    if (m->test_on_first_worker && fleet_barrier_worker(fleet) != FL_OK) { /* + */
        fprintf(stderr, "barrier: %s\n", fl_last_error());
        return 1;
    }

    if (fl_metrics_close(mx) != FL_OK) {
        fprintf(stderr, "metrics: %s\n", fl_last_error());
        return 1;
    }
    fl_tensor_free(x);
    fl_tensor_free(y);
    free(perm);
    free(mine);
    fmnist_free(&train);
    fmnist_free(&test);
    fl_exe_free(exe);
    fl_opt_free(optimizer);
    fl_prog_free(test_prog);
    fl_prog_free(prog);
    fleet_free(fleet); /* + */
    return 0;
}

#endif
