/*
 * simnet-bow (Fleet's examples/simnet_bow): query and title towers over one shared sparse
 * embedding, cosine similarity, pairwise hinge loss; one program for local and
 * parameter-server training.  The lines marked "+" are the distributed part.
 *
 *   build/tools/fleet-datagen simnet --rows 20000 --out DIR
 *   build/examples/simnet/train --is_local 1 --train_data DIR/train --test_data DIR/test --dict_dim 1200
 *   fleetrun --server_num 1 --worker_num 2 build/examples/simnet/train --train_data DIR/train ...
 *
 * After training, the local run (or the first worker) prints "test order rate X on N
 * triples": the share of held-out triples the model ranks positive over negative, next to
 * the generator's ceiling (DIR/planted.json).  --help lists every option with its default.
 */
#include "../zoo/args.h"

typedef struct {
    zoo_common c;
    int dict_dim, emb_dim, hid_dim;
    double margin;
} args_t;

static int order_rate(const args_t *a, fl_exe *exe, fl_prog *prog, const fl_model_simnet *m)
{
    int n = 0;
    char **files = list_files(a->c.test_data, &n);
    if (!n) return fprintf(stderr, "simnet: no test files in '%s'\n", a->c.test_data), -2;
    fl_prog *test = fl_prog_clone(prog, 1);
    double rate = 0;
    int64_t pairs = 0;
    int st = test ? fl_model_simnet_eval(exe, test, m, (const char *const *)files, n, &rate, &pairs) : fl_last_status();
    if (st == FL_OK) printf("test order rate %.4f on %lld triples\n", rate, (long long)pairs);
    fl_prog_free(test);
    free_files(files, n);
    return st == FL_OK ? 0 : -1;
}

static int main_function(const args_t *a)
{
    fl_prog *prog = fl_prog_create(); /* the single-machine program */
    fl_model_simnet_config cfg = fl_model_simnet_default();
    cfg.dict_dim = a->dict_dim, cfg.emb_dim = a->emb_dim, cfg.hid_dim = a->hid_dim, cfg.margin = (float)a->margin;
    fleet_strategy strategy;  /* + */
    fleet_ps_mode mode = {0}; /* + the mode the strategy selects */
    if (!a->c.is_local && zoo_strategy(&a->c, &strategy, &mode)) return -1;
    cfg.is_distributed = !a->c.is_local && mode.remote_sparse; /* GEO keeps a local table */
    fl_model_simnet m;
    if (fl_model_simnet_build(prog, &cfg, &m) != FL_OK) return -1;
    int nfiles = 0;
    char **files = list_files(a->c.train_data, &nfiles);
    if (!nfiles) return fprintf(stderr, "simnet: no training files in '%s'\n", a->c.train_data), -2;
    fl_exe *exe = fl_exe_create(NULL);
    fl_opt *optimizer = zoo_optimizer(&a->c);
    if (!exe || !optimizer) return -1;
    int r = 0;
    if (a->c.is_local) {
        fl_dataset *ds = fl_model_simnet_dataset(&m, "QueueDataset", a->c.batch_size, a->c.thread_num,
                                                 (const char *const *)files, nfiles);
        if (!ds || fl_opt_minimize(optimizer, m.loss) != FL_OK ||
            fl_exe_run(exe, fl_prog_startup(prog), NULL, 0, NULL, 0, NULL) != FL_OK)
            return -1;
        if ((r = zoo_train(&a->c, exe, prog, ds, m.loss, 0)) || (a->c.test_data && (r = order_rate(a, exe, prog, &m))))
            return r;
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
            int nmine;
            if (fleet_split_files(fleet, (const char *const *)files, nfiles, &mine, &nmine) != FL_OK) return -1;
            fl_dataset *ds = fl_model_simnet_dataset(&m, "QueueDataset", a->c.batch_size, a->c.thread_num, mine, nmine);
            if (!ds || fleet_init_worker(fleet) != FL_OK || /* + */
                fl_exe_run(exe, fl_prog_startup(prog), NULL, 0, NULL, 0, NULL) != FL_OK)
                return -1;
            if ((r = zoo_train(&a->c, exe, prog, ds, m.loss, mode.single_trainer))) return r;
            if (fleet_is_first_worker(fleet) && a->c.test_data && (r = order_rate(a, exe, prog, &m))) return r;
            if (fleet_stop_worker(fleet) != FL_OK) return -1; /* + */
            fl_dataset_free(ds);
            free(mine);
        }
        fleet_free(fleet); /* + */
    }
    fl_opt_free(optimizer);
    fl_exe_free(exe);
    fl_prog_free(prog);
    free_files(files, nfiles);
    return 0;
}

int main(int argc, char **argv)
{
    args_t a = {{0, 5, 128, 2, 100, 0.2, "train_data", NULL, "sgd", "async", {NULL}, 0}, 1451594, 128, 128, 0.1};
    const zoo_opt opts[] = {ZOO_COMMON_OPTS(&a.c),
                            {"dict_dim", 'i', &a.dict_dim, "rows of the shared embedding (the word ids' bound)"},
                            {"emb_dim", 'i', &a.emb_dim, "embedding width"},
                            {"hid_dim", 'i', &a.hid_dim, "fc output width"},
                            {"margin", 'd', &a.margin, "hinge margin"}};
    int pr = zoo_parse(argc, argv, opts, (int)(sizeof opts / sizeof opts[0]));
    if (!pr) pr = zoo_check_common(argv[0], &a.c);
    if (pr) return pr == 1 ? 0 : 2;
    int rc = main_function(&a);
    if (rc == -1) fprintf(stderr, "simnet: %s\n", fl_last_error());
    return rc ? 1 : 0;
}
