/*
 * service.c - the PS server's request handlers: hello (configuration check), dense and
 * sparse pull / push / init (async pushes deduplicated by (session, sequence)), barrier
 * (counted on server 0), save phases, load, shrink, stats, stop and heartbeat; plus the
 * deferred-reply wait lists shared with sync.c.
 *
 * A request that is well formed but wrong (unknown table, range outside the shard, wrong
 * dim) gets an error reply naming this server and the table; the connection stays open.
 * Only a failure to send closes it (the caller does that).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ps_internal.h"

/* ---- replies ----------------------------------------------------------------------------------- */

int fl__ps_reply(fl_ps_server *s, fl__ps_sconn *c, const fl__ps_msg *m, const fl__ps_wbuf *b, const void *payload,
                 size_t plen)
{
    fl__ps_wbuf_finish((fl__ps_wbuf *)b, m->h.type, FL__PS_F_REPLY, m->h.req_id, plen);
    pthread_mutex_lock(&c->send_mu);
    int st = fl__ps_send(c->nc, b, &payload, &plen, payload ? 1 : 0, fl_net_deadline(s->o.request_timeout_ms));
    pthread_mutex_unlock(&c->send_mu);
    return st;
}

static int reply_empty(fl_ps_server *s, fl__ps_sconn *c, const fl__ps_msg *m)
{
    fl__ps_wbuf_begin(&c->wb);
    FL_CHECK(fl__ps_wbuf_reserve(&c->wb, 0));
    return fl__ps_reply(s, c, m, &c->wb, NULL, 0);
}

int fl__ps_reply_error(fl_ps_server *s, fl__ps_sconn *c, const fl__ps_msg *m, int st, const char *fmt, ...)
{
    char msg[1024];
    int k = snprintf(msg, sizeof msg, "%s: ", s->me);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg + k, sizeof msg - (size_t)k, fmt, ap);
    va_end(ap);
    FL_INFO(FL_SUB_PS, "%s request from %s refused: %s", fl__ps_type_name(m->h.type), c->label, msg);
    pthread_mutex_lock(&c->send_mu);
    int r = fl__ps_send_error(c->nc, m->h.type, m->h.req_id, st, msg, fl_net_deadline(s->o.request_timeout_ms));
    pthread_mutex_unlock(&c->send_mu);
    return r;
}
#define REJECT(...) return fl__ps_reply_error(s, c, m, __VA_ARGS__)

int fl__ps_waiters_add(fl__ps_waitlist *wl, fl_ps_server *s, fl__ps_sconn *c, const fl__ps_msg *m)
{
    if (wl->n == wl->cap) {
        int cap = wl->cap ? wl->cap * 2 : 16;
        fl__ps_waiter *p = realloc(wl->w, (size_t)cap * sizeof *p);
        if (!p) return fl__err(FL_ENOMEM, "out of memory for a waiting request");
        wl->w = p;
        wl->cap = cap;
    }
    pthread_mutex_lock(&s->mu);
    c->refs++;
    pthread_mutex_unlock(&s->mu);
    wl->w[wl->n++] = (fl__ps_waiter){c, m->h.req_id, m->h.type};
    return FL_OK;
}

void fl__ps_waiters_finish(fl_ps_server *s, fl__ps_waitlist *wl, int st, const char *msg)
{
    for (int i = 0; i < wl->n; i++) {
        fl__ps_waiter *w = &wl->w[i];
        uint64_t dl = fl_net_deadline(st ? 1000 : s->o.request_timeout_ms);
        pthread_mutex_lock(&w->c->send_mu);
        int r;
        if (st) {
            r = fl__ps_send_error(w->c->nc, w->type, w->req_id, st, msg, dl);
        } else {
            uint8_t h[FL__PS_HDR];
            fl__ps_hdr_encode(h, w->type, FL__PS_F_REPLY, w->req_id, 0);
            r = fl_net_send_all(w->c->nc, h, sizeof h, dl);
        }
        pthread_mutex_unlock(&w->c->send_mu);
        if (r) {
            FL_DEBUG(FL_SUB_PS, "%s: could not answer %s: %s", s->me, w->c->label, fl_last_error());
            fl_net_conn_shutdown(w->c->nc); /* the loop notices and closes it */
        }
        fl__ps_conn_unref(s, w->c);
    }
    wl->n = 0;
}

