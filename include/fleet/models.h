/*
 * fleet/models.h - model builders shared by the examples, the benchmarks and the tests.
 *
 * Every builder has the same shape: a config struct whose defaults come from
 * fl_model_<name>_default() (other presets from fl_model_<name>_<preset>()), an outputs
 * struct of the variables a caller feeds and fetches, and fl_model_<name>_build(p, cfg, out),
 * which appends the data layers, the network and the loss to program p (and the
 * initializers to its startup program) in a fixed order, so a config built into a new
 * program always gets the same parameter names and initial values.  The variables in *out belong to p and live
 * until fl_prog_free(p); the config is read during the call only.  Building into one program
 * from several threads at once is not supported.  A build returns FL_OK, FL_EINVAL naming
 * the bad configuration field, or the program's build error (which p keeps).  The builders
 * add no optimizer: call fl_opt_minimize on out->loss.
 *
 * Not here: data readers and training loops (the examples keep their own).
 */
#ifndef FLEET_MODELS_H
#define FLEET_MODELS_H

#include "fleet/graph.h"
#include "fleet/exec.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- CTR-DNN ------------------------------------------------------------------------------
 *
 * Paddle's click-through-rate example network (FleetX examples/ctr, network_conf.py): a
 * dense_input float[13] slot, sparse slots C1..C26 (int64, LoD) looked up in one shared
 * embedding table "SparseFeatFactors" [sparse_feature_dim, 10] (is_sparse; is_distributed
 * puts it on the parameter servers), each slot sum-pooled, concatenated with the dense
 * input (26 x 10 + 13 = 273), three fc 400 relu layers and an fc 2 softmax (weights
 * Normal(0, 1/sqrt(fan_in))), cross-entropy summed over the batch (Paddle's reduce_sum; mean
 * with loss_mean = 1), and Paddle's auc (4096 thresholds, 20 slide steps). */

#define FL_MODEL_CTR_MAX_SLOTS 64
#define FL_MODEL_CTR_MAX_LAYERS 8

typedef struct {
    int64_t sparse_feature_dim;          /* rows of the shared table (default 1000001) */
    int embedding_size;                  /* default 10 */
    int num_sparse_slots;                /* default 26 (C1..C26) */
    int dense_dim;                       /* default 13 */
    int is_sparse;                       /* default 1: SelectedRows gradient for the table */
    int is_distributed;                  /* default 0: 1 keeps the table on the servers */
    int hidden[FL_MODEL_CTR_MAX_LAYERS]; /* default 400, 400, 400 */
    int nhidden;
    int loss_mean; /* default 0: reduce_sum of the cross-entropy, as Paddle */
} fl_model_ctr_dnn_config;

typedef struct {
    fl_var *dense_input;
    fl_var *sparse[FL_MODEL_CTR_MAX_SLOTS];
    fl_var *label;
    fl_var *predict;       /* [N, 2] probabilities */
    fl_var *loss;          /* [1] */
    fl_var *auc;           /* global AUC, float64 [1] */
    fl_var *batch_auc;     /* AUC of the last 20 batches */
    fl_var *auc_states[4]; /* the AUC's persistable statistics: zero them (fl_scope_zero)
                            * to evaluate afresh */
    int nauc_states;
    /* dataset slots in Paddle's order: dense_input, C1..C26, label */
    fl_var *use_var[FL_MODEL_CTR_MAX_SLOTS + 2];
    int nuse_var;
    /* the cross-entropy's mean over the batch, whatever loss_mean says: fetch it to watch
     * the loss per example (loss itself is the sum by default) */
    fl_var *avg_loss;
} fl_model_ctr_dnn;

FL_API fl_model_ctr_dnn_config fl_model_ctr_dnn_default(void);
/* Builds the network into p (whose startup program gets the initializers).  Errors name
 * the bad configuration field; the program keeps its build error otherwise. */
FL_API int fl_model_ctr_dnn_build(fl_prog *p, const fl_model_ctr_dnn_config *cfg, fl_model_ctr_dnn *out);

/* ---- MLP -----------------------------------------------------------------------------------
 *
 * data input float32 [N, input_dim] -> fc hidden[0] act -> ... -> fc hidden[nhidden-1] act
 * -> fc num_classes softmax -> cross_entropy with data label int64 [N, 1] -> mean.  fc
 * weights use Paddle's default (Xavier uniform), biases start at 0.  Presets: the
 * quick-start network (the seed's nets.py; default) and the Fashion-MNIST MLP. */

#define FL_MODEL_MLP_MAX_LAYERS 8

typedef struct {
    const char *input_name;              /* default "x" */
    const char *label_name;              /* default "y" */
    int input_dim;                       /* default 32 */
    int hidden[FL_MODEL_MLP_MAX_LAYERS]; /* default 128, 128 */
    int nhidden;
    const char *act; /* activation of the hidden layers: default "tanh"; NULL for none */
    int num_classes; /* default 2 */
    /* default NULL: Paddle's automatic parameter names (fc_0.w_0, fc_0.b_0, ...).  "fc"
     * names layer k's weight and bias "fc<k>.w" and "fc<k>.b", k = 1, 2, ... (the names
     * of the reference dumps, tests/ref) */
    const char *param_prefix;
} fl_model_mlp_config;

typedef struct {
    fl_var *input;   /* float32 [N, input_dim] */
    fl_var *label;   /* int64 [N, 1], class ids in [0, num_classes) */
    fl_var *predict; /* [N, num_classes] probabilities */
    fl_var *loss;    /* [1], mean cross-entropy */
} fl_model_mlp;

