/*
 * attention.c - the Transformer building blocks of Paddle's model.py (the Transformer and BERT
 * benchmarks): multi-head attention, the position-wise feed-forward network, the pre/post
 * process commands ("a" residual, "n" layer_norm, "d" dropout), an encoder layer and an
 * encoder stack (see fleet/models.h).  Graph only: every block appends fluid layers to the
 * program of its input.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "fleet/models.h"
#include "../base/base_internal.h"

#define NM 256

fl_model_attn_attr fl_model_attn_attr_default(void)
{
    fl_model_attn_attr a;
    memset(&a, 0, sizeof a);
    a.layer_norm_epsilon = 1e-5f;
    return a;
}

static const fl_model_attn_attr *attr_or_default(const fl_model_attn_attr *a, fl_model_attn_attr *buf)
{
    if (a) return a;
    *buf = fl_model_attn_attr_default();
    return buf;
}

static const char *dropout_impl(const fl_model_attn_attr *a)
{
    return a->dropout_implementation ? a->dropout_implementation : "upscale_in_train";
}

/* The program error of x's program as this block's error (or FL_EINVAL when x is NULL). */
static fl_var *block_failed(const char *block, fl_var *x)
{
    fl_prog *p = x ? fl_var_prog(x) : NULL;
    if (p && fl_prog_status(p) != FL_OK) fl__err(fl_prog_status(p), "%s: %s", block, fl_prog_error(p));
    return NULL;
}

/* fc over the last dim of a [N, S, d] input (num_flatten_dims 2), weight "<name><suffix>.w_0"
 * and bias "<name><suffix>.b_0" (Paddle's automatic names when name is empty). */
static fl_var *fc3(fl_var *x, int64_t size, const char *act, const char *name, const char *suffix, int no_bias,
                   const fl_model_attn_attr *a)
{
    char wn[NM], bn[NM];
    fl_fc_attr fa;
    memset(&fa, 0, sizeof fa);
    fa.num_flatten_dims = fl_var_ndim(x) - 1;
    fa.weight.init = a->init;
    fa.no_bias = no_bias;
    if (name && *name) {
        snprintf(wn, sizeof wn, "%s%s.w_0", name, suffix);
        snprintf(bn, sizeof bn, "%s%s.b_0", name, suffix);
        fa.weight.name = wn;
        fa.bias.name = bn;
    }
    return fl_layer_fc_ex(FL_VARS(x), size, act, &fa);
}

static fl_var *dropout(fl_var *x, float rate, const fl_model_attn_attr *a)
{
    return rate > 0 && x ? fl_layer_dropout(x, rate, dropout_impl(a)) : x;
}

/* [N, S, n_head * d] -> [N, n_head, S, d] */
static fl_var *split_heads(fl_var *x, int n_head, int d)
{
    fl_var *r = fl_layer_reshape(x, 4, (const int64_t[]){0, 0, n_head, d});
    return r ? fl_layer_transpose(r, 4, (const int64_t[]){0, 2, 1, 3}) : NULL;
}

/* [N, n_head, S, d] -> [N, S, n_head * d] */
static fl_var *combine_heads(fl_var *x, int n_head, int d)
{
    fl_var *t = fl_layer_transpose(x, 4, (const int64_t[]){0, 2, 1, 3});
    return t ? fl_layer_reshape(t, 3, (const int64_t[]){0, 0, (int64_t)n_head * d}) : NULL;
}

/* attn_bias [N, n_head | 1, Sq, Sk] or [N, Sq, Sk] -> [N, n_head, Sq, Sk]: a rank-3 bias gets
 * its head dim from stack (its Sq, Sk may be unknown at build time), one head is expanded */
static fl_var *bias_over_heads(fl_var *bias, int n_head)
{
    if (fl_var_ndim(bias) == 3 && !(bias = fl_layer_stack(&bias, 1, 1))) return NULL;
    if (fl_var_shape(bias)[1] == 1 && n_head > 1) bias = fl_layer_expand(bias, 4, (const int64_t[]){1, n_head, 1, 1});
    return bias;
}

