/*
 * app.c - the registry of standard models (one row each, see fleet/app.h) and their
 * options: defaults, setting by name, configuration files.
 */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app_internal.h"
#include "fleet/transformer.h"

/* ---- the rows --------------------------------------------------------------------------- */

/* "400,400,400" -> hidden[], nhidden; errors name the option. */
static int parse_hidden(const char *s, int *hidden, int *n)
{
    *n = 0;
    if (!*s) return FL_OK;
    const char *q = s;
    while (*q) {
        char *end;
        errno = 0;
        long v = strtol(q, &end, 10);
        if (end == q || v < 1 || v > 1 << 20 || errno || (*end && *end != ','))
            return fl__err(FL_EINVAL, "option hidden: expected sizes such as 400,400,400, got '%s'", s);
        if (*n == FL_MODEL_CTR_MAX_LAYERS)
            return fl__err(FL_EINVAL, "option hidden: at most %d layers, got '%s'", FL_MODEL_CTR_MAX_LAYERS, s);
        hidden[(*n)++] = (int)v;
        q = *end ? end + 1 : end;
    }
    return FL_OK;
}

static void set_str(char *dst, size_t cap, const char *s) { snprintf(dst, cap, "%s", s); }
#define SET(field, s) set_str(field, sizeof field, s)

/* CTR models share the inputs, the reader and the configuration. */
typedef int (*ctr_build_fn)(fl_prog *, const fl_model_ctr_config *, fl_model_ctr *);

static int build_ctr(fl_app_net *net, const fl_app_config *c, int is_distributed, fl_model_ctr_config mc, ctr_build_fn fn)
{
    mc.sparse_feature_dim = c->sparse_feature_dim;
    mc.embedding_size = c->embedding_size;
    mc.is_distributed = is_distributed;
    mc.loss_mean = 1;
    FL_CHECK(parse_hidden(c->hidden, mc.hidden, &mc.nhidden));
    fl_model_ctr m;
    FL_CHECK(fn(net->prog, &mc, &m));
    net->nfeeds = m.nuse_var;
    memcpy(net->feeds, m.use_var, (size_t)m.nuse_var * sizeof m.use_var[0]);
    net->predict = m.predict;
    net->loss = m.loss;
    return FL_OK;
}

static void ctr_defaults(fl_app_config *c, const char *hidden)
{
    SET(c->optimizer, "adam");
    c->lr = 0.001;
    c->batch_size = 256;
    c->epochs = 2;
    c->thread = 2;
    c->sparse_feature_dim = 1000001;
    c->embedding_size = 10;
    SET(c->hidden, hidden);
}

static void ctr_dnn_defaults(fl_app_config *c) { ctr_defaults(c, "400,400,400"); }
static void deepfm_defaults(fl_app_config *c) { ctr_defaults(c, "400,400,400"); }
static void wide_deep_defaults(fl_app_config *c) { ctr_defaults(c, "256,128"); }

static int ctr_dnn_build(fl_app_net *net, const fl_app_config *c, int d)
{
    return build_ctr(net, c, d, fl_model_ctr_dnn_default(), fl_model_ctr_dnn_build);
}
static int deepfm_build(fl_app_net *net, const fl_app_config *c, int d)
{
    return build_ctr(net, c, d, fl_model_deepfm_default(), fl_model_deepfm_build);
}
static int wide_deep_build(fl_app_net *net, const fl_app_config *c, int d)
{
    return build_ctr(net, c, d, fl_model_wide_deep_default(), fl_model_wide_deep_build);
}

/* The net of an image classifier (resnet, vgg): feeds image and label. */
static int classifier_net(fl_app_net *net, fl_var *input, fl_var *label, fl_var *predict, fl_var *loss)
{
    net->feeds[0] = input;
    net->feeds[1] = label;
    net->nfeeds = 2;
    net->predict = predict;
    net->loss = loss;
    return FL_OK;
}

static void resnet_defaults(fl_app_config *c)
{
    SET(c->optimizer, "momentum");
    c->lr = 0.05;
    c->momentum = 0.9;
    SET(c->lr_decay, "cosine");
    c->batch_size = 64;
    c->epochs = 1;
    c->thread = 1;
    c->depth = 20;
    c->width = 8;
}

static int resnet_build(fl_app_net *net, const fl_app_config *c, int is_distributed)
{
    fl_model_resnet_config rc = fl_model_resnet_default();
    rc.depth = c->depth;
    rc.base_filters = c->width;
    /* JPEG images: 3 x image_size x image_size, the classes the reader lists in train_data
     * (else test_data), ImageNet's stem from 64 x 64 up */
    const char *data = c->train_data[0] ? c->train_data : c->test_data;
    if (fl__app_is_images(data)) {
        FL_CHECK(fl__app_image_classes(c->train_data[0] ? "train_data" : "test_data", data, &rc.num_classes, NULL));
        rc.channels = 3;
        rc.height = rc.width = c->image_size;
        rc.imagenet_stem = c->image_size >= 64;
    }
    fl_model_resnet m;
    FL_CHECK(fl_model_resnet_build(net->prog, &rc, &m));
    return classifier_net(net, m.input, m.label, m.predict, m.loss);
}

