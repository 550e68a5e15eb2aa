/*
 * sync.c - sync mode on one server.  Per table, the pushes of one step are summed (dense:
 * into a shard-sized buffer; sparse: into a map of the step's distinct ids), and when every
 * worker's push (its LAST chunk) has arrived the optimizer is applied once to the sum
 * scaled by 1/num_workers - the mean gradient of the global batch - and every waiting push
 * is answered.  Shows and clicks are summed, not averaged.
 *
 * A retried push (same session and sequence) whose step is still open joins the waiters
 * without being added again; one whose step is over is answered at once.  A second push of
 * the same table by a worker within one step is refused (FL_ESTATE).
 *
 * A worker that called stop has finished its data (Paddle's trainer "complete"): the steps
 * after it complete with the pushes of the workers still training, scaled by
 * 1/num_workers all the same (Paddle's pserver counts a completed trainer's gradient as
 * zero), so workers whose passes have different numbers of batches train to their end.
 * Only a worker that stops in the middle of a step's chunked push fails that step.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps_internal.h"

int fl__ps_sync_init(fl_ps_server *s)
{
    s->sync = calloc((size_t)(s->ntables ? s->ntables : 1), sizeof *s->sync);
    if (!s->sync) return fl__err(FL_ENOMEM, "%s: out of memory for sync state", s->me);
    int W = s->o.num_workers;
    for (int i = 0; i < s->ntables; i++) {
        fl__ps_sync *y = &s->sync[i];
        pthread_mutex_init(&y->mu, NULL);
        y->pushed = calloc((size_t)W, 1);
        y->pend_seq = calloc((size_t)W, 8);
        y->pend_session = calloc((size_t)W, 8);
        if (!y->pushed || !y->pend_seq || !y->pend_session)
            return fl__err(FL_ENOMEM, "%s: out of memory for sync state", s->me);
    }
    return FL_OK;
}

void fl__ps_sync_free(fl_ps_server *s)
{
    if (!s->sync) return;
    for (int i = 0; i < s->ntables; i++) {
        fl__ps_sync *y = &s->sync[i];
        pthread_mutex_destroy(&y->mu);
        free(y->pushed);
        free(y->pend_seq);
        free(y->pend_session);
        free(y->waiters.w);
        fl__free_aligned(y->acc);
        free(y->ids);
        free(y->grads);
        free(y->shows);
        free(y->clicks);
        free(y->slots);
    }
    free(s->sync);
    s->sync = NULL;
}

/* ---- accumulation -------------------------------------------------------------------------- */

static int acc_dense(fl__ps_sync *y, fl__ps_table *t, const fl__ps_msg *m)
{
    if (!y->acc) {
        int64_t n = fl__ps_dense_numel(t->dense);
        size_t bytes = (size_t)(n > 0 ? n : 1) * 4;
        y->acc = fl__alloc_aligned(bytes);
        if (!y->acc) return fl__err(FL_ENOMEM, "out of memory for the sync buffer of '%s'", t->cfg.name);
        memset(y->acc, 0, bytes);
        y->acc_n = n;
    }
    float *a = y->acc + m->offset;
    for (uint64_t j = 0; j < m->n; j++) a[j] += m->vals[j];
    return FL_OK;
}

static int grow_ids(fl__ps_sync *y, int dim)
{
    uint64_t cap = y->idcap ? y->idcap * 2 : 1024;
    uint64_t *ids = realloc(y->ids, cap * 8);
    if (ids) y->ids = ids;
    float *g = realloc(y->grads, cap * (uint64_t)dim * 4);
    if (g) y->grads = g;
    float *sh = realloc(y->shows, cap * 4);
    if (sh) y->shows = sh;
    float *ck = realloc(y->clicks, cap * 4);
    if (ck) y->clicks = ck;
    if (!ids || !g || !sh || !ck)
        return fl__err(FL_ENOMEM, "out of memory for a sync step of %llu ids", (unsigned long long)cap);
    y->idcap = cap;
    /* the index: at most half full */
    uint64_t sc = y->slotcap ? y->slotcap : 2048;
    while (sc < cap * 2) sc *= 2;
    if (sc != y->slotcap) {
        uint32_t *sl = calloc(sc, 4);
        if (!sl) return fl__err(FL_ENOMEM, "out of memory for a sync step");
        for (uint64_t i = 0; i < y->nids; i++) {
            uint64_t j = fl__hash_u64(y->ids[i]) & (sc - 1);
            while (sl[j]) j = (j + 1) & (sc - 1);
            sl[j] = (uint32_t)(i + 1);
        }
        free(y->slots);
        y->slots = sl;
        y->slotcap = sc;
    }
    return FL_OK;
}

