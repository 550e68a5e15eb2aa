/*
 * fleet/net.h - the TCP transport: listeners, authenticated connections, byte streams and
 * framed messages, every blocking call bounded by a deadline.
 *
 * What it is.  The one transport the collective communicator (fleet/coll.h) and the
 * parameter-server RPC sit on.  Every connection starts with a mutual HMAC-SHA256
 * challenge-response on a per-job secret (below); nothing else is read from a peer before
 * that handshake has succeeded.  Sockets are non-blocking with TCP_NODELAY; EINTR and
 * EAGAIN are retried in one place; a peer that closes between messages is told apart from a
 * read cut short in the middle of one.
 *
 * What it is not.  It does not encrypt: the handshake proves both ends know the job secret,
 * and nothing more (run across untrusted networks inside a VPN or similar).  It keeps no
 * global state, starts no threads and never raises SIGPIPE (sends use MSG_NOSIGNAL).
 *
 * Deadlines.  Blocking calls take an absolute deadline in CLOCK_MONOTONIC nanoseconds, made
 * with fl_net_deadline(timeout_ms); a sequence of calls can then share one deadline.  A call
 * that runs past its deadline returns FL_ETIMEDOUT and names the peer and what it waited for.
 *
 * Job secret (environment, read through src/base/env.c):
 *   FLEET_JOB_SECRET       the secret as hex (at least 32 hex digits = 16 bytes, at most
 *                          512 = 256 bytes).  Visible to processes that can read this one's
 *                          environment; prefer the file on shared machines.
 *   FLEET_JOB_SECRET_FILE  path of a file holding the secret as hex (surrounding white space
 *                          ignored).  The file must be a regular file owned by this user with
 *                          no group or other permission bits (mode 0600 or 0400); otherwise it
 *                          is refused with a message naming the file and its mode.
 * Setting both is an error.  Error messages never contain the secret or any part of it.
 *
 * Handshake (all integers little-endian; fixed sizes, read with the caller's deadline):
 *   acceptor -> connector  HELLO_S = magic "FLA1" u32, version u16, flags u16, service u32,
 *                                    role u32, rank i32, nonce_s[32]                 (52 B)
 *   connector -> acceptor  HELLO_C = same fields with nonce_c, then
 *                                    mac_c = HMAC(K, "fleet-auth-v1|c|" HELLO_S HELLO_C[0..52))
 *                                                                                     (84 B)
 *   acceptor -> connector  FINISH  = status u32 (0 ok, 1 bad proof, 2 wrong service),
 *                                    mac_s = HMAC(K, "fleet-auth-v1|s|" HELLO_S HELLO_C) (36 B)
 * Both MACs are compared with CRYPTO_memcmp; nonces come from RAND_bytes.  The role tags
 * ("c"/"s") stop reflection, the fresh nonces stop replay.  A failed proof closes the
 * connection with FL_EPROTO "authentication failed: peer <endpoint> does not know the job
 * secret".  `service` must be equal on both sides (a PS client cannot open a collective
 * port); `role` and `rank` are reported to the other side (fl_net_conn_peer_rank).
 *
 * Insecure local mode: with no secret and `insecure_local` set, the same handshake runs with
 * an empty key (so it still checks versions and services) and both ends must be loopback
 * addresses; without a secret and without the flag, connect and accept refuse to run.
 *
 * Listening: every listener in the library authenticates its peers through an acceptor
 * (below): handshakes run concurrently and without blocking, unauthenticated connections
 * are bounded in number (in all and per source address) and in time, so idle or slow
 * connections that never authenticate cannot keep a real peer out.
 *
 * Thread safety: a connection, listener or acceptor may be used by one thread at a time;
 * different handles are independent.
 */
#ifndef FLEET_NET_H
#define FLEET_NET_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "fleet/base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- deadlines ------------------------------------------------------------------------ */

/* Returns now + timeout_ms as an absolute CLOCK_MONOTONIC time in nanoseconds
 * (timeout_ms <= 0 gives "now": calls then try once without waiting). */
