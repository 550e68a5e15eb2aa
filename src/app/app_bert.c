/*
 * app_bert.c - BERT's rows of the app tables (see app_internal.h): the "bert" reader over
 * fleet/models.h's BERT pre-training reader (Paddle's demo format, masking and negative
 * pairs, this worker's batches), and the "bert_acc" metric: masked-LM and next-sentence
 * accuracy of test_data beside the unigram baseline (the most frequent masked token's share).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "app_internal.h"

typedef struct {
    const fl_app_config *c;
    fl_model_bert_reader *r;
    int nranks;
    int64_t vocab_size;
    int64_t planned_epoch; /* the pass begun (-1: none) */
    int64_t max_steps;     /* option max_steps of a training reader (0: none) */
} bert_reader;

int fl__app_bert_config(const fl_app_config *c, fl_model_bert_config *out)
{
    *out = fl_model_bert_default();
    if (c->bert_config[0]) {
        FL_CHECK(fl_model_bert_config_load(c->bert_config, out));
        if (c->max_length > out->max_position_embeddings)
            return fl__err(FL_EINVAL, "option max_length: %d is above max_position_embeddings %d of bert_config '%s'",
                           c->max_length, out->max_position_embeddings, c->bert_config);
        return FL_OK;
    }
    if (c->d_model != c->n_head * (c->d_model / c->n_head))
        return fl__err(FL_EINVAL, "option d_model: %d is not a multiple of n_head %d", c->d_model, c->n_head);
    out->num_hidden_layers = c->n_layer;
    out->num_attention_heads = c->n_head;
    out->hidden_size = c->d_model;
    out->intermediate_size = c->d_inner_hid;
    out->hidden_dropout_prob = out->attention_probs_dropout_prob = (float)c->dropout;
    if (c->max_length > out->max_position_embeddings) out->max_position_embeddings = c->max_length;
    return FL_OK;
}

static int skip_name(const char *path)
{
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    size_t n = strlen(b);
    return !strcmp(b, "vocab.txt") || !strcmp(b, "lightning.conf") || (n > 5 && !strcmp(b + n - 5, ".json")) ||
           (n > 3 && !strcmp(b + n - 3, ".md"));
}

/* dir: a data file, or a directory whose *.gz files (none: its files other than vocab.txt,
 * *.json, *.md) are the data */
static int open_reader(const fl_app_config *c, const char *dir, int train, int rank, int nranks, bert_reader *r)
{
    const char *what = train ? "train_data" : "test_data";
    fl_model_bert_config bc;
    FL_CHECK(fl__app_bert_config(c, &bc));
    struct stat sb;
    char **files = NULL, *one = (char *)dir;
    int n = 0, use = 0;
    if (*dir && !stat(dir, &sb) && S_ISREG(sb.st_mode)) {
        files = &one;
        use = 1;
    } else {
        FL_CHECK(fl__app_list_dir(what, dir, &files, &n));
        int gz = 0;
        for (int i = 0; i < n; i++) gz += strlen(files[i]) > 3 && !strcmp(files[i] + strlen(files[i]) - 3, ".gz");
        for (int i = 0; i < n; i++) {
            size_t l = strlen(files[i]);
            int keep = gz ? l > 3 && !strcmp(files[i] + l - 3, ".gz") : !skip_name(files[i]);
            if (keep) files[use++] = files[i];
            else free(files[i]);
        }
    }
    fl_model_bert_reader_opts o = fl_model_bert_reader_default();
    o.max_seq_len = c->max_length;
    o.batch_size = c->batch_size;
    o.shuffle = train;
    o.seed = c->seed;
    o.vocab_size = r->vocab_size = bc.vocab_size;
    o.rank = train ? rank : 0;
    o.nranks = train ? nranks : 1;
    int st = use ? fl_model_bert_reader_create((const char *const *)files, use, &o, &r->r)
                 : fl__err(FL_ENOTFOUND, "%s '%s' holds no BERT data files", what, dir);
    if (st != FL_OK) st = fl__err(st, "%s: %s", what, fl_last_error());
    if (files != &one) {
        for (int i = 0; i < use; i++) free(files[i]);
        free(files);
    }
    return st;
}

void fl__app_bert_close(void *p)
{
    bert_reader *r = p;
    if (!r) return;
    fl_model_bert_reader_free(r->r);
    free(r);
}