static int acc_sparse(fl__ps_sync *y, fl__ps_table *t, const fl__ps_msg *m)
{
    const int d = t->cfg.dim;
    for (uint64_t i = 0; i < m->n; i++) {
        if (y->nids == y->idcap) FL_CHECK(grow_ids(y, d));
        uint64_t id = m->ids[i], mask = y->slotcap - 1, j = fl__hash_u64(id) & mask;
        while (y->slots[j] && y->ids[y->slots[j] - 1] != id) j = (j + 1) & mask;
        uint64_t k;
        if (y->slots[j]) {
            k = y->slots[j] - 1;
        } else {
            if (y->nids >= UINT32_MAX - 1) return fl__err(FL_EINVAL, "a sync step of '%s' exceeds 2^32 ids", t->cfg.name);
            k = y->nids++;
            y->slots[j] = (uint32_t)(k + 1);
            y->ids[k] = id;
            memset(y->grads + k * d, 0, (size_t)d * 4);
            y->shows[k] = y->clicks[k] = 0;
        }
        float *g = y->grads + k * d;
        const float *src = m->vals + i * d;
        for (int q = 0; q < d; q++) g[q] += src[q];
        y->shows[k] += m->shows ? m->shows[i] : 1.0f;
        y->clicks[k] += m->clicks ? m->clicks[i] : 0.0f;
    }
    return FL_OK;
}

static void reset_step(fl_ps_server *s, fl__ps_sync *y)
{
    memset(y->pushed, 0, (size_t)s->o.num_workers);
    y->ncomplete = 0;
    if (y->acc) memset(y->acc, 0, (size_t)y->acc_n * 4);
    if (y->nids) memset(y->slots, 0, y->slotcap * 4);
    y->nids = 0;
}

static int apply_step(fl_ps_server *s, fl__ps_sync *y, fl__ps_table *t)
{
    float scale = (float)(1.0 / s->o.num_workers);
    if (t->dense) {
        if (!y->acc) FL_CHECK(acc_dense(y, t, &(fl__ps_msg){0}));
        return fl__ps_dense_push(t->dense, 0, (uint64_t)fl__ps_dense_numel(t->dense), y->acc, scale, 1);
    }
    return fl__ps_sparse_push(t->sparse, y->ids, y->nids, y->grads, y->shows, y->clicks, scale, 1);
}

/* ---- a push ---------------------------------------------------------------------------------- */

static void finish_step(fl_ps_server *s, fl__ps_sync *y, fl__ps_table *t);

/* Has every worker still training pushed the open step (a worker that called stop pushes
 * no more)?  With y->mu held. */
static int step_ready(fl_ps_server *s, fl__ps_sync *y)
{
    if (y->ncomplete == 0) return 0;
    int waiting = 0;
    pthread_mutex_lock(&s->mu);
    for (int k = 0; k < s->o.num_workers; k++) waiting += y->pushed[k] != 2 && !s->stopped[k];
    pthread_mutex_unlock(&s->mu);
    return waiting == 0;
}

