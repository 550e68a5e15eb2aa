/*
 * resnet.c - residual networks: the CIFAR-style ResNet-6n+2, ResNet-18/34 and the
 * bottleneck ResNet-50/101/152 (see fleet/models.h).
 */
#include <string.h>

#include "fleet/models.h"
#include "../base/base_internal.h"

fl_model_resnet_config fl_model_resnet_default(void)
{
    fl_model_resnet_config c;
    memset(&c, 0, sizeof c);
    c.input_name = "img";
    c.label_name = "label";
    c.channels = 1;
    c.height = c.width = 28;
    c.depth = 20;
    c.base_filters = 16;
    c.num_classes = 10;
    return c;
}

fl_model_resnet_config fl_model_resnet50(void)
{
    fl_model_resnet_config c = fl_model_resnet_default();
    c.channels = 3;
    c.height = c.width = 224;
    c.depth = 50;
    c.base_filters = 64;
    c.imagenet_stem = 1;
    c.num_classes = 1000;
    return c;
}

/* The block layout of a depth: stages, blocks per stage, bottleneck or basic. */
typedef struct {
    int nstage, blocks[4], bottleneck;
} layout;

/* clang-format off */
static const struct { int depth; layout l; } named_depths[] = {
    {18,  {4, {2, 2, 2, 2}, 0}},
    {34,  {4, {3, 4, 6, 3}, 0}},
    {50,  {4, {3, 4, 6, 3}, 1}},
    {101, {4, {3, 4, 23, 3}, 1}},
    {152, {4, {3, 8, 36, 3}, 1}},
};
/* clang-format on */

static int layout_of(int depth, layout *l)
{
    for (size_t i = 0; i < sizeof named_depths / sizeof named_depths[0]; i++)
        if (named_depths[i].depth == depth) {
            *l = named_depths[i].l;
            return FL_OK;
        }
    if (depth >= 8 && (depth - 2) % 6 == 0 && depth <= 1202) {
        int n = (depth - 2) / 6;
        *l = (layout){3, {n, n, n, 0}, 0};
        return FL_OK;
    }
    return fl__err(FL_EINVAL, "resnet: depth must be 6n+2 (8, 14, 20, ...), 18, 34, 50, 101 or 152, got %d", depth);
}

static int check_cfg(const fl_model_resnet_config *c, layout *l)
{
    if (!c->input_name || !*c->input_name || !c->label_name || !*c->label_name)
        return fl__err(FL_EINVAL, "resnet: input_name and label_name must be non-empty");
    if (c->channels < 1 || c->height < 1 || c->width < 1)
        return fl__err(FL_EINVAL, "resnet: channels, height and width must be >= 1, got %d, %d, %d", c->channels, c->height,
                       c->width);
    if (c->base_filters < 1) return fl__err(FL_EINVAL, "resnet: base_filters must be >= 1, got %d", c->base_filters);
    if (c->num_classes < 2) return fl__err(FL_EINVAL, "resnet: num_classes must be >= 2, got %d", c->num_classes);
    if (c->stride_in_1x1 != 0 && c->stride_in_1x1 != 1)
        return fl__err(FL_EINVAL, "resnet: stride_in_1x1 must be 0 or 1, got %d", c->stride_in_1x1);
    FL_CHECK(layout_of(c->depth, l));
    return FL_OK;
}

/* conv (no bias) -> batch_norm [act]. */
static fl_var *conv_bn(fl_var *x, int filters, int k, int stride, const char *act)
{
    fl_conv2d_attr a;
    memset(&a, 0, sizeof a);
    a.stride[0] = a.stride[1] = stride;
    a.padding[0] = a.padding[1] = (k - 1) / 2;
    a.no_bias = 1;
    return fl_layer_batch_norm(fl_layer_conv2d(x, filters, k, k, NULL, &a), act, 0, 0.9f, 1e-5f, NULL);
}

/* One residual block: relu(branch(x) + shortcut(x)); the shortcut projects with a 1x1 conv
 * + batch_norm when the channels or the size change.  A bottleneck strides on its 3x3 (v1.5)
 * or, with stride_in_1x1, on its first 1x1 (v1). */
static fl_var *block(fl_var *x, int in_ch, int filters, int stride, int bottleneck, int stride_in_1x1, int *out_ch)
{
    fl_var *y;
    int out = bottleneck ? filters * 4 : filters;
    if (bottleneck) {
        y = conv_bn(x, filters, 1, stride_in_1x1 ? stride : 1, "relu");
        y = conv_bn(y, filters, 3, stride_in_1x1 ? 1 : stride, "relu");
        y = conv_bn(y, out, 1, 1, NULL);
    } else {
        y = conv_bn(x, filters, 3, stride, "relu");
        y = conv_bn(y, filters, 3, 1, NULL);
    }
    fl_var *shortcut = stride != 1 || in_ch != out ? conv_bn(x, out, 1, stride, NULL) : x;
    *out_ch = out;
    return fl_layer_relu(fl_layer_elementwise_add(y, shortcut, -1));
}

int fl_model_resnet_build(fl_prog *p, const fl_model_resnet_config *cfg, fl_model_resnet *m)
{
    if (!p || !cfg || !m) return fl__err(FL_EINVAL, "fl_model_resnet_build: program, config or output is NULL");
    memset(m, 0, sizeof *m);
    layout l = {0, {0}, 0};
    FL_CHECK(check_cfg(cfg, &l));
    const int64_t shape[3] = {cfg->channels, cfg->height, cfg->width};
    m->input = fl_layer_data(p, cfg->input_name, 3, shape, FL_FLOAT32, 0);
    m->label = fl_layer_data(p, cfg->label_name, 1, (const int64_t[]){1}, FL_INT64, 0);
    fl_var *h;
    if (cfg->imagenet_stem) {
        h = conv_bn(m->input, cfg->base_filters, 7, 2, "relu");
        h = fl_layer_pool2d(h, 3, "max", 2, 1, 0, 1);
    } else {
        h = conv_bn(m->input, cfg->base_filters, 3, 1, "relu");
    }
    int ch = cfg->base_filters;
    for (int s = 0; s < l.nstage; s++)
        for (int b = 0; b < l.blocks[s]; b++)
            h = block(h, ch, cfg->base_filters << s, s > 0 && b == 0 ? 2 : 1, l.bottleneck, cfg->stride_in_1x1, &ch);
    h = fl_layer_pool2d(h, 1, "avg", 1, 0, 1, 1);
    m->predict = fl_layer_fc(FL_VARS(h), cfg->num_classes, "softmax");
    m->loss = fl_layer_mean(fl_layer_cross_entropy(m->predict, m->label));
    if (fl_prog_status(p) != FL_OK) return fl__err(fl_prog_status(p), "resnet: %s", fl_prog_error(p));
    return FL_OK;
}
