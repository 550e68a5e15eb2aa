/*
 * role_slurm.c - the role of a task started by srun (docs/clusters.md, "Slurm").
 *
 * Layout.  srun's default block distribution puts tasks on the step's nodes in order:
 * SLURM_STEP_TASKS_PER_NODE (e.g. "2(x3),1") says how many tasks each node of
 * SLURM_STEP_NODELIST (e.g. "node[01-04]") runs, task ids counting up node by node.  Task i
 * on node n with local index l (i minus the tasks of the nodes before n) listens on
 * n:port_base+l, where
 *
 *   port_base = FLEET_SLURM_PORT_BASE, else 20000 + (SLURM_JOB_ID * 97 + SLURM_STEP_ID * 1009) % 20000
 *
 * so every task computes every endpoint without talking to the others, jobs with consecutive
 * ids start 97 ports apart and concurrent steps of one job 1009 apart.  SLURM_LOCALID and
 * SLURM_NODEID, when set, must agree with this layout (another --distribution is refused).
 *
 * Collective jobs: every task is a worker, worker index = SLURM_PROCID.  Parameter-server
 * jobs: FLEET_SLURM_SERVERS=K makes tasks 0..K-1 the servers (server index = SLURM_PROCID)
 * and the others the workers (worker index = SLURM_PROCID - K).
 */
#include <stdio.h>
#include <string.h>

#include "role_internal.h"

typedef struct {
    int64_t ntasks, procid, nservers;
    char **nodes;
    int nnodes;
    int *tpn;
    int ntpn;
    const char *nodes_var, *tpn_var;
    int port_base;
} slurm_job;

/* The first of the variables that is set. */
static int first_set(const char *const *names, const char **name, const char **value)
{
    for (; *names; names++) {
        FL_CHECK(fl__env_str(*names, NULL, value));
        if (*value) {
            *name = *names;
            return FL_OK;
        }
    }
    *name = NULL;
    return FL_OK;
}

static int port_base(slurm_job *j, int max_local)
{
    int64_t base, job, step;
    const char *set;
    FL_CHECK(fl__env_str("FLEET_SLURM_PORT_BASE", NULL, &set));
    if (set) {
        FL_CHECK(fl__env_int("FLEET_SLURM_PORT_BASE", 0, 1024, 65535 - max_local + 1, &base));
    } else {
        const char *jobv = NULL, *jobs = NULL;
        FL_CHECK(first_set((const char *[]){"SLURM_JOB_ID", "SLURM_JOBID", NULL}, &jobv, &jobs));
        if (!jobv)
            return fl__err(FL_EINVAL, "Slurm role maker: SLURM_JOB_ID is not set: it picks the tasks' ports; "
                                      "set FLEET_SLURM_PORT_BASE (the first port of each node's tasks) instead");
        FL_CHECK(fl__env_int(jobv, 0, 0, INT64_MAX, &job));
        FL_CHECK(fl__env_int("SLURM_STEP_ID", 0, 0, UINT32_MAX, &step));
        base = 20000 + (int64_t)(((uint64_t)job * 97u + (uint64_t)step * 1009u) % 20000u);
        if (base + max_local - 1 > 65535)
            return fl__err(FL_EINVAL,
                           "Slurm role maker: %d tasks on one node do not fit above port %lld: set FLEET_SLURM_PORT_BASE",
                           max_local, (long long)base);
    }
    j->port_base = (int)base;
    return FL_OK;
}

static int read_job(slurm_job *j)
{
    const char *s, *name;
    FL_CHECK(first_set((const char *[]){"SLURM_NTASKS", "SLURM_NPROCS", NULL}, &name, &s));
    if (!name)
        return fl__err(FL_EINVAL,
                       "Slurm role maker: SLURM_NTASKS is not set: expected the number of tasks of the srun step");
    FL_CHECK(fl__env_int(name, 1, 1, FL_HOSTLIST_MAX * 64, &j->ntasks));
    FL_CHECK(
        fl__role_env_required("SLURM_PROCID", "this task's rank in [0, SLURM_NTASKS) (start the program with srun)", &s));
    FL_CHECK(fl__env_int("SLURM_PROCID", 0, 0, j->ntasks - 1, &j->procid));
    FL_CHECK(first_set((const char *[]){"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST", NULL}, &j->nodes_var,
                       &s));
    if (!j->nodes_var)
        return fl__err(
            FL_EINVAL,
            "Slurm role maker: SLURM_STEP_NODELIST is not set: expected the step's node list (start the program with srun)");
    char what[96];
    snprintf(what, sizeof what, "environment variable %s", j->nodes_var);
    FL_CHECK(fl__hostlist_expand(s, what, &j->nodes, &j->nnodes));
    FL_CHECK(first_set((const char *[]){"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE", NULL}, &j->tpn_var, &s));
    if (!j->tpn_var)
        return fl__err(FL_EINVAL,
                       "Slurm role maker: SLURM_STEP_TASKS_PER_NODE is not set: expected tasks per node such as 2(x3),1");
    snprintf(what, sizeof what, "environment variable %s", j->tpn_var);
    FL_CHECK(fl__slurm_tasks_per_node(s, what, &j->tpn, &j->ntpn));
    if (j->ntpn != j->nnodes)
        return fl__err(FL_EINVAL, "Slurm role maker: %s counts tasks for %d nodes but %s lists %d", j->tpn_var, j->ntpn,
                       j->nodes_var, j->nnodes);
    int64_t sum = 0;
    for (int i = 0; i < j->ntpn; i++) sum += j->tpn[i];
    if (sum != j->ntasks)
        return fl__err(FL_EINVAL, "Slurm role maker: %s adds up to %lld tasks but SLURM_NTASKS=%lld", j->tpn_var,
                       (long long)sum, (long long)j->ntasks);
    return FL_OK;
}

