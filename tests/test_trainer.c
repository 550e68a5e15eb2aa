/*
 * test_trainer.c - train_from_dataset / infer_from_dataset (src/exec/trainer.c): Hogwild
 * threads on CTR-DNN with planted Criteo data (BUILD/tools/fleet-datagen) reach the
 * planted model's AUC, errors stop every thread and name thread, batch, file and line,
 * programs for one trainer per process refuse more threads, inference leaves the
 * parameters alone, and the progress lines show the fetched values and the speed.
 */
#include <limits.h>
#include <pthread.h>

#include "testhelp.h"
#include "logcap.h"
#include "graph/graph_internal.h"

static char DG[PATH_MAX + 32], DIR_[64];

/* Writes planted data once per test (rows, 4 train files) into a fresh directory. */
static void gen(int rows, const char *extra)
{
    char self[PATH_MAX];
    th_tests_dir(self, sizeof self);
    snprintf(DG, sizeof DG, "%s/../tools/fleet-datagen", self);
    th_mktemp(DIR_, sizeof DIR_, "fl_trainer");
    char cmd[PATH_MAX * 2];
    snprintf(cmd, sizeof cmd, "%s criteo --rows %d --files 4 --out %s --seed 3 %s > %s/gen.log 2>&1", DG, rows, DIR_, extra,
             DIR_);
    CHECK(system(cmd) == 0);
}

static void cleanup(void) { th_rmtree(DIR_); }

