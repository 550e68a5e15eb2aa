/*
 * server.c - the PS server's process side: creation (tables, listener), the poll loop that
 * hands readable connections and the listener to a pool of request threads, worker liveness
 * (connections lost without stop, silent workers), shutdown and the end of the run.
 *
 * Threads.  fl_ps_server_run's thread polls the listener's acceptor, a wake-up pipe and
 * every idle connection (one not being served).  A readable connection is marked busy and
 * queued; a pool thread reads one whole frame (deadline request_timeout_ms), dispatches it
 * (service.c), waits up to half a millisecond for the same connection's next frame (serving
 * it too, up to 32 in a row, while another pool thread is free), then marks the connection
 * idle and wakes the loop.  Heartbeats on an idle connection are answered by the loop
 * itself and never reach the pool.  New connections are
 * authenticated by the acceptor (fleet/net.h) in the loop thread itself, concurrently and
 * without blocking, with bounds on unauthenticated connections: idle or slow peers that
 * never authenticate cannot keep workers out, and workers' requests never wait behind
 * them.  All connection and worker state is under the server mutex.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ps_internal.h"

#define LOOP_SLICE_MS 100 /* the loop's longest sleep in poll */

static int check_opts(const fl_ps_server_opts *o)
{
    if (o->num_servers < 1 || o->num_servers > FL_PS_MAX_SERVERS)
        return fl__err(FL_EINVAL, "fl_ps_server_create: num_servers %d outside [1, %d]", o->num_servers, FL_PS_MAX_SERVERS);
    if (o->server_index < 0 || o->server_index >= o->num_servers)
        return fl__err(FL_EINVAL, "fl_ps_server_create: server_index %d outside [0, %d)", o->server_index, o->num_servers);
    if (o->num_workers < 1 || o->num_workers > FL_PS_MAX_WORKERS)
        return fl__err(FL_EINVAL, "fl_ps_server_create: num_workers %d outside [1, %d]", o->num_workers, FL_PS_MAX_WORKERS);
    if (o->num_tables < 0 || o->num_tables > FL_PS_MAX_TABLES || (o->num_tables > 0 && !o->tables))
        return fl__err(FL_EINVAL, "fl_ps_server_create: bad table list (num_tables %d)", o->num_tables);
    for (int i = 0; i < o->num_tables; i++) {
        FL_CHECK(fl_ps_table_config_check(&o->tables[i]));
        for (int j = 0; j < i; j++)
            if (!strcmp(o->tables[i].name, o->tables[j].name))
                return fl__err(FL_EINVAL, "fl_ps_server_create: table name '%s' is used twice", o->tables[i].name);
    }
    if (!o->secret && !o->insecure_local)
        return fl__err(FL_EINVAL, "fl_ps_server_create: no job secret (set FLEET_JOB_SECRET or pass insecure_local "
                                  "for a loopback-only test job)");
    return FL_OK;
}

static int make_tables(fl_ps_server *s, fl__ps_table **out)
{
    fl__ps_table *t = calloc((size_t)(s->ntables ? s->ntables : 1), sizeof *t);
    if (!t) return fl__err(FL_ENOMEM, "%s: out of memory for tables", s->me);
    int st = FL_OK;
    for (int i = 0; i < s->ntables && st == FL_OK; i++) {
        t[i].cfg = s->cfgs[i];
        if (t[i].cfg.kind == FL_PS_DENSE)
            st = fl__ps_dense_create(&t[i].cfg, s->o.server_index, s->o.num_servers, &t[i].dense);
        else st = fl__ps_sparse_create(&t[i].cfg, s->o.server_index, s->o.num_servers, &t[i].sparse);
    }
    if (st) {
        for (int i = 0; i < s->ntables; i++) {
            fl__ps_dense_free(t[i].dense);
            fl__ps_sparse_free(t[i].sparse);
        }
        free(t);
        return st;
    }
    *out = t;
    return FL_OK;
}

static void free_tables(fl__ps_table *t, int n)
{
    if (!t) return;
    for (int i = 0; i < n; i++) {
        fl__ps_dense_free(t[i].dense);
        fl__ps_sparse_free(t[i].sparse);
    }
    free(t);
}

