/*
 * role_internal.h - what the role-maker files share:
 *
 *   role.c           the role object, endpoint lists, PaddleCloudRoleMaker, UserDefinedRoleMaker
 *   role_env.c       fleet_role_from_env: which launcher started this process
 *   role_slurm.c     srun tasks (hostlist.c expands Slurm's node lists)
 *   role_torchrun.c  torchrun / Kubernetes PyTorchJob variables (role_rdzv.c: the rendezvous
 *                    that collects every rank's endpoint when the hosts are not known)
 *   role_mpi.c       mpirun ranks (built with FL_HAVE_MPI; refused without it)
 *
 * Every environment variable is read through src/base/env.c.
 */
#ifndef FL_FLEET_ROLE_INTERNAL_H
#define FL_FLEET_ROLE_INTERNAL_H

#include "fleet_internal.h"

/* A fresh role: one local worker (worker_num 1, not distributed).  NULL with an error set
 * when out of memory. */
fleet_role *fl__role_alloc(int is_collective);

/* The variable's value, or FL_EINVAL "environment variable NAME is not set: expected FORM". */
int fl__role_env_required(const char *name, const char *form, const char **out);

/* Fills r's endpoint lists from the endpoints of all n tasks (eps[i] is task i's, copied),
 * task `rank` being this process.  Collective roles: every task is a worker.
 * Parameter-server roles: `server_of(task)` says whether a task is a server; servers and
 * workers are numbered in task order among their kind.  distributed is set when there is
 * more than one task. */
int fl__role_from_tasks(fleet_role *r, char *const *eps, int n, int rank, int (*server_of)(int task, void *arg), void *arg);

/* The error of a parameter-server program (fleet_init) started by a launcher of collective
 * jobs with `n` processes: names the launcher's variables and how to start servers. */
int fl__role_ps_as_collective(const char *launcher, int n, const char *how);

/* fleet_role_torchrun for either mode: a parameter-server program (is_collective 0)
 * started by torchrun with WORLD_SIZE > 1 is refused with fl__role_ps_as_collective. */
int fl__role_torchrun(int is_collective, fleet_role **out);

/* ---- hostlist.c ----------------------------------------------------------------------------- */

#define FL_HOSTLIST_MAX 65536 /* hosts after expansion */

/* Expands a Slurm host list ("node[01-04,07],login1", "rack[1-2]-n[1-2]", "10.0.0.[1-2]") into
 * a malloc'ed array of malloc'ed names, in Slurm's order (the last bracket varies fastest;
 * zero padding of the lower bound kept).  `what` names the source in errors, which show the
 * offending character and the expected form. */
int fl__hostlist_expand(const char *list, const char *what, char ***out, int *n);

/* Expands Slurm's tasks per node ("2(x3),1" -> 2,2,2,1) into a malloc'ed array. */
int fl__slurm_tasks_per_node(const char *spec, const char *what, int **out, int *n);

/* ---- role_rdzv.c ---------------------------------------------------------------------------- */

/* The rendezvous of role_torchrun.c: rank 0 listens on host:port, every other rank connects
 * (authenticated with `secret`), reports "host:port" of a listener it bound on the address
 * it reached rank 0 from, and receives everyone's.  Rank 0 answers with the list once all
 * world_size ranks reported.  Every wait ends by timeout_ms; errors name the peer.  *out is
 * a malloc'ed array of world_size endpoints. */
int fl__rdzv_endpoints(const char *host, int port, int rank, int world_size, const fl_net_secret *secret,
                       int64_t timeout_ms, char ***out);

/* ---- role_mpi.c ----------------------------------------------------------------------------- */

/* Drops r's reference on MPI: the last role of a process that initialised MPI finalises it. */
void fl__role_mpi_release(fleet_role *r);

#endif
