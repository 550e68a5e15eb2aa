/*
 * bench_ps_update.c - the parameter server's update rule: sparse rows and dense blocks
 * updated per second through the server's table path (fl__ps_sparse_push and
 * fl__ps_dense_push on a table shard in this process: id grouping, stripe locks, row
 * lookup, the optimizer rule; no network).
 *
 *   bench_ps_update [--seconds S] [--keys N] [--batch B] [--scale X] [--dense N]
 *
 * For SGD, Adagrad and Adam and row dims 8 and 64: pushes of B ids (default 13312 = 26 x
 * 512) drawn from N pre-created keys (default 100000), rows/s; then a dense table of N
 * floats (default 425000) pushed whole, floats/s.  --scale 1 is async (the gradient used as
 * it is), 0.5 is sync with 2 workers (the gradient scaled first).  Each figure is the median
 * of 5 slices of S/5 seconds (default S = 1).  Prints the ISA of the kernels' clones.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fleet/ps.h"
#include "ps/ps_internal.h"

#define CLI_NAME "bench_ps_update"
#define CLI_HELP_HINT "usage: bench_ps_update [--seconds S] [--keys N] [--batch B] [--scale X] [--dense N]"
#include "../tools/cli.h"

#define SLICES 5

static double secs = 1.0, scale = 1.0;
static long nkeys = 100000, batch = 26 * 512, ndense = 425000;

static void die(const char *what)
{
    fprintf(stderr, "bench_ps_update: %s: %s\n", what, fl_last_error());
    exit(1);
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct {
    fl__ps_sparse *sp;
    fl__ps_dense *dn;
    const uint64_t *ids;
    const float *grads;
} ctx;

static void push_sparse(ctx *x)
{
    if (fl__ps_sparse_push(x->sp, x->ids, (uint64_t)batch, x->grads, NULL, NULL, (float)scale, 1)) die("sparse push");
}

static void push_dense(ctx *x)
{
    if (fl__ps_dense_push(x->dn, 0, (uint64_t)ndense, x->grads, (float)scale, 1)) die("dense push");
}

/* Calls per second of fn: the median of SLICES slices. */
static double rate(void (*fn)(ctx *), ctx *x)
{
    double r[SLICES];
    fn(x); /* warm-up */
    for (int s = 0; s < SLICES; s++) {
        double t0 = fl__now(), t;
        long n = 0;
        do {
            fn(x);
            n++;
            t = fl__now();
        } while (t - t0 < secs / SLICES);
        r[s] = (double)n / (t - t0);
    }
    qsort(r, SLICES, sizeof r[0], cmp_d);
    return r[SLICES / 2];
}

static const char *clone_isa(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512cd"))
        return "x86-64-v4 (AVX-512)";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi2"))
        return "x86-64-v3 (AVX2)";
    return "x86-64 baseline (SSE2)";
#else
    return "this architecture's baseline";
#endif
}

static long parse_long(const char *name, const char *v, long lo, long hi)
{
    char *end;
    long x = strtol(v, &end, 10);
    if (*end || x < lo || x > hi) cli_die(2, "%s expects an integer in [%ld, %ld], got '%s'", name, lo, hi, v);
    return x;
}

