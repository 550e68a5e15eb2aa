/*
 * client.c - the worker side of the PS: connections to every server (made with a deadline,
 * retried while the servers start), the request engine that sends to several servers in
 * parallel and collects the replies (retrying idempotent requests over a fresh connection
 * when one broke), and the control calls (barrier, save, load, shrink, stats, stop).  Table
 * calls live in client_ops.c, heartbeats and the liveness of servers in client_hb.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../net/net_internal.h"
#include "ps_internal.h"

/* ---- connections ------------------------------------------------------------------------------ */

static int connect_server(fl_ps_client *c, int i, uint64_t deadline, fl_net_conn **out)
{
    fl__ps_csrv *sv = &c->srv[i];
    if (sv->gone && c->o.server_timeout_ms > 0) { /* it answered nothing lately: do not wait long on it */
        uint64_t cap = fl_net_deadline(c->o.server_timeout_ms);
        if (cap < deadline) deadline = cap;
    }
    int st = fl_net_connect(sv->host, sv->port, &c->auth, deadline, out);
    if (st) return fl__err(st, "cannot reach %s: %s", sv->label, fl_last_error());
    fl_net_conn_set_label(*out, sv->label);
    fl__net_conn_set_watch(*out, fl__ps_client_watch, sv);
    sv->gone = 0;
    sv->lost[0] = 0;
    atomic_store(&sv->alive_ns, fl__now_ns());
    return FL_OK;
}

/* Drops server i's connection after a failure, keeping the failure's message: the requests
 * of this round still waiting on that connection fail with it (a server that answered
 * nothing is named as stopped or hung, not as a lost connection). */
static void drop_conn(fl_ps_client *c, int i)
{
    snprintf(c->srv[i].lost, sizeof c->srv[i].lost, "%s", fl_last_error());
    fl_net_conn_free(c->srv[i].conn);
    c->srv[i].conn = NULL;
}

/* ---- the request engine ---------------------------------------------------------------------- */

int fl__ps_client_calls(fl_ps_client *c, int n)
{
    if (n <= c->ncalls_cap) return FL_OK;
    fl__ps_call *p = realloc(c->calls, (size_t)n * sizeof *p);
    if (!p) return fl__err(FL_ENOMEM, "out of memory for %d requests", n);
    memset(p + c->ncalls_cap, 0, (size_t)(n - c->ncalls_cap) * sizeof *p);
    c->calls = p;
    c->ncalls_cap = n;
    return FL_OK;
}

uint64_t fl__ps_client_push_deadline(const fl_ps_client *c)
{
    return fl_net_deadline(c->server_sync ? c->o.barrier_timeout_ms : c->o.request_timeout_ms);
}

static int send_call(fl_ps_client *c, fl__ps_call *k, uint64_t deadline)
{
    fl__ps_csrv *sv = &c->srv[k->server];
    if (!sv->conn) { /* lost in an earlier call: reconnecting gets the retry budget, not more */
        uint64_t cap = c->o.retry_ms > 0 ? fl_net_deadline(c->o.retry_ms) : deadline;
        FL_CHECK(connect_server(c, k->server, cap < deadline ? cap : deadline, &sv->conn));
    }
    uint64_t extra = 0;
    for (int p = 0; p < k->nparts; p++) extra += k->lens[p];
    fl__ps_wbuf_finish(&k->fixed, k->type, 0, ++c->req_id, extra);
    int st = fl__ps_send(sv->conn, &k->fixed, k->parts, k->lens, k->nparts, deadline);
    if (st == FL_OK) {
        atomic_fetch_add(&c->tx_bytes, (uint64_t)k->fixed.len + extra);
        atomic_fetch_add(&c->nreq, 1);
    }
    if (st == FL_ETIMEDOUT) st = fl__ps_client_timeout_error(c, k->server, fl__ps_type_name(k->type));
    if (st) drop_conn(c, k->server);
    return st;
}

