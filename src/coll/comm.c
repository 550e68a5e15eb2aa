/*
 * comm.c - the communicator's life: options, rendezvous (every rank connects to the lower
 * ranks and accepts the higher ones; each connection authenticated), the setup message that
 * checks all ranks agree (tuning, endpoints, the backend asked for, the backends each can
 * use), the backend's setup (backend.c), failure (abort notices to every peer) and freeing.
 */
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"

#define ROLE_COLL 0x434f4c4cu /* "COLL" */
#define SETUP_HELLO 1
#define SETUP_VERSION 2
#define HELLO_BYTES 48

int fl__coll_fail(fl_coll *c, int st)
{
    if (c->failed) return st;
    char msg[FL_COLL_MSG_MAX];
    snprintf(msg, sizeof msg, "%s", fl_last_error());
    if (c->hb_inited) fl__coll_op_begin(c); /* the heartbeat thread keeps off the connections */
    c->failed = st;
    snprintf(c->failmsg, sizeof c->failmsg, "%s", msg);
    size_t len = strlen(c->failmsg);
    uint8_t h[FL_COLL_HDR];
    fl__coll_hdr(h, &c->cur, FL_COLL_MSG_ABORT, (uint64_t)(int64_t)st, len);
    for (int p = 0; p < c->size; p++) {
        if (!c->conns[p]) continue;
        uint64_t dl = fl_net_deadline(200);
        int hb = c->hb_left && c->hb_left[p]; /* finish a heartbeat cut short first */
        if (hb && fl_net_send_all(c->conns[p], c->hb_out[p] + FL_COLL_HDR - c->hb_left[p], c->hb_left[p], dl) == FL_OK)
            c->hb_left[p] = 0, hb = 0;
        if (!c->tx_mid[p] && !hb && fl_net_send_all(c->conns[p], h, sizeof h, dl) == FL_OK)
            fl_net_send_all(c->conns[p], c->failmsg, len, dl);
        fl_net_conn_shutdown(c->conns[p]);
    }
    if (c->hb_inited) fl__coll_op_end(c);
    FL_WARN(FL_SUB_COLL, "communicator of rank %d failed: %s", c->rank, c->failmsg);
    return fl__err(st, "%s", c->failmsg);
}

/* ---- options ------------------------------------------------------------------------------- */

static uint64_t endpoints_hash(const fl_coll_opts *o)
{
    uint64_t h = 0;
    for (int i = 0; i < o->world_size; i++) h = fl__hash_u64(h ^ fl__hash_bytes(o->endpoints[i], strlen(o->endpoints[i])));
    return h;
}

static int check_opts(const fl_coll_opts *o)
{
    if (o->world_size < 1 || o->world_size > 4096)
        return fl__err(FL_EINVAL, "fl_coll_create: world_size %d out of range [1, 4096]", o->world_size);
    if (o->rank < 0 || o->rank >= o->world_size)
        return fl__err(FL_EINVAL, "fl_coll_create: rank %d out of range [0, %d)", o->rank, o->world_size);
    if (o->timeout_ms < 0) return fl__err(FL_EINVAL, "fl_coll_create: timeout_ms %d is negative", o->timeout_ms);
    if (o->world_size > 1 && !o->endpoints)
        return fl__err(FL_EINVAL, "fl_coll_create: endpoints is NULL with world_size %d", o->world_size);
    for (int i = 0; o->endpoints && i < o->world_size; i++) {
        char host[FL_NET_HOST_MAX];
        int port;
        if (!o->endpoints[i]) return fl__err(FL_EINVAL, "fl_coll_create: endpoints[%d] is NULL", i);
        if (fl_net_parse_endpoint(o->endpoints[i], host, sizeof host, &port, i == o->rank && o->listener) != FL_OK)
            return fl__err(FL_EINVAL, "fl_coll_create: endpoints[%d]: %s", i, fl_last_error());
        for (int j = 0; j < i; j++)
            if (!strcmp(o->endpoints[i], o->endpoints[j]))
                return fl__err(FL_EINVAL, "fl_coll_create: endpoints[%d] and endpoints[%d] are both '%s'", j, i,
                               o->endpoints[i]);
    }
    if (o->secret && (o->secret->len < FL_NET_SECRET_MIN || o->secret->len > FL_NET_SECRET_MAX))
        return fl__err(FL_EINVAL, "fl_coll_create: secret->len %zu out of range [%d, %d]", o->secret->len,
                       FL_NET_SECRET_MIN, FL_NET_SECRET_MAX);
    if (!o->secret && !o->insecure_local)
        return fl__err(FL_EINVAL, "fl_coll_create: no job secret (pass opts->secret, e.g. loaded from "
                                  "FLEET_JOB_SECRET with fl_net_secret_from_env, or set insecure_local for a "
                                  "loopback-only test job)");
    if (o->chunk_bytes && (o->chunk_bytes < 4096 || o->chunk_bytes > (64u << 20)))
        return fl__err(FL_EINVAL, "fl_coll_create: chunk_bytes %zu out of range [4096, 64 MiB]", o->chunk_bytes);
    if (o->small_max_bytes > (64u << 20))
        return fl__err(FL_EINVAL, "fl_coll_create: small_max_bytes %zu is above 64 MiB", o->small_max_bytes);
    return FL_OK;
}

