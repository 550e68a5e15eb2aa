/*
 * test_io_rows.c - inference models store mostly-zero tables by their rows (src/io/rows.c):
 * NAME@ids + NAME@rows with "NAME@height" in the metadata.  The round trip is bit-exact
 * (-0.0 and NaN rows included), the file shrinks, NumPy rebuilds the table from the file
 * alone, and a bad id, unsorted ids or a missing part are errors naming the file.
 */
#include <dirent.h>
#include <math.h>
#include <sys/stat.h>

#include "testhelp.h"
#include "graph/graph_internal.h"
#include "io/io_internal.h"

#define H 50000 /* rows of the sparse table */
#define DIM 8
#define USED 300 /* non-zero rows */

static char DIR_[64];

static const char *path_in(const char *name)
{
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", DIR_, name);
    return buf[k];
}

static void cleanup(void) { th_rmtree(DIR_); }

typedef struct {
    fl_prog *p;
    fl_var *pred;
    fl_exe *e;
} model;

/* ids (LoD) -> "emb" [H, DIM] (made mostly zero) and "small" [10, 4] (random, stays whole)
 * -> sum pools -> fc 2 softmax. */
static model build(void)
{
    model m;
    m.p = fl_prog_create();
    fl_var *ids = fl_layer_data(m.p, "ids", FL_SHAPE(1), FL_INT64, 1);
    fl_var *ids2 = fl_layer_data(m.p, "ids2", FL_SHAPE(1), FL_INT64, 1);
    fl_embedding_attr a = {0}, b = {0};
    a.is_sparse = 1;
    a.param.name = "emb";
    b.param.name = "small";
    fl_var *e1 = fl_layer_sequence_pool(fl_layer_embedding(ids, H, DIM, &a), "sum");
    fl_var *e2 = fl_layer_sequence_pool(fl_layer_embedding(ids2, 10, 4, &b), "sum");
    m.pred = fl_layer_fc(FL_VARS(e1, e2), 2, "softmax");
    CHECK(m.pred);
    m.e = fl_exe_create(NULL);
    CHECK_OK(fl_exe_run(m.e, fl_prog_startup(m.p), NULL, 0, NULL, 0, NULL));
    /* the table as a parameter-server export leaves it: zeros but for the rows in use */
    fl_tensor *t = fl_scope_find(fl_exe_scope(m.e), "emb");
    CHECK(t && fl_tensor_numel(t) == (int64_t)H * DIM);
    float *w = fl_tensor_data(t);
    memset(w, 0, sizeof(float) * H * DIM);
    for (int k = 0; k < USED; k++) {
        int64_t r = ((int64_t)k * 7919 + 13) % H;
        for (int j = 0; j < DIM; j++) w[r * DIM + j] = (float)(k + 1) * 0.001f - (float)j * 0.5f;
    }
    for (int j = 0; j < DIM; j++) w[(int64_t)(H - 1) * DIM + j] = -0.0f; /* bits set: kept */
    w[17 * DIM + 3] = NAN;
    return m;
}

static void model_free(model *m)
{
    fl_exe_free(m->e);
    fl_prog_free(m->p);
}

static fl_tensor *ids_batch(const int64_t *v, int n)
{
    fl_tensor *t = fl_tensor_create(FL_INT64, 2, (const int64_t[]){n, 1});
    CHECK(t);
    memcpy(fl_tensor_data(t), v, sizeof(int64_t) * (size_t)n);
    int64_t lod[3] = {0, n / 2, n};
    CHECK_OK(fl_tensor_set_lod(t, lod, 3));
    return t;
}

static int64_t file_size(const char *p)
{
    struct stat sb;
    CHECK(stat(p, &sb) == 0);
    return (int64_t)sb.st_size;
}

static int has_name(char **names, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(names[i], name)) return 1;
    return 0;
}

