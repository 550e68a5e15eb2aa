/*
 * op_layout.c - the ops that understand blocked layouts (op_layout.h) and the conversions
 * the executor makes around the others.
 *
 * How to add an op: a row in `table` below.  A NATIVE op's kernel must accept every layout
 * in the slots it lists (converting what it cannot read with fl__tensor_to_layout) and set
 * its outputs' layouts (fl__tensor_set_layout) after writing them; a SAME op must be a pure
 * elementwise function of inputs of one shape (position i of the output from position i of
 * the inputs), so it gives the same values whatever the order of the positions.
 */
#include <string.h>

#include "op_layout.h"

typedef struct {
    const char *type;
    int kind;
    unsigned slots; /* NATIVE: input slots read in any layout */
} op_layout_row;

static const op_layout_row table[] = {
    {"conv2d", FL_OPLAY_NATIVE, 1u << 0 | 1u << 3},                                 /* Input, ResidualData */
    {"conv2d_grad", FL_OPLAY_NATIVE, 1u << 0 | 1u << 2},                            /* Input, Output@GRAD */
    {"batch_norm", FL_OPLAY_NATIVE, 1u << 0},                                       /* X */
    {"pool2d", FL_OPLAY_NATIVE, 1u << 0},                                           /* X */
    {"pool2d_grad", FL_OPLAY_NATIVE, 1u << 0 | 1u << 1 | 1u << 2},                  /* X, Out (unread), Out@GRAD */
    {"batch_norm_grad", FL_OPLAY_NATIVE, 1u << 0 | 1u << 4 | 1u << 5},              /* X, Y@GRAD, Y */
    {"fused_bn_add_activation", FL_OPLAY_NATIVE, 1u << 0 | 1u << 5},                /* X, Z */
    {"fused_bn_add_activation_grad", FL_OPLAY_NATIVE, 1u << 0 | 1u << 4 | 1u << 5}, /* X, Y@GRAD, Y */
    {"elementwise_add", FL_OPLAY_SAME, 0},
    {"elementwise_add_grad", FL_OPLAY_SAME, 0},
    {"relu", FL_OPLAY_SAME, 0},
    {"relu_grad", FL_OPLAY_SAME, 0},
    {"sum", FL_OPLAY_SAME, 0},
    {"cast", FL_OPLAY_SAME, 0}, /* AMP: float32 <-> bfloat16 in the same order */
};

int fl__op_layout_kind(const char *type, unsigned *slots)
{
    *slots = 0;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (!strcmp(table[i].type, type)) {
            *slots = table[i].slots;
            return table[i].kind;
        }
    return FL_OPLAY_PLAIN;
}

static int env_on = -1;

int fl__layout_enabled(void)
{
    if (env_on < 0) {
        int64_t v = 1;
        if (fl__env_int("FLEET_DNN_LAYOUT", 1, 0, 1, &v) != FL_OK) v = 1;
        env_on = (int)v;
    }
    return env_on;
}

void fl__layout_enabled_reload(void) { env_on = -1; }

static int blocked_type(fl_dtype dt) { return dt == FL_FLOAT32 || dt == FL_BFLOAT16; }

static int same_shape(const fl_tensor *a, const fl_tensor *b)
{
    if (a->ndim != b->ndim) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return 0;
    return 1;
}

int fl__op_layout_before(fl_kctx *c, int kind, unsigned slots, int *same)
{
    *same = FL_LAYOUT_PLAIN;
    const fl_tensor *ref = NULL;
    int blocked = FL_LAYOUT_PLAIN, fits = 1;
    for (int s = 0; s < FL_OP_MAX_SLOTS; s++)
        for (int k = 0; k < c->nin[s]; k++) {
            fl_tensor *t = c->in[s][k];
            if (!t || !t->data) continue;
            if (t->layout && !blocked) blocked = t->layout;
            if (kind != FL_OPLAY_SAME) continue;
            if (!ref) ref = t;
            /* a persistable (a parameter, shared by trainer threads) is never converted to blocked */
            if (!blocked_type(t->dtype) || t->is_rows || !same_shape(t, ref) ||
                (!t->layout && c->op->in[s].vars[k]->persistable))
                fits = 0;
        }
    if (!blocked) return FL_OK;
    for (int s = 0; s < FL_OP_MAX_SLOTS && kind == FL_OPLAY_SAME; s++) /* outputs it can mark */
        for (int k = 0; k < c->op->out[s].n; k++)
            if (!blocked_type(c->op->out[s].vars[k]->dtype)) fits = 0;
    if (kind == FL_OPLAY_SAME && fits && fl__layout_fits(blocked, ref->ndim, ref->shape)) {
        for (int s = 0; s < FL_OP_MAX_SLOTS; s++)
            for (int k = 0; k < c->nin[s]; k++)
                if (c->in[s][k] && c->in[s][k]->data) FL_CHECK(fl__tensor_to_layout(c->in[s][k], blocked));
        *same = blocked;
        return FL_OK;
    }
    for (int s = 0; s < FL_OP_MAX_SLOTS; s++) {
        if (kind == FL_OPLAY_NATIVE && (slots >> s & 1u)) continue;
        for (int k = 0; k < c->nin[s]; k++) FL_CHECK(fl__tensor_to_plain(c->in[s][k]));
    }
    return FL_OK;
}

int fl__op_layout_after(fl_kctx *c, int same)
{
    if (!same) return FL_OK;
    const fl_tensor *ref = NULL;
    for (int s = 0; s < FL_OP_MAX_SLOTS && !ref; s++)
        for (int k = 0; k < c->nin[s] && !ref; k++)
            if (c->in[s][k] && c->in[s][k]->data) ref = c->in[s][k];
    for (int s = 0; s < FL_OP_MAX_SLOTS; s++)
        for (int k = 0; k < c->nout[s]; k++) {
            fl_tensor *t = c->out[s][k];
            if (t && t->data && blocked_type(t->dtype) && !t->is_rows && ref && same_shape(t, ref))
                FL_CHECK(fl__tensor_set_layout(t, same));
        }
    return FL_OK;
}
