/* test_dataset.c - QueueDataset: batches and LoD, reader threads, bad-line policies,
 * pipe_command (failing, silent, early stop), Criteo text through the dataset, and the API's
 * misuse errors.  InMemoryDataset (load, preload, local and global shuffle):
 * test_dataset_inmemory.c; the helpers both use: datasethelp.h. */
#include "datasethelp.h"
#include "logcap.h"

/* ---- helpers ---------------------------------------------------------------------------- */

/* The process is gone, or dead and waiting for its (new) parent to reap it. */
static int gone_or_zombie(int pid)
{
    char path[64], buf[256];
    for (int tries = 0; tries < 300; tries++) {
        snprintf(path, sizeof path, "/proc/%d/stat", pid);
        FILE *f = fopen(path, "r");
        if (!f) return 1;
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = 0;
        const char *rp = strrchr(buf, ')');
        if (rp && (rp[2] == 'Z' || rp[2] == 'X')) return 1;
        usleep(10000);
    }
    return 0;
}

/* ---- QueueDataset ----------------------------------------------------------------------- */

TEST(queue_batches_lod_and_tensor_reuse)
{
    mk_tmpdir();
    const char *files[] = {gen_file("a.txt", 0, 7), gen_file("b.txt", 7, 10)};
    fl_dataset *ds = ms_dataset("QueueDataset", files, 2, 4, 1);
    CHECK_EQ_INT(fl_dataset_num_slots(ds), 4);
    CHECK(!strcmp(fl_dataset_slot_name(ds, 2), "dense"));
    CHECK(fl_dataset_slot_name(ds, 4) == NULL);
    fl_data_batch *b = fl_data_batch_create(ds);
    CHECK(b);
    CHECK(!strcmp(fl_data_batch_name(b, 0), "ids"));
    CHECK_OK(fl_dataset_begin(ds));
    /* batches run across the file boundary: 4, 4, 2 */
    int sizes[3], nb = 0, r;
    digest d = {0};
    void *dense_data = NULL;
    while ((r = fl_dataset_next(ds, 0, b)) > 0) {
        CHECK(nb < 3);
        sizes[nb++] = fl_data_batch_size(b);
        digest_batch(b, &d);
        if (!dense_data) dense_data = fl_tensor_data(fl_data_batch_tensor(b, 2));
        CHECK(fl_tensor_data(fl_data_batch_tensor(b, 2)) == dense_data); /* storage reused */
    }
    CHECK_EQ_INT(r, 0);
    CHECK_EQ_INT(fl_dataset_next(ds, 0, b), 0); /* stays at the end */
    CHECK_OK(fl_dataset_end(ds));
    CHECK_EQ_INT(nb, 3);
    CHECK_EQ_INT(sizes[0], 4);
    CHECK_EQ_INT(sizes[1], 4);
    CHECK_EQ_INT(sizes[2], 2);
    check_digest(d, expected(0, 10));
    /* exact first batch: ids of instances 0..3 and their LoD */
    CHECK_OK(fl_dataset_begin(ds));
    CHECK_EQ_INT(fl_dataset_next(ds, 0, b), 1);
    int64_t n = 0;
    const int64_t *lod = fl_tensor_lod(fl_data_batch_tensor(b, 0), &n);
    const int64_t want_lod[] = {0, 1, 3, 6, 7}, want_ids[] = {0, 10, 11, 20, 21, 22, 30};
    CHECK_EQ_INT(n, 5);
    for (int i = 0; i < 5; i++) CHECK_EQ_INT(lod[i], want_lod[i]);
    for (int i = 0; i < 7; i++) CHECK_EQ_INT(fl_tensor_i64(fl_data_batch_tensor(b, 0))[i], want_ids[i]);
    CHECK_OK(fl_dataset_end(ds)); /* ending early is fine */
    fl_data_batch_free(b);
    fl_dataset_free(ds);
    rm_tmpdir();
}

