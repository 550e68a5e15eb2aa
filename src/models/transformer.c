/*
 * transformer.c - the Transformer of Paddle's translation benchmark (model.py; see
 * fleet/transformer.h): embeddings with sinusoidal positions, the encoder of attention.c,
 * the decoder (causal self-attention, cross-attention, feed-forward), the output
 * projection and the label-smoothed, weighted cross-entropy; and the benchmark's optimizer.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "fleet/models.h"
#include "fleet/transformer.h"
#include "../base/base_internal.h"
#include "../graph/graph_internal.h"

#define NM 256

fl_model_transformer_config fl_model_transformer_default(void)
{
    fl_model_transformer_config c;
    memset(&c, 0, sizeof c);
    c.max_length = 256;
    c.n_layer = 6;
    c.n_head = 8;
    c.d_key = c.d_value = 64;
    c.d_model = 512;
    c.d_inner_hid = 2048;
    c.prepostprocess_dropout = c.attention_dropout = c.relu_dropout = 0.1f;
    c.preprocess_cmd = "n";
    c.postprocess_cmd = "da";
    c.label_smooth_eps = 0.1f;
    c.bos_idx = 0;
    return c;
}

fl_model_transformer_config fl_model_transformer_small(void)
{
    fl_model_transformer_config c = fl_model_transformer_default();
    c.max_length = 128;
    c.n_layer = 2;
    c.n_head = 4;
    c.d_key = c.d_value = 16;
    c.d_model = 64;
    c.d_inner_hid = 128;
    c.prepostprocess_dropout = c.attention_dropout = c.relu_dropout = 0;
    return c;
}

/* ---- the sinusoid table: an initializer op of the startup program ----------------------------
 *
 * Paddle's position_encoding_init: with h = d / 2 timescales, inv_k = exp(-k log(1e4) / (h - 1)),
 * row p is [sin(p inv_0) .. sin(p inv_{h-1}), cos(p inv_0) .. cos(p inv_{h-1})] (a zero
 * column appended when d is odd).  Paddle sets the frozen table from NumPy after startup;
 * here the startup program writes it. */

static int infer_sinusoid(fl_op *op)
{
    const fl_attr *sh = fl__attr_find(op, "shape");
    if (!op->out[0].n) return fl__op_error(op, "output 'Out' is missing");
    if (!sh || sh->type != FL_ATTR_INTS || sh->n != 2 || sh->ints[0] < 1 || sh->ints[1] < 2)
        return fl__op_error(op, "attribute 'shape' must be [n_position >= 1, d >= 2]");
    return FL_OK;
}

static int run_sinusoid(fl_kctx *c)
{
    const fl_attr *sh = fl__attr_find(c->op, "shape");
    fl_tensor *t = FL_OUT(c, 0);
    const int64_t n = sh->ints[0], d = sh->ints[1], h = d / 2;
    FL_CHECK(fl_tensor_resize(t, FL_FLOAT32, 2, (const int64_t[]){n, d}));
    float *o = fl_tensor_f32(t);
    const double inc = h > 1 ? log(1e4) / (double)(h - 1) : 0;
    for (int64_t p = 0; p < n; p++) {
        for (int64_t k = 0; k < h; k++) {
            double a = (double)p * exp(-(double)k * inc);
            o[p * d + k] = (float)sin(a);
            o[p * d + h + k] = (float)cos(a);
        }
        if (d % 2) o[p * d + d - 1] = 0;
    }
    return FL_OK;
}

static const fl_op_def def_sinusoid = {"sinusoid_position_encoding", {NULL}, {"Out"}, infer_sinusoid, run_sinusoid, NULL};
static const fl_op_def *const transformer_ops[] = {&def_sinusoid, NULL};

/* A frozen [max_length, d_model] table `name` written by the sinusoid op at startup. */
static fl_var *position_table(fl_prog *p, const char *name, int64_t rows, int64_t d)
{
    fl_param_attr pa;
    memset(&pa, 0, sizeof pa);
    pa.name = name;
    pa.frozen = 1;
    pa.init = fl_init_constant(0);
    fl_var *t = fl_layer_create_parameter(p, 2, (const int64_t[]){rows, d}, FL_FLOAT32, &pa);
    if (!t) return NULL;
    fl_prog *sp = fl_prog_startup(p);
    fl_var *sv = fl_prog_var(sp, name);
    if (fl__op_register_group(transformer_ops) != FL_OK || !sv) {
        fl__prog_error(p, FL_EINVAL, "transformer: position table '%s': %s", name, fl_last_error());
        return NULL;
    }
    fl_io out = FL_IO1("Out", sv);
    fl_op *op = fl__op_new(sp, "sinusoid_position_encoding", NULL, 0, &out, 1);
    if (!op || fl__attr_set_ints(op, "shape", (const int64_t[]){rows, d}, 2) != FL_OK || fl__op_finish(op) != FL_OK) {
        if (fl_prog_status(p) == FL_OK)
            fl__prog_error(p, FL_EINVAL, "transformer: position table '%s': %s", name, fl_last_error());
        return NULL;
    }
    return t;
}