/* The quick-start MLP: x[32] -> fc128 tanh -> fc128 tanh -> fc2 softmax. */
FL_API fl_model_mlp_config fl_model_mlp_default(void);
/* The Fashion-MNIST MLP: img[784] -> fc512 relu -> fc256 relu -> fc10 softmax, data "img"
 * and "label" (examples/fmnist/train_mlp.c). */
FL_API fl_model_mlp_config fl_model_mlp_fmnist(void);
/* Builds the network into p; see the top of this file for ownership and errors.  *out is
 * zeroed first, so its variables are NULL after a configuration error. */
FL_API int fl_model_mlp_build(fl_prog *p, const fl_model_mlp_config *cfg, fl_model_mlp *out);

/* ---- CNN -----------------------------------------------------------------------------------
 *
 * LeNet-style image classifier: data input float32 [N, channels, height, width] -> per conv
 * block: conv2d filters[i] kernel x kernel (stride 1, no padding) relu -> max pool2d pool x
 * pool (stride pool); then fc hidden[j] relu -> fc num_classes softmax -> cross_entropy with
 * data label int64 [N, 1] -> mean.  With batch_norm, each conv2d is followed by batch_norm
 * (momentum 0.9, epsilon 1e-5) and relu moves to it, as Paddle's recognize_digits conv
 * example.  conv2d filters are Normal(0, sqrt(2 / fan_in)) as Paddle's, fc weights Xavier.
 * The default is the Fashion-MNIST CNN of examples/fmnist/train_cnn.c:
 * img [1, 28, 28] -> conv 5x5 x20 -> pool 2 -> conv 5x5 x50 -> pool 2 -> fc500 -> fc10. */

#define FL_MODEL_CNN_MAX_LAYERS 8

typedef struct {
    const char *input_name;               /* default "img" */
    const char *label_name;               /* default "label" */
    int channels, height, width;          /* default 1, 28, 28 */
    int filters[FL_MODEL_CNN_MAX_LAYERS]; /* default 20, 50 */
    int nconv;
    int kernel;                          /* default 5 */
    int pool;                            /* default 2 */
    int batch_norm;                      /* default 0 */
    int hidden[FL_MODEL_CNN_MAX_LAYERS]; /* default 500 */
    int nhidden;
    int num_classes; /* default 10 */
} fl_model_cnn_config;

typedef struct {
    fl_var *input;   /* float32 [N, channels, height, width] */
    fl_var *label;   /* int64 [N, 1], class ids in [0, num_classes) */
    fl_var *predict; /* [N, num_classes] probabilities */
    fl_var *loss;    /* [1], mean cross-entropy */
} fl_model_cnn;

FL_API fl_model_cnn_config fl_model_cnn_default(void);
/* Builds the network into p; see the top of this file for ownership and errors.  *out is
 * zeroed first, so its variables are NULL after a configuration error.  The image must
 * stay at least 1 x 1 after every block (an error names the block otherwise).  To evaluate
 * with batch_norm's moving statistics, clone p for test (fl_prog_clone(p, 1)) before
 * minimize. */
FL_API int fl_model_cnn_build(fl_prog *p, const fl_model_cnn_config *cfg, fl_model_cnn *out);

/* ---- DeepFM and Wide&Deep -----------------------------------------------------------------
 *
 * Both read the CTR-DNN inputs (dense_input float[13], sparse slots C1..C26, label) and use
 * its configuration and outputs (fl_model_ctr_config / fl_model_ctr are the same types), so
 * the Criteo reader, the parameter-server rewrite and the AUC evaluation are shared.  The
 * click logit z [N, 1] becomes two-class logits [0, z], whose softmax is [1 - sigmoid(z),
 * sigmoid(z)]: predict is [N, 2] as CTR-DNN's and the loss is the sigmoid cross-entropy
 * (softmax_with_cross_entropy of the two-class logits), summed, or the mean with loss_mean.
 *
 * DeepFM (Fleet's examples/deepFM): z = first order + FM second order + DNN, where
 *   first order  = fc(dense_input, 1) + sum over slots of sum-pooled rows of
 *                  "FirstOrderWeights" [sparse_feature_dim, 1];
 *   second order = 0.5 * sum_k ((sum_i v_ik)^2 - sum_i v_ik^2) over the 26 slot vectors v_i
 *                  (sum-pooled rows of "SparseFeatFactors" [sparse_feature_dim, embedding_size]);
 *   DNN          = fc hidden... relu over concat(v_1..v_26, dense_input) -> fc 1.
 * Wide&Deep: z = wide + deep, wide being DeepFM's first-order term (a linear model of the
 * raw ids and the dense input) and deep its DNN.  Both tables are is_sparse and, with
 * is_distributed, live on the parameter servers.  Defaults: embedding_size 10, hidden
 * 400, 400, 400 (DeepFM) and 256, 128 (Wide&Deep), sparse_feature_dim 1000001. */

typedef fl_model_ctr_dnn_config fl_model_ctr_config;
typedef fl_model_ctr_dnn fl_model_ctr;

FL_API fl_model_ctr_config fl_model_deepfm_default(void);
FL_API int fl_model_deepfm_build(fl_prog *p, const fl_model_ctr_config *cfg, fl_model_ctr *out);
FL_API fl_model_ctr_config fl_model_wide_deep_default(void);
FL_API int fl_model_wide_deep_build(fl_prog *p, const fl_model_ctr_config *cfg, fl_model_ctr *out);

