/*
 * ops_bn_bf16.h - batch_norm and fused_bn_add_activation under bfloat16 AMP: the dtype their
 * Y is written in (ops_bn.c, whose kernels write and read either dtype) and the program
 * rewrite that sets it and the dtype of their gradient's X@GRAD (amp_bn.c).
 */
#ifndef FL_OPS_BN_BF16_H
#define FL_OPS_BN_BF16_H

#include "graph_internal.h"

/* The dtype batch_norm / fused_bn_add_activation writes Y in: attribute out_dtype (float32
 * unless AMP's rewrite set bfloat16). */
fl_dtype fl__bn_out_dtype(const fl_op *op);

/* AMP (bfloat16, after the backward ops are appended): a batch_norm or
 * fused_bn_add_activation whose Y is read only through AMP's cast to bfloat16 (and as a later
 * block end's Z, and by its own gradient op) writes Y in bfloat16 itself and the cast op
 * goes; then a gradient op of either whose X@GRAD only bfloat16 convolutions' gradient ops read
 * writes X@GRAD in bfloat16 (attribute dx_dtype).  Returns the number of ops rewritten (both
 * kinds), or a negative status. */
int fl__amp_bn_bf16(fl_prog *p);

#endif
