/* test_nlp_restart.c - the transformer and bert rows of fleet-lightning with --checkpoint_dir:
 * a run started again resumes after the newest checkpoint (locally: exactly where an
 * uninterrupted run is at that epoch), and under fleetrun --max_restart a job whose trainer
 * is killed mid-training restarts and resumes from the checkpoint of the epoch before.
 * --recompute 1 rides along (the rows' per-layer checkpoints; the losses are the same). */
#include <glob.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>

#include "testhelp.h"
#include "cmdrun.h"
#include "fleet/transformer.h"

static char BIN[1100], DIR_[64];

static void setup(void)
{
    char self[1024];
    th_tests_dir(self, sizeof self);
    snprintf(BIN, sizeof BIN, "%s/..", self);
    th_mktemp(DIR_, sizeof DIR_, "fl_nlpr");
}

static void cleanup(void) { th_rmtree(DIR_); }

/* The text after key in out up to the end of its line, the " in N s" timing cut off. */
static void line_after(const char *out, const char *key, char *buf, size_t cap)
{
    const char *p = strstr(out, key);
    if (!p) TFAIL("no '%s' in:\n%s", key, out);
    p += strlen(key);
    snprintf(buf, cap, "%.*s", (int)strcspn(p, "\n"), p);
    char *in = strstr(buf, " in ");
    if (in) *in = 0;
}

/* The transformer row locally: 3 epochs at once, and 2 epochs then a run of 3 on the same
 * checkpoint_dir (with --recompute 1): the resumed run starts at epoch 3 and its epoch 3 is
 * the uninterrupted run's (parameters, Adam's moments, the noam step and the data order
 * restored; recompute changes no loss). */
TEST(transformer_row_resumes_after_a_restart)
{
    setup();
    fl_translation_datagen g = fl_translation_datagen_default();
    g.sentences = 600, g.seed = 4, g.max_len = 15;
    char data[128];
    snprintf(data, sizeof data, "%s/tr", DIR_);
    fl_translation_datagen_info info;
    CHECK_OK(fl_translation_generate(&g, data, &info));
    char common[2048];
    snprintf(common, sizeof common,
             "%s/tools/fleet-lightning train --model transformer --mode local --train_data %s/train --n_layer 1 "
             "--d_model 32 --n_head 2 --d_inner_hid 64 --batch_size 512 --dropout 0",
             BIN, data);
    char *whole = th_cmd(DIR_, "whole", 100, NULL, "%s --epochs 3 --checkpoint_dir %s/ck1 --model_dir %s/m1", common, DIR_,
                         DIR_);
    char *first = th_cmd(DIR_, "first", 100, NULL, "%s --epochs 2 --checkpoint_dir %s/ck2 --model_dir %s/m2", common, DIR_,
                         DIR_);
    char *again = th_cmd(DIR_, "again", 100, NULL, "%s --epochs 3 --checkpoint_dir %s/ck2 --model_dir %s/m3 --recompute 1",
                         common, DIR_, DIR_);
    CHECK(!strstr(whole, "resumed"));
    CHECK_STR_HAS(again, "transformer: recompute between 2 checkpoints");
    CHECK_STR_HAS(again, "transformer: resumed after epoch 2 (step ");
    CHECK(!strstr(again, "epoch 1/3") && !strstr(again, "epoch 2/3"));
    char a[256], b[256];
    line_after(whole, "epoch 3/3: loss ", a, sizeof a);
    line_after(again, "epoch 3/3: loss ", b, sizeof b);
    printf("  transformer epoch 3 uninterrupted: loss %s; resumed: %s\n", a, b);
    if (strcmp(a, b)) TFAIL("epoch 3 after the restart: %s; uninterrupted: %s", b, a);
    free(whole), free(first), free(again);
    cleanup();
}

/* The BERT demo data (skipped where it is absent). */
static const char *demo_dir(void)
{
    static char dir[4200];
    char root[4096];
    th_build_dirs(NULL, root);
    snprintf(dir, sizeof dir, "%s/../shared/data/bert-demo", root);
    struct stat sb;
    if (stat(dir, &sb) != 0) TSKIP("the BERT demo data is absent (%s): it lives in ../shared/data/bert-demo", dir);
    return dir;
}

