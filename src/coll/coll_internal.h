/*
 * coll_internal.h - private structures of the collective communicator: the handle, the op
 * descriptor every collective carries, the TCP message header, and the functions the files
 * of this module share.  The backend table is in backend.h.
 *
 *   comm.c     create/free, rendezvous, setup messages, failure and abort notices
 *   ops.c      public entry points: argument checks, descriptors, dispatch to the backend
 *   backend.c  the registry of backends and the choice of one (by name or automatic)
 *   desc.c     backend-neutral helpers: descriptor text and wire header, peer labels and
 *              errors, the watch over the connections, scratch space
 *   alive.c    heartbeats and the watch over silent peers (stopped or hung ranks)
 *   tcp.c      the TCP progress engine (non-blocking, every peer at once, deadlines)
 *   tcp_ops.c  the "tcp" backend: direct exchange, ring reduce-scatter/allgather, chain
 *   shm.c      the "shm" backend: segment, flag waits, shared-memory algorithms
 *   mpi.c      the "mpi" backend: MPI's nonblocking collectives, only when named
 *   reduce.c   reduction kernels for every dtype and op; float16/bfloat16 conversion
 *
 * Includes: backend.h includes this header, never the reverse; .c files include one of
 * the two.  desc.c calls no backend, and a backend calls no other backend.
 */
#ifndef FL_COLL_INTERNAL_H
#define FL_COLL_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "../base/base_internal.h"
#include "../net/net_internal.h" /* little-endian helpers only; coll uses the public net API */
#include "fleet/coll.h"

#define FL_COLL_MAGIC 0x4c4f4346u /* "FCOL" */
#define FL_COLL_DEFAULT_TIMEOUT_MS 30000
#define FL_COLL_DEFAULT_SMALL_MAX (64u << 10)
#define FL_COLL_DEFAULT_CHUNK (1u << 20)
#define FL_COLL_MSG_MAX 1024      /* abort reasons */
#define FL_COLL_NT_MIN (8u << 20) /* results this large are written with streaming stores */

/* What a collective call is; equal on every rank for the same call. */
typedef enum { K_ALLREDUCE = 1, K_BROADCAST, K_ALLGATHER, K_REDUCE_SCATTER, K_BARRIER } fl__coll_kind;

typedef struct {
    uint64_t seq;   /* 1, 2, ... per communicator */
    uint64_t count; /* count, or count_per_rank */
    uint8_t kind, dtype, redop, pad;
    int32_t root;
} fl__coll_desc;

/* TCP message header (48 bytes, little-endian):
 *   0 magic "FLC1" u32 | 4 kind u16 (DATA, ABORT) | 6 op kind u16 | 8 seq u64 | 16 count u64 |
 *   24 dtype u8 | 25 redop u8 | 26 reserved u16 | 28 root i32 | 32 tag u64 | 40 len u64
 * DATA: the payload follows; tag identifies the message within the op (step << 32 | chunk)
 * and must be the one the receiver expects.  ABORT: the descriptor of the op the sender
 * failed in, tag holds the status (int64), the reason text (len <= FL_COLL_MSG_MAX bytes)
 * follows.  HEARTBEAT: a zero descriptor, no payload; skipped wherever a header is read
 * (alive.c). */
#define FL_COLL_HDR 48
#define FL_COLL_WIRE_MAGIC 0x31434c46u /* "FLC1" */
enum { FL_COLL_MSG_DATA = 1, FL_COLL_MSG_ABORT = 2, FL_COLL_MSG_HEARTBEAT = 3 };

/* One peer's share of a TCP exchange round: at most one message out, one in. */
typedef struct {
    int s_on;
    uint8_t s_hdr[FL_COLL_HDR];
    const uint8_t *s_buf;
    size_t s_len, s_done; /* s_done counts header + payload bytes */
    int r_on;
    uint8_t r_hdr[FL_COLL_HDR];
    size_t r_hdone;
    uint8_t *r_buf;
    size_t r_len, r_done;
    uint64_t r_tag;
} fl__xfer;

typedef struct fl__coll_backend fl__coll_backend; /* backend.h */

