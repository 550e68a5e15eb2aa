/*
 * Fashion-MNIST MLP: 784 -> fc512 relu -> fc256 relu -> fc10 softmax, cross-entropy, mean,
 * Momentum (lr 0.01, momentum 0.9), batch 64, one epoch, then test accuracy on the 10,000
 * test images: the model of shared/peers RESULTS.md 5c, written as a single-machine
 * program.  The lines marked "+" make it data-parallel; without fleetrun it trains as one
 * local worker.
 *
 *   train_mlp [--data DIR] [--epochs N] [--batch N] [--lr F] [--momentum F] [--seed S]
 *   fleetrun --nproc_per_node 2 build/examples/fmnist/train_mlp --batch 32
 *
 * --batch is per trainer (global batch = trainers x batch).  Data: see idx.h (Debian's
 * dataset-fashion-mnist by default), pixels scaled to [0,1].  Each epoch shuffles the
 * training set with a fixed permutation (seed S + epoch, S = 0 by default); trainer r of n
 * takes every n-th sample of it (perm[r::n], as the PyTorch reference does), padded by
 * wrapping round when n does not divide the set, so every trainer runs the same number of
 * steps.  Epoch time runs from a barrier before the first step to the last step of the
 * slowest trainer (data loading excluded, as in the reference); samples/s = training
 * images / epoch time.  The test set is evaluated by a program cloned for test before
 * minimize; each trainer scores its share and the counts are summed.
 */
#include <fleet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "idx.h"

static void usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s [--data DIR] [--epochs N] [--batch N] [--lr F] [--momentum F] [--seed S]\n"
            "  --data DIR     IDX files (default $FMNIST_DIR, else " FMNIST_DEFAULT_DIR ")\n"
            "  --epochs N     epochs (default 1)\n"
            "  --batch N      batch per trainer (default 64)\n"
            "  --lr F         learning rate (default 0.01); --momentum F (default 0.9)\n"
            "  --seed S       shuffle seed of epoch 1 (default 0; epoch e uses S+e-1)\n",
            argv0);
}