TEST(queue_threads_share_files_and_clamp)
{
    setenv("FLEET_LOG_LEVEL", "info", 1);
    fl_log_set_sink(log_sink, NULL);
    mk_tmpdir();
    const char *files[5];
    char name[32];
    for (int f = 0; f < 5; f++) {
        snprintf(name, sizeof name, "p%d.txt", f);
        files[f] = gen_file(name, f * 300, f * 300 + 300 - 37 * f);
    }
    fl_dataset *ds = ms_dataset("QueueDataset", files, 5, 32, 8);
    CHECK_EQ_INT(fl_dataset_thread_num(ds), 5);
    CHECK_STR_HAS(log_text, "thread_num 8 clamped to 5, the number of files");
    CHECK_OK(fl_dataset_set_thread(ds, 3));
    CHECK_EQ_INT(fl_dataset_thread_num(ds), 3);
    digest want = {0};
    for (int f = 0; f < 5; f++) {
        digest e = expected(f * 300, f * 300 + 300 - 37 * f);
        want.n += e.n;
        want.sum += e.sum;
        want.x ^= e.x;
        want.label_sum += e.label_sum;
        want.id_first_sum += e.id_first_sum;
    }
    for (int pass = 0; pass < 2; pass++) check_digest(run_pass(ds, NULL, NULL, 0), want);
    fl_dataset_free(ds);
    rm_tmpdir();
}

TEST(bad_line_policy_stop_names_file_line_slot)
{
    mk_tmpdir();
    const char *good = gen_file("good.txt", 0, 50);
    const char *bad = write_file("bad.txt", "1 5 1 0.5 3 1 2 3 1 1\n1 5 1 0.5 3 1 2 3 1 1\n1 5 1 x 3 1 2 3 1 1\n");
    const char *files[] = {good, bad};
    fl_dataset *ds = ms_dataset("QueueDataset", files, 2, 8, 1);
    char want[256];
    snprintf(want, sizeof want, "%s:3: slot 'w' (#2): value 1 of 1 is not a number: 'x'", bad);
    fl_data_batch *b = fl_data_batch_create(ds);
    CHECK_OK(fl_dataset_begin(ds));
    int r;
    while ((r = fl_dataset_next(ds, 0, b)) > 0) {
    }
    CHECK_EQ_INT(r, FL_ECORRUPT);
    CHECK(!strcmp(fl_last_error(), want));
    CHECK_EQ_INT(fl_dataset_next(ds, 0, b), 0); /* the failed reader is done */
    fl_clear_error();
    CHECK_FAILS(fl_dataset_end(ds), FL_ECORRUPT, want);
    fl_dataset_free(ds);
    /* InMemoryDataset: the load fails with the same message and holds nothing */
    ds = ms_dataset("InMemoryDataset", files, 2, 8, 2);
    CHECK_FAILS(fl_dataset_load_into_memory(ds), FL_ECORRUPT, want);
    CHECK_EQ_INT(fl_dataset_get_memory_data_size(ds), 0);
    /* a missing file is an I/O error naming it */
    const char *missing[] = {"/nonexistent/dir/part-0"};
    CHECK_OK(fl_dataset_set_filelist(ds, missing, 1));
    CHECK_FAILS(fl_dataset_load_into_memory(ds), FL_EIO, "cannot open data file '/nonexistent/dir/part-0'");
    fl_data_batch_free(b);
    fl_dataset_free(ds);
    rm_tmpdir();
}

