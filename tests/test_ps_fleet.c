/*
 * test_ps_fleet.c - parameter-server mode of the fleet facade.  Multi-process cases start
 * BUILD/tests/bin/ps_train as servers and workers on 127.0.0.1 (each with Paddle's
 * environment, as fleetrun sets it) and compare with ps_train run locally:
 *   - sync mode with 2 servers and 2 workers equals local training on the global batch
 *     (parameters within 1e-5; SGD with L2, Adam, Adagrad; with a sparse is_distributed
 *     embedding looked up by two slots, one with padding_idx);
 *   - async and GEO converge on the quick-start task;
 *   - save -> stop everything -> restart the servers from the checkpoint -> continue is
 *     bit-exact with an uninterrupted sync run;
 *   - a SIGKILLed worker makes the servers exit non-zero within 10 s, and fleetrun reports it;
 *   - a missing server makes fleet_init_worker fail within its deadline naming the endpoint.
 * In-process cases check the program rewrite and the errors of unsupported combinations.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <time.h>

#include "ps_job.h"
#include "testhelp.h"
#include "fleet/ps/fleet_ps.h"

static char FLEETRUN[PATH_MAX], EXAMPLE[PATH_MAX];

static void paths(void)
{
    char self[PATH_MAX - 64];
    th_tests_dir(self, sizeof self);
    snprintf(PS_TRAIN, sizeof PS_TRAIN, "%s/bin/ps_train", self);
    snprintf(FLEETRUN, sizeof FLEETRUN, "%s/../tools/fleetrun", self);
    snprintf(EXAMPLE, sizeof EXAMPLE, "%s/../examples/quick_start/distributed_train", self);
}

/* ---- comparing dumps --------------------------------------------------------------------------- */

typedef struct {
    char **names;
    fl_tensor **ts;
    int n;
} dump_t;

static dump_t read_dump(const char *path)
{
    dump_t d;
    CHECK_OK(fl_io_read_safetensors(path, &d.names, &d.ts, &d.n));
    return d;
}

static const fl_tensor *find_t(const dump_t *d, const char *name)
{
    for (int i = 0; i < d->n; i++)
        if (!strcmp(d->names[i], name)) return d->ts[i];
    return NULL;
}

/* Every tensor of want is in got with the same shape and values within tol (abs + rel);
 * tol 0 means bit-exact.  Returns the largest difference. */
static double compare(const dump_t *want, const dump_t *got, double tol)
{
    double worst = 0;
    for (int i = 0; i < want->n; i++) {
        const fl_tensor *a = want->ts[i], *b = find_t(got, want->names[i]);
        if (!b) TFAIL("parameter %s is missing", want->names[i]);
        CHECK_EQ_INT(fl_tensor_numel(a), fl_tensor_numel(b));
        const float *x = fl_tensor_cdata(a), *y = fl_tensor_cdata(b);
        if (tol == 0 && memcmp(x, y, (size_t)fl_tensor_numel(a) * 4) != 0) {
            for (int64_t k = 0; k < fl_tensor_numel(a); k++)
                if (memcmp(&x[k], &y[k], 4))
                    TFAIL("%s[%lld]: %.9g != %.9g (not bit-exact)", want->names[i], (long long)k, x[k], y[k]);
        }
        for (int64_t k = 0; k < fl_tensor_numel(a); k++) {
            double diff = fabs((double)x[k] - (double)y[k]);
            if (diff > worst) worst = diff;
            if (tol > 0 && diff > tol * (1.0 + fabs((double)x[k])))
                TFAIL("%s[%lld]: local %.9g vs parameter server %.9g (tolerance %g)", want->names[i], (long long)k, x[k],
                      y[k], tol);
        }
    }
    return worst;
}

static void free_dump(dump_t *d) { fl_io_free_tensors(d->names, d->ts, d->n); }

static char *path_in(const job *j, const char *name)
{
    static char buf[4][PATH_MAX];
    static int k;
    char *b = buf[k++ % 4];
    snprintf(b, PATH_MAX, "%s/%s", j->dir, name);
    return b;
}

/* ---- sync == local --------------------------------------------------------------------------------- */

