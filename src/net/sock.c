/*
 * sock.c - TCP listeners and connections with deadlines: listen (bound to the given address
 * only), connect with retry and backoff (10 ms doubling, capped at 100 ms), accept, the wait
 * helper that retries EINTR, and the byte-stream calls built on it.  Every error names the
 * peer (its label) and the operation.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "net_internal.h"

/* The kernel's queue of connections not yet accepted (capped by net.core.somaxconn): long,
 * so a burst of connections does not drop the SYN of a real peer. */
#define LISTEN_BACKLOG 1024

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

uint64_t fl_net_deadline(int64_t timeout_ms)
{
    uint64_t now = fl__now_ns();
    if (timeout_ms <= 0) return now;
    if ((uint64_t)timeout_ms > (UINT64_MAX - now) / 1000000ull) return UINT64_MAX;
    return now + (uint64_t)timeout_ms * 1000000ull;
}

int fl__net_wait_fd(int fd, short events, uint64_t deadline_ns)
{
    for (;;) {
        uint64_t now = fl__now_ns();
        if (now >= deadline_ns) return FL_ETIMEDOUT;
        uint64_t left = deadline_ns - now;
        struct timespec ts = {(time_t)(left / 1000000000ull), (long)(left % 1000000000ull)};
        struct pollfd p = {.fd = fd, .events = events};
        int r = ppoll(&p, 1, &ts, NULL);
        if (r > 0) return FL_OK;
        if (r == 0) continue; /* loop re-checks the clock */
        if (errno == EINTR) continue;
        return fl__err(FL_EIO, "poll failed: %s", strerror(errno));
    }
}

void fl__net_format_addr(const struct sockaddr *sa, char *out, size_t cap)
{
    char ip[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &a->sin_addr, ip, sizeof ip);
        port = ntohs(a->sin_port);
        snprintf(out, cap, "%s:%d", ip, port);
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof ip);
        port = ntohs(a->sin6_port);
        snprintf(out, cap, "[%s]:%d", ip, port);
    } else {
        snprintf(out, cap, "(address family %d)", sa->sa_family);
    }
}

int fl__net_is_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)sa;
        return (ntohl(a->sin_addr.s_addr) >> 24) == 127;
    }
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)sa;
        if (IN6_IS_ADDR_LOOPBACK(&a->sin6_addr)) return 1;
        if (IN6_IS_ADDR_V4MAPPED(&a->sin6_addr)) return a->sin6_addr.s6_addr[12] == 127;
    }
    return 0;
}

int fl_net_parse_endpoint(const char *ep, char *host, size_t host_cap, int *port, int allow_zero)
{
    if (!ep || !host || !port || host_cap == 0)
        return fl__err(FL_EINVAL, "fl_net_parse_endpoint: ep, host or port is NULL");
    const char *colon, *hs = ep;
    size_t hl;
    if (ep[0] == '[') {
        const char *rb = strchr(ep, ']');
        if (!rb || rb[1] != ':') return fl__err(FL_EINVAL, "endpoint '%s' is malformed: expected [ipv6]:port", ep);
        hs = ep + 1;
        hl = (size_t)(rb - hs);
        colon = rb + 1;
    } else {
        colon = strrchr(ep, ':');
        if (!colon) return fl__err(FL_EINVAL, "endpoint '%s' is malformed: expected host:port", ep);
        hl = (size_t)(colon - ep);
    }
    if (hl == 0) return fl__err(FL_EINVAL, "endpoint '%s' has an empty host: expected host:port", ep);
    if (hl >= host_cap) return fl__err(FL_EINVAL, "endpoint '%s': host name is too long", ep);
    char *end;
    errno = 0;
    long p = strtol(colon + 1, &end, 10);
    if (colon[1] == 0 || *end || errno || p < (allow_zero ? 0 : 1) || p > 65535)
        return fl__err(FL_EINVAL, "endpoint '%s' has an invalid port: expected an integer in [%d, 65535]", ep,
                       allow_zero ? 0 : 1);
    memcpy(host, hs, hl);
    host[hl] = 0;
    *port = (int)p;
    return FL_OK;
}

/* ---- listeners ------------------------------------------------------------------------- */

static int resolve(const char *host, int port, int passive, struct addrinfo **res, char *err, size_t errcap)
{
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    struct addrinfo hints = {0};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
    int r = getaddrinfo(host, ps, &hints, res);
    if (r != 0) {
        snprintf(err, errcap, "cannot resolve '%s': %s", host, r == EAI_SYSTEM ? strerror(errno) : gai_strerror(r));
        return -1;
    }
    return 0;
}

