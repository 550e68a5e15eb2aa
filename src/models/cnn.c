/*
 * cnn.c - the LeNet-style CNN builder, by default the Fashion-MNIST CNN (see
 * fleet/models.h).
 */
#include <string.h>

#include "fleet/models.h"
#include "../base/base_internal.h"

fl_model_cnn_config fl_model_cnn_default(void)
{
    fl_model_cnn_config c;
    memset(&c, 0, sizeof c);
    c.input_name = "img";
    c.label_name = "label";
    c.channels = 1;
    c.height = c.width = 28;
    c.nconv = 2;
    c.filters[0] = 20;
    c.filters[1] = 50;
    c.kernel = 5;
    c.pool = 2;
    c.nhidden = 1;
    c.hidden[0] = 500;
    c.num_classes = 10;
    return c;
}

static int check_cfg(const fl_model_cnn_config *c)
{
    if (!c->input_name || !*c->input_name || !c->label_name || !*c->label_name)
        return fl__err(FL_EINVAL, "cnn: input_name and label_name must be non-empty");
    if (c->channels < 1 || c->height < 1 || c->width < 1)
        return fl__err(FL_EINVAL, "cnn: channels, height and width must be >= 1, got %d, %d, %d", c->channels, c->height,
                       c->width);
    if (c->nconv < 0 || c->nconv > FL_MODEL_CNN_MAX_LAYERS)
        return fl__err(FL_EINVAL, "cnn: nconv must be in [0, %d], got %d", FL_MODEL_CNN_MAX_LAYERS, c->nconv);
    if (c->kernel < 1 || c->pool < 1)
        return fl__err(FL_EINVAL, "cnn: kernel and pool must be >= 1, got %d and %d", c->kernel, c->pool);
    int h = c->height, w = c->width;
    for (int i = 0; i < c->nconv; i++) {
        if (c->filters[i] < 1) return fl__err(FL_EINVAL, "cnn: filters[%d] must be >= 1, got %d", i, c->filters[i]);
        h = (h - c->kernel + 1) / c->pool;
        w = (w - c->kernel + 1) / c->pool;
        if (h < 1 || w < 1)
            return fl__err(FL_EINVAL, "cnn: a %dx%d image is empty after conv block %d (kernel %d, pool %d)", c->height,
                           c->width, i, c->kernel, c->pool);
    }
    if (c->nhidden < 0 || c->nhidden > FL_MODEL_CNN_MAX_LAYERS)
        return fl__err(FL_EINVAL, "cnn: nhidden must be in [0, %d], got %d", FL_MODEL_CNN_MAX_LAYERS, c->nhidden);
    for (int i = 0; i < c->nhidden; i++)
        if (c->hidden[i] < 1) return fl__err(FL_EINVAL, "cnn: hidden[%d] must be >= 1, got %d", i, c->hidden[i]);
    if (c->num_classes < 2) return fl__err(FL_EINVAL, "cnn: num_classes must be >= 2, got %d", c->num_classes);
    return FL_OK;
}

/* conv2d -> [batch_norm] -> relu -> max pool */
static fl_var *conv_pool(const fl_model_cnn_config *c, fl_var *x, int filters)
{
    fl_var *y = fl_layer_conv2d(x, filters, c->kernel, c->kernel, c->batch_norm ? NULL : "relu", NULL);
    if (c->batch_norm) y = fl_layer_batch_norm(y, "relu", 0, 0.9f, 1e-5f, NULL);
    return fl_layer_pool2d(y, c->pool, "max", c->pool, 0, 0, 1);
}

int fl_model_cnn_build(fl_prog *p, const fl_model_cnn_config *cfg, fl_model_cnn *m)
{
    if (!p || !cfg || !m) return fl__err(FL_EINVAL, "fl_model_cnn_build: program, config or output is NULL");
    memset(m, 0, sizeof *m);
    FL_CHECK(check_cfg(cfg));
    const int64_t shape[3] = {cfg->channels, cfg->height, cfg->width};
    m->input = fl_layer_data(p, cfg->input_name, 3, shape, FL_FLOAT32, 0);
    m->label = fl_layer_data(p, cfg->label_name, 1, (const int64_t[]){1}, FL_INT64, 0);
    fl_var *h = m->input;
    for (int i = 0; i < cfg->nconv; i++) h = conv_pool(cfg, h, cfg->filters[i]);
    for (int i = 0; i < cfg->nhidden; i++) h = fl_layer_fc(FL_VARS(h), cfg->hidden[i], "relu");
    m->predict = fl_layer_fc(FL_VARS(h), cfg->num_classes, "softmax");
    m->loss = fl_layer_mean(fl_layer_cross_entropy(m->predict, m->label));
    if (fl_prog_status(p) != FL_OK) return fl__err(fl_prog_status(p), "cnn: %s", fl_prog_error(p));
    return FL_OK;
}
