/*
 * app_data.c - the readers and metrics of the model registry (see app_internal.h): a
 * dataset reader over the files of a directory (criteo, multislot) and an IDX image
 * reader (the Fashion-MNIST files of examples/fmnist/idx.h, reused as is).
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "app_internal.h"
#include "../../examples/fmnist/idx.h"

/* ---- metrics -------------------------------------------------------------------------------- */

static fl_var *build_auc(fl_var *predict, fl_var *label) { return fl_layer_auc(predict, label, 4096, 20, NULL); }
static fl_var *build_accuracy(fl_var *predict, fl_var *label) { return fl_layer_accuracy(predict, label, 1); }

/* simnet-bow's positive-negative order rate: predict [N, 2] = (cos_pos, cos_neg); a triple
 * counts 1 when cos_pos > cos_neg, 1/2 on a tie (fl_model_simnet_eval's rule). */
static int score_order_rate(const fl_tensor *predict, int batch, double *sum, int64_t *n)
{
    if (fl_tensor_ndim(predict) != 2 || fl_tensor_dim(predict, 1) != 2 || fl_tensor_dim(predict, 0) != batch)
        return fl__err(FL_EINVAL, "order_rate: predict must be [%d, 2] (cos_pos, cos_neg)", batch);
    const float *v = fl_tensor_cdata(predict);
    for (int i = 0; i < batch; i++) *sum += v[2 * i] > v[2 * i + 1] ? 1.0 : v[2 * i] == v[2 * i + 1] ? 0.5 : 0.0;
    *n += batch;
    return FL_OK;
}

/* word2vec's planted structure: the inputs are input_word, true_word, neg_word and predict
 * the input embedding; the clusters, analogies and dictionary of `fleet-datagen word2vec`
 * are read from test_data (or its parent).  The metric is the cluster accuracy. */
static int eval_word2vec(const fl_app_config *c, fl_exe *exe, fl_prog *prog, fl_var *const *feeds, int nfeeds,
                         fl_var *predict, double *metric)
{
    if (nfeeds != 3)
        return fl__err(FL_EINVAL, "word2vec eval: the model has %d inputs, not input_word, true_word, neg_word", nfeeds);
    char dict[FL_APP_PATH + 64], clusters[FL_APP_PATH + 64], analogies[FL_APP_PATH + 64];
    if (!c->test_data[0])
        return fl__err(FL_EINVAL, "word2vec eval: test_data is not set (the directory of fleet-datagen word2vec "
                                  "holding clusters.txt, analogies.txt and dict.txt)");
    FL_CHECK(fl__app_data_file("test_data", c->test_data, "clusters.txt", clusters, sizeof clusters));
    FL_CHECK(fl__app_data_file("test_data", c->test_data, "analogies.txt", analogies, sizeof analogies));
    FL_CHECK(fl__app_data_file("test_data", c->test_data, "dict.txt", dict, sizeof dict));
    fl_model_word2vec_vocab *v;
    FL_CHECK(fl_model_word2vec_vocab_load(dict, &v));
    fl_model_word2vec m;
    memset(&m, 0, sizeof m);
    m.input_word = feeds[0], m.true_word = feeds[1], m.neg_word = feeds[2], m.emb = predict;
    fl_model_word2vec_metrics r;
    double t0 = fl__now();
    int st = fl_model_word2vec_eval(exe, prog, &m, v, clusters, analogies, &r);
    fl_model_word2vec_vocab_free(v);
    if (st != FL_OK) return st;
    printf("word2vec: test cluster accuracy %.4f (%lld words), analogy accuracy %.4f (%lld analogies) (%.2f s)\n",
           r.cluster_acc, (long long)r.clustered_words, r.analogy_acc, (long long)r.analogies, fl__now() - t0);
    *metric = r.cluster_acc;
    return FL_OK;
}

static const app_metric metrics[] = {
    {"auc", build_auc, 1, 1, NULL, NULL},
    {"accuracy", build_accuracy, 0, 1, NULL, NULL},
    {"order_rate", NULL, 0, 0, score_order_rate, NULL},
    {"cluster_acc", NULL, 0, 0, NULL, eval_word2vec},
    /* labelled 2: lbl_word and lbl_weight close the Transformer's feeds */
    {"bleu", NULL, 0, 2, NULL, fl__app_bleu_evaluate, fl__app_bleu_infer},
    /* BERT: every feed is an input of the saved model, predict holds the accuracies */
    {"bert_acc", fl__app_bert_metric, 0, 0, NULL, fl__app_bert_evaluate, fl__app_bert_infer},
};

