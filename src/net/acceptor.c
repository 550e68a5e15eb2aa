/*
 * acceptor.c - the acceptor side of the handshake for every listener: connections are taken
 * from the listener at once and authenticated concurrently by a small state machine each
 * (send the greeting, read the proof, send the answer), driven without blocking by the
 * listener's owner through one epoll descriptor.  Unauthenticated connections are bounded
 * (in all and per source address), each has a deadline, and the oldest idle one is dropped
 * when a bound is hit, so idle or trickling peers cannot starve the real ones.  Also
 * fl_net_accept, the blocking form used by simple callers.  Contracts: fleet/net.h.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "net_internal.h"

#define ACC_MAGIC 0x464c4e41u /* "FLNA" */
#define ACCEPT_BATCH 8        /* connections taken from the listener per step */
#define FULL_PAUSE_MS 100     /* out of descriptors and nothing to drop: stop accepting this long */
#define EVENTS_BATCH 64
/* The per-source bound spares connections that arrived or spoke this recently: in a burst
 * from one address (a flood sharing a host with real peers) a real peer gets this long to
 * answer its greeting, and only the overall bound applies meanwhile. */
#define FRESH_NS 100000000ull

enum { HS_GREET, HS_PROOF, HS_FINISH };

typedef struct {
    fl_net_conn *c;
    int state;
    size_t off;      /* bytes of the current message moved */
    uint32_t events; /* what the descriptor is registered for */
    uint64_t t0, last_rx, deadline;
    uint8_t src[16]; /* source address (IPv4 as v4-mapped IPv6), for the per-source cap */
    uint8_t hs[FL__NET_HELLO_LEN], hc[FL__NET_HELLO_C_LEN], fin[FL__NET_FINISH_LEN];
} hs_conn;

struct fl_net_acceptor {
    uint32_t magic;
    fl_net_listener *l;
    int internal;     /* made by fl_net_accept, owned by the listener */
    fl_net_auth auth; /* auth.secret points at secret below */
    uint8_t secret[FL_NET_SECRET_MAX];
    int max_pending, max_per_source, hs_timeout_ms;
    int ep;        /* epoll: the listener and every pending connection */
    int listening; /* the listener is registered in ep */
    uint64_t paused_until;
    hs_conn *p; /* [max_pending], np in use */
    int np;
    fl_net_conn **ready; /* authenticated, FIFO from rhead */
    int nready, rhead, rcap;
    fl_net_acceptor_stats st;
    uint64_t refusals; /* refused + timed out, as a sequence number for fl_net_accept */
    int last_st;
    char last[FL_NET_LABEL_MAX + 256];
};