static int committed_checkpoints(const char *root)
{
    char pat[256];
    snprintf(pat, sizeof pat, "%s/ckpt-*/checkpoint.json", root);
    glob_t g;
    int n = glob(pat, 0, NULL, &g) == 0 ? (int)g.gl_pathc : 0;
    if (n) globfree(&g);
    return n;
}

/* The pid fleetrun's log gives worker `rank`, or -1. */
static pid_t worker_pid(const char *log, int rank)
{
    FILE *f = fopen(log, "r");
    if (!f) return -1;
    char line[512], key[64];
    snprintf(key, sizeof key, "started worker %d (pid ", rank);
    int pid = -1;
    while (pid < 0 && fgets(line, sizeof line, f)) {
        const char *p = strstr(line, key);
        if (p) pid = atoi(p + strlen(key));
    }
    fclose(f);
    return pid;
}

/* The bert row on two collective trainers under fleetrun --max_restart 1 with
 * --checkpoint_dir: once epoch 1's checkpoint is committed, a trainer is killed (SIGKILL);
 * fleetrun restarts the job, which resumes after the newest checkpoint and finishes. */
TEST(bert_row_max_restart_resumes_after_a_killed_trainer)
{
    const char *demo = demo_dir();
    setup();
    char cmd[8192], log[128], ck[128];
    snprintf(log, sizeof log, "%s/job.log", DIR_);
    snprintf(ck, sizeof ck, "%s/ck", DIR_);
    snprintf(
        cmd, sizeof cmd,
        "exec %s/tools/fleetrun --nproc_per_node 2 --max_restart 1 --log_dir %s/log %s/tools/fleet-lightning train "
        "--model bert --model_dir %s/m --checkpoint_dir %s --train_data %s --n_layer 2 --n_head 2 --d_model 64 "
        "--d_inner_hid 128 --dropout 0 --max_length 64 --lr 3e-3 --warmup_steps 10 --batch_size 8 --epochs 4 --max_steps 6 "
        "--recompute 1 > %s 2>&1",
        BIN, DIR_, BIN, DIR_, ck, demo, log);
    fflush(stdout);
    pid_t job = fork();
    CHECK(job >= 0);
    if (job == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    struct timespec ts = {0, 50 * 1000 * 1000};
    int waited = 0, killed = 0;
    for (; waited < 100 * 20 && !killed; waited++) { /* at most 100 s */
        if (waitpid(job, NULL, WNOHANG) == job) TFAIL("fleetrun ended before the first checkpoint (see %s)", log);
        if (committed_checkpoints(ck) >= 1) {
            pid_t t = worker_pid(log, 1);
            if (t > 0 && kill(t, SIGKILL) == 0) killed = 1;
        }
        nanosleep(&ts, NULL);
    }
    if (!killed) {
        kill(job, SIGTERM);
        TFAIL("no checkpoint or no trainer to kill within 100 s (see %s)", log);
    }
    int ws = 0;
    for (waited = 0; waited < 120 * 20 && waitpid(job, &ws, WNOHANG) != job; waited++) nanosleep(&ts, NULL);
    if (waited >= 120 * 20) {
        kill(job, SIGKILL);
        waitpid(job, &ws, 0);
        TFAIL("the restarted job did not end within 120 s (see %s)", log);
    }
    char *out = th_cmd(DIR_, "cat", 10, NULL, "cat %s", log);
    if (!WIFEXITED(ws) || WEXITSTATUS(ws)) TFAIL("fleetrun failed (status 0x%x):\n%s", ws, out);
    CHECK_STR_HAS(out, "restart 1 of 1");
    CHECK_STR_HAS(out, "bert: resumed after epoch ");
    CHECK_STR_HAS(out, "bert: recompute between 2 checkpoints");
    CHECK_STR_HAS(out, "epoch 4/4");
    printf("  bert under fleetrun --max_restart 1: a trainer killed after checkpoint 1; the job %.34s, epoch 4 "
           "loss %.4f\n",
           strstr(out, "resumed after epoch "), th_after(out, "epoch 4/4: loss "));
    free(out);
    cleanup();
}

TEST_MAIN(T(transformer_row_resumes_after_a_restart), T(bert_row_max_restart_resumes_after_a_killed_trainer))
