/*
 * app_train.c - fl_app_train, fl_app_eval and fl_app_infer: a registry row driven through
 * the executor, the row's reader and the fleet facade (see fleet/app.h).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "app_internal.h"
#include "fleet/metrics.h"

static double scalar_of(const fl_tensor *t)
{
    if (fl_tensor_dtype(t) == FL_FLOAT64) return *(const double *)fl_tensor_cdata(t);
    if (fl_tensor_dtype(t) == FL_INT64) return (double)*(const int64_t *)fl_tensor_cdata(t);
    return *(const float *)fl_tensor_cdata(t);
}

static int in_list(const char *list, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = list; *p; p += strcspn(p, ",") + (p[strcspn(p, ",")] == ',')) {
        if (strcspn(p, ",") == n && !strncmp(p, word, n)) return 1;
    }
    return 0;
}

static int check_row(const fl_app_row *row, const fl_app_config *c, const char *who)
{
    if (!row || !c) return fl__err(FL_EINVAL, "%s: model row or config is NULL", who);
    if (!fl__app_reader(row->reader) || !fl__app_metric(row->metric)) return fl_last_status();
    return FL_OK;
}

/* The epoch and test scalars of a run to the executor's metrics writer (fleet/metrics.h:
 * metrics_dir, else FLEET_METRICS_DIR; none: nothing), under "lightning/<name>". */
static int metrics_put(fl_exe *e, const char *name, int64_t step, int epoch, double v)
{
    fl_metrics *m;
    FL_CHECK(fl_exe_get_metrics(e, &m));
    if (!m) return FL_OK;
    char tag[160];
    snprintf(tag, sizeof tag, "lightning/%s", name);
    FL_CHECK(fl_metrics_scalar(m, tag, step, epoch, v));
    return fl_metrics_flush(m);
}

static fl_opt *make_optimizer(const fl_app_config *c, int64_t steps_per_epoch)
{
    fl_opt *o = NULL;
    float lr = (float)c->lr;
    if (!strcmp(c->optimizer, "sgd")) o = fl_opt_sgd(lr);
    else if (!strcmp(c->optimizer, "momentum")) o = fl_opt_momentum(lr, (float)c->momentum, 0);
    else if (!strcmp(c->optimizer, "adam")) o = fl_opt_adam(lr, 0.9f, 0.999f, 1e-8f);
    else if (!strcmp(c->optimizer, "adagrad")) o = fl_opt_adagrad(lr, 1e-6f);
    else {
        fl__err(FL_EINVAL, "option optimizer: expected sgd, momentum, adam or adagrad, got '%s'", c->optimizer);
        return NULL;
    }
    if (!o || !strcmp(c->lr_decay, "none")) return o;
    int64_t steps = c->decay_steps ? c->decay_steps : steps_per_epoch > 0 ? steps_per_epoch : 1;
    if (!strcmp(c->lr_decay, "exponential")) {
        if (fl_opt_set_exponential_decay(o, steps, (float)c->decay_rate, 1) == FL_OK) return o;
    } else if (!strcmp(c->lr_decay, "cosine")) {
        if (fl_opt_set_cosine_decay(o, steps, c->epochs) == FL_OK) return o;
    } else {
        fl__err(FL_EINVAL, "option lr_decay: expected none, exponential or cosine, got '%s'", c->lr_decay);
    }
    fl_opt_free(o);
    return NULL;
}

/* The mode of c (the row's default when c names none): "local", "collective" or a
 * parameter-server mode of the library's table (fleet_ps_mode_info), which a row allows
 * with "ps" in its modes.  *ps 1 for the latter. */
