/*
 * client_ops.c - table calls of the client.  Dense tables are split by the whole-row rule
 * (fl_ps_dense_split) and each server's slice travels straight from / to the caller's
 * buffer.  Sparse calls deduplicate the batch's ids with a hash map, group the distinct ids
 * by server (fl_ps_sparse_server), send one request per server (split further only beyond
 * FL_PS_MAX_BODY), receive each server's rows directly into a grouped buffer and scatter them
 * to every position; pushes sum the gradients (and shows / clicks) of duplicate ids first.
 */
#include <stdlib.h>
#include <string.h>

#include "ps_internal.h"

/* Largest payload per request (room left for the fixed part). */
#define MAX_PAYLOAD (FL_PS_MAX_BODY - 256)

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    (void)cap;
    void *q = realloc(*p, (need ? need : 1) * elem);
    if (!q) return fl__err(FL_ENOMEM, "out of memory for a batch of %zu entries", need);
    *p = q;
    return FL_OK;
}

/* ---- dense ------------------------------------------------------------------------------------- */

typedef enum { D_PULL, D_PUSH, D_INIT } dense_op;

/* Requests of `op` for n dense tables (tables[i] with outs[i] / ins[i]) in one round: every
 * request is sent before the replies are read (pushes are large requests with small replies,
 * pulls small requests with large replies, so neither side waits on a full socket), which
 * costs one round trip per server for all n tables.  Per server, the requests go out in
 * table order and the server executes them in that order. */