int fl_net_listen(const char *host, int port, fl_net_listener **out)
{
    if (!out) return fl__err(FL_EINVAL, "fl_net_listen: out is NULL");
    *out = NULL;
    if (!host || !*host) host = "127.0.0.1";
    if (port < 0 || port > 65535) return fl__err(FL_EINVAL, "fl_net_listen: port %d out of range [0, 65535]", port);
    struct addrinfo *res = NULL;
    char err[256];
    if (resolve(host, port, 1, &res, err, sizeof err)) return fl__err(FL_EIO, "listen on %s:%d: %s", host, port, err);
    int fd = -1, saved = 0;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            saved = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, LISTEN_BACKLOG) == 0) break;
        saved = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) return fl__err(FL_EIO, "cannot listen on %s:%d: %s", host, port, strerror(saved));
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) {
        int e = errno;
        close(fd);
        return fl__err(FL_EIO, "listen on %s:%d: getsockname: %s", host, port, strerror(e));
    }
    fl_net_listener *l = calloc(1, sizeof *l);
    if (!l) {
        close(fd);
        return fl__err(FL_ENOMEM, "listen on %s:%d: out of memory", host, port);
    }
    l->magic = FL_NET_LISTENER_MAGIC;
    l->fd = fd;
    l->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                             : ((struct sockaddr_in *)&ss)->sin_port);
    fl__net_format_addr((struct sockaddr *)&ss, l->endpoint, sizeof l->endpoint);
    FL_DEBUG(FL_SUB_NET, "listening on %s", l->endpoint);
    *out = l;
    return FL_OK;
}

int fl_net_listener_port(const fl_net_listener *l)
{
    if (!l || l->magic != FL_NET_LISTENER_MAGIC)
        return fl__err(FL_EINVAL, "fl_net_listener_port: listener is NULL or invalid");
    return l->port;
}
const char *fl_net_listener_endpoint(const fl_net_listener *l)
{
    return l && l->magic == FL_NET_LISTENER_MAGIC ? l->endpoint : "";
}
int fl_net_listener_fd(const fl_net_listener *l)
{
    if (!l || l->magic != FL_NET_LISTENER_MAGIC)
        return fl__err(FL_EINVAL, "fl_net_listener_fd: listener is NULL or invalid");
    return l->fd;
}

void fl_net_listener_free(fl_net_listener *l)
{
    if (!l || l->magic != FL_NET_LISTENER_MAGIC) return;
    fl_net_acceptor_free(l->acc);
    close(l->fd);
    l->magic = 0;
    free(l);
}

/* ---- connections ------------------------------------------------------------------------- */

int fl__net_conn_wrap(int fd, const struct sockaddr *peer, fl_net_conn **out)
{
    *out = NULL;
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) {
        int e = errno;
        close(fd);
        return fl__err(FL_EIO, "cannot make socket non-blocking: %s", strerror(e));
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fl_net_conn *c = calloc(1, sizeof *c);
    if (!c) {
        close(fd);
        return fl__err(FL_ENOMEM, "out of memory for a connection");
    }
    c->magic = FL_NET_CONN_MAGIC;
    c->fd = fd;
    c->peer_rank = -1;
    c->loopback = fl__net_is_loopback(peer);
    fl__net_format_addr(peer, c->addr, sizeof c->addr);
    snprintf(c->label, sizeof c->label, "%s", c->addr);
    *out = c;
    return FL_OK;
}

/* One connect attempt to one address; 0 on success, else errno (ETIMEDOUT at deadline). */
static int try_connect(const struct addrinfo *ai, uint64_t deadline_ns, int *fd_out)
{
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) return errno;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        if (errno != EINPROGRESS && errno != EINTR) {
            int e = errno;
            close(fd);
            return e;
        }
        int st = fl__net_wait_fd(fd, POLLOUT, deadline_ns);
        if (st) {
            close(fd);
            return st == FL_ETIMEDOUT ? ETIMEDOUT : EIO;
        }
        int so = 0;
        socklen_t sl = sizeof so;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &so, &sl) != 0) so = errno;
        if (so != 0) {
            close(fd);
            return so;
        }
    }
    *fd_out = fd;
    return 0;
}