/* prepare_encoder_decoder: word embedding (padding_idx bos, Normal(0, d^-0.5)) * sqrt(d)
 * + position encoding, then dropout. */
static fl_var *embed(fl_prog *p, const fl_model_transformer_config *c, fl_var *word, fl_var *pos, int64_t vocab,
                     const char *word_table, const char *pos_table)
{
    fl_embedding_attr ea;
    memset(&ea, 0, sizeof ea);
    ea.has_padding_idx = 1;
    ea.padding_idx = c->bos_idx;
    ea.param.name = word_table;
    ea.param.init = fl_init_normal(0, powf((float)c->d_model, -0.5f));
    fl_var *w = fl_layer_scale(fl_layer_embedding(word, vocab, c->d_model, &ea), sqrtf((float)c->d_model), 0, 1);
    fl_var *table = fl_prog_var(p, pos_table);
    if (!table) table = position_table(p, pos_table, c->max_length, c->d_model);
    if (!table) return NULL;
    fl_embedding_attr pa;
    memset(&pa, 0, sizeof pa);
    pa.param.name = pos_table;
    pa.param.frozen = 1;
    fl_var *pe = fl_layer_embedding(pos, c->max_length, c->d_model, &pa);
    if (pe) fl_var_set_stop_gradient(pe, 1);
    fl_var *x = fl_layer_elementwise_add(w, pe, -1);
    return c->prepostprocess_dropout > 0 && x ? fl_layer_dropout(x, c->prepostprocess_dropout, "upscale_in_train") : x;
}

static fl_model_attn_attr attn_attr(void)
{
    fl_model_attn_attr a = fl_model_attn_attr_default();
    a.attn_no_bias = 1; /* the benchmark's q, k, v and output projections have no bias */
    return a;
}

/* decoder_layer: causal self-attention, cross-attention over enc_output, feed-forward, each
 * between pre(preprocess_cmd) and post(postprocess_cmd) with its residual. */
static fl_var *decoder_layer(const fl_model_transformer_config *c, fl_var *x, fl_var *enc, fl_var *slf_bias,
                             fl_var *src_bias, int i)
{
    const fl_model_attn_attr a = attn_attr();
    const float dr = c->prepostprocess_dropout;
    char n[NM];
#define N(fmt) (snprintf(n, sizeof n, "decoder_layer_%d_" fmt, i), n)
    fl_var *h = fl_model_pre_post_process(NULL, x, c->preprocess_cmd, dr, N("pre_slf_att"), &a);
    h = h ? fl_model_multi_head_attention(h, NULL, NULL, slf_bias, c->d_key, c->d_value, c->d_model, c->n_head,
                                          c->attention_dropout, N("slf_att"), &a)
          : NULL;
    fl_var *s = h ? fl_model_pre_post_process(x, h, c->postprocess_cmd, dr, N("post_slf_att"), &a) : NULL;
    h = s ? fl_model_pre_post_process(NULL, s, c->preprocess_cmd, dr, N("pre_cross_att"), &a) : NULL;
    h = h ? fl_model_multi_head_attention(h, enc, enc, src_bias, c->d_key, c->d_value, c->d_model, c->n_head,
                                          c->attention_dropout, N("cross_att"), &a)
          : NULL;
    fl_var *e = h ? fl_model_pre_post_process(s, h, c->postprocess_cmd, dr, N("post_cross_att"), &a) : NULL;
    h = e ? fl_model_pre_post_process(NULL, e, c->preprocess_cmd, dr, N("pre_ffn"), &a) : NULL;
    h = h ? fl_model_positionwise_ffn(h, c->d_inner_hid, c->d_model, c->relu_dropout, "relu", N("ffn"), &a) : NULL;
    return h ? fl_model_pre_post_process(e, h, c->postprocess_cmd, dr, N("post_ffn"), &a) : NULL;
#undef N
}

