/*
 * liveness.h - the one liveness clock of every Fleet connection: how a process tells a
 * slow peer from a stopped or hung one, and a peer's silence from its own absence.  Used by
 * the collective backends (src/coll/alive.c, tcp.c, shm.c), the PS client and server
 * (src/ps/client_hb.c, server.c), the rendezvous (src/fleet/role_rdzv.c) and the watched
 * waits of the transport (sock.c, acceptor.c).  It is not a transport: what a heartbeat is
 * on the wire stays with each protocol; this module owns the clock, the thresholds, the
 * heartbeat thread and the rules.
 *
 * The rules, each written once here:
 *   - Silence.  A peer that sent nothing - no byte of a reply, no heartbeat, no connect -
 *     for the silence window (FL__LIVE_TIMEOUT_MS by default; FLEET_COLL_PEER_TIMEOUT_MS,
 *     FLEET_PS_WORKER_TIMEOUT_MS and FLEET_PS_SERVER_TIMEOUT_MS change it per side) is
 *     stopped, hung or cut off.  A peer that still sends heartbeats is only slow and gets
 *     the request's whole deadline.
 *   - Stopped self.  A timed wait of this process that ended more than FL__LIVE_STALL_NS
 *     after it was due means this process did not run meanwhile (SIGSTOP, a debugger, a
 *     starved machine).  The time it ran again is noted (fl__live_clock.resumed_ns): every
 *     peer's silence is counted from then on (a fresh window), waits restart their
 *     no-progress clock, and a deadline moves by the length of the stall - the time this
 *     process did not run is never held against a peer.
 *
 * Thread safety: a clock is written by any thread (atomics); a heartbeat thread is started
 * and stopped by its owner only.
 */
#ifndef FL_NET_LIVENESS_H
#define FL_NET_LIVENESS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "../base/base_internal.h"
#include "fleet/net.h"

/* Default heartbeat period of every protocol that sends heartbeats. */
#define FL__LIVE_HEARTBEAT_MS 1000
/* Default silence window: a peer silent this long (not even a heartbeat) is stopped or hung.
 * Six heartbeat periods: with fleetrun's SIGTERM + SIGCONT a job with a stopped process ends
 * well within 10 s of the stop. */
#define FL__LIVE_TIMEOUT_MS 6000
/* A timed wait that ended this much later than due: this process did not run meanwhile. */
#define FL__LIVE_STALL_NS 1000000000ull

/* The "was I stopped myself" clock of one component (a communicator, a PS client or server,
 * a rendezvous). */
typedef struct {
    _Atomic uint64_t resumed_ns; /* when this process last ran again after a stall (0: never) */
    int sub;                     /* log subsystem (FL_SUB_*) */
    int window_ms;               /* the silence window granted afresh, for the message */
    char who[96];                /* "rank 2", "worker 1", "server 0 (127.0.0.1:6170)" */
    char peers[32];              /* "its peers", "the servers", ... */
} fl__live_clock;

void fl__live_clock_init(fl__live_clock *k, int sub, const char *who, const char *peers, int window_ms);

/* How much later than due_ns a wait ended, when that is more than FL__LIVE_STALL_NS; 0
 * otherwise (also when due_ns is 0: no wait was due). */
uint64_t fl__live_stall(uint64_t due_ns, uint64_t now);
/* The stopped-self rule: notes that this process ran again at now after a stall of
 * stall_ns (no-op for 0) and says so once in the log.  Returns stall_ns. */
uint64_t fl__live_note(fl__live_clock *k, uint64_t now, uint64_t stall_ns);
/* fl__live_note(k, now, fl__live_stall(due_ns, now)). */
uint64_t fl__live_check(fl__live_clock *k, uint64_t due_ns, uint64_t now);
/* The start of a peer's current silence: heard_ns, or the last return of this process from
 * a stall when that is later (a fresh window). */
uint64_t fl__live_since(const fl__live_clock *k, uint64_t heard_ns);
/* How long a peer last heard from at heard_ns has been silent at now, not counting the time
 * this process did not run.  heard_ns may come from another thread's clock and be after now. */
uint64_t fl__live_quiet(const fl__live_clock *k, uint64_t heard_ns, uint64_t now);
/* 1 when a peer last heard from at heard_ns is past a window of window_ms (<= 0: never). */
int fl__live_silent(const fl__live_clock *k, uint64_t heard_ns, uint64_t now, int window_ms);
/* 1 when this process ran again after a stall within the last ns before now. */
int fl__live_resumed_within(const fl__live_clock *k, uint64_t now, uint64_t ns);

/* The per-request deadline: after a wait slice that was due to end at due_ns, moves
 * *deadline_ns later by the stall (the time this process did not run) and returns the stall. */
uint64_t fl__live_deadline_after(uint64_t *deadline_ns, uint64_t due_ns, uint64_t now);

/* A heartbeat thread: calls beat(arg, now) every period_ms, and applies the stopped-self
 * rule to its own sleeps (a period overrun by FL__LIVE_STALL_NS notes a stall on clock). */
typedef void (*fl__live_beat_fn)(void *arg, uint64_t now);
typedef struct {
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int started, quit;
    uint64_t period_ns;
    fl__live_clock *clock;
    fl__live_beat_fn beat;
    void *arg;
} fl__live_hb;
/* Starts the thread (nothing with period_ms <= 0).  FL_EIO when it cannot start. */
int fl__live_hb_start(fl__live_hb *h, int period_ms, fl__live_clock *clock, fl__live_beat_fn beat, void *arg);
/* Stops and joins it (no-op when not started); blocks for at most one beat. */
void fl__live_hb_stop(fl__live_hb *h);

/* A connection watch (fl__net_conn_set_watch; arg: an fl__live_clock) that applies only the
 * stopped-self rule: for waits whose peer has no heartbeat of its own (the rendezvous). */
int fl__live_watch_self(void *clock, fl_net_conn *c, uint64_t idle_ns, uint64_t stalled_ns);

#endif
