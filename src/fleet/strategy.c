/*
 * strategy.c - DistributedStrategy: Paddle 2.x field names and defaults, set by name,
 * parsed from key=value lines or JSON (through src/base/json.c), and checked against what
 * this build implements.
 */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "fleet_internal.h"

#define STRATEGY_MAX_BYTES ((size_t)1 << 20)

/* F_DTYPE: an int holding FL_FLOAT32 or FL_BFLOAT16, written as a dtype name */
typedef enum { F_BOOL, F_INT, F_I64, F_DBL, F_STR, F_DTYPE } ftype;

/* impl: 1 = implemented; 0 = rejected when not at its default */
typedef struct {
    const char *key;
    ftype type;
    size_t off;
    double def;
    int impl;
    double lo; /* minimum accepted value */
    const char *why;
    const char *sdef; /* F_STR: default (a char[FLEET_STRATEGY_STR_MAX] member) */
} field;

#define FO(m) offsetof(fleet_strategy, m)
static const field fields[] = {
    {"a_sync", F_BOOL, FO(a_sync), 1, 1, 0, NULL},
    {"a_sync_configs.k_steps", F_I64, FO(a_sync_configs.k_steps), -1, 1, -1, NULL},
    /* max_merge_var_num, send_queue_size and send_wait_times: 0 is "not set" (the default),
     * so the async communicator can tell a user's value from its default: with none of the
     * three set it adapts to the link (src/fleet/ps/communicator.c); once one is set, the
     * unset ones are Paddle 2.x's 1 (a queue of 1, not the proto's 16: Paddle 2.x's runtime
     * sizes it by CPU_NUM, default 1; docs/trainer.md) */
    {"a_sync_configs.max_merge_var_num", F_INT, FO(a_sync_configs.max_merge_var_num), 0, 1, 0, NULL},
    {"a_sync_configs.send_queue_size", F_INT, FO(a_sync_configs.send_queue_size), 0, 1, 0, NULL},
    {"a_sync_configs.independent_recv_thread", F_BOOL, FO(a_sync_configs.independent_recv_thread), 0, 1, 0, NULL},
    {"a_sync_configs.min_send_grad_num_before_recv", F_INT, FO(a_sync_configs.min_send_grad_num_before_recv), 1, 1, 1,
     NULL},
    {"a_sync_configs.thread_pool_size", F_INT, FO(a_sync_configs.thread_pool_size), 1, 1, 1, NULL},
    {"a_sync_configs.send_wait_times", F_INT, FO(a_sync_configs.send_wait_times), 0, 1, 0, NULL},
    {"a_sync_configs.runtime_split_send_recv", F_BOOL, FO(a_sync_configs.runtime_split_send_recv), 0, 1, 0, NULL},
    {"a_sync_configs.launch_barrier", F_BOOL, FO(a_sync_configs.launch_barrier), 1, 1, 0, NULL},
    {"a_sync_configs.half_async", F_BOOL, FO(a_sync_configs.half_async), 0, 1, 0, NULL},
    {"a_sync_configs.dense_wire_dtype", F_DTYPE, FO(a_sync_configs.dense_wire_dtype), FL_FLOAT32, 1, 0, NULL},
    {"localsgd", F_BOOL, FO(localsgd), 0, 1, 0, NULL},
    {"localsgd_configs.k_steps", F_I64, FO(localsgd_configs.k_steps), 1, 1, 1, NULL},
    {"localsgd_configs.begin_step", F_I64, FO(localsgd_configs.begin_step), 1, 1, 1, NULL},
    {"adaptive_localsgd", F_BOOL, FO(adaptive_localsgd), 0, 1, 0, NULL},
    {"adaptive_localsgd_configs.init_k_steps", F_I64, FO(adaptive_localsgd_configs.init_k_steps), 1, 1, 1, NULL},
    {"adaptive_localsgd_configs.begin_step", F_I64, FO(adaptive_localsgd_configs.begin_step), 1, 1, 1, NULL},
    {"gradient_merge", F_BOOL, FO(gradient_merge), 0, 1, 0, NULL},
    {"gradient_merge_configs.k_steps", F_I64, FO(gradient_merge_configs.k_steps), 1, 1, 1, NULL},
    {"gradient_merge_configs.avg", F_BOOL, FO(gradient_merge_configs.avg), 1, 1, 0, NULL},
    {"amp", F_BOOL, FO(amp), 0, 1, 0, NULL},
    {"amp_configs.init_loss_scaling", F_DBL, FO(amp_configs.init_loss_scaling), 32768, 1, 0, NULL},
    {"amp_configs.incr_every_n_steps", F_I64, FO(amp_configs.incr_every_n_steps), 1000, 1, 1, NULL},
    {"amp_configs.decr_every_n_nan_or_inf", F_I64, FO(amp_configs.decr_every_n_nan_or_inf), 2, 1, 1, NULL},
    {"amp_configs.incr_ratio", F_DBL, FO(amp_configs.incr_ratio), 2.0, 1, 0, NULL},
    {"amp_configs.decr_ratio", F_DBL, FO(amp_configs.decr_ratio), 0.8, 1, 0, NULL},
    {"amp_configs.use_dynamic_loss_scaling", F_BOOL, FO(amp_configs.use_dynamic_loss_scaling), 1, 1, 0, NULL},
    {"amp_configs.custom_white_list", F_STR, FO(amp_configs.custom_white_list), 0, 1, 0, NULL, ""},
    {"amp_configs.custom_black_list", F_STR, FO(amp_configs.custom_black_list), 0, 1, 0, NULL, ""},
    {"amp_configs.use_pure_fp16", F_BOOL, FO(amp_configs.use_pure_fp16), 0, 1, 0, NULL},
    {"amp_configs.dtype", F_STR, FO(amp_configs.dtype), 0, 1, 0, NULL, "bfloat16"},
    {"dgc", F_BOOL, FO(dgc), 0, 1, 0, NULL},
    {"dgc_configs.rampup_begin_step", F_I64, FO(dgc_configs.rampup_begin_step), 0, 1, 0, NULL},
    {"dgc_configs.rampup_step", F_I64, FO(dgc_configs.rampup_step), 1, 1, 1, NULL},
    /* a list of numbers in [0, 1): comma-separated in text, a JSON list of numbers */
    {"dgc_configs.sparsity", F_STR, FO(dgc_configs.sparsity), 0, 1, 0, NULL, "0.999"},
    {"recompute", F_BOOL, FO(recompute), 0, 1, 0, NULL},
    {"recompute_configs.checkpoints", F_STR, FO(recompute_configs.checkpoints), 0, 1, 0, NULL, ""},
    {"lars", F_BOOL, FO(lars), 0, 1, 0, NULL},
    {"lars_configs.lars_coeff", F_DBL, FO(lars_configs.lars_coeff), 0.001, 1, 0, NULL},
    {"lars_configs.lars_weight_decay", F_DBL, FO(lars_configs.lars_weight_decay), 0.0005, 1, 0, NULL},
    {"lars_configs.epsilon", F_DBL, FO(lars_configs.epsilon), 0, 1, 0, NULL},
    {"lars_configs.exclude_from_weight_decay", F_STR, FO(lars_configs.exclude_from_weight_decay), 0, 1, 0, NULL, ""},
    {"lamb", F_BOOL, FO(lamb), 0, 1, 0, NULL},
    {"lamb_configs.lamb_weight_decay", F_DBL, FO(lamb_configs.lamb_weight_decay), 0.01, 1, 0, NULL},
    {"lamb_configs.exclude_from_weight_decay", F_STR, FO(lamb_configs.exclude_from_weight_decay), 0, 1, 0, NULL, ""},
    {"pipeline", F_BOOL, FO(pipeline), 0, 0, 0, "pipeline parallelism is not implemented"},
    {"sharding", F_BOOL, FO(sharding), 0, 0, 0, "sharding is not implemented"},
    {"tensor_parallel", F_BOOL, FO(tensor_parallel), 0, 0, 0, "tensor parallelism is not implemented"},
    {"elastic", F_BOOL, FO(elastic), 0, 0, 0, "elastic training is not implemented"},
    {"auto", F_BOOL, FO(auto_mode), 0, 0, 0, "auto mode is not implemented"},
    {"sync_batch_norm", F_BOOL, FO(sync_batch_norm), 0, 0, 0, "sync_batch_norm is not implemented"},
    {"use_hierarchical_allreduce", F_BOOL, FO(use_hierarchical_allreduce), 0, 0, 0,
     "hierarchical allreduce is not implemented"},
    {"hierarchical_allreduce_inter_nranks", F_I64, FO(hierarchical_allreduce_inter_nranks), 1, 0, 1,
     "hierarchical allreduce is not implemented"},
    {"fuse_all_reduce_ops", F_BOOL, FO(fuse_all_reduce_ops), 1, 1, 0, NULL},
    {"fuse_grad_size_in_MB", F_DBL, FO(fuse_grad_size_in_MB), 32, 1, 0, NULL},
    {"fuse_grad_size_in_TFLOPS", F_DBL, FO(fuse_grad_size_in_TFLOPS), 50, 0, 0,
     "fusion by TFLOPS is not implemented; use fuse_grad_size_in_MB"},
    {"nccl_comm_num", F_I64, FO(nccl_comm_num), 1, 0, 1, "only one communicator per job is implemented"},
    {"allreduce_dtype", F_STR, FO(allreduce_dtype), 0, 1, 0, NULL, "float32"},
    {"sync_nccl_allreduce", F_BOOL, FO(sync_nccl_allreduce), 1, 0, 0, "allreduce is always synchronous with the step"},
    /* checked in fleet_strategy_check; applied to the servers' tables by src/fleet/ps/runtime.c */
    {"fleet_desc_configs.sparse_table_class", F_STR, FO(fleet_desc_configs.sparse_table_class), 0, 1, 0, NULL,
     "DownpourSparseTable"},
    {"fleet_desc_configs.sparse_ssd_path", F_STR, FO(fleet_desc_configs.sparse_ssd_path), 0, 1, 0, NULL, ""},
    {"fleet_desc_configs.sparse_mem_budget_mb", F_I64, FO(fleet_desc_configs.sparse_mem_budget_mb), 0, 1, 0, NULL},
};
#define NFIELDS (int)(sizeof fields / sizeof fields[0])