static int resolve_mode(const fl_app_row *row, const fl_app_config *c, const char **mode, int *ps)
{
    *mode = c->mode[0] ? c->mode : row->kind == FL_APP_SPARSE ? "async" : "collective";
    fleet_ps_mode info;
    *ps = strcmp(*mode, "local") && strcmp(*mode, "collective");
    if (*ps && fleet_ps_mode_info(*mode, &info) != FL_OK) {
        char names[256] = "";
        size_t off = 0;
        for (int i = 0; i < fleet_ps_mode_count() && fleet_ps_mode_at(i, &info) == FL_OK && off < sizeof names; i++)
            off += (size_t)snprintf(names + off, sizeof names - off, ", %s", info.name);
        return fl__err(FL_EINVAL, "option mode: expected local, collective or a parameter-server mode (%s), got '%s'",
                       names + 2, *mode);
    }
    if (!in_list(row->modes, *ps ? "ps" : *mode))
        return fl__err(FL_EINVAL, "option mode: model %s trains in modes %s, not '%s'", row->name, row->modes, *mode);
    return FL_OK;
}

/* The strategy of a mode (a parameter-server mode: the fields that select it, GEO with
 * k_steps 100), then the strategy file, which may override any field; *ps_mode (ps only)
 * is the mode the final strategy selects, which the file may have changed. */
static int make_strategy(const fl_app_config *c, const char *mode, int ps, fleet_strategy *s, fleet_ps_mode *ps_mode)
{
    *s = fleet_strategy_default();
    if (ps) FL_CHECK(fleet_strategy_set_ps_mode(s, mode));
    if (c->strategy_file[0]) FL_CHECK(fleet_strategy_load(s, c->strategy_file));
    if (!ps) return FL_OK;
    if (fleet_strategy_ps_mode(s, ps_mode) != FL_OK)
        return fl__err(fl_last_status(), "option mode %s with strategy_file '%s': %s", mode, c->strategy_file,
                       fl_last_error());
    if (strcmp(ps_mode->name, mode))
        printf("mode %s: strategy_file %s selects %s mode (%s)\n", mode, c->strategy_file, ps_mode->name, ps_mode->summary);
    return FL_OK;
}

/* Option recompute: the builder's checkpoints on opt (a strategy file's recompute_configs,
 * which fleet_distributed_optimizer applies after this, take precedence). */
static int set_recompute(const fl_app_row *row, const fl_app_config *c, const fl_app_net *net, fl_opt *opt)
{
    if (!c->recompute) return FL_OK;
    if (!net->ncheckpoints)
        return fl__err(FL_EINVAL, "option recompute: model %s names no checkpoints to recompute between", row->name);
    size_t cap = 1, off = 0;
    for (int i = 0; i < net->ncheckpoints; i++) cap += strlen(fl_var_name(net->checkpoints[i])) + 1;
    char *names = malloc(cap);
    if (!names) return fl__err(FL_ENOMEM, "option recompute: out of memory");
    names[0] = 0;
    for (int i = 0; i < net->ncheckpoints; i++)
        off += (size_t)snprintf(names + off, cap - off, "%s%s", i ? "," : "", fl_var_name(net->checkpoints[i]));
    int st = fl_opt_set_recompute(opt, names);
    if (st == FL_OK) printf("%s: recompute between %d checkpoints\n", row->name, net->ncheckpoints);
    free(names);
    return st;
}

typedef struct {
    fl_app_net net;
    fl_var *metric;
    fl_opt *opt;
    fleet_t *fleet;
    fl_exe *exe;
    const app_reader *rd;
    void *data;
    fleet_t *ckpt; /* checkpoint_dir: the fleet that saves and loads them (the job's, or
                    * a one-worker fleet in local mode); NULL: none */
} train_ctx;

/* A local run's checkpoints: a fleet of one worker and no servers (a local role whatever
 * the environment says). */
static fleet_t *local_fleet(void)
{
    const char *ep = "127.0.0.1:6170"; /* never used: one worker has no peer */
    fleet_user_role spec = {1, 0, FLEET_ROLE_WORKER, 1, &ep, 1, NULL, 0};
    fleet_role *role;
    if (fleet_role_user_defined(&spec, &role) != FL_OK) return NULL;
    return fleet_init_collective(role, NULL);
}

/* The epoch to start from: after the newest checkpoint's (restoring the parameters,
 * optimizer state and *steps), or 0 when there is none. */
