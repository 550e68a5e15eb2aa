/*
 * bert.c - BERT pre-training (see fleet/models.h): the configuration (defaults and Paddle's
 * bert_config.json) and the builder: embeddings, the post-norm encoder of attention.c, the
 * pooled [CLS] output, masked-LM over gathered positions with the tied output embedding and
 * next-sentence prediction.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "fleet/models.h"
#include "../base/base_internal.h"

fl_model_bert_config fl_model_bert_default(void)
{
    fl_model_bert_config c;
    memset(&c, 0, sizeof c);
    c.vocab_size = 21128;
    c.hidden_size = 768;
    c.num_hidden_layers = 12;
    c.num_attention_heads = 12;
    c.intermediate_size = 3072;
    snprintf(c.hidden_act, sizeof c.hidden_act, "gelu");
    c.hidden_dropout_prob = 0.1f;
    c.attention_probs_dropout_prob = 0.1f;
    c.max_position_embeddings = 512;
    c.type_vocab_size = 2;
    c.initializer_range = 0.02f;
    c.weight_sharing = 1;
    return c;
}

/* The largest bert_config.json read (the file has a dozen keys). */
#define BERT_CONFIG_MAX (64 * 1024)

int fl_model_bert_config_load(const char *path, fl_model_bert_config *out)
{
    if (!path || !out) return fl__err(FL_EINVAL, "fl_model_bert_config_load: path or out is NULL");
    FILE *f = fopen(path, "rb");
    if (!f) return fl__err(FL_EIO, "fl_model_bert_config_load: cannot open '%s': %s", path, strerror(errno));
    char *text = malloc(BERT_CONFIG_MAX + 1);
    size_t n = text ? fread(text, 1, BERT_CONFIG_MAX + 1, f) : 0;
    int rerr = ferror(f);
    fclose(f);
    if (!text) return fl__err(FL_ENOMEM, "fl_model_bert_config_load: out of memory");
    if (rerr || n > BERT_CONFIG_MAX) {
        free(text);
        return fl__err(rerr ? FL_EIO : FL_EINVAL, "fl_model_bert_config_load: '%s' %s", path,
                       rerr ? "could not be read" : "is larger than 64 KiB");
    }
    char src[1100];
    snprintf(src, sizeof src, "'%s'", path);
    fl_json j = {NULL, src, FL_EINVAL};
    int st = fl__json_parse(&j, text, n, BERT_CONFIG_MAX, 4096);
    free(text);
    if (st != FL_OK) return st;
    fl_model_bert_config c = fl_model_bert_default();
    const cJSON *r = j.root;
    st = fl__json_obj(&j, r, "(top level)");
    /* every key of Paddle's file is read when present; the others keep BERT-base's values */
    static const struct {
        const char *key;
        int64_t lo, hi;
    } ints[] = {{"vocab_size", 1, (int64_t)1 << 31},
                {"hidden_size", 1, 1 << 16},
                {"num_hidden_layers", 1, FL_MODEL_BERT_MAX_LAYERS},
                {"num_attention_heads", 1, 1 << 10},
                {"intermediate_size", 1, 1 << 20},
                {"max_position_embeddings", 1, 1 << 20},
                {"type_vocab_size", 1, 1 << 10}};
    int64_t iv[7] = {c.vocab_size,          c.hidden_size,       c.num_hidden_layers,
                     c.num_attention_heads, c.intermediate_size, c.max_position_embeddings,
                     c.type_vocab_size};
    for (int i = 0; i < 7 && st == FL_OK; i++) {
        const cJSON *v = fl__json_find(r, ints[i].key);
        if (v) st = fl__json_int(&j, v, ints[i].key, ints[i].lo, ints[i].hi, &iv[i]);
    }
    static const char *flts[3] = {"hidden_dropout_prob", "attention_probs_dropout_prob", "initializer_range"};
    double fv[3] = {c.hidden_dropout_prob, c.attention_probs_dropout_prob, c.initializer_range};
    for (int i = 0; i < 3 && st == FL_OK; i++) {
        const cJSON *v = fl__json_find(r, flts[i]);
        if (v) st = fl__json_num(&j, v, flts[i], &fv[i]);
        if (st == FL_OK && (fv[i] < 0 || (i < 2 && fv[i] >= 1)))
            st = fl__json_fail(&j, "key '%s' must be in %s, not %g", flts[i], i < 2 ? "[0, 1)" : "[0, inf)", fv[i]);
    }
    const cJSON *act = fl__json_find(r, "hidden_act");
    const char *as = NULL;
    if (st == FL_OK && act) st = fl__json_str(&j, act, "hidden_act", &as);
    if (st == FL_OK && as && strcmp(as, "gelu") && strcmp(as, "relu"))
        st = fl__json_fail(&j, "key 'hidden_act' must be \"gelu\" or \"relu\", not \"%s\"", as);
    if (st == FL_OK) {
        c.vocab_size = iv[0], c.hidden_size = (int)iv[1], c.num_hidden_layers = (int)iv[2];
        c.num_attention_heads = (int)iv[3], c.intermediate_size = (int)iv[4];
        c.max_position_embeddings = (int)iv[5], c.type_vocab_size = (int)iv[6];
        c.hidden_dropout_prob = (float)fv[0], c.attention_probs_dropout_prob = (float)fv[1];
        c.initializer_range = (float)fv[2];
        if (as) snprintf(c.hidden_act, sizeof c.hidden_act, "%s", as);
        if (c.hidden_size % c.num_attention_heads)
            st = fl__json_fail(&j, "hidden_size %d is not a multiple of num_attention_heads %d", c.hidden_size,
                               c.num_attention_heads);
    }
    fl__json_free(&j);
    if (st == FL_OK) *out = c;
    return st;
}