static int dense_many(fl_ps_client *c, int nt, const int *tables, dense_op op, float *const *outs,
                      const float *const *ins, int force, int *applied)
{
    const uint64_t per = MAX_PAYLOAD / 4;
    /* bf16 on the wire: pushes are converted into c->wire16 first, pulls land there */
    const int w16 = op != D_INIT && c->o.dense_wire_dtype == FL_BFLOAT16;
    const uint64_t esz = w16 ? 2 : 4;
    uint64_t all = 0;
    int n = 0, chunked = 0;
    for (int i = 0; i < nt; i++) {
        const fl_ps_table_config *t = &c->cfgs[tables[i]];
        all += (uint64_t)(t->rows * t->cols);
        for (int sv = 0; sv < c->ns; sv++) {
            int64_t r0, r1;
            fl_ps_dense_split(t->rows, c->ns, sv, &r0, &r1);
            uint64_t cnt = (uint64_t)((r1 - r0) * t->cols);
            n += (int)((cnt + per - 1) / per);
            chunked |= cnt > per;
        }
    }
    /* Sync mode answers a push when every worker has pushed that table's step, but a chunk
     * that is not its table's last at once: a later table's first chunks could overtake an
     * earlier table's last one, and replies are read in order.  Tables of one chunk per
     * server complete in the order every worker sends them. */
    if (op == D_PUSH && c->server_sync && nt > 1 && chunked) {
        for (int i = 0; i < nt; i++) FL_CHECK(dense_many(c, 1, tables + i, op, NULL, ins + i, force, applied));
        return FL_OK;
    }
    if (w16 && all > c->cap_wire16) {
        uint16_t *p = realloc(c->wire16, (size_t)(all ? all : 1) * 2);
        if (!p) return fl__err(FL_ENOMEM, "out of memory for %llu bf16 values", (unsigned long long)all);
        c->wire16 = p;
        c->cap_wire16 = all;
    }
    FL_CHECK(fl__ps_client_calls(c, n));
    int k = 0;
    uint64_t wbase = 0; /* this table's values in c->wire16 */
    for (int i = 0; i < nt; i++) {
        const int table = tables[i];
        const fl_ps_table_config *t = &c->cfgs[table];
        const uint64_t total = (uint64_t)(t->rows * t->cols);
        const float *in = ins ? ins[i] : NULL;
        float *out = outs ? outs[i] : NULL;
        uint16_t *w = w16 ? c->wire16 + wbase : NULL;
        if (w16 && op == D_PUSH) fl__cvt_f32_to_bf16(w, in, (int64_t)total);
        for (int sv = 0; sv < c->ns; sv++) {
            int64_t r0, r1;
            fl_ps_dense_split(t->rows, c->ns, sv, &r0, &r1);
            uint64_t cnt = (uint64_t)((r1 - r0) * t->cols), base = (uint64_t)(r0 * t->cols);
            for (uint64_t off = 0; off < cnt; off += per, k++) {
                uint64_t len = cnt - off < per ? cnt - off : per;
                int last = off + len == cnt;
                fl__ps_call *q = &c->calls[k];
                q->server = sv;
                q->dst = NULL;
                q->dst_len = 0;
                q->wire16 = 0;
                q->nparts = 0;
                fl__ps_wbuf_begin(&q->fixed);
                int st = FL_OK;
                uint32_t flags;
                switch (op) {
                case D_PULL:
                    q->type = FL__PS_PULL_DENSE;
                    st = fl__ps_put_u32(&q->fixed, (uint32_t)table);
                    if (!st) st = fl__ps_put_u32(&q->fixed, w16 ? FL__PS_B_BF16 : 0);
                    q->dst = w16 ? (void *)(w + base + off) : (void *)(out + base + off);
                    q->dst_len = len * esz;
                    q->wire16 = w16;
                    break;
                case D_PUSH:
                    q->type = FL__PS_PUSH_DENSE;
                    st = fl__ps_put_u32(&q->fixed, (uint32_t)table);
                    if (!st) st = fl__ps_put_u32(&q->fixed, (last ? FL__PS_B_LAST : 0) | (w16 ? FL__PS_B_BF16 : 0));
                    if (!st) st = fl__ps_put_u64(&q->fixed, c->session);
                    if (!st) st = fl__ps_put_u64(&q->fixed, ++c->seq);
                    break;
                case D_INIT:
                    q->type = FL__PS_INIT_DENSE;
                    flags = (last ? FL__PS_B_LAST : 0) | (force ? FL__PS_B_FORCE : 0);
                    st = fl__ps_put_u32(&q->fixed, (uint32_t)table);
                    if (!st) st = fl__ps_put_u32(&q->fixed, flags);
                    break;
                }
                if (!st) st = fl__ps_put_u64(&q->fixed, off);
                if (!st) st = fl__ps_put_u64(&q->fixed, len);
                FL_CHECK(st);
                if (op != D_PULL) {
                    q->parts[0] = w16 ? (const void *)(w + base + off) : (const void *)(in + base + off);
                    q->lens[0] = len * esz;
                    q->nparts = 1;
                }
            }
        }
        if (w16) wbase += total;
    }
    uint64_t dl = op == D_PUSH ? fl__ps_client_push_deadline(c) : fl_net_deadline(c->o.request_timeout_ms);
    FL_CHECK(fl__ps_client_run(c, c->calls, n, dl, 1));
    if (op == D_PULL) {
        if (w16) {
            wbase = 0;
            for (int i = 0; i < nt; i++) {
                const fl_ps_table_config *t = &c->cfgs[tables[i]];
                const uint64_t total = (uint64_t)(t->rows * t->cols);
                fl__cvt_bf16_to_f32(outs[i], c->wire16 + wbase, (int64_t)total);
                wbase += total;
            }
        }
        atomic_fetch_add(&c->rx_dense, all * esz);
    } else {
        atomic_fetch_add(&c->tx_dense, all * esz);
    }
    if (applied) {
        *applied = 0;
        for (int i = 0; i < n; i++) *applied |= c->calls[i].reply.applied != 0;
    }
    return FL_OK;
}

static int dense_call(fl_ps_client *c, int table, dense_op op, float *out, const float *in, int force, int *applied)
{
    return dense_many(c, 1, &table, op, &out, &in, force, applied);
}

/* Checks the arguments of a _many call and takes the client (the caller unlocks c->mu). */
static int enter_many(fl_ps_client *c, const char *fn, int n, const int *tables, const void *const *vals)
{
    if (n < 0 || (n > 0 && (!tables || !vals))) return fl__err(FL_EINVAL, "%s: bad table list (n %d)", fn, n);
    FL_CHECK(fl__ps_client_enter(c, fn, -1, -1));
    for (int i = 0; i < n; i++) {
        int st = vals[i] ? fl__ps_client_check_table(c, fn, tables[i], FL_PS_DENSE)
                         : fl__err(FL_EINVAL, "%s: values of table %d are NULL", fn, tables[i]);
        if (st) {
            pthread_mutex_unlock(&c->mu);
            return st;
        }
    }
    return FL_OK;
}