int fl_net_connect(const char *host, int port, const fl_net_auth *auth, uint64_t deadline_ns, fl_net_conn **out)
{
    if (!out) return fl__err(FL_EINVAL, "fl_net_connect: out is NULL");
    *out = NULL;
    if (!host || !*host) return fl__err(FL_EINVAL, "fl_net_connect: host is empty");
    if (port <= 0 || port > 65535) return fl__err(FL_EINVAL, "fl_net_connect: port %d out of range [1, 65535]", port);
    FL_CHECK(fl__net_auth_check(auth, "fl_net_connect"));
    uint64_t t0 = fl__now_ns();
    uint64_t backoff_ms = 10;
    char last[256] = "no attempt made";
    int attempts = 0;
    for (;;) {
        struct addrinfo *res = NULL;
        attempts++;
        if (resolve(host, port, 0, &res, last, sizeof last) == 0) {
            for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
                int fd = -1, e = try_connect(ai, deadline_ns, &fd);
                if (e) {
                    /* an attempt cut short by the deadline says nothing new: keep the real error */
                    if (e != ETIMEDOUT || attempts == 1) snprintf(last, sizeof last, "%s", strerror(e));
                    continue;
                }
                freeaddrinfo(res);
                fl_net_conn *c;
                struct sockaddr_storage ss;
                socklen_t sl = sizeof ss;
                if (getpeername(fd, (struct sockaddr *)&ss, &sl) != 0) memcpy(&ss, ai->ai_addr, ai->ai_addrlen);
                FL_CHECK(fl__net_conn_wrap(fd, (struct sockaddr *)&ss, &c));
                snprintf(c->label, sizeof c->label, "%s:%d", host, port);
                int st;
                if ((!auth->secret || !auth->secret_len) && !c->loopback)
                    st = fl__err(FL_EPROTO,
                                 "refusing to connect to %s (%s): insecure local mode (no job secret) "
                                 "connects to loopback addresses only",
                                 c->label, c->addr);
                else st = fl__net_handshake_connect(c, auth, deadline_ns);
                if (st == FL_EREMOTE) {
                    /* hung up before answering: a listener under a flood of connections drops
                     * the oldest idle ones; try again while the deadline allows */
                    snprintf(last, sizeof last, "%s", fl_last_error());
                    fl_net_conn_free(c);
                    goto retry;
                }
                if (st) {
                    fl_net_conn_free(c);
                    return st;
                }
                *out = c;
                return FL_OK;
            }
            freeaddrinfo(res);
        }
    retry:;
        uint64_t now = fl__now_ns();
        if (now >= deadline_ns)
            return fl__err(FL_ETIMEDOUT, "connect to %s:%d timed out after %.0f ms and %d attempts (last error: %s)", host,
                           port, (double)(now - t0) / 1e6, attempts, last);
        uint64_t nap = backoff_ms * 1000000ull;
        if (nap > deadline_ns - now) nap = deadline_ns - now;
        struct timespec ts = {(time_t)(nap / 1000000000ull), (long)(nap % 1000000000ull)};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
        /* capped at 100 ms: a peer that starts listening late (a restarted server loading its
         * checkpoint on a loaded machine) is reached at most 100 ms after it listens */
        backoff_ms = backoff_ms * 2 > 100 ? 100 : backoff_ms * 2;
    }
}

void fl_net_conn_free(fl_net_conn *c)
{
    if (!c || c->magic != FL_NET_CONN_MAGIC) return;
    close(c->fd);
    c->magic = 0;
    free(c);
}

void fl_net_conn_shutdown(fl_net_conn *c)
{
    if (c && c->magic == FL_NET_CONN_MAGIC) shutdown(c->fd, SHUT_RDWR);
}

int32_t fl_net_conn_peer_rank(const fl_net_conn *c)
{
    return c ? c->peer_rank : fl__err(FL_EINVAL, "fl_net_conn_peer_rank: c is NULL");
}
uint32_t fl_net_conn_peer_role(const fl_net_conn *c)
{
    if (!c) {
        fl__err(FL_EINVAL, "fl_net_conn_peer_role: c is NULL");
        return 0;
    }
    return c->peer_role;
}
const char *fl_net_conn_addr(const fl_net_conn *c) { return c ? c->addr : ""; }
const char *fl_net_conn_label(const fl_net_conn *c) { return c ? c->label : ""; }
int fl_net_conn_fd(const fl_net_conn *c) { return c ? c->fd : fl__err(FL_EINVAL, "fl_net_conn_fd: connection is NULL"); }
void fl_net_conn_set_spin(fl_net_conn *c, int spin_us)
{
    if (c) c->spin_us = spin_us < 0 ? 0 : spin_us;
}
void fl_net_conn_set_label(fl_net_conn *c, const char *label)
{
    if (c && label) snprintf(c->label, sizeof c->label, "%s", label);
}

/* ---- byte streams ------------------------------------------------------------------------- */

