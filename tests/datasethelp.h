/* datasethelp.h - what test_dataset.c and test_dataset_inmemory.c share: a temporary
 * directory, the MultiSlot generator (instance i of a known layout), a dataset over its files,
 * an order-independent digest of the instances a pass reads (checked against the generator's),
 * one pass with every reader thread running, and process checks for pipe_command. */
#ifndef FLEET_TEST_DATASETHELP_H
#define FLEET_TEST_DATASETHELP_H

#include <errno.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "testhelp.h"

static char tdir[64];

static inline void mk_tmpdir(void) { th_mktemp(tdir, sizeof tdir, "fl_dataset_"); }

static inline const char *write_file(const char *name, const char *text)
{
    static char paths[64][128];
    static int np;
    char *p = paths[np++ % 64];
    snprintf(p, 128, "%s/%s", tdir, name);
    th_write_bytes(p, text, strlen(text));
    return p;
}

static inline void rm_tmpdir(void) { th_rmtree(tdir); }

/* MultiSlot layout used by most cases: ids int64 LoD, w float32 LoD, dense float32 [3], label int64 [1]. */
static fl_prog *g_prog;
static inline void ms_vars(fl_var *v[4])
{
    g_prog = fl_prog_create();
    int64_t one = 1, three = 3;
    v[0] = fl_layer_data(g_prog, "ids", 1, &one, FL_INT64, 1);
    v[1] = fl_layer_data(g_prog, "w", 1, &one, FL_FLOAT32, 1);
    v[2] = fl_layer_data(g_prog, "dense", 1, &three, FL_FLOAT32, 0);
    v[3] = fl_layer_data(g_prog, "label", 1, &one, FL_INT64, 0);
    for (int i = 0; i < 4; i++) CHECK(v[i]);
}

/* Instance i of the generated data: 1 + i%3 ids (i*10+j), 1 + i%2 weights, dense {i, i+.5, -i}, label i%2. */
static inline int gen_line(char *buf, size_t cap, int i)
{
    int o = 0, ni = 1 + i % 3, nw = 1 + i % 2;
    o += snprintf(buf + o, cap - (size_t)o, "%d", ni);
    for (int j = 0; j < ni; j++) o += snprintf(buf + o, cap - (size_t)o, " %d", i * 10 + j);
    o += snprintf(buf + o, cap - (size_t)o, " %d", nw);
    for (int j = 0; j < nw; j++) o += snprintf(buf + o, cap - (size_t)o, " %d.25", i + j);
    o += snprintf(buf + o, cap - (size_t)o, " 3 %d %d.5 %d 1 %d\n", i, i, -i, i % 2);
    return o;
}

/* Writes instances [from, to) to a file. */
static inline const char *gen_file(const char *name, int from, int to)
{
    size_t cap = (size_t)(to - from) * 96 + 1, o = 0;
    char *text = malloc(cap);
    text[0] = 0;
    for (int i = from; i < to; i++) o += (size_t)gen_line(text + o, cap - o, i);
    const char *p = write_file(name, text);
    free(text);
    return p;
}

static inline fl_dataset *ms_dataset(const char *kind, const char *const *files, int nfiles, int bs, int threads)
{
    fl_var *v[4];
    ms_vars(v);
    fl_dataset *ds = fl_dataset_create(kind);
    CHECK(ds);
    CHECK_OK(fl_dataset_set_use_var(ds, v, 4));
    fl_prog_free(g_prog); /* the dataset copied what it needs */
    g_prog = NULL;
    CHECK_OK(fl_dataset_set_filelist(ds, files, nfiles));
    CHECK_OK(fl_dataset_set_batch_size(ds, bs));
    CHECK_OK(fl_dataset_set_thread(ds, threads));
    return ds;
}

/* Order-independent digest of the instances read: count, sum and xor of per-instance hashes. */
typedef struct {
    int64_t n;
    uint64_t sum, x;
    int64_t label_sum;    /* the label of instance i is i%2: a cheap cross-check */
    int64_t id_first_sum; /* first id of instance i is i*10 */
} digest;

static inline uint64_t mix(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ULL;
    return h;
}