/* Receives the reply of k: the fixed part is decoded into k->reply, a payload goes to dst. */
static int recv_call(fl_ps_client *c, fl__ps_call *k, uint64_t deadline)
{
    fl__ps_csrv *sv = &c->srv[k->server];
    uint8_t hb[FL__PS_HDR];
    fl__ps_hdr h;
    uint64_t req_id;
    memcpy(&req_id, k->fixed.p + 16, 8);
    if (!sv->conn) /* dropped while an earlier request to this server failed: that is why */
        return sv->lost[0] ? fl__err(FL_EREMOTE, "%s", sv->lost)
                           : fl__err(FL_EREMOTE, "the connection to %s was lost", sv->label);
    int st = fl_net_recv_all(sv->conn, hb, sizeof hb, deadline);
    if (st) goto broken;
    st = fl__ps_hdr_decode(hb, FL_PS_MAX_BODY, &h);
    if (st == FL_OK && (!(h.flags & FL__PS_F_REPLY) || h.type != k->type || h.req_id != req_id))
        st = fl__err(FL_EPROTO, "unexpected frame (%s, id %llu) where the reply to %s %llu was due",
                     fl__ps_type_name(h.type), (unsigned long long)h.req_id, fl__ps_type_name(k->type),
                     (unsigned long long)req_id);
    if (st) {
        st = fl__err(st, "bad reply from %s: %s", sv->label, fl_last_error());
        goto broken;
    }
    int has_payload = k->dst && !(h.flags & FL__PS_F_ERROR);
    uint64_t fixed_len = h.len;
    if (has_payload) {
        if (h.len < k->dst_len) {
            st = fl__err(FL_EPROTO, "%s reply from %s is shorter than the data asked for", fl__ps_type_name(k->type),
                         sv->label);
            goto broken;
        }
        fixed_len = h.len - k->dst_len;
    }
    if (fixed_len > FL__PS_MSG_MAX + 64) {
        st = fl__err(FL_EPROTO, "%s reply from %s has an unexpected length %llu", fl__ps_type_name(k->type), sv->label,
                     (unsigned long long)h.len);
        goto broken;
    }
    if (!c->rb.p) {
        void *p = NULL;
        if (posix_memalign(&p, 64, FL__PS_MSG_MAX + 64)) return fl__err(FL_ENOMEM, "out of memory");
        c->rb.p = p;
        c->rb.cap = FL__PS_MSG_MAX + 64;
    }
    st = fl_net_recv_all(sv->conn, c->rb.p, (size_t)fixed_len, deadline);
    if (st == FL_OK && has_payload && k->dst_len) st = fl_net_recv_all(sv->conn, k->dst, (size_t)k->dst_len, deadline);
    if (st == FL_EREMOTE)
        st = fl__err(FL_ECORRUPT, "truncated %s reply from %s: the connection closed inside it", fl__ps_type_name(k->type),
                     sv->label);
    if (st) goto broken;
    atomic_fetch_add(&c->rx_bytes, (uint64_t)FL__PS_HDR + h.len);
    fl__ps_hdr hf = h;
    hf.len = fixed_len;
    memset(&k->reply, 0, sizeof k->reply);
    k->reply.h = h;
    if (has_payload) {
        /* the payload went to dst: check the fixed fields against what was asked for */
        int ok = 0;
        if (k->type == FL__PS_PULL_DENSE && fixed_len == 8) {
            memcpy(&k->reply.n, c->rb.p, 8);
            ok = k->reply.n <= FL_PS_MAX_BODY && k->reply.n * (k->wire16 ? 2 : 4) == k->dst_len;
        } else if (k->type == FL__PS_PULL_SPARSE && fixed_len == 16) {
            memcpy(&k->reply.n, c->rb.p, 8);
            memcpy(&k->reply.dim, c->rb.p + 8, 4);
            ok = k->reply.dim >= 1 && k->reply.dim <= FL_PS_MAX_DIM && k->reply.n <= FL_PS_MAX_BODY &&
                 k->reply.n * k->reply.dim * 4 == k->dst_len;
        } else if (k->type == FL__PS_SCAN_SPARSE && fixed_len == 16) {
            memcpy(&k->reply.n, c->rb.p, 8);
            memcpy(&k->reply.dim, c->rb.p + 8, 4);
            ok = k->reply.dim >= 1 && k->reply.dim <= FL_PS_MAX_DIM && k->reply.n <= FL_PS_MAX_BODY &&
                 k->reply.n * (8 + 4ull * k->reply.dim) == k->dst_len;
        }
        if (!ok) {
            st = fl__err(FL_EPROTO, "bad %s reply from %s: sizes do not match the request", fl__ps_type_name(k->type),
                         sv->label);
            goto broken;
        }
        return FL_OK;
    }
    st = fl__ps_body_decode(&hf, c->rb.p, &k->reply);
    if (st) {
        st = fl__err(st, "bad %s reply from %s: %s", fl__ps_type_name(k->type), sv->label, fl_last_error());
        goto broken;
    }
    if (h.flags & FL__PS_F_ERROR) /* the server's message names the server and the table */
        return fl__err(k->reply.status, "%.*s", (int)k->reply.str_len, k->reply.str);
    return FL_OK;
broken:
    if (st == FL_ETIMEDOUT) st = fl__ps_client_timeout_error(c, k->server, fl__ps_type_name(k->type));
    drop_conn(c, k->server);
    return st;
}

