/*
 * fleet/coll.h - the collective communicator: allreduce, broadcast, allgather,
 * reduce-scatter and barrier among `world_size` processes (ranks).
 *
 * What it is.  A communicator is made once per job (or per group) by every rank with the
 * same endpoint list - PADDLE_TRAINER_ENDPOINTS style "host:port" per rank.  Each rank
 * listens on its own endpoint and connects to every other rank (a full mesh of TCP
 * connections, each authenticated with the job secret as described in fleet/net.h).  The
 * data then moves through one backend, chosen once when the communicator is made:
 *   "shm"  a POSIX shared-memory segment, for ranks on one host sharing /dev/shm;
 *   "tcp"  the ring and latency algorithms over the TCP connections, anywhere;
 *   "mpi"  MPI's nonblocking collectives (MPI_Iallreduce, ...), in a job started by
 *          Open MPI's mpirun whose MPI_COMM_WORLD is exactly this communicator, with MPI
 *          initialised at MPI_THREAD_SERIALIZED or more (as fleet_role_mpi does).  Only
 *          when named: `mpirun -np N -x FLEET_COLL_BACKEND=mpi prog`.
 * By default (opts->backend and FLEET_COLL_BACKEND unset, empty or "auto") it is "shm" when
 * every rank can map the segment and none set disable_shm, else "tcp".  A backend named in
 * opts->backend (or, when that is unset, FLEET_COLL_BACKEND) is used or fl_coll_create
 * fails: an unknown name is FL_EINVAL naming the value and the registered backends, and
 * "shm" where shared memory is impossible (disable_shm set, or a rank that cannot attach
 * the segment: ranks on several hosts) is FL_EINVAL saying why - never a silent fallback
 * to TCP.  "mpi" is refused, before any connection, with FL_EUNSUPPORTED in a build
 * without Open MPI or below MPI_THREAD_SERIALIZED, FL_ESTATE when MPI is not initialised
 * (not started by mpirun) or already finalized, and FL_EINVAL when MPI_COMM_WORLD has
 * another size (a parameter-server job's workers).  Every rank must ask for the same
 * backend.  The TCP connections stay open whatever the backend: they carry abort notices
 * and tell a rank that a peer died.
 *
 * What it is not.  There is no GPU (NCCL) backend and no hierarchical (shared memory within
 * a host + TCP across hosts) algorithm yet: with ranks on several hosts every collective
 * runs over TCP (or over MPI's transports, with "mpi" named under mpirun).  Collectives
 * are blocking; a communicator is not thread safe (use one from one thread at a time - e.g.
 * a communication thread - and make one per concurrent stream).
 *
 * Algorithms (sizes are payload bytes = count * dtype size; per-rank for allgather and
 * reduce-scatter):
 *   shared memory  a segment of per-rank slots, each double buffered (2 x chunk_bytes,
 *                  default 1 MiB), and sequence-numbered flags, one cache line each.
 *                  allreduce up to small_max_bytes (default 64 KiB), and at every size
 *                  with 2 ranks: every rank publishes its vector, chunk by chunk, and
 *                  reduces all of them in rank order (one flag wait per chunk; with 2 ranks
 *                  this moves as many bytes between cores as reduce-scatter + allgather,
 *                  with half the waits).  Larger, with 3 or more ranks: pipelined in
 *                  chunks; in each chunk rank r reduces the r-th 1/n of it from all slots
 *                  and publishes the result, then every rank copies the other parts
 *                  (reduce-scatter + allgather; two flag waits per chunk).  Results of 8 MiB
 *                  and more are written with streaming stores.
 *                  broadcast/allgather/reduce-scatter: the same slots, chunked.
 *                  A wait spins for 20 us when the host has a core per rank, then sleeps
 *                  on a futex that the publishing rank wakes (so a rank that shares its core
 *                  with other busy processes is not starved); pin one rank per core, as
 *                  mpirun does, for the lowest latency.
 *   TCP            allreduce up to small_max_bytes: direct exchange (every rank sends its
 *                  vector to every other and reduces in rank order; one round trip).
 *                  Larger: ring reduce-scatter + ring allgather, in chunks of chunk_bytes,
 *                  each chunk a framed message checked against the op descriptor.
 *                  broadcast: direct below small_max_bytes, a pipelined chain above;
 *                  allgather and reduce-scatter: direct / ring likewise.
 *   MPI            every op first sends its descriptor to every peer and receives theirs
 *                  (point to point, 24 bytes); then one nonblocking MPI collective (in
 *                  pieces above INT_MAX elements), polled with MPI_Test.  Its algorithm is
 *                  MPI's choice.
 * Every rank gets bit-identical results: each element is reduced once, in a fixed order,
 * and then copied (with "mpi", in the order of MPI's algorithm, so inexact float sums may
 * differ from the other backends in the last bit).  float16/bfloat16 are accumulated in
 * float32 and rounded once to nearest-even on store; AVG is SUM divided by world_size (for
 * int64, C division: rounds toward zero).  MAX/MIN with NaN inputs: unspecified which
 * operand wins.
 *
 * Safety.  Every collective carries a sequence number and a descriptor (op, dtype, count,
 * reduction, root); a rank whose call differs from another's (another collective, another
 * count, a skipped call) gets FL_EPROTO naming both ranks' calls, on both sides - data is
 * never reduced across different calls.  No wait lasts longer than timeout_ms: a rank that
 * dies (its connections close) makes the others fail at once with FL_EREMOTE naming its rank
 * and endpoint; a rank that stalls makes them fail with FL_ETIMEDOUT after timeout_ms.  A
 * rank that fails sends an abort notice (with the root cause) to every peer, so ranks not
 * adjacent to the failure report the same cause.
 *
 * Hung ranks.  Every rank sends a heartbeat on each connection every heartbeat_ms (from a
 * thread of the communicator between collectives, from the collective's waits during one).
 * A collective that waits while a peer has sent nothing, not even a heartbeat, for
 * peer_timeout_ms (default 6 s) fails with FL_EREMOTE "rank 1 (host:port) sent nothing, not
 * even a heartbeat, for 6.0 s during allreduce #12 (...): it is stopped or hung" - a rank
 * stopped with SIGSTOP, frozen in a debugger or hung in the kernel.  A rank that is only
 * slow (still computing before it calls the collective) sends heartbeats and is waited for
 * up to timeout_ms.  A rank that was itself stopped gives its peers a fresh window when it
 * runs again instead of blaming them.  Each communicator of two or more ranks runs this one
 * thread; it touches the connections only while no collective runs.  After any error the communicator is
 * broken: further calls return FL_ESTATE with the first error; free it and make a new one.
 * A rank that was late may still complete the call the others gave up on (everything it
 * needed had arrived); its next call then fails with the others' error.  With "mpi", a
 * rank that gives up while an MPI collective is in flight (a peer stalled after every
 * rank had entered the op) cannot cancel it: MPI may still use that call's buffers until
 * the process ends, so end the job after such a failure.
 *
 * Security.  Every connection is authenticated with the job secret the caller passes in
 * opts->secret (the fleet layer loads FLEET_JOB_SECRET[_FILE] once and passes it down);
 * without one, insecure_local must be set and every peer must be on loopback, as for the
 * parameter server.  The secret is never read from the environment here.
 *
 * Environment (read in fl_coll_create through src/base/env.c):
 *   FLEET_COLL_TIMEOUT_MS   per-wait deadline when opts->timeout_ms is 0 (default 30000)
 *   FLEET_COLL_BACKEND      the backend when opts->backend is NULL or "": auto (default),
 *                           shm, tcp or mpi
 *   FLEET_COLL_HEARTBEAT_MS heartbeat period when opts->heartbeat_ms is 0 (default 1000;
 *                           -1: none, and no silent-peer check)
 *   FLEET_COLL_PEER_TIMEOUT_MS  a peer silent this long fails a waiting collective, when
 *                           opts->peer_timeout_ms is 0 (default 6000; -1: off)
 *   FLEET_NET_MAX_PENDING, FLEET_NET_MAX_PENDING_PER_SOURCE, FLEET_NET_HANDSHAKE_TIMEOUT_MS
 *                           bounds on the unauthenticated connections the rendezvous
 *                           holds (fleet/net.h)
 */
