/*
 * simnet.c - simnet-bow (see fleet/models.h): the builder, its dataset and the order-rate
 * evaluation.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fleet/models.h"
#include "../base/base_internal.h"
#include "models_internal.h"

fl_model_simnet_config fl_model_simnet_default(void)
{
    fl_model_simnet_config c;
    memset(&c, 0, sizeof c);
    c.dict_dim = 1451594;
    c.emb_dim = 128;
    c.hid_dim = 128;
    c.margin = 0.1f;
    c.is_sparse = 1;
    return c;
}

static int check_cfg(const fl_model_simnet_config *c)
{
    if (c->dict_dim < 1) return fl__err(FL_EINVAL, "simnet: dict_dim must be >= 1, got %lld", (long long)c->dict_dim);
    if (c->emb_dim < 1) return fl__err(FL_EINVAL, "simnet: emb_dim must be >= 1, got %d", c->emb_dim);
    if (c->hid_dim < 1) return fl__err(FL_EINVAL, "simnet: hid_dim must be >= 1, got %d", c->hid_dim);
    if (!(c->margin >= 0 && c->margin <= 2)) return fl__err(FL_EINVAL, "simnet: margin must be in [0, 2]");
    return FL_OK;
}

/* bag of words -> shared embedding -> sum pool -> softsign -> fc (weight w, bias b) */
static fl_var *tower(fl_var *ids, const fl_model_simnet_config *c, const char *w, const char *b)
{
    fl_embedding_attr ea;
    memset(&ea, 0, sizeof ea);
    ea.is_sparse = c->is_sparse;
    ea.is_distributed = c->is_distributed;
    ea.param.name = "__emb__";
    ea.param.init = fl_init_uniform(-0.1f, 0.1f);
    fl_var *emb = fl_layer_embedding(ids, c->dict_dim, c->emb_dim, &ea);
    fl_var *ss = fl_layer_softsign(fl_layer_sequence_pool(emb, "sum"));
    fl_fc_attr fa;
    memset(&fa, 0, sizeof fa);
    fa.weight.name = w;
    fa.weight.init = fl_init_xavier(0);
    fa.bias.name = b;
    return fl_layer_fc_ex(FL_VARS(ss), c->hid_dim, NULL, &fa);
}

int fl_model_simnet_build(fl_prog *p, const fl_model_simnet_config *cfg, fl_model_simnet *m)
{
    if (!p || !cfg || !m) return fl__err(FL_EINVAL, "fl_model_simnet_build: program, config or output is NULL");
    memset(m, 0, sizeof *m);
    FL_CHECK(check_cfg(cfg));
    const int64_t one[1] = {1};
    m->query = fl_layer_data(p, "query_ids", 1, one, FL_INT64, 1);
    m->pos_title = fl_layer_data(p, "pos_title_ids", 1, one, FL_INT64, 1);
    m->neg_title = fl_layer_data(p, "neg_title_ids", 1, one, FL_INT64, 1);
    fl_var *q = tower(m->query, cfg, "__q_fc__", "__q_fc_b__");
    fl_var *pt = tower(m->pos_title, cfg, "__fc__", "__fc_b__");
    fl_var *nt = tower(m->neg_title, cfg, "__fc__", "__fc_b__");
    m->cos_pos = fl_layer_cos_sim(q, pt);
    m->cos_neg = fl_layer_cos_sim(q, nt);
    /* max(0, margin - cos_pos + cos_neg): relu of (cos_neg - cos_pos) + margin */
    fl_var *diff = fl_layer_elementwise_sub(m->cos_neg, m->cos_pos, -1);
    m->loss = fl_layer_mean(fl_layer_relu(fl_layer_scale(diff, 1.0f, cfg->margin, 1)));
    if (fl_prog_status(p) != FL_OK) return fl__err(fl_prog_status(p), "simnet: %s", fl_prog_error(p));
    m->use_var[0] = m->query, m->use_var[1] = m->pos_title, m->use_var[2] = m->neg_title;
    m->nuse_var = 3;
    return FL_OK;
}