fl__ps_session *fl__ps_session_get(fl_ps_server *s, uint64_t session)
{
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->nsessions; i++)
        if (s->sessions[i]->session == session) {
            fl__ps_session *se = s->sessions[i];
            pthread_mutex_unlock(&s->mu);
            return se;
        }
    fl__ps_session *se = NULL;
    if (s->nsessions == s->sessions_cap) {
        int cap = s->sessions_cap ? s->sessions_cap * 2 : 16;
        fl__ps_session **p = realloc(s->sessions, (size_t)cap * sizeof *p);
        if (p) {
            s->sessions = p;
            s->sessions_cap = cap;
        }
    }
    if (s->nsessions < s->sessions_cap && (se = calloc(1, sizeof *se))) {
        se->session = session;
        pthread_mutex_init(&se->mu, NULL);
        s->sessions[s->nsessions++] = se;
    }
    pthread_mutex_unlock(&s->mu);
    return se;
}

/* ---- argument checks ------------------------------------------------------------------------------ */

/* 0 when table m->table exists and has this kind; else the error is replied and 1 (or a
 * negative send status) returned through *rc. */
static int bad_table(fl_ps_server *s, fl__ps_sconn *c, const fl__ps_msg *m, fl_ps_table_kind kind, int *rc)
{
    if (m->table >= (uint32_t)s->ntables) {
        *rc = fl__ps_reply_error(s, c, m, FL_EINVAL, "no table %u (this server has %d tables)", m->table, s->ntables);
        return 1;
    }
    if (s->cfgs[m->table].kind != kind) {
        *rc = fl__ps_reply_error(s, c, m, FL_EINVAL, "table %u '%s' is %s, not %s", m->table, s->cfgs[m->table].name,
                                 s->cfgs[m->table].kind == FL_PS_DENSE ? "dense" : "sparse",
                                 kind == FL_PS_DENSE ? "dense" : "sparse");
        return 1;
    }
    return 0;
}

static int bad_range(fl_ps_server *s, fl__ps_sconn *c, const fl__ps_msg *m, int *rc)
{
    int64_t n = fl__ps_dense_numel(s->tab[m->table].dense);
    if (m->offset > (uint64_t)n || m->n > (uint64_t)n - m->offset) {
        *rc = fl__ps_reply_error(s, c, m, FL_EINVAL,
                                 "dense table '%s': range [%llu, %llu + %llu) lies outside this "
                                 "server's shard of %lld floats",
                                 s->cfgs[m->table].name, (unsigned long long)m->offset, (unsigned long long)m->offset,
                                 (unsigned long long)m->n, (long long)n);
        return 1;
    }
    return 0;
}

/* ---- handlers ------------------------------------------------------------------------------------- */

