/*
 * modes.c - the parameter-server mode table: one row per mode (see the recipe in
 * fleet_ps.h), and the hooks that are a mode's own.
 *
 *   sync        the servers apply a step once every worker pushed it; workers push
 *               gradients and pull parameters on the training thread (Paddle's sync mode)
 *   half_async  gradients go through the communicator's queues and send threads, as in
 *               async; at the end of each step (ps_recv) the worker's trainer threads meet
 *               and the last to arrive pushes the queued gradients (merged) and pulls the
 *               dense parameters for all (Paddle's HalfAsyncCommunicator: a barrier per
 *               batch within the worker, none between workers);
 *               servers apply each push as it comes
 *   async       workers queue gradients on a communicator whose send threads merge up to
 *               max_merge_var_num of them per push; dense parameters come back after each
 *               push, or with independent_recv_thread from a receive thread at its own
 *               pace; servers apply each push as it comes
 *   geo         workers train locally with their own optimizer; every k_steps they push
 *               (latest - old) / trainers to "sum" tables and pull the sum (Paddle's GEO-SGD)
 *
 * Paddle 2.x's strategy cannot select half-async (its program builder maps a_sync and
 * k_steps to sync, async and GEO only); a_sync_configs.half_async = true is our extension.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fleet_ps.h"

/* ---- selection ----------------------------------------------------------------------- */

static int selects_sync(const fleet_strategy *s) { return !s->a_sync; }
static int selects_half_async(const fleet_strategy *s)
{
    return s->a_sync && s->a_sync_configs.half_async && s->a_sync_configs.k_steps <= 0;
}
static int selects_async(const fleet_strategy *s) { return s->a_sync && s->a_sync_configs.k_steps <= 0; }
static int selects_geo(const fleet_strategy *s) { return s->a_sync && s->a_sync_configs.k_steps > 0; }

/* what fleet_strategy_set_ps_mode writes: the fields the selects() above read */
static void set_fields(fleet_strategy *s, int a_sync, int half_async, int64_t k_steps)
{
    s->a_sync = a_sync;
    s->a_sync_configs.half_async = half_async;
    s->a_sync_configs.k_steps = k_steps;
}
static void set_sync(fleet_strategy *s) { set_fields(s, 0, 0, 0); }
static void set_half_async(fleet_strategy *s) { set_fields(s, 1, 1, 0); }
static void set_async(fleet_strategy *s) { set_fields(s, 1, 0, 0); }
/* GEO keeps a period already chosen; 100 otherwise (the examples' and Paddle's usual) */
static void set_geo(fleet_strategy *s)
{
    set_fields(s, 1, 0, s->a_sync_configs.k_steps > 0 ? s->a_sync_configs.k_steps : 100);
}

/* ---- async and half-async: the communicator ------------------------------------------------- */

static int comm_start(fl__ps_ctx *c, const fl_ps_client_opts *o, int recv_mode)
{
    fl__ps_comm_var *vars = calloc((size_t)(c->nparams ? c->nparams : 1), sizeof *vars);
    if (!vars) return fl__err(FL_ENOMEM, "fleet_init_worker: out of memory");
    for (int i = 0; i < c->nparams; i++) {
        vars[i].table = c->params[i].table;
        vars[i].sparse = c->params[i].sparse;
        vars[i].numel = c->params[i].numel;
        vars[i].dim = c->tables[c->params[i].table].dim;
    }
    const fleet_strategy *s = &c->strategy;
    fl_ps_client_opts wire = *o; /* dense values in the wire dtype; the trainer's client
                                  * (initial exchange, saves) keeps float32 */
    wire.dense_wire_dtype = s->a_sync_configs.dense_wire_dtype;
    fl__ps_comm_opts co = {&wire,
                           vars,
                           c->nparams,
                           s->a_sync_configs.send_queue_size,
                           s->a_sync_configs.max_merge_var_num,
                           s->a_sync_configs.min_send_grad_num_before_recv,
                           s->a_sync_configs.send_wait_times,
                           s->a_sync_configs.thread_pool_size,
                           recv_mode};
    int st = fl__ps_comm_create(&co, &c->comm);
    free(vars);
    return st;
}

static int async_start(fl__ps_ctx *c, const fl_ps_client_opts *o)
{
    return comm_start(c, o,
                      c->strategy.a_sync_configs.independent_recv_thread ? FL__PS_RECV_THREAD : FL__PS_RECV_AFTER_SEND);
}

static int half_async_start(fl__ps_ctx *c, const fl_ps_client_opts *o) { return comm_start(c, o, FL__PS_RECV_NONE); }