fl_dataset *fl__model_dataset(fl_var *const *use_var, int n, const char *kind, int batch_size, int thread,
                              const char *const *files, int nfiles)
{
    fl_dataset *ds = fl_dataset_create(kind ? kind : "QueueDataset");
    if (!ds) return NULL;
    int st = fl_dataset_set_batch_size(ds, batch_size);
    if (st == FL_OK) st = fl_dataset_set_thread(ds, thread);
    if (st == FL_OK) st = fl_dataset_set_use_var(ds, use_var, n);
    if (st == FL_OK) st = fl_dataset_set_format(ds, "multislot");
    if (st == FL_OK) st = fl_dataset_set_filelist(ds, files, nfiles);
    if (st == FL_OK && kind && !strcmp(kind, "InMemoryDataset")) st = fl_dataset_load_into_memory(ds);
    if (st != FL_OK) {
        fl_dataset_free(ds);
        return NULL;
    }
    return ds;
}

fl_dataset *fl_model_simnet_dataset(const fl_model_simnet *m, const char *kind, int batch_size, int thread,
                                    const char *const *files, int nfiles)
{
    if (!m || !m->nuse_var) {
        fl__err(FL_EINVAL, "fl_model_simnet_dataset: model is NULL or not built");
        return NULL;
    }
    return fl__model_dataset(m->use_var, m->nuse_var, kind, batch_size, thread, files, nfiles);
}

/* Runs test once per batch of ds (one reader thread), feeding the batch's slots; calls
 * fn(user, fetched) after each run. */
int fl__model_eval_loop(fl_exe *exe, fl_prog *test, fl_dataset *ds, const char *const *fetch, int nfetch,
                        int (*fn)(void *user, fl_tensor **out), void *user)
{
    /* an executor of its own on exe's scope: its cached plan of test goes with it, before the
     * caller frees test (exe would keep a plan pointing into the freed program) */
    fl_exe *ev = fl_exe_create(fl_exe_scope(exe));
    fl_data_batch *b = ev ? fl_data_batch_create(ds) : NULL;
    if (!b) {
        fl_exe_free(ev);
        return fl_last_status();
    }
    int st = fl_dataset_begin(ds), r = 0;
    const int ns = fl_data_batch_num_slots(b);
    fl_feed feed[16];
    if (ns > 16 || nfetch > 8) st = fl__err(FL_EINVAL, "model eval: %d slots and %d fetches, at most 16 and 8", ns, nfetch);
    while (st == FL_OK && (r = fl_dataset_next(ds, 0, b)) > 0) {
        for (int i = 0; i < ns; i++) feed[i] = (fl_feed){fl_data_batch_name(b, i), fl_data_batch_tensor(b, i)};
        fl_tensor *out[8];
        st = fl_exe_run(ev, test, feed, ns, fetch, nfetch, out);
        if (st == FL_OK) st = fn(user, out);
    }
    if (st == FL_OK && r < 0) st = r;
    int e = fl_dataset_end(ds);
    if (st == FL_OK) st = e;
    fl_data_batch_free(b);
    fl_exe_free(ev);
    return st;
}

typedef struct {
    double score;
    int64_t n;
} order_acc;

static int count_order(void *user, fl_tensor **out)
{
    order_acc *a = user;
    const int64_t n = fl_tensor_numel(out[0]);
    if (fl_tensor_numel(out[1]) != n) return fl__err(FL_EINVAL, "simnet eval: cos_pos and cos_neg differ in size");
    const float *p = fl_tensor_cdata(out[0]), *q = fl_tensor_cdata(out[1]);
    for (int64_t i = 0; i < n; i++) a->score += p[i] > q[i] ? 1.0 : p[i] == q[i] ? 0.5 : 0.0;
    a->n += n;
    return FL_OK;
}

int fl_model_simnet_eval(fl_exe *exe, fl_prog *test, const fl_model_simnet *m, const char *const *files, int nfiles,
                         double *order_rate, int64_t *pairs)
{
    if (!exe || !test || !m || !m->cos_pos || !order_rate)
        return fl__err(FL_EINVAL, "fl_model_simnet_eval: executor, program, model or order_rate is NULL");
    fl_dataset *ds = fl_model_simnet_dataset(m, "QueueDataset", 256, 1, files, nfiles);
    if (!ds) return fl_last_status();
    const char *fetch[2] = {fl_var_name(m->cos_pos), fl_var_name(m->cos_neg)};
    order_acc a = {0, 0};
    int st = fl__model_eval_loop(exe, test, ds, fetch, 2, count_order, &a);
    fl_dataset_free(ds);
    if (st != FL_OK) return st;
    if (!a.n) return fl__err(FL_EINVAL, "simnet eval: the %d test file(s) hold no triple", nfiles);
    *order_rate = a.score / (double)a.n;
    if (pairs) *pairs = a.n;
    return FL_OK;
}