static double parse_double(const char *name, const char *v, double lo, double hi)
{
    char *end;
    double x = strtod(v, &end);
    if (*end || !(x >= lo && x <= hi)) cli_die(2, "%s expects a number in [%g, %g], got '%s'", name, lo, hi, v);
    return x;
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {{"seconds", required_argument, NULL, 's'},
                                             {"keys", required_argument, NULL, 'k'},
                                             {"batch", required_argument, NULL, 'b'},
                                             {"scale", required_argument, NULL, 'x'},
                                             {"dense", required_argument, NULL, 'd'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    char name[64];
    const char *v;
    int c;
    cli_begin(1);
    while ((c = cli_next(argc, argv, "h", longopts, name, &v)) != -1) {
        switch (c) {
        case 's': secs = parse_double(name, v, 0.01, 3600); break;
        case 'k': nkeys = parse_long(name, v, 1, 100000000); break;
        case 'b': batch = parse_long(name, v, 1, 10000000); break;
        case 'x': scale = parse_double(name, v, 1e-6, 1e6); break;
        case 'd': ndense = parse_long(name, v, 1, 100000000); break;
        case 'h': puts(CLI_HELP_HINT); return 0;
        default: cli_die(2, "unknown option %s", name);
        }
    }
    if (optind < argc) cli_die(2, "unexpected argument '%s'", argv[optind]);

    uint64_t *all = malloc((size_t)nkeys * sizeof *all), *ids = malloc((size_t)batch * sizeof *ids);
    size_t ng = (size_t)(batch * 64 > ndense ? batch * 64 : ndense);
    float *grads = malloc(ng * sizeof *grads), *out = malloc((size_t)batch * 64 * sizeof *out);
    if (!all || !ids || !grads || !out) {
        fprintf(stderr, "bench_ps_update: out of memory\n");
        return 1;
    }
    for (long i = 0; i < nkeys; i++) all[i] = fl__hash_u64((uint64_t)i + 1);
    fl_rng r = {12345};
    for (long i = 0; i < batch; i++) ids[i] = all[fl__rng_next(&r) % (uint64_t)nkeys];
    for (size_t i = 0; i < ng; i++) grads[i] = 1e-3f * (float)((int)(i % 7) - 3);

    printf("bench_ps_update: batch %ld ids from %ld keys, dense %ld floats, scale %g, %.2f s per figure (median of %d "
           "slices)\nkernels: %s clones chosen at load time\n",
           batch, nkeys, ndense, scale, secs, SLICES, clone_isa());
    printf("%-8s %5s %14s %14s\n", "rule", "dim", "rows/s", "floats/s");
    static const struct {
        const char *name;
        fl_ps_opt_kind kind;
    } rules[] = {{"sgd", FL_PS_OPT_SGD}, {"adagrad", FL_PS_OPT_ADAGRAD}, {"adam", FL_PS_OPT_ADAM}};
    static const int dims[] = {8, 64};
    for (size_t k = 0; k < sizeof rules / sizeof rules[0]; k++) {
        for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++) {
            fl_ps_table_config t;
            memset(&t, 0, sizeof t);
            t.name = "emb";
            t.kind = FL_PS_SPARSE;
            t.dim = dims[d];
            t.init = fl_init_uniform(-0.01f, 0.01f);
            t.opt = (fl_ps_optimizer){rules[k].kind, 0.01f, 0, 0, 0, 0, 0, 0};
            ctx x = {.ids = ids, .grads = grads};
            if (fl__ps_sparse_create(&t, 0, 1, &x.sp)) die("sparse table");
            for (long a = 0; a < nkeys; a += batch) {
                long n = nkeys - a < batch ? nkeys - a : batch;
                if (fl__ps_sparse_pull(x.sp, all + a, (uint64_t)n, out, 1)) die("fill");
            }
            double rows = rate(push_sparse, &x) * (double)batch;
            printf("%-8s %5d %14.0f %14.0f\n", rules[k].name, dims[d], rows, rows * dims[d]);
            fflush(stdout);
            fl__ps_sparse_free(x.sp);
        }
        fl_ps_table_config t;
        memset(&t, 0, sizeof t);
        t.name = "dense";
        t.kind = FL_PS_DENSE;
        t.rows = ndense;
        t.cols = 1;
        t.opt = (fl_ps_optimizer){rules[k].kind, 0.01f, 0, 0, 0, 0, 0, 0};
        ctx x = {.ids = ids, .grads = grads};
        if (fl__ps_dense_create(&t, 0, 1, &x.dn)) die("dense table");
        double f = rate(push_dense, &x) * (double)ndense;
        printf("%-8s %5s %14s %14.0f\n", rules[k].name, "dense", "-", f);
        fflush(stdout);
        fl__ps_dense_free(x.dn);
    }
    free(all);
    free(ids);
    free(grads);
    free(out);
    return 0;
}
