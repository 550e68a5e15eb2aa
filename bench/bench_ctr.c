/*
 * bench_ctr.c - CTR-DNN training throughput (examples/s) through fl_exe_train_from_dataset:
 * local Hogwild threads on an InMemoryDataset, one QueueDataset pass (the whole reading path),
 * and parameter-server async training with 1 server + 2 workers on 127.0.0.1.
 *
 *   bench_ctr local --data DIR [--files N] [--batches 32,512] [--threads 1,2] [--seconds S]
 *                   [--queue-batch B] [--optimizer sgd|adam] [--lr X] [--tag T] [--epochs N] [--amp 0|1]
 *                   [--amp-level 1|2]
 *   bench_ctr ps    --data DIR [--files N] [--batches 32,512] [--threads 1] [--seconds S]
 *                   [--strategy KEY=VALUE ...] ...
 *
 * DIR is a fleet-datagen criteo directory (DIR/train/part-*, DIR/test/part-*); the first N
 * train files (default all) are the data, the test files are the warm-up data.  The model is
 * fl_model_ctr_dnn_build's default (26 sparse slots into one [1000001, 10] is_sparse table,
 * sum-pooled, concat with 13 dense, fc 400 relu x3, fc 2 softmax, cross-entropy reduce_sum,
 * auc), SGD lr 1e-3 by default.
 *
 * local: the N files are loaded into an InMemoryDataset before any timing (no shuffle: the
 * records stay in file order, as the PyTorch side bench/ctr_torch.py reads them).  For each
 * batch size and thread count: one warm-up pass over the test files, then whole passes over the
 * data until --seconds have passed (at least one).  examples/s = examples / pass seconds (the
 * pass time fl_exe_train_from_dataset reports, summed).  Per thread = total / threads.
 * --queue-batch B (0: off) adds, per thread count, one QueueDataset pass over the same files at
 * batch B: parsing + batching + training (the full pipeline).  --epochs N (local) replaces the
 * timed passes by N single passes, each timed and printed alone (ours.ctrepoch.bB.tT.epochK_s),
 * and the ratio of the slowest later epoch to the first: with Adam this shows whether later
 * epochs slow down (they did by ~30 % while the optimizer state went subnormal).  --amp 1
 * runs the program through fl_amp_decorate before minimize (bfloat16 products, float32
 * master weights and optimizer state; the peers' bf16 AMP is the comparison).  --amp-level 2
 * (with --amp 1) runs level O2 instead (fl_amp_decorate_optimizer with use_pure_fp16: the fc
 * stack passes bfloat16 activations from layer to layer, the weights' bfloat16 copies are
 * refreshed after each update instead of cast before each product).
 *
 * ps: this process starts 1 server and 2 workers (itself, re-executed with Paddle's PS
 * environment: PADDLE_PSERVERS_IP_PORT_LIST, TRAINING_ROLE, PADDLE_TRAINERS_NUM,
 * PADDLE_TRAINER_ID, POD_IP, PADDLE_PORT, and a generated FLEET_JOB_SECRET), a_sync = true,
 * is_distributed embedding (the table lives on the server); --strategy sets other
 * DistributedStrategy fields (e.g. a_sync_configs.max_merge_var_num=4; default: Paddle's).  Each worker loads its share of
 * the N files (fleet_split_files) into an InMemoryDataset; per config (batch, threads per
 * worker) it runs a warm-up pass, a worker barrier, then passes until --seconds.  Total
 * examples/s = all workers' examples / (last end - first start) (CLOCK_MONOTONIC, one clock
 * for the machine).  Every child dies with this process; the job has a 150 s deadline.
 *
 * OpenBLAS: 1 thread per trainer thread (run with OPENBLAS_NUM_THREADS=1; with 2 or more
 * Hogwild threads fl_exe_train_from_dataset keeps OpenBLAS single-threaded anyway).  The
 * kernel set is whatever OPENBLAS_CORETYPE selects; the core name is printed.
 * Output: "R<TAB>key<TAB>value<TAB>unit" lines and "# " comments, as bench_train.
 */
