/*
 * bench_train.c - training / forward throughput of the Fleet executor (the real path: programs
 * built with the public layer API, run by fl_exe_run with feeds and a fetched loss).
 *
 * usage: bench_train MODE [--batch N] [--seconds S] [--warmup N] [--tag T] [--floor 0|1] [--amp 0|1]
 *   mlp    quick-start MLP: x[32] -> fc128 tanh -> fc128 tanh -> fc2 softmax -> cross_entropy -> mean,
 *          SGD lr 0.01; default batch 128.  Reports steps/s.
 *   fc     fc-heavy training step: x[273] -> fc400 relu x3 -> fc2 softmax -> cross_entropy -> mean,
 *          SGD lr 0.01 (the dense part of Paddle's CTR-DNN); default batch 512.  Reports samples/s.
 *   fcfwd  forward only of the same fc stack (fc400 relu x3 -> fc2, no loss); GFLOP/s counted on the
 *          matrix products (2*B*(273*400 + 2*400*400 + 400*2) per pass), against bare cblas_sgemm
 *          chains of the same shapes in the same process, timed in alternating slices.  Reports both
 *          and the ratio.
 * mlp and fc also report the GEMM floor: the matrix products of one training step (forward NN,
 * backward TN for dW and NT for dX) through bare cblas_sgemm, timed in slices alternating with
 * ours (--floor 0 leaves it out, e.g. to profile ours alone).
 * --amp 1 runs the program through AMP first (bfloat16 products, float32 master weights); --amp 2
 * the same in float16 with dynamic loss scaling.
 * Input data is a pool of 32 batches generated before timing (uniform [-1, 1) features, labels
 * 0/1), cycled through, as the PyTorch reference (bench/torch_ref.py) does.  Each measurement runs
 * --warmup steps, then whole steps until --seconds have passed.
 * Output: "R<TAB>key<TAB>value<TAB>unit" lines (the format of shared/peers), and "# " comments with
 * the OpenBLAS core name, config and thread count.
 */
#include <cblas.h>
#include <fleet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tensor/tensor_internal.h" /* fl__gemm_info */

#define CLI_NAME "bench_train"
#define CLI_HELP_HINT \
    "usage: bench_train mlp|fc|fcfwd [--batch N] [--seconds S] [--warmup N] [--tag T] [--floor 0|1] [--amp 0|1]"
#include "bench_args.h"

#define POOL 32

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CPU seconds all processes spent busy (from /proc/stat) and this process's CPU seconds: their
 * difference over a timed section is the work that other processes did meanwhile, a noise gauge. */
static double sys_busy_s(void)
{
    FILE *f = fopen("/proc/stat", "r");
    unsigned long long v[10] = {0};
    if (!f) return 0;
    int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                   &v[6], &v[7], &v[8], &v[9]);
    fclose(f);
    if (n < 8) return 0;
    unsigned long long busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7]; /* user nice system irq softirq steal */
    return (double)busy / 100.0;                                       /* USER_HZ */
}

