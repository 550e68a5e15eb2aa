/*
 * test_metrics.c - the metrics writer (src/exec/metrics.c, tfevents.c), the records a
 * dataset pass writes (progress.c) and fl_dataset_progress: CRC-32C known answers, the
 * TFRecord framing and Event encoding parsed back, the CSV content, the rank and the
 * errors.  tests/python/test_metrics.py reads the event files with TensorBoard itself.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "exec/metrics_internal.h"
#include "testhelp.h"

static char DIR_[64];

static void tmpdir(void) { th_mktemp(DIR_, sizeof DIR_, "fl_metrics"); }

static void rmdir_all(void) { th_rmtree(DIR_); }

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) TFAIL("cannot open %s", path);
    char *buf = malloc(1 << 20);
    size_t n = fread(buf, 1, (1 << 20) - 1, f);
    fclose(f);
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

/* The one event file in dir (TFAIL if none or several). */
static void event_file(const char *dir, char *out, size_t cap)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "ls %s/events.out.tfevents.* 2>/dev/null", dir);
    FILE *p = popen(cmd, "r");
    int n = 0;
    char line[512];
    while (p && fgets(line, sizeof line, p)) {
        line[strcspn(line, "\n")] = 0;
        snprintf(out, cap, "%s", line);
        n++;
    }
    if (p) pclose(p);
    if (n != 1) TFAIL("%d event files in %s, expected 1", n, dir);
}

TEST(crc32c_known_answers)
{
    CHECK_EQ_INT(fl__crc32c(0, "123456789", 9), 0xE3069283u);
    CHECK_EQ_INT(fl__crc32c(0, "", 0), 0);
    uint8_t z[32], ff[32], inc[32];
    for (int i = 0; i < 32; i++) z[i] = 0, ff[i] = 0xff, inc[i] = (uint8_t)i;
    /* RFC 3720 (iSCSI), B.4 */
    CHECK_EQ_INT(fl__crc32c(0, z, 32), 0x8A9136AAu);
    CHECK_EQ_INT(fl__crc32c(0, ff, 32), 0x62A8AB43u);
    CHECK_EQ_INT(fl__crc32c(0, inc, 32), 0x46DD794Eu);
    /* continued: the same as in one piece */
    CHECK_EQ_INT(fl__crc32c(fl__crc32c(0, "1234", 4), "56789", 5), 0xE3069283u);
    uint32_t c = 0xE3069283u;
    CHECK_EQ_INT(fl__crc32c_masked("123456789", 9), ((c >> 15) | (c << 17)) + 0xa282ead8u);
}

static uint64_t rd_le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static uint64_t rd_varint(const uint8_t *p, size_t *k, size_t end)
{
    uint64_t v = 0;
    for (int s = 0; *k < end; s += 7) {
        uint8_t b = p[(*k)++];
        v |= (uint64_t)(b & 0x7f) << s;
        if (!(b & 0x80)) return v;
    }
    TFAIL("varint runs past the message");
}

typedef struct {
    double wall_time;
    int64_t step;
    char version[32], tag[160];
    float value;
    int has_value;
} event;

/* A protobuf reader for the fields the writer uses: Event{1 wall_time, 2 step,
 * 3 file_version, 5 summary}, Summary{1 value}, Value{1 tag, 2 simple_value}. */