static void sync_equals_local(const char *opt, const char *lr, const char *l2, const char *worker_order, int amp)
{
    const char *am = amp ? "amp=1" : "amp=0";
    paths();
    job j;
    job_init(&j, 2, 2);
    char o[64], r[64], l[64], dump[PATH_MAX + 8], init[PATH_MAX + 16], ord[64];
    snprintf(o, sizeof o, "opt=%s", opt);
    snprintf(r, sizeof r, "lr=%s", lr);
    snprintf(l, sizeof l, "l2=%s", l2);
    snprintf(ord, sizeof ord, "order=%s", worker_order);
    snprintf(dump, sizeof dump, "dump=%s", path_in(&j, "ps.st"));
    snprintf(init, sizeof init, "dump_init=%s", path_in(&j, "init.st"));
    const char *common[] = {"task=tiny", "mode=sync", o, r, l, "steps=6", "batch=8", ord, am, NULL};
    const char *w0[] = {dump, init, NULL};
    job_start(&j, common, NULL, w0);
    job_wait_ok(&j, 90);
    /* the reference: one process, the global batch, the servers' initial table rows */
    job loc = j;
    loc.n = 0;
    char ldump[PATH_MAX + 8], linit[PATH_MAX + 16];
    snprintf(ldump, sizeof ldump, "dump=%s", path_in(&j, "local.st"));
    snprintf(linit, sizeof linit, "init_table=%s", path_in(&j, "init.st"));
    const char *largs[] = {"task=tiny", o, r, l, "steps=6", "batch=16", ldump, linit, am, NULL};
    spawn(&loc, 0, 0, 1, largs);
    job_wait_ok(&loc, 60);
    dump_t want = read_dump(path_in(&j, "local.st")), got = read_dump(path_in(&j, "ps.st"));
    dump_t ini = read_dump(path_in(&j, "init.st"));
    CHECK(want.n >= 6 && find_t(&want, "emb"));
    /* AMP: bf16 copies of weights that differ in the last float32 bit may differ by a bf16 step */
    double worst = compare(&want, &got, amp ? 1e-4 : 1e-5);
    /* training moved the table away from its initial rows */
    double moved = 0;
    const float *e0 = fl_tensor_cdata(find_t(&ini, "emb")), *e1 = fl_tensor_cdata(find_t(&got, "emb"));
    for (int k = 0; k < 44; k++) moved += fabs((double)e0[k] - (double)e1[k]);
    CHECK(moved > 1e-3);
    printf("  %s: largest difference from local training %.3g (table moved %.3g)\n", opt, worst, moved);
    free_dump(&want);
    free_dump(&got);
    free_dump(&ini);
    th_rmtree(j.dir);
}

TEST(sync_sgd_l2_equals_local) { sync_equals_local("sgd", "0.1", "0.01", "init_first", 0); }
TEST(sync_adam_equals_local) { sync_equals_local("adam", "0.05", "0", "startup_first", 0); }
TEST(sync_adagrad_equals_local) { sync_equals_local("adagrad", "0.1", "0", "init_first", 0); }
TEST(sync_momentum_equals_local) { sync_equals_local("momentum", "0.05", "0.01", "startup_first", 0); }
/* strategy.amp with servers: workers compute in bf16, servers keep float32 tables */
TEST(sync_amp_bf16_equals_local_amp) { sync_equals_local("adam", "0.05", "0", "init_first", 1); }

/* ---- async and GEO converge ------------------------------------------------------------------------------ */

static void converges(const char *mode, const char *extra, double threshold)
{
    paths();
    job j;
    job_init(&j, 2, 2);
    char m[32];
    snprintf(m, sizeof m, "mode=%s", mode);
    const char *common[] = {"task=quick", m, "steps=300", extra, NULL};
    job_start(&j, common, NULL, NULL);
    job_wait_ok(&j, 100);
    for (int w = 0; w < 2; w++) {
        double c = worker_cost(&j, w, 50);
        printf("  %s: worker %d mean cost of the last 50 steps %.4f\n", mode, w, c);
        if (!(c < threshold)) {
            dump_logs(&j);
            TFAIL("%s mode: worker %d's cost %.4f is not below %.2f", mode, w, c, threshold);
        }
    }
    th_rmtree(j.dir);
}

/* Cost at the start: 0.69.  Local training (one worker, batch 128, SGD 0.01) averages 0.28
 * over steps 250-299; two workers make twice the updates, with some staleness (measured
 * 0.17-0.31 for async, 0.17-0.22 for GEO). */
TEST(async_converges) { converges("async", "merge=2", 0.4); }
TEST(geo_converges) { converges("geo", "k=10", 0.4); }

/* Async with the sparse table: pulls in forward, SelectedRows through the queues. */
TEST(async_sparse_runs)
{
    paths();
    job j;
    job_init(&j, 2, 2);
    const char *common[] = {"task=tiny", "mode=async", "opt=adam", "lr=0.05", "steps=60", "merge=3", "queue=2", NULL};
    job_start(&j, common, NULL, NULL);
    job_wait_ok(&j, 60);
    /* the task is easy: local training gets to ~0 within 60 steps */
    for (int w = 0; w < 2; w++) CHECK(worker_cost(&j, w, 10) < 0.3);
    th_rmtree(j.dir);
}

/* ---- save, stop, restart, continue --------------------------------------------------------------------------- */

/* The reference of the restart tests: 8 uninterrupted sync Adam steps on 2 servers and 2
 * workers; worker 0 dumps the parameters to a.st in a's directory. */
static void uninterrupted(job *a)
{
    char a_dump[PATH_MAX + 8];
    job_init(a, 2, 2);
    snprintf(a_dump, sizeof a_dump, "dump=%s", path_in(a, "a.st"));
    const char *ca[] = {"task=tiny", "mode=sync", "opt=adam", "lr=0.05", "steps=8", "quiet=1", NULL};
    const char *wa[] = {a_dump, NULL};
    job_start(a, ca, NULL, wa);
    job_wait_ok(a, 90);
}

/* The parameters worker 0 of a restarted job dumped to b.st in b's directory: bit-exact
 * those of the uninterrupted run a. */