static void src_of(const struct sockaddr *sa, uint8_t out[16])
{
    memset(out, 0, 16);
    if (sa->sa_family == AF_INET) {
        out[10] = out[11] = 0xff;
        memcpy(out + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
    } else if (sa->sa_family == AF_INET6) {
        memcpy(out, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
    }
}

static int opts_resolve(const fl_net_acceptor_opts *in, fl_net_acceptor_opts *o)
{
    fl_net_acceptor_opts z = {0};
    *o = in ? *in : z;
    int64_t v;
    if (o->max_pending < 0 || o->max_per_source < 0 || o->handshake_timeout_ms < 0)
        return fl__err(FL_EINVAL,
                       "fl_net_acceptor_create: negative option (max_pending %d, max_per_source %d, "
                       "handshake_timeout_ms %d)",
                       o->max_pending, o->max_per_source, o->handshake_timeout_ms);
    if (!o->max_pending) {
        FL_CHECK(fl__env_int("FLEET_NET_MAX_PENDING", FL_NET_DEFAULT_MAX_PENDING, 1, 65536, &v));
        o->max_pending = (int)v;
    }
    if (!o->max_per_source) {
        FL_CHECK(fl__env_int("FLEET_NET_MAX_PENDING_PER_SOURCE", FL_NET_DEFAULT_MAX_PER_SOURCE, 1, 65536, &v));
        o->max_per_source = (int)v;
    }
    if (!o->handshake_timeout_ms) {
        FL_CHECK(fl__env_int("FLEET_NET_HANDSHAKE_TIMEOUT_MS", FL_NET_DEFAULT_HANDSHAKE_MS, 1, 3600000, &v));
        o->handshake_timeout_ms = (int)v;
    }
    if (o->max_per_source > o->max_pending) o->max_per_source = o->max_pending;
    return FL_OK;
}

static int create(fl_net_listener *l, const fl_net_auth *auth, const fl_net_acceptor_opts *opts, int internal,
                  fl_net_acceptor **out)
{
    fl_net_acceptor_opts o;
    FL_CHECK(opts_resolve(opts, &o));
    fl_net_acceptor *a = calloc(1, sizeof *a);
    if (!a) return fl__err(FL_ENOMEM, "acceptor on %s: out of memory", l->endpoint);
    a->magic = ACC_MAGIC;
    a->l = l;
    a->internal = internal;
    a->auth = *auth;
    if (auth->secret && auth->secret_len) {
        memcpy(a->secret, auth->secret, auth->secret_len);
        a->auth.secret = a->secret;
    }
    a->max_pending = o.max_pending;
    a->max_per_source = o.max_per_source;
    a->hs_timeout_ms = o.handshake_timeout_ms;
    a->p = calloc((size_t)o.max_pending, sizeof *a->p);
    a->ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = l->fd};
    if (!a->p || a->ep < 0 || epoll_ctl(a->ep, EPOLL_CTL_ADD, l->fd, &ev) != 0) {
        int st = !a->p ? fl__err(FL_ENOMEM, "acceptor on %s: out of memory", l->endpoint)
                       : fl__err(FL_EIO, "acceptor on %s: epoll: %s", l->endpoint, strerror(errno));
        if (a->ep >= 0) close(a->ep);
        free(a->p);
        free(a);
        return st;
    }
    a->listening = 1;
    *out = a;
    return FL_OK;
}

int fl_net_acceptor_create(fl_net_listener *l, const fl_net_auth *auth, const fl_net_acceptor_opts *opts,
                           fl_net_acceptor **out)
{
    if (!out) return fl__err(FL_EINVAL, "fl_net_acceptor_create: out is NULL");
    *out = NULL;
    if (!l || l->magic != FL_NET_LISTENER_MAGIC) return fl__err(FL_EINVAL, "fl_net_acceptor_create: invalid listener");
    FL_CHECK(fl__net_auth_check(auth, "fl_net_acceptor_create"));
    if (l->owned) return fl__err(FL_ESTATE, "fl_net_acceptor_create: listener %s already has an acceptor", l->endpoint);
    fl_net_acceptor_free(l->acc); /* the one fl_net_accept made, with its pending handshakes */
    l->acc = NULL;
    FL_CHECK(create(l, auth, opts, 0, out));
    l->owned = 1;
    return FL_OK;
}

void fl_net_acceptor_free(fl_net_acceptor *a)
{
    if (!a || a->magic != ACC_MAGIC) return;
    for (int i = 0; i < a->np; i++) fl_net_conn_free(a->p[i].c);
    for (int i = 0; i < a->nready; i++) fl_net_conn_free(a->ready[(a->rhead + i) % a->rcap]);
    if (!a->internal && a->l->magic == FL_NET_LISTENER_MAGIC) a->l->owned = 0;
    close(a->ep);
    free(a->p);
    free(a->ready);
    a->magic = 0;
    free(a);
}

int fl_net_acceptor_fd(const fl_net_acceptor *a)
{
    if (!a || a->magic != ACC_MAGIC) return fl__err(FL_EINVAL, "fl_net_acceptor_fd: acceptor is NULL or invalid");
    return a->ep;
}

void fl_net_acceptor_get_stats(const fl_net_acceptor *a, fl_net_acceptor_stats *out)
{
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (!a || a->magic != ACC_MAGIC) return;
    *out = a->st;
    out->pending = a->np;
    out->ready = a->nready;
}

const char *fl_net_acceptor_last_refusal(const fl_net_acceptor *a) { return a && a->magic == ACC_MAGIC ? a->last : ""; }

/* ---- the state machine ---------------------------------------------------------------------- */

/* Closes pending connection i and fills its place with the last one. */
static void drop(fl_net_acceptor *a, int i)
{
    fl_net_conn_free(a->p[i].c);
    a->p[i] = a->p[--a->np];
}

/* Records a failed handshake (message from fl_last_error()) and drops the connection. */
static void refuse(fl_net_acceptor *a, int i, int st)
{
    a->last_st = st;
    snprintf(a->last, sizeof a->last, "%s", fl_last_error());
    a->refusals++;
    if (st == FL_ETIMEDOUT) a->st.timed_out++;
    else a->st.refused++;
    FL_DEBUG(FL_SUB_NET, "listener %s: %s", a->l->endpoint, a->last);
    drop(a, i);
}

static void evict(fl_net_acceptor *a, int i, const char *why)
{
    FL_DEBUG(FL_SUB_NET, "listener %s: dropping the unauthenticated connection from %s (idle %.0f ms): %s", a->l->endpoint,
             a->p[i].c->addr, (double)(fl__now_ns() - a->p[i].last_rx) / 1e6, why);
    a->st.evicted++;
    drop(a, i);
}

static void want(fl_net_acceptor *a, hs_conn *h, uint32_t events)
{
    if (h->events == events) return;
    struct epoll_event ev = {.events = events, .data.fd = h->c->fd};
    if (epoll_ctl(a->ep, EPOLL_CTL_MOD, h->c->fd, &ev) == 0) h->events = events;
}

static int push_ready(fl_net_acceptor *a, fl_net_conn *c)
{
    if (a->nready == a->rcap) {
        int cap = a->rcap ? a->rcap * 2 : 8;
        fl_net_conn **q = malloc((size_t)cap * sizeof *q);
        if (!q) return fl__err(FL_ENOMEM, "listener %s: out of memory for an accepted connection", a->l->endpoint);
        for (int k = 0; k < a->nready; k++) q[k] = a->ready[(a->rhead + k) % a->rcap];
        free(a->ready);
        a->ready = q;
        a->rhead = 0;
        a->rcap = cap;
    }
    a->ready[(a->rhead + a->nready++) % a->rcap] = c;
    return FL_OK;
}

/* Moves connection i as far as its socket allows without waiting. */
static void advance(fl_net_acceptor *a, int i, uint64_t now)
{
    hs_conn *h = &a->p[i];
    for (;;) {
        if (h->state != HS_PROOF) {
            const uint8_t *buf = h->state == HS_GREET ? h->hs : h->fin;
            size_t len = h->state == HS_GREET ? sizeof h->hs : sizeof h->fin, k = 0;
            struct iovec iov = {(void *)(buf + h->off), len - h->off};
            if (fl_net_try_sendv(h->c, &iov, 1, &k) != FL_OK) {
                refuse(a, i,
                       fl__err(FL_EREMOTE,
                               "handshake with %s failed: the peer closed the connection before "
                               "reading our %s",
                               h->c->label, h->state == HS_GREET ? "greeting" : "answer"));
                return;
            }
            h->off += k;
            if (h->off < len) {
                want(a, h, EPOLLOUT);
                return;
            }
            if (h->state == HS_FINISH) { /* authenticated: the owner takes it from here */
                epoll_ctl(a->ep, EPOLL_CTL_DEL, h->c->fd, NULL);
                if (push_ready(a, h->c) != FL_OK) {
                    refuse(a, i, FL_ENOMEM);
                    return;
                }
                a->st.authenticated++;
                FL_DEBUG(FL_SUB_NET, "accepted %s (rank %d, service %u) after %.2f ms", h->c->label, h->c->peer_rank,
                         h->c->peer_service, (double)(now - h->t0) / 1e6);
                a->p[i] = a->p[--a->np];
                return;
            }
            h->state = HS_PROOF;
            h->off = 0;
            want(a, h, EPOLLIN);
            continue;
        }
        size_t k = 0;
        if (fl_net_try_recv(h->c, h->hc + h->off, sizeof h->hc - h->off, &k) != FL_OK) {
            refuse(a, i,
                   fl__err(FL_EREMOTE,
                           "handshake with %s failed: the peer closed the connection before sending "
                           "its proof (got %zu of %zu bytes; it may have refused our credentials or "
                           "service)",
                           h->c->label, h->off, sizeof h->hc));
            return;
        }
        if (!k) return;
        h->off += k;
        h->last_rx = now;
        if (h->off < sizeof h->hc) continue;
        int send_fin = 0, st = fl__net_hs_check_proof(h->c, &a->auth, h->hs, h->hc, h->fin, &send_fin);
        if (st) {
            if (send_fin) { /* one try: the answer fits any socket buffer that saw no data from us yet */
                size_t sent;
                struct iovec iov = {h->fin, sizeof h->fin};
                char msg[sizeof a->last];
                snprintf(msg, sizeof msg, "%s", fl_last_error());
                fl_net_try_sendv(h->c, &iov, 1, &sent);
                fl__err(st, "%s", msg);
            }
            refuse(a, i, st);
            return;
        }
        h->state = HS_FINISH;
        h->off = 0;
    }
}

/* Index of the pending connection with the oldest last byte received, among those from
 * src (NULL: all). */
static int oldest_idle(const fl_net_acceptor *a, const uint8_t *src)
{
    int best = -1;
    for (int i = 0; i < a->np; i++)
        if ((!src || !memcmp(a->p[i].src, src, 16)) && (best < 0 || a->p[i].last_rx < a->p[best].last_rx)) best = i;
    return best;
}

static void pause_listener(fl_net_acceptor *a, uint64_t now, int e)
{
    epoll_ctl(a->ep, EPOLL_CTL_DEL, a->l->fd, NULL);
    a->listening = 0;
    a->paused_until = now + FULL_PAUSE_MS * 1000000ull;
    FL_WARN(FL_SUB_NET, "listener %s: cannot accept (%s); pausing for %d ms", a->l->endpoint, strerror(e), FULL_PAUSE_MS);
}

static void accept_some(fl_net_acceptor *a, uint64_t now)
{
    for (int k = 0; k < ACCEPT_BATCH && a->listening; k++) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        int fd = accept4(a->l->fd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            int e = errno;
            if (e == EINTR || e == ECONNABORTED) continue;
            if (e == EAGAIN || e == EWOULDBLOCK) return;
            if ((e == EMFILE || e == ENFILE) && a->np > 0) {
                evict(a, oldest_idle(a, NULL), "out of file descriptors");
                continue;
            }
            pause_listener(a, now, e);
            return;
        }
        a->st.accepted++;
        fl_net_conn *c;
        if (fl__net_conn_wrap(fd, (struct sockaddr *)&ss, &c) != FL_OK) continue;
        if ((!a->auth.secret || !a->auth.secret_len) && !c->loopback) {
            a->last_st = fl__err(FL_EPROTO,
                                 "refusing connection from %s: insecure local mode (no job secret) accepts "
                                 "loopback peers only",
                                 c->addr);
            snprintf(a->last, sizeof a->last, "%s", fl_last_error());
            a->refusals++;
            a->st.refused++;
            fl_net_conn_free(c);
            continue;
        }
        uint8_t src[16];
        src_of((struct sockaddr *)&ss, src);
        int same = 0;
        for (int i = 0; i < a->np; i++) same += !memcmp(a->p[i].src, src, 16);
        if (same >= a->max_per_source) { /* unless all of them spoke or arrived just now: a burst */
            int v = oldest_idle(a, src);
            if (now - a->p[v].last_rx >= FRESH_NS) evict(a, v, "too many pending connections from its address");
        }
        if (a->np >= a->max_pending) evict(a, oldest_idle(a, NULL), "too many pending connections");
        hs_conn *h = &a->p[a->np];
        memset(h, 0, sizeof *h);
        h->c = c;
        h->state = HS_GREET;
        h->t0 = h->last_rx = now;
        h->deadline = now + (uint64_t)a->hs_timeout_ms * 1000000ull;
        memcpy(h->src, src, 16);
        struct epoll_event ev = {.events = EPOLLIN, .data.fd = c->fd};
        if (fl__net_hs_greeting(&a->auth, h->hs) != FL_OK || epoll_ctl(a->ep, EPOLL_CTL_ADD, c->fd, &ev) != 0) {
            fl_net_conn_free(c);
            continue;
        }
        h->events = EPOLLIN;
        a->np++;
        advance(a, a->np - 1, now);
    }
}

