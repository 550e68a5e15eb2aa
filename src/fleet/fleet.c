/*
 * fleet.c - the facade: the handle, role queries, file splitting, and every lifecycle call
 * checked here and carried out by the runtime fleet_init chose (runtime.h).  Nothing in
 * this file knows what a parameter server or a ring allreduce is.
 */
#include <stdio.h>
#include <string.h>

#include "ring.h"
#include "runtime.h"

/* Tried in order; the first whose accepts() takes the role runs the job.  The collective
 * runtime accepts every role (the local fallback included), so it stays last. */
static const fl__runtime *const fl__runtimes[] = {&fl__runtime_ps, &fl__runtime_collective, NULL};

static fleet_t *init_common(fleet_role *role, const fleet_strategy *strategy, int is_collective)
{
    fleet_strategy s = strategy ? *strategy : fleet_strategy_default();
    if (fleet_strategy_check(&s) != FL_OK) {
        fleet_role_free(role);
        return NULL;
    }
    if (!role && fleet_role_from_env(is_collective, &role) != FL_OK) return NULL;
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
    for (int i = 0; fl__runtimes[i] && !f->runtime; i++)
        if (fl__runtimes[i]->accepts(role)) f->runtime = fl__runtimes[i];
    if (f->runtime->init(f) != FL_OK) {
        fleet_role_free(role);
        free(f);
        return NULL;
    }

    fl_log_set_identity(role->kind == FLEET_ROLE_SERVER ? "server" : "worker",
                        role->kind == FLEET_ROLE_SERVER ? role->server_index : role->worker_index);
    if (!role->distributed) FL_INFO(FL_SUB_FLEET, "no distributed environment found: running as one local worker");
    return f;
}

fleet_t *fleet_init(fleet_role *role, const fleet_strategy *strategy)
{
    return init_common(role, strategy, role ? role->is_collective : 0);
}
fleet_t *fleet_init_collective(fleet_role *role, const fleet_strategy *strategy) { return init_common(role, strategy, 1); }

int fl__fleet_secret(fleet_t *f, const char *fn, int required, const fl_net_secret **out)
{
    *out = NULL;
    if (f->secret_state == 0) {
        int st = fl_net_secret_from_env(&f->secret);
        if (st != FL_OK && st != FL_ENOTFOUND) return fl__err(st, "%s: %s", fn, fl_last_error());
        f->secret_state = st == FL_OK ? 1 : 2;
    }
    if (f->secret_state == 1) {
        *out = &f->secret;
        return FL_OK;
    }
    if (!required) return FL_OK;
    fl_net_secret none;
    fl_net_secret_from_env(&none); /* its message names the variables and the line to add */
    fl_net_secret_clear(&none);
    return fl__err(FL_EINVAL, "%s: %s training needs the job secret, and there is %s", fn, f->runtime->name,
                   fl_last_error());
}

void fleet_free(fleet_t *f)
{
    if (!f || f->magic != FLEET_MAGIC) return;
    f->runtime->free(f);
    fl__ring_free(f->ring);
    fleet_role_free(f->role);
    fl_net_secret_clear(&f->secret);
    free(f->workers_str);
    free(f->servers_str);
    f->magic = 0;
    free(f);
}

/* A handle check for the queries: NULL or a freed handle is an error naming the query.
 * Predicates then answer 0 (a negative status would read as true), counts and indices
 * FL_EINVAL, strings and the strategy NULL. */
