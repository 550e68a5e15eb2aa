/*
 * mlp.c - the MLP builder: the quick-start network and the Fashion-MNIST MLP (see
 * fleet/models.h).
 */
#include <stdio.h>
#include <string.h>

#include "fleet/models.h"
#include "../base/base_internal.h"

fl_model_mlp_config fl_model_mlp_default(void)
{
    fl_model_mlp_config c;
    memset(&c, 0, sizeof c);
    c.input_name = "x";
    c.label_name = "y";
    c.input_dim = 32;
    c.nhidden = 2;
    c.hidden[0] = c.hidden[1] = 128;
    c.act = "tanh";
    c.num_classes = 2;
    return c;
}

fl_model_mlp_config fl_model_mlp_fmnist(void)
{
    fl_model_mlp_config c = fl_model_mlp_default();
    c.input_name = "img";
    c.label_name = "label";
    c.input_dim = 28 * 28;
    c.hidden[0] = 512;
    c.hidden[1] = 256;
    c.act = "relu";
    c.num_classes = 10;
    return c;
}

static int check_cfg(const fl_model_mlp_config *c)
{
    if (!c->input_name || !*c->input_name || !c->label_name || !*c->label_name)
        return fl__err(FL_EINVAL, "mlp: input_name and label_name must be non-empty");
    if (c->input_dim < 1) return fl__err(FL_EINVAL, "mlp: input_dim must be >= 1, got %d", c->input_dim);
    if (c->nhidden < 0 || c->nhidden > FL_MODEL_MLP_MAX_LAYERS)
        return fl__err(FL_EINVAL, "mlp: nhidden must be in [0, %d], got %d", FL_MODEL_MLP_MAX_LAYERS, c->nhidden);
    for (int i = 0; i < c->nhidden; i++)
        if (c->hidden[i] < 1) return fl__err(FL_EINVAL, "mlp: hidden[%d] must be >= 1, got %d", i, c->hidden[i]);
    if (c->num_classes < 2) return fl__err(FL_EINVAL, "mlp: num_classes must be >= 2, got %d", c->num_classes);
    if (c->param_prefix && strlen(c->param_prefix) > 64)
        return fl__err(FL_EINVAL, "mlp: param_prefix is longer than 64 characters");
    return FL_OK;
}

/* Layer k (from 1): fc with the automatic parameter names, or <prefix><k>.w / .b. */
static fl_var *fc(const fl_model_mlp_config *c, int k, fl_var *x, int size, const char *act)
{
    if (!c->param_prefix) return fl_layer_fc(FL_VARS(x), size, act);
    char w[80], b[80];
    snprintf(w, sizeof w, "%s%d.w", c->param_prefix, k);
    snprintf(b, sizeof b, "%s%d.b", c->param_prefix, k);
    fl_fc_attr a;
    memset(&a, 0, sizeof a);
    a.weight.name = w;
    a.bias.name = b;
    return fl_layer_fc_ex(FL_VARS(x), size, act, &a);
}

int fl_model_mlp_build(fl_prog *p, const fl_model_mlp_config *cfg, fl_model_mlp *m)
{
    if (!p || !cfg || !m) return fl__err(FL_EINVAL, "fl_model_mlp_build: program, config or output is NULL");
    memset(m, 0, sizeof *m);
    FL_CHECK(check_cfg(cfg));
    m->input = fl_layer_data(p, cfg->input_name, 1, (const int64_t[]){cfg->input_dim}, FL_FLOAT32, 0);
    m->label = fl_layer_data(p, cfg->label_name, 1, (const int64_t[]){1}, FL_INT64, 0);
    fl_var *h = m->input;
    for (int i = 0; i < cfg->nhidden; i++) h = fc(cfg, i + 1, h, cfg->hidden[i], cfg->act);
    m->predict = fc(cfg, cfg->nhidden + 1, h, cfg->num_classes, "softmax");
    m->loss = fl_layer_mean(fl_layer_cross_entropy(m->predict, m->label));
    if (fl_prog_status(p) != FL_OK) return fl__err(fl_prog_status(p), "mlp: %s", fl_prog_error(p));
    return FL_OK;
}