int fl__app_bert_open(const fl_app_config *c, const char *dir, int train, int rank, int nranks, fl_var *const *feeds,
                      int nfeeds, void **st)
{
    *st = NULL;
    if (nfeeds != 7) return fl__err(FL_EINVAL, "bert reader: the model has %d inputs, not BERT's 7", nfeeds);
    bert_reader *r = calloc(1, sizeof *r);
    if (!r) return fl__err(FL_ENOMEM, "bert reader: out of memory");
    r->c = c;
    r->planned_epoch = -1;
    r->nranks = train ? nranks : 1;
    r->max_steps = train ? c->max_steps : 0;
    int s = open_reader(c, dir, train, rank, nranks, r);
    if (s != FL_OK) {
        fl__app_bert_close(r);
        return s;
    }
    *st = r;
    return FL_OK;
}

static int begin(bert_reader *r, int epoch)
{
    if (r->planned_epoch == epoch) return FL_OK;
    FL_CHECK(fl_model_bert_reader_begin(r->r, epoch));
    r->planned_epoch = epoch;
    return FL_OK;
}

/* Steps of a pass: the same on every rank (the shortest share; one rank: every batch), at
 * most max_steps. */
static int64_t steps(bert_reader *r)
{
    int64_t n = r->nranks > 1 ? fl_model_bert_reader_total_batches(r->r) / r->nranks
                              : fl_model_bert_reader_num_batches(r->r);
    return r->max_steps && n > r->max_steps ? r->max_steps : n;
}

int64_t fl__app_bert_steps(void *p, int batch_size)
{
    bert_reader *r = p;
    return begin(r, 0) == FL_OK ? steps(r) : 1;
}

int fl__app_bert_threads(void *p) { return 1; }

/* One pass: fetch[0] the loss (train), fetch[1] (or, in evaluation, fetch[0]) the [2]
 * accuracies; out->metric the masked-LM accuracy over the pass's masked tokens. */
int fl__app_bert_pass(void *p, fl_exe *e, fl_prog *prog, int train, int thread, const char *const *fetch, int nfetch,
                      int epoch, app_pass *out, app_batch_fn fn, void *user)
{
    bert_reader *r = p;
    memset(out, 0, sizeof *out);
    FL_CHECK(begin(r, epoch));
    r->planned_epoch = -1; /* the next pass begins anew */
    double t0 = fl__now(), loss = 0, mlm = 0, nsp = 0;
    int64_t masked = 0, nb = steps(r);
    fl_model_bert_batch b;
    memset(&b, 0, sizeof b);
    int st = FL_OK, got = 0;
    while (st == FL_OK && out->batches < nb && (got = fl_model_bert_reader_next(r->r, &b)) == 1) {
        fl_tensor *res[2] = {NULL, NULL};
        st = fl_exe_run(e, prog, b.feed, 7, fetch, nfetch, res);
        if (st != FL_OK) break;
        const fl_tensor *acc = train ? (nfetch > 1 ? res[1] : NULL) : res[0];
        if (acc) {
            const float *a = fl_tensor_cdata(acc);
            mlm += a[0] * b.masked;
            nsp += a[1] * b.examples;
        }
        masked += b.masked;
        out->instances += b.examples;
        out->batches++;
        if (train) loss += *(const float *)fl_tensor_cdata(res[0]);
        if (fn) st = fn(user, res, nfetch, b.examples);
        if (fn && st == FL_OK) st = fn(user, b.t, -7, b.masked); /* the batch's tensors (labels) */
        if (st == FL_OK && train && r->c->print_period && out->batches % r->c->print_period == 0) {
            printf("bert epoch %d batch %lld/%lld: loss %.4f\n", epoch + 1, (long long)out->batches, (long long)nb,
                   loss / (double)out->batches);
            fflush(stdout);
        }
    }
    if (st == FL_OK && got < 0) st = got;
    fl_model_bert_batch_clear(&b);
    FL_CHECK(st);
    out->seconds = fl__now() - t0;
    out->loss = out->batches ? loss / (double)out->batches : 0;
    out->metric = masked ? mlm / (double)masked : 0;
    if (train && out->batches)
        printf("bert epoch %d: masked-LM accuracy %.4f, next-sentence accuracy %.4f (train batches)\n", epoch + 1,
               out->metric, out->instances ? nsp / (double)out->instances : 0);
    return FL_OK;
}

