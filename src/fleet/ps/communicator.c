/*
 * communicator.c - the async-mode communicator (Paddle 1.8's AsyncCommunicator).
 *
 *   trainer thread   ps_send copies each gradient into its variable's queue (a ring of
 *                    send_queue_size slots; blocks while the ring is full) and returns;
 *                    ps_recv copies the newest pulled dense values into the parameters
 *   send thread      takes the oldest waiting variable, pops up to max_merge_var_num of
 *                    its gradients, merges them (average: dense values, or SelectedRows
 *                    concatenated with values / k; the client sums duplicate ids) and
 *                    pushes them with its own client
 *   receive thread   after every min_send_grad_num_before_recv x (number of variables)
 *                    pushes - that many steps' worth of gradients - pulls every dense
 *                    table with its own client into a staging buffer (double-buffered)
 *
 * The trainer never waits for the network except when a queue is full.  Parameters are
 * written only by the trainer thread (in ps_recv), so forward and backward never read a
 * half-updated tensor.  The first error of a background thread stops both threads and is
 * returned by every later call.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "fleet_ps.h"

typedef struct {
    float *vals;
    uint64_t *ids;
    int64_t nvals, nids; /* floats / ids held */
    size_t vcap, icap;
} slot_t;

typedef struct {
    fl__ps_comm_var v;
    slot_t *q;
    int head, count, taken; /* taken: popped by the send thread, still being merged */
    int64_t waiting_since;  /* order in which variables got their first queued gradient */
    /* receive staging (dense) */
    float *staged, *pullbuf;
    uint64_t version, seen;
} cvar;

struct fl__ps_comm {
    fl_ps_client *send_cl, *recv_cl;
    cvar *vars;
    int nvars, cap, max_merge, min_recv;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* any change: work queued, space freed, push done, stop */
    pthread_t send_th, recv_th;
    int send_started, recv_started, stop, busy;
    int64_t ticket, pushes, since_recv;
    int err;
    char errmsg[768];
    /* send thread merge buffers */
    float *mvals;
    uint64_t *mids;
    size_t mvcap, micap;
};

static int grow(void **p, size_t *cap, size_t n, size_t elem)
{
    if (n <= *cap) return FL_OK;
    size_t nc = *cap ? *cap : 64;
    while (nc < n) nc *= 2;
    void *q = realloc(*p, nc * elem);
    if (!q) return fl__err(FL_ENOMEM, "async communicator: out of memory (%zu bytes)", nc * elem);
    *p = q;
    *cap = nc;
    return FL_OK;
}

/* Records the first background error (mu held). */
static void set_error(fl__ps_comm *c, int st, const char *what)
{
    if (c->err) return;
    c->err = st ? st : FL_EREMOTE;
    snprintf(c->errmsg, sizeof c->errmsg, "async communicator: %s: %s", what, fl_last_error());
    FL_ERROR(FL_SUB_FLEET, "%s", c->errmsg);
    pthread_cond_broadcast(&c->cv);
}

static int report(fl__ps_comm *c) { return fl__err(c->err, "%s", c->errmsg); }

static void timed_wait(fl__ps_comm *c, int ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += (long)ms * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(&c->cv, &c->mu, &ts);
}

/* ---- send thread ------------------------------------------------------------------------------ */

