/*
 * deepfm.c - DeepFM and Wide&Deep on the CTR-DNN inputs (see fleet/models.h).  Both share
 * the inputs, the first-order (wide) term, the DNN and the two-class head; DeepFM adds the
 * FM second-order term.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "fleet/models.h"
#include "../base/base_internal.h"

fl_model_ctr_config fl_model_deepfm_default(void)
{
    fl_model_ctr_config c = fl_model_ctr_dnn_default();
    return c;
}

fl_model_ctr_config fl_model_wide_deep_default(void)
{
    fl_model_ctr_config c = fl_model_ctr_dnn_default();
    c.nhidden = 2;
    c.hidden[0] = 256;
    c.hidden[1] = 128;
    c.hidden[2] = 0;
    return c;
}

static int check_cfg(const char *who, const fl_model_ctr_config *c)
{
    if (c->sparse_feature_dim < 1) return fl__err(FL_EINVAL, "%s: sparse_feature_dim must be >= 1", who);
    if (c->embedding_size < 1) return fl__err(FL_EINVAL, "%s: embedding_size must be >= 1", who);
    if (c->num_sparse_slots < 1 || c->num_sparse_slots > FL_MODEL_CTR_MAX_SLOTS)
        return fl__err(FL_EINVAL, "%s: num_sparse_slots must be in [1, %d], got %d", who, FL_MODEL_CTR_MAX_SLOTS,
                       c->num_sparse_slots);
    if (c->dense_dim < 0) return fl__err(FL_EINVAL, "%s: dense_dim must be >= 0", who);
    if (c->nhidden < 0 || c->nhidden > FL_MODEL_CTR_MAX_LAYERS)
        return fl__err(FL_EINVAL, "%s: nhidden must be in [0, %d], got %d", who, FL_MODEL_CTR_MAX_LAYERS, c->nhidden);
    for (int i = 0; i < c->nhidden; i++)
        if (c->hidden[i] < 1) return fl__err(FL_EINVAL, "%s: hidden[%d] must be >= 1, got %d", who, i, c->hidden[i]);
    return FL_OK;
}

/* fc with Normal(0, 1/sqrt(fan_in)) weights, as CTR-DNN's. */
static fl_var *fc(fl_var *x, int64_t fan_in, int size, const char *act)
{
    fl_fc_attr a;
    memset(&a, 0, sizeof a);
    a.weight.init = fl_init_normal(0.0f, (float)(1.0 / sqrt((double)fan_in)));
    return fl_layer_fc_ex(FL_VARS(x), size, act, &a);
}

/* The parts both models use: inputs, the slot vectors v_i, the wide term and the DNN. */
typedef struct {
    fl_var *v[FL_MODEL_CTR_MAX_SLOTS]; /* [N, embedding_size] per slot */
    fl_var *wide;                      /* [N, 1] */
    fl_var *deep;                      /* [N, 1] */
} ctr_parts;

static fl_embedding_attr table(const fl_model_ctr_config *c, const char *name)
{
    fl_embedding_attr ea;
    memset(&ea, 0, sizeof ea);
    ea.is_sparse = c->is_sparse;
    ea.is_distributed = c->is_distributed;
    ea.param.name = name;
    ea.param.init = fl_init_truncated_normal(0.0f, 0.1f);
    return ea;
}

static void build_parts(fl_prog *p, const fl_model_ctr_config *c, fl_model_ctr *m, ctr_parts *pt)
{
    const int ns = c->num_sparse_slots;
    fl_embedding_attr ev = table(c, "SparseFeatFactors"), ew = table(c, "FirstOrderWeights");
    fl_var *first[FL_MODEL_CTR_MAX_SLOTS], *deep_in[FL_MODEL_CTR_MAX_SLOTS + 1];
    if (c->dense_dim > 0)
        m->dense_input = fl_layer_data(p, "dense_input", 1, (const int64_t[]){c->dense_dim}, FL_FLOAT32, 0);
    for (int i = 0; i < ns; i++) {
        char name[16];
        snprintf(name, sizeof name, "C%d", i + 1);
        m->sparse[i] = fl_layer_data(p, name, 1, (const int64_t[]){1}, FL_INT64, 1);
        pt->v[i] = fl_layer_sequence_pool(fl_layer_embedding(m->sparse[i], c->sparse_feature_dim, c->embedding_size, &ev),
                                          "sum");
        first[i] = fl_layer_sequence_pool(fl_layer_embedding(m->sparse[i], c->sparse_feature_dim, 1, &ew), "sum");
        deep_in[i] = pt->v[i];
    }
    m->label = fl_layer_data(p, "label", 1, (const int64_t[]){1}, FL_INT64, 0);
    const int one = 1;
    pt->wide = fl_layer_reduce_sum(fl_layer_concat(first, ns, 1), &one, 1, 1);
    if (m->dense_input) pt->wide = fl_layer_elementwise_add(pt->wide, fc(m->dense_input, c->dense_dim, 1, NULL), -1);
    int np = ns;
    if (m->dense_input) deep_in[np++] = m->dense_input;
    fl_var *x = fl_layer_concat(deep_in, np, 1);
    int64_t width = (int64_t)ns * c->embedding_size + c->dense_dim;
    for (int i = 0; i < c->nhidden; i++) {
        x = fc(x, width, c->hidden[i], "relu");
        width = c->hidden[i];
    }
    pt->deep = fc(x, width, 1, NULL);
}