const app_metric *fl__app_metric(const char *name)
{
    for (size_t i = 0; i < sizeof metrics / sizeof metrics[0]; i++)
        if (!strcmp(metrics[i].name, name)) return &metrics[i];
    fl__err(FL_ENOTFOUND, "unknown metric '%s' (auc, accuracy, order_rate, cluster_acc, bleu, bert_acc)", name);
    return NULL;
}

int fl__app_data_file(const char *what, const char *dir, const char *name, char *out, size_t cap)
{
    static const char *const where[] = {"", "/.."}; /* the directory, then its parent */
    for (size_t i = 0; i < sizeof where / sizeof where[0]; i++) {
        int n = snprintf(out, cap, "%s%s/%s", dir, where[i], name);
        if (n < 0 || (size_t)n >= cap) return fl__err(FL_EINVAL, "%s '%s': path too long", what, dir);
        struct stat sb;
        if (!stat(out, &sb) && S_ISREG(sb.st_mode)) return FL_OK;
    }
    return fl__err(FL_ENOTFOUND, "%s '%s': no %s there nor in its parent directory", what, dir, name);
}

/* ---- dataset reader (criteo, multislot) ------------------------------------------------------ */

typedef struct {
    fl_dataset *ds;
    char **files;
    int nfiles;
    int print_period;
    uint64_t seed;
    int shuffled;             /* epochs whose shuffle the in-memory order has had */
    char tmpdir[FL_APP_PATH]; /* word2vec: the samples made at open, removed at close */
} ds_reader;

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The regular files of dir (not hidden), sorted. */
int fl__app_list_dir(const char *what, const char *dir, char ***out, int *n)
{
    *out = NULL;
    *n = 0;
    if (!*dir) return fl__err(FL_EINVAL, "%s is not set (a directory of data files)", what);
    DIR *d = opendir(dir);
    if (!d) return fl__err(FL_EIO, "%s '%s': %s", what, dir, strerror(errno));
    struct dirent *e;
    int cap = 0, st = FL_OK;
    while (st == FL_OK && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[FL_APP_PATH + 256];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat sb;
        if (stat(path, &sb) || !S_ISREG(sb.st_mode)) continue;
        if (*n == cap) {
            cap = cap ? cap * 2 : 16;
            char **nf = realloc(*out, (size_t)cap * sizeof *nf);
            if (!nf) st = fl__err(FL_ENOMEM, "%s: out of memory", what);
            else *out = nf;
        }
        if (st == FL_OK && !((*out)[*n] = strdup(path))) st = fl__err(FL_ENOMEM, "%s: out of memory", what);
        if (st == FL_OK) (*n)++;
    }
    closedir(d);
    if (st == FL_OK && !*n) st = fl__err(FL_ENOTFOUND, "%s '%s' holds no data files", what, dir);
    if (st == FL_OK) qsort(*out, (size_t)*n, sizeof **out, cmp_str);
    return st;
}

static void ds_close(void *p)
{
    ds_reader *r = p;
    if (!r) return;
    fl_dataset_free(r->ds);
    for (int i = 0; i < r->nfiles; i++) {
        if (r->tmpdir[0]) remove(r->files[i]);
        free(r->files[i]);
    }
    if (r->tmpdir[0]) rmdir(r->tmpdir);
    free(r->files);
    free(r);
}

