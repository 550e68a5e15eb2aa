/*
 * Fashion-MNIST MLP: 784 -> fc512 relu -> fc256 relu -> fc10 softmax, cross-entropy, mean
 * (fl_model_mlp_build with fl_model_mlp_fmnist()), Momentum (lr 0.01, momentum 0.9),
 * batch 64, one epoch, then test accuracy on the 10,000 test images: the model of
 * shared/peers RESULTS.md 5c.  The training program (data, shards, epochs, the "+" lines
 * that make it data-parallel) is train.h; without fleetrun it trains as one local worker.
 *
 *   train_mlp [--data DIR] [--epochs N] [--batch N] [--lr F] [--momentum F] [--seed S] [--dump PATH]
 *             [--metrics_dir DIR]
 *   fleetrun --nproc_per_node 2 build/examples/fmnist/train_mlp --batch 32
 *
 * --batch is per trainer (global batch = trainers x batch).  Each trainer scores its share
 * of the test set and the counts are summed.
 */
#include <fleet.h>
#include <stdio.h>

#include "train.h"

static void usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s [--data DIR] [--epochs N] [--batch N] [--lr F] [--momentum F] [--seed S] [--dump PATH]\n"
            "          [--metrics_dir DIR]\n"
            "  --data DIR     IDX files (default $FMNIST_DIR, else " FMNIST_DEFAULT_DIR ")\n"
            "  --epochs N     epochs (default 1)\n"
            "  --batch N      batch per trainer (default 64)\n"
            "  --lr F         learning rate (default 0.01); --momentum F (default 0.9)\n"
            "  --seed S       shuffle seed of epoch 1 (default 0; epoch e uses S+e-1)\n"
            "  --dump PATH    after training, the first worker writes the parameters to PATH (safetensors)\n"
            "  --metrics_dir DIR  loss, samples/s, lr, test accuracy per rank: CSV and TensorBoard files\n",
            argv0);
}

/* The library's Fashion-MNIST MLP (fl_model_mlp_fmnist in fleet/models.h). */
static int build(fl_prog *prog, const fmnist_opts *o, fl_var **prediction, fl_var **loss)
{
    fl_model_mlp_config cfg = fl_model_mlp_fmnist();
    fl_model_mlp net;
    int st = fl_model_mlp_build(prog, &cfg, &net);
    *prediction = net.predict;
    *loss = net.loss;
    return st;
}

int main(int argc, char **argv)
{
    const fmnist_model m = {.usage = usage, .image = 0, .build = build, .test_batch = 1000};
    return fmnist_train_main(argc, argv, &m);
}