TEST(bad_line_policy_skip_counts_and_logs)
{
    fl_log_set_sink(log_sink, NULL);
    mk_tmpdir();
    char text[4096] = "";
    char line[128];
    int good = 0;
    for (int i = 0; i < 20; i++) {
        if (i % 3 == 1) {
            strcat(text, i % 2 ? "2 1\n" : "\n"); /* 7 bad lines */
        } else {
            gen_line(line, sizeof line, i);
            strcat(text, line);
            good++;
        }
    }
    const char *files[] = {write_file("mixed.txt", text)};
    for (int k = 0; k < 2; k++) {
        log_text[0] = 0;
        fl_dataset *ds = ms_dataset(k ? "InMemoryDataset" : "QueueDataset", files, 1, 5, 1);
        CHECK_OK(fl_dataset_set_bad_line_policy(ds, "skip"));
        digest d;
        if (k) {
            CHECK_OK(fl_dataset_load_into_memory(ds));
            CHECK_EQ_INT(fl_dataset_get_memory_data_size(ds), good);
            CHECK_EQ_INT(fl_dataset_bad_lines(ds), 7);
            CHECK_STR_HAS(log_text, "load_into_memory: skipped 7 bad lines (policy skip)");
            d = run_pass(ds, NULL, NULL, 0);
            /* a pass over memory parses nothing: the count stays the load's */
            CHECK_EQ_INT(fl_dataset_bad_lines(ds), 7);
            d = run_pass(ds, NULL, NULL, 0);
            CHECK_EQ_INT(fl_dataset_bad_lines(ds), 7);
        } else {
            d = run_pass(ds, NULL, NULL, 0);
            CHECK_EQ_INT(fl_dataset_bad_lines(ds), 7);
            CHECK_STR_HAS(log_text, "dataset pass: skipped 7 bad lines (policy skip)");
        }
        CHECK_EQ_INT(d.n, good);
        CHECK_EQ_INT(count_in_log("skipping bad line"), 5); /* the first five only */
        CHECK_STR_HAS(log_text, "mixed.txt:2: slot 'ids' (#1): expected 2 values, the line ends after 1");
        CHECK_STR_HAS(log_text, "mixed.txt:5: slot 'ids' (#1): missing: the line is empty");
        fl_dataset_free(ds);
    }
    rm_tmpdir();
}

/* ---- pipe_command ------------------------------------------------------------------------ */

TEST(pipe_command_transforms_input)
{
    mk_tmpdir();
    /* the files hold "i,comma,separated" text; the command turns it into MultiSlot */
    const char *src = gen_file("g.txt", 0, 40);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "tr ' ' ',' < %s > %s/c.txt", src, tdir);
    CHECK(system(cmd) == 0);
    char cpath[128];
    snprintf(cpath, sizeof cpath, "%s/c.txt", tdir);
    const char *files[] = {cpath, cpath};
    for (int k = 0; k < 2; k++) {
        fl_dataset *ds = ms_dataset(k ? "InMemoryDataset" : "QueueDataset", files, 2, 7, 2);
        CHECK_OK(fl_dataset_set_pipe_command(ds, "tr ',' ' '"));
        digest want = expected(0, 40), w2 = want;
        want.n += w2.n;
        want.sum += w2.sum;
        want.x ^= w2.x;
        want.label_sum += w2.label_sum;
        want.id_first_sum += w2.id_first_sum;
        if (k) CHECK_OK(fl_dataset_load_into_memory(ds));
        check_digest(run_pass(ds, NULL, NULL, 0), want);
        fl_dataset_free(ds);
    }
    check_no_children();
    rm_tmpdir();
}

TEST(pipe_command_failure_reports_status_and_stderr)
{
    mk_tmpdir();
    const char *files[] = {gen_file("g.txt", 0, 10)};
    fl_dataset *ds = ms_dataset("QueueDataset", files, 1, 4, 1);
    CHECK_OK(fl_dataset_set_pipe_command(ds, "cat; echo 'something broke' >&2; exit 3"));
    char want[512], msg[1024];
    snprintf(want, sizeof want,
             "pipe_command 'cat; echo 'something broke' >&2; exit 3' on %s exited with status 3: something broke",
             files[0]);
    int st;
    digest d = run_pass(ds, &st, msg, sizeof msg);
    CHECK_EQ_INT(st, FL_EIO);
    CHECK(!strcmp(msg, want));
    CHECK_EQ_INT(d.n, 8); /* the complete batches before the failure were delivered */
    /* the same from load_into_memory, and a child killed by a signal */
    fl_dataset_free(ds);
    ds = ms_dataset("InMemoryDataset", files, 1, 4, 1);
    CHECK_OK(fl_dataset_set_pipe_command(ds, "cat; echo 'something broke' >&2; exit 3"));
    CHECK_FAILS(fl_dataset_load_into_memory(ds), FL_EIO, want);
    CHECK_EQ_INT(fl_dataset_get_memory_data_size(ds), 0);
    CHECK_OK(fl_dataset_set_pipe_command(ds, "kill -9 $$"));
    CHECK_FAILS(fl_dataset_load_into_memory(ds), FL_EIO, "was killed by signal 9");
    CHECK_STR_HAS(fl_last_error(), "(no standard error output)");
    /* a long standard error: the message keeps its end */
    CHECK_OK(fl_dataset_set_pipe_command(ds, "i=0; while [ $i -lt 300 ]; do echo line $i >&2; i=$((i+1)); done; "
                                             "echo LAST >&2; exit 1"));
    CHECK_FAILS(fl_dataset_load_into_memory(ds), FL_EIO, "exited with status 1: ...");
    CHECK_STR_HAS(fl_last_error(), "line 299|LAST");
    CHECK(strlen(fl_last_error()) < 1023);
    /* a command that prints bad lines: the parser names the file and the line of the output */
    CHECK_OK(fl_dataset_set_pipe_command(ds, "echo '1 2'"));
    char w2[256];
    snprintf(w2, sizeof w2, "%s:1: slot 'w' (#2): missing: the line ends after 1 of 4 slots", files[0]);
    CHECK_FAILS(fl_dataset_load_into_memory(ds), FL_ECORRUPT, w2);
    fl_dataset_free(ds);
    check_no_children();
    rm_tmpdir();
}