int fl_ps_server_create(const fl_ps_server_opts *opts, fl_ps_server **out)
{
    if (!opts || !out) return fl__err(FL_EINVAL, "fl_ps_server_create: opts and out must not be NULL");
    *out = NULL;
    FL_CHECK(check_opts(opts));
    fl_ps_server *s = calloc(1, sizeof *s);
    if (!s) return fl__err(FL_ENOMEM, "fl_ps_server_create: out of memory");
    s->magic = FL_PS_MAGIC_SERVER;
    s->o = *opts;
    s->wake[0] = s->wake[1] = -1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_rwlock_init(&s->tab_lk, NULL);
    snprintf(s->me, sizeof s->me, "server %d", opts->server_index);
    int st = fl_ps_server_opts_from_env(&s->o);
    fl_ps_server_opts *o = &s->o;
    if (st == FL_OK) st = fl__ps_tables_copy(opts->tables, opts->num_tables, &s->cfgs);
    s->ntables = opts->num_tables;
    o->tables = s->cfgs;
    if (opts->secret) {
        s->secret = *opts->secret;
        o->secret = &s->secret;
    }
    s->auth = (fl_net_auth){opts->secret ? s->secret.bytes : NULL,
                            opts->secret ? s->secret.len : 0,
                            opts->insecure_local,
                            FL_NET_SERVICE_PS,
                            FL_PS_ROLE_SERVER,
                            opts->server_index};
    int W = o->num_workers;
    if (st == FL_OK) {
        s->nconn = calloc((size_t)W, sizeof *s->nconn);
        s->stopped = calloc((size_t)W, sizeof *s->stopped);
        s->seen = calloc((size_t)W, sizeof *s->seen);
        s->last_seen = calloc((size_t)W, sizeof *s->last_seen);
        s->lost_since = calloc((size_t)W, sizeof *s->lost_since);
        s->addr = calloc((size_t)W, sizeof *s->addr);
        s->arrived = calloc((size_t)W, 1);
        if (!s->nconn || !s->stopped || !s->seen || !s->last_seen || !s->lost_since || !s->addr || !s->arrived)
            st = fl__err(FL_ENOMEM, "fl_ps_server_create: out of memory");
    }
    /* a request and a heartbeat connection per client, up to 4 clients per worker (the trainer's,
     * the send threads', the receive thread's): more than a soft limit of 1024 at 128 workers */
    if (st == FL_OK) fl__nofile_want((uint64_t)W * 8 + 256, s->me);
    if (st == FL_OK) st = make_tables(s, &s->tab);
    if (st == FL_OK && o->sync) st = fl__ps_sync_init(s);
    if (st == FL_OK && pipe2(s->wake, O_CLOEXEC | O_NONBLOCK) != 0)
        st = fl__err(FL_EIO, "fl_ps_server_create: pipe failed: %s", strerror(errno));
    if (st == FL_OK) {
        char host[FL_NET_HOST_MAX];
        int port;
        st = fl_net_parse_endpoint(opts->endpoint ? opts->endpoint : "127.0.0.1:0", host, sizeof host, &port, 1);
        if (st == FL_OK) st = fl_net_listen(host, port, &s->lis);
        fl_net_acceptor_opts ao = {0, 0, o->handshake_timeout_ms > 0 ? o->handshake_timeout_ms : 0};
        if (st == FL_OK) st = fl_net_acceptor_create(s->lis, &s->auth, &ao, &s->acc);
        if (st) st = fl__err(st, "server %d cannot serve: %s", opts->server_index, fl_last_error());
    }
    if (st) {
        fl_ps_server_free(s);
        return st;
    }
    snprintf(s->endpoint, sizeof s->endpoint, "%s", fl_net_listener_endpoint(s->lis));
    snprintf(s->me, sizeof s->me, "server %d (%.40s)", opts->server_index, s->endpoint);
    FL_INFO(FL_SUB_PS, "%s: listening, %d tables, %d workers, %s mode", s->me, s->ntables, W, o->sync ? "sync" : "async");
    *out = s;
    return FL_OK;
}

const char *fl_ps_server_endpoint(const fl_ps_server *s) { return s && s->magic == FL_PS_MAGIC_SERVER ? s->endpoint : ""; }

