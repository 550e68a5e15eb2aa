/*
 * role_rdzv.c - the rendezvous that tells every rank of a multi-node torchrun job where the
 * others listen, when nothing in the environment says so (role_torchrun.c, rule 3).
 *
 * Rank 0 listens on MASTER_ADDR:port.  Every other rank connects through the authenticated
 * transport (fleet/net.h: job secret, service COLL, role tag "RDZV", its rank), binds port 0
 * of the local address of that connection (the interface that reaches rank 0, so the others
 * reach it the same way) to pick a free port, and sends
 *   HELLO  "WORLD_SIZE host:port"
 * Rank 0 picks its own port on MASTER_ADDR the same way, waits for one HELLO from every rank
 * and answers each with
 *   LIST   "ep0,ep1,...": every rank's endpoint in rank order.
 * Every wait shares one deadline (FLEET_RENDEZVOUS_TIMEOUT_MS); errors name the peer.  The
 * deadline follows the stopped-self rule of src/net/liveness.h: time this process did not
 * run (SIGSTOP, a starved machine) is added to it, so a rank that was itself stopped does
 * not blame the others.
 *
 * Each such listener stays open until the rank has the list, so that no two ranks of a host
 * are handed the same port (a port closed at once goes back to the kernel, which gives it to
 * the next rank that binds port 0: 64 ranks on one host met that every time), and is closed
 * then; the collective communicator binds the port again when it starts.  A peer that
 * connects in between is reset when the listener closes and retries (fl_net_connect), and a
 * closed port is refused and retried.  Another process could take the port in between; the
 * communicator then fails, naming the endpoint.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "../net/net_internal.h"
#include "role_internal.h"

#define RDZV_ROLE 0x52445a56u /* "RDZV" */
#define RDZV_HELLO 0x5201
#define RDZV_LIST 0x5202
#define RDZV_EP_MAX (FL_NET_HOST_MAX + 8)

static fl_net_auth auth_for(const fl_net_secret *s, int rank)
{
    fl_net_auth a;
    memset(&a, 0, sizeof a);
    a.secret = s->bytes;
    a.secret_len = s->len;
    a.service = FL_NET_SERVICE_COLL;
    a.role = RDZV_ROLE;
    a.rank = rank;
    return a;
}

/* Receives one frame of `type` (at most max bytes) as a NUL-terminated string. */
static int recv_text(fl_net_conn *c, uint16_t type, uint64_t max, uint64_t dl, char **out)
{
    *out = NULL;
    fl_net_frame h;
    FL_CHECK(fl_net_recv_frame_header(c, max, &h, dl));
    if (h.type != type)
        return fl__err(FL_EPROTO, "rendezvous: %s sent a message of type %u, expected %u", fl_net_conn_label(c), h.type,
                       type);
    char *b = malloc(h.len + 1);
    if (!b) return fl__err(FL_ENOMEM, "rendezvous: out of memory");
    int st = fl_net_recv_all(c, b, h.len, dl);
    if (st == FL_OK && memchr(b, 0, h.len))
        st = fl__err(FL_EPROTO, "rendezvous: %s sent a malformed message", fl_net_conn_label(c));
    if (st != FL_OK) {
        free(b);
        return st;
    }
    b[h.len] = 0;
    *out = b;
    return FL_OK;
}

/* The numeric address of this side of c ("10.0.0.3", "[fe80::1]" style for IPv6 without brackets). */
static int local_host(fl_net_conn *c, char *out, size_t cap, int *v6)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getsockname(fl_net_conn_fd(c), (struct sockaddr *)&ss, &sl) != 0)
        return fl__err(FL_EIO, "rendezvous: cannot read the local address of the connection to %s", fl_net_conn_label(c));
    *v6 = ss.ss_family == AF_INET6;
    const void *a = *v6 ? (const void *)&((struct sockaddr_in6 *)&ss)->sin6_addr
                        : (const void *)&((struct sockaddr_in *)&ss)->sin_addr;
    if (!inet_ntop(ss.ss_family, a, out, (socklen_t)cap))
        return fl__err(FL_EIO, "rendezvous: cannot format the local address");
    return FL_OK;
}