int fl__ps_sync_push(fl_ps_server *s, fl__ps_sconn *c, const fl__ps_msg *m, fl__ps_table *t)
{
    fl__ps_sync *y = &s->sync[m->table];
    fl__ps_session *se = fl__ps_session_get(s, m->session);
    int r = c->rank, st;
    if (!se) return fl__ps_reply_error(s, c, m, FL_ENOMEM, "out of memory");
    pthread_mutex_lock(&y->mu);
    pthread_mutex_lock(&se->mu);
    if (m->seq <= se->last_seq) {
        pthread_mutex_unlock(&se->mu);
        int pending = y->pushed[r] == 2 && y->pend_seq[r] == m->seq && y->pend_session[r] == m->session;
        st = pending ? fl__ps_waiters_add(&y->waiters, s, c, m) : FL_OK;
        pthread_mutex_unlock(&y->mu);
        if (st) return fl__ps_reply_error(s, c, m, st, "%s", fl_last_error());
        if (pending) return FL_OK;
        uint8_t h[FL__PS_HDR];
        fl__ps_hdr_encode(h, m->h.type, FL__PS_F_REPLY, m->h.req_id, 0);
        pthread_mutex_lock(&c->send_mu);
        st = fl_net_send_all(c->nc, h, sizeof h, fl_net_deadline(s->o.request_timeout_ms));
        pthread_mutex_unlock(&c->send_mu);
        return st;
    }
    if (y->pushed[r] == 2) {
        uint64_t step = y->step;
        pthread_mutex_unlock(&se->mu);
        pthread_mutex_unlock(&y->mu);
        return fl__ps_reply_error(s, c, m, FL_ESTATE,
                                  "worker %d pushed table '%s' twice in sync step %llu (push each "
                                  "table once per step)",
                                  r, t->cfg.name, (unsigned long long)step);
    }
    st = t->dense ? acc_dense(y, t, m) : acc_sparse(y, t, m);
    if (st == FL_OK) se->last_seq = m->seq;
    pthread_mutex_unlock(&se->mu);
    if (st == FL_OK && !(m->bflags & FL__PS_B_LAST)) {
        y->pushed[r] = 1;
        pthread_mutex_unlock(&y->mu);
        uint8_t h[FL__PS_HDR];
        fl__ps_hdr_encode(h, m->h.type, FL__PS_F_REPLY, m->h.req_id, 0);
        pthread_mutex_lock(&c->send_mu);
        st = fl_net_send_all(c->nc, h, sizeof h, fl_net_deadline(s->o.request_timeout_ms));
        pthread_mutex_unlock(&c->send_mu);
        return st;
    }
    if (st == FL_OK) st = fl__ps_waiters_add(&y->waiters, s, c, m);
    if (st) {
        pthread_mutex_unlock(&y->mu);
        return fl__ps_reply_error(s, c, m, st, "%s", fl_last_error());
    }
    y->pushed[r] = 2;
    y->pend_seq[r] = m->seq;
    y->pend_session[r] = m->session;
    ++y->ncomplete;
    if (!step_ready(s, y)) {
        pthread_mutex_unlock(&y->mu);
        return FL_OK;
    }
    finish_step(s, y, t);
    return FL_OK;
}

/* Applies the step, opens the next one and answers its waiters; called with y->mu held,
 * returns with it released. */
static void finish_step(fl_ps_server *s, fl__ps_sync *y, fl__ps_table *t)
{
    int st = apply_step(s, y, t);
    char msg[1024] = "";
    if (st)
        snprintf(msg, sizeof msg, "%s: applying sync step %llu of table '%s' failed: %s", s->me,
                 (unsigned long long)y->step, t->cfg.name, fl_last_error());
    reset_step(s, y);
    y->step++;
    fl__ps_waitlist done = y->waiters;
    y->waiters = (fl__ps_waitlist){0};
    pthread_mutex_unlock(&y->mu);
    fl__ps_waiters_finish(s, &done, st, msg);
    free(done.w);
}

/* ---- failures ---------------------------------------------------------------------------------- */

static void fail_table(fl_ps_server *s, int i, int only_rank, int st, const char *msg_in)
{
    fl__ps_sync *y = &s->sync[i];
    char msg[1024];
    pthread_mutex_lock(&y->mu);
    int open = y->ncomplete > 0;
    for (int r = 0; r < s->o.num_workers && !open; r++) open = y->pushed[r] != 0;
    if (!open || (only_rank >= 0 && y->pushed[only_rank] == 2)) {
        pthread_mutex_unlock(&y->mu);
        return;
    }
    if (only_rank >= 0 && y->pushed[only_rank] == 0) { /* it finished its data */
        if (step_ready(s, y)) finish_step(s, y, &s->tab[i]);
        else pthread_mutex_unlock(&y->mu);
        return;
    }
    if (only_rank >= 0)
        snprintf(msg, sizeof msg, "%s: worker %d stopped in the middle of its push of sync step %llu of table '%s'", s->me,
                 only_rank, (unsigned long long)y->step, s->cfgs[i].name);
    else snprintf(msg, sizeof msg, "%s", msg_in);
    reset_step(s, y);
    fl__ps_waitlist done = y->waiters;
    y->waiters = (fl__ps_waitlist){0};
    pthread_mutex_unlock(&y->mu);
    fl__ps_waiters_finish(s, &done, st, msg);
    free(done.w);
}

void fl__ps_sync_worker_stopped(fl_ps_server *s, int rank)
{
    for (int i = 0; i < s->ntables; i++) fail_table(s, i, rank, FL_EREMOTE, NULL);
}

void fl__ps_sync_fail_all(fl_ps_server *s, int st, const char *msg)
{
    if (!s->sync) return;
    for (int i = 0; i < s->ntables; i++) fail_table(s, i, -1, st, msg);
}