int fl_ps_client_pull_dense_many(fl_ps_client *c, int n, const int *tables, float *const *outs)
{
    FL_CHECK(enter_many(c, "fl_ps_client_pull_dense_many", n, tables, (const void *const *)outs));
    int st = n ? dense_many(c, n, tables, D_PULL, outs, NULL, 0, NULL) : FL_OK;
    pthread_mutex_unlock(&c->mu);
    return st;
}

int fl_ps_client_push_dense_many(fl_ps_client *c, int n, const int *tables, const float *const *grads)
{
    FL_CHECK(enter_many(c, "fl_ps_client_push_dense_many", n, tables, (const void *const *)grads));
    int st = n ? dense_many(c, n, tables, D_PUSH, NULL, grads, 0, NULL) : FL_OK;
    pthread_mutex_unlock(&c->mu);
    return st;
}

int fl_ps_client_init_dense(fl_ps_client *c, int table, const float *values, int force, int *applied)
{
    if (!values) return fl__err(FL_EINVAL, "fl_ps_client_init_dense: values is NULL");
    FL_CHECK(fl__ps_client_enter(c, "fl_ps_client_init_dense", table, FL_PS_DENSE));
    int st = dense_call(c, table, D_INIT, NULL, values, force, applied);
    pthread_mutex_unlock(&c->mu);
    return st;
}

int fl_ps_client_pull_dense(fl_ps_client *c, int table, float *out)
{
    if (!out) return fl__err(FL_EINVAL, "fl_ps_client_pull_dense: out is NULL");
    FL_CHECK(fl__ps_client_enter(c, "fl_ps_client_pull_dense", table, FL_PS_DENSE));
    int st = dense_call(c, table, D_PULL, out, NULL, 0, NULL);
    pthread_mutex_unlock(&c->mu);
    return st;
}

int fl_ps_client_push_dense(fl_ps_client *c, int table, const float *grad)
{
    if (!grad) return fl__err(FL_EINVAL, "fl_ps_client_push_dense: grad is NULL");
    FL_CHECK(fl__ps_client_enter(c, "fl_ps_client_push_dense", table, FL_PS_DENSE));
    int st = dense_call(c, table, D_PUSH, NULL, grad, 0, NULL);
    pthread_mutex_unlock(&c->mu);
    return st;
}

/* ---- sparse: deduplication and grouping ------------------------------------------------------ */

/* Fills c->pos[i] (distinct index of ids[i]), c->gidx[u] (grouped index of distinct u),
 * c->gids (distinct ids grouped by server) and off[0..ns] (each server's range).
 * Returns the number of distinct ids, or < 0 on error. */
static int64_t dedup_group(fl_ps_client *c, const uint64_t *ids, uint64_t n, uint64_t *off)
{
    if (n > UINT32_MAX - 1)
        return fl__err(FL_EINVAL, "a batch of %llu ids is too large (at most 2^32 - 2)", (unsigned long long)n);
    if (n > c->cap_n) {
        if (grow((void **)&c->pos, NULL, n, 4) || grow((void **)&c->uids, NULL, n, 8) ||
            grow((void **)&c->gids, NULL, n, 8) || grow((void **)&c->gidx, NULL, n, 4))
            return -1;
        c->cap_n = n;
    }
    size_t hc = 64;
    while (hc < 2 * n) hc *= 2;
    if (hc > c->cap_h) {
        if (grow((void **)&c->hslot, NULL, hc, 4) || grow((void **)&c->hkeys, NULL, hc, 8)) return -1;
        c->cap_h = hc;
    }
    memset(c->hslot, 0, hc * 4);
    uint64_t nu = 0, mask = hc - 1;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t id = ids[i], j = fl__hash_u64(id) & mask;
        for (;;) {
            uint32_t v = c->hslot[j];
            if (!v) {
                c->hslot[j] = (uint32_t)(nu + 1);
                c->hkeys[j] = id;
                c->uids[nu] = id;
                c->pos[i] = (uint32_t)nu++;
                break;
            }
            if (c->hkeys[j] == id) {
                c->pos[i] = v - 1;
                break;
            }
            j = (j + 1) & mask;
        }
    }
    for (int s = 0; s <= c->ns; s++) off[s] = 0;
    /* server of each distinct id, kept in gidx temporarily */
    for (uint64_t u = 0; u < nu; u++) {
        int s = fl_ps_sparse_server(c->uids[u], c->ns);
        c->gidx[u] = (uint32_t)s;
        off[s + 1]++;
    }
    for (int s = 0; s < c->ns; s++) off[s + 1] += off[s];
    uint64_t at[FL_PS_MAX_SERVERS];
    for (int s = 0; s < c->ns; s++) at[s] = off[s];
    for (uint64_t u = 0; u < nu; u++) {
        uint64_t g = at[c->gidx[u]]++;
        c->gidx[u] = (uint32_t)g;
        c->gids[g] = c->uids[u];
    }
    return (int64_t)nu;
}

