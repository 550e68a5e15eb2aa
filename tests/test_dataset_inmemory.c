/* test_dataset_inmemory.c - InMemoryDataset: loading with reader threads (file order kept,
 * contiguous shares), local shuffle, preload (and freeing or releasing during one), and global
 * shuffle through an in-process fake exchange (no record lost, deterministic, a failed or
 * corrupt exchange refused).  QueueDataset: test_dataset.c; shared helpers: datasethelp.h. */
#include "datasethelp.h"

/* ---- InMemoryDataset -------------------------------------------------------------------- */

/* First ids of every instance in pass order (thread 0's share, then thread 1's, ...). */
static int64_t *pass_order(fl_dataset *ds, int64_t *n)
{
    int64_t cap = fl_dataset_get_memory_data_size(ds), k = 0;
    int64_t *out = malloc((size_t)(cap + 1) * sizeof *out);
    fl_data_batch *b = fl_data_batch_create(ds);
    CHECK_OK(fl_dataset_begin(ds));
    for (int t = 0; t < fl_dataset_thread_num(ds); t++)
        while (fl_dataset_next(ds, t, b) > 0) {
            int64_t nl;
            const int64_t *lod = fl_tensor_lod(fl_data_batch_tensor(b, 0), &nl);
            for (int i = 0; i < fl_data_batch_size(b); i++) {
                CHECK(k < cap);
                out[k++] = fl_tensor_i64(fl_data_batch_tensor(b, 0))[lod[i]] / 10;
            }
        }
    CHECK_OK(fl_dataset_end(ds));
    fl_data_batch_free(b);
    *n = k;
    return out;
}

TEST(inmemory_load_threads_shares_and_shuffle)
{
    mk_tmpdir();
    const char *files[6];
    char name[32];
    for (int f = 0; f < 6; f++) {
        snprintf(name, sizeof name, "m%d.txt", f);
        files[f] = gen_file(name, f * 500, f * 500 + 500);
    }
    fl_dataset *ds = ms_dataset("InMemoryDataset", files, 6, 64, 3);
    CHECK_OK(fl_dataset_load_into_memory(ds));
    CHECK_EQ_INT(fl_dataset_get_memory_data_size(ds), 3000);
    CHECK_EQ_INT(fl_dataset_bad_lines(ds), 0);
    /* file order is kept whatever thread parsed which file; shares are contiguous */
    int64_t n, *o = pass_order(ds, &n);
    CHECK_EQ_INT(n, 3000);
    for (int64_t i = 0; i < n; i++) CHECK_EQ_INT(o[i], i);
    free(o);
    check_digest(run_pass(ds, NULL, NULL, 0), expected(0, 3000));
    /* local shuffle: a permutation, reproducible from the seed */
    CHECK_OK(fl_dataset_local_shuffle(ds, 42));
    int64_t *s1 = pass_order(ds, &n);
    check_digest(run_pass(ds, NULL, NULL, 0), expected(0, 3000));
    fl_dataset *ds2 = ms_dataset("InMemoryDataset", files, 6, 64, 1);
    CHECK_OK(fl_dataset_load_into_memory(ds2));
    CHECK_OK(fl_dataset_local_shuffle(ds2, 42));
    int64_t n2, *s2 = pass_order(ds2, &n2);
    CHECK_EQ_INT(n2, 3000);
    int moved = 0;
    for (int64_t i = 0; i < n; i++) {
        CHECK_EQ_INT(s1[i], s2[i]);
        moved += s1[i] != i;
    }
    CHECK(moved > 2900);
    CHECK_OK(fl_dataset_local_shuffle(ds2, 43));
    free(s2);
    s2 = pass_order(ds2, &n2);
    int same = 0;
    for (int64_t i = 0; i < n; i++) same += s1[i] == s2[i];
    CHECK(same < 100);
    /* a second load appends; release frees */
    CHECK_OK(fl_dataset_load_into_memory(ds2));
    CHECK_EQ_INT(fl_dataset_get_memory_data_size(ds2), 6000);
    fl_dataset_release_memory(ds2);
    CHECK_EQ_INT(fl_dataset_get_memory_data_size(ds2), 0);
    /* a pass over nothing is refused, not trained for 0 s (Paddle's silent empty pass) */
    CHECK_FAILS(fl_dataset_begin(ds2), FL_ESTATE, "the InMemoryDataset holds no records: call fl_dataset_load_into_memory");
    free(s1);
    free(s2);
    fl_dataset_free(ds);
    fl_dataset_free(ds2);
    rm_tmpdir();
}

