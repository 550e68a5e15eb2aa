/*
 * ops.c - operators of the parameter-server runtime (inserted by rewrite.c):
 *
 *   distributed_lookup_table       Ids[k] -> Out[k]: the rows of the batch's ids pulled from
 *                                  the servers in one pull (each distinct id requested
 *                                  once, one request per server); padding_idx reads zeros;
 *                                  is_test (set by fl_prog_clone(p, 1)) pulls without
 *                                  creating rows
 *   distributed_lookup_table_grad  Ids, Out@GRAD -> W@GRAD as SelectedRows (rows = ids)
 *   ps_send                        Grad[n]: each gradient through the mode's push (sync:
 *                                  to the servers, returning once every worker pushed and
 *                                  the server applied the step; async: queued on the
 *                                  communicator)
 *   ps_recv                        Param[n]: the dense parameters through the mode's pull
 *                                  (sync: from the servers; async: the newest values the
 *                                  receive thread pulled)
 *   ps_geo                         Param[n] in place: every k_steps push (latest - old) /
 *                                  trainers to the "sum" tables, pull, and rebase
 *   ps_init (startup program)      Param[n]: the initial exchange (fl__ps_init_exchange),
 *                                  or deferred to fleet_init_worker if not connected yet
 * Every op carries ps_id (its fleet's PS context) and, except the lookups, the list of
 * table indices `tables` parallel to its variables.
 */
#include <string.h>

#include "fleet_ps.h"

static int infer_nop(fl_op *op)
{
    (void)op;
    return FL_OK;
}

static int get_ctx(const fl_kctx *k, fl__ps_ctx **c)
{
    *c = fl__ps_lookup(fl__attr_i(k->op, "ps_id", -1), k->op->def->type);
    return *c ? FL_OK : FL_ESTATE;
}

static int table_at(const fl_kctx *k, const fl__ps_ctx *c, int i, int *t)
{
    const fl_attr *a = fl__attr_find(k->op, "tables");
    if (!a || a->type != FL_ATTR_INTS || i >= a->n || a->ints[i] < 0 || a->ints[i] >= c->ntables)
        return fl__err(FL_EINVAL, "%s: attribute 'tables' is missing or out of range", k->op->def->type);
    *t = (int)a->ints[i];
    return FL_OK;
}

static int param_of_table(const fl__ps_ctx *c, int t)
{
    for (int i = 0; i < c->nparams; i++)
        if (c->params[i].table == t) return i;
    return -1;
}

static int check_dense(const fl_kctx *k, const fl__ps_ctx *c, int t, const fl_tensor *x, const char *name)
{
    const fl_ps_table_config *tc = &c->tables[t];
    if (x->dtype != FL_FLOAT32 || x->is_rows || x->numel != tc->rows * tc->cols) {
        char d[96];
        fl_tensor_describe(x, d, sizeof d);
        return fl__err(FL_EINVAL, "%s: '%s' is %s%s, table '%s' holds %lld x %lld float32", k->op->def->type, name, d,
                       x->is_rows ? " (SelectedRows)" : "", tc->name, (long long)tc->rows, (long long)tc->cols);
    }
    return FL_OK;
}

/* ---- scratch buffers kept in an op's state ---------------------------------------------------- */

typedef struct {
    uint64_t *ids;
    int64_t *pos;
    float *vals, *tmp;
    size_t ids_cap, pos_cap, vals_cap, tmp_cap;
    int *tabs;       /* ps_send / ps_recv: the dense tables of one call */
    fl_tensor **ts;  /* and their tensors */
    size_t tabs_cap, ts_cap;
} scratch;

static void scratch_free(void *p)
{
    scratch *s = p;
    if (!s) return;
    free(s->ids);
    free(s->pos);
    free(s->vals);
    free(s->tmp);
    free(s->tabs);
    free(s->ts);
    free(s);
}

static int grow(void **p, size_t *cap, size_t n, size_t elem)
{
    if (n <= *cap) return FL_OK;
    size_t nc = *cap ? *cap : 64;
    while (nc < n) nc *= 2;
    void *q = realloc(*p, nc * elem);
    if (!q) return fl__err(FL_ENOMEM, "out of memory (%zu bytes)", nc * elem);
    *p = q;
    *cap = nc;
    return FL_OK;
}