TEST(pipe_command_silent_is_killed_after_timeout)
{
    mk_tmpdir();
    const char *files[] = {gen_file("g.txt", 0, 10)};
    fl_dataset *ds = ms_dataset("QueueDataset", files, 1, 4, 1);
    CHECK_OK(fl_dataset_set_pipe_command(ds, "echo waiting >&2; sleep 30"));
    CHECK_OK(fl_dataset_set_pipe_timeout(ds, 0.5));
    char want[512], msg[1024];
    snprintf(want, sizeof want,
             "pipe_command 'echo waiting >&2; sleep 30' on %s produced no output for 0.5 s; killed it: waiting", files[0]);
    double t0 = now_s();
    int st;
    run_pass(ds, &st, msg, sizeof msg);
    double dt = now_s() - t0;
    CHECK_EQ_INT(st, FL_ETIMEDOUT);
    CHECK(!strcmp(msg, want));
    CHECK(dt > 0.4 && dt < 3);
    check_no_children();
    /* output, then silence while still running: the same deadline applies after the data */
    CHECK_OK(fl_dataset_set_pipe_command(ds, "cat; exec >&-; sleep 30"));
    t0 = now_s();
    run_pass(ds, &st, msg, sizeof msg);
    CHECK_EQ_INT(st, FL_ETIMEDOUT);
    CHECK_STR_HAS(msg, "did not exit for 0.5 s; killed it");
    CHECK(now_s() - t0 < 3);
    check_no_children();
    fl_dataset_free(ds);
    rm_tmpdir();
}

TEST(pipe_command_no_zombie_or_orphan)
{
    mk_tmpdir();
    const char *files[] = {gen_file("g.txt", 0, 100)};
    char cmd[256], pidf[128];
    snprintf(pidf, sizeof pidf, "%s/bg.pid", tdir);
    /* a background grandchild outlives the shell unless the group is killed */
    snprintf(cmd, sizeof cmd, "sleep 30 >/dev/null 2>&1 & echo $! > %s; cat", pidf);
    fl_dataset *ds = ms_dataset("QueueDataset", files, 1, 10, 1);
    CHECK_OK(fl_dataset_set_pipe_command(ds, cmd));
    check_digest(run_pass(ds, NULL, NULL, 0), expected(0, 100));
    check_no_children();
    FILE *f = fopen(pidf, "r");
    CHECK(f);
    int bg = 0;
    CHECK(fscanf(f, "%d", &bg) == 1);
    fclose(f);
    CHECK(gone_or_zombie(bg));
    /* stopping early (end before the data is read, and free mid-pass) kills the child at once */
    CHECK_OK(fl_dataset_set_pipe_command(ds, "cat; sleep 30"));
    fl_data_batch *b = fl_data_batch_create(ds);
    double t0 = now_s();
    CHECK_OK(fl_dataset_begin(ds));
    CHECK_EQ_INT(fl_dataset_next(ds, 0, b), 1);
    CHECK_OK(fl_dataset_end(ds));
    CHECK_OK(fl_dataset_begin(ds));
    CHECK_EQ_INT(fl_dataset_next(ds, 0, b), 1);
    fl_dataset_free(ds);
    CHECK(now_s() - t0 < 2);
    check_no_children();
    fl_data_batch_free(b);
    rm_tmpdir();
}