int fl_net_acceptor_step(fl_net_acceptor *a)
{
    if (!a || a->magic != ACC_MAGIC) return fl__err(FL_EINVAL, "fl_net_acceptor_step: invalid acceptor");
    uint64_t now = fl__now_ns();
    struct epoll_event ev[EVENTS_BATCH];
    int n = epoll_wait(a->ep, ev, EVENTS_BATCH, 0), listen_ready = 0;
    if (n < 0 && errno != EINTR) return fl__err(FL_EIO, "listener %s: epoll_wait: %s", a->l->endpoint, strerror(errno));
    /* connections first: a peer that answered is served before new ones are let in */
    for (int k = 0; k < n; k++) {
        if (ev[k].data.fd == a->l->fd) {
            listen_ready = 1;
            continue;
        }
        for (int i = 0; i < a->np; i++)
            if (a->p[i].c->fd == ev[k].data.fd) {
                advance(a, i, now);
                break;
            }
    }
    for (int i = 0; i < a->np;) {
        hs_conn *h = &a->p[i];
        if (h->deadline > now) {
            i++;
            continue;
        }
        refuse(a, i,
               fl__err(FL_ETIMEDOUT,
                       "handshake with %s timed out waiting for its proof after %d ms (got %zu of "
                       "%zu bytes; the peer is silent: not a Fleet process, or stalled)",
                       h->c->label, a->hs_timeout_ms, h->state == HS_PROOF ? h->off : 0, sizeof h->hc));
    }
    if (!a->listening && now >= a->paused_until) {
        struct epoll_event lev = {.events = EPOLLIN, .data.fd = a->l->fd};
        if (epoll_ctl(a->ep, EPOLL_CTL_ADD, a->l->fd, &lev) == 0) a->listening = listen_ready = 1;
    }
    if (listen_ready) accept_some(a, now);
    return FL_OK;
}