static int on_hello(fl_ps_server *s, fl__ps_sconn *c, const fl__ps_msg *m)
{
    const fl_ps_server_opts *o = &s->o;
    if (m->worker_rank != (uint32_t)c->rank)
        REJECT(FL_EINVAL, "worker rank %u in hello differs from rank %d of the handshake", m->worker_rank, c->rank);
    if (m->num_workers != (uint32_t)o->num_workers || m->num_servers != (uint32_t)o->num_servers)
        REJECT(FL_EINVAL,
               "worker %d believes the job has %u workers and %u servers; this server was started with %d "
               "workers and %d servers",
               c->rank, m->num_workers, m->num_servers, o->num_workers, o->num_servers);
    if (m->server_index != (uint32_t)o->server_index)
        REJECT(FL_EINVAL, "worker %d connected here as server %u, but this is server %d (endpoint lists differ?)", c->rank,
               m->server_index, o->server_index);
    if (m->ntables != (uint32_t)s->ntables)
        REJECT(FL_EINVAL, "worker %d has %u tables, this server %d", c->rank, m->ntables, s->ntables);
    for (int i = 0; i < s->ntables; i++) {
        const fl_ps_table_config *t = &s->cfgs[i];
        const uint8_t *w = m->tables_wire + FL__PS_HELLO_TABLE * i;
        uint64_t shape, rule;
        uint32_t pushes;
        memcpy(&shape, w, 8);
        memcpy(&rule, w + 8, 8);
        memcpy(&pushes, w + 16, 4);
        if (pushes != (uint32_t)fl__ps_table_pushes(t))
            REJECT(FL_EINVAL, "table %d '%s': worker %d pushes %s, but this server expects %s", i, t->name, c->rank,
                   fl__ps_pushes_name((int)pushes), fl__ps_pushes_name(fl__ps_table_pushes(t)));
        if (shape != fl__ps_table_shape_hash(t))
            REJECT(FL_EINVAL, "table %d '%s' is configured differently on worker %d and on this server (name, kind, shape)",
                   i, t->name, c->rank);
        /* Paddle's parameter server runs the optimizer of its own program, whatever the
         * trainers minimize with: the server's rule applies, said once per table */
        if (rule == fl__ps_table_rule_hash(t)) continue;
        pthread_mutex_lock(&s->mu);
        int first = !s->rule_noted[i];
        s->rule_noted[i] = 1;
        pthread_mutex_unlock(&s->mu);
        if (first) {
            FL_INFO(FL_SUB_PS,
                    "%s: table %d '%s': worker %d configures the optimizer, its hyperparameters, the initializer, entry "
                    "or accessor differently; this server's apply (%s, rate %g)",
                    s->me, i, t->name, c->rank, fl__ps_opt_name(t->opt.kind), (double)t->opt.lr);
        }
    }
    if (!fl__ps_session_get(s, m->session)) REJECT(FL_ENOMEM, "out of memory");
    fl__ps_wbuf *b = &c->wb;
    fl__ps_wbuf_begin(b);
    if (fl__ps_put_u32(b, o->sync ? 1 : 0) || fl__ps_put_u32(b, 0)) REJECT(FL_ENOMEM, "out of memory");
    return fl__ps_reply(s, c, m, b, NULL, 0);
}

static int on_pull_dense(fl_ps_server *s, fl__ps_sconn *c, const fl__ps_msg *m)
{
    int rc;
    if (bad_table(s, c, m, FL_PS_DENSE, &rc) || bad_range(s, c, m, &rc)) return rc;
    fl__ps_wbuf *b = &c->wb;
    fl__ps_wbuf_begin(b);
    if (fl__ps_put_u64(b, m->n) || fl__ps_wbuf_reserve(b, m->n * 4))
        REJECT(FL_ENOMEM, "out of memory for a reply of %llu floats", (unsigned long long)m->n);
    float *v = (float *)(b->p + b->len);
    fl__ps_dense_pull(s->tab[m->table].dense, m->offset, m->n, v);
    if (m->bflags & FL__PS_B_BF16) {
        /* in place, front to back: value i is read before its bytes [4i, 4i+4) can be
         * overwritten (writes reach byte 2i+1 < 4i+4 only, and bytes of values < i) */
        uint8_t *w = (uint8_t *)v;
        for (uint64_t i = 0; i < m->n; i++) {
            float f;
            memcpy(&f, w + 4 * i, 4);
            uint16_t h = fl__f32_to_bf16(f);
            memcpy(w + 2 * i, &h, 2);
        }
        b->len += m->n * 2;
    } else {
        b->len += m->n * 4;
    }
    return fl__ps_reply(s, c, m, b, NULL, 0);
}

static int on_push(fl_ps_server *s, fl__ps_sconn *c, const fl__ps_msg *m, fl__ps_table *t)
{
    if (s->o.sync) return fl__ps_sync_push(s, c, m, t);
    fl__ps_session *se = fl__ps_session_get(s, m->session);
    if (!se) REJECT(FL_ENOMEM, "out of memory");
    pthread_mutex_lock(&se->mu);
    if (m->seq <= se->last_seq) {
        pthread_mutex_unlock(&se->mu);
        FL_DEBUG(FL_SUB_PS, "%s: push %llu from %s was applied already (a retry)", s->me, (unsigned long long)m->seq,
                 c->label);
        return reply_empty(s, c, m);
    }
    int last = (m->bflags & FL__PS_B_LAST) != 0, st;
    if (t->dense) st = fl__ps_dense_push(t->dense, m->offset, m->n, m->vals, 1.0f, last);
    else st = fl__ps_sparse_push(t->sparse, m->ids, m->n, m->vals, m->shows, m->clicks, 1.0f, last);
    if (st == FL_OK) se->last_seq = m->seq;
    pthread_mutex_unlock(&se->mu);
    if (st) REJECT(st, "%s", fl_last_error());
    return reply_empty(s, c, m);
}