int fl_ps_server_port(const fl_ps_server *s)
{
    if (!s || s->magic != FL_PS_MAGIC_SERVER) return fl__err(FL_EINVAL, "fl_ps_server_port: server is NULL or invalid");
    return fl_net_listener_port(s->lis);
}

int fl_ps_server_load(fl_ps_server *s, const char *dir)
{
    if (!s || s->magic != FL_PS_MAGIC_SERVER) return fl__err(FL_EINVAL, "fl_ps_server_load: invalid server handle");
    if (!dir || !*dir) return fl__err(FL_EINVAL, "fl_ps_server_load: dir is empty");
    pthread_mutex_lock(&s->mu);
    int running = s->running;
    pthread_mutex_unlock(&s->mu);
    if (running) return fl__err(FL_ESTATE, "fl_ps_server_load: %s is already running (load through a client)", s->me);
    return fl__ps_server_load_dir(s, dir, NULL);
}

int fl_ps_server_table_stats(fl_ps_server *s, int table, fl_ps_table_stats *out)
{
    if (!s || s->magic != FL_PS_MAGIC_SERVER || !out) return fl__err(FL_EINVAL, "fl_ps_server_table_stats: bad arguments");
    if (table < 0 || table >= s->ntables)
        return fl__err(FL_EINVAL, "fl_ps_server_table_stats: table %d outside [0, %d)", table, s->ntables);
    pthread_rwlock_rdlock(&s->tab_lk);
    if (s->tab[table].dense) fl__ps_dense_stats(s->tab[table].dense, out);
    else fl__ps_sparse_stats(s->tab[table].sparse, out);
    pthread_rwlock_unlock(&s->tab_lk);
    return FL_OK;
}

void fl_ps_server_shutdown(fl_ps_server *s)
{
    if (!s || s->magic != FL_PS_MAGIC_SERVER) return;
    s->shutdown_req = 1;
    if (s->wake[1] >= 0) {
        ssize_t r = write(s->wake[1], "x", 1);
        (void)r;
    }
}

static void wake_loop(fl_ps_server *s)
{
    ssize_t r = write(s->wake[1], "w", 1);
    (void)r;
}

/* ---- connections ----------------------------------------------------------------------------- */

static void conn_free(fl__ps_sconn *c)
{
    fl_net_conn_free(c->nc);
    fl__ps_rbuf_free(&c->rb);
    fl__ps_wbuf_free(&c->wb);
    free(c->f32);
    pthread_mutex_destroy(&c->send_mu);
    free(c);
}

void fl__ps_conn_unref(fl_ps_server *s, fl__ps_sconn *c)
{
    pthread_mutex_lock(&s->mu);
    int last = --c->refs == 0;
    pthread_mutex_unlock(&s->mu);
    if (last) conn_free(c);
}

/* Server mutex held. */
static void conn_close_locked(fl_ps_server *s, fl__ps_sconn *c, const char *why)
{
    if (c->closed) return;
    c->closed = 1;
    fl_net_conn_shutdown(c->nc);
    int r = c->rank;
    if (--s->nconn[r] == 0 && !s->stopped[r] && !s->failed) {
        s->lost_since[r] = fl__now_ns();
        FL_WARN(FL_SUB_PS,
                "%s: worker %d (%s) has no connection left and has not called stop (%s); waiting %d ms "
                "for it to reconnect",
                s->me, r, s->addr[r], why, s->o.reconnect_grace_ms);
    }
}

void fl__ps_note_seen(fl_ps_server *s, int rank)
{
    pthread_mutex_lock(&s->mu);
    s->last_seen[rank] = fl__now_ns();
    pthread_mutex_unlock(&s->mu);
}

void fl__ps_server_fail(fl_ps_server *s, int st, const char *msg)
{
    pthread_mutex_lock(&s->mu);
    if (!s->failed) {
        s->failed = 1;
        s->fail_st = st;
        snprintf(s->fail_msg, sizeof s->fail_msg, "%s", msg);
    }
    pthread_mutex_unlock(&s->mu);
    wake_loop(s);
}

