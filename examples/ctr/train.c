/*
 * CTR-DNN on Criteo-format data: the seed's click-through-rate example (train.py), one
 * program for local and distributed training.  The lines marked "+" are the distributed
 * part; everything else is the single-machine program.
 *
 *   build/examples/ctr/train --is_local 1 --train_data DIR --test_data DIR
 *   fleetrun --server_num 2 --worker_num 2 build/examples/ctr/train --train_data DIR ...
 *   fleetrun --nproc_per_node 2 build/examples/ctr/train --mode collective --train_data DIR ...
 *
 * Data: Criteo TSV (label, I1..I13, C1..C26), read by the built-in reader
 * (--pipe_command CMD streams each file through CMD and reads MultiSlot instead); make
 * some with `build/tools/fleet-datagen criteo --rows 200000 --out DIR`.  After training the
 * first worker (or the local run) measures AUC on the test files and saves the inference
 * model (which runs with no servers: the embedding rows are exported into it).
 *
 * Options (defaults as the seed): --epochs 20 --batch_size 100 --thread_num 10
 * --sparse_feature_dim 1000001 --embedding_size 10 --optimizer sgd --lr 1e-4
 * --dataset QueueDataset --print_period 100 --model_dir ctr_model --mode sync|half_async|async|geo|collective
 * --hidden 400,400,400 --strategy KEY=VALUE (any DistributedStrategy field, repeatable)
 * --checkpoint_dir DIR: distributed runs save a checkpoint for restart after every epoch
 * (the newest 2 kept) and, started again (e.g. by `fleetrun --max_restart`), resume after
 * the last completed epoch: the servers from its tables, the workers from their state.
 * An epoch that reads no example is an error naming the files (empty or unreadable data is
 * most often a mistake); --allow_empty 1 lets a process train on nothing.
 * --metrics_dir DIR writes each worker's loss (mean per example), AUC, examples/s (and
 * learning rate where the worker runs the optimizer) every print_period batches and per
 * epoch to DIR/metrics.rank<R>.csv and TensorBoard files in DIR/rank<R>/ (as
 * FLEET_METRICS_DIR does; docs/metrics.md); scripts/plot-metrics.sh DIR draws them.
 */
#include <fleet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "files.h"

typedef struct {
    int is_local, epochs, batch_size, thread_num, embedding_size, print_period, allow_empty;
    int64_t sparse_feature_dim;
    double lr;
    const char *train_data, *test_data, *optimizer, *dataset, *model_dir, *pipe_command, *mode, *checkpoint_dir;
    const char *metrics_dir;
    const char *hidden;       /* --hidden 400,400,400 */
    const char *strategy[16]; /* --strategy KEY=VALUE (DistributedStrategy fields) */
    int nstrategy;
} args_t;

static int parse_args(int argc, char **argv, args_t *a)
{
    *a = (args_t){0,
                  20,
                  100,
                  10,
                  10,
                  100,
                  0,
                  1000001,
                  1e-4,
                  "raw_data",
                  NULL,
                  "sgd",
                  "QueueDataset",
                  "ctr_model",
                  NULL,
                  "async",
                  NULL,
                  NULL,
                  "400,400,400",
                  {NULL},
                  0};
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(k, "--help") || !strcmp(k, "-h")) return 1;
        if (strncmp(k, "--", 2) != 0 || !v) {
            fprintf(stderr, "train: expected --option VALUE, got '%s'\n", k);
            return 2;
        }
        i++;
        k += 2;
        if (!strcmp(k, "is_local")) a->is_local = atoi(v);
        else if (!strcmp(k, "epochs")) a->epochs = atoi(v);
        else if (!strcmp(k, "batch_size")) a->batch_size = atoi(v);
        else if (!strcmp(k, "thread_num")) a->thread_num = atoi(v);
        else if (!strcmp(k, "embedding_size")) a->embedding_size = atoi(v);
        else if (!strcmp(k, "print_period")) a->print_period = atoi(v);
        else if (!strcmp(k, "allow_empty")) a->allow_empty = atoi(v);
        else if (!strcmp(k, "sparse_feature_dim")) a->sparse_feature_dim = atoll(v);
        else if (!strcmp(k, "lr")) a->lr = atof(v);
        else if (!strcmp(k, "train_data")) a->train_data = v;
        else if (!strcmp(k, "checkpoint_dir")) a->checkpoint_dir = v;
        else if (!strcmp(k, "metrics_dir")) a->metrics_dir = v;
        else if (!strcmp(k, "test_data")) a->test_data = v;
        else if (!strcmp(k, "optimizer")) a->optimizer = v;
        else if (!strcmp(k, "dataset")) a->dataset = v;
        else if (!strcmp(k, "model_dir")) a->model_dir = v;
        else if (!strcmp(k, "pipe_command")) a->pipe_command = v;
        else if (!strcmp(k, "mode")) a->mode = v;
        else if (!strcmp(k, "hidden")) a->hidden = v;
        else if (!strcmp(k, "strategy") && a->nstrategy < 16) a->strategy[a->nstrategy++] = v;
        else {
            fprintf(stderr, "train: unknown option --%s (see --help)\n", k);
            return 2;
        }
    }
    if (a->epochs < 1 || a->batch_size < 1 || a->thread_num < 1 || a->sparse_feature_dim < 1 || !(a->lr > 0)) {
        fprintf(stderr, "train: epochs, batch_size, thread_num, sparse_feature_dim and lr must be positive\n");
        return 2;
    }
    return 0;
}