/* ---- Criteo through the dataset ----------------------------------------------------------- */

TEST(criteo_dataset_batches)
{
    mk_tmpdir();
    fl_prog *p = fl_prog_create();
    fl_var *v[28];
    int64_t one = 1, thirteen = 13;
    v[0] = fl_layer_data(p, "dense_input", 1, &thirteen, FL_FLOAT32, 0);
    for (int i = 1; i <= 26; i++) {
        char n[16];
        snprintf(n, sizeof n, "C%d", i);
        v[i] = fl_layer_data(p, n, 1, &one, FL_INT64, 1);
    }
    v[27] = fl_layer_data(p, "label", 1, &one, FL_INT64, 0);
    char text[4096] = "";
    for (int r = 0; r < 5; r++) {
        char line[512];
        int o = snprintf(line, sizeof line, "%d", r % 2);
        for (int i = 0; i < 13; i++) o += snprintf(line + o, sizeof line - (size_t)o, "\t%s", i == r ? "" : "7");
        for (int i = 0; i < 26; i++) o += snprintf(line + o, sizeof line - (size_t)o, "\t%s", i == r ? "" : "ab12");
        snprintf(line + o, sizeof line - (size_t)o, "\r\n");
        strcat(text, line);
    }
    const char *files[] = {write_file("day_0", text)};
    fl_dataset *ds = fl_dataset_create("QueueDataset");
    CHECK_OK(fl_dataset_set_use_var(ds, v, 28));
    /* a use_var that does not fit names the wrong variable */
    fl_var *wrong[28];
    memcpy(wrong, v, sizeof wrong);
    wrong[3] = v[0];
    fl_dataset *dw = fl_dataset_create("QueueDataset");
    CHECK_OK(fl_dataset_set_use_var(dw, wrong, 28));
    CHECK_FAILS(fl_dataset_set_format(dw, "criteo"), FL_EINVAL,
                "variable #4 'dense_input' is float32, lod_level 0, width 13");
    CHECK_OK(fl_dataset_set_format(ds, "criteo"));
    CHECK_FAILS(fl_dataset_set_use_var(ds, wrong, 28), FL_EINVAL, "fl_dataset_set_use_var: format 'criteo' needs");
    CHECK_FAILS(fl_dataset_set_use_var(ds, v, 27), FL_EINVAL, "got 27 variables");
    CHECK_FAILS(fl_dataset_set_format(ds, "csv"), FL_EINVAL, "unknown format 'csv' (expected multislot, criteo or libsvm)");
    CHECK_OK(fl_dataset_set_sparse_feature_dim(ds, 1000));
    CHECK_OK(fl_dataset_set_filelist(ds, files, 1));
    CHECK_OK(fl_dataset_set_batch_size(ds, 5));
    fl_data_batch *b = fl_data_batch_create(ds);
    CHECK_OK(fl_dataset_begin(ds));
    CHECK_EQ_INT(fl_dataset_next(ds, 0, b), 1);
    CHECK_EQ_INT(fl_data_batch_size(b), 5);
    fl_tensor *dense = fl_data_batch_tensor(b, 0);
    static const double diff[13] = {20, 603, 100, 50, 64000, 500, 100, 50, 500, 10, 10, 10, 50};
    CHECK_EQ_INT(fl_tensor_dim(dense, 0), 5);
    CHECK_EQ_INT(fl_tensor_dim(dense, 1), 13);
    for (int r = 0; r < 5; r++)
        for (int i = 0; i < 13; i++)
            CHECK_NEAR(fl_tensor_f32(dense)[r * 13 + i], i == r ? 0.0 : (float)((7.0 - (i == 1 ? -3.0 : 0.0)) / diff[i]),
                       0);
    for (int k = 1; k <= 26; k++) {
        fl_tensor *c = fl_data_batch_tensor(b, k);
        int64_t nl;
        const int64_t *lod = fl_tensor_lod(c, &nl);
        CHECK_EQ_INT(nl, 6);
        for (int r = 0; r <= 5; r++) CHECK_EQ_INT(lod[r], r);
        for (int r = 0; r < 5; r++) {
            const char *field = k - 1 == r ? "" : "ab12";
            CHECK_EQ_INT(fl_tensor_i64(c)[r], (int64_t)fl_data_criteo_id(k, field, strlen(field), 1000));
            CHECK(fl_tensor_i64(c)[r] < 1000);
        }
    }
    fl_tensor *lab = fl_data_batch_tensor(b, 27);
    CHECK_EQ_INT(fl_tensor_dim(lab, 0), 5);
    for (int r = 0; r < 5; r++) CHECK_EQ_INT(fl_tensor_i64(lab)[r], r % 2);
    CHECK_EQ_INT(fl_dataset_next(ds, 0, b), 0);
    CHECK_OK(fl_dataset_end(ds));
    fl_data_batch_free(b);
    fl_dataset_free(ds);
    fl_dataset_free(dw);
    fl_prog_free(p);
    rm_tmpdir();
}