/* Takes an authenticated connection from the acceptor (loop thread). */
static void add_conn(fl_ps_server *s, fl_net_conn *nc)
{
    int rank = fl_net_conn_peer_rank(nc);
    if (fl_net_conn_peer_role(nc) != FL_PS_ROLE_WORKER || rank < 0 || rank >= s->o.num_workers) {
        FL_WARN(FL_SUB_PS, "%s: refused %s: it presents itself as role %u rank %d, expected a worker in [0, %d)", s->me,
                fl_net_conn_addr(nc), fl_net_conn_peer_role(nc), rank, s->o.num_workers);
        fl_net_conn_free(nc);
        return;
    }
    fl__ps_sconn *c = calloc(1, sizeof *c);
    if (!c) {
        FL_ERROR(FL_SUB_PS, "%s: out of memory for a connection from worker %d", s->me, rank);
        fl_net_conn_free(nc);
        return;
    }
    c->nc = nc;
    c->rank = rank;
    c->refs = 1;
    pthread_mutex_init(&c->send_mu, NULL);
    snprintf(c->label, sizeof c->label, "worker %d (%s)", rank, fl_net_conn_addr(nc));
    fl_net_conn_set_label(nc, c->label);
    pthread_mutex_lock(&s->mu);
    if (s->nconns == s->conns_cap) {
        int cap = s->conns_cap ? s->conns_cap * 2 : 16;
        fl__ps_sconn **p = realloc(s->conns, (size_t)cap * sizeof *p);
        if (!p) {
            pthread_mutex_unlock(&s->mu);
            conn_free(c);
            FL_ERROR(FL_SUB_PS, "%s: out of memory for a connection from worker %d", s->me, rank);
            return;
        }
        s->conns = p;
        s->conns_cap = cap;
    }
    s->conns[s->nconns++] = c;
    s->nconn[rank]++;
    s->seen[rank] = 1;
    s->last_seen[rank] = fl__now_ns();
    snprintf(s->addr[rank], sizeof s->addr[rank], "%s", fl_net_conn_addr(nc));
    pthread_mutex_unlock(&s->mu);
    FL_DEBUG(FL_SUB_PS, "%s: accepted %s", s->me, c->label);
}

/* After a reply, whether c's next frame arrives within LINGER_NS: then the same request
 * thread reads it at once, instead of handing c back to the loop, whose poll, job queue and
 * wake-up of a request thread cost two more thread switches per request (a worker's send
 * thread pulls a parameter right after pushing its gradient).  Not while other connections
 * wait for a request thread, after LINGER_TURNS requests in a row, or once the server ends. */
#define LINGER_NS 500000L
#define LINGER_TURNS 32
static int linger(fl_ps_server *s, fl__ps_sconn *c, int turn)
{
    pthread_mutex_lock(&s->mu);
    /* one request thread always stays free for the loop's jobs */
    int ok = turn + 1 < LINGER_TURNS && !s->njobs && s->lingering < s->nthreads - 1 && !s->quit && !s->failed &&
             !c->closed;
    c->serving = 0;
    s->lingering += ok;
    pthread_mutex_unlock(&s->mu);
    if (!ok) return 0;
    struct pollfd p = {fl_net_conn_fd(c->nc), POLLIN, 0};
    struct timespec ts = {0, LINGER_NS};
    int r = ppoll(&p, 1, &ts, NULL);
    pthread_mutex_lock(&s->mu);
    s->lingering--;
    pthread_mutex_unlock(&s->mu);
    return r == 1;
}

