/*
 * role_torchrun.c - the role of a process started by torchrun, or by a Kubernetes
 * PyTorchJob (docs/clusters.md, "torchrun and Kubernetes").  Collective jobs only.
 *
 * Variables: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (required); LOCAL_RANK and
 * LOCAL_WORLD_SIZE (both or neither; neither means one process per node, as a PyTorchJob
 * without torchrun).  Every node runs LOCAL_WORLD_SIZE processes and node n holds ranks
 * n*LOCAL_WORLD_SIZE .. (n+1)*LOCAL_WORLD_SIZE-1 (torchrun's numbering with a fixed
 * --nproc_per_node), so LOCAL_RANK must be RANK % LOCAL_WORLD_SIZE.
 *
 * Where rank r listens, by the first rule that applies:
 *   1. FLEET_WORKER_HOSTS=h0,h1,... (one host per node): h[r / LOCAL_WORLD_SIZE]:port_base + LOCAL_RANK
 *   2. one node (WORLD_SIZE == LOCAL_WORLD_SIZE): MASTER_ADDR:port_base + LOCAL_RANK
 *   3. several nodes: a rendezvous (role_rdzv.c) at MASTER_ADDR:FLEET_RENDEZVOUS_PORT (default
 *      MASTER_PORT + 1; torchrun's own store holds MASTER_PORT), authenticated with the job
 *      secret; each rank reports a port it bound on the address it reaches MASTER_ADDR from.
 * port_base = FLEET_TORCHRUN_PORT_BASE, default MASTER_PORT + 1.
 */
#include <stdio.h>
#include <string.h>

#include "role_internal.h"

typedef struct {
    int64_t rank, world, local, lws, mport;
    const char *maddr;
} tr_job;

static int read_job(tr_job *j)
{
    const char *s, *lr, *lw;
    FL_CHECK(fl__role_env_required("WORLD_SIZE", "the number of processes of the job (torchrun sets it)", &s));
    FL_CHECK(fl__env_int("WORLD_SIZE", 1, 1, 1 << 20, &j->world));
    FL_CHECK(fl__role_env_required("RANK", "this process's rank in [0, WORLD_SIZE) (torchrun sets it)", &s));
    FL_CHECK(fl__env_int("RANK", 0, 0, j->world - 1, &j->rank));
    FL_CHECK(fl__role_env_required("MASTER_ADDR", "the host of rank 0 (torchrun sets it)", &j->maddr));
    FL_CHECK(fl__role_env_required("MASTER_PORT", "a port of rank 0's host (torchrun sets it)", &s));
    FL_CHECK(fl__env_int("MASTER_PORT", 0, 1, 65535, &j->mport));
    if (strlen(j->maddr) >= FL_NET_HOST_MAX || strchr(j->maddr, ',') || strchr(j->maddr, ' '))
        return fl__err(FL_EINVAL, "environment variable MASTER_ADDR='%s' is invalid: expected one host name or address",
                       j->maddr);
    FL_CHECK(fl__env_str("LOCAL_RANK", NULL, &lr));
    FL_CHECK(fl__env_str("LOCAL_WORLD_SIZE", NULL, &lw));
    if (!lr != !lw)
        return fl__err(FL_EINVAL,
                       "torchrun role maker: %s is set but %s is not: set both (torchrun does) or neither "
                       "(one process per node)",
                       lr ? "LOCAL_RANK" : "LOCAL_WORLD_SIZE", lr ? "LOCAL_WORLD_SIZE" : "LOCAL_RANK");
    FL_CHECK(fl__env_int("LOCAL_WORLD_SIZE", 1, 1, j->world, &j->lws));
    FL_CHECK(fl__env_int("LOCAL_RANK", 0, 0, j->lws - 1, &j->local));
    if (j->world % j->lws)
        return fl__err(FL_EINVAL,
                       "torchrun role maker: WORLD_SIZE=%lld is not a multiple of LOCAL_WORLD_SIZE=%lld: "
                       "every node must run the same number of processes",
                       (long long)j->world, (long long)j->lws);
    if (j->local != j->rank % j->lws)
        return fl__err(FL_EINVAL,
                       "torchrun role maker: LOCAL_RANK=%lld but RANK=%lld with LOCAL_WORLD_SIZE=%lld gives %lld: "
                       "expected the ranks of a node to be consecutive",
                       (long long)j->local, (long long)j->rank, (long long)j->lws, (long long)(j->rank % j->lws));
    return FL_OK;
}