static double own_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void die(const char *what)
{
    fprintf(stderr, "bench_train: %s: %s\n", what, fl_last_error());
    exit(1);
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;
static uint64_t rng_next(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}
static float rng_uniform(void) { return (float)(rng_next() >> 40) / 16777216.0f * 2.0f - 1.0f; }

typedef struct {
    fl_tensor *x[POOL], *y[POOL];
} pool;

static void pool_make(pool *p, int batch, int width)
{
    for (int i = 0; i < POOL; i++) {
        p->x[i] = fl_tensor_create(FL_FLOAT32, 2, (const int64_t[]){batch, width});
        p->y[i] = fl_tensor_create(FL_INT64, 2, (const int64_t[]){batch, 1});
        if (!p->x[i] || !p->y[i]) die("allocating the data pool");
        float *x = fl_tensor_f32(p->x[i]);
        int64_t *y = fl_tensor_i64(p->y[i]);
        for (int64_t j = 0; j < (int64_t)batch * width; j++) x[j] = rng_uniform();
        for (int j = 0; j < batch; j++) y[j] = (int64_t)(rng_next() >> 63);
    }
}

static void pool_free(pool *p)
{
    for (int i = 0; i < POOL; i++) {
        fl_tensor_free(p->x[i]);
        fl_tensor_free(p->y[i]);
    }
}

typedef struct {
    fl_prog *prog;
    fl_opt *opt;
    fl_exe *exe;
    const char *fetch; /* loss (training) or output (forward) */
    int has_label;
} model;

/* Runs step i of the pool; returns the fetched value's first element. */
static float run_step(model *m, pool *p, long i)
{
    fl_feed feed[2] = {{"x", p->x[i % POOL]}, {"y", p->y[i % POOL]}};
    fl_tensor *out;
    if (fl_exe_run(m->exe, m->prog, feed, m->has_label ? 2 : 1, &m->fetch, 1, &out) != FL_OK) die("fl_exe_run");
    return fl_tensor_f32(out)[0];
}

static int g_amp; /* --amp */

/* --amp 1: bfloat16, 2: float16 with dynamic loss scaling (through the optimizer when the
 * program trains, else the program rewrite alone). */
static void amp(fl_prog *p, fl_opt *o)
{
    if (!g_amp) return;
    fl_amp_opts a = {g_amp == 2 ? FL_FLOAT16 : FL_BFLOAT16};
    if (o ? fl_amp_decorate_optimizer(o, &a) != FL_OK : fl_amp_decorate(p, &a) < 0) die("AMP");
}

static void build_mlp(model *m)
{
    m->prog = fl_prog_create();
    fl_model_mlp_config cfg = fl_model_mlp_default();
    fl_model_mlp net;
    m->opt = fl_opt_sgd(0.01f);
    if (fl_model_mlp_build(m->prog, &cfg, &net) != FL_OK) die("building the MLP");
    amp(m->prog, m->opt);
    if (fl_opt_minimize(m->opt, net.loss) != FL_OK) die("building the MLP");
    m->fetch = fl_var_name(net.loss);
    m->has_label = 1;
}

static void build_fc(model *m, int train)
{
    fl_prog *p = m->prog = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(273), FL_FLOAT32, 0);
    fl_var *h = x;
    for (int i = 0; i < 3; i++) h = fl_layer_fc(FL_VARS(h), 400, "relu");
    if (train) {
        fl_var *y = fl_layer_data(p, "y", FL_SHAPE(1), FL_INT64, 0);
        fl_var *pred = fl_layer_fc(FL_VARS(h), 2, "softmax");
        fl_var *cost = fl_layer_mean(fl_layer_cross_entropy(pred, y));
        m->opt = fl_opt_sgd(0.01f);
        if (!cost) die("building the fc stack");
        amp(p, m->opt);
        if (fl_opt_minimize(m->opt, cost) != FL_OK) die("building the fc stack");
        m->fetch = fl_var_name(cost);
        m->has_label = 1;
    } else {
        fl_var *out = fl_layer_fc(FL_VARS(h), 2, NULL);
        if (!out) die("building the fc stack");
        amp(p, NULL);
        m->fetch = fl_var_name(out);
        m->has_label = 0;
    }
}

static void model_start(model *m)
{
    m->exe = fl_exe_create(NULL);
    if (!m->exe || fl_exe_run(m->exe, fl_prog_startup(m->prog), NULL, 0, NULL, 0, NULL) != FL_OK) die("startup");
}

static void model_free(model *m)
{
    fl_exe_free(m->exe);
    fl_opt_free(m->opt);
    fl_prog_free(m->prog);
}

static void emit(const char *tag, const char *key, double v, const char *unit, const char *fmt)
{
    char num[64];
    snprintf(num, sizeof num, fmt, v);
    printf("R\t%s.%s\t%s\t%s\n", tag, key, num, unit);
}

/* Bare OpenBLAS chains of the same shapes as a model's fc layers (dims[0] -> ... -> dims[nl]):
 *   forward:    a[i+1] = a[i] W[i]                                   (NN), no bias or activation
 *   train step: forward, then per layer from the top dW[i] = a[i]^T g[i+1] (TN) and, below the
 *               top layer's input, g[i] = g[i+1] W[i]^T (NT): the matrix products a training step
 *               cannot avoid.  The time of this is the GEMM floor of a step. */
#define MAXL 8
typedef struct {
    int batch, nl, dims[MAXL + 1];
    float *a[MAXL + 1], *g[MAXL + 1], *w[MAXL], *dw[MAXL];
} bare_chain;

static float *bare_alloc(int64_t n, float scale)
{
    float *p = aligned_alloc(64, ((size_t)n * sizeof(float) + 63) / 64 * 64);
    if (!p) die("allocating");
    for (int64_t j = 0; j < n; j++) p[j] = scale * rng_uniform();
    return p;
}