/* 1 for failures of the connection (worth a retry on a fresh one), 0 for answers. */
static int transport_failure(int st) { return st == FL_EREMOTE || st == FL_ECORRUPT || st == FL_EIO; }

#define SRV_WORDS ((FL_PS_MAX_SERVERS + 63) / 64)
#define SRV_BIT(m, i) (((m)[(i) / 64] >> ((i) % 64)) & 1u)
#define SRV_SET(m, i) ((m)[(i) / 64] |= 1ull << ((i) % 64))

int fl__ps_client_run(fl_ps_client *c, fl__ps_call *calls, int n, uint64_t deadline, int idempotent)
{
    /* Per server, in this round: down = a connection could not be made within the retry
     * budget (the round's later requests to it are not sent: each would wait a budget),
     * lost = its connection broke, spent = its retry budget is used up (its requests are
     * not retried: a batch of n tables would otherwise wait n budgets for a dead server). */
    uint64_t down[SRV_WORDS] = {0}, lost[SRV_WORDS] = {0}, spent[SRV_WORDS] = {0};
    char why_down[1024] = ""; /* the first failed reconnect: why the round gave up on a server */
    /* 1. send everything, 2. collect every reply in order; a failed request is not fatal
     * yet when it may be retried */
    int nfail = 0;
    for (int i = 0; i < n; i++) {
        const int sv = calls[i].server, had = c->srv[sv].conn != NULL;
        if (SRV_BIT(down, sv)) {
            calls[i].st = fl__err(FL_EREMOTE, "%s was not sent: %s could not be reached", fl__ps_type_name(calls[i].type),
                                  c->srv[sv].label);
        } else {
            calls[i].st = send_call(c, &calls[i], deadline);
            if (calls[i].st && !had) { /* the reconnect had the retry budget */
                SRV_SET(down, sv);
                SRV_SET(spent, sv);
                if (!why_down[0]) snprintf(why_down, sizeof why_down, "%s", fl_last_error());
            }
        }
        if (calls[i].st) nfail++;
    }
    for (int i = 0; i < n; i++) {
        if (calls[i].st) continue;
        calls[i].st = recv_call(c, &calls[i], deadline);
        if (calls[i].st) nfail++;
    }
    if (!nfail) return FL_OK;
    for (int i = 0; i < n; i++)
        if (calls[i].st && c->srv[calls[i].server].conn == NULL) SRV_SET(lost, calls[i].server);
    /* 3. retries, one request at a time, while the server's retry budget lasts */
    char first[1024] = "";
    int first_st = FL_OK;
    for (int i = 0; i < n; i++) {
        fl__ps_call *k = &calls[i];
        if (!k->st) continue;
        /* remote error replies arrive with a live connection: those are answers; a server
         * that answers nothing, not even heartbeats, would not answer a retry either.  A
         * request whose connection broke is retried on the connection an earlier retry of
         * this round made, if any. */
        int broken = SRV_BIT(lost, k->server) && transport_failure(k->st) && !c->srv[k->server].gone &&
                     !SRV_BIT(spent, k->server);
        if (broken && idempotent && c->o.retry_ms >= 0) {
            char orig[1024], why[1024];
            snprintf(orig, sizeof orig, "%s", fl_last_error());
            snprintf(why, sizeof why, "%s", orig);
            uint64_t until = fl_net_deadline(c->o.retry_ms);
            if (until > deadline) until = deadline;
            uint64_t wait_ns = 10000000ull;
            FL_INFO(FL_SUB_PS, "%s to %s failed (%s); retrying for up to %d ms", fl__ps_type_name(k->type),
                    c->srv[k->server].label, orig, c->o.retry_ms);
            while (k->st && fl__now_ns() < until) {
                k->st = send_call(c, k, until);
                if (!k->st) k->st = recv_call(c, k, deadline);
                if (!k->st || !(c->srv[k->server].conn == NULL && (transport_failure(k->st) || k->st == FL_ETIMEDOUT)))
                    break;
                snprintf(why, sizeof why, "%s", fl_last_error());
                struct timespec ts = {0, (long)wait_ns};
                nanosleep(&ts, NULL);
                if (wait_ns < 200000000ull) wait_ns *= 2;
            }
            if (k->st && c->srv[k->server].conn == NULL) {
                SRV_SET(spent, k->server);
                k->st = fl__err(k->st == FL_ETIMEDOUT ? FL_EREMOTE : k->st,
                                "%s on %s failed: %s; retrying for %d ms did not help (last: %s)",
                                fl__ps_type_name(k->type), c->srv[k->server].label, orig, c->o.retry_ms, why);
            }
        }
        if (k->st && !first_st) {
            first_st = k->st;
            /* a request not retried because its server could not be reached: that is why */
            const char *msg = !broken && SRV_BIT(down, k->server) && why_down[0] ? why_down : fl_last_error();
            snprintf(first, sizeof first, "%s", msg);
        }
    }
    if (!first_st) return FL_OK;
    return fl__err(first_st, "%s", first);
}

