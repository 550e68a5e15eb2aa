/*
 * eager.c - eager deletion for the executor's plans (Paddle's FLAGS_eager_delete_tensor_gb
 * = 0), and the count of bytes the step's non-persistable tensors hold.
 *
 * Computed once per plan: for each op, the non-persistable variables whose last use in the
 * program is that op.  Never released: persistable variables, variables read before any
 * op writes them (state carried between steps; fed data excepted), variables an op with a
 * run condition touches, the outputs of ops that keep them as a cache between runs
 * (FL_OPDEF_OWN_OUTPUTS: conv_bn_fold's folded filters), and those the current run fetches.
 *
 * A released buffer goes to the plan's pool instead of the allocator.  Before an op runs,
 * each of its outputs that has no buffer takes the smallest pooled one that holds what the
 * variable held the step before (and at most a quarter more) (then the kernel's resize finds room and neither allocates
 * nor clears it).  Buffers left in the pool a whole step unused are freed at the end of
 * the step; the plan's first run frees instead of pooling (no output knows its size yet).  So a step in the steady state allocates nothing, and the process holds about
 * the step's peak of live buffers.  The bytes counted (fl_exe_peak_activation_bytes) are
 * those of the tensors plus those of the pool.
 */
#include <string.h>

#include "exec_internal.h"

typedef struct {
    void *p;
    size_t cap;
    uint64_t stamp; /* run that put it there */
} pooled;

int fl__eager_build(fl__eager *g, const fl_prog *p, const char *is_input)
{
    int nv = p->nvars, no = p->nops, st = FL_OK;
    int *last = malloc(((size_t)nv + 1) * sizeof *last), *fill = NULL;
    char *never = calloc((size_t)nv + 1, 1);
    memset(g, 0, sizeof *g);
    g->nvars = nv;
    g->dead_at = calloc((size_t)no + 2, sizeof *g->dead_at);
    g->tracked = calloc((size_t)nv + 1, 1);
    g->fetched = calloc((size_t)nv + 1, 1);
    g->held = calloc((size_t)nv + 1, sizeof *g->held);
    g->want = calloc((size_t)nv + 1, sizeof *g->want);
    if (!last || !never || !g->dead_at || !g->tracked || !g->fetched || !g->held || !g->want) goto oom;
    for (int v = 0; v < nv; v++) {
        const fl_var *var = p->vars[v];
        last[v] = -1;
        g->tracked[v] = !var->persistable;
        never[v] = var->persistable || (is_input[v] && !var->is_data);
    }
    for (int i = 0; i < no; i++) {
        const fl_op *op = p->ops[i];
        if (op->cond) never[op->cond->idx] = 1;
        for (int s = 0; (op->def->flags & FL_OPDEF_OWN_OUTPUTS) && s < FL_OP_MAX_SLOTS; s++)
            for (int k = 0; k < op->out[s].n; k++) never[op->out[s].vars[k]->idx] = 1; /* the op's cache */
        for (int s = 0; s < FL_OP_MAX_SLOTS; s++) {
            for (int k = 0; k < op->in[s].n; k++) {
                last[op->in[s].vars[k]->idx] = i;
                if (op->cond) never[op->in[s].vars[k]->idx] = 1;
            }
            for (int k = 0; k < op->out[s].n; k++) {
                last[op->out[s].vars[k]->idx] = i;
                if (op->cond) never[op->out[s].vars[k]->idx] = 1;
            }
        }
    }
    int ndead = 0;
    for (int v = 0; v < nv; v++)
        if (last[v] >= 0 && !never[v]) {
            g->dead_at[last[v] + 1]++;
            ndead++;
        }
    for (int i = 0; i < no; i++) g->dead_at[i + 1] += g->dead_at[i];
    g->dead = malloc(((size_t)ndead + 1) * sizeof *g->dead);
    fill = calloc((size_t)no + 1, sizeof *fill);
    if (!g->dead || !fill) goto oom;
    for (int v = 0; v < nv; v++)
        if (last[v] >= 0 && !never[v]) g->dead[g->dead_at[last[v]] + fill[last[v]]++] = v;
    goto done;
oom:
    st = fl__err(FL_ENOMEM, "executor: out of memory");
done:
    free(fill);
    free(last);
    free(never);
    return st;
}