FL_API uint64_t fl_net_deadline(int64_t timeout_ms);

/* ---- endpoints ------------------------------------------------------------------------ */

#define FL_NET_HOST_MAX 256

/* Splits "host:port" or "[v6addr]:port" into host (NUL-terminated, at most host_cap-1
 * characters) and port (1..65535, or 0 when allow_zero is set).  FL_EINVAL names the
 * endpoint and what is wrong with it. */
FL_API int fl_net_parse_endpoint(const char *endpoint, char *host, size_t host_cap, int *port, int allow_zero);

/* ---- the job secret ------------------------------------------------------------------- */

#define FL_NET_SECRET_MIN 16
#define FL_NET_SECRET_MAX 256

typedef struct {
    uint8_t bytes[FL_NET_SECRET_MAX];
    size_t len;
} fl_net_secret;

/* Loads the secret from FLEET_JOB_SECRET or FLEET_JOB_SECRET_FILE (see the top of this
 * file).  Returns FL_ENOTFOUND when neither is set, FL_EINVAL for malformed hex, a bad file
 * mode or both variables set, FL_EIO when the file cannot be read. */
FL_API int fl_net_secret_from_env(fl_net_secret *out);
/* Decodes hex (FL_NET_SECRET_MIN..MAX bytes).  `what` names the source in messages. */
FL_API int fl_net_secret_from_hex(const char *hex, const char *what, fl_net_secret *out);
/* Reads a secret file (hex), enforcing owner-only permissions. */
FL_API int fl_net_secret_from_file(const char *path, fl_net_secret *out);
/* Fills 32 random bytes (RAND_bytes); for launchers and tests. */
FL_API int fl_net_secret_generate(fl_net_secret *out);
/* Formats the secret as lowercase hex into out (cap >= 2*len+1), e.g. to export it to
 * children through FLEET_JOB_SECRET.  Returns FL_EINVAL when cap is too small. */
FL_API int fl_net_secret_to_hex(const fl_net_secret *s, char *out, size_t cap);
/* Overwrites the secret with zeros (OPENSSL_cleanse). */
FL_API void fl_net_secret_clear(fl_net_secret *s);

/* ---- handshake parameters --------------------------------------------------------------- */

enum { FL_NET_SERVICE_COLL = 1, FL_NET_SERVICE_PS = 2, FL_NET_SERVICE_LAUNCH = 3, FL_NET_SERVICE_TEST = 99 };

typedef struct {
    const uint8_t *secret; /* the job secret; NULL or len 0: insecure (needs insecure_local) */
    size_t secret_len;
    int insecure_local; /* 1: allow running without a secret, loopback peers only */
    uint32_t service;   /* FL_NET_SERVICE_*: both ends must agree */
    uint32_t role;      /* this side's role tag, reported to the peer (free-form) */
    int32_t rank;       /* this side's rank, reported to the peer (-1 if none) */
} fl_net_auth;

/* ---- listeners and connections ---------------------------------------------------------- */

typedef struct fl_net_listener fl_net_listener;
typedef struct fl_net_conn fl_net_conn;

/* Binds and listens on host:port (host NULL or "" = 127.0.0.1: loopback unless told
 * otherwise; "0.0.0.0" or "::" listen on every interface).  Binds only to that address.
 * port 0 picks a free port; read it back with fl_net_listener_port.  SO_REUSEADDR is set
 * so a restarted job can rebind a port in TIME_WAIT.  Errors (FL_EIO) name host:port. */
FL_API int fl_net_listen(const char *host, int port, fl_net_listener **out);
FL_API int fl_net_listener_port(const fl_net_listener *l);
/* "host:port" as bound (port resolved). */
FL_API const char *fl_net_listener_endpoint(const fl_net_listener *l);
/* The listening socket, for poll(POLLIN) by event loops. */
FL_API int fl_net_listener_fd(const fl_net_listener *l);
/* Closes the socket and frees.  NULL is ignored. */
FL_API void fl_net_listener_free(fl_net_listener *l);

