/*
 * bench_conv.c - conv2d forward on [64, 1, 28, 28] with 32 5x5 filters (LeNet's first
 * layer) against the bare sgemm calls it makes, in the same process: how much im2col, bias
 * and activation add.  Prints R lines; best of 15 alternating runs.
 *
 *   build/bench/bench_conv
 */
#include <fleet.h>
#include <stdio.h>
#include <stdlib.h>

#include "tensor/tensor_internal.h"

static float *rnd(size_t n, unsigned seed)
{
    float *x = malloc(n * sizeof *x);
    unsigned s = seed * 2654435761u + 1u;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)(s >> 8) / 16777216.0f * 2.0f - 1.0f;
    }
    return x;
}

int main(void)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(1, 28, 28), FL_FLOAT32, 0);
    fl_var *y = fl_layer_conv2d(x, 32, 5, 5, "relu", NULL);
    fl_exe *e = fl_exe_create(NULL);
    if (!y || fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL) != FL_OK) {
        fprintf(stderr, "bench_conv: %s\n", fl_last_error());
        return 1;
    }
    float *xd = rnd(64 * 784, 5), *w = rnd(32 * 25, 6), *col = rnd(25 * 576, 7), *out = malloc(32 * 576 * sizeof *out);
    fl_tensor *xt = fl_tensor_from_data(FL_FLOAT32, 4, (const int64_t[]){64, 1, 28, 28}, xd);
    fl_feed feed[] = {{"x", xt}};
    const char *fetch[] = {fl_var_name(y)};
    fl_tensor *o;
    double conv = 1e9, gemm = 1e9;
    for (int r = 0; r < 15; r++) {
        double t0 = fl__now();
        if (fl_exe_run(e, p, feed, 1, fetch, 1, &o) != FL_OK) {
            fprintf(stderr, "bench_conv: %s\n", fl_last_error());
            return 1;
        }
        double t1 = fl__now();
        for (int n = 0; n < 64; n++) fl__sgemm(0, 0, 32, 576, 25, 1.0f, w, 25, col, 576, 0.0f, out, 576);
        double t2 = fl__now();
        conv = conv < t1 - t0 ? conv : t1 - t0;
        gemm = gemm < t2 - t1 ? gemm : t2 - t1;
    }
    printf("R\tconv2d.fwd.b64.28x28.32x5x5.ms\t%.3f\tms\n", conv * 1e3);
    printf("R\tconv2d.fwd.sgemm_alone.ms\t%.3f\tms\n", gemm * 1e3);
    printf("R\tconv2d.fwd.sgemm_share\t%.2f\tx\n", gemm / conv);
    free(xd), free(w), free(col), free(out);
    fl_tensor_free(xt);
    fl_exe_free(e);
    fl_prog_free(p);
    return 0;
}
