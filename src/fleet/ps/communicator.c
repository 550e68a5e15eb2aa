/*
 * communicator.c - the communicator of async and half-async mode (Paddle's
 * AsyncCommunicator and HalfAsyncCommunicator).
 *
 *   trainer thread   ps_send copies each gradient into its variable's queue (a ring of
 *                    send_queue_size slots; blocks while the ring is full) and returns;
 *                    ps_recv copies the newest pulled dense values into the parameters
 *                    (half-async: the worker's trainer threads meet at the end of each
 *                    step; the last to arrive flushes every queue and pulls for all)
 *   send threads     thread_pool_size of them, each with its own client: a thread takes
 *                    the variable waiting longest that no other thread holds; with fewer
 *                    than max_merge_var_num gradients queued it waits 10 ms for more, up
 *                    to send_wait_times times in a row; then pops up to max_merge_var_num
 *                    gradients, merges them (summed, as Paddle 2.x/3.x's AsyncCommunicator
 *                    calls MergeVars with merge_add on for every rule; SelectedRows
 *                    concatenated, the client sums duplicate ids) and pushes them.  A
 *                    dense variable takes along every other dense variable with as many
 *                    gradients queued (half-async: a full queue; all of them when the
 *                    queues are drained), and the batch is pushed in one request round
 *                    (fl_ps_client_push_dense_many: one round trip per server, not one per
 *                    table).  Without independent_recv_thread (Paddle's default) the
 *                    thread then pulls the batch's parameters the same way into their
 *                    staging buffers
 *   adaptive default the strategy's default (max_merge_var_num, send_queue_size and
 *                    send_wait_times all 0, "not set"; async mode only, and a step's dense
 *                    values of ADAPT_DEEP_BYTES or more; below, the queue of 1): a send thread never
 *                    waits for more gradients - it sends at once everything queued, merged, up
 *                    to ADAPT_MERGE, with the step's other dense variables that have anything
 *                    queued - and the queue holds up to ADAPT_QUEUE.  While the link keeps up
 *                    with the trainer a push carries one gradient, as with the queue of 1 of
 *                    Paddle 2.x; when it does not, what queues up during a round goes in the
 *                    next one, so the bytes per step fall with the link's speed.  Setting any
 *                    of the three fields selects the fixed behaviour above, exactly as set
 *                    (an unset one then takes Paddle 2.x's value, 1)
 *   receive thread   with independent_recv_thread: after every
 *                    min_send_grad_num_before_recv x (number of variables) pushes - that
 *                    many steps' worth of gradients - pulls every dense table with its own
 *                    client, in one request round, into staging buffers (double-buffered)
 *
 * The trainer never waits for the network except when a queue is full (and, half-async,
 * at the end of its step).  Parameters are written only by the trainer thread (in
 * ps_recv), so forward and backward never read a half-updated tensor.  The first error of
 * a background thread stops every thread and is returned by every later call.  Dense
 * values travel in the wire dtype of the client options (bf16 halves them).
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "fleet_ps.h"
#include "../../exec/exec_internal.h"

/* The adaptive default: Paddle 1.x's communicator defaults (FLAGS_communicator_max_merge_var_num
 * and FLAGS_communicator_send_queue_size, both 20).  A merge takes what queued up during the
 * previous round, so these bound it only on a link 10x slower than the trainer. */
#define ADAPT_MERGE 20
#define ADAPT_QUEUE 20
/* A queue deeper than one gradient is staleness: the trainer runs on parameters that lack
 * its queued gradients.  It buys speed only where merging saves bytes, on the dense values
 * (sparse rows are concatenated, not summed), so the adaptive queue and merge apply only
 * when a step's dense values reach ADAPT_DEEP_BYTES (2 ms at 1 Gbit/s); below it the
 * default is Paddle 2.x's queue of 1.  simnet-bow (a few kB of dense values, 2 Hogwild
 * threads, Adagrad) lost 0.005 of order rate to local training with the adaptive queue and
 * 0.001 with a queue of 1; CTR-DNN's 1.7 MB tower lost nothing measurable with it
 * (BENCHMARKS.md, "Accuracy of the parameter-server modes"). */
#define ADAPT_DEEP_BYTES (256 * 1024)

typedef struct {
    float *vals;
    uint64_t *ids;
    int64_t nvals, nids; /* floats / ids held */
    size_t vcap, icap;
} slot_t;

