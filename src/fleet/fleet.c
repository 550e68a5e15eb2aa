/* fleet.c - the facade handle: creation, role queries, file splitting. */
#include <stdio.h>
#include <string.h>

#include "comm.h"

static fleet_t *init_common(fleet_role *role, const fleet_strategy *strategy, int is_collective)
{
    fleet_strategy s = strategy ? *strategy : fleet_strategy_default();
    if (fleet_strategy_check(&s) != FL_OK) {
        fleet_role_free(role);
        return NULL;
    }
    if (!role && fleet_role_paddlecloud(is_collective, &role) != FL_OK) return NULL;
    if (role->magic != FLEET_ROLE_MAGIC) {
        fl__err(FL_EINVAL, "fleet_init: role is not a role maker");
        return NULL;
    }
    if (role->is_collective != is_collective) {
        fl__err(FL_EINVAL, "fleet_init%s: the role maker was made for %s mode", is_collective ? "_collective" : "",
                role->is_collective ? "collective" : "parameter-server");
        fleet_role_free(role);
        return NULL;
    }
    fleet_t *f = calloc(1, sizeof *f);
    if (!f) {
        fleet_role_free(role);
        fl__err(FL_ENOMEM, "fleet_init: out of memory");
        return NULL;
    }
    f->magic = FLEET_MAGIC;
    f->role = role;
    f->strategy = s;

    fl_log_set_identity(role->kind == FLEET_ROLE_SERVER ? "server" : "worker",
                        role->kind == FLEET_ROLE_SERVER ? role->server_index : role->worker_index);
    if (!role->distributed)
        FL_INFO(FL_SUB_FLEET, "no distributed environment found: running as one local worker");
    return f;
}

fleet_t *fleet_init(fleet_role *role, const fleet_strategy *strategy) { return init_common(role, strategy, role ? role->is_collective : 0); }
fleet_t *fleet_init_collective(fleet_role *role, const fleet_strategy *strategy) { return init_common(role, strategy, 1); }

int fl__fleet_comm(fleet_t *f)
{
    if (f->comm || !f->role->is_collective) return FL_OK;
    return fl__comm_create(f->role, &f->comm);
}

int fl__fleet_worker_comm(fleet_t *f, const char *fn)
{
    if (f->comm || !f->role->distributed) return FL_OK;
    if (f->role->is_collective) return fl__fleet_comm(f);
    if (f->role->kind != FLEET_ROLE_WORKER) return fl__err(FL_ESTATE, "%s: called on a server; it runs among the workers", fn);
    if (f->role->worker_num <= 1) return FL_OK;
    if (f->role->nworkers != f->role->worker_num)
        return fl__err(FL_EINVAL, "%s: the workers of this parameter-server job have no endpoints to talk to each other: "
                                  "set PADDLE_TRAINER_ENDPOINTS (ip:port,... one per worker; fleetrun sets it)", fn);
    /* every worker makes this call (it is collective), so they meet here */
    return fl__comm_create(f->role, &f->comm);
}

void fleet_free(fleet_t *f)
{
    if (!f || f->magic != FLEET_MAGIC) return;
    fl__comm_free(f->comm);
    fl__ps_free(f);
    fleet_role_free(f->role);
    free(f->workers_str);
    free(f->servers_str);
    f->magic = 0;
    free(f);
}

int fleet_is_collective(const fleet_t *f) { return f->role->is_collective; }
int fleet_is_distributed(const fleet_t *f) { return f->role->distributed; }
int fleet_is_worker(const fleet_t *f) { return f->role->kind == FLEET_ROLE_WORKER; }
int fleet_is_server(const fleet_t *f) { return f->role->kind == FLEET_ROLE_SERVER; }
int fleet_is_first_worker(const fleet_t *f) { return fleet_is_worker(f) && f->role->worker_index == 0; }
int fleet_worker_index(const fleet_t *f) { return f->role->worker_index; }
int fleet_worker_num(const fleet_t *f) { return f->role->worker_num; }
int fleet_server_index(const fleet_t *f) { return f->role->server_index; }
int fleet_server_num(const fleet_t *f) { return f->role->nservers; }
const char *fleet_worker_endpoint(const fleet_t *f, int i) { return (i >= 0 && i < f->role->nworkers) ? f->role->workers[i] : NULL; }
const char *fleet_server_endpoint(const fleet_t *f, int i) { return (i >= 0 && i < f->role->nservers) ? f->role->servers[i] : NULL; }
const fleet_strategy *fleet_get_strategy(const fleet_t *f) { return &f->strategy; }

static const char *join(char **v, int n, char **cache)
{
    if (*cache) return *cache;
    fl_buf b = {0};
    fl__buf_put(&b, "", 0);
    for (int i = 0; i < n; i++) fl__buf_printf(&b, "%s%s", i ? "," : "", v[i]);
    *cache = b.p;
    return b.p ? b.p : "";
}
const char *fleet_worker_endpoints_str(fleet_t *f) { return join(f->role->workers, f->role->nworkers, &f->workers_str); }
const char *fleet_server_endpoints_str(fleet_t *f) { return join(f->role->servers, f->role->nservers, &f->servers_str); }

int fleet_split_files(const fleet_t *f, const char *const *files, int n, const char ***out, int *nout)
{
    if (!f || f->magic != FLEET_MAGIC || !out || !nout || n < 0 || (n && !files))
        return fl__err(FL_EINVAL, "fleet_split_files: invalid arguments");
    int w = f->role->worker_num, id = f->role->worker_index;
    int base = n / w, extra = n % w;
    int begin = id * base + (id < extra ? id : extra);
    int cnt = base + (id < extra ? 1 : 0);
    *out = malloc((size_t)(cnt ? cnt : 1) * sizeof **out);
    if (!*out) return fl__err(FL_ENOMEM, "out of memory");
    for (int i = 0; i < cnt; i++) (*out)[i] = files[begin + i];
    *nout = cnt;
    return FL_OK;
}
