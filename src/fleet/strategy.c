/*
 * strategy.c - DistributedStrategy: Paddle 2.x field names and defaults, set by name,
 * parsed from key=value lines or JSON, and checked against what this build implements.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "fleet_internal.h"

typedef enum { F_BOOL, F_INT, F_I64, F_DBL } ftype;

/* impl: 1 = implemented; 0 = rejected when not at its default */
typedef struct {
    const char *key;
    ftype type;
    size_t off;
    double def;
    int impl;
    double lo; /* minimum accepted value */
    const char *why;
} field;

#define FO(m) offsetof(fleet_strategy, m)
static const field fields[] = {
    {"a_sync", F_BOOL, FO(a_sync), 1, 1, 0, NULL},
    {"a_sync_configs.k_steps", F_I64, FO(a_sync_configs.k_steps), -1, 1, -1, NULL},
    {"a_sync_configs.max_merge_var_num", F_INT, FO(a_sync_configs.max_merge_var_num), 1, 1, 1, NULL},
    /* 1, not the proto's 16: Paddle 2.x's runtime ignores this field and sizes the queue by
     * CPU_NUM (default 1); a queue of 16 lets gradients go 16 steps stale (docs/trainer.md) */
    {"a_sync_configs.send_queue_size", F_INT, FO(a_sync_configs.send_queue_size), 1, 1, 1, NULL},
    {"a_sync_configs.independent_recv_thread", F_BOOL, FO(a_sync_configs.independent_recv_thread), 0, 1, 0, NULL},
    {"a_sync_configs.min_send_grad_num_before_recv", F_INT, FO(a_sync_configs.min_send_grad_num_before_recv), 1, 1, 1, NULL},
    {"a_sync_configs.thread_pool_size", F_INT, FO(a_sync_configs.thread_pool_size), 1, 1, 1, NULL},
    {"a_sync_configs.send_wait_times", F_INT, FO(a_sync_configs.send_wait_times), 1, 1, 1, NULL},
    {"a_sync_configs.runtime_split_send_recv", F_BOOL, FO(a_sync_configs.runtime_split_send_recv), 0, 1, 0, NULL},
    {"a_sync_configs.launch_barrier", F_BOOL, FO(a_sync_configs.launch_barrier), 1, 1, 0, NULL},
    {"localsgd", F_BOOL, FO(localsgd), 0, 1, 0, NULL},
    {"localsgd_configs.k_steps", F_I64, FO(localsgd_configs.k_steps), 1, 1, 1, NULL},
    {"localsgd_configs.begin_step", F_I64, FO(localsgd_configs.begin_step), 1, 1, 1, NULL},
    {"adaptive_localsgd", F_BOOL, FO(adaptive_localsgd), 0, 0, 0, "adaptive LocalSGD is not implemented; use localsgd"},
    {"adaptive_localsgd_configs.init_k_steps", F_I64, FO(adaptive_localsgd_configs.init_k_steps), 1, 0, 1, "adaptive LocalSGD is not implemented"},
    {"adaptive_localsgd_configs.begin_step", F_I64, FO(adaptive_localsgd_configs.begin_step), 1, 0, 1, "adaptive LocalSGD is not implemented"},
    {"gradient_merge", F_BOOL, FO(gradient_merge), 0, 1, 0, NULL},
    {"gradient_merge_configs.k_steps", F_I64, FO(gradient_merge_configs.k_steps), 1, 1, 1, NULL},
    {"gradient_merge_configs.avg", F_BOOL, FO(gradient_merge_configs.avg), 1, 1, 0, NULL},
    {"amp", F_BOOL, FO(amp), 0, 0, 0, "AMP (mixed precision) is not implemented yet"},
    {"amp_configs.init_loss_scaling", F_DBL, FO(amp_configs.init_loss_scaling), 32768, 0, 0, "AMP is not implemented yet"},
    {"amp_configs.incr_every_n_steps", F_I64, FO(amp_configs.incr_every_n_steps), 1000, 0, 1, "AMP is not implemented yet"},
    {"amp_configs.decr_every_n_nan_or_inf", F_I64, FO(amp_configs.decr_every_n_nan_or_inf), 2, 0, 1, "AMP is not implemented yet"},
    {"amp_configs.incr_ratio", F_DBL, FO(amp_configs.incr_ratio), 2.0, 0, 0, "AMP is not implemented yet"},
    {"amp_configs.decr_ratio", F_DBL, FO(amp_configs.decr_ratio), 0.8, 0, 0, "AMP is not implemented yet"},
    {"amp_configs.use_dynamic_loss_scaling", F_BOOL, FO(amp_configs.use_dynamic_loss_scaling), 1, 0, 0, "AMP is not implemented yet"},
    {"dgc", F_BOOL, FO(dgc), 0, 0, 0, "DGC (deep gradient compression) is not implemented yet"},
    {"dgc_configs.rampup_begin_step", F_I64, FO(dgc_configs.rampup_begin_step), 0, 0, 0, "DGC is not implemented yet"},
    {"dgc_configs.rampup_step", F_I64, FO(dgc_configs.rampup_step), 1, 0, 1, "DGC is not implemented yet"},
    {"recompute", F_BOOL, FO(recompute), 0, 0, 0, "recompute is not implemented"},
    {"lars", F_BOOL, FO(lars), 0, 0, 0, "LARS is not implemented"},
    {"lamb", F_BOOL, FO(lamb), 0, 0, 0, "LAMB is not implemented"},
    {"pipeline", F_BOOL, FO(pipeline), 0, 0, 0, "pipeline parallelism is not implemented"},
    {"sharding", F_BOOL, FO(sharding), 0, 0, 0, "sharding is not implemented"},
    {"tensor_parallel", F_BOOL, FO(tensor_parallel), 0, 0, 0, "tensor parallelism is not implemented"},
    {"elastic", F_BOOL, FO(elastic), 0, 0, 0, "elastic training is not implemented"},
    {"auto", F_BOOL, FO(auto_mode), 0, 0, 0, "auto mode is not implemented"},
    {"sync_batch_norm", F_BOOL, FO(sync_batch_norm), 0, 0, 0, "sync_batch_norm is not implemented"},
    {"use_hierarchical_allreduce", F_BOOL, FO(use_hierarchical_allreduce), 0, 0, 0, "hierarchical allreduce is not implemented"},
    {"hierarchical_allreduce_inter_nranks", F_I64, FO(hierarchical_allreduce_inter_nranks), 1, 0, 1, "hierarchical allreduce is not implemented"},
    {"fuse_all_reduce_ops", F_BOOL, FO(fuse_all_reduce_ops), 1, 1, 0, NULL},
    {"fuse_grad_size_in_MB", F_DBL, FO(fuse_grad_size_in_MB), 32, 1, 0, NULL},
    {"fuse_grad_size_in_TFLOPS", F_DBL, FO(fuse_grad_size_in_TFLOPS), 50, 0, 0, "fusion by TFLOPS is not implemented; use fuse_grad_size_in_MB"},
    {"nccl_comm_num", F_I64, FO(nccl_comm_num), 1, 0, 1, "only one communicator per job is implemented"},
    {"sync_nccl_allreduce", F_BOOL, FO(sync_nccl_allreduce), 1, 0, 0, "allreduce is always synchronous with the step"},
};
#define NFIELDS (int)(sizeof fields / sizeof fields[0])

