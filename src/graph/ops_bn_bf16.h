/*
 * ops_bn_bf16.h - batch_norm and fused_bn_add_activation with a bfloat16 Y (AMP): the kernels
 * (ops_bn_bf16.c) that ops_bn.c dispatches to, and the program rewrite that sets them up
 * (amp_bn.c).
 */
#ifndef FL_OPS_BN_BF16_H
#define FL_OPS_BN_BF16_H

#include "graph_internal.h"

/* The dtype batch_norm / fused_bn_add_activation writes Y in: attribute out_dtype (float32
 * unless AMP's rewrite set bfloat16). */
fl_dtype fl__bn_out_dtype(const fl_op *op);

/* Whether the forward kernel must be the one here: Y written in bfloat16, or a bfloat16 Z. */
int fl__bn_bf16_fwd_wanted(const fl_kctx *c);
int fl__run_batch_norm_bf16(fl_kctx *c);

/* Whether the gradient kernel must be the one here: Y (the fused relu's mask) is bfloat16. */
int fl__bn_bf16_grad_wanted(const fl_kctx *c);
int fl__run_batch_norm_grad_bf16(fl_kctx *c);

/* AMP (bfloat16, after the backward ops are appended): a batch_norm or
 * fused_bn_add_activation whose Y is read only through AMP's cast to bfloat16 (and as a later
 * block end's Z, and by its own gradient op) writes Y in bfloat16 itself and the cast op
 * goes.  Returns the number of ops rewritten, or a negative status. */
int fl__amp_bn_bf16(fl_prog *p);

#endif
