/*
 * word2vec (Fleet's examples/word2vec, the seeds' one-billion-word parameter-server
 * benchmark): skip-gram with negative sampling over sparse tables; one program for local and
 * parameter-server training.  The lines marked "+" are the distributed part.
 *
 *   build/tools/fleet-datagen word2vec --sentences 20000 --out DIR
 *   build/examples/word2vec/train --is_local 1 --data_dir DIR
 *   fleetrun --server_num 1 --worker_num 2 build/examples/word2vec/train --data_dir DIR
 *
 * DIR holds the corpus (train/part-*), dict.txt, clusters.txt and analogies.txt.  Each
 * process first turns its share of the corpus into training pairs (subsampling, random
 * window, negatives from count^0.75, as the original word2vec) under --sample_dir, then
 * trains; the local run (or the first worker) then prints "cluster accuracy X analogy
 * accuracy Y" read from the trained input embedding.  --help lists every option.
 */
#include <unistd.h>

#include "../zoo/args.h"

typedef struct {
    zoo_common c;
    const char *data_dir, *sample_dir;
    int embedding_size, neg_num, window, seed, keep_samples;
    double sample;
} args_t;

/* The training pairs of corpus files[0..n) under --sample_dir (one file each); NULL on error. */
static char **make_samples(const args_t *a, const fl_model_word2vec_vocab *v, const char *const *files, int n,
                           int64_t *pairs)
{
    char **out = calloc((size_t)(n ? n : 1), sizeof *out);
    fl_model_word2vec_sampling s = fl_model_word2vec_sampling_default();
    s.window = a->window, s.sample = a->sample, s.neg_num = a->neg_num, s.seed = (uint64_t)a->seed;
    *pairs = 0;
    for (int i = 0; out && i < n; i++) {
        const char *base = strrchr(files[i], '/') ? strrchr(files[i], '/') + 1 : files[i];
        size_t len = strlen(a->sample_dir) + strlen(base) + 32;
        int64_t k = 0;
        if (!(out[i] = malloc(len))) return NULL;
        snprintf(out[i], len, "%s/%s.pairs.%d", a->sample_dir, base, (int)getpid());
        if (fl_model_word2vec_make_samples(v, &s, files[i], out[i], &k) != FL_OK) return NULL;
        *pairs += k;
    }
    return out;
}

static void remove_samples(char **files, int n)
{
    for (int i = 0; files && i < n; i++)
        if (files[i]) remove(files[i]);
    free_files(files, n);
}

static int evaluate(const args_t *a, fl_exe *exe, fl_prog *prog, const fl_model_word2vec *m,
                    const fl_model_word2vec_vocab *v)
{
    char cl[4096], an[4096];
    snprintf(cl, sizeof cl, "%s/clusters.txt", a->data_dir);
    snprintf(an, sizeof an, "%s/analogies.txt", a->data_dir);
    fl_prog *test = fl_prog_clone(prog, 1);
    fl_model_word2vec_metrics r;
    int st = test ? fl_model_word2vec_eval(exe, test, m, v, cl, an, &r) : fl_last_status();
    if (st == FL_OK)
        printf("cluster accuracy %.4f on %lld words, analogy accuracy %.4f on %lld analogies\n", r.cluster_acc,
               (long long)r.clustered_words, r.analogy_acc, (long long)r.analogies);
    fl_prog_free(test);
    return st == FL_OK ? 0 : -1;
}