static scratch *get_scratch(fl_kctx *k)
{
    if (!*k->state) *k->state = calloc(1, sizeof(scratch));
    if (!*k->state) fl__err(FL_ENOMEM, "%s: out of memory", k->op->def->type);
    return *k->state;
}

/* ---- distributed_lookup_table ------------------------------------------------------------------ */

static int infer_dlookup(fl_op *op)
{
    int n = op->in[0].n;
    int64_t dim = fl__attr_i(op, "dim", 0);
    if (n < 1 || op->out[0].n != n)
        return fl__op_error(op, "needs as many Out as Ids variables (got %d and %d)", n, op->out[0].n);
    if (dim <= 0) return fl__op_error(op, "attribute dim must be positive, got %lld", (long long)dim);
    for (int i = 0; i < n; i++) {
        fl_var *ids = op->in[0].vars[i], *o = op->out[0].vars[i];
        if (ids->dtype != FL_INT64 || ids->ndim < 2 || (ids->shape[ids->ndim - 1] != 1 && ids->shape[ids->ndim - 1] != -1))
            return fl__op_error(op, "ids '%s' must be int64 with last dimension 1", ids->name);
        int64_t sh[FL_MAX_DIMS];
        for (int d = 0; d + 1 < ids->ndim; d++) sh[d] = ids->shape[d];
        sh[ids->ndim - 1] = dim;
        fl__var_set_shape(o, FL_FLOAT32, ids->ndim, sh);
        o->lod_level = ids->lod_level;
    }
    return FL_OK;
}

static int run_dlookup(fl_kctx *k)
{
    fl__ps_ctx *c = NULL;
    fl_ps_client *cl = NULL;
    FL_CHECK(get_ctx(k, &c));
    FL_CHECK(fl__ps_need_client(c, "distributed_lookup_table", &cl));
    int table = (int)fl__attr_i(k->op, "table", -1);
    int64_t dim = fl__attr_i(k->op, "dim", 0), pad = fl__attr_i(k->op, "padding_idx", -1);
    int training = !fl__attr_i(k->op, "is_test", 0);
    if (table < 0 || table >= c->ntables || c->tables[table].kind != FL_PS_SPARSE || c->tables[table].dim != dim)
        return fl__err(FL_EINVAL, "distributed_lookup_table: table %d is not a sparse table of dim %lld", table,
                       (long long)dim);
    scratch *s = get_scratch(k);
    if (!s) return FL_ENOMEM;
    int64_t total = 0;
    for (int i = 0; i < k->nin[0]; i++) {
        const fl_tensor *ids = k->in[0][i];
        if (ids->dtype != FL_INT64 || ids->ndim < 1 || ids->shape[ids->ndim - 1] != 1)
            return fl__err(FL_EINVAL, "distributed_lookup_table: ids '%s' must be int64 with last dimension 1",
                           k->op->in[0].vars[i]->name);
        total += ids->numel;
    }
    FL_CHECK(grow((void **)&s->ids, &s->ids_cap, (size_t)total + 1, sizeof *s->ids));
    FL_CHECK(grow((void **)&s->pos, &s->pos_cap, (size_t)total + 1, sizeof *s->pos));
    /* the non-padding ids of every input, with their global positions */
    int64_t m = 0, at = 0;
    for (int i = 0; i < k->nin[0]; i++) {
        const fl_tensor *ids = k->in[0][i];
        const int64_t *id = ids->data;
        for (int64_t j = 0; j < ids->numel; j++, at++) {
            if (pad >= 0 && id[j] == pad) continue;
            if (FL_UNLIKELY(id[j] < 0))
                return fl__err(FL_EINVAL,
                               "distributed_lookup_table: id %lld at position %lld of '%s' is negative (table '%s')",
                               (long long)id[j], (long long)j, k->op->in[0].vars[i]->name, c->tables[table].name);
            s->ids[m] = (uint64_t)id[j];
            s->pos[m++] = at;
        }
    }
    FL_CHECK(grow((void **)&s->vals, &s->vals_cap, (size_t)(m * dim) + 1, sizeof *s->vals));
    FL_CHECK(fl_ps_client_pull_sparse(cl, table, s->ids, m, s->vals, training));
    /* scatter to the outputs (padding positions read zeros) */
    int64_t q = 0;
    at = 0;
    for (int i = 0; i < k->nin[0]; i++) {
        const fl_tensor *ids = k->in[0][i];
        fl_tensor *out = k->out[0][i];
        int64_t sh[FL_MAX_DIMS];
        memcpy(sh, ids->shape, sizeof sh);
        sh[ids->ndim - 1] = dim;
        FL_CHECK(fl__tensor_reshape_raw(out, FL_FLOAT32, ids->ndim, sh));
        float *y = out->data;
        for (int64_t j = 0; j < ids->numel; j++, at++) {
            if (q < m && s->pos[q] == at) {
                memcpy(y + j * dim, s->vals + q * dim, (size_t)dim * sizeof(float));
                q++;
            } else {
                memset(y + j * dim, 0, (size_t)dim * sizeof(float));
            }
        }
        out->is_rows = 0;
        FL_CHECK(fl__tensor_share_lod(out, ids));
    }
    return FL_OK;
}