fl_var *fl_model_multi_head_attention(fl_var *queries, fl_var *keys, fl_var *values, fl_var *attn_bias, int d_key,
                                      int d_value, int d_model, int n_head, float dropout_rate, const char *name,
                                      const fl_model_attn_attr *attr)
{
    static const char *B = "fl_model_multi_head_attention";
    if (!queries) {
        fl__err(FL_EINVAL, "%s: queries is NULL", B);
        return NULL;
    }
    if (d_key < 1 || d_value < 1 || d_model < 1 || n_head < 1) {
        fl__err(FL_EINVAL, "%s: d_key %d, d_value %d, d_model %d and n_head %d must be >= 1", B, d_key, d_value, d_model,
                n_head);
        return NULL;
    }
    if (!(dropout_rate >= 0 && dropout_rate < 1)) {
        fl__err(FL_EINVAL, "%s: dropout_rate must be in [0, 1), got %g", B, (double)dropout_rate);
        return NULL;
    }
    if (!keys) keys = queries;
    if (!values) values = keys;
    fl_var *ins[3] = {queries, keys, values};
    for (int i = 0; i < 3; i++)
        if (fl_var_ndim(ins[i]) != 3) {
            fl__err(FL_EINVAL, "%s: %s '%s' must be [N, S, d] (rank 3, is %d)", B,
                    i ? i == 1 ? "keys" : "values" : "queries", fl_var_name(ins[i]), fl_var_ndim(ins[i]));
            return NULL;
        }
    if (attn_bias && fl_var_ndim(attn_bias) != 3 && fl_var_ndim(attn_bias) != 4) {
        fl__err(FL_EINVAL, "%s: attn_bias '%s' must be [N, n_head or 1, Sq, Sk] or [N, Sq, Sk] (rank %d)", B,
                fl_var_name(attn_bias), fl_var_ndim(attn_bias));
        return NULL;
    }
    if (attn_bias && fl_var_ndim(attn_bias) == 4 && fl_var_shape(attn_bias)[1] != 1 &&
        fl_var_shape(attn_bias)[1] != n_head) {
        fl__err(FL_EINVAL, "%s: attn_bias '%s' has %lld heads, expected 1 or n_head %d", B, fl_var_name(attn_bias),
                (long long)fl_var_shape(attn_bias)[1], n_head);
        return NULL;
    }
    fl_model_attn_attr abuf;
    const fl_model_attn_attr *a = attr_or_default(attr, &abuf);
    const char *nm = name ? name : "";
    fl_var *q = fc3(queries, (int64_t)d_key * n_head, NULL, nm, "_query_fc", a->attn_no_bias, a);
    fl_var *k = q ? fc3(keys, (int64_t)d_key * n_head, NULL, nm, "_key_fc", a->attn_no_bias, a) : NULL;
    fl_var *v = k ? fc3(values, (int64_t)d_value * n_head, NULL, nm, "_value_fc", a->attn_no_bias, a) : NULL;
    if (v) q = split_heads(q, n_head, d_key);
    if (q) k = split_heads(k, n_head, d_key);
    if (k) v = split_heads(v, n_head, d_value);
    if (!v) return block_failed(B, queries);
    /* scaled dot product: softmax(q k^T / sqrt(d_key) + bias) (dropout) v; Paddle scales q
     * first (layers.scale), the same as matmul's alpha on the product */
    fl_var *product = fl_layer_matmul(q, k, 0, 1, 1.0f / sqrtf((float)d_key));
    if (product && attn_bias) {
        fl_var *bias = bias_over_heads(attn_bias, n_head);
        product = bias ? fl_layer_elementwise_add(product, bias, -1) : NULL;
    }
    fl_var *weights = product ? dropout(fl_layer_softmax(product), dropout_rate, a) : NULL;
    fl_var *ctx = weights ? fl_layer_matmul(weights, v, 0, 0, 1.0f) : NULL;
    fl_var *out = ctx ? combine_heads(ctx, n_head, d_value) : NULL;
    out = out ? fc3(out, d_model, NULL, nm, "_output_fc", a->attn_no_bias, a) : NULL;
    return out ? out : block_failed(B, queries);
}