/* Accepts connections and runs the acceptor side of their handshakes, concurrently, until
 * one peer has authenticated or deadline_ns passes; the blocking form of the acceptor below
 * (it keeps one inside the listener, with the defaults, so pending handshakes survive from
 * one call to the next).  A failed handshake during the call is returned as the error
 * (FL_EPROTO for a wrong secret or service, FL_EREMOTE for a peer that hung up); at the
 * deadline, handshakes still pending are abandoned and FL_ETIMEDOUT names one ("timed out
 * waiting for its proof"), or says that no peer connected.  The listener stays usable, so a
 * caller can log and accept again.  Not on a listener served by fl_net_acceptor_create
 * (FL_ESTATE). */
FL_API int fl_net_accept(fl_net_listener *l, const fl_net_auth *auth, uint64_t deadline_ns, fl_net_conn **out);

/* ---- the acceptor: bounded, concurrent handshakes for a listener's owner ------------------
 *
 * Unauthenticated peers must not be able to starve the real ones.  An acceptor takes
 * connections from its listener as soon as they arrive and authenticates all of them at
 * once, each with its own little state machine (send the greeting, read the proof, send the
 * answer) and its own deadline, never blocking: a peer that sends nothing, or one byte a
 * second, holds a slot until its deadline and nothing else.  Limits:
 *   - at most max_pending unauthenticated connections at a time, and at most max_per_source
 *     of them from one source address (IP, whatever the port);
 *   - when a new connection would exceed either, the pending connection (from that source,
 *     or overall) that has been idle longest - the oldest last byte received, or arrival -
 *     is closed.  A real peer answers the greeting within a round trip, so it is never the
 *     idle one; connections from one source that all arrived or spoke in the last 100 ms
 *     (a burst) are bound by the overall limit only, so a real peer sharing an address
 *     with a flood still gets time to answer.  A peer closed this way sees its handshake
 *     cut and fl_net_connect tries again;
 *   - each connection must authenticate within handshake_timeout_ms of being accepted;
 *   - when the process runs out of descriptors, the oldest idle pending connection is
 *     closed to make room, or, with none, the listener rests 100 ms.
 * So the acceptor holds at most max_pending descriptors besides its listener and its
 * epoll descriptor.  Authenticated connections leave it at once (fl_net_acceptor_next):
 * the owner serves them on its own descriptors and they never wait behind
 * unauthenticated ones.  Defaults (environment, read through src/base/env.c):
 *   FLEET_NET_MAX_PENDING             max_pending     (default 256)
 *   FLEET_NET_MAX_PENDING_PER_SOURCE  max_per_source  (default 16)
 *   FLEET_NET_HANDSHAKE_TIMEOUT_MS    handshake_timeout_ms (default 5000)
 *
 * Use from an event loop (one thread; the acceptor is not thread safe):
 *
 *     fl_net_acceptor *a;
 *     fl_net_acceptor_create(listener, &auth, NULL, &a);
 *     for (;;) {
 *         struct pollfd pf[1 + N] = {{fl_net_acceptor_fd(a), POLLIN}, ...the owner's fds...};
 *         int t = fl_net_acceptor_timeout_ms(a);          // -1: no deadline pending
 *         poll(pf, 1 + N, t < 0 || t > mine ? mine : t);
 *         fl_net_acceptor_step(a);                         // after every poll: cheap
 *         fl_net_conn *c;
 *         while (fl_net_acceptor_next(a, &c) == FL_OK && c) serve(c);
 *         ...the owner's fds...
 *     }
 *     fl_net_acceptor_free(a);                             // before the listener
 *
 * or, to wait for one peer, fl_net_acceptor_wait.  Refused handshakes are counted
 * (fl_net_acceptor_get_stats) and the latest one's message is kept
 * (fl_net_acceptor_last_refusal) for the owner to log; they are never returned as errors,
 * so a flood of them cannot disturb the owner. */

