/*
 * role.c - the role object and the role makers of Paddle itself: PaddleCloudRoleMaker
 * (Paddle's launcher variables) and UserDefinedRoleMaker.  The schedulers' role makers sit
 * beside it (role_internal.h lists them).  Every variable is read through src/base/env.c.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "role_internal.h"

void fl__free_strv(char **v, int n)
{
    if (!v) return;
    for (int i = 0; i < n; i++) free(v[i]);
    free(v);
}

static int check_endpoint(const char *ep, const char *what)
{
    const char *colon = strrchr(ep, ':');
    if (!colon || colon == ep)
        return fl__err(FL_EINVAL, "%s: endpoint '%s' is malformed: expected host:port (e.g. 127.0.0.1:6170)", what, ep);
    char *end;
    errno = 0;
    long port = strtol(colon + 1, &end, 10);
    if (errno || *end || colon[1] == 0 || port < 1 || port > 65535)
        return fl__err(FL_EINVAL, "%s: endpoint '%s' has an invalid port: expected host:port with port in 1..65535", what,
                       ep);
    return FL_OK;
}

int fl__parse_endpoints(const char *list, const char *what, char ***out, int *n)
{
    *out = NULL;
    *n = 0;
    if (!list || !*list) return fl__err(FL_EINVAL, "%s is empty: expected a comma-separated list of host:port", what);
    int cap = 1;
    for (const char *p = list; *p; p++) cap += *p == ',';
    char **v = calloc((size_t)cap, sizeof *v);
    if (!v) return fl__err(FL_ENOMEM, "out of memory");
    int k = 0, st = FL_OK;
    const char *s = list;
    while (1) {
        const char *e = strchr(s, ',');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        v[k] = malloc(len + 1);
        if (!v[k]) {
            st = fl__err(FL_ENOMEM, "out of memory");
            break;
        }
        memcpy(v[k], s, len);
        v[k][len] = 0;
        k++;
        if (len == 0) {
            st = fl__err(FL_EINVAL, "%s='%s' has an empty entry: expected host:port,host:port,...", what, list);
            break;
        }
        if ((st = check_endpoint(v[k - 1], what)) != FL_OK) break;
        for (int j = 0; j < k - 1; j++)
            if (!strcmp(v[j], v[k - 1])) {
                st = fl__err(FL_EINVAL, "%s: endpoint '%s' appears twice", what, v[j]);
                break;
            }
        if (st != FL_OK || !e) break;
        s = e + 1;
    }
    if (st != FL_OK) {
        fl__free_strv(v, k);
        return st;
    }
    *out = v;
    *n = k;
    return FL_OK;
}

fleet_role *fl__role_alloc(int is_collective)
{
    fleet_role *r = calloc(1, sizeof *r);
    if (!r) {
        fl__err(FL_ENOMEM, "role maker: out of memory");
        return NULL;
    }
    r->magic = FLEET_ROLE_MAGIC;
    r->is_collective = is_collective;
    r->kind = FLEET_ROLE_WORKER;
    r->worker_num = 1;
    return r;
}

int fl__role_from_tasks(fleet_role *r, char *const *eps, int n, int rank, int (*server_of)(int task, void *arg), void *arg)
{
    int ns = 0;
    for (int i = 0; !r->is_collective && i < n; i++) ns += server_of(i, arg) != 0;
    r->workers = calloc((size_t)(n - ns ? n - ns : 1), sizeof *r->workers);
    r->servers = calloc((size_t)(ns ? ns : 1), sizeof *r->servers);
    if (!r->workers || !r->servers) return fl__err(FL_ENOMEM, "role maker: out of memory");
    for (int i = 0; i < n; i++) {
        int is_server = !r->is_collective && server_of(i, arg);
        char *e = fl__strdup(eps[i]);
        if (!e) return fl__err(FL_ENOMEM, "role maker: out of memory");
        if (i == rank) {
            r->kind = is_server ? FLEET_ROLE_SERVER : FLEET_ROLE_WORKER;
            if (is_server) r->server_index = r->nservers;
            else r->worker_index = r->nworkers;
        }
        if (is_server) r->servers[r->nservers++] = e;
        else r->workers[r->nworkers++] = e;
    }
    r->worker_num = r->nworkers ? r->nworkers : 1;
    r->distributed = n > 1;
    return FL_OK;
}

int fl__role_ps_as_collective(const char *launcher, int n, const char *how)
{
    return fl__err(FL_EINVAL,
                   "fleet_init: this is a parameter-server program (fleet_init) but it was started as a collective job "
                   "of %d processes (%s) with no parameter servers, so every process would train its own local copy. "
                   "Start it with servers (%s), or call fleet_init_collective for data-parallel training",
                   n, launcher, how);
}

void fleet_role_free(fleet_role *r)
{
    if (!r || r->magic != FLEET_ROLE_MAGIC) return;
    if (r->mpi_ref) fl__role_mpi_release(r);
    fl__free_strv(r->workers, r->nworkers);
    fl__free_strv(r->servers, r->nservers);
    r->magic = 0;
    free(r);
}

int fl__role_env_required(const char *name, const char *form, const char **out)
{
    FL_CHECK(fl__env_str(name, NULL, out));
    if (!*out) return fl__err(FL_EINVAL, "environment variable %s is not set: expected %s", name, form);
    return FL_OK;
}

static int env_index(const char *name, int64_t def, int64_t n, int64_t *out)
{
    return fl__env_int(name, def, 0, n > 0 ? n - 1 : INT32_MAX, out);
}

static int collective_from_env(fleet_role *r)
{
    const char *eps, *cur, *role;
    FL_CHECK(fl__env_str("PADDLE_TRAINER_ENDPOINTS", NULL, &eps));
    FL_CHECK(fl__env_str("PADDLE_TRAINING_ROLE", "TRAINER", &role));
    if (strcmp(role, "TRAINER") != 0)
        return fl__err(FL_EINVAL,
                       "environment variable PADDLE_TRAINING_ROLE='%s' is invalid: expected TRAINER in collective mode",
                       role);
    if (!eps) { /* non-distributed fallback: one local trainer */
        int64_t id;
        FL_CHECK(env_index("PADDLE_TRAINER_ID", 0, 1, &id));
        return FL_OK;
    }
    FL_CHECK(fl__parse_endpoints(eps, "environment variable PADDLE_TRAINER_ENDPOINTS", &r->workers, &r->nworkers));
    int64_t id, num;
    FL_CHECK(env_index("PADDLE_TRAINER_ID", 0, r->nworkers, &id));
    FL_CHECK(fl__env_int("PADDLE_TRAINERS_NUM", r->nworkers, 1, INT32_MAX, &num));
    if (num != r->nworkers)
        return fl__err(
            FL_EINVAL,
            "environment variable PADDLE_TRAINERS_NUM=%lld does not match the %d endpoints of PADDLE_TRAINER_ENDPOINTS",
            (long long)num, r->nworkers);
    FL_CHECK(fl__env_str("PADDLE_CURRENT_ENDPOINT", NULL, &cur));
    if (cur && strcmp(cur, r->workers[id]) != 0)
        return fl__err(
            FL_EINVAL,
            "environment variable PADDLE_CURRENT_ENDPOINT='%s' is not trainer %lld's endpoint '%s' in PADDLE_TRAINER_ENDPOINTS",
            cur, (long long)id, r->workers[id]);
    r->worker_index = (int)id;
    r->worker_num = r->nworkers;
    r->distributed = r->nworkers > 1;
    return FL_OK;
}