static void bare_make(bare_chain *b, int batch, int nl, const int *dims)
{
    memset(b, 0, sizeof *b);
    b->batch = batch;
    b->nl = nl;
    for (int i = 0; i <= nl; i++) {
        b->dims[i] = dims[i];
        b->a[i] = bare_alloc((int64_t)batch * dims[i], 1.0f);
        b->g[i] = bare_alloc((int64_t)batch * dims[i], 0.01f);
    }
    for (int i = 0; i < nl; i++) {
        b->w[i] = bare_alloc((int64_t)dims[i] * dims[i + 1], 0.05f);
        b->dw[i] = bare_alloc((int64_t)dims[i] * dims[i + 1], 0.0f);
    }
}

static double bare_fwd_flop(const bare_chain *b)
{
    double f = 0;
    for (int i = 0; i < b->nl; i++) f += 2.0 * b->batch * b->dims[i] * b->dims[i + 1];
    return f;
}

static void bare_fwd(bare_chain *b)
{
    for (int i = 0; i < b->nl; i++)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, b->batch, b->dims[i + 1], b->dims[i], 1.0f, b->a[i],
                    b->dims[i], b->w[i], b->dims[i + 1], 0.0f, b->a[i + 1], b->dims[i + 1]);
}

static void bare_train(bare_chain *b)
{
    bare_fwd(b);
    for (int i = b->nl - 1; i >= 0; i--) {
        int in = b->dims[i], out = b->dims[i + 1];
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, in, out, b->batch, 1.0f, b->a[i], in, b->g[i + 1], out, 0.0f,
                    b->dw[i], out);
        if (i > 0)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, b->batch, in, out, 1.0f, b->g[i + 1], out, b->w[i], out,
                        0.0f, b->g[i], in);
    }
}

static void bare_free(bare_chain *b)
{
    for (int i = 0; i <= b->nl; i++) {
        free(b->a[i]);
        free(b->g[i]);
    }
    for (int i = 0; i < b->nl; i++) {
        free(b->w[i]);
        free(b->dw[i]);
    }
}


/* threads label of this run, read before Fleet may switch OpenBLAS to one thread
 * (FLEET_NUM_THREADS=2 splits sgemm itself, src/tensor/parallel.c) */
static int g_threads = 1;