static int async_flush(fl__ps_ctx *c) { return c->comm ? fl__ps_comm_flush(c->comm) : FL_OK; }

static void async_stop(fl__ps_ctx *c)
{
    if (!c->comm) return;
    int64_t grads = 0, pushes = fl__ps_comm_pushes(c->comm, &grads);
    FL_INFO(FL_SUB_FLEET, "worker %d: the %s communicator made %lld pushes (gradients per push %.2f)", c->worker_index,
            c->mode->name, (long long)pushes, pushes ? (double)grads / (double)pushes : 0.0);
    pthread_mutex_lock(&c->mu); /* fleet_ps_traffic reads both under mu */
    fl__ps_comm_traffic(c->comm, &c->traffic);
    fl__ps_comm *comm = c->comm;
    c->comm = NULL;
    pthread_mutex_unlock(&c->mu);
    fl__ps_comm_free(comm);
}

/* ---- geo: the snapshot of the last exchange ------------------------------------------------ */

static int geo_after_init(fl__ps_ctx *c, fl_tensor *const *ts, const int *tables, int n)
{
    pthread_mutex_lock(&c->mu);
    if (!c->geo_old) c->geo_old = calloc((size_t)c->ntables, sizeof *c->geo_old);
    int st = c->geo_old ? FL_OK : fl__err(FL_ENOMEM, "out of memory");
    for (int i = 0; st == FL_OK && i < n; i++) {
        float *o = realloc(c->geo_old[tables[i]], (size_t)ts[i]->numel * sizeof *o + 1);
        if (!o) {
            st = fl__err(FL_ENOMEM, "out of memory");
            break;
        }
        memcpy(o, ts[i]->data, (size_t)ts[i]->numel * sizeof *o);
        c->geo_old[tables[i]] = o;
    }
    pthread_mutex_unlock(&c->mu);
    return st;
}

/* ---- the table ------------------------------------------------------------------------------ */

static const fl__ps_mode mode_sync = {
    .name = "sync",
    .summary = "the servers apply a step once every worker pushed it; one trainer thread per worker",
    .selects = selects_sync,
    .set = set_sync,
    .server_optimizes = 1,
    .remote_sparse = 1,
    .single_trainer = 1,
    .server_sync = 1,
    .push = fl__ps_push_now,
    .pull = fl__ps_pull_now,
    .push_dense = fl__ps_push_now_dense,
    .pull_dense = fl__ps_pull_now_dense,
};

static const fl__ps_mode mode_half_async = {
    .name = "half_async",
    .summary = "gradients queued and merged; the worker's threads meet at each step end to push and pull",
    .selects = selects_half_async,
    .set = set_half_async,
    .server_optimizes = 1,
    .remote_sparse = 1,
    .push = fl__ps_push_queued,
    .dense_wire = 1,
    .pull = fl__ps_pull_flushed,
    .pull_dense = fl__ps_pull_flushed_dense,
    .start = half_async_start,
    .flush = async_flush,
    .stop = async_stop,
};

static const fl__ps_mode mode_async = {
    .name = "async",
    .summary = "gradients queued, merged and pushed by send threads; servers apply each push as it comes",
    .selects = selects_async,
    .set = set_async,
    .server_optimizes = 1,
    .remote_sparse = 1,
    .dense_wire = 1,
    .push = fl__ps_push_queued,
    .pull = fl__ps_pull_queued,
    .start = async_start,
    .flush = async_flush,
    .stop = async_stop,
};

static const fl__ps_mode mode_geo = {
    .name = "geo",
    .summary = "workers keep their optimizer; every k_steps they push parameter deltas and pull the sum",
    .selects = selects_geo,
    .set = set_geo,
    .single_trainer = 1,
    .after_init = geo_after_init,
};

/* half_async before async: it owns the async strategies with half_async set */
static const fl__ps_mode *const modes[] = {&mode_sync, &mode_half_async, &mode_async, &mode_geo, NULL};