static fl_opt *make_optimizer(const args_t *a)
{
    if (!strcmp(a->optimizer, "sgd")) return fl_opt_sgd((float)a->lr);
    if (!strcmp(a->optimizer, "adam")) return fl_opt_adam((float)a->lr, 0.9, 0.999, 1e-8);
    if (!strcmp(a->optimizer, "adagrad")) return fl_opt_adagrad((float)a->lr, 1e-6);
    fprintf(stderr, "train: --optimizer must be sgd, adam or adagrad, got '%s'\n", a->optimizer);
    return NULL;
}

static fl_dataset *make_dataset(const args_t *a, fl_model_ctr_dnn *m, const char *const *files, int nfiles)
{
    fl_dataset *ds = fl_dataset_create(a->dataset);
    if (!ds) return NULL;
    int st = fl_dataset_set_batch_size(ds, a->batch_size);
    if (st == FL_OK) st = fl_dataset_set_thread(ds, a->thread_num);
    if (st == FL_OK) st = fl_dataset_set_use_var(ds, m->use_var, m->nuse_var);
    if (st == FL_OK && a->pipe_command) st = fl_dataset_set_pipe_command(ds, a->pipe_command);
    if (st == FL_OK && !a->pipe_command) st = fl_dataset_set_format(ds, "criteo");
    if (st == FL_OK) st = fl_dataset_set_sparse_feature_dim(ds, (uint64_t)a->sparse_feature_dim);
    if (st == FL_OK) st = fl_dataset_set_filelist(ds, files, nfiles);
    if (st == FL_OK && !strcmp(a->dataset, "InMemoryDataset")) {
        st = fl_dataset_load_into_memory(ds);
        if (st == FL_OK) st = fl_dataset_local_shuffle(ds, 1);
    }
    if (st != FL_OK) {
        fl_dataset_free(ds);
        return NULL;
    }
    return ds;
}

/* main_function's result when it printed its own message (not one of fl_last_error). */
#define REPORTED (-2)

/* "a, b, c and 4 more" (the first few of files). */
static void name_files(char *out, size_t n, const char *const *files, int nfiles)
{
    size_t k = 0;
    out[0] = 0;
    for (int i = 0; i < nfiles && i < 4 && k < n; i++)
        k += (size_t)snprintf(out + k, n - k, "%s'%s'", i ? ", " : "", files[i]);
    if (nfiles > 4 && k < n) snprintf(out + k, n - k, " and %d more", nfiles - 4);
}

/* Epochs [first, epochs); with a fleet and --checkpoint_dir, a checkpoint after each.  An
 * epoch that read no example is an error naming the files, unless --allow_empty 1. */
static int train_loop(const args_t *a, fl_exe *exe, fl_prog *prog, fl_dataset *ds, const char *const *files, int nfiles,
                      fl_model_ctr_dnn *m, fleet_t *fleet, int first)
{
    /* the loss shown and recorded is the mean per example (the model trains on the sum) */
    const char *fetch[2] = {fl_var_name(m->auc), fl_var_name(m->avg_loss)}, *info[2] = {"auc", "loss"};
    /* collective training exchanges one step per process: one trainer thread */
    int thread = !strcmp(a->mode, "collective") && !a->is_local ? 1 : 0;
    int64_t seen = 0;
    for (int i = first; i < a->epochs; i++) {
        fl_exe_dataset_stats s;
        if (fl_exe_train_from_dataset(exe, prog, ds, thread, fetch, info, 2, a->print_period, &s) != FL_OK) return -1;
        printf("epoch %d: %lld examples in %.2f s (%.0f examples/s), auc %.4f\n", i, (long long)s.instances, s.seconds,
               s.seconds > 0 ? (double)s.instances / s.seconds : 0.0, s.fetch[0]);
        fflush(stdout);
        seen += s.instances;
        if (!s.instances && !a->allow_empty) {
            char names[1024];
            name_files(names, sizeof names, files, nfiles);
            fprintf(stderr,
                    "train: epoch %d read 0 examples from %d file(s): %s%s (empty files, or data this "
                    "reader cannot parse; --allow_empty 1 allows it)\n",
                    i, nfiles, names, nfiles ? "" : "none: this process got no files");
            return REPORTED;
        }
        fleet_checkpoint_pos pos = {i + 1, 0, 0, seen};
        if (fleet && a->checkpoint_dir && fleet_save_checkpoint(fleet, exe, a->checkpoint_dir, prog, &pos, 2) != FL_OK)
            return -1;
    }
    return 0;
}