typedef struct {
    fl__ps_comm_var v;
    slot_t *q;
    int head, count, taken; /* taken: being sent by a send thread; they leave the queue once sent */
    int held;               /* a send thread holds the variable (merging, pushing, pulling) */
    int waits, seen_count;  /* send_wait_times: 10 ms waits in a row without a new gradient */
    int64_t waiting_since;  /* order in which variables got their first queued gradient */
    /* receive staging (dense) */
    float *staged, *pullbuf;
    float *mbuf; /* dense: the merged gradient being pushed (used by the holder only) */
    const fl_tensor *half_w; /* half-async: the parameter the last meeting's leader wrote */
    uint64_t version, seen;
} cvar;

/* One send thread: its client and merge buffers. */
typedef struct {
    struct fl__ps_comm *c;
    fl_ps_client *cl;
    pthread_t th;
    int started;
    float *mvals;
    uint64_t *mids;
    size_t mvcap, micap;
    int *bvar, *btab, *bk; /* the dense batch: variables, their tables, gradients merged */
    const float **bsrc;
    float **bdst;
} sender;

struct fl__ps_comm {
    fl_ps_client *recv_cl;
    sender *senders;
    int nsenders;
    cvar *vars;
    int nvars, cap, max_merge, min_recv, wait_times, recv_mode;
    int adaptive; /* the adaptive default: send everything queued at once (see the top) */
    pthread_mutex_t mu;
    pthread_cond_t cv; /* any change: work queued, space freed, push done, stop */
    pthread_t recv_th;
    int recv_started, stop, busy, flushing;
    int ndense;   /* the receive thread's round: dense variables' tables and pull buffers */
    int *dtab;
    float **dbuf;
    int64_t ticket, pushes, since_recv;
    int64_t merged; /* gradients the pushes carried (pushes counts one per variable and push) */
    int err;
    char errmsg[768];
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

/* Merges slots [head, head+k) of var v into v->mbuf (dense) or the sender's merge buffers
 * (sparse); returns ids / floats. */
static int merge(sender *w, cvar *v, int k, int64_t *nids, int64_t *nvals)
{
    fl__ps_comm *c = w->c;
    if (!v->v.sparse) {
        int64_t n = v->v.numel;
        for (int s = 0; s < k; s++) {
            const slot_t *sl = &v->q[(v->head + s) % c->cap];
            if (s == 0) memcpy(v->mbuf, sl->vals, (size_t)n * sizeof(float));
            else fl__vaxpy(v->mbuf, 1.0f, sl->vals, n);
        }
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
    FL_CHECK(grow((void **)&w->mids, &w->micap, (size_t)ti + 1, sizeof *w->mids));
    FL_CHECK(grow((void **)&w->mvals, &w->mvcap, (size_t)tv + 1, sizeof *w->mvals));
    int64_t ai = 0, av = 0;
    for (int s = 0; s < k; s++) {
        const slot_t *sl = &v->q[(v->head + s) % c->cap];
        if (sl->nids) memcpy(w->mids + ai, sl->ids, (size_t)sl->nids * sizeof *w->mids);
        if (sl->nvals) memcpy(w->mvals + av, sl->vals, (size_t)sl->nvals * sizeof *w->mvals);
        ai += sl->nids;
        av += sl->nvals;
    }
    *nids = ai;
    *nvals = av;
    return FL_OK;
}

/* The variable waiting longest that no send thread holds, or -1 (mu held). */
static int pick_var(fl__ps_comm *c)
{
    int pick = -1;
    for (int i = 0; i < c->nvars; i++) {
        const cvar *v = &c->vars[i];
        if (v->count > 0 && !v->held && (pick < 0 || v->waiting_since < c->vars[pick].waiting_since)) pick = i;
    }
    return pick;
}

/* Whether dense variable u, not picked, joins a send now: as many gradients queued as a
 * merge takes (half-async: a full queue), or the queues are being drained (mu held). */
static int joins_batch(const fl__ps_comm *c, const cvar *u, int want)
{
    if (u->v.sparse || u->held || u->count == 0) return 0;
    if (c->stop || c->flushing) return 1;
    if (c->recv_mode == FL__PS_RECV_NONE) return u->count == c->cap;
    return c->adaptive || u->count >= want;
}

/* Pushes the batch's merged gradients (one request round for all of them), then, when
 * parameters come back after each send, pulls them into their staging buffers. */
static int send_batch(fl__ps_comm *c, sender *w, int nb, const char **what)
{
    for (int i = 0; i < nb; i++) {
        w->btab[i] = c->vars[w->bvar[i]].v.table;
        w->bsrc[i] = c->vars[w->bvar[i]].mbuf;
    }
    *what = "push to";
    FL_CHECK(fl_ps_client_push_dense_many(w->cl, nb, w->btab, w->bsrc));
    if (c->recv_mode != FL__PS_RECV_AFTER_SEND) return FL_OK;
    /* pullbuf belongs to the variable's holder in this mode (there is no receive thread) */
    for (int i = 0; i < nb; i++) w->bdst[i] = c->vars[w->bvar[i]].pullbuf;
    *what = "pull of";
    FL_CHECK(fl_ps_client_pull_dense_many(w->cl, nb, w->btab, w->bdst));
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < nb; i++) {
        cvar *v = &c->vars[w->bvar[i]];
        float *t = v->staged;
        v->staged = v->pullbuf;
        v->pullbuf = t;
        v->version++;
    }
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return FL_OK;
}

static void *send_main(void *arg)
{
    sender *w = arg;
    fl__ps_comm *c = w->c;
    const int want = c->max_merge < c->cap ? c->max_merge : c->cap;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        int pick = pick_var(c);
        if (c->err || (c->stop && pick < 0)) break;
        if (pick < 0) {
            timed_wait(c, 100);
            continue;
        }
        cvar *v = &c->vars[pick];
        /* send_wait_times: fewer gradients than can be merged - wait 10 ms for more, up to
         * send_wait_times times without a new one (not while stopping or flushing) */
        if (v->count != v->seen_count) {
            v->seen_count = v->count;
            v->waits = 0;
        }
        /* half-async (no receive path of its own) sends what the step's meeting flushes, or
         * a full queue, so that a trainer thread never waits on a queue nobody drains */
        if (c->recv_mode == FL__PS_RECV_NONE && !c->stop && !c->flushing && v->count < c->cap) {
            timed_wait(c, 100);
            continue;
        }
        if (v->count < want && v->waits < c->wait_times && !c->stop && !c->flushing) {
            v->waits++;
            timed_wait(c, 10);
            continue;
        }
        /* the batch: the picked variable, and for a dense one every other dense variable
         * ready to go, pushed (and pulled) in one request round */
        int nb = 0;
        w->bvar[nb++] = pick;
        if (!v->v.sparse)
            for (int i = 0; i < c->nvars; i++)
                if (i != pick && joins_batch(c, &c->vars[i], want)) w->bvar[nb++] = i;
        int *ks = w->bk;
        for (int i = 0; i < nb; i++) {
            cvar *u = &c->vars[w->bvar[i]];
            ks[i] = u->count < c->max_merge ? u->count : c->max_merge;
            u->taken = ks[i];
            u->held = 1;
            u->waits = u->seen_count = 0;
        }
        c->busy++;
        pthread_mutex_unlock(&c->mu);
        int64_t ni = 0, nv = 0;
        int st = FL_OK;
        for (int i = 0; i < nb && st == FL_OK; i++) st = merge(w, &c->vars[w->bvar[i]], ks[i], &ni, &nv);
        const char *what = "push to";
        if (st == FL_OK && v->v.sparse) {
            st = fl_ps_client_push_sparse(w->cl, v->v.table, w->mids, ni, w->mvals, NULL, NULL);
        } else if (st == FL_OK) {
            /* Paddle's default (no independent receive thread): the parameters come back
             * right after their gradients went */
            st = send_batch(c, w, nb, &what);
        }
        /* the gradients leave their queue slots once sent (and the parameters pulled back):
         * a trainer that finds its queue full waits for the round, not just for the copy,
         * so it is never more than the queue's length ahead of what the servers have */
        pthread_mutex_lock(&c->mu);
        c->busy--;
        for (int i = 0; i < nb; i++) {
            cvar *u = &c->vars[w->bvar[i]];
            u->head = (u->head + ks[i]) % c->cap;
            u->count -= ks[i];
            u->taken = 0;
            u->held = 0;
            u->waiting_since = ++c->ticket;
        }
        if (st != FL_OK) {
            char msg[160];
            snprintf(msg, sizeof msg, "%s table %d%s", what, v->v.table, nb > 1 ? " and others" : "");
            set_error(c, st, msg);
            break;
        }
        c->pushes += nb;
        for (int i = 0; i < nb; i++) c->merged += ks[i];
        c->since_recv += nb;
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
        /* every dense table in one request round; the staging buffers change under mu */
        int st = fl_ps_client_pull_dense_many(c->recv_cl, c->ndense, c->dtab, c->dbuf);
        pthread_mutex_lock(&c->mu);
        if (st != FL_OK) {
            set_error(c, st, "pull of the dense tables");
            break;
        }
        for (int i = 0, j = 0; i < c->nvars; i++) {
            cvar *v = &c->vars[i];
            if (v->v.sparse) continue;
            float *t = v->staged;
            v->staged = c->dbuf[j];
            c->dbuf[j++] = t;
            v->pullbuf = t;
            v->version++;
        }
        pthread_cond_broadcast(&c->cv);
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
        fl__tensor_bump(w);
        v->seen = v->version;
        if (copied) *copied = 1;
    }
    pthread_mutex_unlock(&c->mu);
    return st;
}