/* ---- ResNet --------------------------------------------------------------------------------
 *
 * He et al.'s residual networks (NCHW, float32).  depth picks the blocks:
 *   6n + 2 (8, 14, 20, 32, 44, 56, 110): the CIFAR network, three stages of n basic blocks
 *            (two conv 3x3 + batch_norm) with base_filters x 1, 2, 4 channels;
 *   18, 34:  four stages of basic blocks (2,2,2,2 / 3,4,6,3), base_filters x 1, 2, 4, 8;
 *   50, 101, 152: four stages of bottleneck blocks (1x1, 3x3, 1x1 x4; 3,4,6,3 / 3,4,23,3 /
 *            3,8,36,3), Paddle's ResNet50 of the lightning seed at base_filters 64.
 * Every stage after the first halves the image: stride 2 on the block's first 3x3 conv, in a
 * bottleneck its 3x3 (ResNet v1.5, as PaddleCV's ResNet50 and torchvision's resnet50), or its
 * first 1x1 with stride_in_1x1 (ResNet v1, the original paper's Caffe model, about 6% fewer
 * multiply-adds at 224); a block whose shape changes adds a 1x1 conv + batch_norm
 * projection to its shortcut; each block ends relu(branch + shortcut).  Stem: conv 3x3
 * stride 1 + batch_norm relu (imagenet_stem 0, for small images), or conv 7x7 stride 2 +
 * batch_norm relu + max pool 3x3 stride 2 (imagenet_stem 1).  Then global average pool ->
 * fc num_classes softmax -> cross_entropy with label int64 [N, 1] -> mean.  Convolutions
 * have no bias (batch_norm follows); batch_norm momentum 0.9, epsilon 1e-5.  To evaluate
 * with the moving statistics, clone p for test (fl_prog_clone(p, 1)) before minimize. */

typedef struct {
    const char *input_name;       /* default "img" */
    const char *label_name;       /* default "label" */
    int channels, height, width;  /* default 1, 28, 28 (Fashion-MNIST) */
    int depth;                    /* default 20 */
    int base_filters;             /* default 16 */
    int imagenet_stem;            /* default 0 */
    int num_classes;              /* default 10 */
    int stride_in_1x1;            /* default 0: bottleneck stride on the 3x3 (v1.5); 1: on the first 1x1 (v1) */
} fl_model_resnet_config;

typedef struct {
    fl_var *input;   /* float32 [N, channels, height, width] */
    fl_var *label;   /* int64 [N, 1] */
    fl_var *predict; /* [N, num_classes] probabilities */
    fl_var *loss;    /* [1], mean cross-entropy */
} fl_model_resnet;

/* ResNet-20 for 1 x 28 x 28 images, 10 classes. */
FL_API fl_model_resnet_config fl_model_resnet_default(void);
/* ResNet-50 for 3 x 224 x 224 images, 1000 classes (set height, width, num_classes for
 * other data). */
FL_API fl_model_resnet_config fl_model_resnet50(void);
/* Builds the network into p; errors name the bad field (an unsupported depth).  Every
 * stride-2 layer pads, so any image size of at least 1 x 1 builds.  *out is zeroed first. */
FL_API int fl_model_resnet_build(fl_prog *p, const fl_model_resnet_config *cfg, fl_model_resnet *out);

/* ---- VGG -----------------------------------------------------------------------------------
 *
 * Simonyan and Zisserman's VGG (NCHW, float32), as the VGG16 of Fleet's collective benchmark
 * (vgg_benchmark.py): five stages of conv 3x3 pad 1 (+bias) relu, each ending in a 2x2 max
 * pool of stride 2, with base_filters x 1, 2, 4, 8, 8 channels and 1,1,2,2,2 (depth 11),
 * 2,2,2,2,2 (13), 2,2,3,3,3 (16) or 2,2,4,4,4 (19) convolutions; then fc fc_dim relu dropout,
 * fc fc_dim relu dropout (Paddle's downgrade_in_infer), fc num_classes softmax ->
 * cross_entropy with label int64 [N, 1] -> mean.  The image must be at least 32 x 32 (five
 * halvings).  Clone p for test (fl_prog_clone(p, 1)) before minimize to evaluate without
 * dropout. */
typedef struct {
    const char *input_name;      /* default "img" */
    const char *label_name;      /* default "label" */
    int channels, height, width; /* default 3, 224, 224 */
    int depth;                   /* 11, 13, 16, 19 (default 16) */
    int base_filters;            /* default 64 */
    int fc_dim;                  /* default 4096 */
    float dropout;               /* default 0.5 (0: none) */
    int num_classes;             /* default 1000 */
} fl_model_vgg_config;

typedef struct {
    fl_var *input;   /* float32 [N, channels, height, width] */
    fl_var *label;   /* int64 [N, 1] */
    fl_var *predict; /* [N, num_classes] probabilities */
    fl_var *loss;    /* [1], mean cross-entropy */
} fl_model_vgg;

/* VGG-16 for 3 x 224 x 224 images, 1000 classes. */
FL_API fl_model_vgg_config fl_model_vgg16(void);
/* Builds the network into p; errors name the bad field.  *out is zeroed first. */
FL_API int fl_model_vgg_build(fl_prog *p, const fl_model_vgg_config *cfg, fl_model_vgg *out);
/* ---- Transformer building blocks (src/models/attention.c) ---------------------------------
 *
 * The blocks of Paddle's Transformer and BERT benchmarks (model.py, transformer_encoder.py),
 * with their signatures and parameter names.  Each appends layers to the program of its
 * input and returns the output variable, or NULL with fl_last_error() naming the block and
 * the bad argument (or the program's build error).  Inputs are float32 [N, S, d] (batch,
 * sequence, features; S may be -1).  A name prefix `name` gives the parameters Paddle's
 * names ("<name>_query_fc.w_0", "<name>_ffn_fc_0.b_0", "<name>_layer_norm_scale", ...); NULL
 * or "" gives automatic names (fc_<k>.w_0 ...).  As in Paddle, building a block again with
 * the same name shares its parameters (same shapes), a different shape is a build error. */