#include <cblas.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fleet.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tensor/tensor_internal.h" /* fl__gemm_info */
#include "testhelp.h"               /* th_free_port */

#define CLI_NAME "bench_ctr"
#define CLI_HELP_HINT                                                                                    \
    "usage: bench_ctr local|ps --data DIR [--files N] [--batches 32,512] [--threads 1,2] [--seconds S] " \
    "[--queue-batch B] [--optimizer sgd|adam] [--lr X] [--tag T] [--strategy KEY=VALUE] [--epochs N] "   \
    "[--amp 0|1] [--amp-level 1|2] [--table-rows R]"
#include "bench_args.h"

#define MAXCFG 8
#define MAXFILES 256

static struct {
    const char *data, *opt, *tag;
    const char *strategy[8]; /* --strategy KEY=VALUE (ps), after a_sync = true */
    int nstrategy;
    int nfiles, nbatch, nthread, queue_batch, epochs, amp, amp_level;
    int batches[MAXCFG], threads[MAXCFG];
    double seconds, lr;
    int64_t table_rows; /* rows of the shared sparse table (--table-rows) */
} A = {NULL, "sgd", "", {NULL}, 0, 0, 0, 0, 0, 0, 0, 1, {0}, {0}, 2.0, 1e-3, 1000001};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CPU seconds all processes spent busy (/proc/stat) and this process's own: the difference over
 * a timed section is what other processes did meanwhile (noise gauge, as bench_train). */
static double sys_busy_s(void)
{
    FILE *f = fopen("/proc/stat", "r");
    unsigned long long v[10] = {0};
    if (!f) return 0;
    int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                   &v[6], &v[7], &v[8], &v[9]);
    fclose(f);
    if (n < 8) return 0;
    return (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / 100.0;
}

static double own_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void die(const char *what)
{
    fprintf(stderr, "bench_ctr: %s: %s\n", what, fl_last_error());
    exit(1);
}

static int cmp_str(const void *x, const void *y) { return strcmp(*(char *const *)x, *(char *const *)y); }

/* Sorted regular files of DIR/sub (at most max). */
static int list_files(const char *sub, char **out, int max)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/%s", A.data, sub);
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "bench_ctr: cannot open %s: %s\n", dir, strerror(errno));
        exit(1);
    }
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < max) {
        if (e->d_name[0] == '.' || strstr(e->d_name, ".tmp")) continue;
        size_t len = strlen(dir) + strlen(e->d_name) + 2;
        out[n] = malloc(len);
        if (!out[n]) break;
        snprintf(out[n], len, "%s/%s", dir, e->d_name);
        n++;
    }
    closedir(d);
    qsort(out, (size_t)n, sizeof *out, cmp_str);
    return n;
}

static int parse_list(const char *s, int *out)
{
    int n = 0;
    while (*s && n < MAXCFG) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1) {
            fprintf(stderr, "bench_ctr: bad list '%s'\n", s);
            exit(2);
        }
        out[n++] = (int)v;
        s = *end == ',' ? end + 1 : end;
    }
    return n;
}

/* --batches, --threads and --strategy (repeated) for bench_args */
static int opt_batches(const char *v, void *dst)
{
    (void)dst;
    A.nbatch = parse_list(v, A.batches);
    return 0;
}
static int opt_threads(const char *v, void *dst)
{
    (void)dst;
    A.nthread = parse_list(v, A.threads);
    return 0;
}
static int opt_strategy(const char *v, void *dst)
{
    (void)dst;
    if (A.nstrategy == 8) return -1;
    A.strategy[A.nstrategy++] = v;
    return 0;
}

typedef struct {
    fl_prog *prog;
    fl_model_ctr_dnn m;
    fl_opt *opt;
    fleet_t *fleet; /* ps only */
} model;

