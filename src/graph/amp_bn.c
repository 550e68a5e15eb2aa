/*
 * amp_bn.c - bfloat16 AMP: the normalisation in front of a convolution writes bfloat16.
 *
 * fl_amp_decorate casts a white op's float32 Input to bfloat16 with a cast op; in a residual
 * network that Input is the output Y of a batch_norm (with its fused relu) or of a block end
 * (fused_bn_add_activation, made by append_backward's fusion), so each step Y is written in
 * float32, read by the cast, and written again in bfloat16.  Here, once the backward ops
 * exist (amp_scaling.c's hook after backward), such a Y is written in bfloat16 by the
 * normalisation itself (attribute out_dtype, ops_bn.c's kernels in their bf16 form: the same rounded
 * values) and the cast op and its output go: the convolutions and their gradient ops read Y.
 * As oneDNN's and PyTorch's bf16 models do, the statistics and every gradient stay float32.
 *
 * The rewrite needs every reader of Y to take bfloat16: the cast itself, a later block end's
 * Z (the identity shortcut, then rounded to bf16 as PyTorch's autocast keeps it) and the
 * gradient op of the normalisation (the fused relu's mask).  A Y read by anything else (a
 * pool, a fetch target the program names, the fc head) keeps float32 and its cast.
 * FLEET_AMP_BN_BF16=0 turns the rewrite off; 2 rewrites the batch_norm ops only (the block
 * ends keep float32 and their cast: the convolutions then read the very bits the casts gave).
 *
 * The way back: the gradient op of such a normalisation writes X@GRAD, whose reader is the
 * gradient op of the convolution in front (its Output@GRAD); a convolution computing in
 * bfloat16 reads it in bfloat16, through oneDNN's reorder (dnn_conv.c, port "dy") before both
 * backward directions.  Where X@GRAD is read by nothing but such conv2d_grad ops (Input or
 * Filter bfloat16, no Bias@GRAD) and written by the gradient op alone, the gradient op writes
 * it in bfloat16 itself (attribute dx_dtype; rounded to nearest even as the reorder rounds, so
 * the convolutions read the very same bits) and the reorder goes, as PyTorch's autocast keeps
 * this gradient in bf16.  A fetch of X@GRAD then gets the bfloat16 values;
 * FLEET_AMP_BN_DX_BF16=0 keeps it float32 (FLEET_AMP_BN_BF16=0 turns both rewrites off).
 */
#include <string.h>

#include "ops_bn_bf16.h"

static int is_bn(const fl_op *op)
{
    return !strcmp(op->def->type, "batch_norm") || !strcmp(op->def->type, "fused_bn_add_activation");
}

/* Whether op may read v (in input slot s) in bfloat16, the cast `cast` aside. */
static int reader_ok(const fl_op *op, int s)
{
    const char *t = op->def->type;
    if (s != 5) return 0;
    if (!strcmp(t, "fused_bn_add_activation")) return op->role == FL_ROLE_FORWARD;      /* Z */
    return !strcmp(t, "batch_norm_grad") || !strcmp(t, "fused_bn_add_activation_grad"); /* Y, the relu's mask */
}

/* The normalisation writing v when every other access to v allows bfloat16, else NULL. */
static fl_op *bf16_writer(const fl_prog *p, const fl_op *cast, const fl_var *v)
{
    if (v->persistable || v->is_data || v->dtype != FL_FLOAT32) return NULL;
    fl_op *w = NULL;
    for (int i = 0; i < p->nops; i++) {
        fl_op *o = p->ops[i];
        if (o->cond == v) return NULL;
        for (int s = 0; s < FL_OP_MAX_SLOTS; s++) {
            for (int k = 0; k < o->out[s].n; k++)
                if (o->out[s].vars[k] == v) {
                    if (w || s != 0 || k != 0) return NULL;
                    w = o;
                }
            for (int k = 0; k < o->in[s].n; k++)
                if (o->in[s].vars[k] == v && o != cast && !reader_ok(o, s)) return NULL;
        }
    }
    if (!w || !is_bn(w) || w->cond || w->role != FL_ROLE_FORWARD || fl__bn_out_dtype(w) != FL_FLOAT32) return NULL;
    return w;
}

/* Whether the cast's output cv is written by the cast alone and is no persistable. */
static int cast_out_plain(const fl_prog *p, const fl_op *cast, const fl_var *cv)
{
    if (cv->persistable || cv->is_data) return 0;
    for (int i = 0; i < p->nops; i++) {
        const fl_op *o = p->ops[i];
        if (o->cond == cv) return 0;
        for (int s = 0; s < FL_OP_MAX_SLOTS; s++)
            for (int k = 0; k < o->out[s].n; k++)
                if (o->out[s].vars[k] == cv && o != cast) return 0;
    }
    return 1;
}