/* What the two benchmark models do differently.  Zero-initialised fields are the defaults
 * (fl_model_attn_attr_default() returns them): */
typedef struct {
    fl_initializer init;                /* weights of every fc (FL_INIT_DEFAULT: Xavier, Paddle's
                                         * fc default; BERT: truncated normal(0, initializer_range)) */
    int attn_no_bias;                   /* 1: the q, k, v and output fcs have no bias (Paddle's
                                         * Transformer); 0: biases "<name>_*_fc.b_0" (BERT) */
    int gelu_approximate;               /* gelu's tanh form (0: erf, BERT's) */
    float layer_norm_epsilon;           /* default 1e-5 (Paddle's layer_norm) */
    const char *dropout_implementation; /* NULL: "upscale_in_train", as both models */
} fl_model_attn_attr;
FL_API fl_model_attn_attr fl_model_attn_attr_default(void);

/* Paddle's multi_head_attention: q = fc(queries, d_key * n_head), k = fc(keys, d_key * n_head),
 * v = fc(values, d_value * n_head) (over the last dim), each split into n_head heads
 * [N, n_head, S, d]; weights = dropout(softmax(q k^T / sqrt(d_key) + attn_bias)); context
 * = weights v, heads combined -> fc(d_model) -> [N, Sq, d_model].  keys NULL means queries,
 * values NULL means keys (self-attention); cross-attention passes the encoder output as
 * keys and values (Sk may differ from Sq).  attn_bias (NULL: none) is an additive mask,
 * float32 [N, n_head, Sq, Sk], or [N, 1, Sq, Sk] / [N, Sq, Sk], broadcast over the heads
 * (expand); it gets no gradient of use (mark it stop_gradient).  dropout_rate in [0, 1)
 * drops attention weights (0: no dropout op).  Parameters: <name>_query_fc, _key_fc,
 * _value_fc, _output_fc (.w_0 and, unless attr->attn_no_bias, .b_0).  attr NULL: defaults. */
FL_API fl_var *fl_model_multi_head_attention(fl_var *queries, fl_var *keys, fl_var *values, fl_var *attn_bias, int d_key,
                                             int d_value, int d_model, int n_head, float dropout_rate, const char *name,
                                             const fl_model_attn_attr *attr);
/* Paddle's positionwise_feed_forward: fc(d_inner_hid, hidden_act) -> dropout(dropout_rate)
 * -> fc(d_hid), over the last dim.  hidden_act "relu" or "gelu" (erf form unless
 * attr->gelu_approximate), NULL for none.  Parameters <name>_fc_0 and <name>_fc_1 (.w_0,
 * .b_0). */
FL_API fl_var *fl_model_positionwise_ffn(fl_var *x, int d_inner_hid, int d_hid, float dropout_rate, const char *hidden_act,
                                         const char *name, const fl_model_attn_attr *attr);
/* Paddle's pre_post_process_layer: applies cmd left to right to out: 'a' adds the residual
 * prev_out (skipped when prev_out is NULL), 'n' layer_norm over the last dim (scale
 * "<name>_layer_norm_scale" init 1, bias "<name>_layer_norm_bias" init 0), 'd' dropout of
 * dropout_rate (none when 0).  cmd NULL or "" returns out unchanged; another letter is
 * FL_EINVAL.  pre_process_layer is this with prev_out NULL. */
FL_API fl_var *fl_model_pre_post_process(fl_var *prev_out, fl_var *out, const char *cmd, float dropout_rate,
                                         const char *name, const fl_model_attn_attr *attr);

/* An encoder (Paddle's encoder / encoder_layer).  BERT: preprocess_cmd "", postprocess_cmd
 * "dan" (post-norm), hidden_act "gelu"; the Transformer: "n" and "da" (pre-norm), "relu". */
typedef struct {
    int n_layer, n_head, d_key, d_value, d_model, d_inner_hid;     /* default 6, 8, 64, 64, 512, 2048 */
    float prepostprocess_dropout, attention_dropout, relu_dropout; /* default 0.1 each */
    const char *hidden_act;                                        /* default "relu" */
    const char *preprocess_cmd, *postprocess_cmd;                  /* default "n", "da" */
    fl_model_attn_attr attr;                                       /* default fl_model_attn_attr_default() */
} fl_model_encoder_config;
/* The Transformer-base encoder: the defaults above. */
FL_API fl_model_encoder_config fl_model_encoder_default(void);
/* One layer: x = pre(enc_input) -> self-attention (attn_bias) -> post(enc_input, .) = a;
 * pre(a) -> ffn -> post(a, .).  Names: <name>_pre_att, <name>_multi_head_att,
 * <name>_post_att, <name>_pre_ffn, <name>_ffn, <name>_post_ffn. */
FL_API fl_var *fl_model_encoder_layer(fl_var *enc_input, fl_var *attn_bias, const fl_model_encoder_config *c,
                                      const char *name);
/* n_layer layers named <name>_layer_<i>, then pre_process(preprocess_cmd) named
 * <name>_post_encoder ("post_encoder" when name is empty) -> [N, S, d_model].
 * layer_outputs (NULL, or room for n_layer variables) gets each layer's output: the
 * recompute checkpoints (fl_opt_set_recompute). */
FL_API fl_var *fl_model_encoder(fl_var *enc_input, fl_var *attn_bias, const fl_model_encoder_config *c, const char *name,
                                fl_var **layer_outputs);