static int join(int rank, int world, const char *host, int port, const fl_net_auth *a, uint64_t dl, fl__live_clock *live,
                char **list, char *mine, size_t mine_cap)
{
    fl_net_conn *c = NULL;
    fl_net_listener *l = NULL;
    char *text = NULL;
    int st = fl_net_connect(host, port, a, dl, &c);
    if (st != FL_OK)
        return fl__err(st, "rendezvous: rank %d cannot reach rank 0 at %s:%d (MASTER_ADDR, FLEET_RENDEZVOUS_PORT): %s",
                       rank, host, port, fl_last_error());
    char label[FL_NET_HOST_MAX + 32], me[INET6_ADDRSTRLEN + 2], msg[RDZV_EP_MAX + 16];
    snprintf(label, sizeof label, "rank 0 (%s:%d)", host, port);
    fl_net_conn_set_label(c, label);
    fl__net_conn_set_watch(c, fl__live_watch_self, live);
    int v6 = 0;
    FL_CHECK_GOTO(local_host(c, me + 1, sizeof me - 2, &v6), st, out);
    FL_CHECK_GOTO(fl_net_listen(me + 1, 0, &l), st, out);
    if (v6) me[0] = '[', strcat(me, "]");
    snprintf(mine, mine_cap, "%s:%d", v6 ? me : me + 1, fl_net_listener_port(l));
    snprintf(msg, sizeof msg, "%d %s", world, mine);
    FL_CHECK_GOTO(fl_net_send_frame(c, RDZV_HELLO, 0, msg, strlen(msg), dl), st, out);
    FL_CHECK_GOTO(recv_text(c, RDZV_LIST, (uint64_t)world * RDZV_EP_MAX, dl, &text), st, out);
    *list = text;
    text = NULL;
out:
    free(text);
    fl_net_listener_free(l);
    fl_net_conn_free(c);
    return st;
}

