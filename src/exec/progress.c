/*
 * progress.c - what a dataset pass (trainer.c) tells the user while it runs: the progress
 * line and the metrics records.
 *
 * Every trainer thread hands each batch's fetched values to fl__report_batch.  Values are
 * combined over all threads: a value computed by an op that also updates persistable
 * state (Paddle's auc, whose statistics accumulate) is cumulative, so the latest is shown;
 * any other (a loss, an accuracy) is averaged over the batches, weighted by their examples.
 *
 * On a terminal one line per process is rewritten in place (at most 4 times a second):
 * epoch, percent of the data read (fl_dataset_progress), the running values of the epoch,
 * examples/s and ETA.  Otherwise (a log file) a plain line every print_period batches of
 * the process, with the values of those batches.  With a metrics writer, every
 * print_period batches the same values go to it as <label>, examples_per_s and lr at the
 * global step, and after a training pass the epoch's as epoch/<label> at the epoch number
 * (infer/<label> after an inference pass).
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "progress.h"

/* Is v computed by an op that also writes a persistable variable (accumulated state)? */
static int cumulative(const fl_prog *p, const fl_var *v)
{
    for (int i = 0; v && i < p->nops; i++) {
        const fl_op *op = p->ops[i];
        int makes = 0, state = 0;
        for (int s = 0; s < FL_OP_MAX_SLOTS && op->def->out_names[s]; s++)
            for (int k = 0; k < op->out[s].n; k++) {
                makes |= op->out[s].vars[k] == v;
                state |= op->out[s].vars[k] && op->out[s].vars[k]->persistable;
            }
        if (makes) return state;
    }
    return 0;
}

/* The learning rate an update op of p reads, if p has one (a parameter-server worker's
 * program has none: its servers run the optimizer). */
static const fl_tensor *learning_rate(fl_exe *e, const fl_prog *p)
{
    for (int i = 0; i < p->nops; i++) {
        const fl_op *op = p->ops[i];
        for (int s = 0; s < FL_OP_MAX_SLOTS && op->def->in_names[s]; s++)
            if (!strcmp(op->def->in_names[s], "LearningRate") && op->in[s].n == 1) {
                const fl_tensor *t = fl_scope_find(fl_exe_scope(e), op->in[s].vars[0]->name);
                if (t && t->dtype == FL_FLOAT32 && t->numel >= 1) return t;
            }
    }
    return NULL;
}

int fl__report_begin(fl__report *r, fl_exe *e, fl_prog *p, fl_dataset *ds, const char *const *fetch,
                     const char *const *info, int nfetch, int print_period, int train)
{
    memset(r, 0, sizeof *r);
    FL_CHECK(fl_exe_get_metrics(e, &r->m));
    r->x = fl__exe_metrics_of(e);
    r->ds = ds;
    r->nfetch = nfetch;
    r->print_period = print_period;
    r->train = train;
    r->tty = isatty(STDOUT_FILENO);
    r->lr = train ? learning_rate(e, p) : NULL;
    for (int i = 0; i < nfetch; i++) {
        const char *l = info && info[i] ? info[i] : fetch[i];
        snprintf(r->label[i], sizeof r->label[i], "%s", l);
        char *t = r->tag[i];
        snprintf(t, sizeof r->tag[i], "%s", l);
        for (; *t; t++)
            if (!((*t >= 'a' && *t <= 'z') || (*t >= 'A' && *t <= 'Z') || (*t >= '0' && *t <= '9') || strchr("_-.", *t)))
                *t = '_';
        r->cumulative[i] = cumulative(p, fl_prog_var(p, fetch[i]));
    }
    pthread_mutex_init(&r->mu, NULL);
    r->t0 = r->win_t0 = fl__now();
    return FL_OK;
}

typedef fl__report_acc acc;

static void acc_add(acc *a, const double *v, int n, double w)
{
    for (int i = 0; i < n; i++) {
        a->sum[i] += v[i] * w;
        a->last[i] = v[i];
    }
    a->weight += w;
}

static double acc_value(const fl__report *r, const acc *a, int i)
{
    if (r->cumulative[i] || a->weight <= 0) return a->last[i];
    return a->sum[i] / a->weight;
}