/* ---- BERT pre-training (src/models/bert.c, bert_data.c) ------------------------------------
 *
 * Paddle's BERT of the Fleet collective benchmark (model/bert.py): data src_ids, pos_ids,
 * sent_ids int64 [N, S, 1] and input_mask float32 [N, S, 1] (1 for tokens, 0 for padding);
 * embeddings "word_embedding" [vocab_size, H], "pos_embedding" [max_position_embeddings, H],
 * "sent_embedding" [type_vocab_size, H] summed, layer_norm and dropout ("pre_encoder"); the
 * self-attention bias (input_mask input_mask^T - 1) * 10000 stacked over the heads; the
 * encoder of the blocks above named "encoder" (post-norm "dan", hidden_act, no dropout in
 * the ffn); pooled = fc(H, tanh) of position 0 ("pooled_fc"); masked LM: the rows mask_pos
 * (int64 [M, 1], indices into the [N * S, H] flattened output, as Paddle's reader writes
 * them) -> fc(H, hidden_act) "mask_lm_trans_fc" -> layer_norm (scale 1, bias 1 as Paddle's
 * initializers) -> matmul with word_embedding transposed (weight_sharing) + bias
 * "mask_lm_out_fc.b_0" [vocab_size] -> softmax cross-entropy with mask_label int64 [M, 1];
 * next sentence: fc(2) "next_sent_fc" of pooled -> softmax cross-entropy with labels int64
 * [N, 1].  loss = mean masked-LM loss + mean next-sentence loss.  Weights are truncated
 * normal(0, initializer_range), biases 0, layer norms 1 and 0 (epsilon 1e-5). */

#define FL_MODEL_BERT_MAX_LAYERS 48
#define FL_MODEL_BERT_MAX_HEADS 64

typedef struct {
    int64_t vocab_size;                 /* default 21128 (the demo's vocab.txt) */
    int hidden_size;                    /* default 768 */
    int num_hidden_layers;              /* default 12 */
    int num_attention_heads;            /* default 12 */
    int intermediate_size;              /* default 3072 */
    char hidden_act[16];                /* "gelu" (default, erf form) or "relu" */
    float hidden_dropout_prob;          /* default 0.1 */
    float attention_probs_dropout_prob; /* default 0.1 */
    int max_position_embeddings;        /* default 512 */
    int type_vocab_size;                /* default 2 */
    float initializer_range;            /* default 0.02 */
    int weight_sharing;                 /* default 1: the masked-LM output is the word embedding */
} fl_model_bert_config;

typedef struct {
    fl_var *src_ids, *pos_ids, *sent_ids, *input_mask; /* [N, S, 1] */
    fl_var *mask_label, *mask_pos;                     /* int64 [M, 1] */
    fl_var *labels;                                    /* int64 [N, 1], 1 = the true next sentence */
    fl_var *enc_out;                                   /* [N, S, H] */
    fl_var *pooled;                                    /* [N, H] */
    fl_var *mlm_logits;                                /* [M, vocab_size] */
    fl_var *nsp_prob;                                  /* [N, 2] */
    fl_var *mlm_loss, *nsp_loss, *loss;                /* [1] each */
    fl_var *mlm_acc, *nsp_acc;                         /* top-1 accuracies of the batch, [1] */
    fl_var *feeds[7]; /* src_ids, pos_ids, sent_ids, input_mask, mask_label, mask_pos, labels */
    int nfeeds;
    fl_var *checkpoints[FL_MODEL_BERT_MAX_LAYERS]; /* each encoder layer's output (recompute) */
    int ncheckpoints;
} fl_model_bert;

/* BERT-base with the demo vocabulary (the demo's bert_config.json). */
FL_API fl_model_bert_config fl_model_bert_default(void);
/* Reads Paddle's bert_config.json: the keys of the struct above (others are ignored; a
 * missing key keeps the default).  Errors name the file and the key (FL_EINVAL), FL_EIO for
 * an unreadable file. */
FL_API int fl_model_bert_config_load(const char *path, fl_model_bert_config *out);
/* Builds the network into p; *out is zeroed first. */
FL_API int fl_model_bert_build(fl_prog *p, const fl_model_bert_config *cfg, fl_model_bert *out);

/* The reader of Paddle's BERT pre-training data (the demo's demo_wiki_*.gz): files of lines
 * `token_ids;sent_ids;pos_ids;label` (ids separated by blanks; gzip or plain text), a
 * sentence pair per line, label 1 for a true next sentence.  As Paddle's
 * reader/pretraining.py: lines longer than max_seq_len are skipped; with
 * generate_neg_sample every line must be a true pair, and each buffer of 1000 lines is
 * shuffled, example i's first sentence (through its first sep_id) is joined to example
 * i + 1's second sentence as a false pair (label 0; missed when max_seq_len or longer), and
 * the 2x examples are shuffled; batches hold batch_size examples (in_tokens: as many as fit
 * batch_size padded tokens); in each batch 15% of the tokens other than cls_id / sep_id are
 * predicted (80% of them replaced by mask_id, 10% by a random id in [1, vocab_size), 10%
 * kept; a line with none gets one [MASK]); then padding to the batch's longest line.
 * The demo's lines start with id 1 and end each sentence with id 2 (ERNIE's [CLS] and
 * [SEP]; its vocab.txt names [CLS], [SEP], [MASK] 101, 102, 103), hence the defaults.
 * Determinism: the order of a pass depends on (seed, epoch), a batch's masks on (seed,
 * epoch, batch index): the same whatever threads.  A malformed line fails create with
 * FL_ECORRUPT "FILE:LINE: what". */
