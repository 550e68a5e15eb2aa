/*
 * test_ctr.c - the CTR workflow end to end with real processes on 127.0.0.1: planted
 * Criteo data (tools/fleet-datagen), examples/ctr/train locally and under fleetrun with
 * parameter servers (async), the saved model scored by examples/ctr/infer with no servers,
 * and a global shuffle across two workers that loses and duplicates nothing; and the
 * examples' error paths: the first error is the one printed.
 */
#include <limits.h>
#include <stdarg.h>
#include <sys/stat.h>

#include "testhelp.h"
#include "cmdrun.h"

static char BIN[PATH_MAX + 8], DIR_[64];

/* Under a sanitizer everything runs 5-20x slower: the training test shrinks its data and
 * loosens its AUC tolerances (the agreement checks keep their meaning, at a coarser grain). */
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define ROWS "20000"
#define TOL 0.05
#define MIN_AUC 0.65
#else
#define ROWS "200000"
#define TOL 0.005
#define MIN_AUC 0.75
#endif

static void setup(void)
{
    char self[PATH_MAX];
    th_tests_dir(self, sizeof self);
    snprintf(BIN, sizeof BIN, "%s/..", self); /* BUILD */
    th_mktemp(DIR_, sizeof DIR_, "fl_ctr");
}

static void cleanup(void) { th_rmtree(DIR_); }

#define run(name, seconds, ...) th_cmd(DIR_, name, seconds, NULL, __VA_ARGS__)
#define run_rc(name, seconds, rc, ...) th_cmd(DIR_, name, seconds, rc, __VA_ARGS__)
#define after th_after

/* PS async with 2 workers of 2 Hogwild threads each (every thread pulling and pushing
 * through its worker's communicator) ends within 0.005 AUC of local training on the same
 * data, and
 * its inference model (embedding rows exported from the servers) scores the same with no
 * servers; collective training on 2 trainers gets there too. */