/* VGG (Fleet's collective benchmark model): depth 11/13/16/19, width its first stage's
 * filters, hidden its two fc layers' width; JPEG images of image_size (>= 32), as resnet. */
static void vgg_defaults(fl_app_config *c)
{
    SET(c->optimizer, "momentum");
    c->lr = 0.01;
    c->momentum = 0.9;
    SET(c->lr_decay, "cosine");
    c->batch_size = 32;
    c->depth = 16;
    c->width = 64;
    SET(c->hidden, "4096");
}

static int vgg_build(fl_app_net *net, const fl_app_config *c, int is_distributed)
{
    (void)is_distributed;
    int hidden[FL_MODEL_CTR_MAX_LAYERS], nh;
    FL_CHECK(parse_hidden(c->hidden, hidden, &nh));
    if (nh != 1)
        return fl__err(FL_EINVAL, "option hidden: vgg's two fc layers have one width (e.g. 4096), got '%s'", c->hidden);
    fl_model_vgg_config vc = fl_model_vgg16();
    vc.depth = c->depth;
    vc.base_filters = c->width;
    vc.fc_dim = hidden[0];
    vc.height = vc.width = c->image_size;
    const char *data = c->train_data[0] ? c->train_data : c->test_data;
    if (!fl__app_is_images(data))
        return fl__err(FL_EINVAL,
                       "vgg reads JPEG images (a list file such as train.txt or a directory of class folders); "
                       "%s '%s' holds neither",
                       c->train_data[0] ? "train_data" : "test_data", data);
    FL_CHECK(fl__app_image_classes(c->train_data[0] ? "train_data" : "test_data", data, &vc.num_classes, NULL));
    fl_model_vgg m;
    FL_CHECK(fl_model_vgg_build(net->prog, &vc, &m));
    return classifier_net(net, m.input, m.label, m.predict, m.loss);
}

/* simnet-bow: sparse_feature_dim is dict_dim (fleet-datagen simnet's default 1200),
 * embedding_size emb_dim, hidden the one fc width (hid_dim); predict [N, 2] is
 * (cos_pos, cos_neg) and there is no label (metric order_rate). */
static void simnet_defaults(fl_app_config *c)
{
    SET(c->optimizer, "adagrad");
    c->lr = 0.1;
    c->batch_size = 64;
    c->epochs = 3;
    c->thread = 2;
    c->sparse_feature_dim = 1200;
    c->embedding_size = 32;
    SET(c->hidden, "32");
}

static int simnet_build(fl_app_net *net, const fl_app_config *c, int is_distributed)
{
    int hidden[FL_MODEL_CTR_MAX_LAYERS], nh;
    FL_CHECK(parse_hidden(c->hidden, hidden, &nh));
    if (nh != 1) return fl__err(FL_EINVAL, "option hidden: simnet_bow has one fc layer (e.g. 32), got '%s'", c->hidden);
    fl_model_simnet_config sc = fl_model_simnet_default();
    sc.dict_dim = c->sparse_feature_dim;
    sc.emb_dim = c->embedding_size;
    sc.hid_dim = hidden[0];
    sc.is_distributed = is_distributed;
    fl_model_simnet m;
    FL_CHECK(fl_model_simnet_build(net->prog, &sc, &m));
    memcpy(net->feeds, m.use_var, (size_t)m.nuse_var * sizeof m.use_var[0]);
    net->nfeeds = m.nuse_var;
    net->predict = fl_layer_concat((fl_var *const[]){m.cos_pos, m.cos_neg}, 2, 1);
    net->loss = m.loss;
    return net->predict ? FL_OK : fl_last_status();
}

/* word2vec: the tables' rows are the dictionary's words (dict.txt of train_data or its
 * parent, as `fleet-datagen word2vec` writes it); embedding_size is the vector width;
 * predict is the input embedding (metric cluster_acc reads it, fed every word's id). */
static void word2vec_defaults(fl_app_config *c)
{
    SET(c->optimizer, "sgd");
    c->lr = 1;
    c->batch_size = 64;
    c->epochs = 2;
    c->thread = 2;
    c->embedding_size = 16;
}

