/*
 * runtime.c - the parameter-server runtime (see docs/parameter_server.md): the PS context
 * of a fleet handle and its lifecycle.
 *
 * fleet_distributed_optimizer makes the context (the mode the strategy selects, modes.c)
 * and installs the rewrite (rewrite.c), which derives the table list from the program.
 * Servers are created from the role (POD_IP:PADDLE_PORT) with those tables; workers
 * connect one client to every server and start the mode's communicator; saving is
 * "flush, barrier -> first worker saves -> barrier", the outcome shared through the 1x1
 * "@fleet_status@" table.  Util collectives among the workers use a ring made on first use
 * from PADDLE_TRAINER_ENDPOINTS.
 *
 * Ops find their context through the attribute ps_id (a registry, as the collective ops
 * find their communicator through ring_id): a program never points at a fleet handle.
 */
#include <stdio.h>
#include <string.h>

#include "../ring.h"
#include "fleet_ps.h"

#define MAX_CTX 64
static fl__ps_ctx *ctxs[MAX_CTX];
static pthread_mutex_t ctxs_mu = PTHREAD_MUTEX_INITIALIZER;

fl__ps_ctx *fl__ps_lookup(int64_t id, const char *op)
{
    fl__ps_ctx *c = NULL;
    pthread_mutex_lock(&ctxs_mu);
    if (id >= 0 && id < MAX_CTX) c = ctxs[id];
    pthread_mutex_unlock(&ctxs_mu);
    if (!c)
        fl__err(FL_ESTATE, "%s: no parameter-server context with ps_id %lld (the fleet handle was freed or never set up)",
                op, (long long)id);
    return c;
}

int fl__ps_need_client(fl__ps_ctx *c, const char *op, fl_ps_client **out)
{
    if (c->is_server) return fl__err(FL_ESTATE, "%s: this process is a parameter server; only workers run the program", op);
    if (c->stopped) return fl__err(FL_ESTATE, "%s: fleet_stop_worker was called; the worker is disconnected", op);
    if (!c->client) return fl__err(FL_ESTATE, "%s: call fleet_init_worker before running the training program", op);
    *out = c->client;
    return FL_OK;
}

/* The PS context of a parameter-server fleet (NULL before fleet_distributed_optimizer). */
static fl__ps_ctx *ctx_of(const fleet_t *f) { return f && f->runtime == &fl__runtime_ps ? f->rt : NULL; }

int fl__ps_fleet_tables(const fleet_t *f, const fl_ps_table_config **tables, int *n)
{
    fl__ps_ctx *c = ctx_of(f);
    if (!c || !c->prog) return fl__err(FL_ESTATE, "no parameter-server program: call fl_opt_minimize first");
    *tables = c->tables;
    *n = c->ntables;
    return FL_OK;
}

int fleet_ps_traffic(const fleet_t *f, fl_ps_traffic *out, int64_t *examples)
{
    if (!out) return fl__err(FL_EINVAL, "fleet_ps_traffic: out is NULL");
    fl__ps_ctx *c = ctx_of(f);
    if (!c) return fl__err(FL_ESTATE, "fleet_ps_traffic: not a parameter-server fleet (call fleet_distributed_optimizer)");
    pthread_mutex_lock(&c->mu);
    *out = c->traffic;
    fl_ps_traffic t;
    if (c->client && fl_ps_client_traffic(c->client, &t) == FL_OK) fl_ps_traffic_add(out, &t);
    if (c->comm) fl__ps_comm_traffic(c->comm, out);
    if (examples) *examples = c->examples;
    pthread_mutex_unlock(&c->mu);
    return FL_OK;
}

fl_ps_client *fl__ps_fleet_client(const fleet_t *f)
{
    fl__ps_ctx *c = ctx_of(f);
    return c ? c->client : NULL;
}