/* 1 if this host seems to have a core for every rank that runs on it. */
static int enough_cores(const fl_coll_opts *o)
{
    char mine[FL_NET_HOST_MAX], h[FL_NET_HOST_MAX];
    int port, local = 0;
    if (o->world_size == 1) return 1;
    if (fl_net_parse_endpoint(o->endpoints[o->rank], mine, sizeof mine, &port, 1)) return 0;
    for (int i = 0; i < o->world_size; i++)
        if (fl_net_parse_endpoint(o->endpoints[i], h, sizeof h, &port, 1) == FL_OK && !strcmp(h, mine)) local++;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    return ncpu > 0 && local <= ncpu;
}

/* ---- rendezvous ------------------------------------------------------------------------------ */

static int set_peer(fl_coll *c, int p, fl_net_conn *conn)
{
    char label[FL_NET_LABEL_MAX];
    snprintf(label, sizeof label, "rank %d (%s)", p, c->endpoints[p]);
    fl_net_conn_set_label(conn, label);
    if (c->spin) fl_net_conn_set_spin(conn, 50);
    c->conns[p] = conn;
    return FL_OK;
}

static int connect_lower(fl_coll *c, const fl_net_auth *auth, uint64_t dl)
{
    for (int p = 0; p < c->rank; p++) {
        char host[FL_NET_HOST_MAX];
        int port;
        FL_CHECK(fl_net_parse_endpoint(c->endpoints[p], host, sizeof host, &port, 0));
        fl_net_conn *conn;
        int st = fl_net_connect(host, port, auth, dl, &conn);
        if (st)
            return fl__err(st, "rendezvous of rank %d: cannot join rank %d (%s): %s", c->rank, p, c->endpoints[p],
                           fl_last_error());
        if (fl_net_conn_peer_rank(conn) != p || fl_net_conn_peer_role(conn) != ROLE_COLL) {
            st = fl__err(FL_EPROTO,
                         "rendezvous of rank %d: endpoint %s answered as rank %d of another job or role, "
                         "expected rank %d (are two jobs sharing ports?)",
                         c->rank, c->endpoints[p], fl_net_conn_peer_rank(conn), p);
            fl_net_conn_free(conn);
            return st;
        }
        set_peer(c, p, conn);
    }
    return FL_OK;
}

/* Waits for every higher rank to connect.  The handshakes run concurrently in an acceptor
 * (fleet/net.h): connections that never authenticate cannot keep a rank out. */