static int word2vec_build(fl_app_net *net, const fl_app_config *c, int is_distributed)
{
    char dict[FL_APP_PATH + 64];
    FL_CHECK(fl__app_data_file("train_data", c->train_data, "dict.txt", dict, sizeof dict));
    fl_model_word2vec_vocab *v;
    FL_CHECK(fl_model_word2vec_vocab_load(dict, &v));
    fl_model_word2vec_config wc = fl_model_word2vec_default();
    wc.dict_size = fl_model_word2vec_vocab_size(v);
    fl_model_word2vec_vocab_free(v);
    wc.embedding_size = c->embedding_size;
    wc.neg_num = fl_model_word2vec_sampling_default().neg_num;
    wc.is_distributed = is_distributed;
    fl_model_word2vec m;
    FL_CHECK(fl_model_word2vec_build(net->prog, &wc, &m));
    memcpy(net->feeds, m.use_var, (size_t)m.nuse_var * sizeof m.use_var[0]);
    net->nfeeds = m.nuse_var;
    net->predict = m.emb;
    net->loss = m.loss;
    return FL_OK;
}

/* The Transformer: the corpus's vocabularies (src_vocab.txt and trg_vocab.txt, or
 * vocab_all.txt for both with weight_sharing, in train_data or test_data or a parent) give
 * the vocabulary sizes; predict is the softmax of the logits, which the decoder reads
 * (metric bleu); batch_size counts tokens. */
static void transformer_defaults(fl_app_config *c)
{
    SET(c->optimizer, "adam");
    c->lr = 0.5; /* times noam_decay(d_model, warmup_steps) (the benchmark: 2.0 at d_model 512) */
    c->batch_size = 2048;
    c->epochs = 10;
    c->thread = 1;
    c->n_layer = 2;
    c->n_head = 4;
    c->d_model = 64;
    c->d_inner_hid = 128;
    c->dropout = 0;
    c->warmup_steps = 200;
}

static int transformer_build(fl_app_net *net, const fl_app_config *c, int is_distributed)
{
    const char *what = c->train_data[0] ? "train_data" : "test_data";
    char sv[FL_APP_PATH + 64], tv[FL_APP_PATH + 64];
    FL_CHECK(fl__app_translation_vocabs(c, what, c->train_data[0] ? c->train_data : c->test_data, sv, tv, sizeof sv));
    fl_translation_data *d;
    FL_CHECK(fl_translation_load(sv, tv, NULL, 0, NULL, &d));
    fl_model_transformer_config tc = fl_model_transformer_default();
    tc.src_vocab_size = fl_translation_vocab_size(d, 0);
    tc.trg_vocab_size = fl_translation_vocab_size(d, 1);
    fl_translation_marks(d, &tc.bos_idx, NULL, NULL);
    fl_translation_free(d);
    if (c->d_model != c->n_head * (c->d_model / c->n_head))
        return fl__err(FL_EINVAL, "option d_model: %d is not a multiple of n_head %d", c->d_model, c->n_head);
    tc.max_length = c->max_length;
    tc.n_layer = c->n_layer;
    tc.n_head = c->n_head;
    tc.d_key = tc.d_value = c->d_model / c->n_head;
    tc.d_model = c->d_model;
    tc.d_inner_hid = c->d_inner_hid;
    tc.prepostprocess_dropout = tc.attention_dropout = tc.relu_dropout = (float)c->dropout;
    tc.label_smooth_eps = (float)c->label_smooth_eps;
    tc.weight_sharing = c->weight_sharing;
    fl_model_transformer m;
    FL_CHECK(fl_model_transformer_build(net->prog, &tc, &m));
    memcpy(net->feeds, m.use_var, sizeof m.use_var);
    net->nfeeds = m.nuse_var;
    net->predict = m.predict;
    net->loss = m.loss;
    memcpy(net->checkpoints, m.checkpoints, (size_t)m.ncheckpoints * sizeof m.checkpoints[0]);
    net->ncheckpoints = m.ncheckpoints;
    return FL_OK;
}

_Static_assert(FL_APP_MAX_CHECKPOINTS >= 2 * FL_MODEL_TRANSFORMER_MAX_LAYERS &&
                   FL_APP_MAX_CHECKPOINTS >= FL_MODEL_BERT_MAX_LAYERS,
               "fl_app_net.checkpoints holds every layer output of the Transformer and BERT");

static fl_opt *transformer_optimizer(fl_app_net *net, const fl_app_config *c)
{
    fl_model_transformer_config tc = fl_model_transformer_default();
    tc.d_model = c->d_model;
    return fl_model_transformer_optimizer(net->prog, &tc, (float)c->lr, c->warmup_steps, (float)c->clip_norm);
}

/* BERT pre-training: the shape of bert_config (else of the options: BERT-base by default);
 * predict is the [2] pair of the batch's masked-LM and next-sentence accuracies (the
 * "bert_acc" metric); batch_size counts examples. */