#define FL_NET_DEFAULT_MAX_PENDING 256
#define FL_NET_DEFAULT_MAX_PER_SOURCE 16
#define FL_NET_DEFAULT_HANDSHAKE_MS 5000

typedef struct fl_net_acceptor fl_net_acceptor;

typedef struct {
    int max_pending;          /* unauthenticated connections held at once; 0: the default */
    int max_per_source;       /* of which from one source address; 0: the default */
    int handshake_timeout_ms; /* each connection's time to authenticate; 0: the default */
} fl_net_acceptor_opts;

typedef struct {
    uint64_t accepted;      /* connections taken from the listener */
    uint64_t authenticated; /* handshakes that succeeded */
    uint64_t refused;       /* failed: wrong secret or service, not loopback in insecure mode,
                             * hung up */
    uint64_t timed_out;     /* did not authenticate within handshake_timeout_ms */
    uint64_t evicted;       /* closed to make room when a limit was hit */
    int pending;            /* handshakes in progress now */
    int ready;              /* authenticated, not yet taken with fl_net_acceptor_next */
} fl_net_acceptor_stats;

/* Makes an acceptor for l (one per listener; it replaces the one fl_net_accept keeps).
 * auth is copied, the secret too.  opts may be NULL (defaults).  FL_EINVAL names a bad
 * option or environment variable; FL_ESTATE if l already has one. */
FL_API int fl_net_acceptor_create(fl_net_listener *l, const fl_net_auth *auth, const fl_net_acceptor_opts *opts,
                                  fl_net_acceptor **out);
/* One descriptor to poll for POLLIN: readable when the listener or a pending connection
 * has something to do.  Do not read or close it. */
FL_API int fl_net_acceptor_fd(const fl_net_acceptor *a);
/* Milliseconds until the acceptor needs a step even without events (its next handshake
 * deadline); 0 when an authenticated connection waits to be taken; -1 when nothing is
 * pending. */
FL_API int fl_net_acceptor_timeout_ms(const fl_net_acceptor *a);
/* Does what can be done now without blocking: accepts (a few per call), moves handshakes
 * on, closes the ones past their deadline.  FL_OK, or FL_EIO if epoll itself fails. */
FL_API int fl_net_acceptor_step(fl_net_acceptor *a);
/* Takes the oldest authenticated connection: FL_OK with *out set, or FL_OK with *out NULL
 * when none is ready.  Never blocks.  The caller owns the connection. */
FL_API int fl_net_acceptor_next(fl_net_acceptor *a, fl_net_conn **out);
/* Steps and sleeps until a peer has authenticated (FL_OK) or deadline_ns (FL_ETIMEDOUT
 * with the number pending and the latest refusal). */
FL_API int fl_net_acceptor_wait(fl_net_acceptor *a, uint64_t deadline_ns, fl_net_conn **out);
FL_API void fl_net_acceptor_get_stats(const fl_net_acceptor *a, fl_net_acceptor_stats *out);
/* The message of the latest refused or timed-out handshake ("" if none), e.g.
 * "authentication failed: peer 10.0.0.5:41234 does not know the job secret". */
FL_API const char *fl_net_acceptor_last_refusal(const fl_net_acceptor *a);
/* Closes the pending and the untaken authenticated connections and frees.  Call before
 * freeing the listener.  NULL is ignored. */
FL_API void fl_net_acceptor_free(fl_net_acceptor *a);

/* Connects to host:port and runs the connector side of the handshake.  While the peer is
 * not listening yet (connection refused, unreachable, name not resolvable), or hangs up
 * before answering the handshake (a listener under a flood of connections may drop ours to
 * make room), it retries with backoff (10 ms doubling to 500 ms) until deadline_ns, then
 * returns FL_ETIMEDOUT with the last error.  A refused handshake (wrong secret or service)
 * is not retried. */