typedef struct {
    int max_seq_len;                         /* default 512 */
    int batch_size;                          /* default 32 examples */
    int in_tokens;                           /* default 0: batch_size counts padded tokens when 1 */
    int generate_neg_sample;                 /* default 1 */
    int shuffle;                             /* default 0: without negatives, keep file order unless 1 */
    int threads;                             /* batch-preparing threads, default 1 (at most 32) */
    uint64_t seed;                           /* default 1 */
    int64_t vocab_size;                      /* default 21128; every id must be below it */
    int64_t pad_id, cls_id, sep_id, mask_id; /* default 0, 1, 2, 3 (the demo data's) */
    int rank, nranks;                        /* default 0, 1: this rank reads batches rank, rank + nranks, ... */
} fl_model_bert_reader_opts;

typedef struct fl_model_bert_reader fl_model_bert_reader;

/* A batch: tensors in fl_model_bert.feeds order, owned by the batch (freed by the next
 * fl_model_bert_reader_next into it or by fl_model_bert_batch_clear); feed is ready for
 * fl_exe_run (names src_ids ... labels). */
typedef struct {
    fl_tensor *t[7];
    fl_feed feed[7];
    int examples, masked; /* examples and predicted tokens */
    int64_t tokens;       /* unpadded tokens */
} fl_model_bert_batch;

FL_API fl_model_bert_reader_opts fl_model_bert_reader_default(void);
/* Reads every line of files into memory (o NULL: defaults).  Errors name the option, or the
 * file and line. */
FL_API int fl_model_bert_reader_create(const char *const *files, int nfiles, const fl_model_bert_reader_opts *o,
                                       fl_model_bert_reader **out);
/* Stops a pass (joins its threads) and frees.  NULL ok. */
FL_API void fl_model_bert_reader_free(fl_model_bert_reader *r);
/* Lines kept (true pairs of at most max_seq_len tokens). */
FL_API int64_t fl_model_bert_reader_num_lines(const fl_model_bert_reader *r);
/* Starts pass `epoch` (ending one in progress): orders the examples, then threads prepare
 * the batches ahead of fl_model_bert_reader_next (at most 2 per thread). */
FL_API int fl_model_bert_reader_begin(fl_model_bert_reader *r, int epoch);
/* Batches of this rank in the pass begun. */
FL_API int64_t fl_model_bert_reader_num_batches(const fl_model_bert_reader *r);
/* Batches of every rank together in the pass begun (collective training runs
 * total / nranks steps on each rank, so that every rank makes the same allreduces). */
FL_API int64_t fl_model_bert_reader_total_batches(const fl_model_bert_reader *r);
/* The next batch of this rank: 1, 0 at the end of the pass, < 0 on error.  Waits for the
 * threads at most 600 s (FL_ETIMEDOUT).  One caller thread. */
FL_API int fl_model_bert_reader_next(fl_model_bert_reader *r, fl_model_bert_batch *b);
FL_API void fl_model_bert_batch_clear(fl_model_bert_batch *b);

/* The planted BERT corpus of `fleet-datagen bert` (src/models/bert_gen.c, docs/datagen.md):
 * lines of the demo format above, [CLS] A [SEP] B [SEP], label 1, with ids into the written
 * vocab.txt ([PAD] 0, [CLS] 1, [SEP] 2, [MASK] 3, [UNK] 4, then function words shared by
 * every topic, then each topic's own words).  A line is a document: a topic drawn
 * uniformly, then its two sentences A and B, each a first-order Markov chain over the
 * topic's words (the function words and its own): the first word uniform over the topic's
 * own words, each next word with probability 1 - noise one of `successors` successors of
 * the previous word in that topic (weights 2^-k), else uniform over the topic's words;
 * min_len..max_len words each, the length uniform.  The reader's negatives (A of one line,
 * B of another) thus differ in topic but in one case out of `topics`.
 * The ceilings are the Bayes-optimal accuracies under this generator and the reader's
 * masking (15%; 80% [MASK], 10% a random id below vocab_size, 10% kept; one [MASK] when a
 * line has none; half the examples negatives), computed exactly by forward-backward over
 * each sentence under every topic and both pair hypotheses, on the test lines with masks and
 * negatives drawn as the reader draws them; the accuracy of a model is below them up to the
 * sampling error (the _se fields).  The unigram baseline is the share of the most frequent
 * word among the predicted tokens. */
typedef struct {
    int64_t lines;         /* training lines (required, >= 1) */
    int64_t test_lines;    /* default -1: lines / 10, at least 1 */
    int files;             /* training files part-NNNNN.gz (default 1; the test split is one file) */
    uint64_t seed;         /* default 1 */
    int topics;            /* default 32 */
    int topic_words;       /* each topic's own words, default 64 */
    int function_words;    /* words of every topic, default 32 */
    int successors;        /* likely successors of a word in a topic, default 4 (<= its words) */
    double noise;          /* share of uniform next words, default 0.1, in [0, 1] */
    int shared_grammar;    /* 1: a word's successors are the same slots in every topic (one grammar,
                            * each topic its own words); default 0: drawn per topic */
    int min_len, max_len;  /* words per sentence, default 8, 60 (lines of at most 123 tokens) */
    int64_t ceiling_lines; /* test lines the ceilings average over, default 4000 (0: all) */
} fl_model_bert_datagen;