int main(int argc, char **argv)
{
    fmnist_opts opt;
    int rc = fmnist_parse_args(argc, argv, 0, usage, &opt);
    if (rc >= 0) return rc;
    const char *data_arg = opt.data;
    int epochs = opt.epochs;
    int64_t batch = opt.batch;
    float lr = opt.lr, momentum = opt.momentum;
    uint64_t seed = opt.seed;
    setvbuf(stdout, NULL, _IOLBF, 0);

    /* ---- data ---- */
    const char *dir = fmnist_dir(data_arg);
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
    fl_var *img = fl_layer_data(prog, "img", FL_SHAPE(FMNIST_PIXELS), FL_FLOAT32, 0);
    fl_var *label = fl_layer_data(prog, "label", FL_SHAPE(1), FL_INT64, 0);
    fl_var *h = fl_layer_fc(FL_VARS(img), 512, "relu");
    h = fl_layer_fc(FL_VARS(h), 256, "relu");
    fl_var *prediction = fl_layer_fc(FL_VARS(h), FMNIST_CLASSES, "softmax");
    fl_var *avg_cost = fl_layer_mean(fl_layer_cross_entropy(prediction, label));

    fl_prog *test_prog = fl_prog_clone(prog, 1);     /* before minimize: forward ops only */
    fl_var *test_acc = test_prog ? fl_layer_accuracy(fl_prog_var(test_prog, fl_var_name(prediction)),
                                                     fl_prog_var(test_prog, "label"), 1) : NULL;
    if (!test_acc) {
        fprintf(stderr, "building the test program failed: %s\n", fl_last_error());
        return 1;
    }

    fl_opt *optimizer = fl_opt_momentum(lr, momentum, 0);
    fleet_t *fleet = fleet_init_collective(NULL, NULL);                        /* + */
    if (!fleet) {
        fprintf(stderr, "fleet_init_collective: %s\n", fl_last_error());
        return 1;
    }
    optimizer = fleet_distributed_optimizer(fleet, optimizer, NULL);           /* + */
    if (!optimizer || fl_opt_minimize(optimizer, avg_cost) != FL_OK) {
        fprintf(stderr, "building the model failed: %s\n", fl_last_error());
        return 1;
    }
    int rank = fleet_worker_index(fleet), nranks = fleet_worker_num(fleet);    /* + */

    fl_exe *exe = fl_exe_create(NULL);
    if (fl_exe_run(exe, fl_prog_startup(prog), NULL, 0, NULL, 0, NULL) != FL_OK) {
        fprintf(stderr, "startup failed: %s\n", fl_last_error());
        return 1;
    }

    /* ---- this trainer's shard: perm[rank::nranks], padded to the same length on all ---- */
    int64_t shard = (train.n + nranks - 1) / nranks;
    int64_t steps = (shard + batch - 1) / batch;
    int64_t *perm = malloc((size_t)train.n * sizeof *perm), *mine = malloc((size_t)shard * sizeof *mine);
    fl_tensor *x = fl_tensor_create(FL_FLOAT32, 2, (const int64_t[]){batch, FMNIST_PIXELS});
    fl_tensor *y = fl_tensor_create(FL_INT64, 2, (const int64_t[]){batch, 1});
    if (!perm || !mine || !x || !y) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    printf("worker %d/%d: %lld training images (data loaded in %.2f s from %s), %lld steps/epoch of batch %lld "
           "(global batch %lld)\n", rank, nranks, (long long)shard, t_load, dir, (long long)steps,
           (long long)batch, (long long)batch * nranks);

    const char *fetch[] = {fl_var_name(avg_cost)};
    for (int ep = 0; ep < epochs; ep++) {
        fmnist_shuffle(perm, train.n, seed + (uint64_t)ep);
        for (int64_t k = 0; k < shard; k++) mine[k] = perm[(rank + k * nranks) % train.n];

        if (fleet_barrier_worker(fleet) != FL_OK) {                           /* + */
            fprintf(stderr, "barrier: %s\n", fl_last_error());
            return 1;
        }
        double t0 = fmnist_now(), loss_sum = 0;
        for (int64_t s = 0; s < steps; s++) {
            int64_t b = s == steps - 1 ? shard - s * batch : batch;
            if (fmnist_gather(&train, mine + s * batch, b, 0, x, y)) {
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
        }
        double stat[2] = {fmnist_now() - t0, loss_sum / (double)steps};
        /* slowest trainer's time; mean loss over trainers */
        if (fleet_util_all_reduce(fleet, &stat[0], 1, FL_FLOAT64, "max") != FL_OK ||   /* + */
            fleet_util_all_reduce(fleet, &stat[1], 1, FL_FLOAT64, "sum") != FL_OK) {   /* + */
            fprintf(stderr, "all_reduce: %s\n", fl_last_error());
            return 1;
        }
        stat[1] /= nranks;

        /* test accuracy: this trainer's share of the test set, counts summed over trainers */
        int64_t lo = test.n * rank / nranks, hi = test.n * (rank + 1) / nranks;
        double correct = 0;
        const char *tfetch[] = {fl_var_name(test_acc)};
        for (int64_t i = lo; i < hi; i += 1000) {
            int64_t b = hi - i < 1000 ? hi - i : 1000;
            fl_tensor *tx = fl_tensor_from_data(FL_FLOAT32, 2, (const int64_t[]){b, FMNIST_PIXELS},
                                                test.x + i * FMNIST_PIXELS);
            fl_tensor *ty = fl_tensor_from_data(FL_INT64, 2, (const int64_t[]){b, 1}, test.y + i);
            fl_feed feed[] = {{"img", tx}, {"label", ty}};
            fl_tensor *acc;
            if (!tx || !ty || fl_exe_run(exe, test_prog, feed, 2, tfetch, 1, &acc) != FL_OK) {
                fprintf(stderr, "test failed: %s\n", fl_last_error());
                return 1;
            }
            correct += (double)(int64_t)(fl_tensor_f32(acc)[0] * (float)b + 0.5f);
            fl_tensor_free(tx);
            fl_tensor_free(ty);
        }
        if (fleet_util_all_reduce(fleet, &correct, 1, FL_FLOAT64, "sum") != FL_OK) {  /* + */
            fprintf(stderr, "all_reduce: %s\n", fl_last_error());
            return 1;
        }
        if (rank == 0)
            printf("epoch %d/%d: loss %.4f  samples/s %.0f  time %.3f s  test_acc %.2f%% (%.0f/%lld)  "
                   "[%d trainer%s x batch %lld]\n",
                   ep + 1, epochs, stat[1], (double)train.n / stat[0], stat[0], 100.0 * correct / (double)test.n,
                   correct, (long long)test.n, nranks, nranks == 1 ? "" : "s", (long long)batch);
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
    fleet_free(fleet);                                                         /* + */
    return 0;
}