static int resume(const fl_app_row *row, const fl_app_config *c, train_ctx *t, int *first, int64_t *steps)
{
    *first = 0;
    if (!t->ckpt) return FL_OK;
    fleet_checkpoint_pos pos;
    int st = fleet_load_checkpoint(t->ckpt, t->exe, c->checkpoint_dir, t->net.prog, &pos);
    if (st == FL_ENOTFOUND) return FL_OK;
    if (st != FL_OK) return fl__err(st, "option checkpoint_dir: %s", fl_last_error());
    *first = (int)pos.epoch;
    *steps = pos.step;
    printf("%s: resumed after epoch %d (step %lld) from checkpoint_dir %s\n", row->name, *first, (long long)pos.step,
           c->checkpoint_dir);
    fflush(stdout);
    return FL_OK;
}

static int train_worker(const fl_app_row *row, const fl_app_config *c, train_ctx *t, int thread)
{
    int rank = t->fleet ? fleet_worker_index(t->fleet) : 0, nranks = t->fleet ? fleet_worker_num(t->fleet) : 1;
    if (t->fleet) FL_CHECK(fleet_init_worker(t->fleet));
    FL_CHECK(fl_exe_run(t->exe, fl_prog_startup(t->net.prog), NULL, 0, NULL, 0, NULL));
    const char *fetch[2] = {fl_var_name(t->net.loss), t->metric ? fl_var_name(t->metric) : NULL};
    int nfetch = t->metric ? 2 : 1;
    int64_t steps = 0;
    int first;
    FL_CHECK(resume(row, c, t, &first, &steps));
    for (int ep = first; ep < c->epochs; ep++) {
        app_pass s;
        FL_CHECK(t->rd->pass(t->data, t->exe, t->net.prog, 1, thread, fetch, nfetch, ep, &s, NULL, NULL));
        if (!s.instances)
            return fl__err(FL_ENOTFOUND, "epoch %d read no example from train_data '%s'", ep + 1, c->train_data);
        double eps = s.seconds > 0 ? (double)s.instances / s.seconds : 0;
        char train_metric[64] = "";
        if (t->metric) snprintf(train_metric, sizeof train_metric, " train %s %.4f", row->metric, s.metric);
        printf("%s worker %d/%d epoch %d/%d: loss %.4f%s, %lld examples in %.2f s (%.0f examples/s)\n", row->name, rank,
               nranks, ep + 1, c->epochs, s.loss, train_metric, (long long)s.instances, s.seconds, eps);
        fflush(stdout);
        steps += s.batches;
        char tag[64];
        snprintf(tag, sizeof tag, "train_%s", row->metric);
        FL_CHECK(metrics_put(t->exe, "loss", steps, ep, s.loss));
        if (t->metric) FL_CHECK(metrics_put(t->exe, tag, steps, ep, s.metric));
        FL_CHECK(metrics_put(t->exe, "examples_per_s", steps, ep, eps));
        fleet_checkpoint_pos pos = {ep + 1, 0, 0, steps}; /* a restart continues after this epoch */
        if (t->ckpt) FL_CHECK(fleet_save_checkpoint(t->ckpt, t->exe, c->checkpoint_dir, t->net.prog, &pos, 2));
    }
    const char *feeds[FL_APP_MAX_FEEDS];
    int ninputs = t->net.nfeeds - fl__app_metric(row->metric)->labelled;
    for (int i = 0; i < ninputs; i++) feeds[i] = fl_var_name(t->net.feeds[i]);
    if (t->fleet)
        FL_CHECK(
            fleet_save_inference_model(t->fleet, t->exe, c->model_dir, feeds, ninputs, &t->net.predict, 1, t->net.prog));
    else FL_CHECK(fl_io_save_inference_model(t->exe, c->model_dir, feeds, ninputs, &t->net.predict, 1, t->net.prog));
    if (rank == 0) {
        char conf[FL_APP_PATH + 32];
        snprintf(conf, sizeof conf, "%s/lightning.conf", c->model_dir);
        FL_CHECK(fl_app_config_save(c, conf));
        printf("%s: inference model saved to %s\n", row->name, c->model_dir);
        if (c->test_data[0]) {
            double m;
            FL_CHECK(fl_app_eval(row, c, &m));
            char tag[64];
            snprintf(tag, sizeof tag, "test_%s", row->metric);
            FL_CHECK(metrics_put(t->exe, tag, steps, c->epochs - 1, m));
        }
    }
    if (t->fleet) FL_CHECK(fleet_stop_worker(t->fleet));
    return FL_OK;
}