/* ---- distributed_lookup_table_grad ---------------------------------------------------------------- */

static int infer_dlookup_grad(fl_op *op)
{
    FL_CHECK(fl__op_check_slots(op));
    int64_t h = fl__attr_i(op, "height", 0), dim = fl__attr_i(op, "dim", 0);
    if (h <= 0 || dim <= 0) return fl__op_error(op, "attributes height and dim must be positive");
    fl_var *dw = op->out[0].vars[0];
    fl__var_set_shape(dw, FL_FLOAT32, 2, (const int64_t[]){h, dim});
    dw->is_sparse_grad = 1;
    return FL_OK;
}

static int run_dlookup_grad(fl_kctx *k)
{
    const fl_tensor *ids = FL_IN(k, 0), *dy = FL_IN(k, 1);
    fl_tensor *dw = FL_OUT(k, 0);
    int64_t h = fl__attr_i(k->op, "height", 0), dim = fl__attr_i(k->op, "dim", 0),
            pad = fl__attr_i(k->op, "padding_idx", -1);
    int64_t n = ids->numel;
    if (ids->dtype != FL_INT64) return fl__err(FL_EINVAL, "distributed_lookup_table_grad: ids must be int64");
    if (dy->numel != n * dim)
        return fl__err(FL_EINVAL,
                       "distributed_lookup_table_grad: output gradient has %lld elements, expected %lld ids x %lld",
                       (long long)dy->numel, (long long)n, (long long)dim);
    FL_CHECK(fl__tensor_resize2(dw, n, dim));
    dw->lod_n = 0;
    float *d = dw->data;
    const int64_t *id = ids->data;
    if (n) memcpy(d, dy->data, (size_t)(n * dim) * sizeof(float));
    for (int64_t i = 0; i < n; i++) {
        if (pad >= 0 && id[i] == pad) memset(d + i * dim, 0, (size_t)dim * sizeof(float));
        else if (FL_UNLIKELY(id[i] < 0))
            return fl__err(FL_EINVAL, "distributed_lookup_table_grad: id %lld at position %lld is negative",
                           (long long)id[i], (long long)i);
    }
    return fl_tensor_set_rows(dw, id, n, h);
}

/* ---- ps_send / ps_recv ------------------------------------------------------------------------------ */

/* A sparse gradient as (ids, values); a dense [height, dim] gradient (a table also used
 * densely cannot happen: rewrite.c refuses it) is an error. */