static void bert_defaults(fl_app_config *c)
{
    SET(c->optimizer, "adam");
    c->lr = 1e-4;
    c->batch_size = 32;
    c->epochs = 1;
    c->thread = 1;
    c->n_layer = 12;
    c->n_head = 12;
    c->d_model = 768;
    c->d_inner_hid = 3072;
    c->max_length = 512;
    c->dropout = 0.1;
    c->warmup_steps = 100;
    c->weight_decay = 0.01;
}

static int bert_build(fl_app_net *net, const fl_app_config *c, int is_distributed)
{
    fl_model_bert_config bc;
    FL_CHECK(fl__app_bert_config(c, &bc));
    fl_model_bert m;
    FL_CHECK(fl_model_bert_build(net->prog, &bc, &m));
    memcpy(net->feeds, m.feeds, (size_t)m.nfeeds * sizeof m.feeds[0]);
    net->nfeeds = m.nfeeds;
    fl_var *acc[2] = {m.mlm_acc, m.nsp_acc};
    net->predict = fl_layer_concat(acc, 2, 0);
    net->loss = m.loss;
    memcpy(net->checkpoints, m.checkpoints, (size_t)m.ncheckpoints * sizeof m.checkpoints[0]);
    net->ncheckpoints = m.ncheckpoints;
    return net->predict ? FL_OK : fl_last_status();
}

/* Adam with decoupled weight decay except layer norms and biases, linear warm-up to lr */
static fl_opt *bert_optimizer(fl_app_net *net, const fl_app_config *c)
{
    fl_opt *o = fl_opt_adam((float)c->lr, 0.9f, 0.999f, 1e-6f);
    fl_var *lr = fl_layer_linear_lr_warmup(net->prog, NULL, (float)c->lr, c->warmup_steps, 0, (float)c->lr);
    int st = o && lr ? FL_OK : fl_last_status();
    if (st == FL_OK) st = fl_opt_set_lr_var(o, lr);
    if (st == FL_OK) st = fl_opt_set_exclude_from_weight_decay(o, FL_OPT_BERT_NO_DECAY);
    if (st == FL_OK) st = fl_opt_set_weight_decay(o, (float)c->weight_decay);
    if (st == FL_OK && c->clip_norm > 0) st = fl_opt_set_grad_clip(o, FL_CLIP_GLOBAL_NORM, (float)c->clip_norm, 0);
    if (st == FL_OK) return o;
    fl_opt_free(o);
    return NULL;
}

/* How to add a model: see the row contract in fleet/app.h. */
/* clang-format off */
static const fl_app_row rows[] = {
    {"ctr_dnn", "CTR-DNN: 26 sum-pooled embeddings + dense input, fc 400 x 3 (Paddle's ctr example)",
     FL_APP_SPARSE, "local,ps,collective", "criteo", "auc", ctr_dnn_defaults, ctr_dnn_build},
    {"deepfm", "DeepFM: first-order weights + FM second order over the 26 slots + DNN",
     FL_APP_SPARSE, "local,ps,collective", "criteo", "auc", deepfm_defaults, deepfm_build},
    {"wide_deep", "Wide&Deep: a linear model of the ids and dense input + DNN over the embeddings",
     FL_APP_SPARSE, "local,ps,collective", "criteo", "auc", wide_deep_defaults, wide_deep_build},
    {"simnet_bow", "simnet-bow: bag-of-words query/title towers, cosine, pairwise hinge (Fleet's simnet_bow)",
     FL_APP_SPARSE, "local,ps", "multislot", "order_rate", simnet_defaults, simnet_build},
    {"word2vec", "word2vec: skip-gram with negative sampling over a corpus and its dict.txt",
     FL_APP_SPARSE, "local,ps", "word2vec", "cluster_acc", word2vec_defaults, word2vec_build},
    {"resnet", "ResNet (depth 6n+2, 18, 34, 50, ...; batch_norm, residual blocks) on Fashion-MNIST or JPEG images",
     FL_APP_DENSE, "local,collective", "images", "accuracy", resnet_defaults, resnet_build},
    {"vgg", "VGG (depth 11, 13, 16, 19; Fleet's VGG16 benchmark model) on JPEG images",
     FL_APP_DENSE, "local,collective", "images", "accuracy", vgg_defaults, vgg_build},
    {"transformer", "Transformer (Paddle's translation benchmark: pre-norm encoder-decoder, label smoothing, noam "
     "warm-up; beam-search BLEU)",
     FL_APP_DENSE, "local,collective", "translation", "bleu", transformer_defaults, transformer_build,
     transformer_optimizer},
    {"bert", "BERT pre-training (Paddle's collective benchmark: masked LM + next sentence, Adam with weight decay, "
     "linear warm-up)",
     FL_APP_DENSE, "local,collective", "bert", "bert_acc", bert_defaults, bert_build, bert_optimizer},
};
/* clang-format on */
#define NROWS ((int)(sizeof rows / sizeof rows[0]))