static void parse_msg(const uint8_t *p, size_t n, int depth, event *ev)
{
    size_t k = 0;
    while (k < n) {
        uint64_t key = rd_varint(p, &k, n);
        int field = (int)(key >> 3), wt = (int)(key & 7);
        if (wt == 1) {
            CHECK(k + 8 <= n);
            uint64_t b = rd_le(p + k, 8);
            if (depth == 0 && field == 1) memcpy(&ev->wall_time, &b, 8);
            k += 8;
        } else if (wt == 5) {
            CHECK(k + 4 <= n);
            uint32_t b = (uint32_t)rd_le(p + k, 4);
            CHECK(depth == 2 && field == 2);
            memcpy(&ev->value, &b, 4);
            ev->has_value = 1;
            k += 4;
        } else if (wt == 0) {
            uint64_t v = rd_varint(p, &k, n);
            CHECK(depth == 0 && field == 2);
            ev->step = (int64_t)v;
        } else if (wt == 2) {
            size_t len = (size_t)rd_varint(p, &k, n);
            CHECK(k + len <= n);
            if (depth == 0 && field == 3) snprintf(ev->version, sizeof ev->version, "%.*s", (int)len, (const char *)p + k);
            else if (depth == 0 && field == 5) parse_msg(p + k, len, 1, ev);
            else if (depth == 1 && field == 1) parse_msg(p + k, len, 2, ev);
            else if (depth == 2 && field == 1) snprintf(ev->tag, sizeof ev->tag, "%.*s", (int)len, (const char *)p + k);
            else TFAIL("unexpected field %d at depth %d", field, depth);
            k += len;
        } else {
            TFAIL("unexpected wire type %d", wt);
        }
    }
}

/* Reads the TFRecords of an event file, checking both CRCs of each. */
static int read_events(const char *path, event *evs, int cap)
{
    size_t len;
    uint8_t *b = (uint8_t *)slurp(path, &len);
    size_t k = 0;
    int n = 0;
    while (k < len) {
        CHECK(k + 12 <= len);
        uint64_t dl = rd_le(b + k, 8);
        CHECK_EQ_INT(rd_le(b + k + 8, 4), fl__crc32c_masked(b + k, 8));
        CHECK(k + 16 + dl <= len);
        CHECK_EQ_INT(rd_le(b + k + 12 + dl, 4), fl__crc32c_masked(b + k + 12, dl));
        CHECK(n < cap);
        memset(&evs[n], 0, sizeof evs[n]);
        parse_msg(b + k + 12, dl, 0, &evs[n++]);
        k += 16 + dl;
    }
    free(b);
    return n;
}

TEST(event_file_framing_parses_back)
{
    tmpdir();
    fl_metrics_opts o = fl_metrics_opts_default();
    o.rank = 3;
    o.formats = "tensorboard";
    char dir[128];
    snprintf(dir, sizeof dir, "%s/m/deeper", DIR_); /* made with its parents */
    fl_metrics *m = fl_metrics_open(dir, &o);
    CHECK(m);
    CHECK_EQ_INT(fl_metrics_rank(m), 3);
    CHECK_OK(fl_metrics_scalar(m, "loss", 10, 0, 0.693));
    CHECK_OK(fl_metrics_scalar(m, "epoch/auc", 1, 1, 0.75));
    char tag[129];
    memset(tag, 'a', 128);
    tag[128] = 0;
    CHECK_OK(fl_metrics_scalar(m, tag, 300, 2, -1.5)); /* the longest tag; a two-byte length */
    CHECK_OK(fl_metrics_close(m));
    char sub[160], path[512];
    snprintf(sub, sizeof sub, "%s/rank3", dir);
    event_file(sub, path, sizeof path);
    snprintf(sub, sizeof sub, "%s/metrics.rank3.csv", dir);
    CHECK(access(sub, F_OK) != 0); /* csv not asked for */
    event ev[8];
    CHECK_EQ_INT(read_events(path, ev, 8), 4);
    CHECK(!strcmp(ev[0].version, "brain.Event:2"));
    CHECK(ev[0].wall_time > 1.5e9 && !ev[0].has_value);
    CHECK(!strcmp(ev[1].tag, "loss") && ev[1].step == 10 && ev[1].value == 0.693f);
    CHECK(!strcmp(ev[2].tag, "epoch/auc") && ev[2].step == 1 && ev[2].value == 0.75f);
    CHECK(!strcmp(ev[3].tag, tag) && ev[3].step == 300 && ev[3].value == -1.5f);
    CHECK(ev[3].wall_time >= ev[1].wall_time && ev[1].wall_time >= ev[0].wall_time);
    rmdir_all();
}