static void metric(fl__report *r, const char *prefix, const char *tag, int64_t step, double v)
{
    char full[160];
    snprintf(full, sizeof full, "%s%s", prefix, tag);
    if (fl_metrics_scalar(r->m, full, step, r->x->epochs, v) != FL_OK && !r->warned) {
        r->warned = 1;
        FL_WARN(FL_SUB_EXEC, "metrics are not written any more: %s", fl_last_error());
    }
}

static void write_group(fl__report *r, const char *prefix, int64_t step, const acc *a, double ex_per_s)
{
    if (!r->m || r->warned) return;
    for (int i = 0; i < r->nfetch; i++) metric(r, prefix, r->tag[i], step, acc_value(r, a, i));
    metric(r, prefix, "examples_per_s", step, ex_per_s);
    if (r->lr) metric(r, prefix, "lr", step, ((const float *)r->lr->data)[0]);
    if (fl_metrics_flush(r->m) != FL_OK && !r->warned) {
        r->warned = 1;
        FL_WARN(FL_SUB_EXEC, "metrics are not written any more: %s", fl_last_error());
    }
}

static void fmt_secs(char *b, size_t n, double s)
{
    if (s < 0 || s > 1e7) snprintf(b, n, "?");
    else if (s < 60) snprintf(b, n, "%.0f s", s);
    else if (s < 3600) snprintf(b, n, "%d:%02d", (int)s / 60, (int)s % 60);
    else snprintf(b, n, "%d:%02d:%02d", (int)s / 3600, (int)s / 60 % 60, (int)s % 60);
}

/* The line: "train batch B (epoch E, P%)  label v ... | N ex/s  T s, ETA X". */
static void print_line(fl__report *r, const acc *a, int final)
{
    double now = fl__now(), el = now - r->t0;
    fl_data_progress pg;
    double f = fl_dataset_progress(r->ds, &pg) == FL_OK ? pg.fraction : 0;
    if (final) f = 1;
    char line[1024], eta[32];
    int k = snprintf(line, sizeof line, "%s batch %lld (epoch %d, %.0f%%)", r->train ? "train" : "infer",
                     (long long)r->batches, r->x->epochs, f * 100);
    for (int i = 0; i < r->nfetch && k < (int)sizeof line - 96; i++)
        k += snprintf(line + k, sizeof line - (size_t)k, "  %s %.6g", r->label[i], acc_value(r, a, i));
    fmt_secs(eta, sizeof eta, f > 0 ? el * (1 - f) / f : -1);
    snprintf(line + k, sizeof line - (size_t)k, "  | %.0f ex/s  %.1f s%s%s", el > 0 ? (double)r->examples / el : 0.0, el,
             final ? "" : ", ETA ", final ? "" : eta);
    if (r->tty) printf("\r%s\033[K%s", line, final ? "\n" : "");
    else printf("%s\n", line);
    fflush(stdout);
    r->last_print = now;
}

void fl__report_batch(fl__report *r, const double *vals, int examples)
{
    pthread_mutex_lock(&r->mu);
    acc_add(&r->win, vals, r->nfetch, examples);
    acc_add(&r->epoch, vals, r->nfetch, examples);
    r->batches++;
    r->examples += examples;
    r->win_examples += examples;
    int boundary = r->print_period > 0 && r->batches % r->print_period == 0;
    if (boundary) {
        double now = fl__now();
        if (!r->tty) print_line(r, &r->win, 0);
        if (r->train)
            write_group(r, "", r->x->steps + r->batches, &r->win,
                        now > r->win_t0 ? (double)r->win_examples / (now - r->win_t0) : 0.0);
        memset(&r->win, 0, sizeof r->win);
        r->win_examples = 0;
        r->win_t0 = now;
    }
    if (r->tty && r->print_period > 0 && (boundary || fl__now() - r->last_print >= 0.25)) print_line(r, &r->epoch, 0);
    pthread_mutex_unlock(&r->mu);
}

void fl__report_end(fl__report *r, int ok, double seconds)
{
    if (r->tty && r->print_period > 0 && r->batches > 0) print_line(r, &r->epoch, 1);
    if (ok && r->batches > 0) {
        double rate = seconds > 0 ? (double)r->examples / seconds : 0.0;
        if (r->train) write_group(r, "epoch/", r->x->epochs, &r->epoch, rate);
        else write_group(r, "infer/", r->x->epochs, &r->epoch, rate);
    }
    if (r->train) {
        r->x->epochs++;
        r->x->steps += r->batches;
    }
    pthread_mutex_destroy(&r->mu);
}