int fl_app_count(void) { return NROWS; }
const fl_app_row *fl_app_at(int i) { return i >= 0 && i < NROWS ? &rows[i] : NULL; }

const fl_app_row *fl_app_find(const char *name)
{
    char known[512] = "";
    size_t k = 0;
    for (int i = 0; i < NROWS; i++) {
        if (name && !strcmp(rows[i].name, name)) return &rows[i];
        k += (size_t)snprintf(known + k, sizeof known - k, "%s%s", i ? ", " : "", rows[i].name);
        if (k >= sizeof known) k = sizeof known - 1;
    }
    if (!name) fl__err(FL_EINVAL, "fl_app_find: name is NULL (models: %s)", known);
    else fl__err(FL_ENOTFOUND, "unknown model '%s' (models: %s)", name, known);
    return NULL;
}

/* ---- options ------------------------------------------------------------------------------ */

typedef enum { O_STR, O_INT, O_I64, O_U64, O_DBL } otype;

typedef struct {
    const char *name;
    otype type;
    size_t off, size;
    double lo, hi; /* numbers: the accepted range */
    const char *help;
} opt_def;

#define OS(f, h)                                                                        \
    {                                                                                   \
#f, O_STR, offsetof(fl_app_config, f), sizeof(((fl_app_config *)0)->f), 0, 0, h \
    }
#define ON(f, t, lo, hi, h)                                                           \
    {                                                                                 \
#f, t, offsetof(fl_app_config, f), sizeof(((fl_app_config *)0)->f), lo, hi, h \
    }
/* clang-format off */
static const opt_def opts[] = {
    OS(model, "model name (fleet-lightning list)"),
    OS(train_data, "directory of training data (criteo: its files; idx: train-*-ubyte[.gz]; images: a list file "
                   "such as train.txt or a directory of class folders of JPEGs)"),
    OS(test_data, "directory of test data, scored after training (idx: t10k-*-ubyte[.gz]; images: as train_data)"),
    OS(model_dir, "where the inference model is saved (and read by eval / infer)"),
    OS(metrics_dir, "metrics CSV + TensorBoard files per rank there (docs/metrics.md)"),
    OS(checkpoint_dir, "a checkpoint after every epoch there; a (re)start resumes from the newest (docs/checkpoints.md)"),
    /* --strategy FILE, as the command line names it */
    {"strategy", O_STR, offsetof(fl_app_config, strategy_file), sizeof(((fl_app_config *)0)->strategy_file), 0, 0,
     "DistributedStrategy file (key=value lines or JSON)"},
    OS(output, "infer: file of predictions (default stdout)"),
    OS(mode, "local, collective or a parameter-server mode: sync, async, ... (fleet-lightning list; default: the "
             "model's kind)"),
    OS(optimizer, "sgd, momentum, adam or adagrad"),
    OS(lr_decay, "learning-rate decay: none, exponential or cosine"),
    ON(lr, O_DBL, 1e-12, 1e6, "learning rate"),
    ON(momentum, O_DBL, 0, 1, "momentum (optimizer momentum)"),
    ON(decay_rate, O_DBL, 1e-12, 1, "exponential decay: rate per decay_steps"),
    ON(decay_steps, O_I64, 0, 1e15, "exponential: steps per decay; cosine: steps per epoch (0 = an epoch's)"),
    ON(batch_size, O_INT, 1, 1 << 24, "examples per batch and worker"),
    ON(epochs, O_INT, 1, 1e6, "passes over the training data"),
    ON(thread, O_INT, 1, 256, "trainer threads (dataset readers; 1 under collective training; resnet: 1)"),
    ON(print_period, O_INT, 0, 1e9, "batches between progress lines (0: none)"),
    ON(max_steps, O_I64, 0, 1e15, "at most this many batches per epoch and worker (0: all)"),
    ON(seed, O_U64, 0, 1.8e19, "seed of the initial parameters and the shuffles"),
    ON(sparse_feature_dim, O_I64, 1, 1e12, "CTR: rows of the sparse tables (ids hashed into them); simnet: dict_dim"),
    ON(embedding_size, O_INT, 1, 4096, "CTR, simnet, word2vec: width of an embedding"),
    OS(hidden, "CTR: sizes of the DNN's fc layers, e.g. 400,400,400; simnet: the fc width; vgg: the two fc layers' width"),
    ON(depth, O_INT, 8, 1202, "ResNet: depth (6n+2, 18, 34, 50, 101, 152); VGG: 11, 13, 16, 19"),
    ON(width, O_INT, 1, 4096, "ResNet, VGG: filters of the first stage"),
    ON(image_size, O_INT, 1, 4096, "ResNet, VGG on JPEG images: height and width of the crops fed to the model"),
    ON(resize, O_INT, 0, 65536, "JPEG images, evaluation: the shorter side before the centre crop (0: image_size * 8 / 7)"),
    ON(decode_threads, O_INT, 1, 256, "JPEG images: decoding threads per process"),
    OS(bad_data, "a bad data line or image: stop (an error naming it) or skip (left out and counted)"),
    ON(n_layer, O_INT, 1, 64, "Transformer: encoder layers (and as many decoder layers)"),
    ON(n_head, O_INT, 1, 256, "Transformer: attention heads (d_model / n_head per head)"),
    ON(d_model, O_INT, 2, 65536, "Transformer: model width"),
    ON(d_inner_hid, O_INT, 1, 1 << 20, "Transformer: feed-forward width"),
    ON(max_length, O_INT, 2, 1 << 20, "Transformer: rows of the position tables; longer pairs are not trained on"),
    ON(dropout, O_DBL, 0, 0.99, "Transformer: every dropout rate (residual, attention, relu)"),
    ON(label_smooth_eps, O_DBL, 0, 0.99, "Transformer: label smoothing (0: hard labels)"),
    ON(clip_norm, O_DBL, 0, 1e9, "Transformer: gradient clipping by global norm (0: none)"),
    ON(warmup_steps, O_INT, 1, 1e9, "Transformer: noam_decay's warm-up steps (lr is its scale)"),
    ON(weight_sharing, O_INT, 0, 1, "Transformer: 1 shares source / target embeddings and the output (vocab_all.txt)"),
    ON(pool_size, O_INT, 1, 1e9, "Transformer: pairs sorted by length together before batching"),
    ON(beam_size, O_INT, 1, 64, "Transformer: beam width of eval and infer (1: greedy)"),
    ON(max_out_len, O_INT, 1, 1 << 20, "Transformer: longest decoded sentence"),
    ON(alpha, O_DBL, 0, 10, "Transformer: length penalty ((5 + len) / 6)^alpha of beam search"),
    OS(bert_config, "BERT: a bert_config.json giving the shape (empty: n_layer, n_head, d_model, d_inner_hid, dropout)"),
    ON(weight_decay, O_DBL, 0, 1, "BERT: Adam's decoupled weight decay (layer norms and biases excluded)"),
    ON(recompute, O_INT, 0, 1, "Transformer, BERT: 1 recomputes each layer's activations in backward (less memory)"),
};
/* clang-format on */
#define NOPTS ((int)(sizeof opts / sizeof opts[0]))

