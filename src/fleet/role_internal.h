/*
 * role_internal.h - what the role-maker files share:
 *
 *   role.c           the role object, endpoint lists, PaddleCloudRoleMaker, UserDefinedRoleMaker
 *   hostlist.c       Slurm's node lists and tasks per node, expanded
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
int fl__role_from_tasks(fleet_role *r, char *const *eps, int n, int rank, int (*server_of)(int task, void *arg),
                        void *arg);

/* The error of a parameter-server program (fleet_init) started by a launcher of collective
 * jobs with `n` processes: names the launcher's variables and how to start servers. */
int fl__role_ps_as_collective(const char *launcher, int n, const char *how);

/* ---- hostlist.c ----------------------------------------------------------------------------- */

#define FL_HOSTLIST_MAX 65536 /* hosts after expansion */

/* Expands a Slurm host list ("node[01-04,07],login1", "rack[1-2]-n[1-2]", "10.0.0.[1-2]") into
 * a malloc'ed array of malloc'ed names, in Slurm's order (the last bracket varies fastest;
 * zero padding of the lower bound kept).  `what` names the source in errors, which show the
 * offending character and the expected form. */
int fl__hostlist_expand(const char *list, const char *what, char ***out, int *n);

/* Expands Slurm's tasks per node ("2(x3),1" -> 2,2,2,1) into a malloc'ed array. */
int fl__slurm_tasks_per_node(const char *spec, const char *what, int **out, int *n);

#endif
