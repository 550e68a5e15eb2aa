/*
 * config.c - table configuration: validation, entry policies, accessor defaults, the hash
 * that client and server compare, deep copies, the dense split and sparse shard rules, and
 * the environment defaults of server and client options.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps_internal.h"

const char *fl__ps_opt_name(fl_ps_opt_kind k)
{
    switch (k) {
    case FL_PS_OPT_SGD: return "sgd";
    case FL_PS_OPT_ADAGRAD: return "adagrad";
    case FL_PS_OPT_ADAM: return "adam";
    case FL_PS_OPT_SUM: return "sum";
    case FL_PS_OPT_MOMENTUM: return "momentum";
    }
    return "?";
}

void fl_ps_dense_split(int64_t rows, int nservers, int server, int64_t *row0, int64_t *row1)
{
    if (!row0 || !row1) {
        fl__err(FL_EINVAL, "fl_ps_dense_split: row0 or row1 is NULL");
        return;
    }
    if (rows < 0) rows = 0;
    if (nservers < 1) nservers = 1;
    int64_t b = (rows + nservers - 1) / nservers;
    int64_t a = (int64_t)server * b, e = a + b;
    *row0 = a < rows ? a : rows;
    *row1 = e < rows ? e : rows;
}

int fl_ps_sparse_server(uint64_t id, int nservers)
{
    return nservers > 1 ? (int)(fl__hash_u64(id) % (uint64_t)nservers) : 0;
}

int fl__ps_entry_parse(const char *s, const char *table, fl__ps_entry *out)
{
    memset(out, 0, sizeof *out);
    if (!s || !*s || !strcmp(s, "none")) return FL_OK;
    static const char cf[] = "count_filter_entry:", pe[] = "probability_entry:";
    char *end;
    errno = 0;
    if (!strncmp(s, cf, sizeof cf - 1)) {
        long long n = strtoll(s + sizeof cf - 1, &end, 10);
        if (errno || *end || end == s + sizeof cf - 1 || n < 1 || n > 1000000000)
            return fl__err(FL_EINVAL, "table '%s': entry '%s': expected count_filter_entry:N with N in [1, 1e9]", table, s);
        out->kind = n > 1 ? 1 : 0; /* a count of 1 admits at the first touch */
        out->count = (uint32_t)n;
        return FL_OK;
    }
    if (!strncmp(s, pe, sizeof pe - 1)) {
        double p = strtod(s + sizeof pe - 1, &end);
        if (errno || *end || end == s + sizeof pe - 1 || !(p > 0.0 && p <= 1.0))
            return fl__err(FL_EINVAL, "table '%s': entry '%s': expected probability_entry:P with 0 < P <= 1", table, s);
        out->kind = p < 1.0 ? 2 : 0;
        out->prob = p;
        return FL_OK;
    }
    return fl__err(FL_EINVAL,
                   "table '%s': unknown entry policy '%s' (expected count_filter_entry:N or "
                   "probability_entry:P)",
                   table, s);
}

void fl__ps_accessor_fill(const fl_ps_accessor *in, fl_ps_accessor *o)
{
    *o = *in;
    if (o->nonclk_coeff == 0) o->nonclk_coeff = 0.1f;
    if (o->click_coeff == 0) o->click_coeff = 1.0f;
    if (o->show_click_decay_rate == 0) o->show_click_decay_rate = 1.0f;
    if (o->delete_after_unseen_days == 0) o->delete_after_unseen_days = 30;
    if (o->delta_keep_days == 0) o->delta_keep_days = 16;
}

static int name_ok(const char *n)
{
    size_t l = n ? strlen(n) : 0;
    if (l < 1 || l >= FL_PS_NAME_MAX || !strcmp(n, ".") || !strcmp(n, "..")) return 0;
    for (size_t i = 0; i < l; i++) {
        char c = n[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
              c == '@' || c == '-'))
            return 0;
    }
    return 1;
}