void fl__eager_free(fl__eager *g)
{
    pooled *pool = g->pool;
    for (int i = 0; i < g->npool; i++) fl__free_aligned(pool[i].p);
    free(g->pool);
    free(g->dead);
    free(g->dead_at);
    free(g->tracked);
    free(g->fetched);
    free(g->held);
    free(g->want);
    memset(g, 0, sizeof *g);
}

/* Puts t's buffer in the pool (freed in the plan's first run, whose outputs cannot know
 * their sizes yet, and when the pool cannot grow); its bytes stay counted while pooled. */
static void release(fl__eager *g, fl_tensor *t)
{
    if (g->run <= 1) {
        fl__free_aligned(t->data);
        g->bytes -= t->cap;
        goto cleared;
    }
    if (g->npool == g->cap_pool) {
        int nc = g->cap_pool ? 2 * g->cap_pool : 16;
        pooled *np = realloc(g->pool, (size_t)nc * sizeof *np);
        if (!np) {
            fl__free_aligned(t->data);
            g->bytes -= t->cap;
            goto cleared;
        }
        g->pool = np;
        g->cap_pool = nc;
    }
    pooled *pool = g->pool;
    pool[g->npool++] = (pooled){t->data, t->cap, g->run};
    g->pool_bytes += t->cap;
cleared:
    t->data = NULL;
    t->cap = 0;
    t->ndim = 1;
    t->shape[0] = 0;
    t->numel = 0;
    t->lod_n = 0;
    t->is_rows = 0;
    fl__tensor_bump(t);
}

/* Gives var v (no buffer) the smallest pooled buffer of at least what it held last step,
 * and at most a quarter more (a small variable must not take a large buffer that a large
 * one then misses). */
static void attach(fl__eager *g, fl_tensor *t, int v)
{
    if (t->data || !g->want[v] || !g->npool) return;
    pooled *pool = g->pool;
    int best = -1;
    for (int i = 0; i < g->npool; i++)
        if (pool[i].cap >= g->want[v] && pool[i].cap - g->want[v] <= g->want[v] / 4 &&
            (best < 0 || pool[i].cap < pool[best].cap))
            best = i;
    if (best < 0) return;
    t->data = pool[best].p;
    t->cap = pool[best].cap;
    fl__tensor_bump(t); /* another variable's buffer */
    g->pool_bytes -= pool[best].cap;
    g->held[v] = pool[best].cap;
    pool[best] = pool[--g->npool];
}

void fl__eager_begin(fl__eager *g, fl_tensor *const *tensors, const int *fed, int nfed)
{
    g->run++;
    for (int i = 0; i < nfed && g->on; i++)
        if (g->tracked[fed[i]]) attach(g, tensors[fed[i]], fed[i]);
    g->bytes = g->pool_bytes;
    for (int v = 0; v < g->nvars; v++) {
        g->held[v] = g->tracked[v] ? tensors[v]->cap : 0;
        g->bytes += g->held[v];
    }
    g->peak = g->bytes;
}

void fl__eager_before_op(fl__eager *g, const fl_op *op, fl_tensor *const *tensors)
{
    if (!g->on || !g->npool) return;
    for (int s = 0; s < FL_OP_MAX_SLOTS; s++)
        for (int k = 0; k < op->out[s].n; k++) {
            int v = op->out[s].vars[k]->idx;
            if (g->tracked[v]) attach(g, tensors[v], v);
        }
}

void fl__eager_after_op(fl__eager *g, int i, const fl_op *op, fl_tensor *const *tensors)
{
    for (int s = 0; s < FL_OP_MAX_SLOTS; s++)
        for (int k = 0; k < op->out[s].n; k++) {
            int v = op->out[s].vars[k]->idx;
            if (!g->tracked[v]) continue;
            size_t now = tensors[v]->cap;
            g->bytes += now - g->held[v];
            g->held[v] = now;
        }
    if (g->bytes > g->peak) g->peak = g->bytes;
    if (!g->on) return;
    for (int d = g->dead_at[i]; d < g->dead_at[i + 1]; d++) {
        int v = g->dead[d];
        fl_tensor *t = tensors[v];
        if (g->fetched[v] || !t->data) continue;
        g->want[v] = t->cap;
        release(g, t);
        g->held[v] = 0;
    }
}

void fl__eager_end(fl__eager *g)
{
    pooled *pool = g->pool;
    for (int i = 0; i < g->npool;) {
        if (pool[i].stamp < g->run) {
            fl__free_aligned(pool[i].p);
            g->pool_bytes -= pool[i].cap;
            pool[i] = pool[--g->npool];
        } else {
            i++;
        }
    }
}