static double get_field(const fleet_strategy *s, const field *f)
{
    const char *p = (const char *)s + f->off;
    switch (f->type) {
    case F_BOOL:
    case F_INT: return *(const int *)p;
    case F_I64: return (double)*(const int64_t *)p;
    default: return *(const double *)p;
    }
}

static void put_field(fleet_strategy *s, const field *f, double v)
{
    char *p = (char *)s + f->off;
    switch (f->type) {
    case F_BOOL:
    case F_INT: *(int *)p = (int)v; break;
    case F_I64: *(int64_t *)p = (int64_t)v; break;
    default: *(double *)p = v; break;
    }
}

fleet_strategy fleet_strategy_default(void)
{
    fleet_strategy s;
    memset(&s, 0, sizeof s);
    for (int i = 0; i < NFIELDS; i++) put_field(&s, &fields[i], fields[i].def);
    return s;
}

static const field *find_field(const char *key)
{
    for (int i = 0; i < NFIELDS; i++)
        if (!strcmp(fields[i].key, key)) return &fields[i];
    return NULL;
}

static int parse_value(const field *f, const char *v, double *out)
{
    if (f->type == F_BOOL) {
        if (!strcmp(v, "true") || !strcmp(v, "True") || !strcmp(v, "1")) *out = 1;
        else if (!strcmp(v, "false") || !strcmp(v, "False") || !strcmp(v, "0")) *out = 0;
        else return fl__err(FL_EINVAL, "strategy field '%s'='%s' is invalid: expected true or false", f->key, v);
        return FL_OK;
    }
    char *end;
    errno = 0;
    if (f->type == F_DBL) {
        double d = strtod(v, &end);
        if (errno || end == v || *end || !isfinite(d))
            return fl__err(FL_EINVAL, "strategy field '%s'='%s' is invalid: expected a number", f->key, v);
        *out = d;
    } else {
        long long x = strtoll(v, &end, 10);
        if (errno || end == v || *end || (f->type == F_INT && (x > INT32_MAX || x < INT32_MIN)))
            return fl__err(FL_EINVAL, "strategy field '%s'='%s' is invalid: expected an integer", f->key, v);
        *out = (double)x;
    }
    if (*out < f->lo) return fl__err(FL_EINVAL, "strategy field '%s'=%s is out of range: expected >= %g", f->key, v, f->lo);
    return FL_OK;
}