/* Builds CTR-DNN and its optimizer (through fleet in PS mode, before minimize). */
static void build(model *md, int distributed)
{
    md->prog = fl_prog_create();
    fl_model_ctr_dnn_config cfg = fl_model_ctr_dnn_default();
    cfg.is_distributed = distributed;
    cfg.sparse_feature_dim = A.table_rows;
    if (fl_model_ctr_dnn_build(md->prog, &cfg, &md->m) != FL_OK) die("building CTR-DNN");
    md->opt = !strcmp(A.opt, "adam") ? fl_opt_adam((float)A.lr, 0.9f, 0.999f, 1e-8f) : fl_opt_sgd((float)A.lr);
    if (!md->opt) die("optimizer");
    if (distributed) {
        fleet_strategy s = fleet_strategy_default();
        if (fleet_strategy_set(&s, "a_sync", "true") != FL_OK) die("strategy");
        for (int i = 0; i < A.nstrategy; i++) {
            char kv[256], *eq;
            snprintf(kv, sizeof kv, "%s", A.strategy[i]);
            if (!(eq = strchr(kv, '='))) {
                fprintf(stderr, "bench_ctr: --strategy wants KEY=VALUE, got '%s'\n", A.strategy[i]);
                exit(2);
            }
            *eq = 0;
            if (fleet_strategy_set(&s, kv, eq + 1) != FL_OK) die("--strategy");
        }
        md->fleet = fleet_init(NULL, &s);
        if (!md->fleet) die("fleet_init");
        md->opt = fleet_distributed_optimizer(md->fleet, md->opt, &s);
        if (!md->opt) die("fleet_distributed_optimizer");
    }
    if (A.amp && A.amp_level == 1 && fl_amp_decorate(md->prog, NULL) < 0) die("fl_amp_decorate");
    if (A.amp && A.amp_level == 2) {
        fl_amp_opts o = {FL_BFLOAT16};
        o.use_pure_fp16 = 1;
        if (fl_amp_decorate_optimizer(md->opt, &o) != FL_OK) die("fl_amp_decorate_optimizer");
    }
    if (fl_opt_minimize(md->opt, md->m.loss) != FL_OK) die("minimize");
}

static fl_dataset *dataset(model *md, const char *kind, const char *const *files, int n, int load)
{
    fl_dataset *ds = fl_dataset_create(kind);
    if (!ds || fl_dataset_set_use_var(ds, md->m.use_var, md->m.nuse_var) != FL_OK ||
        fl_dataset_set_format(ds, "criteo") != FL_OK || fl_dataset_set_sparse_feature_dim(ds, A.table_rows) != FL_OK ||
        fl_dataset_set_thread(ds, n) != FL_OK || fl_dataset_set_filelist(ds, files, n) != FL_OK)
        die("dataset");
    if (load && fl_dataset_load_into_memory(ds) != FL_OK) die("load_into_memory");
    return ds;
}

static void set_cfg(fl_dataset *ds, int batch, int threads)
{
    if (fl_dataset_set_batch_size(ds, batch) != FL_OK || fl_dataset_set_thread(ds, threads) != FL_OK) die("dataset config");
}

typedef struct {
    long long instances;
    int passes;
    double seconds, loss;
} run_res;

/* Whole passes until `seconds` of pass time (at least one pass). */
static run_res train(fl_exe *exe, model *md, fl_dataset *ds, int threads, double seconds)
{
    const char *fetch[1] = {fl_var_name(md->m.loss)};
    run_res r = {0, 0, 0, 0};
    do {
        fl_exe_dataset_stats s;
        if (fl_exe_train_from_dataset(exe, md->prog, ds, threads, fetch, NULL, 1, 0, &s) != FL_OK)
            die("train_from_dataset");
        r.instances += s.instances;
        r.seconds += s.seconds;
        r.loss = s.fetch[0];
        r.passes++;
    } while (r.seconds < seconds);
    return r;
}