static int on_init_dense(fl_ps_server *s, fl__ps_sconn *c, const fl__ps_msg *m)
{
    int rc, applied;
    if (bad_table(s, c, m, FL_PS_DENSE, &rc) || bad_range(s, c, m, &rc)) return rc;
    fl__ps_dense_init(s->tab[m->table].dense, m->offset, m->n, m->vals, (m->bflags & FL__PS_B_FORCE) != 0,
                      (m->bflags & FL__PS_B_LAST) != 0, &applied);
    fl__ps_wbuf *b = &c->wb;
    fl__ps_wbuf_begin(b);
    if (fl__ps_put_u32(b, (uint32_t)applied) || fl__ps_put_u32(b, 0)) REJECT(FL_ENOMEM, "out of memory");
    return fl__ps_reply(s, c, m, b, NULL, 0);
}

static int on_pull_sparse(fl_ps_server *s, fl__ps_sconn *c, const fl__ps_msg *m)
{
    int rc;
    if (bad_table(s, c, m, FL_PS_SPARSE, &rc)) return rc;
    fl__ps_sparse *t = s->tab[m->table].sparse;
    uint64_t dim = (uint64_t)fl__ps_sparse_dim(t);
    if (m->n > (FL_PS_MAX_BODY - 16) / (dim * 4))
        REJECT(FL_EINVAL, "sparse table '%s': %llu ids of dim %llu do not fit one reply (the client splits larger pulls)",
               s->cfgs[m->table].name, (unsigned long long)m->n, (unsigned long long)dim);
    fl__ps_wbuf *b = &c->wb;
    fl__ps_wbuf_begin(b);
    if (fl__ps_put_u64(b, m->n) || fl__ps_put_u32(b, (uint32_t)dim) || fl__ps_put_u32(b, 0) ||
        fl__ps_wbuf_reserve(b, m->n * dim * 4))
        REJECT(FL_ENOMEM, "out of memory for a reply of %llu rows", (unsigned long long)m->n);
    int st = fl__ps_sparse_pull(t, m->ids, m->n, (float *)(b->p + b->len), (m->bflags & FL__PS_B_TRAINING) != 0);
    if (st) REJECT(st, "%s", fl_last_error());
    b->len += m->n * dim * 4;
    return fl__ps_reply(s, c, m, b, NULL, 0);
}

/* Rows [first, first + n) of a sparse shard (fl_ps_client_scan_sparse pages through them). */
static int on_scan_sparse(fl_ps_server *s, fl__ps_sconn *c, const fl__ps_msg *m)
{
    int rc;
    if (bad_table(s, c, m, FL_PS_SPARSE, &rc)) return rc;
    fl__ps_sparse *t = s->tab[m->table].sparse;
    uint64_t dim = (uint64_t)fl__ps_sparse_dim(t);
    if (m->n > (FL_PS_MAX_BODY - 16) / (8 + dim * 4))
        REJECT(FL_EINVAL, "sparse table '%s': a page of %llu rows of dim %llu does not fit one reply",
               s->cfgs[m->table].name, (unsigned long long)m->n, (unsigned long long)dim);
    fl__ps_wbuf *b = &c->wb;
    fl__ps_wbuf_begin(b);
    if (fl__ps_put_u64(b, m->n) || fl__ps_put_u32(b, (uint32_t)dim) || fl__ps_put_u32(b, 0) ||
        fl__ps_wbuf_reserve(b, m->n * (8 + dim * 4)))
        REJECT(FL_ENOMEM, "out of memory for a reply of %llu rows", (unsigned long long)m->n);
    uint64_t *ids = (uint64_t *)(b->p + b->len);
    int st = fl__ps_sparse_scan(t, m->offset, m->n, ids, (float *)(ids + m->n));
    if (st) REJECT(st, "%s", fl_last_error());
    b->len += m->n * (8 + dim * 4);
    return fl__ps_reply(s, c, m, b, NULL, 0);
}