void fl_app_config_default(const fl_app_row *row, fl_app_config *c)
{
    if (!c) return; /* nothing to fill: documented NULL-safe */
    memset(c, 0, sizeof *c);
    SET(c->optimizer, "sgd");
    SET(c->lr_decay, "none");
    c->lr = 0.01;
    c->momentum = 0.9;
    c->decay_rate = 0.5;
    c->batch_size = 64;
    c->epochs = 1;
    c->thread = 1;
    c->print_period = 0;
    c->seed = 1;
    c->sparse_feature_dim = 1000001;
    c->embedding_size = 10;
    c->depth = 20;
    c->width = 16;
    c->image_size = 224;
    c->resize = 0;
    c->decode_threads = 2;
    SET(c->bad_data, "stop");
    c->n_layer = 6; /* Transformer-base */
    c->n_head = 8;
    c->d_model = 512;
    c->d_inner_hid = 2048;
    c->max_length = 256;
    c->dropout = 0.1;
    c->label_smooth_eps = 0.1;
    c->clip_norm = 0;
    c->warmup_steps = 8000;
    c->weight_sharing = 0;
    c->pool_size = 10000;
    c->beam_size = 4;
    c->max_out_len = 256;
    c->alpha = 0.6;
    c->weight_decay = 0.01;
    if (!row) return;
    SET(c->model, row->name);
    snprintf(c->model_dir, sizeof c->model_dir, "%s_model", row->name);
    row->defaults(c);
}

static const opt_def *find_opt(const char *name)
{
    for (int i = 0; i < NOPTS; i++)
        if (!strcmp(opts[i].name, name)) return &opts[i];
    return NULL;
}