static int accept_higher(fl_coll *c, fl_net_listener *l, const fl_net_auth *auth, uint64_t dl, uint64_t t0)
{
    int missing = c->size - 1 - c->rank, claimed = 0, st = FL_OK;
    if (missing == 0) return FL_OK;
    char note[512] = "";
    fl_net_acceptor *a;
    FL_CHECK(fl_net_acceptor_create(l, auth, NULL, &a));
    uint64_t logged = 0;
    while (missing > 0) {
        fl_net_conn *conn = NULL;
        st = fl_net_acceptor_wait(a, dl, &conn);
        fl_net_acceptor_stats as;
        fl_net_acceptor_get_stats(a, &as);
        if (as.refused + as.timed_out > logged) { /* a peer that failed to authenticate is worth a line */
            logged = as.refused + as.timed_out;
            snprintf(note, sizeof note, "%s", fl_net_acceptor_last_refusal(a));
            FL_WARN(FL_SUB_COLL, "rendezvous of rank %d: refused a connection: %s", c->rank, note);
        }
        if (st == FL_ETIMEDOUT) {
            char who[512] = "";
            size_t o = 0;
            for (int p = c->rank + 1; p < c->size && o < sizeof who - 64; p++)
                if (!c->conns[p])
                    o += (size_t)snprintf(who + o, sizeof who - o, "%s%d (%s)", o ? ", " : "", p, c->endpoints[p]);
            st = fl__err(FL_ETIMEDOUT, "rendezvous of rank %d timed out after %.0f ms: rank %s did not connect%s%s%s",
                         c->rank, (double)(fl__now_ns() - t0) / 1e6, who, note[0] ? "; refused a connection: " : "", note,
                         logged + (uint64_t)claimed > 1 ? " (and others)" : "");
        }
        if (st) break;
        int p = fl_net_conn_peer_rank(conn);
        if (fl_net_conn_peer_role(conn) != ROLE_COLL || p <= c->rank || p >= c->size || c->conns[p]) {
            claimed++;
            snprintf(note, sizeof note, "%s claimed to be rank %d, which is not expected here", fl_net_conn_addr(conn), p);
            FL_WARN(FL_SUB_COLL, "rendezvous of rank %d: refused a connection: %s", c->rank, note);
            fl_net_conn_free(conn);
            continue;
        }
        set_peer(c, p, conn);
        missing--;
    }
    fl_net_acceptor_free(a);
    return st;
}

/* Every rank sends one setup message to every other and checks theirs: same protocol, world
 * size, endpoints and tuning, and the same backend asked for (request: a hash of its name
 * or "auto", asked: the name).  usable_all gets the backends usable on every rank. */
static int exchange_hello(fl_coll *c, const fl_coll_opts *o, uint64_t request, const char *asked, uint32_t usable,
                          uint64_t dl, uint32_t *usable_all)
{
    uint8_t m[HELLO_BYTES] = {0}, r[HELLO_BYTES];
    uint64_t eh = endpoints_hash(o);
    fl__put_u32(m, SETUP_VERSION);
    fl__put_u32(m + 4, (uint32_t)c->size);
    fl__put_u32(m + 8, (uint32_t)c->rank);
    fl__put_u32(m + 12, usable);
    fl__put_u64(m + 16, eh);
    fl__put_u64(m + 24, c->small_max);
    fl__put_u64(m + 32, c->chunk);
    fl__put_u64(m + 40, request);
    for (int p = 0; p < c->size; p++)
        if (c->conns[p]) FL_CHECK(fl_net_send_frame(c->conns[p], SETUP_HELLO, 0, m, sizeof m, dl));
    *usable_all = usable;
    for (int p = 0; p < c->size; p++) {
        if (!c->conns[p]) continue;
        fl_net_frame f;
        int st = fl_net_recv_frame_header(c->conns[p], sizeof r, &f, dl);
        if (st == FL_OK && (f.type != SETUP_HELLO || f.len != sizeof r))
            st = fl__err(FL_EPROTO, "unexpected setup message type %u from %s", f.type, fl__coll_peer(c, p));
        if (st == FL_OK) st = fl_net_recv_all(c->conns[p], r, sizeof r, dl);
        if (st)
            return fl__err(st, "rendezvous of rank %d: setup with %s failed: %s", c->rank, fl__coll_peer(c, p),
                           fl_last_error());
        const char *what = NULL;
        if (fl__get_u32(r) != SETUP_VERSION) what = "protocol version";
        else if (fl__get_u32(r + 4) != (uint32_t)c->size) what = "world size";
        else if (fl__get_u32(r + 8) != (uint32_t)p) what = "rank";
        else if (fl__get_u64(r + 16) != eh) what = "endpoint list";
        else if (fl__get_u64(r + 24) != c->small_max) what = "small_max_bytes";
        else if (fl__get_u64(r + 32) != c->chunk) what = "chunk_bytes";
        if (what)
            return fl__err(FL_EINVAL,
                           "rendezvous of rank %d: %s disagrees on the %s (world size %u here %d; every "
                           "rank must pass the same endpoints and tuning)",
                           c->rank, fl__coll_peer(c, p), what, fl__get_u32(r + 4), c->size);
        if (fl__get_u64(r + 40) != request)
            return fl__err(FL_EINVAL,
                           "rendezvous of rank %d: %s asked for another collective backend or allreduce dtype "
                           "than this rank ('%s'); every rank must set the same fl_coll_opts.backend or "
                           "FLEET_COLL_BACKEND, and allreduce_dtype or FLEET_COLL_ALLREDUCE_DTYPE",
                           c->rank, fl__coll_peer(c, p), asked);
        *usable_all &= fl__get_u32(r + 12);
    }
    return FL_OK;
}