#ifndef FLEET_COLL_H
#define FLEET_COLL_H

#include <stddef.h>
#include <stdint.h>

#include "fleet/base.h"
#include "fleet/net.h"
#include "fleet/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { FL_COLL_SUM = 0, FL_COLL_MAX = 1, FL_COLL_MIN = 2, FL_COLL_AVG = 3, FL_COLL_OP_COUNT } fl_coll_op;

/* "sum", "max", "min", "avg" (case-insensitive) -> op; FL_EINVAL otherwise. */
FL_API int fl_coll_op_parse(const char *name, fl_coll_op *out);
FL_API const char *fl_coll_op_name(fl_coll_op op);

typedef struct fl_coll fl_coll;

typedef struct {
    int rank;                     /* this process, 0 <= rank < world_size */
    int world_size;               /* number of ranks, >= 1 */
    const char *const *endpoints; /* world_size "host:port" strings; this rank listens on
                                     endpoints[rank] (bound to that host only) */
    const fl_net_secret *secret;  /* job secret; NULL: insecure_local must be set (as in
                                     fleet/ps.h; with one rank too).  Borrowed: read during
                                     fl_coll_create only.  Never taken from the environment
                                     here: the caller loads it (fl_net_secret_from_env). */
    int insecure_local;           /* 1: accept no secret, loopback peers only */
    int timeout_ms;               /* 0: FLEET_COLL_TIMEOUT_MS or 30000 */
    int disable_shm;              /* 1: TCP only, even on one host */
    fl_net_listener *listener;    /* optional: an already bound listener for this rank's
                                     endpoint (e.g. bound to port 0 before the endpoints
                                     were published).  Borrowed: it is used during
                                     fl_coll_create only, and the caller frees it. */
    size_t small_max_bytes;       /* 0: 65536.  Latency algorithms up to this size. */
    size_t chunk_bytes;           /* 0: 1048576.  Pipeline chunk (and shm slot size). */
    const char *backend;          /* "shm", "tcp", "mpi" or "auto"; NULL or "":
                                     FLEET_COLL_BACKEND, else auto (see the top of this file) */
    int heartbeat_ms;             /* 0: FLEET_COLL_HEARTBEAT_MS or 1000; < 0: no heartbeats
                                     (and no silent-peer check) */
    int peer_timeout_ms;          /* 0: FLEET_COLL_PEER_TIMEOUT_MS or 6000; < 0: off */
    const char *allreduce_dtype;  /* wire dtype of float32 allreduces: "float32" (default),
                                     "bfloat16" ("bf16") or "float16" ("fp16"); NULL or "":
                                     FLEET_COLL_ALLREDUCE_DTYPE, else float32.  See
                                     fl_coll_allreduce. */
} fl_coll_opts;