int fl_app_train(const fl_app_row *row, const fl_app_config *c)
{
    FL_CHECK(check_row(row, c, "fl_app_train"));
    const char *mode;
    int ps;
    FL_CHECK(resolve_mode(row, c, &mode, &ps));
    int local = !strcmp(mode, "local"), collective = !strcmp(mode, "collective");
    train_ctx t;
    memset(&t, 0, sizeof t);
    t.rd = fl__app_reader(row->reader);
    fleet_strategy s;
    fleet_ps_mode pm = {0};
    int st = FL_OK;
    if (!local) {
        FL_CHECK(make_strategy(c, mode, ps, &s, &pm));
        if (ps) mode = pm.name;
        t.fleet = collective ? fleet_init_collective(NULL, &s) : fleet_init(NULL, &s);
        if (!t.fleet) return fl_last_status();
    }
    int server = t.fleet && fleet_is_server(t.fleet);
    /* sparse tables on the servers as the mode says (async, sync); GEO and collective keep them local */
    int dist = t.fleet && ps && pm.remote_sparse && fleet_server_num(t.fleet) > 0;
    int rank = t.fleet && !server ? fleet_worker_index(t.fleet) : 0;
    int nranks = t.fleet && !server ? fleet_worker_num(t.fleet) : 1;
    t.net.prog = fl_prog_create();
    t.exe = fl_exe_create(NULL);
    if (!t.net.prog || !t.exe) st = fl__err(FL_ENOMEM, "fl_app_train: out of memory");
    if (st == FL_OK) {
        fl_prog_set_seed(t.net.prog, c->seed);
        st = row->build(&t.net, c, dist);
    }
    const app_metric *mt = fl__app_metric(row->metric);
    if (st == FL_OK && (t.net.nfeeds < 1 + mt->labelled || !t.net.predict || !t.net.loss))
        st = fl__err(FL_EINVAL, "model %s: its builder left feeds, predict or loss unset", row->name);
    if (st == FL_OK && mt->build &&
        !(t.metric = mt->build(t.net.predict, mt->labelled ? t.net.feeds[t.net.nfeeds - 1] : NULL)))
        st = fl__err(fl_last_status(), "model %s: metric %s: %s", row->name, row->metric, fl_last_error());
    if (st == FL_OK && c->metrics_dir[0]) st = fl_exe_set_metrics(t.exe, c->metrics_dir, NULL);
    if (st == FL_OK && !server) st = t.rd->open(c, c->train_data, 1, rank, nranks, t.net.feeds, t.net.nfeeds, &t.data);
    if (st == FL_OK && !(t.opt = row->optimizer ? row->optimizer(&t.net, c)
                                                : make_optimizer(c, t.data ? t.rd->steps(t.data, c->batch_size) : 1)))
        st = fl_last_status();
    if (st == FL_OK) st = set_recompute(row, c, &t.net, t.opt);
    if (st == FL_OK && t.fleet && !fleet_distributed_optimizer(t.fleet, t.opt, &s)) st = fl_last_status();
    if (st == FL_OK) st = fl_opt_minimize(t.opt, t.net.loss);
    if (st == FL_OK && c->checkpoint_dir[0] && !server && !(t.ckpt = t.fleet ? t.fleet : local_fleet()))
        st = fl_last_status();
    if (st == FL_OK && server) {
        char from[FL_APP_PATH + 64]; /* a restarted job: the tables of the newest checkpoint */
        int resumed = c->checkpoint_dir[0] && fleet_checkpoint_latest(c->checkpoint_dir, from, sizeof from, NULL) == FL_OK;
        st = fleet_init_server(t.fleet, resumed ? from : NULL);
        if (st == FL_OK) st = fleet_run_server(t.fleet);
    } else if (st == FL_OK) {
        /* collective programs and the modes that exchange one step per process (sync, GEO): one trainer */
        int thread = collective || (ps && pm.single_trainer) ? 1 : c->thread;
        /* the threads that train: a dataset has one reader per file of this worker's share */
        int avail = t.rd->threads(t.data), used = thread < avail ? thread : avail;
        char why[160] = "";
        if (used < thread)
            snprintf(why, sizeof why, " (thread %d: train_data gives this worker %d file(s), one reader each)", thread,
                     avail);
        printf("%s: mode %s, %s %d of %d, %s lr %g, batch %d, %d epoch(s), %d thread(s)%s\n", row->name, mode,
               local || !t.fleet || !fleet_is_distributed(t.fleet) ? "local worker" : "worker", rank, nranks, c->optimizer,
               c->lr, c->batch_size, c->epochs, used, why);
        st = train_worker(row, c, &t, thread);
    }
    if (t.data) t.rd->close(t.data);
    fl_opt_free(t.opt);
    fl_exe_free(t.exe);
    fl_prog_free(t.net.prog);
    if (t.ckpt != t.fleet) fleet_free(t.ckpt);
    fleet_free(t.fleet);
    return st;
}