TEST(csv_content_and_append)
{
    tmpdir();
    fl_metrics_opts o = fl_metrics_opts_default();
    o.rank = 1;
    fl_metrics *m = fl_metrics_open(DIR_, &o);
    CHECK(m);
    CHECK(!strcmp(fl_metrics_dir(m), DIR_));
    CHECK_OK(fl_metrics_scalar(m, "loss", 100, 0, 0.5));
    CHECK_OK(fl_metrics_scalar(m, "epoch/loss", 0, 0, 0.25));
    CHECK_OK(fl_metrics_close(m));
    /* a second writer appends (a restarted job), without a second header */
    m = fl_metrics_open(DIR_, &o);
    CHECK(m);
    CHECK_OK(fl_metrics_scalar(m, "lr", 200, -1, 1e-3));
    CHECK_OK(fl_metrics_close(m));
    char path[128];
    snprintf(path, sizeof path, "%s/metrics.rank1.csv", DIR_);
    char *s = slurp(path, NULL);
    CHECK_EQ_INT(th_count(s, "wall_time,rank,epoch,step,tag,value\n"), 1);
    CHECK(!strncmp(s, "wall_time,rank,epoch,step,tag,value\n", 36));
    CHECK_STR_HAS(s, ",1,0,100,loss,0.5\n");
    CHECK_STR_HAS(s, ",1,0,0,epoch/loss,0.25\n");
    CHECK_STR_HAS(s, ",1,-1,200,lr,0.001\n");
    CHECK_EQ_INT(th_count(s, "\n"), 4);
    free(s);
    /* two writers, two event files in rank1/ */
    char cmd[256];
    snprintf(cmd, sizeof cmd, "test $(ls %s/rank1 | grep -c tfevents) -eq 2", DIR_);
    CHECK(system(cmd) == 0);
    rmdir_all();
}

TEST(rank_from_identity_then_env)
{
    tmpdir();
    setenv("PADDLE_TRAINER_ID", "5", 1);
    fl_metrics *m = fl_metrics_open(DIR_, NULL);
    CHECK(m);
    CHECK_EQ_INT(fl_metrics_rank(m), 5);
    CHECK_OK(fl_metrics_close(m));
    setenv("PADDLE_TRAINER_ID", "five", 1);
    CHECK(fl_metrics_open(DIR_, NULL) == NULL);
    CHECK_STR_HAS(fl_last_error(), "PADDLE_TRAINER_ID='five'");
    fl_log_set_identity("worker", 2); /* as fleet_init does */
    m = fl_metrics_open(DIR_, NULL);
    CHECK(m);
    CHECK_EQ_INT(fl_metrics_rank(m), 2);
    CHECK_OK(fl_metrics_close(m));
    char path[128];
    snprintf(path, sizeof path, "%s/metrics.rank2.csv", DIR_);
    CHECK(access(path, F_OK) == 0);
    snprintf(path, sizeof path, "%s/rank2", DIR_);
    CHECK(access(path, F_OK) == 0);
    rmdir_all();
}

TEST(bad_arguments_are_named)
{
    tmpdir();
    fl_metrics_opts o = fl_metrics_opts_default();
    o.rank = 0;
    o.formats = "csv,parquet";
    CHECK(fl_metrics_open(DIR_, &o) == NULL);
    CHECK_STR_HAS(fl_last_error(), "unknown format 'parquet'");
    o.formats = "";
    CHECK(fl_metrics_open(DIR_, &o) == NULL);
    CHECK_STR_HAS(fl_last_error(), "formats is empty");
    CHECK(fl_metrics_open(NULL, &o) == NULL);
    CHECK_STR_HAS(fl_last_error(), "dir is NULL");
    char file[128];
    snprintf(file, sizeof file, "%s/plain", DIR_);
    FILE *f = fopen(file, "w");
    CHECK(f);
    fclose(f);
    o.formats = NULL;
    CHECK(fl_metrics_open(file, &o) == NULL);
    CHECK_STR_HAS(fl_last_error(), "plain is not a directory");
    fl_metrics *m = fl_metrics_open(DIR_, &o);
    CHECK(m);
    CHECK_FAILS(fl_metrics_scalar(m, "a,b", 0, 0, 1), FL_EINVAL, "tag 'a,b'");
    CHECK_FAILS(fl_metrics_scalar(m, "", 0, 0, 1), FL_EINVAL, "tag ''");
    CHECK_FAILS(fl_metrics_scalar(m, "loss", -1, 0, 1), FL_EINVAL, "step (-1)");
    CHECK_FAILS(fl_metrics_scalar(NULL, "loss", 0, 0, 1), FL_EINVAL, "metrics writer is NULL");
    CHECK_OK(fl_metrics_close(m));
    CHECK_OK(fl_metrics_close(NULL));
    rmdir_all();
}

