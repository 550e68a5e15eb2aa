/*
 * bench_dgc.c - strategy.dgc against plain momentum allreduce: bytes on the transport per
 * step and time per step, with NP ranks this program forks on 127.0.0.1.
 *
 *   bench_dgc [--np N] [--in I] [--hid H] [--steps S] [--rounds R] [--sparsity X]
 *             [--backend shm|tcp]
 *
 * Model: fc I -> H (relu) -> fc H -> 4 (softmax), batch 32 per rank, Momentum 0.9; only
 * fc_0.w_0 (I x H floats, default 512 x 1024 = 2 MiB) is large enough to be compressed.
 * Each round runs a momentum job and a DGC job (sparsity X, default 0.999, rampup from
 * step 3, so steps 0-2 are dense), one after the other, alternating which goes first;
 * time per step is rank 0's median over the steps after the third.  Bytes per step are
 * rank 0's bytes on the transport during DGC's exchanges of fc_0.w_0
 * (fleet_dgc_stats_get): its dense steps against its sparse steps.  Prints medians over the
 * rounds and the ratios.  A ring allreduce sends 8 N (n-1)/n bytes per rank for N floats, the
 * all-gather of k (index, value) pairs 8 k (n-1): the expected ratio is n k / N.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include "testhelp.h"

#define CLI_NAME "bench_dgc"
#define CLI_HELP_HINT \
    "usage: bench_dgc [--np 2] [--in 512] [--hid 1024] [--steps 30] [--rounds 3] [--sparsity 0.999] [--backend shm|tcp]"
#include "bench_args.h"

#define NCLS 4
#define B 32
#define WARM 3
#define MAX_STEPS 1000

typedef struct {
    int np, in, hid, steps, rounds;
    double sparsity;
    const char *backend;
} opts;

typedef struct {
    double ms_step;
    fleet_dgc_stats st;
} result;

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *x, int n)
{
    qsort(x, (size_t)n, sizeof *x, cmp_d);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

static void run_rank(const opts *o, int dgc, int rank, const char *eps, int fd)
{
    char id[16], cfg[256];
    snprintf(id, sizeof id, "%d", rank);
    setenv("PADDLE_TRAINER_ID", id, 1);
    setenv("PADDLE_TRAINER_ENDPOINTS", eps, 1);
    setenv("FLEET_JOB_SECRET", "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff", 1);
    setenv("FLEET_COLL_BACKEND", o->backend, 1);
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(o->in), FL_FLOAT32, 0);
    fl_var *y = fl_layer_data(p, "y", FL_SHAPE(1), FL_INT64, 0);
    fl_var *h = fl_layer_fc(FL_VARS(x), o->hid, "relu");
    fl_var *cost = fl_layer_mean(fl_layer_cross_entropy(fl_layer_fc(FL_VARS(h), NCLS, "softmax"), y));
    fleet_strategy s = fleet_strategy_default();
    if (dgc) {
        snprintf(cfg, sizeof cfg, "dgc=true\ndgc_configs.rampup_begin_step=%d\ndgc_configs.sparsity=%.9g\n", WARM,
                 o->sparsity);
        CHECK_OK(fleet_strategy_parse(&s, cfg));
    }
    fleet_t *f = fleet_init_collective(NULL, &s);
    CHECK(f);
    fl_opt *opt = fleet_distributed_optimizer(f, fl_opt_momentum(0.01f, 0.9f, 0), NULL);
    CHECK(opt);
    CHECK_OK(fl_opt_minimize(opt, cost));
    fl_exe *e = fl_exe_create(NULL);
    CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
    float *xs = malloc(sizeof(float) * B * (size_t)o->in);
    int64_t ys[B];
    double t[MAX_STEPS];
    for (int st = 0; st < o->steps; st++) {
        for (int i = 0; i < B; i++) {
            for (int j = 0; j < o->in; j++) xs[i * o->in + j] = (float)((st * 131 + i * 17 + j * 7 + rank) % 23) / 23.0f;
            ys[i] = (st + i + rank) % NCLS;
        }
        fl_tensor *xt = th_f32(2, (const int64_t[]){B, o->in}, xs), *yt = th_i64(2, (const int64_t[]){B, 1}, ys);
        fl_feed feed[2] = {{"x", xt}, {"y", yt}};
        double t0 = now_ms();
        CHECK_OK(fl_exe_run(e, p, feed, 2, NULL, 0, NULL));
        t[st] = now_ms() - t0;
        fl_tensor_free(xt);
        fl_tensor_free(yt);
    }
    result r;
    memset(&r, 0, sizeof r);
    r.ms_step = median(t + WARM + 1, o->steps - WARM - 1);
    CHECK_OK(fleet_dgc_stats_get(f, &r.st));
    CHECK_OK(fleet_stop_worker(f));
    if (rank == 0) CHECK(write(fd, &r, sizeof r) == (ssize_t)sizeof r);
    free(xs);
    fl_exe_free(e);
    fl_opt_free(opt);
    fleet_free(f);
    fl_prog_free(p);
}

static result run_job(const opts *o, int dgc)
{
    char eps[1024] = "";
    for (int r = 0; r < o->np; r++)
        snprintf(eps + strlen(eps), sizeof eps - strlen(eps), "%s127.0.0.1:%d", r ? "," : "", th_free_port());
    int pd[2];
    CHECK(pipe(pd) == 0);
    pid_t pids[16];
    for (int r = 0; r < o->np; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            alarm(600);
            run_rank(o, dgc, r, eps, pd[1]);
            _exit(0);
        }
    }
    close(pd[1]);
    result res;
    CHECK(read(pd[0], &res, sizeof res) == (ssize_t)sizeof res);
    close(pd[0]);
    for (int r = 0; r < o->np; r++) {
        int ws;
        CHECK(waitpid(pids[r], &ws, 0) == pids[r]);
        if (!WIFEXITED(ws) || WEXITSTATUS(ws)) TFAIL("rank %d failed (status %d)", r, ws);
    }
    return res;
}

static int parse(int argc, char **argv, opts *o)
{
    *o = (opts){2, 512, 1024, 30, 3, 0.999, "shm"};
    const bench_opt table[] = {{"np", BA_INT, &o->np},          {"in", BA_INT, &o->in},
                               {"hid", BA_INT, &o->hid},        {"steps", BA_INT, &o->steps},
                               {"rounds", BA_INT, &o->rounds},  {"sparsity", BA_DOUBLE, &o->sparsity},
                               {"backend", BA_STR, &o->backend}};
    bench_args(argc, argv, 1, table, BA_COUNT(table), NULL, NULL);
    if (o->np < 2 || o->np > 16 || o->in < 1 || o->hid < 1 || o->steps < WARM + 3 || o->steps > MAX_STEPS ||
        o->rounds < 1 || o->rounds > 32 || !(o->sparsity >= 0 && o->sparsity < 1) ||
        (strcmp(o->backend, "shm") && strcmp(o->backend, "tcp")))
        return fprintf(stderr,
                       "bench_dgc: --np 2..16, --steps %d..%d, --rounds 1..32, --sparsity in [0, 1), "
                       "--backend shm or tcp\n",
                       WARM + 3, MAX_STEPS),
               -1;
    return 0;
}

int main(int argc, char **argv)
{
    opts o;
    if (parse(argc, argv, &o)) return 2;
    double tm[32], td[32], bd[32], bs[32];
    for (int r = 0; r < o.rounds; r++) {
        result m, d;
        if (r % 2) {
            d = run_job(&o, 1);
            m = run_job(&o, 0);
        } else {
            m = run_job(&o, 0);
            d = run_job(&o, 1);
        }
        tm[r] = m.ms_step;
        td[r] = d.ms_step;
        bd[r] = d.st.dense_steps ? (double)d.st.dense_bytes / (double)d.st.dense_steps : 0;
        bs[r] = d.st.sparse_steps ? (double)d.st.sparse_bytes / (double)d.st.sparse_steps : 0;
        fprintf(stderr, "round %d: momentum %.2f ms/step, DGC %.2f ms/step; bytes/step dense %.0f, sparse %.0f\n", r, tm[r],
                td[r], bd[r], bs[r]);
    }
    double mm = median(tm, o.rounds), md = median(td, o.rounds), mbd = median(bd, o.rounds), mbs = median(bs, o.rounds);
    printf("np %d, %s, fc_0.w_0 %d x %d (%d floats), sparsity %g, %d steps x %d rounds (medians)\n", o.np, o.backend, o.in,
           o.hid, o.in * o.hid, o.sparsity, o.steps, o.rounds);
    /* ring allreduce: 8 N (n-1)/n bytes; all-gather of k pairs: 8 k (n-1): ratio n k / N */
    printf("bytes/step: dense %.0f, sparse %.0f, ratio %.5f (np x (1 - sparsity) = %.5f)\n", mbd, mbs,
           mbd > 0 ? mbs / mbd : 0.0, o.np * (1 - o.sparsity));
    printf("ms/step: momentum %.2f, DGC %.2f, DGC / momentum %.2f\n", mm, md, mm > 0 ? md / mm : 0.0);
    return 0;
}