static int ps_from_env(fleet_role *r)
{
    const char *servers, *role, *weps;
    FL_CHECK(fl__env_str("PADDLE_PSERVERS_IP_PORT_LIST", NULL, &servers));
    if (!servers) {
        /* non-distributed fallback: one local worker, no servers; unless a collective launch
         * (fleetrun --nproc_per_node N) started several copies of this program */
        int64_t n = 1;
        FL_CHECK(fl__env_str("PADDLE_TRAINER_ENDPOINTS", NULL, &weps));
        if (weps)
            for (const char *p = weps; *p; p++) n += *p == ',';
        else FL_CHECK(fl__env_int("PADDLE_TRAINERS_NUM", 1, 1, INT32_MAX, &n));
        if (n > 1)
            return fl__role_ps_as_collective(
                weps ? "PADDLE_TRAINER_ENDPOINTS lists them and PADDLE_PSERVERS_IP_PORT_LIST is not set"
                     : "PADDLE_TRAINERS_NUM counts them and PADDLE_PSERVERS_IP_PORT_LIST is not set",
                (int)n, "fleetrun --server_num S --worker_num W PROGRAM");
        return FL_OK;
    }
    FL_CHECK(fl__parse_endpoints(servers, "environment variable PADDLE_PSERVERS_IP_PORT_LIST", &r->servers, &r->nservers));
    FL_CHECK(fl__role_env_required("TRAINING_ROLE", "TRAINER or PSERVER", &role));
    int64_t num;
    const char *num_s;
    FL_CHECK(fl__role_env_required("PADDLE_TRAINERS_NUM", "the number of trainers (a positive integer)", &num_s));
    FL_CHECK(fl__env_int("PADDLE_TRAINERS_NUM", 1, 1, INT32_MAX, &num));
    r->worker_num = (int)num;
    FL_CHECK(fl__env_str("PADDLE_TRAINER_ENDPOINTS", NULL, &weps));
    if (weps) {
        FL_CHECK(fl__parse_endpoints(weps, "environment variable PADDLE_TRAINER_ENDPOINTS", &r->workers, &r->nworkers));
        if (r->nworkers != r->worker_num)
            return fl__err(FL_EINVAL,
                           "environment variable PADDLE_TRAINER_ENDPOINTS lists %d endpoints but PADDLE_TRAINERS_NUM=%d",
                           r->nworkers, r->worker_num);
    }
    r->distributed = 1;
    if (!strcmp(role, "TRAINER")) {
        const char *id_s;
        int64_t id;
        FL_CHECK(fl__role_env_required("PADDLE_TRAINER_ID", "this trainer's index in [0, PADDLE_TRAINERS_NUM)", &id_s));
        FL_CHECK(env_index("PADDLE_TRAINER_ID", 0, r->worker_num, &id));
        r->kind = FLEET_ROLE_WORKER;
        r->worker_index = (int)id;
        return FL_OK;
    }
    if (!strcmp(role, "PSERVER")) {
        const char *ip, *port;
        FL_CHECK(fl__role_env_required("POD_IP", "this server's IP address", &ip));
        FL_CHECK(fl__role_env_required("PADDLE_PORT", "this server's port (1..65535)", &port));
        int64_t p;
        FL_CHECK(fl__env_int("PADDLE_PORT", 0, 1, 65535, &p));
        char ep[300];
        snprintf(ep, sizeof ep, "%s:%lld", ip, (long long)p);
        for (int i = 0; i < r->nservers; i++)
            if (!strcmp(r->servers[i], ep)) {
                r->kind = FLEET_ROLE_SERVER;
                r->server_index = i;
                return FL_OK;
            }
        return fl__err(FL_EINVAL, "POD_IP:PADDLE_PORT = '%s' is not in PADDLE_PSERVERS_IP_PORT_LIST='%s'", ep, servers);
    }
    return fl__err(FL_EINVAL, "environment variable TRAINING_ROLE='%s' is invalid: expected TRAINER or PSERVER", role);
}