/* Checks this task's SLURM_LOCALID / SLURM_NODEID against the block layout. */
static int check_place(const slurm_job *j, int node, int local)
{
    int64_t v;
    FL_CHECK(fl__env_int("SLURM_LOCALID", local, 0, INT32_MAX, &v));
    if (v != local)
        return fl__err(
            FL_EINVAL,
            "Slurm role maker: SLURM_LOCALID=%lld but task %lld is task %d of node %s in the block layout of %s: "
            "start the tasks with srun's default --distribution=block",
            (long long)v, (long long)j->procid, local, j->nodes[node], j->tpn_var);
    FL_CHECK(fl__env_int("SLURM_NODEID", node, 0, INT32_MAX, &v));
    if (v != node)
        return fl__err(FL_EINVAL,
                       "Slurm role maker: SLURM_NODEID=%lld but task %lld is on node %d (%s) in the block layout of %s: "
                       "start the tasks with srun's default --distribution=block",
                       (long long)v, (long long)j->procid, node, j->nodes[node], j->tpn_var);
    return FL_OK;
}

static int first_k_are_servers(int task, void *arg) { return task < *(const int64_t *)arg; }

static int make_role(slurm_job *j, fleet_role *r)
{
    FL_CHECK(read_job(j));
    if (!r->is_collective) {
        const char *k;
        FL_CHECK(fl__env_str("FLEET_SLURM_SERVERS", NULL, &k));
        if (!k && j->ntasks > 1)
            return fl__role_ps_as_collective(
                "srun, SLURM_NTASKS", (int)j->ntasks,
                "set FLEET_SLURM_SERVERS=K: the first K of the SLURM_NTASKS tasks become servers");
        if (!k) return FL_OK; /* one task: the local fallback */
        if (j->ntasks < 2)
            return fl__err(FL_EINVAL, "Slurm role maker: FLEET_SLURM_SERVERS is set but the step has one task: "
                                      "a parameter-server job needs at least one server and one worker");
        FL_CHECK(fl__env_int("FLEET_SLURM_SERVERS", 1, 1, j->ntasks - 1, &j->nservers));
    }
    int max_local = 1, node = -1, local = 0;
    for (int i = 0, first = 0; i < j->nnodes; first += j->tpn[i++]) {
        if (j->tpn[i] > max_local) max_local = j->tpn[i];
        if (node < 0 && j->procid < first + j->tpn[i]) node = i, local = (int)j->procid - first;
    }
    FL_CHECK(check_place(j, node, local));
    FL_CHECK(port_base(j, max_local));
    char **eps = calloc((size_t)j->ntasks, sizeof *eps);
    if (!eps) return fl__err(FL_ENOMEM, "Slurm role maker: out of memory");
    int st = FL_OK, t = 0;
    for (int i = 0; i < j->nnodes && st == FL_OK; i++)
        for (int l = 0; l < j->tpn[i] && st == FL_OK; l++, t++) {
            size_t cap = strlen(j->nodes[i]) + 8;
            if (!(eps[t] = malloc(cap))) st = fl__err(FL_ENOMEM, "Slurm role maker: out of memory");
            else snprintf(eps[t], cap, "%s:%d", j->nodes[i], j->port_base + l);
        }
    if (st == FL_OK) st = fl__role_from_tasks(r, eps, (int)j->ntasks, (int)j->procid, first_k_are_servers, &j->nservers);
    fl__free_strv(eps, (int)j->ntasks);
    if (st == FL_OK)
        FL_INFO(FL_SUB_FLEET, "Slurm task %lld of %lld on %s (local %d), port base %d: %s %d", (long long)j->procid,
                (long long)j->ntasks, j->nodes[node], local, j->port_base,
                r->kind == FLEET_ROLE_SERVER ? "server" : "worker",
                r->kind == FLEET_ROLE_SERVER ? r->server_index : r->worker_index);
    return st;
}

int fleet_role_slurm(int is_collective, fleet_role **out)
{
    if (!out) return fl__err(FL_EINVAL, "fleet_role_slurm: out is NULL");
    *out = NULL;
    fleet_role *r = fl__role_alloc(is_collective);
    if (!r) return FL_ENOMEM;
    slurm_job j;
    memset(&j, 0, sizeof j);
    int st = make_role(&j, r);
    fl__free_strv(j.nodes, j.nnodes);
    free(j.tpn);
    if (st != FL_OK) {
        fleet_role_free(r);
        return st;
    }
    *out = r;
    return FL_OK;
}