static void ctx_free(fl__ps_ctx *c)
{
    if (!c) return;
    pthread_mutex_lock(&ctxs_mu);
    if (c->id >= 0 && c->id < MAX_CTX && ctxs[c->id] == c) ctxs[c->id] = NULL;
    pthread_mutex_unlock(&ctxs_mu);
    fl__ps_comm_free(c->comm);
    fl_ps_client_free(c->client);
    fl_ps_server_free(c->server);
    for (int i = 0; i < c->ntables; i++) free((char *)c->tables[i].name);
    free(c->tables);
    for (int i = 0; i < c->nparams; i++) free(c->params[i].name);
    free(c->params);
    fl__free_strv(c->servers, c->nservers);
    free(c->pending);
    free(c->pending_table);
    if (c->geo_old)
        for (int i = 0; i < c->ntables; i++) free(c->geo_old[i]);
    free(c->geo_old);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

static int ctx_create(fleet_t *f, fl__ps_ctx **out)
{
    fl__ps_ctx *c = calloc(1, sizeof *c);
    if (!c) return fl__err(FL_ENOMEM, "fleet_distributed_optimizer: out of memory");
    pthread_mutex_init(&c->mu, NULL);
    c->id = -1;
    c->strategy = f->strategy;
    c->is_server = f->role->kind == FLEET_ROLE_SERVER;
    c->worker_index = f->role->worker_index;
    c->worker_num = f->role->worker_num;
    c->server_index = f->role->server_index;
    int st = fl__ps_mode_select(&f->strategy, &c->mode, &c->k_steps);
    if (st == FL_OK && (f->strategy.localsgd || f->strategy.gradient_merge))
        st = fl__err(FL_EUNSUPPORTED,
                     "fleet_distributed_optimizer: %s is a collective-mode strategy; parameter-server "
                     "mode does not apply it (unset it, or use fleet_init_collective)",
                     f->strategy.localsgd ? "localsgd" : "gradient_merge");
    if (st == FL_OK && f->role->nservers < 1)
        st = fl__err(FL_EINVAL, "fleet_distributed_optimizer: parameter-server mode needs at least one server endpoint");
    if (st == FL_OK) {
        c->servers = calloc((size_t)f->role->nservers, sizeof *c->servers);
        if (!c->servers) st = fl__err(FL_ENOMEM, "fleet_distributed_optimizer: out of memory");
        c->nservers = c->servers ? f->role->nservers : 0;
        for (int i = 0; st == FL_OK && i < c->nservers; i++)
            if (!(c->servers[i] = fl__strdup(f->role->servers[i]))) st = fl__err(FL_ENOMEM, "out of memory");
    }
    if (st == FL_OK) {
        pthread_mutex_lock(&ctxs_mu);
        for (int i = 0; i < MAX_CTX && c->id < 0; i++)
            if (!ctxs[i]) ctxs[c->id = i] = c;
        pthread_mutex_unlock(&ctxs_mu);
        if (c->id < 0)
            st = fl__err(FL_ENOMEM, "fleet_distributed_optimizer: more than %d parameter-server fleets in this process",
                         MAX_CTX);
    }
    if (st != FL_OK) {
        ctx_free(c);
        return st;
    }
    *out = c;
    return FL_OK;
}

/* ---- the runtime hooks --------------------------------------------------------------------- */

static int accepts(const fleet_role *role) { return role->distributed && !role->is_collective; }

static int init(fleet_t *f)
{
    f->rt = NULL; /* the context comes with the strategy, in distributed_optimizer */
    return FL_OK;
}

static int distributed_optimizer(fleet_t *f, fl_opt *opt)
{
    fl__ps_ctx *c = f->rt;
    if (c && (c->prog || c->tables))
        return fl__err(FL_ESTATE, "fleet_distributed_optimizer: this fleet handle already built a parameter-server "
                                  "program; one fleet handle trains one program");
    ctx_free(c); /* a second call before minimize: start again with the new strategy */
    f->rt = NULL;
    FL_CHECK(ctx_create(f, &c));
    f->rt = c;
    return fl__ps_install(c, opt);
}

/* The PS context of a fleet whose program is built. */
static int ps_ctx(fleet_t *f, const char *fn, fl__ps_ctx **out)
{
    fl__ps_ctx *c = f->rt;
    if (!c || !c->prog)
        return fl__err(FL_ESTATE,
                       "%s: call fleet_distributed_optimizer and fl_opt_minimize first: the parameter-server "
                       "tables are derived from the program",
                       fn);
    *out = c;
    return FL_OK;
}

static int ps_worker_client(fleet_t *f, const char *fn, fl__ps_ctx **c, fl_ps_client **cl)
{
    FL_CHECK(ps_ctx(f, fn, c));
    if (!fleet_is_worker(f)) return fl__err(FL_ESTATE, "%s: this process is a server", fn);
    return fl__ps_need_client(*c, fn, cl);
}

static int init_worker(fleet_t *f)
{
    fl__ps_ctx *c = NULL;
    FL_CHECK(ps_ctx(f, "fleet_init_worker", &c));
    if (c->stopped) return fl__err(FL_ESTATE, "fleet_init_worker: fleet_stop_worker was already called");
    if (c->client) return fl__err(FL_ESTATE, "fleet_init_worker: called twice");
    const fl_net_secret *sec = NULL;
    FL_CHECK(fl__fleet_secret(f, "fleet_init_worker", 1, &sec));
    fl_ps_client_opts o;
    memset(&o, 0, sizeof o);
    o.endpoints = (const char *const *)c->servers;
    o.num_servers = c->nservers;
    o.worker_rank = c->worker_index;
    o.num_workers = c->worker_num;
    o.tables = c->tables;
    o.num_tables = c->ntables;
    o.secret = sec;
    int st = fl_ps_client_opts_from_env(&o);
    fl_ps_client *cl = NULL;
    if (st == FL_OK) st = fl_ps_client_create(&o, &cl);
    if (st != FL_OK)
        return fl__err(st, "fleet_init_worker: worker %d could not connect to the parameter servers: %s", c->worker_index,
                       fl_last_error());
    pthread_mutex_lock(&c->mu);
    c->client = cl;
    int pending = c->has_pending;
    pthread_mutex_unlock(&c->mu);
    /* the startup program ran before: its parameters wait for the exchange */
    if (pending) {
        st = fl__ps_init_exchange(c, c->pending, c->pending_table, c->npending);
        c->has_pending = 0;
    }
    if (st == FL_OK && c->mode->start) st = c->mode->start(c, &o);
    if (st == FL_OK)
        FL_INFO(FL_SUB_FLEET, "worker %d connected to %d parameter servers (%s mode)", c->worker_index, c->nservers,
                c->mode->name);
    return st;
}

static int stop_worker(fleet_t *f)
{
    fl__ps_ctx *c = NULL;
    FL_CHECK(ps_ctx(f, "fleet_stop_worker", &c));
    if (c->stopped) return fl__err(FL_ESTATE, "fleet_stop_worker: called twice");
    if (!c->client) return fl__err(FL_ESTATE, "fleet_stop_worker: fleet_init_worker was not called (or failed)");
    /* every queued push reaches the servers before this worker says goodbye */
    int st = c->mode->flush ? c->mode->flush(c) : FL_OK;
    if (c->mode->stop) c->mode->stop(c);
    int st2 = fl_ps_client_stop(c->client);
    pthread_mutex_lock(&c->mu);
    fl_ps_client *cl = c->client;
    c->client = NULL;
    c->stopped = 1;
    fl_ps_traffic t;
    if (fl_ps_client_traffic(cl, &t) == FL_OK) fl_ps_traffic_add(&c->traffic, &t);
    t = c->traffic;
    int64_t ex = c->examples;
    pthread_mutex_unlock(&c->mu);
    fl_ps_client_free(cl);
    FL_INFO(FL_SUB_FLEET, "worker %d stopped after %lld steps", c->worker_index, (long long)c->step);
    double per = ex > 0 ? 1.0 / (double)ex : 0.0;
    FL_INFO(FL_SUB_FLEET,
            "worker %d traffic (%s mode): %llu bytes sent, %llu received over %lld examples: %.1f sent and %.1f "
            "received per example (dense values %.1f and %.1f)",
            c->worker_index, c->mode->name, (unsigned long long)t.bytes_sent, (unsigned long long)t.bytes_received,
            (long long)ex, (double)t.bytes_sent * per, (double)t.bytes_received * per, (double)t.dense_bytes_sent * per,
            (double)t.dense_bytes_received * per);
    return st != FL_OK ? st : st2;
}

static int init_server(fleet_t *f, const char *model_dir)
{
    fl__ps_ctx *c = NULL;
    FL_CHECK(ps_ctx(f, "fleet_init_server", &c));
    if (c->server) return fl__err(FL_ESTATE, "fleet_init_server: called twice");
    const fl_net_secret *sec = NULL;
    FL_CHECK(fl__fleet_secret(f, "fleet_init_server", 1, &sec));
    fl_ps_server_opts o;
    memset(&o, 0, sizeof o);
    o.endpoint = c->servers[c->server_index];
    o.server_index = c->server_index;
    o.num_servers = c->nservers;
    o.num_workers = c->worker_num;
    /* strategy.fleet_desc_configs: SSD tables are a server-local choice (not in the table
     * hash the workers compare), so only the servers' copies carry ssd_path and the budget */
    int ssd = 0;
    FL_CHECK(fl__strategy_ssd_table(&c->strategy, &ssd));
    for (int i = 0; ssd && i < c->ntables; i++)
        if (c->tables[i].kind == FL_PS_SPARSE) {
            c->tables[i].ssd_path = c->strategy.fleet_desc_configs.sparse_ssd_path;
            c->tables[i].mem_budget_mb = c->strategy.fleet_desc_configs.sparse_mem_budget_mb;
        }
    o.tables = c->tables;
    o.num_tables = c->ntables;
    o.sync = c->mode->server_sync;
    o.secret = sec;
    int st = fl_ps_server_opts_from_env(&o);
    fl_ps_server *s = NULL;
    if (st == FL_OK) st = fl_ps_server_create(&o, &s);
    if (st == FL_OK && model_dir && *model_dir) {
        st = fl_ps_server_load(s, model_dir);
        if (st != FL_OK)
            st = fl__err(st, "fleet_init_server: server %d cannot load '%s': %s", c->server_index, model_dir,
                         fl_last_error());
    }
    if (st != FL_OK) {
        fl_ps_server_free(s);
        return st;
    }
    c->server = s;
    FL_INFO(FL_SUB_FLEET, "server %d listening on %s (%s mode, %d tables)%s%s", c->server_index, fl_ps_server_endpoint(s),
            c->mode->name, c->ntables, model_dir && *model_dir ? ", loaded " : "", model_dir ? model_dir : "");
    return FL_OK;
}

static int run_server(fleet_t *f)
{
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

static int barrier_worker(fleet_t *f)
{
    fl__ps_ctx *c = NULL;
    fl_ps_client *cl = NULL;
    FL_CHECK(ps_worker_client(f, "fleet_barrier_worker", &c, &cl));
    return fl_ps_client_barrier(cl);
}

static int worker_ring(fleet_t *f, const char *fn)
{
    if (f->ring) return FL_OK;
    if (f->role->kind != FLEET_ROLE_WORKER)
        return fl__err(FL_ESTATE, "%s: called on a server; it runs among the workers", fn);
    if (f->role->worker_num <= 1) return FL_OK;
    if (f->role->nworkers != f->role->worker_num)
        return fl__err(FL_EINVAL,
                       "%s: the workers of this parameter-server job have no endpoints to talk to each other: "
                       "set PADDLE_TRAINER_ENDPOINTS (ip:port,... one per worker; fleetrun sets it)",
                       fn);
    const fl_net_secret *sec = NULL;
    FL_CHECK(fl__fleet_secret(f, fn, 1, &sec));
    /* every worker makes this call (it is collective), so they meet here */
    return fl__ring_create(f->role, sec, NULL, &f->ring);
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
    if (c->mode->flush) FL_CHECK(c->mode->flush(c));
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
    /* modes whose servers optimize: the newest server values; the others keep the
     * worker's own */
    for (int i = 0; c->mode->server_optimizes && i < c->nparams; i++) {
        if (c->params[i].sparse) continue;
        fl_tensor *t = fl_scope_find(fl_exe_scope(a->exe), c->params[i].name);
        const fl_ps_table_config *tc = &c->tables[c->params[i].table];
        if (!t || t->dtype != FL_FLOAT32 || t->numel != tc->rows * tc->cols)
            return fl__err(FL_ESTATE, "parameter '%s' is not initialized in the executor's scope", tc->name);
        int st = fl_ps_client_pull_dense(cl, c->params[i].table, t->data);
        fl__tensor_bump(t);
        FL_CHECK(st);
    }
    /* sparse tables come to the model as local tables (export.c) */
    return fl__ps_export_inference(c, cl, a->exe, a->dir, a->feeds, a->nfeed, a->targets, a->ntarget, a->prog);
}

static int save_persistables(fleet_t *f, fl_exe *exe, const char *dir, const fl_prog *prog)
{
    save_args a = {exe, dir, prog};
    return ps_first_worker_does(f, "fleet_save_persistables", dir, act_save_persistables, &a);
}

static int save_inference_model(fleet_t *f, fl_exe *exe, const char *dir, const char *const *feeds, int nfeed,
                                fl_var *const *targets, int ntarget, const fl_prog *prog)
{
    if (!exe) return fl__err(FL_EINVAL, "fleet_save_inference_model: executor is NULL");
    infer_args a = {exe, dir, feeds, nfeed, targets, ntarget, prog};
    return ps_first_worker_does(f, "fleet_save_inference_model", dir, act_save_inference, &a);
}

/* One worker alone, with no barrier (fleet_save_*_alone, save_one.c): this worker's queued
 * pushes are flushed, then it does what the first worker does in ps_first_worker_does. */
int fl__ps_infer_program(fleet_t *f, fl_prog *prog)
{
    fl__ps_ctx *c = NULL;
    FL_CHECK(ps_ctx(f, "fleet_dist_infer_program", &c));
    return fl__ps_rewrite_infer(c, prog);
}

int fl__ps_save_alone(fleet_t *f, fl_exe *exe, const char *dir, const char *const *feeds, int nfeed, fl_var *const *targets,
                      int ntarget, const fl_prog *prog, int inference)
{
    const char *fn = inference ? "fleet_save_inference_model_alone" : "fleet_save_persistables_alone";
    fl__ps_ctx *c = NULL;
    fl_ps_client *cl = NULL;
    FL_CHECK(ps_worker_client(f, fn, &c, &cl));
    if (!dir || !*dir) return fl__err(FL_EINVAL, "%s: directory is NULL or empty", fn);
    if (c->mode->flush) FL_CHECK(c->mode->flush(c));
    if (!inference) {
        save_args a = {exe, dir, prog};
        return act_save_persistables(f, c, cl, &a);
    }
    infer_args a = {exe, dir, feeds, nfeed, targets, ntarget, prog};
    return act_save_inference(f, c, cl, &a);
}

static int checkpoint_shared(fleet_t *f, const char *dir, int64_t step)
{
    fl__ps_ctx *c = NULL;
    fl_ps_client *cl = NULL;
    FL_CHECK(ps_worker_client(f, "fleet_save_checkpoint", &c, &cl));
    if (c->mode->flush) FL_CHECK(c->mode->flush(c)); /* every queued push reaches the servers */
    FL_CHECK(fl_ps_client_barrier(cl));
    return fleet_is_first_worker(f) ? fl_ps_client_save(cl, dir, 0, step) : FL_OK;
}

/* Through the 1x1 "sum" status table: worker 0 zeroes it, every worker adds 0 (ok) or 1,
 * every worker reads it back; the barriers keep the rounds apart. */
static int agree(fleet_t *f, int ok, const char *fn, int *all)
{
    fl__ps_ctx *c = NULL;
    fl_ps_client *cl = NULL;
    FL_CHECK(ps_worker_client(f, fn, &c, &cl));
    FL_CHECK(fl_ps_client_barrier(cl));
    float v = 0.0f;
    if (fleet_is_first_worker(f)) FL_CHECK(fl_ps_client_init_dense(cl, c->status_table, &v, 1, NULL));
    FL_CHECK(fl_ps_client_barrier(cl));
    v = ok ? 0.0f : 1.0f;
    FL_CHECK(fl_ps_client_push_dense(cl, c->status_table, &v));
    FL_CHECK(fl_ps_client_barrier(cl));
    FL_CHECK(fl_ps_client_pull_dense(cl, c->status_table, &v));
    *all = v == 0.0f;
    return FL_OK;
}

static void rt_free(fleet_t *f)
{
    ctx_free(f->rt);
    f->rt = NULL;
}

const fl__runtime fl__runtime_ps = {
    .name = "parameter-server",
    .accepts = accepts,
    .init = init,
    .distributed_optimizer = distributed_optimizer,
    .init_worker = init_worker,
    .stop_worker = stop_worker,
    .init_server = init_server,
    .run_server = run_server,
    .barrier_worker = barrier_worker,
    .worker_ring = worker_ring,
    .save_persistables = save_persistables,
    .save_inference_model = save_inference_model,
    .checkpoint_shared = checkpoint_shared,
    .agree = agree,
    .free = rt_free,
};