struct fl_coll {
    uint32_t magic;
    int rank, size;
    int timeout_ms;
    size_t small_max, chunk;
    int spin;            /* 1 when this host has a core per local rank: spin before sleeping */
    int64_t nofile;      /* descriptors counted in fl__nofile_hold: a connection per peer */
    char **endpoints;    /* [size] */
    fl_net_conn **conns; /* [size], NULL at [rank] */
    int *tx_mid;         /* [size]: our stream to that peer stops mid-message */
    int *idle_blocked;   /* [size]: the peer's next message belongs to a later op */
    int *peer_closed;    /* [size]: the peer closed its end (it finished, freed or died) */
    fl__xfer *xf;        /* [size] */
    uint64_t seq;        /* sequence number of the last op started */
    fl__coll_desc cur;   /* descriptor of the op in progress (for abort notices) */
    int failed;          /* first error status, 0 while healthy */
    int abort_seen;      /* set when an abort notice was read */
    int pending_abort;   /* status of an abort notice for a later op (0: none) */
    char pending_msg[FL_COLL_MSG_MAX];
    char failmsg[FL_COLL_MSG_MAX];
    void *scratch; /* grown on demand, 64-byte aligned */
    size_t scratch_cap;
    fl_dtype ar_dtype;            /* wire dtype of float32 allreduces (ops.c) */
    uint16_t *cbuf;               /* their 16-bit buffer, grown on demand */
    int wire_half;                /* 1 during such an allreduce: partial sums travel in the
                                     16-bit dtype too (tcp_ops.c), not widened to float32 */
    size_t cbuf_cap;              /* elements */
    _Atomic uint64_t bytes_sent;  /* fl_coll_bytes_sent: tcp.c and shm.c add to it */
    const fl__coll_backend *backend; /* chosen in fl_coll_create; NULL with one rank */
    void *be;                        /* the backend's state (its setup makes it, its close frees it) */
    /* liveness (alive.c); everything below op_mu is used under it */
    pthread_mutex_t op_mu; /* held by a running collective, and by the heartbeat thread
                               * while it uses the connections (recursive) */
    fl__live_hb hb;        /* the heartbeat thread (src/net/liveness.h) */
    int hb_inited;
    int hb_ms, peer_timeout_ms;     /* -1: off */
    uint64_t *heard_ns;             /* [size]: when something last arrived from the peer */
    uint64_t *sent_ns;              /* [size]: when the last heartbeat to the peer started */
    uint8_t (*hb_out)[FL_COLL_HDR]; /* [size]: the heartbeat being sent */
    uint8_t *hb_left;               /* [size]: its bytes not yet sent */
    uint8_t *hb_quiet;              /* [size]: the peer closed its end: send it nothing more */
    uint64_t tick_ns;               /* the collectives' last heartbeat work */
    fl__live_clock live;            /* when this process last ran again after a stop */
};

/* comm.c */
/* Records the first failure (status st, message from fl_last_error()), sends abort notices
 * to every peer whose stream is at a message boundary, shuts the connections down, and
 * returns st with the error message restored. */
int fl__coll_fail(fl_coll *c, int st);

/* alive.c: heartbeats and silent peers */
/* Reads the options' and the environment's heartbeat_ms / peer_timeout_ms and allocates;
 * start launches the thread (after the rendezvous and the backend's setup); free stops it. */
int fl__coll_hb_init(fl_coll *c, const fl_coll_opts *o);
int fl__coll_hb_start(fl_coll *c);
void fl__coll_hb_stop(fl_coll *c);
void fl__coll_hb_free(fl_coll *c);
/* A collective holds op_mu from start to end (the heartbeat thread keeps off meanwhile). */
void fl__coll_op_begin(fl_coll *c);
void fl__coll_op_end(fl_coll *c);
/* Heartbeat work inside a collective's wait, at most every 50 ms: sends heartbeats that are
 * due, notes a stop of this process, and fails (FL_EREMOTE naming the rank) when a peer
 * that is neither closed nor ahead of us (idle_blocked) has sent nothing for
 * peer_timeout_ms.  Called by fl__coll_check_peers (so by every backend that waits) and by
 * the TCP engine. */
int fl__coll_tick(fl_coll *c, const fl__coll_desc *d);
/* Sends what is left of a heartbeat to p (hb_left[p] > 0 afterwards if the socket is full).
 * Anything else sent to p must wait until hb_left[p] is 0. */
int fl__coll_hb_flush(fl_coll *c, int p);
/* Consumes the heartbeats at the head of p's stream (and stamps heard_ns[p] when anything
 * is there). */
int fl__coll_skip_heartbeats(fl_coll *c, int p);