int fl__ps_mode_select(const fleet_strategy *s, const fl__ps_mode **out, int64_t *k_steps)
{
    int64_t ks = s->a_sync_configs.k_steps;
    if (!s->a_sync && ks > 0)
        return fl__err(FL_EINVAL,
                       "fleet_distributed_optimizer: a_sync_configs.k_steps=%lld needs a_sync=true (GEO "
                       "mode); with a_sync=false (sync mode) k_steps must be 0",
                       (long long)ks);
    if (s->a_sync_configs.half_async && (!s->a_sync || ks > 0))
        return fl__err(FL_EINVAL,
                       "fleet_distributed_optimizer: a_sync_configs.half_async=true needs a_sync=true and k_steps <= 0 "
                       "(got a_sync=%d, k_steps=%lld)",
                       s->a_sync, (long long)ks);
    for (int i = 0; modes[i]; i++)
        if (modes[i]->selects(s)) {
            if (s->a_sync_configs.dense_wire_dtype != FL_FLOAT32 && !modes[i]->dense_wire)
                return fl__err(FL_EUNSUPPORTED,
                               "fleet_distributed_optimizer: a_sync_configs.dense_wire_dtype=%s applies to async and "
                               "half_async mode, not %s mode (leave it at float32)",
                               fl_dtype_name((fl_dtype)s->a_sync_configs.dense_wire_dtype), modes[i]->name);
            *out = modes[i];
            *k_steps = ks > 0 ? ks : 0;
            return FL_OK;
        }
    return fl__err(FL_EINVAL, "fleet_distributed_optimizer: no parameter-server mode for a_sync=%d, k_steps=%lld",
                   s->a_sync, (long long)ks);
}

/* ---- the public table (fleet/fleet.h) -------------------------------------------------------- */

static int count_modes(void)
{
    int n = 0;
    while (modes[n]) n++;
    return n;
}

static void describe(const fl__ps_mode *m, fleet_ps_mode *out)
{
    memset(out, 0, sizeof *out);
    out->name = m->name;
    out->summary = m->summary;
    out->server_optimizes = m->server_optimizes;
    out->remote_sparse = m->remote_sparse;
    out->single_trainer = m->single_trainer;
    out->server_sync = m->server_sync;
    out->dense_wire = m->dense_wire;
}

/* "sync, half_async, async or geo" into buf */
static const char *mode_names(char *buf, size_t cap)
{
    size_t off = 0;
    int n = count_modes();
    buf[0] = 0;
    for (int i = 0; i < n && off < cap; i++)
        off += (size_t)snprintf(buf + off, cap - off, "%s%s", i == 0 ? "" : i == n - 1 ? " or " : ", ", modes[i]->name);
    return buf;
}

static const fl__ps_mode *find_mode(const char *fn, const char *name)
{
    for (int i = 0; name && modes[i]; i++)
        if (!strcmp(modes[i]->name, name)) return modes[i];
    char names[256];
    fl__err(FL_EINVAL, "%s: name: expected a parameter-server mode, %s, got '%s'", fn, mode_names(names, sizeof names),
            name ? name : "(null)");
    return NULL;
}

int fleet_ps_mode_count(void) { return count_modes(); }

int fleet_ps_mode_at(int i, fleet_ps_mode *out)
{
    if (!out) return fl__err(FL_EINVAL, "fleet_ps_mode_at: out is NULL");
    if (i < 0 || i >= count_modes()) return fl__err(FL_EINVAL, "fleet_ps_mode_at: i=%d outside [0, %d)", i, count_modes());
    describe(modes[i], out);
    return FL_OK;
}

int fleet_ps_mode_info(const char *name, fleet_ps_mode *out)
{
    if (!out) return fl__err(FL_EINVAL, "fleet_ps_mode_info: out is NULL");
    const fl__ps_mode *m = find_mode("fleet_ps_mode_info", name);
    if (!m) return FL_EINVAL;
    describe(m, out);
    return FL_OK;
}

int fleet_strategy_set_ps_mode(fleet_strategy *s, const char *name)
{
    if (!s) return fl__err(FL_EINVAL, "fleet_strategy_set_ps_mode: strategy is NULL");
    const fl__ps_mode *m = find_mode("fleet_strategy_set_ps_mode", name);
    if (!m) return FL_EINVAL;
    m->set(s);
    return FL_OK;
}

int fleet_strategy_ps_mode(const fleet_strategy *s, fleet_ps_mode *out)
{
    if (!s) return fl__err(FL_EINVAL, "fleet_strategy_ps_mode: strategy is NULL");
    if (!out) return fl__err(FL_EINVAL, "fleet_strategy_ps_mode: out is NULL");
    const fl__ps_mode *m;
    int64_t k;
    int st = fl__ps_mode_select(s, &m, &k);
    if (st != FL_OK) { /* the selection's messages speak for fleet_distributed_optimizer */
        const char *e = fl_last_error(), *p = "fleet_distributed_optimizer: ";
        return fl__err(st, "fleet_strategy_ps_mode: %s", strncmp(e, p, strlen(p)) ? e : e + strlen(p));
    }
    describe(m, out);
    return FL_OK;
}
