/*
 * bench_conv.c - conv2d on oneDNN (src/tensor/dnn_conv.c) against the im2col + OpenBLAS
 * sgemm path (FLEET_GEMM=dnnl vs openblas) on the two convolutions of the Fashion-MNIST
 * CNN at batch 64 (LeNet's: [64, 1, 28, 28] -> 20 5x5 relu, [64, 20, 12, 12] -> 50 5x5
 * relu): forward alone, and forward + backward (Input, Filter and Bias gradients), in one
 * process, the two libraries alternating run by run; medians of 15 runs after a warm-up
 * (which makes the oneDNN primitives).  Prints R lines (ms and the ratio oneDNN / im2col,
 * below 1 when oneDNN is faster) and the libraries and ISA in use.
 *
 *   build/bench/bench_conv           the comparison (oneDNN side skipped without oneDNN)
 *   build/bench/bench_conv --info    one line: the libraries and ISA products use here
 */
#include <fleet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/tensor_internal.h"

enum { RUNS = 15, BATCH = 64 };

static void use_lib(const char *name)
{
    setenv("FLEET_GEMM", name, 1);
    fl__gemm_lib_reload();
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

typedef struct {
    const char *name;
    int c, hw, m;
} layer;

static const layer layers[] = {{"conv1.b64.1x28x28.20x5x5", 1, 28, 20}, {"conv2.b64.20x12x12.50x5x5", 20, 12, 50}};

/* The layer as a parameter input through conv2d (relu) into a mean loss, with gradients
 * when `grad`; *fetch gets the variable whose run is timed. */
static fl_prog *build(const layer *l, int grad, const char **fetch, fl_exe **e)
{
    fl_prog *p = fl_prog_create();
    fl_param_attr a;
    memset(&a, 0, sizeof a);
    a.name = "x";
    a.init = fl_init_uniform(-1, 1);
    fl_var *x = fl_layer_create_parameter(p, 4, (const int64_t[]){BATCH, l->c, l->hw, l->hw}, FL_FLOAT32, &a);
    fl_var *y = fl_layer_conv2d(x, l->m, 5, 5, "relu", NULL);
    fl_var *loss = fl_layer_mean(y);
    if (!loss || (grad && fl_append_backward(loss, NULL, 0, NULL, NULL) != FL_OK)) return NULL;
    *fetch = fl_var_name(grad ? loss : y);
    *e = fl_exe_create(NULL);
    if (fl_exe_run(*e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL) != FL_OK) return NULL;
    return p;
}

static int run_once(fl_exe *e, fl_prog *p, const char *fetch, double *ms)
{
    fl_tensor *o;
    double t0 = fl__now();
    int st = fl_exe_run(e, p, NULL, 0, &fetch, 1, &o);
    *ms = (fl__now() - t0) * 1e3;
    return st;
}

int main(int argc, char **argv)
{
    char info[256];
    if (argc > 1 && !strcmp(argv[1], "--info")) {
        printf("%s\n", fl__gemm_info(info, sizeof info));
        return 0;
    }
    int have = fl__dnn_available();
    static const char *const libs[2] = {"openblas", "dnnl"};
    for (size_t li = 0; li < sizeof layers / sizeof *layers; li++)
        for (int grad = 0; grad < 2; grad++) {
            fl_prog *p[2] = {NULL, NULL};
            fl_exe *e[2] = {NULL, NULL};
            const char *fetch[2];
            double t[2][RUNS];
            for (int s = 0; s < 1 + have; s++) {
                use_lib(libs[s]);
                double warm;
                if (!(p[s] = build(&layers[li], grad, &fetch[s], &e[s])) || run_once(e[s], p[s], fetch[s], &warm)) {
                    fprintf(stderr, "bench_conv: %s\n", fl_last_error());
                    return 1;
                }
            }
            for (int r = 0; r < RUNS; r++)
                for (int k = 0; k < 1 + have; k++) {
                    int s = have && r % 2 ? 1 - k : k; /* the order reverses every run */
                    use_lib(libs[s]);
                    if (run_once(e[s], p[s], fetch[s], &t[s][r])) {
                        fprintf(stderr, "bench_conv: %s\n", fl_last_error());
                        return 1;
                    }
                }
            const char *what = grad ? "fwd_bwd" : "fwd";
            double mb = median(t[0], RUNS);
            printf("R\tconv2d.%s.%s.im2col_openblas.ms\t%.3f\tms\n", layers[li].name, what, mb);
            if (have) {
                double md = median(t[1], RUNS);
                printf("R\tconv2d.%s.%s.onednn.ms\t%.3f\tms\n", layers[li].name, what, md);
                printf("R\tconv2d.%s.%s.onednn_over_im2col\t%.2f\tx\n", layers[li].name, what, md / mb);
            }
            for (int s = 0; s < 2; s++) {
                fl_exe_free(e[s]);
                fl_prog_free(p[s]);
            }
        }
    use_lib("auto");
    printf("# %s; medians of %d alternating runs\n", fl__gemm_info(info, sizeof info), RUNS);
    return 0;
}