static void emit(const char *key, const char *what, double v, const char *unit, const char *fmt)
{
    char num[64];
    snprintf(num, sizeof num, fmt, v);
    printf("R\t%s%s.%s\t%s\t%s\n", key, A.tag, what, num, unit);
}

static void header(const char *mode)
{
    const char *ct = getenv("OPENBLAS_CORETYPE");
    printf("# fleet bench_ctr %s: OpenBLAS core %s, %d thread(s), OPENBLAS_CORETYPE=%s, OPENBLAS_NUM_THREADS=%s; "
           "optimizer %s lr %g; seconds %.2f; config: %s\n",
           mode, openblas_get_corename(), openblas_get_num_threads(), ct ? ct : "(unset: auto-detect)",
           getenv("OPENBLAS_NUM_THREADS") ? getenv("OPENBLAS_NUM_THREADS") : "(unset)", A.opt, A.lr, A.seconds,
           openblas_get_config());
    char info[256];
    printf("# %s\n", fl__gemm_info(info, sizeof info)); /* FLEET_GEMM's library and ISAs */
    fflush(stdout);
}

/* ---- local ------------------------------------------------------------------------------ */

/* Subnormal float32 values (0 < |x| < FLT_MIN) in the root scope, and all float32 values:
 * the optimizer moments of dead units decay into this range, where x86 arithmetic is slow. */
static void count_subnormal(fl_exe *exe, long long *sub, long long *all, char *top, size_t cap)
{
    fl_scope *sc = fl_exe_scope(exe);
    long long best = 0;
    *sub = *all = 0;
    snprintf(top, cap, "-");
    for (int i = 0; i < fl_scope_num_vars(sc); i++) {
        const fl_tensor *t = fl_scope_find(sc, fl_scope_name_at(sc, i));
        if (!t || fl_tensor_dtype(t) != FL_FLOAT32) continue;
        const float *x = fl_tensor_cdata(t);
        long long n = 0;
        for (int64_t j = 0; j < fl_tensor_numel(t); j++) n += fpclassify(x[j]) == FP_SUBNORMAL;
        if (n > best) {
            best = n;
            snprintf(top, cap, "%s %lld of %lld", fl_scope_name_at(sc, i), n, (long long)fl_tensor_numel(t));
        }
        *sub += n;
        *all += fl_tensor_numel(t);
    }
}

/* --epochs N: N single passes over the data, each timed alone; prints every epoch's seconds
 * and the ratio of the slowest later epoch to the first (flat epochs: about 1). */
static void epochs(fl_exe *exe, model *md, fl_dataset *mem, int b, int t)
{
    double first = 0, worst = 0;
    char key[96];
    snprintf(key, sizeof key, "ours.ctrepoch.b%d.t%d", b, t);
    for (int ep = 0; ep < A.epochs; ep++) {
        run_res r = train(exe, md, mem, t, 0);
        char what[32];
        snprintf(what, sizeof what, "epoch%d_s", ep + 1);
        emit(key, what, r.seconds, "s", "%.3f");
        if (ep == 0) first = r.seconds;
        else if (r.seconds > worst) worst = r.seconds;
        long long sub, all;
        char top[160];
        count_subnormal(exe, &sub, &all, top, sizeof top);
        printf("# b%d t%d epoch %d: %lld examples in %.3f s (%.0f examples/s), last loss %.4f; subnormal floats in the "
               "scope afterwards: %lld of %lld (most: %s)\n",
               b, t, ep + 1, r.instances, r.seconds, r.instances / r.seconds, r.loss, sub, all, top);
        fflush(stdout);
    }
    if (A.epochs > 1) emit(key, "slowest_later_over_first", worst / first, "ratio", "%.3f");
}

