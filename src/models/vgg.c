/*
 * vgg.c - VGG networks (Simonyan and Zisserman's configurations A, B, D, E: VGG-11, 13, 16,
 * 19), as the VGG16 of Fleet's collective benchmark (benchmark/paddle/vgg_benchmark.py and its
 * models/vgg.py; see fleet/models.h).
 */
#include <string.h>

#include "fleet/models.h"
#include "../base/base_internal.h"

/* Convolutions per stage of each depth (the 5 stages have base x 1, 2, 4, 8, 8 filters). */
/* clang-format off */
static const struct { int depth, convs[5]; } named_depths[] = {
    {11, {1, 1, 2, 2, 2}},
    {13, {2, 2, 2, 2, 2}},
    {16, {2, 2, 3, 3, 3}},
    {19, {2, 2, 4, 4, 4}},
};
/* clang-format on */
#define NDEPTHS ((int)(sizeof named_depths / sizeof named_depths[0]))

fl_model_vgg_config fl_model_vgg16(void)
{
    fl_model_vgg_config c;
    memset(&c, 0, sizeof c);
    c.input_name = "img";
    c.label_name = "label";
    c.channels = 3;
    c.height = c.width = 224;
    c.depth = 16;
    c.base_filters = 64;
    c.fc_dim = 4096;
    c.dropout = 0.5f;
    c.num_classes = 1000;
    return c;
}

static int check_cfg(const fl_model_vgg_config *c, const int **convs)
{
    if (!c->input_name || !*c->input_name || !c->label_name || !*c->label_name)
        return fl__err(FL_EINVAL, "vgg: input_name and label_name must be non-empty");
    if (c->channels < 1 || c->height < 32 || c->width < 32)
        return fl__err(FL_EINVAL, "vgg: channels must be >= 1 and height, width >= 32 (five 2x2 max pools), got %d, %d, %d",
                       c->channels, c->height, c->width);
    if (c->base_filters < 1 || c->fc_dim < 1)
        return fl__err(FL_EINVAL, "vgg: base_filters and fc_dim must be >= 1, got %d and %d", c->base_filters, c->fc_dim);
    if (!(c->dropout >= 0 && c->dropout < 1))
        return fl__err(FL_EINVAL, "vgg: dropout must be in [0, 1), got %g", (double)c->dropout);
    if (c->num_classes < 2) return fl__err(FL_EINVAL, "vgg: num_classes must be >= 2, got %d", c->num_classes);
    for (int i = 0; i < NDEPTHS; i++)
        if (named_depths[i].depth == c->depth) {
            *convs = named_depths[i].convs;
            return FL_OK;
        }
    return fl__err(FL_EINVAL, "vgg: depth must be 11, 13, 16 or 19, got %d", c->depth);
}

int fl_model_vgg_build(fl_prog *p, const fl_model_vgg_config *cfg, fl_model_vgg *m)
{
    if (!p || !cfg || !m) return fl__err(FL_EINVAL, "fl_model_vgg_build: program, config or output is NULL");
    memset(m, 0, sizeof *m);
    const int *convs = NULL;
    FL_CHECK(check_cfg(cfg, &convs));
    const int64_t shape[3] = {cfg->channels, cfg->height, cfg->width};
    m->input = fl_layer_data(p, cfg->input_name, 3, shape, FL_FLOAT32, 0);
    m->label = fl_layer_data(p, cfg->label_name, 1, (const int64_t[]){1}, FL_INT64, 0);
    fl_var *h = m->input;
    fl_conv2d_attr a;
    memset(&a, 0, sizeof a);
    a.padding[0] = a.padding[1] = 1;
    for (int s = 0; s < 5; s++) {
        const int filters = cfg->base_filters * (s < 4 ? 1 << s : 8);
        for (int k = 0; k < convs[s]; k++) h = fl_layer_conv2d(h, filters, 3, 3, "relu", &a);
        h = fl_layer_pool2d(h, 2, "max", 2, 0, 0, 1);
    }
    for (int k = 0; k < 2; k++) {
        h = fl_layer_fc(FL_VARS(h), cfg->fc_dim, "relu");
        if (cfg->dropout > 0) h = fl_layer_dropout(h, cfg->dropout, "downgrade_in_infer");
    }
    m->predict = fl_layer_fc(FL_VARS(h), cfg->num_classes, "softmax");
    m->loss = fl_layer_mean(fl_layer_cross_entropy(m->predict, m->label));
    if (fl_prog_status(p) != FL_OK) return fl__err(fl_prog_status(p), "vgg: %s", fl_prog_error(p));
    return FL_OK;
}
