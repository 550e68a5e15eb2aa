/*
 * shuffle_job - one process of a parameter-server job for tests/test_ctr.c: servers serve a
 * tiny model; each worker loads its share of Criteo files into an InMemoryDataset,
 * shuffles globally through the fleet, and prints what it holds:
 *
 *   shuffle_job DIR FILE...
 *   -> worker i writes DIR/worker.i: "held N total T hash H before B" where N records are
 *      held after the shuffle, T is fleet_dataset_memory_data_size (all workers), H is an
 *      order-independent hash of the held records (sum of per-record hashes, mod 2^64) and
 *      B the number of records it loaded itself.
 * Exit status 0 on success, 1 with the error on stderr.
 */
#include <fleet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char *what)
{
    fprintf(stderr, "shuffle_job: %s: %s\n", what, fl_last_error());
    return 1;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: shuffle_job DIR FILE...\n");
        return 2;
    }
    fl_prog *p = fl_prog_create();
    fl_model_ctr_dnn_config cfg = fl_model_ctr_dnn_default();
    cfg.sparse_feature_dim = 1009;
    cfg.nhidden = 1;
    cfg.hidden[0] = 4;
    cfg.is_distributed = 1;
    fl_model_ctr_dnn m;
    if (fl_model_ctr_dnn_build(p, &cfg, &m) != FL_OK) return fail("model");
    fleet_t *f = fleet_init(NULL, NULL);
    if (!f) return fail("fleet_init");
    fl_opt *o = fleet_distributed_optimizer(f, fl_opt_sgd(0.01f), NULL);
    if (!o || fl_opt_minimize(o, m.loss) != FL_OK) return fail("minimize");
    if (fleet_is_server(f)) {
        if (fleet_init_server(f, NULL) != FL_OK || fleet_run_server(f) != FL_OK) return fail("server");
        fl_opt_free(o);
        fleet_free(f);
        fl_prog_free(p);
        return 0;
    }
    if (fleet_init_worker(f) != FL_OK) return fail("fleet_init_worker");
    const char **mine;
    int nmine;
    if (fleet_split_files(f, (const char *const *)argv + 2, argc - 2, &mine, &nmine) != FL_OK) return fail("split");
    fl_dataset *ds = fl_dataset_create("InMemoryDataset");
    if (!ds || fl_dataset_set_use_var(ds, m.use_var, m.nuse_var) != FL_OK || fl_dataset_set_format(ds, "criteo") != FL_OK ||
        fl_dataset_set_sparse_feature_dim(ds, 1009) != FL_OK || fl_dataset_set_batch_size(ds, 1) != FL_OK ||
        fl_dataset_set_thread(ds, 1) != FL_OK || fl_dataset_set_filelist(ds, mine, nmine) != FL_OK ||
        fl_dataset_load_into_memory(ds) != FL_OK)
        return fail("load");
    int64_t before = fl_dataset_get_memory_data_size(ds);
    if (fleet_dataset_global_shuffle(f, ds, 42) != FL_OK) return fail("fleet_dataset_global_shuffle");
    int64_t total = fleet_dataset_memory_data_size(f, ds);
    if (total < 0) return fail("fleet_dataset_memory_data_size");
    /* hash every held record (batch size 1: one record per batch) */
    uint64_t hash = 0;
    int64_t held = 0;
    fl_data_batch *b = fl_data_batch_create(ds);
    if (!b || fl_dataset_begin(ds) != FL_OK) return fail("begin");
    for (;;) {
        int r = fl_dataset_next(ds, 0, b);
        if (r < 0) return fail("next");
        if (r == 0) break;
        uint64_t h = 0xcbf29ce484222325ull;
        for (int i = 0; i < fl_data_batch_num_slots(b); i++) {
            fl_tensor *t = fl_data_batch_tensor(b, i);
            h = fnv(h, fl_tensor_cdata(t), fl_tensor_nbytes(t));
        }
        hash += h;
        held++;
    }
    if (fl_dataset_end(ds) != FL_OK) return fail("end");
    char path[4096];
    snprintf(path, sizeof path, "%s/worker.%d", argv[1], fleet_worker_index(f));
    FILE *out = fopen(path, "w");
    if (!out) return fail("output file");
    fprintf(out, "held %lld total %lld hash %llu before %lld\n", (long long)held, (long long)total,
            (unsigned long long)hash, (long long)before);
    fclose(out);
    if (fleet_stop_worker(f) != FL_OK) return fail("fleet_stop_worker");
    fl_data_batch_free(b);
    fl_dataset_free(ds);
    free(mine);
    fl_opt_free(o);
    fleet_free(f);
    fl_prog_free(p);
    return 0;
}
