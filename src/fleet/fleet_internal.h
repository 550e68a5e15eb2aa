/* fleet_internal.h - role and facade structures shared inside src/fleet/. */
#ifndef FL_FLEET_INTERNAL_H
#define FL_FLEET_INTERNAL_H

#include "fleet/fleet.h"
#include "../graph/graph_internal.h"

#define FLEET_ROLE_MAGIC 0x524f4c45u
#define FLEET_MAGIC 0x464c4554u

struct fleet_role {
    uint32_t magic;
    int is_collective;
    int distributed;       /* 0: non-distributed fallback */
    fleet_role_kind kind;
    int worker_index, server_index, worker_num;
    char **workers;        /* worker endpoints (may be empty in PS mode) */
    int nworkers;
    char **servers;
    int nservers;
};

struct fl_comm;
struct fl__ps_ctx;

struct fleet {
    uint32_t magic;
    fleet_role *role;
    fleet_strategy strategy;
    char *workers_str, *servers_str;
    struct fl_comm *comm; /* collective mode: the trainers' communicator */
    fl_var *gm_cond;      /* gradient merge: the apply-step condition */
    struct fl__ps_ctx *ps; /* parameter-server mode: tables, client or server, communicator
                            * (src/fleet/ps_internal.h); NULL until fleet_distributed_optimizer */
};

/* Parameter-server mode (src/fleet/ps_mode.c): installs the PS rewrite on opt
 * (fleet_distributed_optimizer's PS branch), and releases the PS state (fleet_free). */
int fl__ps_distributed_optimizer(fleet_t *f, fl_opt *opt);
void fl__ps_free(fleet_t *f);

/* Creates the collective communicator on first use (rendezvous with every trainer, bounded
 * by the collective deadline); a no-op in parameter-server mode. */
int fl__fleet_comm(fleet_t *f);
/* The workers' communicator for collective calls made by every worker (util collectives,
 * global shuffle): the collective one, or in a parameter-server job one created on first
 * use from PADDLE_TRAINER_ENDPOINTS (workers only; FL_EINVAL naming the variable when the
 * endpoints are unknown).  No communicator for one worker or a local run. */
int fl__fleet_worker_comm(fleet_t *f, const char *fn);

/* Splits "a:1,b:2" into a malloc'ed array of malloc'ed endpoints, validating host:port.
 * `what` names the source (environment variable or argument) in errors. */
int fl__parse_endpoints(const char *list, const char *what, char ***out, int *n);
void fl__free_strv(char **v, int n);

#endif