/* ---- a saved model: eval and infer ------------------------------------------------------------ */

typedef struct {
    fl_exe *exe;
    fl_prog *prog;
    char **feeds, **fetches;
    int nfeed, nfetch;
    fl_var *vars[FL_APP_MAX_FEEDS + 1];
    int nvars;
    fl_var *predict, *metric;
    void *data;
} saved;

static void saved_free(const app_reader *rd, saved *m)
{
    if (m->data) rd->close(m->data);
    fl_io_free_names(m->feeds, m->nfeed);
    fl_io_free_names(m->fetches, m->nfetch);
    fl_exe_free(m->exe); /* its plans point into the program */
    fl_prog_free(m->prog);
}

/* Loads model_dir; a labelled metric adds the int64 [1] "label" input (and, with_metric,
 * its graph metric); opens test_data unless the metric evaluates the model itself. */
static int saved_open(const fl_app_row *row, const fl_app_config *c, int with_metric, saved *m)
{
    memset(m, 0, sizeof *m);
    const app_metric *mt = fl__app_metric(row->metric);
    if (!c->model_dir[0]) return fl__err(FL_EINVAL, "option model_dir is not set");
    if (!(m->exe = fl_exe_create(NULL))) return fl_last_status();
    FL_CHECK(fl_io_load_inference_model(m->exe, c->model_dir, &m->prog, &m->feeds, &m->nfeed, &m->fetches, &m->nfetch));
    if (m->nfetch < 1 || m->nfeed > FL_APP_MAX_FEEDS)
        return fl__err(FL_EINVAL, "model_dir '%s': %d inputs and %d outputs, not a model of this tool", c->model_dir,
                       m->nfeed, m->nfetch);
    for (int i = 0; i < m->nfeed; i++)
        if (!(m->vars[m->nvars++] = fl_prog_var(m->prog, m->feeds[i])))
            return fl__err(FL_ECORRUPT, "model_dir '%s': input '%s' is not in the program", c->model_dir, m->feeds[i]);
    fl_var *label = NULL;
    if (mt->labelled && !mt->evaluate && !mt->infer) { /* a model with its own evaluation reads its labels itself */
        if (!(label = fl_prog_var(m->prog, "label")))
            label = fl_layer_data(m->prog, "label", 1, (const int64_t[]){1}, FL_INT64, 0);
        if (!label) return fl_last_status();
        m->vars[m->nvars++] = label;
    }
    if (!(m->predict = fl_prog_var(m->prog, m->fetches[0]))) return fl_last_status();
    if (with_metric && mt->build && !mt->score && !(m->metric = mt->build(m->predict, label)))
        return fl__err(fl_last_status(), "model_dir '%s': metric %s: %s", c->model_dir, row->metric, fl_last_error());
    FL_CHECK(fl_exe_run(m->exe, fl_prog_startup(m->prog), NULL, 0, NULL, 0, NULL));
    if ((with_metric && mt->evaluate) || (!with_metric && mt->infer)) return FL_OK;
    return fl__app_reader(row->reader)->open(c, c->test_data, 0, 0, 1, m->vars, m->nvars, &m->data);
}