static int is_bn_grad(const fl_op *op)
{
    return !strcmp(op->def->type, "batch_norm_grad") || !strcmp(op->def->type, "fused_bn_add_activation_grad");
}

/* Whether op reads a variable in input slot s as the output gradient of a convolution
 * computing in bfloat16 (dnn_conv.c: Input or Filter bfloat16), with no bias gradient. */
static int bf16_conv_dy(const fl_op *op, int s)
{
    if (s != 2 || strcmp(op->def->type, "conv2d_grad") != 0 || op->cond || op->out[2].n) return 0;
    return (op->in[0].n && op->in[0].vars[0]->dtype == FL_BFLOAT16) ||
           (op->in[1].n && op->in[1].vars[0]->dtype == FL_BFLOAT16);
}

/* Whether v, output 0 of gradient op g, is read only as bfloat16 convolutions' output
 * gradient (at least one), written by g alone, and neither a persistable nor a condition. */
static int dx_bf16_ok(const fl_prog *p, const fl_op *g, const fl_var *v)
{
    if (v->persistable || v->is_data || v->dtype != FL_FLOAT32) return 0;
    int readers = 0;
    for (int i = 0; i < p->nops; i++) {
        const fl_op *o = p->ops[i];
        if (o->cond == v) return 0;
        for (int s = 0; s < FL_OP_MAX_SLOTS; s++) {
            for (int k = 0; k < o->out[s].n; k++)
                if (o->out[s].vars[k] == v && (o != g || s != 0 || k != 0)) return 0;
            for (int k = 0; k < o->in[s].n; k++)
                if (o->in[s].vars[k] == v) {
                    if (!bf16_conv_dy(o, s)) return 0;
                    readers++;
                }
        }
    }
    return readers > 0;
}

/* The gradient ops whose X@GRAD dx_bf16_ok allows write it in bfloat16; returns how many. */
static int amp_bn_dx_bf16(fl_prog *p)
{
    int64_t on = 1;
    FL_CHECK(fl__env_int("FLEET_AMP_BN_DX_BF16", 1, 0, 1, &on));
    if (!on) return 0;
    int done = 0;
    for (int i = 0; i < p->nops; i++) {
        fl_op *g = p->ops[i];
        if (!is_bn_grad(g) || g->cond || g->out[0].n != 1 || fl__attr_i(g, "dx_dtype", FL_FLOAT32) != FL_FLOAT32) continue;
        fl_var *v = g->out[0].vars[0];
        if (!dx_bf16_ok(p, g, v)) continue;
        FL_CHECK(fl__attr_set_i(g, "dx_dtype", FL_BFLOAT16));
        v->dtype = FL_BFLOAT16;
        done++;
    }
    if (done) {
        p->version++;
        FL_DEBUG(FL_SUB_GRAPH, "AMP: %d batch_norm_grad / fused_bn_add_activation_grad ops write X@GRAD in bfloat16", done);
    }
    return done;
}

int fl__amp_bn_bf16(fl_prog *p)
{
    int64_t on = 1;
    FL_CHECK(fl__env_int("FLEET_AMP_BN_BF16", 1, 0, 2, &on));
    if (!on) return 0;
    int done = 0;
    for (int i = 0; i < p->nops; i++) {
        fl_op *cast = p->ops[i];
        if (strcmp(cast->def->type, "cast") != 0 || cast->role != FL_ROLE_FORWARD || cast->cond) continue;
        fl_var *v = cast->in[0].vars[0], *cv = cast->out[0].vars[0];
        if (cv->dtype != FL_BFLOAT16 || fl__attr_i(cast, "out_dtype", FL_FLOAT32) != FL_BFLOAT16) continue;
        fl_op *w = bf16_writer(p, cast, v);
        if (!w || !cast_out_plain(p, cast, cv) || (on == 2 && strcmp(w->def->type, "batch_norm"))) continue;
        for (int q = 0; q < p->nops; q++) /* every reader of the copy reads Y */
            for (int s = 0; s < FL_OP_MAX_SLOTS; s++)
                for (int k = 0; k < p->ops[q]->in[s].n; k++)
                    if (p->ops[q]->in[s].vars[k] == cv) p->ops[q]->in[s].vars[k] = v;
        FL_CHECK(fl__attr_set_i(w, "out_dtype", FL_BFLOAT16));
        v->dtype = FL_BFLOAT16;
        fl__prog_remove_op(p, i);
        FL_CHECK(fl__prog_remove_var(p, cv));
        i--;
        done++;
    }
    if (done) {
        p->version++;
        FL_DEBUG(FL_SUB_GRAPH, "AMP: %d batch_norm / fused_bn_add_activation ops write bfloat16 (no cast after them)",
                 done);
    }
    const int dx = amp_bn_dx_bf16(p);
    return dx < 0 ? dx : done + dx;
}