/* ---- create, free ---------------------------------------------------------------------- */

static int check_copts(const fl_ps_client_opts *o)
{
    if (o->num_servers < 1 || o->num_servers > FL_PS_MAX_SERVERS || !o->endpoints)
        return fl__err(FL_EINVAL, "fl_ps_client_create: need 1..%d server endpoints (num_servers %d)", FL_PS_MAX_SERVERS,
                       o->num_servers);
    if (o->num_workers < 1 || o->num_workers > FL_PS_MAX_WORKERS || o->worker_rank < 0 || o->worker_rank >= o->num_workers)
        return fl__err(FL_EINVAL, "fl_ps_client_create: worker_rank %d / num_workers %d invalid", o->worker_rank,
                       o->num_workers);
    if (o->num_tables < 0 || o->num_tables > FL_PS_MAX_TABLES || (o->num_tables > 0 && !o->tables))
        return fl__err(FL_EINVAL, "fl_ps_client_create: bad table list (num_tables %d)", o->num_tables);
    for (int i = 0; i < o->num_tables; i++) FL_CHECK(fl_ps_table_config_check(&o->tables[i]));
    if (o->dense_wire_dtype != FL_FLOAT32 && o->dense_wire_dtype != FL_BFLOAT16)
        return fl__err(FL_EINVAL, "fl_ps_client_create: dense_wire_dtype %d is neither FL_FLOAT32 nor FL_BFLOAT16",
                       o->dense_wire_dtype);
    if (!o->secret && !o->insecure_local)
        return fl__err(FL_EINVAL, "fl_ps_client_create: no job secret (set FLEET_JOB_SECRET or pass insecure_local "
                                  "for a loopback-only test job)");
    return FL_OK;
}