int fl_net_acceptor_timeout_ms(const fl_net_acceptor *a)
{
    if (!a || a->magic != ACC_MAGIC) return fl__err(FL_EINVAL, "fl_net_acceptor_timeout_ms: acceptor is NULL or invalid");
    if (a->nready) return 0;
    uint64_t next = a->listening ? UINT64_MAX : a->paused_until;
    for (int i = 0; i < a->np; i++)
        if (a->p[i].deadline < next) next = a->p[i].deadline;
    if (next == UINT64_MAX) return -1;
    uint64_t now = fl__now_ns();
    if (next <= now) return 0;
    uint64_t ms = (next - now + 999999) / 1000000;
    return ms > 3600000 ? 3600000 : (int)ms;
}

int fl_net_acceptor_next(fl_net_acceptor *a, fl_net_conn **out)
{
    if (!out) return fl__err(FL_EINVAL, "fl_net_acceptor_next: out is NULL");
    *out = NULL;
    if (!a || a->magic != ACC_MAGIC) return fl__err(FL_EINVAL, "fl_net_acceptor_next: invalid acceptor");
    if (!a->nready) return FL_OK;
    *out = a->ready[a->rhead];
    a->rhead = (a->rhead + 1) % a->rcap;
    a->nready--;
    return FL_OK;
}