fl_var *fl_model_positionwise_ffn(fl_var *x, int d_inner_hid, int d_hid, float dropout_rate, const char *hidden_act,
                                  const char *name, const fl_model_attn_attr *attr)
{
    static const char *B = "fl_model_positionwise_ffn";
    if (!x) {
        fl__err(FL_EINVAL, "%s: x is NULL", B);
        return NULL;
    }
    if (d_inner_hid < 1 || d_hid < 1) {
        fl__err(FL_EINVAL, "%s: d_inner_hid %d and d_hid %d must be >= 1", B, d_inner_hid, d_hid);
        return NULL;
    }
    if (!(dropout_rate >= 0 && dropout_rate < 1)) {
        fl__err(FL_EINVAL, "%s: dropout_rate must be in [0, 1), got %g", B, (double)dropout_rate);
        return NULL;
    }
    int gelu = hidden_act && !strcmp(hidden_act, "gelu");
    if (hidden_act && !gelu && strcmp(hidden_act, "relu")) {
        fl__err(FL_EINVAL, "%s: hidden_act must be \"relu\" or \"gelu\", got \"%s\"", B, hidden_act);
        return NULL;
    }
    fl_model_attn_attr abuf;
    const fl_model_attn_attr *a = attr_or_default(attr, &abuf);
    const char *nm = name ? name : "";
    fl_var *h = fc3(x, d_inner_hid, gelu || !hidden_act ? NULL : "relu", nm, "_fc_0", 0, a);
    if (h && gelu) h = fl_layer_gelu(h, a->gelu_approximate);
    h = h ? dropout(h, dropout_rate, a) : NULL;
    fl_var *out = h ? fc3(h, d_hid, NULL, nm, "_fc_1", 0, a) : NULL;
    return out ? out : block_failed(B, x);
}

fl_var *fl_model_pre_post_process(fl_var *prev_out, fl_var *out, const char *cmd, float dropout_rate, const char *name,
                                  const fl_model_attn_attr *attr)
{
    static const char *B = "fl_model_pre_post_process";
    if (!out) {
        fl__err(FL_EINVAL, "%s: out is NULL", B);
        return NULL;
    }
    if (!(dropout_rate >= 0 && dropout_rate < 1)) {
        fl__err(FL_EINVAL, "%s: dropout_rate must be in [0, 1), got %g", B, (double)dropout_rate);
        return NULL;
    }
    for (const char *c = cmd ? cmd : ""; *c; c++)
        if (*c != 'a' && *c != 'n' && *c != 'd') {
            fl__err(FL_EINVAL, "%s: unknown command '%c' in \"%s\" (expected a, n or d)", B, *c, cmd);
            return NULL;
        }
    fl_model_attn_attr abuf;
    const fl_model_attn_attr *a = attr_or_default(attr, &abuf);
    fl_var *in = out;
    for (const char *c = cmd ? cmd : ""; *c && out; c++) {
        if (*c == 'a') {
            if (prev_out) out = fl_layer_elementwise_add(out, prev_out, -1);
        } else if (*c == 'n') {
            char sn[NM], bn[NM];
            fl_param_attr sa, ba;
            memset(&sa, 0, sizeof sa);
            memset(&ba, 0, sizeof ba);
            sa.init = fl_init_constant(1.0f);
            ba.init = fl_init_constant(0.0f);
            if (name && *name) {
                snprintf(sn, sizeof sn, "%s_layer_norm_scale", name);
                snprintf(bn, sizeof bn, "%s_layer_norm_bias", name);
                sa.name = sn, ba.name = bn;
            }
            out = fl_layer_layer_norm(out, fl_var_ndim(out) - 1, a->layer_norm_epsilon > 0 ? a->layer_norm_epsilon : 1e-5f,
                                      1, 1, &sa, &ba);
        } else {
            out = dropout(out, dropout_rate, a);
        }
    }
    return out ? out : block_failed(B, in);
}