/* Saved by rows, loaded back bit for bit; the model scores the same. */
TEST(sparse_table_round_trip_is_bit_exact)
{
    th_mktemp(DIR_, sizeof DIR_, "fl_iorows");
    model m = build();
    const char *feeds[] = {"ids", "ids2"};
    CHECK_OK(fl_io_save_inference_model(m.e, DIR_, feeds, 2, &m.pred, 1, m.p));
    const char *pp = path_in("params.safetensors");
    int64_t size = file_size(pp), dense = (int64_t)H * DIM * 4;
    printf("  params.safetensors: %lld bytes (the table alone would be %lld)\n", (long long)size, (long long)dense);
    CHECK(size < dense / 50);
    /* what the file holds */
    char **names;
    fl_tensor **ts;
    int n;
    fl__st_meta meta;
    CHECK_OK(fl__st_read(pp, &names, &ts, &n, &meta));
    CHECK(has_name(names, n, "emb@ids") && has_name(names, n, "emb@rows") && !has_name(names, n, "emb"));
    CHECK(has_name(names, n, "small")); /* every row non-zero: stored whole */
    CHECK(fl__st_meta_get(&meta, "emb@height") && !strcmp(fl__st_meta_get(&meta, "emb@height"), "50000"));
    for (int i = 0; i < n; i++)
        if (!strcmp(names[i], "emb@ids"))
            CHECK_EQ_INT(fl_tensor_dim(ts[i], 0), USED + 2); /* and rows 17 (NaN) and H - 1 (-0.0) */
    fl__st_meta_free(&meta);
    fl_io_free_tensors(names, ts, n);
    /* loading rebuilds the table bit for bit */
    fl_exe *e2 = fl_exe_create(NULL);
    fl_prog *q;
    char **fd, **ft;
    int nfd, nft;
    CHECK_OK(fl_io_load_inference_model(e2, DIR_, &q, &fd, &nfd, &ft, &nft));
    const fl_tensor *a = fl_scope_find(fl_exe_scope(m.e), "emb"), *b = fl_scope_find(fl_exe_scope(e2), "emb");
    CHECK(b && fl_tensor_ndim(b) == 2 && fl_tensor_dim(b, 0) == H && fl_tensor_dim(b, 1) == DIM);
    CHECK(memcmp(fl_tensor_cdata(a), fl_tensor_cdata(b), fl_tensor_nbytes(a)) == 0);
    const fl_tensor *s1 = fl_scope_find(fl_exe_scope(m.e), "small"), *s2 = fl_scope_find(fl_exe_scope(e2), "small");
    CHECK(s2 && memcmp(fl_tensor_cdata(s1), fl_tensor_cdata(s2), fl_tensor_nbytes(s1)) == 0);
    /* and the model scores the same */
    int64_t iv[4] = {13, 7932, 40000, H - 1}, iv2[4] = {1, 2, 3, 9};
    fl_tensor *x = ids_batch(iv, 4), *x2 = ids_batch(iv2, 4);
    fl_feed feed[2] = {{"ids", x}, {"ids2", x2}};
    fl_tensor *o1, *o2;
    const char *fetch[1] = {ft[0]};
    fl_prog *test = fl_prog_clone(m.p, 1);
    CHECK_OK(fl_exe_run(m.e, test, feed, 2, fetch, 1, &o1));
    CHECK_OK(fl_exe_run(e2, q, feed, 2, fetch, 1, &o2));
    CHECK(fl_tensor_nbytes(o1) == fl_tensor_nbytes(o2) &&
          memcmp(fl_tensor_cdata(o1), fl_tensor_cdata(o2), fl_tensor_nbytes(o1)) == 0);
    fl_tensor_free(x);
    fl_tensor_free(x2);
    fl_prog_free(test);
    fl_prog_free(q);
    fl_io_free_names(fd, nfd);
    fl_io_free_names(ft, nft);
    fl_exe_free(e2);
    /* checkpoints (persistables) stay whole */
    CHECK_OK(fl_io_save_persistables(m.e, DIR_, m.p));
    CHECK(file_size(path_in("persistables.safetensors")) > dense);
    model_free(&m);
    cleanup();
}

/* Python with NumPy rebuilds the table from params.safetensors alone, equal bit for bit to
 * the whole table written next to it. */
TEST(sparse_table_reads_in_numpy)
{
    const char *py = NULL;
    static const char *const cands[] = {"python3", "/usr/bin/python3"};
    for (int i = 0; i < 2 && !py; i++) {
        char c[128];
        snprintf(c, sizeof c, "%s -c 'import numpy' >/dev/null 2>&1", cands[i]);
        if (system(c) == 0) py = cands[i];
    }
    if (!py) {
        TSKIP("no python3 with numpy (install python3-numpy)");
    }
    th_mktemp(DIR_, sizeof DIR_, "fl_iorows");
    model m = build();
    const char *feeds[] = {"ids", "ids2"};
    CHECK_OK(fl_io_save_inference_model(m.e, DIR_, feeds, 2, &m.pred, 1, m.p));
    const char *nm[1] = {"emb"};
    const fl_tensor *tv[1] = {fl_scope_find(fl_exe_scope(m.e), "emb")};
    CHECK_OK(fl_io_write_safetensors(path_in("whole.safetensors"), nm, tv, 1));
    const char *src = "import json, struct, sys\n"
                      "import numpy as np\n"
                      "def load(path):\n"
                      "    raw = open(path, 'rb').read()\n"
                      "    (n,) = struct.unpack('<Q', raw[:8])\n"
                      "    hdr = json.loads(raw[8:8 + n])\n"
                      "    dt = {'F32': '<f4', 'I64': '<i8'}\n"
                      "    buf = raw[8 + n:]\n"
                      "    out = {k: np.frombuffer(buf[e['data_offsets'][0]:e['data_offsets'][1]], dt[e['dtype']])"
                      ".reshape(e['shape']) for k, e in hdr.items() if k != '__metadata__'}\n"
                      "    return out, hdr['__metadata__']\n"
                      "t, meta = load(sys.argv[1])\n"
                      "ids, rows = t['emb@ids'], t['emb@rows']\n"
                      "emb = np.zeros((int(meta['emb@height']), rows.shape[1]), rows.dtype)\n"
                      "emb[ids] = rows\n"
                      "whole, _ = load(sys.argv[2])\n"
                      "assert emb.shape == whole['emb'].shape, (emb.shape, whole['emb'].shape)\n"
                      "assert (emb.view('<u4') == whole['emb'].view('<u4')).all()\n"
                      "try:\n"
                      "    from safetensors.numpy import load_file\n"
                      "except ImportError:\n"
                      "    print('checked with numpy only')\n"
                      "else:\n"
                      "    f = load_file(sys.argv[1])\n"
                      "    assert (f['emb@ids'] == ids).all()\n"
                      "    print('checked with safetensors.numpy too')\n"
                      "print('rebuilt', emb.shape, 'from', len(ids), 'rows')\n";
    FILE *f = fopen(path_in("check.py"), "w");
    CHECK(f);
    fputs(src, f);
    fclose(f);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s %s %s %s", py, path_in("check.py"), path_in("params.safetensors"),
             path_in("whole.safetensors"));
    fflush(stdout);
    CHECK_EQ_INT(system(cmd), 0);
    model_free(&m);
    cleanup();
}