static int ds_open_as(const char *format, const fl_app_config *c, const char *dir, int train, int rank, int nranks,
                      fl_var *const *feeds, int nfeeds, void **out)
{
    if (train && c->max_steps)
        return fl__err(FL_EUNSUPPORTED,
                       "option max_steps: the %s reader trains on whole passes (Hogwild threads); "
                       "leave max_steps at 0",
                       format);
    ds_reader *r = calloc(1, sizeof *r);
    if (!r) return fl__err(FL_ENOMEM, "reader: out of memory");
    r->print_period = c->print_period;
    r->seed = c->seed;
    int st = fl__app_list_dir(train ? "train_data" : "test_data", dir, &r->files, &r->nfiles);
    /* this worker's files: contiguous blocks, the first len % n workers one more (fleet_split_files) */
    int lo = 0, hi = r->nfiles;
    if (st == FL_OK && train && nranks > 1) {
        int q = r->nfiles / nranks, rem = r->nfiles % nranks;
        lo = rank * q + (rank < rem ? rank : rem);
        hi = lo + q + (rank < rem);
        if (hi == lo)
            st = fl__err(FL_EINVAL,
                         "train_data '%s' holds %d file(s) for %d workers: worker %d gets none (files are split "
                         "between workers, whole); write at least one file per worker (fleet-datagen --files N)",
                         dir, r->nfiles, nranks, rank);
    }
    r->ds = st == FL_OK ? fl_dataset_create(train ? "InMemoryDataset" : "QueueDataset") : NULL;
    if (st == FL_OK && !r->ds) st = fl_last_status();
    if (st == FL_OK) st = fl_dataset_set_format(r->ds, format);
    if (st == FL_OK) st = fl_dataset_set_batch_size(r->ds, c->batch_size);
    if (st == FL_OK) st = fl_dataset_set_thread(r->ds, train ? c->thread : 1);
    if (st == FL_OK) st = fl_dataset_set_use_var(r->ds, feeds, nfeeds);
    if (st == FL_OK && fl_dataset_set_bad_line_policy(r->ds, c->bad_data))
        st = fl__err(FL_EINVAL, "option bad_data: expected stop or skip, got '%s'", c->bad_data);
    if (st == FL_OK && !strcmp(format, "criteo"))
        st = fl_dataset_set_sparse_feature_dim(r->ds, (uint64_t)c->sparse_feature_dim);
    if (st == FL_OK) st = fl_dataset_set_filelist(r->ds, (const char *const *)r->files + lo, hi - lo);
    if (st == FL_OK && train) st = fl_dataset_load_into_memory(r->ds);
    if (st != FL_OK) {
        ds_close(r);
        return st;
    }
    *out = r;
    return FL_OK;
}

static int criteo_open(const fl_app_config *c, const char *dir, int train, int rank, int nranks, fl_var *const *feeds,
                       int nfeeds, void **out)
{
    return ds_open_as("criteo", c, dir, train, rank, nranks, feeds, nfeeds, out);
}

static int multislot_open(const fl_app_config *c, const char *dir, int train, int rank, int nranks, fl_var *const *feeds,
                          int nfeeds, void **out)
{
    return ds_open_as("multislot", c, dir, train, rank, nranks, feeds, nfeeds, out);
}

static int ds_pass(void *p, fl_exe *e, fl_prog *prog, int train, int thread, const char *const *fetch, int nfetch,
                   int epoch, app_pass *out, app_batch_fn fn, void *user)
{
    ds_reader *r = p;
    memset(out, 0, sizeof *out);
    if (train) {
        const char *info[2] = {"loss", "metric"};
        fl_exe_dataset_stats s;
        /* each epoch shuffles the previous one's order: a run resumed at a later epoch
         * (checkpoint_dir) replays the shuffles of the epochs it skips, so epoch e reads
         * the same order either way */
        for (; r->shuffled <= epoch; r->shuffled++)
            FL_CHECK(fl_dataset_local_shuffle(r->ds, r->seed + (uint64_t)r->shuffled));
        FL_CHECK(fl_exe_train_from_dataset(e, prog, r->ds, thread, fetch, info, nfetch, r->print_period, &s));
        *out = (app_pass){s.instances, s.batches, s.seconds, s.fetch[0], nfetch > 1 ? s.fetch[1] : 0};
        return FL_OK;
    }
    double t0 = fl__now();
    FL_CHECK(fl_dataset_begin(r->ds));
    fl_data_batch *b = fl_data_batch_create(r->ds);
    int st = b ? FL_OK : fl_last_status(), got;
    fl_feed feed[FL_APP_MAX_FEEDS];
    fl_tensor *res[4];
    while (st == FL_OK && (got = fl_dataset_next(r->ds, 0, b)) == 1) {
        int nf = fl_data_batch_num_slots(b);
        for (int i = 0; i < nf && i < FL_APP_MAX_FEEDS; i++)
            feed[i] = (fl_feed){fl_data_batch_name(b, i), fl_data_batch_tensor(b, i)};
        st = fl_exe_run(e, prog, feed, nf, fetch, nfetch, res);
        if (st == FL_OK && fn) st = fn(user, res, nfetch, fl_data_batch_size(b));
        out->instances += fl_data_batch_size(b);
        out->batches++;
    }
    if (st == FL_OK && got < 0) st = fl_last_status();
    int end = fl_dataset_end(r->ds);
    if (st == FL_OK) st = end;
    fl_data_batch_free(b);
    out->seconds = fl__now() - t0;
    return st;
}