static int run_local(void)
{
    header("local");
    char *train_f[MAXFILES], *test_f[MAXFILES];
    int ntrain = list_files("train", train_f, MAXFILES), ntest = list_files("test", test_f, MAXFILES);
    if (A.nfiles > 0 && A.nfiles < ntrain) ntrain = A.nfiles;
    if (ntrain < 1 || ntest < 1) {
        fprintf(stderr, "bench_ctr: no train or test files under %s\n", A.data);
        return 1;
    }
    model md = {0};
    build(&md, 0);
    fl_exe *exe = fl_exe_create(NULL);
    if (!exe || fl_exe_run(exe, fl_prog_startup(md.prog), NULL, 0, NULL, 0, NULL) != FL_OK) die("startup");
    double t0 = now();
    fl_dataset *mem = dataset(&md, "InMemoryDataset", (const char *const *)train_f, ntrain, 1);
    double tl = now() - t0;
    fl_dataset *warm = dataset(&md, "InMemoryDataset", (const char *const *)test_f, ntest, 1);
    printf("# data: %d train files, %lld examples in memory (loaded in %.2f s, not timed); warm-up: %lld examples\n",
           ntrain, (long long)fl_dataset_get_memory_data_size(mem), tl, (long long)fl_dataset_get_memory_data_size(warm));
    for (int bi = 0; bi < A.nbatch; bi++)
        for (int ti = 0; ti < A.nthread; ti++) {
            int b = A.batches[bi], t = A.threads[ti];
            set_cfg(mem, b, t);
            set_cfg(warm, b, t);
            if (fl_dataset_thread_num(mem) != t) {
                fprintf(stderr, "bench_ctr: %d threads need at least %d train files (--files)\n", t, t);
                return 1;
            }
            train(exe, &md, warm, t, 0);
            if (A.epochs > 0) {
                epochs(exe, &md, mem, b, t);
                continue;
            }
            double b0 = sys_busy_s(), c0 = own_cpu_s(), w0 = now();
            run_res r = train(exe, &md, mem, t, A.seconds);
            double other = (sys_busy_s() - b0 - (own_cpu_s() - c0)) / (now() - w0);
            char key[96];
            snprintf(key, sizeof key, "ours.ctr.b%d.t%d", b, t);
            emit(key, "ex_per_s", r.instances / r.seconds, "examples/s", "%.0f");
            emit(key, "ex_per_s_per_thread", r.instances / r.seconds / t, "examples/s", "%.0f");
            emit(key, "other_cpu", other > 0 ? other : 0, "cores busy with other processes", "%.2f");
            printf("# b%d t%d: %d pass(es), %lld examples in %.3f s; last loss (sum over the batch) %.4f\n", b, t, r.passes,
                   r.instances, r.seconds, r.loss);
            fflush(stdout);
        }
    if (A.queue_batch > 0)
        for (int ti = 0; ti < A.nthread; ti++) {
            int t = A.threads[ti];
            fl_dataset *q = dataset(&md, "QueueDataset", (const char *const *)train_f, ntrain, 0);
            set_cfg(q, A.queue_batch, t);
            double b0 = sys_busy_s(), c0 = own_cpu_s(), w0 = now();
            run_res r = train(exe, &md, q, t, 0);
            double other = (sys_busy_s() - b0 - (own_cpu_s() - c0)) / (now() - w0);
            char key[96];
            snprintf(key, sizeof key, "ours.ctrqueue.b%d.t%d", A.queue_batch, t);
            emit(key, "ex_per_s", r.instances / r.seconds, "examples/s", "%.0f");
            emit(key, "ex_per_s_per_thread", r.instances / r.seconds / t, "examples/s", "%.0f");
            emit(key, "other_cpu", other > 0 ? other : 0, "cores busy with other processes", "%.2f");
            printf("# QueueDataset b%d t%d: one pass, parse + batch + train, %lld examples in %.3f s\n", A.queue_batch, t,
                   r.instances, r.seconds);
            fl_dataset_free(q);
        }
    fl_dataset_free(warm);
    fl_dataset_free(mem);
    fl_exe_free(exe);
    fl_opt_free(md.opt);
    fl_prog_free(md.prog);
    for (int i = 0; i < ntrain; i++) free(train_f[i]);
    for (int i = 0; i < ntest; i++) free(test_f[i]);
    return 0;
}

