/* test_attention.c - the Transformer building blocks of src/models/attention.c: finite-
 * difference gradients of multi-head attention (self and cross, with a head-broadcast
 * mask) and of encoder layers in BERT's post-norm and the Transformer's pre-norm forms,
 * the additive mask hiding keys, Paddle's parameter names and the argument errors. */
#include "gradcheck.h"

static const gc_opts defaults = {0, 0, 0, 0};

/* Self-attention on x [2, 3, 8] (2 heads of 4) with a [2, 1, 3, 3] mask, and cross-attention
 * of the result on a memory [2, 4, 8] with a [2, 3, 4] mask: every parameter's gradient. */
TEST(grad_self_and_cross_attention)
{
    const int64_t B = 2, S = 3, M = 4, D = 8;
    fl_prog *p = fl_prog_create();
    fl_prog_set_seed(p, 3);
    fl_var *x = gc_input(p, "x", FL_SHAPE(B, S, D), -1, 1);
    fl_var *mem = gc_input(p, "mem", FL_SHAPE(B, M, D), -1, 1);
    fl_var *mask = fl_layer_data(p, "mask", FL_SHAPE(1, S, S), FL_FLOAT32, 0);
    fl_var *xmask = fl_layer_data(p, "xmask", FL_SHAPE(S, M), FL_FLOAT32, 0);
    fl_var_set_stop_gradient(mask, 1);
    fl_var_set_stop_gradient(xmask, 1);
    fl_model_attn_attr a = fl_model_attn_attr_default();
    a.init = fl_init_uniform(-0.5f, 0.5f);
    fl_var *self = fl_model_multi_head_attention(x, NULL, NULL, mask, 4, 4, (int)D, 2, 0, "self", &a);
    if (!self) TFAIL("self attention: %s", fl_last_error());
    CHECK_EQ_INT(fl_var_ndim(self), 3);
    CHECK_EQ_INT(fl_var_shape(self)[2], D);
    fl_var *cross = fl_model_multi_head_attention(self, mem, NULL, xmask, 4, 2, (int)D, 2, 0, "cross", &a);
    if (!cross) TFAIL("cross attention: %s", fl_last_error());
    CHECK(fl_prog_var(p, "self_query_fc.w_0") && fl_prog_var(p, "self_output_fc.b_0"));
    CHECK(fl_prog_var(p, "cross_value_fc.w_0"));
    CHECK_EQ_INT(fl_var_shape(fl_prog_var(p, "cross_value_fc.w_0"))[1], 4); /* d_value 2 x 2 heads */
    float mv[B * S * S], xv[B * S * M];
    for (int i = 0; i < B * S * S; i++) mv[i] = (i % S) > ((i / S) % S) ? -1e4f : 0.0f; /* causal */
    for (int i = 0; i < B * S * M; i++) xv[i] = (i / (S * M) == 1 && i % M == 3) ? -1e4f : 0.0f;
    fl_tensor *mt = th_f32(4, (const int64_t[]){B, 1, S, S}, mv), *xt = th_f32(3, (const int64_t[]){B, S, M}, xv);
    fl_feed feed[] = {{"mask", mt}, {"xmask", xt}};
    gc_check(gc_loss(cross), feed, 2, NULL, defaults);
    fl_tensor_free(mt);
    fl_tensor_free(xt);
    fl_prog_free(p);
}

/* Returns the output of attention over keys kv for one feed. */
static void attend(fl_exe *e, fl_prog *p, fl_var *out, const float *qv, const float *kvv, const float *bv, float *o, int n)
{
    fl_tensor *q = th_f32(3, (const int64_t[]){2, 2, 4}, qv), *kv = th_f32(3, (const int64_t[]){2, 3, 4}, kvv);
    fl_tensor *b = th_f32(4, (const int64_t[]){2, 1, 2, 3}, bv);
    fl_feed feed[] = {{"q", q}, {"kv", kv}, {"bias", b}};
    const char *f[1] = {fl_var_name(out)};
    fl_tensor *t = NULL;
    CHECK_OK(fl_exe_run(e, p, feed, 3, f, 1, &t));
    CHECK_EQ_INT(fl_tensor_numel(t), n);
    memcpy(o, fl_tensor_f32(t), (size_t)n * sizeof *o);
    fl_tensor_free(q);
    fl_tensor_free(kv);
    fl_tensor_free(b);
}