/* ---- a dataset pass writes the records -------------------------------------------------- */

typedef struct {
    fl_prog *p;
    fl_exe *e;
    fl_opt *opt;
    fl_var *x, *y, *loss, *acc;
} model_t;

static model_t build(void)
{
    model_t m;
    m.p = fl_prog_create();
    m.x = fl_layer_data(m.p, "x", FL_SHAPE(4), FL_FLOAT32, 0);
    m.y = fl_layer_data(m.p, "y", FL_SHAPE(1), FL_INT64, 0);
    fl_var *prob = fl_layer_fc(FL_VARS(m.x), 2, "softmax");
    m.loss = fl_layer_mean(fl_layer_cross_entropy(prob, m.y));
    m.acc = fl_layer_accuracy(prob, m.y, 1);
    m.opt = fl_opt_sgd(0.1f);
    CHECK_OK(fl_opt_minimize(m.opt, m.loss));
    m.e = fl_exe_create(NULL);
    CHECK(m.e);
    CHECK_OK(fl_exe_run(m.e, fl_prog_startup(m.p), NULL, 0, NULL, 0, NULL));
    return m;
}

/* nfiles MultiSlot files of `rows` lines: x (4 floats), y = (x0 + x1 > 1). */
static fl_dataset *dataset(model_t *m, const char *kind, int nfiles, int rows, int64_t *bytes)
{
    char *files[8];
    *bytes = 0;
    unsigned seed = 7;
    for (int i = 0; i < nfiles; i++) {
        files[i] = malloc(128);
        snprintf(files[i], 128, "%s/part-%d", DIR_, i);
        FILE *f = fopen(files[i], "w");
        CHECK(f);
        for (int r = 0; r < rows; r++) {
            float v[4];
            for (int k = 0; k < 4; k++) v[k] = (float)(rand_r(&seed) % 1000) / 1000.0f;
            fprintf(f, "4 %.3f %.3f %.3f %.3f 1 %d\n", v[0], v[1], v[2], v[3], v[0] + v[1] > 1.0f);
        }
        *bytes += ftell(f);
        fclose(f);
    }
    fl_dataset *ds = fl_dataset_create(kind);
    CHECK(ds);
    CHECK_OK(fl_dataset_set_batch_size(ds, 10));
    CHECK_OK(fl_dataset_set_thread(ds, 2));
    CHECK_OK(fl_dataset_set_use_var(ds, (fl_var *const[]){m->x, m->y}, 2));
    CHECK_OK(fl_dataset_set_filelist(ds, (const char *const *)files, nfiles));
    for (int i = 0; i < nfiles; i++) free(files[i]);
    return ds;
}

static int lines_with(const char *s, const char *tag)
{
    char pat[96];
    snprintf(pat, sizeof pat, ",%s,", tag);
    return th_count(s, pat);
}

