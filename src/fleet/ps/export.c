/*
 * export.c - the inference model of a parameter-server job (fleet_save_inference_model).
 *
 * The worker's program reads its sparse tables through distributed_lookup_table ops, which
 * need the servers.  The exported model replaces each of them by local lookup_table ops on
 * a [height, dim] parameter named after the table, filled with every row the servers hold
 * (fl_ps_client_scan_sparse); rows the servers never created read as zeros, which is what a
 * non-training pull from the servers returns for them (params.safetensors then stores only
 * the non-zero rows: src/io/rows.c).  The table's declared height bounds
 * the ids it can hold: a trained id at or above it is reported, not dropped.  Dense
 * parameters are the servers' newest values (the caller pulls them first).
 */
#include <string.h>

#include "fleet_ps.h"

typedef struct {
    float *w;
    int64_t height;
    int dim;
    const char *name;
    int64_t rows;
} fill_ctx;

static int fill_rows(void *user, const uint64_t *ids, const float *vals, int64_t n, int dim)
{
    fill_ctx *f = user;
    if (dim != f->dim)
        return fl__err(FL_EPROTO, "table '%s': the servers hold rows of dim %d, the program %d", f->name, dim, f->dim);
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] >= (uint64_t)f->height)
            return fl__err(FL_EUNSUPPORTED,
                           "table '%s': the servers hold id %llu, outside the declared vocabulary [0, %lld); a "
                           "local [%lld, %d] table cannot hold it (declare the embedding with the id range "
                           "the data uses, or serve the model with the servers)",
                           f->name, (unsigned long long)ids[i], (long long)f->height, (long long)f->height, f->dim);
        memcpy(f->w + ids[i] * (uint64_t)f->dim, vals + i * (int64_t)dim, (size_t)dim * sizeof(float));
    }
    f->rows += n;
    return FL_OK;
}

/* The local [height, dim] copy of `table`, created in scope `tmp` on first use. */
static int local_table(fl__ps_ctx *c, fl_ps_client *cl, fl_scope *tmp, int table, int64_t height, int64_t dim)
{
    const fl_ps_table_config *tc = &c->tables[table];
    fl_tensor *t = fl_scope_var(tmp, tc->name);
    if (!t) return fl__err(FL_ENOMEM, "out of memory");
    if (t->numel == height * dim) return FL_OK;
    if (height > ((int64_t)1 << 34) / dim)
        return fl__err(FL_EUNSUPPORTED,
                       "table '%s' [%lld, %lld] is too large to export into a local inference model (at most "
                       "2^34 values); serve the model with the servers",
                       tc->name, (long long)height, (long long)dim);
    FL_CHECK(fl_tensor_resize(t, FL_FLOAT32, 2, (const int64_t[]){height, dim}));
    memset(t->data, 0, (size_t)(height * dim) * sizeof(float));
    fill_ctx f = {t->data, height, (int)dim, tc->name, 0};
    int st = fl_ps_client_scan_sparse(cl, table, fill_rows, &f);
    fl__tensor_bump(t);
    FL_CHECK(st);
    FL_INFO(FL_SUB_PS, "inference model: table '%s' exported with %lld trained rows of %lld", tc->name, (long long)f.rows,
            (long long)height);
    return FL_OK;
}

/* Replaces op i (distributed_lookup_table) of q by one lookup_table per input. */
static int localize(fl__ps_ctx *c, fl_ps_client *cl, fl_prog *q, fl_scope *tmp, int i)
{
    fl_op *op = q->ops[i];
    int table = (int)fl__attr_i(op, "table", -1);
    int64_t height = fl__attr_i(op, "height", 0), dim = fl__attr_i(op, "dim", 0), pad = fl__attr_i(op, "padding_idx", -1);
    if (table < 0 || table >= c->ntables || c->tables[table].kind != FL_PS_SPARSE || height <= 0 || dim <= 0)
        return fl__err(FL_EINVAL,
                       "fleet_save_inference_model: a distributed_lookup_table op lacks its table, height or dim");
    const char *name = c->tables[table].name;
    FL_CHECK(local_table(c, cl, tmp, table, height, dim));
    fl_var *w = fl_prog_var(q, name);
    if (!w) {
        w = fl__var_create(q, name, FL_FLOAT32, 2, (const int64_t[]){height, dim});
        if (!w) return fl__err(FL_ENOMEM, "out of memory");
        w->persistable = 1;
        w->is_param = 1;
    }
    int n = op->in[0].n;
    for (int k = 0; k < n; k++) {
        op = q->ops[i + k]; /* moved by the inserts */
        fl_var *ids = op->in[0].vars[k], *out = op->out[0].vars[k];
        fl_io ins[2] = {{"W", &w, 1}, {"Ids", &ids, 1}}, outs[1] = {{"Out", &out, 1}};
        fl_op *lo = fl__op_new(q, "lookup_table", ins, 2, outs, 1);
        if (!lo) return fl__err(FL_EINVAL, "fleet_save_inference_model: %s", fl_prog_error(q));
        if (pad >= 0) FL_CHECK(fl__attr_set_i(lo, "padding_idx", pad));
        FL_CHECK(fl__op_finish(lo));
        FL_CHECK(fl__prog_move_last_op(q, i + k));
    }
    fl__prog_remove_op(q, i + n);
    q->version++;
    return n;
}

int fl__ps_export_inference(fl__ps_ctx *c, fl_ps_client *cl, fl_exe *exe, const char *dir, const char *const *feeds,
                            int nfeed, fl_var *const *targets, int ntarget, const fl_prog *prog)
{
    const fl_prog *src = prog ? prog : c->prog;
    fl_prog *q = fl_prog_clone(src, 0);
    fl_scope *tmp = q ? fl_scope_create(fl_exe_scope(exe)) : NULL;
    fl_exe *te = tmp ? fl_exe_create(tmp) : NULL;
    fl_var **tv = te ? calloc((size_t)ntarget + 1, sizeof *tv) : NULL;
    int st = tv ? FL_OK : fl__err(FL_ENOMEM, "fleet_save_inference_model: out of memory");
    for (int i = 0; st == FL_OK && i < ntarget; i++) {
        tv[i] = targets && targets[i] ? fl_prog_var(q, fl_var_name(targets[i])) : NULL;
        if (!tv[i]) st = fl__err(FL_EINVAL, "fleet_save_inference_model: target #%d is not a variable of the program", i);
    }
    for (int i = 0; st == FL_OK && i < q->nops; i++) {
        if (strcmp(q->ops[i]->def->type, "distributed_lookup_table") != 0) continue;
        int n = localize(c, cl, q, tmp, i);
        if (n < 0) st = n;
        else i += n - 1;
    }
    if (st == FL_OK) st = fl_io_save_inference_model(te, dir, feeds, nfeed, tv, ntarget, q);
    free(tv);
    fl_exe_free(te);
    fl_scope_free(tmp);
    fl_prog_free(q);
    return st;
}