static void do_read(fl_ps_server *s, fl__ps_sconn *c)
{
    fl__ps_msg m;
    int st;
    for (int turn = 0;; turn++) {
        st = fl__ps_recv(c->nc, &c->rb, FL_PS_MAX_BODY, &m, fl_net_deadline(s->o.request_timeout_ms));
        if (st == FL_OK && (m.h.flags & FL__PS_F_REPLY))
            st = fl__err(FL_EPROTO, "%s sent a reply frame (%s) where a request was expected", c->label,
                         fl__ps_type_name(m.h.type));
        if (st == FL_OK) {
            pthread_mutex_lock(&s->mu);
            s->last_seen[c->rank] = fl__now_ns();
            c->serving = 1;
            pthread_mutex_unlock(&s->mu);
            st = fl__ps_dispatch(s, c, &m);
        }
        if (st != FL_OK || !linger(s, c, turn)) break;
    }
    if (c->rb.cap > ((size_t)64 << 20)) fl__ps_rbuf_free(&c->rb); /* do not keep huge buffers per idle conn */
    if (c->wb.cap > ((size_t)64 << 20)) fl__ps_wbuf_free(&c->wb);
    pthread_mutex_lock(&s->mu);
    if (st) {
        int quiet = st == FL_EREMOTE && s->stopped[c->rank];
        if (!quiet && st != FL_EREMOTE)
            FL_WARN(FL_SUB_PS, "%s: closing the connection to %s: %s", s->me, c->label, fl_last_error());
        else if (!quiet) FL_INFO(FL_SUB_PS, "%s: %s", s->me, fl_last_error());
        conn_close_locked(s, c, fl_strerror(st));
    }
    c->busy = c->serving = 0;
    pthread_mutex_unlock(&s->mu);
    fl__ps_conn_unref(s, c);
    wake_loop(s);
}

/* Answers the heartbeats at the head of c's stream in the loop thread itself (c is idle:
 * no pool thread reads it), so a worker's liveness never waits for a free pool thread or a
 * table lock.  Returns 1 when that was all c had to say, 0 when the rest (a request, a
 * partial or bad frame, a closed connection, a server that failed) goes to a pool thread. */
static int answer_heartbeats(fl_ps_server *s, fl__ps_sconn *c)
{
    for (int k = 0; k < 8; k++) {
        uint8_t h[FL__PS_HDR];
        size_t got;
        fl__ps_hdr hd;
        if (fl_net_try_peek(c->nc, h, sizeof h, &got) != FL_OK) return 0;
        /* nothing (more) to read: no job, or a pool thread would wait in the read for the
         * connection's next frame (a client that only sends heartbeats: seconds) */
        if (got == 0) return 1;
        if (got < sizeof h) return 0;
        if (fl__ps_hdr_decode(h, 0, &hd) != FL_OK || hd.type != FL__PS_HEARTBEAT || (hd.flags & FL__PS_F_REPLY)) return 0;
        pthread_mutex_lock(&s->mu);
        int failed = s->failed;
        pthread_mutex_unlock(&s->mu);
        if (failed || pthread_mutex_trylock(&c->send_mu) != 0) return 0;
        int st = fl_net_try_recv(c->nc, h, sizeof h, &got);
        if (st == FL_OK) {
            fl__ps_hdr_encode(h, FL__PS_HEARTBEAT, FL__PS_F_REPLY, hd.req_id, 0);
            st = fl_net_send_all(c->nc, h, sizeof h, fl_net_deadline(100));
        }
        pthread_mutex_unlock(&c->send_mu);
        if (st) return 0; /* the pool thread finds the broken connection and closes it */
        fl__ps_note_seen(s, c->rank);
    }
    uint8_t b;
    size_t got;
    return fl_net_try_peek(c->nc, &b, 1, &got) == FL_OK && got == 0;
}

static void *pool_main(void *arg)
{
    fl_ps_server *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!s->njobs && !s->quit) pthread_cond_wait(&s->cv, &s->mu);
        if (!s->njobs) {
            pthread_mutex_unlock(&s->mu);
            return NULL;
        }
        fl__ps_job j = s->jobs[s->jobs_head];
        s->jobs_head = (s->jobs_head + 1) % s->jobs_cap;
        s->njobs--;
        pthread_mutex_unlock(&s->mu);
        do_read(s, j.c);
    }
}

/* Server mutex held. */
static int push_job(fl_ps_server *s, fl__ps_sconn *c)
{
    if (s->njobs == s->jobs_cap) {
        int cap = s->jobs_cap ? s->jobs_cap * 2 : 64;
        fl__ps_job *p = malloc((size_t)cap * sizeof *p);
        if (!p) return FL_ENOMEM;
        for (int i = 0; i < s->njobs; i++) p[i] = s->jobs[(s->jobs_head + i) % s->jobs_cap];
        free(s->jobs);
        s->jobs = p;
        s->jobs_head = 0;
        s->jobs_cap = cap;
    }
    s->jobs[(s->jobs_head + s->njobs) % s->jobs_cap] = (fl__ps_job){c};
    s->njobs++;
    pthread_cond_signal(&s->cv);
    return FL_OK;
}