static int on_barrier(fl_ps_server *s, fl__ps_sconn *c, const fl__ps_msg *m)
{
    if (s->o.server_index != 0) REJECT(FL_EINVAL, "barriers are counted on server 0, not here");
    int r = c->rank, W = s->o.num_workers;
    pthread_mutex_lock(&s->mu);
    if (m->seq <= s->bar_done) {
        pthread_mutex_unlock(&s->mu);
        return reply_empty(s, c, m); /* a retry of a finished barrier */
    }
    if (m->seq != s->bar_done + 1) {
        uint64_t at = s->bar_done + 1;
        pthread_mutex_unlock(&s->mu);
        REJECT(FL_ESTATE, "worker %d entered barrier #%llu while the job is at barrier #%llu", r,
               (unsigned long long)m->seq, (unsigned long long)at);
    }
    for (int k = 0; k < W; k++)
        if (s->stopped[k]) {
            pthread_mutex_unlock(&s->mu);
            REJECT(FL_EREMOTE, "barrier #%llu can not complete: worker %d has already stopped", (unsigned long long)m->seq,
                   k);
        }
    fl__ps_waitlist *wl = &s->bar_waiters; /* under the server mutex, like the counts */
    if (wl->n == wl->cap) {
        int cap = wl->cap ? wl->cap * 2 : 16;
        fl__ps_waiter *p = realloc(wl->w, (size_t)cap * sizeof *p);
        if (!p) {
            pthread_mutex_unlock(&s->mu);
            REJECT(FL_ENOMEM, "out of memory");
        }
        wl->w = p;
        wl->cap = cap;
    }
    c->refs++;
    wl->w[wl->n++] = (fl__ps_waiter){c, m->h.req_id, m->h.type};
    if (!s->arrived[r]) {
        s->arrived[r] = 1;
        s->narrived++;
    }
    fl__ps_waitlist done = {0};
    if (s->narrived == W) {
        s->bar_done++;
        memset(s->arrived, 0, (size_t)W);
        s->narrived = 0;
        done = *wl;
        *wl = (fl__ps_waitlist){0};
    }
    pthread_mutex_unlock(&s->mu);
    if (done.n) {
        fl__ps_waiters_finish(s, &done, FL_OK, NULL);
        free(done.w);
    }
    return FL_OK;
}

static int on_save(fl_ps_server *s, fl__ps_sconn *c, const fl__ps_msg *m)
{
    char dir[FL__PS_DIR_MAX + 1];
    memcpy(dir, m->str, m->str_len);
    dir[m->str_len] = 0;
    if (!*dir) REJECT(FL_EINVAL, "save: empty directory");
    int st = FL_OK;
    if (m->phase == 1) {
        for (int i = 0; i < s->ntables && st == FL_OK; i++) {
            char *path = fl__ps_part_path(dir, s->cfgs[i].name, s->o.server_index, m->gen);
            if (!path) REJECT(FL_ENOMEM, "out of memory");
            st = s->tab[i].dense ? fl__ps_dense_save(s->tab[i].dense, path)
                                 : fl__ps_sparse_save(s->tab[i].sparse, path, (int)m->mode);
            free(path);
        }
        if (st) REJECT(st, "save of table shards failed: %s", fl_last_error());
    } else if (m->phase == 2) {
        if (s->o.server_index != 0) REJECT(FL_EINVAL, "the manifest is written by server 0");
        st = fl__ps_manifest_write(dir, m->gen, m->step, (int)m->mode, s->o.num_servers, s->cfgs, s->ntables);
        if (st) REJECT(st, "writing the checkpoint manifest failed: %s", fl_last_error());
        FL_INFO(FL_SUB_PS, "%s: checkpoint of step %lld committed in %s", s->me, (long long)m->step, dir);
    } else {
        fl__ps_remove_old_parts(dir, s->cfgs, s->ntables, s->o.server_index, m->gen);
    }
    return reply_empty(s, c, m);
}