int fl_ps_table_config_check(const fl_ps_table_config *t)
{
    if (!t) return fl__err(FL_EINVAL, "fl_ps_table_config_check: table is NULL");
    if (!name_ok(t->name))
        return fl__err(FL_EINVAL, "table name '%s' is invalid: expected 1-%d characters of [A-Za-z0-9_.@-]",
                       t->name ? t->name : "(null)", FL_PS_NAME_MAX - 1);
    const char *n = t->name;
    const fl_ps_optimizer *o = &t->opt;
    if (o->kind < FL_PS_OPT_SGD || o->kind > FL_PS_OPT_MOMENTUM)
        return fl__err(FL_EINVAL, "table '%s': unknown optimizer kind %d", n, (int)o->kind);
    if (o->kind != FL_PS_OPT_SUM && !(o->lr > 0 && isfinite(o->lr)))
        return fl__err(FL_EINVAL, "table '%s': learning rate must be finite and > 0, got %g", n, o->lr);
    if (!(o->l2 >= 0 && isfinite(o->l2)))
        return fl__err(FL_EINVAL, "table '%s': l2 must be finite and >= 0, got %g", n, o->l2);
    if (!(o->beta1 >= 0 && o->beta1 < 1) || !(o->beta2 >= 0 && o->beta2 < 1))
        return fl__err(FL_EINVAL, "table '%s': Adam betas must be in [0, 1), got %g and %g", n, o->beta1, o->beta2);
    if (!(o->momentum >= 0 && o->momentum < 1))
        return fl__err(FL_EINVAL, "table '%s': momentum must be in [0, 1), got %g", n, o->momentum);
    if (!(o->epsilon >= 0 && isfinite(o->epsilon)))
        return fl__err(FL_EINVAL, "table '%s': epsilon must be finite and >= 0, got %g", n, o->epsilon);
    if (o->scaled && (o->kind != FL_PS_OPT_SGD || o->l2 != 0))
        return fl__err(FL_EINVAL, "table '%s': scaled gradients need sgd without l2 (got %s, l2 %g)", n,
                       fl__ps_opt_name(o->kind), o->l2);
    if (t->kind == FL_PS_DENSE) {
        if (t->rows < 1 || t->cols < 1 || t->rows > ((int64_t)1 << 40) || t->cols > ((int64_t)1 << 30) ||
            t->rows > (((int64_t)1 << 46) / t->cols))
            return fl__err(FL_EINVAL,
                           "dense table '%s': shape %lld x %lld is invalid (rows >= 1, cols >= 1, at most "
                           "2^46 elements)",
                           n, (long long)t->rows, (long long)t->cols);
        if (t->entry && *t->entry)
            return fl__err(FL_EINVAL, "dense table '%s': entry policies apply to sparse tables only", n);
        if ((t->ssd_path && *t->ssd_path) || t->mem_budget_mb)
            return fl__err(FL_EINVAL, "dense table '%s': ssd_path and mem_budget_mb apply to sparse tables only", n);
        return FL_OK;
    }
    if (t->kind != FL_PS_SPARSE) return fl__err(FL_EINVAL, "table '%s': unknown kind %d", n, (int)t->kind);
    if (t->dim < 1 || t->dim > FL_PS_MAX_DIM)
        return fl__err(FL_EINVAL, "sparse table '%s': dim %d outside [1, %d]", n, t->dim, FL_PS_MAX_DIM);
    switch (t->init.kind) {
    case FL_INIT_DEFAULT:
    case FL_INIT_XAVIER:
    case FL_INIT_CONSTANT: break;
    case FL_INIT_UNIFORM:
        if (!(t->init.a <= t->init.b) || !isfinite(t->init.a) || !isfinite(t->init.b))
            return fl__err(FL_EINVAL, "sparse table '%s': uniform initializer needs low <= high, got %g, %g", n, t->init.a,
                           t->init.b);
        break;
    case FL_INIT_NORMAL:
    case FL_INIT_TRUNCATED_NORMAL:
        if (!(t->init.b >= 0) || !isfinite(t->init.a) || !isfinite(t->init.b))
            return fl__err(FL_EINVAL, "sparse table '%s': normal initializer needs std >= 0, got %g", n, t->init.b);
        break;
    default: return fl__err(FL_EINVAL, "sparse table '%s': unknown initializer kind %d", n, (int)t->init.kind);
    }
    fl__ps_entry e;
    FL_CHECK(fl__ps_entry_parse(t->entry, n, &e));
    const fl_ps_accessor *a = &t->accessor;
    if (!(a->show_click_decay_rate >= 0 && a->show_click_decay_rate <= 1))
        return fl__err(FL_EINVAL, "sparse table '%s': show_click_decay_rate must be in [0, 1], got %g", n,
                       a->show_click_decay_rate);
    if (a->delete_after_unseen_days < 0 || a->delta_keep_days < 0)
        return fl__err(FL_EINVAL, "sparse table '%s': day counts must be >= 0", n);
    return fl__ps_ssd_check(t);
}