/* Checks the batch's structure against the MultiSlot generator and adds it to d. */
static inline void digest_batch(fl_data_batch *b, digest *d)
{
    int n = fl_data_batch_size(b);
    CHECK(n > 0);
    CHECK_EQ_INT(fl_data_batch_num_slots(b), 4);
    fl_tensor *ids = fl_data_batch_tensor(b, 0), *w = fl_data_batch_tensor(b, 1);
    fl_tensor *dense = fl_data_batch_tensor(b, 2), *label = fl_data_batch_tensor(b, 3);
    int64_t nl = 0, nw = 0;
    const int64_t *lid = fl_tensor_lod(ids, &nl), *lw = fl_tensor_lod(w, &nw);
    CHECK_EQ_INT(nl, n + 1);
    CHECK_EQ_INT(nw, n + 1);
    CHECK_EQ_INT(fl_tensor_ndim(ids), 2);
    CHECK_EQ_INT(fl_tensor_dim(ids, 0), lid[n]);
    CHECK_EQ_INT(fl_tensor_dim(ids, 1), 1);
    CHECK_EQ_INT(fl_tensor_dim(w, 0), lw[n]);
    CHECK_EQ_INT(fl_tensor_dim(dense, 0), n);
    CHECK_EQ_INT(fl_tensor_dim(dense, 1), 3);
    CHECK_EQ_INT(fl_tensor_dim(label, 0), n);
    CHECK_EQ_INT(fl_tensor_dim(label, 1), 1);
    CHECK(fl_tensor_dtype(ids) == FL_INT64 && fl_tensor_dtype(w) == FL_FLOAT32);
    CHECK(fl_tensor_dtype(dense) == FL_FLOAT32 && fl_tensor_dtype(label) == FL_INT64);
    const int64_t *pi = fl_tensor_i64(ids), *pl = fl_tensor_i64(label);
    const float *pw = fl_tensor_f32(w), *pd = fl_tensor_f32(dense);
    for (int k = 0; k < n; k++) {
        int64_t i = pi[lid[k]] / 10; /* the instance number */
        CHECK_EQ_INT(lid[k + 1] - lid[k], 1 + i % 3);
        CHECK_EQ_INT(lw[k + 1] - lw[k], 1 + i % 2);
        for (int64_t j = lid[k]; j < lid[k + 1]; j++) CHECK_EQ_INT(pi[j], i * 10 + (j - lid[k]));
        for (int64_t j = lw[k]; j < lw[k + 1]; j++) CHECK_NEAR(pw[j], (double)(i + (j - lw[k])) + 0.25, 0);
        CHECK_NEAR(pd[3 * k], (double)i, 0);
        CHECK_NEAR(pd[3 * k + 1], (double)i + 0.5, 0);
        CHECK_NEAR(pd[3 * k + 2], (double)-i, 0);
        CHECK_EQ_INT(pl[k], i % 2);
        uint64_t h = 0xcbf29ce484222325ULL;
        h = mix(h, pi + lid[k], (size_t)(lid[k + 1] - lid[k]) * 8);
        h = mix(h, pw + lw[k], (size_t)(lw[k + 1] - lw[k]) * 4);
        h = mix(h, pd + 3 * k, 12);
        h = mix(h, pl + k, 8);
        d->n++;
        d->sum += h;
        d->x ^= h * 0x9e3779b97f4a7c15ULL;
        d->label_sum += pl[k];
        d->id_first_sum += pi[lid[k]];
    }
}

/* The digest of instances [from, to) as the generator writes them. */
static inline digest expected(int from, int to)
{
    digest d = {0};
    for (int i = from; i < to; i++) {
        uint64_t h = 0xcbf29ce484222325ULL;
        int64_t ids[3];
        float w[2], dn[3] = {(float)i, (float)i + 0.5f, (float)-i};
        int64_t lab = i % 2;
        for (int j = 0; j < 1 + i % 3; j++) ids[j] = (int64_t)i * 10 + j;
        for (int j = 0; j < 1 + i % 2; j++) w[j] = (float)(i + j) + 0.25f;
        h = mix(h, ids, (size_t)(1 + i % 3) * 8);
        h = mix(h, w, (size_t)(1 + i % 2) * 4);
        h = mix(h, dn, 12);
        h = mix(h, &lab, 8);
        d.n++;
        d.sum += h;
        d.x ^= h * 0x9e3779b97f4a7c15ULL;
        d.label_sum += lab;
        d.id_first_sum += (int64_t)i * 10;
    }
    return d;
}

static inline void check_digest(digest a, digest b)
{
    CHECK_EQ_INT(a.n, b.n);
    CHECK(a.sum == b.sum);
    CHECK(a.x == b.x);
    CHECK_EQ_INT(a.label_sum, b.label_sum);
    CHECK_EQ_INT(a.id_first_sum, b.id_first_sum);
}

/* One pass with every reader thread running concurrently. */
typedef struct {
    fl_dataset *ds;
    int t;
    digest d;
    int st;
    int batches;
    char err[1024];
} reader_arg;

static inline void *reader_main(void *p)
{
    reader_arg *a = p;
    fl_data_batch *b = fl_data_batch_create(a->ds);
    int r;
    while ((r = fl_dataset_next(a->ds, a->t, b)) > 0) {
        digest_batch(b, &a->d);
        a->batches++;
    }
    a->st = r;
    if (r < 0) snprintf(a->err, sizeof a->err, "%s", fl_last_error());
    fl_data_batch_free(b);
    return NULL;
}

static inline digest run_pass(fl_dataset *ds, int *first_err, char *msg, size_t msgcap)
{
    CHECK_OK(fl_dataset_begin(ds));
    int nt = fl_dataset_thread_num(ds);
    reader_arg a[16];
    pthread_t th[16];
    CHECK(nt <= 16);
    for (int t = 0; t < nt; t++) {
        memset(&a[t], 0, sizeof a[t]);
        a[t].ds = ds;
        a[t].t = t;
        CHECK(pthread_create(&th[t], NULL, reader_main, &a[t]) == 0);
    }
    digest d = {0};
    if (first_err) *first_err = 0;
    for (int t = 0; t < nt; t++) {
        pthread_join(th[t], NULL);
        d.n += a[t].d.n;
        d.sum += a[t].d.sum;
        d.x ^= a[t].d.x;
        d.label_sum += a[t].d.label_sum;
        d.id_first_sum += a[t].d.id_first_sum;
        if (a[t].st < 0 && first_err && !*first_err) {
            *first_err = a[t].st;
            if (msg) snprintf(msg, msgcap, "%s", a[t].err);
        }
        if (!first_err && a[t].st < 0) TFAIL("reader %d failed: %s", t, a[t].err);
    }
    int st = fl_dataset_end(ds);
    if (!first_err) CHECK_OK(st);
    return d;
}

/* No child process left (neither running nor a zombie). */
static inline void check_no_children(void)
{
    errno = 0;
    CHECK(waitpid(-1, NULL, WNOHANG) == -1 && errno == ECHILD);
}

static inline double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

#endif