int fleet_role_paddlecloud(int is_collective, fleet_role **out)
{
    if (!out) return fl__err(FL_EINVAL, "fleet_role_paddlecloud: out is NULL");
    *out = NULL;
    fleet_role *r = fl__role_alloc(is_collective);
    if (!r) return FL_ENOMEM;
    int st = is_collective ? collective_from_env(r) : ps_from_env(r);
    if (st != FL_OK) {
        fleet_role_free(r);
        return st;
    }
    *out = r;
    return FL_OK;
}

static int copy_eps(const char *const *in, int n, const char *what, char ***out, int *nout)
{
    *out = NULL;
    *nout = 0;
    if (n <= 0) return FL_OK;
    if (!in) return fl__err(FL_EINVAL, "UserDefinedRoleMaker: %s is NULL but its count is %d", what, n);
    char **v = calloc((size_t)n, sizeof *v);
    if (!v) return fl__err(FL_ENOMEM, "out of memory");
    for (int i = 0; i < n; i++) {
        int st = !in[i] ? fl__err(FL_EINVAL, "UserDefinedRoleMaker: %s[%d] is NULL", what, i) : check_endpoint(in[i], what);
        for (int j = 0; st == FL_OK && j < i; j++)
            if (!strcmp(in[j], in[i])) st = fl__err(FL_EINVAL, "UserDefinedRoleMaker: %s contains '%s' twice", what, in[i]);
        if (st == FL_OK && !(v[i] = fl__strdup(in[i]))) st = fl__err(FL_ENOMEM, "out of memory");
        if (st != FL_OK) {
            fl__free_strv(v, i + 1);
            return st;
        }
    }
    *out = v;
    *nout = n;
    return FL_OK;
}