int fl__ps_comm_flush(fl__ps_comm *c)
{
    pthread_mutex_lock(&c->mu);
    c->flushing++; /* no send_wait_times waits while someone waits for the queues to drain */
    pthread_cond_broadcast(&c->cv);
    for (;;) {
        int pending = c->busy;
        for (int i = 0; i < c->nvars && !pending; i++) pending = c->vars[i].count > 0;
        if (c->err || !pending || c->stop) break;
        timed_wait(c, 100);
    }
    c->flushing--;
    int st = c->err ? report(c) : FL_OK;
    pthread_mutex_unlock(&c->mu);
    return st;
}

/* Half-async's step end, run once per worker step by the last trainer thread to arrive:
 * every queued gradient pushed (merged up to max_merge_var_num), then the parameters
 * pulled in one request round into their staging buffers and copied into the tensors. */
typedef struct {
    fl__ps_comm *c;
    int n;
    const int *vars;
    fl_tensor *const *ws;
    int *tabs;
    float **bufs;
} step_end;

static int step_end_leader(void *arg)
{
    step_end *e = arg;
    fl__ps_comm *c = e->c;
    FL_CHECK(fl__ps_comm_flush(c));
    for (int i = 0; i < e->n; i++) {
        e->tabs[i] = c->vars[e->vars[i]].v.table;
        e->bufs[i] = c->vars[e->vars[i]].pullbuf;
    }
    int st = fl_ps_client_pull_dense_many(c->recv_cl, e->n, e->tabs, e->bufs);
    if (st != FL_OK)
        return fl__err(st, "communicator: pull of table %d%s: %s", e->tabs[0], e->n > 1 ? " and others" : "",
                       fl_last_error());
    /* every thread is waiting in the meeting: nobody reads the parameters while they change */
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < e->n; i++) {
        cvar *v = &c->vars[e->vars[i]];
        float *t = v->staged;
        v->staged = v->pullbuf;
        v->pullbuf = t;
        v->version++;
        memcpy(e->ws[i]->data, v->staged, (size_t)v->v.numel * sizeof(float));
        fl__tensor_bump(e->ws[i]);
        v->half_w = e->ws[i];
    }
    pthread_mutex_unlock(&c->mu);
    return FL_OK;
}

