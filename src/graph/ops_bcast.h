/*
 * ops_bcast.h - two-way (NumPy) broadcasting of binary elementwise ops, shared between
 * ops_bcast.c (elementwise_max / min, the comparisons, the logical ops) and ops_nn.c
 * (elementwise_add / sub / mul / div, whose one-way Paddle 1.x layout stays the fast path).
 * Private to those files.
 */
#ifndef FL_OPS_BCAST_H
#define FL_OPS_BCAST_H

#include "graph_internal.h"

/* Paddle 2.x's rule (GetBroadcastDimsArrays): the operand of lower rank is placed at axis
 * of the other's dims (axis -1: aligned with the trailing dims; trailing 1s trimmed when it
 * would run past the end), then each dim pair must be equal or hold a 1, which broadcasts.
 * out: the result's dims; xst / yst: each operand's element strides over out's dims (0 on
 * a broadcast dim). */
typedef struct {
    int nd;
    int64_t out[FL_MAX_DIMS];
    int64_t xst[FL_MAX_DIMS], yst[FL_MAX_DIMS];
} fl__bcast;

/* 0 when x and y broadcast (b filled; b may be NULL), 1 for a bad axis, 2 for dims that
 * neither match nor hold a 1.  build = 1: unknown (-1) dims match anything (the output dim
 * is the known one, or -1). */
int fl__bcast_plan(const int64_t *xs, int xr, const int64_t *ys, int yr, int axis, int build, fl__bcast *b);

/* The kernels of the two-way case, by kind (FL_BC_*; ops_nn.c's order for the first four):
 * Out = f(X, Y) in Out's shape, float32 or (forward only) float64 operands of one dtype; the
 * float32 gradient op writes X@GRAD / Y@GRAD (slots 0, 1, either may be absent) summed over
 * the dims each operand was broadcast along. */
enum { FL_BC_ADD, FL_BC_SUB, FL_BC_MUL, FL_BC_DIV, FL_BC_MAX, FL_BC_MIN };
int fl__bcast_run(fl_kctx *c, int kind);
int fl__bcast_grad_f32(fl_kctx *c, int kind);

#endif