/* ---- hashing and copies ------------------------------------------------------------------- */

static uint64_t mix(uint64_t h, const void *p, size_t n) { return fl__hash_u64(h ^ fl__hash_bytes(p, n)); }

int fl__ps_table_pushes(const fl_ps_table_config *t)
{
    return t->opt.kind == FL_PS_OPT_SUM ? FL__PS_PUSH_DELTAS : t->opt.scaled ? FL__PS_PUSH_SCALED : FL__PS_PUSH_GRADS;
}

const char *fl__ps_pushes_name(int pushes)
{
    switch (pushes) {
    case FL__PS_PUSH_GRADS: return "gradients (the server applies its optimizer)";
    case FL__PS_PUSH_SCALED:
        return "gradients already multiplied by the worker's learning-rate schedule (the server applies sgd at "
               "rate lr_scale)";
    case FL__PS_PUSH_DELTAS: return "parameter deltas (the workers optimize, GEO; the server sums)";
    }
    return "?";
}

uint64_t fl__ps_table_shape_hash(const fl_ps_table_config *t)
{
    uint64_t h = 0x5053u;
    h = mix(h, t->name, strlen(t->name));
    int32_t k[3] = {(int32_t)t->kind, t->kind == FL_PS_DENSE ? 0 : t->dim, fl__ps_table_pushes(t)};
    h = mix(h, k, sizeof k);
    if (t->kind == FL_PS_DENSE) {
        h = mix(h, &t->rows, 8);
        h = mix(h, &t->cols, 8);
    }
    return h;
}

uint64_t fl__ps_table_rule_hash(const fl_ps_table_config *t)
{
    uint64_t h = 0x5255u;
    if (t->kind == FL_PS_SPARSE) {
        int32_t ik = (int32_t)t->init.kind;
        h = mix(h, &ik, 4);
        h = mix(h, &t->init.a, 4);
        h = mix(h, &t->init.b, 4);
        h = mix(h, &t->init.seed, 8);
        const char *e = t->entry ? t->entry : "";
        h = mix(h, e, strlen(e));
        fl_ps_accessor a;
        fl__ps_accessor_fill(&t->accessor, &a);
        float f[6] = {a.nonclk_coeff,     a.click_coeff,    a.show_click_decay_rate,
                      a.delete_threshold, a.base_threshold, a.delta_threshold};
        int32_t d2[2] = {a.delete_after_unseen_days, a.delta_keep_days};
        h = mix(h, f, sizeof f);
        h = mix(h, d2, sizeof d2);
    }
    fl__ps_opt o;
    fl__ps_opt_init(&o, &t->opt);
    int32_t ok = (int32_t)o.kind;
    double od[3] = {o.b1, o.b2, o.eps};
    float of[3] = {o.lr, o.l2, o.mu};
    h = mix(h, &o.nesterov, sizeof o.nesterov);
    h = mix(h, &ok, 4);
    h = mix(h, od, sizeof od);
    h = mix(h, of, sizeof of);
    return h;
}

