/*
 * test_checkpoint.c - checkpoints for restart in a local (one-worker) job: what is saved
 * and restored, the commit point, keep-K pruning, and that an unfinished or damaged
 * checkpoint is never taken; a failed save names the worker that failed and leaves no
 * unfinished directory; a load removes what killed saves left.  The parameter-server
 * restart is in test_ps_fleet.c (checkpoint_restart_is_bit_exact).
 */
#include <ctype.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testhelp.h"

typedef struct {
    fl_prog *p;
    fl_opt *o;
    fl_exe *e;
    fleet_t *f;
    fl_model_mlp m;
} net;

/* A local job, or rank `rank` of a collective job when eps (its endpoints) is given. */
static void net_make_rank(net *n, const char *eps, int rank)
{
    unsetenv("PADDLE_TRAINER_ENDPOINTS");
    unsetenv("PADDLE_PSERVERS_IP_PORT_LIST");
    if (eps) th_trainer_env(rank, eps, 20000);
    n->p = fl_prog_create();
    fl_model_mlp_config c = fl_model_mlp_default();
    CHECK_OK(fl_model_mlp_build(n->p, &c, &n->m));
    n->f = eps ? fleet_init_collective(NULL, NULL) : fleet_init(NULL, NULL);
    CHECK(n->f);
    n->o = fleet_distributed_optimizer(n->f, fl_opt_adam(0.01f, 0.9f, 0.999f, 1e-8f), NULL);
    CHECK(n->o);
    CHECK_OK(fl_opt_minimize(n->o, n->m.loss));
    n->e = fl_exe_create(NULL);
    CHECK_OK(fl_exe_run(n->e, fl_prog_startup(n->p), NULL, 0, NULL, 0, NULL));
}

static void net_make(net *n) { net_make_rank(n, NULL, 0); }

static void net_free(net *n)
{
    fl_exe_free(n->e);
    fl_opt_free(n->o);
    fl_prog_free(n->p);
    fleet_free(n->f);
}

static void step(net *n, unsigned seed)
{
    float x[4 * 32];
    int64_t y[4] = {0, 1, 1, 0};
    th_fill_uniform(x, 4 * 32, -1, 1, seed);
    fl_tensor *xt = th_f32(2, (const int64_t[]){4, 32}, x), *yt = th_i64(2, (const int64_t[]){4, 1}, y);
    fl_feed feed[] = {{"x", xt}, {"y", yt}};
    CHECK_OK(fl_exe_run(n->e, n->p, feed, 2, NULL, 0, NULL));
    fl_tensor_free(xt);
    fl_tensor_free(yt);
}

/* A copy of the first layer's weight. */
static float *weights(net *n, int64_t *numel)
{
    const fl_tensor *t = fl_scope_find(fl_exe_scope(n->e), "fc_0.w_0");
    CHECK(t);
    *numel = fl_tensor_numel(t);
    float *w = malloc((size_t)*numel * sizeof *w);
    memcpy(w, fl_tensor_cdata(t), (size_t)*numel * sizeof *w);
    return w;
}

static int exists(const char *root, const char *rel)
{
    char p[4096];
    struct stat sb;
    snprintf(p, sizeof p, "%s/%s", root, rel);
    return stat(p, &sb) == 0;
}

static void make_dir(const char *root, const char *rel)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", root, rel);
    CHECK(mkdir(p, 0700) == 0);
}

static void write_text(const char *root, const char *rel, const char *text)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", root, rel);
    th_write_bytes(p, text, strlen(text));
}