static int check_cfg(const fl_model_bert_config *c)
{
    const char *E = "fl_model_bert_build";
    if (c->vocab_size < 4) return fl__err(FL_EINVAL, "%s: vocab_size must be >= 4, got %lld", E, (long long)c->vocab_size);
    if (c->hidden_size < 1 || c->num_attention_heads < 1 || c->hidden_size % c->num_attention_heads)
        return fl__err(FL_EINVAL, "%s: hidden_size %d must be a positive multiple of num_attention_heads %d", E,
                       c->hidden_size, c->num_attention_heads);
    if (c->num_hidden_layers < 1 || c->num_hidden_layers > FL_MODEL_BERT_MAX_LAYERS)
        return fl__err(FL_EINVAL, "%s: num_hidden_layers must be in [1, %d], got %d", E, FL_MODEL_BERT_MAX_LAYERS,
                       c->num_hidden_layers);
    if (c->intermediate_size < 1)
        return fl__err(FL_EINVAL, "%s: intermediate_size must be >= 1, got %d", E, c->intermediate_size);
    if (c->max_position_embeddings < 1 || c->type_vocab_size < 1)
        return fl__err(FL_EINVAL, "%s: max_position_embeddings %d and type_vocab_size %d must be >= 1", E,
                       c->max_position_embeddings, c->type_vocab_size);
    if (strcmp(c->hidden_act, "gelu") && strcmp(c->hidden_act, "relu"))
        return fl__err(FL_EINVAL, "%s: hidden_act must be \"gelu\" or \"relu\", got \"%s\"", E, c->hidden_act);
    if (!(c->hidden_dropout_prob >= 0 && c->hidden_dropout_prob < 1) ||
        !(c->attention_probs_dropout_prob >= 0 && c->attention_probs_dropout_prob < 1))
        return fl__err(FL_EINVAL, "%s: hidden_dropout_prob and attention_probs_dropout_prob must be in [0, 1)", E);
    if (!(c->initializer_range > 0)) return fl__err(FL_EINVAL, "%s: initializer_range must be > 0", E);
    return FL_OK;
}

static fl_var *embed(fl_var *ids, int64_t rows, int dim, const char *name, fl_initializer init)
{
    fl_embedding_attr ea;
    memset(&ea, 0, sizeof ea);
    ea.param.name = name;
    ea.param.init = init;
    return fl_layer_embedding(ids, rows, dim, &ea);
}