/* FM: 0.5 * sum_k ((sum_i v_ik)^2 - sum_i v_ik^2) -> [N, 1]. */
static fl_var *fm_second_order(const fl_model_ctr_config *c, ctr_parts *pt)
{
    const int one = 1;
    fl_var *all = fl_layer_reshape(fl_layer_concat(pt->v, c->num_sparse_slots, 1), 3,
                                   (const int64_t[]){0, c->num_sparse_slots, c->embedding_size});
    fl_var *sum = fl_layer_reduce_sum(all, &one, 1, 0);
    fl_var *sum_sq = fl_layer_elementwise_mul(sum, sum, -1);
    fl_var *sq_sum = fl_layer_reduce_sum(fl_layer_elementwise_mul(all, all, -1), &one, 1, 0);
    fl_var *d = fl_layer_reduce_sum(fl_layer_elementwise_sub(sum_sq, sq_sum, -1), &one, 1, 1);
    return fl_layer_scale(d, 0.5f, 0.0f, 1);
}

/* Logit z [N, 1] -> two-class logits [0, z], predict, loss, AUC and the dataset slots. */
static int finish(fl_prog *p, const char *who, const fl_model_ctr_config *c, fl_model_ctr *m, fl_var *z)
{
    fl_var *zero = fl_layer_scale(z, 0.0f, 0.0f, 1);
    fl_var *logits = fl_layer_concat(FL_VARS(zero, z), 1);
    fl_var *cost = fl_layer_softmax_with_cross_entropy(logits, m->label);
    m->predict = fl_layer_softmax(logits);
    m->loss = c->loss_mean ? fl_layer_mean(cost) : fl_layer_reduce_sum(cost, NULL, 0, 0);
    int before = fl_prog_num_vars(p);
    m->auc = fl_layer_auc(m->predict, m->label, 4096, 20, &m->batch_auc);
    for (int i = before; i < fl_prog_num_vars(p) && m->nauc_states < 4; i++) {
        fl_var *v = fl_prog_var_at(p, i);
        if (fl_var_persistable(v)) m->auc_states[m->nauc_states++] = v;
    }
    if (fl_prog_status(p) != FL_OK) return fl__err(fl_prog_status(p), "%s: %s", who, fl_prog_error(p));
    if (m->dense_input) m->use_var[m->nuse_var++] = m->dense_input;
    for (int i = 0; i < c->num_sparse_slots; i++) m->use_var[m->nuse_var++] = m->sparse[i];
    m->use_var[m->nuse_var++] = m->label;
    return FL_OK;
}

int fl_model_deepfm_build(fl_prog *p, const fl_model_ctr_config *cfg, fl_model_ctr *m)
{
    if (!p || !cfg || !m) return fl__err(FL_EINVAL, "fl_model_deepfm_build: program, config or output is NULL");
    memset(m, 0, sizeof *m);
    FL_CHECK(check_cfg("deepfm", cfg));
    ctr_parts pt;
    build_parts(p, cfg, m, &pt);
    fl_var *z = fl_layer_elementwise_add(fl_layer_elementwise_add(pt.wide, fm_second_order(cfg, &pt), -1), pt.deep, -1);
    return finish(p, "deepfm", cfg, m, z);
}

int fl_model_wide_deep_build(fl_prog *p, const fl_model_ctr_config *cfg, fl_model_ctr *m)
{
    if (!p || !cfg || !m) return fl__err(FL_EINVAL, "fl_model_wide_deep_build: program, config or output is NULL");
    memset(m, 0, sizeof *m);
    FL_CHECK(check_cfg("wide_deep", cfg));
    ctr_parts pt;
    build_parts(p, cfg, m, &pt);
    return finish(p, "wide_deep", cfg, m, fl_layer_elementwise_add(pt.wide, pt.deep, -1));
}