/* desc.c: backend-neutral helpers */
/* "allreduce #5 (count 1000, float32, sum)" */
void fl__coll_desc_str(const fl__coll_desc *d, char *buf, size_t cap);
int fl__coll_desc_equal(const fl__coll_desc *a, const fl__coll_desc *b);
/* Writes / reads the message header above (d: the op descriptor it carries). */
void fl__coll_hdr(uint8_t *h, const fl__coll_desc *d, uint16_t kind, uint64_t tag, uint64_t len);
void fl__coll_hdr_desc(const uint8_t *h, fl__coll_desc *d);
/* "rank 3 (127.0.0.1:4003)" */
const char *fl__coll_peer(const fl_coll *c, int p);
/* Grows c->scratch to at least n bytes; returns it or NULL (error set).  The contents are
 * not kept across growth. */
void *fl__coll_scratch(fl_coll *c, size_t n);
/* FL_EPROTO "collective mismatch: rank r (...) called <mine> but rank p (...) called <theirs>" */
int fl__coll_mismatch_error(fl_coll *c, const fl__coll_desc *mine, const fl__coll_desc *theirs, int p);
/* FL_EREMOTE "rank p (...) closed its connection during <op> ..." (mid: in a message) */
int fl__coll_closed_error(fl_coll *c, const fl__coll_desc *d, int p, int mid);
/* Reads an abort notice whose header is in h from peer p and returns its status with the
 * message "rank p (...) aborted <op>: <reason>". */
int fl__coll_read_abort(fl_coll *c, int p, const uint8_t *h);
/* Looks at the next header on peer p's connection (which must sit at a message boundary)
 * without consuming data (heartbeats in front of it are consumed).  Abort notices are consumed and turned into errors; a closed
 * peer is marked (not an error: it may have finished); a data message (for a later op)
 * marks the connection busy, if the backend sends data on the connections at all. */
int fl__coll_check_idle(fl_coll *c, const fl__coll_desc *d, int p);
/* Checks the connections of the given peers (all when only is NULL) for an abort notice
 * without waiting; an abort is returned as an error.  With only NULL it also does the
 * heartbeat work (fl__coll_tick): a peer silent for peer_timeout_ms is an error too.  A peer that closed its end is only
 * marked in c->peer_closed: it may have finished the op legitimately, so callers decide
 * (a peer we still need data from has died). */
int fl__coll_check_peers(fl_coll *c, const fl__coll_desc *d, const int *only, int nonly);

/* tcp.c: the progress engine of the "tcp" backend */
/* Queues a message to / from peer p in c->xf (the round runs in fl__tcp_run). */
void fl__tcp_send(fl_coll *c, int p, const fl__coll_desc *d, uint64_t tag, const void *buf, size_t len);
void fl__tcp_recv(fl_coll *c, int p, uint64_t tag, void *buf, size_t len);
/* Runs every queued message to completion; no wait lasts beyond timeout_ms without
 * progress.  Checks each received header against d. */
int fl__tcp_run(fl_coll *c, const fl__coll_desc *d);

/* reduce.c */
/* dst[i] = srcs[0][i] op srcs[1][i] op ... (in that order), accumulated in float32 for
 * float16/bfloat16 sources, then divided by avg_div when op is AVG, then stored as dst_dt.
 * src_dt is dst_dt, or float32 with a float16/bfloat16 dst_dt.  dst may be one of srcs
 * exactly (not a partial overlap).  nsrc >= 1. */
void fl__coll_reduce(void *dst, fl_dtype dst_dt, const void *const *srcs, int nsrc, fl_dtype src_dt, size_t n,
                     fl_coll_op op, int avg_div);
/* Same, for a dst that is none of srcs, written with non-temporal stores (for results
 * larger than the caches, which are then not read back before being written). */
void fl__coll_reduce_nt(void *dst, fl_dtype dst_dt, const void *const *srcs, int nsrc, fl_dtype src_dt, size_t n,
                        fl_coll_op op, int avg_div);
/* float16/bfloat16 <-> float32 (round to nearest even; NaN stays NaN). */
void fl__coll_to_f32(float *dst, const void *src, fl_dtype dt, size_t n);
void fl__coll_from_f32(void *dst, fl_dtype dt, const float *src, size_t n);

static inline int fl__is_half(fl_dtype dt) { return dt == FL_FLOAT16 || dt == FL_BFLOAT16; }

/* Segment i of n elements split into k parts (the first n % k parts one longer). */
static inline size_t fl__seg_off(size_t n, int k, int i)
{
    size_t q = n / (size_t)k, r = n % (size_t)k;
    return (size_t)i * q + ((size_t)i < r ? (size_t)i : r);
}
static inline size_t fl__seg_len(size_t n, int k, int i) { return n / (size_t)k + ((size_t)i < n % (size_t)k); }

static inline void fl__cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

#endif
