/*
 * Fashion-MNIST CNN (LeNet-style; fl_model_cnn_build with fl_model_cnn_default()):
 *
 *   img [1, 28, 28] -> conv2d 5x5 x20 relu -> pool2d 2x2 max -> conv2d 5x5 x50 relu
 *                   -> pool2d 2x2 max -> fc500 relu -> fc10 softmax, cross-entropy, mean
 *
 * With --batch_norm each conv2d is followed by batch_norm (relu moves to it), as Paddle's
 * recognize_digits conv example.  Momentum (lr 0.01, momentum 0.9), batch 64, one epoch,
 * then test accuracy on the 10,000 test images; the training program (data, shuffle,
 * shards, the "+" lines that make it data-parallel) is train.h, shared with train_mlp.c.
 * Without fleetrun it trains as one local worker.
 *
 *   train_cnn [--data DIR] [--epochs N] [--batch N] [--lr F] [--momentum F] [--seed S] [--dump PATH] [--batch_norm]
 *             [--metrics_dir DIR]
 *   fleetrun --nproc_per_node 2 build/examples/fmnist/train_cnn --batch 32
 *
 * --batch is per trainer.  The test program is cloned for test before minimize (batch_norm
 * then normalises with its moving statistics).  The first worker scores the whole test set:
 * parameters are the same on every trainer, but batch_norm's moving statistics are each
 * trainer's own (no sync_batch_norm), as in Paddle, so the first worker's model is the one
 * reported.
 */
#include <fleet.h>
#include <stdio.h>

#include "train.h"

static void usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s [--data DIR] [--epochs N] [--batch N] [--lr F] [--momentum F] [--seed S] [--dump PATH]\n"
            "          [--batch_norm] [--metrics_dir DIR]\n"
            "  --data DIR     IDX files (default $FMNIST_DIR, else " FMNIST_DEFAULT_DIR ")\n"
            "  --epochs N     epochs (default 1)\n"
            "  --batch N      batch per trainer (default 64)\n"
            "  --lr F         learning rate (default 0.01); --momentum F (default 0.9)\n"
            "  --seed S       shuffle seed of epoch 1 (default 0; epoch e uses S+e-1)\n"
            "  --dump PATH    after training, the first worker writes the parameters to PATH (safetensors)\n"
            "  --metrics_dir DIR  loss, samples/s, lr, test accuracy per rank: CSV and TensorBoard files\n"
            "  --batch_norm   batch_norm after each conv2d\n",
            argv0);
}

/* The library's Fashion-MNIST CNN (fl_model_cnn_default in fleet/models.h). */
static int build(fl_prog *prog, const fmnist_opts *o, fl_var **prediction, fl_var **loss)
{
    fl_model_cnn_config cfg = fl_model_cnn_default();
    cfg.batch_norm = o->batch_norm;
    fl_model_cnn net;
    int st = fl_model_cnn_build(prog, &cfg, &net);
    *prediction = net.predict;
    *loss = net.loss;
    return st;
}

int main(int argc, char **argv)
{
    const fmnist_model m = {
        .usage = usage, .allow_batch_norm = 1, .image = 1, .build = build, .test_on_first_worker = 1, .test_batch = 500};
    return fmnist_train_main(argc, argv, &m);
}