static double get_field(const fleet_strategy *s, const field *f)
{
    const char *p = (const char *)s + f->off;
    switch (f->type) {
    case F_BOOL:
    case F_INT:
    case F_DTYPE: return *(const int *)p;
    case F_I64: return (double)*(const int64_t *)p;
    case F_STR: return 0; /* compared with str_default() */
    default: return *(const double *)p;
    }
}

static const char *get_str(const fleet_strategy *s, const field *f) { return (const char *)s + f->off; }
static int str_default(const fleet_strategy *s, const field *f) { return !strcmp(get_str(s, f), f->sdef); }
static void put_str(fleet_strategy *s, const field *f, const char *v)
{
    snprintf((char *)s + f->off, FLEET_STRATEGY_STR_MAX, "%s", v);
}

static void put_field(fleet_strategy *s, const field *f, double v)
{
    char *p = (char *)s + f->off;
    switch (f->type) {
    case F_BOOL:
    case F_INT:
    case F_DTYPE: *(int *)p = (int)v; break;
    case F_I64: *(int64_t *)p = (int64_t)v; break;
    case F_STR: break;
    default: *(double *)p = v; break;
    }
}

fleet_strategy fleet_strategy_default(void)
{
    fleet_strategy s;
    memset(&s, 0, sizeof s);
    for (int i = 0; i < NFIELDS; i++) {
        put_field(&s, &fields[i], fields[i].def);
        if (fields[i].type == F_STR) put_str(&s, &fields[i], fields[i].sdef);
    }
    return s;
}