int fl_app_config_set(fl_app_config *c, const char *name, const char *value)
{
    if (!c || !name || !value) return fl__err(FL_EINVAL, "fl_app_config_set: config, name or value is NULL");
    const opt_def *o = find_opt(name);
    if (!o) return fl__err(FL_EINVAL, "unknown option '%s'", name);
    char *f = (char *)c + o->off;
    if (o->type == O_STR) {
        if (strlen(value) >= o->size)
            return fl__err(FL_EINVAL, "option %s: value longer than %zu characters", name, o->size - 1);
        memcpy(f, value, strlen(value) + 1);
        return FL_OK;
    }
    char *end;
    errno = 0;
    double d = o->type == O_DBL ? strtod(value, &end) : (double)strtoll(value, &end, 10);
    uint64_t u = 0;
    if (o->type == O_U64) {
        errno = 0;
        u = strtoull(value, &end, 10);
        d = (double)u;
    }
    if (end == value || *end || errno || (o->type == O_U64 && value[0] == '-'))
        return fl__err(FL_EINVAL, "option %s: '%s' is not %s", name, value, o->type == O_DBL ? "a number" : "an integer");
    if (!(d >= o->lo && d <= o->hi))
        return fl__err(FL_EINVAL, "option %s: %s is out of range [%g, %g]", name, value, o->lo, o->hi);
    switch (o->type) {
    case O_INT: *(int *)f = (int)d; break;
    case O_I64: *(int64_t *)f = (int64_t)strtoll(value, NULL, 10); break;
    case O_U64: *(uint64_t *)f = u; break;
    case O_DBL: *(double *)f = d; break;
    case O_STR: break;
    }
    return FL_OK;
}

int fl_app_config_get(const fl_app_config *c, const char *name, char *buf, size_t cap)
{
    const opt_def *o = c && name ? find_opt(name) : NULL;
    if (!o || !buf || !cap) return fl__err(FL_EINVAL, "fl_app_config_get: unknown option '%s'", name ? name : "(null)");
    const char *f = (const char *)c + o->off;
    switch (o->type) {
    case O_STR: snprintf(buf, cap, "%s", f); break;
    case O_INT: snprintf(buf, cap, "%d", *(const int *)f); break;
    case O_I64: snprintf(buf, cap, "%" PRId64, *(const int64_t *)f); break;
    case O_U64: snprintf(buf, cap, "%" PRIu64, *(const uint64_t *)f); break;
    case O_DBL: snprintf(buf, cap, "%g", *(const double *)f); break;
    }
    return FL_OK;
}

const char *fl_app_option(int i, const char **help)
{
    if (i < 0 || i >= NOPTS) return NULL;
    if (help) *help = opts[i].help;
    return opts[i].name;
}

int fl_app_config_load(fl_app_config *c, const char *path)
{
    if (!c || !path) return fl__err(FL_EINVAL, "fl_app_config_load: config or path is NULL");
    FILE *f = fopen(path, "r");
    if (!f) return fl__err(FL_EIO, "config file %s: %s", path, strerror(errno));
    char line[4096];
    int lineno = 0, st = FL_OK;
    while (st == FL_OK && fgets(line, sizeof line, f)) {
        lineno++;
        char *s = line + strspn(line, " \t");
        s[strcspn(s, "#\r\n")] = 0;
        if (!*s) continue;
        size_t k = strcspn(s, "=:");
        if (!s[k]) {
            st = fl__err(FL_EINVAL, "%s:%d: expected key=value, got '%s'", path, lineno, s);
            break;
        }
        char *v = s + k + 1, *ke = s + k;
        while (ke > s && (ke[-1] == ' ' || ke[-1] == '\t')) ke--;
        *ke = 0;
        v += strspn(v, " \t");
        for (char *e = v + strlen(v); e > v && (e[-1] == ' ' || e[-1] == '\t');) *--e = 0;
        if (fl_app_config_set(c, s, v) != FL_OK) st = fl__err(FL_EINVAL, "%s:%d: %s", path, lineno, fl_last_error());
    }
    fclose(f);
    return st;
}

int fl_app_config_save(const fl_app_config *c, const char *path)
{
    if (!c || !path) return fl__err(FL_EINVAL, "fl_app_config_save: config or path is NULL");
    char tmp[FL_APP_PATH + 64];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) return fl__err(FL_EIO, "%s: %s", tmp, strerror(errno));
    fprintf(f, "# fleet-lightning options of the training run (eval and infer read them first)\n");
    for (int i = 0; i < NOPTS; i++) {
        char v[FL_APP_PATH];
        fl_app_config_get(c, opts[i].name, v, sizeof v);
        if (*v) fprintf(f, "%s=%s\n", opts[i].name, v);
    }
    if (fclose(f) || rename(tmp, path)) {
        int e = errno;
        unlink(tmp);
        return fl__err(FL_EIO, "%s: %s", path, strerror(e));
    }
    return FL_OK;
}