fl_model_encoder_config fl_model_encoder_default(void)
{
    fl_model_encoder_config c;
    memset(&c, 0, sizeof c);
    c.n_layer = 6;
    c.n_head = 8;
    c.d_key = c.d_value = 64;
    c.d_model = 512;
    c.d_inner_hid = 2048;
    c.prepostprocess_dropout = c.attention_dropout = c.relu_dropout = 0.1f;
    c.hidden_act = "relu";
    c.preprocess_cmd = "n";
    c.postprocess_cmd = "da";
    c.attr = fl_model_attn_attr_default();
    return c;
}

static int check_encoder(const fl_model_encoder_config *c, const char *fn)
{
    if (!c) return fl__err(FL_EINVAL, "%s: config is NULL", fn);
    if (c->n_layer < 1 || c->n_head < 1 || c->d_key < 1 || c->d_value < 1 || c->d_model < 1 || c->d_inner_hid < 1)
        return fl__err(FL_EINVAL,
                       "%s: n_layer %d, n_head %d, d_key %d, d_value %d, d_model %d, d_inner_hid %d must be >= 1", fn,
                       c->n_layer, c->n_head, c->d_key, c->d_value, c->d_model, c->d_inner_hid);
    return FL_OK;
}

fl_var *fl_model_encoder_layer(fl_var *enc_input, fl_var *attn_bias, const fl_model_encoder_config *c, const char *name)
{
    static const char *B = "fl_model_encoder_layer";
    if (!enc_input) {
        fl__err(FL_EINVAL, "%s: enc_input is NULL", B);
        return NULL;
    }
    if (check_encoder(c, B)) return NULL;
    const char *nm = name ? name : "";
    const char *pre = c->preprocess_cmd ? c->preprocess_cmd : "", *post = c->postprocess_cmd ? c->postprocess_cmd : "";
    char n1[NM], n2[NM];
    snprintf(n1, sizeof n1, "%s_pre_att", nm);
    fl_var *x = fl_model_pre_post_process(NULL, enc_input, pre, c->prepostprocess_dropout, n1, &c->attr);
    snprintf(n1, sizeof n1, "%s_multi_head_att", nm);
    fl_var *att = x ? fl_model_multi_head_attention(x, NULL, NULL, attn_bias, c->d_key, c->d_value, c->d_model, c->n_head,
                                                    c->attention_dropout, n1, &c->attr)
                    : NULL;
    snprintf(n1, sizeof n1, "%s_post_att", nm);
    att = att ? fl_model_pre_post_process(enc_input, att, post, c->prepostprocess_dropout, n1, &c->attr) : NULL;
    snprintf(n1, sizeof n1, "%s_pre_ffn", nm);
    x = att ? fl_model_pre_post_process(NULL, att, pre, c->prepostprocess_dropout, n1, &c->attr) : NULL;
    snprintf(n2, sizeof n2, "%s_ffn", nm);
    fl_var *ffn = x ? fl_model_positionwise_ffn(x, c->d_inner_hid, c->d_model, c->relu_dropout, c->hidden_act, n2, &c->attr)
                    : NULL;
    snprintf(n1, sizeof n1, "%s_post_ffn", nm);
    return ffn ? fl_model_pre_post_process(att, ffn, post, c->prepostprocess_dropout, n1, &c->attr) : NULL;
}

fl_var *fl_model_encoder(fl_var *enc_input, fl_var *attn_bias, const fl_model_encoder_config *c, const char *name,
                         fl_var **layer_outputs)
{
    static const char *B = "fl_model_encoder";
    if (!enc_input) {
        fl__err(FL_EINVAL, "%s: enc_input is NULL", B);
        return NULL;
    }
    if (check_encoder(c, B)) return NULL;
    const char *nm = name ? name : "";
    char ln[NM];
    fl_var *x = enc_input;
    for (int i = 0; i < c->n_layer && x; i++) {
        snprintf(ln, sizeof ln, "%s_layer_%d", nm, i);
        x = fl_model_encoder_layer(x, attn_bias, c, ln);
        if (layer_outputs) layer_outputs[i] = x;
    }
    if (*nm) snprintf(ln, sizeof ln, "%s_post_encoder", nm);
    else snprintf(ln, sizeof ln, "post_encoder");
    return x ? fl_model_pre_post_process(NULL, x, c->preprocess_cmd, c->prepostprocess_dropout, ln, &c->attr) : NULL;
}