static void same_as_uninterrupted(job *a, job *b)
{
    dump_t x = read_dump(path_in(a, "a.st")), y = read_dump(path_in(b, "b.st"));
    CHECK_EQ_INT(x.n, y.n);
    compare(&x, &y, 0);
    free_dump(&x);
    free_dump(&y);
}

TEST(save_restart_is_bit_exact)
{
    paths();
    char b_dump[PATH_MAX + 8], save[PATH_MAX + 8], load[PATH_MAX + 8];
    job a;
    uninterrupted(&a);
    /* B1: 4 steps, save, everything exits */
    job b;
    job_init(&b, 2, 2);
    snprintf(save, sizeof save, "save=%s", path_in(&b, "ckpt"));
    const char *cb1[] = {"task=tiny", "mode=sync", "opt=adam", "lr=0.05", "steps=4", "quiet=1", save, NULL};
    job_start(&b, cb1, NULL, NULL);
    job_wait_ok(&b, 90);
    struct stat sb;
    CHECK(stat(path_in(&b, "ckpt/ps_manifest.json"), &sb) == 0);
    CHECK(stat(path_in(&b, "ckpt/persistables.safetensors"), &sb) == 0);
    /* B2: new servers (new ports) load the checkpoint; workers continue with steps 4..7 */
    job b2;
    job_init(&b2, 2, 2);
    snprintf(load, sizeof load, "load=%s", path_in(&b, "ckpt"));
    snprintf(b_dump, sizeof b_dump, "dump=%s", path_in(&b, "b.st"));
    const char *cb2[] = {"task=tiny", "mode=sync", "opt=adam", "lr=0.05", "start=4", "steps=4", "quiet=1", NULL};
    const char *sb2[] = {load, NULL};
    const char *wb2[] = {b_dump, NULL};
    job_start(&b2, cb2, sb2, wb2);
    job_wait_ok(&b2, 90);
    same_as_uninterrupted(&a, &b);
    th_rmtree(a.dir);
    th_rmtree(b.dir);
    th_rmtree(b2.dir);
}

/* The SSD tier chosen the way a Paddle user does (strategy fleet_desc_configs): the servers'
 * sparse table keeps its rows under sparse_ssd_path within a 1 MiB budget, trains, saves, and
 * new SSD servers loading the checkpoint end bit-exact with an uninterrupted in-memory run. */
TEST(ssd_table_from_strategy)
{
#ifndef FL_HAVE_ROCKSDB
    TSKIP("built without RocksDB");
#else
    paths();
    char b_dump[PATH_MAX + 8], save[PATH_MAX + 8], load[PATH_MAX + 8], ssd[PATH_MAX + 64];
    job a;
    uninterrupted(&a);
    job b;
    job_init(&b, 2, 2);
    snprintf(save, sizeof save, "save=%s", path_in(&b, "ckpt"));
    snprintf(ssd, sizeof ssd, "s:fleet_desc_configs.sparse_ssd_path=%s", path_in(&b, "ssd"));
    const char *cls = "s:fleet_desc_configs.sparse_table_class=DownpourSparseSSDTable",
               *mb = "s:fleet_desc_configs.sparse_mem_budget_mb=1";
    const char *cb1[] = {"task=tiny", "mode=sync", "opt=adam", "lr=0.05", "steps=4", "quiet=1", save, cls, ssd, mb, NULL};
    job_start(&b, cb1, NULL, NULL);
    job_wait_ok(&b, 90);
    struct stat sb;
    CHECK(stat(path_in(&b, "ssd"), &sb) == 0 && S_ISDIR(sb.st_mode)); /* made by the servers' SSD tables */
    CHECK(stat(path_in(&b, "ckpt/ps_manifest.json"), &sb) == 0);
    job b2;
    job_init(&b2, 2, 2);
    snprintf(load, sizeof load, "load=%s", path_in(&b, "ckpt"));
    snprintf(b_dump, sizeof b_dump, "dump=%s", path_in(&b, "b.st"));
    const char *cb2[] = {"task=tiny", "mode=sync", "opt=adam", "lr=0.05", "start=4", "steps=4",
                         "quiet=1",   cls,         ssd,        mb,        NULL};
    const char *sb2[] = {load, NULL};
    const char *wb2[] = {b_dump, NULL};
    job_start(&b2, cb2, sb2, wb2);
    job_wait_ok(&b2, 90);
    same_as_uninterrupted(&a, &b);
    th_rmtree(a.dir);
    th_rmtree(b.dir);
    th_rmtree(b2.dir);
#endif
}

/* Checkpoints for restart: a sync Adam job checkpointing every 2 steps loses worker 1 at
 * step 5; the same command run again resumes from the checkpoint of step 4 (servers'
 * tables, the workers' Adam moments and step) and ends bit-exact with an uninterrupted
 * run. */