/* Merges slots [head, head+k) of var v into the merge buffers; returns ids / floats. */
static int merge(fl__ps_comm *c, cvar *v, int k, int64_t *nids, int64_t *nvals)
{
    const float scale = 1.0f / (float)k;
    if (!v->v.sparse) {
        int64_t n = v->v.numel;
        FL_CHECK(grow((void **)&c->mvals, &c->mvcap, (size_t)n + 1, sizeof *c->mvals));
        for (int s = 0; s < k; s++) {
            const slot_t *sl = &v->q[(v->head + s) % c->cap];
            if (s == 0) memcpy(c->mvals, sl->vals, (size_t)n * sizeof(float));
            else fl__vaxpy(c->mvals, 1.0f, sl->vals, n);
        }
        if (k > 1) fl__vscal(c->mvals, scale, n);
        *nids = 0;
        *nvals = n;
        return FL_OK;
    }
    int64_t ti = 0, tv = 0;
    for (int s = 0; s < k; s++) {
        const slot_t *sl = &v->q[(v->head + s) % c->cap];
        ti += sl->nids;
        tv += sl->nvals;
    }
    FL_CHECK(grow((void **)&c->mids, &c->micap, (size_t)ti + 1, sizeof *c->mids));
    FL_CHECK(grow((void **)&c->mvals, &c->mvcap, (size_t)tv + 1, sizeof *c->mvals));
    int64_t ai = 0, av = 0;
    for (int s = 0; s < k; s++) {
        const slot_t *sl = &v->q[(v->head + s) % c->cap];
        if (sl->nids) memcpy(c->mids + ai, sl->ids, (size_t)sl->nids * sizeof *c->mids);
        if (sl->nvals) memcpy(c->mvals + av, sl->vals, (size_t)sl->nvals * sizeof *c->mvals);
        ai += sl->nids;
        av += sl->nvals;
    }
    if (k > 1) fl__vscal(c->mvals, scale, av);
    *nids = ai;
    *nvals = av;
    return FL_OK;
}

static void *send_main(void *arg)
{
    fl__ps_comm *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        /* the variable waiting longest */
        int pick = -1;
        for (int i = 0; i < c->nvars; i++)
            if (c->vars[i].count > 0 && (pick < 0 || c->vars[i].waiting_since < c->vars[pick].waiting_since)) pick = i;
        if (c->err || (c->stop && pick < 0)) break;
        if (pick < 0) {
            timed_wait(c, 100);
            continue;
        }
        cvar *v = &c->vars[pick];
        int k = v->count < c->max_merge ? v->count : c->max_merge;
        v->taken = k;
        c->busy = 1;
        pthread_mutex_unlock(&c->mu);
        int64_t ni = 0, nv = 0;
        int st = merge(c, v, k, &ni, &nv);
        pthread_mutex_lock(&c->mu);
        v->head = (v->head + k) % c->cap;
        v->count -= k;
        v->taken = 0;
        v->waiting_since = ++c->ticket;
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
        if (st == FL_OK)
            st = v->v.sparse ? fl_ps_client_push_sparse(c->send_cl, v->v.table, c->mids, ni, c->mvals, NULL, NULL)
                             : fl_ps_client_push_dense(c->send_cl, v->v.table, c->mvals);
        pthread_mutex_lock(&c->mu);
        c->busy = 0;
        if (st != FL_OK) {
            char what[160];
            snprintf(what, sizeof what, "push to table %d", v->v.table);
            set_error(c, st, what);
            break;
        }
        c->pushes++;
        c->since_recv++;
        pthread_cond_broadcast(&c->cv);
    }
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* ---- receive thread ---------------------------------------------------------------------------- */