TEST(train_from_dataset_writes_metrics_from_the_environment)
{
    tmpdir();
    char dir[128];
    snprintf(dir, sizeof dir, "%s/metrics", DIR_);
    setenv("FLEET_METRICS_DIR", dir, 1);
    unsetenv("PADDLE_TRAINER_ID");
    model_t m = build();
    int64_t bytes;
    fl_dataset *ds = dataset(&m, "QueueDataset", 3, 200, &bytes);
    const char *fetch[2] = {fl_var_name(m.loss), fl_var_name(m.acc)}, *info[2] = {"loss", "acc"};
    fl_exe_dataset_stats s;
    fflush(stdout);
    for (int ep = 0; ep < 2; ep++) CHECK_OK(fl_exe_train_from_dataset(m.e, m.p, ds, 2, fetch, info, 2, 20, &s));
    CHECK_EQ_INT(s.instances, 600);
    /* the whole of every file was read */
    fl_data_progress pg;
    CHECK_OK(fl_dataset_progress(ds, &pg));
    CHECK_EQ_INT(pg.total, bytes);
    CHECK_EQ_INT(pg.done, bytes);
    CHECK_EQ_INT(pg.files_done, 3);
    CHECK_EQ_INT(pg.files, 3);
    CHECK(!strcmp(pg.unit, "bytes") && pg.fraction == 1.0);
    /* an inference pass adds infer/ records */
    fl_prog *test = fl_prog_clone(m.p, 1);
    CHECK_OK(fl_exe_infer_from_dataset(m.e, test, ds, 1, fetch, info, 2, 0, &s));
    fl_metrics *w;
    CHECK_OK(fl_exe_get_metrics(m.e, &w));
    CHECK(w && fl_metrics_rank(w) == 0);
    fl_exe_free(m.e); /* closes the writer */
    char path[256];
    snprintf(path, sizeof path, "%s/metrics.rank0.csv", dir);
    char *csv = slurp(path, NULL);
    /* 60 batches a pass, a group every 20: 3 groups per epoch */
    CHECK_EQ_INT(lines_with(csv, "loss"), 6);
    CHECK_EQ_INT(lines_with(csv, "acc"), 6);
    CHECK_EQ_INT(lines_with(csv, "examples_per_s"), 6);
    CHECK_EQ_INT(lines_with(csv, "lr"), 6);
    CHECK_STR_HAS(csv, ",0,0,20,loss,");
    CHECK_STR_HAS(csv, ",0,1,120,loss,");
    CHECK_STR_HAS(csv, ",0,0,0,epoch/loss,");
    CHECK_STR_HAS(csv, ",0,1,1,epoch/acc,");
    CHECK_STR_HAS(csv, ",0,1,1,epoch/lr,0.100000001\n");
    CHECK_STR_HAS(csv, ",0,2,2,infer/acc,");
    CHECK(!strstr(csv, "infer/lr"));
    /* the epoch's loss is a mean per example: between 0 and log(2)-ish, falling */
    const char *e0 = strstr(csv, "epoch/loss,"), *e1 = strstr(e0 + 1, "epoch/loss,");
    CHECK(e0 && e1);
    double l0 = atof(e0 + 11), l1 = atof(e1 + 11);
    CHECK(l0 > 0 && l0 < 1.0 && l1 < l0);
    free(csv);
    snprintf(path, sizeof path, "%s/rank0", dir);
    char ev[512];
    event_file(path, ev, sizeof ev);
    event evs[64];
    CHECK_EQ_INT(read_events(ev, evs, 64), 1 + 2 * (3 * 4 + 4) + 3);
    fl_opt_free(m.opt);
    fl_prog_free(m.p);
    fl_prog_free(test);
    fl_dataset_free(ds);
    rmdir_all();
}