static int vals_room(fl_ps_client *c, uint64_t nu, int dim, int showclick)
{
    uint64_t need = nu * (uint64_t)dim;
    if (need > c->cap_vals) {
        FL_CHECK(grow((void **)&c->gvals, NULL, need, 4));
        c->cap_vals = need;
    }
    if (showclick && nu > c->cap_u) {
        FL_CHECK(grow((void **)&c->gshow, NULL, nu, 4));
        FL_CHECK(grow((void **)&c->gclick, NULL, nu, 4));
        c->cap_u = nu;
    }
    return FL_OK;
}

/* ---- sparse pull and push ------------------------------------------------------------------------- */

int fl_ps_client_pull_sparse(fl_ps_client *c, int table, const uint64_t *ids, int64_t n, float *out, int is_training)
{
    if (n < 0 || (n > 0 && (!ids || !out)))
        return fl__err(FL_EINVAL, "fl_ps_client_pull_sparse: bad ids / out (n = %lld)", (long long)n);
    FL_CHECK(fl__ps_client_enter(c, "fl_ps_client_pull_sparse", table, FL_PS_SPARSE));
    const int dim = c->cfgs[table].dim;
    uint64_t off[FL_PS_MAX_SERVERS + 1];
    int st = FL_OK;
    int64_t nu = n ? dedup_group(c, ids, (uint64_t)n, off) : 0;
    if (nu < 0) st = fl_last_status();
    if (n == 0) goto out;
    if (st == FL_OK) st = vals_room(c, (uint64_t)nu, dim, 0);
    /* the request carries 8 bytes per id, the reply 4 * dim */
    const uint64_t per = MAX_PAYLOAD / ((uint64_t)dim * 4 > 8 ? (uint64_t)dim * 4 : 8);
    int ncall = 0;
    for (int s = 0; s < c->ns && st == FL_OK; s++) ncall += (int)((off[s + 1] - off[s] + per - 1) / per);
    if (st == FL_OK) st = fl__ps_client_calls(c, ncall);
    int k = 0;
    for (int s = 0; s < c->ns && st == FL_OK; s++) {
        for (uint64_t a = off[s]; a < off[s + 1] && st == FL_OK; a += per, k++) {
            uint64_t len = off[s + 1] - a < per ? off[s + 1] - a : per;
            fl__ps_call *q = &c->calls[k];
            q->server = s;
            q->type = FL__PS_PULL_SPARSE;
            fl__ps_wbuf_begin(&q->fixed);
            st = fl__ps_put_u32(&q->fixed, (uint32_t)table);
            if (!st) st = fl__ps_put_u32(&q->fixed, is_training ? FL__PS_B_TRAINING : 0);
            if (!st) st = fl__ps_put_u64(&q->fixed, len);
            q->parts[0] = c->gids + a;
            q->lens[0] = len * 8;
            q->nparts = 1;
            q->dst = c->gvals + a * dim;
            q->dst_len = len * dim * 4;
        }
    }
    if (st == FL_OK) st = fl__ps_client_run(c, c->calls, ncall, fl_net_deadline(c->o.request_timeout_ms), 1);
    if (st == FL_OK) {
        const size_t vb = (size_t)dim * 4;
        for (int64_t i = 0; i < n; i++) memcpy(out + (size_t)i * dim, c->gvals + (size_t)c->gidx[c->pos[i]] * dim, vb);
    }
out:
    pthread_mutex_unlock(&c->mu);
    return st;
}