static int main_function(const args_t *a)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/dict.txt", a->data_dir);
    fl_model_word2vec_vocab *vocab;
    if (fl_model_word2vec_vocab_load(path, &vocab) != FL_OK) return -1;
    fl_prog *prog = fl_prog_create(); /* the single-machine program */
    fl_model_word2vec_config cfg = fl_model_word2vec_default();
    cfg.dict_size = fl_model_word2vec_vocab_size(vocab);
    cfg.embedding_size = a->embedding_size, cfg.neg_num = a->neg_num;
    fleet_strategy strategy;  /* + */
    fleet_ps_mode mode = {0}; /* + the mode the strategy selects */
    if (!a->c.is_local && zoo_strategy(&a->c, &strategy, &mode)) return -1;
    cfg.is_distributed = !a->c.is_local && mode.remote_sparse; /* GEO keeps local tables */
    fl_model_word2vec m;
    if (fl_model_word2vec_build(prog, &cfg, &m) != FL_OK) return -1;
    snprintf(path, sizeof path, "%s/train", a->data_dir);
    int nfiles = 0, nmine = 0, r = 0;
    char **files = list_files(path, &nfiles), **samples = NULL;
    if (!nfiles) return fprintf(stderr, "word2vec: no corpus files in '%s'\n", path), -2;
    fl_exe *exe = fl_exe_create(NULL);
    fl_opt *optimizer = zoo_optimizer(&a->c);
    int64_t pairs = 0;
    if (!exe || !optimizer) return -1;
    if (a->c.is_local) {
        if (!(samples = make_samples(a, vocab, (const char *const *)files, nmine = nfiles, &pairs))) return -1;
        printf("%lld training pairs from %d corpus file(s)\n", (long long)pairs, nfiles);
        fl_dataset *ds = fl_model_word2vec_dataset(&m, "QueueDataset", a->c.batch_size, a->c.thread_num,
                                                   (const char *const *)samples, nmine);
        if (!ds || fl_opt_minimize(optimizer, m.loss) != FL_OK ||
            fl_exe_run(exe, fl_prog_startup(prog), NULL, 0, NULL, 0, NULL) != FL_OK)
            return -1;
        if ((r = zoo_train(&a->c, exe, prog, ds, m.loss, 0)) || (r = evaluate(a, exe, prog, &m, vocab))) return r;
        fl_dataset_free(ds);
    } else {
        fleet_role *role; /* + */
        if (fleet_role_from_env(0, &role) != FL_OK) return -1;
        fleet_t *fleet = fleet_init(role, &strategy); /* + */
        if (!fleet) return -1;
        optimizer = fleet_distributed_optimizer(fleet, optimizer, &strategy); /* + */
        if (!optimizer || fl_opt_minimize(optimizer, m.loss) != FL_OK) return -1;
        if (fleet_is_server(fleet)) { /* + */
            if (fleet_init_server(fleet, NULL) != FL_OK || fleet_run_server(fleet) != FL_OK) return -1;
        } else if (fleet_is_worker(fleet)) {
            const char **mine; /* + */
            if (fleet_split_files(fleet, (const char *const *)files, nfiles, &mine, &nmine) != FL_OK) return -1;
            if (!(samples = make_samples(a, vocab, mine, nmine, &pairs))) return -1;
            printf("%lld training pairs from %d corpus file(s)\n", (long long)pairs, nmine);
            fl_dataset *ds = fl_model_word2vec_dataset(&m, "QueueDataset", a->c.batch_size, a->c.thread_num,
                                                       (const char *const *)samples, nmine);
            if (!ds || fleet_init_worker(fleet) != FL_OK || /* + */
                fl_exe_run(exe, fl_prog_startup(prog), NULL, 0, NULL, 0, NULL) != FL_OK)
                return -1;
            if ((r = zoo_train(&a->c, exe, prog, ds, m.loss, mode.single_trainer))) return r;
            if (fleet_is_first_worker(fleet) && (r = evaluate(a, exe, prog, &m, vocab))) return r;
            if (fleet_stop_worker(fleet) != FL_OK) return -1; /* + */
            fl_dataset_free(ds);
            free(mine);
        }
        fleet_free(fleet); /* + */
    }
    if (a->keep_samples) {
        for (int i = 0; i < nmine; i++) printf("training pairs kept in %s\n", samples[i]);
        free_files(samples, nmine);
    } else {
        remove_samples(samples, nmine);
    }
    fl_opt_free(optimizer);
    fl_exe_free(exe);
    fl_prog_free(prog);
    free_files(files, nfiles);
    fl_model_word2vec_vocab_free(vocab);
    return 0;
}

int main(int argc, char **argv)
{
    args_t a = {{0, 3, 128, 2, 1000, 1.0, NULL, NULL, "sgd", "async", {NULL}, 0}, "data", "/tmp", 300, 5, 5, 1, 0, 1e-3};
    const zoo_opt opts[] = {ZOO_COMMON_OPTS(&a.c),
                            {"data_dir", 's', &a.data_dir, "fleet-datagen word2vec output (train/, dict.txt, ...)"},
                            {"sample_dir", 's', &a.sample_dir, "where the training pairs are written (then removed)"},
                            {"embedding_size", 'i', &a.embedding_size, "embedding width"},
                            {"neg_num", 'i', &a.neg_num, "negatives per pair"},
                            {"window", 'i', &a.window, "largest window on each side"},
                            {"sample", 'd', &a.sample, "subsampling threshold (0: none)"},
                            {"seed", 'i', &a.seed, "seed of the sampling"},
                            {"keep_samples", 'i', &a.keep_samples, "1: keep the training pairs (bench/zoo_text.sh)"}};
    int pr = zoo_parse(argc, argv, opts, (int)(sizeof opts / sizeof opts[0]));
    if (!pr) pr = zoo_check_common(argv[0], &a.c);
    if (pr) return pr == 1 ? 0 : 2;
    int rc = main_function(&a);
    if (rc == -1) fprintf(stderr, "word2vec: %s\n", fl_last_error());
    return rc ? 1 : 0;
}
