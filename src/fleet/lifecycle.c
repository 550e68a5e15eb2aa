/* lifecycle.c - worker/server lifecycle, fleet.util collectives and distributed saving.
 *
 * Collective and non-distributed fleets: init_worker / stop_worker do nothing, save runs on
 * the first worker with the outcome shared by an allreduce.  Parameter-server fleets (see
 * docs/parameter_server.md): servers are created from the role (POD_IP:PADDLE_PORT) with
 * the tables the program derived, workers connect one client to every server, and saving
 * is "barrier -> first worker saves -> barrier", the outcome shared through the 1x1
 * "@fleet_status@" table. */
#include <stdio.h>
#include <string.h>

#include "comm.h"
#include "ps_internal.h"

static int check(fleet_t *f, const char *fn)
{
    if (!f || f->magic != FLEET_MAGIC) return fl__err(FL_EINVAL, "%s: fleet handle is NULL or invalid", fn);
    return fl__fleet_comm(f);
}

static int is_ps(const fleet_t *f) { return f->role->distributed && !f->role->is_collective; }

/* The PS context of a fleet whose program is built. */
static int ps_ctx(fleet_t *f, const char *fn, fl__ps_ctx **out)
{
    if (!f->ps || !f->ps->prog)
        return fl__err(FL_ESTATE, "%s: call fleet_distributed_optimizer and fl_opt_minimize first: the parameter-server "
                                  "tables are derived from the program",
                       fn);
    *out = f->ps;
    return FL_OK;
}

static int ps_worker_client(fleet_t *f, const char *fn, fl__ps_ctx **c, fl_ps_client **cl)
{
    FL_CHECK(ps_ctx(f, fn, c));
    if (!fleet_is_worker(f)) return fl__err(FL_ESTATE, "%s: this process is a server", fn);
    return fl__ps_need_client(*c, fn, cl);
}

/* Client options for this worker (the caller keeps sec alive while they are used). */
static int client_opts(fl__ps_ctx *c, const fl_net_secret *sec, fl_ps_client_opts *o)
{
    memset(o, 0, sizeof *o);
    o->endpoints = (const char *const *)c->servers;
    o->num_servers = c->nservers;
    o->worker_rank = c->worker_index;
    o->num_workers = c->worker_num;
    o->tables = c->tables;
    o->num_tables = c->ntables;
    o->secret = sec;
    return fl_ps_client_opts_from_env(o);
}

static int ps_init_worker(fleet_t *f)
{
    fl__ps_ctx *c = NULL;
    FL_CHECK(ps_ctx(f, "fleet_init_worker", &c));
    if (c->stopped) return fl__err(FL_ESTATE, "fleet_init_worker: fleet_stop_worker was already called");
    if (c->client) return fl__err(FL_ESTATE, "fleet_init_worker: called twice");
    fl_net_secret sec;
    FL_CHECK(fl__ps_secret(&sec, "fleet_init_worker"));
    fl_ps_client_opts o;
    int st = client_opts(c, &sec, &o);
    fl_ps_client *cl = NULL;
    if (st == FL_OK) st = fl_ps_client_create(&o, &cl);
    if (st != FL_OK) {
        fl_net_secret_clear(&sec);
        return fl__err(st, "fleet_init_worker: worker %d could not connect to the parameter servers: %s", c->worker_index,
                       fl_last_error());
    }
    pthread_mutex_lock(&c->mu);
    c->client = cl;
    int pending = c->has_pending;
    pthread_mutex_unlock(&c->mu);
    /* the startup program ran before: its parameters wait for the exchange */
    if (pending) {
        st = fl__ps_init_exchange(c, c->pending, c->pending_table, c->npending);
        c->has_pending = 0;
    }
    if (st == FL_OK && c->mode == FL__PSM_ASYNC) {
        fl__ps_comm_var *vars = calloc((size_t)(c->nparams ? c->nparams : 1), sizeof *vars);
        if (!vars) st = fl__err(FL_ENOMEM, "fleet_init_worker: out of memory");
        for (int i = 0; vars && i < c->nparams; i++) {
            vars[i].table = c->params[i].table;
            vars[i].sparse = c->params[i].sparse;
            vars[i].numel = c->params[i].numel;
            vars[i].dim = c->tables[c->params[i].table].dim;
        }
        const fleet_strategy *s = &c->strategy;
        fl__ps_comm_opts co = {&o, vars, c->nparams, s->a_sync_configs.send_queue_size, s->a_sync_configs.max_merge_var_num,
                               s->a_sync_configs.min_send_grad_num_before_recv};
        if (st == FL_OK) st = fl__ps_comm_create(&co, &c->comm);
        free(vars);
    }
    fl_net_secret_clear(&sec);
    if (st == FL_OK)
        FL_INFO(FL_SUB_FLEET, "worker %d connected to %d parameter servers (%s mode)", c->worker_index, c->nservers,
                fl__psm_name(c->mode));
    return st;
}