/* Rank 0: collects every rank's HELLO, then answers all with the list. */
static int lead(int world, const char *host, int port, const fl_net_auth *a, uint64_t dl, fl__live_clock *live, char **list)
{
    fl_net_listener *rl = NULL, *own = NULL;
    fl_net_conn **conns = calloc((size_t)world, sizeof *conns);
    char **eps = calloc((size_t)world, sizeof *eps);
    int st = FL_OK, got = 1;
    fl_buf b = {0};
    if (!conns || !eps) {
        st = fl__err(FL_ENOMEM, "rendezvous: out of memory");
        goto out;
    }
    fl__nofile_want((uint64_t)world + 64, "rendezvous rank 0 (a connection per rank)");
    st = fl_net_listen(host, port, &rl);
    if (st != FL_OK) {
        st = fl__err(st,
                     "rendezvous: rank 0 cannot listen on MASTER_ADDR:%d (%s): %s; MASTER_ADDR must be this host "
                     "and the port free (set FLEET_RENDEZVOUS_PORT)",
                     port, host, fl_last_error());
        goto out;
    }
    FL_CHECK_GOTO(fl_net_listen(host, 0, &own), st, out);
    if (!(eps[0] = fl__strdup(fl_net_listener_endpoint(own)))) {
        st = fl__err(FL_ENOMEM, "rendezvous: out of memory");
        goto out;
    }
    while (got < world) {
        fl_net_conn *c = NULL;
        st = fl_net_accept(rl, a, dl, &c);
        if (st == FL_ETIMEDOUT || (st != FL_OK && fl__now_ns() >= dl)) {
            fl_buf m = {0};
            for (int r = 1, k = 0; r < world && k < 8; r++)
                if (!eps[r]) fl__buf_printf(&m, "%s%d", k++ ? ", " : "", r);
            st = fl__err(FL_ETIMEDOUT,
                         "rendezvous: rank 0 (%s:%d) heard from %d of %d ranks before the deadline "
                         "(FLEET_RENDEZVOUS_TIMEOUT_MS); missing ranks: %s%s",
                         host, port, got, world, m.p ? m.p : "?", world - got > 8 ? ", ..." : "");
            fl__buf_free(&m);
            goto out;
        }
        if (st != FL_OK) { /* a stranger or a wrong secret: refused, keep waiting for the ranks */
            FL_WARN(FL_SUB_FLEET, "rendezvous: refused a connection: %s", fl_last_error());
            continue;
        }
        int r = fl_net_conn_peer_rank(c);
        char label[80], hbuf[FL_NET_HOST_MAX], *text = NULL;
        snprintf(label, sizeof label, "rank %d (%s)", r, fl_net_conn_addr(c));
        fl_net_conn_set_label(c, label);
        fl__net_conn_set_watch(c, fl__live_watch_self, live);
        if (fl_net_conn_peer_role(c) != RDZV_ROLE) { /* e.g. a late collective peer of an earlier job */
            FL_WARN(FL_SUB_FLEET, "rendezvous: refused %s: not a rendezvous connection", label);
            fl_net_conn_free(c);
            continue;
        }
        if (r < 1 || r >= world || eps[r]) {
            st = fl__err(FL_EPROTO, "rendezvous: %s: rank %d is %s", label, r,
                         r >= 1 && r < world ? "already taken (two processes "
                                               "with the same RANK)"
                                             : "out of range for WORLD_SIZE");
            fl_net_conn_free(c);
            goto out;
        }
        conns[r] = c;
        FL_CHECK_GOTO(recv_text(c, RDZV_HELLO, RDZV_EP_MAX + 16, dl, &text), st, out);
        int w = -1, n = 0;
        char *ep = NULL;
        if (sscanf(text, "%d %n", &w, &n) == 1) ep = text + n;
        if (w != world) st = fl__err(FL_EINVAL, "rendezvous: %s has WORLD_SIZE=%d but rank 0 has %d", label, w, world);
        else if (fl_net_parse_endpoint(ep, hbuf, sizeof hbuf, &n, 0) != FL_OK)
            st = fl__err(FL_EPROTO, "rendezvous: %s sent an invalid endpoint '%s'", label, ep);
        else if (!(eps[r] = fl__strdup(ep))) st = fl__err(FL_ENOMEM, "rendezvous: out of memory");
        free(text);
        if (st != FL_OK) goto out;
        got++;
    }
    for (int r = 0; r < world; r++) fl__buf_printf(&b, "%s%s", r ? "," : "", eps[r]);
    if (b.failed) {
        st = fl__err(FL_ENOMEM, "rendezvous: out of memory");
        goto out;
    }
    for (int r = 1; r < world && st == FL_OK; r++) st = fl_net_send_frame(conns[r], RDZV_LIST, 0, b.p, b.len, dl);
    if (st == FL_OK) {
        *list = b.p;
        b.p = NULL;
    }
out:
    fl__buf_free(&b);
    for (int r = 0; conns && r < world; r++) fl_net_conn_free(conns[r]);
    free(conns);
    fl__free_strv(eps, eps ? world : 0);
    fl_net_listener_free(own);
    fl_net_listener_free(rl);
    return st;
}

int fl__rdzv_endpoints(const char *host, int port, int rank, int world_size, const fl_net_secret *secret,
                       int64_t timeout_ms, char ***out)
{
    *out = NULL;
    uint64_t dl = fl_net_deadline(timeout_ms);
    fl_net_auth a = auth_for(secret, rank);
    char *list = NULL, mine[RDZV_EP_MAX] = "", who[48];
    fl__live_clock live;
    snprintf(who, sizeof who, "rendezvous: rank %d", rank);
    fl__live_clock_init(&live, FL_SUB_FLEET, who, NULL, 0);
    FL_CHECK(rank == 0 ? lead(world_size, host, port, &a, dl, &live, &list)
                       : join(rank, world_size, host, port, &a, dl, &live, &list, mine, sizeof mine));
    char **eps = NULL;
    int n = 0;
    int st = fl__parse_endpoints(list, "rendezvous: the endpoint list from rank 0", &eps, &n);
    if (st == FL_OK && n != world_size)
        st = fl__err(FL_EPROTO, "rendezvous: rank 0 sent %d endpoints for WORLD_SIZE=%d", n, world_size);
    else if (st == FL_OK && rank > 0 && strcmp(eps[rank], mine) != 0)
        st = fl__err(FL_EPROTO, "rendezvous: rank 0 lists '%s' for rank %d, which reported '%s'", eps[rank], rank, mine);
    free(list);
    if (st != FL_OK) {
        fl__free_strv(eps, n);
        return st;
    }
    FL_INFO(FL_SUB_FLEET, "rendezvous: rank %d of %d listens on %s", rank, world_size, eps[rank]);
    *out = eps;
    return FL_OK;
}