static int push_sparse(fl_kctx *k, fl_ps_client *cl, const fl__ps_ctx *c, int t, const fl_tensor *g, const char *name)
{
    if (!g->is_rows)
        return fl__err(FL_EINVAL, "ps_send: gradient '%s' of sparse table '%s' is not SelectedRows", name,
                       c->tables[t].name);
    int64_t n = g->shape[0];
    if (n && g->numel != n * c->tables[t].dim)
        return fl__err(FL_EINVAL, "ps_send: gradient '%s' has width %lld, table '%s' dim %d", name,
                       (long long)(g->numel / n), c->tables[t].name, c->tables[t].dim);
    scratch *s = get_scratch(k);
    if (!s) return FL_ENOMEM;
    FL_CHECK(grow((void **)&s->ids, &s->ids_cap, (size_t)n + 1, sizeof *s->ids));
    for (int64_t i = 0; i < n; i++) {
        if (g->rows[i] < 0)
            return fl__err(FL_EINVAL, "ps_send: gradient '%s' has a negative row %lld", name, (long long)g->rows[i]);
        s->ids[i] = (uint64_t)g->rows[i];
    }
    return fl_ps_client_push_sparse(cl, t, s->ids, n, g->data, NULL, NULL);
}

int fl__ps_push_now(fl_kctx *k, fl__ps_ctx *c, int t, const fl_tensor *g, const char *name)
{
    if (c->tables[t].kind == FL_PS_SPARSE) return push_sparse(k, c->client, c, t, g, name);
    FL_CHECK(check_dense(k, c, t, g, name));
    return fl_ps_client_push_dense(c->client, t, g->data);
}

int fl__ps_pull_now(fl__ps_ctx *c, int t, fl_tensor *w)
{
    int st = fl_ps_client_pull_dense(c->client, t, w->data);
    fl__tensor_bump(w);
    return st;
}

int fl__ps_push_queued(fl_kctx *k, fl__ps_ctx *c, int t, const fl_tensor *g, const char *name)
{
    (void)k;
    (void)name;
    int v = param_of_table(c, t);
    if (v < 0 || !c->comm) return fl__err(FL_ESTATE, "ps_send: the async communicator is not running");
    return fl__ps_comm_send(c->comm, v, g);
}

int fl__ps_pull_queued(fl__ps_ctx *c, int t, fl_tensor *w)
{
    int v = param_of_table(c, t);
    if (v < 0 || !c->comm) return fl__err(FL_ESTATE, "ps_recv: the async communicator is not running");
    return fl__ps_comm_recv(c->comm, v, w, NULL);
}

int fl__ps_pull_flushed(fl__ps_ctx *c, int t, fl_tensor *w)
{
    int v = param_of_table(c, t);
    if (v < 0 || !c->comm) return fl__err(FL_ESTATE, "ps_recv: the communicator is not running");
    return fl__ps_comm_pull_now(c->comm, 1, &v, &w);
}

int fl__ps_pull_flushed_dense(fl__ps_ctx *c, int n, const int *tables, fl_tensor *const *params)
{
    if (!c->comm) return fl__err(FL_ESTATE, "ps_recv: the communicator is not running");
    int *vars = malloc((size_t)(n ? n : 1) * sizeof *vars);
    if (!vars) return fl__err(FL_ENOMEM, "ps_recv: out of memory");
    int st = FL_OK;
    for (int i = 0; i < n && st == FL_OK; i++)
        if ((vars[i] = param_of_table(c, tables[i])) < 0)
            st = fl__err(FL_ESTATE, "ps_recv: table %d is not a parameter of the communicator", tables[i]);
    if (st == FL_OK) st = fl__ps_comm_pull_now(c->comm, n, vars, params);
    free(vars);
    return st;
}

/* The dense tensors' data as the client's arrays (a malloc'd copy of the pointers). */
static const float **data_of(int n, const fl_tensor *const *ts)
{
    const float **p = malloc((size_t)(n ? n : 1) * sizeof *p);
    if (!p) {
        fl__err(FL_ENOMEM, "parameter server: out of memory");
        return NULL;
    }
    for (int i = 0; i < n; i++) p[i] = ts[i]->data;
    return p;
}

int fl__ps_push_now_dense(fl__ps_ctx *c, int n, const int *tables, const fl_tensor *const *grads)
{
    const float **g = data_of(n, grads);
    if (!g) return FL_ENOMEM;
    int st = fl_ps_client_push_dense_many(c->client, n, tables, g);
    free(g);
    return st;
}