void fl__ps_tables_free(fl_ps_table_config *t, int n)
{
    if (!t) return;
    for (int i = 0; i < n; i++) {
        free((char *)t[i].name);
        free((char *)t[i].entry);
        free((char *)t[i].ssd_path);
    }
    free(t);
}

int fl__ps_tables_copy(const fl_ps_table_config *in, int n, fl_ps_table_config **out)
{
    fl_ps_table_config *t = calloc((size_t)(n > 0 ? n : 1), sizeof *t);
    if (!t) return fl__err(FL_ENOMEM, "out of memory for table configurations");
    for (int i = 0; i < n; i++) {
        t[i] = in[i];
        t[i].name = fl__strdup(in[i].name);
        t[i].entry = fl__strdup(in[i].entry ? in[i].entry : "");
        t[i].ssd_path = fl__strdup(in[i].ssd_path ? in[i].ssd_path : "");
        if (!t[i].name || !t[i].entry || !t[i].ssd_path) {
            fl__ps_tables_free(t, i + 1);
            return fl__err(FL_ENOMEM, "out of memory for table configurations");
        }
    }
    *out = t;
    return FL_OK;
}

/* ---- environment defaults ------------------------------------------------------------------ */

static int env_ms(const char *name, int *field, int64_t def, int64_t lo)
{
    if (*field != 0) return FL_OK;
    int64_t v;
    FL_CHECK(fl__env_int(name, def, lo, 24LL * 3600 * 1000, &v));
    *field = (int)v;
    return FL_OK;
}

int fl_ps_server_opts_from_env(fl_ps_server_opts *o)
{
    if (!o) return fl__err(FL_EINVAL, "fl_ps_server_opts_from_env: opts is NULL");
    FL_CHECK(env_ms("FLEET_PS_THREADS", &o->num_threads, 4, 1));
    FL_CHECK(env_ms("FLEET_PS_REQUEST_TIMEOUT_MS", &o->request_timeout_ms, 60000, 1));
    FL_CHECK(env_ms("FLEET_PS_RECONNECT_GRACE_MS", &o->reconnect_grace_ms, 3000, 1));
    FL_CHECK(env_ms("FLEET_PS_WORKER_TIMEOUT_MS", &o->worker_timeout_ms, FL__LIVE_TIMEOUT_MS, -1));
    FL_CHECK(env_ms("FLEET_PS_WORKER_JOIN_TIMEOUT_MS", &o->join_timeout_ms, 120000, -1));
    return FL_OK;
}

int fl_ps_client_opts_from_env(fl_ps_client_opts *o)
{
    if (!o) return fl__err(FL_EINVAL, "fl_ps_client_opts_from_env: opts is NULL");
    FL_CHECK(env_ms("FLEET_PS_CONNECT_TIMEOUT_MS", &o->connect_timeout_ms, 60000, 1));
    FL_CHECK(env_ms("FLEET_PS_REQUEST_TIMEOUT_MS", &o->request_timeout_ms, 60000, 1));
    FL_CHECK(env_ms("FLEET_PS_BARRIER_TIMEOUT_MS", &o->barrier_timeout_ms, 600000, 1));
    FL_CHECK(env_ms("FLEET_PS_RETRY_MS", &o->retry_ms, 3000, -1));
    FL_CHECK(env_ms("FLEET_PS_HEARTBEAT_MS", &o->heartbeat_ms, FL__LIVE_HEARTBEAT_MS, -1));
    FL_CHECK(env_ms("FLEET_PS_SERVER_TIMEOUT_MS", &o->server_timeout_ms, FL__LIVE_TIMEOUT_MS, -1));
    return FL_OK;
}