int fleet_role_user_defined(const fleet_user_role *s, fleet_role **out)
{
    if (!out) return fl__err(FL_EINVAL, "fleet_role_user_defined: out is NULL");
    *out = NULL;
    if (!s) return fl__err(FL_EINVAL, "fleet_role_user_defined: spec is NULL");
    fleet_role *r = fl__role_alloc(s->is_collective);
    if (!r) return FL_ENOMEM;
    int st = copy_eps(s->worker_endpoints, s->n_worker_endpoints, "worker_endpoints", &r->workers, &r->nworkers);
    if (st == FL_OK)
        st = copy_eps(s->server_endpoints, s->n_server_endpoints, "server_endpoints", &r->servers, &r->nservers);
    if (st != FL_OK) goto fail;
    if (s->role != FLEET_ROLE_WORKER && s->role != FLEET_ROLE_SERVER) {
        st = fl__err(FL_EINVAL, "UserDefinedRoleMaker: role %d is invalid: expected FLEET_ROLE_WORKER or FLEET_ROLE_SERVER",
                     (int)s->role);
        goto fail;
    }
    r->kind = s->role;
    r->worker_num = s->worker_num ? s->worker_num : r->nworkers;
    if (r->worker_num < 1 || (r->nworkers && r->worker_num != r->nworkers)) {
        st = fl__err(
            FL_EINVAL,
            "UserDefinedRoleMaker: worker_num %d is invalid: expected a positive count matching the %d worker endpoints",
            s->worker_num, r->nworkers);
        goto fail;
    }
    if (s->is_collective) {
        if (s->role != FLEET_ROLE_WORKER) {
            st = fl__err(FL_EINVAL, "UserDefinedRoleMaker: collective mode has workers only");
            goto fail;
        }
        if (!r->nworkers) {
            st = fl__err(FL_EINVAL, "UserDefinedRoleMaker: collective mode needs worker_endpoints");
            goto fail;
        }
    } else if (!r->nservers) {
        st = fl__err(FL_EINVAL, "UserDefinedRoleMaker: server_endpoints must be a non-empty list in parameter-server mode");
        goto fail;
    }
    int lim = s->role == FLEET_ROLE_SERVER ? r->nservers : r->worker_num;
    if (s->current_id < 0 || s->current_id >= lim) {
        st = fl__err(FL_EINVAL, "UserDefinedRoleMaker: current_id %d out of range [0, %d) for a %s", s->current_id, lim,
                     s->role == FLEET_ROLE_SERVER ? "server" : "worker");
        goto fail;
    }
    if (s->role == FLEET_ROLE_SERVER) r->server_index = s->current_id;
    else r->worker_index = s->current_id;
    r->distributed = r->worker_num > 1 || r->nservers > 0;
    *out = r;
    return FL_OK;
fail:
    fleet_role_free(r);
    return st;
}