static int check_config(const fl_model_transformer_config *c)
{
    if (c->src_vocab_size < 3 || c->trg_vocab_size < 3)
        return fl__err(FL_EINVAL, "transformer: src_vocab_size and trg_vocab_size must be >= 3 (got %lld, %lld)",
                       (long long)c->src_vocab_size, (long long)c->trg_vocab_size);
    if (c->weight_sharing && c->src_vocab_size != c->trg_vocab_size)
        return fl__err(FL_EINVAL, "transformer: weight_sharing needs src_vocab_size == trg_vocab_size (got %lld, %lld)",
                       (long long)c->src_vocab_size, (long long)c->trg_vocab_size);
    if (c->n_layer > FL_MODEL_TRANSFORMER_MAX_LAYERS)
        return fl__err(FL_EINVAL, "transformer: n_layer must be at most %d, got %d", FL_MODEL_TRANSFORMER_MAX_LAYERS,
                       c->n_layer);
    if (c->max_length < 2 || c->n_layer < 1 || c->n_head < 1 || c->d_key < 1 || c->d_value < 1 || c->d_model < 2 ||
        c->d_inner_hid < 1)
        return fl__err(FL_EINVAL,
                       "transformer: max_length >= 2, n_layer, n_head, d_key, d_value, d_inner_hid >= 1 and d_model >= 2 "
                       "(got %d, %d, %d, %d, %d, %d, %d)",
                       c->max_length, c->n_layer, c->n_head, c->d_key, c->d_value, c->d_inner_hid, c->d_model);
    const float d[3] = {c->prepostprocess_dropout, c->attention_dropout, c->relu_dropout};
    for (int i = 0; i < 3; i++)
        if (!(d[i] >= 0 && d[i] < 1))
            return fl__err(FL_EINVAL, "transformer: dropout rates must be in [0, 1), got %g", (double)d[i]);
    if (!(c->label_smooth_eps >= 0 && c->label_smooth_eps < 1))
        return fl__err(FL_EINVAL, "transformer: label_smooth_eps must be in [0, 1), got %g", (double)c->label_smooth_eps);
    if (c->bos_idx < 0 || c->bos_idx >= c->trg_vocab_size || c->bos_idx >= c->src_vocab_size)
        return fl__err(FL_EINVAL, "transformer: bos_idx %lld out of the vocabularies", (long long)c->bos_idx);
    return FL_OK;
}