/* ---- word2vec reader: corpus files -> skip-gram samples -> a multislot dataset ---------------- */

static int is_planted_file(const char *path)
{
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    return !strcmp(b, "dict.txt") || !strcmp(b, "clusters.txt") || !strcmp(b, "analogies.txt") ||
           !strcmp(b, "planted.json");
}

/* Training: this worker's corpus files of dir (every regular file but the generator's
 * dict.txt, clusters.txt, analogies.txt, planted.json), turned into samples once
 * (fl_model_word2vec_make_samples with the dictionary dict.txt of dir or its parent, the
 * sampling defaults and the run's seed) in a temporary directory removed at close. */
static int word2vec_open(const fl_app_config *c, const char *dir, int train, int rank, int nranks, fl_var *const *feeds,
                         int nfeeds, void **out)
{
    if (!train)
        return fl__err(FL_EUNSUPPORTED, "word2vec: test_data is scored by its planted clusters and analogies "
                                        "(eval); infer over a corpus is not supported");
    char dict[FL_APP_PATH + 64], **files = NULL;
    int n = 0;
    FL_CHECK(fl__app_data_file("train_data", dir, "dict.txt", dict, sizeof dict));
    fl_model_word2vec_vocab *v = NULL;
    int st = fl_model_word2vec_vocab_load(dict, &v);
    if (st == FL_OK) st = fl__app_list_dir("train_data", dir, &files, &n);
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (is_planted_file(files[i])) free(files[i]);
        else files[k++] = files[i];
    }
    n = k;
    if (st == FL_OK && !n) st = fl__err(FL_ENOTFOUND, "train_data '%s' holds no corpus file", dir);
    int q = n / nranks, rem = n % nranks, lo = rank * q + (rank < rem ? rank : rem), hi = lo + q + (rank < rem);
    if (st == FL_OK && lo == hi)
        st = fl__err(FL_EINVAL, "train_data '%s': %d corpus file(s) for %d workers; worker %d has none", dir, n, nranks,
                     rank);
    const char *tmp = getenv("TMPDIR");
    char tdir[FL_APP_PATH];
    snprintf(tdir, sizeof tdir, "%s/fleet-word2vec-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    int made = st == FL_OK && mkdtemp(tdir);
    if (st == FL_OK && !made) st = fl__err(FL_EIO, "word2vec samples: %s: %s", tdir, strerror(errno));
    fl_model_word2vec_sampling s = fl_model_word2vec_sampling_default();
    s.seed = c->seed;
    s.neg_num = (int)fl_var_shape(feeds[2])[1];
    int64_t pairs = 0;
    for (int i = lo; st == FL_OK && i < hi; i++) {
        char path[FL_APP_PATH + 32];
        int64_t p = 0;
        snprintf(path, sizeof path, "%s/part-%05d", tdir, i);
        st = fl_model_word2vec_make_samples(v, &s, files[i], path, &p);
        pairs += p;
    }
    for (int i = 0; i < n; i++) free(files[i]);
    free(files);
    fl_model_word2vec_vocab_free(v);
    if (st == FL_OK) {
        printf("word2vec worker %d: %lld skip-gram pairs from %d corpus file(s) (window %d, sample %g, %d negatives)\n",
               rank, (long long)pairs, hi - lo, s.window, s.sample, s.neg_num);
        st = ds_open_as("multislot", c, tdir, train, 0, 1, feeds, nfeeds, out);
    }
    if (st == FL_OK) {
        snprintf(((ds_reader *)*out)->tmpdir, sizeof tdir, "%s", tdir);
    } else if (made) { /* the samples written so far */
        char **left = NULL;
        int nl = 0;
        if (fl__app_list_dir("samples", tdir, &left, &nl) == FL_OK)
            for (int i = 0; i < nl; i++) remove(left[i]);
        for (int i = 0; i < nl; i++) free(left[i]);
        free(left);
        rmdir(tdir);
    }
    return st;
}

/* ---- IDX image reader ------------------------------------------------------------------------ */

typedef struct {
    fmnist_split d;
    int rank, nranks, batch, print_period;
    int64_t max_steps;
    uint64_t seed;
    char xname[128], yname[128];
    int64_t *perm;
    fl_tensor *x, *y;
} idx_reader;