/* A key masked by -1e4 for example 1 does not change example 1's output when its values
 * change; unmasked, it does. */
TEST(mask_hides_keys)
{
    fl_prog *p = fl_prog_create();
    fl_var *q = fl_layer_data(p, "q", FL_SHAPE(2, 4), FL_FLOAT32, 0);
    fl_var *kv = fl_layer_data(p, "kv", FL_SHAPE(3, 4), FL_FLOAT32, 0);
    fl_var *bias = fl_layer_data(p, "bias", FL_SHAPE(1, 2, 3), FL_FLOAT32, 0);
    fl_var *out = fl_model_multi_head_attention(q, kv, NULL, bias, 2, 2, 4, 2, 0, "att", NULL);
    if (!out) TFAIL("attention: %s", fl_last_error());
    float qv[16], kvv[24], kv2[24], bv[12] = {0}, o1[16], o2[16];
    th_fill_uniform(qv, 16, -1, 1, 1);
    th_fill_uniform(kvv, 24, -1, 1, 2);
    memcpy(kv2, kvv, sizeof kv2);
    for (int j = 0; j < 4; j++) kv2[12 + 2 * 4 + j] += 3.0f; /* example 1, key 2 */
    for (int i = 0; i < 2; i++) bv[6 + i * 3 + 2] = -1e4f;   /* masked for example 1 */
    fl_exe *e = fl_exe_create(NULL);
    CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
    attend(e, p, out, qv, kvv, bv, o1, 16);
    attend(e, p, out, qv, kv2, bv, o2, 16);
    for (int i = 8; i < 16; i++) CHECK_NEAR(o2[i], o1[i], 1e-5);
    for (int i = 0; i < 8; i++) CHECK_NEAR(o2[i], o1[i], 0); /* example 0 untouched */
    memset(bv, 0, sizeof bv);
    attend(e, p, out, qv, kvv, bv, o1, 16);
    attend(e, p, out, qv, kv2, bv, o2, 16);
    double diff = 0;
    for (int i = 8; i < 16; i++) diff += fabs(o2[i] - o1[i]);
    CHECK(diff > 1e-3);
    fl_exe_free(e);
    fl_prog_free(p);
}

/* Encoder stacks of 2 layers: BERT's post-norm ("", "dan", gelu) and the Transformer's
 * pre-norm ("n", "da", relu, no attention biases), dropout 0 so the differences are exact. */