/* opts->allreduce_dtype, else FLEET_COLL_ALLREDUCE_DTYPE, else float32. */
static int parse_ar_dtype(const fl_coll_opts *o, fl_dtype *out)
{
    const char *v = o->allreduce_dtype, *src = "fl_coll_opts.allreduce_dtype";
    if (!v || !*v) {
        FL_CHECK(fl__env_str("FLEET_COLL_ALLREDUCE_DTYPE", "float32", &v));
        src = "FLEET_COLL_ALLREDUCE_DTYPE";
    }
    static const struct {
        const char *name;
        fl_dtype dt;
    } names[] = {{"float32", FL_FLOAT32}, {"fp32", FL_FLOAT32},  {"bfloat16", FL_BFLOAT16},
                 {"bf16", FL_BFLOAT16},   {"float16", FL_FLOAT16}, {"fp16", FL_FLOAT16}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(v, names[i].name)) {
            *out = names[i].dt;
            return FL_OK;
        }
    return fl__err(FL_EINVAL, "%s = '%s' is invalid: expected float32, bfloat16 (bf16) or float16 (fp16)", src, v);
}

uint64_t fl_coll_bytes_sent(const fl_coll *c)
{
    if (!c || c->magic != FL_COLL_MAGIC) {
        fl__err_handle(c, "fl_coll_bytes_sent: communicator is NULL or invalid");
        return 0;
    }
    return atomic_load(&((fl_coll *)c)->bytes_sent);
}

fl_dtype fl_coll_allreduce_dtype(const fl_coll *c)
{
    if (!c || c->magic != FL_COLL_MAGIC) {
        fl__err_handle(c, "fl_coll_allreduce_dtype: communicator is NULL or invalid");
        return FL_FLOAT32;
    }
    return c->ar_dtype;
}