typedef struct {
    const app_metric *mt;
    double sum, last;
    int64_t n;
} metric_acc;

static int on_metric(void *user, fl_tensor **res, int nfetch, int batch)
{
    metric_acc *a = user;
    if (a->mt->score) return a->mt->score(res[0], batch, &a->sum, &a->n);
    a->last = scalar_of(res[0]);
    a->sum += a->last * batch;
    a->n += batch;
    return FL_OK;
}

int fl_app_eval(const fl_app_row *row, const fl_app_config *c, double *metric)
{
    FL_CHECK(check_row(row, c, "fl_app_eval"));
    const app_reader *rd = fl__app_reader(row->reader);
    saved m;
    int st = saved_open(row, c, 1, &m);
    metric_acc acc = {fl__app_metric(row->metric), 0, 0, 0};
    double v = 0;
    if (st == FL_OK && acc.mt->evaluate) {
        st = acc.mt->evaluate(c, m.exe, m.prog, m.vars, m.nvars, m.predict, &v);
        if (st == FL_OK && metric) *metric = v;
        saved_free(rd, &m);
        return st;
    }
    app_pass s;
    const char *fetch[1] = {m.metric ? fl_var_name(m.metric) : m.predict ? fl_var_name(m.predict) : ""};
    if (st == FL_OK) st = rd->pass(m.data, m.exe, m.prog, 0, 1, fetch, 1, 0, &s, on_metric, &acc);
    if (st == FL_OK && !acc.n) st = fl__err(FL_ENOTFOUND, "test_data '%s': no example read", c->test_data);
    if (st == FL_OK) {
        v = acc.mt->cumulative ? acc.last : acc.sum / (double)acc.n;
        printf("%s: test %s %.4f on %lld examples (%.2f s)\n", row->name, row->metric, v, (long long)acc.n, s.seconds);
        if (metric) *metric = v;
    }
    saved_free(rd, &m);
    return st;
}

static int on_predict(void *user, fl_tensor **res, int nfetch, int batch)
{
    FILE *f = user;
    fl_tensor *p = res[0];
    int64_t w = fl_tensor_numel(p) / (batch > 0 ? batch : 1);
    const float *v = fl_tensor_f32(p);
    for (int i = 0; i < batch; i++) {
        for (int64_t j = 0; j < w; j++) fprintf(f, j ? " %.6g" : "%.6g", v[i * w + j]);
        fputc('\n', f);
    }
    return ferror(f) ? fl__err(FL_EIO, "writing predictions: %s", strerror(errno)) : FL_OK;
}

int fl_app_infer(const fl_app_row *row, const fl_app_config *c)
{
    FL_CHECK(check_row(row, c, "fl_app_infer"));
    const app_reader *rd = fl__app_reader(row->reader);
    saved m;
    int st = saved_open(row, c, 0, &m);
    FILE *f = stdout;
    if (st == FL_OK && c->output[0] && !(f = fopen(c->output, "w")))
        st = fl__err(FL_EIO, "output '%s': %s", c->output, strerror(errno));
    app_pass s;
    memset(&s, 0, sizeof s);
    const char *fetch[1] = {m.predict ? fl_var_name(m.predict) : ""};
    const app_metric *mt = fl__app_metric(row->metric);
    if (st == FL_OK && mt->infer) st = mt->infer(c, m.exe, m.prog, m.predict, f, &s.instances);
    else if (st == FL_OK) st = rd->pass(m.data, m.exe, m.prog, 0, 1, fetch, 1, 0, &s, on_predict, f);
    if (f && f != stdout && fclose(f) && st == FL_OK) st = fl__err(FL_EIO, "output '%s': %s", c->output, strerror(errno));
    if (st == FL_OK && f != stdout)
        printf("%s: %lld predictions written to %s\n", row->name, (long long)s.instances, c->output);
    saved_free(rd, &m);
    return st;
}
