/*
 * fleet/app.h - standard models trained without writing one (fleet-lightning's library).
 *
 *   const fl_app_row *row = fl_app_find("deepfm");
 *   fl_app_config c;
 *   fl_app_config_default(row, &c);
 *   fl_app_config_set(&c, "train_data", "data/train");      (or fl_app_config_load(&c, file))
 *   fl_app_train(row, &c);
 *
 * A model is one row of the registry: its name, its kind (sparse models train with
 * parameter servers, dense ones collectively), the format of its data, its metric, the
 * modes it supports, its default configuration, a builder and a data reader.  fl_app_train
 * builds the model, finds the launcher's role (fleet_role_from_env: fleetrun, mpirun, srun,
 * torchrun; none = one local process), trains with the existing executor, dataset and fleet
 * facade, evaluates the test data on the first worker and saves the inference model
 * (fleet_save_inference_model) to model_dir; fl_app_eval and fl_app_infer load it again
 * and need no servers.  The same call runs locally, under fleetrun with servers or
 * collectively: the mode is the row's default unless the configuration names another.
 *
 * Not here: the model builders themselves (fleet/models.h) and the command line
 * (tools/fleet-lightning.c).
 *
 * ---- The row contract (how to add a model) --------------------------------------------
 * Add one fl_app_row to the table in src/app/app.c (its builder in src/models/):
 *   name        lower-case identifier used by --model
 *   summary     one line for `fleet-lightning list`
 *   kind        FL_APP_SPARSE (default mode "async": tables on parameter servers) or
 *               FL_APP_DENSE (default mode "collective")
 *   modes       the modes it supports, comma-separated, from "local", "ps" (every
 *               parameter-server mode of the library's table, fleet_ps_mode_at: sync,
 *               half_async, async, geo; the configuration names one) and "collective"
 *   reader      the data reader, by name: "criteo" and "multislot" (fl_dataset files of
 *               the directory, slots in the order of net->feeds), "idx" (Fashion-MNIST IDX
 *               files DIR/train-* or DIR/t10k-*, fed as "img" [N, C, H, W] and "label"),
 *               "word2vec" (corpus files; dict.txt in the directory or its parent; each
 *               worker makes its skip-gram samples once with fl_model_word2vec_make_samples
 *               into a temporary directory; training only), "images" (by what the path holds: "idx"
 *               files, or JPEG images through fleet/data.h's image reader, a list file such as
 *               ImageNet's train.txt or a directory of class folders, fed as [N, 3, S, S]
 *               with S the model's input size, train transform for training, eval for tests),
 *               "translation" (`src \t trg` corpus files with src_vocab.txt, trg_vocab.txt or
 *               vocab_all.txt in the directory or its parent; token-count batches of the
 *               Transformer benchmark, fleet/transformer.h)
 *   metric      the metric table in src/app/app_data.c, a metric being one of three
 *               forms.  In the graph: "auc" (Paddle's auc over predict [N, 2]) and
 *               "accuracy" (top-1 over predict [N, classes]), built both during training
 *               (on the last feed, the label) and on a loaded inference model (on an int64
 *               [N, 1] input named "label", which the builder must use).  On the host:
 *               "order_rate" (simnet: predict [N, 2] = (cos_pos, cos_neg), the share with
 *               cos_pos > cos_neg, ties 1/2), summed over the batches of test_data; the
 *               data has no label.  An evaluation hook: "cluster_acc" (word2vec: predict is
 *               the input embedding, feeds input_word, true_word, neg_word; scored on the
 *               planted clusters and analogies of the generator, clusters.txt,
 *               analogies.txt and dict.txt in test_data or its parent) and "bleu" (the
 *               Transformer: test_data decoded by beam search, BLEU against its references;
 *               infer writes the decoded sentences), run on the loaded
 *               model instead of a pass over test_data.  Metrics outside the graph print no
 *               training value.  fl_app_train scores test_data through fl_app_eval on the
 *               saved model, so every form works on a saved model.
 *   defaults    fills the model's defaults into a config already holding the generic
 *               ones (lr, batch_size, epochs, ...); it may only change fields
 *   build       appends the model to net->prog as the config says and fills net (feeds in
 *               reader order with the label last if the metric has one, predict, loss); is_distributed says
 *               whether its sparse tables go on the servers (a mode whose
 *               fleet_ps_mode.remote_sparse is 1, with servers); net->checkpoints (may
 *               be left empty) are the variables option recompute keeps.
 *               Returns FL_OK or the error (fl_last_error() names the field)
 *   optimizer   NULL, or the model's own optimizer (see fl_app_row)
 */
