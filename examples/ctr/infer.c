/*
 * Scores Criteo-format files with a CTR-DNN inference model saved by train.c, on this
 * machine alone: a model trained with parameter servers carries its embedding rows (they
 * are exported from the servers when it is saved), so no server is needed here.
 *
 *   build/examples/ctr/infer --model_dir DIR --test_data DIR [--sparse_feature_dim N]
 *                            [--batch_size N]
 *
 * Prints the exact AUC of the predictions against the files' labels.
 */
#include <fleet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "files.h"

typedef struct {
    float p;
    int y;
} scored;

static int by_p(const void *a, const void *b)
{
    float x = ((const scored *)a)->p, y = ((const scored *)b)->p;
    return (x > y) - (x < y);
}

/* Exact ROC AUC: the share of (positive, negative) pairs with the positive scored higher,
 * ties counting half.  Walking up in p, each positive beats the negatives below it. */
static double exact_auc(scored *s, int64_t n)
{
    qsort(s, (size_t)n, sizeof *s, by_p);
    double pos = 0, neg = 0, good = 0;
    for (int64_t i = 0; i < n;) {
        int64_t j = i;
        double tp = 0, tn = 0;
        for (; j < n && s[j].p == s[i].p; j++) {
            if (s[j].y) tp++;
            else tn++;
        }
        good += tp * neg + 0.5 * tp * tn;
        pos += tp;
        neg += tn;
        i = j;
    }
    return pos > 0 && neg > 0 ? good / (pos * neg) : 0.5;
}

int main(int argc, char **argv)
{
    const char *model_dir = NULL, *test_data = NULL;
    long long dim = 1000001, batch = 1000;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--model_dir")) model_dir = argv[i + 1];
        else if (!strcmp(argv[i], "--test_data")) test_data = argv[i + 1];
        else if (!strcmp(argv[i], "--sparse_feature_dim")) dim = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--batch_size")) batch = atoll(argv[i + 1]);
        else {
            fprintf(stderr, "infer: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (!model_dir || !test_data || dim < 1 || batch < 1) {
        fprintf(stderr, "usage: %s --model_dir DIR --test_data DIR [--sparse_feature_dim N] [--batch_size N]\n", argv[0]);
        return 2;
    }
    fl_exe *exe = fl_exe_create(NULL);
    if (!exe) {
        fprintf(stderr, "infer: %s\n", fl_last_error());
        return 1;
    }
    fl_prog *prog = NULL;
    char **feeds = NULL, **fetches = NULL;
    int nfeed = 0, nfetch = 0;
    if (fl_io_load_inference_model(exe, model_dir, &prog, &feeds, &nfeed, &fetches, &nfetch) != FL_OK) {
        fprintf(stderr, "infer: %s\n", fl_last_error());
        return 1;
    }
    /* the dataset reads the model's inputs plus the label, which the model does not have */
    fl_prog *aux = fl_prog_create();
    fl_var *vars[FL_MODEL_CTR_MAX_SLOTS + 2];
    int nv = 0;
    for (int i = 0; i < nfeed && nv < FL_MODEL_CTR_MAX_SLOTS + 1; i++) vars[nv++] = fl_prog_var(prog, feeds[i]);
    vars[nv++] = fl_layer_data(aux, "label", FL_SHAPE(1), FL_INT64, 0);

    int nfiles = 0;
    char **files = list_files(test_data, &nfiles);
    if (!nfiles) {
        fprintf(stderr, "infer: no files in '%s'\n", test_data);
        return 1;
    }

    fl_dataset *ds = fl_dataset_create("QueueDataset");
    int st = ds ? FL_OK : fl_last_status();
    if (st == FL_OK) st = fl_dataset_set_use_var(ds, vars, nv);
    if (st == FL_OK) st = fl_dataset_set_format(ds, "criteo");
    if (st == FL_OK) st = fl_dataset_set_sparse_feature_dim(ds, (uint64_t)dim);
    if (st == FL_OK) st = fl_dataset_set_batch_size(ds, (int)batch);
    if (st == FL_OK) st = fl_dataset_set_thread(ds, 1);
    if (st == FL_OK) st = fl_dataset_set_filelist(ds, (const char *const *)files, nfiles);
    if (st == FL_OK) st = fl_dataset_begin(ds);
    fl_data_batch *b = st == FL_OK ? fl_data_batch_create(ds) : NULL;
    scored *s = NULL;
    int64_t n = 0, scap = 0;
    fl_feed feed[FL_MODEL_CTR_MAX_SLOTS + 1];
    while (st == FL_OK) {
        int r = fl_dataset_next(ds, 0, b);
        if (r <= 0) {
            st = r;
            break;
        }
        int nslots = fl_data_batch_num_slots(b);
        for (int i = 0; i + 1 < nslots; i++) feed[i] = (fl_feed){fl_data_batch_name(b, i), fl_data_batch_tensor(b, i)};
        fl_tensor *out;
        st = fl_exe_run(exe, prog, feed, nslots - 1, (const char *const *)fetches, 1, &out);
        if (st != FL_OK) break;
        const float *p = fl_tensor_f32(out);
        const int64_t *y = fl_tensor_i64(fl_data_batch_tensor(b, nslots - 1));
        int bs = fl_data_batch_size(b);
        if (n + bs > scap) s = realloc(s, (size_t)(scap = 2 * (n + bs)) * sizeof *s);
        for (int i = 0; i < bs; i++) s[n++] = (scored){p[2 * i + 1], y[i] != 0};
    }
    if (ds && fl_dataset_end(ds) != FL_OK && st == FL_OK) st = fl_last_status();
    if (st != FL_OK) {
        fprintf(stderr, "infer: %s\n", fl_last_error());
        return 1;
    }
    if (n == 0) { /* an AUC of nothing would read as 0.5 */
        fprintf(stderr, "infer: read 0 examples from the %d file(s) in '%s' (empty, or not Criteo TSV)\n", nfiles,
                test_data);
        return 1;
    }
    printf("test auc %.4f on %lld examples (model %s, no servers)\n", exact_auc(s, n), (long long)n, model_dir);
    free(s);
    fl_data_batch_free(b);
    fl_dataset_free(ds);
    free_files(files, nfiles);
    fl_prog_free(aux);
    fl_io_free_names(feeds, nfeed);
    fl_io_free_names(fetches, nfetch);
    fl_prog_free(prog);
    fl_exe_free(exe);
    return 0;
}