int fl_ps_client_create(const fl_ps_client_opts *opts, fl_ps_client **out)
{
    if (!opts || !out) return fl__err(FL_EINVAL, "fl_ps_client_create: opts and out must not be NULL");
    *out = NULL;
    FL_CHECK(check_copts(opts));
    fl_ps_client *c = calloc(1, sizeof *c);
    if (!c) return fl__err(FL_ENOMEM, "fl_ps_client_create: out of memory");
    c->magic = FL_PS_MAGIC_CLIENT;
    c->o = *opts;
    c->ns = opts->num_servers;
    c->ntables = opts->num_tables;
    pthread_mutex_init(&c->mu, NULL);
    int st = fl_ps_client_opts_from_env(&c->o);
    char who[32];
    snprintf(who, sizeof who, "worker %d", c->o.worker_rank);
    fl__live_clock_init(&c->live, FL_SUB_PS, who, "the servers", c->o.server_timeout_ms);
    if (st == FL_OK) st = fl__ps_tables_copy(opts->tables, opts->num_tables, &c->cfgs);
    c->o.tables = c->cfgs;
    c->o.endpoints = NULL;
    if (opts->secret) {
        c->secret = *opts->secret;
        c->o.secret = &c->secret;
    }
    c->auth = (fl_net_auth){opts->secret ? c->secret.bytes : NULL,
                            opts->secret ? c->secret.len : 0,
                            opts->insecure_local,
                            FL_NET_SERVICE_PS,
                            FL_PS_ROLE_WORKER,
                            opts->worker_rank};
    fl_net_secret rnd;
    if (st == FL_OK) st = fl_net_secret_generate(&rnd);
    if (st == FL_OK) memcpy(&c->session, rnd.bytes, 8);
    if (st == FL_OK && !(c->srv = calloc((size_t)c->ns, sizeof *c->srv))) st = fl__err(FL_ENOMEM, "out of memory");
    for (int i = 0; i < c->ns && st == FL_OK; i++) {
        const char *ep = opts->endpoints[i] ? opts->endpoints[i] : "";
        st = fl_net_parse_endpoint(ep, c->srv[i].host, sizeof c->srv[i].host, &c->srv[i].port, 0);
        if (st) st = fl__err(st, "fl_ps_client_create: server %d: %s", i, fl_last_error());
        snprintf(c->srv[i].label, sizeof c->srv[i].label, "server %d (%s)", i, ep);
        c->srv[i].client = c;
    }
    if (st == FL_OK) { /* more than a soft limit of 1024 at 100 servers and 4 clients per worker */
        char need[96];
        snprintf(need, sizeof need, "worker %d (a request and a heartbeat connection per server and client)",
                 c->o.worker_rank);
        c->nofile = 2 * (int64_t)c->ns;
        fl__nofile_hold(c->nofile, need);
    }
    uint64_t dl = fl_net_deadline(c->o.connect_timeout_ms);
    for (int i = 0; i < c->ns && st == FL_OK; i++) {
        st = connect_server(c, i, dl, &c->srv[i].conn);
        if (st)
            st = fl__err(st, "worker %d: %s (waited up to %d ms)", opts->worker_rank, fl_last_error(),
                         c->o.connect_timeout_ms);
    }
    if (st == FL_OK) st = fl__ps_client_calls(c, c->ns);
    for (int i = 0; i < c->ns && st == FL_OK; i++) {
        fl__ps_call *k = &c->calls[i];
        k->server = i;
        k->type = FL__PS_HELLO;
        k->nparts = 0;
        k->dst = NULL;
        k->dst_len = 0;
        fl__ps_wbuf_begin(&k->fixed);
        st = fl__ps_put_u64(&k->fixed, c->session);
        uint32_t f[6] = {(uint32_t)opts->worker_rank,
                         (uint32_t)opts->num_workers,
                         (uint32_t)c->ns,
                         (uint32_t)i,
                         (uint32_t)c->ntables,
                         0};
        if (!st) st = fl__ps_put(&k->fixed, f, sizeof f);
        for (int t = 0; t < c->ntables && !st; t++) {
            uint32_t pw[2] = {(uint32_t)fl__ps_table_pushes(&c->cfgs[t]), 0};
            st = fl__ps_put_u64(&k->fixed, fl__ps_table_shape_hash(&c->cfgs[t]));
            if (!st) st = fl__ps_put_u64(&k->fixed, fl__ps_table_rule_hash(&c->cfgs[t]));
            if (!st) st = fl__ps_put(&k->fixed, pw, sizeof pw);
        }
    }
    if (st == FL_OK) st = fl__ps_client_run(c, c->calls, c->ns, fl_net_deadline(c->o.request_timeout_ms), 1);
    if (st == FL_OK) {
        c->server_sync = (int)c->calls[0].reply.mode;
        for (int i = 1; i < c->ns; i++)
            if ((int)c->calls[i].reply.mode != c->server_sync)
                st = fl__err(FL_EINVAL, "servers disagree on sync mode (server 0: %d, %s: %d)", c->server_sync,
                             c->srv[i].label, (int)c->calls[i].reply.mode);
    }
    if (st == FL_OK) st = fl__ps_client_hb_start(c);
    if (st) {
        int keep = st;
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", fl_last_error());
        fl_ps_client_free(c);
        return fl__err(keep, "%s", msg);
    }
    *out = c;
    return FL_OK;
}