#ifndef FLEET_APP_H
#define FLEET_APP_H

#include "fleet/fleet.h"
#include "fleet/models.h"

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { FL_APP_SPARSE = 1, FL_APP_DENSE = 2 } fl_app_kind;

#define FL_APP_PATH 1024
#define FL_APP_WORD 32
#define FL_APP_MAX_FEEDS 72
#define FL_APP_MAX_CHECKPOINTS 128

/* Everything a run is told; a plain value (strings are copied in).  Set fields by name
 * with fl_app_config_set (the names are the command line's, listed by fl_app_options). */
typedef struct {
    char model[FL_APP_WORD];
    char train_data[FL_APP_PATH], test_data[FL_APP_PATH]; /* directories */
    char model_dir[FL_APP_PATH];                          /* default "<model>_model" */
    char metrics_dir[FL_APP_PATH];                        /* fl_exe_set_metrics ("" : FLEET_METRICS_DIR or none) */
    char checkpoint_dir[FL_APP_PATH];                     /* a checkpoint per epoch, resumed on start ("": none) */
    char strategy_file[FL_APP_PATH];                      /* option "strategy": DistributedStrategy file */
    char output[FL_APP_PATH];                             /* infer: predictions ("" = stdout) */
    char mode[FL_APP_WORD];                               /* "" = the row's default */
    char optimizer[FL_APP_WORD];                          /* sgd, momentum, adam, adagrad */
    char lr_decay[FL_APP_WORD];                           /* none, exponential, cosine */
    double lr, momentum, decay_rate;
    int64_t decay_steps; /* exponential: steps per decay; cosine: steps per epoch (0 = one epoch's) */
    int batch_size, epochs, thread, print_period;
    int64_t max_steps; /* per epoch and worker, 0 = no limit */
    uint64_t seed;
    /* CTR models */
    int64_t sparse_feature_dim;
    int embedding_size;
    char hidden[FL_APP_WORD]; /* "400,400,400" */
    /* image models */
    int depth, width; /* ResNet depth and base filters */
    /* JPEG images (resnet): crop size, eval's shorter side (0: image_size * 8 / 7), decoders */
    int image_size, resize, decode_threads;
    /* bad input (a malformed data line, a corrupt or non-JPEG image): "stop" (default) fails
     * naming the file; "skip" leaves it out and counts it (fleet/data.h's bad-line policy) */
    char bad_data[FL_APP_WORD];
    /* Transformer (fleet/transformer.h): sizes, training and decoding; batch_size counts
     * tokens (padding included) */
    int n_layer, n_head, d_model, d_inner_hid, max_length;
    double dropout, label_smooth_eps, clip_norm;
    int warmup_steps, weight_sharing, pool_size;
    int beam_size, max_out_len;
    double alpha;
    /* BERT (fleet/models.h "BERT pre-training"): bert_config.json giving the shape (empty:
     * n_layer, n_head, d_model, d_inner_hid, dropout, max_length of the options); Adam's
     * decoupled weight decay (layer norms and biases excluded) */
    char bert_config[FL_APP_PATH];
    double weight_decay;
    /* 1: minimize recomputes the activations between the builder's checkpoints
     * (fl_app_net.checkpoints: the Transformer's and BERT's layer outputs) during backward
     * (Paddle's RecomputeOptimizer) */
    int recompute;
} fl_app_config;