TEST(set_metrics_overrides_the_environment)
{
    tmpdir();
    char envdir[128], mine[128];
    snprintf(envdir, sizeof envdir, "%s/env", DIR_);
    snprintf(mine, sizeof mine, "%s/mine", DIR_);
    setenv("FLEET_METRICS_DIR", envdir, 1);
    model_t m = build();
    int64_t bytes;
    fl_dataset *ds = dataset(&m, "InMemoryDataset", 2, 50, &bytes);
    CHECK_OK(fl_dataset_load_into_memory(ds));
    const char *fetch[1] = {fl_var_name(m.loss)};
    CHECK_OK(fl_exe_set_metrics(m.e, NULL, NULL)); /* off, the environment included */
    CHECK_OK(fl_exe_train_from_dataset(m.e, m.p, ds, 2, fetch, NULL, 1, 0, NULL));
    CHECK(access(envdir, F_OK) != 0);
    fl_data_progress pg;
    CHECK_OK(fl_dataset_progress(ds, &pg));
    CHECK(!strcmp(pg.unit, "records") && pg.done == 100 && pg.total == 100 && pg.files == 0);
    fl_metrics_opts o = fl_metrics_opts_default();
    o.rank = 7;
    o.formats = "csv";
    CHECK_OK(fl_exe_set_metrics(m.e, mine, &o));
    CHECK_OK(fl_exe_train_from_dataset(m.e, m.p, ds, 2, fetch, NULL, 1, 0, NULL));
    CHECK_OK(fl_exe_set_metrics(m.e, NULL, NULL)); /* closes (flushes) it */
    char path[256];
    snprintf(path, sizeof path, "%s/metrics.rank7.csv", mine);
    char *csv = slurp(path, NULL);
    /* no print_period: epoch records only, labelled by the variable's name; the second
     * training pass is epoch 1 */
    char want[128];
    snprintf(want, sizeof want, ",7,1,1,epoch/%s,", fl_var_name(m.loss));
    CHECK_STR_HAS(csv, want);
    CHECK_EQ_INT(th_count(csv, "\n"), 1 + 3);
    free(csv);
    CHECK(access(envdir, F_OK) != 0);
    /* a directory that cannot be made fails the pass before it starts, naming it */
    setenv("FLEET_METRICS_DIR", "/proc/no/such/dir", 1);
    fl_exe *e2 = fl_exe_create(fl_exe_scope(m.e));
    int st = fl_exe_train_from_dataset(e2, m.p, ds, 1, fetch, NULL, 1, 0, NULL);
    CHECK(st != FL_OK);
    CHECK_STR_HAS(fl_last_error(), "FLEET_METRICS_DIR='/proc/no/such/dir'");
    fl_exe_free(e2);
    fl_exe_free(m.e);
    fl_opt_free(m.opt);
    fl_prog_free(m.p);
    fl_dataset_free(ds);
    rmdir_all();
}

/* A file read through a pipe_command counts whole when the command's output ends; the
 * fraction never goes back. */
TEST(dataset_progress_through_a_pipe_command)
{
    tmpdir();
    model_t m = build();
    int64_t bytes;
    fl_dataset *ds = dataset(&m, "QueueDataset", 3, 40, &bytes);
    CHECK_OK(fl_dataset_set_thread(ds, 1));
    CHECK_OK(fl_dataset_set_pipe_command(ds, "sed -n p"));
    fl_data_progress pg;
    CHECK_OK(fl_dataset_begin(ds));
    CHECK_OK(fl_dataset_progress(ds, &pg));
    CHECK(pg.done == 0 && pg.total == bytes && pg.files == 3 && pg.files_done == 0 && pg.fraction == 0);
    fl_data_batch *b = fl_data_batch_create(ds);
    double last = 0;
    int r, batches = 0;
    while ((r = fl_dataset_next(ds, 0, b)) == 1) {
        CHECK_OK(fl_dataset_progress(ds, &pg));
        CHECK(pg.fraction >= last && pg.fraction <= 1.0);
        last = pg.fraction;
        batches++;
    }
    CHECK_EQ_INT(r, 0);
    CHECK_EQ_INT(batches, 12);
    CHECK_OK(fl_dataset_end(ds));
    CHECK_OK(fl_dataset_progress(ds, &pg)); /* the last pass's, after the end */
    CHECK(pg.done == bytes && pg.files_done == 3 && pg.fraction == 1.0);
    CHECK_FAILS(fl_dataset_progress(ds, NULL), FL_EINVAL, "out is NULL");
    CHECK_FAILS(fl_dataset_progress(NULL, &pg), FL_EINVAL, "dataset is NULL");
    fl_data_batch_free(b);
    fl_exe_free(m.e);
    fl_opt_free(m.opt);
    fl_prog_free(m.p);
    fl_dataset_free(ds);
    rmdir_all();
}

TEST_MAIN(T(crc32c_known_answers), T(event_file_framing_parses_back), T(csv_content_and_append),
          T(rank_from_identity_then_env), T(bad_arguments_are_named),
          T(train_from_dataset_writes_metrics_from_the_environment), T(set_metrics_overrides_the_environment),
          T(dataset_progress_through_a_pipe_command))