static void encoder_grad(const char *pre, const char *post, const char *act, int no_bias)
{
    fl_prog *p = fl_prog_create();
    fl_prog_set_seed(p, 5);
    fl_var *x = gc_input(p, "x", FL_SHAPE(2, 3, 8), -1, 1);
    fl_model_encoder_config c = fl_model_encoder_default();
    c.n_layer = 2, c.n_head = 2, c.d_key = c.d_value = 4, c.d_model = 8, c.d_inner_hid = 12;
    c.prepostprocess_dropout = c.attention_dropout = c.relu_dropout = 0;
    c.hidden_act = act, c.preprocess_cmd = pre, c.postprocess_cmd = post;
    c.attr.attn_no_bias = no_bias;
    c.attr.init = fl_init_uniform(-0.5f, 0.5f);
    fl_var *outs[2] = {NULL, NULL};
    fl_var *enc = fl_model_encoder(x, NULL, &c, "enc", outs);
    if (!enc) TFAIL("encoder: %s", fl_last_error());
    CHECK(outs[0] && outs[1]);
    CHECK(fl_prog_var(p, "enc_layer_1_ffn_fc_1.w_0"));
    CHECK_EQ_INT(fl_prog_var(p, "enc_layer_0_multi_head_att_query_fc.b_0") != NULL, !no_bias);
    if (strchr(post, 'n')) CHECK(fl_prog_var(p, "enc_layer_1_post_ffn_layer_norm_scale"));
    if (*pre == 'n')
        CHECK(fl_prog_var(p, "enc_post_encoder_layer_norm_bias") && fl_prog_var(p, "enc_layer_0_pre_att_layer_norm_scale"));
    else CHECK(outs[1] == enc);
    const char *only[] = {"x",
                          "enc_layer_0_multi_head_att_query_fc.w_0",
                          "enc_layer_0_ffn_fc_0.w_0",
                          "enc_layer_1_multi_head_att_output_fc.w_0",
                          "enc_layer_1_ffn_fc_1.b_0",
                          NULL};
    gc_opts o = defaults;
    o.max_elems = 24;
    gc_check(gc_loss(enc), NULL, 0, only, o);
    fl_prog_free(p);
}

TEST(grad_encoder_post_norm_bert) { encoder_grad("", "dan", "gelu", 0); }
TEST(grad_encoder_pre_norm_transformer) { encoder_grad("n", "da", "relu", 1); }

/* Dropout inside the blocks builds upscale_in_train dropout ops; bad arguments name the
 * block and the argument. */
TEST(blocks_dropout_and_errors)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(3, 8), FL_FLOAT32, 0);
    fl_model_encoder_config c = fl_model_encoder_default();
    c.n_layer = 1, c.n_head = 2, c.d_key = c.d_value = 4, c.d_model = 8, c.d_inner_hid = 16;
    CHECK(fl_model_encoder_layer(x, NULL, &c, "l0"));
    int drops = 0;
    for (int i = 0; i < fl_prog_num_ops(p); i++) drops += !strcmp(fl_prog_op_type(p, i), "dropout");
    CHECK_EQ_INT(drops, 4); /* attention weights, ffn hidden, two post-process "d" */
    CHECK(!fl_model_multi_head_attention(NULL, NULL, NULL, NULL, 4, 4, 8, 2, 0, "a", NULL));
    CHECK_STR_HAS(fl_last_error(), "queries is NULL");
    CHECK(!fl_model_multi_head_attention(x, NULL, NULL, NULL, 4, 4, 8, 0, 0, "a", NULL));
    CHECK_STR_HAS(fl_last_error(), "n_head 0");
    CHECK(!fl_model_multi_head_attention(x, NULL, NULL, NULL, 4, 4, 8, 2, 1.5f, "a", NULL));
    CHECK_STR_HAS(fl_last_error(), "dropout_rate");
    fl_var *bad = fl_layer_data(p, "bias3", FL_SHAPE(3, 3, 3), FL_FLOAT32, 0);
    CHECK(!fl_model_multi_head_attention(x, NULL, NULL, bad, 4, 4, 8, 2, 0, "a", NULL));
    CHECK_STR_HAS(fl_last_error(), "attn_bias");
    CHECK(!fl_model_positionwise_ffn(x, 16, 8, 0, "swish", "f", NULL));
    CHECK_STR_HAS(fl_last_error(), "hidden_act");
    CHECK(!fl_model_pre_post_process(NULL, x, "anx", 0, "pp", NULL));
    CHECK_STR_HAS(fl_last_error(), "unknown command 'x'");
    c.n_layer = 0;
    CHECK(!fl_model_encoder(x, NULL, &c, "e", NULL));
    CHECK_STR_HAS(fl_last_error(), "n_layer 0");
    fl_prog_free(p);
}

TEST_MAIN(T(grad_self_and_cross_attention), T(mask_hides_keys), T(grad_encoder_post_norm_bert),
          T(grad_encoder_pre_norm_transformer), T(blocks_dropout_and_errors))