TEST(inmemory_preload)
{
    mk_tmpdir();
    const char *files[4];
    char name[32];
    for (int f = 0; f < 4; f++) {
        snprintf(name, sizeof name, "m%d.txt", f);
        files[f] = gen_file(name, f * 2000, f * 2000 + 2000);
    }
    fl_dataset *ds = ms_dataset("InMemoryDataset", files, 4, 100, 2);
    CHECK_FAILS(fl_dataset_wait_preload_done(ds), FL_ESTATE, "no preload in progress");
    CHECK_OK(fl_dataset_preload_into_memory(ds));
    CHECK_FAILS(fl_dataset_begin(ds), FL_ESTATE, "fl_dataset_begin: a preload is in progress");
    CHECK_FAILS(fl_dataset_local_shuffle(ds, 1), FL_ESTATE, "a preload is in progress");
    CHECK_FAILS(fl_dataset_set_batch_size(ds, 3), FL_ESTATE, "a preload is in progress");
    int64_t sz = fl_dataset_get_memory_data_size(ds);
    CHECK(sz == 0 || sz == 8000);
    CHECK_OK(fl_dataset_wait_preload_done(ds));
    CHECK_EQ_INT(fl_dataset_get_memory_data_size(ds), 8000);
    check_digest(run_pass(ds, NULL, NULL, 0), expected(0, 8000));
    /* a failing preload reports at wait; freeing during a preload is safe */
    const char *bad[] = {"/nonexistent/x"};
    CHECK_OK(fl_dataset_set_filelist(ds, bad, 1));
    CHECK_OK(fl_dataset_preload_into_memory(ds));
    CHECK_FAILS(fl_dataset_wait_preload_done(ds), FL_EIO, "cannot open data file '/nonexistent/x'");
    CHECK_EQ_INT(fl_dataset_get_memory_data_size(ds), 8000);
    CHECK_OK(fl_dataset_set_filelist(ds, files, 4));
    CHECK_OK(fl_dataset_preload_into_memory(ds));
    fl_dataset_free(ds);
    /* ... even when the load waits on a silent pipe_command (it is killed at once) */
    ds = ms_dataset("InMemoryDataset", files, 4, 100, 2);
    CHECK_OK(fl_dataset_set_pipe_command(ds, "sleep 30"));
    CHECK_OK(fl_dataset_preload_into_memory(ds));
    usleep(100000);
    double t0 = now_s();
    fl_dataset_free(ds);
    CHECK(now_s() - t0 < 1.5);
    check_no_children();
    ds = ms_dataset("InMemoryDataset", files, 4, 100, 2);
    CHECK_OK(fl_dataset_set_pipe_command(ds, "cat; sleep 30"));
    CHECK_OK(fl_dataset_preload_into_memory(ds));
    usleep(100000);
    t0 = now_s();
    fl_dataset_release_memory(ds);
    CHECK(now_s() - t0 < 1.5);
    CHECK_EQ_INT(fl_dataset_get_memory_data_size(ds), 0);
    check_no_children();
    fl_dataset_free(ds);
    rm_tmpdir();
}

/* ---- global shuffle through a fake exchange ---------------------------------------------- */

typedef struct {
    int nranks;
    pthread_barrier_t bar;
    const void *const *send[4];
    const size_t *send_len[4];
    int fail_rank; /* >= 0: that rank's exchange fails */
    int corrupt;   /* 1: rank 0 receives garbage from rank 1 */
} mailbox;

typedef struct {
    mailbox *mb;
    int rank;
} fake_ctx;

static int fake_alltoallv(void *ctx, const void *const *send, const size_t *send_len, void **recv, size_t *recv_len)
{
    fake_ctx *c = ctx;
    mailbox *mb = c->mb;
    mb->send[c->rank] = send;
    mb->send_len[c->rank] = send_len;
    pthread_barrier_wait(&mb->bar);
    for (int s = 0; s < mb->nranks; s++) {
        size_t n = mb->send_len[s][c->rank];
        recv_len[s] = n;
        recv[s] = malloc(n ? n : 1);
        if (n) memcpy(recv[s], mb->send[s][c->rank], n);
        if (mb->corrupt && c->rank == 0 && s == 1 && n > 40) ((char *)recv[s])[20] ^= 0x7f; /* first record's id count */
    }
    pthread_barrier_wait(&mb->bar); /* senders keep their buffers until everyone copied */
    if (c->rank == mb->fail_rank) return FL_EREMOTE;
    return FL_OK;
}

typedef struct {
    fl_dataset *ds;
    fake_ctx ctx;
    uint64_t seed;
    int st;
    char err[1024];
} gs_arg;

static void *gs_main(void *p)
{
    gs_arg *a = p;
    fl_data_exchange ex = {a->ctx.rank, a->ctx.mb->nranks, &a->ctx, fake_alltoallv};
    a->st = fl_dataset_global_shuffle(a->ds, &ex, a->seed);
    if (a->st) snprintf(a->err, sizeof a->err, "%s", fl_last_error());
    return NULL;
}