int fl__ps_pull_now_dense(fl__ps_ctx *c, int n, const int *tables, fl_tensor *const *params)
{
    float **w = (float **)data_of(n, (const fl_tensor *const *)params);
    if (!w) return FL_ENOMEM;
    int st = fl_ps_client_pull_dense_many(c->client, n, tables, w);
    free(w);
    for (int i = 0; i < n; i++) fl__tensor_bump(params[i]);
    return st;
}

/* Examples in this step: the rows (or, with a LoD, the sequences) of the optional input
 * Batch, one data variable of the program (traffic per example). */
static int64_t batch_examples(const fl_kctx *k)
{
    const fl_tensor *b = k->nin[1] ? k->in[1][0] : NULL;
    if (!b || b->ndim < 1) return 0;
    int64_t n = 0;
    const int64_t *lod = fl_tensor_lod(b, &n);
    return lod && n > 1 ? n - 1 : b->shape[0];
}

static int run_send(fl_kctx *k)
{
    fl__ps_ctx *c = NULL;
    fl_ps_client *cl = NULL;
    FL_CHECK(get_ctx(k, &c));
    FL_CHECK(fl__ps_need_client(c, "ps_send", &cl));
    if (!c->mode->push) return fl__err(FL_ESTATE, "ps_send: %s mode pushes no gradients", c->mode->name);
    /* sparse tables one by one; dense ones together when the mode has a call for that */
    scratch *s = get_scratch(k);
    if (!s) return FL_ENOMEM;
    FL_CHECK(grow((void **)&s->tabs, &s->tabs_cap, (size_t)k->nin[0] + 1, sizeof *s->tabs));
    FL_CHECK(grow((void **)&s->ts, &s->ts_cap, (size_t)k->nin[0] + 1, sizeof *s->ts));
    int nd = 0;
    for (int i = 0; i < k->nin[0]; i++) {
        int t = -1;
        const char *name = k->op->in[0].vars[i]->name;
        FL_CHECK(table_at(k, c, i, &t));
        if (c->mode->push_dense && c->tables[t].kind == FL_PS_DENSE) {
            FL_CHECK(check_dense(k, c, t, k->in[0][i], name));
            s->tabs[nd] = t;
            s->ts[nd++] = k->in[0][i];
        } else {
            FL_CHECK(c->mode->push(k, c, t, k->in[0][i], name));
        }
    }
    if (nd) FL_CHECK(c->mode->push_dense(c, nd, s->tabs, (const fl_tensor *const *)s->ts));
    pthread_mutex_lock(&c->mu);
    c->step++;
    c->examples += batch_examples(k);
    pthread_mutex_unlock(&c->mu);
    return FL_OK;
}

static int run_recv(fl_kctx *k)
{
    fl__ps_ctx *c = NULL;
    fl_ps_client *cl = NULL;
    FL_CHECK(get_ctx(k, &c));
    FL_CHECK(fl__ps_need_client(c, "ps_recv", &cl));
    if (!c->mode->pull) return fl__err(FL_ESTATE, "ps_recv: %s mode pulls no parameters", c->mode->name);
    scratch *s = get_scratch(k);
    if (!s) return FL_ENOMEM;
    FL_CHECK(grow((void **)&s->tabs, &s->tabs_cap, (size_t)k->nout[0] + 1, sizeof *s->tabs));
    FL_CHECK(grow((void **)&s->ts, &s->ts_cap, (size_t)k->nout[0] + 1, sizeof *s->ts));
    for (int i = 0; i < k->nout[0]; i++) {
        int t = -1;
        FL_CHECK(table_at(k, c, i, &t));
        fl_tensor *w = k->out[0][i];
        FL_CHECK(check_dense(k, c, t, w, k->op->out[0].vars[i]->name));
        if (c->mode->pull_dense) {
            s->tabs[i] = t;
            s->ts[i] = w;
        } else {
            FL_CHECK(c->mode->pull(c, t, w));
        }
    }
    if (c->mode->pull_dense && k->nout[0]) FL_CHECK(c->mode->pull_dense(c, k->nout[0], s->tabs, s->ts));
    return FL_OK;
}