/* ---- parameter server ------------------------------------------------------------------- */

static int ps_server(void)
{
    model md = {0};
    build(&md, 1);
    if (!fleet_is_server(md.fleet)) die("ps-server: not a server");
    if (fleet_init_server(md.fleet, NULL) != FL_OK || fleet_run_server(md.fleet) != FL_OK) die("server");
    fleet_free(md.fleet);
    return 0;
}

/* Prints per config: "W<TAB>batch<TAB>threads<TAB>examples<TAB>start<TAB>end<TAB>pass seconds<TAB>loss". */
static int ps_worker(void)
{
    char *train_f[MAXFILES], *test_f[MAXFILES];
    int ntrain = list_files("train", train_f, MAXFILES), ntest = list_files("test", test_f, MAXFILES);
    if (A.nfiles > 0 && A.nfiles < ntrain) ntrain = A.nfiles;
    model md = {0};
    build(&md, 1);
    const char **mine;
    int nmine;
    if (fleet_split_files(md.fleet, (const char *const *)train_f, ntrain, &mine, &nmine) != FL_OK) die("split files");
    fl_dataset *mem = dataset(&md, "InMemoryDataset", mine, nmine, 1);
    fl_dataset *warm = dataset(&md, "InMemoryDataset", (const char *const *)test_f, ntest, 1);
    fl_exe *exe = fl_exe_create(NULL);
    if (!exe || fleet_init_worker(md.fleet) != FL_OK ||
        fl_exe_run(exe, fl_prog_startup(md.prog), NULL, 0, NULL, 0, NULL) != FL_OK)
        die("worker start");
    printf("# worker %d: %d files, %lld examples in memory\n", fleet_worker_index(md.fleet), nmine,
           (long long)fl_dataset_get_memory_data_size(mem));
    for (int bi = 0; bi < A.nbatch; bi++)
        for (int ti = 0; ti < A.nthread; ti++) {
            int b = A.batches[bi], t = A.threads[ti];
            set_cfg(mem, b, t);
            set_cfg(warm, b, t);
            if (fl_dataset_thread_num(mem) != t) {
                fprintf(stderr, "bench_ctr: %d threads per worker need at least %d files per worker\n", t, t);
                exit(1);
            }
            train(exe, &md, warm, t, 0);
            if (fleet_barrier_worker(md.fleet) != FL_OK) die("barrier");
            double s0 = now();
            run_res r = train(exe, &md, mem, t, A.seconds);
            double s1 = now();
            printf("W\t%d\t%d\t%lld\t%.6f\t%.6f\t%.6f\t%.4f\n", b, t, r.instances, s0, s1, r.seconds, r.loss);
            fflush(stdout);
        }
    if (fleet_barrier_worker(md.fleet) != FL_OK || fleet_stop_worker(md.fleet) != FL_OK) die("stop worker");
    fl_dataset_free(warm);
    fl_dataset_free(mem);
    free(mine);
    fl_exe_free(exe);
    fleet_free(md.fleet);
    return 0;
}

typedef struct {
    pid_t pid;
    int done, status;
    char log[256];
} child;

static void spawn(child *c, char **argv, const char *logdir, const char *name, const char *role, int idx, const char *list,
                  int port, const char *secret)
{
    snprintf(c->log, sizeof c->log, "%s/%s.log", logdir, name);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        perror("bench_ctr: fork");
        exit(1);
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int fd = open(c->log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0) _exit(127);
        char num[16];
        setenv("PADDLE_PSERVERS_IP_PORT_LIST", list, 1);
        setenv("PADDLE_TRAINERS_NUM", "2", 1);
        setenv("FLEET_JOB_SECRET", secret, 1);
        setenv("TRAINING_ROLE", role, 1);
        snprintf(num, sizeof num, "%d", idx);
        if (!strcmp(role, "PSERVER")) {
            char p[16];
            snprintf(p, sizeof p, "%d", port);
            setenv("POD_IP", "127.0.0.1", 1);
            setenv("PADDLE_PORT", p, 1);
        } else {
            setenv("PADDLE_TRAINER_ID", num, 1);
        }
        unsetenv("PADDLE_TRAINER_ENDPOINTS");
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    c->pid = pid;
}

