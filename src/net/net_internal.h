/*
 * net_internal.h - private structures of the transport: the listener and connection
 * handles, the wait helper every blocking call goes through, and the handshake entry
 * points (auth.c) used by sock.c.
 */
#ifndef FL_NET_INTERNAL_H
#define FL_NET_INTERNAL_H

#include <netinet/in.h>
#include <sys/socket.h>

#include "../base/base_internal.h"
#include "fleet/net.h"
#include "liveness.h"

#define FL_NET_LISTENER_MAGIC 0x464c4e4cu /* "FLNL" */
#define FL_NET_CONN_MAGIC 0x464c4e43u     /* "FLNC" */
#define FL_NET_ADDR_MAX 300
#define FL_NET_LABEL_MAX 320

struct fl_net_listener {
    uint32_t magic;
    int fd;
    int port;
    char endpoint[FL_NET_ADDR_MAX];
    fl_net_acceptor *acc; /* the one made by fl_net_accept (freed with the listener) */
    int owned;            /* an acceptor made by fl_net_acceptor_create serves this listener */
};

/* A liveness check called during the blocking waits of a connection (fl__net_conn_set_watch). */
typedef int (*fl__net_watch_fn)(void *arg, fl_net_conn *c, uint64_t idle_ns, uint64_t stalled_ns);

struct fl_net_conn {
    uint32_t magic;
    int fd;
    int spin_us;
    fl__net_watch_fn watch;
    void *watch_arg;
    int loopback; /* the remote address is a loopback address */
    int32_t peer_rank;
    uint32_t peer_role;
    uint32_t peer_service;
    char addr[FL_NET_ADDR_MAX];
    char label[FL_NET_LABEL_MAX];
};

/* Waits until fd is ready for `events` (POLLIN/POLLOUT) or deadline_ns passes; EINTR is
 * retried.  Returns FL_OK when ready (also on POLLHUP/POLLERR: the next I/O call reports
 * the error), FL_ETIMEDOUT at the deadline, FL_EIO if poll fails. */
int fl__net_wait_fd(int fd, short events, uint64_t deadline_ns);

/* Sets a watch on c: while fl_net_send_all or fl_net_recv_all (and the calls built on them)
 * wait on c, they sleep in slices of at most 100 ms and call fn(arg, c, idle_ns,
 * stalled_ns) after each, idle_ns being the time since the wait last moved a byte and
 * stalled_ns how much longer than asked the slice took (more than a second only when this
 * process was stopped or starved; 0 otherwise).  A stall moves the wait's deadline by its
 * length: time this process did not run is not held against the peer.  A non-zero return
 * (an error set with fl__err) ends the wait with that status.  NULL fn removes the watch. */
void fl__net_conn_set_watch(fl_net_conn *c, fl__net_watch_fn fn, void *arg);

/* "ip:port" of a socket address. */
void fl__net_format_addr(const struct sockaddr *sa, char *out, size_t cap);
/* 1 if the address is in 127.0.0.0/8, ::1 or ::ffff:127.0.0.0/104. */
int fl__net_is_loopback(const struct sockaddr *sa);

/* Creates a connection handle around a connected socket (made non-blocking, TCP_NODELAY).
 * Takes ownership of fd, also on failure. */
int fl__net_conn_wrap(int fd, const struct sockaddr *peer, fl_net_conn **out);

/* The handshake (auth.c; wire format in fleet/net.h).  The connector's side blocks until
 * deadline_ns.  The acceptor's side is two steps that never block, driven by the acceptor's
 * state machine (acceptor.c): make the greeting (HELLO_S with a fresh nonce), then check
 * the connector's HELLO_C and fill FINISH.  fl__net_hs_check_proof returns FL_OK when the
 * peer proved it knows the secret (fin then holds the accepting answer), else the error;
 * *send_fin says whether fin holds a refusal worth sending before closing. */
#define FL__NET_HELLO_LEN 52
#define FL__NET_HELLO_C_LEN 84
#define FL__NET_FINISH_LEN 36
int fl__net_handshake_connect(fl_net_conn *c, const fl_net_auth *auth, uint64_t deadline_ns);
int fl__net_hs_greeting(const fl_net_auth *a, uint8_t hs[FL__NET_HELLO_LEN]);
int fl__net_hs_check_proof(fl_net_conn *c, const fl_net_auth *a, const uint8_t *hs, const uint8_t *hc, uint8_t *fin,
                           int *send_fin);
/* Checks an fl_net_auth before any socket work: FL_EINVAL for a missing secret without
 * insecure_local, or a secret longer than FL_NET_SECRET_MAX. */
int fl__net_auth_check(const fl_net_auth *auth, const char *what);

/* Little-endian encoding helpers. */
static inline void fl__put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static inline void fl__put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void fl__put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint16_t fl__get_u16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t fl__get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
    return v;
}
static inline uint64_t fl__get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

#endif