/* Moves the handshakes on and takes the workers that authenticated (loop thread).  Refused
 * handshakes are logged: the first at once, then a summary at most every 5 s. */
static void serve_acceptor(fl_ps_server *s)
{
    if (fl_net_acceptor_step(s->acc) != FL_OK) FL_WARN(FL_SUB_PS, "%s: accepting connections: %s", s->me, fl_last_error());
    fl_net_conn *nc;
    while (fl_net_acceptor_next(s->acc, &nc) == FL_OK && nc) add_conn(s, nc);
    fl_net_acceptor_stats a, *o = &s->acc_logged;
    fl_net_acceptor_get_stats(s->acc, &a);
    uint64_t bad = a.refused + a.timed_out + a.evicted, was = o->refused + o->timed_out + o->evicted;
    uint64_t now = fl__now_ns();
    if (bad == was || (was && now - s->acc_log_ns < 5000000000ull)) return;
    const char *last = fl_net_acceptor_last_refusal(s->acc);
    FL_WARN(FL_SUB_PS,
            "%s: turned away %llu unauthenticated connections (%llu refused, %llu timed out, %llu dropped "
            "to make room; %d pending now)%s%s",
            s->me, (unsigned long long)(bad - was), (unsigned long long)(a.refused - o->refused),
            (unsigned long long)(a.timed_out - o->timed_out), (unsigned long long)(a.evicted - o->evicted), a.pending,
            *last ? "; latest refusal: " : "", last);
    *o = a;
    s->acc_log_ns = now;
}

/* ---- the loop ----------------------------------------------------------------------------------- */

/* Server mutex held.  Returns 1 when the run is over (failure recorded, or all stopped). */
static int check_workers(fl_ps_server *s, int *all_stopped)
{
    uint64_t now = fl__now_ns();
    int W = s->o.num_workers, nst = 0;
    char msg[512];
    /* a worker whose request is being executed is alive, however long that takes (one
     * stopped in the middle of sending a request is not: only its heartbeats count) */
    for (int i = 0; i < s->nconns; i++)
        if (s->conns[i]->serving && !s->conns[i]->closed) s->last_seen[s->conns[i]->rank] = now;
    for (int r = 0; r < W && !s->failed; r++) {
        if (s->stopped[r]) {
            nst++;
            continue;
        }
        double quiet = (double)fl__live_quiet(&s->live, s->last_seen[r], now) / 1e9; /* not our own stops */
        if (s->seen[r] && s->nconn[r] == 0 && now - s->lost_since[r] > (uint64_t)s->o.reconnect_grace_ms * 1000000ull) {
            snprintf(msg, sizeof msg,
                     "%s: worker %d (%s) lost its connections %.1f s ago without calling stop "
                     "(killed or crashed?)",
                     s->me, r, s->addr[r], (double)(now - s->lost_since[r]) / 1e9);
        } else if (s->seen[r] && s->o.worker_timeout_ms > 0 && quiet * 1000 > s->o.worker_timeout_ms) {
            snprintf(msg, sizeof msg,
                     "%s: worker %d (%s) sent nothing, not even a heartbeat, for %.1f s: it is stopped "
                     "or hung (FLEET_PS_WORKER_TIMEOUT_MS is %d)",
                     s->me, r, s->addr[r], quiet, s->o.worker_timeout_ms);
        } else if (!s->seen[r] && s->o.join_timeout_ms > 0 && quiet * 1000 > s->o.join_timeout_ms) {
            snprintf(msg, sizeof msg, "%s: worker %d never connected within %d ms (FLEET_PS_WORKER_JOIN_TIMEOUT_MS)", s->me,
                     r, s->o.join_timeout_ms);
        } else {
            continue;
        }
        s->failed = 1, s->fail_st = FL_EREMOTE;
        snprintf(s->fail_msg, sizeof s->fail_msg, "%s", msg);
    }
    *all_stopped = nst == W;
    return s->failed || nst == W;
}