int fl_coll_create(const fl_coll_opts *o, fl_coll **out)
{
    if (!out) return fl__err(FL_EINVAL, "fl_coll_create: out is NULL");
    *out = NULL;
    if (!o) return fl__err(FL_EINVAL, "fl_coll_create: opts is NULL");
    FL_CHECK(check_opts(o));
    int64_t tmo = o->timeout_ms;
    if (tmo == 0) FL_CHECK(fl__env_int("FLEET_COLL_TIMEOUT_MS", FL_COLL_DEFAULT_TIMEOUT_MS, 1, 86400000, &tmo));

    int st = FL_OK;
    fl_net_listener *own = NULL;
    fl_coll *c = calloc(1, sizeof *c);
    if (!c) return fl__err(FL_ENOMEM, "fl_coll_create: out of memory");
    c->magic = FL_COLL_MAGIC;
    c->rank = o->rank;
    c->size = o->world_size;
    c->timeout_ms = (int)tmo;
    c->small_max = o->small_max_bytes ? o->small_max_bytes : FL_COLL_DEFAULT_SMALL_MAX;
    c->chunk = o->chunk_bytes ? (o->chunk_bytes + 4095) / 4096 * 4096 : FL_COLL_DEFAULT_CHUNK;
    c->spin = enough_cores(o);
    size_t P = (size_t)c->size;
    c->endpoints = calloc(P, sizeof *c->endpoints);
    c->conns = calloc(P, sizeof *c->conns);
    c->tx_mid = calloc(P, sizeof *c->tx_mid);
    c->idle_blocked = calloc(P, sizeof *c->idle_blocked);
    c->peer_closed = calloc(P, sizeof *c->peer_closed);
    c->xf = calloc(P, sizeof *c->xf);
    if (!c->endpoints || !c->conns || !c->tx_mid || !c->idle_blocked || !c->peer_closed || !c->xf) {
        st = fl__err(FL_ENOMEM, "fl_coll_create: out of memory");
        goto fail;
    }
    for (int i = 0; o->endpoints && i < c->size; i++)
        if (!(c->endpoints[i] = fl__strdup(o->endpoints[i]))) {
            st = fl__err(FL_ENOMEM, "fl_coll_create: out of memory");
            goto fail;
        }
    /* the backend: named (checked here, before any connection) or automatic */
    const fl__coll_backend *named = NULL;
    uint32_t usable = 0;
    uint64_t request = 0;
    FL_CHECK_GOTO(fl__coll_backend_pick(c, o, &named, &usable, &request), st, fail);
    FL_CHECK_GOTO(parse_ar_dtype(o, &c->ar_dtype), st, fail);
    request ^= (uint64_t)c->ar_dtype * 0x9e3779b97f4a7c15ull; /* every rank: the same wire dtype */
    FL_CHECK_GOTO(fl__coll_hb_init(c, o), st, fail);
    if (c->size > 1) {
        uint64_t t0 = fl__now_ns(), dl = fl_net_deadline(tmo);
        char who[64];
        snprintf(who, sizeof who, "collective rank %d of %d (a connection per peer)", c->rank, c->size);
        c->nofile = c->size - 1;
        fl__nofile_hold(c->nofile, who);
        fl_net_listener *l = o->listener;
        if (!l) {
            char host[FL_NET_HOST_MAX];
            int port;
            FL_CHECK_GOTO(fl_net_parse_endpoint(c->endpoints[c->rank], host, sizeof host, &port, 0), st, fail);
            st = fl_net_listen(host, port, &own);
            if (st) {
                st = fl__err(st, "fl_coll_create: rank %d cannot listen on its endpoint %s: %s", c->rank,
                             c->endpoints[c->rank], fl_last_error());
                goto fail;
            }
            l = own;
        }
        fl_net_auth auth = {o->secret ? o->secret->bytes : NULL,
                            o->secret ? o->secret->len : 0,
                            o->insecure_local,
                            FL_NET_SERVICE_COLL,
                            ROLE_COLL,
                            c->rank};
        FL_CHECK_GOTO(connect_lower(c, &auth, dl), st, fail);
        FL_CHECK_GOTO(accept_higher(c, l, &auth, dl, t0), st, fail);
        fl_net_listener_free(own);
        own = NULL;
        uint32_t usable_all = 0;
        FL_CHECK_GOTO(exchange_hello(c, o, request, named ? named->name : "auto", usable, dl, &usable_all), st, fail);
        FL_CHECK_GOTO(fl__coll_backend_setup(c, named, usable_all, dl), st, fail);
        FL_CHECK_GOTO(fl__coll_hb_start(c), st, fail);
        FL_INFO(FL_SUB_COLL, "rank %d of %d joined in %.1f ms (backend %s%s)", c->rank, c->size,
                (double)(fl__now_ns() - t0) / 1e6, c->backend->name, named ? ", named" : "");
    }
    *out = c;
    return FL_OK;
fail:
    fl_net_listener_free(own);
    {
        char msg[FL_COLL_MSG_MAX];
        snprintf(msg, sizeof msg, "%s", fl_last_error());
        fl_coll_free(c);
        return fl__err(st, "%s", msg);
    }
}

/* Reads and drops what a peer sent and nobody read (heartbeats, mostly): closing a socket
 * with unread data sends a reset instead of an orderly end, and a reset can make the
 * peer's kernel drop our last messages (an abort notice) before the peer reads them. */
static void drain(fl_net_conn *conn)
{
    uint8_t sink[4096];
    for (int i = 0; i < 256; i++) {
        size_t k = 0;
        if (fl_net_try_recv(conn, sink, sizeof sink, &k) != FL_OK || k == 0) break;
    }
    fl_clear_error();
}

void fl_coll_free(fl_coll *c)
{
    if (!c || c->magic != FL_COLL_MAGIC) return;
    c->magic = 0;
    fl__coll_hb_stop(c);
    if (c->nofile) fl__nofile_hold(-c->nofile, NULL);
    if (c->backend && c->backend->close) c->backend->close(c);
    for (int p = 0; p < c->size; p++) {
        if (c->conns && c->conns[p]) {
            drain(c->conns[p]);
            fl_net_conn_free(c->conns[p]);
        }
        if (c->endpoints) free(c->endpoints[p]);
    }
    free(c->endpoints);
    free(c->conns);
    free(c->tx_mid);
    free(c->idle_blocked);
    free(c->peer_closed);
    free(c->xf);
    fl__coll_hb_free(c);
    fl__free_aligned(c->scratch);
    free(c->cbuf);
    free(c);
}

int fl_coll_rank(const fl_coll *c)
{
    return c && c->magic == FL_COLL_MAGIC ? c->rank : fl__err_handle(c, "fl_coll_rank: communicator is NULL or invalid");
}
int fl_coll_size(const fl_coll *c)
{
    return c && c->magic == FL_COLL_MAGIC ? c->size : fl__err_handle(c, "fl_coll_size: communicator is NULL or invalid");
}