static void *recv_main(void *arg)
{
    fl__ps_comm *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        if (c->err || c->stop) break;
        if (c->since_recv < c->min_recv) {
            timed_wait(c, 100);
            continue;
        }
        c->since_recv = 0;
        pthread_mutex_unlock(&c->mu);
        int st = FL_OK, bad = -1;
        for (int i = 0; i < c->nvars && st == FL_OK; i++) {
            cvar *v = &c->vars[i];
            if (v->v.sparse) continue;
            st = fl_ps_client_pull_dense(c->recv_cl, v->v.table, v->pullbuf);
            if (st != FL_OK) {
                bad = v->v.table;
                break;
            }
            pthread_mutex_lock(&c->mu);
            float *t = v->staged;
            v->staged = v->pullbuf;
            v->pullbuf = t;
            v->version++;
            pthread_mutex_unlock(&c->mu);
        }
        pthread_mutex_lock(&c->mu);
        if (st != FL_OK) {
            char what[160];
            snprintf(what, sizeof what, "pull of table %d", bad);
            set_error(c, st, what);
            break;
        }
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* ---- trainer-side calls ------------------------------------------------------------------------------ */

int fl__ps_comm_send(fl__ps_comm *c, int var, const fl_tensor *g)
{
    if (var < 0 || var >= c->nvars) return fl__err(FL_EINVAL, "async communicator: no variable %d", var);
    cvar *v = &c->vars[var];
    if (g->dtype != FL_FLOAT32)
        return fl__err(FL_EINVAL, "async communicator: gradient of table %d is not float32", v->v.table);
    if (v->v.sparse) {
        if (!g->is_rows)
            return fl__err(FL_EINVAL, "async communicator: the gradient of sparse table %d is not SelectedRows",
                           v->v.table);
        int64_t n = g->shape[0];
        if (n && g->numel != n * v->v.dim)
            return fl__err(FL_EINVAL, "async communicator: gradient width %lld differs from table %d dim %d",
                           (long long)(g->numel / n), v->v.table, v->v.dim);
        for (int64_t i = 0; i < n; i++)
            if (g->rows[i] < 0) return fl__err(FL_EINVAL, "async communicator: negative row %lld", (long long)g->rows[i]);
    } else if (g->is_rows || g->numel != v->v.numel) {
        return fl__err(FL_EINVAL, "async communicator: gradient of table %d has %lld elements%s, expected %lld dense",
                       v->v.table, (long long)g->numel, g->is_rows ? " (SelectedRows)" : "", (long long)v->v.numel);
    }
    pthread_mutex_lock(&c->mu);
    while (!c->err && !c->stop && v->count == c->cap) timed_wait(c, 100);
    if (c->err || c->stop) {
        int st = c->err ? report(c) : fl__err(FL_ESTATE, "async communicator: stopped");
        pthread_mutex_unlock(&c->mu);
        return st;
    }
    /* the slot after the queued ones is not read by the send thread (it reads [head,
     * head+taken)), so it is filled under the lock without racing */
    slot_t *sl = &v->q[(v->head + v->count) % c->cap];
    int st = FL_OK;
    if (v->v.sparse) {
        int64_t n = g->shape[0];
        st = grow((void **)&sl->ids, &sl->icap, (size_t)n + 1, sizeof *sl->ids);
        if (st == FL_OK) st = grow((void **)&sl->vals, &sl->vcap, (size_t)g->numel + 1, sizeof *sl->vals);
        if (st == FL_OK) {
            for (int64_t i = 0; i < n; i++) sl->ids[i] = (uint64_t)g->rows[i];
            if (g->numel) memcpy(sl->vals, g->data, (size_t)g->numel * sizeof(float));
            sl->nids = n;
            sl->nvals = g->numel;
        }
    } else {
        st = grow((void **)&sl->vals, &sl->vcap, (size_t)g->numel + 1, sizeof *sl->vals);
        if (st == FL_OK) {
            memcpy(sl->vals, g->data, (size_t)g->numel * sizeof(float));
            sl->nvals = g->numel;
        }
    }
    if (st == FL_OK) {
        if (v->count == 0) v->waiting_since = ++c->ticket;
        v->count++;
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
    return st;
}

int fl__ps_comm_recv(fl__ps_comm *c, int var, fl_tensor *w, int *copied)
{
    if (copied) *copied = 0;
    if (var < 0 || var >= c->nvars || c->vars[var].v.sparse)
        return fl__err(FL_EINVAL, "async communicator: no dense variable %d", var);
    cvar *v = &c->vars[var];
    if (w->dtype != FL_FLOAT32 || w->numel != v->v.numel)
        return fl__err(FL_EINVAL, "async communicator: parameter of table %d has %lld elements, expected %lld", v->v.table,
                       (long long)w->numel, (long long)v->v.numel);
    pthread_mutex_lock(&c->mu);
    int st = c->err ? report(c) : FL_OK;
    if (st == FL_OK && v->version != v->seen) {
        memcpy(w->data, v->staged, (size_t)v->v.numel * sizeof(float));
        v->seen = v->version;
        if (copied) *copied = 1;
    }
    pthread_mutex_unlock(&c->mu);
    return st;
}

int fl__ps_comm_flush(fl__ps_comm *c)
{
    pthread_mutex_lock(&c->mu);
    for (;;) {
        int pending = c->busy;
        for (int i = 0; i < c->nvars && !pending; i++) pending = c->vars[i].count > 0;
        if (c->err || !pending || c->stop) break;
        timed_wait(c, 100);
    }
    int st = c->err ? report(c) : FL_OK;
    pthread_mutex_unlock(&c->mu);
    return st;
}

int64_t fl__ps_comm_pushes(fl__ps_comm *c)
{
    pthread_mutex_lock(&c->mu);
    int64_t n = c->pushes;
    pthread_mutex_unlock(&c->mu);
    return n;
}

void fl__ps_comm_free(fl__ps_comm *c)
{
    if (!c) return;
    pthread_mutex_lock(&c->mu);
    c->stop = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    if (c->send_started) pthread_join(c->send_th, NULL);
    if (c->recv_started) pthread_join(c->recv_th, NULL);
    fl_ps_client_free(c->send_cl);
    fl_ps_client_free(c->recv_cl);
    for (int i = 0; c->vars && i < c->nvars; i++) {
        cvar *v = &c->vars[i];
        for (int s = 0; v->q && s < c->cap; s++) {
            free(v->q[s].vals);
            free(v->q[s].ids);
        }
        free(v->q);
        free(v->staged);
        free(v->pullbuf);
    }
    free(c->vars);
    free(c->mvals);
    free(c->mids);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c);
}

int fl__ps_comm_create(const fl__ps_comm_opts *o, fl__ps_comm **out)
{
    *out = NULL;
    fl__ps_comm *c = calloc(1, sizeof *c);
    if (!c) return fl__err(FL_ENOMEM, "async communicator: out of memory");
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    c->cap = o->queue_size > 0 ? o->queue_size : 1;
    c->max_merge = o->max_merge > 0 ? o->max_merge : 1;
    c->min_recv = (o->min_send_before_recv > 0 ? o->min_send_before_recv : 1) * (o->nvars > 0 ? o->nvars : 1);
    int st = FL_OK;
    c->vars = calloc((size_t)(o->nvars ? o->nvars : 1), sizeof *c->vars);
    if (!c->vars) st = fl__err(FL_ENOMEM, "async communicator: out of memory");
    c->nvars = c->vars ? o->nvars : 0;
    for (int i = 0; st == FL_OK && i < c->nvars; i++) {
        cvar *v = &c->vars[i];
        v->v = o->vars[i];
        v->q = calloc((size_t)c->cap, sizeof *v->q);
        if (!v->q) st = fl__err(FL_ENOMEM, "async communicator: out of memory");
        if (st == FL_OK && !v->v.sparse) {
            v->staged = calloc((size_t)v->v.numel + 1, sizeof(float));
            v->pullbuf = calloc((size_t)v->v.numel + 1, sizeof(float));
            if (!v->staged || !v->pullbuf) st = fl__err(FL_ENOMEM, "async communicator: out of memory");
        }
    }
    if (st == FL_OK) st = fl_ps_client_create(o->client, &c->send_cl);
    if (st == FL_OK) st = fl_ps_client_create(o->client, &c->recv_cl);
    if (st == FL_OK) {
        if (pthread_create(&c->send_th, NULL, send_main, c) != 0)
            st = fl__err(FL_ENOMEM, "async communicator: cannot start the send thread");
        else c->send_started = 1;
    }
    if (st == FL_OK) {
        if (pthread_create(&c->recv_th, NULL, recv_main, c) != 0)
            st = fl__err(FL_ENOMEM, "async communicator: cannot start the receive thread");
        else c->recv_started = 1;
    }
    if (st != FL_OK) {
        fl__ps_comm_free(c);
        return st;
    }
    *out = c;
    return FL_OK;
}
