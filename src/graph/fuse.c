/*
 * fuse.c - program rewrites that merge operators so one kernel does the work of several.
 *
 * fl_fuse_fc_act: an fc without activation whose output feeds only a relu, tanh or
 * sigmoid op becomes one fc with that activation; its matrix product then applies the
 * activation in the same pass (oneDNN eltwise post-op, src/tensor/dnn.c) and the backward
 * program has one op less.  Programs built with fl_layer_fc(..., "relu") are already in
 * this form; the pass is for programs written as fc followed by a separate activation
 * (Paddle's own programs, programs read from text).
 *
 * How to add a fusion: a function that finds the pattern on forward ops, checks that the
 * intermediate variable has no other reader, rewrites the first op and removes the rest.
 */
#include <string.h>

#include "graph_internal.h"

/* Index of the only op reading v, or -1 when none or several read it (cond included). */
static int only_reader(const fl_prog *p, const fl_var *v)
{
    int who = -1;
    for (int i = 0; i < p->nops; i++) {
        const fl_op *op = p->ops[i];
        int reads = op->cond == v;
        for (int s = 0; s < FL_OP_MAX_SLOTS && !reads; s++)
            for (int k = 0; k < op->in[s].n; k++)
                if (op->in[s].vars[k] == v) reads = 1;
        if (!reads) continue;
        if (who >= 0) return -1;
        who = i;
    }
    return who;
}

static int fusable_act(const char *type)
{
    return !strcmp(type, "relu") || !strcmp(type, "tanh") || !strcmp(type, "sigmoid");
}

int fl_fuse_fc_act(fl_prog *p)
{
    if (!p || p->magic != FL_PROG_MAGIC) return fl__err(FL_EINVAL, "fl_fuse_fc_act: program is NULL or invalid");
    if (p->status != FL_OK) return p->status;
    for (int i = 0; i < p->nops; i++)
        if (p->ops[i]->role != FL_ROLE_FORWARD)
            return fl__prog_error(p, FL_EINVAL,
                                  "fl_fuse_fc_act: op %d (%s) is a backward or optimizer op: fuse before "
                                  "fl_opt_minimize / append_backward",
                                  i, p->ops[i]->def->type);
    int fused = 0;
    for (int i = 0; i < p->nops; i++) {
        fl_op *fc = p->ops[i];
        if (strcmp(fc->def->type, "fc") != 0 || fc->cond) continue;
        const char *act = fl__attr_s(fc, "act", "");
        if (*act && strcmp(act, "none") != 0 && strcmp(act, "linear") != 0) continue;
        fl_var *mid = fc->out[0].vars[0];
        if (mid->persistable) continue;
        int j = only_reader(p, mid);
        if (j <= i) continue;
        fl_op *a = p->ops[j];
        if (!fusable_act(a->def->type) || a->cond || a->in[0].n != 1 || a->in[0].vars[0] != mid) continue;
        fl_var *out = a->out[0].vars[0];
        /* fc now writes the activation's output; ops between fc and the activation never
         * read it (it is written by the activation only after them) unless written twice */
        int clash = 0;
        for (int k = i + 1; k < j && !clash; k++)
            for (int s = 0; s < FL_OP_MAX_SLOTS; s++)
                for (int q = 0; q < p->ops[k]->in[s].n; q++) clash |= p->ops[k]->in[s].vars[q] == out;
        if (clash) continue;
        FL_CHECK(fl__attr_set_s(fc, "act", a->def->type));
        fc->out[0].vars[0] = out;
        out->lod_level = mid->lod_level;
        fl__prog_remove_op(p, j);
        FL_CHECK(fl__prog_remove_var(p, mid));
        fused++;
    }
    if (fused) FL_DEBUG(FL_SUB_GRAPH, "fl_fuse_fc_act: %d fc + activation pairs fused", fused);
    return fused;
}