/* fc over [N, d] with Paddle's BERT names <name>.w_0 / <name>.b_0 */
static fl_var *fc(fl_var *x, int64_t size, const char *act, const char *name, fl_initializer init)
{
    char wn[96], bn[96];
    snprintf(wn, sizeof wn, "%s.w_0", name);
    snprintf(bn, sizeof bn, "%s.b_0", name);
    fl_fc_attr fa;
    memset(&fa, 0, sizeof fa);
    fa.weight.name = wn;
    fa.weight.init = init;
    fa.bias.name = bn;
    return fl_layer_fc_ex(FL_VARS(x), size, act, &fa);
}

int fl_model_bert_build(fl_prog *p, const fl_model_bert_config *cfg, fl_model_bert *m)
{
    if (!p || !cfg || !m) return fl__err(FL_EINVAL, "fl_model_bert_build: program, config or output is NULL");
    memset(m, 0, sizeof *m);
    FL_CHECK(check_cfg(cfg));
    const int H = cfg->hidden_size, nh = cfg->num_attention_heads;
    const int gelu = !strcmp(cfg->hidden_act, "gelu");
    const fl_initializer init = fl_init_truncated_normal(0.0f, cfg->initializer_range);
    const int64_t seq1[2] = {-1, 1}, one[1] = {1};
    m->src_ids = fl_layer_data(p, "src_ids", 2, seq1, FL_INT64, 0);
    m->pos_ids = fl_layer_data(p, "pos_ids", 2, seq1, FL_INT64, 0);
    m->sent_ids = fl_layer_data(p, "sent_ids", 2, seq1, FL_INT64, 0);
    m->input_mask = fl_layer_data(p, "input_mask", 2, seq1, FL_FLOAT32, 0);
    m->mask_label = fl_layer_data(p, "mask_label", 1, one, FL_INT64, 0);
    m->mask_pos = fl_layer_data(p, "mask_pos", 1, one, FL_INT64, 0);
    m->labels = fl_layer_data(p, "labels", 1, one, FL_INT64, 0);
    if (fl_prog_status(p) != FL_OK) return fl__err(fl_prog_status(p), "bert: %s", fl_prog_error(p));

    /* embeddings: word + position + sentence, then layer_norm and dropout ("nd") */
    fl_var *emb = embed(m->src_ids, cfg->vocab_size, H, "word_embedding", init);
    fl_var *pos = embed(m->pos_ids, cfg->max_position_embeddings, H, "pos_embedding", init);
    fl_var *sent = embed(m->sent_ids, cfg->type_vocab_size, H, "sent_embedding", init);
    emb = fl_layer_elementwise_add(fl_layer_elementwise_add(emb, pos, -1), sent, -1);
    fl_model_encoder_config ec;
    memset(&ec, 0, sizeof ec);
    ec.n_layer = cfg->num_hidden_layers, ec.n_head = nh;
    ec.d_key = ec.d_value = H / nh, ec.d_model = H, ec.d_inner_hid = cfg->intermediate_size;
    ec.prepostprocess_dropout = cfg->hidden_dropout_prob;
    ec.attention_dropout = cfg->attention_probs_dropout_prob;
    ec.relu_dropout = 0; /* as Paddle's BERT */
    ec.hidden_act = cfg->hidden_act;
    ec.preprocess_cmd = "", ec.postprocess_cmd = "dan";
    ec.attr = fl_model_attn_attr_default();
    ec.attr.init = init;
    emb = emb ? fl_model_pre_post_process(NULL, emb, "nd", cfg->hidden_dropout_prob, "pre_encoder", &ec.attr) : NULL;

    /* the self-attention bias: (mask mask^T - 1) * 10000, one copy per head */
    fl_var *att = fl_layer_matmul(m->input_mask, m->input_mask, 0, 1, 1.0f);
    att = fl_layer_scale(att, 10000.0f, -1.0f, 0);
    fl_var *heads[FL_MODEL_BERT_MAX_HEADS];
    if (nh > FL_MODEL_BERT_MAX_HEADS)
        return fl__err(FL_EINVAL, "fl_model_bert_build: num_attention_heads %d is above %d", nh, FL_MODEL_BERT_MAX_HEADS);
    for (int i = 0; i < nh; i++) heads[i] = att;
    fl_var *bias = att ? fl_layer_stack(heads, nh, 1) : NULL;
    if (bias) fl_var_set_stop_gradient(bias, 1);
    m->enc_out = emb && bias ? fl_model_encoder(emb, bias, &ec, "encoder", m->checkpoints) : NULL;
    if (!m->enc_out) return fl_last_status() ? fl_last_status() : fl__err(FL_EINVAL, "bert: %s", fl_prog_error(p));
    m->ncheckpoints = cfg->num_hidden_layers;

    /* pooled output: fc tanh over the [CLS] position */
    fl_var *cls = fl_layer_slice(m->enc_out, 1, (const int64_t[]){1}, (const int64_t[]){0}, (const int64_t[]){1});
    cls = cls ? fl_layer_reshape(cls, 2, (const int64_t[]){-1, H}) : NULL;
    m->pooled = cls ? fc(cls, H, "tanh", "pooled_fc", init) : NULL;

    /* masked LM: gather the masked positions of the flattened output, transform, tied
     * output embedding plus a bias */
    fl_var *flat = fl_layer_reshape(m->enc_out, 2, (const int64_t[]){-1, H});
    fl_var *mf = flat ? fl_layer_gather(flat, m->mask_pos) : NULL;
    mf = mf ? fc(mf, H, gelu ? NULL : "relu", "mask_lm_trans_fc", init) : NULL;
    if (mf && gelu) mf = fl_layer_gelu(mf, 0);
    fl_param_attr sa, ba;
    memset(&sa, 0, sizeof sa);
    memset(&ba, 0, sizeof ba);
    sa.name = "mask_lm_trans_layer_norm_scale", sa.init = fl_init_constant(1.0f);
    ba.name = "mask_lm_trans_layer_norm_bias", ba.init = fl_init_constant(1.0f); /* Paddle's BERT: 1 */
    mf = mf ? fl_layer_layer_norm(mf, 1, ec.attr.layer_norm_epsilon, 1, 1, &sa, &ba) : NULL;
    fl_var *logits = NULL;
    if (mf && cfg->weight_sharing) {
        logits = fl_layer_matmul(mf, fl_prog_var(p, "word_embedding"), 0, 1, 1.0f);
        fl_param_attr ob;
        memset(&ob, 0, sizeof ob);
        ob.name = "mask_lm_out_fc.b_0", ob.init = fl_init_constant(0.0f);
        fl_var *ob_v = fl_layer_create_parameter(p, 1, (const int64_t[]){cfg->vocab_size}, FL_FLOAT32, &ob);
        logits = logits && ob_v ? fl_layer_elementwise_add(logits, ob_v, -1) : NULL;
    } else if (mf) {
        logits = fc(mf, cfg->vocab_size, NULL, "mask_lm_out_fc", init);
    }
    m->mlm_logits = logits;
    m->mlm_loss = logits ? fl_layer_mean(fl_layer_softmax_with_cross_entropy(logits, m->mask_label)) : NULL;
    m->mlm_acc = logits ? fl_layer_accuracy(logits, m->mask_label, 1) : NULL;

    /* next sentence prediction */
    fl_var *ns = m->pooled ? fc(m->pooled, 2, NULL, "next_sent_fc", init) : NULL;
    m->nsp_loss = ns ? fl_layer_mean(fl_layer_softmax_with_cross_entropy(ns, m->labels)) : NULL;
    m->nsp_prob = ns ? fl_layer_softmax(ns) : NULL;
    m->nsp_acc = m->nsp_prob ? fl_layer_accuracy(m->nsp_prob, m->labels, 1) : NULL;
    m->loss = m->mlm_loss && m->nsp_loss ? fl_layer_elementwise_add(m->mlm_loss, m->nsp_loss, -1) : NULL;
    if (!m->loss || fl_prog_status(p) != FL_OK) {
        int st = fl_prog_status(p);
        return st != FL_OK ? fl__err(st, "bert: %s", fl_prog_error(p)) : fl_last_status();
    }
    fl_var *feeds[7] = {m->src_ids, m->pos_ids, m->sent_ids, m->input_mask, m->mask_label, m->mask_pos, m->labels};
    memcpy(m->feeds, feeds, sizeof feeds);
    m->nfeeds = 7;
    return FL_OK;
}