/* ---- API misuse ---------------------------------------------------------------------------- */

TEST(api_misuse_names_call_and_argument)
{
    CHECK(fl_dataset_create("FooDataset") == NULL);
    CHECK_STR_HAS(fl_last_error(),
                  "fl_dataset_create: unknown kind 'FooDataset' (expected QueueDataset or InMemoryDataset)");
    fl_dataset *q = fl_dataset_create("QueueDataset");
    CHECK_FAILS(fl_dataset_set_batch_size(q, 0), FL_EINVAL, "fl_dataset_set_batch_size: batch_size must be >= 1, got 0");
    CHECK_FAILS(fl_dataset_set_thread(q, 0), FL_EINVAL, "fl_dataset_set_thread: thread_num must be in [1, 4096], got 0");
    CHECK_FAILS(fl_dataset_set_filelist(q, NULL, 2), FL_EINVAL, "fl_dataset_set_filelist: files is NULL");
    const char *nullf[] = {"a", NULL};
    CHECK_FAILS(fl_dataset_set_filelist(q, nullf, 2), FL_EINVAL, "fl_dataset_set_filelist: files[1] is NULL");
    CHECK_FAILS(fl_dataset_set_pipe_command(q, ""), FL_EINVAL, "fl_dataset_set_pipe_command: cmd is NULL or empty");
    CHECK_FAILS(fl_dataset_set_pipe_timeout(q, 0), FL_EINVAL, "fl_dataset_set_pipe_timeout: seconds must be in");
    CHECK_FAILS(fl_dataset_set_bad_line_policy(q, "ignore"), FL_EINVAL,
                "fl_dataset_set_bad_line_policy: unknown policy 'ignore' (expected stop or skip)");
    CHECK_FAILS(fl_dataset_set_sparse_feature_dim(q, 0), FL_EINVAL, "fl_dataset_set_sparse_feature_dim: dim must be >= 1");
    CHECK_FAILS(fl_dataset_load_into_memory(q), FL_EINVAL,
                "fl_dataset_load_into_memory: only an InMemoryDataset loads into memory");
    CHECK_FAILS(fl_dataset_local_shuffle(q, 1), FL_EINVAL, "fl_dataset_local_shuffle: only an InMemoryDataset");
    CHECK_FAILS(fl_dataset_begin(q), FL_EINVAL, "fl_dataset_begin: no slots (call fl_dataset_set_use_var first)");
    CHECK(fl_data_batch_create(q) == NULL);
    CHECK_STR_HAS(fl_last_error(), "fl_data_batch_create: the dataset has no slots");
    fl_prog *p = fl_prog_create();
    int64_t one = 1, dyn = -1;
    fl_var *f64 = fl_layer_data(p, "x64", 1, &one, FL_FLOAT64, 0);
    fl_var *dynv = fl_layer_data(p, "dyn", 1, &dyn, FL_FLOAT32, 0);
    CHECK_FAILS(fl_dataset_set_use_var(q, &f64, 1), FL_EINVAL,
                "fl_dataset_set_use_var: variable #1 'x64' has dtype float64; a slot must be int64 or float32");
    CHECK_FAILS(fl_dataset_set_use_var(q, &dynv, 1), FL_EINVAL,
                "fl_dataset_set_use_var: variable #1 'dyn' is a dense slot (lod_level 0) but dimension 1 is -1");
    fl_var *v[4];
    ms_vars(v);
    CHECK_OK(fl_dataset_set_use_var(q, v, 4));
    fl_data_batch *b = fl_data_batch_create(q);
    CHECK_FAILS(fl_dataset_next(q, 0, b), FL_ESTATE, "fl_dataset_next: no pass in progress (call fl_dataset_begin first)");
    CHECK_FAILS(fl_dataset_end(q), FL_ESTATE, "fl_dataset_end: no pass in progress");
    CHECK_OK(fl_dataset_begin(q)); /* an empty file list: an empty pass */
    CHECK_FAILS(fl_dataset_next(q, 1, b), FL_EINVAL, "fl_dataset_next: thread 1 out of range [0, 1)");
    CHECK_FAILS(fl_dataset_next(q, 0, NULL), FL_EINVAL, "fl_dataset_next: batch is NULL or invalid");
    CHECK_FAILS(fl_dataset_begin(q), FL_ESTATE, "fl_dataset_begin: a pass is in progress");
    CHECK_FAILS(fl_dataset_set_batch_size(q, 2), FL_ESTATE, "fl_dataset_set_batch_size: a pass is in progress");
    CHECK_EQ_INT(fl_dataset_next(q, 0, b), 0);
    CHECK_OK(fl_dataset_end(q));
    fl_data_exchange ex = {0, 2, NULL, NULL};
    CHECK_FAILS(fl_dataset_global_shuffle(q, &ex, 1), FL_EINVAL, "fl_dataset_global_shuffle: only an InMemoryDataset");
    fl_dataset *m = fl_dataset_create("InMemoryDataset");
    CHECK_FAILS(fl_dataset_global_shuffle(m, &ex, 1), FL_EINVAL, "fl_dataset_global_shuffle: ex->alltoallv is NULL");
    ex.rank = 2;
    CHECK_FAILS(fl_dataset_global_shuffle(m, &ex, 1), FL_EINVAL, "rank 2 / nranks 2 out of range");
    CHECK_FAILS(fl_dataset_global_shuffle(m, NULL, 1), FL_EINVAL, "fl_dataset_global_shuffle: ex is NULL");
    /* a batch made for other slots is refused */
    fl_var *two[2] = {v[0], v[1]};
    CHECK_OK(fl_dataset_set_use_var(q, two, 2));
    CHECK_OK(fl_dataset_begin(q));
    CHECK_FAILS(fl_dataset_next(q, 0, b), FL_EINVAL, "fl_dataset_next: the batch was made for different slots");
    CHECK_OK(fl_dataset_end(q));
    CHECK_FAILS(fl_dataset_set_batch_size(NULL, 1), FL_EINVAL, "fl_dataset_set_batch_size: dataset is NULL or invalid");
    fl_data_batch_free(b);
    fl_dataset_free(q);
    fl_dataset_free(m);
    fl_dataset_free(NULL);
    fl_prog_free(p);
    fl_prog_free(g_prog);
}

TEST_MAIN(T(queue_batches_lod_and_tensor_reuse), T(queue_threads_share_files_and_clamp),
          T(bad_line_policy_stop_names_file_line_slot), T(bad_line_policy_skip_counts_and_logs),
          T(pipe_command_transforms_input), T(pipe_command_failure_reports_status_and_stderr),
          T(pipe_command_silent_is_killed_after_timeout), T(pipe_command_no_zombie_or_orphan), T(criteo_dataset_batches),
          T(api_misuse_names_call_and_argument))