static int start_pool(fl_ps_server *s)
{
    int n = s->o.num_threads > 0 ? s->o.num_threads : 4;
    s->threads = calloc((size_t)n, sizeof *s->threads);
    if (!s->threads) return fl__err(FL_ENOMEM, "%s: out of memory for threads", s->me);
    for (int i = 0; i < n; i++) {
        if (pthread_create(&s->threads[i], NULL, pool_main, s) != 0) {
            s->nthreads = i;
            return fl__err(FL_EIO, "%s: cannot start request thread %d", s->me, i);
        }
        s->nthreads = i + 1;
    }
    return FL_OK;
}

static void stop_pool(fl_ps_server *s)
{
    pthread_mutex_lock(&s->mu);
    s->quit = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < s->nthreads; i++) pthread_join(s->threads[i], NULL);
    free(s->threads);
    s->threads = NULL;
    s->nthreads = 0;
}

int fl_ps_server_run(fl_ps_server *s)
{
    if (!s || s->magic != FL_PS_MAGIC_SERVER) return fl__err(FL_EINVAL, "fl_ps_server_run: invalid server handle");
    pthread_mutex_lock(&s->mu);
    if (s->running) {
        pthread_mutex_unlock(&s->mu);
        return fl__err(FL_ESTATE, "fl_ps_server_run: %s already ran", s->me);
    }
    s->running = 1;
    uint64_t now = fl__now_ns();
    for (int r = 0; r < s->o.num_workers; r++) s->last_seen[r] = now;
    fl__live_clock_init(&s->live, FL_SUB_PS, s->me, "the workers", s->o.worker_timeout_ms);
    pthread_mutex_unlock(&s->mu);
    int st = start_pool(s);
    struct pollfd *pf = NULL;
    fl__ps_sconn **pc = NULL;
    int pcap = 0, all_stopped = 0;
    uint64_t prev = fl__now_ns();
    while (st == FL_OK) {
        pthread_mutex_lock(&s->mu);
        uint64_t t = fl__now_ns();
        /* a turn this late: this server did not run (stopped, starved), no worker is to blame */
        fl__live_check(&s->live, prev + LOOP_SLICE_MS * 1000000ull, t);
        prev = t;
        /* reap closed connections nobody serves */
        for (int i = 0; i < s->nconns;) {
            fl__ps_sconn *c = s->conns[i];
            if (c->closed && !c->busy) {
                s->conns[i] = s->conns[--s->nconns];
                if (--c->refs == 0) conn_free(c);
                continue;
            }
            i++;
        }
        if (s->shutdown_req && !s->failed) {
            s->failed = 1, s->fail_st = FL_ESTATE;
            snprintf(s->fail_msg, sizeof s->fail_msg, "%s: shut down before every worker stopped", s->me);
        }
        if (check_workers(s, &all_stopped)) {
            pthread_mutex_unlock(&s->mu);
            break;
        }
        if (s->nconns + 2 > pcap) {
            pcap = (s->nconns + 2) * 2;
            free(pf);
            free(pc);
            pf = malloc((size_t)pcap * sizeof *pf);
            pc = malloc((size_t)pcap * sizeof *pc);
            if (!pf || !pc) {
                pthread_mutex_unlock(&s->mu);
                st = fl__err(FL_ENOMEM, "%s: out of memory in the poll loop", s->me);
                break;
            }
        }
        int n = 0;
        pf[n] = (struct pollfd){s->wake[0], POLLIN, 0};
        pc[n++] = NULL;
        pf[n] = (struct pollfd){fl_net_acceptor_fd(s->acc), POLLIN, 0};
        pc[n++] = NULL;
        int nfix = n;
        for (int i = 0; i < s->nconns; i++) {
            if (s->conns[i]->busy || s->conns[i]->closed) continue;
            pf[n] = (struct pollfd){fl_net_conn_fd(s->conns[i]->nc), POLLIN, 0};
            pc[n++] = s->conns[i];
        }
        pthread_mutex_unlock(&s->mu);
        int tmo = fl_net_acceptor_timeout_ms(s->acc);
        int r = poll(pf, (nfds_t)n, tmo < 0 || tmo > LOOP_SLICE_MS ? LOOP_SLICE_MS : tmo);
        if (r < 0 && errno != EINTR) {
            st = fl__err(FL_EIO, "%s: poll failed: %s", s->me, strerror(errno));
            break;
        }
        serve_acceptor(s);
        if (r <= 0) continue;
        if (pf[0].revents) {
            char buf[256];
            while (read(s->wake[0], buf, sizeof buf) > 0) {
            }
        }
        for (int i = nfix; i < n; i++)
            if (pf[i].revents && answer_heartbeats(s, pc[i])) pf[i].revents = 0;
        pthread_mutex_lock(&s->mu);
        for (int i = nfix; i < n; i++) {
            fl__ps_sconn *c = pc[i];
            if (!pf[i].revents || c->busy || c->closed) continue;
            c->busy = 1;
            c->refs++;
            if (push_job(s, c)) {
                c->busy = 0;
                c->refs--;
            }
        }
        pthread_mutex_unlock(&s->mu);
    }
    free(pf);
    free(pc);
    pthread_mutex_lock(&s->mu);
    if (st == FL_OK && s->failed) st = s->fail_st;
    char msg[sizeof s->fail_msg];
    snprintf(msg, sizeof msg, "%s", s->failed ? s->fail_msg : "server stopped");
    if (!s->failed && st == FL_OK && all_stopped) {
        /* normal end; later requests (there should be none) get an error */
        s->failed = 1, s->fail_st = FL_ESTATE;
        snprintf(s->fail_msg, sizeof s->fail_msg, "%s: every worker has stopped", s->me);
    }
    pthread_mutex_unlock(&s->mu);
    /* answer whatever still waits, then close every connection so pool threads return quickly */
    if (st != FL_OK) {
        pthread_mutex_lock(&s->mu);
        fl__ps_waitlist bw = s->bar_waiters;
        s->bar_waiters = (fl__ps_waitlist){0};
        pthread_mutex_unlock(&s->mu);
        fl__ps_waiters_finish(s, &bw, st, msg);
        free(bw.w);
        fl__ps_sync_fail_all(s, st, msg);
    }
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->nconns; i++) conn_close_locked(s, s->conns[i], "server ending");
    pthread_mutex_unlock(&s->mu);
    stop_pool(s);
    if (st != FL_OK) return fl__err(st, "%s", msg);
    FL_INFO(FL_SUB_PS, "%s: every worker stopped; exiting", s->me);
    return FL_OK;
}