typedef struct {
    int64_t vocab_size;                       /* with the five marks */
    int64_t train_tokens, test_tokens;        /* tokens of the lines, marks included */
    int64_t ceiling_examples, ceiling_masked; /* what the ceilings average over */
    double mlm_ceiling, mlm_ceiling_se;       /* Bayes-optimal masked-LM accuracy, its standard error */
    double nsp_ceiling, nsp_ceiling_se;       /* Bayes-optimal next-sentence accuracy */
    double mlm_unigram;                       /* the unigram baseline */
} fl_model_bert_datagen_info;

FL_API fl_model_bert_datagen fl_model_bert_datagen_default(void);
/* Writes DIR/train/part-NNNNN.gz, DIR/test/part-00000.gz, DIR/vocab.txt,
 * DIR/bert_config.json (the demo's, with this vocab_size) and DIR/planted.json (options
 * and ceilings); each file atomically, byte-identical for the same configuration. */
FL_API int fl_model_bert_generate(const fl_model_bert_datagen *g, const char *out, fl_model_bert_datagen_info *info);

/* ---- text models: simnet-bow and word2vec ------------------------------------------------
 *
 * Each model has a builder (as above), a data reader setup (a dataset whose slots are the
 * model's data variables), a data generator with planted structure (at the end of this
 * section; `fleet-datagen simnet` and `fleet-datagen word2vec` call them, docs/datagen.md)
 * and an evaluation function that computes the model's metric on held-out data with a
 * trained executor.  examples/simnet/train.c and examples/word2vec/train.c train them
 * locally and with parameter servers (docs/models_text.md). */
#include "fleet/data.h"
#include "fleet/exec.h"

/* simnet-bow, Fleet's examples/simnet_bow: query, positive title and negative title are
 * bags of word ids (int64 [N, 1], LoD) looked up in one shared embedding table "__emb__"
 * [dict_dim, emb_dim], each sum-pooled and passed through softsign; the query through fc
 * "__q_fc__" and both titles through the shared fc "__fc__" (hid_dim, no activation);
 * cos_pos = cos_sim(q, pos), cos_neg = cos_sim(q, neg); loss = mean(max(0, margin - cos_pos
 * + cos_neg)).  Differences from the example: the embedding starts Uniform(-0.1, 0.1) and
 * the fc weights Xavier (the example's Constant(0.01) keeps every hidden unit identical, so
 * its cosines stay at 1), and the unused label slot is left out.  The metric is the
 * positive-negative order rate: the share of triples with cos_pos > cos_neg (ties 1/2). */
typedef struct {
    int64_t dict_dim;   /* rows of "__emb__" (default 1451594, the example's) */
    int emb_dim;        /* default 128 */
    int hid_dim;        /* default 128 */
    float margin;       /* default 0.1 */
    int is_sparse;      /* default 1 */
    int is_distributed; /* default 0: 1 keeps "__emb__" on the parameter servers */
} fl_model_simnet_config;

typedef struct {
    fl_var *query, *pos_title, *neg_title; /* int64 [N, 1], lod_level 1 */
    fl_var *cos_pos, *cos_neg;             /* [N, 1] */
    fl_var *loss;                          /* [1] */
    fl_var *use_var[3];                    /* dataset slots: query, pos_title, neg_title */
    int nuse_var;
} fl_model_simnet;

FL_API fl_model_simnet_config fl_model_simnet_default(void);
FL_API int fl_model_simnet_build(fl_prog *p, const fl_model_simnet_config *cfg, fl_model_simnet *out);
/* A dataset of kind ("QueueDataset" or "InMemoryDataset") over MultiSlot files of
 * `fleet-datagen simnet` (per line: query ids, positive title ids, negative title ids),
 * with the model's slots.  NULL + fl_last_error() on failure. */
FL_API fl_dataset *fl_model_simnet_dataset(const fl_model_simnet *m, const char *kind, int batch_size, int thread,
                                           const char *const *files, int nfiles);
/* Order rate of test (a program holding m's network, typically fl_prog_clone(main, 1)) on
 * files, run on exe (trained).  *pairs gets the triples read; no triple is an error. */
FL_API int fl_model_simnet_eval(fl_exe *exe, fl_prog *test, const fl_model_simnet *m, const char *const *files, int nfiles,
                                double *order_rate, int64_t *pairs);

/* word2vec, Fleet's examples/word2vec: skip-gram with negative sampling.  Data input_word,
 * true_word int64 [N, 1] and neg_word int64 [N, neg_num]; input embedding "emb" [dict_size,
 * embedding_size] (Uniform(-0.5/size, 0.5/size)), output embedding "emb_w" and bias "emb_b"
 * [dict_size, 1] (zeros); true logit = <emb[in], emb_w[true]> + emb_b[true], negative
 * logits = matmul([N, 1, D], [N, K, D]^T) + emb_b[neg]; loss = mean over the batch of the
 * sigmoid cross-entropy of the true logit against 1 plus the negatives' against 0.  The
 * reader does what the original word2vec does: a vocabulary sorted by count (dict file
 * `word count` per line, id = line number), subsampling of frequent words (keep
 * probability (sqrt(f / (t N)) + 1) t N / f), a window b drawn uniformly from [1, window]
 * on each side, and neg_num negatives per pair drawn from count^0.75. */
typedef struct {
    int64_t dict_size;  /* rows of the tables (the vocabulary; required) */
    int embedding_size; /* default 300 */
    int neg_num;        /* default 5 */
    int is_sparse;      /* default 1 */
    int is_distributed; /* default 0: 1 keeps the three tables on the parameter servers */
} fl_model_word2vec_config;

typedef struct {
    fl_var *input_word, *true_word, *neg_word;
    fl_var *emb; /* [N, embedding_size]: the input embedding of input_word (what eval reads) */
    fl_var *loss;
    fl_var *use_var[3];
    int nuse_var;
} fl_model_word2vec;