TEST(checkpoint_restart_is_bit_exact)
{
    paths();
    char b_dump[PATH_MAX + 8], ck[PATH_MAX + 8];
    job a;
    uninterrupted(&a);
    /* B1: checkpoints at steps 2 and 4, then worker 1 dies before step 5 */
    job b;
    job_init(&b, 2, 2);
    snprintf(ck, sizeof ck, "ckpt=%s", path_in(&b, "ck"));
    const char *cb1[] = {"task=tiny", "mode=sync", "opt=adam",       "lr=0.05",     "steps=8", "quiet=1",
                         ck,          "every=2",   "kill_self_at=5", "kill_rank=1", NULL};
    job_start(&b, cb1, NULL, NULL);
    for (int i = 0; i < b.n; i++) wait_proc(&b.p[i], 60);
    kill_all(&b);
    CHECK(!exited_ok(&b.p[b.n - 1])); /* worker 1 was killed */
    char latest[4096];
    int64_t seq = -1;
    CHECK_OK(fleet_checkpoint_latest(path_in(&b, "ck"), latest, sizeof latest, &seq));
    CHECK_EQ_INT(seq, 2);
    /* B2: the same command, no kill: resumes at step 4 */
    job b2;
    job_init(&b2, 2, 2);
    snprintf(b_dump, sizeof b_dump, "dump=%s", path_in(&b, "b.st"));
    const char *cb2[] = {"task=tiny", "mode=sync", "opt=adam", "lr=0.05", "steps=8", "quiet=1", ck, "every=2", NULL};
    const char *wb2[] = {b_dump, NULL};
    job_start(&b2, cb2, NULL, wb2);
    job_wait_ok(&b2, 90);
    char *log = slurp(b2.p[b2.n - 2].log); /* worker 0 */
    CHECK_STR_HAS(log, "resumed at step 4");
    free(log);
    same_as_uninterrupted(&a, &b);
    /* keep=2: the checkpoints of steps 6 and 8 remain */
    CHECK_OK(fleet_checkpoint_latest(path_in(&b, "ck"), latest, sizeof latest, &seq));
    CHECK_EQ_INT(seq, 4);
    struct stat sb;
    CHECK(stat(path_in(&b, "ck/ckpt-0000000003/checkpoint.json"), &sb) == 0);
    CHECK(stat(path_in(&b, "ck/ckpt-0000000002"), &sb) != 0);
    th_rmtree(a.dir);
    th_rmtree(b.dir);
    th_rmtree(b2.dir);
}

/* Loads the inference model in dir and checks every parameter of the dump is in it with
 * the same bytes; returns the number of feeds. */
static int check_model_holds(const char *dir, const char *dump_path, int with_emb)
{
    fl_exe *e = fl_exe_create(NULL);
    fl_prog *p;
    char **feeds, **fetches;
    int nf, nt;
    CHECK_OK(fl_io_load_inference_model(e, dir, &p, &feeds, &nf, &fetches, &nt));
    CHECK(nf >= 1 && !strcmp(feeds[0], "x") && nt == 1);
    dump_t d = read_dump(dump_path);
    CHECK(d.n >= 4 && (!with_emb || find_t(&d, "emb")));
    for (int i = 0; i < d.n; i++) {
        const fl_tensor *t = fl_scope_find(fl_exe_scope(e), d.names[i]);
        CHECK(t && fl_tensor_numel(t) == fl_tensor_numel(d.ts[i]));
        CHECK(!memcmp(fl_tensor_cdata(t), fl_tensor_cdata(d.ts[i]), (size_t)fl_tensor_numel(t) * 4));
    }
    if (with_emb) { /* the model runs locally: a batch of two samples */
        float xv[12] = {0.1f, -0.2f, 0.3f, 0.5f, -0.1f, 0.2f, 0.0f, 0.4f, -0.3f, 0.2f, 0.1f, -0.5f};
        int64_t i1[2] = {3, 7}, i2[2] = {0, 9}, lod[3] = {0, 1, 2};
        fl_tensor *x = fl_tensor_from_data(FL_FLOAT32, 2, (const int64_t[]){2, 6}, xv);
        fl_tensor *a = fl_tensor_from_data(FL_INT64, 2, (const int64_t[]){2, 1}, i1);
        fl_tensor *b = fl_tensor_from_data(FL_INT64, 2, (const int64_t[]){2, 1}, i2);
        CHECK_OK(fl_tensor_set_lod(a, lod, 3));
        CHECK_OK(fl_tensor_set_lod(b, lod, 3));
        fl_feed fd[3] = {{feeds[0], x}, {feeds[1], a}, {feeds[2], b}};
        fl_tensor *out;
        CHECK_OK(fl_exe_run(e, p, fd, 3, (const char *const *)fetches, 1, &out));
        CHECK(fl_tensor_numel(out) == 4);
        const float *y = fl_tensor_cdata(out);
        CHECK_NEAR(y[0] + y[1], 1.0, 1e-5);
        fl_tensor_free(x);
        fl_tensor_free(a);
        fl_tensor_free(b);
    }
    free_dump(&d);
    int n = nf;
    fl_io_free_names(feeds, nf);
    fl_io_free_names(fetches, nt);
    fl_prog_free(p);
    fl_exe_free(e);
    return n;
}

/* The first worker's inference model holds the servers' parameters, the sparse table
 * included (its rows exported from the servers into a local table), and runs locally. */
