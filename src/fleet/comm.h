/*
 * comm.h - a fleet's collective communicator as the collective ops see it: the
 * communicator, a ring id the ops carry as an attribute, and a communication thread
 * that runs bucket allreduces while backward goes on.
 */
#ifndef FL_FLEET_COMM_H
#define FL_FLEET_COMM_H

#include "fleet_internal.h"

typedef struct fl_comm fl_comm;

/* Creates the communicator of a collective fleet (rendezvous with every trainer; blocks
 * up to the collective deadline) and registers it under a new ring id. */
int fl__comm_create(const fleet_role *role, fl_comm **out);
void fl__comm_free(fl_comm *c);
int fl__comm_ring_id(const fl_comm *c);
int fl__comm_rank(const fl_comm *c);
int fl__comm_size(const fl_comm *c);
/* The communicator registered under ring_id, or NULL. */
fl_comm *fl__comm_lookup(int64_t ring_id);

/* A communicator is not thread safe.  The programs collective.c builds keep to one rule:
 * the communication thread runs bucket allreduces between c_allreduce_start and
 * c_allreduce_wait; every other collective (these blocking calls) runs on the executor's
 * thread after c_allreduce_wait has drained the queue.  fl__comm_allreduce and friends
 * check it: they fail with FL_ESTATE while bucket jobs are queued.
 *
 * Blocking collectives on this thread (float32 unless dt says otherwise).  op: "sum",
 * "max", "min", "avg". */
int fl__comm_allreduce(fl_comm *c, void *buf, size_t count, fl_dtype dt, const char *op);
int fl__comm_broadcast(fl_comm *c, void *buf, size_t count, fl_dtype dt, int root);
int fl__comm_allgather(fl_comm *c, const void *send, void *recv, size_t count, fl_dtype dt);
int fl__comm_barrier(fl_comm *c);

/* Bucket buffers and the communication thread.  fl__comm_bucket(c, b, n) returns a float
 * buffer of at least n elements for bucket b (kept between steps).  fl__comm_start(c, b, n)
 * queues an in-place sum-allreduce of its first n elements; fl__comm_wait_all() waits for
 * every queued job and returns the first error. */
float *fl__comm_bucket(fl_comm *c, int b, size_t n);
int fl__comm_start(fl_comm *c, int b, size_t n);
int fl__comm_wait_all(fl_comm *c);

#endif