int fl__ps_server_load_dir(fl_ps_server *s, const char *dir, int64_t *step)
{
    uint64_t gen;
    int64_t stp;
    FL_CHECK(fl__ps_manifest_read(dir, s->cfgs, s->ntables, s->o.num_servers, &gen, &stp));
    fl__ps_table *fresh;
    FL_CHECK(fl__ps_server_new_tables(s, &fresh));
    int st = FL_OK;
    for (int i = 0; i < s->ntables && st == FL_OK; i++) {
        char *path = fl__ps_part_path(dir, s->cfgs[i].name, s->o.server_index, gen);
        if (!path) {
            st = FL_ENOMEM;
            break;
        }
        st = fresh[i].dense ? fl__ps_dense_load(fresh[i].dense, path) : fl__ps_sparse_load(fresh[i].sparse, path);
        free(path);
    }
    if (st) {
        fl__ps_server_drop_tables(s, fresh);
        return fl__err(st, "%s: loading checkpoint '%s' failed (tables unchanged): %s", s->me, dir, fl_last_error());
    }
    fl__ps_server_swap_tables(s, fresh);
    if (step) *step = stp;
    FL_INFO(FL_SUB_PS, "%s: loaded checkpoint of step %lld from %s", s->me, (long long)stp, dir);
    return FL_OK;
}

static int on_load(fl_ps_server *s, fl__ps_sconn *c, const fl__ps_msg *m)
{
    char dir[FL__PS_DIR_MAX + 1];
    memcpy(dir, m->str, m->str_len);
    dir[m->str_len] = 0;
    int64_t step = 0;
    /* the caller holds tab_lk for reading; load swaps tables under the write lock */
    pthread_rwlock_unlock(&s->tab_lk);
    int st = fl__ps_server_load_dir(s, dir, &step);
    pthread_rwlock_rdlock(&s->tab_lk);
    if (st) REJECT(st, "%s", fl_last_error());
    fl__ps_wbuf *b = &c->wb;
    fl__ps_wbuf_begin(b);
    if (fl__ps_put_u64(b, (uint64_t)step)) REJECT(FL_ENOMEM, "out of memory");
    return fl__ps_reply(s, c, m, b, NULL, 0);
}

static int on_table_info(fl_ps_server *s, fl__ps_sconn *c, const fl__ps_msg *m)
{
    if (m->table >= (uint32_t)s->ntables)
        REJECT(FL_EINVAL, "no table %u (this server has %d tables)", m->table, s->ntables);
    fl__ps_table *t = &s->tab[m->table];
    fl__ps_wbuf *b = &c->wb;
    fl__ps_wbuf_begin(b);
    int st;
    if (m->h.type == FL__PS_SHRINK) {
        if (!t->sparse) REJECT(FL_EINVAL, "shrink applies to sparse tables; '%s' is dense", t->cfg.name);
        st = fl__ps_put_u64(b, (uint64_t)fl__ps_sparse_shrink(t->sparse));
    } else {
        fl_ps_table_stats ts;
        if (t->dense) fl__ps_dense_stats(t->dense, &ts);
        else fl__ps_sparse_stats(t->sparse, &ts);
        st = fl__ps_put_u64(b, (uint64_t)ts.rows);
        if (!st) st = fl__ps_put_u64(b, (uint64_t)ts.pending);
        if (!st) st = fl__ps_put_u64(b, (uint64_t)ts.bytes);
        if (!st) st = fl__ps_put(b, &ts.payload_per_key, 8);
    }
    if (st) REJECT(FL_ENOMEM, "out of memory");
    return fl__ps_reply(s, c, m, b, NULL, 0);
}