TEST(inference_model_from_the_servers)
{
    paths();
    job j;
    job_init(&j, 2, 2);
    char infer[PATH_MAX + 8], dump[PATH_MAX + 8];
    snprintf(infer, sizeof infer, "infer=%s", path_in(&j, "model"));
    snprintf(dump, sizeof dump, "dump=%s", path_in(&j, "ps.st"));
    const char *common[] = {"task=tiny", "sparse=0", "mode=async", "steps=5", "quiet=1", infer, NULL};
    const char *w0[] = {dump, NULL};
    job_start(&j, common, NULL, w0);
    job_wait_ok(&j, 60);
    CHECK_EQ_INT(check_model_holds(path_in(&j, "model"), path_in(&j, "ps.st"), 0), 1);
    th_rmtree(j.dir);
    /* with the sparse table on two servers: the exported "emb" equals the servers' rows
     * (pulled without creating: rows never trained are zeros on both sides) */
    job k;
    job_init(&k, 2, 2);
    snprintf(infer, sizeof infer, "infer=%s", path_in(&k, "model"));
    snprintf(dump, sizeof dump, "dump=%s", path_in(&k, "ps.st"));
    const char *c2[] = {"task=tiny", "mode=sync", "steps=3", "quiet=1", infer, NULL};
    job_start(&k, c2, NULL, w0);
    job_wait_ok(&k, 60);
    CHECK_EQ_INT(check_model_holds(path_in(&k, "model"), path_in(&k, "ps.st"), 1), 3);
    th_rmtree(k.dir);
}

/* ---- failures ------------------------------------------------------------------------------------------------ */

TEST(killed_worker_fails_the_servers)
{
    paths();
    job j;
    job_init(&j, 2, 2);
    const char *common[] = {"task=tiny", "mode=sync", "steps=100000", NULL};
    job_start(&j, common, NULL, NULL);
    proc_t_ *w1 = &j.p[3];
    CHECK(!w1->server && w1->idx == 1);
    /* kill -9 worker 1 once it is training */
    double t0 = now();
    for (;;) {
        char *s = slurp(w1->log);
        int training = strstr(s, "step3 cost") != NULL;
        free(s);
        if (training) break;
        if (now() - t0 > 60) {
            dump_logs(&j);
            kill_all(&j);
            TFAIL("worker 1 did not reach step 3");
        }
        usleep(10000);
    }
    CHECK(kill(w1->pid, SIGKILL) == 0);
    CHECK(wait_proc(w1, 10) == 0 && WIFSIGNALED(w1->status));
    t0 = now();
    for (int i = 0; i < 3; i++) {
        proc_t_ *p = &j.p[i];
        if (wait_proc(p, 10.0 - (now() - t0)) != 0) {
            dump_logs(&j);
            kill_all(&j);
            TFAIL("%s %d still runs 10 s after worker 1 was killed", p->server ? "server" : "worker", p->idx);
        }
        if (exited_ok(p)) {
            dump_logs(&j);
            TFAIL("%s %d exited 0 after worker 1 was killed", p->server ? "server" : "worker", p->idx);
        }
    }
    printf("  servers and worker 0 exited non-zero %.1f s after worker 1 was killed\n", now() - t0);
    for (int i = 0; i < 3; i++) {
        char *s = slurp(j.p[i].log);
        CHECK_STR_HAS(s, "worker 1");
        CHECK_STR_HAS(s, "without calling stop");
        free(s);
    }
    th_rmtree(j.dir);
}

/* Runs `fleetrun --server_num 2 --worker_num 2 --log_dir DIR/log ARGS...` (args: the program
 * and its arguments, at most 16, NULL-terminated) with its output in DIR/fleetrun.out, for at
 * most limit_s seconds (then kills it and fails the test).  Returns its wait status and its
 * output (malloc'd) in *out. */
static int fleetrun_2x2(const char *dir, const char *const *args, double limit_s, char **out)
{
    char logdir[64], path[96];
    snprintf(logdir, sizeof logdir, "%s/log", dir);
    snprintf(path, sizeof path, "%s/fleetrun.out", dir);
    const char *argv[24] = {FLEETRUN, "--server_num", "2", "--worker_num", "2", "--log_dir", logdir};
    for (int i = 0; args[i]; i++) {
        if (i == 16) TFAIL("fleetrun_2x2: more than 16 arguments");
        argv[7 + i] = args[i];
    }
    double t0 = now();
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0) _exit(127);
        alarm(0);
        execv(FLEETRUN, (char *const *)argv);
        _exit(127);
    }
    int ws = 0;
    while (waitpid(pid, &ws, WNOHANG) == 0) {
        if (now() - t0 > limit_s) {
            kill(pid, SIGKILL);
            waitpid(pid, &ws, 0);
            TFAIL("fleetrun did not finish");
        }
        usleep(20000);
    }
    *out = slurp(path);
    return ws;
}