void fl_ps_client_free(fl_ps_client *c)
{
    if (!c || c->magic != FL_PS_MAGIC_CLIENT) return;
    fl__ps_client_hb_stop(c);
    for (int i = 0; c->srv && i < c->ns; i++) fl_net_conn_free(c->srv[i].conn);
    if (c->nofile) fl__nofile_hold(-c->nofile, NULL);
    free(c->srv);
    for (int i = 0; i < c->ncalls_cap; i++) fl__ps_wbuf_free(&c->calls[i].fixed);
    free(c->calls);
    fl__ps_rbuf_free(&c->rb);
    free(c->uids);
    free(c->gids);
    free(c->hkeys);
    free(c->pos);
    free(c->gidx);
    free(c->hslot);
    free(c->gvals);
    free(c->wire16);
    free(c->gshow);
    free(c->gclick);
    fl__ps_tables_free(c->cfgs, c->ntables);
    fl_net_secret_clear(&c->secret);
    pthread_mutex_destroy(&c->mu);
    c->magic = 0;
    free(c);
}

/* ---- control calls ------------------------------------------------------------------------------ */

int fl__ps_client_check_table(const fl_ps_client *c, const char *fn, int table, fl_ps_table_kind kind)
{
    if (table < 0 || table >= c->ntables) return fl__err(FL_EINVAL, "%s: table %d outside [0, %d)", fn, table, c->ntables);
    if ((int)kind >= 0 && c->cfgs[table].kind != kind)
        return fl__err(FL_EINVAL, "%s: table %d '%s' is %s", fn, table, c->cfgs[table].name,
                       c->cfgs[table].kind == FL_PS_DENSE ? "dense" : "sparse");
    return FL_OK;
}

int fl__ps_client_enter(fl_ps_client *c, const char *fn, int table, fl_ps_table_kind kind)
{
    if (!c || c->magic != FL_PS_MAGIC_CLIENT) return fl__err(FL_EINVAL, "%s: invalid client handle", fn);
    if (table >= 0) FL_CHECK(fl__ps_client_check_table(c, fn, table, kind));
    pthread_mutex_lock(&c->mu);
    if (c->stopped) {
        pthread_mutex_unlock(&c->mu);
        return fl__err(FL_ESTATE, "%s: worker %d has already called fl_ps_client_stop", fn, c->o.worker_rank);
    }
    return FL_OK;
}

/* One request of `type` with the same fixed body to servers [s0, s1). */
static int simple_calls(fl_ps_client *c, int s0, int s1, uint16_t type, const void *body, size_t blen, const void *tail,
                        size_t tlen, uint64_t deadline, int idempotent)
{
    FL_CHECK(fl__ps_client_calls(c, s1 - s0));
    for (int i = s0; i < s1; i++) {
        fl__ps_call *k = &c->calls[i - s0];
        k->server = i;
        k->type = type;
        k->dst = NULL;
        k->dst_len = 0;
        k->nparts = tlen ? 1 : 0;
        k->parts[0] = tail;
        k->lens[0] = tlen;
        fl__ps_wbuf_begin(&k->fixed);
        FL_CHECK(fl__ps_put(&k->fixed, body, blen));
    }
    return fl__ps_client_run(c, c->calls, s1 - s0, deadline, idempotent);
}

int fl_ps_client_barrier(fl_ps_client *c)
{
    FL_CHECK(fl__ps_client_enter(c, "fl_ps_client_barrier", -1, -1));
    uint64_t num = c->barriers + 1;
    int st = simple_calls(c, 0, 1, FL__PS_BARRIER, &num, 8, NULL, 0, fl_net_deadline(c->o.barrier_timeout_ms), 1);
    if (st == FL_OK) c->barriers = num;
    pthread_mutex_unlock(&c->mu);
    return st;
}

static int dir_arg(const char *fn, const char *dir)
{
    if (!dir || !*dir) return fl__err(FL_EINVAL, "%s: dir is empty", fn);
    if (strlen(dir) > FL__PS_DIR_MAX) return fl__err(FL_EINVAL, "%s: dir longer than %d bytes", fn, FL__PS_DIR_MAX);
    return FL_OK;
}

