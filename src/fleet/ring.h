/*
 * ring.h - the workers' communicator of a fleet as the facade, the runtimes and the
 * collective ops see it: the communicator, a ring id the ops carry as an attribute, and a
 * communication thread that runs bucket allreduces while backward goes on.
 */
#ifndef FL_FLEET_RING_H
#define FL_FLEET_RING_H

#include "fleet_internal.h"

typedef struct fl_ring fl_ring;

/* Creates the communicator among the role's workers (rendezvous with every worker; blocks
 * up to the collective deadline) and registers it under a new ring id.  secret: the job
 * secret (fl__fleet_secret), required for more than one worker.  allreduce_dtype: the wire
 * dtype of float32 allreduces (fl_coll_opts.allreduce_dtype; NULL: FLEET_COLL_ALLREDUCE_DTYPE
 * or float32). */
int fl__ring_create(const fleet_role *role, const fl_net_secret *secret, const char *allreduce_dtype, fl_ring **out);
void fl__ring_free(fl_ring *c);
int fl__ring_id(const fl_ring *c);
int fl__ring_rank(const fl_ring *c);
int fl__ring_size(const fl_ring *c);
/* The communicator registered under ring_id, or NULL. */
fl_ring *fl__ring_lookup(int64_t ring_id);

/* A communicator is not thread safe.  The programs collective/rewrite.c builds keep to one rule:
 * the communication thread runs bucket allreduces between c_allreduce_start and
 * c_allreduce_wait; every other collective (these blocking calls) runs on the executor's
 * thread after c_allreduce_wait has drained the queue.  fl__ring_allreduce and friends
 * check it: they fail with FL_ESTATE while bucket jobs are queued.
 *
 * Blocking collectives on this thread (float32 unless dt says otherwise).  op: "sum",
 * "max", "min", "avg". */
int fl__ring_allreduce(fl_ring *c, void *buf, size_t count, fl_dtype dt, const char *op);
int fl__ring_broadcast(fl_ring *c, void *buf, size_t count, fl_dtype dt, int root);
int fl__ring_allgather(fl_ring *c, const void *send, void *recv, size_t count, fl_dtype dt);
int fl__ring_barrier(fl_ring *c);

/* Bucket buffers and the communication thread.  fl__ring_bucket(c, b, n) returns a float
 * buffer of at least n elements for bucket b (kept between steps).  fl__ring_start(c, b, n)
 * queues an in-place sum-allreduce of its first n elements; fl__ring_wait_all() waits for
 * every queued job and returns the first error. */
/* Bytes this rank has put on the transport (fl_coll_bytes_sent; 0 on a ring of one). */
uint64_t fl__ring_bytes_sent(const fl_ring *c);
/* DGC's exchange (collective/dgc.c) counts here, per step: one exchange of `bytes` at step
 * `step`, sparse (top-k pairs) or dense.  Read with fl__ring_dgc_stats (executor thread). */
void fl__ring_dgc_count(fl_ring *c, int64_t step, int sparse, uint64_t bytes);
fleet_dgc_stats fl__ring_dgc_stats(const fl_ring *c);

float *fl__ring_bucket(fl_ring *c, int b, size_t n);
int fl__ring_start(fl_ring *c, int b, size_t n);
int fl__ring_wait_all(fl_ring *c);

#endif