int fleet_init_worker(fleet_t *f)
{
    FL_CHECK(check(f, "fleet_init_worker"));
    if (!fleet_is_worker(f)) return fl__err(FL_ESTATE, "fleet_init_worker: this process is a server");
    if (!is_ps(f)) return FL_OK; /* collective or local: nothing to connect */
    return ps_init_worker(f);
}

int fleet_stop_worker(fleet_t *f)
{
    FL_CHECK(check(f, "fleet_stop_worker"));
    if (!fleet_is_worker(f)) return fl__err(FL_ESTATE, "fleet_stop_worker: this process is a server");
    if (!is_ps(f)) return FL_OK;
    fl__ps_ctx *c = NULL;
    FL_CHECK(ps_ctx(f, "fleet_stop_worker", &c));
    if (c->stopped) return fl__err(FL_ESTATE, "fleet_stop_worker: called twice");
    if (!c->client) return fl__err(FL_ESTATE, "fleet_stop_worker: fleet_init_worker was not called (or failed)");
    /* async: every queued gradient reaches the servers before this worker says goodbye */
    int st = c->comm ? fl__ps_comm_flush(c->comm) : FL_OK;
    if (c->comm)
        FL_INFO(FL_SUB_FLEET, "worker %d: the async communicator made %lld pushes", c->worker_index,
                (long long)fl__ps_comm_pushes(c->comm));
    fl__ps_comm_free(c->comm);
    c->comm = NULL;
    int st2 = fl_ps_client_stop(c->client);
    pthread_mutex_lock(&c->mu);
    fl_ps_client *cl = c->client;
    c->client = NULL;
    c->stopped = 1;
    pthread_mutex_unlock(&c->mu);
    fl_ps_client_free(cl);
    FL_INFO(FL_SUB_FLEET, "worker %d stopped after %lld steps", c->worker_index, (long long)c->step);
    return st != FL_OK ? st : st2;
}

int fleet_init_server(fleet_t *f, const char *model_dir)
{
    FL_CHECK(check(f, "fleet_init_server"));
    if (!fleet_is_server(f)) return fl__err(FL_ESTATE, "fleet_init_server: this process is not a server");
    fl__ps_ctx *c = NULL;
    FL_CHECK(ps_ctx(f, "fleet_init_server", &c));
    if (c->server) return fl__err(FL_ESTATE, "fleet_init_server: called twice");
    fl_net_secret sec;
    FL_CHECK(fl__ps_secret(&sec, "fleet_init_server"));
    fl_ps_server_opts o;
    memset(&o, 0, sizeof o);
    o.endpoint = c->servers[c->server_index];
    o.server_index = c->server_index;
    o.num_servers = c->nservers;
    o.num_workers = c->worker_num;
    o.tables = c->tables;
    o.num_tables = c->ntables;
    o.sync = c->mode == FL__PSM_SYNC;
    o.secret = &sec;
    int st = fl_ps_server_opts_from_env(&o);
    fl_ps_server *s = NULL;
    if (st == FL_OK) st = fl_ps_server_create(&o, &s);
    fl_net_secret_clear(&sec);
    if (st == FL_OK && model_dir && *model_dir) {
        st = fl_ps_server_load(s, model_dir);
        if (st != FL_OK)
            st = fl__err(st, "fleet_init_server: server %d cannot load '%s': %s", c->server_index, model_dir, fl_last_error());
    }
    if (st != FL_OK) {
        fl_ps_server_free(s);
        return st;
    }
    c->server = s;
    FL_INFO(FL_SUB_FLEET, "server %d listening on %s (%s mode, %d tables)%s%s", c->server_index, fl_ps_server_endpoint(s),
            fl__psm_name(c->mode), c->ntables, model_dir && *model_dir ? ", loaded " : "", model_dir ? model_dir : "");
    return FL_OK;
}