static int io_error(fl_net_conn *c, int e, const char *what)
{
    if (e == EPIPE || e == ECONNRESET || e == ENOTCONN || e == ECONNABORTED)
        return fl__err(FL_EREMOTE, "connection to %s lost while %s: %s (peer closed or crashed)", c->label, what,
                       strerror(e));
    return fl__err(FL_EIO, "%s on the connection to %s failed: %s", what, c->label, strerror(e));
}

int fl_net_try_sendv(fl_net_conn *c, const struct iovec *iov, int iovcnt, size_t *done)
{
    if (!c || !done || (iovcnt && !iov)) return fl__err(FL_EINVAL, "fl_net_try_sendv: c, iov or done is NULL");
    *done = 0;
    struct msghdr m = {0};
    m.msg_iov = (struct iovec *)iov;
    m.msg_iovlen = (size_t)iovcnt;
    for (;;) {
        ssize_t n = sendmsg(c->fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n >= 0) {
            *done = (size_t)n;
            return FL_OK;
        }
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return FL_OK;
        return io_error(c, errno, "sending");
    }
}

/* Receives what is there now.  *eof is set (and no error recorded) when the peer closed. */
static int recv_some(fl_net_conn *c, void *buf, size_t n, size_t *done, int flags, int *eof)
{
    *done = 0;
    *eof = 0;
    if (n == 0) return FL_OK;
    for (;;) {
        ssize_t r = recv(c->fd, buf, n, flags | MSG_DONTWAIT);
        if (r > 0) {
            *done = (size_t)r;
            return FL_OK;
        }
        if (r == 0) {
            *eof = 1;
            return FL_OK;
        }
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return FL_OK;
        return io_error(c, errno, "receiving");
    }
}

static int try_recv_flags(fl_net_conn *c, void *buf, size_t n, size_t *done, int flags)
{
    int eof;
    FL_CHECK(recv_some(c, buf, n, done, flags, &eof));
    if (eof) return fl__err(FL_EREMOTE, "%s closed the connection", c->label);
    return FL_OK;
}

int fl_net_try_recv(fl_net_conn *c, void *buf, size_t n, size_t *done)
{
    if (!c || !done || (n && !buf)) return fl__err(FL_EINVAL, "fl_net_try_recv: c, buf or done is NULL");
    return try_recv_flags(c, buf, n, done, 0);
}
int fl_net_try_peek(fl_net_conn *c, void *buf, size_t n, size_t *done)
{
    if (!c || !done || (n && !buf)) return fl__err(FL_EINVAL, "fl_net_try_peek: c, buf or done is NULL");
    return try_recv_flags(c, buf, n, done, MSG_PEEK);
}

/* Waits for fd readiness, spinning first for up to spin_us since `since`. */
static int wait_ready(fl_net_conn *c, short ev, uint64_t since, uint64_t deadline_ns)
{
    if (c->spin_us > 0 && fl__now_ns() - since < (uint64_t)c->spin_us * 1000ull) {
        for (int i = 0; i < 32; i++) cpu_relax();
        return FL_OK;
    }
    return fl__net_wait_fd(c->fd, ev, deadline_ns);
}

void fl__net_conn_set_watch(fl_net_conn *c, fl__net_watch_fn fn, void *arg)
{
    if (!c) return;
    c->watch = fn;
    c->watch_arg = arg;
}

#define WATCH_SLICE_NS 100000000ull

/* wait_ready for a watched connection (see fl__net_conn_set_watch): FL_OK to try the I/O
 * again, FL_ETIMEDOUT at the (possibly moved) deadline, or the watch's error. */
static int wait_watched(fl_net_conn *c, short ev, uint64_t since, uint64_t *deadline_ns)
{
    uint64_t now = fl__now_ns();
    if (c->spin_us > 0 && now - since < (uint64_t)c->spin_us * 1000ull) return wait_ready(c, ev, since, *deadline_ns);
    if (now >= *deadline_ns) return FL_ETIMEDOUT;
    uint64_t end = *deadline_ns - now < WATCH_SLICE_NS ? *deadline_ns : now + WATCH_SLICE_NS;
    int st = fl__net_wait_fd(c->fd, ev, end);
    if (st != FL_OK && st != FL_ETIMEDOUT) return st;
    uint64_t after = fl__now_ns(), stall = fl__live_deadline_after(deadline_ns, end, after);
    if (st == FL_OK) return FL_OK; /* ready: read or write before judging the peer */
    FL_CHECK(c->watch(c->watch_arg, c, after - since, stall));
    return after >= *deadline_ns ? FL_ETIMEDOUT : FL_OK;
}