#define WAIT_SLICE_MS 1000 /* a blocking accept wakes this often to see whether it was stopped */

/* Sleeps in poll on the acceptor until it has work, its next deadline, or *deadline_ns, in
 * slices of WAIT_SLICE_MS: a slice that ends late means this process did not run, and
 * *deadline_ns moves by as much (liveness.h: the per-request deadline). */
static int wait_some(fl_net_acceptor *a, uint64_t *deadline_ns)
{
    uint64_t now = fl__now_ns();
    if (now >= *deadline_ns) return FL_OK;
    uint64_t left = (*deadline_ns - now + 999999) / 1000000;
    int t = fl_net_acceptor_timeout_ms(a);
    if (t < 0 || (uint64_t)t > left) t = left > WAIT_SLICE_MS ? WAIT_SLICE_MS : (int)left;
    if (t > WAIT_SLICE_MS) t = WAIT_SLICE_MS;
    struct pollfd pf = {.fd = a->ep, .events = POLLIN};
    if (poll(&pf, 1, t) < 0 && errno != EINTR) return fl__err(FL_EIO, "poll failed: %s", strerror(errno));
    fl__live_deadline_after(deadline_ns, now + (uint64_t)t * 1000000ull, fl__now_ns());
    return FL_OK;
}

int fl_net_acceptor_wait(fl_net_acceptor *a, uint64_t deadline_ns, fl_net_conn **out)
{
    if (!out) return fl__err(FL_EINVAL, "fl_net_acceptor_wait: out is NULL");
    *out = NULL;
    if (!a || a->magic != ACC_MAGIC) return fl__err(FL_EINVAL, "fl_net_acceptor_wait: invalid acceptor");
    uint64_t t0 = fl__now_ns();
    for (;;) {
        FL_CHECK(fl_net_acceptor_step(a));
        FL_CHECK(fl_net_acceptor_next(a, out));
        if (*out) return FL_OK;
        if (fl__now_ns() >= deadline_ns)
            return fl__err(FL_ETIMEDOUT,
                           "accept on %s timed out after %.0f ms: no peer completed the handshake "
                           "(%d pending%s%s)",
                           a->l->endpoint, (double)(fl__now_ns() - t0) / 1e6, a->np, a->last[0] ? "; last refused: " : "",
                           a->last);
        FL_CHECK(wait_some(a, &deadline_ns));
    }
}

