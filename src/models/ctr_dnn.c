/*
 * ctr_dnn.c - Paddle's CTR-DNN (see fleet/models.h).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "fleet/models.h"
#include "../base/base_internal.h"

fl_model_ctr_dnn_config fl_model_ctr_dnn_default(void)
{
    fl_model_ctr_dnn_config c;
    memset(&c, 0, sizeof c);
    c.sparse_feature_dim = 1000001;
    c.embedding_size = 10;
    c.num_sparse_slots = 26;
    c.dense_dim = 13;
    c.is_sparse = 1;
    c.nhidden = 3;
    for (int i = 0; i < 3; i++) c.hidden[i] = 400;
    return c;
}

static int check_cfg(const fl_model_ctr_dnn_config *c)
{
    if (c->sparse_feature_dim < 1) return fl__err(FL_EINVAL, "ctr_dnn: sparse_feature_dim must be >= 1");
    if (c->embedding_size < 1) return fl__err(FL_EINVAL, "ctr_dnn: embedding_size must be >= 1");
    if (c->num_sparse_slots < 1 || c->num_sparse_slots > FL_MODEL_CTR_MAX_SLOTS)
        return fl__err(FL_EINVAL, "ctr_dnn: num_sparse_slots must be in [1, %d], got %d", FL_MODEL_CTR_MAX_SLOTS,
                       c->num_sparse_slots);
    if (c->dense_dim < 0) return fl__err(FL_EINVAL, "ctr_dnn: dense_dim must be >= 0");
    if (c->nhidden < 0 || c->nhidden > FL_MODEL_CTR_MAX_LAYERS)
        return fl__err(FL_EINVAL, "ctr_dnn: nhidden must be in [0, %d], got %d", FL_MODEL_CTR_MAX_LAYERS, c->nhidden);
    for (int i = 0; i < c->nhidden; i++)
        if (c->hidden[i] < 1) return fl__err(FL_EINVAL, "ctr_dnn: hidden[%d] must be >= 1, got %d", i, c->hidden[i]);
    return FL_OK;
}

/* fc with Paddle's Normal(0, 1/sqrt(fan_in)) weights. */
static fl_var *fc(fl_var *x, int64_t fan_in, int size, const char *act)
{
    fl_fc_attr a;
    memset(&a, 0, sizeof a);
    a.weight.init = fl_init_normal(0.0f, (float)(1.0 / sqrt((double)fan_in)));
    return fl_layer_fc_ex(FL_VARS(x), size, act, &a);
}

int fl_model_ctr_dnn_build(fl_prog *p, const fl_model_ctr_dnn_config *cfg, fl_model_ctr_dnn *m)
{
    if (!p || !cfg || !m) return fl__err(FL_EINVAL, "fl_model_ctr_dnn_build: program, config or output is NULL");
    FL_CHECK(check_cfg(cfg));
    memset(m, 0, sizeof *m);
    const int ns = cfg->num_sparse_slots;
    fl_var *parts[FL_MODEL_CTR_MAX_SLOTS + 1];
    int np = 0;
    if (cfg->dense_dim > 0)
        m->dense_input = fl_layer_data(p, "dense_input", 1, (const int64_t[]){cfg->dense_dim}, FL_FLOAT32, 0);
    fl_embedding_attr ea;
    memset(&ea, 0, sizeof ea);
    ea.is_sparse = cfg->is_sparse;
    ea.is_distributed = cfg->is_distributed;
    ea.param.name = "SparseFeatFactors";
    ea.param.init = fl_init_uniform(-1.0f, 1.0f);
    for (int i = 0; i < ns; i++) {
        char name[16];
        snprintf(name, sizeof name, "C%d", i + 1);
        m->sparse[i] = fl_layer_data(p, name, 1, (const int64_t[]){1}, FL_INT64, 1);
        fl_var *emb = fl_layer_embedding(m->sparse[i], cfg->sparse_feature_dim, cfg->embedding_size, &ea);
        parts[np++] = fl_layer_sequence_pool(emb, "sum");
    }
    if (m->dense_input) parts[np++] = m->dense_input;
    m->label = fl_layer_data(p, "label", 1, (const int64_t[]){1}, FL_INT64, 0);
    fl_var *x = fl_layer_concat(parts, np, 1);
    int64_t width = (int64_t)ns * cfg->embedding_size + cfg->dense_dim;
    for (int i = 0; i < cfg->nhidden; i++) {
        x = fc(x, width, cfg->hidden[i], "relu");
        width = cfg->hidden[i];
    }
    m->predict = fc(x, width, 2, "softmax");
    fl_var *cost = fl_layer_cross_entropy(m->predict, m->label);
    m->loss = cfg->loss_mean ? fl_layer_mean(cost) : fl_layer_reduce_sum(cost, NULL, 0, 0);
    m->avg_loss = cfg->loss_mean ? m->loss : fl_layer_mean(cost);
    int before = fl_prog_num_vars(p);
    m->auc = fl_layer_auc(m->predict, m->label, 4096, 20, &m->batch_auc);
    for (int i = before; i < fl_prog_num_vars(p) && m->nauc_states < 4; i++) {
        fl_var *v = fl_prog_var_at(p, i);
        if (fl_var_persistable(v)) m->auc_states[m->nauc_states++] = v;
    }
    if (fl_prog_status(p) != FL_OK) return fl__err(fl_prog_status(p), "ctr_dnn: %s", fl_prog_error(p));
    if (m->dense_input) m->use_var[m->nuse_var++] = m->dense_input;
    for (int i = 0; i < ns; i++) m->use_var[m->nuse_var++] = m->sparse[i];
    m->use_var[m->nuse_var++] = m->label;
    return FL_OK;
}
