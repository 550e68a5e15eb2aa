/*
 * Fashion-MNIST MLP: 784 -> fc512 relu -> fc256 relu -> fc10 softmax, cross-entropy, mean,
 * Momentum (lr 0.01, momentum 0.9), batch 64, one epoch, then test accuracy on the 10,000
 * test images: the model of shared/peers RESULTS.md 5c.  The training program (data,
 * shards, epochs, the "+" lines that make it data-parallel) is train.h; without fleetrun
 * it trains as one local worker.
 *
 *   train_mlp [--data DIR] [--epochs N] [--batch N] [--lr F] [--momentum F] [--seed S]
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
            "usage: %s [--data DIR] [--epochs N] [--batch N] [--lr F] [--momentum F] [--seed S]\n"
            "  --data DIR     IDX files (default $FMNIST_DIR, else " FMNIST_DEFAULT_DIR ")\n"
            "  --epochs N     epochs (default 1)\n"
            "  --batch N      batch per trainer (default 64)\n"
            "  --lr F         learning rate (default 0.01); --momentum F (default 0.9)\n"
            "  --seed S       shuffle seed of epoch 1 (default 0; epoch e uses S+e-1)\n",
            argv0);
}

static int build(fl_prog *prog, const fmnist_opts *o, fl_var **prediction, fl_var **loss)
{
    fl_var *img = fl_layer_data(prog, "img", FL_SHAPE(FMNIST_PIXELS), FL_FLOAT32, 0);
    fl_var *label = fl_layer_data(prog, "label", FL_SHAPE(1), FL_INT64, 0);
    fl_var *h = fl_layer_fc(FL_VARS(img), 512, "relu");
    h = fl_layer_fc(FL_VARS(h), 256, "relu");
    *prediction = fl_layer_fc(FL_VARS(h), FMNIST_CLASSES, "softmax");
    *loss = fl_layer_mean(fl_layer_cross_entropy(*prediction, label));
    return fl_prog_status(prog);
}

int main(int argc, char **argv)
{
    const fmnist_model m = {.usage = usage, .image = 0, .build = build, .test_batch = 1000};
    return fmnist_train_main(argc, argv, &m);
}