int fl__ps_comm_pull_now(fl__ps_comm *c, int n, const int *vars, fl_tensor *const *ws)
{
    for (int i = 0; i < n; i++) {
        if (vars[i] < 0 || vars[i] >= c->nvars || c->vars[vars[i]].v.sparse)
            return fl__err(FL_EINVAL, "communicator: no dense variable %d", vars[i]);
        const cvar *v = &c->vars[vars[i]];
        if (ws[i]->dtype != FL_FLOAT32 || ws[i]->numel != v->v.numel)
            return fl__err(FL_EINVAL, "communicator: parameter of table %d has %lld elements, expected %lld",
                           v->v.table, (long long)ws[i]->numel, (long long)v->v.numel);
    }
    step_end e = {c, n, vars, ws, malloc((size_t)(n ? n : 1) * sizeof(int)), malloc((size_t)(n ? n : 1) * sizeof(float *))};
    int st = e.tabs && e.bufs ? fl__tgroup_meet(step_end_leader, &e) : fl__err(FL_ENOMEM, "communicator: out of memory");
    free(e.tabs);
    free(e.bufs);
    FL_CHECK(st);
    /* Hogwild threads share the parameters, which the leader wrote; a thread with copies of
     * its own takes the staged values (they change only in the next meeting, which waits
     * for this thread) */
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < n; i++) {
        const cvar *v = &c->vars[vars[i]];
        if (v->half_w != ws[i]) memcpy(ws[i]->data, v->staged, (size_t)v->v.numel * sizeof(float)), fl__tensor_bump(ws[i]);
    }
    pthread_mutex_unlock(&c->mu);
    return FL_OK;
}

void fl__ps_comm_traffic(fl__ps_comm *c, fl_ps_traffic *t)
{
    fl_ps_traffic x;
    for (int i = 0; i < c->nsenders; i++)
        if (c->senders[i].cl && fl_ps_client_traffic(c->senders[i].cl, &x) == FL_OK) fl_ps_traffic_add(t, &x);
    if (c->recv_cl && fl_ps_client_traffic(c->recv_cl, &x) == FL_OK) fl_ps_traffic_add(t, &x);
}