static const field *find_field(const char *key)
{
    for (int i = 0; i < NFIELDS; i++)
        if (!strcmp(fields[i].key, key)) return &fields[i];
    return NULL;
}

/* The dtypes dense values may travel in: float32 or bfloat16 ("bf16" too). */
static int parse_wire_dtype(const field *f, const char *v, double *out)
{
    fl_dtype dt;
    if (!strcmp(v, "bf16")) dt = FL_BFLOAT16;
    else if (fl_dtype_parse(v, &dt) != FL_OK) dt = FL_DTYPE_COUNT;
    if (dt != FL_FLOAT32 && dt != FL_BFLOAT16)
        return fl__err(FL_EINVAL, "strategy field '%s'='%s' is invalid: expected float32, bfloat16 or bf16", f->key, v);
    *out = dt;
    return FL_OK;
}

static int parse_value(const field *f, const char *v, double *out)
{
    if (f->type == F_BOOL) {
        if (!strcmp(v, "true") || !strcmp(v, "True") || !strcmp(v, "1")) *out = 1;
        else if (!strcmp(v, "false") || !strcmp(v, "False") || !strcmp(v, "0")) *out = 0;
        else return fl__err(FL_EINVAL, "strategy field '%s'='%s' is invalid: expected true or false", f->key, v);
        return FL_OK;
    }
    if (f->type == F_DTYPE) return parse_wire_dtype(f, v, out);
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

static void store(fleet_strategy *s, const field *f, double v)
{
    put_field(s, f, v);
    if (!strcmp(f->key, "a_sync")) s->a_sync_configs.k_steps = 0; /* Paddle's a_sync setter */
}

int fleet_strategy_set(fleet_strategy *s, const char *key, const char *value)
{
    if (!s || !key || !value) return fl__err(FL_EINVAL, "fleet_strategy_set: NULL argument");
    const field *f = find_field(key);
    if (!f) return fl__err(FL_EINVAL, "unknown strategy field '%s'", key);
    if (f->type == F_STR) {
        if (strlen(value) >= FLEET_STRATEGY_STR_MAX)
            return fl__err(FL_EINVAL, "strategy field '%s' is longer than %d bytes", key, FLEET_STRATEGY_STR_MAX - 1);
        put_str(s, f, value);
        return FL_OK;
    }
    double v = 0;
    FL_CHECK(parse_value(f, value, &v));
    store(s, f, v);
    return FL_OK;
}

int fleet_strategy_check(const fleet_strategy *s)
{
    if (!s) return fl__err(FL_EINVAL, "fleet_strategy_check: strategy is NULL");
    for (int i = 0; i < NFIELDS; i++) {
        const field *f = &fields[i];
        if (f->type == F_STR) {
            if (memchr(get_str(s, f), 0, FLEET_STRATEGY_STR_MAX) == NULL)
                return fl__err(FL_EINVAL, "strategy field '%s' is not NUL-terminated", f->key);
            continue;
        }
        double v = get_field(s, f);
        if (!f->impl && v != f->def)
            return fl__err(FL_EUNSUPPORTED, "strategy field '%s' is set to %g but %s; leave it at its default (%g)", f->key,
                           v, f->why, f->def);
        if (v < f->lo)
            return fl__err(FL_EINVAL, "strategy field '%s' = %g is out of range: expected >= %g", f->key, v, f->lo);
        if (f->type == F_DTYPE && v != FL_FLOAT32 && v != FL_BFLOAT16)
            return fl__err(FL_EINVAL, "strategy field '%s' = %s: expected float32 or bfloat16", f->key,
                           fl_dtype_name((fl_dtype)v));
    }
    if (s->fuse_grad_size_in_MB <= 0)
        return fl__err(FL_EINVAL, "strategy field 'fuse_grad_size_in_MB' = %g must be positive", s->fuse_grad_size_in_MB);
    if ((s->localsgd || s->adaptive_localsgd) && s->gradient_merge)
        return fl__err(FL_EINVAL, "strategy: %s and gradient_merge cannot be combined",
                       s->localsgd ? "localsgd" : "adaptive_localsgd");
    if (s->localsgd && s->adaptive_localsgd)
        return fl__err(FL_EINVAL, "strategy: localsgd and adaptive_localsgd cannot be combined (choose one)");
    static const char *const ar_dtypes[] = {"float32", "fp32", "bfloat16", "bf16", "float16", "fp16"};
    int ar_ok = 0;
    for (size_t i = 0; i < sizeof ar_dtypes / sizeof ar_dtypes[0]; i++) ar_ok |= !strcmp(s->allreduce_dtype, ar_dtypes[i]);
    if (!ar_ok)
        return fl__err(FL_EINVAL, "strategy field 'allreduce_dtype' = '%s' is invalid: expected float32, bfloat16 or "
                       "float16", s->allreduce_dtype);
    FL_CHECK(fl__strategy_ssd_table(s, NULL));
    if (s->recompute && !s->recompute_configs.checkpoints[0])
        return fl__err(FL_EINVAL, "strategy: recompute is true but recompute_configs.checkpoints is empty: name the "
                                  "variables to keep (the forward ops between them are recomputed in backward)");
    if (s->lars && s->lamb)
        return fl__err(FL_EINVAL, "strategy: lars and lamb cannot be combined (one replaces Momentum, the other Adam)");
    float sp[FLEET_DGC_MAX_SPARSITY];
    int nsp = 0;
    if (s->dgc || s->dgc_configs.sparsity[0]) /* empty (a zeroed struct) passes while dgc is off */
        FL_CHECK(fl__strategy_dgc_sparsity(s, sp, &nsp));
    if (s->dgc && (s->localsgd || s->adaptive_localsgd || s->gradient_merge || s->lars || s->lamb))
        return fl__err(FL_EINVAL,
                       "strategy: dgc cannot be combined with %s (DGC replaces the Momentum update and the "
                       "gradient allreduce itself)",
                       s->localsgd            ? "localsgd"
                       : s->adaptive_localsgd ? "adaptive_localsgd"
                       : s->gradient_merge    ? "gradient_merge"
                       : s->lars              ? "lars"
                                              : "lamb");
    const char *dt = s->amp_configs.dtype;
    static const char *const amp_dtypes[] = {"bfloat16", "bf16", "float16", "fp16"};
    int amp_ok = 0;
    for (size_t i = 0; i < sizeof amp_dtypes / sizeof amp_dtypes[0]; i++) amp_ok |= !strcmp(dt, amp_dtypes[i]);
    if (!amp_ok)
        return fl__err(FL_EINVAL, "strategy field 'amp_configs.dtype' = '%s' is invalid: expected bfloat16 or float16",
                       dt);
    return FL_OK;
}

int fl__strategy_ssd_table(const fleet_strategy *s, int *ssd)
{
    static const char *const classes[][2] = {{"DownpourSparseTable", "0"},
                                             {"MemorySparseTable", "0"},
                                             {"DownpourSparseSSDTable", "1"},
                                             {"SSDSparseTable", "1"}};
    const char *cls = s->fleet_desc_configs.sparse_table_class, *path = s->fleet_desc_configs.sparse_ssd_path;
    const int64_t mb = s->fleet_desc_configs.sparse_mem_budget_mb;
    int is_ssd = -1;
    for (size_t i = 0; i < sizeof classes / sizeof classes[0]; i++)
        if (!strcmp(cls, classes[i][0])) is_ssd = classes[i][1][0] == '1';
    if (is_ssd < 0)
        return fl__err(FL_EINVAL,
                       "strategy field 'fleet_desc_configs.sparse_table_class' = '%s' is invalid: expected "
                       "DownpourSparseTable, MemorySparseTable, DownpourSparseSSDTable or SSDSparseTable",
                       cls);
    if (is_ssd && (!*path || mb < 1))
        return fl__err(FL_EINVAL,
                       "strategy: fleet_desc_configs.sparse_table_class = %s needs fleet_desc_configs.sparse_ssd_path "
                       "(a directory, got '%s') and fleet_desc_configs.sparse_mem_budget_mb >= 1 (got %lld)",
                       cls, path, (long long)mb);
    if (!is_ssd && (*path || mb))
        return fl__err(FL_EINVAL,
                       "strategy: fleet_desc_configs.sparse_ssd_path and sparse_mem_budget_mb apply to an SSD table "
                       "class, but sparse_table_class is %s",
                       cls);
    if (ssd) *ssd = is_ssd;
    return FL_OK;
}

int fl__strategy_dgc_sparsity(const fleet_strategy *s, float *out, int *n)
{
    const char *key = "dgc_configs.sparsity", *p = s->dgc_configs.sparsity;
    *n = 0;
    while (*p) {
        char *end;
        errno = 0;
        double d = strtod(p, &end);
        if (errno || end == p || !(d >= 0.0 && d < 1.0))
            return fl__err(FL_EINVAL, "strategy field '%s' = '%s': entry %d is not a number in [0, 1)", key,
                           s->dgc_configs.sparsity, *n + 1);
        if (*n == FLEET_DGC_MAX_SPARSITY)
            return fl__err(FL_EINVAL, "strategy field '%s' has more than %d entries", key, FLEET_DGC_MAX_SPARSITY);
        out[(*n)++] = (float)d;
        while (isspace((unsigned char)*end)) end++;
        if (*end && *end != ',')
            return fl__err(FL_EINVAL, "strategy field '%s' = '%s': expected numbers separated by commas", key,
                           s->dgc_configs.sparsity);
        p = *end ? end + 1 : end;
        if (*end && !*p)
            return fl__err(FL_EINVAL, "strategy field '%s' = '%s': a number is missing after the last comma", key,
                           s->dgc_configs.sparsity);
    }
    if (!*n) return fl__err(FL_EINVAL, "strategy field '%s' is empty: give at least one sparsity such as 0.999", key);
    return FL_OK;
}

/* Field f's value in s as text, the form fleet_strategy_set takes. */
static void field_text(const fleet_strategy *s, const field *f, char *out, size_t cap)
{
    double v = f->type == F_STR ? 0 : get_field(s, f);
    if (f->type == F_STR) snprintf(out, cap, "%s", get_str(s, f));
    else if (f->type == F_BOOL) snprintf(out, cap, "%s", v ? "true" : "false");
    else if (f->type == F_DTYPE) snprintf(out, cap, "%s", fl_dtype_name((fl_dtype)v));
    else if (f->type == F_DBL) snprintf(out, cap, "%.17g", v);
    else snprintf(out, cap, "%lld", (long long)v);
}

int fleet_strategy_get(const fleet_strategy *s, const char *key, char *out, size_t cap)
{
    if (!s || !key || !out || !cap) return fl__err(FL_EINVAL, "fleet_strategy_get: s, key or out is NULL, or cap is 0");
    const field *f = find_field(key);
    if (!f) return fl__err(FL_ENOTFOUND, "fleet_strategy_get: unknown strategy field '%s'", key);
    char v[FLEET_STRATEGY_STR_MAX + 32];
    field_text(s, f, v, sizeof v);
    if (strlen(v) >= cap) return fl__err(FL_EINVAL, "fleet_strategy_get: %s: cap %zu is too small", key, cap);
    memcpy(out, v, strlen(v) + 1);
    return FL_OK;
}

char *fleet_strategy_to_text(const fleet_strategy *s)
{
    if (!s) {
        fl__err(FL_EINVAL, "fleet_strategy_to_text: strategy is NULL");
        return NULL;
    }
    fl_buf b = {0};
    fl__buf_put(&b, "", 0);
    for (int i = 0; i < NFIELDS; i++) {
        if (fields[i].type == F_STR ? str_default(s, &fields[i]) : get_field(s, &fields[i]) == fields[i].def) continue;
        char v[FLEET_STRATEGY_STR_MAX + 32];
        field_text(s, &fields[i], v, sizeof v);
        fl__buf_printf(&b, "%s=%s\n", fields[i].key, v);
    }
    if (b.failed) {
        fl__buf_free(&b);
        fl__err(FL_ENOMEM, "out of memory");
        return NULL;
    }
    return b.p;
}

/* ---- text parsing: key=value lines or a JSON object ---------------------------------------- */

/* Whether some field's key starts with "<prefix>." (a config group such as "amp_configs"). */
static int is_group(const char *prefix)
{
    size_t n = strlen(prefix);
    for (int i = 0; i < NFIELDS; i++)
        if (!strncmp(fields[i].key, prefix, n) && fields[i].key[n] == '.') return 1;
    return 0;
}

static int json_str_or_list(const fl_json *j, const cJSON *v, const char *key, char *buf, size_t cap)
{
    const char *str;
    size_t at = 0;
    buf[0] = 0;
    if (cJSON_IsString(v)) {
        FL_CHECK(fl__json_str(j, v, key, &str));
        if (strlen(str) >= cap) return fl__json_fail(j, "key '%s' is longer than %zu bytes", key, cap - 1);
        snprintf(buf, cap, "%s", str);
        return FL_OK;
    }
    if (cJSON_IsNumber(v)) { /* one number (dgc_configs.sparsity) */
        snprintf(buf, cap, "%.9g", v->valuedouble);
        return FL_OK;
    }
    int n = 0;
    FL_CHECK(fl__json_arr(j, v, key, 64, &n));
    for (const cJSON *e = v->child; e; e = e->next) {
        char num[32];
        if (cJSON_IsNumber(e)) { /* lists of numbers are kept as their text */
            snprintf(num, sizeof num, "%.9g", e->valuedouble);
            str = num;
        } else {
            FL_CHECK(fl__json_str(j, e, key, &str));
        }
        int w = snprintf(buf + at, cap - at, "%s%s", at ? "," : "", str);
        if (w < 0 || (size_t)w >= cap - at) return fl__json_fail(j, "key '%s' is longer than %zu bytes", key, cap - 1);
        at += (size_t)w;
    }
    return FL_OK;
}

/* Sets the members of obj in document order; groups nest one level ({"a_sync_configs":
 * {"k_steps": 100}}).  Values are typed: true/false, integers, numbers. */
static int json_fields(const fl_json *j, const cJSON *obj, const char *prefix, fleet_strategy *s)
{
    for (const cJSON *v = obj->child; v; v = v->next) {
        char key[128];
        if (snprintf(key, sizeof key, "%s%s%s", prefix, *prefix ? "." : "", v->string) >= (int)sizeof key)
            return fl__json_fail(j, "unknown strategy field '%s...'", key);
        if (!*prefix && is_group(key)) {
            FL_CHECK(fl__json_obj(j, v, key));
            FL_CHECK(json_fields(j, v, key, s));
            continue;
        }
        const field *f = find_field(key);
        if (!f) return fl__json_fail(j, "unknown strategy field '%s'", key);
        double d;
        int64_t x;
        int b;
        if (f->type == F_STR) { /* a string, or a list of strings joined with commas */
            char buf[FLEET_STRATEGY_STR_MAX];
            FL_CHECK(json_str_or_list(j, v, key, buf, sizeof buf));
            put_str(s, f, buf);
            continue;
        }
        if (f->type == F_BOOL) {
            FL_CHECK(fl__json_bool(j, v, key, &b));
            d = b;
        } else if (f->type == F_DTYPE) {
            if (!cJSON_IsString(v)) return fl__json_fail(j, "key '%s' must be a string (float32 or bfloat16)", key);
            FL_CHECK(parse_wire_dtype(f, v->valuestring, &d));
        } else if (f->type == F_DBL) {
            FL_CHECK(fl__json_num(j, v, key, &d));
            if (d < f->lo) return fl__json_fail(j, "key '%s' must be at least %g, not %g", key, f->lo, d);
        } else {
            FL_CHECK(fl__json_int(j, v, key, (int64_t)f->lo, f->type == F_INT ? INT32_MAX : INT64_MAX, &x));
            d = (double)x;
        }
        store(s, f, d);
    }
    return FL_OK;
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

/* text[0, len) is JSON when it starts with '{', else key=value lines (NUL-terminated);
 * src names it in messages ("'<file>'", or NULL for text given directly). */
static int parse_text(fleet_strategy *s, const char *text, size_t len, const char *src)
{
    fleet_strategy tmp = *s;
    const char *q = text;
    while (isspace((unsigned char)*q)) q++;
    int st;
    if (*q == '{') {
        fl_json j = {NULL, src ? src : "strategy JSON", FL_EINVAL};
        st = fl__json_parse(&j, text, len, STRATEGY_MAX_BYTES, 4096);
        if (st == FL_OK) st = json_fields(&j, j.root, "", &tmp);
        fl__json_free(&j);
    } else {
        st = parse_lines(&tmp, text);
        if (st != FL_OK && src) st = fl__err(st, "%s: %s", src, fl_last_error());
    }
    if (st == FL_OK) *s = tmp;
    return st;
}

int fleet_strategy_parse(fleet_strategy *s, const char *text)
{
    if (!s || !text) return fl__err(FL_EINVAL, "fleet_strategy_parse: NULL argument");
    return parse_text(s, text, strlen(text), NULL);
}

int fleet_strategy_load(fleet_strategy *s, const char *path)
{
    if (!s || !path) return fl__err(FL_EINVAL, "fleet_strategy_load: NULL argument");
    FILE *f = fopen(path, "rb");
    if (!f) return fl__err(FL_EIO, "cannot open strategy file '%s': %s", path, strerror(errno));
    char *buf = malloc(STRATEGY_MAX_BYTES + 1), *src = malloc(strlen(path) + 3);
    size_t n = buf ? fread(buf, 1, STRATEGY_MAX_BYTES, f) : 0;
    int big = buf && fgetc(f) != EOF, st = FL_OK;
    fclose(f);
    if (!buf || !src) st = fl__err(FL_ENOMEM, "out of memory");
    else if (big) st = fl__err(FL_EINVAL, "strategy file '%s' is larger than 1 MiB", path);
    if (st == FL_OK) {
        buf[n] = 0;
        sprintf(src, "'%s'", path);
        st = parse_text(s, buf, n, src);
    }
    free(buf);
    free(src);
    return st;
}