static int wait_io(fl_net_conn *c, short ev, uint64_t since, uint64_t *deadline_ns)
{
    return c->watch ? wait_watched(c, ev, since, deadline_ns) : wait_ready(c, ev, since, *deadline_ns);
}

int fl_net_send_all(fl_net_conn *c, const void *buf, size_t n, uint64_t deadline_ns)
{
    if (!c || c->magic != FL_NET_CONN_MAGIC) return fl__err(FL_EINVAL, "fl_net_send_all: invalid connection");
    const uint8_t *p = buf;
    size_t off = 0;
    uint64_t since = fl__now_ns();
    while (off < n) {
        struct iovec iov = {(void *)(p + off), n - off};
        size_t k;
        FL_CHECK(fl_net_try_sendv(c, &iov, 1, &k));
        if (k) {
            off += k;
            since = fl__now_ns();
            continue;
        }
        int st = wait_io(c, POLLOUT, since, &deadline_ns);
        if (st == FL_ETIMEDOUT)
            return fl__err(FL_ETIMEDOUT, "send to %s timed out: %zu of %zu bytes sent (peer not reading)", c->label, off,
                           n);
        if (st) return st;
    }
    return FL_OK;
}

int fl_net_recv_all(fl_net_conn *c, void *buf, size_t n, uint64_t deadline_ns)
{
    if (!c || c->magic != FL_NET_CONN_MAGIC) return fl__err(FL_EINVAL, "fl_net_recv_all: invalid connection");
    uint8_t *p = buf;
    size_t off = 0;
    uint64_t since = fl__now_ns();
    while (off < n) {
        size_t k;
        int eof;
        FL_CHECK(recv_some(c, p + off, n - off, &k, 0, &eof));
        if (eof && off > 0)
            return fl__err(FL_ECORRUPT,
                           "truncated read from %s: got %zu of %zu bytes before the peer closed the "
                           "connection",
                           c->label, off, n);
        if (eof) return fl__err(FL_EREMOTE, "%s closed the connection", c->label);
        if (k) {
            off += k;
            since = fl__now_ns();
            continue;
        }
        int st = wait_io(c, POLLIN, since, &deadline_ns);
        if (st == FL_ETIMEDOUT)
            return fl__err(FL_ETIMEDOUT, "receive from %s timed out: %zu of %zu bytes received (peer silent)", c->label,
                           off, n);
        if (st) return st;
    }
    return FL_OK;
}

/* ---- frames ---------------------------------------------------------------------------------- */

#define FRAME_MAGIC 0x31464c46u /* "FLF1" */
#define FRAME_VERSION 1
#define FRAME_HDR 24

int fl_net_send_frame(fl_net_conn *c, uint16_t type, uint32_t flags, const void *body, size_t len, uint64_t deadline_ns)
{
    if (!c || (len && !body)) return fl__err(FL_EINVAL, "fl_net_send_frame: c or body is NULL");
    uint8_t h[FRAME_HDR] = {0};
    fl__put_u32(h, FRAME_MAGIC);
    fl__put_u16(h + 4, FRAME_VERSION);
    fl__put_u16(h + 6, type);
    fl__put_u32(h + 8, flags);
    fl__put_u64(h + 16, len);
    FL_CHECK(fl_net_send_all(c, h, sizeof h, deadline_ns));
    return len ? fl_net_send_all(c, body, len, deadline_ns) : FL_OK;
}

int fl_net_recv_frame_header(fl_net_conn *c, uint64_t max_len, fl_net_frame *hdr, uint64_t deadline_ns)
{
    if (!c || !hdr) return fl__err(FL_EINVAL, "fl_net_recv_frame_header: c or hdr is NULL");
    uint8_t h[FRAME_HDR];
    FL_CHECK(fl_net_recv_all(c, h, sizeof h, deadline_ns));
    if (fl__get_u32(h) != FRAME_MAGIC) return fl__err(FL_EPROTO, "bad frame from %s: wrong magic", c->label);
    if (fl__get_u16(h + 4) != FRAME_VERSION)
        return fl__err(FL_EPROTO, "bad frame from %s: version %u, expected %u", c->label, fl__get_u16(h + 4),
                       FRAME_VERSION);
    hdr->type = fl__get_u16(h + 6);
    hdr->flags = fl__get_u32(h + 8);
    hdr->len = fl__get_u64(h + 16);
    if (hdr->len > max_len)
        return fl__err(FL_EPROTO, "bad frame from %s: body of %llu bytes exceeds the limit of %llu", c->label,
                       (unsigned long long)hdr->len, (unsigned long long)max_len);
    return FL_OK;
}