int fl_ps_client_save(fl_ps_client *c, const char *dir, int mode, int64_t step)
{
    FL_CHECK(dir_arg("fl_ps_client_save", dir));
    if (mode < 0 || mode > 3) return fl__err(FL_EINVAL, "fl_ps_client_save: mode %d outside 0..3", mode);
    FL_CHECK(fl__ps_client_enter(c, "fl_ps_client_save", -1, -1));
    fl_net_secret rnd;
    int st = fl_net_secret_generate(&rnd);
    uint64_t gen;
    memcpy(&gen, rnd.bytes, 8);
    uint32_t dl = (uint32_t)strlen(dir);
    uint64_t deadline = fl_net_deadline(c->o.barrier_timeout_ms);
    for (uint32_t phase = 1; phase <= 3 && st == FL_OK; phase++) {
        uint8_t body[32];
        uint32_t m = (uint32_t)mode, z = 0;
        memcpy(body, &phase, 4);
        memcpy(body + 4, &m, 4);
        memcpy(body + 8, &gen, 8);
        memcpy(body + 16, &step, 8);
        memcpy(body + 24, &dl, 4);
        memcpy(body + 28, &z, 4);
        st = simple_calls(c, 0, phase == 2 ? 1 : c->ns, FL__PS_SAVE, body, 32, dir, dl, deadline, 1);
        if (st)
            st = fl__err(st, "save to '%s' (phase %u: %s) failed; the previous checkpoint, if any, is intact: %s", dir,
                         phase,
                         phase == 1   ? "shards"
                         : phase == 2 ? "manifest"
                                      : "cleanup",
                         fl_last_error());
        if (st && phase == 3) { /* the checkpoint is committed; stale files stay */
            FL_WARN(FL_SUB_PS, "%s", fl_last_error());
            st = FL_OK;
        }
    }
    pthread_mutex_unlock(&c->mu);
    return st;
}

int fl_ps_client_load(fl_ps_client *c, const char *dir, int64_t *step)
{
    FL_CHECK(dir_arg("fl_ps_client_load", dir));
    FL_CHECK(fl__ps_client_enter(c, "fl_ps_client_load", -1, -1));
    uint32_t hdr[2] = {(uint32_t)strlen(dir), 0};
    int st = simple_calls(c, 0, c->ns, FL__PS_LOAD, hdr, 8, dir, hdr[0], fl_net_deadline(c->o.barrier_timeout_ms), 1);
    if (st == FL_OK && step) *step = c->calls[0].reply.i64[0];
    pthread_mutex_unlock(&c->mu);
    return st;
}

int fl_ps_client_shrink(fl_ps_client *c, int table, int64_t *deleted)
{
    FL_CHECK(fl__ps_client_enter(c, "fl_ps_client_shrink", table, FL_PS_SPARSE));
    uint32_t body[2] = {(uint32_t)table, 0};
    /* not idempotent (a repeated shrink decays twice): no retry */
    int st = simple_calls(c, 0, c->ns, FL__PS_SHRINK, body, 8, NULL, 0, fl_net_deadline(c->o.barrier_timeout_ms), 0);
    int64_t sum = 0;
    for (int i = 0; st == FL_OK && i < c->ns; i++) sum += c->calls[i].reply.i64[0];
    if (st == FL_OK && deleted) *deleted = sum;
    pthread_mutex_unlock(&c->mu);
    return st;
}

int fl_ps_client_table_stats(fl_ps_client *c, int table, fl_ps_table_stats *out)
{
    if (!out) return fl__err(FL_EINVAL, "fl_ps_client_table_stats: out is NULL");
    FL_CHECK(fl__ps_client_enter(c, "fl_ps_client_table_stats", table, -1));
    uint32_t body[2] = {(uint32_t)table, 0};
    int st = simple_calls(c, 0, c->ns, FL__PS_STATS, body, 8, NULL, 0, fl_net_deadline(c->o.request_timeout_ms), 1);
    memset(out, 0, sizeof *out);
    for (int i = 0; st == FL_OK && i < c->ns; i++) {
        out->rows += c->calls[i].reply.i64[0];
        out->pending += c->calls[i].reply.i64[1];
        out->bytes += c->calls[i].reply.i64[2];
        out->payload_per_key = c->calls[i].reply.f64;
    }
    out->bytes_per_key = out->rows ? (double)out->bytes / (double)out->rows : 0;
    pthread_mutex_unlock(&c->mu);
    return st;
}