TEST(save_load_keep_and_commit_point)
{
    char root[64];
    th_mktemp(root, sizeof root, "fleet_ckpt_");
    net a;
    net_make(&a);
    fleet_checkpoint_pos pos = {0, 0, 0, 0}, got;
    CHECK_FAILS(fleet_load_checkpoint(a.f, a.e, root, a.p, &got), FL_ENOTFOUND, "no valid checkpoint");
    float *w3 = NULL;
    int64_t n = 0;
    for (int s = 1; s <= 3; s++) {
        step(&a, (unsigned)s);
        pos = (fleet_checkpoint_pos){1, 2, 10 * s, s};
        CHECK_OK(fleet_save_checkpoint(a.f, a.e, root, a.p, &pos, 2));
    }
    w3 = weights(&a, &n);
    step(&a, 99); /* trained past the checkpoint */
    /* keep 2: checkpoints 2 and 3 */
    CHECK(!exists(root, "ckpt-0000000001"));
    CHECK(exists(root, "ckpt-0000000002/checkpoint.json"));
    CHECK(exists(root, "ckpt-0000000003/worker-0/persistables.safetensors"));
    /* an unfinished checkpoint (no commit) and a damaged one are not taken */
    make_dir(root, "ckpt-0000000009");
    make_dir(root, "ckpt-0000000010");
    write_text(root, "ckpt-0000000010/checkpoint.json", "{\"format\": \"fleet-checkpoint\", \"version\": 1, \"seq\": 10");
    char dir[4096];
    int64_t seq = -1;
    CHECK_OK(fleet_checkpoint_latest(root, dir, sizeof dir, &seq));
    CHECK_EQ_INT(seq, 3);
    CHECK_STR_HAS(dir, "ckpt-0000000003");
    /* a new job resumes from checkpoint 3: weights, and the position */
    net b;
    net_make(&b);
    CHECK_OK(fleet_load_checkpoint(b.f, b.e, root, b.p, &got));
    CHECK_EQ_INT(got.epoch, 1);
    CHECK_EQ_INT(got.file, 2);
    CHECK_EQ_INT(got.offset, 30);
    CHECK_EQ_INT(got.step, 3);
    int64_t nb = 0;
    float *wb = weights(&b, &nb);
    CHECK_EQ_INT(nb, n);
    CHECK(!memcmp(wb, w3, (size_t)n * sizeof *wb));
    /* its next save is checkpoint 4 (after the newest valid one); keep 2 drops 2 */
    step(&b, 5);
    pos.step = 4;
    CHECK_OK(fleet_save_checkpoint(b.f, b.e, root, b.p, &pos, 2));
    CHECK_OK(fleet_checkpoint_latest(root, dir, sizeof dir, &seq));
    CHECK_EQ_INT(seq, 4);
    CHECK(!exists(root, "ckpt-0000000002"));
    /* bad arguments */
    CHECK_FAILS(fleet_save_checkpoint(b.f, b.e, root, b.p, &pos, 0), FL_EINVAL, "keep");
    pos.offset = -1;
    CHECK_FAILS(fleet_save_checkpoint(b.f, b.e, root, b.p, &pos, 1), FL_EINVAL, "must not be negative");
    CHECK_FAILS(fleet_save_checkpoint(b.f, NULL, root, b.p, &pos, 1), FL_EINVAL, "executor is NULL");
    free(w3);
    free(wb);
    net_free(&a);
    net_free(&b);
    th_rmtree(root);
}

/* A checkpoint of another job size is refused, not half-loaded. */
TEST(worker_count_must_match)
{
    char root[64];
    th_mktemp(root, sizeof root, "fleet_ckpt_");
    net a;
    net_make(&a);
    fleet_checkpoint_pos pos = {0, 0, 0, 1}, got;
    CHECK_OK(fleet_save_checkpoint(a.f, a.e, root, a.p, &pos, 1));
    write_text(root, "ckpt-0000000001/checkpoint.json",
               "{\"format\": \"fleet-checkpoint\", \"version\": 1, \"seq\": 1, \"workers\": 4, \"step\": 1}\n");
    CHECK_FAILS(fleet_load_checkpoint(a.f, a.e, root, a.p, &got), FL_EINVAL, "saved by 4 workers; this job has 1");
    net_free(&a);
    th_rmtree(root);
}

/* A save that fails (here: worker-0 cannot be made, as on a full disk) says which worker
 * and why, and leaves no unfinished directory; the next save takes the same number. */
TEST(failed_save_is_named_and_removed)
{
    char root[64];
    th_mktemp(root, sizeof root, "fleet_ckpt_");
    net a;
    net_make(&a);
    fleet_checkpoint_pos pos = {0, 0, 0, 1};
    make_dir(root, "ckpt-0000000001");
    write_text(root, "ckpt-0000000001/worker-0", "a file where the worker's directory goes");
    CHECK_FAILS(fleet_save_checkpoint(a.f, a.e, root, a.p, &pos, 1), FL_EIO, "worker 0 could not save its part of");
    CHECK_STR_HAS(fl_last_error(), "ckpt-0000000001' (removed): cannot create directory");
    CHECK(!exists(root, "ckpt-0000000001"));
    CHECK_OK(fleet_save_checkpoint(a.f, a.e, root, a.p, &pos, 1));
    CHECK(exists(root, "ckpt-0000000001/checkpoint.json"));
    net_free(&a);
    th_rmtree(root);
}

/* Three workers, worker 1's part fails: every worker's error names worker 1, and worker 0
 * removed the unfinished directory before any of them returned. */