int fl_app_parse_train_configs(int argc, char **argv, const fl_app_row *row, fl_app_config *c)
{
    if (!c || argc < 0 || (argc && !argv)) return fl__err(FL_EINVAL, "fl_app_parse_train_configs: bad arguments");
    fl_app_config_default(row, c);
    for (int pass = 0; pass < 2; pass++) /* --config FILE first, then the other options over it */
        for (int i = 1; i < argc; i++) {
            const char *a = argv[i];
            if (strncmp(a, "--", 2))
                return fl__err(FL_EINVAL, "argument %d: expected --name VALUE or --name=VALUE, got '%s'", i, a);
            char name[64];
            const char *eq = strchr(a, '='), *v = eq ? eq + 1 : i + 1 < argc ? argv[i + 1] : NULL;
            size_t n = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
            snprintf(name, sizeof name, "%.*s", (int)(n < 63 ? n : 63), a + 2);
            if (!v) return fl__err(FL_EINVAL, "option --%s expects a value (--%s VALUE or --%s=VALUE)", name, name, name);
            if (!eq) i++;
            int is_config = !strcmp(name, "config");
            if (pass == 0 && is_config) FL_CHECK(fl_app_config_load(c, v));
            if (pass == 1 && !is_config) FL_CHECK(fl_app_config_set(c, name, v));
        }
    return FL_OK;
}

int fl_app_list(FILE *f)
{
    if (!f) return fl__err(FL_EINVAL, "fl_app_list: file is NULL");
    fprintf(f, "%-10s %-6s %-9s %-11s %-32s %s\n", "model", "kind", "data", "metric", "modes", "default config");
    for (int i = 0; i < NROWS; i++) {
        const fl_app_row *r = &rows[i];
        fl_app_config c;
        fl_app_config_default(r, &c);
        char cfg[256];
        if (!strcmp(r->reader, "bert"))
            snprintf(cfg, sizeof cfg, "adam lr %g (warmup %d, weight decay %g), batch %d, epochs %d, %d layers hidden %d",
                     c.lr, c.warmup_steps, c.weight_decay, c.batch_size, c.epochs, c.n_layer, c.d_model);
        else if (r->optimizer) /* the Transformer */
            snprintf(cfg, sizeof cfg, "adam lr %g x noam(warmup %d), batch %d tokens, epochs %d, %d+%d layers d_model %d",
                     c.lr, c.warmup_steps, c.batch_size, c.epochs, c.n_layer, c.n_layer, c.d_model);
        else if (r->kind == FL_APP_SPARSE)
            snprintf(cfg, sizeof cfg, "%s lr %g batch %d epochs %d emb %d%s%s", c.optimizer, c.lr, c.batch_size, c.epochs,
                     c.embedding_size, c.hidden[0] ? " hidden " : "", c.hidden);
        else
            snprintf(cfg, sizeof cfg, "%s lr %g momentum %g %s decay, batch %d epochs %d depth %d width %d", c.optimizer,
                     c.lr, c.momentum, c.lr_decay, c.batch_size, c.epochs, c.depth, c.width);
        fprintf(f, "%-10s %-6s %-9s %-11s %-32s %s\n", r->name, r->kind == FL_APP_SPARSE ? "ps" : "coll", r->reader,
                r->metric, r->modes, cfg);
        fprintf(f, "%-10s   %s\n", "", r->summary);
    }
    fprintf(f, "\nmodes: local (one process), collective (allreduce), ps = every parameter-server mode:\n");
    fleet_ps_mode m;
    for (int i = 0; i < fleet_ps_mode_count() && fleet_ps_mode_at(i, &m) == FL_OK; i++)
        fprintf(f, "  %-10s %s\n", m.name, m.summary);
    return FL_OK;
}

int fl_app_load_imagenet_from_file(fl_app_config *c, const char *path, int *num_classes)
{
    if (!c) return fl__err(FL_EINVAL, "fl_app_load_imagenet_from_file: c is NULL");
    if (!path || !*path) return fl__err(FL_EINVAL, "fl_app_load_imagenet_from_file: path is NULL or empty");
    if (strlen(path) >= sizeof c->train_data)
        return fl__err(FL_EINVAL, "fl_app_load_imagenet_from_file: path is longer than %zu bytes",
                       sizeof c->train_data - 1);
    if (!fl__app_is_images(path))
        return fl__err(FL_ENOTFOUND,
                       "fl_app_load_imagenet_from_file: path '%s' is neither a list file nor a directory of class "
                       "folders",
                       path);
    int n;
    FL_CHECK(fl__app_image_classes("fl_app_load_imagenet_from_file: path", path, &n, NULL));
    SET(c->train_data, path);
    if (num_classes) *num_classes = n;
    return FL_OK;
}