static int valid(const fleet_t *f, const char *fn)
{
    if (f && f->magic == FLEET_MAGIC) return 1;
    fl__err_handle(f, "%s: fleet handle is NULL or invalid", fn);
    return 0;
}
#define FLEET_QUERY(name, bad, expr) \
    int name(const fleet_t *f) { return valid(f, #name) ? (expr) : (bad); }
FLEET_QUERY(fleet_is_collective, 0, f->role->is_collective)
FLEET_QUERY(fleet_is_distributed, 0, f->role->distributed)
FLEET_QUERY(fleet_is_worker, 0, f->role->kind == FLEET_ROLE_WORKER)
FLEET_QUERY(fleet_is_server, 0, f->role->kind == FLEET_ROLE_SERVER)
FLEET_QUERY(fleet_is_first_worker, 0, f->role->kind == FLEET_ROLE_WORKER && f->role->worker_index == 0)
FLEET_QUERY(fleet_worker_index, FL_EINVAL, f->role->worker_index)
FLEET_QUERY(fleet_worker_num, FL_EINVAL, f->role->worker_num)
FLEET_QUERY(fleet_server_index, FL_EINVAL, f->role->server_index)
FLEET_QUERY(fleet_server_num, FL_EINVAL, f->role->nservers)
#undef FLEET_QUERY
const char *fleet_worker_endpoint(const fleet_t *f, int i)
{
    if (!valid(f, "fleet_worker_endpoint")) return NULL;
    return (i >= 0 && i < f->role->nworkers) ? f->role->workers[i] : NULL;
}
const char *fleet_server_endpoint(const fleet_t *f, int i)
{
    if (!valid(f, "fleet_server_endpoint")) return NULL;
    return (i >= 0 && i < f->role->nservers) ? f->role->servers[i] : NULL;
}
const fleet_strategy *fleet_get_strategy(const fleet_t *f) { return valid(f, "fleet_get_strategy") ? &f->strategy : NULL; }

static const char *join(char **v, int n, char **cache)
{
    if (*cache) return *cache;
    fl_buf b = {0};
    fl__buf_put(&b, "", 0);
    for (int i = 0; i < n; i++) fl__buf_printf(&b, "%s%s", i ? "," : "", v[i]);
    *cache = b.p;
    return b.p ? b.p : "";
}
const char *fleet_worker_endpoints_str(fleet_t *f)
{
    if (!valid(f, "fleet_worker_endpoints_str")) return NULL;
    return join(f->role->workers, f->role->nworkers, &f->workers_str);
}
const char *fleet_server_endpoints_str(fleet_t *f)
{
    if (!valid(f, "fleet_server_endpoints_str")) return NULL;
    return join(f->role->servers, f->role->nservers, &f->servers_str);
}

int fleet_split_files(const fleet_t *f, const char *const *files, int n, const char ***out, int *nout)
{
    if (!f || f->magic != FLEET_MAGIC || !out || !nout || n < 0 || (n && !files))
        return fl__err(FL_EINVAL, "fleet_split_files: %s",
                       !f || f->magic != FLEET_MAGIC ? "fleet handle is NULL or invalid"
                       : !out || !nout               ? "out or nout is NULL"
                       : n < 0                       ? "n is negative"
                                                     : "files is NULL");
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

/* ---- the lifecycle: checked here, carried out by the runtime ------------------------------- */

static int check(const fleet_t *f, const char *fn)
{
    if (!f || f->magic != FLEET_MAGIC) return fl__err_handle(f, "%s: fleet handle is NULL or invalid", fn);
    return FL_OK;
}

fl_opt *fleet_distributed_optimizer(fleet_t *f, fl_opt *opt, const fleet_strategy *strategy)
{
    if (check(f, "fleet_distributed_optimizer") != FL_OK) return NULL;
    if (!opt) {
        fl__err(FL_EINVAL, "fleet_distributed_optimizer: optimizer is NULL");
        return NULL;
    }
    if (strategy) {
        if (fleet_strategy_check(strategy) != FL_OK) return NULL;
        f->strategy = *strategy; /* Paddle: a strategy given here replaces the one from init */
    }
    if (fl__fleet_meta_optim(f, opt) != FL_OK) return NULL; /* lars / lamb: meta_optim.c */
    if (f->runtime->distributed_optimizer(f, opt) != FL_OK) return NULL;
    if (fl__fleet_recompute_wire(f, opt) != FL_OK) return NULL; /* every runtime: recompute.c */
    return fl__fleet_amp_wire(f, opt) == FL_OK ? opt : NULL;    /* every runtime: amp.c */
}

int fleet_transpile(fleet_t *f, fl_opt *opt, fl_prog *prog, const fleet_strategy *strategy)
{
    FL_CHECK(check(f, "fleet_transpile"));
    if (!opt) return fl__err(FL_EINVAL, "fleet_transpile: opt is NULL");
    if (!prog) return fl__err(FL_EINVAL, "fleet_transpile: prog is NULL");
    if (f->runtime != &fl__runtime_ps)
        return fl__err(FL_EUNSUPPORTED,
                       "fleet_transpile: this fleet's role is %s, not a parameter-server job; a "
                       "collective program is made distributed by fleet_distributed_optimizer "
                       "before minimize",
                       f->runtime->name);
    if (!fleet_distributed_optimizer(f, opt, strategy)) return fl_last_status();
    return fl__opt_rehook(opt, prog);
}

int fleet_init_worker(fleet_t *f)
{
    FL_CHECK(check(f, "fleet_init_worker"));
    if (!fleet_is_worker(f)) return fl__err(FL_ESTATE, "fleet_init_worker: this process is a server");
    return f->runtime->init_worker(f);
}

int fleet_stop_worker(fleet_t *f)
{
    FL_CHECK(check(f, "fleet_stop_worker"));
    if (!fleet_is_worker(f)) return fl__err(FL_ESTATE, "fleet_stop_worker: this process is a server");
    return f->runtime->stop_worker(f);
}

int fleet_init_server(fleet_t *f, const char *model_dir)
{
    FL_CHECK(check(f, "fleet_init_server"));
    if (!fleet_is_server(f)) return fl__err(FL_ESTATE, "fleet_init_server: this process is not a server");
    return f->runtime->init_server(f, model_dir);
}

int fleet_run_server(fleet_t *f)
{
    FL_CHECK(check(f, "fleet_run_server"));
    if (!fleet_is_server(f)) return fl__err(FL_ESTATE, "fleet_run_server: this process is not a server");
    return f->runtime->run_server(f);
}

int fleet_barrier_worker(fleet_t *f)
{
    FL_CHECK(check(f, "fleet_barrier_worker"));
    return f->runtime->barrier_worker(f);
}

int fleet_util_barrier(fleet_t *f)
{
    FL_CHECK(check(f, "fleet_util_barrier"));
    return fleet_barrier_worker(f);
}

int fl__fleet_worker_ring(fleet_t *f, const char *fn)
{
    if (f->ring || !f->role->distributed) return FL_OK;
    return f->runtime->worker_ring(f, fn);
}

int fleet_util_all_reduce(fleet_t *f, void *buf, size_t count, fl_dtype dtype, const char *mode)
{
    FL_CHECK(check(f, "fleet_util_all_reduce"));
    if (!mode || (strcmp(mode, "sum") && strcmp(mode, "max") && strcmp(mode, "min")))
        return fl__err(FL_EINVAL, "fleet_util_all_reduce: mode '%s' is invalid: expected sum, max or min",
                       mode ? mode : "(null)");
    if (count && !buf) return fl__err(FL_EINVAL, "fleet_util_all_reduce: buffer is NULL");
    FL_CHECK(fl__fleet_worker_ring(f, "fleet_util_all_reduce"));
    return f->ring ? fl__ring_allreduce(f->ring, buf, count, dtype, mode) : FL_OK;
}

fl_var *fleet_layer_allreduce(fleet_t *f, fl_var *x, const char *reduce_type)
{
    if (check(f, "fleet_layer_allreduce") != FL_OK) return NULL;
    if (!x) {
        fl__err(FL_EINVAL, "fleet_layer_allreduce: x is NULL");
        return NULL;
    }
    if (!reduce_type || (strcmp(reduce_type, "sum") && strcmp(reduce_type, "max") && strcmp(reduce_type, "min"))) {
        fl__err(FL_EINVAL, "fleet_layer_allreduce: reduce_type '%s' is invalid: expected sum, max or min",
                reduce_type ? reduce_type : "(null)");
        return NULL;
    }
    if (!fleet_is_worker(f)) {
        fl__err(FL_ESTATE, "fleet_layer_allreduce: this process is a server; the allreduce runs among the workers");
        return NULL;
    }
    if (fl__fleet_worker_ring(f, "fleet_layer_allreduce") != FL_OK) return NULL;
    return fl__c_collective_layer("c_allreduce", x, f->ring ? fl__ring_id(f->ring) : -1,
                                  f->ring ? fl__ring_size(f->ring) : 1, reduce_type);
}

fl_var *fleet_layer_allgather(fleet_t *f, fl_var *x)
{
    if (check(f, "fleet_layer_allgather") != FL_OK) return NULL;
    if (!x) {
        fl__err(FL_EINVAL, "fleet_layer_allgather: x is NULL");
        return NULL;
    }
    if (!fleet_is_worker(f)) {
        fl__err(FL_ESTATE, "fleet_layer_allgather: this process is a server; the allgather runs among the workers");
        return NULL;
    }
    if (fl__fleet_worker_ring(f, "fleet_layer_allgather") != FL_OK) return NULL;
    return fl__c_collective_layer("c_allgather", x, f->ring ? fl__ring_id(f->ring) : -1,
                                  f->ring ? fl__ring_size(f->ring) : 1, NULL);
}

int fleet_util_all_gather(fleet_t *f, const void *send, void *recv, size_t count, fl_dtype dtype)
{
    FL_CHECK(check(f, "fleet_util_all_gather"));
    if (count && (!send || !recv)) return fl__err(FL_EINVAL, "fleet_util_all_gather: buffer is NULL");
    FL_CHECK(fl__fleet_worker_ring(f, "fleet_util_all_gather"));
    if (f->ring) return fl__ring_allgather(f->ring, send, recv, count, dtype);
    if (count) memmove(recv, send, count * fl_dtype_size(dtype));
    return FL_OK;
}

int fleet_save_persistables(fleet_t *f, fl_exe *exe, const char *dir, const fl_prog *prog)
{
    FL_CHECK(check(f, "fleet_save_persistables"));
    return f->runtime->save_persistables(f, exe, dir, prog);
}

int fleet_save_inference_model(fleet_t *f, fl_exe *exe, const char *dir, const char *const *feeds, int nfeed,
                               fl_var *const *targets, int ntarget, const fl_prog *prog)
{
    FL_CHECK(check(f, "fleet_save_inference_model"));
    return f->runtime->save_inference_model(f, exe, dir, feeds, nfeed, targets, ntarget, prog);
}