static void idx_close(void *p)
{
    idx_reader *r = p;
    if (!r) return;
    fmnist_free(&r->d);
    free(r->perm);
    fl_tensor_free(r->x);
    fl_tensor_free(r->y);
    free(r);
}

static int idx_open(const fl_app_config *c, const char *dir, int train, int rank, int nranks, fl_var *const *feeds,
                    int nfeeds, void **out)
{
    if (nfeeds != 2)
        return fl__err(FL_EINVAL, "the idx reader feeds an image and a label, the model has %d inputs", nfeeds);
    const int64_t *sh = fl_var_shape(feeds[0]);
    if (fl_var_ndim(feeds[0]) != 4 || sh[1] != 1 || sh[2] != FMNIST_ROWS || sh[3] != FMNIST_COLS)
        return fl__err(FL_EINVAL, "the idx reader feeds [N, 1, 28, 28] images; input '%s' differs", fl_var_name(feeds[0]));
    if (train && c->thread > 1)
        return fl__err(FL_EUNSUPPORTED,
                       "option thread: the idx reader trains with one thread per process (its batches go "
                       "through the executor in order, not through Hogwild threads), got thread %d; leave "
                       "thread at 1, or train on several processes: fleetrun --nproc_per_node N with mode "
                       "collective",
                       c->thread);
    idx_reader *r = calloc(1, sizeof *r);
    if (!r) return fl__err(FL_ENOMEM, "reader: out of memory");
    char err[8192];
    if (fmnist_load(fmnist_dir(dir), train ? "train" : "t10k", &r->d, err, sizeof err)) {
        free(r);
        return fl__err(FL_EIO, "%s: %s", train ? "train_data" : "test_data", err);
    }
    r->rank = train ? rank : 0;
    r->nranks = train ? nranks : 1;
    r->batch = c->batch_size;
    r->print_period = c->print_period;
    r->max_steps = train ? c->max_steps : 0;
    r->seed = c->seed;
    snprintf(r->xname, sizeof r->xname, "%s", fl_var_name(feeds[0]));
    snprintf(r->yname, sizeof r->yname, "%s", fl_var_name(feeds[1]));
    r->perm = malloc((size_t)r->d.n * sizeof *r->perm);
    r->x = fl_tensor_create(FL_FLOAT32, 4, (const int64_t[]){r->batch, 1, FMNIST_ROWS, FMNIST_COLS});
    r->y = fl_tensor_create(FL_INT64, 2, (const int64_t[]){r->batch, 1});
    if (!r->perm || !r->x || !r->y || !r->d.n) {
        int empty = r->perm && r->x && r->y;
        idx_close(r);
        return empty ? fl__err(FL_ENOTFOUND, "%s '%s' holds no images", train ? "train_data" : "test_data", dir)
                     : fl__err(FL_ENOMEM, "reader: out of memory");
    }
    *out = r;
    return FL_OK;
}

/* Samples perm[k] of the pass, k in [lo, lo + b), into the feed tensors. */
static int idx_gather(idx_reader *r, const int64_t *idx, int64_t b)
{
    if (fl_tensor_dim(r->x, 0) != b) {
        FL_CHECK(fl_tensor_resize(r->x, FL_FLOAT32, 4, (const int64_t[]){b, 1, FMNIST_ROWS, FMNIST_COLS}));
        FL_CHECK(fl_tensor_resize(r->y, FL_INT64, 2, (const int64_t[]){b, 1}));
    }
    float *xp = fl_tensor_f32(r->x);
    int64_t *yp = fl_tensor_i64(r->y);
    for (int64_t i = 0; i < b; i++) {
        memcpy(xp + i * FMNIST_PIXELS, r->d.x + idx[i] * FMNIST_PIXELS, FMNIST_PIXELS * sizeof(float));
        yp[i] = r->d.y[idx[i]];
    }
    return FL_OK;
}

/* Training: the epoch's fixed shuffle, this trainer's perm[rank::nranks] padded by wrapping
 * round so every trainer runs the same number of steps (examples/fmnist/train.h's rule).
 * Evaluation: every image in file order. */