static int on_stop(fl_ps_server *s, fl__ps_sconn *c, const fl__ps_msg *m)
{
    FL_CHECK(reply_empty(s, c, m));
    int r = c->rank;
    char msg[256];
    snprintf(msg, sizeof msg, "%s: worker %d stopped while the others wait in a barrier", s->me, r);
    pthread_mutex_lock(&s->mu);
    s->stopped[r] = 1;
    fl__ps_waitlist bw = {0};
    if (s->narrived > 0) {
        bw = s->bar_waiters;
        s->bar_waiters = (fl__ps_waitlist){0};
        memset(s->arrived, 0, (size_t)s->o.num_workers);
        s->narrived = 0;
    }
    pthread_mutex_unlock(&s->mu);
    FL_INFO(FL_SUB_PS, "%s: worker %d stopped", s->me, r);
    if (bw.n) fl__ps_waiters_finish(s, &bw, FL_EREMOTE, msg);
    free(bw.w);
    if (s->o.sync) fl__ps_sync_worker_stopped(s, r);
    ssize_t w = write(s->wake[1], "s", 1);
    (void)w;
    return FL_OK;
}

int fl__ps_dispatch(fl_ps_server *s, fl__ps_sconn *c, const fl__ps_msg *m)
{
    pthread_mutex_lock(&s->mu);
    int stopped = s->stopped[c->rank], failed = s->failed;
    char why[sizeof s->fail_msg];
    if (failed) snprintf(why, sizeof why, "%s", s->fail_msg);
    pthread_mutex_unlock(&s->mu);
    if (failed) REJECT(FL_EREMOTE, "not serving any more: %s", why);
    if (stopped && m->h.type != FL__PS_HEARTBEAT && m->h.type != FL__PS_STOP)
        REJECT(FL_ESTATE, "worker %d has already called stop", c->rank);
    pthread_rwlock_rdlock(&s->tab_lk);
    int rc;
    switch (m->h.type) {
    case FL__PS_HELLO: rc = on_hello(s, c, m); break;
    case FL__PS_PULL_DENSE: rc = on_pull_dense(s, c, m); break;
    case FL__PS_PUSH_DENSE:
        if (bad_table(s, c, m, FL_PS_DENSE, &rc) || bad_range(s, c, m, &rc)) break;
        if (m->vals16) { /* bf16 on the wire: the table takes float32 */
            if (m->n > c->cap_f32) {
                float *p = realloc(c->f32, (size_t)m->n * sizeof *p);
                if (!p) {
                    rc = fl__ps_reply_error(s, c, m, FL_ENOMEM, "out of memory for a push of %llu values",
                                            (unsigned long long)m->n);
                    break;
                }
                c->f32 = p;
                c->cap_f32 = m->n;
            }
            fl__cvt_bf16_to_f32(c->f32, m->vals16, (int64_t)m->n);
            fl__ps_msg m32 = *m;
            m32.vals = c->f32;
            m32.vals16 = NULL;
            rc = on_push(s, c, &m32, &s->tab[m->table]);
            break;
        }
        rc = on_push(s, c, m, &s->tab[m->table]);
        break;
    case FL__PS_INIT_DENSE: rc = on_init_dense(s, c, m); break;
    case FL__PS_PULL_SPARSE: rc = on_pull_sparse(s, c, m); break;
    case FL__PS_PUSH_SPARSE:
        if (bad_table(s, c, m, FL_PS_SPARSE, &rc)) break;
        if (m->dim != (uint32_t)s->cfgs[m->table].dim) {
            rc = fl__ps_reply_error(s, c, m, FL_EINVAL, "sparse table '%s' has dim %d, the push has dim %u",
                                    s->cfgs[m->table].name, s->cfgs[m->table].dim, m->dim);
            break;
        }
        rc = on_push(s, c, m, &s->tab[m->table]);
        break;
    case FL__PS_BARRIER: rc = on_barrier(s, c, m); break;
    case FL__PS_SAVE: rc = on_save(s, c, m); break;
    case FL__PS_LOAD: rc = on_load(s, c, m); break;
    case FL__PS_SHRINK:
    case FL__PS_STATS: rc = on_table_info(s, c, m); break;
    case FL__PS_STOP: rc = on_stop(s, c, m); break;
    case FL__PS_HEARTBEAT: rc = reply_empty(s, c, m); break;
    case FL__PS_SCAN_SPARSE: rc = on_scan_sparse(s, c, m); break;
    default: rc = fl__ps_reply_error(s, c, m, FL_EPROTO, "unexpected %s request", fl__ps_type_name(m->h.type));
    }
    pthread_rwlock_unlock(&s->tab_lk);
    return rc;
}