TEST(killed_worker_reported_by_fleetrun)
{
    paths();
    char dir[32], *s;
    th_mktemp(dir, sizeof dir, "fleet_psfr_");
    unsetenv("FLEET_JOB_SECRET");
    setenv("FLEET_PS_RECONNECT_GRACE_MS", "2000", 1);
    const char *args[] = {PS_TRAIN,  "task=tiny",      "mode=sync",   "steps=100000",
                          "quiet=1", "kill_self_at=3", "kill_rank=1", NULL};
    int ws = fleetrun_2x2(dir, args, 60, &s);
    if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 128 + SIGKILL)
        TFAIL("fleetrun status 0x%x, expected exit 137; output:\n%s", ws, s);
    CHECK_STR_HAS(s, "role:   worker");
    CHECK_STR_HAS(s, "rank:   1");
    CHECK_STR_HAS(s, "SIGKILL");
    free(s);
    th_rmtree(dir);
}

/* A small program for in-process checks: fc + three lookups of one table (two merge into
 * one distributed lookup, the third has padding_idx). */
static fl_var *build_small(fl_prog *p, int is_sparse, int is_dist)
{
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(4), FL_FLOAT32, 0);
    fl_var *y = fl_layer_data(p, "y", FL_SHAPE(1), FL_INT64, 0);
    fl_var *a = fl_layer_data(p, "a", FL_SHAPE(1), FL_INT64, 0);
    fl_var *b = fl_layer_data(p, "b", FL_SHAPE(1), FL_INT64, 0);
    fl_embedding_attr ea;
    memset(&ea, 0, sizeof ea);
    ea.is_sparse = is_sparse;
    ea.is_distributed = is_dist;
    ea.param.name = "tab";
    fl_var *e1 = fl_layer_embedding(a, 100, 3, &ea), *e2 = fl_layer_embedding(b, 100, 3, &ea);
    ea.has_padding_idx = 1;
    fl_var *e3 = fl_layer_embedding(b, 100, 3, &ea);
    fl_var *h = fl_layer_fc(FL_VARS(x, e1, e2, e3), 8, "tanh");
    fl_var *pr = fl_layer_fc(FL_VARS(h), 2, "softmax");
    return fl_layer_mean(fl_layer_cross_entropy(pr, y));
}

static void ps_env(const char *role, int workers, const char *list)
{
    char n[16];
    snprintf(n, sizeof n, "%d", workers);
    setenv("PADDLE_PSERVERS_IP_PORT_LIST", list, 1);
    setenv("PADDLE_TRAINERS_NUM", n, 1);
    setenv("TRAINING_ROLE", role, 1);
    setenv("PADDLE_TRAINER_ID", "0", 1);
    setenv("POD_IP", "127.0.0.1", 1);
    setenv("PADDLE_PORT", strchr(list, ':') + 1, 1);
    setenv("FLEET_JOB_SECRET", SECRET, 1);
}

TEST(missing_server_fails_init_worker_in_time)
{
    char list[64];
    snprintf(list, sizeof list, "127.0.0.1:%d", th_free_port());
    ps_env("TRAINER", 1, list);
    setenv("FLEET_PS_CONNECT_TIMEOUT_MS", "1500", 1);
    fl_prog *p = fl_prog_create();
    fl_var *cost = build_small(p, 1, 1);
    fleet_t *f = fleet_init(NULL, NULL);
    CHECK(f && fleet_is_worker(f) && fleet_is_distributed(f));
    fl_opt *o = fleet_distributed_optimizer(f, fl_opt_sgd(0.1f), NULL);
    CHECK(o);
    CHECK_OK(fl_opt_minimize(o, cost));
    double t0 = now();
    int st = fleet_init_worker(f);
    double el = now() - t0;
    CHECK(st != FL_OK);
    CHECK_STR_HAS(fl_last_error(), list);
    printf("  failed after %.2f s: %s\n", el, fl_last_error());
    CHECK(el >= 1.0 && el < 5.0);
    fl_opt_free(o);
    fl_prog_free(p);
    fleet_free(f);
}

