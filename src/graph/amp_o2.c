/*
 * amp_o2.c - master weights of AMP level O2 (Paddle's use_pure_fp16 with a multi_precision
 * optimizer): after fl_opt_minimize has appended the update ops, each parameter the forward
 * program reads in low precision has one copy, "<param>.cast_bf16" / "<param>.cast_fp16",
 * that is persistable and refreshed from the float32 parameter after the updates.
 *
 * fl_amp_decorate (amp.c) casts such a parameter in front of its first low-precision
 * reader, like level O1, so that backward turns the low-precision product's gradient into
 * the float32 parameter's gradient through the cast's gradient.  Here that cast op leaves
 * the forward program: it moves after the update ops (and after a runtime's own
 * after-update ops such as LocalSGD's averaging), with the optimizer role, and the copy
 * becomes persistable; the startup program casts it once after initialisation (after the
 * collective runtime's c_broadcast of the parameters, which is appended before).  So the
 * forward program reads the low-precision copy with no cast, the optimizer keeps float32
 * parameters and float32 state (its update ops are unchanged), and on a float16 step with
 * inf/NaN the skipped update leaves the parameter, hence the refreshed copy, bit-identical.
 *
 * Saving: the float32 parameters are saved as they are; the copies are persistable too, so
 * fl_io_save_persistables writes them (bfloat16 / float16) and loading restores both; an
 * inference model keeps the forward program's reads of the copies.
 */
#include <string.h>

#include "graph_internal.h"

/* Whether op is the forward cast of a float32 parameter to its low-precision copy. */
static int is_param_cast(const fl_op *op)
{
    if (op->role != FL_ROLE_FORWARD || op->cond || strcmp(op->def->type, "cast") != 0) return 0;
    const fl_var *x = op->in[0].vars[0], *o = op->out[0].vars[0];
    return x->is_param && x->dtype == FL_FLOAT32 && (o->dtype == FL_BFLOAT16 || o->dtype == FL_FLOAT16);
}

/* The startup program's cast of the initialised parameter to its copy. */
static int startup_cast(fl_prog *p, const fl_var *w, const fl_var *cv)
{
    fl_prog *sp = p->startup;
    fl_var *sw = fl_prog_var(sp, w->name), *sc = fl_prog_var(sp, cv->name);
    if (!sw) return fl__prog_error(p, FL_EINVAL, "AMP O2: parameter '%s' is not in the startup program", w->name);
    if (!sc) sc = fl__var_mirror(sp, cv);
    if (!sc) return fl_prog_status(sp) ? fl_prog_status(sp) : FL_ENOMEM;
    fl_io in = FL_IO1("X", sw), out = FL_IO1("Out", sc);
    fl_op *op = fl__op_new(sp, "cast", &in, 1, &out, 1);
    if (!op) return fl_prog_status(sp);
    FL_CHECK(fl__attr_set_i(op, "out_dtype", cv->dtype));
    return fl__op_finish(op);
}

int fl__amp_o2_master_refresh(fl_prog *p)
{
    if (!p->startup) return fl__prog_error(p, FL_EINVAL, "AMP O2: the program has no startup program");
    int moved = 0, end = p->nops;
    for (int i = 0; i < end;) {
        fl_op *op = p->ops[i];
        if (!is_param_cast(op)) {
            i++;
            continue;
        }
        fl_var *w = op->in[0].vars[0], *cv = op->out[0].vars[0];
        memmove(p->ops + i, p->ops + i + 1, (size_t)(p->nops - 1 - i) * sizeof *p->ops);
        p->ops[p->nops - 1] = op;
        op->role = FL_ROLE_OPTIMIZE;
        end--;
        cv->persistable = 1;
        cv->stop_gradient = 1;
        FL_CHECK(startup_cast(p, w, cv));
        moved++;
    }
    if (moved) {
        p->version++;
        p->startup->version++;
        FL_DEBUG(FL_SUB_GRAPH, "AMP O2: %d low-precision parameter copies refreshed after the updates", moved);
    }
    return moved;
}