/* ---- the bert_acc metric ------------------------------------------------------------------ */

fl_var *fl__app_bert_metric(fl_var *predict, fl_var *label) { return predict; }

typedef struct {
    double mlm, nsp;
    int64_t masked, examples, batches;
    int64_t *count, vocab; /* masked labels by id (the unigram baseline) */
    FILE *out;
    const fl_tensor *acc;
} bert_eval;

static int on_batch(void *user, fl_tensor **res, int nfetch, int n)
{
    bert_eval *v = user;
    if (nfetch >= 0) { /* the fetched accuracies */
        v->acc = res[0];
        v->examples += n;
        return FL_OK;
    }
    const float *a = fl_tensor_cdata(v->acc);
    v->mlm += a[0] * n;
    v->nsp += a[1] * (double)fl_tensor_shape(res[6])[0];
    v->masked += n;
    v->batches++;
    const int64_t *lab = fl_tensor_cdata(res[4]);
    for (int i = 0; i < n; i++)
        if (lab[i] >= 0 && lab[i] < v->vocab) v->count[lab[i]]++;
    if (v->out)
        fprintf(v->out,
                "batch %lld: %lld examples, %d masked tokens, masked-LM accuracy %.4f, next-sentence accuracy %.4f\n",
                (long long)v->batches, (long long)fl_tensor_shape(res[6])[0], n, a[0], a[1]);
    return FL_OK;
}

static int eval_test(const fl_app_config *c, fl_exe *exe, fl_prog *prog, fl_var *const *feeds, int nfeeds, fl_var *predict,
                     FILE *out, bert_eval *v)
{
    if (!c->test_data[0]) return fl__err(FL_EINVAL, "option test_data is not set (BERT data to evaluate on)");
    void *st;
    FL_CHECK(fl__app_bert_open(c, c->test_data, 0, 0, 1, feeds, nfeeds, &st));
    bert_reader *r = st;
    memset(v, 0, sizeof *v);
    v->vocab = r->vocab_size;
    v->out = out;
    int s = (v->count = calloc((size_t)v->vocab, sizeof *v->count)) ? FL_OK : fl__err(FL_ENOMEM, "bert: out of memory");
    const char *fetch[1] = {fl_var_name(predict)};
    app_pass p;
    if (s == FL_OK) s = fl__app_bert_pass(r, exe, prog, 0, 1, fetch, 1, 0, &p, on_batch, v);
    fl__app_bert_close(r);
    return s;
}

int fl__app_bert_evaluate(const fl_app_config *c, fl_exe *exe, fl_prog *prog, fl_var *const *feeds, int nfeeds,
                          fl_var *predict, double *metric)
{
    bert_eval v;
    int st = eval_test(c, exe, prog, feeds, nfeeds, predict, NULL, &v);
    if (st == FL_OK) {
        int64_t top = 0;
        for (int64_t i = 0; i < v.vocab; i++)
            if (v.count[i] > top) top = v.count[i];
        double mlm = v.masked ? v.mlm / (double)v.masked : 0, nsp = v.examples ? v.nsp / (double)v.examples : 0;
        printf("bert: test masked-LM accuracy %.4f (unigram baseline %.4f) on %lld masked tokens, next-sentence accuracy "
               "%.4f on %lld examples\n",
               mlm, v.masked ? (double)top / (double)v.masked : 0, (long long)v.masked, nsp, (long long)v.examples);
        fflush(stdout);
        *metric = mlm;
    }
    free(v.count);
    return st;
}

int fl__app_bert_infer(const fl_app_config *c, fl_exe *exe, fl_prog *prog, fl_var *predict, FILE *out, int64_t *lines)
{
    fl_var *feeds[7];
    const char *names[7] = {"src_ids", "pos_ids", "sent_ids", "input_mask", "mask_label", "mask_pos", "labels"};
    for (int i = 0; i < 7; i++)
        if (!(feeds[i] = fl_prog_var(prog, names[i])))
            return fl__err(FL_EINVAL, "model_dir '%s': no %s input, not a BERT model", c->model_dir, names[i]);
    bert_eval v;
    int st = eval_test(c, exe, prog, feeds, 7, predict, out, &v);
    free(v.count);
    if (st == FL_OK) *lines = v.batches;
    return st;
}