typedef struct fl_app_net {
    fl_prog *prog;
    fl_var *feeds[FL_APP_MAX_FEEDS]; /* reader order, the label last */
    int nfeeds;
    fl_var *predict, *loss;
    fl_var *checkpoints[FL_APP_MAX_CHECKPOINTS]; /* the recompute checkpoints (may be none) */
    int ncheckpoints;
} fl_app_net;

typedef struct fl_app_row {
    const char *name, *summary;
    fl_app_kind kind;
    const char *modes, *reader, *metric;
    void (*defaults)(fl_app_config *c);
    int (*build)(fl_app_net *net, const fl_app_config *c, int is_distributed);
    /* NULL: the optimizer of the options (optimizer, lr, lr_decay); else the model's own,
     * made for net->prog (the Transformer: Adam with noam decay) */
    fl_opt *(*optimizer)(fl_app_net *net, const fl_app_config *c);
} fl_app_row;

/* The row named `name`, or NULL with an FL_ENOTFOUND error listing the known names
 * (FL_EINVAL when name is NULL). */
FL_API const fl_app_row *fl_app_find(const char *name);
/* Row i (0..fl_app_count()-1). */
FL_API int fl_app_count(void);
FL_API const fl_app_row *fl_app_at(int i);
/* Writes "name kind reader metric modes defaults" lines of every model to f. */
FL_API int fl_app_list(FILE *f);

/* The generic defaults then the row's (row NULL: generic only; c NULL: does nothing). */
FL_API void fl_app_config_default(const fl_app_row *row, fl_app_config *c);
/* Sets one option by name ("lr", "batch_size", ...) from text.  FL_EINVAL naming the
 * option and the expected form on an unknown name or a bad value. */
FL_API int fl_app_config_set(fl_app_config *c, const char *name, const char *value);
/* key=value (or "key: value") lines, '#' comments; errors name the file and line. */
FL_API int fl_app_config_load(fl_app_config *c, const char *path);
/* lightning.parse_train_configs(): the row's defaults (generic ones with row NULL), then
 * the file of "--config FILE", then every other "--name VALUE" / "--name=VALUE" of argv[1..]
 * (fl_app_option names).  FL_EINVAL naming the argument on anything else. */
FL_API int fl_app_parse_train_configs(int argc, char **argv, const fl_app_row *row, fl_app_config *c);
/* Writes every option as key=value lines to path (atomically: a temporary name, renamed).
 * fl_app_train saves the training run's options as <model_dir>/lightning.conf, which
 * fleet-lightning eval and infer load before their own options (the hashing of ids into
 * sparse_feature_dim rows must match the model's). */
FL_API int fl_app_config_save(const fl_app_config *c, const char *path);
/* Option i (0.. until NULL): its name, its help line; *def gets its default as text. */
FL_API const char *fl_app_option(int i, const char **help);
/* The value of option `name` in c as text (into buf). */
FL_API int fl_app_config_get(const fl_app_config *c, const char *name, char *buf, size_t cap);
/* lightning's model.load_imagenet_from_file(path): path (an ImageNet list such as train.txt,
 * or a directory of class folders of JPEG files; fleet/data.h "Images") becomes c's
 * train_data, after listing it: *num_classes (may be NULL) gets its classes.  Errors name
 * the argument, or the list line or file at fault. */
FL_API int fl_app_load_imagenet_from_file(fl_app_config *c, const char *path, int *num_classes);

/* Trains as described at the top.  Blocks until training (or serving, on a server) ends.
 * Prints one line per epoch (loss, metric, examples/s) and the test metric. */
FL_API int fl_app_train(const fl_app_row *row, const fl_app_config *c);
/* Loads model_dir and measures the row's metric on test_data; *metric (may be NULL). */
FL_API int fl_app_eval(const fl_app_row *row, const fl_app_config *c, double *metric);
/* Loads model_dir and writes one line of predictions per example of test_data to output
 * (stdout if empty): the probabilities of predict, space-separated. */
FL_API int fl_app_infer(const fl_app_row *row, const fl_app_config *c);

#ifdef __cplusplus
}
#endif
#endif