TEST(rewrite_sync_and_async)
{
    for (int sync = 0; sync < 2; sync++) {
        ps_env("TRAINER", 2, "127.0.0.1:6170,127.0.0.1:6171");
        fl_prog *p = fl_prog_create();
        fl_var *cost = build_small(p, 1, 1);
        fleet_strategy s = fleet_strategy_default();
        if (sync) CHECK_OK(fleet_strategy_set(&s, "a_sync", "false"));
        fleet_t *f = fleet_init(NULL, &s);
        CHECK(f);
        fl_opt *o = fleet_distributed_optimizer(f, fl_opt_adam(0.01f, 0.9f, 0.999f, 1e-8f), NULL);
        CHECK(o);
        CHECK_OK(fl_opt_minimize(o, cost));
        fl_prog *sp = fl_prog_startup(p);
        /* the servers optimize: no update op, no optimizer state, no learning rate here */
        CHECK_EQ_INT(th_count_ops(p, "adam"), 0);
        CHECK_EQ_INT(th_count_ops(p, "lookup_table"), 0);
        CHECK_EQ_INT(th_count_ops(p, "lookup_table_grad"), 0);
        CHECK_EQ_INT(th_count_ops(p, "distributed_lookup_table"), 2); /* a+b merged, b with padding */
        CHECK_EQ_INT(th_count_ops(p, "distributed_lookup_table_grad"), 3);
        CHECK_EQ_INT(th_count_ops(p, "ps_send"), 1);
        CHECK_EQ_INT(th_count_ops(p, "ps_recv"), 1);
        CHECK_EQ_INT(th_count_ops(sp, "ps_init"), 1);
        CHECK(!fl_prog_var(p, "tab") && !fl_prog_var(sp, "tab")); /* the table lives on the servers */
        CHECK(!fl_prog_var(p, "fc_0.w_0_moment1_0") && !fl_prog_var(sp, "fc_0.w_0_moment1_0"));
        CHECK(!fl_prog_var(p, "learning_rate_0"));
        CHECK(fl_prog_var(p, "fc_0.w_0") && fl_prog_var(sp, "fc_0.w_0"));
        /* tables: 7 fc parameters dense, "tab" sparse, the status table last */
        const fl_ps_table_config *t;
        int n;
        CHECK_OK(fl__ps_fleet_tables(f, &t, &n));
        CHECK_EQ_INT(n, 9);
        int sparse = 0;
        for (int i = 0; i < n; i++) {
            if (t[i].kind == FL_PS_SPARSE) {
                sparse++;
                CHECK(!strcmp(t[i].name, "tab") && t[i].dim == 3 && t[i].init.kind == FL_INIT_UNIFORM &&
                      t[i].init.seed != 0);
            }
            if (i < n - 1) {
                CHECK(t[i].opt.kind == FL_PS_OPT_ADAM && t[i].opt.lr == 0.01f);
                CHECK(t[i].opt.beta1 == 0.9f && t[i].opt.beta2 == 0.999f);
            }
            if (!strcmp(t[i].name, "fc_0.w_0")) CHECK(t[i].kind == FL_PS_DENSE && t[i].rows == 4 && t[i].cols == 8);
            if (!strcmp(t[i].name, "fc_0.b_0")) CHECK(t[i].kind == FL_PS_DENSE && t[i].rows == 8 && t[i].cols == 1);
        }
        CHECK_EQ_INT(sparse, 1);
        CHECK(!strcmp(t[n - 1].name, "@fleet_status@"));
        /* running before fleet_init_worker is a clear error */
        fl_exe *e = fl_exe_create(NULL);
        CHECK_OK(fl_exe_run(e, sp, NULL, 0, NULL, 0, NULL)); /* deferred to fleet_init_worker */
        fl_tensor *x = fl_tensor_create(FL_FLOAT32, 2, (const int64_t[]){2, 4});
        fl_tensor *ids = fl_tensor_create(FL_INT64, 2, (const int64_t[]){2, 1});
        fl_feed feed[4] = {{"x", x}, {"y", ids}, {"a", ids}, {"b", ids}};
        CHECK_FAILS(fl_exe_run(e, p, feed, 4, NULL, 0, NULL), FL_ESTATE, "call fleet_init_worker before running");
        /* clones for inference keep the remote lookup (as is_test) and nothing of training */
        fl_prog *inf = fl_prog_clone(p, 1);
        CHECK(inf && th_count_ops(inf, "distributed_lookup_table") == 2 && th_count_ops(inf, "ps_send") == 0);
        fl_prog_free(inf);
        /* the text form round-trips the new ops */
        char *text;
        size_t len;
        CHECK_OK(fl_prog_to_text(p, &text, &len));
        CHECK_STR_HAS(text, "distributed_lookup_table");
        free(text);
        /* util collectives between PS workers need their endpoints */
        float v = 1;
        CHECK_FAILS(fleet_util_all_reduce(f, &v, 1, FL_FLOAT32, "sum"), FL_EINVAL, "PADDLE_TRAINER_ENDPOINTS");
        CHECK_FAILS(fleet_stop_worker(f), FL_ESTATE, "fleet_init_worker was not called");
        fl_tensor_free(x);
        fl_tensor_free(ids);
        fl_exe_free(e);
        fl_opt_free(o);
        fl_prog_free(p);
        fleet_free(f);
    }
}

TEST(rewrite_geo_keeps_the_local_optimizer)
{
    ps_env("TRAINER", 2, "127.0.0.1:6170");
    fl_prog *p = fl_prog_create();
    fl_var *cost = build_small(p, 1, 0);
    fleet_strategy s = fleet_strategy_default();
    CHECK_OK(fleet_strategy_set(&s, "a_sync_configs.k_steps", "5"));
    fleet_t *f = fleet_init(NULL, &s);
    fl_opt *o = fleet_distributed_optimizer(f, fl_opt_momentum(0.1f, 0.9f, 0), NULL);
    CHECK(o);
    CHECK_OK(fl_opt_minimize(o, cost));
    CHECK_EQ_INT(th_count_ops(p, "momentum"), 8); /* 7 fc parameters + the table, updated locally */
    CHECK_EQ_INT(th_count_ops(p, "ps_geo"), 1);
    CHECK_EQ_INT(th_count_ops(p, "ps_send"), 0);
    CHECK_EQ_INT(th_count_ops(p, "lookup_table"), 3);
    const fl_ps_table_config *t;
    int n;
    CHECK_OK(fl__ps_fleet_tables(f, &t, &n));
    for (int i = 0; i < n; i++) CHECK(t[i].kind == FL_PS_DENSE && t[i].opt.kind == FL_PS_OPT_SUM);
    fl_opt_free(o);
    fl_prog_free(p);
    fleet_free(f);
}