FL_API fl_model_word2vec_config fl_model_word2vec_default(void);
FL_API int fl_model_word2vec_build(fl_prog *p, const fl_model_word2vec_config *cfg, fl_model_word2vec *out);

/* A vocabulary read from a dict file (`word count` per line, counts not increasing). */
typedef struct fl_model_word2vec_vocab fl_model_word2vec_vocab;
FL_API int fl_model_word2vec_vocab_load(const char *path, fl_model_word2vec_vocab **out);
FL_API void fl_model_word2vec_vocab_free(fl_model_word2vec_vocab *v);
FL_API int64_t fl_model_word2vec_vocab_size(const fl_model_word2vec_vocab *v);
/* Id of word (len bytes), or -1. */
FL_API int64_t fl_model_word2vec_vocab_id(const fl_model_word2vec_vocab *v, const char *word, size_t len);

typedef struct {
    int window;    /* default 5 */
    double sample; /* subsampling threshold t, default 1e-3 (0: none) */
    int neg_num;   /* default 5 */
    uint64_t seed; /* default 1; each corpus file draws from a stream of (seed, its file name) */
} fl_model_word2vec_sampling;
FL_API fl_model_word2vec_sampling fl_model_word2vec_sampling_default(void);
/* Reads corpus (text, one sentence per line, words separated by blanks; words not in v are
 * skipped) and writes the training pairs as MultiSlot lines `1 in 1 true K neg...` to out
 * (NAME.tmp, renamed when complete).  *pairs (may be NULL) gets the number written. */
FL_API int fl_model_word2vec_make_samples(const fl_model_word2vec_vocab *v, const fl_model_word2vec_sampling *s,
                                          const char *corpus, const char *out, int64_t *pairs);
/* A dataset over sample files with the model's slots (see fl_model_simnet_dataset). */
FL_API fl_dataset *fl_model_word2vec_dataset(const fl_model_word2vec *m, const char *kind, int batch_size, int thread,
                                             const char *const *files, int nfiles);

typedef struct {
    double cluster_acc; /* share of clustered words whose nearest neighbour is in their cluster */
    double analogy_acc; /* share of analogies a b c d where d is nearest b - a + c */
    int64_t clustered_words, analogies;
} fl_model_word2vec_metrics;
/* Reads every word's input embedding through test (feeding ids, so with parameter servers
 * the rows come from the servers) and scores the planted structure: clusters (one cluster per
 * line, its words separated by blanks) by the cosine nearest neighbour among all clustered
 * words, analogies (lines `a b c d`) by 3CosAdd over the whole vocabulary less a, b and c.
 * An unknown word in either file is an error naming the file and line. */
FL_API int fl_model_word2vec_eval(fl_exe *exe, fl_prog *test, const fl_model_word2vec *m, const fl_model_word2vec_vocab *v,
                                  const char *clusters, const char *analogies, fl_model_word2vec_metrics *out);

/* ---- the text models' data generators (`fleet-datagen simnet` / `word2vec` call them) ----
 *
 * Each writes a data set with planted structure under out (created like mkdir -p): every
 * file to NAME.tmp, then renamed; the same configuration gives byte-identical files.  The
 * layouts, the planted models and the metrics' known best values are in docs/datagen.md.
 * Errors: FL_EINVAL naming the bad field, FL_EIO naming the path. */
typedef struct {
    int64_t rows;            /* training triples (required, >= 1) */
    int64_t test_rows;       /* default -1: rows / 5 */
    int files;               /* training files, default 1 (the test split is one file) */
    uint64_t seed;           /* default 1 */
    int topics, topic_words; /* default 20 topics of 50 words */
    int background;          /* default 200 words shared by every topic */
    double purity, mix;      /* default 0.6 own topic, 0.2 another topic, the rest background */
} fl_model_simnet_datagen;
typedef struct {
    int64_t dict_dim;                   /* topics * topic_words + background */
    double ceiling_train, ceiling_test; /* the Bayes order rate of each split (NAN if empty) */
} fl_model_simnet_datagen_info;
FL_API fl_model_simnet_datagen fl_model_simnet_datagen_default(void);
/* DIR/train/part-NNNNN, DIR/test/part-00000 (MultiSlot triples) and DIR/planted.json. */
FL_API int fl_model_simnet_generate(const fl_model_simnet_datagen *g, const char *out, fl_model_simnet_datagen_info *info);

typedef struct {
    int64_t sentences;       /* required, >= 1 */
    int files;               /* default 1 */
    uint64_t seed;           /* default 1 */
    int topics, topic_words; /* default 16 clusters of 8 words */
    int roles, role_words;   /* default 4 roles of 6 context words */
    int background;          /* default 300 Zipf-distributed words */
    int length;              /* default 12: sentences of length/2 .. length words */
} fl_model_word2vec_datagen;
typedef struct {
    int64_t dict_size, tokens, analogies, clustered_words;
    double chance_cluster_acc, chance_analogy_acc; /* the best reachable is 1 for both */
} fl_model_word2vec_datagen_info;
FL_API fl_model_word2vec_datagen fl_model_word2vec_datagen_default(void);
/* DIR/train/part-NNNNN (the corpus), DIR/dict.txt, DIR/clusters.txt, DIR/analogies.txt and
 * DIR/planted.json.  A corpus too small for every planted word to occur is FL_EINVAL. */
FL_API int fl_model_word2vec_generate(const fl_model_word2vec_datagen *g, const char *out,
                                      fl_model_word2vec_datagen_info *info);

#ifdef __cplusplus
}
#endif
#endif