/* ---- the blocking form -------------------------------------------------------------------------- */

static int same_auth(const fl_net_acceptor *a, const fl_net_auth *b)
{
    size_t bl = b->secret ? b->secret_len : 0, al = a->auth.secret ? a->auth.secret_len : 0;
    return a->auth.service == b->service && a->auth.role == b->role && a->auth.rank == b->rank &&
           a->auth.insecure_local == b->insecure_local && al == bl && (!bl || !memcmp(a->secret, b->secret, bl));
}

int fl_net_accept(fl_net_listener *l, const fl_net_auth *auth, uint64_t deadline_ns, fl_net_conn **out)
{
    if (!out) return fl__err(FL_EINVAL, "fl_net_accept: out is NULL");
    *out = NULL;
    if (!l || l->magic != FL_NET_LISTENER_MAGIC) return fl__err(FL_EINVAL, "fl_net_accept: invalid listener");
    FL_CHECK(fl__net_auth_check(auth, "fl_net_accept"));
    if (l->owned)
        return fl__err(FL_ESTATE, "fl_net_accept: an acceptor serves listener %s; use fl_net_acceptor_wait", l->endpoint);
    if (l->acc && !same_auth(l->acc, auth)) {
        fl_net_acceptor_free(l->acc);
        l->acc = NULL;
    }
    if (!l->acc) FL_CHECK(create(l, auth, NULL, 1, &l->acc));
    fl_net_acceptor *a = l->acc;
    uint64_t seq = a->refusals, t0 = fl__now_ns();
    for (;;) {
        FL_CHECK(fl_net_acceptor_step(a));
        FL_CHECK(fl_net_acceptor_next(a, out));
        if (*out) return FL_OK;
        if (a->refusals != seq) return fl__err(a->last_st, "%s", a->last);
        if (fl__now_ns() >= deadline_ns) {
            if (!a->np)
                return fl__err(FL_ETIMEDOUT, "accept on %s timed out after %.0f ms: no peer connected", l->endpoint,
                               (double)(fl__now_ns() - t0) / 1e6);
            /* as a blocking call, the handshakes it started end with it */
            while (a->np) {
                hs_conn *h = &a->p[0];
                refuse(a, 0,
                       fl__err(FL_ETIMEDOUT,
                               "handshake with %s timed out waiting for its proof (got %zu of %zu "
                               "bytes in %.0f ms; the peer is silent: not a Fleet process, or "
                               "stalled)",
                               h->c->label, h->state == HS_PROOF ? h->off : 0, sizeof h->hc,
                               (double)(fl__now_ns() - h->t0) / 1e6));
            }
            return fl__err(FL_ETIMEDOUT, "%s", a->last);
        }
        FL_CHECK(wait_some(a, &deadline_ns));
    }
}