/* ---- ps_geo -------------------------------------------------------------------------------------------- */

static int run_geo(fl_kctx *k)
{
    fl__ps_ctx *c = NULL;
    fl_ps_client *cl = NULL;
    FL_CHECK(get_ctx(k, &c));
    FL_CHECK(fl__ps_need_client(c, "ps_geo", &cl));
    int64_t ks = fl__attr_i(k->op, "k_steps", 1);
    pthread_mutex_lock(&c->mu);
    int64_t step = ++c->geo_step;
    c->step++;
    c->examples += batch_examples(k);
    int ready = c->geo_old != NULL;
    pthread_mutex_unlock(&c->mu);
    if (!ready)
        return fl__err(
            FL_ESTATE,
            "ps_geo: the initial exchange has not run (run the startup program after or before fleet_init_worker)");
    if (ks < 1 || step % ks != 0) return FL_OK;
    scratch *s = get_scratch(k);
    if (!s) return FL_ENOMEM;
    const float inv = 1.0f / (float)c->worker_num;
    for (int i = 0; i < k->nin[0]; i++) {
        int t = -1;
        FL_CHECK(table_at(k, c, i, &t));
        fl_tensor *w = k->out[0][i];
        if (w != k->in[0][i]) FL_CHECK(fl_tensor_copy(w, k->in[0][i]));
        FL_CHECK(check_dense(k, c, t, w, k->op->out[0].vars[i]->name));
        float *old = c->geo_old[t];
        if (!old) return fl__err(FL_ESTATE, "ps_geo: no snapshot of '%s'", c->tables[t].name);
        int64_t n = w->numel;
        FL_CHECK(grow((void **)&s->tmp, &s->tmp_cap, (size_t)n + 1, sizeof *s->tmp));
        float *x = w->data, *d = s->tmp;
        /* d = (latest - old) / trainers; old += d; the servers add d */
        for (int64_t j = 0; j < n; j++) {
            d[j] = (x[j] - old[j]) * inv;
            old[j] += d[j];
        }
        FL_CHECK(fl_ps_client_push_dense(cl, t, d));
        /* latest += server - old; old = server */
        FL_CHECK(fl_ps_client_pull_dense(cl, t, d));
        for (int64_t j = 0; j < n; j++) {
            x[j] += d[j] - old[j];
            old[j] = d[j];
        }
    }
    return FL_OK;
}

/* ---- ps_init (startup) and the initial exchange ------------------------------------------------------- */

int fl__ps_init_exchange(fl__ps_ctx *c, fl_tensor *const *ts, const int *tables, int n)
{
    fl_ps_client *cl = c->client;
    for (int i = 0; i < n; i++) {
        const fl_ps_table_config *tc = &c->tables[tables[i]];
        if (ts[i]->dtype != FL_FLOAT32 || ts[i]->numel != tc->rows * tc->cols)
            return fl__err(FL_ESTATE, "parameter server: '%s' is not initialized (run the startup program)", tc->name);
    }
    if (c->worker_index == 0)
        for (int i = 0; i < n; i++) FL_CHECK(fl_ps_client_init_dense(cl, tables[i], ts[i]->data, 0, NULL));
    FL_CHECK(fl_ps_client_barrier(cl));
    for (int i = 0; i < n; i++) {
        int st = fl_ps_client_pull_dense(cl, tables[i], ts[i]->data);
        fl__tensor_bump(ts[i]);
        FL_CHECK(st);
    }
    if (c->mode->after_init) FL_CHECK(c->mode->after_init(c, ts, tables, n));
    pthread_mutex_lock(&c->mu);
    c->inited = 1;
    pthread_mutex_unlock(&c->mu);
    FL_INFO(FL_SUB_FLEET, "parameter server: initial values of %d dense tables exchanged", n);
    return FL_OK;
}

