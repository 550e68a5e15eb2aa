/*
 * untrained.c - the forgotten-minimize warning.
 *
 * A program built with trainable parameters and a loss but never passed to
 * fl_opt_minimize() has no backward and no optimizer op: a training pass over it runs,
 * reports a loss, and leaves every parameter as initialised.  Nothing fails, so without a
 * word the user only notices that the loss does not fall.  A training pass
 * (fl_exe_train_from_dataset) over such a program warns once per executor and program,
 * naming a parameter and the fix.
 *
 * fl_exe_run does not warn, because it cannot tell training from evaluation: like Paddle's
 * Executor.run it runs whatever program it is given, and running a forward-only program
 * that holds trainable parameters is exactly what evaluation does (a program cloned with
 * fl_prog_clone(main, 1), a loaded inference model, or a freshly built model scored
 * before training).  Nothing in the call says which of the two the caller meant.  Only
 * fl_exe_train_from_dataset states the intent, so only it warns; docs/trainer.md says so.
 */
#include "exec_internal.h"

/* A parameter an optimizer would update: is_param, persistable and not frozen. */
static int trainable(const fl_var *v) { return v->is_param && v->persistable && !v->stop_gradient; }

const fl_var *fl__untrained_param(const fl_prog *p)
{
    const fl_var *first = NULL;
    for (int i = 0; i < p->nops; i++) {
        const fl_op *op = p->ops[i];
        if (op->role == FL_ROLE_BACKWARD || op->role == FL_ROLE_OPTIMIZE) return NULL;
        for (int s = 0; !first && s < FL_OP_MAX_SLOTS; s++)
            for (int k = 0; !first && k < op->in[s].n; k++)
                if (trainable(op->in[s].vars[k])) first = op->in[s].vars[k];
    }
    return first;
}

void fl__untrained_warn(fl_exe *e, const fl_prog *p, const char *fn)
{
    const fl_var *v = fl__untrained_param(p);
    if (!v || !fl__exe_first_notice(e, p)) return;
    int n = 0;
    for (int i = 0; i < p->nvars; i++) n += trainable(p->vars[i]);
    FL_WARN(FL_SUB_EXEC,
            "%s: the program has %d trainable parameter(s) (e.g. '%s') but no backward or optimizer op, so training "
            "leaves them unchanged; call fl_opt_minimize(optimizer, loss) on it before training (to evaluate, use "
            "fl_exe_infer_from_dataset with fl_prog_clone(main, 1))",
            fn, n, v->name);
}