static int idx_pass(void *p, fl_exe *e, fl_prog *prog, int train, int thread, const char *const *fetch, int nfetch,
                    int epoch, app_pass *out, app_batch_fn fn, void *user)
{
    idx_reader *r = p;
    memset(out, 0, sizeof *out);
    int64_t n = r->d.n, shard = (n + r->nranks - 1) / r->nranks;
    if (train) {
        fmnist_shuffle(r->perm, n, r->seed + (uint64_t)epoch);
        int64_t *mine = malloc((size_t)shard * sizeof *mine);
        if (!mine) return fl__err(FL_ENOMEM, "reader: out of memory");
        for (int64_t k = 0; k < shard; k++) mine[k] = r->perm[(r->rank + k * r->nranks) % n];
        memcpy(r->perm, mine, (size_t)shard * sizeof *mine);
        free(mine);
    } else {
        for (int64_t k = 0; k < n; k++) r->perm[k] = k;
    }
    int64_t steps = (shard + r->batch - 1) / r->batch;
    if (r->max_steps && steps > r->max_steps) steps = r->max_steps;
    double t0 = fl__now(), loss = 0, metric = 0;
    for (int64_t s = 0; s < steps; s++) {
        int64_t b = shard - s * r->batch < r->batch ? shard - s * r->batch : r->batch;
        FL_CHECK(idx_gather(r, r->perm + s * r->batch, b));
        fl_feed feed[2] = {{r->xname, r->x}, {r->yname, r->y}};
        fl_tensor *res[4];
        int st = fl_exe_run(e, prog, feed, 2, fetch, nfetch, res);
        if (st != FL_OK) return fl__err(st, "epoch %d batch %lld: %s", epoch + 1, (long long)s, fl_last_error());
        if (fn) FL_CHECK(fn(user, res, nfetch, (int)b));
        if (train) {
            loss += fl_tensor_f32(res[0])[0];
            if (nfetch > 1) metric += fl_tensor_f32(res[1])[0];
            if (r->print_period && (s + 1) % r->print_period == 0)
                printf("epoch %d step %lld/%lld: loss %.4f metric %.4f (%.0f examples/s)\n", epoch + 1, (long long)s + 1,
                       (long long)steps, loss / (double)(s + 1), metric / (double)(s + 1),
                       (double)(s + 1) * r->batch / (fl__now() - t0));
        }
        out->instances += b;
        out->batches++;
    }
    out->seconds = fl__now() - t0;
    if (steps) {
        out->loss = loss / (double)steps;
        out->metric = metric / (double)steps;
    }
    (void)thread;
    return FL_OK;
}

static int64_t ds_steps(void *p, int batch_size)
{
    ds_reader *r = p;
    int64_t n = fl_dataset_get_memory_data_size(r->ds);
    return n > 0 ? (n + batch_size - 1) / batch_size : 1;
}

/* the dataset's readers: thread, at most one per file of this worker's share */
static int ds_threads(void *p) { return fl_dataset_thread_num(((ds_reader *)p)->ds); }

static int idx_threads(void *p)
{
    (void)p;
    return 1;
}

static int64_t idx_steps(void *p, int batch_size)
{
    idx_reader *r = p;
    int64_t steps = ((r->d.n + r->nranks - 1) / r->nranks + batch_size - 1) / batch_size;
    return r->max_steps && steps > r->max_steps ? r->max_steps : steps;
}

/* ---- the reader table ------------------------------------------------------------------------- */

static const app_reader readers[] = {
    {"criteo", criteo_open, ds_pass, ds_close, ds_steps, ds_threads},
    {"multislot", multislot_open, ds_pass, ds_close, ds_steps, ds_threads},
    {"idx", idx_open, idx_pass, idx_close, idx_steps, idx_threads},
    {"word2vec", word2vec_open, ds_pass, ds_close, ds_steps, ds_threads},
    {"images", fl__app_images_open, fl__app_images_pass, fl__app_images_close, fl__app_images_steps,
     fl__app_images_threads},
    {"translation", fl__app_translation_open, fl__app_translation_pass, fl__app_translation_close,
     fl__app_translation_steps, fl__app_translation_threads},
    {"bert", fl__app_bert_open, fl__app_bert_pass, fl__app_bert_close, fl__app_bert_steps, fl__app_bert_threads},
};

const app_reader *fl__app_reader(const char *name)
{
    for (size_t i = 0; i < sizeof readers / sizeof readers[0]; i++)
        if (!strcmp(readers[i].name, name)) return &readers[i];
    fl__err(FL_ENOTFOUND, "unknown reader '%s' (criteo, multislot, idx, word2vec, images, translation, bert)", name);
    return NULL;
}