/* The epoch to start from: after the newest checkpoint's, or 0. */
static int resume(const args_t *a, fleet_t *fleet, fl_exe *exe, fl_prog *prog, int *first)
{
    *first = 0;
    if (!a->checkpoint_dir) return 0;
    fleet_checkpoint_pos pos;
    int st = fleet_load_checkpoint(fleet, exe, a->checkpoint_dir, prog, &pos);
    if (st == FL_ENOTFOUND) return 0;
    if (st != FL_OK) return -1;
    *first = (int)pos.epoch;
    printf("resumed after epoch %d from %s\n", *first - 1, a->checkpoint_dir);
    return 0;
}

/* AUC of the trained model on the test files, with the statistics zeroed first. */
static int evaluate(const args_t *a, fl_exe *exe, fl_prog *prog, fl_model_ctr_dnn *m)
{
    int n = 0;
    char **files = list_files(a->test_data, &n);
    if (!n) {
        fprintf(stderr, "train: no test files in '%s'\n", a->test_data);
        return REPORTED;
    }
    args_t one = *a;
    one.dataset = "QueueDataset";
    one.thread_num = 1; /* one thread: exact AUC statistics */
    fl_dataset *ds = make_dataset(&one, m, (const char *const *)files, n);
    fl_prog *test = fl_prog_clone(prog, 1);
    int st = ds && test ? FL_OK : fl_last_status();
    for (int i = 0; st == FL_OK && i < m->nauc_states; i++)
        st = fl_scope_zero(fl_exe_scope(exe), fl_var_name(m->auc_states[i]));
    const char *fetch[1] = {fl_var_name(m->auc)};
    fl_exe_dataset_stats s;
    const char *info[1] = {"auc"};
    if (st == FL_OK) st = fl_exe_infer_from_dataset(exe, test, ds, 1, fetch, info, 1, 0, &s);
    if (st == FL_OK) printf("test auc %.4f on %lld examples\n", s.fetch[0], (long long)s.instances);
    fl_prog_free(test);
    fl_dataset_free(ds);
    free_files(files, n);
    return st == FL_OK ? 0 : -1;
}