/* Endpoints host(node):base+local for every rank, from FLEET_WORKER_HOSTS or MASTER_ADDR. */
static int fixed_endpoints(const tr_job *j, const char *hosts_s, char ***out)
{
    int64_t nnodes = j->world / j->lws, base;
    FL_CHECK(fl__env_int("FLEET_TORCHRUN_PORT_BASE", j->mport + 1, 1, 65535 - j->lws + 1, &base));
    if (base + j->lws - 1 > 65535)
        return fl__err(FL_EINVAL,
                       "torchrun role maker: %lld processes per node do not fit above port %lld: "
                       "set FLEET_TORCHRUN_PORT_BASE",
                       (long long)j->lws, (long long)base);
    char **hosts = NULL;
    int nh = 0, st = FL_OK;
    if (hosts_s) {
        /* a plain comma list of host names or addresses, one per node in node order */
        nh = 1;
        for (const char *p = hosts_s; *p; p++) nh += *p == ',';
        hosts = calloc((size_t)nh, sizeof *hosts);
        if (!hosts) return fl__err(FL_ENOMEM, "out of memory");
        const char *p = hosts_s;
        for (int i = 0; i < nh && st == FL_OK; i++) {
            size_t len = strcspn(p, ",");
            if (len == 0 || len >= FL_NET_HOST_MAX || memchr(p, ' ', len) || (memchr(p, ':', len) && p[0] != '['))
                st = fl__err(FL_EINVAL,
                             "environment variable FLEET_WORKER_HOSTS='%s': entry %d is not a host: "
                             "expected one host name or address per node, e.g. node1,node2",
                             hosts_s, i);
            else if (!(hosts[i] = strndup(p, len))) st = fl__err(FL_ENOMEM, "out of memory");
            p += len + 1;
        }
        if (st == FL_OK && nh != nnodes)
            st = fl__err(FL_EINVAL,
                         "environment variable FLEET_WORKER_HOSTS lists %d hosts but WORLD_SIZE=%lld / "
                         "LOCAL_WORLD_SIZE=%lld makes %lld nodes",
                         nh, (long long)j->world, (long long)j->lws, (long long)nnodes);
    }
    char **eps = st == FL_OK ? calloc((size_t)j->world, sizeof *eps) : NULL;
    if (st == FL_OK && !eps) st = fl__err(FL_ENOMEM, "out of memory");
    for (int64_t r = 0; st == FL_OK && r < j->world; r++) {
        const char *h = hosts ? hosts[r / j->lws] : j->maddr;
        size_t cap = strlen(h) + 8;
        if (!(eps[r] = malloc(cap))) st = fl__err(FL_ENOMEM, "out of memory");
        else snprintf(eps[r], cap, "%s:%d", h, (int)(base + r % j->lws));
    }
    fl__free_strv(hosts, nh);
    if (st != FL_OK) {
        fl__free_strv(eps, (int)j->world);
        return st;
    }
    *out = eps;
    return FL_OK;
}

static int rendezvous_endpoints(const tr_job *j, char ***out)
{
    int64_t port, timeout;
    FL_CHECK(fl__env_int("FLEET_RENDEZVOUS_PORT", j->mport + 1 <= 65535 ? j->mport + 1 : j->mport - 1, 1, 65535, &port));
    FL_CHECK(fl__env_int("FLEET_RENDEZVOUS_TIMEOUT_MS", 300000, 1, INT32_MAX, &timeout));
    fl_net_secret sec;
    int st = fl_net_secret_from_env(&sec);
    if (st == FL_ENOTFOUND)
        return fl__err(FL_EINVAL,
                       "torchrun role maker: %lld nodes without FLEET_WORKER_HOSTS meet at a rendezvous at %s:%lld, "
                       "which needs the job secret: export FLEET_JOB_SECRET (hex) or FLEET_JOB_SECRET_FILE to "
                       "every process (e.g. from a Kubernetes Secret), or set FLEET_WORKER_HOSTS",
                       (long long)(j->world / j->lws), j->maddr, (long long)port);
    if (st != FL_OK) return st;
    st = fl__rdzv_endpoints(j->maddr, (int)port, (int)j->rank, (int)j->world, &sec, timeout, out);
    fl_net_secret_clear(&sec);
    return st;
}

static int make_role(fleet_role *r)
{
    tr_job j;
    FL_CHECK(read_job(&j));
    if (!r->is_collective) {
        if (j.world > 1)
            return fl__role_ps_as_collective(
                "torchrun / PyTorchJob, WORLD_SIZE", (int)j.world,
                "torchrun and PyTorchJob start collective jobs only: start a parameter-server "
                "program with fleetrun --server_num S --worker_num W, srun with FLEET_SLURM_SERVERS, "
                "mpirun, or a PaddleJob");
        return FL_OK;
    }
    const char *hosts;
    FL_CHECK(fl__env_str("FLEET_WORKER_HOSTS", NULL, &hosts));
    char **eps = NULL;
    const char *how = hosts ? "FLEET_WORKER_HOSTS" : j.world == j.lws ? "one node: MASTER_ADDR" : "rendezvous";
    int st = (hosts || j.world == j.lws) ? fixed_endpoints(&j, hosts, &eps) : rendezvous_endpoints(&j, &eps);
    if (st == FL_OK) st = fl__role_from_tasks(r, eps, (int)j.world, (int)j.rank, NULL, NULL);
    if (st == FL_OK)
        FL_INFO(FL_SUB_FLEET, "torchrun rank %lld of %lld (local %lld of %lld), endpoints from %s: %s", (long long)j.rank,
                (long long)j.world, (long long)j.local, (long long)j.lws, how, eps[j.rank]);
    fl__free_strv(eps, eps ? (int)j.world : 0);
    return st;
}

int fl__role_torchrun(int is_collective, fleet_role **out)
{
    if (!out) return fl__err(FL_EINVAL, "fleet_role_torchrun: out is NULL");
    *out = NULL;
    fleet_role *r = fl__role_alloc(is_collective);
    if (!r) return FL_ENOMEM;
    int st = make_role(r);
    if (st != FL_OK) {
        fleet_role_free(r);
        return st;
    }
    *out = r;
    return FL_OK;
}

int fleet_role_torchrun(fleet_role **out) { return fl__role_torchrun(1, out); }