int fleet_run_server(fleet_t *f)
{
    FL_CHECK(check(f, "fleet_run_server"));
    if (!fleet_is_server(f)) return fl__err(FL_ESTATE, "fleet_run_server: this process is not a server");
    fl__ps_ctx *c = NULL;
    FL_CHECK(ps_ctx(f, "fleet_run_server", &c));
    if (!c->server) return fl__err(FL_ESTATE, "fleet_run_server: call fleet_init_server first");
    int st = fl_ps_server_run(c->server);
    char msg[1024] = "";
    if (st != FL_OK) snprintf(msg, sizeof msg, "%s", fl_last_error());
    fl_ps_server_free(c->server);
    c->server = NULL;
    if (st != FL_OK) return fl__err(st, "fleet_run_server: %s", msg);
    FL_INFO(FL_SUB_FLEET, "server %d: every worker stopped; exiting", c->server_index);
    return FL_OK;
}

int fleet_barrier_worker(fleet_t *f)
{
    FL_CHECK(check(f, "fleet_barrier_worker"));
    if (is_ps(f)) {
        fl__ps_ctx *c = NULL;
        fl_ps_client *cl = NULL;
        FL_CHECK(ps_worker_client(f, "fleet_barrier_worker", &c, &cl));
        return fl_ps_client_barrier(cl);
    }
    return f->comm ? fl__comm_barrier(f->comm) : FL_OK;
}

int fleet_util_barrier(fleet_t *f) { return fleet_barrier_worker(f); }


int fleet_util_all_reduce(fleet_t *f, void *buf, size_t count, fl_dtype dtype, const char *mode)
{
    FL_CHECK(check(f, "fleet_util_all_reduce"));
    if (!mode || (strcmp(mode, "sum") && strcmp(mode, "max") && strcmp(mode, "min")))
        return fl__err(FL_EINVAL, "fleet_util_all_reduce: mode '%s' is invalid: expected sum, max or min", mode ? mode : "(null)");
    if (count && !buf) return fl__err(FL_EINVAL, "fleet_util_all_reduce: buffer is NULL");
    FL_CHECK(fl__fleet_worker_comm(f, "fleet_util_all_reduce"));
    return f->comm ? fl__comm_allreduce(f->comm, buf, count, dtype, mode) : FL_OK;
}

int fleet_util_all_gather(fleet_t *f, const void *send, void *recv, size_t count, fl_dtype dtype)
{
    FL_CHECK(check(f, "fleet_util_all_gather"));
    if (count && (!send || !recv)) return fl__err(FL_EINVAL, "fleet_util_all_gather: buffer is NULL");
    FL_CHECK(fl__fleet_worker_comm(f, "fleet_util_all_gather"));
    if (f->comm) return fl__comm_allgather(f->comm, send, recv, count, dtype);
    if (count) memmove(recv, send, count * fl_dtype_size(dtype));
    return FL_OK;
}

/* Parameter-server saving: flush, barrier, the first worker acts and publishes its status
 * in the status table, barrier, the others read it. */
typedef int (*ps_save_fn)(fleet_t *f, fl__ps_ctx *c, fl_ps_client *cl, void *arg);

static int ps_first_worker_does(fleet_t *f, const char *fn, const char *dir, ps_save_fn act, void *arg)
{
    fl__ps_ctx *c = NULL;
    fl_ps_client *cl = NULL;
    FL_CHECK(ps_worker_client(f, fn, &c, &cl));
    if (!dir || !*dir) return fl__err(FL_EINVAL, "%s: directory is NULL or empty", fn);
    if (c->comm) FL_CHECK(fl__ps_comm_flush(c->comm));
    FL_CHECK(fl_ps_client_barrier(cl));
    int st = FL_OK;
    if (fleet_is_first_worker(f)) {
        st = act(f, c, cl, arg);
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", fl_last_error());
        float v = st == FL_OK ? 0.0f : 1.0f;
        int pst = fl_ps_client_init_dense(cl, c->status_table, &v, 1, NULL);
        int bst = pst == FL_OK ? fl_ps_client_barrier(cl) : pst; /* the others wait for it */
        if (st != FL_OK) return fl__err(st, "%s: %s", fn, msg);
        return bst;
    }
    FL_CHECK(fl_ps_client_barrier(cl));
    float v = 0.0f;
    FL_CHECK(fl_ps_client_pull_dense(cl, c->status_table, &v));
    if (v != 0.0f) return fl__err(FL_EREMOTE, "%s: the first worker failed to save to '%s' (see its log)", fn, dir);
    return st;
}