TEST(failed_save_names_the_worker_on_every_worker)
{
    char root[64], eps[128];
    th_mktemp(root, sizeof root, "fleet_ckpt_");
    th_free_endpoints(eps, sizeof eps, 3);
    make_dir(root, "ckpt-0000000001");
    write_text(root, "ckpt-0000000001/worker-1", "a file where the worker's directory goes");
    pid_t kids[3];
    for (int r = 0; r < 3; r++) {
        if ((kids[r] = fork()) == 0) {
            net a;
            net_make_rank(&a, eps, r);
            fleet_checkpoint_pos pos = {0, 0, 0, 1};
            int st = fleet_save_checkpoint(a.f, a.e, root, a.p, &pos, 1);
            printf("  worker %d: %s\n", r, fl_last_error());
            fflush(stdout);
            CHECK(st != FL_OK);
            CHECK_STR_HAS(fl_last_error(), "worker 1 could not save its part of");
            CHECK_STR_HAS(fl_last_error(), "(removed)");
            if (r == 1) CHECK_STR_HAS(fl_last_error(), "cannot create directory");
            CHECK(!exists(root, "ckpt-0000000001"));
            net_free(&a);
            _exit(0);
        }
    }
    int bad = 0;
    for (int r = 0; r < 3; r++) {
        int ws;
        CHECK(waitpid(kids[r], &ws, 0) == kids[r]);
        bad += !(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    }
    CHECK_EQ_INT(bad, 0);
    th_rmtree(root);
}

/* This host's tag in temporary names (src/io/atomic.c host_tag). */
static void host_tag(char *out, size_t n)
{
    char h[256] = "";
    if (gethostname(h, sizeof h - 1) != 0 || !h[0]) snprintf(h, sizeof h, "host");
    size_t k = 0;
    for (const char *c = h; *c && k + 1 < n && k < 63; c++)
        out[k++] = isalnum((unsigned char)*c) || *c == '_' || *c == '-' ? *c : '-';
    out[k] = 0;
}

/* A pid that no process has: a child that has exited and been reaped. */
static pid_t dead_pid(void)
{
    pid_t c = fork();
    if (c == 0) _exit(0);
    CHECK(c > 0 && waitpid(c, NULL, 0) == c);
    return c;
}

/* A save killed mid-write leaves temporaries in its unfinished checkpoint (the servers'
 * shards, a worker's part): the next load removes those of processes that are gone, and
 * keeps those of a live one. */
TEST(load_removes_temporaries_of_killed_saves)
{
    char root[64], host[64], name[256];
    th_mktemp(root, sizeof root, "fleet_ckpt_");
    host_tag(host, sizeof host);
    net a;
    net_make(&a);
    fleet_checkpoint_pos pos = {0, 0, 0, 1}, got;
    CHECK_OK(fleet_save_checkpoint(a.f, a.e, root, a.p, &pos, 1));
    make_dir(root, "ckpt-0000000002");
    make_dir(root, "ckpt-0000000002/w");
    make_dir(root, "ckpt-0000000002/worker-0");
    pid_t dead = dead_pid();
    snprintf(name, sizeof name, "ckpt-0000000002/w/part-00001-00000000000000ab.safetensors.tmp.%d.%s", (int)dead, host);
    write_text(root, name, "half a shard");
    snprintf(name, sizeof name, "ckpt-0000000002/worker-0/persistables.safetensors.tmp.%d.%s", (int)dead, host);
    write_text(root, name, "half a part");
    snprintf(name, sizeof name, "ckpt-0000000002/w/part-00000-00000000000000ab.safetensors.tmp.%d.%s", (int)getpid(), host);
    write_text(root, name, "a save in progress");
    net b;
    net_make(&b);
    CHECK_OK(fleet_load_checkpoint(b.f, b.e, root, b.p, &got));
    CHECK_EQ_INT(got.step, 1);
    char cmd[4400], out[64] = "";
    snprintf(cmd, sizeof cmd, "find '%s' -name '*.tmp.*' | wc -l", root);
    FILE *p = popen(cmd, "r");
    CHECK(p && fgets(out, sizeof out, p));
    pclose(p);
    CHECK_EQ_INT(atoi(out), 1);
    CHECK(exists(root, name));
    net_free(&a);
    net_free(&b);
    th_rmtree(root);
}

TEST_MAIN(T(save_load_keep_and_commit_point), T(worker_count_must_match), T(failed_save_is_named_and_removed),
          T(failed_save_names_the_worker_on_every_worker), T(load_removes_temporaries_of_killed_saves))