TEST(ps_async_and_collective_match_local_training)
{
    setup();
    free(run("gen", 60,
             "%s/tools/fleet-datagen criteo --rows " ROWS " --files 4 --out %s/data --seed 5 --vocab-scale 0.002 "
             "--dense-scale 0.1",
             BIN, DIR_));
    const char *common =
        "--epochs 2 --optimizer adam --lr 0.003 --hidden 64,64 --sparse_feature_dim 100003 --print_period 0";
    char *loc = run("local", 120,
                    "%s/examples/ctr/train --is_local 1 --thread_num 2 --train_data %s/data/train --test_data "
                    "%s/data/test --model_dir %s/local_model %s",
                    BIN, DIR_, DIR_, DIR_, common);
    double a_local = after(loc, "test auc ");
    char *ps = run("ps", 180,
                   "%s/tools/fleetrun --server_num 1 --worker_num 2 --log_dir %s/log %s/examples/ctr/train "
                   "--thread_num 2 --train_data %s/data/train --test_data %s/data/test --model_dir %s/ps_model "
                   "--strategy a_sync_configs.send_queue_size=2 --strategy a_sync_configs.max_merge_var_num=2 %s",
                   BIN, DIR_, BIN, DIR_, DIR_, DIR_, common);
    double a_ps = after(ps, "test auc ");
    CHECK_STR_HAS(ps, "all 3 processes on this node succeeded");
    char *inf = run("infer", 60,
                    "%s/examples/ctr/infer --model_dir %s/ps_model --test_data %s/data/test --sparse_feature_dim 100003",
                    BIN, DIR_, DIR_);
    double a_inf = after(inf, "test auc ");
    /* the exported table holds only the rows the servers created: a few hundred of 100003 */
    char pp[128];
    snprintf(pp, sizeof pp, "%s/ps_model/params.safetensors", DIR_);
    struct stat sb;
    CHECK(stat(pp, &sb) == 0);
    printf("  PS inference model params: %lld bytes (the whole table: %d)\n", (long long)sb.st_size, 100003 * 10 * 4);
    CHECK(sb.st_size < 100003 * 10 * 4 / 4);
    /* collective: two trainers, one thread each, the embedding gradient all-gathered */
    char *co = run("coll", 180,
                   "%s/tools/fleetrun --nproc_per_node 2 --log_dir %s/clog %s/examples/ctr/train --mode collective "
                   "--train_data %s/data/train --test_data %s/data/test --model_dir %s/coll_model %s",
                   BIN, DIR_, BIN, DIR_, DIR_, DIR_, common);
    double a_coll = after(co, "test auc ");
    printf("  test auc: local %.4f, parameter servers %.4f, PS model without servers %.4f, collective %.4f\n", a_local,
           a_ps, a_inf, a_coll);
    fflush(stdout);
    CHECK(a_local > MIN_AUC);
    CHECK_NEAR(a_ps, a_local, TOL);
    CHECK_NEAR(a_inf, a_ps, 0.002); /* exact AUC vs the auc op's 4096 buckets */
    CHECK_NEAR(a_coll, a_local, 2 * TOL);
    free(co);
    free(loc);
    free(ps);
    free(inf);
    cleanup();
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* Record count and order-independent hash of files, read as shuffle_job reads them. */
static void hash_files(char files[][160], int n, int64_t *count, uint64_t *hash)
{
    fl_prog *p = fl_prog_create();
    fl_model_ctr_dnn_config cfg = fl_model_ctr_dnn_default();
    cfg.sparse_feature_dim = 1009;
    cfg.nhidden = 1;
    cfg.hidden[0] = 4;
    fl_model_ctr_dnn m;
    CHECK_OK(fl_model_ctr_dnn_build(p, &cfg, &m));
    const char *fp[8];
    for (int i = 0; i < n; i++) fp[i] = files[i];
    fl_dataset *ds = fl_dataset_create("QueueDataset");
    CHECK_OK(fl_dataset_set_use_var(ds, m.use_var, m.nuse_var));
    CHECK_OK(fl_dataset_set_format(ds, "criteo"));
    CHECK_OK(fl_dataset_set_sparse_feature_dim(ds, 1009));
    CHECK_OK(fl_dataset_set_batch_size(ds, 1));
    CHECK_OK(fl_dataset_set_thread(ds, 1));
    CHECK_OK(fl_dataset_set_filelist(ds, fp, n));
    fl_data_batch *b = fl_data_batch_create(ds);
    CHECK_OK(fl_dataset_begin(ds));
    *count = 0;
    *hash = 0;
    int r;
    while ((r = fl_dataset_next(ds, 0, b)) > 0) {
        uint64_t h = 0xcbf29ce484222325ull;
        for (int i = 0; i < fl_data_batch_num_slots(b); i++) {
            fl_tensor *t = fl_data_batch_tensor(b, i);
            h = fnv(h, fl_tensor_cdata(t), fl_tensor_nbytes(t));
        }
        *hash += h;
        (*count)++;
    }
    CHECK(r == 0);
    CHECK_OK(fl_dataset_end(ds));
    fl_data_batch_free(b);
    fl_dataset_free(ds);
    fl_prog_free(p);
}

/* fleet_dataset_global_shuffle between the 2 workers of a PS job: every record ends on
 * exactly one worker (count and hash of all records kept), records move, and
 * fleet_dataset_memory_data_size is the sum over workers on both. */
TEST(global_shuffle_across_ps_workers)
{
    setup();
    free(run("gen", 60, "%s/tools/fleet-datagen criteo --rows 3000 --files 4 --out %s/data --seed 9 --vocab-scale 0.01",
             BIN, DIR_));
    char files[4][160];
    char list[1024] = "";
    for (int i = 0; i < 4; i++) {
        snprintf(files[i], sizeof files[i], "%s/data/train/part-%05d", DIR_, i);
        strcat(list, " ");
        strcat(list, files[i]);
    }
    int64_t n_all, n0;
    uint64_t h_all, h0;
    hash_files(files, 4, &n_all, &h_all);
    hash_files(files, 2, &n0, &h0); /* worker 0's share before the shuffle (split_files) */
    CHECK_EQ_INT(n_all, 3000);
    char *out = run("job", 120,
                    "%s/tools/fleetrun --server_num 1 --worker_num 2 --log_dir %s/log %s/tests/bin/shuffle_job %s%s", BIN,
                    DIR_, BIN, DIR_, list);
    free(out);
    int64_t held[2], total[2], before[2];
    uint64_t hash[2];
    for (int w = 0; w < 2; w++) {
        char path[128];
        snprintf(path, sizeof path, "%s/worker.%d", DIR_, w);
        FILE *f = fopen(path, "r");
        CHECK(f);
        long long a, b, d;
        unsigned long long c;
        CHECK(fscanf(f, "held %lld total %lld hash %llu before %lld", &a, &b, &c, &d) == 4);
        fclose(f);
        held[w] = a, total[w] = b, hash[w] = c, before[w] = d;
    }
    printf("  worker 0: %lld -> %lld records, worker 1: %lld -> %lld\n", (long long)before[0], (long long)held[0],
           (long long)before[1], (long long)held[1]);
    fflush(stdout);
    CHECK_EQ_INT(before[0] + before[1], 3000);
    CHECK_EQ_INT(held[0] + held[1], 3000);
    CHECK_EQ_INT(total[0], 3000);
    CHECK_EQ_INT(total[1], 3000);
    CHECK(hash[0] + hash[1] == h_all);
    CHECK(hash[0] != h0); /* records moved between the workers */
    cleanup();
}

/* Training files that hold nothing: an error naming them, not a model trained on nothing;
 * --allow_empty 1 allows it, and infer on the same files refuses an AUC of nothing. */
TEST(empty_training_files_are_an_error)
{
    setup();
    char *o = run("mk", 20, "mkdir -p %s/empty && : > %s/empty/part-0 && : > %s/empty/part-1", DIR_, DIR_, DIR_);
    free(o);
    int rc;
    o = run_rc("empty", 60, &rc,
               "%s/examples/ctr/train --is_local 1 --epochs 2 --thread_num 1 --train_data %s/empty "
               "--model_dir %s/m",
               BIN, DIR_, DIR_);
    if (rc != 1) TFAIL("train on empty files exited %d, expected 1:\n%s", rc, o);
    CHECK_STR_HAS(o, "epoch 0 read 0 examples from 2 file(s)");
    CHECK_STR_HAS(o, "empty/part-0");
    CHECK_STR_HAS(o, "--allow_empty 1");
    CHECK(!strstr(o, "model saved"));
    free(o);
    o = run("allowed", 60,
            "%s/examples/ctr/train --is_local 1 --epochs 1 --thread_num 1 --allow_empty 1 --train_data "
            "%s/empty --model_dir %s/m",
            BIN, DIR_, DIR_);
    CHECK_STR_HAS(o, "model saved");
    free(o);
    o = run_rc("infer", 60, &rc, "%s/examples/ctr/infer --model_dir %s/m --test_data %s/empty", BIN, DIR_, DIR_);
    if (rc != 1) TFAIL("infer on empty files exited %d, expected 1:\n%s", rc, o);
    CHECK_STR_HAS(o, "read 0 examples from the 2 file(s)");
    free(o);
    cleanup();
}

/* quick_start/collective_train as rank 0 of 2 with no secret, then with a secret and no
 * rank 1: it prints the cause (no secret; rank 1 never connected), not "optimizer is NULL". */
TEST(collective_example_prints_the_first_error)
{
    setup();
    char env[512];
    int port = 20000 + (int)(getpid() % 20000); /* rank 1's port stays unused */
    snprintf(env, sizeof env,
             "env -u FLEET_JOB_SECRET -u FLEET_JOB_SECRET_FILE PADDLE_TRAINER_ID=0 "
             "PADDLE_TRAINERS_NUM=2 PADDLE_TRAINER_ENDPOINTS=127.0.0.1:%d,127.0.0.1:%d "
             "PADDLE_CURRENT_ENDPOINT=127.0.0.1:%d FLEET_COLL_TIMEOUT_MS=1000",
             port, port + 1, port);
    int rc;
    char *o = run_rc("nosecret", 60, &rc, "%s %s/examples/quick_start/collective_train 3", env, BIN);
    if (rc != 1) TFAIL("exit %d, expected 1:\n%s", rc, o);
    CHECK_STR_HAS(o, "needs the job secret");
    CHECK(!strstr(o, "optimizer is NULL"));
    free(o);
    o = run_rc("alone", 60, &rc,
               "%s FLEET_JOB_SECRET=00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff "
               "%s/examples/quick_start/collective_train 3",
               env, BIN);
    if (rc != 1) TFAIL("exit %d, expected 1:\n%s", rc, o);
    CHECK_STR_HAS(o, "fleet_distributed_optimizer: rendezvous of rank 0 timed out");
    CHECK_STR_HAS(o, "rank 1");
    CHECK(!strstr(o, "optimizer is NULL"));
    free(o);
    cleanup();
}

TEST_MAIN(T(ps_async_and_collective_match_local_training), T(global_shuffle_across_ps_workers),
          T(empty_training_files_are_an_error), T(collective_example_prints_the_first_error))