static int run_init(fl_kctx *k)
{
    fl__ps_ctx *c = NULL;
    FL_CHECK(get_ctx(k, &c));
    if (c->is_server) return FL_OK; /* a server never trains: its startup run changes nothing */
    int n = k->nin[0], st = FL_OK;
    int *tabs = malloc((size_t)(n ? n : 1) * sizeof *tabs);
    if (!tabs) return fl__err(FL_ENOMEM, "ps_init: out of memory");
    for (int i = 0; i < n && st == FL_OK; i++) {
        st = table_at(k, c, i, &tabs[i]);
        if (st == FL_OK && k->out[0][i] != k->in[0][i]) st = fl_tensor_copy(k->out[0][i], k->in[0][i]);
    }
    if (st == FL_OK && c->client && !c->stopped) {
        st = fl__ps_init_exchange(c, k->out[0], tabs, n);
    } else if (st == FL_OK) {
        /* not connected yet: fleet_init_worker runs the exchange on these tensors */
        pthread_mutex_lock(&c->mu);
        fl_tensor **pt = realloc(c->pending, (size_t)(n ? n : 1) * sizeof *pt);
        if (pt) c->pending = pt;
        int *ptab = realloc(c->pending_table, (size_t)(n ? n : 1) * sizeof *ptab);
        if (ptab) c->pending_table = ptab;
        if (!pt || !ptab) {
            st = fl__err(FL_ENOMEM, "ps_init: out of memory");
        } else {
            for (int i = 0; i < n; i++) {
                c->pending[i] = k->out[0][i];
                c->pending_table[i] = tabs[i];
            }
            c->npending = n;
            c->has_pending = 1;
        }
        pthread_mutex_unlock(&c->mu);
    }
    free(tabs);
    return st;
}

static const fl_op_def def_dlookup = {
    "distributed_lookup_table", {"Ids"}, {"Out"}, infer_dlookup, run_dlookup, NULL, scratch_free};
static const fl_op_def def_dlookup_grad = {
    "distributed_lookup_table_grad", {"Ids", "Out@GRAD"}, {"W@GRAD"}, infer_dlookup_grad, run_dlookup_grad, NULL};
/* ps_lr_scale: Grad (list) *= LearningRate (a schedule's rate, before ps_send; rewrite.c) */
static int run_lr_scale(fl_kctx *k)
{
    const fl_tensor *lr = k->in[1][0];
    if (lr->dtype != FL_FLOAT32 || lr->numel < 1)
        return fl__err(FL_EINVAL, "ps_lr_scale: learning rate '%s' must be a float32 number", k->op->in[1].vars[0]->name);
    float r = ((const float *)lr->data)[0];
    for (int i = 0; i < k->nin[0]; i++) {
        fl_tensor *g = k->out[0][i];
        if (g != k->in[0][i]) FL_CHECK(fl_tensor_copy(g, k->in[0][i]));
        if (g->dtype != FL_FLOAT32)
            return fl__err(FL_EINVAL, "ps_lr_scale: gradient '%s' is not float32", k->op->in[0].vars[i]->name);
        fl__vscal(g->data, r, g->numel);
    }
    return FL_OK;
}

static const fl_op_def def_send = {"ps_send", {"Grad", "Batch"}, {NULL}, infer_nop, run_send, NULL, scratch_free};
static const fl_op_def def_lr_scale = {"ps_lr_scale", {"Grad", "LearningRate"}, {"GradOut"}, infer_nop, run_lr_scale, NULL,
                                       NULL};
static const fl_op_def def_recv = {"ps_recv", {NULL}, {"Param"}, infer_nop, run_recv, NULL, scratch_free};
static const fl_op_def def_geo = {"ps_geo", {"Param", "Batch"}, {"ParamOut"}, infer_nop, run_geo, NULL, scratch_free};
static const fl_op_def def_init = {"ps_init", {"Param"}, {"ParamOut"}, infer_nop, run_init, NULL};

const fl_op_def *const fl__ops_ps[] = {&def_dlookup, &def_dlookup_grad, &def_send,     &def_recv,
                                       &def_geo,     &def_init,         &def_lr_scale, NULL};