int fl_ps_client_scan_sparse(fl_ps_client *c, int table, fl_ps_scan_fn fn, void *user)
{
    if (!fn) return fl__err(FL_EINVAL, "fl_ps_client_scan_sparse: callback is NULL");
    FL_CHECK(fl__ps_client_enter(c, "fl_ps_client_scan_sparse", table, FL_PS_SPARSE));
    const uint64_t dim = (uint64_t)c->cfgs[table].dim, per = 8 + 4 * dim;
    const uint64_t page = (8u << 20) / per > 0 ? (8u << 20) / per : 1;
    uint8_t *buf = malloc(page * per);
    uint32_t body[2] = {(uint32_t)table, 0};
    /* the servers' row counts first: each page then has a known size */
    int st = buf ? simple_calls(c, 0, c->ns, FL__PS_STATS, body, 8, NULL, 0, fl_net_deadline(c->o.request_timeout_ms), 1)
                 : fl__err(FL_ENOMEM, "fl_ps_client_scan_sparse: out of memory");
    int64_t *rows = st == FL_OK ? malloc((size_t)c->ns * sizeof *rows) : NULL;
    if (st == FL_OK && !rows) st = fl__err(FL_ENOMEM, "fl_ps_client_scan_sparse: out of memory");
    for (int i = 0; st == FL_OK && i < c->ns; i++) rows[i] = c->calls[i].reply.i64[0];
    for (int i = 0; st == FL_OK && i < c->ns; i++)
        for (uint64_t first = 0; st == FL_OK && first < (uint64_t)rows[i]; first += page) {
            uint64_t n = (uint64_t)rows[i] - first < page ? (uint64_t)rows[i] - first : page;
            uint8_t req[24];
            memcpy(req, body, 8);
            memcpy(req + 8, &first, 8);
            memcpy(req + 16, &n, 8);
            st = fl__ps_client_calls(c, 1);
            if (st) break;
            fl__ps_call *k = &c->calls[0];
            k->server = i;
            k->type = FL__PS_SCAN_SPARSE;
            k->dst = buf;
            k->dst_len = n * per;
            k->nparts = 0;
            fl__ps_wbuf_begin(&k->fixed);
            st = fl__ps_put(&k->fixed, req, sizeof req);
            if (st == FL_OK) st = fl__ps_client_run(c, k, 1, fl_net_deadline(c->o.request_timeout_ms), 1);
            if (st == FL_OK) st = fn(user, (const uint64_t *)buf, (const float *)(buf + 8 * n), (int64_t)n, (int)dim);
        }
    free(rows);
    free(buf);
    pthread_mutex_unlock(&c->mu);
    return st;
}

int fl_ps_client_stop(fl_ps_client *c)
{
    FL_CHECK(fl__ps_client_enter(c, "fl_ps_client_stop", -1, -1));
    int st = simple_calls(c, 0, c->ns, FL__PS_STOP, NULL, 0, NULL, 0, fl_net_deadline(c->o.request_timeout_ms), 1);
    c->stopped = 1;
    pthread_mutex_unlock(&c->mu);
    fl__ps_client_hb_stop(c);
    return st;
}

/* ---- traffic ------------------------------------------------------------------------------ */

int fl_ps_client_traffic(const fl_ps_client *c, fl_ps_traffic *out)
{
    if (!c || !out) return fl__err(FL_EINVAL, "fl_ps_client_traffic: client and out must not be NULL");
    fl_ps_client *m = (fl_ps_client *)c; /* the counters are atomics: reading them changes nothing */
    out->bytes_sent = atomic_load(&m->tx_bytes);
    out->bytes_received = atomic_load(&m->rx_bytes);
    out->dense_bytes_sent = atomic_load(&m->tx_dense);
    out->dense_bytes_received = atomic_load(&m->rx_dense);
    out->requests = atomic_load(&m->nreq);
    return FL_OK;
}

void fl_ps_traffic_add(fl_ps_traffic *a, const fl_ps_traffic *b)
{
    if (!a || !b) return;
    a->bytes_sent += b->bytes_sent;
    a->bytes_received += b->bytes_received;
    a->dense_bytes_sent += b->dense_bytes_sent;
    a->dense_bytes_received += b->dense_bytes_received;
    a->requests += b->requests;
}