int fleet_strategy_set(fleet_strategy *s, const char *key, const char *value)
{
    if (!s || !key || !value) return fl__err(FL_EINVAL, "fleet_strategy_set: NULL argument");
    const field *f = find_field(key);
    if (!f) return fl__err(FL_EINVAL, "unknown strategy field '%s'", key);
    double v = 0;
    FL_CHECK(parse_value(f, value, &v));
    put_field(s, f, v);
    if (!strcmp(key, "a_sync")) s->a_sync_configs.k_steps = 0; /* Paddle's a_sync setter */
    return FL_OK;
}

int fleet_strategy_check(const fleet_strategy *s)
{
    if (!s) return fl__err(FL_EINVAL, "fleet_strategy_check: strategy is NULL");
    for (int i = 0; i < NFIELDS; i++) {
        const field *f = &fields[i];
        double v = get_field(s, f);
        if (!f->impl && v != f->def)
            return fl__err(FL_EUNSUPPORTED, "strategy field '%s' is set to %g but %s; leave it at its default (%g)", f->key, v,
                           f->why, f->def);
        if (v < f->lo) return fl__err(FL_EINVAL, "strategy field '%s' = %g is out of range: expected >= %g", f->key, v, f->lo);
    }
    if (s->fuse_grad_size_in_MB <= 0)
        return fl__err(FL_EINVAL, "strategy field 'fuse_grad_size_in_MB' = %g must be positive", s->fuse_grad_size_in_MB);
    if (s->localsgd && s->gradient_merge)
        return fl__err(FL_EINVAL, "strategy: localsgd and gradient_merge cannot be combined");
    return FL_OK;
}

char *fleet_strategy_to_text(const fleet_strategy *s)
{
    fl_buf b = {0};
    fl__buf_put(&b, "", 0);
    for (int i = 0; i < NFIELDS; i++) {
        double v = get_field(s, &fields[i]);
        if (v == fields[i].def) continue;
        if (fields[i].type == F_BOOL)
            fl__buf_printf(&b, "%s=%s\n", fields[i].key, v ? "true" : "false");
        else if (fields[i].type == F_DBL)
            fl__buf_printf(&b, "%s=%.17g\n", fields[i].key, v);
        else
            fl__buf_printf(&b, "%s=%lld\n", fields[i].key, (long long)v);
    }
    if (b.failed) {
        fl__buf_free(&b);
        fl__err(FL_ENOMEM, "out of memory");
        return NULL;
    }
    return b.p;
}

/* ---- text parsing: key=value lines or a JSON object ---------------------------------------- */

typedef struct {
    const char *p;
    int line;
} json_in;

static void ws(json_in *j)
{
    while (*j->p && isspace((unsigned char)*j->p)) {
        if (*j->p == '\n') j->line++;
        j->p++;
    }
}

static int json_token(json_in *j, char *out, size_t cap, int *is_str)
{
    ws(j);
    size_t n = 0;
    *is_str = 0;
    if (*j->p == '"') {
        *is_str = 1;
        j->p++;
        while (*j->p && *j->p != '"') {
            if (*j->p == '\\' || *j->p == '\n')
                return fl__err(FL_EINVAL, "strategy JSON line %d: escapes and newlines are not allowed in strings", j->line);
            if (n + 1 >= cap) return fl__err(FL_EINVAL, "strategy JSON line %d: string too long", j->line);
            out[n++] = *j->p++;
        }
        if (*j->p != '"') return fl__err(FL_EINVAL, "strategy JSON line %d: unterminated string", j->line);
        j->p++;
    } else {
        while (*j->p && (isalnum((unsigned char)*j->p) || strchr("+-._", *j->p))) {
            if (n + 1 >= cap) return fl__err(FL_EINVAL, "strategy JSON line %d: value too long", j->line);
            out[n++] = *j->p++;
        }
        if (!n) return fl__err(FL_EINVAL, "strategy JSON line %d: unexpected character '%c'", j->line, *j->p ? *j->p : '?');
    }
    out[n] = 0;
    return FL_OK;
}