static void dump_log(const child *c)
{
    FILE *f = fopen(c->log, "r");
    if (!f) return;
    static char buf[4096];
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, n > (long)sizeof buf - 1 ? n - (long)sizeof buf + 1 : 0, SEEK_SET);
    size_t r = fread(buf, 1, sizeof buf - 1, f);
    buf[r] = 0;
    fclose(f);
    fprintf(stderr, "---- %s (tail)\n%s\n", c->log, buf);
}

static int run_ps(int argc, char **argv)
{
    header("ps");
    char logdir[] = "/tmp/bench_ctr_psXXXXXX";
    if (!mkdtemp(logdir)) {
        perror("bench_ctr: mkdtemp");
        return 1;
    }
    char secret[65];
    FILE *ur = fopen("/dev/urandom", "rb");
    unsigned char rnd[32];
    if (!ur || fread(rnd, 1, 32, ur) != 32) {
        fprintf(stderr, "bench_ctr: /dev/urandom\n");
        return 1;
    }
    fclose(ur);
    for (int i = 0; i < 32; i++) snprintf(secret + 2 * i, 3, "%02x", rnd[i]);
    int port = th_free_port();
    char list[64];
    snprintf(list, sizeof list, "127.0.0.1:%d", port);
    /* the children run this program with the same options, the mode replaced by their role */
    char *cargv[64];
    int na = 0;
    cargv[na++] = argv[0];
    cargv[na++] = "ps-server";
    for (int i = 2; i < argc && na < 62; i++) cargv[na++] = argv[i];
    cargv[na] = NULL;
    child ch[3];
    memset(ch, 0, sizeof ch);
    spawn(&ch[0], cargv, logdir, "server", "PSERVER", 0, list, port, secret);
    cargv[1] = "ps-worker";
    spawn(&ch[1], cargv, logdir, "worker0", "TRAINER", 0, list, port, secret);
    spawn(&ch[2], cargv, logdir, "worker1", "TRAINER", 1, list, port, secret);
    double deadline = now() + 150, b0 = sys_busy_s(), w0 = now();
    int failed = 0, left = 3;
    while (left > 0) {
        for (int i = 0; i < 3; i++) {
            if (ch[i].done) continue;
            pid_t r = waitpid(ch[i].pid, &ch[i].status, WNOHANG);
            if (r == ch[i].pid) {
                ch[i].done = 1;
                left--;
                if (!WIFEXITED(ch[i].status) || WEXITSTATUS(ch[i].status) != 0) {
                    fprintf(stderr, "bench_ctr: ps child %s failed (status 0x%x)\n", ch[i].log, ch[i].status);
                    failed = 1;
                }
            }
        }
        if (failed || now() > deadline) break;
        usleep(20000);
    }
    if (left > 0) {
        if (!failed) fprintf(stderr, "bench_ctr: the PS job passed its 150 s deadline\n");
        failed = 1;
        for (int i = 0; i < 3; i++)
            if (!ch[i].done) kill(ch[i].pid, SIGKILL);
        for (int i = 0; i < 3; i++)
            if (!ch[i].done) waitpid(ch[i].pid, &ch[i].status, 0), ch[i].done = 1;
    }
    double busy = (sys_busy_s() - b0) / (now() - w0);
    if (failed) {
        for (int i = 0; i < 3; i++) dump_log(&ch[i]);
        return 1;
    }
    /* aggregate the workers' W lines per config */
    for (int bi = 0; bi < A.nbatch; bi++)
        for (int ti = 0; ti < A.nthread; ti++) {
            int b = A.batches[bi], t = A.threads[ti];
            long long inst = 0;
            double start = 1e300, end = 0, rate_sum = 0;
            int got = 0;
            for (int w = 1; w <= 2; w++) {
                FILE *f = fopen(ch[w].log, "r");
                char line[512];
                while (f && fgets(line, sizeof line, f)) {
                    int lb, lt;
                    long long n;
                    double s0, s1, ps, loss;
                    if (sscanf(line, "W\t%d\t%d\t%lld\t%lf\t%lf\t%lf\t%lf", &lb, &lt, &n, &s0, &s1, &ps, &loss) == 7 &&
                        lb == b && lt == t) {
                        inst += n;
                        if (s0 < start) start = s0;
                        if (s1 > end) end = s1;
                        rate_sum += n / ps;
                        got++;
                        printf(
                            "# ps b%d worker %d x %d thread(s): %lld examples, %.3f s of passes, %.0f examples/s, last loss %.4f\n",
                            b, w - 1, t, n, ps, n / ps, loss);
                    }
                }
                if (f) fclose(f);
            }
            if (got != 2) {
                fprintf(stderr, "bench_ctr: ps b%d t%d: %d worker results, expected 2\n", b, t, got);
                return 1;
            }
            char key[96];
            snprintf(key, sizeof key, "ours.ctrps.b%d.w2t%d", b, t);
            emit(key, "ex_per_s", inst / (end - start), "examples/s", "%.0f");
            emit(key, "ex_per_s_per_thread", inst / (end - start) / (2 * t), "examples/s", "%.0f");
            emit(key, "sum_worker_ex_per_s", rate_sum, "examples/s", "%.0f");
            printf("# ps b%d, 2 workers x %d thread(s): %lld examples from first start to last end %.3f s\n", b, t, inst,
                   end - start);
        }
    printf("# ps job: %.2f cores busy on average over the whole job (server + workers + rest of the machine)\n", busy);
    for (int i = 0; i < 3; i++) unlink(ch[i].log);
    rmdir(logdir);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) cli_die(2, "the first argument is the mode: local or ps");
    const char *mode = argv[1];
    A.nbatch = parse_list("32,512", A.batches);
    A.nthread = parse_list("1,2", A.threads);
    const bench_opt opts[] = {{"data", BA_STR, &A.data},
                              {"files", BA_INT, &A.nfiles},
                              {"batches", BA_FN, NULL, opt_batches},
                              {"threads", BA_FN, NULL, opt_threads},
                              {"seconds", BA_DOUBLE, &A.seconds},
                              {"queue-batch", BA_INT, &A.queue_batch},
                              {"optimizer", BA_STR, &A.opt},
                              {"lr", BA_DOUBLE, &A.lr},
                              {"tag", BA_STR, &A.tag},
                              {"epochs", BA_INT, &A.epochs},
                              {"amp", BA_INT, &A.amp},
                              {"amp-level", BA_INT, &A.amp_level},
                              {"table-rows", BA_I64, &A.table_rows},
                              {"strategy", BA_FN, NULL, opt_strategy}};
    bench_args(argc, argv, 2, opts, BA_COUNT(opts), NULL, NULL);
    if (!A.data) cli_die(2, "--data DIR is required");
    if (A.seconds < 0 || A.epochs < 0 || A.table_rows < 2 || (A.amp != 0 && A.amp != 1) ||
        (A.amp_level != 1 && A.amp_level != 2) || !(A.lr > 0) || (strcmp(A.opt, "sgd") && strcmp(A.opt, "adam")))
        cli_die(2, "--seconds and --epochs >= 0, --table-rows >= 2, --amp 0|1, --amp-level 1|2, --lr > 0, "
                   "--optimizer sgd|adam");
    if (!strcmp(mode, "local")) return run_local();
    if (!strcmp(mode, "ps")) return run_ps(argc, argv);
    if (!strcmp(mode, "ps-server")) return ps_server();
    if (!strcmp(mode, "ps-worker")) return ps_worker();
    cli_die(2, "unknown mode '%s' (local or ps)", mode);
}