/* Rewrites params.safetensors with the ids changed by `edit` (or NULL: NAME@rows dropped),
 * then loads the model: the error names the file and `want`; the scope is untouched. */
static void corrupt(void (*edit)(int64_t *ids, int64_t n), const char *want)
{
    const char *pp = path_in("params.safetensors");
    char **names;
    fl_tensor **ts;
    int n;
    fl__st_meta meta;
    CHECK_OK(fl__st_read(pp, &names, &ts, &n, &meta));
    int keep = n;
    for (int i = 0; i < n; i++) {
        if (!strcmp(names[i], "emb@ids") && edit) edit(fl_tensor_data(ts[i]), fl_tensor_dim(ts[i], 0));
        if (!strcmp(names[i], "emb@rows") && !edit) {
            fl_tensor *t = ts[i];
            char *s = names[i];
            ts[i] = ts[n - 1];
            names[i] = names[n - 1];
            ts[n - 1] = t;
            names[n - 1] = s;
            keep = n - 1;
        }
    }
    CHECK_OK(fl__st_write(pp, (const char *const *)names, (const fl_tensor *const *)ts, keep,
                          (const char *const *)meta.keys, (const char *const *)meta.vals, meta.n));
    fl__st_meta_free(&meta);
    fl_io_free_tensors(names, ts, n);
    fl_exe *e = fl_exe_create(NULL);
    fl_prog *q = NULL;
    char **fd, **ft;
    int nfd, nft;
    CHECK(fl_io_load_inference_model(e, DIR_, &q, &fd, &nfd, &ft, &nft) == FL_ECORRUPT);
    CHECK_STR_HAS(fl_last_error(), "params.safetensors");
    CHECK_STR_HAS(fl_last_error(), want);
    CHECK(q == NULL && fl_scope_find(fl_exe_scope(e), "emb") == NULL);
    fl_exe_free(e);
}

static void id_too_big(int64_t *ids, int64_t n) { ids[n / 2] = H; }
static void id_negative(int64_t *ids, int64_t n) { ids[n - 1] = -1; }
static void ids_swapped(int64_t *ids, int64_t n)
{
    (void)n;
    int64_t t = ids[1];
    ids[1] = ids[2];
    ids[2] = t;
}

TEST(sparse_table_bad_ids_are_errors)
{
    th_mktemp(DIR_, sizeof DIR_, "fl_iorows");
    model m = build();
    const char *feeds[] = {"ids", "ids2"};
    CHECK_OK(fl_io_save_inference_model(m.e, DIR_, feeds, 2, &m.pred, 1, m.p));
    corrupt(id_too_big, "id 50000 (entry #151 of 'emb@ids') is out of range [0, 50000)");
    CHECK_OK(fl_io_save_inference_model(m.e, DIR_, feeds, 2, &m.pred, 1, m.p));
    corrupt(id_negative, "id -1 (entry #301 of 'emb@ids') is out of range");
    CHECK_OK(fl_io_save_inference_model(m.e, DIR_, feeds, 2, &m.pred, 1, m.p));
    corrupt(ids_swapped, "ids must be ascending");
    CHECK_OK(fl_io_save_inference_model(m.e, DIR_, feeds, 2, &m.pred, 1, m.p));
    corrupt(NULL, "tensor 'emb@rows' is missing");
    model_free(&m);
    cleanup();
}

TEST_MAIN(T(sparse_table_round_trip_is_bit_exact), T(sparse_table_reads_in_numpy), T(sparse_table_bad_ids_are_errors))
