/*
 * backend.h - a collective backend is a table of functions that moves a communicator's
 * data: "shm" (a shared-memory segment on one host, shm.c), "tcp" (direct exchange, rings
 * and chains over the communicator's TCP connections, tcp.c + tcp_ops.c) and "mpi" (MPI's
 * nonblocking collectives in a job started by mpirun, only when named, mpi.c).  The
 * backend is chosen once, in fl_coll_create; ops.c checks arguments, fills the descriptor
 * and applies the failure rule, then calls c->backend->allreduce(...) and so on.
 *
 * Whatever the backend, the rendezvous (comm.c) has connected every pair of ranks over
 * TCP, and those connections stay open: they carry abort notices and heartbeats, and tell
 * a rank that a peer died.  A backend that waits on something else (memory flags, another
 * library) calls fl__coll_check_peers(c, d, NULL, 0) every few hundred microseconds while
 * it waits - which also sends this rank's heartbeats and fails when a peer has been silent
 * for peer_timeout_ms (alive.c) - and gives up after c->timeout_ms without progress
 * (counted from c->live.resumed_ns when that is later: the time this process ran again after
 * a stop), so a dead, aborting, stopped or stalled peer fails the op on every rank.  The
 * collective runs under c->op_mu (ops.c takes it): the heartbeat thread stays away.
 *
 * How to add a backend (mpi.c is one that followed this):
 *   1. write src/coll/<name>.c ending with `const fl__coll_backend fl__coll_backend_<name>`;
 *      its functions follow the contracts of the struct below, keep their state in c->be,
 *      and report failures with fl__err naming the peer (fl__coll_peer) and the op
 *      (fl__coll_desc_str): ops.c turns any error into the communicator's failure.  Check
 *      the descriptor on every rank before any data is combined (exchange it first, or
 *      carry it with the data).  If the library cannot cancel an operation (MPI's
 *      collectives), a failed wait leaves it in flight: keep alive whatever buffers of
 *      the backend it uses (close then leaks them) and say so in the file's comment;
 *   2. declare it at the end of this file and add its row to backends[] in backend.c
 *      (the automatic choice tries the rows in table order and "tcp" always accepts, so
 *      put a backend that should only run when named after "tcp"); a build without its
 *      library still compiles the file, to a row whose `available` refuses;
 *   3. use `available` to refuse what cannot work (built without the library, an option
 *      that rules it out), with a message saying why.  It runs for every row on every
 *      communicator, named or not, so it must be cheap and harmless where the library is
 *      unused (the mpi row asks MPI_Initialized first, callable before MPI_Init);
 *   4. add it to the list in include/fleet/coll.h and docs/collective.md (and to the
 *      registered names that test_coll's unknown-backend case expects), and run the
 *      correctness suite with it named (named_suite in tests/test_coll.c; a backend that
 *      needs its own launcher, as mpi needs mpirun, gets its own test that runs the same
 *      cases: tests/test_coll_mpi.c).
 */
#ifndef FL_COLL_BACKEND_H
#define FL_COLL_BACKEND_H

#include "coll_internal.h"

struct fl__coll_backend {
    const char *name; /* what FLEET_COLL_BACKEND and fl_coll_opts.backend name it by */
    /* Whether this backend can serve c (rank, size, endpoints and tuning are set; no
     * connection exists yet) with options o, on this build.  FL_OK, or an error saying why
     * not (e.g. FL_EINVAL "disable_shm is set", FL_EUNSUPPORTED "built without MPI").
     * Called on every rank before the rendezvous: when the backend was named, a refusal
     * fails fl_coll_create; in the automatic choice, a refusal on any rank skips the row on
     * every rank.  NULL: always available. */
    int (*available)(const fl_coll *c, const fl_coll_opts *o);
    /* Sets the backend up over the communicator's connections (world size >= 2, after the
     * rendezvous, at the same point on every rank, before deadline_ns).  Sets *used = 1
     * and c->be when ready.  In the automatic choice (named = 0) it may decline with
     * *used = 0, and then must do so on every rank (decide collectively, e.g. rank 0
     * decides and tells the others); named = 1: it fails instead of declining, with a
     * message saying which rank could not and why.  On error it leaves nothing behind.
     * NULL: nothing to set up. */
    int (*setup)(fl_coll *c, int named, uint64_t deadline_ns, int *used);
    /* Releases c->be (which may be NULL).  Called once, from fl_coll_free. NULL: nothing. */
    void (*close)(fl_coll *c);
    /* The collectives, for world size >= 2, with arguments already checked (see
     * fleet/coll.h for their meaning) and d the descriptor every rank must agree on.
     * reduce_scatter may be NULL: ops.c then runs an allreduce into a temporary buffer. */
    int (*allreduce)(fl_coll *c, const fl__coll_desc *d, const void *send, void *recv, size_t n, fl_dtype dt,
                     fl_coll_op op);
    int (*broadcast)(fl_coll *c, const fl__coll_desc *d, void *buf, size_t n, fl_dtype dt, int root);
    int (*allgather)(fl_coll *c, const fl__coll_desc *d, const void *send, void *recv, size_t n, fl_dtype dt);
    int (*reduce_scatter)(fl_coll *c, const fl__coll_desc *d, const void *send, void *recv, size_t n, fl_dtype dt,
                          fl_coll_op op);
    int (*barrier)(fl_coll *c, const fl__coll_desc *d);
    /* 1: data messages travel on the TCP connections, so one read while idle belongs to a
     * later op; 0: only abort notices may arrive there (anything else is FL_EPROTO). */
    int data_on_conns;
};

/* backend.c */
/* Resolves the request (opts->backend, else FLEET_COLL_BACKEND; NULL, "" or "auto": the
 * automatic choice) into *named (NULL for auto) and *usable, a bit per row of backends[]
 * that is available here (bit i = row i).  An unknown name is FL_EINVAL naming the field
 * or variable, the value and the registered backends; a named backend that is not
 * available fails with its reason.  *request_hash identifies the request, so the ranks
 * can check that they all asked for the same thing. */
int fl__coll_backend_pick(const fl_coll *c, const fl_coll_opts *o, const fl__coll_backend **named, uint32_t *usable,
                          uint64_t *request_hash);
/* Sets up the named backend, or else the first row usable on every rank (usable_all) that
 * accepts, and stores it in c->backend. */
int fl__coll_backend_setup(fl_coll *c, const fl__coll_backend *named, uint32_t usable_all, uint64_t deadline_ns);

extern const fl__coll_backend fl__coll_backend_shm; /* shm.c */
extern const fl__coll_backend fl__coll_backend_tcp; /* tcp_ops.c */
extern const fl__coll_backend fl__coll_backend_mpi; /* mpi.c (a refusal when built without MPI) */

/* mpi.c: the largest count of one MPI call on c (default INT_MAX), lowered by tests so that
 * small buffers take the paths that split large ones.  FL_EINVAL unless c uses the "mpi"
 * backend. */
int fl__coll_mpi_max_count(fl_coll *c, size_t n);

#endif
