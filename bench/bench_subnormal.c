/*
 * bench_subnormal.c - what subnormal optimizer state costs, and what flushing it costs.
 *
 *   bench_subnormal [--n N] [--dead-every K] [--reps R]
 *
 * Runs the Adam update arithmetic of src/graph/ops_optim.c (run_adam's inner loop, l2 = 0)
 * over N floats (default 160,000: CTR-DNN's fc_2.w_0) of which every K-th (default 10: a
 * tenth, as measured on CTR-DNN after one epoch by bench_ctr --epochs) is a dead unit with
 * zero gradient, in three variants timed in R interleaved rounds (medians):
 *
 *   ieee_subnormal   no flush, the dead units' first moment subnormal (1e-39) at every step:
 *                    the state before the fix, as it stays for some 200 steps of decay
 *   flush            fl__flush_tiny on the moments, as the kernel now runs: the dead units'
 *                    state was flushed to 0 the step it fell below FLT_MIN and stays 0
 *   ieee_normal      the same zero state without the flush: the floor, so flush /
 *                    ieee_normal is what the flush costs
 *
 * Output: "R<TAB>key<TAB>value<TAB>unit" lines (microseconds per step and ratios to
 * ieee_normal) and "# " comments, as the other benches.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tensor/tensor_internal.h" /* fl__flush_tiny */

#define CLI_NAME "bench_subnormal"
#define CLI_HELP_HINT "usage: bench_subnormal [--n N] [--dead-every K] [--reps R (1..1001)]"
#include "bench_args.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int64_t N = 160000, DEAD = 10;
static float *p, *m1, *m2, *g;

static void init(float dead_m1)
{
    for (int64_t j = 0; j < N; j++) {
        int dead = j % DEAD == 0;
        p[j] = 0.01f;
        g[j] = dead ? 0.0f : 0.001f;
        m1[j] = dead ? dead_m1 : 1e-4f;
        m2[j] = dead ? 0.0f : 1e-8f;
    }
}

/* One Adam step as run_adam does it; flush: with fl__flush_tiny on the moments. */
__attribute__((noinline)) static void step(int flush)
{
    const float fb1 = 0.9f, fb2 = 0.999f, cb1 = 0.1f, cb2 = 0.001f, lr = 1e-3f, eps = 1e-8f;
    if (flush) {
        for (int64_t j = 0; j < N; j++) {
            float gj = g[j];
            float a = fl__flush_tiny(fb1 * m1[j] + cb1 * gj), b = fl__flush_tiny(fb2 * m2[j] + cb2 * gj * gj);
            m1[j] = a;
            m2[j] = b;
            p[j] -= lr * a / (sqrtf(b) + eps);
        }
    } else {
        for (int64_t j = 0; j < N; j++) {
            float gj = g[j];
            float a = fb1 * m1[j] + cb1 * gj, b = fb2 * m2[j] + cb2 * gj * gj;
            m1[j] = a;
            m2[j] = b;
            p[j] -= lr * a / (sqrtf(b) + eps);
        }
    }
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    int reps = 31;
    const bench_opt opts[] = {{"n", BA_I64, &N}, {"dead-every", BA_I64, &DEAD}, {"reps", BA_INT, &reps}};
    bench_args(argc, argv, 1, opts, BA_COUNT(opts), NULL, NULL);
    if (N < 1 || DEAD < 1 || reps < 1 || reps > 1001) cli_die(2, "--n and --dead-every must be >= 1, --reps in [1, 1001]");
    p = malloc((size_t)N * sizeof *p);
    m1 = malloc((size_t)N * sizeof *m1);
    m2 = malloc((size_t)N * sizeof *m2);
    g = malloc((size_t)N * sizeof *g);
    double *t = malloc((size_t)reps * 3 * sizeof *t);
    if (!p || !m1 || !m2 || !g || !t) return 1;
    static const char *const names[3] = {"ieee_subnormal", "flush", "ieee_normal"};
    for (int r = 0; r < reps; r++)
        for (int k = 0; k < 3; k++) {
            const float dead_m1 = k == 0 ? 1e-39f : 0.0f;
            init(dead_m1);
            double t0 = now();
            for (int s = 0; s < 5; s++) {
                step(k == 1);
                if (k == 0) /* the dead units stay subnormal */
                    for (int64_t j = 0; j < N; j += DEAD) m1[j] = dead_m1;
            }
            t[k * reps + r] = (now() - t0) / 5;
        }
    double med[3];
    for (int k = 0; k < 3; k++) {
        qsort(t + k * reps, (size_t)reps, sizeof *t, cmp_d);
        med[k] = t[k * reps + reps / 2];
    }
    printf("# bench_subnormal: Adam step over %lld floats, every %lld-th a dead unit; %d interleaved rounds, "
           "medians\n",
           (long long)N, (long long)DEAD, reps);
    for (int k = 0; k < 3; k++) {
        printf("R\tsubnormal.%s.us_per_step\t%.1f\tus\n", names[k], med[k] * 1e6);
        printf("R\tsubnormal.%s.over_ieee_normal\t%.2f\tratio\n", names[k], med[k] / med[2]);
    }
    free(p);
    free(m1);
    free(m2);
    free(g);
    free(t);
    return 0;
}