TEST(unsupported_combinations_are_refused)
{
    ps_env("TRAINER", 2, "127.0.0.1:6170");
    /* a_sync=false with k_steps > 0: Paddle raises ValueError */
    fleet_strategy s = fleet_strategy_default();
    s.a_sync = 0;
    s.a_sync_configs.k_steps = 5;
    fleet_t *f = fleet_init(NULL, NULL);
    fl_opt *o = fl_opt_sgd(0.1f);
    CHECK(!fleet_distributed_optimizer(f, o, &s));
    CHECK_STR_HAS(fl_last_error(), "needs a_sync=true");
    /* collective-only strategies are not silently ignored */
    s = fleet_strategy_default();
    s.gradient_merge = 1;
    CHECK(!fleet_distributed_optimizer(f, o, &s));
    CHECK_STR_HAS(fl_last_error(), "gradient_merge is a collective-mode strategy");
    fleet_free(f);
    fl_opt_free(o);
    /* a learning-rate schedule: the workers push rate * gradient, the scheduled update for
     * sgd only (tests/python/test_ps_lr_schedule.py runs one); another optimizer is refused */
    fl_prog *p = fl_prog_create();
    fl_var *cost = build_small(p, 1, 1);
    f = fleet_init(NULL, NULL);
    o = fl_opt_momentum(0.1f, 0.9f, 0);
    CHECK_OK(fl_opt_set_exponential_decay(o, 100, 0.9f, 0));
    o = fleet_distributed_optimizer(f, o, NULL);
    CHECK_FAILS(fl_opt_minimize(o, cost), FL_EUNSUPPORTED, "learning-rate schedule (exponential_decay) with momentum");
    fl_opt_free(o);
    fl_prog_free(p);
    fleet_free(f);
    /* GEO keeps tables on the workers: is_distributed is refused */
    p = fl_prog_create();
    cost = build_small(p, 1, 1);
    s = fleet_strategy_default();
    s.a_sync_configs.k_steps = 3;
    f = fleet_init(NULL, &s);
    o = fleet_distributed_optimizer(f, fl_opt_sgd(0.1f), NULL);
    CHECK_FAILS(fl_opt_minimize(o, cost), FL_EUNSUPPORTED, "is_distributed");
    fl_opt_free(o);
    fl_prog_free(p);
    fleet_free(f);
    /* one program per fleet handle */
    p = fl_prog_create();
    cost = build_small(p, 0, 0);
    fl_prog *p2 = fl_prog_create();
    fl_var *cost2 = build_small(p2, 0, 0);
    f = fleet_init(NULL, NULL);
    o = fleet_distributed_optimizer(f, fl_opt_sgd(0.1f), NULL);
    CHECK_OK(fl_opt_minimize(o, cost));
    CHECK_FAILS(fl_opt_minimize(o, cost2), FL_ESTATE, "one fleet handle trains one program");
    /* a worker is not a server */
    CHECK_FAILS(fleet_init_server(f, NULL), FL_ESTATE, "not a server");
    fl_opt_free(o);
    fl_prog_free(p);
    fl_prog_free(p2);
    fleet_free(f);
    /* a server must init before it runs, and needs the program first */
    ps_env("PSERVER", 2, "127.0.0.1:6170");
    f = fleet_init(NULL, NULL);
    CHECK(f && fleet_is_server(f));
    CHECK_FAILS(fleet_init_server(f, NULL), FL_ESTATE, "fl_opt_minimize first");
    CHECK_FAILS(fleet_init_worker(f), FL_ESTATE, "is a server");
    fleet_free(f);
}

TEST(example_runs_under_fleetrun)
{
    paths();
    char dir[32], *s;
    th_mktemp(dir, sizeof dir, "fleet_psex_");
    const char *args[] = {EXAMPLE, "40", "sync", NULL};
    int ws = fleetrun_2x2(dir, args, 90, &s);
    if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0) TFAIL("fleetrun status 0x%x; output:\n%s", ws, s);
    CHECK_STR_HAS(s, "worker_index: 0, step39 cost = ");
    free(s);
    char w1[128];
    snprintf(w1, sizeof w1, "%s/log/workerlog.1", dir);
    s = slurp(w1);
    CHECK_STR_HAS(s, "worker_index: 1, step39 cost = ");
    free(s);
    th_rmtree(dir);
}

TEST_MAIN(T(checkpoint_restart_is_bit_exact), T(rewrite_sync_and_async), T(rewrite_geo_keeps_the_local_optimizer),
          T(unsupported_combinations_are_refused), T(missing_server_fails_init_worker_in_time), T(sync_sgd_l2_equals_local),
          T(sync_adam_equals_local), T(sync_adagrad_equals_local), T(sync_momentum_equals_local),
          T(sync_amp_bf16_equals_local_amp), T(async_converges), T(geo_converges), T(async_sparse_runs),
          T(save_restart_is_bit_exact), T(ssd_table_from_strategy), T(inference_model_from_the_servers),
          T(killed_worker_fails_the_servers), T(killed_worker_reported_by_fleetrun), T(example_runs_under_fleetrun))