static double ceiling_test(void)
{
    char path[128], buf[2048];
    snprintf(path, sizeof path, "%s/planted.json", DIR_);
    FILE *f = fopen(path, "r");
    CHECK(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strstr(buf, "\"ceiling_auc_test\":");
    CHECK(p);
    return atof(p + strlen("\"ceiling_auc_test\":"));
}

static int list(const char *sub, char files[][128], int cap)
{
    int n = 0;
    for (int i = 0; i < cap; i++) {
        snprintf(files[n], 128, "%s/%s/part-%05d", DIR_, sub, i);
        if (access(files[n], R_OK) == 0) n++;
    }
    return n;
}

typedef struct {
    fl_prog *p;
    fl_model_ctr_dnn m;
    fl_exe *e;
} ctr_t;

static ctr_t build_opt(int hidden, float lr, int minimize)
{
    ctr_t c;
    c.p = fl_prog_create();
    fl_model_ctr_dnn_config cfg = fl_model_ctr_dnn_default();
    cfg.sparse_feature_dim = 20011;
    cfg.nhidden = 2;
    cfg.hidden[0] = cfg.hidden[1] = hidden;
    CHECK_OK(fl_model_ctr_dnn_build(c.p, &cfg, &c.m));
    if (minimize) CHECK_OK(fl_opt_minimize(fl_opt_adam(lr, 0.9f, 0.999f, 1e-8f), c.m.loss));
    c.e = fl_exe_create(NULL);
    CHECK_OK(fl_exe_run(c.e, fl_prog_startup(c.p), NULL, 0, NULL, 0, NULL));
    return c;
}

static ctr_t build(int hidden, float lr) { return build_opt(hidden, lr, 1); }

static fl_dataset *dataset(ctr_t *c, const char *kind, const char *sub, int threads, int batch)
{
    static char files[16][128];
    const char *fp[16];
    int n = list(sub, files, 16);
    CHECK(n >= 1);
    for (int i = 0; i < n; i++) fp[i] = files[i];
    fl_dataset *ds = fl_dataset_create(kind);
    CHECK(ds);
    CHECK_OK(fl_dataset_set_use_var(ds, c->m.use_var, c->m.nuse_var));
    CHECK_OK(fl_dataset_set_format(ds, "criteo"));
    CHECK_OK(fl_dataset_set_sparse_feature_dim(ds, 20011));
    CHECK_OK(fl_dataset_set_batch_size(ds, batch));
    CHECK_OK(fl_dataset_set_thread(ds, threads));
    CHECK_OK(fl_dataset_set_filelist(ds, fp, n));
    return ds;
}

static double test_auc(ctr_t *c)
{
    fl_dataset *ds = dataset(c, "QueueDataset", "test", 1, 500);
    fl_prog *t = fl_prog_clone(c->p, 1);
    for (int i = 0; i < c->m.nauc_states; i++) CHECK_OK(fl_scope_zero(fl_exe_scope(c->e), fl_var_name(c->m.auc_states[i])));
    const char *fetch[1] = {fl_var_name(c->m.auc)};
    fl_exe_dataset_stats s;
    CHECK_OK(fl_exe_infer_from_dataset(c->e, t, ds, 1, fetch, NULL, 1, 0, &s));
    fl_prog_free(t);
    fl_dataset_free(ds);
    return s.fetch[0];
}

static void ctr_free(ctr_t *c)
{
    fl_exe_free(c->e);
    fl_prog_free(c->p);
}

/* Two Hogwild threads on an in-memory shuffled dataset get within 0.01 of the AUC of the
 * planted model that generated the data. */
TEST(hogwild_reaches_the_planted_auc)
{
    gen(200000, "--vocab-scale 0.002 --dense-scale 0.1 --test-rows 40000");
    double ceiling = ceiling_test();
    ctr_t c = build(64, 0.003f);
    fl_dataset *ds = dataset(&c, "InMemoryDataset", "train", 2, 100);
    CHECK_OK(fl_dataset_load_into_memory(ds));
    CHECK_EQ_INT(fl_dataset_get_memory_data_size(ds), 200000);
    const char *fetch[2] = {fl_var_name(c.m.auc), fl_var_name(c.m.loss)};
    double auc = 0;
    for (int epoch = 0; epoch < 8; epoch++) {
        CHECK_OK(fl_dataset_local_shuffle(ds, (uint64_t)epoch + 1));
        fl_exe_dataset_stats s;
        CHECK_OK(fl_exe_train_from_dataset(c.e, c.p, ds, 2, fetch, NULL, 2, 0, &s));
        CHECK_EQ_INT(s.instances, 200000);
        CHECK_EQ_INT(s.batches, 2000);
        auc = test_auc(&c);
        printf("  epoch %d: test auc %.4f (ceiling %.4f), %.0f examples/s\n", epoch, auc, ceiling, s.instances / s.seconds);
        fflush(stdout);
        if (auc > ceiling - 0.01) break;
    }
    CHECK(auc > ceiling - 0.01);
    fl_dataset_free(ds);
    ctr_free(&c);
    cleanup();
}

/* A malformed line stops every thread; the error names the thread, the batch, the file,
 * the line and the slot, and the pass returns it. */
TEST(bad_line_stops_the_pass_with_its_location)
{
    gen(4000, "--vocab-scale 0.01");
    char path[160];
    snprintf(path, sizeof path, "%s/train/part-00002", DIR_);
    FILE *f = fopen(path, "a");
    CHECK(f);
    fprintf(f, "1\t2\t3\n"); /* line 1001: 3 columns */
    fclose(f);
    ctr_t c = build(16, 0.001f);
    fl_dataset *ds = dataset(&c, "QueueDataset", "train", 2, 50);
    int st = fl_exe_train_from_dataset(c.e, c.p, ds, 2, NULL, NULL, 0, 0, NULL);
    CHECK(st == FL_ECORRUPT);
    CHECK_STR_HAS(fl_last_error(), "part-00002:1001");
    CHECK_STR_HAS(fl_last_error(), "thread ");
    CHECK_STR_HAS(fl_last_error(), "40 tab-separated columns");
    /* the "skip" policy trains on, counting the line */
    CHECK_OK(fl_dataset_set_bad_line_policy(ds, "skip"));
    fl_exe_dataset_stats s;
    CHECK_OK(fl_exe_train_from_dataset(c.e, c.p, ds, 2, NULL, NULL, 0, 0, &s));
    CHECK_EQ_INT(s.instances, 4000);
    CHECK_EQ_INT(fl_dataset_bad_lines(ds), 1);
    fl_dataset_free(ds);
    ctr_free(&c);
    cleanup();
}

/* Inference passes read every instance and change no parameter; a program marked
 * single_trainer refuses two threads; progress lines carry labels and speed. */
TEST(infer_pass_threads_and_progress)
{
    gen(3000, "--vocab-scale 0.01");
    ctr_t c = build(16, 0.01f);
    fl_dataset *ds = dataset(&c, "QueueDataset", "train", 2, 64);
    const char *w = "fc_0.w_0";
    fl_tensor *wt = fl_scope_find(fl_exe_scope(c.e), w);
    CHECK(wt);
    size_t nb = fl_tensor_nbytes(wt);
    void *before = malloc(nb);
    memcpy(before, fl_tensor_cdata(wt), nb);
    fl_prog *t = fl_prog_clone(c.p, 1);
    fl_exe_dataset_stats s;
    const char *fetch[1] = {fl_var_name(c.m.auc)};
    CHECK_OK(fl_exe_infer_from_dataset(c.e, t, ds, 0, fetch, NULL, 1, 0, &s));
    CHECK_EQ_INT(s.instances, 3000);
    /* fewer trainer threads than the dataset's 2 readers still read every instance, from
     * files and from memory */
    CHECK_OK(fl_exe_infer_from_dataset(c.e, t, ds, 1, fetch, NULL, 1, 0, &s));
    CHECK_EQ_INT(s.instances, 3000);
    fl_dataset *mem = dataset(&c, "InMemoryDataset", "train", 4, 64);
    CHECK_OK(fl_dataset_load_into_memory(mem));
    CHECK_EQ_INT(fl_dataset_thread_num(mem), 4);
    CHECK_OK(fl_exe_infer_from_dataset(c.e, t, mem, 3, fetch, NULL, 1, 0, &s));
    CHECK_EQ_INT(s.instances, 3000);
    fl_dataset_free(mem);
    CHECK(memcmp(before, fl_tensor_cdata(wt), nb) == 0);
    /* training changes it, and prints a line every 10 batches of thread 0 */
    char out[128];
    snprintf(out, sizeof out, "%s/progress.txt", DIR_);
    fflush(stdout);
    int saved = dup(1);
    FILE *pf = freopen(out, "w", stdout);
    CHECK(pf);
    const char *info[1] = {"AUC"};
    int st = fl_exe_train_from_dataset(c.e, c.p, ds, 2, fetch, info, 1, 10, &s);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    CHECK_OK(st);
    CHECK(memcmp(before, fl_tensor_cdata(wt), nb) != 0);
    FILE *rf = fopen(out, "r");
    char line[512];
    int lines = 0;
    while (rf && fgets(line, sizeof line, rf)) {
        CHECK_STR_HAS(line, "train batch ");
        CHECK_STR_HAS(line, "AUC 0.");
        CHECK_STR_HAS(line, "ex/s");
        lines++;
    }
    if (rf) fclose(rf);
    CHECK(lines >= 1);
    /* one trainer per process: an op marked single_trainer */
    CHECK_OK(fl__attr_set_i(t->ops[0], "single_trainer", 1));
    CHECK(fl_exe_infer_from_dataset(c.e, t, ds, 2, NULL, NULL, 0, 0, NULL) == FL_EINVAL);
    CHECK_STR_HAS(fl_last_error(), "one thread per process");
    CHECK_OK(fl_exe_infer_from_dataset(c.e, t, ds, 1, NULL, NULL, 0, 0, NULL));
    /* bad arguments */
    CHECK(fl_exe_train_from_dataset(c.e, c.p, NULL, 1, NULL, NULL, 0, 0, NULL) == FL_EINVAL);
    CHECK(fl_exe_train_from_dataset(c.e, c.p, ds, 1, NULL, NULL, 0, -1, NULL) == FL_EINVAL);
    free(before);
    fl_prog_free(t);
    fl_dataset_free(ds);
    ctr_free(&c);
    cleanup();
}

/* Log lines, captured by logcap.h's sink (FLEET_LOG_LEVEL=info is set before the first line). */

#define FORGOT "no backward or optimizer op"

/* Training a program that was never minimized warns once per executor and program, naming
 * a parameter and fl_opt_minimize; a minimized program, an inference pass and fl_exe_run
 * (which cannot tell training from evaluation) do not warn. */
TEST(forgotten_minimize_warns_once)
{
    setenv("FLEET_LOG_LEVEL", "info", 1);
    fl_log_set_sink(log_sink, NULL);
    gen(2000, "--vocab-scale 0.01");
    ctr_t c = build_opt(16, 0.01f, 0);
    fl_dataset *ds = dataset(&c, "QueueDataset", "train", 2, 64);
    fl_tensor *wt = fl_scope_find(fl_exe_scope(c.e), "fc_0.w_0");
    CHECK(wt);
    size_t nb = fl_tensor_nbytes(wt);
    void *before = malloc(nb);
    memcpy(before, fl_tensor_cdata(wt), nb);
    for (int epoch = 0; epoch < 3; epoch++) CHECK_OK(fl_exe_train_from_dataset(c.e, c.p, ds, 2, NULL, NULL, 0, 0, NULL));
    CHECK(memcmp(before, fl_tensor_cdata(wt), nb) == 0); /* nothing trained */
    CHECK_EQ_INT(count_in_log(FORGOT), 1);
    CHECK_STR_HAS(log_text, "W ");
    CHECK_STR_HAS(log_text, "fl_exe_train_from_dataset: the program has ");
    CHECK_STR_HAS(log_text, "(e.g. '");
    CHECK_STR_HAS(log_text, "call fl_opt_minimize(optimizer, loss)");
    /* fl_exe_run and inference passes say nothing */
    log_text[0] = 0;
    CHECK_OK(fl_exe_infer_from_dataset(c.e, c.p, ds, 2, NULL, NULL, 0, 0, NULL));
    fl_prog *t = fl_prog_clone(c.p, 1);
    CHECK_OK(fl_exe_infer_from_dataset(c.e, t, ds, 1, NULL, NULL, 0, 0, NULL));
    fl_prog_free(t);
    CHECK_EQ_INT(count_in_log(FORGOT), 0);
    fl_dataset_free(ds);
    ctr_free(&c);
    /* a minimized program trains without the warning */
    c = build_opt(16, 0.01f, 1);
    ds = dataset(&c, "QueueDataset", "train", 2, 64);
    CHECK_OK(fl_exe_train_from_dataset(c.e, c.p, ds, 2, NULL, NULL, 0, 0, NULL));
    t = fl_prog_clone(c.p, 1);
    CHECK_OK(fl_exe_infer_from_dataset(c.e, t, ds, 2, NULL, NULL, 0, 0, NULL));
    CHECK_EQ_INT(count_in_log(FORGOT), 0);
    /* training the forward-only clone by mistake is caught too */
    CHECK_OK(fl_exe_train_from_dataset(c.e, t, ds, 1, NULL, NULL, 0, 0, NULL));
    CHECK_EQ_INT(count_in_log(FORGOT), 1);
    fl_prog_free(t);
    free(before);
    fl_dataset_free(ds);
    ctr_free(&c);
    cleanup();
}

/* A program with an op marked single_trainer (collective, sync PS, GEO) trains with one
 * thread when none is asked (thread <= 0), saying so; an explicit 2 fails naming the op and
 * what to pass. */
TEST(single_trainer_program_chooses_one_thread)
{
    setenv("FLEET_LOG_LEVEL", "info", 1);
    fl_log_set_sink(log_sink, NULL);
    gen(3000, "--vocab-scale 0.01");
    ctr_t c = build(16, 0.01f);
    fl_dataset *ds = dataset(&c, "QueueDataset", "train", 3, 64);
    CHECK_OK(fl__attr_set_i(c.p->ops[0], "single_trainer", 1));
    fl_exe_dataset_stats s;
    CHECK_OK(fl_exe_train_from_dataset(c.e, c.p, ds, 0, NULL, NULL, 0, 0, &s));
    CHECK_EQ_INT(s.instances, 3000); /* one thread read all 3 readers' shares */
    CHECK_EQ_INT(count_in_log("training with 1 thread"), 1);
    CHECK_STR_HAS(log_text, "I ");
    CHECK_STR_HAS(log_text, c.p->ops[0]->def->type);
    CHECK_OK(fl_exe_train_from_dataset(c.e, c.p, ds, -1, NULL, NULL, 0, 0, &s));
    CHECK_EQ_INT(s.instances, 3000);
    CHECK(fl_exe_train_from_dataset(c.e, c.p, ds, 2, NULL, NULL, 0, 0, NULL) == FL_EINVAL);
    CHECK_STR_HAS(fl_last_error(), "one thread per process; got 2 threads: pass thread 1 (or 0 to choose it)");
    CHECK_STR_HAS(fl_last_error(), c.p->ops[0]->def->type);
    CHECK_OK(fl_exe_train_from_dataset(c.e, c.p, ds, 1, NULL, NULL, 0, 0, &s));
    CHECK_EQ_INT(s.instances, 3000);
    fl_dataset_free(ds);
    ctr_free(&c);
    cleanup();
}

TEST_MAIN(T(hogwild_reaches_the_planted_auc), T(bad_line_stops_the_pass_with_its_location),
          T(infer_pass_threads_and_progress), T(forgotten_minimize_warns_once),
          T(single_trainer_program_chooses_one_thread))