int64_t fl__ps_comm_pushes(fl__ps_comm *c, int64_t *grads)
{
    pthread_mutex_lock(&c->mu);
    int64_t n = c->pushes;
    if (grads) *grads = c->merged;
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
    for (int i = 0; i < c->nsenders; i++)
        if (c->senders[i].started) pthread_join(c->senders[i].th, NULL);
    if (c->recv_started) pthread_join(c->recv_th, NULL);
    for (int i = 0; i < c->nsenders; i++) {
        sender *w = &c->senders[i];
        fl_ps_client_free(w->cl);
        free(w->mvals);
        free(w->mids);
        free(w->bvar);
        free(w->btab);
        free(w->bk);
        free(w->bsrc);
        free(w->bdst);
    }
    free(c->dtab);
    free(c->dbuf);
    free(c->senders);
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
        free(v->mbuf);
    }
    free(c->vars);
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
    /* 0 is "not set" (the strategy's default): all three unset in async mode is the adaptive
     * default; otherwise each unset one is Paddle 2.x's 1 */
    c->recv_mode = o->recv_mode;
    size_t dense_bytes = 0;
    for (int i = 0; i < o->nvars; i++)
        if (!o->vars[i].sparse) dense_bytes += (size_t)o->vars[i].numel * sizeof(float);
    c->adaptive = o->queue_size <= 0 && o->max_merge <= 0 && o->send_wait_times <= 0 && c->recv_mode != FL__PS_RECV_NONE &&
                  dense_bytes >= ADAPT_DEEP_BYTES;
    c->cap = c->adaptive ? ADAPT_QUEUE : o->queue_size > 0 ? o->queue_size : 1;
    c->max_merge = c->adaptive ? ADAPT_MERGE : o->max_merge > 0 ? o->max_merge : 1;
    c->wait_times = c->adaptive ? 0 : o->send_wait_times > 0 ? o->send_wait_times : 1;
    c->min_recv = (o->min_send_before_recv > 0 ? o->min_send_before_recv : 1) * (o->nvars > 0 ? o->nvars : 1);
    int st = FL_OK;
    c->nsenders = o->thread_pool_size > 0 ? o->thread_pool_size : 1;
    c->senders = calloc((size_t)c->nsenders, sizeof *c->senders);
    if (!c->senders) {
        c->nsenders = 0;
        st = fl__err(FL_ENOMEM, "async communicator: out of memory");
    }
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
            v->mbuf = malloc(((size_t)v->v.numel + 1) * sizeof(float));
            if (!v->staged || !v->pullbuf || !v->mbuf) st = fl__err(FL_ENOMEM, "async communicator: out of memory");
            else c->ndense++;
        }
    }
    const size_t nv = (size_t)(c->nvars ? c->nvars : 1);
    if (st == FL_OK && (!(c->dtab = calloc(nv, sizeof *c->dtab)) || !(c->dbuf = calloc(nv, sizeof *c->dbuf))))
        st = fl__err(FL_ENOMEM, "async communicator: out of memory");
    for (int i = 0, j = 0; st == FL_OK && i < c->nvars; i++)
        if (!c->vars[i].v.sparse) {
            c->dtab[j] = c->vars[i].v.table;
            c->dbuf[j++] = c->vars[i].pullbuf;
        }
    for (int i = 0; st == FL_OK && i < c->nsenders; i++) {
        sender *w = &c->senders[i];
        w->bvar = calloc(nv, sizeof *w->bvar);
        w->btab = calloc(nv, sizeof *w->btab);
        w->bk = calloc(nv, sizeof *w->bk);
        w->bsrc = calloc(nv, sizeof *w->bsrc);
        w->bdst = calloc(nv, sizeof *w->bdst);
        if (!w->bvar || !w->btab || !w->bk || !w->bsrc || !w->bdst)
            st = fl__err(FL_ENOMEM, "async communicator: out of memory");
    }
    for (int i = 0; st == FL_OK && i < c->nsenders; i++) {
        c->senders[i].c = c;
        st = fl_ps_client_create(o->client, &c->senders[i].cl);
    }
    if (st == FL_OK) st = fl_ps_client_create(o->client, &c->recv_cl);
    for (int i = 0; st == FL_OK && i < c->nsenders; i++) {
        if (pthread_create(&c->senders[i].th, NULL, send_main, &c->senders[i]) != 0)
            st = fl__err(FL_ENOMEM, "async communicator: cannot start send thread %d", i);
        else c->senders[i].started = 1;
    }
    if (st == FL_OK && c->recv_mode == FL__PS_RECV_THREAD) {
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