static int json_object(json_in *j, const char *prefix, fleet_strategy *s, int depth)
{
    if (depth > 2) return fl__err(FL_EINVAL, "strategy JSON line %d: nested too deeply", j->line);
    ws(j);
    if (*j->p != '{') return fl__err(FL_EINVAL, "strategy JSON line %d: expected '{'", j->line);
    j->p++;
    ws(j);
    if (*j->p == '}') {
        j->p++;
        return FL_OK;
    }
    for (;;) {
        char key[128], full[256], val[128];
        int is_str;
        FL_CHECK(json_token(j, key, sizeof key, &is_str));
        if (!is_str) return fl__err(FL_EINVAL, "strategy JSON line %d: expected a quoted key", j->line);
        snprintf(full, sizeof full, "%s%s%s", prefix, *prefix ? "." : "", key);
        ws(j);
        if (*j->p != ':') return fl__err(FL_EINVAL, "strategy JSON line %d: expected ':' after \"%s\"", j->line, key);
        j->p++;
        ws(j);
        if (*j->p == '{') {
            FL_CHECK(json_object(j, full, s, depth + 1));
        } else {
            FL_CHECK(json_token(j, val, sizeof val, &is_str));
            FL_CHECK(fleet_strategy_set(s, full, val));
        }
        ws(j);
        if (*j->p == ',') {
            j->p++;
            continue;
        }
        if (*j->p == '}') {
            j->p++;
            return FL_OK;
        }
        return fl__err(FL_EINVAL, "strategy JSON line %d: expected ',' or '}'", j->line);
    }
}

static int parse_lines(fleet_strategy *s, const char *text)
{
    int line = 0;
    const char *p = text;
    while (*p) {
        line++;
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        char buf[512];
        if (len >= sizeof buf) return fl__err(FL_EINVAL, "strategy line %d: too long", line);
        memcpy(buf, p, len);
        buf[len] = 0;
        char *h = strchr(buf, '#');
        if (h) *h = 0;
        char *k = buf;
        while (isspace((unsigned char)*k)) k++;
        char *end = k + strlen(k);
        while (end > k && isspace((unsigned char)end[-1])) *--end = 0;
        if (*k) {
            char *eq = strchr(k, '=');
            if (!eq) return fl__err(FL_EINVAL, "strategy line %d: '%s' is not key=value", line, k);
            *eq = 0;
            char *v = eq + 1, *ke = eq;
            while (ke > k && isspace((unsigned char)ke[-1])) *--ke = 0;
            while (isspace((unsigned char)*v)) v++;
            int st = fleet_strategy_set(s, k, v);
            if (st != FL_OK) return fl__err(st, "strategy line %d: %s", line, fl_last_error());
        }
        p += len + (e ? 1 : 0);
    }
    return FL_OK;
}

int fleet_strategy_parse(fleet_strategy *s, const char *text)
{
    if (!s || !text) return fl__err(FL_EINVAL, "fleet_strategy_parse: NULL argument");
    fleet_strategy tmp = *s;
    const char *q = text;
    while (isspace((unsigned char)*q)) q++;
    int st;
    if (*q == '{') {
        json_in j = {text, 1};
        st = json_object(&j, "", &tmp, 0);
        if (st == FL_OK) {
            ws(&j);
            if (*j.p) st = fl__err(FL_EINVAL, "strategy JSON line %d: trailing characters after the object", j.line);
        }
    } else {
        st = parse_lines(&tmp, text);
    }
    if (st == FL_OK) *s = tmp;
    return st;
}

int fleet_strategy_load(fleet_strategy *s, const char *path)
{
    if (!path) return fl__err(FL_EINVAL, "fleet_strategy_load: path is NULL");
    FILE *f = fopen(path, "rb");
    if (!f) return fl__err(FL_EIO, "cannot open strategy file '%s': %s", path, strerror(errno));
    char *buf = malloc(1 << 20);
    size_t n = buf ? fread(buf, 1, (1 << 20) - 1, f) : 0;
    int big = !feof(f);
    fclose(f);
    if (!buf) return fl__err(FL_ENOMEM, "out of memory");
    if (big) {
        free(buf);
        return fl__err(FL_EINVAL, "strategy file '%s' is larger than 1 MiB", path);
    }
    buf[n] = 0;
    int st = fleet_strategy_parse(s, buf);
    free(buf);
    if (st != FL_OK) return fl__err(st, "%s: %s", path, fl_last_error());
    return FL_OK;
}