int fl_ps_client_push_sparse(fl_ps_client *c, int table, const uint64_t *ids, int64_t n, const float *grads,
                             const float *shows, const float *clicks)
{
    if (n < 0 || (n > 0 && (!ids || !grads)))
        return fl__err(FL_EINVAL, "fl_ps_client_push_sparse: bad ids / grads (n = %lld)", (long long)n);
    FL_CHECK(fl__ps_client_enter(c, "fl_ps_client_push_sparse", table, FL_PS_SPARSE));
    const int dim = c->cfgs[table].dim;
    uint64_t off[FL_PS_MAX_SERVERS + 1] = {0};
    int st = FL_OK;
    int64_t nu = n ? dedup_group(c, ids, (uint64_t)n, off) : 0;
    if (nu < 0) st = fl_last_status();
    int showclick = shows || clicks || nu < n;
    if (st == FL_OK) st = vals_room(c, (uint64_t)nu, dim, showclick);
    if (st == FL_OK && nu > 0) {
        /* merge: sum the rows (and statistics) of duplicate ids in grouped order */
        memset(c->gvals, 0, (size_t)nu * dim * 4);
        if (showclick) {
            memset(c->gshow, 0, (size_t)nu * 4);
            memset(c->gclick, 0, (size_t)nu * 4);
        }
        for (int64_t i = 0; i < n; i++) {
            uint32_t g = c->gidx[c->pos[i]];
            float *d = c->gvals + (size_t)g * dim;
            const float *src = grads + (size_t)i * dim;
            for (int j = 0; j < dim; j++) d[j] += src[j];
            if (showclick) {
                c->gshow[g] += shows ? shows[i] : 1.0f;
                c->gclick[g] += clicks ? clicks[i] : 0.0f;
            }
        }
    }
    const uint64_t per = MAX_PAYLOAD / ((uint64_t)dim * 4 + 16);
    int ncall = 0;
    for (int s = 0; s < c->ns; s++) {
        uint64_t cnt = off[s + 1] - off[s];
        ncall += cnt ? (int)((cnt + per - 1) / per) : 1; /* every server gets a (maybe empty) push */
    }
    if (st == FL_OK) st = fl__ps_client_calls(c, ncall);
    int k = 0;
    for (int s = 0; s < c->ns && st == FL_OK; s++) {
        uint64_t a = off[s], end = off[s + 1];
        do {
            uint64_t len = end - a < per ? end - a : per;
            int last = a + len == end;
            fl__ps_call *q = &c->calls[k++];
            q->server = s;
            q->type = FL__PS_PUSH_SPARSE;
            q->dst = NULL;
            q->dst_len = 0;
            fl__ps_wbuf_begin(&q->fixed);
            st = fl__ps_put_u32(&q->fixed, (uint32_t)table);
            if (!st) st = fl__ps_put_u32(&q->fixed, (last ? FL__PS_B_LAST : 0) | (showclick ? FL__PS_B_SHOWCLICK : 0));
            if (!st) st = fl__ps_put_u64(&q->fixed, c->session);
            if (!st) st = fl__ps_put_u64(&q->fixed, ++c->seq);
            if (!st) st = fl__ps_put_u64(&q->fixed, len);
            if (!st) st = fl__ps_put_u32(&q->fixed, (uint32_t)dim);
            if (!st) st = fl__ps_put_u32(&q->fixed, 0);
            q->nparts = 2;
            q->parts[0] = c->gids + a;
            q->lens[0] = len * 8;
            q->parts[1] = c->gvals + a * dim;
            q->lens[1] = len * dim * 4;
            if (showclick) {
                q->parts[2] = c->gshow + a;
                q->lens[2] = len * 4;
                q->parts[3] = c->gclick + a;
                q->lens[3] = len * 4;
                q->nparts = 4;
            }
            a += len;
        } while (a < end && st == FL_OK);
    }
    if (st == FL_OK) st = fl__ps_client_run(c, c->calls, ncall, fl__ps_client_push_deadline(c), 1);
    pthread_mutex_unlock(&c->mu);
    return st;
}
