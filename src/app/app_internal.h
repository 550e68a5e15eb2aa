/*
 * app_internal.h - the parts of fl_app_* shared by app.c (registry, options), app_data.c
 * (readers, metrics) and app_train.c (train, eval, infer).
 */
#ifndef FLEET_APP_APP_INTERNAL_H
#define FLEET_APP_APP_INTERNAL_H

#include "fleet/app.h"
#include "fleet/models.h"
#include "../base/base_internal.h"

/* One pass's results.  loss and metric: the mean over batches of the fetched values
 * (a cumulative metric such as the global AUC: its last value). */
typedef struct {
    int64_t instances, batches;
    double seconds, loss, metric;
} app_pass;

/* Called after each batch of an evaluation pass with the fetched tensors. */
typedef int (*app_batch_fn)(void *user, fl_tensor **fetched, int nfetch, int batch);

/* A data reader: a row of the reader table (app_data.c), chosen by fl_app_row.reader.
 * open reads (or lists) the split of dir: train 1 for training data, this worker's share
 * (rank of nranks); feeds are the program's input variables in reader order.
 * pass runs p once per batch: fetch[0] is the loss (or NULL in evaluation), fetch[1] the
 * metric; train 1 uses the trainer threads (thread, 1 for collective programs), train 0
 * one thread in file order calling fn after every batch. */
typedef struct {
    const char *name;
    int (*open)(const fl_app_config *c, const char *dir, int train, int rank, int nranks, fl_var *const *feeds, int nfeeds,
                void **st);
    int (*pass)(void *st, fl_exe *e, fl_prog *p, int train, int thread, const char *const *fetch, int nfetch, int epoch,
                app_pass *out, app_batch_fn fn, void *user);
    void (*close)(void *st);
    int64_t (*steps)(void *st, int batch_size); /* batches of one training pass (a learning-rate schedule's epoch) */
    /* trainer threads a pass can use: the dataset's readers (thread, at most one per file of
     * this worker's share); 1 for a reader that feeds its batches in order */
    int (*threads)(void *st);
} app_reader;

/* A metric (fl_app_row.metric names its row in app_data.c).  build: made on predict and
 * label into predict's program, fetched during training and evaluation (NULL: none in the
 * graph); cumulative metrics keep persistable statistics.  labelled: the data carries a
 * label (the net's last feed; 0: every feed is an input, build gets label NULL).
 * score (instead of build, in evaluation): adds one batch's predict to *sum and *n
 * (the metric is *sum / *n).  evaluate (instead of a pass over test_data): the metric of
 * the trained or loaded program prog on exe, whose inputs are feeds[0..nfeeds) and whose
 * output is predict; it reads what it needs from c (test_data) and prints its line. */
typedef struct {
    const char *name;
    fl_var *(*build)(fl_var *predict, fl_var *label);
    int cumulative, labelled;
    int (*score)(const fl_tensor *predict, int batch, double *sum, int64_t *n);
    int (*evaluate)(const fl_app_config *c, fl_exe *exe, fl_prog *prog, fl_var *const *feeds, int nfeeds, fl_var *predict,
                    double *metric);
    /* infer (NULL: the probabilities of predict, a line per example): writes the loaded
     * model's own predictions of test_data to out (the Transformer: decoded sentences) */
    int (*infer)(const fl_app_config *c, fl_exe *exe, fl_prog *prog, fl_var *predict, FILE *out, int64_t *lines);
} app_metric;

const app_reader *fl__app_reader(const char *name);
/* The regular files of dir (not hidden), sorted, malloc'ed; none is FL_ENOTFOUND naming what. */
int fl__app_list_dir(const char *what, const char *dir, char ***out, int *n);
const app_metric *fl__app_metric(const char *name);
/* dir/name, else the same name in dir's parent (fleet-datagen word2vec writes dict.txt,
 * clusters.txt and analogies.txt next to train/): into out; FL_ENOTFOUND naming both. */
int fl__app_data_file(const char *what, const char *dir, const char *name, char *out, size_t cap);

/* app_image.c: 1 when path holds JPEG images for the image reader (a file: a list such as
 * ImageNet's train.txt; a directory of class folders without idx files), 0 otherwise. */
int fl__app_is_images(const char *path);
/* The classes (and images, may be NULL) the image reader lists under path; errors name what. */
int fl__app_image_classes(const char *what, const char *path, int *num_classes, int64_t *images);
/* The "images" reader's row (idx files or JPEG images, by fl__app_is_images). */
int fl__app_images_open(const fl_app_config *c, const char *path, int train, int rank, int nranks, fl_var *const *feeds,
                        int nfeeds, void **st);
int fl__app_images_pass(void *st, fl_exe *e, fl_prog *p, int train, int thread, const char *const *fetch, int nfetch,
                        int epoch, app_pass *out, app_batch_fn fn, void *user);
void fl__app_images_close(void *st);
int64_t fl__app_images_steps(void *st, int batch_size);
int fl__app_images_threads(void *st);

/* app_translation.c: the "translation" reader (fleet/transformer.h's corpus reader) and the
 * "bleu" metric's evaluation and decoding. */
int fl__app_translation_open(const fl_app_config *c, const char *dir, int train, int rank, int nranks, fl_var *const *feeds,
                             int nfeeds, void **st);
int fl__app_translation_pass(void *st, fl_exe *e, fl_prog *p, int train, int thread, const char *const *fetch, int nfetch,
                             int epoch, app_pass *out, app_batch_fn fn, void *user);
void fl__app_translation_close(void *st);
int64_t fl__app_translation_steps(void *st, int batch_size);
int fl__app_translation_threads(void *st);
int fl__app_bleu_evaluate(const fl_app_config *c, fl_exe *exe, fl_prog *prog, fl_var *const *feeds, int nfeeds,
                          fl_var *predict, double *metric);
int fl__app_bleu_infer(const fl_app_config *c, fl_exe *exe, fl_prog *prog, fl_var *predict, FILE *out, int64_t *lines);
/* The vocabulary files of a translation corpus (src_vocab.txt / trg_vocab.txt, or
 * vocab_all.txt for both with weight_sharing) in dir or its parent. */
int fl__app_translation_vocabs(const fl_app_config *c, const char *what, const char *dir, char *src, char *trg, size_t cap);

/* app_bert.c: the "bert" reader (fleet/models.h's BERT reader over train_data, a file or a
 * directory of files) and the "bert_acc" metric (masked-LM and next-sentence accuracy). */
int fl__app_bert_config(const fl_app_config *c, fl_model_bert_config *out);
int fl__app_bert_open(const fl_app_config *c, const char *dir, int train, int rank, int nranks, fl_var *const *feeds,
                      int nfeeds, void **st);
int fl__app_bert_pass(void *st, fl_exe *e, fl_prog *p, int train, int thread, const char *const *fetch, int nfetch,
                      int epoch, app_pass *out, app_batch_fn fn, void *user);
void fl__app_bert_close(void *st);
int64_t fl__app_bert_steps(void *st, int batch_size);
int fl__app_bert_threads(void *st);
fl_var *fl__app_bert_metric(fl_var *predict, fl_var *label);
int fl__app_bert_evaluate(const fl_app_config *c, fl_exe *exe, fl_prog *prog, fl_var *const *feeds, int nfeeds,
                          fl_var *predict, double *metric);
int fl__app_bert_infer(const fl_app_config *c, fl_exe *exe, fl_prog *prog, fl_var *predict, FILE *out, int64_t *lines);

#endif
