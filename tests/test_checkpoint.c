/*
 * test_checkpoint.c - checkpoints for restart in a local (one-worker) job: what is saved
 * and restored, the commit point, keep-K pruning, and that an unfinished or damaged
 * checkpoint is never taken.  The parameter-server restart is in test_ps_fleet.c
 * (checkpoint_restart_is_bit_exact).
 */
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

static void net_make(net *n)
{
    unsetenv("PADDLE_TRAINER_ENDPOINTS");
    unsetenv("PADDLE_PSERVERS_IP_PORT_LIST");
    n->p = fl_prog_create();
    fl_model_mlp_config c = fl_model_mlp_default();
    CHECK_OK(fl_model_mlp_build(n->p, &c, &n->m));
    n->f = fleet_init(NULL, NULL);
    CHECK(n->f);
    n->o = fleet_distributed_optimizer(n->f, fl_opt_adam(0.01f, 0.9f, 0.999f, 1e-8f), NULL);
    CHECK(n->o);
    CHECK_OK(fl_opt_minimize(n->o, n->m.loss));
    n->e = fl_exe_create(NULL);
    CHECK_OK(fl_exe_run(n->e, fl_prog_startup(n->p), NULL, 0, NULL, 0, NULL));
}

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
    FILE *f = fopen(p, "w");
    CHECK(f);
    fputs(text, f);
    fclose(f);
}

TEST(save_load_keep_and_commit_point)
{
    char root[] = "/tmp/fleet_ckpt_XXXXXX";
    CHECK(mkdtemp(root));
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
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    CHECK(system(cmd) == 0);
}

/* A checkpoint of another job size is refused, not half-loaded. */
TEST(worker_count_must_match)
{
    char root[] = "/tmp/fleet_ckpt_XXXXXX";
    CHECK(mkdtemp(root));
    net a;
    net_make(&a);
    fleet_checkpoint_pos pos = {0, 0, 0, 1}, got;
    CHECK_OK(fleet_save_checkpoint(a.f, a.e, root, a.p, &pos, 1));
    write_text(root, "ckpt-0000000001/checkpoint.json",
               "{\"format\": \"fleet-checkpoint\", \"version\": 1, \"seq\": 1, \"workers\": 4, \"step\": 1}\n");
    CHECK_FAILS(fleet_load_checkpoint(a.f, a.e, root, a.p, &got), FL_EINVAL, "saved by 4 workers; this job has 1");
    net_free(&a);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    CHECK(system(cmd) == 0);
}

TEST_MAIN(T(save_load_keep_and_commit_point), T(worker_count_must_match))