/* Creates the communicator: checks a named backend, listens on endpoints[rank] (unless
 * opts->listener is given), connects to every other rank and accepts their connections,
 * authenticates each connection, checks that all ranks agree on world size, endpoints,
 * tuning and the backend asked for, and sets the backend up.  Blocks until all ranks have
 * joined or timeout_ms passes (FL_ETIMEDOUT naming the ranks that did not join, and any
 * connection that was refused, e.g. for a wrong secret).  Connections from processes that fail the
 * handshake are refused and logged; the rendezvous keeps waiting for the real rank.
 * world_size 1 needs no network.  The options (and endpoint strings) are copied. */
FL_API int fl_coll_create(const fl_coll_opts *opts, fl_coll **out);
/* Closes the connections and the backend (unmaps shared memory).  Peers blocked in a collective with this
 * rank fail with FL_EREMOTE.  NULL is ignored. */
FL_API void fl_coll_free(fl_coll *c);
FL_API int fl_coll_rank(const fl_coll *c);
FL_API int fl_coll_size(const fl_coll *c);
/* The backend this communicator's collectives use: "shm", "tcp" or "mpi"; "self" for a one-rank
 * communicator (it needs none: its collectives are local copies, though a backend it named
 * was still checked); NULL for an invalid handle.  A static string. */