FL_API int fl_net_connect(const char *host, int port, const fl_net_auth *auth, uint64_t deadline_ns, fl_net_conn **out);

/* Closes and frees.  NULL is ignored. */
FL_API void fl_net_conn_free(fl_net_conn *c);
/* Half-closes both directions now (shutdown(2)); the handle stays valid for freeing. */
FL_API void fl_net_conn_shutdown(fl_net_conn *c);

/* The peer's rank, role and service as sent in its handshake. */
FL_API int32_t fl_net_conn_peer_rank(const fl_net_conn *c);
FL_API uint32_t fl_net_conn_peer_role(const fl_net_conn *c);
/* The remote address "ip:port" of the socket. */
FL_API const char *fl_net_conn_addr(const fl_net_conn *c);
/* How the peer is named in error messages; defaults to the remote address.  Callers that
 * know better set e.g. "rank 3 (10.0.0.4:6170)". */
FL_API const char *fl_net_conn_label(const fl_net_conn *c);
FL_API void fl_net_conn_set_label(fl_net_conn *c, const char *label);
/* The socket (non-blocking), for poll by event loops.  Do not close it. */
FL_API int fl_net_conn_fd(const fl_net_conn *c);
/* While a send or receive would block, keep retrying for up to spin_us microseconds before
 * sleeping in poll (default 0).  Spinning saves the ~30-70 us wake-up of a sleeping
 * process on small round trips, at the price of a busy core. */
FL_API void fl_net_conn_set_spin(fl_net_conn *c, int spin_us);

/* ---- byte streams ------------------------------------------------------------------------ */

/* Sends all n bytes before deadline_ns.  FL_EREMOTE if the peer closed or reset the
 * connection, FL_ETIMEDOUT on the deadline (with how many bytes went out), FL_EIO else. */
FL_API int fl_net_send_all(fl_net_conn *c, const void *buf, size_t n, uint64_t deadline_ns);
/* Receives exactly n bytes before deadline_ns.  A peer that closes before the first byte
 * gives FL_EREMOTE ("closed the connection"); one that closes after some but not all bytes
 * gives FL_ECORRUPT ("truncated: got k of n bytes").  n == 0 returns at once. */
FL_API int fl_net_recv_all(fl_net_conn *c, void *buf, size_t n, uint64_t deadline_ns);

/* Non-blocking primitives for event loops: send (writev) or receive what the socket takes
 * now without waiting.  *done gets the bytes moved (0 when it would block).  FL_EREMOTE when
 * the peer closed (recv returned 0) or reset; FL_EIO on other errors. */
FL_API int fl_net_try_sendv(fl_net_conn *c, const struct iovec *iov, int iovcnt, size_t *done);
FL_API int fl_net_try_recv(fl_net_conn *c, void *buf, size_t n, size_t *done);
/* Like fl_net_try_recv but leaves the bytes in the socket (MSG_PEEK). */
FL_API int fl_net_try_peek(fl_net_conn *c, void *buf, size_t n, size_t *done);

/* ---- framed messages ----------------------------------------------------------------------- */

/* Frame header on the wire (24 bytes, little-endian): magic "FLF1" u32, version u16,
 * type u16, flags u32, reserved u32, body length u64; then the body. */
typedef struct {
    uint16_t type;
    uint32_t flags;
    uint64_t len;
} fl_net_frame;

/* Sends header + body (len may be 0). */
FL_API int fl_net_send_frame(fl_net_conn *c, uint16_t type, uint32_t flags, const void *body, size_t len,
                             uint64_t deadline_ns);
/* Receives and checks a header: wrong magic or version gives FL_EPROTO, a length above
 * max_len gives FL_EPROTO before anything is allocated.  The caller then reads hdr->len body
 * bytes with fl_net_recv_all. */
FL_API int fl_net_recv_frame_header(fl_net_conn *c, uint64_t max_len, fl_net_frame *hdr, uint64_t deadline_ns);

#ifdef __cplusplus
}
#endif
#endif