typedef struct {
    fl_exe *exe;
    const char *dir;
    const fl_prog *prog;
} save_args;

static int act_save_persistables(fleet_t *f, fl__ps_ctx *c, fl_ps_client *cl, void *arg)
{
    (void)f;
    save_args *a = arg;
    int64_t step;
    pthread_mutex_lock(&c->mu);
    step = c->step;
    pthread_mutex_unlock(&c->mu);
    FL_CHECK(fl_ps_client_save(cl, a->dir, 0, step));
    /* what the worker itself holds: its local persistables and its copies of the dense
     * parameters (the servers' checkpoint is what fleet_init_server restores) */
    return a->exe ? fl_io_save_persistables(a->exe, a->dir, a->prog ? a->prog : c->prog) : FL_OK;
}

int fleet_save_persistables(fleet_t *f, fl_exe *exe, const char *dir, const fl_prog *prog)
{
    FL_CHECK(check(f, "fleet_save_persistables"));
    if (is_ps(f)) {
        save_args a = {exe, dir, prog};
        return ps_first_worker_does(f, "fleet_save_persistables", dir, act_save_persistables, &a);
    }
    int st = fleet_is_first_worker(f) ? fl_io_save_persistables(exe, dir, prog) : FL_OK;
    /* every rank returns after the file is committed (or with the first worker's failure
     * reported on that worker) */
    int ok = st == FL_OK, all = ok;
    if (f->comm) {
        int64_t v = ok;
        int bst = fl__comm_allreduce(f->comm, &v, 1, FL_INT64, "min");
        if (bst != FL_OK) return bst;
        all = v != 0;
    }
    if (st != FL_OK) return st;
    if (!all) return fl__err(FL_EREMOTE, "fleet_save_persistables: the first worker failed to save to '%s'", dir);
    return FL_OK;
}

typedef struct {
    fl_exe *exe;
    const char *dir;
    const char *const *feeds;
    int nfeed;
    fl_var *const *targets;
    int ntarget;
    const fl_prog *prog;
} infer_args;

static int act_save_inference(fleet_t *f, fl__ps_ctx *c, fl_ps_client *cl, void *arg)
{
    (void)f;
    infer_args *a = arg;
    /* sync and async: the newest server values; GEO keeps the worker's own */
    for (int i = 0; c->mode != FL__PSM_GEO && i < c->nparams; i++) {
        if (c->params[i].sparse) continue;
        fl_tensor *t = fl_scope_find(fl_exe_scope(a->exe), c->params[i].name);
        const fl_ps_table_config *tc = &c->tables[c->params[i].table];
        if (!t || t->dtype != FL_FLOAT32 || t->numel != tc->rows * tc->cols)
            return fl__err(FL_ESTATE, "parameter '%s' is not initialized in the executor's scope", tc->name);
        FL_CHECK(fl_ps_client_pull_dense(cl, c->params[i].table, t->data));
    }
    /* sparse tables come to the model as local tables (ps_export.c) */
    return fl__ps_export_inference(c, cl, a->exe, a->dir, a->feeds, a->nfeed, a->targets, a->ntarget, a->prog);
}

int fleet_save_inference_model(fleet_t *f, fl_exe *exe, const char *dir, const char *const *feeds, int nfeed,
                               fl_var *const *targets, int ntarget, const fl_prog *prog)
{
    FL_CHECK(check(f, "fleet_save_inference_model"));
    if (is_ps(f)) {
        if (!exe) return fl__err(FL_EINVAL, "fleet_save_inference_model: executor is NULL");
        infer_args a = {exe, dir, feeds, nfeed, targets, ntarget, prog};
        return ps_first_worker_does(f, "fleet_save_inference_model", dir, act_save_inference, &a);
    }
    int st = fleet_is_first_worker(f) ? fl_io_save_inference_model(exe, dir, feeds, nfeed, targets, ntarget, prog) : FL_OK;
    if (f->comm) {
        int64_t v = st == FL_OK;
        int bst = fl__comm_allreduce(f->comm, &v, 1, FL_INT64, "min");
        if (bst != FL_OK) return bst;
        if (st == FL_OK && !v) return fl__err(FL_EREMOTE, "fleet_save_inference_model: the first worker failed to save to '%s'", dir);
    }
    return st;
}