FL_API const char *fl_coll_backend_name(const fl_coll *c);
/* 1 if the collectives of this communicator use shared memory (the "shm" backend). */
FL_API int fl_coll_uses_shm(const fl_coll *c);
/* Bytes this rank has put on its transport for collectives since fl_coll_create: TCP bytes
 * written to the sockets (message headers included, heartbeats not), shared-memory bytes
 * written into the segment.  0 for one rank or the mpi backend (MPI moves the data).
 * Thread-safe (read atomically). */
FL_API uint64_t fl_coll_bytes_sent(const fl_coll *c);
/* The wire dtype of float32 allreduces: FL_FLOAT32, FL_BFLOAT16 or FL_FLOAT16. */
FL_API fl_dtype fl_coll_allreduce_dtype(const fl_coll *c);

/* All of these block until every rank has made the same call, and fail as described at the
 * top of this file.  Buffers are the caller's; counts are elements of dt, which may be
 * FL_FLOAT32, FL_FLOAT64, FL_INT64, FL_FLOAT16 or FL_BFLOAT16 (FL_INT32 too, for
 * broadcast and allgather).  count 0 is valid (the call still synchronises and checks the
 * descriptor).  Buffers may be NULL only when their size is 0. */

/* recv[i] = op over ranks of send[i], i < count.  send == recv is in place; other overlap
 * is not allowed. */
/* Compression: with allreduce_dtype bfloat16 or float16, a float32 allreduce is rounded to
 * that dtype (round to nearest even), reduced with the 16-bit values on the wire and every
 * partial sum computed in float32 and rounded again, and widened back to float32: half
 * the bytes, a relative error of a few 16-bit ulps (2^-8 for bfloat16, 2^-11 for float16,
 * times about log2(world size)).  A float16 result that is not finite (a value or a sum
 * beyond +-65504, or an inf/NaN input) is FL_EINVAL on every rank, naming the first such
 * element, instead of a silent inf; recv then holds the float16 result widened, and the
 * communicator stays usable.  Other dtypes are never compressed. */
FL_API int fl_coll_allreduce(fl_coll *c, const void *send, void *recv, size_t count, fl_dtype dt, fl_coll_op op);
/* buf (count elements) of rank root is copied to buf of every rank. */
FL_API int fl_coll_broadcast(fl_coll *c, void *buf, size_t count, fl_dtype dt, int root);
/* recv[r * count_per_rank + i] = send of rank r [i]; recv holds world_size * count_per_rank
 * elements.  send may be recv + rank * count_per_rank (in place). */
FL_API int fl_coll_allgather(fl_coll *c, const void *send, void *recv, size_t count_per_rank, fl_dtype dt);
/* recv[i] = op over ranks of send[rank * count_per_rank + i]; send holds world_size *
 * count_per_rank elements, recv count_per_rank.  send and recv must not overlap. */
FL_API int fl_coll_reduce_scatter(fl_coll *c, const void *send, void *recv, size_t count_per_rank, fl_dtype dt,
                                  fl_coll_op op);
/* Returns when every rank has entered the barrier. */
FL_API int fl_coll_barrier(fl_coll *c);

#ifdef __cplusplus
}
#endif
#endif