int fl_model_transformer_build(fl_prog *p, const fl_model_transformer_config *cfg, fl_model_transformer *m)
{
    if (!p || !cfg || !m) return fl__err(FL_EINVAL, "fl_model_transformer_build: program, config or output is NULL");
    memset(m, 0, sizeof *m);
    FL_CHECK(check_config(cfg));
    const fl_model_transformer_config *c = cfg;
    const int64_t H = c->n_head;
    m->src_word = fl_layer_data(p, "src_word", 2, (const int64_t[]){-1, 1}, FL_INT64, 0);
    m->src_pos = fl_layer_data(p, "src_pos", 2, (const int64_t[]){-1, 1}, FL_INT64, 0);
    m->src_slf_attn_bias = fl_layer_data(p, "src_slf_attn_bias", 3, (const int64_t[]){H, -1, -1}, FL_FLOAT32, 0);
    m->trg_word = fl_layer_data(p, "trg_word", 2, (const int64_t[]){-1, 1}, FL_INT64, 0);
    m->trg_pos = fl_layer_data(p, "trg_pos", 2, (const int64_t[]){-1, 1}, FL_INT64, 0);
    m->trg_slf_attn_bias = fl_layer_data(p, "trg_slf_attn_bias", 3, (const int64_t[]){H, -1, -1}, FL_FLOAT32, 0);
    m->trg_src_attn_bias = fl_layer_data(p, "trg_src_attn_bias", 3, (const int64_t[]){H, -1, -1}, FL_FLOAT32, 0);
    m->lbl_word = fl_layer_data(p, "lbl_word", 1, (const int64_t[]){1}, FL_INT64, 0);
    m->lbl_weight = fl_layer_data(p, "lbl_weight", 1, (const int64_t[]){1}, FL_FLOAT32, 0);
    fl_var *biases[3] = {m->src_slf_attn_bias, m->trg_slf_attn_bias, m->trg_src_attn_bias};
    for (int i = 0; i < 3; i++)
        if (biases[i]) fl_var_set_stop_gradient(biases[i], 1);

    /* encoder: attention.c's stack with the benchmark's pre / post commands */
    const char *src_table = "src_word_emb_table", *trg_table = c->weight_sharing ? src_table : "trg_word_emb_table";
    fl_var *enc_in = embed(p, c, m->src_word, m->src_pos, c->src_vocab_size, src_table, "src_pos_enc_table");
    fl_model_encoder_config ec = fl_model_encoder_default();
    ec.n_layer = c->n_layer, ec.n_head = c->n_head, ec.d_key = c->d_key, ec.d_value = c->d_value;
    ec.d_model = c->d_model, ec.d_inner_hid = c->d_inner_hid;
    ec.prepostprocess_dropout = c->prepostprocess_dropout, ec.attention_dropout = c->attention_dropout;
    ec.relu_dropout = c->relu_dropout;
    ec.preprocess_cmd = c->preprocess_cmd, ec.postprocess_cmd = c->postprocess_cmd;
    ec.hidden_act = "relu";
    ec.attr = attn_attr();
    fl_var *enc = enc_in ? fl_model_encoder(enc_in, m->src_slf_attn_bias, &ec, "encoder", m->checkpoints) : NULL;
    if (enc && fl__var_rename(enc, "enc_output") != FL_OK) enc = NULL;
    m->enc_output = enc;

    /* decoder */
    fl_var *x = enc ? embed(p, c, m->trg_word, m->trg_pos, c->trg_vocab_size, trg_table, "trg_pos_enc_table") : NULL;
    for (int i = 0; i < c->n_layer && x; i++) {
        x = decoder_layer(c, x, enc, m->trg_slf_attn_bias, m->trg_src_attn_bias, i);
        m->checkpoints[c->n_layer + i] = x;
    }
    x = x ? fl_model_pre_post_process(NULL, x, c->preprocess_cmd, c->prepostprocess_dropout, "post_decoder", NULL) : NULL;
    x = x ? fl_layer_reshape(x, 2, (const int64_t[]){-1, c->d_model}) : NULL;
    if (x && c->weight_sharing) {
        m->logits = fl_layer_matmul(x, fl_prog_var(p, src_table), 0, 1, 1.0f);
    } else if (x) {
        fl_fc_attr fa;
        memset(&fa, 0, sizeof fa);
        fa.no_bias = 1;
        fa.weight.name = "trg_output_fc.w_0";
        m->logits = fl_layer_fc_ex(FL_VARS(x), c->trg_vocab_size, NULL, &fa);
    }
    m->predict = m->logits ? fl_layer_softmax(m->logits) : NULL;

    /* loss: label-smoothed cross-entropy weighted by lbl_weight, over the real tokens */
    fl_var *label = m->lbl_word;
    int soft = c->label_smooth_eps > 0;
    if (soft) label = fl_layer_label_smooth(fl_layer_one_hot(m->lbl_word, c->trg_vocab_size), NULL, c->label_smooth_eps);
    fl_var *cost = m->logits && label ? fl_layer_softmax_with_cross_entropy_ex(m->logits, label, soft, -100) : NULL;
    m->sum_cost = fl_layer_reduce_sum(fl_layer_elementwise_mul(cost, m->lbl_weight, -1), NULL, 0, 0);
    m->token_num = fl_layer_reduce_sum(m->lbl_weight, NULL, 0, 0);
    if (m->token_num) fl_var_set_stop_gradient(m->token_num, 1);
    m->loss = fl_layer_elementwise_div(m->sum_cost, m->token_num, -1);
    if (fl_prog_status(p) != FL_OK) return fl__err(fl_prog_status(p), "transformer: %s", fl_prog_error(p));
    if (!m->loss) return fl__err(fl_last_status() ? fl_last_status() : FL_EINVAL, "transformer: %s", fl_last_error());
    fl_var *feeds[FL_MODEL_TRANSFORMER_FEEDS] = {m->src_word,          m->src_pos,  m->src_slf_attn_bias,
                                                 m->trg_word,          m->trg_pos,  m->trg_slf_attn_bias,
                                                 m->trg_src_attn_bias, m->lbl_word, m->lbl_weight};
    memcpy(m->use_var, feeds, sizeof feeds);
    m->nuse_var = FL_MODEL_TRANSFORMER_FEEDS;
    m->ncheckpoints = 2 * c->n_layer;
    return FL_OK;
}

fl_opt *fl_model_transformer_optimizer(fl_prog *p, const fl_model_transformer_config *cfg, float learning_rate,
                                       int64_t warmup_steps, float clip_norm)
{
    if (!p || !cfg || !(learning_rate > 0) || warmup_steps < 1 || !(clip_norm >= 0)) {
        fl__err(FL_EINVAL,
                "fl_model_transformer_optimizer: program and config must be set, learning_rate > 0, warmup_steps >= 1, "
                "clip_norm >= 0 (got %g, %lld, %g)",
                (double)learning_rate, (long long)warmup_steps, (double)clip_norm);
        return NULL;
    }
    fl_var *lr = fl_layer_noam_decay(p, cfg->d_model, warmup_steps, learning_rate);
    if (!lr) return NULL;
    fl_opt *o = fl_opt_adam(learning_rate, 0.9f, 0.997f, 1e-9f);
    if (o && fl_opt_set_lr_var(o, lr) == FL_OK &&
        (clip_norm == 0 || fl_opt_set_grad_clip(o, FL_CLIP_GLOBAL_NORM, clip_norm, 0) == FL_OK))
        return o;
    fl_opt_free(o);
    return NULL;
}