void fl_ps_server_free(fl_ps_server *s)
{
    if (!s || s->magic != FL_PS_MAGIC_SERVER) return;
    stop_pool(s);
    for (int i = 0; i < s->nconns; i++) {
        fl__ps_sconn *c = s->conns[i];
        if (--c->refs == 0) conn_free(c);
    }
    free(s->conns);
    free(s->jobs);
    free(s->bar_waiters.w);
    for (int i = 0; i < s->nsessions; i++) {
        pthread_mutex_destroy(&s->sessions[i]->mu);
        free(s->sessions[i]);
    }
    free(s->sessions);
    fl__ps_sync_free(s);
    free_tables(s->tab, s->ntables);
    fl__ps_tables_free(s->cfgs, s->ntables);
    fl_net_acceptor_free(s->acc);
    fl_net_listener_free(s->lis);
    if (s->wake[0] >= 0) close(s->wake[0]);
    if (s->wake[1] >= 0) close(s->wake[1]);
    free(s->nconn);
    free(s->stopped);
    free(s->seen);
    free(s->last_seen);
    free(s->lost_since);
    free(s->addr);
    free(s->arrived);
    fl_net_secret_clear(&s->secret);
    pthread_rwlock_destroy(&s->tab_lk);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    s->magic = 0;
    free(s);
}

int fl__ps_server_swap_tables(fl_ps_server *s, fl__ps_table *fresh)
{
    pthread_rwlock_wrlock(&s->tab_lk);
    fl__ps_table *old = s->tab;
    s->tab = fresh;
    pthread_rwlock_unlock(&s->tab_lk);
    free_tables(old, s->ntables);
    return FL_OK;
}

int fl__ps_server_new_tables(fl_ps_server *s, fl__ps_table **out) { return make_tables(s, out); }
void fl__ps_server_drop_tables(fl_ps_server *s, fl__ps_table *t) { free_tables(t, s->ntables); }
