/*
 * bench_recompute - peak activation bytes and step time of an fc stack trained three ways:
 *   keep      eager deletion off, no recompute (every buffer kept, the old executor)
 *   eager     eager deletion on (the default), no recompute
 *   recompute eager deletion on, strategy recompute with a checkpoint every 2 layers
 * The peak is fl_exe_peak_activation_bytes (non-persistable buffers during one step).  Step
 * times: ROUNDS rounds, the three interleaved (order rotated each round), STEPS steps each
 * after a warm-up step, medians and ratios of medians.
 *
 *   build/bench/bench_recompute [--batch 2048] [--hidden 256] [--layers 8] [--rounds 5] [--steps 10]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fleet.h"

#define CLI_NAME "bench_recompute"
#define CLI_HELP_HINT "usage: bench_recompute [--batch 2048] [--hidden 256] [--layers 8] [--rounds 5] [--steps 10]"
#include "bench_args.h"

enum { IN = 256, CLASSES = 10, NV = 3 };
static const char *const names[NV] = {"keep", "eager", "recompute"};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct {
    fl_prog *p;
    fl_exe *e;
    const char *loss;
} variant;

static int build(variant *v, int kind, int hidden, int layers)
{
    v->p = fl_prog_create();
    fl_var *h = fl_layer_data(v->p, "x", FL_SHAPE(IN), FL_FLOAT32, 0);
    fl_var *y = fl_layer_data(v->p, "y", FL_SHAPE(1), FL_INT64, 0);
    char cps[1024] = "";
    for (int k = 0; k < layers; k++) {
        h = fl_layer_fc(&h, 1, hidden, "relu");
        size_t n = strlen(cps);
        if (k % 2 == 1 && h) snprintf(cps + n, sizeof cps - n, "%s%s", n ? "," : "", fl_var_name(h));
    }
    fl_var *loss = fl_layer_mean(fl_layer_softmax_with_cross_entropy(fl_layer_fc(&h, 1, CLASSES, NULL), y));
    fl_opt *o = fl_opt_momentum(0.01f, 0.9f, 0);
    if (!loss || !o) return -1;
    if (kind == 2 && fl_opt_set_recompute(o, cps) != FL_OK) return -1;
    int st = fl_opt_minimize(o, loss);
    fl_opt_free(o);
    if (st != FL_OK) return st;
    v->loss = fl_var_name(loss);
    v->e = fl_exe_create(NULL);
    if (!v->e || fl_exe_set_eager_deletion(v->e, kind != 0) != FL_OK) return -1;
    return fl_exe_run(v->e, fl_prog_startup(v->p), NULL, 0, NULL, 0, NULL);
}

static int steps(variant *v, fl_feed *feed, int n, float *loss)
{
    fl_tensor *out[1];
    for (int i = 0; i < n; i++) {
        int st = fl_exe_run(v->e, v->p, feed, 2, &v->loss, 1, out);
        if (st != FL_OK) return st;
        *loss = fl_tensor_f32(out[0])[0];
    }
    return FL_OK;
}

int main(int argc, char **argv)
{
    int batch = 2048, hidden = 256, layers = 8, rounds = 5, nsteps = 10;
    const bench_opt opts[] = {{"batch", BA_INT, &batch},
                              {"hidden", BA_INT, &hidden},
                              {"layers", BA_INT, &layers},
                              {"rounds", BA_INT, &rounds},
                              {"steps", BA_INT, &nsteps}};
    bench_args(argc, argv, 1, opts, BA_COUNT(opts), NULL, NULL);
    if (batch < 1 || hidden < 1 || layers < 2 || rounds < 1 || rounds > 64 || nsteps < 1)
        cli_die(2, "--batch, --hidden and --steps must be >= 1, --layers >= 2, --rounds in [1, 64]");
    float *xs = malloc((size_t)batch * IN * sizeof *xs);
    int64_t *ys = malloc((size_t)batch * sizeof *ys);
    if (!xs || !ys) return 1;
    unsigned s = 12345u;
    for (int i = 0; i < batch * IN; i++) {
        s = s * 1664525u + 1013904223u;
        xs[i] = (float)(s >> 8) / (float)(1u << 24) * 2.0f - 1.0f;
    }
    for (int i = 0; i < batch; i++) ys[i] = i % CLASSES;
    fl_tensor *xt = fl_tensor_from_data(FL_FLOAT32, 2, (const int64_t[]){batch, IN}, xs);
    fl_tensor *yt = fl_tensor_from_data(FL_INT64, 2, (const int64_t[]){batch, 1}, ys);
    fl_feed feed[] = {{"x", xt}, {"y", yt}};
    variant v[NV];
    float loss[NV];
    memset(v, 0, sizeof v);
    for (int k = 0; k < NV; k++)
        if (build(&v[k], k, hidden, layers) != FL_OK || steps(&v[k], feed, 1, &loss[k]) != FL_OK) {
            fprintf(stderr, "bench_recompute: %s: %s\n", names[k], fl_last_error());
            return 1;
        }
    double t[NV][64];
    for (int r = 0; r < rounds; r++)
        for (int j = 0; j < NV; j++) {
            int k = (j + r) % NV;
            double t0 = now();
            if (steps(&v[k], feed, nsteps, &loss[k]) != FL_OK) {
                fprintf(stderr, "bench_recompute: %s: %s\n", names[k], fl_last_error());
                return 1;
            }
            t[k][r] = (now() - t0) / nsteps;
        }
    printf("fc stack: batch %d, %d -> %d x (fc %d relu) -> fc %d; momentum; %d rounds x %d steps, interleaved\n", batch, IN,
           layers, hidden, CLASSES, rounds, nsteps);
    printf("%-10s %14s %10s %12s %10s %12s\n", "variant", "peak bytes", "vs keep", "step ms", "vs keep", "last loss");
    double med[NV];
    for (int k = 0; k < NV; k++) {
        qsort(t[k], (size_t)rounds, sizeof t[k][0], cmp);
        med[k] = t[k][rounds / 2];
    }
    for (int k = 0; k < NV; k++) {
        int64_t pk = fl_exe_peak_activation_bytes(v[k].e), p0 = fl_exe_peak_activation_bytes(v[0].e);
        printf("%-10s %14lld %9.2fx %12.2f %9.3fx %12.6f\n", names[k], (long long)pk, (double)pk / (double)p0, 1e3 * med[k],
               med[k] / med[0], (double)loss[k]);
    }
    printf("recompute / eager: peak %.2fx, step time %.3fx\n",
           (double)fl_exe_peak_activation_bytes(v[2].e) / (double)fl_exe_peak_activation_bytes(v[1].e), med[2] / med[1]);
    for (int k = 0; k < NV; k++) {
        fl_exe_free(v[k].e);
        fl_prog_free(v[k].p);
    }
    fl_tensor_free(xt);
    fl_tensor_free(yt);
    free(xs);
    free(ys);
    return 0;
}