static void global_shuffle_all(fl_dataset **ds, int nr, uint64_t seed, int fail_rank, int corrupt, gs_arg *a)
{
    mailbox mb = {.nranks = nr, .fail_rank = fail_rank, .corrupt = corrupt};
    pthread_barrier_init(&mb.bar, NULL, (unsigned)nr);
    pthread_t th[4];
    for (int r = 0; r < nr; r++) {
        a[r] = (gs_arg){ds[r], {&mb, r}, seed, 0, ""};
        CHECK(pthread_create(&th[r], NULL, gs_main, &a[r]) == 0);
    }
    for (int r = 0; r < nr; r++) pthread_join(th[r], NULL);
    pthread_barrier_destroy(&mb.bar);
}

TEST(global_shuffle_moves_records_without_loss)
{
    mk_tmpdir();
    const int nr = 3;
    fl_dataset *ds[3];
    int64_t *before[3], nb[3];
    for (int r = 0; r < nr; r++) {
        char name[32];
        snprintf(name, sizeof name, "r%d.txt", r);
        const char *f[] = {gen_file(name, r * 1000, r * 1000 + 1000 - 100 * r)};
        ds[r] = ms_dataset("InMemoryDataset", f, 1, 50, 1);
        CHECK_OK(fl_dataset_load_into_memory(ds[r]));
        before[r] = pass_order(ds[r], &nb[r]);
    }
    gs_arg a[3];
    global_shuffle_all(ds, nr, 7, -1, 0, a);
    for (int r = 0; r < nr; r++)
        if (a[r].st) TFAIL("rank %d: %s", r, a[r].err);
    digest all = {0};
    int64_t total = 0;
    int64_t *after[3], na[3];
    for (int r = 0; r < nr; r++) {
        digest d = run_pass(ds[r], NULL, NULL, 0);
        all.n += d.n;
        all.sum += d.sum;
        all.x ^= d.x;
        all.label_sum += d.label_sum;
        all.id_first_sum += d.id_first_sum;
        total += fl_dataset_get_memory_data_size(ds[r]);
        after[r] = pass_order(ds[r], &na[r]);
        /* about a third of all records land on each rank, from every rank */
        CHECK(na[r] > 700 && na[r] < 1000);
        int from[3] = {0};
        for (int64_t i = 0; i < na[r]; i++) from[after[r][i] / 1000]++;
        for (int s = 0; s < nr; s++) CHECK(from[s] > 150);
    }
    CHECK_EQ_INT(total, 2700);
    digest want = expected(0, 1000), e1 = expected(1000, 1900), e2 = expected(2000, 2800);
    want.n += e1.n + e2.n;
    want.sum += e1.sum + e2.sum;
    want.x ^= e1.x ^ e2.x;
    want.label_sum += e1.label_sum + e2.label_sum;
    want.id_first_sum += e1.id_first_sum + e2.id_first_sum;
    check_digest(all, want);
    /* deterministic: the same data and seed give the same placement and order */
    fl_dataset *again[3];
    for (int r = 0; r < nr; r++) {
        char path[128];
        snprintf(path, sizeof path, "%s/r%d.txt", tdir, r);
        const char *f[] = {path};
        again[r] = ms_dataset("InMemoryDataset", f, 1, 50, 1);
        CHECK_OK(fl_dataset_load_into_memory(again[r]));
    }
    global_shuffle_all(again, nr, 7, -1, 0, a);
    for (int r = 0; r < nr; r++) {
        CHECK_OK(a[r].st);
        int64_t n2, *o2 = pass_order(again[r], &n2);
        CHECK_EQ_INT(n2, na[r]);
        for (int64_t i = 0; i < n2; i++) CHECK_EQ_INT(o2[i], after[r][i]);
        free(o2);
    }
    /* a failed exchange leaves every dataset as it was; a corrupt buffer is refused */
    global_shuffle_all(again, nr, 9, 1, 0, a);
    CHECK_EQ_INT(a[1].st, FL_EREMOTE);
    CHECK_STR_HAS(a[1].err, "fl_dataset_global_shuffle: the exchange failed");
    CHECK_EQ_INT(fl_dataset_get_memory_data_size(again[1]), na[1]);
    int64_t held0 = fl_dataset_get_memory_data_size(again[0]);
    global_shuffle_all(again, nr, 9, -1, 1, a);
    CHECK_EQ_INT(a[0].st, FL_ECORRUPT);
    CHECK_STR_HAS(a[0].err, "received from rank 1 are not records of this dataset's slots");
    CHECK_EQ_INT(fl_dataset_get_memory_data_size(again[0]), held0);
    for (int r = 0; r < nr; r++) {
        free(before[r]);
        free(after[r]);
        fl_dataset_free(ds[r]);
        fl_dataset_free(again[r]);
    }
    rm_tmpdir();
}

TEST_MAIN(T(inmemory_load_threads_shares_and_shuffle), T(inmemory_preload), T(global_shuffle_moves_records_without_loss))