int main(int argc, char **argv)
{
    if (argc < 2 || (strcmp(argv[1], "mlp") && strcmp(argv[1], "fc") && strcmp(argv[1], "fcfwd")))
        cli_die(2, "the first argument is the model: mlp, fc or fcfwd");
    g_threads = openblas_get_num_threads();
    const char *mode = argv[1];
    int is_mlp = !strcmp(mode, "mlp");
    int batch = is_mlp ? 128 : 512, warmup = is_mlp ? 200 : 10;
    double seconds = 2.0;
    const char *tag = "";
    int with_floor = 1;
    const bench_opt opts[] = {{"batch", BA_INT, &batch}, {"seconds", BA_DOUBLE, &seconds}, {"warmup", BA_INT, &warmup},
                              {"tag", BA_STR, &tag},     {"floor", BA_INT, &with_floor},   {"amp", BA_INT, &g_amp}};
    bench_args(argc, argv, 2, opts, BA_COUNT(opts), NULL, NULL);
    if (batch <= 0 || !(seconds > 0)) cli_die(2, "--batch and --seconds must be positive");
    const char *ct = getenv("OPENBLAS_CORETYPE");
    printf("# fleet bench_train %s: batch %d, OpenBLAS core %s, %d thread(s), OPENBLAS_CORETYPE=%s, "
           "OPENBLAS_NUM_THREADS=%s; config: %s\n",
           mode, batch, openblas_get_corename(), openblas_get_num_threads(), ct ? ct : "(unset: auto-detect)",
           getenv("OPENBLAS_NUM_THREADS") ? getenv("OPENBLAS_NUM_THREADS") : "(unset)", openblas_get_config());
    char info[256];
    printf("# %s\n", fl__gemm_info(info, sizeof info)); /* FLEET_GEMM's library and ISAs */
    char key[160];
    snprintf(key, sizeof key, "ours.%s.b%d.blas%d%s", mode, batch, g_threads, tag);

    model m = {0};
    pool data;
    if (is_mlp) build_mlp(&m);
    else build_fc(&m, strcmp(mode, "fc") == 0);
    pool_make(&data, batch, is_mlp ? 32 : 273);
    model_start(&m);

    static const int mlp_dims[4] = {32, 128, 128, 2}, fc_dims[5] = {273, 400, 400, 400, 2};
    bare_chain b;
    if (is_mlp) bare_make(&b, batch, 3, mlp_dims);
    else bare_make(&b, batch, 4, fc_dims);
    if (strcmp(mode, "fcfwd") != 0) {
        float first = 0, last = 0;
        for (int i = 0; i < warmup; i++) {
            float v = run_step(&m, &data, i);
            if (i == 0) first = v;
        }
        for (int i = 0; i < warmup && with_floor; i++) bare_train(&b);
        /* 10 slices of ours alternating with shorter slices of the GEMM floor (the same step's
         * matrix products alone through bare cblas_sgemm), so both see the same machine state */
        long steps = 0, nfloor = 0;
        double t_ours = 0, t_floor = 0, b0 = sys_busy_s(), c0 = own_cpu_s(), w0 = now();
        for (int s = 0; s < 10; s++) {
            double t0 = now(), el;
            do {
                for (int k = 0; k < 5; k++, steps++) last = run_step(&m, &data, warmup + steps);
                el = now() - t0;
            } while (el < seconds / 10);
            t_ours += el;
            if (!with_floor) continue;
            t0 = now();
            do {
                bare_train(&b);
                nfloor++;
                el = now() - t0;
            } while (el < seconds / 30);
            t_floor += el;
        }
        double other = (sys_busy_s() - b0 - (own_cpu_s() - c0)) / (now() - w0);
        emit(key, "steps_per_s", steps / t_ours, "steps/s", "%.1f");
        emit(key, "samples_per_s", (double)steps * batch / t_ours, "samples/s", "%.0f");
        emit(key, "ms_per_step", t_ours / steps * 1e3, "ms", "%.4f");
        emit(key, "other_cpu", other > 0 ? other : 0, "cores busy with other processes", "%.2f");
        printf("# %ld timed steps in %.3f s; loss first %.4f, last %.4f\n", steps, t_ours, first, last);
        if (!with_floor) goto done;
        snprintf(key, sizeof key, "sgemmfloor.%s.b%d.blas%d%s", mode, batch, g_threads, tag);
        emit(key, "steps_per_s", nfloor / t_floor, "steps/s", "%.1f");
        emit(key, "samples_per_s", (double)nfloor * batch / t_floor, "samples/s", "%.0f");
        snprintf(key, sizeof key, "ratio.%s.b%d.blas%d%s", mode, batch, g_threads, tag);
        emit(key, "ours_over_sgemmfloor", (steps / t_ours) / (nfloor / t_floor), "x", "%.3f");
    } else {
        double flop = bare_fwd_flop(&b);
        for (int i = 0; i < warmup; i++) {
            run_step(&m, &data, i);
            bare_fwd(&b);
        }
        /* alternate 10 slices of each so both see the same machine state */
        double t_ours = 0, t_bare = 0;
        long n_ours = 0, n_bare = 0;
        double slice = seconds / 20.0, b0 = sys_busy_s(), c0 = own_cpu_s(), w0 = now();
        for (int s = 0; s < 10; s++) {
            double t0 = now(), el;
            do {
                run_step(&m, &data, n_ours++);
                el = now() - t0;
            } while (el < slice);
            t_ours += el;
            t0 = now();
            do {
                bare_fwd(&b);
                n_bare++;
                el = now() - t0;
            } while (el < slice);
            t_bare += el;
        }
        double other = (sys_busy_s() - b0 - (own_cpu_s() - c0)) / (now() - w0);
        double g_ours = flop * n_ours / t_ours * 1e-9, g_bare = flop * n_bare / t_bare * 1e-9;
        emit(key, "gflops", g_ours, "GFLOP/s", "%.1f");
        snprintf(key, sizeof key, "sgemm.%s.b%d.blas%d%s", mode, batch, g_threads, tag);
        emit(key, "gflops", g_bare, "GFLOP/s", "%.1f");
        snprintf(key, sizeof key, "ratio.%s.b%d.blas%d%s", mode, batch, g_threads, tag);
        emit(key, "ours_over_sgemm", g_ours / g_bare, "x", "%.3f");
        snprintf(key, sizeof key, "ours.%s.b%d.blas%d%s", mode, batch, g_threads, tag);
        emit(key, "other_cpu", other > 0 ? other : 0, "cores busy with other processes", "%.2f");
        printf("# %.3f MFLOP per pass; ours %ld passes in %.3f s, bare sgemm %ld passes in %.3f s\n", flop * 1e-6, n_ours,
               t_ours, n_bare, t_bare);
    }
done:
    bare_free(&b);
    pool_free(&data);
    model_free(&m);
    return 0;
}