static int main_function(const args_t *a)
{
    /* common code for local training and distributed training */
    fl_prog *prog = fl_prog_create();
    fl_model_ctr_dnn_config cfg = fl_model_ctr_dnn_default();
    cfg.sparse_feature_dim = a->sparse_feature_dim;
    cfg.embedding_size = a->embedding_size;
    int collective = !strcmp(a->mode, "collective");
    fleet_strategy strategy = fleet_strategy_default(); /* + */
    fleet_ps_mode mode = {0};                           /* + the mode the strategy selects */
    if (!a->is_local) {
        if (!collective && fleet_strategy_set_ps_mode(&strategy, a->mode) != FL_OK) return -1;
        for (int i = 0; i < a->nstrategy; i++)
            if (fleet_strategy_parse(&strategy, a->strategy[i]) != FL_OK) return -1;
        if (!collective && fleet_strategy_ps_mode(&strategy, &mode) != FL_OK) return -1;
    }
    /* GEO and collective training keep a local table */
    cfg.is_distributed = mode.remote_sparse;
    cfg.nhidden = 0;
    for (const char *h = a->hidden; *h && cfg.nhidden < FL_MODEL_CTR_MAX_LAYERS; h += strspn(h, ","))
        cfg.hidden[cfg.nhidden++] = (int)strtol(h, (char **)&h, 10);
    fl_model_ctr_dnn m;
    if (fl_model_ctr_dnn_build(prog, &cfg, &m) != FL_OK) return -1;
    int nfiles = 0;
    char **whole_filelist = list_files(a->train_data, &nfiles);
    if (!nfiles) {
        fprintf(stderr, "train: no training files in '%s'\n", a->train_data);
        return REPORTED;
    }
    fl_exe *exe = fl_exe_create(NULL);
    if (!exe) return -1;
    fl_opt *optimizer = make_optimizer(a);
    if (!optimizer) return REPORTED;
    int rc = 0, r;

    if (a->is_local) { /* local training */
        fl_dataset *ds = make_dataset(a, &m, (const char *const *)whole_filelist, nfiles);
        if (a->metrics_dir && fl_exe_set_metrics(exe, a->metrics_dir, NULL) != FL_OK) return -1;
        if (!ds || fl_opt_minimize(optimizer, m.loss) != FL_OK ||
            fl_exe_run(exe, fl_prog_startup(prog), NULL, 0, NULL, 0, NULL) != FL_OK)
            return -1;
        if ((r = train_loop(a, exe, prog, ds, (const char *const *)whole_filelist, nfiles, &m, NULL, 0))) return r;
        if (a->test_data && (r = evaluate(a, exe, prog, &m))) return r;
        const char *feeds[28];
        for (int i = 0; i + 1 < m.nuse_var; i++) feeds[i] = fl_var_name(m.use_var[i]);
        if (fl_io_save_inference_model(exe, a->model_dir, feeds, m.nuse_var - 1, &m.predict, 1, prog) != FL_OK) return -1;
        printf("model saved to %s\n", a->model_dir);
        fl_dataset_free(ds);
    } else {
        /* distributed training */
        fleet_t *fleet = collective ? fleet_init_collective(NULL, &strategy) /* + */
                                    : fleet_init(NULL, &strategy);           /* PaddleCloud role maker */
        if (!fleet) return -1;
        optimizer = fleet_distributed_optimizer(fleet, optimizer, &strategy); /* + */
        if (!optimizer || fl_opt_minimize(optimizer, m.loss) != FL_OK) return -1;
        if (fleet_is_server(fleet)) { /* + */
            char ckpt[4096];          /* a restarted job: the tables of the newest checkpoint */
            int from = a->checkpoint_dir && fleet_checkpoint_latest(a->checkpoint_dir, ckpt, sizeof ckpt, NULL) == FL_OK;
            if (fleet_init_server(fleet, from ? ckpt : NULL) != FL_OK || fleet_run_server(fleet) != FL_OK) return -1;
        } else if (fleet_is_worker(fleet)) {
            const char **mine; /* + */
            int nmine;
            if (fleet_split_files(fleet, (const char *const *)whole_filelist, nfiles, &mine, &nmine) != FL_OK) return -1;
            fl_dataset *ds = make_dataset(a, &m, mine, nmine);
            int first = 0;
            /* after fleet_init: the files carry this worker's rank */
            if (a->metrics_dir && fl_exe_set_metrics(exe, a->metrics_dir, NULL) != FL_OK) return -1;
            if (!ds || fleet_init_worker(fleet) != FL_OK || /* + */
                fl_exe_run(exe, fl_prog_startup(prog), NULL, 0, NULL, 0, NULL) != FL_OK ||
                resume(a, fleet, exe, prog, &first))
                return -1;
            if ((r = train_loop(a, exe, prog, ds, mine, nmine, &m, fleet, first))) return r;
            const char *feeds[28];
            for (int i = 0; i + 1 < m.nuse_var; i++) feeds[i] = fl_var_name(m.use_var[i]);
            if (fleet_save_inference_model(fleet, exe, a->model_dir, feeds, m.nuse_var - 1, &m.predict, 1, prog) != FL_OK)
                return -1;
            if (fleet_is_first_worker(fleet)) {
                printf("model saved to %s\n", a->model_dir);
                if (a->test_data) rc = evaluate(a, exe, prog, &m);
            }
            if (fleet_stop_worker(fleet) != FL_OK) return -1; /* + */
            fl_dataset_free(ds);
            free(mine);
        }
        fleet_free(fleet); /* + */
    }
    fl_opt_free(optimizer);
    fl_exe_free(exe);
    fl_prog_free(prog);
    free_files(whole_filelist, nfiles);
    return rc;
}

int main(int argc, char **argv)
{
    args_t args;
    int pr = parse_args(argc, argv, &args);
    if (pr) {
        fprintf(pr == 1 ? stdout : stderr,
                "usage: %s [--is_local 1] [--train_data DIR] [--test_data DIR] [--epochs N] "
                "[--batch_size N] [--thread_num N] [--optimizer sgd|adam|adagrad] [--lr X] "
                "[--dataset QueueDataset|InMemoryDataset] [--mode sync|half_async|async|geo|collective] "
                "[--sparse_feature_dim N] [--model_dir DIR] [--pipe_command CMD] [--hidden N,N,..] "
                "[--strategy KEY=VALUE ...] [--checkpoint_dir DIR] [--allow_empty 1] [--metrics_dir DIR]\n",
                argv[0]);
        return pr == 1 ? 0 : 2;
    }
    int rc = main_function(&args);
    if (rc == REPORTED) return 1;
    if (rc != 0) {
        fprintf(stderr, "train: %s\n", fl_last_error());
        return 1;
    }
    return 0;
}
